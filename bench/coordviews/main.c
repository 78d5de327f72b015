/* main.c -- dxl-bench-coordviews: a dxl-coord's memory under forced view
 * refreshes (issue 12, defect 4: every refresh used to chain a new view,
 * with its location caches, onto the old ones until the coordinator ended) */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/lib/bench_lib.h"
#include "common/common.h"
#include "dxl/coordproto.h"
#include "dxl/membership.h"

static const char usage[] =
"NAME\n"
"    dxl-bench-coordviews -- a dxl-coord's resident memory under forced\n"
"    configuration refreshes\n"
"\n"
"SYNOPSIS\n"
"    dxl-bench-coordviews run --dir DIR --coord HOST:PORT --pid PID\n"
"                             [--duration S] [--bump-ms MS] [--sample-s S]\n"
"                             [--out FILE]\n"
"    dxl-bench-coordviews [--quick] [--out FILE] [SCRIPT OPTIONS]\n"
"\n"
"DESCRIPTION\n"
"    run: against a cluster of 'dxl cluster up --dir DIR' (table 1 with\n"
"    values of at least 8 bytes) and a dxl-coord serving it on HOST:PORT\n"
"    with process id PID. One connection sends transactions without pause\n"
"    (put then get of keys 0..63 of table 1, inserted first); every\n"
"    --bump-ms (default 200) the configuration's epoch is raised by one\n"
"    (the same configuration, CAS on its znode): every replica registers its\n"
"    regions again (new rkeys), the coordinator's next one-sided access\n"
"    fails and it re-reads the configuration -- a new view, with new\n"
"    location caches, per bump. Every --sample-s (default 10) one line:\n"
"    seconds, the coordinator's VmRSS (/proc/PID/status), its STATS\n"
"    (view_refreshes, views_live, epoch), transactions committed and\n"
"    failed since the start. At the end: the RSS of the first and last\n"
"    samples after the warm-up (the first quarter), their difference and\n"
"    the largest sample; --out writes them and every sample as JSON.\n"
"\n"
"    Without a subcommand: scripts/coord-views.sh (a throw-away ZooKeeper,\n"
"    cluster and dxl-coord; --quick runs 60 s).\n"
"\n"
"EXIT STATUS\n"
"    0 the run completed; 1 it could not run (cluster, coordinator);\n"
"    2 bad usage.\n";

struct cfgc {
	char dir[PATH_MAX], coord[256], out[PATH_MAX];
	pid_t pid;
	unsigned duration_s, bump_ms, sample_s;
};

static volatile sig_atomic_t g_stop;
static atomic_uint_fast64_t g_ok, g_failed;

static void on_sig(int s)
{
	(void)s;
	g_stop = 1;
}

static int tcp_connect(const char *hostport)
{
	char host[256];
	snprintf(host, sizeof(host), "%s", hostport);
	char *colon = strrchr(host, ':');
	if (!colon)
		return -1;
	*colon = 0;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
	if (getaddrinfo(host, colon + 1, &hints, &ai))
		return -1;
	int fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen)) {
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd >= 0) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	return fd;
}

static int write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t k = write(fd, b, n);
		if (k <= 0) {
			if (k < 0 && errno == EINTR)
				continue;
			return -1;
		}
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

/* one reply frame into buf (its body after the length and type words) */
static int read_frame(int fd, uint8_t *buf, size_t cap, size_t *body_len)
{
	uint8_t hdr[4];
	size_t got = 0;
	while (got < 4) {
		ssize_t k = read(fd, hdr + got, 4 - got);
		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	uint32_t len = dxl_cproto_ld32(hdr);
	if (len < 4 || len > cap)
		return -1;
	got = 0;
	while (got < len) {
		ssize_t k = read(fd, buf + got, len - got);
		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	*body_len = len - 4;
	return 0;
}

/* a transaction of one operation; returns its status (or -1: connection) */
static int txn1(int fd, uint8_t op, uint64_t key, int64_t val, uint64_t id)
{
	struct dxl_cproto_buf b = {0};
	uint8_t v[8];
	dxl_cproto_st64(v, (uint64_t)val);
	struct dxl_cproto_op o = {.op = op, .table = 1, .key = key,
				  .value = (op == DXL_CPROTO_OP_PUT || op == DXL_CPROTO_OP_INSERT) ? v : NULL,
				  .len = (op == DXL_CPROTO_OP_PUT || op == DXL_CPROTO_OP_INSERT) ? 8 : 0};
	if (dxl_cproto_encode_txn(&b, id, 0, &o, 1) || write_all(fd, b.p, b.len)) {
		free(b.p);
		return -1;
	}
	free(b.p);
	static __thread uint8_t rep[1 << 16];
	size_t n;
	if (read_frame(fd, rep, sizeof(rep), &n) || n < 4 + 16)
		return -1;
	return (int32_t)dxl_cproto_ld32(rep + 4 + 8);
}

static void *client_main(void *arg)
{
	const struct cfgc *c = arg;
	int fd = tcp_connect(c->coord);
	if (fd < 0) {
		fprintf(stderr, "dxl-bench-coordviews: cannot connect to %s\n", c->coord);
		g_stop = 1;
		return NULL;
	}
	uint64_t id = 1;
	for (uint64_t k = 0; k < 64 && !g_stop; k++)
		txn1(fd, DXL_CPROTO_OP_INSERT, k, 0, id++);
	for (uint64_t i = 0; !g_stop; i++) {
		int st = txn1(fd, (i & 1) ? DXL_CPROTO_OP_GET : DXL_CPROTO_OP_PUT, i % 64, (int64_t)i, id++);
		if (st == -1) {
			fprintf(stderr, "dxl-bench-coordviews: connection to %s lost\n", c->coord);
			g_stop = 1;
			break;
		}
		atomic_fetch_add(st == 0 ? &g_ok : &g_failed, 1);
	}
	close(fd);
	return NULL;
}

static long rss_kb(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long kb = -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = strtol(line + 6, NULL, 10);
	fclose(f);
	return kb;
}

/* STATS of the coordinator: the value of key (-1 if absent) */
static int64_t stat_of(const char *text, const char *key)
{
	size_t kl = strlen(key);
	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, key, kl) && p[kl] == '=')
			return strtoll(p + kl + 1, NULL, 10);
	return -1;
}

static int stats(int fd, char *text, size_t cap)
{
	struct dxl_cproto_buf b = {0};
	static uint64_t id = 1ull << 40;
	if (dxl_cproto_encode_simple(&b, DXL_CPROTO_STATS, id++) || write_all(fd, b.p, b.len)) {
		free(b.p);
		return -1;
	}
	free(b.p);
	static uint8_t rep[1 << 16];
	size_t n;
	if (read_frame(fd, rep, sizeof(rep), &n))
		return -1;
	/* body: prefix (16 + msg) then u32 text_len and the text */
	uint16_t ml = dxl_cproto_ld16(rep + 4 + 12);
	size_t off = 4 + 16 + ml;
	if (off + 4 > n + 4)
		return -1;
	uint32_t tl = dxl_cproto_ld32(rep + off);
	if (off + 4 + tl > n + 4 || tl + 1 > cap)
		return -1;
	memcpy(text, rep + off + 4, tl);
	text[tl] = 0;
	return 0;
}

static int bump(struct dxl_zk *zk)
{
	struct dxl_cluster_config cfg;
	int32_t version = 0;
	int ret = dxl_cluster_config_read(zk, &cfg, &version);
	if (ret)
		return ret;
	cfg.epoch++;
	ret = dxl_cluster_config_cas(zk, &cfg, version, NULL);
	dxl_cluster_config_clear(&cfg);
	return ret;
}

static int cmd_run(int argc, char **argv)
{
	struct cfgc c = {.duration_s = 3600, .bump_ms = 200, .sample_s = 10};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) {
			fprintf(stderr, "dxl-bench-coordviews: %s needs a value\n", a);
			return 2;
		}
		if (!strcmp(a, "--dir"))
			snprintf(c.dir, sizeof(c.dir), "%s", v);
		else if (!strcmp(a, "--coord"))
			snprintf(c.coord, sizeof(c.coord), "%s", v);
		else if (!strcmp(a, "--out"))
			snprintf(c.out, sizeof(c.out), "%s", v);
		else if (!strcmp(a, "--pid"))
			c.pid = (pid_t)atoi(v);
		else if (!strcmp(a, "--duration"))
			c.duration_s = (unsigned)atoi(v);
		else if (!strcmp(a, "--bump-ms"))
			c.bump_ms = (unsigned)atoi(v);
		else if (!strcmp(a, "--sample-s"))
			c.sample_s = (unsigned)atoi(v);
		else {
			fprintf(stderr, "dxl-bench-coordviews: unknown option %s (--help)\n", a);
			return 2;
		}
		i++;
	}
	if (!c.dir[0] || !c.coord[0] || c.pid <= 0 || !c.bump_ms || !c.sample_s) {
		fprintf(stderr, "dxl-bench-coordviews run: --dir, --coord and --pid are needed\n");
		return 2;
	}
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/cluster.json", c.dir);
	json_error_t je;
	json_t *cj = json_load_file(path, 0, &je);
	const char *zkc = cj ? json_string_value(json_object_get(cj, "zk")) : NULL;
	const char *name = cj ? json_string_value(json_object_get(cj, "cluster")) : NULL;
	if (!zkc || !name) {
		fprintf(stderr, "%s: no zk/cluster (%s)\n", path, cj ? "keys" : je.text);
		return 1;
	}
	struct dxl_zk_cfg zc;
	dxl_zk_cfg_init(&zc);
	snprintf(zc.connect, sizeof(zc.connect), "%s", zkc);
	snprintf(zc.cluster, sizeof(zc.cluster), "%s", name);
	struct dxl_zk *zk = NULL;
	if (dxl_zk_new(&zc, &zk)) {
		fprintf(stderr, "zookeeper %s: %s\n", zkc, dxl_errmsg());
		return 1;
	}
	json_decref(cj);
	int sfd = tcp_connect(c.coord);
	if (sfd < 0) {
		fprintf(stderr, "dxl-bench-coordviews: cannot connect to %s\n", c.coord);
		return 1;
	}
	signal(SIGINT, on_sig);
	signal(SIGTERM, on_sig);
	pthread_t th;
	pthread_create(&th, NULL, client_main, &c);
	json_t *samples = json_array();
	uint64_t t0 = dxl_now_ms(), next_bump = t0, next_sample = t0;
	uint64_t bumps = 0, bump_fail = 0;
	long first_rss = -1, last_rss = -1, max_rss = 0;
	int64_t max_views = 0;
	printf("%8s %10s %10s %10s %8s %10s %10s %8s\n", "seconds", "rss_kb", "refreshes",
	       "views_live", "epoch", "committed", "failed", "bumps");
	while (!g_stop) {
		uint64_t now = dxl_now_ms();
		if (now - t0 >= (uint64_t)c.duration_s * 1000)
			break;
		if (now >= next_bump) {
			if (bump(zk))
				bump_fail++;
			else
				bumps++;
			next_bump += c.bump_ms;
		}
		if (now >= next_sample) {
			char text[8192];
			long rss = rss_kb(c.pid);
			if (rss < 0 || stats(sfd, text, sizeof(text))) {
				fprintf(stderr, "dxl-bench-coordviews: coordinator %d gone\n", (int)c.pid);
				g_stop = 1;
				break;
			}
			unsigned secs = (unsigned)((now - t0) / 1000);
			int64_t refr = stat_of(text, "view_refreshes");
			int64_t vl = stat_of(text, "views_live");
			int64_t ep = stat_of(text, "epoch");
			printf("%8u %10ld %10" PRId64 " %10" PRId64 " %8" PRId64 " %10" PRIu64 " %10" PRIu64
			       " %8" PRIu64 "\n",
			       secs, rss, refr, vl, ep, (uint64_t)atomic_load(&g_ok),
			       (uint64_t)atomic_load(&g_failed), bumps);
			fflush(stdout);
			json_array_append_new(samples,
					      json_pack("{sIsIsIsIsIsIsI}", "seconds", (json_int_t)secs,
							"rss_kb", (json_int_t)rss, "view_refreshes",
							(json_int_t)refr, "views_live", (json_int_t)vl,
							"epoch", (json_int_t)ep, "committed",
							(json_int_t)atomic_load(&g_ok), "failed",
							(json_int_t)atomic_load(&g_failed)));
			if (secs >= c.duration_s / 4 && first_rss < 0)
				first_rss = rss;
			last_rss = rss;
			max_rss = DXL_MAX(max_rss, rss);
			max_views = DXL_MAX(max_views, vl);
			next_sample += (uint64_t)c.sample_s * 1000;
		}
		usleep(5000);
	}
	g_stop = 1;
	pthread_join(th, NULL);
	close(sfd);
	if (first_rss < 0)
		first_rss = last_rss;
	printf("bumps %" PRIu64 " (%" PRIu64 " failed CAS), rss after warm-up %ld kB, at the end %ld kB "
	       "(%+ld kB), largest %ld kB, largest views_live %" PRId64 "\n",
	       bumps, bump_fail, first_rss, last_rss, last_rss - first_rss, max_rss, max_views);
	if (c.out[0]) {
		json_t *o = json_pack("{sosIsIsIsIsIsIsIsIso}", "setup", dxlb_setup_json(argc, argv),
				      "duration_s", (json_int_t)c.duration_s, "bump_ms",
				      (json_int_t)c.bump_ms, "bumps", (json_int_t)bumps,
				      "rss_after_warmup_kb", (json_int_t)first_rss, "rss_end_kb",
				      (json_int_t)last_rss, "rss_growth_kb",
				      (json_int_t)(last_rss - first_rss), "rss_max_kb",
				      (json_int_t)max_rss, "views_live_max", (json_int_t)max_views,
				      "samples", samples);
		if (json_dump_file(o, c.out, JSON_INDENT(1)))
			fprintf(stderr, "dxl-bench-coordviews: cannot write %s\n", c.out);
		json_decref(o);
	} else {
		json_decref(samples);
	}
	dxl_zk_delete(&zk);
	return 0;
}

/* without a subcommand: scripts/coord-views.sh with the tools next to this binary */
static int run_script(int argc, char **argv)
{
	char script[PATH_MAX + 64], self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = 0;
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = 0;
	const char *sd = getenv("DXL_SCRIPTS");
	if (sd)
		snprintf(script, sizeof(script), "%s/coord-views.sh", sd);
	else
		snprintf(script, sizeof(script), "%s/../../scripts/coord-views.sh", self);
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
	fprintf(stderr, "exec bash %s: %s\n", script, strerror(errno));
	free(av);
	return 1;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			fputs(usage, stdout);
			return 0;
		}
	if (argc >= 2 && !strcmp(argv[1], "run"))
		return cmd_run(argc - 1, argv + 1);
	if (argc >= 2 && argv[1][0] != '-') {
		fprintf(stderr, "dxl-bench-coordviews: unknown command '%s' (--help)\n", argv[1]);
		return 2;
	}
	return run_script(argc, argv);
}
