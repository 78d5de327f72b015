/* test_log_crash.c -- seeded crash schedules against the replicated log
 *
 * A schedule (one seed) runs three replica processes on small rings (16 to
 * 64 KiB: a round laps them several times, with skip records at every wrap)
 * whose heads move under load (every 1-5 ms each replica retires the
 * records below its ring's watermark, as retention does), and several
 * rounds of:
 *   - a writer process (always the same writer id, as a restarted writer
 *     would be) opens an appender with repair, the reference a random
 *     replica, learns where the log ends (dxl_appender_last_ts) and appends
 *     the stream from there (pipelined, H9), reporting every acknowledged
 *     append (and the watermark it wrote) to the test through a pipe;
 *   - at a random moment the power fails: most often on all replicas at
 *     once (a power outage, with the writer still running or killed just
 *     before), else the replicas are killed (SIGKILL) or power-failed one
 *     by one with random gaps. A power failure is the tcp fabric's model
 *     armed by its signal: it strikes within the next steps of the NIC's
 *     work -- between two requests of a chain, or inside a WRITE, placing
 *     any subset of its lines -- and each un-flushed line is lost with
 *     p = 1/2 (docs/fabric-tcp.md);
 *   - the test opens every replica's files and checks:
 *       * every acknowledged append is present and intact on every replica
 *         (or below its head: retired, after being acknowledged);
 *       * what a scan returns is the stream, contiguous from the head, each
 *         record byte-for-byte what its writer sent, in the order it was
 *         written: no torn, corrupt or ghost record (one written by an
 *         earlier round behind a record of a later round) comes back;
 *       * the new writer finds every acknowledged append in the log it
 *         repaired (its last_ts covers them);
 *       * watermarks: no replica's watermark claims a record that is not
 *         on every replica, and each is at least the watermark of the last
 *         acknowledged append (it was flushed before the acknowledgement).
 * Coverage is counted and printed, and the test FAILS below its floors:
 * schedules whose power failures really lost lines, torn records met by the
 * scans, records repaired, ghosts stopped, ring laps, head moves.
 *
 * Negatives (the checks can fail): without the flush READ
 * (DXL_PWRITE_NOFLUSH) acknowledged appends are lost; with the watermark
 * WRITE posted after the flush READ, a failure striking mid-chain leaves a
 * watermark below the one an acknowledged append wrote.
 *
 * DXL_CRASH_SEEDS (default 200) sets the number of schedules, DXL_CRASH_ROUNDS
 * (default 3) the rounds of each; `make test-long` runs thousands.
 * DXL_CRASH_SEED=N runs only schedule N.
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
#include "log/log_internal.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/log_replica.h"

#define NREP 3
#define WRITER_ID 7
#define MAX_ROUNDS 16
/* a record's commit timestamp: the round that wrote it, then its txn */
#define TS(round, txn) (((uint64_t)(round) << 40) | (uint64_t)(txn))
#define TXN_OF(ts) ((ts) & ((1ull << 40) - 1))

static uint64_t mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* a txn's payload length depends on the txn alone: a later round's record
 * of the same txn has the same size (the ghost scenario of issue 11) */
static uint32_t rec_len(uint64_t seed, uint64_t txn)
{
	uint64_t s = seed * 1000003 + txn;
	return 1 + (uint32_t)(mix(&s) % 1800);
}

/* ... and its bytes on the round (epoch) that wrote it */
static void fill(uint8_t *p, uint32_t len, uint64_t seed, uint64_t txn,
		 uint32_t epoch)
{
	uint64_t s = seed ^ (txn << 20) ^ ((uint64_t)epoch << 52);
	for (uint32_t i = 0; i < len; i += 8) {
		uint64_t v = mix(&s);
		memcpy(p + i, &v, DXL_MIN(8u, len - i));
	}
}

/* ---- the writer process ---------------------------------------------------- */

enum { M_READY = 1, M_ACK = 2 };
struct wmsg {
	uint64_t kind, a, b, c;
};

struct wcfg {
	uint64_t seed;
	uint32_t round;    /* records carry epoch round + 1 */
	uint32_t n;        /* appends to try */
	uint32_t inflight;
	enum dxl_pwrite_mode mode;
	bool wm_after_flush;
	struct dxl_log_target t[NREP]; /* t[0]: the reference */
};

static void wsend(int fd, uint64_t kind, uint64_t a, uint64_t b, uint64_t c)
{
	struct wmsg m = {kind, a, b, c};
	if (write(fd, &m, sizeof(m)) != sizeof(m))
		_exit(3);
}

/* report the results of finished appends; the stream ends at a failure */
static void wpoll(struct dxl_appender *a, int wfd, uint64_t *fifo,
		  uint64_t *head)
{
	struct dxl_append_result res[16];
	int k = dxl_appender_poll(a, res, 16);
	if (k < 0)
		_exit(0);
	for (int i = 0; i < k; i++) {
		if (res[i].status != 0)
			_exit(0); /* a replica is gone: the stream ends */
		wsend(wfd, M_ACK, fifo[*head % 256], res[i].wmark, 0);
		(*head)++;
	}
}

static void writer_main(const struct wcfg *w, int wfd)
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
	cfg.writer_id = WRITER_ID;
	cfg.epoch = w->round + 1;
	cfg.mode = w->mode;
	cfg.max_inflight = w->inflight;
	cfg.max_record = 4096;
	cfg.full_wait_ms = 50;
	cfg.repair = true;
	if (dxl_fabric_new(&fc, &f) || dxl_ctx_new(f, 0, &c)) {
		fprintf(stderr, "crash writer (round %u): %s\n", w->round, dxl_errmsg());
		_exit(2);
	}
	/* the reference first; a replica the others ran ahead of by more
	 * than a ring (appends after it failed, never acknowledged) cannot be
	 * caught up by repair (it needs a pull): then another reference */
	uint64_t refused = 0;
	for (;;) {
		struct dxl_log_target t[NREP];
		for (unsigned i = 0; i < NREP; i++)
			t[i] = w->t[(i + refused) % NREP];
		if (dxl_appender_new(c, &cfg, t, NREP, &a) == 0)
			break;
		if (!strstr(dxl_errmsg(), "too far behind") || ++refused == NREP) {
			fprintf(stderr, "crash writer (round %u): %s\n", w->round,
				dxl_errmsg());
			_exit(2);
		}
	}
	if (w->wm_after_flush)
		dxl_appender_test_wmark_after_flush(a, true);
	struct dxl_repair_stats rs;
	dxl_appender_repair_stats(a, &rs);
	uint64_t last = TXN_OF(dxl_appender_last_ts(a));
	wsend(wfd, M_READY, last, rs.records_copied + rs.records_dropped,
	      refused);
	static uint8_t payload[2048];
	uint64_t fifo[256], head = 0, tail = 0; /* txns of appends in flight */
	uint64_t next = last + 1, end = last + w->n;
	while (next <= end || dxl_appender_inflight(a)) {
		if (next <= end) {
			struct dxl_rec r = {.txn_id = next,
					    .commit_ts = TS(w->round, next),
					    .payload = payload,
					    .payload_len = rec_len(w->seed, next)};
			fill(payload, r.payload_len, w->seed, next, w->round + 1);
			int ret = dxl_appender_append(a, &r, NULL, NULL);
			if (ret == 0) {
				fifo[tail++ % 256] = next++;
			} else if (ret == DXL_E_FULL) {
				/* the heads wait for the watermark: report what
				 * finished, then promise nothing below the next
				 * record (a heartbeat), so they can move on */
				while (dxl_appender_inflight(a)) {
					wpoll(a, wfd, fifo, &head);
					dxl_appender_wait(a, 5);
				}
				if (dxl_appender_heartbeat(a, r.commit_ts))
					_exit(0);
			} else if (ret != DXL_E_AGAIN) {
				_exit(0); /* every replica gone: stop */
			}
		}
		wpoll(a, wfd, fifo, &head);
		if (next > end || dxl_appender_inflight(a) >= w->inflight)
			dxl_appender_wait(a, 5);
	}
	_exit(0);
}

/* ---- one schedule ------------------------------------------------------------ */

struct cover {
	uint64_t schedules, rounds, lines_lost_schedules, pf, pf_lost_lines;
	uint64_t pf_inside, pf_between, pf_idle;
	uint64_t acked, repaired, ghosts, torn, stale, laps, head_moves, skips;
	uint64_t wm_checked, ref_refused;
};

/* what went wrong (the negatives expect some) */
struct bad {
	uint64_t acked_lost;  /* acknowledged, missing on a replica */
	uint64_t wm_low;      /* a watermark below an acknowledged append's */
};

struct sched {
	uint64_t seed, rs;
	char dir[256];
	uint64_t ring_size;
	uint32_t apply_ms;
	enum dxl_pwrite_mode mode;
	enum dxl_pf_policy pf;
	bool wm_after_flush;
	uint64_t acked_max; /* highest txn acknowledged in any round */
	uint64_t head_gen[NREP];
	uint64_t max_end;
	bool lost_lines;
};

static char base[64];
static char report[128];
static long report_off;

/* the power failures reported since the last call */
static void read_reports(struct sched *s, struct cover *cv)
{
	FILE *f = fopen(report, "r");
	if (!f)
		return;
	fseek(f, report_off, SEEK_SET);
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lost = 0;
		const char *l = strstr(line, "lost=");
		if (l)
			lost = strtoull(l + 5, NULL, 10);
		cv->pf++;
		cv->pf_lost_lines += lost;
		if (lost)
			s->lost_lines = true;
		cv->pf_inside += strstr(line, "struck=inside") != NULL;
		cv->pf_between += strstr(line, "struck=between") != NULL;
		cv->pf_idle += strstr(line, "struck=idle") != NULL;
	}
	report_off = ftell(f);
	fclose(f);
}

struct view {
	uint64_t have;     /* last txn of the contiguous stream it holds */
	uint64_t wm;
	uint64_t n;        /* data records from its head */
	uint64_t ts[4096]; /* their commit timestamps (the last 4096) */
};

/*
 * Scan replica i's files as a restarted replica would and check the
 * stream; fills v (have, watermark) and the coverage.
 */
static void verify(struct sched *s, struct dxl_test_replica *rep, int i,
		   uint32_t round, struct view *v, struct cover *cv)
{
	struct dxl_region *reg;
	struct dxl_logstore *ls;
	if (dxl_test_replica_open_log(rep, &reg, &ls))
		fail_msg("seed %llu: replica %d: %s", (unsigned long long)s->seed, i,
			 dxl_errmsg());
	struct dxl_ring_head h;
	assert_int_equal(dxl_logstore_head(ls, 0, &h), 0);
	if (h.gen > s->head_gen[i]) {
		cv->head_moves += (h.gen - s->head_gen[i]) / 2;
		s->head_gen[i] = h.gen;
	}
	struct dxl_ring_iter it;
	assert_int_equal(dxl_ring_iter_init(&it, ls, 0), 0);
	uint64_t expect = (h.last_ts ? TXN_OF(h.last_ts) : 0) + 1;
	uint64_t prev_ts = h.last_ts;
	uint32_t prev_epoch = 0;
	struct dxl_rec rec;
	uint64_t at;
	static uint8_t want[2048];
	uint64_t n = 0;
	while (dxl_ring_iter_step(&it, &rec, &at)) {
		if (rec.type == DXL_REC_SKIP) {
			cv->skips++;
			continue;
		}
		uint32_t len = rec_len(s->seed, rec.txn_id);
		bool ok = rec.txn_id == expect && rec.epoch >= 1 &&
			  rec.epoch <= round + 1 && rec.payload_len == len &&
			  rec.commit_ts == TS(rec.epoch - 1, rec.txn_id) &&
			  rec.writer == WRITER_ID;
		if (ok) {
			fill(want, len, s->seed, rec.txn_id, rec.epoch);
			ok = memcmp(rec.payload, want, len) == 0;
		}
		if (!ok)
			fail_msg("seed %llu round %u: replica %d returned a record that is not the stream's: txn %llu epoch %u len %u ts %llx at %llu, expected txn %llu",
				 (unsigned long long)s->seed, round, i,
				 (unsigned long long)rec.txn_id, rec.epoch,
				 rec.payload_len, (unsigned long long)rec.commit_ts,
				 (unsigned long long)at, (unsigned long long)expect);
		if (rec.epoch < prev_epoch || rec.commit_ts <= prev_ts)
			fail_msg("seed %llu round %u: replica %d returned a ghost: txn %llu of round %u (ts %llx) after a record of round %u (ts %llx)",
				 (unsigned long long)s->seed, round, i,
				 (unsigned long long)rec.txn_id, rec.epoch - 1,
				 (unsigned long long)rec.commit_ts, prev_epoch - 1,
				 (unsigned long long)prev_ts);
		prev_epoch = rec.epoch;
		prev_ts = rec.commit_ts;
		v->ts[n++ % 4096] = rec.commit_ts;
		expect++;
	}
	switch (it.end) {
	case DXL_RING_END_TORN:
		cv->torn++;
		break;
	case DXL_RING_END_GHOST:
		cv->ghosts++;
		break;
	case DXL_RING_END_STALE:
		cv->stale++;
		break;
	default:
		break;
	}
	s->max_end = DXL_MAX(s->max_end, it.pos);
	v->have = expect - 1;
	v->n = n;
	v->wm = dxl_logstore_watermark(ls, 0);
	dxl_logstore_close(&ls);
	dxl_region_close(&reg);
}

/* the largest txn replica v holds with a timestamp below wm (0: none);
 * timestamps grow along the stream */
static uint64_t held_below(const struct view *v, uint64_t wm)
{
	const uint64_t n = v->n;
	for (uint64_t k = 0; k < DXL_MIN(n, (uint64_t)4096); k++) {
		uint64_t idx = (n - 1 - k) % 4096;
		if (v->ts[idx] < wm)
			return v->have - k;
	}
	return 0;
}

static void run_round(struct sched *s, uint32_t round, struct cover *cv,
		      struct bad *bad)
{
	struct dxl_test_replica rep[NREP];
	for (int i = 0; i < NREP; i++) {
		char d[300];
		snprintf(d, sizeof(d), "%s-r%d", s->dir, i);
		struct dxl_test_replica_cfg cfg = {.node_id = (uint32_t)i + 1,
						   .nrings = 1,
						   .ring_size = s->ring_size,
						   .apply_ms = s->apply_ms,
						   .apply_below_wmark = true,
						   .pf_policy = s->pf,
						   .pf_seed = mix(&s->rs)};
		if (dxl_test_replica_start(&rep[i], d, &cfg))
			fail_msg("seed %llu: replica %d: %s", (unsigned long long)s->seed,
				 i, dxl_errmsg());
	}
	struct wcfg w = {.seed = s->seed, .round = round, .mode = s->mode,
			 .wm_after_flush = s->wm_after_flush,
			 .n = 40 + (uint32_t)(mix(&s->rs) % 260)};
	/* a third of the rounds after the first append only a few records:
	 * right behind them may lie a record the round before left intact
	 * behind a torn one (a ghost, if the scan took it) */
	if (round && mix(&s->rs) % 3 == 0)
		w.n = 1 + (uint32_t)(mix(&s->rs) % 3);
	static const uint32_t INFL[] = {1, 4, 8, 8};
	w.inflight = INFL[mix(&s->rs) % 4];
	int ref = (int)(mix(&s->rs) % NREP);
	for (int i = 0; i < NREP; i++)
		w.t[i] = rep[(ref + i) % NREP].target[0];

	int p[2];
	assert_int_equal(pipe(p), 0);
	fflush(NULL);
	pid_t wp = fork();
	if (wp == 0) {
		close(p[0]);
		writer_main(&w, p[1]);
	}
	close(p[1]);
	struct wmsg m;
	if (read(p[0], &m, sizeof(m)) != sizeof(m) || m.kind != M_READY)
		fail_msg("seed %llu round %u: the writer did not open (see its stderr)",
			 (unsigned long long)s->seed, round);
	/* the writer's contract: what the repaired log holds is in it */
	uint64_t last = m.a;
	if (last < s->acked_max)
		fail_msg("seed %llu round %u: the repaired log ends at txn %llu, txn %llu was acknowledged",
			 (unsigned long long)s->seed, round, (unsigned long long)last,
			 (unsigned long long)s->acked_max);
	bad->acked_lost += last < s->acked_max ? s->acked_max - last : 0;
	cv->repaired += m.b;
	cv->ref_refused += m.c;

	/* the crash */
	usleep((useconds_t)(mix(&s->rs) % 15000));
	int how = (int)(mix(&s->rs) % 4);
	if (how == 3)
		kill(wp, SIGKILL); /* the writer first, then the outage */
	if (how != 2) { /* a power outage: every replica at once */
		for (int i = 0; i < NREP; i++)
			dxl_test_replica_kill(&rep[i], SIGUSR2);
		for (int i = 0; i < NREP; i++)
			dxl_test_replica_wait(&rep[i]);
	} else { /* one by one, killed or power-failed, random gaps */
		int order[NREP] = {0, 1, 2};
		for (int i = NREP - 1; i > 0; i--) {
			int j = (int)(mix(&s->rs) % (uint64_t)(i + 1));
			int tmp = order[i];
			order[i] = order[j];
			order[j] = tmp;
		}
		for (int k = 0; k < NREP; k++) {
			int sig = mix(&s->rs) % 4 == 0 ? SIGKILL : SIGUSR2;
			dxl_test_replica_signal(&rep[order[k]], sig);
			if (mix(&s->rs) % 2)
				usleep((useconds_t)(mix(&s->rs) % 3000));
		}
	}
	kill(wp, SIGKILL);
	int st;
	while (waitpid(wp, &st, 0) < 0 && errno == EINTR)
		;
	/* what the writer saw acknowledged, in order */
	uint64_t acked = last, wm_floor = 0;
	while (read(p[0], &m, sizeof(m)) == sizeof(m)) {
		assert_int_equal(m.kind, M_ACK);
		assert_int_equal(m.a, acked + 1);
		acked = m.a;
		wm_floor = DXL_MAX(wm_floor, m.b);
	}
	close(p[0]);
	cv->acked += acked - last;
	s->acked_max = DXL_MAX(s->acked_max, acked);
	read_reports(s, cv);

	static struct view v[NREP];
	uint64_t wm_max = 0;
	for (int i = 0; i < NREP; i++) {
		memset(&v[i], 0, sizeof(v[i]));
		verify(s, &rep[i], i, round, &v[i], cv);
		wm_max = DXL_MAX(wm_max, v[i].wm);
	}
	for (int i = 0; i < NREP; i++) {
		/* every acknowledged append is on every replica */
		if (v[i].have < s->acked_max) {
			if (s->mode == DXL_PWRITE_H9 && !s->wm_after_flush)
				print_message("seed %llu round %u: replica %d holds the stream up to txn %llu, txn %llu was acknowledged\n",
					      (unsigned long long)s->seed, round, i,
					      (unsigned long long)v[i].have,
					      (unsigned long long)s->acked_max);
			bad->acked_lost += s->acked_max - v[i].have;
		}
		/* the watermark of the last acknowledged append was flushed
		 * before its acknowledgement */
		if (wm_floor && v[i].wm < wm_floor) {
			if (!s->wm_after_flush)
				print_message("seed %llu round %u: replica %d watermark %llx, an acknowledged append wrote %llx\n",
					      (unsigned long long)s->seed, round, i,
					      (unsigned long long)v[i].wm,
					      (unsigned long long)wm_floor);
			bad->wm_low++;
		}
		cv->wm_checked += wm_floor != 0;
	}
	/* no watermark claims a record that is not on every replica */
	if (s->mode == DXL_PWRITE_H9 && !s->wm_after_flush) {
		for (int j = 0; j < NREP; j++) {
			uint64_t need = held_below(&v[j], wm_max);
			for (int i = 0; i < NREP; i++)
				if (v[i].have < need)
					fail_msg("seed %llu round %u: a watermark %llx promises txn %llu (on replica %d), replica %d holds only up to %llu",
						 (unsigned long long)s->seed, round,
						 (unsigned long long)wm_max,
						 (unsigned long long)need, j, i,
						 (unsigned long long)v[i].have);
		}
	}
	cv->rounds++;
}

static void run_schedule(uint64_t seed, enum dxl_pwrite_mode mode,
			 enum dxl_pf_policy pf, bool wm_after_flush,
			 uint32_t rounds, struct cover *cv, struct bad *bad)
{
	struct sched s = {.seed = seed, .rs = seed * 7919 + 17, .mode = mode,
			  .pf = pf, .wm_after_flush = wm_after_flush};
	snprintf(s.dir, sizeof(s.dir), "%s/s%llu", base, (unsigned long long)seed);
	static const uint64_t SIZES[] = {16384, 32768, 65536};
	s.ring_size = SIZES[mix(&s.rs) % 3];
	s.apply_ms = 1 + (uint32_t)(mix(&s.rs) % 5);
	for (uint32_t r = 0; r < rounds; r++)
		run_round(&s, r, cv, bad);
	cv->schedules++;
	cv->lines_lost_schedules += s.lost_lines;
	cv->laps += s.max_end / s.ring_size;
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'-r0 '%s'-r1 '%s'-r2", s.dir, s.dir,
		 s.dir);
	assert_int_equal(system(cmd), 0);
}

static int setup(void **state)
{
	snprintf(base, sizeof(base), "/tmp/dxl-test-crash-XXXXXX");
	assert_non_null(mkdtemp(base));
	/* the replicas (children) report their power failures here */
	snprintf(report, sizeof(report), "%s/pf-report", base);
	setenv("DXL_FABRIC_PF_REPORT", report, 1);
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	return system(cmd);
}

static unsigned env_u(const char *name, unsigned def)
{
	const char *e = getenv(name);
	return e && atoi(e) > 0 ? (unsigned)atoi(e) : def;
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
	unsigned last = one ? first : env_u("DXL_CRASH_SEEDS", 200);
	unsigned rounds = DXL_MIN(env_u("DXL_CRASH_ROUNDS", 3), (unsigned)MAX_ROUNDS);
	struct cover cv = {0};
	struct bad bad = {0};
	for (unsigned s = first; s <= last; s++) {
		alarm(60);
		run_schedule(s, DXL_PWRITE_H9, DXL_PF_RANDOM, false, rounds, &cv, &bad);
	}
	alarm(0);
	print_message("%llu crash schedules x %u rounds: %llu appends acknowledged, "
		      "%llu acknowledged lost, 0 torn or ghost records delivered\n"
		      "  power failures: %llu (%llu struck inside a WRITE, %llu between "
		      "two requests, %llu idle), %llu un-flushed lines lost; schedules "
		      "that lost lines: %llu (%.0f%%)\n"
		      "  recovery scans ended at %llu torn records, %llu ghosts stopped, "
		      "%llu stale records; %llu records repaired by new writers "
		      "(%llu references too far ahead of a replica: another taken)\n"
		      "  rings: %llu laps, %llu skip records, %llu head moves; "
		      "watermark lower bound checked %llu times\n",
		      (unsigned long long)cv.schedules, rounds,
		      (unsigned long long)cv.acked, (unsigned long long)bad.acked_lost,
		      (unsigned long long)cv.pf, (unsigned long long)cv.pf_inside,
		      (unsigned long long)cv.pf_between, (unsigned long long)cv.pf_idle,
		      (unsigned long long)cv.pf_lost_lines,
		      (unsigned long long)cv.lines_lost_schedules,
		      100.0 * (double)cv.lines_lost_schedules / (double)cv.schedules,
		      (unsigned long long)cv.torn, (unsigned long long)cv.ghosts,
		      (unsigned long long)cv.stale, (unsigned long long)cv.repaired,
		      (unsigned long long)cv.ref_refused,
		      (unsigned long long)cv.laps, (unsigned long long)cv.skips,
		      (unsigned long long)cv.head_moves,
		      (unsigned long long)cv.wm_checked);
	assert_int_equal(bad.acked_lost, 0);
	assert_int_equal(bad.wm_low, 0);
	if (cv.schedules < 100)
		return; /* the floors are statistical: from 100 schedules on */
	/* coverage floors: the schedules must really exercise the protocol */
	assert_true(cv.acked >= cv.schedules * 20);
	assert_true(cv.lines_lost_schedules * 10 >= cv.schedules * 3); /* >= 30% */
	assert_true(cv.torn * 20 >= cv.schedules);       /* >= 1 per 20 */
	assert_true(cv.repaired * 20 >= cv.schedules);   /* >= 1 per 20 */
	assert_true(cv.laps >= cv.schedules);            /* >= 1 lap each */
	assert_true(cv.skips * 4 >= cv.schedules);
	assert_true(cv.ghosts * 40 >= cv.schedules);     /* >= 1 per 40 */
	assert_true(cv.head_moves >= cv.schedules * rounds);
	/* (the others strike idle: the writer was killed first, or stopped at
	 * the first failure it saw; 33-35% measured, the model before issue 11
	 * struck in the traffic in 2%) */
	assert_true((cv.pf_inside + cv.pf_between) * 4 >= cv.pf);
	assert_true(cv.wm_checked >= cv.schedules);
}

/* the negative: without the flush READ, acknowledged appends are lost */
static void test_without_flush_read_acknowledged_appends_are_lost(void **state)
{
	skip_unless_tcp();
	struct cover cv = {0};
	struct bad bad = {0};
	unsigned s;
	for (s = 1; s <= 20 && bad.acked_lost == 0; s++) {
		alarm(60);
		run_schedule(1000000 + s, DXL_PWRITE_NOFLUSH, DXL_PF_ALL, false, 1,
			     &cv, &bad);
	}
	alarm(0);
	print_message("no-flush mode: %llu acknowledged appends lost within %u schedules\n",
		      (unsigned long long)bad.acked_lost, s - 1);
	assert_true(bad.acked_lost > 0);
}

/*
 * The negative of "the watermark WRITE is flushed before the
 * acknowledgement": posted after the flush READ, it is flushed only by the
 * next append's READ, and a power failure striking between the two loses
 * it although its append was acknowledged.
 */
static void test_watermark_after_the_flush_is_lost(void **state)
{
	skip_unless_tcp();
	struct cover cv = {0};
	struct bad bad = {0};
	unsigned s;
	for (s = 1; s <= 40 && bad.wm_low == 0; s++) {
		alarm(60);
		run_schedule(2000000 + s, DXL_PWRITE_H9, DXL_PF_ALL, true, 1, &cv,
			     &bad);
	}
	alarm(0);
	print_message("watermark after the flush READ: %llu replicas with a watermark below an acknowledged append's, within %u schedules\n",
		      (unsigned long long)bad.wm_low, s - 1);
	assert_true(bad.wm_low > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_acknowledged_appends_survive_crashes),
		cmocka_unit_test(test_without_flush_read_acknowledged_appends_are_lost),
		cmocka_unit_test(test_watermark_after_the_flush_is_lost),
	};
	return cmocka_run_group_tests_name("log crash schedules", tests, setup, teardown);
}
