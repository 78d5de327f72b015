/* test_hash.c -- the hash index: layout, insert/lookup/remove, chains, capacity, torn remote views */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/index.h"

/* ---- helpers ----------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static struct dxl_index *mk_index(uint64_t nb, uint64_t ni)
{
	struct dxl_index_cfg cfg;
	dxl_index_cfg_init(&cfg, 1);
	cfg.n_buckets = nb;
	cfg.n_indirect = ni;
	struct dxl_index *ix = NULL;
	int ret = dxl_index_new(&cfg, &ix);
	if (ret)
		fail_msg("dxl_index_new: %s: %s", dxl_errname(ret), dxl_errmsg());
	return ix;
}

/* the word of slot s of the bucket at byte offset off */
static uint64_t word_at(const struct dxl_index *ix, uint64_t off, int s)
{
	const uint8_t *m = dxl_index_mem(ix);
	uint64_t w;
	memcpy(&w, m + off + 16 * s + 8, 8);
	return w;
}

static uint64_t key_at(const struct dxl_index *ix, uint64_t off, int s)
{
	const uint8_t *m = dxl_index_mem(ix);
	uint64_t k;
	memcpy(&k, m + off + 16 * s, 8);
	return k;
}

/* a remote-style lookup on a copy of the whole area: bucket by bucket */
static int remote_lookup(const void *area, const struct dxl_index_hdr *hdr,
			 uint64_t key, struct dxl_index_find *res)
{
	uint64_t off = dxl_index_bucket_addr(hdr, key);
	for (uint64_t hop = 0; hop < dxl_index_chain_max(hdr); hop++) {
		uint8_t b[DXL_INDEX_BUCKET_SIZE];
		memcpy(b, (const uint8_t *)area + off, sizeof(b));
		int r = dxl_index_bucket_find(hdr, b, key, res);
		if (r != DXL_INDEX_NEXT)
			return r;
		off = res->next_off;
	}
	return -1;
}

/* check key's location both ways: owner lookup and remote-style walk */
static void expect_loc(const struct dxl_index *ix, uint64_t key, uint64_t slot,
		       uint32_t inc)
{
	struct dxl_index_loc loc;
	int ret = dxl_index_lookup(ix, key, &loc);
	if (ret)
		fail_msg("lookup %llu: %s", (unsigned long long)key, dxl_errname(ret));
	assert_int_equal(loc.slot, slot);
	assert_int_equal(loc.lossy_inc, inc & DXL_INDEX_INC_MASK);
	struct dxl_index_hdr hdr;
	dxl_index_get_hdr(ix, &hdr);
	struct dxl_index_find f;
	assert_int_equal(remote_lookup(dxl_index_mem(ix), &hdr, key, &f),
			 DXL_INDEX_FOUND);
	assert_int_equal(f.slot, slot);
	assert_int_equal(f.lossy_inc, inc & DXL_INDEX_INC_MASK);
}

static void expect_absent(const struct dxl_index *ix, uint64_t key)
{
	assert_int_equal(dxl_index_lookup(ix, key, NULL), DXL_E_NOENT);
	struct dxl_index_hdr hdr;
	dxl_index_get_hdr(ix, &hdr);
	struct dxl_index_find f;
	assert_int_equal(remote_lookup(dxl_index_mem(ix), &hdr, key, &f),
			 DXL_INDEX_ABSENT);
}

/* n distinct keys whose main bucket (under hdr) is `bucket` */
static void keys_in_bucket(const struct dxl_index_hdr *hdr, uint64_t bucket,
			   uint64_t *keys, int n, uint64_t start)
{
	uint64_t want = DXL_INDEX_HDR_SIZE + bucket * DXL_INDEX_BUCKET_SIZE;
	int got = 0;
	for (uint64_t k = start; got < n; k++)
		if (dxl_index_bucket_addr(hdr, k) == want)
			keys[got++] = k;
}

/* ---- layout and header ------------------------------------------------------- */

static void test_header_and_cfg(void **state)
{
	struct dxl_index_cfg cfg;
	dxl_index_cfg_init(&cfg, 6000);
	assert_int_equal(cfg.n_buckets, 1024); /* >= 1000, power of two */
	assert_int_equal(cfg.n_indirect, 1024 / 4 + 16);
	dxl_index_cfg_init(&cfg, 0);
	assert_int_equal(cfg.n_buckets, 1);

	struct dxl_index *ix = mk_index(64, 10);
	assert_int_equal(dxl_index_mem_len(ix), 128 * (1 + 64 + 10));
	assert_int_equal((uintptr_t)dxl_index_mem(ix) % 4096, 0);
	struct dxl_index_hdr h, own;
	assert_int_equal(dxl_index_hdr_decode(dxl_index_mem(ix),
					      DXL_INDEX_HDR_SIZE, &h), 0);
	dxl_index_get_hdr(ix, &own);
	assert_int_equal(h.format, DXL_INDEX_FORMAT);
	assert_int_equal(h.n_buckets, 64);
	assert_int_equal(h.n_indirect, 10);
	assert_int_equal(h.seed, own.seed);
	assert_int_equal(h.len, dxl_index_mem_len(ix));
	assert_int_equal(dxl_index_chain_max(&h), 11);
	/* bucket addresses: inside the main array, bucket-aligned */
	for (uint64_t k = 0; k < 1000; k++) {
		uint64_t a = dxl_index_bucket_addr(&h, k);
		assert_true(a >= 128 && a < 128 + 64 * 128);
		assert_int_equal((a - 128) % 128, 0);
	}

	/* corrupt copies */
	uint8_t b[DXL_INDEX_HDR_SIZE];
	memcpy(b, dxl_index_mem(ix), sizeof(b));
	assert_int_equal(dxl_index_hdr_decode(b, 64, &h), DXL_E_PROTO);
	b[0] ^= 1;
	assert_int_equal(dxl_index_hdr_decode(b, sizeof(b), &h), DXL_E_PROTO);
	b[0] ^= 1;
	b[4] = 9; /* format */
	assert_int_equal(dxl_index_hdr_decode(b, sizeof(b), &h), DXL_E_VERSION);
	b[4] = DXL_INDEX_FORMAT;
	b[8] = 63; /* n_buckets not a power of two */
	assert_int_equal(dxl_index_hdr_decode(b, sizeof(b), &h), DXL_E_CORRUPT);
	b[8] = 64;
	b[32] ^= 0x80; /* length */
	assert_int_equal(dxl_index_hdr_decode(b, sizeof(b), &h), DXL_E_CORRUPT);
	b[32] ^= 0x80;
	assert_int_equal(dxl_index_hdr_decode(b, sizeof(b), &h), 0);

	/* bad configurations */
	struct dxl_index *bad = NULL;
	cfg.n_buckets = 3;
	cfg.n_indirect = 0;
	assert_int_equal(dxl_index_new(&cfg, &bad), DXL_E_INVAL);
	cfg.n_buckets = 0;
	assert_int_equal(dxl_index_new(&cfg, &bad), DXL_E_INVAL);
	cfg.n_buckets = 1ull << 37;
	assert_int_equal(dxl_index_new(&cfg, &bad), DXL_E_INVAL);
	cfg.n_buckets = 1;
	cfg.n_indirect = (1ull << 36) + 1;
	assert_int_equal(dxl_index_new(&cfg, &bad), DXL_E_INVAL);
	assert_null(bad);

	/* seeds change the map */
	struct dxl_index_hdr h2 = h;
	h2.seed = h.seed + 1;
	int same = 0;
	for (uint64_t k = 0; k < 1000; k++)
		same += dxl_index_bucket_addr(&h, k) == dxl_index_bucket_addr(&h2, k);
	assert_true(same < 100); /* 1/64 expected to agree by chance */

	dxl_index_delete(&ix);
	assert_null(ix);
	dxl_index_delete(&ix); /* NULL is fine */
}

/* ---- owner operations ----------------------------------------------------------- */

static void test_many_keys(void **state)
{
	enum { N = 20000 };
	struct dxl_index_cfg cfg;
	dxl_index_cfg_init(&cfg, N);
	struct dxl_index *ix = NULL;
	assert_int_equal(dxl_index_new(&cfg, &ix), 0);
	uint64_t *keys = malloc(N * sizeof(*keys));
	uint64_t s = 42;
	for (int i = 0; i < N; i++) {
		keys[i] = rng_next(&s);
		int ret = dxl_index_insert(ix, keys[i], (uint64_t)i, (uint32_t)i * 3 + 1);
		if (ret)
			fail_msg("insert %d: %s: %s", i, dxl_errname(ret), dxl_errmsg());
	}
	struct dxl_index_stats st;
	dxl_index_stats(ix, &st);
	assert_int_equal(st.keys, N);
	assert_true(st.indirect_used > 0); /* ~6 keys per bucket overflow some */
	assert_true(st.indirect_used <= st.indirect_total);
	assert_int_equal(st.conversions, st.indirect_used);
	for (int i = 0; i < N; i++)
		expect_loc(ix, keys[i], (uint64_t)i, (uint32_t)i * 3 + 1);
	/* duplicates are refused and change nothing */
	for (int i = 0; i < N; i += 97) {
		assert_int_equal(dxl_index_insert(ix, keys[i], 7, 7), DXL_E_EXIST);
		expect_loc(ix, keys[i], (uint64_t)i, (uint32_t)i * 3 + 1);
	}
	/* remove every other key */
	for (int i = 0; i < N; i += 2) {
		struct dxl_index_loc old;
		assert_int_equal(dxl_index_remove(ix, keys[i], &old), 0);
		assert_int_equal(old.slot, (uint64_t)i);
		assert_int_equal(dxl_index_remove(ix, keys[i], NULL), DXL_E_NOENT);
	}
	dxl_index_stats(ix, &st);
	assert_int_equal(st.keys, N / 2);
	uint64_t used = st.indirect_used;
	for (int i = 0; i < N; i++) {
		if (i % 2)
			expect_loc(ix, keys[i], (uint64_t)i, (uint32_t)i * 3 + 1);
		else
			expect_absent(ix, keys[i]);
	}
	/* re-insert with new slots and incarnations: emptied slots are reused,
	 * so no chain grows */
	for (int i = 0; i < N; i += 2)
		assert_int_equal(dxl_index_insert(ix, keys[i], (uint64_t)(N + i),
						  (uint32_t)i * 3 + 3), 0);
	dxl_index_stats(ix, &st);
	assert_int_equal(st.keys, N);
	assert_int_equal(st.indirect_used, used);
	for (int i = 0; i < N; i++) {
		if (i % 2)
			expect_loc(ix, keys[i], (uint64_t)i, (uint32_t)i * 3 + 1);
		else
			expect_loc(ix, keys[i], (uint64_t)(N + i), (uint32_t)i * 3 + 3);
	}
	free(keys);
	dxl_index_delete(&ix);
}

static void test_slot_and_incarnation_limits(void **state)
{
	struct dxl_index *ix = mk_index(4, 2);
	assert_int_equal(dxl_index_insert(ix, 1, DXL_INDEX_MAX_SLOT + 1, 1),
			 DXL_E_INVAL);
	assert_int_equal(dxl_index_insert(ix, 1, DXL_INDEX_MAX_SLOT, 0x12345), 0);
	expect_loc(ix, 1, DXL_INDEX_MAX_SLOT, 0x12345);
	struct dxl_index_loc loc;
	assert_int_equal(dxl_index_lookup(ix, 1, &loc), 0);
	assert_int_equal(loc.lossy_inc, 0x2345);
	assert_true(dxl_index_inc_match(loc.lossy_inc, 0x12345));
	assert_true(dxl_index_inc_match(loc.lossy_inc, 0x2345));
	assert_false(dxl_index_inc_match(loc.lossy_inc, 0x12346));
	/* key 0 and UINT64_MAX are ordinary keys */
	assert_int_equal(dxl_index_insert(ix, 0, 5, 1), 0);
	assert_int_equal(dxl_index_insert(ix, UINT64_MAX, 6, 1), 0);
	expect_loc(ix, 0, 5, 1);
	expect_loc(ix, UINT64_MAX, 6, 1);
	dxl_index_delete(&ix);
}

/*
 * One main bucket: every key collides. The chain grows one indirect bucket
 * per 7 keys; slot 7's entry is the only one that ever moves; when the pool
 * is used up an insert fails with DXL_E_FULL and changes nothing.
 */
static void test_chain_and_capacity(void **state)
{
	enum { NI = 8, CAP = 7 * (NI + 1) + 1 }; /* 7 per linked bucket + 8 in the last */
	struct dxl_index *ix = mk_index(1, NI);
	struct dxl_index_hdr hdr;
	dxl_index_get_hdr(ix, &hdr);
	const uint64_t main_off = DXL_INDEX_HDR_SIZE;
	for (uint64_t k = 1; k <= 8; k++)
		assert_int_equal(dxl_index_insert(ix, k * 1000, k, (uint32_t)k), 0);
	/* slots filled in order, nothing moved */
	for (int s = 0; s < 8; s++) {
		assert_int_equal(key_at(ix, main_off, s), (uint64_t)(s + 1) * 1000);
		assert_int_equal(word_at(ix, main_off, s) >> 62, DXL_INDEX_ENTRY);
	}
	/* the 9th: slot 7 becomes a HEADER to pool bucket 0, which holds the
	 * moved entry (key 8000) in slot 0 and the new key in slot 1 */
	assert_int_equal(dxl_index_insert(ix, 9000, 9, 9), 0);
	uint64_t w7 = word_at(ix, main_off, 7);
	assert_int_equal(w7 >> 62, DXL_INDEX_HEADER);
	assert_int_equal(w7 & ((1ull << 48) - 1), 0);
	uint64_t ind0 = DXL_INDEX_HDR_SIZE + 1 * DXL_INDEX_BUCKET_SIZE;
	assert_int_equal(key_at(ix, ind0, 0), 8000);
	assert_int_equal(key_at(ix, ind0, 1), 9000);
	for (int s = 0; s < 7; s++) /* the others did not move */
		assert_int_equal(key_at(ix, main_off, s), (uint64_t)(s + 1) * 1000);
	for (uint64_t k = 1; k <= 9; k++)
		expect_loc(ix, k * 1000, k, (uint32_t)k);

	uint64_t k = 10;
	for (; k <= CAP; k++) {
		int ret = dxl_index_insert(ix, k * 1000, k, (uint32_t)k);
		if (ret)
			fail_msg("insert %llu: %s", (unsigned long long)k, dxl_errmsg());
	}
	struct dxl_index_stats st;
	dxl_index_stats(ix, &st);
	assert_int_equal(st.keys, CAP);
	assert_int_equal(st.indirect_used, NI);
	assert_int_equal(st.conversions, NI);
	/* full */
	assert_int_equal(dxl_index_insert(ix, 999999, 1, 1), DXL_E_FULL);
	assert_non_null(strstr(dxl_errmsg(), "indirect"));
	expect_absent(ix, 999999);
	for (uint64_t j = 1; j <= CAP; j++)
		expect_loc(ix, j * 1000, j, (uint32_t)j);
	/* a free slot anywhere in the chain takes the next insert: the first
	 * in chain order (main slot 2 before the indirect one) */
	assert_int_equal(dxl_index_remove(ix, 20000, NULL), 0);
	assert_int_equal(dxl_index_remove(ix, 3000, NULL), 0);
	assert_int_equal(dxl_index_insert(ix, 999999, 77, 5), 0);
	assert_int_equal(key_at(ix, main_off, 2), 999999);
	assert_int_equal(dxl_index_insert(ix, 3000, 78, 7), 0);
	expect_loc(ix, 3000, 78, 7);
	assert_int_equal(dxl_index_insert(ix, 1234567, 1, 1), DXL_E_FULL);
	expect_loc(ix, 999999, 77, 5);
	dxl_index_stats(ix, &st);
	assert_int_equal(st.keys, CAP);
	dxl_index_delete(&ix);
}

/* chains of several main buckets share the pool; removing keeps chains */
static void test_shared_pool(void **state)
{
	struct dxl_index *ix = mk_index(4, 6);
	struct dxl_index_hdr hdr;
	dxl_index_get_hdr(ix, &hdr);
	uint64_t a[22], b[15];
	keys_in_bucket(&hdr, 0, a, 22, 1);  /* 8 + 7 + 7: two indirect */
	keys_in_bucket(&hdr, 3, b, 15, 1);  /* 8 + 7: one indirect */
	/* interleave so the chains' pool buckets interleave too */
	for (int i = 0; i < 22; i++) {
		assert_int_equal(dxl_index_insert(ix, a[i], 100 + (uint64_t)i, 1), 0);
		if (i < 15)
			assert_int_equal(dxl_index_insert(ix, b[i], 200 + (uint64_t)i, 2), 0);
	}
	struct dxl_index_stats st;
	dxl_index_stats(ix, &st);
	assert_int_equal(st.indirect_used, 3);
	for (int i = 0; i < 22; i++)
		expect_loc(ix, a[i], 100 + (uint64_t)i, 1);
	for (int i = 0; i < 15; i++)
		expect_loc(ix, b[i], 200 + (uint64_t)i, 2);
	/* empty a's chain entirely, then refill it: the same buckets serve */
	for (int i = 0; i < 22; i++)
		assert_int_equal(dxl_index_remove(ix, a[i], NULL), 0);
	for (int i = 0; i < 22; i++)
		expect_absent(ix, a[i]);
	for (int i = 21; i >= 0; i--)
		assert_int_equal(dxl_index_insert(ix, a[i], 300 + (uint64_t)i, 3), 0);
	dxl_index_stats(ix, &st);
	assert_int_equal(st.indirect_used, 3);
	for (int i = 0; i < 22; i++)
		expect_loc(ix, a[i], 300 + (uint64_t)i, 3);
	for (int i = 0; i < 15; i++)
		expect_loc(ix, b[i], 200 + (uint64_t)i, 2);
	dxl_index_delete(&ix);
}

/* dxl_index_bucket_find on hand-made buckets: corrupt slots are refused */
static void test_bucket_find_checks(void **state)
{
	struct dxl_index_hdr hdr = {.format = 1, .n_buckets = 2, .n_indirect = 3,
				    .seed = 0, .len = 128 * 6};
	uint64_t b[16];
	memset(b, 0, sizeof(b));
	struct dxl_index_find f;
	assert_int_equal(dxl_index_bucket_find(&hdr, b, 0, &f), DXL_INDEX_ABSENT);
	/* an EMPTY slot whose key field matches is not a hit */
	b[4] = 77;
	assert_int_equal(dxl_index_bucket_find(&hdr, b, 77, &f), DXL_INDEX_ABSENT);
	b[5] = 1ull << 62 | 5ull << 48 | 1234;
	assert_int_equal(dxl_index_bucket_find(&hdr, b, 77, &f), DXL_INDEX_FOUND);
	assert_int_equal(f.result, DXL_INDEX_FOUND);
	assert_int_equal(f.slot, 1234);
	assert_int_equal(f.lossy_inc, 5);
	b[15] = 2ull << 62 | 2; /* slot 7: header to pool bucket 2 */
	assert_int_equal(dxl_index_bucket_find(&hdr, b, 78, &f), DXL_INDEX_NEXT);
	assert_int_equal(f.next_off, 128 + (2 + 2) * 128);
	/* a hit wins over the header */
	assert_int_equal(dxl_index_bucket_find(&hdr, b, 77, &f), DXL_INDEX_FOUND);
	b[15] = 2ull << 62 | 3; /* beyond the pool */
	assert_int_equal(dxl_index_bucket_find(&hdr, b, 78, &f), DXL_E_CORRUPT);
	b[15] = 0;
	b[7] = 2ull << 62 | 1; /* a header outside slot 7 */
	assert_int_equal(dxl_index_bucket_find(&hdr, b, 78, &f), DXL_E_CORRUPT);
	b[7] = 3ull << 62; /* type 3 */
	assert_int_equal(dxl_index_bucket_find(&hdr, b, 78, &f), DXL_E_CORRUPT);
	/* unaligned buffers are fine */
	uint8_t raw[DXL_INDEX_BUCKET_SIZE + 1];
	b[7] = 0;
	memcpy(raw + 1, b, sizeof(b));
	assert_int_equal(dxl_index_bucket_find(&hdr, raw + 1, 77, &f), DXL_INDEX_FOUND);
}

/* ---- torn remote views ------------------------------------------------------------ */

/*
 * Every 8-byte store of insert/remove is followed by a snapshot of the area
 * (the store hook). A remote reader is modelled exactly as the fabric can
 * behave: within one bucket READ every 8-byte word comes from any moment of
 * the read window, in any order (no single-copy atomicity beyond 8 bytes,
 * no placement order); the READ of the next bucket starts no earlier than
 * the moment the HEADER word that led to it was read. Over thousands of
 * such views, a key that no operation in the window touched must be FOUND
 * at its slot; a key being changed may be anything but an error.
 */

struct snaps {
	const struct dxl_index *ix;
	size_t len;
	size_t n, cap;
	uint8_t *buf;
};

static void snap_take(void *arg)
{
	struct snaps *s = arg;
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 256;
		s->buf = realloc(s->buf, s->cap * s->len);
		assert_non_null(s->buf);
	}
	memcpy(s->buf + s->n * s->len, dxl_index_mem(s->ix), s->len);
	s->n++;
}

static int torn_lookup(const struct snaps *s, const struct dxl_index_hdr *hdr,
		       size_t lo, size_t hi, uint64_t key, uint64_t *rng,
		       struct dxl_index_find *res)
{
	uint64_t off = dxl_index_bucket_addr(hdr, key);
	for (uint64_t hop = 0; hop < dxl_index_chain_max(hdr); hop++) {
		uint8_t b[DXL_INDEX_BUCKET_SIZE];
		size_t t7 = lo;
		for (int w = 0; w < 16; w++) {
			size_t t = lo + (size_t)(rng_next(rng) % (hi - lo + 1));
			memcpy(b + 8 * w, s->buf + t * s->len + off + 8 * w, 8);
			if (w == 15)
				t7 = t;
		}
		int r = dxl_index_bucket_find(hdr, b, key, res);
		if (r != DXL_INDEX_NEXT)
			return r;
		lo = t7;
		off = res->next_off;
	}
	return -1;
}

enum { TK = 48, TOPS = 300, TROUNDS = 8 };

struct truth {
	bool present[TK];
	uint64_t slot[TK];
	uint32_t inc[TK];
};

/* one index, TOPS random operations, every window checked; returns the
 * number of operations that converted a slot (moved an entry) */
static int torn_round(uint64_t seed)
{
	/* two main buckets, up to 36 of 48 keys: chains of up to four
	 * buckets, so the ramp-up converts a slot every ~7 inserts */
	struct dxl_index *ix = mk_index(2, 16);
	struct dxl_index_hdr hdr;
	dxl_index_get_hdr(ix, &hdr);
	struct snaps sn = {.ix = ix, .len = dxl_index_mem_len(ix)};
	snap_take(&sn); /* 0: empty */
	dxl_index_set_store_hook(ix, snap_take, &sn);

	uint64_t keys[TK];
	for (int i = 0; i < TK; i++)
		keys[i] = seed * 0x100000 + (uint64_t)i * 7919;
	static struct truth before[TOPS + 1];
	static int touched[TOPS];
	static size_t snap_end[TOPS + 1]; /* last snapshot after op i-1 */
	memset(&before[0], 0, sizeof(before[0]));
	snap_end[0] = 0;
	uint64_t rng = seed;
	uint32_t incs[TK] = {0};
	int conversions_seen = 0;
	for (int op = 0; op < TOPS; op++) {
		struct truth t = before[op];
		int i = (int)(rng_next(&rng) % TK);
		/* mostly inserts until ~3/4 full, then balanced */
		int npresent = 0;
		for (int j = 0; j < TK; j++)
			npresent += t.present[j];
		bool ins = !t.present[i];
		if (!ins && npresent < TK * 3 / 4 && rng_next(&rng) % 4) {
			for (int j = 0; j < TK && !ins; j++)
				if (!t.present[(i + j) % TK]) {
					i = (i + j) % TK;
					ins = true;
				}
		}
		touched[op] = i;
		struct dxl_index_stats st0, st1;
		dxl_index_stats(ix, &st0);
		if (ins) {
			incs[i] += 1;
			uint64_t slot = (uint64_t)op * 100 + (uint64_t)i;
			assert_int_equal(dxl_index_insert(ix, keys[i], slot, incs[i]), 0);
			t.present[i] = true;
			t.slot[i] = slot;
			t.inc[i] = incs[i];
		} else {
			assert_int_equal(dxl_index_remove(ix, keys[i], NULL), 0);
			t.present[i] = false;
			incs[i] += 1;
		}
		dxl_index_stats(ix, &st1);
		conversions_seen += st1.conversions != st0.conversions;
		before[op + 1] = t;
		snap_end[op + 1] = sn.n - 1;
	}
	/* windows of 1..3 operations; 8 views per window and key */
	uint64_t found_stable = 0, views = 0;
	for (int op = 0; op < TOPS; op++) {
		for (int span = 1; span <= 3 && op + span <= TOPS; span++) {
			size_t lo = snap_end[op], hi = snap_end[op + span];
			for (int k = 0; k < TK; k++) {
				bool stable = before[op].present[k];
				for (int j = op; j < op + span; j++)
					stable = stable && touched[j] != k;
				for (int v = 0; v < 8; v++) {
					struct dxl_index_find f;
					int r = torn_lookup(&sn, &hdr, lo, hi, keys[k],
							    &rng, &f);
					views++;
					assert_true(r >= 0);
					if (!stable)
						continue;
					if (r != DXL_INDEX_FOUND)
						fail_msg("op %d span %d: stable key %d "
							 "missed (%d)", op, span, k, r);
					assert_int_equal(f.slot, before[op].slot[k]);
					assert_int_equal(f.lossy_inc,
							 before[op].inc[k] & DXL_INDEX_INC_MASK);
					found_stable++;
				}
			}
		}
	}
	assert_true(found_stable > views / 4);
	dxl_index_set_store_hook(ix, NULL, NULL);
	free(sn.buf);
	dxl_index_delete(&ix);
	return conversions_seen;
}

static void test_torn_views(void **state)
{
	int conversions = 0;
	for (uint64_t r = 1; r <= TROUNDS; r++)
		conversions += torn_round(r);
	assert_true(conversions >= 4 * TROUNDS);
}

/* ---- a local lock-free reader next to the writer ------------------------------------ */

struct lr {
	struct dxl_index *ix;
	const uint64_t *stable;
	int nstable;
	atomic_bool stop;
	uint64_t lookups;
	int errors;
};

static void *local_reader(void *arg)
{
	struct lr *l = arg;
	uint64_t n = 0;
	while (!atomic_load(&l->stop) || n < 1000) {
		int i = (int)(n % (uint64_t)l->nstable);
		struct dxl_index_loc loc;
		if (dxl_index_lookup(l->ix, l->stable[i], &loc) != 0 ||
		    loc.slot != (uint64_t)i)
			l->errors++;
		n++;
	}
	l->lookups = n;
	return NULL;
}

static void test_local_reader_while_writing(void **state)
{
	enum { NS = 200, NC = 200 };
	struct dxl_index *ix = mk_index(16, 64);
	uint64_t stable[NS];
	for (int i = 0; i < NS; i++) {
		stable[i] = 0xabc00000ull + (uint64_t)i;
		assert_int_equal(dxl_index_insert(ix, stable[i], (uint64_t)i, 1), 0);
	}
	struct lr l = {.ix = ix, .stable = stable, .nstable = NS};
	atomic_init(&l.stop, false);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, local_reader, &l), 0);
	for (int round = 0; round < 30; round++) {
		for (int i = 0; i < NC; i++)
			assert_int_equal(dxl_index_insert(ix, 0x5000000ull + (uint64_t)i,
							  (uint64_t)(1000 + i),
							  (uint32_t)round * 2 + 1), 0);
		for (int i = 0; i < NC; i++)
			assert_int_equal(dxl_index_remove(ix, 0x5000000ull + (uint64_t)i,
							  NULL), 0);
	}
	atomic_store(&l.stop, true);
	pthread_join(th, NULL);
	assert_int_equal(l.errors, 0);
	assert_true(l.lookups >= 1000);
	dxl_index_delete(&ix);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_and_cfg),
		cmocka_unit_test(test_many_keys),
		cmocka_unit_test(test_slot_and_incarnation_limits),
		cmocka_unit_test(test_chain_and_capacity),
		cmocka_unit_test(test_shared_pool),
		cmocka_unit_test(test_bucket_find_checks),
		cmocka_unit_test(test_torn_views),
		cmocka_unit_test(test_local_reader_while_writing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
