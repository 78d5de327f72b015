/* config.c -- the cluster configuration: value object, strict JSON, versioned CAS, watch */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "membership/zk_internal.h"

/*
 * The znode /dxl/<cluster>/config holds (docs/membership.md):
 *
 *   {"format": 1, "epoch": 7,
 *    "nodes":  [{"id": 1, "addr": "10.0.0.1:7000"}, ...],
 *    "shards": [{"id": 0, "primary": 1, "backups": [2, 3],
 *                "data_ids": {"1": "0x5e0c...", "2": "0x91aa..."}}, ...]}
 *
 * ("data_ids" is optional, and so is each member in it: the data identity
 * of the member's copy of the shard when it was added, replica.h.)
 *
 * It only changes by a compare-and-set on the znode version, and every
 * change carries a larger epoch: the epoch is what records, RPCs and fencing
 * compare (ARCHITECTURE.md §7), the znode version is only ZooKeeper's CAS
 * token.
 */

void dxl_cluster_config_init(struct dxl_cluster_config *c)
{
	memset(c, 0, sizeof(*c));
}

void dxl_cluster_config_clear(struct dxl_cluster_config *c)
{
	if (!c)
		return;
	free(c->nodes);
	free(c->shards);
	memset(c, 0, sizeof(*c));
}

int dxl_cluster_config_copy(struct dxl_cluster_config *dst,
			    const struct dxl_cluster_config *src)
{
	dxl_cluster_config_init(dst);
	dst->epoch = src->epoch;
	if (src->nnodes) {
		dst->nodes = malloc(src->nnodes * sizeof(*dst->nodes));
		if (!dst->nodes)
			goto nomem;
		memcpy(dst->nodes, src->nodes, src->nnodes * sizeof(*dst->nodes));
		dst->nnodes = src->nnodes;
	}
	if (src->nshards) {
		dst->shards = malloc(src->nshards * sizeof(*dst->shards));
		if (!dst->shards)
			goto nomem;
		memcpy(dst->shards, src->shards, src->nshards * sizeof(*dst->shards));
		dst->nshards = src->nshards;
	}
	return 0;
nomem:
	dxl_cluster_config_clear(dst);
	return dxl_err_set(DXL_E_NOMEM, "cluster config copy");
}

const struct dxl_cluster_node *
dxl_cluster_config_node(const struct dxl_cluster_config *c, uint32_t id)
{
	for (uint32_t i = 0; i < c->nnodes; i++)
		if (c->nodes[i].id == id)
			return &c->nodes[i];
	return NULL;
}

/* member_pos -- node's index in the shard's member order (0 = primary),
 * -1 when it is not a member */
static int member_pos(const struct dxl_cluster_shard *sh, uint32_t node)
{
	if (sh->primary == node)
		return 0;
	for (uint32_t i = 0; i < sh->nbackups && i < DXL_CONFIG_MAX_BACKUPS; i++)
		if (sh->backups[i] == node)
			return 1 + (int)i;
	return -1;
}

uint64_t dxl_cluster_shard_data_id(const struct dxl_cluster_shard *sh, uint32_t node)
{
	int k = sh ? member_pos(sh, node) : -1;
	return k < 0 ? 0 : sh->data_id[k];
}

int dxl_cluster_config_set_data_id(struct dxl_cluster_config *c, uint32_t shard,
				   uint32_t node, uint64_t data_id)
{
	struct dxl_cluster_shard *sh =
		(struct dxl_cluster_shard *)dxl_cluster_config_shard(c, shard);
	int k = sh ? member_pos(sh, node) : -1;
	if (k < 0)
		return dxl_err_set(DXL_E_NOENT, "cluster config: node %u is not a member of shard %u",
				   node, shard);
	sh->data_id[k] = data_id;
	return 0;
}

uint32_t dxl_cluster_shard_members(const struct dxl_cluster_shard *sh, uint32_t *ids)
{
	if (!sh)
		return 0;
	uint32_t n = 0;
	ids[n++] = sh->primary;
	for (uint32_t i = 0; i < sh->nbackups && n < DXL_CONFIG_MAX_REPLICAS; i++)
		ids[n++] = sh->backups[i];
	return n;
}

const struct dxl_cluster_shard *
dxl_cluster_config_shard(const struct dxl_cluster_config *c, uint32_t id)
{
	for (uint32_t i = 0; i < c->nshards; i++)
		if (c->shards[i].id == id)
			return &c->shards[i];
	return NULL;
}

int dxl_cluster_config_set_node(struct dxl_cluster_config *c, uint32_t id,
				const char *addr)
{
	if (!addr || !addr[0] || strlen(addr) >= DXL_CONFIG_ADDR_MAX)
		return dxl_err_set(DXL_E_INVAL, "cluster config: node %u: address "
				   "empty or longer than %d bytes", id,
				   DXL_CONFIG_ADDR_MAX - 1);
	struct dxl_cluster_node *n = (struct dxl_cluster_node *)
		dxl_cluster_config_node(c, id);
	if (!n) {
		if (c->nnodes >= DXL_CONFIG_MAX_NODES)
			return dxl_err_set(DXL_E_INVAL, "cluster config: more than %d "
					   "nodes", DXL_CONFIG_MAX_NODES);
		void *p = realloc(c->nodes, (c->nnodes + 1) * sizeof(*c->nodes));
		if (!p)
			return dxl_err_set(DXL_E_NOMEM, "cluster config: node %u", id);
		c->nodes = p;
		n = &c->nodes[c->nnodes++];
		memset(n, 0, sizeof(*n));
		n->id = id;
	}
	snprintf(n->addr, sizeof(n->addr), "%s", addr);
	return 0;
}

int dxl_cluster_config_remove_node(struct dxl_cluster_config *c, uint32_t id)
{
	for (uint32_t i = 0; i < c->nnodes; i++) {
		if (c->nodes[i].id == id) {
			memmove(&c->nodes[i], &c->nodes[i + 1],
				(c->nnodes - i - 1) * sizeof(*c->nodes));
			c->nnodes--;
			return 0;
		}
	}
	return dxl_err_set(DXL_E_NOENT, "cluster config: no node %u", id);
}

int dxl_cluster_config_set_shard(struct dxl_cluster_config *c, uint32_t id,
				 uint32_t primary, const uint32_t *backups,
				 uint32_t nbackups)
{
	if (nbackups > DXL_CONFIG_MAX_BACKUPS || (nbackups && !backups))
		return dxl_err_set(DXL_E_INVAL, "cluster config: shard %u: %u "
				   "backups (at most %d: replication factor %d)",
				   id, nbackups, DXL_CONFIG_MAX_BACKUPS,
				   DXL_CONFIG_MAX_REPLICAS);
	struct dxl_cluster_shard *s = (struct dxl_cluster_shard *)
		dxl_cluster_config_shard(c, id);
	if (!s) {
		if (c->nshards >= DXL_CONFIG_MAX_SHARDS)
			return dxl_err_set(DXL_E_INVAL, "cluster config: more than %d "
					   "shards", DXL_CONFIG_MAX_SHARDS);
		void *p = realloc(c->shards, (c->nshards + 1) * sizeof(*c->shards));
		if (!p)
			return dxl_err_set(DXL_E_NOMEM, "cluster config: shard %u", id);
		c->shards = p;
		s = &c->shards[c->nshards++];
	}
	memset(s, 0, sizeof(*s));
	s->id = id;
	s->primary = primary;
	s->nbackups = nbackups;
	if (nbackups)
		memcpy(s->backups, backups, nbackups * sizeof(*backups));
	return 0;
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static bool has_id(const uint32_t *sorted, uint32_t n, uint32_t id)
{
	return bsearch(&id, sorted, n, sizeof(id), u32_cmp) != NULL;
}

/* sorted copy of ids; the first duplicate in *dup (returns false) */
static int sorted_ids(const void *base, size_t stride, uint32_t n,
		      uint32_t **out, uint32_t *dup, bool *has_dup)
{
	uint32_t *ids = malloc((n + 1) * sizeof(*ids));
	if (!ids)
		return dxl_err_set(DXL_E_NOMEM, "cluster config validation");
	for (uint32_t i = 0; i < n; i++)
		ids[i] = *(const uint32_t *)((const char *)base + i * stride);
	qsort(ids, n, sizeof(*ids), u32_cmp);
	*has_dup = false;
	for (uint32_t i = 1; i < n; i++)
		if (ids[i] == ids[i - 1]) {
			*has_dup = true;
			*dup = ids[i];
			break;
		}
	*out = ids;
	return 0;
}

int dxl_cluster_config_validate(const struct dxl_cluster_config *c)
{
	if (!c)
		return dxl_err_set(DXL_E_INVAL, "cluster config: NULL");
	if (c->epoch == 0 || c->epoch > INT64_MAX)
		return dxl_err_set(DXL_E_INVAL, "cluster config: epoch %llu out of "
				   "[1, 2^63-1]", (unsigned long long)c->epoch);
	if (c->nnodes > DXL_CONFIG_MAX_NODES || c->nshards > DXL_CONFIG_MAX_SHARDS ||
	    (c->nnodes && !c->nodes) || (c->nshards && !c->shards))
		return dxl_err_set(DXL_E_INVAL, "cluster config: %u nodes, %u shards "
				   "(limits %d, %d)", c->nnodes, c->nshards,
				   DXL_CONFIG_MAX_NODES, DXL_CONFIG_MAX_SHARDS);
	uint32_t *nids = NULL, *sids = NULL, dup = 0;
	bool d;
	int ret = sorted_ids(c->nodes, sizeof(*c->nodes), c->nnodes, &nids, &dup, &d);
	if (ret)
		return ret;
	if (d) {
		ret = dxl_err_set(DXL_E_INVAL, "cluster config: node %u listed twice",
				  dup);
		goto out;
	}
	for (uint32_t i = 0; i < c->nnodes; i++) {
		const char *a = c->nodes[i].addr;
		if (!a[0] || !memchr(a, 0, sizeof(c->nodes[i].addr))) {
			ret = dxl_err_set(DXL_E_INVAL, "cluster config: node %u has "
					  "an empty or unterminated address",
					  c->nodes[i].id);
			goto out;
		}
	}
	if ((ret = sorted_ids(c->shards, sizeof(*c->shards), c->nshards, &sids,
			      &dup, &d)))
		goto out;
	if (d) {
		ret = dxl_err_set(DXL_E_INVAL, "cluster config: shard %u listed "
				  "twice", dup);
		goto out;
	}
	for (uint32_t i = 0; i < c->nshards; i++) {
		const struct dxl_cluster_shard *s = &c->shards[i];
		if (s->nbackups > DXL_CONFIG_MAX_BACKUPS) {
			ret = dxl_err_set(DXL_E_INVAL, "cluster config: shard %u has "
					  "%u backups (at most %d)", s->id,
					  s->nbackups, DXL_CONFIG_MAX_BACKUPS);
			goto out;
		}
		if (!has_id(nids, c->nnodes, s->primary)) {
			ret = dxl_err_set(DXL_E_INVAL, "cluster config: shard %u: "
					  "primary %u is not in the node list",
					  s->id, s->primary);
			goto out;
		}
		for (uint32_t j = 0; j < s->nbackups; j++) {
			uint32_t b = s->backups[j];
			if (b == s->primary) {
				ret = dxl_err_set(DXL_E_INVAL, "cluster config: "
						  "shard %u: node %u is both "
						  "primary and backup", s->id, b);
				goto out;
			}
			for (uint32_t k = 0; k < j; k++)
				if (s->backups[k] == b) {
					ret = dxl_err_set(DXL_E_INVAL,
							  "cluster config: shard "
							  "%u: backup %u listed "
							  "twice", s->id, b);
					goto out;
				}
			if (!has_id(nids, c->nnodes, b)) {
				ret = dxl_err_set(DXL_E_INVAL, "cluster config: "
						  "shard %u: backup %u is not in "
						  "the node list", s->id, b);
				goto out;
			}
		}
	}
out:
	free(nids);
	free(sids);
	return ret;
}

/* ---- JSON ------------------------------------------------------------------ */

int dxl_cluster_config_encode(const struct dxl_cluster_config *c, char **json,
			      size_t *len)
{
	int ret = dxl_cluster_config_validate(c);
	if (ret)
		return ret;
	json_t *nodes = json_array(), *shards = json_array();
	json_t *root = json_object();
	bool bad = !nodes || !shards || !root;
	for (uint32_t i = 0; !bad && i < c->nnodes; i++) {
		json_t *n = json_pack("{s:I, s:s}", "id",
				      (json_int_t)c->nodes[i].id, "addr",
				      c->nodes[i].addr);
		bad = !n || json_array_append_new(nodes, n);
	}
	for (uint32_t i = 0; !bad && i < c->nshards; i++) {
		const struct dxl_cluster_shard *s = &c->shards[i];
		json_t *b = json_array();
		bad = !b;
		for (uint32_t j = 0; !bad && j < s->nbackups; j++)
			bad = json_array_append_new(b, json_integer(s->backups[j])) != 0;
		json_t *o = bad ? NULL
				: json_pack("{s:I, s:I, s:O}", "id", (json_int_t)s->id,
					    "primary", (json_int_t)s->primary,
					    "backups", b);
		json_decref(b);
		json_t *ids = NULL;
		for (uint32_t k = 0; o && k <= s->nbackups; k++) {
			if (!s->data_id[k])
				continue;
			char key[16], hex[24];
			snprintf(key, sizeof(key), "%u", k ? s->backups[k - 1] : s->primary);
			snprintf(hex, sizeof(hex), "0x%llx", (unsigned long long)s->data_id[k]);
			if (!ids && !(ids = json_object()))
				bad = true;
			if (ids && json_object_set_new(ids, key, json_string(hex)))
				bad = true;
		}
		if (ids && o && json_object_set_new(o, "data_ids", ids))
			bad = true;
		else if (ids && !o)
			json_decref(ids);
		bad = bad || !o || json_array_append_new(shards, o);
	}
	if (!bad) {
		bad |= json_object_set_new(root, "format",
					   json_integer(DXL_CONFIG_FORMAT)) != 0;
		bad |= json_object_set_new(root, "epoch",
					   json_integer((json_int_t)c->epoch)) != 0;
		bad |= json_object_set(root, "nodes", nodes) != 0;
		bad |= json_object_set(root, "shards", shards) != 0;
	}
	char *s = bad ? NULL : json_dumps(root, JSON_COMPACT);
	json_decref(nodes);
	json_decref(shards);
	json_decref(root);
	if (!s)
		return dxl_err_set(DXL_E_NOMEM, "cluster config: encoding");
	*json = s;
	if (len)
		*len = strlen(s);
	return 0;
}

static int corrupt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int corrupt(const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return dxl_err_set(DXL_E_CORRUPT, "cluster config: %s", msg);
}

/* only_keys -- every key of o is one of the NULL-terminated names */
static int only_keys(json_t *o, const char *where, const char *const *names)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v) {
		bool ok = false;
		for (const char *const *n = names; *n; n++)
			ok |= strcmp(k, *n) == 0;
		if (!ok)
			return corrupt("%s: unknown key \"%s\"", where, k);
	}
	return 0;
}

/* get_uint -- o[key] must be an integer in [lo, hi] */
static int get_uint(json_t *o, const char *where, const char *key, uint64_t lo,
		    uint64_t hi, uint64_t *out)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return corrupt("%s: missing \"%s\"", where, key);
	if (!json_is_integer(v))
		return corrupt("%s: \"%s\" is not an integer", where, key);
	json_int_t x = json_integer_value(v);
	if (x < 0 || (uint64_t)x < lo || (uint64_t)x > hi)
		return corrupt("%s: \"%s\" = %lld out of [%llu, %llu]", where, key,
			       (long long)x, (unsigned long long)lo,
			       (unsigned long long)hi);
	*out = (uint64_t)x;
	return 0;
}

static int decode_nodes(json_t *arr, struct dxl_cluster_config *c)
{
	if (!json_is_array(arr))
		return corrupt("\"nodes\" is not an array");
	size_t n = json_array_size(arr);
	if (n > DXL_CONFIG_MAX_NODES)
		return corrupt("%zu nodes (at most %d)", n, DXL_CONFIG_MAX_NODES);
	c->nodes = calloc(n + 1, sizeof(*c->nodes));
	if (!c->nodes)
		return dxl_err_set(DXL_E_NOMEM, "cluster config: decoding");
	static const char *const keys[] = {"id", "addr", NULL};
	for (size_t i = 0; i < n; i++) {
		json_t *o = json_array_get(arr, i);
		char where[48];
		snprintf(where, sizeof(where), "nodes[%zu]", i);
		if (!json_is_object(o))
			return corrupt("%s is not an object", where);
		int ret = only_keys(o, where, keys);
		uint64_t id;
		if (ret || (ret = get_uint(o, where, "id", 0, UINT32_MAX, &id)))
			return ret;
		json_t *a = json_object_get(o, "addr");
		if (!a)
			return corrupt("%s: missing \"addr\"", where);
		if (!json_is_string(a) || json_string_length(a) == 0 ||
		    json_string_length(a) >= DXL_CONFIG_ADDR_MAX ||
		    strlen(json_string_value(a)) != json_string_length(a))
			return corrupt("%s: \"addr\" is not a string of 1..%d bytes",
				       where, DXL_CONFIG_ADDR_MAX - 1);
		c->nodes[i].id = (uint32_t)id;
		snprintf(c->nodes[i].addr, sizeof(c->nodes[i].addr), "%s",
			 json_string_value(a));
		c->nnodes = (uint32_t)(i + 1);
	}
	return 0;
}

static int decode_shards(json_t *arr, struct dxl_cluster_config *c)
{
	if (!json_is_array(arr))
		return corrupt("\"shards\" is not an array");
	size_t n = json_array_size(arr);
	if (n > DXL_CONFIG_MAX_SHARDS)
		return corrupt("%zu shards (at most %d)", n, DXL_CONFIG_MAX_SHARDS);
	c->shards = calloc(n + 1, sizeof(*c->shards));
	if (!c->shards)
		return dxl_err_set(DXL_E_NOMEM, "cluster config: decoding");
	static const char *const keys[] = {"id", "primary", "backups", "data_ids", NULL};
	for (size_t i = 0; i < n; i++) {
		json_t *o = json_array_get(arr, i);
		char where[48];
		snprintf(where, sizeof(where), "shards[%zu]", i);
		if (!json_is_object(o))
			return corrupt("%s is not an object", where);
		int ret = only_keys(o, where, keys);
		uint64_t id, primary;
		if (ret || (ret = get_uint(o, where, "id", 0, UINT32_MAX, &id)) ||
		    (ret = get_uint(o, where, "primary", 0, UINT32_MAX, &primary)))
			return ret;
		json_t *b = json_object_get(o, "backups");
		if (!b)
			return corrupt("%s: missing \"backups\"", where);
		if (!json_is_array(b))
			return corrupt("%s: \"backups\" is not an array", where);
		if (json_array_size(b) > DXL_CONFIG_MAX_BACKUPS)
			return corrupt("%s: %zu backups (at most %d)", where,
				       json_array_size(b), DXL_CONFIG_MAX_BACKUPS);
		struct dxl_cluster_shard *s = &c->shards[i];
		s->id = (uint32_t)id;
		s->primary = (uint32_t)primary;
		for (size_t j = 0; j < json_array_size(b); j++) {
			json_t *x = json_array_get(b, j);
			if (!json_is_integer(x) || json_integer_value(x) < 0 ||
			    json_integer_value(x) > UINT32_MAX)
				return corrupt("%s: backups[%zu] is not a node id",
					       where, j);
			s->backups[s->nbackups++] = (uint32_t)json_integer_value(x);
		}
		json_t *ids = json_object_get(o, "data_ids");
		if (ids && !json_is_object(ids))
			return corrupt("%s: \"data_ids\" is not an object", where);
		const char *k;
		json_t *v;
		json_object_foreach(ids, k, v) {
			uint64_t node, did;
			int pos = dxl_parse_u64(k, &node) || node > UINT32_MAX || (k[0] == '0' && k[1])
					  ? -1
					  : member_pos(s, (uint32_t)node);
			if (pos < 0)
				return corrupt("%s: data_ids: \"%s\" is not a member of the shard",
					       where, k);
			if (!json_is_string(v) || dxl_parse_hex64(json_string_value(v), &did) ||
			    !did)
				return corrupt("%s: data_ids: \"%s\" is not 0x<1..16 hex digits>, not 0",
					       where, k);
			s->data_id[pos] = did;
		}
		c->nshards = (uint32_t)(i + 1);
	}
	return 0;
}

int dxl_cluster_config_decode(const char *json, size_t len,
			      struct dxl_cluster_config *c)
{
	dxl_cluster_config_init(c);
	if (!json)
		return corrupt("no data");
	json_error_t je;
	json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return corrupt("malformed JSON at line %d column %d: %s", je.line,
			       je.column, je.text);
	int ret;
	static const char *const keys[] = {"format", "epoch", "nodes", "shards",
					   NULL};
	uint64_t format, epoch;
	if (!json_is_object(root)) {
		ret = corrupt("not a JSON object");
		goto out;
	}
	if ((ret = only_keys(root, "top level", keys)))
		goto out;
	json_t *f = json_object_get(root, "format");
	if (!f) {
		ret = corrupt("missing \"format\"");
		goto out;
	}
	if (json_is_integer(f) && json_integer_value(f) != DXL_CONFIG_FORMAT) {
		ret = dxl_err_set(DXL_E_VERSION, "cluster config: format %lld, this "
				  "build reads format %d", (long long)json_integer_value(f),
				  DXL_CONFIG_FORMAT);
		goto out;
	}
	if ((ret = get_uint(root, "top level", "format", 1, 1, &format)) ||
	    (ret = get_uint(root, "top level", "epoch", 1, INT64_MAX, &epoch)))
		goto out;
	c->epoch = epoch;
	json_t *nodes = json_object_get(root, "nodes");
	json_t *shards = json_object_get(root, "shards");
	if (!nodes) {
		ret = corrupt("missing \"nodes\"");
		goto out;
	}
	if (!shards) {
		ret = corrupt("missing \"shards\"");
		goto out;
	}
	if ((ret = decode_nodes(nodes, c)) || (ret = decode_shards(shards, c)))
		goto out;
	if ((ret = dxl_cluster_config_validate(c)) == DXL_E_INVAL) {
		char msg[400];
		snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
		ret = dxl_err_set(DXL_E_CORRUPT, "%s (stored configuration is "
				  "inconsistent)", msg);
	}
out:
	json_decref(root);
	if (ret)
		dxl_cluster_config_clear(c);
	return ret;
}

/* ---- ZooKeeper --------------------------------------------------------------- */

int dxl_cluster_config_read(struct dxl_zk *zk, struct dxl_cluster_config *c,
			    int32_t *version)
{
	if (!zk || !c)
		return dxl_err_set(DXL_E_INVAL, "dxl_cluster_config_read: NULL argument");
	dxl_cluster_config_init(c);
	char path[ZK_PATH_MAX];
	int ret = zk_path(zk, path, "config");
	if (ret)
		return ret;
	struct zk_conn *conn;
	if ((ret = zk_acquire(zk, &conn, "reading the cluster config")))
		return ret;
	char *data;
	int len;
	struct Stat st;
	int rc = zk_get(conn, path, false, &data, &len, &st);
	zk_conn_put(conn);
	if (rc == ZNONODE)
		return dxl_err_set(DXL_E_NOENT, "no cluster configuration yet (%s)",
				   path);
	if (rc != ZOK)
		return zk_err(rc, "get", path);
	ret = dxl_cluster_config_decode(data, (size_t)len, c);
	free(data);
	if (ret) {
		dxl_err_prefix("%s (version %d)", path, st.version);
		return ret;
	}
	if (version)
		*version = st.version;
	return 0;
}

int dxl_cluster_config_cas(struct dxl_zk *zk, const struct dxl_cluster_config *c,
			   int32_t expected_version, int32_t *new_version)
{
	if (!zk || !c)
		return dxl_err_set(DXL_E_INVAL, "dxl_cluster_config_cas: NULL argument");
	if (expected_version < DXL_ZK_VERSION_NONE)
		return dxl_err_set(DXL_E_INVAL, "dxl_cluster_config_cas: expected "
				   "version %d: a compare-and-set needs the version "
				   "read (or DXL_ZK_VERSION_NONE to create)",
				   expected_version);
	char path[ZK_PATH_MAX];
	int ret = zk_path(zk, path, "config");
	if (ret)
		return ret;
	char *json;
	size_t len;
	if ((ret = dxl_cluster_config_encode(c, &json, &len)))
		return ret;
	if (len > ZK_MAX_DATA) {
		free(json);
		return dxl_err_set(DXL_E_TOOBIG, "cluster config of %zu bytes "
				   "(ZooKeeper takes at most %d)", len, ZK_MAX_DATA);
	}
	struct zk_conn *conn;
	if ((ret = zk_acquire(zk, &conn, "writing the cluster config"))) {
		free(json);
		return ret;
	}
	char *data = NULL;
	int dlen;
	struct Stat st;
	int rc;
	if (expected_version == DXL_ZK_VERSION_NONE) {
		rc = zkx_create(conn, path, json, (int)len,
				    0, NULL, 0);
		if (rc == ZNODEEXISTS)
			ret = dxl_err_set(DXL_E_STALE, "%s already exists (someone "
					  "created it first): read it and retry",
					  path);
		else if (rc != ZOK)
			ret = zk_err(rc, "create", path);
		else if (new_version)
			*new_version = 0;
		goto out;
	}
	rc = zk_get(conn, path, false, &data, &dlen, &st);
	if (rc == ZNONODE) {
		ret = dxl_err_set(DXL_E_STALE, "%s does not exist (expected version "
				  "%d): read it and retry", path, expected_version);
		goto out;
	}
	if (rc != ZOK) {
		ret = zk_err(rc, "get", path);
		goto out;
	}
	if (st.version != expected_version) {
		ret = dxl_err_set(DXL_E_STALE, "%s is at version %d, not %d: "
				  "someone else changed it; read it and recompute",
				  path, st.version, expected_version);
		goto out;
	}
	struct dxl_cluster_config cur;
	if ((ret = dxl_cluster_config_decode(data, (size_t)dlen, &cur))) {
		dxl_err_prefix("%s (version %d) cannot be decoded, so its epoch is "
			       "unknown; repair it by hand", path, st.version);
		goto out;
	}
	uint64_t cur_epoch = cur.epoch;
	dxl_cluster_config_clear(&cur);
	if (c->epoch <= cur_epoch) {
		ret = dxl_err_set(DXL_E_INVAL, "%s: new epoch %llu does not exceed "
				  "the stored epoch %llu (every configuration "
				  "change needs a new epoch)", path,
				  (unsigned long long)c->epoch,
				  (unsigned long long)cur_epoch);
		goto out;
	}
	struct Stat nst;
	/* the version check makes this a CAS: if the znode changed since our
	 * read, our epoch check was against stale data and this fails */
	rc = zkx_set(conn, path, json, (int)len, expected_version, &nst);
	if (rc == ZBADVERSION)
		ret = dxl_err_set(DXL_E_STALE, "%s changed after version %d: read "
				  "it and recompute", path, expected_version);
	else if (rc != ZOK)
		ret = zk_err(rc, "set", path);
	else if (new_version)
		*new_version = nst.version;
out:
	free(data);
	free(json);
	zk_conn_put(conn);
	return ret;
}

/* ---- watch ------------------------------------------------------------------ */

struct dxl_cluster_config_watch {
	struct zk_obs obs; /* first */
	dxl_cluster_config_cb cb;
	void *arg;
	char path[ZK_PATH_MAX];
	/* last reported (event thread only) */
	bool reported, existed;
	int32_t version;
	int64_t czxid;
};

static bool cw_wants(struct zk_obs *o, int type, const char *path)
{
	struct dxl_cluster_config_watch *w = (struct dxl_cluster_config_watch *)o;
	return strcmp(path, w->path) == 0;
}

static int cw_sync(struct zk_obs *o)
{
	struct dxl_cluster_config_watch *w = (struct dxl_cluster_config_watch *)o;
	struct zk_conn *conn;
	int ret = zk_acquire(o->zk, &conn, "watching the cluster config");
	if (ret)
		return ret;
	char *data = NULL;
	int len = 0;
	struct Stat st;
	int rc;
	for (int tries = 0; tries < 5; tries++) {
		rc = zk_get(conn, w->path, true, &data, &len, &st);
		if (rc != ZNONODE)
			break;
		/* absent: watch its creation; it may appear in between */
		rc = zk_exists(conn, w->path, true, &st);
		if (rc == ZNONODE)
			break;
	}
	zk_conn_put(conn);
	if (rc != ZOK && rc != ZNONODE)
		return zk_err(rc, "get", w->path);
	if (rc == ZNONODE) {
		if (!w->reported || w->existed) {
			w->reported = true;
			w->existed = false;
			if (!atomic_load(&o->dead)) {
				dxl_err_set(DXL_E_NOENT, "no cluster configuration (%s)",
					    w->path);
				w->cb(w->arg, NULL, -1, DXL_E_NOENT);
			}
		}
		return 0;
	}
	if (w->reported && w->existed && st.version == w->version &&
	    st.czxid == w->czxid) {
		free(data);
		return 0;
	}
	w->reported = true;
	w->existed = true;
	w->version = st.version;
	w->czxid = st.czxid;
	struct dxl_cluster_config cfg;
	ret = dxl_cluster_config_decode(data, (size_t)len, &cfg);
	free(data);
	if (ret)
		dxl_err_prefix("%s (version %d)", w->path, st.version);
	if (!atomic_load(&o->dead))
		w->cb(w->arg, ret ? NULL : &cfg, st.version, ret);
	if (!ret)
		dxl_cluster_config_clear(&cfg);
	return 0;
}

static void cw_destroy(struct zk_obs *o)
{
	free(o);
}

int dxl_cluster_config_watch_new(struct dxl_zk *zk, dxl_cluster_config_cb cb,
				 void *arg, struct dxl_cluster_config_watch **out)
{
	if (!zk || !cb || !out)
		return dxl_err_set(DXL_E_INVAL, "dxl_cluster_config_watch_new: NULL "
				   "argument");
	struct dxl_cluster_config_watch *w = calloc(1, sizeof(*w));
	if (!w)
		return dxl_err_set(DXL_E_NOMEM, "dxl_cluster_config_watch_new");
	int ret = zk_path(zk, w->path, "config");
	if (ret) {
		free(w);
		return ret;
	}
	w->cb = cb;
	w->arg = arg;
	w->obs.kind = "config watch";
	w->obs.sync = cw_sync;
	w->obs.wants = cw_wants;
	w->obs.destroy = cw_destroy;
	*out = w; /* before any callback can run (it may delete w) */
	zk_obs_add(zk, &w->obs);
	return 0;
}

void dxl_cluster_config_watch_delete(struct dxl_cluster_config_watch **pw)
{
	if (!pw || !*pw)
		return;
	zk_obs_remove(&(*pw)->obs);
	*pw = NULL;
}
