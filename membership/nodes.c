/* nodes.c -- registration of live processes: ephemeral nodes/<id>, list, watch */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "membership/zk_internal.h"

/*
 * nodes/<id> is ephemeral: it exists exactly as long as the session that
 * created it. ZooKeeper refuses a second create of the same name, which is
 * what keeps two processes from registering one node id; the znode's
 * ephemeralOwner tells a retry of our own create (after a connection loss)
 * from someone else's registration.
 */

static bool parse_node_id(const char *s, uint32_t *out)
{
	if (!s[0] || (s[0] == '0' && s[1]) || strlen(s) > 10)
		return false;
	uint64_t v = 0;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return false;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (v > UINT32_MAX)
		return false;
	*out = (uint32_t)v;
	return true;
}

int zk_member_payload(struct dxl_zk *zk, int64_t session, uint32_t node_id,
		      const char *payload_json, char **out, size_t *len)
{
	if (!payload_json)
		return dxl_err_set(DXL_E_INVAL, "node %u: NULL payload", node_id);
	json_error_t je;
	json_t *o = json_loads(payload_json, JSON_REJECT_DUPLICATES, &je);
	if (!o)
		return dxl_err_set(DXL_E_INVAL, "node %u: payload is not JSON "
				   "(line %d column %d: %s)", node_id, je.line,
				   je.column, je.text);
	if (!json_is_object(o)) {
		json_decref(o);
		return dxl_err_set(DXL_E_INVAL, "node %u: payload must be a JSON "
				   "object", node_id);
	}
	char host[256] = "?";
	if (gethostname(host, sizeof(host) - 1) != 0)
		snprintf(host, sizeof(host), "?");
	char sess[32];
	snprintf(sess, sizeof(sess), "0x%llx", (unsigned long long)session);
	int bad = json_object_set_new(o, "node_id", json_integer(node_id));
	bad |= json_object_set_new(o, "pid", json_integer(getpid()));
	bad |= json_object_set_new(o, "host", json_string(host));
	bad |= json_object_set_new(o, "session", json_string(sess));
	bad |= json_object_set_new(o, "registered_ms",
				   json_integer((json_int_t)dxl_wall_ms()));
	char *s = bad ? NULL : json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!s)
		return dxl_err_set(DXL_E_NOMEM, "node %u: payload", node_id);
	size_t n = strlen(s);
	if (n > ZK_MAX_DATA) {
		free(s);
		return dxl_err_set(DXL_E_TOOBIG, "node %u: payload of %zu bytes "
				   "(ZooKeeper takes at most %d)", node_id, n,
				   ZK_MAX_DATA);
	}
	*out = s;
	*len = n;
	return 0;
}

/* "pid 123 on host h (session 0x..)" from a node payload, for messages */
static void describe_holder(const char *data, int64_t owner, char *buf,
			    size_t cap)
{
	json_t *o = json_loads(data, 0, NULL);
	json_t *pid = o ? json_object_get(o, "pid") : NULL;
	json_t *host = o ? json_object_get(o, "host") : NULL;
	if (json_is_integer(pid) && json_is_string(host))
		snprintf(buf, cap, "pid %lld on host %s (session 0x%llx)",
			 (long long)json_integer_value(pid), json_string_value(host),
			 (unsigned long long)owner);
	else if (owner)
		snprintf(buf, cap, "session 0x%llx (payload not written by dxl)",
			 (unsigned long long)owner);
	else
		snprintf(buf, cap, "a persistent znode (not written by dxl)");
	json_decref(o);
}

static int node_path(struct dxl_zk *zk, char *path, uint32_t node_id)
{
	return zk_path(zk, path, "nodes/%u", node_id);
}

int dxl_member_register(struct dxl_zk *zk, uint32_t node_id,
			const char *payload_json)
{
	if (!zk)
		return dxl_err_set(DXL_E_INVAL, "dxl_member_register: NULL zk");
	char path[ZK_PATH_MAX];
	int ret = node_path(zk, path, node_id);
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "registering node")))
		return ret;
	int64_t sid = zk_conn_session(c);
	char *payload = NULL;
	size_t plen = 0;
	if ((ret = zk_member_payload(zk, sid, node_id, payload_json, &payload,
				     &plen)))
		goto out;
	ret = 1; /* not decided yet */
	for (int tries = 0; tries < 5; tries++) {
		int rc = zkx_create(c, path, payload, (int)plen,
				    ZOO_EPHEMERAL, NULL, 0);
		if (rc == ZOK) {
			ret = 0;
			break;
		}
		if (rc != ZNODEEXISTS) {
			ret = zk_err(rc, "create", path);
			break;
		}
		char *data = NULL;
		int dlen;
		struct Stat st;
		rc = zk_get(c, path, false, &data, &dlen, &st);
		if (rc == ZNONODE)
			continue; /* the holder just went: try again */
		if (rc != ZOK) {
			ret = zk_err(rc, "get", path);
			break;
		}
		if (st.ephemeralOwner == sid) {
			/* ours already (a retried create): new payload */
			rc = zkx_set(c, path, payload, (int)plen, st.version, NULL);
			free(data);
			if (rc == ZBADVERSION)
				continue;
			ret = rc == ZOK ? 0 : zk_err(rc, "set", path);
			break;
		}
		char who[320];
		describe_holder(data, st.ephemeralOwner, who, sizeof(who));
		free(data);
		ret = dxl_err_set(DXL_E_EXIST,
				  "node id %u is already registered at %s by %s; "
				  "refusing to register it twice (another process "
				  "with the same node id? if that process is dead, "
				  "its session expires within %u ms)",
				  node_id, path, who, dxl_zk_session_timeout_ms(zk));
		break;
	}
	if (ret == 1)
		ret = dxl_err_set(DXL_E_UNAVAIL, "node %u: registration kept "
				  "racing with another process's", node_id);
out:
	free(payload);
	zk_conn_put(c);
	return ret;
}

/* own_node -- get the stat of nodes/<id> and check this session holds it */
static int own_node(struct zk_conn *c, const char *path, uint32_t node_id,
		    struct Stat *st)
{
	char *data = NULL;
	int dlen;
	int rc = zk_get(c, path, false, &data, &dlen, st);
	if (rc == ZNONODE)
		return dxl_err_set(DXL_E_NOENT, "node %u is not registered (%s)",
				   node_id, path);
	if (rc != ZOK)
		return zk_err(rc, "get", path);
	int64_t sid = zk_conn_session(c);
	if (st->ephemeralOwner != sid) {
		char who[320];
		describe_holder(data, st->ephemeralOwner, who, sizeof(who));
		free(data);
		return dxl_err_set(DXL_E_NOENT, "node %u is not registered by this "
				   "session (0x%llx) but by %s", node_id,
				   (unsigned long long)sid, who);
	}
	free(data);
	return 0;
}

int dxl_member_update(struct dxl_zk *zk, uint32_t node_id,
		      const char *payload_json)
{
	char path[ZK_PATH_MAX];
	int ret = node_path(zk, path, node_id);
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "updating node")))
		return ret;
	char *payload = NULL;
	size_t plen = 0;
	struct Stat st;
	if ((ret = zk_member_payload(zk, zk_conn_session(c), node_id, payload_json,
				     &payload, &plen)))
		goto out;
	for (int tries = 0; tries < 5; tries++) {
		if ((ret = own_node(c, path, node_id, &st)))
			break;
		int rc = zkx_set(c, path, payload, (int)plen, st.version, NULL);
		if (rc == ZBADVERSION) {
			ret = zk_err(rc, "set", path);
			continue;
		}
		ret = rc == ZOK ? 0 : zk_err(rc, "set", path);
		break;
	}
out:
	free(payload);
	zk_conn_put(c);
	return ret;
}

int dxl_member_deregister(struct dxl_zk *zk, uint32_t node_id)
{
	char path[ZK_PATH_MAX];
	int ret = node_path(zk, path, node_id);
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "deregistering node")))
		return ret;
	struct Stat st;
	/* only we can delete or re-create our own ephemeral while our session
	 * lives, and if it died the delete fails with the session: no race */
	if (!(ret = own_node(c, path, node_id, &st))) {
		int rc = zkx_delete(c, path, -1);
		ret = rc == ZOK ? 0 : zk_err(rc, "delete", path);
	}
	zk_conn_put(c);
	return ret;
}

int dxl_member_get(struct dxl_zk *zk, uint32_t node_id, char **payload,
		   int64_t *session)
{
	char path[ZK_PATH_MAX];
	int ret = node_path(zk, path, node_id);
	if (ret)
		return ret;
	if (!payload)
		return dxl_err_set(DXL_E_INVAL, "dxl_member_get: NULL payload");
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "reading node")))
		return ret;
	char *data;
	int dlen;
	struct Stat st;
	int rc = zk_get(c, path, false, &data, &dlen, &st);
	zk_conn_put(c);
	if (rc == ZNONODE)
		return dxl_err_set(DXL_E_NOENT, "node %u is not registered (%s)",
				   node_id, path);
	if (rc != ZOK)
		return zk_err(rc, "get", path);
	*payload = data;
	if (session)
		*session = st.ephemeralOwner;
	return 0;
}

/* ---- views ---------------------------------------------------------------- */

struct mview {
	uint32_t id;
	int64_t czxid;   /* tells a re-registration from the same znode */
	int32_t version; /* payload updates */
	int64_t session;
	char *payload;
};

static int mview_cmp(const void *a, const void *b)
{
	const struct mview *x = a, *y = b;
	return x->id < y->id ? -1 : x->id > y->id;
}

static void mview_free(struct mview *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].payload);
	free(v);
}

/* read_view -- every node under nodes/ (watching the directory and each
 * node if watch); ZooKeeper errors as DXL_E_* */
static int read_view(struct dxl_zk *zk, bool watch, struct mview **out,
		     size_t *nout)
{
	char dir[ZK_PATH_MAX], path[ZK_PATH_MAX];
	int ret = zk_path(zk, dir, "nodes");
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "listing nodes")))
		return ret;
	struct String_vector kids;
	int rc = zk_children(c, dir, watch, &kids);
	if (rc != ZOK) {
		zk_conn_put(c);
		return zk_err(rc, "get children", dir);
	}
	struct mview *v = calloc((size_t)kids.count + 1, sizeof(*v));
	size_t n = 0;
	if (!v)
		ret = dxl_err_set(DXL_E_NOMEM, "listing nodes");
	for (int i = 0; !ret && i < kids.count; i++) {
		uint32_t id;
		if (!parse_node_id(kids.data[i], &id)) {
			DXL_WARN("zookeeper: %s/%s is not a node id: ignored", dir,
				 kids.data[i]);
			continue;
		}
		if ((ret = node_path(zk, path, id)))
			break;
		char *data;
		int dlen;
		struct Stat st;
		rc = zk_get(c, path, watch, &data, &dlen, &st);
		if (rc == ZNONODE)
			continue; /* left meanwhile */
		if (rc != ZOK) {
			ret = zk_err(rc, "get", path);
			break;
		}
		v[n].id = id;
		v[n].czxid = st.czxid;
		v[n].version = st.version;
		v[n].session = st.ephemeralOwner;
		v[n].payload = data;
		n++;
	}
	deallocate_String_vector(&kids);
	zk_conn_put(c);
	if (ret) {
		mview_free(v, n);
		return ret;
	}
	qsort(v, n, sizeof(*v), mview_cmp);
	*out = v;
	*nout = n;
	return 0;
}

int dxl_member_list(struct dxl_zk *zk, struct dxl_member_list *out)
{
	if (!zk || !out)
		return dxl_err_set(DXL_E_INVAL, "dxl_member_list: NULL argument");
	memset(out, 0, sizeof(*out));
	struct mview *v;
	size_t n;
	int ret = read_view(zk, false, &v, &n);
	if (ret)
		return ret;
	out->v = calloc(n + 1, sizeof(*out->v));
	if (!out->v) {
		mview_free(v, n);
		return dxl_err_set(DXL_E_NOMEM, "dxl_member_list");
	}
	for (size_t i = 0; i < n; i++) {
		out->v[i].node_id = v[i].id;
		out->v[i].session = v[i].session;
		out->v[i].payload = v[i].payload; /* moved */
	}
	out->n = n;
	free(v);
	return 0;
}

void dxl_member_list_free(struct dxl_member_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].payload);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

const char *dxl_member_event_name(enum dxl_member_event ev)
{
	switch (ev) {
	case DXL_MEMBER_JOIN: return "join";
	case DXL_MEMBER_LEAVE: return "leave";
	case DXL_MEMBER_UPDATE: return "update";
	}
	return "unknown";
}

/* ---- watch ------------------------------------------------------------------ */

struct dxl_member_watch {
	struct zk_obs obs; /* first: the event thread hands us this */
	dxl_member_cb cb;
	void *arg;
	char dir[ZK_PATH_MAX];
	size_t dirlen;
	/* the last view reported (event thread only) */
	struct mview *v;
	size_t n;
};

static bool mw_wants(struct zk_obs *o, int type, const char *path)
{
	struct dxl_member_watch *w = (struct dxl_member_watch *)o;
	return strncmp(path, w->dir, w->dirlen) == 0 &&
	       (path[w->dirlen] == 0 || path[w->dirlen] == '/');
}

static void mw_emit(struct dxl_member_watch *w, enum dxl_member_event ev,
		    const struct mview *m)
{
	if (!atomic_load(&w->obs.dead))
		w->cb(w->arg, ev, m->id, m->payload);
}

/* mw_sync -- event thread: read the view (re-arming the watches), report
 * the differences from the last one */
static int mw_sync(struct zk_obs *o)
{
	struct dxl_member_watch *w = (struct dxl_member_watch *)o;
	struct mview *v;
	size_t n;
	int ret = read_view(o->zk, true, &v, &n);
	if (ret)
		return ret;
	size_t i = 0, j = 0;
	while (i < w->n || j < n) {
		if (j == n || (i < w->n && w->v[i].id < v[j].id)) {
			mw_emit(w, DXL_MEMBER_LEAVE, &w->v[i++]);
		} else if (i == w->n || v[j].id < w->v[i].id) {
			mw_emit(w, DXL_MEMBER_JOIN, &v[j++]);
		} else {
			if (w->v[i].czxid != v[j].czxid) {
				mw_emit(w, DXL_MEMBER_LEAVE, &w->v[i]);
				mw_emit(w, DXL_MEMBER_JOIN, &v[j]);
			} else if (w->v[i].version != v[j].version) {
				mw_emit(w, DXL_MEMBER_UPDATE, &v[j]);
			}
			i++;
			j++;
		}
	}
	mview_free(w->v, w->n);
	w->v = v;
	w->n = n;
	return 0;
}

static void mw_destroy(struct zk_obs *o)
{
	struct dxl_member_watch *w = (struct dxl_member_watch *)o;
	mview_free(w->v, w->n);
	free(w);
}

int dxl_member_watch_new(struct dxl_zk *zk, dxl_member_cb cb, void *arg,
			 struct dxl_member_watch **out)
{
	if (!zk || !cb || !out)
		return dxl_err_set(DXL_E_INVAL, "dxl_member_watch_new: NULL argument");
	struct dxl_member_watch *w = calloc(1, sizeof(*w));
	if (!w)
		return dxl_err_set(DXL_E_NOMEM, "dxl_member_watch_new");
	int ret = zk_path(zk, w->dir, "nodes");
	if (ret) {
		free(w);
		return ret;
	}
	w->dirlen = strlen(w->dir);
	w->cb = cb;
	w->arg = arg;
	w->obs.kind = "member watch";
	w->obs.sync = mw_sync;
	w->obs.wants = mw_wants;
	w->obs.destroy = mw_destroy;
	*out = w; /* before any callback can run (it may delete w) */
	zk_obs_add(zk, &w->obs);
	return 0;
}

void dxl_member_watch_delete(struct dxl_member_watch **pw)
{
	if (!pw || !*pw)
		return;
	zk_obs_remove(&(*pw)->obs);
	*pw = NULL;
}
