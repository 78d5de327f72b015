/* replica.h -- dxl's replica module: the log shards a replica node hosts,
 * their published descriptors, and the replica server (dxl-replica) */
#ifndef DXL_REPLICA_H
#define DXL_REPLICA_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dxl/engine.h"
#include "dxl/err.h"
#include "dxl/fabric.h"
#include "dxl/index.h"
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
 * region's durability mode says. Where a flush READ cannot do that (verbs +
 * msync: dxl_persist_needed), registering also starts the shard's persister
 * and marks its rings, so writers wait for its confirmations (docs/log.md);
 * deregistering stops it.
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
 * and format it if absent -- or if its creation was interrupted (the region
 * exists but its log header does not, and everything outside cfg's control
 * blocks is zero); then, if f != NULL, register its data area with f and
 * bind it. An existing region keeps its own geometry (nrings, ring_size
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
 * dxl_shard_register -- register the data area with f (again): a new rkey;
 * with the persister where the durability and provider need one.
 * Errors: DXL_E_EXIST (already registered), dxl_mr_reg's errors,
 * DXL_E_NOMEM/DXL_E_IO (the persister thread).
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
/* its persister (verbs + msync, while registered), else NULL */
struct dxl_persister *dxl_shard_persister(const struct dxl_shard *s);

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

/*
 * What a replica node says about a shard it hosts (nodes/<id>, "state"):
 * MEMBER       it is a replica of the shard in the configuration (cfg_epoch)
 *              and serves it;
 * CATCHING_UP  it hosts the shard but is not in its replica set: it copies
 *              the shard's rings from a member (state transfer) and is not
 *              yet close enough to join;
 * SYNCED       not in the replica set, and a copy pass just found it within
 *              a small distance of a member: the CM may add it as a backup
 *              (writers repair the rest when they reopen, docs/log.md);
 * UNASSIGNED   not in the replica set and nothing to copy from (the shard
 *              has no live member, or is not in the configuration); also
 *              the state of every shard until the node has applied a
 *              configuration;
 * JOINING      in the replica set (cfg_epoch), but its last copy from the
 *              primary (the join pull, docs/replica.md) is not done yet:
 *              writers do not use it and the CM does not count it.
 * Only MEMBER means "holds every acknowledged record of the shard".
 */
enum dxl_shard_state {
	DXL_SHARD_MEMBER = 0,
	DXL_SHARD_CATCHING_UP = 1,
	DXL_SHARD_SYNCED = 2,
	DXL_SHARD_UNASSIGNED = 3,
	DXL_SHARD_JOINING = 4,
};
const char *dxl_shard_state_name(enum dxl_shard_state st);
int dxl_shard_state_parse(const char *s, enum dxl_shard_state *out);

/*
 * The engine's tables of a shard (engine.tables; docs/replica.md "Tables"):
 * the primary's store (records and lock words, engine.h) and per table its
 * hash index (index.h), each registered for one-sided access. At most
 * DXL_REPLICA_MAX_TABLES per shard, so that DXL_REPLICA_MAX_SHARDS shards
 * with all their tables stay well inside ZooKeeper's 1 MB znode limit
 * (a full descriptor is about 0.5 MB; tests/unit/replica/test_desc_tables.c).
 */
#define DXL_REPLICA_MAX_TABLES 16

struct dxl_shard_table {
	struct dxl_table_desc t;   /* id, sizes, capacity, lock mode, records
				      and lock words (engine.h) */
	struct dxl_mr_desc index;  /* the index area (REMOTE_READ) */
	struct dxl_index_hdr ihdr; /* its header: what a reader needs to
				      address buckets (ihdr.len == index.len) */
};

struct dxl_shard_desc {
	uint32_t shard;
	enum dxl_shard_state state;
	/* the data identity of this node's copy of the shard: changes when
	 * its store is created anew (an empty or recreated data directory);
	 * the configuration records it when the node is added (docs/replica.md
	 * "data identity"). 0 = unknown (a descriptor of an older build). */
	uint64_t data_id;
	struct dxl_mr_desc region; /* the registered data area */
	uint32_t nrings;
	uint64_t ring_size;
	uint64_t ctl_off;     /* ring 0's control block */
	uint64_t ring_stride; /* from one ring's control block to the next */
	uint64_t buf_delta;   /* from a control block to its buffer */
	/* statistics, refreshed by the replica every log.retention_check_ms
	 * (0 until the first pass): */
	uint32_t fill_pct;    /* fullest ring: bytes head..end / ring size */
	uint64_t last_ts;     /* newest record's commit timestamp (all rings) */
	uint64_t records;     /* records retained (all rings) */
	/* the engine's tables (none: ntables 0, "tables" absent in JSON) */
	uint32_t ntables;
	struct dxl_shard_table tables[DXL_REPLICA_MAX_TABLES];
};

struct dxl_replica_desc {
	uint32_t node_id; /* filled by decode from "node_id" when present */
	char addr[DXL_FABRIC_ADDR_MAX];
	enum dxl_fabric_provider provider;
	uint32_t ctx;        /* the ctx index writers connect to */
	uint64_t reg_epoch;  /* grows with every re-registration of regions */
	uint64_t cfg_epoch;  /* the configuration epoch these registrations
				were made for (0: none seen yet). Writers and
				coordinators that read epoch E use a descriptor
				only when cfg_epoch == E: older rkeys are fenced
				off, a newer epoch may have other members. */
	enum dxl_durability durability;
	/* the ctx serving the table RPCs (DXL_REPLICA_RPC_CTX); 0 = none (no
	 * tables; "rpc_ctx" absent in JSON) */
	uint32_t rpc_ctx;
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

/*
 * dxl_replica_desc_get -- read nodes/<id> and decode it into *out.
 * Errors: DXL_E_NOENT (not registered), DXL_E_CORRUPT/DXL_E_VERSION (not a
 * replica descriptor: dxl_replica_desc_decode's), ZooKeeper's errors.
 */
int dxl_replica_desc_get(struct dxl_zk *zk, uint32_t id, struct dxl_replica_desc *out);

/* dxl_replica_desc_shard -- the descriptor of shard id, NULL if absent */
const struct dxl_shard_desc *
dxl_replica_desc_shard(const struct dxl_replica_desc *d, uint32_t shard);

/* dxl_replica_desc_table -- the descriptor of table `table` of shard
 * `shard`, NULL if absent */
const struct dxl_shard_table *
dxl_replica_desc_table(const struct dxl_replica_desc *d, uint32_t shard,
		       uint32_t table);

/*
 * dxl_replica_desc_target -- the dxl_log_target for ring `ring` of shard
 * `shard` of that replica. Errors: DXL_E_NOENT (shard not hosted),
 * DXL_E_INVAL (ring out of range).
 */
int dxl_replica_desc_target(const struct dxl_replica_desc *d, uint32_t shard,
			    uint32_t ring, struct dxl_log_target *out);

/* ==== table RPCs: the two-sided path to a shard's primary ================ */

/*
 * A node with tables (engine.tables) serves these handlers on fabric ctx
 * DXL_REPLICA_RPC_CTX (its descriptor's "rpc_ctx"), for the shards it is
 * the primary of in its current configuration, while its lease is valid.
 * One-sided READs of records, lock words and index buckets work on any QP
 * to the node (memory regions are per node, not per ctx).
 * docs/replica.md "Table RPCs".
 *
 * Request payload, little-endian, DXL_TABLE_REQ_SIZE bytes + the value:
 *    0 u32 shard        4 u32 table        8 u64 epoch (the caller's)
 *   16 u64 key         24 u64 slot        32 u64 owner (a lock word value)
 *   40 u64 ts          48 u64 version     56 u32 flags
 *   60 u32 value length (<= DXL_ENGINE_MAX_VALUE)
 *   64 the value
 * The payload is exactly 64 + value length bytes; every field the
 * operation does not use (table below) is 0.
 *
 *   LOOKUP     key                           -> the key's live record;
 *              DXL_E_NOENT with version and ts of its tombstone (0 and the
 *              table's floor without one: docs/engine.md "Tombstones")
 *   INSERT     key, ts, value, owner         -> slot, version, incarnation,
 *              holder = the commit timestamp of the absence replaced
 *              (owner != 0: inserted with its lock word = owner, a
 *              transaction's insert; 0: unlocked)
 *   DELETE     key, owner, ts [, slot,      -> slot, version, incarnation
 *              flags DXL_TABLE_DEL_AT_SLOT]  (the caller holds the record's
 *              lock: lock word == owner; with the flag a retry of a delete
 *              done already answers 0: idempotent)
 *   READ       slot                          -> the record in the slot and
 *                                               its lock word (holder)
 *   LOCK       slot, owner                   -> the record's header
 *              (engine.lock_mode=cpu only)
 *   UNLOCK     slot, owner                   (cpu only)
 *   WRITEBACK  slot, owner, ts, version,     -> slot, version
 *              flags, value                  (the caller holds the lock;
 *              version 0 = the current + 2, else it must be the current +
 *              2, or the current one: a retry, nothing written; flag
 *              DXL_TABLE_WB_UNLOCK releases the lock after, cpu only)
 *
 *
 * Resolution (a coordinator resolving a dead coordinator's transactions,
 * docs/transactions.md "Coordinator dies"; any lock mode):
 *   TXN_STATUS   key = txn id              -> holder = enum dxl_txn_status
 *                (this shard's local log, every ring)
 *   IN_DOUBT     slot = ring, key = skip,  -> data = the ring's write sets
 *                version = offset            above its watermark and not
 *                aborted (DXL_IN_DOUBT_HDR records), from the skip-th; slot
 *                = how many, holder = 1 if more follow. A record larger
 *                than the reply comes in parts: slot = 0, key = 1, version
 *                = the part's offset in its payload, data = its header
 *                (the whole length) and the part; ask again with version =
 *                the next offset
 *   RESOLVE      key, owner = txn id, version, ts, flags = op (1 insert,
 *                2 update, 3 delete) [| DXL_TABLE_RESOLVE_ABORT], value:
 *                forward: the entry applied idempotently by version
 *                (dxl_store_apply), the lock word must be 0 or owner and
 *                stays (UNLOCK_COORD releases it once the ring's watermark
 *                passed the record); abort: a record owner inserted (owner
 *                holds its lock) is deleted, owner's lock released
 *   UNLOCK_COORD key = coordinator id      -> slot = lock words released
 *                (every lock word of that coordinator's transactions)
 *
 * Reply payload, DXL_TABLE_REP_SIZE bytes + data, for every status:
 *    0 u64 epoch (the node's)   8 u32 primary of the shard (0: unknown)
 *   12 u32 flags (bit 0: the record is LIVE)
 *   16 u64 slot        24 u64 version      32 u64 ts        40 u64 key
 *   48 u32 incarnation 52 u32 data length  56 u64 holder (LOCK refused:
 *                                              the lock word)
 *   64 data: the value (LOOKUP, READ), or the error message (status < 0)
 *
 * Status (the RPC status): 0, or DXL_E_PROTO (malformed request: nothing
 * changed), DXL_E_STALE (epoch is not the node's: the reply's epoch is the
 * node's), DXL_E_UNAVAIL (not the shard's primary -- the reply names the
 * primary -- or not serving: lease lapsed, shutting down), DXL_E_NOENT
 * (unknown table, no such key, slot out of range or not live),
 * DXL_E_TOOBIG (value over the table's value size), DXL_E_EXIST (INSERT:
 * the key exists), DXL_E_FULL, DXL_E_BUSY (LOCK: held by `holder`),
 * DXL_E_STATE (the lock word is not owner; a WRITEBACK version that does
 * not follow the record's), DXL_E_NOTSUP (LOCK, UNLOCK, the UNLOCK flag with
 * NIC-owned lock words), DXL_E_AGAIN (the record is torn: the log's replay
 * has not rewritten it yet). A refused request changes nothing.
 */
#define DXL_REPLICA_RPC_CTX 2 /* ctx 0: writers and tailers, 1: catch-up */
#define DXL_REPLICA_LOCK_CTX 3 /* engine.lock_mode=nic: the node's own lock-word
				  CASes (a loopback QP, engine.h lock agent) */
#define DXL_TABLE_REQ_SIZE 64
#define DXL_TABLE_REP_SIZE 64
#define DXL_TABLE_REP_LIVE 1u
#define DXL_TABLE_WB_UNLOCK 1u
/* DELETE: slot is the slot the caller locked; if the key is no longer live
 * there and the caller still holds that lock word, the delete is done
 * already (a retry after a lost reply): 0 and the slot's record */
#define DXL_TABLE_DEL_AT_SLOT 1u
/* the largest reply (a value, or a message up to that size) */
#define DXL_TABLE_REP_MAX (DXL_TABLE_REP_SIZE + DXL_ENGINE_MAX_VALUE)

enum dxl_table_op { /* RPC handler ids, in dxl's range 1000..1023 */
	DXL_RPC_ID_TABLE_LOOKUP = 1008,
	DXL_RPC_ID_TABLE_INSERT = 1009,
	DXL_RPC_ID_TABLE_DELETE = 1010,
	DXL_RPC_ID_TABLE_READ = 1011,
	DXL_RPC_ID_TABLE_LOCK = 1012,
	DXL_RPC_ID_TABLE_UNLOCK = 1013,
	DXL_RPC_ID_TABLE_WRITEBACK = 1014,
	/* resolution of a dead coordinator's transactions (docs/transactions.md) */
	DXL_RPC_ID_TABLE_TXN_STATUS = 1015,
	DXL_RPC_ID_TABLE_IN_DOUBT = 1016,
	DXL_RPC_ID_TABLE_RESOLVE = 1017,
	DXL_RPC_ID_TABLE_UNLOCK_COORD = 1018,
	/* nothing but the checks every request gets (epoch, serving with a
	 * valid lease, primary, gate): a coordinator's one-sided reads posted
	 * before it on the same QP were served while this node was the
	 * shard's primary (docs/transactions.md "Reads are fenced") */
	DXL_RPC_ID_TABLE_FENCE = 1019,
	/* the coordinators holding lock words in the shard's tables: slot =
	 * how many, data = their ids (u32 each, at most 1000) -- any
	 * coordinator finds a dead one's leftovers without meeting them */
	DXL_RPC_ID_TABLE_LOCK_OWNERS = 1020,
};

/* TXN_STATUS's answer (in the reply's holder field) */
enum dxl_txn_status {
	DXL_TXN_ABSENT = 0,  /* no record of the transaction in this shard's log */
	DXL_TXN_PRESENT = 1, /* its write set is in the log, no abort marker */
	DXL_TXN_ABORTED = 2, /* an abort marker for it is in the log */
};
#define DXL_TABLE_RESOLVE_ABORT 0x100u /* RESOLVE: roll back, not forward */
/* one record of an IN_DOUBT reply: txn u64, ts u64, nparts u16, 2 zero
 * bytes, payload length u32, parts (u32 each), the payload, zero padding
 * to a multiple of 8 */
#define DXL_IN_DOUBT_HDR 24

/* dxl_table_op_name -- "lookup", ... ("?" for other ids) */
const char *dxl_table_op_name(uint16_t op);

struct dxl_table_req {
	uint32_t shard, table;
	uint64_t epoch;
	uint64_t key, slot, owner, ts, version;
	uint32_t flags;
	const void *value; /* decode: points into the payload */
	uint32_t len;
};

struct dxl_table_rep {
	uint64_t epoch;   /* the node's configuration epoch */
	uint32_t primary; /* the shard's primary in it (0: unknown) */
	uint64_t slot;
	struct dxl_record rec; /* version, ts, key, inc, live; len = the
				  value's length (LOOKUP, READ) */
	uint64_t holder;
	const void *data; /* decode: the value or message, in the payload */
	uint32_t data_len;
};

/*
 * dxl_table_req_encode -- the request of operation op into buf[0..cap).
 * Returns the length. Errors: DXL_E_INVAL (unknown op, a field op does not
 * use is not 0, NULL value with len > 0, cap too small), DXL_E_TOOBIG
 * (len over DXL_ENGINE_MAX_VALUE).
 */
int dxl_table_req_encode(uint16_t op, const struct dxl_table_req *r, void *buf,
			 size_t cap);
/* dxl_table_req_decode -- strict (the rules above). Errors: DXL_E_PROTO
 * with what is wrong, DXL_E_TOOBIG (value length over DXL_ENGINE_MAX_VALUE) */
int dxl_table_req_decode(uint16_t op, const void *buf, size_t len,
			 struct dxl_table_req *out);
/* dxl_table_rep_encode -- header + data (rep->data, rep->data_len) into
 * buf; returns the length, DXL_E_INVAL if cap is too small */
int dxl_table_rep_encode(const struct dxl_table_rep *rep, void *buf, size_t cap);
/* dxl_table_rep_decode -- Errors: DXL_E_PROTO (short, reserved flag bits,
 * data length not the rest of the payload) */
int dxl_table_rep_decode(const void *buf, size_t len, struct dxl_table_rep *out);

struct dxl_rpc;
struct dxl_qp;

/*
 * dxl_table_call -- from a coroutine of rpc's scheduler: call operation op
 * at the node at the other end of qp (a QP to its DXL_REPLICA_RPC_CTX) and
 * decode the reply into *rep (epoch and primary also on errors). The value
 * of a LOOKUP or READ goes to value[0..cap) (rep->rec.len bytes; value may
 * be NULL with cap 0 for the header only: then rep->data is NULL).
 * Returns 0 or the status: the node's (the message, in dxl_errmsg(),
 * is the node's: "node 1: shard 0 has no table 9"), or the call's
 * (dxl_rpc_call's errors), DXL_E_TOOBIG (the value is over cap), DXL_E_PROTO
 * (a malformed reply).
 */
int dxl_table_call(struct dxl_rpc *rpc, struct dxl_qp *qp, uint16_t op,
		   const struct dxl_table_req *req, struct dxl_table_rep *rep,
		   void *value, uint32_t cap);

/* ==== the configuration manager (CM) ===================================== */

/*
 * One replica process of the cluster is the CM (ZooKeeper election "cm",
 * among the dxl-replica processes with replica.cm = true). It watches
 * nodes/ and changes the configuration only by a versioned compare-and-set,
 * epoch + 1 each time (docs/operations.md, "Failover"):
 *
 * - who counts as alive: a member whose nodes/<id> lists the shard as
 *   MEMBER and says it registered for the current epoch (cfg_epoch). A
 *   member still joining (JOINING: its last copy from the primary is not
 *   done), one registered for an older epoch or not through its
 *   configuration yet is alive but does not count; a caught-up candidate
 *   (SYNCED) never counts;
 * - a member whose nodes/<id> is gone (its ZooKeeper session ended: the
 *   failure detector) or does not list the shard is dead. The dead are
 *   removed if at least min_replicas members that count remain; otherwise
 *   they stay and the shard is unavailable until one comes back (caught-up
 *   candidates are still added meanwhile: nothing is removed, and once
 *   they have joined they count);
 * - a dead primary is replaced by the first backup that counts: an append
 *   is acknowledged only when persistent on every member, and a member
 *   counts only once it holds everything (it registered as MEMBER for the
 *   epoch after its join pull), so it holds every acknowledged record
 *   (members differ at most in unacknowledged suffixes, which writers
 *   repair when they reopen). With no member that counts, nobody is
 *   promoted. A dead primary alone (nothing removed or added) is left as
 *   it is;
 * - a live node that hosts the shard, is not a member and says SYNCED
 *   (it copied the shard from a member) is added as a backup while the
 *   shard has fewer than `replication` live members.
 */
struct dxl_cm_params {
	uint32_t min_replicas; /* cm.min_replicas, default 2 */
	uint32_t replication;  /* cm.replication: members to keep, default 3 */
};

void dxl_cm_params_init(struct dxl_cm_params *p);

/*
 * dxl_cm_plan -- the policy above as a pure function: from the current
 * configuration and the descriptors of the live nodes (node_id filled),
 * compute the next configuration (epoch + 1) into *next (initialised by
 * this call when it returns 1; untouched otherwise). why (may be NULL)
 * receives a human-readable summary of the decision, also when nothing
 * changes (e.g. "shard 0: 1 of 3 members alive, below cm.min_replicas 2").
 * Returns 1 (changed), 0 (no change) or an error (DXL_E_INVAL, DXL_E_NOMEM).
 */
int dxl_cm_plan(const struct dxl_cluster_config *cur,
		const struct dxl_replica_desc *live, uint32_t nlive,
		const struct dxl_cm_params *p, struct dxl_cluster_config *next,
		char *why, size_t whycap);

/*
 * dxl_cm_reconcile -- one CM round: read the configuration and nodes/, plan,
 * and commit a change by CAS. Returns 1 if a new configuration was
 * committed (*new_epoch set when not NULL), 0 if nothing changed (or
 * someone else changed it first: the next round sees it), or an error.
 * Only the elected CM with a valid lease may call it.
 */
int dxl_cm_reconcile(struct dxl_zk *zk, const struct dxl_cm_params *p,
		     uint64_t *new_epoch);

/* ==== writers: appending to a shard that follows the configuration ======= */

/*
 * A log writer appends to one shard from one thread. It leases a writer
 * slot in ZooKeeper (writers/<shard>/<k>: its writer id and ring k on every
 * member), opens an appender to every member of the shard's current
 * configuration (primary first) once each has registered its regions for
 * that epoch, and keeps going across failovers:
 *
 * - an append that is not acknowledged (a member died, or its rkeys were
 *   re-registered for a new epoch: fencing) breaks the appender; the writer
 *   lets what is in flight finish, then reopens with the configuration of
 *   the moment, **with repair** (the primary's ring is the reference; the
 *   others are truncated or completed to it: docs/log.md);
 * - the records that were in flight are resolved by the ring's last
 *   timestamp after repair: those at or below it are in the log on every
 *   member (reported acknowledged), the others are appended again, with
 *   their original timestamp: no record is lost or duplicated by a retry;
 * - while the shard cannot be opened (a member not registered, fewer live
 *   members than the CM's min_replicas, ...) the writer retries every
 *   retry_ms; after unavail_ms its unfinished records fail with
 *   DXL_E_UNAVAIL and dxl_log_writer_why() says why. Later appends try
 *   again.
 * - when the ZooKeeper session holding the slot ends, another writer may
 *   take the slot: this writer stops for good (DXL_E_STATE); its records in
 *   flight may or may not be in the log.
 *
 * Results come in append order from dxl_log_writer_poll. When idle the
 * writer heartbeats every heartbeat_ms so tailers' resolved timestamps
 * advance.
 */
struct dxl_log_writer_cfg {
	uint32_t shard;
	uint32_t max_inflight;  /* appends in flight (16; 1..256) */
	uint32_t max_queue;     /* records accepted and not yet reported (4096) */
	uint32_t max_record;    /* largest encoded record (65536) */
	uint32_t unavail_ms;    /* give unfinished records up after (30000) */
	uint32_t retry_ms;      /* between reopen attempts (20) */
	uint32_t heartbeat_ms;  /* idle watermark heartbeat period (100) */
	uint32_t fabric_timeout_ms; /* dead-member detection (1000) */
	/* a coordinator's writer (docs/transactions.md "watermark =
	 * decided"): every record stays above the ring's watermark until
	 * dxl_log_writer_decide(ts) says its transaction is decided (false) */
	bool hold_until_decided;
	/* after a reopen under a NEW PRIMARY, records not in the log (above
	 * the repaired ring's end, or never posted) fail with DXL_E_STALE and
	 * maybe = false instead of being sent again: a coordinator's locks
	 * were at the old primary (false) */
	bool no_resend_on_new_primary;
	/* lease exactly this writer slot (its ring): a resolver taking over a
	 * dead writer's ring; -1 = the first free one (default) */
	int32_t slot;
	/* the wall clock of the commit timestamps (ms since the Unix epoch);
	 * NULL (default): the system's. Tests simulate a skewed host with it. */
	uint64_t (*wall_ms)(void);
	/* a resolver: no watermark at or above this timestamp until
	 * dxl_log_writer_set_hold_below lifts it -- the dead writer's records
	 * in doubt stay above the watermark while they are resolved (0: none) */
	uint64_t hold_below;
};

void dxl_log_writer_cfg_init(struct dxl_log_writer_cfg *cfg);
#define DXL_LOG_WRITER_MAX_PARTS 16 /* participants of one record */

struct dxl_log_writer_result {
	uint64_t ts;     /* the record's commit timestamp */
	uint64_t txn_id;
	int status;      /* 0: acknowledged (persistent on every member) */
	bool maybe;      /* status != 0 and the record had been sent: it may
			    still be in the log (a later writer's repair can
			    complete it on every member). Retrying it may
			    duplicate it; txn_id lets a consumer tell. */
};

struct dxl_log_writer_info {
	uint32_t shard, slot;
	uint64_t epoch;          /* of the configuration appended to */
	uint32_t primary;
	uint32_t nreplicas;
	uint32_t replicas[DXL_CONFIG_MAX_REPLICAS]; /* primary first */
	bool available;          /* an appender is open and not broken */
	uint64_t reopens;        /* appenders opened (1 + reopens) */
	uint64_t outages;        /* breaks that ended in a reopen */
	uint64_t last_outage_ms; /* the last one's length: break to reopen */
};

struct dxl_log_writer;

/*
 * dxl_log_writer_new -- lease a slot of shard cfg.shard and open it (waiting
 * up to cfg.unavail_ms while the shard is unavailable). zk is borrowed and
 * must outlive the writer. Errors: DXL_E_NOENT (no configuration, unknown
 * shard: the message lists the shards), DXL_E_FULL (every slot taken),
 * DXL_E_UNAVAIL (the shard stayed unavailable; the message says why),
 * DXL_E_CONFIG, DXL_E_INVAL, and ZooKeeper's errors.
 */
int dxl_log_writer_new(struct dxl_zk *zk, const struct dxl_log_writer_cfg *cfg,
		       struct dxl_log_writer **out);

/* dxl_log_writer_delete -- abandon what is unfinished, release the slot */
void dxl_log_writer_delete(struct dxl_log_writer **w);

/*
 * dxl_log_writer_append -- queue one record (the payload is copied); its
 * commit timestamp (hybrid clock, strictly increasing) in *ts. txn_id 0 =
 * the timestamp. Posted by the next poll. Errors: DXL_E_AGAIN (max_queue
 * records unreported: poll), DXL_E_TOOBIG (over max_record), DXL_E_INVAL
 * (empty), DXL_E_STATE (the writer lost its slot).
 */
int dxl_log_writer_append(struct dxl_log_writer *w, const void *payload, uint32_t len,
			  uint64_t txn_id, uint64_t *ts);

/*
 * dxl_log_writer_poll -- make progress (post, collect, reopen) for up to
 * timeout_ms (0: once) and return up to max finished records, in append
 * order; returns as soon as at least one is there. status 0 = acknowledged;
 * DXL_E_UNAVAIL (gave up after unavail_ms), DXL_E_NOENT (the shard left the
 * configuration), DXL_E_TOOBIG/DXL_E_INVAL (rejected by the appender),
 * DXL_E_STATE (slot lost: may or may not be in the log).
 */
int dxl_log_writer_poll(struct dxl_log_writer *w, struct dxl_log_writer_result *res,
			int max, int timeout_ms);

/* dxl_log_writer_append_ex -- dxl_log_writer_append with the record's
 * participants (parts[0..nparts), nparts <= DXL_LOG_WRITER_MAX_PARTS: the
 * shards a transaction wrote) */
int dxl_log_writer_append_ex(struct dxl_log_writer *w, const void *payload, uint32_t len,
			     uint64_t txn_id, const uint32_t *parts, uint32_t nparts,
			     uint64_t *ts);

/* dxl_log_writer_decide -- (hold_until_decided) the record of timestamp ts
 * is decided (its transaction committed, or aborted and marked): the
 * watermark may pass it once every earlier record is decided too.
 * Errors: DXL_E_NOENT (no undecided record ts), DXL_E_INVAL. */
int dxl_log_writer_decide(struct dxl_log_writer *w, uint64_t ts);
/* the hold: the oldest undecided record's timestamp, or hold_below if
 * lower (UINT64_MAX: none) */
uint64_t dxl_log_writer_hold(const struct dxl_log_writer *w);
/* dxl_log_writer_observe -- later appends get timestamps above ts (a
 * coordinator folds in the commit timestamps of what its transaction read
 * or overwrote: docs/transactions.md "Commit timestamps") */
void dxl_log_writer_observe(struct dxl_log_writer *w, uint64_t ts);
/* dxl_log_writer_set_hold_below -- change cfg.hold_below (0: lift it) */
void dxl_log_writer_set_hold_below(struct dxl_log_writer *w, uint64_t ts);

/* records appended and not yet returned by poll */
uint32_t dxl_log_writer_pending(const struct dxl_log_writer *w);

/*
 * dxl_log_writer_flush -- with nothing pending: a watermark heartbeat at
 * the current time, waited for, so tailers deliver everything appended.
 * Errors: DXL_E_BUSY (records not yet reported by poll), DXL_E_TIMEDOUT,
 * DXL_E_UNREACHABLE, DXL_E_STATE.
 */
int dxl_log_writer_flush(struct dxl_log_writer *w, int timeout_ms);

void dxl_log_writer_get_info(const struct dxl_log_writer *w,
			     struct dxl_log_writer_info *info);

/* why the shard is or was last unavailable ("" if never) */
const char *dxl_log_writer_why(const struct dxl_log_writer *w);

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
				    held by another session (default: twice
				    the session timeout); UINT32_MAX = default */
	bool cm;                 /* replica.cm: stand for the CM (true) */
	struct dxl_cm_params cm_params; /* cm.min_replicas, cm.replication */
	uint32_t cm_check_ms;    /* cm.check_ms: CM round period (500); a
				    change of nodes/ starts a round at once */
	uint32_t pull_ms;        /* replica.pull_ms: catch-up pass period (200) */
	uint32_t nic_pause_ms;   /* replica.test_nic_pause_ms (testing, 0): after
				    the lease lapsed keep the regions
				    registered this long, as an RDMA NIC keeps
				    serving a stopped host's memory (table
				    RPCs are refused at once) */
	uint64_t sync_bytes;     /* replica.sync_bytes: a catch-up pass that
				    changed fewer bytes than this makes the
				    shard SYNCED (256K) */
	uint64_t checkpoint_ms;  /* recovery.checkpoint_ms: a member writes a
				    checkpoint of each shard's tables this
				    often (600000; 0 = never) */
	uint64_t need_ttl_ms;    /* recovery.need_cursor_ttl_ms: the need
				    cursor of a node catching up that is gone
				    is dropped after this long (600000) */
	uint32_t join_timeout_ms; /* replica.join_timeout_ms: a shard whose
				    join pull has not succeeded this long
				    after the configuration that made it
				    join gives up: it says CATCHING_UP (the
				    CM removes it, and adds it again once it
				    has caught up); 0 = never (30000) */
	/* engine.tables: the tables every hosted shard holds, "id:value_size:
	 * capacity,..." (none); each shard's store is DATADIR/store-<s>.dat */
	uint32_t ntables;
	struct dxl_table_schema tables[DXL_REPLICA_MAX_TABLES];
	enum dxl_lock_mode lock_mode; /* engine.lock_mode: nic (default) | cpu */
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

/* dxl_replica_parse_tables -- "1:64:100000,2:128:5000" (id:value_size:
 * capacity, sizes may have K/M suffixes) -> schemas. "" = none. DXL_E_INVAL
 * on bad text, a repeated id, a value size outside 1..DXL_ENGINE_MAX_VALUE,
 * a capacity outside 1..DXL_TABLE_MAX_CAPACITY, or more than
 * DXL_REPLICA_MAX_TABLES tables. */
int dxl_replica_parse_tables(const char *s, struct dxl_table_schema *t,
			     uint32_t *n);

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
/* the configuration epoch the regions are registered for (0: none yet) */
uint64_t dxl_replica_server_cfg_epoch(const struct dxl_replica_server *s);
/* the state of a hosted shard (DXL_E_NOENT if not hosted) */
int dxl_replica_server_shard_state(const struct dxl_replica_server *s,
				   uint32_t shard, enum dxl_shard_state *st);
/* this process is the elected CM with a valid lease (as of the service
 * loop's last round; any thread) */
bool dxl_replica_server_is_cm(const struct dxl_replica_server *s);
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
