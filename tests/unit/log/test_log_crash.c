/* test_log_crash.c -- seeded crash schedules against the replicated log
 *
 * Each schedule (one seed) starts three replica processes and a writer
 * process that appends a stream of records (pipelined, H9) and reports every
 * acknowledged append to the test through a pipe. At random moments the test
 * kills the writer (SIGKILL), kills some replicas (SIGKILL) and power-fails
 * the others (the tcp fabric's model: every 64-byte line written remotely
 * and not yet flushed by a READ on its QP is reverted, each with p = 1/2).
 * Then it opens every replica's files and checks:
 *   - every acknowledged append is present, intact and in order on every
 *     replica (an acknowledgement means: persistent on all of them);
 *   - whatever the scan returns is a contiguous prefix 1..M of the stream,
 *     each record byte-for-byte what the writer sent: no torn or corrupt
 *     record ever comes back, acknowledged or not.
 * The same schedules with the flush READ disabled (DXL_PWRITE_NOFLUSH) and
 * every un-flushed line lost must find lost acknowledged appends: the
 * check can fail.
 *
 * DXL_CRASH_SEEDS (default 200) sets the number of schedules; `make
 * test-long` runs thousands. DXL_CRASH_SEED=N runs only schedule N.
 *
 * The schedules need the tcp provider's power-failure model: with another
 * DXL_TEST_PROVIDER (verbs in the Soft-RoCE guest) every test is skipped
 * with a printed reason.
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
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/fabric.h"
#include "dxl/log.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/log_replica.h"

#define NREP 3
#define MAX_RECS 400

static uint64_t mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t rec_len(uint64_t seed, uint64_t txn)
{
	uint64_t s = seed * 1000003 + txn;
	return 1 + (uint32_t)(mix(&s) % 1800);
}

static void fill(uint8_t *p, uint32_t len, uint64_t seed, uint64_t txn)
{
	uint64_t s = seed ^ (txn << 20);
	for (uint32_t i = 0; i < len; i += 8) {
		uint64_t v = mix(&s);
		memcpy(p + i, &v, DXL_MIN(8u, len - i));
	}
}

/* the writer process: append n records, report each acknowledged txn */
static void writer_main(const struct dxl_log_target *t, uint64_t seed,
			uint32_t n, enum dxl_pwrite_mode mode, int wfd)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct dxl_fabric_cfg fc;
	dxlt_fabric_cfg_from_env(&fc); /* the replicas' provider (tcp) */
	fc.timeout_ms = 500;
	struct dxl_fabric *f;
	struct dxl_ctx *c;
	struct dxl_appender *a;
	struct dxl_appender_cfg cfg;
	dxl_appender_cfg_init(&cfg);
	cfg.mode = mode;
	cfg.max_inflight = 8;
	cfg.full_wait_ms = 300;
	if (dxl_fabric_new(&fc, &f) || dxl_ctx_new(f, 0, &c) ||
	    dxl_appender_new(c, &cfg, t, NREP, &a))
		_exit(2);
	uint64_t ready = 0; /* tells the test the stream starts now */
	if (write(wfd, &ready, sizeof(ready)) != sizeof(ready))
		_exit(3);
	static uint8_t payload[2048];
	uint64_t next = 1;
	struct dxl_append_result res[8];
	while (next <= n || dxl_appender_inflight(a)) {
		if (next <= n) {
			struct dxl_rec r = {.txn_id = next, .commit_ts = next,
					    .payload = payload,
					    .payload_len = rec_len(seed, next)};
			fill(payload, r.payload_len, seed, next);
			int ret = dxl_appender_append(a, &r, NULL, NULL);
			if (ret == 0)
				next++;
			else if (ret != DXL_E_AGAIN)
				break; /* every replica gone, ring full: stop */
		}
		int k = dxl_appender_poll(a, res, 8);
		for (int i = 0; i < k; i++) {
			if (res[i].status != 0)
				_exit(0); /* a replica is gone: the stream ends */
			uint64_t txn = res[i].token + 1; /* tokens count from 0 */
			if (write(wfd, &txn, sizeof(txn)) != sizeof(txn))
				_exit(3);
		}
		if (k == 0 && next > n)
			dxl_appender_wait(a, 5);
	}
	_exit(0);
}

struct verify {
	uint64_t seed;
	uint64_t next; /* next txn expected */
	int bad;
};

static int verify_rec(const struct dxl_rec *rec, uint64_t pos, void *arg)
{
	struct verify *v = arg;
	static uint8_t want[2048];
	uint32_t len = rec_len(v->seed, v->next);
	fill(want, len, v->seed, v->next);
	if (rec->txn_id != v->next || rec->payload_len != len ||
	    memcmp(rec->payload, want, len) != 0 || rec->commit_ts != v->next) {
		print_message("seed %llu: record at %llu is txn %llu (len %u), expected txn %llu (len %u)\n",
			      (unsigned long long)v->seed, (unsigned long long)pos,
			      (unsigned long long)rec->txn_id, rec->payload_len,
			      (unsigned long long)v->next, len);
		v->bad = 1;
		return 1;
	}
	v->next++;
	return 0;
}

/*
 * One schedule. Returns the number of acknowledged appends that a replica
 * lost (0 when the log is correct); fails the test on corruption.
 */
/* totals over the schedules of a test, to show they exercise something */
static uint64_t total_acked, total_unacked_kept, schedules_with_acks,
	total_wmark;

static int run_schedule(uint64_t seed, enum dxl_pwrite_mode mode,
			enum dxl_pf_policy pf, const char *base)
{
	uint64_t rs = seed * 7919 + 17;
	char dir[256];
	snprintf(dir, sizeof(dir), "%s/s%llu", base, (unsigned long long)seed);
	struct dxl_test_replica rep[NREP];
	for (int i = 0; i < NREP; i++) {
		char d[300];
		snprintf(d, sizeof(d), "%s-r%d", dir, i);
		struct dxl_test_replica_cfg cfg = {.node_id = (uint32_t)i + 1,
						   .nrings = 1,
						   .ring_size = 1 << 20,
						   .pf_policy = pf,
						   .pf_seed = mix(&rs)};
		if (dxl_test_replica_start(&rep[i], d, &cfg))
			fail_msg("seed %llu: replica %d: %s", (unsigned long long)seed,
				 i, dxl_errmsg());
	}
	struct dxl_log_target t[NREP];
	for (int i = 0; i < NREP; i++)
		t[i] = rep[i].target[0];

	uint32_t n = 20 + (uint32_t)(mix(&rs) % (MAX_RECS - 20));
	int p[2];
	assert_int_equal(pipe(p), 0);
	fflush(NULL);
	pid_t w = fork();
	if (w == 0) {
		close(p[0]);
		writer_main(t, seed, n, mode, p[1]);
	}
	close(p[1]);
	uint64_t txn = 1;
	if (read(p[0], &txn, sizeof(txn)) != sizeof(txn) || txn != 0)
		fail_msg("seed %llu: the writer did not start", (unsigned long long)seed);

	/* the crash: after a random delay, kill the writer (or not), then take
	 * down every replica: each is killed or power-failed, in random order,
	 * with random gaps */
	usleep((useconds_t)(mix(&rs) % 20000));
	int kill_writer_first = (int)(mix(&rs) % 2);
	if (kill_writer_first)
		kill(w, SIGKILL);
	int order[NREP] = {0, 1, 2};
	for (int i = NREP - 1; i > 0; i--) {
		int j = (int)(mix(&rs) % (uint64_t)(i + 1));
		int tmp = order[i];
		order[i] = order[j];
		order[j] = tmp;
	}
	for (int k = 0; k < NREP; k++) {
		int i = order[k];
		int how = (int)(mix(&rs) % 4); /* 3 of 4: power failure */
		dxl_test_replica_signal(&rep[i], how == 0 ? SIGKILL : SIGUSR2);
		if (mix(&rs) % 2)
			usleep((useconds_t)(mix(&rs) % 3000));
	}
	kill(w, SIGKILL);
	int st;
	while (waitpid(w, &st, 0) < 0 && errno == EINTR)
		;

	/* what the writer saw acknowledged (in order: results come in order) */
	uint64_t acked = 0;
	while (read(p[0], &txn, sizeof(txn)) == sizeof(txn)) {
		assert_int_equal(txn, acked + 1);
		acked = txn;
	}
	close(p[0]);

	int lost = 0;
	total_acked += acked;
	schedules_with_acks += acked > 0;
	for (int i = 0; i < NREP; i++) {
		struct dxl_region *reg;
		struct dxl_logstore *ls;
		if (dxl_test_replica_open_log(&rep[i], &reg, &ls))
			fail_msg("seed %llu: replica %d: %s", (unsigned long long)seed,
				 i, dxl_errmsg());
		struct verify v = {.seed = seed, .next = 1};
		int got = dxl_ring_scan(ls, 0, verify_rec, &v, NULL, NULL);
		if (got < 0 || v.bad)
			fail_msg("seed %llu: replica %d returned a corrupt or out-of-order record",
				 (unsigned long long)seed, i);
		uint64_t have = v.next - 1; /* contiguous prefix 1..have */
		/* the watermark (last-add-confirmed) never claims more than was
		 * acknowledged: every record below it was acked, so it is on
		 * every replica (checked below through `acked`) */
		uint64_t wm = dxl_logstore_watermark(ls, 0);
		if (mode == DXL_PWRITE_H9 && wm > acked + 1)
			fail_msg("seed %llu: replica %d watermark %llu, but only %llu appends were acknowledged",
				 (unsigned long long)seed, i, (unsigned long long)wm,
				 (unsigned long long)acked);
		total_wmark += wm ? wm - 1 : 0;
		if (have < acked) {
			if (mode == DXL_PWRITE_H9)
				print_message("seed %llu: replica %d has %llu records, %llu were acknowledged\n",
					      (unsigned long long)seed, i,
					      (unsigned long long)have,
					      (unsigned long long)acked);
			lost += (int)(acked - have);
		} else {
			total_unacked_kept += have - acked;
		}
		dxl_logstore_close(&ls);
		dxl_region_close(&reg);
	}
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'-r0 '%s'-r1 '%s'-r2", dir, dir, dir);
	assert_int_equal(system(cmd), 0);
	return lost;
}

static char base[64];

static int setup(void **state)
{
	snprintf(base, sizeof(base), "/tmp/dxl-test-crash-XXXXXX");
	assert_non_null(mkdtemp(base));
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	return system(cmd);
}

static unsigned nseeds(void)
{
	const char *e = getenv("DXL_CRASH_SEEDS");
	return e && atoi(e) > 0 ? (unsigned)atoi(e) : 200;
}

/* the schedules power-fail replicas: only the tcp provider models that */
static void skip_unless_tcp(void)
{
	if (!dxl_test_tcp_only("the crash schedules",
			       "the tcp provider's power-failure model"))
		skip();
}

static void test_acknowledged_appends_survive_crashes(void **state)
{
	skip_unless_tcp();
	const char *one = getenv("DXL_CRASH_SEED");
	unsigned first = one ? (unsigned)atoi(one) : 1;
	unsigned last = one ? first : nseeds();
	int lost = 0;
	for (unsigned s = first; s <= last; s++) {
		alarm(60);
		lost += run_schedule(s, DXL_PWRITE_H9, DXL_PF_RANDOM, base);
	}
	alarm(0);
	unsigned runs = last - first + 1;
	print_message("%u crash schedules: %llu appends acknowledged (%llu schedules with some), "
		      "%llu unacknowledged records found intact, %llu records below the "
		      "replicas' watermarks, %d acknowledged lost\n",
		      runs, (unsigned long long)total_acked,
		      (unsigned long long)schedules_with_acks,
		      (unsigned long long)total_unacked_kept,
		      (unsigned long long)total_wmark, lost);
	assert_true(total_wmark > 0); /* the watermark check had something to check */
	assert_int_equal(lost, 0);
	/* the schedules must crash mid-stream, not before or after it */
	assert_true(schedules_with_acks * 2 >= runs);
}

/* the negative: without the flush READ, acknowledged appends are lost */
static void test_without_flush_read_acknowledged_appends_are_lost(void **state)
{
	skip_unless_tcp();
	int lost = 0, schedules = 0;
	for (unsigned s = 1; s <= 20 && lost == 0; s++, schedules++) {
		alarm(60);
		lost += run_schedule(1000000 + s, DXL_PWRITE_NOFLUSH, DXL_PF_ALL, base);
	}
	alarm(0);
	print_message("no-flush mode: %d acknowledged appends lost within %d schedules\n",
		      lost, schedules);
	assert_true(lost > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_acknowledged_appends_survive_crashes),
		cmocka_unit_test(test_without_flush_read_acknowledged_appends_are_lost),
	};
	return cmocka_run_group_tests_name("log crash schedules", tests, setup, teardown);
}
