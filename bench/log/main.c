/* main.c -- dxl-bench-log: replicated append latency/throughput, H9 vs strawman,
 * local persist cost, and ZooKeeper as a replicated-log peer, in one run */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/log/bench_log.h"
#include "bench/lib/bench_lib.h"
#include "common/common.h"

static const char usage[] =
"NAME\n"
"    dxl-bench-log -- benchmark dxl's replicated log against ZooKeeper\n"
"\n"
"SYNOPSIS\n"
"    dxl-bench-log [OPTIONS]\n"
"\n"
"DESCRIPTION\n"
"    Starts replica processes on this machine (tcp fabric over loopback),\n"
"    each holding a log region with one ring per writer, and measures from\n"
"    writer threads of this process:\n"
"      append   latency (p50/p99, from dxl_appender_append to its acknowledged\n"
"               result) and throughput of replicated appends, for every\n"
"               combination of --replicas, --sizes, --outstanding, --writers;\n"
"      pwrite   the H9 one-round-trip persistent write against the two-round-\n"
"               trip strawman (1 replica, 1 outstanding), as a latency ratio;\n"
"      persist  the local cost of copying SIZE bytes into a region and making\n"
"               them durable, per durability mode (pmem needs DAX);\n"
"      zk       the peer: a 3-server ZooKeeper ensemble on loopback (started\n"
"               with scripts/zk.sh) doing persistent-sequential creates of the\n"
"               same payload with the same number in flight, once with\n"
"               forceSync=yes (fsync per commit) and once with forceSync=no.\n"
"    The report pairs like with like: ZooKeeper forceSync=yes with dxl replicas\n"
"    in msync mode, forceSync=no with dxl in process mode, and gives dxl/zk\n"
"    throughput and p50 ratios against the goal (>= 10x and <= 0.1x).\n"
"\n"
"OPTIONS\n"
"    --replicas LIST      replica counts (default 1,3)\n"
"    --sizes LIST         payload bytes (default 64,256,1024,4096)\n"
"    --outstanding LIST   appends in flight per writer (default 1,4,16)\n"
"    --writers LIST       writer threads (default 1,2; at most 4)\n"
"    --duration-ms N      per measured cell (default 1000)\n"
"    --durability MODES   replica region modes for the append cells (default\n"
"                         process,msync)\n"
"    --ring-size BYTES    per ring (default 4M)\n"
"    --no-zk              skip the ZooKeeper peer\n"
"    --zk-script PATH     the script that starts ZooKeeper (default\n"
"                         scripts/zk.sh); it runs with DXL_ZK_JVM=production\n"
"                         (1 GiB heap, the default collector and JIT) unless\n"
"                         DXL_ZK_JVM is set; the options used are in the JSON\n"
"                         (zk_jvm)\n"
"    --only KIND          only the append cells (append) or only the ZooKeeper\n"
"                         cells (zk), nothing else: one side of a comparison\n"
"                         run by dxl-bench-compare (docs/benchmarks.md). When\n"
"                         exactly one cell is measured the JSON also has its\n"
"                         summary (ops_per_s, latency from the send, errors)\n"
"    --rate R             open loop: offer R appends (creates) per second on a\n"
"                         fixed schedule, at most --outstanding in flight;\n"
"                         latency from each one's intended start (a stall\n"
"                         and the backlog behind it count), service time\n"
"                         from its send; late: due but never sent. Applies\n"
"                         to the append and zk cells (default: closed loop)\n"
"    --zk-connect HOSTS   use this running ensemble (its forceSync and JVM are\n"
"                         its starter's) instead of starting two of its own\n"
"    --zk-warmup-ms N     creates run on each new ensemble before its cells\n"
"                         are measured, not counted (default 5000; --quick\n"
"                         1000)\n"
"    --quick              a small matrix for CI and the main job (~30 s)\n"
"    --dir DIR            scratch folder for regions (default a new /tmp dir)\n"
"    --out FILE           JSON results (default results/log.json)\n"
"    -h, --help           this text\n"
"\n"
"OUTPUT\n"
"    A table on stdout, and FILE as JSON: {setup, cells[], comparisons[],\n"
"    pwrite{}}. A cell has kind (append|zk|persist), its parameters,\n"
"    ops_per_s, p50_us, p99_us (append, zk) or ns_per_op (persist).\n"
"\n"
"EXAMPLES\n"
"    dxl-bench-log --quick\n"
"    dxl-bench-log --replicas 3 --sizes 1024 --outstanding 16 --no-zk\n";

struct opts {
	uint32_t replicas[4], nreplicas;
	uint32_t sizes[8], nsizes;
	uint32_t outstanding[8], noutstanding;
	uint32_t writers[4], nwriters;
	enum dxl_durability dur[3];
	uint32_t ndur;
	uint32_t duration_ms;
	uint32_t zk_warmup_ms;
	int only;               /* 0 everything, 1 append cells, 2 zk cells */
	double rate;            /* > 0: open loop at this offered rate (ops/s) */
	const char *zk_connect; /* a running ensemble, or NULL */
	uint64_t ring_size;
	int zk;
	const char *zk_script;
	const char *dir;
	const char *out;
};

static int parse_list(const char *s, uint32_t *v, uint32_t cap, uint32_t *n)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", s);
	*n = 0;
	char *save = NULL;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		uint64_t x;
		if (*n == cap || dxl_parse_size(t, &x) || x == 0 || x > UINT32_MAX)
			return -1;
		v[(*n)++] = (uint32_t)x;
	}
	return *n ? 0 : -1;
}

/* ---- one writer thread -------------------------------------------------- */

struct writer {
	pthread_t th;
	struct dxl_fabric *f;
	uint32_t idx;
	struct dxl_log_target t[BL_MAX_REPLICAS];
	uint32_t ntargets;
	uint32_t size, outstanding, duration_ms;
	double rate; /* > 0: open loop, this writer's offered appends/s */
	enum dxl_pwrite_mode mode;
	pthread_barrier_t *start;
	struct bl_result res;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	struct bl_result *r = &w->res;
	dxl_hist_reset(&r->lat);
	dxl_hist_reset(&r->svc);
	r->offered = w->rate;
	struct dxl_ctx *c = NULL;
	struct dxl_appender *a = NULL;
	struct dxl_appender_cfg cfg;
	dxl_appender_cfg_init(&cfg);
	cfg.writer_id = w->idx;
	cfg.mode = w->mode;
	cfg.max_inflight = w->outstanding;
	cfg.max_record = DXL_ALIGN_UP(dxl_rec_size(0, w->size), 64u);
	int ret = dxl_ctx_new(w->f, 1 + w->idx, &c);
	if (!ret)
		ret = dxl_appender_new(c, &cfg, w->t, w->ntargets, &a);
	if (ret)
		snprintf(r->error, sizeof(r->error), "%s", dxl_errmsg());
	pthread_barrier_wait(w->start);
	if (ret)
		goto out;
	uint8_t *payload = calloc(1, w->size);
	uint64_t *start = calloc(w->outstanding, sizeof(uint64_t));
	uint64_t *due = calloc(w->outstanding, sizeof(uint64_t)); /* open loop */
	const int open = w->rate > 0;
	struct dxl_hlc clock;
	dxl_hlc_init(&clock);
	struct dxl_append_result res[32];
	uint64_t t0 = dxl_now_ns();
	uint64_t end = t0 + (uint64_t)w->duration_ms * 1000000ull, txn = 0;
	int stop = 0;
	while (!stop || dxl_appender_inflight(a)) {
		if (!stop && dxl_now_ns() >= end)
			stop = 1;
		while (!stop && dxl_appender_inflight(a) < w->outstanding) {
			/* open loop: append k is due at t0 + k / rate; none
			 * is sent before it is due; a full window delays it
			 * and the delay counts (latency from the due time) */
			uint64_t due_k = open ? dxlb_schedule_ns(t0, txn, w->rate) : 0;
			if (open && (due_k >= end || dxl_now_ns() < due_k))
				break;
			struct dxl_rec rec = {.txn_id = ++txn,
					      .commit_ts = dxl_hlc_now(&clock),
					      .payload = payload,
					      .payload_len = w->size};
			uint64_t tok, now = dxl_now_ns();
			ret = dxl_appender_append(a, &rec, NULL, &tok);
			if (ret) {
				snprintf(r->error, sizeof(r->error), "%s", dxl_errmsg());
				stop = 1;
				break;
			}
			start[tok % w->outstanding] = now;
			due[tok % w->outstanding] = due_k;
		}
		int k = dxl_appender_poll(a, res, 32);
		uint64_t now = dxl_now_ns();
		for (int i = 0; i < k; i++) {
			if (res[i].status) {
				snprintf(r->error, sizeof(r->error),
					 "append not acknowledged: %s",
					 dxl_strerror(res[i].status));
				stop = 1;
				continue;
			}
			uint64_t slot = res[i].token % w->outstanding;
			dxl_hist_record(&r->lat, now - (open ? due[slot] : start[slot]));
			if (open)
				dxl_hist_record(&r->svc, now - start[slot]);
			r->ops++;
		}
		if (k < 0)
			break;
		if (k == 0 && open)
			sched_yield(); /* spin, but let the replicas' threads in */
		if (k == 0 && w->outstanding == 1 && dxl_appender_inflight(a))
			continue; /* latency run: keep polling */
	}
	r->secs = (double)(dxl_now_ns() - t0) / 1e9;
	if (open) {
		uint64_t due_total = (uint64_t)((double)w->duration_ms / 1000.0 * w->rate);
		r->late = due_total > txn ? due_total - txn : 0;
	}
	free(payload);
	free(start);
	free(due);
out:
	dxl_appender_delete(&a);
	dxl_ctx_delete(&c);
	return NULL;
}

/* run one append cell against running replicas */
static void run_append(struct dxl_fabric *f, struct bl_replica *rep,
		       uint32_t nrep, uint32_t writers, uint32_t size,
		       uint32_t outstanding, uint32_t duration_ms, double rate,
		       enum dxl_pwrite_mode mode, struct bl_result *out)
{
	struct writer w[BL_MAX_WRITERS];
	pthread_barrier_t b;
	pthread_barrier_init(&b, NULL, writers);
	memset(w, 0, sizeof(w));
	for (uint32_t i = 0; i < writers; i++) {
		w[i].f = f;
		w[i].idx = i;
		w[i].ntargets = nrep;
		for (uint32_t j = 0; j < nrep; j++)
			w[i].t[j] = rep[j].target[i];
		w[i].size = size;
		w[i].outstanding = outstanding;
		w[i].duration_ms = duration_ms;
		w[i].rate = rate / writers; /* the offered rate, shared */
		w[i].mode = mode;
		w[i].start = &b;
		pthread_create(&w[i].th, NULL, writer_main, &w[i]);
	}
	memset(out, 0, sizeof(*out));
	dxl_hist_reset(&out->lat);
	dxl_hist_reset(&out->svc);
	out->offered = rate > 0 ? rate : 0;
	for (uint32_t i = 0; i < writers; i++) {
		pthread_join(w[i].th, NULL);
		out->ops += w[i].res.ops;
		out->late += w[i].res.late;
		out->secs = DXL_MAX(out->secs, w[i].res.secs);
		dxl_hist_merge(&out->lat, &w[i].res.lat);
		dxl_hist_merge(&out->svc, &w[i].res.svc);
		if (w[i].res.error[0] && !out->error[0])
			snprintf(out->error, sizeof(out->error), "%s", w[i].res.error);
	}
	pthread_barrier_destroy(&b);
}

/* ---- JSON helpers ------------------------------------------------------- */

static json_t *lat_cell(const char *kind, const struct bl_result *r)
{
	double ops = r->secs > 0 ? (double)r->ops / r->secs : 0;
	json_t *o = json_object();
	json_object_set_new(o, "kind", json_string(kind));
	json_object_set_new(o, "ops", json_integer((json_int_t)r->ops));
	json_object_set_new(o, "ops_per_s", json_real(ops));
	json_object_set_new(o, "p50_us", json_real((double)dxl_hist_pct(&r->lat, 50) / 1e3));
	json_object_set_new(o, "p99_us", json_real((double)dxl_hist_pct(&r->lat, 99) / 1e3));
	json_object_set_new(o, "mean_us", json_real(dxl_hist_mean(&r->lat) / 1e3));
	if (r->offered > 0) {
		/* open loop: p50/p99 above are from the intended start */
		json_object_set_new(o, "offered_per_s", json_real(r->offered));
		json_object_set_new(o, "late", json_integer((json_int_t)r->late));
		json_object_set_new(o, "service", dxlb_lat_json(&r->svc));
	}
	if (r->error[0])
		json_object_set_new(o, "error", json_string(r->error));
	return o;
}

static double cell_ops(const struct bl_result *r)
{
	return r->secs > 0 ? (double)r->ops / r->secs : 0;
}

static double cell_p50(const struct bl_result *r)
{
	return (double)dxl_hist_pct(&r->lat, 50) / 1e3;
}

/* start a 3-server ensemble with forceSync on/off; connect string or NULL */
static int zk_start(const char *script, const char *dir, int force_sync,
		    char *connect, size_t cap, char *why, size_t whycap)
{
	if (access(script, X_OK) != 0) {
		snprintf(why, whycap, "%s not found (run from the source tree)", script);
		return -1;
	}
	char cmd[1024];
	/* the peer at its best: production JVM settings unless the caller chose */
	snprintf(cmd, sizeof(cmd),
		 "DXL_ZK_JVM=${DXL_ZK_JVM:-production} DXL_ZK_FORCESYNC=%s '%s' start '%s' "
		 "--servers 3 2>&1",
		 force_sync ? "yes" : "no", script, dir);
	FILE *p = popen(cmd, "r");
	if (!p) {
		snprintf(why, whycap, "popen: %s", strerror(errno));
		return -1;
	}
	char line[512] = "";
	while (fgets(line, sizeof(line), p))
		;
	int rc = pclose(p);
	line[strcspn(line, "\n")] = '\0';
	if (rc != 0 || !strchr(line, ':')) {
		snprintf(why, whycap, "zk.sh start failed: %.200s", line);
		return -1;
	}
	if (strlen(line) >= cap) {
		snprintf(why, whycap, "zk.sh: connect string too long");
		return -1;
	}
	memcpy(connect, line, strlen(line) + 1);
	return 0;
}

static void zk_stop(const char *script, const char *dir)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "'%s' stop '%s' >/dev/null 2>&1", script, dir);
	if (system(cmd) != 0)
		fprintf(stderr, "warning: %s\n", cmd);
}

int main(int argc, char **argv)
{
	struct opts o = {.duration_ms = 1000, .zk_warmup_ms = 5000, .ring_size = 4u << 20, .zk = 1,
			 .zk_script = "scripts/zk.sh", .out = "results/log.json"};
	parse_list("1,3", o.replicas, 4, &o.nreplicas);
	parse_list("64,256,1024,4096", o.sizes, 8, &o.nsizes);
	parse_list("1,4,16", o.outstanding, 8, &o.noutstanding);
	parse_list("1,2", o.writers, 4, &o.nwriters);
	o.dur[0] = DXL_DUR_PROCESS;
	o.dur[1] = DXL_DUR_MSYNC;
	o.ndur = 2;
	static const struct option lo[] = {
		{"replicas", 1, 0, 'r'}, {"sizes", 1, 0, 's'},
		{"outstanding", 1, 0, 'o'}, {"writers", 1, 0, 'w'},
		{"duration-ms", 1, 0, 'd'}, {"durability", 1, 0, 'D'},
		{"ring-size", 1, 0, 'R'}, {"no-zk", 0, 0, 'Z'},
		{"zk-script", 1, 0, 'z'}, {"quick", 0, 0, 'q'}, {"zk-warmup-ms", 1, 0, 'W'},
		{"only", 1, 0, 'Y'}, {"zk-connect", 1, 0, 'C'}, {"rate", 1, 0, 'P'},
		{"dir", 1, 0, 'T'}, {"out", 1, 0, 'O'}, {"help", 0, 0, 'h'},
		{0, 0, 0, 0}};
	int ch, warm_set = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		uint64_t v;
		switch (ch) {
		case 'r':
			if (parse_list(optarg, o.replicas, 4, &o.nreplicas))
				goto bad;
			for (uint32_t i = 0; i < o.nreplicas; i++)
				if (o.replicas[i] > BL_MAX_REPLICAS)
					goto bad;
			break;
		case 's':
			if (parse_list(optarg, o.sizes, 8, &o.nsizes))
				goto bad;
			break;
		case 'o':
			if (parse_list(optarg, o.outstanding, 8, &o.noutstanding))
				goto bad;
			break;
		case 'w':
			if (parse_list(optarg, o.writers, 4, &o.nwriters))
				goto bad;
			for (uint32_t i = 0; i < o.nwriters; i++)
				if (o.writers[i] > BL_MAX_WRITERS)
					goto bad;
			break;
		case 'd':
			if (dxl_parse_u64(optarg, &v) || !v || v > 600000)
				goto bad;
			o.duration_ms = (uint32_t)v;
			break;
		case 'D': {
			char buf[64];
			snprintf(buf, sizeof(buf), "%s", optarg);
			o.ndur = 0;
			char *save = NULL;
			for (char *t = strtok_r(buf, ",", &save); t && o.ndur < 3;
			     t = strtok_r(NULL, ",", &save))
				if (dxl_durability_parse(t, &o.dur[o.ndur++]))
					goto bad;
			break;
		}
		case 'R':
			if (dxl_parse_size(optarg, &o.ring_size) || o.ring_size < 65536 ||
			    o.ring_size % 4096)
				goto bad;
			break;
		case 'Z':
			o.zk = 0;
			break;
		case 'z':
			o.zk_script = optarg;
			break;
		case 'P': {
			char *e = NULL;
			o.rate = strtod(optarg, &e);
			if (!*optarg || *e || !(o.rate > 0) || o.rate > 1e7)
				goto bad;
			break;
		}
		case 'Y':
			if (!strcmp(optarg, "append"))
				o.only = 1;
			else if (!strcmp(optarg, "zk"))
				o.only = 2;
			else
				goto bad;
			break;
		case 'C':
			if (!*optarg || !strchr(optarg, ':') || strlen(optarg) >= 256)
				goto bad;
			o.zk_connect = optarg;
			break;
		case 'W':
			if (dxl_parse_u64(optarg, &v) || v > 600000)
				goto bad;
			o.zk_warmup_ms = (uint32_t)v;
			warm_set = 1;
			break;
		case 'q':
			parse_list("1,3", o.replicas, 4, &o.nreplicas);
			parse_list("64,1024", o.sizes, 8, &o.nsizes);
			parse_list("1,16", o.outstanding, 8, &o.noutstanding);
			parse_list("1", o.writers, 4, &o.nwriters);
			o.duration_ms = 400;
			if (!warm_set)
				o.zk_warmup_ms = 1000;
			break;
		case 'T':
			o.dir = optarg;
			break;
		case 'O':
			o.out = optarg;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			goto bad;
		}
	}
	if (optind != argc)
		goto bad;

	char tmpdir[64];
	if (!o.dir) {
		snprintf(tmpdir, sizeof(tmpdir), "/tmp/dxl-bench-log-XXXXXX");
		if (!mkdtemp(tmpdir)) {
			perror("mkdtemp");
			return 1;
		}
		o.dir = tmpdir;
	}
	json_t *root = json_object(), *cells = json_array(), *cmp = json_array();
	json_object_set_new(root, "setup", dxlb_setup_json(argc, argv));
	/* the replicas' regions (append cells) live in o.dir */
	json_object_set_new(json_object_get(root, "setup"), "data_fs", dxlb_fs_json(o.dir));

	struct dxl_fabric_cfg fc;
	dxl_fabric_cfg_init(&fc);
	fc.node_id = 100;
	struct dxl_fabric *f;
	if (dxl_fabric_new(&fc, &f)) {
		fprintf(stderr, "dxl-bench-log: %s\n", dxl_errmsg());
		return 1;
	}
	uint32_t max_writers = 1;
	for (uint32_t i = 0; i < o.nwriters; i++)
		max_writers = DXL_MAX(max_writers, o.writers[i]);

	/* results kept for the comparison with ZooKeeper: [dur][size][outst] */
	static struct bl_result r3[3][8][8];
	static int have3[3][8][8];

	printf("%-8s %-8s %4s %6s %5s %4s %12s %10s %10s\n", "kind", "durab.",
	       "reps", "size", "outst", "wrtr", "ops/s", "p50(us)", "p99(us)");
	int run_no = 0;
	/* the cells measured (append, zk) and the last of them: a single one
	 * gives the run's summary (dxl-bench-compare) */
	static struct bl_result last;
	int nmeasured = 0;
	for (uint32_t di = 0; o.only != 2 && di < o.ndur; di++) {
		for (uint32_t ri = 0; ri < o.nreplicas; ri++) {
			uint32_t nrep = o.replicas[ri];
			struct bl_replica rep[BL_MAX_REPLICAS];
			int ok = 1;
			for (uint32_t i = 0; i < nrep && ok; i++) {
				char d[512];
				snprintf(d, sizeof(d), "%s/run%d-r%u", o.dir, run_no, i);
				if (bl_replica_start(&rep[i], d, i + 1, max_writers,
						     o.ring_size, o.dur[di], 200)) {
					fprintf(stderr, "replica: %s\n", dxl_errmsg());
					ok = 0;
					nrep = i;
				}
			}
			run_no++;
			for (uint32_t si = 0; ok && si < o.nsizes; si++)
				for (uint32_t oi = 0; oi < o.noutstanding; oi++)
					for (uint32_t wi = 0; wi < o.nwriters; wi++) {
						struct bl_result r;
						run_append(f, rep, nrep, o.writers[wi], o.sizes[si],
							   o.outstanding[oi], o.duration_ms, o.rate,
							   DXL_PWRITE_H9, &r);
						json_t *c = lat_cell("append", &r);
						json_object_set_new(c, "durability", json_string(dxl_durability_name(o.dur[di])));
						json_object_set_new(c, "replicas", json_integer(nrep));
						json_object_set_new(c, "size", json_integer(o.sizes[si]));
						json_object_set_new(c, "outstanding", json_integer(o.outstanding[oi]));
						json_object_set_new(c, "writers", json_integer(o.writers[wi]));
						json_array_append_new(cells, c);
						last = r;
						nmeasured++;
						printf("%-8s %-8s %4u %6u %5u %4u %12.0f %10.1f %10.1f %s\n",
						       "append", dxl_durability_name(o.dur[di]), nrep,
						       o.sizes[si], o.outstanding[oi], o.writers[wi],
						       cell_ops(&r), cell_p50(&r),
						       (double)dxl_hist_pct(&r.lat, 99) / 1e3, r.error);
						fflush(stdout);
						if (nrep == 3 && o.writers[wi] == 1) {
							r3[o.dur[di]][si][oi] = r;
							have3[o.dur[di]][si][oi] = 1;
						}
					}
			for (uint32_t i = 0; i < nrep; i++)
				bl_replica_stop(&rep[i]);
		}
	}

	/* H9 against the strawman: 1 replica, 1 outstanding, same run */
	json_t *pw = json_object();
	if (!o.only) {
		struct bl_replica rep;
		char d[512];
		snprintf(d, sizeof(d), "%s/pwrite", o.dir);
		if (bl_replica_start(&rep, d, 1, 1, o.ring_size, DXL_DUR_PROCESS, 200) == 0) {
			const uint32_t sz[2] = {64, 1024};
			for (int k = 0; k < 2; k++) {
				struct bl_result h9, straw;
				run_append(f, &rep, 1, 1, sz[k], 1, o.duration_ms, 0, DXL_PWRITE_H9,
					   &h9);
				run_append(f, &rep, 1, 1, sz[k], 1, o.duration_ms, 0,
					   DXL_PWRITE_STRAWMAN, &straw);
				double ratio = cell_p50(&straw) > 0 ? cell_p50(&h9) / cell_p50(&straw) : 0;
				printf("%-8s %-8s %4u %6u %5u %4u h9 p50 %.1f us, strawman p50 %.1f us, ratio %.2f (goal <= 0.6)\n",
				       "pwrite", "process", 1, sz[k], 1, 1, cell_p50(&h9),
				       cell_p50(&straw), ratio);
				json_t *e = json_object();
				json_object_set_new(e, "h9", lat_cell("pwrite-h9", &h9));
				json_object_set_new(e, "strawman", lat_cell("pwrite-strawman", &straw));
				json_object_set_new(e, "p50_ratio", json_real(ratio));
				json_object_set_new(e, "goal", json_string("<= 0.6"));
				json_object_set_new(e, "meets_goal", json_boolean(ratio > 0 && ratio <= 0.6));
				char key[32];
				snprintf(key, sizeof(key), "size_%u", sz[k]);
				json_object_set_new(pw, key, e);
			}
			bl_replica_stop(&rep);
		}
	}
	json_object_set_new(root, "pwrite", pw);

	/* local persist cost per mode */
	const enum dxl_durability modes[3] = {DXL_DUR_PMEM, DXL_DUR_MSYNC, DXL_DUR_PROCESS};
	for (int m = 0; !o.only && m < 3; m++) {
		for (uint32_t si = 0; si < o.nsizes; si++) {
			double ns = 0;
			char why[256] = "";
			uint32_t iters = modes[m] == DXL_DUR_MSYNC ? 300 : 20000;
			int ret = bl_persist_cost(o.dir, modes[m], o.sizes[si], iters, &ns,
						  why, sizeof(why));
			json_t *c = json_object();
			json_object_set_new(c, "kind", json_string("persist"));
			json_object_set_new(c, "durability", json_string(dxl_durability_name(modes[m])));
			json_object_set_new(c, "size", json_integer(o.sizes[si]));
			if (ret) {
				json_object_set_new(c, "error", json_string(why));
				printf("%-8s %-8s %4s %6u  n/a: %.80s\n", "persist",
				       dxl_durability_name(modes[m]), "", o.sizes[si], why);
				json_array_append_new(cells, c);
				break; /* same reason for every size */
			}
			json_object_set_new(c, "ns_per_op", json_real(ns));
			json_array_append_new(cells, c);
			printf("%-8s %-8s %4s %6u %28.0f ns per copy+persist\n", "persist",
			       dxl_durability_name(modes[m]), "", o.sizes[si], ns);
		}
	}

	/* ZooKeeper, forceSync yes and no, compared with dxl msync/process */
	if (o.zk && o.only != 1) {
		/* with --zk-connect: one ensemble, the caller's (sync = 1 only
		 * names the loop's one pass: its forceSync is the caller's) */
		for (int sync = 1; sync >= (o.zk_connect ? 1 : 0); sync--) {
			char zdir[512], connect[256], why[256] = "";
			snprintf(zdir, sizeof(zdir), "%s/zk-%s", o.dir, sync ? "sync" : "nosync");
			enum dxl_durability pair = sync ? DXL_DUR_MSYNC : DXL_DUR_PROCESS;
			if (o.zk_connect) {
				snprintf(connect, sizeof(connect), "%s", o.zk_connect);
				json_object_set_new(root, "zk_connect", json_string(connect));
			} else if (zk_start(o.zk_script, zdir, sync, connect, sizeof(connect), why,
				     sizeof(why))) {
				printf("zk: skipped: %s\n", why);
				json_object_set_new(root, "zk_skipped", json_string(why));
				break;
			}
			char jpath[600], jvm[256] = "";
			snprintf(jpath, sizeof(jpath), "%s/s1/jvm", zdir);
			FILE *jf = fopen(jpath, "r");
			if (jf) {
				if (fgets(jvm, sizeof(jvm), jf))
					jvm[strcspn(jvm, "\n")] = 0;
				fclose(jf);
			}
			if (!o.zk_connect)
				json_object_set_new(root, "zk_jvm", json_string(jvm));
			if (o.zk_warmup_ms && o.nsizes && o.noutstanding) {
				/* the JIT compiles, the heap settles: not counted */
				struct bl_result w;
				bl_zk_run(connect, o.sizes[0], o.outstanding[o.noutstanding - 1],
					  o.zk_warmup_ms, 0, &w);
				printf("zk %s: warm-up %u ms (%.0f creates/s, not counted)%s%s\n",
				       sync ? "fsync" : "nosync", o.zk_warmup_ms, cell_ops(&w),
				       w.error[0] ? ": " : "", w.error);
			}
			for (uint32_t si = 0; si < o.nsizes; si++)
				for (uint32_t oi = 0; oi < o.noutstanding; oi++) {
					struct bl_result z;
					bl_zk_run(connect, o.sizes[si], o.outstanding[oi],
						  o.duration_ms, o.rate, &z);
					json_t *c = lat_cell("zk", &z);
					json_object_set_new(c, "force_sync",
							    o.zk_connect ? json_null() : json_boolean(sync));
					last = z;
					nmeasured++;
					json_object_set_new(c, "servers", json_integer(3));
					json_object_set_new(c, "size", json_integer(o.sizes[si]));
					json_object_set_new(c, "outstanding", json_integer(o.outstanding[oi]));
					json_array_append_new(cells, c);
					printf("%-8s %-8s %4u %6u %5u %4u %12.0f %10.1f %10.1f %s\n",
					       "zk", sync ? "fsync" : "nosync", 3, o.sizes[si],
					       o.outstanding[oi], 1, cell_ops(&z), cell_p50(&z),
					       (double)dxl_hist_pct(&z.lat, 99) / 1e3, z.error);
					fflush(stdout);
					if (!have3[pair][si][oi] || z.error[0] || !z.ops)
						continue;
					const struct bl_result *d = &r3[pair][si][oi];
					double tr = cell_ops(d) / cell_ops(&z);
					double lr = cell_p50(&z) > 0 ? cell_p50(d) / cell_p50(&z) : 0;
					json_t *e = json_object();
					json_object_set_new(e, "dxl_durability", json_string(dxl_durability_name(pair)));
					json_object_set_new(e, "zk_force_sync", json_boolean(sync));
					json_object_set_new(e, "size", json_integer(o.sizes[si]));
					json_object_set_new(e, "outstanding", json_integer(o.outstanding[oi]));
					json_object_set_new(e, "dxl_ops_per_s", json_real(cell_ops(d)));
					json_object_set_new(e, "zk_ops_per_s", json_real(cell_ops(&z)));
					json_object_set_new(e, "dxl_p50_us", json_real(cell_p50(d)));
					json_object_set_new(e, "zk_p50_us", json_real(cell_p50(&z)));
					json_object_set_new(e, "throughput_ratio", json_real(tr));
					json_object_set_new(e, "p50_ratio", json_real(lr));
					json_object_set_new(e, "meets_goal", json_boolean(tr >= 10 && lr <= 0.1));
					json_array_append_new(cmp, e);
				}
			if (!o.zk_connect)
				zk_stop(o.zk_script, zdir);
		}
	}
	if (nmeasured == 1) {
		struct dxlb_summary sm = {.ops = last.ops, .seconds = last.secs, .lat = &last.lat,
					  .offered_per_s = last.offered,
					  .svc = last.offered > 0 ? &last.svc : NULL,
					  .late = last.late, .errors = last.error[0] ? 1 : 0};
		json_object_set_new(root, "summary", dxlb_summary_json(&sm));
	}
	dxlb_setup_end(json_object_get(root, "setup"));
	json_object_set_new(root, "cells", cells);
	json_object_set_new(root, "comparisons", cmp);

	if (json_array_size(cmp)) {
		printf("\n%-8s %-7s %6s %5s %12s %12s %8s %9s %9s %7s %s\n", "dxl", "zk",
		       "size", "outst", "dxl ops/s", "zk ops/s", "thr x", "dxl p50", "zk p50",
		       "p50 x", "goal");
		size_t i;
		json_t *e;
		json_array_foreach(cmp, i, e) {
			printf("%-8s %-7s %6lld %5lld %12.0f %12.0f %8.1f %9.1f %9.1f %7.3f %s\n",
			       json_string_value(json_object_get(e, "dxl_durability")),
			       json_is_true(json_object_get(e, "zk_force_sync")) ? "fsync" : "nosync",
			       json_integer_value(json_object_get(e, "size")),
			       json_integer_value(json_object_get(e, "outstanding")),
			       json_real_value(json_object_get(e, "dxl_ops_per_s")),
			       json_real_value(json_object_get(e, "zk_ops_per_s")),
			       json_real_value(json_object_get(e, "throughput_ratio")),
			       json_real_value(json_object_get(e, "dxl_p50_us")),
			       json_real_value(json_object_get(e, "zk_p50_us")),
			       json_real_value(json_object_get(e, "p50_ratio")),
			       json_is_true(json_object_get(e, "meets_goal")) ? "met" : "NOT met");
		}
	}

	char outdir[512];
	snprintf(outdir, sizeof(outdir), "%s", o.out);
	char *slash = strrchr(outdir, '/');
	if (slash) {
		*slash = '\0';
		mkdir(outdir, 0755);
	}
	if (json_dump_file(root, o.out, JSON_INDENT(1)) != 0)
		fprintf(stderr, "dxl-bench-log: cannot write %s\n", o.out);
	else
		printf("\nresults: %s\n", o.out);
	json_decref(root);
	dxl_fabric_delete(&f);
	if (o.dir == tmpdir) {
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		if (system(cmd) != 0)
			fprintf(stderr, "warning: could not remove %s\n", tmpdir);
	}
	return 0;
bad:
	fprintf(stderr, "dxl-bench-log: bad arguments; see --help\n");
	return 2;
}
