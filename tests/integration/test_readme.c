/* test_readme.c -- the docs tell the truth (issue 21.6, 21.7):
 *
 * - test_docs_check: scripts/check-docs.py -- every option docs/cli.md's
 *   synopses name exists in that command's --help, every default they show
 *   is --help's, the exit-code table is there (no ZooKeeper needed);
 * - test_readme_log / test_readme_txn: README.md's two walkthroughs run
 *   verbatim (only their /tmp directory moved into the test's), with the
 *   ZooKeeper 'cluster up' starts itself (needs java; DXL_TEST_ZK set, as
 *   for every cluster test): the log demo must verify every acknowledged
 *   record with nothing reclaimed by retention, show the failover and the
 *   'hello' appended first; the transaction demo must commit and leave
 *   nothing running after its 'cluster down'.
 *
 * The repository root is found from the test binary (build/tests/..), or
 * $DXL_SRC_DIR. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
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
#include "tests/lib/proc.h"

static char g_root[PATH_MAX], g_bindir[PATH_MAX];
static char g_tmp[128];
static char g_out[1 << 23]; /* the log demo prints ~3 MB (tail) */

static int setup(void **state)
{
	(void)state;
	char dxl[PATH_MAX];
	assert_int_equal(dxlt_prog_path("dxl", dxl, sizeof(dxl)), 0);
	snprintf(g_bindir, sizeof(g_bindir), "%s", dxl);
	*strrchr(g_bindir, '/') = 0;
	/* build/bin -> the root; build/asan/bin (sanitizer builds) -> ../../.. */
	const char *src = getenv("DXL_SRC_DIR");
	char guess[PATH_MAX + 32], readme[PATH_MAX + 16];
	for (int up = 2; up <= 3; up++) {
		snprintf(guess, sizeof(guess), "%s/..%s", g_bindir, up == 2 ? "/.." : "/../..");
		if (!realpath(src ? src : guess, g_root))
			snprintf(g_root, sizeof(g_root), "%.4000s", src ? src : guess);
		snprintf(readme, sizeof(readme), "%s/README.md", g_root);
		if (src || access(readme, F_OK) == 0)
			break;
	}
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-readme-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	return 0;
}

/* pids_with -- live processes with needle in their command line; killed
 * when kill_them */
static int pids_with(const char *needle, bool kill_them)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	DIR *d = opendir("/proc");
	assert_non_null(d);
	struct dirent *e;
	int n = 0;
	while ((e = readdir(d))) {
		int pid = atoi(e->d_name);
		if (pid <= 0 || pid == getpid())
			continue;
		char path[64], buf[8192];
		snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		for (size_t i = 0; i < len; i++)
			if (!buf[i])
				buf[i] = ' ';
		buf[len] = 0;
		if (len && strstr(buf, needle)) {
			n++;
			if (kill_them)
				kill(pid, SIGKILL);
		}
	}
	closedir(d);
	return n;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[PATH_MAX * 2 + 256];
	const char *sub[] = {"log", "txn", NULL};
	for (int i = 0; sub[i]; i++) {
		snprintf(cmd, sizeof(cmd),
			 "[ -f '%s/%s/cluster.json' ] && '%s/dxl' cluster down --dir '%s/%s' "
			 ">/dev/null 2>&1; true",
			 g_tmp, sub[i], g_bindir, g_tmp, sub[i]);
		if (system(cmd) != 0)
			fprintf(stderr, "cluster down %s failed\n", sub[i]);
	}
	pids_with(g_tmp, true);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", g_tmp);
	return 0;
}

/* sh -- run cmd with bash in the repository root, output into g_out;
 * its exit status (-1: killed at the limit) */
static int sh(const char *cmd, int timeout_s)
{
	char of[256];
	snprintf(of, sizeof(of), "%s/out", g_tmp);
	fflush(NULL);
	pid_t p = fork();
	assert_true(p >= 0);
	if (p == 0) {
		if (chdir(g_root) != 0)
			_exit(126);
		if (!freopen(of, "w", stdout) || dup2(1, 2) < 0)
			_exit(126);
		setenv("DXL_BIN_DIR", g_bindir, 1);
		char scripts[PATH_MAX + 16];
		snprintf(scripts, sizeof(scripts), "%s/scripts", g_root);
		setenv("DXL_SCRIPTS", scripts, 0); /* zk.sh, for 'cluster up' */
		execl("/bin/bash", "bash", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_s * 1000;
	int st = 0;
	for (;;) {
		if (waitpid(p, &st, WNOHANG) == p)
			break;
		if (dxl_now_ms() > end) {
			kill(p, SIGKILL);
			waitpid(p, &st, 0);
			st = -1;
			break;
		}
		while (waitpid(-1, NULL, WNOHANG) > 0)
			; /* orphans (this is their subreaper) */
		usleep(50000);
	}
	dxlt_slurp(of, g_out, sizeof(g_out));
	return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define EXPECT_IN(needle)                                                       \
	do {                                                                    \
		if (!strstr(g_out, (needle)))                                   \
			print_message("'%s' not in the output:\n%s\n", (needle), g_out); \
		assert_non_null(strstr(g_out, (needle)));                       \
	} while (0)

static void test_docs_check(void **state)
{
	(void)state;
	if (system("command -v python3 >/dev/null 2>&1") != 0) {
		print_message("SKIPPED: no python3\n");
		skip();
	}
	char cmd[PATH_MAX * 2 + 64];
	snprintf(cmd, sizeof(cmd), "python3 scripts/check-docs.py '%s' docs/cli.md", g_bindir);
	int rc = sh(cmd, 60);
	print_message("%s", g_out);
	assert_int_equal(rc, 0);
}

static bool need_cluster_env(void)
{
	if (!getenv("DXL_TEST_ZK")) {
		print_message("SKIPPED: DXL_TEST_ZK unset (scripts/test.sh sets it)\n");
		return false;
	}
	if (system("command -v java python3 >/dev/null 2>&1") != 0) {
		print_message("SKIPPED: no java or python3\n");
		return false;
	}
	return true;
}

/* block -- README.md's walkthrough `which` (moved into g_tmp) */
static void block(const char *which, char *cmd, size_t cap)
{
	char get[PATH_MAX + 256];
	snprintf(get, sizeof(get), "python3 tests/integration/readme_blocks.py README.md '%s' %s",
		 g_tmp, which);
	assert_int_equal(sh(get, 30), 0);
	size_t n = strlen(g_out);
	assert_true(n < cap);
	memcpy(cmd, g_out, n + 1);
}

static void test_readme_log(void **state)
{
	(void)state;
	if (!need_cluster_env())
		skip();
	alarm(200);
	static char cmd[8192];
	block("log", cmd, sizeof(cmd));
	print_message("running README.md's walkthrough:\n%s", cmd);
	uint64_t t0 = dxl_now_ms();
	int rc = sh(cmd, 180);
	print_message("took %.1f s, exit %d\n", (double)(dxl_now_ms() - t0) / 1000, rc);
	assert_true(rc >= 0);
	EXPECT_IN("cluster default is up");
	EXPECT_IN("failover: shard 0");
	EXPECT_IN("MISSING");
	EXPECT_IN("0 failed in");
	/* --verify checked every acknowledged record of both shards: none
	 * missing, none reclaimed by retention before it could be checked */
	EXPECT_IN("verify: shard 0");
	EXPECT_IN("verify: shard 1");
	for (const char *p = g_out; (p = strstr(p, "verify: shard")); p++) {
		const char *eol = strchr(p, '\n');
		size_t n = eol ? (size_t)(eol - p) : strlen(p);
		char line[512];
		snprintf(line, sizeof(line), "%.*s", (int)(n < 511 ? n : 511), p);
		if (!strstr(line, " 0 missing") || !strstr(line, " ok") || strstr(line, "reclaim"))
			fail_msg("not verified completely: %s", line);
	}
	/* tail --from earliest still shows the first record */
	EXPECT_IN("\thello\n");
	EXPECT_IN("is down");
	assert_int_equal(pids_with(g_tmp, false), 0);
	alarm(0);
}

static void test_readme_txn(void **state)
{
	(void)state;
	if (!need_cluster_env())
		skip();
	alarm(180);
	static char cmd[8192];
	block("txn", cmd, sizeof(cmd));
	print_message("running README.md's walkthrough:\n%s", cmd);
	int rc = sh(cmd, 160);
	print_message("%s", g_out);
	assert_int_equal(rc, 0);
	EXPECT_IN("coordinator 1: pid");
	EXPECT_IN("hello\n");
	EXPECT_IN("committed commit_ts=");
	EXPECT_IN("coordinator 1 (pid");
	EXPECT_IN("is down");
	/* started again on its data: the committed insert is there */
	EXPECT_IN("is up again on its data");
	EXPECT_IN("world\n");
	assert_int_equal(pids_with(g_tmp, false), 0); /* the coordinator too */
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_docs_check),
		cmocka_unit_test(test_readme_log),
		cmocka_unit_test(test_readme_txn),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
