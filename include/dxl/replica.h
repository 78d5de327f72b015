/* replica.h -- dxl's replica module: the log shards a replica node hosts,
 * their published descriptors, and the replica server (dxl-replica) */
#ifndef DXL_REPLICA_H
#define DXL_REPLICA_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dxl/err.h"
#include "dxl/fabric.h"
#include "dxl/log.h"
#include "dxl/membership.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== shards: one log region per hosted shard ============================ */

/*
 * A replica node hosts, per shard s, the log region DIR/shard-<s>.log (kind
 * DXL_REGION_LOG) with nrings rings (one per writer slot; docs/
 * replica-design.md). Its data area is registered with the fabric
 * (REMOTE_READ | REMOTE_WRITE | REMOTE_ATOMIC | PERSISTENT) and bound with
 * dxl_region_bind_mr, so remote flush READs make writes durable the way the
 * region's durability mode says.
 */
#define DXL_SHARD_MAX_RINGS DXL_RING_MAX

struct dxl_shard_cfg {
	char cluster[DXL_CLUSTER_NAME_MAX]; /* the region's identity: */
	uint32_t node_id;                   /* checked at every open */
	uint32_t shard;
	uint32_t nrings;    /* used when creating; 1..DXL_SHARD_MAX_RINGS */
	uint64_t ring_size; /* used when creating; multiple of 4096, >= 8192 */
	enum dxl_durability durability;
	bool create; /* create and format the region if it does not exist */
};

struct dxl_shard;

/*
 * dxl_shard_open -- open DIR/shard-<cfg.shard>.log, or (cfg.create) create
 * and format it if absent; then, if f != NULL, register its data area with f
 * and bind it. An existing region keeps its own geometry (nrings, ring_size
 * from its log header); a different cfg geometry is only logged.
 * Errors: DXL_E_NOENT (absent and !create), the errors of dxl_region_open /
 * dxl_region_create (DXL_E_STALE: another cluster/node; DXL_E_CONFIG:
 * another durability; DXL_E_CORRUPT ...), DXL_E_CORRUPT (log header; or the
 * region holds another shard), DXL_E_INVAL, and dxl_mr_reg's errors.
 * Nothing is left open on error.
 */
int dxl_shard_open(const char *dir, const struct dxl_shard_cfg *cfg,
		   struct dxl_fabric *f, struct dxl_shard **out);

/* dxl_shard_close -- deregister (if registered), close; *s = NULL */
void dxl_shard_close(struct dxl_shard **s);

/*
 * dxl_shard_register -- register the data area with f (again): a new rkey.
 * Errors: DXL_E_EXIST (already registered), dxl_mr_reg's errors.
 */
int dxl_shard_register(struct dxl_shard *s, struct dxl_fabric *f);

/* dxl_shard_deregister -- stop serving: from now on remote accesses with
 * the old rkey fail with a remote access error. No-op if not registered. */
void dxl_shard_deregister(struct dxl_shard *s);

bool dxl_shard_registered(const struct dxl_shard *s);
uint32_t dxl_shard_id(const struct dxl_shard *s);
struct dxl_logstore *dxl_shard_logstore(const struct dxl_shard *s);
struct dxl_region *dxl_shard_region(const struct dxl_shard *s);
/* the registration, NULL while deregistered */
struct dxl_mr *dxl_shard_mr(const struct dxl_shard *s);

/*
 * dxl_shard_targets -- one dxl_log_target per ring (t[0..n), n <= nrings),
 * served at addr / remote_ctx. Errors: DXL_E_STATE (not registered),
 * DXL_E_INVAL.
 */
int dxl_shard_targets(const struct dxl_shard *s, const char *addr,
		      uint32_t remote_ctx, struct dxl_log_target *t, uint32_t n);

/* ==== descriptors: what nodes/<id> publishes ============================= */

/*
 * The JSON payload of nodes/<id> (docs/replica.md):
 *
 *   {"format":1,"addr":"127.0.0.1:7000","provider":"tcp","ctx":0,
 *    "reg_epoch":1,"durability":"process",
 *    "shards":[{"id":0,"region":{"addr":"0x7f12...","len":1056768,
 *               "rkey":3,"node":1},
 *               "nrings":16,"ring_size":65536,"ctl_off":4096,
 *               "ring_stride":69632,"buf_delta":4096}]}
 *
 * plus the keys membership adds (node_id, pid, host, session,
 * registered_ms). Ring i's control block is at ctl_off + i * ring_stride
 * in the data area, its buffer buf_delta bytes after it.
 */
#define DXL_REPLICA_FORMAT 1
#define DXL_REPLICA_MAX_SHARDS 64

struct dxl_shard_desc {
	uint32_t shard;
	struct dxl_mr_desc region; /* the registered data area */
	uint32_t nrings;
	uint64_t ring_size;
	uint64_t ctl_off;     /* ring 0's control block */
	uint64_t ring_stride; /* from one ring's control block to the next */
	uint64_t buf_delta;   /* from a control block to its buffer */
};

struct dxl_replica_desc {
	uint32_t node_id; /* filled by decode from "node_id" when present */
	char addr[DXL_FABRIC_ADDR_MAX];
	enum dxl_fabric_provider provider;
	uint32_t ctx;        /* the ctx index writers connect to */
	uint64_t reg_epoch;  /* grows with every re-registration of regions */
	enum dxl_durability durability;
	uint32_t nshards;
	struct dxl_shard_desc shards[DXL_REPLICA_MAX_SHARDS];
};

/* dxl_shard_describe -- the descriptor of a registered shard.
 * Errors: DXL_E_STATE (not registered). */
int dxl_shard_describe(const struct dxl_shard *s, struct dxl_shard_desc *out);

/* dxl_replica_desc_encode -- JSON text (malloc'ed; the caller frees).
 * Errors: DXL_E_INVAL, DXL_E_NOMEM. */
int dxl_replica_desc_encode(const struct dxl_replica_desc *d, char **json);

/*
 * dxl_replica_desc_decode -- strict: every field present with its type and
 * in range, no unknown key (the membership keys node_id, pid, host, session,
 * registered_ms are accepted), ring geometry inside the region.
 * Errors: DXL_E_CORRUPT (says what is wrong; JSON errors with line and
 * column), DXL_E_VERSION (format other than 1).
 */
int dxl_replica_desc_decode(const char *json, size_t len,
			    struct dxl_replica_desc *out);

/* dxl_replica_desc_shard -- the descriptor of shard id, NULL if absent */
const struct dxl_shard_desc *
dxl_replica_desc_shard(const struct dxl_replica_desc *d, uint32_t shard);

/*
 * dxl_replica_desc_target -- the dxl_log_target for ring `ring` of shard
 * `shard` of that replica. Errors: DXL_E_NOENT (shard not hosted),
 * DXL_E_INVAL (ring out of range).
 */
int dxl_replica_desc_target(const struct dxl_replica_desc *d, uint32_t shard,
			    uint32_t ring, struct dxl_log_target *out);

/* ==== the replica server ================================================= */

struct dxl_config;

struct dxl_replica_cfg {
	uint32_t node_id;        /* replica.node_id (required) */
	char data_dir[512];      /* replica.data_dir (required) */
	enum dxl_durability durability; /* replica.durability, default msync */
	bool create;             /* replica.create: initialise an empty dir */
	uint32_t nshards;        /* replica.shards, default "0" */
	uint32_t shards[DXL_REPLICA_MAX_SHARDS];
	uint32_t writer_slots;   /* log.writer_slots: rings per shard (16) */
	uint64_t ring_size;      /* log.ring_size (1 MiB) */
	uint64_t retention_ms;   /* log.retention_ms (600000) */
	uint64_t retention_bytes; /* log.retention_bytes (0 = ring_size / 2) */
	uint32_t retention_check_ms; /* log.retention_check_ms (1000) */
	uint32_t service_ms;     /* replica.service_ms: loop period (10) */
	uint32_t exist_wait_ms;  /* replica.exist_wait_ms: retry a node id
				    held by another session (default: the
				    session timeout) ; UINT32_MAX = default */
	struct dxl_fabric_cfg fabric; /* fabric.* */
	struct dxl_zk_cfg zk;         /* zk.* (zk.cluster = the cluster) */
};

/* the defaults above; node_id 0, data_dir "" */
void dxl_replica_cfg_init(struct dxl_replica_cfg *cfg);

/*
 * dxl_replica_cfg_load -- override cfg from conf: the replica.*, log.*,
 * fabric.* and zk.* keys. Every unknown key (in any section, or outside
 * one) is DXL_E_CONFIG naming file, line and key; so is every bad value.
 * cfg may be partly changed on error.
 */
int dxl_replica_cfg_load(const struct dxl_config *conf,
			 struct dxl_replica_cfg *cfg);

/* dxl_replica_cfg_keys -- NULL-terminated list of every key with its
 * default and meaning ("key", "default", "text" triples), for --help */
const char *const *dxl_replica_cfg_keys(void);

/* dxl_replica_parse_shards -- "0,2,5-7" -> ids. DXL_E_INVAL on bad text,
 * duplicates, or more than DXL_REPLICA_MAX_SHARDS. */
int dxl_replica_parse_shards(const char *s, uint32_t *ids, uint32_t *n);

struct dxl_replica_server;

/*
 * dxl_replica_server_new -- open the data directory (exclusive lock,
 * identity, durability), open or create every shard, start the fabric and
 * ctx 0, connect to ZooKeeper and register nodes/<id> with the shards'
 * descriptors. Nothing it created is left behind on error.
 * Errors: DXL_E_BUSY (data directory locked by another process),
 * DXL_E_STALE / DXL_E_CONFIG / DXL_E_CORRUPT (the data directory or a region
 * belongs to another cluster, node or durability), DXL_E_UNAVAIL
 * (ZooKeeper unreachable after membership's retries), DXL_E_EXIST (node id
 * registered by another live session), DXL_E_INVAL, the fabric's errors.
 */
int dxl_replica_server_new(const struct dxl_replica_cfg *cfg,
			   struct dxl_replica_server **out);

/*
 * dxl_replica_server_run -- the service loop, until *stop becomes non-zero:
 * retention, and the lease rule: when dxl_zk_lease_valid() turns false the
 * regions are deregistered at once (remote WRITEs fail from then on); when
 * the lease is valid again (same session reconnected, or a new session
 * after expiry, which this loop establishes with dxl_zk_reopen) they are
 * registered again (new rkeys) and nodes/<id> is re-published.
 * Returns 0 when stopped, or a negative error that ends the service (a
 * node id taken by someone else after a new session: DXL_E_EXIST).
 */
int dxl_replica_server_run(struct dxl_replica_server *s,
			   volatile sig_atomic_t *stop);

/*
 * dxl_replica_server_retain -- one retention pass over every ring of every
 * shard (what the loop runs every retention_check_ms): advance the head over
 * records below the ring's watermark that are older than retention_ms or
 * beyond retention_bytes. Returns the number of records reclaimed.
 */
int dxl_replica_server_retain(struct dxl_replica_server *s, uint64_t now_ms);

/* serving state, for tests and diagnostics */
bool dxl_replica_server_serving(const struct dxl_replica_server *s);
uint64_t dxl_replica_server_reg_epoch(const struct dxl_replica_server *s);
const char *dxl_replica_server_addr(const struct dxl_replica_server *s);
struct dxl_zk *dxl_replica_server_zk(const struct dxl_replica_server *s);
struct dxl_shard *dxl_replica_server_shard(const struct dxl_replica_server *s,
					   uint32_t shard);

/*
 * dxl_replica_server_delete -- clean shutdown: a last retention pass (heads
 * are persisted as they move), leave ZooKeeper (nodes/<id> goes at once),
 * deregister and close the regions, stop the fabric, unlock the data
 * directory. *s = NULL.
 */
void dxl_replica_server_delete(struct dxl_replica_server **s);

#ifdef __cplusplus
}
#endif
#endif /* DXL_REPLICA_H */
