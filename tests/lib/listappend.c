/* listappend.c -- list-append histories and their checker (listappend.h) */
#include "listappend.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct la_tx {
	uint64_t id;
	int st;
	bool in;     /* in the graph: committed, or unknown and seen */
	size_t node; /* its node when in */
};

struct la_app {
	uint64_t txn, key;
	uint32_t elem;
};

struct la_rd {
	uint64_t txn, key;
	size_t off;
	uint32_t n;
};

struct la_fin {
	uint64_t key;
	size_t off;
	uint32_t n;
};

struct la_pos { /* an element of a final list */
	uint32_t elem;
	uint64_t key;
	uint32_t pos;
	size_t app; /* its append (index), SIZE_MAX: none */
};

struct dxlt_la {
	struct la_tx *tx;
	size_t ntx, txcap;
	struct la_app *ap;
	size_t nap, apcap;
	struct la_rd *rd;
	size_t nrd, rdcap;
	struct la_fin *fin;
	size_t nfin, fincap;
	uint32_t *el;
	size_t nel, elcap;
};

#define GROW(arr, n, cap)                                                      \
	do {                                                                   \
		if ((n) == (cap)) {                                            \
			size_t nc__ = (cap) ? 2 * (cap) : 256;                 \
			void *p__ = realloc((arr), nc__ * sizeof(*(arr)));     \
			if (!p__)                                              \
				return -1;                                     \
			(arr) = p__;                                           \
			(cap) = nc__;                                          \
		}                                                              \
	} while (0)

struct dxlt_la *dxlt_la_new(void)
{
	return calloc(1, sizeof(struct dxlt_la));
}

void dxlt_la_free(struct dxlt_la *h)
{
	if (!h)
		return;
	free(h->tx);
	free(h->ap);
	free(h->rd);
	free(h->fin);
	free(h->el);
	free(h);
}

int dxlt_la_txn(struct dxlt_la *h, uint64_t txn, enum dxlt_la_status st)
{
	GROW(h->tx, h->ntx, h->txcap);
	h->tx[h->ntx++] = (struct la_tx){.id = txn, .st = (int)st};
	return 0;
}

static int put_elems(struct dxlt_la *h, const uint32_t *e, uint32_t n, size_t *off)
{
	while (h->nel + n > h->elcap) {
		size_t nc = h->elcap ? 2 * h->elcap : 4096;
		uint32_t *p = realloc(h->el, nc * sizeof(*p));
		if (!p)
			return -1;
		h->el = p;
		h->elcap = nc;
	}
	*off = h->nel;
	if (n)
		memcpy(h->el + h->nel, e, n * sizeof(*e));
	h->nel += n;
	return 0;
}

int dxlt_la_read(struct dxlt_la *h, uint64_t txn, uint64_t key, const uint32_t *elems,
		 uint32_t n)
{
	GROW(h->rd, h->nrd, h->rdcap);
	size_t off;
	if (put_elems(h, elems, n, &off))
		return -1;
	h->rd[h->nrd++] = (struct la_rd){.txn = txn, .key = key, .off = off, .n = n};
	return 0;
}

int dxlt_la_append(struct dxlt_la *h, uint64_t txn, uint64_t key, uint32_t elem)
{
	GROW(h->ap, h->nap, h->apcap);
	h->ap[h->nap++] = (struct la_app){.txn = txn, .key = key, .elem = elem};
	return 0;
}

int dxlt_la_final(struct dxlt_la *h, uint64_t key, const uint32_t *elems, uint32_t n)
{
	GROW(h->fin, h->nfin, h->fincap);
	size_t off;
	if (put_elems(h, elems, n, &off))
		return -1;
	h->fin[h->nfin++] = (struct la_fin){.key = key, .off = off, .n = n};
	return 0;
}

static int cmp_tx(const void *a, const void *b)
{
	const struct la_tx *x = a, *y = b;
	return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_app(const void *a, const void *b)
{
	const struct la_app *x = a, *y = b;
	return x->elem < y->elem ? -1 : x->elem > y->elem;
}

static int cmp_fin(const void *a, const void *b)
{
	const struct la_fin *x = a, *y = b;
	return x->key < y->key ? -1 : x->key > y->key;
}

static int cmp_pos(const void *a, const void *b)
{
	const struct la_pos *x = a, *y = b;
	return x->elem < y->elem ? -1 : x->elem > y->elem;
}

static struct la_tx *find_tx(struct dxlt_la *h, uint64_t id)
{
	struct la_tx k = {.id = id};
	return bsearch(&k, h->tx, h->ntx, sizeof(k), cmp_tx);
}

static size_t find_app(struct dxlt_la *h, uint32_t elem)
{
	struct la_app k = {.elem = elem};
	struct la_app *p = bsearch(&k, h->ap, h->nap, sizeof(k), cmp_app);
	return p ? (size_t)(p - h->ap) : SIZE_MAX;
}

static struct la_fin *find_fin(struct dxlt_la *h, uint64_t key)
{
	struct la_fin k = {.key = key};
	return bsearch(&k, h->fin, h->nfin, sizeof(k), cmp_fin);
}

static void note(struct dxlt_la_result *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void note(struct dxlt_la_result *r, const char *fmt, ...)
{
	if (!r->anomalies++) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(r->why, sizeof(r->why), fmt, ap);
		va_end(ap);
	}
}

struct edge {
	size_t from, to;
	char kind;
};

static int add_edge(struct edge **e, size_t *n, size_t *cap, size_t a, size_t b, char k)
{
	if (a == b)
		return 0;
	GROW(*e, *n, *cap);
	(*e)[(*n)++] = (struct edge){a, b, k};
	return 0;
}

/* the first cycle of the graph into r (1), 0 if none, -1 out of memory */
static int find_cycle(size_t nn, const struct edge *e, size_t ne, const uint64_t *ids,
		      struct dxlt_la_result *r)
{
	size_t *start = calloc(nn + 1, sizeof(*start));
	size_t *adj = malloc((ne ? ne : 1) * sizeof(*adj));
	char *ak = malloc(ne ? ne : 1);
	unsigned char *color = calloc(nn, 1);
	size_t *parent = malloc(nn * sizeof(*parent)), *stack = malloc(nn * sizeof(*stack));
	size_t *pos = malloc(nn * sizeof(*pos)), *fill = calloc(nn, sizeof(*fill));
	char *pk = malloc(nn);
	int ret = 0;
	if (!start || !adj || !ak || !color || !parent || !stack || !pos || !fill || !pk) {
		ret = -1;
		goto out;
	}
	for (size_t i = 0; i < ne; i++)
		start[e[i].from + 1]++;
	for (size_t i = 0; i < nn; i++)
		start[i + 1] += start[i];
	for (size_t i = 0; i < ne; i++) {
		size_t at = start[e[i].from] + fill[e[i].from]++;
		adj[at] = e[i].to;
		ak[at] = e[i].kind;
	}
	for (size_t s = 0; s < nn && !ret; s++) {
		if (color[s])
			continue;
		size_t sp = 0;
		stack[sp] = s;
		pos[sp++] = start[s];
		color[s] = 1;
		parent[s] = SIZE_MAX;
		while (sp && !ret) {
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
				pk[x] = ak[at];
				stack[sp] = x;
				pos[sp++] = start[x];
			} else if (color[x] == 1) {
				ret = 1;
				static const char *kn[128] = {['w'] = "ww", ['r'] = "wr", ['a'] = "rw"};
				char buf[1024];
				size_t o = (size_t)snprintf(buf, sizeof(buf), "cycle: txn %llx",
							    (unsigned long long)ids[x]);
				size_t chain[64], nc = 0;
				for (size_t y = v; y != x && y != SIZE_MAX && nc < 64; y = parent[y])
					chain[nc++] = y;
				for (size_t c = nc; c-- > 0 && o < sizeof(buf);)
					o += (size_t)snprintf(buf + o, sizeof(buf) - o, " -%s-> txn %llx",
							      kn[(int)pk[chain[c]]],
							      (unsigned long long)ids[chain[c]]);
				if (o < sizeof(buf))
					snprintf(buf + o, sizeof(buf) - o, " -%s-> txn %llx",
						 kn[(int)ak[at]], (unsigned long long)ids[x]);
				note(r, "%s", buf);
			}
		}
	}
out:
	free(start);
	free(adj);
	free(ak);
	free(color);
	free(parent);
	free(stack);
	free(pos);
	free(fill);
	free(pk);
	return ret;
}

int dxlt_la_check(struct dxlt_la *h, struct dxlt_la_result *r)
{
	memset(r, 0, sizeof(*r));
	qsort(h->tx, h->ntx, sizeof(*h->tx), cmp_tx);
	for (size_t i = 1; i < h->ntx; i++)
		if (h->tx[i].id == h->tx[i - 1].id) {
			snprintf(r->why, sizeof(r->why), "transaction %llx declared twice",
				 (unsigned long long)h->tx[i].id);
			return -1;
		}
	qsort(h->ap, h->nap, sizeof(*h->ap), cmp_app);
	for (size_t i = 0; i < h->nap; i++) {
		if (i && h->ap[i].elem == h->ap[i - 1].elem) {
			snprintf(r->why, sizeof(r->why), "element %u appended twice", h->ap[i].elem);
			return -1;
		}
		if (!find_tx(h, h->ap[i].txn)) {
			snprintf(r->why, sizeof(r->why), "append of %u by undeclared txn %llx",
				 h->ap[i].elem, (unsigned long long)h->ap[i].txn);
			return -1;
		}
	}
	qsort(h->fin, h->nfin, sizeof(*h->fin), cmp_fin);
	r->reads = h->nrd;
	r->appends = h->nap;
	/* every element of the final lists, with its append */
	size_t npos = 0;
	for (size_t i = 0; i < h->nfin; i++)
		npos += h->fin[i].n;
	struct la_pos *fp = malloc((npos ? npos : 1) * sizeof(*fp));
	uint8_t *present = calloc(h->nap ? h->nap : 1, 1);
	struct edge *e = NULL;
	size_t ne = 0, ecap = 0;
	uint64_t *ids = NULL;
	int ret = 0;
	if (!fp || !present) {
		ret = -1;
		goto out;
	}
	npos = 0;
	for (size_t i = 0; i < h->nfin; i++)
		for (uint32_t p = 0; p < h->fin[i].n; p++) {
			uint32_t el = h->el[h->fin[i].off + p];
			size_t a = find_app(h, el);
			fp[npos++] = (struct la_pos){.elem = el, .key = h->fin[i].key, .pos = p, .app = a};
			if (a == SIZE_MAX)
				note(r, "key %llu: element %u in the final list was never appended",
				     (unsigned long long)h->fin[i].key, el);
			else if (h->ap[a].key != h->fin[i].key)
				note(r, "element %u appended to key %llu is in key %llu's list", el,
				     (unsigned long long)h->ap[a].key, (unsigned long long)h->fin[i].key);
			else if (present[a]++)
				note(r, "key %llu: element %u twice in the final list",
				     (unsigned long long)h->fin[i].key, el);
		}
	qsort(fp, npos, sizeof(*fp), cmp_pos);
	/* which transactions are in: committed ones, unknown ones seen */
	for (size_t i = 0; i < h->ntx; i++)
		h->tx[i].in = h->tx[i].st == DXLT_LA_COMMITTED;
	for (size_t a = 0; a < h->nap; a++) {
		struct la_tx *t = find_tx(h, h->ap[a].txn);
		if (present[a] && t->st == DXLT_LA_UNKNOWN)
			t->in = true;
	}
	for (size_t a = 0; a < h->nap; a++) {
		struct la_tx *t = find_tx(h, h->ap[a].txn);
		if (t->st == DXLT_LA_ABORTED && present[a])
			note(r, "G1a: element %u of aborted txn %llx is in key %llu's list",
			     h->ap[a].elem, (unsigned long long)t->id, (unsigned long long)h->ap[a].key);
		else if (t->in && !present[a])
			note(r, "element %u appended to key %llu by %s txn %llx is lost", h->ap[a].elem,
			     (unsigned long long)h->ap[a].key,
			     t->st == DXLT_LA_COMMITTED ? "committed" : "partly visible",
			     (unsigned long long)t->id);
	}
	/* the nodes: 0 = the initial state, then every transaction in */
	ids = malloc((h->ntx + 1) * sizeof(*ids));
	if (!ids) {
		ret = -1;
		goto out;
	}
	size_t nn = 1;
	ids[0] = 0;
	for (size_t i = 0; i < h->ntx; i++) {
		if (!h->tx[i].in)
			continue;
		h->tx[i].node = nn;
		ids[nn++] = h->tx[i].id;
		if (h->tx[i].st == DXLT_LA_UNKNOWN)
			r->unknown_in++;
	}
	for (size_t i = 0; i < h->ntx; i++)
		if (h->tx[i].st == DXLT_LA_UNKNOWN && !h->tx[i].in)
			r->unknown_out++;
	r->txns = nn - 1;
#define NODE_OF_APP(a) ((a) == SIZE_MAX ? 0 : find_tx(h, h->ap[(a)].txn)->node)
	/* ww: the final order of each key */
	for (size_t i = 0; i < h->nfin; i++) {
		const struct la_fin *f = &h->fin[i];
		size_t prev = 0;
		for (uint32_t p = 0; p < f->n; p++) {
			size_t a = find_app(h, h->el[f->off + p]);
			if (a == SIZE_MAX || !find_tx(h, h->ap[a].txn)->in)
				continue; /* noted above */
			size_t node = NODE_OF_APP(a);
			if (add_edge(&e, &ne, &ecap, prev, node, 'w')) {
				ret = -1;
				goto out;
			}
			prev = node;
		}
	}
	/* wr and rw: every read of a transaction in */
	for (size_t i = 0; i < h->nrd; i++) {
		const struct la_rd *rd = &h->rd[i];
		struct la_tx *t = find_tx(h, rd->txn);
		if (!t) {
			snprintf(r->why, sizeof(r->why), "read by undeclared txn %llx",
				 (unsigned long long)rd->txn);
			ret = -1;
			goto out;
		}
		if (!t->in)
			continue;
		const struct la_fin *f = find_fin(h, rd->key);
		uint32_t fn = f ? f->n : 0;
		bool prefix = rd->n <= fn;
		for (uint32_t p = 0; prefix && p < rd->n; p++)
			prefix = h->el[rd->off + p] == h->el[f->off + p];
		if (!prefix) {
			char seen[200];
			size_t o = 0;
			for (uint32_t p = 0; p < rd->n && o < sizeof(seen) - 12; p++)
				o += (size_t)snprintf(seen + o, sizeof(seen) - o, "%s%u", p ? "," : "",
						      h->el[rd->off + p]);
			seen[o] = 0;
			note(r, "txn %llx read key %llu = [%s] (%u elements): not a prefix of its final list (%u elements)",
			     (unsigned long long)t->id, (unsigned long long)rd->key, seen, rd->n, fn);
			continue;
		}
		size_t writer = rd->n ? NODE_OF_APP(find_app(h, h->el[rd->off + rd->n - 1])) : 0;
		if (add_edge(&e, &ne, &ecap, writer, t->node, 'r')) {
			ret = -1;
			goto out;
		}
		if (rd->n < fn) {
			size_t nx = find_app(h, h->el[f->off + rd->n]);
			if (nx != SIZE_MAX && find_tx(h, h->ap[nx].txn)->in &&
			    add_edge(&e, &ne, &ecap, t->node, NODE_OF_APP(nx), 'a')) {
				ret = -1;
				goto out;
			}
		}
	}
#undef NODE_OF_APP
	r->edges = ne;
	if (find_cycle(nn, e, ne, ids, r) < 0)
		ret = -1;
out:
	free(fp);
	free(present);
	free(e);
	free(ids);
	if (ret < 0)
		return -1;
	return r->anomalies ? 1 : 0;
}
