/* main.c -- dxl-bench-recovery: rebuilding a shard's store and hash index from a checkpoint and the log, opening a store, and what a checkpoint costs the writers */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/engine.h"
#include "dxl/index.h"
#include "dxl/recovery.h"

static const char usage[] =
"NAME\n"
"    dxl-bench-recovery -- rebuild of a store and its hash index from a\n"
"    checkpoint and the log, store open, checkpoint cost\n"
"\n"
"SYNOPSIS\n"
"    dxl-bench-recovery [--records LIST] [--value BYTES] [--log-frac F]\n"
"                       [--cost-seconds S] [--durability MODE] [--dir DIR]\n"
"                       [--quick] [--out FILE]\n"
"\n"
"DESCRIPTION\n"
"    In this process, one core's worth of work each (the machine's other\n"
"    core runs the checkpoint thread in 'cost'), for each record count N:\n"
"      load     N records of --value bytes put into a store (one table, the\n"
"               hash index following through the store's hooks, as a\n"
"               replica's tables do): records/s of the applier;\n"
"      ckpt     a checkpoint of that store written (dxl_ckpt_write): s, MB/s,\n"
"               its thread's CPU s, the file's size and disk use;\n"
"      log      N x --log-frac updates of random keys logged (4 rings) and\n"
"               applied after the checkpoint's position;\n"
"      rebuild  a new store and index from the checkpoint (dxl_ckpt_install)\n"
"               and the log from its position (dxl_recovery_replay): records/s\n"
"               of each and of the whole, checked against the source store's\n"
"               digest (exit 2 if they differ); and per core: records per\n"
"               second of the rebuilding thread's CPU time (user + system),\n"
"               which a loaded machine's waits for a core do not inflate;\n"
"      open     the rebuilt store closed, opened again (a scan of every\n"
"               slot) and its index rebuilt from the live slots: seconds;\n"
"      cost     updates/s of one applier thread for --cost-seconds without,\n"
"               then with a thread writing checkpoints back to back.\n"
"\n"
"OPTIONS\n"
"    --records LIST    record counts (default 1000000,10000000)\n"
"    --value BYTES     value size (default 64)\n"
"    --log-frac F      updates in the log, as a fraction of N (default 0.1)\n"
"    --cost-seconds S  each half of 'cost' (default 5)\n"
"    --durability M    process | msync (default process, as dxl cluster up)\n"
"    --dir DIR         scratch folder (default a new /tmp dir, removed)\n"
"    --quick           --records 200000 --cost-seconds 2 (CI, make bench)\n"
"    --out FILE        JSON results (default results/recovery.json)\n"
"    -h, --help        this text\n"
"\n"
"EXIT STATUS\n"
"    0 measured; 1 failed; 2 the rebuilt store differs from the source\n";

static const struct dxl_region_id ID = {.cluster = "bench", .node_id = 1};
#define TABLE 1
#define NRINGS 4

struct side {
	struct dxl_store *s;
	struct dxl_index *ix;
};

static int hook_insert(void *arg, uint32_t table, uint64_t key, uint64_t slot, uint32_t inc)
{
	struct side *sd = arg;
	return dxl_index_insert(sd->ix, key, slot, inc);
}

static void hook_remove(void *arg, uint32_t table, uint64_t key, uint64_t slot)
{
	struct side *sd = arg;
	struct dxl_index_loc old;
	dxl_index_remove(sd->ix, key, &old);
}

static int side_open(struct side *sd, const char *path, enum dxl_durability mode,
		     const struct dxl_table_schema *sc, bool create)
{
	struct dxl_index_cfg ic;
	dxl_index_cfg_init(&ic, sc->capacity);
	int ret = dxl_index_new(&ic, &sd->ix);
	if (ret)
		return ret;
	struct dxl_store_cfg cfg;
	dxl_store_cfg_init(&cfg);
	cfg.hooks.insert = hook_insert;
	cfg.hooks.remove = hook_remove;
	cfg.hooks.arg = sd;
	return create ? dxl_store_create(path, mode, &ID, 0, sc, 1, &cfg, &sd->s)
		      : dxl_store_open(path, mode, &ID, &cfg, &sd->s);
}

static void side_close(struct side *sd)
{
	dxl_store_close(&sd->s);
	dxl_index_delete(&sd->ix);
}

/* what a replica's tables do after dxl_store_open: one index entry per
 * live slot */
static int index_from_slots(struct side *sd, const struct dxl_table_schema *sc)
{
	for (uint64_t slot = 0; slot < sc->capacity; slot++) {
		struct dxl_record r;
		int ret = dxl_store_read(sd->s, TABLE, slot, &r, NULL, 0);
		if (ret == 0 && r.live && (ret = dxl_index_insert(sd->ix, r.key, slot, r.inc)))
			return ret;
	}
	return 0;
}

static void value(uint8_t *v, uint32_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	for (uint32_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		v[i] = (uint8_t)x;
	}
}

/* a log in a region: NRINGS rings, appended to by this process */
struct blog {
	struct dxl_region *r;
	struct dxl_logstore *ls;
	uint64_t tail_pos[NRINGS], tail_seq[NRINGS];
};

static int blog_open(struct blog *l, const char *path, enum dxl_durability mode, uint64_t ring)
{
	struct dxl_region_id lid = ID;
	lid.kind = DXL_REGION_LOG;
	int ret = dxl_region_create(path, DXL_ALIGN_UP(dxl_logstore_bytes(NRINGS, ring), 4096ull),
				    mode, &lid, &l->r);
	if (!ret)
		ret = dxl_logstore_format(l->r, 0, NRINGS, ring);
	if (!ret)
		ret = dxl_logstore_open(l->r, &l->ls);
	for (int i = 0; i < NRINGS; i++) {
		l->tail_pos[i] = 0;
		l->tail_seq[i] = 1;
	}
	return ret;
}

static int blog_append(struct blog *l, uint32_t ring, uint64_t ts, const void *p, uint32_t len)
{
	struct dxl_rec rec = {.type = DXL_REC_DATA, .writer = ring, .epoch = 1, .txn_id = ts,
			      .commit_ts = ts, .payload = p, .payload_len = len};
	uint64_t size = dxl_logstore_ring_size(l->ls);
	struct dxl_ring_head h;
	int ret = dxl_logstore_head(l->ls, ring, &h);
	struct dxl_ring_place pl;
	if (!ret)
		ret = dxl_ring_place(size, l->tail_pos[ring], l->tail_seq[ring], h.pos,
				     dxl_rec_size(0, len), &pl);
	if (ret)
		return ret;
	uint8_t *buf = (uint8_t *)dxl_region_data(l->r) + dxl_logstore_buf_off(l->ls, ring);
	if (pl.skip_len)
		dxl_rec_encode_skip(ring, 1, pl.skip_seq, pl.skip_len, buf + pl.skip_off, pl.skip_len);
	rec.seq = pl.rec_seq;
	ret = dxl_rec_encode(&rec, NULL, buf + pl.rec_off, size - pl.rec_off);
	if (ret < 0)
		return ret;
	/* one persist per record, as an appender's flush makes it durable */
	dxl_region_persist(l->r, buf + pl.rec_off, dxl_rec_size(0, len));
	l->tail_pos[ring] = pl.new_tail_pos;
	l->tail_seq[ring] = pl.new_tail_seq;
	return 0;
}

static void blog_close(struct blog *l)
{
	dxl_logstore_close(&l->ls);
	dxl_region_close(&l->r);
}

/* ---- cost: an applier with and without checkpoints ----------------------------------- */

struct costarg {
	struct dxl_store *s;
	const struct dxl_logstore *ls;
	const char *dir;
	atomic_bool stop;
	uint64_t ckpts;
	int err;
};

static void *ckpt_loop(void *arg)
{
	struct costarg *c = arg;
	while (!atomic_load(&c->stop)) {
		struct dxl_ckpt_info info;
		if ((c->err = dxl_ckpt_write(c->dir, &ID, c->s, c->ls, &info)))
			return NULL;
		c->ckpts++;
		dxl_ckpt_prune(c->dir, dxl_region_durability(dxl_store_region(c->s)), &ID, 0, 1);
	}
	return NULL;
}

static double apply_rate(struct dxl_store *s, uint64_t n, uint32_t vsize, double seconds,
			 uint64_t *version, uint64_t *seed)
{
	uint8_t v[DXL_ENGINE_MAX_VALUE];
	uint64_t done = 0, t0 = dxl_now_ns(), end = t0 + (uint64_t)(seconds * 1e9);
	while (dxl_now_ns() < end) {
		for (int k = 0; k < 256; k++) {
			*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
			uint64_t key = (*seed >> 17) % n;
			value(v, vsize, *seed);
			*version += 2;
			if (dxl_store_apply(s, TABLE, key, DXL_WS_UPDATE, *version, *version, v, vsize) < 0)
				return -1;
		}
		done += 256;
	}
	return (double)done / ((double)(dxl_now_ns() - t0) / 1e9);
}

/* ---- one record count -------------------------------------------------------------------- */

static double secs(uint64_t t0)
{
	return (double)(dxl_now_ns() - t0) / 1e9;
}

/* this thread's CPU time (user + system), seconds: "per core" on a machine
 * whose other processes take the cores away (wall time counts the waits) */
static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int run_one(const char *dir, uint64_t n, uint32_t vsize, double log_frac,
		   double cost_s, enum dxl_durability mode, json_t *out, int *mismatch)
{
	char p_src[512], p_dst[512], p_log[512];
	snprintf(p_src, sizeof(p_src), "%s/src-%" PRIu64, dir, n);
	snprintf(p_dst, sizeof(p_dst), "%s/dst-%" PRIu64, dir, n);
	snprintf(p_log, sizeof(p_log), "%s/log-%" PRIu64, dir, n);
	struct dxl_table_schema sc = {.id = TABLE, .value_size = vsize, .capacity = n + n / 8 + 64};
	struct side src = {0}, dst = {0};
	struct blog lg = {0};
	uint8_t v[DXL_ENGINE_MAX_VALUE];
	uint64_t version = 0, seed = 42;
	int ret = side_open(&src, p_src, mode, &sc, true);
	if (ret)
		goto out;
	/* load */
	uint64_t t0 = dxl_now_ns();
	for (uint64_t k = 0; k < n && !ret; k++) {
		value(v, vsize, k);
		version += 2;
		ret = dxl_store_apply(src.s, TABLE, k, DXL_WS_INSERT, version, version, v, vsize);
		ret = ret < 0 ? ret : 0;
	}
	if (ret)
		goto out;
	double load_s = secs(t0);
	printf("N=%" PRIu64 ": load %.2f s (%.0f records/s)\n", n, load_s, (double)n / load_s);
	fflush(stdout);
	/* the checkpoint, at the empty log's position */
	uint64_t nlog = (uint64_t)((double)n * log_frac);
	uint64_t ring = DXL_ALIGN_UP((nlog / NRINGS + 16) * (uint64_t)(dxl_rec_size(0, 24 + DXL_ALIGN_UP(vsize, 8u) + 16) + 64),
				     4096ull) + (1 << 20);
	if ((ret = blog_open(&lg, p_log, mode, ring)))
		goto out;
	struct dxl_ckpt_info info;
	double ckpt_cpu0 = cpu_now();
	t0 = dxl_now_ns();
	if ((ret = dxl_ckpt_write(dir, &ID, src.s, lg.ls, &info)))
		goto out;
	double ckpt_s = secs(t0), ckpt_cpu_s = cpu_now() - ckpt_cpu0;
	char cpath[600];
	snprintf(cpath, sizeof(cpath), "%s/ckpt-0-%020" PRIu64 ".dat", dir, info.seq);
	struct stat cst = {0};
	stat(cpath, &cst);
	double ckpt_mb = (double)(info.entries * (DXL_CKPT_ENTRY_HDR + DXL_ALIGN_UP(vsize, 8u))) / 1e6;
	printf("N=%" PRIu64 ": checkpoint %.2f s (%.0f MB/s of entries, %" PRIu64
	       " entries; %.2f s of CPU); file %.1f MB, %.1f MB on disk\n",
	       n, ckpt_s, ckpt_mb / ckpt_s, info.entries, ckpt_cpu_s, (double)cst.st_size / 1e6,
	       (double)cst.st_blocks * 512 / 1e6);
	fflush(stdout);
	/* the log after it: updates, logged and applied */
	t0 = dxl_now_ns();
	for (uint64_t i = 0; i < nlog && !ret; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		struct dxl_ws_entry e = {.table = TABLE, .op = DXL_WS_UPDATE, .key = (seed >> 17) % n,
					 .version = (version += 2), .value = v, .len = vsize};
		value(v, vsize, seed);
		uint8_t ws[DXL_ENGINE_MAX_VALUE + 64];
		int len = dxl_writeset_encode(&e, 1, ws, sizeof(ws));
		ret = len < 0 ? len : blog_append(&lg, (uint32_t)(i % NRINGS), version, ws, (uint32_t)len);
		if (!ret)
			ret = dxl_store_apply_writeset(src.s, ws, (uint32_t)len, version, NULL, NULL, NULL);
		ret = ret < 0 ? ret : 0;
	}
	if (ret)
		goto out;
	double log_s = secs(t0);
	struct dxl_digest want;
	if ((ret = dxl_digest_store(src.s, UINT32_MAX, &want, NULL)))
		goto out;
	/* rebuild: checkpoint, then the log from its position */
	struct dxl_ckpt *c = NULL;
	if ((ret = dxl_ckpt_open(cpath, mode, &ID, &c)))
		goto out;
	if ((ret = side_open(&dst, p_dst, mode, &sc, true))) {
		dxl_ckpt_close(&c);
		goto out;
	}
	struct dxl_install_stats is;
	double cpu0 = cpu_now();
	t0 = dxl_now_ns();
	ret = dxl_ckpt_install(dst.s, c, &is);
	double inst_s = secs(t0);
	dxl_ckpt_close(&c);
	if (ret)
		goto out;
	struct dxl_replay_stats rs;
	t0 = dxl_now_ns();
	ret = dxl_recovery_replay(dst.s, lg.ls, UINT64_MAX, NULL, NULL, &rs);
	double replay_s = secs(t0);
	double rebuild_cpu_s = cpu_now() - cpu0;
	if (ret < 0)
		goto out;
	ret = 0;
	struct dxl_digest have;
	if ((ret = dxl_digest_store(dst.s, UINT32_MAX, &have, NULL)))
		goto out;
	if (!dxl_digest_equal(&want, &have)) {
		fprintf(stderr, "N=%" PRIu64 ": the rebuilt store differs from the source\n", n);
		*mismatch = 1;
	}
	/* install also computes the store's digest to check itself: that
	 * scan is part of its time */
	printf("N=%" PRIu64 ": rebuild: install %.2f s (%.0f records/s), replay %" PRIu64
	       " records %.2f s (%.0f records/s), total %.0f records/s\n",
	       n, inst_s, (double)is.entries / inst_s, rs.records, replay_s,
	       (double)rs.records / replay_s, (double)(is.entries + rs.records) / (inst_s + replay_s));
	printf("N=%" PRIu64 ": rebuild per core: %.2f s of this thread's CPU (%.0f records per CPU "
	       "second; wall %.2f s)\n",
	       n, rebuild_cpu_s, (double)(is.entries + rs.records) / rebuild_cpu_s,
	       inst_s + replay_s);
	fflush(stdout);
	/* open: the scan of the slots and the index from them */
	side_close(&dst);
	t0 = dxl_now_ns();
	if ((ret = side_open(&dst, p_dst, mode, &sc, false)))
		goto out;
	double scan_s = secs(t0);
	uint64_t t1 = dxl_now_ns();
	if ((ret = index_from_slots(&dst, &sc)))
		goto out;
	double ix_s = secs(t1);
	printf("N=%" PRIu64 ": open %.2f s (slot scan %.2f s, index %.2f s)\n", n, scan_s + ix_s,
	       scan_s, ix_s);
	fflush(stdout);
	side_close(&dst);
	unlink(p_dst);
	/* cost: the applier alone, then with checkpoints back to back */
	double alone = apply_rate(src.s, n, vsize, cost_s, &version, &seed);
	struct costarg ca = {.s = src.s, .ls = lg.ls, .dir = dir};
	pthread_t th;
	pthread_create(&th, NULL, ckpt_loop, &ca);
	double with = apply_rate(src.s, n, vsize, cost_s, &version, &seed);
	atomic_store(&ca.stop, true);
	pthread_join(th, NULL);
	if (ca.err) {
		ret = ca.err;
		goto out;
	}
	double la[3] = {0};
	getloadavg(la, 3);
	printf("N=%" PRIu64 ": applier %.0f updates/s alone, %.0f with %" PRIu64
	       " checkpoints written meanwhile (%.0f%%); load average %.1f\n",
	       n, alone, with, ca.ckpts, 100.0 * with / alone, la[0]);
	fflush(stdout);
	json_t *o = json_object();
	json_object_set_new(o, "records", json_integer((json_int_t)n));
	json_object_set_new(o, "value_bytes", json_integer(vsize));
	json_object_set_new(o, "durability", json_string(dxl_durability_name(mode)));
	json_object_set_new(o, "load_s", json_real(load_s));
	json_object_set_new(o, "load_records_per_s", json_real((double)n / load_s));
	json_object_set_new(o, "checkpoint_s", json_real(ckpt_s));
	json_object_set_new(o, "checkpoint_mb_per_s", json_real(ckpt_mb / ckpt_s));
	json_object_set_new(o, "checkpoint_cpu_s", json_real(ckpt_cpu_s));
	json_object_set_new(o, "checkpoint_file_bytes", json_integer((json_int_t)cst.st_size));
	json_object_set_new(o, "checkpoint_disk_bytes",
			    json_integer((json_int_t)cst.st_blocks * 512));
	json_object_set_new(o, "log_records", json_integer((json_int_t)nlog));
	json_object_set_new(o, "log_append_apply_s", json_real(log_s));
	json_object_set_new(o, "install_s", json_real(inst_s));
	json_object_set_new(o, "install_records_per_s", json_real((double)is.entries / inst_s));
	json_object_set_new(o, "replay_s", json_real(replay_s));
	json_object_set_new(o, "replay_records_per_s", json_real((double)rs.records / replay_s));
	json_object_set_new(o, "rebuild_s", json_real(inst_s + replay_s));
	json_object_set_new(o, "rebuild_records_per_s",
			    json_real((double)(is.entries + rs.records) / (inst_s + replay_s)));
	json_object_set_new(o, "rebuild_cpu_s", json_real(rebuild_cpu_s));
	json_object_set_new(o, "rebuild_records_per_cpu_s",
			    json_real((double)(is.entries + rs.records) / rebuild_cpu_s));
	json_object_set_new(o, "open_s", json_real(scan_s + ix_s));
	json_object_set_new(o, "open_scan_s", json_real(scan_s));
	json_object_set_new(o, "open_index_s", json_real(ix_s));
	json_object_set_new(o, "apply_alone_per_s", json_real(alone));
	json_object_set_new(o, "apply_with_checkpoints_per_s", json_real(with));
	json_object_set_new(o, "checkpoints_during", json_integer((json_int_t)ca.ckpts));
	json_object_set_new(o, "digest_equal", json_boolean(!*mismatch));
	json_object_set_new(o, "load_avg_1m", json_real(la[0]));
	json_array_append_new(out, o);
out:
	if (ret)
		fprintf(stderr, "N=%" PRIu64 ": %s: %s\n", n, dxl_errname(ret), dxl_errmsg());
	side_close(&src);
	side_close(&dst);
	blog_close(&lg);
	unlink(p_src);
	unlink(p_dst);
	unlink(p_log);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -f '%s'/ckpt-0-*", dir);
	if (system(cmd)) {
	}
	return ret;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"records", required_argument, NULL, 'n'},
		{"value", required_argument, NULL, 'v'},
		{"log-frac", required_argument, NULL, 'l'},
		{"cost-seconds", required_argument, NULL, 'c'},
		{"durability", required_argument, NULL, 'D'},
		{"dir", required_argument, NULL, 'd'},
		{"quick", no_argument, NULL, 'q'},
		{"out", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *records = "1000000,10000000", *dir0 = NULL, *outp = "results/recovery.json";
	uint64_t vsize = 64;
	double log_frac = 0.1, cost_s = 5;
	enum dxl_durability mode = DXL_DUR_PROCESS;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'n': records = optarg; break;
		case 'v':
			if (dxl_parse_u64(optarg, &vsize) || !vsize || vsize > DXL_ENGINE_MAX_VALUE) {
				fprintf(stderr, "--value '%s': 1..%d\n", optarg, DXL_ENGINE_MAX_VALUE);
				return 1;
			}
			break;
		case 'l': log_frac = atof(optarg); break;
		case 'c': cost_s = atof(optarg); break;
		case 'D':
			if (dxl_durability_parse(optarg, &mode) || mode == DXL_DUR_PMEM) {
				fprintf(stderr, "--durability '%s': process or msync\n", optarg);
				return 1;
			}
			break;
		case 'd': dir0 = optarg; break;
		case 'q': records = "200000"; cost_s = 2; break;
		case 'o': outp = optarg; break;
		case 'h': fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return 1;
		}
	}
	if (log_frac < 0 || log_frac > 10 || cost_s <= 0 || cost_s > 600) {
		fprintf(stderr, "--log-frac 0..10, --cost-seconds 0..600\n");
		return 1;
	}
	char dir[256];
	if (dir0) {
		snprintf(dir, sizeof(dir), "%s", dir0);
		mkdir(dir, 0755);
	} else {
		snprintf(dir, sizeof(dir), "/tmp/dxl-bench-recovery-XXXXXX");
		if (!mkdtemp(dir)) {
			perror("mkdtemp");
			return 1;
		}
	}
	json_t *runs = json_array();
	int rc = 0, mismatch = 0;
	char *list = strdup(records), *save = NULL;
	for (char *t = strtok_r(list, ",", &save); t && !rc; t = strtok_r(NULL, ",", &save)) {
		uint64_t n;
		if (dxl_parse_u64(t, &n) || n < 1000 || n > (1ull << 29)) {
			fprintf(stderr, "--records: '%s' is not a count in 1000..2^29\n", t);
			rc = 1;
			break;
		}
		if (run_one(dir, n, (uint32_t)vsize, log_frac, cost_s, mode, runs, &mismatch))
			rc = 1;
	}
	free(list);
	if (!dir0)
		rmdir(dir);
	json_t *root = json_object();
	json_object_set_new(root, "benchmark", json_string("recovery"));
	json_object_set_new(root, "cores", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
	json_object_set_new(root, "runs", runs);
	char *slash = strrchr(outp, '/');
	if (slash) {
		char d[512];
		snprintf(d, sizeof(d), "%.*s", (int)(slash - outp), outp);
		mkdir(d, 0755);
	}
	if (json_dump_file(root, outp, JSON_INDENT(2))) {
		fprintf(stderr, "cannot write %s\n", outp);
		rc = 1;
	}
	json_decref(root);
	return rc ? rc : (mismatch ? 2 : 0);
}
