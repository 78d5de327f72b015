/* test_txn_crash.c -- SmallBank through a seeded crash schedule (issue 6 §4):
 * 3 dxl-replica processes (2 shards, 3-way replication) and two coordinator
 * processes running SmallBank (2 worker threads x 4 coroutines each); each step kill -9's a primary, kill -9's a
 * backup, power-fails a replica, or kill -9's a coordinator (a new one takes
 * its place), then restarts what died. After the schedule:
 *   - money: the bank's total is the initial total plus the deltas of the
 *     committed transactions, give or take those whose outcome a killed
 *     coordinator never learned (each counted as happened or not);
 *   - no acknowledged commit lost, none invented: every balance's version
 *     grew by 2 per committed write (plus at most the unknown ones);
 *   - the replicas agree: the stores of every member of a shard, opened
 *     after a clean shutdown, hold the same records (versions and values).
 * ARCHITECTURE.md §9 invariants 1, 2, 3, 5 (bad input: test_txn).
 *
 * DXL_TXN_CRASH_STEPS (default 3) and DXL_TXN_CRASH_SEED (default: time)
 * set the schedule; `make test-long` runs 200 steps. Needs DXL_TEST_ZK.
 *
 * Coverage: every power failure (the tcp model, armed by SIGUSR2, striking
 * in the traffic: docs/fabric-tcp.md) reports where it struck and how many
 * un-flushed lines it lost (DXL_FABRIC_PF_REPORT), and the dead node's log
 * rings are walked as its restart will (how many end at a torn record);
 * printed, and from 5 power failures on at least 30% must lose lines and
 * half must strike in the traffic. */
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

#include "bench/lib/smallbank.c" /* the workload (bench/lib is not in libdxl) */
#include "common/common.h"
#include "dxl/log.h"
#include "common/endian.h"
#include "dxl/membership.h"
#include "dxl/txn.h"
#include "tests/lib/cli_run.h"
#include "tests/lib/proc.h"
#include "tests/lib/stores.h"

#define ACCTS 120
#define NKEYS (2 * ACCTS)
/* inserts and deletes under load: table 3, keys 0..NCHURN-1, each either
 * absent or holding the unique token of the insert that made it */
#define T_CHURN 3
#define NCHURN 48
#define NCO 16 /* coroutine ids in a ledger: 0..7 SmallBank, 8..9 churn */
#define OUT_CAP 65536
#define NCHILD 2

static const char *g_zkc;
static char g_dxl[PATH_MAX];
static char g_tmp[128];
static char g_dir[256];
static char g_name[64];
static char *g_out, *g_err;
static bool g_up;
static struct dxlb_sb_cfg g_sb;

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

/* ---- SmallBank through the coordinator ------------------------------------------- */

static uint32_t key_index(uint32_t table, uint64_t acct)
{
	return (uint32_t)((table == DXLB_SB_SAVINGS ? 0 : ACCTS) + acct);
}

struct sb_ctx {
	struct dxl_txn *t;
	const struct dxlb_sb_txn *x;
	int64_t delta;
	uint32_t writes[DXLB_SB_MAX_KEYS];
	uint32_t nw;
};

static int sb_get(void *arg, uint32_t table, uint64_t acct, int64_t *bal)
{
	struct sb_ctx *c = arg;
	uint8_t v[8];
	uint32_t len;
	int ret = dxl_txn_get(c->t, table, acct, v, 8, &len);
	if (!ret)
		*bal = dxlb_sb_decode(v);
	return ret;
}

static int sb_put(void *arg, uint32_t table, uint64_t acct, int64_t bal)
{
	struct sb_ctx *c = arg;
	uint8_t v[8];
	dxlb_sb_encode(bal, v);
	if (c->nw < DXLB_SB_MAX_KEYS)
		c->writes[c->nw++] = key_index(table, acct);
	return dxl_txn_put(c->t, table, acct, v, 8);
}

struct sb_run {
	const struct dxlb_sb_txn *x;
	struct sb_ctx last; /* the attempt that committed */
	FILE *out;
	uint32_t co;
};

static int sb_fn(struct dxl_txn *t, void *arg)
{
	struct sb_run *r = arg;
	static const struct dxlb_sb_ops ops = {sb_get, sb_put};
	struct sb_ctx c = {.t = t, .x = r->x};
	int ret = dxlb_sb_exec(r->x, &ops, &c, &c.delta);
	if (ret)
		return ret;
	r->last = c;
	if (r->out && c.nw) {
		/* the intent, before the commit: if this process dies now the
		 * outcome is unknown to it */
		char line[128];
		int n = snprintf(line, sizeof(line), "P %u %" PRId64, r->co, c.delta);
		for (uint32_t i = 0; i < c.nw; i++)
			n += snprintf(line + n, sizeof(line) - (size_t)n, " %u", c.writes[i]);
		/* one call: the worker threads share the file */
		fprintf(r->out, "%s\n", line);
	}
	return 0;
}

/* ---- churn: insert or delete a key, with intents in the ledger ------------------- */

struct churn_run {
	uint64_t key, token;
	FILE *out;
	uint32_t co;
	bool wrote;
};

static int churn_fn(struct dxl_txn *t, void *arg)
{
	struct churn_run *r = arg;
	uint8_t v[8];
	uint32_t len;
	r->wrote = false;
	int ret = dxl_txn_get(t, T_CHURN, r->key, v, 8, &len);
	if (ret && ret != DXL_E_NOENT)
		return ret;
	char line[128];
	if (ret == DXL_E_NOENT) {
		dxl_put_le64(v, r->token);
		if ((ret = dxl_txn_insert(t, T_CHURN, r->key, v, 8)))
			return ret;
		snprintf(line, sizeof(line), "I %u %" PRIu64 " %" PRIu64, r->co, r->key, r->token);
	} else {
		if ((ret = dxl_txn_delete(t, T_CHURN, r->key)))
			return ret;
		snprintf(line, sizeof(line), "D %u %" PRIu64 " %" PRIu64, r->co, r->key,
			 dxl_get_le64(v));
	}
	fprintf(r->out, "%s\n", line); /* the intent, before the commit */
	r->wrote = true;
	return 0;
}

/* ---- the coordinator processes ---------------------------------------------------- */

struct child_co {
	struct dxl_coord_worker *w;
	FILE *out;
	uint32_t co;
	uint64_t rng;
	uint64_t seed;
};

static volatile sig_atomic_t g_stop;

static void on_term(int sig)
{
	(void)sig;
	g_stop = 1;
}

static void co_child(void *arg)
{
	struct child_co *cc = arg;
	while (!g_stop) {
		struct dxlb_sb_txn x;
		dxlb_sb_gen(&g_sb, &cc->rng, &x);
		struct sb_run r = {.x = &x, .out = cc->out, .co = cc->co};
		struct dxl_txn_info info;
		int ret = dxl_txn_run(cc->w, sb_fn, &r, 0, &info);
		if (!ret) {
			if (r.last.nw)
				fprintf(cc->out, "C %u\n", cc->co);
		} else if (r.last.nw) {
			/* not committed -- unless maybe: its outcome is unknown */
			fprintf(cc->out, "%c %u\n", info.maybe ? 'M' : 'A', cc->co);
		}
		if (ret && ret != DXL_E_CONFLICT)
			dxl_co_sleep_ms(20); /* unavailable: a failover */
	}
}

/* inserts and deletes of table 3's keys, each insert with a unique token */
static void co_churn(void *arg)
{
	struct child_co *cc = arg;
	for (uint64_t seq = 1; !g_stop; seq++) {
		struct churn_run r = {.key = dxlb_sb_rand(&cc->rng) % NCHURN,
				      .token = (cc->seed & 0xffffff) << 40 | (uint64_t)cc->co << 32 | seq,
				      .out = cc->out, .co = cc->co};
		struct dxl_txn_info info;
		int ret = dxl_txn_run(cc->w, churn_fn, &r, 0, &info);
		if (!ret && r.wrote)
			fprintf(cc->out, "C %u\n", cc->co);
		else if (ret && r.wrote)
			fprintf(cc->out, "%c %u\n", info.maybe ? 'M' : 'A', cc->co);
		if (ret && ret != DXL_E_CONFLICT)
			dxl_co_sleep_ms(20);
	}
}

struct child_thread {
	struct dxl_coord *c;
	FILE *out;
	uint32_t first_co;
	uint64_t seed;
	int ret;
};

/* one worker thread of a coordinator process: 4 coroutines */
static void *child_thread(void *arg)
{
	struct child_thread *ct = arg;
	struct dxl_coord_worker *w = NULL;
	if ((ct->ret = dxl_coord_worker_new(ct->c, 5, &w)))
		return NULL;
	struct child_co cc[5];
	for (uint32_t i = 0; i < 5; i++) {
		/* 4 SmallBank coroutines, and one that inserts and deletes */
		uint32_t co = i < 4 ? ct->first_co + i : 8 + ct->first_co / 4;
		cc[i] = (struct child_co){.w = w, .out = ct->out, .co = co,
					  .rng = ct->seed * 1000003 + co, .seed = ct->seed};
		if ((ct->ret = dxl_coord_worker_spawn(w, i < 4 ? co_child : co_churn, &cc[i])))
			return NULL;
	}
	ct->ret = dxl_coord_worker_run(w);
	dxl_coord_worker_delete(&w);
	return NULL;
}

/* a coordinator process: two worker threads (their writers share one
 * ZooKeeper session: each must still get its own writer slots) */
static void child_main(const char *path, uint64_t seed)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGTERM, on_term);
	FILE *f = fopen(path, "w");
	if (!f)
		_exit(2);
	setvbuf(f, NULL, _IOLBF, 0);
	struct dxl_zk *zk = NULL;
	if (dxlt_zk_open(g_zkc, g_name, &zk))
		_exit(3);
	struct dxl_coord_cfg cfg;
	dxl_coord_cfg_init(&cfg);
	struct dxl_coord *c = NULL;
	if (dxl_coord_new(zk, &cfg, &c))
		_exit(4);
	struct child_thread ct[2];
	pthread_t th[2];
	uint32_t nth = getenv("DXL_TXN_CRASH_THREADS") ? (uint32_t)atoi(getenv("DXL_TXN_CRASH_THREADS")) : 2;
	nth = nth == 1 ? 1 : 2;
	memset(ct, 0, sizeof(ct));
	for (uint32_t i = 0; i < nth; i++) {
		ct[i] = (struct child_thread){.c = c, .out = f, .first_co = 4 * i, .seed = seed};
		if (pthread_create(&th[i], NULL, child_thread, &ct[i]))
			_exit(5);
	}
	for (uint32_t i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	fprintf(f, "E\n");
	fclose(f);
	dxl_coord_delete(&c);
	dxl_zk_delete(&zk);
	_exit(ct[0].ret || ct[1].ret ? 6 : 0);
}

struct child {
	pid_t pid;
	char path[300];
};
static struct child g_ch[64];
static int g_nch;

static void spawn_child(uint64_t seed)
{
	struct child *ch = &g_ch[g_nch];
	snprintf(ch->path, sizeof(ch->path), "%s/coord-%d.txt", g_tmp, g_nch);
	fflush(NULL);
	ch->pid = fork();
	assert_true(ch->pid >= 0);
	if (ch->pid == 0)
		child_main(ch->path, seed);
	g_nch++;
}

/* the ledger of every coordinator process: committed deltas and writes,
 * and the intents whose outcome is unknown */
struct churn_op {
	uint64_t key, token;
	bool del, unknown;
};

struct ledger {
	int64_t committed;         /* sum of committed deltas */
	int64_t unk_lo, unk_hi;    /* the unknown ones: sums of min(0,d), max(0,d) */
	uint32_t writes[NKEYS];    /* committed writes per key */
	uint32_t unk_writes[NKEYS];
	uint64_t ncommit, nunknown;
	struct churn_op *ch;       /* committed and unknown inserts and deletes */
	size_t nch, chcap;
	uint64_t nins, ndel;
};

static void churn_add(struct ledger *L, struct churn_op op)
{
	if (L->nch == L->chcap) {
		L->chcap = L->chcap ? 2 * L->chcap : 1024;
		L->ch = realloc(L->ch, L->chcap * sizeof(*L->ch));
		assert_non_null(L->ch);
	}
	L->ch[L->nch++] = op;
	if (!op.unknown) {
		L->nins += !op.del;
		L->ndel += op.del;
	}
}

struct intent {
	bool open, churn, del;
	int64_t delta;
	uint64_t key, token;
	uint32_t k[DXLB_SB_MAX_KEYS], n;
};

/* an intent whose outcome is unknown (maybe, or its coordinator died) */
static void intent_unknown(struct ledger *L, struct intent *in)
{
	if (in->churn) {
		churn_add(L, (struct churn_op){.key = in->key, .token = in->token, .del = in->del,
					       .unknown = true});
	} else {
		L->unk_lo += DXL_MIN(in->delta, 0);
		L->unk_hi += DXL_MAX(in->delta, 0);
		for (uint32_t i = 0; i < in->n; i++)
			if (in->k[i] < NKEYS)
				L->unk_writes[in->k[i]]++;
		L->nunknown++;
	}
	in->open = false;
}

static void ledger_read(const char *path, struct ledger *L)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	struct intent in[NCO] = {0};
	char line[256];
	while (fgets(line, sizeof(line), f)) {
		if (!strchr(line, '\n'))
			break; /* cut by the kill */
		unsigned co;
		uint64_t key, token;
		if ((line[0] == 'I' || line[0] == 'D') &&
		    sscanf(line + 1, " %u %" SCNu64 " %" SCNu64, &co, &key, &token) == 3 && co < NCO) {
			in[co] = (struct intent){.open = true, .churn = true, .del = line[0] == 'D',
						 .key = key, .token = token};
			continue;
		}
		if (line[0] == 'P') {
			int64_t d;
			int off = 0;
			if (sscanf(line, "P %u %" SCNd64 "%n", &co, &d, &off) < 2 || co >= 8)
				continue;
			in[co] = (struct intent){.open = true, .delta = d};
			const char *p = line + off;
			unsigned k;
			int used;
			while (in[co].n < DXLB_SB_MAX_KEYS && sscanf(p, " %u%n", &k, &used) == 1) {
				in[co].k[in[co].n++] = k;
				p += used;
			}
		} else if (line[0] == 'M' && sscanf(line + 1, " %u", &co) == 1 && co < NCO &&
			   in[co].open) {
			intent_unknown(L, &in[co]);
		} else if ((line[0] == 'C' || line[0] == 'A') && sscanf(line + 1, " %u", &co) == 1 &&
			   co < NCO && in[co].open) {
			if (in[co].churn) {
				if (line[0] == 'C')
					churn_add(L, (struct churn_op){.key = in[co].key,
								       .token = in[co].token,
								       .del = in[co].del});
			} else if (line[0] == 'C') {
				L->committed += in[co].delta;
				for (uint32_t i = 0; i < in[co].n; i++)
					if (in[co].k[i] < NKEYS)
						L->writes[in[co].k[i]]++;
				L->ncommit++;
			}
			in[co].open = false;
		}
	}
	fclose(f);
	/* a killed coordinator's last intents: unknown */
	for (int co = 0; co < NCO; co++)
		if (in[co].open)
			intent_unknown(L, &in[co]);
}

/* ---- the churn table read in the parent, checked against the ledger -------------- */

struct churn_scan {
	struct dxl_coord_worker *w;
	uint64_t token[NCHURN]; /* 0: absent */
	int ret;
};

static int churn_scan_fn(struct dxl_txn *t, void *arg)
{
	struct churn_scan *a = arg;
	for (uint64_t k = 0; k < NCHURN; k++) {
		uint8_t v[8];
		uint32_t len;
		int ret = dxl_txn_get(t, T_CHURN, k, v, 8, &len);
		if (ret == DXL_E_NOENT) {
			a->token[k] = 0;
			continue;
		}
		if (ret)
			return ret;
		a->token[k] = dxl_get_le64(v);
	}
	return 0;
}

static void co_churn_scan(void *arg)
{
	struct churn_scan *a = arg;
	a->ret = dxl_txn_run(a->w, churn_scan_fn, a, 0, NULL);
}

static bool has_op(const struct ledger *L, uint64_t key, uint64_t token, bool del, bool any)
{
	for (size_t i = 0; i < L->nch; i++)
		if (L->ch[i].key == key && L->ch[i].token == token && L->ch[i].del == del &&
		    (any || !L->ch[i].unknown))
			return true;
	return false;
}

/*
 * Every key of the churn table is absent or holds a token; against the
 * ledgers (committed, and unknown: a killed coordinator's last intent):
 * a present token was inserted (committed or unknown) and never deleted
 * by a committed delete (a deleted key back: issue 20); no token was
 * deleted twice (back in between, then deleted again); every committed
 * insert of the key other than the present token was deleted (committed
 * or unknown), else a committed insert was lost.
 */
static uint32_t churn_check(const struct ledger *L, const struct churn_scan *cs)
{
	uint32_t bad = 0, present = 0;
	for (uint64_t k = 0; k < NCHURN; k++) {
		uint64_t x = cs->token[k];
		present += x != 0;
		if (x && !has_op(L, k, x, false, true) && bad++ < 10)
			print_message("  churn key %" PRIu64 ": token %" PRIx64 " that nobody inserted\n",
				      k, x);
		if (x && has_op(L, k, x, true, false) && bad++ < 10)
			print_message("  churn key %" PRIu64 ": token %" PRIx64
				      " is back: its delete was committed\n", k, x);
		for (size_t i = 0; i < L->nch; i++) {
			const struct churn_op *o = &L->ch[i];
			/* a token deleted twice came back in between */
			if (o->key == k && o->del && !o->unknown) {
				uint32_t n = 0;
				bool first = true;
				for (size_t j = 0; j < L->nch; j++)
					if (L->ch[j].key == k && L->ch[j].del && !L->ch[j].unknown &&
					    L->ch[j].token == o->token) {
						n++;
						first = first && j >= i;
					}
				if (n > 1 && first && bad++ < 10)
					print_message("  churn key %" PRIu64 ": token %" PRIx64
						      " deleted %u times (back after its delete)\n",
						      k, o->token, n);
			}
			if (o->key != k || o->del || o->unknown || o->token == x)
				continue;
			if (!has_op(L, k, o->token, true, true) && bad++ < 10)
				print_message("  churn key %" PRIu64 ": committed insert %" PRIx64
					      " lost (%s, never deleted)\n",
					      k, o->token, x ? "another token there" : "absent");
		}
	}
	print_message("  churn: %" PRIu64 " inserts and %" PRIu64 " deletes committed, %u keys present at the end\n",
		      L->nins, L->ndel, present);
	return bad;
}

/* ---- reading every balance (and its version) in the parent ---------------------- */

struct snap {
	int64_t total;
	uint64_t v[NKEYS];
};

struct scan_arg {
	struct dxl_coord_worker *w;
	struct snap *s;
	uint32_t first, n;
	int ret;
};

static int scan_fn(struct dxl_txn *t, void *arg)
{
	struct scan_arg *a = arg;
	for (uint32_t k = a->first; k < a->first + a->n; k++) {
		uint32_t table = k < ACCTS ? DXLB_SB_SAVINGS : DXLB_SB_CHECKING;
		uint8_t v[8];
		uint32_t len;
		int ret = dxl_txn_get(t, table, k % ACCTS, v, 8, &len);
		if (ret)
			return ret;
	}
	return 0;
}

/* every record: read-only transactions of 60; with touch, a transaction
 * that writes every balance back (locks left by a dead coordinator get
 * resolved on the way) */
static void co_scan(void *arg)
{
	struct scan_arg *a = arg;
	a->s->total = 0;
	for (uint32_t first = 0; first < NKEYS; first += 60) {
		struct scan_arg part = *a;
		part.first = first;
		part.n = DXL_MIN(60, NKEYS - first);
		a->ret = dxl_txn_run(a->w, scan_fn, &part, 0, NULL);
		if (a->ret)
			return;
		struct dxl_txn_access acc[64];
		int n = dxl_txn_footprint(dxl_txn_last(a->w), acc, 64);
		for (int i = 0; i < n && i < 64; i++)
			a->s->v[key_index(acc[i].table, acc[i].key)] = acc[i].version;
		/* the values: read again (footprints carry versions only) */
		struct dxl_txn *t;
		if ((a->ret = dxl_txn_begin(a->w, &t)))
			return;
		for (uint32_t k = first; k < first + part.n; k++) {
			uint8_t v[8];
			uint32_t len;
			uint32_t table = k < ACCTS ? DXLB_SB_SAVINGS : DXLB_SB_CHECKING;
			if ((a->ret = dxl_txn_get(t, table, k % ACCTS, v, 8, &len)))
				return;
			a->s->total += dxlb_sb_decode(v);
		}
		if ((a->ret = dxl_txn_commit(t, NULL)))
			return;
	}
}

struct touch_arg {
	struct dxl_coord_worker *w;
	int ret;
};

static int touch_fn(struct dxl_txn *t, void *arg)
{
	uint32_t first = *(uint32_t *)arg;
	for (uint32_t k = first; k < first + 60 && k < NKEYS; k++) {
		uint32_t table = k < ACCTS ? DXLB_SB_SAVINGS : DXLB_SB_CHECKING;
		uint8_t v[8];
		uint32_t len;
		int ret = dxl_txn_get(t, table, k % ACCTS, v, 8, &len);
		if (!ret)
			ret = dxl_txn_put(t, table, k % ACCTS, v, 8);
		if (ret)
			return ret;
	}
	return 0;
}

static void co_touch(void *arg)
{
	struct touch_arg *a = arg;
	for (uint32_t first = 0; first < NKEYS && !a->ret; first += 60)
		a->ret = dxl_txn_run(a->w, touch_fn, &first, 0, NULL);
}

struct load_arg {
	struct dxl_coord_worker *w;
	int ret;
};

static int load_fn(struct dxl_txn *t, void *arg)
{
	uint32_t first = *(uint32_t *)arg;
	for (uint32_t k = first; k < first + 30 && k < NKEYS; k++) {
		uint32_t table = k < ACCTS ? DXLB_SB_SAVINGS : DXLB_SB_CHECKING;
		uint8_t v[8];
		dxlb_sb_encode(g_sb.init_balance, v);
		int ret = dxl_txn_insert(t, table, k % ACCTS, v, 8);
		if (ret)
			return ret;
	}
	return 0;
}

static void co_load(void *arg)
{
	struct load_arg *a = arg;
	for (uint32_t first = 0; first < NKEYS && !a->ret; first += 30)
		a->ret = dxl_txn_run(a->w, load_fn, &first, 0, NULL);
}

/* run fn in a coordinator of this process */
static int parent_run(dxl_co_fn fn, void *arg, struct dxl_coord_worker **wslot)
{
	struct dxl_zk *zk = NULL;
	if (dxlt_zk_open(g_zkc, g_name, &zk))
		return -1;
	struct dxl_coord_cfg cfg;
	dxl_coord_cfg_init(&cfg);
	cfg.log_unavail_ms = 20000;
	struct dxl_coord *c = NULL;
	struct dxl_coord_worker *w = NULL;
	int ret = dxl_coord_new(zk, &cfg, &c);
	if (!ret)
		ret = dxl_coord_worker_new(c, 1, &w);
	if (!ret) {
		*wslot = w;
		ret = dxl_coord_worker_spawn(w, fn, arg);
		if (!ret)
			ret = dxl_coord_worker_run(w);
	}
	if (ret)
		print_message("parent coordinator: %s\n", dxl_errmsg());
	dxl_coord_worker_delete(&w);
	dxl_coord_delete(&c);
	dxl_zk_delete(&zk);
	return ret;
}

/* ---- the schedule ------------------------------------------------------------------ */

/* the primary of shard s and a backup, from `dxl cluster status` is more
 * text than needed: read the configuration */
static void shard_nodes(uint32_t shard, uint32_t *primary, uint32_t *backup)
{
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_zkc, g_name, &zk), 0);
	struct dxl_cluster_config c;
	assert_int_equal(dxl_cluster_config_read(zk, &c, NULL), 0);
	const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, shard);
	assert_non_null(sh);
	*primary = sh->primary;
	*backup = sh->nbackups ? sh->backups[0] : 0;
	dxl_cluster_config_clear(&c);
	dxl_zk_delete(&zk);
}

/* every shard has 3 members (the restarted ones caught up) */
static bool wait_full(int timeout_ms)
{
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_zkc, g_name, &zk), 0);
	bool ok = false;
	while (!ok && dxl_now_ms() < end) {
		struct dxl_cluster_config c;
		if (dxl_cluster_config_read(zk, &c, NULL) == 0) {
			ok = true;
			for (uint32_t i = 0; i < c.nshards; i++)
				ok = ok && c.shards[i].nbackups == 2;
			dxl_cluster_config_clear(&c);
		}
		if (!ok)
			usleep(200 * 1000);
	}
	dxl_zk_delete(&zk);
	return ok;
}

static void restart(uint32_t node)
{
	char n[16];
	snprintf(n, sizeof(n), "%u", node);
	int rc = DXL(60000, "cluster", "restart", n, "--dir", g_dir);
	if (rc)
		print_message("restart %u: %s%s\n", node, g_out, g_err);
	assert_int_equal(rc, 0);
}

static void kill_node(uint32_t node, bool power_fail)
{
	char n[16];
	snprintf(n, sizeof(n), "%u", node);
	int rc = power_fail ? DXL(30000, "cluster", "kill", n, "--dir", g_dir, "--power-fail")
			    : DXL(30000, "cluster", "kill", n, "--dir", g_dir);
	if (rc)
		print_message("kill %u: %s%s\n", node, g_out, g_err);
	assert_int_equal(rc, 0);
}

/* ---- what the power failures did (coverage) --------------------------------------- */

static char g_report[300]; /* DXL_FABRIC_PF_REPORT of the replicas */
static long g_report_off;

struct pf_cover {
	unsigned pf, pf_lost, struck_traffic;
	uint64_t lines_lost, torn, ghosts, stale, rings, laps;
};
static struct pf_cover g_pfc;

/* the power failures the replicas reported since the last call */
static void pf_reports(void)
{
	FILE *f = fopen(g_report, "r");
	if (!f)
		return;
	fseek(f, g_report_off, SEEK_SET);
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		const char *l = strstr(line, "lost=");
		uint64_t lost = l ? strtoull(l + 5, NULL, 10) : 0;
		g_pfc.pf++;
		g_pfc.pf_lost += lost > 0;
		g_pfc.lines_lost += lost;
		g_pfc.struck_traffic += strstr(line, "struck=idle") == NULL;
		print_message("    %s", line);
	}
	g_report_off = ftell(f);
	fclose(f);
}

/* the power-failure model of the replicas `dxl cluster` starts from now on:
 * armed by SIGUSR2, random policy, this seed (where it strikes, which lines
 * it loses), striking idle only after a second without a step */
static void pf_seed_env(uint64_t seed)
{
	char v[64];
	/* transactions write persistent memory slowly here: strike in the
	 * traffic (up to a second between steps), not idle after 20 ms */
	snprintf(v, sizeof(v), "USR2:random:%" PRIu64 ":1000", seed);
	setenv("DXL_FABRIC_PF", v, 1);
}

/* the dead node's log rings as its restart will scan them: where each ends */
static void scan_dead_node(uint32_t node)
{
	for (uint32_t shard = 0; shard < 2; shard++) {
		char path[512];
		snprintf(path, sizeof(path), "%s/data/%u/shard-%u.log", g_dir, node, shard);
		struct dxl_region_id id = {.node_id = node, .kind = DXL_REGION_LOG};
		snprintf(id.cluster, sizeof(id.cluster), "%s", g_name);
		struct dxl_region *reg = NULL;
		struct dxl_logstore *ls = NULL;
		if (dxl_region_open(path, DXL_DUR_PROCESS, &id, &reg))
			continue; /* not a member of that shard */
		assert_int_equal(dxl_logstore_open(reg, &ls), 0);
		for (uint32_t r = 0; r < dxl_logstore_nrings(ls); r++) {
			struct dxl_ring_iter it;
			struct dxl_rec rec;
			if (dxl_ring_iter_init(&it, ls, r))
				continue;
			bool any = false;
			while (dxl_ring_iter_next(&it, &rec, NULL))
				any = true;
			if (!any && it.pos == 0)
				continue; /* a ring nobody wrote */
			g_pfc.rings++;
			g_pfc.laps += it.pos / dxl_logstore_ring_size(ls);
			g_pfc.torn += it.end == DXL_RING_END_TORN;
			g_pfc.ghosts += it.end == DXL_RING_END_GHOST;
			g_pfc.stale += it.end == DXL_RING_END_STALE;
		}
		dxl_logstore_close(&ls);
		dxl_region_close(&reg);
	}
}

/* the stores of the members of each shard, after a clean shutdown: key by
 * key, extra keys included (tests/lib/stores.h) */
static void compare_stores(void)
{
	char root[512];
	snprintf(root, sizeof(root), "%s/data", g_dir);
	const uint32_t nodes[3] = {1, 2, 3};
	for (uint32_t shard = 0; shard < 2; shard++) {
		char why[2048];
		struct dxlt_stores_report rep;
		int r = dxlt_stores_compare(root, g_name, shard, nodes, 3, DXL_DUR_PROCESS, why,
					    sizeof(why), &rep);
		if (r)
			fail_msg("shard %u: the replicas' stores differ: %s", shard, why);
		print_message("  shard %u: %" PRIu64 " keys identical on the 3 replicas (%" PRIu64
			      " tombstones)\n", shard, rep.keys, rep.tombstones);
		if (rep.keys < NKEYS / 2)
			fail_msg("shard %u: %" PRIu64 " keys compared, expected at least %u", shard,
				 rep.keys, NKEYS / 2);
	}
}

static void test_smallbank_crash_schedule(void **state)
{
	(void)state;
	if (!g_zkc) {
		print_message("SKIPPED: no ZooKeeper (DXL_TEST_ZK unset)\n");
		skip();
	}
	assert_true(g_up);
	unsigned steps = getenv("DXL_TXN_CRASH_STEPS") ? (unsigned)atoi(getenv("DXL_TXN_CRASH_STEPS")) : 3;
	uint64_t seed = getenv("DXL_TXN_CRASH_SEED") ? strtoull(getenv("DXL_TXN_CRASH_SEED"), NULL, 0)
						     : (uint64_t)time(NULL);
	print_message("  crash schedule: %u steps, seed %" PRIu64 " (DXL_TXN_CRASH_SEED)\n", steps,
		      seed);
	struct load_arg la = {0};
	assert_int_equal(parent_run(co_load, &la, &la.w), 0);
	assert_int_equal(la.ret, 0);
	struct snap before = {0}, after = {0};
	struct scan_arg sa = {.s = &before};
	/* parent_run fills sa.w through the worker slot */
	assert_int_equal(parent_run(co_scan, &sa, &sa.w), 0);
	assert_int_equal(sa.ret, 0);
	assert_int_equal(before.total, (int64_t)NKEYS * g_sb.init_balance);
	for (int i = 0; i < NCHILD; i++)
		spawn_child(seed + (uint64_t)i);
	int live[NCHILD] = {0, 1};
	uint64_t rng = seed;
	sleep(2);
	for (unsigned s = 0; s < steps; s++) {
		unsigned what = (unsigned)(dxlb_sb_rand(&rng) % 4);
		uint32_t shard = (uint32_t)(dxlb_sb_rand(&rng) % 2), p, b;
		shard_nodes(shard, &p, &b);
		switch (what) {
		case 0:
		case 1: {
			uint32_t node = what == 0 ? p : b;
			print_message("  step %u: kill -9 %s %u of shard %u\n", s,
				      what == 0 ? "primary" : "backup", node, shard);
			kill_node(node, false);
			sleep(3);
			restart(node);
			break;
		}
		case 2:
			print_message("  step %u: power failure of node %u (primary of shard %u)\n", s,
				      p, shard);
			kill_node(p, true);
			pf_reports();
			scan_dead_node(p);
			sleep(3);
			pf_seed_env(dxlb_sb_rand(&rng)); /* its next failure strikes elsewhere */
			restart(p);
			break;
		case 3: {
			int k = (int)(dxlb_sb_rand(&rng) % NCHILD);
			print_message("  step %u: kill -9 coordinator process %d\n", s, live[k]);
			kill(g_ch[live[k]].pid, SIGKILL);
			waitpid(g_ch[live[k]].pid, NULL, 0);
			g_ch[live[k]].pid = 0;
			live[k] = g_nch;
			spawn_child(seed + 100 + s);
			break;
		}
		}
		if (!wait_full(30000))
			fail_msg("step %u: the shards did not get their 3 members back", s);
		sleep(2);
	}
	/* stop the coordinators cleanly */
	for (int i = 0; i < g_nch; i++)
		if (g_ch[i].pid > 0) {
			kill(g_ch[i].pid, SIGTERM);
			int st = 0;
			assert_int_equal(waitpid(g_ch[i].pid, &st, 0), g_ch[i].pid);
			g_ch[i].pid = 0;
		}
	struct ledger L = {0};
	for (int i = 0; i < g_nch; i++)
		ledger_read(g_ch[i].path, &L);
	print_message("  %" PRIu64 " committed writing transactions, %" PRIu64 " unknown (a coordinator died)\n",
		      L.ncommit, L.nunknown);
	print_message("  power failures: %u (%u struck in the traffic), %u lost lines (%" PRIu64
		      " lines); their rings at restart: %" PRIu64 " written, %" PRIu64
		      " ending at a torn record, %" PRIu64 " at a ghost, %" PRIu64
		      " at a stale record, %" PRIu64 " laps\n",
		      g_pfc.pf, g_pfc.struck_traffic, g_pfc.pf_lost, g_pfc.lines_lost, g_pfc.rings,
		      g_pfc.torn, g_pfc.ghosts, g_pfc.stale, g_pfc.laps);
	/* coverage floors, once there are enough power failures to judge:
	 * they strike in the traffic and really lose lines */
	if (g_pfc.pf >= 5) {
		assert_true(g_pfc.pf_lost * 10 >= g_pfc.pf * 3);
		assert_true(g_pfc.struck_traffic * 2 >= g_pfc.pf);
	}
	/* (torn records are rare here: SmallBank's records are a line or two,
	 * lost whole or kept whole; test_log_crash asserts the torn floor) */
	assert_true(L.ncommit > 0);
	/* the dead coordinators' locks: resolved by the next one meeting them */
	struct touch_arg ta = {0};
	assert_int_equal(parent_run(co_touch, &ta, &ta.w), 0);
	assert_int_equal(ta.ret, 0);
	sa = (struct scan_arg){.s = &after};
	assert_int_equal(parent_run(co_scan, &sa, &sa.w), 0);
	assert_int_equal(sa.ret, 0);
	int64_t lo = before.total + L.committed + L.unk_lo;
	int64_t hi = before.total + L.committed + L.unk_hi;
	print_message("  money: %" PRId64 " (expected %" PRId64 " .. %" PRId64 ")\n", after.total, lo, hi);
	uint32_t bad = 0;
	for (uint32_t k = 0; k < NKEYS; k++) {
		uint64_t grew = (after.v[k] - before.v[k]) / 2 - 1;
		if ((grew < L.writes[k] || grew > L.writes[k] + L.unk_writes[k]) && bad++ < 10)
			print_message("  key %u: %" PRIu64 " writes in the store, %u committed (+%u unknown)\n",
				      k, grew, L.writes[k], L.unk_writes[k]);
	}
	if (after.total < lo || after.total > hi)
		fail_msg("money not conserved: total %" PRId64 ", committed transactions say %" PRId64
			 " (unknown ones: %" PRId64 " .. %" PRId64 ")",
			 after.total, before.total + L.committed, L.unk_lo, L.unk_hi);
	for (uint32_t k = 0; k < NKEYS; k++) {
		uint64_t grew = (after.v[k] - before.v[k]) / 2 - 1; /* - the touch */
		if (grew < L.writes[k] || grew > L.writes[k] + L.unk_writes[k])
			fail_msg("key %u: %" PRIu64 " writes in the store, %u committed (+%u unknown)", k,
				 grew, L.writes[k], L.unk_writes[k]);
	}
	/* inserts and deletes: the churn table holds what the ledgers say */
	struct churn_scan chs = {0};
	assert_int_equal(parent_run(co_churn_scan, &chs, &chs.w), 0);
	assert_int_equal(chs.ret, 0);
	uint32_t cbad = churn_check(&L, &chs);
	if (L.nins == 0 || L.ndel == 0)
		fail_msg("the churn committed %" PRIu64 " inserts and %" PRIu64
			 " deletes: it must insert and delete under load", L.nins, L.ndel);
	if (cbad)
		fail_msg("%u churn keys disagree with the committed inserts and deletes", cbad);
	free(L.ch);
	/* let the backups apply the last of it, then compare the stores */
	sleep(2);
	int rc = DXL(60000, "cluster", "down", "--dir", g_dir);
	assert_int_equal(rc, 0);
	g_up = false;
	compare_stores();
}

static int group_setup(void **state)
{
	(void)state;
	g_zkc = getenv("DXL_TEST_ZK");
	dxlb_sb_cfg_init(&g_sb);
	g_sb.accounts = ACCTS;
	assert_int_equal(dxlt_prog_path("dxl", g_dxl, sizeof(g_dxl)), 0);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-txncrash-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	g_out = malloc(OUT_CAP);
	g_err = malloc(OUT_CAP);
	if (!g_zkc)
		return 0;
	snprintf(g_name, sizeof(g_name), "txc-%d", (int)getpid());
	snprintf(g_dir, sizeof(g_dir), "%s/cluster", g_tmp);
	/* the replicas (children of `dxl cluster`) report their power failures */
	snprintf(g_report, sizeof(g_report), "%s/pf-report", g_tmp);
	setenv("DXL_FABRIC_PF_REPORT", g_report, 1);
	pf_seed_env((uint64_t)getpid());
	int rc = DXL(60000, "cluster", "up", "--dir", g_dir, "--zk", g_zkc, "--cluster", g_name,
		     "--replicas", "3", "--shards", "2", "--ring-size", "8M", "--writer-slots", "16",
		     "--session-timeout", "2000", "-o", "engine.tables=1:8:512,2:8:512,3:8:512", "-o",
		     "engine.lock_mode=nic");
	if (rc)
		print_message("cluster up: %s%s\n", g_out, g_err);
	g_up = rc == 0;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	for (int i = 0; i < g_nch; i++)
		if (g_ch[i].pid > 0) {
			kill(g_ch[i].pid, SIGKILL);
			waitpid(g_ch[i].pid, NULL, 0);
		}
	if (g_up)
		DXL(60000, "cluster", "down", "--dir", g_dir);
	dxlt_cluster_reap(g_dir); /* what a slow or failed shutdown left */
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
	unsigned steps = getenv("DXL_TXN_CRASH_STEPS") ? (unsigned)atoi(getenv("DXL_TXN_CRASH_STEPS")) : 3;
	alarm(300 + 40 * steps);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_smallbank_crash_schedule),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
