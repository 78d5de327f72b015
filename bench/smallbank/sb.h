/* sb.h -- what the files of dxl-bench-smallbank share (SmallBank on dxl's transactions) */
#ifndef DXL_BENCH_SMALLBANK_SB_H
#define DXL_BENCH_SMALLBANK_SB_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/lib/smallbank.h"
#include "dxl/membership.h"
#include "dxl/txn.h"

/* ---- the checker's inputs and rules (check.c: no dxl calls, unit-tested) ---- */

/* table index of the arrays below: 0 = savings (DXLB_SB_SAVINGS), 1 = checking */
#define SB_NTABLES 2
static inline int sb_tix(uint32_t table)
{
	return table == DXLB_SB_SAVINGS ? 0 : table == DXLB_SB_CHECKING ? 1 : -1;
}
static inline uint32_t sb_table_of(int tix)
{
	return tix == 0 ? DXLB_SB_SAVINGS : DXLB_SB_CHECKING;
}

/* a transaction whose outcome is unknown (dxl_txn_info.maybe): it may or
 * may not have committed */
struct sb_maybe {
	int type;                          /* enum dxlb_sb_type */
	int64_t delta;                     /* its money delta if it committed */
	uint32_t nw;                       /* keys it writes */
	uint32_t table[DXLB_SB_MAX_KEYS];
	uint64_t acct[DXLB_SB_MAX_KEYS];
};

/* what a run recorded (the ledger file, minus its report fields) */
struct sb_ledger {
	uint64_t accounts;
	int64_t total_before;              /* money before the run */
	uint64_t *ver_before[SB_NTABLES];  /* [accounts] each: versions before */
	uint64_t committed;                /* committed transactions */
	int64_t sum_delta;                 /* their money deltas */
	uint32_t *writes[SB_NTABLES];      /* [accounts]: committed writes per key */
	size_t nmaybe;
	struct sb_maybe *maybe;
};

/* the state after the run: balances and versions of every key */
struct sb_state {
	uint64_t accounts;
	int64_t *bal[SB_NTABLES];
	uint64_t *ver[SB_NTABLES];
};

/* allocate the arrays of l / s for accounts (zeroed); free them */
int sb_ledger_alloc(struct sb_ledger *l, uint64_t accounts);
void sb_ledger_free(struct sb_ledger *l);
int sb_state_alloc(struct sb_state *s, uint64_t accounts);
void sb_state_free(struct sb_state *s);
/* the money in s */
int64_t sb_state_total(const struct sb_state *s);

/*
 * sb_check -- the checker's two rules on the ledger l of a run and the
 * state s read after it:
 *   money     the total of s == l->total_before + l->sum_delta + the deltas
 *             of the maybe-transactions that happened;
 *   writes    for every key: (version after - version before) / 2 ==
 *             committed writes to it + the writes of the maybe-transactions
 *             that happened (every write adds 2 to a record's version).
 * Which maybe-transactions happened is not known: the check passes if
 * SOME subset of them satisfies both rules at once (decided exactly up to
 * 24 undecided ones, after fixing those the versions decide alone; beyond
 * that each rule is checked with its own best case, and the verdict says
 * so). Writes msg (a one-line verdict without the "checker: " prefix) and
 * returns 0 (OK), 1 (FAILED) or a negative DXL_E_* (bad input).
 */
int sb_check(const struct sb_ledger *l, const struct sb_state *s, char *msg, size_t cap);

/* ---- the cluster, the coordinator, worker threads (env.c) ------------------- */

struct sb_cluster {
	char zk[DXL_ZK_CONNECT_MAX];
	char name[DXL_ZK_CLUSTER_MAX];
	uint32_t shards;
};

/* sb_cluster_read -- DIR/cluster.json (as 'dxl cluster up' writes it) */
int sb_cluster_read(const char *dir, struct sb_cluster *out);

struct sb_env {
	struct sb_cluster cl;
	struct dxl_zk *zk;
	struct dxl_coord *coord;
	enum dxl_txn_mode mode;
};

/* sb_loaded_accounts -- the accounts (and *init_balance) 'load' recorded in
 * DIR/smallbank.json; 0 if none */
uint64_t sb_loaded_accounts(const char *dir, int64_t *init_balance);

/* sb_env_open -- ZooKeeper session + coordinator in mode for the cluster of dir */
int sb_env_open(const char *dir, enum dxl_txn_mode mode, struct sb_env *e);
void sb_env_close(struct sb_env *e);

/* Every coroutine's argument starts with this; sb_run_threads fills it. */
struct sb_co {
	struct dxl_coord_worker *w;
	uint32_t thread, idx; /* thread number, coroutine number in it */
};

/*
 * sb_run_threads -- nthreads threads, each with a worker of ncoro
 * coroutines running fn(args + (thread * ncoro + i) * arg_size) (each
 * argument starts with a struct sb_co). If before_delete is not NULL it
 * is called once (on the calling thread) when every coroutine of every
 * thread has returned and before the workers are deleted (the moment to
 * read dxl_coord_stats). Returns 0 or the first error (with a message).
 */
int sb_run_threads(struct sb_env *e, uint32_t nthreads, uint32_t ncoro, void (*fn)(void *),
		   void *args, size_t arg_size, void (*before_delete)(void *), void *bd_arg);

/* ---- load and scan (scan.c) ------------------------------------------------- */

/*
 * sb_load -- insert savings and checking rows of accounts [0, accounts)
 * with init_balance, batch accounts per transaction (2 rows each). Rows
 * that exist are kept (counted in *existing). Returns 0 or an error.
 */
int sb_load(struct sb_env *e, uint64_t accounts, int64_t init_balance, uint32_t batch,
	    uint32_t threads, uint32_t coroutines, uint64_t *existing);

/*
 * sb_scan -- read every key of accounts [0, s->accounts) in read-only
 * transactions of at most 60 keys: balances and versions into s.
 */
int sb_scan(struct sb_env *e, struct sb_state *s, uint32_t threads, uint32_t coroutines);

/* ---- ledger file (ledger.c) -------------------------------------------------- */

/* sb_ledger_json -- l as JSON (versions_before, writes, maybe, sums) */
json_t *sb_ledger_json(const struct sb_ledger *l);
/* sb_ledger_load -- a ledger from its file into l (allocated) */
int sb_ledger_load(const char *path, struct sb_ledger *l, json_t **file);

/* ---- the subcommands -------------------------------------------------------- */
int sb_cmd_load(int argc, char **argv);
int sb_cmd_run(int argc, char **argv);
int sb_cmd_check(int argc, char **argv);

/* messages: "dxl-bench-smallbank: ..." on stderr */
void sb_errf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* DXL_BENCH_SMALLBANK_SB_H */
