/* test_txn_faults.c -- the transaction layer's fault cases, one at a time,
 * each made to happen at a chosen point of a transaction (issue 12): a
 * test hook of the coordinator (dxl_coord_cfg.test_hook) pauses a
 * transaction after its locks (before validation) or at its commit point
 * while the test changes the cluster -- raises the configuration epoch,
 * stops or kills a replica, kills the coordinator. Each test fails on the
 * code before the fix it covers (the commit that fixed it says how it was
 * checked).
 *
 * A real local cluster: 3 dxl-replica processes, 2 shards, 3-way
 * replication, ZooKeeper. Needs DXL_TEST_ZK (skips otherwise);
 * DXL_TEST_KEEP=1 keeps the temporary directory (daemon logs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "common/endian.h"
#include "dxl/membership.h"
#include "dxl/txn.h"
#include "dxl/rpc.h"
#include "tests/lib/cli_run.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/proc.h"

#define T1 1 /* table 1: 8-byte values */
#define T2 2 /* table 2: values up to 3000 bytes (IN_DOUBT paging) */
#define OUT_CAP 65536

static const char *g_zkc;
static char g_dxl[PATH_MAX];
static char g_tmp[128];
static char *g_out, *g_err;
static char g_name[64], g_dir[256];
static bool g_up;

static int run_dxl(int timeout_ms, const char *const *args)
{
	const char *argv[64];
	int a = 0;
	argv[a++] = g_dxl;
	for (int i = 0; args[i] && a < 63; i++)
		argv[a++] = args[i];
	argv[a] = NULL;
	return dxlt_run(argv, NULL, g_tmp, g_out, g_err, OUT_CAP, timeout_ms);
}
#define DXL(t, ...) run_dxl((t), (const char *const[]){__VA_ARGS__, NULL})

#define NEED_ENV()                                                                 \
	do {                                                                       \
		if (!g_zkc) {                                                      \
			print_message("SKIPPED: no ZooKeeper (DXL_TEST_ZK unset)\n"); \
			skip();                                                    \
		}                                                                  \
		if (!g_up)                                                         \
			fail_msg("the cluster did not come up");                   \
	} while (0)

static struct dxl_zk *zk_open(void)
{
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_zkc, g_name, &zk), 0);
	return zk;
}

/* ---- the cluster's configuration -------------------------------------------------- */

static __attribute__((unused)) uint64_t config_epoch(struct dxl_zk *zk)
{
	struct dxl_cluster_config c;
	assert_int_equal(dxl_cluster_config_read(zk, &c, NULL), 0);
	uint64_t e = c.epoch;
	dxl_cluster_config_clear(&c);
	return e;
}

static uint32_t primary_of(struct dxl_zk *zk, uint32_t shard)
{
	struct dxl_cluster_config c;
	assert_int_equal(dxl_cluster_config_read(zk, &c, NULL), 0);
	const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, shard);
	assert_non_null(sh);
	uint32_t p = sh->primary;
	dxl_cluster_config_clear(&c);
	return p;
}

/* every node of the configuration registered for epoch >= e (new rkeys) */
static void wait_registered(struct dxl_zk *zk, uint64_t e, int timeout_ms)
{
	static struct dxl_replica_desc d;
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	for (uint32_t node = 1; node <= 3; node++)
		for (;;) {
			if (dxl_replica_desc_get(zk, node, &d) == 0 && d.cfg_epoch >= e)
				break;
			if (dxl_now_ms() > end)
				fail_msg("node %u did not register for epoch %" PRIu64, node, e);
			usleep(20 * 1000);
		}
}

/* the same configuration in the next epoch: every replica registers its
 * regions again (new rkeys), the primaries stay */
static uint64_t bump_epoch(struct dxl_zk *zk)
{
	for (int k = 0; k < 20; k++) {
		struct dxl_cluster_config c;
		int32_t ver;
		assert_int_equal(dxl_cluster_config_read(zk, &c, &ver), 0);
		c.epoch++;
		uint64_t e = c.epoch;
		int ret = dxl_cluster_config_cas(zk, &c, ver, NULL);
		dxl_cluster_config_clear(&c);
		if (!ret) {
			wait_registered(zk, e, 10000);
			return e;
		}
		assert_int_equal(ret, DXL_E_STALE);
	}
	fail_msg("could not raise the configuration epoch");
	return 0;
}

/* every shard has 3 members again */
static void wait_full(int timeout_ms)
{
	struct dxl_zk *zk = zk_open();
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		struct dxl_cluster_config c;
		bool ok = false;
		if (dxl_cluster_config_read(zk, &c, NULL) == 0) {
			ok = true;
			for (uint32_t i = 0; i < c.nshards; i++)
				ok = ok && c.shards[i].nbackups == 2;
			dxl_cluster_config_clear(&c);
		}
		if (ok)
			break;
		if (dxl_now_ms() > end)
			fail_msg("the shards did not get 3 members back");
		usleep(100 * 1000);
	}
	dxl_zk_delete(&zk);
}

/* ---- a coordinator with a test hook ------------------------------------------------- */

struct env {
	struct dxl_zk *zk;
	struct dxl_coord *c;
	struct dxl_coord_worker *w;
};

typedef void (*hook_fn)(int where, uint64_t txn, void *arg);

static uint32_t g_unavail_ms = 30000; /* env_open's log_unavail_ms */
static uint32_t g_fabric_ms;          /* env_open's fabric_timeout_ms (0: default) */
static uint32_t g_unlock_fail;        /* env_open's test_unlock_post_fail */

static void env_open(struct env *e, hook_fn hook, void *arg)
{
	memset(e, 0, sizeof(*e));
	e->zk = zk_open();
	struct dxl_coord_cfg cfg;
	dxl_coord_cfg_init(&cfg);
	cfg.test_hook = hook;
	cfg.test_hook_arg = arg;
	cfg.log_unavail_ms = g_unavail_ms; /* failovers and gates of the tests */
	if (g_fabric_ms)
		cfg.fabric_timeout_ms = g_fabric_ms;
	cfg.test_unlock_post_fail = g_unlock_fail;
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

static void run1(struct env *e, dxl_co_fn fn, void *arg)
{
	assert_int_equal(dxl_coord_worker_spawn(e->w, fn, arg), 0);
	assert_int_equal(dxl_coord_worker_run(e->w), 0);
}

/* one transaction: read rk (if any), then for each of wk[0..nw) op on it
 * (value = val); max_tries runs (dxl_txn_run) */
struct tx {
	struct env *e;
	uint32_t table;
	uint64_t rk[4];
	uint32_t nr;
	uint64_t wk[4];
	uint32_t nw;
	char op; /* 'p' put, 'i' insert, 'd' delete */
	int64_t val;
	uint32_t vlen; /* bytes of each written value (8 if 0) */
	uint32_t max_tries;
	/* results */
	int ret;
	int64_t got[4];
	uint32_t gotlen[4];
	bool gotok[4]; /* the value read is fill_value's pattern */
	struct dxl_txn_info info;
	char msg[512];
};

/* the value of a write: val, then (vlen > 8) a pattern of val to vlen bytes */
static void fill_value(uint8_t *v, int64_t val, uint32_t vlen)
{
	dxl_put_le64(v, (uint64_t)val);
	for (uint32_t i = 8; i < vlen; i++)
		v[i] = (uint8_t)(val * 31 + i);
}

static int tx_fn(struct dxl_txn *t, void *arg)
{
	struct tx *x = arg;
	static uint8_t v[4096];
	uint32_t len, vlen = x->vlen ? x->vlen : 8;
	for (uint32_t i = 0; i < x->nr; i++) {
		int ret = dxl_txn_get(t, x->table, x->rk[i], v, sizeof(v), &len);
		if (ret)
			return ret;
		x->got[i] = (int64_t)dxl_get_le64(v);
		x->gotlen[i] = len;
		uint8_t want[4096];
		fill_value(want, x->got[i], len);
		x->gotok[i] = memcmp(want, v, len) == 0;
	}
	fill_value(v, x->val, vlen);
	for (uint32_t i = 0; i < x->nw; i++) {
		int ret = x->op == 'i'   ? dxl_txn_insert(t, x->table, x->wk[i], v, vlen)
			  : x->op == 'd' ? dxl_txn_delete(t, x->table, x->wk[i])
					 : dxl_txn_put(t, x->table, x->wk[i], v, vlen);
		if (ret)
			return ret;
	}
	return 0;
}

static void co_tx(void *arg)
{
	struct tx *x = arg;
	x->ret = dxl_txn_run(x->e->w, tx_fn, x, x->max_tries, &x->info);
	snprintf(x->msg, sizeof(x->msg), "%s", x->ret ? dxl_errmsg() : "");
}

static int tx_run(struct env *e, struct tx *x)
{
	x->e = e;
	if (!x->table)
		x->table = T1;
	run1(e, co_tx, x);
	return x->ret;
}

static int put1(struct env *e, uint64_t key, int64_t val, uint32_t tries)
{
	struct tx x = {.wk = {key}, .nw = 1, .op = 'p', .val = val, .max_tries = tries};
	int ret = tx_run(e, &x);
	if (ret)
		print_message("  put %" PRIu64 ": %s: %s\n", key, dxl_errname(ret), x.msg);
	return ret;
}

static int get1(struct env *e, uint64_t key, int64_t *val)
{
	struct tx x = {.rk = {key}, .nr = 1, .max_tries = 50};
	int ret = tx_run(e, &x);
	*val = x.got[0];
	return ret;
}

static void insert_keys(struct env *e, uint64_t first, uint32_t n, int64_t val)
{
	for (uint64_t k = first; k < first + n; k++) {
		struct tx x = {.wk = {k}, .nw = 1, .op = 'i', .val = val};
		int ret = tx_run(e, &x);
		if (ret && ret != DXL_E_EXIST)
			fail_msg("insert %" PRIu64 ": %s: %s", k, dxl_errname(ret), x.msg);
	}
}

/* ---- defect 5: a lock taken before a new epoch is released after it ------------------ */

struct bump_hook {
	bool armed;
	uint64_t epoch;
};

static void hook_bump(int where, uint64_t txn, void *arg)
{
	struct bump_hook *b = arg;
	if (where != DXL_TXN_HOOK_VALIDATE || !b->armed)
		return;
	b->armed = false;
	/* the transaction holds its locks: the configuration moves on (the
	 * primaries stay), every replica registers again with new rkeys */
	struct dxl_zk *zk = zk_open();
	b->epoch = bump_epoch(zk);
	dxl_zk_delete(&zk);
	print_message("  txn 0x%" PRIx64 " locked its key; epoch now %" PRIu64 "\n", txn, b->epoch);
}

/*
 * A transaction locks key 10, then (hook) the epoch changes and every
 * replica registers again: its validation READ fails (old rkeys), it aborts,
 * and its unlock CAS fails too (old rkeys), with the primary unchanged.
 * Before the fix release_all gave up (settle_new_primary only looks at a
 * new primary) and the lock word stayed: every later transaction on key 10
 * aborted "locked by" this coordinator until it ended.
 * (The aborted attempt is DXL_E_UNAVAIL -- the configuration changed --
 * which dxl_txn_run retries by time whatever max_tries says: the retry
 * commits only if the first attempt's lock, or its inserted record, is
 * gone; a leaked one would abort it until log_unavail_ms.)
 */
static void test_abort_releases_lock_across_epochs(void **state)
{
	(void)state;
	NEED_ENV();
	struct bump_hook b = {0};
	struct env e;
	env_open(&e, hook_bump, &b);
	insert_keys(&e, 10, 2, 100);
	struct dxl_zk *zk = zk_open();
	uint32_t p0 = primary_of(zk, 0);
	b.armed = true;
	/* read 11 (shard 1), write 10 (shard 0): the read makes V run */
	struct tx x = {.rk = {11}, .nr = 1, .wk = {10}, .nw = 1, .op = 'p', .val = 7, .max_tries = 1};
	int ret = tx_run(&e, &x);
	print_message("  the transaction: %s (%s), attempts %u\n", dxl_errname(ret), x.msg,
		      x.info.attempts);
	/* the first attempt aborted (the epoch changed under it), the retry
	 * took key 10's lock again and committed */
	assert_int_equal(ret, 0);
	assert_true(x.info.attempts >= 2);
	assert_true(b.epoch > 0);
	assert_int_equal(primary_of(zk, 0), p0);
	int64_t v;
	assert_int_equal(get1(&e, 10, &v), 0);
	assert_int_equal(v, 7);
	/* key 10 is free: a transaction writing it commits at once (a leaked
	 * lock would abort every try with "locked by" this coordinator) */
	assert_int_equal(put1(&e, 10, 8, 5), 0);
	assert_int_equal(get1(&e, 10, &v), 0);
	assert_int_equal(v, 8);
	/* the same with an insert: the aborted transaction's record (made
	 * live and locked at L) must be deleted, not just unlocked */
	b.armed = true;
	x = (struct tx){.rk = {11}, .nr = 1, .wk = {20}, .nw = 1, .op = 'i', .val = 9, .max_tries = 1};
	ret = tx_run(&e, &x);
	print_message("  the insert: %s (%s), attempts %u\n", dxl_errname(ret), x.msg,
		      x.info.attempts);
	/* the retry's insert commits: the first attempt's record is gone (left
	 * live it would be "exists", left locked a conflict) */
	assert_int_equal(ret, 0);
	assert_true(x.info.attempts >= 2);
	assert_int_equal(get1(&e, 20, &v), 0);
	assert_int_equal(v, 9);
	x = (struct tx){.wk = {20}, .nw = 1, .op = 'p', .val = 21, .max_tries = 5};
	assert_int_equal(tx_run(&e, &x), 0);
	assert_int_equal(get1(&e, 20, &v), 0);
	assert_int_equal(v, 21);
	dxl_zk_delete(&zk);
	env_close(&e);
}

/* ---- a raw client of one primary: table RPCs and one-sided lock words ------------------ */

struct rawc {
	struct dxl_fabric *f;
	struct dxl_ctx *ctx, *octx;
	struct dxl_sched *s;
	struct dxl_rpc *rpc;
	struct dxl_qp *qp, *oqp;
	uint8_t *buf;
	struct dxl_mr *mr;
	struct dxl_replica_desc d;
	uint64_t epoch;
};

static void raw_open(struct rawc *r, struct dxl_zk *zk, uint32_t node)
{
	memset(r, 0, sizeof(*r));
	assert_int_equal(dxl_replica_desc_get(zk, node, &r->d), 0);
	r->epoch = r->d.cfg_epoch;
	struct dxl_fabric_cfg fc;
	dxl_fabric_cfg_init(&fc);
	fc.node_id = 901;
	assert_int_equal(dxl_fabric_new(&fc, &r->f), 0);
	assert_int_equal(dxl_ctx_new(r->f, 0, &r->ctx), 0);
	assert_int_equal(dxl_ctx_new(r->f, 1, &r->octx), 0);
	assert_int_equal(dxl_sched_new(NULL, r->ctx, &r->s), 0);
	assert_int_equal(dxl_rpc_new(r->s, NULL, &r->rpc), 0);
	assert_int_equal(dxl_qp_connect(r->ctx, r->d.addr, r->d.rpc_ctx, &r->qp), 0);
	assert_int_equal(dxl_qp_connect(r->octx, r->d.addr, 0, &r->oqp), 0);
	r->buf = dxlt_alloc_pages(65536);
	assert_non_null(r->buf);
	assert_int_equal(dxl_mr_reg(r->f, r->buf, 65536, DXL_MR_LOCAL_WRITE, &r->mr), 0);
}

static void raw_close(struct rawc *r)
{
	dxl_mr_dereg(&r->mr);
	dxl_ctx_delete(&r->ctx);
	dxl_ctx_delete(&r->octx);
	dxl_rpc_delete(&r->rpc);
	dxl_sched_delete(&r->s);
	dxl_fabric_delete(&r->f);
	dxlt_free_pages(r->buf, 65536);
}

struct rcall {
	struct rawc *r;
	uint16_t op;
	struct dxl_table_req *req;
	struct dxl_table_rep *rep;
	int ret;
};

static void rcall_co(void *a)
{
	struct rcall *c = a;
	c->ret = dxl_table_call(c->r->rpc, c->r->qp, c->op, c->req, c->rep, NULL, 0);
}

static int raw_call(struct rawc *r, uint16_t op, uint32_t shard, struct dxl_table_req *req,
		    struct dxl_table_rep *rep)
{
	req->shard = shard;
	req->epoch = r->epoch;
	struct rcall c = {.r = r, .op = op, .req = req, .rep = rep};
	assert_int_equal(dxl_sched_spawn(r->s, rcall_co, &c, NULL), 0);
	assert_int_equal(dxl_sched_run(r->s), 0);
	return c.ret;
}

/* the slot of key at the primary and its lock word */
static uint64_t raw_slot(struct rawc *r, uint32_t shard, uint32_t table, uint64_t key,
			 uint64_t *lock)
{
	struct dxl_table_req q = {.table = table, .key = key};
	struct dxl_table_rep rep;
	int ret = raw_call(r, DXL_RPC_ID_TABLE_LOOKUP, shard, &q, &rep);
	if (ret && ret != DXL_E_TOOBIG)
		fail_msg("lookup of key %" PRIu64 ": %s", key, dxl_errmsg());
	uint64_t slot = rep.slot;
	struct dxl_table_req rd = {.table = table, .slot = slot};
	ret = raw_call(r, DXL_RPC_ID_TABLE_READ, shard, &rd, &rep);
	assert_true(ret == 0 || ret == DXL_E_TOOBIG);
	if (lock)
		*lock = rep.holder;
	return slot;
}

/* CAS of a lock word at the primary; returns the word found */
static uint64_t raw_cas(struct rawc *r, uint32_t shard, uint32_t table, uint64_t slot,
			uint64_t cmp, uint64_t swap)
{
	const struct dxl_shard_table *t = dxl_replica_desc_table(&r->d, shard, table);
	assert_non_null(t);
	uint64_t *res = (uint64_t *)(r->buf + 60000);
	int st = dxlt_cas(r->octx, r->oqp, res, dxl_mr_lkey(r->mr), t->t.locks.addr + 8 * slot,
			  t->t.locks.rkey, cmp, swap);
	assert_int_equal(st, DXL_WC_SUCCESS);
	return *res;
}

/* ---- a coordinator process that dies at a chosen point -------------------------------- */

static void hook_die(int where, uint64_t txn, void *arg)
{
	int at = *(int *)arg;
	if (where == at) {
		fprintf(stderr, "child: txn 0x%" PRIx64 " dies at hook %d\n", txn, where);
		_exit(0);
	}
}

/* fork a process whose coordinator runs tx (x->e unset) and dies at hook
 * `at` (the parent must hold no ZooKeeper session or fabric: fork) */
static pid_t spawn_dying(struct tx *x, int at)
{
	fflush(NULL);
	pid_t p = fork();
	assert_true(p >= 0);
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		static int where;
		where = at;
		struct env e;
		env_open(&e, hook_die, &where);
		int ret = tx_run(&e, x);
		fprintf(stderr, "child: the transaction returned %s (%s)\n", dxl_errname(ret), x->msg);
		_exit(3);
	}
	return p;
}

/* a coordinator id no longer registered */
static void wait_coord_gone(struct dxl_zk *zk, uint32_t id, int timeout_ms)
{
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		uint32_t ids[1024];
		int n = dxl_coord_znode_list(zk, ids, 1024);
		bool alive = false;
		for (int i = 0; i < n; i++)
			alive = alive || ids[i] == id;
		if (n >= 0 && !alive)
			return;
		if (dxl_now_ms() > end)
			fail_msg("coordinator %u still registered", id);
		usleep(50 * 1000);
	}
}

/* ---- review #6: a settle is never dropped; a transport error is no refusal --------------- */

struct wconflict_hook {
	bool armed;
	int other_ret;
};

static void *wconflict_other(void *arg)
{
	struct wconflict_hook *h = arg;
	struct env e2;
	env_open(&e2, NULL, NULL);
	h->other_ret = put1(&e2, 15, 1515, 50);
	env_close(&e2);
	return NULL;
}

/* after the lock phase another coordinator writes the key the transaction
 * read: its validation fails, it aborts and releases its lock */
static void hook_wconflict(int where, uint64_t txn, void *arg)
{
	struct wconflict_hook *h = arg;
	if (where != DXL_TXN_HOOK_VALIDATE || !h->armed)
		return;
	h->armed = false;
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, wconflict_other, h), 0);
	pthread_join(th, NULL);
}

/*
 * Review of issue 12, #6. A transaction reads key 15 and writes key 14;
 * after its lock phase another coordinator writes key 15: it aborts. Its
 * unlock CAS of key 14 fails before it is posted (injected: a QP in the
 * error state, DXL_E_STATE from the local post), so the release is queued;
 * the settle's first unlock CAS fails the same way. Before the fix the
 * settle took that DXL_E_STATE for the primary's "not ours any more" and
 * dropped the entry (any error outside a short list was dropped too): the
 * lock word of key 14 stayed set by a live coordinator -- which the sweep
 * for gone coordinators skips -- and every transaction on key 14 aborted.
 * Now a local failure is a transport error (retried), DXL_E_STATE means
 * only that the CAS ran and found another word, and no settle is ever
 * dropped: the lock is released on the next try.
 */
static void test_settle_survives_transport_error(void **state)
{
	(void)state;
	NEED_ENV();
	struct env e;
	env_open(&e, NULL, NULL);
	insert_keys(&e, 14, 2, 1);
	env_close(&e);
	struct wconflict_hook h = {0};
	g_unlock_fail = 2;
	env_open(&e, hook_wconflict, &h);
	g_unlock_fail = 0;
	h.armed = true;
	struct tx x = {.rk = {15}, .nr = 1, .wk = {14}, .nw = 1, .op = 'p', .val = 7, .max_tries = 1};
	int ret = tx_run(&e, &x);
	print_message("  the transaction: %s (%s); the other's put of key 15: %s\n", dxl_errname(ret),
		      x.msg, dxl_errname(h.other_ret));
	assert_int_equal(h.other_ret, 0);
	assert_int_equal(ret, DXL_E_CONFLICT);
	struct dxl_zk *zk = zk_open();
	struct rawc r;
	raw_open(&r, zk, primary_of(zk, 0));
	uint64_t lock = 0;
	raw_slot(&r, 0, T1, 14, &lock);
	print_message("  key 14's lock word after the abort: 0x%" PRIx64 " (txn 0x%" PRIx64 ")\n", lock,
		      x.info.id);
	if (lock)
		fail_msg("key 14 is still locked (0x%" PRIx64 ") by the aborted transaction of a live coordinator: its release was dropped",
			 lock);
	assert_int_equal(put1(&e, 14, 8, 5), 0);
	int64_t v = 0;
	assert_int_equal(get1(&e, 14, &v), 0);
	assert_int_equal(v, 8);
	raw_close(&r);
	dxl_zk_delete(&zk);
	env_close(&e);
}

/* ---- defect 3: resolution never skips a committed write -------------------------------- */

struct releaser {
	struct rawc *r;
	uint32_t dead_coord;
	uint64_t slot, holder;
	uint32_t delay_ms;
	uint64_t released;
};

static void *releaser_main(void *arg)
{
	struct releaser *rl = arg;
	struct dxl_zk *zk = zk_open();
	wait_coord_gone(zk, rl->dead_coord, 20000);
	dxl_zk_delete(&zk);
	usleep(rl->delay_ms * 1000);
	/* the live transaction is done with key 30: its lock goes */
	rl->released = raw_cas(rl->r, 0, T1, rl->slot, rl->holder, 0);
	return NULL;
}

/*
 * A coordinator process commits a transaction writing keys 30 and 32
 * (shard 0) and dies at its commit point (every record acknowledged, not
 * decided, nothing written back: both keys locked by it). Key 30's lock
 * word is then taken by a transaction of a live coordinator (here: set by
 * hand, as when the dead one's lock was lost in a failover); a reader of
 * key 32 meets the dead coordinator's lock and resolves its ring: the
 * transaction committed (its write set is in the log), so both keys must
 * get its values at the primary. The resolution before the fix logged
 * event=resolve_busy and skipped key 30 at the primary while the backups
 * applied it from the log: the primary kept the old value. Now it waits
 * until the live holder lets go (here 1.5 s after the dead coordinator's
 * znode vanished), then applies it.
 */
static void test_resolution_never_skips(void **state)
{
	(void)state;
	NEED_ENV();
	struct env e;
	env_open(&e, NULL, NULL);
	insert_keys(&e, 30, 3, 100); /* 30, 32: shard 0 */
	env_close(&e);
	struct tx x = {.wk = {30, 32}, .nw = 2, .op = 'p', .val = 777, .max_tries = 5};
	pid_t child = spawn_dying(&x, DXL_TXN_HOOK_LOGGED);
	int st = 0;
	assert_int_equal(waitpid(child, &st, 0), child);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct dxl_zk *zk = zk_open();
	uint32_t p0 = primary_of(zk, 0);
	struct rawc r;
	raw_open(&r, zk, p0);
	uint64_t lock30 = 0, lock32 = 0;
	uint64_t slot30 = raw_slot(&r, 0, T1, 30, &lock30);
	raw_slot(&r, 0, T1, 32, &lock32);
	print_message("  the dead coordinator's transaction 0x%" PRIx64 " holds keys 30 and 32\n",
		      lock32);
	assert_true(lock30 != 0 && lock30 == lock32);
	uint32_t dead = (uint32_t)(lock30 >> 48);
	env_open(&e, NULL, NULL);
	uint64_t holder = DXL_LOCK_OWNER(dxl_coord_id(e.c), 1);
	assert_int_equal(raw_cas(&r, 0, T1, slot30, lock30, holder), lock30);
	struct releaser rl = {.r = &r, .dead_coord = dead, .slot = slot30, .holder = holder,
			      .delay_ms = 1500};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, releaser_main, &rl), 0);
	/* a reader of key 32: conflicts until the dead coordinator is resolved */
	int64_t v32 = 0, v30 = 0;
	assert_int_equal(get1(&e, 32, &v32), 0);
	pthread_join(th, NULL);
	assert_int_equal(rl.released, holder);
	assert_int_equal(get1(&e, 30, &v30), 0);
	print_message("  after the resolution: key 30 = %" PRId64 ", key 32 = %" PRId64 "\n", v30, v32);
	assert_int_equal(v32, 777);
	if (v30 != 777)
		fail_msg("key 30 at the primary is %" PRId64 ": the resolution skipped the committed write (the backups have 777)",
			 v30);
	struct dxl_coord_stats cs;
	dxl_coord_stats(e.c, &cs);
	assert_true(cs.resolved >= 1);
	raw_close(&r);
	dxl_zk_delete(&zk);
	env_close(&e);
}

/* ---- defect 6: reads are fenced ------------------------------------------------------ */

struct fence_hook {
	pthread_t cont;
	bool armed;
	uint32_t old_primary, new_primary;
	int64_t written; /* committed at the new primary meanwhile */
	int ret;
};

static void signal_node(uint32_t node, const char *sig)
{
	char n[16];
	snprintf(n, sizeof(n), "%u", node);
	int rc = DXL(30000, "cluster", "kill", n, "--signal", sig, "--dir", g_dir);
	if (rc)
		fail_msg("cluster kill %s --signal %s: %s%s", n, sig, g_out, g_err);
}

/* the pid of replica node from DIR/cluster.json (0 if unknown) */
static pid_t cluster_pid(uint32_t node)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/cluster.json", g_dir);
	json_error_t je;
	json_t *o = json_load_file(path, 0, &je), *r;
	size_t i;
	pid_t pid = 0;
	json_array_foreach(json_object_get(o, "replicas"), i, r)
		if ((uint32_t)json_integer_value(json_object_get(r, "id")) == node)
			pid = (pid_t)json_integer_value(json_object_get(r, "pid"));
	json_decref(o);
	return pid;
}

static void *cont_main(void *arg)
{
	struct fence_hook *h = arg;
	usleep(200 * 1000);
	/* SIGCONT straight to the process (the CLI would take longer) */
	pid_t pid = cluster_pid(h->old_primary);
	if (pid > 0)
		kill(pid, SIGCONT);
	else
		signal_node(h->old_primary, "CONT");
	return NULL;
}

static void *writer_main(void *arg)
{
	struct fence_hook *h = arg;
	struct env w;
	env_open(&w, NULL, NULL);
	h->ret = put1(&w, 40, h->written, 50);
	env_close(&w);
	return NULL;
}

/* in the reader's coroutine, its reads done, before it validates */
static void hook_failover(int where, uint64_t txn, void *arg)
{
	struct fence_hook *h = arg;
	if (where != DXL_TXN_HOOK_VALIDATE || !h->armed)
		return;
	h->armed = false;
	struct dxl_zk *zk = zk_open();
	h->old_primary = primary_of(zk, 0);
	/* the primary of shard 0 freezes; past the session timeout a backup
	 * is promoted and takes a write of key 40 */
	signal_node(h->old_primary, "STOP");
	uint64_t end = dxl_now_ms() + 20000;
	while ((h->new_primary = primary_of(zk, 0)) == h->old_primary && dxl_now_ms() < end)
		usleep(50 * 1000);
	dxl_zk_delete(&zk);
	/* another coordinator (its own thread: this one runs a scheduler) */
	h->written = 200;
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, writer_main, h), 0);
	pthread_join(th, NULL);
	/* the old primary resumes 200 ms from now, when the reader's
	 * validation READs wait in its socket: its lease lapsed, it stops
	 * serving at once -- but the READs may be served first */
	pthread_create(&h->cont, NULL, cont_main, h);
	print_message("  txn 0x%" PRIx64 ": primary %u stopped, %u promoted, key 40 := %" PRId64
		      " there (%s), %u resumes in 200 ms\n",
		      txn, h->old_primary, h->new_primary, h->written, dxl_errname(h->ret),
		      h->old_primary);
}

struct ro_run {
	struct env *e;
	int ret;
	int64_t v;
	uint32_t attempts;
};

static int ro_fn(struct dxl_txn *t, void *arg)
{
	struct ro_run *r = arg;
	uint8_t v[8];
	uint32_t len;
	int ret = dxl_txn_get(t, T1, 40, v, 8, &len);
	if (!ret)
		r->v = (int64_t)dxl_get_le64(v);
	return ret;
}

static void co_ro(void *arg)
{
	struct ro_run *r = arg;
	struct dxl_txn_info info;
	r->ret = dxl_txn_run(r->e->w, ro_fn, r, 20, &info);
	r->attempts = info.attempts;
}

/* one read-only transaction of key 40 across a failover; the value it
 * committed with */
static int64_t ro_across_failover(bool no_fence, struct fence_hook *h)
{
	struct env e;
	memset(h, 0, sizeof(*h));
	e.zk = zk_open();
	struct dxl_coord_cfg cfg;
	dxl_coord_cfg_init(&cfg);
	cfg.test_hook = hook_failover;
	cfg.test_hook_arg = h;
	cfg.no_fence = no_fence;
	cfg.log_unavail_ms = 20000;
	/* the QP to the frozen primary must outlive the freeze (as a verbs
	 * QP does): the READs wait in its socket until it resumes */
	cfg.fabric_timeout_ms = 60000;
	assert_int_equal(dxl_coord_new(e.zk, &cfg, &e.c), 0);
	assert_int_equal(dxl_coord_worker_new(e.c, 2, &e.w), 0);
	struct ro_run r = {.e = &e};
	/* warm the location cache: the reads are one-sided */
	run1(&e, co_ro, &r);
	assert_int_equal(r.ret, 0);
	h->armed = true;
	run1(&e, co_ro, &r);
	pthread_join(h->cont, NULL);
	print_message("  %s: the reader committed %s with key 40 = %" PRId64 " after %u attempts\n",
		      no_fence ? "no fence" : "fenced", dxl_errname(r.ret), r.v, r.attempts);
	assert_int_equal(h->ret, 0);
	assert_int_equal(r.ret, 0);
	env_close(&e);
	wait_full(60000); /* the old primary is back as a backup */
	return r.v;
}

/*
 * A read-only transaction reads key 40 at shard 0's primary; before it
 * validates, that primary is frozen (SIGSTOP) past the session timeout, a
 * backup is promoted and commits key 40 := 200, and the old primary
 * resumes. The reader's validation READs reach the old primary with the
 * old view: they may be served before its lease guard deregisters its
 * regions, and there key 40 is unchanged and unlocked. Without the fence
 * (the code before the fix; here cfg.no_fence) the reader commits with the
 * old value -- read-only, after a commit that finished before it did; with
 * a second shard it would see half of a transfer. With the fence its
 * FENCE RPC finds the old primary's lease invalid, it aborts and reads the
 * new value at the new primary.
 */
static void test_reads_are_fenced(void **state)
{
	(void)state;
	NEED_ENV();
	struct env e;
	env_open(&e, NULL, NULL);
	insert_keys(&e, 40, 1, 100);
	assert_int_equal(put1(&e, 40, 100, 10), 0);
	env_close(&e);
	struct fence_hook h;
	int64_t v = ro_across_failover(false, &h);
	if (v != h.written)
		fail_msg("the fenced reader committed key 40 = %" PRId64 ", but %" PRId64
			 " was committed at the new primary %u before it validated",
			 v, h.written, h.new_primary);
	/* the same without the fence: the stale read gets through when the
	 * READs win the race against the resumed primary's deregistration */
	env_open(&e, NULL, NULL);
	assert_int_equal(put1(&e, 40, 100, 50), 0);
	env_close(&e);
	int64_t u = ro_across_failover(true, &h);
	/* the test's teeth: the cluster runs with replica.test_nic_pause_ms
	 * (the old primary's regions stay registered 2 s after its lease
	 * lapsed, as with an RDMA NIC): unfenced, the stale read happens */
	if (u == h.written)
		fail_msg("without the fence the reader did not commit the old value: the setup does not expose the anomaly");
	print_message("  without the fence: a read-only transaction committed the stale value %" PRId64 "\n",
		      u);
}

static void kill_node(uint32_t node);
static void restart_node(uint32_t node);

/* ---- a committed write settled at a new primary ---------------------------------------- */

struct failover_hook {
	bool armed;
	uint32_t old_primary, new_primary;
};

static void hook_kill_primary(int where, uint64_t txn, void *arg)
{
	struct failover_hook *h = arg;
	if (where != DXL_TXN_HOOK_LOGGED || !h->armed)
		return;
	h->armed = false;
	struct dxl_zk *zk = zk_open();
	h->old_primary = primary_of(zk, 0);
	kill_node(h->old_primary);
	uint64_t end = dxl_now_ms() + 30000;
	while ((h->new_primary = primary_of(zk, 0)) == h->old_primary && dxl_now_ms() < end)
		usleep(50 * 1000);
	dxl_zk_delete(&zk);
	/* the new primary's gate waits for this (stopped) writer two session
	 * timeouts, then locks the keys of our record in doubt for us */
	usleep(6000 * 1000);
	print_message("  txn 0x%" PRIx64 " at its commit point: primary %u killed, %u promoted\n", txn,
		      h->old_primary, h->new_primary);
}

/*
 * A transaction reaches its commit point; then (hook) shard 0's primary is
 * killed and a backup promoted, whose gate locks the transaction's key for
 * it (its record is in doubt there). Its write-back at the dead primary
 * fails; the coordinator must settle it at the new primary: write back
 * (the gate applied nothing: the record was undecided) and unlock. Before
 * the fix the settle's LOOKUP asked for no value, got DXL_E_TOOBIG and gave
 * up: the key stayed locked by this coordinator for as long as it lived.
 */
static void test_commit_settles_at_new_primary(void **state)
{
	(void)state;
	NEED_ENV();
	struct failover_hook h = {0};
	struct env e;
	env_open(&e, hook_kill_primary, &h);
	insert_keys(&e, 70, 1, 100);
	h.armed = true;
	assert_int_equal(put1(&e, 70, 71, 1), 0);
	assert_true(h.new_primary && h.new_primary != h.old_primary);
	/* the key is free at the new primary and holds the committed value */
	int64_t v = 0;
	assert_int_equal(put1(&e, 70, 72, 5), 0);
	assert_int_equal(get1(&e, 70, &v), 0);
	assert_int_equal(v, 72);
	env_close(&e);
	restart_node(h.old_primary);
	wait_full(60000);
}

/* ---- item 7: any live coordinator resolves ---------------------------------------------- */

/*
 * A coordinator process dies at the commit point of a transaction writing
 * keys 100 and 102. Another coordinator keeps working on other keys only:
 * it never meets the dead one's locks. Resolution used to start only when a
 * transaction met such a lock, so keys 100 and 102 stayed locked (and the
 * dead writer's ring in doubt) until someone touched them. Now every live
 * coordinator sweeps the primaries' lock owners every 2 s and resolves the
 * gone ones: the locks go, the committed values are there.
 */
static void test_any_coordinator_resolves(void **state)
{
	(void)state;
	NEED_ENV();
	struct env e;
	env_open(&e, NULL, NULL);
	insert_keys(&e, 100, 3, 1);
	insert_keys(&e, 110, 1, 1);
	env_close(&e);
	struct tx x = {.wk = {100, 102}, .nw = 2, .op = 'p', .val = 1001, .max_tries = 5};
	pid_t child = spawn_dying(&x, DXL_TXN_HOOK_LOGGED);
	int st = 0;
	assert_int_equal(waitpid(child, &st, 0), child);
	struct dxl_zk *zk = zk_open();
	struct rawc r;
	raw_open(&r, zk, primary_of(zk, 0));
	uint64_t lock;
	uint64_t slot100 = raw_slot(&r, 0, T1, 100, &lock);
	assert_true(lock != 0);
	uint32_t dead = (uint32_t)(lock >> 48);
	env_open(&e, NULL, NULL);
	/* other keys only, for a while */
	uint64_t end = dxl_now_ms() + 9000;
	uint32_t n = 0;
	while (dxl_now_ms() < end) {
		assert_int_equal(put1(&e, 110, (int64_t)n, 10), 0);
		n++;
		raw_slot(&r, 0, T1, 100, &lock);
		if (!lock)
			break;
		usleep(100 * 1000);
	}
	(void)slot100;
	print_message("  after %u transactions on key 110 only: key 100's lock word 0x%" PRIx64
		      " (the dead coordinator %u's)\n",
		      n, lock, dead);
	if (lock)
		fail_msg("the gone coordinator %u's lock on key 100 is still there: nobody resolved it", dead);
	int64_t v100 = 0, v102 = 0;
	assert_int_equal(get1(&e, 100, &v100), 0);
	assert_int_equal(get1(&e, 102, &v102), 0);
	assert_int_equal(v100, 1001);
	assert_int_equal(v102, 1001);
	env_close(&e);
	raw_close(&r);
	dxl_zk_delete(&zk);
}

/* ---- a dead coordinator's insert that never logged -------------------------------------- */

/*
 * A coordinator process inserts key 60 and dies right after its lock phase
 * (the INSERT made the record live and locked by its transaction; nothing
 * logged). A reader meets the lock and resolves the dead coordinator:
 * UNLOCK_COORD released its locks -- and before this fix left the record
 * live: an insert that never committed became visible (and the backups,
 * which apply the log, never had it). Now the record is deleted.
 */
static void test_dead_insert_removed(void **state)
{
	(void)state;
	NEED_ENV();
	struct tx x = {.wk = {60}, .nw = 1, .op = 'i', .val = 606, .max_tries = 1};
	pid_t child = spawn_dying(&x, DXL_TXN_HOOK_VALIDATE);
	int st = 0;
	assert_int_equal(waitpid(child, &st, 0), child);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct env e;
	env_open(&e, NULL, NULL);
	int64_t v = 0;
	int ret = get1(&e, 60, &v);
	print_message("  after the dead coordinator was resolved: get key 60: %s (%" PRId64 ")\n",
		      dxl_errname(ret), v);
	if (ret == 0)
		fail_msg("key 60 = %" PRId64 ": the insert of a transaction that never committed is visible", v);
	assert_int_equal(ret, DXL_E_NOENT);
	env_close(&e);
}

/*
 * Review of issue 12, #1. Key 64 is inserted and committed, never updated.
 * A coordinator process locks it for an update and dies right after its
 * lock phase (nothing logged). A reader meets the lock and resolves the
 * dead coordinator: UNLOCK_COORD deletes the inserts of transactions that
 * never logged -- txn-serial told them by "live, timestamp 0, locked by the
 * dead coordinator", which a committed insert also was (it kept timestamp
 * 0: committing an insert only unlocked it), so the committed key 64 was
 * deleted at the primary while the backups kept it. Now only a record the
 * dead transaction itself inserted at its lock phase is removed (the
 * replica marks those, struct prov), and a committed insert carries its
 * commit timestamp: key 64 stays, with its value, on every member.
 */
static void test_dead_update_keeps_insert(void **state)
{
	(void)state;
	NEED_ENV();
	struct env e;
	env_open(&e, NULL, NULL);
	insert_keys(&e, 64, 1, 6464);
	env_close(&e);
	struct tx x = {.wk = {64}, .nw = 1, .op = 'p', .val = 99, .max_tries = 1};
	pid_t child = spawn_dying(&x, DXL_TXN_HOOK_VALIDATE);
	int st = 0;
	assert_int_equal(waitpid(child, &st, 0), child);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	env_open(&e, NULL, NULL);
	int64_t v = 0;
	int ret = get1(&e, 64, &v);
	print_message("  after the dead coordinator was resolved: get key 64: %s (%" PRId64 ")\n",
		      dxl_errname(ret), v);
	if (ret == DXL_E_NOENT)
		fail_msg("the committed insert of key 64 was deleted by the resolution of a coordinator that only locked it for an update");
	assert_int_equal(ret, 0);
	assert_int_equal(v, 6464);
	env_close(&e);
	/* every member has it (the backups applied the insert from the log),
	 * and the same tombstones -- also key 60's: test_dead_insert_removed's
	 * insert, removed at the primary alone, left no tombstone the backups
	 * lack */
	int rc = DXL(60000, "cluster", "verify", "--dir", g_dir, "--wait", "20");
	if (rc)
		fail_msg("dxl cluster verify: %d\n%s%s", rc, g_out, g_err);
}

/*
 * Merge of recovery2 (which compares tombstones) into txn-merge: key 66 is
 * inserted and deleted (committed: every member has its tombstone), then a
 * coordinator process inserts it again and dies after its lock phase. Its
 * resolution removed the insert at the primary with a delete: a tombstone
 * of a new version there alone (test_txn test_kill_primaries saw 2552 at
 * the backups, 2640 at the primary). Now the undo gives the key back the
 * tombstone the insert replaced: the same version on every member.
 */
static void test_dead_insert_over_tombstone(void **state)
{
	(void)state;
	NEED_ENV();
	struct env e;
	env_open(&e, NULL, NULL);
	insert_keys(&e, 66, 1, 6666);
	struct tx d = {.wk = {66}, .nw = 1, .op = 'd', .max_tries = 50};
	assert_int_equal(tx_run(&e, &d), 0);
	env_close(&e);
	struct tx x = {.wk = {66}, .nw = 1, .op = 'i', .val = 667, .max_tries = 1};
	pid_t child = spawn_dying(&x, DXL_TXN_HOOK_VALIDATE);
	int st = 0;
	assert_int_equal(waitpid(child, &st, 0), child);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	env_open(&e, NULL, NULL);
	int64_t v = 0;
	int ret = get1(&e, 66, &v);
	print_message("  after the dead coordinator was resolved: get key 66: %s (%" PRId64 ")\n",
		      dxl_errname(ret), v);
	assert_int_equal(ret, DXL_E_NOENT);
	env_close(&e);
	int rc = DXL(60000, "cluster", "verify", "--dir", g_dir, "--wait", "20");
	if (rc)
		fail_msg("dxl cluster verify: %d\n%s%s", rc, g_out, g_err);
}

/* ---- item 7: a coordinator whose session expired registers again ------------------------ */

/*
 * A coordinator's ZooKeeper session expires (a long pause, here injected):
 * its coords/<id> and writer slots are gone -- other coordinators may
 * resolve its transactions -- and its writers are dead. Before the fix it
 * kept running with dead writers and had to be restarted by hand (every
 * transaction with a write failed). Now it reopens its session, registers
 * under a new id and goes on.
 */
static void test_session_expiry_registers_again(void **state)
{
	(void)state;
	NEED_ENV();
	struct env e;
	env_open(&e, NULL, NULL);
	insert_keys(&e, 90, 1, 1);
	uint32_t id0 = dxl_coord_id(e.c);
	assert_int_equal(dxl_zk_inject_expiry(e.zk), 0);
	uint64_t end = dxl_now_ms() + 15000;
	while (dxl_zk_state(e.zk) != DXL_ZK_EXPIRED && dxl_now_ms() < end)
		usleep(20 * 1000);
	assert_int_equal(dxl_zk_state(e.zk), DXL_ZK_EXPIRED);
	int ret = put1(&e, 90, 2, 50);
	uint32_t id1 = dxl_coord_id(e.c);
	print_message("  after the expiry: put %s; coordinator %u -> %u\n", dxl_errname(ret), id0, id1);
	assert_int_equal(ret, 0);
	assert_true(id1 != id0);
	int64_t v = 0;
	assert_int_equal(get1(&e, 90, &v), 0);
	assert_int_equal(v, 2);
	struct dxl_zk *zk = zk_open();
	uint32_t ids[1024];
	int n = dxl_coord_znode_list(zk, ids, 1024);
	bool has0 = false, has1 = false;
	for (int i = 0; i < n; i++) {
		has0 = has0 || ids[i] == id0;
		has1 = has1 || ids[i] == id1;
	}
	assert_false(has0);
	assert_true(has1);
	dxl_zk_delete(&zk);
	env_close(&e);
}

/* ---- review #2: no commit from a registration that is over ------------------------------ */

struct zombie_hook {
	bool armed;
	struct dxl_zk *zk;   /* the coordinator's session */
	volatile bool resolved;
	int other_ret;       /* the other coordinator's put of 555 */
	char other_msg[512];
};

static void *zombie_other(void *arg)
{
	struct zombie_hook *h = arg;
	struct env e2;
	env_open(&e2, NULL, NULL);
	struct tx x = {.wk = {70}, .nw = 1, .op = 'p', .val = 555, .max_tries = 200};
	h->other_ret = tx_run(&e2, &x);
	memcpy(h->other_msg, x.msg, sizeof(h->other_msg));
	env_close(&e2);
	return NULL;
}

static void hook_zombie(int where, uint64_t txn, void *arg)
{
	struct zombie_hook *h = arg;
	if (where != DXL_TXN_HOOK_VALIDATE || !h->armed)
		return;
	h->armed = false;
	/* txn holds key 70 under its coordinator's first registration: the
	 * session expires (a long pause), another coordinator resolves the
	 * old id (its lock goes) and commits 555 over key 70 */
	assert_int_equal(dxl_zk_inject_expiry(h->zk), 0);
	uint64_t end = dxl_now_ms() + 15000;
	while (dxl_zk_state(h->zk) != DXL_ZK_EXPIRED && dxl_now_ms() < end)
		usleep(20 * 1000);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, zombie_other, h), 0);
	pthread_join(th, NULL);
	print_message("  txn 0x%" PRIx64 " paused holding key 70; session expired; another coordinator's put of 555: %s %s\n",
		      txn, dxl_errname(h->other_ret), h->other_msg);
	h->resolved = true;
}

/* A: one attempt (dxl_txn_run would retry under the new registration) */
static void co_zombie_a(void *arg)
{
	struct tx *x = arg;
	struct dxl_txn *t = NULL;
	x->ret = dxl_txn_begin(x->e->w, &t);
	if (!x->ret)
		x->ret = tx_fn(t, x);
	if (!x->ret)
		x->ret = dxl_txn_commit(t, &x->info);
	else if (t)
		dxl_txn_abort(t);
	snprintf(x->msg, sizeof(x->msg), "%s", x->ret ? dxl_errmsg() : "");
}

struct zombie_b {
	struct zombie_hook *h;
	struct tx x;
};

/* another coroutine of the same worker: its next transaction registers the
 * coordinator again (new id, new writers) while txn is still paused */
static void co_zombie_b(void *arg)
{
	struct zombie_b *b = arg;
	while (!b->h->resolved)
		dxl_co_sleep_ms(1);
	co_tx(&b->x);
}

/*
 * Review of issue 12, #2 (a zombie commit). Transaction A reads keys 70
 * and 72 and writes 777 to key 70; after its lock phase its coordinator's ZooKeeper session
 * expires, another coordinator resolves the old id (releases A's lock) and
 * commits 555 over key 70; while A validates (its READ of key 72 yields)
 * another coroutine of A's worker begins a
 * transaction, which registers the coordinator again under a new id (new
 * writers). Before the fix A went on: it opened a writer of the new
 * registration, logged under its old id, committed, and its one-sided
 * write-back (the new session's lease holds) put 777 over 555 -- two
 * commits from the same read (a lost update). Now a transaction begun under
 * a registration that is over neither logs nor writes back: A aborts (a
 * conflict: a retry begins under the new registration), its locks are
 * resolution's, key 70 = 555.
 */
static void test_no_commit_after_reregistration(void **state)
{
	(void)state;
	NEED_ENV();
	struct env e;
	struct zombie_hook h = {0};
	env_open(&e, hook_zombie, &h);
	h.zk = e.zk;
	insert_keys(&e, 70, 3, 1);
	uint32_t id0 = dxl_coord_id(e.c);
	/* A also reads key 72: its validation READ yields to B */
	struct tx a = {.e = &e, .table = T1, .rk = {70, 72}, .nr = 2, .wk = {70}, .nw = 1, .op = 'p',
		       .val = 777, .max_tries = 1};
	struct zombie_b b = {.h = &h, .x = {.e = &e, .table = T1, .rk = {71}, .nr = 1, .max_tries = 50}};
	h.armed = true;
	assert_int_equal(dxl_coord_worker_spawn(e.w, co_zombie_a, &a), 0);
	assert_int_equal(dxl_coord_worker_spawn(e.w, co_zombie_b, &b), 0);
	assert_int_equal(dxl_coord_worker_run(e.w), 0);
	uint32_t id1 = dxl_coord_id(e.c);
	print_message("  A (txn 0x%" PRIx64 "): %s %s; coordinator %u -> %u; B: %s\n", a.info.id,
		      dxl_errname(a.ret), a.msg, id0, id1, dxl_errname(b.x.ret));
	assert_false(h.armed);
	assert_int_equal(h.other_ret, 0);
	assert_int_equal(b.x.ret, 0);
	assert_true(id1 != id0);
	int64_t v = 0;
	assert_int_equal(get1(&e, 70, &v), 0);
	print_message("  key 70 = %" PRId64 "\n", v);
	if (a.ret == 0)
		fail_msg("txn 0x%" PRIx64 ", begun under coordinator %u's expired registration, committed after its lock was resolved away (it read %" PRId64 "; key 70 = %" PRId64 ", the other coordinator's 555 overwritten)",
			 a.info.id, id0, a.got[0], v);
	assert_false(a.info.maybe);
	assert_int_equal(v, 555);
	env_close(&e);
}

/* ---- item 7: a record in doubt larger than an RPC reply ------------------------------- */

/*
 * A coordinator process commits a transaction writing two 3000-byte values
 * (table 2) and dies at its commit point: its write set, about 6 KB, is in
 * doubt. IN_DOUBT used to refuse records over one reply (about 4000 bytes,
 * DXL_E_TOOBIG): the ring could never be resolved, the keys stayed locked
 * for good. Now the record comes in parts; the resolution commits it.
 */
static void test_large_record_in_doubt(void **state)
{
	(void)state;
	NEED_ENV();
	struct env e;
	env_open(&e, NULL, NULL);
	for (uint64_t k = 80; k <= 82; k += 2) {
		struct tx x = {.table = T2, .wk = {k}, .nw = 1, .op = 'i', .val = 1, .vlen = 3000};
		assert_int_equal(tx_run(&e, &x), 0);
	}
	env_close(&e);
	struct tx x = {.table = T2, .wk = {80, 82}, .nw = 2, .op = 'p', .val = 888, .vlen = 3000,
		       .max_tries = 5};
	pid_t child = spawn_dying(&x, DXL_TXN_HOOK_LOGGED);
	int st = 0;
	assert_int_equal(waitpid(child, &st, 0), child);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	env_open(&e, NULL, NULL);
	struct tx r = {.table = T2, .rk = {80, 82}, .nr = 2, .max_tries = 50};
	int ret = tx_run(&e, &r);
	print_message("  after the resolution: %s, keys 80, 82 = %" PRId64 ", %" PRId64 " (%u, %u bytes)\n",
		      dxl_errname(ret), r.got[0], r.got[1], r.gotlen[0], r.gotlen[1]);
	if (ret)
		fail_msg("the keys of the large record in doubt stay locked: %s", r.msg);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(r.got[i], 888);
		assert_int_equal(r.gotlen[i], 3000);
		assert_true(r.gotok[i]);
	}
	env_close(&e);
}

/* ---- item 7: an insert in doubt across a failover --------------------------------------- */

static int g_hook_pipe = -1;

static void hook_block(int where, uint64_t txn, void *arg)
{
	int at = *(int *)arg;
	if (where != at)
		return;
	char c = 1;
	if (write(g_hook_pipe, &c, 1) != 1)
		_exit(4);
	fprintf(stderr, "child: txn 0x%" PRIx64 " blocks at hook %d\n", txn, where);
	for (;;)
		pause(); /* until killed */
}

/* fork a process whose coordinator runs tx and blocks at hook `at`; returns
 * once it got there (the parent must hold no ZooKeeper session: fork) */
static pid_t spawn_blocked(struct tx *x, int at)
{
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	fflush(NULL);
	pid_t p = fork();
	assert_true(p >= 0);
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(fds[0]);
		g_hook_pipe = fds[1];
		static int where;
		where = at;
		struct env e;
		env_open(&e, hook_block, &where);
		int ret = tx_run(&e, x);
		fprintf(stderr, "child: the transaction returned %s (%s)\n", dxl_errname(ret), x->msg);
		_exit(3);
	}
	close(fds[1]);
	char c;
	if (read(fds[0], &c, 1) != 1)
		fail_msg("the blocked coordinator process ended before its hook");
	close(fds[0]);
	return p;
}

static void kill_node(uint32_t node)
{
	char n[16];
	snprintf(n, sizeof(n), "%u", node);
	if (DXL(30000, "cluster", "kill", n, "--dir", g_dir))
		fail_msg("cluster kill %s: %s%s", n, g_out, g_err);
}

static void restart_node(uint32_t node)
{
	char n[16];
	snprintf(n, sizeof(n), "%u", node);
	if (DXL(60000, "cluster", "restart", n, "--dir", g_dir))
		fail_msg("cluster restart %s: %s%s", n, g_out, g_err);
}

/*
 * A coordinator inserts key 50 and stops at its commit point (its record
 * acknowledged on every member, not decided: in doubt). Shard 0's primary
 * is killed; the promoted backup's gate waits for the stopped writer, gives
 * up, and recovers the locks of the records in doubt. Before the fix an
 * insert in doubt got nothing there (the key did not exist at the new
 * primary), so another coordinator's insert of key 50 succeeded -- two
 * committed inserts of one key, the replicas then apply both. Now the gate
 * makes the record (locked by the transaction in doubt): the other insert
 * conflicts; once the stopped coordinator is killed and resolved, key 50
 * holds the transaction's value and the other insert finds it (EXIST).
 */
static void test_insert_in_doubt_across_failover(void **state)
{
	(void)state;
	NEED_ENV();
	struct tx x = {.wk = {50}, .nw = 1, .op = 'i', .val = 555, .max_tries = 1};
	pid_t child = spawn_blocked(&x, DXL_TXN_HOOK_LOGGED);
	struct dxl_zk *zk = zk_open();
	uint32_t p0 = primary_of(zk, 0);
	kill_node(p0);
	uint64_t end = dxl_now_ms() + 30000;
	while (primary_of(zk, 0) == p0 && dxl_now_ms() < end)
		usleep(50 * 1000);
	uint32_t p1 = primary_of(zk, 0);
	print_message("  key 50's insert is in doubt; primary %u killed, %u promoted\n", p0, p1);
	assert_true(p1 != p0);
	dxl_zk_delete(&zk);
	/* another coordinator inserts key 50 at the new primary */
	struct env e;
	env_open(&e, NULL, NULL);
	/* the new primary's gate waits for the stopped coordinator's writer
	 * (two session timeouts), then serves */
	int64_t v = 0;
	assert_int_equal(get1(&e, 10, &v), 0);
	struct tx y = {.wk = {50}, .nw = 1, .op = 'i', .val = 1, .max_tries = 10};
	int ret = tx_run(&e, &y);
	print_message("  the other insert while the first is in doubt: %s (%s)\n", dxl_errname(ret),
		      y.msg);
	if (ret == 0)
		fail_msg("a second insert of key 50 committed while the first was in doubt");
	assert_true(ret == DXL_E_CONFLICT || ret == DXL_E_EXIST);
	env_close(&e);
	/* the first coordinator dies; a reader resolves it */
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	env_open(&e, NULL, NULL);
	assert_int_equal(get1(&e, 50, &v), 0);
	print_message("  resolved: key 50 = %" PRId64 "\n", v);
	assert_int_equal(v, 555);
	y = (struct tx){.wk = {50}, .nw = 1, .op = 'i', .val = 1, .max_tries = 10};
	assert_int_equal(tx_run(&e, &y), DXL_E_EXIST);
	env_close(&e);
	restart_node(p0);
	wait_full(60000);
}

/* ---- issue 20 review 4: an undecided record keeps its locks ----------------------------- */

struct stop_hook {
	bool armed;
	uint32_t node;
	pid_t pid;
};

static void hook_stop_node(int where, uint64_t txn, void *arg)
{
	struct stop_hook *h = arg;
	if (where != DXL_TXN_HOOK_VALIDATE || !h->armed)
		return;
	h->armed = false;
	/* at once (its writer must post the record before it notices) */
	kill(h->pid, SIGSTOP);
	print_message("  txn 0x%" PRIx64 " locked its key; node %u (pid %d) stopped\n", txn, h->node,
		      (int)h->pid);
}

/*
 * A transaction writes key 42 (shard 0); after its lock phase a backup of
 * shard 0 stops. Its record cannot be acknowledged (maybe in the log) and
 * neither can its abort marker within log_unavail_ms (300 ms here, the
 * fabric's timeout 100 ms: both fail before the backup's session ends): the
 * record is undecided, the worker keeps marking it. Its lock must stay
 * until the marker is acknowledged: if the coordinator died before, a
 * resolution could judge the record committed (in every participant's
 * log, no marker) and apply it over whoever wrote the key meanwhile.
 * release_all used to release every lock at once. Once the backup
 * continues, the marker lands, the lock goes, the key keeps its value.
 */
static bool abort_keeps_locks_attempt(int attempt);

/* the state letter of /proc/<pid>/stat ('T' stopped), '?' if unreadable */
static char proc_state(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return '?';
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *p = strrchr(buf, ')'); /* after the command name */
	return p && p[1] == ' ' && p[2] ? p[2] : '?';
}

static void test_abort_keeps_locks_until_decided(void **state)
{
	(void)state;
	NEED_ENV();
	/* every shard whole again after the earlier tests: the backup stopped
	 * below must be a member the record needs. A configuration change
	 * during the attempt (a node of an earlier test re-added) may still
	 * drop it from the shard -- then the record did not need it and the
	 * attempt says nothing: it is made again (at most 3 times) */
	for (int attempt = 1;; attempt++) {
		wait_full(60000);
		if (abort_keeps_locks_attempt(attempt))
			break;
		if (attempt == 3)
			fail_msg("3 attempts, each with the configuration changing under it");
	}
}

static bool abort_keeps_locks_attempt(int attempt)
{
	struct env e;
	struct dxl_zk *zk = zk_open();
	struct dxl_cluster_config c;
	assert_int_equal(dxl_cluster_config_read(zk, &c, NULL), 0);
	const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, 0);
	assert_non_null(sh);
	assert_true(sh->nbackups >= 1);
	struct stop_hook h = {.node = sh->backups[0]};
	h.pid = cluster_pid(h.node);
	assert_true(h.pid > 0);
	uint32_t p0 = sh->primary;
	uint64_t epoch0 = c.epoch;
	dxl_cluster_config_clear(&c);
	/* the record and its marker fail well before the stopped backup's
	 * session expires (2 s: then the marker would land at once) */
	g_unavail_ms = 300;
	g_fabric_ms = 100;
	env_open(&e, hook_stop_node, &h);
	g_unavail_ms = 30000;
	g_fabric_ms = 0;
	/* its writer of shard 0 open (the record must be sent, not refused) */
	insert_keys(&e, 42, 1, 1);
	assert_int_equal(put1(&e, 42, 1, 50), 0);
	h.armed = true;
	struct tx x = {.wk = {42}, .nw = 1, .op = 'p', .val = 2, .max_tries = 1};
	int ret = tx_run(&e, &x);
	struct rawc r;
	raw_open(&r, zk, p0);
	uint64_t lock = 0;
	raw_slot(&r, 0, T1, 42, &lock);
	print_message("  the transaction: %s (maybe %d); key 42's lock word 0x%" PRIx64 " (txn 0x%" PRIx64 ")\n",
		      dxl_errname(ret), x.info.maybe, lock, x.info.id);
	char pstate = proc_state(h.pid);
	kill(h.pid, SIGCONT);
	if (ret == 0 && pstate != 'T')
		fail_msg("the premise failed: node %u (pid %d, from cluster.json) was not stopped "
			 "when txn 0x%" PRIx64 " committed (process state '%c')",
			 h.node, (int)h.pid, x.info.id, pstate);
	if (ret == 0) {
		/* committed without the stopped backup: only right if the
		 * configuration changed meanwhile and no longer needed it */
		uint64_t epoch1 = 0;
		if (dxl_cluster_config_read(zk, &c, NULL) == 0) {
			epoch1 = c.epoch;
			dxl_cluster_config_clear(&c);
		}
		print_message("  attempt %d: committed; configuration epoch %" PRIu64 " -> %" PRIu64 "\n",
			      attempt, epoch0, epoch1);
		if (epoch1 == epoch0)
			fail_msg("txn 0x%" PRIx64 " committed while backup %u of shard 0 was stopped "
				 "and the configuration (epoch %" PRIu64 ") still named it",
				 x.info.id, h.node, epoch0);
		env_close(&e);
		raw_close(&r);
		dxl_zk_delete(&zk);
		return false;
	}
	assert_true(x.info.maybe);
	if (lock != x.info.id)
		fail_msg("the record of txn 0x%" PRIx64 " is undecided (no abort marker yet) but its lock on key 42 was released (word 0x%" PRIx64 ")",
			 x.info.id, lock);
	/* the worker marks it once the backup is back (or gone): the lock is
	 * released then, the write never happened */
	int64_t v = 0;
	ret = get1(&e, 42, &v);
	raw_slot(&r, 0, T1, 42, &lock);
	print_message("  later: get key 42: %s (%" PRId64 "), lock word 0x%" PRIx64 "\n", dxl_errname(ret), v,
		      lock);
	assert_int_equal(ret, 0);
	assert_int_equal(v, 1);
	assert_int_equal(lock, 0);
	env_close(&e);
	raw_close(&r);
	dxl_zk_delete(&zk);
	wait_full(60000);
	return true;
}

/*
 * A primary paused (SIGSTOP) while a transaction holds a lock there, past
 * its session timeout: another node becomes the primary, the transaction
 * aborts, its release is settled at the new primary. The old primary
 * resumes as a backup -- with the lock word still set in its DRAM (it was
 * never restarted). Before, nothing cleared it: a one-sided reader of that
 * backup's store (state transfer, `dxl cluster verify`) took the slot for
 * a record being written and gave up ("stayed locked or changing"; found
 * by test_nemesis' store comparison), and promoted again the node would
 * have kept the key locked by a transaction that was over. Now a node that
 * stops being the primary, or is promoted, clears its stale lock words.
 */
static void test_demoted_primary_keeps_no_locks(void **state)
{
	(void)state;
	NEED_ENV();
	wait_full(60000);
	struct dxl_zk *zk = zk_open();
	uint32_t p0 = primary_of(zk, 0);
	struct stop_hook h = {.node = p0};
	h.pid = cluster_pid(p0);
	assert_true(h.pid > 0);
	struct env e;
	env_open(&e, hook_stop_node, &h);
	insert_keys(&e, 44, 2, 1);
	h.armed = true;
	/* write 44 (shard 0, its primary stopped after the lock phase) */
	struct tx x = {.rk = {45}, .nr = 1, .wk = {44}, .nw = 1, .op = 'p', .val = 2, .max_tries = 1};
	int ret = tx_run(&e, &x);
	uint64_t end = dxl_now_ms() + 30000;
	while (primary_of(zk, 0) == p0 && dxl_now_ms() < end)
		usleep(50 * 1000);
	uint32_t p1 = primary_of(zk, 0);
	kill(h.pid, SIGCONT);
	print_message("  the transaction: %s (%s); primary of shard 0: %u -> %u, the old one resumed\n",
		      dxl_errname(ret), x.msg, p0, p1);
	assert_true(p1 != p0);
	env_close(&e);
	wait_full(60000);
	int rc = DXL(60000, "cluster", "verify", "--dir", g_dir, "--shard", "0", "--wait", "10");
	print_message("  dxl cluster verify --shard 0: %d\n%s", rc, g_out);
	if (rc)
		fail_msg("the old primary %u (a backup now) cannot be read: %s%s", p0, g_out, g_err);
	/* the key is writable */
	env_open(&e, NULL, NULL);
	assert_int_equal(put1(&e, 44, 3, 50), 0);
	env_close(&e);
	dxl_zk_delete(&zk);
}

/* ---- setup ---------------------------------------------------------------------------- */

static int group_setup(void **state)
{
	(void)state;
	g_zkc = getenv("DXL_TEST_ZK");
	assert_int_equal(dxlt_prog_path("dxl", g_dxl, sizeof(g_dxl)), 0);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-txnfaults-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	g_out = malloc(OUT_CAP);
	g_err = malloc(OUT_CAP);
	if (!g_zkc)
		return 0;
	snprintf(g_name, sizeof(g_name), "txf-%d", (int)getpid());
	snprintf(g_dir, sizeof(g_dir), "%s/cluster", g_tmp);
	int rc = DXL(60000, "cluster", "up", "--dir", g_dir, "--zk", g_zkc, "--cluster", g_name,
		     "--replicas", "3", "--shards", "2", "--ring-size", "4M", "--writer-slots", "16",
		     "--session-timeout", "2000", "-o", "engine.tables=1:8:4096,2:3000:256", "-o",
		     "engine.lock_mode=nic", "-o", "replica.test_nic_pause_ms=2000");
	if (rc)
		print_message("cluster up: %s%s\n", g_out, g_err);
	g_up = rc == 0;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (g_up)
		DXL(60000, "cluster", "down", "--dir", g_dir);
	dxlt_cluster_reap(g_dir);
	dxlt_kill_all();
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
	alarm(600);
	if (getenv("DXL_TEST_FILTER"))
		cmocka_set_test_filter(getenv("DXL_TEST_FILTER"));
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_abort_releases_lock_across_epochs),
		cmocka_unit_test(test_resolution_never_skips),
		cmocka_unit_test(test_dead_insert_removed),
		cmocka_unit_test(test_dead_update_keeps_insert),
		cmocka_unit_test(test_dead_insert_over_tombstone),
		cmocka_unit_test(test_any_coordinator_resolves),
		cmocka_unit_test(test_large_record_in_doubt),
		cmocka_unit_test(test_session_expiry_registers_again),
		cmocka_unit_test(test_no_commit_after_reregistration),
		cmocka_unit_test(test_commit_settles_at_new_primary),
		cmocka_unit_test(test_reads_are_fenced),
		cmocka_unit_test(test_insert_in_doubt_across_failover),
		cmocka_unit_test(test_abort_keeps_locks_until_decided),
		cmocka_unit_test(test_settle_survives_transport_error),
		cmocka_unit_test(test_demoted_primary_keeps_no_locks),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
