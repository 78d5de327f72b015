/* nemesis.h -- seeded faults over a local dxl cluster ('dxl cluster up'),
 * for randomized fault schedules (tests/integration/test_nemesis.c).
 *
 * A fault kind is a struct dxlt_fault: whether it may run now, and a run
 * function that injects the fault, waits, and undoes what needs undoing
 * (restarts a killed replica, resumes a stopped one) -- or leaves the
 * cluster changed on purpose (a backup kept down for later steps). Kinds
 * are pluggable: dxlt_nem_add adds one (built-in ones: dxlt_nem_add_builtin).
 * Every choice a kind makes comes from the rng it is given, so a schedule
 * is reproduced by its seed (timing is not).
 *
 * Like the rest of tests/lib: no cmocka; functions return 0 or a negative
 * DXL_E_* with dxl_errmsg() set, and the test asserts.
 */
#ifndef DXLT_NEMESIS_H
#define DXLT_NEMESIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dxlt_nem;

struct dxlt_fault {
	const char *name;
	unsigned weight; /* relative frequency (0: never chosen at random) */
	/* may it run now (NULL: always) */
	bool (*can)(const struct dxlt_nem *n);
	/* inject it (n->t_inject_ms := when), wait, undo; a line of what was
	 * done into desc. 0 or an error (the schedule fails). */
	int (*run)(struct dxlt_nem *n, uint64_t *rng, char *desc, size_t cap);
};

#define DXLT_NEM_MAX_KINDS 32

struct dxlt_nem {
	/* set by the test */
	char dxl[4096];          /* the dxl CLI */
	char dir[512];           /* the cluster's directory */
	char tmp[512];           /* scratch for the CLI's output */
	char zk[512];            /* ZooKeeper connect string */
	char cluster[64];
	uint32_t session_timeout_ms;
	uint32_t nshards;
	uint32_t nzk;            /* ZooKeeper servers (1-based kill/restart) */
	int (*zk_kill)(void *arg, int server);
	int (*zk_restart)(void *arg, int server);
	void *zk_arg;
	/* kill -9 one coordinator process and start another */
	int (*coord_kill)(void *arg, uint64_t *rng, char *desc, size_t cap);
	/* the same, the new process started with name=value in its
	 * environment (DXL_ZK_FAULTS, DXL_TESTPOINTS); NULL: the kinds that
	 * need it pick replicas only */
	int (*coord_kill_env)(void *arg, uint64_t *rng, const char *name, const char *value,
			      char *desc, size_t cap);
	void *coord_arg;
	/* kinds */
	struct dxlt_fault kinds[DXLT_NEM_MAX_KINDS];
	uint32_t nkinds;
	uint64_t applied[DXLT_NEM_MAX_KINDS]; /* runs per kind */
	/* state across steps */
	uint64_t t_inject_ms;    /* the last fault's injection (dxl_wall_ms) */
	uint32_t held;           /* a backup kept down (0: none) */
	uint32_t held_steps;     /* steps since it went down */
	uint32_t returned;       /* a held backup back, to be made primary */
	char *out, *err;         /* CLI output buffers (64 KiB each) */
	/* coverage of the reconfiguration kinds (dxlt_nem_add_reconfig) and
	 * of promote-returned, over every step so far */
	uint64_t joins_struck;   /* join-second-failure: the second failure
				    struck while the joiner said JOINING */
	uint64_t joins_missed;   /* ... the joiner was not seen joining */
	uint64_t crosswise;      /* crosswise-joins: each of two nodes
				    re-added to a shard the other leads */
	uint64_t parallel_joins; /* ... two nodes re-added to two shards with
				    one primary */
	uint64_t joins_one_epoch; /* ... both re-added by one epoch */
	uint64_t empty_new_id;   /* empty-dir restarts re-added under a new
				    data identity the configuration records */
	uint64_t promoted;       /* promote-returned: the returned node
				    became primary as the CM's rule says */
	uint64_t promote_skipped; /* ... could not be (the last reason in
				     promote_why) */
	char promote_why[256];
};

/* dxlt_nem_init -- zero n and allocate its buffers; the test then fills
 * the fields above */
int dxlt_nem_init(struct dxlt_nem *n);
void dxlt_nem_clear(struct dxlt_nem *n);
int dxlt_nem_add(struct dxlt_nem *n, const struct dxlt_fault *f);
/* the built-in kinds: replica kill -9 (primary, backup), SIGSTOP past the
 * session timeout (primary, backup), power failure (tcp), coordinator
 * kill, ZooKeeper server kill/restart, a backup held down for steps, its
 * return, and its promotion */
int dxlt_nem_add_builtin(struct dxlt_nem *n);
/* the reconfiguration kinds of issue 16 (tests/lib/faults.h): a restart
 * whose ZooKeeper replies are lost (zk-lost-reply: DXL_ZK_FAULTS), pauses at
 * test points (pause-points: DXL_TESTPOINTS sleeps), a restart on an empty
 * data directory (empty-dir-restart), two nodes re-added at once, crosswise
 * when the shards have different primaries (crosswise-joins), and a second
 * failure while a node is in its join pull (join-second-failure). Coverage:
 * the counters above; the injections fired are counted from the logs
 * (event=zk_fault_injected, event=testpoint_sleep). */
int dxlt_nem_add_reconfig(struct dxlt_nem *n);
/* lines holding needle in every replica log (DIR/logs/replica-*.log) */
uint64_t dxlt_nem_count_replica_logs(const struct dxlt_nem *n, const char *needle);
/* dxlt_nem_restart_env -- dxlt_nem_restart with name=value in the
 * restarted replica's environment */
int dxlt_nem_restart_env(struct dxlt_nem *n, uint32_t node, const char *name, const char *value);

/* only the kinds named in a comma-separated list keep their weight */
void dxlt_nem_only(struct dxlt_nem *n, const char *names);

/* dxlt_nem_step -- choose a kind that can run (weights, rng) and run it;
 * *kind = its index. DXL_E_STATE if none can run. */
int dxlt_nem_step(struct dxlt_nem *n, uint64_t *rng, int *kind, char *desc, size_t cap);
/* dxlt_nem_step_kind -- the same with the kind chosen by the caller (want
 * >= 0, when it can run now; else drawn as above): the rng is drawn from
 * exactly as in dxlt_nem_step, so a schedule replays with its kinds named
 * (DXL_NEMESIS_PLAN) */
int dxlt_nem_step_kind(struct dxlt_nem *n, uint64_t *rng, int want, int *kind, char *desc,
		       size_t cap);
/* the index of kind `name`, -1 if none */
int dxlt_nem_kind(const struct dxlt_nem *n, const char *name);
/* dxlt_nem_heal -- undo what is left (a held backup comes back) */
int dxlt_nem_heal(struct dxlt_nem *n, char *desc, size_t cap);

/* ---- the cluster, for kinds ----------------------------------------------------- */

/* run `dxl ARGS...` (NULL-terminated): its exit status (output in n->out/err) */
int dxlt_nem_dxl(struct dxlt_nem *n, int timeout_ms, const char *const *args);
/* shard's primary and backups now (backups up to cap) */
int dxlt_nem_members(struct dxlt_nem *n, uint32_t shard, uint32_t *primary,
		     uint32_t *backups, uint32_t cap, uint32_t *nbackups);
/* every shard has `want` members (primary + backups) within timeout_ms */
int dxlt_nem_wait_members(struct dxlt_nem *n, uint32_t want, int timeout_ms);
int dxlt_nem_kill(struct dxlt_nem *n, uint32_t node, const char *how); /* KILL STOP CONT power */
int dxlt_nem_restart(struct dxlt_nem *n, uint32_t node);
/* a uniform number in [0, m) */
uint64_t dxlt_nem_rand(uint64_t *rng, uint64_t m);

#endif
