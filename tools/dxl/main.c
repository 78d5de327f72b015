/* main.c -- dxl: the command-line tool (docs/cli.md). Subcommands:
 * cluster up|status|down, log append, tail. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/log.h"
#include "dxl/membership.h"
#include "dxl/replica.h"

/* exit codes (docs/cli.md, and every --help) */
enum {
	EX_OK = 0,
	EX_FAIL = 1,    /* the operation failed (append not acknowledged, a
			   replica did not start, a replica is down...) */
	EX_USAGE = 2,   /* bad command line */
	EX_CLUSTER = 3, /* the cluster does not have what was asked: no
			   cluster.json, no configuration, unknown shard,
			   replica not registered */
	EX_ZK = 4,      /* ZooKeeper unreachable */
};

#define EXIT_CODES_HELP                                                      \
	"EXIT STATUS\n"                                                      \
	"    0  success\n"                                                   \
	"    1  the operation failed (see the message)\n"                    \
	"    2  bad command line\n"                                          \
	"    3  the cluster lacks what was asked (no DIR/cluster.json, no\n" \
	"       configuration, unknown shard, replica not registered)\n"     \
	"    4  ZooKeeper unreachable\n"

static const char *g_cmd = "dxl"; /* "dxl log append" etc., for messages */

static void errf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void errf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", g_cmd);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ---- small helpers -------------------------------------------------------- */

static char g_self_dir[PATH_MAX];

static void find_self(void)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0) {
		snprintf(g_self_dir, sizeof(g_self_dir), ".");
		return;
	}
	self[n] = 0;
	snprintf(g_self_dir, sizeof(g_self_dir), "%s", dirname(self));
}

static int mkdir_p(const char *path)
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			if (mkdir(tmp, 0755) && errno != EEXIST)
				return -1;
			*p = '/';
		}
	if (mkdir(tmp, 0755) && errno != EEXIST)
		return -1;
	return 0;
}

static int parse_u32(const char *s, uint32_t *out)
{
	uint64_t v;
	if (dxl_parse_u64(s, &v) || v > UINT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* pid_alive -- the process exists and is not a zombie */
static bool pid_alive(pid_t pid)
{
	if (pid <= 0 || kill(pid, 0) != 0)
		return false;
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

/* is_replica -- pid runs dxl-replica (guards against pid reuse) */
static bool is_replica(pid_t pid)
{
	char path[64], buf[PATH_MAX];
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *b = strrchr(buf, '/');
	return strcmp(b ? b + 1 : buf, "dxl-replica") == 0;
}

/* ---- where the cluster is -------------------------------------------------- */

#define MAX_REPLICAS DXL_CONFIG_MAX_REPLICAS

struct conn {
	char zk[DXL_ZK_CONNECT_MAX];
	char cluster[DXL_ZK_CLUSTER_MAX];
};

struct state {                  /* DIR/cluster.json */
	struct conn c;
	char zk_dir[PATH_MAX + 8]; /* "" when the ZooKeeper is not ours */
	uint32_t nreplicas, nshards;
	uint32_t ids[MAX_REPLICAS];
	pid_t pids[MAX_REPLICAS];
};

static int state_write(const char *dir, const struct state *s)
{
	json_t *reps = json_array();
	for (uint32_t i = 0; i < s->nreplicas; i++) {
		char log[PATH_MAX + 64], data[PATH_MAX + 64];
		snprintf(log, sizeof(log), "%s/logs/replica-%u.log", dir, s->ids[i]);
		snprintf(data, sizeof(data), "%s/data/%u", dir, s->ids[i]);
		json_array_append_new(reps, json_pack("{s:i,s:i,s:s,s:s}", "id",
						      (json_int_t)s->ids[i], "pid",
						      (json_int_t)s->pids[i], "log", log,
						      "data", data));
	}
	json_t *o = json_pack("{s:i,s:s,s:s,s:s?,s:i,s:o}", "format", 1, "cluster",
			      s->c.cluster, "zk", s->c.zk, "zk_dir",
			      s->zk_dir[0] ? s->zk_dir : NULL, "shards",
			      (json_int_t)s->nshards, "replicas", reps);
	char path[PATH_MAX + 32], tmp[PATH_MAX + 40];
	snprintf(path, sizeof(path), "%s/cluster.json", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int ret = o ? json_dump_file(o, tmp, JSON_INDENT(2)) : -1;
	json_decref(o);
	if (ret || rename(tmp, path)) {
		errf("cannot write %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* state_read -- DIR/cluster.json; EX_CLUSTER with a message if absent/bad */
static int state_read(const char *dir, struct state *s)
{
	memset(s, 0, sizeof(*s));
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/cluster.json", dir);
	json_error_t je;
	json_t *o = json_load_file(path, 0, &je);
	if (!o) {
		if (access(path, F_OK) != 0)
			errf("%s not found: no cluster started with 'dxl cluster up --dir %s' "
			     "(or give --zk CONNECT --cluster NAME)", path, dir);
		else
			errf("%s: line %d: %s", path, je.line, je.text);
		return EX_CLUSTER;
	}
	const char *cl = NULL, *zk = NULL, *zd = NULL;
	json_t *reps = NULL, *zdj = NULL;
	json_int_t ns = 0;
	if (json_unpack_ex(o, &je, 0, "{s:s,s:s,s?o,s:I,s:o}", "cluster", &cl, "zk",
			   &zk, "zk_dir", &zdj, "shards", &ns, "replicas", &reps) ||
	    !json_is_array(reps) || json_array_size(reps) > MAX_REPLICAS) {
		errf("%s: not a dxl cluster file (%s)", path, je.text);
		json_decref(o);
		return EX_CLUSTER;
	}
	if (json_is_string(zdj))
		zd = json_string_value(zdj);
	snprintf(s->c.cluster, sizeof(s->c.cluster), "%s", cl);
	snprintf(s->c.zk, sizeof(s->c.zk), "%s", zk);
	snprintf(s->zk_dir, sizeof(s->zk_dir), "%s", zd ? zd : "");
	s->nshards = (uint32_t)ns;
	size_t i;
	json_t *r;
	json_array_foreach(reps, i, r) {
		json_int_t id = 0, pid = 0;
		json_unpack(r, "{s:I,s:I}", "id", &id, "pid", &pid);
		s->ids[i] = (uint32_t)id;
		s->pids[i] = (pid_t)pid;
	}
	s->nreplicas = (uint32_t)json_array_size(reps);
	json_decref(o);
	return 0;
}

/* resolve_conn -- --zk/--cluster if given, else DIR/cluster.json */
static int resolve_conn(const char *dir, const char *zk, const char *cluster,
			struct conn *c)
{
	if (zk) {
		snprintf(c->zk, sizeof(c->zk), "%s", zk);
		snprintf(c->cluster, sizeof(c->cluster), "%s", cluster ? cluster : "default");
		return 0;
	}
	if (cluster) {
		errf("--cluster needs --zk CONNECT (without --zk the cluster is read from DIR/cluster.json)");
		return EX_USAGE;
	}
	struct state s;
	int ret = state_read(dir, &s);
	if (!ret)
		*c = s.c;
	return ret;
}

static int zk_connect(const struct conn *c, struct dxl_zk **zk)
{
	struct dxl_zk_cfg zc;
	dxl_zk_cfg_init(&zc);
	snprintf(zc.connect, sizeof(zc.connect), "%s", c->zk);
	snprintf(zc.cluster, sizeof(zc.cluster), "%s", c->cluster);
	zc.connect_timeout_ms = 5000;
	int ret = dxl_zk_new(&zc, zk);
	if (ret) {
		errf("cannot connect to ZooKeeper %s (cluster %s): %s", c->zk, c->cluster,
		     dxl_errmsg());
		return ret == DXL_E_UNAVAIL ? EX_ZK : (ret == DXL_E_INVAL ? EX_USAGE : EX_FAIL);
	}
	return 0;
}

/* ---- the cluster configuration of a shard ---------------------------------- */

struct shard_view {
	uint32_t n; /* replicas, primary first */
	uint32_t ids[MAX_REPLICAS];
	uint64_t epoch;
};

static void shard_list(const struct dxl_cluster_config *cfg, char *buf, size_t cap)
{
	size_t o = 0;
	buf[0] = 0;
	for (uint32_t i = 0; i < cfg->nshards && o + 12 < cap; i++)
		o += (size_t)snprintf(buf + o, cap - o, "%s%u", i ? "," : "", cfg->shards[i].id);
}

static int shard_view(struct dxl_zk *zk, const struct conn *c, uint32_t shard,
		      struct shard_view *v)
{
	struct dxl_cluster_config cfg;
	int ret = dxl_cluster_config_read(zk, &cfg, NULL);
	if (ret == DXL_E_NOENT) {
		errf("cluster %s has no configuration in ZooKeeper %s (is it up? see 'dxl cluster up')",
		     c->cluster, c->zk);
		return EX_CLUSTER;
	}
	if (ret) {
		errf("reading the configuration of cluster %s: %s", c->cluster, dxl_errmsg());
		return ret == DXL_E_UNAVAIL ? EX_ZK : EX_FAIL;
	}
	const struct dxl_cluster_shard *s = dxl_cluster_config_shard(&cfg, shard);
	if (!s) {
		char list[256];
		shard_list(&cfg, list, sizeof(list));
		errf("unknown shard %u: cluster %s (config epoch %llu) has shards %s", shard,
		     c->cluster, (unsigned long long)cfg.epoch, list);
		dxl_cluster_config_clear(&cfg);
		return EX_CLUSTER;
	}
	v->n = 0;
	v->ids[v->n++] = s->primary;
	for (uint32_t i = 0; i < s->nbackups; i++)
		v->ids[v->n++] = s->backups[i];
	v->epoch = cfg.epoch;
	dxl_cluster_config_clear(&cfg);
	return 0;
}

/* get_desc -- the decoded nodes/<id> of a replica; 1 if not registered */
static int get_desc(struct dxl_zk *zk, uint32_t id, struct dxl_replica_desc *d)
{
	char *json = NULL;
	int ret = dxl_member_get(zk, id, &json, NULL);
	if (ret == DXL_E_NOENT)
		return 1;
	if (ret) {
		errf("reading nodes/%u: %s", id, dxl_errmsg());
		return -1;
	}
	ret = dxl_replica_desc_decode(json, strlen(json), d);
	free(json);
	if (ret) {
		errf("nodes/%u is not a replica descriptor: %s", id, dxl_errmsg());
		return -1;
	}
	return 0;
}

/* ---- dxl cluster up ------------------------------------------------------- */

static void up_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl cluster up [--dir DIR] [--replicas N] [--shards S] [--zk CONNECT]\n"
"                      [--cluster NAME] [--provider tcp] [--durability MODE]\n"
"                      [--ring-size BYTES] [--writer-slots W]\n"
"\n"
"Start a local cluster: N dxl-replica processes (node ids 1..N) each hosting\n"
"shards 0..S-1 (static placement: every shard on every replica, replica 1\n"
"primary), registered in ZooKeeper, and the cluster configuration in\n"
"/dxl/NAME/config (created, or replaced with the next epoch).\n"
"\n"
"  --dir DIR          state directory [./dxl-cluster]: DIR/cluster.json (pids,\n"
"                     connect string), DIR/logs/replica-<id>.log, DIR/data/<id>,\n"
"                     DIR/zk (the ZooKeeper started here, if any)\n"
"  --replicas N       replicas, 1..%d [3]\n"
"  --shards S         shards, 1..%d [2]\n"
"  --zk CONNECT       use this ZooKeeper; without it a standalone one is started\n"
"                     with scripts/zk.sh (found at ../../scripts from the dxl\n"
"                     binary, or in $DXL_SCRIPTS)\n"
"  --cluster NAME     cluster name in ZooKeeper [default]\n"
"  --provider P       fabric provider of the replicas [tcp]\n"
"  --durability MODE  pmem | msync | process [process]\n"
"  --ring-size BYTES  log.ring_size of new shards (e.g. 256K) [1M]\n"
"  --writer-slots W   log.writer_slots of new shards [16]\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP, MAX_REPLICAS, DXL_REPLICA_MAX_SHARDS);
}

static pid_t spawn_replica(const char *dir, const struct state *s, uint32_t id,
			   const char *provider, const char *durability,
			   const char *ring_size, const char *slots)
{
	char bin[PATH_MAX + 16], data[PATH_MAX + 32], log[PATH_MAX + 64], nid[16],
		shards[32], rs[64], ws[64];
	snprintf(bin, sizeof(bin), "%s/dxl-replica", g_self_dir);
	snprintf(data, sizeof(data), "%s/data/%u", dir, id);
	snprintf(log, sizeof(log), "%s/logs/replica-%u.log", dir, id);
	snprintf(nid, sizeof(nid), "%u", id);
	if (s->nshards == 1)
		snprintf(shards, sizeof(shards), "0");
	else
		snprintf(shards, sizeof(shards), "0-%u", s->nshards - 1);
	const char *argv[32];
	int a = 0;
	argv[a++] = bin;
	argv[a++] = "--node-id";
	argv[a++] = nid;
	argv[a++] = "--data-dir";
	argv[a++] = data;
	argv[a++] = "--zk";
	argv[a++] = s->c.zk;
	argv[a++] = "--cluster";
	argv[a++] = s->c.cluster;
	argv[a++] = "--provider";
	argv[a++] = provider;
	argv[a++] = "--durability";
	argv[a++] = durability;
	argv[a++] = "--shards";
	argv[a++] = shards;
	if (ring_size) {
		snprintf(rs, sizeof(rs), "log.ring_size=%s", ring_size);
		argv[a++] = "-o";
		argv[a++] = rs;
	}
	if (slots) {
		snprintf(ws, sizeof(ws), "log.writer_slots=%s", slots);
		argv[a++] = "-o";
		argv[a++] = ws;
	}
	argv[a] = NULL;
	if (access(bin, X_OK) != 0) {
		errf("%s: %s (build it with make)", bin, strerror(errno));
		return -1;
	}
	int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		errf("%s: %s", log, strerror(errno));
		return -1;
	}
	fflush(NULL);
	pid_t p = fork();
	if (p < 0) {
		errf("fork: %s", strerror(errno));
		close(fd);
		return -1;
	}
	if (p == 0) {
		setsid();
		int nul = open("/dev/null", O_RDONLY);
		if (nul >= 0)
			dup2(nul, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	close(fd);
	return p;
}

/* start_zk -- scripts/zk.sh start DIR/zk; the connect string into c->zk */
static int start_zk(struct state *s, const char *dir)
{
	char script[PATH_MAX + 32];
	const char *sd = getenv("DXL_SCRIPTS");
	if (sd)
		snprintf(script, sizeof(script), "%s/zk.sh", sd);
	else
		snprintf(script, sizeof(script), "%s/../../scripts/zk.sh", g_self_dir);
	if (access(script, X_OK) != 0) {
		errf("cannot start ZooKeeper: %s: %s (set DXL_SCRIPTS to the scripts "
		     "directory, or give --zk CONNECT)", script, strerror(errno));
		return EX_FAIL;
	}
	snprintf(s->zk_dir, sizeof(s->zk_dir), "%s/zk", dir);
	char cmd[4 * PATH_MAX + 64];
	snprintf(cmd, sizeof(cmd), "'%s' start '%s' 2>>'%s/logs/zk.log'", script,
		 s->zk_dir, dir);
	FILE *p = popen(cmd, "r");
	if (!p) {
		errf("popen %s: %s", script, strerror(errno));
		return EX_FAIL;
	}
	char line[DXL_ZK_CONNECT_MAX] = "";
	while (fgets(line, sizeof(line), p))
		snprintf(s->c.zk, sizeof(s->c.zk), "%s", line);
	int st = pclose(p);
	s->c.zk[strcspn(s->c.zk, "\n")] = 0;
	if (st != 0 || !s->c.zk[0]) {
		errf("ZooKeeper did not start (%s start %s); see %s/logs/zk.log", script,
		     s->zk_dir, dir);
		return EX_FAIL;
	}
	return 0;
}

static void log_tail(const char *dir, uint32_t id)
{
	char path[PATH_MAX + 64], cmd[PATH_MAX + 96];
	snprintf(path, sizeof(path), "%s/logs/replica-%u.log", dir, id);
	fprintf(stderr, "--- last lines of %s ---\n", path);
	snprintf(cmd, sizeof(cmd), "tail -n 5 '%s' >&2", path);
	if (system(cmd) != 0)
		fprintf(stderr, "(unreadable)\n");
}

static int write_config(struct dxl_zk *zk, const struct state *s,
			const struct dxl_replica_desc *d, uint64_t *epoch)
{
	for (int attempt = 0; attempt < 3; attempt++) {
		struct dxl_cluster_config old, cfg;
		int32_t ver = DXL_ZK_VERSION_NONE;
		uint64_t e = 1;
		int ret = dxl_cluster_config_read(zk, &old, &ver);
		if (ret == 0) {
			e = old.epoch + 1;
			dxl_cluster_config_clear(&old);
		} else if (ret == DXL_E_NOENT) {
			ver = DXL_ZK_VERSION_NONE;
			ret = 0;
		} else {
			return ret;
		}
		dxl_cluster_config_init(&cfg);
		cfg.epoch = e;
		for (uint32_t i = 0; !ret && i < s->nreplicas; i++)
			ret = dxl_cluster_config_set_node(&cfg, s->ids[i], d[i].addr);
		for (uint32_t sh = 0; !ret && sh < s->nshards; sh++)
			ret = dxl_cluster_config_set_shard(&cfg, sh, s->ids[0], s->ids + 1,
							   s->nreplicas - 1);
		if (!ret)
			ret = dxl_cluster_config_cas(zk, &cfg, ver, NULL);
		dxl_cluster_config_clear(&cfg);
		if (ret != DXL_E_STALE) {
			*epoch = e;
			return ret;
		}
	}
	return DXL_E_STALE;
}

static int cmd_cluster_up(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"replicas", required_argument, NULL, 'r'},
		{"shards", required_argument, NULL, 's'},
		{"zk", required_argument, NULL, 'z'},
		{"cluster", required_argument, NULL, 'C'},
		{"provider", required_argument, NULL, 'p'},
		{"durability", required_argument, NULL, 'D'},
		{"ring-size", required_argument, NULL, 'R'},
		{"writer-slots", required_argument, NULL, 'W'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir0 = "./dxl-cluster", *zkc = NULL, *cluster = "default";
	const char *provider = "tcp", *durability = "process", *ring_size = NULL,
		   *slots = NULL;
	uint32_t n = 3, ns = 2;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir0 = optarg; break;
		case 'r':
			if (parse_u32(optarg, &n) || n < 1 || n > MAX_REPLICAS) {
				errf("--replicas '%s': want 1..%d", optarg, MAX_REPLICAS);
				return EX_USAGE;
			}
			break;
		case 's':
			if (parse_u32(optarg, &ns) || ns < 1 || ns > DXL_REPLICA_MAX_SHARDS) {
				errf("--shards '%s': want 1..%d", optarg, DXL_REPLICA_MAX_SHARDS);
				return EX_USAGE;
			}
			break;
		case 'z': zkc = optarg; break;
		case 'C': cluster = optarg; break;
		case 'p': {
			enum dxl_fabric_provider p;
			if (dxl_fabric_provider_parse(optarg, &p)) {
				errf("--provider '%s': %s", optarg, dxl_errmsg());
				return EX_USAGE;
			}
			provider = optarg;
			break;
		}
		case 'D': {
			enum dxl_durability dm;
			if (dxl_durability_parse(optarg, &dm)) {
				errf("--durability '%s': want pmem, msync or process", optarg);
				return EX_USAGE;
			}
			durability = optarg;
			break;
		}
		case 'R': {
			uint64_t v;
			if (dxl_parse_size(optarg, &v)) {
				errf("--ring-size '%s': not a size (e.g. 256K, 1M)", optarg);
				return EX_USAGE;
			}
			ring_size = optarg;
			break;
		}
		case 'W': {
			uint32_t v;
			if (parse_u32(optarg, &v) || !v || v > DXL_SHARD_MAX_RINGS) {
				errf("--writer-slots '%s': want 1..%d", optarg, DXL_SHARD_MAX_RINGS);
				return EX_USAGE;
			}
			slots = optarg;
			break;
		}
		case 'h': up_usage(stdout); return EX_OK;
		default: up_usage(stderr); return EX_USAGE;
		}
	}
	if (optind < argc) {
		errf("unexpected argument '%s' (see --help)", argv[optind]);
		return EX_USAGE;
	}
	char dir[PATH_MAX], sub[PATH_MAX + 16];
	if (mkdir_p(dir0) || !realpath(dir0, dir)) {
		errf("cannot create %s: %s", dir0, strerror(errno));
		return EX_FAIL;
	}
	struct state s;
	{
		char path[PATH_MAX + 32];
		snprintf(path, sizeof(path), "%s/cluster.json", dir);
		if (access(path, F_OK) == 0 && state_read(dir, &s) == 0)
			for (uint32_t i = 0; i < s.nreplicas; i++)
				if (pid_alive(s.pids[i]) && is_replica(s.pids[i])) {
					errf("a cluster is already running from %s (replica %u, pid %d); "
					     "run 'dxl cluster down --dir %s' first", dir, s.ids[i],
					     (int)s.pids[i], dir);
					return EX_FAIL;
				}
	}
	snprintf(sub, sizeof(sub), "%s/logs", dir);
	mkdir_p(sub);
	snprintf(sub, sizeof(sub), "%s/data", dir);
	mkdir_p(sub);
	memset(&s, 0, sizeof(s));
	snprintf(s.c.cluster, sizeof(s.c.cluster), "%s", cluster);
	s.nshards = ns;
	s.nreplicas = n;
	int ret;
	if (zkc)
		snprintf(s.c.zk, sizeof(s.c.zk), "%s", zkc);
	else if ((ret = start_zk(&s, dir)))
		return ret;
	for (uint32_t i = 0; i < n; i++) {
		s.ids[i] = i + 1;
		s.pids[i] = spawn_replica(dir, &s, i + 1, provider, durability, ring_size, slots);
		if (s.pids[i] < 0) {
			s.nreplicas = i;
			state_write(dir, &s);
			return EX_FAIL;
		}
	}
	if (state_write(dir, &s))
		return EX_FAIL;

	struct dxl_zk *zk = NULL;
	if ((ret = zk_connect(&s.c, &zk)))
		return ret;
	/* wait (bounded) until every replica is registered */
	static struct dxl_replica_desc d[MAX_REPLICAS];
	bool have[MAX_REPLICAS] = {false};
	uint32_t got = 0;
	uint64_t end = dxl_now_ms() + 30000;
	ret = EX_OK;
	while (got < n) {
		for (uint32_t i = 0; i < n; i++) {
			if (have[i])
				continue;
			int r = get_desc(zk, s.ids[i], &d[i]);
			if (r == 0) {
				have[i] = true;
				got++;
			} else if (r < 0) {
				ret = EX_FAIL;
			} else if (waitpid(s.pids[i], NULL, WNOHANG) == s.pids[i]) {
				errf("replica %u (pid %d) exited during start-up", s.ids[i],
				     (int)s.pids[i]);
				log_tail(dir, s.ids[i]);
				ret = EX_FAIL;
			}
		}
		if (ret || got == n)
			break;
		if (dxl_now_ms() > end) {
			for (uint32_t i = 0; i < n; i++)
				if (!have[i]) {
					errf("replica %u did not register in 30 s", s.ids[i]);
					log_tail(dir, s.ids[i]);
				}
			ret = EX_FAIL;
			break;
		}
		usleep(50000);
	}
	uint64_t epoch = 0;
	if (!ret) {
		int r = write_config(zk, &s, d, &epoch);
		if (r) {
			errf("writing the configuration of cluster %s: %s", s.c.cluster, dxl_errmsg());
			ret = r == DXL_E_UNAVAIL ? EX_ZK : EX_FAIL;
		}
	}
	dxl_zk_delete(&zk);
	if (ret) {
		fprintf(stderr, "%s: the cluster is not complete; 'dxl cluster down --dir %s' stops "
			"what was started\n", g_cmd, dir);
		return ret;
	}
	printf("cluster %s is up: %u replicas, %u shards, config epoch %llu\n", s.c.cluster, n,
	       ns, (unsigned long long)epoch);
	printf("zookeeper: %s%s\n", s.c.zk, s.zk_dir[0] ? " (started here)" : "");
	for (uint32_t i = 0; i < n; i++)
		printf("replica %u: pid %d addr %s\n", s.ids[i], (int)s.pids[i], d[i].addr);
	printf("state: %s/cluster.json\nlogs:  %s/logs/replica-<id>.log\ndata:  %s/data/<id>\n",
	       dir, dir, dir);
	return EX_OK;
}

/* ---- dxl cluster status ----------------------------------------------------- */

static void status_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl cluster status [--dir DIR | --zk CONNECT --cluster NAME]\n"
"\n"
"Show, from ZooKeeper, the cluster configuration (epoch, shard -> replicas,\n"
"primary first), the registered nodes (id, address, pid) and whether every\n"
"replica of every shard is registered (up) or not (down).\n"
"\n"
"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n"
"  --zk CONNECT       ZooKeeper connect string (instead of DIR/cluster.json)\n"
"  --cluster NAME     cluster name with --zk [default]\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP
"    (status exits 1 when a replica of a shard is down)\n");
}

static int conn_opts(int argc, char **argv, void (*usage)(FILE *), struct conn *cn)
{
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"zk", required_argument, NULL, 'z'},
		{"cluster", required_argument, NULL, 'C'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = "./dxl-cluster", *zk = NULL, *cl = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'z': zk = optarg; break;
		case 'C': cl = optarg; break;
		case 'h': usage(stdout); return -1;
		default: usage(stderr); return EX_USAGE;
		}
	}
	if (optind < argc) {
		errf("unexpected argument '%s' (see --help)", argv[optind]);
		return EX_USAGE;
	}
	return resolve_conn(dir, zk, cl, cn);
}

static int cmd_cluster_status(int argc, char **argv)
{
	struct conn cn;
	int ret = conn_opts(argc, argv, status_usage, &cn);
	if (ret)
		return ret < 0 ? EX_OK : ret;
	struct dxl_zk *zk = NULL;
	if ((ret = zk_connect(&cn, &zk)))
		return ret;
	struct dxl_member_list ml = {0};
	int r = dxl_member_list(zk, &ml);
	if (r) {
		errf("listing nodes of cluster %s: %s", cn.cluster, dxl_errmsg());
		dxl_zk_delete(&zk);
		return r == DXL_E_UNAVAIL ? EX_ZK : EX_FAIL;
	}
	printf("cluster %s (zookeeper %s)\n", cn.cluster, cn.zk);
	struct dxl_cluster_config cfg;
	r = dxl_cluster_config_read(zk, &cfg, NULL);
	bool all_up = true;
	if (r == DXL_E_NOENT) {
		printf("config: none\n");
		ret = EX_CLUSTER;
	} else if (r) {
		errf("reading the configuration: %s", dxl_errmsg());
		ret = EX_FAIL;
	} else {
		printf("config: epoch %llu, shards: %u, nodes: %u\n",
		       (unsigned long long)cfg.epoch, cfg.nshards, cfg.nnodes);
		for (uint32_t i = 0; i < cfg.nshards; i++) {
			const struct dxl_cluster_shard *s = &cfg.shards[i];
			printf("  shard %u:", s->id);
			for (uint32_t j = 0; j <= s->nbackups; j++) {
				uint32_t id = j ? s->backups[j - 1] : s->primary;
				bool up = false;
				for (size_t k = 0; k < ml.n; k++)
					up |= ml.v[k].node_id == id;
				all_up &= up;
				printf(" %u(%s%s)", id, j ? "" : "primary,", up ? "up" : "DOWN");
			}
			printf("\n");
		}
		dxl_cluster_config_clear(&cfg);
	}
	printf("nodes: %zu registered\n", ml.n);
	for (size_t k = 0; k < ml.n; k++) {
		struct dxl_replica_desc d;
		json_t *o = json_loads(ml.v[k].payload, 0, NULL);
		json_int_t pid = 0;
		json_unpack(o, "{s?I}", "pid", &pid);
		json_decref(o);
		if (dxl_replica_desc_decode(ml.v[k].payload, strlen(ml.v[k].payload), &d) == 0)
			printf("  node %u: addr %s provider %s shards %u reg_epoch %llu pid %lld\n",
			       ml.v[k].node_id, d.addr, dxl_fabric_provider_name(d.provider),
			       d.nshards, (unsigned long long)d.reg_epoch, (long long)pid);
		else
			printf("  node %u: (not a replica) pid %lld\n", ml.v[k].node_id,
			       (long long)pid);
	}
	dxl_member_list_free(&ml);
	dxl_zk_delete(&zk);
	if (!ret && !all_up)
		ret = EX_FAIL;
	return ret;
}

/* ---- dxl cluster down ------------------------------------------------------- */

static void down_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl cluster down [--dir DIR]\n"
"\n"
"Stop the cluster started by 'dxl cluster up --dir DIR': SIGTERM every\n"
"replica listed in DIR/cluster.json (a clean shutdown), SIGKILL those still\n"
"running after 10 s, then stop the ZooKeeper 'cluster up' started (if any).\n"
"Data and logs stay in DIR.\n"
"\n"
"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP);
}

static int cmd_cluster_down(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = "./dxl-cluster";
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'h': down_usage(stdout); return EX_OK;
		default: down_usage(stderr); return EX_USAGE;
		}
	}
	if (optind < argc) {
		errf("unexpected argument '%s' (see --help)", argv[optind]);
		return EX_USAGE;
	}
	struct state s;
	int ret = state_read(dir, &s);
	if (ret)
		return ret;
	bool term[MAX_REPLICAS] = {false};
	for (uint32_t i = 0; i < s.nreplicas; i++)
		if (pid_alive(s.pids[i]) && is_replica(s.pids[i]) && kill(s.pids[i], SIGTERM) == 0)
			term[i] = true;
		else
			printf("replica %u (pid %d): not running\n", s.ids[i], (int)s.pids[i]);
	uint64_t end = dxl_now_ms() + 10000;
	for (;;) {
		bool any = false;
		for (uint32_t i = 0; i < s.nreplicas; i++)
			any |= term[i] && pid_alive(s.pids[i]);
		if (!any || dxl_now_ms() > end)
			break;
		usleep(20000);
	}
	for (uint32_t i = 0; i < s.nreplicas; i++) {
		if (!term[i])
			continue;
		if (pid_alive(s.pids[i])) {
			kill(s.pids[i], SIGKILL);
			uint64_t e2 = dxl_now_ms() + 2000;
			while (pid_alive(s.pids[i]) && dxl_now_ms() < e2)
				usleep(10000);
			printf("replica %u (pid %d): killed (did not stop in 10 s)%s\n", s.ids[i],
			       (int)s.pids[i], pid_alive(s.pids[i]) ? " -- STILL RUNNING" : "");
			if (pid_alive(s.pids[i]))
				ret = EX_FAIL;
		} else {
			printf("replica %u (pid %d): stopped\n", s.ids[i], (int)s.pids[i]);
		}
	}
	if (s.zk_dir[0]) {
		char script[PATH_MAX + 32], cmd[4 * PATH_MAX + 64];
		const char *sd = getenv("DXL_SCRIPTS");
		if (sd)
			snprintf(script, sizeof(script), "%s/zk.sh", sd);
		else
			snprintf(script, sizeof(script), "%s/../../scripts/zk.sh", g_self_dir);
		snprintf(cmd, sizeof(cmd), "'%s' stop '%s'", script, s.zk_dir);
		if (system(cmd) != 0) {
			errf("stopping ZooKeeper in %s failed (%s)", s.zk_dir, cmd);
			ret = EX_FAIL;
		} else {
			printf("zookeeper %s: stopped\n", s.c.zk);
		}
	}
	printf("cluster %s is down; data and logs remain in %s\n", s.c.cluster, dir);
	return ret;
}

/* ---- dxl log append --------------------------------------------------------- */

static void append_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl log append --shard S [--dir DIR | --zk CONNECT --cluster NAME]\n"
"                      [RECORD...]\n"
"\n"
"Append records to shard S: each RECORD argument is one record; without\n"
"arguments every line of stdin is one (newline removed, empty lines\n"
"skipped). Leases the first free writer slot k of the shard (the ephemeral\n"
"znode writers/<S>/<k>; the writer id is k), appends to ring k of every\n"
"replica of the shard (from their nodes/<id> descriptors), with commit\n"
"timestamps from a hybrid logical clock, and prints one line per record:\n"
"\n"
"    <commit_ts>\\tok\n"
"    <commit_ts>\\tFAILED <error>: not on replica(s) <ids>\n"
"\n"
"then writes a final watermark (heartbeat) so tailers deliver everything,\n"
"and releases the slot.\n"
"\n"
"  --shard S          the shard (required)\n"
"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n"
"  --zk CONNECT       ZooKeeper connect string (instead of DIR/cluster.json)\n"
"  --cluster NAME     cluster name with --zk [default]\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP
"    (append exits 1 if any record was not acknowledged by every replica)\n");
}

static int cmd_log_append(int argc, char **argv)
{
	/* one status line per record, out as soon as it is acknowledged (a
	 * pipe or file reader sees it at once, and nothing waits in a buffer) */
	setvbuf(stdout, NULL, _IOLBF, 0);
	static const struct option opts[] = {
		{"shard", required_argument, NULL, 's'},
		{"dir", required_argument, NULL, 'd'},
		{"zk", required_argument, NULL, 'z'},
		{"cluster", required_argument, NULL, 'C'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = "./dxl-cluster", *zkc = NULL, *cl = NULL;
	uint32_t shard = 0;
	bool have_shard = false;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (parse_u32(optarg, &shard)) {
				errf("--shard '%s': not a shard number", optarg);
				return EX_USAGE;
			}
			have_shard = true;
			break;
		case 'd': dir = optarg; break;
		case 'z': zkc = optarg; break;
		case 'C': cl = optarg; break;
		case 'h': append_usage(stdout); return EX_OK;
		default: append_usage(stderr); return EX_USAGE;
		}
	}
	if (!have_shard) {
		errf("--shard S is required (see --help)");
		return EX_USAGE;
	}
	for (int i = optind; i < argc; i++)
		if (!argv[i][0]) {
			errf("record %d is empty (an empty record cannot be appended)", i - optind + 1);
			return EX_USAGE;
		}
	struct conn cn;
	int ret = resolve_conn(dir, zkc, cl, &cn);
	if (ret)
		return ret;
	struct dxl_zk *zk = NULL;
	if ((ret = zk_connect(&cn, &zk)))
		return ret;
	struct shard_view v;
	if ((ret = shard_view(zk, &cn, shard, &v))) {
		dxl_zk_delete(&zk);
		return ret;
	}
	static struct dxl_replica_desc d[MAX_REPLICAS];
	uint32_t nslots = DXL_SHARD_MAX_RINGS;
	for (uint32_t i = 0; i < v.n; i++) {
		int r = get_desc(zk, v.ids[i], &d[i]);
		if (r > 0)
			errf("replica %u of shard %u is not registered in nodes/ (down?)", v.ids[i],
			     shard);
		const struct dxl_shard_desc *sd = r ? NULL : dxl_replica_desc_shard(&d[i], shard);
		if (!r && !sd)
			errf("replica %u does not host shard %u", v.ids[i], shard);
		if (r || !sd) {
			dxl_zk_delete(&zk);
			return r < 0 ? EX_FAIL : EX_CLUSTER;
		}
		if (sd->nrings < nslots)
			nslots = sd->nrings;
	}
	uint32_t slot = 0;
	if ((ret = dxl_writer_slot_lease(zk, shard, nslots, &slot))) {
		errf("leasing a writer slot of shard %u: %s", shard, dxl_errmsg());
		dxl_zk_delete(&zk);
		return ret == DXL_E_UNAVAIL ? EX_ZK : EX_FAIL;
	}
	struct dxl_log_target t[MAX_REPLICAS];
	struct dxl_fabric *f = NULL;
	struct dxl_ctx *ctx = NULL;
	struct dxl_appender *ap = NULL;
	struct dxl_fabric_cfg fc;
	dxl_fabric_cfg_init(&fc);
	fc.provider = d[0].provider;
	int r = 0;
	for (uint32_t i = 0; !r && i < v.n; i++)
		r = dxl_replica_desc_target(&d[i], shard, slot, &t[i]);
	if (!r)
		r = dxl_fabric_new(&fc, &f);
	if (!r)
		r = dxl_ctx_new(f, 0, &ctx);
	if (!r) {
		struct dxl_appender_cfg ac;
		dxl_appender_cfg_init(&ac);
		ac.writer_id = slot;
		ac.epoch = (uint32_t)v.epoch;
		r = dxl_appender_new(ctx, &ac, t, v.n, &ap);
	}
	if (r) {
		errf("opening writer slot %u of shard %u: %s", slot, shard, dxl_errmsg());
		dxl_fabric_delete(&f);
		dxl_writer_slot_release(zk, shard, slot);
		dxl_zk_delete(&zk);
		return EX_FAIL;
	}

	/* append: pipelined; results arrive in append order */
	struct dxl_hlc clk;
	dxl_hlc_init(&clk);
	size_t cap = 1024, posted = 0, done = 0;
	uint64_t *ts = malloc(cap * sizeof(*ts));
	uint32_t failed = 0, nrec = 0;
	char *line = NULL;
	size_t lcap = 0;
	int ai = optind;
	bool from_stdin = optind >= argc, eof = false;
	struct dxl_append_result res[16];
	while (ts) {
		/* the next record */
		const char *p = NULL;
		size_t plen = 0;
		if (!eof) {
			if (!from_stdin) {
				if (ai < argc) {
					p = argv[ai++];
					plen = strlen(p);
				}
			} else {
				ssize_t n;
				while ((n = getline(&line, &lcap, stdin)) >= 0) {
					while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
						line[--n] = 0;
					if (n > 0)
						break;
				}
				if (n > 0) {
					p = line;
					plen = (size_t)n;
				}
			}
			if (!p)
				eof = true;
		}
		if (p) {
			if (posted == cap) {
				uint64_t *nt = realloc(ts, cap * 2 * sizeof(*ts));
				if (!nt)
					break;
				ts = nt;
				cap *= 2;
			}
			uint64_t now = dxl_hlc_now(&clk);
			struct dxl_rec rec = {.txn_id = now, .commit_ts = now, .payload = p,
					      .payload_len = (uint32_t)plen};
			uint64_t tok;
			for (;;) {
				r = dxl_appender_append(ap, &rec, NULL, &tok);
				if (r != DXL_E_AGAIN)
					break;
				dxl_appender_wait(ap, 100);
				int k = dxl_appender_poll(ap, res, 16);
				for (int j = 0; j < k; j++, done++) {
					/* printed below: same code path */
					if (res[j].status == 0) {
						printf("%llu\tok\n", (unsigned long long)ts[done]);
						continue;
					}
					failed++;
					printf("%llu\tFAILED %s: not on replica(s)",
					       (unsigned long long)ts[done], dxl_errname(res[j].status));
					for (uint32_t q = 0; q < v.n; q++)
						if (!(res[j].acked & (1u << q)))
							printf(" %u", v.ids[q]);
					printf("\n");
				}
			}
			nrec++;
			if (r) {
				/* not posted: report it in order once earlier ones are in */
				while (done < posted) {
					dxl_appender_wait(ap, 100);
					int k = dxl_appender_poll(ap, res, 16);
					for (int j = 0; j < k; j++, done++) {
						if (!res[j].status) {
							printf("%llu\tok\n", (unsigned long long)ts[done]);
							continue;
						}
						failed++;
						printf("%llu\tFAILED %s\n", (unsigned long long)ts[done],
						       dxl_errname(res[j].status));
					}
				}
				failed++;
				printf("%llu\tFAILED %s: %s\n", (unsigned long long)now,
				       dxl_errname(r), dxl_errmsg());
				if (r == DXL_E_UNAVAIL || r == DXL_E_FULL) {
					errf("stopping: %s", dxl_errmsg());
					break;
				}
				continue;
			}
			ts[posted++] = now;
			continue;
		}
		/* no more records: collect the rest */
		if (done >= posted)
			break;
		dxl_appender_wait(ap, 100);
		int k = dxl_appender_poll(ap, res, 16);
		for (int j = 0; j < k; j++, done++) {
			if (res[j].status == 0) {
				printf("%llu\tok\n", (unsigned long long)ts[done]);
				continue;
			}
			failed++;
			printf("%llu\tFAILED %s: not on replica(s)", (unsigned long long)ts[done],
			       dxl_errname(res[j].status));
			for (uint32_t q = 0; q < v.n; q++)
				if (!(res[j].acked & (1u << q)))
					printf(" %u", v.ids[q]);
			printf("\n");
		}
	}
	free(line);
	if (!ts) {
		errf("out of memory");
		failed++;
	}
	free(ts);
	/* the final watermark, so tailers deliver everything appended */
	r = dxl_appender_heartbeat(ap, dxl_hlc_now(&clk));
	if (r) {
		errf("final heartbeat: %s", dxl_errmsg());
	} else {
		uint64_t end = dxl_now_ms() + 5000;
		while (dxl_appender_inflight(ap) && dxl_now_ms() < end) {
			dxl_appender_wait(ap, 100);
			dxl_appender_poll(ap, res, 16);
		}
	}
	fflush(stdout);
	dxl_appender_delete(&ap);
	dxl_fabric_delete(&f);
	if (dxl_writer_slot_release(zk, shard, slot))
		errf("releasing writer slot %u of shard %u: %s", slot, shard, dxl_errmsg());
	dxl_zk_delete(&zk);
	if (failed)
		errf("%u of %u records not acknowledged by every replica of shard %u", failed, nrec,
		     shard);
	return failed ? EX_FAIL : EX_OK;
}

/* ---- dxl tail --------------------------------------------------------------- */

static void tail_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl tail --shard S [--dir DIR | --zk CONNECT --cluster NAME]\n"
"                [--from earliest|latest|TS] [--format text|json] [--follow]\n"
"                [--replica ID]\n"
"\n"
"Print the records of shard S in commit-timestamp order, read one-sidedly\n"
"from one replica. Only resolved records are printed (below every live\n"
"writer's watermark). Without --follow it exits once it has caught up.\n"
"\n"
"text:  <shard>\\t<commit_ts>\\t<writer>\\t<txn_id>\\t<payload>\n"
"json:  {\"shard\":S,\"commit_ts\":T,\"writer\":W,\"txn_id\":X,\"payload\":\"<base64>\"}\n"
"\n"
"  --shard S          the shard (required)\n"
"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n"
"  --zk CONNECT       ZooKeeper connect string (instead of DIR/cluster.json)\n"
"  --cluster NAME     cluster name with --zk [default]\n"
"  --from F           earliest (everything retained), latest (the current\n"
"                     resolved timestamp: only what comes later), or a commit\n"
"                     timestamp TS [earliest]\n"
"  --format F         text | json [text]\n"
"  --follow           keep printing new records until SIGINT/SIGTERM\n"
"  --replica ID       read from this replica of the shard [the first\n"
"                     registered one, primary first]\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP);
}

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

struct printer {
	uint32_t shard;
	bool json;
	bool quiet;
};

static void b64(const uint8_t *p, size_t n)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < n)
			v |= p[i + 2];
		putchar(tab[(v >> 18) & 63]);
		putchar(tab[(v >> 12) & 63]);
		putchar(i + 1 < n ? tab[(v >> 6) & 63] : '=');
		putchar(i + 2 < n ? tab[v & 63] : '=');
	}
}

static int print_rec(uint32_t ring, const struct dxl_rec *rec, void *arg)
{
	(void)ring;
	struct printer *pr = arg;
	if (pr->quiet)
		return 0;
	if (pr->json) {
		printf("{\"shard\":%u,\"commit_ts\":%llu,\"writer\":%u,\"txn_id\":%llu,\"payload\":\"",
		       pr->shard, (unsigned long long)rec->commit_ts, rec->writer,
		       (unsigned long long)rec->txn_id);
		b64(rec->payload, rec->payload_len);
		printf("\"}\n");
	} else {
		printf("%u\t%llu\t%u\t%llu\t", pr->shard, (unsigned long long)rec->commit_ts,
		       rec->writer, (unsigned long long)rec->txn_id);
		fwrite(rec->payload, 1, rec->payload_len, stdout);
		putchar('\n');
	}
	return 0;
}

static int cmd_tail(int argc, char **argv)
{
	static const struct option opts[] = {
		{"shard", required_argument, NULL, 's'},
		{"dir", required_argument, NULL, 'd'},
		{"zk", required_argument, NULL, 'z'},
		{"cluster", required_argument, NULL, 'C'},
		{"from", required_argument, NULL, 'F'},
		{"format", required_argument, NULL, 'o'},
		{"follow", no_argument, NULL, 'f'},
		{"replica", required_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = "./dxl-cluster", *zkc = NULL, *cl = NULL;
	uint32_t shard = 0, replica = 0;
	bool have_shard = false, follow = false, latest = false;
	uint64_t from = 0;
	struct printer pr = {0};
	int c;
	while ((c = getopt_long(argc, argv, "hf", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (parse_u32(optarg, &shard)) {
				errf("--shard '%s': not a shard number", optarg);
				return EX_USAGE;
			}
			have_shard = true;
			break;
		case 'd': dir = optarg; break;
		case 'z': zkc = optarg; break;
		case 'C': cl = optarg; break;
		case 'F':
			if (!strcmp(optarg, "earliest"))
				from = 0;
			else if (!strcmp(optarg, "latest"))
				latest = true;
			else if (dxl_parse_u64(optarg, &from)) {
				errf("--from '%s': want earliest, latest or a commit timestamp", optarg);
				return EX_USAGE;
			}
			break;
		case 'o':
			if (!strcmp(optarg, "json"))
				pr.json = true;
			else if (strcmp(optarg, "text")) {
				errf("--format '%s': want text or json", optarg);
				return EX_USAGE;
			}
			break;
		case 'f': follow = true; break;
		case 'r':
			if (parse_u32(optarg, &replica) || !replica) {
				errf("--replica '%s': not a node id", optarg);
				return EX_USAGE;
			}
			break;
		case 'h': tail_usage(stdout); return EX_OK;
		default: tail_usage(stderr); return EX_USAGE;
		}
	}
	if (optind < argc) {
		errf("unexpected argument '%s' (see --help)", argv[optind]);
		return EX_USAGE;
	}
	if (!have_shard) {
		errf("--shard S is required (see --help)");
		return EX_USAGE;
	}
	pr.shard = shard;
	struct conn cn;
	int ret = resolve_conn(dir, zkc, cl, &cn);
	if (ret)
		return ret;
	struct dxl_zk *zk = NULL;
	if ((ret = zk_connect(&cn, &zk)))
		return ret;
	struct shard_view v;
	if ((ret = shard_view(zk, &cn, shard, &v))) {
		dxl_zk_delete(&zk);
		return ret;
	}
	static struct dxl_replica_desc d;
	int r = 1;
	if (replica) {
		bool in = false;
		for (uint32_t i = 0; i < v.n; i++)
			in |= v.ids[i] == replica;
		if (!in) {
			errf("replica %u is not a replica of shard %u", replica, shard);
			dxl_zk_delete(&zk);
			return EX_CLUSTER;
		}
		r = get_desc(zk, replica, &d);
		if (r > 0)
			errf("replica %u is not registered in nodes/ (down?)", replica);
	} else {
		for (uint32_t i = 0; r > 0 && i < v.n; i++)
			if ((r = get_desc(zk, v.ids[i], &d)) == 0)
				replica = v.ids[i];
		if (r > 0)
			errf("no replica of shard %u is registered in nodes/", shard);
	}
	if (r) {
		dxl_zk_delete(&zk);
		return r < 0 ? EX_FAIL : EX_CLUSTER;
	}
	const struct dxl_shard_desc *sd = dxl_replica_desc_shard(&d, shard);
	if (!sd) {
		errf("replica %u does not host shard %u", replica, shard);
		dxl_zk_delete(&zk);
		return EX_CLUSTER;
	}
	struct dxl_log_target *t = calloc(sd->nrings, sizeof(*t));
	if (!t) {
		errf("out of memory");
		dxl_zk_delete(&zk);
		return EX_FAIL;
	}
	for (uint32_t i = 0; !r && i < sd->nrings; i++)
		r = dxl_replica_desc_target(&d, shard, i, &t[i]);
	struct dxl_fabric *f = NULL;
	struct dxl_ctx *ctx = NULL;
	struct dxl_tailer *tl = NULL;
	struct dxl_fabric_cfg fc;
	dxl_fabric_cfg_init(&fc);
	fc.provider = d.provider;
	if (!r)
		r = dxl_fabric_new(&fc, &f);
	if (!r)
		r = dxl_ctx_new(f, 0, &ctx);
	if (!r) {
		struct dxl_tail_cfg tc = {.from_ts = from};
		r = dxl_tailer_new(ctx, &tc, t, sd->nrings, &tl);
	}
	free(t);
	if (r) {
		errf("tailing shard %u on replica %u (%s): %s", shard, replica, d.addr,
		     dxl_errmsg());
		dxl_fabric_delete(&f);
		dxl_zk_delete(&zk);
		return EX_FAIL;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* latest: skip what is resolved now */
	pr.quiet = latest;
	int idle = 0;
	ret = EX_OK;
	uint64_t live_at = 0;
	while (!g_stop) {
		/* the live writers bound what is resolved; a writer that crashed
		 * (its slot gone) holds nobody back and only its confirmed
		 * records are delivered (docs/log.md, tailing) */
		if (dxl_now_ms() - live_at >= 200) {
			uint64_t live;
			if (dxl_writer_slots_live(zk, shard, &live) == 0)
				dxl_tailer_set_live(tl, live);
			live_at = dxl_now_ms();
		}
		int n = dxl_tailer_poll(tl, print_rec, &pr, NULL);
		if (n < 0) {
			errf("tailing shard %u on replica %u: %s", shard, replica, dxl_errmsg());
			ret = EX_FAIL;
			break;
		}
		if (n > 0) {
			idle = 0;
			fflush(stdout);
			continue;
		}
		if (++idle < 2)
			continue; /* one more poll: caught up only if still nothing */
		if (pr.quiet) {
			pr.quiet = false; /* now at the resolved timestamp */
			idle = 0;
			if (!follow)
				break;
			continue;
		}
		if (!follow)
			break;
		usleep(20000);
	}
	fflush(stdout);
	dxl_tailer_delete(&tl);
	dxl_fabric_delete(&f);
	dxl_zk_delete(&zk);
	return ret;
}

/* ---- dispatch --------------------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
"Usage: dxl COMMAND [OPTIONS]   (dxl COMMAND --help for each)\n"
"\n"
"Commands:\n"
"  cluster up       start a local cluster: ZooKeeper (unless --zk), N replicas,\n"
"                   the cluster configuration\n"
"  cluster status   configuration, registered nodes, replicas' liveness\n"
"  cluster down     stop what 'cluster up' started\n"
"  log append       append records to a shard (arguments or stdin lines)\n"
"  tail             print a shard's records in commit-timestamp order\n"
"\n"
"Most commands find the cluster through DIR/cluster.json (--dir, default\n"
"./dxl-cluster) or --zk CONNECT --cluster NAME. docs/cli.md has the details.\n"
"\n" EXIT_CODES_HELP);
}

int main(int argc, char **argv)
{
	if (!getenv("DXL_LOG_LEVEL"))
		dxl_log_set_level(DXL_LOG_WARN);
	signal(SIGPIPE, SIG_IGN);
	find_self();
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? EX_USAGE : EX_OK;
	}
	static char cmdname[64];
	if (!strcmp(argv[1], "cluster") || !strcmp(argv[1], "log")) {
		if (argc < 3) {
			fprintf(stderr, "dxl %s: missing subcommand (%s)\n", argv[1],
				!strcmp(argv[1], "cluster") ? "up, status or down" : "append");
			return EX_USAGE;
		}
		snprintf(cmdname, sizeof(cmdname), "dxl %s %s", argv[1], argv[2]);
		g_cmd = cmdname;
		int sub_argc = argc - 2;
		char **sub_argv = argv + 2;
		if (!strcmp(argv[1], "cluster")) {
			if (!strcmp(argv[2], "up"))
				return cmd_cluster_up(sub_argc, sub_argv);
			if (!strcmp(argv[2], "status"))
				return cmd_cluster_status(sub_argc, sub_argv);
			if (!strcmp(argv[2], "down"))
				return cmd_cluster_down(sub_argc, sub_argv);
		} else if (!strcmp(argv[2], "append")) {
			return cmd_log_append(sub_argc, sub_argv);
		}
		fprintf(stderr, "dxl %s: unknown subcommand '%s' (see dxl --help)\n", argv[1],
			argv[2]);
		return EX_USAGE;
	}
	if (!strcmp(argv[1], "tail")) {
		g_cmd = "dxl tail";
		return cmd_tail(argc - 1, argv + 1);
	}
	fprintf(stderr, "dxl: unknown command '%s' (see dxl --help)\n", argv[1]);
	return EX_USAGE;
}
