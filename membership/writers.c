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
 * The slots this process holds: every writer of one process may share one
 * ZooKeeper session (a coordinator's workers do), so "the znode is owned by
 * my session" does not mean "it is mine": only the registry says whether
 * another writer here holds it or a create of ours lost its reply.
 */
#include <pthread.h>
static pthread_mutex_t g_held_mu = PTHREAD_MUTEX_INITIALIZER;
static struct held {
	int64_t session;
	uint32_t shard, slot;
} g_held[4096];
static unsigned g_nheld;

static bool held_has(int64_t session, uint32_t shard, uint32_t slot)
{
	for (unsigned i = 0; i < g_nheld; i++)
		if (g_held[i].session == session && g_held[i].shard == shard &&
		    g_held[i].slot == slot)
			return true;
	return false;
}

static void held_add(int64_t session, uint32_t shard, uint32_t slot)
{
	if (!held_has(session, shard, slot) && g_nheld < 4096)
		g_held[g_nheld++] = (struct held){session, shard, slot};
}

static void held_del(int64_t session, uint32_t shard, uint32_t slot)
{
	for (unsigned i = 0; i < g_nheld; i++)
		if (g_held[i].session == session && g_held[i].shard == shard &&
		    g_held[i].slot == slot) {
			g_held[i] = g_held[--g_nheld];
			return;
		}
}

/*
 * Slots whose create lost its reply and whose outcome could not be learned
 * (the connection stayed away): if the create landed, the znode is an
 * orphan of this session that counts as a live writer until the session
 * ends. Every later call here checks them: an orphan that no writer of this
 * process holds is deleted (issue 16.6). Under g_held_mu.
 */
static struct {
	int64_t session;
	char path[ZK_PATH_MAX + 16];
} g_maybe[64];

static void maybe_add(int64_t session, const char *path)
{
	for (unsigned i = 0; i < 64; i++)
		if (!g_maybe[i].session) {
			g_maybe[i].session = session;
			snprintf(g_maybe[i].path, sizeof(g_maybe[i].path), "%s", path);
			return;
		}
	DXL_WARN("event=writer_slot_unknown path=%s msg=\"too many unknown slots to track\"", path);
}

/* maybe_sweep -- (g_held_mu) resolve the slots of unknown outcome of c's
 * session: delete the ones that exist, are ours and are held by no writer */
static void maybe_sweep(struct zk_conn *c)
{
	int64_t sid = zk_conn_session(c);
	for (unsigned i = 0; i < 64; i++) {
		if (!g_maybe[i].session)
			continue;
		if (g_maybe[i].session != sid) {
			g_maybe[i].session = 0; /* that session is over: so is its znode */
			continue;
		}
		uint32_t shard, slot;
		const char *w = strstr(g_maybe[i].path, "/writers/");
		bool parsed = w && sscanf(w, "/writers/%u/%u", &shard, &slot) == 2;
		struct Stat st;
		int rc = zk_exists(c, g_maybe[i].path, false, &st);
		if (rc == ZNONODE || (rc == ZOK && (st.ephemeralOwner != sid ||
						    (parsed && held_has(sid, shard, slot))))) {
			g_maybe[i].session = 0; /* never landed, or someone's slot */
			continue;
		}
		if (rc != ZOK)
			continue; /* still unknown */
		rc = zkx_delete(c, g_maybe[i].path, st.version);
		DXL_WARN("event=writer_slot_orphan path=%s action=delete rc=%d", g_maybe[i].path, rc);
		if (rc == ZOK || rc == ZNONODE)
			g_maybe[i].session = 0;
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
	pthread_mutex_lock(&g_held_mu);
	maybe_sweep(c);
	pthread_mutex_unlock(&g_held_mu);
	for (uint32_t k = first; k < nslots; k++) {
		snprintf(path, sizeof(path), "%s/%u", sdir, k);
		/* the registry's lock spans the create and the check: two
		 * threads of one session must not both see the znode as theirs */
		pthread_mutex_lock(&g_held_mu);
		int64_t sid = zk_conn_session(c);
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
			if (erc == ZOK && st.ephemeralOwner == sid && !held_has(sid, shard, k)) {
				rc = ZOK; /* it landed: ours */
				DXL_INFO("event=writer_slot_adopted path=%s", path);
			} else if (erc == ZNONODE) {
				k--; /* it did not land: create again */
				pthread_mutex_unlock(&g_held_mu);
				continue;
			} else if (erc == ZOK) {
				pthread_mutex_unlock(&g_held_mu);
				continue; /* another session's (or another writer's) */
			} else {
				maybe_add(sid, path);
				pthread_mutex_unlock(&g_held_mu);
				if (!c)
					return ret;
				ret = zk_err(erc, "create (outcome unknown)", path);
				goto out;
			}
		}
		if (rc == ZOK) {
			held_add(zk_conn_session(c), shard, k);
			pthread_mutex_unlock(&g_held_mu);
			*slot = k;
			ret = 0;
			goto out;
		}
		if (rc == ZNODEEXISTS) {
			/* ours already? A retried create after a lost reply -- unless
			 * another writer of this process (same session) holds it */
			struct Stat st;
			if (zk_exists(c, path, false, &st) == ZOK &&
			    st.ephemeralOwner == zk_conn_session(c)) {
				bool other = held_has(zk_conn_session(c), shard, k);
				if (!other)
					held_add(zk_conn_session(c), shard, k);
				pthread_mutex_unlock(&g_held_mu);
				if (!other) {
					*slot = k;
					ret = 0;
					goto out;
				}
				continue;
			}
			pthread_mutex_unlock(&g_held_mu);
			continue;
		}
		pthread_mutex_unlock(&g_held_mu);
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
	 * process may take the slot before it leaves the registry */
	pthread_mutex_lock(&g_held_mu);
	int64_t sid = zk_conn_session(c);
	ret = zk_delete_own(c, path);
	if (ret == DXL_E_UNAVAIL) {
		/* a delete whose reply was lost: the slot leaves the registry;
		 * if the znode is still there it is an orphan, deleted by the
		 * next call here */
		maybe_add(sid, path);
		held_del(sid, shard, slot);
	} else if (!ret) {
		held_del(sid, shard, slot);
	}
	pthread_mutex_unlock(&g_held_mu);
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
	pthread_mutex_lock(&g_held_mu);
	maybe_sweep(c);
	pthread_mutex_unlock(&g_held_mu);
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
