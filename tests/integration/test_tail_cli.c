/* test_tail_cli.c -- dxl tail end to end under a real ZooKeeper, with real
 * replica processes: --all merged across 2 shards, consumer groups (resume,
 * the cursor in ZooKeeper, --from overriding it, a concurrent consumer),
 * a cursor older than the retained log, a writer that crashed with a record
 * its watermark did not confirm yet (held back, then delivered once the
 * next holder of its slot confirms it: the group's cursor never passes it),
 * --follow across kill -9 of the replica being tailed, and a writer whose
 * clock jumped forward (the next writer does not inherit the jump).
 *
 * One cluster ('dxl cluster up', 3 replicas, 2 shards, 64 KiB rings so
 * that retention by size can be forced) for the whole group; the tests run
 * in order and share it. Needs DXL_TEST_ZK=host:port (scripts/test.sh sets
 * it); skips with a printed reason otherwise. The test process is a child
 * subreaper, so the replicas (detached by 'cluster up') are reaped here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/log.h"
#include "dxl/membership.h"
#include "dxl/replica.h"
#include "tests/lib/cli_run.h"
#include "tests/lib/proc.h"

#define CAP 262144

static const char *g_zkc;
static bool g_skip;
static char g_bin[PATH_MAX];
static char g_tmp[128];
static char g_dir[256];
static char g_cluster[32];
static bool g_up;
static struct dxl_zk *g_zk;
static pid_t g_follow = -1; /* a running 'tail --follow' */
static int g_slot = -1;     /* a writer slot of shard 1 the test holds */
static char out[CAP], err[CAP];

/* every record appended: what tail must print */
struct rec {
	uint32_t shard;
	uint64_t ts;
	char payload[32]; /* the first 31 bytes */
};
#define MAXREC 512
static struct rec g_recs[MAXREC];
static int g_nrec;

static void reap_orphans(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

static bool alive(pid_t p)
{
	reap_orphans();
	return p > 0 && kill(p, 0) == 0;
}

/* dxl ARGS... (NULL-terminated, without the program) */
static int dxl(int timeout_ms, ...)
{
	const char *argv[128];
	int a = 0;
	argv[a++] = g_bin;
	va_list ap;
	va_start(ap, timeout_ms);
	const char *s;
	while ((s = va_arg(ap, const char *)) && a < 127)
		argv[a++] = s;
	va_end(ap);
	argv[a] = NULL;
	return dxlt_run(argv, NULL, g_tmp, out, err, CAP, timeout_ms);
}

#define EXPECT_RC(rc, want)                                                   \
	do {                                                                  \
		if ((rc) != (want))                                           \
			print_message("exit %d, want %d\nstdout:\n%s\nstderr:\n%s\n", \
				      (rc), (want), out, err);                \
		assert_int_equal((rc), (want));                               \
	} while (0)

/* replica_pid -- the pid of node id in DIR/cluster.json */
static pid_t replica_pid(uint32_t id)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/cluster.json", g_dir);
	json_t *o = json_load_file(path, 0, NULL);
	if (!o)
		return -1;
	pid_t p = -1;
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(o, "replicas"), i, r) {
		if (json_integer_value(json_object_get(r, "id")) == (json_int_t)id)
			p = (pid_t)json_integer_value(json_object_get(r, "pid"));
	}
	json_decref(o);
	return p;
}

/*
 * append -- 'dxl log append --shard S' of n records "<tag>-<i>" (padded to
 * size bytes with '.', if size > the name); records them in g_recs. Retries
 * for a while if nothing was appended (a configuration change under way);
 * returns the index of the first record.
 */
static int append(uint32_t shard, int n, const char *tag, size_t size)
{
	assert_true(n <= 64 && g_nrec + n <= MAXREC);
	static char payloads[64][2048];
	const char *argv[80];
	char sh[16];
	snprintf(sh, sizeof(sh), "%u", shard);
	int a = 0;
	argv[a++] = g_bin;
	argv[a++] = "log";
	argv[a++] = "append";
	argv[a++] = "--shard";
	argv[a++] = sh;
	argv[a++] = "--dir";
	argv[a++] = g_dir;
	for (int i = 0; i < n; i++) {
		int k = snprintf(payloads[i], sizeof(payloads[i]), "%s-%d", tag, i);
		while ((size_t)k < size && k < (int)sizeof(payloads[i]) - 1)
			payloads[i][k++] = '.';
		payloads[i][k] = 0;
		argv[a++] = payloads[i];
	}
	argv[a] = NULL;
	uint64_t end = dxl_now_ms() + 10000;
	int rc;
	for (;;) {
		rc = dxlt_run(argv, NULL, g_tmp, out, err, CAP, 15000);
		if (rc == 0 || strstr(out, "\tok") || dxl_now_ms() > end)
			break;
		usleep(200000); /* nothing appended: the cluster is changing */
	}
	EXPECT_RC(rc, 0);
	int first = g_nrec;
	char *p = out;
	for (int i = 0; i < n; i++) {
		char *nl = strchr(p, '\n');
		assert_non_null(nl);
		*nl = 0;
		unsigned long long ts;
		char st[16];
		assert_int_equal(sscanf(p, "%llu\t%15s", &ts, st), 2);
		assert_string_equal(st, "ok");
		struct rec *r = &g_recs[g_nrec++];
		r->shard = shard;
		r->ts = ts;
		size_t l = strnlen(payloads[i], sizeof(r->payload) - 1);
		memcpy(r->payload, payloads[i], l);
		r->payload[l] = 0;
		p = nl + 1;
	}
	return first;
}

static int cmp_rec(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->shard < y->shard ? -1 : x->shard > y->shard;
}

/*
 * check_output -- text's lines are exactly the records g_recs[from..to)
 * with ts >= min_ts, sorted by (commit_ts, shard), each once (payloads
 * compared on their first 31 bytes).
 */
static void check_output(const char *text, int from, int to, uint64_t min_ts)
{
	static struct rec want[MAXREC];
	int nw = 0;
	for (int i = from; i < to; i++)
		if (g_recs[i].ts >= min_ts)
			want[nw++] = g_recs[i];
	qsort(want, (size_t)nw, sizeof(want[0]), cmp_rec);
	static char buf[CAP];
	snprintf(buf, sizeof(buf), "%s", text);
	char *p = buf;
	int i = 0;
	for (; *p; i++) {
		char *nl = strchr(p, '\n');
		assert_non_null(nl);
		*nl = 0;
		unsigned sh, w;
		unsigned long long ts, txn;
		char payload[32];
		if (sscanf(p, "%u\t%llu\t%u\t%llu\t%31s", &sh, &ts, &w, &txn, payload) != 5)
			fail_msg("not a record line: '%s'", p);
		if (i >= nw)
			fail_msg("line %d: extra record %u %llu %s (want %d records)", i + 1, sh,
				 ts, payload, nw);
		if (sh != want[i].shard || ts != want[i].ts ||
		    strcmp(payload, want[i].payload) != 0)
			fail_msg("line %d: got shard %u ts %llu '%s', want shard %u ts %llu '%s'",
				 i + 1, sh, ts, payload, want[i].shard,
				 (unsigned long long)want[i].ts, want[i].payload);
		p = nl + 1;
	}
	if (i != nw)
		fail_msg("%d records printed, want %d", i, nw);
}

static size_t count_lines(const char *s)
{
	size_t n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* wait_file -- until path has at least `lines` lines (or contains `needle`
 * if not NULL); false after timeout_ms */
static bool wait_file(const char *path, size_t lines, const char *needle, int timeout_ms)
{
	static char buf[CAP];
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		dxlt_slurp(path, buf, sizeof(buf));
		if (needle ? strstr(buf, needle) != NULL : count_lines(buf) >= lines)
			return true;
		if (dxl_now_ms() > end)
			return false;
		usleep(20000);
	}
}

static uint64_t cursor(const char *group, uint32_t shard)
{
	uint64_t c = 0;
	int ret = dxl_cursor_get(g_zk, group, shard, &c, NULL);
	if (ret)
		fail_msg("cursor of group %s for shard %u: %s", group, shard, dxl_errmsg());
	return c;
}

static uint64_t max_ts(int from, int to, uint32_t shard)
{
	uint64_t m = 0;
	for (int i = from; i < to; i++)
		if (g_recs[i].shard == shard)
			m = DXL_MAX(m, g_recs[i].ts);
	return m;
}

/* ---- fixture ------------------------------------------------------------------ */

static int setup(void **state)
{
	(void)state;
	g_zkc = getenv("DXL_TEST_ZK");
	if (dxlt_prog_path("dxl", g_bin, sizeof(g_bin)) || !g_zkc ||
	    access(g_bin, X_OK) != 0) {
		g_skip = true;
		return 0;
	}
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-tail-XXXXXX");
	if (!mkdtemp(g_tmp))
		return -1;
	snprintf(g_dir, sizeof(g_dir), "%s/cluster", g_tmp);
	snprintf(g_cluster, sizeof(g_cluster), "tail%d", (int)getpid());
	alarm(60);
	g_up = true;
	int rc = dxl(40000, "cluster", "up", "--dir", g_dir, "--zk", g_zkc, "--cluster",
		     g_cluster, "--replicas", "3", "--shards", "2", "--durability", "process",
		     "--ring-size", "64K", "--writer-slots", "4", NULL);
	if (rc != 0) {
		fprintf(stderr, "cluster up: exit %d\n%s\n%s\n", rc, out, err);
		return -1;
	}
	struct dxl_zk_cfg zc;
	dxl_zk_cfg_init(&zc);
	snprintf(zc.connect, sizeof(zc.connect), "%s", g_zkc);
	snprintf(zc.cluster, sizeof(zc.cluster), "%s", g_cluster);
	if (dxl_zk_new(&zc, &g_zk)) {
		fprintf(stderr, "zk: %s\n", dxl_errmsg());
		return -1;
	}
	alarm(0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (g_skip)
		return 0;
	alarm(60);
	if (g_follow > 0) {
		kill(g_follow, SIGKILL);
		dxlt_wait_exit(g_follow, 5000);
		g_follow = -1;
	}
	dxl_zk_delete(&g_zk);
	if (g_up) {
		int rc = dxl(20000, "cluster", "down", "--dir", g_dir, NULL);
		if (rc != 0)
			fprintf(stderr, "cluster down: exit %d\n%s\n%s\n", rc, out, err);
		for (uint32_t id = 1; id <= 3; id++) {
			pid_t p = replica_pid(id);
			if (alive(p))
				kill(p, SIGKILL);
		}
		g_up = false;
	}
	uint64_t end = dxl_now_ms() + 3000;
	while (dxl_now_ms() < end && waitpid(-1, NULL, WNOHANG) >= 0)
		usleep(10000); /* until no child is left (ECHILD) */
	alarm(0);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", g_tmp);
	return 0;
}

/* release_slot -- a test that failed half-way left its slot held: it
 * would hold shard 1 back for the next tests */
static void release_slot(void)
{
	if (g_slot >= 0 && g_zk)
		dxl_writer_slot_release(g_zk, 1, (uint32_t)g_slot);
	g_slot = -1;
}

#define SKIP_IF_NO_CLUSTER()                                                                   \
	do {                                                                                   \
		if (g_skip) {                                                                  \
			print_message("SKIPPED: no ZooKeeper (DXL_TEST_ZK unset; scripts/test.sh " \
				      "sets it) or build/bin/dxl not built\n");                \
			skip();                                                                \
		}                                                                              \
		release_slot();                                                                \
	} while (0)

/* ---- tests ---------------------------------------------------------------------- */

/* --all: the union of both shards, sorted by commit_ts, each record once,
 * also when the shards' records interleave in time; the command line */
static void test_tail_all_merged(void **state)
{
	(void)state;
	SKIP_IF_NO_CLUSTER();
	alarm(30);
	append(0, 10, "a", 0);
	append(1, 10, "b", 0);
	append(0, 5, "c", 0);
	append(1, 1, "d", 0);
	int rc = dxl(15000, "tail", "--all", "--dir", g_dir, NULL);
	EXPECT_RC(rc, 0);
	check_output(out, 0, g_nrec, 0);
	/* one shard alone: still exactly its records */
	rc = dxl(15000, "tail", "--shard", "1", "--dir", g_dir, "--from", "earliest", NULL);
	EXPECT_RC(rc, 0);
	assert_int_equal(count_lines(out), 11);
	/* json keeps its format */
	rc = dxl(15000, "tail", "--all", "--dir", g_dir, "--format", "json", NULL);
	EXPECT_RC(rc, 0);
	assert_int_equal(count_lines(out), (size_t)g_nrec);
	assert_non_null(strstr(out, "{\"shard\":1,\"commit_ts\":"));
	/* --from TS: from that record on, on both shards */
	char ts[32];
	snprintf(ts, sizeof(ts), "%llu", (unsigned long long)g_recs[12].ts);
	rc = dxl(15000, "tail", "--all", "--dir", g_dir, "--from", ts, NULL);
	EXPECT_RC(rc, 0);
	check_output(out, 0, g_nrec, g_recs[12].ts);
	/* command line */
	rc = dxl(5000, "tail", "--all", "--shard", "0", "--dir", g_dir, NULL);
	EXPECT_RC(rc, 2);
	assert_non_null(strstr(err, "--all"));
	rc = dxl(5000, "tail", "--dir", g_dir, NULL);
	EXPECT_RC(rc, 2);
	assert_non_null(strstr(err, "--shard S or --all"));
	rc = dxl(5000, "tail", "--all", "--dir", g_dir, "--group", "no/slash", NULL);
	EXPECT_RC(rc, 2);
	assert_non_null(strstr(err, "--group"));
	rc = dxl(5000, "tail", "--help", NULL);
	EXPECT_RC(rc, 0);
	assert_non_null(strstr(out, "--group G"));
	assert_non_null(strstr(out, "FAILOVER"));
	alarm(0);
}

/*
 * The merge waits for a slow shard. The test holds writer slot 0 of shard 1
 * (a live writer that has promised nothing new: ring 0's watermark is old),
 * so the record x that 'log append' then puts in ring 1 is not resolved;
 * shard 0 gets y after x, resolved at once. y must not be printed before
 * x: --all prints nothing while shard 1 is held back (and, without
 * --follow, does not wait for it), then x, y once the slot is released.
 */
static void test_tail_all_waits_for_slow_shard(void **state)
{
	(void)state;
	SKIP_IF_NO_CLUSTER();
	alarm(30);
	uint32_t slot = 99;
	assert_int_equal(dxl_writer_slot_lease(g_zk, 1, 4, &slot), 0);
	g_slot = (int)slot;
	assert_int_equal(slot, 0);
	int ix = append(1, 1, "slow-x", 0); /* in slot/ring 1 */
	int iy = append(0, 1, "fast-y", 0);
	assert_true(g_recs[iy].ts > g_recs[ix].ts);
	char from[32];
	snprintf(from, sizeof(from), "%llu", (unsigned long long)g_recs[ix].ts);

	/* shard 1 is not resolved past x: nothing may be printed */
	int rc = dxl(15000, "tail", "--all", "--dir", g_dir, "--from", from, NULL);
	EXPECT_RC(rc, 0);
	assert_string_equal(out, "");
	/* shard 0 alone has y */
	rc = dxl(15000, "tail", "--shard", "0", "--dir", g_dir, "--from", from, NULL);
	EXPECT_RC(rc, 0);
	assert_int_equal(count_lines(out), 1);

	/* the idle writer leaves: ring 0 no longer holds shard 1 back */
	assert_int_equal(dxl_writer_slot_release(g_zk, 1, slot), 0);
	g_slot = -1;
	rc = dxl(15000, "tail", "--all", "--dir", g_dir, "--from", from, NULL);
	EXPECT_RC(rc, 0);
	check_output(out, ix, g_nrec, 0);
	alarm(0);
}

/* --group: a second run prints only what was appended in between; the
 * cursors are in ZooKeeper; --from wins over them, with a warning */
static void test_tail_group_resume(void **state)
{
	(void)state;
	SKIP_IF_NO_CLUSTER();
	alarm(30);
	int rc = dxl(15000, "tail", "--all", "--dir", g_dir, "--group", "g", NULL);
	EXPECT_RC(rc, 0);
	check_output(out, 0, g_nrec, 0);
	uint64_t c0 = cursor("g", 0), c1 = cursor("g", 1);
	assert_true(c0 > max_ts(0, g_nrec, 0));
	assert_true(c1 > max_ts(0, g_nrec, 1));
	int mark = g_nrec;
	append(1, 3, "e", 0);
	append(0, 2, "f", 0);
	rc = dxl(15000, "tail", "--all", "--dir", g_dir, "--group", "g", NULL);
	EXPECT_RC(rc, 0);
	check_output(out, mark, g_nrec, 0);
	assert_true(cursor("g", 0) > max_ts(mark, g_nrec, 0));
	assert_true(cursor("g", 1) > max_ts(mark, g_nrec, 1));
	/* nothing new: nothing printed, the cursors stay */
	c0 = cursor("g", 0);
	c1 = cursor("g", 1);
	rc = dxl(15000, "tail", "--all", "--dir", g_dir, "--group", "g", "--format", "json",
		 NULL);
	EXPECT_RC(rc, 0);
	assert_string_equal(out, "");
	assert_true(cursor("g", 0) >= c0 && cursor("g", 1) >= c1);
	/* --from overrides the group's cursors, and says so */
	rc = dxl(15000, "tail", "--shard", "0", "--dir", g_dir, "--group", "g", "--from",
		 "earliest", NULL);
	EXPECT_RC(rc, 0);
	assert_non_null(strstr(err, "--from overrides the committed cursor"));
	assert_int_equal(count_lines(out), 18); /* a 10, c 5, fast-y 1, f 2 */
	alarm(0);
}

/* two consumers of one group on one shard: reported, the later cursor kept */
static void test_tail_group_conflict(void **state)
{
	(void)state;
	SKIP_IF_NO_CLUSTER();
	alarm(30);
	int rc = dxl(15000, "tail", "--shard", "0", "--dir", g_dir, "--group", "c", NULL);
	EXPECT_RC(rc, 0);
	char of[256], ef[256];
	snprintf(of, sizeof(of), "%s/follow.out", g_tmp);
	snprintf(ef, sizeof(ef), "%s/follow.err", g_tmp);
	const char *argv[] = {g_bin, "tail", "--shard", "0", "--dir", g_dir, "--group", "c",
			      "--follow", NULL};
	g_follow = dxlt_spawn_io(argv, NULL, of, ef);
	assert_true(g_follow > 0);
	int mark = g_nrec;
	append(0, 1, "g", 0);
	assert_true(wait_file(of, 1, NULL, 10000)); /* it runs and resumed */
	/* the other consumer */
	uint64_t other = g_recs[mark].ts + 1;
	assert_int_equal(dxl_cursor_set(g_zk, "c", 0, other, DXL_ZK_VERSION_ANY, NULL), 0);
	append(0, 1, "h", 0);
	bool warned = wait_file(ef, 0, "another consumer of group c moved the cursor of shard 0",
				10000);
	assert_true(wait_file(of, 2, NULL, 10000));
	kill(g_follow, SIGTERM);
	rc = dxlt_wait_exit(g_follow, 10000);
	g_follow = -1;
	dxlt_slurp(of, out, CAP);
	dxlt_slurp(ef, err, CAP);
	if (!warned)
		print_message("stderr:\n%s\n", err);
	assert_true(warned);
	EXPECT_RC(rc, 0);
	check_output(out, mark, g_nrec, 0);
	assert_true(cursor("c", 0) > g_recs[g_nrec - 1].ts);
	alarm(0);
}

/* a cursor below what the replica retains: exit 1 and a clear message,
 * never a silent skip (the cursor stays where it was) */
static void test_tail_stale_cursor(void **state)
{
	(void)state;
	SKIP_IF_NO_CLUSTER();
	alarm(30);
	/* 40 records of 1000 bytes (1280 B each in the ring) into a 64 KiB
	 * ring: retention keeps 32 KiB, so the oldest records of shard 1 are
	 * reclaimed within log.retention_check_ms (1 s) */
	append(1, 40, "big", 1000);
	uint64_t end = dxl_now_ms() + 8000;
	int rc;
	for (;;) {
		assert_int_equal(dxl_cursor_set(g_zk, "old", 1, 1, DXL_ZK_VERSION_ANY, NULL), 0);
		rc = dxl(15000, "tail", "--shard", "1", "--dir", g_dir, "--group", "old", NULL);
		if (rc != 0 || dxl_now_ms() > end)
			break;
		usleep(200000); /* not reclaimed yet */
	}
	EXPECT_RC(rc, 1);
	if (!strstr(err, "cursor 1 of group old for shard 1 is older than the retained log "
			 "(oldest retained: the first record after commit_ts "))
		fail_msg("stderr: %s", err);
	assert_string_equal(out, "");
	assert_int_equal(cursor("old", 1), 1);
	/* the same with --from, without a group */
	rc = dxl(15000, "tail", "--shard", "1", "--dir", g_dir, "--from", "1", NULL);
	EXPECT_RC(rc, 1);
	assert_non_null(strstr(err, "--from 1: shard 1: the commit timestamp is older than "
				    "the retained log"));
	/* earliest is what is retained: no error */
	rc = dxl(15000, "tail", "--shard", "1", "--dir", g_dir, NULL);
	EXPECT_RC(rc, 0);
	assert_true(count_lines(out) > 0);
	alarm(0);
}

/* ---- a writer of the test's own, on ring k of a shard's members ----------------- */

struct raw {
	struct dxl_fabric *f;
	struct dxl_ctx *ctx;
	struct dxl_appender *ap;
	struct dxl_hlc clk;
};

/* raw_open -- an appender with repair for ring `ring` of shard on every
 * member of the current configuration (primary first), retried while the
 * members register for a new epoch; its clock above what the rings promise */
static void raw_open(struct raw *w, uint32_t shard, uint32_t ring)
{
	static struct dxl_replica_desc d;
	memset(w, 0, sizeof(*w));
	uint64_t end = dxl_now_ms() + 15000;
	for (;;) {
		struct dxl_cluster_config cfg;
		assert_int_equal(dxl_cluster_config_read(g_zk, &cfg, NULL), 0);
		const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&cfg, shard);
		assert_non_null(sh);
		uint32_t ids[DXL_CONFIG_MAX_REPLICAS];
		uint32_t n = dxl_cluster_shard_members(sh, ids);
		uint64_t epoch = cfg.epoch;
		dxl_cluster_config_clear(&cfg);
		struct dxl_log_target t[DXL_CONFIG_MAX_REPLICAS];
		int ret = 0;
		for (uint32_t i = 0; i < n && !ret; i++) {
			ret = dxl_replica_desc_get(g_zk, ids[i], &d);
			if (!ret && d.cfg_epoch < epoch)
				ret = DXL_E_UNAVAIL;
			if (!ret)
				ret = dxl_replica_desc_target(&d, shard, ring, &t[i]);
		}
		if (!ret && !w->f) {
			struct dxl_fabric_cfg fc;
			dxl_fabric_cfg_init(&fc);
			fc.provider = d.provider;
			assert_int_equal(dxl_fabric_new(&fc, &w->f), 0);
			assert_int_equal(dxl_ctx_new(w->f, 0, &w->ctx), 0);
		}
		if (!ret) {
			struct dxl_appender_cfg ac;
			dxl_appender_cfg_init(&ac);
			ac.writer_id = ring;
			ac.epoch = (uint32_t)epoch;
			ac.repair = true;
			ret = dxl_appender_new(w->ctx, &ac, t, n, &w->ap);
		}
		if (!ret)
			break;
		if (dxl_now_ms() > end)
			fail_msg("writer on ring %u of shard %u: %s", ring, shard, dxl_errmsg());
		usleep(100000);
	}
	dxl_hlc_init(&w->clk);
	assert_int_equal(dxl_hlc_observe(&w->clk, dxl_appender_min_ts(w->ap)), 0);
}

/* raw_crash -- gone without closing its ring */
static void raw_crash(struct raw *w)
{
	dxl_appender_delete(&w->ap);
	dxl_ctx_delete(&w->ctx);
	dxl_fabric_delete(&w->f);
}

static void raw_wait(struct raw *w)
{
	struct dxl_append_result res;
	while (dxl_appender_inflight(w->ap)) {
		assert_true(dxl_appender_poll(w->ap, &res, 1) >= 0);
		dxl_appender_wait(w->ap, 10);
	}
}

/*
 * Issue 19.3 end to end: a writer on slot 3 of shard 1 appends R (every
 * member has it: acknowledged) and crashes before a watermark confirms R;
 * its slot is released. A later record S of another writer is resolved on
 * its own ring. 'dxl tail --group' prints neither and commits a cursor not
 * past R: the crashed ring holds the shard at its watermark (before, the
 * ring of a writer without a slot did not hold anybody back: S was printed
 * and the cursor committed past R, which the next holder of slot 3 then
 * confirmed -- and no run of the group ever printed R). The next holder
 * of slot 3 confirms R with its repair and closes the ring; the group's
 * next run prints R, then S.
 */
static void test_tail_crashed_writer_taken_over(void **state)
{
	(void)state;
	SKIP_IF_NO_CLUSTER();
	alarm(60);
	assert_int_equal(dxl_writer_slot_take(g_zk, 1, 3), 0);
	g_slot = 3;
	struct raw w;
	raw_open(&w, 1, 3);
	const char *rp = "crashed-R";
	uint64_t rts = dxl_hlc_now(&w.clk);
	struct dxl_rec r = {.commit_ts = rts, .txn_id = rts, .payload = rp,
			    .payload_len = (uint32_t)strlen(rp)};
	struct dxl_append_result res;
	assert_int_equal(dxl_appender_append_sync(w.ap, &r, NULL, &res), 0);
	raw_crash(&w);
	release_slot();
	int ir = g_nrec++;
	g_recs[ir] = (struct rec){.shard = 1, .ts = rts};
	snprintf(g_recs[ir].payload, sizeof(g_recs[ir].payload), "%s", rp);
	int is = append(1, 1, "after-R", 0);
	assert_true(g_recs[is].ts > rts);

	int rc = dxl(15000, "tail", "--shard", "1", "--dir", g_dir, "--group", "crash", NULL);
	EXPECT_RC(rc, 0);
	assert_null(strstr(out, "crashed-R"));
	assert_null(strstr(out, "after-R"));
	assert_true(cursor("crash", 1) <= rts);

	/* the next holder of slot 3 */
	struct dxl_log_writer_cfg wc;
	dxl_log_writer_cfg_init(&wc);
	wc.shard = 1;
	wc.slot = 3;
	struct dxl_log_writer *lw;
	assert_int_equal(dxl_log_writer_new(g_zk, &wc, &lw), 0);
	assert_int_equal(dxl_log_writer_flush(lw, 5000), 0);
	dxl_log_writer_delete(&lw);

	rc = dxl(15000, "tail", "--shard", "1", "--dir", g_dir, "--group", "crash", NULL);
	EXPECT_RC(rc, 0);
	check_output(out, ir, g_nrec, 0);
	assert_true(cursor("crash", 1) > g_recs[is].ts);
	alarm(0);
}

/*
 * Issue 19.7 end to end: a writer whose clock was an hour ahead left its
 * watermark on ring 0 of shard 0 and closed it. The next 'dxl log append'
 * leases slot 0 first: it does not take that hour over (before, its clock
 * observed the ring's watermark and every record it appended was an hour
 * in the future, and so were the next holders'); it takes the next slot
 * and appends at its own clock, at most DXL_HLC_MAX_SKEW_MS ahead (its
 * ring was closed: it starts above what a tailer whose clock is that far
 * ahead may have resolved). Before, it appended 60 s ahead: the slot it
 * passed over had already moved its clock to the most a clock takes, and
 * its start was clamped at its clock + 60 s. (Last: the hour stays in
 * shard 0's ring 0.)
 */
static void test_tail_clock_jump_not_inherited(void **state)
{
	(void)state;
	SKIP_IF_NO_CLUSTER();
	alarm(60);
	assert_int_equal(dxl_writer_slot_take(g_zk, 0, 0), 0);
	struct raw w;
	raw_open(&w, 0, 0);
	uint64_t ahead = DXL_HLC_MAKE(dxl_wall_ms() + 3600 * 1000, 0);
	assert_int_equal(dxl_appender_heartbeat(w.ap, ahead), 0);
	raw_wait(&w);
	assert_int_equal(dxl_appender_close(w.ap, ahead), 0);
	raw_crash(&w);
	assert_int_equal(dxl_writer_slot_release(g_zk, 0, 0), 0);

	int ix = append(0, 1, "not-dragged", 0);
	uint64_t bound = DXL_HLC_MAKE(dxl_wall_ms() + DXL_HLC_MAX_SKEW_MS + 1000, 0);
	if (g_recs[ix].ts >= bound)
		fail_msg("appended at %llu: %llu ms ahead of the clock",
			 (unsigned long long)g_recs[ix].ts,
			 (unsigned long long)(DXL_HLC_PHYS(g_recs[ix].ts) - dxl_wall_ms()));
	alarm(0);
}

/*
 * A writer closes its ring at its end only while its slot lease outlasts
 * what the close may take (the final watermark's WRITE within the fabric's
 * timeout): a close whose WRITE lands after the lease ended may land on the
 * ring of the slot's next holder. A writer whose fabric timeout (60 s) is
 * longer than any lease leaves its ring open (the next holder of the slot
 * confirms and closes it); one with the default timeout (1 s, lease 1.5 s)
 * waits for a renewed lease and closes it. Seen from a raw appender on the
 * ring: an open ring is found claimed (no shard floor), a closed one free.
 */
static void close_at_end(uint32_t slot, uint32_t fabric_timeout_ms, bool want_closed)
{
	struct dxl_log_writer_cfg wc;
	dxl_log_writer_cfg_init(&wc);
	wc.shard = 1;
	wc.slot = (int)slot;
	if (fabric_timeout_ms)
		wc.fabric_timeout_ms = fabric_timeout_ms;
	struct dxl_log_writer *lw;
	assert_int_equal(dxl_log_writer_new(g_zk, &wc, &lw), 0);
	uint64_t ts;
	assert_int_equal(dxl_log_writer_append(lw, "lease", 5, 1, &ts), 0);
	struct dxl_log_writer_result res;
	assert_int_equal(dxl_log_writer_poll(lw, &res, 1, 5000), 1);
	assert_int_equal(res.status, 0);
	assert_int_equal(dxl_log_writer_flush(lw, 5000), 0);
	dxl_log_writer_delete(&lw);
	struct raw w;
	raw_open(&w, 1, slot);
	bool closed = dxl_appender_shard_floor(w.ap) != 0;
	assert_int_equal(dxl_appender_close(w.ap, dxl_hlc_now(&w.clk)), 0);
	raw_crash(&w);
	int ix = g_nrec++;
	g_recs[ix] = (struct rec){.shard = 1, .ts = ts};
	snprintf(g_recs[ix].payload, sizeof(g_recs[ix].payload), "lease");
	if (closed != want_closed)
		fail_msg("slot %u (fabric timeout %u ms): the writer %s its ring", slot,
			 fabric_timeout_ms, closed ? "closed" : "left open");
}

static void test_writer_closes_only_within_its_lease(void **state)
{
	(void)state;
	SKIP_IF_NO_CLUSTER();
	alarm(60);
	assert_true(dxl_zk_lease_ms(g_zk) < 60000);
	close_at_end(1, 60000, false);
	close_at_end(2, 0, true);
	alarm(0);
}

/* remove_node -- what the CM does when a node dies: a new configuration
 * (epoch + 1) without it in any shard (unless the CM did it already) */
static void remove_node(uint32_t id)
{
	for (int tries = 0; tries < 10; tries++) {
		struct dxl_cluster_config cfg;
		int32_t ver;
		assert_int_equal(dxl_cluster_config_read(g_zk, &cfg, &ver), 0);
		bool changed = false;
		for (uint32_t i = 0; i < cfg.nshards; i++) {
			struct dxl_cluster_shard s = cfg.shards[i];
			uint32_t reps[DXL_CONFIG_MAX_REPLICAS], n = 0, k = 0;
			reps[n++] = s.primary;
			for (uint32_t b = 0; b < s.nbackups; b++)
				reps[n++] = s.backups[b];
			for (uint32_t r = 0; r < n; r++)
				if (reps[r] != id)
					reps[k++] = reps[r];
			if (k == n)
				continue;
			assert_true(k >= 1);
			assert_int_equal(dxl_cluster_config_set_shard(&cfg, s.id, reps[0], reps + 1,
								      k - 1), 0);
			changed = true;
		}
		if (!changed) {
			dxl_cluster_config_clear(&cfg);
			return;
		}
		cfg.epoch++;
		int ret = dxl_cluster_config_cas(g_zk, &cfg, ver, NULL);
		dxl_cluster_config_clear(&cfg);
		if (ret == 0)
			return;
		assert_int_equal(ret, DXL_E_STALE); /* the CM was quicker: look again */
	}
	fail_msg("could not remove node %u from the configuration", id);
}

/* --follow across kill -9 of the replica being tailed (replica 1: the
 * first registered of each shard's configuration, the primary): the
 * output goes on from another replica, nothing lost or repeated, in order */
static void test_tail_follow_failover(void **state)
{
	(void)state;
	SKIP_IF_NO_CLUSTER();
	alarm(50);
	int mark = g_nrec;
	append(0, 5, "pre0", 0);
	append(1, 5, "pre1", 0);
	char from[32];
	snprintf(from, sizeof(from), "%llu", (unsigned long long)g_recs[mark].ts);
	char of[256], ef[256];
	snprintf(of, sizeof(of), "%s/failover.out", g_tmp);
	snprintf(ef, sizeof(ef), "%s/failover.err", g_tmp);
	const char *argv[] = {g_bin, "tail", "--all", "--dir", g_dir, "--from", from,
			      "--follow", NULL};
	g_follow = dxlt_spawn_io(argv, NULL, of, ef);
	assert_true(g_follow > 0);
	assert_true(wait_file(of, 10, NULL, 10000));

	pid_t p1 = replica_pid(1);
	assert_true(alive(p1));
	assert_int_equal(kill(p1, SIGKILL), 0);
	uint64_t end = dxl_now_ms() + 5000;
	while (alive(p1) && dxl_now_ms() < end)
		usleep(10000);
	assert_false(alive(p1));
	/* the tailer notices at its next poll */
	assert_true(wait_file(ef, 0, "continuing on replica", 10000));

	remove_node(1);
	append(0, 5, "post0", 0);
	append(1, 5, "post1", 0);
	bool all = wait_file(of, 20, NULL, 20000);
	kill(g_follow, SIGTERM);
	int rc = dxlt_wait_exit(g_follow, 10000);
	g_follow = -1;
	dxlt_slurp(of, out, CAP);
	dxlt_slurp(ef, err, CAP);
	if (!all)
		print_message("tail output:\n%s\nstderr:\n%s\n", out, err);
	assert_true(all);
	EXPECT_RC(rc, 0);
	check_output(out, mark, g_nrec, 0);
	assert_non_null(strstr(err, "shard 0: replica 1 failed"));
	assert_non_null(strstr(err, "shard 1: replica 1 failed"));
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tail_all_merged),
		cmocka_unit_test(test_tail_all_waits_for_slow_shard),
		cmocka_unit_test(test_tail_group_resume),
		cmocka_unit_test(test_tail_group_conflict),
		cmocka_unit_test(test_tail_stale_cursor),
		cmocka_unit_test(test_tail_crashed_writer_taken_over),
		cmocka_unit_test(test_writer_closes_only_within_its_lease),
		cmocka_unit_test(test_tail_follow_failover),
		cmocka_unit_test(test_tail_clock_jump_not_inherited),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
