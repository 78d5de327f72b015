/* load.c -- dxl log load: a steady append stream over shards with a live
 * progress line, failover reporting, and a verification by tailing
 * (docs/cli.md, docs/operations.md) */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "common/hist.h"
#include "dxl/log.h"
#include "dxl/membership.h"
#include "dxl/replica.h"

#include "cli.h"

static void load_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl log load [--shards LIST] [--rate N] [--duration S] [--size B]\n"
"                    [--acked FILE] [--json FILE] [--verify]\n"
"                    [--dir DIR | --zk CONNECT --cluster NAME]\n"
"\n"
"Append a steady stream of records to shards (one writer per shard, each in\n"
"its own thread and ZooKeeper session) and print a progress line every\n"
"second: acknowledged appends/s, append latency p50/p99 (with a --rate:\n"
"from when the append was due by the rate's schedule, so a stall and the\n"
"backlog behind it count; unthrottled: from the append call; to the\n"
"acknowledgement), and per shard its primary and configuration epoch. When\n"
"a shard fails over, a line says for how long no append of that shard was\n"
"acknowledged and which primary and epoch it has now.\n"
"\n"
"Each record's payload is 'load:<run>:<shard>:<n>' padded to --size. With\n"
"--verify, after the run it tails every shard from the earliest record on each\n"
"member and checks that every acknowledged record is there exactly once, in\n"
"commit-timestamp order, in every member's copy it could tail (at least one;\n"
"exit 1 otherwise). Only members are read: a replica\n"
"that says MEMBER with the data identity the configuration recorded for it; one\n"
"still joining or catching up, or on a new store, is skipped (it may lack\n"
"records acknowledged before it came), and a member that is down is skipped.\n"
"\n"
"  --shards LIST      shards, e.g. 0,1 or 0-3 [every shard of the config]\n"
"  --rate N           appends per second in total, 0 = as fast as possible\n"
"                     (16 in flight per shard) [1000]\n"
"  --duration S       seconds; 0 = until SIGINT/SIGTERM [10]\n"
"  --size B           payload bytes (>= the header text) [64]\n"
"  --acked FILE       write '<shard>\\t<commit_ts>\\t<payload>' per acknowledged\n"
"                     record\n"
"  --json FILE        write the summary as JSON (throughput, latency and what\n"
"                     it is from, service time from the append call,\n"
"                     failovers)\n"
"  --verify           verify by tailing (see above)\n"
"  --unavail-ms MS    a writer gives records up after the shard was\n"
"                     unavailable this long [30000]\n"
"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n"
"  --zk CONNECT       ZooKeeper connect string (instead of DIR/cluster.json)\n"
"  --cluster NAME     cluster name with --zk [default]\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP
"    (load exits 1 if a record was not acknowledged or --verify failed)\n");
}

#define LOAD_MAX_SHARDS DXL_REPLICA_MAX_SHARDS
#define MAX_OUTAGES 64

struct outage {
	uint32_t shard;
	uint64_t start_ms;  /* run-relative: last ack before the gap */
	uint64_t gap_ms;    /* no acknowledged append of the shard for this long */
	uint64_t epoch_from, epoch_to;
	uint32_t primary_from, primary_to;
};

/* outage_line -- "failover: ..." when the primary changed, else a
 * configuration change of the shard's backups (removed or re-added) */
static void outage_line(char *buf, size_t cap, const struct outage *x, const char *note)
{
	if (x->primary_from != x->primary_to)
		snprintf(buf, cap,
			 "failover: shard %u: no acknowledged append for %.2f s%s; primary %u -> %u, "
			 "epoch %" PRIu64 " -> %" PRIu64,
			 x->shard, (double)x->gap_ms / 1000, note, x->primary_from, x->primary_to,
			 x->epoch_from, x->epoch_to);
	else
		snprintf(buf, cap,
			 "configuration change: shard %u: no acknowledged append for %.2f s%s; "
			 "primary %u (unchanged), epoch %" PRIu64 " -> %" PRIu64,
			 x->shard, (double)x->gap_ms / 1000, note, x->primary_from, x->epoch_from,
			 x->epoch_to);
}

struct acked {
	uint64_t ts;
	uint64_t n;
};

struct worker {
	pthread_t th;
	struct load *L;
	uint32_t shard;
	int err;            /* start-up error (exit code) */
	char errmsg[512];
	/* under L->mu */
	uint64_t ok, failed, ok_tick;
	struct dxl_hist hist, hist_tick; /* from the due time (--rate) or the send */
	struct dxl_hist svc;             /* from the send (the append call) */
	struct dxl_log_writer_info info;
	/* the acknowledged records (worker thread until joined) */
	struct acked *acks;
	size_t nacks, cap;
	bool ready;
	bool joined; /* main thread only */
};

struct load {
	struct conn cn;
	double rate_per_shard; /* 0 = unthrottled */
	uint64_t duration_ms;
	uint32_t size;
	uint32_t unavail_ms;
	uint64_t run;
	uint64_t start_ms;
	volatile sig_atomic_t *stop;
	pthread_mutex_t mu;
	struct outage out[MAX_OUTAGES];
	uint32_t nout;
	uint32_t nw;
	struct worker w[LOAD_MAX_SHARDS];
};

static volatile sig_atomic_t g_load_stop;

static void on_load_signal(int sig)
{
	(void)sig;
	g_load_stop = 1;
}

static int payload_of(const struct load *L, uint32_t shard, uint64_t n, char *buf)
{
	int len = snprintf(buf, L->size + 1, "load:%" PRIu64 ":%u:%" PRIu64 ":", L->run, shard, n);
	if (len < 0)
		return 0;
	if ((uint32_t)len > L->size)
		len = (int)L->size;
	for (uint32_t i = (uint32_t)len; i < L->size; i++)
		buf[i] = (char)('a' + i % 26);
	return (int)L->size;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct load *L = w->L;
	struct dxl_zk *zk = NULL;
	struct dxl_log_writer *wr = NULL;
	struct dxl_zk_cfg zc;
	dxl_zk_cfg_init(&zc);
	snprintf(zc.connect, sizeof(zc.connect), "%s", L->cn.zk);
	snprintf(zc.cluster, sizeof(zc.cluster), "%s", L->cn.cluster);
	zc.connect_timeout_ms = 5000;
	int ret = dxl_zk_new(&zc, &zk);
	if (!ret) {
		struct dxl_log_writer_cfg wc;
		dxl_log_writer_cfg_init(&wc);
		wc.shard = w->shard;
		wc.unavail_ms = L->unavail_ms;
		ret = dxl_log_writer_new(zk, &wc, &wr);
	}
	if (ret) {
		snprintf(w->errmsg, sizeof(w->errmsg), "shard %u: %s", w->shard, dxl_errmsg());
		w->err = ret == DXL_E_NOENT ? EX_CLUSTER : (ret == DXL_E_UNAVAIL ? EX_FAIL : EX_FAIL);
		dxl_zk_delete(&zk);
		pthread_mutex_lock(&L->mu);
		w->ready = true;
		pthread_mutex_unlock(&L->mu);
		return NULL;
	}
	char *buf = malloc(L->size + 1);
	/* in-flight FIFO: send times, in append order (results come in order) */
	size_t fcap = 8192, fh = 0, ft = 0;
	uint64_t *sent = malloc(fcap * sizeof(*sent)), *nums = malloc(fcap * sizeof(*nums));
	uint64_t *due = malloc(fcap * sizeof(*due));
	struct dxl_log_writer_info prev;
	dxl_log_writer_get_info(wr, &prev);
	pthread_mutex_lock(&L->mu);
	w->info = prev;
	w->ready = true;
	pthread_mutex_unlock(&L->mu);
	uint64_t n = 0, last_ack_ms = dxl_now_ms();
	uint64_t t0 = dxl_now_ns();
	bool stopping = false;
	while (buf && sent && nums && due) {
		if (!stopping && (*L->stop || (L->duration_ms &&
					       dxl_now_ms() - L->start_ms >= L->duration_ms)))
			stopping = true;
		if (stopping && fh == ft)
			break;
		/* append what the rate allows */
		while (!stopping && ft - fh < fcap) {
			if (L->rate_per_shard > 0 &&
			    (double)(dxl_now_ns() - t0) < (double)n * 1e9 / L->rate_per_shard)
				break;
			if (L->rate_per_shard <= 0 && ft - fh >= 16)
				break;
			int len = payload_of(L, w->shard, n, buf);
			uint64_t ts;
			ret = dxl_log_writer_append(wr, buf, (uint32_t)len, 0, &ts);
			if (ret == DXL_E_AGAIN)
				break;
			if (ret) {
				pthread_mutex_lock(&L->mu);
				w->failed++;
				pthread_mutex_unlock(&L->mu);
				if (ret == DXL_E_STATE)
					stopping = true;
				break;
			}
			sent[ft % fcap] = dxl_now_ns();
			/* when the rate's schedule made it due (no coordinated
			 * omission: a late send counts in its latency) */
			due[ft % fcap] = L->rate_per_shard > 0
						 ? t0 + (uint64_t)((double)n * 1e9 / L->rate_per_shard)
						 : sent[ft % fcap];
			nums[ft % fcap] = n;
			ft++;
			n++;
		}
		struct dxl_log_writer_result res[64];
		int k = dxl_log_writer_poll(wr, res, 64, 1);
		uint64_t now = dxl_now_ns();
		pthread_mutex_lock(&L->mu);
		for (int j = 0; j < k && fh < ft; j++, fh++) {
			if (res[j].status) {
				w->failed++;
				continue;
			}
			uint64_t lat = now - due[fh % fcap];
			dxl_hist_record(&w->svc, now - sent[fh % fcap]);
			w->ok++;
			w->ok_tick++;
			dxl_hist_record(&w->hist, lat);
			dxl_hist_record(&w->hist_tick, lat);
			if (w->nacks == w->cap) {
				size_t nc = w->cap ? w->cap * 2 : 4096;
				struct acked *na = realloc(w->acks, nc * sizeof(*na));
				if (na) {
					w->acks = na;
					w->cap = nc;
				}
			}
			if (w->nacks < w->cap)
				w->acks[w->nacks++] = (struct acked){.ts = res[j].ts,
								     .n = nums[fh % fcap]};
		}
		struct dxl_log_writer_info in;
		dxl_log_writer_get_info(wr, &in);
		w->info = in;
		uint64_t nowms = dxl_now_ms();
		if (in.outages != prev.outages && L->nout < MAX_OUTAGES) {
			struct outage *o = &L->out[L->nout++];
			o->shard = w->shard;
			o->start_ms = last_ack_ms - L->start_ms;
			o->gap_ms = 0; /* set at the next acknowledgement */
			o->epoch_from = prev.epoch;
			o->epoch_to = in.epoch;
			o->primary_from = prev.primary;
			o->primary_to = in.primary;
		}
		bool any_ok = false;
		for (int j = 0; j < k; j++)
			any_ok |= res[j].status == 0;
		if (any_ok) {
			/* the first acknowledgement after a failover closes its gap */
			for (uint32_t i = 0; i < L->nout; i++)
				if (L->out[i].shard == w->shard && !L->out[i].gap_ms)
					L->out[i].gap_ms = nowms - L->start_ms - L->out[i].start_ms;
			last_ack_ms = nowms;
		}
		pthread_mutex_unlock(&L->mu);
		prev = in;
	}
	dxl_log_writer_flush(wr, 5000);
	dxl_log_writer_delete(&wr);
	dxl_zk_delete(&zk);
	free(buf);
	free(sent);
	free(nums);
	free(due);
	return NULL;
}

/* ---- verification ------------------------------------------------------------ */

struct vstate {
	const struct load *L;
	uint32_t shard;
	uint64_t *ts; /* our run's records of the shard, in delivery order */
	uint64_t *num;
	size_t n, cap;
	uint64_t other;
};

static int vrec(uint32_t ring, const struct dxl_rec *rec, void *arg)
{
	(void)ring;
	struct vstate *v = arg;
	char pre[64];
	int pl = snprintf(pre, sizeof(pre), "load:%" PRIu64 ":%u:", v->L->run, v->shard);
	if (rec->payload_len < (uint32_t)pl || memcmp(rec->payload, pre, (size_t)pl)) {
		v->other++;
		return 0;
	}
	if (v->n == v->cap) {
		size_t nc = v->cap ? v->cap * 2 : 4096;
		uint64_t *a = realloc(v->ts, nc * sizeof(*a)), *b;
		if (!a)
			return -1;
		v->ts = a;
		b = realloc(v->num, nc * sizeof(*b));
		if (!b)
			return -1;
		v->num = b;
		v->cap = nc;
	}
	uint64_t num = strtoull((const char *)rec->payload + pl, NULL, 10);
	v->ts[v->n] = rec->commit_ts;
	v->num[v->n] = num;
	v->n++;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* tail_copy -- every record of our run in one replica's copy of the shard,
 * into v (delivery order) until the last acknowledged one is delivered; 0
 * or an error (message set) */
static int tail_copy(struct dxl_zk *zk, struct worker *w, const struct dxl_replica_desc *d,
		     const struct dxl_shard_desc *sd, struct vstate *v)
{
	struct dxl_log_target *t = calloc(sd->nrings, sizeof(*t));
	struct dxl_fabric *f = NULL;
	struct dxl_ctx *ctx = NULL;
	struct dxl_tailer *tl = NULL;
	struct dxl_fabric_cfg fc;
	dxl_fabric_cfg_init(&fc);
	int rr = t ? dxl_fabric_cfg_client(&fc, d->provider, d->addr)
		   : dxl_err_set(DXL_E_NOMEM, "out of memory");
	for (uint32_t i = 0; !rr && i < sd->nrings; i++)
		rr = dxl_replica_desc_target(d, w->shard, i, &t[i]);
	if (!rr)
		rr = dxl_fabric_new(&fc, &f);
	if (!rr)
		rr = dxl_ctx_new(f, 0, &ctx);
	if (!rr) {
		uint64_t live = 0;
		dxl_writer_slots_live(zk, w->shard, &live);
		struct dxl_tail_cfg tc = {.from_ts = 0, .live_mask = live, .live_given = 1};
		rr = dxl_tailer_new(ctx, &tc, t, sd->nrings, &tl);
	}
	free(t);
	v->n = 0;
	v->other = 0;
	uint64_t want = w->nacks ? w->acks[w->nacks - 1].ts : 0;
	uint64_t end = dxl_now_ms() + 20000;
	while (!rr && dxl_now_ms() < end) {
		int k = dxl_tailer_poll(tl, vrec, v, NULL);
		if (k < 0) {
			rr = k;
			break;
		}
		if (k == 0 && dxl_tailer_caught_up(tl) == 1 && (v->n && v->ts[v->n - 1] >= want))
			break;
		if (k == 0 && !want)
			break;
		if (k == 0)
			usleep(20000);
	}
	if (!rr && want && (!v->n || v->ts[v->n - 1] < want))
		rr = dxl_err_set(DXL_E_TIMEDOUT,
				 "the last acknowledged record was not delivered within 20 s");
	dxl_tailer_delete(&tl);
	dxl_fabric_delete(&f);
	return rr;
}

/* check_copy -- the verdict on one copy: every acknowledged record there
 * exactly once, in order; prints its line; 0 or -1 */
static int check_copy(struct worker *w, uint32_t replica, const struct vstate *v)
{
	/* order: strictly increasing timestamps; exactly once: every acked ts
	 * delivered once (duplicates of unacknowledged ones are counted) */
	size_t disorder = 0, dup = 0, missing = 0, reclaimed = 0;
	uint64_t oldest = v->n ? v->ts[0] : UINT64_MAX;
	for (size_t i = 1; i < v->n; i++) {
		if (v->ts[i] < v->ts[i - 1])
			disorder++;
		else if (v->ts[i] == v->ts[i - 1])
			dup++;
	}
	uint64_t *sorted = malloc((v->n ? v->n : 1) * sizeof(*sorted));
	if (!sorted) {
		errf("verify: out of memory");
		return -1;
	}
	memcpy(sorted, v->ts, v->n * sizeof(*sorted));
	qsort(sorted, v->n, sizeof(*sorted), cmp_u64);
	for (size_t i = 0; i < w->nacks; i++) {
		uint64_t key = w->acks[i].ts;
		if (!bsearch(&key, sorted, v->n, sizeof(*sorted), cmp_u64)) {
			if (key < oldest) {
				/* older than everything retained: reclaimed by
				 * retention (log.retention_*), not checkable */
				reclaimed++;
				continue;
			}
			if (missing < 5)
				errf("verify: shard %u on replica %u: acknowledged record %" PRIu64
				     " (n=%" PRIu64 ") is missing", w->shard, replica, key,
				     w->acks[i].n);
			missing++;
		}
	}
	free(sorted);
	size_t present = w->nacks - missing - reclaimed;
	size_t extra = v->n > present ? v->n - present : 0;
	printf("verify: shard %u (tailed from replica %u): %zu acknowledged, %zu delivered, "
	       "%zu missing, %zu duplicated, %zu out of order, %zu not acknowledged but present%s\n",
	       w->shard, replica, w->nacks, v->n, missing, dup, disorder, extra > dup ? extra - dup : 0,
	       (missing || dup || disorder) ? "  FAILED" : "  ok");
	if (reclaimed)
		printf("verify: shard %u on replica %u: %zu acknowledged records older than the oldest "
		       "retained one were reclaimed by retention (log.retention_bytes/_ms) and not "
		       "checked\n", w->shard, replica, reclaimed);
	return (missing || dup || disorder) ? -1 : 0;
}

/* verify_shard -- 0 if every member's copy that could be tailed (at least
 * one) delivers every acknowledged record exactly once, in order; prints a
 * verdict per copy. Only members
 * are read: a copy that says MEMBER with the data identity the
 * configuration recorded for it (as dxl tail does). A replica still
 * joining or catching up, or on a new store, may lack records that were
 * acknowledged before it came: reading it would report them missing
 * (skipped, and said so). */
static int verify_shard(struct dxl_zk *zk, struct worker *w)
{
	struct dxl_cluster_config cfg;
	if (dxl_cluster_config_read(zk, &cfg, NULL)) {
		errf("verify: reading the configuration: %s", dxl_errmsg());
		return -1;
	}
	const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&cfg, w->shard);
	uint32_t ids[MAX_REPLICAS];
	uint64_t rec[MAX_REPLICAS];
	uint32_t nid = dxl_cluster_shard_members(sh, ids);
	for (uint32_t r = 0; r < nid; r++)
		rec[r] = dxl_cluster_shard_data_id(sh, ids[r]);
	dxl_cluster_config_clear(&cfg);
	struct vstate v = {.L = w->L, .shard = w->shard};
	uint32_t checked = 0;
	int ret = 0;
	for (uint32_t r = 0; r < nid; r++) {
		static struct dxl_replica_desc d;
		if (get_desc(zk, ids[r], &d)) {
			printf("verify: not read: member %u of shard %u is not registered (down)\n",
			       ids[r], w->shard);
			continue;
		}
		const struct dxl_shard_desc *sd = dxl_replica_desc_shard(&d, w->shard);
		if (!sd || sd->state != DXL_SHARD_MEMBER || (rec[r] && sd->data_id != rec[r])) {
			printf("verify: not read: replica %u of shard %u is not a member with every record "
			       "yet (%s%s)\n",
			       ids[r], w->shard, sd ? dxl_shard_state_name(sd->state) : "does not host it",
			       sd && sd->state == DXL_SHARD_MEMBER ? ", on a new store" : "");
			continue;
		}
		/* a tail from the earliest record can be overtaken by retention
		 * while the shard is busy: tried again from the new earliest */
		int tr = 0;
		for (int attempt = 0; attempt < 3; attempt++)
			if (!(tr = tail_copy(zk, w, &d, sd, &v)))
				break;
		if (tr) {
			/* not evidence of a loss: another member's copy decides
			 * (none: the shard is not verified) */
			printf("verify: not read: replica %u of shard %u could not be tailed: %s\n",
			       ids[r], w->shard, dxl_errmsg());
			continue;
		}
		checked++;
		if (check_copy(w, ids[r], &v))
			ret = -1;
	}
	if (!checked) {
		errf("verify: shard %u: no member could be tailed", w->shard);
		ret = -1;
	}
	free(v.ts);
	free(v.num);
	return ret;
}

/* ---- the command --------------------------------------------------------------- */

static void fmt_ms(char *buf, size_t cap, uint64_t ns)
{
	snprintf(buf, cap, "%.2f", (double)ns / 1e6);
}

int cmd_log_load(int argc, char **argv)
{
	static const struct option opts[] = {
		{"shards", required_argument, NULL, 's'},
		{"rate", required_argument, NULL, 'r'},
		{"duration", required_argument, NULL, 'D'},
		{"size", required_argument, NULL, 'S'},
		{"acked", required_argument, NULL, 'a'},
		{"json", required_argument, NULL, 'j'},
		{"verify", no_argument, NULL, 'v'},
		{"unavail-ms", required_argument, NULL, 'U'},
		{"dir", required_argument, NULL, 'd'},
		{"zk", required_argument, NULL, 'z'},
		{"cluster", required_argument, NULL, 'C'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = "./dxl-cluster", *zkc = NULL, *cl = NULL, *shards = NULL;
	const char *acked_path = NULL, *json_path = NULL;
	uint32_t rate = 1000, dur = 10, size = 64, unavail = 30000;
	bool verify = false;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': shards = optarg; break;
		case 'r':
			if (parse_u32(optarg, &rate)) {
				errf("--rate '%s': appends per second", optarg);
				return EX_USAGE;
			}
			break;
		case 'D':
			if (parse_u32(optarg, &dur)) {
				errf("--duration '%s': seconds", optarg);
				return EX_USAGE;
			}
			break;
		case 'S':
			if (parse_u32(optarg, &size) || size < 32 || size > 60000) {
				errf("--size '%s': 32..60000 bytes", optarg);
				return EX_USAGE;
			}
			break;
		case 'U':
			if (parse_u32(optarg, &unavail) || !unavail) {
				errf("--unavail-ms '%s': milliseconds, > 0", optarg);
				return EX_USAGE;
			}
			break;
		case 'a': acked_path = optarg; break;
		case 'j': json_path = optarg; break;
		case 'v': verify = true; break;
		case 'd': dir = optarg; break;
		case 'z': zkc = optarg; break;
		case 'C': cl = optarg; break;
		case 'h': load_usage(stdout); return EX_OK;
		default: load_usage(stderr); return EX_USAGE;
		}
	}
	if (optind < argc) {
		errf("unexpected argument '%s' (see --help)", argv[optind]);
		return EX_USAGE;
	}
	static struct load L;
	memset(&L, 0, sizeof(L));
	/* the writers' failover messages are summarised by the progress lines */
	if (!getenv("DXL_LOG_LEVEL"))
		dxl_log_set_level(DXL_LOG_ERROR);
	int ret = resolve_conn(dir, zkc, cl, &L.cn);
	if (ret)
		return ret;
	struct dxl_zk *zk = NULL;
	if ((ret = zk_connect(&L.cn, &zk)))
		return ret;
	struct dxl_cluster_config cfg;
	if ((ret = dxl_cluster_config_read(zk, &cfg, NULL))) {
		errf("reading the configuration of cluster %s: %s", L.cn.cluster, dxl_errmsg());
		dxl_zk_delete(&zk);
		return ret == DXL_E_NOENT ? EX_CLUSTER : EX_FAIL;
	}
	uint32_t ids[LOAD_MAX_SHARDS], n = 0;
	if (shards) {
		if (dxl_replica_parse_shards(shards, ids, &n)) {
			errf("--shards: %s", dxl_errmsg());
			dxl_cluster_config_clear(&cfg);
			dxl_zk_delete(&zk);
			return EX_USAGE;
		}
		for (uint32_t i = 0; i < n; i++)
			if (!dxl_cluster_config_shard(&cfg, ids[i])) {
				char list[256];
				shard_list(&cfg, list, sizeof(list));
				errf("unknown shard %u: cluster %s has shards %s", ids[i],
				     L.cn.cluster, list);
				dxl_cluster_config_clear(&cfg);
				dxl_zk_delete(&zk);
				return EX_CLUSTER;
			}
	} else {
		for (uint32_t i = 0; i < cfg.nshards && n < LOAD_MAX_SHARDS; i++)
			ids[n++] = cfg.shards[i].id;
	}
	dxl_cluster_config_clear(&cfg);
	if (!n) {
		errf("no shards");
		dxl_zk_delete(&zk);
		return EX_CLUSTER;
	}
	L.rate_per_shard = rate ? (double)rate / n : 0;
	L.duration_ms = (uint64_t)dur * 1000;
	L.size = size;
	L.unavail_ms = unavail;
	L.run = dxl_wall_ms();
	L.stop = &g_load_stop;
	L.nw = n;
	pthread_mutex_init(&L.mu, NULL);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_load_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	L.start_ms = dxl_now_ms();
	for (uint32_t i = 0; i < n; i++) {
		L.w[i].L = &L;
		L.w[i].shard = ids[i];
		dxl_hist_reset(&L.w[i].hist);
		dxl_hist_reset(&L.w[i].hist_tick);
		dxl_hist_reset(&L.w[i].svc);
		if (pthread_create(&L.w[i].th, NULL, worker_main, &L.w[i])) {
			errf("pthread_create: %s", strerror(errno));
			g_load_stop = 1;
			L.nw = i;
			break;
		}
	}
	char rate_txt[32], dur_txt[32];
	if (rate)
		snprintf(rate_txt, sizeof(rate_txt), "%u", rate);
	else
		snprintf(rate_txt, sizeof(rate_txt), "unthrottled");
	if (dur)
		snprintf(dur_txt, sizeof(dur_txt), "for %u s", dur);
	else
		snprintf(dur_txt, sizeof(dur_txt), "until interrupted");
	printf("load: %u shard(s), %s appends/s, %u-byte records, %s (run %" PRIu64 ")\n", n,
	       rate_txt, size, dur_txt, L.run);
	fflush(stdout);
	bool tty = isatty(1);
	uint32_t reported = 0;
	uint64_t next = L.start_ms + 1000;
	for (;;) {
		bool alive = false;
		for (uint32_t i = 0; i < L.nw; i++) {
			if (L.w[i].joined)
				continue;
			if (pthread_tryjoin_np(L.w[i].th, NULL) == 0)
				L.w[i].joined = true;
			else
				alive = true;
		}
		uint64_t now = dxl_now_ms();
		if (alive && now < next) {
			usleep(20000);
			continue;
		}
		next += 1000;
		pthread_mutex_lock(&L.mu);
		uint64_t ok = 0, okt = 0, failed = 0;
		struct dxl_hist h;
		dxl_hist_reset(&h);
		char shards_txt[512] = "";
		size_t o = 0;
		for (uint32_t i = 0; i < L.nw; i++) {
			struct worker *w = &L.w[i];
			ok += w->ok;
			okt += w->ok_tick;
			failed += w->failed;
			dxl_hist_merge(&h, &w->hist_tick);
			dxl_hist_reset(&w->hist_tick);
			w->ok_tick = 0;
			if (o + 64 < sizeof(shards_txt))
				o += (size_t)snprintf(shards_txt + o, sizeof(shards_txt) - o,
						      " | s%u: P%u e%" PRIu64 "%s", w->shard,
						      w->info.primary, w->info.epoch,
						      w->ready && !w->err && !w->info.available ?
							      " DOWN" : "");
		}
		/* failovers finished since the last line */
		char ev[MAX_OUTAGES][256];
		uint32_t nev = 0;
		while (reported < L.nout && L.out[reported].gap_ms) {
			struct outage *x = &L.out[reported++];
			outage_line(ev[nev++], sizeof(ev[0]), x, "");
		}
		pthread_mutex_unlock(&L.mu);
		char p50[32], p99[32];
		fmt_ms(p50, sizeof(p50), dxl_hist_pct(&h, 50));
		fmt_ms(p99, sizeof(p99), dxl_hist_pct(&h, 99));
		for (uint32_t i = 0; i < nev; i++)
			printf("%s%s\n", tty ? "\r\033[K" : "", ev[i]);
		printf("%s[%4.0fs] %6" PRIu64 " appends/s  p50 %s ms  p99 %s ms  acked %" PRIu64
		       "%s%s%s",
		       tty ? "\r\033[K" : "", (double)(dxl_now_ms() - L.start_ms) / 1000, okt, okt ? p50 : "-",
		       okt ? p99 : "-", ok, failed ? "  FAILED " : "", "", shards_txt);
		if (failed)
			printf(" (failed %" PRIu64 ")", failed);
		printf(tty ? "" : "\n");
		fflush(stdout);
		if (!alive)
			break;
	}
	if (tty)
		printf("\n");
	int rc = EX_OK;
	uint64_t ok = 0, failed = 0;
	static struct dxl_hist h, hs;
	dxl_hist_reset(&h);
	dxl_hist_reset(&hs);
	for (uint32_t i = 0; i < L.nw; i++) {
		struct worker *w = &L.w[i];
		if (w->err) {
			errf("%s", w->errmsg);
			if (rc == EX_OK)
				rc = w->err;
		}
		ok += w->ok;
		failed += w->failed;
		dxl_hist_merge(&h, &w->hist);
		dxl_hist_merge(&hs, &w->svc);
	}
	double secs = (double)(dxl_now_ms() - L.start_ms) / 1000;
	char p50[32], p99[32];
	fmt_ms(p50, sizeof(p50), dxl_hist_pct(&h, 50));
	fmt_ms(p99, sizeof(p99), dxl_hist_pct(&h, 99));
	printf("load: %" PRIu64 " acknowledged, %" PRIu64 " failed in %.1f s; latency p50 %s ms p99 %s ms\n",
	       ok, failed, secs, p50, p99);
	for (uint32_t i = 0; i < L.nout; i++)
		if (i >= reported)
		{
			char line[256];
			outage_line(line, sizeof(line), &L.out[i],
				    L.out[i].gap_ms ? "" : " (no append after it)");
			printf("%s\n", line);
		}
	if (failed && rc == EX_OK)
		rc = EX_FAIL;
	if (acked_path) {
		FILE *af = fopen(acked_path, "w");
		if (!af) {
			errf("%s: %s", acked_path, strerror(errno));
			rc = EX_FAIL;
		} else {
			char *buf = malloc(L.size + 1);
			for (uint32_t i = 0; buf && i < L.nw; i++)
				for (size_t k = 0; k < L.w[i].nacks; k++) {
					int len = payload_of(&L, L.w[i].shard, L.w[i].acks[k].n, buf);
					fprintf(af, "%u\t%" PRIu64 "\t%.*s\n", L.w[i].shard,
						L.w[i].acks[k].ts, len, buf);
				}
			free(buf);
			if (fclose(af)) {
				errf("%s: %s", acked_path, strerror(errno));
				rc = EX_FAIL;
			}
		}
	}
	bool vok = true;
	DXL_TESTPOINT("load.verify", NULL); /* (tests: a member stops first) */
	if (verify)
		for (uint32_t i = 0; i < L.nw; i++)
			if (!L.w[i].err && verify_shard(zk, &L.w[i]))
				vok = false;
	if (!vok && rc == EX_OK)
		rc = EX_FAIL;
	if (json_path) {
		json_t *outs = json_array();
		for (uint32_t i = 0; i < L.nout; i++)
			json_array_append_new(outs, json_pack("{s:i,s:I,s:I,s:I,s:I,s:I,s:i,s:i}",
							      "shard", (int)L.out[i].shard,
							      "start_ms", (json_int_t)L.out[i].start_ms,
							      "end_ms",
							      (json_int_t)(L.out[i].start_ms + L.out[i].gap_ms),
							      "gap_ms",
							      (json_int_t)L.out[i].gap_ms, "epoch_from",
							      (json_int_t)L.out[i].epoch_from, "epoch_to",
							      (json_int_t)L.out[i].epoch_to, "primary_from",
							      (int)L.out[i].primary_from, "primary_to",
							      (int)L.out[i].primary_to));
		json_t *o = json_pack("{s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:s,s:f,s:f,s:i,s:i,s:o,s:b}",
				      "start_wall_ms", (json_int_t)L.run, "acked",
				      (json_int_t)ok, "failed", (json_int_t)failed, "seconds", secs,
				      "appends_per_s", secs > 0 ? (double)ok / secs : 0.0, "p50_ms",
				      (double)dxl_hist_pct(&h, 50) / 1e6, "p99_ms",
				      (double)dxl_hist_pct(&h, 99) / 1e6, "latency_from",
				      rate ? "intended start" : "send", "service_p50_ms",
				      (double)dxl_hist_pct(&hs, 50) / 1e6, "service_p99_ms",
				      (double)dxl_hist_pct(&hs, 99) / 1e6, "shards", (int)L.nw,
				      "rate", (int)rate, "failovers", outs, "verified",
				      verify ? vok : 0);
		if (!o || json_dump_file(o, json_path, JSON_INDENT(2))) {
			errf("%s: cannot write", json_path);
			rc = EX_FAIL;
		}
		json_decref(o);
	}
	for (uint32_t i = 0; i < L.nw; i++)
		free(L.w[i].acks);
	dxl_zk_delete(&zk);
	pthread_mutex_destroy(&L.mu);
	return rc;
}
