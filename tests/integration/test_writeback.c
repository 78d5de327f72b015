/* test_writeback.c -- the coordinator's write-back of a committed transaction (commit_one,
 * commit_phase) on a real one-replica cluster (tcp provider, NIC-owned lock words, hybrid
 * mode: one-sided write-backs):
 *
 *  - test_unlock_result_checked: the lock word is taken from the transaction between its
 *    commit point and its write-back (a broken invariant, played by the test through the
 *    fabric): the unlock CAS finds it not the transaction's and the coordinator reports
 *    it (error log, dxl_coord_stats.wb_lock_lost), where it used to report nothing;
 *  - test_writeback_handed_on: the primary stops answering at the commit point for longer
 *    than the write-back's retries (SIGSTOP and a configuration epoch it has not
 *    registered for); it used to give up and leave the lock word the transaction's
 *    forever (no resolution runs while the coordinator lives): the next transaction on
 *    the key never committed. Now the write-back is handed on to the worker and finished
 *    at its next transaction;
 *  - test_durable_before_unlock: one-sided write-backs of 16 keys, then the primary's
 *    retention passes every record (their locks are free), then a power failure that
 *    loses every un-flushed line (DXL_FABRIC_PF=USR2:all): every value must be there
 *    after the restart -- which holds only if commit_one's chain makes the record
 *    durable (its flush READ) before its unlock CAS frees the lock word. (With the old
 *    chain, WRITEs then the unlock CAS, the next transaction's READ on the same QP
 *    flushes the previous write-back: the last one is lost, every time.)
 *
 * Needs DXL_TEST_ZK=host:port (scripts/test.sh sets it); skips otherwise. DXL_TEST_KEEP=1
 * keeps the temporary directory (daemon logs). */
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
#include "common/endian.h"
#include "dxl/co.h"
#include "dxl/fabric.h"
#include "dxl/membership.h"
#include "dxl/replica.h"
#include "dxl/txn.h"
#include "tests/lib/cli_run.h"
#include "tests/lib/proc.h"

#define TBL 1
#define NKEYS 16
#define OUT_CAP 65536

static const char *g_zkc;
static char g_dxl[PATH_MAX];
static char g_tmp[128];
static char g_dir[256];
static char g_name[64];
static char *g_out, *g_err;
static bool g_up;

static int dxl(int timeout_ms, const char *const *args)
{
	const char *argv[64];
	int a = 0;
	argv[a++] = g_dxl;
	for (int i = 0; args[i] && a < 63; i++)
		argv[a++] = args[i];
	argv[a] = NULL;
	return dxlt_run(argv, NULL, g_tmp, g_out, g_err, OUT_CAP, timeout_ms);
}
#define DXL(t, ...) dxl((t), (const char *const[]){__VA_ARGS__, NULL})

#define NEED_ENV()                                                                 \
	do {                                                                       \
		if (!g_zkc) {                                                      \
			print_message("SKIPPED: no ZooKeeper (DXL_TEST_ZK unset)\n"); \
			skip();                                                    \
		}                                                                  \
		if (!g_up)                                                         \
			fail_msg("the cluster did not come up");                   \
	} while (0)

/* ---- a coordinator ---------------------------------------------------------------- */

struct env {
	struct dxl_zk *zk;
	struct dxl_coord *c;
	struct dxl_coord_worker *w;
};

static void env_open(struct env *e, void (*hook)(int, uint64_t, void *), void *arg)
{
	memset(e, 0, sizeof(*e));
	assert_int_equal(dxlt_zk_open(g_zkc, g_name, &e->zk), 0);
	struct dxl_coord_cfg cfg;
	dxl_coord_cfg_init(&cfg);
	cfg.mode = DXL_TXN_HYBRID;
	cfg.test_hook = hook;
	cfg.test_hook_arg = arg;
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

struct op1 {
	struct env *e;
	int op; /* 'g' get, 'p' put, 'i' insert */
	uint64_t key;
	int64_t val;     /* put/insert: the value; get: what was read */
	uint32_t tries;  /* dxl_txn_run's max_tries (0 = once, no retry) */
	int ret;
};

static int op1_fn(struct dxl_txn *t, void *arg)
{
	struct op1 *o = arg;
	uint8_t b[8];
	uint32_t len = 0;
	switch (o->op) {
	case 'g': {
		int ret = dxl_txn_get(t, TBL, o->key, b, 8, &len);
		if (!ret)
			o->val = (int64_t)dxl_get_le64(b);
		return ret;
	}
	case 'p':
		dxl_put_le64(b, (uint64_t)o->val);
		return dxl_txn_put(t, TBL, o->key, b, 8);
	default:
		dxl_put_le64(b, (uint64_t)o->val);
		return dxl_txn_insert(t, TBL, o->key, b, 8);
	}
}

static void co_op1(void *arg)
{
	struct op1 *o = arg;
	struct dxl_txn_info info;
	if (o->tries) {
		o->ret = dxl_txn_run(o->e->w, op1_fn, o, o->tries, &info);
		return;
	}
	struct dxl_txn *t;
	if ((o->ret = dxl_txn_begin(o->e->w, &t)))
		return;
	if ((o->ret = op1_fn(t, o)))
		dxl_txn_abort(t);
	else
		o->ret = dxl_txn_commit(t, NULL);
}

static int run_op(struct env *e, int op, uint64_t key, int64_t *val, uint32_t tries)
{
	struct op1 o = {.e = e, .op = op, .key = key, .val = val ? *val : 0, .tries = tries};
	assert_int_equal(dxl_coord_worker_spawn(e->w, co_op1, &o), 0);
	assert_int_equal(dxl_coord_worker_run(e->w), 0);
	if (val)
		*val = o.val;
	if (o.ret)
		print_message("  %c key %" PRIu64 ": %s: %s\n", op, key, dxl_errname(o.ret),
			      dxl_errmsg());
	return o.ret;
}

/* ---- the primary's lock words, through a fabric of the test's own ---------------- */

struct lockview {
	struct dxl_fabric *f;
	struct dxl_ctx *c;
	struct dxl_qp *qp;
	uint8_t *buf;
	struct dxl_mr *mr;
	struct dxl_table_desc d;
};

static void lv_open(struct lockview *lv, struct dxl_zk *zk)
{
	memset(lv, 0, sizeof(*lv));
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	assert_non_null(d);
	/* the primary's descriptor once it serves its tables */
	for (uint64_t end = dxl_now_ms() + 20000; lv->d.id != TBL && dxl_now_ms() < end;) {
		const struct dxl_shard_desc *sd = dxl_replica_desc_get(zk, 1, d) == 0
							  ? dxl_replica_desc_shard(d, 0)
							  : NULL;
		for (uint32_t i = 0; sd && i < sd->ntables; i++)
			if (sd->tables[i].t.id == TBL)
				lv->d = sd->tables[i].t;
		if (lv->d.id != TBL)
			usleep(50000);
	}
	assert_int_equal(lv->d.id, TBL);
	struct dxl_fabric_cfg fc;
	dxl_fabric_cfg_init(&fc);
	fc.node_id = 4000;
	assert_int_equal(dxl_fabric_new(&fc, &lv->f), 0);
	assert_int_equal(dxl_ctx_new(lv->f, 0, &lv->c), 0);
	assert_int_equal(dxl_qp_connect(lv->c, d->addr, d->ctx, &lv->qp), 0);
	free(d);
	size_t len = DXL_ALIGN_UP(lv->d.locks.len + 64, 4096ull);
	lv->buf = aligned_alloc(4096, len);
	assert_non_null(lv->buf);
	assert_int_equal(dxl_mr_reg(lv->f, lv->buf, len, DXL_MR_LOCAL_WRITE, &lv->mr), 0);
}

static void lv_close(struct lockview *lv)
{
	dxl_qp_delete(&lv->qp);
	dxl_ctx_delete(&lv->c);
	dxl_mr_dereg(&lv->mr);
	dxl_fabric_delete(&lv->f);
	free(lv->buf);
}

static void lv_post(struct lockview *lv, struct dxl_wr *wr)
{
	wr->flags = DXL_WR_SIGNALED;
	wr->lkey = dxl_mr_lkey(lv->mr);
	wr->rkey = lv->d.locks.rkey;
	assert_int_equal(dxl_qp_post(lv->qp, wr, NULL), 0);
	struct dxl_wc wc;
	uint64_t end = dxl_now_ms() + 5000;
	int n = 0;
	while ((n = dxl_ctx_poll(lv->c, &wc, 1)) == 0 && dxl_now_ms() < end)
		dxl_ctx_wait(lv->c, 10);
	assert_int_equal(n, 1);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
}

/* the slot whose lock word is `word` (READ of every lock word), or -1 */
static int64_t lv_find(struct lockview *lv, uint64_t word)
{
	struct dxl_wr wr = {.op = DXL_WR_READ, .local = lv->buf, .len = (uint32_t)lv->d.locks.len,
			    .remote_addr = lv->d.locks.addr};
	lv_post(lv, &wr);
	for (uint64_t i = 0; i < lv->d.capacity; i++)
		if (dxl_get_le64(lv->buf + 8 * i) == word)
			return (int64_t)i;
	return -1;
}

/* CAS slot's lock word cmp -> swp; returns the old word */
static uint64_t lv_cas(struct lockview *lv, uint64_t slot, uint64_t cmp, uint64_t swp)
{
	uint8_t *res = lv->buf + DXL_ALIGN_UP(lv->d.locks.len, 64ull);
	struct dxl_wr wr = {.op = DXL_WR_CAS, .local = res, .len = 8,
			    .remote_addr = lv->d.locks.addr + 8 * slot, .compare_add = cmp,
			    .swap = swp};
	lv_post(lv, &wr);
	return dxl_get_le64(res);
}

/* ---- test_unlock_result_checked ----------------------------------------------------- */

#define INTRUDER DXL_LOCK_OWNER(4000, 1)

struct steal {
	struct lockview *lv;
	bool armed;
	int64_t slot;
	uint64_t txn;
};

/* at the commit point of the armed transaction: its lock word becomes another's */
static void steal_hook(int where, uint64_t txn, void *arg)
{
	struct steal *s = arg;
	if (where != DXL_TXN_HOOK_LOGGED || !s->armed)
		return;
	s->armed = false;
	s->txn = txn;
	s->slot = lv_find(s->lv, txn);
	if (s->slot >= 0)
		(void)lv_cas(s->lv, (uint64_t)s->slot, txn, INTRUDER);
}

static void test_unlock_result_checked(void **state)
{
	(void)state;
	NEED_ENV();
	struct lockview lv;
	struct steal st = {.lv = &lv};
	struct env e;
	env_open(&e, steal_hook, &st);
	int64_t v = 100;
	assert_int_equal(run_op(&e, 'i', 900, &v, 50), 0);
	lv_open(&lv, e.zk);
	st.armed = true;
	v = 200;
	assert_int_equal(run_op(&e, 'p', 900, &v, 0), 0); /* committed: the log has it */
	struct dxl_coord_stats cs;
	dxl_coord_stats(e.c, &cs);
	uint64_t w = st.slot >= 0 ? lv_cas(&lv, (uint64_t)st.slot, INTRUDER, 0) : 0;
	print_message("  the lock word of key 900 (slot %" PRId64 ") taken from 0x%" PRIx64
		      " at its commit point; after the write-back it was 0x%" PRIx64
		      " (the intruder's), wb_lock_lost = %" PRIu64 "\n",
		      st.slot, st.txn, w, cs.wb_lock_lost);
	assert_true(st.slot >= 0);
	assert_int_equal(w, INTRUDER); /* the unlock CAS did not free another's lock */
	assert_int_equal(cs.wb_lock_lost, 1);
	lv_close(&lv);
	env_close(&e);
}

/* ---- test_writeback_handed_on --------------------------------------------------------- */

struct stall {
	bool armed;
	uint64_t epoch; /* the configuration epoch the hook raised */
	int rc;
};

/* raise the configuration epoch, the primary unchanged (it has to register again) */
static uint64_t bump_epoch(struct dxl_zk *zk)
{
	struct dxl_cluster_config c;
	int32_t ver = 0;
	assert_int_equal(dxl_cluster_config_read(zk, &c, &ver), 0);
	c.epoch++;
	assert_int_equal(dxl_cluster_config_cas(zk, &c, ver, NULL), 0);
	uint64_t ep = c.epoch;
	dxl_cluster_config_clear(&c);
	return ep;
}

static struct dxl_zk *g_hook_zk;

/* at the commit point of the armed transaction: the primary stops (SIGSTOP) and
 * the configuration moves to an epoch it has not registered for, so every
 * write-back attempt fails at once for as long as it is stopped */
static void stall_hook(int where, uint64_t txn, void *arg)
{
	(void)txn;
	struct stall *s = arg;
	if (where != DXL_TXN_HOOK_LOGGED || !s->armed)
		return;
	s->armed = false;
	s->rc = DXL(20000, "cluster", "kill", "1", "--signal", "STOP", "--dir", g_dir);
	s->epoch = bump_epoch(g_hook_zk);
}

static void test_writeback_handed_on(void **state)
{
	(void)state;
	NEED_ENV();
	struct stall st = {0};
	struct env e;
	env_open(&e, stall_hook, &st);
	g_hook_zk = e.zk;
	int64_t v = 7;
	assert_int_equal(run_op(&e, 'i', 901, &v, 50), 0);
	st.armed = true;
	v = 8;
	uint64_t t0 = dxl_now_ms();
	int rc = run_op(&e, 'p', 901, &v, 0); /* committed at the hook */
	uint64_t took = dxl_now_ms() - t0;
	uint32_t pending = dxl_coord_worker_writebacks_pending(e.w);
	int rc_cont = DXL(20000, "cluster", "kill", "1", "--signal", "CONT", "--dir", g_dir);
	print_message("  primary stopped at the commit point (%d), epoch %" PRIu64
		      ": the commit returned %s after %" PRIu64 " ms, %u write-back(s) handed on; "
		      "resumed (%d)\n",
		      st.rc, st.epoch, rc ? dxl_errname(rc) : "ok", took, pending, rc_cont);
	assert_int_equal(st.rc, 0);
	assert_int_equal(rc_cont, 0);
	assert_int_equal(rc, 0);
	/* wait until the primary registered for the new epoch */
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	assert_non_null(d);
	uint64_t end = dxl_now_ms() + 30000;
	while (dxl_now_ms() < end &&
	       (dxl_replica_desc_get(e.zk, 1, d) || d->cfg_epoch < st.epoch))
		usleep(50000);
	assert_true(d->cfg_epoch >= st.epoch);
	free(d);
	/* the next transaction on the key: the write-back is finished first
	 * (at its begin), so the key is free and holds the committed 8 */
	t0 = dxl_now_ms();
	int64_t got = 0;
	rc = run_op(&e, 'g', 901, &got, 30);
	print_message("  then a read of key 901: %s, value %" PRId64 " (committed: 8), after %" PRIu64
		      " ms; write-backs pending %u\n",
		      rc ? dxl_errname(rc) : "ok", got, dxl_now_ms() - t0,
		      dxl_coord_worker_writebacks_pending(e.w));
	assert_int_equal(rc, 0);
	assert_int_equal(got, 8);
	v = 9;
	assert_int_equal(run_op(&e, 'p', 901, &v, 30), 0);
	assert_int_equal(dxl_coord_worker_writebacks_pending(e.w), 0);
	env_close(&e);
}

/* ---- test_durable_before_unlock ----------------------------------------------------- */

static void test_durable_before_unlock(void **state)
{
	(void)state;
	NEED_ENV();
	struct env e;
	env_open(&e, NULL, NULL);
	for (uint64_t k = 0; k < NKEYS; k++) {
		int64_t v = 1000;
		assert_int_equal(run_op(&e, 'i', k, &v, 50), 0);
	}
	for (uint64_t k = 0; k < NKEYS; k++) {
		int64_t v = 5000 + (int64_t)k;
		assert_int_equal(run_op(&e, 'p', k, &v, 50), 0); /* one-sided write-back */
	}
	/* the primary's retention passes the records once their write-backs
	 * are durable (their locks free) and the watermark passed them: the
	 * worker's heartbeats move the watermark */
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	assert_non_null(d);
	uint64_t t0 = dxl_now_ms(), end = t0 + 30000;
	uint64_t recs = UINT64_MAX;
	while (dxl_now_ms() < end) {
		dxl_coord_worker_poll(e.w);
		if (dxl_replica_desc_get(e.zk, 1, d) == 0 && dxl_replica_desc_shard(d, 0)) {
			recs = dxl_replica_desc_shard(d, 0)->records;
			if (recs == 0)
				break;
		}
		usleep(20000);
	}
	free(d);
	env_close(&e);
	print_message("  records retained by the primary: %" PRIu64 " after %" PRIu64 " ms\n",
		      recs, dxl_now_ms() - t0);
	if (recs != 0)
		fail_msg("retention did not pass the records: a power failure would not show "
			 "whether the write-backs are durable");
	/* a power failure losing every un-flushed line (DXL_FABRIC_PF=USR2:all) */
	int rc = DXL(30000, "cluster", "kill", "1", "--power-fail", "--dir", g_dir);
	if (rc)
		fail_msg("power-fail: %d\n%s%s", rc, g_out, g_err);
	rc = DXL(90000, "cluster", "restart", "1", "--dir", g_dir);
	if (rc)
		fail_msg("restart: %d\n%s%s", rc, g_out, g_err);
	env_open(&e, NULL, NULL);
	int lost = 0;
	for (uint64_t k = 0; k < NKEYS; k++) {
		int64_t v = -1;
		rc = run_op(&e, 'g', k, &v, 200);
		if (rc || v != 5000 + (int64_t)k) {
			print_message("  key %" PRIu64 ": %s, value %" PRId64 " (committed %d)  <-- LOST\n",
				      k, rc ? dxl_errname(rc) : "read", v, 5000 + (int)k);
			lost++;
		}
	}
	env_close(&e);
	print_message("  after the power failure and restart: %d of %d committed write-backs lost\n",
		      lost, NKEYS);
	assert_int_equal(lost, 0);
}

/* ---- the cluster ------------------------------------------------------------------ */

static int group_setup(void **state)
{
	(void)state;
	g_zkc = getenv("DXL_TEST_ZK");
	assert_int_equal(dxlt_prog_path("dxl", g_dxl, sizeof(g_dxl)), 0);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-wb-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	g_out = malloc(OUT_CAP);
	g_err = malloc(OUT_CAP);
	if (!g_zkc)
		return 0;
	/* a power failure loses every un-flushed line */
	setenv("DXL_FABRIC_PF", "USR2:all", 1);
	snprintf(g_name, sizeof(g_name), "wb-%d", (int)getpid());
	snprintf(g_dir, sizeof(g_dir), "%s/c", g_tmp);
	/* one replica (nothing else holds the records), a session longer than
	 * the stop of test_writeback_handed_on, retention as soon as allowed;
	 * the restart after the power failure waits up to 30 s for the killed
	 * incarnation's session to expire (the default, the session timeout,
	 * measured from the restart, can end just before ZooKeeper expires it:
	 * timeout rounded up to its tick after the last ping) */
	int rc = DXL(60000, "cluster", "up", "--dir", g_dir, "--zk", g_zkc, "--cluster", g_name,
		     "--replicas", "1", "--shards", "1", "--ring-size", "1M", "--writer-slots", "8",
		     "--session-timeout", "10000", "-o", "engine.tables=1:8:4096", "-o",
		     "engine.lock_mode=nic", "-o", "log.retention_ms=0", "-o",
		     "log.retention_check_ms=100", "-o", "replica.exist_wait_ms=30000");
	if (rc)
		print_message("cluster up: exit %d\n%s\n%s\n", rc, g_out, g_err);
	g_up = rc == 0;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (g_up) {
		DXL(30000, "cluster", "kill", "1", "--signal", "CONT", "--dir", g_dir);
		if (DXL(30000, "cluster", "down", "--dir", g_dir))
			print_message("cluster down: %s%s\n", g_out, g_err);
		int k = dxlt_cluster_reap(g_dir);
		if (k)
			print_message("cluster down left %d replicas: killed\n", k);
	}
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
		cmocka_unit_test(test_unlock_result_checked),
		cmocka_unit_test(test_writeback_handed_on),
		cmocka_unit_test(test_durable_before_unlock),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
