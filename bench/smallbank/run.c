/* run.c -- dxl-bench-smallbank run: SmallBank transactions for a while, a
 * progress line per second, the result (JSON) and the ledger for 'check' */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/lib/bench_lib.h"
#include "bench/smallbank/sb.h"
#include "common/common.h"
#include "common/hist.h"

/* per worker thread: counters and latencies (its coroutines update them,
 * the progress loop reads them: under mu) */
struct tstats {
	pthread_mutex_t mu;
	uint64_t committed, attempts, maybe, unavail, gave_up, other_err, unfinished;
	uint64_t per_type[DXLB_SB_NTYPES];
	uint64_t insufficient; /* send_payment with too little money: read-only */
	int64_t sum_delta;
	struct dxl_hist all, win; /* ns: the whole run, the current second; from
				     the intended start in an open-loop run */
	struct dxl_hist svc;      /* open loop: from the first attempt's start */
	uint64_t started;         /* transactions begun (open loop: late count) */
	struct sb_maybe *maybes;
	size_t nmaybe, maybe_cap;
	char last_err[300];
};

struct run_shared {
	struct dxlb_sb_cfg cfg;
	struct sb_env *env;
	atomic_bool stop;
	uint32_t retry_ms;
	/* open loop (rate > 0): transaction k is due at sched_t0 + k / rate;
	 * a coroutine takes the next k, waits for its time, runs it */
	double rate;
	uint64_t sched_t0;
	_Atomic uint64_t next_k;
	uint32_t *writes[SB_NTABLES]; /* committed writes per key (atomic adds) */
	uint64_t footprint_mismatch;  /* atomic: footprint writes != the puts made */
	/* the longest time without a commit (a failover): atomics */
	uint64_t last_commit_ns, max_gap_ns, max_gap_at_ns;
	uint64_t gap_from_ns; /* the run's start + 1 s */
	struct tstats *ts;            /* [threads] */
	/* set when the workers are done, before they are deleted */
	uint64_t end_ns;
	struct dxl_coord_stats cstats;
};

struct run_co {
	struct sb_co co; /* first */
	struct run_shared *sh;
	uint64_t rng;
	struct dxlb_sb_txn txn;
	struct dxl_txn *t;      /* the current attempt's */
	int64_t delta;          /* of the current attempt */
	uint64_t attempts;      /* calls of txn_fn */
	uint32_t nputs;         /* the current attempt's buffered writes */
	uint32_t put_table[DXLB_SB_MAX_KEYS];
	uint64_t put_acct[DXLB_SB_MAX_KEYS];
};

static int sb_get(void *ctx, uint32_t table, uint64_t acct, int64_t *bal)
{
	struct run_co *r = ctx;
	uint8_t v[8];
	uint32_t len = 0;
	int ret = dxl_txn_get(r->t, table, acct, v, sizeof(v), &len);
	if (ret)
		return ret;
	if (len != 8)
		return dxl_err_set(DXL_E_CORRUPT, "%s[%" PRIu64 "]: a value of %u bytes",
				   dxlb_sb_table_name(table), acct, len);
	*bal = dxlb_sb_decode(v);
	return 0;
}

static int sb_put(void *ctx, uint32_t table, uint64_t acct, int64_t bal)
{
	struct run_co *r = ctx;
	uint8_t v[8];
	dxlb_sb_encode(bal, v);
	int ret = dxl_txn_put(r->t, table, acct, v, sizeof(v));
	if (!ret && r->nputs < DXLB_SB_MAX_KEYS) {
		r->put_table[r->nputs] = table;
		r->put_acct[r->nputs++] = acct;
	}
	return ret;
}

static const struct dxlb_sb_ops sb_ops = {.get = sb_get, .put = sb_put};

/* one attempt (dxl_txn_run calls it once per attempt) */
static int txn_fn(struct dxl_txn *t, void *arg)
{
	struct run_co *r = arg;
	r->t = t;
	r->attempts++;
	r->nputs = 0;
	return dxlb_sb_exec(&r->txn, &sb_ops, r, &r->delta);
}

static void record_commit(struct run_co *r, struct tstats *ts, uint64_t lat_ns)
{
	struct run_shared *sh = r->sh;
	ts->committed++;
	ts->per_type[r->txn.type]++;
	if (r->txn.type == DXLB_SB_SEND_PAYMENT && !r->nputs)
		ts->insufficient++;
	ts->sum_delta += r->delta;
	uint64_t now = dxl_now_ns();
	/* from the first commit after the first second (before: connections,
	 * location caches warming up) */
	uint64_t prev = now < sh->gap_from_ns
				? 0
				: __atomic_exchange_n(&sh->last_commit_ns, now, __ATOMIC_RELAXED);
	if (prev && now > prev && now - prev > __atomic_load_n(&sh->max_gap_ns, __ATOMIC_RELAXED)) {
		/* two threads may race here: the gap stays approximately right */
		__atomic_store_n(&sh->max_gap_ns, now - prev, __ATOMIC_RELAXED);
		__atomic_store_n(&sh->max_gap_at_ns, prev, __ATOMIC_RELAXED);
	}
	dxl_hist_record(&ts->all, lat_ns);
	dxl_hist_record(&ts->win, lat_ns);
	/* the write set of the handle that committed */
	struct dxl_txn_access acc[2 * DXLB_SB_MAX_KEYS + 2];
	int n = dxl_txn_footprint(dxl_txn_last(r->co.w), acc, DXL_ARRAY_SIZE(acc));
	uint32_t nw = 0;
	for (int k = 0; k < n && k < (int)DXL_ARRAY_SIZE(acc); k++) {
		int tix = sb_tix(acc[k].table);
		if (!acc[k].write)
			continue;
		nw++;
		if (tix < 0 || acc[k].key >= sh->cfg.accounts) {
			__atomic_fetch_add(&sh->footprint_mismatch, 1, __ATOMIC_RELAXED);
			continue;
		}
		__atomic_fetch_add(&sh->writes[tix][acc[k].key], 1, __ATOMIC_RELAXED);
	}
	if (nw != r->nputs)
		__atomic_fetch_add(&sh->footprint_mismatch, 1, __ATOMIC_RELAXED);
}

static void record_maybe(struct run_co *r, struct tstats *ts)
{
	ts->maybe++;
	if (ts->nmaybe == ts->maybe_cap) {
		size_t cap = ts->maybe_cap ? 2 * ts->maybe_cap : 16;
		struct sb_maybe *m = realloc(ts->maybes, cap * sizeof(*m));
		if (!m) {
			sb_errf("out of memory recording a transaction of unknown outcome");
			exit(1);
		}
		ts->maybes = m;
		ts->maybe_cap = cap;
	}
	struct sb_maybe *m = &ts->maybes[ts->nmaybe++];
	memset(m, 0, sizeof(*m));
	m->type = (int)r->txn.type;
	m->delta = r->delta;
	m->nw = r->nputs;
	for (uint32_t i = 0; i < r->nputs; i++) {
		m->table[i] = r->put_table[i];
		m->acct[i] = r->put_acct[i];
	}
}

static void run_co_main(void *arg)
{
	struct run_co *r = arg;
	struct run_shared *sh = r->sh;
	struct tstats *ts = &sh->ts[r->co.thread];
	while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
		uint64_t due = 0;
		if (sh->rate > 0) {
			uint64_t k = atomic_fetch_add_explicit(&sh->next_k, 1, memory_order_relaxed);
			due = dxlb_schedule_ns(sh->sched_t0, k, sh->rate);
			/* not before it is due (the other coroutines run) */
			while (dxl_now_ns() < due &&
			       !atomic_load_explicit(&sh->stop, memory_order_relaxed))
				dxl_co_yield();
			if (atomic_load_explicit(&sh->stop, memory_order_relaxed))
				break;
		}
		dxlb_sb_gen(&sh->cfg, &r->rng, &r->txn);
		uint64_t t0 = dxl_now_ns();
		pthread_mutex_lock(&ts->mu);
		ts->started++;
		pthread_mutex_unlock(&ts->mu);
		for (;;) {
			uint64_t a0 = r->attempts;
			struct dxl_txn_info info;
			memset(&info, 0, sizeof(info));
			int ret = dxl_txn_run(r->co.w, txn_fn, r, 0, &info);
			uint64_t now = dxl_now_ns();
			pthread_mutex_lock(&ts->mu);
			ts->attempts += r->attempts - a0;
			if (!ret) {
				/* open loop: latency from when it was due */
				record_commit(r, ts, now - (due ? due : t0));
				if (due)
					dxl_hist_record(&ts->svc, now - t0);
				pthread_mutex_unlock(&ts->mu);
				break;
			}
			if (info.maybe) {
				/* the outcome is unknown: never run it again (it may
				 * have committed); the checker allows either */
				record_maybe(r, ts);
				pthread_mutex_unlock(&ts->mu);
				break;
			}
			/* nothing of it happened. Unavailable (a failover takes a
			 * few seconds) or a conflict past dxl_txn_run's tries: run
			 * the same transaction again. Anything else (a missing
			 * row, a bad value) would fail again: count it, go on with
			 * the next transaction. */
			bool again = ret == DXL_E_UNAVAIL || ret == DXL_E_CONFLICT;
			if (ret == DXL_E_UNAVAIL)
				ts->unavail++;
			else if (ret == DXL_E_CONFLICT)
				ts->gave_up++;
			else
				ts->other_err++;
			snprintf(ts->last_err, sizeof(ts->last_err), "%s: %s", dxl_errname(ret),
				 dxl_errmsg());
			bool stop = atomic_load_explicit(&sh->stop, memory_order_relaxed);
			ts->unfinished += stop && again;
			pthread_mutex_unlock(&ts->mu);
			dxl_co_sleep_ms(again ? sh->retry_ms : 1);
			if (stop || !again)
				break;
		}
	}
}

static void capture_stats(void *arg)
{
	struct run_shared *sh = arg;
	sh->end_ns = dxl_now_ns();
	dxl_coord_stats(sh->env->coord, &sh->cstats);
}

struct runner {
	struct run_shared *sh;
	uint32_t threads, coroutines;
	struct run_co *cos;
	int ret;
	char errmsg[600];
	atomic_bool done;
};

static void *runner_main(void *arg)
{
	struct runner *rn = arg;
	rn->ret = sb_run_threads(rn->sh->env, rn->threads, rn->coroutines, run_co_main, rn->cos,
				 sizeof(*rn->cos), capture_stats, rn->sh);
	if (rn->ret)
		snprintf(rn->errmsg, sizeof(rn->errmsg), "%s", dxl_errmsg());
	atomic_store(&rn->done, true);
	return NULL;
}

/* ---- the tamper debug option: one balance changed behind the ledger's back ---- */

struct tamper_co {
	struct sb_co co;
	int ret;
	int64_t before;
};

static int tamper_fn(struct dxl_txn *t, void *arg)
{
	struct tamper_co *tc = arg;
	uint8_t v[8];
	uint32_t len = 0;
	int ret = dxl_txn_get(t, DXLB_SB_CHECKING, 0, v, sizeof(v), &len);
	if (ret)
		return ret;
	tc->before = dxlb_sb_decode(v);
	dxlb_sb_encode(tc->before + 1, v);
	return dxl_txn_put(t, DXLB_SB_CHECKING, 0, v, sizeof(v));
}

static void tamper_co_main(void *arg)
{
	struct tamper_co *tc = arg;
	tc->ret = dxl_txn_run(tc->co.w, tamper_fn, tc, 0, NULL);
}

/* ---- options, the run, the output ------------------------------------------------- */

static const char run_usage[] =
"Usage: dxl-bench-smallbank run --dir DIR [--duration S] [--threads T]\n"
"           [--coroutines C] [--mode hybrid|onesided|twosided] [--accounts N]\n"
"           [--hot-frac F] [--hot-prob P] [--seed S] [--json PATH]\n"
"           [--ledger PATH] [--progress] [--tamper] [--warmup S] [--grace S]\n"
"(dxl-bench-smallbank --help describes every option)\n";

static double hist_us(const struct dxl_hist *h, double p)
{
	return (double)dxl_hist_pct(h, p) / 1000.0;
}

int sb_cmd_run(int argc, char **argv)
{
	const char *dir = NULL, *json_path = NULL, *ledger_path = NULL, *mode_s = "hybrid";
	uint64_t accounts = 0, seed = 1;
	double duration = 10, hot_frac = -1, hot_prob = -1, grace = 30, warmup = 0, rate = 0;
	uint32_t threads = 2, coroutines = 8;
	bool progress = false, tamper = false;
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"duration", required_argument, NULL, 'D'},
		{"threads", required_argument, NULL, 't'},
		{"coroutines", required_argument, NULL, 'c'},
		{"mode", required_argument, NULL, 'm'},
		{"accounts", required_argument, NULL, 'a'},
		{"hot-frac", required_argument, NULL, 'f'},
		{"hot-prob", required_argument, NULL, 'p'},
		{"seed", required_argument, NULL, 's'},
		{"json", required_argument, NULL, 'j'},
		{"ledger", required_argument, NULL, 'l'},
		{"progress", no_argument, NULL, 'P'},
		{"tamper", no_argument, NULL, 'T'},
		{"grace", required_argument, NULL, 'g'},
		{"warmup", required_argument, NULL, 'w'},
		{"rate", required_argument, NULL, 'R'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int o;
	optind = 1;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		char *end = NULL;
		switch (o) {
		case 'd': dir = optarg; break;
		case 'D':
			duration = strtod(optarg, &end);
			if (*end || !(duration > 0)) {
				sb_errf("--duration %s: a number of seconds > 0", optarg);
				return 2;
			}
			break;
		case 'w':
			warmup = strtod(optarg, &end);
			if (*end || !(warmup >= 0)) {
				sb_errf("--warmup %s: a number of seconds >= 0", optarg);
				return 2;
			}
			break;
		case 'R':
			rate = strtod(optarg, &end);
			if (*end || !(rate > 0) || rate > 1e7) {
				sb_errf("--rate %s: transactions per second > 0", optarg);
				return 2;
			}
			break;
		case 'g':
			grace = strtod(optarg, &end);
			if (*end || !(grace > 0)) {
				sb_errf("--grace %s: a number of seconds > 0", optarg);
				return 2;
			}
			break;
		case 't':
		case 'c': {
			uint64_t v;
			if (dxl_parse_u64(optarg, &v) || v < 1 || v > (o == 't' ? 64 : 256)) {
				sb_errf("--%s %s: 1..%d", o == 't' ? "threads" : "coroutines", optarg,
					o == 't' ? 64 : 256);
				return 2;
			}
			*(o == 't' ? &threads : &coroutines) = (uint32_t)v;
			break;
		}
		case 'm': mode_s = optarg; break;
		case 'a':
			if (dxl_parse_u64(optarg, &accounts) || accounts < 2) {
				sb_errf("--accounts %s: at least 2", optarg);
				return 2;
			}
			break;
		case 'f':
		case 'p': {
			double v = strtod(optarg, &end);
			if (*end || !(v >= 0 && v <= 1)) {
				sb_errf("--%s %s: a number in [0, 1]", o == 'f' ? "hot-frac" : "hot-prob",
					optarg);
				return 2;
			}
			*(o == 'f' ? &hot_frac : &hot_prob) = v;
			break;
		}
		case 's':
			if (dxl_parse_u64(optarg, &seed)) {
				sb_errf("--seed %s: a number", optarg);
				return 2;
			}
			break;
		case 'j': json_path = optarg; break;
		case 'l': ledger_path = optarg; break;
		case 'P': progress = true; break;
		case 'T': tamper = true; break;
		case 'h': fputs(run_usage, stdout); return 0;
		default: fputs(run_usage, stderr); return 2;
		}
	}
	if (!dir || optind < argc) {
		sb_errf(!dir ? "run needs --dir DIR" : "unexpected argument '%s'", argv[optind]);
		fputs(run_usage, stderr);
		return 2;
	}
	enum dxl_txn_mode mode;
	if (dxl_txn_mode_parse(mode_s, &mode)) {
		sb_errf("--mode: %s", dxl_errmsg());
		return 2;
	}
	struct run_shared sh;
	memset(&sh, 0, sizeof(sh));
	dxlb_sb_cfg_init(&sh.cfg);
	int64_t init_bal = sh.cfg.init_balance;
	uint64_t loaded = sb_loaded_accounts(dir, &init_bal);
	sh.cfg.accounts = accounts ? accounts : loaded ? loaded : sh.cfg.accounts;
	sh.cfg.init_balance = init_bal;
	if (hot_frac >= 0)
		sh.cfg.hot_frac = hot_frac;
	if (hot_prob >= 0)
		sh.cfg.hot_prob = hot_prob;
	if (dxlb_sb_cfg_check(&sh.cfg)) {
		sb_errf("%s", dxl_errmsg());
		return 2;
	}
	sh.retry_ms = 20;
	sh.rate = rate;

	struct sb_env env;
	int ret = sb_env_open(dir, mode, &env);
	if (ret) {
		sb_errf("%s", dxl_errmsg());
		return 1;
	}
	sh.env = &env;
	int rc = 1;
	struct sb_state before;
	struct sb_ledger led;
	memset(&led, 0, sizeof(led));
	if (sb_state_alloc(&before, sh.cfg.accounts) || sb_ledger_alloc(&led, sh.cfg.accounts)) {
		sb_errf("%s", dxl_errmsg());
		sb_env_close(&env);
		return 1;
	}
	/* the state before: what check compares with (versions, money) */
	uint64_t t_scan = dxl_now_ns();
	ret = sb_scan(&env, &before, threads, DXL_MAX(coroutines, 8u));
	if (ret) {
		sb_errf("reading the accounts before the run: %s", dxl_errmsg());
		goto out;
	}
	for (int t = 0; t < SB_NTABLES; t++)
		memcpy(led.ver_before[t], before.ver[t], sh.cfg.accounts * sizeof(uint64_t));
	led.total_before = sb_state_total(&before);
	for (int t = 0; t < SB_NTABLES; t++)
		sh.writes[t] = led.writes[t];
	fprintf(stderr, "dxl-bench-smallbank: %" PRIu64 " accounts read in %.1f s (total %" PRId64
		"); running %s, %u threads x %u coroutines, %.0f s, configuration epoch %" PRIu64 "\n",
		sh.cfg.accounts, (double)(dxl_now_ns() - t_scan) / 1e9, led.total_before,
		dxl_txn_mode_name(mode), threads, coroutines, duration, dxl_coord_epoch(env.coord));

	sh.ts = calloc(threads, sizeof(*sh.ts));
	/* the counters at the end of the warm-up (what the result subtracts) */
	struct tstats *snap = calloc(threads, sizeof(*snap));
	struct runner rn = {.sh = &sh, .threads = threads, .coroutines = coroutines};
	rn.cos = calloc((size_t)threads * coroutines, sizeof(*rn.cos));
	if (!sh.ts || !rn.cos || !snap) {
		sb_errf("out of memory");
		free(sh.ts);
		free(rn.cos);
		free(snap);
		goto out;
	}
	for (uint32_t i = 0; i < threads; i++) {
		pthread_mutex_init(&sh.ts[i].mu, NULL);
		dxl_hist_reset(&sh.ts[i].all);
		dxl_hist_reset(&sh.ts[i].win);
		dxl_hist_reset(&sh.ts[i].svc);
	}
	for (size_t i = 0; i < (size_t)threads * coroutines; i++) {
		rn.cos[i].sh = &sh;
		rn.cos[i].rng = seed * 0x9e3779b97f4a7c15ull + i * 0x632be59bd9b4e019ull + 1;
	}
	json_t *timeline = json_array();
	uint64_t epoch0 = dxl_coord_epoch(env.coord), epoch_prev = epoch0;
	uint64_t t0 = dxl_now_ns();
	uint64_t measure_t0 = t0; /* the end of the warm-up */
	bool measuring = warmup <= 0;
	sh.gap_from_ns = t0 + 1000000000ull;
	sh.sched_t0 = t0; /* the open loop's schedule: warm-up included */
	pthread_t rth;
	if (pthread_create(&rth, NULL, runner_main, &rn)) {
		sb_errf("pthread_create failed");
		goto out;
	}
	if (progress) {
		printf("%7s %9s %7s %9s %9s %7s %6s %6s\n", "time_s", "txn/s", "abort%", "p50_us",
		       "p99_us", "errors", "maybe", "epoch");
		fflush(stdout);
	}
	uint64_t prev_c = 0, prev_a = 0, prev_m = 0, prev_e = 0, prev_tick = t0;
	bool ended = false;
	while (!ended) {
		uint64_t end = t0 + (uint64_t)((warmup + duration) * 1e9);
		uint64_t wake = DXL_MIN(prev_tick + 1000000000ull, end);
		if (!measuring)
			wake = DXL_MIN(wake, t0 + (uint64_t)(warmup * 1e9));
		while (dxl_now_ns() < wake && !atomic_load(&rn.done)) {
			struct timespec ts = {0, 20000000};
			nanosleep(&ts, NULL);
		}
		uint64_t now = dxl_now_ns();
		if (now >= end || atomic_load(&rn.done)) {
			ended = true;
			atomic_store(&sh.stop, true);
		}
		bool warm_end = !measuring && now >= t0 + (uint64_t)(warmup * 1e9);
		uint64_t c = 0, a = 0, m = 0, err = 0;
		struct dxl_hist win;
		dxl_hist_reset(&win);
		for (uint32_t i = 0; i < threads; i++) {
			struct tstats *ts = &sh.ts[i];
			pthread_mutex_lock(&ts->mu);
			if (warm_end) {
				snap[i] = *ts; /* counters only: its mutex, hists unused */
				dxl_hist_reset(&ts->all);
				dxl_hist_reset(&ts->svc);
			}
			c += ts->committed;
			a += ts->attempts;
			m += ts->maybe;
			err += ts->unavail + ts->gave_up + ts->other_err;
			dxl_hist_merge(&win, &ts->win);
			dxl_hist_reset(&ts->win);
			pthread_mutex_unlock(&ts->mu);
		}
		double secs = (double)(now - prev_tick) / 1e9;
		if (secs <= 0)
			secs = 1e-9;
		uint64_t dc = c - prev_c, da = a - prev_a, dm = m - prev_m;
		double abort_pct = da ? 100.0 * (double)(da - dc - dm) / (double)da : 0;
		uint64_t epoch = dxl_coord_epoch(env.coord);
		double el = (double)(now - t0) / 1e9;
		json_array_append_new(timeline,
				      json_pack("{s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I}", "t_s", el,
						"txn_per_s", (double)dc / secs, "abort_rate",
						abort_pct / 100.0, "p50_us", hist_us(&win, 50),
						"p99_us", hist_us(&win, 99), "errors", (json_int_t)err,
						"maybe", (json_int_t)m, "epoch", (json_int_t)epoch));
		if (progress) {
			printf("%7.1f %9.0f %6.1f%% %9.0f %9.0f %7" PRIu64 " %6" PRIu64 " %6" PRIu64 "%s\n",
			       el, (double)dc / secs, abort_pct, hist_us(&win, 50), hist_us(&win, 99),
			       err - prev_e, m, epoch,
			       epoch != epoch_prev ? "  <- new configuration" : !measuring ? "  (warm-up)" : "");
			fflush(stdout);
		}
		epoch_prev = epoch;
		prev_c = c;
		prev_a = a;
		prev_m = m;
		prev_e = err;
		prev_tick = now;
		if (warm_end) {
			measuring = true;
			measure_t0 = now;
		}
	}
	/* the transactions in flight finish; one stuck in the coordinator
	 * (e.g. a log writer that cannot open) would hang the run forever */
	uint64_t give_up = dxl_now_ns() + (uint64_t)(grace * 1e9);
	while (!atomic_load(&rn.done) && dxl_now_ns() < give_up) {
		struct timespec ts = {0, 20000000};
		nanosleep(&ts, NULL);
	}
	if (!atomic_load(&rn.done)) {
		uint64_t c = 0;
		for (uint32_t i = 0; i < threads; i++) {
			pthread_mutex_lock(&sh.ts[i].mu);
			c += sh.ts[i].committed;
			pthread_mutex_unlock(&sh.ts[i].mu);
		}
		sb_errf("the workers did not stop within %.0f s after the end of the run "
			"(%" PRIu64 " committed so far): a transaction is stuck in the coordinator; "
			"giving up without a result or ledger", grace, c);
		fflush(NULL);
		_exit(1);
	}
	pthread_join(rth, NULL);
	if (rn.ret) {
		sb_errf("the workers failed: %s", rn.errmsg);
		goto out_ts;
	}

	/* totals */
	struct dxl_hist all, svc;
	dxl_hist_reset(&all);
	dxl_hist_reset(&svc);
	uint64_t started = 0;
	/* the result counts from the end of the warm-up; the ledger everything */
	uint64_t committed = 0, attempts = 0, maybe = 0, unavail = 0, gave_up = 0, other = 0,
		 unfinished = 0, insufficient = 0, per_type[DXLB_SB_NTYPES] = {0};
	uint64_t led_committed = 0;
	int64_t sum_delta = 0, led_sum_delta = 0, maybe_delta = 0;
	size_t nmaybe = 0;
	const char *last_err = NULL;
	for (uint32_t i = 0; i < threads; i++) {
		struct tstats *ts = &sh.ts[i];
		const struct tstats *z = &snap[i];
		led_committed += ts->committed;
		led_sum_delta += ts->sum_delta;
		committed += ts->committed - z->committed;
		attempts += ts->attempts - z->attempts;
		maybe += ts->maybe - z->maybe;
		unavail += ts->unavail - z->unavail;
		gave_up += ts->gave_up - z->gave_up;
		other += ts->other_err - z->other_err;
		unfinished += ts->unfinished;
		insufficient += ts->insufficient - z->insufficient;
		sum_delta += ts->sum_delta - z->sum_delta;
		for (int k = 0; k < DXLB_SB_NTYPES; k++)
			per_type[k] += ts->per_type[k] - z->per_type[k];
		dxl_hist_merge(&all, &ts->all);
		dxl_hist_merge(&svc, &ts->svc);
		started += ts->started;
		nmaybe += ts->nmaybe;
		if (ts->last_err[0])
			last_err = ts->last_err;
	}
	led.maybe = calloc(nmaybe + 1, sizeof(*led.maybe));
	if (!led.maybe) {
		sb_errf("out of memory");
		goto out_ts;
	}
	for (uint32_t i = 0; i < threads; i++)
		for (size_t k = 0; k < sh.ts[i].nmaybe; k++) {
			led.maybe[led.nmaybe++] = sh.ts[i].maybes[k];
			maybe_delta += sh.ts[i].maybes[k].delta;
		}
	led.committed = led_committed;
	led.sum_delta = led_sum_delta;
	double el = (double)(sh.end_ns - measure_t0) / 1e9;
	uint64_t aborts = attempts - committed - maybe;
	double abort_rate = attempts ? (double)aborts / (double)attempts : 0;

	if (tamper) {
		struct tamper_co tc;
		memset(&tc, 0, sizeof(tc));
		ret = sb_run_threads(&env, 1, 1, tamper_co_main, &tc, sizeof(tc), NULL, NULL);
		if (!ret)
			ret = tc.ret;
		if (ret) {
			sb_errf("--tamper: %s", dxl_errmsg());
			goto out_ts;
		}
		fprintf(stderr, "dxl-bench-smallbank: --tamper: checking[0] %" PRId64 " -> %" PRId64
			" behind the ledger's back ('check' must fail now)\n", tc.before, tc.before + 1);
	}

	printf("smallbank %s: %" PRIu64 " committed in %.1f s%s = %.0f txn/s; abort rate %.2f%% "
	       "(%" PRIu64 " of %" PRIu64 " attempts); latency p50 %.0f us, p99 %.0f us\n",
	       dxl_txn_mode_name(mode), committed, el, warmup > 0 ? " (after the warm-up)" : "",
	       (double)committed / el, 100 * abort_rate, aborts, attempts, hist_us(&all, 50),
	       hist_us(&all, 99));
	printf("  %" PRIu64 " failed runs retried (%" PRIu64 " unavailable, %" PRIu64
	       " conflicts past dxl_txn_run's tries, %" PRIu64 " other), %" PRIu64
	       " of unknown outcome (maybe; deltas %" PRId64 "), %" PRIu64
	       " unfinished at the end; configuration epoch %" PRIu64 " -> %" PRIu64 "\n",
	       unavail + gave_up + other, unavail, gave_up, other, (uint64_t)nmaybe, maybe_delta,
	       unfinished,
	       epoch0, dxl_coord_epoch(env.coord));
	/* a stall that lasts to the end of the run counts too (from the last
	 * commit, or from the start of the gap measurement if none) */
	bool to_end = false;
	{
		uint64_t last = sh.last_commit_ns ? sh.last_commit_ns : sh.gap_from_ns;
		if (sh.end_ns > last && sh.end_ns - last > sh.max_gap_ns) {
			sh.max_gap_ns = sh.end_ns - last;
			sh.max_gap_at_ns = last;
			to_end = true;
		}
	}
	if (sh.max_gap_ns > 500000000ull)
		printf("  longest time without a commit: %.2f s (from t=%.2f s%s)\n",
		       (double)sh.max_gap_ns / 1e9, (double)(sh.max_gap_at_ns - t0) / 1e9,
		       to_end ? " to the end of the run" : "");
	if (last_err && (unavail + gave_up + other))
		printf("  last failure: %s\n", last_err);
	if (sh.footprint_mismatch)
		printf("  WARNING: %" PRIu64 " committed transactions whose footprint's writes differ "
		       "from the puts made\n", sh.footprint_mismatch);
	fflush(stdout);

	if (json_path) {
		json_t *pt = json_object();
		for (int k = 0; k < DXLB_SB_NTYPES; k++)
			json_object_set_new(pt, dxlb_sb_type_name((enum dxlb_sb_type)k),
					    json_integer((json_int_t)per_type[k]));
		struct dxl_coord_stats *cs = &sh.cstats;
		json_t *cj = json_pack(
			"{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "committed",
			(json_int_t)cs->committed, "aborted", (json_int_t)cs->aborted, "conflicts",
			(json_int_t)cs->conflicts, "unavail", (json_int_t)cs->unavail,
			"onesided_reads", (json_int_t)cs->onesided_reads, "rpc_reads",
			(json_int_t)cs->rpc_reads, "cache_hits", (json_int_t)cs->cache_hits,
			"cache_misses", (json_int_t)cs->cache_misses, "log_appends",
			(json_int_t)cs->log_appends, "view_refreshes", (json_int_t)cs->view_refreshes);
		json_t *r = json_object();
		json_object_set_new(r, "system", json_string("dxl"));
		json_object_set_new(r, "mode", json_string(dxl_txn_mode_name(mode)));
		json_object_set_new(r, "shards", json_integer(env.cl.shards));
		json_object_set_new(r, "threads", json_integer(threads));
		json_object_set_new(r, "coroutines", json_integer(coroutines));
		json_object_set_new(r, "sessions_total", json_integer((json_int_t)threads * coroutines));
		json_object_set_new(r, "accounts", json_integer((json_int_t)sh.cfg.accounts));
		json_object_set_new(r, "hot_frac", json_real(sh.cfg.hot_frac));
		json_object_set_new(r, "hot_prob", json_real(sh.cfg.hot_prob));
		json_object_set_new(r, "seed", json_integer((json_int_t)seed));
		json_object_set_new(r, "duration_s", json_real(el));
		json_object_set_new(r, "warmup_s", json_real(warmup));
		json_object_set_new(r, "committed", json_integer((json_int_t)committed));
		json_object_set_new(r, "attempts", json_integer((json_int_t)attempts));
		json_object_set_new(r, "aborts", json_integer((json_int_t)aborts));
		json_object_set_new(r, "abort_rate", json_real(abort_rate));
		json_object_set_new(r, "txn_per_s", json_real((double)committed / el));
		json_object_set_new(r, "p50_us", json_real(hist_us(&all, 50)));
		json_object_set_new(r, "p90_us", json_real(hist_us(&all, 90)));
		json_object_set_new(r, "p99_us", json_real(hist_us(&all, 99)));
		json_object_set_new(r, "p999_us", json_real(hist_us(&all, 99.9)));
		json_object_set_new(r, "mean_us", json_real(dxl_hist_mean(&all) / 1000.0));
		json_object_set_new(r, "per_type", pt);
		json_object_set_new(r, "send_payment_insufficient", json_integer((json_int_t)insufficient));
		json_object_set_new(r, "unavailable", json_integer((json_int_t)unavail));
		json_object_set_new(r, "gave_up", json_integer((json_int_t)gave_up));
		json_object_set_new(r, "other_errors", json_integer((json_int_t)other));
		json_object_set_new(r, "maybe", json_integer((json_int_t)nmaybe));
		json_object_set_new(r, "maybe_delta", json_integer(maybe_delta));
		json_object_set_new(r, "unfinished", json_integer((json_int_t)unfinished));
		json_object_set_new(r, "sum_delta", json_integer(sum_delta));
		json_object_set_new(r, "epoch_start", json_integer((json_int_t)epoch0));
		json_object_set_new(r, "epoch_end", json_integer((json_int_t)dxl_coord_epoch(env.coord)));
		json_object_set_new(r, "max_gap_s", json_real((double)sh.max_gap_ns / 1e9));
		json_object_set_new(r, "max_gap_to_end", json_boolean(to_end));
		json_object_set_new(r, "max_gap_from_s",
				    json_real(sh.max_gap_at_ns ? (double)(sh.max_gap_at_ns - t0) / 1e9 : 0));
		json_object_set_new(r, "coord_stats", cj);
		json_object_set_new(r, "tamper", json_boolean(tamper));
		json_object_set_new(r, "timeline", json_incref(timeline));
		/* the summary dxl-bench-compare reads: committed transactions,
		 * latency from the first attempt to the commit (closed loop),
		 * failed runs as errors, aborted attempts as retries */
		/* open loop: due over the whole run (warm-up included) but never
		 * begun: the coroutines were all busy (behind the schedule) */
		uint64_t due_total = rate > 0 ? (uint64_t)((warmup + duration) * rate) : 0;
		struct dxlb_summary sm = {.ops = committed, .seconds = el, .lat = &all,
					  .offered_per_s = rate, .svc = rate > 0 ? &svc : NULL,
					  .late = due_total > started ? due_total - started : 0,
					  .errors = unavail + gave_up + other, .retries = aborts};
		json_object_set_new(r, "summary", dxlb_summary_json(&sm));
		json_t *setup = dxlb_setup_json(argc, argv);
		/* the cluster as 'dxl cluster up' recorded it (provider,
		 * durability, replicas, shards, options) and its data's filesystem */
		char cpath[PATH_MAX];
		snprintf(cpath, sizeof(cpath), "%s/cluster.json", dir);
		json_t *cj2 = json_load_file(cpath, 0, NULL);
		json_object_set_new(setup, "cluster", cj2 ? cj2 : json_null());
		snprintf(cpath, sizeof(cpath), "%s/data", dir);
		json_object_set_new(setup, "data_fs", dxlb_fs_json(cpath));
		json_object_set_new(setup, "threads", json_integer(threads));
		json_object_set_new(setup, "in_flight", json_integer((json_int_t)threads * coroutines));
		dxlb_setup_end(setup);
		json_object_set_new(r, "setup", setup);
		if (json_dump_file(r, json_path, JSON_INDENT(2))) {
			sb_errf("cannot write %s", json_path);
			json_decref(r);
			goto out_ts;
		}
		json_decref(r);
	}
	if (ledger_path) {
		json_t *lj = sb_ledger_json(&led);
		json_object_set_new(lj, "mode", json_string(dxl_txn_mode_name(mode)));
		json_object_set_new(lj, "cluster", json_string(env.cl.name));
		json_object_set_new(lj, "init_balance", json_integer(sh.cfg.init_balance));
		if (json_dump_file(lj, ledger_path, JSON_COMPACT)) {
			sb_errf("cannot write %s", ledger_path);
			json_decref(lj);
			goto out_ts;
		}
		json_decref(lj);
	}
	rc = 0;
out_ts:
	json_decref(timeline);
	for (uint32_t i = 0; i < threads; i++) {
		pthread_mutex_destroy(&sh.ts[i].mu);
		free(sh.ts[i].maybes);
	}
	free(sh.ts);
	free(snap);
	free(rn.cos);
out:
	sb_ledger_free(&led);
	sb_state_free(&before);
	sb_env_close(&env);
	return rc;
}
