/* test_writeset.c -- the write-set payload: round trip, encode errors, strict decoding of every damaged form */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/engine.h"

static uint8_t vals[3][DXL_ENGINE_MAX_VALUE];

static uint32_t sample(struct dxl_ws_entry *e)
{
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < DXL_ENGINE_MAX_VALUE; j++)
			vals[i][j] = (uint8_t)(i * 50 + j * 3 + 1);
	e[0] = (struct dxl_ws_entry){.table = 7, .op = DXL_WS_INSERT, .key = 1,
				     .version = 2, .value = vals[0], .len = 5};
	e[1] = (struct dxl_ws_entry){.table = 7, .op = DXL_WS_UPDATE,
				     .key = ~0ull, .version = 1ull << 62,
				     .value = vals[1], .len = 8};
	e[2] = (struct dxl_ws_entry){.table = 0xffffffffu, .op = DXL_WS_DELETE,
				     .key = 0, .version = 4};
	e[3] = (struct dxl_ws_entry){.table = 9, .op = DXL_WS_UPDATE, .key = 5,
				     .version = 6, .value = vals[2],
				     .len = DXL_ENGINE_MAX_VALUE};
	e[4] = (struct dxl_ws_entry){.table = 9, .op = DXL_WS_INSERT, .key = 6,
				     .version = 8, .value = NULL, .len = 0};
	return 5;
}

static void assert_same(const struct dxl_ws_entry *a, const struct dxl_ws_entry *b,
			uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(a[i].table, b[i].table);
		assert_int_equal(a[i].op, b[i].op);
		assert_int_equal(a[i].key, b[i].key);
		assert_int_equal(a[i].version, b[i].version);
		assert_int_equal(a[i].len, b[i].len);
		if (a[i].len)
			assert_memory_equal(a[i].value, b[i].value, a[i].len);
		else
			assert_null(b[i].value);
	}
}

static void test_roundtrip(void **state)
{
	struct dxl_ws_entry e[5], d[5];
	uint32_t n = sample(e);
	int size = dxl_writeset_size(e, n);
	/* 16 + (24+8) + (24+8) + 24 + (24+4000) + 24 */
	assert_int_equal(size, 16 + 32 + 32 + 24 + 4024 + 24);
	uint8_t *buf = malloc((size_t)size);
	assert_int_equal(dxl_writeset_encode(e, n, buf, (size_t)size), size);
	assert_int_equal(dxl_writeset_decode(buf, (size_t)size, d, 5), 5);
	assert_same(e, d, n);
	/* counting only, and a short output array */
	assert_int_equal(dxl_writeset_decode(buf, (size_t)size, NULL, 0), 5);
	memset(d, 0, sizeof(d));
	assert_int_equal(dxl_writeset_decode(buf, (size_t)size, d, 2), 5);
	assert_same(e, d, 2);
	assert_int_equal(d[2].table, 0);
	/* the bytes are the documented ones */
	assert_memory_equal(buf, "DXWS", 4);
	assert_int_equal(buf[4], DXL_WS_FORMAT);
	assert_int_equal(buf[8], 5);
	assert_int_equal(buf[16 + 4], DXL_WS_INSERT);
	assert_int_equal(buf[16 + 6], 5);
	/* one entry */
	assert_int_equal(dxl_writeset_encode(&e[2], 1, buf, (size_t)size), 40);
	assert_int_equal(dxl_writeset_decode(buf, 40, d, 1), 1);
	assert_same(&e[2], d, 1);
	free(buf);
}

static void test_encode_errors(void **state)
{
	struct dxl_ws_entry e[5];
	uint32_t n = sample(e);
	uint8_t buf[8192];
	assert_int_equal(dxl_writeset_encode(e, 0, buf, sizeof(buf)), DXL_E_INVAL);
	assert_int_equal(dxl_writeset_encode(NULL, 1, buf, sizeof(buf)), DXL_E_INVAL);
	assert_int_equal(dxl_writeset_encode(e, n, buf, 100), DXL_E_INVAL);
	assert_int_equal(dxl_writeset_encode(e, n, NULL, 0), DXL_E_INVAL);
	struct dxl_ws_entry b = e[0];
	b.op = (enum dxl_ws_op)4;
	assert_int_equal(dxl_writeset_size(&b, 1), DXL_E_INVAL);
	b = e[0];
	b.op = (enum dxl_ws_op)0;
	assert_int_equal(dxl_writeset_size(&b, 1), DXL_E_INVAL);
	b = e[0];
	b.version = 3;
	assert_int_equal(dxl_writeset_size(&b, 1), DXL_E_INVAL);
	b.version = 0;
	assert_int_equal(dxl_writeset_size(&b, 1), DXL_E_INVAL);
	b = e[2];
	b.len = 1;
	b.value = vals[0];
	assert_int_equal(dxl_writeset_size(&b, 1), DXL_E_INVAL);
	b = e[3];
	b.len = DXL_ENGINE_MAX_VALUE + 1;
	assert_int_equal(dxl_writeset_size(&b, 1), DXL_E_TOOBIG);
	b = e[0];
	b.value = NULL;
	assert_int_equal(dxl_writeset_size(&b, 1), DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "entry 0"));
	/* a write set over the log's payload limit */
	uint32_t many = DXL_REC_MAX_PAYLOAD / (24 + 4000) + 1;
	struct dxl_ws_entry *big = calloc(many, sizeof(*big));
	for (uint32_t i = 0; i < many; i++)
		big[i] = e[3];
	assert_int_equal(dxl_writeset_size(big, many), DXL_E_TOOBIG);
	free(big);
}

/*
 * What must hold for every input: decode never reads outside the buffer
 * (ASan), and an accepted input is exactly what encoding its entries gives
 * (so no garbled payload can pass as another one).
 */
static int check_property(const uint8_t *buf, size_t len)
{
	static struct dxl_ws_entry d[64];
	static uint8_t again[1 << 16];
	int n = dxl_writeset_decode(buf, len, d, 64);
	if (n < 0) {
		assert_int_equal(n, DXL_E_CORRUPT);
		return 0;
	}
	assert_true(n >= 1 && n <= 64);
	assert_int_equal(dxl_writeset_encode(d, (uint32_t)n, again, sizeof(again)),
			 (int)len);
	assert_memory_equal(again, buf, len);
	return 1;
}

static void test_every_truncation_and_flip(void **state)
{
	struct dxl_ws_entry e[5];
	uint32_t n = sample(e);
	e[3].len = 100; /* keep the flip loop quick */
	uint8_t buf[4096];
	int size = dxl_writeset_encode(e, n, buf, sizeof(buf));
	assert_true(size > 0);
	uint8_t *copy = malloc((size_t)size + 16);
	/* every truncation: each at its own allocation end, so ASan sees
	 * a read past it */
	for (int l = 0; l < size; l++) {
		uint8_t *t = malloc((size_t)l + 1);
		memcpy(t, buf, (size_t)l);
		assert_int_equal(dxl_writeset_decode(t, (size_t)l, NULL, 0),
				 DXL_E_CORRUPT);
		free(t);
	}
	/* bytes after the last entry */
	memcpy(copy, buf, (size_t)size);
	memset(copy + size, 0, 16);
	for (int x = 1; x <= 16; x++)
		assert_int_equal(dxl_writeset_decode(copy, (size_t)size + (size_t)x,
						     NULL, 0), DXL_E_CORRUPT);
	/* every single-byte change: refused, or (a key, a value byte, an
	 * even version...) accepted as exactly what it encodes */
	const uint8_t xors[] = {0x01, 0x02, 0x80, 0xff};
	int accepted = 0, refused = 0;
	for (int i = 0; i < size; i++)
		for (unsigned k = 0; k < sizeof(xors); k++) {
			memcpy(copy, buf, (size_t)size);
			copy[i] ^= xors[k];
			if (check_property(copy, (size_t)size))
				accepted++;
			else
				refused++;
		}
	/* structure bytes are refused: magic, format, reserved, count, op,
	 * length, padding */
	assert_true(refused > 0 && accepted > 0);
	const int must_refuse[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 15, 16 + 4, 16 + 5,
				   16 + 6, 16 + 7, 16 + 24 + 5 /* padding */};
	for (unsigned i = 0; i < DXL_ARRAY_SIZE(must_refuse); i++) {
		memcpy(copy, buf, (size_t)size);
		copy[must_refuse[i]] ^= 0x80;
		assert_int_equal(dxl_writeset_decode(copy, (size_t)size, NULL, 0),
				 DXL_E_CORRUPT);
	}
	/* an entry count that would need more bytes than there are */
	memcpy(copy, buf, (size_t)size);
	copy[8] = 0xff;
	copy[9] = 0xff;
	copy[10] = 0xff;
	copy[11] = 0xff;
	assert_int_equal(dxl_writeset_decode(copy, (size_t)size, NULL, 0),
			 DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "do not fit"));
	free(copy);
}

/* random inputs, and random mutations of a valid one */
static void test_random_inputs(void **state)
{
	unsigned seed = 12345;
	struct dxl_ws_entry e[5];
	uint32_t n = sample(e);
	e[3].len = 300;
	uint8_t good[4096];
	int size = dxl_writeset_encode(e, n, good, sizeof(good));
	int iters = getenv("DXL_TEST_SANITIZER") ? 5000 : 50000;
	int acc = 0;
	for (int it = 0; it < iters; it++) {
		size_t len = (size_t)rand_r(&seed) % (size_t)(size + 32);
		uint8_t *b = malloc(len + 1);
		if (it % 2) {
			for (size_t i = 0; i < len; i++)
				b[i] = (uint8_t)rand_r(&seed);
			if (len >= 16 && it % 4 == 1) { /* a plausible header */
				memcpy(b, good, 16);
			}
		} else {
			memcpy(b, good, DXL_MIN(len, (size_t)size));
			for (size_t i = (size_t)size; i < len; i++)
				b[i] = 0;
			int flips = 1 + rand_r(&seed) % 4;
			for (int f = 0; f < flips && len; f++)
				b[(size_t)rand_r(&seed) % len] ^=
					(uint8_t)(1 + rand_r(&seed) % 255);
		}
		acc += check_property(b, len);
		free(b);
	}
	printf("  %d random inputs, %d accepted (each re-encodes to itself)\n",
	       iters, acc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_encode_errors),
		cmocka_unit_test(test_every_truncation_and_flip),
		cmocka_unit_test(test_random_inputs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
