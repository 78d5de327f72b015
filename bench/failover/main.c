/* main.c -- dxl-bench-failover: failover time and tail lag of a local
 * cluster (docs/operations.md, "Failover and tail lag: measurements") */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/failover/bench_failover.h"
#include "common/common.h"

static const char usage[] =
"NAME\n"
"    dxl-bench-failover -- failover time and tail lag of a local dxl cluster\n"
"\n"
"SYNOPSIS\n"
"    dxl-bench-failover run --dir DIR [--rate N] [--kill-after-ms MS] ...\n"
"    dxl-bench-failover taillag --dir DIR [--rates LIST] [--duration-ms MS] ...\n"
"    dxl-bench-failover [--quick] [--out FILE] [--csv] [SCRIPT OPTIONS]\n"
"\n"
"DESCRIPTION\n"
"    The measurements run against a cluster started with 'dxl cluster up\n"
"    --dir DIR'; scripts/bench-failover.sh starts the clusters, repeats the\n"
"    runs and summarises them. Without a subcommand this program runs that\n"
"    script (found at ../../scripts from this binary, or in $DXL_SCRIPTS)\n"
"    with the given options and --bin <this binary's folder>: the form\n"
"    'make bench' (scripts/run-bench.sh) uses.\n"
"\n"
"    run      one failover: one writer per shard (dxl_log_writer, each in its\n"
"             own thread and ZooKeeper session) appends --rate records/s in\n"
"             total; after --kill-after-ms the primary of shard 0 (or\n"
"             --kill-node) gets SIGKILL. Measured from the kill, per shard:\n"
"             the last acknowledgement before the outage, the writer's break\n"
"             and reopen, the first acknowledgement after it (kill ->\n"
"             first ack) and the gap (last ack before -> first ack after,\n"
"             what 'dxl log load' reports as gap_ms); and from ZooKeeper's\n"
"             watches: when the killed node's registration vanished\n"
"             (session expiry), when the CM committed the next\n"
"             configuration, when each survivor re-registered its regions\n"
"             for it. With --rate 0 it only kills and watches (the load\n"
"             comes from elsewhere, e.g. 'dxl log load').\n"
"      --dir DIR            the directory of 'dxl cluster up' (required)\n"
"      --rate N             appends/s over all shards (1000; 0 = no writers)\n"
"      --size B             payload bytes (64)\n"
"      --kill-after-ms MS   when to kill, from the writers' start (2000)\n"
"      --kill-node N        the node to kill (the primary of shard 0)\n"
"      --after-ms MS        keep appending this long after the last shard's\n"
"                           first acknowledgement (1000)\n"
"      --max-wait-ms MS     give up waiting for the failover (30000)\n"
"      --json FILE          the result as JSON\n"
"\n"
"    taillag  end-to-end lag of change capture: one writer appends to a shard\n"
"             at each rate of --rates for --duration-ms while a tailer on\n"
"             the shard's primary (dxl_tailer, another thread of this\n"
"             process) polls back to back; per record: acknowledged ->\n"
"             delivered, and appended -> delivered (CLOCK_MONOTONIC of this\n"
"             process), and from the record's intended start (the rate's\n"
"             schedule: a stall and the backlog behind it count) to its\n"
"             acknowledgement and delivery, and how late it was sent\n"
"             (intended_to_ack_ms, intended_to_deliver_ms, send_lag_ms).\n"
"             p50/p90/p99/p99.9/max per rate, nearest rank, null from too\n"
"             few samples (p99 needs 1 000, p99.9 10 000).\n"
"      --dir DIR            the directory of 'dxl cluster up' (required)\n"
"      --shard S            the shard (0)\n"
"      --rates LIST         appends/s, e.g. 10,100,1000,5000 (10,100,1000)\n"
"      --duration-ms MS     per rate (5000)\n"
"      --size B             payload bytes (64)\n"
"      --heartbeat-ms MS    the writer's idle heartbeat period (100, the\n"
"                           default of dxl_log_writer_cfg)\n"
"      --poll-us US         the tailer sleeps this long after a poll that\n"
"                           delivered nothing (0: polls back to back)\n""      --window BYTES       the tailer's READ window per ring per poll\n"
"                           (dxl_tail_cfg.window; default 256K)\n""      --dump FILE          per record: rate, n, appended, acknowledged,\n"
"                           delivered (ms from the rate's first append)\n"
"      --json FILE          the result as JSON\n"
"\n"
"EXAMPLES\n"
"    dxl cluster up --dir /tmp/c --session-timeout 1000\n"
"    dxl-bench-failover run --dir /tmp/c --json /tmp/run.json\n"
"    dxl-bench-failover --runs 20 --timeouts 1000,2000 --out results/failover.json --csv\n"
"    dxl-bench-failover --quick --out results/failover.json\n";

/* ---- shared helpers ---------------------------------------------------------- */

int bf_cluster_read(const char *dir, struct bf_cluster *c)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/cluster.json", dir);
	json_error_t je;
	json_t *o = json_load_file(path, 0, &je);
	if (!o) {
		fprintf(stderr, "%s: %s (start the cluster with 'dxl cluster up --dir %s')\n",
			path, je.text, dir);
		return -1;
	}
	memset(c, 0, sizeof(*c));
	const char *zk = json_string_value(json_object_get(o, "zk"));
	const char *cl = json_string_value(json_object_get(o, "cluster"));
	if (!zk || !cl) {
		fprintf(stderr, "%s: no \"zk\" or \"cluster\"\n", path);
		json_decref(o);
		return -1;
	}
	snprintf(c->zk, sizeof(c->zk), "%s", zk);
	snprintf(c->cluster, sizeof(c->cluster), "%s", cl);
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(o, "replicas"), i, r) {
		if (c->nreplicas == BF_MAX_REPLICAS)
			break;
		c->ids[c->nreplicas] = (uint32_t)json_integer_value(json_object_get(r, "id"));
		c->pids[c->nreplicas] = (pid_t)json_integer_value(json_object_get(r, "pid"));
		c->nreplicas++;
	}
	json_array_foreach(json_object_get(o, "replica_opts"), i, r) {
		const char *s = json_string_value(r);
		static const char key[] = "zk.session_timeout_ms=";
		if (s && !strncmp(s, key, sizeof(key) - 1))
			c->session_timeout_ms = (uint32_t)strtoul(s + sizeof(key) - 1, NULL, 10);
	}
	json_decref(o);
	return 0;
}

int bf_zk_open(const struct bf_cluster *c, struct dxl_zk **zk)
{
	struct dxl_zk_cfg zc;
	dxl_zk_cfg_init(&zc);
	snprintf(zc.connect, sizeof(zc.connect), "%s", c->zk);
	snprintf(zc.cluster, sizeof(zc.cluster), "%s", c->cluster);
	zc.connect_timeout_ms = 5000;
	if (dxl_zk_new(&zc, zk)) {
		fprintf(stderr, "zookeeper %s: %s\n", c->zk, dxl_errmsg());
		return -1;
	}
	return 0;
}

int bf_parse_list(const char *s, uint32_t *v, uint32_t cap, uint32_t *n)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", s);
	*n = 0;
	char *save = NULL;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		uint64_t x;
		if (*n == cap || dxl_parse_u64(t, &x) || x == 0 || x > UINT32_MAX)
			return -1;
		v[(*n)++] = (uint32_t)x;
	}
	return *n ? 0 : -1;
}

/* ---- without a subcommand: the script ----------------------------------------- */

static int run_script(int argc, char **argv)
{
	char script[PATH_MAX + 64], self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0) {
		fprintf(stderr, "dxl-bench-failover: /proc/self/exe: %s\n", strerror(errno));
		return 1;
	}
	self[n] = 0;
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = 0;
	const char *sd = getenv("DXL_SCRIPTS");
	if (sd)
		snprintf(script, sizeof(script), "%s/bench-failover.sh", sd);
	else
		snprintf(script, sizeof(script), "%s/../../scripts/bench-failover.sh", self);
	if (access(script, R_OK) != 0) {
		fprintf(stderr, "dxl-bench-failover: %s: %s (set DXL_SCRIPTS to the scripts "
			"folder)\n", script, strerror(errno));
		return 1;
	}
	/* the tools next to this binary (build/bin, build/asan/bin, ...); a
	 * --bin given by the caller comes later and wins */
	char **av = calloc((size_t)argc + 5, sizeof(*av));
	if (!av)
		return 1;
	av[0] = "bash";
	av[1] = script;
	av[2] = "--bin";
	av[3] = self;
	for (int i = 1; i < argc; i++)
		av[i + 3] = argv[i];
	fflush(NULL);
	execvp("bash", av);
	fprintf(stderr, "dxl-bench-failover: exec bash %s: %s\n", script, strerror(errno));
	free(av);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "run"))
		return bf_cmd_run(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "taillag"))
		return bf_cmd_taillag(argc - 1, argv + 1);
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			fputs(usage, stdout);
			printf("\nSCRIPT OPTIONS (scripts/bench-failover.sh --help):\n"
			       "    --runs N --timeouts LIST --driver bench|load|both --rate N\n"
			       "    --taillag-rates LIST --quick --out FILE --csv\n");
			return 0;
		}
	return run_script(argc, argv);
}
