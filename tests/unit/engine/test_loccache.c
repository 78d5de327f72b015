/* test_loccache.c -- the location cache: hits, misses, staleness, eviction; remote lookups over tcp while the owner writes */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/fabric.h"
#include "dxl/index.h"
#include "tests/lib/fabric_fixture.h"

/*
 * The owner side of every test: an index plus a record array standing in
 * for the table's store. A record is {key, incarnation}; as in DrTM the
 * incarnation is incremented by insert and by delete (odd = live). The
 * reader accepts a location only if the record's key matches, the record is
 * live and its incarnation matches the lossy one (index.h's contract).
 */

#define NREC 4096

struct rec {
	uint64_t key; /* atomics: the NIC may read while the owner writes */
	uint64_t inc;
};

struct owner {
	struct dxl_index *ix;
	struct dxl_index_hdr hdr;
	struct rec *recs; /* NREC records, page-aligned */
	atomic_uint_fast64_t reads; /* bucket READs served by mem_read */
};

static void owner_open(struct owner *o, uint64_t nb, uint64_t ni)
{
	memset(o, 0, sizeof(*o));
	struct dxl_index_cfg cfg;
	dxl_index_cfg_init(&cfg, 1);
	cfg.n_buckets = nb;
	cfg.n_indirect = ni;
	assert_int_equal(dxl_index_new(&cfg, &o->ix), 0);
	dxl_index_get_hdr(o->ix, &o->hdr);
	o->recs = dxlt_alloc_pages(NREC * sizeof(struct rec));
	assert_non_null(o->recs);
	atomic_init(&o->reads, 0);
}

static void owner_close(struct owner *o)
{
	dxl_index_delete(&o->ix);
	dxlt_free_pages(o->recs, NREC * sizeof(struct rec));
}

/* insert key into record slot `slot` (a new incarnation, odd) */
static void owner_insert(struct owner *o, uint64_t key, uint64_t slot)
{
	struct rec *r = &o->recs[slot];
	uint64_t inc = __atomic_load_n(&r->inc, __ATOMIC_RELAXED);
	inc += (inc & 1) ? 2 : 1; /* next odd */
	__atomic_store_n(&r->key, key, __ATOMIC_RELAXED);
	__atomic_store_n(&r->inc, inc, __ATOMIC_RELEASE);
	int ret = dxl_index_insert(o->ix, key, slot, (uint32_t)inc);
	if (ret)
		fail_msg("insert %llu: %s", (unsigned long long)key, dxl_errmsg());
}

/* delete key: index entry first, then the record's incarnation (even) */
static void owner_remove(struct owner *o, uint64_t key)
{
	struct dxl_index_loc loc;
	assert_int_equal(dxl_index_remove(o->ix, key, &loc), 0);
	struct rec *r = &o->recs[loc.slot];
	__atomic_store_n(&r->inc, __atomic_load_n(&r->inc, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELEASE);
}

/* an in-process "READ": 8-byte atomic loads, in no particular order, the
 * way the NIC's DMA sees the owner's memory */
static int mem_read(void *arg, uint64_t off, void *buf)
{
	struct owner *o = arg;
	const uint64_t *src = (const uint64_t *)((const uint8_t *)dxl_index_mem(o->ix) + off);
	uint64_t w[DXL_INDEX_BUCKET_SIZE / 8];
	for (int i = 15; i >= 0; i--) /* backwards, for the fun of it */
		w[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
	memcpy(buf, w, sizeof(w));
	atomic_fetch_add(&o->reads, 1);
	return 0;
}

static int failing_read(void *arg, uint64_t off, void *buf)
{
	return dxl_err_set(DXL_E_UNREACHABLE, "test: peer gone");
}

static void mem_rec(struct owner *o, uint64_t slot, struct rec *out)
{
	out->key = __atomic_load_n(&o->recs[slot].key, __ATOMIC_RELAXED);
	out->inc = __atomic_load_n(&o->recs[slot].inc, __ATOMIC_ACQUIRE);
}

static bool rec_ok(const struct rec *r, uint64_t key,
		   const struct dxl_index_find *f)
{
	return r->key == key && (r->inc & 1) &&
	       dxl_index_inc_match(f->lossy_inc, (uint32_t)r->inc);
}

static struct dxl_loccache *mk_cache(const struct owner *o, size_t bytes)
{
	struct dxl_loccache *c = NULL;
	int ret = dxl_loccache_new(&o->hdr, bytes, &c);
	if (ret)
		fail_msg("dxl_loccache_new: %s", dxl_errmsg());
	return c;
}

/* ---- single thread ------------------------------------------------------------------- */

static void test_new_and_sizes(void **state)
{
	struct owner o;
	owner_open(&o, 8, 4);
	struct dxl_loccache *c = NULL;
	assert_int_equal(dxl_loccache_new(NULL, 1 << 20, &c), DXL_E_INVAL);
	assert_int_equal(dxl_loccache_new(&o.hdr, 143, &c), DXL_E_INVAL);
	assert_null(c);
	c = mk_cache(&o, 144);
	assert_int_equal(dxl_loccache_lines(c), 1);
	dxl_loccache_delete(&c);
	assert_null(c);
	c = mk_cache(&o, 144 * 5);
	assert_int_equal(dxl_loccache_lines(c), 4);
	dxl_loccache_delete(&c);
	c = mk_cache(&o, 16 << 20);
	assert_int_equal(dxl_loccache_lines(c), 65536); /* 65536*144 <= 16 MiB */
	dxl_loccache_delete(&c);
	dxl_loccache_delete(&c);

	/* get/fill ignore offsets that are not buckets of this index */
	c = mk_cache(&o, 1 << 16);
	uint8_t b[DXL_INDEX_BUCKET_SIZE], out[DXL_INDEX_BUCKET_SIZE];
	memset(b, 0, sizeof(b));
	dxl_loccache_fill(c, 0, b);
	dxl_loccache_fill(c, 130, b);
	dxl_loccache_fill(c, o.hdr.len, b);
	assert_int_equal(dxl_loccache_get(c, 0, out), 0);
	assert_int_equal(dxl_loccache_get(c, 130, out), 0);
	assert_int_equal(dxl_loccache_get(c, o.hdr.len, out), 0);
	struct dxl_loccache_stats st;
	dxl_loccache_stats(c, &st);
	assert_int_equal(st.fills, 0);
	/* a real bucket round-trips */
	for (int i = 0; i < (int)sizeof(b); i++)
		b[i] = (uint8_t)(i * 3);
	assert_int_equal(dxl_loccache_get(c, 256, out), 0);
	dxl_loccache_fill(c, 256, b);
	assert_int_equal(dxl_loccache_get(c, 256, out), 1);
	assert_memory_equal(out, b, sizeof(b));
	dxl_loccache_delete(&c);
	owner_close(&o);
}

static void test_hits_and_misses(void **state)
{
	struct owner o;
	owner_open(&o, 16, 16);
	for (uint64_t i = 0; i < 100; i++)
		owner_insert(&o, 5000 + i, i);
	struct dxl_loccache *c = mk_cache(&o, 1 << 20); /* more lines than buckets */
	struct dxl_index_find f;
	/* first pass: every lookup READs (1 or 2 buckets); second: none */
	for (uint64_t i = 0; i < 100; i++) {
		assert_int_equal(dxl_loccache_resolve(c, 5000 + i, 0, mem_read, &o, &f),
				 DXL_INDEX_FOUND);
		assert_int_equal(f.slot, i);
		assert_int_equal(f.lossy_inc, 1);
	}
	struct dxl_loccache_stats st;
	dxl_loccache_stats(c, &st);
	uint64_t reads1 = atomic_load(&o.reads);
	assert_int_equal(st.reads, reads1);
	assert_true(reads1 >= 16); /* at least every main bucket once */
	assert_int_equal(st.hits + st.misses, 100);
	assert_true(st.hits > 0); /* keys sharing a bucket hit after the first */
	for (uint64_t i = 0; i < 100; i++) {
		assert_int_equal(dxl_loccache_resolve(c, 5000 + i, 0, mem_read, &o, &f),
				 DXL_INDEX_FOUND);
		assert_int_equal(f.reads, 0);
		assert_int_equal(f.slot, i);
	}
	assert_int_equal(atomic_load(&o.reads), reads1);
	dxl_loccache_stats(c, &st);
	assert_int_equal(st.hits + st.misses, 200);
	assert_int_equal(st.evictions, 0);
	/* FRESH ignores the cache */
	assert_int_equal(dxl_loccache_resolve(c, 5000, DXL_LOCCACHE_FRESH, mem_read,
					      &o, &f), DXL_INDEX_FOUND);
	assert_true(f.reads >= 1);
	/* a READ error is passed on */
	assert_int_equal(dxl_loccache_resolve(c, 5000, DXL_LOCCACHE_FRESH,
					      failing_read, NULL, &f),
			 DXL_E_UNREACHABLE);
	dxl_loccache_delete(&c);
	owner_close(&o);
}

/*
 * Delete then re-insert a key with a new incarnation: the cached location
 * still answers, the record check catches it (same slot: by incarnation;
 * another slot: by key), stale() drops it, the next resolve READs again.
 */
static void test_stale_after_reinsert(void **state)
{
	struct owner o;
	owner_open(&o, 4, 4);
	struct dxl_loccache *c = mk_cache(&o, 1 << 16);
	owner_insert(&o, 77, 5); /* incarnation 1 */
	struct dxl_index_find f;
	assert_int_equal(dxl_loccache_resolve(c, 77, 0, mem_read, &o, &f),
			 DXL_INDEX_FOUND);
	struct rec r;
	mem_rec(&o, f.slot, &r);
	assert_true(rec_ok(&r, 77, &f));

	/* same record slot, incarnation 1 -> 2 (deleted) -> 3 */
	owner_remove(&o, 77);
	owner_insert(&o, 77, 5);
	assert_int_equal(dxl_loccache_resolve(c, 77, 0, mem_read, &o, &f),
			 DXL_INDEX_FOUND);
	assert_int_equal(f.reads, 0); /* from the cache */
	assert_int_equal(f.slot, 5);
	assert_int_equal(f.lossy_inc, 1);
	mem_rec(&o, f.slot, &r);
	assert_int_equal(r.key, 77); /* the key alone would not tell */
	assert_int_equal(r.inc, 3);
	assert_false(rec_ok(&r, 77, &f));
	dxl_loccache_stale(c, 77);
	assert_int_equal(dxl_loccache_resolve(c, 77, 0, mem_read, &o, &f),
			 DXL_INDEX_FOUND);
	assert_true(f.reads >= 1);
	assert_int_equal(f.lossy_inc, 3);
	mem_rec(&o, f.slot, &r);
	assert_true(rec_ok(&r, 77, &f));

	/* another record slot; slot 5 reused by another key */
	owner_remove(&o, 77);
	owner_insert(&o, 77, 9);
	owner_insert(&o, 78, 5);
	assert_int_equal(dxl_loccache_resolve(c, 77, 0, mem_read, &o, &f),
			 DXL_INDEX_FOUND);
	assert_int_equal(f.reads, 0);
	assert_int_equal(f.slot, 5);
	mem_rec(&o, f.slot, &r);
	assert_false(rec_ok(&r, 77, &f)); /* key 78 lives there now */
	dxl_loccache_stale(c, 77);
	assert_int_equal(dxl_loccache_resolve(c, 77, 0, mem_read, &o, &f),
			 DXL_INDEX_FOUND);
	assert_int_equal(f.slot, 9);
	mem_rec(&o, f.slot, &r);
	assert_true(rec_ok(&r, 77, &f));

	/* deleted and not re-inserted: cached says FOUND, record says dead,
	 * a fresh resolve says ABSENT */
	owner_remove(&o, 77);
	assert_int_equal(dxl_loccache_resolve(c, 77, 0, mem_read, &o, &f),
			 DXL_INDEX_FOUND);
	mem_rec(&o, f.slot, &r);
	assert_false(rec_ok(&r, 77, &f));
	dxl_loccache_stale(c, 77);
	assert_int_equal(dxl_loccache_resolve(c, 77, DXL_LOCCACHE_FRESH, mem_read,
					      &o, &f), DXL_INDEX_ABSENT);
	struct dxl_loccache_stats st;
	dxl_loccache_stats(c, &st);
	assert_int_equal(st.stale, 3);
	assert_true(st.dropped >= 3);
	dxl_loccache_delete(&c);
	owner_close(&o);
}

/* ABSENT is never concluded from cached buckets */
static void test_absent_is_fresh(void **state)
{
	struct owner o;
	owner_open(&o, 1, 4);
	struct dxl_loccache *c = mk_cache(&o, 1 << 16);
	struct dxl_index_find f;
	assert_int_equal(dxl_loccache_resolve(c, 42, 0, mem_read, &o, &f),
			 DXL_INDEX_ABSENT);
	assert_int_equal(f.reads, 1);
	owner_insert(&o, 42, 3); /* the cached main bucket does not have it */
	assert_int_equal(dxl_loccache_resolve(c, 42, 0, mem_read, &o, &f),
			 DXL_INDEX_FOUND);
	assert_int_equal(f.reads, 1);
	assert_int_equal(f.slot, 3);

	/*
	 * A chain whose main bucket is cached (with its HEADER) and whose
	 * indirect bucket is not: the tail is READ; an ABSENT there is checked
	 * again from the main bucket, where the key went after the copy.
	 */
	for (uint64_t k = 100; k < 108; k++) /* 42 + 8 = 9 keys: one indirect */
		owner_insert(&o, k, k);
	const uint64_t main_off = DXL_INDEX_HDR_SIZE;
	uint8_t old_main[DXL_INDEX_BUCKET_SIZE];
	assert_int_equal(mem_read(&o, main_off, old_main), 0); /* has 100, HEADER */
	owner_remove(&o, 100);
	owner_insert(&o, 200, 200); /* the first free slot: main slot 1 */
	struct dxl_loccache *c1 = mk_cache(&o, 144); /* one line */
	dxl_loccache_fill(c1, main_off, old_main);
	uint64_t before = atomic_load(&o.reads);
	assert_int_equal(dxl_loccache_resolve(c1, 200, 0, mem_read, &o, &f),
			 DXL_INDEX_FOUND);
	assert_int_equal(f.slot, 200);
	/* cached main -> READ indirect (ABSENT) -> READ main (FOUND) */
	assert_int_equal(f.reads, 2);
	assert_int_equal(atomic_load(&o.reads) - before, 2);
	/* the same through a cached indirect bucket that ends ABSENT */
	uint8_t ind[DXL_INDEX_BUCKET_SIZE];
	const uint64_t ind_off = DXL_INDEX_HDR_SIZE + DXL_INDEX_BUCKET_SIZE;
	assert_int_equal(mem_read(&o, ind_off, ind), 0);
	owner_remove(&o, 101);
	owner_insert(&o, 201, 201); /* main slot 2 */
	dxl_loccache_delete(&c1);
	c1 = mk_cache(&o, 144 * 2); /* main and indirect on their own lines */
	dxl_loccache_fill(c1, main_off, old_main);
	dxl_loccache_fill(c1, ind_off, ind);
	assert_int_equal(dxl_loccache_resolve(c1, 201, 0, mem_read, &o, &f),
			 DXL_INDEX_FOUND);
	assert_int_equal(f.slot, 201);
	assert_int_equal(f.reads, 1); /* straight to a fresh main READ */
	dxl_loccache_delete(&c1);
	dxl_loccache_delete(&c);
	owner_close(&o);
}

/* direct-mapped: two buckets on one line evict each other */
static void test_eviction(void **state)
{
	struct owner o;
	owner_open(&o, 8, 4);
	uint64_t k0 = 0, k1 = 0;
	/* keys in main buckets 0 and 4: the same line of a 4-line cache */
	for (uint64_t k = 1; !k0 || !k1; k++) {
		uint64_t a = dxl_index_bucket_addr(&o.hdr, k);
		if (!k0 && a == DXL_INDEX_HDR_SIZE)
			k0 = k;
		if (!k1 && a == DXL_INDEX_HDR_SIZE + 4 * DXL_INDEX_BUCKET_SIZE)
			k1 = k;
	}
	owner_insert(&o, k0, 1);
	owner_insert(&o, k1, 2);
	struct dxl_loccache *c = mk_cache(&o, 144 * 4);
	assert_int_equal(dxl_loccache_lines(c), 4);
	struct dxl_index_find f;
	for (int round = 0; round < 3; round++) {
		assert_int_equal(dxl_loccache_resolve(c, k0, 0, mem_read, &o, &f),
				 DXL_INDEX_FOUND);
		assert_int_equal(f.reads, 1);
		assert_int_equal(f.slot, 1);
		assert_int_equal(dxl_loccache_resolve(c, k0, 0, mem_read, &o, &f),
				 DXL_INDEX_FOUND);
		assert_int_equal(f.reads, 0);
		assert_int_equal(dxl_loccache_resolve(c, k1, 0, mem_read, &o, &f),
				 DXL_INDEX_FOUND);
		assert_int_equal(f.reads, 1);
		assert_int_equal(f.slot, 2);
	}
	struct dxl_loccache_stats st;
	dxl_loccache_stats(c, &st);
	assert_int_equal(st.fills, 6);
	assert_int_equal(st.evictions, 5);
	assert_int_equal(st.hits, 3);
	assert_int_equal(st.misses, 6);
	dxl_loccache_delete(&c);

	/* a long chain through a 2-line cache: always right, partly cached */
	struct owner o2;
	owner_open(&o2, 1, 8);
	for (uint64_t k = 0; k < 40; k++)
		owner_insert(&o2, 9000 + k, k);
	c = mk_cache(&o2, 144 * 2);
	for (int round = 0; round < 3; round++)
		for (uint64_t k = 0; k < 40; k++) {
			assert_int_equal(dxl_loccache_resolve(c, 9000 + k, 0,
							      mem_read, &o2, &f),
					 DXL_INDEX_FOUND);
			assert_int_equal(f.slot, k);
		}
	dxl_loccache_stats(c, &st);
	assert_true(st.evictions > 0);
	assert_true(st.hits > 0);
	dxl_loccache_delete(&c);
	owner_close(&o2);
	owner_close(&o);
}

/* stale() drops the whole cached chain of the key */
static void test_stale_drops_chain(void **state)
{
	struct owner o;
	owner_open(&o, 1, 4);
	for (uint64_t k = 0; k < 20; k++) /* 8 + 7 + 5: three buckets */
		owner_insert(&o, 300 + k, k);
	struct dxl_loccache *c = mk_cache(&o, 1 << 16);
	struct dxl_index_find f;
	assert_int_equal(dxl_loccache_resolve(c, 319, 0, mem_read, &o, &f),
			 DXL_INDEX_FOUND);
	assert_int_equal(f.reads, 3);
	uint8_t b[DXL_INDEX_BUCKET_SIZE];
	for (uint64_t i = 0; i < 3; i++)
		assert_int_equal(dxl_loccache_get(c, DXL_INDEX_HDR_SIZE + i * 128, b), 1);
	dxl_loccache_stale(c, 319);
	for (uint64_t i = 0; i < 3; i++)
		assert_int_equal(dxl_loccache_get(c, DXL_INDEX_HDR_SIZE + i * 128, b), 0);
	struct dxl_loccache_stats st;
	dxl_loccache_stats(c, &st);
	assert_int_equal(st.dropped, 3);
	/* nothing cached: stale is a no-op */
	dxl_loccache_stale(c, 319);
	dxl_loccache_stats(c, &st);
	assert_int_equal(st.dropped, 3);
	assert_int_equal(st.stale, 2);
	dxl_loccache_delete(&c);
	owner_close(&o);
}

/* ---- concurrent readers and a writer ------------------------------------------------- */

/*
 * The full reader protocol: resolve; check the record; if the location came
 * from the cache and fails, stale() and resolve with fresh READs; if a fresh
 * location fails, the key is being changed: the RPC fallback (counted).
 */
enum outcome { OUT_FOUND, OUT_ABSENT, OUT_FALLBACK, OUT_ERROR };

typedef int (*rec_read_fn)(void *arg, uint64_t slot, struct rec *out);

struct reader_stats {
	uint64_t lookups, found, absent, fallback, stale_retries;
	uint64_t stable_bad;  /* a stable key not found at its slot: must stay 0 */
	uint64_t wrong_slot;  /* an accepted location that is not the key's */
	uint64_t errors;
};

static enum outcome full_lookup(struct dxl_loccache *c, uint64_t key,
				dxl_loccache_read_fn rd, rec_read_fn rr, void *arg,
				struct reader_stats *rs, uint64_t *slot)
{
	unsigned flags = 0;
	for (int attempt = 0; attempt < 2; attempt++) {
		struct dxl_index_find f;
		int r = dxl_loccache_resolve(c, key, flags, rd, arg, &f);
		if (r < 0)
			return OUT_ERROR;
		if (r == DXL_INDEX_ABSENT)
			return OUT_ABSENT;
		if (f.slot >= NREC) /* the table's bounds check */
			return OUT_ERROR;
		struct rec rec;
		if (rr(arg, f.slot, &rec))
			return OUT_ERROR;
		if (rec_ok(&rec, key, &f)) {
			*slot = f.slot;
			return OUT_FOUND;
		}
		if (f.reads > 0)
			return OUT_FALLBACK;
		rs->stale_retries++;
		dxl_loccache_stale(c, key);
		flags = DXL_LOCCACHE_FRESH;
	}
	return OUT_FALLBACK;
}

/* keys: stable ones live in record slot i, churned ones in NS + j */
enum { NS = 48, NCH = 48, LOOKUPS = 1500 };

/* readers run until they did LOOKUPS and the writer did min_ops operations;
 * the writer until every reader ended and it did min_ops: so they overlap */
struct churn_sync {
	atomic_int readers_left;
	atomic_uint_fast64_t ops;
	uint64_t min_ops;
	bool yield; /* the writer yields after each operation */
};

static uint64_t stable_key(int i)
{
	return 0x5000000000ull + (uint64_t)i * 131;
}

static uint64_t churn_key(int j)
{
	return 0x7000000000ull + (uint64_t)j * 137;
}

static void reader_loop(struct dxl_loccache *c, dxl_loccache_read_fn rd,
			rec_read_fn rr, void *arg, uint64_t seed,
			struct churn_sync *sync, struct reader_stats *rs)
{
	for (int n = 0; n < LOOKUPS || atomic_load(&sync->ops) < sync->min_ops;
	     n++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		int pick = (int)((seed >> 33) % (NS + NCH));
		bool stable = pick < NS;
		uint64_t key = stable ? stable_key(pick) : churn_key(pick - NS);
		uint64_t want = (uint64_t)pick; /* record slot of the key */
		uint64_t slot = UINT64_MAX;
		enum outcome out = full_lookup(c, key, rd, rr, arg, rs, &slot);
		rs->lookups++;
		switch (out) {
		case OUT_FOUND:
			rs->found++;
			if (slot != want)
				rs->wrong_slot++;
			break;
		case OUT_ABSENT:
			rs->absent++;
			break;
		case OUT_FALLBACK:
			rs->fallback++;
			break;
		case OUT_ERROR:
			rs->errors++;
			break;
		}
		if (stable && (out != OUT_FOUND || slot != want))
			rs->stable_bad++;
	}
}

static void owner_fill_stable(struct owner *o)
{
	for (int i = 0; i < NS; i++)
		owner_insert(o, stable_key(i), (uint64_t)i);
}

/* the writer: insert and remove the churned keys until the readers end */
static uint64_t owner_churn(struct owner *o, struct churn_sync *sync)
{
	uint64_t ops = 0;
	bool in[NCH] = {false};
	uint64_t s = 99;
	while (atomic_load(&sync->readers_left) > 0 || ops < sync->min_ops) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		int j = (int)((s >> 33) % NCH);
		if (in[j])
			owner_remove(o, churn_key(j));
		else
			owner_insert(o, churn_key(j), (uint64_t)(NS + j));
		in[j] = !in[j];
		ops++;
		atomic_store(&sync->ops, ops);
		if (sync->yield)
			sched_yield(); /* two cores: leave room for the NIC */
	}
	return ops;
}

static void check_stats(const struct reader_stats *rs, int n)
{
	for (int i = 0; i < n; i++) {
		fprintf(stderr, "reader %d: %llu lookups, %llu found, %llu absent, "
			"%llu fallback, %llu stale retries\n", i,
			(unsigned long long)rs[i].lookups,
			(unsigned long long)rs[i].found,
			(unsigned long long)rs[i].absent,
			(unsigned long long)rs[i].fallback,
			(unsigned long long)rs[i].stale_retries);
		assert_true(rs[i].lookups >= LOOKUPS);
		assert_int_equal(rs[i].errors, 0);
		assert_int_equal(rs[i].wrong_slot, 0);
		assert_int_equal(rs[i].stable_bad, 0);
		assert_true(rs[i].found >= rs[i].lookups / 3); /* half are stable */
	}
}

/* in-process: three threads share one cache, READs are atomic word copies */

struct mem_thread {
	struct owner *o;
	struct dxl_loccache *c;
	struct churn_sync *sync;
	uint64_t seed;
	struct reader_stats rs;
};

static int mem_rec_read(void *arg, uint64_t slot, struct rec *out)
{
	mem_rec(arg, slot, out);
	return 0;
}

static void *mem_reader(void *arg)
{
	struct mem_thread *t = arg;
	reader_loop(t->c, mem_read, mem_rec_read, t->o, t->seed, t->sync, &t->rs);
	atomic_fetch_sub(&t->sync->readers_left, 1);
	return NULL;
}

static void test_threads_share_a_cache(void **state)
{
	struct owner o;
	owner_open(&o, 8, 64);
	owner_fill_stable(&o);
	/* a small cache: lines are refilled and evicted under the readers */
	struct dxl_loccache *c = mk_cache(&o, 144 * 8);
	enum { NT = 3 };
	struct churn_sync sync = {.min_ops = 20000, .yield = false};
	atomic_init(&sync.readers_left, NT);
	atomic_init(&sync.ops, 0);
	struct mem_thread t[NT];
	pthread_t th[NT];
	for (int i = 0; i < NT; i++) {
		t[i] = (struct mem_thread){.o = &o, .c = c, .sync = &sync,
					   .seed = (uint64_t)i + 1};
		assert_int_equal(pthread_create(&th[i], NULL, mem_reader, &t[i]), 0);
	}
	uint64_t ops = owner_churn(&o, &sync);
	for (int i = 0; i < NT; i++)
		pthread_join(th[i], NULL);
	fprintf(stderr, "writer: %llu operations\n", (unsigned long long)ops);
	struct reader_stats rs[NT];
	for (int i = 0; i < NT; i++)
		rs[i] = t[i].rs;
	check_stats(rs, NT);
	struct dxl_loccache_stats st;
	dxl_loccache_stats(c, &st);
	assert_true(st.hits > 0);
	assert_true(st.evictions > 0);
	dxl_loccache_delete(&c);
	owner_close(&o);
}

/* over the tcp provider: the owner's fabric serves READs from its NIC
 * thread while the owner's thread inserts and removes */

struct tcp_env {
	struct owner o;
	struct dxl_fabric *fo, *fc; /* owner, coordinator */
	struct dxl_ctx *co;
	struct dxl_mr *mr_ix, *mr_rec;
	struct dxl_mr_desc d_ix, d_rec;
};

struct tcp_thread {
	struct tcp_env *e;
	struct dxl_loccache *c;
	struct churn_sync *sync;
	uint32_t ctx_idx;
	uint64_t seed;
	struct dxl_ctx *ctx;
	struct dxl_qp *qp;
	struct dxl_mr *lmr;
	uint8_t buf[256] __attribute__((aligned(64)));
	struct reader_stats rs;
	int setup_err;
};

static int tcp_read(void *arg, uint64_t off, void *out)
{
	struct tcp_thread *t = arg;
	int st = dxlt_read(t->ctx, t->qp, t->buf, dxl_mr_lkey(t->lmr),
			   t->e->d_ix.addr + off, t->e->d_ix.rkey,
			   DXL_INDEX_BUCKET_SIZE);
	if (st != DXL_WC_SUCCESS)
		return st < 0 ? st : dxl_err_set(DXL_E_IO, "READ: %s",
						 dxl_wc_status_str(st));
	memcpy(out, t->buf, DXL_INDEX_BUCKET_SIZE);
	return 0;
}

static int tcp_rec_read(void *arg, uint64_t slot, struct rec *out)
{
	struct tcp_thread *t = arg;
	int st = dxlt_read(t->ctx, t->qp, t->buf + 128, dxl_mr_lkey(t->lmr),
			   t->e->d_rec.addr + slot * sizeof(struct rec),
			   t->e->d_rec.rkey, sizeof(struct rec));
	if (st != DXL_WC_SUCCESS)
		return -1;
	memcpy(out, t->buf + 128, sizeof(*out));
	return 0;
}

static void *tcp_reader(void *arg)
{
	struct tcp_thread *t = arg;
	t->setup_err = dxl_ctx_new(t->e->fc, t->ctx_idx, &t->ctx);
	if (!t->setup_err)
		t->setup_err = dxl_mr_reg(t->e->fc, t->buf, sizeof(t->buf),
					  DXL_MR_LOCAL_WRITE, &t->lmr);
	if (!t->setup_err)
		t->setup_err = dxl_qp_connect(t->ctx, dxl_fabric_addr(t->e->fo), 0,
					      &t->qp);
	if (!t->setup_err) {
		/* the header too comes over the wire */
		struct dxl_index_hdr h;
		int st = dxlt_read(t->ctx, t->qp, t->buf, dxl_mr_lkey(t->lmr),
				   t->e->d_ix.addr, t->e->d_ix.rkey,
				   DXL_INDEX_HDR_SIZE);
		if (st != DXL_WC_SUCCESS ||
		    dxl_index_hdr_decode(t->buf, DXL_INDEX_HDR_SIZE, &h) ||
		    h.seed != t->e->o.hdr.seed)
			t->setup_err = -1;
	}
	if (!t->setup_err)
		reader_loop(t->c, tcp_read, tcp_rec_read, t, t->seed, t->sync,
			    &t->rs);
	atomic_fetch_sub(&t->sync->readers_left, 1);
	if (t->lmr)
		dxl_mr_dereg(&t->lmr);
	if (t->ctx)
		dxl_ctx_delete(&t->ctx);
	return NULL;
}

static void test_tcp_remote_lookups(void **state)
{
	dxlt_watchdog_arm(120, "test_tcp_remote_lookups");
	struct tcp_env e;
	memset(&e, 0, sizeof(e));
	owner_open(&e.o, 8, 64);
	owner_fill_stable(&e.o);
	struct dxl_fabric_cfg cfg;
	dxl_fabric_cfg_init(&cfg);
	cfg.node_id = 2;
	assert_int_equal(dxl_fabric_new(&cfg, &e.fo), 0);
	cfg.node_id = 1;
	assert_int_equal(dxl_fabric_new(&cfg, &e.fc), 0);
	assert_int_equal(dxl_ctx_new(e.fo, 0, &e.co), 0);
	assert_int_equal(dxl_mr_reg(e.fo, dxl_index_mem(e.o.ix),
				    dxl_index_mem_len(e.o.ix), DXL_MR_REMOTE_READ,
				    &e.mr_ix), 0);
	assert_int_equal(dxl_mr_reg(e.fo, e.o.recs, NREC * sizeof(struct rec),
				    DXL_MR_REMOTE_READ, &e.mr_rec), 0);
	dxl_mr_desc(e.mr_ix, &e.d_ix);
	dxl_mr_desc(e.mr_rec, &e.d_rec);

	struct dxl_loccache *c = mk_cache(&e.o, 144 * 16);
	enum { NT = 2 };
	struct churn_sync sync = {.min_ops = 3000, .yield = true};
	atomic_init(&sync.readers_left, NT);
	atomic_init(&sync.ops, 0);
	static struct tcp_thread t[NT];
	pthread_t th[NT];
	for (int i = 0; i < NT; i++) {
		memset(&t[i], 0, sizeof(t[i]));
		t[i].e = &e;
		t[i].c = c;
		t[i].sync = &sync;
		t[i].ctx_idx = (uint32_t)i;
		t[i].seed = 100 + (uint64_t)i;
		assert_int_equal(pthread_create(&th[i], NULL, tcp_reader, &t[i]), 0);
	}
	uint64_t ops = owner_churn(&e.o, &sync);
	for (int i = 0; i < NT; i++)
		pthread_join(th[i], NULL);
	fprintf(stderr, "writer: %llu operations\n", (unsigned long long)ops);
	struct reader_stats rs[NT];
	for (int i = 0; i < NT; i++) {
		if (t[i].setup_err)
			fail_msg("reader %d setup: %s", i, dxl_errname(t[i].setup_err));
		rs[i] = t[i].rs;
	}
	check_stats(rs, NT);
	struct dxl_loccache_stats st;
	dxl_loccache_stats(c, &st);
	fprintf(stderr, "cache: %llu hits, %llu misses, %llu reads, %llu evictions, "
		"%llu stale\n", (unsigned long long)st.hits,
		(unsigned long long)st.misses, (unsigned long long)st.reads,
		(unsigned long long)st.evictions, (unsigned long long)st.stale);
	assert_true(st.hits > 0);
	dxl_loccache_delete(&c);
	dxl_mr_dereg(&e.mr_ix);
	dxl_mr_dereg(&e.mr_rec);
	dxl_fabric_delete(&e.fc);
	dxl_fabric_delete(&e.fo);
	owner_close(&e.o);
	dxlt_watchdog_disarm();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new_and_sizes),
		cmocka_unit_test(test_hits_and_misses),
		cmocka_unit_test(test_stale_after_reinsert),
		cmocka_unit_test(test_absent_is_fresh),
		cmocka_unit_test(test_eviction),
		cmocka_unit_test(test_stale_drops_chain),
		cmocka_unit_test(test_threads_share_a_cache),
		cmocka_unit_test(test_tcp_remote_lookups),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
