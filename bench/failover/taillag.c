/* taillag.c -- dxl-bench-failover taillag: acknowledged -> delivered lag of
 * change capture (a dxl_log_writer and a dxl_tailer in one process) */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/failover/bench_failover.h"
#include "common/common.h"
#include "dxl/fabric.h"
#include "dxl/log.h"
#include "dxl/replica.h"

#define TL_MAX_RATES 8

/* one rate: per record n, when it was appended, acknowledged, delivered
 * (CLOCK_MONOTONIC ns; 0 = not yet). append/ack: the writer (main) thread;
 * deliver: the tailer thread; read together only after the phase, once the
 * tailer has stored (release) and main loaded (acquire) `delivered`. */
struct phase {
	uint32_t rate;
	uint64_t cap, n;
	uint64_t *append_ns, *ack_ns, *deliver_ns;
	/* when record n was due by the schedule of the rate (dxlb_schedule_ns
	 * from the phase's start): latency from it counts a stall and the
	 * backlog behind it (no coordinated omission) */
	uint64_t *due_ns;
	uint64_t failed;
};

struct tl {
	uint64_t run;
	uint32_t shard;
	struct dxl_fabric *f;
	struct dxl_log_target *targets;
	uint32_t ntargets;
	uint64_t live_mask;
	uint32_t poll_us;
	uint32_t window;
	struct phase ph[TL_MAX_RATES];
	uint32_t nph;
	atomic_int stop;
	atomic_int tailer_ready; /* 1 ok, -1 failed */
	_Atomic uint64_t delivered; /* records of this run delivered */
	_Atomic uint64_t polls, empty_polls;
	_Atomic uint64_t poll_ns; /* time inside dxl_tailer_poll */
	char err[256];
};

static int on_rec(uint32_t ring, const struct dxl_rec *rec, void *arg)
{
	(void)ring;
	struct tl *T = arg;
	uint64_t now = dxl_now_ns();
	char pre[48];
	int pl = snprintf(pre, sizeof(pre), "tl:%" PRIu64 ":", T->run);
	if (rec->payload_len < (uint32_t)pl + 4 || memcmp(rec->payload, pre, (size_t)pl))
		return 0;
	char buf[64];
	uint32_t l = DXL_MIN(rec->payload_len - (uint32_t)pl, (uint32_t)sizeof(buf) - 1);
	memcpy(buf, (const char *)rec->payload + pl, l);
	buf[l] = 0;
	unsigned p;
	unsigned long long n;
	if (sscanf(buf, "%u:%llu:", &p, &n) != 2 || p >= T->nph || n >= T->ph[p].cap)
		return 0;
	if (!T->ph[p].deliver_ns[n]) {
		T->ph[p].deliver_ns[n] = now;
		/* release: main reads deliver_ns[] after acquiring the count */
		atomic_fetch_add_explicit(&T->delivered, 1, memory_order_release);
	}
	return 0;
}

static void *tailer_main(void *arg)
{
	struct tl *T = arg;
	struct dxl_ctx *ctx = NULL;
	struct dxl_tailer *t = NULL;
	int ret = dxl_ctx_new(T->f, 0, &ctx);
	if (!ret) {
		struct dxl_tail_cfg tc = {.from_ts = 0, .live_mask = T->live_mask,
					  .live_given = 1, .window = T->window};
		ret = dxl_tailer_new(ctx, &tc, T->targets, T->ntargets, &t);
	}
	if (ret) {
		snprintf(T->err, sizeof(T->err), "tailer: %s", dxl_errmsg());
		atomic_store(&T->tailer_ready, -1);
		dxl_ctx_delete(&ctx);
		return NULL;
	}
	/* measure from a live tailer: first read through what the rings hold
	 * already (earlier runs on this cluster) */
	uint64_t end = dxl_now_ms() + 60000;
	while (!atomic_load(&T->stop) && dxl_now_ms() < end) {
		int k = dxl_tailer_poll(t, on_rec, T, NULL);
		if (k < 0 || (k == 0 && dxl_tailer_caught_up(t) == 1))
			break;
	}
	atomic_store(&T->tailer_ready, dxl_tailer_caught_up(t) == 1 ? 1 : -1);
	if (dxl_tailer_caught_up(t) != 1)
		snprintf(T->err, sizeof(T->err), "tailer: not caught up with the log in 60 s: %s",
			 dxl_errmsg());
	while (!atomic_load(&T->stop)) {
		uint64_t t0 = dxl_now_ns();
		int k = dxl_tailer_poll(t, on_rec, T, NULL);
		atomic_fetch_add_explicit(&T->poll_ns, dxl_now_ns() - t0, memory_order_relaxed);
		if (k < 0) {
			snprintf(T->err, sizeof(T->err), "tailer poll: %s", dxl_errmsg());
			break;
		}
		atomic_fetch_add_explicit(&T->polls, 1, memory_order_relaxed);
		if (k == 0) {
			atomic_fetch_add_explicit(&T->empty_polls, 1, memory_order_relaxed);
			if (T->poll_us)
				usleep(T->poll_us);
		}
	}
	dxl_tailer_delete(&t);
	dxl_ctx_delete(&ctx);
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* stats of v[0..n) (sorted here) in ms */
/* percentile p of the sorted v[0..n) by the nearest rank, in ms; -1 when
 * n is under dxl_pct_min_samples(p) (no p99 from under 1 000 samples) */
static double pct_ms(const uint64_t *v, size_t n, double p)
{
	if (!n || n < dxl_pct_min_samples(p))
		return -1;
	return bf_ms((int64_t)v[dxl_pct_rank(n, p) - 1]);
}

static json_t *dist_json(uint64_t *v, size_t n, double *p50, double *p99)
{
	json_t *o = json_object();
	json_object_set_new(o, "count", json_integer((json_int_t)n));
	if (!n) {
		*p50 = *p99 = -1;
		return o;
	}
	qsort(v, n, sizeof(*v), cmp_u64);
	double sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += (double)v[i];
	static const double pct[] = {50, 90, 99, 99.9};
	static const char *const name[] = {"p50", "p90", "p99", "p999"};
	for (size_t k = 0; k < DXL_ARRAY_SIZE(pct); k++) {
		double x = pct_ms(v, n, pct[k]);
		json_object_set_new(o, name[k], x < 0 ? json_null() : json_real(x));
	}
	json_object_set_new(o, "min", json_real(bf_ms((int64_t)v[0])));
	json_object_set_new(o, "max", json_real(bf_ms((int64_t)v[n - 1])));
	json_object_set_new(o, "mean", json_real(sum / (double)n / 1e6));
	*p50 = pct_ms(v, n, 50);
	*p99 = pct_ms(v, n, 99);
	return o;
}

/* run_phase -- append at p->rate for duration_ms, then wait (polling the
 * writer, which heartbeats when idle) until every acknowledged record was
 * delivered or 5 s passed */
static int run_phase(struct tl *T, uint32_t pi, struct dxl_log_writer *wr, uint32_t size,
		     uint32_t duration_ms)
{
	struct phase *p = &T->ph[pi];
	char *buf = malloc(size);
	size_t fcap = 65536;
	uint64_t *fifo = malloc(fcap * sizeof(*fifo)); /* n of each record in flight */
	if (!buf || !fifo) {
		free(buf);
		free(fifo);
		return -1;
	}
	memset(buf, '.', size);
	uint64_t fh = 0, ft = 0, acked = 0;
	uint64_t t0 = dxl_now_ns(), end = t0 + (uint64_t)duration_ms * 1000000ull;
	uint64_t base = atomic_load(&T->delivered);
	int ret = 0;
	for (;;) {
		uint64_t now = dxl_now_ns();
		bool appending = now < end && p->n < p->cap;
		while (appending && ft - fh < fcap &&
		       (double)(dxl_now_ns() - t0) >= (double)p->n * 1e9 / p->rate) {
			int l = snprintf(buf, size, "tl:%" PRIu64 ":%u:%" PRIu64 ":", T->run, pi, p->n);
			if (l < (int)size)
				buf[l] = '.';
			uint64_t ts;
			int r = dxl_log_writer_append(wr, buf, size, 0, &ts);
			if (r == DXL_E_AGAIN)
				break;
			if (r) {
				fprintf(stderr, "taillag: append: %s\n", dxl_errmsg());
				ret = -1;
				appending = false;
				break;
			}
			p->append_ns[p->n] = dxl_now_ns();
			p->due_ns[p->n] = dxlb_schedule_ns(t0, p->n, p->rate);
			fifo[ft++ % fcap] = p->n;
			p->n++;
			if (p->n >= p->cap)
				break;
		}
		/* wait for results until the next append is due (whole ms) */
		int wait_ms = 1;
		if (appending) {
			double due = (double)t0 + (double)p->n * 1e9 / p->rate;
			double left = due - (double)dxl_now_ns();
			wait_ms = left > 1e6 ? (int)(left / 1e6) : 0;
		}
		struct dxl_log_writer_result res[64];
		int k = dxl_log_writer_poll(wr, res, 64, wait_ms);
		now = dxl_now_ns();
		for (int j = 0; j < k && fh < ft; j++, fh++) {
			uint64_t n = fifo[fh % fcap];
			if (res[j].status) {
				p->failed++;
				continue;
			}
			p->ack_ns[n] = now;
			acked++;
		}
		if (k < 0 || ret)
			break;
		if (!appending && fh == ft) {
			uint64_t got = atomic_load_explicit(&T->delivered, memory_order_acquire) - base;
			if (got >= acked || now > end + 5000000000ull || T->err[0])
				break;
		}
	}
	free(buf);
	free(fifo);
	return ret;
}

int bf_cmd_taillag(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"shard", required_argument, NULL, 's'},
		{"rates", required_argument, NULL, 'r'},
		{"duration-ms", required_argument, NULL, 'D'},
		{"size", required_argument, NULL, 'S'},
		{"heartbeat-ms", required_argument, NULL, 'H'},
		{"poll-us", required_argument, NULL, 'p'},
		{"window", required_argument, NULL, 'w'},
		{"dump", required_argument, NULL, 'u'},
		{"json", required_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = NULL, *json_path = NULL, *rates = "10,100,1000", *dump = NULL;
	uint64_t shard = 0, duration = 5000, size = 64, hb = 100, poll_us = 0, window = 0;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		uint64_t *dst = NULL;
		switch (c) {
		case 'd': dir = optarg; break;
		case 'j': json_path = optarg; break;
		case 'u': dump = optarg; break;
		case 'r': rates = optarg; break;
		case 's': dst = &shard; break;
		case 'D': dst = &duration; break;
		case 'S': dst = &size; break;
		case 'H': dst = &hb; break;
		case 'p': dst = &poll_us; break;
		case 'w':
			if (dxl_parse_size(optarg, &window) || window > (1u << 30)) {
				fprintf(stderr, "taillag: --window '%s': a size (e.g. 4K)\n", optarg);
				return 2;
			}
			break;
		case 'h':
			printf("dxl-bench-failover taillag --dir DIR [--shard S] [--rates LIST] "
			       "[--duration-ms MS] [--size B] [--heartbeat-ms MS] [--poll-us US] "
			       "[--window BYTES] [--dump FILE] [--json FILE]\n(dxl-bench-failover --help explains)\n");
			return 0;
		default: return 2;
		}
		if (dst && dxl_parse_u64(optarg, dst)) {
			fprintf(stderr, "taillag: '%s' is not a number\n", optarg);
			return 2;
		}
	}
	static struct tl T;
	memset(&T, 0, sizeof(T));
	uint32_t rv[TL_MAX_RATES];
	if (!dir || optind < argc || size < 48 || size > 60000 || !hb ||
	    bf_parse_list(rates, rv, TL_MAX_RATES, &T.nph)) {
		fprintf(stderr, "taillag: --dir DIR is required; --size 48..60000; --rates "
			"up to %d numbers (see --help)\n", TL_MAX_RATES);
		return 2;
	}
	if (!getenv("DXL_LOG_LEVEL"))
		dxl_log_set_level(DXL_LOG_ERROR);
	struct bf_cluster cl;
	if (bf_cluster_read(dir, &cl))
		return 2;
	T.run = dxl_wall_ms();
	T.shard = (uint32_t)shard;
	T.poll_us = (uint32_t)poll_us;
	T.window = (uint32_t)window;
	int rc = 1;
	struct dxl_zk *zk = NULL;
	struct dxl_log_writer *wr = NULL;
	pthread_t th;
	bool th_started = false;
	if (bf_zk_open(&cl, &zk))
		return 1;
	struct dxl_log_writer_cfg wc;
	dxl_log_writer_cfg_init(&wc);
	wc.shard = T.shard;
	wc.heartbeat_ms = (uint32_t)hb;
	if (dxl_log_writer_new(zk, &wc, &wr)) {
		fprintf(stderr, "taillag: writer of shard %u: %s\n", T.shard, dxl_errmsg());
		goto out;
	}
	struct dxl_log_writer_info info;
	dxl_log_writer_get_info(wr, &info);
	/* the tailer reads the primary's copy; live rings = held writer slots */
	static struct dxl_replica_desc d; /* ~145 KB with tables */
	if (dxl_replica_desc_get(zk, info.primary, &d)) {
		fprintf(stderr, "taillag: %s\n", dxl_errmsg());
		goto out;
	}
	const struct dxl_shard_desc *sd = dxl_replica_desc_shard(&d, T.shard);
	if (!sd || dxl_writer_slots_live(zk, T.shard, &T.live_mask)) {
		fprintf(stderr, "taillag: shard %u on node %u: %s\n", T.shard, info.primary,
			sd ? dxl_errmsg() : "not hosted");
		goto out;
	}
	T.ntargets = DXL_MIN(sd->nrings, 64u);
	T.targets = calloc(T.ntargets, sizeof(*T.targets));
	if (!T.targets)
		goto out;
	for (uint32_t i = 0; i < T.ntargets; i++)
		if (dxl_replica_desc_target(&d, T.shard, i, &T.targets[i])) {
			fprintf(stderr, "taillag: %s\n", dxl_errmsg());
			goto out;
		}
	struct dxl_fabric_cfg fc;
	dxl_fabric_cfg_init(&fc);
	dxl_fabric_cfg_client(&fc, d.provider, d.addr);
	if (dxl_fabric_new(&fc, &T.f)) {
		fprintf(stderr, "taillag: fabric: %s\n", dxl_errmsg());
		goto out;
	}
	for (uint32_t i = 0; i < T.nph; i++) {
		struct phase *p = &T.ph[i];
		p->rate = rv[i];
		p->cap = (uint64_t)rv[i] * duration / 1000 + 16;
		p->append_ns = calloc(p->cap, sizeof(uint64_t));
		p->ack_ns = calloc(p->cap, sizeof(uint64_t));
		p->deliver_ns = calloc(p->cap, sizeof(uint64_t));
		p->due_ns = calloc(p->cap, sizeof(uint64_t));
		if (!p->append_ns || !p->ack_ns || !p->deliver_ns || !p->due_ns)
			goto out;
	}
	if (pthread_create(&th, NULL, tailer_main, &T))
		goto out;
	th_started = true;
	while (!atomic_load(&T.tailer_ready))
		usleep(1000);
	if (atomic_load(&T.tailer_ready) < 0) {
		fprintf(stderr, "taillag: %s\n", T.err);
		goto out;
	}
	rc = 0;
	for (uint32_t i = 0; i < T.nph && !rc; i++)
		if (run_phase(&T, i, wr, (uint32_t)size, (uint32_t)duration))
			rc = 1;
	if (T.err[0]) {
		fprintf(stderr, "taillag: %s\n", T.err);
		rc = 1;
	}
	atomic_store(&T.stop, 1);
	pthread_join(th, NULL);
	th_started = false;

	uint64_t npolls = atomic_load(&T.polls);
	double poll_ms = npolls ? (double)atomic_load(&T.poll_ns) / 1e6 / (double)npolls : 0;
	json_t *o = json_object(), *arr = json_array();
	json_object_set_new(o, "tailer_poll_ms", json_real(poll_ms));
	json_object_set_new(o, "setup", dxlb_setup_json(argc, argv));
	json_object_set_new(o, "cluster", json_string(cl.cluster));
	json_object_set_new(o, "shard", json_integer(T.shard));
	json_object_set_new(o, "tailed_node", json_integer(info.primary));
	json_object_set_new(o, "heartbeat_ms", json_integer((json_int_t)hb));
	json_object_set_new(o, "poll_us", json_integer((json_int_t)poll_us));
	json_object_set_new(o, "window", json_integer((json_int_t)(window ? window : 262144)));
	json_object_set_new(o, "rings", json_integer(T.ntargets));
	json_object_set_new(o, "duration_ms", json_integer((json_int_t)duration));
	json_object_set_new(o, "size", json_integer((json_int_t)size));
	json_object_set_new(o, "tailer_polls", json_integer((json_int_t)atomic_load(&T.polls)));
	json_object_set_new(o, "tailer_empty_polls",
			    json_integer((json_int_t)atomic_load(&T.empty_polls)));
	printf("taillag %s shard %u (tailer on node %u, %u rings, window %" PRIu64
	       " B, heartbeat %" PRIu64 " ms, poll_us %" PRIu64 "): %.3f ms per tailer poll\n",
	       cl.cluster, T.shard, info.primary, T.ntargets, window ? window : 262144, hb,
	       poll_us, poll_ms);
	printf("  %8s %8s %9s %21s %21s %14s\n", "rate/s", "records", "delivered",
	       "ack->deliver p50/p99", "append->deliver p50/p99", "ack p50/p99");
	for (uint32_t i = 0; i < T.nph; i++) {
		struct phase *p = &T.ph[i];
		uint64_t *a2d = malloc((p->n + 1) * sizeof(uint64_t));
		uint64_t *p2d = malloc((p->n + 1) * sizeof(uint64_t));
		uint64_t *p2a = malloc((p->n + 1) * sizeof(uint64_t));
		/* from the intended start (the rate's schedule): to the ack, to
		 * the delivery; and how late each append was sent */
		uint64_t *u2a = malloc((p->n + 1) * sizeof(uint64_t));
		uint64_t *u2d = malloc((p->n + 1) * sizeof(uint64_t));
		uint64_t *lag = malloc((p->n + 1) * sizeof(uint64_t));
		size_t na = 0, np = 0, nk = 0, early = 0, undelivered = 0, nu = 0, nud = 0;
		bool mem = a2d && p2d && p2a && u2a && u2d && lag;
		for (uint64_t n = 0; mem && n < p->n; n++) {
			/* the send is stamped after the append call returns: it
			 * can be "before" its due time by less than a clock step */
			lag[n] = p->append_ns[n] > p->due_ns[n] ? p->append_ns[n] - p->due_ns[n] : 0;
			if (p->ack_ns[n]) {
				p2a[nk++] = p->ack_ns[n] - p->append_ns[n];
				u2a[nu++] = p->ack_ns[n] - p->due_ns[n];
			}
			if (!p->deliver_ns[n]) {
				undelivered += p->ack_ns[n] != 0;
				continue;
			}
			p2d[np++] = p->deliver_ns[n] - p->append_ns[n];
			u2d[nud++] = p->deliver_ns[n] - p->due_ns[n];
			if (!p->ack_ns[n])
				continue;
			if (p->deliver_ns[n] < p->ack_ns[n]) {
				/* the appender had it acknowledged (and a later post
				 * carried the watermark) before dxl_log_writer_poll
				 * handed it to us: a poll returns at most 64 results */
				early++;
				a2d[na++] = 0;
			} else {
				a2d[na++] = p->deliver_ns[n] - p->ack_ns[n];
			}
		}
		double a50, a99, d50, d99, k50, k99;
		json_t *r = json_object();
		json_object_set_new(r, "rate", json_integer(p->rate));
		json_object_set_new(r, "appended", json_integer((json_int_t)p->n));
		json_object_set_new(r, "acked", json_integer((json_int_t)nk));
		json_object_set_new(r, "failed", json_integer((json_int_t)p->failed));
		json_object_set_new(r, "undelivered", json_integer((json_int_t)undelivered));
		json_object_set_new(r, "delivered_before_ack", json_integer((json_int_t)early));
		json_object_set_new(r, "ack_to_deliver_ms", dist_json(a2d, na, &a50, &a99));
		json_object_set_new(r, "append_to_deliver_ms", dist_json(p2d, np, &d50, &d99));
		json_object_set_new(r, "append_to_ack_ms", dist_json(p2a, nk, &k50, &k99));
		double u50, u99, x50, x99, l50, l99;
		json_object_set_new(r, "intended_to_ack_ms", dist_json(u2a, nu, &u50, &u99));
		json_object_set_new(r, "intended_to_deliver_ms", dist_json(u2d, nud, &x50, &x99));
		json_object_set_new(r, "send_lag_ms", dist_json(lag, mem ? p->n : 0, &l50, &l99));
		(void)u50;
		(void)u99;
		(void)l50;
		json_array_append_new(arr, r);
		printf("  %8u %8" PRIu64 " %9zu %10.3f/%-10.3f %10.3f/%-10.3f %6.3f/%-7.3f%s\n",
		       p->rate, p->n, np, a50, a99, d50, d99, k50, k99,
		       undelivered || p->failed ? "  INCOMPLETE" : "");
		if (undelivered || p->failed)
			rc = 1;
		if (mem)
			printf("  %8s intended start->deliver p50/p99 %.3f/%.3f ms, send lag p99 %.3f ms "
			       "(-1: too few samples)\n", "", x50, x99, l99);
		free(a2d);
		free(p2d);
		free(p2a);
		free(u2a);
		free(u2d);
		free(lag);
	}
	json_object_set_new(o, "rates", arr);
	FILE *df = dump ? fopen(dump, "w") : NULL;
	if (dump && !df) {
		fprintf(stderr, "taillag: %s: %s\n", dump, strerror(errno));
		rc = 1;
	}
	if (df) {
		fprintf(df, "rate\tn\tappend_ms\tack_ms\tdeliver_ms\n");
		for (uint32_t i = 0; i < T.nph; i++) {
			struct phase *p = &T.ph[i];
			uint64_t t0 = p->n ? p->append_ns[0] : 0;
			for (uint64_t n = 0; n < p->n; n++)
				fprintf(df, "%u\t%" PRIu64 "\t%.3f\t%.3f\t%.3f\n", p->rate, n,
					bf_ms((int64_t)(p->append_ns[n] - t0)),
					p->ack_ns[n] ? bf_ms((int64_t)(p->ack_ns[n] - t0)) : -1.0,
					p->deliver_ns[n] ? bf_ms((int64_t)(p->deliver_ns[n] - t0)) : -1.0);
		}
		fclose(df);
	}
	json_object_set_new(o, "ok", json_boolean(rc == 0));
	if (json_path && json_dump_file(o, json_path, JSON_INDENT(2))) {
		fprintf(stderr, "taillag: cannot write %s\n", json_path);
		rc = 1;
	}
	json_decref(o);
out:
	if (th_started) {
		atomic_store(&T.stop, 1);
		pthread_join(th, NULL);
	}
	if (wr)
		dxl_log_writer_flush(wr, 2000);
	dxl_log_writer_delete(&wr);
	dxl_fabric_delete(&T.f);
	free(T.targets);
	for (uint32_t i = 0; i < T.nph; i++) {
		free(T.ph[i].append_ns);
		free(T.ph[i].ack_ns);
		free(T.ph[i].deliver_ns);
		free(T.ph[i].due_ns);
	}
	dxl_zk_delete(&zk);
	return rc;
}
