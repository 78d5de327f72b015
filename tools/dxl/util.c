/* util.c -- the dxl tool's shared helpers: messages, cluster.json, ZooKeeper
 * connection, a shard's replicas (cli.h). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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
#include "common/config.h"
#include "dxl/log.h"
#include "dxl/membership.h"
#include "dxl/replica.h"

#include "cli.h"

const char *g_cmd = "dxl"; /* "dxl log append" etc., for messages */

void errf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", g_cmd);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ---- small helpers -------------------------------------------------------- */

char g_self_dir[PATH_MAX];

void find_self(void)
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

int mkdir_p(const char *path)
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

int parse_u32(const char *s, uint32_t *out)
{
	uint64_t v;
	if (dxl_parse_u64(s, &v) || v > UINT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* pid_alive -- the process exists and is not a zombie */
bool pid_alive(pid_t pid)
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
bool is_replica(pid_t pid)
{
	return is_prog(pid, "dxl-replica");
}

bool is_prog(pid_t pid, const char *prog)
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
	return strcmp(b ? b + 1 : buf, prog) == 0;
}

/* check_cluster_name -- the rule of zk.cluster (membership's own check) */
int check_cluster_name(const char *name)
{
	struct dxl_config *conf = NULL;
	struct dxl_zk_cfg zc;
	dxl_zk_cfg_init(&zc);
	int ret = dxl_config_new(&conf);
	if (!ret)
		ret = dxl_config_set(conf, "zk.cluster", name);
	if (!ret)
		ret = dxl_zk_cfg_load(conf, &zc);
	dxl_config_delete(&conf);
	if (ret) {
		errf("--cluster '%s': not a cluster name (letters, digits, '_', '-', '.'; "
		     "1..%d characters)", name, DXL_ZK_CLUSTER_MAX - 1);
		return EX_USAGE;
	}
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)f;
	return (flag == FTW_DP ? rmdir(path) : unlink(path)) && errno != ENOENT ? -1 : 0;
}

int rm_tree(const char *path)
{
	if (access(path, F_OK) != 0)
		return 0;
	return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- where the cluster is -------------------------------------------------- */




int state_write(const char *dir, const struct state *s)
{
	json_t *reps = json_array(), *opts = json_array();
	for (uint32_t i = 0; i < s->nreplicas; i++) {
		char log[PATH_MAX + 64], data[PATH_MAX + 64];
		snprintf(log, sizeof(log), "%s/logs/replica-%u.log", dir, s->ids[i]);
		snprintf(data, sizeof(data), "%s/data/%u", dir, s->ids[i]);
		json_array_append_new(reps, json_pack("{s:i,s:i,s:s,s:s}", "id",
						      (json_int_t)s->ids[i], "pid",
						      (json_int_t)s->pids[i], "log", log,
						      "data", data));
	}
	for (uint32_t i = 0; i < s->nopts; i++)
		json_array_append_new(opts, json_string(s->opts[i]));
	json_t *coords = json_array();
	for (uint32_t i = 0; i < s->ncoords; i++) {
		char log[PATH_MAX + 64];
		snprintf(log, sizeof(log), "%s/logs/coord-%u.log", dir, i + 1);
		json_array_append_new(coords, json_pack("{s:i,s:s}", "pid",
							(json_int_t)s->coord_pids[i], "log", log));
	}
	json_t *o = json_pack("{s:i,s:s,s:s,s:s?,s:i,s:o,s:s,s:s,s:o,s:o}", "format", 1, "cluster",
			      s->c.cluster, "zk", s->c.zk, "zk_dir",
			      s->zk_dir[0] ? s->zk_dir : NULL, "shards",
			      (json_int_t)s->nshards, "replicas", reps, "provider",
			      s->provider[0] ? s->provider : "tcp", "durability",
			      s->durability[0] ? s->durability : "process", "replica_opts", opts,
			      "coordinators", coords);
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
int state_read(const char *dir, struct state *s)
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
	const char *pv = NULL, *du = NULL;
	json_t *opts = NULL, *coords = NULL;
	json_unpack(o, "{s?s,s?s,s?o,s?o}", "provider", &pv, "durability", &du, "replica_opts",
		    &opts, "coordinators", &coords);
	if (json_is_array(coords))
		for (size_t k = 0; k < json_array_size(coords) && s->ncoords < STATE_MAX_COORDS; k++)
			s->coord_pids[s->ncoords++] = (pid_t)json_integer_value(
				json_object_get(json_array_get(coords, k), "pid"));
	snprintf(s->provider, sizeof(s->provider), "%s", pv ? pv : "tcp");
	snprintf(s->durability, sizeof(s->durability), "%s", du ? du : "process");
	if (json_is_array(opts))
		for (size_t k = 0; k < json_array_size(opts) && s->nopts < STATE_MAX_OPTS; k++) {
			const char *v = json_string_value(json_array_get(opts, k));
			if (v)
				snprintf(s->opts[s->nopts++], sizeof(s->opts[0]), "%s", v);
		}
	json_decref(o);
	return 0;
}

/* resolve_conn -- --zk/--cluster if given, else DIR/cluster.json */
int resolve_conn(const char *dir, const char *zk, const char *cluster,
			struct conn *c)
{
	if (zk) {
		if (cluster && check_cluster_name(cluster))
			return EX_USAGE;
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

int zk_connect(const struct conn *c, struct dxl_zk **zk)
{
	struct dxl_zk_cfg zc;
	dxl_zk_cfg_init(&zc);
	snprintf(zc.connect, sizeof(zc.connect), "%s", c->zk);
	snprintf(zc.cluster, sizeof(zc.cluster), "%s", c->cluster);
	zc.connect_timeout_ms = 5000;
	int ret = dxl_zk_new(&zc, zk);
	if (ret == DXL_E_INVAL) { /* the connect string or cluster name, not the network */
		errf("%s", dxl_errmsg());
		return EX_USAGE;
	}
	if (ret) {
		errf("cannot connect to ZooKeeper %s (cluster %s): %s", c->zk, c->cluster,
		     dxl_errmsg());
		return ret == DXL_E_UNAVAIL ? EX_ZK : EX_FAIL;
	}
	return 0;
}

/* ---- the cluster configuration of a shard ---------------------------------- */


void shard_list(const struct dxl_cluster_config *cfg, char *buf, size_t cap)
{
	size_t o = 0;
	buf[0] = 0;
	for (uint32_t i = 0; i < cfg->nshards && o + 12 < cap; i++)
		o += (size_t)snprintf(buf + o, cap - o, "%s%u", i ? "," : "", cfg->shards[i].id);
}

int shard_view(struct dxl_zk *zk, const struct conn *c, uint32_t shard,
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
	v->n = dxl_cluster_shard_members(s, v->ids);
	v->epoch = cfg.epoch;
	dxl_cluster_config_clear(&cfg);
	return 0;
}

/* get_desc -- the decoded nodes/<id> of a replica; 1 if not registered */
int get_desc(struct dxl_zk *zk, uint32_t id, struct dxl_replica_desc *d)
{
	int ret = dxl_replica_desc_get(zk, id, d);
	if (ret == DXL_E_NOENT)
		return 1;
	if (ret == DXL_E_CORRUPT || ret == DXL_E_VERSION) {
		errf("nodes/%u is not a replica descriptor: %s", id, dxl_errmsg());
		return -1;
	}
	if (ret) {
		errf("reading nodes/%u: %s", id, dxl_errmsg());
		return -1;
	}
	return 0;
}
