/* test_coord.c -- dxl-coord and the transaction commands of the dxl CLI end
 * to end: a local cluster of 3 dxl-replica processes with 2 shards and two
 * tables ('dxl cluster up -o engine.tables=...'), a dxl-coord with 2
 * workers, then put/get, insert/get, del/get (exit 3), multi-operation
 * 'dxl txn' (committed, and aborted half-way: nothing of it happens),
 * malformed frames on a raw socket (each answered with the right error,
 * nothing changed, the connection still usable), an absurd frame length
 * (connection closed, the server still serves), pipelined requests, 120
 * concurrent transactions on 4 connections over two keys (readers always
 * see both equal), start-up
 * failures (no ZooKeeper, no cluster, bad options), and SIGTERM with a
 * transaction in flight (answered, exit 0, coords/<id> gone).
 *
 * Needs DXL_TEST_ZK=host:port (scripts/test.sh sets it); skips otherwise.
 * The programs come from build/bin (next to the test binary) or
 * $DXL_BIN_DIR. DXL_TEST_KEEP=1 keeps the temporary directory (logs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/coordproto.h"
#include "dxl/membership.h"
#include "tests/lib/cli_run.h"
#include "tests/lib/proc.h"

/* table 1: 8-byte values (balances), table 2: up to 64 bytes */
#define TABLES "engine.tables=1:8:1000,2:64:100"

static const char *g_zkc;
static char g_dxl[PATH_MAX], g_coord_bin[PATH_MAX];
static char g_tmp[128], g_dir[256], g_cluster[48], g_coordlog[300];
static char g_addr[128];  /* the coordinator's host:port */
static pid_t g_coord = -1;
static bool g_up, g_ready;
static char out[65536], err[65536];

#define NEED_READY()                                                          \
	do {                                                                  \
		if (!g_zkc) {                                                 \
			print_message("SKIPPED: no ZooKeeper (DXL_TEST_ZK unset; " \
				      "scripts/test.sh sets it)\n");          \
			skip();                                               \
		}                                                             \
		if (!g_ready)                                                 \
			fail_msg("the cluster and dxl-coord did not start (see test_start)"); \
	} while (0)

#define EXPECT_RC(rc, want)                                                   \
	do {                                                                  \
		int rc_ = (rc);                                               \
		if (rc_ != (want))                                            \
			print_message("exit %d, want %d\nstdout:\n%s\nstderr:\n%s\n", \
				      rc_, (want), out, err);                 \
		assert_int_equal(rc_, (want));                                \
	} while (0)

/* ---- running dxl ------------------------------------------------------------- */

/* dxl -- run dxl with args (NULL-terminated) and the coordinator found in
 * ZooKeeper, stdin from in (text written to a file; NULL = none) */
static int dxl(const char *in, const char *const *args)
{
	const char *argv[48];
	int a = 0;
	argv[a++] = g_dxl;
	argv[a++] = args[0];
	/* the connection options before any "--" of the arguments */
	argv[a++] = "--zk";
	argv[a++] = g_zkc;
	argv[a++] = "--cluster";
	argv[a++] = g_cluster;
	for (int i = 1; args[i] && a < 40; i++)
		argv[a++] = args[i];
	argv[a] = NULL;
	char inf[256];
	if (in) {
		snprintf(inf, sizeof(inf), "%s/stdin", g_tmp);
		FILE *f = fopen(inf, "w");
		assert_non_null(f);
		fputs(in, f);
		fclose(f);
	}
	return dxlt_run(argv, in ? inf : NULL, g_tmp, out, err, sizeof(out), 20000);
}

#define DXL(in, ...) dxl((in), (const char *const[]){__VA_ARGS__, NULL})

/* ---- a raw client ------------------------------------------------------------- */

static int raw_connect(void)
{
	char host[64];
	uint16_t port;
	assert_int_equal(dxl_parse_hostport(g_addr, host, sizeof(host), &port), 0);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	assert_int_equal(inet_pton(AF_INET, host, &sa.sin_addr), 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		fail_msg("connect %s: %s", g_addr, strerror(errno));
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			fail_msg("send: %s", strerror(errno));
		b += k;
		n -= (size_t)k;
	}
}

/* a connection's input: frames are taken off the front */
struct rd {
	uint8_t buf[1 << 20];
	size_t len;
};
static struct rd g_rd;
static struct dxl_cproto_msg g_m;
static uint8_t g_frame[1 << 20];

/* recv_frame -- the next frame of fd decoded into g_m (pointing into
 * g_frame); 1 = got one, 0 = EOF, -1 = timeout */
static int recv_frame(int fd, int timeout_ms)
{
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		size_t total = 0;
		int k = dxl_cproto_frame_len(g_rd.buf, g_rd.len, &total);
		assert_true(k >= 0);
		if (k && g_rd.len >= total) {
			memcpy(g_frame, g_rd.buf, total);
			memmove(g_rd.buf, g_rd.buf + total, g_rd.len - total);
			g_rd.len -= total;
			char why[256];
			int ret = dxl_cproto_decode(g_frame, total, &g_m, why, sizeof(why));
			if (ret)
				fail_msg("undecodable reply: %s", why);
			return 1;
		}
		struct pollfd p = {.fd = fd, .events = POLLIN};
		uint64_t now = dxl_now_ms();
		if (now >= end || poll(&p, 1, (int)(end - now)) == 0)
			return -1;
		ssize_t n = recv(fd, g_rd.buf + g_rd.len, sizeof(g_rd.buf) - g_rd.len, 0);
		if (n == 0)
			return 0;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == ECONNRESET)
				return 0;
			fail_msg("recv: %s", strerror(errno));
		}
		g_rd.len += (size_t)n;
	}
}

static void send_buf(int fd, struct dxl_cproto_buf *b)
{
	send_all(fd, b->p, b->len);
	b->len = 0;
}

static void expect_error(int fd, uint64_t req_id, int code, const char *needle)
{
	assert_int_equal(recv_frame(fd, 10000), 1);
	if (g_m.kind != DXL_CPROTO_ERROR || g_m.status != code)
		print_message("reply kind 0x%02x status %s: %.*s\n", g_m.kind,
			      dxl_errname(g_m.status), (int)g_m.msg_len, g_m.msg);
	assert_int_equal(g_m.kind, DXL_CPROTO_ERROR);
	assert_int_equal(g_m.status, code);
	assert_int_equal(g_m.req_id, req_id);
	char msg[DXL_CPROTO_MAX_MSG + 1];
	snprintf(msg, sizeof(msg), "%.*s", (int)g_m.msg_len, g_m.msg);
	if (!strstr(msg, needle))
		fail_msg("error message '%s' lacks '%s'", msg, needle);
}

/* ---- set-up and tear-down -------------------------------------------------------- */

static int setup(void **state)
{
	(void)state;
	g_zkc = getenv("DXL_TEST_ZK");
	if (dxlt_prog_path("dxl", g_dxl, sizeof(g_dxl)) ||
	    dxlt_prog_path("dxl-coord", g_coord_bin, sizeof(g_coord_bin)))
		return -1;
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-coord-XXXXXX");
	if (!mkdtemp(g_tmp))
		return -1;
	snprintf(g_dir, sizeof(g_dir), "%s/cluster", g_tmp);
	snprintf(g_cluster, sizeof(g_cluster), "coord%d", (int)getpid());
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	alarm(40);
	if (g_coord > 0) {
		kill(g_coord, SIGKILL);
		dxlt_wait_exit(g_coord, 5000);
		g_coord = -1;
	}
	dxlt_kill_all();
	if (g_up) {
		const char *down[] = {g_dxl, "cluster", "down", "--dir", g_dir, NULL};
		int rc = dxlt_run(down, NULL, g_tmp, out, err, sizeof(out), 20000);
		if (rc)
			fprintf(stderr, "cluster down: exit %d: %s\n", rc, err);
		/* whatever happened, no replica outlives the test */
		char path[300];
		snprintf(path, sizeof(path), "%s/cluster.json", g_dir);
		json_t *o = json_load_file(path, 0, NULL);
		size_t i;
		json_t *r;
		json_array_foreach(json_object_get(o, "replicas"), i, r) {
			pid_t p = (pid_t)json_integer_value(json_object_get(r, "pid"));
			char cmdline[64];
			snprintf(cmdline, sizeof(cmdline), "/proc/%d/cmdline", (int)p);
			static char cl[4096];
			dxlt_slurp(cmdline, cl, sizeof(cl));
			if (p > 0 && strstr(cl, "dxl-replica") && kill(p, SIGKILL) == 0)
				fprintf(stderr, "killed replica pid %d left running\n", (int)p);
		}
		json_decref(o);
		g_up = false;
	}
	uint64_t end = dxl_now_ms() + 2000;
	while (dxl_now_ms() < end && waitpid(-1, NULL, WNOHANG) >= 0)
		usleep(10000); /* reap the replicas (we are their subreaper) */
	alarm(0);
	if (getenv("DXL_TEST_KEEP")) {
		fprintf(stderr, "kept %s\n", g_tmp);
		return 0;
	}
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", g_tmp);
	return 0;
}

/* start_coord -- dxl-coord on an ephemeral port; its address into g_addr */
static void start_coord(void)
{
	static int starts;
	snprintf(g_coordlog, sizeof(g_coordlog), "%s/coord-%d.log", g_tmp, ++starts);
	const char *argv[] = {g_coord_bin, "--zk", g_zkc, "--cluster", g_cluster,
			      "--listen", "127.0.0.1:0", "--threads", "2", "--coroutines",
			      "4", "--session-timeout", "4000", NULL};
	g_coord = dxlt_spawn(argv, g_coordlog, false);
	assert_true(g_coord > 0);
	uint64_t end = dxl_now_ms() + 20000;
	static char log[65536];
	for (;;) {
		dxlt_slurp(g_coordlog, log, sizeof(log));
		const char *p = strstr(log, "event=ready ");
		const char *a = p ? strstr(p, " addr=") : NULL;
		if (a && strchr(a, '\n')) {
			assert_int_equal(sscanf(a, " addr=%127s", g_addr), 1);
			break;
		}
		int st;
		if (waitpid(g_coord, &st, WNOHANG) == g_coord) {
			dxlt_untrack(g_coord);
			g_coord = -1;
			fail_msg("dxl-coord exited (status 0x%x) before it was ready:\n%s", st, log);
		}
		if (dxl_now_ms() > end)
			fail_msg("dxl-coord not ready in 20 s:\n%s", log);
		usleep(20000);
	}
	/* the ready line is also printed on stdout */
	dxlt_slurp(g_coordlog, log, sizeof(log));
	char want[200];
	snprintf(want, sizeof(want), "serving on %s\n", g_addr);
	assert_non_null(strstr(log, want));
}

/* ---- the tests --------------------------------------------------------------------- */

static void test_start(void **state)
{
	(void)state;
	if (!g_zkc) {
		print_message("SKIPPED: no ZooKeeper (DXL_TEST_ZK unset; scripts/test.sh sets it)\n");
		skip();
	}
	if (access(g_dxl, X_OK) || access(g_coord_bin, X_OK)) {
		print_message("SKIPPED: %s or %s not built\n", g_dxl, g_coord_bin);
		skip();
	}
	alarm(60);
	/* no coordinator yet: exit 1, said so */
	EXPECT_RC(DXL(NULL, "get", "1", "1"), 1);
	assert_non_null(strstr(err, "no coordinator registered"));

	const char *up[] = {g_dxl, "cluster", "up", "--dir", g_dir, "--zk", g_zkc, "--cluster",
			    g_cluster, "--replicas", "3", "--shards", "2", "--durability",
			    "process", "--ring-size", "256K", "--writer-slots", "8", "-o", TABLES,
			    "-o", "engine.lock_mode=nic", NULL};
	g_up = true;
	EXPECT_RC(dxlt_run(up, NULL, g_tmp, out, err, sizeof(out), 40000), 0);
	start_coord();

	/* the coordinator is registered with its address */
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_zkc, g_cluster, &zk), 0);
	uint32_t ids[4];
	assert_int_equal(dxl_coord_znode_list(zk, ids, 4), 1);
	char data[512], want[200];
	assert_true(dxl_coord_znode_get(zk, ids[0], data, sizeof(data)) > 0);
	snprintf(want, sizeof(want), "\"addr\":\"%s\"", g_addr);
	assert_non_null(strstr(data, want));
	snprintf(want, sizeof(want), "\"pid\":%d", (int)g_coord);
	assert_non_null(strstr(data, want));
	dxl_zk_delete(&zk);

	/* the first transaction: retried while the primaries publish their
	 * tables for the configuration 'cluster up' wrote */
	uint64_t end = dxl_now_ms() + 20000;
	int rc;
	while ((rc = DXL(NULL, "insert", "1", "10", "hello")) == 1 && strstr(err, "UNAVAIL") &&
	       dxl_now_ms() < end)
		usleep(200000);
	EXPECT_RC(rc, 0);
	assert_non_null(strstr(out, "committed commit_ts="));
	g_ready = true;
	alarm(0);
}

static void test_put_get(void **state)
{
	(void)state;
	NEED_READY();
	alarm(30);
	EXPECT_RC(DXL(NULL, "get", "1", "10"), 0);
	assert_string_equal(out, "hello\n");
	EXPECT_RC(DXL(NULL, "put", "1", "10", "world"), 0);
	unsigned long long ts = 0;
	assert_int_equal(sscanf(out, "committed commit_ts=%llu", &ts), 1);
	assert_true(ts > 0);
	EXPECT_RC(DXL(NULL, "get", "1", "10"), 0);
	assert_string_equal(out, "world\n");
	/* --coord instead of ZooKeeper; --hex both ways */
	const char *argv[] = {g_dxl, "get", "1", "10", "--coord", g_addr, "--hex", NULL};
	EXPECT_RC(dxlt_run(argv, NULL, g_tmp, out, err, sizeof(out), 10000), 0);
	assert_string_equal(out, "776f726c64\n");
	EXPECT_RC(DXL(NULL, "put", "1", "11", "00ff", "--hex"), 3); /* absent: NOENT */
	EXPECT_RC(DXL(NULL, "insert", "1", "11", "00FF10", "--hex"), 0);
	EXPECT_RC(DXL(NULL, "get", "1", "11", "--hex"), 0);
	assert_string_equal(out, "00ff10\n");
	/* usage errors */
	EXPECT_RC(DXL(NULL, "put", "1", "10"), 2);
	EXPECT_RC(DXL(NULL, "get", "x", "10"), 2);
	EXPECT_RC(DXL(NULL, "put", "1", "10", "abc", "--hex"), 2);
	alarm(0);
}

static void test_insert_del(void **state)
{
	(void)state;
	NEED_READY();
	alarm(30);
	EXPECT_RC(DXL(NULL, "insert", "2", "7", "a value of table two"), 0);
	EXPECT_RC(DXL(NULL, "get", "2", "7"), 0);
	assert_string_equal(out, "a value of table two\n");
	/* insert of a key that exists: exit 1, DXL_E_EXIST, value unchanged */
	EXPECT_RC(DXL(NULL, "insert", "2", "7", "other"), 1);
	assert_non_null(strstr(err, "DXL_E_EXIST"));
	EXPECT_RC(DXL(NULL, "get", "2", "7"), 0);
	assert_string_equal(out, "a value of table two\n");
	/* del, then get: exit 3; del again: exit 3 */
	EXPECT_RC(DXL(NULL, "del", "2", "7"), 0);
	assert_non_null(strstr(out, "committed"));
	EXPECT_RC(DXL(NULL, "get", "2", "7"), 3);
	assert_non_null(strstr(err, "not found"));
	assert_string_equal(out, "");
	EXPECT_RC(DXL(NULL, "del", "2", "7"), 3);
	/* and back */
	EXPECT_RC(DXL(NULL, "insert", "2", "7", "again"), 0);
	EXPECT_RC(DXL(NULL, "get", "2", "7"), 0);
	assert_string_equal(out, "again\n");
	alarm(0);
}

static void test_txn(void **state)
{
	(void)state;
	NEED_READY();
	alarm(30);
	/* two accounts on the two shards (keys 20 and 21), as int64 */
	EXPECT_RC(DXL("insert 1 20 100\ninsert 1 21 50\n", "txn", "--int64"), 0);
	assert_non_null(strstr(out, "0\tinsert\t1\t20\tok\n1\tinsert\t1\t21\tok\ncommitted "));
	/* a transfer: read both, write both */
	EXPECT_RC(DXL("# transfer 30\nget 1 20\nget 1 21\n\nput 1 20 70\nput 1 21 80\nget 1 20\n",
		      "txn", "--int64"), 0);
	assert_non_null(strstr(out, "0\tget\t1\t20\tok\t100\n"
				    "1\tget\t1\t21\tok\t50\n"
				    "2\tput\t1\t20\tok\n"
				    "3\tput\t1\t21\tok\n"
				    "4\tget\t1\t20\tok\t70\n" /* its own write */
				    "committed commit_ts="));
	EXPECT_RC(DXL(NULL, "get", "1", "20", "--int64"), 0);
	assert_string_equal(out, "70\n");
	EXPECT_RC(DXL(NULL, "get", "1", "21", "--int64"), 0);
	assert_string_equal(out, "80\n");
	/* negative values after -- */
	EXPECT_RC(DXL(NULL, "put", "--int64", "1", "21", "--", "-5"), 0);
	EXPECT_RC(DXL(NULL, "get", "1", "21", "--int64"), 0);
	assert_string_equal(out, "-5\n");
	/* aborted half-way (a missing key): nothing of it happens, exit 3 */
	EXPECT_RC(DXL("put 1 20 999\nget 1 9999\nput 1 21 999\n", "txn", "--int64"), 3);
	assert_non_null(strstr(out, "0\tput\t1\t20\t-\n"
				    "1\tget\t1\t9999\tDXL_E_NOENT\n"
				    "2\tput\t1\t21\t-\n"
				    "aborted DXL_E_NOENT attempts="));
	assert_non_null(strstr(err, "operation 1"));
	EXPECT_RC(DXL(NULL, "get", "1", "20", "--int64"), 0);
	assert_string_equal(out, "70\n");
	/* bad input lines: exit 2, nothing sent */
	EXPECT_RC(DXL("put 1 20 1\nfrobnicate 1 2\n", "txn", "--int64"), 2);
	assert_non_null(strstr(err, "line 2"));
	EXPECT_RC(DXL("put 1 20\n", "txn"), 2);
	EXPECT_RC(DXL("get 1 20 extra\n", "txn"), 2);
	EXPECT_RC(DXL("", "txn"), 2);
	EXPECT_RC(DXL(NULL, "get", "1", "20", "--int64"), 0);
	assert_string_equal(out, "70\n");
	alarm(0);
}

/* check_untouched -- key 10 of table 1 still holds "world" */
static void check_untouched(void)
{
	EXPECT_RC(DXL(NULL, "get", "1", "10"), 0);
	assert_string_equal(out, "world\n");
}

static void test_malformed(void **state)
{
	(void)state;
	NEED_READY();
	alarm(40);
	int fd = raw_connect();
	g_rd.len = 0;
	struct dxl_cproto_buf b = {0};
	static uint8_t big[DXL_ENGINE_MAX_VALUE + 1];
	memset(big, 'B', sizeof(big));
	struct dxl_cproto_op bad = {.op = DXL_CPROTO_OP_PUT, .table = 1, .key = 10,
				    .value = "BAD", .len = 3};

	/* bad magic (a put of key 10, if it were read) */
	assert_int_equal(dxl_cproto_encode_txn(&b, 101, 0, &bad, 1), 0);
	b.p[6] ^= 0x55;
	send_buf(fd, &b);
	expect_error(fd, 0, DXL_E_PROTO, "bad magic");

	/* another version */
	assert_int_equal(dxl_cproto_encode_txn(&b, 102, 0, &bad, 1), 0);
	b.p[5] = 9;
	send_buf(fd, &b);
	expect_error(fd, 102, DXL_E_VERSION, "version 9");

	/* short body: the frame ends inside the value (the len field says so) */
	assert_int_equal(dxl_cproto_encode_txn(&b, 103, 0, &bad, 1), 0);
	b.len -= 2;
	dxl_cproto_st32(b.p, (uint32_t)b.len - 4);
	send_buf(fd, &b);
	expect_error(fd, 103, DXL_E_PROTO, "short TXN frame");

	/* a frame too short for its type word */
	uint8_t tiny[6] = {2, 0, 0, 0, 0x43, 0x44};
	send_all(fd, tiny, sizeof(tiny));
	expect_error(fd, 0, DXL_E_PROTO, "shorter than the type word");

	/* one operation over the limit */
	struct dxl_cproto_op many[DXL_TXN_MAX_OPS + 1];
	for (unsigned i = 0; i <= DXL_TXN_MAX_OPS; i++)
		many[i] = bad;
	assert_int_equal(dxl_cproto_encode_txn(&b, 104, 0, many, DXL_TXN_MAX_OPS + 1), 0);
	send_buf(fd, &b);
	expect_error(fd, 104, DXL_E_PROTO, "65 operations");

	/* a value over the largest value size: refused by the decoder */
	struct dxl_cproto_op two[2] = {bad, {.op = DXL_CPROTO_OP_PUT, .table = 1, .key = 11,
					     .value = big, .len = sizeof(big)}};
	assert_int_equal(dxl_cproto_encode_txn(&b, 105, 0, two, 2), 0);
	send_buf(fd, &b);
	expect_error(fd, 105, DXL_E_TOOBIG, "over the largest value size");

	/* a value over table 1's value size (8): the transaction refuses it */
	two[1].len = 9;
	assert_int_equal(dxl_cproto_encode_txn(&b, 106, 0, two, 2), 0);
	send_buf(fd, &b);
	assert_int_equal(recv_frame(fd, 10000), 1);
	assert_int_equal(g_m.kind, DXL_CPROTO_TXN_REPLY);
	assert_int_equal(g_m.req_id, 106);
	assert_int_equal(g_m.status, DXL_E_TOOBIG);
	assert_int_equal(g_m.nops, 2);
	assert_int_equal(g_m.ops[0].status, DXL_CPROTO_OP_NOT_DONE);
	assert_int_equal(g_m.ops[1].status, DXL_E_TOOBIG);
	assert_int_equal(g_m.commit_ts, 0);

	/* an unknown table */
	two[1] = (struct dxl_cproto_op){.op = DXL_CPROTO_OP_PUT, .table = 99, .key = 1,
					.value = "x", .len = 1};
	assert_int_equal(dxl_cproto_encode_txn(&b, 107, 0, two, 2), 0);
	send_buf(fd, &b);
	assert_int_equal(recv_frame(fd, 10000), 1);
	assert_int_equal(g_m.kind, DXL_CPROTO_TXN_REPLY);
	assert_int_equal(g_m.req_id, 107);
	assert_int_equal(g_m.status, DXL_E_INVAL);
	assert_int_equal(g_m.ops[1].status, DXL_E_INVAL);
	assert_true(g_m.msg_len > 0);

	/* an unknown opcode, and a reply sent as a request */
	assert_int_equal(dxl_cproto_encode_txn(&b, 108, 0, &bad, 1), 0);
	b.p[8 + 16] = 7;
	send_buf(fd, &b);
	expect_error(fd, 108, DXL_E_PROTO, "unknown opcode 7");
	assert_int_equal(dxl_cproto_encode_pong(&b, 109, 1, 1), 0);
	send_buf(fd, &b);
	expect_error(fd, 109, DXL_E_PROTO, "is a reply");

	/* the connection still serves: PING, STATS */
	assert_int_equal(dxl_cproto_encode_simple(&b, DXL_CPROTO_PING, 110), 0);
	send_buf(fd, &b);
	assert_int_equal(recv_frame(fd, 10000), 1);
	assert_int_equal(g_m.kind, DXL_CPROTO_PONG);
	assert_int_equal(g_m.req_id, 110);
	assert_true(g_m.coord_id >= 1);
	assert_true(g_m.epoch >= 1);
	assert_int_equal(dxl_cproto_encode_simple(&b, DXL_CPROTO_STATS, 111), 0);
	send_buf(fd, &b);
	assert_int_equal(recv_frame(fd, 10000), 1);
	assert_int_equal(g_m.kind, DXL_CPROTO_STATS_REPLY);
	char text[4096];
	snprintf(text, sizeof(text), "%.*s", (int)g_m.text_len, g_m.text);
	unsigned long long perr = 0;
	const char *pe = strstr(text, "\nproto_errors=");
	assert_non_null(pe);
	assert_int_equal(sscanf(pe, "\nproto_errors=%llu", &perr), 1);
	assert_true(perr >= 8);
	assert_non_null(strstr(text, "\ncommitted="));
	assert_non_null(strstr(text, "mode=hybrid\n"));
	close(fd);
	free(b.p);
	/* nothing of those changed key 10 */
	check_untouched();
	alarm(0);
}

static void test_pipelined(void **state)
{
	(void)state;
	NEED_READY();
	alarm(30);
	int fd = raw_connect();
	g_rd.len = 0;
	struct dxl_cproto_buf b = {0};
	struct dxl_cproto_op g10 = {.op = DXL_CPROTO_OP_GET, .table = 1, .key = 10};
	struct dxl_cproto_op g20 = {.op = DXL_CPROTO_OP_GET, .table = 1, .key = 20};
	/* three requests in one write; replies in any order, matched by id */
	assert_int_equal(dxl_cproto_encode_txn(&b, 201, 0, &g10, 1), 0);
	assert_int_equal(dxl_cproto_encode_txn(&b, 202, 0, &g20, 1), 0);
	assert_int_equal(dxl_cproto_encode_simple(&b, DXL_CPROTO_PING, 203), 0);
	send_buf(fd, &b);
	bool seen[3] = {false, false, false};
	for (int i = 0; i < 3; i++) {
		assert_int_equal(recv_frame(fd, 10000), 1);
		assert_true(g_m.req_id >= 201 && g_m.req_id <= 203);
		assert_false(seen[g_m.req_id - 201]);
		seen[g_m.req_id - 201] = true;
		if (g_m.req_id == 201) {
			assert_int_equal(g_m.status, 0);
			assert_int_equal(g_m.ops[0].len, 5);
			assert_memory_equal(g_m.ops[0].value, "world", 5);
			assert_int_equal(g_m.commit_ts, 0); /* read-only */
			assert_true(g_m.attempts >= 1);
		} else if (g_m.req_id == 202) {
			assert_int_equal(g_m.status, 0);
			assert_int_equal(g_m.ops[0].len, 8);
			int64_t v;
			memcpy(&v, g_m.ops[0].value, 8);
			assert_int_equal(v, 70);
		} else {
			assert_int_equal(g_m.kind, DXL_CPROTO_PONG);
		}
	}
	/* half-close: the server answers what was asked, then closes */
	assert_int_equal(dxl_cproto_encode_txn(&b, 204, 0, &g10, 1), 0);
	send_buf(fd, &b);
	shutdown(fd, SHUT_WR);
	assert_int_equal(recv_frame(fd, 10000), 1);
	assert_int_equal(g_m.req_id, 204);
	assert_int_equal(recv_frame(fd, 10000), 0);
	close(fd);
	free(b.p);
	alarm(0);
}

static void test_absurd_length(void **state)
{
	(void)state;
	NEED_READY();
	alarm(30);
	int other = raw_connect();
	int fd = raw_connect();
	g_rd.len = 0;
	uint8_t hdr[16];
	dxl_cproto_st32(hdr, DXL_CPROTO_MAX_FRAME + 1);
	dxl_cproto_st32(hdr + 4, DXL_CPROTO_MAGIC | DXL_CPROTO_VERSION << 8 | DXL_CPROTO_TXN);
	memset(hdr + 8, 0, 8);
	send_all(fd, hdr, sizeof(hdr));
	/* an ERROR saying why (best effort), then the connection is closed */
	int r = recv_frame(fd, 10000);
	if (r == 1) {
		assert_int_equal(g_m.kind, DXL_CPROTO_ERROR);
		assert_int_equal(g_m.status, DXL_E_PROTO);
		r = recv_frame(fd, 10000);
	}
	assert_int_equal(r, 0);
	close(fd);
	/* the server still serves: the other connection and new ones */
	g_rd.len = 0;
	struct dxl_cproto_buf b = {0};
	assert_int_equal(dxl_cproto_encode_simple(&b, DXL_CPROTO_PING, 301), 0);
	send_buf(other, &b);
	assert_int_equal(recv_frame(other, 10000), 1);
	assert_int_equal(g_m.kind, DXL_CPROTO_PONG);
	close(other);
	free(b.p);
	check_untouched();
	alarm(0);
}

/* many transactions at once on several connections, all on the same two
 * keys: writers set both to one value, readers read both. Serializable:
 * every reader sees them equal, and so does the end. */
static void test_concurrent(void **state)
{
	(void)state;
	NEED_READY();
	alarm(60);
	EXPECT_RC(DXL("insert 1 30 0\ninsert 1 31 0\n", "txn", "--int64"), 0);
	enum { NCONN = 4, NREQ = 30 };
	int fds[NCONN];
	struct dxl_cproto_buf b = {0};
	for (int c = 0; c < NCONN; c++) {
		fds[c] = raw_connect();
		for (int i = 0; i < NREQ; i++) {
			int64_t v = c * 1000 + i + 1;
			uint64_t id = (uint64_t)c << 32 | (uint64_t)i;
			if (i % 2 == 0) {
				struct dxl_cproto_op w[2] = {
					{.op = DXL_CPROTO_OP_PUT, .table = 1, .key = 30, .value = &v, .len = 8},
					{.op = DXL_CPROTO_OP_PUT, .table = 1, .key = 31, .value = &v, .len = 8},
				};
				assert_int_equal(dxl_cproto_encode_txn(&b, id, 0, w, 2), 0);
			} else {
				struct dxl_cproto_op r[2] = {
					{.op = DXL_CPROTO_OP_GET, .table = 1, .key = 31},
					{.op = DXL_CPROTO_OP_GET, .table = 1, .key = 30},
				};
				assert_int_equal(dxl_cproto_encode_txn(&b, id, 0, r, 2), 0);
			}
		}
	}
	/* all requests out before any reply is read: they run together */
	size_t per = b.len / NCONN; /* every connection's share is the same size */
	for (int c = 0; c < NCONN; c++)
		send_all(fds[c], b.p + (size_t)c * per, per);
	uint32_t retried = 0, reads = 0;
	for (int c = 0; c < NCONN; c++) {
		g_rd.len = 0;
		bool seen[NREQ] = {false};
		for (int k = 0; k < NREQ; k++) {
			assert_int_equal(recv_frame(fds[c], 30000), 1);
			assert_int_equal(g_m.kind, DXL_CPROTO_TXN_REPLY);
			assert_int_equal(g_m.req_id >> 32, (uint64_t)c);
			uint32_t i = (uint32_t)g_m.req_id;
			assert_true(i < NREQ && !seen[i]);
			seen[i] = true;
			if (g_m.status)
				fail_msg("request %u of connection %d: %s: %.*s", i, c,
					 dxl_errname(g_m.status), (int)g_m.msg_len, g_m.msg);
			retried += g_m.attempts > 1;
			if (i % 2) {
				int64_t x, y;
				assert_int_equal(g_m.ops[0].len, 8);
				assert_int_equal(g_m.ops[1].len, 8);
				memcpy(&x, g_m.ops[0].value, 8);
				memcpy(&y, g_m.ops[1].value, 8);
				if (x != y)
					fail_msg("a reader saw key 31 = %" PRId64 ", key 30 = %" PRId64, x, y);
				reads++;
			}
		}
		close(fds[c]);
	}
	free(b.p);
	assert_int_equal(reads, NCONN * NREQ / 2);
	print_message("%d transactions on %d connections: %u retried after conflicts\n",
		      NCONN * NREQ, NCONN, retried);
	EXPECT_RC(DXL("get 1 30\nget 1 31\n", "txn", "--int64"), 0);
	long long x = -1, y = -2;
	const char *p30 = strstr(out, "0\tget\t1\t30\tok\t");
	const char *p31 = strstr(out, "1\tget\t1\t31\tok\t");
	assert_true(p30 && p31);
	assert_int_equal(sscanf(p30, "0\tget\t1\t30\tok\t%lld", &x), 1);
	assert_int_equal(sscanf(p31, "1\tget\t1\t31\tok\t%lld", &y), 1);
	assert_int_equal(x, y);
	assert_true(x > 0);
	alarm(0);
}

static void test_start_failures(void **state)
{
	(void)state;
	if (!g_zkc || access(g_coord_bin, X_OK)) {
		print_message("SKIPPED: no ZooKeeper or no dxl-coord\n");
		skip();
	}
	alarm(40);
	/* usage: exit 2 with the option named */
	const char *u1[] = {g_coord_bin, "--zk", g_zkc, "--threads", "0", NULL};
	EXPECT_RC(dxlt_run(u1, NULL, g_tmp, out, err, sizeof(out), 10000), 2);
	assert_non_null(strstr(err, "coord.threads"));
	const char *u2[] = {g_coord_bin, "--mode", "sideways", "--zk", g_zkc, NULL};
	EXPECT_RC(dxlt_run(u2, NULL, g_tmp, out, err, sizeof(out), 10000), 2);
	assert_non_null(strstr(err, "sideways"));
	const char *u3[] = {g_coord_bin, NULL};
	EXPECT_RC(dxlt_run(u3, NULL, g_tmp, out, err, sizeof(out), 10000), 2);
	assert_non_null(strstr(err, "zk.connect"));
	const char *h[] = {g_coord_bin, "--help", NULL};
	EXPECT_RC(dxlt_run(h, NULL, g_tmp, out, err, sizeof(out), 10000), 0);
	assert_non_null(strstr(out, "SYNOPSIS"));
	assert_non_null(strstr(out, "EXIT STATUS"));
	/* no ZooKeeper there: exit 1, said so */
	const char *nozk[] = {g_coord_bin, "--zk", "127.0.0.1:1", "--listen", "127.0.0.1:0",
			      "-o", "zk.connect_timeout_ms=500", NULL};
	EXPECT_RC(dxlt_run(nozk, NULL, g_tmp, out, err, sizeof(out), 20000), 1);
	assert_non_null(strstr(err, "cannot connect to ZooKeeper 127.0.0.1:1"));
	/* a cluster without a configuration: exit 1, said so */
	char cl[64];
	snprintf(cl, sizeof(cl), "%s-none", g_cluster);
	const char *nocfg[] = {g_coord_bin, "--zk", g_zkc, "--cluster", cl, "--listen",
			       "127.0.0.1:0", NULL};
	EXPECT_RC(dxlt_run(nocfg, NULL, g_tmp, out, err, sizeof(out), 20000), 1);
	assert_non_null(strstr(err, "cannot start the coordinator"));
	/* the address in use (the running coordinator's) */
	if (g_ready) {
		const char *inuse[] = {g_coord_bin, "--zk", g_zkc, "--cluster", g_cluster,
				       "--listen", g_addr, NULL};
		EXPECT_RC(dxlt_run(inuse, NULL, g_tmp, out, err, sizeof(out), 20000), 1);
		assert_non_null(strstr(err, "Address already in use"));
	}
	alarm(0);
}

static void test_sigterm(void **state)
{
	(void)state;
	NEED_READY();
	alarm(40);
	int fd = raw_connect();
	g_rd.len = 0;
	struct dxl_cproto_buf b = {0};
	/* a transaction, then a PING: once the PONG is here the transaction
	 * was read and handed to a worker (frames are decoded in order) */
	struct dxl_cproto_op ops[2] = {
		{.op = DXL_CPROTO_OP_PUT, .table = 1, .key = 10, .value = "bye", .len = 3},
		{.op = DXL_CPROTO_OP_GET, .table = 1, .key = 20},
	};
	assert_int_equal(dxl_cproto_encode_txn(&b, 401, 0, ops, 2), 0);
	assert_int_equal(dxl_cproto_encode_simple(&b, DXL_CPROTO_PING, 402), 0);
	send_buf(fd, &b);
	bool got_txn = false;
	assert_int_equal(recv_frame(fd, 10000), 1);
	if (g_m.req_id == 401) {
		got_txn = true;
		assert_int_equal(g_m.status, 0);
		assert_int_equal(recv_frame(fd, 10000), 1);
	}
	assert_int_equal(g_m.req_id, 402);
	assert_int_equal(kill(g_coord, SIGTERM), 0);
	if (!got_txn) {
		/* in flight at SIGTERM: still answered */
		assert_int_equal(recv_frame(fd, 15000), 1);
		assert_int_equal(g_m.req_id, 401);
		assert_int_equal(g_m.kind, DXL_CPROTO_TXN_REPLY);
		assert_int_equal(g_m.status, 0);
	}
	/* then the connection is closed and the process exits 0 */
	assert_int_equal(recv_frame(fd, 15000), 0);
	close(fd);
	int st = dxlt_wait_exit(g_coord, 15000);
	dxlt_untrack(g_coord);
	static char log[65536];
	dxlt_slurp(g_coordlog, log, sizeof(log));
	if (st != 0)
		print_message("dxl-coord log:\n%s\n", log);
	assert_int_equal(st, 0);
	g_coord = -1;
	assert_non_null(strstr(log, "event=stopping reason=SIGTERM"));
	assert_non_null(strstr(log, "event=stopped"));
	/* coords/<id> is gone at once (the session was closed) */
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_zkc, g_cluster, &zk), 0);
	uint32_t ids[4];
	assert_int_equal(dxl_coord_znode_list(zk, ids, 4), 0);
	dxl_zk_delete(&zk);
	/* the write of the answered transaction is there: a new coordinator
	 * reads it */
	start_coord();
	EXPECT_RC(DXL(NULL, "get", "1", "10"), 0);
	assert_string_equal(out, "bye\n");
	free(b.p);
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_start),
		cmocka_unit_test(test_put_get),
		cmocka_unit_test(test_insert_del),
		cmocka_unit_test(test_txn),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_pipelined),
		cmocka_unit_test(test_absurd_length),
		cmocka_unit_test(test_concurrent),
		cmocka_unit_test(test_start_failures),
		cmocka_unit_test(test_sigterm),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
