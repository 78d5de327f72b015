/* txn.h -- serializable multi-shard transactions through a coordinator
 * (hybrid OCC after DrTM+H; docs/transactions.md) */
#ifndef DXL_TXN_H
#define DXL_TXN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dxl/co.h"
#include "dxl/engine.h"
#include "dxl/membership.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A coordinator (struct dxl_coord, one per process) runs transactions on
 * the tables that the cluster's dxl-replica nodes host (engine.tables;
 * every shard holds every table, a key lives in shard
 * dxl_txn_shard_of(key, nshards)). Worker threads (struct
 * dxl_coord_worker, one per thread) each run a scheduler of coroutines
 * (co.h); a transaction runs inside one coroutine and yields at every
 * round trip, so a worker keeps many transactions in flight.
 *
 * A transaction, in the phases of DrTM+H (docs/transactions.md):
 *   E  dxl_txn_get reads a record at the shard's primary; dxl_txn_put,
 *      _insert and _delete buffer writes (a put or delete of a key not read
 *      yet reads it first: its slot and version are needed).
 *   L  dxl_txn_commit locks every written record (lock word := the
 *      transaction's owner id) and reads its version in the same round
 *      trip; a held lock or a changed version aborts.
 *   V  every record only read is read again: its version must be unchanged
 *      and its lock free.
 *   Log  the write set of each written shard is appended through the
 *      replicated log to every member of that shard (one round trip, all
 *      shards in parallel). COMMIT POINT: every append acknowledged.
 *   C  write back and unlock at the primaries.
 * A read-only transaction stops after V (nothing is logged).
 *
 * The primitive of each phase is chosen by the mode (struct
 * dxl_coord_cfg.mode): one-sided RDMA verbs (READ, CAS, WRITE) or RPCs to
 * the primary's CPU. Who may change lock words is fixed by the
 * deployment (engine.lock_mode): NIC-owned lock words need a mode whose L
 * phase is one-sided (hybrid, one-sided), CPU-owned ones the two-sided
 * mode; a mismatch is DXL_E_CONFIG at the first transaction.
 *
 * Errors of the transaction calls (negative DXL_E_*, dxl_errmsg() says
 * what and where):
 *   DXL_E_CONFLICT  aborted by a conflict (lock held, version changed):
 *                   nothing of it happened; run it again (dxl_txn_run does,
 *                   max_tries times)
 *   DXL_E_UNAVAIL   a shard has no serving primary, its configuration is
 *                   changing (a promotion gate, a dead or fenced member, a
 *                   stale epoch) or its log cannot be written: nothing
 *                   happened, except with *maybe (below); retry later
 *                   (dxl_txn_run does, for coord.log_unavail_ms)
 *   DXL_E_NOENT     no such key (get, put, delete), nothing changed
 *   DXL_E_EXIST     insert of a key that exists
 *   DXL_E_INVAL     bad request: unknown table, NULL buffer, too many
 *                   operations, an operation after the end
 *   DXL_E_TOOBIG    value over the table's value size, or over the caller's
 *                   buffer (get)
 * After any error but DXL_E_NOENT/DXL_E_EXIST/DXL_E_TOOBIG from get, put,
 * insert or delete the transaction is over (aborted, locks released): only
 * dxl_txn_abort (a no-op then) or a new dxl_txn_begin may follow.
 */

/* dxl_txn_shard_of -- the shard holding key among nshards (key mod n) */
static inline uint32_t dxl_txn_shard_of(uint64_t key, uint32_t nshards)
{
	return nshards ? (uint32_t)(key % nshards) : 0;
}

enum dxl_txn_mode {
	/* DrTM+H's choice: E one-sided READ on a location-cache hit, RPC
	 * lookup on a miss (refilling the cache); L CAS + READ; V READ; Log
	 * one-sided; C one-sided WRITEs where the provider orders them (tcp),
	 * else RPC write-back. NIC-owned lock words. */
	DXL_TXN_HYBRID = 0,
	/* every phase one-sided: E resolves the index with bucket READs on a
	 * cache miss (no RPC); C one-sided where allowed (as hybrid). Inserts
	 * and deletes still go through the owner's CPU (DrTM). NIC locks. */
	DXL_TXN_ONESIDED = 1,
	/* every phase by RPC to the primary's CPU (FaSST-like). CPU-owned
	 * lock words (engine.lock_mode=cpu). The log stays one-sided. */
	DXL_TXN_TWOSIDED = 2,
};
const char *dxl_txn_mode_name(enum dxl_txn_mode m);
/* "hybrid" | "onesided" | "twosided"; DXL_E_INVAL otherwise */
int dxl_txn_mode_parse(const char *s, enum dxl_txn_mode *out);

#define DXL_TXN_MAX_OPS 64 /* records a transaction may read or write */

struct dxl_coord_cfg {
	uint32_t coord_id;        /* 1..DXL_COORD_MAX_ID; 0 = the first free
				     coords/<id> (default 0) */
	enum dxl_txn_mode mode;   /* default DXL_TXN_HYBRID */
	size_t loccache_bytes;    /* location cache per shard and table
				     (default 1 MiB) */
	uint32_t log_unavail_ms;  /* a shard's log unwritable this long:
				     DXL_E_UNAVAIL (default 10000) */
	uint32_t fabric_timeout_ms; /* dead-primary detection (default 1000) */
	char bind[64];            /* fabric address, "127.0.0.1:0" by default
				     (the provider is the primaries'; with
				     verbs a loopback bind becomes the local
				     address that reaches them:
				     dxl_fabric_cfg_client) */
	char info[256];           /* the data of coords/<id> (e.g. a JSON object
				     with the address a dxl-coord serves on);
				     default "" */
	/* testing only: skip the V phase (to show that the serializability
	 * checker catches it). Default false. */
	bool no_validation;
	/* the wall clock of its commit timestamps (ms since the Unix epoch);
	 * NULL (default): the system's. Testing: a coordinator on a host whose
	 * clock is behind (docs/transactions.md "Commit timestamps"). */
	uint64_t (*wall_ms)(void);
	/* testing only: no FENCE after the one-sided validation READs (to
	 * show that a paused old primary then serves stale reads). Default
	 * false. */
	bool no_fence;
	/* testing only: called in the transaction's coroutine at the points of
	 * enum dxl_txn_hook (it may block, yield or sleep: a test pauses a
	 * transaction there to inject a fault). Default NULL. */
	void (*test_hook)(int where, uint64_t txn_id, void *arg);
	void *test_hook_arg;
	/* testing only: the next N one-sided unlock CASes fail before they
	 * are posted, as on a QP in the error state (a transport error, not
	 * a refusal of the lock's owner). Default 0. */
	uint32_t test_unlock_post_fail;
};

/* where dxl_coord_cfg.test_hook is called */
enum dxl_txn_hook {
	DXL_TXN_HOOK_VALIDATE = 1, /* after L (every write locked), before V */
	DXL_TXN_HOOK_LOGGED = 2,   /* every log record acknowledged (the commit
				      point), before it is decided and written
				      back */
};
#define DXL_COORD_MAX_ID 65535 /* DXL_LOCK_OWNER keeps 16 bits of it */
void dxl_coord_cfg_init(struct dxl_coord_cfg *cfg);

struct dxl_coord;
struct dxl_coord_worker;
struct dxl_txn;

/*
 * dxl_coord_new -- a coordinator of the cluster of session zk (borrowed;
 * it must outlive the coordinator): registers coords/<id> (ephemeral: the
 * session is the coordinator's lease), reads the configuration and opens
 * its fabric (the primaries' provider). The tables are learned from the primaries' descriptors.
 * The provider is named by the replicas' descriptors: while no replica of
 * the configuration is registered (a cluster starting) it waits for one, up
 * to cfg->log_unavail_ms. A replica that later serves another provider is
 * reported unreachable ("restart it"), never tried with the wrong one.
 * Errors: DXL_E_INVAL (bad cfg), DXL_E_EXIST (coords/<id> is taken),
 * DXL_E_UNAVAIL (no configuration, or no replica registered in time),
 * fabric and ZooKeeper errors.
 */
int dxl_coord_new(struct dxl_zk *zk, const struct dxl_coord_cfg *cfg,
		  struct dxl_coord **out);
/* dxl_coord_delete -- every worker must be deleted first; *c = NULL */
void dxl_coord_delete(struct dxl_coord **c);
uint32_t dxl_coord_id(const struct dxl_coord *c);
enum dxl_txn_mode dxl_coord_mode(const struct dxl_coord *c);
/* the configuration epoch the coordinator works with now */
uint64_t dxl_coord_epoch(const struct dxl_coord *c);

/*
 * dxl_coord_worker_new -- the calling thread's worker: a scheduler with
 * ncoroutines slots (1..256), a fabric ctx with QPs to the primaries
 * (connected on first use), and a log writer per shard it writes (opened
 * on first use; each holds a writer slot of its shard). At most 64 workers
 * per coordinator. Errors: DXL_E_INVAL, DXL_E_FULL (64 workers),
 * DXL_E_NOMEM, fabric errors.
 */
int dxl_coord_worker_new(struct dxl_coord *c, uint32_t ncoroutines,
			 struct dxl_coord_worker **out);
/* dxl_coord_worker_delete -- from its thread, with no coroutine running */
void dxl_coord_worker_delete(struct dxl_coord_worker **w);
/* dxl_coord_worker_spawn -- start fn(arg) in a free coroutine slot.
 * Errors: DXL_E_FULL (every slot busy), DXL_E_INVAL. */
int dxl_coord_worker_spawn(struct dxl_coord_worker *w, dxl_co_fn fn, void *arg);
/* dxl_coord_worker_run -- run the coroutines until every one returned.
 * Returns 0 or the scheduler's error. */
int dxl_coord_worker_run(struct dxl_coord_worker *w);
/* dxl_coord_worker_poll -- make the worker's log writers progress (results,
 * idle watermark heartbeats) without running coroutines: call it every few
 * ms from a loop that has no transaction to run (dxl-coord's dispatcher).
 * Transactions do it themselves while they run. */
void dxl_coord_worker_poll(struct dxl_coord_worker *w);
/* dxl_coord_worker_writebacks_pending -- committed write-backs that failed
 * at their primary and that the worker still has to finish (queued settles:
 * tried at each dxl_txn_begin and dxl_coord_worker_poll;
 * docs/transactions.md "Write-backs that keep failing") */
uint32_t dxl_coord_worker_writebacks_pending(const struct dxl_coord_worker *w);
/* the worker of the calling thread (NULL if none) */
struct dxl_coord_worker *dxl_coord_worker_self(void);

/* ---- one transaction (inside a coroutine of a worker) -------------------------- */

/*
 * dxl_txn_begin -- start a transaction in the calling coroutine (one at a
 * time per coroutine; an unfinished one is aborted first). The handle
 * stays valid until the next begin in this coroutine, so the footprint
 * (dxl_txn_footprint) can be read after the commit.
 * Errors: DXL_E_STATE (not in a coroutine of a worker), DXL_E_NOMEM.
 */
int dxl_txn_begin(struct dxl_coord_worker *w, struct dxl_txn **out);

/* dxl_txn_last -- the handle of the calling coroutine's last transaction
 * (e.g. the one dxl_txn_run committed), NULL if none */
struct dxl_txn *dxl_txn_last(struct dxl_coord_worker *w);

/* dxl_txn_get -- the value of key (the transaction's own write if any)
 * into buf[0..cap), its length in *len */
int dxl_txn_get(struct dxl_txn *t, uint32_t table, uint64_t key, void *buf,
		uint32_t cap, uint32_t *len);
/* dxl_txn_put -- set the value of an existing key (DXL_E_NOENT if absent) */
int dxl_txn_put(struct dxl_txn *t, uint32_t table, uint64_t key,
		const void *value, uint32_t len);
/* dxl_txn_insert -- create key (DXL_E_EXIST if present) */
int dxl_txn_insert(struct dxl_txn *t, uint32_t table, uint64_t key,
		   const void *value, uint32_t len);
/* dxl_txn_delete -- remove key (DXL_E_NOENT if absent) */
int dxl_txn_delete(struct dxl_txn *t, uint32_t table, uint64_t key);

/* what a finished transaction did */
struct dxl_txn_info {
	uint64_t id;         /* the owner id its locks carried and its log
				records' txn id: DXL_LOCK_OWNER(coord, seq) */
	uint64_t commit_ts;  /* largest commit timestamp of its log records
				(0: read-only) */
	uint32_t nreads, nwrites, nshards; /* shards written */
	uint32_t attempts;   /* dxl_txn_run: runs it took */
	bool maybe;          /* DXL_E_UNAVAIL after some log record was sent:
				the outcome is unknown (it may have committed) */
};

/*
 * dxl_txn_commit -- run L, V, Log and C. 0 = committed (durable on every
 * member of every written shard). info may be NULL.
 */
int dxl_txn_commit(struct dxl_txn *t, struct dxl_txn_info *info);
/* dxl_txn_abort -- release what it holds; nothing of it happens */
void dxl_txn_abort(struct dxl_txn *t);
/*
 * dxl_txn_validate -- what t read so far (values, and existence answers:
 * DXL_E_EXIST / DXL_E_NOENT of get, put, insert, delete) is still true
 * now: 0 (t goes on), or DXL_E_CONFLICT (t is aborted: run it again). An
 * answer of an uncommitted transaction is never validated. dxl_txn_commit
 * validates everything read; call this to act on an answer without
 * committing. dxl_txn_run does when fn returns DXL_E_EXIST or DXL_E_NOENT.
 */
int dxl_txn_validate(struct dxl_txn *t);

/* one record a committed transaction read or wrote (for checkers):
 * version = the version read (reads) or produced (writes: a delete's is
 * its tombstone's). A read is a value read or an existence answer (put,
 * insert, delete consult it too); absent: the key was not there, version
 * = its tombstone's (the delete it read the result of; 0: none), or for
 * the absence an insert replaced, one below the version its record got
 * under the lock (the last write at or below it is what it replaced) */
struct dxl_txn_access {
	uint32_t table;
	bool write;
	bool absent;       /* reads */
	enum dxl_ws_op op; /* writes */
	uint64_t key;
	uint64_t version;
};
/* dxl_txn_footprint -- the reads and writes of t (after commit): fills
 * out[0..cap), returns the count */
int dxl_txn_footprint(const struct dxl_txn *t, struct dxl_txn_access *out,
		      uint32_t cap);

/*
 * dxl_txn_run -- begin, fn, commit; on DXL_E_CONFLICT (from fn or commit)
 * run it again after a short randomized backoff, at most max_tries times
 * (0 = 1000); on DXL_E_UNAVAIL without maybe (a changing configuration)
 * run it again after 0..80 ms until log_unavail_ms have passed, whatever
 * max_tries says -- and conflicts after it too (a promoted primary's
 * records locked until settled), as after meeting another coordinator's
 * lock. fn returns 0 to commit, a negative code to abort with it;
 * DXL_E_EXIST and DXL_E_NOENT are returned only once validated
 * (dxl_txn_validate; else the attempt is a conflict).
 * Returns 0 or the last error; info (may be NULL) describes the last run.
 */
typedef int (*dxl_txn_fn)(struct dxl_txn *t, void *arg);
int dxl_txn_run(struct dxl_coord_worker *w, dxl_txn_fn fn, void *arg,
		uint32_t max_tries, struct dxl_txn_info *info);

struct dxl_coord_stats {
	uint64_t committed, aborted, conflicts, unavail;
	uint64_t onesided_reads, rpc_reads; /* E phase */
	uint64_t cache_hits, cache_misses;
	uint64_t log_appends;
	uint64_t view_refreshes;            /* configuration re-reads */
	uint64_t views_live;                /* views in memory (the current one
					       and those still in use) */
	uint64_t resolved;                  /* dead coordinators' transactions
					       this process resolved */
	/* broken invariants: a one-sided write-back whose unlock CAS found
	 * the lock word not the transaction's (its WRITEs overwrote a
	 * record another holder may own); each also logged at error level
	 * (event=invariant_violation). Always 0 unless a lock was freed
	 * under its holder. */
	uint64_t wb_lock_lost;
};
/* dxl_coord_stats -- the sum over the workers (any thread) */
void dxl_coord_stats(const struct dxl_coord *c, struct dxl_coord_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* DXL_TXN_H */
