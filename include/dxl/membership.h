/* membership.h -- dxl's layer over ZooKeeper: sessions and leases, node
 * registration, the cluster configuration, the CM election, tail cursors */
#ifndef DXL_MEMBERSHIP_H
#define DXL_MEMBERSHIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dxl/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Everything lives under a per-cluster root in ZooKeeper (ARCHITECTURE.md
 * §7; docs/membership.md has the payload formats):
 *
 *   /dxl/<cluster>/nodes/<id>              ephemeral: one per live process
 *   /dxl/<cluster>/config                  {epoch, shards, node addresses}
 *   /dxl/<cluster>/cm/c-<session>-<nonce>-<seq> ephemeral sequential: CM election
 *   /dxl/<cluster>/cursors/<group>/<shard> tail cursors (next timestamp)
 *
 * Threads. Every function may be called from any thread, except
 * dxl_zk_delete (not concurrently with other calls on the same zk, and never
 * from a callback). Callbacks (session state, member and config watches,
 * election) all run on one "event thread" owned by the struct dxl_zk, one at
 * a time, never while a lock of this module is held: they may call any
 * function of this header except dxl_zk_delete, including synchronous ones
 * and the *_delete of their own watch. A callback that blocks delays the
 * other callbacks of that zk, never the lease (it has its own thread).
 * Every *_new taking a callback stores *out before the first callback can
 * run, so a callback may already use (or delete) the object.
 *
 * Errors common to every call that talks to ZooKeeper:
 *   DXL_E_UNAVAIL  not connected within cfg.op_timeout_ms, or the connection
 *                  was lost during the call. A write that fails this way may
 *                  or may not have been applied: re-read before retrying
 *                  (every write here is versioned, so a blind retry cannot
 *                  clobber someone else's change).
 *   DXL_E_STATE    the session has expired or the zk is closing: nothing
 *                  more can be done with this session (see dxl_zk_reopen).
 *   DXL_E_NOMEM, DXL_E_INTERNAL (an unexpected ZooKeeper return code; the
 *                  message has its text).
 */

/* ==== session ============================================================ */

#define DXL_ZK_CONNECT_MAX 1024 /* connect string, including the NUL */
#define DXL_ZK_CLUSTER_MAX 64   /* cluster name, including the NUL */

/* Session states as the owner sees them (see dxl_zk_cfg.on_state). */
enum dxl_zk_state {
	DXL_ZK_CONNECTING = 0,   /* getting a session (inside dxl_zk_new or
				    dxl_zk_reopen) */
	DXL_ZK_CONNECTED = 1,    /* connected; the session is alive */
	DXL_ZK_DISCONNECTED = 2, /* connection lost; the client library is
				    reconnecting. The session may still be
				    alive at the server, but the lease is
				    invalid until reconnected. */
	DXL_ZK_EXPIRED = 3,      /* the server ended the session: its
				    ephemeral znodes are gone. Terminal for
				    this session; dxl_zk_reopen starts a new
				    one. */
	DXL_ZK_CLOSED = 4,       /* dxl_zk_delete in progress */
};

const char *dxl_zk_state_name(enum dxl_zk_state s);

struct dxl_zk;

/* dxl_zk_state_cb -- a session state change (on the event thread). Every
 * change is reported once, in order, starting with DXL_ZK_CONNECTED. */
typedef void (*dxl_zk_state_cb)(struct dxl_zk *zk, void *arg,
				enum dxl_zk_state state);

struct dxl_zk_cfg {
	/* "host:port[,host:port...]", as for zookeeper_init. Required. */
	char connect[DXL_ZK_CONNECT_MAX];
	/* cluster name: [A-Za-z0-9_.-], 1..63 chars, not "." or "..".
	 * Everything lives under /dxl/<cluster>. Default "default". */
	char cluster[DXL_ZK_CLUSTER_MAX];
	/* requested session timeout = the lease at the server = the failure
	 * detection time. The server may negotiate it into its
	 * [minSessionTimeout, maxSessionTimeout] (a warning is logged then).
	 * Default 3000; 100..600000. */
	uint32_t session_timeout_ms;
	/* how long dxl_zk_new / dxl_zk_reopen keep trying to get a session
	 * before DXL_E_UNAVAIL. Default 10000; 1..3600000. */
	uint32_t connect_timeout_ms;
	/* backoff between connection attempts: starts here, doubles, capped
	 * at retry_max_ms. Defaults 100 and 2000. */
	uint32_t retry_initial_ms;
	uint32_t retry_max_ms;
	/* the member's own lease, in percent of the negotiated session
	 * timeout, counted from the SEND time of the last confirmed renewal
	 * (docs/membership.md: "Leases"). Default 50; 10..60. */
	uint32_t lease_pct;
	/* how long a call waits for a (re)connection before DXL_E_UNAVAIL.
	 * 0 (default) = the session timeout. */
	uint32_t op_timeout_ms;
	/* how many writer slots (dxl_writer_slot_lease) one session of this
	 * zk may hold at once; a lease beyond is refused (DXL_E_FULL).
	 * Default 4096; 1..1048576. */
	uint32_t writer_slots_max;
	/* session state changes; NULL = not interested */
	dxl_zk_state_cb on_state;
	void *arg;
};

/* dxl_zk_cfg_init -- the defaults above; connect = "" (must be set) */
void dxl_zk_cfg_init(struct dxl_zk_cfg *cfg);

struct dxl_config;

/*
 * dxl_zk_cfg_load -- override cfg's fields from the "zk.*" keys of a config
 * file: zk.connect, zk.cluster, zk.session_timeout_ms, zk.connect_timeout_ms,
 * zk.retry_initial_ms, zk.retry_max_ms, zk.lease_pct, zk.op_timeout_ms,
 * zk.writer_slots_max. Absent keys keep cfg's value. Returns 0, or DXL_E_CONFIG naming file, line
 * and key (unknown "zk.*" key, bad value); cfg is unchanged on error.
 */
int dxl_zk_cfg_load(const struct dxl_config *conf, struct dxl_zk_cfg *cfg);

/*
 * dxl_zk_new -- connect to ZooKeeper and create the cluster's znode tree
 * (/dxl, /dxl/<cluster>, nodes, cm, cursors; creating what exists is not an
 * error). Tries for cfg.connect_timeout_ms: each attempt waits up to one
 * session timeout for the session, then backs off (retry_initial_ms,
 * doubling, capped at retry_max_ms). On success the session is connected,
 * its lease is valid and the event and lease threads run.
 *
 * Errors: DXL_E_INVAL (bad cfg: empty connect string, bad cluster name,
 * value out of range), DXL_E_UNAVAIL (no session within the budget; the
 * message names the connect string, the number of attempts, the time spent
 * and the client library's last complaint), DXL_E_IO, DXL_E_NOMEM, or the
 * errors of a ZooKeeper call while creating the tree.
 */
int dxl_zk_new(const struct dxl_zk_cfg *cfg, struct dxl_zk **out);

/*
 * dxl_zk_delete -- stop the threads, close the session (its ephemeral
 * znodes vanish at once: registrations, election candidacies) and free
 * everything, including the watches and elections still attached (their
 * callbacks are not called). *zk = NULL. NULL or *zk == NULL: no-op.
 */
void dxl_zk_delete(struct dxl_zk **zk);

/*
 * dxl_zk_reopen -- end the current session (normally after DXL_ZK_EXPIRED)
 * and establish a new one with the same cfg, retrying as dxl_zk_new does.
 * This is a new membership epoch for the process: dxl_zk_session_epoch()
 * grows by one, the lease starts from scratch, registrations and election
 * candidacies of the old session are gone (register and join again: the CM
 * may meanwhile have reconfigured without this node). Member and config
 * watches stay attached and re-sync on the new session (reporting what
 * changed meanwhile). May be called from a callback (the state callback of
 * DXL_ZK_EXPIRED typically does); other calls wait or fail with
 * DXL_E_UNAVAIL meanwhile.
 * Errors: DXL_E_UNAVAIL (no new session within connect_timeout_ms; the zk
 * stays without a session and dxl_zk_reopen may be called again),
 * DXL_E_STATE (closing), DXL_E_NOMEM.
 */
int dxl_zk_reopen(struct dxl_zk *zk);

/* dxl_zk_state -- the current state (atomic read; no ZooKeeper call) */
enum dxl_zk_state dxl_zk_state(const struct dxl_zk *zk);

/*
 * dxl_zk_lease_valid -- true while this member may act as a live member
 * (serve writes, act as CM): the session is connected AND the lease, renewed
 * by a background "sync" round trip every session_timeout/6, has not run
 * out. The lease runs out lease_pct% of the session timeout after the SEND
 * time of the last renewal the server answered, which is strictly before the
 * server can expire the session (the server counts the full timeout from a
 * later instant: when that request arrived). docs/membership.md gives the
 * timing argument and measurements. Cheap (two atomic loads and a clock
 * read): call it before every write that needs the member to be alive, and
 * make sure the write completes before dxl_zk_lease_until_ns().
 */
bool dxl_zk_lease_valid(const struct dxl_zk *zk);

/* dxl_zk_lease_until_ns -- CLOCK_BOOTTIME ns (dxl_boot_ns, common.h) at
 * which the current lease runs out, or 0 when it is not valid now. The boot
 * clock keeps running while the machine or its VM is suspended (the
 * monotonic clock does not): a member resumed after a suspend longer than
 * its lease finds the lease over. */
uint64_t dxl_zk_lease_until_ns(const struct dxl_zk *zk);

/* dxl_zk_lease_ms -- the lease length in ms (lease_pct of the negotiated
 * session timeout) */
uint32_t dxl_zk_lease_ms(const struct dxl_zk *zk);

/* dxl_zk_session_timeout_ms -- the timeout the server negotiated */
uint32_t dxl_zk_session_timeout_ms(const struct dxl_zk *zk);

/* dxl_zk_session_id -- the ZooKeeper session id (as ZooKeeper prints it,
 * 0x...), 0 without a session */
int64_t dxl_zk_session_id(const struct dxl_zk *zk);

/* dxl_zk_session_epoch -- 1 for the session dxl_zk_new made, +1 for every
 * dxl_zk_reopen: the process's membership epoch */
uint64_t dxl_zk_session_epoch(const struct dxl_zk *zk);

/* dxl_zk_root -- "/dxl/<cluster>" */
const char *dxl_zk_root(const struct dxl_zk *zk);

/* dxl_zk_connect_string -- cfg.connect */
const char *dxl_zk_connect_string(const struct dxl_zk *zk);

/*
 * dxl_zk_server -- "ip:port" of the server the session is connected to
 * (diagnostics, tests). Errors: DXL_E_UNAVAIL (not connected), DXL_E_INVAL
 * (cap too small).
 */
int dxl_zk_server(struct dxl_zk *zk, char *buf, size_t cap);

/*
 * dxl_zk_inject_expiry -- fault injection: make the server end this session
 * as if it had expired (a second connection takes over the session with its
 * id and password and closes it). The session's ephemeral znodes vanish at
 * once; this zk then sees DXL_ZK_DISCONNECTED and DXL_ZK_EXPIRED, exactly as
 * after a real expiry. Errors: DXL_E_STATE (no live session), DXL_E_UNAVAIL.
 */
int dxl_zk_inject_expiry(struct dxl_zk *zk);

/*
 * Fault injection: ZooKeeper calls that fail with a connection loss (the
 * "ZooKeeper shim" of the fault tests). Every call of this module that names
 * a znode whose path contains path_part and is one of ops is counted; after
 * `skip` of them, the next `count` (0: all of them) fail:
 *
 *   DXL_ZK_LOSE_REPLY    the call is applied at the server, then reported
 *                        as a connection loss (for writes: create, set,
 *                        delete): the caller cannot know it took effect;
 *   DXL_ZK_LOSE_REQUEST  reported as a connection loss, not applied (any
 *                        op, reads and listings included);
 *   DXL_ZK_LATE_APPLY    (writes) reported as a connection loss, not applied
 *                        now, but applied just before the next write of this
 *                        zk (any path): a request a lagging server commits
 *                        after the caller's next read missed it.
 *
 * The op DXL_ZK_OP_ACQUIRE (with DXL_ZK_LOSE_REQUEST only) is not a znode
 * call: it fails the module's wait for a connection (path_part is matched
 * against what the call waits for, e.g. "joining the election") with
 * DXL_E_UNAVAIL at once, as if the connection had stayed away for the whole
 * operation timeout: the path a caller takes when a lost reply comes with a
 * real disconnection.
 *
 * The session itself stays connected (the lease is not touched): what is
 * injected is the ambiguity of a lost reply, as the callers see it. Every
 * fault is logged (event=zk_fault_injected). Up to 16 rules per zk.
 * A process can also arm them for every zk it opens with the environment
 * variable DXL_ZK_FAULTS, read by dxl_zk_new, in the syntax of
 * dxl_zk_inject_faults: rules separated by ',', each
 *   op[+op]:path_part:reply|request|late[:skip[:count]]
 * with op one of create, set, delete, list, read, acquire (skip 0 and count
 * 1 when absent), e.g. "create:/cm/c-:reply" (the first CM candidacy create
 * loses its reply). Errors: DXL_E_INVAL (bad rule; a lost reply or a late
 * apply of a read, an acquire that is not "request"), DXL_E_FULL.
 */
enum dxl_zk_fault_op {
	DXL_ZK_OP_CREATE = 1,
	DXL_ZK_OP_SET = 2,    /* versioned or not */
	DXL_ZK_OP_DELETE = 4,
	DXL_ZK_OP_LIST = 8,   /* get children */
	DXL_ZK_OP_READ = 16,  /* get, exists */
	DXL_ZK_OP_ACQUIRE = 32, /* waiting for a connection (no znode) */
	DXL_ZK_OP_ALL = 63,
};
enum dxl_zk_fault_kind {
	DXL_ZK_LOSE_REPLY = 1,
	DXL_ZK_LOSE_REQUEST = 2,
	DXL_ZK_LATE_APPLY = 3,
};
int dxl_zk_inject_fault(struct dxl_zk *zk, unsigned ops, const char *path_part,
			enum dxl_zk_fault_kind kind, uint32_t skip, uint32_t count);
int dxl_zk_inject_faults(struct dxl_zk *zk, const char *spec);
/* how many calls failed by injection so far */
uint32_t dxl_zk_faults_fired(const struct dxl_zk *zk);
/* dxl_zk_clear_faults -- disarm every rule */
void dxl_zk_clear_faults(struct dxl_zk *zk);

/* ==== nodes: registration of live processes ============================== */

/*
 * dxl_member_register -- create the ephemeral znode nodes/<node_id> holding
 * payload_json, which must be the text of a JSON object (the node's address,
 * fabric provider, region descriptors and rkeys, role...: the caller's
 * business). The module adds (overwriting) the keys "node_id", "pid",
 * "host", "session" and "registered_ms", which name the holder in errors.
 * The znode lives as long as the session: it vanishes when the process dies
 * (after the session timeout) or closes the session (at once).
 *
 * Registering a node id this session already holds replaces its payload
 * (so a retry after DXL_E_UNAVAIL is safe).
 *
 * Errors: DXL_E_INVAL (payload is not a JSON object), DXL_E_TOOBIG (over
 * 1000000 bytes), DXL_E_EXIST (another session holds this id; nothing is
 * changed; the message names the holder's pid, host and session: a second
 * process started with the same node id, or the previous incarnation of
 * this node whose session has not expired yet -- it will within the session
 * timeout if that process is dead), and the common errors.
 */
int dxl_member_register(struct dxl_zk *zk, uint32_t node_id,
			const char *payload_json);

/*
 * dxl_member_update -- replace the payload of a node this session holds
 * (e.g. new rkeys after re-registering regions). The same keys are added.
 * Errors: DXL_E_NOENT (this session does not hold node_id), DXL_E_INVAL,
 * DXL_E_TOOBIG, and the common errors.
 */
int dxl_member_update(struct dxl_zk *zk, uint32_t node_id,
		      const char *payload_json);

/*
 * dxl_member_deregister -- delete nodes/<node_id> if this session holds it.
 * Errors: DXL_E_NOENT (not registered by this session), common errors.
 */
int dxl_member_deregister(struct dxl_zk *zk, uint32_t node_id);

/*
 * dxl_member_get -- the payload of nodes/<node_id> (malloc'ed JSON text,
 * the caller frees) and, if session != NULL, the id of the session holding
 * it. Errors: DXL_E_NOENT (no such live node), common errors.
 */
int dxl_member_get(struct dxl_zk *zk, uint32_t node_id, char **payload,
		   int64_t *session);

struct dxl_member {
	uint32_t node_id;
	int64_t session; /* the ZooKeeper session holding the znode */
	char *payload;   /* JSON text */
};

struct dxl_member_list {
	size_t n;
	struct dxl_member *v; /* sorted by node_id */
};

/*
 * dxl_member_list -- every live node (a snapshot). Znodes under nodes/ whose
 * name is not a node id are skipped with a warning. Free with
 * dxl_member_list_free. Errors: common errors.
 */
int dxl_member_list(struct dxl_zk *zk, struct dxl_member_list *out);
void dxl_member_list_free(struct dxl_member_list *l);

enum dxl_member_event {
	DXL_MEMBER_JOIN = 1,   /* a node appeared (payload: its payload) */
	DXL_MEMBER_LEAVE = 2,  /* a node disappeared (payload: its last one) */
	DXL_MEMBER_UPDATE = 3, /* same session, new payload */
};

const char *dxl_member_event_name(enum dxl_member_event ev);

typedef void (*dxl_member_cb)(void *arg, enum dxl_member_event ev,
			      uint32_t node_id, const char *payload);

struct dxl_member_watch;

/*
 * dxl_member_watch_new -- report joins, leaves and payload updates of nodes
 * to cb (on the event thread). It first reports a JOIN for every node
 * present, then every difference between successive views of nodes/; the
 * ZooKeeper watches are re-armed by each read, after reconnections and on a
 * new session (dxl_zk_reopen). A node that left and came back with another
 * session between two views is reported as LEAVE then JOIN; a node that
 * came and went between two views is not reported (views, not a log).
 * Errors: DXL_E_INVAL, DXL_E_NOMEM.
 */
int dxl_member_watch_new(struct dxl_zk *zk, dxl_member_cb cb, void *arg,
			 struct dxl_member_watch **out);

/* dxl_member_watch_delete -- no callback starts after it returns (from
 * another thread it waits for a running one); *w = NULL */
void dxl_member_watch_delete(struct dxl_member_watch **w);

/* ==== config: the cluster configuration ================================== */

/*
 * The configuration {epoch, shard -> primary + backups, node addresses}. It
 * is named "cluster config" because struct dxl_config is the INI file of
 * common/config.h. A plain value object: build it with the helpers below,
 * free it with dxl_cluster_config_clear.
 */
#define DXL_CONFIG_MAX_REPLICAS 8 /* replication factor: primary + backups */
#define DXL_CONFIG_MAX_BACKUPS (DXL_CONFIG_MAX_REPLICAS - 1)
#define DXL_CONFIG_ADDR_MAX 64    /* "host:port" incl. NUL (= fabric's) */
#define DXL_CONFIG_MAX_NODES 4096
#define DXL_CONFIG_MAX_SHARDS 65536
#define DXL_CONFIG_FORMAT 1

struct dxl_cluster_shard {
	uint32_t id;
	uint32_t primary;  /* node id */
	uint32_t nbackups; /* 0..DXL_CONFIG_MAX_BACKUPS */
	uint32_t backups[DXL_CONFIG_MAX_BACKUPS];
	/* the data identity (docs/replica.md) of each member's copy of the
	 * shard, recorded when it was added: data_id[0] the primary's,
	 * data_id[1 + i] backups[i]'s; 0 = not recorded. A member whose copy
	 * has another identity now (restarted on a new data directory) is not
	 * a member until it has caught up and been added again. Set with
	 * dxl_cluster_config_set_data_id; dxl_cluster_config_set_shard clears
	 * them. */
	uint64_t data_id[DXL_CONFIG_MAX_REPLICAS];
};

struct dxl_cluster_node {
	uint32_t id;
	char addr[DXL_CONFIG_ADDR_MAX];
};

struct dxl_cluster_config {
	uint64_t epoch; /* >= 1; strictly increases with every change */
	uint32_t nnodes;
	struct dxl_cluster_node *nodes;
	uint32_t nshards;
	struct dxl_cluster_shard *shards;
};

/* dxl_cluster_config_init -- an empty config (epoch 0, no nodes/shards) */
void dxl_cluster_config_init(struct dxl_cluster_config *c);
/* dxl_cluster_config_clear -- free the arrays, back to empty */
void dxl_cluster_config_clear(struct dxl_cluster_config *c);
/* dxl_cluster_config_copy -- deep copy into *dst (initialised by this
 * call). Errors: DXL_E_NOMEM. */
int dxl_cluster_config_copy(struct dxl_cluster_config *dst,
			    const struct dxl_cluster_config *src);

/* dxl_cluster_config_set_node -- add node id or change its address.
 * Errors: DXL_E_INVAL (empty or too long address, too many nodes),
 * DXL_E_NOMEM. */
int dxl_cluster_config_set_node(struct dxl_cluster_config *c, uint32_t id,
				const char *addr);
/* dxl_cluster_config_remove_node -- DXL_E_NOENT if absent. Shards naming
 * it are not touched (dxl_cluster_config_validate will say so). */
int dxl_cluster_config_remove_node(struct dxl_cluster_config *c, uint32_t id);

/* dxl_cluster_config_set_shard -- add shard id or replace its replicas.
 * Errors: DXL_E_INVAL (nbackups over the limit, too many shards),
 * DXL_E_NOMEM. Consistency is checked by dxl_cluster_config_validate. */
int dxl_cluster_config_set_shard(struct dxl_cluster_config *c, uint32_t id,
				 uint32_t primary, const uint32_t *backups,
				 uint32_t nbackups);

/* dxl_cluster_shard_data_id -- the data identity recorded for member node
 * of sh; 0 when none is recorded or node is not a member */
uint64_t dxl_cluster_shard_data_id(const struct dxl_cluster_shard *sh, uint32_t node);

/* dxl_cluster_config_set_data_id -- record the data identity of member node
 * of shard (0: forget it). Errors: DXL_E_NOENT (no such shard, or node is
 * not one of its members). */
int dxl_cluster_config_set_data_id(struct dxl_cluster_config *c, uint32_t shard,
				   uint32_t node, uint64_t data_id);

/* dxl_cluster_shard_members -- the shard's members, primary first, into
 * ids[DXL_CONFIG_MAX_REPLICAS]; returns their count (0 when sh is NULL) */
uint32_t dxl_cluster_shard_members(const struct dxl_cluster_shard *sh, uint32_t *ids);

/* lookups: NULL when absent */
const struct dxl_cluster_node *
dxl_cluster_config_node(const struct dxl_cluster_config *c, uint32_t id);
const struct dxl_cluster_shard *
dxl_cluster_config_shard(const struct dxl_cluster_config *c, uint32_t id);

/*
 * dxl_cluster_config_validate -- DXL_E_INVAL with a message naming the first
 * problem: epoch 0, duplicate node or shard id, empty address, a shard
 * whose primary is among its backups, a duplicate backup, too many backups,
 * a replica that is not in the node list.
 */
int dxl_cluster_config_validate(const struct dxl_cluster_config *c);

/*
 * dxl_cluster_config_encode -- the znode's JSON text (malloc'ed, the caller
 * frees; *len without the NUL if len != NULL). Validates first.
 * Errors: DXL_E_INVAL (see validate), DXL_E_NOMEM.
 */
int dxl_cluster_config_encode(const struct dxl_cluster_config *c, char **json,
			      size_t *len);

/*
 * dxl_cluster_config_decode -- parse and validate JSON text (len bytes, no
 * NUL needed) into *c (initialised by this call; clear it after success).
 * Strict: every field present with the right type and range, no unknown
 * key, no duplicate key, nothing after the object.
 * Errors: DXL_E_CORRUPT (malformed JSON, with line and column; a missing,
 * unknown or mistyped field; a value out of range; an inconsistent config
 * -- the message says which), DXL_E_VERSION ("format" is not 1),
 * DXL_E_NOMEM. *c is empty on error.
 */
int dxl_cluster_config_decode(const char *json, size_t len,
			      struct dxl_cluster_config *c);

#define DXL_ZK_VERSION_NONE (-1) /* expected version: the znode must not exist */
#define DXL_ZK_VERSION_ANY (-2)  /* expected version: whatever is there */

/*
 * dxl_cluster_config_read -- read and decode /dxl/<cluster>/config into *c
 * (initialised by this call; clear it after success) and its znode version
 * into *version (may be NULL).
 * Errors: DXL_E_NOENT (no configuration yet), DXL_E_CORRUPT, DXL_E_VERSION
 * (as decode; the message names the znode), common errors.
 */
int dxl_cluster_config_read(struct dxl_zk *zk, struct dxl_cluster_config *c,
			    int32_t *version);

/*
 * dxl_cluster_config_cas -- replace the configuration by c if the znode is
 * still at expected_version (its version from dxl_cluster_config_read), or
 * create it if expected_version is DXL_ZK_VERSION_NONE. c->epoch must be
 * larger than the stored epoch (a configuration change is a new epoch;
 * ARCHITECTURE.md §7 fencing relies on it). *new_version (may be NULL)
 * receives the znode's new version. Nothing changes on any error.
 * Errors: DXL_E_STALE (the znode is not at expected_version: someone else
 * changed it, or it exists when creation was asked, or it is absent when a
 * version was given -- re-read and recompute), DXL_E_INVAL (c invalid; or
 * c->epoch not larger than the stored epoch; or expected_version is
 * DXL_ZK_VERSION_ANY, which a CAS does not accept), DXL_E_CORRUPT (the
 * stored config cannot be decoded, so its epoch is unknown: repair it by
 * hand), DXL_E_TOOBIG, common errors.
 */
int dxl_cluster_config_cas(struct dxl_zk *zk, const struct dxl_cluster_config *c,
			   int32_t expected_version, int32_t *new_version);

/*
 * dxl_cluster_config_cb -- the configuration changed (on the event thread).
 * status 0: cfg is the new configuration (valid during the call only; copy
 * it with dxl_cluster_config_copy) at znode version `version`.
 * DXL_E_NOENT: there is no configuration (cfg NULL, version -1).
 * DXL_E_CORRUPT / DXL_E_VERSION: the znode at `version` cannot be decoded
 * (cfg NULL; dxl_errmsg() says why).
 */
typedef void (*dxl_cluster_config_cb)(void *arg,
				      const struct dxl_cluster_config *cfg,
				      int32_t version, int status);

struct dxl_cluster_config_watch;

/*
 * dxl_cluster_config_watch_new -- call cb with the current configuration,
 * then after every change of the znode (creation, new version, deletion).
 * Like member watches it reports views: two changes in quick succession may
 * be reported as one (the later). Errors: DXL_E_INVAL, DXL_E_NOMEM.
 */
int dxl_cluster_config_watch_new(struct dxl_zk *zk, dxl_cluster_config_cb cb,
				 void *arg,
				 struct dxl_cluster_config_watch **out);
void dxl_cluster_config_watch_delete(struct dxl_cluster_config_watch **w);

/* ==== election: the configuration manager ================================ */

#define DXL_ELECTION_CM "cm" /* the configuration manager's election */

enum dxl_election_event {
	DXL_ELECTION_ELECTED = 1, /* this candidate is now the leader */
	DXL_ELECTION_LOST = 2,    /* the leader lost leadership without
				     resigning: its session expired (or its
				     znode was deleted from outside) */
};

typedef void (*dxl_election_cb)(void *arg, enum dxl_election_event ev);

struct dxl_election;

/*
 * dxl_election_new -- join election `name` (DXL_ELECTION_CM, or another
 * [A-Za-z0-9_.-] name: a directory under the cluster root) as a candidate:
 * creates the ephemeral sequential znode <name>/c-<session>-<nonce>-<seq>
 * holding data (text, e.g. JSON naming this candidate; may be NULL). The
 * candidate with the lowest sequence number leads; every other one watches
 * only its predecessor (no herd effect when the leader goes). cb reports
 * ELECTED and LOST on the event thread. A create whose reply was lost is
 * resolved before anything is created again (its znode is adopted if it
 * landed), and znodes of this session that no live candidacy of the process
 * owns are deleted (docs/membership.md "Lost replies"). When the candidacy
 * ends while the session lives (its znode deleted from outside),
 * dxl_election_seq returns -1: join again with a new candidacy.
 *
 * Being the leader in ZooKeeper is not enough to act: the leader must also
 * hold a valid lease (dxl_zk_lease_valid), since while disconnected it
 * cannot know whether its session has already expired and someone else
 * leads.
 *
 * Errors: DXL_E_INVAL (bad name), DXL_E_TOOBIG, common errors.
 */
int dxl_election_new(struct dxl_zk *zk, const char *name, const char *data,
		     dxl_election_cb cb, void *arg, struct dxl_election **out);

/*
 * dxl_election_resign -- leave the election (delete the candidate znode); the
 * next candidate takes over. No LOST callback for a resignation; no
 * callback starts after it returns. Errors: DXL_E_STATE (already out),
 * common errors (the candidacy then ends with the session anyway).
 */
int dxl_election_resign(struct dxl_election *e);

/* dxl_election_delete -- resign if still a candidate, free; *e = NULL */
void dxl_election_delete(struct dxl_election **e);

/* dxl_election_is_leader -- this candidate leads (as last seen from
 * ZooKeeper; combine with dxl_zk_lease_valid before acting) */
bool dxl_election_is_leader(const struct dxl_election *e);

/* dxl_election_seq -- this candidate's sequence number, -1 if out */
int64_t dxl_election_seq(const struct dxl_election *e);

/* dxl_election_predecessor -- the sequence number of the candidate this one
 * watches, -1 when leading or out (tests, diagnostics) */
int64_t dxl_election_predecessor(const struct dxl_election *e);

/*
 * dxl_election_leader -- the data of the current leader of election name
 * (malloc'ed, the caller frees) and its sequence number (seq may be NULL):
 * how processes find the CM. Errors: DXL_E_NOENT (no candidate),
 * DXL_E_INVAL, common errors.
 */
int dxl_election_leader(struct dxl_zk *zk, const char *name, char **data,
			int64_t *seq);

/* ==== cursors: where a tailing consumer group resumes ==================== */

/*
 * A cursor is the commit timestamp of the next position to read for one
 * (consumer group, shard), stored at cursors/<group>/<shard>. group:
 * [A-Za-z0-9_.-], 1..127 chars, not "." or "..".
 */

/*
 * dxl_cursor_get -- *next_ts and the znode's *version (may be NULL).
 * Errors: DXL_E_NOENT (never set), DXL_E_CORRUPT (the znode does not hold
 * a cursor), DXL_E_INVAL (bad group), common errors.
 */
int dxl_cursor_get(struct dxl_zk *zk, const char *group, uint32_t shard,
		   uint64_t *next_ts, int32_t *version);

/*
 * dxl_cursor_set -- store next_ts if the cursor is at expected_version;
 * DXL_ZK_VERSION_NONE creates it (first set), DXL_ZK_VERSION_ANY writes
 * whatever is there (creating it if needed). *new_version (may be NULL)
 * receives the new version. Nothing changes on error.
 * Errors: DXL_E_STALE (not at expected_version, or exists when creation was
 * asked, or absent when a version was given), DXL_E_INVAL, common errors.
 */
int dxl_cursor_set(struct dxl_zk *zk, const char *group, uint32_t shard,
		   uint64_t next_ts, int32_t expected_version,
		   int32_t *new_version);

/*
 * dxl_cursor_min -- the smallest committed cursor of shard over every
 * consumer group (UINT64_MAX and *ngroups = 0 when no group has one): what
 * retention must keep unless the size limit forces it.
 * Errors: DXL_E_CORRUPT (a group's cursor for this shard cannot be decoded:
 * its position is unknown, so it counts as 0 -- *min_ts is 0 and *ngroups
 * counts it; the message names the first such cursor), the common errors.
 */
int dxl_cursor_min(struct dxl_zk *zk, uint32_t shard, uint64_t *min_ts,
		   uint32_t *ngroups);

/* dxl_cursor_delete -- remove a cursor (any version). Errors: DXL_E_NOENT,
 * DXL_E_INVAL, common errors. */
int dxl_cursor_delete(struct dxl_zk *zk, const char *group, uint32_t shard);

/*
 * dxl_cursor_list -- every consumer group's cursor of shard (a snapshot):
 * *out (free() it) gets *n entries {group, next_ts, mtime_ms: when the
 * cursor was last set, ZooKeeper's clock}. Groups without a cursor of the
 * shard are left out. Errors: DXL_E_NOMEM, common errors.
 */
struct dxl_cursor_info {
	char group[128];
	uint64_t next_ts;
	uint64_t mtime_ms;
};
int dxl_cursor_list(struct dxl_zk *zk, uint32_t shard, struct dxl_cursor_info **out,
		    uint32_t *n);

/* ---- writer slots (docs/replica-design.md) --------------------------------- */

/*
 * dxl_writer_slot_lease -- lease the first free writer slot k < nslots of
 * shard by creating the ephemeral znode /dxl/<cluster>/writers/<shard>/<k>
 * (docs/replica-design.md): the writer id and ring for that shard are k.
 * The slot is held until dxl_writer_slot_release or the session ends.
 * Errors: DXL_E_FULL (every slot taken), DXL_E_INVAL, common ZooKeeper
 * errors (membership.h).
 */
int dxl_writer_slot_lease(struct dxl_zk *zk, uint32_t shard, uint32_t nslots,
			  uint32_t *slot);

/* dxl_writer_slot_take -- lease exactly slot `slot` of shard (a resolver
 * taking over a dead writer's ring). Errors: DXL_E_EXIST (held by a live
 * session), as dxl_writer_slot_lease. */
int dxl_writer_slot_take(struct dxl_zk *zk, uint32_t shard, uint32_t slot);

/* dxl_writer_slot_release -- delete writers/<shard>/<slot> if this session
 * holds it. Errors: DXL_E_NOENT (not held by this session), common ones. */
int dxl_writer_slot_release(struct dxl_zk *zk, uint32_t shard, uint32_t slot);

/* dxl_writer_slots_live -- bit k of *mask: slot k (< 64) of shard is held by
 * a live session (a tailer's live set: dxl_tail_cfg.live_mask) */
int dxl_writer_slots_live(struct dxl_zk *zk, uint32_t shard, uint64_t *mask);

/* ---- coordinators: coords/<id> (docs/transactions.md) ----------------------- */

/*
 * dxl_coord_znode_create -- register a coordinator: the ephemeral znode
 * /dxl/<cluster>/coords/<id> holding data (a NUL-terminated string; may be
 * NULL). id 0 = the first free id in 1..max_id. *id_out = the id taken.
 * Errors: DXL_E_EXIST (id given and taken by another session), DXL_E_FULL
 * (no free id), DXL_E_INVAL, common ZooKeeper errors.
 */
int dxl_coord_znode_create(struct dxl_zk *zk, uint32_t id, uint32_t max_id,
			   const char *data, uint32_t *id_out);
/* dxl_coord_znode_delete -- Errors: DXL_E_NOENT (not held by this session) */
int dxl_coord_znode_delete(struct dxl_zk *zk, uint32_t id);
/* dxl_coord_znode_list -- the live coordinators' ids, ascending, into
 * ids[0..cap); returns how many there are (may exceed cap) */
int dxl_coord_znode_list(struct dxl_zk *zk, uint32_t *ids, uint32_t cap);
/* dxl_coord_znode_get -- coords/<id>'s data into buf (NUL-terminated);
 * returns its length. Errors: DXL_E_NOENT, DXL_E_TOOBIG (over cap - 1). */
int dxl_coord_znode_get(struct dxl_zk *zk, uint32_t id, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* DXL_MEMBERSHIP_H */
