/* zk_internal.h -- what membership's files share: connections, observers, helpers */
#ifndef DXL_MEMBERSHIP_ZK_INTERNAL_H
#define DXL_MEMBERSHIP_ZK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <zookeeper/zookeeper.h>

#include "common/common.h"
#include "dxl/membership.h"

/* largest znode payload we write: ZooKeeper's jute.maxbuffer is 1 MiB,
 * minus room for the request header and path */
#define ZK_MAX_DATA 1000000
#define ZK_PATH_MAX 512

/*
 * One zookeeper handle (one connection attempt; once connected, one
 * session). Reference counted so that dxl_zk_reopen can replace it while
 * other threads are inside calls on it: the last zk_conn_put closes the
 * handle, always outside zk->mu and never on a ZooKeeper thread (watchers and
 * completions never take references).
 */
struct zk_conn {
	struct dxl_zk *zk;
	zhandle_t *zh;
	uint64_t id;         /* attempt number, unique within the zk */
	int refs;            /* under zk->mu */
	bool connected;      /* saw ZOO_CONNECTED_STATE once (under zk->mu) */
	bool ended;          /* expired / auth failed (under zk->mu) */
	int64_t session_id;  /* once connected (under zk->mu) */
	uint32_t timeout_ms; /* negotiated, once connected (under zk->mu) */
	int last_state;      /* last session state queued (under zk->mu) */
};

/*
 * An observer: a member watch, a config watch or an election. It lives in
 * the zk's list (under zk->mu). The event thread marks it dirty when a
 * ZooKeeper event concerns it (wants()), after a reconnection and on a new
 * session, and then runs sync(), which re-reads ZooKeeper (re-arming the
 * watches) and calls the user's callback. Only the event thread runs sync()
 * and session_lost(), one observer at a time (zk->cur).
 */
struct zk_obs {
	struct zk_obs *next;
	struct dxl_zk *zk;
	const char *kind;
	/* event thread, no lock held: 0, or < 0 to be retried with backoff */
	int (*sync)(struct zk_obs *o);
	/* under zk->mu, event thread: does a watch event on path concern it? */
	bool (*wants)(struct zk_obs *o, int type, const char *path);
	/* event thread, no lock held: the session ended (may be NULL) */
	void (*session_lost)(struct zk_obs *o);
	/* frees the observer (any thread, after it left the list) */
	void (*destroy)(struct zk_obs *o);
	bool dirty;             /* under zk->mu */
	bool lost_pending;      /* under zk->mu: session_lost still to run */
	atomic_bool dead;       /* removed: stop calling back, free when idle */
	uint64_t retry_at_ns;   /* under zk->mu; 0 = now */
	uint32_t backoff_ms;    /* under zk->mu */
};

/*
 * The writer slots held by the writers of one dxl_zk (writers.c). All the
 * writers of a process may share one session (a coordinator's workers do),
 * so "the znode is owned by my session" does not mean "it is mine": this
 * registry says whether another writer here holds it. It belongs to the
 * session: entries of an ended session (whose ephemeral znodes are gone)
 * are dropped when the registry first sees the new one. Under mu.
 */
struct zk_writers {
	pthread_mutex_t mu;
	int64_t session;        /* the session of the entries; 0 none yet */
	struct zk_held {
		uint32_t shard, slot;
	} *held;
	unsigned n, cap;        /* cap grows up to cfg.writer_slots_max */
	/* slots whose create (or release) lost its reply, outcome unknown */
	struct {
		bool used;
		char path[ZK_PATH_MAX + 16];
	} maybe[64];
};
/* zk_writers_of -- the zk's registry (its mutex is initialised) */
struct zk_writers *zk_writers_of(struct dxl_zk *zk);
/* zk_writer_slots_max -- cfg.writer_slots_max */
uint32_t zk_writer_slots_max(const struct dxl_zk *zk);

/* zk.c: the session */

/* zk_acquire -- wait (op_timeout) until connected, then a reference to the
 * current connection. DXL_E_UNAVAIL / DXL_E_STATE otherwise. `what` names
 * the operation in the error message. */
int zk_acquire(struct dxl_zk *zk, struct zk_conn **out, const char *what);
void zk_conn_put(struct zk_conn *c);
/* zk_conn_session -- the session id of a connected connection */
int64_t zk_conn_session(struct zk_conn *c);

/* zk_err -- map a ZooKeeper return code to DXL_E_* with a message
 * "zookeeper <op> <path>: <zerror text>" (and a hint for connection loss) */
int zk_err(int zrc, const char *op, const char *path);

/* zk_path -- "<root>/<rel>" into buf (ZK_PATH_MAX); DXL_E_INVAL if too long */
int zk_path(const struct dxl_zk *zk, char *buf, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* zk_name_ok -- [A-Za-z0-9_.-]{1,max-1}, not "." / ".." */
bool zk_name_ok(const char *s, size_t max);

/* zk_get -- zoo_get/zoo_wget (watch: the module's watcher) into a malloc'ed
 * NUL-terminated buffer of any size; ZooKeeper return code */
int zk_get(struct zk_conn *c, const char *path, bool watch, char **data,
	   int *len, struct Stat *st);
/* zk_children -- zoo_get_children/zoo_wget_children; ZooKeeper rc */
int zk_children(struct zk_conn *c, const char *path, bool watch,
		struct String_vector *out);
/* zk_exists -- zoo_exists/zoo_wexists; ZooKeeper rc */
int zk_exists(struct zk_conn *c, const char *path, bool watch,
	      struct Stat *st);

/* zkx_create / zkx_set / zkx_delete -- zoo_create (open ACL), zoo_set2 and
 * zoo_delete through the fault shim (dxl_zk_inject_fault): every write of the
 * module goes through them, so a test can lose its request or its reply.
 * ZooKeeper rc. */
int zkx_create(struct zk_conn *c, const char *path, const char *data, int len,
	       int flags, char *made, int madecap);
int zkx_set(struct zk_conn *c, const char *path, const char *data, int len,
	    int version, struct Stat *st);
int zkx_delete(struct zk_conn *c, const char *path, int version);

/* zk_delete_own -- delete the ephemeral znode path if this connection's
 * session owns it: 0, DXL_E_NOENT (absent or another session's), or the
 * ZooKeeper error */
int zk_delete_own(struct zk_conn *c, const char *path);

/* observers */
void zk_obs_add(struct dxl_zk *zk, struct zk_obs *o);
/* zk_obs_remove -- unlink, wait until the event thread is done with it
 * (unless called from the event thread), then o->destroy(o) */
void zk_obs_remove(struct zk_obs *o);
/* zk_on_event_thread -- is the caller the zk's event thread? */
bool zk_on_event_thread(const struct dxl_zk *zk);
/* zk_obs_quiesce -- wait until the event thread is not inside o (no-op on
 * the event thread itself) */
void zk_obs_quiesce(struct zk_obs *o);
/* zk_lock / zk_unlock -- zk->mu, for observers' own fields */
void zk_lock(struct dxl_zk *zk);
void zk_unlock(struct dxl_zk *zk);

/* nodes.c */
int zk_member_payload(struct dxl_zk *zk, int64_t session, uint32_t node_id,
		      const char *payload_json, char **out, size_t *len);

#endif /* DXL_MEMBERSHIP_ZK_INTERNAL_H */
