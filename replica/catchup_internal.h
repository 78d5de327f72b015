/* catchup_internal.h -- catch-up of shards a node is not a member of: log pulls that never outrun the store, state transfer of tables, rebuild at open (replica/catchup.c; replica module only) */
#ifndef DXL_REPLICA_CATCHUP_INTERNAL_H
#define DXL_REPLICA_CATCHUP_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "dxl/membership.h"
#include "dxl/recovery.h"
#include "dxl/replica.h"
#include "replica/tables_internal.h"

/*
 * The rule this keeps (docs/recovery.md): a store holds the effects of
 * every record below its log's heads. A member keeps it by construction
 * (retention passes only applied records). A node catching up copies its
 * log from a member, heads included; so before a copy it marks its store
 * incomplete (recovery.h: DIR/store-<s>.incomplete), and after the copy it
 * clears the mark only if no ring's new head is past what its store had
 * applied. Otherwise records it never applied were reclaimed at the source
 * (retention, or a long absence): the store is missing data, and it takes
 * a state transfer -- the source's tables copied into a local checkpoint
 * with one-sided READs while the shard keeps committing, then installed
 * -- before it can say SYNCED. A node that finds the mark at start, or
 * finds its store empty while its log or a checkpoint says it held data
 * (the store file was lost), installs its newest checkpoint (received, or
 * its own periodic one) if its log still covers it, and otherwise
 * transfers again.
 *
 * While catching up, the node applies its copy of the log to its store
 * (each round, like a backup) and publishes what it still needs as the
 * consumer-group cursor "dxl-recovery-<node>" of the shard, so members'
 * retention by age keeps those records (retention by size still reclaims
 * them: then the next pass sees the gap and transfers).
 */
struct dxl_rcvm;

struct dxl_rcvm_cfg {
	const char *dir;     /* the data directory */
	const char *cluster;
	uint32_t node_id;
	enum dxl_durability durability;
	struct dxl_fabric *f;
	uint32_t xfer_ctx;   /* a free ctx index for the transfer thread */
	uint32_t nshards;
	struct dxl_shard *const *shards;
	struct dxl_tables *const *tables; /* entries may be NULL (no tables) */
	uint64_t checkpoint_ms; /* recovery.checkpoint_ms: a member writes a
				   checkpoint of each shard this often (0:
				   never) */
	uint64_t need_ttl_ms;   /* recovery.need_cursor_ttl_ms: a need
				   cursor of a node that is not live is
				   dropped after this long */
};

/*
 * dxl_rcvm_new -- the catch-up state of every hosted shard. A store found
 * marked incomplete is rebuilt from the newest complete checkpoint in dir
 * if the shard's log covers it (event=store_rebuilt), else stays marked
 * (event=store_incomplete: it transfers when it catches up).
 * Errors: DXL_E_NOMEM; install errors are logged, not returned.
 */
int dxl_rcvm_new(const struct dxl_rcvm_cfg *cfg, struct dxl_rcvm **out);
/* dxl_rcvm_delete -- waits for a transfer in progress; *m = NULL */
void dxl_rcvm_delete(struct dxl_rcvm **m);

/* the store of shard index i covers its log (not marked, no transfer) */
bool dxl_rcvm_store_ok(const struct dxl_rcvm *m, uint32_t i);
/* a transfer of shard index i is running: nothing else may touch its log
 * or store */
bool dxl_rcvm_busy(const struct dxl_rcvm *m, uint32_t i);

/*
 * dxl_rcvm_pass -- one catch-up pass of shard index i from the member
 * described by d, on pull_ctx (the loop's). live_mask: the shard's writer
 * slots held (the applier's resolved timestamp); zk: for the need cursor
 * (may be NULL). *changed: bytes the log copy changed. Returns 0 when the
 * log was copied and the store covers it; DXL_E_AGAIN while a transfer is
 * under way or was just started (try again later); other errors of the
 * pull (the source may be gone: try another).
 */
int dxl_rcvm_pass(struct dxl_rcvm *m, uint32_t i, struct dxl_ctx *pull_ctx,
		  const struct dxl_replica_desc *d, uint64_t live_mask,
		  struct dxl_zk *zk, uint64_t *changed);

/* dxl_rcvm_joined -- shard index i became a member: its need cursor goes */
void dxl_rcvm_joined(struct dxl_rcvm *m, uint32_t i, struct dxl_zk *zk);

/*
 * dxl_rcvm_tick -- the recovery work of shard index i that runs with
 * retention (the loop, which moves the heads): a member writes a
 * checkpoint of its store every checkpoint_ms (a thread; the start
 * position read here) and, once it is complete and its log still covers
 * it, publishes what the log must keep for it as the shard's consumer-
 * group cursor "dxl-ckpt-<node>" (retention by age keeps it, at every
 * member); a node that is no longer a member drops that cursor. On the
 * primary (primary true), every few seconds, the shard's cursors of
 * nodes that no longer need them go: "dxl-ckpt-<n>" of a node that is not
 * a member of the shard, "dxl-recovery-<n>" of a member, or of a node
 * that is not live and did not refresh it for need_ttl_ms
 * (event=need_cursor_dropped). may_start false: finish, never start.
 */
struct dxl_rcvm_tick {
	struct dxl_zk *zk;                      /* may be NULL */
	const struct dxl_cluster_config *conf;  /* the applied configuration */
	bool member, primary, may_start;
	uint64_t now_ms;                        /* dxl_now_ms() */
};
void dxl_rcvm_tick(struct dxl_rcvm *m, uint32_t i, const struct dxl_rcvm_tick *t);

/* What the node did (for tests and status lines). */
struct dxl_rcvm_stats {
	uint64_t passes;      /* log copies */
	uint64_t bytes_read;  /* by their READs */
	uint64_t gaps;        /* copies that found the source past the store */
	uint64_t transfers;   /* state transfers completed */
	uint64_t transfer_failures;
	uint64_t rebuilt;     /* stores rebuilt from a checkpoint at open */
	uint64_t last_transfer_ms;
	uint64_t last_transfer_entries;
	uint64_t checkpoints;        /* local checkpoints completed */
	uint64_t checkpoint_failures; /* failed, or dropped (log passed it) */
	uint64_t cursors_dropped;    /* stale cursors of others dropped */
};
void dxl_rcvm_stats(const struct dxl_rcvm *m, uint32_t i, struct dxl_rcvm_stats *out);

/*
 * dxl_rcvm_prune_decide -- which cursors of a shard's listing v[0..n) the
 * shard's primary drops (why[k] != NULL: the reason): a checkpoint cursor
 * dxl-ckpt-<node> of a node that is not a member; a need cursor
 * dxl-recovery-<node> of a member (it caught up), or of a node that is not
 * live and whose cursor this node has seen unchanged for ttl_ms
 * (dxl_rcv_watch_age on w, the monotonic now_ms: ZooKeeper's mtime is never
 * compared with this host's clock). age[k]: that time (need cursors).
 * Other groups are never dropped. w is swept: call with complete listings.
 */
struct dxl_rcvm_prune_in {
	uint32_t self;            /* this node */
	uint64_t ttl_ms;          /* recovery.need_cursor_ttl_ms */
	uint64_t now_ms;          /* dxl_now_ms() */
	const uint32_t *members;  /* the shard's members */
	uint32_t nmembers;
	const uint32_t *live;     /* the live nodes (nodes/) */
	uint32_t nlive;
};
void dxl_rcvm_prune_decide(struct dxl_rcv_watch *w, const struct dxl_rcvm_prune_in *in,
			   const struct dxl_cursor_info *v, uint32_t n, const char **why,
			   uint64_t *age);

/*
 * dxl_rcvm_cap_groups -- the consumer groups of listing v[0..n) that the
 * size cap passed (next_ts <= to_ts: they needed a reclaimed record) and
 * what that means for each, into buf: "group:what,..." with what =
 * transfer (dxl-recovery-<n>: node n, catching up, takes a state
 * transfer), no_rebuild (dxl-ckpt-<n>: node n's checkpoint no longer
 * rebuilds a lost store), stale (any other group: DXL_E_STALE). "none" if
 * none. Returns the number of dxl-recovery groups passed.
 */
uint32_t dxl_rcvm_cap_groups(const struct dxl_cursor_info *v, uint32_t n, uint64_t to_ts,
			     char *buf, size_t cap);
/*
 * dxl_rcvm_cap_passed -- the same for shard index i from ZooKeeper's
 * listing (buf "unknown" if it cannot be read); each node catching up
 * that the cap passed also gets its own line, event=retention_cap_transfer.
 */
void dxl_rcvm_cap_passed(struct dxl_rcvm *m, uint32_t i, struct dxl_zk *zk, uint64_t to_ts,
			 char *buf, size_t cap);

#endif /* DXL_REPLICA_CATCHUP_INTERNAL_H */
