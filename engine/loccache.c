/* loccache.c -- the coordinator's location cache: remote index buckets, direct-mapped, shared by threads */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/index.h"

/*
 * DrTM's location-based cache (002 L378-388): copies of the remote index's
 * buckets, never values, never invalidated by the owner. The evaluated
 * DrTM cache is direct-mapped (002 L425); ours too, keyed by the bucket's
 * byte offset in the remote area, for main and indirect buckets alike. We
 * do not rewrite HEADER slots into local pointers ("Cached", T=11): a line
 * is a verbatim bucket, so evicting one never needs to reclaim a chain or
 * restore a slot, and every line stands alone under its own seqlock.
 *
 * Concurrency: any thread may call any function (except delete).
 * Each line has a sequence word (even = stable, odd = being written) and a
 * tag (the cached bucket's offset, 0 = empty: offset 0 is the header, never
 * a bucket). A writer (fill, drop) takes the line by CAS even -> odd, and
 * gives up if it cannot: the line is being written by someone else, and a
 * cache may always decline to remember. Readers never write and never wait:
 * a line that changes under them is a miss. All data words are accessed
 * with atomics, so there is no data race for TSan to see and no fence.
 */

#define LINE_WORDS (DXL_INDEX_BUCKET_SIZE / 8)
#define LINE_BYTES (DXL_INDEX_BUCKET_SIZE + sizeof(struct lc_meta))

struct lc_meta {
	_Atomic uint64_t seq;
	_Atomic uint64_t tag;
};

struct lc_stats {
	_Atomic uint64_t hits, misses, reads, fills, evictions, stale, dropped;
};

struct dxl_loccache {
	struct dxl_index_hdr hdr;
	size_t nlines;
	uint64_t mask;
	struct lc_meta *meta;
	uint64_t *data; /* nlines * LINE_WORDS words */
	struct lc_stats st __attribute__((aligned(DXL_CACHELINE)));
};

static inline void bump(_Atomic uint64_t *ctr, uint64_t n)
{
	atomic_fetch_add_explicit(ctr, n, memory_order_relaxed);
}

int dxl_loccache_new(const struct dxl_index_hdr *hdr, size_t bytes,
		     struct dxl_loccache **out)
{
	if (!hdr || !out)
		return dxl_err_set(DXL_E_INVAL, "dxl_loccache_new: NULL argument");
	if (bytes < LINE_BYTES)
		return dxl_err_set(DXL_E_INVAL,
				   "dxl_loccache_new: %zu bytes, one line needs %zu",
				   bytes, (size_t)LINE_BYTES);
	size_t n = 1;
	while (n <= bytes / LINE_BYTES / 2)
		n <<= 1;
	struct dxl_loccache *c = aligned_alloc(DXL_CACHELINE,
					       DXL_ALIGN_UP(sizeof(*c), DXL_CACHELINE));
	if (!c)
		return dxl_err_set(DXL_E_NOMEM, "dxl_loccache_new: no memory");
	memset(c, 0, sizeof(*c));
	c->hdr = *hdr;
	c->nlines = n;
	c->mask = n - 1;
	c->meta = calloc(n, sizeof(*c->meta));
	c->data = aligned_alloc(DXL_CACHELINE, n * DXL_INDEX_BUCKET_SIZE);
	if (!c->meta || !c->data) {
		free(c->meta);
		free(c->data);
		free(c);
		return dxl_err_set(DXL_E_NOMEM,
				   "dxl_loccache_new: no memory for %zu lines", n);
	}
	for (size_t i = 0; i < n; i++) {
		atomic_init(&c->meta[i].seq, 0);
		atomic_init(&c->meta[i].tag, 0);
	}
	memset(c->data, 0, n * DXL_INDEX_BUCKET_SIZE);
	*out = c;
	return 0;
}

void dxl_loccache_delete(struct dxl_loccache **pc)
{
	if (!pc || !*pc)
		return;
	free((*pc)->meta);
	free((*pc)->data);
	free(*pc);
	*pc = NULL;
}

size_t dxl_loccache_lines(const struct dxl_loccache *c)
{
	return c->nlines;
}

/* is off the offset of a bucket of this index? (header excluded) */
static inline bool bucket_ok(const struct dxl_loccache *c, uint64_t off)
{
	return off >= DXL_INDEX_HDR_SIZE && off < c->hdr.len &&
	       (off - DXL_INDEX_HDR_SIZE) % DXL_INDEX_BUCKET_SIZE == 0;
}

static inline size_t line_of(const struct dxl_loccache *c, uint64_t off)
{
	/* bucket numbers are uniform over main buckets already (hashed keys) */
	return (size_t)(((off - DXL_INDEX_HDR_SIZE) / DXL_INDEX_BUCKET_SIZE) &
			c->mask);
}

int dxl_loccache_get(struct dxl_loccache *c, uint64_t off, void *buf)
{
	if (!bucket_ok(c, off))
		return 0;
	size_t l = line_of(c, off);
	struct lc_meta *m = &c->meta[l];
	const uint64_t *d = c->data + l * LINE_WORDS;
	/* acquire: pairs with the release that ended the last write phase */
	uint64_t s1 = atomic_load_explicit(&m->seq, memory_order_acquire);
	if (s1 & 1)
		return 0;
	/* acquire on the tag and data loads keeps the seq re-check below after
	 * them; a value from a newer write phase synchronizes with its release
	 * store, which follows that phase's odd seq, so the re-check sees it */
	if (atomic_load_explicit(&m->tag, memory_order_acquire) != off)
		return 0;
	uint64_t tmp[LINE_WORDS];
	for (int i = 0; i < LINE_WORDS; i++)
		tmp[i] = __atomic_load_n(&d[i], __ATOMIC_ACQUIRE);
	if (atomic_load_explicit(&m->seq, memory_order_relaxed) != s1)
		return 0;
	memcpy(buf, tmp, sizeof(tmp));
	return 1;
}

/* take line l for writing: its even seq, or UINT64_MAX if busy */
static inline uint64_t line_lock(struct lc_meta *m)
{
	uint64_t s = atomic_load_explicit(&m->seq, memory_order_relaxed);
	if (s & 1)
		return UINT64_MAX;
	if (!atomic_compare_exchange_strong_explicit(&m->seq, &s, s + 1,
						     memory_order_acquire,
						     memory_order_relaxed))
		return UINT64_MAX;
	return s;
}

void dxl_loccache_fill(struct dxl_loccache *c, uint64_t off, const void *buf)
{
	if (!bucket_ok(c, off))
		return;
	size_t l = line_of(c, off);
	struct lc_meta *m = &c->meta[l];
	uint64_t *d = c->data + l * LINE_WORDS;
	uint64_t s = line_lock(m);
	if (s == UINT64_MAX)
		return;
	uint64_t old = atomic_load_explicit(&m->tag, memory_order_relaxed);
	/* release on every store: none may become visible before the odd seq */
	atomic_store_explicit(&m->tag, off, memory_order_release);
	uint64_t w[LINE_WORDS];
	memcpy(w, buf, sizeof(w));
	for (int i = 0; i < LINE_WORDS; i++)
		__atomic_store_n(&d[i], w[i], __ATOMIC_RELEASE);
	atomic_store_explicit(&m->seq, s + 2, memory_order_release);
	bump(&c->st.fills, 1);
	if (old && old != off)
		bump(&c->st.evictions, 1);
}

/* forget the bucket at off if line l holds it */
static void drop(struct dxl_loccache *c, uint64_t off)
{
	size_t l = line_of(c, off);
	struct lc_meta *m = &c->meta[l];
	if (atomic_load_explicit(&m->tag, memory_order_relaxed) != off)
		return;
	uint64_t s = line_lock(m);
	if (s == UINT64_MAX)
		return; /* being refilled right now, from a READ */
	bool mine = atomic_load_explicit(&m->tag, memory_order_relaxed) == off;
	if (mine)
		atomic_store_explicit(&m->tag, 0, memory_order_release);
	atomic_store_explicit(&m->seq, s + 2, memory_order_release);
	if (mine)
		bump(&c->st.dropped, 1);
}

void dxl_loccache_stale(struct dxl_loccache *c, uint64_t key)
{
	bump(&c->st.stale, 1);
	uint64_t off = dxl_index_bucket_addr(&c->hdr, key);
	uint64_t max = dxl_index_chain_max(&c->hdr);
	uint8_t buf[DXL_INDEX_BUCKET_SIZE];
	for (uint64_t hop = 0; hop < max; hop++) {
		int hit = dxl_loccache_get(c, off, buf);
		drop(c, off);
		if (!hit)
			return;
		struct dxl_index_find f;
		if (dxl_index_bucket_find(&c->hdr, buf, key, &f) != DXL_INDEX_NEXT)
			return;
		off = f.next_off;
	}
}

int dxl_loccache_resolve(struct dxl_loccache *c, uint64_t key, unsigned flags,
			 dxl_loccache_read_fn read, void *arg,
			 struct dxl_index_find *res)
{
	const uint64_t main_off = dxl_index_bucket_addr(&c->hdr, key);
	const uint64_t max = dxl_index_chain_max(&c->hdr);
	uint8_t buf[DXL_INDEX_BUCKET_SIZE];
	uint64_t off = main_off;
	int r;
	res->reads = 0;
	if (!(flags & DXL_LOCCACHE_FRESH)) {
		for (uint64_t hop = 0; hop < max; hop++) {
			if (!dxl_loccache_get(c, off, buf))
				break; /* READ from here on */
			r = dxl_index_bucket_find(&c->hdr, buf, key, res);
			if (r == DXL_INDEX_FOUND) {
				bump(&c->st.hits, 1);
				return r;
			}
			if (r != DXL_INDEX_NEXT) {
				/* cached buckets may predate the key's insert
				 * (ABSENT); a bad line cannot be cached, as fill
				 * takes only checked buckets, but be safe */
				if (r < 0)
					drop(c, off);
				off = main_off;
				break;
			}
			off = res->next_off;
		}
	}
	bump(&c->st.misses, 1);
	/*
	 * READ the chain from off. A chain whose first buckets came from the
	 * cache and whose READ tail ends ABSENT proves nothing (an insert may
	 * have gone into an earlier bucket since it was cached): READ it all
	 * again from the main bucket.
	 */
	bool from_main = off == main_off;
	for (uint64_t hop = 0; hop < max; hop++) {
		r = read(arg, off, buf);
		if (r < 0)
			return r;
		res->reads++;
		bump(&c->st.reads, 1);
		r = dxl_index_bucket_find(&c->hdr, buf, key, res);
		if (r < 0)
			return r;
		dxl_loccache_fill(c, off, buf);
		if (r == DXL_INDEX_FOUND)
			return r;
		if (r == DXL_INDEX_ABSENT) {
			if (from_main)
				return r;
			from_main = true;
			off = main_off;
			hop = (uint64_t)-1; /* a whole chain again */
			continue;
		}
		off = res->next_off;
	}
	return dxl_err_set(DXL_E_CORRUPT,
			   "location cache: chain of key %llu longer than %llu "
			   "buckets", (unsigned long long)key,
			   (unsigned long long)max);
}

void dxl_loccache_stats(const struct dxl_loccache *c,
			struct dxl_loccache_stats *out)
{
	out->hits = atomic_load_explicit(&c->st.hits, memory_order_relaxed);
	out->misses = atomic_load_explicit(&c->st.misses, memory_order_relaxed);
	out->reads = atomic_load_explicit(&c->st.reads, memory_order_relaxed);
	out->fills = atomic_load_explicit(&c->st.fills, memory_order_relaxed);
	out->evictions =
		atomic_load_explicit(&c->st.evictions, memory_order_relaxed);
	out->stale = atomic_load_explicit(&c->st.stale, memory_order_relaxed);
	out->dropped = atomic_load_explicit(&c->st.dropped, memory_order_relaxed);
}
