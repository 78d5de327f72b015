/* test_replica_faults.c -- the dxl-replica daemon's fault paths, with real
 * processes and a ZooKeeper server of our own (scripts/zk.sh, so it can be
 * stopped and killed):
 *
 *  - lease loss fences writes: the server is SIGSTOPped; the replica's lease
 *    ends, it deregisters its regions and a writer's appends fail with
 *    DXL_E_ACCESS, no acknowledgement after the session timeout; SIGCONT:
 *    the same session comes back, the regions are registered again (new
 *    rkeys, reg_epoch 2), a writer built from the new descriptors appends,
 *    a tailer delivers everything acknowledged, in order;
 *  - session expiry: the server is SIGKILLed, the daemon paused while the
 *    server restarts on the same data and expires the session (a restarted
 *    server gives every restored session a fresh timeout, so without the
 *    pause the daemon's client would reconnect in time and keep it); the
 *    daemon resumes, opens a new session and registers again;
 *  - retention by size (log.retention_bytes) and by age (log.retention_ms):
 *    the ring's head advances, a tailer whose cursor is older than what is
 *    retained gets DXL_E_STALE, one from the earliest record works.
 *
 * The daemon is build/bin/dxl-replica (next to the test binary: ../bin, or
 * $DXL_BIN_DIR). Every wait is bounded; a SIGALRM watchdog kills the
 * servers and the daemon; daemons die with the test (PR_SET_PDEATHSIG). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <inttypes.h>
#include <libgen.h>
#include <sys/prctl.h>

#include "test_membership_util.h"

#include "dxl/log.h"
#include "dxl/replica.h"
#include "tests/lib/faults.h"
#include "tests/lib/proc.h"

#define RING_SIZE "256K"
#define SLOTS 4
#define PAYLOAD 100

static struct mt_server g_srv;
static bool g_have_srv;
static char g_bin[PATH_MAX];
static char g_tmp[128];
static char g_cluster[64];

/* ---- processes ------------------------------------------------------------ */

/* spawn -- dxl-replica for shard 0 of node `node` on our server
 * (tests/lib/proc.h), extra flags, output appended to logfile (restarts) */
static pid_t spawn(const char *logfile, uint32_t node, const char *dir,
		   const char *const *extra)
{
	struct dxlt_replica r = {.bin = g_bin, .logfile = logfile, .append = true,
				 .node = node, .dir = dir, .zk = g_srv.connect,
				 .cluster = g_cluster, .extra = extra};
	pid_t p = dxlt_replica_spawn(&r);
	if (p < 0)
		fail_msg("spawn: %s", dxl_errmsg());
	mt_child_pid = p; /* the watchdog's target */
	return p;
}

/* wait_exit -- dxlt_wait_exit, and the watchdog forgets the child */
static int wait_exit(pid_t p, int timeout_ms)
{
	int st = dxlt_wait_exit(p, timeout_ms);
	if (mt_child_pid == p)
		mt_child_pid = 0;
	return st;
}

static void kill_all(void)
{
	dxlt_kill_all();
	mt_child_pid = 0;
}

/* wait_log -- the daemon's output contains `what` at least `count` times
 * (within timeout_ms) */
static bool wait_log(const char *logf, const char *what, int count, int timeout_ms)
{
	static char out[65536];
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		dxlt_slurp(logf, out, sizeof(out));
		int c = 0;
		for (const char *p = strstr(out, what); p; p = strstr(p + 1, what))
			c++;
		if (c >= count)
			return true;
		if (dxl_now_ms() > end)
			return false;
		usleep(5000);
	}
}

static void dump_log(const char *logf)
{
	static char out[65536];
	dxlt_slurp(logf, out, sizeof(out));
	print_message("daemon output (%s):\n%s\n", logf, out);
}

/* ---- ZooKeeper ------------------------------------------------------------ */

static struct dxl_zk *zk_open(void)
{
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_srv.connect, g_cluster, &zk), 0);
	return zk;
}

/* ---- writer and tailer ------------------------------------------------------ */

struct writer {
	struct dxl_appender *ap;
	struct dxl_hlc clk;
	uint32_t next;      /* value of the next record */
	uint64_t ts[2048];  /* commit_ts of the record with value v */
};

static int writer_new(struct writer *w, struct dxl_ctx *ctx,
		      const struct dxl_replica_desc *d)
{
	struct dxl_log_target t;
	assert_int_equal(dxl_replica_desc_target(d, 0, 0, &t), 0);
	struct dxl_appender_cfg ac;
	dxl_appender_cfg_init(&ac);
	ac.writer_id = 0;
	w->ap = NULL;
	return dxl_appender_new(ctx, &ac, &t, 1, &w->ap);
}

/* append_one -- append record w->next and wait for its result: 0 when
 * acknowledged (then w->next advances), else the result's status */
static int append_one(struct writer *w)
{
	uint8_t buf[PAYLOAD];
	memset(buf, 0xab, sizeof(buf));
	uint32_t v = w->next;
	memcpy(buf, &v, sizeof(v));
	uint64_t ts = dxl_hlc_now(&w->clk);
	struct dxl_rec r = {.txn_id = v + 1, .commit_ts = ts, .payload = buf,
			    .payload_len = PAYLOAD};
	struct dxl_append_result res;
	memset(&res, 0, sizeof(res));
	int ret = dxl_appender_append_sync(w->ap, &r, NULL, &res);
	if (ret == 0) {
		assert_true(v < 2048);
		w->ts[v] = ts;
		w->next++;
	}
	return ret;
}

static void append_n(struct writer *w, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		int ret = append_one(w);
		if (ret)
			print_message("append %u: %d %s\n", w->next, ret, dxl_errmsg());
		assert_int_equal(ret, 0);
	}
}

/* heartbeat -- a watermark above everything appended, flushed */
static void heartbeat(struct writer *w)
{
	assert_int_equal(dxl_appender_heartbeat(w->ap, dxl_hlc_now(&w->clk)), 0);
	struct dxl_append_result res[4];
	uint64_t end = dxl_now_ms() + 5000;
	while (dxl_appender_inflight(w->ap) && dxl_now_ms() < end) {
		dxl_appender_wait(w->ap, 100);
		dxl_appender_poll(w->ap, res, 4);
	}
	assert_int_equal(dxl_appender_inflight(w->ap), 0);
}

struct got {
	uint32_t first; /* value of the first record delivered */
	uint32_t n;
	uint64_t last_ts;
	int bad;
};

static int on_rec(uint32_t ring, const struct dxl_rec *rec, void *arg)
{
	struct got *g = arg;
	uint32_t v = 0;
	if (rec->payload_len != PAYLOAD || rec->commit_ts < g->last_ts || ring != 0) {
		g->bad++;
	} else {
		memcpy(&v, rec->payload, sizeof(v));
		if (g->n == 0)
			g->first = v;
		if (v != g->first + g->n || rec->txn_id != (uint64_t)v + 1)
			g->bad++;
	}
	g->last_ts = rec->commit_ts;
	g->n++;
	return 0;
}

/* tail -- a tailer on every ring of shard 0 of d from from_ts: polls until
 * `want` records arrived, or nothing more came for 200 ms, or a poll failed
 * (its error in *err, else 0); at most 10 s */
static struct got tail(struct dxl_ctx *ctx, const struct dxl_replica_desc *d,
		       uint64_t from_ts, uint32_t want, int *err)
{
	struct dxl_log_target t[SLOTS];
	const struct dxl_shard_desc *sd = dxl_replica_desc_shard(d, 0);
	assert_non_null(sd);
	assert_int_equal(sd->nrings, SLOTS);
	for (uint32_t i = 0; i < SLOTS; i++)
		assert_int_equal(dxl_replica_desc_target(d, 0, i, &t[i]), 0);
	struct dxl_tail_cfg tc = {.from_ts = from_ts};
	struct dxl_tailer *tl = NULL;
	assert_int_equal(dxl_tailer_new(ctx, &tc, t, SLOTS, &tl), 0);
	struct got g = {0};
	*err = 0;
	uint64_t now = dxl_now_ms(), end = now + 10000, news = now;
	while (g.n < want && now < end && now - news < 200) {
		int n = dxl_tailer_poll(tl, on_rec, &g, NULL);
		if (n < 0) {
			*err = n;
			break;
		}
		now = dxl_now_ms();
		if (n > 0)
			news = now;
		else
			usleep(5000);
	}
	dxl_tailer_delete(&tl);
	return g;
}

/* on_disk -- after the daemon stopped: ring 0 of node's shard 0 (records
 * from the head, the head itself, the end position) */
static int on_disk(const char *dir, uint32_t node, struct dxl_ring_head *h,
		   uint64_t *end_pos)
{
	struct dxl_datadir *dd = NULL;
	assert_int_equal(dxl_datadir_open(dir, g_cluster, node, DXL_DUR_PROCESS, 0, &dd), 0);
	struct dxl_shard_cfg sc = {.node_id = node, .shard = 0,
				   .durability = DXL_DUR_PROCESS};
	snprintf(sc.cluster, sizeof(sc.cluster), "%s", g_cluster);
	struct dxl_shard *sh = NULL;
	assert_int_equal(dxl_shard_open(dir, &sc, NULL, &sh), 0);
	struct dxl_logstore *ls = dxl_shard_logstore(sh);
	assert_int_equal(dxl_logstore_head(ls, 0, h), 0);
	int n = dxl_ring_scan(ls, 0, NULL, NULL, end_pos, NULL);
	dxl_shard_close(&sh);
	dxl_datadir_close(&dd);
	return n;
}

/* ---- fixture -------------------------------------------------------------- */

static int group_setup(void **state)
{
	(void)state;
	assert_int_equal(dxlt_prog_path("dxl-replica", g_bin, sizeof(g_bin)), 0);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-rfault-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	mt_cluster_name(g_cluster, sizeof(g_cluster), "rf");
	if (access(g_bin, X_OK) != 0) {
		fprintf(stderr, "%s not built: tests will skip\n", g_bin);
		return 0;
	}
	mt_alarm(90);
	if (mt_server_start(&g_srv, 1) == 0)
		g_have_srv = true;
	else
		mt_server_stop(&g_srv);
	alarm(0);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	kill_all();
	mt_stop_all_servers();
	char *rm[] = {"/bin/rm", "-rf", g_tmp, NULL};
	mt_run(rm, NULL, 0);
	return 0;
}

/* every test leaves the server running and no daemon behind, even when it
 * fails half-way */
static int test_teardown(void **state)
{
	(void)state;
	alarm(0);
	kill_all();
	if (g_have_srv) {
		int pid = mt_read_pid(&g_srv, 1);
		if (pid > 0)
			kill(pid, SIGCONT);
		else
			mt_server_cmd(&g_srv, "restart", 1);
	}
	return 0;
}

#define NEED_SERVER()                                                        \
	do {                                                                 \
		if (access(g_bin, X_OK) != 0) {                              \
			print_message("SKIPPED: %s not built\n", g_bin);     \
			skip();                                              \
		}                                                            \
		if (!g_have_srv) {                                           \
			print_message("SKIPPED: could not start ZooKeeper "  \
				      "with scripts/zk.sh\n");               \
			skip();                                              \
		}                                                            \
	} while (0)

/* ---- 1. lease loss fences writes -------------------------------------------- */

static void test_lease_loss_fences(void **state)
{
	(void)state;
	NEED_SERVER();
	mt_alarm(60);
	char dir[256], logf[256];
	snprintf(dir, sizeof(dir), "%s/n1", g_tmp);
	snprintf(logf, sizeof(logf), "%s/n1.out", g_tmp);
	struct dxl_zk *zk = zk_open();
	/* keep every record (the count of appends before the lease ends
	 * depends on the machine's speed; retention is test_retention's) */
	const char *keep[] = {"-o", "log.retention_bytes=255K", NULL};
	pid_t p = spawn(logf, 1, dir, keep);
	static struct dxl_replica_desc d1, d2;
	int64_t s1 = 0, s2 = 0;
	int ret = dxlt_replica_desc_wait(zk, 1, 1, 0, 15000, &d1, &s1);
	if (ret)
		dump_log(logf);
	assert_int_equal(ret, 0);
	assert_int_equal(d1.reg_epoch, 1);
	uint32_t T = dxl_zk_session_timeout_ms(zk); /* the daemon asks the same */

	struct dxl_fabric *f = NULL;
	struct dxl_ctx *wc = NULL, *wc2 = NULL, *tc = NULL;
	assert_int_equal(dxl_fabric_new(NULL, &f), 0);
	assert_int_equal(dxl_ctx_new(f, 0, &wc), 0);
	assert_int_equal(dxl_ctx_new(f, 1, &wc2), 0);
	assert_int_equal(dxl_ctx_new(f, 2, &tc), 0);
	static struct writer w;
	memset(&w, 0, sizeof(w));
	dxl_hlc_init(&w.clk);
	assert_int_equal(writer_new(&w, wc, &d1), 0);
	append_n(&w, 50);

	/* stop the server: keep appending until the replica refuses */
	int zpid = mt_read_pid(&g_srv, 1);
	assert_true(zpid > 0);
	assert_int_equal(kill(zpid, SIGSTOP), 0);
	uint64_t t_stop = dxl_now_ms(), t_last_ok = t_stop;
	uint32_t before = w.next;
	for (;;) {
		ret = append_one(&w);
		if (ret)
			break;
		t_last_ok = dxl_now_ms();
		assert_true(t_last_ok - t_stop < 10000);
		usleep(2000);
	}
	uint64_t t_fail = dxl_now_ms();
	print_message("server stopped: %u more appends acknowledged, last at +%" PRIu64
		      " ms, refused at +%" PRIu64 " ms (%s), session timeout %u ms\n",
		      w.next - before, t_last_ok - t_stop, t_fail - t_stop,
		      dxl_errmsg(), T);
	assert_int_equal(ret, DXL_E_ACCESS);
	/* no acknowledgement once the server could have expired the session */
	assert_true(t_last_ok - t_stop < T);
	if (!wait_log(logf, "event=regions_deregistered", 1, 5000))
		dump_log(logf);
	assert_true(wait_log(logf, "reason=\"zookeeper lease not valid\"", 1, 0));
	/* still fenced: another try fails too */
	assert_int_not_equal(append_one(&w), 0);
	uint32_t acked = w.next;

	/* the server comes back: same session, regions registered again */
	assert_int_equal(kill(zpid, SIGCONT), 0);
	ret = dxlt_replica_desc_wait(zk, 1, 2, 0, 15000, &d2, &s2);
	if (ret)
		dump_log(logf);
	assert_int_equal(ret, 0);
	assert_int_equal(d2.reg_epoch, 2);
	assert_true(s2 == s1); /* reconnected, not expired */
	assert_int_not_equal(d2.shards[0].region.rkey, d1.shards[0].region.rkey);
	assert_string_equal(d2.addr, d1.addr);
	/* the old writer stays fenced (old rkey) */
	assert_int_not_equal(append_one(&w), 0);
	assert_int_equal(w.next, acked);
	dxl_appender_delete(&w.ap);

	/* a writer from the new descriptors appends again */
	ret = writer_new(&w, wc2, &d2);
	if (ret)
		print_message("new writer: %s\n", dxl_errmsg());
	assert_int_equal(ret, 0);
	append_n(&w, 50);
	heartbeat(&w);
	int err = 0;
	struct got g = tail(tc, &d2, 0, w.next, &err);
	assert_int_equal(err, 0);
	assert_int_equal(g.bad, 0);
	assert_int_equal(g.first, 0);
	assert_int_equal(g.n, w.next);
	uint32_t total = w.next;
	dxl_appender_delete(&w.ap);
	dxl_fabric_delete(&f);

	/* clean stop; everything acknowledged is in the region file, or was
	 * reclaimed by retention (log.retention_bytes = ring_size/2 by
	 * default): records seq 1..h.seq-1 reclaimed, the rest scanned */
	kill(p, SIGTERM);
	assert_int_equal(wait_exit(p, 10000), 0);
	struct dxl_ring_head h;
	uint64_t end_pos;
	int n = on_disk(dir, 1, &h, &end_pos);
	assert_true(n > 0);
	assert_true(h.seq >= 1);
	assert_int_equal(h.seq - 1 + (uint64_t)n, total);
	dxl_zk_delete(&zk);
	alarm(0);
}

/* ---- 2. session expiry ---------------------------------------------------------- */

static void test_session_expiry(void **state)
{
	(void)state;
	NEED_SERVER();
	mt_alarm(80);
	char dir[256], logf[256];
	snprintf(dir, sizeof(dir), "%s/n2", g_tmp);
	snprintf(logf, sizeof(logf), "%s/n2.out", g_tmp);
	struct dxl_zk *zk = zk_open();
	pid_t p = spawn(logf, 2, dir, NULL);
	static struct dxl_replica_desc d1, d2;
	int64_t s1 = 0, s2 = 0;
	int ret = dxlt_replica_desc_wait(zk, 2, 1, 0, 15000, &d1, &s1);
	if (ret)
		dump_log(logf);
	assert_int_equal(ret, 0);

	struct dxl_fabric *f = NULL;
	struct dxl_ctx *wc = NULL, *wc2 = NULL, *tc = NULL;
	assert_int_equal(dxl_fabric_new(NULL, &f), 0);
	assert_int_equal(dxl_ctx_new(f, 0, &wc), 0);
	assert_int_equal(dxl_ctx_new(f, 1, &wc2), 0);
	assert_int_equal(dxl_ctx_new(f, 2, &tc), 0);
	static struct writer w;
	memset(&w, 0, sizeof(w));
	dxl_hlc_init(&w.clk);
	assert_int_equal(writer_new(&w, wc, &d1), 0);
	append_n(&w, 40);
	uint32_t acked = w.next;

	/* kill the server; pause the daemon while it restarts on the same
	 * data and expires the session the daemon can no longer renew */
	assert_int_equal(mt_server_cmd(&g_srv, "kill", 1), 0);
	/* the connection is gone: the lease ends at once, writes are fenced */
	if (!wait_log(logf, "event=regions_deregistered", 1, 5000))
		dump_log(logf);
	assert_true(wait_log(logf, "event=regions_deregistered", 1, 0));
	assert_int_equal(append_one(&w), DXL_E_ACCESS);
	dxl_appender_delete(&w.ap);
	assert_int_equal(kill(p, SIGSTOP), 0);
	assert_int_equal(mt_server_cmd(&g_srv, "restart", 1), 0);
	char mode[64];
	mt_server_mode(&g_srv, 1, mode, sizeof(mode));
	assert_string_equal(mode, "standalone");
	/* the old session expires: its znode goes (our own session survives:
	 * its client reconnects as soon as the server is back) */
	uint64_t end = dxl_now_ms() + 20000;
	char *json = NULL;
	while ((ret = dxl_member_get(zk, 2, &json, NULL)) != DXL_E_NOENT &&
	       dxl_now_ms() < end) {
		free(json);
		json = NULL;
		usleep(50000);
	}
	assert_int_equal(ret, DXL_E_NOENT);
	assert_int_equal(kill(p, SIGCONT), 0);

	/* the daemon sees EXPIRED, opens a new session, registers again */
	ret = dxlt_replica_desc_wait(zk, 2, 2, 0, 20000, &d2, &s2);
	if (ret)
		dump_log(logf);
	assert_int_equal(ret, 0);
	assert_true(s2 != s1);
	assert_int_equal(d2.reg_epoch, 2);
	assert_int_not_equal(d2.shards[0].region.rkey, d1.shards[0].region.rkey);
	if (!wait_log(logf, "event=new_session", 1, 0))
		dump_log(logf);
	assert_true(wait_log(logf, "event=session_expired", 1, 0));
	assert_true(wait_log(logf, "event=new_session", 1, 0));
	assert_int_equal(waitpid(p, NULL, WNOHANG), 0); /* still serving */

	ret = writer_new(&w, wc2, &d2);
	if (ret)
		print_message("new writer: %s\n", dxl_errmsg());
	assert_int_equal(ret, 0);
	append_n(&w, 40);
	heartbeat(&w);
	int err = 0;
	struct got g = tail(tc, &d2, 0, w.next, &err);
	assert_int_equal(err, 0);
	assert_int_equal(g.bad, 0);
	assert_int_equal(g.first, 0);
	assert_int_equal(g.n, w.next);
	assert_int_equal(g.n, acked + 40);
	dxl_appender_delete(&w.ap);
	dxl_fabric_delete(&f);
	kill(p, SIGTERM);
	assert_int_equal(wait_exit(p, 10000), 0);
	assert_int_equal(dxl_member_get(zk, 2, &json, NULL), DXL_E_NOENT);
	dxl_zk_delete(&zk);
	alarm(0);
}

/* ---- 3. retention ------------------------------------------------------------------ */

#define RET_BYTES 16384
#define NRET 400

static void test_retention(void **state)
{
	(void)state;
	NEED_SERVER();
	mt_alarm(60);
	char dir[256], logf[256];
	snprintf(dir, sizeof(dir), "%s/n3", g_tmp);
	snprintf(logf, sizeof(logf), "%s/n3.out", g_tmp);
	struct dxl_zk *zk = zk_open();
	/* by size: keep about 16K per ring (records are ~150 bytes: ~100) */
	const char *by_size[] = {"-o", "log.retention_bytes=16K", "-o",
				 "log.retention_check_ms=20", NULL};
	pid_t p = spawn(logf, 3, dir, by_size);
	static struct dxl_replica_desc d;
	int ret = dxlt_replica_desc_wait(zk, 3, 1, 0, 15000, &d, NULL);
	if (ret)
		dump_log(logf);
	assert_int_equal(ret, 0);

	struct dxl_fabric *f = NULL;
	struct dxl_ctx *wc = NULL, *tc[6];
	assert_int_equal(dxl_fabric_new(NULL, &f), 0);
	assert_int_equal(dxl_ctx_new(f, 0, &wc), 0);
	for (int i = 0; i < 6; i++)
		assert_int_equal(dxl_ctx_new(f, (uint32_t)i + 1, &tc[i]), 0);
	static struct writer w;
	memset(&w, 0, sizeof(w));
	dxl_hlc_init(&w.clk);
	assert_int_equal(writer_new(&w, wc, &d), 0);
	append_n(&w, NRET);
	int err = 0;
	struct got g;
	/* acknowledged appends and the heartbeat promise them (watermark):
	 * the head advances to within 16K of the end. A tailer from the
	 * earliest record shows where it is */
	heartbeat(&w);
	uint64_t end = dxl_now_ms() + 10000;
	do {
		usleep(20000);
		g = tail(tc[1], &d, 0, NRET, &err);
		assert_int_equal(err, 0);
		assert_int_equal(g.bad, 0);
		/* a pass that ran while the appends were still arriving cut
		 * less than the final one will: wait for the steady state */
	} while ((g.first == 0 || g.n * PAYLOAD > RET_BYTES) && dxl_now_ms() < end);
	print_message("retained by size: %u records from %u\n", g.n, g.first);
	assert_true(g.first > 0);
	assert_int_equal(g.first + g.n, NRET); /* the rest is all there */
	assert_true(g.n * PAYLOAD <= RET_BYTES);
	/* a cursor older than the head: DXL_E_STALE */
	g = tail(tc[2], &d, w.ts[0], NRET, &err);
	assert_int_equal(err, DXL_E_STALE);
	assert_int_equal(g.n, 0);
	/* a cursor inside what is retained works */
	g = tail(tc[3], &d, w.ts[NRET - 1], 1, &err);
	assert_int_equal(err, 0);
	assert_int_equal(g.n, 1);
	assert_int_equal(g.first, NRET - 1);
	dxl_appender_delete(&w.ap);
	kill(p, SIGTERM);
	assert_int_equal(wait_exit(p, 10000), 0);

	/* the head is persisted in the region file */
	struct dxl_ring_head h;
	uint64_t end_pos = 0;
	int n = on_disk(dir, 3, &h, &end_pos);
	/* (the last pass at shutdown may have cut a few more) */
	uint32_t first = NRET - (uint32_t)n;
	assert_true(n > 0 && n < NRET);
	assert_true(h.pos > 0);
	assert_true(end_pos - h.pos <= RET_BYTES);
	assert_int_equal(h.seq, NRET - (uint32_t)n + 1); /* seqs from 1 */
	assert_true(h.last_ts >= w.ts[0] && h.last_ts < w.ts[NRET - 1]);

	/* by age: restarted with retention_ms=1, every promised record goes --
	 * but not while a consumer group's cursor cannot be read: its position
	 * is unknown, so it may not have read any of them (issue 16.9) */
	char broken[256];
	snprintf(broken, sizeof(broken), "%s/cursors/broken/0", dxl_zk_root(zk));
	assert_int_equal(dxlt_zk_raw_put(g_srv.connect, broken, "{\"next_ts\":12}"), 0);
	const char *by_age[] = {"-o", "log.retention_ms=1", "-o",
				"log.retention_check_ms=20", NULL};
	p = spawn(logf, 3, dir, by_age);
	ret = dxlt_replica_desc_wait(zk, 3, 1, 0, 15000, &d, NULL);
	if (ret)
		dump_log(logf);
	assert_int_equal(ret, 0);
	usleep(300000); /* 15 retention passes */
	g = tail(tc[4], &d, w.ts[first], NRET, &err);
	assert_int_equal(err, 0);
	assert_int_equal(g.first, first);
	assert_int_equal(g.n, NRET - first); /* nothing reclaimed by age */
	if (!wait_log(logf, "event=cursor_unreadable", 1, 5000))
		dump_log(logf);
	assert_true(wait_log(logf, "event=cursor_unreadable", 1, 0));
	/* a consumer group that has read up to NRET-5 holds age-based
	 * retention back (docs/replica-design.md, rule 3): the records from
	 * its cursor on stay, the older ones go */
	assert_int_equal(dxl_cursor_set(zk, "slowgroup", 0, w.ts[NRET - 5],
					DXL_ZK_VERSION_NONE, NULL), 0);
	/* (the unreadable cursor goes only now: in between, nothing would
	 * hold the records back) */
	assert_int_equal(dxlt_zk_raw_delete(g_srv.connect, broken), 0);
	end = dxl_now_ms() + 10000;
	do {
		usleep(20000);
		g = tail(tc[4], &d, w.ts[NRET - 6], 1, &err);
	} while (err == 0 && dxl_now_ms() < end);
	assert_int_equal(err, DXL_E_STALE); /* below the cursor: reclaimed */
	usleep(200000);                      /* more retention passes */
	g = tail(tc[4], &d, w.ts[NRET - 5], NRET, &err);
	assert_int_equal(err, 0);
	assert_int_equal(g.n, 5);            /* from the cursor: all kept */
	assert_int_equal(g.first, NRET - 5);
	assert_int_equal(dxl_cursor_delete(zk, "slowgroup", 0), 0);
	/* the last record's cursor turns stale once it is reclaimed */
	end = dxl_now_ms() + 10000;
	do {
		usleep(20000);
		g = tail(tc[4], &d, w.ts[NRET - 1], 1, &err);
	} while (err == 0 && dxl_now_ms() < end);
	assert_int_equal(err, DXL_E_STALE);
	g = tail(tc[5], &d, 0, 1, &err); /* from the earliest: works, empty */
	assert_int_equal(err, 0);
	assert_int_equal(g.n, 0);
	dxl_fabric_delete(&f);
	kill(p, SIGTERM);
	assert_int_equal(wait_exit(p, 10000), 0);
	n = on_disk(dir, 3, &h, &end_pos);
	assert_int_equal(n, 0);
	assert_int_equal(h.pos, end_pos);
	assert_int_equal(h.seq, NRET + 1);
	assert_int_equal(h.last_ts, w.ts[NRET - 1]);
	dxl_zk_delete(&zk);
	alarm(0);
}

/*
 * Retention passes only records below the ring's watermark (issue 19's
 * ordering rules): a record at or above it may be unacknowledged, and a
 * repair may still cut or rewrite it. The writer holds its watermark
 * (dxl_appender_set_hold) while it appends records that are over the size
 * bound and older than retention_ms: the head must stop at the hold.
 */
static void test_retention_only_below_the_watermark(void **state)
{
	(void)state;
	NEED_SERVER();
	mt_alarm(60);
	char dir[256], logf[256];
	snprintf(dir, sizeof(dir), "%s/n4", g_tmp);
	snprintf(logf, sizeof(logf), "%s/n4.out", g_tmp);
	struct dxl_zk *zk = zk_open();
	const char *eager[] = {"-o", "log.retention_bytes=4K", "-o",
			       "log.retention_ms=1", "-o",
			       "log.retention_check_ms=10", NULL};
	pid_t p = spawn(logf, 4, dir, eager);
	static struct dxl_replica_desc d;
	int ret = dxlt_replica_desc_wait(zk, 4, 1, 0, 15000, &d, NULL);
	if (ret)
		dump_log(logf);
	assert_int_equal(ret, 0);
	struct dxl_fabric *f = NULL;
	struct dxl_ctx *wc = NULL;
	assert_int_equal(dxl_fabric_new(NULL, &f), 0);
	assert_int_equal(dxl_ctx_new(f, 0, &wc), 0);
	static struct writer w;
	memset(&w, 0, sizeof(w));
	dxl_hlc_init(&w.clk);
	assert_int_equal(writer_new(&w, wc, &d), 0);
	append_n(&w, 20);
	heartbeat(&w); /* 0..19 promised: retention may pass them */
	uint64_t hold = dxl_hlc_now(&w.clk);
	dxl_appender_set_hold(w.ap, hold);
	append_n(&w, 200); /* acknowledged, but the watermark stays at hold */
	usleep(300000);    /* 30 retention passes */
	dxl_appender_delete(&w.ap);
	kill(p, SIGTERM);
	assert_int_equal(wait_exit(p, 10000), 0);
	struct dxl_ring_head h;
	uint64_t end_pos = 0;
	int n = on_disk(dir, 4, &h, &end_pos);
	print_message("held at the watermark: the head passed %llu records (last ts %llu, hold %llu), %d records kept\n",
		      (unsigned long long)h.seq - 1, (unsigned long long)h.last_ts,
		      (unsigned long long)hold, n);
	assert_int_equal(h.last_ts, w.ts[19]); /* what was promised went */
	assert_true(h.last_ts < hold);
	assert_int_equal(n, 200);              /* nothing at or above it */
	assert_true(end_pos - h.pos > 4096);   /* though over the size bound */

	/* once promised, they go too */
	p = spawn(logf, 4, dir, eager);
	ret = dxlt_replica_desc_wait(zk, 4, 1, 0, 15000, &d, NULL);
	assert_int_equal(ret, 0);
	assert_int_equal(writer_new(&w, wc, &d), 0);
	heartbeat(&w);
	usleep(300000);
	dxl_appender_delete(&w.ap);
	dxl_fabric_delete(&f);
	kill(p, SIGTERM);
	assert_int_equal(wait_exit(p, 10000), 0);
	n = on_disk(dir, 4, &h, &end_pos);
	assert_int_equal(n, 0);
	assert_int_equal(h.last_ts, w.ts[219]);
	dxl_zk_delete(&zk);
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_lease_loss_fences, test_teardown),
		cmocka_unit_test_teardown(test_session_expiry, test_teardown),
		cmocka_unit_test_teardown(test_retention, test_teardown),
		cmocka_unit_test_teardown(test_retention_only_below_the_watermark,
					  test_teardown),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
