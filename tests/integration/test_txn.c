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
#include "tests/lib/stores.h"

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

/* accounts may be closed (deleted) and opened (inserted) by the workload:
 * an absent account holds nothing; its version is its tombstone's */
struct vsnap {
	struct env *e;
	uint64_t v[NACCT];
	bool absent[NACCT];
	int64_t total;
	uint64_t id, begin_ns, end_ns; /* the snapshot transaction */
	int ret;
};

static int vsnap_fn(struct dxl_txn *t, void *arg)
{
	struct vsnap *s = arg;
	s->total = 0;
	s->begin_ns = dxl_now_ns();
	for (uint64_t k = 0; k < NACCT; k++) {
		uint8_t v[8];
		uint32_t len;
		int ret = dxl_txn_get(t, T_ACCT, k, v, 8, &len);
		if (ret == DXL_E_NOENT)
			continue;
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
	s->end_ns = dxl_now_ns();
	s->id = info.id;
	struct dxl_txn_access acc[NACCT];
	int n = dxl_txn_footprint(dxl_txn_last(s->e->w), acc, NACCT);
	for (int k = 0; k < n && k < NACCT; k++) {
		s->v[acc[k].key] = acc[k].version;
		s->absent[acc[k].key] = acc[k].absent;
	}
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

/*
 * The workload: transfers between two accounts, and (churn) closing an
 * account into another (its balance moves, the account is deleted) and
 * opening one from another (inserted with an amount taken from it). An
 * absent account in a transfer, a present one to open: the transaction
 * commits read-only, its existence answers validated. Money is conserved
 * over the present accounts.
 */
struct xfer {
	struct env *e;
	uint64_t rng;
	uint32_t ntxn;
	bool skew;              /* write-skew shape: read two, write one */
	bool churn;             /* close and open accounts too */
	struct dxlt_history *h; /* committed (and unknown) footprints */
	FILE *out;              /* or: footprints as text (child processes) */
	uint64_t deadline_ms;   /* 0 = ntxn transactions; else until then */
	uint32_t *writes;       /* committed writes per account (may be NULL) */
	uint64_t committed, conflicts, unavail, maybe, closed, opened, readonly;
	int err;
};

static uint64_t xr(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

enum { X_TRANSFER, X_CLOSE, X_OPEN };

struct xarg {
	uint64_t a, b;
	int64_t amount;
	bool skew;
	int kind;
	int did;           /* what the committed attempt did (X_* or -1: read only) */
	uint64_t begin_ns; /* the attempt's start (its first read is after) */
};

static int xfer_fn(struct dxl_txn *t, void *arg)
{
	struct xarg *x = arg;
	x->begin_ns = dxl_now_ns();
	x->did = -1;
	uint8_t va[8], vb[8];
	uint32_t len;
	int ra = dxl_txn_get(t, T_ACCT, x->a, va, 8, &len);
	if (ra && ra != DXL_E_NOENT)
		return ra;
	int rb = dxl_txn_get(t, T_ACCT, x->b, vb, 8, &len);
	if (rb && rb != DXL_E_NOENT)
		return rb;
	int64_t a = ra ? 0 : get64(va), b = rb ? 0 : get64(vb);
	int ret;
	if (x->kind == X_OPEN) {
		/* open a with an amount from b: a absent, b present */
		if (!ra || rb)
			return 0;
		put64(vb, b - x->amount);
		put64(va, x->amount);
		if ((ret = dxl_txn_put(t, T_ACCT, x->b, vb, 8)))
			return ret;
		if ((ret = dxl_txn_insert(t, T_ACCT, x->a, va, 8)))
			return ret;
		x->did = X_OPEN;
		return 0;
	}
	if (ra || rb)
		return 0; /* an account is closed: read-only */
	if (x->kind == X_CLOSE) {
		put64(vb, b + a);
		if ((ret = dxl_txn_put(t, T_ACCT, x->b, vb, 8)) ||
		    (ret = dxl_txn_delete(t, T_ACCT, x->a)))
			return ret;
		x->did = X_CLOSE;
		return 0;
	}
	if (x->skew) {
		/* withdraw from a if a + b stays >= 0: write skew when two
		 * run on {a,b} and {b,a} without validation */
		if (a + b - x->amount < 0)
			return 0;
		put64(va, a - x->amount);
		x->did = X_TRANSFER;
		return dxl_txn_put(t, T_ACCT, x->a, va, 8);
	}
	put64(va, a - x->amount);
	put64(vb, b + x->amount);
	if ((ret = dxl_txn_put(t, T_ACCT, x->a, va, 8)))
		return ret;
	x->did = X_TRANSFER;
	return dxl_txn_put(t, T_ACCT, x->b, vb, 8);
}

/* one transaction's footprint into the history / the text file */
static void record(struct xfer *x, uint64_t id, const struct dxl_txn_access *acc, int n,
		   uint64_t begin_ns, uint64_t end_ns, bool maybe)
{
	for (int k = 0; k < n; k++) {
		const struct dxl_txn_access *a = &acc[k];
		char kind = a->write ? (a->op == DXL_WS_DELETE ? 'd' : 'w') : (a->absent ? 'a' : 'r');
		if (x->h) {
			if (kind == 'w')
				dxlt_history_write(x->h, id, a->table, a->key, a->version);
			else if (kind == 'd')
				dxlt_history_delete(x->h, id, a->table, a->key, a->version);
			else if (kind == 'a')
				dxlt_history_read_absent(x->h, id, a->table, a->key, a->version);
			else
				dxlt_history_read(x->h, id, a->table, a->key, a->version);
		}
		if (x->out)
			fprintf(x->out, "%c %" PRIu64 " %u %" PRIu64 " %" PRIu64 "\n", kind, id,
				a->table, a->key, a->version);
	}
	if (x->h)
		dxlt_history_txn(x->h, id, begin_ns, end_ns, maybe);
	if (x->out)
		fprintf(x->out, "t %" PRIu64 " %" PRIu64 " %" PRIu64 " %d\n", id, begin_ns, end_ns,
			(int)maybe);
}

static void co_xfer(void *arg)
{
	struct xfer *x = arg;
	struct dxl_coord_worker *w = x->e->w;
	for (uint32_t i = 0; x->deadline_ms ? dxl_now_ms() < x->deadline_ms : i < x->ntxn; i++) {
		struct xarg a = {.skew = x->skew, .kind = X_TRANSFER};
		a.a = xr(&x->rng) % NACCT;
		do
			a.b = xr(&x->rng) % NACCT;
		while (a.b == a.a);
		a.amount = (int64_t)(xr(&x->rng) % 50) + 1;
		if (x->churn) {
			uint64_t c = xr(&x->rng) % 10;
			a.kind = c < 6 ? X_TRANSFER : c < 8 ? X_CLOSE : X_OPEN;
		}
		struct dxl_txn_info info;
		int ret = dxl_txn_run(w, xfer_fn, &a, 0, &info);
		uint64_t end_ns = dxl_now_ns();
		struct dxl_txn_access acc[8];
		if (ret && info.maybe) {
			/* the outcome is unknown: the history decides (a maybe
			 * counts iff something read what it wrote) */
			x->maybe++;
			int n = dxl_txn_footprint(dxl_txn_last(w), acc, 8);
			record(x, info.id, acc, DXL_MIN(n, 8), a.begin_ns, 0, true);
			continue;
		}
		if (ret == DXL_E_UNAVAIL && x->deadline_ms) {
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
		x->closed += a.did == X_CLOSE;
		x->opened += a.did == X_OPEN;
		x->readonly += a.did < 0;
		/* the footprint of the handle that committed */
		int n = dxl_txn_footprint(dxl_txn_last(w), acc, 8);
		for (int k = 0; k < n && k < 8; k++)
			if (x->writes && acc[k].write && acc[k].key < NACCT)
				x->writes[acc[k].key]++;
		record(x, info.id, acc, DXL_MIN(n, 8), a.begin_ns, end_ns, false);
	}
}

/* the accounts now, as the writes of one transaction of the history (the
 * one that "wrote" the starting state); returns the snapshot */
static void history_seed(const struct cl *c, struct dxlt_history *h, struct vsnap *out)
{
	struct vsnap s;
	snapshot(c, &s);
	for (uint64_t k = 0; k < NACCT; k++)
		if (!s.absent[k])
			dxlt_history_write(h, 1, T_ACCT, k, s.v[k]);
		else if (s.v[k])
			dxlt_history_delete(h, 1, T_ACCT, k, s.v[k]);
	if (out)
		*out = s;
}

/* the accounts now, read by one transaction that began after every other
 * was acknowledged: the history's last reader (what the store holds must be
 * what the committed transactions wrote: a lost write, a deleted account
 * back, a write nobody committed all show); returns its total */
static int64_t history_final(const struct cl *c, struct dxlt_history *h)
{
	struct vsnap s;
	snapshot(c, &s);
	for (uint64_t k = 0; k < NACCT; k++)
		if (s.absent[k])
			dxlt_history_read_absent(h, s.id, T_ACCT, k, s.v[k]);
		else
			dxlt_history_read(h, s.id, T_ACCT, k, s.v[k]);
	dxlt_history_txn(h, s.id, s.begin_ns, s.end_ns, false);
	return s.total;
}

static uint64_t g_deadline_ms; /* xfer_run: run until then (0: ntxn each) */
static uint32_t *g_writes;     /* xfer_run: count committed writes per account */
static bool g_churn;           /* xfer_run: close and open accounts too */

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
				     .skew = skew, .churn = g_churn && !skew, .h = h, .out = out,
				     .deadline_ms = g_deadline_ms, .writes = g_writes};
		assert_int_equal(dxl_coord_worker_spawn(e.w, co_xfer, &x[i]), 0);
	}
	assert_int_equal(dxl_coord_worker_run(e.w), 0);
	uint64_t committed = 0, conflicts = 0, unavail = 0, maybe = 0, closed = 0, opened = 0,
		 ro = 0;
	for (uint32_t i = 0; i < ncoro; i++) {
		assert_int_equal(x[i].err, 0);
		committed += x[i].committed;
		conflicts += x[i].conflicts;
		unavail += x[i].unavail;
		maybe += x[i].maybe;
		closed += x[i].closed;
		opened += x[i].opened;
		ro += x[i].readonly;
	}
	print_message("  %s%s%s: %" PRIu64 " committed (%" PRIu64 " accounts closed, %" PRIu64
		      " opened, %" PRIu64 " read-only), %" PRIu64 " conflicts retried, %" PRIu64
		      " unavailable, %" PRIu64 " unknown\n",
		      dxl_txn_mode_name(mode), no_val ? " (no validation)" : "",
		      skew ? " (write-skew shape)" : "", committed, closed, opened, ro, conflicts,
		      unavail, maybe);
	if (!g_deadline_ms)
		assert_int_equal(committed + maybe, (uint64_t)ncoro * ntxn);
	else
		assert_true(committed > 0);
	if (g_churn && !skew && !g_deadline_ms && (closed == 0 || opened == 0))
		fail_msg("the workload closed %" PRIu64 " and opened %" PRIu64
			 " accounts: it must insert and delete under load", closed, opened);
	free(x);
	env_close(&e);
}

static void check_history(struct dxlt_history *h, bool want_serializable)
{
	char why[2048];
	struct dxlt_history_stats st;
	int r = dxlt_history_check_ex(h, why, sizeof(why), &st);
	print_message("  history: %zu transactions, %zu edges (%zu real-time), %zu deletes, %zu absence reads, unknown outcomes %zu counted / %zu not: %s\n",
		      st.ntxn, st.nedges, st.rt_edges, st.deletes, st.absent_reads, st.maybe_in,
		      st.maybe_out, r == 0 ? "serializable" : why);
	if (want_serializable)
		assert_int_equal(r, 0);
	else
		assert_int_equal(r, 1);
}

/* footprints written by record() (a child process) into h; counts the
 * committed writes per account into writes (may be NULL); returns the
 * access lines */
static size_t history_load(struct dxlt_history *h, const char *path, uint32_t *writes)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char line[256];
	size_t lines = 0;
	while (fgets(line, sizeof(line), f)) {
		char kind;
		uint64_t id, key, ver, b, e;
		unsigned table;
		int maybe;
		if (sscanf(line, "t %" SCNu64 " %" SCNu64 " %" SCNu64 " %d", &id, &b, &e, &maybe) ==
		    4) {
			if (h)
				dxlt_history_txn(h, id, b, e, maybe != 0);
			continue;
		}
		if (sscanf(line, "%c %" SCNu64 " %u %" SCNu64 " %" SCNu64, &kind, &id, &table, &key,
			   &ver) != 5)
			continue;
		lines++;
		if (writes && (kind == 'w' || kind == 'd') && key < NACCT)
			writes[key]++;
		if (!h)
			continue;
		if (kind == 'w')
			dxlt_history_write(h, id, table, key, ver);
		else if (kind == 'd')
			dxlt_history_delete(h, id, table, key, ver);
		else if (kind == 'a')
			dxlt_history_read_absent(h, id, table, key, ver);
		else
			dxlt_history_read(h, id, table, key, ver);
	}
	fclose(f);
	return lines;
}

static void test_serializable(void **state)
{
	(void)state;
	NEED_ENV();
	struct vsnap before;
	struct dxlt_history *h = dxlt_history_new();
	assert_non_null(h);
	history_seed(&g_nic, h, &before);
	g_churn = true;
	/* verbs in the Soft-RoCE guest (emulated CPUs): half the transactions */
	uint32_t k = dxlt_test_provider() == DXL_FABRIC_VERBS ? 2 : 1;
	xfer_run(&g_nic, DXL_TXN_HYBRID, false, false, 12, 60 / k, h, NULL, 1);
	xfer_run(&g_nic, DXL_TXN_ONESIDED, false, false, 12, 40 / k, h, NULL, 2);
	g_churn = false;
	int64_t after = history_final(&g_nic, h);
	check_history(h, true);
	dxlt_history_free(h);
	assert_int_equal(after, before.total);
}

/* validation disabled: the checker must find the write skew */
static void test_checker_catches_no_validation(void **state)
{
	(void)state;
	NEED_ENV();
	/* the write skew needs two transactions to interleave between their
	 * reads and their commits: a round on a loaded machine can miss it,
	 * so up to 6 rounds (other seeds) until the checker finds one */
	struct dxlt_history *h;
	int found = 0, round;
	for (round = 0; round < 6 && !found; round++) {
		h = dxlt_history_new();
		assert_non_null(h);
		history_seed(&g_nic, h, NULL);
		xfer_run(&g_nic, DXL_TXN_HYBRID, true, true, 16, 60, h, NULL, 3 + 10 * round);
		char why[2048];
		found = dxlt_history_check(h, why, sizeof(why), NULL, NULL) == 1;
		print_message("  round %d without validation: %s\n", round + 1,
			      found ? why : "no anomaly this time");
		dxlt_history_free(h);
	}
	if (!found)
		fail_msg("validation disabled: 6 rounds of the write-skew workload and the "
			 "checker found no anomaly");
	/* the same workload validated is serializable */
	h = dxlt_history_new();
	history_seed(&g_nic, h, NULL);
	xfer_run(&g_nic, DXL_TXN_HYBRID, false, true, 16, 60, h, NULL, 4);
	history_final(&g_nic, h);
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
	struct vsnap before;
	struct dxlt_history *h = dxlt_history_new();
	history_seed(&g_nic, h, &before);
	g_churn = true;
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
	g_churn = false;
	size_t lines = 0;
	for (int i = 0; i < NPROC; i++)
		lines += history_load(h, path[i], NULL);
	assert_true(lines >= (size_t)NPROC * 8 * 40 * 2);
	int64_t after = history_final(&g_nic, h);
	check_history(h, true);
	dxlt_history_free(h);
	assert_int_equal(after, before.total);
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
	history_seed(&g_cpu, h, NULL);
	g_churn = true;
	xfer_run(&g_cpu, DXL_TXN_TWOSIDED, false, false, 12, 50, h, NULL, 5);
	g_churn = false;
	history_final(&g_cpu, h);
	check_history(h, true);
	dxlt_history_free(h);
	assert_int_equal(sum_accounts(&g_cpu), NACCT * BASE_BAL + 110);
	/* hybrid needs NIC-owned lock words: a clear error, nothing changed */
	env_open(&e, &g_cpu, DXL_TXN_HYBRID, false);
	assert_int_equal(one(&e, 'p', 2, 5, "x", NULL), DXL_E_NOENT);
	struct one o = {.e = &e, .op = 'i', .table = T_ACCT, .key = 1000, .len = 8};
	put64(o.val, 5);
	run1(&e, co_one, &o);
	assert_int_equal(o.ret, DXL_E_CONFIG);
	env_close(&e);
	assert_int_equal(sum_accounts(&g_cpu), NACCT * BASE_BAL + 110);
}

/* the stores of every replica of both shards of c, after its clean
 * shutdown: key by key, extra keys included (tests/lib/stores.h); and what
 * they hold is what the last transaction read (fin, taken before the
 * shutdown): every account it found, at its version, none it did not --
 * identical stores that lost the accounts would pass the comparison alone */
static void compare_stores(const struct cl *c, const struct vsnap *fin)
{
	char root[300];
	snprintf(root, sizeof(root), "%s/data", c->dir);
	const uint32_t nodes[3] = {1, 2, 3};
	uint64_t keys = 0;
	struct dxlt_recset rs[2];
	for (uint32_t shard = 0; shard < 2; shard++) {
		char why[2048];
		struct dxlt_stores_report rep;
		int r = dxlt_stores_compare(root, c->name, shard, nodes, 3, DXL_DUR_PROCESS, why,
					    sizeof(why), &rep);
		if (r)
			fail_msg("%s shard %u: the replicas' stores differ: %s", c->name, shard, why);
		print_message("  shard %u: %" PRIu64 " keys identical on the 3 replicas (%" PRIu64
			      " tombstones)\n", shard, rep.keys, rep.tombstones);
		assert_int_equal(rep.records, 3 * rep.keys);
		keys += rep.keys;
		if (dxlt_store_load(root, c->name, 1, shard, DXL_DUR_PROCESS, &rs[shard]))
			fail_msg("%s", dxl_errmsg());
	}
	uint32_t present = 0;
	for (uint64_t k = 0; k < NACCT; k++) {
		const struct dxlt_rec *a = dxlt_recset_find(&rs[0], T_ACCT, k);
		const struct dxlt_rec *b = dxlt_recset_find(&rs[1], T_ACCT, k);
		if (a && b)
			fail_msg("account %" PRIu64 " is in both shards' stores", k);
		const struct dxlt_rec *x = a ? a : b;
		if (fin->absent[k] && x)
			fail_msg("account %" PRIu64 ": the last transaction found none, the stores have version %" PRIu64,
				 k, x->version);
		if (!fin->absent[k] && (!x || x->version != fin->v[k]))
			fail_msg("account %" PRIu64 ": the last transaction read version %" PRIu64 ", the stores have %s%" PRIu64,
				 k, fin->v[k], x ? "version " : "nothing: ", x ? x->version : 0);
		present += !fin->absent[k];
	}
	print_message("  the %u accounts the last transaction found are in the stores at its versions\n",
		      present);
	assert_true(keys > 0);
	assert_true(keys >= present);
	dxlt_recset_free(&rs[0]);
	dxlt_recset_free(&rs[1]);
}

static void restart_node(const struct cl *c, const char *node)
{
	const char *rs[] = {"cluster", "restart", node, "--dir", c->dir, NULL};
	assert_int_equal(run_dxl(rs, 60000), 0);
}

/* occurrences of what in node's log */
static int log_count(const struct cl *c, const char *node, const char *what)
{
	char path[400];
	snprintf(path, sizeof(path), "%s/logs/replica-%s.log", c->dir, node);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	char line[2048];
	int n = 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

/* before the stores are compared: the backups have had time to apply
 * what was decided last (a sanitizer build is several times slower) */
static void settle(void)
{
	sleep(getenv("DXL_TEST_SANITIZER") ? 8 : 2);
}

/* ---- issue 20: replicas converge; existence answers are validated ------------- */

static struct cl g_cv;

/* every shard of c has its 3 members again (within timeout_ms) */
static bool wait_full(const struct cl *c, int timeout_ms)
{
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	struct dxl_zk *zk = zk_open(c);
	bool ok = false;
	while (!ok && dxl_now_ms() < end) {
		struct dxl_cluster_config cf;
		if (dxl_cluster_config_read(zk, &cf, NULL) == 0) {
			ok = cf.nshards > 0;
			for (uint32_t i = 0; i < cf.nshards; i++)
				ok = ok && cf.shards[i].nbackups == 2;
			dxl_cluster_config_clear(&cf);
		}
		if (!ok)
			usleep(200 * 1000);
	}
	dxl_zk_delete(&zk);
	return ok;
}

static void kill_node(const struct cl *c, const char *node)
{
	const char *args[] = {"cluster", "kill", node, "--dir", c->dir, NULL};
	assert_int_equal(run_dxl(args, 30000), 0);
}

/* a coordinator on a host whose clock is 1.5 s behind */
static uint64_t wall_behind(void)
{
	return dxl_wall_ms() - 1500;
}

static void env_open_cfg(struct env *e, const struct cl *c, const struct dxl_coord_cfg *cfg)
{
	memset(e, 0, sizeof(*e));
	e->zk = zk_open(c);
	if (dxl_coord_new(e->zk, cfg, &e->c))
		fail_msg("dxl_coord_new: %s", dxl_errmsg());
	if (dxl_coord_worker_new(e->c, 16, &e->w))
		fail_msg("worker: %s", dxl_errmsg());
}

struct one_info {
	struct one o;
	struct dxl_txn_info info;
	uint32_t max_tries; /* 0: dxl_txn_run's default */
};

static int one_fn(struct dxl_txn *t, void *arg)
{
	struct one *o = arg;
	switch (o->op) {
	case 'p':
		return dxl_txn_put(t, o->table, o->key, o->val, o->len);
	case 'i':
		return dxl_txn_insert(t, o->table, o->key, o->val, o->len);
	default:
		return dxl_txn_delete(t, o->table, o->key);
	}
}

/* one write through dxl_txn_run (conflicts and a configuration that is
 * still changing are retried) */
static void co_one_info(void *arg)
{
	struct one_info *x = arg;
	x->o.ret = dxl_txn_run(x->o.e->w, one_fn, &x->o, x->max_tries, &x->info);
}

/* one write, its commit timestamp */
static uint64_t write_ts(struct env *e, int op, uint64_t key, int64_t v)
{
	struct one_info x = {.o = {.e = e, .op = op, .table = T_ACCT, .key = key, .len = 8}};
	put64(x.o.val, v);
	run1(e, co_one_info, &x);
	if (x.o.ret)
		fail_msg("%c key %" PRIu64 ": %s: %s", op, key, dxl_errname(x.o.ret), dxl_errmsg());
	assert_true(x.info.commit_ts > 0);
	return x.info.commit_ts;
}

/*
 * Defect 1: a key deleted at the primary came back at the backups and at a
 * promoted primary when the deleting coordinator's clock was behind the
 * writer's: backups apply in commit-timestamp order, and a delete left no
 * tombstone. Coordinator B's clock is 1.5 s behind A's. Each delete (or
 * insert over a delete) by B right after A's write must get a larger
 * commit timestamp (conflict order); the promoted primary and every
 * replica's store must not hold the deleted keys.
 */
static void test_skewed_clocks(void **state)
{
	(void)state;
	NEED_ENV();
	if (cluster_up(&g_cv, "cv", "nic"))
		fail_msg("cluster up");
	struct env a, b;
	env_open(&a, &g_cv, DXL_TXN_HYBRID, false);
	struct dxl_coord_cfg cfg;
	dxl_coord_cfg_init(&cfg);
	cfg.wall_ms = wall_behind;
	env_open_cfg(&b, &g_cv, &cfg);
	/* keys 500.. on both shards */
	for (uint64_t k = 500; k < 504; k++) {
		/* insert then delete */
		uint64_t t1 = write_ts(&a, 'i', k, 1);
		uint64_t t2 = write_ts(&b, 'd', k, 0);
		if (t2 <= t1)
			fail_msg("key %" PRIu64 ": the delete's commit timestamp %" PRIu64
				 " is not above the insert's %" PRIu64 " it deleted", k, t2, t1);
	}
	for (uint64_t k = 510; k < 514; k++) {
		/* update then delete */
		write_ts(&a, 'i', k, 1);
		uint64_t t1 = write_ts(&a, 'p', k, 2);
		uint64_t t2 = write_ts(&b, 'd', k, 0);
		if (t2 <= t1)
			fail_msg("key %" PRIu64 ": the delete's commit timestamp %" PRIu64
				 " is not above the update's %" PRIu64, k, t2, t1);
	}
	for (uint64_t k = 520; k < 524; k++) {
		/* delete then insert again: the insert replaces the tombstone */
		write_ts(&a, 'i', k, 1);
		uint64_t t1 = write_ts(&a, 'd', k, 0);
		uint64_t t2 = write_ts(&b, 'i', k, 3);
		if (t2 <= t1)
			fail_msg("key %" PRIu64 ": the insert's commit timestamp %" PRIu64
				 " is not above the delete's %" PRIu64 " it replaced", k, t2, t1);
	}
	env_close(&b);
	env_close(&a);
	/* the backups applied it; node 1, the primary of both shards, dies: a
	 * backup is promoted and serves */
	sleep(2);
	kill_node(&g_cv, "1");
	env_open(&a, &g_cv, DXL_TXN_HYBRID, false);
	uint64_t end = dxl_now_ms() + 30000;
	for (uint64_t k = 500; k < 524; k++) {
		if (k % 10 >= 4)
			continue;
		char buf[16];
		int r;
		while ((r = one(&a, 'g', T_ACCT, k, NULL, buf)) == DXL_E_UNAVAIL ||
		       r == DXL_E_CONFLICT)
			assert_true(dxl_now_ms() < end);
		if (k < 520 && r != DXL_E_NOENT)
			fail_msg("key %" PRIu64 ", deleted (acknowledged), is back at the promoted primary (%s)",
				 k, dxl_errname(r));
		if (k >= 520 && r != 0)
			fail_msg("key %" PRIu64 ", inserted again, is not at the promoted primary (%s)",
				 k, dxl_errname(r));
	}
	env_close(&a);
	restart_node(&g_cv, "1");
	if (!wait_full(&g_cv, 30000))
		fail_msg("the shards did not get their 3 members back");
}

/*
 * Found by the churn under failover: the lock phase posts a CAS and a READ
 * per record, all before it waits; when a later record's primary could not
 * be reached it returned at once. The posted CAS still landed -- a lock
 * word the transaction never released (its own coordinator then met it on
 * every retry: "locked by" itself, for good) -- and the READ's completion
 * was taken later by another wait of the coroutine, whose own READ had not
 * landed yet (a record "read" 8 bytes off). Shard 0's primary is node 3,
 * shard 1's node 2; node 2 dies between a transaction's reads and its
 * commit: the commit fails, then the key of shard 0 must be writable and
 * readable again by the same coordinator.
 */
struct lp_case {
	struct env *e;
	const struct cl *c;
	int step;
	int r_commit, r_after, r_b;
};

/* B: node 2 dies; B's read of a shard-1 key fails on the worker's QP to
 * node 2, which is then in error (A's lock phase must reconnect, and
 * cannot) */
static void co_lp_b(void *arg)
{
	struct lp_case *x = arg;
	while (x->step < 1)
		dxl_co_yield();
	kill_node(x->c, "2");
	dxl_co_sleep_ms(300);
	struct one o = {.e = x->e, .op = 'g', .table = T_ACCT, .key = 543};
	co_one(&o);
	x->r_b = o.ret;
	x->step = 2;
}

static void co_lp(void *arg)
{
	struct lp_case *x = arg;
	struct dxl_txn *t;
	uint8_t v[8];
	uint32_t len;
	assert_int_equal(dxl_txn_begin(x->e->w, &t), 0);
	assert_int_equal(dxl_txn_get(t, T_ACCT, 540, v, 8, &len), 0); /* shard 0 */
	assert_int_equal(dxl_txn_get(t, T_ACCT, 541, v, 8, &len), 0); /* shard 1 */
	put64(v, 5);
	assert_int_equal(dxl_txn_put(t, T_ACCT, 540, v, 8), 0);
	assert_int_equal(dxl_txn_put(t, T_ACCT, 541, v, 8), 0);
	x->step = 1;
	while (x->step < 2)
		dxl_co_yield();
	x->r_commit = dxl_txn_commit(t, NULL);
	if (x->r_commit)
		print_message("  the commit: %s\n", dxl_errmsg());
	/* shard 0 alone, the same coordinator (bounded: a lock it left
	 * behind would make every try a conflict) */
	struct one o = {.e = x->e, .op = 'p', .table = T_ACCT, .key = 540, .len = 8};
	put64(o.val, 6);
	for (int k = 0; k < 200; k++) {
		co_one(&o);
		if (o.ret != DXL_E_CONFLICT && o.ret != DXL_E_UNAVAIL)
			break;
		dxl_co_sleep_ms(20);
	}
	x->r_after = o.ret;
}

static void test_lock_phase_error(void **state)
{
	(void)state;
	NEED_ENV();
	if (!g_cv.up && cluster_up(&g_cv, "cv", "nic"))
		fail_msg("cluster up");
	if (!wait_full(&g_cv, 30000))
		fail_msg("the shards do not have their 3 members");
	struct env e;
	env_open(&e, &g_cv, DXL_TXN_HYBRID, false);
	for (uint64_t k = 540; k < 544; k++)
		write_ts(&e, 'i', k, 1);
	env_close(&e);
	/* shard 0: primary 3; shard 1: primary 2 */
	struct dxl_zk *zk = zk_open(&g_cv);
	struct dxl_cluster_config cf;
	int32_t ver;
	assert_int_equal(dxl_cluster_config_read(zk, &cf, &ver), 0);
	cf.epoch++;
	uint32_t b0[2] = {1, 2}, b1[2] = {1, 3};
	assert_int_equal(dxl_cluster_config_set_shard(&cf, 0, 3, b0, 2), 0);
	assert_int_equal(dxl_cluster_config_set_shard(&cf, 1, 2, b1, 2), 0);
	assert_int_equal(dxl_cluster_config_cas(zk, &cf, ver, NULL), 0);
	dxl_cluster_config_clear(&cf);
	dxl_zk_delete(&zk);
	env_open(&e, &g_cv, DXL_TXN_HYBRID, false);
	/* until both new primaries serve */
	uint64_t end = dxl_now_ms() + 30000;
	char buf[16];
	while (one(&e, 'g', T_ACCT, 540, NULL, buf) || one(&e, 'g', T_ACCT, 541, NULL, buf))
		assert_true(dxl_now_ms() < end);
	struct lp_case x = {.e = &e, .c = &g_cv};
	assert_int_equal(dxl_coord_worker_spawn(e.w, co_lp, &x), 0);
	assert_int_equal(dxl_coord_worker_spawn(e.w, co_lp_b, &x), 0);
	assert_int_equal(dxl_coord_worker_run(e.w), 0);
	print_message("  a read on the dead primary: %s; commit with shard 1's primary gone: %s; shard 0 written after: %s\n",
		      dxl_errname(x.r_b), dxl_errname(x.r_commit), dxl_errname(x.r_after));
	assert_true(x.r_commit != 0);
	if (x.r_after)
		fail_msg("key 540 (shard 0) not writable by the same coordinator after a failed lock phase: %s",
			 dxl_errname(x.r_after));
	/* and by another coordinator while this one lives (a dead one's locks
	 * are released by resolution): no lock word was left behind (the old
	 * code left one, and its next transaction "locked" 540 through the
	 * stale completion, writing without the lock) */
	struct dxl_coord_cfg cfg;
	dxl_coord_cfg_init(&cfg);
	cfg.log_unavail_ms = 1000;
	struct env e2;
	env_open_cfg(&e2, &g_cv, &cfg);
	struct one_info y = {.o = {.e = &e2, .op = 'p', .table = T_ACCT, .key = 540, .len = 8},
			     .max_tries = 50};
	put64(y.o.val, 7);
	run1(&e2, co_one_info, &y);
	if (y.o.ret)
		fail_msg("key 540 not writable by another coordinator: %s: %s", dxl_errname(y.o.ret),
			 dxl_errmsg());
	env_close(&e2);
	env_close(&e);
	restart_node(&g_cv, "2");
	if (!wait_full(&g_cv, 40000))
		fail_msg("the shards did not get their 3 members back");
}

/*
 * Defect 4: an abort marker that cannot be written within log_unavail_ms
 * left its record undecided for the coordinator's life: its ring's
 * watermark stopped below it, and no backup applied anything the worker
 * committed later. Both backups die while a transaction appends (its
 * record may be in the log: maybe); they come back; the worker must mark
 * the record (and so decide it) and its later commits must reach every
 * replica's store.
 */
static void test_abort_marker_retried(void **state)
{
	(void)state;
	NEED_ENV();
	if (!g_cv.up && cluster_up(&g_cv, "cv", "nic"))
		fail_msg("cluster up");
	struct dxl_coord_cfg cfg;
	dxl_coord_cfg_init(&cfg);
	cfg.log_unavail_ms = 1500;
	struct env w;
	env_open_cfg(&w, &g_cv, &cfg);
	/* the writers of both shards open (the cluster may still be taking
	 * back a member an earlier test restarted) */
	uint64_t end0 = dxl_now_ms() + 30000;
	for (uint64_t k = 530; k < 534; k++)
		for (;;) {
			struct one_info y = {.o = {.e = &w, .op = 'i', .table = T_ACCT, .key = k,
						   .len = 8}};
			put64(y.o.val, 1);
			run1(&w, co_one_info, &y);
			if (!y.o.ret)
				break;
			if (dxl_now_ms() > end0)
				fail_msg("key %" PRIu64 ": %s: %s", k, dxl_errname(y.o.ret), dxl_errmsg());
			usleep(200 * 1000);
		}
	/* the two backups of shard 0 (key 530's) */
	struct dxl_zk *zk = zk_open(&g_cv);
	struct dxl_cluster_config cf;
	assert_int_equal(dxl_cluster_config_read(zk, &cf, NULL), 0);
	const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&cf, 0);
	assert_non_null(sh);
	assert_int_equal(sh->nbackups, 2);
	char bk[2][16];
	for (int i = 0; i < 2; i++)
		snprintf(bk[i], sizeof(bk[i]), "%u", sh->backups[i]);
	dxl_cluster_config_clear(&cf);
	dxl_zk_delete(&zk);
	kill_node(&g_cv, bk[0]);
	kill_node(&g_cv, bk[1]);
	struct one_info x = {.o = {.e = &w, .op = 'p', .table = T_ACCT, .key = 530, .len = 8}};
	put64(x.o.val, 7);
	run1(&w, co_one_info, &x);
	print_message("  with both backups dead: %s, maybe %d\n", dxl_errname(x.o.ret),
		      (int)x.info.maybe);
	assert_int_equal(x.o.ret, DXL_E_UNAVAIL);
	assert_true(x.info.maybe); /* sent: it may be in the log */
	restart_node(&g_cv, bk[0]);
	restart_node(&g_cv, bk[1]);
	/* later commits of the same worker (its writers of both shards; not
	 * key 530, whose lock the failed transaction may have left: issue 12) */
	uint64_t end = dxl_now_ms() + 40000;
	for (uint64_t k = 532; k < 534; k++)
		for (;;) {
			struct one_info y = {.o = {.e = &w, .op = 'p', .table = T_ACCT, .key = k,
						   .len = 8}};
			put64(y.o.val, 100 + (int64_t)k);
			run1(&w, co_one_info, &y);
			if (!y.o.ret)
				break;
			if (dxl_now_ms() > end)
				fail_msg("key %" PRIu64 ": %s: %s", k, dxl_errname(y.o.ret), dxl_errmsg());
			usleep(200 * 1000);
		}
	if (!wait_full(&g_cv, 40000))
		fail_msg("the shards did not get their 3 members back");
	env_close(&w);
	settle();
	struct vsnap fin;
	snapshot(&g_cv, &fin);
	cluster_down(&g_cv);
	compare_stores(&g_cv, &fin);
}

/*
 * Defect 2: existence answers are reads. An insert-then-delete relied on
 * the key's absence; a put that found no key returned that answer; both
 * must fail to commit once another transaction inserted the key. And an
 * insert never answers "exists" for a record another transaction inserted
 * and has not committed (it may abort: a dirty read).
 */
struct exist_case {
	struct env *e;
	int step;
	int r_main, r_other;
	uint64_t key;
	int kind; /* 0 insert-then-delete, 1 put of an absent key */
};

static void co_exist_main(void *arg)
{
	struct exist_case *c = arg;
	struct dxl_txn *t;
	assert_int_equal(dxl_txn_begin(c->e->w, &t), 0);
	uint8_t v[8] = {1};
	if (c->kind == 0) {
		assert_int_equal(dxl_txn_insert(t, T_ACCT, c->key, v, 8), 0);
		assert_int_equal(dxl_txn_delete(t, T_ACCT, c->key), 0);
	} else {
		assert_int_equal(dxl_txn_put(t, T_ACCT, c->key, v, 8), DXL_E_NOENT);
		/* acting on the answer: a write elsewhere */
		assert_int_equal(dxl_txn_insert(t, T_ACCT, c->key + 1, v, 8), 0);
	}
	c->step = 1;
	while (c->step < 2)
		dxl_co_yield();
	c->r_main = dxl_txn_commit(t, NULL);
}

static void co_exist_other(void *arg)
{
	struct exist_case *c = arg;
	while (c->step < 1)
		dxl_co_yield();
	struct dxl_txn *t;
	assert_int_equal(dxl_txn_begin(c->e->w, &t), 0);
	uint8_t v[8] = {2};
	assert_int_equal(dxl_txn_insert(t, T_ACCT, c->key, v, 8), 0);
	c->r_other = dxl_txn_commit(t, NULL);
	c->step = 2;
}

struct dirty {
	struct env *e;
	int round, done_a, step;
	uint64_t key, rkey;
	int a_conflicts, b_exist, b_conflict, b_absent;
};

/* A: reads rkey, inserts key, commits after C changed rkey: its insert is
 * live (locked) between its lock phase and its failed validation */
static void co_dirty_a(void *arg)
{
	struct dirty *d = arg;
	struct dxl_txn *t;
	uint8_t v[8];
	uint32_t len;
	assert_int_equal(dxl_txn_begin(d->e->w, &t), 0);
	assert_int_equal(dxl_txn_get(t, T_ACCT, d->rkey, v, 8, &len), 0);
	assert_int_equal(dxl_txn_insert(t, T_ACCT, d->key, v, 8), 0);
	d->step = 1;
	while (d->step < 2)
		dxl_co_yield(); /* C: rkey changes under A's read */
	int r = dxl_txn_commit(t, NULL);
	assert_int_equal(r, DXL_E_CONFLICT);
	d->a_conflicts++;
	d->done_a = 1;
}

static void co_dirty_c(void *arg)
{
	struct dirty *d = arg;
	while (d->step < 1)
		dxl_co_yield();
	struct one c = {.e = d->e, .op = 'p', .table = T_ACCT, .key = d->rkey, .len = 8};
	put64(c.val, d->round);
	co_one(&c);
	assert_int_equal(c.ret, 0);
	d->step = 2;
}

/* B: inserts key again and again while A commits */
static void co_dirty_b(void *arg)
{
	struct dirty *d = arg;
	while (!d->done_a) {
		struct dxl_txn *t;
		assert_int_equal(dxl_txn_begin(d->e->w, &t), 0);
		uint8_t v[8] = {0};
		int r = dxl_txn_insert(t, T_ACCT, d->key, v, 8);
		if (r == DXL_E_EXIST)
			d->b_exist++; /* the key never existed committed */
		else if (r == DXL_E_CONFLICT)
			d->b_conflict++;
		else if (r == 0)
			d->b_absent++;
		if (r != DXL_E_CONFLICT)
			dxl_txn_abort(t);
		dxl_co_yield();
	}
}

static void test_existence_validated(void **state)
{
	(void)state;
	NEED_ENV();
	struct env e;
	env_open(&e, &g_nic, DXL_TXN_HYBRID, false);
	for (int kind = 0; kind < 2; kind++) {
		struct exist_case c = {.e = &e, .key = 700 + 10 * (uint64_t)kind, .kind = kind};
		assert_int_equal(dxl_coord_worker_spawn(e.w, co_exist_main, &c), 0);
		assert_int_equal(dxl_coord_worker_spawn(e.w, co_exist_other, &c), 0);
		assert_int_equal(dxl_coord_worker_run(e.w), 0);
		assert_int_equal(c.r_other, 0);
		if (c.r_main != DXL_E_CONFLICT)
			fail_msg("%s: committed (%s) on an absence another transaction ended first",
				 kind ? "a put answered 'no such key'" : "an insert then delete",
				 dxl_errname(c.r_main));
	}
	/* dirty existence: A's insert never commits */
	struct dirty d = {.e = &e, .key = 730, .rkey = 731};
	assert_int_equal(one(&e, 'i', T_ACCT, d.rkey, "12345678", NULL), 0);
	for (d.round = 0; d.round < 40; d.round++) {
		d.done_a = 0;
		d.step = 0;
		assert_int_equal(dxl_coord_worker_spawn(e.w, co_dirty_a, &d), 0);
		assert_int_equal(dxl_coord_worker_spawn(e.w, co_dirty_c, &d), 0);
		assert_int_equal(dxl_coord_worker_spawn(e.w, co_dirty_b, &d), 0);
		assert_int_equal(dxl_coord_worker_run(e.w), 0);
	}
	print_message("  an insert that never committed, seen by another insert: %d times 'exists', %d conflicts, %d absent (A aborted %d times)\n",
		      d.b_exist, d.b_conflict, d.b_absent, d.a_conflicts);
	assert_int_equal(d.a_conflicts, 40);
	if (d.b_exist)
		fail_msg("%d inserts answered 'exists' for a key whose only insert never committed",
			 d.b_exist);
	assert_true(d.b_conflict > 0); /* the window was hit */
	env_close(&e);
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

/* transfers, closes and opens for ms milliseconds while node `node` is
 * killed after delay_ms; then, with the accounts as the new primary holds
 * them read last (after every acknowledgement): strictly serializable
 * (a lost commit, a deleted account back, a commit nobody made are
 * cycles or impossible reads), money conserved */
static void run_through_kill(const char *node, unsigned delay_ms, unsigned ms, uint64_t seed)
{
	struct vsnap before;
	struct dxlt_history *h = dxlt_history_new();
	history_seed(&g_fo, h, &before);
	struct killer k = {.c = &g_fo, .node = node, .delay_ms = delay_ms};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, killer_main, &k), 0);
	g_deadline_ms = dxl_now_ms() + ms;
	g_churn = true;
	xfer_run(&g_fo, DXL_TXN_HYBRID, false, false, 8, 0, h, NULL, seed);
	g_churn = false;
	g_deadline_ms = 0;
	pthread_join(th, NULL);
	assert_int_equal(k.rc, 0);
	int64_t after = history_final(&g_fo, h);
	check_history(h, true);
	dxlt_history_free(h);
	assert_int_equal(after, before.total);
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
	restart_node(&g_fo, "1");
	sleep(3);
	/* the new primary (2) dies: a backup that applied the log serves */
	run_through_kill("2", 1500, 6000, 22);
	/* the stores: the promoted primary's, the backup's, and node 2's
	 * (back, caught up) hold the same keys */
	int started = log_count(&g_fo, "2", "event=apply_started");
	restart_node(&g_fo, "2");
	if (!wait_full(&g_fo, 40000))
		fail_msg("the shards did not get their 3 members back");
	/* node 2 applies both shards' logs again (a backup) */
	uint64_t end = dxl_now_ms() + 60000;
	while (log_count(&g_fo, "2", "event=apply_started") < started + 2) {
		if (dxl_now_ms() > end)
			fail_msg("node 2 did not start applying both shards");
		usleep(100 * 1000);
	}
	settle();
	struct vsnap fin;
	snapshot(&g_fo, &fin);
	cluster_down(&g_fo);
	compare_stores(&g_fo, &fin);
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
	history_load(NULL, path, writes);
	size_t child_commits = 0;
	for (uint64_t k = 0; k < NACCT; k++)
		child_commits += writes[k];
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
	settle();
	struct vsnap fin;
	snapshot(&g_kc, &fin);
	cluster_down(&g_kc);
	compare_stores(&g_kc, &fin);
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
	cluster_down(&g_cv);
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
		cmocka_unit_test(test_existence_validated),
		cmocka_unit_test(test_skewed_clocks),
		cmocka_unit_test(test_lock_phase_error),
		cmocka_unit_test(test_abort_marker_retried),
	};
	/* DXL_TEST_FILTER: one cmocka pattern, or several separated by commas
	 * (the Soft-RoCE guest runs a subset: tests/rdma/cluster.list) */
	struct CMUnitTest tests[sizeof(all) / sizeof(all[0])];
	size_t n = dxlt_select_tests(all, sizeof(all) / sizeof(all[0]), tests,
				     getenv("DXL_TEST_FILTER"));
	return _cmocka_run_group_tests("test_txn", tests, n, group_setup,
				       group_teardown);
}
