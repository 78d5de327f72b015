/* writers.c -- writer slots of a shard: ephemeral znodes writers/<shard>/<k>
 *
 * A writer (a `dxl log append`, later a coordinator thread) leases slot k of
 * shard s; k is its writer id and its ring for that shard
 * (docs/replica-design.md). The znode is ephemeral, so the slot is released
 * when the session closes or expires.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dxl/log.h"
#include "dxl/membership.h"
#include "membership/zk_internal.h"

/*
 * The slots this zk's writers hold (struct zk_writers, zk_internal.h): per
 * dxl_zk, for its current session only. It used to be one table for the
 * process, capped, whose entries outlived their sessions (a writer that
 * died without releasing, a release under a new session): once full, a
 * lease silently went unrecorded, and a second writer of the same session
 * that found the znode "ours" took the same slot -- two writers on one
 * ring. Now a session change empties the registry (the znodes went with
 * the old session), and a lease that the registry cannot record is refused
 * before anything is created (DXL_E_FULL, zk.writer_slots_max).
 */

/* reg_sync -- (reg->mu) the registry is of session sid: entries of another
 * (ended) session are dropped, with the slots of unknown outcome */
static void reg_sync(struct zk_writers *r, int64_t sid)
{
	if (r->session == sid)
		return;
	if (r->n)
		DXL_INFO("event=writer_slots_forgotten session=0x%llx slots=%u "
			 "msg=\"the session ended: its writer slots went with it\"",
			 (unsigned long long)r->session, r->n);
	r->session = sid;
	r->n = 0;
	for (unsigned i = 0; i < DXL_ARRAY_SIZE(r->maybe); i++)
		r->maybe[i].used = false;
}

static bool held_has(const struct zk_writers *r, uint32_t shard, uint32_t slot)
{
	for (unsigned i = 0; i < r->n; i++)
		if (r->held[i].shard == shard && r->held[i].slot == slot)
			return true;
	return false;
}

/* held_room -- (reg->mu) room for one more entry: 0, or DXL_E_FULL */
static int held_room(struct dxl_zk *zk, struct zk_writers *r)
{
	uint32_t max = zk_writer_slots_max(zk);
	if (r->n >= max)
		return dxl_err_set(DXL_E_FULL,
				   "this ZooKeeper session holds %u writer slots already "
				   "(zk.writer_slots_max); release some first",
				   r->n);
	if (r->n < r->cap)
		return 0;
	unsigned cap = r->cap ? r->cap * 2 : 64;
	if (cap > max)
		cap = max;
	struct zk_held *h = realloc(r->held, cap * sizeof(*h));
	if (!h)
		return dxl_err_set(DXL_E_NOMEM, "writer slot registry (%u entries)", cap);
	r->held = h;
	r->cap = cap;
	return 0;
}

/* held_add -- (reg->mu, after held_room) */
static void held_add(struct zk_writers *r, uint32_t shard, uint32_t slot)
{
	if (held_has(r, shard, slot))
		return;
	DXL_ASSERT(r->n < r->cap);
	r->held[r->n++] = (struct zk_held){shard, slot};
}

static void held_del(struct zk_writers *r, uint32_t shard, uint32_t slot)
{
	for (unsigned i = 0; i < r->n; i++)
		if (r->held[i].shard == shard && r->held[i].slot == slot) {
			r->held[i] = r->held[--r->n];
			return;
		}
}

/*
 * Slots whose create lost its reply and whose outcome could not be learned
 * (the connection stayed away), or whose release lost its reply: if the
 * znode is there, it is an orphan of this session that counts as a live
 * writer until the session ends. Every later call here checks them: an
 * orphan that no writer of this zk holds is deleted (issue 16.6). Under
 * reg->mu, of the registry's session.
 */
static void maybe_add(struct zk_writers *r, const char *path)
{
	for (unsigned i = 0; i < DXL_ARRAY_SIZE(r->maybe); i++)
		if (!r->maybe[i].used) {
			r->maybe[i].used = true;
			snprintf(r->maybe[i].path, sizeof(r->maybe[i].path), "%s", path);
			return;
		}
	DXL_WARN("event=writer_slot_unknown path=%s msg=\"too many unknown slots to track\"", path);
}

/* maybe_sweep -- (reg->mu) resolve the slots of unknown outcome of c's
 * session: delete the ones that exist, are ours and are held by no writer */
static void maybe_sweep(struct zk_writers *r, struct zk_conn *c)
{
	int64_t sid = zk_conn_session(c);
	reg_sync(r, sid);
	for (unsigned i = 0; i < DXL_ARRAY_SIZE(r->maybe); i++) {
		if (!r->maybe[i].used)
			continue;
		uint32_t shard, slot;
		const char *w = strstr(r->maybe[i].path, "/writers/");
		bool parsed = w && sscanf(w, "/writers/%u/%u", &shard, &slot) == 2;
		struct Stat st;
		int rc = zk_exists(c, r->maybe[i].path, false, &st);
		if (rc == ZNONODE || (rc == ZOK && (st.ephemeralOwner != sid ||
						    (parsed && held_has(r, shard, slot))))) {
			r->maybe[i].used = false; /* never landed, or someone's slot */
			continue;
		}
		if (rc != ZOK)
			continue; /* still unknown */
		rc = zkx_delete(c, r->maybe[i].path, st.version);
		DXL_WARN("event=writer_slot_orphan path=%s action=delete rc=%d", r->maybe[i].path, rc);
		if (rc == ZOK || rc == ZNONODE)
			r->maybe[i].used = false;
	}
}

static bool transient(int rc)
{
	return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT;
}

static int ensure_dir(struct zk_conn *c, const char *path)
{
	int rc = zkx_create(c, path, NULL, -1, 0, NULL, 0);
	if (rc != ZOK && rc != ZNODEEXISTS)
		return zk_err(rc, "create", path);
	return 0;
}

static int slot_lease(struct dxl_zk *zk, uint32_t shard, uint32_t first, uint32_t nslots,
		      uint32_t *slot);

int dxl_writer_slot_lease(struct dxl_zk *zk, uint32_t shard, uint32_t nslots,
			  uint32_t *slot)
{
	return slot_lease(zk, shard, 0, nslots, slot);
}

int dxl_writer_slot_take(struct dxl_zk *zk, uint32_t shard, uint32_t slot)
{
	uint32_t got;
	if (slot >= DXL_RING_MAX)
		return dxl_err_set(DXL_E_INVAL, "writer slot %u (at most %d)", slot, DXL_RING_MAX - 1);
	int ret = slot_lease(zk, shard, slot, slot + 1, &got);
	if (ret == DXL_E_FULL)
		return dxl_err_set(DXL_E_EXIST, "writer slot %u of shard %u is held by a live session",
				   slot, shard);
	return ret;
}

static int slot_lease(struct dxl_zk *zk, uint32_t shard, uint32_t first, uint32_t nslots,
		      uint32_t *slot)
{
	if (!zk || !slot || !nslots || nslots > DXL_RING_MAX)
		return dxl_err_set(DXL_E_INVAL, "dxl_writer_slot_lease: bad argument (nslots %u)",
				   nslots);
	char dir[ZK_PATH_MAX], sdir[ZK_PATH_MAX], path[ZK_PATH_MAX + 16];
	int ret = zk_path(zk, dir, "writers");
	if (!ret)
		ret = zk_path(zk, sdir, "writers/%u", shard);
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "leasing a writer slot")))
		return ret;
	if ((ret = ensure_dir(c, dir)) || (ret = ensure_dir(c, sdir)))
		goto out;
	char host[64] = "";
	gethostname(host, sizeof(host) - 1);
	char data[256];
	int dlen = snprintf(data, sizeof(data),
			    "{\"pid\":%d,\"host\":\"%s\",\"session\":\"0x%llx\"}",
			    (int)getpid(), host,
			    (unsigned long long)zk_conn_session(c));
	struct zk_writers *reg = zk_writers_of(zk);
	pthread_mutex_lock(&reg->mu);
	maybe_sweep(reg, c);
	pthread_mutex_unlock(&reg->mu);
	for (uint32_t k = first; k < nslots; k++) {
		snprintf(path, sizeof(path), "%s/%u", sdir, k);
		/* the registry's lock spans the create and the check: two
		 * threads of one session must not both see the znode as theirs */
		pthread_mutex_lock(&reg->mu);
		int64_t sid = zk_conn_session(c);
		reg_sync(reg, sid);
		/* a slot the registry could not record is not taken at all */
		if ((ret = held_room(zk, reg))) {
			pthread_mutex_unlock(&reg->mu);
			goto out;
		}
		int rc = zkx_create(c, path, data, dlen, ZOO_EPHEMERAL, NULL, 0);
		if (transient(rc)) {
			/* the create may have been applied (its reply was lost):
			 * learn the outcome before anything else -- wait for the
			 * connection, then the znode's owner tells (issue 16.6) */
			struct Stat st;
			int erc = rc;
			for (int t = 0; t < 8 && transient(erc); t++) {
				zk_conn_put(c);
				c = NULL;
				if ((ret = zk_acquire(zk, &c, "leasing a writer slot")))
					break;
				erc = zk_conn_session(c) == sid ? zk_exists(c, path, false, &st)
								: ZSESSIONEXPIRED;
			}
			if (erc == ZOK && st.ephemeralOwner == sid && !held_has(reg, shard, k)) {
				rc = ZOK; /* it landed: ours */
				DXL_INFO("event=writer_slot_adopted path=%s", path);
			} else if (erc == ZNONODE) {
				k--; /* it did not land: create again */
				pthread_mutex_unlock(&reg->mu);
				continue;
			} else if (erc == ZOK) {
				pthread_mutex_unlock(&reg->mu);
				continue; /* another session's (or another writer's) */
			} else {
				if (erc != ZSESSIONEXPIRED)
					maybe_add(reg, path);
				pthread_mutex_unlock(&reg->mu);
				if (!c)
					return ret;
				ret = zk_err(erc, "create (outcome unknown)", path);
				goto out;
			}
		}
		if (rc == ZOK) {
			held_add(reg, shard, k);
			pthread_mutex_unlock(&reg->mu);
			*slot = k;
			ret = 0;
			goto out;
		}
		if (rc == ZNODEEXISTS) {
			/* ours already? A retried create after a lost reply -- unless
			 * another writer of this zk (same session) holds it */
			struct Stat st;
			if (zk_exists(c, path, false, &st) == ZOK && st.ephemeralOwner == sid) {
				bool other = held_has(reg, shard, k);
				if (!other)
					held_add(reg, shard, k);
				pthread_mutex_unlock(&reg->mu);
				if (!other) {
					*slot = k;
					ret = 0;
					goto out;
				}
				continue;
			}
			pthread_mutex_unlock(&reg->mu);
			continue;
		}
		pthread_mutex_unlock(&reg->mu);
		ret = zk_err(rc, "create", path);
		goto out;
	}
	ret = dxl_err_set(DXL_E_FULL, "every writer slot of shard %u is taken (%u slots under %s)",
			  shard, nslots, sdir);
out:
	zk_conn_put(c);
	return ret;
}

int dxl_writer_slot_release(struct dxl_zk *zk, uint32_t shard, uint32_t slot)
{
	char path[ZK_PATH_MAX];
	int ret = zk_path(zk, path, "writers/%u/%u", shard, slot);
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "releasing a writer slot")))
		return ret;
	/* the registry's lock spans the delete: no other writer of this
	 * zk may take the slot before it leaves the registry */
	struct zk_writers *reg = zk_writers_of(zk);
	pthread_mutex_lock(&reg->mu);
	reg_sync(reg, zk_conn_session(c));
	ret = zk_delete_own(c, path);
	if (ret == DXL_E_UNAVAIL) {
		/* a delete whose reply was lost: the slot leaves the registry;
		 * if the znode is still there it is an orphan, deleted by the
		 * next call here */
		maybe_add(reg, path);
		held_del(reg, shard, slot);
	} else if (!ret || ret == DXL_E_NOENT) {
		/* deleted, or not this session's any more: not held here */
		held_del(reg, shard, slot);
	}
	pthread_mutex_unlock(&reg->mu);
	if (ret == DXL_E_NOENT)
		dxl_err_prefix("writer slot");
	zk_conn_put(c);
	return ret;
}

int dxl_writer_slots_live(struct dxl_zk *zk, uint32_t shard, uint64_t *mask)
{
	if (!zk || !mask)
		return dxl_err_set(DXL_E_INVAL, "dxl_writer_slots_live: NULL argument");
	char sdir[ZK_PATH_MAX];
	int ret = zk_path(zk, sdir, "writers/%u", shard);
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "listing writer slots")))
		return ret;
	struct zk_writers *reg = zk_writers_of(zk);
	pthread_mutex_lock(&reg->mu);
	maybe_sweep(reg, c);
	pthread_mutex_unlock(&reg->mu);
	struct String_vector kids;
	int rc = zk_children(c, sdir, false, &kids);
	*mask = 0;
	if (rc == ZNONODE) { /* nobody ever wrote to this shard */
		zk_conn_put(c);
		return 0;
	}
	if (rc != ZOK) {
		zk_conn_put(c);
		return zk_err(rc, "get children", sdir);
	}
	for (int i = 0; i < kids.count; i++) {
		uint64_t k;
		if (dxl_parse_u64(kids.data[i], &k) == 0 && k < 64)
			*mask |= 1ull << k;
	}
	deallocate_String_vector(&kids);
	zk_conn_put(c);
	return 0;
}
