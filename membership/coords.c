/* coords.c -- coordinators' znodes coords/<id> (ephemeral: the session is the
 * coordinator's lease; docs/transactions.md "Actors and identities") */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dxl/membership.h"
#include "membership/zk_internal.h"

int dxl_coord_znode_create(struct dxl_zk *zk, uint32_t id, uint32_t max_id,
			   const char *data, uint32_t *id_out)
{
	if (!zk || !id_out || !max_id || id > max_id)
		return dxl_err_set(DXL_E_INVAL, "dxl_coord_znode_create: bad argument (id %u)", id);
	char dir[ZK_PATH_MAX], path[ZK_PATH_MAX + 16];
	int ret = zk_path(zk, dir, "coords");
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "registering a coordinator")))
		return ret;
	int rc = zkx_create(c, dir, NULL, -1, 0, NULL, 0);
	if (rc != ZOK && rc != ZNODEEXISTS) {
		ret = zk_err(rc, "create", dir);
		goto out;
	}
	int dlen = data ? (int)strlen(data) : -1;
	/* id 0: start after the id given out last (a sequential znode's
	 * number), so a coordinator's id is not handed out again soon after
	 * it died: its locks and log records stay attributable while they
	 * are resolved (docs/transactions.md) */
	uint32_t start = id ? id : 1, count = id ? 1 : max_id;
	if (!id) {
		char seqp[ZK_PATH_MAX + 16], made[ZK_PATH_MAX + 32];
		snprintf(seqp, sizeof(seqp), "%s/seq-", dir);
		rc = zkx_create(c, seqp, NULL, -1, ZOO_EPHEMERAL | ZOO_SEQUENCE, made, sizeof(made));
		if (rc == ZOK) {
			const char *num = strrchr(made, '-');
			unsigned long long n = num ? strtoull(num + 1, NULL, 10) : 0;
			start = (uint32_t)(n % max_id) + 1;
			zkx_delete(c, made, -1);
		}
	}
	for (uint32_t i = 0; i < count; i++) {
		uint32_t k = (start - 1 + i) % max_id + 1;
		snprintf(path, sizeof(path), "%s/%u", dir, k);
		rc = zkx_create(c, path, data, dlen, ZOO_EPHEMERAL,
				NULL, 0);
		if (rc == ZOK) {
			*id_out = k;
			ret = 0;
			goto out;
		}
		if (rc == ZNODEEXISTS) {
			struct Stat st;
			if (zk_exists(c, path, false, &st) == ZOK &&
			    st.ephemeralOwner == zk_conn_session(c)) {
				*id_out = k; /* ours (a retried create) */
				ret = 0;
				goto out;
			}
			if (id) {
				ret = dxl_err_set(DXL_E_EXIST,
						  "coordinator id %u is taken (%s exists: another coordinator, or one that died less than a session timeout ago)",
						  id, path);
				goto out;
			}
			continue;
		}
		ret = zk_err(rc, "create", path);
		goto out;
	}
	ret = dxl_err_set(DXL_E_FULL, "every coordinator id 1..%u is taken", max_id);
out:
	zk_conn_put(c);
	return ret;
}

int dxl_coord_znode_delete(struct dxl_zk *zk, uint32_t id)
{
	char path[ZK_PATH_MAX];
	int ret = zk_path(zk, path, "coords/%u", id);
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "unregistering a coordinator")))
		return ret;
	ret = zk_delete_own(c, path);
	zk_conn_put(c);
	return ret;
}

int dxl_coord_znode_list(struct dxl_zk *zk, uint32_t *ids, uint32_t cap)
{
	if (!zk || (cap && !ids))
		return dxl_err_set(DXL_E_INVAL, "dxl_coord_znode_list: NULL argument");
	char dir[ZK_PATH_MAX];
	int ret = zk_path(zk, dir, "coords");
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "listing coordinators")))
		return ret;
	struct String_vector kids;
	int rc = zk_children(c, dir, false, &kids);
	if (rc == ZNONODE) {
		zk_conn_put(c);
		return 0;
	}
	if (rc != ZOK) {
		zk_conn_put(c);
		return zk_err(rc, "get children", dir);
	}
	uint32_t n = 0;
	for (int i = 0; i < kids.count; i++) {
		char *end;
		unsigned long v = strtoul(kids.data[i], &end, 10);
		if (*end || !v || v > UINT32_MAX)
			continue;
		/* sorted insert: ids ascending */
		uint32_t k = n < cap ? n : cap;
		if (n < cap) {
			while (k > 0 && ids[k - 1] > v) {
				ids[k] = ids[k - 1];
				k--;
			}
			ids[k] = (uint32_t)v;
		}
		n++;
	}
	deallocate_String_vector(&kids);
	zk_conn_put(c);
	return (int)n;
}

int dxl_coord_znode_get(struct dxl_zk *zk, uint32_t id, char *buf, size_t cap)
{
	if (!zk || !buf || !cap)
		return dxl_err_set(DXL_E_INVAL, "dxl_coord_znode_get: bad argument");
	char path[ZK_PATH_MAX];
	int ret = zk_path(zk, path, "coords/%u", id);
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "reading a coordinator")))
		return ret;
	char *data = NULL;
	int len = 0;
	struct Stat st;
	int rc = zk_get(c, path, false, &data, &len, &st);
	if (rc == ZNONODE)
		ret = dxl_err_set(DXL_E_NOENT, "no coordinator %u (%s)", id, path);
	else if (rc != ZOK)
		ret = zk_err(rc, "get", path);
	else if ((size_t)len >= cap)
		ret = dxl_err_set(DXL_E_TOOBIG, "%s: %d bytes, room for %zu", path, len, cap - 1);
	else {
		if (len > 0)
			memcpy(buf, data, (size_t)len);
		buf[len > 0 ? len : 0] = 0;
		ret = len > 0 ? len : 0;
	}
	free(data);
	zk_conn_put(c);
	return ret;
}
