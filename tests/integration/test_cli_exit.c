/* test_cli_exit.c -- the exit codes of docs/cli.md ("Exit codes"), checked
 * for bad input on every dxl subcommand (issue 21.5):
 *
 * - an unknown option: 2, and --help: 0 with the EXIT STATUS table;
 * - a bad value (each command's own): 2; '--coord nonsense' included;
 * - a cluster name that is not one: 2 (not "cannot connect to ZooKeeper");
 * - no DIR/cluster.json: 3 (get/put/insert/del/txn: 1, their own table);
 * - an unreachable ZooKeeper: 4 (get/put/...: 1);
 * - dxl-replica whose fabric listen address is in use: 6 (a fabric
 *   failure, not 3 "data directory refused").
 *
 * No ZooKeeper needed: nothing here reaches a cluster. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "tests/lib/proc.h"

static char g_dxl[PATH_MAX], g_replica[PATH_MAX];
static char g_tmp[128];
static char out[65536], err[65536];

/* run -- prog with args (NULL-terminated); the exit status (-1: killed at
 * the limit or by a signal); stdout/stderr into out/err */
static int run(const char *prog, const char *const *args, int timeout_ms)
{
	const char *argv[64];
	int a = 0;
	argv[a++] = prog;
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
		execv(prog, (char *const *)argv);
		_exit(127);
	}
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	int st = 0;
	for (;;) {
		if (waitpid(p, &st, WNOHANG) == p)
			break;
		if (dxl_now_ms() > end) {
			kill(p, SIGKILL);
			waitpid(p, &st, 0);
			return -1;
		}
		usleep(5000);
	}
	dxlt_slurp(of, out, sizeof(out));
	dxlt_slurp(ef, err, sizeof(err));
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int g_failures;

/* expect -- one case: dxl ARGS... exits with want */
static void expect(int want, const char *what, const char *const *args)
{
	int rc = run(g_dxl, args, 30000);
	char line[256] = "";
	for (int i = 0; args[i]; i++)
		snprintf(line + strlen(line), sizeof(line) - strlen(line), " %s", args[i]);
	char e1[200];
	snprintf(e1, sizeof(e1), "%.199s", err);
	e1[strcspn(e1, "\n")] = 0;
	print_message("%-4s exit %d (want %d) %-28s dxl%s  | %s\n", rc == want ? "ok" : "BAD", rc,
		      want, what, line, e1);
	if (rc != want)
		g_failures++;
}

static int setup(void **state)
{
	(void)state;
	assert_int_equal(dxlt_prog_path("dxl", g_dxl, sizeof(g_dxl)), 0);
	assert_int_equal(dxlt_prog_path("dxl-replica", g_replica, sizeof(g_replica)), 0);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-exit-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", g_tmp);
	return 0;
}

/* a port bound but not listening: connections to it are refused */
static int closed_port(int *fd)
{
	*fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
	assert_int_equal(bind(*fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	socklen_t sl = sizeof(sa);
	assert_int_equal(getsockname(*fd, (struct sockaddr *)&sa, &sl), 0);
	return ntohs(sa.sin_port);
}

#define A(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_dxl_exit_codes(void **state)
{
	(void)state;
	if (access(g_dxl, X_OK) != 0) {
		print_message("SKIPPED: %s not built\n", g_dxl);
		skip();
	}
	alarm(170);
	char none[256], zk[64];
	snprintf(none, sizeof(none), "%s/no-cluster", g_tmp);
	int fd;
	snprintf(zk, sizeof(zk), "127.0.0.1:%d", closed_port(&fd));
	static const char *const cmds[][2] = {
		{"cluster", "up"},   {"cluster", "status"}, {"cluster", "down"},
		{"cluster", "start"},
		{"cluster", "kill"}, {"cluster", "restart"}, {"cluster", "add"},
		{"cluster", "verify"}, {"log", "append"},   {"log", "load"},
		{"tail", NULL},      {"get", NULL},         {"put", NULL},
		{"insert", NULL},    {"del", NULL},         {"txn", NULL},
		{"status", NULL},
	};
	/* every subcommand: an unknown option 2; --help 0 with the table */
	for (size_t k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++) {
		const char *a1[] = {cmds[k][0], cmds[k][1] ? cmds[k][1] : "--no-such-option",
				    cmds[k][1] ? "--no-such-option" : NULL, NULL};
		expect(2, "unknown option", a1);
		const char *a2[] = {cmds[k][0], cmds[k][1] ? cmds[k][1] : "--help",
				    cmds[k][1] ? "--help" : NULL, NULL};
		int rc = run(g_dxl, a2, 10000);
		bool ok = rc == 0 && strstr(out, "EXIT STATUS");
		print_message("%-4s --help of %s %s: exit %d%s\n", ok ? "ok" : "BAD", cmds[k][0],
			      cmds[k][1] ? cmds[k][1] : "", rc,
			      strstr(out, "EXIT STATUS") ? "" : ", no EXIT STATUS");
		g_failures += !ok;
	}
	/* bad values: 2 */
	/* (--zk: a regression must not start a ZooKeeper here) */
	expect(2, "bad value", A("cluster", "up", "--dir", none, "--zk", zk, "--replicas", "0"));
	expect(2, "bad value",
	       A("cluster", "up", "--dir", none, "--zk", zk, "--ring-size", "1000"));
	expect(2, "bad value", A("cluster", "status", "--zk", zk, "--replication", "0"));
	expect(2, "bad value", A("cluster", "kill", "one", "--dir", none));
	expect(2, "bad value", A("cluster", "kill", "1", "--signal", "HUP", "--dir", none));
	expect(2, "bad value", A("cluster", "verify", "--wait", "soon", "--dir", none));
	expect(2, "bad value", A("cluster", "start", "--timeout", "soon", "--dir", none));
	expect(2, "bad value", A("log", "append", "--shard", "x", "--dir", none, "r"));
	expect(2, "bad value", A("log", "load", "--rate", "fast", "--dir", none));
	expect(2, "bad value", A("tail", "--shard", "0", "--from", "yesterday", "--dir", none));
	expect(2, "bad value", A("get", "1", "2", "--coord", "nonsense"));
	expect(2, "bad value", A("put", "1", "2", "v", "--coord", "127.0.0.1"));
	expect(2, "bad value", A("get", "1", "2", "--timeout", "0"));
	/* a cluster name that is not one: 2, whatever ZooKeeper does */
	expect(2, "bad cluster name", A("cluster", "status", "--zk", zk, "--cluster", "a/b"));
	g_failures += strstr(err, "cannot connect") != NULL;
	expect(2, "bad cluster name", A("tail", "--shard", "0", "--zk", zk, "--cluster", "a b"));
	g_failures += strstr(err, "cannot connect") != NULL; /* the name, not the network */
	/* no DIR/cluster.json: 3 */
	expect(3, "no cluster.json", A("cluster", "status", "--dir", none));
	expect(3, "no cluster.json", A("cluster", "down", "--dir", none));
	expect(3, "no cluster.json", A("cluster", "start", "--dir", none));
	expect(3, "no cluster.json", A("cluster", "kill", "1", "--dir", none));
	expect(3, "no cluster.json", A("cluster", "restart", "1", "--dir", none));
	expect(3, "no cluster.json", A("cluster", "add", "--dir", none));
	expect(3, "no cluster.json", A("cluster", "verify", "--dir", none));
	expect(3, "no cluster.json", A("log", "append", "--shard", "0", "--dir", none, "r"));
	expect(3, "no cluster.json", A("log", "load", "--dir", none));
	expect(3, "no cluster.json", A("tail", "--shard", "0", "--dir", none));
	expect(1, "no cluster.json (get)", A("get", "1", "2", "--dir", none));
	/* an unreachable ZooKeeper: 4 (5 s connect budget each) */
	expect(4, "ZooKeeper unreachable", A("cluster", "status", "--zk", zk));
	expect(4, "ZooKeeper unreachable", A("tail", "--shard", "0", "--zk", zk));
	expect(1, "ZooKeeper unreachable (get)", A("get", "1", "2", "--zk", zk));
	close(fd);
	/* the bad input changed nothing: no directory appeared */
	assert_int_equal(access(none, F_OK), -1);
	if (g_failures)
		fail_msg("%d exit code(s) differ from docs/cli.md", g_failures);
	alarm(0);
}

/* dxl-replica: a listen address in use is a fabric failure (6) */
static void test_replica_listen_in_use(void **state)
{
	(void)state;
	if (access(g_replica, X_OK) != 0) {
		print_message("SKIPPED: %s not built\n", g_replica);
		skip();
	}
	alarm(60);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 1), 0);
	socklen_t sl = sizeof(sa);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	char listen_at[64], data[256], zk[64];
	snprintf(listen_at, sizeof(listen_at), "127.0.0.1:%u", ntohs(sa.sin_port));
	snprintf(data, sizeof(data), "%s/data1", g_tmp);
	int zfd;
	snprintf(zk, sizeof(zk), "127.0.0.1:%d", closed_port(&zfd));
	int rc = run(g_replica,
		     A("--node-id", "1", "--data-dir", data, "--zk", zk, "--listen", listen_at,
		       "--shards", "0"),
		     40000);
	close(fd);
	close(zfd);
	if (rc != 6)
		print_message("exit %d, want 6\nstdout:\n%s\nstderr:\n%s\n", rc, out, err);
	assert_int_equal(rc, 6);
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dxl_exit_codes),
		cmocka_unit_test(test_replica_listen_in_use),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
