/* test_record.c -- log record encoding, validation, and the hybrid clock */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/log.h"

static const uint32_t parts3[] = {7, 9, 4000000000u};

static int make(uint8_t *buf, size_t cap, uint32_t len, uint16_t nparts)
{
	static uint8_t payload[DXL_REC_MAX_PAYLOAD / 256];
	for (uint32_t i = 0; i < len; i++)
		payload[i] = (uint8_t)(i * 31 + 7);
	struct dxl_rec r = {.type = DXL_REC_DATA, .writer = 3, .epoch = 12,
			    .seq = 1000 + len, .txn_id = 0xabcdef0123ull,
			    .commit_ts = DXL_HLC_MAKE(1700000000000ull, 5),
			    .incarnation = 0x01020304u,
			    .nparts = nparts, .payload = payload,
			    .payload_len = len};
	return dxl_rec_encode(&r, parts3, buf, cap);
}

static void test_sizes_follow_h5_h6(void **state)
{
	assert_int_equal(dxl_rec_size(0, 0), 64);        /* hdr 56 + trl 8 */
	assert_int_equal(dxl_rec_size(0, 1), 128);
	assert_int_equal(dxl_rec_size(1, 60), 128);
	assert_int_equal(dxl_rec_size(0, 128), 192);
	assert_int_equal(dxl_rec_size(0, 129), 256);      /* >= 256: 256 B units */
	assert_int_equal(dxl_rec_size(0, 193), 512);
	assert_int_equal(dxl_rec_size(3, 4096), 4352);
	assert_int_equal(dxl_rec_size(DXL_REC_MAX_PARTS + 1, 0), 0);
	assert_int_equal(dxl_rec_size(0, DXL_REC_MAX_PAYLOAD + 1), 0);
	for (uint32_t len = 0; len < 5000; len += 37) {
		uint32_t s = dxl_rec_size(2, len);
		assert_true(s >= DXL_REC_HDR_SIZE + 8 + len + DXL_REC_TRL_SIZE);
		assert_int_equal(s % (s >= 256 ? 256 : 64), 0);
	}
}

static void test_roundtrip(void **state)
{
	static uint8_t buf[8192];
	for (uint32_t len = 0; len <= 4096; len = len ? len * 2 : 1) {
		int n = make(buf, sizeof(buf), len, 3);
		assert_int_equal(n, (int)dxl_rec_size(3, len));
		struct dxl_rec r;
		assert_int_equal(dxl_rec_decode(buf, (size_t)n, &r), 0);
		assert_int_equal(r.type, DXL_REC_DATA);
		assert_int_equal(r.writer, 3);
		assert_int_equal(r.epoch, 12);
		assert_int_equal(r.seq, 1000 + len);
		assert_int_equal(r.incarnation, 0x01020304u);
		assert_int_equal(r.txn_id, 0xabcdef0123ull);
		assert_int_equal(r.commit_ts, DXL_HLC_MAKE(1700000000000ull, 5));
		assert_int_equal(r.nparts, 3);
		for (unsigned i = 0; i < 3; i++)
			assert_int_equal(dxl_rec_part(&r, i), parts3[i]);
		assert_int_equal(r.payload_len, len);
		assert_int_equal(r.total_len, (uint32_t)n);
		for (uint32_t i = 0; i < len; i++)
			assert_int_equal(((const uint8_t *)r.payload)[i],
					 (uint8_t)(i * 31 + 7));
		/* more readable bytes than the record is fine */
		assert_int_equal(dxl_rec_decode(buf, sizeof(buf), &r), 0);
		assert_int_equal(r.total_len, (uint32_t)n);
	}
}

/* every single-byte change of header, participants, payload or trailer is
 * detected (padding carries no information and is not checked) */
static void test_every_corruption_detected(void **state)
{
	static uint8_t buf[1024], orig[1024];
	const uint32_t len = 100;
	int n = make(buf, sizeof(buf), len, 3);
	assert_int_equal(n, 192); /* 56 + 12 + 100 + 8 = 176 -> 192 */
	memcpy(orig, buf, (size_t)n);
	uint32_t body_end = DXL_REC_HDR_SIZE + 12 + len;
	int checked = 0;
	for (int i = 0; i < n; i++) {
		if ((uint32_t)i >= body_end && i < n - DXL_REC_TRL_SIZE)
			continue; /* padding */
		for (int bit = 0; bit < 8; bit++) {
			memcpy(buf, orig, (size_t)n);
			buf[i] ^= (uint8_t)(1u << bit);
			struct dxl_rec r;
			int ret = dxl_rec_decode(buf, (size_t)n, &r);
			if (ret != DXL_E_CORRUPT)
				fail_msg("flip of bit %d of byte %d not detected", bit, i);
			checked++;
		}
	}
	assert_true(checked > 8 * 150);
}

static void test_corruptions_have_clear_messages(void **state)
{
	static uint8_t buf[1024];
	struct dxl_rec r;
	int n = make(buf, sizeof(buf), 100, 0);
	/* trailer length disagreeing with the header */
	buf[n - DXL_REC_TRL_SIZE] ^= 0x40;
	assert_int_equal(dxl_rec_decode(buf, (size_t)n, &r), DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "trailer length"));
	buf[n - DXL_REC_TRL_SIZE] ^= 0x40;
	/* a torn record: header and trailer landed, the middle did not */
	memset(buf + 64, 0, 32);
	assert_int_equal(dxl_rec_decode(buf, (size_t)n, &r), DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "checksum"));
	/* truncated: fewer readable bytes than the record */
	n = make(buf, sizeof(buf), 100, 0);
	assert_int_equal(dxl_rec_decode(buf, (size_t)n - 1, &r), DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "runs past"));
	assert_int_equal(dxl_rec_decode(buf, 10, &r), DXL_E_CORRUPT);
	/* other version */
	buf[4] = 1; /* the format before incarnations */
	assert_int_equal(dxl_rec_decode(buf, (size_t)n, &r), DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "version 1"));
	/* zeroed memory is not a record */
	memset(buf, 0, sizeof(buf));
	assert_int_equal(dxl_rec_decode(buf, sizeof(buf), &r), DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "magic"));
}

static void test_stale_record_from_earlier_lap(void **state)
{
	/* the same slot holding a record of an earlier lap has a sequence
	 * number the reader does not expect; a half-overwritten one fails */
	static uint8_t buf[512], old[512];
	int n = make(old, sizeof(old), 60, 0);
	int m = make(buf, sizeof(buf), 100, 0); /* seq differs */
	assert_true(m > n);
	memcpy(buf + 64, old + 64, (size_t)n - 64); /* new header, old rest */
	struct dxl_rec r;
	assert_int_equal(dxl_rec_decode(buf, (size_t)m, &r), DXL_E_CORRUPT);
}

static void test_skip_records(void **state)
{
	static uint8_t buf[4096];
	struct dxl_rec r;
	for (uint32_t total = 64; total <= 4096; total += 64) {
		assert_int_equal(dxl_rec_encode_skip(1, 2, 77, total, buf, sizeof(buf)),
				 (int)total);
		assert_int_equal(dxl_rec_decode(buf, total, &r), 0);
		assert_int_equal(r.type, DXL_REC_SKIP);
		assert_int_equal(r.total_len, total);
		assert_int_equal(r.seq, 77);
		assert_int_equal(r.payload_len, 0);
		assert_null(r.payload);
	}
	assert_int_equal(dxl_rec_encode_skip(1, 2, 3, 100, buf, sizeof(buf)), DXL_E_INVAL);
	assert_int_equal(dxl_rec_encode_skip(1, 2, 3, 0, buf, sizeof(buf)), DXL_E_INVAL);
	assert_int_equal(dxl_rec_encode_skip(1, 2, 3, 128, buf, 64), DXL_E_INVAL);
}

static void test_peek_size(void **state)
{
	static uint8_t buf[1024];
	int n = make(buf, sizeof(buf), 100, 3);
	/* the header alone tells the length, even with the rest missing */
	assert_int_equal(dxl_rec_peek_size(buf, DXL_REC_HDR_SIZE), (uint32_t)n);
	assert_int_equal(dxl_rec_peek_size(buf, DXL_REC_HDR_SIZE - 1), 0);
	assert_int_equal(dxl_rec_encode_skip(1, 2, 3, 320, buf, sizeof(buf)), 320);
	assert_int_equal(dxl_rec_peek_size(buf, sizeof(buf)), 320);
	buf[8] ^= 0x01; /* a skip length that is no multiple of 64 */
	assert_int_equal(dxl_rec_peek_size(buf, sizeof(buf)), 0);
	buf[8] ^= 0x01;
	buf[5] = 9; /* unknown type */
	assert_int_equal(dxl_rec_peek_size(buf, sizeof(buf)), 0);
	memset(buf, 0, sizeof(buf)); /* no magic */
	assert_int_equal(dxl_rec_peek_size(buf, sizeof(buf)), 0);
}

static void test_encode_rejects_bad_input(void **state)
{
	static uint8_t buf[256];
	struct dxl_rec r = {.type = DXL_REC_DATA, .payload_len = 10};
	assert_int_equal(dxl_rec_encode(&r, NULL, buf, sizeof(buf)), DXL_E_INVAL);
	r.payload = "0123456789";
	r.nparts = DXL_REC_MAX_PARTS + 1;
	assert_int_equal(dxl_rec_encode(&r, parts3, buf, sizeof(buf)), DXL_E_TOOBIG);
	r.nparts = 0;
	r.payload_len = DXL_REC_MAX_PAYLOAD + 1;
	assert_int_equal(dxl_rec_encode(&r, NULL, buf, sizeof(buf)), DXL_E_TOOBIG);
	r.payload_len = 10;
	assert_int_equal(dxl_rec_encode(&r, NULL, buf, 64), DXL_E_INVAL);
	r.type = DXL_REC_SKIP;
	assert_int_equal(dxl_rec_encode(&r, NULL, buf, sizeof(buf)), DXL_E_INVAL);
	/* the zero-length data record is valid */
	r.type = DXL_REC_DATA;
	r.payload_len = 0;
	assert_int_equal(dxl_rec_encode(&r, NULL, buf, sizeof(buf)), 64);
}

static void test_crc32c_known_vector(void **state)
{
	/* RFC 3720 B.4: CRC32C of 32 zero bytes is 0x8a9136aa */
	uint8_t z[32] = {0};
	assert_int_equal(dxl_crc32c(0, z, sizeof(z)), 0x8a9136aau);
	assert_int_equal(dxl_crc32c(0, "123456789", 9), 0xe3069283u);
	/* chaining equals one pass */
	assert_int_equal(dxl_crc32c(dxl_crc32c(0, "1234", 4), "56789", 5),
			 0xe3069283u);
}

static uint64_t fake_ms;
static uint64_t fake_wall(void)
{
	return fake_ms;
}

static void test_hlc_monotonic(void **state)
{
	struct dxl_hlc c;
	dxl_hlc_init(&c);
	c.wall_ms = fake_wall;
	fake_ms = 1000;
	uint64_t a = dxl_hlc_now(&c);
	assert_int_equal(a, DXL_HLC_MAKE(1000, 0));
	uint64_t b = dxl_hlc_now(&c);
	assert_int_equal(b, DXL_HLC_MAKE(1000, 1));
	fake_ms = 900; /* the wall clock steps back */
	uint64_t d = dxl_hlc_now(&c);
	assert_int_equal(d, DXL_HLC_MAKE(1000, 2));
	fake_ms = 2000;
	uint64_t e = dxl_hlc_now(&c);
	assert_int_equal(e, DXL_HLC_MAKE(2000, 0));
	/* a timestamp observed from another node ahead of us */
	dxl_hlc_observe(&c, DXL_HLC_MAKE(5000, 9));
	assert_int_equal(dxl_hlc_now(&c), DXL_HLC_MAKE(5000, 10));
	dxl_hlc_observe(&c, DXL_HLC_MAKE(10, 0)); /* older: no effect */
	assert_int_equal(dxl_hlc_now(&c), DXL_HLC_MAKE(5000, 11));
	/* the logical counter carries into the physical part */
	dxl_hlc_observe(&c, DXL_HLC_MAKE(6000, 0xffff));
	uint64_t f = dxl_hlc_now(&c);
	assert_int_equal(f, DXL_HLC_MAKE(6001, 0));
	assert_int_equal(DXL_HLC_PHYS(f), 6001);
	assert_int_equal(DXL_HLC_LOGICAL(f), 0);
}

/*
 * A clock takes from outside nothing further ahead of its physical clock
 * than max_ahead_ms (issue 19.7): a peer whose clock jumped an hour forward
 * does not drag this clock along, and a timestamp near the largest value
 * (garbage, or a ring's watermark written by such a clock) neither jumps it
 * nor makes a later dxl_hlc_now abort on overflow.
 */
static void test_hlc_observe_is_bounded(void **state)
{
	(void)state;
	struct dxl_hlc c;
	dxl_hlc_init(&c);
	c.wall_ms = fake_wall;
	fake_ms = 1000000;
	assert_int_equal(dxl_hlc_max_ts(&c),
			 DXL_HLC_MAKE(1000000 + DXL_HLC_MAX_AHEAD_MS, 0xffff));
	/* within the bound: taken as before */
	assert_int_equal(dxl_hlc_observe(&c, DXL_HLC_MAKE(1000000 + 5000, 7)), 0);
	assert_int_equal(dxl_hlc_now(&c), DXL_HLC_MAKE(1005000, 8));
	/* an hour ahead: not taken; the clock goes no further than the bound */
	assert_int_equal(dxl_hlc_observe(&c, DXL_HLC_MAKE(1000000 + 3600000, 0)),
			 DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "ahead of this host's clock"));
	uint64_t t = dxl_hlc_now(&c);
	assert_true(DXL_HLC_PHYS(t) <= 1000000 + DXL_HLC_MAX_AHEAD_MS + 1);
	/* the largest values: no abort, still bounded, still increasing */
	assert_int_equal(dxl_hlc_observe(&c, UINT64_MAX), DXL_E_INVAL);
	assert_int_equal(dxl_hlc_observe(&c, UINT64_MAX - 1), DXL_E_INVAL);
	uint64_t u = dxl_hlc_now(&c);
	assert_true(u > t);
	assert_true(DXL_HLC_PHYS(u) <= 1000000 + DXL_HLC_MAX_AHEAD_MS + 1);
	/* a per-clock bound */
	struct dxl_hlc d;
	dxl_hlc_init(&d);
	d.wall_ms = fake_wall;
	d.max_ahead_ms = 100;
	assert_int_equal(dxl_hlc_observe(&d, DXL_HLC_MAKE(1000000 + 100, 5)), 0);
	assert_int_equal(dxl_hlc_observe(&d, DXL_HLC_MAKE(1000000 + 101, 0)), DXL_E_INVAL);
	assert_int_equal(dxl_hlc_now(&d), DXL_HLC_MAKE(1000101, 0));
	/* the physical clock catches up: the same timestamp is taken */
	fake_ms = 1000000 + 3600000;
	assert_int_equal(dxl_hlc_observe(&c, DXL_HLC_MAKE(1000000 + 3600000, 0)), 0);
}

#define HLC_THREADS 2
#define HLC_PER 50000
static struct dxl_hlc shared_clock;
static uint64_t stamps[HLC_THREADS][HLC_PER];

static void *hlc_worker(void *arg)
{
	uint64_t *out = arg;
	for (int i = 0; i < HLC_PER; i++)
		out[i] = dxl_hlc_now(&shared_clock);
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void test_hlc_unique_across_threads(void **state)
{
	pthread_t t[HLC_THREADS];
	dxl_hlc_init(&shared_clock);
	for (int i = 0; i < HLC_THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, hlc_worker, stamps[i]), 0);
	for (int i = 0; i < HLC_THREADS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < HLC_THREADS; i++)
		for (int j = 1; j < HLC_PER; j++)
			assert_true(stamps[i][j] > stamps[i][j - 1]);
	qsort(stamps, HLC_THREADS * HLC_PER, sizeof(uint64_t), cmp_u64);
	uint64_t *all = &stamps[0][0];
	for (int j = 1; j < HLC_THREADS * HLC_PER; j++)
		assert_true(all[j] != all[j - 1]);
	/* physical part is close to the wall clock */
	uint64_t now = dxl_wall_ms();
	assert_true(DXL_HLC_PHYS(all[HLC_THREADS * HLC_PER - 1]) <= now + 1000);
	assert_true(DXL_HLC_PHYS(all[0]) + 60000 >= now);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes_follow_h5_h6),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_every_corruption_detected),
		cmocka_unit_test(test_corruptions_have_clear_messages),
		cmocka_unit_test(test_stale_record_from_earlier_lap),
		cmocka_unit_test(test_skip_records),
		cmocka_unit_test(test_peek_size),
		cmocka_unit_test(test_encode_rejects_bad_input),
		cmocka_unit_test(test_crc32c_known_vector),
		cmocka_unit_test(test_hlc_monotonic),
		cmocka_unit_test(test_hlc_observe_is_bounded),
		cmocka_unit_test(test_hlc_unique_across_threads),
	};
	return cmocka_run_group_tests_name("log records and clock", tests, NULL, NULL);
}
