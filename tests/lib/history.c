/* history.c -- conflict-graph serializability checker (history.h) */
#include "history.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_VALUE = 0, K_GONE = 1 }; /* writes: value / delete; reads: present / absent */

struct op {
	uint64_t txn;
	uint32_t table;
	uint64_t key;
	uint64_t version;
	uint8_t kind;
};

struct vec {
	struct op *v;
	size_t n, cap;
};

struct tinfo {
	uint64_t txn, begin, end;
	size_t seq; /* the order they were given in: the last one wins */
	bool maybe;
};

struct dxlt_history {
	struct vec reads, writes;
	struct tinfo *ti;
	size_t nti, ticap;
	uint8_t *mst; /* while checking: per ti, 0 not a maybe, 1 undecided,
			 2 counted, 3 left out */
};

struct edge {
	size_t from, to;
	char kind; /* 'w' ww, 'r' wr, 'a' rw (anti), 't' real time */
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
	free(h->ti);
	free(h);
}

int dxlt_history_read(struct dxlt_history *h, uint64_t txn, uint32_t table,
		      uint64_t key, uint64_t version)
{
	return push(&h->reads, (struct op){txn, table, key, version, K_VALUE});
}

int dxlt_history_read_absent(struct dxlt_history *h, uint64_t txn, uint32_t table,
			     uint64_t key, uint64_t version)
{
	return push(&h->reads, (struct op){txn, table, key, version, K_GONE});
}

int dxlt_history_write(struct dxlt_history *h, uint64_t txn, uint32_t table,
		       uint64_t key, uint64_t version)
{
	return push(&h->writes, (struct op){txn, table, key, version, K_VALUE});
}

int dxlt_history_delete(struct dxlt_history *h, uint64_t txn, uint32_t table,
			uint64_t key, uint64_t version)
{
	return push(&h->writes, (struct op){txn, table, key, version, K_GONE});
}

int dxlt_history_txn(struct dxlt_history *h, uint64_t txn, uint64_t begin_ns,
		     uint64_t end_ns, bool maybe)
{
	if (h->nti == h->ticap) {
		size_t nc = h->ticap ? 2 * h->ticap : 256;
		struct tinfo *n = realloc(h->ti, nc * sizeof(*n));
		if (!n)
			return -1;
		h->ti = n;
		h->ticap = nc;
	}
	h->ti[h->nti] = (struct tinfo){txn, begin_ns, end_ns, h->nti, maybe};
	h->nti++;
	return 0;
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

static int cmp_ti(const void *a, const void *b)
{
	const struct tinfo *x = a, *y = b;
	if (x->txn != y->txn)
		return x->txn < y->txn ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int cmp_ti_txn(const void *a, const void *b)
{
	const struct tinfo *x = a, *y = b;
	return x->txn < y->txn ? -1 : x->txn > y->txn;
}

/* first write of (table, key) with version >= v (index, or n) */
static size_t lower_bound(const struct vec *w, uint32_t table, uint64_t key, uint64_t v)
{
	size_t lo = 0, hi = w->n;
	struct op k = {0, table, key, v, 0};
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

/* some counted write of (table, key) is a delete */
static bool deleted(const struct vec *w, uint32_t table, uint64_t key)
{
	for (size_t k = lower_bound(w, table, key, 0); k < w->n && same_rec(&w->v[k], table, key);
	     k++)
		if (w->v[k].kind == K_GONE)
			return true;
	return false;
}

static size_t node_of(const uint64_t *ids, size_t n, uint64_t txn)
{
	const uint64_t *p = bsearch(&txn, ids, n, sizeof(*ids), cmp_u64);
	return p ? (size_t)(p - ids) : SIZE_MAX;
}

static struct tinfo *ti_of(struct dxlt_history *h, uint64_t txn)
{
	struct tinfo k = {.txn = txn};
	return h->nti ? bsearch(&k, h->ti, h->nti, sizeof(k), cmp_ti_txn) : NULL;
}

static int outcome(struct dxlt_history *h, uint64_t txn)
{
	struct tinfo *t = ti_of(h, txn);
	return t ? h->mst[t - h->ti] : 0;
}

static void set_outcome(struct dxlt_history *h, uint64_t txn, uint8_t v)
{
	struct tinfo *t = ti_of(h, txn);
	if (t && h->mst[t - h->ti])
		h->mst[t - h->ti] = v;
}

static bool counted(struct dxlt_history *h, uint64_t txn)
{
	int o = outcome(h, txn);
	return o == 0 || o == 2;
}

int dxlt_history_check(struct dxlt_history *h, char *why, size_t cap,
		       size_t *ntxn, size_t *nedges)
{
	struct dxlt_history_stats st;
	int r = dxlt_history_check_ex(h, why, cap, &st);
	if (ntxn)
		*ntxn = st.ntxn;
	if (nedges)
		*nedges = st.nedges;
	return r;
}

int dxlt_history_check_ex(struct dxlt_history *h, char *why, size_t cap,
			  struct dxlt_history_stats *stp)
{
	struct dxlt_history_stats st = {0};
	if (why && cap)
		why[0] = 0;
	/* transaction infos: sorted, one per txn (the last said wins) */
	if (h->nti) {
		qsort(h->ti, h->nti, sizeof(*h->ti), cmp_ti);
		size_t u = 0;
		for (size_t i = 0; i < h->nti; i++) {
			if (u && h->ti[u - 1].txn == h->ti[i].txn)
				h->ti[u - 1] = h->ti[i];
			else
				h->ti[u++] = h->ti[i];
		}
		h->nti = u;
	}
	uint8_t *mst = calloc(h->nti + 1, 1);
	if (!mst)
		return -1;
	h->mst = mst;
	for (size_t i = 0; i < h->nti; i++)
		mst[i] = h->ti[i].maybe ? 1 : 0;

	struct vec *aw = &h->writes, *r = &h->reads;
	if (aw->n)
		qsort(aw->v, aw->n, sizeof(*aw->v), cmp_op);
	int ret = 0;
	/* two writers of one version: both committed is impossible; a maybe
	 * that collides with a committed one did not commit */
	for (size_t i = 1; i < aw->n; i++) {
		if (cmp_op(&aw->v[i - 1], &aw->v[i]) != 0)
			continue;
		int a = outcome(h, aw->v[i - 1].txn), b = outcome(h, aw->v[i].txn);
		if (!a && !b) {
			if (why)
				snprintf(why, cap,
					 "version %llu of table %u key %llu written by txn %llu and txn %llu",
					 (unsigned long long)aw->v[i].version, aw->v[i].table,
					 (unsigned long long)aw->v[i].key,
					 (unsigned long long)aw->v[i - 1].txn,
					 (unsigned long long)aw->v[i].txn);
			ret = -1;
			goto out0;
		}
		if (!a)
			set_outcome(h, aw->v[i].txn, 3);
		if (!b)
			set_outcome(h, aw->v[i - 1].txn, 3);
	}
	/* evidence: a counted transaction read a state a maybe wrote -- a
	 * value read: the write of exactly that version; an absence read:
	 * the state is the last write at or below its version, so the last
	 * delete there, unless a counted write comes after it (maybe writes
	 * of a value there may be left out; issue 20 review: an insert's
	 * absence read is at its lock version - 1, not at the delete's) */
	for (bool changed = true; changed;) {
		changed = false;
		for (size_t i = 0; i < r->n; i++) {
			const struct op *o = &r->v[i];
			if (!counted(h, o->txn) || !o->version)
				continue;
			if (o->kind == K_GONE) {
				size_t k = lower_bound(aw, o->table, o->key, o->version + 1);
				while (k > 0 && same_rec(&aw->v[k - 1], o->table, o->key)) {
					const struct op *x = &aw->v[--k];
					int oc = outcome(h, x->txn);
					if (oc == 3 || (oc == 1 && x->kind != K_GONE))
						continue; /* left out, or may be */
					if (oc == 1) {
						set_outcome(h, x->txn, 2);
						changed = true;
					}
					break;
				}
				continue;
			}
			for (size_t k = lower_bound(aw, o->table, o->key, o->version);
			     k < aw->n && same_rec(&aw->v[k], o->table, o->key) &&
			     aw->v[k].version == o->version;
			     k++)
				if (outcome(h, aw->v[k].txn) == 1) {
					set_outcome(h, aw->v[k].txn, 2);
					changed = true;
				}
		}
	}
	for (size_t i = 0; i < h->nti; i++)
		if (mst[i] == 1)
			mst[i] = 3;
	for (size_t i = 0; i < h->nti; i++) {
		st.maybe_in += mst[i] == 2;
		st.maybe_out += mst[i] == 3;
	}
	/* the counted writes */
	struct vec wv = {0};
	struct vec *w = &wv;
	for (size_t i = 0; i < aw->n; i++)
		if (counted(h, aw->v[i].txn) && push(w, aw->v[i])) {
			ret = -1;
			goto out0;
		}
	for (size_t i = 1; i < w->n; i++)
		if (cmp_op(&w->v[i - 1], &w->v[i]) == 0) {
			if (why)
				snprintf(why, cap,
					 "version %llu of table %u key %llu written by txn %llu and txn %llu (unknown outcomes both read)",
					 (unsigned long long)w->v[i].version, w->v[i].table,
					 (unsigned long long)w->v[i].key,
					 (unsigned long long)w->v[i - 1].txn,
					 (unsigned long long)w->v[i].txn);
			ret = -1;
			goto out1;
		}
	for (size_t i = 0; i < w->n; i++)
		st.deletes += w->v[i].kind == K_GONE;

	/* the transactions: 0 (initial) and every counted reader and writer */
	size_t nid = 0;
	uint64_t *ids = malloc((w->n + r->n + h->nti + 1) * sizeof(*ids));
	if (!ids) {
		ret = -1;
		goto out1;
	}
	ids[nid++] = 0;
	for (size_t i = 0; i < w->n; i++)
		ids[nid++] = w->v[i].txn;
	for (size_t i = 0; i < r->n; i++)
		if (counted(h, r->v[i].txn))
			ids[nid++] = r->v[i].txn;
	for (size_t i = 0; i < h->nti; i++)
		if (mst[i] != 3)
			ids[nid++] = h->ti[i].txn;
	qsort(ids, nid, sizeof(*ids), cmp_u64);
	size_t u = 0;
	for (size_t i = 0; i < nid; i++)
		if (!u || ids[u - 1] != ids[i])
			ids[u++] = ids[i];
	nid = u;

	/* real time: the acknowledged ones in order of acknowledgement; a
	 * chain of time nodes nid.. (node nid+i: "after the i-th ack") */
	struct tinfo **ack = malloc((h->nti + 1) * sizeof(*ack));
	size_t nack = 0;
	if (!ack) {
		ret = -1;
		goto out2;
	}
	for (size_t i = 0; i < h->nti; i++)
		if (mst[i] != 3 && h->ti[i].end && node_of(ids, nid, h->ti[i].txn) != SIZE_MAX)
			ack[nack++] = &h->ti[i];
	for (size_t i = 1; i < nack; i++) /* insertion sort by end */
		for (size_t j = i; j > 0 && ack[j - 1]->end > ack[j]->end; j--) {
			struct tinfo *x = ack[j];
			ack[j] = ack[j - 1];
			ack[j - 1] = x;
		}
	size_t nn = nid + nack; /* nodes */

	struct edge *e = NULL;
	size_t ne = 0, ecap = 0;
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
		if (!counted(h, o->txn))
			continue;
		size_t reader = node_of(ids, nid, o->txn);
		size_t k = lower_bound(w, o->table, o->key, o->version);
		bool exact = k < w->n && same_rec(&w->v[k], o->table, o->key) &&
			     w->v[k].version == o->version;
		size_t writer;
		if (o->kind == K_VALUE) {
			if (exact && w->v[k].kind == K_GONE) {
				if (why)
					snprintf(why, cap,
						 "txn %llu read a value of table %u key %llu at version %llu, which txn %llu deleted",
						 (unsigned long long)o->txn, o->table,
						 (unsigned long long)o->key,
						 (unsigned long long)o->version,
						 (unsigned long long)w->v[k].txn);
				ret = -1;
				goto out;
			}
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
		} else {
			st.absent_reads++;
			if (!o->version && deleted(w, o->table, o->key)) {
				/* version 0 of a key that was deleted: a miss
				 * without a tombstone -- the initial state, or a
				 * delete whose tombstone was reclaimed (misses
				 * then report 0): which absence is not known, so
				 * the read gives no edge (issue 20 review: taken
				 * for the initial state it made a false rw + rt
				 * cycle). Never deleted: the initial state. */
				st.absent_unknown++;
				continue;
			}
			/* the state: the last write at or below the version */
			if (exact)
				k++;
			if (k > 0 && same_rec(&w->v[k - 1], o->table, o->key)) {
				const struct op *s = &w->v[k - 1];
				if (s->kind != K_GONE) {
					if (why)
						snprintf(why, cap,
							 "txn %llu read table %u key %llu as absent (at version %llu), but version %llu written by txn %llu is present",
							 (unsigned long long)o->txn, o->table,
							 (unsigned long long)o->key,
							 (unsigned long long)o->version,
							 (unsigned long long)s->version,
							 (unsigned long long)s->txn);
					ret = -1;
					goto out;
				}
				writer = node_of(ids, nid, s->txn);
			} else {
				writer = node_of(ids, nid, 0);
			}
		}
		ADD_EDGE(writer, reader, 'r');
		if (k < w->n && same_rec(&w->v[k], o->table, o->key))
			ADD_EDGE(reader, node_of(ids, nid, w->v[k].txn), 'a');
	}
	/* rt: T_i -> time node i -> time node i+1; time node i -> every
	 * transaction that began after the i-th acknowledgement */
	for (size_t i = 0; i < nack; i++) {
		ADD_EDGE(node_of(ids, nid, ack[i]->txn), nid + i, 't');
		if (i + 1 < nack)
			ADD_EDGE(nid + i, nid + i + 1, 't');
	}
	for (size_t i = 0; i < h->nti && nack; i++) {
		const struct tinfo *t = &h->ti[i];
		if (mst[i] == 3 || !t->begin)
			continue;
		size_t x = node_of(ids, nid, t->txn);
		if (x == SIZE_MAX)
			continue;
		size_t lo = 0, hi = nack; /* acks with end < begin: [0, lo) */
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (ack[mid]->end < t->begin)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo) {
			ADD_EDGE(nid + lo - 1, x, 't');
			st.rt_edges++;
		}
	}
#undef ADD_EDGE
	/* adjacency (CSR) and an iterative DFS */
	{
		size_t *start = calloc(nn + 1, sizeof(*start));
		size_t *adj = malloc((ne ? ne : 1) * sizeof(*adj));
		char *akind = malloc(ne ? ne : 1);
		unsigned char *color = calloc(nn, 1);
		size_t *parent = malloc(nn * sizeof(*parent));
		char *pkind = malloc(nn);
		size_t *stack = malloc(nn * sizeof(*stack)), *pos = malloc(nn * sizeof(*pos));
		if (!start || !adj || !akind || !color || !parent || !pkind || !stack || !pos) {
			ret = -1;
		} else {
			for (size_t i = 0; i < ne; i++)
				start[e[i].from + 1]++;
			for (size_t i = 0; i < nn; i++)
				start[i + 1] += start[i];
			size_t *fill = calloc(nn, sizeof(*fill));
			for (size_t i = 0; fill && i < ne; i++) {
				size_t at = start[e[i].from] + fill[e[i].from]++;
				adj[at] = e[i].to;
				akind[at] = e[i].kind;
			}
			free(fill);
			for (size_t s = 0; s < nn && ret == 0; s++) {
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
								['w'] = "ww", ['r'] = "wr", ['a'] = "rw",
								['t'] = "rt"};
							size_t chain[64], nc = 0;
							for (size_t y = v; y != x && y != SIZE_MAX && nc < 64;
							     y = parent[y])
								chain[nc++] = y;
							size_t o = 0;
#define NAME(n) ((n) < nid ? (unsigned long long)ids[n] : 0ull)
#define PRINT(fmt, ...)                                                              \
	do {                                                                         \
		if (o < cap)                                                         \
			o += (size_t)snprintf(why + o, cap - o, fmt, __VA_ARGS__);  \
	} while (0)
							if (x < nid)
								PRINT("cycle: txn %llu", NAME(x));
							else
								PRINT("cycle: %s", "(acknowledged)");
							for (size_t c = nc; c-- > 0;) {
								size_t y = chain[c];
								if (y < nid)
									PRINT(" -%s-> txn %llu", kn[(int)pkind[y]],
									      NAME(y));
								else if (pkind[y] != 't' || c == 0 ||
									 chain[c - 1] < nid)
									PRINT(" -%s-> %s", kn[(int)pkind[y]],
									      "(later)");
							}
							if (x < nid)
								PRINT(" -%s-> txn %llu", kn[(int)akind[at]],
								      NAME(x));
							else
								PRINT(" -%s-> (acknowledged)", kn[(int)akind[at]]);
#undef PRINT
#undef NAME
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
	st.ntxn = nid;
	st.nedges = ne;
	free(e);
	free(ack);
out2:
	free(ids);
out1:
	free(wv.v);
out0:
	free(mst);
	h->mst = NULL;
	if (stp)
		*stp = st;
	return ret;
}
