/* test_zk_ensemble.c -- a dxl cluster on a 3-server ZooKeeper ensemble
 * survives the loss of one server:
 *
 *  1. 'dxl cluster up' (3 replicas, 2 shards) on an ensemble started with
 *     scripts/zk.sh --servers 3; 'dxl log load --verify' runs while the
 *     quorum leader is SIGKILLed: every append is acknowledged (failed 0)
 *     and every acknowledged record is in the log once, in order;
 *  2. with that server still down, kill -9 of replica 1 (the primary of
 *     both shards) under load: the CM (on the remaining 2 servers) removes
 *     it, a backup becomes primary, epoch + 1, the load goes on (a failover
 *     per shard, failed 0, verified);
 *  3. the ZooKeeper server comes back (it rejoins the quorum); replica 1 is
 *     restarted, registers, catches up and the CM adds it back to both
 *     shards; a last load on the 3 members verifies.
 *
 * Skips (with the reason) when ZooKeeper or java is not installed or the
 * tools are not built. Every wait is bounded; a SIGALRM watchdog kills the
 * servers and replicas; a reaper shell kills them if this process dies
 * without clean-up. The test process is a child subreaper: the replicas
 * ('cluster up' detaches them) are reaped here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>
#include <sys/prctl.h>

#include "test_membership_util.h"

#include "dxl/membership.h"
#include "tests/lib/cli_run.h"
#include "tests/lib/proc.h"

#define CAP 65536

static struct mt_server g_srv;
static bool g_have_srv;
static const char *g_skip_why;
static char g_bin[PATH_MAX];
static char g_tmp[128];
static char g_dir[256];
static char g_cluster[64];
static bool g_up;
static pid_t g_reaper;
static pid_t g_load; /* a running 'dxl log load' */
static char out[CAP], err[CAP];

/* the replicas' pids, for the watchdog (async-signal-safe kill) */
static volatile sig_atomic_t g_rpids[3];

/* ---- processes ------------------------------------------------------------ */

/* replica_pid -- the pid of node id in DIR/cluster.json (-1 if none) */
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

static void note_replicas(void)
{
	for (uint32_t id = 1; id <= 3; id++)
		g_rpids[id - 1] = replica_pid(id);
}

/* reap -- collect replica zombies (they are our children: subreaper) */
static void reap(void)
{
	for (int i = 0; i < 3; i++)
		if (g_rpids[i] > 0)
			waitpid(g_rpids[i], NULL, WNOHANG);
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "\ntest_zk_ensemble: watchdog fired, killing the "
				  "replicas and ZooKeeper servers\n";
	if (write(2, msg, sizeof(msg) - 1) < 0) {
	}
	for (int i = 0; i < 3; i++)
		if (g_rpids[i] > 0)
			kill(g_rpids[i], SIGKILL);
	mt_kill_all_servers();
	_exit(124);
}

static void watchdog(unsigned seconds)
{
	signal(SIGALRM, on_alarm);
	alarm(seconds);
}

/*
 * cluster_reaper -- a shell that outlives this process only if it dies
 * without clean-up: then it SIGKILLs every replica DIR/cluster.json names
 * at that moment (restarts included). teardown kills and reaps it first.
 */
static pid_t cluster_reaper(void)
{
	char script[1024];
	snprintf(script, sizeof(script),
		 "while kill -0 %d 2>/dev/null; do sleep 0.3; done; "
		 "for p in $(grep -o '\"pid\": *[0-9]*' '%s/cluster.json' | grep -o '[0-9]*$'); "
		 "do kill -KILL $p; done",
		 (int)getpid(), g_dir);
	char *argv[] = {"/bin/sh", "-c", script, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	return rc == 0 ? pid : 0;
}

/* dxl ARGS... (NULL-terminated, without the program): exit status, output in
 * out/err */
static int dxl(int timeout_ms, ...)
{
	const char *argv[64];
	int a = 0;
	argv[a++] = g_bin;
	va_list ap;
	va_start(ap, timeout_ms);
	const char *s;
	while ((s = va_arg(ap, const char *)) && a < 63)
		argv[a++] = s;
	va_end(ap);
	argv[a] = NULL;
	return dxlt_run(argv, NULL, g_tmp, out, err, CAP, timeout_ms);
}

#define EXPECT_RC(rc, want)                                                     \
	do {                                                                    \
		if ((rc) != (want))                                             \
			print_message("exit %d, want %d\nstdout:\n%s\nstderr:\n%s\n", \
				      (rc), (want), out, err);                  \
		assert_int_equal((rc), (want));                                 \
	} while (0)

/* load_start -- 'dxl log load' in the background: its JSON summary into
 * g_tmp/<tag>.json, its output into g_tmp/<tag>.out/.err */
static pid_t load_start(const char *tag, const char *seconds, const char *rate)
{
	static char jf[256], of[256], ef[256];
	snprintf(jf, sizeof(jf), "%s/%s.json", g_tmp, tag);
	snprintf(of, sizeof(of), "%s/%s.out", g_tmp, tag);
	snprintf(ef, sizeof(ef), "%s/%s.err", g_tmp, tag);
	const char *argv[] = {g_bin, "log", "load", "--dir", g_dir, "--rate", rate,
			      "--duration", seconds, "--json", jf, "--verify", NULL};
	pid_t p = dxlt_spawn_io(argv, NULL, of, ef);
	assert_true(p > 0);
	g_load = p;
	return p;
}

/* wait_text -- g_tmp/<tag>.out contains `what` (within timeout_ms) */
static bool wait_text(const char *tag, const char *what, int timeout_ms)
{
	char of[256];
	snprintf(of, sizeof(of), "%s/%s.out", g_tmp, tag);
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	do {
		dxlt_slurp(of, out, CAP);
		if (strstr(out, what))
			return true;
		usleep(20000);
	} while (dxl_now_ms() < end);
	char ef[256];
	snprintf(ef, sizeof(ef), "%s/%s.err", g_tmp, tag);
	dxlt_slurp(ef, err, CAP);
	print_message("'%s' not seen in %d ms; output of %s:\n%s\nstderr:\n%s\n", what,
		      timeout_ms, tag, out, err);
	return false;
}

/* load_finish -- wait for the load, check its summary: exit 0, failed 0,
 * verified, something acknowledged; returns the parsed JSON */
static json_t *load_finish(pid_t p, const char *tag, int timeout_ms)
{
	int rc = dxlt_wait_exit(p, timeout_ms);
	g_load = 0;
	char path[256];
	snprintf(path, sizeof(path), "%s/%s.out", g_tmp, tag);
	dxlt_slurp(path, out, CAP);
	snprintf(path, sizeof(path), "%s/%s.err", g_tmp, tag);
	dxlt_slurp(path, err, CAP);
	EXPECT_RC(rc, 0);
	snprintf(path, sizeof(path), "%s/%s.json", g_tmp, tag);
	json_t *o = json_load_file(path, 0, NULL);
	assert_non_null(o);
	assert_int_equal(json_integer_value(json_object_get(o, "failed")), 0);
	assert_true(json_integer_value(json_object_get(o, "acked")) > 0);
	assert_true(json_is_true(json_object_get(o, "verified")));
	return o;
}

/* ---- ZooKeeper ------------------------------------------------------------ */

static struct dxl_zk *zk_open(void)
{
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_srv.connect, g_cluster, &zk), 0);
	return zk;
}

/* members -- shard's members in the configuration (primary first) */
static uint32_t members(const struct dxl_cluster_config *cfg, uint32_t shard, uint32_t *ids)
{
	const struct dxl_cluster_shard *s = dxl_cluster_config_shard(cfg, shard);
	if (!s)
		return 0;
	uint32_t n = 0;
	ids[n++] = s->primary;
	for (uint32_t i = 0; i < s->nbackups; i++)
		ids[n++] = s->backups[i];
	return n;
}

static bool has(const uint32_t *ids, uint32_t n, uint32_t id)
{
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* server_leader -- the index (1..3) of the quorum leader, 0 if none */
static int server_leader(void)
{
	for (int i = 1; i <= 3; i++) {
		char mode[32];
		mt_server_mode(&g_srv, i, mode, sizeof(mode));
		if (!strcmp(mode, "leader"))
			return i;
	}
	return 0;
}

/* ---- fixture -------------------------------------------------------------- */

/*
 * tsan_children -- under 'make tsan' (DXL_TEST_SANITIZER=tsan) the dxl tools
 * this test runs are TSan builds too. The ZooKeeper C client (not
 * instrumented) formats endpoint names into a static buffer
 * (format_endpoint_info) when it logs connection events, so a process with
 * several sessions -- 'dxl log load' has one per shard -- gets a report from
 * inside libzookeeper_mt whenever two connect at once. The children get a
 * suppression for that library only; this process keeps the plain options.
 */
static void tsan_children(void)
{
	const char *san = getenv("DXL_TEST_SANITIZER");
	if (!san || strcmp(san, "tsan"))
		return;
	char path[200], opts[1024];
	snprintf(path, sizeof(path), "%s/tsan.supp", g_tmp);
	FILE *f = fopen(path, "w");
	if (!f)
		return;
	fputs("# the ZooKeeper C client's static buffer in format_endpoint_info\n"
	      "race:libzookeeper_mt.so\n", f);
	fclose(f);
	const char *old = getenv("TSAN_OPTIONS");
	snprintf(opts, sizeof(opts), "%s%ssuppressions=%s", old ? old : "", old ? " " : "", path);
	setenv("TSAN_OPTIONS", opts, 1);
}

static int setup(void **state)
{
	(void)state;
	if (access("/usr/share/java/zookeeper.jar", R_OK) != 0) {
		g_skip_why = "ZooKeeper is not installed (/usr/share/java/zookeeper.jar; "
			     "scripts/install-deps.sh)";
		return 0;
	}
	if (system("command -v java >/dev/null 2>&1") != 0) {
		g_skip_why = "java is not installed (ZooKeeper needs a JRE)";
		return 0;
	}
	char rep[PATH_MAX];
	if (dxlt_prog_path("dxl", g_bin, sizeof(g_bin)) || access(g_bin, X_OK) != 0 ||
	    dxlt_prog_path("dxl-replica", rep, sizeof(rep)) || access(rep, X_OK) != 0) {
		g_skip_why = "build/bin/dxl or dxl-replica not built";
		return 0;
	}
	if (!mt_zk_sh()) {
		g_skip_why = "scripts/zk.sh not found (set DXL_ZK_SH)";
		return 0;
	}
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-zkens-XXXXXX");
	if (!mkdtemp(g_tmp))
		return -1;
	snprintf(g_dir, sizeof(g_dir), "%s/cluster", g_tmp);
	mt_cluster_name(g_cluster, sizeof(g_cluster), "ens");
	watchdog(60);
	if (mt_server_start(&g_srv, 3) != 0) {
		mt_server_stop(&g_srv);
		g_skip_why = "scripts/zk.sh could not start a 3-server ensemble";
		alarm(0);
		return 0;
	}
	g_have_srv = true;
	tsan_children();
	/* the replicas ('cluster up' detaches them) become our children, to
	 * be reaped here; the ZooKeeper servers (started before) do not */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	alarm(0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	watchdog(60);
	if (g_up) {
		int rc = dxl(20000, "cluster", "down", "--dir", g_dir, NULL);
		if (rc != 0)
			fprintf(stderr, "cluster down: exit %d\n%s\n%s\n", rc, out, err);
		note_replicas();
		for (int i = 0; i < 3; i++)
			if (g_rpids[i] > 0 && kill(g_rpids[i], 0) == 0) {
				kill(g_rpids[i], SIGKILL);
				waitpid(g_rpids[i], NULL, 0);
			}
		g_up = false;
	}
	if (g_reaper > 0) {
		kill(g_reaper, SIGKILL);
		waitpid(g_reaper, NULL, 0);
		g_reaper = 0;
	}
	if (g_load > 0) { /* a test that failed half-way */
		kill(g_load, SIGKILL);
		waitpid(g_load, NULL, 0);
		g_load = 0;
	}
	if (g_have_srv)
		mt_stop_all_servers();
	g_have_srv = false;
	/* every replica of every incarnation: no child is left (ECHILD) */
	uint64_t end = dxl_now_ms() + 3000;
	while (dxl_now_ms() < end && waitpid(-1, NULL, WNOHANG) >= 0)
		usleep(10000);
	alarm(0);
	if (g_tmp[0]) {
		char *rm[] = {"/bin/rm", "-rf", g_tmp, NULL};
		mt_run(rm, NULL, 0);
	}
	return 0;
}

/* ---- the test --------------------------------------------------------------- */

static void test_cluster_survives_zk_server_loss(void **state)
{
	(void)state;
	if (g_skip_why) {
		print_message("SKIPPED: %s\n", g_skip_why);
		skip();
	}
	watchdog(75);
	/* the ensemble serves: every server has a mode */
	int leader = server_leader();
	assert_true(leader >= 1 && leader <= 3);

	int rc = dxl(30000, "cluster", "up", "--dir", g_dir, "--zk", g_srv.connect, "--cluster",
		     g_cluster, "--replicas", "3", "--shards", "2", "--ring-size", "256K",
		     "--writer-slots", "4", "--session-timeout", "2000", NULL);
	g_up = true;
	EXPECT_RC(rc, 0);
	note_replicas();
	g_reaper = cluster_reaper();
	struct dxl_zk *zk = zk_open();
	struct dxl_cluster_config cfg;
	assert_int_equal(dxl_cluster_config_read(zk, &cfg, NULL), 0);
	uint64_t epoch0 = cfg.epoch;
	uint32_t ids[DXL_CONFIG_MAX_REPLICAS];
	for (uint32_t s = 0; s < 2; s++) {
		assert_int_equal(members(&cfg, s, ids), 3);
		assert_int_equal(ids[0], 1);
	}
	dxl_cluster_config_clear(&cfg);

	/* 1. the quorum leader dies under load: nothing fails */
	pid_t lp = load_start("a", "5", "400");
	assert_true(wait_text("a", "[   1s]", 15000));
	print_message("killing ZooKeeper server %d (the quorum leader)\n", leader);
	assert_int_equal(mt_server_cmd(&g_srv, "kill", leader), 0);
	json_t *a = load_finish(lp, "a", 30000);
	/* the replicas' leases may lapse during the quorum's re-election: then
	 * they deregister and re-register (new rkeys, same configuration) and
	 * the writers reopen -- an outage, not a failure */
	print_message("load across the server kill: %lld acknowledged, %zu outage(s)\n",
		      (long long)json_integer_value(json_object_get(a, "acked")),
		      json_array_size(json_object_get(a, "failovers")));
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(a, "failovers"), i, f) {
		print_message("  shard %lld: no acknowledged append for %lld ms, epoch %lld -> %lld\n",
			      (long long)json_integer_value(json_object_get(f, "shard")),
			      (long long)json_integer_value(json_object_get(f, "gap_ms")),
			      (long long)json_integer_value(json_object_get(f, "epoch_from")),
			      (long long)json_integer_value(json_object_get(f, "epoch_to")));
		assert_int_equal(json_integer_value(json_object_get(f, "primary_to")),
				 json_integer_value(json_object_get(f, "primary_from")));
	}
	json_decref(a);
	/* the two others formed a quorum again */
	uint64_t end = dxl_now_ms() + 10000;
	int nl = 0;
	while (!(nl = server_leader()) && dxl_now_ms() < end)
		usleep(50000);
	assert_true(nl != 0 && nl != leader);

	/* 2. with 2 of 3 servers: the primary dies under load, failover */
	lp = load_start("b", "7", "400");
	assert_true(wait_text("b", "[   1s]", 15000));
	rc = dxl(20000, "cluster", "kill", "1", "--dir", g_dir, NULL);
	EXPECT_RC(rc, 0);
	reap();
	json_t *b = load_finish(lp, "b", 40000);
	json_t *fo = json_object_get(b, "failovers");
	bool failed_over[2] = {false, false};
	json_array_foreach(fo, i, f) {
		json_int_t sh = json_integer_value(json_object_get(f, "shard"));
		assert_true(sh == 0 || sh == 1);
		assert_int_equal(json_integer_value(json_object_get(f, "primary_from")), 1);
		assert_int_not_equal(json_integer_value(json_object_get(f, "primary_to")), 1);
		assert_true(json_integer_value(json_object_get(f, "epoch_to")) >
			    json_integer_value(json_object_get(f, "epoch_from")));
		assert_true(json_integer_value(json_object_get(f, "gap_ms")) > 0);
		print_message("shard %lld failed over to %lld in %lld ms (no acknowledged append)\n",
			      (long long)sh,
			      (long long)json_integer_value(json_object_get(f, "primary_to")),
			      (long long)json_integer_value(json_object_get(f, "gap_ms")));
		failed_over[sh] = true;
	}
	json_decref(b);
	assert_true(failed_over[0] && failed_over[1]);
	assert_int_equal(dxl_cluster_config_read(zk, &cfg, NULL), 0);
	assert_true(cfg.epoch > epoch0);
	uint64_t epoch1 = cfg.epoch;
	for (uint32_t s = 0; s < 2; s++) {
		uint32_t n = members(&cfg, s, ids);
		assert_int_equal(n, 2);
		assert_false(has(ids, n, 1));
	}
	dxl_cluster_config_clear(&cfg);

	/* 3. the server comes back; so does replica 1, as a member again */
	/* not our child: zk.sh stop must see it exit (no zombie of ours) */
	prctl(PR_SET_CHILD_SUBREAPER, 0);
	rc = mt_server_cmd(&g_srv, "restart", leader);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	assert_int_equal(rc, 0);
	char mode[32] = "";
	end = dxl_now_ms() + 15000;
	while (dxl_now_ms() < end) {
		mt_server_mode(&g_srv, leader, mode, sizeof(mode));
		if (!strcmp(mode, "follower") || !strcmp(mode, "leader"))
			break;
		usleep(50000);
	}
	assert_true(!strcmp(mode, "follower") || !strcmp(mode, "leader"));
	rc = dxl(30000, "cluster", "restart", "1", "--dir", g_dir, NULL);
	EXPECT_RC(rc, 0);
	note_replicas();
	bool back = false;
	end = dxl_now_ms() + 20000;
	while (!back && dxl_now_ms() < end) {
		assert_int_equal(dxl_cluster_config_read(zk, &cfg, NULL), 0);
		back = cfg.epoch > epoch1;
		for (uint32_t s = 0; s < 2; s++) {
			uint32_t n = members(&cfg, s, ids);
			back &= n == 3 && has(ids, n, 1);
		}
		dxl_cluster_config_clear(&cfg);
		if (!back)
			usleep(100000);
	}
	if (!back) {
		dxl(10000, "cluster", "status", "--dir", g_dir, NULL);
		print_message("replica 1 was not added back:\n%s\n%s\n", out, err);
	}
	assert_true(back);
	lp = load_start("c", "2", "400");
	json_decref(load_finish(lp, "c", 30000));
	dxl_zk_delete(&zk);
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cluster_survives_zk_server_loss),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
