/* test_cli.c -- the dxl CLI end to end under a real ZooKeeper: cluster up
 * (3 replicas, 2 shards), status, log append (arguments and stdin), tail
 * (earliest, latest), a bad shard, cluster down.
 *
 * Needs DXL_TEST_ZK=host:port (scripts/test.sh sets it); skips with a
 * printed reason otherwise. The programs are build/bin/dxl and
 * build/bin/dxl-replica, found next to the test binary (../bin) or in
 * $DXL_BIN_DIR. The test process is a child subreaper, so the replicas
 * (grandchildren, detached by 'cluster up') are reaped here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "tests/lib/proc.h"

static const char *g_zkc;
static char g_bin[PATH_MAX];
static char g_tmp[128];
static char g_dir[256];
static char g_cluster[32];
static bool g_up;

/* reap_orphans -- collect exited replicas re-parented to us */
static void reap_orphans(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

/*
 * run -- fork+exec dxl with argv (NULL-terminated, without argv[0]), stdin
 * from in_file (or /dev/null), stdout and stderr into out/err (NUL-terminated,
 * cap bytes each). Waits at most timeout_ms (then SIGKILL). Returns the exit
 * status, -1 if killed.
 */
static int run(const char *const *args, const char *in_file, char *out, char *err,
	       size_t cap, int timeout_ms)
{
	const char *argv[64];
	int a = 0;
	argv[a++] = g_bin;
	for (int i = 0; args[i] && a < 63; i++)
		argv[a++] = args[i];
	argv[a] = NULL;
	char of[256], ef[256];
	snprintf(of, sizeof(of), "%s/out", g_tmp);
	snprintf(ef, sizeof(ef), "%s/err", g_tmp);
	fflush(NULL);
	pid_t p = fork();
	assert_true(p >= 0);
	if (p == 0) {
		int in = open(in_file ? in_file : "/dev/null", O_RDONLY);
		int o = open(of, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int e = open(ef, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (in < 0 || o < 0 || e < 0)
			_exit(126);
		dup2(in, 0);
		dup2(o, 1);
		dup2(e, 2);
		execv(g_bin, (char *const *)argv);
		_exit(127);
	}
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	int st = 0;
	for (;;) {
		pid_t r = waitpid(p, &st, WNOHANG);
		if (r == p)
			break;
		if (r < 0 && errno != EINTR)
			fail_msg("waitpid: %s", strerror(errno));
		if (dxl_now_ms() > end) {
			print_message("dxl %s did not exit in %d ms\n", args[0], timeout_ms);
			kill(p, SIGKILL);
			waitpid(p, &st, 0);
			return -1;
		}
		usleep(5000);
	}
	dxlt_slurp(of, out, cap);
	dxlt_slurp(ef, err, cap);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* replica_pids -- the pids in DIR/cluster.json */
static int replica_pids(pid_t *pids, int cap)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/cluster.json", g_dir);
	json_t *o = json_load_file(path, 0, NULL);
	if (!o)
		return 0;
	json_t *reps = json_object_get(o, "replicas");
	int n = 0;
	size_t i;
	json_t *r;
	json_array_foreach(reps, i, r) {
		if (n < cap)
			pids[n++] = (pid_t)json_integer_value(json_object_get(r, "pid"));
	}
	json_decref(o);
	return n;
}

static bool alive(pid_t p)
{
	reap_orphans();
	return p > 0 && kill(p, 0) == 0;
}

static int setup(void **state)
{
	(void)state;
	g_zkc = getenv("DXL_TEST_ZK");
	assert_int_equal(dxlt_prog_path("dxl", g_bin, sizeof(g_bin)), 0);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-cli-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	snprintf(g_dir, sizeof(g_dir), "%s/cluster", g_tmp);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (g_up) { /* the test failed half-way: bring it down anyway */
		static char out[65536], err[65536];
		const char *down[] = {"cluster", "down", "--dir", g_dir, NULL};
		alarm(30);
		run(down, NULL, out, err, sizeof(out), 20000);
		alarm(0);
		pid_t pids[16];
		int n = replica_pids(pids, 16);
		for (int i = 0; i < n; i++)
			if (alive(pids[i]))
				kill(pids[i], SIGKILL);
		g_up = false;
	}
	uint64_t end = dxl_now_ms() + 2000;
	while (dxl_now_ms() < end && waitpid(-1, NULL, WNOHANG) >= 0)
		usleep(10000); /* until no child is left (ECHILD) */
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", g_tmp);
	return 0;
}

static size_t count_lines(const char *s)
{
	size_t n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

#define EXPECT_RC(rc, want)                                                   \
	do {                                                                  \
		if ((rc) != (want))                                           \
			print_message("exit %d, want %d\nstdout:\n%s\nstderr:\n%s\n", \
				      (rc), (want), out, err);                \
		assert_int_equal((rc), (want));                               \
	} while (0)

static void test_cli(void **state)
{
	(void)state;
	if (!g_zkc) {
		print_message("SKIPPED: no ZooKeeper (DXL_TEST_ZK unset; scripts/test.sh sets it)\n");
		skip();
	}
	if (access(g_bin, X_OK) != 0) {
		print_message("SKIPPED: %s not built\n", g_bin);
		skip();
	}
	alarm(55);
	static char out[65536], err[65536];
	snprintf(g_cluster, sizeof(g_cluster), "cli%d", (int)getpid());
	int rc;

	/* --help lists the subcommands */
	const char *help[] = {"--help", NULL};
	rc = run(help, NULL, out, err, sizeof(out), 5000);
	EXPECT_RC(rc, 0);
	assert_non_null(strstr(out, "cluster up"));
	assert_non_null(strstr(out, "log append"));
	assert_non_null(strstr(out, "tail"));

	/* cluster up: 3 replicas, 2 shards */
	const char *up[] = {"cluster", "up", "--dir", g_dir, "--zk", g_zkc, "--cluster",
			    g_cluster, "--replicas", "3", "--shards", "2",
			    "--durability", "process", "--ring-size", "256K",
			    "--writer-slots", "4", NULL};
	g_up = true;
	rc = run(up, NULL, out, err, sizeof(out), 40000);
	EXPECT_RC(rc, 0);
	assert_non_null(strstr(out, "3 replicas, 2 shards"));
	pid_t pids[16];
	assert_int_equal(replica_pids(pids, 16), 3);
	for (int i = 0; i < 3; i++)
		assert_true(alive(pids[i]));

	/* status: the config and 3 nodes */
	const char *status[] = {"cluster", "status", "--dir", g_dir, NULL};
	rc = run(status, NULL, out, err, sizeof(out), 10000);
	EXPECT_RC(rc, 0);
	assert_non_null(strstr(out, "shards: 2, nodes: 3"));
	for (int sh = 0; sh < 2; sh++) {
		char want[64];
		snprintf(want, sizeof(want), "shard %d: 1(primary,up,", sh);
		const char *line = strstr(out, want);
		assert_non_null(line);
		const char *eol = strchr(line, '\n');
		assert_non_null(eol);
		const char *b2 = strstr(line, " 2(backup,up,"), *b3 = strstr(line, " 3(backup,up,");
		assert_true(b2 && b2 < eol && b3 && b3 < eol);
	}
	assert_non_null(strstr(out, "configuration manager: node "));
	assert_non_null(strstr(out, "nodes: 3 registered"));

	/* append 50 records to shard 0 from arguments */
	static char recs[50][16];
	const char *app0[64] = {"log", "append", "--shard", "0", "--zk", g_zkc,
				"--cluster", g_cluster};
	for (int i = 0; i < 50; i++) {
		snprintf(recs[i], sizeof(recs[i]), "rec-%02d", i);
		app0[8 + i] = recs[i];
	}
	app0[58] = NULL;
	rc = run(app0, NULL, out, err, sizeof(out), 15000);
	EXPECT_RC(rc, 0);
	assert_int_equal(count_lines(out), 50);
	static uint64_t ts0[50];
	{
		char *p = out;
		for (int i = 0; i < 50; i++) {
			char *nl = strchr(p, '\n');
			assert_non_null(nl);
			*nl = 0;
			unsigned long long t;
			char st[16];
			assert_int_equal(sscanf(p, "%llu\t%15s", &t, st), 2);
			assert_string_equal(st, "ok");
			ts0[i] = t;
			if (i)
				assert_true(ts0[i] > ts0[i - 1]);
			p = nl + 1;
		}
	}

	/* append 30 records to shard 1 from stdin */
	char inf[256];
	snprintf(inf, sizeof(inf), "%s/in", g_tmp);
	FILE *fp = fopen(inf, "w");
	assert_non_null(fp);
	for (int i = 0; i < 30; i++)
		fprintf(fp, "one-%d\n", i);
	fclose(fp);
	const char *app1[] = {"log", "append", "--shard", "1", "--dir", g_dir, NULL};
	rc = run(app1, inf, out, err, sizeof(out), 15000);
	EXPECT_RC(rc, 0);
	assert_int_equal(count_lines(out), 30);

	/* tail shard 0 from earliest: exactly those 50, in order */
	const char *tail0[] = {"tail", "--shard", "0", "--dir", g_dir, "--from", "earliest",
			       NULL};
	rc = run(tail0, NULL, out, err, sizeof(out), 15000);
	EXPECT_RC(rc, 0);
	if (count_lines(out) != 50)
		print_message("tail output:\n%s\n", out);
	assert_int_equal(count_lines(out), 50);
	{
		char *p = out;
		for (int i = 0; i < 50; i++) {
			char *nl = strchr(p, '\n');
			*nl = 0;
			unsigned sh, w;
			unsigned long long t, txn;
			char payload[32];
			assert_int_equal(sscanf(p, "%u\t%llu\t%u\t%llu\t%31s", &sh, &t, &w, &txn,
						payload), 5);
			assert_int_equal(sh, 0);
			assert_int_equal(t, ts0[i]);
			assert_int_equal(w, 0); /* writer slot 0 */
			assert_string_equal(payload, recs[i]);
			p = nl + 1;
		}
	}

	/* shard 1 in json: 30 records, payload base64 ("one-0" = b25lLTA=) */
	const char *tail1[] = {"tail", "--shard", "1", "--dir", g_dir, "--format", "json",
			       NULL};
	rc = run(tail1, NULL, out, err, sizeof(out), 15000);
	EXPECT_RC(rc, 0);
	assert_int_equal(count_lines(out), 30);
	assert_non_null(strstr(out, "\"shard\":1,"));
	assert_non_null(strstr(out, "\"payload\":\"b25lLTA=\""));

	/* --from latest: nothing */
	const char *tailn[] = {"tail", "--shard", "0", "--dir", g_dir, "--from", "latest",
			       NULL};
	rc = run(tailn, NULL, out, err, sizeof(out), 15000);
	EXPECT_RC(rc, 0);
	assert_string_equal(out, "");

	/* bad input: unknown shard, missing --shard, bad --from */
	const char *bad[] = {"log", "append", "--shard", "7", "--dir", g_dir, "x", NULL};
	rc = run(bad, NULL, out, err, sizeof(out), 10000);
	EXPECT_RC(rc, 3);
	assert_non_null(strstr(err, "unknown shard 7"));
	assert_string_equal(out, "");
	const char *bad2[] = {"tail", "--dir", g_dir, NULL};
	rc = run(bad2, NULL, out, err, sizeof(out), 10000);
	EXPECT_RC(rc, 2);
	assert_non_null(strstr(err, "--shard"));
	const char *bad3[] = {"tail", "--shard", "0", "--dir", g_dir, "--from", "yesterday",
			      NULL};
	rc = run(bad3, NULL, out, err, sizeof(out), 10000);
	EXPECT_RC(rc, 2);
	assert_non_null(strstr(err, "yesterday"));

	/* cluster down: every replica gone */
	const char *down[] = {"cluster", "down", "--dir", g_dir, NULL};
	rc = run(down, NULL, out, err, sizeof(out), 30000);
	EXPECT_RC(rc, 0);
	g_up = false;
	assert_non_null(strstr(out, "is down"));
	for (int i = 0; i < 3; i++) {
		uint64_t end = dxl_now_ms() + 2000;
		while (alive(pids[i]) && dxl_now_ms() < end)
			usleep(10000);
		assert_false(alive(pids[i]));
	}
	/* status now: the config, but no replica up */
	rc = run(status, NULL, out, err, sizeof(out), 10000);
	EXPECT_RC(rc, 1);
	assert_non_null(strstr(out, "nodes: 0 registered"));
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cli),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
