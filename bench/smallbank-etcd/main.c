/* main.c -- dxl-bench-smallbank-etcd: SmallBank on a 3-member etcd cluster, the peer of dxl's SmallBank */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/lib/bench_lib.h"
#include "bench/lib/smallbank.h"
#include "bench/smallbank-etcd/sbe.h"
#include "common/common.h"
#include "common/hist.h"

static const char usage[] =
"NAME\n"
"    dxl-bench-smallbank-etcd -- SmallBank on etcd, the peer of dxl's SmallBank\n"
"\n"
"SYNOPSIS\n"
"    dxl-bench-smallbank-etcd [--endpoints HOST:PORT[,...]] [OPTIONS]\n"
"\n"
"DESCRIPTION\n"
"    Runs the SmallBank transactions of bench/lib/smallbank.h (the same\n"
"    generator and transaction logic dxl's SmallBank uses) against an etcd\n"
"    cluster through etcd's JSON gateway (HTTP/1.1 keep-alive, one blocking\n"
"    connection per session), as optimistic transactions:\n"
"      read    one read-only txn with one range request per key the\n"
"              transaction reads: an atomic snapshot of all of them, with\n"
"              each key's value and mod_revision (linearizable unless\n"
"              --serializable);\n"
"      compute dxlb_sb_exec on those values, buffering the puts;\n"
"      commit  one txn: compare mod_revision == the one read, for EVERY key\n"
"              read; on success put the new balances. A failed compare is an\n"
"              abort: the same transaction is run again from the read (the\n"
"              abort is counted). A transaction that writes nothing (Balance,\n"
"              SendPayment with insufficient funds) commits after its read.\n"
"    Every commit of etcd is a Raft entry fsynced by a quorum of members.\n"
"\n"
"    First (unless --no-load) every sav/ and chk/ key is deleted and ACCOUNTS\n"
"    accounts are loaded (64 accounts = 128 puts per txn, etcd's default\n"
"    --max-txn-ops). Then THREADS x SESSIONS sessions (each a thread with its\n"
"    own connection; session i uses endpoint i mod the number of endpoints)\n"
"    run transactions for DURATION seconds. A line per second goes to\n"
"    stderr. At the end every account is read (one snapshot) and the money\n"
"    check of smallbank.h is applied: the total must equal the initial total\n"
"    plus the deltas of the committed transactions.\n"
"\n"
"    Latency is per transaction, from the start of its first read to the\n"
"    reply of the txn that committed it (aborted attempts included).\n"
"\n"
"    scripts/etcd.sh start DIR starts a 3-member cluster on loopback and\n"
"    prints the endpoints. Without --endpoints (and DXL_ETCD_ENDPOINTS) the\n"
"    benchmark runs that script itself on a new /tmp/dxl-etcd-sb.* folder and\n"
"    stops the cluster and removes the folder at the end.\n"
"    docs/bench-smallbank-etcd.md has the details.\n"
"\n"
"OPTIONS\n"
"    --endpoints LIST   etcd client endpoints, comma-separated host:port\n"
"                       (numeric IPv4; default $DXL_ETCD_ENDPOINTS, else a\n"
"                       cluster of its own, see above)\n"
"    --etcd-script PATH the script that starts that cluster (default\n"
"                       scripts/etcd.sh)\n"
"    --accounts N       accounts (default 100000)\n"
"    --duration SECS    measured run (default 10)\n"
"    --threads T        (default 2)\n"
"    --sessions C       sessions per thread, each one transaction in flight\n"
"                       (default 4; T x C sessions in all)\n"
"    --hot-frac F       share of accounts in the hot set (default 0.04)\n"
"    --hot-prob P       share of account draws that hit it (default 0.90)\n"
"    --seed S           random seed (default 1); session i draws from S and i\n"
"    --serializable     serializable (local, possibly stale) reads instead of\n"
"                       linearizable ones; stale reads then fail the compare\n"
"    --no-load          keep the accounts an earlier run loaded; the check\n"
"                       then starts from the total read before the run\n"
"    --json PATH        write the result as JSON to PATH\n"
"    --out PATH         the same (the make bench convention)\n"
"    --rate R           open loop: offer R transactions per second on a fixed\n"
"                       schedule (transaction k due at start + k/R); a free\n"
"                       session takes the next one and waits for its time;\n"
"                       latency from when it was due, service time from its\n"
"                       first read (default: closed loop)\n"
"    --quick            the CI configuration: 10000 accounts, 5 s, 2 x 4\n"
"                       sessions (options given explicitly still apply)\n"
"    -h, --help         this text\n"
"\n"
"OUTPUT\n"
"    A summary on stdout; with --json a file {system: \"etcd\", version,\n"
"    members, endpoints, accounts, hot_frac, hot_prob, threads, sessions\n"
"    (per thread), sessions_total, duration_s, committed, aborts, abort_rate\n"
"    (aborts / attempts), txn_per_s, p50_us, p99_us, mean_us, types {name:\n"
"    {committed, aborts, p50_us, p99_us}}, read, load_s, total, expected,\n"
"    check: \"ok\" or the error, resends (requests sent again after \"too\n"
"    many requests\" or a lost connection), summary (what dxl-bench-compare\n"
"    reads: ops = committed, latency, retries = aborts + resends), setup}.\n"
"\n"
"EXIT STATUS\n"
"    0 the run finished and the money check passed; 1 set-up failure (bad\n"
"    option, etcd unreachable or not started, load failed), a failed run (an\n"
"    etcd error, a commit with an unknown outcome) or a signal; 2 measured,\n"
"    but the money check failed (wrong data).\n"
"\n"
"EXAMPLES\n"
"    E=$(scripts/etcd.sh start /tmp/etcd-sb)\n"
"    dxl-bench-smallbank-etcd --endpoints $E --accounts 10000 --duration 10 \\\n"
"        --threads 2 --sessions 8 --json results/smallbank-etcd.json\n"
"    scripts/etcd.sh stop /tmp/etcd-sb\n";

#define MAX_ENDPOINTS 16
#define LOAD_BATCH 64 /* accounts per load txn: 128 puts = etcd's --max-txn-ops */

struct opts {
	char *endpoints[MAX_ENDPOINTS];
	int nendpoints;
	struct dxlb_sb_cfg sb;
	uint64_t duration_s;
	uint32_t threads, sessions;
	uint64_t seed;
	int serializable;
	int load;
	const char *json;
	int quick;
	const char *etcd_script;
	char tmpdir[64];   /* the cluster this run started (if no --endpoints) */
	double rate;       /* > 0: open loop, transactions/s offered */
};

/* the open loop's schedule: transaction k is due at g_sched_t0 + k / rate */
static uint64_t g_sched_t0;
static _Atomic uint64_t g_next_k;

static atomic_int g_stop;
static atomic_int g_failed;
static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
	g_signal = sig;
	atomic_store(&g_stop, 1);
	atomic_store(&g_failed, 1);
}

struct session {
	pthread_t th;
	uint32_t idx;
	const struct opts *o;
	struct sbe_http h;
	uint64_t rng;
	atomic_uint_fast64_t committed, aborts; /* read by the progress loop */
	uint64_t type_commit[DXLB_SB_NTYPES], type_abort[DXLB_SB_NTYPES];
	int64_t sum_delta;
	struct dxl_hist lat, type_lat[DXLB_SB_NTYPES];
	struct dxl_hist svc; /* open loop: from the start of the first read */
	uint64_t started;    /* transactions begun */
	uint64_t resends;    /* requests sent again (refused, lost connection) */
	int err;
	char errmsg[512];
};

/* ---- one transaction's read set and buffered writes ------------------------ */

struct rw {
	int n;
	uint32_t tables[DXLB_SB_MAX_KEYS];
	uint64_t accts[DXLB_SB_MAX_KEYS];
	int64_t vals[DXLB_SB_MAX_KEYS], revs[DXLB_SB_MAX_KEYS];
	int nput;
	uint32_t ptables[DXLB_SB_MAX_KEYS];
	uint64_t paccts[DXLB_SB_MAX_KEYS];
	int64_t pvals[DXLB_SB_MAX_KEYS];
};

static int rw_get(void *ctx, uint32_t table, uint64_t acct, int64_t *bal)
{
	struct rw *r = ctx;
	for (int i = 0; i < r->n; i++) {
		if (r->tables[i] == table && r->accts[i] == acct) {
			*bal = r->vals[i];
			return 0;
		}
	}
	return dxl_err_set(DXL_E_INTERNAL, "smallbank read %s/%" PRIu64 " not in the read set",
			   dxlb_sb_table_name(table), acct);
}

static int rw_put(void *ctx, uint32_t table, uint64_t acct, int64_t bal)
{
	struct rw *r = ctx;
	if (r->nput == DXLB_SB_MAX_KEYS)
		return dxl_err_set(DXL_E_INTERNAL, "smallbank: more than %d puts",
				   DXLB_SB_MAX_KEYS);
	r->ptables[r->nput] = table;
	r->paccts[r->nput] = acct;
	r->pvals[r->nput++] = bal;
	return 0;
}

static const struct dxlb_sb_ops rw_ops = {rw_get, rw_put};

static void backoff_us(uint64_t us)
{
	struct timespec ts = {0, (long)(us * 1000)};
	nanosleep(&ts, NULL);
}

/* a read: safe to send again after a lost connection or "too many requests" */
static int read_retrying(struct session *s, struct rw *r)
{
	for (int tries = 0;; tries++) {
		int ret = sbe_etcd_read(&s->h, s->o->serializable, r->n, r->tables, r->accts,
					r->vals, r->revs);
		if (ret != DXL_E_AGAIN && ret != DXL_E_UNREACHABLE && ret != DXL_E_UNAVAIL)
			return ret;
		if (tries == 50)
			return ret;
		s->resends++;
		backoff_us(1000);
	}
}

/*
 * one transaction until it commits (0, *delta set) or the run stops between
 * attempts (1); < 0 on an error. A commit whose reply is lost is ambiguous:
 * it is an error, since the money check could not account for it.
 */
static int run_txn(struct session *s, const struct dxlb_sb_txn *t, int64_t *delta)
{
	struct rw r;
	for (;;) {
		memset(&r, 0, sizeof(r));
		r.n = dxlb_sb_reads(t, r.tables, r.accts);
		if (r.n < 0)
			return r.n;
		int ret = read_retrying(s, &r);
		if (ret)
			return ret;
		if ((ret = dxlb_sb_exec(t, &rw_ops, &r, delta)))
			return ret;
		if (r.nput == 0)
			return 0; /* read-only outcome: the snapshot read was the txn */
		int ok = 0;
		for (int tries = 0;; tries++) {
			ret = sbe_etcd_commit(&s->h, r.n, r.tables, r.accts, r.revs, r.nput,
					      r.ptables, r.paccts, r.pvals, &ok);
			if (ret != DXL_E_AGAIN || tries == 50)
				break;
			s->resends++;
			backoff_us(1000); /* refused before it was proposed: send again */
		}
		if (ret) {
			dxl_err_prefix("commit of %s (outcome unknown)", dxlb_sb_type_name(t->type));
			return ret;
		}
		if (ok)
			return 0;
		atomic_fetch_add_explicit(&s->aborts, 1, memory_order_relaxed);
		s->type_abort[t->type]++;
		if (atomic_load_explicit(&g_stop, memory_order_relaxed))
			return 1;
	}
}

static void *session_main(void *arg)
{
	struct session *s = arg;
	while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) {
		uint64_t due = 0;
		if (s->o->rate > 0) {
			/* open loop: the next transaction of the schedule, not
			 * begun before it is due (sleep to 1 ms before, then spin:
			 * a late wake-up must not count against etcd) */
			uint64_t k = atomic_fetch_add_explicit(&g_next_k, 1, memory_order_relaxed);
			due = dxlb_schedule_ns(g_sched_t0, k, s->o->rate);
			for (uint64_t now = dxl_now_ns();
			     now < due && !atomic_load_explicit(&g_stop, memory_order_relaxed);
			     now = dxl_now_ns()) {
				if (due - now > 2000000)
					backoff_us(DXL_MIN((due - now - 1000000) / 1000, 100000u));
				else
					sched_yield();
			}
			if (atomic_load_explicit(&g_stop, memory_order_relaxed))
				break;
		}
		struct dxlb_sb_txn t;
		dxlb_sb_gen(&s->o->sb, &s->rng, &t);
		uint64_t t0 = dxl_now_ns();
		s->started++;
		int64_t delta = 0;
		int ret = run_txn(s, &t, &delta);
		if (ret == 1)
			break;
		if (ret < 0) {
			s->err = ret;
			snprintf(s->errmsg, sizeof(s->errmsg), "session %u: %s", s->idx,
				 dxl_errmsg());
			atomic_store(&g_failed, 1);
			atomic_store(&g_stop, 1);
			break;
		}
		uint64_t now = dxl_now_ns(), ns = now - (due ? due : t0);
		dxl_hist_record(&s->lat, ns);
		if (due)
			dxl_hist_record(&s->svc, now - t0);
		dxl_hist_record(&s->type_lat[t.type], ns);
		s->type_commit[t.type]++;
		s->sum_delta += delta;
		atomic_fetch_add_explicit(&s->committed, 1, memory_order_relaxed);
	}
	return NULL;
}

/* ---- load and check --------------------------------------------------------- */

struct loader {
	pthread_t th;
	struct sbe_http h;
	const struct opts *o;
	uint64_t first, end; /* accounts [first, end) */
	int err;
	char errmsg[512];
};

static void *loader_main(void *arg)
{
	struct loader *l = arg;
	for (uint64_t a = l->first; a < l->end && !atomic_load(&g_failed); a += LOAD_BATCH) {
		uint64_t n = DXL_MIN((uint64_t)LOAD_BATCH, l->end - a);
		int ret;
		/* the same puts again are harmless: retry lost replies */
		for (int tries = 0;; tries++) {
			ret = sbe_etcd_load(&l->h, a, n, l->o->sb.init_balance);
			if (!ret || tries == 20 ||
			    (ret != DXL_E_AGAIN && ret != DXL_E_UNREACHABLE && ret != DXL_E_UNAVAIL))
				break;
			backoff_us(10000);
		}
		if (ret) {
			l->err = ret;
			snprintf(l->errmsg, sizeof(l->errmsg), "load of accounts %" PRIu64 "..: %s",
				 a, dxl_errmsg());
			atomic_store(&g_failed, 1);
			return NULL;
		}
	}
	return NULL;
}

static int load(const struct opts *o, struct sbe_http *h)
{
	int ret;
	if ((ret = sbe_etcd_delete_table(h, DXLB_SB_SAVINGS)) ||
	    (ret = sbe_etcd_delete_table(h, DXLB_SB_CHECKING))) {
		fprintf(stderr, "delete old accounts: %s\n", dxl_errmsg());
		return ret;
	}
	uint32_t nl = DXL_MIN(o->threads * o->sessions, 8u);
	struct loader *ls = calloc(nl, sizeof(*ls));
	uint64_t per = (o->sb.accounts + nl - 1) / nl;
	for (uint32_t i = 0; i < nl; i++) {
		ls[i].o = o;
		ls[i].first = DXL_MIN(o->sb.accounts, i * per);
		ls[i].end = DXL_MIN(o->sb.accounts, (i + 1) * per);
		sbe_http_init(&ls[i].h, o->endpoints[i % (uint32_t)o->nendpoints]);
		pthread_create(&ls[i].th, NULL, loader_main, &ls[i]);
	}
	ret = 0;
	for (uint32_t i = 0; i < nl; i++) {
		pthread_join(ls[i].th, NULL);
		if (ls[i].err && !ret) {
			ret = ls[i].err;
			fprintf(stderr, "%s\n", ls[i].errmsg);
		}
		sbe_http_fini(&ls[i].h);
	}
	free(ls);
	return ret;
}

/* the bank's total money; DXL_E_CORRUPT if a table has not exactly accounts keys */
static int bank_total(const struct opts *o, struct sbe_http *h, int64_t *total)
{
	int64_t s1, s2;
	uint64_t n1, n2;
	int ret = sbe_etcd_sum_table(h, DXLB_SB_SAVINGS, &s1, &n1);
	if (!ret)
		ret = sbe_etcd_sum_table(h, DXLB_SB_CHECKING, &s2, &n2);
	if (ret)
		return ret;
	if (n1 != o->sb.accounts || n2 != o->sb.accounts)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%" PRIu64 " savings and %" PRIu64 " checking keys, expected %"
				   PRIu64 " of each",
				   n1, n2, o->sb.accounts);
	*total = s1 + s2;
	return 0;
}

/* ---- options ------------------------------------------------------------------ */

static int parse_endpoints(struct opts *o, const char *s)
{
	char *dup = strdup(s), *save = NULL;
	o->nendpoints = 0;
	for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (o->nendpoints == MAX_ENDPOINTS)
			return -1;
		/* "http://" prefixes are accepted and dropped */
		if (!strncmp(t, "http://", 7))
			t += 7;
		o->endpoints[o->nendpoints++] = strdup(t);
	}
	free(dup);
	return o->nendpoints ? 0 : -1;
}

static int parse_double(const char *s, double *out)
{
	char *end;
	*out = strtod(s, &end);
	return *s && !*end ? 0 : -1;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	enum { O_ENDPOINTS = 256, O_ACCOUNTS, O_DURATION, O_THREADS, O_SESSIONS, O_JSON,
	       O_SEED, O_HOT_FRAC, O_HOT_PROB, O_NO_LOAD, O_SERIALIZABLE, O_OUT, O_QUICK,
	       O_ETCD_SCRIPT, O_RATE };
	static const struct option lo[] = {
		{"endpoints", required_argument, NULL, O_ENDPOINTS},
		{"accounts", required_argument, NULL, O_ACCOUNTS},
		{"duration", required_argument, NULL, O_DURATION},
		{"threads", required_argument, NULL, O_THREADS},
		{"sessions", required_argument, NULL, O_SESSIONS},
		{"json", required_argument, NULL, O_JSON},
		{"seed", required_argument, NULL, O_SEED},
		{"hot-frac", required_argument, NULL, O_HOT_FRAC},
		{"hot-prob", required_argument, NULL, O_HOT_PROB},
		{"no-load", no_argument, NULL, O_NO_LOAD},
		{"serializable", no_argument, NULL, O_SERIALIZABLE},
		{"out", required_argument, NULL, O_OUT},
		{"quick", no_argument, NULL, O_QUICK},
		{"etcd-script", required_argument, NULL, O_ETCD_SCRIPT},
		{"rate", required_argument, NULL, O_RATE},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	memset(o, 0, sizeof(*o));
	dxlb_sb_cfg_init(&o->sb);
	o->duration_s = 10;
	o->threads = 2;
	o->sessions = 4;
	o->seed = 1;
	o->load = 1;
	o->etcd_script = "scripts/etcd.sh";
	int set_accounts = 0, set_duration = 0, set_threads = 0, set_sessions = 0;
	const char *env = getenv("DXL_ETCD_ENDPOINTS");
	if (env && *env && parse_endpoints(o, env)) {
		fprintf(stderr, "bad DXL_ETCD_ENDPOINTS %s\n", env);
		return 2;
	}
	int c;
	uint64_t v;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case O_ENDPOINTS: bad = parse_endpoints(o, optarg); break;
		case O_ACCOUNTS:
			bad = dxl_parse_size(optarg, &o->sb.accounts);
			set_accounts = 1;
			break;
		case O_DURATION:
			bad = dxl_parse_u64(optarg, &o->duration_s) || o->duration_s == 0;
			set_duration = 1;
			break;
		case O_THREADS:
			bad = dxl_parse_u64(optarg, &v) || v == 0 || v > 256;
			o->threads = (uint32_t)v;
			set_threads = 1;
			break;
		case O_SESSIONS:
			bad = dxl_parse_u64(optarg, &v) || v == 0 || v > 256;
			o->sessions = (uint32_t)v;
			set_sessions = 1;
			break;
		case O_JSON:
		case O_OUT: o->json = optarg; break;
		case O_QUICK: o->quick = 1; break;
		case O_ETCD_SCRIPT: o->etcd_script = optarg; break;
		case O_RATE:
			bad = parse_double(optarg, &o->rate) || !(o->rate > 0) || o->rate > 1e7;
			break;
		case O_SEED: bad = dxl_parse_u64(optarg, &o->seed); break;
		case O_HOT_FRAC: bad = parse_double(optarg, &o->sb.hot_frac); break;
		case O_HOT_PROB: bad = parse_double(optarg, &o->sb.hot_prob); break;
		case O_NO_LOAD: o->load = 0; break;
		case O_SERIALIZABLE: o->serializable = 1; break;
		case 'h': fputs(usage, stdout); exit(0);
		default: fputs("try --help\n", stderr); return 1;
		}
		if (bad) {
			fprintf(stderr, "bad value for --%s: %s\n", lo[c - O_ENDPOINTS].name, optarg);
			return 1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "unexpected argument %s (try --help)\n", argv[optind]);
		return 1;
	}
	if (o->quick) {
		if (!set_accounts)
			o->sb.accounts = 10000;
		if (!set_duration)
			o->duration_s = 5;
		if (!set_threads)
			o->threads = 2;
		if (!set_sessions)
			o->sessions = 4;
	}
	if (o->threads * o->sessions > 1024) {
		fprintf(stderr, "at most 1024 sessions in all\n");
		return 1;
	}
	if (dxlb_sb_cfg_check(&o->sb)) {
		fprintf(stderr, "%s\n", dxl_errmsg());
		return 1;
	}
	return 0;
}

/* ---- a cluster of our own (no --endpoints) ---------------------------------- */

static int etcd_start(struct opts *o)
{
	if (access(o->etcd_script, X_OK)) {
		fprintf(stderr, "no --endpoints, and %s is not there to start etcd (run from "
				"the source tree or give --etcd-script)\n", o->etcd_script);
		return -1;
	}
	snprintf(o->tmpdir, sizeof(o->tmpdir), "/tmp/dxl-etcd-sb.XXXXXX");
	if (!mkdtemp(o->tmpdir)) {
		perror("mkdtemp");
		o->tmpdir[0] = '\0';
		return -1;
	}
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "'%s' start '%s'", o->etcd_script, o->tmpdir);
	fprintf(stderr, "starting etcd: %s\n", cmd);
	FILE *p = popen(cmd, "r");
	char line[512] = "";
	if (p) {
		while (fgets(line, sizeof(line), p))
			;
		if (pclose(p) != 0)
			line[0] = '\0';
	}
	line[strcspn(line, "\n")] = '\0';
	if (!strchr(line, ':') || parse_endpoints(o, line)) {
		fprintf(stderr, "%s start failed\n", o->etcd_script);
		return -1;
	}
	return 0;
}

static void etcd_stop(struct opts *o)
{
	if (!o->tmpdir[0])
		return;
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "'%s' stop '%s' && rm -rf '%s'", o->etcd_script, o->tmpdir,
		 o->tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "warning: %s failed\n", cmd);
}

/* ---- main --------------------------------------------------------------------- */

static double us(uint64_t ns)
{
	return (double)ns / 1000.0;
}

int main(int argc, char **argv)
{
	struct opts o;
	int rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc;
	signal(SIGPIPE, SIG_IGN);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (!o.nendpoints && etcd_start(&o)) {
		etcd_stop(&o);
		return 1;
	}

	struct sbe_http h0;
	char version[64] = "?";
	int members = 0;
	int ok = 0, ret = sbe_http_init(&h0, o.endpoints[0]);
	if (!ret)
		ret = sbe_etcd_version(&h0, version, sizeof(version));
	if (!ret)
		ret = sbe_etcd_members(&h0, &members);
	struct session *ss = NULL;
	struct dxl_hist *lat = NULL;
	uint32_t ns = o.threads * o.sessions;
	if (ret) {
		fprintf(stderr, "etcd at %s: %s\n", o.endpoints[0], dxl_errmsg());
		goto out;
	}
	fprintf(stderr, "etcd %s, %d members, %d endpoints; %" PRIu64 " accounts, "
			"%u threads x %u sessions, %" PRIu64 " s\n",
		version, members, o.nendpoints, o.sb.accounts, o.threads, o.sessions,
		o.duration_s);

	/* load, and the total the check starts from */
	double load_s = 0;
	int64_t initial = 0;
	if (o.load) {
		uint64_t t0 = dxl_now_ns();
		if (load(&o, &h0))
			goto out;
		load_s = (double)(dxl_now_ns() - t0) / 1e9;
		fprintf(stderr, "loaded %" PRIu64 " accounts in %.2f s\n", o.sb.accounts, load_s);
		initial = (int64_t)o.sb.accounts * 2 * o.sb.init_balance;
	}
	if (bank_total(&o, &h0, &initial) ||
	    (o.load && dxlb_sb_check_total(&o.sb, initial, 0))) {
		fprintf(stderr, "before the run: %s\n", dxl_errmsg());
		goto out;
	}

	/* run */
	ss = calloc(ns, sizeof(*ss));
	lat = calloc(1 + DXLB_SB_NTYPES, sizeof(*lat));
	if (!ss || !lat)
		goto out;
	uint64_t seed_rng = o.seed;
	for (uint32_t i = 0; i < ns; i++) {
		struct session *s = &ss[i];
		s->idx = i;
		s->o = &o;
		s->rng = dxlb_sb_rand(&seed_rng) ^ i;
		dxl_hist_reset(&s->lat);
		dxl_hist_reset(&s->svc);
		for (int t = 0; t < DXLB_SB_NTYPES; t++)
			dxl_hist_reset(&s->type_lat[t]);
		sbe_http_init(&s->h, o.endpoints[i % (uint32_t)o.nendpoints]);
	}
	uint64_t t0 = dxl_now_ns();
	g_sched_t0 = t0;
	for (uint32_t i = 0; i < ns; i++)
		pthread_create(&ss[i].th, NULL, session_main, &ss[i]);
	uint64_t last_c = 0, last_a = 0;
	for (uint64_t sec = 1; sec <= o.duration_s && !atomic_load(&g_stop); sec++) {
		uint64_t until = t0 + sec * 1000000000ull;
		while (!atomic_load(&g_stop)) {
			uint64_t now = dxl_now_ns();
			if (now >= until)
				break;
			uint64_t left = until - now;
			backoff_us(DXL_MIN(left / 1000, 100000u));
		}
		uint64_t c = 0, a = 0;
		for (uint32_t i = 0; i < ns; i++) {
			c += atomic_load_explicit(&ss[i].committed, memory_order_relaxed);
			a += atomic_load_explicit(&ss[i].aborts, memory_order_relaxed);
		}
		fprintf(stderr, "  %3" PRIu64 " s  %7" PRIu64 " txn/s  %6" PRIu64 " aborts/s\n", sec,
			c - last_c, a - last_a);
		last_c = c, last_a = a;
	}
	atomic_store(&g_stop, 1);
	for (uint32_t i = 0; i < ns; i++)
		pthread_join(ss[i].th, NULL);
	double secs = (double)(dxl_now_ns() - t0) / 1e9;

	/* merge */
	dxl_hist_reset(&lat[0]);
	for (int t = 0; t < DXLB_SB_NTYPES; t++)
		dxl_hist_reset(&lat[1 + t]);
	uint64_t committed = 0, aborts = 0, tc[DXLB_SB_NTYPES] = {0}, ta[DXLB_SB_NTYPES] = {0};
	uint64_t started = 0, resends = 0;
	static struct dxl_hist svc;
	dxl_hist_reset(&svc);
	int64_t sum_delta = 0;
	const char *run_error = NULL;
	for (uint32_t i = 0; i < ns; i++) {
		struct session *s = &ss[i];
		committed += s->committed;
		aborts += s->aborts;
		sum_delta += s->sum_delta;
		dxl_hist_merge(&lat[0], &s->lat);
		dxl_hist_merge(&svc, &s->svc);
		started += s->started;
		resends += s->resends;
		for (int t = 0; t < DXLB_SB_NTYPES; t++) {
			tc[t] += s->type_commit[t];
			ta[t] += s->type_abort[t];
			dxl_hist_merge(&lat[1 + t], &s->type_lat[t]);
		}
		if (s->err && !run_error)
			run_error = s->errmsg;
	}

	/* check */
	int64_t total = 0;
	char check[600];
	/* after a signal the sessions still finished the commits in flight, so
	 * the check holds; the run only ended early */
	if (run_error) {
		snprintf(check, sizeof(check), "not checked: the run failed: %s", run_error);
	} else if (bank_total(&o, &h0, &total)) {
		snprintf(check, sizeof(check), "final read failed: %s", dxl_errmsg());
	} else if (dxlb_sb_check_money(initial, total, sum_delta)) {
		snprintf(check, sizeof(check), "%s", dxl_errmsg());
	} else {
		snprintf(check, sizeof(check), "ok");
	}
	ok = run_error ? 0 : strcmp(check, "ok") ? -1 : g_signal ? 0 : 1;

	double tps = (double)committed / secs;
	double abort_rate = committed + aborts ? (double)aborts / (double)(committed + aborts) : 0;
	printf("etcd %s (%d members) SmallBank: %" PRIu64 " accounts, %u x %u sessions, "
	       "%.1f s, %s reads\n",
	       version, members, o.sb.accounts, o.threads, o.sessions, secs,
	       o.serializable ? "serializable" : "linearizable");
	printf("  committed %" PRIu64 " (%.0f txn/s), aborts %" PRIu64 " (%.1f%% of attempts)\n",
	       committed, tps, aborts, 100.0 * abort_rate);
	printf("  latency p50 %.0f us, p99 %.0f us, mean %.0f us\n",
	       us(dxl_hist_pct(&lat[0], 50)), us(dxl_hist_pct(&lat[0], 99)),
	       dxl_hist_mean(&lat[0]) / 1000.0);
	for (int t = 0; t < DXLB_SB_NTYPES; t++)
		printf("  %-17s %8" PRIu64 " committed %6" PRIu64 " aborts  p50 %6.0f us\n",
		       dxlb_sb_type_name(t), tc[t], ta[t], us(dxl_hist_pct(&lat[1 + t], 50)));
	printf("  money check: %s\n", check);
	if (g_signal)
		printf("  interrupted by signal %d\n", (int)g_signal);

	if (o.json) {
		json_t *j = json_object();
		json_object_set_new(j, "system", json_string("etcd"));
		json_object_set_new(j, "version", json_string(version));
		json_object_set_new(j, "members", json_integer(members));
		json_t *eps = json_array();
		for (int i = 0; i < o.nendpoints; i++)
			json_array_append_new(eps, json_string(o.endpoints[i]));
		json_object_set_new(j, "endpoints", eps);
		json_object_set_new(j, "accounts", json_integer((json_int_t)o.sb.accounts));
		json_object_set_new(j, "hot_frac", json_real(o.sb.hot_frac));
		json_object_set_new(j, "hot_prob", json_real(o.sb.hot_prob));
		json_object_set_new(j, "threads", json_integer(o.threads));
		json_object_set_new(j, "sessions", json_integer(o.sessions));
		json_object_set_new(j, "sessions_total", json_integer(ns));
		json_object_set_new(j, "seed", json_integer((json_int_t)o.seed));
		json_object_set_new(j, "read", json_string(o.serializable ? "serializable"
									  : "linearizable"));
		json_object_set_new(j, "load_s", json_real(load_s));
		json_object_set_new(j, "duration_s", json_real(secs));
		json_object_set_new(j, "committed", json_integer((json_int_t)committed));
		json_object_set_new(j, "aborts", json_integer((json_int_t)aborts));
		json_object_set_new(j, "abort_rate", json_real(abort_rate));
		json_object_set_new(j, "txn_per_s", json_real(tps));
		json_object_set_new(j, "p50_us", json_real(us(dxl_hist_pct(&lat[0], 50))));
		json_object_set_new(j, "p99_us", json_real(us(dxl_hist_pct(&lat[0], 99))));
		json_object_set_new(j, "mean_us", json_real(dxl_hist_mean(&lat[0]) / 1000.0));
		json_t *types = json_object();
		for (int t = 0; t < DXLB_SB_NTYPES; t++) {
			json_t *ty = json_object();
			json_object_set_new(ty, "committed", json_integer((json_int_t)tc[t]));
			json_object_set_new(ty, "aborts", json_integer((json_int_t)ta[t]));
			json_object_set_new(ty, "p50_us", json_real(us(dxl_hist_pct(&lat[1 + t], 50))));
			json_object_set_new(ty, "p99_us", json_real(us(dxl_hist_pct(&lat[1 + t], 99))));
			json_object_set_new(types, dxlb_sb_type_name(t), ty);
		}
		json_object_set_new(j, "types", types);
		json_object_set_new(j, "initial_total", json_integer(initial));
		json_object_set_new(j, "sum_delta", json_integer(sum_delta));
		json_object_set_new(j, "total", json_integer(total));
		json_object_set_new(j, "expected", json_integer(initial + sum_delta));
		json_object_set_new(j, "check", json_string(check));
		if (g_signal)
			json_object_set_new(j, "interrupted_by_signal", json_integer(g_signal));
		/* the summary dxl-bench-compare reads: committed transactions,
		 * latency from the first read to the commit (closed loop), a
		 * failed run as an error, aborted attempts as retries */
		/* open loop: due during the run but never begun (every session
		 * busy: behind the schedule) */
		uint64_t due_total = o.rate > 0 ? (uint64_t)((double)o.duration_s * o.rate) : 0;
		struct dxlb_summary sm = {.ops = committed, .seconds = secs, .lat = &lat[0],
					  .offered_per_s = o.rate, .svc = o.rate > 0 ? &svc : NULL,
					  .late = due_total > started ? due_total - started : 0,
					  .errors = run_error ? 1 : 0, .retries = aborts + resends};
		json_object_set_new(j, "resends", json_integer((json_int_t)resends));
		json_object_set_new(j, "summary", dxlb_summary_json(&sm));
		json_t *setup = dxlb_setup_json(argc, argv);
		json_object_set_new(setup, "peer", json_pack("{s:s, s:s, s:i}", "name", "etcd",
							     "version", version, "members", members));
		json_object_set_new(setup, "threads", json_integer(o.threads));
		json_object_set_new(setup, "in_flight", json_integer((json_int_t)ns));
		dxlb_setup_end(setup);
		json_object_set_new(j, "setup", setup);
		if (json_dump_file(j, o.json, JSON_INDENT(2))) {
			fprintf(stderr, "cannot write %s\n", o.json);
			ok = 0;
		}
		json_decref(j);
	}

out:
	for (uint32_t i = 0; ss && i < ns; i++)
		sbe_http_fini(&ss[i].h);
	free(ss);
	free(lat);
	sbe_http_fini(&h0);
	for (int i = 0; i < o.nendpoints; i++)
		free(o.endpoints[i]);
	etcd_stop(&o);
	/* 2: measured, but the money check failed (wrong data) */
	return ok > 0 ? 0 : ok < 0 ? 2 : 1;
}
