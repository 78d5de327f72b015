/* zk.c -- the ZooKeeper session: bounded connect, states, the lease, the event thread */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/config.h"
#include "membership/zk_internal.h"

/*
 * Threads of a struct dxl_zk:
 *  - the ZooKeeper client's own two threads (I/O and completion) per handle.
 *    They call zk_watcher() and renew_done(), which only take zk->mu briefly
 *    and never call ZooKeeper: every synchronous zoo_* call waits for the
 *    completion thread, so a ZooKeeper call made while holding zk->mu, or
 *    from a watcher, could deadlock. Rule: no zoo_* call under zk->mu.
 *  - the event thread (ev_main): turns watcher events into state
 *    callbacks and observer syncs; runs every user callback.
 *  - the lease thread (lease_main): one "sync" round trip every
 *    timeout/6; a user callback that blocks cannot starve the lease.
 */

struct zk_event {
	struct zk_event *next;
	uint64_t conn_id;
	uint64_t epoch;
	int type;
	int state;
	char path[]; /* "" for session events */
};

struct dxl_zk {
	struct dxl_zk_cfg cfg;
	char root[ZK_PATH_MAX];

	pthread_mutex_t mu;
	pthread_cond_t cond;      /* state, conn and observer changes */
	pthread_cond_t ev_cond;   /* wakes the event thread */
	pthread_cond_t lease_cond; /* wakes the lease thread */
	pthread_mutex_t reopen_mu; /* serialises dxl_zk_reopen */

	/* under mu */
	struct zk_conn *conn; /* current connection; holds one reference */
	uint64_t next_conn_id;
	bool closing;
	struct zk_event *ev_head, *ev_tail;
	bool ev_stop, lease_stop, lease_kick;
	struct zk_obs *obs;   /* observers */
	struct zk_obs *cur;   /* the observer the event thread is running */
	bool renew_inflight;
	uint64_t renew_seq;
	uint64_t renew_sent_ns;

	/* read without the lock (written under mu) */
	_Atomic int state;               /* enum dxl_zk_state */
	_Atomic int64_t session_id;
	_Atomic uint64_t session_epoch;
	_Atomic uint32_t timeout_ms;     /* negotiated */
	_Atomic uint32_t lease_ms;
	/* end of the lease, CLOCK_BOOTTIME ns (dxl_boot_ns: it advances while
	 * the machine or VM is suspended, the server's clock does too); 0 =
	 * none. Only grows within a session (atomic max in renew_done); reset
	 * when a session ends. */
	_Atomic uint64_t lease_until_ns;

	pthread_t ev_thread, lease_thread;
	bool ev_started, lease_started;

	/* fault injection (dxl_zk_inject_fault, DXL_ZK_FAULTS): under fault_mu */
	pthread_mutex_t fault_mu;
	struct zk_fault {
		unsigned ops;     /* DXL_ZK_OP_* */
		char part[128];   /* the path contains it */
		int kind;         /* enum dxl_zk_fault_kind */
		uint32_t skip;    /* matching calls to let through first */
		uint32_t count;   /* then how many to fail (0: all) */
	} faults[16];
	unsigned nfaults;
	_Atomic uint32_t faults_fired;
	/* the writer slots held by this zk's writers (writers.c) */
	struct zk_writers writers;
	/* a write held back by DXL_ZK_LATE_APPLY, applied before the next one */
	struct zk_late {
		unsigned op;      /* 0 = none */
		char path[ZK_PATH_MAX + 64];
		char *data;
		int len, flags, version;
	} late;

	/* event thread only */
	uint64_t ev_epoch;     /* session epoch of the last session event */
	bool ev_lost_done;     /* session_lost ran for ev_epoch */
	int ev_reported;       /* last state reported to on_state, -1 none */
};

/* ---- small helpers ------------------------------------------------------ */

void zk_lock(struct dxl_zk *zk)
{
	pthread_mutex_lock(&zk->mu);
}

void zk_unlock(struct dxl_zk *zk)
{
	pthread_mutex_unlock(&zk->mu);
}

static void abs_deadline(struct timespec *ts, uint64_t deadline_ns)
{
	ts->tv_sec = (time_t)(deadline_ns / 1000000000ull);
	ts->tv_nsec = (long)(deadline_ns % 1000000000ull);
}

/* wait on cv (with zk->mu held) until deadline_ns (CLOCK_MONOTONIC) */
static void wait_until(pthread_cond_t *cv, pthread_mutex_t *mu,
		       uint64_t deadline_ns)
{
	if (deadline_ns == UINT64_MAX) {
		pthread_cond_wait(cv, mu);
		return;
	}
	struct timespec ts;
	abs_deadline(&ts, deadline_ns);
	pthread_cond_timedwait(cv, mu, &ts);
}

static int cond_init_mono(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	int rc = pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
	return rc;
}

bool zk_name_ok(const char *s, size_t max)
{
	if (!s)
		return false;
	size_t n = strlen(s);
	if (n == 0 || n >= max || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ||
		      ch == '.'))
			return false;
	}
	return true;
}

int zk_path(const struct dxl_zk *zk, char *buf, const char *fmt, ...)
{
	int n = snprintf(buf, ZK_PATH_MAX, "%s/", zk->root);
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(buf + n, ZK_PATH_MAX - (size_t)n, fmt, ap);
	va_end(ap);
	if (m < 0 || n + m >= ZK_PATH_MAX)
		return dxl_err_set(DXL_E_INVAL, "znode path under %s too long",
				   zk->root);
	return 0;
}

const char *dxl_zk_state_name(enum dxl_zk_state s)
{
	switch (s) {
	case DXL_ZK_CONNECTING: return "connecting";
	case DXL_ZK_CONNECTED: return "connected";
	case DXL_ZK_DISCONNECTED: return "disconnected";
	case DXL_ZK_EXPIRED: return "expired";
	case DXL_ZK_CLOSED: return "closed";
	}
	return "unknown";
}

int zk_err(int zrc, const char *op, const char *path)
{
	const char *what = zerror(zrc);
	switch (zrc) {
	case ZCONNECTIONLOSS:
	case ZOPERATIONTIMEOUT:
	case ZCLOSING:
	case ZSESSIONMOVED:
	case ZTHROTTLEDOP:
		return dxl_err_set(DXL_E_UNAVAIL,
				   "zookeeper %s %s: %s (if it was a write, it "
				   "may or may not have been applied)",
				   op, path, what);
	case ZSESSIONEXPIRED:
	case ZINVALIDSTATE:
	case ZAUTHFAILED:
		return dxl_err_set(DXL_E_STATE,
				   "zookeeper %s %s: %s: the session is over "
				   "(dxl_zk_reopen starts a new one)",
				   op, path, what);
	case ZNONODE:
		return dxl_err_set(DXL_E_NOENT, "zookeeper %s %s: %s", op, path, what);
	case ZNODEEXISTS:
		return dxl_err_set(DXL_E_EXIST, "zookeeper %s %s: %s", op, path, what);
	case ZBADVERSION:
		return dxl_err_set(DXL_E_STALE, "zookeeper %s %s: %s", op, path, what);
	case ZNOTEMPTY:
		return dxl_err_set(DXL_E_BUSY, "zookeeper %s %s: %s", op, path, what);
	case ZNOAUTH:
		return dxl_err_set(DXL_E_ACCESS, "zookeeper %s %s: %s", op, path, what);
	case ZBADARGUMENTS:
		return dxl_err_set(DXL_E_INVAL, "zookeeper %s %s: %s", op, path, what);
	case ZMARSHALLINGERROR:
		return dxl_err_set(DXL_E_NOMEM, "zookeeper %s %s: %s", op, path, what);
	default:
		return dxl_err_set(DXL_E_INTERNAL, "zookeeper %s %s: %s (rc %d)", op,
				   path, what, zrc);
	}
}

/* ---- the client library's log ------------------------------------------- */

/* The last message of the client library, for DXL_E_UNAVAIL at connect
 * time ("Connection refused"). The library's log callback has no context,
 * so this is process-wide: with several zks it may name another's trouble
 * (the message says which server). */
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_log_last[256];

static void zk_log_cb(const char *msg)
{
	DXL_DEBUG("zookeeper client: %s", msg);
	/* "2024-..:pid(0x..):ZOO_ERROR@handle_socket_error_msg@2290: Socket
	 * [127.0.0.1:1] zk retcode=-4, errno=111(Connection refused): ..." ->
	 * keep what follows the "@func@line: " prefix */
	const char *p = strstr(msg, "ZOO_");
	if (p && (strncmp(p, "ZOO_ERROR", 9) == 0 || strncmp(p, "ZOO_WARN", 8) == 0)) {
		const char *q = strstr(p, ": ");
		q = q ? q + 2 : p;
		pthread_mutex_lock(&g_log_mu);
		snprintf(g_log_last, sizeof(g_log_last), "%s", q);
		size_t n = strlen(g_log_last);
		while (n && (g_log_last[n - 1] == '\n' || g_log_last[n - 1] == ' '))
			g_log_last[--n] = 0;
		pthread_mutex_unlock(&g_log_mu);
	}
}

static void log_last(char *buf, size_t cap)
{
	pthread_mutex_lock(&g_log_mu);
	snprintf(buf, cap, "%s", g_log_last[0] ? g_log_last : "no message");
	pthread_mutex_unlock(&g_log_mu);
}

/* ---- connections ---------------------------------------------------------- */

static void conn_close(struct zk_conn *c)
{
	if (c->zh) {
		/* flushes outstanding requests; their completions run (with
		 * ZCLOSING) before this returns, so renew tokens are freed */
		zookeeper_close(c->zh);
	}
	free(c);
}

void zk_conn_put(struct zk_conn *c)
{
	if (!c)
		return;
	struct dxl_zk *zk = c->zk;
	pthread_mutex_lock(&zk->mu);
	bool last = --c->refs == 0;
	pthread_mutex_unlock(&zk->mu);
	if (last)
		conn_close(c);
}

int64_t zk_conn_session(struct zk_conn *c)
{
	pthread_mutex_lock(&c->zk->mu);
	int64_t sid = c->session_id;
	pthread_mutex_unlock(&c->zk->mu);
	return sid;
}

/* map a ZooKeeper session state to ours; -1 = not a state we report */
static int map_state(int zstate)
{
	if (zstate == ZOO_CONNECTED_STATE)
		return DXL_ZK_CONNECTED;
	if (zstate == ZOO_CONNECTING_STATE || zstate == ZOO_ASSOCIATING_STATE)
		return DXL_ZK_DISCONNECTED;
	if (zstate == ZOO_EXPIRED_SESSION_STATE || zstate == ZOO_AUTH_FAILED_STATE)
		return DXL_ZK_EXPIRED;
	return -1;
}

static void enqueue_locked(struct dxl_zk *zk, struct zk_event *ev)
{
	if (zk->ev_tail)
		zk->ev_tail->next = ev;
	else
		zk->ev_head = ev;
	zk->ev_tail = ev;
	pthread_cond_signal(&zk->ev_cond);
}

/*
 * zk_watcher -- every ZooKeeper event of every handle (session events and
 * the data/child watches the observers set). ZooKeeper completion thread.
 * Session events are delivered to every registered watcher of the handle,
 * so the same state can arrive several times: state changes are idempotent
 * and the event thread reports each change once.
 */
static void zk_watcher(zhandle_t *zh, int type, int state, const char *path,
		       void *ctx)
{
	struct zk_conn *c = ctx;
	struct dxl_zk *zk = c->zk;
	int s = -1;
	pthread_mutex_lock(&zk->mu);
	bool current = zk->conn == c;
	if (type == ZOO_SESSION_EVENT) {
		s = map_state(state);
		if (s == DXL_ZK_CONNECTED) {
			const clientid_t *id = zoo_client_id(zh);
			int to = zoo_recv_timeout(zh);
			c->connected = true;
			c->session_id = id ? id->client_id : 0;
			c->timeout_ms = to > 0 ? (uint32_t)to : zk->cfg.session_timeout_ms;
		} else if (s == DXL_ZK_EXPIRED) {
			c->ended = true;
		}
		if (current && s >= 0) {
			int old = atomic_load(&zk->state);
			if (s == DXL_ZK_CONNECTED) {
				atomic_store(&zk->session_id, c->session_id);
				atomic_store(&zk->timeout_ms, c->timeout_ms);
				atomic_store(&zk->lease_ms,
					     c->timeout_ms * zk->cfg.lease_pct / 100);
				atomic_store(&zk->state, DXL_ZK_CONNECTED);
				zk->lease_kick = true; /* renew at once */
				pthread_cond_signal(&zk->lease_cond);
			} else if (s == DXL_ZK_DISCONNECTED) {
				/* still CONNECTING while dxl_zk_new tries */
				if (old == DXL_ZK_CONNECTED)
					atomic_store(&zk->state, DXL_ZK_DISCONNECTED);
			} else {
				atomic_store(&zk->state, DXL_ZK_EXPIRED);
				atomic_store(&zk->lease_until_ns, 0);
			}
		}
	}
	bool queue = current && type != ZOO_NOTWATCHING_EVENT;
	if (type == ZOO_SESSION_EVENT) {
		/* once per change (0 is no state map_state returns) */
		queue = queue && s >= 0 && s != c->last_state;
		if (queue)
			c->last_state = s;
	}
	if (queue) {
		size_t plen = path && type != ZOO_SESSION_EVENT ? strlen(path) : 0;
		struct zk_event *ev = calloc(1, sizeof(*ev) + plen + 1);
		if (ev) {
			ev->conn_id = c->id;
			ev->epoch = atomic_load(&zk->session_epoch);
			ev->type = type;
			ev->state = state;
			if (plen)
				memcpy(ev->path, path, plen);
			enqueue_locked(zk, ev);
		} else {
			/* lost event: resync everything on the next one */
			DXL_ERROR("zookeeper event lost: out of memory");
			for (struct zk_obs *o = zk->obs; o; o = o->next)
				o->dirty = true;
		}
	}
	pthread_cond_broadcast(&zk->cond);
	pthread_mutex_unlock(&zk->mu);
}

/*
 * connect_loop -- get a new session for epoch: attempts of up to one session
 * timeout each, exponential backoff between them, within connect_timeout_ms.
 * On success zk->conn is the connected handle and the lease starts at the
 * instant before zookeeper_init (the server counts the session's timeout
 * from a later instant: when our ConnectRequest arrived).
 */
static int connect_loop(struct dxl_zk *zk, uint64_t epoch)
{
	const struct dxl_zk_cfg *cfg = &zk->cfg;
	uint64_t start = dxl_now_ns();
	uint64_t deadline = start + (uint64_t)cfg->connect_timeout_ms * 1000000ull;
	uint32_t backoff = cfg->retry_initial_ms;
	unsigned attempts = 0;
	char why[256] = "";

	for (;;) {
		attempts++;
		struct zk_conn *c = calloc(1, sizeof(*c));
		if (!c)
			return dxl_err_set(DXL_E_NOMEM, "zookeeper connection");
		c->zk = zk;
		c->refs = 1;
		pthread_mutex_lock(&zk->mu);
		if (zk->closing) {
			pthread_mutex_unlock(&zk->mu);
			free(c);
			return dxl_err_set(DXL_E_STATE, "zookeeper %s: closing",
					   cfg->connect);
		}
		c->id = ++zk->next_conn_id;
		atomic_store(&zk->session_epoch, epoch);
		zk->conn = c;
		pthread_mutex_unlock(&zk->mu);

		uint64_t t0 = dxl_now_ns(), t0_boot = dxl_boot_ns();
		uint64_t attempt_end = t0 + (uint64_t)cfg->session_timeout_ms * 1000000ull;
		if (attempt_end > deadline)
			attempt_end = deadline;
		zhandle_t *zh = zookeeper_init2(cfg->connect, zk_watcher,
						(int)cfg->session_timeout_ms, NULL,
						c, 0, zk_log_cb);
		int err = errno;
		pthread_mutex_lock(&zk->mu);
		c->zh = zh;
		if (!zh) {
			snprintf(why, sizeof(why), "zookeeper_init: %s (bad connect "
				 "string or unresolvable host?)", strerror(err));
		} else {
			while (!c->connected && !c->ended && !zk->closing &&
			       dxl_now_ns() < attempt_end)
				wait_until(&zk->cond, &zk->mu, attempt_end);
		}
		if (zh && c->connected && !c->ended) {
			uint32_t to = c->timeout_ms;
			uint32_t lease = to * cfg->lease_pct / 100;
			atomic_store(&zk->lease_ms, lease);
			atomic_store(&zk->lease_until_ns, t0_boot + (uint64_t)lease * 1000000ull);
			atomic_store(&zk->session_id, c->session_id);
			pthread_mutex_unlock(&zk->mu);
			if (to != cfg->session_timeout_ms)
				DXL_WARN("zookeeper %s: the server negotiated a session "
					 "timeout of %u ms instead of %u ms (its "
					 "min/maxSessionTimeout, tickTime): failure "
					 "detection and the lease follow the server",
					 cfg->connect, to, cfg->session_timeout_ms);
			DXL_INFO("zookeeper %s: session 0x%llx (epoch %llu), timeout "
				 "%u ms, lease %u ms", cfg->connect,
				 (unsigned long long)c->session_id,
				 (unsigned long long)epoch, to, lease);
			return 0;
		}
		/* failed attempt: drop it (events it queued are ignored: their
		 * conn id is not current any more) */
		zk->conn = NULL;
		bool closing = zk->closing;
		pthread_mutex_unlock(&zk->mu);
		if (zh)
			log_last(why, sizeof(why));
		zk_conn_put(c);
		if (closing)
			return dxl_err_set(DXL_E_STATE, "zookeeper %s: closing",
					   cfg->connect);

		uint64_t now = dxl_now_ns();
		if (now >= deadline)
			break;
		uint64_t wake = now + (uint64_t)backoff * 1000000ull;
		if (wake > deadline)
			wake = deadline;
		pthread_mutex_lock(&zk->mu);
		while (!zk->closing && dxl_now_ns() < wake)
			wait_until(&zk->cond, &zk->mu, wake);
		pthread_mutex_unlock(&zk->mu);
		backoff = DXL_MIN(backoff * 2, cfg->retry_max_ms);
		if (dxl_now_ns() >= deadline)
			break;
	}
	return dxl_err_set(DXL_E_UNAVAIL,
			   "zookeeper %s (cluster '%s'): no session after %u "
			   "attempt(s) in %llu ms (last: %s); is ZooKeeper "
			   "running and reachable there?",
			   cfg->connect, cfg->cluster, attempts,
			   (unsigned long long)((dxl_now_ns() - start) / 1000000ull),
			   why);
}

static int fault_take_zk(struct dxl_zk *zk, unsigned op, const char *path);

int zk_acquire(struct dxl_zk *zk, struct zk_conn **out, const char *what)
{
	if (fault_take_zk(zk, DXL_ZK_OP_ACQUIRE, what))
		return dxl_err_set(DXL_E_UNAVAIL, "%s: not connected to zookeeper %s (injected)",
				   what, zk->cfg.connect);
	uint32_t wait_ms = zk->cfg.op_timeout_ms ? zk->cfg.op_timeout_ms
						 : atomic_load(&zk->timeout_ms);
	if (!wait_ms)
		wait_ms = zk->cfg.session_timeout_ms;
	uint64_t deadline = dxl_now_ns() + (uint64_t)wait_ms * 1000000ull;
	pthread_mutex_lock(&zk->mu);
	for (;;) {
		int st = atomic_load(&zk->state);
		struct zk_conn *c = zk->conn;
		if (zk->closing) {
			pthread_mutex_unlock(&zk->mu);
			return dxl_err_set(DXL_E_STATE, "%s: zookeeper handle is closing",
					   what);
		}
		if (c && st == DXL_ZK_CONNECTED) {
			c->refs++;
			pthread_mutex_unlock(&zk->mu);
			*out = c;
			return 0;
		}
		if (st == DXL_ZK_EXPIRED) {
			pthread_mutex_unlock(&zk->mu);
			return dxl_err_set(DXL_E_STATE,
					   "%s: the zookeeper session has expired "
					   "(dxl_zk_reopen starts a new one)", what);
		}
		if (dxl_now_ns() >= deadline) {
			pthread_mutex_unlock(&zk->mu);
			return dxl_err_set(DXL_E_UNAVAIL,
					   "%s: not connected to zookeeper %s for %u ms "
					   "(state %s)", what, zk->cfg.connect, wait_ms,
					   dxl_zk_state_name((enum dxl_zk_state)st));
		}
		wait_until(&zk->cond, &zk->mu, deadline);
	}
}

/* ---- data helpers ----------------------------------------------------------- */

static int fault_take(struct zk_conn *c, unsigned op, const char *path);

int zk_get(struct zk_conn *c, const char *path, bool watch, char **data,
	   int *len, struct Stat *st)
{
	int cap = 4096;
	for (;;) {
		char *buf = malloc((size_t)cap + 1);
		if (!buf)
			return ZMARSHALLINGERROR;
		int n = cap;
		if (fault_take(c, DXL_ZK_OP_READ, path)) {
			free(buf);
			return ZCONNECTIONLOSS;
		}
		int rc = watch ? zoo_wget(c->zh, path, zk_watcher, c, buf, &n, st)
			       : zoo_get(c->zh, path, 0, buf, &n, st);
		if (rc != ZOK) {
			free(buf);
			return rc;
		}
		if (st->dataLength > cap) { /* truncated: it grew; read again */
			free(buf);
			cap = st->dataLength;
			continue;
		}
		if (n < 0) /* no data at all */
			n = 0;
		buf[n] = 0;
		*data = buf;
		*len = n;
		return ZOK;
	}
}

int zk_children(struct zk_conn *c, const char *path, bool watch,
		struct String_vector *out)
{
	memset(out, 0, sizeof(*out));
	if (fault_take(c, DXL_ZK_OP_LIST, path))
		return ZCONNECTIONLOSS;
	return watch ? zoo_wget_children(c->zh, path, zk_watcher, c, out)
		     : zoo_get_children(c->zh, path, 0, out);
}

/* ---- the fault shim (dxl_zk_inject_fault) ---------------------------------------- */

static const char *op_name(unsigned op)
{
	switch (op) {
	case DXL_ZK_OP_CREATE: return "create";
	case DXL_ZK_OP_SET: return "set";
	case DXL_ZK_OP_DELETE: return "delete";
	case DXL_ZK_OP_LIST: return "list";
	case DXL_ZK_OP_READ: return "read";
	case DXL_ZK_OP_ACQUIRE: return "acquire";
	}
	return "?";
}

static const char *kind_name(int kind)
{
	return kind == DXL_ZK_LOSE_REPLY     ? "lost_reply"
	       : kind == DXL_ZK_LATE_APPLY ? "late_apply"
					     : "lost_request";
}

/* fault_take_zk -- the fault to inject into this call (a dxl_zk_fault_kind),
 * 0 for none; counts it */
static int fault_take_zk(struct dxl_zk *zk, unsigned op, const char *path)
{
	int kind = 0;
	pthread_mutex_lock(&zk->fault_mu);
	for (unsigned i = 0; i < zk->nfaults && !kind; i++) {
		struct zk_fault *f = &zk->faults[i];
		if (!(f->ops & op) || !strstr(path, f->part) || f->count == UINT32_MAX)
			continue;
		if (f->skip) {
			f->skip--;
			continue;
		}
		kind = f->kind;
		if (f->count && --f->count == 0)
			f->count = UINT32_MAX; /* used up */
	}
	pthread_mutex_unlock(&zk->fault_mu);
	if (kind) {
		atomic_fetch_add(&zk->faults_fired, 1);
		DXL_WARN("event=zk_fault_injected op=%s path=%s kind=%s", op_name(op), path,
			 kind_name(kind));
	}
	return kind;
}

static int fault_take(struct zk_conn *c, unsigned op, const char *path)
{
	return fault_take_zk(c->zk, op, path);
}

/* late_hold -- keep a write to apply later (DXL_ZK_LATE_APPLY): one at a
 * time; an older one still held is applied first */
static void late_flush(struct zk_conn *c);
static void late_hold(struct zk_conn *c, unsigned op, const char *path, const char *data,
		      int len, int flags, int version)
{
	late_flush(c);
	struct dxl_zk *zk = c->zk;
	char *copy = NULL;
	if (data && len > 0 && (copy = malloc((size_t)len)))
		memcpy(copy, data, (size_t)len);
	pthread_mutex_lock(&zk->fault_mu);
	zk->late.op = op;
	snprintf(zk->late.path, sizeof(zk->late.path), "%s", path);
	zk->late.data = copy;
	zk->late.len = copy ? len : -1;
	zk->late.flags = flags;
	zk->late.version = version;
	pthread_mutex_unlock(&zk->fault_mu);
}

/* late_flush -- apply the write held back, if any (before any other write) */
static void late_flush(struct zk_conn *c)
{
	struct dxl_zk *zk = c->zk;
	pthread_mutex_lock(&zk->fault_mu);
	struct zk_late l = zk->late;
	zk->late.op = 0;
	zk->late.data = NULL;
	pthread_mutex_unlock(&zk->fault_mu);
	if (!l.op)
		return;
	int rc = ZOK;
	char made[ZK_PATH_MAX + 64] = "";
	struct Stat st;
	if (l.op == DXL_ZK_OP_CREATE)
		rc = zoo_create(c->zh, l.path, l.data, l.len, &ZOO_OPEN_ACL_UNSAFE, l.flags, made,
				(int)sizeof(made));
	else if (l.op == DXL_ZK_OP_SET)
		rc = zoo_set2(c->zh, l.path, l.data, l.len, l.version, &st);
	else
		rc = zoo_delete(c->zh, l.path, l.version);
	DXL_WARN("event=zk_fault_late_applied op=%s path=%s made=%s rc=%d", op_name(l.op), l.path,
		 made, rc);
	free(l.data);
}

int zkx_create(struct zk_conn *c, const char *path, const char *data, int len,
	       int flags, char *made, int madecap)
{
	late_flush(c);
	int kind = fault_take(c, DXL_ZK_OP_CREATE, path);
	if (kind == DXL_ZK_LATE_APPLY)
		late_hold(c, DXL_ZK_OP_CREATE, path, data, len, flags, 0);
	if (kind == DXL_ZK_LOSE_REQUEST || kind == DXL_ZK_LATE_APPLY)
		return ZCONNECTIONLOSS;
	int rc = zoo_create(c->zh, path, data, len, &ZOO_OPEN_ACL_UNSAFE, flags, made,
			    madecap);
	return kind == DXL_ZK_LOSE_REPLY ? ZCONNECTIONLOSS : rc;
}

int zkx_set(struct zk_conn *c, const char *path, const char *data, int len,
	    int version, struct Stat *st)
{
	late_flush(c);
	int kind = fault_take(c, DXL_ZK_OP_SET, path);
	if (kind == DXL_ZK_LATE_APPLY)
		late_hold(c, DXL_ZK_OP_SET, path, data, len, 0, version);
	if (kind == DXL_ZK_LOSE_REQUEST || kind == DXL_ZK_LATE_APPLY)
		return ZCONNECTIONLOSS;
	struct Stat tmp;
	int rc = zoo_set2(c->zh, path, data, len, version, st ? st : &tmp);
	return kind == DXL_ZK_LOSE_REPLY ? ZCONNECTIONLOSS : rc;
}

int zkx_delete(struct zk_conn *c, const char *path, int version)
{
	late_flush(c);
	int kind = fault_take(c, DXL_ZK_OP_DELETE, path);
	if (kind == DXL_ZK_LATE_APPLY)
		late_hold(c, DXL_ZK_OP_DELETE, path, NULL, -1, 0, version);
	if (kind == DXL_ZK_LOSE_REQUEST || kind == DXL_ZK_LATE_APPLY)
		return ZCONNECTIONLOSS;
	int rc = zoo_delete(c->zh, path, version);
	return kind == DXL_ZK_LOSE_REPLY ? ZCONNECTIONLOSS : rc;
}

int dxl_zk_inject_fault(struct dxl_zk *zk, unsigned ops, const char *path_part,
			enum dxl_zk_fault_kind kind, uint32_t skip, uint32_t count)
{
	if (!zk || !ops || (ops & ~DXL_ZK_OP_ALL) || !path_part ||
	    strlen(path_part) >= sizeof(zk->faults[0].part) ||
	    (kind != DXL_ZK_LOSE_REPLY && kind != DXL_ZK_LOSE_REQUEST &&
	     kind != DXL_ZK_LATE_APPLY) ||
	    (kind != DXL_ZK_LOSE_REQUEST &&
	     (ops & (DXL_ZK_OP_LIST | DXL_ZK_OP_READ | DXL_ZK_OP_ACQUIRE))))
		return dxl_err_set(DXL_E_INVAL, "dxl_zk_inject_fault: bad argument (ops 0x%x, a "
				   "lost reply or a late apply is for writes only)", ops);
	pthread_mutex_lock(&zk->fault_mu);
	int ret = 0;
	if (zk->nfaults >= DXL_ARRAY_SIZE(zk->faults)) {
		ret = dxl_err_set(DXL_E_FULL, "dxl_zk_inject_fault: %zu faults armed already",
				  DXL_ARRAY_SIZE(zk->faults));
	} else {
		struct zk_fault *f = &zk->faults[zk->nfaults++];
		f->ops = ops;
		snprintf(f->part, sizeof(f->part), "%s", path_part);
		f->kind = kind;
		f->skip = skip;
		f->count = count;
	}
	pthread_mutex_unlock(&zk->fault_mu);
	return ret;
}

int dxl_zk_inject_faults(struct dxl_zk *zk, const char *spec)
{
	if (!zk || !spec)
		return dxl_err_set(DXL_E_INVAL, "dxl_zk_inject_faults: NULL argument");
	char *copy = strdup(spec), *save = NULL;
	if (!copy)
		return dxl_err_set(DXL_E_NOMEM, "dxl_zk_inject_faults");
	int ret = 0;
	for (char *r = strtok_r(copy, ",", &save); r && !ret; r = strtok_r(NULL, ",", &save)) {
		char *f[5] = {0};
		int n = 0;
		for (char *p = r; p && n < 5; n++) {
			f[n] = p;
			p = strchr(p, ':');
			if (p)
				*p++ = 0;
		}
		unsigned ops = 0;
		char *osave = NULL;
		for (char *o = n >= 3 ? strtok_r(f[0], "+", &osave) : NULL; o;
		     o = strtok_r(NULL, "+", &osave)) {
			unsigned k = 0;
			for (unsigned b = 1; b <= DXL_ZK_OP_ACQUIRE; b <<= 1)
				if (!strcmp(o, op_name(b)))
					k = b;
			if (!k) {
				ops = 0;
				break;
			}
			ops |= k;
		}
		int kind = n >= 3 && !strcmp(f[2], "reply")	  ? DXL_ZK_LOSE_REPLY
			   : n >= 3 && !strcmp(f[2], "request") ? DXL_ZK_LOSE_REQUEST
			   : n >= 3 && !strcmp(f[2], "late")    ? DXL_ZK_LATE_APPLY
								  : 0;
		uint64_t skip = 0, count = 1;
		if (!ops || !kind || (n > 3 && dxl_parse_u64(f[3], &skip)) ||
		    (n > 4 && dxl_parse_u64(f[4], &count)) || skip > UINT32_MAX - 1 ||
		    count > UINT32_MAX - 1) {
			ret = dxl_err_set(DXL_E_INVAL, "fault '%s': want op[+op]:path_part:reply|request|late"
					  "[:skip[:count]] (ops create set delete list read acquire)", r);
			break;
		}
		ret = dxl_zk_inject_fault(zk, ops, f[1], (enum dxl_zk_fault_kind)kind,
					  (uint32_t)skip, (uint32_t)count);
	}
	free(copy);
	return ret;
}

uint32_t dxl_zk_faults_fired(const struct dxl_zk *zk)
{
	return atomic_load(&((struct dxl_zk *)zk)->faults_fired);
}

void dxl_zk_clear_faults(struct dxl_zk *zk)
{
	pthread_mutex_lock(&zk->fault_mu);
	zk->nfaults = 0;
	pthread_mutex_unlock(&zk->fault_mu);
}

int zk_delete_own(struct zk_conn *c, const char *path)
{
	struct Stat st;
	int rc = zk_exists(c, path, false, &st);
	if (rc == ZNONODE || (rc == ZOK && st.ephemeralOwner != zk_conn_session(c)))
		return dxl_err_set(DXL_E_NOENT, "%s is not held by this session", path);
	if (rc != ZOK)
		return zk_err(rc, "exists", path);
	if ((rc = zkx_delete(c, path, st.version)) != ZOK)
		return zk_err(rc, "delete", path);
	return 0;
}

int zk_exists(struct zk_conn *c, const char *path, bool watch, struct Stat *st)
{
	if (fault_take(c, DXL_ZK_OP_READ, path))
		return ZCONNECTIONLOSS;
	return watch ? zoo_wexists(c->zh, path, zk_watcher, c, st)
		     : zoo_exists(c->zh, path, 0, st);
}

/* ---- the lease ------------------------------------------------------------------ */

struct renew_token {
	struct dxl_zk *zk;
	uint64_t conn_id;
	uint64_t seq;
	uint64_t sent_boot_ns; /* dxl_boot_ns() when sent: the lease's clock */
};

/* renew_done -- ZooKeeper completion thread. A successful sync proves the
 * server saw the session alive after sent_boot_ns, so it cannot expire it before
 * sent_boot_ns + timeout: the lease may run to sent_boot_ns + lease_ms. */
static void renew_done(int rc, const char *value, const void *data)
{
	struct renew_token *t = (struct renew_token *)data;
	struct dxl_zk *zk = t->zk;
	pthread_mutex_lock(&zk->mu);
	if (rc == ZOK && zk->conn && zk->conn->id == t->conn_id) {
		uint64_t until = t->sent_boot_ns +
				 (uint64_t)atomic_load(&zk->lease_ms) * 1000000ull;
		uint64_t old = atomic_load(&zk->lease_until_ns);
		/* only grows (an older renewal may complete late) */
		while (until > old &&
		       !atomic_compare_exchange_weak(&zk->lease_until_ns, &old, until))
			;
	} else if (rc != ZOK) {
		DXL_DEBUG("zookeeper %s: lease renewal failed: %s", zk->cfg.connect,
			  zerror(rc));
	}
	if (t->seq == zk->renew_seq)
		zk->renew_inflight = false;
	pthread_mutex_unlock(&zk->mu);
	free(t);
}

static void *lease_main(void *arg)
{
	struct dxl_zk *zk = arg;
	uint64_t next = 0;
	pthread_mutex_lock(&zk->mu);
	while (!zk->lease_stop) {
		uint64_t now = dxl_now_ns();
		if (!zk->lease_kick && now < next) {
			wait_until(&zk->lease_cond, &zk->mu, next);
			continue;
		}
		zk->lease_kick = false;
		uint32_t to = atomic_load(&zk->timeout_ms);
		uint64_t period = (uint64_t)DXL_MAX(to / 6, 10u) * 1000000ull;
		next = now + period;
		struct zk_conn *c = zk->conn;
		if (atomic_load(&zk->state) != DXL_ZK_CONNECTED || !c)
			continue;
		/* one renewal in flight; the library answers every request
		 * (with an error on connection loss), but do not depend on it */
		if (zk->renew_inflight &&
		    now - zk->renew_sent_ns < 2ull * to * 1000000ull)
			continue;
		struct renew_token *t = malloc(sizeof(*t));
		if (!t)
			continue;
		t->zk = zk;
		t->conn_id = c->id;
		t->seq = ++zk->renew_seq;
		t->sent_boot_ns = dxl_boot_ns();
		zk->renew_inflight = true;
		zk->renew_sent_ns = now;
		c->refs++;
		pthread_mutex_unlock(&zk->mu);
		/* "sync" goes through the quorum leader in an ensemble, so an
		 * answer also proves the server we talk to is not cut off */
		int rc = zoo_async(c->zh, "/", renew_done, t);
		if (rc != ZOK) {
			pthread_mutex_lock(&zk->mu);
			if (zk->renew_seq == t->seq)
				zk->renew_inflight = false;
			pthread_mutex_unlock(&zk->mu);
			free(t);
		}
		zk_conn_put(c);
		pthread_mutex_lock(&zk->mu);
	}
	pthread_mutex_unlock(&zk->mu);
	return NULL;
}

bool dxl_zk_lease_valid(const struct dxl_zk *zk)
{
	return dxl_zk_lease_until_ns(zk) != 0;
}

uint64_t dxl_zk_lease_until_ns(const struct dxl_zk *zk)
{
	struct dxl_zk *z = (struct dxl_zk *)zk;
	if (atomic_load(&z->state) != DXL_ZK_CONNECTED)
		return 0;
	uint64_t until = atomic_load(&z->lease_until_ns);
	return dxl_boot_ns() < until ? until : 0;
}

uint32_t dxl_zk_lease_ms(const struct dxl_zk *zk)
{
	return atomic_load(&((struct dxl_zk *)zk)->lease_ms);
}

/* ---- observers and the event thread ------------------------------------------- */

bool zk_on_event_thread(const struct dxl_zk *zk)
{
	return zk->ev_started && pthread_equal(pthread_self(), zk->ev_thread);
}

void zk_obs_add(struct dxl_zk *zk, struct zk_obs *o)
{
	o->zk = zk;
	atomic_store(&o->dead, false);
	pthread_mutex_lock(&zk->mu);
	o->dirty = true;
	o->retry_at_ns = 0;
	o->next = zk->obs;
	zk->obs = o;
	pthread_cond_signal(&zk->ev_cond);
	pthread_mutex_unlock(&zk->mu);
}

void zk_obs_quiesce(struct zk_obs *o)
{
	struct dxl_zk *zk = o->zk;
	if (zk_on_event_thread(zk))
		return;
	pthread_mutex_lock(&zk->mu);
	while (zk->cur == o)
		pthread_cond_wait(&zk->cond, &zk->mu);
	pthread_mutex_unlock(&zk->mu);
}

/* set by zk_obs_remove on the event thread inside o's own callback: the
 * event loop frees o once the callback has returned */
static __thread struct zk_obs *tl_free_after;

void zk_obs_remove(struct zk_obs *o)
{
	struct dxl_zk *zk = o->zk;
	atomic_store(&o->dead, true);
	pthread_mutex_lock(&zk->mu);
	for (struct zk_obs **pp = &zk->obs; *pp; pp = &(*pp)->next) {
		if (*pp == o) {
			*pp = o->next;
			break;
		}
	}
	if (zk->cur == o && zk_on_event_thread(zk)) {
		tl_free_after = o;
		pthread_mutex_unlock(&zk->mu);
		return;
	}
	while (zk->cur == o)
		pthread_cond_wait(&zk->cond, &zk->mu);
	pthread_mutex_unlock(&zk->mu);
	o->destroy(o);
}

/* run fn on observer o as the current one (zk->mu held on entry and exit) */
static int run_obs(struct dxl_zk *zk, struct zk_obs *o,
		   int (*fn)(struct zk_obs *o))
{
	zk->cur = o;
	pthread_mutex_unlock(&zk->mu);
	tl_free_after = NULL;
	int rc = fn(o);
	pthread_mutex_lock(&zk->mu);
	zk->cur = NULL;
	pthread_cond_broadcast(&zk->cond);
	if (tl_free_after == o) {
		tl_free_after = NULL;
		pthread_mutex_unlock(&zk->mu);
		o->destroy(o);
		pthread_mutex_lock(&zk->mu);
		return 0;
	}
	return rc;
}

static int call_session_lost(struct zk_obs *o)
{
	if (o->session_lost && !atomic_load(&o->dead))
		o->session_lost(o);
	return 0;
}

/* every observer: session_lost, then dirty (zk->mu held) */
static void all_session_lost(struct dxl_zk *zk)
{
	/* observers may come and go during the callbacks: mark, then pick
	 * marked ones one by one */
	for (struct zk_obs *o = zk->obs; o; o = o->next)
		o->lost_pending = true;
	for (;;) {
		struct zk_obs *o = zk->obs;
		while (o && !o->lost_pending)
			o = o->next;
		if (!o)
			break;
		o->lost_pending = false;
		o->retry_at_ns = 0;
		o->dirty = true;
		run_obs(zk, o, call_session_lost);
	}
}

static void report_state(struct dxl_zk *zk, int s)
{
	if (s == zk->ev_reported)
		return;
	zk->ev_reported = s;
	if (zk->cfg.on_state) {
		pthread_mutex_unlock(&zk->mu);
		zk->cfg.on_state(zk, zk->cfg.arg, (enum dxl_zk_state)s);
		pthread_mutex_lock(&zk->mu);
	}
}

/* ev_handle -- one ZooKeeper event, on the event thread, zk->mu held */
static void ev_handle(struct dxl_zk *zk, struct zk_event *ev)
{
	if (!zk->conn || ev->conn_id != zk->conn->id)
		return; /* from a handle that is gone */
	if (ev->type != ZOO_SESSION_EVENT) {
		for (struct zk_obs *o = zk->obs; o; o = o->next)
			if (o->wants(o, ev->type, ev->path)) {
				o->dirty = true;
				o->retry_at_ns = 0;
			}
		return;
	}
	int s = map_state(ev->state);
	if (s < 0)
		return;
	if (ev->epoch != zk->ev_epoch) {
		/* first event of a new session: what hung on the old one is
		 * gone (if EXPIRED was not seen, e.g. a reopen of a live
		 * session), everything re-syncs */
		if (!zk->ev_lost_done && zk->ev_epoch != 0)
			all_session_lost(zk);
		zk->ev_epoch = ev->epoch;
		zk->ev_lost_done = false;
		zk->ev_reported = -1;
	}
	if (s == DXL_ZK_CONNECTED) {
		/* after a reconnection the library re-arms watches itself;
		 * a re-sync costs little and covers what a lost event would
		 * have missed */
		for (struct zk_obs *o = zk->obs; o; o = o->next) {
			o->dirty = true;
			o->retry_at_ns = 0;
		}
	} else if (s == DXL_ZK_EXPIRED && !zk->ev_lost_done) {
		zk->ev_lost_done = true;
		all_session_lost(zk);
	}
	if (s == DXL_ZK_DISCONNECTED && zk->ev_reported != DXL_ZK_CONNECTED)
		return;
	report_state(zk, s);
}

static void *ev_main(void *arg)
{
	struct dxl_zk *zk = arg;
	pthread_mutex_lock(&zk->mu);
	while (!zk->ev_stop) {
		struct zk_event *ev = zk->ev_head;
		if (ev) {
			zk->ev_head = ev->next;
			if (!zk->ev_head)
				zk->ev_tail = NULL;
			ev_handle(zk, ev);
			free(ev);
			continue;
		}
		uint64_t now = dxl_now_ns(), next = UINT64_MAX;
		struct zk_obs *o;
		for (o = zk->obs; o; o = o->next) {
			if (!o->dirty)
				continue;
			if (o->retry_at_ns <= now)
				break;
			next = DXL_MIN(next, o->retry_at_ns);
		}
		if (o && atomic_load(&zk->state) == DXL_ZK_CONNECTED) {
			o->dirty = false;
			int rc = run_obs(zk, o, o->sync);
			/* o may be freed now (rc 0 then); look it up again */
			struct zk_obs *p = zk->obs;
			while (p && p != o)
				p = p->next;
			if (p && rc < 0) {
				/* retry with backoff: 50 ms doubling to 2 s */
				p->backoff_ms = p->backoff_ms ? DXL_MIN(p->backoff_ms * 2, 2000u)
							      : 50u;
				p->retry_at_ns = dxl_now_ns() +
						 (uint64_t)p->backoff_ms * 1000000ull;
				p->dirty = true;
				DXL_DEBUG("zookeeper %s: %s sync failed (%s), retry in "
					  "%u ms", zk->cfg.connect, p->kind,
					  dxl_errmsg(), p->backoff_ms);
			} else if (p) {
				p->backoff_ms = 0;
			}
			continue;
		}
		/* not connected: the CONNECTED event will mark everything */
		wait_until(&zk->ev_cond, &zk->mu,
			   atomic_load(&zk->state) == DXL_ZK_CONNECTED ? next
								   : UINT64_MAX);
	}
	pthread_mutex_unlock(&zk->mu);
	return NULL;
}

/* ---- configuration ------------------------------------------------------------- */

void dxl_zk_cfg_init(struct dxl_zk_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->cluster, sizeof(cfg->cluster), "default");
	cfg->session_timeout_ms = 3000;
	cfg->connect_timeout_ms = 10000;
	cfg->retry_initial_ms = 100;
	cfg->retry_max_ms = 2000;
	cfg->lease_pct = 50;
	cfg->op_timeout_ms = 0;
	cfg->writer_slots_max = 4096;
}

static int cfg_check(const struct dxl_zk_cfg *c)
{
	if (!memchr(c->connect, 0, sizeof(c->connect)) || !c->connect[0])
		return dxl_err_set(DXL_E_INVAL, "zookeeper: empty connect string "
				   "(\"host:port[,host:port...]\")");
	if (!memchr(c->cluster, 0, sizeof(c->cluster)) ||
	    !zk_name_ok(c->cluster, DXL_ZK_CLUSTER_MAX))
		return dxl_err_set(DXL_E_INVAL, "zookeeper: bad cluster name '%.*s' "
				   "(letters, digits, '_', '-', '.'; 1..63 chars)",
				   (int)DXL_ZK_CLUSTER_MAX - 1, c->cluster);
	if (c->session_timeout_ms < 100 || c->session_timeout_ms > 600000)
		return dxl_err_set(DXL_E_INVAL, "zookeeper: session timeout %u ms "
				   "out of [100, 600000]", c->session_timeout_ms);
	if (c->connect_timeout_ms < 1 || c->connect_timeout_ms > 3600000)
		return dxl_err_set(DXL_E_INVAL, "zookeeper: connect timeout %u ms "
				   "out of [1, 3600000]", c->connect_timeout_ms);
	if (c->retry_initial_ms < 1 || c->retry_max_ms < c->retry_initial_ms ||
	    c->retry_max_ms > 600000)
		return dxl_err_set(DXL_E_INVAL, "zookeeper: retry backoff %u..%u ms "
				   "invalid", c->retry_initial_ms, c->retry_max_ms);
	if (c->lease_pct < 10 || c->lease_pct > 60)
		return dxl_err_set(DXL_E_INVAL, "zookeeper: lease_pct %u out of "
				   "[10, 60] (docs/membership.md: Leases)", c->lease_pct);
	if (c->op_timeout_ms > 3600000)
		return dxl_err_set(DXL_E_INVAL, "zookeeper: op timeout %u ms too "
				   "large", c->op_timeout_ms);
	if (c->writer_slots_max < 1 || c->writer_slots_max > 1048576)
		return dxl_err_set(DXL_E_INVAL, "zookeeper: writer_slots_max %u out of "
				   "[1, 1048576]", c->writer_slots_max);
	return 0;
}

static const char *const known_keys[] = {
	"zk.connect",          "zk.cluster",         "zk.session_timeout_ms",
	"zk.connect_timeout_ms", "zk.retry_initial_ms", "zk.retry_max_ms",
	"zk.lease_pct",        "zk.op_timeout_ms",   "zk.writer_slots_max", NULL,
};

int dxl_zk_cfg_load(const struct dxl_config *conf, struct dxl_zk_cfg *out)
{
	struct dxl_zk_cfg c = *out;
	int ret = dxl_config_check_known_prefix(conf, "zk.", known_keys);
	if (ret)
		return ret;
	const char *s;
	dxl_config_get_str(conf, "zk.connect", c.connect, &s);
	if (s != c.connect) {
		if (!s[0] || strlen(s) >= sizeof(c.connect))
			return dxl_err_set(DXL_E_CONFIG, "%s: key zk.connect: empty or "
					   "longer than %d bytes",
					   dxl_config_origin(conf, "zk.connect"),
					   DXL_ZK_CONNECT_MAX - 1);
		snprintf(c.connect, sizeof(c.connect), "%s", s);
	}
	dxl_config_get_str(conf, "zk.cluster", c.cluster, &s);
	if (s != c.cluster) {
		if (!zk_name_ok(s, DXL_ZK_CLUSTER_MAX))
			return dxl_err_set(DXL_E_CONFIG, "%s: key zk.cluster: '%s' is "
					   "not a cluster name (letters, digits, "
					   "'_', '-', '.'; 1..63 chars)",
					   dxl_config_origin(conf, "zk.cluster"), s);
		snprintf(c.cluster, sizeof(c.cluster), "%s", s);
	}
	uint64_t v;
#define U32_KEY(key, field, lo, hi)                                           \
	do {                                                                  \
		if ((ret = dxl_config_get_u64(conf, key, c.field, lo, hi, &v))) \
			return ret;                                           \
		c.field = (uint32_t)v;                                        \
	} while (0)
	U32_KEY("zk.session_timeout_ms", session_timeout_ms, 100, 600000);
	U32_KEY("zk.connect_timeout_ms", connect_timeout_ms, 1, 3600000);
	U32_KEY("zk.retry_initial_ms", retry_initial_ms, 1, 600000);
	U32_KEY("zk.retry_max_ms", retry_max_ms, 1, 600000);
	U32_KEY("zk.lease_pct", lease_pct, 10, 60);
	U32_KEY("zk.op_timeout_ms", op_timeout_ms, 0, 3600000);
	U32_KEY("zk.writer_slots_max", writer_slots_max, 1, 1048576);
#undef U32_KEY
	if (c.retry_max_ms < c.retry_initial_ms)
		return dxl_err_set(DXL_E_CONFIG, "%s: key zk.retry_max_ms: %u is "
				   "below zk.retry_initial_ms (%u)",
				   dxl_config_origin(conf, "zk.retry_max_ms") ?
					   dxl_config_origin(conf, "zk.retry_max_ms") :
					   "default",
				   c.retry_max_ms, c.retry_initial_ms);
	*out = c;
	return 0;
}

/* ---- life cycle -------------------------------------------------------------- */

static int create_tree(struct dxl_zk *zk)
{
	struct zk_conn *c;
	int ret = zk_acquire(zk, &c, "creating the cluster's znodes");
	if (ret)
		return ret;
	char path[ZK_PATH_MAX];
	const char *const rel[] = {"", "nodes", "cm", "cursors"};
	/* /dxl first, then the root, then its directories */
	ret = 0;
	int rc = zoo_create(c->zh, "/dxl", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0,
			    NULL, 0);
	if (rc != ZOK && rc != ZNODEEXISTS)
		ret = zk_err(rc, "create", "/dxl");
	for (size_t i = 0; !ret && i < DXL_ARRAY_SIZE(rel); i++) {
		if (i == 0)
			snprintf(path, sizeof(path), "%s", zk->root);
		else if ((ret = zk_path(zk, path, "%s", rel[i])))
			break;
		rc = zoo_create(c->zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL,
				0);
		if (rc != ZOK && rc != ZNODEEXISTS)
			ret = zk_err(rc, "create", path);
	}
	zk_conn_put(c);
	return ret;
}

static void free_events(struct dxl_zk *zk)
{
	while (zk->ev_head) {
		struct zk_event *ev = zk->ev_head;
		zk->ev_head = ev->next;
		free(ev);
	}
	zk->ev_tail = NULL;
}

static void stop_threads(struct dxl_zk *zk)
{
	pthread_mutex_lock(&zk->mu);
	zk->ev_stop = true;
	zk->lease_stop = true;
	pthread_cond_broadcast(&zk->ev_cond);
	pthread_cond_broadcast(&zk->lease_cond);
	pthread_mutex_unlock(&zk->mu);
	if (zk->ev_started)
		pthread_join(zk->ev_thread, NULL);
	if (zk->lease_started)
		pthread_join(zk->lease_thread, NULL);
	zk->ev_started = zk->lease_started = false;
}

static void zk_free(struct dxl_zk *zk)
{
	pthread_mutex_lock(&zk->mu);
	zk->closing = true;
	atomic_store(&zk->state, DXL_ZK_CLOSED);
	pthread_cond_broadcast(&zk->cond);
	pthread_mutex_unlock(&zk->mu);
	stop_threads(zk);
	pthread_mutex_lock(&zk->mu);
	struct zk_conn *c = zk->conn;
	zk->conn = NULL;
	pthread_mutex_unlock(&zk->mu);
	zk_conn_put(c); /* closes the session: ephemeral znodes go at once */
	while (zk->obs) {
		struct zk_obs *o = zk->obs;
		zk->obs = o->next;
		atomic_store(&o->dead, true);
		o->destroy(o);
	}
	free_events(zk);
	pthread_cond_destroy(&zk->cond);
	pthread_cond_destroy(&zk->ev_cond);
	pthread_cond_destroy(&zk->lease_cond);
	pthread_mutex_destroy(&zk->mu);
	pthread_mutex_destroy(&zk->reopen_mu);
	pthread_mutex_destroy(&zk->fault_mu);
	pthread_mutex_destroy(&zk->writers.mu);
	free(zk->writers.held);
	free(zk->late.data);
	free(zk);
}

struct zk_writers *zk_writers_of(struct dxl_zk *zk)
{
	return &zk->writers;
}

uint32_t zk_writer_slots_max(const struct dxl_zk *zk)
{
	return zk->cfg.writer_slots_max;
}

int dxl_zk_new(const struct dxl_zk_cfg *cfg, struct dxl_zk **out)
{
	if (!cfg || !out)
		return dxl_err_set(DXL_E_INVAL, "dxl_zk_new: NULL argument");
	int ret = cfg_check(cfg);
	if (ret)
		return ret;
	struct dxl_zk *zk = calloc(1, sizeof(*zk));
	if (!zk)
		return dxl_err_set(DXL_E_NOMEM, "dxl_zk_new");
	zk->cfg = *cfg;
	snprintf(zk->root, sizeof(zk->root), "/dxl/%s", cfg->cluster);
	pthread_mutex_init(&zk->mu, NULL);
	pthread_mutex_init(&zk->reopen_mu, NULL);
	pthread_mutex_init(&zk->fault_mu, NULL);
	pthread_mutex_init(&zk->writers.mu, NULL);
	cond_init_mono(&zk->cond);
	cond_init_mono(&zk->ev_cond);
	cond_init_mono(&zk->lease_cond);
	atomic_store(&zk->state, DXL_ZK_CONNECTING);
	atomic_store(&zk->timeout_ms, cfg->session_timeout_ms);
	zk->ev_reported = DXL_ZK_CONNECTING;
	const char *faults = getenv("DXL_ZK_FAULTS");
	if (faults && *faults && dxl_zk_inject_faults(zk, faults)) {
		ret = dxl_err_set(DXL_E_INVAL, "DXL_ZK_FAULTS: %s", dxl_errmsg());
		zk_free(zk);
		return ret;
	}

	ret = connect_loop(zk, 1);
	if (!ret)
		ret = create_tree(zk);
	if (!ret && pthread_create(&zk->lease_thread, NULL, lease_main, zk) == 0)
		zk->lease_started = true;
	else if (!ret)
		ret = dxl_err_errno(EAGAIN, "zookeeper: lease thread");
	if (!ret && pthread_create(&zk->ev_thread, NULL, ev_main, zk) == 0)
		zk->ev_started = true;
	else if (!ret)
		ret = dxl_err_errno(EAGAIN, "zookeeper: event thread");
	if (ret) {
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
		zk_free(zk);
		return dxl_err_set(ret, "%s", msg);
	}
	*out = zk;
	return 0;
}

void dxl_zk_delete(struct dxl_zk **pzk)
{
	if (!pzk || !*pzk)
		return;
	struct dxl_zk *zk = *pzk;
	DXL_ASSERTF(!zk_on_event_thread(zk),
		    "dxl_zk_delete called from a callback of the same zk");
	zk_free(zk);
	*pzk = NULL;
}

int dxl_zk_reopen(struct dxl_zk *zk)
{
	pthread_mutex_lock(&zk->reopen_mu);
	pthread_mutex_lock(&zk->mu);
	if (zk->closing) {
		pthread_mutex_unlock(&zk->mu);
		pthread_mutex_unlock(&zk->reopen_mu);
		return dxl_err_set(DXL_E_STATE, "dxl_zk_reopen: closing");
	}
	struct zk_conn *old = zk->conn;
	zk->conn = NULL;
	uint64_t epoch = atomic_load(&zk->session_epoch) + 1;
	atomic_store(&zk->state, DXL_ZK_CONNECTING);
	atomic_store(&zk->lease_until_ns, 0);
	atomic_store(&zk->session_id, 0);
	pthread_cond_broadcast(&zk->cond);
	pthread_mutex_unlock(&zk->mu);
	/* ends the old session now if it is still alive and nobody else is
	 * inside a call on it (else when that call returns) */
	zk_conn_put(old);
	int ret = connect_loop(zk, epoch);
	if (ret) {
		pthread_mutex_lock(&zk->mu);
		if (!zk->closing)
			atomic_store(&zk->state, DXL_ZK_EXPIRED);
		pthread_cond_broadcast(&zk->cond);
		pthread_mutex_unlock(&zk->mu);
	}
	pthread_mutex_unlock(&zk->reopen_mu);
	return ret;
}

/* ---- accessors ---------------------------------------------------------------- */

enum dxl_zk_state dxl_zk_state(const struct dxl_zk *zk)
{
	return (enum dxl_zk_state)atomic_load(&((struct dxl_zk *)zk)->state);
}

uint32_t dxl_zk_session_timeout_ms(const struct dxl_zk *zk)
{
	return atomic_load(&((struct dxl_zk *)zk)->timeout_ms);
}

int64_t dxl_zk_session_id(const struct dxl_zk *zk)
{
	return atomic_load(&((struct dxl_zk *)zk)->session_id);
}

uint64_t dxl_zk_session_epoch(const struct dxl_zk *zk)
{
	return atomic_load(&((struct dxl_zk *)zk)->session_epoch);
}

const char *dxl_zk_root(const struct dxl_zk *zk)
{
	return zk->root;
}

const char *dxl_zk_connect_string(const struct dxl_zk *zk)
{
	return zk->cfg.connect;
}

int dxl_zk_server(struct dxl_zk *zk, char *buf, size_t cap)
{
	struct zk_conn *c;
	int ret = zk_acquire(zk, &c, "dxl_zk_server");
	if (ret)
		return ret;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "";
	int port = -1;
	if (zookeeper_get_connected_host(c->zh, (struct sockaddr *)&ss, &len)) {
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *a = (struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
			port = ntohs(a->sin_port);
		} else if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
			inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
			port = ntohs(a->sin6_port);
		}
	}
	zk_conn_put(c);
	if (port < 0)
		return dxl_err_set(DXL_E_UNAVAIL, "dxl_zk_server: not connected");
	if ((size_t)snprintf(buf, cap, "%s:%d", host, port) >= cap)
		return dxl_err_set(DXL_E_INVAL, "dxl_zk_server: buffer too small");
	return 0;
}

static void noop_watcher(zhandle_t *zh, int type, int state, const char *path,
			 void *ctx)
{
}

int dxl_zk_inject_expiry(struct dxl_zk *zk)
{
	struct zk_conn *c;
	int ret = zk_acquire(zk, &c, "dxl_zk_inject_expiry");
	if (ret)
		return ret;
	clientid_t cid;
	memcpy(&cid, zoo_client_id(c->zh), sizeof(cid));
	uint32_t to = atomic_load(&zk->timeout_ms);
	/* The takeover moves the session to a second connection, which then
	 * closes it. If our own handle reconnects in between, it takes the
	 * session back and the close fails: try again. */
	for (int attempt = 0; attempt < 5; attempt++) {
		zhandle_t *t = zookeeper_init2(zk->cfg.connect, noop_watcher, (int)to,
					       &cid, NULL, 0, zk_log_cb);
		if (!t) {
			ret = dxl_err_errno(errno, "dxl_zk_inject_expiry: zookeeper_init");
			break;
		}
		uint64_t deadline = dxl_now_ns() + (uint64_t)to * 1000000ull;
		while (zoo_state(t) != ZOO_CONNECTED_STATE &&
		       zoo_state(t) != ZOO_EXPIRED_SESSION_STATE &&
		       dxl_now_ns() < deadline) {
			struct timespec ts = {0, 2000000};
			nanosleep(&ts, NULL);
		}
		zookeeper_close(t);
		/* wait for our handle to learn it */
		pthread_mutex_lock(&zk->mu);
		deadline = dxl_now_ns() + 2ull * to * 1000000ull;
		while (!c->ended && dxl_now_ns() < deadline)
			wait_until(&zk->cond, &zk->mu, deadline);
		bool ended = c->ended;
		pthread_mutex_unlock(&zk->mu);
		if (ended) {
			ret = 0;
			break;
		}
		ret = dxl_err_set(DXL_E_UNAVAIL, "dxl_zk_inject_expiry: session "
				  "0x%llx still alive", (unsigned long long)cid.client_id);
	}
	zk_conn_put(c);
	return ret;
}
