/* test_cli_up.c -- 'dxl cluster up' is safe to retry (issue 21.1):
 *
 * - every bad option is refused (exit 2) before anything starts: no DIR,
 *   no process;
 * - an unreachable --zk is refused (exit 4) before any replica starts;
 * - a start that fails late (a replica cannot listen) undoes everything it
 *   began: replicas, the ZooKeeper it started, DIR/zk, the new data
 *   directory, cluster.json; a retry then works;
 * - a second start on a DIR whose cluster runs is refused within seconds;
 *   a start on the data of a stopped cluster, or on a cluster name that
 *   already has a configuration in ZooKeeper, is refused without --force
 *   and changes nothing; --force starts it;
 * - a ZooKeeper left running in DIR/zk is reused (no second server, no hang);
 * - 'cluster status' names what is missing after a replica was removed
 *   (issue 21.3), exit 1, and --json gives the same;
 * - output lines of restart and log load (issue 21.8);
 * - 'cluster start' brings a stopped cluster back on its data under its
 *   last configuration (every acknowledged write there, writes taken) and
 *   refuses, changing nothing, when ZooKeeper lost the configuration or no
 *   member of a shard holds a trusted copy;
 * - a transaction meeting a changing configuration gets DXL_E_UNAVAIL
 *   (retried by time by the coordinator), never DXL_E_CONFLICT; 'dxl get'
 *   right after a failover commits, and an unavailable shard is exit 1,
 *   not "aborted by conflicts" (issue 21.2).
 *
 * Needs DXL_TEST_ZK=host:port (scripts/test.sh sets it) and java (for the
 * ZooKeeper 'cluster up' starts itself through scripts/zk.sh); skips with
 * a printed reason otherwise. The test process is a child subreaper, so the
 * processes 'cluster up' detaches are reaped (and found) here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zookeeper/zookeeper.h>

#include "common/common.h"
#include "dxl/coordproto.h"
#include "dxl/membership.h"
#include "tests/lib/proc.h"
#include "tests/lib/select.h"

static const char *g_zkc;
static char g_bin[PATH_MAX];
static char g_zksh[PATH_MAX + 32];
static char g_tmp[128];
static char g_cluster[32];
static char out[65536], err[65536];

static void reap_orphans(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

/* run -- dxl with args (NULL-terminated) and a time limit; stdout/stderr
 * into out/err; the exit status, -1 when killed at the limit */
static int run(const char *const *args, int timeout_ms)
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
		int in = open("/dev/null", O_RDONLY);
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
		if (dxl_now_ms() > end) {
			print_message("dxl %s %s did not exit in %d ms\n", args[0], args[1],
				      timeout_ms);
			kill(p, SIGKILL);
			waitpid(p, &st, 0);
			st = -1;
			break;
		}
		reap_orphans();
		usleep(5000);
	}
	dxlt_slurp(of, out, sizeof(out));
	dxlt_slurp(ef, err, sizeof(err));
	return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define EXPECT_RC(rc, want)                                                        \
	do {                                                                       \
		if ((rc) != (want))                                                \
			print_message("exit %d, want %d\nstdout:\n%s\nstderr:\n%s\n", \
				      (rc), (want), out, err);                     \
		assert_int_equal((rc), (want));                                    \
	} while (0)

#define EXPECT_IN(hay, needle)                                                      \
	do {                                                                        \
		if (!strstr((hay), (needle)))                                       \
			print_message("'%s' not in:\n%s\n", (needle), (hay));       \
		assert_non_null(strstr((hay), (needle)));                           \
	} while (0)

/* procs_with -- how many live processes (zombies reaped first) have
 * needle in their command line; kill them with SIGKILL when kill_them */
static int procs_with(const char *needle, bool kill_them)
{
	reap_orphans();
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
		if (!len)
			continue; /* a zombie, or a kernel thread */
		for (size_t i = 0; i < len; i++)
			if (!buf[i])
				buf[i] = ' ';
		buf[len] = 0;
		if (strstr(buf, needle)) {
			n++;
			if (kill_them)
				kill(pid, SIGKILL);
		}
	}
	closedir(d);
	return n;
}

/* exists -- dir + suffix exists */
static bool exists(const char *dir, const char *suffix)
{
	char path[512];
	snprintf(path, sizeof(path), "%s%s", dir, suffix);
	return access(path, F_OK) == 0;
}

static int setup(void **state)
{
	(void)state;
	g_zkc = getenv("DXL_TEST_ZK");
	assert_int_equal(dxlt_prog_path("dxl", g_bin, sizeof(g_bin)), 0);
	char bindir[PATH_MAX];
	snprintf(bindir, sizeof(bindir), "%s", g_bin);
	*strrchr(bindir, '/') = 0;
	const char *sd = getenv("DXL_SCRIPTS");
	if (sd)
		snprintf(g_zksh, sizeof(g_zksh), "%s/zk.sh", sd);
	else
		snprintf(g_zksh, sizeof(g_zksh), "%s/../../scripts/zk.sh", bindir);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-up-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	snprintf(g_cluster, sizeof(g_cluster), "up%d", (int)getpid());
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	/* whatever a failed test left: every process started in g_tmp */
	char cmd[PATH_MAX + 600];
	const char *sub[] = {"a", "b", "c", "d", "e", "f", "g", "st", NULL};
	for (int i = 0; sub[i]; i++) {
		char dir[256];
		snprintf(dir, sizeof(dir), "%s/%s", g_tmp, sub[i]);
		if (exists(dir, "/cluster.json")) {
			const char *down[] = {"cluster", "down", "--dir", dir, NULL};
			run(down, 30000);
		}
		snprintf(cmd, sizeof(cmd), "'%s' stop '%s/zk' >/dev/null 2>&1", g_zksh, dir);
		if (exists(dir, "/zk") && system(cmd) != 0)
			fprintf(stderr, "zk.sh stop %s/zk failed\n", dir);
	}
	procs_with(g_tmp, true);
	/* coordinators name no directory: their cluster (up<pid>-...) */
	char cl[64];
	snprintf(cl, sizeof(cl), " --cluster %s-", g_cluster);
	procs_with(cl, true);
	uint64_t end = dxl_now_ms() + 2000;
	while (dxl_now_ms() < end && waitpid(-1, NULL, WNOHANG) >= 0)
		usleep(10000);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", g_tmp);
	return 0;
}

static bool need_zk(void)
{
	if (!g_zkc) {
		print_message("SKIPPED: no ZooKeeper (DXL_TEST_ZK unset; scripts/test.sh sets it)\n");
		return false;
	}
	return true;
}

static bool need_java(void)
{
	if (system("command -v java >/dev/null 2>&1") != 0 || access(g_zksh, X_OK) != 0) {
		print_message("SKIPPED: no java or no %s\n", g_zksh);
		return false;
	}
	return true;
}

/* every option is checked before anything starts: exit 2 at once, no DIR,
 * no process (the old code started ZooKeeper and the replicas first for
 * the ones the replicas check: ring size, -o keys) */
static void test_bad_options(void **state)
{
	(void)state;
	if (!need_zk())
		skip();
	alarm(60);
	char dir[256];
	snprintf(dir, sizeof(dir), "%s/a", g_tmp);
	static const char *const bad[][6] = {
		{"--ring-size", "1000", NULL},
		{"-o", "no.such.key=1", NULL},
		{"-o", "log.writer_slots=lots", NULL},
		{"-o", "replica.node_id=7", NULL},
		{"-o", "zk.cluster=other", NULL},
		{"--cluster", "bad/name", NULL},
		{"--coordinators", "nonsense", NULL},
		{"--min-replicas", "4", NULL},
		{"--session-timeout", "5", NULL},
		{"--writer-slots", "0", NULL},
		{"-o", "fabric.listen=127.0.0.1:7000", NULL},
		{"surplus", NULL},
	};
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		const char *args[16] = {"cluster", "up", "--dir", dir, "--zk", g_zkc, "--cluster",
					g_cluster};
		int a = 8;
		for (int j = 0; bad[k][j]; j++)
			args[a++] = bad[k][j];
		args[a] = NULL;
		uint64_t t0 = dxl_now_ms();
		int rc = run(args, 30000);
		uint64_t ms = dxl_now_ms() - t0;
		print_message("cluster up %s %s: exit %d in %llu ms: %s", bad[k][0],
			      bad[k][1] ? bad[k][1] : "", rc, (unsigned long long)ms, err);
		EXPECT_RC(rc, 2);
		assert_true(ms < 2000);
		assert_false(exists(dir, ""));
		assert_int_equal(procs_with(dir, false), 0);
	}
	alarm(0);
}

/* an unreachable ZooKeeper: exit 4, and no replica started (the old code
 * started the three replicas first and left them running) */
static void test_unreachable_zk(void **state)
{
	(void)state;
	if (!need_zk())
		skip();
	alarm(60);
	char dir[256];
	snprintf(dir, sizeof(dir), "%s/b", g_tmp);
	/* a port nothing listens on: bound, never listened to */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	socklen_t sl = sizeof(sa);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	char zk[64];
	snprintf(zk, sizeof(zk), "127.0.0.1:%u", ntohs(sa.sin_port));
	const char *up[] = {"cluster", "up", "--dir", dir, "--zk", zk, NULL};
	int rc = run(up, 40000);
	close(fd);
	EXPECT_RC(rc, 4);
	EXPECT_IN(err, "cannot connect to ZooKeeper");
	assert_false(exists(dir, "/cluster.json"));
	assert_int_equal(procs_with(dir, false), 0);
	alarm(0);
}

/* a start that fails after ZooKeeper and a replica started undoes all of it
 * (own ZooKeeper: stopped, DIR/zk removed; data directory removed;
 * cluster.json removed), and a retry on the same DIR then works */
static void test_failed_start_undone(void **state)
{
	(void)state;
	if (!need_zk() || !need_java())
		skip();
	alarm(120);
	char dir[256];
	snprintf(dir, sizeof(dir), "%s/c", g_tmp);
	/* the replica's fabric port, held by us: the replica exits at start */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 1), 0);
	socklen_t sl = sizeof(sa);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	char listen_opt[64];
	snprintf(listen_opt, sizeof(listen_opt), "fabric.listen=127.0.0.1:%u",
		 ntohs(sa.sin_port));
	const char *up[] = {"cluster", "up", "--dir", dir, "--replicas", "1", "--shards", "1",
			    "-o", listen_opt, NULL};
	int rc = run(up, 60000);
	EXPECT_RC(rc, 1);
	EXPECT_IN(err, "exited during start-up");
	EXPECT_IN(err, "undone");
	EXPECT_IN(err, "ZooKeeper stopped");
	assert_int_equal(procs_with(dir, false), 0); /* no replica, no ZooKeeper */
	assert_false(exists(dir, "/cluster.json"));
	assert_false(exists(dir, "/zk"));
	assert_false(exists(dir, "/data/1"));
	assert_true(exists(dir, "/logs/replica-1.log")); /* the logs stay */
	close(fd);
	/* the retry (the port now free) starts within seconds */
	uint64_t t0 = dxl_now_ms();
	rc = run(up, 60000);
	EXPECT_RC(rc, 0);
	print_message("retry after the undone start: exit 0 in %llu ms\n",
		      (unsigned long long)(dxl_now_ms() - t0));
	EXPECT_IN(out, "(started here)");
	const char *down[] = {"cluster", "down", "--dir", dir, NULL};
	rc = run(down, 30000);
	EXPECT_RC(rc, 0);
	assert_int_equal(procs_with(dir, false), 0);
	alarm(0);
}

/* a second start on a running cluster's DIR: refused at once; on the data
 * of a stopped cluster, or on a cluster name with a configuration: refused
 * (nothing changed) without --force */
static void test_second_start(void **state)
{
	(void)state;
	if (!need_zk())
		skip();
	alarm(150);
	char dir[256], dir2[256];
	snprintf(dir, sizeof(dir), "%s/d", g_tmp);
	snprintf(dir2, sizeof(dir2), "%s/e", g_tmp);
	const char *up[] = {"cluster", "up", "--dir", dir, "--zk", g_zkc, "--cluster", g_cluster,
			    "--replicas", "2", "--shards", "1", NULL};
	int rc = run(up, 60000);
	EXPECT_RC(rc, 0);
	EXPECT_IN(out, "config epoch 1");
	char json1[8192], path[300];
	snprintf(path, sizeof(path), "%s/cluster.json", dir);
	dxlt_slurp(path, json1, sizeof(json1));

	uint64_t t0 = dxl_now_ms();
	rc = run(up, 20000);
	EXPECT_RC(rc, 1);
	assert_true(dxl_now_ms() - t0 < 5000);
	EXPECT_IN(err, "already running");
	char json2[8192];
	dxlt_slurp(path, json2, sizeof(json2));
	assert_string_equal(json1, json2); /* cluster.json untouched */
	assert_int_equal(procs_with(dir, false), 2);

	/* the same cluster name from another DIR: its configuration is not
	 * replaced, nothing is started or created */
	const char *up2[] = {"cluster", "up", "--dir", dir2, "--zk", g_zkc, "--cluster",
			     g_cluster, "--replicas", "1", "--shards", "1", NULL};
	rc = run(up2, 20000);
	EXPECT_RC(rc, 1);
	EXPECT_IN(err, "already has a configuration");
	EXPECT_IN(err, "epoch 1");
	assert_false(exists(dir2, ""));
	assert_int_equal(procs_with(dir2, false), 0);

	const char *down[] = {"cluster", "down", "--dir", dir, NULL};
	rc = run(down, 30000);
	EXPECT_RC(rc, 0);
	assert_int_equal(procs_with(dir, false), 0);

	/* up again on the stopped cluster's data: refused, nothing started */
	rc = run(up, 20000);
	EXPECT_RC(rc, 1);
	EXPECT_IN(err, "holds the data of an earlier cluster");
	assert_int_equal(procs_with(dir, false), 0);

	/* --force: started on it, the configuration replaced (a later epoch:
	 * the CM may have changed it while 'down' stopped the replicas) */
	const char *upf[] = {"cluster", "up", "--dir", dir, "--zk", g_zkc, "--cluster", g_cluster,
			     "--replicas", "2", "--shards", "1", "--force", NULL};
	rc = run(upf, 60000);
	EXPECT_RC(rc, 0);
	const char *ep = strstr(out, "config epoch ");
	assert_non_null(ep);
	assert_true(atoi(ep + 13) >= 2);
	rc = run(down, 30000);
	EXPECT_RC(rc, 0);
	alarm(0);
}

/* a ZooKeeper an earlier start left running in DIR/zk is reused: the start
 * neither hangs (the old zk.sh chose new ports and waited on them for
 * minutes) nor starts a second server */
static void test_zk_left_running(void **state)
{
	(void)state;
	if (!need_zk() || !need_java())
		skip();
	alarm(120);
	char dir[256], cmd[PATH_MAX + 600], zkc[256] = "";
	snprintf(dir, sizeof(dir), "%s/f", g_tmp);
	assert_int_equal(mkdir(dir, 0755), 0);
	snprintf(cmd, sizeof(cmd), "'%s' start '%s/zk' 2>/dev/null", g_zksh, dir);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	assert_non_null(fgets(zkc, sizeof(zkc), p));
	assert_int_equal(pclose(p), 0);
	zkc[strcspn(zkc, "\n")] = 0;
	assert_int_equal(procs_with(dir, false), 1);

	const char *up[] = {"cluster", "up", "--dir", dir, "--replicas", "1", "--shards", "1",
			    NULL};
	uint64_t t0 = dxl_now_ms();
	int rc = run(up, 40000);
	EXPECT_RC(rc, 0);
	print_message("cluster up on a running DIR/zk: %llu ms\n",
		      (unsigned long long)(dxl_now_ms() - t0));
	char want[300];
	snprintf(want, sizeof(want), "zookeeper: %s", zkc);
	EXPECT_IN(out, want);
	assert_int_equal(procs_with(dir, false), 2); /* one ZooKeeper, one replica */
	const char *down[] = {"cluster", "down", "--dir", dir, NULL};
	rc = run(down, 30000);
	EXPECT_RC(rc, 0);
	assert_int_equal(procs_with(dir, false), 0);
	alarm(0);
}

/* json_status -- 'cluster status --dir dir --json': its exit status; the
 * object into *o (NULL if not JSON) */
static int json_status(const char *dir, json_t **o)
{
	const char *st[] = {"cluster", "status", "--dir", dir, "--json", NULL};
	int rc = run(st, 20000);
	*o = json_loads(out, 0, NULL);
	return rc;
}

/* issue 21.3: a removed replica does not just disappear from 'cluster
 * status' with exit 0: the shards below their replication and the replica
 * of cluster.json that is not registered are named, exit 1, and --json
 * gives the same as data */
static void test_status_missing(void **state)
{
	(void)state;
	if (!need_zk())
		skip();
	alarm(120);
	char dir[256], name[48];
	snprintf(dir, sizeof(dir), "%s/b", g_tmp);
	snprintf(name, sizeof(name), "%s-st", g_cluster);
	const char *up[] = {"cluster", "up", "--dir", dir, "--zk", g_zkc, "--cluster", name,
			    "--replicas", "3", "--shards", "1", "--session-timeout", "1000", NULL};
	int rc = run(up, 60000);
	EXPECT_RC(rc, 0);
	const char *st[] = {"cluster", "status", "--dir", dir, NULL};
	rc = run(st, 20000);
	EXPECT_RC(rc, 0);
	assert_null(strstr(out, "MISSING"));
	json_t *o = NULL;
	rc = json_status(dir, &o);
	EXPECT_RC(rc, 0);
	assert_non_null(o);
	assert_true(json_is_true(json_object_get(o, "ok")));
	assert_int_equal(json_array_size(json_object_get(o, "missing")), 0);
	json_decref(o);

	const char *kill3[] = {"cluster", "kill", "3", "--dir", dir, NULL};
	rc = run(kill3, 30000);
	EXPECT_RC(rc, 0);
	/* until the CM removed it (the shard has 2 members) */
	uint64_t end = dxl_now_ms() + 30000;
	size_t nmem = 3;
	while (dxl_now_ms() < end) {
		rc = json_status(dir, &o);
		json_t *sh = json_array_get(json_object_get(json_object_get(o, "config"), "shards"),
					    0);
		nmem = json_array_size(json_object_get(sh, "members"));
		json_decref(o);
		if (nmem == 2)
			break;
		usleep(200000);
	}
	assert_int_equal(nmem, 2);
	rc = run(st, 20000);
	EXPECT_RC(rc, 1);
	EXPECT_IN(out, "MISSING");
	EXPECT_IN(out, "shard 0: 2 of 3 members");
	EXPECT_IN(out, "replica 3 of");
	rc = json_status(dir, &o);
	EXPECT_RC(rc, 1);
	assert_non_null(o);
	assert_true(json_is_false(json_object_get(o, "ok")));
	json_t *ab = json_object_get(o, "absent");
	assert_int_equal(json_array_size(ab), 1);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(ab, 0), "id")), 3);
	assert_int_equal(json_array_size(json_object_get(o, "missing")), 2);
	json_decref(o);
	/* --zk without cluster.json: the replication given checks the shard */
	const char *stz[] = {"cluster", "status", "--zk", g_zkc, "--cluster", name,
			     "--replication", "3", NULL};
	rc = run(stz, 20000);
	EXPECT_RC(rc, 1);
	EXPECT_IN(out, "shard 0: 2 of 3 members");
	const char *down[] = {"cluster", "down", "--dir", dir, NULL};
	rc = run(down, 30000);
	EXPECT_RC(rc, 0);
	alarm(0);
}

/* the config epoch in 'cluster status --json' of dir (0 if none) */
static long long status_epoch(const char *dir, size_t *members0)
{
	json_t *o = NULL;
	json_status(dir, &o);
	json_t *cfg = json_object_get(o, "config");
	long long e = (long long)json_integer_value(json_object_get(cfg, "epoch"));
	if (members0)
		*members0 = json_array_size(json_object_get(
			json_array_get(json_object_get(cfg, "shards"), 0), "members"));
	json_decref(o);
	return e;
}

/* issue 21.8: 'log load' prints its header without blank fields, a
 * configuration change that keeps the primary (a backup removed, re-added)
 * not as a failover "primary 1 -> 1", and 'cluster restart' the cluster's
 * configuration epoch rather than the replica's not-yet-applied 0 */
static void test_output_lines(void **state)
{
	(void)state;
	if (!need_zk())
		skip();
	alarm(150);
	char dir[256], name[48], logf[300];
	snprintf(dir, sizeof(dir), "%s/e", g_tmp);
	snprintf(name, sizeof(name), "%s-out", g_cluster);
	snprintf(logf, sizeof(logf), "%s/load.out", g_tmp);
	const char *up[] = {"cluster", "up", "--dir", dir, "--zk", g_zkc, "--cluster", name,
			    "--replicas", "3", "--shards", "1", "--session-timeout", "1000", NULL};
	int rc = run(up, 60000);
	EXPECT_RC(rc, 0);
	/* through sh, which writes load's exit status to a file (run() reaps
	 * every exited child of this subreaper) */
	char rcf[300], cmd[PATH_MAX + 1000];
	snprintf(rcf, sizeof(rcf), "%s/load.rc", g_tmp);
	snprintf(cmd, sizeof(cmd), "'%s' log load --dir '%s' --rate 200 --duration 12; echo $? > '%s'",
		 g_bin, dir, rcf);
	const char *load[] = {"/bin/sh", "-c", cmd, NULL};
	pid_t lp = dxlt_spawn(load, logf, false);
	assert_true(lp > 0);
	usleep(1500000);
	const char *kill3[] = {"cluster", "kill", "3", "--dir", dir, NULL};
	rc = run(kill3, 30000);
	EXPECT_RC(rc, 0);
	size_t nmem = 3;
	uint64_t end = dxl_now_ms() + 30000;
	while (dxl_now_ms() < end && (status_epoch(dir, &nmem), nmem != 2))
		usleep(200000);
	assert_int_equal(nmem, 2);
	const char *restart[] = {"cluster", "restart", "3", "--dir", dir, NULL};
	rc = run(restart, 90000);
	EXPECT_RC(rc, 0);
	static char rout[4096];
	snprintf(rout, sizeof(rout), "%.4000s", out);
	long long e = status_epoch(dir, NULL);
	char want[96];
	snprintf(want, sizeof(want), "cluster config epoch %lld", e);
	if (!strstr(rout, want)) /* the CM may have moved on meanwhile */
		snprintf(want, sizeof(want), "cluster config epoch %lld", e - 1);
	print_message("%s", rout);
	EXPECT_IN(rout, want);
	assert_true(e >= 2);
	char rcs[16] = "";
	end = dxl_now_ms() + 60000;
	while (dxl_now_ms() < end && (dxlt_slurp(rcf, rcs, sizeof(rcs)), !rcs[0])) {
		reap_orphans();
		usleep(100000);
	}
	int st = rcs[0] ? atoi(rcs) : -1;
	static char lo[65536];
	dxlt_slurp(logf, lo, sizeof(lo));
	if (st != 0)
		print_message("log load exit %d:\n%s\n", st, lo);
	assert_int_equal(st, 0);
	print_message("%s", lo);
	EXPECT_IN(lo, "200 appends/s");
	EXPECT_IN(lo, "for 12 s");
	assert_null(strstr(lo, ",  "));
	assert_null(strstr(lo, " , "));
	/* the primary (1) never changed: no "failover" line claims it did */
	assert_null(strstr(lo, "primary 1 -> 1"));
	if (strstr(lo, "no acknowledged append"))
		EXPECT_IN(lo, "configuration change: shard 0");
	else
		print_message("(no configuration change reached the writer: nothing to check)\n");
	const char *down[] = {"cluster", "down", "--dir", dir, NULL};
	rc = run(down, 30000);
	EXPECT_RC(rc, 0);
	alarm(0);
}

/* raw_get -- one TXN {GET table key} with max_tries to the coordinator at
 * addr (no client-side retry: the coordinator's own answer); the reply's
 * status, *attempts its attempts; fails the test on a transport error */
static int raw_get(const char *addr, uint32_t table, uint64_t key, uint32_t max_tries,
		   uint32_t *attempts, int timeout_ms)
{
	char host[64];
	uint16_t port;
	assert_int_equal(dxl_parse_hostport(addr, host, sizeof(host), &port), 0);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	assert_int_equal(inet_pton(AF_INET, host, &sa.sin_addr), 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		fail_msg("connect %s: %s", addr, strerror(errno));
	struct dxl_cproto_op op = {.op = DXL_CPROTO_OP_GET, .table = table, .key = key};
	struct dxl_cproto_buf b = {0};
	uint64_t req_id = 0x2102;
	assert_int_equal(dxl_cproto_encode_txn(&b, req_id, max_tries, &op, 1), 0);
	assert_int_equal(send(fd, b.p, b.len, MSG_NOSIGNAL), (ssize_t)b.len);
	free(b.p);
	static uint8_t buf[1 << 16];
	static struct dxl_cproto_msg m;
	size_t len = 0, total = 0;
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	while (dxl_cproto_frame_len(buf, len, &total) <= 0 || len < total) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		uint64_t now = dxl_now_ms();
		if (now >= end || poll(&pf, 1, (int)(end - now)) <= 0)
			fail_msg("coordinator %s: no reply within %d ms", addr, timeout_ms);
		ssize_t n = recv(fd, buf + len, sizeof(buf) - len, 0);
		if (n <= 0)
			fail_msg("coordinator %s: connection closed before the reply", addr);
		len += (size_t)n;
	}
	close(fd);
	char why[256];
	if (dxl_cproto_decode(buf, total, &m, why, sizeof(why)))
		fail_msg("undecodable reply: %s", why);
	assert_int_equal(m.kind, DXL_CPROTO_TXN_REPLY);
	assert_true(m.req_id == req_id);
	print_message("coordinator's reply: %s, attempts %u, maybe %u: %.*s\n",
		      m.status ? dxl_errname(m.status) : "committed", m.attempts, m.maybe,
		      (int)m.msg_len, m.msg);
	*attempts = m.attempts;
	return m.status;
}

/* issue 21.2: a transaction that meets a changing configuration (the
 * primary killed, an idle dxl-coord running) is reported by its code: the
 * coordinator retries it by time (coord.log_unavail_ms, whatever
 * max_tries says) and answers DXL_E_UNAVAIL if the shard stays without a
 * serving primary -- never DXL_E_CONFLICT after max_tries quick retries
 * (before: "aborted by conflicts 1000 times ... (configuration changing:
 * retry)", which the client told apart by the message text); the client
 * maps codes to exit codes: an unavailable shard is exit 1, not 4.
 * The key read was never written: a record written before the kill may
 * stay locked at the new primary for seconds (a promotion gate's
 * undecided records; see the report of issue 21), a conflict that is not
 * this test's subject. */
static void test_failover_client(void **state)
{
	(void)state;
	if (!need_zk())
		skip();
	alarm(200);
	char dir[256], name[48];
	snprintf(dir, sizeof(dir), "%s/g", g_tmp);
	snprintf(name, sizeof(name), "%s-fo", g_cluster);
	const char *up[] = {"cluster", "up", "--dir", dir, "--zk", g_zkc, "--cluster", name,
			    "--replicas", "3", "--shards", "1", "--coordinators", "1",
			    "-o", "engine.tables=1:64:1000", NULL};
	int rc = run(up, 90000);
	EXPECT_RC(rc, 0);
	char addr[256] = "";
	const char *cl = strstr(out, "\ncoordinator ");
	assert_non_null(cl);
	assert_int_equal(sscanf(cl, "\ncoordinator %*u: pid %*d addr %255s", addr), 1);
	uint32_t attempts = 0;
	int st = raw_get(addr, 1, 7, 0, &attempts, 60000);
	assert_int_equal(st, DXL_E_NOENT);
	const char *kill1[] = {"cluster", "kill", "1", "--dir", dir, NULL};
	rc = run(kill1, 30000);
	EXPECT_RC(rc, 0);
	uint64_t t0 = dxl_now_ms();
	/* sent at once with max_tries 1: the dead primary is still configured
	 * and registered (its session has not expired), so the first attempt
	 * meets it (unreachable). The old coordinator took that for a conflict
	 * and answered DXL_E_CONFLICT after the one try max_tries allows; now
	 * it is DXL_E_UNAVAIL, retried by time, and the answer comes once the
	 * backup is promoted (or DXL_E_UNAVAIL after coord.log_unavail_ms =
	 * 10 s) */
	st = raw_get(addr, 1, 7, 1, &attempts, 60000);
	print_message("kill -> the coordinator's answer: %llu ms\n",
		      (unsigned long long)(dxl_now_ms() - t0));
	assert_int_not_equal(st, DXL_E_CONFLICT);
	if (st != DXL_E_UNAVAIL)
		assert_int_equal(st, DXL_E_NOENT); /* the answer, validated */
	assert_true(attempts >= 2); /* the attempt that met the dead primary, and more */
	/* the client: the answer (exit 3, no such key), not "aborted by
	 * conflicts" (exit 4) */
	const char *get[] = {"get", "1", "7", "--dir", dir, "--tries", "1", NULL};
	rc = run(get, 60000);
	print_message("'dxl get' after the failover: %llu ms after the kill (exit %d): %s",
		      (unsigned long long)(dxl_now_ms() - t0), rc, err);
	EXPECT_RC(rc, 3);
	EXPECT_IN(err, "not found");
	/* the new primary killed too (whichever member the CM promoted): 1
	 * member left, below cm.min_replicas 2: no serving primary, said as
	 * such by its code (not a conflict) */
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_zkc, name, &zk), 0);
	struct dxl_cluster_config cfg;
	assert_int_equal(dxl_cluster_config_read(zk, &cfg, NULL), 0);
	char p2[16];
	snprintf(p2, sizeof(p2), "%u", cfg.shards[0].primary);
	print_message("the new primary: %s (epoch %llu)\n", p2, (unsigned long long)cfg.epoch);
	assert_int_not_equal(cfg.shards[0].primary, 1);
	dxl_cluster_config_clear(&cfg);
	dxl_zk_delete(&zk);
	const char *kill2[] = {"cluster", "kill", p2, "--dir", dir, NULL};
	rc = run(kill2, 30000);
	EXPECT_RC(rc, 0);
	t0 = dxl_now_ms();
	st = raw_get(addr, 1, 7, 0, &attempts, 60000);
	print_message("with the shard unavailable: %s after %llu ms\n", dxl_errname(st),
		      (unsigned long long)(dxl_now_ms() - t0));
	assert_int_equal(st, DXL_E_UNAVAIL);
	/* the client sends it again until --timeout (exit 1) */
	const char *get2[] = {"get", "1", "7", "--dir", dir, "--timeout", "4000", NULL};
	t0 = dxl_now_ms();
	rc = run(get2, 60000);
	print_message("'dxl get' with the shard unavailable: exit %d in %llu ms: %s", rc,
		      (unsigned long long)(dxl_now_ms() - t0), err);
	EXPECT_RC(rc, 1);
	const char *down[] = {"cluster", "down", "--dir", dir, NULL};
	rc = run(down, 40000);
	EXPECT_RC(rc, 0);
	alarm(0);
}

/* out_bin -- the last run's stdout again into out, NUL bytes (binary
 * values a text-format tail prints raw: transaction records) as '.' */
static void out_bin(void)
{
	char of[256];
	snprintf(of, sizeof(of), "%s/out", g_tmp);
	FILE *f = fopen(of, "rb");
	assert_non_null(f);
	size_t n = fread(out, 1, sizeof(out) - 1, f);
	fclose(f);
	for (size_t i = 0; i < n; i++)
		if (!out[i])
			out[i] = '.';
	out[n] = 0;
}

/* tree_sum -- a checksum of every file under DIR/data and of
 * DIR/cluster.json (names and contents) */
static void tree_sum(const char *dir, char *sum, size_t cap)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && find data cluster.json -type f -print0 | sort -z | xargs -0 md5sum | "
		 "md5sum", dir);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	size_t n = fread(sum, 1, cap - 1, p);
	sum[n] = 0;
	assert_int_equal(pclose(p), 0);
	assert_true(n > 32);
}

static zhandle_t *zk_raw(void)
{
	zhandle_t *zh = zookeeper_init(g_zkc, NULL, 4000, NULL, NULL, 0);
	assert_non_null(zh);
	for (int i = 0; i < 2000 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++)
		usleep(5000);
	assert_int_equal(zoo_state(zh), ZOO_CONNECTED_STATE);
	return zh;
}

/* no replica of ids 1..n registered in cluster name */
static void none_registered(const char *name, uint32_t n)
{
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_zkc, name, &zk), 0);
	for (uint32_t id = 1; id <= n; id++) {
		char *js = NULL;
		int64_t sess = 0;
		int r = dxl_member_get(zk, id, &js, &sess);
		free(js);
		if (r == 0)
			fail_msg("replica %u is registered: the refused start started it", id);
	}
	dxl_zk_delete(&zk);
}

/* issue 21 (left over): 'dxl cluster start' brings a whole stopped cluster
 * back on its data under its last configuration: after 'cluster down',
 * every acknowledged append and every committed transaction is there and
 * the cluster takes writes. Refused, changing nothing (no file of data/ or
 * cluster.json, no process, no registration, the configuration kept):
 * when ZooKeeper lost the configuration (exit 3), and when no member of a
 * shard holds a copy the configuration can trust (exit 1). Before, no
 * command did this ('cluster up' refused the data, '--force' wrote a new
 * configuration over the old one). */
static void test_start_on_data(void **state)
{
	(void)state;
	if (!need_zk())
		skip();
	alarm(400);
	char dir[256], name[48];
	snprintf(dir, sizeof(dir), "%s/st", g_tmp);
	snprintf(name, sizeof(name), "%s-sd", g_cluster);
	const char *up[] = {"cluster", "up", "--dir", dir, "--zk", g_zkc, "--cluster", name,
			    "--replicas", "3", "--shards", "2", "--coordinators", "1",
			    "-o", "engine.tables=1:64:1000", NULL};
	int rc = run(up, 90000);
	EXPECT_RC(rc, 0);
	/* acknowledged appends (exit 0: every one acknowledged) and committed
	 * inserts */
	enum { NREC = 20, NKEYS = 10 };
	for (int sh = 0; sh < 2; sh++) {
		const char *app[NREC + 8] = {"log", "append", "--dir", dir, "--shard",
					     sh ? "1" : "0"};
		static char vals[2][NREC][32];
		for (int i = 0; i < NREC; i++) {
			snprintf(vals[sh][i], sizeof(vals[sh][i]), "s%d-rec%d", sh, i);
			app[6 + i] = vals[sh][i];
		}
		app[6 + NREC] = NULL;
		rc = run(app, 60000);
		EXPECT_RC(rc, 0);
	}
	for (int k = 1; k <= NKEYS; k++) {
		char key[16], val[16];
		snprintf(key, sizeof(key), "%d", k);
		snprintf(val, sizeof(val), "v%d", k);
		const char *ins[] = {"insert", "1", key, val, "--dir", dir, NULL};
		rc = run(ins, 30000);
		EXPECT_RC(rc, 0);
	}
	const char *down[] = {"cluster", "down", "--dir", dir, NULL};
	rc = run(down, 40000);
	EXPECT_RC(rc, 0);
	const char *start[] = {"cluster", "start", "--dir", dir, NULL};
	char before[128], after[128];
	tree_sum(dir, before, sizeof(before));

	/* refused: ZooKeeper lost the configuration (moved away, put back
	 * with the same bytes afterwards) */
	char cpath[160];
	snprintf(cpath, sizeof(cpath), "/dxl/%s/config", name);
	zhandle_t *zh = zk_raw();
	static char cfgbuf[1 << 20];
	int clen = (int)sizeof(cfgbuf);
	struct Stat stt;
	assert_int_equal(zoo_get(zh, cpath, 0, cfgbuf, &clen, &stt), ZOK);
	assert_true(clen > 0);
	assert_int_equal(zoo_delete(zh, cpath, -1), ZOK);
	rc = run(start, 60000);
	print_message("ZooKeeper without the configuration: exit %d: %s", rc, err);
	EXPECT_RC(rc, 3);
	EXPECT_IN(err, "has no configuration of cluster");
	tree_sum(dir, after, sizeof(after));
	assert_string_equal(before, after);
	none_registered(name, 3);
	int gl = (int)sizeof(cfgbuf);
	assert_int_equal(zoo_get(zh, cpath, 0, cfgbuf + clen, &gl, &stt), ZNONODE);
	assert_int_equal(zoo_create(zh, cpath, cfgbuf, clen, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0),
			 ZOK);

	/* refused: no member of shard 0 holds a copy the configuration can
	 * trust (each member mark names another data identity: a recreated
	 * data directory) */
	static char marks[3][256];
	for (int id = 1; id <= 3; id++) {
		char mp[400];
		snprintf(mp, sizeof(mp), "%s/data/%d/shard-0.member", dir, id);
		dxlt_slurp(mp, marks[id - 1], sizeof(marks[0]));
		assert_non_null(strchr(marks[id - 1], '\n'));
		FILE *f = fopen(mp, "w");
		assert_non_null(f);
		fprintf(f, "data_id=0x1234\n%s", strchr(marks[id - 1], '\n') + 1);
		fclose(f);
	}
	char tampered[128];
	tree_sum(dir, tampered, sizeof(tampered));
	rc = run(start, 60000);
	print_message("no trusted copy of shard 0: exit %d: %s", rc, err);
	EXPECT_RC(rc, 1);
	EXPECT_IN(err, "shard 0: none of its 3 member(s)");
	EXPECT_IN(err, "is not the configuration's");
	tree_sum(dir, after, sizeof(after));
	assert_string_equal(tampered, after);
	none_registered(name, 3);
	int vl = (int)sizeof(cfgbuf) - clen;
	assert_int_equal(zoo_get(zh, cpath, 0, cfgbuf + clen, &vl, &stt), ZOK);
	assert_true(vl == clen && !memcmp(cfgbuf, cfgbuf + clen, (size_t)clen));
	zookeeper_close(zh);
	for (int id = 1; id <= 3; id++) {
		char mp[400];
		snprintf(mp, sizeof(mp), "%s/data/%d/shard-0.member", dir, id);
		FILE *f = fopen(mp, "w");
		assert_non_null(f);
		fputs(marks[id - 1], f);
		fclose(f);
	}
	tree_sum(dir, after, sizeof(after));
	assert_string_equal(before, after);

	/* the start on the data */
	rc = run(start, 120000);
	print_message("%s", out);
	EXPECT_RC(rc, 0);
	EXPECT_IN(out, "is up again on its data: 3 replicas, 2 shards");
	/* every acknowledged append, in order */
	for (int sh = 0; sh < 2; sh++) {
		const char *tl[] = {"tail", "--dir", dir, "--shard", sh ? "1" : "0", "--from",
				    "earliest", NULL};
		rc = run(tl, 60000);
		EXPECT_RC(rc, 0);
		out_bin();
		const char *at = out;
		for (int i = 0; i < NREC; i++) {
			char want[32];
			snprintf(want, sizeof(want), "\ts%d-rec%d\n", sh, i);
			const char *f = strstr(at, want);
			if (!f)
				fail_msg("shard %d: acknowledged record s%d-rec%d missing (or out of "
					 "order) after the start:\n%s", sh, sh, i, out);
			at = f + strlen(want);
		}
	}
	/* every committed insert */
	for (int k = 1; k <= NKEYS; k++) {
		char key[16], val[16];
		snprintf(key, sizeof(key), "%d", k);
		snprintf(val, sizeof(val), "v%d\n", k);
		const char *get[] = {"get", "1", key, "--dir", dir, NULL};
		rc = run(get, 60000);
		EXPECT_RC(rc, 0);
		EXPECT_IN(out, val);
	}
	/* and it takes writes */
	const char *app2[] = {"log", "append", "--dir", dir, "--shard", "1", "after-start", NULL};
	rc = run(app2, 60000);
	EXPECT_RC(rc, 0);
	const char *put[] = {"put", "1", "3", "three", "--dir", dir, NULL};
	rc = run(put, 60000);
	EXPECT_RC(rc, 0);
	const char *get3[] = {"get", "1", "3", "--dir", dir, NULL};
	rc = run(get3, 60000);
	EXPECT_RC(rc, 0);
	EXPECT_IN(out, "three");
	/* a second start while it runs is refused at once */
	rc = run(start, 20000);
	EXPECT_RC(rc, 1);
	EXPECT_IN(err, "the cluster is not stopped");
	/* a crash of every process (as a reboot leaves it: no clean shutdown,
	 * the replicas' ZooKeeper sessions still open): the start waits for
	 * ZooKeeper to expire them, then starts on the data */
	char cj[300];
	snprintf(cj, sizeof(cj), "%s/cluster.json", dir);
	json_t *j = json_load_file(cj, 0, NULL);
	assert_non_null(j);
	int nkilled = 0;
	const char *arrs[] = {"replicas", "coordinators"};
	for (int a = 0; a < 2; a++) {
		size_t i;
		json_t *r;
		json_array_foreach(json_object_get(j, arrs[a]), i, r) {
			pid_t pid = (pid_t)json_integer_value(json_object_get(r, "pid"));
			assert_true(pid > 0);
			assert_int_equal(kill(pid, SIGKILL), 0);
			nkilled++;
		}
	}
	json_decref(j);
	assert_int_equal(nkilled, 4);
	usleep(300000);
	reap_orphans();
	rc = run(start, 120000);
	print_message("after a crash of every process:\n%s", out);
	EXPECT_RC(rc, 0);
	EXPECT_IN(out, "is up again on its data");
	const char *tl1[] = {"tail", "--dir", dir, "--shard", "1", "--from", "earliest", NULL};
	rc = run(tl1, 60000);
	out_bin();
	EXPECT_RC(rc, 0);
	EXPECT_IN(out, "\ts1-rec19\n");
	EXPECT_IN(out, "\tafter-start\n");
	rc = run(get3, 60000);
	EXPECT_RC(rc, 0);
	EXPECT_IN(out, "three");
	rc = run(down, 40000);
	EXPECT_RC(rc, 0);
	alarm(0);
}

/* rp -- dxl-replica with args (NULL-terminated) to its exit, at most
 * timeout_ms; stdout/stderr into out/err */
static int rp(const char *const *args, int timeout_ms)
{
	static char bin[PATH_MAX];
	if (!bin[0])
		assert_int_equal(dxlt_prog_path("dxl-replica", bin, sizeof(bin)), 0);
	char saved[PATH_MAX];
	snprintf(saved, sizeof(saved), "%s", g_bin);
	snprintf(g_bin, sizeof(g_bin), "%s", bin);
	int rc = run(args, timeout_ms);
	snprintf(g_bin, sizeof(g_bin), "%s", saved);
	return rc;
}

/* ls_dir -- the names in dir, sorted, one line each */
static void ls_dir(const char *dir, char *buf, size_t cap)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "ls -1 '%s' 2>/dev/null", dir);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	size_t n = fread(buf, 1, cap - 1, p);
	buf[n] = 0;
	pclose(p);
}

/* issue 21.4: a dxl-replica start refused because its node id is held
 * (exit 4), given new engine.tables on an existing data directory, leaves
 * the directory as it was, and the node's normal start then works */
static void test_refused_start_changes_nothing(void **state)
{
	(void)state;
	if (!need_zk())
		skip();
	alarm(120);
	char a[256], b[256], name[48];
	snprintf(a, sizeof(a), "%s/h-a", g_tmp);
	snprintf(b, sizeof(b), "%s/h-b", g_tmp);
	snprintf(name, sizeof(name), "%s-rf", g_cluster);
	/* the node's directory, made by a normal start (stopped by --exit-after
	 * style: SIGTERM once registered) */
	const char *base[] = {"--node-id", "1", "--data-dir", a, "--zk", g_zkc, "--cluster", name,
			      "--shards", "0", "-o", "replica.exist_wait_ms=300", NULL};
	char lg[300];
	snprintf(lg, sizeof(lg), "%s/h-a.log", g_tmp);
	char rbin[PATH_MAX];
	assert_int_equal(dxlt_prog_path("dxl-replica", rbin, sizeof(rbin)), 0);
	const char *first[16] = {rbin};
	for (int i = 0; base[i]; i++)
		first[i + 1] = base[i];
	pid_t p1 = dxlt_spawn(first, lg, false);
	assert_true(p1 > 0);
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_zkc, name, &zk), 0);
	uint64_t end = dxl_now_ms() + 20000;
	char *js = NULL;
	int64_t sess = 0;
	while (dxl_now_ms() < end && dxl_member_get(zk, 1, &js, &sess) != 0)
		usleep(50000);
	free(js);
	kill(p1, SIGTERM);
	assert_int_equal(dxlt_wait_exit(p1, 20000), 0);
	char before[4096], after[4096];
	ls_dir(a, before, sizeof(before));
	print_message("data directory before: %s", before);
	/* another process holds node id 1 (its own directory) */
	const char *holder[] = {rbin, "--node-id", "1", "--data-dir", b, "--zk", g_zkc,
				"--cluster", name, "--shards", "0", NULL};
	snprintf(lg, sizeof(lg), "%s/h-b.log", g_tmp);
	pid_t p2 = dxlt_spawn(holder, lg, false);
	assert_true(p2 > 0);
	end = dxl_now_ms() + 20000;
	bool held = false;
	while (dxl_now_ms() < end && !held) {
		js = NULL;
		if (dxl_member_get(zk, 1, &js, &sess) == 0) {
			char pidtxt[32];
			snprintf(pidtxt, sizeof(pidtxt), "\"pid\":%d", (int)p2);
			held = js && strstr(js, pidtxt);
		}
		free(js);
		if (!held)
			usleep(50000);
	}
	assert_true(held);
	/* refused: the id is held; with tables the directory never had */
	const char *refused[] = {"--node-id", "1", "--data-dir", a, "--zk", g_zkc, "--cluster", name,
				 "--shards", "0", "-o", "replica.exist_wait_ms=300",
				 "-o", "engine.tables=1:64:1000", NULL};
	int rc = rp(refused, 30000);
	print_message("refused start: exit %d: %s", rc, err);
	EXPECT_RC(rc, 4);
	ls_dir(a, after, sizeof(after));
	print_message("data directory after: %s", after);
	assert_string_equal(before, after);
	kill(p2, SIGTERM);
	assert_int_equal(dxlt_wait_exit(p2, 20000), 0);
	/* the node's normal start works on it */
	pid_t p3 = dxlt_spawn(first, lg, false);
	assert_true(p3 > 0);
	end = dxl_now_ms() + 20000;
	held = false;
	while (dxl_now_ms() < end && !held && kill(p3, 0) == 0) {
		js = NULL;
		if (dxl_member_get(zk, 1, &js, &sess) == 0) {
			char pidtxt[32];
			snprintf(pidtxt, sizeof(pidtxt), "\"pid\":%d", (int)p3);
			held = js && strstr(js, pidtxt);
		}
		free(js);
		if (!held)
			usleep(50000);
	}
	if (!held) {
		static char l3[8192];
		dxlt_slurp(lg, l3, sizeof(l3));
		print_message("the normal start did not register:\n%s\n", l3);
	}
	assert_true(held);
	kill(p3, SIGTERM);
	assert_int_equal(dxlt_wait_exit(p3, 20000), 0);
	dxl_zk_delete(&zk);
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest all[] = {
		cmocka_unit_test(test_bad_options),
		cmocka_unit_test(test_unreachable_zk),
		cmocka_unit_test(test_failed_start_undone),
		cmocka_unit_test(test_second_start),
		cmocka_unit_test(test_zk_left_running),
		cmocka_unit_test(test_status_missing),
		cmocka_unit_test(test_output_lines),
		cmocka_unit_test(test_failover_client),
		cmocka_unit_test(test_refused_start_changes_nothing),
		cmocka_unit_test(test_start_on_data),
	};
	/* DXL_TEST_FILTER: cmocka patterns separated by commas */
	struct CMUnitTest tests[sizeof(all) / sizeof(all[0])];
	size_t n = dxlt_select_tests(all, sizeof(all) / sizeof(all[0]), tests,
				     getenv("DXL_TEST_FILTER"));
	return _cmocka_run_group_tests("test_cli_up", tests, n, setup, teardown);
}
