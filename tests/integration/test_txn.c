/* test_txn.c -- transactions through the coordinator (include/dxl/txn.h) on a
 * real local cluster (3 dxl-replica processes, 2 shards, 3-way replication,
 * ZooKeeper): the operations and their refusals, conflicts and the locks
 * they release, a concurrent transfer workload whose history the conflict-
 * graph checker (tests/lib/history.h) finds serializable -- and NOT
 * serializable when the coordinator skips validation (the checker's teeth)
 * -- in the hybrid, one-sided and two-sided modes, with several coordinator
 * processes at once.
 *
 * Needs DXL_TEST_ZK=host:port (scripts/test.sh sets it); skips otherwise.
 * DXL_TEST_KEEP=1 keeps the temporary directory (daemon logs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "common/endian.h"
#include "dxl/membership.h"
#include "dxl/txn.h"
#include "tests/lib/cli_run.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/history.h"
#include "tests/lib/proc.h"
#include "tests/lib/select.h"

#define T_ACCT 1
#define NACCT 40
#define BASE_BAL 1000
#define VALSZ 8
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
static struct cl g_nic, g_cpu;

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

static int cluster_up(struct cl *c, const char *tag, const char *lock_mode)
{
	snprintf(c->name, sizeof(c->name), "tx-%d-%s", (int)getpid(), tag);
	snprintf(c->dir, sizeof(c->dir), "%s/%s", g_tmp, tag);
	char lm[64];
	snprintf(lm, sizeof(lm), "engine.lock_mode=%s", lock_mode);
	/* with verbs (the Soft-RoCE guest, 1 GiB): smaller rings */
	bool verbs = dxlt_test_provider() == DXL_FABRIC_VERBS;
	const char *args[40] = {"cluster", "up", "--dir", c->dir, "--zk", g_zkc,
				"--cluster", c->name, "--replicas", "3", "--shards", "2",
				"--ring-size", verbs ? "1M" : "4M", "--writer-slots", "16",
				"--session-timeout", "2000",
				"-o", "engine.tables=1:8:4096,2:100:64", "-o", lm};
	int a = 22;
	dxlt_cluster_args(args, &a, 39); /* DXL_TEST_PROVIDER=verbs */
	args[a] = NULL;
	int rc = run_dxl(args, 60000);
	if (rc)
		print_message("cluster up: exit %d\n%s\n%s\n", rc, g_out, g_err);
	c->up = rc == 0;
	return rc;
}

static void cluster_down(struct cl *c)
{
	if (!c->up)
		return;
	const char *args[] = {"cluster", "down", "--dir", c->dir, NULL};
	if (run_dxl(args, 30000))
		print_message("cluster down: %s%s\n", g_out, g_err);
	int k = dxlt_cluster_reap(c->dir);
	if (k)
		print_message("cluster down left %d replicas: killed\n", k);
	c->up = false;
}

static struct dxl_zk *zk_open(const struct cl *c)
{
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_zkc, c->name, &zk), 0);
	return zk;
}

#define NEED_ENV()                                                                 \
	do {                                                                       \
		if (!g_zkc) {                                                      \
			print_message("SKIPPED: no ZooKeeper (DXL_TEST_ZK unset)\n"); \
			skip();                                                    \
		}                                                                  \
		if (!g_nic.up)                                                     \
			fail_msg("the cluster did not come up");                   \
	} while (0)

/* ---- running coroutines on a worker ------------------------------------------------ */

struct env {
	struct dxl_zk *zk;
	struct dxl_coord *c;
	struct dxl_coord_worker *w;
};

static void env_open(struct env *e, const struct cl *c, enum dxl_txn_mode mode,
		     bool no_validation)
{
	memset(e, 0, sizeof(*e));
	e->zk = zk_open(c);
	struct dxl_coord_cfg cfg;
	dxl_coord_cfg_init(&cfg);
	cfg.mode = mode;
	cfg.no_validation = no_validation;
	int ret = dxl_coord_new(e->zk, &cfg, &e->c);
	if (ret)
		fail_msg("dxl_coord_new: %s", dxl_errmsg());
	ret = dxl_coord_worker_new(e->c, 16, &e->w);
	if (ret)
		fail_msg("worker: %s", dxl_errmsg());
}

static void env_close(struct env *e)
{
	dxl_coord_worker_delete(&e->w);
	dxl_coord_delete(&e->c);
	dxl_zk_delete(&e->zk);
}

/* run fn(arg) in one coroutine and wait for it */
static void run1(struct env *e, dxl_co_fn fn, void *arg)
{
	assert_int_equal(dxl_coord_worker_spawn(e->w, fn, arg), 0);
	assert_int_equal(dxl_coord_worker_run(e->w), 0);
}

static void put64(uint8_t *b, int64_t v)
{
	dxl_put_le64(b, (uint64_t)v);
}

static int64_t get64(const uint8_t *b)
{
	return (int64_t)dxl_get_le64(b);
}

/* ---- loading accounts -------------------------------------------------------------- */

struct load {
	struct env *e;
	uint64_t first, n;
	int64_t bal;
	struct dxlt_history *h; /* may be NULL */
	int ret;
};

static int load_fn(struct dxl_txn *t, void *arg)
{
	struct load *l = arg;
	uint8_t v[8];
	put64(v, l->bal);
	for (uint64_t k = l->first; k < l->first + l->n; k++) {
		int ret = dxl_txn_insert(t, T_ACCT, k, v, 8);
		if (ret)
			return ret;
	}
	return 0;
}

static void co_load(void *arg)
{
	struct load *l = arg;
	struct dxl_txn_info info;
	uint64_t total = l->n, first = l->first;
	for (uint64_t at = first; at < first + total; at += 32) {
		struct load part = *l;
		part.first = at;
		part.n = DXL_MIN(32, first + total - at);
		l->ret = dxl_txn_run(l->e->w, load_fn, &part, 0, &info);
		if (l->ret) {
			print_message("load: %s: %s\n", dxl_errname(l->ret), dxl_errmsg());
			return;
		}
	}
}

static void load_accounts(struct env *e, uint64_t first, uint64_t n, int64_t bal)
{
	struct load l = {.e = e, .first = first, .n = n, .bal = bal};
	run1(e, co_load, &l);
	assert_int_equal(l.ret, 0);
}

/* ---- every account: balances and versions (one read-only transaction) ------- */

struct vsnap {
	struct env *e;
	uint64_t v[NACCT];
	int64_t total;
	int ret;
};

static int vsnap_fn(struct dxl_txn *t, void *arg)
{
	struct vsnap *s = arg;
	s->total = 0;
	for (uint64_t k = 0; k < NACCT; k++) {
		uint8_t v[8];
		uint32_t len;
		int ret = dxl_txn_get(t, T_ACCT, k, v, 8, &len);
		if (ret)
			return ret;
		if (len != 8)
			return dxl_err_set(DXL_E_CORRUPT, "key %" PRIu64 ": %u bytes", k, len);
		s->total += get64(v);
	}
	return 0;
}

static void co_vsnap(void *arg)
{
	struct vsnap *s = arg;
	struct dxl_txn_info info;
	s->ret = dxl_txn_run(s->e->w, vsnap_fn, s, 0, &info);
	if (s->ret)
		return;
	struct dxl_txn_access acc[NACCT];
	int n = dxl_txn_footprint(dxl_txn_last(s->e->w), acc, NACCT);
	for (int k = 0; k < n && k < NACCT; k++)
		s->v[acc[k].key] = acc[k].version;
}

static void snapshot(const struct cl *c, struct vsnap *s)
{
	struct env e;
	env_open(&e, c, DXL_TXN_HYBRID, false);
	memset(s, 0, sizeof(*s));
	s->e = &e;
	run1(&e, co_vsnap, s);
	if (s->ret)
		fail_msg("snapshot: %s: %s", dxl_errname(s->ret), dxl_errmsg());
	s->e = NULL;
	env_close(&e);
}

static int64_t sum_accounts(const struct cl *c)
{
	struct vsnap s;
	snapshot(c, &s);
	return s.total;
}

/* ---- single operations ----------------------------------------------------------- */

struct one {
	struct env *e;
	int op; /* 'g' get, 'p' put, 'i' insert, 'd' delete */
	uint32_t table;
	uint64_t key;
	uint8_t val[200];
	uint32_t len;
	int ret;
};

static void co_one(void *arg)
{
	struct one *o = arg;
	struct dxl_txn *t;
	o->ret = dxl_txn_begin(o->e->w, &t);
	if (o->ret)
		return;
	switch (o->op) {
	case 'g':
		o->ret = dxl_txn_get(t, o->table, o->key, o->val, sizeof(o->val), &o->len);
		break;
	case 'p':
		o->ret = dxl_txn_put(t, o->table, o->key, o->val, o->len);
		break;
	case 'i':
		o->ret = dxl_txn_insert(t, o->table, o->key, o->val, o->len);
		break;
	case 'd':
		o->ret = dxl_txn_delete(t, o->table, o->key);
		break;
	}
	if (!o->ret)
		o->ret = dxl_txn_commit(t, NULL);
	else
		dxl_txn_abort(t);
}

static int one(struct env *e, int op, uint32_t table, uint64_t key, const char *val,
	       char *out)
{
	struct one o = {.e = e, .op = op, .table = table, .key = key};
	if (val) {
		o.len = (uint32_t)strlen(val);
		memcpy(o.val, val, DXL_MIN(o.len, sizeof(o.val)));
	}
	run1(e, co_one, &o);
	if (out && !o.ret) {
		memcpy(out, o.val, o.len);
		out[o.len] = 0;
	}
	return o.ret;
}

static void test_ops(void **state)
{
	(void)state;
	NEED_ENV();
	struct env e;
	env_open(&e, &g_nic, DXL_TXN_HYBRID, false);
	char buf[256];
	/* keys 1000.. on both shards (key mod 2) */
	assert_int_equal(one(&e, 'i', 2, 1000, "alpha", NULL), 0);
	assert_int_equal(one(&e, 'i', 2, 1001, "beta", NULL), 0);
	assert_int_equal(one(&e, 'g', 2, 1000, NULL, buf), 0);
	assert_string_equal(buf, "alpha");
	assert_int_equal(one(&e, 'i', 2, 1000, "again", NULL), DXL_E_EXIST);
	assert_int_equal(one(&e, 'p', 2, 1001, "gamma", NULL), 0);
	assert_int_equal(one(&e, 'g', 2, 1001, NULL, buf), 0);
	assert_string_equal(buf, "gamma");
	assert_int_equal(one(&e, 'p', 2, 1002, "none", NULL), DXL_E_NOENT);
	assert_int_equal(one(&e, 'd', 2, 1000, NULL, NULL), 0);
	assert_int_equal(one(&e, 'g', 2, 1000, NULL, buf), DXL_E_NOENT);
	/* re-insert after delete: the location cache's entry is stale now */
	assert_int_equal(one(&e, 'i', 2, 1000, "delta", NULL), 0);
	assert_int_equal(one(&e, 'g', 2, 1000, NULL, buf), 0);
	assert_string_equal(buf, "delta");
	/* bad input changes nothing */
	assert_int_equal(one(&e, 'g', 9, 1000, NULL, buf), DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "unknown table 9"));
	char big[150];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	assert_int_equal(one(&e, 'p', 2, 1001, big, NULL), DXL_E_TOOBIG);
	assert_int_equal(one(&e, 'g', 2, 1001, NULL, buf), 0);
	assert_string_equal(buf, "gamma");
	struct dxl_coord_stats st;
	dxl_coord_stats(e.c, &st);
	assert_true(st.committed >= 8);
	/* hybrid: the second read of a key is a one-sided READ (cache hit) */
	assert_true(st.onesided_reads > 0);
	assert_true(st.rpc_reads > 0);
	env_close(&e);
}

/* ---- a conflict, and the locks it releases ------------------------------------------ */

struct pair {
	struct env *e;
	int step;          /* shared sequencing */
	int r1, r2, r3;
};

static void co_t1(void *arg)
{
	struct pair *p = arg;
	struct dxl_txn *t;
	uint8_t v[8];
	uint32_t len;
	assert_int_equal(dxl_txn_begin(p->e->w, &t), 0);
	assert_int_equal(dxl_txn_get(t, T_ACCT, 7, v, 8, &len), 0);
	put64(v, get64(v) + 1);
	assert_int_equal(dxl_txn_put(t, T_ACCT, 7, v, 8), 0);
	p->step = 1;
	while (p->step < 2)
		dxl_co_yield(); /* T2 commits meanwhile */
	p->r1 = dxl_txn_commit(t, NULL);
	p->step = 3;
}

static void co_t2(void *arg)
{
	struct pair *p = arg;
	while (p->step < 1)
		dxl_co_yield();
	struct dxl_txn *t;
	uint8_t v[8];
	uint32_t len;
	assert_int_equal(dxl_txn_begin(p->e->w, &t), 0);
	assert_int_equal(dxl_txn_get(t, T_ACCT, 7, v, 8, &len), 0);
	put64(v, get64(v) + 10);
	assert_int_equal(dxl_txn_put(t, T_ACCT, 7, v, 8), 0);
	p->r2 = dxl_txn_commit(t, NULL);
	p->step = 2;
	while (p->step < 3)
		dxl_co_yield();
	/* T1's abort released its lock: a third transaction commits */
	assert_int_equal(dxl_txn_begin(p->e->w, &t), 0);
	assert_int_equal(dxl_txn_get(t, T_ACCT, 7, v, 8, &len), 0);
	put64(v, get64(v) + 100);
	assert_int_equal(dxl_txn_put(t, T_ACCT, 7, v, 8), 0);
	p->r3 = dxl_txn_commit(t, NULL);
}

static void conflict_case(const struct cl *c, enum dxl_txn_mode mode)
{
	struct env e;
	env_open(&e, c, mode, false);
	struct one o = {.e = &e, .op = 'g', .table = T_ACCT, .key = 7};
	run1(&e, co_one, &o);
	assert_int_equal(o.ret, 0);
	int64_t before = get64(o.val);
	struct pair p = {.e = &e};
	assert_int_equal(dxl_coord_worker_spawn(e.w, co_t1, &p), 0);
	assert_int_equal(dxl_coord_worker_spawn(e.w, co_t2, &p), 0);
	assert_int_equal(dxl_coord_worker_run(e.w), 0);
	assert_int_equal(p.r2, 0);
	assert_int_equal(p.r1, DXL_E_CONFLICT);
	assert_int_equal(p.r3, 0);
	run1(&e, co_one, &o);
	assert_int_equal(o.ret, 0);
	assert_int_equal(get64(o.val), before + 110); /* T1's +1 did not happen */
	env_close(&e);
}

static void test_conflict(void **state)
{
	(void)state;
	NEED_ENV();
	conflict_case(&g_nic, DXL_TXN_HYBRID);
}

/* ---- concurrent transfers: money conserved, history serializable ---------------- */


struct xfer {
	struct env *e;
	uint64_t rng;
	uint32_t ntxn;
	bool skew;              /* write-skew shape: read two, write one */
	struct dxlt_history *h; /* committed footprints */
	FILE *out;              /* or: footprints as text (child processes) */
	uint64_t deadline_ms;   /* 0 = ntxn transactions; else until then */
	uint32_t *writes;       /* committed writes per account (may be NULL) */
	uint64_t committed, conflicts, unavail;
	int err;
};

static uint64_t xr(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

struct xarg {
	uint64_t a, b;
	int64_t amount;
	bool skew;
};

static int xfer_fn(struct dxl_txn *t, void *arg)
{
	struct xarg *x = arg;
	uint8_t va[8], vb[8];
	uint32_t len;
	int ret;
	if ((ret = dxl_txn_get(t, T_ACCT, x->a, va, 8, &len)) ||
	    (ret = dxl_txn_get(t, T_ACCT, x->b, vb, 8, &len)))
		return ret;
	int64_t a = get64(va), b = get64(vb);
	if (x->skew) {
		/* withdraw from a if a + b stays >= 0: write skew when two
		 * run on {a,b} and {b,a} without validation */
		if (a + b - x->amount < 0)
			return 0;
		put64(va, a - x->amount);
		return dxl_txn_put(t, T_ACCT, x->a, va, 8);
	}
	put64(va, a - x->amount);
	put64(vb, b + x->amount);
	if ((ret = dxl_txn_put(t, T_ACCT, x->a, va, 8)))
		return ret;
	return dxl_txn_put(t, T_ACCT, x->b, vb, 8);
}

static void co_xfer(void *arg)
{
	struct xfer *x = arg;
	struct dxl_coord_worker *w = x->e->w;
	for (uint32_t i = 0; x->deadline_ms ? dxl_now_ms() < x->deadline_ms : i < x->ntxn; i++) {
		struct xarg a;
		a.a = xr(&x->rng) % NACCT;
		do
			a.b = xr(&x->rng) % NACCT;
		while (a.b == a.a);
		a.amount = (int64_t)(xr(&x->rng) % 50) + 1;
		a.skew = x->skew;
		struct dxl_txn_info info;
		int ret = dxl_txn_run(w, xfer_fn, &a, 0, &info);
		if (ret == DXL_E_UNAVAIL && x->deadline_ms && !info.maybe) {
			x->unavail++; /* nothing happened: a failover longer than
					 the retry budget */
			continue;
		}
		if (ret) {
			x->err = ret;
			print_message("xfer: %s: %s\n", dxl_errname(ret), dxl_errmsg());
			return;
		}
		x->committed++;
		x->conflicts += info.attempts - 1;
		/* the footprint of the handle that committed */
		struct dxl_txn_access acc[8];
		int n = dxl_txn_footprint(dxl_txn_last(w), acc, 8);
		for (int k = 0; k < n && k < 8; k++) {
			if (x->writes && acc[k].write && acc[k].key < NACCT)
				x->writes[acc[k].key]++;
			if (x->h) {
				if (acc[k].write)
					dxlt_history_write(x->h, info.id, acc[k].table, acc[k].key,
							   acc[k].version);
				else
					dxlt_history_read(x->h, info.id, acc[k].table, acc[k].key,
							  acc[k].version);
			}
			if (x->out)
				fprintf(x->out, "%c %" PRIu64 " %u %" PRIu64 " %" PRIu64 "\n",
					acc[k].write ? 'w' : 'r', info.id, acc[k].table, acc[k].key,
					acc[k].version);
		}
	}
}

/* the versions the accounts have now, as the writes of one transaction of
 * the history (the one that "wrote" the starting state) */
static void history_seed(const struct cl *c, struct dxlt_history *h)
{
	struct vsnap s;
	snapshot(c, &s);
	for (uint64_t k = 0; k < NACCT; k++)
		dxlt_history_write(h, 1, T_ACCT, k, s.v[k]);
}

static uint64_t g_deadline_ms; /* xfer_run: run until then (0: ntxn each) */
static uint32_t *g_writes;     /* xfer_run: count committed writes per account */

static void xfer_run(const struct cl *c, enum dxl_txn_mode mode, bool no_val,
		     bool skew, uint32_t ncoro, uint32_t ntxn, struct dxlt_history *h,
		     FILE *out, uint64_t seed)
{
	struct env e;
	env_open(&e, c, mode, no_val);
	struct xfer *x = calloc(ncoro, sizeof(*x));
	assert_non_null(x);
	for (uint32_t i = 0; i < ncoro; i++) {
		x[i] = (struct xfer){.e = &e, .rng = seed * 7919 + i * 104729 + 1, .ntxn = ntxn,
				     .skew = skew, .h = h, .out = out,
				     .deadline_ms = g_deadline_ms, .writes = g_writes};
		assert_int_equal(dxl_coord_worker_spawn(e.w, co_xfer, &x[i]), 0);
	}
	assert_int_equal(dxl_coord_worker_run(e.w), 0);
	uint64_t committed = 0, conflicts = 0, unavail = 0;
	for (uint32_t i = 0; i < ncoro; i++) {
		assert_int_equal(x[i].err, 0);
		committed += x[i].committed;
		conflicts += x[i].conflicts;
		unavail += x[i].unavail;
	}
	print_message("  %s%s%s: %" PRIu64 " committed, %" PRIu64 " conflicts retried, %" PRIu64
		      " unavailable\n",
		      dxl_txn_mode_name(mode), no_val ? " (no validation)" : "",
		      skew ? " (write-skew shape)" : "", committed, conflicts, unavail);
	if (!g_deadline_ms)
		assert_int_equal(committed, (uint64_t)ncoro * ntxn);
	else
		assert_true(committed > 0);
	free(x);
	env_close(&e);
}

static void check_history(struct dxlt_history *h, bool want_serializable)
{
	char why[2048];
	size_t ntxn = 0, nedges = 0;
	int r = dxlt_history_check(h, why, sizeof(why), &ntxn, &nedges);
	print_message("  history: %zu transactions, %zu edges: %s\n", ntxn, nedges,
		      r == 0 ? "serializable" : why);
	if (want_serializable)
		assert_int_equal(r, 0);
	else
		assert_int_equal(r, 1);
}

static void test_serializable(void **state)
{
	(void)state;
	NEED_ENV();
	int64_t before = sum_accounts(&g_nic);
	struct dxlt_history *h = dxlt_history_new();
	assert_non_null(h);
	history_seed(&g_nic, h);
	xfer_run(&g_nic, DXL_TXN_HYBRID, false, false, 12, 60, h, NULL, 1);
	xfer_run(&g_nic, DXL_TXN_ONESIDED, false, false, 12, 40, h, NULL, 2);
	check_history(h, true);
	dxlt_history_free(h);
	assert_int_equal(sum_accounts(&g_nic), before);
}

/* validation disabled: the checker must find the write skew */
static void test_checker_catches_no_validation(void **state)
{
	(void)state;
	NEED_ENV();
	struct dxlt_history *h = dxlt_history_new();
	assert_non_null(h);
	history_seed(&g_nic, h);
	xfer_run(&g_nic, DXL_TXN_HYBRID, true, true, 16, 60, h, NULL, 3);
	check_history(h, false);
	dxlt_history_free(h);
	/* the same workload validated is serializable */
	h = dxlt_history_new();
	history_seed(&g_nic, h);
	xfer_run(&g_nic, DXL_TXN_HYBRID, false, true, 16, 60, h, NULL, 4);
	check_history(h, true);
	dxlt_history_free(h);
}

/* several coordinator processes at once, histories merged */
static void test_processes(void **state)
{
	(void)state;
	NEED_ENV();
	enum { NPROC = 3 };
	char path[NPROC][300];
	pid_t pid[NPROC];
	int64_t before = sum_accounts(&g_nic);
	struct dxlt_history *h = dxlt_history_new();
	history_seed(&g_nic, h);
	for (int i = 0; i < NPROC; i++) {
		snprintf(path[i], sizeof(path[i]), "%s/hist-%d.txt", g_tmp, i);
		fflush(NULL);
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			alarm(120);
			FILE *f = fopen(path[i], "w");
			if (!f)
				_exit(2);
			xfer_run(&g_nic, DXL_TXN_HYBRID, false, false, 8, 40, NULL, f,
				 (uint64_t)(10 + i));
			fclose(f);
			_exit(0);
		}
	}
	for (int i = 0; i < NPROC; i++) {
		int st = 0;
		assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st), 0);
	}
	size_t lines = 0;
	for (int i = 0; i < NPROC; i++) {
		FILE *f = fopen(path[i], "r");
		assert_non_null(f);
		char kind;
		uint64_t id, key, ver;
		unsigned table;
		while (fscanf(f, " %c %" SCNu64 " %u %" SCNu64 " %" SCNu64, &kind, &id, &table, &key,
			      &ver) == 5) {
			if (kind == 'w')
				dxlt_history_write(h, id, table, key, ver);
			else
				dxlt_history_read(h, id, table, key, ver);
			lines++;
		}
		fclose(f);
	}
	assert_true(lines >= (size_t)NPROC * 8 * 40 * 3);
	check_history(h, true);
	dxlt_history_free(h);
	assert_int_equal(sum_accounts(&g_nic), before);
}

/* two-sided mode on CPU-owned lock words; and the mode mismatch */
static void test_twosided(void **state)
{
	(void)state;
	NEED_ENV();
	if (!g_cpu.up && cluster_up(&g_cpu, "cpu", "cpu"))
		fail_msg("the cpu-lock cluster did not come up");
	struct env e;
	env_open(&e, &g_cpu, DXL_TXN_TWOSIDED, false);
	load_accounts(&e, 0, NACCT, BASE_BAL);
	env_close(&e);
	assert_int_equal(sum_accounts(&g_cpu), NACCT * BASE_BAL);
	conflict_case(&g_cpu, DXL_TXN_TWOSIDED);
	struct dxlt_history *h = dxlt_history_new();
	history_seed(&g_cpu, h);
	xfer_run(&g_cpu, DXL_TXN_TWOSIDED, false, false, 12, 50, h, NULL, 5);
	check_history(h, true);
	dxlt_history_free(h);
	assert_int_equal(sum_accounts(&g_cpu), NACCT * BASE_BAL + 110);
	/* hybrid needs NIC-owned lock words: a clear error, nothing changed */
	env_open(&e, &g_cpu, DXL_TXN_HYBRID, false);
	assert_int_equal(one(&e, 'p', 2, 5, "x", NULL), DXL_E_NOENT);
	struct one o = {.e = &e, .op = 'p', .table = T_ACCT, .key = 3, .len = 8};
	put64(o.val, 5);
	run1(&e, co_one, &o);
	assert_int_equal(o.ret, DXL_E_CONFIG);
	env_close(&e);
	assert_int_equal(sum_accounts(&g_cpu), NACCT * BASE_BAL + 110);
}

/* ---- failover: kill primaries under load --------------------------------------- */

static struct cl g_fo;

struct killer {
	const struct cl *c;
	const char *node;
	unsigned delay_ms;
	int rc;
};

static void *killer_main(void *arg)
{
	struct killer *k = arg;
	usleep(k->delay_ms * 1000);
	const char *args[] = {"cluster", "kill", k->node, "--dir", k->c->dir, NULL};
	const char *argv[16];
	int a = 0;
	argv[a++] = g_dxl;
	for (int i = 0; args[i]; i++)
		argv[a++] = args[i];
	argv[a] = NULL;
	char out[4096], err[4096];
	k->rc = dxlt_run(argv, NULL, g_tmp, out, err, sizeof(out), 30000);
	return NULL;
}

/* transfers for ms milliseconds while node `node` is killed after delay_ms;
 * then: serializable, money conserved, and every committed write is in the
 * store (each key's version grew by 2 per committed write) */
static void run_through_kill(const char *node, unsigned delay_ms, unsigned ms, uint64_t seed)
{
	struct vsnap before, after;
	snapshot(&g_fo, &before);
	uint32_t writes[NACCT] = {0};
	struct dxlt_history *h = dxlt_history_new();
	for (uint64_t k = 0; k < NACCT; k++)
		dxlt_history_write(h, 1, T_ACCT, k, before.v[k]);
	struct killer k = {.c = &g_fo, .node = node, .delay_ms = delay_ms};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, killer_main, &k), 0);
	g_deadline_ms = dxl_now_ms() + ms;
	g_writes = writes;
	xfer_run(&g_fo, DXL_TXN_HYBRID, false, false, 8, 0, h, NULL, seed);
	g_deadline_ms = 0;
	g_writes = NULL;
	pthread_join(th, NULL);
	assert_int_equal(k.rc, 0);
	check_history(h, true);
	dxlt_history_free(h);
	snapshot(&g_fo, &after);
	assert_int_equal(after.total, before.total);
	for (uint64_t key = 0; key < NACCT; key++)
		if (after.v[key] - before.v[key] != 2ull * writes[key])
			fail_msg("account %" PRIu64 ": version %" PRIu64 " -> %" PRIu64
				 ", %u committed writes (lost or extra commits)",
				 key, before.v[key], after.v[key], writes[key]);
}

static void test_kill_primaries(void **state)
{
	(void)state;
	NEED_ENV();
	if (cluster_up(&g_fo, "fo", "nic"))
		fail_msg("cluster up");
	struct env e;
	env_open(&e, &g_fo, DXL_TXN_HYBRID, false);
	load_accounts(&e, 0, NACCT, BASE_BAL);
	env_close(&e);
	/* node 1 is the primary of both shards: kill it under load */
	run_through_kill("1", 1500, 6000, 21);
	/* back as a backup: it catches up and applies the log */
	const char *rs[] = {"cluster", "restart", "1", "--dir", g_fo.dir, NULL};
	assert_int_equal(run_dxl(rs, 60000), 0);
	sleep(3);
	/* the new primary (2) dies: a backup that applied the log serves */
	run_through_kill("2", 1500, 6000, 22);
	cluster_down(&g_fo);
}

/* ---- a coordinator dies: its transactions are resolved -------------------------- */

static struct cl g_kc;

struct touch_all {
	struct env *e;
	int ret;
};

static int touch_fn(struct dxl_txn *t, void *arg)
{
	(void)arg;
	for (uint64_t k = 0; k < NACCT; k++) {
		uint8_t v[8];
		uint32_t len;
		int ret = dxl_txn_get(t, T_ACCT, k, v, 8, &len);
		if (!ret)
			ret = dxl_txn_put(t, T_ACCT, k, v, 8);
		if (ret)
			return ret;
	}
	return 0;
}

static void co_touch(void *arg)
{
	struct touch_all *a = arg;
	a->ret = dxl_txn_run(a->e->w, touch_fn, NULL, 0, NULL);
}

static void test_kill_coordinator(void **state)
{
	(void)state;
	NEED_ENV();
	if (cluster_up(&g_kc, "kc", "nic"))
		fail_msg("cluster up");
	struct env e;
	env_open(&e, &g_kc, DXL_TXN_HYBRID, false);
	load_accounts(&e, 0, NACCT, BASE_BAL);
	env_close(&e);
	struct vsnap before, after;
	snapshot(&g_kc, &before);
	/* a coordinator process in the middle of transfers: kill -9 */
	char path[300];
	snprintf(path, sizeof(path), "%s/kc-child.txt", g_tmp);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		FILE *f = fopen(path, "w");
		if (!f)
			_exit(2);
		setvbuf(f, NULL, _IOLBF, 0);
		g_deadline_ms = dxl_now_ms() + 20000;
		xfer_run(&g_kc, DXL_TXN_HYBRID, false, false, 16, 0, NULL, f, 31);
		_exit(0);
	}
	usleep(2500 * 1000);
	kill(pid, SIGKILL);
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	/* its session expires (2 s), its slots and locks are then resolved by
	 * the next coordinator that meets them */
	uint32_t writes[NACCT] = {0};
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char kind;
	uint64_t id, key, ver;
	unsigned table;
	size_t child_commits = 0;
	while (fscanf(f, " %c %" SCNu64 " %u %" SCNu64 " %" SCNu64, &kind, &id, &table, &key,
		      &ver) == 5)
		if (kind == 'w' && key < NACCT) {
			writes[key]++;
			child_commits++;
		}
	fclose(f);
	print_message("  the killed coordinator had recorded %zu committed writes\n",
		      child_commits);
	assert_true(child_commits > 0);
	g_deadline_ms = dxl_now_ms() + 6000;
	g_writes = writes;
	env_open(&e, &g_kc, DXL_TXN_HYBRID, false);
	env_close(&e);
	xfer_run(&g_kc, DXL_TXN_HYBRID, false, false, 8, 0, NULL, NULL, 32);
	g_deadline_ms = 0;
	g_writes = NULL;
	/* no lock is left behind: one transaction writes every account */
	env_open(&e, &g_kc, DXL_TXN_HYBRID, false);
	struct touch_all ta = {.e = &e};
	run1(&e, co_touch, &ta);
	assert_int_equal(ta.ret, 0);
	struct dxl_coord_stats cs;
	dxl_coord_stats(e.c, &cs);
	env_close(&e);
	snapshot(&g_kc, &after);
	/* atomic: money conserved; durable: every commit the dead coordinator
	 * reported is there (a version per write; more if commits it did not
	 * get to record were rolled forward) */
	assert_int_equal(after.total, before.total);
	uint64_t extra = 0;
	for (uint64_t k = 0; k < NACCT; k++) {
		uint64_t grew = (after.v[k] - before.v[k]) / 2 - 1; /* the touch */
		if (grew < writes[k])
			fail_msg("account %" PRIu64 ": %" PRIu64 " writes in the store, %u committed",
				 k, grew, writes[k]);
		extra += grew - writes[k];
	}
	print_message("  %" PRIu64 " writes beyond the recorded ones (commits not yet recorded when killed)\n",
		      extra);
	cluster_down(&g_kc);
}

static int group_setup(void **state)
{
	(void)state;
	g_zkc = getenv("DXL_TEST_ZK");
	assert_int_equal(dxlt_prog_path("dxl", g_dxl, sizeof(g_dxl)), 0);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-txn-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	g_out = malloc(OUT_CAP);
	g_err = malloc(OUT_CAP);
	if (!g_zkc)
		return 0;
	if (cluster_up(&g_nic, "nic", "nic"))
		return 0;
	/* (the cpu-lock cluster: when test_twosided needs it) */
	struct env e;
	env_open(&e, &g_nic, DXL_TXN_HYBRID, false);
	load_accounts(&e, 0, NACCT, BASE_BAL);
	env_close(&e);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	cluster_down(&g_nic);
	cluster_down(&g_cpu);
	cluster_down(&g_fo);
	cluster_down(&g_kc);
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
	const struct CMUnitTest all[] = {
		cmocka_unit_test(test_ops),
		cmocka_unit_test(test_conflict),
		cmocka_unit_test(test_serializable),
		cmocka_unit_test(test_checker_catches_no_validation),
		cmocka_unit_test(test_processes),
		cmocka_unit_test(test_twosided),
		cmocka_unit_test(test_kill_primaries),
		cmocka_unit_test(test_kill_coordinator),
	};
	/* DXL_TEST_FILTER: one cmocka pattern, or several separated by commas
	 * (the Soft-RoCE guest runs a subset: tests/rdma/cluster.list) */
	struct CMUnitTest tests[sizeof(all) / sizeof(all[0])];
	size_t n = dxlt_select_tests(all, sizeof(all) / sizeof(all[0]), tests,
				     getenv("DXL_TEST_FILTER"));
	return _cmocka_run_group_tests("test_txn", tests, n, group_setup,
				       group_teardown);
}
