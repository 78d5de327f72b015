/* test_persist.c -- the log persister: acknowledgements wait for the replica's
 * CPU where the flush READ persists nothing (verbs + msync, docs/log.md)
 *
 * The replicas and the writer use the provider the environment names
 * (DXL_TEST_PROVIDER ..., tests/lib/fabric_fixture.h). On tcp the replica is
 * asked to run a persister (its flush READs would not need one); in the
 * Soft-RoCE guest (tests/rdma/dxl.list) an msync replica starts its own,
 * as dxl_shard_register decides.
 *
 *  - the request and confirmation lines: codec, torn requests, one pass of
 *    the persister over a local log (what it serves, what it skips);
 *  - ordering rule "persisted before acknowledged": with the persister
 *    paused an append is NOT acknowledged (the flush READ came back), once
 *    resumed it is; pipelined appends and heartbeats; a persister that
 *    stops confirming fails its target after persist_timeout_ms;
 *  - on disk: DXL_TEST_DISK_DIR names a folder on a disk file system that
 *    supports O_DIRECT (the guest mounts ext4 on a loop device there).
 *    Appends acknowledged by an msync replica are read back with O_DIRECT
 *    (the disk, not the page cache) while the replica still runs. With the
 *    verbs provider and no persister (the old code) the disk does not have
 *    them: the NIC's pages are pinned and not dirty, msync writes nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/fabric.h"
#include "dxl/log.h"
#include "dxl/recovery.h"
#include "log/log_internal.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/log_replica.h"

#define RING (256 * 1024)

/* ---- the lines ------------------------------------------------------------ */

static void test_request_codec(void **state)
{
	uint8_t a[DXL_RING_PREQ_SIZE], b[DXL_RING_PREQ_SIZE], m[DXL_RING_PREQ_SIZE];
	struct dxl_persist_req qa = {.id = 7, .from = 4096, .to = 8192};
	struct dxl_persist_req qb = {.id = 8, .from = 8192, .to = 12288};
	struct dxl_persist_req out;
	dxl_ring_preq_encode(&qa, a);
	dxl_ring_preq_encode(&qb, b);
	assert_int_equal(dxl_ring_preq_decode(a, &out), 0);
	assert_true(out.id == 7 && out.from == 4096 && out.to == 8192);
	/* every mix of the two requests' words (a torn WRITE) is refused */
	int mixes = 0;
	for (int mask = 1; mask < 15; mask++) {
		for (int w = 0; w < 4; w++)
			memcpy(m + 8 * w, (mask >> w & 1 ? b : a) + 8 * w, 8);
		if (!memcmp(m, a, sizeof(m)) || !memcmp(m, b, sizeof(m)))
			continue;
		assert_int_equal(dxl_ring_preq_decode(m, &out), -1);
		mixes++;
	}
	assert_int_equal(mixes, 14);
	memset(m, 0, sizeof(m)); /* never written */
	assert_int_equal(dxl_ring_preq_decode(m, &out), -1);
	/* the confirmation line */
	uint8_t line[DXL_RING_PLINE_SIZE] = {0};
	uint64_t done = 99;
	assert_int_equal(dxl_ring_pdone_decode(line, &done), 0);
	assert_true(done == 0);
	/* which combinations need a persister */
	assert_true(dxl_persist_needed(DXL_DUR_MSYNC, DXL_FABRIC_VERBS));
	assert_false(dxl_persist_needed(DXL_DUR_MSYNC, DXL_FABRIC_TCP));
	assert_false(dxl_persist_needed(DXL_DUR_PMEM, DXL_FABRIC_VERBS));
	assert_false(dxl_persist_needed(DXL_DUR_PROCESS, DXL_FABRIC_VERBS));
}

/* what the persister made durable while serving one request, and whether
 * its confirmation was already visible then (ordering rule: persist, then
 * confirm) */
struct seen {
	struct dxl_logstore *ls;
	uint64_t serving;  /* the request id being served */
	uint64_t early;    /* persists after the confirmation was published */
	uint64_t buf_bytes, ctl_bytes, calls;
};

static void hook(uint32_t ring, const void *addr, size_t len, void *arg)
{
	struct seen *s = arg;
	const uint8_t *d = dxl_region_data(dxl_logstore_region(s->ls));
	const uint8_t *ctl = d + dxl_logstore_ctl_off(s->ls, ring);
	uint64_t done;
	dxl_ring_pdone_decode(ctl + DXL_RING_PDONE_OFF, &done);
	if (done >= s->serving)
		s->early++;
	if ((const uint8_t *)addr == ctl)
		s->ctl_bytes += len;
	else
		s->buf_bytes += len;
	s->calls++;
}

/* a failed test_step_local must not leave its hook to the replica
 * processes the next tests fork */
static int no_hook(void **state)
{
	dxl_persist_set_test_hook(NULL, NULL);
	return 0;
}

/* one pass over a local log: what is served, what is skipped */
static void test_step_local(void **state)
{
	char dir[] = "/tmp/dxl-test-persist-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[256];
	snprintf(path, sizeof(path), "%s/log", dir);
	struct dxl_region_id id = {.cluster = "t", .node_id = 1,
				   .kind = DXL_REGION_LOG};
	struct dxl_region *r;
	assert_int_equal(dxl_region_create(path, dxl_logstore_bytes(2, 8192),
					   DXL_DUR_MSYNC, &id, &r), 0);
	assert_int_equal(dxl_logstore_format(r, 0, 2, 8192), 0);
	struct dxl_logstore *ls;
	assert_int_equal(dxl_logstore_open(r, &ls), 0);
	uint8_t *ctl1 = (uint8_t *)dxl_region_data(r) + dxl_logstore_ctl_off(ls, 1);
	uint64_t done;
	dxl_logstore_persister_mark(ls, 1);
	assert_int_equal(dxl_ring_pdone_decode(ctl1 + DXL_RING_PDONE_OFF, &done), 1);
	assert_true(done == 0);

	uint64_t last[2] = {0, 0};
	struct dxl_persist_stats st = {0};
	struct seen seen = {.ls = ls};
	dxl_persist_set_test_hook(hook, &seen);
	assert_int_equal(dxl_logstore_persist_step(ls, last, &st), 0); /* nothing asked */
	assert_true(seen.calls == 0);
	/* ring 1: a request across the ring's end */
	struct dxl_persist_req q = {.id = 5, .from = 8192 + 4096 + 64, .to = 8192 * 2 + 128};
	dxl_ring_preq_encode(&q, ctl1 + DXL_RING_PREQ_OFF);
	seen.serving = 5;
	assert_int_equal(dxl_logstore_persist_step(ls, last, &st), 1);
	/* both pieces and the control block, all before the confirmation */
	print_message("  request 5: %llu persists (%llu ring bytes, %llu control block), "
		      "%llu after the confirmation\n",
		      (unsigned long long)seen.calls, (unsigned long long)seen.buf_bytes,
		      (unsigned long long)seen.ctl_bytes, (unsigned long long)seen.early);
	assert_true(seen.calls == 3 && seen.early == 0);
	assert_true(seen.buf_bytes == q.to - q.from && seen.ctl_bytes == DXL_RING_CTL_SIZE);
	assert_int_equal(dxl_ring_pdone_decode(ctl1 + DXL_RING_PDONE_OFF, &done), 1);
	assert_true(done == 5 && last[1] == 5 && last[0] == 0);
	assert_true(st.requests == 1 && st.bytes == q.to - q.from);
	/* served once */
	assert_int_equal(dxl_logstore_persist_step(ls, last, &st), 0);
	/* a torn request: skipped, counted, not confirmed */
	q.id = 6;
	dxl_ring_preq_encode(&q, ctl1 + DXL_RING_PREQ_OFF);
	ctl1[DXL_RING_PREQ_OFF + 16] ^= 1;
	assert_int_equal(dxl_logstore_persist_step(ls, last, &st), 0);
	assert_true(st.torn == 1);
	assert_int_equal(dxl_ring_pdone_decode(ctl1 + DXL_RING_PDONE_OFF, &done), 1);
	assert_true(done == 5);
	/* an old id (a previous writer's) is not served again */
	q.id = 4;
	dxl_ring_preq_encode(&q, ctl1 + DXL_RING_PREQ_OFF);
	assert_int_equal(dxl_logstore_persist_step(ls, last, &st), 0);
	/* more than a lap (an opening writer's): the whole buffer */
	q = (struct dxl_persist_req){.id = 9, .from = 100, .to = 100 + 8192 + 64};
	dxl_ring_preq_encode(&q, ctl1 + DXL_RING_PREQ_OFF);
	seen.serving = 9;
	assert_int_equal(dxl_logstore_persist_step(ls, last, &st), 1);
	assert_true(st.bytes == (8192 * 2 + 128 - (8192 + 4096 + 64)) + 8192);
	assert_true(seen.early == 0);
	/* the line was rewritten lower (a state transfer, a restart): a new
	 * writer's ids start above it, below what was served before; they
	 * must be served (a remembered id would stall that writer), and a
	 * cleared mark comes back */
	uint8_t *pd = ctl1 + DXL_RING_PDONE_OFF;
	memset(pd, 0, DXL_RING_PLINE_SIZE);
	q = (struct dxl_persist_req){.id = 4, .from = 0, .to = 64};
	dxl_ring_preq_encode(&q, ctl1 + DXL_RING_PREQ_OFF);
	seen.serving = 4;
	assert_int_equal(dxl_logstore_persist_step(ls, last, &st), 1);
	assert_int_equal(dxl_ring_pdone_decode(pd, &done), 1);
	assert_true(done == 4 && last[1] == 4);
	assert_true(seen.early == 0);
	dxl_persist_set_test_hook(NULL, NULL);
	/* unmarked: a writer will not wait */
	dxl_logstore_persister_mark(ls, 0);
	assert_int_equal(dxl_ring_pdone_decode(ctl1 + DXL_RING_PDONE_OFF, &done), 0);
	dxl_logstore_close(&ls);
	dxl_region_close(&r);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

/* ---- with replica processes ------------------------------------------------- */

struct fx {
	char dir[256];
	int nrep;
	struct dxl_test_replica rep[2];
	struct dxl_fabric *f;
	struct dxl_ctx *c;
};

static void fx_free(struct fx *x)
{
	for (int i = 0; i < x->nrep; i++)
		dxl_test_replica_stop(&x->rep[i]);
	if (x->f)
		dxl_fabric_delete(&x->f);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", x->dir);
	if (system(cmd))
		print_message("could not remove %s\n", x->dir);
	free(x);
	dxlt_watchdog_disarm();
}

/* nrep replicas under base (a new temporary folder in it): replica 0 msync
 * with a persister (its own on verbs, one asked for on tcp), replica 1 (if
 * any) process durability without one. NULL: skipped (no device). */
static struct fx *fx_new(const char *base, int nrep, uint32_t apply_ms)
{
	dxlt_watchdog_arm(0, "test_persist");
	struct fx *x = calloc(1, sizeof(*x));
	x->nrep = nrep;
	snprintf(x->dir, sizeof(x->dir), "%s/dxl-test-persist-XXXXXX", base);
	assert_non_null(mkdtemp(x->dir));
	for (int i = 0; i < nrep; i++) {
		char d[300];
		snprintf(d, sizeof(d), "%s/r%d", x->dir, i);
		struct dxl_test_replica_cfg cfg = {.node_id = (uint32_t)i + 1,
						   .nrings = 2, .ring_size = RING,
						   .apply_ms = apply_ms, .msync = i == 0,
						   /* verbs: the shard's own decision */
						   .persister = i == 0 &&
								dxlt_test_provider() ==
									DXL_FABRIC_TCP};
		int ret = dxl_test_replica_start(&x->rep[i], d, &cfg);
		if (dxl_test_nodev_skip(ret)) {
			fx_free(x);
			return NULL;
		}
		if (ret)
			fail_msg("replica %d: %s", i, dxl_errmsg());
	}
	struct dxl_fabric_cfg cfg;
	dxlt_fabric_cfg_from_env(&cfg);
	assert_int_equal(dxl_fabric_new(&cfg, &x->f), 0);
	assert_int_equal(dxl_ctx_new(x->f, 0, &x->c), 0);
	return x;
}

static void fill(uint8_t *p, uint32_t len, uint64_t n)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(n * 151 + i * 7);
}

static uint32_t len_of(uint64_t n)
{
	return 16 + (uint32_t)((n * 389) % 3000);
}

static uint32_t persisters_of(struct dxl_appender *a)
{
	struct dxl_appender_persist_stats ps;
	dxl_appender_persist_stats(a, &ps);
	return ps.targets;
}

static struct dxl_appender *open_appender(struct fx *x, uint32_t timeout_ms)
{
	struct dxl_log_target t[2];
	for (int i = 0; i < x->nrep; i++)
		t[i] = x->rep[i].target[0];
	struct dxl_appender_cfg ac;
	dxl_appender_cfg_init(&ac);
	ac.writer_id = 3;
	ac.epoch = 1;
	ac.persist_timeout_ms = timeout_ms;
	struct dxl_appender *a = NULL;
	if (dxl_appender_new(x->c, &ac, t, (unsigned)x->nrep, &a))
		fail_msg("appender: %s", dxl_errmsg());
	return a;
}

static int post(struct dxl_appender *a, uint64_t n)
{
	uint8_t payload[4096];
	struct dxl_rec r = {.txn_id = n, .commit_ts = 1000 + n, .payload = payload,
			    .payload_len = len_of(n)};
	fill(payload, r.payload_len, n);
	return dxl_appender_append(a, &r, NULL, NULL);
}

/* poll until one result or ms pass: 1 (in *res) or 0 */
static int result_within(struct dxl_appender *a, struct dxl_append_result *res,
			 int ms)
{
	uint64_t end = dxl_now_ms() + (uint64_t)ms;
	do {
		int n = dxl_appender_poll(a, res, 1);
		assert_true(n >= 0);
		if (n == 1)
			return 1;
		dxl_appender_wait(a, 10);
	} while (dxl_now_ms() < end);
	return 0;
}

static void test_ack_waits_for_persister(void **state)
{
	struct fx *x = fx_new("/tmp", 2, 5);
	if (!x)
		skip();
	struct dxl_appender *a = open_appender(x, 10000);
	struct dxl_append_result res;
	/* replica 0 told the writer to wait for its persister, replica 1 not */
	assert_int_equal(persisters_of(a), 1u);

	/* the ordering rule: paused, the flush READs come back, yet no ack */
	assert_int_equal(dxl_test_replica_persister(&x->rep[0], 1), 0);
	assert_int_equal(post(a, 1), 0);
	assert_int_equal(result_within(a, &res, 400), 0);
	struct dxl_appender_persist_stats ps;
	dxl_appender_persist_stats(a, &ps);
	print_message("  paused: no ack after 400 ms; %llu waited, %llu re-reads\n",
		      (unsigned long long)ps.waited, (unsigned long long)ps.rereads);
	assert_true(ps.waited >= 1 && ps.rereads >= 1);
	/* resumed: acknowledged by both, nothing failed */
	assert_int_equal(dxl_test_replica_persister(&x->rep[0], 0), 0);
	assert_int_equal(result_within(a, &res, dxlt_wait_ms()), 1);
	assert_int_equal(res.status, 0);
	assert_int_equal(res.acked, 3u);
	assert_int_equal(res.failed, 0u);

	/* pipelined appends with heartbeats between them: all acknowledged */
	uint64_t next = 2, got = 1, hb = 0, hb_at = 0;
	const uint64_t last = 400;
	while (got < last) {
		while (next <= last) {
			if (next % 50 == 0 && hb_at != next) {
				/* an idle writer's watermark, between appends */
				int ret = dxl_appender_heartbeat(a, 1000 + next - 1);
				if (ret == DXL_E_AGAIN)
					break;
				assert_int_equal(ret, 0);
				hb++;
				hb_at = next;
			}
			int ret = post(a, next);
			if (ret == DXL_E_AGAIN)
				break;
			assert_int_equal(ret, 0);
			next++;
		}
		int n = dxl_appender_poll(a, &res, 1);
		assert_true(n >= 0);
		if (!n) {
			dxl_appender_wait(a, 100);
			continue;
		}
		assert_int_equal(res.status, 0);
		assert_int_equal(res.acked, 3u);
		got++;
	}
	struct dxl_persist_stats st;
	assert_int_equal(dxl_test_replica_persist_stats(&x->rep[0], &st), 0);
	dxl_appender_persist_stats(a, &ps);
	print_message("  %llu appends + %llu heartbeats: %llu requests sent, %llu served "
		      "(%llu bytes), %llu waited, %llu re-reads\n",
		      (unsigned long long)last, (unsigned long long)hb,
		      (unsigned long long)ps.requests,
		      (unsigned long long)st.requests, (unsigned long long)st.bytes,
		      (unsigned long long)ps.waited, (unsigned long long)ps.rereads);
	assert_true(hb == 8);
	assert_true(ps.requests == 1 + last + hb);
	assert_true(st.requests >= 2 && st.requests <= ps.requests);
	dxl_appender_delete(&a);
	fx_free(x);
}

static void test_silent_persister_fails_target(void **state)
{
	struct fx *x = fx_new("/tmp", 2, 5);
	if (!x)
		skip();
	struct dxl_appender *a = open_appender(x, 600);
	struct dxl_append_result res;
	assert_int_equal(persisters_of(a), 1u);
	assert_int_equal(post(a, 1), 0);
	assert_int_equal(result_within(a, &res, dxlt_wait_ms()), 1);
	assert_int_equal(res.status, 0);
	assert_int_equal(dxl_test_replica_persister(&x->rep[0], 1), 0);
	uint64_t t0 = dxl_now_ms();
	assert_int_equal(post(a, 2), 0);
	assert_int_equal(result_within(a, &res, dxlt_wait_ms()), 1);
	print_message("  silent persister: %s after %llu ms (timeout 600), acked %#x failed %#x\n",
		      dxl_errname(res.status), (unsigned long long)(dxl_now_ms() - t0),
		      res.acked, res.failed);
	/* not acknowledged: replica 0 failed, replica 1 has it */
	assert_int_equal(res.status, DXL_E_UNREACHABLE);
	assert_int_equal(res.failed, 1u);
	assert_int_equal(res.acked, 2u);
	assert_true(dxl_now_ms() - t0 >= 600);
	assert_int_equal(dxl_appender_failed_targets(a), 1u);
	/* a new writer on it waits at open, and gives up */
	dxl_appender_delete(&a);
	struct dxl_log_target t = x->rep[0].target[1];
	struct dxl_appender_cfg ac;
	dxl_appender_cfg_init(&ac);
	ac.writer_id = 4;
	ac.persist_timeout_ms = 300;
	assert_int_equal(dxl_appender_new(x->c, &ac, &t, 1, &a), DXL_E_UNREACHABLE);
	print_message("  %s\n", dxl_errmsg());
	assert_non_null(strstr(dxl_errmsg(), "persister confirmed nothing"));
	fx_free(x);
}

/* the ring bytes of ring 0 of a replica's log, read from the DISK */
static uint8_t *read_direct(const struct dxl_test_replica *r, uint8_t **ctl)
{
	char path[400];
	snprintf(path, sizeof(path), "%s/shard-0.log", r->dir);
	int fd = open(path, O_RDONLY | O_DIRECT);
	if (fd < 0)
		fail_msg("open(%s, O_DIRECT): %s", path, strerror(errno));
	size_t len = DXL_REGION_HDR_SIZE + DXL_LOG_HDR_SIZE + DXL_RING_CTL_SIZE + RING;
	uint8_t *b = NULL;
	assert_int_equal(posix_memalign((void **)&b, 4096, len), 0);
	ssize_t n = pread(fd, b, len, 0);
	close(fd);
	if (n != (ssize_t)len)
		fail_msg("pread O_DIRECT: %zd of %zu", n, len);
	*ctl = b + DXL_REGION_HDR_SIZE + DXL_LOG_HDR_SIZE;
	return b;
}

static void test_acked_is_on_disk(void **state)
{
	const char *disk = getenv("DXL_TEST_DISK_DIR");
	if (!disk || !*disk) {
		print_message("SKIPPED: DXL_TEST_DISK_DIR unset (a folder on a disk file "
			      "system with O_DIRECT: the Soft-RoCE guest sets it)\n");
		skip();
	}
	struct fx *x = fx_new(disk, 1, 0);
	if (!x)
		skip();
	struct dxl_appender *a = open_appender(x, 10000);
	struct dxl_append_result res;
	/* the kernel's writeback has run (as it does after dirty_expire on a
	 * replica that has run a while): every page of the log is clean.
	 * Registration dirtied them all; a NIC's writes do not. */
	char path[400];
	snprintf(path, sizeof(path), "%s/shard-0.log", x->rep[0].dir);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fsync(fd), 0);
	close(fd);
	const uint64_t n = 120;
	uint64_t wmark = 0;
	for (uint64_t i = 1; i <= n; i++) {
		assert_int_equal(post(a, i), 0);
		assert_int_equal(result_within(a, &res, dxlt_wait_ms()), 1);
		assert_int_equal(res.status, 0);
		wmark = 1000 + i; /* this append wrote its own timestamp */
	}
	/* the replica is alive: its pages are still registered (pinned);
	 * its head never moved (apply_ms 0) */
	uint8_t *ctl, *b = read_direct(&x->rep[0], &ctl);
	struct dxl_ring_head h;
	assert_int_equal(dxl_ring_head_decode(ctl, &h), 0);
	struct dxl_ring_iter it;
	dxl_ring_iter_init_buf(&it, ctl + DXL_RING_CTL_SIZE, RING, h.pos, h.seq);
	struct dxl_rec rec;
	uint64_t seen = 0, want = 1;
	while (dxl_ring_iter_next(&it, &rec, NULL)) {
		uint8_t p[4096];
		fill(p, rec.payload_len, rec.txn_id);
		assert_int_equal(rec.txn_id, want);
		assert_int_equal(rec.payload_len, len_of(rec.txn_id));
		assert_memory_equal(rec.payload, p, rec.payload_len);
		want++;
		seen++;
	}
	uint64_t disk_wmark = dxl_ring_wmark_decode(ctl + DXL_RING_WMARK_OFF);
	print_message("  on disk (O_DIRECT): %llu of %llu acknowledged records, "
		      "watermark %llu (want %llu)\n",
		      (unsigned long long)seen, (unsigned long long)n,
		      (unsigned long long)disk_wmark, (unsigned long long)wmark);
	/* every acknowledged record is on the disk, and the last append's
	 * watermark */
	assert_true(seen == n);
	assert_true(disk_wmark == wmark);
	/* (where the provider needs one: its own persister) */
	assert_int_equal(persisters_of(a), 1u);
	free(b);
	dxl_appender_delete(&a);
	fx_free(x);
}

/* a state transfer copies the ring, not the lines of the persister: the
 * copy keeps its own mark and ids */
static void test_pull_keeps_own_lines(void **state)
{
	struct fx *x = fx_new("/tmp", 1, 0);
	if (!x)
		skip();
	struct dxl_appender *a = open_appender(x, 10000);
	struct dxl_append_result res;
	for (uint64_t i = 1; i <= 3; i++) {
		assert_int_equal(post(a, i), 0);
		assert_int_equal(result_within(a, &res, dxlt_wait_ms()), 1);
		assert_int_equal(res.status, 0);
	}
	dxl_appender_delete(&a);
	/* a local copy without a persister, its lines its own */
	char path[400];
	snprintf(path, sizeof(path), "%s/local.log", x->dir);
	struct dxl_region_id id = {.cluster = "t", .node_id = 9, .kind = DXL_REGION_LOG};
	struct dxl_region *r;
	struct dxl_logstore *ls;
	assert_int_equal(dxl_region_create(path, dxl_logstore_bytes(2, RING),
					   DXL_DUR_PROCESS, &id, &r), 0);
	assert_int_equal(dxl_logstore_format(r, 0, 2, RING), 0);
	assert_int_equal(dxl_logstore_open(r, &ls), 0);
	uint8_t *ctl = (uint8_t *)dxl_region_data(r) + dxl_logstore_ctl_off(ls, 0);
	struct dxl_persist_req mine = {.id = 77, .from = 1, .to = 2}, q;
	dxl_ring_preq_encode(&mine, ctl + DXL_RING_PREQ_OFF);
	struct dxl_qp *qp;
	assert_int_equal(dxl_qp_connect(x->c, x->rep[0].target[0].addr,
					x->rep[0].target[0].remote_ctx, &qp), 0);
	struct dxl_pull_stats st;
	assert_int_equal(dxl_xfer_pull(ls, 0, qp, &x->rep[0].target[0], &st), 0);
	uint64_t done;
	int on = dxl_ring_pdone_decode(ctl + DXL_RING_PDONE_OFF, &done);
	assert_int_equal(dxl_ring_preq_decode(ctl + DXL_RING_PREQ_OFF, &q), 0);
	print_message("  pulled %u records; the copy's lines: mark %s, confirmed %llu, request %llu\n",
		      st.records, on ? "ON" : "off", (unsigned long long)done,
		      (unsigned long long)q.id);
	assert_int_equal(st.records, 3);
	assert_int_equal(on, 0);
	assert_true(done == 0 && q.id == 77);
	dxl_qp_delete(&qp);
	dxl_logstore_close(&ls);
	dxl_region_close(&r);
	fx_free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request_codec),
		cmocka_unit_test_teardown(test_step_local, no_hook),
		cmocka_unit_test(test_ack_waits_for_persister),
		cmocka_unit_test(test_silent_persister_fails_target),
		cmocka_unit_test(test_acked_is_on_disk),
		cmocka_unit_test(test_pull_keeps_own_lines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
