/* run.c -- dxl-bench-failover run: one kill -9 of a primary under a steady
 * append load, timed from the kill (writers' view and ZooKeeper's view) */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/failover/bench_failover.h"
#include "common/common.h"
#include "common/hist.h"
#include "dxl/replica.h"

/* per shard: a writer thread; the fields after `mu`-marked ones are written
 * by that thread only and read by main after the join */
struct shard_w {
	pthread_t th;
	struct run *R;
	uint32_t shard;
	bool started, joined;
	char err[256];
	/* written by the writer thread only; main reads them after the join,
	 * or first_ack_ns (atomic) while waiting */
	uint64_t acked, failed, appended;
	struct dxl_hist lat;
	uint64_t last_ack_ns;   /* last acknowledgement before the outage */
	uint64_t broken_ns;     /* first poll that saw the writer unavailable */
	uint64_t reopen_ns;     /* first poll that saw the outage counter move */
	_Atomic uint64_t first_ack_ns; /* first acknowledgement after the reopen */
	uint64_t max_lat_ns;    /* the slowest append (one caught in the outage) */
	struct dxl_log_writer_info before, after;
	uint64_t outage_ms_writer; /* the writer's own last_outage_ms */
};

struct run {
	struct bf_cluster c;
	double rate_per_shard;
	uint32_t size;
	_Atomic uint64_t kill_ns; /* 0 until the kill */
	atomic_int stop;
	atomic_int ready;
	uint32_t nshards;
	struct shard_w w[BF_MAX_SHARDS];

	/* ZooKeeper's view, under mu (callbacks run on the event thread) */
	pthread_mutex_t mu;
	uint32_t victim;
	uint64_t epoch0;
	uint64_t gone_ns;      /* the victim's nodes/<id> vanished */
	uint64_t config_ns;    /* the first configuration with epoch > epoch0 */
	uint64_t epoch1;
	uint32_t primary1[BF_MAX_SHARDS]; /* its primaries */
	uint32_t nshards1;
	uint64_t reg_ns[BF_MAX_REPLICAS]; /* survivor i published cfg_epoch > epoch0 */
};

static void *writer_main(void *arg)
{
	struct shard_w *w = arg;
	struct run *R = w->R;
	struct dxl_zk *zk = NULL;
	struct dxl_log_writer *wr = NULL;
	dxl_hist_reset(&w->lat);
	int ret = bf_zk_open(&R->c, &zk) ? -1 : 0;
	if (!ret) {
		struct dxl_log_writer_cfg wc;
		dxl_log_writer_cfg_init(&wc);
		wc.shard = w->shard;
		ret = dxl_log_writer_new(zk, &wc, &wr);
		if (ret)
			snprintf(w->err, sizeof(w->err), "shard %u: writer: %s", w->shard,
				 dxl_errmsg());
	} else {
		snprintf(w->err, sizeof(w->err), "shard %u: no ZooKeeper session", w->shard);
	}
	if (ret) {
		atomic_fetch_add(&R->ready, 1);
		dxl_zk_delete(&zk);
		return NULL;
	}
	dxl_log_writer_get_info(wr, &w->before);
	w->started = true;
	atomic_fetch_add(&R->ready, 1);
	char *buf = malloc(R->size);
	size_t fcap = 8192, fh = 0, ft = 0;
	uint64_t *sent = malloc(fcap * sizeof(*sent));
	if (!buf || !sent)
		goto out;
	memset(buf, 'x', R->size);
	uint64_t outages0 = w->before.outages, n = 0, t0 = dxl_now_ns();
	bool seen_outage = false;
	for (;;) {
		bool stopping = atomic_load(&R->stop);
		if (stopping && fh == ft)
			break;
		while (!stopping && ft - fh < fcap &&
		       (double)(dxl_now_ns() - t0) >= (double)n * 1e9 / R->rate_per_shard) {
			int len = snprintf(buf, R->size, "fo:%u:%" PRIu64 ":", w->shard, n);
			(void)len;
			uint64_t ts;
			ret = dxl_log_writer_append(wr, buf, R->size, 0, &ts);
			if (ret == DXL_E_AGAIN)
				break;
			if (ret) {
				w->failed++;
				snprintf(w->err, sizeof(w->err), "shard %u: append: %s", w->shard,
					 dxl_errmsg());
				atomic_store(&R->stop, 1);
				break;
			}
			sent[ft++ % fcap] = dxl_now_ns();
			n++;
			w->appended++;
		}
		struct dxl_log_writer_result res[64];
		int k = dxl_log_writer_poll(wr, res, 64, 1);
		uint64_t now = dxl_now_ns();
		struct dxl_log_writer_info in;
		dxl_log_writer_get_info(wr, &in);
		uint64_t kill_ns = atomic_load(&R->kill_ns);
		if (kill_ns && !in.available && !w->broken_ns)
			w->broken_ns = now;
		if (kill_ns && !seen_outage && in.outages != outages0) {
			/* results of this poll came after the reopen: the writer
			 * reopens in one poll and reports in a later pass of it */
			seen_outage = true;
			w->reopen_ns = now;
			w->after = in;
			w->outage_ms_writer = in.last_outage_ms;
			if (!w->broken_ns)
				w->broken_ns = now;
		}
		for (int j = 0; j < k && fh < ft; j++, fh++) {
			if (res[j].status) {
				w->failed++;
				continue;
			}
			uint64_t lat = now - sent[fh % fcap];
			w->acked++;
			dxl_hist_record(&w->lat, lat);
			if (lat > w->max_lat_ns)
				w->max_lat_ns = lat;
			if (!seen_outage)
				w->last_ack_ns = now;
			else if (!atomic_load(&w->first_ack_ns))
				atomic_store(&w->first_ack_ns, now);
		}
		if (k < 0) {
			snprintf(w->err, sizeof(w->err), "shard %u: poll: %s", w->shard, dxl_errmsg());
			break;
		}
	}
	dxl_log_writer_flush(wr, 2000);
out:
	free(buf);
	free(sent);
	dxl_log_writer_delete(&wr);
	dxl_zk_delete(&zk);
	return NULL;
}

/* ---- ZooKeeper's view ------------------------------------------------------------ */

static void on_member(void *arg, enum dxl_member_event ev, uint32_t node_id,
		      const char *payload)
{
	struct run *R = arg;
	uint64_t now = dxl_now_ns();
	if (!atomic_load(&R->kill_ns))
		return;
	pthread_mutex_lock(&R->mu);
	if (ev == DXL_MEMBER_LEAVE && node_id == R->victim && !R->gone_ns)
		R->gone_ns = now;
	if ((ev == DXL_MEMBER_UPDATE || ev == DXL_MEMBER_JOIN) && payload) {
		struct dxl_replica_desc d;
		if (dxl_replica_desc_decode(payload, strlen(payload), &d) == 0 &&
		    d.cfg_epoch > R->epoch0)
			for (uint32_t i = 0; i < R->c.nreplicas; i++)
				if (R->c.ids[i] == node_id && !R->reg_ns[i])
					R->reg_ns[i] = now;
	}
	pthread_mutex_unlock(&R->mu);
}

static void on_config(void *arg, const struct dxl_cluster_config *cfg, int32_t version,
		      int status)
{
	(void)version;
	struct run *R = arg;
	uint64_t now = dxl_now_ns();
	if (status || !cfg)
		return;
	pthread_mutex_lock(&R->mu);
	if (atomic_load(&R->kill_ns) && !R->config_ns && cfg->epoch > R->epoch0) {
		R->config_ns = now;
		R->epoch1 = cfg->epoch;
		R->nshards1 = DXL_MIN(cfg->nshards, (uint32_t)BF_MAX_SHARDS);
		for (uint32_t i = 0; i < R->nshards1; i++)
			R->primary1[i] = cfg->shards[i].primary;
	}
	pthread_mutex_unlock(&R->mu);
}

/* cm_node -- the node id of the elected CM, 0 if unknown */
static uint32_t cm_node(struct dxl_zk *zk)
{
	char *data = NULL;
	if (dxl_election_leader(zk, DXL_ELECTION_CM, &data, NULL))
		return 0;
	json_t *o = json_loads(data, 0, NULL);
	uint32_t id = (uint32_t)json_integer_value(json_object_get(o, "node_id"));
	json_decref(o);
	free(data);
	return id;
}

static double rel_ms(uint64_t t, uint64_t kill)
{
	return t ? bf_ms((int64_t)t - (int64_t)kill) : -1;
}

static json_t *rel_json(uint64_t t, uint64_t kill)
{
	return t ? json_real(rel_ms(t, kill)) : json_null();
}

int bf_cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"rate", required_argument, NULL, 'r'},
		{"size", required_argument, NULL, 'S'},
		{"kill-after-ms", required_argument, NULL, 'k'},
		{"kill-node", required_argument, NULL, 'n'},
		{"after-ms", required_argument, NULL, 'a'},
		{"max-wait-ms", required_argument, NULL, 'm'},
		{"json", required_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = NULL, *json_path = NULL;
	uint64_t rate = 1000, size = 64, kill_after = 2000, after = 1000, max_wait = 30000,
		 victim = 0;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		uint64_t *dst = NULL;
		switch (c) {
		case 'd': dir = optarg; break;
		case 'j': json_path = optarg; break;
		case 'r': dst = &rate; break;
		case 'S': dst = &size; break;
		case 'k': dst = &kill_after; break;
		case 'n': dst = &victim; break;
		case 'a': dst = &after; break;
		case 'm': dst = &max_wait; break;
		case 'h':
			printf("dxl-bench-failover run --dir DIR [--rate N] [--size B] "
			       "[--kill-after-ms MS] [--kill-node N] [--after-ms MS] "
			       "[--max-wait-ms MS] [--json FILE]\n(dxl-bench-failover --help "
			       "explains)\n");
			return 0;
		default: return 2;
		}
		if (dst && dxl_parse_u64(optarg, dst)) {
			fprintf(stderr, "run: '%s' is not a number\n", optarg);
			return 2;
		}
	}
	if (!dir || optind < argc || size < 32 || size > 60000) {
		fprintf(stderr, "run: --dir DIR is required; --size 32..60000 (see --help)\n");
		return 2;
	}
	if (!getenv("DXL_LOG_LEVEL"))
		dxl_log_set_level(DXL_LOG_ERROR);
	static struct run R;
	memset(&R, 0, sizeof(R));
	pthread_mutex_init(&R.mu, NULL);
	if (bf_cluster_read(dir, &R.c))
		return 2;
	struct dxl_zk *zk = NULL;
	if (bf_zk_open(&R.c, &zk))
		return 1;
	struct dxl_cluster_config cfg;
	if (dxl_cluster_config_read(zk, &cfg, NULL)) {
		fprintf(stderr, "run: configuration of %s: %s\n", R.c.cluster, dxl_errmsg());
		dxl_zk_delete(&zk);
		return 1;
	}
	R.epoch0 = cfg.epoch;
	R.nshards = DXL_MIN(cfg.nshards, (uint32_t)BF_MAX_SHARDS);
	uint32_t primary0[BF_MAX_SHARDS];
	for (uint32_t i = 0; i < R.nshards; i++) {
		R.w[i].shard = cfg.shards[i].id;
		primary0[i] = cfg.shards[i].primary;
	}
	dxl_cluster_config_clear(&cfg);
	R.victim = victim ? (uint32_t)victim : primary0[0];
	pid_t vpid = 0;
	for (uint32_t i = 0; i < R.c.nreplicas; i++)
		if (R.c.ids[i] == R.victim)
			vpid = R.c.pids[i];
	if (vpid <= 0 || kill(vpid, 0) != 0) {
		fprintf(stderr, "run: node %u has no running process in %s/cluster.json\n",
			R.victim, dir);
		dxl_zk_delete(&zk);
		return 1;
	}
	R.size = (uint32_t)size;
	R.rate_per_shard = (double)rate / R.nshards;
	uint32_t cm_before = cm_node(zk);
	struct dxl_member_watch *mw = NULL;
	struct dxl_cluster_config_watch *cw = NULL;
	if (dxl_member_watch_new(zk, on_member, &R, &mw) ||
	    dxl_cluster_config_watch_new(zk, on_config, &R, &cw)) {
		fprintf(stderr, "run: watches: %s\n", dxl_errmsg());
		dxl_member_watch_delete(&mw);
		dxl_zk_delete(&zk);
		return 1;
	}
	int rc = 0;
	uint32_t nw = rate ? R.nshards : 0;
	for (uint32_t i = 0; i < nw; i++) {
		R.w[i].R = &R;
		if (pthread_create(&R.w[i].th, NULL, writer_main, &R.w[i])) {
			fprintf(stderr, "run: pthread_create: %s\n", strerror(errno));
			atomic_store(&R.stop, 1);
			nw = i;
			rc = 1;
			break;
		}
	}
	while ((uint32_t)atomic_load(&R.ready) < nw)
		usleep(1000);
	for (uint32_t i = 0; i < nw; i++)
		if (!R.w[i].started)
			rc = 1;
	uint64_t t0 = dxl_now_ns();
	while (!rc && dxl_now_ns() - t0 < kill_after * 1000000ull && !atomic_load(&R.stop))
		usleep(1000);
	struct timespec wall;
	uint64_t kill_ns = 0;
	if (!rc && !atomic_load(&R.stop)) {
		clock_gettime(CLOCK_REALTIME, &wall);
		kill_ns = dxl_now_ns();
		atomic_store(&R.kill_ns, kill_ns);
		if (kill(vpid, SIGKILL)) {
			fprintf(stderr, "run: kill %d: %s\n", (int)vpid, strerror(errno));
			rc = 1;
		}
	}
	/* wait for the failover: every writer acknowledged again (or, without
	 * writers, every survivor registered for the next configuration) */
	uint64_t done_ns = 0;
	while (!rc && !atomic_load(&R.stop) && dxl_now_ns() - kill_ns < max_wait * 1000000ull) {
		bool all = true;
		for (uint32_t i = 0; i < nw; i++)
			all &= atomic_load(&R.w[i].first_ack_ns) != 0;
		if (!nw) {
			pthread_mutex_lock(&R.mu);
			all = R.config_ns != 0;
			for (uint32_t i = 0; i < R.c.nreplicas; i++)
				if (R.c.ids[i] != R.victim)
					all &= R.reg_ns[i] != 0;
			pthread_mutex_unlock(&R.mu);
		}
		if (all) {
			done_ns = dxl_now_ns();
			break;
		}
		usleep(1000);
	}
	if (!rc && !done_ns) {
		fprintf(stderr, "run: no failover within %" PRIu64 " ms of the kill\n", max_wait);
		rc = 1;
	}
	while (done_ns && dxl_now_ns() - done_ns < after * 1000000ull && !atomic_load(&R.stop))
		usleep(1000);
	atomic_store(&R.stop, 1);
	for (uint32_t i = 0; i < nw; i++) {
		pthread_join(R.w[i].th, NULL);
		if (R.w[i].err[0]) {
			fprintf(stderr, "run: %s\n", R.w[i].err);
			rc = 1;
		}
		if (R.w[i].failed)
			rc = 1;
	}
	/* ZooKeeper's view may trail the writers' by a little */
	for (int i = 0; i < 200; i++) {
		pthread_mutex_lock(&R.mu);
		bool have = R.gone_ns && R.config_ns;
		pthread_mutex_unlock(&R.mu);
		if (have || !kill_ns)
			break;
		usleep(10000);
	}
	uint32_t cm_after = cm_node(zk);
	dxl_cluster_config_watch_delete(&cw);
	dxl_member_watch_delete(&mw);
	dxl_zk_delete(&zk);

	/* report */
	json_t *o = json_object();
	json_object_set_new(o, "setup", dxlb_setup_json(argc, argv));
	json_object_set_new(o, "cluster", json_string(R.c.cluster));
	json_object_set_new(o, "session_timeout_ms", json_integer(R.c.session_timeout_ms));
	json_object_set_new(o, "rate", json_integer((json_int_t)rate));
	json_object_set_new(o, "killed_node", json_integer(R.victim));
	json_object_set_new(o, "killed_pid", json_integer(vpid));
	json_object_set_new(o, "kill_wall_ms",
			    kill_ns ? json_real((double)wall.tv_sec * 1e3 + (double)wall.tv_nsec / 1e6)
				    : json_null());
	json_object_set_new(o, "kill_after_ms", json_integer((json_int_t)kill_after));
	json_object_set_new(o, "cm_before", json_integer(cm_before));
	json_object_set_new(o, "cm_after", json_integer(cm_after));
	json_object_set_new(o, "epoch_from", json_integer((json_int_t)R.epoch0));
	json_object_set_new(o, "epoch_to", json_integer((json_int_t)R.epoch1));
	json_object_set_new(o, "node_gone_ms", rel_json(R.gone_ns, kill_ns));
	json_object_set_new(o, "config_ms", rel_json(R.config_ns, kill_ns));
	json_t *reg = json_object();
	uint64_t reg_max = 0;
	for (uint32_t i = 0; i < R.c.nreplicas; i++)
		if (R.c.ids[i] != R.victim) {
			char k[16];
			snprintf(k, sizeof(k), "%u", R.c.ids[i]);
			json_object_set_new(reg, k, rel_json(R.reg_ns[i], kill_ns));
			reg_max = R.reg_ns[i] && R.reg_ns[i] > reg_max ? R.reg_ns[i] : reg_max;
		}
	json_object_set_new(o, "registered_ms", reg);
	json_object_set_new(o, "all_registered_ms", rel_json(reg_max, kill_ns));
	json_t *sh = json_array();
	printf("run %s: T=%u ms, killed node %u (CM %u -> %u), epoch %" PRIu64 " -> %" PRIu64
	       "; node gone %.1f ms, config %.1f ms, survivors registered %.1f ms after the kill\n",
	       R.c.cluster, R.c.session_timeout_ms, R.victim, cm_before, cm_after, R.epoch0,
	       R.epoch1, rel_ms(R.gone_ns, kill_ns), rel_ms(R.config_ns, kill_ns),
	       rel_ms(reg_max, kill_ns));
	for (uint32_t i = 0; i < nw; i++) {
		struct shard_w *w = &R.w[i];
		uint64_t first = atomic_load(&w->first_ack_ns);
		json_t *s = json_object();
		json_object_set_new(s, "shard", json_integer(w->shard));
		json_object_set_new(s, "primary_from", json_integer(w->before.primary));
		json_object_set_new(s, "primary_to", json_integer(w->after.primary));
		json_object_set_new(s, "epoch_to", json_integer((json_int_t)w->after.epoch));
		json_object_set_new(s, "last_ack_ms", rel_json(w->last_ack_ns, kill_ns));
		json_object_set_new(s, "broken_ms", rel_json(w->broken_ns, kill_ns));
		json_object_set_new(s, "reopen_ms", rel_json(w->reopen_ns, kill_ns));
		json_object_set_new(s, "first_ack_ms", rel_json(first, kill_ns));
		json_object_set_new(s, "kill_to_first_ack_ms", rel_json(first, kill_ns));
		json_object_set_new(s, "gap_ms", first && w->last_ack_ns
							 ? json_real(bf_ms((int64_t)(first - w->last_ack_ns)))
							 : json_null());
		json_object_set_new(s, "writer_outage_ms", json_integer((json_int_t)w->outage_ms_writer));
		json_object_set_new(s, "acked", json_integer((json_int_t)w->acked));
		json_object_set_new(s, "failed", json_integer((json_int_t)w->failed));
		json_object_set_new(s, "p50_ms", json_real(bf_ms((int64_t)dxl_hist_pct(&w->lat, 50))));
		json_object_set_new(s, "max_latency_ms", json_real(bf_ms((int64_t)w->max_lat_ns)));
		json_array_append_new(sh, s);
		printf("  shard %u: primary %u -> %u, kill -> first ack %.1f ms, gap %.1f ms "
		       "(writer broke at %.1f, reopened at %.1f), %" PRIu64 " acked, %" PRIu64
		       " failed\n",
		       w->shard, w->before.primary, w->after.primary, rel_ms(first, kill_ns),
		       first && w->last_ack_ns ? bf_ms((int64_t)(first - w->last_ack_ns)) : -1,
		       rel_ms(w->broken_ns, kill_ns), rel_ms(w->reopen_ns, kill_ns), w->acked,
		       w->failed);
		if (!first || w->after.primary == R.victim)
			rc = 1;
	}
	json_object_set_new(o, "shards", sh);
	json_object_set_new(o, "ok", json_boolean(rc == 0));
	if (json_path && json_dump_file(o, json_path, JSON_INDENT(2))) {
		fprintf(stderr, "run: cannot write %s\n", json_path);
		rc = 1;
	}
	json_decref(o);
	pthread_mutex_destroy(&R.mu);
	return rc;
}
