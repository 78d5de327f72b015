/* test_coordproto.c -- dxl-coord's wire codec (include/dxl/coordproto.h):
 * every frame kind round-trips; each malformation is refused with the
 * documented code; truncations and bit flips of valid frames never read
 * outside the frame (run it under ASan: make asan TESTS=test_coordproto) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dxl/coordproto.h"

static char g_why[256];
static struct dxl_cproto_msg g_m;

static int decode(const struct dxl_cproto_buf *b)
{
	return dxl_cproto_decode(b->p, b->len, &g_m, g_why, sizeof(g_why));
}

/* a frame in a malloc'ed block of exactly its size (ASan sees overreads) */
static int decode_exact(const uint8_t *p, size_t n)
{
	uint8_t *q = malloc(n ? n : 1);
	assert_non_null(q);
	memcpy(q, p, n);
	int ret = dxl_cproto_decode(q, n, &g_m, g_why, sizeof(g_why));
	free(q);
	return ret;
}

static void test_txn_roundtrip(void **state)
{
	(void)state;
	struct dxl_cproto_op ops[4] = {
		{.op = DXL_CPROTO_OP_GET, .table = 1, .key = 42},
		{.op = DXL_CPROTO_OP_PUT, .table = 1, .key = 43, .value = "hello", .len = 5},
		{.op = DXL_CPROTO_OP_INSERT, .table = 7, .key = UINT64_MAX, .value = "", .len = 0},
		{.op = DXL_CPROTO_OP_DELETE, .table = 2, .key = 0},
	};
	struct dxl_cproto_buf b = {0};
	assert_int_equal(dxl_cproto_encode_txn(&b, 0x1122334455667788ull, 5, ops, 4), 0);
	/* len field = bytes after it; type word = magic | version | kind */
	assert_int_equal(dxl_cproto_ld32(b.p), b.len - 4);
	assert_int_equal(dxl_cproto_ld32(b.p + 4), 0x44430101u);
	assert_int_equal(b.len, 8 + 16 + 4 * 20 + 5);
	assert_int_equal(decode(&b), 0);
	assert_int_equal(g_m.kind, DXL_CPROTO_TXN);
	assert_int_equal(g_m.req_id, 0x1122334455667788ull);
	assert_int_equal(g_m.max_tries, 5);
	assert_int_equal(g_m.nops, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(g_m.ops[i].op, ops[i].op);
		assert_int_equal(g_m.ops[i].table, ops[i].table);
		assert_true(g_m.ops[i].key == ops[i].key);
		assert_int_equal(g_m.ops[i].len, ops[i].len);
	}
	assert_memory_equal(g_m.ops[1].value, "hello", 5);
	assert_null(g_m.ops[0].value);
	free(b.p);
}

static void test_replies_roundtrip(void **state)
{
	(void)state;
	struct dxl_cproto_buf b = {0};
	struct dxl_cproto_op res[3] = {
		{.status = 0, .value = "abc", .len = 3},
		{.status = DXL_E_NOENT, .value = "ignored", .len = 7},
		{.status = DXL_CPROTO_OP_NOT_DONE},
	};
	assert_int_equal(dxl_cproto_encode_txn_reply(&b, 9, DXL_E_NOENT, "no such key", 77,
						     123456, 2, true, res, 3), 0);
	assert_int_equal(decode(&b), 0);
	assert_int_equal(g_m.kind, DXL_CPROTO_TXN_REPLY);
	assert_int_equal(g_m.req_id, 9);
	assert_int_equal(g_m.status, DXL_E_NOENT);
	assert_int_equal(g_m.msg_len, 11);
	assert_memory_equal(g_m.msg, "no such key", 11);
	assert_int_equal(g_m.txn_id, 77);
	assert_int_equal(g_m.commit_ts, 123456);
	assert_int_equal(g_m.attempts, 2);
	assert_true(g_m.maybe);
	assert_int_equal(g_m.nops, 3);
	assert_int_equal(g_m.ops[0].len, 3);
	assert_memory_equal(g_m.ops[0].value, "abc", 3);
	assert_int_equal(g_m.ops[1].status, DXL_E_NOENT);
	assert_int_equal(g_m.ops[1].len, 0); /* a failed op carries no value */
	assert_int_equal(g_m.ops[2].status, DXL_CPROTO_OP_NOT_DONE);

	b.len = 0;
	assert_int_equal(dxl_cproto_encode_pong(&b, 5, 3, 17), 0);
	assert_int_equal(decode(&b), 0);
	assert_int_equal(g_m.kind, DXL_CPROTO_PONG);
	assert_int_equal(g_m.coord_id, 3);
	assert_int_equal(g_m.epoch, 17);

	b.len = 0;
	assert_int_equal(dxl_cproto_encode_stats_reply(&b, 6, "a=1\nb=2\n"), 0);
	assert_int_equal(decode(&b), 0);
	assert_int_equal(g_m.kind, DXL_CPROTO_STATS_REPLY);
	assert_int_equal(g_m.text_len, 8);
	assert_memory_equal(g_m.text, "a=1\nb=2\n", 8);

	b.len = 0;
	assert_int_equal(dxl_cproto_encode_error(&b, 8, DXL_E_PROTO, "bad"), 0);
	assert_int_equal(decode(&b), 0);
	assert_int_equal(g_m.kind, DXL_CPROTO_ERROR);
	assert_int_equal(g_m.status, DXL_E_PROTO);
	assert_int_equal(g_m.req_id, 8);

	b.len = 0;
	assert_int_equal(dxl_cproto_encode_simple(&b, DXL_CPROTO_PING, 10), 0);
	assert_int_equal(b.len, 16);
	assert_int_equal(decode(&b), 0);
	assert_int_equal(g_m.kind, DXL_CPROTO_PING);
	assert_int_equal(g_m.req_id, 10);
	free(b.p);
}

/* a valid one-op PUT frame, to be broken */
static void put_frame(struct dxl_cproto_buf *b, uint32_t len)
{
	static uint8_t v[DXL_ENGINE_MAX_VALUE + 8];
	struct dxl_cproto_op op = {.op = DXL_CPROTO_OP_PUT, .table = 1, .key = 2, .value = v,
				   .len = len};
	b->len = 0;
	assert_int_equal(dxl_cproto_encode_txn(b, 99, 0, &op, 1), 0);
}

static void test_malformed(void **state)
{
	(void)state;
	struct dxl_cproto_buf b = {0};

	put_frame(&b, 4);
	b.p[7] = 0x45; /* magic */
	assert_int_equal(decode(&b), DXL_E_PROTO);
	assert_non_null(strstr(g_why, "bad magic"));
	assert_int_equal(g_m.req_id, 0); /* not trusted before the magic */

	put_frame(&b, 4);
	b.p[5] = 2; /* version */
	assert_int_equal(decode(&b), DXL_E_VERSION);

	put_frame(&b, 4);
	b.p[4] = 0x09; /* kind */
	assert_int_equal(decode(&b), DXL_E_PROTO);
	assert_non_null(strstr(g_why, "unknown frame kind"));

	/* short body: the value is cut (len field adjusted: boundary intact) */
	put_frame(&b, 4);
	b.len -= 2;
	dxl_cproto_st32(b.p, (uint32_t)b.len - 4);
	assert_int_equal(decode(&b), DXL_E_PROTO);
	assert_non_null(strstr(g_why, "short TXN frame"));
	assert_int_equal(g_m.req_id, 99); /* the error reply can name it */

	/* trailing bytes */
	put_frame(&b, 4);
	dxl_cproto_put8(&b, 0);
	dxl_cproto_st32(b.p, (uint32_t)b.len - 4);
	assert_int_equal(decode(&b), DXL_E_PROTO);
	assert_non_null(strstr(g_why, "after the last field"));

	/* a len field that disagrees with the size given */
	put_frame(&b, 4);
	assert_int_equal(dxl_cproto_decode(b.p, b.len - 1, &g_m, g_why, sizeof(g_why)),
			 DXL_E_PROTO);

	/* reserved bytes */
	put_frame(&b, 4);
	b.p[8 + 14] = 1;
	assert_int_equal(decode(&b), DXL_E_PROTO);
	put_frame(&b, 4);
	b.p[8 + 16 + 2] = 1;
	assert_int_equal(decode(&b), DXL_E_PROTO);

	/* opcode */
	put_frame(&b, 4);
	b.p[8 + 16] = 5;
	assert_int_equal(decode(&b), DXL_E_PROTO);
	assert_non_null(strstr(g_why, "unknown opcode 5"));

	/* a value on a get */
	put_frame(&b, 4);
	b.p[8 + 16] = DXL_CPROTO_OP_GET;
	assert_int_equal(decode(&b), DXL_E_PROTO);
	assert_non_null(strstr(g_why, "carries a value"));

	/* the largest value passes, one more byte is DXL_E_TOOBIG */
	put_frame(&b, DXL_ENGINE_MAX_VALUE);
	assert_int_equal(decode(&b), 0);
	put_frame(&b, DXL_ENGINE_MAX_VALUE + 1);
	assert_int_equal(decode(&b), DXL_E_TOOBIG);

	/* op counts: 0, and one over the limit */
	struct dxl_cproto_op ops[DXL_TXN_MAX_OPS + 1];
	for (unsigned i = 0; i <= DXL_TXN_MAX_OPS; i++)
		ops[i] = (struct dxl_cproto_op){.op = DXL_CPROTO_OP_GET, .table = 1, .key = i};
	b.len = 0;
	assert_int_equal(dxl_cproto_encode_txn(&b, 1, 0, ops, 0), 0);
	assert_int_equal(decode(&b), DXL_E_PROTO);
	b.len = 0;
	assert_int_equal(dxl_cproto_encode_txn(&b, 1, 0, ops, DXL_TXN_MAX_OPS), 0);
	assert_int_equal(decode(&b), 0);
	b.len = 0;
	assert_int_equal(dxl_cproto_encode_txn(&b, 1, 0, ops, DXL_TXN_MAX_OPS + 1), 0);
	assert_int_equal(decode(&b), DXL_E_PROTO);
	assert_non_null(strstr(g_why, "65 operations"));

	/* a request id is needed by PING */
	uint8_t ping[12];
	dxl_cproto_st32(ping, 8);
	dxl_cproto_st32(ping + 4, DXL_CPROTO_MAGIC | DXL_CPROTO_VERSION << 8 | DXL_CPROTO_PING);
	dxl_cproto_st32(ping + 8, 0);
	assert_int_equal(decode_exact(ping, 12), DXL_E_PROTO);
	/* no type word at all */
	dxl_cproto_st32(ping, 2);
	assert_int_equal(decode_exact(ping, 6), DXL_E_PROTO);
	assert_int_equal(decode_exact(ping, 2), DXL_E_PROTO);
	free(b.p);
}

static void test_frame_len(void **state)
{
	(void)state;
	uint8_t h[4] = {0};
	size_t total = 0;
	assert_int_equal(dxl_cproto_frame_len(h, 3, &total), 0);
	dxl_cproto_st32(h, DXL_CPROTO_MAX_FRAME);
	assert_int_equal(dxl_cproto_frame_len(h, 4, &total), 1);
	assert_int_equal(total, DXL_CPROTO_MAX_FRAME + 4);
	dxl_cproto_st32(h, DXL_CPROTO_MAX_FRAME + 1);
	assert_int_equal(dxl_cproto_frame_len(h, 4, &total), -1);
	dxl_cproto_st32(h, UINT32_MAX);
	assert_int_equal(dxl_cproto_frame_len(h, 4, &total), -1);
	/* the largest request and reply fit */
	assert_true(DXL_CPROTO_MAX_TXN - 4 <= DXL_CPROTO_MAX_FRAME);
	assert_true(DXL_CPROTO_MAX_TXN_REPLY - 4 <= DXL_CPROTO_MAX_FRAME);
}

/* every truncation (len fixed up) and every single-byte change of valid
 * frames decodes or fails cleanly, within the frame */
static void test_mutations(void **state)
{
	(void)state;
	struct dxl_cproto_buf b[3] = {{0}};
	struct dxl_cproto_op ops[3] = {
		{.op = DXL_CPROTO_OP_GET, .table = 1, .key = 42},
		{.op = DXL_CPROTO_OP_PUT, .table = 1, .key = 43, .value = "hello!", .len = 6},
		{.op = DXL_CPROTO_OP_DELETE, .table = 2, .key = 1},
	};
	struct dxl_cproto_op res[3] = {{.status = 0, .value = "xyz", .len = 3},
				       {.status = 0}, {.status = 0}};
	assert_int_equal(dxl_cproto_encode_txn(&b[0], 1, 0, ops, 3), 0);
	assert_int_equal(dxl_cproto_encode_txn_reply(&b[1], 1, 0, "m", 1, 2, 3, false, res, 3), 0);
	assert_int_equal(dxl_cproto_encode_stats_reply(&b[2], 1, "k=v\n"), 0);
	uint32_t ok = 0, bad = 0;
	for (int k = 0; k < 3; k++) {
		uint8_t *f = malloc(b[k].len);
		assert_non_null(f);
		for (size_t cut = 4; cut < b[k].len; cut++) {
			memcpy(f, b[k].p, cut);
			dxl_cproto_st32(f, (uint32_t)cut - 4);
			int r = decode_exact(f, cut);
			assert_true(r == DXL_E_PROTO || r == DXL_E_VERSION || r == DXL_E_TOOBIG);
			bad++;
		}
		for (size_t at = 4; at < b[k].len; at++)
			for (int bit = 0; bit < 8; bit++) {
				memcpy(f, b[k].p, b[k].len);
				f[at] ^= (uint8_t)(1u << bit);
				int r = decode_exact(f, b[k].len);
				assert_true(r == 0 || r == DXL_E_PROTO || r == DXL_E_VERSION ||
					    r == DXL_E_TOOBIG);
				if (r)
					assert_true(g_why[0] != 0);
				r ? bad++ : ok++;
			}
		free(f);
		free(b[k].p);
	}
	assert_true(bad > 0 && ok > 0); /* e.g. a flipped key still decodes */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_txn_roundtrip),
		cmocka_unit_test(test_replies_roundtrip),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_frame_len),
		cmocka_unit_test(test_mutations),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
