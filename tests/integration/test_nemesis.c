/* test_nemesis.c -- serializable and live under seeded faults (issue 12):
 * a fault harness over a real local cluster with checkers that can fail.
 *
 * The cluster: a 3-server ZooKeeper ensemble (scripts/zk.sh --servers 3),
 * 3 dxl-replica processes, 2 shards, 3-way replication, small rings with
 * retention by size (a replica kept down has to copy its way back), and two
 * coordinator processes (this binary run again as a child: no fork with
 * ZooKeeper's threads) that never stop transacting:
 *   - SmallBank (bench/lib/smallbank.h) on 30 accounts (60 keys, a hot set);
 *   - list-append: transactions read lists of unique elements and append
 *     to them (1..3 keys, tables 3), checked by tests/lib/listappend.h --
 *     from values alone, not from dxl's versions;
 *   - a read-only audit: every SmallBank balance in one transaction;
 *   - registers: keys 1000..1011 of table 1 inserted, updated, deleted and
 *     read (absence included), checked by tests/lib/history.h with
 *     tombstones, absence reads and real-time order (strict
 *     serializability of what was acknowledged).
 * Each child logs, at its transaction's commit point (the coordinator's
 * test hook DXL_TXN_HOOK_LOGGED), what it read and wrote (keys, versions,
 * elements), then its outcome; a child killed in between leaves the
 * transaction's outcome unknown, which the checkers resolve from what is
 * visible.
 *
 * A schedule (a seed) = a few steps; each step draws a fault kind
 * (tests/lib/nemesis.h: kill -9 of a primary or a backup, SIGSTOP past the
 * session timeout then SIGCONT, power failure, coordinator kill, ZooKeeper
 * server kill and restart, a backup held down for steps then returned and
 * promoted -- listed first among a shard's backups, its primary killed: it
 * must become primary; the reconfiguration kinds of issue 16: a restart with
 * ZooKeeper replies lost, pauses at test points, a restart on an empty data
 * directory, crosswise joins, a second failure during a join pull; and this
 * test's stop-coordinator: a coordinator process stopped past its session
 * timeout, then continued) and runs it. Each kind counts as covered when
 * applied with its fault firing (tests/lib/nemesis.h); in CI's run (>= 30
 * steps, or DXL_NEMESIS_COVER=1) each step first draws a kind not covered
 * yet, a schedule runs up to 3 more steps to finish a hold -> return ->
 * promote chain, and up to 4 more schedules run while a kind is uncovered:
 * the test fails if one stays so. A `dxl log load --verify` appends to
 * every shard through the whole schedule; after it, every member's copy
 * must hold each acknowledged append. After the schedule:
 *   - SmallBank + audits: the conflict graph (tests/lib/history.h) of every
 *     committed transaction (versions read and written), seeded with the
 *     versions at the schedule's start: no cycle; every version between the
 *     start and the end of each key written by exactly one transaction
 *     (unknown ones placed where their writes are); money = start + the
 *     deltas of what committed; every audit's sum = start + the deltas of
 *     the transactions it saw;
 *   - list-append: dxlt_la_check over every transaction and the final lists;
 *   - liveness: the longest time without a commit (any process) while a
 *     step runs must stay under the session timeout + 2 s.
 *   - the stores: `dxl cluster verify --wait` (the members' digests), then
 *     copies of the three replicas' store files compared key by key
 *     (tests/lib/stores.h), extra keys included.
 * At the end the three replicas' stores are compared record by record.
 *
 * Environment: DXL_NEMESIS_SCHEDULES (10), DXL_NEMESIS_STEPS (3),
 * DXL_NEMESIS_SEED (first seed; time by default), DXL_NEMESIS_FAULTS (only
 * these kinds, comma-separated), DXL_NEMESIS_NO_VALIDATION=1 and
 * DXL_NEMESIS_NO_FENCE=1 (the coordinators skip validation / the read
 * fence: the checkers must then find anomalies -- the harness's teeth),
 * DXL_NEMESIS_EXPECT_ANOMALY=1 (fail unless an anomaly is found),
 * DXL_NEMESIS_NIC_PAUSE_MS=N (replica.test_nic_pause_ms: a stopped
 * replica's memory stays readable N ms after its lease lapsed, as with RDMA),
 * DXL_NEMESIS_NO_LIVENESS=1 (report gaps, do not fail on them),
 * DXL_NEMESIS_RECONFIG=1 (also issue 16's reconfiguration kinds: not in CI's
 * run yet, make test-long sets it),
 * DXL_NEMESIS_PLAN=kind,kind,... (the kinds of the steps, in order: with
 * the seed, a schedule replays), DXL_NEMESIS_COVER=1 (the coverage draw
 * and floors in a shorter run).
 * A failing schedule prints the command that runs it again (seed + plan).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <sys/stat.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <time.h>

#include "bench/lib/smallbank.c" /* the workload (bench/lib is not in libdxl) */
#include "common/common.h"
#include "common/endian.h"
#include "dxl/log.h"
#include "dxl/replica.h"
#include "dxl/txn.h"
#include "tests/integration/test_membership_util.h"
#include "tests/lib/cli_run.h"
#include "tests/lib/history.h"
#include "tests/lib/listappend.h"
#include "tests/lib/nemesis.h"
#include "tests/lib/proc.h"
#include "tests/lib/stores.h"

#define ACCTS 30
#define NSB (2 * ACCTS)
#define T_LIST 3
#define LIST_VSZ 512
#define MAXEL (LIST_VSZ / 4 - 1)
#define SESSION_MS 2000
#define MAXCH 64
/* the register workload: keys of table T_REG that transactions insert,
 * update, delete and read (tombstones, absence, unknown outcomes, real
 * time: tests/lib/history.h) */
#define T_REG 1
#define REG_BASE 1000
#define NREG 12

static uint32_t key_index(uint32_t table, uint64_t acct)
{
	return (uint32_t)((table == DXLB_SB_SAVINGS ? 0 : ACCTS) + acct);
}

/* ==== the child: a coordinator process ================================================ */

static volatile sig_atomic_t g_stop;
static FILE *g_log;
static struct dxlb_sb_cfg g_sb;
static uint32_t g_inc;        /* this child's incarnation (element ids) */
static uint32_t g_elem;       /* the next element */
static uint64_t g_list_base;  /* list keys of this schedule */
static uint64_t g_t0;         /* the schedule's start (wall ms) */

enum co_kind { CO_SB = 1, CO_LIST = 2, CO_AUDIT = 3, CO_REG = 4 };

struct la_op {
	uint64_t key;
	uint32_t n;
	uint32_t el[MAXEL + 1];
	bool append;
	uint32_t elem;
};

struct cctx { /* one coroutine's workload state */
	struct dxl_coord_worker *w;
	int kind;
	uint32_t co;
	uint64_t rng;
	/* SmallBank */
	const struct dxlb_sb_txn *x;
	struct dxl_txn *t;
	int64_t delta;
	uint32_t wk[DXLB_SB_MAX_KEYS], nw;
	/* list-append: the current attempt */
	struct la_op ops[3];
	uint32_t nops;
	/* every kind: when the current attempt began (CLOCK_MONOTONIC, one
	 * clock for every process: real-time order) */
	uint64_t begin_ns;
	int64_t sum; /* audits */
};

static struct cctx *g_cur[512]; /* by coroutine id: the hook's way in */

static void on_term(int sig)
{
	(void)sig;
	g_stop = 1;
}

/* the transaction's reads and writes: r (a value read), a (an absence
 * read), w (a value written), d (a delete: its tombstone); predict: before
 * its log phase (the VALIDATE hook) a write's version is not set yet -- it
 * will be the version under the lock + 2 (an insert's: the absence read's
 * + 1, + 2) */
static void log_footprint_ex(char *line, size_t cap, size_t *o, struct dxl_txn *t, bool predict)
{
	struct dxl_txn_access acc[64];
	int n = dxl_txn_footprint(t, acc, 64);
	for (int i = 0; i < n && i < 64 && *o < cap - 48; i++) {
		uint64_t v = acc[i].version;
		if (acc[i].write && predict) {
			v = 0;
			for (int k = 0; k < n && k < 64; k++)
				if (!acc[k].write && acc[k].table == acc[i].table && acc[k].key == acc[i].key)
					v = (acc[k].absent ? acc[k].version + 1 : acc[k].version) + 2;
		}
		char c = acc[i].write ? (acc[i].op == DXL_WS_DELETE ? 'd' : 'w') : (acc[i].absent ? 'a' : 'r');
		*o += (size_t)snprintf(line + *o, cap - *o, " %c:%u:%" PRIu64 ":%" PRIu64, c, acc[i].table,
				       acc[i].key, v);
	}
}

static void log_footprint(char *line, size_t cap, size_t *o, struct dxl_txn *t)
{
	log_footprint_ex(line, cap, o, t, false);
}

static void log_la_ops(char *line, size_t cap, size_t *o, const struct cctx *c, bool reads,
		       bool appends)
{
	for (uint32_t i = 0; i < c->nops && *o < cap - 64; i++) {
		const struct la_op *p = &c->ops[i];
		if (reads) {
			*o += (size_t)snprintf(line + *o, cap - *o, " r:%" PRIu64 ":", p->key);
			for (uint32_t k = 0; k < p->n && *o < cap - 16; k++)
				*o += (size_t)snprintf(line + *o, cap - *o, "%s%u", k ? "," : "", p->el[k]);
			if (!p->n)
				*o += (size_t)snprintf(line + *o, cap - *o, "-");
		}
		if (appends && p->append)
			*o += (size_t)snprintf(line + *o, cap - *o, " a:%" PRIu64 ":%u", p->key, p->elem);
	}
}

/* the coordinator's hook, in the transaction's coroutine */
static void child_hook(int where, uint64_t txn, void *arg)
{
	(void)arg;
	struct dxl_co *co = dxl_co_self();
	struct cctx *c = co ? g_cur[dxl_co_id(co) & 0x1ff] : NULL;
	if (!c)
		return;
	char line[8192];
	size_t o = 0;
	if (c->kind == CO_LIST && where == DXL_TXN_HOOK_VALIDATE) {
		/* every attempt that locked: its appends (an aborted one's must
		 * never be seen) */
		o += (size_t)snprintf(line, sizeof(line), "LP %u %" PRIx64, c->co, txn);
		log_la_ops(line, sizeof(line), &o, c, false, true);
	} else if (c->kind == CO_SB && where == DXL_TXN_HOOK_VALIDATE && c->nw) {
		/* every attempt that locked: the keys it writes. If this process
		 * dies before the X line (between the acknowledgements and the
		 * hook) it may still commit: its versions are placed by the
		 * checker like a maybe's */
		o += (size_t)snprintf(line, sizeof(line), "P %u %" PRIx64 " %" PRId64, c->co, txn,
				      c->delta);
		for (uint32_t i = 0; i < c->nw; i++)
			o += (size_t)snprintf(line + o, sizeof(line) - o, " %u", c->wk[i]);
	} else if (c->kind == CO_REG && where == DXL_TXN_HOOK_VALIDATE) {
		/* every attempt that locked: what it read, and what it will
		 * write (if this process dies before its GX line it may still
		 * commit: an unknown outcome with these versions) */
		o += (size_t)snprintf(line, sizeof(line), "GP %u %" PRIx64 " b:%" PRIu64, c->co, txn,
				      c->begin_ns);
		log_footprint_ex(line, sizeof(line), &o, dxl_txn_last(c->w), true);
	} else if (c->kind == CO_REG && where == DXL_TXN_HOOK_LOGGED) {
		o += (size_t)snprintf(line, sizeof(line), "GX %u %" PRIx64 " b:%" PRIu64, c->co, txn,
				      c->begin_ns);
		log_footprint(line, sizeof(line), &o, dxl_txn_last(c->w));
	} else if (where == DXL_TXN_HOOK_LOGGED) {
		/* the commit point: what it read and wrote */
		if (c->kind == CO_SB) {
			o += (size_t)snprintf(line, sizeof(line), "X %u %" PRIx64 " %" PRId64 " b:%" PRIu64,
					      c->co, txn, c->delta, c->begin_ns);
			log_footprint(line, sizeof(line), &o, dxl_txn_last(c->w));
		} else {
			o += (size_t)snprintf(line, sizeof(line), "LX %u %" PRIx64, c->co, txn);
			log_la_ops(line, sizeof(line), &o, c, true, true);
		}
	} else {
		return;
	}
	fprintf(g_log, "%s\n", line);
}

static int sb_get(void *arg, uint32_t table, uint64_t acct, int64_t *bal)
{
	struct cctx *c = arg;
	uint8_t v[8];
	uint32_t len;
	int ret = dxl_txn_get(c->t, table, acct, v, 8, &len);
	if (!ret)
		*bal = dxlb_sb_decode(v);
	return ret;
}

static int sb_put(void *arg, uint32_t table, uint64_t acct, int64_t bal)
{
	struct cctx *c = arg;
	uint8_t v[8];
	dxlb_sb_encode(bal, v);
	if (c->nw < DXLB_SB_MAX_KEYS)
		c->wk[c->nw++] = key_index(table, acct);
	return dxl_txn_put(c->t, table, acct, v, 8);
}

static int sb_fn(struct dxl_txn *t, void *arg)
{
	struct cctx *c = arg;
	static const struct dxlb_sb_ops ops = {sb_get, sb_put};
	c->begin_ns = dxl_now_ns();
	c->t = t;
	c->nw = 0;
	c->delta = 0;
	return dxlb_sb_exec(c->x, &ops, c, &c->delta);
}

static int la_fn(struct dxl_txn *t, void *arg)
{
	struct cctx *c = arg;
	uint64_t win = (dxl_wall_ms() - g_t0) / 4000;
	uint32_t n = 1 + (uint32_t)(dxlb_sb_rand(&c->rng) % 3);
	c->nops = 0;
	for (uint32_t i = 0; i < n; i++) {
		/* the keys of this 4-s window, or of the one before */
		uint64_t w = win && dxlb_sb_rand(&c->rng) % 4 == 0 ? win - 1 : win;
		uint64_t key = g_list_base + w * 4 + dxlb_sb_rand(&c->rng) % 4;
		bool dup = false;
		for (uint32_t k = 0; k < c->nops; k++)
			dup = dup || c->ops[k].key == key;
		if (dup)
			continue;
		struct la_op *p = &c->ops[c->nops++];
		p->key = key;
		uint8_t v[LIST_VSZ];
		uint32_t len = 0;
		int ret = dxl_txn_get(t, T_LIST, key, v, sizeof(v), &len);
		if (ret && ret != DXL_E_NOENT)
			return ret;
		bool exists = ret == 0;
		p->n = exists ? len / 4 : 0;
		for (uint32_t k = 0; k < p->n; k++)
			p->el[k] = dxl_get_le32(v + 4 * k);
		p->append = p->n < MAXEL && dxlb_sb_rand(&c->rng) % 3 != 0;
		if (!p->append)
			continue;
		p->elem = (g_inc << 20) | (++g_elem & 0xfffff);
		dxl_put_le32(v + 4 * p->n, p->elem);
		ret = exists ? dxl_txn_put(t, T_LIST, key, v, 4 * (p->n + 1))
			     : dxl_txn_insert(t, T_LIST, key, v, 4);
		if (ret)
			return ret;
	}
	return 0;
}

static int audit_fn(struct dxl_txn *t, void *arg)
{
	struct cctx *c = arg;
	c->begin_ns = dxl_now_ns();
	int64_t *sum = &c->sum;
	*sum = 0;
	for (uint32_t k = 0; k < NSB; k++) {
		uint8_t v[8];
		uint32_t len;
		int ret = dxl_txn_get(t, k < ACCTS ? DXLB_SB_SAVINGS : DXLB_SB_CHECKING, k % ACCTS, v, 8,
				      &len);
		if (ret)
			return ret;
		*sum += dxlb_sb_decode(v);
	}
	return 0;
}

/* a register transaction: 1-2 keys written (inserted if absent, else
 * updated or deleted), sometimes one more read; one in four reads only */
static int reg_fn(struct dxl_txn *t, void *arg)
{
	struct cctx *c = arg;
	c->begin_ns = dxl_now_ns();
	bool ro = dxlb_sb_rand(&c->rng) % 4 == 0;
	uint32_t nw = ro ? 0 : 1 + (uint32_t)(dxlb_sb_rand(&c->rng) % 2);
	uint32_t nr = ro ? 2 + (uint32_t)(dxlb_sb_rand(&c->rng) % 2) : (uint32_t)(dxlb_sb_rand(&c->rng) % 2);
	uint64_t used[4];
	uint32_t nu = 0;
	for (uint32_t i = 0; i < nw + nr; i++) {
		uint64_t key = REG_BASE + dxlb_sb_rand(&c->rng) % NREG;
		bool dup = false;
		for (uint32_t k = 0; k < nu; k++)
			dup = dup || used[k] == key;
		if (dup)
			continue;
		used[nu++] = key;
		uint8_t v[8];
		uint32_t len;
		int ret = dxl_txn_get(t, T_REG, key, v, 8, &len);
		if (ret && ret != DXL_E_NOENT)
			return ret;
		if (i >= nw)
			continue; /* a read */
		dxl_put_le64(v, dxlb_sb_rand(&c->rng));
		if (ret == DXL_E_NOENT)
			ret = dxl_txn_insert(t, T_REG, key, v, 8);
		else if (dxlb_sb_rand(&c->rng) % 3 == 0)
			ret = dxl_txn_delete(t, T_REG, key);
		else
			ret = dxl_txn_put(t, T_REG, key, v, 8);
		if (ret)
			return ret;
	}
	return 0;
}

static void co_main(void *arg)
{
	struct cctx *c = arg;
	g_cur[dxl_co_id(dxl_co_self()) & 0x1ff] = c;
	while (!g_stop) {
		struct dxl_txn_info info;
		int ret;
		char line[8192];
		size_t o = 0;
		if (c->kind == CO_SB) {
			struct dxlb_sb_txn x;
			dxlb_sb_gen(&g_sb, &c->rng, &x);
			c->x = &x;
			ret = dxl_txn_run(c->w, sb_fn, c, 0, &info);
			if (!ret && info.nwrites)
				fprintf(g_log, "C %u %" PRIx64 " %" PRIu64 " e:%" PRIu64 "\n", c->co, info.id,
					dxl_wall_ms(), dxl_now_ns());
			else if (!ret) {
				o += (size_t)snprintf(line, sizeof(line), "R %u %" PRIx64 " %" PRIu64 " b:%" PRIu64
						      " e:%" PRIu64, c->co, info.id, dxl_wall_ms(),
						      c->begin_ns, dxl_now_ns());
				log_footprint(line, sizeof(line), &o, dxl_txn_last(c->w));
				fprintf(g_log, "%s\n", line);
			} else if (info.maybe) {
				o += (size_t)snprintf(line, sizeof(line), "M %u %" PRIx64 " %" PRId64, c->co,
						      info.id, c->delta);
				for (uint32_t i = 0; i < c->nw; i++)
					o += (size_t)snprintf(line + o, sizeof(line) - o, " %u", c->wk[i]);
				fprintf(g_log, "%s\n", line);
			}
		} else if (c->kind == CO_LIST) {
			ret = dxl_txn_run(c->w, la_fn, c, 0, &info);
			if (!ret && info.nwrites)
				fprintf(g_log, "LC %u %" PRIx64 " %" PRIu64 "\n", c->co, info.id, dxl_wall_ms());
			else if (!ret) {
				o += (size_t)snprintf(line, sizeof(line), "LR %u %" PRIx64 " %" PRIu64, c->co,
						      info.id, dxl_wall_ms());
				log_la_ops(line, sizeof(line), &o, c, true, false);
				fprintf(g_log, "%s\n", line);
			} else if (info.maybe) {
				o += (size_t)snprintf(line, sizeof(line), "LM %u %" PRIx64, c->co, info.id);
				log_la_ops(line, sizeof(line), &o, c, true, true);
				fprintf(g_log, "%s\n", line);
			}
			dxl_co_sleep_ms(5);
		} else if (c->kind == CO_REG) {
			ret = dxl_txn_run(c->w, reg_fn, c, 0, &info);
			if (!ret && info.nwrites) {
				fprintf(g_log, "GC %u %" PRIx64 " %" PRIu64 " e:%" PRIu64 "\n", c->co, info.id,
					dxl_wall_ms(), dxl_now_ns());
			} else if (!ret) {
				o += (size_t)snprintf(line, sizeof(line), "GR %u %" PRIx64 " %" PRIu64 " b:%" PRIu64
						      " e:%" PRIu64, c->co, info.id, dxl_wall_ms(),
						      c->begin_ns, dxl_now_ns());
				log_footprint(line, sizeof(line), &o, dxl_txn_last(c->w));
				fprintf(g_log, "%s\n", line);
			} else if (info.maybe) {
				fprintf(g_log, "GM %u %" PRIx64 "\n", c->co, info.id);
			}
			dxl_co_sleep_ms(5);
		} else {
			ret = dxl_txn_run(c->w, audit_fn, c, 0, &info);
			if (!ret) {
				int64_t sum = c->sum;
				o += (size_t)snprintf(line, sizeof(line), "AU %u %" PRIx64 " %" PRIu64 " %" PRId64
						      " b:%" PRIu64 " e:%" PRIu64,
						      c->co, info.id, dxl_wall_ms(), sum, c->begin_ns, dxl_now_ns());
				log_footprint(line, sizeof(line), &o, dxl_txn_last(c->w));
				fprintf(g_log, "%s\n", line);
			}
			dxl_co_sleep_ms(50);
		}
		/* the next line says this coroutine moved on (LP of an attempt
		 * that did not commit is then an abort) */
		fprintf(g_log, "N %u\n", c->co);
		if (ret && ret != DXL_E_CONFLICT)
			dxl_co_sleep_ms(20); /* unavailable: a failover */
	}
}

static int child_main(const char *spec)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGTERM, on_term);
	char zkc[512], name[64], path[512];
	unsigned flags = 0;
	unsigned long long seed = 0, base = 0, t0 = 0;
	if (sscanf(spec, "%u %llu %llu %llu %u %511s %63s %511s", &g_inc, &base, &t0, &seed, &flags,
		   zkc, name, path) != 8)
		return 2;
	g_list_base = base;
	g_t0 = t0;
	g_log = fopen(path, "a");
	if (!g_log)
		return 2;
	setvbuf(g_log, NULL, _IOLBF, 0);
	dxlb_sb_cfg_init(&g_sb);
	g_sb.accounts = ACCTS;
	struct dxl_zk_cfg zc;
	dxl_zk_cfg_init(&zc);
	snprintf(zc.connect, sizeof(zc.connect), "%s", zkc);
	snprintf(zc.cluster, sizeof(zc.cluster), "%s", name);
	zc.session_timeout_ms = SESSION_MS;
	struct dxl_zk *zk = NULL;
	if (dxl_zk_new(&zc, &zk))
		return 3;
	struct dxl_coord_cfg cfg;
	dxl_coord_cfg_init(&cfg);
	cfg.test_hook = child_hook;
	cfg.no_validation = flags & 1;
	cfg.no_fence = flags & 2;
	struct dxl_coord *c = NULL;
	if (dxl_coord_new(zk, &cfg, &c)) {
		fprintf(stderr, "child: %s\n", dxl_errmsg());
		return 4;
	}
	struct dxl_coord_worker *w = NULL;
	if (dxl_coord_worker_new(c, 10, &w))
		return 5;
	static struct cctx cc[9];
	static const int kinds[9] = {CO_SB,   CO_SB,    CO_SB,    CO_SB, CO_LIST,
				     CO_LIST, CO_AUDIT, CO_AUDIT, CO_REG};
	for (uint32_t i = 0; i < 9; i++) {
		cc[i] = (struct cctx){.w = w, .kind = kinds[i], .co = i,
				      .rng = seed * 1000003ull + g_inc * 7919ull + i};
		if (dxl_coord_worker_spawn(w, co_main, &cc[i]))
			return 6;
	}
	fprintf(g_log, "S %u %u\n", g_inc, dxl_coord_id(c));
	int ret = dxl_coord_worker_run(w);
	fprintf(g_log, "E\n");
	fclose(g_log);
	dxl_coord_worker_delete(&w);
	dxl_coord_delete(&c);
	dxl_zk_delete(&zk);
	return ret ? 7 : 0;
}

/* ==== the parent ======================================================================= */

static char g_dxl[PATH_MAX], g_self[PATH_MAX];
static char g_tmp[128], g_dir[256], g_name[64];
static struct mt_server g_zks;
static bool g_up;
static struct dxlt_nem g_nem;
static unsigned g_flags;
static const char *g_skip_why;

struct child {
	pid_t pid;
	uint32_t inc;
	char path[300];
};
static struct child g_ch[MAXCH];
static uint32_t g_nch, g_ninc;
static int g_live[2];
static uint64_t g_sched_base, g_sched_t0, g_sched_seed;

/* a coordinator process in slot; name=value (name may be NULL) in its
 * environment (DXL_ZK_FAULTS, DXL_TESTPOINTS: tests/lib/faults.h) */
static void spawn_child_env(int slot, const char *name, const char *value)
{
	struct child *ch = &g_ch[g_nch];
	ch->inc = ++g_ninc;
	snprintf(ch->path, sizeof(ch->path), "%s/child-%u.log", g_tmp, ch->inc);
	char spec[2048];
	snprintf(spec, sizeof(spec), "%u %llu %llu %llu %u %s %s %s", ch->inc,
		 (unsigned long long)g_sched_base, (unsigned long long)g_sched_t0,
		 (unsigned long long)g_sched_seed, g_flags, g_zks.connect, g_name, ch->path);
	char err[320];
	snprintf(err, sizeof(err), "%s/child-%u.err", g_tmp, ch->inc);
	setenv("DXL_NEMESIS_CHILD", spec, 1);
	if (name)
		setenv(name, value, 1);
	const char *argv[] = {g_self, NULL};
	ch->pid = dxlt_spawn_io(argv, NULL, err, err);
	unsetenv("DXL_NEMESIS_CHILD");
	if (name)
		unsetenv(name);
	assert_true(ch->pid > 0);
	g_live[slot] = (int)g_nch;
	g_nch++;
	assert_true(g_nch < MAXCH);
}

static void spawn_child(int slot)
{
	spawn_child_env(slot, NULL, NULL);
}

static int coord_kill_env(void *arg, uint64_t *rng, const char *name, const char *value, char *desc,
			  size_t cap)
{
	(void)arg;
	int slot = (int)dxlt_nem_rand(rng, 2);
	struct child *ch = &g_ch[g_live[slot]];
	kill(ch->pid, SIGKILL);
	waitpid(ch->pid, NULL, 0);
	ch->pid = 0;
	spawn_child_env(slot, name, value);
	snprintf(desc, cap, "kill -9 coordinator process %u, process %u started", ch->inc,
		 g_ch[g_live[slot]].inc);
	return 0;
}

static int coord_kill(void *arg, uint64_t *rng, char *desc, size_t cap)
{
	return coord_kill_env(arg, rng, NULL, NULL, desc, cap);
}

/*
 * stop-coordinator: SIGSTOP one coordinator process past its ZooKeeper
 * session timeout, then SIGCONT (a long GC-like pause): its session
 * expires, the other process resolves its id (its locks, its rings in
 * doubt), and when it resumes it registers again under a new id while
 * transactions it began under the old one are still running -- they must
 * neither log nor write back (review of issue 12, #2, #8).
 */
static int f_stop_coord(struct dxlt_nem *n, uint64_t *rng, char *desc, size_t cap)
{
	int slot = (int)dxlt_nem_rand(rng, 2);
	struct child *ch = &g_ch[g_live[slot]];
	uint64_t ms = n->session_timeout_ms + 500 + dxlt_nem_rand(rng, 1500);
	n->t_inject_ms = dxl_wall_ms();
	if (kill(ch->pid, SIGSTOP))
		return DXL_E_IO;
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) && errno == EINTR) {
	}
	snprintf(desc, cap, "SIGSTOP coordinator process %u for %llu ms, then SIGCONT", ch->inc,
		 (unsigned long long)ms);
	return kill(ch->pid, SIGCONT) ? DXL_E_IO : 0;
}

static int zk_kill(void *arg, int s)
{
	return mt_server_cmd(arg, "kill", s) ? DXL_E_IO : 0;
}

static int zk_restart(void *arg, int s)
{
	return mt_server_cmd(arg, "restart", s) ? DXL_E_IO : 0;
}

/* ---- a coordinator in this process (snapshots, final lists, loading) ---------------- */

struct penv {
	struct dxl_zk *zk;
	struct dxl_coord *c;
	struct dxl_coord_worker *w;
};

static void penv_open(struct penv *e)
{
	memset(e, 0, sizeof(*e));
	assert_int_equal(dxlt_zk_open(g_zks.connect, g_name, &e->zk), 0);
	struct dxl_coord_cfg cfg;
	dxl_coord_cfg_init(&cfg);
	cfg.log_unavail_ms = 30000;
	if (dxl_coord_new(e->zk, &cfg, &e->c))
		fail_msg("coordinator: %s", dxl_errmsg());
	assert_int_equal(dxl_coord_worker_new(e->c, 1, &e->w), 0);
}

static void penv_close(struct penv *e)
{
	dxl_coord_worker_delete(&e->w);
	dxl_coord_delete(&e->c);
	dxl_zk_delete(&e->zk);
}

struct sbsnap {
	int64_t total;
	int64_t bal[NSB];
	uint64_t ver[NSB];
	uint64_t rver[NREG]; /* the register keys: version (a tombstone's if absent) */
	bool rabs[NREG];
	uint64_t begin_ns, end_ns;   /* the SmallBank snapshot transaction */
	uint64_t rbegin_ns, rend_ns; /* the registers' (another one: 64 records at most) */
	int ret;
};

struct pjob {
	struct penv *e;
	int what; /* 0 load, 1 snapshot, 2 final lists */
	struct sbsnap *s;
	uint64_t lkeys[4096];
	uint32_t nl;
	struct dxlt_la *la;
	int ret;
	char msg[512];
};

static int load_fn(struct dxl_txn *t, void *arg)
{
	(void)arg;
	for (uint32_t k = 0; k < NSB; k++) {
		uint8_t v[8];
		dxlb_sb_encode(g_sb.init_balance, v);
		int ret = dxl_txn_insert(t, k < ACCTS ? DXLB_SB_SAVINGS : DXLB_SB_CHECKING, k % ACCTS, v,
					 8);
		if (ret)
			return ret;
	}
	return 0;
}

static int snap_fn(struct dxl_txn *t, void *arg)
{
	struct sbsnap *s = arg;
	s->begin_ns = dxl_now_ns();
	s->total = 0;
	for (uint32_t k = 0; k < NSB; k++) {
		uint8_t v[8];
		uint32_t len;
		int ret = dxl_txn_get(t, k < ACCTS ? DXLB_SB_SAVINGS : DXLB_SB_CHECKING, k % ACCTS, v, 8,
				      &len);
		if (ret)
			return ret;
		s->bal[k] = dxlb_sb_decode(v);
		s->total += s->bal[k];
	}
	return 0;
}

static int reg_snap_fn(struct dxl_txn *t, void *arg)
{
	struct sbsnap *s = arg;
	s->rbegin_ns = dxl_now_ns();
	for (uint32_t k = 0; k < NREG; k++) {
		uint8_t v[8];
		uint32_t len;
		int ret = dxl_txn_get(t, T_REG, REG_BASE + k, v, 8, &len);
		if (ret && ret != DXL_E_NOENT)
			return ret;
	}
	return 0;
}

struct lread {
	const uint64_t *keys;
	uint32_t n;
	uint32_t len[60];
	uint8_t v[60][LIST_VSZ];
	bool present[60];
};

static int lists_fn(struct dxl_txn *t, void *arg)
{
	struct lread *r = arg;
	for (uint32_t i = 0; i < r->n; i++) {
		int ret = dxl_txn_get(t, T_LIST, r->keys[i], r->v[i], LIST_VSZ, &r->len[i]);
		if (ret && ret != DXL_E_NOENT)
			return ret;
		r->present[i] = ret == 0;
		if (ret)
			r->len[i] = 0;
	}
	return 0;
}

static void co_pjob(void *arg)
{
	struct pjob *j = arg;
	struct dxl_txn_info info;
	if (j->what == 0) {
		j->ret = dxl_txn_run(j->e->w, load_fn, NULL, 0, &info);
		if (j->ret == DXL_E_EXIST)
			j->ret = 0;
	} else if (j->what == 1) {
		j->ret = dxl_txn_run(j->e->w, snap_fn, j->s, 0, &info);
		struct dxl_txn_access acc[64];
		if (!j->ret) {
			j->s->end_ns = dxl_now_ns();
			int n = dxl_txn_footprint(dxl_txn_last(j->e->w), acc, 64);
			for (int i = 0; i < n && i < 64; i++)
				j->s->ver[key_index(acc[i].table, acc[i].key)] = acc[i].version;
			j->ret = dxl_txn_run(j->e->w, reg_snap_fn, j->s, 0, &info);
		}
		if (!j->ret) {
			j->s->rend_ns = dxl_now_ns();
			int n = dxl_txn_footprint(dxl_txn_last(j->e->w), acc, 64);
			for (int i = 0; i < n && i < 64; i++) {
				j->s->rver[acc[i].key - REG_BASE] = acc[i].version;
				j->s->rabs[acc[i].key - REG_BASE] = acc[i].absent;
			}
		}
	} else {
		static struct lread r;
		for (uint32_t at = 0; at < j->nl && !j->ret; at += 60) {
			memset(&r, 0, sizeof(r));
			r.keys = j->lkeys + at;
			r.n = DXL_MIN(60, j->nl - at);
			j->ret = dxl_txn_run(j->e->w, lists_fn, &r, 0, &info);
			for (uint32_t i = 0; !j->ret && i < r.n; i++) {
				uint32_t el[MAXEL + 1], ne = r.len[i] / 4;
				for (uint32_t k = 0; k < ne && k <= MAXEL; k++)
					el[k] = dxl_get_le32(r.v[i] + 4 * k);
				dxlt_la_final(j->la, r.keys[i], el, ne);
			}
		}
	}
	if (j->ret)
		snprintf(j->msg, sizeof(j->msg), "%s", dxl_errmsg());
}

static void pjob_run(struct pjob *j)
{
	struct penv e;
	penv_open(&e);
	j->e = &e;
	assert_int_equal(dxl_coord_worker_spawn(e.w, co_pjob, j), 0);
	assert_int_equal(dxl_coord_worker_run(e.w), 0);
	penv_close(&e);
	if (j->ret)
		fail_msg("coordinator of the test (job %d): %s: %s", j->what, dxl_errname(j->ret), j->msg);
}

/* ---- reading the children's logs --------------------------------------------------------- */

struct acc {
	uint32_t key; /* key_index */
	bool write;
	uint64_t version;
};

struct sbt { /* a SmallBank transaction or an audit */
	uint64_t id;
	int st;       /* 0 unknown, 1 committed, 2 maybe (versions unknown) */
	bool audit, ro, in;
	bool prep, prep_done; /* only its P line; its coroutine moved on */
	uint32_t inc, co;
	int64_t delta; /* audits: the sum */
	struct acc a[64];
	uint32_t na;
	uint32_t mkeys[DXLB_SB_MAX_KEYS], nmk; /* maybe: the keys it wrote */
	uint64_t ms;
	uint64_t begin_ns, end_ns; /* real time: its attempt began, it was acknowledged */
};

struct gt { /* a register transaction as logged */
	uint64_t id;
	int st; /* 0 only GP (prepared), 1 acknowledged, 2 GX (at its commit
		   point, no answer seen), 3 GM (unknown outcome) */
	bool prep_done; /* only GP, and its coroutine moved on: aborted */
	uint32_t inc, co;
	uint64_t begin_ns, end_ns;
	char *ops;
};

struct lt { /* a list-append transaction as logged */
	uint64_t id;
	int st; /* DXLT_LA_* or 0 (only its LP line so far) */
	uint32_t inc, co;
	bool lx, more; /* its LX line seen; its coroutine moved on */
	char *ops;     /* the LX/LR/LM/LP ops text */
};

struct hist {
	struct sbt *sb;
	size_t nsb, sbcap;
	struct gt *gt;
	size_t ngt, gtcap;
	struct lt *lt;
	size_t nlt, ltcap;
	uint64_t *times; /* commit times (ms) of every process, by workload: */
	size_t nt, tcap; /* the low bit of each: 0 SmallBank, 1 list-append */
};

static struct sbt *sb_find(struct hist *h, uint64_t id)
{
	for (size_t i = h->nsb; i-- > 0;)
		if (h->sb[i].id == id)
			return &h->sb[i];
	return NULL;
}

static struct sbt *sb_add(struct hist *h, uint64_t id)
{
	if (h->nsb == h->sbcap) {
		h->sbcap = h->sbcap ? 2 * h->sbcap : 1024;
		h->sb = realloc(h->sb, h->sbcap * sizeof(*h->sb));
		assert_non_null(h->sb);
	}
	struct sbt *t = &h->sb[h->nsb++];
	memset(t, 0, sizeof(*t));
	t->id = id;
	return t;
}

static struct lt *lt_find(struct hist *h, uint64_t id)
{
	for (size_t i = h->nlt; i-- > 0;)
		if (h->lt[i].id == id)
			return &h->lt[i];
	return NULL;
}

static struct lt *lt_get(struct hist *h, uint64_t id, uint32_t inc, uint32_t co)
{
	struct lt *t = lt_find(h, id);
	if (t)
		return t;
	if (h->nlt == h->ltcap) {
		h->ltcap = h->ltcap ? 2 * h->ltcap : 1024;
		h->lt = realloc(h->lt, h->ltcap * sizeof(*h->lt));
		assert_non_null(h->lt);
	}
	t = &h->lt[h->nlt++];
	memset(t, 0, sizeof(*t));
	t->id = id;
	t->inc = inc;
	t->co = co;
	return t;
}

static struct gt *gt_get(struct hist *h, uint64_t id, uint32_t inc, uint32_t co)
{
	for (size_t i = h->ngt; i-- > 0;)
		if (h->gt[i].id == id)
			return &h->gt[i];
	if (h->ngt == h->gtcap) {
		h->gtcap = h->gtcap ? 2 * h->gtcap : 1024;
		h->gt = realloc(h->gt, h->gtcap * sizeof(*h->gt));
		assert_non_null(h->gt);
	}
	struct gt *t = &h->gt[h->ngt++];
	memset(t, 0, sizeof(*t));
	t->id = id;
	t->inc = inc;
	t->co = co;
	return t;
}

/* the value of a "tag:number" token in a line (0 if none) */
static uint64_t tok_u64(const char *line, const char *tag)
{
	char pat[8];
	snprintf(pat, sizeof(pat), " %s:", tag);
	const char *p = strstr(line, pat);
	return p ? strtoull(p + strlen(pat), NULL, 10) : 0;
}

static void add_time(struct hist *h, uint64_t ms, unsigned cls)
{
	ms = (ms << 1) | cls;
	if (h->nt == h->tcap) {
		h->tcap = h->tcap ? 2 * h->tcap : 4096;
		h->times = realloc(h->times, h->tcap * sizeof(*h->times));
		assert_non_null(h->times);
	}
	h->times[h->nt++] = ms;
}

static void parse_acc(struct sbt *t, char *p)
{
	char *save = NULL;
	for (char *tok = strtok_r(p, " \n", &save); tok && t->na < 64;
	     tok = strtok_r(NULL, " \n", &save)) {
		char c;
		unsigned table;
		unsigned long long key, ver;
		if (sscanf(tok, "%c:%u:%llu:%llu", &c, &table, &key, &ver) != 4 || key >= ACCTS)
			continue;
		t->a[t->na++] = (struct acc){.key = key_index(table, key), .write = c == 'w',
					     .version = ver};
	}
}

/* one child's log into h */
static void read_log(struct hist *h, const struct child *ch)
{
	FILE *f = fopen(ch->path, "r");
	if (!f)
		return;
	static char line[16384];
	while (fgets(line, sizeof(line), f)) {
		if (!strchr(line, '\n'))
			break; /* cut by a kill */
		unsigned co;
		unsigned long long id, ms;
		long long d;
		int off = 0;
		if (!strncmp(line, "X ", 2) &&
		    sscanf(line + 2, "%u %llx %lld%n", &co, &id, &d, &off) == 3) {
			struct sbt *t = sb_find(h, id);
			if (!t)
				t = sb_add(h, id);
			t->st = 0; /* logged: unknown until its C */
			t->prep = false;
			t->nmk = 0;
			t->delta = d;
			t->begin_ns = tok_u64(line, "b");
			parse_acc(t, line + 2 + off);
		} else if (!strncmp(line, "C ", 2) && sscanf(line + 2, "%u %llx %llu", &co, &id, &ms) == 3) {
			struct sbt *t = sb_find(h, id);
			if (t) {
				t->st = 1;
				t->ms = ms;
				t->end_ns = tok_u64(line, "e");
			}
			add_time(h, ms, 0);
		} else if (!strncmp(line, "R ", 2) &&
			   sscanf(line + 2, "%u %llx %llu%n", &co, &id, &ms, &off) == 3) {
			struct sbt *t = sb_add(h, id);
			t->st = 1;
			t->ro = true;
			t->ms = ms;
			t->begin_ns = tok_u64(line, "b");
			t->end_ns = tok_u64(line, "e");
			parse_acc(t, line + 2 + off);
			add_time(h, ms, 0);
		} else if (!strncmp(line, "AU ", 3) &&
			   sscanf(line + 3, "%u %llx %llu %lld%n", &co, &id, &ms, &d, &off) == 4) {
			struct sbt *t = sb_add(h, id);
			t->st = 1;
			t->ro = t->audit = true;
			t->delta = d;
			t->ms = ms;
			t->begin_ns = tok_u64(line, "b");
			t->end_ns = tok_u64(line, "e");
			parse_acc(t, line + 3 + off);
			add_time(h, ms, 0);
		} else if ((!strncmp(line, "M ", 2) || !strncmp(line, "P ", 2)) &&
			   sscanf(line + 2, "%u %llx %lld%n", &co, &id, &d, &off) == 3) {
			struct sbt *t = sb_find(h, id);
			if (line[0] == 'P' && t)
				continue;
			/* an attempt starts after the coroutine's previous one
			 * ended: an earlier prepared one without its X aborted */
			for (size_t i = h->nsb; i-- > 0;)
				if (h->sb[i].prep && h->sb[i].inc == ch->inc && h->sb[i].co == co)
					h->sb[i].prep_done = true;
			if (!t)
				t = sb_add(h, id);
			t->st = 2;
			t->prep = line[0] == 'P';
			t->inc = ch->inc;
			t->co = co;
			t->delta = d;
			/* an M after the attempt's own P (its process lived on:
			 * a coordinator stopped, not killed) lists the same keys */
			t->nmk = 0;
			char *p = line + 2 + off;
			unsigned k;
			int used;
			while (t->nmk < DXLB_SB_MAX_KEYS && sscanf(p, " %u%n", &k, &used) == 1) {
				t->mkeys[t->nmk++] = k;
				p += used;
			}
		} else if ((!strncmp(line, "LP ", 3) || !strncmp(line, "LX ", 3) ||
			    !strncmp(line, "LM ", 3)) &&
			   sscanf(line + 3, "%u %llx%n", &co, &id, &off) == 2) {
			if (line[1] == 'P')
				/* the coroutine's earlier attempts ended */
				for (size_t i = h->nlt; i-- > 0;)
					if (h->lt[i].inc == ch->inc && h->lt[i].co == co && h->lt[i].id != id)
						h->lt[i].more = true;
			struct lt *t = lt_get(h, id, ch->inc, co);
			if (line[1] == 'P' && t->ops)
				continue; /* an LX or LM already has every op */
			free(t->ops);
			t->ops = strdup(line + 3 + off);
			if (line[1] == 'X')
				t->lx = true;
			if (line[1] == 'M')
				t->st = DXLT_LA_UNKNOWN;
		} else if (!strncmp(line, "LC ", 3) && sscanf(line + 3, "%u %llx %llu", &co, &id, &ms) == 3) {
			struct lt *t = lt_find(h, id);
			if (t)
				t->st = DXLT_LA_COMMITTED;
			add_time(h, ms, 1);
		} else if (!strncmp(line, "LR ", 3) &&
			   sscanf(line + 3, "%u %llx %llu%n", &co, &id, &ms, &off) == 3) {
			struct lt *t = lt_get(h, id, ch->inc, co);
			t->st = DXLT_LA_COMMITTED;
			free(t->ops);
			t->ops = strdup(line + 3 + off);
			add_time(h, ms, 1);
		} else if ((!strncmp(line, "GP ", 3) || !strncmp(line, "GX ", 3) ||
			    !strncmp(line, "GR ", 3)) &&
			   sscanf(line + 3, "%u %llx%n", &co, &id, &off) == 2) {
			/* the coroutine's earlier prepared attempts ended */
			for (size_t i = h->ngt; i-- > 0;)
				if (h->gt[i].inc == ch->inc && h->gt[i].co == co && h->gt[i].id != id &&
				    h->gt[i].st == 0)
					h->gt[i].prep_done = true;
			struct gt *t = gt_get(h, id, ch->inc, co);
			if (line[1] == 'P' && t->ops)
				continue;
			free(t->ops);
			t->ops = strdup(line + 3 + off);
			t->begin_ns = tok_u64(line, "b");
			if (line[1] == 'X')
				t->st = 2;
			if (line[1] == 'R') {
				t->st = 1;
				t->end_ns = tok_u64(line, "e");
			}
		} else if (!strncmp(line, "GC ", 3) && sscanf(line + 3, "%u %llx", &co, &id) == 2) {
			struct gt *t = gt_get(h, id, ch->inc, co);
			t->st = 1;
			t->end_ns = tok_u64(line, "e");
		} else if (!strncmp(line, "GM ", 3) && sscanf(line + 3, "%u %llx", &co, &id) == 2) {
			struct gt *t = gt_get(h, id, ch->inc, co);
			if (t->st != 1)
				t->st = 3;
		} else if (!strncmp(line, "N ", 2) && sscanf(line + 2, "%u", &co) == 1) {
			for (size_t i = h->ngt; i-- > 0;)
				if (h->gt[i].inc == ch->inc && h->gt[i].co == co && h->gt[i].st == 0)
					h->gt[i].prep_done = true;
			for (size_t i = h->nlt; i-- > 0;)
				if (h->lt[i].inc == ch->inc && h->lt[i].co == co)
					h->lt[i].more = true;
			/* a prepared SmallBank attempt without its X: aborted */
			for (size_t i = h->nsb; i-- > 0;)
				if (h->sb[i].prep && h->sb[i].inc == ch->inc && h->sb[i].co == co)
					h->sb[i].prep_done = true;
		}
	}
	fclose(f);
}

static void hist_free(struct hist *h)
{
	for (size_t i = 0; i < h->ngt; i++)
		free(h->gt[i].ops);
	free(h->gt);
	for (size_t i = 0; i < h->nlt; i++)
		free(h->lt[i].ops);
	free(h->lt);
	free(h->sb);
	free(h->times);
	memset(h, 0, sizeof(*h));
}

/* ---- the checks --------------------------------------------------------------------------- */

struct verdict {
	uint64_t committed, unknown, anomalies, la_anomalies;
	uint64_t sb, lists, audits, regs;
	uint64_t rt_edges, reg_deletes, reg_absent, reg_maybe_in, reg_maybe_out;
	uint64_t stores_keys;
	char why[2048];
};

static void anomaly(struct verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void anomaly(struct verdict *v, const char *fmt, ...)
{
	if (!v->anomalies++) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(v->why, sizeof(v->why), fmt, ap);
		va_end(ap);
	}
}

/* version v of key k written by an included transaction (other than skip)? */
static bool claimed(struct hist *h, uint32_t k, uint64_t v, const struct sbt *skip)
{
	for (size_t i = 0; i < h->nsb; i++) {
		const struct sbt *t = &h->sb[i];
		if (t == skip || !t->in)
			continue;
		for (uint32_t j = 0; j < t->na; j++)
			if (t->a[j].write && t->a[j].key == k && t->a[j].version == v)
				return true;
	}
	return false;
}

/* a set of the maybe transactions (st 2) that explains the versions no one
 * claims (and the money); found: their writes are assigned those versions
 * (in log order per key) and they are in. Not found (or too many to search):
 * nothing is done, the per-key pick that follows reports what cannot be
 * explained. */
static void maybe_choose(struct hist *h, const struct sbsnap *s0, const struct sbsnap *s1)
{
	size_t mi[16];
	uint32_t n = 0;
	for (size_t i = 0; i < h->nsb; i++)
		if (h->sb[i].st == 2) {
			if (n == 16)
				return; /* 2^17+ subsets: the per-key pick decides */
			mi[n++] = i;
		}
	if (!n)
		return;
	uint32_t u[NSB] = {0};
	for (uint32_t k = 0; k < NSB; k++)
		for (uint64_t ver = s0->ver[k] + 2; ver <= s1->ver[k]; ver += 2)
			u[k] += !claimed(h, k, ver, NULL);
	int64_t need = s1->total - s0->total;
	for (size_t i = 0; i < h->nsb; i++)
		if (h->sb[i].in && !h->sb[i].audit && !h->sb[i].ro)
			need -= h->sb[i].delta;
	uint32_t best = 0;
	bool found = false, money_ok = false;
	for (uint32_t mask = 0; mask < (1u << n) && !money_ok; mask++) {
		uint32_t cnt[NSB] = {0};
		int64_t sum = 0;
		for (uint32_t b = 0; b < n; b++) {
			if (!(mask & (1u << b)))
				continue;
			const struct sbt *t = &h->sb[mi[b]];
			sum += t->delta;
			for (uint32_t j = 0; j < t->nmk; j++) {
				bool dup = false;
				for (uint32_t q = 0; q < j; q++)
					dup = dup || t->mkeys[q] == t->mkeys[j];
				if (!dup && t->mkeys[j] < NSB)
					cnt[t->mkeys[j]]++;
			}
		}
		bool ok = true;
		for (uint32_t k = 0; k < NSB && ok; k++)
			ok = cnt[k] == u[k];
		if (!ok)
			continue;
		if (!found || sum == need) {
			best = mask;
			found = true;
			money_ok = sum == need;
		}
	}
	if (!found)
		return;
	for (uint32_t k = 0; k < NSB; k++) {
		uint32_t b = 0;
		for (uint64_t ver = s0->ver[k] + 2; ver <= s1->ver[k]; ver += 2) {
			if (claimed(h, k, ver, NULL))
				continue;
			for (; b < n; b++) {
				struct sbt *t = &h->sb[mi[b]];
				if (!(best & (1u << b)))
					continue;
				bool writes = false;
				for (uint32_t j = 0; j < t->nmk; j++)
					writes = writes || t->mkeys[j] == k;
				if (!writes)
					continue;
				t->in = true;
				if (t->na < 64)
					t->a[t->na++] = (struct acc){.key = k, .write = true, .version = ver};
				b++;
				break;
			}
		}
	}
}

static void check_smallbank(struct hist *h, const struct sbsnap *s0, const struct sbsnap *s1,
			    struct verdict *v)
{
	/* which transactions are in: committed; unknown ones whose writes are
	 * there (every version it wrote is at most the key's last, and no
	 * committed one wrote it) */
	for (size_t i = 0; i < h->nsb; i++) {
		h->sb[i].in = h->sb[i].st == 1;
		if (h->sb[i].prep && h->sb[i].prep_done)
			h->sb[i].st = 3; /* an attempt that did not commit */
	}
	for (size_t i = 0; i < h->nsb; i++) {
		struct sbt *t = &h->sb[i];
		if (t->st != 0)
			continue;
		uint32_t there = 0, nw = 0;
		for (uint32_t j = 0; j < t->na; j++) {
			if (!t->a[j].write)
				continue;
			nw++;
			uint32_t k = t->a[j].key;
			if (t->a[j].version > s0->ver[k] && t->a[j].version <= s1->ver[k] &&
			    !claimed(h, k, t->a[j].version, t))
				there++;
		}
		if (there && there < nw)
			anomaly(v, "smallbank: txn %" PRIx64 " of unknown outcome is there in part (%u of %u writes)",
				t->id, there, nw);
		t->in = there > 0;
		v->unknown++;
	}
	/* maybe transactions (no versions): the versions no one claims are
	 * theirs. Which of them happened: a set whose writes account for
	 * exactly the unclaimed versions, key by key (each writes each of its
	 * keys once), and whose deltas make the money add up -- searched over
	 * every subset. A pick per key of the first maybe transaction writing
	 * it blamed one that did not happen for another's write on a key both
	 * write: two false "in part" (seen after two coordinator kills) */
	maybe_choose(h, s0, s1);
	for (uint32_t k = 0; k < NSB; k++)
		for (uint64_t ver = s0->ver[k] + 2; ver <= s1->ver[k]; ver += 2) {
			if (claimed(h, k, ver, NULL))
				continue;
			struct sbt *m = NULL;
			for (size_t i = 0; i < h->nsb && !m; i++) {
				struct sbt *t = &h->sb[i];
				if (t->st != 2)
					continue;
				bool writes = false, has = false;
				for (uint32_t j = 0; j < t->nmk; j++)
					writes = writes || t->mkeys[j] == k;
				for (uint32_t j = 0; j < t->na; j++)
					has = has || (t->a[j].write && t->a[j].key == k);
				if (writes && !has)
					m = t;
			}
			if (!m) {
				anomaly(v, "smallbank: version %" PRIu64 " of key %u is in the store, but no transaction wrote it (start %" PRIu64 ", end %" PRIu64 ")",
					ver, k, s0->ver[k], s1->ver[k]);
				continue;
			}
			m->in = true;
			if (m->na < 64)
				m->a[m->na++] = (struct acc){.key = k, .write = true, .version = ver};
		}
	for (size_t i = 0; i < h->nsb; i++) {
		struct sbt *t = &h->sb[i];
		if (t->st == 2) {
			v->unknown++;
			uint32_t nw = 0;
			for (uint32_t j = 0; j < t->na; j++)
				nw += t->a[j].write;
			if (nw && nw < t->nmk)
				anomaly(v, "smallbank: txn %" PRIx64 " of unknown outcome is there in part", t->id);
		}
	}
	/* every committed write is there, once */
	struct dxlt_history *hi = dxlt_history_new();
	assert_non_null(hi);
	for (uint32_t k = 0; k < NSB; k++)
		dxlt_history_write(hi, 1, k < ACCTS ? 1 : 2, k % ACCTS, s0->ver[k]);
	int64_t money = s0->total;
	for (size_t i = 0; i < h->nsb; i++) {
		struct sbt *t = &h->sb[i];
		if (!t->in)
			continue;
		if (!t->audit)
			money += t->ro ? 0 : t->delta;
		if (t->audit)
			v->audits++;
		else if (t->st == 1)
			v->sb++;
		if (t->st == 1)
			v->committed++;
		/* real time: an acknowledged one (strict serializability) */
		if (t->st == 1 && t->begin_ns && t->end_ns)
			dxlt_history_txn(hi, t->id, t->begin_ns, t->end_ns, false);
		for (uint32_t j = 0; j < t->na; j++) {
			const struct acc *a = &t->a[j];
			uint32_t table = a->key < ACCTS ? 1 : 2;
			if (a->write && a->version > s1->ver[a->key])
				anomaly(v, "smallbank: committed txn %" PRIx64 " wrote version %" PRIu64 " of key %u, the store has %" PRIu64 " (lost)",
					t->id, a->version, a->key, s1->ver[a->key]);
			if (a->write)
				dxlt_history_write(hi, t->id, table, a->key % ACCTS, a->version);
			else
				dxlt_history_read(hi, t->id, table, a->key % ACCTS, a->version);
		}
	}
	/* the end: a reader of every key, after everything acknowledged */
	for (uint32_t k = 0; k < NSB; k++)
		dxlt_history_read(hi, 2, k < ACCTS ? 1 : 2, k % ACCTS, s1->ver[k]);
	dxlt_history_txn(hi, 2, s1->begin_ns, s1->end_ns, false);
	char why[2048];
	struct dxlt_history_stats hs;
	int r = dxlt_history_check_ex(hi, why, sizeof(why), &hs);
	v->rt_edges += hs.rt_edges;
	if (r)
		anomaly(v, "smallbank history (%zu txns, %zu edges, %zu real-time): %s", hs.ntxn,
			hs.nedges, hs.rt_edges, why);
	dxlt_history_free(hi);
	if (money != s1->total)
		anomaly(v, "smallbank money: %" PRId64 " in the store, the committed transactions say %" PRId64,
			s1->total, money);
	/* the audits: each sum = the start + what it saw */
	for (size_t i = 0; i < h->nsb; i++) {
		const struct sbt *au = &h->sb[i];
		if (!au->audit || !au->in)
			continue;
		uint64_t seen[NSB];
		for (uint32_t k = 0; k < NSB; k++)
			seen[k] = s0->ver[k];
		for (uint32_t j = 0; j < au->na; j++)
			if (!au->a[j].write && au->a[j].key < NSB)
				seen[au->a[j].key] = au->a[j].version;
		bool pre = true;
		for (uint32_t j = 0; j < au->na; j++)
			pre = pre && au->a[j].version >= s0->ver[au->a[j].key];
		if (!pre)
			continue; /* started before the schedule's snapshot */
		int64_t want = s0->total;
		for (size_t x = 0; x < h->nsb; x++) {
			const struct sbt *t = &h->sb[x];
			if (!t->in || t->ro)
				continue;
			uint32_t in = 0, nw = 0;
			for (uint32_t j = 0; j < t->na; j++)
				if (t->a[j].write) {
					nw++;
					in += t->a[j].version <= seen[t->a[j].key];
				}
			if (in && in < nw)
				anomaly(v, "audit %" PRIx64 " saw %u of the %u writes of txn %" PRIx64, au->id, in, nw,
					t->id);
			if (in == nw && nw)
				want += t->delta;
		}
		if (want != au->delta)
			anomaly(v, "audit %" PRIx64 ": sum %" PRId64 ", the transactions it saw make %" PRId64,
				au->id, au->delta, want);
	}
}

/*
 * The register workload through tests/lib/history.h: values, deletes
 * (tombstones), absence reads (existence answers and the absence an insert
 * replaced), unknown outcomes (counted iff read from), real time; seeded
 * with the states at the schedule's start (txn 1), closed by the final
 * snapshot (txn 2, after everything acknowledged).
 */
static void check_registers(struct hist *h, const struct sbsnap *s0, const struct sbsnap *s1,
			    struct verdict *v)
{
	struct dxlt_history *hi = dxlt_history_new();
	assert_non_null(hi);
	for (uint32_t k = 0; k < NREG; k++) {
		if (!s0->rabs[k])
			dxlt_history_write(hi, 1, T_REG, REG_BASE + k, s0->rver[k]);
		else if (s0->rver[k])
			dxlt_history_delete(hi, 1, T_REG, REG_BASE + k, s0->rver[k]);
	}
	uint64_t in = 0, maybe = 0;
	for (size_t i = 0; i < h->ngt; i++) {
		const struct gt *t = &h->gt[i];
		if (t->st == 0 && t->prep_done)
			continue; /* an attempt that did not commit */
		bool committed = t->st == 1;
		dxlt_history_txn(hi, t->id, committed ? t->begin_ns : 0, committed ? t->end_ns : 0,
				 !committed);
		in += committed;
		maybe += !committed;
		char *dup = strdup(t->ops ? t->ops : ""), *save = NULL;
		for (char *tok = strtok_r(dup, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
			char c;
			unsigned table;
			unsigned long long key, ver;
			if (sscanf(tok, "%c:%u:%llu:%llu", &c, &table, &key, &ver) != 4 || table != T_REG ||
			    key < REG_BASE || key >= REG_BASE + NREG)
				continue;
			if (c == 'r')
				dxlt_history_read(hi, t->id, table, key, ver);
			else if (c == 'a')
				dxlt_history_read_absent(hi, t->id, table, key, ver);
			else if (c == 'w')
				dxlt_history_write(hi, t->id, table, key, ver);
			else if (c == 'd')
				dxlt_history_delete(hi, t->id, table, key, ver);
		}
		free(dup);
	}
	for (uint32_t k = 0; k < NREG; k++) {
		if (s1->rabs[k])
			dxlt_history_read_absent(hi, 2, T_REG, REG_BASE + k, s1->rver[k]);
		else
			dxlt_history_read(hi, 2, T_REG, REG_BASE + k, s1->rver[k]);
	}
	dxlt_history_txn(hi, 2, s1->rbegin_ns, s1->rend_ns, false);
	char why[2048];
	struct dxlt_history_stats hs;
	int r = dxlt_history_check_ex(hi, why, sizeof(why), &hs);
	if (r)
		anomaly(v, "register history (%zu txns, %zu edges, %zu real-time, %zu deletes, %zu absence reads): %s",
			hs.ntxn, hs.nedges, hs.rt_edges, hs.deletes, hs.absent_reads, why);
	v->regs += in;
	v->committed += in;
	v->unknown += maybe;
	v->rt_edges += hs.rt_edges;
	v->reg_deletes += hs.deletes;
	v->reg_absent += hs.absent_reads;
	v->reg_maybe_in += hs.maybe_in;
	v->reg_maybe_out += hs.maybe_out;
	print_message("    registers: %" PRIu64 " acknowledged, %" PRIu64 " unknown (%zu counted), %zu deletes, %zu absence reads (%zu of a reclaimed tombstone), %zu real-time edges\n",
		      in, maybe, hs.maybe_in, hs.deletes, hs.absent_reads, hs.absent_unknown, hs.rt_edges);
	dxlt_history_free(hi);
}

static void la_ops(struct dxlt_la *la, uint64_t id, const char *ops, bool reads)
{
	char *dup = strdup(ops ? ops : ""), *save = NULL;
	for (char *tok = strtok_r(dup, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
		unsigned long long key;
		int off = 0;
		if (tok[0] == 'a' && reads == false) {
			unsigned e;
			if (sscanf(tok, "a:%llu:%u", &key, &e) == 2)
				dxlt_la_append(la, id, key, e);
		} else if (tok[0] == 'r' && reads && sscanf(tok, "r:%llu:%n", &key, &off) == 1) {
			uint32_t el[MAXEL + 1], n = 0;
			for (char *p = tok + off; *p && *p != '-' && n <= MAXEL;) {
				el[n++] = (uint32_t)strtoul(p, &p, 10);
				if (*p == ',')
					p++;
			}
			dxlt_la_read(la, id, key, el, n);
		}
	}
	free(dup);
}

static void check_lists(struct hist *h, struct verdict *v)
{
	struct dxlt_la *la = dxlt_la_new();
	assert_non_null(la);
	struct pjob *j = calloc(1, sizeof(*j));
	assert_non_null(j);
	j->what = 2;
	j->la = la;
	for (size_t i = 0; i < h->nlt; i++) {
		struct lt *t = &h->lt[i];
		int st = t->st;
		if (!st)
			st = t->lx ? DXLT_LA_UNKNOWN : t->more ? DXLT_LA_ABORTED : DXLT_LA_UNKNOWN;
		if (st == DXLT_LA_UNKNOWN)
			v->unknown++;
		if (st == DXLT_LA_COMMITTED)
			v->lists++, v->committed++;
		dxlt_la_txn(la, t->id, (enum dxlt_la_status)st);
		la_ops(la, t->id, t->ops, true);
		la_ops(la, t->id, t->ops, false);
		/* the keys to read at the end */
		char *dup = strdup(t->ops ? t->ops : ""), *save = NULL;
		for (char *tok = strtok_r(dup, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
			unsigned long long key;
			if ((tok[0] == 'a' || tok[0] == 'r') && sscanf(tok + 2, "%llu", &key) == 1) {
				bool seen = false;
				for (uint32_t k = 0; k < j->nl && !seen; k++)
					seen = j->lkeys[k] == key;
				if (!seen && j->nl < DXL_ARRAY_SIZE(j->lkeys))
					j->lkeys[j->nl++] = key;
			}
		}
		free(dup);
	}
	pjob_run(j);
	struct dxlt_la_result r;
	int ret = dxlt_la_check(la, &r);
	v->la_anomalies = r.anomalies + (ret < 0);
	if (ret)
		anomaly(v, "list-append (%zu txns, %zu unknown seen, %zu reads, %zu appends, %zu edges, %u keys): %s",
			r.txns, r.unknown_in, r.reads, r.appends, r.edges, j->nl, r.why);
	print_message("    list-append: %zu transactions (%zu of unknown outcome seen, %zu not), %zu reads, %zu appends, %zu edges over %u keys\n",
		      r.txns, r.unknown_in, r.unknown_out, r.reads, r.appends, r.edges, j->nl);
	free(j);
	dxlt_la_free(la);
}

static int copy_file(const char *from, const char *to)
{
	FILE *in = fopen(from, "rb");
	if (!in)
		return -1;
	FILE *out = fopen(to, "wb");
	if (!out) {
		fclose(in);
		return -1;
	}
	static char buf[1 << 16];
	size_t n;
	int ret = 0;
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		if (fwrite(buf, 1, n, out) != n)
			ret = -1;
	if (ferror(in))
		ret = -1;
	fclose(in);
	if (fclose(out))
		ret = -1;
	return ret;
}

/*
 * The replicas' stores after a schedule (issue 20: the checker sees what
 * the stores hold). The cluster is quiet: the coordinators are stopped and
 * the final snapshot resolved what they left. `dxl cluster verify --wait`
 * until the members' digests agree (a backup applies the last records a
 * little after the primary), then every replica's store files are copied
 * (nothing writes them now; opening the running replica's own file would
 * rewrite it) and compared key by key, extra keys included
 * (tests/lib/stores.h).
 */
static void compare_live_stores(struct verdict *v)
{
	int rc = dxlt_nem_dxl(&g_nem, 60000,
			      (const char *const[]){"cluster", "verify", "--dir", g_dir, "--wait", "20",
						    NULL});
	if (rc)
		anomaly(v, "dxl cluster verify: the members' tables differ: %.1500s%.400s", g_nem.out,
			g_nem.err);
	char root[400], from[800], to[800];
	snprintf(root, sizeof(root), "%s/cmp", g_tmp);
	const uint32_t nodes[3] = {1, 2, 3};
	for (uint32_t i = 0; i < 3; i++) {
		mkdir(root, 0700);
		snprintf(to, sizeof(to), "%s/%u", root, nodes[i]);
		if (mkdir(to, 0700) && errno != EEXIST)
			fail_msg("mkdir %s: %s", to, strerror(errno));
		for (uint32_t shard = 0; shard < 2; shard++) {
			snprintf(from, sizeof(from), "%s/data/%u/store-%u.dat", g_dir, nodes[i], shard);
			snprintf(to, sizeof(to), "%s/%u/store-%u.dat", root, nodes[i], shard);
			if (copy_file(from, to))
				fail_msg("copy %s: %s", from, strerror(errno));
		}
	}
	for (uint32_t shard = 0; shard < 2; shard++) {
		char why[2048];
		struct dxlt_stores_report rep;
		int r = dxlt_stores_compare(root, g_name, shard, nodes, 3, DXL_DUR_PROCESS, why,
					    sizeof(why), &rep);
		if (r < 0)
			fail_msg("stores of shard %u: %s", shard, why);
		if (r)
			anomaly(v, "the replicas' stores of shard %u differ: %s", shard, why);
		v->stores_keys += rep.keys;
	}
	char cmd[500];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd)) {
	}
}

/* the longest time without a commit of workload cls in [a, b] (ms) */
static uint64_t longest_gap(struct hist *h, unsigned cls, uint64_t a, uint64_t b, uint64_t *at)
{
	uint64_t prev = a, best = 0;
	*at = a;
	for (size_t i = 0; i < h->nt; i++) {
		uint64_t t = h->times[i] >> 1;
		if ((h->times[i] & 1) != cls || t < a || t > b)
			continue;
		if (t - prev > best) {
			best = t - prev;
			*at = prev;
		}
		prev = t;
	}
	if (b > prev && b - prev > best) {
		best = b - prev;
		*at = prev;
	}
	return best;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* ---- a schedule ------------------------------------------------------------------------------ */

struct step {
	int kind;
	uint64_t t0, t1;
	char desc[256];
};

static uint64_t env_u64(const char *name, uint64_t def)
{
	const char *s = getenv(name);
	return s && *s ? strtoull(s, NULL, 0) : def;
}

/* lines of a file holding needle */
static uint64_t count_lines(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	static char line[8192];
	uint64_t n = 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* over every coordinator process so far (their stderr): re-registrations
 * after a session expiry, and transactions of an old registration that
 * were stopped before logging or writing back */
static uint64_t g_rereg, g_old_reg_txns;

static void count_reregistrations(uint64_t *rereg, uint64_t *old_txns)
{
	*rereg = *old_txns = 0;
	for (uint32_t i = 0; i < g_nch; i++) {
		char err[320];
		snprintf(err, sizeof(err), "%s/child-%u.err", g_tmp, g_ch[i].inc);
		*rereg += count_lines(err, "event=coord_registered_again");
		*old_txns += count_lines(err, "event=coord_txn_old_registration");
	}
}

/* injections that fired, over every process so far: the replicas' logs
 * and the coordinator processes' stderr */
static uint64_t count_events(const char *needle)
{
	uint64_t k = dxlt_nem_count_replica_logs(&g_nem, needle);
	for (uint32_t i = 0; i < g_nch; i++) {
		char err[320];
		snprintf(err, sizeof(err), "%s/child-%u.err", g_tmp, g_ch[i].inc);
		k += count_lines(err, needle);
	}
	return k;
}

/* coverage: kind k was applied, and what it injects fired (a lost reply,
 * a test-point sleep, a second failure inside a join pull, a promotion) */
static bool covered(uint32_t k)
{
	const char *nm = g_nem.kinds[k].name;
	if (!g_nem.applied[k])
		return false;
	if (!strcmp(nm, "zk-lost-reply"))
		return count_events("event=zk_fault_injected") > 0;
	if (!strcmp(nm, "pause-points"))
		return count_events("event=testpoint_sleep") > 0;
	if (!strcmp(nm, "join-second-failure"))
		return g_nem.joins_struck > 0;
	if (!strcmp(nm, "empty-dir-restart"))
		return g_nem.empty_new_id > 0;
	if (!strcmp(nm, "promote-returned"))
		return g_nem.promoted > 0;
	return true;
}

/* the coverage draw: when g_cover, a step runs a kind not covered yet that
 * can run now (chosen by g_cover_rng; kinds that can run only now --
 * return-backup, promote-returned -- first), else the seeded draw */
static bool g_cover;
static uint64_t g_cover_rng;

static int cover_pick(void)
{
	int cand[DXLT_NEM_MAX_KINDS], nc = 0;
	for (int pass = 0; pass < 2 && !nc; pass++)
		for (uint32_t k = 0; k < g_nem.nkinds; k++) {
			const struct dxlt_fault *f = &g_nem.kinds[k];
			bool cond = !strcmp(f->name, "return-backup") ||
				    !strcmp(f->name, "promote-returned");
			if (!f->weight || covered(k) || (f->can && !f->can(&g_nem)) ||
			    (pass == 0 && !cond))
				continue;
			cand[nc++] = (int)k;
		}
	/* hold-backup is covered only with its return and the promotion */
	int hold = dxlt_nem_kind(&g_nem, "hold-backup"), ret_ = dxlt_nem_kind(&g_nem, "return-backup"),
	    prom = dxlt_nem_kind(&g_nem, "promote-returned");
	if (!nc && hold >= 0 && g_nem.kinds[hold].weight && !g_nem.held && !g_nem.returned &&
	    ((ret_ >= 0 && g_nem.kinds[ret_].weight && !covered((uint32_t)ret_)) ||
	     (prom >= 0 && g_nem.kinds[prom].weight && !covered((uint32_t)prom))))
		cand[nc++] = hold;
	return nc ? cand[dxlt_nem_rand(&g_cover_rng, (uint64_t)nc)] : -1;
}

/* a chain the coverage draw started is still under way (a held backup to
 * return, a returned one to promote) */
static bool chain_pending(void)
{
	int ret_ = dxlt_nem_kind(&g_nem, "return-backup"), prom = dxlt_nem_kind(&g_nem, "promote-returned");
	return (g_nem.held && ret_ >= 0 && !covered((uint32_t)ret_)) ||
	       (g_nem.held && prom >= 0 && !covered((uint32_t)prom)) ||
	       (g_nem.returned && prom >= 0 && !covered((uint32_t)prom));
}

/* ---- the log: acknowledged appends through the schedule ------------------------------ */

/*
 * `dxl log load` appends to every shard through the whole schedule (20/s,
 * its own writer ring per shard) and writes each acknowledged append
 * (--acked). After the schedule -- coordinators and load stopped, nothing
 * appends -- every member's copy of each shard (a member that says MEMBER
 * with the data identity the configuration recorded for it: the rule of
 * `dxl log load --verify`, which reads members only) is read with the
 * library: the log file opened in place (dxl_region_open, dxl_logstore_open:
 * header checks only) and every ring walked from its persisted head; each acknowledged append
 * must be there exactly once, unless older than the oldest of the run's
 * records the copy retains (reclaimed by retention, counted apart).
 * (`dxl log load --verify` itself tails each member; its tail holds at the
 * watermark of a ring whose writer was killed -- a coordinator process --
 * until the slot is taken again, so after a coordinator kill it does not
 * deliver the last acknowledged append within its 20 s: the library walk
 * checks the same copies without that wait.)
 */
struct logcheck {
	pid_t pid;
	char out[400], err[400], acked[400];
	uint64_t acked_n, checked, copies, missing, dups, reclaimed;
	uint32_t shards_checked;
};

/* the last cap - 1 bytes of a file into buf */
static void tail_of(const char *path, char *buf, size_t cap)
{
	buf[0] = 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	fseek(f, sz > (long)cap - 1 ? sz - ((long)cap - 1) : 0, SEEK_SET);
	size_t n = fread(buf, 1, cap - 1, f);
	buf[n] = 0;
	fclose(f);
}

static void log_load_start(struct logcheck *lc, uint32_t si)
{
	memset(lc, 0, sizeof(*lc));
	snprintf(lc->out, sizeof(lc->out), "%s/load-%u.out", g_tmp, si);
	snprintf(lc->err, sizeof(lc->err), "%s/load-%u.err", g_tmp, si);
	snprintf(lc->acked, sizeof(lc->acked), "%s/load-%u.acked", g_tmp, si);
	const char *argv[] = {g_dxl,        "log",   "load",         "--dir",     g_dir,
			      "--rate",     "20",    "--duration",   "0",         "--unavail-ms",
			      "60000",      "--acked", lc->acked,    NULL};
	lc->pid = dxlt_spawn_io(argv, NULL, lc->out, lc->err);
	assert_true(lc->pid > 0);
}

static int cmp_u64_(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* the run's records of shard in one copy of its log file: their commit
 * timestamps, sorted, into *ts (malloc'd); count, or -1 */
static long scan_copy(const char *path, uint32_t node, const char *prefix, uint64_t **ts)
{
	struct dxl_region_id id = {.node_id = node, .kind = DXL_REGION_LOG};
	snprintf(id.cluster, sizeof(id.cluster), "%s", g_name);
	struct dxl_region *reg = NULL;
	struct dxl_logstore *ls = NULL;
	if (dxl_region_open(path, DXL_DUR_PROCESS, &id, &reg))
		return -1;
	if (dxl_logstore_open(reg, &ls)) {
		dxl_region_close(&reg);
		return -1;
	}
	size_t n = 0, cap = 4096, pl = strlen(prefix);
	uint64_t *a = malloc(cap * sizeof(*a));
	assert_non_null(a);
	for (uint32_t r = 0; r < dxl_logstore_nrings(ls); r++) {
		struct dxl_ring_iter it;
		struct dxl_rec rec;
		if (dxl_ring_iter_init(&it, ls, r))
			continue;
		while (dxl_ring_iter_next(&it, &rec, NULL)) {
			if (rec.payload_len < pl || memcmp(rec.payload, prefix, pl))
				continue;
			if (n == cap) {
				cap *= 2;
				a = realloc(a, cap * sizeof(*a));
				assert_non_null(a);
			}
			a[n++] = rec.commit_ts;
		}
	}
	dxl_logstore_close(&ls);
	dxl_region_close(&reg);
	qsort(a, n, sizeof(*a), cmp_u64_);
	*ts = a;
	return (long)n;
}

static void log_load_check(struct logcheck *lc, struct verdict *v)
{
	kill(lc->pid, SIGTERM);
	/* it waits for its appends in flight (up to --unavail-ms) */
	int st = dxlt_wait_exit(lc->pid, 120000);
	if (st < 0) {
		kill(lc->pid, SIGKILL);
		waitpid(lc->pid, NULL, 0);
		static char o[4096], e[4096];
		tail_of(lc->out, o, sizeof(o));
		tail_of(lc->err, e, sizeof(e));
		fail_msg("dxl log load did not stop in 120 s after SIGTERM; the end of its output:\n%s\nof its errors:\n%s",
			 o, e);
	}
	/* the acknowledged appends, per shard */
	uint64_t *ack[2] = {NULL, NULL};
	size_t nack[2] = {0, 0}, cap[2] = {0, 0};
	char prefix[2][64] = {"", ""};
	FILE *f = fopen(lc->acked, "r");
	if (!f)
		fail_msg("dxl log load wrote no %s (exit %d)", lc->acked, st);
	static char line[4096];
	while (fgets(line, sizeof(line), f)) {
		unsigned sh;
		unsigned long long ts;
		int off = 0;
		if (sscanf(line, "%u\t%llu\t%n", &sh, &ts, &off) != 2 || sh >= 2)
			continue;
		if (!prefix[sh][0]) {
			/* "load:<run>:<shard>:<n>": the run's records of the shard */
			const char *p = line + off, *c = p;
			for (int k = 0; k < 3 && c; k++)
				c = strchr(c + (k ? 1 : 0), ':');
			if (c)
				snprintf(prefix[sh], sizeof(prefix[sh]), "%.*s", (int)(c - p + 1), p);
		}
		if (nack[sh] == cap[sh]) {
			cap[sh] = cap[sh] ? 2 * cap[sh] : 4096;
			ack[sh] = realloc(ack[sh], cap[sh] * sizeof(uint64_t));
			assert_non_null(ack[sh]);
		}
		ack[sh][nack[sh]++] = ts;
	}
	fclose(f);
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_zks.connect, g_name, &zk), 0);
	struct dxl_cluster_config c;
	assert_int_equal(dxl_cluster_config_read(zk, &c, NULL), 0);
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	assert_non_null(d);
	for (uint32_t shard = 0; shard < 2; shard++) {
		lc->acked_n += nack[shard];
		if (!nack[shard] || !prefix[shard][0])
			fail_msg("dxl log load acknowledged no append of shard %u in the schedule (exit %d, %s)", shard,
				 st, lc->out);
		const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, shard);
		uint32_t m[DXL_CONFIG_MAX_REPLICAS];
		uint32_t nm = sh ? dxl_cluster_shard_members(sh, m) : 0;
		uint32_t copies = 0;
		for (uint32_t i = 0; i < nm; i++) {
			uint64_t rec = dxl_cluster_shard_data_id(sh, m[i]);
			const struct dxl_shard_desc *sd =
				dxl_replica_desc_get(zk, m[i], d) ? NULL : dxl_replica_desc_shard(d, shard);
			if (!sd || sd->state != DXL_SHARD_MEMBER || (rec && sd->data_id != rec))
				continue; /* not a member with every record (yet) */
			/* read in place: opening a region and its log only
			 * checks their headers, the walk only reads, and
			 * nothing appends now */
			char from[700];
			snprintf(from, sizeof(from), "%s/data/%u/shard-%u.log", g_dir, m[i], shard);
			uint64_t *ts = NULL;
			long n = scan_copy(from, m[i], prefix[shard], &ts);
			if (n < 0)
				fail_msg("member %u's log of shard %u cannot be opened: %s", m[i], shard, dxl_errmsg());
			copies++;
			uint64_t oldest = n ? ts[0] : UINT64_MAX, missing = 0, dups = 0, reclaimed = 0;
			for (long k = 1; k < n; k++)
				dups += ts[k] == ts[k - 1];
			for (size_t k = 0; k < nack[shard]; k++) {
				uint64_t key = ack[shard][k];
				if (n && bsearch(&key, ts, (size_t)n, sizeof(*ts), cmp_u64_))
					lc->checked++;
				else if (key < oldest)
					reclaimed++;
				else
					missing++;
			}
			lc->missing += missing;
			lc->dups += dups;
			lc->reclaimed += reclaimed;
			if (missing || dups)
				anomaly(v, "the log: member %u's copy of shard %u lacks %" PRIu64 " of %zu acknowledged appends (%" PRIu64
					" duplicated; %s)", m[i], shard, missing, nack[shard], dups, lc->acked);
			free(ts);
		}
		lc->copies += copies;
		lc->shards_checked += copies > 0;
		free(ack[shard]);
	}
	free(d);
	dxl_cluster_config_clear(&c);
	dxl_zk_delete(&zk);
	print_message("    log: %" PRIu64 " appends acknowledged by dxl log load (exit %d) through the schedule; %" PRIu64
		      " member copies read: %" PRIu64 " acknowledged appends found, %" PRIu64 " missing, %" PRIu64
		      " duplicated, %" PRIu64 " reclaimed by retention\n",
		      lc->acked_n, st, lc->copies, lc->checked, lc->missing, lc->dups, lc->reclaimed);
	if (lc->shards_checked < 2 || !lc->checked)
		fail_msg("the log check read %u of 2 shards and found %" PRIu64 " acknowledged appends: no coverage",
			 lc->shards_checked, lc->checked);
}

static bool run_schedule(uint32_t si, uint64_t seed, unsigned nsteps, const int *plan, unsigned nplan,
			 uint64_t *max_gap_out, struct verdict *v, char *kinds_out, size_t kcap)
{
	memset(v, 0, sizeof(*v));
	struct sbsnap s0, s1;
	struct pjob *j = calloc(1, sizeof(*j));
	assert_non_null(j);
	j->what = 1;
	j->s = &s0;
	pjob_run(j);
	g_sched_base = 1000000ull + (uint64_t)si * 65536;
	g_sched_t0 = dxl_wall_ms();
	g_sched_seed = seed;
	uint32_t first_child = g_nch;
	spawn_child(0);
	spawn_child(1);
	uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 1;
	struct step st[64];
	unsigned ns = 0;
	struct logcheck lc;
	log_load_start(&lc, si);
	sleep(2);
	kinds_out[0] = 0;
	size_t ko = 0;
	/* nsteps, or the plan's; the coverage draw may add up to 3 steps to
	 * finish a hold -> return -> promote chain it began */
	unsigned limit = nplan ? nplan : nsteps;
	for (unsigned k = 0; ns < 63 && (k < limit || (g_cover && !nplan && k < limit + 3 && chain_pending()));
	     k++) {
		struct step *s = &st[ns++];
		int want = nplan ? plan[k] : g_cover ? cover_pick() : -1;
		int ret = dxlt_nem_step_kind(&g_nem, &rng, want, &s->kind, s->desc, sizeof(s->desc));
		if (ret)
			fail_msg("schedule %u step %u (%s): %s", si, k,
				 want >= 0 ? g_nem.kinds[want].name : "drawn", dxl_errmsg());
		ko += (size_t)snprintf(kinds_out + ko, ko < kcap ? kcap - ko : 0, "%s%s", k ? "," : "",
				       g_nem.kinds[s->kind].name);
		s->t0 = g_nem.t_inject_ms;
		uint32_t want_m = g_nem.held ? 2 : 3;
		ret = dxlt_nem_wait_members(&g_nem, want_m, 90000);
		if (ret)
			fail_msg("schedule %u step %u (%s: %s): %s", si, k, g_nem.kinds[s->kind].name, s->desc,
				 dxl_errmsg());
		sleep(2); /* load after the repair */
		s->t1 = dxl_wall_ms();
		print_message("    step %u: %-16s %s\n", k, g_nem.kinds[s->kind].name, s->desc);
	}
	char hd[256];
	assert_int_equal(dxlt_nem_heal(&g_nem, hd, sizeof(hd)), 0);
	if (hd[0]) {
		print_message("    heal: %s\n", hd);
		assert_int_equal(dxlt_nem_wait_members(&g_nem, 3, 90000), 0);
		sleep(1);
	}
	/* stop the coordinators cleanly */
	for (int c = 0; c < 2; c++) {
		struct child *ch = &g_ch[g_live[c]];
		kill(ch->pid, SIGTERM);
		int stt = dxlt_wait_exit(ch->pid, 30000);
		if (stt != 0)
			print_message("    coordinator process %u exited with %d\n", ch->inc, stt);
		ch->pid = 0;
	}
	/* the log, quiet now (no transaction traffic makes retention reclaim
	 * what the verification tails) */
	log_load_check(&lc, v);
	/* the final state (the snapshot resolves dead coordinators' locks) */
	memset(j, 0, sizeof(*j));
	j->what = 1;
	j->s = &s1;
	pjob_run(j);
	free(j);
	struct hist h = {0};
	for (uint32_t c = first_child; c < g_nch; c++)
		read_log(&h, &g_ch[c]);
	qsort(h.times, h.nt, sizeof(*h.times), cmp_u64);
	check_smallbank(&h, &s0, &s1, v);
	check_lists(&h, v);
	check_registers(&h, &s0, &s1, v);
	compare_live_stores(v);
	/* liveness per step */
	uint64_t worst = 0;
	bool slow = false;
	for (unsigned k = 0; k < ns; k++)
		for (unsigned cls = 0; cls < 2; cls++) {
			uint64_t at;
			uint64_t g = longest_gap(&h, cls, st[k].t0, st[k].t1, &at);
			if (g > worst)
				worst = g;
			if (g > SESSION_MS + 2000) {
				slow = true;
				print_message("    LIVENESS: step %u (%s) %" PRIu64 " ms without a %s commit from +%" PRId64 " ms after the fault\n",
					      k, g_nem.kinds[st[k].kind].name, g,
					      cls ? "list-append" : "SmallBank", (int64_t)(at - st[k].t0));
			}
		}
	*max_gap_out = worst;
	uint64_t rr, ot;
	count_reregistrations(&rr, &ot);
	if (rr > g_rereg)
		print_message("    coordinators registered again after a session expiry: %" PRIu64
			      " (transactions of an old registration that left their locks to resolution: %" PRIu64 ")\n",
			      rr - g_rereg, ot - g_old_reg_txns);
	g_rereg = rr;
	g_old_reg_txns = ot;
	print_message("  schedule %u seed %" PRIu64 ": %u faults, %" PRIu64 " committed (%" PRIu64 " smallbank, %" PRIu64
		      " list-append, %" PRIu64 " audits, %" PRIu64 " registers), %" PRIu64 " unknown, %" PRIu64
		      " anomalies (%" PRIu64 " of them list-append); %" PRIu64 " real-time edges; stores: %" PRIu64
		      " keys identical; longest time without a commit %" PRIu64 " ms\n",
		      si, seed, ns, v->committed, v->sb, v->lists, v->audits, v->regs, v->unknown,
		      v->anomalies, v->la_anomalies, v->rt_edges, v->stores_keys, worst);
	if (v->anomalies)
		print_message("    ANOMALY: %s\n", v->why);
	hist_free(&h);
	return !v->anomalies && (!slow || getenv("DXL_NEMESIS_NO_LIVENESS"));
}

/* the kinds with weight (the ones DXL_NEMESIS_FAULTS left) not covered */
static uint32_t uncovered(char *buf, size_t cap)
{
	uint32_t k = 0;
	size_t o = 0;
	buf[0] = 0;
	for (uint32_t i = 0; i < g_nem.nkinds; i++)
		if (g_nem.kinds[i].weight && !covered(i)) {
			k++;
			o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, " %s", g_nem.kinds[i].name);
		}
	return k;
}

static void test_nemesis(void **state)
{
	(void)state;
	if (g_skip_why) {
		print_message("SKIPPED: %s\n", g_skip_why);
		skip();
	}
	if (!g_up)
		fail_msg("the cluster did not come up");
	uint32_t nsched = (uint32_t)env_u64("DXL_NEMESIS_SCHEDULES", 10);
	unsigned nsteps = (unsigned)env_u64("DXL_NEMESIS_STEPS", 3);
	uint64_t seed0 = env_u64("DXL_NEMESIS_SEED", (uint64_t)time(NULL));
	bool expect = getenv("DXL_NEMESIS_EXPECT_ANOMALY") != NULL;
	/* DXL_NEMESIS_PLAN=kind,kind,...: the kinds of each step, in order (a
	 * failing schedule prints its plan: with its seed it replays) */
	int plan[64];
	unsigned nplan = 0;
	const char *pl = getenv("DXL_NEMESIS_PLAN");
	for (const char *p = pl; p && *p && nplan < 64;) {
		const char *c = strchr(p, ',');
		char nm[64];
		snprintf(nm, sizeof(nm), "%.*s", (int)(c ? (size_t)(c - p) : strlen(p)), p);
		plan[nplan] = dxlt_nem_kind(&g_nem, nm);
		if (plan[nplan] < 0)
			fail_msg("DXL_NEMESIS_PLAN: no fault kind '%s'", nm);
		nplan++;
		p = c ? c + 1 : NULL;
	}
	/* coverage floors (every kind with weight covered) when the run is
	 * long enough to hold them: CI's 10 x 3, or DXL_NEMESIS_COVER=1 */
	bool floors = !nplan && !expect &&
		      (nsched * nsteps >= 30 || getenv("DXL_NEMESIS_COVER") != NULL);
	g_cover = floors;
	g_cover_rng = seed0 * 0x2545f4914f6cdd1dull + 7;
	print_message("  nemesis: %u schedules x %u steps from seed %" PRIu64 "%s%s%s%s\n", nsched, nsteps,
		      seed0, g_flags & 1 ? ", VALIDATION OFF" : "", g_flags & 2 ? ", FENCE OFF" : "",
		      floors ? ", every fault kind covered first" : "", nplan ? ", planned" : "");
	uint64_t total_anomalies = 0, total_committed = 0, worst = 0, total_unknown = 0;
	uint32_t failed = 0, extra = 0;
	uint64_t t_start = dxl_now_ms();
	char unc[1024];
	/* the schedules; then, while a kind is not covered, up to 4 more */
	for (uint32_t s = 0; s < nsched + extra; s++) {
		if (s >= nsched && !uncovered(unc, sizeof(unc)))
			break;
		if (s >= nsched)
			print_message("  coverage: not yet covered:%s -- schedule %u more\n", unc, s);
		uint64_t seed = seed0 + s, gap = 0;
		struct verdict v;
		char kinds[1024];
		bool ok = run_schedule(s, seed, nsteps, plan, nplan, &gap, &v, kinds, sizeof(kinds));
		total_anomalies += v.anomalies;
		total_committed += v.committed;
		total_unknown += v.unknown;
		worst = DXL_MAX(worst, gap);
		if (!ok) {
			failed++;
			print_message("  to run it again: DXL_NEMESIS_SEED=%" PRIu64 " DXL_NEMESIS_SCHEDULES=1 DXL_NEMESIS_PLAN=%s%s%s%s%s%s scripts/test.sh test_nemesis\n",
				      seed, kinds, g_flags & 1 ? " DXL_NEMESIS_NO_VALIDATION=1" : "",
				      g_flags & 2 ? " DXL_NEMESIS_NO_FENCE=1" : "",
				      getenv("DXL_NEMESIS_NIC_PAUSE_MS") ? " DXL_NEMESIS_NIC_PAUSE_MS=" : "",
				      getenv("DXL_NEMESIS_NIC_PAUSE_MS") ? getenv("DXL_NEMESIS_NIC_PAUSE_MS") : "",
				      getenv("DXL_NEMESIS_NO_LIVENESS") ? " DXL_NEMESIS_NO_LIVENESS=1" : "");
			if (!expect)
				break;
		}
		if (expect && total_anomalies)
			break;
		if (floors && s + 1 == nsched + extra && extra < 4 && uncovered(unc, sizeof(unc)))
			extra++;
	}
	print_message("  nemesis: %" PRIu64 " committed, %" PRIu64 " unknown, %" PRIu64 " anomalies, longest time without a commit %" PRIu64
		      " ms, %u extra schedules for coverage, %.0f s; faults applied:",
		      total_committed, total_unknown, total_anomalies, worst, extra,
		      (double)(dxl_now_ms() - t_start) / 1000);
	for (uint32_t k = 0; k < g_nem.nkinds; k++)
		print_message(" %s=%" PRIu64, g_nem.kinds[k].name, g_nem.applied[k]);
	print_message("\n");
	print_message("  reconfiguration coverage: %" PRIu64 " ZooKeeper replies lost, %" PRIu64 " test-point pauses, %" PRIu64
		      " second failures inside a join pull (%" PRIu64 " joiners not seen joining), %" PRIu64 " crosswise joins, %" PRIu64
		      " parallel joins (%" PRIu64 " re-added by one epoch), %" PRIu64 " empty-directory restarts re-added under a new data identity, %" PRIu64
		      " returned backups promoted (%" PRIu64 " could not be: %s)\n",
		      count_events("event=zk_fault_injected"), count_events("event=testpoint_sleep"),
		      g_nem.joins_struck, g_nem.joins_missed, g_nem.crosswise, g_nem.parallel_joins,
		      g_nem.joins_one_epoch, g_nem.empty_new_id, g_nem.promoted, g_nem.promote_skipped,
		      g_nem.promote_why[0] ? g_nem.promote_why : "-");
	if (expect) {
		if (!total_anomalies)
			fail_msg("no anomaly found, though one was expected (DXL_NEMESIS_EXPECT_ANOMALY%s%s)",
				 g_flags & 1 ? "; validation off" : "", g_flags & 2 ? "; fence off" : "");
		return;
	}
	if (failed)
		fail_msg("%u schedule(s) failed (above)", failed);
	/* coverage floors: the harness exercised something */
	assert_true(total_committed >= 50ull * nsched);
	/* a coordinator stopped past its session timeout registers again */
	for (uint32_t k = 0; k < g_nem.nkinds; k++)
		if (!strcmp(g_nem.kinds[k].name, "stop-coordinator") && g_nem.applied[k] && !g_rereg)
			fail_msg("%" PRIu64 " stop-coordinator faults, but no coordinator registered again: the fault did not expire a session",
				 g_nem.applied[k]);
	print_message("  coordinators registered again: %" PRIu64 "; transactions of an old registration that left their locks to resolution: %" PRIu64 "\n",
		      g_rereg, g_old_reg_txns);
	if (floors && uncovered(unc, sizeof(unc)))
		fail_msg("fault kinds never applied (or applied without their fault firing) in %u schedules:%s",
			 nsched + extra, unc);
}

/* ---- the cluster ------------------------------------------------------------------------------ */

/* the stores of the 3 replicas after the cluster stopped cleanly
 * (tests/lib/stores.h: key by key, extra keys included) */
static void compare_stores(void)
{
	char root[300];
	snprintf(root, sizeof(root), "%s/data", g_dir);
	const uint32_t nodes[3] = {1, 2, 3};
	uint64_t keys = 0;
	for (uint32_t shard = 0; shard < 2; shard++) {
		char why[2048];
		struct dxlt_stores_report rep;
		int r = dxlt_stores_compare(root, g_name, shard, nodes, 3, DXL_DUR_PROCESS, why,
					    sizeof(why), &rep);
		if (r)
			fail_msg("shard %u: the replicas' stores differ: %s", shard, why);
		keys += rep.keys;
		assert_int_equal(rep.records, 3 * rep.keys);
	}
	print_message("  the 3 replicas' stores: %" PRIu64 " records, identical\n", keys);
	assert_true(keys >= NSB);
}

static int group_setup(void **state)
{
	(void)state;
	dxlb_sb_cfg_init(&g_sb);
	g_sb.accounts = ACCTS;
	g_flags = (getenv("DXL_NEMESIS_NO_VALIDATION") ? 1 : 0) | (getenv("DXL_NEMESIS_NO_FENCE") ? 2 : 0);
	assert_int_equal(dxlt_prog_path("dxl", g_dxl, sizeof(g_dxl)), 0);
	ssize_t n = readlink("/proc/self/exe", g_self, sizeof(g_self) - 1);
	assert_true(n > 0);
	g_self[n] = 0;
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-nemesis-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	if (!mt_zk_sh()) {
		g_skip_why = "scripts/zk.sh not found (set DXL_ZK_SH)";
		return 0;
	}
	if (mt_server_start(&g_zks, 3)) {
		g_skip_why = "scripts/zk.sh could not start a 3-server ensemble (is ZooKeeper installed?)";
		return 0;
	}
	snprintf(g_name, sizeof(g_name), "nem-%d", (int)getpid());
	snprintf(g_dir, sizeof(g_dir), "%s/cluster", g_tmp);
	assert_int_equal(dxlt_nem_init(&g_nem), 0);
	snprintf(g_nem.dxl, sizeof(g_nem.dxl), "%s", g_dxl);
	snprintf(g_nem.dir, sizeof(g_nem.dir), "%s", g_dir);
	snprintf(g_nem.tmp, sizeof(g_nem.tmp), "%s", g_tmp);
	snprintf(g_nem.zk, sizeof(g_nem.zk), "%s", g_zks.connect);
	snprintf(g_nem.cluster, sizeof(g_nem.cluster), "%s", g_name);
	g_nem.session_timeout_ms = SESSION_MS;
	g_nem.nshards = 2;
	g_nem.nzk = 3;
	g_nem.zk_kill = zk_kill;
	g_nem.zk_restart = zk_restart;
	g_nem.zk_arg = &g_zks;
	g_nem.coord_kill = coord_kill;
	g_nem.coord_kill_env = coord_kill_env;
	assert_int_equal(dxlt_nem_add_builtin(&g_nem), 0);
	/* issue 16's reconfiguration kinds: opt-in (DXL_NEMESIS_RECONFIG=1,
	 * make test-long) until the defects they found are fixed -- stops of
	 * 4.3-5.6 s without a commit over the 4 s bound (hold, promote-returned,
	 * pause points), and an anomaly not reproduced since (docs/fault-injection.md) */
	if (getenv("DXL_NEMESIS_RECONFIG"))
		assert_int_equal(dxlt_nem_add_reconfig(&g_nem), 0);
	static const struct dxlt_fault stop_coord = {"stop-coordinator", 2, NULL, f_stop_coord};
	assert_int_equal(dxlt_nem_add(&g_nem, &stop_coord), 0);
	if (getenv("DXL_NEMESIS_FAULTS"))
		dxlt_nem_only(&g_nem, getenv("DXL_NEMESIS_FAULTS"));
	char tables[128], nicp[64];
	snprintf(tables, sizeof(tables), "engine.tables=1:8:128,2:8:128,3:%d:16384", LIST_VSZ);
	/* DXL_NEMESIS_NIC_PAUSE_MS: a stopped replica's regions stay registered
	 * that long after its lease lapsed (an RDMA NIC serving a stopped host) */
	snprintf(nicp, sizeof(nicp), "replica.test_nic_pause_ms=%llu",
		 (unsigned long long)env_u64("DXL_NEMESIS_NIC_PAUSE_MS", 0));
	int rc = dxlt_nem_dxl(&g_nem, 90000,
			      (const char *const[]){"cluster", "up", "--dir", g_dir, "--zk", g_zks.connect,
						    "--cluster", g_name, "--replicas", "3", "--shards", "2",
						    "--ring-size", "1M", "--writer-slots", "16",
						    "--session-timeout", "2000", "-o", tables, "-o",
						    "engine.lock_mode=nic", "-o", "log.retention_bytes=256K",
						    "-o", "log.retention_check_ms=200", "-o", nicp, NULL});
	if (rc) {
		print_message("cluster up: %s%s\n", g_nem.out, g_nem.err);
		return 0;
	}
	g_up = true;
	struct pjob *j = calloc(1, sizeof(*j));
	j->what = 0;
	pjob_run(j);
	free(j);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	for (uint32_t i = 0; i < g_nch; i++)
		if (g_ch[i].pid > 0) {
			kill(g_ch[i].pid, SIGKILL);
			waitpid(g_ch[i].pid, NULL, 0);
		}
	if (g_up) {
		if (g_nem.held)
			dxlt_nem_restart(&g_nem, g_nem.held);
		dxlt_nem_dxl(&g_nem, 60000, (const char *const[]){"cluster", "down", "--dir", g_dir, NULL});
	}
	dxlt_cluster_reap(g_dir);
	mt_server_stop(&g_zks);
	if (!getenv("DXL_TEST_KEEP")) {
		char cmd[300];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
		if (system(cmd)) {
		}
	} else {
		print_message("kept %s\n", g_tmp);
	}
	dxlt_nem_clear(&g_nem);
	return 0;
}

/* the cluster stopped cleanly: the replicas' stores compared */
static void test_stores_identical(void **state)
{
	(void)state;
	if (!g_up)
		skip();
	for (uint32_t i = 0; i < g_nch; i++)
		assert_true(g_ch[i].pid == 0);
	sleep(2); /* the backups apply the last of it */
	assert_int_equal(dxlt_nem_dxl(&g_nem, 60000, (const char *const[]){"cluster", "down", "--dir", g_dir, NULL}),
			 0);
	g_up = false;
	compare_stores();
}

/* ---- the checker's choice of maybe transactions (no cluster) ------------------- */

/* two maybe transactions share key 2: A writes 0 and 2, B writes 2 and 4.
 * The store says key 2 and key 4 moved by one write each: B happened, A did
 * not. Giving key 2's version to the first transaction writing it (A)
 * reported both "there in part"; the set search finds {B}. When no set
 * explains the store (keys 0 and 4 moved, key 2 did not), it is reported. */
static void maybe_case(bool explained)
{
	static struct sbt sb[2];
	memset(sb, 0, sizeof(sb));
	sb[0] = (struct sbt){.id = 0xa, .st = 2, .delta = 5, .mkeys = {0, 2}, .nmk = 2};
	sb[1] = (struct sbt){.id = 0xb, .st = 2, .delta = 7, .mkeys = {2, 4}, .nmk = 2};
	struct hist h = {.sb = sb, .nsb = 2, .sbcap = 2};
	static struct sbsnap s0, s1;
	memset(&s0, 0, sizeof(s0));
	for (uint32_t k = 0; k < NSB; k++)
		s0.ver[k] = 2;
	s0.total = 1000;
	s0.begin_ns = 1, s0.end_ns = 2;
	s1 = s0;
	s1.begin_ns = 10, s1.end_ns = 11;
	if (explained) {
		s1.ver[2] += 2, s1.ver[4] += 2;
		s1.total += 7;
	} else {
		s1.ver[0] += 2, s1.ver[4] += 2;
		s1.total += 12;
	}
	struct verdict v;
	memset(&v, 0, sizeof(v));
	check_smallbank(&h, &s0, &s1, &v);
	print_message("  %s: %" PRIu64 " anomalies%s%s; A %s, B %s\n",
		      explained ? "B happened" : "no set explains it", v.anomalies,
		      v.anomalies ? ": " : "", v.anomalies ? v.why : "", sb[0].in ? "in" : "out",
		      sb[1].in ? "in" : "out");
	if (explained) {
		assert_int_equal(v.anomalies, 0);
		assert_false(sb[0].in);
		assert_true(sb[1].in);
	} else {
		assert_true(v.anomalies > 0);
	}
}

static void test_maybe_choice(void **state)
{
	(void)state;
	maybe_case(true);
	maybe_case(false);
}

int main(void)
{
	const char *spec = getenv("DXL_NEMESIS_CHILD");
	if (spec)
		return child_main(spec);
	uint64_t ns = env_u64("DXL_NEMESIS_SCHEDULES", 10) * env_u64("DXL_NEMESIS_STEPS", 3);
	alarm((unsigned)(300 + 40 * ns));
	const struct CMUnitTest checker[] = {
		cmocka_unit_test(test_maybe_choice),
	};
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nemesis),
		cmocka_unit_test(test_stores_identical),
	};
	int failed = cmocka_run_group_tests_name("checker", checker, NULL, NULL);
	return failed + cmocka_run_group_tests(tests, group_setup, group_teardown);
}
