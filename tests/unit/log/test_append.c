/* test_append.c -- replicated appends to replica processes over the fabric
 *
 * The replicas and the writer use the provider the environment names
 * (DXL_TEST_PROVIDER ..., tests/lib/fabric_fixture.h): tcp on 127.0.0.1 by
 * default, verbs over rxe0 in the Soft-RoCE guest (tests/rdma/dxl.list).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/fabric.h"
#include "dxl/log.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/log_replica.h"

#define NREP 3

struct fx {
	char dir[128];
	struct dxl_test_replica rep[NREP];
	struct dxl_fabric *f;
	struct dxl_ctx *c;
};

static void fx_free(struct fx *x);

/* 0, or DXL_E_NODEV when the provider has no device and the test skips */
static int start_all(struct fx *x, uint64_t ring_size, uint32_t apply_ms)
{
	for (int i = 0; i < NREP; i++) {
		char d[256];
		snprintf(d, sizeof(d), "%s/r%d", x->dir, i);
		struct dxl_test_replica_cfg cfg = {.node_id = (uint32_t)i + 1,
						   .nrings = 2,
						   .ring_size = ring_size,
						   .apply_ms = apply_ms};
		int ret = dxl_test_replica_start(&x->rep[i], d, &cfg);
		if (dxl_test_nodev_skip(ret))
			return ret;
		if (ret)
			fail_msg("replica %d: %s", i, dxl_errmsg());
	}
	return 0;
}

static uint32_t fx_sq_depth; /* 0: the fabric's default */

static struct fx *fx_new(uint64_t ring_size, uint32_t apply_ms)
{
	alarm(120);
	struct fx *x = calloc(1, sizeof(*x));
	snprintf(x->dir, sizeof(x->dir), "/tmp/dxl-test-append-XXXXXX");
	assert_non_null(mkdtemp(x->dir));
	if (start_all(x, ring_size, apply_ms)) {
		fx_free(x);
		skip();
	}
	struct dxl_fabric_cfg cfg;
	dxlt_fabric_cfg_from_env(&cfg);
	cfg.timeout_ms = 500;
	if (fx_sq_depth)
		cfg.sq_depth = fx_sq_depth;
	assert_int_equal(dxl_fabric_new(&cfg, &x->f), 0);
	/* (the replicas run the same provider: a QP connects only to its own) */
	assert_int_equal(dxl_fabric_provider(x->f), dxlt_test_provider());
	assert_int_equal(dxl_ctx_new(x->f, 0, &x->c), 0);
	return x;
}

static void fx_free(struct fx *x)
{
	for (int i = 0; i < NREP; i++)
		dxl_test_replica_stop(&x->rep[i]);
	if (x->f)
		dxl_fabric_delete(&x->f);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", x->dir);
	assert_int_equal(system(cmd), 0);
	free(x);
	alarm(0);
}

static void targets_of(struct fx *x, uint32_t ring, struct dxl_log_target *t)
{
	for (int i = 0; i < NREP; i++)
		t[i] = x->rep[i].target[ring];
}

static void make_payload(uint8_t *p, uint32_t len, uint64_t n)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(n * 131 + i);
}

struct check {
	uint64_t next_txn;
	uint32_t count;
};

static int check_rec(const struct dxl_rec *rec, uint64_t pos, void *arg)
{
	struct check *c = arg;
	assert_int_equal(rec->txn_id, c->next_txn);
	uint8_t want[4096];
	make_payload(want, rec->payload_len, rec->txn_id);
	assert_memory_equal(rec->payload, want, rec->payload_len);
	assert_int_equal(rec->commit_ts, 1000 + rec->txn_id);
	c->next_txn++;
	c->count++;
	return 0;
}

static uint32_t len_of(uint64_t n)
{
	return 1 + (uint32_t)((n * 53) % 1500);
}

/* append records 1..n (pipelined), every result must be acked by all */
static void append_n(struct dxl_appender *a, uint64_t first, uint64_t n,
		     uint32_t want_acked)
{
	uint8_t payload[4096];
	uint64_t next = first, done = first;
	struct dxl_append_result res[16];
	while (done < first + n) {
		while (next < first + n) {
			struct dxl_rec r = {.txn_id = next, .commit_ts = 1000 + next,
					    .payload = payload,
					    .payload_len = len_of(next)};
			make_payload(payload, r.payload_len, next);
			int ret = dxl_appender_append(a, &r, NULL, NULL);
			if (ret == DXL_E_AGAIN)
				break;
			if (ret)
				fail_msg("append %llu: %s", (unsigned long long)next,
					 dxl_errmsg());
			next++;
		}
		int k = dxl_appender_poll(a, res, 16);
		assert_true(k >= 0);
		for (int i = 0; i < k; i++) {
			assert_int_equal(res[i].status, 0);
			assert_int_equal(res[i].acked, want_acked);
			assert_int_equal(res[i].failed, 0);
			done++;
		}
		if (k == 0)
			dxl_appender_wait(a, 10);
	}
}

static void test_three_replicas_pipelined(void **state)
{
	struct fx *x = fx_new(1 << 20, 0);
	struct dxl_log_target t[NREP];
	targets_of(x, 0, t);
	struct dxl_appender_cfg cfg;
	dxl_appender_cfg_init(&cfg);
	cfg.writer_id = 0;
	cfg.epoch = 1;
	struct dxl_appender *a;
	assert_int_equal(dxl_appender_new(x->c, &cfg, t, NREP, &a), 0);
	append_n(a, 1, 300, 0x7);
	/* one synchronous append after the pipelined ones */
	uint8_t p[10];
	make_payload(p, 10, 301);
	struct dxl_rec r = {.txn_id = 301, .commit_ts = 1301, .payload = p,
			    .payload_len = 10};
	struct dxl_append_result res;
	assert_int_equal(dxl_appender_append_sync(a, &r, NULL, &res), 0);
	assert_int_equal(res.acked, 0x7);
	assert_int_equal(res.token, 300);
	dxl_appender_delete(&a);

	/* every replica holds all 301 records, intact, in order */
	for (int i = 0; i < NREP; i++) {
		dxl_test_replica_stop(&x->rep[i]);
		struct dxl_region *reg;
		struct dxl_logstore *ls;
		assert_int_equal(dxl_test_replica_open_log(&x->rep[i], &reg, &ls), 0);
		struct check c = {.next_txn = 1};
		assert_int_equal(dxl_ring_scan(ls, 0, check_rec, &c, NULL, NULL), 301);
		assert_int_equal(c.count, 301);
		assert_int_equal(dxl_ring_scan(ls, 1, NULL, NULL, NULL, NULL), 0);
		dxl_logstore_close(&ls);
		dxl_region_close(&reg);
	}
	fx_free(x);
}

static void test_wrap_backpressure_and_restart(void **state)
{
	/* small rings, the replicas apply every 2 ms: the writer laps the ring
	 * many times, waiting for heads when it catches up */
	struct fx *x = fx_new(32768, 2);
	struct dxl_log_target t[NREP];
	targets_of(x, 1, t);
	struct dxl_appender_cfg cfg;
	dxl_appender_cfg_init(&cfg);
	cfg.writer_id = 1;
	struct dxl_appender *a;
	assert_int_equal(dxl_appender_new(x->c, &cfg, t, NREP, &a), 0);
	append_n(a, 1, 500, 0x7);
	uint64_t pos, seq;
	dxl_appender_tail(a, &pos, &seq);
	assert_true(pos > 5 * 32768);
	dxl_appender_delete(&a);

	/* a restarted writer finds its tail and continues the sequence */
	assert_int_equal(dxl_appender_new(x->c, &cfg, t, NREP, &a), 0);
	uint64_t pos2, seq2;
	dxl_appender_tail(a, &pos2, &seq2);
	assert_int_equal(pos2, pos);
	assert_int_equal(seq2, seq);
	append_n(a, 501, 100, 0x7);
	/* commit timestamps may not go back */
	uint8_t p[8] = {0};
	struct dxl_rec r = {.txn_id = 1, .commit_ts = 5, .payload = p, .payload_len = 8};
	assert_int_equal(dxl_appender_append(a, &r, NULL, NULL), DXL_E_INVAL);
	dxl_appender_delete(&a);

	/* another writer id on the same ring is refused */
	cfg.writer_id = 9;
	assert_int_equal(dxl_appender_new(x->c, &cfg, t, NREP, &a), DXL_E_STALE);
	assert_non_null(strstr(dxl_errmsg(), "owned by writer 1, not 9"));
	fx_free(x);
}

static void test_full_ring_errors_and_limits(void **state)
{
	struct fx *x = fx_new(16384, 0); /* nobody advances the heads */
	struct dxl_log_target t[NREP];
	targets_of(x, 0, t);
	struct dxl_appender_cfg cfg;
	dxl_appender_cfg_init(&cfg);
	cfg.full_wait_ms = 200;
	cfg.max_inflight = 4;
	cfg.max_record = 8192;
	struct dxl_appender *a;
	assert_int_equal(dxl_appender_new(x->c, &cfg, t, NREP, &a), 0);
	static uint8_t big[9000];
	struct dxl_rec r = {.txn_id = 1, .commit_ts = 1, .payload = big,
			    .payload_len = 8200};
	assert_int_equal(dxl_appender_append(a, &r, NULL, NULL), DXL_E_TOOBIG);
	/* an empty record is refused, nothing placed */
	r.payload_len = 0;
	assert_int_equal(dxl_appender_append(a, &r, NULL, NULL), DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "empty record"));
	uint64_t p0;
	dxl_appender_tail(a, &p0, NULL);
	assert_int_equal(p0, 0);
	/* fill the ring: 16384 bytes = 16 records of 1024 */
	r.payload_len = 1024 - 64;
	int ok = 0, ret;
	uint64_t t0 = dxl_now_ms();
	struct dxl_append_result res[4];
	for (;;) {
		ret = dxl_appender_append(a, &r, NULL, NULL);
		if (ret == DXL_E_AGAIN) {
			dxl_appender_poll(a, res, 4);
			continue;
		}
		if (ret)
			break;
		ok++;
		r.txn_id++;
	}
	assert_int_equal(ret, DXL_E_FULL);
	assert_int_equal(ok, 16);
	assert_true(dxl_now_ms() - t0 >= 200); /* it waited, bounded */
	assert_non_null(strstr(dxl_errmsg(), "ring full"));
	uint64_t pos;
	dxl_appender_tail(a, &pos, NULL);
	assert_int_equal(pos, 16384); /* nothing placed by the failed append */
	while (dxl_appender_inflight(a)) {
		int k = dxl_appender_poll(a, res, 4);
		for (int i = 0; i < k; i++)
			assert_int_equal(res[i].status, 0);
		if (!k)
			dxl_appender_wait(a, 10);
	}
	dxl_appender_delete(&a);
	/* bad configurations */
	cfg.max_inflight = 0;
	assert_int_equal(dxl_appender_new(x->c, &cfg, t, NREP, &a), DXL_E_INVAL);
	dxl_appender_cfg_init(&cfg);
	assert_int_equal(dxl_appender_new(x->c, &cfg, t, 0, &a), DXL_E_INVAL);
	fx_free(x);
}

static void test_replica_killed_mid_stream(void **state)
{
	struct fx *x = fx_new(1 << 20, 0);
	struct dxl_log_target t[NREP];
	targets_of(x, 0, t);
	struct dxl_appender *a;
	assert_int_equal(dxl_appender_new(x->c, NULL, t, NREP, &a), 0);
	append_n(a, 1, 50, 0x7);
	dxl_test_replica_signal(&x->rep[1], SIGKILL);
	/* the next appends are not acknowledged: replica 1 lacks them, and
	 * nothing is retried elsewhere; the others still store them */
	uint8_t p[100];
	uint64_t t0 = dxl_now_ms();
	int unacked = 0;
	for (uint64_t n = 51; n <= 60; n++) {
		make_payload(p, len_of(n) > 100 ? 100 : len_of(n), n);
		struct dxl_rec r = {.txn_id = n, .commit_ts = 1000 + n,
				    .payload = p, .payload_len = len_of(n) > 100 ? 100 : len_of(n)};
		struct dxl_append_result res;
		int ret = dxl_appender_append_sync(a, &r, NULL, &res);
		if (ret) {
			assert_true(ret == DXL_E_UNREACHABLE || ret == DXL_E_STATE);
			assert_int_equal(res.failed, 0x2);
			assert_int_equal(res.acked, 0x5);
			unacked++;
		}
	}
	assert_int_equal(unacked, 10);
	assert_true(dxl_now_ms() - t0 < 5000);
	assert_int_equal(dxl_appender_failed_targets(a), 0x2);
	/* the watermark stays at the first unacknowledged append (1051): a
	 * tailer never delivers what was not acknowledged */
	assert_int_equal(dxl_appender_heartbeat(a, 9999), 0);
	while (dxl_appender_inflight(a)) {
		struct dxl_append_result res[2];
		dxl_appender_poll(a, res, 2);
		dxl_appender_wait(a, 10);
	}
	dxl_test_replica_stop(&x->rep[0]);
	struct dxl_region *reg;
	struct dxl_logstore *ls;
	assert_int_equal(dxl_test_replica_open_log(&x->rep[0], &reg, &ls), 0);
	assert_int_equal(dxl_logstore_watermark(ls, 0), 1051);
	dxl_logstore_close(&ls);
	dxl_region_close(&reg);
	dxl_appender_delete(&a);
	fx_free(x);
}

/* a deep pipeline over short send queues: a full queue is waited out, never
 * taken for a dead replica (each append is up to 3 requests per replica) */
static void test_deep_pipeline_short_send_queue(void **state)
{
	fx_sq_depth = 8;
	struct fx *x = fx_new(1 << 20, 1);
	fx_sq_depth = 0;
	struct dxl_log_target t[NREP];
	targets_of(x, 0, t);
	struct dxl_appender_cfg cfg;
	dxl_appender_cfg_init(&cfg);
	cfg.max_inflight = 64;
	struct dxl_appender *a;
	assert_int_equal(dxl_appender_new(x->c, &cfg, t, NREP, &a), 0);
	append_n(a, 1, 400, 0x7);
	assert_int_equal(dxl_appender_failed_targets(a), 0);
	dxl_appender_delete(&a);
	fx_free(x);
}

/* every append promises its commit timestamp; an idle writer's heartbeat
 * moves the promise on; neither may go back */
static void test_watermark_and_heartbeat(void **state)
{
	struct fx *x = fx_new(1 << 20, 0);
	struct dxl_log_target t[NREP];
	targets_of(x, 0, t);
	struct dxl_appender *a;
	assert_int_equal(dxl_appender_new(x->c, NULL, t, NREP, &a), 0);
	append_n(a, 1, 20, 0x7); /* commit timestamps 1001..1020 */
	/* with 16 in flight, appends promised less than their own timestamp */
	assert_int_equal(dxl_appender_heartbeat(a, 5000), 0);
	struct dxl_append_result res[4];
	while (dxl_appender_inflight(a)) {
		/* a heartbeat produces no result */
		assert_int_equal(dxl_appender_poll(a, res, 4), 0);
		dxl_appender_wait(a, 10);
	}
	assert_int_equal(dxl_appender_heartbeat(a, 4000), DXL_E_INVAL);
	uint8_t p[8] = {0};
	struct dxl_rec r = {.txn_id = 21, .commit_ts = 4999, .payload = p, .payload_len = 8};
	assert_int_equal(dxl_appender_append(a, &r, NULL, NULL), DXL_E_INVAL);
	dxl_appender_delete(&a);
	for (int i = 0; i < NREP; i++) {
		dxl_test_replica_stop(&x->rep[i]);
		struct dxl_region *reg;
		struct dxl_logstore *ls;
		assert_int_equal(dxl_test_replica_open_log(&x->rep[i], &reg, &ls), 0);
		assert_int_equal(dxl_logstore_watermark(ls, 0), 5000);
		assert_int_equal(dxl_logstore_watermark(ls, 1), 0); /* nobody's */
		assert_int_equal(dxl_ring_scan(ls, 0, NULL, NULL, NULL, NULL), 20);
		dxl_logstore_close(&ls);
		dxl_region_close(&reg);
	}
	fx_free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_three_replicas_pipelined),
		cmocka_unit_test(test_wrap_backpressure_and_restart),
		cmocka_unit_test(test_full_ring_errors_and_limits),
		cmocka_unit_test(test_replica_killed_mid_stream),
		cmocka_unit_test(test_deep_pipeline_short_send_queue),
		cmocka_unit_test(test_watermark_and_heartbeat),
	};
	return cmocka_run_group_tests_name("replicated append", tests, NULL, NULL);
}
