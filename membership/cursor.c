/* cursor.c -- consumer-group cursors: cursors/<group>/<shard> = next commit timestamp */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "membership/zk_internal.h"

/*
 * The znode holds {"next_ts": "123456789"}: the timestamp as a decimal
 * STRING, because a 64-bit commit timestamp does not survive JSON numbers
 * in many readers (JavaScript, jq: doubles, 53 bits). Versioned like the
 * config, so two tailers of one group cannot move the cursor past each
 * other unknowingly.
 */
#define GROUP_MAX 128

static int cursor_path(struct dxl_zk *zk, const char *group, uint32_t shard,
		       char *dir, char *path)
{
	if (!zk_name_ok(group, GROUP_MAX))
		return dxl_err_set(DXL_E_INVAL, "cursor group '%s': letters, digits, "
				   "'_', '-', '.' (1..%d chars)",
				   group ? group : "(null)", GROUP_MAX - 1);
	int ret = zk_path(zk, dir, "cursors/%s", group);
	if (!ret)
		ret = zk_path(zk, path, "cursors/%s/%u", group, shard);
	return ret;
}

static int decode(const char *data, int len, const char *path, uint64_t *out)
{
	json_error_t je;
	json_t *o = json_loadb(data, (size_t)len, JSON_REJECT_DUPLICATES, &je);
	int ret = 0;
	json_t *v = json_is_object(o) && json_object_size(o) == 1
			    ? json_object_get(o, "next_ts")
			    : NULL;
	const char *s = json_is_string(v) ? json_string_value(v) : NULL;
	uint64_t x = 0;
	bool ok = s && s[0] && strlen(s) <= 20;
	for (const char *p = s; ok && *p; p++) {
		if (*p < '0' || *p > '9' || x > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			ok = false;
		else
			x = x * 10 + (uint64_t)(*p - '0');
	}
	if (!ok)
		ret = dxl_err_set(DXL_E_CORRUPT, "cursor %s: expected {\"next_ts\": "
				  "\"<decimal u64>\"}, found %.*s", path,
				  len > 80 ? 80 : len, data);
	else
		*out = x;
	json_decref(o);
	return ret;
}

int dxl_cursor_get(struct dxl_zk *zk, const char *group, uint32_t shard,
		   uint64_t *next_ts, int32_t *version)
{
	char dir[ZK_PATH_MAX], path[ZK_PATH_MAX];
	if (!zk || !next_ts)
		return dxl_err_set(DXL_E_INVAL, "dxl_cursor_get: NULL argument");
	int ret = cursor_path(zk, group, shard, dir, path);
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "reading a cursor")))
		return ret;
	char *data;
	int len;
	struct Stat st;
	int rc = zk_get(c, path, false, &data, &len, &st);
	zk_conn_put(c);
	if (rc == ZNONODE)
		return dxl_err_set(DXL_E_NOENT, "cursor %s was never set", path);
	if (rc != ZOK)
		return zk_err(rc, "get", path);
	ret = decode(data, len, path, next_ts);
	free(data);
	if (!ret && version)
		*version = st.version;
	return ret;
}

static int create_cursor(struct zk_conn *c, const char *dir, const char *path,
			 const char *val, int len)
{
	int rc = zkx_create(c, dir, NULL, -1, 0, NULL, 0);
	if (rc != ZOK && rc != ZNODEEXISTS)
		return rc;
	return zkx_create(c, path, val, len, 0, NULL, 0);
}

int dxl_cursor_set(struct dxl_zk *zk, const char *group, uint32_t shard,
		   uint64_t next_ts, int32_t expected_version,
		   int32_t *new_version)
{
	char dir[ZK_PATH_MAX], path[ZK_PATH_MAX];
	if (!zk)
		return dxl_err_set(DXL_E_INVAL, "dxl_cursor_set: NULL zk");
	if (expected_version < DXL_ZK_VERSION_ANY)
		return dxl_err_set(DXL_E_INVAL, "dxl_cursor_set: bad expected version "
				   "%d", expected_version);
	int ret = cursor_path(zk, group, shard, dir, path);
	if (ret)
		return ret;
	char val[64];
	int len = snprintf(val, sizeof(val), "{\"next_ts\":\"%llu\"}",
			   (unsigned long long)next_ts);
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "setting a cursor")))
		return ret;
	struct Stat st;
	int rc;
	if (expected_version == DXL_ZK_VERSION_NONE) {
		rc = create_cursor(c, dir, path, val, len);
		if (rc == ZNODEEXISTS)
			ret = dxl_err_set(DXL_E_STALE, "cursor %s already exists "
					  "(someone set it first): read it", path);
		else if (rc != ZOK)
			ret = zk_err(rc, "create", path);
		else if (new_version)
			*new_version = 0;
		goto out;
	}
	for (int tries = 0; tries < 4; tries++) {
		rc = zkx_set(c, path, val, len,
			      expected_version == DXL_ZK_VERSION_ANY ? -1
								     : expected_version,
			      &st);
		if (rc == ZOK) {
			if (new_version)
				*new_version = st.version;
			goto out;
		}
		if (rc == ZNONODE && expected_version == DXL_ZK_VERSION_ANY) {
			rc = create_cursor(c, dir, path, val, len);
			if (rc == ZNODEEXISTS)
				continue; /* created meanwhile: set it */
			if (rc == ZOK && new_version)
				*new_version = 0;
			ret = rc == ZOK ? 0 : zk_err(rc, "create", path);
			goto out;
		}
		break;
	}
	if (rc == ZNONODE)
		ret = dxl_err_set(DXL_E_STALE, "cursor %s does not exist (expected "
				  "version %d)", path, expected_version);
	else if (rc == ZBADVERSION)
		ret = dxl_err_set(DXL_E_STALE, "cursor %s is not at version %d: "
				  "another consumer of the group moved it; read it",
				  path, expected_version);
	else
		ret = zk_err(rc, "set", path);
out:
	zk_conn_put(c);
	return ret;
}

int dxl_cursor_delete(struct dxl_zk *zk, const char *group, uint32_t shard)
{
	char dir[ZK_PATH_MAX], path[ZK_PATH_MAX];
	if (!zk)
		return dxl_err_set(DXL_E_INVAL, "dxl_cursor_delete: NULL zk");
	int ret = cursor_path(zk, group, shard, dir, path);
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "deleting a cursor")))
		return ret;
	int rc = zkx_delete(c, path, -1);
	zk_conn_put(c);
	if (rc == ZNONODE)
		return dxl_err_set(DXL_E_NOENT, "cursor %s was never set", path);
	return rc == ZOK ? 0 : zk_err(rc, "delete", path);
}

int dxl_cursor_min(struct dxl_zk *zk, uint32_t shard, uint64_t *min_ts,
		   uint32_t *ngroups)
{
	if (!zk || !min_ts)
		return dxl_err_set(DXL_E_INVAL, "dxl_cursor_min: NULL argument");
	char dir[ZK_PATH_MAX];
	int ret = zk_path(zk, dir, "cursors");
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "listing consumer groups")))
		return ret;
	struct String_vector kids;
	int rc = zk_children(c, dir, false, &kids);
	zk_conn_put(c);
	*min_ts = UINT64_MAX;
	if (ngroups)
		*ngroups = 0;
	if (rc == ZNONODE)
		return 0;
	if (rc != ZOK)
		return zk_err(rc, "get_children", dir);
	/* a group whose cursor cannot be decoded is at an unknown position:
	 * it may not have read anything, so it holds everything back (0) --
	 * reported, after the others were read */
	char bad[160] = "";
	uint32_t nbad = 0;
	for (int32_t i = 0; i < kids.count && !ret; i++) {
		uint64_t ts;
		int r = dxl_cursor_get(zk, kids.data[i], shard, &ts, NULL);
		if (r == DXL_E_NOENT || r == DXL_E_INVAL) {
			dxl_err_clear(); /* no cursor for this shard, or not a group */
			continue;
		}
		if (r == DXL_E_CORRUPT) {
			if (!nbad++)
				snprintf(bad, sizeof(bad), "%s", dxl_errmsg());
			ts = 0;
		} else if (r) {
			ret = r;
			break;
		}
		if (ts < *min_ts)
			*min_ts = ts;
		if (ngroups)
			(*ngroups)++;
	}
	deallocate_String_vector(&kids);
	if (!ret && nbad)
		ret = dxl_err_set(DXL_E_CORRUPT, "shard %u: %u consumer group(s) with an unreadable "
				  "cursor, taken as 0 (%s)", shard, nbad, bad);
	return ret;
}

int dxl_cursor_list(struct dxl_zk *zk, uint32_t shard, struct dxl_cursor_info **out,
		    uint32_t *n)
{
	if (!zk || !out || !n)
		return dxl_err_set(DXL_E_INVAL, "dxl_cursor_list: NULL argument");
	*out = NULL;
	*n = 0;
	char dir[ZK_PATH_MAX];
	int ret = zk_path(zk, dir, "cursors");
	if (ret)
		return ret;
	struct zk_conn *c;
	if ((ret = zk_acquire(zk, &c, "listing consumer groups")))
		return ret;
	struct String_vector kids;
	int rc = zk_children(c, dir, false, &kids);
	if (rc == ZNONODE) {
		zk_conn_put(c);
		return 0;
	}
	if (rc != ZOK) {
		zk_conn_put(c);
		return zk_err(rc, "get_children", dir);
	}
	struct dxl_cursor_info *v = calloc(kids.count ? (size_t)kids.count : 1, sizeof(*v));
	if (!v)
		ret = dxl_err_set(DXL_E_NOMEM, "cursors of shard %u", shard);
	for (int32_t i = 0; !ret && i < kids.count; i++) {
		char gdir[ZK_PATH_MAX], path[ZK_PATH_MAX];
		if (cursor_path(zk, kids.data[i], shard, gdir, path)) {
			dxl_err_clear(); /* not a group name of ours */
			continue;
		}
		char *data;
		int len;
		struct Stat st;
		rc = zk_get(c, path, false, &data, &len, &st);
		if (rc == ZNONODE)
			continue;
		if (rc != ZOK) {
			ret = zk_err(rc, "get", path);
			break;
		}
		uint64_t ts;
		int r = decode(data, len, path, &ts);
		free(data);
		if (r) {
			dxl_err_clear();
			continue;
		}
		struct dxl_cursor_info *x = &v[(*n)++];
		snprintf(x->group, sizeof(x->group), "%s", kids.data[i]);
		x->next_ts = ts;
		x->mtime_ms = (uint64_t)st.mtime;
	}
	zk_conn_put(c);
	deallocate_String_vector(&kids);
	if (ret) {
		free(v);
		*n = 0;
		return ret;
	}
	*out = v;
	return 0;
}
