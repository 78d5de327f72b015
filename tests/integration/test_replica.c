/* test_replica.c -- dxl-replica processes under a real ZooKeeper: three
 * replicas of shard 0 register, a writer built from their published
 * descriptors appends, a tailer delivers, SIGTERM shuts one down cleanly and
 * a restart recovers its log; and the refusals (bad config, duplicate node
 * id, locked data directory, other durability, ZooKeeper unreachable).
 *
 * Needs DXL_TEST_ZK=host:port (scripts/test.sh sets it); skips with a
 * printed reason otherwise. The daemon is build/bin/dxl-replica, found next
 * to the test binary (../bin) or in $DXL_BIN_DIR. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/log.h"
#include "dxl/membership.h"
#include "dxl/replica.h"
#include "tests/lib/proc.h"

#define NREC 300
#define RING_SIZE "256K"
#define SLOTS 4

static const char *g_zkc;
static char g_bin[PATH_MAX];
static char g_tmp[128];
static char g_cluster[32];

/* ---- processes ------------------------------------------------------------ */

/* spawn -- dxl-replica for shard 0 (tests/lib/proc.h), output into logfile */
static pid_t spawn(const char *logfile, uint32_t node, const char *dir,
		   const char *zk, const char *const *extra)
{
	struct dxlt_replica r = {.bin = g_bin, .logfile = logfile, .node = node,
				 .dir = dir, .zk = zk, .cluster = g_cluster,
				 .extra = extra};
	pid_t p = dxlt_replica_spawn(&r);
	if (p < 0)
		fail_msg("spawn: %s", dxl_errmsg());
	return p;
}

/* ---- ZooKeeper ------------------------------------------------------------ */

static struct dxl_zk *zk_open(void)
{
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_zkc, g_cluster, &zk), 0);
	return zk;
}

/* ---- fixture -------------------------------------------------------------- */

static int setup(void **state)
{
	(void)state;
	g_zkc = getenv("DXL_TEST_ZK");
	assert_int_equal(dxlt_prog_path("dxl-replica", g_bin, sizeof(g_bin)), 0);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-replica-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	snprintf(g_cluster, sizeof(g_cluster), "rt%d", (int)getpid());
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	dxlt_kill_all();
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", g_tmp);
	return 0;
}

#define NEED_ZK()                                                            \
	do {                                                                 \
		if (!g_zkc) {                                                \
			print_message("SKIPPED: no ZooKeeper (DXL_TEST_ZK unset; " \
				      "scripts/test.sh sets it)\n");         \
			skip();                                              \
		}                                                            \
		if (access(g_bin, X_OK) != 0) {                              \
			print_message("SKIPPED: %s not built\n", g_bin);     \
			skip();                                              \
		}                                                            \
	} while (0)

/* ---- tailer helpers ------------------------------------------------------- */

struct got {
	uint32_t n;
	uint64_t last_ts;
	int bad;
};

static int on_rec(uint32_t ring, const struct dxl_rec *rec, void *arg)
{
	struct got *g = arg;
	uint32_t v = 0;
	if (rec->payload_len != sizeof(v) || rec->commit_ts < g->last_ts || ring != 0)
		g->bad++;
	else {
		memcpy(&v, rec->payload, sizeof(v));
		if (v != g->n || rec->txn_id != g->n + 1)
			g->bad++;
	}
	g->last_ts = rec->commit_ts;
	g->n++;
	return 0;
}

/* tail_all -- tail every ring of shard 0 of replica d on ctx until want
 * records arrived (at most 10 s); returns what arrived */
static struct got tail_all(struct dxl_ctx *ctx, const struct dxl_replica_desc *d,
			   uint32_t want)
{
	const struct dxl_shard_desc *sd = dxl_replica_desc_shard(d, 0);
	assert_non_null(sd);
	struct dxl_log_target t[SLOTS];
	assert_int_equal(sd->nrings, SLOTS);
	for (uint32_t i = 0; i < SLOTS; i++)
		assert_int_equal(dxl_replica_desc_target(d, 0, i, &t[i]), 0);
	struct dxl_tail_cfg tc = {.from_ts = 0};
	struct dxl_tailer *tl = NULL;
	assert_int_equal(dxl_tailer_new(ctx, &tc, t, SLOTS, &tl), 0);
	struct got g = {0};
	uint64_t end = dxl_now_ms() + 10000;
	while (g.n < want && dxl_now_ms() < end) {
		int n = dxl_tailer_poll(tl, on_rec, &g, NULL);
		assert_true(n >= 0);
		if (n == 0)
			usleep(5000);
	}
	dxl_tailer_delete(&tl);
	return g;
}

/* ---- the main scenario ---------------------------------------------------- */

static void test_three_replicas(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(50);
	struct dxl_zk *zk = zk_open();
	char dir[3][256], logf[3][256];
	pid_t pid[3];
	for (int i = 0; i < 3; i++) {
		snprintf(dir[i], sizeof(dir[i]), "%s/r%d", g_tmp, i + 1);
		snprintf(logf[i], sizeof(logf[i]), "%s/r%d.out", g_tmp, i + 1);
		pid[i] = spawn(logf[i], (uint32_t)i + 1, dir[i], g_zkc, NULL);
	}
	static struct dxl_replica_desc d[3];
	for (int i = 0; i < 3; i++) {
		int ret = dxlt_replica_desc_wait(zk, (uint32_t)i + 1, 0, pid[i], 15000,
						 &d[i], NULL);
		if (ret) {
			char out[4096];
			dxlt_slurp(logf[i], out, sizeof(out));
			print_message("replica %d: %s\n%s\n", i + 1, dxl_errmsg(), out);
		}
		assert_int_equal(ret, 0);
		assert_int_equal(d[i].node_id, (uint32_t)i + 1);
		assert_int_equal(d[i].nshards, 1);
		assert_int_equal(d[i].shards[0].shard, 0);
		assert_int_equal(d[i].shards[0].ring_size, 256 * 1024);
		assert_int_equal(d[i].reg_epoch, 1);
		assert_int_equal(d[i].durability, DXL_DUR_PROCESS);
	}

	/* a writer on slot 0 of the three replicas, from the descriptors */
	struct dxl_fabric *f = NULL;
	struct dxl_ctx *wc = NULL, *tc = NULL, *tc2 = NULL;
	assert_int_equal(dxl_fabric_new(NULL, &f), 0);
	assert_int_equal(dxl_ctx_new(f, 0, &wc), 0);
	assert_int_equal(dxl_ctx_new(f, 1, &tc), 0);
	assert_int_equal(dxl_ctx_new(f, 2, &tc2), 0);
	struct dxl_log_target t[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(dxl_replica_desc_target(&d[i], 0, 0, &t[i]), 0);
	struct dxl_appender_cfg ac;
	dxl_appender_cfg_init(&ac);
	ac.writer_id = 0;
	struct dxl_appender *ap = NULL;
	assert_int_equal(dxl_appender_new(wc, &ac, t, 3, &ap), 0);
	struct dxl_hlc clk;
	dxl_hlc_init(&clk);
	uint32_t acked = 0, posted = 0;
	struct dxl_append_result res[16];
	while (acked < NREC) {
		if (posted < NREC) {
			uint32_t v = posted;
			struct dxl_rec r = {.txn_id = posted + 1,
					    .commit_ts = dxl_hlc_now(&clk),
					    .payload = &v, .payload_len = sizeof(v)};
			uint64_t tok;
			int ret = dxl_appender_append(ap, &r, NULL, &tok);
			if (ret == 0) {
				posted++;
				continue;
			}
			assert_int_equal(ret, DXL_E_AGAIN);
		}
		dxl_appender_wait(ap, 100);
		int n = dxl_appender_poll(ap, res, 16);
		for (int i = 0; i < n; i++) {
			assert_int_equal(res[i].status, 0);
			assert_int_equal(res[i].acked, 7);
		}
		acked += (uint32_t)n;
	}
	assert_int_equal(dxl_appender_heartbeat(ap, dxl_hlc_now(&clk)), 0);
	while (dxl_appender_inflight(ap)) {
		dxl_appender_wait(ap, 100);
		dxl_appender_poll(ap, res, 16);
	}

	/* a tailer on replica 1 delivers them all, in order */
	struct got g = tail_all(tc, &d[0], NREC);
	assert_int_equal(g.bad, 0);
	assert_int_equal(g.n, NREC);

	/* SIGTERM replica 2: exit 0, znode gone, data directory unlocked */
	dxl_appender_delete(&ap);
	kill(pid[1], SIGTERM);
	int st = dxlt_wait_exit(pid[1], 10000);
	if (st != 0) {
		char out[8192];
		dxlt_slurp(logf[1], out, sizeof(out));
		print_message("replica 2 output:\n%s\n", out);
	}
	assert_int_equal(st, 0);
	char *json = NULL;
	assert_int_equal(dxl_member_get(zk, 2, &json, NULL), DXL_E_NOENT);
	struct dxl_datadir *dd = NULL;
	assert_int_equal(dxl_datadir_open(dir[1], g_cluster, 2, DXL_DUR_PROCESS, 0, &dd), 0);
	/* its log is on disk: scan ring 0 */
	struct dxl_shard_cfg sc = {.node_id = 2, .shard = 0,
				   .durability = DXL_DUR_PROCESS};
	snprintf(sc.cluster, sizeof(sc.cluster), "%s", g_cluster);
	struct dxl_shard *sh = NULL;
	assert_int_equal(dxl_shard_open(dir[1], &sc, NULL, &sh), 0);
	assert_false(dxl_shard_registered(sh));
	assert_int_equal(dxl_ring_scan(dxl_shard_logstore(sh), 0, NULL, NULL, NULL, NULL),
			 NREC);
	dxl_shard_close(&sh);
	dxl_datadir_close(&dd);

	/* restart it on the same data directory: it recovers its log */
	pid[1] = spawn(logf[1], 2, dir[1], g_zkc, NULL);
	static struct dxl_replica_desc d2;
	assert_int_equal(dxlt_replica_desc_wait(zk, 2, 0, pid[1], 15000, &d2, NULL), 0);
	g = tail_all(tc2, &d2, NREC);
	assert_int_equal(g.bad, 0);
	assert_int_equal(g.n, NREC);

	dxl_fabric_delete(&f);
	for (int i = 0; i < 3; i++) {
		kill(pid[i], SIGTERM);
		assert_int_equal(dxlt_wait_exit(pid[i], 10000), 0);
	}
	dxl_zk_delete(&zk);
	alarm(0);
}

/* ---- refusals -------------------------------------------------------------- */

static void test_bad_config(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(20);
	char conf[256], dir[256], logf[256], out[8192];
	snprintf(conf, sizeof(conf), "%s/bad.conf", g_tmp);
	snprintf(dir, sizeof(dir), "%s/never", g_tmp);
	snprintf(logf, sizeof(logf), "%s/bad.out", g_tmp);
	FILE *fp = fopen(conf, "w");
	assert_non_null(fp);
	fprintf(fp, "[replica]\nshards = 0\n[log]\nretention_ms = 1000\nfrobnicate = 3\n");
	fclose(fp);
	const char *extra[] = {"--config", conf, NULL};
	pid_t p = spawn(logf, 40, dir, g_zkc, extra);
	int st = dxlt_wait_exit(p, 10000);
	dxlt_slurp(logf, out, sizeof(out));
	if (st != 2)
		print_message("output:\n%s\n", out);
	assert_int_equal(st, 2);
	char where[300];
	snprintf(where, sizeof(where), "%s:5", conf);
	if (!strstr(out, where) || !strstr(out, "log.frobnicate"))
		print_message("output:\n%s\n", out);
	assert_non_null(strstr(out, where));
	assert_non_null(strstr(out, "log.frobnicate"));
	assert_int_equal(access(dir, F_OK), -1); /* nothing created */

	/* a bad value: file, line and key */
	fp = fopen(conf, "w");
	assert_non_null(fp);
	fprintf(fp, "[log]\nretention_ms = ten\n");
	fclose(fp);
	p = spawn(logf, 40, dir, g_zkc, extra);
	assert_int_equal(dxlt_wait_exit(p, 10000), 2);
	dxlt_slurp(logf, out, sizeof(out));
	snprintf(where, sizeof(where), "%s:2", conf);
	if (!strstr(out, where) || !strstr(out, "log.retention_ms"))
		print_message("output:\n%s\n", out);
	assert_non_null(strstr(out, where));
	assert_non_null(strstr(out, "log.retention_ms"));
	assert_int_equal(access(dir, F_OK), -1);
	alarm(0);
}

static void test_refusals(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(40);
	struct dxl_zk *zk = zk_open();
	char dir[256], dir2[256], logf[256], logf2[256], out[8192];
	snprintf(dir, sizeof(dir), "%s/n11", g_tmp);
	snprintf(dir2, sizeof(dir2), "%s/n11-other", g_tmp);
	snprintf(logf, sizeof(logf), "%s/n11.out", g_tmp);
	snprintf(logf2, sizeof(logf2), "%s/n11-2.out", g_tmp);
	pid_t p = spawn(logf, 11, dir, g_zkc, NULL);
	static struct dxl_replica_desc d;
	assert_int_equal(dxlt_replica_desc_wait(zk, 11, 0, p, 15000, &d, NULL), 0);

	/* the same node id elsewhere: refused (DXL_E_EXIST), exit 4 */
	const char *wait0[] = {"-o", "replica.exist_wait_ms=200", NULL};
	pid_t q = spawn(logf2, 11, dir2, g_zkc, wait0);
	assert_int_equal(dxlt_wait_exit(q, 15000), 4);
	dxlt_slurp(logf2, out, sizeof(out));
	assert_non_null(strstr(out, "already registered"));
	char *json = NULL;
	int64_t sess = 0;
	assert_int_equal(dxl_member_get(zk, 11, &json, &sess), 0); /* untouched */
	assert_non_null(strstr(json, d.addr));
	free(json);

	/* the same data directory twice: refused (DXL_E_BUSY), exit 3 */
	q = spawn(logf2, 11, dir, g_zkc, NULL);
	assert_int_equal(dxlt_wait_exit(q, 15000), 3);
	dxlt_slurp(logf2, out, sizeof(out));
	assert_non_null(strstr(out, "in use by another process"));
	assert_int_equal(waitpid(p, NULL, WNOHANG), 0); /* the first still runs */

	/* stop it; then the same directory with another durability: exit 3 */
	kill(p, SIGTERM);
	assert_int_equal(dxlt_wait_exit(p, 10000), 0);
	const char *msync[] = {"--durability", "msync", NULL};
	q = spawn(logf2, 11, dir, g_zkc, msync);
	assert_int_equal(dxlt_wait_exit(q, 15000), 3);
	dxlt_slurp(logf2, out, sizeof(out));
	assert_non_null(strstr(out, "durability"));
	/* ... and of another node id: exit 3 */
	q = spawn(logf2, 12, dir, g_zkc, NULL);
	assert_int_equal(dxlt_wait_exit(q, 15000), 3);
	dxlt_slurp(logf2, out, sizeof(out));
	assert_non_null(strstr(out, "belongs to cluster"));
	dxl_zk_delete(&zk);
	alarm(0);
}

static void test_zk_unreachable(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(20);
	char dir[256], logf[256], out[8192];
	snprintf(dir, sizeof(dir), "%s/nozk", g_tmp);
	snprintf(logf, sizeof(logf), "%s/nozk.out", g_tmp);
	const char *fast[] = {"-o", "zk.connect_timeout_ms=1000", NULL};
	/* port 1 on loopback: nothing listens there */
	pid_t p = spawn(logf, 21, dir, "127.0.0.1:1", fast);
	assert_int_equal(dxlt_wait_exit(p, 15000), 5);
	dxlt_slurp(logf, out, sizeof(out));
	if (!strstr(out, "no session after"))
		print_message("output:\n%s\n", out);
	assert_non_null(strstr(out, "no session after"));
	assert_non_null(strstr(out, "exit=5"));
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_three_replicas),
		cmocka_unit_test(test_bad_config),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_zk_unreachable),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
