/* test_tail.c -- the tailer: merged, exactly-once delivery below the watermarks */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/fabric.h"
#include "dxl/log.h"

/* one replica served from this process (its NIC thread does the serving),
 * two writers on rings 0 and 1, and a tailer, each on its own ctx */
struct fx {
	char dir[64], path[128];
	struct dxl_fabric *f;
	struct dxl_region *reg;
	struct dxl_logstore *ls;
	struct dxl_mr *mr;
	struct dxl_ctx *c[4];
	struct dxl_log_target t[2];
	struct dxl_appender *w[2];
};

static const struct dxl_region_id ID = {.cluster = "t", .node_id = 1,
					.kind = DXL_REGION_LOG};

static struct fx *fx_new(uint64_t ring_size)
{
	alarm(120);
	struct fx *x = calloc(1, sizeof(*x));
	snprintf(x->dir, sizeof(x->dir), "/tmp/dxl-test-tail-XXXXXX");
	assert_non_null(mkdtemp(x->dir));
	snprintf(x->path, sizeof(x->path), "%s/log", x->dir);
	uint64_t bytes = DXL_ALIGN_UP(dxl_logstore_bytes(2, ring_size), 4096ull);
	assert_int_equal(dxl_region_create(x->path, bytes, DXL_DUR_PROCESS, &ID, &x->reg), 0);
	assert_int_equal(dxl_logstore_format(x->reg, 0, 2, ring_size), 0);
	assert_int_equal(dxl_logstore_open(x->reg, &x->ls), 0);
	assert_int_equal(dxl_fabric_new(NULL, &x->f), 0);
	assert_int_equal(dxl_mr_reg(x->f, dxl_region_data(x->reg),
				    dxl_region_data_size(x->reg),
				    DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE |
					    DXL_MR_REMOTE_ATOMIC | DXL_MR_PERSISTENT,
				    &x->mr), 0);
	for (uint32_t i = 0; i < 4; i++)
		assert_int_equal(dxl_ctx_new(x->f, i, &x->c[i]), 0);
	for (uint32_t i = 0; i < 2; i++)
		assert_int_equal(dxl_log_target_init(&x->t[i], x->ls, x->mr,
						     dxl_fabric_addr(x->f), 0, i), 0);
	struct dxl_appender_cfg cfg;
	dxl_appender_cfg_init(&cfg);
	cfg.max_inflight = 4;
	for (uint32_t i = 0; i < 2; i++) {
		cfg.writer_id = i;
		assert_int_equal(dxl_appender_new(x->c[1 + i], &cfg, &x->t[i], 1, &x->w[i]), 0);
	}
	return x;
}

static void fx_free(struct fx *x)
{
	for (int i = 0; i < 2; i++)
		dxl_appender_delete(&x->w[i]);
	dxl_fabric_delete(&x->f);
	dxl_logstore_close(&x->ls);
	dxl_region_close(&x->reg);
	unlink(x->path);
	rmdir(x->dir);
	free(x);
	alarm(0);
}

static void put(struct fx *x, int w, uint64_t ts, uint32_t len)
{
	static uint8_t p[16384];
	memset(p, (int)(ts & 0xff), len);
	memcpy(p, &ts, 8);
	struct dxl_rec r = {.txn_id = ts, .commit_ts = ts, .payload = p,
			    .payload_len = len};
	struct dxl_append_result res;
	assert_int_equal(dxl_appender_append_sync(x->w[w], &r, NULL, &res), 0);
}

static void heartbeat(struct fx *x, int w, uint64_t ts)
{
	assert_int_equal(dxl_appender_heartbeat(x->w[w], ts), 0);
	struct dxl_append_result res;
	while (dxl_appender_inflight(x->w[w])) {
		assert_int_equal(dxl_appender_poll(x->w[w], &res, 1), 0);
		dxl_appender_wait(x->w[w], 10);
	}
}

struct got {
	uint32_t n;
	uint64_t ts[4096];
	uint32_t writer[4096];
};

static int collect(uint32_t ring, const struct dxl_rec *rec, void *arg)
{
	struct got *g = arg;
	assert_int_equal(ring, rec->writer);
	uint64_t ts;
	memcpy(&ts, rec->payload, 8);
	assert_int_equal(ts, rec->commit_ts); /* the right bytes */
	g->ts[g->n] = rec->commit_ts;
	g->writer[g->n++] = rec->writer;
	return 0;
}

static void test_merged_exactly_once_below_watermarks(void **state)
{
	struct fx *x = fx_new(1 << 20);
	struct dxl_tail_cfg tc = {0};
	struct dxl_tailer *t;
	assert_int_equal(dxl_tailer_new(x->c[3], &tc, x->t, 2, &t), 0);
	struct got g = {0};
	uint64_t cur = 99;
	/* nobody has written: nothing is promised */
	assert_int_equal(dxl_tailer_poll(t, collect, &g, &cur), 0);
	assert_int_equal(cur, 0);
	/* writer 0: 10, 30, 50; writer 1: 20, 30, 40 */
	put(x, 0, 10, 100);
	put(x, 1, 20, 100);
	put(x, 0, 30, 100);
	put(x, 1, 30, 100);
	put(x, 1, 40, 100);
	put(x, 0, 50, 100);
	/* each writer's last append is not confirmed yet: the watermarks are
	 * writer 0: 50 (its own last-add-confirmed when it posted 50 is 50),
	 * writer 1: 40; resolved = 40, so 10..30 go out */
	assert_true(dxl_tailer_poll(t, collect, &g, &cur) >= 0);
	assert_true(cur <= 40);
	for (uint32_t i = 1; i < g.n; i++)
		assert_true(g.ts[i - 1] < g.ts[i] ||
			    (g.ts[i - 1] == g.ts[i] && g.writer[i - 1] < g.writer[i]));
	/* heartbeats confirm everything up to 100 */
	heartbeat(x, 0, 100);
	heartbeat(x, 1, 100);
	assert_true(dxl_tailer_poll(t, collect, &g, &cur) >= 0);
	assert_int_equal(cur, 100);
	const uint64_t want_ts[] = {10, 20, 30, 30, 40, 50};
	const uint32_t want_w[] = {0, 1, 0, 1, 1, 0};
	assert_int_equal(g.n, 6);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(g.ts[i], want_ts[i]);
		assert_int_equal(g.writer[i], want_w[i]);
	}
	/* nothing twice */
	assert_int_equal(dxl_tailer_poll(t, collect, &g, &cur), 0);
	assert_int_equal(g.n, 6);
	dxl_tailer_delete(&t);

	/* a new tailer from cursor 30 gets 30 (both), 40, 50 */
	tc.from_ts = 30;
	assert_int_equal(dxl_tailer_new(x->c[3], &tc, x->t, 2, &t), 0);
	struct got g2 = {0};
	assert_int_equal(dxl_tailer_poll(t, collect, &g2, &cur), 4);
	assert_int_equal(g2.ts[0], 30);
	assert_int_equal(g2.ts[3], 50);
	assert_int_equal(cur, 100);
	dxl_tailer_delete(&t);
	fx_free(x);
}

static void test_laps_big_records_and_retention(void **state)
{
	struct fx *x = fx_new(65536);
	struct dxl_tail_cfg tc = {.window = 4096, .live_mask = 0x1, .live_given = 1};
	struct dxl_tailer *t;
	assert_int_equal(dxl_tailer_new(x->c[3], &tc, x->t, 2, &t), 0);
	struct got g = {0};
	uint64_t cur, ts = 0;
	/* several laps of a 64 KiB ring, records up to 10 KiB (bigger than the
	 * 4 KiB window); the replica reclaims what the tailer has passed */
	for (int round = 0; round < 40; round++) {
		for (int k = 0; k < 5; k++) {
			ts++;
			put(x, 0, ts, (uint32_t)(ts % 7 == 0 ? 10000 : 200 + (ts * 37) % 900));
		}
		heartbeat(x, 0, ts + 1);
		int guard = 0;
		while (dxl_tailer_cursor(t) < ts + 1) {
			int n = dxl_tailer_poll(t, collect, &g, &cur);
			assert_true(n >= 0);
			assert_true(++guard < 100);
		}
		/* reclaim everything delivered */
		assert_true(dxl_ring_advance_head(x->ls, 0) >= 0);
	}
	assert_int_equal(g.n, ts);
	for (uint32_t i = 0; i < g.n; i++)
		assert_int_equal(g.ts[i], i + 1);
	dxl_tailer_delete(&t);

	/* a tailer whose cursor is older than what the ring retains */
	tc.from_ts = 1;
	assert_int_equal(dxl_tailer_new(x->c[3], &tc, x->t, 2, &t), 0);
	assert_int_equal(dxl_tailer_poll(t, collect, &g, &cur), DXL_E_STALE);
	assert_non_null(strstr(dxl_errmsg(), "older than"));
	dxl_tailer_delete(&t);
	/* "earliest" (cursor 0) starts at what is retained, without error */
	tc.from_ts = 0;
	assert_int_equal(dxl_tailer_new(x->c[3], &tc, x->t, 2, &t), 0);
	struct got g3 = {0};
	assert_int_equal(dxl_tailer_poll(t, collect, &g3, &cur), 0); /* all reclaimed */
	put(x, 0, ts + 5, 100);
	heartbeat(x, 0, ts + 10);
	assert_int_equal(dxl_tailer_poll(t, collect, &g3, &cur), 1);
	assert_int_equal(g3.ts[0], ts + 5);
	dxl_tailer_delete(&t);
	fx_free(x);
}

/* a writer that stopped (crashed): its confirmed records are delivered, what
 * it appended after its last watermark is not, and it holds nobody back */
static void test_dead_writer_does_not_block(void **state)
{
	struct fx *x = fx_new(1 << 20);
	put(x, 1, 15, 100);
	put(x, 1, 25, 100); /* watermark 25 written with it: 15 confirmed, 25 not */
	put(x, 0, 10, 100);
	put(x, 0, 30, 100);
	heartbeat(x, 0, 50);
	struct dxl_tail_cfg tc = {.live_mask = 0x1, .live_given = 1}; /* ring 1's writer is gone */
	struct dxl_tailer *t;
	assert_int_equal(dxl_tailer_new(x->c[3], &tc, x->t, 2, &t), 0);
	struct got g = {0};
	uint64_t cur;
	assert_int_equal(dxl_tailer_poll(t, collect, &g, &cur), 3);
	assert_int_equal(g.ts[0], 10);
	assert_int_equal(g.ts[1], 15);
	assert_int_equal(g.ts[2], 30);
	assert_int_equal(cur, 50);
	dxl_tailer_delete(&t);
	/* with the owner words instead (both rings owned), ring 1's watermark
	 * (25) bounds everything */
	tc = (struct dxl_tail_cfg){0};
	assert_int_equal(dxl_tailer_new(x->c[3], &tc, x->t, 2, &t), 0);
	struct got g2 = {0};
	assert_int_equal(dxl_tailer_poll(t, collect, &g2, &cur), 2);
	assert_int_equal(cur, 25);
	dxl_tailer_delete(&t);
	/* nobody live at all: each ring up to its own watermark */
	tc = (struct dxl_tail_cfg){.live_given = 1};
	assert_int_equal(dxl_tailer_new(x->c[3], &tc, x->t, 2, &t), 0);
	struct got g3 = {0};
	assert_int_equal(dxl_tailer_poll(t, collect, &g3, &cur), 3);
	assert_int_equal(cur, 50);
	dxl_tailer_delete(&t);
	fx_free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_merged_exactly_once_below_watermarks),
		cmocka_unit_test(test_laps_big_records_and_retention),
		cmocka_unit_test(test_dead_writer_does_not_block),
	};
	return cmocka_run_group_tests_name("tail", tests, NULL, NULL);
}
