/* tables_internal.h -- the engine's tables a replica node hosts and their RPC service (replica/tables.c; replica module only) */
#ifndef DXL_REPLICA_TABLES_INTERNAL_H
#define DXL_REPLICA_TABLES_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "dxl/engine.h"
#include "dxl/index.h"
#include "dxl/log.h"
#include "dxl/membership.h"
#include "dxl/replica.h"

/*
 * The tables of one hosted shard: the record store DIR/store-<s>.dat
 * (engine.h: slots in a persistent region, lock words in DRAM) and, per
 * table, a hash index (index.h) in DRAM that is rebuilt from the store's
 * live slots at open and kept in step with it by the store's hooks (insert,
 * remove: called under the table's mutex, which is what serializes the
 * index's writers). docs/replica.md "Tables".
 */
struct dxl_tables;

struct dxl_tables_cfg {
	const char *dir;               /* the data directory */
	const char *cluster;           /* the store's identity: */
	uint32_t node_id;              /*   checked at every open */
	uint32_t shard;
	enum dxl_durability durability;
	bool create;                   /* create the store if it is absent */
	enum dxl_lock_mode lock_mode;
	/* DXL_LOCKS_NIC: the node's lock agent (engine.h), through which the
	 * node's own lock-word changes go; it must outlive the tables */
	struct dxl_lock_agent *lock_agent;
	const struct dxl_table_schema *tables; /* engine.tables */
	uint32_t ntables;
};

/*
 * dxl_tables_open -- open DIR/store-<shard>.dat (or create it when absent
 * and cfg->create), check that it holds exactly the configured tables, and
 * build one index per table from the live slots. With ntables 0 there is
 * nothing to host: *out = NULL and 0, unless a store file exists (its
 * tables would silently disappear: DXL_E_CONFIG).
 * Errors: DXL_E_CONFIG (the file's tables or shard are not the configured
 * ones; nothing changed), dxl_store_open's (DXL_E_NOENT when absent and
 * !create, DXL_E_STALE, DXL_E_CORRUPT, ...), dxl_store_create's,
 * DXL_E_FULL (an index cannot hold the live keys), DXL_E_NOMEM.
 */
int dxl_tables_open(const struct dxl_tables_cfg *cfg, struct dxl_tables **out);

/* dxl_tables_set_log -- the shard's local log (read by the resolution RPCs:
 * TXN_STATUS, IN_DOUBT); it must outlive t */
void dxl_tables_set_log(struct dxl_tables *t, const struct dxl_logstore *ls);

/* dxl_tables_close -- deregister, free the indexes, close the store; *t = NULL */
void dxl_tables_close(struct dxl_tables **t);

/*
 * dxl_tables_register -- register the store (records, lock words) and every
 * index area (REMOTE_READ) with f: new rkeys. Errors: DXL_E_EXIST (already
 * registered), dxl_mr_reg's (nothing stays registered).
 */
int dxl_tables_register(struct dxl_tables *t, struct dxl_fabric *f);
/* dxl_tables_deregister -- remote accesses with the old rkeys fail from now on */
void dxl_tables_deregister(struct dxl_tables *t);

/* dxl_tables_describe -- fill sd->ntables and sd->tables (registered only).
 * Errors: DXL_E_STATE (not registered). */
int dxl_tables_describe(const struct dxl_tables *t, struct dxl_shard_desc *sd);

uint32_t dxl_tables_shard(const struct dxl_tables *t);
struct dxl_store *dxl_tables_store(const struct dxl_tables *t);
/* the index of table id, NULL if unknown */
struct dxl_index *dxl_tables_index(const struct dxl_tables *t, uint32_t table);

/*
 * The backup's applier (tables.c has the rules): apply the decided write
 * sets of the local log ls of this shard to the store, at most max_records
 * of them. live_mask: bit r = ring r's writer holds its writer slot. The
 * first call after dxl_tables_apply_stop (or ever) replays the window from
 * the heads first. Only for a member that is not the primary (the
 * primary's store is written by its coordinators). Caller: the service
 * loop, one thread. Returns the records passed (applied or not write sets),
 * or the error that stopped it (retried next call; logged every 10 s).
 */
struct dxl_tables_apply_stats {
	uint64_t records;  /* log records passed */
	uint64_t entries;  /* write-set entries in them */
	uint64_t applied;  /* entries written (replay at activation included) */
	uint64_t skipped;  /* entries already applied (version) */
	uint64_t foreign;  /* records that are not write sets */
	uint64_t corrupt;  /* write sets that failed decoding: passed over */
	uint64_t aborted;  /* write sets an abort marker cancels: passed over */
	uint64_t last_ts;  /* commit timestamp of the last record passed */
	uint64_t resolved; /* the resolved timestamp of the last call */
	uint64_t markers;  /* abort markers held (their records not passed yet,
			      or not compacted yet): never dropped */
};
int dxl_tables_apply(struct dxl_tables *t, const struct dxl_logstore *ls,
		     uint64_t live_mask, uint32_t max_records);
/*
 * dxl_tables_clear_locks -- every lock word of t's tables set is released
 * (a CAS word -> 0): a node that is no longer the primary (or that is
 * promoted again) keeps the words of its earlier primaryship in DRAM when
 * it was only paused, not restarted -- they mean nothing any more (the
 * transactions went on at the next primary; what is undecided gets its
 * lock again from dxl_tables_recover_locks), but a one-sided reader (state
 * transfer, dxl cluster verify) takes them for records being written, and
 * as a primary again the keys would stay locked by transactions that are
 * over. Returns the words released. Not while t serves.
 */
int dxl_tables_clear_locks(struct dxl_tables *t);
/*
 * dxl_tables_recover_locks -- a promoted primary, before it serves: every
 * write set in its log above its ring's watermark (a transaction not
 * decided yet: its coordinator will write it back or abort it) and not
 * cancelled by an abort marker gets, for each key it writes that the store
 * holds, the lock word = the record's txn id (what its coordinator's locks
 * at the old primary said). Call after applying everything decided
 * (dxl_tables_apply with live_mask 0). Returns the number of records in
 * doubt; *nlocks (may be NULL) the lock words set. Errors: as the applier.
 */
int dxl_tables_recover_locks(struct dxl_tables *t, const struct dxl_logstore *ls,
			     uint32_t *nlocks);

/* not a backup any more (primary, catching up, left): forget the positions */
void dxl_tables_apply_stop(struct dxl_tables *t);
/* dxl_tables_reclaim -- (a member of the shard, primary or backup) let the
 * store reuse the slots of tombstones older than the oldest record the
 * local log still holds (docs/engine.md "Tombstones"); at most every 100 ms */
void dxl_tables_reclaim(struct dxl_tables *t, const struct dxl_logstore *ls);
bool dxl_tables_applying(const struct dxl_tables *t);
/*
 * dxl_tables_applied_pos -- retention keeps the record at this position of
 * ring and everything after it: on a backup the next record to apply; on
 * the primary (not applying) the first record whose effects are not yet
 * durable in the store (a committed write-back not done, or done and not
 * flushed: its lock word is still the transaction's; docs/engine.md "When
 * a write-back is durable"). UINT64_MAX for a shard without tables. The
 * retention thread only.
 */
uint64_t dxl_tables_applied_pos(struct dxl_tables *t, uint32_t ring);
void dxl_tables_apply_stats(const struct dxl_tables *t,
			    struct dxl_tables_apply_stats *out);

/*
 * dxl_tables_serve -- one table operation (DXL_RPC_ID_TABLE_*, request r)
 * on t as the table service serves it for a primary, without the service's
 * checks (epoch, lease, promotion gate): rep filled, a value into
 * val[0..vcap). The service's handlers call it; tests call it directly.
 * Returns 0 or the operation's negative DXL_E_*.
 */
int dxl_tables_serve(struct dxl_tables *t, uint16_t op, const struct dxl_table_req *r,
		     struct dxl_table_rep *rep, uint8_t *val, uint32_t vcap);

/* dxl_tables_set_retain_warn_ms -- a decided record that holds the
 * primary's retention this long (default 10 s) is logged as
 * event=retention_blocked (ring, seq, txn and the entry whose write-back is
 * not durable), again every 10 s while it lasts; tests shorten it */
void dxl_tables_set_retain_warn_ms(struct dxl_tables *t, uint32_t ms);

/* dxl_tables_set_resolve_hook -- testing only: fn(arg, table, slot) is
 * called by RESOLVE after it applied an entry and before it releases the
 * transaction's lock (a test changes the lock word there) */
void dxl_tables_set_resolve_hook(struct dxl_tables *t,
				 void (*fn)(void *arg, uint32_t table, uint64_t slot),
				 void *arg);

/*
 * The table RPC service of a node: one thread with its own scheduler, RPC
 * endpoint and fabric ctx (DXL_REPLICA_RPC_CTX), serving the handlers of
 * replica.h ("Table RPCs") for the shards this node is the primary of in
 * the configuration it has applied, while it is serving (lease valid,
 * regions registered).
 */
struct dxl_table_svc;

/*
 * dxl_table_svc_start -- start the thread and wait until it serves. t[i]
 * are the tables of the hosted shards (n of them; entries may be NULL for
 * shards without tables); they must outlive the service. It starts with no
 * configuration (epoch 0: every request is refused) and not serving.
 * Errors: dxl_ctx_new's, dxl_sched_new's, dxl_rpc_new's, DXL_E_NOMEM.
 */
int dxl_table_svc_start(struct dxl_fabric *f, uint32_t node_id,
			struct dxl_tables *const *t, uint32_t n,
			struct dxl_table_svc **out);

/* dxl_table_svc_stop -- stop and join the thread, free everything; *svc = NULL */
void dxl_table_svc_stop(struct dxl_table_svc **svc);

/*
 * dxl_table_svc_set_lease -- where the node's lease ends: fn(arg) returns the
 * dxl_boot_ns() instant (dxl_zk_lease_until_ns), 0 when there is no valid
 * lease. A handler checks it before it serves a request and again before
 * it replies: a request served, or a reply sent, after the lease ran out
 * (a process resumed after a pause, a guard thread held up) is refused
 * with DXL_E_UNAVAIL -- the serving flag alone is only set every service
 * round. Until it is set every request is refused. Any thread.
 */
void dxl_table_svc_set_lease(struct dxl_table_svc *svc, uint64_t (*fn)(void *arg),
			     void *arg);

/*
 * dxl_table_svc_set_config -- the configuration the node applied (epoch
 * and primaries); requests of other epochs are refused (DXL_E_STALE) from
 * now on. Waits for a request being served to finish, so no request of
 * the old epoch changes anything after this returns. Any thread.
 */
void dxl_table_svc_set_config(struct dxl_table_svc *svc,
			      const struct dxl_cluster_config *c);

/* dxl_table_svc_set_gated -- while true, requests for shard are refused
 * (DXL_E_UNAVAIL: a promoted primary applying its log). Any thread. */
void dxl_table_svc_set_gated(struct dxl_table_svc *svc, uint32_t shard, bool gated);

/* dxl_table_svc_settle -- the transactions in doubt when a promotion gate
 * opened (dxl_tables_recover_locks) that are decided now (their ring's
 * watermark passed them) are finished at this primary where they still
 * hold their locks: committed ones applied, aborted ones' inserts deleted,
 * locks released (docs/replica.md "The promotion gate") */
void dxl_table_svc_settle(struct dxl_table_svc *svc);

/* dxl_table_svc_set_serving -- false: every request is refused
 * (DXL_E_UNAVAIL) from the moment this returns. Any thread. */
void dxl_table_svc_set_serving(struct dxl_table_svc *svc, bool serving);

#endif /* DXL_REPLICA_TABLES_INTERNAL_H */
