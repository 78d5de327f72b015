/* stores.c -- load replicas' store files and compare them key by key (stores.h) */
#include "stores.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/engine.h"

static int cmp_rec(const void *a, const void *b)
{
	const struct dxlt_rec *x = a, *y = b;
	if (x->table != y->table)
		return x->table < y->table ? -1 : 1;
	return x->key < y->key ? -1 : x->key > y->key;
}

void dxlt_recset_free(struct dxlt_recset *s)
{
	if (!s)
		return;
	free(s->r);
	free(s->t);
	free(s->values);
	memset(s, 0, sizeof(*s));
}

int dxlt_store_load(const char *data_root, const char *cluster, uint32_t node,
		    uint32_t shard, enum dxl_durability dur, struct dxlt_recset *out)
{
	memset(out, 0, sizeof(*out));
	char path[1024];
	snprintf(path, sizeof(path), "%s/%u/store-%u.dat", data_root, node, shard);
	struct dxl_region_id id = {.node_id = node, .kind = DXL_REGION_STORE};
	snprintf(id.cluster, sizeof(id.cluster), "%s", cluster);
	struct dxl_store *st = NULL;
	int ret = dxl_store_open(path, dur, &id, NULL, &st);
	if (ret) {
		dxl_err_prefix("%s", path);
		return ret;
	}
	/* room for every slot's value */
	size_t cap = 0, vbytes = 0;
	for (unsigned i = 0; i < dxl_store_ntables(st); i++) {
		struct dxl_table_schema sc;
		dxl_store_table_at(st, i, &sc);
		cap += sc.capacity;
		vbytes += sc.capacity * sc.value_size;
	}
	out->r = calloc(cap ? cap : 1, sizeof(*out->r));
	out->t = calloc(cap ? cap : 1, sizeof(*out->t));
	out->values = malloc(vbytes ? vbytes : 1);
	if (!out->r || !out->t || !out->values) {
		dxl_store_close(&st);
		dxlt_recset_free(out);
		return dxl_err_set(DXL_E_NOMEM, "%s: %zu records", path, cap);
	}
	size_t voff = 0;
	for (unsigned i = 0; i < dxl_store_ntables(st); i++) {
		struct dxl_table_schema sc;
		dxl_store_table_at(st, i, &sc);
		for (uint64_t slot = 0; slot < sc.capacity; slot++) {
			struct dxl_record rec;
			uint8_t *v = out->values + voff;
			ret = dxl_store_read(st, sc.id, slot, &rec, v, sc.value_size);
			if (ret == DXL_E_AGAIN) {
				out->torn++;
				continue;
			}
			if (ret) {
				dxl_err_prefix("%s: table %u slot %" PRIu64, path, sc.id, slot);
				dxl_store_close(&st);
				dxlt_recset_free(out);
				return ret;
			}
			if (!rec.live) {
				/* the key's tombstone if the store's key map
				 * names this slot for the absent key */
				struct dxl_store_absence a;
				if (rec.version >= 2 &&
				    dxl_store_absence(st, sc.id, rec.key, &a) == 0 && a.slot == slot)
					out->t[out->nt++] = (struct dxlt_rec){
						.table = sc.id, .key = rec.key, .version = rec.version,
						.ts = rec.ts};
				dxl_err_clear();
				continue;
			}
			out->r[out->n++] = (struct dxlt_rec){.table = sc.id, .key = rec.key,
							    .version = rec.version, .ts = rec.ts,
							    .len = rec.len, .value = v};
			voff += rec.len;
		}
	}
	struct dxl_store_stats ss;
	if (dxl_store_stats(st, UINT32_MAX, &ss) == 0)
		out->tombstones = ss.tombstones;
	for (unsigned i = 0; i < dxl_store_ntables(st) && i < 64; i++) {
		struct dxl_table_schema sc;
		dxl_store_table_at(st, i, &sc);
		out->table_id[out->ntables] = sc.id;
		out->floor[out->ntables++] = dxl_store_reclaim_floor(st, sc.id);
	}
	dxl_store_close(&st);
	qsort(out->r, out->n, sizeof(*out->r), cmp_rec);
	qsort(out->t, out->nt, sizeof(*out->t), cmp_rec);
	return 0;
}

const struct dxlt_rec *dxlt_recset_find(const struct dxlt_recset *s, uint32_t table,
					uint64_t key)
{
	struct dxlt_rec k = {.table = table, .key = key};
	return s->n ? bsearch(&k, s->r, s->n, sizeof(k), cmp_rec) : NULL;
}

#define WHY(...)                                                                    \
	do {                                                                        \
		if (why && o < cap)                                                 \
			o += (size_t)snprintf(why + o, cap - o, __VA_ARGS__);       \
	} while (0)

int dxlt_stores_compare(const char *data_root, const char *cluster, uint32_t shard,
			const uint32_t *nodes, uint32_t n, enum dxl_durability dur,
			char *why, size_t cap, struct dxlt_stores_report *rep)
{
	struct dxlt_stores_report r = {0};
	size_t o = 0;
	if (why && cap)
		why[0] = 0;
	struct dxlt_recset *s = calloc(n ? n : 1, sizeof(*s));
	if (!s)
		return -1;
	int ret = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (dxlt_store_load(data_root, cluster, nodes[i], shard, dur, &s[i])) {
			WHY("%s", dxl_errmsg());
			ret = -1;
			goto out;
		}
		r.stores++;
		r.tombstones += s[i].tombstones;
		if (s[i].torn) {
			WHY("shard %u node %u: %" PRIu64 " torn slots; ", shard, nodes[i], s[i].torn);
			r.diffs++;
		}
	}
	/* a merge over the sorted sets: every key any of them holds */
	size_t *at = calloc(n ? n : 1, sizeof(*at));
	if (!at) {
		ret = -1;
		goto out;
	}
	for (;;) {
		const struct dxlt_rec *lo = NULL;
		for (uint32_t i = 0; i < n; i++)
			if (at[i] < s[i].n && (!lo || cmp_rec(&s[i].r[at[i]], lo) < 0))
				lo = &s[i].r[at[i]];
		if (!lo)
			break;
		struct dxlt_rec k = *lo;
		r.keys++;
		const struct dxlt_rec *first = NULL;
		uint32_t first_node = 0;
		for (uint32_t i = 0; i < n; i++) {
			const struct dxlt_rec *x =
				at[i] < s[i].n && cmp_rec(&s[i].r[at[i]], &k) == 0 ? &s[i].r[at[i]] : NULL;
			if (x) {
				at[i]++;
				r.records++;
			}
			if (!x) {
				if (r.diffs++ < 5)
					WHY("shard %u table %u key %" PRIu64 ": absent on node %u, live on another (version %" PRIu64 "); ",
					    shard, k.table, k.key, nodes[i], k.version);
				continue;
			}
			if (!first) {
				first = x;
				first_node = nodes[i];
				continue;
			}
			if (x->version != first->version || x->len != first->len ||
			    memcmp(x->value, first->value, x->len)) {
				if (r.diffs++ < 5)
					WHY("shard %u table %u key %" PRIu64 ": node %u has version %" PRIu64 " (%u bytes), node %u version %" PRIu64 " (%u bytes)%s; ",
					    shard, k.table, k.key, first_node, first->version, first->len,
					    nodes[i], x->version, x->len,
					    x->version == first->version ? ", values differ" : "");
			}
		}
	}
	/* the tombstones: the same ones on every store, from the largest
	 * reclaim floor of their table on */
	memset(at, 0, (n ? n : 1) * sizeof(*at));
	for (;;) {
		const struct dxlt_rec *lo = NULL;
		for (uint32_t i = 0; i < n; i++)
			if (at[i] < s[i].nt && (!lo || cmp_rec(&s[i].t[at[i]], lo) < 0))
				lo = &s[i].t[at[i]];
		if (!lo)
			break;
		struct dxlt_rec k = *lo;
		uint64_t cut = 0;
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t j = 0; j < s[i].ntables; j++)
				if (s[i].table_id[j] == k.table)
					cut = DXL_MAX(cut, s[i].floor[j]);
		const struct dxlt_rec *x[64] = {0};
		bool above = false;
		for (uint32_t i = 0; i < n && i < 64; i++) {
			if (at[i] < s[i].nt && cmp_rec(&s[i].t[at[i]], &k) == 0)
				x[i] = &s[i].t[at[i]++];
			above |= x[i] && x[i]->ts >= cut;
		}
		if (!above)
			continue; /* below some store's floor: it may be gone there */
		r.tombs_compared++;
		/* where the key is live, the live comparison above counted it;
		 * everywhere else: the same tombstone */
		int ref = -1;
		for (uint32_t i = 0; i < n && i < 64; i++) {
			if (dxlt_recset_find(&s[i], k.table, k.key))
				continue;
			if (ref < 0) {
				ref = (int)i;
				continue;
			}
			const struct dxlt_rec *y = x[ref];
			if ((!x[i]) == (!y) && (!y || x[i]->version == y->version))
				continue;
			if (r.diffs++ < 5)
				WHY("shard %u table %u key %" PRIu64 ": node %u has %s%" PRIu64
				    ", node %u %s%" PRIu64 " (tombstones compared from ts %" PRIu64 "); ",
				    shard, k.table, k.key, nodes[ref], y ? "its tombstone version " : "no tombstone ",
				    y ? y->version : 0, nodes[i],
				    x[i] ? "its tombstone version " : "no tombstone ", x[i] ? x[i]->version : 0,
				    cut);
			break;
		}
	}
	free(at);
	if (r.diffs)
		ret = 1;
out:
	for (uint32_t i = 0; i < n; i++)
		dxlt_recset_free(&s[i]);
	free(s);
	if (rep)
		*rep = r;
	return ret;
}
