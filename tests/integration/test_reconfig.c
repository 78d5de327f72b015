/* test_reconfig.c -- reconfiguration under the faults of issue 16, with replica
 * servers in this process (tests/lib/faults.h: the test reaches their
 * ZooKeeper sessions and test points) and a real ZooKeeper:
 *
 *  - crosswise joins: two nodes each join a shard the other leads, in one
 *    epoch; both must get there (16.1); a node joining a shard whose primary
 *    is gone still publishes and serves its other shards (16.1);
 *  - a node restarted on an empty data directory is not the member it was:
 *    it catches up and is added again, nothing acknowledged is lost (16.3);
 *  - a writer and a coordinator use descriptors of exactly the epoch they
 *    read, even when it changes between their reads (16.4);
 *  - after a session expiry a node reads and applies the configuration before
 *    it publishes; it starts with every shard unassigned; a member restarted
 *    on its data directory is a member at once (its mark), one whose join
 *    was cut short joins again (16.8);
 *  - a replica whose CM candidacy is deleted from outside stands again (16.7);
 *  - a second failure during a join pull: the primary stops while the new
 *    member is still joining (held in its join pull, behind by what it did
 *    not copy); the CM does not promote it (16.2);
 *  - a primary whose lease ran out answers no table RPC, even while its
 *    lease rule is held up; before serving and before replying (16.5);
 *  - dxl tail and dxl log load --verify read member copies only;
 *  - more cases are added with their defects.
 *
 * Needs DXL_TEST_ZK=host:port (scripts/test.sh sets it); skips otherwise.
 * DXL_TEST_KEEP=1 keeps the directory; DXL_TEST_FILTER=<cmocka pattern>
 * runs matching cases only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include "common/common.h"
#include "dxl/log.h"
#include "dxl/membership.h"
#include "dxl/recovery.h"
#include "dxl/replica.h"
#include "coordinator/coord_internal.h"
#include "dxl/co.h"
#include "dxl/rpc.h"
#include "tests/lib/cli_run.h"
#include "tests/lib/faults.h"
#include "tests/lib/proc.h"

#define MAXN 4

static const char *g_zkc;
static char g_tmp[128];
static char g_cluster[64];
static struct dxl_zk *g_zk;
static int g_case;

struct node {
	struct dxl_replica_cfg cfg;
	struct dxlt_server srv;
	char dir[256];
};
static struct node g_n[MAXN + 1]; /* by node id */

#define NEED_ZK()                                                                     \
	do {                                                                          \
		if (!g_zkc) {                                                         \
			print_message("SKIPPED: no ZooKeeper (DXL_TEST_ZK unset; "    \
				      "scripts/test.sh sets it)\n");                  \
			skip();                                                       \
		}                                                                     \
	} while (0)

static int group_setup(void **state)
{
	(void)state;
	g_zkc = getenv("DXL_TEST_ZK");
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-reconfig-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (!getenv("DXL_TEST_KEEP")) {
		char cmd[256];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", g_tmp);
	} else {
		fprintf(stderr, "kept %s\n", g_tmp);
	}
	return 0;
}

/* hold_cb -- a test point that holds its thread while g_hold is set (the
 * lease rule held up by a long handler or a region registration; a join
 * pull that takes long) */
static volatile int g_hold;
static volatile int g_fail; /* fail_cb, unlink_fail_cb */
static volatile int g_skip_catchup; /* skip_cb */
static void hold_cb(const char *name, void *ctx, void *arg)
{
	(void)name;
	(void)ctx;
	(void)arg;
	while (__atomic_load_n(&g_hold, __ATOMIC_ACQUIRE))
		usleep(1000);
}

static int case_setup(void **state)
{
	(void)state;
	if (!g_zkc)
		return 0;
	g_case++;
	snprintf(g_cluster, sizeof(g_cluster), "rc%d-%d", (int)getpid(), g_case);
	assert_int_equal(dxlt_zk_open(g_zkc, g_cluster, &g_zk), 0);
	return 0;
}

static int case_teardown(void **state)
{
	(void)state;
	dxlt_kill_all();
	__atomic_store_n(&g_hold, 0, __ATOMIC_RELEASE); /* a failed case's pause */
	__atomic_store_n(&g_fail, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&g_skip_catchup, 0, __ATOMIC_RELEASE);
	dxl_testpoint_clear_all();
	for (int i = 1; i <= MAXN; i++)
		if (g_n[i].srv.s)
			dxlt_server_stop(&g_n[i].srv);
	dxl_zk_delete(&g_zk);
	alarm(0);
	return 0;
}

/* start_cm -- node `id` hosting shards 0..nshards-1 in this process; cm:
 * it stands for the CM (min_replicas, replication 2) */
static void start_cm(uint32_t id, uint32_t nshards, bool cm)
{
	struct node *n = &g_n[id];
	snprintf(n->dir, sizeof(n->dir), "%s/c%d-n%u", g_tmp, g_case, id);
	dxlt_server_cfg(&n->cfg, id, n->dir, g_zkc, g_cluster, nshards);
	n->cfg.cm = cm;
	n->cfg.cm_params.min_replicas = 2;
	n->cfg.cm_params.replication = 2;
	int ret = dxlt_server_start(&n->cfg, &n->srv);
	if (ret)
		fail_msg("node %u: %s", id, dxl_errmsg());
}

static void start(uint32_t id, uint32_t nshards)
{
	start_cm(id, nshards, false);
}

/* restart -- the same node again, on its data directory or (wipe) on an
 * empty one */
static void restart(uint32_t id, bool wipe)
{
	struct node *n = &g_n[id];
	dxlt_server_stop(&n->srv);
	if (wipe)
		assert_int_equal(dxlt_wipe_dir(n->dir), 0);
	int ret = dxlt_server_start(&n->cfg, &n->srv);
	if (ret)
		fail_msg("node %u: %s", id, dxl_errmsg());
}

static void wait_state(uint32_t node, uint64_t epoch, uint32_t shard, int state,
		       int timeout_ms)
{
	int ret = dxlt_wait_cfg_epoch(g_zk, node, epoch, shard, state, timeout_ms);
	if (ret)
		fail_msg("%s", dxl_errmsg());
}

/* config -- the next configuration: shard s has members m[s] (primary
 * first, 0-terminated), for s in 0..nshards-1; returns its epoch */
static uint64_t config(uint32_t nshards, const uint32_t m[][MAXN + 1])
{
	uint32_t shards[8], n[8];
	const uint32_t *mem[8];
	for (uint32_t s = 0; s < nshards; s++) {
		shards[s] = s;
		mem[s] = m[s];
		n[s] = 0;
		while (m[s][n[s]])
			n[s]++;
	}
	uint64_t epoch = 0;
	int ret = dxlt_config_put(g_zk, nshards, shards, mem, n, &epoch);
	if (ret)
		fail_msg("config: %s", dxl_errmsg());
	return epoch;
}

/* append -- n records to shard through a dxl_log_writer; every one must be
 * acknowledged; their timestamps into ts[] (may be NULL) */
static void append(uint32_t shard, uint32_t n, uint64_t *ts)
{
	struct dxl_log_writer_cfg wc;
	dxl_log_writer_cfg_init(&wc);
	wc.shard = shard;
	wc.unavail_ms = 10000;
	struct dxl_log_writer *w = NULL;
	int ret = dxl_log_writer_new(g_zk, &wc, &w);
	if (ret)
		fail_msg("writer of shard %u: %s", shard, dxl_errmsg());
	for (uint32_t i = 0; i < n; i++) {
		char p[32];
		snprintf(p, sizeof(p), "s%u-r%u", shard, i);
		assert_int_equal(dxl_log_writer_append(w, p, (uint32_t)strlen(p), 0,
						       ts ? &ts[i] : NULL), 0);
	}
	uint32_t done = 0;
	uint64_t end = dxl_now_ms() + 20000;
	while (done < n && dxl_now_ms() < end) {
		struct dxl_log_writer_result r[16];
		int k = dxl_log_writer_poll(w, r, 16, 100);
		assert_true(k >= 0);
		for (int j = 0; j < k; j++) {
			if (r[j].status)
				fail_msg("shard %u: append failed: %s (%s)", shard,
					 dxl_errname(r[j].status), dxl_log_writer_why(w));
			done++;
		}
	}
	assert_int_equal(done, n);
	dxl_log_writer_delete(&w);
}

struct scan {
	const uint64_t *want;
	uint32_t n;
	uint32_t found;
};

static int scan_rec(const struct dxl_rec *rec, uint64_t pos, void *arg)
{
	(void)pos;
	struct scan *sc = arg;
	for (uint32_t i = 0; i < sc->n; i++)
		if (sc->want[i] == rec->commit_ts) {
			sc->found++;
			break;
		}
	return 0;
}

/* holds -- how many of the records ts[0..n) node's copy of shard holds
 * (its own rings, read in this process) */
static uint32_t holds(uint32_t node, uint32_t shard, const uint64_t *ts, uint32_t n)
{
	struct dxl_shard *sh = dxl_replica_server_shard(g_n[node].srv.s, shard);
	assert_non_null(sh);
	struct dxl_logstore *ls = dxl_shard_logstore(sh);
	struct scan sc = {ts, n, 0};
	for (uint32_t r = 0; r < dxl_logstore_nrings(ls); r++)
		assert_true(dxl_ring_scan(ls, r, scan_rec, &sc, NULL, NULL) >= 0);
	return sc.found;
}

/* ---- 16.1: crosswise joins -------------------------------------------------- */

/*
 * Two nodes host shards 0 and 1. Epoch 1: shard 0 = {1}, shard 1 = {2}.
 * Epoch 2 adds node 2 to shard 0 and node 1 to shard 1: each node joins a
 * shard the other leads. A node that held back its whole publication until
 * its join pull was done waited for the other's, which waited for its: both
 * stayed at cfg_epoch 1 for good (the reproduction of issue 16.1).
 */
static void test_crosswise_joins(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(60);
	start(1, 2);
	start(2, 2);
	wait_state(1, 0, 0, -1, 10000);
	wait_state(2, 0, 0, -1, 10000);
	static const uint32_t e1[2][MAXN + 1] = {{1}, {2}};
	uint64_t ep = config(2, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(2, ep, 1, DXL_SHARD_MEMBER, 10000);
	uint64_t ts0[40], ts1[40];
	append(0, 20, ts0);
	append(1, 20, ts1);

	static const uint32_t e2[2][MAXN + 1] = {{1, 2}, {2, 1}};
	ep = config(2, e2);
	/* both get there, each shard on its own */
	wait_state(1, ep, 1, DXL_SHARD_MEMBER, 10000);
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 1000);
	wait_state(2, ep, 1, DXL_SHARD_MEMBER, 1000);
	/* and both shards take appends on both members */
	append(0, 20, ts0 + 20);
	append(1, 20, ts1 + 20);
	for (uint32_t node = 1; node <= 2; node++) {
		assert_int_equal(holds(node, 0, ts0, 40), 40);
		assert_int_equal(holds(node, 1, ts1, 40), 40);
	}
}

/*
 * A node leads shard 0 and joins shard 1, whose primary is gone before it
 * could publish the new epoch: the join waits (nothing to copy from), but
 * shard 0 is published for the new epoch and takes appends.
 */
static void test_join_primary_gone(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(60);
	start(1, 2);
	start(2, 2);
	wait_state(1, 0, 0, -1, 10000);
	wait_state(2, 0, 0, -1, 10000);
	static const uint32_t e1[2][MAXN + 1] = {{1}, {2}};
	uint64_t ep = config(2, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(2, ep, 1, DXL_SHARD_MEMBER, 10000);
	dxlt_server_stop(&g_n[2].srv);
	static const uint32_t e2[2][MAXN + 1] = {{1}, {2, 1}};
	ep = config(2, e2);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(1, ep, 1, DXL_SHARD_JOINING, 1000);
	uint64_t ts[10];
	append(0, 10, ts);
	assert_int_equal(holds(1, 0, ts, 10), 10);
}

/* ---- 16.3: a node restarted on an empty data directory ----------------------- */

/*
 * Two members, cm.min_replicas 2: the primary stops, its data directory is
 * emptied, and it comes back with the same node id while the configuration
 * still names it primary (the CM could not remove it). Taken for the member
 * it was, its empty rings were the writers' repair reference: the other
 * member's acknowledged records were cut. With the data identity it is not
 * a member: the CM promotes the other one, the restarted node catches up,
 * is added again with its new identity, joins, and nothing is lost.
 */
static void test_restart_on_empty_dir(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(90);
	start_cm(1, 1, true);
	start_cm(2, 1, true);
	wait_state(1, 0, 0, -1, 10000);
	wait_state(2, 0, 0, -1, 10000);
	static const uint32_t e1[1][MAXN + 1] = {{1, 2}};
	uint64_t ep = config(1, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 10000);
	uint64_t ts[40];
	append(0, 30, ts);
	assert_int_equal(holds(2, 0, ts, 30), 30);
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	assert_int_equal(dxl_replica_desc_get(g_zk, 1, d), 0);
	uint64_t old_id = d->shards[0].data_id;
	assert_true(old_id != 0);

	restart(1, true);
	/* the next appends: they wait until the shard can be written again, and
	 * then every record acknowledged is on both */
	append(0, 10, ts + 30);
	for (uint32_t node = 2; node >= 1; node--)
		assert_int_equal(holds(node, 0, ts, 40), 40);
	/* how: node 1 caught up from node 2 and was added again with its new
	 * identity, node 2 leads */
	struct dxl_cluster_config c;
	assert_int_equal(dxl_cluster_config_read(g_zk, &c, NULL), 0);
	const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, 0);
	assert_non_null(sh);
	assert_int_equal(sh->primary, 2);
	assert_int_equal(sh->nbackups, 1);
	assert_int_equal(sh->backups[0], 1);
	assert_int_equal(dxl_replica_desc_get(g_zk, 1, d), 0);
	assert_true(d->shards[0].data_id != old_id); /* a new store */
	assert_int_equal(dxl_cluster_shard_data_id(sh, 1), d->shards[0].data_id);
	assert_int_equal(d->shards[0].state, DXL_SHARD_MEMBER);
	dxl_cluster_config_clear(&c);
	free(d);
}

/* ---- 16.4: a writer (and a coordinator) takes exactly the epoch it read -------- */

/* the configuration changes between a reader's configuration read and its
 * descriptor reads: add node 2 to shard 0 (epoch 2), and wait until both
 * have registered for it, node 2 as a MEMBER (its join pull done) */
static uint64_t g_next_epoch;
static volatile int g_change_once;
static void change_cb(const char *name, void *ctx, void *arg)
{
	(void)name;
	(void)ctx;
	const uint32_t (*m)[MAXN + 1] = arg;
	if (!__atomic_exchange_n(&g_change_once, 0, __ATOMIC_ACQ_REL))
		return;
	g_next_epoch = config(1, m);
	wait_state(1, g_next_epoch, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(2, g_next_epoch, 0, DXL_SHARD_MEMBER, 10000);
}

/*
 * A writer reads epoch 1 (shard 0 = {1}), then -- epoch 2 adds node 2 --
 * node 1's descriptor, registered for epoch 2. Taking it (registered for
 * epoch 1 "or later") it appended with epoch 2's rkeys to epoch 1's member
 * set: acknowledged without node 2, which epoch 2 had added (and which had
 * done its join pull already): node 2 never got them.
 */
static void test_writer_newer_epoch(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(60);
	start(1, 1);
	start(2, 1);
	wait_state(1, 0, 0, -1, 10000);
	wait_state(2, 0, 0, -1, 10000);
	static const uint32_t e1[1][MAXN + 1] = {{1}};
	uint64_t ep = config(1, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(2, ep, 0, DXL_SHARD_SYNCED, 10000);
	static const uint32_t e2[1][MAXN + 1] = {{1, 2}};
	__atomic_store_n(&g_change_once, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("writer.open.config_read", change_cb, (void *)e2), 0);
	uint64_t ts[20];
	append(0, 20, ts);
	assert_int_equal(g_change_once, 0); /* the change happened in between */
	assert_int_equal(g_next_epoch, ep + 1);
	assert_int_equal(holds(1, 0, ts, 20), 20);
	assert_int_equal(holds(2, 0, ts, 20), 20);
}

/*
 * The coordinator's view: the same race. Epoch 1: shard 0 = {1, 2}, node 1
 * the primary; epoch 2: node 2 the primary. A view of epoch 1 built from
 * node 1's epoch-2 descriptor would send its one-sided lock CASes and reads
 * to a backup's tables with valid rkeys.
 */
static void test_coord_view_newer_epoch(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(60);
	for (uint32_t id = 1; id <= 2; id++) {
		struct node *n = &g_n[id];
		snprintf(n->dir, sizeof(n->dir), "%s/c%d-n%u", g_tmp, g_case, id);
		dxlt_server_cfg(&n->cfg, id, n->dir, g_zkc, g_cluster, 1);
		n->cfg.ntables = 1;
		n->cfg.tables[0] = (struct dxl_table_schema){.id = 1, .value_size = 16,
							     .capacity = 64};
		if (dxlt_server_start(&n->cfg, &n->srv))
			fail_msg("node %u: %s", id, dxl_errmsg());
		wait_state(id, 0, 0, -1, 10000);
	}
	static const uint32_t e1[1][MAXN + 1] = {{1, 2}};
	uint64_t ep = config(1, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 10000);
	static const uint32_t e2[1][MAXN + 1] = {{2, 1}};
	__atomic_store_n(&g_change_once, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("coord.view.config_read", change_cb, (void *)e2), 0);
	struct dxl_coord *c = NULL;
	assert_int_equal(dxl_coord_new(g_zk, NULL, &c), 0);
	assert_int_equal(g_change_once, 0);
	struct view *v = coord_view_get(c);
	assert_int_equal(v->epoch, ep);
	if (v->shards[0].ok)
		fail_msg("a view of epoch %" PRIu64 " uses node %u's descriptor of epoch %" PRIu64,
			 ep, v->shards[0].primary, g_next_epoch);
	assert_non_null(strstr(v->shards[0].why, "read it again"));
	coord_view_put(c, v);
	/* the next refresh takes epoch 2 */
	assert_int_equal(coord_refresh(c), 0);
	v = coord_view_get(c);
	assert_int_equal(v->epoch, g_next_epoch);
	assert_int_equal(v->shards[0].primary, 2);
	coord_view_put(c, v);
	dxl_coord_delete(&c);
}

/* ---- 16.8: after a session expiry, the configuration before the publication --- */

static volatile int g_newsess_once, g_pub_armed, g_pub_done;
static uint64_t g_pub_epoch;
static int g_pub_state = -1;

/* the CM removed node 1 from shard 0 while its session was gone */
static void newsess_cb(const char *name, void *ctx, void *arg)
{
	(void)name;
	(void)ctx;
	const uint32_t (*m)[MAXN + 1] = arg;
	if (!__atomic_exchange_n(&g_newsess_once, 0, __ATOMIC_ACQ_REL))
		return;
	g_next_epoch = config(1, m);
	__atomic_store_n(&g_pub_armed, 1, __ATOMIC_RELEASE);
}

/* the first descriptor node 1 publishes on its new session */
static void publish_cb(const char *name, void *ctx, void *arg)
{
	(void)name;
	(void)arg;
	const struct dxl_replica_desc *d = ctx;
	if (d->node_id != 1 || !__atomic_exchange_n(&g_pub_armed, 0, __ATOMIC_ACQ_REL))
		return;
	const struct dxl_shard_desc *sd = dxl_replica_desc_shard(d, 0);
	g_pub_epoch = d->cfg_epoch;
	g_pub_state = sd ? (int)sd->state : -1;
	__atomic_store_n(&g_pub_done, 1, __ATOMIC_RELEASE);
}

/*
 * Node 1's session expires; meanwhile shard 0 goes on without it (epoch 2).
 * On its new session it published fresh rkeys with its old cfg_epoch and
 * "member" before it applied epoch 2: a descriptor that describes a
 * configuration that is no more. It must read (and apply) the configuration
 * first.
 */
static void test_expiry_config_first(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(60);
	start(1, 1);
	start(2, 1);
	wait_state(1, 0, 0, -1, 10000);
	wait_state(2, 0, 0, -1, 10000);
	static const uint32_t e1[1][MAXN + 1] = {{2, 1}};
	uint64_t ep = config(1, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 10000);
	static const uint32_t e2[1][MAXN + 1] = {{2}};
	__atomic_store_n(&g_newsess_once, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("replica.session.new", newsess_cb, (void *)e2), 0);
	assert_int_equal(dxl_testpoint_set("replica.publish", publish_cb, NULL), 0);
	assert_int_equal(dxl_zk_inject_expiry(dxl_replica_server_zk(g_n[1].srv.s)), 0);
	uint64_t end = dxl_now_ms() + 20000;
	while (!__atomic_load_n(&g_pub_done, __ATOMIC_ACQUIRE)) {
		if (dxl_now_ms() > end)
			fail_msg("node 1 did not publish on a new session");
		usleep(5000);
	}
	if (g_pub_epoch != g_next_epoch || g_pub_state == DXL_SHARD_MEMBER)
		fail_msg("node 1's first descriptor on its new session: cfg_epoch %" PRIu64
			 " (the configuration is at %" PRIu64 "), shard 0 %s",
			 g_pub_epoch, g_next_epoch,
			 dxl_shard_state_name((enum dxl_shard_state)g_pub_state));
	assert_int_equal(g_pub_state, DXL_SHARD_CATCHING_UP);
}

/*
 * The member mark: a node that stops as a member and restarts on its data
 * directory is a member at once -- also when the primary is gone for good,
 * which a join pull would wait for. (cm.min_replicas 1.)
 */
static void test_restart_member_mark(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(60);
	for (uint32_t id = 1; id <= 2; id++) {
		start_cm(id, 1, true);
		wait_state(id, 0, 0, -1, 10000);
	}
	static const uint32_t e1[1][MAXN + 1] = {{1, 2}};
	uint64_t ep = config(1, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 10000);
	uint64_t ts[20];
	append(0, 10, ts);
	/* both stop (the CM could not remove either: min_replicas 2) */
	dxlt_server_stop(&g_n[2].srv);
	dxlt_server_stop(&g_n[1].srv);
	/* node 2 comes back alone, with min_replicas 1: it is a member of
	 * epoch 1 at once, the CM promotes it, the shard is written again */
	g_n[2].cfg.cm_params.min_replicas = 1;
	if (dxlt_server_start(&g_n[2].cfg, &g_n[2].srv))
		fail_msg("node 2: %s", dxl_errmsg());
	append(0, 10, ts + 10);
	assert_int_equal(holds(2, 0, ts, 20), 20);
}

/* the join pull held in a daemon (DXL_TESTPOINTS), then kill -9 */
static pid_t spawn_node(uint32_t id, const char *dir, const char *logf, const char *pause)
{
	static char bin[PATH_MAX];
	assert_int_equal(dxlt_prog_path("dxl-replica", bin, sizeof(bin)), 0);
	static const char *const extra[] = {"-o", "zk.session_timeout_ms=1000", "-o",
					    "replica.pull_ms=50", "-o", "replica.cm=false",
					    "-o", "replica.exist_wait_ms=10000", NULL};
	struct dxlt_replica r = {.bin = bin, .logfile = logf, .append = true, .node = id,
				 .dir = dir, .zk = g_zkc, .cluster = g_cluster, .extra = extra};
	char spec[600];
	dxlt_pause_spec(spec, sizeof(spec), "replica.join_pull.copy", pause);
	pid_t p = dxlt_spawn_env(&r, "DXL_TESTPOINTS", spec);
	if (p < 0)
		fail_msg("spawn: %s", dxl_errmsg());
	return p;
}

/*
 * A node added to a shard stops (kill -9) before its join pull is done. It
 * restarts on its data directory: the configuration names it a member, but
 * its copy still lacks what was acknowledged before it joined. It must join
 * again (JOINING, a copy from the primary), not say MEMBER.
 */
static void test_join_interrupted(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(90);
	start(1, 1);
	wait_state(1, 0, 0, -1, 10000);
	char dir[256], logf[256], pause[300];
	snprintf(dir, sizeof(dir), "%s/c%d-d2", g_tmp, g_case);
	snprintf(logf, sizeof(logf), "%s/c%d-d2.out", g_tmp, g_case);
	snprintf(pause, sizeof(pause), "%s/c%d-pause", g_tmp, g_case);
	pid_t p = spawn_node(2, dir, logf, pause);
	wait_state(2, 0, 0, -1, 15000);
	static const uint32_t e1[1][MAXN + 1] = {{1}};
	uint64_t ep = config(1, e1);
	wait_state(2, ep, 0, DXL_SHARD_SYNCED, 15000);
	static const uint32_t e2[1][MAXN + 1] = {{1, 2}};
	ep = config(1, e2);
	if (dxlt_pause_wait(pause, 15000))
		fail_msg("%s", dxl_errmsg());
	wait_state(2, ep, 0, DXL_SHARD_JOINING, 1000);
	kill(p, SIGKILL);
	dxlt_wait_exit(p, 5000);
	dxlt_pause_rearm(pause);
	p = spawn_node(2, dir, logf, pause);
	/* it joins again: paused in its join pull, published JOINING */
	if (dxlt_pause_wait(pause, 15000)) {
		struct dxl_replica_desc *d = calloc(1, sizeof(*d));
		if (dxl_replica_desc_get(g_zk, 2, d) == 0)
			fail_msg("node 2 restarted without a join pull: cfg_epoch %" PRIu64 ", %s",
				 d->cfg_epoch, dxl_shard_state_name(d->shards[0].state));
		fail_msg("%s", dxl_errmsg());
	}
	wait_state(2, ep, 0, DXL_SHARD_JOINING, 5000);
	assert_int_equal(dxlt_pause_release(pause), 0);
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 10000);
	kill(p, SIGTERM);
	assert_int_equal(dxlt_wait_exit(p, 10000), 0);
}

/* ---- 16.2: a second failure during a join pull ------------------------------------ */

static void skip_cb(const char *name, void *ctx, void *arg)
{
	(void)name;
	(void)arg;
	if (__atomic_load_n(&g_skip_catchup, __ATOMIC_ACQUIRE))
		*(bool *)ctx = true;
}

/*
 * Shard 0 = {1}; node 2 hosts it but has stopped catching up (a copy that
 * takes long), so records acknowledged by node 1 are not on node 2. The
 * next epoch adds node 2: it publishes JOINING and starts its join pull,
 * held there; then node 1 stops. Counted as alive because it listed the
 * shard, node 2 was promoted and the acknowledged records it lacked were
 * lost. It must not count before its join pull: the shard waits for node
 * 1, which comes back and gives node 2 everything.
 */
static void test_second_failure_during_join(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(90);
	start(1, 1);
	start(2, 1);
	/* the CM: node 3, hosting another shard only; it adds nobody itself */
	struct node *n3 = &g_n[3];
	snprintf(n3->dir, sizeof(n3->dir), "%s/c%d-n3", g_tmp, g_case);
	dxlt_server_cfg(&n3->cfg, 3, n3->dir, g_zkc, g_cluster, 1);
	n3->cfg.shards[0] = 5;
	n3->cfg.cm = true;
	n3->cfg.cm_params.min_replicas = 1;
	n3->cfg.cm_params.replication = 1;
	if (dxlt_server_start(&n3->cfg, &n3->srv))
		fail_msg("node 3: %s", dxl_errmsg());
	for (uint32_t id = 1; id <= 3; id++)
		wait_state(id, 0, 0, -1, 10000);
	static const uint32_t e1[1][MAXN + 1] = {{1}};
	uint64_t ep = config(1, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(2, ep, 0, DXL_SHARD_SYNCED, 10000);
	__atomic_store_n(&g_skip_catchup, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("replica.catch_up.pass", skip_cb, NULL), 0);
	usleep(300000); /* a pass in flight is over */
	uint64_t ts[30];
	append(0, 20, ts);
	assert_int_equal(holds(2, 0, ts, 20), 0); /* node 2 is behind */

	__atomic_store_n(&g_hold, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("replica.join_pull.copy", hold_cb, NULL), 0);
	static const uint32_t e2[1][MAXN + 1] = {{1, 2}};
	ep = config(1, e2);
	wait_state(2, ep, 0, DXL_SHARD_JOINING, 10000);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	/* node 2 reaches its copy once node 1 says MEMBER for the epoch */
	uint64_t end = dxl_now_ms() + 10000;
	while (dxl_testpoint_hits("replica.join_pull.copy") < 1)
		if (dxl_now_ms() > end)
			fail_msg("node 2 did not start its join pull");
		else
			usleep(5000);
	/* the second failure, inside the join window */
	dxlt_server_stop(&g_n[1].srv);
	/* the CM runs rounds (every 100 ms, and at once on the leave): it
	 * must not promote node 2 */
	usleep(1500000);
	struct dxl_cluster_config c;
	assert_int_equal(dxl_cluster_config_read(g_zk, &c, NULL), 0);
	const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, 0);
	if (c.epoch != ep || sh->primary != 1)
		fail_msg("epoch %" PRIu64 ": shard 0 primary %u -- a member still joining was promoted",
			 c.epoch, sh->primary);
	dxl_cluster_config_clear(&c);
	/* node 1 comes back on its data directory: node 2 joins from it */
	if (dxlt_server_start(&g_n[1].cfg, &g_n[1].srv))
		fail_msg("node 1: %s", dxl_errmsg());
	__atomic_store_n(&g_hold, 0, __ATOMIC_RELEASE);
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 15000);
	append(0, 10, ts + 20);
	assert_int_equal(holds(1, 0, ts, 30), 30);
	assert_int_equal(holds(2, 0, ts, 30), 30);
}

/* reconcile -- one CM round from the test (no node stands for the CM):
 * 1 = the configuration changed, 0 = no change */
static int reconcile(uint32_t min_replicas, uint32_t replication)
{
	struct dxl_cm_params p = {.min_replicas = min_replicas, .replication = replication};
	uint64_t ep = 0;
	int ret = dxl_cm_reconcile(g_zk, &p, &ep);
	if (ret < 0)
		fail_msg("cm round: %s", dxl_errmsg());
	return ret;
}

static void config_now(struct dxl_cluster_config *c)
{
	assert_int_equal(dxl_cluster_config_read(g_zk, c, NULL), 0);
}

/*
 * Review of issue 16: shard {1 primary, 2 member, 3 joining}, min_replicas
 * 2, replication 3, no candidates; the primary dies. Node 3's join pull
 * copies from the configured primary, so it waited for node 1 for good, and
 * the CM said "1 of 3 members alive and in sync, below cm.min_replicas 2":
 * the shard was down until node 1 returned. Now the CM promotes node 2 (node
 * 1 stays listed: writers still wait), node 3 joins from it, then node 1 is
 * removed and the shard is written again.
 */
static void test_dead_primary_joiner_waits(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(90);
	for (uint32_t id = 1; id <= 3; id++) {
		start(id, 1);
		wait_state(id, 0, 0, -1, 10000);
	}
	static const uint32_t e1[1][MAXN + 1] = {{1, 2}};
	uint64_t ep = config(1, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(3, ep, 0, DXL_SHARD_SYNCED, 10000);
	uint64_t ts[20];
	append(0, 10, ts);
	/* node 3 joins; its join pull is held until node 1 is gone */
	__atomic_store_n(&g_hold, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("replica.join_pull.copy", hold_cb, NULL), 0);
	static const uint32_t e2[1][MAXN + 1] = {{1, 2, 3}};
	ep = config(1, e2);
	wait_state(3, ep, 0, DXL_SHARD_JOINING, 10000);
	uint64_t end = dxl_now_ms() + 10000;
	while (dxl_testpoint_hits("replica.join_pull.copy") < 1)
		if (dxl_now_ms() > end)
			fail_msg("node 3 did not start its join pull");
		else
			usleep(5000);
	dxlt_server_stop(&g_n[1].srv);
	__atomic_store_n(&g_hold, 0, __ATOMIC_RELEASE);
	dxl_testpoint_clear_all();
	/* the CM (min_replicas 2, replication 3): node 2 is promoted */
	end = dxl_now_ms() + 5000;
	while (reconcile(2, 3) == 0)
		if (dxl_now_ms() > end)
			fail_msg("the CM changed nothing: node 3 waits for the dead primary for good");
		else
			usleep(50000);
	struct dxl_cluster_config c;
	config_now(&c);
	const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, 0);
	assert_int_equal(sh->primary, 2);
	assert_int_equal(sh->nbackups, 2); /* 1 (dead, still listed) and 3 */
	ep = c.epoch;
	dxl_cluster_config_clear(&c);
	/* node 3 joins from node 2; then the dead primary goes */
	wait_state(3, ep, 0, DXL_SHARD_MEMBER, 15000);
	end = dxl_now_ms() + 5000;
	while (reconcile(2, 3) == 0)
		if (dxl_now_ms() > end)
			fail_msg("the dead primary was not removed once node 3 joined");
		else
			usleep(50000);
	config_now(&c);
	sh = dxl_cluster_config_shard(&c, 0);
	assert_int_equal(sh->primary, 2);
	assert_int_equal(sh->nbackups, 1);
	assert_int_equal(sh->backups[0], 3);
	dxl_cluster_config_clear(&c);
	append(0, 10, ts + 10);
	assert_int_equal(holds(2, 0, ts, 20), 20);
	assert_int_equal(holds(3, 0, ts, 20), 20);
}

/* fail_cb -- a test point that makes a join pull fail (while g_fail) */
static void fail_cb(const char *name, void *ctx, void *arg)
{
	(void)name;
	(void)arg;
	if (__atomic_load_n(&g_fail, __ATOMIC_ACQUIRE))
		*(int *)ctx = DXL_E_UNREACHABLE;
}

/*
 * A joining member whose join pull keeps failing (the primary unreachable
 * from it) stayed JOINING for good: the CM kept it (it never counts, never
 * goes), and writers refuse to open with a member that is not MEMBER. Now it
 * gives up after replica.join_timeout_ms: it says it is not a member, the
 * CM removes it or adds it again, and it joins once the pull works.
 */
static void test_join_timeout(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(90);
	start(1, 1);
	struct node *n = &g_n[2];
	snprintf(n->dir, sizeof(n->dir), "%s/c%d-n2", g_tmp, g_case);
	dxlt_server_cfg(&n->cfg, 2, n->dir, g_zkc, g_cluster, 1);
	n->cfg.join_timeout_ms = 800;
	if (dxlt_server_start(&n->cfg, &n->srv))
		fail_msg("node 2: %s", dxl_errmsg());
	wait_state(1, 0, 0, -1, 10000);
	wait_state(2, 0, 0, -1, 10000);
	static const uint32_t e1[1][MAXN + 1] = {{1}};
	uint64_t ep = config(1, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(2, ep, 0, DXL_SHARD_SYNCED, 10000);
	uint64_t ts[20];
	append(0, 10, ts);
	__atomic_store_n(&g_fail, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("replica.join_pull.fail", fail_cb, NULL), 0);
	static const uint32_t e2[1][MAXN + 1] = {{1, 2}};
	ep = config(1, e2);
	wait_state(2, ep, 0, DXL_SHARD_JOINING, 10000);
	uint64_t t0 = dxl_now_ms();
	/* it gives up: catching up (then synced), at this epoch */
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	assert_non_null(d);
	int st = DXL_SHARD_JOINING;
	while (st == DXL_SHARD_JOINING) {
		if (dxl_now_ms() - t0 > 8000)
			fail_msg("node 2 still joining %llu ms after its join pulls began to fail "
				 "(replica.join_timeout_ms 800)",
				 (unsigned long long)(dxl_now_ms() - t0));
		usleep(20000);
		if (dxl_replica_desc_get(g_zk, 2, d) == 0 && d->cfg_epoch == ep &&
		    dxl_replica_desc_shard(d, 0))
			st = dxl_replica_desc_shard(d, 0)->state;
	}
	free(d);
	assert_true(dxl_testpoint_hits("replica.join_pull.fail") >= 2);
	/* the CM (min_replicas 1): it is not a member any more: removed, or
	 * added again once caught up */
	uint64_t end = dxl_now_ms() + 5000;
	while (reconcile(1, 2) == 0)
		if (dxl_now_ms() > end)
			fail_msg("the CM kept a member that gave up joining");
		else
			usleep(50000);
	/* the pull works again: node 2 gets back in (the CM adds it again
	 * when it has caught up) and joins */
	__atomic_store_n(&g_fail, 0, __ATOMIC_RELEASE);
	end = dxl_now_ms() + 20000;
	for (;;) {
		struct dxl_cluster_config c;
		config_now(&c);
		ep = c.epoch;
		bool in = dxl_cluster_config_shard(&c, 0)->nbackups == 1;
		dxl_cluster_config_clear(&c);
		if (in && dxlt_wait_cfg_epoch(g_zk, 2, ep, 0, DXL_SHARD_MEMBER, 200) == 0)
			break;
		if (dxl_now_ms() > end)
			fail_msg("node 2 did not join again (epoch %llu)", (unsigned long long)ep);
		reconcile(1, 2);
	}
	append(0, 10, ts + 10);
	assert_int_equal(holds(2, 0, ts, 20), 20);
	dxl_testpoint_clear_all();
}

/* start_tables -- node id with one table on shard 0 */
static void start_tables(uint32_t id)
{
	struct node *n = &g_n[id];
	snprintf(n->dir, sizeof(n->dir), "%s/c%d-n%u", g_tmp, g_case, id);
	dxlt_server_cfg(&n->cfg, id, n->dir, g_zkc, g_cluster, 1);
	n->cfg.ntables = 1;
	n->cfg.tables[0] = (struct dxl_table_schema){.id = 1, .value_size = 16, .capacity = 64};
	if (dxlt_server_start(&n->cfg, &n->srv))
		fail_msg("node %u: %s", id, dxl_errmsg());
}

/*
 * A member whose store is marked incomplete (a copy or a state transfer cut
 * short, not rebuilt at start: no checkpoint) misses records' effects. It
 * came back a member at once on its member mark -- as a backup it served
 * reads of a store missing writes, as the primary it served the tables.
 * Now a backup joins again (its join pull completes the store from the
 * primary) and a primary says it is not a member (catching_up): the CM
 * promotes a member that counts and removes it.
 */
static void test_incomplete_store_not_member(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(90);
	start_tables(1);
	start_tables(2);
	wait_state(1, 0, 0, -1, 10000);
	wait_state(2, 0, 0, -1, 10000);
	static const uint32_t e1[1][MAXN + 1] = {{1, 2}};
	uint64_t ep = config(1, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 10000);
	uint64_t ts[10];
	append(0, 10, ts);
	/* the backup, restarted on a store marked incomplete: it joins */
	dxlt_server_stop(&g_n[2].srv);
	assert_int_equal(dxl_rcv_mark_incomplete(g_n[2].dir, 0, "test"), 0);
	__atomic_store_n(&g_hold, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("replica.join_pull.wait", hold_cb, NULL), 0);
	if (dxlt_server_start(&g_n[2].cfg, &g_n[2].srv))
		fail_msg("node 2: %s", dxl_errmsg());
	int ret = dxlt_wait_cfg_epoch(g_zk, 2, ep, 0, DXL_SHARD_JOINING, 10000);
	if (ret)
		fail_msg("backup with an incomplete store: %s", dxl_errmsg());
	__atomic_store_n(&g_hold, 0, __ATOMIC_RELEASE);
	dxl_testpoint_clear_all();
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 15000);
	assert_int_equal(holds(2, 0, ts, 10), 10);
	/* the primary, restarted on a store marked incomplete: not a member */
	dxlt_server_stop(&g_n[1].srv);
	assert_int_equal(dxl_rcv_mark_incomplete(g_n[1].dir, 0, "test"), 0);
	if (dxlt_server_start(&g_n[1].cfg, &g_n[1].srv))
		fail_msg("node 1: %s", dxl_errmsg());
	ret = dxlt_wait_cfg_epoch(g_zk, 1, ep, 0, DXL_SHARD_CATCHING_UP, 10000);
	if (ret)
		fail_msg("primary with an incomplete store: %s", dxl_errmsg());
	/* the CM (min_replicas 1): node 2 promoted, node 1 removed */
	uint64_t end = dxl_now_ms() + 5000;
	while (reconcile(1, 2) == 0)
		if (dxl_now_ms() > end)
			fail_msg("the CM kept a primary that is not a member");
		else
			usleep(50000);
	struct dxl_cluster_config c;
	config_now(&c);
	const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, 0);
	assert_int_equal(sh->primary, 2);
	assert_int_equal(sh->nbackups, 0);
	dxl_cluster_config_clear(&c);
}

/* unlink_fail_cb -- a test point that makes the member mark's unlink fail */
static void unlink_fail_cb(const char *name, void *ctx, void *arg)
{
	(void)name;
	(void)arg;
	if (__atomic_load_n(&g_fail, __ATOMIC_ACQUIRE))
		*(int *)ctx = EIO;
}

static bool mark_exists(uint32_t node, uint32_t shard)
{
	char path[400];
	snprintf(path, sizeof(path), "%s/shard-%u.member", g_n[node].dir, shard);
	return access(path, F_OK) == 0;
}

/*
 * The member mark must be gone before a copy rewrites the rings: a node
 * removed from a shard whose mark cannot be removed (unlink fails) went on
 * as if it had been (marked = false in memory) and copied the shard -- a
 * crash during that copy brought it back a member of a half-copied log.
 * Now nothing is copied while the mark is there; the removal is retried.
 */
static void test_member_mark_unlink_fails(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(60);
	start(1, 1);
	start(2, 1);
	wait_state(1, 0, 0, -1, 10000);
	wait_state(2, 0, 0, -1, 10000);
	static const uint32_t e1[1][MAXN + 1] = {{1, 2}};
	uint64_t ep = config(1, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 10000);
	assert_true(mark_exists(2, 0));
	uint64_t ts[20];
	append(0, 10, ts);
	__atomic_store_n(&g_fail, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("replica.member_mark.unlink", unlink_fail_cb, NULL), 0);
	static const uint32_t e2[1][MAXN + 1] = {{1}};
	ep = config(1, e2);
	wait_state(2, ep, 0, DXL_SHARD_CATCHING_UP, 10000);
	append(0, 10, ts + 10); /* node 1 only */
	/* catch-up passes (every 50 ms) come and go: none copies */
	uint64_t end = dxl_now_ms() + 1500;
	while (dxl_now_ms() < end) {
		if (holds(2, 0, ts + 10, 10))
			fail_msg("node 2 copied the shard while its member mark was still there");
		usleep(50000);
	}
	assert_true(mark_exists(2, 0));
	assert_true(dxl_testpoint_hits("replica.member_mark.unlink") >= 2); /* retried */
	/* added again while the mark is still there: the mark no longer
	 * vouches (node 2 missed the last 10): it joins, and its join pull
	 * waits for the mark to go */
	static const uint32_t e3[1][MAXN + 1] = {{1, 2}};
	ep = config(1, e3);
	int ret = dxlt_wait_cfg_epoch(g_zk, 2, ep, 0, DXL_SHARD_JOINING, 10000);
	if (ret)
		fail_msg("node 2 added again with a mark it could not remove: %s", dxl_errmsg());
	usleep(300000);
	ret = dxlt_wait_cfg_epoch(g_zk, 2, ep, 0, DXL_SHARD_JOINING, 10);
	if (ret)
		fail_msg("node 2 joined while its mark was still there: %s", dxl_errmsg());
	assert_true(mark_exists(2, 0));
	assert_int_equal(holds(2, 0, ts + 10, 10), 0);
	/* the unlink works again: the mark goes, then the join pull */
	__atomic_store_n(&g_fail, 0, __ATOMIC_RELEASE);
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 10000);
	assert_true(mark_exists(2, 0)); /* a member again: marked anew */
	assert_int_equal(holds(2, 0, ts, 20), 20);
	dxl_testpoint_clear_all();
}

/*
 * With durability=process the log is in the page cache: an OS crash loses
 * what was not written back, but not the fsynced member mark -- the node
 * came back a member at once (and could be promoted, and be the writers'
 * repair reference). A mark names the boot that wrote it; in process mode
 * a mark of another boot is stale: the node joins again.
 */
static void test_member_mark_other_boot(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(60);
	start(1, 1);
	start(2, 1);
	wait_state(1, 0, 0, -1, 10000);
	wait_state(2, 0, 0, -1, 10000);
	static const uint32_t e1[1][MAXN + 1] = {{1, 2}};
	uint64_t ep = config(1, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 10000);
	dxlt_server_stop(&g_n[2].srv);
	/* the "OS crash": the mark says another boot wrote it */
	char path[400], text[256] = "";
	snprintf(path, sizeof(path), "%s/shard-0.member", g_n[2].dir);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	size_t got = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[got] = 0;
	char *nl = strchr(text, '\n');
	assert_non_null(nl);
	nl[1] = 0; /* the data_id line only */
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "%sboot_id=00000000-0000-0000-0000-000000000000\n", text);
	fclose(f);
	/* back: it must join (held in its join pull), not be a member at once */
	__atomic_store_n(&g_hold, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("replica.join_pull.wait", hold_cb, NULL), 0);
	if (dxlt_server_start(&g_n[2].cfg, &g_n[2].srv))
		fail_msg("node 2: %s", dxl_errmsg());
	int ret = dxlt_wait_cfg_epoch(g_zk, 2, ep, 0, DXL_SHARD_JOINING, 10000);
	if (ret)
		fail_msg("node 2 with a mark of another boot: %s", dxl_errmsg());
	assert_false(mark_exists(2, 0)); /* stale: removed */
	__atomic_store_n(&g_hold, 0, __ATOMIC_RELEASE);
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 10000);
	assert_true(mark_exists(2, 0)); /* a member again: marked, this boot */
	dxl_testpoint_clear_all();
}

/* run_tail -- 'dxl tail --shard 0 --from earliest [--replica N]' against
 * this case's cluster; its exit status, output in out/err; *lines = lines
 * of out */
static int run_tail(uint32_t replica, char *out, char *err, size_t cap, size_t *lines)
{
	char bin[PATH_MAX], rep[16], wd[400];
	assert_int_equal(dxlt_prog_path("dxl", bin, sizeof(bin)), 0);
	snprintf(rep, sizeof(rep), "%u", replica);
	snprintf(wd, sizeof(wd), "%s/c%d-tail", g_tmp, g_case);
	mkdir(wd, 0755);
	const char *argv[] = {bin,       "tail",   "--zk",      g_zkc,    "--cluster", g_cluster,
			      "--shard", "0",      "--from",    "earliest", replica ? "--replica" : NULL,
			      rep,       NULL};
	int rc = dxlt_run(argv, NULL, wd, out, err, cap, 20000);
	size_t k = 0;
	for (const char *p = out; *p; p++)
		k += *p == '\n';
	*lines = k;
	return rc;
}

/* forge_desc -- overwrite nodes/<node> (another session's ephemeral znode)
 * with d, through a raw ZooKeeper handle */
static void forge_desc(uint32_t node, const struct dxl_replica_desc *d)
{
	char *json = NULL;
	assert_int_equal(dxl_replica_desc_encode(d, &json), 0);
	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
	zhandle_t *zh = zookeeper_init(g_zkc, NULL, 5000, NULL, NULL, 0);
	assert_non_null(zh);
	uint64_t end = dxl_now_ms() + 5000;
	while (zoo_state(zh) != ZOO_CONNECTED_STATE && dxl_now_ms() < end)
		usleep(10000);
	char path[256];
	snprintf(path, sizeof(path), "/dxl/%s/nodes/%u", g_cluster, node);
	int zrc = zoo_set(zh, path, json, (int)strlen(json), -1);
	zookeeper_close(zh);
	free(json);
	if (zrc != ZOK)
		fail_msg("zoo_set %s: %s", path, zerror(zrc));
}

/*
 * dxl tail read any replica that hosted the shard and was in its replica
 * set -- also one still joining (its join pull not done), which lacks
 * records acknowledged before it joined: the tail printed what that copy
 * held and skipped the rest, exit 0. Now it reads only a member with the
 * recorded data identity: --replica naming a joiner is refused, and without
 * --replica the tail reads the primary.
 */
static void test_tail_member_only(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(90);
	start(1, 1);
	start(2, 1);
	wait_state(1, 0, 0, -1, 10000);
	wait_state(2, 0, 0, -1, 10000);
	/* node 2 copies nothing: it has none of the records */
	__atomic_store_n(&g_skip_catchup, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("replica.catch_up.pass", skip_cb, NULL), 0);
	static const uint32_t e1[1][MAXN + 1] = {{1}};
	uint64_t ep = config(1, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	uint64_t ts[10];
	append(0, 10, ts);
	/* node 2 joins; its join pulls fail (it stays joining) */
	__atomic_store_n(&g_fail, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("replica.join_pull.fail", fail_cb, NULL), 0);
	static const uint32_t e2[1][MAXN + 1] = {{1, 2}};
	ep = config(1, e2);
	wait_state(2, ep, 0, DXL_SHARD_JOINING, 10000);
	assert_int_equal(holds(2, 0, ts, 10), 0);
	static char out[65536], err[65536];
	size_t lines = 0;
	int rc = run_tail(2, out, err, sizeof(out), &lines);
	if (rc == 0)
		fail_msg("dxl tail read replica 2, which is joining (it printed %zu of 10 records)",
			 lines);
	assert_int_equal(rc, 1);
	if (!strstr(err, "replica 2 is not a member of shard 0 yet (joining)"))
		fail_msg("dxl tail: rc %d, stderr: %s", rc, err);
	/* without --replica: the primary, every record */
	rc = run_tail(0, out, err, sizeof(out), &lines);
	if (rc)
		fail_msg("dxl tail: rc %d, stderr: %s", rc, err);
	assert_int_equal(lines, 10);
	/* node 2 joins; then its descriptor says member, but with another
	 * data identity than the one recorded (as if on a new store) */
	__atomic_store_n(&g_fail, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&g_skip_catchup, 0, __ATOMIC_RELEASE);
	dxl_testpoint_clear_all();
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 15000);
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	assert_non_null(d);
	assert_int_equal(dxl_replica_desc_get(g_zk, 2, d), 0);
	uint64_t did = d->shards[0].data_id;
	assert_true(did != 0);
	/* the configuration records node 2's identity (config() records
	 * none; the CM's next change would) */
	struct dxl_cluster_config c;
	int32_t ver;
	assert_int_equal(dxl_cluster_config_read(g_zk, &c, &ver), 0);
	assert_int_equal(dxl_cluster_config_set_data_id(&c, 0, 2, did), 0);
	c.epoch++;
	ep = c.epoch;
	assert_int_equal(dxl_cluster_config_cas(g_zk, &c, ver, NULL), 0);
	dxl_cluster_config_clear(&c);
	wait_state(2, ep, 0, DXL_SHARD_MEMBER, 10000);
	rc = run_tail(2, out, err, sizeof(out), &lines);
	if (rc)
		fail_msg("dxl tail of member 2: rc %d, stderr: %s", rc, err);
	assert_int_equal(lines, 10);
	assert_int_equal(dxl_replica_desc_get(g_zk, 2, d), 0);
	assert_int_equal(d->cfg_epoch, ep);
	d->shards[0].data_id = did ^ 1;
	forge_desc(2, d);
	free(d);
	rc = run_tail(2, out, err, sizeof(out), &lines);
	if (rc == 0)
		fail_msg("dxl tail read replica 2, whose data identity is not the recorded one");
	if (!strstr(err, "replica 2 is on a new store for shard 0"))
		fail_msg("dxl tail: rc %d, stderr: %s", rc, err);
}

/*
 * A daemon whose first registration create (nodes/<id>) is applied but loses
 * its reply (the ZooKeeper shim): it ended its start-up with "connection
 * loss" (exit 5) -- a node that never comes back after a restart. It
 * retries: the znode is its own session's, registering again replaces the
 * payload. (Found by test_nemesis's zk-lost-reply kind.)
 */
static void test_register_lost_reply(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(60);
	static char bin[PATH_MAX];
	assert_int_equal(dxlt_prog_path("dxl-replica", bin, sizeof(bin)), 0);
	char dir[256], logf[256];
	snprintf(dir, sizeof(dir), "%s/c%d-d1", g_tmp, g_case);
	snprintf(logf, sizeof(logf), "%s/c%d-d1.out", g_tmp, g_case);
	static const char *const extra[] = {"-o", "zk.session_timeout_ms=1000", NULL};
	struct dxlt_replica r = {.bin = bin, .logfile = logf, .append = true, .node = 1,
				 .dir = dir, .zk = g_zkc, .cluster = g_cluster, .extra = extra};
	pid_t p = dxlt_spawn_env(&r, "DXL_ZK_FAULTS", "create:/nodes/:reply");
	if (p < 0)
		fail_msg("spawn: %s", dxl_errmsg());
	uint64_t end = dxl_now_ms() + 20000;
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	assert_non_null(d);
	bool reg = false;
	while (!reg && dxl_now_ms() < end) {
		int st;
		if (waitpid(p, &st, WNOHANG) == p) {
			char cmd[600];
			snprintf(cmd, sizeof(cmd), "tail -5 '%s' >&2", logf);
			if (system(cmd)) {
			}
			fail_msg("the replica exited during its start-up (status 0x%x) after its registration's reply was lost",
				 st);
		}
		reg = dxl_replica_desc_get(g_zk, 1, d) == 0;
		if (!reg)
			usleep(50000);
	}
	free(d);
	if (!reg)
		fail_msg("the replica did not register in 20 s");
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "grep -q 'event=zk_fault_injected op=create path=.*/nodes/1 kind=lost_reply' '%s'",
		 logf);
	if (system(cmd) != 0)
		fail_msg("the lost reply was not injected (%s)", logf);
	kill(p, SIGTERM);
	assert_int_equal(dxlt_wait_exit(p, 10000), 0);
}

/*
 * dxl log load --verify read the first replica of the shard's replica set
 * it could tail -- with the primary down, a backup still joining, which
 * lacks the records acknowledged before it joined: it reported them
 * "missing" (a false loss). It reads members only (MEMBER, the recorded data
 * identity), each of them, and says which replicas it skipped and why.
 * The load runs while shard 0 = {1}; node 2 (catch-up skipped, join pulls
 * failing) is added and stays JOINING; the load stops, pauses before its
 * verification (load.verify) while node 1 stops, then verifies.
 */
static void test_load_verify_members_only(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(120);
	start(1, 1);
	start(2, 1);
	wait_state(1, 0, 0, -1, 10000);
	wait_state(2, 0, 0, -1, 10000);
	__atomic_store_n(&g_skip_catchup, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("replica.catch_up.pass", skip_cb, NULL), 0);
	__atomic_store_n(&g_fail, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("replica.join_pull.fail", fail_cb, NULL), 0);
	static const uint32_t e1[1][MAXN + 1] = {{1}};
	uint64_t ep = config(1, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	char bin[PATH_MAX], out[400], err[400], pause[400];
	assert_int_equal(dxlt_prog_path("dxl", bin, sizeof(bin)), 0);
	snprintf(out, sizeof(out), "%s/c%d-load.out", g_tmp, g_case);
	snprintf(err, sizeof(err), "%s/c%d-load.err", g_tmp, g_case);
	snprintf(pause, sizeof(pause), "%s/c%d-load-pause", g_tmp, g_case);
	char spec[600];
	dxlt_pause_spec(spec, sizeof(spec), "load.verify", pause);
	const char *argv[] = {bin,      "log",  "load",         "--zk", g_zkc,
			      "--cluster", g_cluster, "--shards", "0", "--rate", "200", "--duration",
			      "0",         "--unavail-ms", "2000", "--verify", NULL};
	setenv("DXL_TESTPOINTS", spec, 1);
	pid_t p = dxlt_spawn_io(argv, NULL, out, err);
	unsetenv("DXL_TESTPOINTS");
	assert_true(p > 0);
	sleep(2); /* records on node 1 only */
	static const uint32_t e2[1][MAXN + 1] = {{1, 2}};
	ep = config(1, e2);
	wait_state(2, ep, 0, DXL_SHARD_JOINING, 10000);
	usleep(500000);
	kill(p, SIGTERM);
	if (dxlt_pause_wait(pause, 30000))
		fail_msg("dxl log load did not reach its verification: %s", dxl_errmsg());
	/* the primary stops (its nodes/1 goes): node 2 is the only replica
	 * of the shard registered */
	dxlt_server_stop(&g_n[1].srv);
	assert_int_equal(dxlt_pause_release(pause), 0);
	int st = dxlt_wait_exit(p, 60000);
	char *o = NULL, *e = NULL;
	size_t olen = 0, elen = 0;
	FILE *f = fopen(out, "r");
	if (f) {
		o = calloc(1, 1 << 20);
		olen = fread(o, 1, (1 << 20) - 1, f);
		fclose(f);
	}
	f = fopen(err, "r");
	if (f) {
		e = calloc(1, 1 << 20);
		elen = fread(e, 1, (1 << 20) - 1, f);
		fclose(f);
	}
	(void)olen;
	(void)elen;
	assert_non_null(o);
	assert_non_null(e);
	if (!strstr(o, "load: ") || strstr(o, "load: 0 acknowledged"))
		fail_msg("the load acknowledged nothing: %s%s", o, e);
	bool vfailed = false;
	for (const char *l = o; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		const char *nl = strchr(l, '\n');
		size_t len = nl ? (size_t)(nl - l) : strlen(l);
		if (!strncmp(l, "verify:", 7) && memmem(l, len, "FAILED", 6))
			vfailed = true;
	}
	if (strstr(e, "is missing") || vfailed)
		fail_msg("dxl log load --verify read joining node 2 and reported acknowledged records missing (exit %d):\n%s%s",
			 st, o, e);
	if (!strstr(o, "replica 2 of shard 0 is not a member with every record yet (joining)"))
		fail_msg("dxl log load --verify did not say it skipped joining node 2 (exit %d):\n%s%s", st, o, e);
	if (!strstr(e, "no member could be tailed") || st != 1)
		fail_msg("dxl log load --verify: exit %d, want 1 with no member to read:\n%s%s", st, o, e);
	free(o);
	free(e);
}

/* ---- 16.7: a candidacy deleted from outside --------------------------------------- */

/*
 * The CM's candidacy znode is deleted while its session lives (an operator,
 * a tool, a bug elsewhere): the replica must stand again -- it only logged
 * the loss, and with no candidate left no failure was ever handled.
 */
static void test_candidacy_deleted(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(60);
	start_cm(1, 1, true);
	struct dxl_replica_server *s1 = g_n[1].srv.s;
	uint64_t end = dxl_now_ms() + 10000;
	while (!dxl_replica_server_is_cm(s1))
		if (dxl_now_ms() > end)
			fail_msg("node 1 never became the CM");
		else
			usleep(10000);
	char dir[200];
	snprintf(dir, sizeof(dir), "%s/cm", dxl_zk_root(g_zk));
	assert_int_equal(dxlt_zk_raw_delete_children(g_zkc, dir), 1);
	end = dxl_now_ms() + 5000;
	while (dxl_replica_server_is_cm(s1))
		if (dxl_now_ms() > end)
			fail_msg("node 1 did not notice its candidacy was gone");
		else
			usleep(5000);
	end = dxl_now_ms() + 10000;
	while (!dxl_replica_server_is_cm(s1))
		if (dxl_now_ms() > end)
			fail_msg("node 1 did not stand again");
		else
			usleep(10000);
}

/* ---- 16.5: the lease, checked where table RPCs are served --------------------- */

/* a client of the table RPCs (as test_tables does) */
struct client {
	struct dxl_fabric *f;
	struct dxl_ctx *ctx;
	struct dxl_sched *s;
	struct dxl_rpc *rpc;
	struct dxl_qp *qp;
	char msg[512];
};
static struct client g_cl;

static void client_open(const struct dxl_replica_desc *d)
{
	memset(&g_cl, 0, sizeof(g_cl));
	struct dxl_fabric_cfg fc;
	dxl_fabric_cfg_init(&fc);
	fc.node_id = 900;
	assert_int_equal(dxl_fabric_new(&fc, &g_cl.f), 0);
	assert_int_equal(dxl_ctx_new(g_cl.f, 0, &g_cl.ctx), 0);
	assert_int_equal(dxl_sched_new(NULL, g_cl.ctx, &g_cl.s), 0);
	assert_int_equal(dxl_rpc_new(g_cl.s, NULL, &g_cl.rpc), 0);
	assert_int_equal(dxl_qp_connect(g_cl.ctx, d->addr, d->rpc_ctx, &g_cl.qp), 0);
}

static void client_close(void)
{
	dxl_ctx_delete(&g_cl.ctx);
	dxl_rpc_delete(&g_cl.rpc);
	dxl_sched_delete(&g_cl.s);
	dxl_fabric_delete(&g_cl.f);
}

struct callarg {
	uint16_t op;
	const struct dxl_table_req *req;
	struct dxl_table_rep *rep;
	void *val;
	uint32_t cap;
	int ret;
};

static void call_co(void *a)
{
	struct callarg *c = a;
	c->ret = dxl_table_call(g_cl.rpc, g_cl.qp, c->op, c->req, c->rep, c->val, c->cap);
	snprintf(g_cl.msg, sizeof(g_cl.msg), "%s", c->ret ? dxl_errmsg() : "");
}

static int call(uint16_t op, const struct dxl_table_req *req, struct dxl_table_rep *rep,
		void *val, uint32_t cap)
{
	struct callarg c = {.op = op, .req = req, .rep = rep, .val = val, .cap = cap};
	assert_int_equal(dxl_sched_spawn(g_cl.s, call_co, &c, NULL), 0);
	assert_int_equal(dxl_sched_run(g_cl.s), 0);
	return c.ret;
}


/* a suspend of the whole machine at the moment a handler has served its
 * request, before it replies (once) */
static volatile int g_suspend_once;
static void suspend_cb(const char *name, void *ctx, void *arg)
{
	(void)name;
	(void)ctx;
	(void)arg;
	if (__atomic_exchange_n(&g_suspend_once, 0, __ATOMIC_ACQ_REL))
		dxl_clock_inject_suspend_ns(10ull * 1000000000ull);
}

/* wait_serving -- READ r until the node serves again (its lease renewed) */
static void wait_serving(const struct dxl_table_req *r, void *out, uint32_t cap)
{
	struct dxl_table_rep rp;
	uint64_t end = dxl_now_ms() + 10000;
	int ret;
	while ((ret = call(DXL_RPC_ID_TABLE_READ, r, &rp, out, cap)) != 0) {
		if (dxl_now_ms() > end)
			fail_msg("the node did not serve again: %s", g_cl.msg);
		usleep(20000);
	}
}

/*
 * A primary whose lease ran out must not answer table RPCs, even while the
 * thread that applies the lease rule every round is held up: a READ served
 * (or replied to) after the lease may return a value the next primary has
 * already overwritten. The suspend is the boot clock's (CLOCK_BOOTTIME goes
 * on across a suspend of the VM; CLOCK_MONOTONIC does not).
 */
static void test_table_rpc_lease(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(60);
	struct node *n = &g_n[1];
	snprintf(n->dir, sizeof(n->dir), "%s/c%d-n1", g_tmp, g_case);
	dxlt_server_cfg(&n->cfg, 1, n->dir, g_zkc, g_cluster, 1);
	n->cfg.ntables = 1;
	n->cfg.tables[0] = (struct dxl_table_schema){.id = 1, .value_size = 16, .capacity = 64};
	if (dxlt_server_start(&n->cfg, &n->srv))
		fail_msg("node 1: %s", dxl_errmsg());
	wait_state(1, 0, 0, -1, 10000);
	static const uint32_t e1[1][MAXN + 1] = {{1}};
	uint64_t ep = config(1, e1);
	wait_state(1, ep, 0, DXL_SHARD_MEMBER, 10000);
	/* its tables are published once its promotion gate is open */
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	uint64_t end = dxl_now_ms() + 10000;
	while (!(dxl_replica_desc_get(g_zk, 1, d) == 0 && d->shards[0].ntables == 1))
		assert_true(dxl_now_ms() < end);
	client_open(d);
	free(d);
	char v[16] = "fifteen bytes..", out[16];
	struct dxl_table_req rq = {.shard = 0, .table = 1, .epoch = ep, .key = 7, .ts = 1,
				   .value = v, .len = 16};
	struct dxl_table_rep rp;
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &rq, &rp, NULL, 0), 0);
	struct dxl_table_req rd = {.shard = 0, .table = 1, .epoch = ep, .slot = rp.slot};
	assert_int_equal(call(DXL_RPC_ID_TABLE_READ, &rd, &rp, out, sizeof(out)), 0);

	/* 1. before serving: the lease is over (a suspend), the lease rule is
	 *    held up -- the node's serving flag still says yes */
	assert_int_equal(dxl_testpoint_set("replica.lease_rule", hold_cb, NULL), 0);
	__atomic_store_n(&g_hold, 1, __ATOMIC_RELEASE);
	dxl_clock_inject_suspend_ns(10ull * 1000000000ull);
	assert_false(dxl_zk_lease_valid(dxl_replica_server_zk(n->srv.s)));
	assert_true(dxl_replica_server_serving(n->srv.s));
	int ret = call(DXL_RPC_ID_TABLE_READ, &rd, &rp, out, sizeof(out));
	if (ret != DXL_E_UNAVAIL)
		fail_msg("READ after the lease: %s (%s)", dxl_errname(ret), g_cl.msg);
	assert_non_null(strstr(g_cl.msg, "lease has run out"));
	__atomic_store_n(&g_hold, 0, __ATOMIC_RELEASE);

	/* the lease comes back with the next renewal; the node serves again */
	end = dxl_now_ms() + 10000;
	while ((ret = call(DXL_RPC_ID_TABLE_READ, &rd, &rp, out, sizeof(out))) != 0) {
		if (dxl_now_ms() > end)
			fail_msg("the node did not serve again: %s", g_cl.msg);
		usleep(20000);
	}
	assert_memory_equal(out, v, 16);

	/* 2. before replying: the lease runs out while the request is served */
	__atomic_store_n(&g_hold, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&g_suspend_once, 1, __ATOMIC_RELEASE);
	assert_int_equal(dxl_testpoint_set("replica.table_rpc.served", suspend_cb, NULL), 0);
	memset(out, 0, sizeof(out));
	ret = call(DXL_RPC_ID_TABLE_READ, &rd, &rp, out, sizeof(out));
	if (ret != DXL_E_UNAVAIL)
		fail_msg("READ whose lease ran out while served: %s (%s)", dxl_errname(ret),
			 g_cl.msg);
	assert_non_null(strstr(g_cl.msg, "ran out while it served"));
	assert_int_equal(g_suspend_once, 0);
	__atomic_store_n(&g_hold, 0, __ATOMIC_RELEASE);

	/* 3. a write whose lease runs out while it is served: what it changed
	 *    is changed, so it is reported done (an error would tell the
	 *    coordinator "not done": it would never release the lock of its
	 *    insert, and a dead coordinator's insert would become visible) */
	const uint64_t owner = 0x1000000000042ull;
	wait_serving(&rd, out, sizeof(out));
	__atomic_store_n(&g_hold, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&g_suspend_once, 1, __ATOMIC_RELEASE);
	struct dxl_table_req ri = {.shard = 0, .table = 1, .epoch = ep, .key = 8,
				   .value = v, .len = 16, .owner = owner};
	ret = call(DXL_RPC_ID_TABLE_INSERT, &ri, &rp, NULL, 0);
	assert_int_equal(g_suspend_once, 0);
	__atomic_store_n(&g_hold, 0, __ATOMIC_RELEASE);
	if (ret)
		fail_msg("INSERT whose lease ran out while served: %s (%s)", dxl_errname(ret),
			 g_cl.msg);
	uint64_t slot8 = rp.slot;
	/* done indeed: key 8 is live, locked by the insert's owner */
	struct dxl_table_req r8 = {.shard = 0, .table = 1, .epoch = ep, .slot = slot8};
	wait_serving(&r8, out, sizeof(out));
	assert_int_equal(call(DXL_RPC_ID_TABLE_READ, &r8, &rp, out, sizeof(out)), 0);
	assert_true(rp.rec.live);
	assert_int_equal(rp.rec.key, 8);
	assert_int_equal(rp.holder, owner);
	/* the same for the owner's DELETE of it (an aborted insert) */
	__atomic_store_n(&g_hold, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&g_suspend_once, 1, __ATOMIC_RELEASE);
	struct dxl_table_req rx = {.shard = 0, .table = 1, .epoch = ep, .key = 8, .owner = owner};
	ret = call(DXL_RPC_ID_TABLE_DELETE, &rx, &rp, NULL, 0);
	assert_int_equal(g_suspend_once, 0);
	__atomic_store_n(&g_hold, 0, __ATOMIC_RELEASE);
	if (ret)
		fail_msg("DELETE whose lease ran out while served: %s (%s)", dxl_errname(ret),
			 g_cl.msg);
	wait_serving(&r8, out, sizeof(out));
	assert_int_equal(call(DXL_RPC_ID_TABLE_READ, &r8, &rp, out, sizeof(out)), 0);
	assert_false(rp.rec.live);
	/* a read-only operation is still refused (case 2), TXN_STATUS too */
	__atomic_store_n(&g_hold, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&g_suspend_once, 1, __ATOMIC_RELEASE);
	struct dxl_table_req rs = {.shard = 0, .epoch = ep, .key = 77};
	ret = call(DXL_RPC_ID_TABLE_TXN_STATUS, &rs, &rp, NULL, 0);
	__atomic_store_n(&g_hold, 0, __ATOMIC_RELEASE);
	if (ret != DXL_E_UNAVAIL)
		fail_msg("TXN_STATUS whose lease ran out while served: %s (%s)", dxl_errname(ret),
			 g_cl.msg);
	dxl_testpoint_clear_all();
	client_close();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_crosswise_joins, case_setup, case_teardown),
		cmocka_unit_test_setup_teardown(test_join_primary_gone, case_setup, case_teardown),
		cmocka_unit_test_setup_teardown(test_restart_on_empty_dir, case_setup,
						case_teardown),
		cmocka_unit_test_setup_teardown(test_writer_newer_epoch, case_setup, case_teardown),
		cmocka_unit_test_setup_teardown(test_coord_view_newer_epoch, case_setup,
						case_teardown),
		cmocka_unit_test_setup_teardown(test_table_rpc_lease, case_setup, case_teardown),
		cmocka_unit_test_setup_teardown(test_expiry_config_first, case_setup,
						case_teardown),
		cmocka_unit_test_setup_teardown(test_restart_member_mark, case_setup,
						case_teardown),
		cmocka_unit_test_setup_teardown(test_join_interrupted, case_setup, case_teardown),
		cmocka_unit_test_setup_teardown(test_candidacy_deleted, case_setup, case_teardown),
		cmocka_unit_test_setup_teardown(test_second_failure_during_join, case_setup,
						case_teardown),
		cmocka_unit_test_setup_teardown(test_dead_primary_joiner_waits, case_setup,
						case_teardown),
		cmocka_unit_test_setup_teardown(test_join_timeout, case_setup, case_teardown),
		cmocka_unit_test_setup_teardown(test_incomplete_store_not_member, case_setup,
						case_teardown),
		cmocka_unit_test_setup_teardown(test_member_mark_unlink_fails, case_setup,
						case_teardown),
		cmocka_unit_test_setup_teardown(test_member_mark_other_boot, case_setup,
						case_teardown),
		cmocka_unit_test_setup_teardown(test_tail_member_only, case_setup, case_teardown),
		cmocka_unit_test_setup_teardown(test_load_verify_members_only, case_setup,
						case_teardown),
		cmocka_unit_test_setup_teardown(test_register_lost_reply, case_setup,
						case_teardown),
	};
	if (getenv("DXL_TEST_FILTER")) /* a cmocka pattern: one case */
		cmocka_set_test_filter(getenv("DXL_TEST_FILTER"));
	return cmocka_run_group_tests_name("reconfig", tests, group_setup, group_teardown);
}
