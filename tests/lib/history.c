/* history.c -- conflict-graph serializability checker (history.h) */
#include "history.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct op {
	uint64_t txn;
	uint32_t table;
	uint64_t key;
	uint64_t version;
};

struct vec {
	struct op *v;
	size_t n, cap;
};

struct dxlt_history {
	struct vec reads, writes;
};

struct edge {
	size_t from, to;
	char kind; /* 'w' ww, 'r' wr, 'a' rw (anti) */
};

static int push(struct vec *x, struct op o)
{
	if (x->n == x->cap) {
		size_t nc = x->cap ? x->cap * 2 : 1024;
		struct op *nv = realloc(x->v, nc * sizeof(*nv));
		if (!nv)
			return -1;
		x->v = nv;
		x->cap = nc;
	}
	x->v[x->n++] = o;
	return 0;
}

struct dxlt_history *dxlt_history_new(void)
{
	return calloc(1, sizeof(struct dxlt_history));
}

void dxlt_history_free(struct dxlt_history *h)
{
	if (!h)
		return;
	free(h->reads.v);
	free(h->writes.v);
	free(h);
}

int dxlt_history_read(struct dxlt_history *h, uint64_t txn, uint32_t table,
		      uint64_t key, uint64_t version)
{
	return push(&h->reads, (struct op){txn, table, key, version});
}

int dxlt_history_write(struct dxlt_history *h, uint64_t txn, uint32_t table,
		       uint64_t key, uint64_t version)
{
	return push(&h->writes, (struct op){txn, table, key, version});
}

static int cmp_op(const void *a, const void *b)
{
	const struct op *x = a, *y = b;
	if (x->table != y->table)
		return x->table < y->table ? -1 : 1;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	if (x->version != y->version)
		return x->version < y->version ? -1 : 1;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* first write of (table, key) with version >= v (index, or n) */
static size_t lower_bound(const struct vec *w, uint32_t table, uint64_t key, uint64_t v)
{
	size_t lo = 0, hi = w->n;
	struct op k = {0, table, key, v};
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (cmp_op(&w->v[mid], &k) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static bool same_rec(const struct op *a, uint32_t table, uint64_t key)
{
	return a->table == table && a->key == key;
}

static size_t node_of(const uint64_t *ids, size_t n, uint64_t txn)
{
	const uint64_t *p = bsearch(&txn, ids, n, sizeof(*ids), cmp_u64);
	return p ? (size_t)(p - ids) : SIZE_MAX;
}

int dxlt_history_check(struct dxlt_history *h, char *why, size_t cap,
		       size_t *ntxn, size_t *nedges)
{
	if (why && cap)
		why[0] = 0;
	struct vec *w = &h->writes, *r = &h->reads;
	if (w->n)
		qsort(w->v, w->n, sizeof(*w->v), cmp_op);
	for (size_t i = 1; i < w->n; i++)
		if (cmp_op(&w->v[i - 1], &w->v[i]) == 0) {
			if (why)
				snprintf(why, cap,
					 "version %llu of table %u key %llu written by txn %llu and txn %llu",
					 (unsigned long long)w->v[i].version, w->v[i].table,
					 (unsigned long long)w->v[i].key,
					 (unsigned long long)w->v[i - 1].txn,
					 (unsigned long long)w->v[i].txn);
			return -1;
		}
	/* the transactions: 0 (initial) and every reader and writer */
	size_t nid = 0;
	uint64_t *ids = malloc((w->n + r->n + 1) * sizeof(*ids));
	if (!ids)
		return -1;
	ids[nid++] = 0;
	for (size_t i = 0; i < w->n; i++)
		ids[nid++] = w->v[i].txn;
	for (size_t i = 0; i < r->n; i++)
		ids[nid++] = r->v[i].txn;
	qsort(ids, nid, sizeof(*ids), cmp_u64);
	size_t u = 0;
	for (size_t i = 0; i < nid; i++)
		if (!u || ids[u - 1] != ids[i])
			ids[u++] = ids[i];
	nid = u;

	struct edge *e = NULL;
	size_t ne = 0, ecap = 0;
	int ret = 0;
#define ADD_EDGE(a, b, k)                                                     \
	do {                                                                  \
		if ((a) != (b)) {                                             \
			if (ne == ecap) {                                     \
				ecap = ecap ? ecap * 2 : 1024;                \
				struct edge *ee = realloc(e, ecap * sizeof(*e)); \
				if (!ee) {                                    \
					ret = -1;                             \
					goto out;                             \
				}                                             \
				e = ee;                                       \
			}                                                     \
			e[ne++] = (struct edge){(a), (b), (k)};               \
		}                                                             \
	} while (0)
	/* ww: consecutive versions of a record */
	for (size_t i = 0; i < w->n; i++) {
		size_t a = node_of(ids, nid, w->v[i].txn);
		if (i + 1 < w->n && same_rec(&w->v[i + 1], w->v[i].table, w->v[i].key))
			ADD_EDGE(a, node_of(ids, nid, w->v[i + 1].txn), 'w');
		/* the initial version precedes the first written one */
		if ((i == 0 || !same_rec(&w->v[i - 1], w->v[i].table, w->v[i].key)) &&
		    w->v[i].version > 0)
			ADD_EDGE(node_of(ids, nid, 0), a, 'w');
	}
	/* wr and rw */
	for (size_t i = 0; i < r->n; i++) {
		const struct op *o = &r->v[i];
		size_t reader = node_of(ids, nid, o->txn);
		size_t k = lower_bound(w, o->table, o->key, o->version);
		bool exact = k < w->n && same_rec(&w->v[k], o->table, o->key) &&
			     w->v[k].version == o->version;
		size_t writer;
		if (exact) {
			writer = node_of(ids, nid, w->v[k].txn);
			k++;
		} else if (o->version == 0) {
			writer = node_of(ids, nid, 0);
		} else {
			if (why)
				snprintf(why, cap,
					 "txn %llu read version %llu of table %u key %llu, which no committed transaction wrote",
					 (unsigned long long)o->txn, (unsigned long long)o->version,
					 o->table, (unsigned long long)o->key);
			ret = -1;
			goto out;
		}
		ADD_EDGE(writer, reader, 'r');
		if (k < w->n && same_rec(&w->v[k], o->table, o->key))
			ADD_EDGE(reader, node_of(ids, nid, w->v[k].txn), 'a');
	}
#undef ADD_EDGE
	/* adjacency (CSR) and an iterative DFS */
	{
		size_t *start = calloc(nid + 1, sizeof(*start));
		size_t *adj = malloc((ne ? ne : 1) * sizeof(*adj));
		char *akind = malloc(ne ? ne : 1);
		unsigned char *color = calloc(nid, 1);
		size_t *parent = malloc(nid * sizeof(*parent));
		char *pkind = malloc(nid);
		size_t *stack = malloc(nid * sizeof(*stack)), *pos = malloc(nid * sizeof(*pos));
		if (!start || !adj || !akind || !color || !parent || !pkind || !stack || !pos) {
			ret = -1;
		} else {
			for (size_t i = 0; i < ne; i++)
				start[e[i].from + 1]++;
			for (size_t i = 0; i < nid; i++)
				start[i + 1] += start[i];
			size_t *fill = calloc(nid, sizeof(*fill));
			for (size_t i = 0; fill && i < ne; i++) {
				size_t at = start[e[i].from] + fill[e[i].from]++;
				adj[at] = e[i].to;
				akind[at] = e[i].kind;
			}
			free(fill);
			for (size_t s = 0; s < nid && ret == 0; s++) {
				if (color[s])
					continue;
				size_t sp = 0;
				stack[sp] = s;
				pos[sp] = start[s];
				color[s] = 1;
				parent[s] = SIZE_MAX;
				sp++;
				while (sp && ret == 0) {
					size_t v = stack[sp - 1];
					if (pos[sp - 1] == start[v + 1]) {
						color[v] = 2;
						sp--;
						continue;
					}
					size_t at = pos[sp - 1]++;
					size_t x = adj[at];
					if (color[x] == 0) {
						color[x] = 1;
						parent[x] = v;
						pkind[x] = akind[at];
						stack[sp] = x;
						pos[sp] = start[x];
						sp++;
					} else if (color[x] == 1) {
						/* a cycle x -> ... -> v -> x */
						ret = 1;
						if (why) {
							static const char *kn[128] = {
								['w'] = "ww", ['r'] = "wr", ['a'] = "rw"};
							size_t o = (size_t)snprintf(
								why, cap, "cycle: txn %llu",
								(unsigned long long)ids[x]);
							/* walk back from v to x */
							size_t chain[64], nc = 0;
							for (size_t y = v; y != x && y != SIZE_MAX && nc < 64;
							     y = parent[y])
								chain[nc++] = y;
							for (size_t c = nc; c-- > 0 && o < cap;) {
								size_t y = chain[c];
								o += (size_t)snprintf(why + o, cap - o,
										      " -%s-> txn %llu",
										      kn[(int)pkind[y]],
										      (unsigned long long)ids[y]);
							}
							if (o < cap)
								snprintf(why + o, cap - o, " -%s-> txn %llu",
									 kn[(int)akind[at]],
									 (unsigned long long)ids[x]);
						}
					}
				}
			}
		}
		free(start);
		free(adj);
		free(akind);
		free(color);
		free(parent);
		free(pkind);
		free(stack);
		free(pos);
	}
out:
	if (ntxn)
		*ntxn = nid;
	if (nedges)
		*nedges = ne;
	free(e);
	free(ids);
	return ret;
}
