/* test_membership_faults.c -- membership under failures: ZooKeeper
 * unreachable at start, a stopped or killed server and the lease, a paused
 * member whose lease must end before the server expires its session, and a
 * 3-server ensemble losing servers under a live session.
 *
 * Starts its own servers with scripts/zk.sh in /tmp/dxl-mt-zk.* (stopped at
 * the end, also when a test fails or the watchdog fires); the paused-member
 * test uses DXL_TEST_ZK when set. Prints the measured lease numbers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <sys/mman.h>
#include <sys/prctl.h>

#include "test_membership_util.h"

static struct mt_server g_srv; /* standalone, for the paused-member test */
static const char *g_zk;

static int group_setup(void **state)
{
	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
	atexit(mt_stop_all_servers);
	mt_alarm(120);
	g_zk = getenv("DXL_TEST_ZK");
	if (!g_zk || !g_zk[0]) {
		if (mt_server_start(&g_srv, 1) != 0)
			return -1;
		g_zk = g_srv.connect;
	}
	return 0;
}

static int group_teardown(void **state)
{
	if (mt_child_pid > 0) {
		kill(mt_child_pid, SIGKILL);
		waitpid(mt_child_pid, NULL, 0);
		mt_child_pid = 0;
	}
	mt_stop_all_servers();
	alarm(0);
	return 0;
}

static int test_setup(void **state)
{
	mt_alarm(90);
	return 0;
}

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

static struct dxl_zk *open_zk(const char *connect, const char *cluster,
			      struct mt_rec *rec)
{
	struct dxl_zk_cfg c;
	dxl_zk_cfg_init(&c);
	snprintf(c.connect, sizeof(c.connect), "%s", connect);
	snprintf(c.cluster, sizeof(c.cluster), "%s", cluster);
	c.connect_timeout_ms = 20000;
	if (rec) {
		c.on_state = mt_on_state;
		c.arg = rec;
	}
	struct dxl_zk *zk = NULL;
	int rc = dxl_zk_new(&c, &zk);
	if (rc)
		print_message("dxl_zk_new: %s\n", dxl_errmsg());
	assert_int_equal(rc, 0);
	return zk;
}

/* ---- unreachable at start ------------------------------------------------------ */

static void test_unreachable_at_start(void **state)
{
	int port = mt_free_port();
	assert_true(port > 0);
	struct dxl_zk_cfg c;
	dxl_zk_cfg_init(&c);
	snprintf(c.connect, sizeof(c.connect), "127.0.0.1:%d", port);
	snprintf(c.cluster, sizeof(c.cluster), "nobody");
	c.connect_timeout_ms = 1500;
	c.session_timeout_ms = 1000;
	c.retry_initial_ms = 100;
	c.retry_max_ms = 400;
	struct dxl_zk *zk = NULL;
	uint64_t t0 = dxl_boot_ns();
	int rc = dxl_zk_new(&c, &zk);
	uint64_t took = dxl_boot_ns() - t0;
	print_message("dxl_zk_new -> %s after %.0f ms: %s\n", dxl_errname(rc),
		      ms(took), dxl_errmsg());
	assert_int_equal(rc, DXL_E_UNAVAIL);
	assert_null(zk);
	assert_non_null(strstr(dxl_errmsg(), c.connect));
	assert_non_null(strstr(dxl_errmsg(), "attempt"));
	assert_non_null(strstr(dxl_errmsg(), "is ZooKeeper running"));
	/* it kept trying for the whole budget (and not much longer) */
	assert_true(took >= 1400ull * 1000000ull);
	assert_true(took < 6000ull * 1000000ull);
	/* more than one attempt: "after N attempt(s)" with N >= 2 */
	const char *a = strstr(dxl_errmsg(), "after ");
	assert_non_null(a);
	assert_true(atoi(a + 6) >= 2);
}

/* ---- a stopped, then killed, standalone server -------------------------------- */

struct poll_lease {
	uint64_t max_until; /* largest lease end seen */
	uint64_t t_invalid; /* first time seen invalid */
};

/* poll the lease every ms until it is invalid (bounded by timeout_ms) */
static bool poll_until_invalid(struct dxl_zk *zk, struct poll_lease *p,
			       int timeout_ms)
{
	uint64_t deadline = dxl_boot_ns() + (uint64_t)timeout_ms * 1000000ull;
	while (dxl_boot_ns() < deadline) {
		uint64_t u = dxl_zk_lease_until_ns(zk);
		uint64_t now = dxl_boot_ns();
		if (!u) {
			p->t_invalid = now;
			return true;
		}
		if (u > p->max_until)
			p->max_until = u;
		usleep(1000);
	}
	return false;
}

struct lease_grow {
	struct dxl_zk *zk;
	uint64_t base;
};

static bool lease_beyond(void *arg)
{
	struct lease_grow *g = arg;
	return dxl_zk_lease_until_ns(g->zk) > g->base;
}

static bool lease_valid(void *arg)
{
	return dxl_zk_lease_valid(arg);
}

static void test_lease_server_stopped_and_killed(void **state)
{
	struct mt_server s;
	assert_int_equal(mt_server_start(&s, 1), 0);
	struct mt_rec rec;
	mt_rec_init(&rec);
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "lease");
	struct dxl_zk *zk = open_zk(s.connect, cl, &rec); /* default 3000 ms */
	uint32_t to = dxl_zk_session_timeout_ms(zk), lease = dxl_zk_lease_ms(zk);
	assert_int_equal(to, 3000);
	assert_int_equal(lease, 1500);
	int64_t sid = dxl_zk_session_id(zk);
	/* at least one renewal went through */
	struct lease_grow g = {zk, dxl_zk_lease_until_ns(zk)};
	assert_true(mt_wait_true(lease_beyond, &g, 5000));

	/* SIGSTOP: the server neither answers nor closes the connection */
	int pid = mt_read_pid(&s, 1);
	assert_true(pid > 0);
	int n0 = mt_rec_len(&rec);
	uint64_t t_stop = dxl_boot_ns();
	assert_int_equal(kill(pid, SIGSTOP), 0);
	struct poll_lease p = {0, 0};
	assert_true(poll_until_invalid(zk, &p, 10000));
	/* the last renewal was sent before the stop */
	assert_true(p.max_until <= t_stop + (uint64_t)lease * 1000000ull);
	/* invalid no later than it said (1 ms of polling slack) */
	assert_true(p.t_invalid <= p.max_until + 5000000ull);
	/* and well before the server could expire the session: the renewal
	 * behind max_until reached the server after max_until - lease, so the
	 * server's expiry is at least max_until - lease + timeout */
	uint64_t server_min_expiry = p.max_until - (uint64_t)lease * 1000000ull +
				     (uint64_t)to * 1000000ull;
	assert_true(p.t_invalid < server_min_expiry);
	/* the client library notices later (2/3 of the timeout) */
	int d = mt_rec_wait(&rec, n0, MT_STATE, DXL_ZK_DISCONNECTED, 10000);
	assert_true(d >= 0);
	uint64_t t_disc = mt_rec_get(&rec, d).t_ns;
	assert_true(p.t_invalid <= t_disc);
	print_message("server SIGSTOPped: lease invalid after %.0f ms (bound: "
		      "%u ms after the last renewal's send, which was %.0f ms "
		      "before the stop); client disconnected after %.0f ms; the "
		      "server cannot expire the session before +%.0f ms\n",
		      ms(p.t_invalid - t_stop), lease,
		      ms(t_stop - (p.max_until - (uint64_t)lease * 1000000ull)),
		      ms(t_disc - t_stop), ms(server_min_expiry - t_stop));

	/* resume before the session timeout: the session comes back */
	assert_int_equal(kill(pid, SIGCONT), 0);
	int c = mt_rec_wait(&rec, d, MT_STATE, DXL_ZK_CONNECTED, 10000);
	int e = mt_rec_wait(&rec, d, MT_STATE, DXL_ZK_EXPIRED, 0);
	print_message("server resumed %.0f ms after the stop: %s\n",
		      ms(dxl_boot_ns() - t_stop),
		      c >= 0 ? "session reconnected" : "session expired");
	assert_true(c >= 0 || e >= 0);
	if (c >= 0) {
		assert_int_equal(dxl_zk_session_id(zk), sid);
		assert_true(mt_wait_true(lease_valid, zk, 5000));
	} else {
		assert_int_equal(dxl_zk_reopen(zk), 0);
	}

	/* SIGKILL: the connection breaks, the lease ends at once */
	g.base = dxl_zk_lease_until_ns(zk);
	assert_true(mt_wait_true(lease_beyond, &g, 5000));
	n0 = mt_rec_len(&rec);
	uint64_t t_kill = dxl_boot_ns();
	assert_int_equal(mt_server_cmd(&s, "kill", 1), 0);
	struct poll_lease p2 = {0, 0};
	assert_true(poll_until_invalid(zk, &p2, 10000));
	assert_true(p2.t_invalid <= t_kill + (uint64_t)lease * 1000000ull);
	assert_true(mt_rec_wait(&rec, n0, MT_STATE, DXL_ZK_DISCONNECTED, 10000) >= 0);
	print_message("server SIGKILLed: lease invalid after %.1f ms (connection "
		      "closed)\n", ms(p2.t_invalid - t_kill));
	/* calls fail cleanly while there is no server */
	uint64_t v;
	int rc = dxl_cursor_get(zk, "g", 0, &v, NULL);
	assert_int_equal(rc, DXL_E_UNAVAIL);
	print_message("a call meanwhile: %s: %s\n", dxl_errname(rc), dxl_errmsg());
	dxl_zk_delete(&zk);
	mt_server_stop(&s);
}

/* ---- a paused member: its lease ends before the server expires it -------------- */

struct child_pub {
	_Atomic uint64_t seq;
	_Atomic uint64_t lease_until;
	_Atomic int valid;
	_Atomic int state;
	_Atomic int registered; /* 1 ok, < 0 the error */
	_Atomic uint32_t lease_ms;
	_Atomic uint32_t timeout_ms;
};

#define CHILD_NODE 11

/* the member, in a child process (the test binary re-executed) */
static int child_main(const char *pubpath)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	alarm(60);
	int fd = open(pubpath, O_RDWR);
	if (fd < 0)
		return 2;
	struct child_pub *pub = mmap(NULL, sizeof(*pub), PROT_READ | PROT_WRITE,
				     MAP_SHARED, fd, 0);
	close(fd);
	if (pub == MAP_FAILED)
		return 3;
	struct dxl_zk_cfg c;
	dxl_zk_cfg_init(&c);
	snprintf(c.connect, sizeof(c.connect), "%s", getenv("DXLT_MCHILD_ZK"));
	snprintf(c.cluster, sizeof(c.cluster), "%s", getenv("DXLT_MCHILD_CLUSTER"));
	struct dxl_zk *zk;
	int rc = dxl_zk_new(&c, &zk);
	if (!rc)
		rc = dxl_member_register(zk, CHILD_NODE, "{\"addr\":\"child:1\"}");
	if (rc) {
		fprintf(stderr, "child: %s\n", dxl_errmsg());
		atomic_store(&pub->registered, rc);
		return 4;
	}
	atomic_store(&pub->lease_ms, dxl_zk_lease_ms(zk));
	atomic_store(&pub->timeout_ms, dxl_zk_session_timeout_ms(zk));
	atomic_store(&pub->registered, 1);
	for (;;) {
		/* what a replica does before each write */
		uint64_t until = dxl_zk_lease_until_ns(zk);
		atomic_store(&pub->lease_until, until);
		atomic_store(&pub->valid, until != 0);
		atomic_store(&pub->state, (int)dxl_zk_state(zk));
		atomic_fetch_add(&pub->seq, 1);
		usleep(1000);
	}
}

static bool proc_stopped(pid_t pid)
{
	char p[64], buf[512];
	snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *r = strrchr(buf, ')');
	return r && r[1] == ' ' && r[2] == 'T';
}

static void test_lease_ends_before_session_expiry(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "pause");
	struct mt_rec rec;
	mt_rec_init(&rec);
	struct dxl_zk *obs = open_zk(g_zk, cl, NULL);
	struct dxl_member_watch *mw;
	assert_int_equal(dxl_member_watch_new(obs, mt_on_member, &rec, &mw), 0);

	char pubpath[] = "/tmp/dxl-mt-pub.XXXXXX";
	int fd = mkstemp(pubpath);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4096), 0);
	struct child_pub *pub = mmap(NULL, sizeof(*pub), PROT_READ | PROT_WRITE,
				     MAP_SHARED, fd, 0);
	close(fd);
	assert_true(pub != MAP_FAILED);

	/* environment: ours plus the child's parameters */
	size_t ne = 0;
	while (environ[ne])
		ne++;
	char **envp = calloc(ne + 4, sizeof(*envp));
	assert_non_null(envp);
	memcpy(envp, environ, ne * sizeof(*envp));
	char e1[128], e2[512], e3[128];
	snprintf(e1, sizeof(e1), "DXLT_MCHILD=%s", pubpath);
	snprintf(e2, sizeof(e2), "DXLT_MCHILD_ZK=%s", g_zk);
	snprintf(e3, sizeof(e3), "DXLT_MCHILD_CLUSTER=%s", cl);
	envp[ne] = e1;
	envp[ne + 1] = e2;
	envp[ne + 2] = e3;
	char exe[] = "/proc/self/exe";
	char *argv[] = {exe, NULL};
	pid_t pid;
	assert_int_equal(posix_spawn(&pid, exe, NULL, NULL, argv, envp), 0);
	free(envp);
	mt_child_pid = pid;

	int j = mt_rec_wait(&rec, 0, MT_JOIN, CHILD_NODE, 20000);
	assert_true(j >= 0);
	assert_int_equal(atomic_load(&pub->registered), 1);
	uint32_t lease = atomic_load(&pub->lease_ms), to = atomic_load(&pub->timeout_ms);
	assert_int_equal(to, 3000); /* the default */
	/* the child is serving: valid lease, published continuously */
	uint64_t s0 = atomic_load(&pub->seq);
	for (int i = 0; i < 5000 && (atomic_load(&pub->seq) < s0 + 20 ||
				     !atomic_load(&pub->valid)); i++)
		usleep(1000);
	assert_true(atomic_load(&pub->valid));

	/* pause the member: a GC pause, a partition, a frozen VM */
	uint64_t t_stop = dxl_boot_ns();
	assert_int_equal(kill(pid, SIGSTOP), 0);
	for (int i = 0; i < 2000 && !proc_stopped(pid); i++)
		usleep(500);
	assert_true(proc_stopped(pid));
	uint64_t lease_last = atomic_load(&pub->lease_until);
	assert_true(lease_last > 0);
	assert_true(lease_last < t_stop + (uint64_t)lease * 1000000ull);

	/* the server expires the session: the observer (a CM) sees the leave */
	int lv = mt_rec_wait(&rec, j, MT_LEAVE, CHILD_NODE, 20000);
	assert_true(lv >= 0);
	uint64_t t_leave = mt_rec_get(&rec, lv).t_ns;
	/* THE property: the member stopped serving before anyone could
	 * learn its session was gone (and reassign its shards) */
	assert_true(lease_last < t_leave);
	assert_true(t_stop + (uint64_t)lease * 1000000ull < t_leave);
	print_message("member paused: its lease ended %.0f ms after the pause; "
		      "the observer saw its node leave %.0f ms after the pause "
		      "(session timeout %u ms): margin %.0f ms\n",
		      ms(lease_last - t_stop), ms(t_leave - t_stop), to,
		      ms(t_leave - lease_last));

	/* resumed, the member must see its lease gone, then the expiry */
	uint64_t s1 = atomic_load(&pub->seq);
	assert_int_equal(kill(pid, SIGCONT), 0);
	for (int i = 0; i < 5000 && atomic_load(&pub->seq) < s1 + 3; i++)
		usleep(1000);
	assert_true(atomic_load(&pub->seq) >= s1 + 3);
	assert_false(atomic_load(&pub->valid));
	for (int i = 0; i < 10000 && atomic_load(&pub->state) != DXL_ZK_EXPIRED; i++)
		usleep(1000);
	assert_int_equal(atomic_load(&pub->state), DXL_ZK_EXPIRED);
	assert_false(atomic_load(&pub->valid));

	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	mt_child_pid = 0;
	munmap(pub, sizeof(*pub));
	unlink(pubpath);
	dxl_member_watch_delete(&mw);
	dxl_zk_delete(&obs);
}

/* ---- an ensemble losing servers ------------------------------------------------ */

static void on_elect(void *arg, enum dxl_election_event ev)
{
	mt_rec_add(arg, ev == DXL_ELECTION_ELECTED ? MT_ELECTED : MT_LOST, 0, 0, NULL);
}

static int server_index(struct mt_server *s, struct dxl_zk *zk)
{
	char cur[128];
	if (dxl_zk_server(zk, cur, sizeof(cur)))
		return -1;
	const char *colon = strrchr(cur, ':');
	int port = colon ? atoi(colon + 1) : -1;
	for (int i = 1; i <= s->n; i++)
		if (mt_server_port(s, i) == port)
			return i;
	return -1;
}

static int find_leader(struct mt_server *s)
{
	for (int tries = 0; tries < 200; tries++) {
		for (int i = 1; i <= s->n; i++) {
			char mode[32];
			mt_server_mode(s, i, mode, sizeof(mode));
			if (strcmp(mode, "leader") == 0)
				return i;
		}
		usleep(50000);
	}
	return -1;
}

/* keep working until it works again: a cursor write, within 20 s */
static uint64_t work_until_ok(struct dxl_zk *zk, uint64_t val)
{
	uint64_t t0 = dxl_boot_ns();
	while (dxl_boot_ns() - t0 < 20000000000ull) {
		int rc = dxl_cursor_set(zk, "ens", 0, val, DXL_ZK_VERSION_ANY, NULL);
		if (rc == 0)
			return dxl_boot_ns() - t0;
		assert_int_equal(rc, DXL_E_UNAVAIL); /* never anything else */
		usleep(20000);
	}
	fail_msg("operations did not resume: %s", dxl_errmsg());
	return 0;
}

/* is server i serving in the quorum (within 20 s)? */
static bool in_quorum(struct mt_server *s, int i)
{
	for (int tries = 0; tries < 100; tries++) {
		char mode[32];
		mt_server_mode(s, i, mode, sizeof(mode));
		if (!strcmp(mode, "leader") || !strcmp(mode, "follower"))
			return true;
		usleep(200000);
	}
	return false;
}

static void test_ensemble_survives_server_loss(void **state)
{
	struct mt_server s;
	assert_int_equal(mt_server_start(&s, 3), 0);
	print_message("ensemble at %s\n", s.connect);
	struct mt_rec rec, erec;
	mt_rec_init(&rec);
	mt_rec_init(&erec);
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "ens");
	struct dxl_zk *zk = open_zk(s.connect, cl, &rec);
	int64_t sid = dxl_zk_session_id(zk);
	assert_int_equal(dxl_member_register(zk, 1, "{\"addr\":\"n1\"}"), 0);
	struct dxl_election *el;
	assert_int_equal(dxl_election_new(zk, DXL_ELECTION_CM, "{}", NULL, NULL, &el),
			 DXL_E_INVAL); /* a callback is required */
	assert_int_equal(dxl_election_new(zk, DXL_ELECTION_CM, "{}", on_elect, &erec,
					  &el), 0);
	assert_true(mt_rec_wait(&erec, 0, MT_ELECTED, UINT32_MAX, 5000) >= 0);
	assert_int_equal(dxl_cursor_set(zk, "ens", 0, 1, DXL_ZK_VERSION_NONE, NULL), 0);

	/* 1: kill the server the session is connected to */
	int cur = server_index(&s, zk);
	assert_true(cur >= 1);
	int leader = find_leader(&s);
	assert_true(leader >= 1);
	assert_int_equal(mt_server_cmd(&s, "kill", cur), 0);
	uint64_t took = work_until_ok(zk, 2);
	print_message("killed server %d (ours%s): operations resumed after %.0f "
		      "ms, now on server %d\n", cur,
		      cur == leader ? ", the quorum leader" : "", ms(took),
		      server_index(&s, zk));
	assert_int_equal(dxl_zk_session_id(zk), sid);
	assert_int_equal(dxl_zk_session_epoch(zk), 1);
	assert_true(server_index(&s, zk) != cur);
	assert_int_equal(mt_rec_count(&rec, MT_STATE, DXL_ZK_EXPIRED), 0);
	char *p;
	int64_t owner;
	assert_int_equal(dxl_member_get(zk, 1, &p, &owner), 0);
	assert_int_equal(owner, sid);
	free(p);
	assert_true(mt_wait_true(lease_valid, zk, 10000));

	/* 2: if the quorum leader is still up, bring the killed server back
	 * (2 of 3 must stay up), then kill the leader */
	uint64_t want = 2;
	if (cur != leader) {
		assert_int_equal(mt_server_cmd(&s, "restart", cur), 0);
		if (!in_quorum(&s, cur)) {
			/* scripts/zk.sh picks ports without reserving them: a
			 * restarted server can lose its election port to some
			 * process's ephemeral port (seen once under TSan) */
			print_message("NOTE: server %d did not rejoin after its "
				      "restart (port taken?): the leader kill is "
				      "not exercised in this run\n", cur);
		} else {
			leader = find_leader(&s);
			assert_true(leader >= 1);
			assert_int_equal(mt_server_cmd(&s, "kill", leader), 0);
			took = work_until_ok(zk, 3);
			want = 3;
			print_message("killed server %d (quorum leader): operations "
				      "resumed after %.0f ms\n", leader, ms(took));
		}
	}
	assert_int_equal(dxl_zk_session_id(zk), sid);
	assert_int_equal(mt_rec_count(&rec, MT_STATE, DXL_ZK_EXPIRED), 0);
	assert_int_equal(dxl_member_get(zk, 1, &p, &owner), 0);
	assert_int_equal(owner, sid);
	free(p);
	uint64_t v;
	assert_int_equal(dxl_cursor_get(zk, "ens", 0, &v, NULL), 0);
	assert_int_equal(v, want);
	assert_true(mt_wait_true(lease_valid, zk, 10000));
	/* the CM candidate kept its leadership throughout */
	assert_true(dxl_election_is_leader(el));
	assert_int_equal(mt_rec_count(&erec, MT_ELECTED, UINT32_MAX), 1);
	assert_int_equal(mt_rec_count(&erec, MT_LOST, UINT32_MAX), 0);

	dxl_election_delete(&el);
	dxl_zk_delete(&zk);
	mt_server_stop(&s);
}

int main(void)
{
	const char *pub = getenv("DXLT_MCHILD");
	if (pub)
		return child_main(pub);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_unreachable_at_start, test_setup),
		cmocka_unit_test_setup(test_lease_server_stopped_and_killed, test_setup),
		cmocka_unit_test_setup(test_lease_ends_before_session_expiry, test_setup),
		cmocka_unit_test_setup(test_ensemble_survives_server_loss, test_setup),
	};
	return cmocka_run_group_tests_name("membership faults", tests, group_setup,
					   group_teardown);
}
