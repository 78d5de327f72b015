/* election.c -- leader election through ephemeral sequential znodes (the CM) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "membership/zk_internal.h"

/*
 * The ZooKeeper recipe: every candidate creates <dir>/c-<session>-<nonce>-<seq>
 * (ephemeral, sequential). The lowest sequence number leads. Every other
 * candidate watches only the candidate just below it, so the leader's
 * departure wakes one process, not all (no herd effect); when its
 * predecessor goes it re-reads the children, because the predecessor may
 * simply have left the queue while a still lower candidate leads.
 *
 * Lost replies (issue 16.6). A create whose reply was lost with the
 * connection may have been applied. The candidate never creates again
 * before it knows: it lists the children (retrying until a listing works)
 * and adopts the znode with its own nonce if there is one. A znode of this
 * session that no live candidacy of this process owns (a create or a
 * resignation whose outcome was never learned) would lead the election for
 * nobody, or stand before our own candidacy, until the session ends: every
 * sync deletes such leftovers. The registry below says which nonces are
 * live in this process (two candidacies of one process may share a session).
 */

enum { E_IN = 1, E_OUT = 2 };

struct dxl_election {
	struct zk_obs obs; /* first */
	dxl_election_cb cb;
	void *arg;
	char dir[ZK_PATH_MAX];
	char me[ZK_PATH_MAX];  /* our znode (set before the observer is added) */
	char me_name[64];
	char mine[48];         /* "c-<session>-<nonce>-": our names' prefix */
	char pred[ZK_PATH_MAX]; /* watched predecessor (event thread only) */
	int state;              /* under zk->mu */
	atomic_bool leader;
	_Atomic int64_t seq;
	_Atomic int64_t pred_seq;
};

/* ---- the live candidacies of this process ---------------------------------- */

/*
 * A candidacy is registered by its name prefix ("c-<session>-<nonce>-")
 * before its create, and by its full name once it knows it: a znode of the
 * session is then this candidacy's only if it is exactly that one. A second
 * znode with the same prefix -- a create that landed late, after the
 * listing that was to find it (issue 16.6 review) -- is a leftover like any
 * other, and the candidacy's own sync deletes it.
 */
#include <pthread.h>
#include <sys/random.h>
static pthread_mutex_t g_live_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char prefix[48]; /* "" = free */
	char name[64];   /* the full znode name, "" while unknown */
} g_live[64];

static void live_add(const char *mine)
{
	pthread_mutex_lock(&g_live_mu);
	int i = 0;
	while (i < 64 && g_live[i].prefix[0])
		i++;
	if (i < 64) {
		snprintf(g_live[i].prefix, sizeof(g_live[i].prefix), "%s", mine);
		g_live[i].name[0] = 0;
	}
	pthread_mutex_unlock(&g_live_mu);
	if (i == 64) /* its znode may be swept by another candidacy: it leaves */
		DXL_WARN("event=election_registry_full prefix=%s", mine);
}

/* live_named -- the candidacy with prefix `mine` is znode `name` */
static void live_named(const char *mine, const char *name)
{
	pthread_mutex_lock(&g_live_mu);
	for (int i = 0; i < 64; i++)
		if (!strcmp(g_live[i].prefix, mine))
			snprintf(g_live[i].name, sizeof(g_live[i].name), "%s", name);
	pthread_mutex_unlock(&g_live_mu);
}

static void live_del(const char *mine)
{
	pthread_mutex_lock(&g_live_mu);
	for (int i = 0; i < 64; i++)
		if (g_live[i].prefix[0] && !strcmp(g_live[i].prefix, mine))
			g_live[i].prefix[0] = g_live[i].name[0] = 0;
	pthread_mutex_unlock(&g_live_mu);
}

/* live_owns -- a live candidacy of this process owns the znode name: its
 * full name, or its prefix while its create is under way */
static bool live_owns(const char *name)
{
	bool yes = false;
	pthread_mutex_lock(&g_live_mu);
	for (int i = 0; i < 64 && !yes; i++) {
		if (!g_live[i].prefix[0])
			continue;
		yes = g_live[i].name[0]
			      ? !strcmp(name, g_live[i].name)
			      : !strncmp(name, g_live[i].prefix, strlen(g_live[i].prefix));
	}
	pthread_mutex_unlock(&g_live_mu);
	return yes;
}

/* seq_of -- the sequence number of a candidate name, -1 if not one */
static int64_t seq_of(const char *name)
{
	if (strncmp(name, "c-", 2) != 0)
		return -1;
	const char *d = strrchr(name, '-');
	if (!d || !d[1] || strlen(d + 1) > 10)
		return -1;
	int64_t v = 0;
	for (const char *p = d + 1; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		v = v * 10 + (*p - '0');
	}
	return v;
}

static int elec_dir(struct dxl_zk *zk, const char *name, char *dir)
{
	if (!zk_name_ok(name, 64))
		return dxl_err_set(DXL_E_INVAL, "election name '%s': letters, "
				   "digits, '_', '-', '.' (1..63 chars)",
				   name ? name : "(null)");
	return zk_path(zk, dir, "%s", name);
}

/* leave -- mark the candidacy over; returns whether it was leading */
static bool leave(struct dxl_election *e)
{
	zk_lock(e->obs.zk);
	bool was = false;
	if (e->state == E_IN) {
		was = atomic_load(&e->leader);
		e->state = E_OUT;
	}
	atomic_store(&e->leader, false);
	atomic_store(&e->seq, -1);
	atomic_store(&e->pred_seq, -1);
	zk_unlock(e->obs.zk);
	return was;
}

static bool is_in(struct dxl_election *e)
{
	zk_lock(e->obs.zk);
	bool in = e->state == E_IN;
	zk_unlock(e->obs.zk);
	return in;
}

static void emit(struct dxl_election *e, enum dxl_election_event ev)
{
	if (!atomic_load(&e->obs.dead))
		e->cb(e->arg, ev);
}

/* el_sync -- event thread: where do we stand in the queue? */
static int el_sync(struct zk_obs *o)
{
	struct dxl_election *e = (struct dxl_election *)o;
	if (!is_in(e))
		return 0;
	struct zk_conn *c;
	int ret = zk_acquire(o->zk, &c, "election");
	if (ret)
		return ret;
	int64_t myseq = atomic_load(&e->seq);
	for (int round = 0; round < 16; round++) {
		struct String_vector kids;
		int rc = zk_children(c, e->dir, false, &kids);
		if (rc != ZOK) {
			zk_conn_put(c);
			return zk_err(rc, "get children", e->dir);
		}
		bool found = false, swept = false;
		int64_t best = -1;
		char pname[64] = "";
		char sess[24];
		snprintf(sess, sizeof(sess), "c-%016llx-", (unsigned long long)zk_conn_session(c));
		for (int i = 0; i < kids.count; i++) {
			if (strcmp(kids.data[i], e->me_name) == 0) {
				found = true;
				continue;
			}
			/* a leftover of this session: nobody here owns it */
			if (!strncmp(kids.data[i], sess, strlen(sess)) && !live_owns(kids.data[i])) {
				char lp[ZK_PATH_MAX + 64];
				snprintf(lp, sizeof(lp), "%s/%s", e->dir, kids.data[i]);
				int drc = zkx_delete(c, lp, -1);
				DXL_WARN("event=election_leftover path=%s action=delete rc=%d", lp, drc);
				swept = true;
				continue;
			}
			int64_t s = seq_of(kids.data[i]);
			if (s >= 0 && s < myseq && s > best) {
				best = s;
				snprintf(pname, sizeof(pname), "%s", kids.data[i]);
			}
		}
		deallocate_String_vector(&kids);
		if (swept)
			continue; /* look again */
		if (!found) {
			/* our znode is gone (session ended, or deleted from
			 * outside) */
			zk_conn_put(c);
			if (leave(e))
				emit(e, DXL_ELECTION_LOST);
			return 0;
		}
		struct Stat st;
		if (best < 0) {
			/* lowest: we lead. Watch our own znode to learn if it
			 * is deleted from outside. */
			rc = zk_exists(c, e->me, true, &st);
			if (rc == ZNONODE)
				continue;
			if (rc != ZOK) {
				zk_conn_put(c);
				return zk_err(rc, "exists", e->me);
			}
			zk_conn_put(c);
			e->pred[0] = 0;
			atomic_store(&e->pred_seq, -1);
			zk_lock(o->zk);
			bool elected = e->state == E_IN && !atomic_load(&e->leader);
			if (elected)
				atomic_store(&e->leader, true);
			zk_unlock(o->zk);
			if (elected)
				emit(e, DXL_ELECTION_ELECTED);
			return 0;
		}
		/* watch the predecessor only */
		char ppath[ZK_PATH_MAX];
		if ((size_t)snprintf(ppath, sizeof(ppath), "%s/%s", e->dir, pname) >=
		    sizeof(ppath)) {
			zk_conn_put(c);
			return dxl_err_set(DXL_E_INTERNAL, "election path too long");
		}
		rc = zk_exists(c, ppath, true, &st);
		if (rc == ZNONODE)
			continue; /* gone meanwhile: look again */
		if (rc != ZOK) {
			zk_conn_put(c);
			return zk_err(rc, "exists", ppath);
		}
		memcpy(e->pred, ppath, sizeof(e->pred));
		atomic_store(&e->pred_seq, best);
		zk_conn_put(c);
		return 0;
	}
	zk_conn_put(c);
	return dxl_err_set(DXL_E_UNAVAIL, "election %s: the queue keeps changing",
			   e->dir);
}

static bool el_wants(struct zk_obs *o, int type, const char *path)
{
	struct dxl_election *e = (struct dxl_election *)o;
	return strcmp(path, e->me) == 0 || (e->pred[0] && strcmp(path, e->pred) == 0);
}

static void el_session_lost(struct zk_obs *o)
{
	struct dxl_election *e = (struct dxl_election *)o;
	if (leave(e))
		emit(e, DXL_ELECTION_LOST);
}

static void el_destroy(struct zk_obs *o)
{
	free(o);
}

static bool transient(int zrc)
{
	return zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT;
}

int dxl_election_new(struct dxl_zk *zk, const char *name, const char *data,
		     dxl_election_cb cb, void *arg, struct dxl_election **out)
{
	if (!zk || !cb || !out)
		return dxl_err_set(DXL_E_INVAL, "dxl_election_new: NULL argument");
	size_t dlen = data ? strlen(data) : 0;
	if (dlen > ZK_MAX_DATA)
		return dxl_err_set(DXL_E_TOOBIG, "election data of %zu bytes", dlen);
	struct dxl_election *e = calloc(1, sizeof(*e));
	if (!e)
		return dxl_err_set(DXL_E_NOMEM, "dxl_election_new");
	e->cb = cb;
	e->arg = arg;
	atomic_store(&e->seq, -1);
	atomic_store(&e->pred_seq, -1);
	int ret = elec_dir(zk, name, e->dir);
	if (ret) {
		free(e);
		return ret;
	}
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "joining the election"))) {
		free(e);
		return ret;
	}
	int rc = zkx_create(c, e->dir, NULL, -1, 0, NULL, 0);
	if (rc != ZOK && rc != ZNODEEXISTS) {
		ret = zk_err(rc, "create", e->dir);
		goto fail;
	}
	int64_t sid = zk_conn_session(c);
	uint32_t nonce = 0;
	while (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
		;
	char prefix[ZK_PATH_MAX + 64];
	snprintf(e->mine, sizeof(e->mine), "c-%016llx-%08x-", (unsigned long long)sid, nonce);
	snprintf(prefix, sizeof(prefix), "%s/%s", e->dir, e->mine);
	/* live before the create: a sync of another candidacy of this process
	 * must not take it for a leftover */
	live_add(e->mine);
	ret = 1;
	for (int tries = 0; tries < 4 && ret == 1; tries++) {
		rc = zkx_create(c, prefix, data, data ? (int)dlen : -1,
				ZOO_EPHEMERAL | ZOO_SEQUENCE, e->me, sizeof(e->me));
		if (rc == ZOK) {
			ret = 0;
			break;
		}
		if (!transient(rc)) {
			ret = zk_err(rc, "create", prefix);
			break;
		}
		/* the create may have been applied: never create again before
		 * a listing says whether a znode with our nonce is there */
		struct String_vector kids;
		int lrc = ZCONNECTIONLOSS;
		for (int k = 0; k < 8 && transient(lrc); k++) {
			zk_conn_put(c);
			c = NULL;
			if ((ret = zk_acquire(zk, &c, "joining the election")))
				goto fail; /* outcome unknown (below) */
			lrc = zk_children(c, e->dir, false, &kids);
		}
		if (lrc != ZOK) {
			ret = zk_err(lrc, "get children", e->dir);
			goto fail;
		}
		if (zk_conn_session(c) != sid) {
			deallocate_String_vector(&kids);
			ret = dxl_err_set(DXL_E_STATE, "election %s: the session ended while joining",
					  e->dir);
			goto fail;
		}
		/* it was applied: adopt it (if more than one landed, the
		 * lowest: the others are leftovers the sync deletes) */
		ret = 1;
		int64_t low = -1;
		for (int k = 0; k < kids.count; k++) {
			int64_t ks = seq_of(kids.data[k]);
			if (!strncmp(kids.data[k], e->mine, strlen(e->mine)) && ks >= 0 &&
			    (low < 0 || ks < low) &&
			    (size_t)snprintf(e->me, sizeof(e->me), "%s/%s", e->dir, kids.data[k]) <
				    sizeof(e->me)) {
				low = ks;
				ret = 0;
			}
		}
		deallocate_String_vector(&kids);
		if (!ret)
			DXL_INFO("event=election_adopted path=%s", e->me);
	}
	if (ret == 1)
		ret = zk_err(rc, "create", prefix);
	if (ret)
		goto fail;
	zk_conn_put(c);
	const char *slash = strrchr(e->me, '/');
	if ((size_t)snprintf(e->me_name, sizeof(e->me_name), "%s",
			     slash ? slash + 1 : e->me) >= sizeof(e->me_name)) {
		ret = dxl_err_set(DXL_E_INTERNAL, "election: odd znode name %s",
				  e->me);
		c = NULL;
		goto fail;
	}
	/* from now on only this very znode is ours: another one with our
	 * prefix (a create that landed late) is a leftover */
	live_named(e->mine, e->me_name);
	atomic_store(&e->seq, seq_of(e->me_name));
	e->state = E_IN;
	e->obs.kind = "election";
	e->obs.sync = el_sync;
	e->obs.wants = el_wants;
	e->obs.session_lost = el_session_lost;
	e->obs.destroy = el_destroy;
	*out = e; /* before any callback can run */
	zk_obs_add(zk, &e->obs);
	return 0;
fail:
	/* every failure after live_add: the candidacy is not live. A create
	 * whose outcome stays unknown, if it landed, is a leftover of the
	 * session that the next sync of any candidacy of this session deletes */
	if (e->mine[0])
		live_del(e->mine);
	zk_conn_put(c);
	free(e);
	return ret;
}

int dxl_election_resign(struct dxl_election *e)
{
	if (!e)
		return dxl_err_set(DXL_E_INVAL, "dxl_election_resign: NULL");
	zk_lock(e->obs.zk);
	bool in = e->state == E_IN;
	zk_unlock(e->obs.zk);
	if (!in)
		return dxl_err_set(DXL_E_STATE, "election %s: not a candidate any "
				   "more", e->dir);
	leave(e);
	/* a callback that started before stays the last one */
	zk_obs_quiesce(&e->obs);
	/* a delete whose outcome was lost is tried again (a second delete
	 * finds no node); if it stays unknown the znode is a leftover that the
	 * next sync of this session deletes (it is no longer live here) */
	int rc = ZCONNECTIONLOSS, ret = 0;
	for (int k = 0; k < 4 && transient(rc); k++) {
		struct zk_conn *c;
		if ((ret = zk_acquire(e->obs.zk, &c, "resigning")))
			break;
		rc = zkx_delete(c, e->me, -1);
		zk_conn_put(c);
	}
	live_del(e->mine);
	if (ret)
		return ret;
	if (rc != ZOK && rc != ZNONODE)
		return zk_err(rc, "delete", e->me);
	return 0;
}

void dxl_election_delete(struct dxl_election **pe)
{
	if (!pe || !*pe)
		return;
	struct dxl_election *e = *pe;
	if (is_in(e))
		(void)dxl_election_resign(e);
	else
		live_del(e->mine);
	zk_obs_remove(&e->obs);
	*pe = NULL;
}

bool dxl_election_is_leader(const struct dxl_election *e)
{
	return atomic_load(&((struct dxl_election *)e)->leader);
}

int64_t dxl_election_seq(const struct dxl_election *e)
{
	return atomic_load(&((struct dxl_election *)e)->seq);
}

int64_t dxl_election_predecessor(const struct dxl_election *e)
{
	return atomic_load(&((struct dxl_election *)e)->pred_seq);
}

int dxl_election_leader(struct dxl_zk *zk, const char *name, char **data,
			int64_t *seq)
{
	if (!zk || !data)
		return dxl_err_set(DXL_E_INVAL, "dxl_election_leader: NULL argument");
	char dir[ZK_PATH_MAX], path[ZK_PATH_MAX + 64];
	int ret = elec_dir(zk, name, dir);
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "finding the leader")))
		return ret;
	ret = 1;
	for (int round = 0; round < 16 && ret == 1; round++) {
		struct String_vector kids;
		int rc = zk_children(c, dir, false, &kids);
		if (rc == ZNONODE) {
			ret = dxl_err_set(DXL_E_NOENT, "election %s: no candidate", dir);
			break;
		}
		if (rc != ZOK) {
			ret = zk_err(rc, "get children", dir);
			break;
		}
		int64_t best = -1;
		char bname[64] = "";
		for (int i = 0; i < kids.count; i++) {
			int64_t s = seq_of(kids.data[i]);
			if (s >= 0 && (best < 0 || s < best)) {
				best = s;
				snprintf(bname, sizeof(bname), "%s", kids.data[i]);
			}
		}
		deallocate_String_vector(&kids);
		if (best < 0) {
			ret = dxl_err_set(DXL_E_NOENT, "election %s: no candidate", dir);
			break;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, bname);
		char *d;
		int len;
		struct Stat st;
		rc = zk_get(c, path, false, &d, &len, &st);
		if (rc == ZNONODE)
			continue; /* it just left: look again */
		if (rc != ZOK) {
			ret = zk_err(rc, "get", path);
			break;
		}
		*data = d;
		if (seq)
			*seq = best;
		ret = 0;
	}
	if (ret == 1)
		ret = dxl_err_set(DXL_E_UNAVAIL, "election %s: the queue keeps "
				  "changing", dir);
	zk_conn_put(c);
	return ret;
}
