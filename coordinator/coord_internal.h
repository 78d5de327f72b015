/* coord_internal.h -- what the coordinator's files share (coordinator module only) */
#ifndef DXL_COORDINATOR_COORD_INTERNAL_H
#define DXL_COORDINATOR_COORD_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "dxl/co.h"
#include "dxl/engine.h"
#include "dxl/replica.h"
#include "dxl/rpc.h"
#include "dxl/txn.h"

#define COORD_MAX_WORKERS 64
#define COORD_SCRATCH (64 * 1024) /* registered bytes per coroutine */

/* one table of one shard at its primary, as the view knows it */
struct view_table {
	struct dxl_shard_table st;  /* records, lock words, index (rkeys) */
	struct dxl_loccache *lc;    /* location cache of its index */
};

struct view_shard {
	bool ok;                    /* the primary is registered for the epoch */
	char why[160];              /* why not */
	uint32_t primary;
	enum dxl_durability durability; /* of the primary's store */
	char addr[DXL_FABRIC_ADDR_MAX];
	uint32_t rpc_ctx;
	uint32_t nrings;            /* of the shard's log */
	uint32_t ntables;
	struct view_table tables[DXL_REPLICA_MAX_TABLES];
};

/* What the coordinator knows of the cluster: one configuration epoch and
 * its primaries' descriptors. Immutable once published; replaced when a
 * transaction meets a sign of change. Reclaimed by reference counting: the
 * coordinator holds one reference to its current view, and everyone who
 * uses a view across a yield (a transaction from begin to its end, a
 * settle, a resolution) holds one, taken under the coordinator's mutex
 * (coord_view_get) so that a view is never freed between being read and
 * being referenced. The last coord_view_put of a view that is no longer
 * current frees it with its location caches. */
struct view {
	atomic_uint refs;
	uint64_t epoch;
	enum dxl_fabric_provider provider;
	bool provider_known;        /* some replica's descriptor named it */
	uint32_t nshards;
	struct view_shard *shards;  /* [nshards] */
};

struct dxl_coord {
	struct dxl_zk *zk;
	struct dxl_coord_cfg cfg;
	_Atomic uint32_t id;
	struct dxl_fabric *f;
	enum dxl_fabric_provider provider; /* f's (the replicas', at start) */
	pthread_mutex_t mu;         /* view publication and references, workers */
	struct view *view;          /* current (under mu); holds one reference */
	atomic_uint_fast64_t epoch; /* the current view's epoch (any thread) */
	atomic_int_fast64_t views_live; /* views allocated and not freed yet */
	atomic_uint_fast64_t refreshes;
	atomic_bool stale;          /* re-read the configuration at the next begin */
	atomic_uint_fast64_t last_refresh_ns;
	atomic_uint_fast64_t seq;   /* transaction sequence numbers */
	struct dxl_coord_worker *workers[COORD_MAX_WORKERS];
	uint32_t nworkers_made;
	/* the registration: a session that expired (a long pause) is reopened
	 * and the coordinator registers again under a new id; workers drop
	 * what belonged to the old one when inc changes (coord_session_check) */
	pthread_mutex_t reg_mu;
	uint64_t session_epoch;     /* dxl_zk_session_epoch when registered */
	atomic_uint_fast32_t inc;   /* registrations (1 = the first) */
	atomic_bool resolving;      /* one resolution at a time per process */
	atomic_uint_fast64_t last_sweep_ms;
	atomic_uint_fast64_t resolved; /* transactions resolved (stats) */
};

/*
 * The ordering rules of the one-sided phases, as data: lock_phase and
 * validate_phase post their READs in these orders on the primary's QP (a
 * QP executes them in the order posted), and the model test
 * (tests/unit/coordinator/test_validation_model.c) checks every
 * interleaving of transactions that follow them.
 *   L: the CAS of the lock word, then the READ of line 0 (the version under
 *      the lock);
 *   V: the READ of the lock word, then the READ of line 0: a record
 *      validates iff the lock word was 0 and the version is the one read at
 *      E. Read the other way round, a writer can lock, write back and
 *      unlock between the two READs (the version read is the old one, the
 *      lock word is free again): write skew and fractured reads.
 */
enum coord_step { COORD_STEP_LOCK = 0, COORD_STEP_VERSION = 1 };
extern const enum coord_step coord_lock_order[2];
extern const enum coord_step coord_validate_order[2];
/* V's verdict for one record: true = unchanged and not locked */
static inline bool coord_validates(uint64_t version_at_e, uint64_t version, uint64_t lock)
{
	return lock == 0 && version == version_at_e;
}

/* coord_session_check -- if the coordinator's session expired: reopen it,
 * register again (a new id), c->inc + 1. Returns 0 or the error (the
 * session could not be reopened: try again later) */
int coord_session_check(struct dxl_coord *c);

/* coord_view_get -- a reference to the current view (re-read first when it
 * was marked stale, at most every 2 ms); NULL if there is none. Every
 * reference is given back with coord_view_put. */
struct view *coord_view_get(struct dxl_coord *c);
void coord_view_put(struct dxl_coord *c, struct view *v);
/* read the configuration and descriptors now; publish a new view */
int coord_refresh(struct dxl_coord *c);
void coord_mark_stale(struct dxl_coord *c, const char *why);

/* resolve.c: the transactions of dead coordinators (docs/transactions.md) */
/* a lock word held by another transaction was met: remember its coordinator */
void coord_note_holder(struct dxl_coord_worker *w, uint64_t holder);
/* if a noted coordinator is gone: resolve every dead writer's ring and
 * release the gone coordinators' locks (from a coroutine of w) */
void coord_maybe_resolve(struct dxl_coord_worker *w);
/* coord_sweep -- every COORD_SWEEP_MS (one worker of the process at a
 * time): the coordinators holding lock words at each primary
 * (LOCK_OWNERS); the gone ones are resolved as if met (from a coroutine of
 * w, outside a transaction) */
#define COORD_SWEEP_MS 2000
void coord_sweep(struct dxl_coord_worker *w);

/* what resolve.c needs of txn.c: the worker's noted coordinators (up to
 * cap into ids; *last_ms: when it last checked them), forgetting them */
uint32_t coord_worker_suspects(struct dxl_coord_worker *w, uint32_t *ids, uint32_t cap,
			       uint64_t **last_ms);
void coord_worker_clear_suspects(struct dxl_coord_worker *w);
struct dxl_coord *coord_worker_coord(const struct dxl_coord_worker *w);
/* a resolution runs (on) or ended (off) in a coroutine of w: the QPs it may
 * use are not reclaimed meanwhile */
void coord_worker_resolving(struct dxl_coord_worker *w, bool on);
int coord_table_call(struct dxl_coord_worker *w, const struct view *v, uint32_t shard,
		     uint16_t op, struct dxl_table_req *req, struct dxl_table_rep *rep,
		     void *val, uint32_t cap);

#endif /* DXL_COORDINATOR_COORD_INTERNAL_H */
