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
 * its primaries' descriptors. Immutable once published; replaced (never
 * freed before the coordinator) when a transaction meets a sign of change. */
struct view {
	struct view *older;         /* the previous view (kept until the end) */
	uint64_t epoch;
	enum dxl_fabric_provider provider;
	uint32_t nshards;
	struct view_shard *shards;  /* [nshards] */
};

struct dxl_coord {
	struct dxl_zk *zk;
	struct dxl_coord_cfg cfg;
	uint32_t id;
	struct dxl_fabric *f;
	pthread_mutex_t mu;         /* view publication, workers */
	struct view *_Atomic view;
	atomic_bool stale;          /* re-read the configuration at the next begin */
	uint64_t last_refresh_ns;
	atomic_uint_fast64_t seq;   /* transaction sequence numbers */
	struct dxl_coord_worker *workers[COORD_MAX_WORKERS];
	uint32_t nworkers_made;
	atomic_bool resolving;      /* one resolution at a time per process */
	atomic_uint_fast64_t resolved; /* transactions resolved (stats) */
};

/* the view in use (a refresh happens at begin when stale) */
struct view *coord_view(struct dxl_coord *c);
/* read the configuration and descriptors now; publish a new view */
int coord_refresh(struct dxl_coord *c);
void coord_mark_stale(struct dxl_coord *c, const char *why);
void coord_views_free(struct dxl_coord *c);

/* resolve.c: the transactions of dead coordinators (docs/transactions.md) */
/* a lock word held by another transaction was met: remember its coordinator */
void coord_note_holder(struct dxl_coord_worker *w, uint64_t holder);
/* if a noted coordinator is gone: resolve every dead writer's ring and
 * release the gone coordinators' locks (from a coroutine of w) */
void coord_maybe_resolve(struct dxl_coord_worker *w);

/* what resolve.c needs of txn.c: the worker's noted coordinators (up to
 * cap into ids; *last_ms: when it last checked them), forgetting them */
uint32_t coord_worker_suspects(struct dxl_coord_worker *w, uint32_t *ids, uint32_t cap,
			       uint64_t **last_ms);
void coord_worker_clear_suspects(struct dxl_coord_worker *w);
struct dxl_coord *coord_worker_coord(const struct dxl_coord_worker *w);
int coord_table_call(struct dxl_coord_worker *w, const struct view *v, uint32_t shard,
		     uint16_t op, struct dxl_table_req *req, struct dxl_table_rep *rep,
		     void *val, uint32_t cap);

#endif /* DXL_COORDINATOR_COORD_INTERNAL_H */
