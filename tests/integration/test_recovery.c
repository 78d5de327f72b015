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
#include "dxl/replica.h"
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
static struct cl g_roll, g_rollall, g_add, g_ver, g_pf, g_del, g_lost, g_cur, g_cap; /* brought down by the teardown too */

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
 * member has it; extra: more "-o key=value" options (NULL-terminated) */
static void cluster_up_min(struct cl *c, const char *tag, const char *replicas,
			   const char *min_replicas, const char *const *extra)
{
	snprintf(c->name, sizeof(c->name), "rc-%d-%s", (int)getpid(), tag);
	snprintf(c->dir, sizeof(c->dir), "%s/%s", g_tmp, tag);
	const char *args[48] = {"cluster", "up", "--dir", c->dir, "--zk", g_zkc,
				"--cluster", c->name, "--replicas", replicas, "--shards", "2",
				"--ring-size", "256K", "--writer-slots", "4",
				"--session-timeout", "1000", "--min-replicas", min_replicas,
				"-o", "engine.tables=1:32:1024",
				"-o", "log.retention_ms=500", "-o", "log.retention_check_ms=100"};
	int a = 0;
	while (args[a])
		a++;
	for (int k = 0; extra && extra[k] && a < 45; k++) {
		args[a++] = "-o";
		args[a++] = extra[k];
	}
	args[a] = NULL;
	dxl_ok(args);
	c->up = true;
}

static void cluster_up_opts(struct cl *c, const char *tag, const char *replicas,
			    const char *const *extra)
{
	cluster_up_min(c, tag, replicas, "1", extra);
}

static void cluster_up(struct cl *c, const char *tag, const char *replicas)
{
	cluster_up_opts(c, tag, replicas, NULL);
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
		/* a member: the node itself says so too (its join pull done),
		 * else killing the others next would leave a shard no member
		 * in sync (the CM makes it unavailable rather than lose data) */
		if (ok && member) {
			struct dxl_replica_desc *d = calloc(1, sizeof(*d));
			assert_non_null(d);
			ok = dxl_replica_desc_get(zk, node, d) == 0;
			for (uint32_t sh = 0; ok && sh < 2; sh++) {
				const struct dxl_shard_desc *sd = dxl_replica_desc_shard(d, sh);
				ok = sd && sd->state == DXL_SHARD_MEMBER;
			}
			free(d);
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

/* rounds x (k1 - k0) acknowledged updates of keys k0..k1-1 */
static void update_range(const struct cl *c, int round0, int rounds, uint64_t k0, uint64_t k1)
{
	struct env e;
	env_open(&e, c);
	for (int r = round0; r < round0 + rounds; r++)
		for (uint64_t k = k0; k < k1; k++) {
			char v[32];
			snprintf(v, sizeof(v), "v%d-%u", r, (unsigned)k);
			int ret = op(&e, true, false, k, v, NULL);
			if (ret)
				fail_msg("put %" PRIu64 ": %s: %s", k, dxl_errname(ret), dxl_errmsg());
			memcpy(g_want[k], v, sizeof(v));
		}
	env_close(&e);
}

/* rounds x nkeys acknowledged updates of keys 0..nkeys-1 */
static void update(const struct cl *c, int round0, int rounds, uint64_t nkeys)
{
	update_range(c, round0, rounds, 0, nkeys);
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
 * The rolling restart, as an operator does it: the default
 * cm.min_replicas (2), every node in turn -- the primary last -- killed,
 * a third of the keys written while it is down (its own third each time,
 * so no later write hides a lost one), retention reclaims them, the node
 * restarted and waited for until it is a member again; every key is read
 * back after each restart. Once node 1 goes, a node that returned is the
 * primary. Before the gap detection, the returned nodes came back with
 * stores lacking what was written while they were down (the issue: 192 of
 * 192 writes lost).
 */
static void test_rolling_restart_all(void **state)
{
	(void)state;
	NEED_ZK();
	struct cl *c = &g_rollall;
	cluster_up_min(c, "rollall", "3", "2", NULL);
	load(c);
	int bad = 0, phase = 0;
	for (uint32_t node = 3; node >= 1 && !bad; node--, phase++) {
		node_cmd(c, "kill", node);
		wait_config(c, node, false, false, 30);
		update_range(c, 10 + phase, 2, (uint64_t)phase * NKEYS / 3,
			     (uint64_t)(phase + 1) * NKEYS / 3);
		wait_retention();
		node_cmd(c, "restart", node);
		wait_config(c, node, true, false, 60);
		char when[64];
		snprintf(when, sizeof(when), "after node %u came back", node);
		bad += check_all(c, when);
	}
	int gaps = 0, xfers = 0;
	for (uint32_t n = 1; n <= 3; n++) {
		gaps += count_log(c, n, "event=catch_up_gap");
		xfers += count_log(c, n, "event=transfer_done");
	}
	print_message("  3 nodes restarted in turn: %d gaps found, %d state transfers\n", gaps,
		      xfers);
	cluster_down(c);
	assert_int_equal(bad, 0);
	assert_true(gaps >= 3);
	assert_true(xfers >= 3);
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

/* one transaction over keys[0..n): insert each (value "d-<key>") or delete
 * each; retried like co_op */
struct batch {
	struct env *e;
	bool del;
	const uint64_t *keys;
	uint32_t n;
	int ret;
};

static void co_batch(void *arg)
{
	struct batch *b = arg;
	for (int attempt = 0; attempt < 1500; attempt++) {
		struct dxl_txn *t;
		if ((b->ret = dxl_txn_begin(b->e->w, &t)))
			return;
		for (uint32_t i = 0; i < b->n && !b->ret; i++) {
			char v[32];
			int len = snprintf(v, sizeof(v), "d-%" PRIu64, b->keys[i]);
			b->ret = b->del ? dxl_txn_delete(t, T_KV, b->keys[i])
					: dxl_txn_insert(t, T_KV, b->keys[i], v, (uint32_t)len);
		}
		if (!b->ret)
			b->ret = dxl_txn_commit(t, NULL);
		else
			dxl_txn_abort(t);
		if (b->ret != DXL_E_CONFLICT && b->ret != DXL_E_UNAVAIL && b->ret != DXL_E_STALE)
			return;
		usleep(20000);
	}
}

static void batch(struct env *e, bool del, const uint64_t *keys, uint32_t n)
{
	struct batch b = {.e = e, .del = del, .keys = keys, .n = n};
	assert_int_equal(dxl_coord_worker_spawn(e->w, co_batch, &b), 0);
	assert_int_equal(dxl_coord_worker_run(e->w), 0);
	if (b.ret)
		fail_msg("%s of %u keys: %s: %s", del ? "delete" : "insert", n, dxl_errname(b.ret),
			 dxl_errmsg());
}

/* keys that must read as absent: returns how many are found */
static int check_absent(const struct cl *c, const uint64_t *keys, uint32_t n, const char *when)
{
	struct env e;
	env_open(&e, c);
	int back = 0;
	for (uint32_t i = 0; i < n; i++) {
		char got[40] = "";
		int ret = op(&e, false, false, keys[i], NULL, got);
		if (ret != DXL_E_NOENT) {
			if (back < 5)
				print_message("  %s: deleted key %" PRIu64 ": %s%s\n", when, keys[i],
					      ret ? dxl_errname(ret) : "found: ", ret ? "" : got);
			back++;
		}
	}
	env_close(&e);
	print_message("  %s: %d of %u deleted keys found\n", when, back, n);
	return back;
}

/*
 * Deletes under load and a node that gets the state by transfer: a
 * deleted key must never come back at it. Coordinator B inserts keys
 * D (one transaction) and stays idle: its ring's watermark stays below
 * that record, so the primary's retention keeps it (and every backup
 * applies nothing past it). Coordinator A deletes D and keeps writing:
 * the primary's retention reclaims A's records, the deletes included.
 * Node 4 is added (node 3 died): its copy of the primary's log holds D's
 * inserts but not their deletes, so its image must carry D's tombstones.
 * While it catches up, keys E are deleted under load. Then B finishes
 * (its watermark passes the inserts: every replica applies them now),
 * nodes 1 and 2 are killed, node 4 is promoted: D and E must be absent.
 * Before the transfer carried tombstones, node 4 applied D's inserts and
 * served D again (16 of 16).
 */
static void test_deletes_during_transfer(void **state)
{
	(void)state;
	NEED_ZK();
	struct cl *c = &g_del;
	cluster_up(c, "del", "3");
	node_cmd(c, "kill", 3);
	wait_config(c, 3, false, false, 30);
	load(c);
	enum { ND = 16, NE = 16 };
	uint64_t dk[ND], ek[NE];
	for (uint32_t i = 0; i < ND; i++)
		dk[i] = 1000 + i;
	for (uint32_t i = 0; i < NE; i++)
		ek[i] = 2000 + i;
	struct env eb, ea;
	env_open(&eb, c);
	batch(&eb, false, dk, ND); /* B: D's inserts, then idle */
	env_open(&ea, c);
	batch(&ea, false, ek, NE);
	batch(&ea, true, dk, ND);  /* A: D's deletes */
	for (int r = 0; r < 3; r++) { /* A keeps writing: its records age */
		for (uint64_t k = 0; k < NKEYS; k++) {
			char v[32];
			snprintf(v, sizeof(v), "a%d-%u", r, (unsigned)k);
			assert_int_equal(op(&ea, true, false, k, v, NULL), 0);
			memcpy(g_want[k], v, sizeof(v));
		}
		wait_retention();
	}
	const char *add[] = {"cluster", "add", "--dir", c->dir, "--no-wait", NULL};
	dxl_ok(add);
	/* deletes (and writes) under load while node 4 catches up */
	for (uint32_t i = 0; i < NE; i++) {
		assert_int_equal(op(&ea, true, false, i, "during", NULL), 0);
		snprintf(g_want[i], sizeof(g_want[i]), "during");
		batch(&ea, true, &ek[i], 1);
		usleep(100 * 1000);
	}
	wait_config(c, 4, true, false, 90);
	int xfers = count_log(c, 4, "event=transfer_done");
	env_close(&ea);
	env_close(&eb); /* B's last watermark: its inserts are applied everywhere */
	const char *vargs[] = {"cluster", "verify", "--dir", c->dir, "--wait", "20", NULL};
	int vrc = run_dxl(vargs, 120000);
	print_message("  node 4: %d state transfers; verify: %s", xfers, g_out);
	node_cmd(c, "kill", 1);
	node_cmd(c, "kill", 2);
	wait_config(c, 4, true, true, 60);
	int back = check_absent(c, dk, ND, "node 4 promoted (deleted before it came)");
	back += check_absent(c, ek, NE, "node 4 promoted (deleted while it caught up)");
	int bad = check_all(c, "node 4 promoted");
	cluster_down(c);
	assert_int_equal(back, 0);
	assert_int_equal(bad, 0);
	assert_int_equal(vrc, 0);
	assert_true(xfers >= 1);
}

/*
 * Members write checkpoints (recovery.checkpoint_ms), and a member whose
 * store file is lost rebuilds it from its own checkpoint and its log
 * (which the checkpoint's cursor kept): node 2's stores are deleted while
 * it is down and nothing is written meanwhile, so the members' logs still
 * look like a continuation of node 2's and no gap shows. Before, node 2
 * came back with empty stores, replayed its log window into them and,
 * once promoted, lacked every key whose last write had left the log (32 of
 * 64 in this test).
 */
static void test_lost_store_rebuilt(void **state)
{
	(void)state;
	NEED_ZK();
	struct cl *c = &g_lost;
	const char *opts[] = {"recovery.checkpoint_ms=700", NULL};
	/* every checkpoint write takes 1.5 s, three times log.retention_ms
	 * (as on a loaded machine): its start is kept from before it is
	 * written (before, none of node 2's checkpoints was ever complete) */
	setenv("DXL_TESTPOINTS", "recovery.checkpoint.write=sleep:1500", 1);
	cluster_up_opts(c, "lost", "3", opts);
	load(c);
	/* writes of the first half of the keys go on while checkpoints are
	 * taken (and retention reclaims what is older than 500 ms unless a
	 * checkpoint's cursor keeps it): the other half's only writes (the
	 * load) leave every log, they are in the stores and checkpoints
	 * only; node 2 is killed right after the last one */
	int b0 = count_log(c, 2, "event=checkpoint_done shard=0"), round = 1;
	int b1 = count_log(c, 2, "event=checkpoint_done shard=1");
	uint64_t t0 = dxl_now_ms(), k1 = 0, k2 = 0;
	struct dxl_zk *zk = zk_open(c);
	while ((count_log(c, 2, "event=checkpoint_done shard=0") < b0 + 3 ||
		count_log(c, 2, "event=checkpoint_done shard=1") < b1 + 2) &&
	       dxl_now_ms() - t0 < 60000) {
		update(c, round++, 1, NKEYS / 2);
		if (!k1 && count_log(c, 2, "event=checkpoint_done shard=0") >= b0 + 1 &&
		    dxl_cursor_get(zk, "dxl-ckpt-2", 0, &k1, NULL))
			k1 = 0;
	}
	/* the checkpoints' cursor moves on (retention by age goes on): a
	 * checkpoint that started at the log's heads kept everything the log
	 * held, and the next one started there again */
	if (dxl_cursor_get(zk, "dxl-ckpt-2", 0, &k2, NULL))
		k2 = 0;
	dxl_zk_delete(&zk);
	node_cmd(c, "kill", 2);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -f '%s'/data/2/store-*.dat", c->dir);
	assert_int_equal(system(cmd), 0);
	usleep(1500 * 1000); /* its ZooKeeper session expires */
	node_cmd(c, "restart", 2);
	wait_config(c, 2, true, false, 60);
	int lost = count_log(c, 2, "event=store_lost");
	int rebuilt = count_log(c, 2, "event=store_rebuilt");
	int xfers = count_log(c, 2, "event=transfer_done");
	print_message("  node 2: %d checkpoints written (%d failed), stores lost %d, rebuilt from a "
		      "checkpoint %d, state transfers %d\n", count_log(c, 2, "event=checkpoint_done"),
		      count_log(c, 2, "event=checkpoint_failed"), lost, rebuilt, xfers);
	node_cmd(c, "kill", 1);
	node_cmd(c, "kill", 3);
	wait_config(c, 2, true, true, 60);
	int bad = check_all(c, "node 2 promoted");
	cluster_down(c);
	unsetenv("DXL_TESTPOINTS");
	print_message("  node 2's checkpoint cursor of shard 0: %" PRIu64 " after its first checkpoint, "
		      "%" PRIu64 " after its third\n", k1, k2);
	assert_int_equal(bad, 0);
	assert_true(k1 > 0 && k2 > k1);
	assert_int_equal(lost, 2);
	/* each lost store comes back from a checkpoint or, when the log no
	 * longer covers that shard's newest checkpoint, by a state transfer
	 * (seen once in a loaded CI run: 1 rebuilt, 1 transfer -- the
	 * returning node's log was pulled past its checkpoint's start; issue
	 * 13's note); at least one must be the checkpoint path */
	if (rebuilt != 2)
		print_message("  %d of 2 stores rebuilt from a checkpoint, %d by a state transfer\n",
			      rebuilt, xfers);
	assert_true(rebuilt >= 1);
	assert_int_equal(rebuilt + xfers, 2);
}

/*
 * A cursor of a node that no longer needs the log does not hold retention
 * for ever: the shard's primary drops the need cursor of a node that is
 * not live once it is older than recovery.need_cursor_ttl_ms (a node that
 * died while it caught up), and the checkpoint cursor of a node that is
 * not a member. A live consumer group's cursor stays.
 */
static void test_stale_cursors_dropped(void **state)
{
	(void)state;
	NEED_ZK();
	struct cl *c = &g_cur;
	const char *opts[] = {"recovery.need_cursor_ttl_ms=3000", NULL};
	cluster_up_opts(c, "cur", "3", opts);
	load(c);
	struct dxl_zk *zk = zk_open(c);
	/* node 9 is not live: it caught up once and died */
	assert_int_equal(dxl_cursor_set(zk, "dxl-recovery-9", 0, 1, DXL_ZK_VERSION_ANY, NULL), 0);
	assert_int_equal(dxl_cursor_set(zk, "dxl-ckpt-9", 0, 1, DXL_ZK_VERSION_ANY, NULL), 0);
	assert_int_equal(dxl_cursor_set(zk, "app-consumer", 0, 1, DXL_ZK_VERSION_ANY, NULL), 0);
	uint64_t t0 = dxl_now_ms(), ts;
	int need_gone_ms = -1, ckpt_gone_ms = -1;
	while (dxl_now_ms() - t0 < 20000 && need_gone_ms < 0) {
		if (ckpt_gone_ms < 0 && dxl_cursor_get(zk, "dxl-ckpt-9", 0, &ts, NULL) == DXL_E_NOENT)
			ckpt_gone_ms = (int)(dxl_now_ms() - t0);
		if (dxl_cursor_get(zk, "dxl-recovery-9", 0, &ts, NULL) == DXL_E_NOENT)
			need_gone_ms = (int)(dxl_now_ms() - t0);
		usleep(100 * 1000);
	}
	int app = dxl_cursor_get(zk, "app-consumer", 0, &ts, NULL);
	dxl_cursor_delete(zk, "app-consumer", 0);
	dxl_zk_delete(&zk);
	int lines = 0;
	for (uint32_t n = 1; n <= 3; n++)
		lines += count_log(c, n, "event=need_cursor_dropped");
	print_message("  a dead node's checkpoint cursor dropped after %d ms, its need cursor after "
		      "%d ms (TTL 3000 ms); %d log lines\n", ckpt_gone_ms, need_gone_ms, lines);
	cluster_down(c);
	assert_true(ckpt_gone_ms >= 0);
	assert_true(need_gone_ms >= 2500);
	assert_int_equal(app, 0);
	assert_true(lines >= 1);
}

/*
 * The size cap's reclaims of records a cursor still needs are said, but
 * not on every pass: every member has a checkpoint cursor, so a busy shard
 * would otherwise log event=retention_cap on every retention pass and ring
 * (10 a second per ring here). A consumer group's cursor is set at ts 1
 * (it needs everything), log.retention_bytes is 8K, and keys are written
 * for 4 s: each node says it at most once per shard in that time (one
 * line per shard every 10 s), and at least once. Before, node 1 logged it
 * dozens of times. The line names whom it cost what (passed=: the group
 * gets DXL_E_STALE, "stale"; a node catching up -- a need cursor
 * dxl-recovery-9 at ts 1 -- takes a state transfer, "transfer", also said
 * on a line of its own, event=retention_cap_transfer).
 */
static void test_retention_cap_said_once(void **state)
{
	(void)state;
	NEED_ZK();
	struct cl *c = &g_cap;
	const char *opts[] = {"log.retention_bytes=8K", NULL};
	cluster_up_opts(c, "cap", "3", opts);
	load(c);
	struct dxl_zk *zk = zk_open(c);
	for (uint32_t sh = 0; sh < 2; sh++) {
		assert_int_equal(dxl_cursor_set(zk, "app-slow", sh, 1, DXL_ZK_VERSION_ANY, NULL), 0);
		/* a node 9 catching up (not live: the primary keeps its
		 * cursor for need_cursor_ttl_ms, 10 minutes) */
		assert_int_equal(dxl_cursor_set(zk, "dxl-recovery-9", sh, 1, DXL_ZK_VERSION_ANY,
						NULL), 0);
	}
	uint64_t t0 = dxl_now_ms();
	int round = 1;
	while (dxl_now_ms() - t0 < 4000)
		update(c, round++, 1, NKEYS);
	usleep(500 * 1000); /* the last passes */
	for (uint32_t sh = 0; sh < 2; sh++) {
		dxl_cursor_delete(zk, "app-slow", sh);
		dxl_cursor_delete(zk, "dxl-recovery-9", sh);
	}
	dxl_zk_delete(&zk);
	int lines[4] = {0}, most = 0, total = 0, named9 = 0, named_app = 0, xfer = 0;
	for (uint32_t n = 1; n <= 3; n++) {
		lines[n] = count_log(c, n, "event=retention_cap ");
		most = lines[n] > most ? lines[n] : most;
		total += lines[n];
		/* it says whom: the group gets DXL_E_STALE, node 9 transfers */
		named9 += count_log(c, n, "event=retention_cap .*passed=[^ ]*dxl-recovery-9:transfer");
		named_app += count_log(c, n, "event=retention_cap .*passed=[^ ]*app-slow:stale");
		xfer += count_log(c, n, "event=retention_cap_transfer shard=[01] node=9 ");
	}
	int bad = check_all(c, "after the size cap");
	print_message("  %d rounds of %d writes in 4 s with a cursor that needs everything: "
		      "event=retention_cap lines on nodes 1-3: %d %d %d\n",
		      round - 1, NKEYS, lines[1], lines[2], lines[3]);
	print_message("  lines naming node 9 (transfer): %d, the group (stale): %d; "
		      "event=retention_cap_transfer for node 9: %d\n", named9, named_app, xfer);
	cluster_down(c);
	assert_int_equal(bad, 0);
	assert_true(total >= 3);  /* it is said, on every node */
	assert_true(most <= 2);   /* once per shard in 4 s */
	assert_true(named9 >= 3); /* with whom it cost what */
	assert_true(named_app >= 3);
	assert_true(xfer >= 3);
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
	cluster_down(&g_del);
	cluster_down(&g_lost);
	cluster_down(&g_rollall);
	cluster_down(&g_cap);
	cluster_down(&g_cur);
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
		cmocka_unit_test(test_rolling_restart_all),
		cmocka_unit_test(test_new_node),
		cmocka_unit_test(test_verify),
		cmocka_unit_test(test_power_fail_during_transfer),
		cmocka_unit_test(test_deletes_during_transfer),
		cmocka_unit_test(test_lost_store_rebuilt),
		cmocka_unit_test(test_stale_cursors_dropped),
		cmocka_unit_test(test_retention_cap_said_once),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
