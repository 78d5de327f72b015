/* test_recovery.c -- no table state missing on a member: a replica returning after retention reclaimed records it never saw (the rolling restart that lost 192 of 192 acknowledged writes), and a node added to a shard whose data is older than retention; each is promoted by killing the others, then every key is checked. Real cluster (3 dxl-replica, ZooKeeper), short retention.
 *
 * Needs DXL_TEST_ZK=host:port (scripts/test.sh sets it); skips otherwise.
 * DXL_TEST_KEEP=1 keeps the temporary directory (daemon logs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/engine.h"
#include "dxl/membership.h"
#include "dxl/txn.h"
#include "tests/lib/cli_run.h"
#include "tests/lib/proc.h"

#define T_KV 1
#define NKEYS 64
#define OUT_CAP 65536

static const char *g_zkc;
static char g_dxl[PATH_MAX];
static char g_tmp[128];
static char *g_out, *g_err;

struct cl {
	char name[64];
	char dir[256];
	bool up;
};
static struct cl g_roll, g_add, g_ver, g_pf; /* brought down by the teardown too */

static int run_dxl(const char *const *args, int timeout_ms)
{
	const char *argv[64];
	int a = 0;
	argv[a++] = g_dxl;
	for (int i = 0; args[i] && a < 63; i++)
		argv[a++] = args[i];
	argv[a] = NULL;
	return dxlt_run(argv, NULL, g_tmp, g_out, g_err, OUT_CAP, timeout_ms);
}

static void dxl_ok(const char *const *args)
{
	int rc = run_dxl(args, 90000);
	if (rc)
		fail_msg("dxl %s %s: exit %d\n%s\n%s", args[0], args[1], rc, g_out, g_err);
}

/* short retention: a record is reclaimed about a second after every
 * member has it */
static void cluster_up(struct cl *c, const char *tag, const char *replicas)
{
	snprintf(c->name, sizeof(c->name), "rc-%d-%s", (int)getpid(), tag);
	snprintf(c->dir, sizeof(c->dir), "%s/%s", g_tmp, tag);
	const char *args[] = {"cluster", "up", "--dir", c->dir, "--zk", g_zkc,
			      "--cluster", c->name, "--replicas", replicas, "--shards", "2",
			      "--ring-size", "256K", "--writer-slots", "4",
			      "--session-timeout", "1000", "--min-replicas", "1",
			      "-o", "engine.tables=1:32:1024",
			      "-o", "log.retention_ms=500", "-o", "log.retention_check_ms=100",
			      NULL};
	dxl_ok(args);
	c->up = true;
}

static void cluster_down(struct cl *c)
{
	if (!c->up)
		return;
	const char *args[] = {"cluster", "down", "--dir", c->dir, NULL};
	if (run_dxl(args, 30000))
		print_message("cluster down: %s%s\n", g_out, g_err);
	dxlt_cluster_reap(c->dir);
	c->up = false;
}

static void node_cmd(const struct cl *c, const char *what, uint32_t node)
{
	char n[16];
	snprintf(n, sizeof(n), "%u", node);
	const char *args[] = {"cluster", what, n, "--dir", c->dir, NULL};
	dxl_ok(args);
}

static struct dxl_zk *zk_open(const struct cl *c)
{
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_zkc, c->name, &zk), 0);
	return zk;
}

/* wait until the configuration says: node is (member) or is not (!member)
 * in every shard; with primary, also the primary of every shard */
static void wait_config(const struct cl *c, uint32_t node, bool member, bool primary,
			int timeout_s)
{
	struct dxl_zk *zk = zk_open(c);
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_s * 1000;
	for (;;) {
		struct dxl_cluster_config cfg;
		bool ok = false;
		if (dxl_cluster_config_read(zk, &cfg, NULL) == 0) {
			ok = true;
			for (uint32_t sh = 0; sh < 2; sh++) {
				const struct dxl_cluster_shard *s = dxl_cluster_config_shard(&cfg, sh);
				uint32_t m[DXL_CONFIG_MAX_REPLICAS];
				uint32_t n = dxl_cluster_shard_members(s, m);
				bool in = false;
				for (uint32_t k = 0; k < n; k++)
					in |= m[k] == node;
				ok &= in == member && (!primary || (s && s->primary == node));
			}
			dxl_cluster_config_clear(&cfg);
		}
		if (ok)
			break;
		if (dxl_now_ms() > end) {
			dxl_zk_delete(&zk);
			fail_msg("node %u: not %s%s of every shard after %d s", node,
				 member ? "a member" : "removed", primary ? " (primary)" : "",
				 timeout_s);
		}
		usleep(100000);
	}
	dxl_zk_delete(&zk);
}

/* ---- transactions ------------------------------------------------------------------ */

struct env {
	struct dxl_zk *zk;
	struct dxl_coord *c;
	struct dxl_coord_worker *w;
};

static void env_open(struct env *e, const struct cl *c)
{
	memset(e, 0, sizeof(*e));
	e->zk = zk_open(c);
	struct dxl_coord_cfg cfg;
	dxl_coord_cfg_init(&cfg);
	if (dxl_coord_new(e->zk, &cfg, &e->c))
		fail_msg("dxl_coord_new: %s", dxl_errmsg());
	if (dxl_coord_worker_new(e->c, 4, &e->w))
		fail_msg("worker: %s", dxl_errmsg());
}

static void env_close(struct env *e)
{
	dxl_coord_worker_delete(&e->w);
	dxl_coord_delete(&e->c);
	dxl_zk_delete(&e->zk);
}

struct op {
	struct env *e;
	bool write, insert;
	uint64_t key;
	char val[32];
	uint32_t len;
	int ret;
};

static void co_op(void *arg)
{
	struct op *o = arg;
	for (int attempt = 0; attempt < 1500; attempt++) { /* 30 s: a dead coordinator's locks wait for its session to expire */
		struct dxl_txn *t;
		o->ret = dxl_txn_begin(o->e->w, &t);
		if (o->ret)
			return;
		if (o->insert)
			o->ret = dxl_txn_insert(t, T_KV, o->key, o->val, o->len);
		else if (o->write)
			o->ret = dxl_txn_put(t, T_KV, o->key, o->val, o->len);
		else
			o->ret = dxl_txn_get(t, T_KV, o->key, o->val, sizeof(o->val), &o->len);
		if (!o->ret)
			o->ret = dxl_txn_commit(t, NULL);
		else
			dxl_txn_abort(t);
		/* a failover in progress: try again (a write whose outcome is
		 * unknown is not acknowledged: the test fails on it below) */
		if (o->ret != DXL_E_CONFLICT && o->ret != DXL_E_UNAVAIL && o->ret != DXL_E_STALE)
			return;
		usleep(20000);
	}
}

static int op(struct env *e, bool write, bool insert, uint64_t key, const char *val, char *out)
{
	struct op o = {.e = e, .write = write, .insert = insert, .key = key};
	if (val) {
		o.len = (uint32_t)strlen(val);
		memcpy(o.val, val, o.len);
	}
	assert_int_equal(dxl_coord_worker_spawn(e->w, co_op, &o), 0);
	assert_int_equal(dxl_coord_worker_run(e->w), 0);
	if (out && !o.ret) {
		memcpy(out, o.val, o.len);
		out[o.len] = 0;
	}
	return o.ret;
}

/* the value every key must have: what the last acknowledged write said */
static char g_want[NKEYS][32];

static void load(const struct cl *c)
{
	struct env e;
	env_open(&e, c);
	for (uint64_t k = 0; k < NKEYS; k++) {
		snprintf(g_want[k], sizeof(g_want[k]), "v0-%u", (unsigned)k);
		int ret = op(&e, true, true, k, g_want[k], NULL);
		if (ret)
			fail_msg("insert %" PRIu64 ": %s: %s", k, dxl_errname(ret), dxl_errmsg());
	}
	env_close(&e);
}

/* rounds x nkeys acknowledged updates of keys 0..nkeys-1 */
static void update(const struct cl *c, int round0, int rounds, uint64_t nkeys)
{
	struct env e;
	env_open(&e, c);
	for (int r = round0; r < round0 + rounds; r++)
		for (uint64_t k = 0; k < nkeys; k++) {
			char v[32];
			snprintf(v, sizeof(v), "v%d-%u", r, (unsigned)k);
			int ret = op(&e, true, false, k, v, NULL);
			if (ret)
				fail_msg("put %" PRIu64 ": %s: %s", k, dxl_errname(ret), dxl_errmsg());
			memcpy(g_want[k], v, sizeof(v));
		}
	env_close(&e);
}

/* every key read back at the primary; returns the keys that are wrong */
static int check_all(const struct cl *c, const char *when)
{
	struct env e;
	env_open(&e, c);
	int bad = 0;
	for (uint64_t k = 0; k < NKEYS; k++) {
		char got[40] = "";
		int ret = op(&e, false, false, k, NULL, got);
		if (ret || strcmp(got, g_want[k])) {
			if (bad < 5)
				print_message("  %s: key %" PRIu64 ": %s, acknowledged \"%s\"\n", when, k,
					      ret ? dxl_errname(ret) : got, g_want[k]);
			bad++;
		}
	}
	env_close(&e);
	print_message("  %s: %d of %d keys wrong\n", when, bad, NKEYS);
	return bad;
}

/* wait until retention has certainly reclaimed what was written: 500 ms
 * retention, 100 ms passes, a margin */
static void wait_retention(void)
{
	usleep(2500 * 1000);
}

static int count_log(const struct cl *c, uint32_t node, const char *what)
{
	char path[400], cmd[600];
	snprintf(path, sizeof(path), "%s/logs/replica-%u.log", c->dir, node);
	snprintf(cmd, sizeof(cmd), "grep -c '%s' '%s'", what, path);
	FILE *p = popen(cmd, "r");
	int n = 0;
	if (p) {
		if (fscanf(p, "%d", &n) != 1)
			n = 0;
		pclose(p);
	}
	return n;
}

#define NEED_ZK()                                                                  \
	do {                                                                       \
		if (!g_zkc) {                                                      \
			print_message("SKIPPED: no ZooKeeper (DXL_TEST_ZK unset)\n"); \
			skip();                                                    \
		}                                                                  \
	} while (0)

/*
 * The reproduction (issue 13): a rolling restart with short retention.
 * Node 3 is killed; 3 x 64 = 192 acknowledged writes while it is down;
 * retention reclaims them on nodes 1 and 2; node 3 comes back and is
 * added again. Then node 2 goes the same way (its writes touch half the
 * keys, so the other half still shows what node 3 missed). Finally nodes
 * 1 and 2 are killed: node 3 is promoted, and every key must read as
 * acknowledged. Before the fix node 3 copied only the members' logs
 * (whose heads were past those writes) and served its old values for
 * the keys written while it was down.
 */
static void test_rolling_restart(void **state)
{
	(void)state;
	NEED_ZK();
	struct cl *c = &g_roll;
	cluster_up(c, "roll", "3");
	load(c);
	for (uint32_t node = 3; node >= 2; node--) {
		node_cmd(c, "kill", node);
		wait_config(c, node, false, false, 30);
		update(c, node == 3 ? 1 : 4, 3, node == 3 ? NKEYS : NKEYS / 2);
		wait_retention();
		node_cmd(c, "restart", node);
		wait_config(c, node, true, false, 60);
		assert_int_equal(check_all(c, "after the restart"), 0);
	}
	int gaps = count_log(c, 3, "event=catch_up_gap");
	int xfers = count_log(c, 3, "event=transfer_done");
	print_message("  node 3: %d gaps found, %d state transfers\n", gaps, xfers);
	/* node 3 alone: promoted */
	node_cmd(c, "kill", 1);
	node_cmd(c, "kill", 2);
	wait_config(c, 3, true, true, 60);
	int bad = check_all(c, "node 3 promoted");
	cluster_down(c);
	assert_int_equal(bad, 0);
	/* it really was the path under test */
	assert_true(gaps >= 1);
	assert_true(xfers >= 1);
}

/*
 * A node added to a shard whose data is older than retention (the
 * replacement of a dead node): node 3 dies for good; the data is loaded
 * and updated on nodes 1 and 2 and retention reclaims its log, so they
 * hold it in their tables only; node 4 is added (dxl cluster add: the CM
 * adds it since the shards have 2 members of cm.replication 3), transfers
 * the tables while writes go on, joins; nodes 1 and 2 are killed; node 4
 * serves every key.
 */
static void test_new_node(void **state)
{
	(void)state;
	NEED_ZK();
	struct cl *c = &g_add;
	cluster_up(c, "add", "3");
	node_cmd(c, "kill", 3);
	wait_config(c, 3, false, false, 30);
	load(c);
	update(c, 1, 2, NKEYS);
	wait_retention();
	const char *args[] = {"cluster", "add", "--dir", c->dir, NULL};
	dxl_ok(args);
	update(c, 3, 1, NKEYS / 2); /* while it catches up */
	wait_config(c, 4, true, false, 60);
	int xfers = count_log(c, 4, "event=transfer_done");
	print_message("  node 4: %d state transfers\n", xfers);
	update(c, 4, 1, NKEYS / 4);
	node_cmd(c, "kill", 1);
	node_cmd(c, "kill", 2);
	wait_config(c, 4, true, true, 60);
	int bad = check_all(c, "node 4 promoted");
	cluster_down(c);
	assert_int_equal(bad, 0);
	assert_true(xfers >= 1);
}

/*
 * dxl cluster verify: the members of a quiet cluster agree; a backup whose
 * store was changed behind the log's back (a record rewritten with another
 * version while it was down: what a lost or stray write looks like) is
 * named, with the key, and verify exits 1.
 */
static void test_verify(void **state)
{
	(void)state;
	NEED_ZK();
	struct cl *c = &g_ver;
	cluster_up(c, "ver", "3");
	load(c);
	update(c, 1, 1, NKEYS);
	const char *vargs[] = {"cluster", "verify", "--dir", c->dir, "--wait", "20", NULL};
	int rc = run_dxl(vargs, 120000);
	print_message("%s", g_out);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(g_out, "shard 0: 3 members agree"));
	assert_non_null(strstr(g_out, "shard 1: 3 members agree"));
	/* node 2 down; one record of its shard 0 rewritten behind the log */
	node_cmd(c, "kill", 2);
	wait_config(c, 2, false, false, 30);
	char path[400];
	snprintf(path, sizeof(path), "%s/data/2/store-0.dat", c->dir);
	struct dxl_region_id id = {.node_id = 2};
	snprintf(id.cluster, sizeof(id.cluster), "%.63s", c->name);
	struct dxl_store *st;
	assert_int_equal(dxl_store_open(path, DXL_DUR_PROCESS, &id, NULL, &st), 0);
	uint64_t key = UINT64_MAX;
	for (uint64_t slot = 0; slot < 1024 && key == UINT64_MAX; slot++) {
		struct dxl_record r;
		if (dxl_store_read(st, 1, slot, &r, NULL, 0) == 0 && r.live)
			key = r.key;
	}
	assert_true(key != UINT64_MAX);
	assert_int_equal(dxl_store_apply(st, 1, key, DXL_WS_UPDATE, 1000000, 1, "stray", 5), 1);
	dxl_store_close(&st);
	node_cmd(c, "restart", 2);
	wait_config(c, 2, true, false, 60);
	const char *vargs2[] = {"cluster", "verify", "--dir", c->dir, "--wait", "3", NULL};
	rc = run_dxl(vargs2, 120000);
	print_message("%s", g_out);
	assert_int_equal(rc, 1);
	assert_non_null(strstr(g_out, "shard 0: members DIFFER"));
	assert_non_null(strstr(g_out, "DIFFERS"));
	char want[128];
	snprintf(want, sizeof(want), "table 1 key %" PRIu64 ":", key);
	assert_non_null(strstr(g_out, want));
	assert_non_null(strstr(g_out, "version 1000000"));
	assert_non_null(strstr(g_out, "shard 1: 3 members agree"));
	cluster_down(c);
}

/*
 * Power failures of a node while it catches up and transfers state: node 4
 * is added to a shard whose log was reclaimed (it must transfer), and is
 * power-failed (the tcp provider's model, then SIGKILL) at random moments
 * of its catch-up, restarted each time. It must end a member whose tables
 * hold every acknowledged write: promoted, every key checked. Coverage:
 * how many restarts found the store marked incomplete (a copy or transfer
 * cut) -- at least one.
 */
static void test_power_fail_during_transfer(void **state)
{
	(void)state;
	NEED_ZK();
	struct cl *c = &g_pf;
	cluster_up(c, "pf", "3");
	node_cmd(c, "kill", 3);
	wait_config(c, 3, false, false, 30);
	load(c);
	update(c, 1, 2, NKEYS);
	wait_retention();
	const char *add[] = {"cluster", "add", "--dir", c->dir, "--no-wait", NULL};
	dxl_ok(add);
	unsigned seed = 17;
	int cuts = 0;
	for (int k = 0; k < 8; k++) {
		/* into its catch-up: the copies and the transfer right after a
		 * start (each restart catches up again: it was removed) */
		usleep((useconds_t)(20000 + rand_r(&seed) % 400000));
		const char *pf[] = {"cluster", "kill", "4", "--power-fail", "--dir", c->dir, NULL};
		if (run_dxl(pf, 30000)) /* not running yet: kill -9 then */
			node_cmd(c, "kill", 4);
		/* its ZooKeeper session must expire before it registers again */
		usleep(1500 * 1000);
		node_cmd(c, "restart", 4);
	}
	/* (no transactions during the power failures: a transaction caught by
	 * the configuration change that adds node 4 can hold its locks for a
	 * long time -- a transaction-layer matter, not this test's) */
	wait_config(c, 4, true, false, 90);
	update(c, 20, 1, NKEYS);
	cuts = count_log(c, 4, "event=store_incomplete") + count_log(c, 4, "event=store_rebuilt");
	/* a transfer wrote its checkpoint (it may have been cut after that:
	 * then the restart installed it, event=store_rebuilt) */
	int xfers = count_log(c, 4, "event=checkpoint_written");
	print_message("  8 power failures of node 4: %d restarts found its store marked "
		      "incomplete (%d rebuilt from a checkpoint), %d transfer checkpoints "
		      "written, %d transfers completed\n",
		      cuts, count_log(c, 4, "event=store_rebuilt"), xfers,
		      count_log(c, 4, "event=transfer_done"));
	node_cmd(c, "kill", 1);
	node_cmd(c, "kill", 2);
	wait_config(c, 4, true, true, 60);
	int bad = check_all(c, "node 4 promoted");
	cluster_down(c);
	assert_int_equal(bad, 0);
	assert_true(xfers >= 1);
	assert_true(cuts >= 1);
}

static int group_setup(void **state)
{
	(void)state;
	g_zkc = getenv("DXL_TEST_ZK");
	assert_int_equal(dxlt_prog_path("dxl", g_dxl, sizeof(g_dxl)), 0);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-recovery-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	g_out = malloc(OUT_CAP);
	g_err = malloc(OUT_CAP);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	cluster_down(&g_roll);
	cluster_down(&g_add);
	cluster_down(&g_ver);
	cluster_down(&g_pf);
	if (!getenv("DXL_TEST_KEEP")) {
		char cmd[300];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
		if (system(cmd)) {
		}
	} else {
		print_message("kept %s\n", g_tmp);
	}
	free(g_out);
	free(g_err);
	return 0;
}

int main(void)
{
	if (getenv("DXL_TEST_FILTER"))
		cmocka_set_test_filter(getenv("DXL_TEST_FILTER"));
	alarm(600);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rolling_restart),
		cmocka_unit_test(test_new_node),
		cmocka_unit_test(test_verify),
		cmocka_unit_test(test_power_fail_during_transfer),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
