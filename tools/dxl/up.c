/* up.c -- dxl cluster up | down | start (docs/cli.md): a local cluster started
 * safely (every option checked before anything starts; a failed start
 * undoes what it began), stopped again, and started again on its data
 * under its last configuration. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
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

/* ---- dxl cluster up ------------------------------------------------------- */

static void up_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl cluster up [--dir DIR] [--replicas N] [--shards S] [--zk CONNECT]\n"
"                      [--cluster NAME] [--provider tcp] [--durability MODE]\n"
"                      [--ring-size BYTES] [--writer-slots W]\n"
"                      [--session-timeout MS] [--min-replicas M]\n"
"                      [--coordinators C] [--force] [-o KEY=VALUE]...\n"
"\n"
"Start a local cluster: N dxl-replica processes (node ids 1..N) each hosting\n"
"shards 0..S-1 (every shard on every replica, replica 1 primary), registered\n"
"in ZooKeeper, and the cluster configuration in /dxl/NAME/config (created, or\n"
"replaced with the next epoch); then C dxl-coord coordinators. From then on\n"
"the configuration manager (one of the replicas, elected) changes the\n"
"configuration on failures: see docs/operations.md.\n"
"\n"
"Every option, the -o keys included, is checked before anything starts (exit\n"
"2). A start that fails later stops what it started (replicas, coordinators,\n"
"the ZooKeeper it started), removes the data directories it created and\n"
"restores DIR/cluster.json; the logs stay. A start on a DIR whose replicas\n"
"run is refused at once; a ZooKeeper an earlier start left running in DIR/zk\n"
"is reused. Without --force a start is refused (exit 1, nothing changed)\n"
"when DIR/data/<id> holds data or ZooKeeper already has a configuration of\n"
"cluster NAME: 'dxl cluster start' brings a stopped cluster back on its data\n"
"under its last configuration.\n"
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
"  --session-timeout MS  ZooKeeper session timeout of the replicas and\n"
"                     coordinators = failure detection time [2000]\n"
"  --min-replicas M   cm.min_replicas: the CM never shrinks a shard below M\n"
"                     live members (it reports it unavailable instead)\n"
"                     [2 with 3+ replicas, else 1]\n"
"  --coordinators C   dxl-coord processes to start (0..%d) once the\n"
"                     configuration is written, on free ports; logs in\n"
"                     DIR/logs/coord-<k>.log; 'cluster down' stops them [0]\n"
"  --force            start on the data of an earlier cluster in DIR and\n"
"                     replace cluster NAME's configuration (epoch + 1, every\n"
"                     shard on all N, replica 1 primary): records that only\n"
"                     other replicas held may be lost\n"
"  -o KEY=VALUE       any dxl-replica config key, for every replica\n"
"                     (dxl-replica --help lists them); repeatable; not the\n"
"                     keys the options above set (replica.node_id,\n"
"                     replica.data_dir, replica.shards, replica.durability,\n"
"                     fabric.provider, zk.connect, zk.cluster)\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP, MAX_REPLICAS, DXL_REPLICA_MAX_SHARDS, STATE_MAX_COORDS);
}

static void zk_script(char *script, size_t cap)
{
	const char *sd = getenv("DXL_SCRIPTS");
	if (sd)
		snprintf(script, cap, "%s/zk.sh", sd);
	else
		snprintf(script, cap, "%s/../../scripts/zk.sh", g_self_dir);
}

/* zk_running -- the ZooKeeper an earlier 'cluster up' started in DIR/zk
 * still runs (its pid file names a live ZooKeeper server) */
static bool zk_running(const char *dir)
{
	char path[PATH_MAX + 32], buf[PATH_MAX];
	snprintf(path, sizeof(path), "%s/zk/s1/pid", dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	int pid = 0;
	bool ok = fscanf(f, "%d", &pid) == 1;
	fclose(f);
	if (!ok || !pid_alive(pid))
		return false;
	snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	for (size_t i = 0; i < n; i++)
		if (!buf[i])
			buf[i] = ' ';
	buf[n] = 0;
	return strstr(buf, "QuorumPeerMain") && strstr(buf, "zoo.cfg");
}

/* start_zk -- scripts/zk.sh start DIR/zk (which reuses a server of DIR/zk
 * that still runs); the connect string into s->c.zk */
static int start_zk(struct state *s, const char *dir)
{
	char script[PATH_MAX + 32];
	zk_script(script, sizeof(script));
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

static int stop_zk(const char *zk_dir)
{
	char script[PATH_MAX + 32], cmd[4 * PATH_MAX + 64];
	zk_script(script, sizeof(script));
	snprintf(cmd, sizeof(cmd), "'%s' stop '%s'", script, zk_dir);
	return system(cmd) == 0 ? 0 : -1;
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
		for (uint32_t sh = 0; !ret && sh < s->nshards; sh++) {
			ret = dxl_cluster_config_set_shard(&cfg, sh, s->ids[0], s->ids + 1,
							   s->nreplicas - 1);
			/* each member's data identity, as the CM records it
			 * (docs/replica.md): a member restarted on an empty
			 * data directory is then not taken for this one */
			for (uint32_t i = 0; !ret && i < s->nreplicas; i++) {
				const struct dxl_shard_desc *sd = dxl_replica_desc_shard(&d[i], sh);
				if (sd && sd->data_id)
					ret = dxl_cluster_config_set_data_id(&cfg, sh, s->ids[i],
									     sd->data_id);
			}
		}
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

/* the keys 'cluster up' sets itself, and the option that sets each */
static const char *const g_own_keys[][2] = {
	{"replica.node_id", "node ids are 1..N (--replicas)"},
	{"replica.data_dir", "DIR/data/<id> (--dir)"},
	{"replica.shards", "--shards"},
	{"replica.durability", "--durability"},
	{"fabric.provider", "--provider"},
	{"zk.connect", "--zk"},
	{"zk.cluster", "--cluster"},
};

/*
 * check_replica_opts -- every -o key and value as each replica will get it
 * (dxl-replica's own parser, dxl_replica_cfg_load): 0 or EX_USAGE with a
 * message. Nothing has been started yet.
 */
static int check_replica_opts(const char *dir, const struct state *s, const char *zkc,
			      uint32_t nextra, const char *const *extra)
{
	for (uint32_t i = 0; i < nextra; i++) {
		size_t kl = strcspn(extra[i], "=");
		for (size_t k = 0; k < sizeof(g_own_keys) / sizeof(g_own_keys[0]); k++)
			if (kl == strlen(g_own_keys[k][0]) &&
			    !strncmp(extra[i], g_own_keys[k][0], kl)) {
				errf("-o '%s': 'cluster up' sets %s itself (%s)", extra[i],
				     g_own_keys[k][0], g_own_keys[k][1]);
				return EX_USAGE;
			}
	}
	struct dxl_config *conf = NULL;
	int ret = dxl_config_new(&conf);
	char data[PATH_MAX + 32], shards[32];
	snprintf(data, sizeof(data), "%s/data/1", dir);
	snprintf(shards, sizeof(shards), s->nshards == 1 ? "0" : "0-%u", s->nshards - 1);
	const char *sets[][2] = {
		{"replica.node_id", "1"},
		{"replica.data_dir", data},
		{"zk.connect", zkc ? zkc : "127.0.0.1:2181"},
		{"zk.cluster", s->c.cluster},
		{"fabric.provider", s->provider},
		{"replica.durability", s->durability},
		{"replica.shards", shards},
	};
	for (size_t k = 0; !ret && k < sizeof(sets) / sizeof(sets[0]); k++)
		ret = dxl_config_set(conf, sets[k][0], sets[k][1]);
	for (uint32_t i = 0; !ret && i < s->nopts; i++)
		ret = dxl_config_set_arg(conf, s->opts[i]);
	struct dxl_replica_cfg rc;
	dxl_replica_cfg_init(&rc);
	if (!ret)
		ret = dxl_replica_cfg_load(conf, &rc);
	dxl_config_delete(&conf);
	if (ret) {
		errf("the replicas' options: %s", dxl_errmsg());
		return EX_USAGE;
	}
	/* one host: a fixed fabric port would be taken by the first replica */
	char host[256];
	uint16_t port = 0;
	if (s->nreplicas > 1 && rc.fabric.listen_addr[0] &&
	    !dxl_parse_hostport(rc.fabric.listen_addr, host, sizeof(host), &port) && port) {
		errf("-o fabric.listen=%s: %u replicas cannot listen on one port (use port 0)",
		     rc.fabric.listen_addr, s->nreplicas);
		return EX_USAGE;
	}
	return 0;
}

static volatile sig_atomic_t g_up_stop;

static void on_up_signal(int sig)
{
	(void)sig;
	g_up_stop = 1;
}

/* what a start began, for undo_start */
struct up_undo {
	bool old_state;       /* DIR/cluster.json existed */
	char *old_json;       /* its bytes */
	size_t old_len;
	bool zk_started;      /* this start started ZooKeeper in DIR/zk */
	bool zk_dir_new;      /* ... and DIR/zk did not exist before */
	bool data_new[MAX_REPLICAS]; /* DIR/data/<id> did not exist before */
	bool data_parent_new; /* DIR/data did not exist */
};

static char *slurp_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = NULL;
	size_t cap = 0, n = 0, r;
	do {
		if (cap - n < 4096) {
			char *nb = realloc(buf, cap + 65536);
			if (!nb) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = nb;
			cap += 65536;
		}
		r = fread(buf + n, 1, cap - n, f);
		n += r;
	} while (r > 0);
	fclose(f);
	*len = n;
	return buf;
}

/* stop_pids -- SIGTERM each live pid of prog, wait up to ms, SIGKILL the
 * rest; returns how many would not die */
static int stop_pids(pid_t *pids, uint32_t n, const char *prog, uint64_t ms)
{
	bool sent[MAX_REPLICAS + STATE_MAX_COORDS] = {false};
	for (uint32_t i = 0; i < n; i++)
		if (pids[i] > 0 && pid_alive(pids[i]) && is_prog(pids[i], prog))
			sent[i] = kill(pids[i], SIGTERM) == 0;
	uint64_t end = dxl_now_ms() + ms;
	for (;;) {
		bool any = false;
		for (uint32_t i = 0; i < n; i++) {
			if (sent[i])
				waitpid(pids[i], NULL, WNOHANG); /* our children: reap */
			any |= sent[i] && pid_alive(pids[i]);
		}
		if (!any || dxl_now_ms() > end)
			break;
		usleep(20000);
	}
	int left = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (!sent[i] || !pid_alive(pids[i]))
			continue;
		kill(pids[i], SIGKILL);
		uint64_t e2 = dxl_now_ms() + 2000;
		while (pid_alive(pids[i]) && dxl_now_ms() < e2) {
			waitpid(pids[i], NULL, WNOHANG);
			usleep(10000);
		}
		left += pid_alive(pids[i]);
	}
	return left;
}

/* undo_start -- stop what this start began, remove the data directories it
 * created, restore DIR/cluster.json; say what was done */
static void undo_start(const char *dir, struct state *s, struct up_undo *u)
{
	char done[1024] = "";
	size_t o = 0;
#define DONE(...) (o += (size_t)snprintf(done + o, o < sizeof(done) ? sizeof(done) - o : 0, __VA_ARGS__))
	int left = 0;
	if (s->ncoords) {
		left += stop_pids(s->coord_pids, s->ncoords, "dxl-coord", 12000);
		DONE("%s%u coordinator(s) stopped", o ? "; " : "", s->ncoords);
	}
	if (s->nreplicas) {
		int l = stop_pids(s->pids, s->nreplicas, "dxl-replica", 10000);
		left += l;
		DONE("%s%u replica(s) stopped", o ? "; " : "", s->nreplicas);
		uint32_t removed = 0;
		for (uint32_t i = 0; i < s->nreplicas; i++) {
			char data[PATH_MAX + 32];
			snprintf(data, sizeof(data), "%s/data/%u", dir, s->ids[i]);
			if (u->data_new[i] && !pid_alive(s->pids[i]) && rm_tree(data) == 0)
				removed++;
		}
		if (removed)
			DONE("; %u new data director%s removed", removed, removed == 1 ? "y" : "ies");
	}
	if (u->data_parent_new) {
		char data[PATH_MAX + 32];
		snprintf(data, sizeof(data), "%s/data", dir);
		rmdir(data);
	}
	if (u->zk_started && s->zk_dir[0]) {
		if (stop_zk(s->zk_dir) == 0) {
			DONE("%sZooKeeper stopped", o ? "; " : "");
			if (u->zk_dir_new && rm_tree(s->zk_dir) == 0)
				DONE(" and %s removed", s->zk_dir);
		} else {
			DONE("%sZooKeeper in %s did NOT stop", o ? "; " : "", s->zk_dir);
			left++;
		}
	}
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/cluster.json", dir);
	if (left) {
		/* something still runs: cluster.json keeps listing it for 'down' */
		DONE("%s%d process(es) still running: cluster.json lists them", o ? "; " : "",
		     left);
	} else if (u->old_state) {
		FILE *f = fopen(path, "wb");
		if (f && fwrite(u->old_json, 1, u->old_len, f) == u->old_len && !fclose(f))
			DONE("%scluster.json restored", o ? "; " : "");
		else
			DONE("%scluster.json NOT restored (%s)", o ? "; " : "", strerror(errno));
	} else if (unlink(path) == 0 || errno == ENOENT) {
		DONE("%scluster.json removed", o ? "; " : "");
	}
#undef DONE
	fprintf(stderr, "%s: the start failed and was undone: %s; the logs stay in %s/logs\n",
		g_cmd, o ? done : "nothing had started", dir);
}

/* wait_coord -- until coordinator k (pid) says "serving on" in its log
 * (from offset off), at most 30 s; its id and address */
static int wait_coord(const char *dir, uint32_t k, pid_t pid, long off, uint32_t *id,
		      char *addr, size_t cap)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/logs/coord-%u.log", dir, k);
	uint64_t end = dxl_now_ms() + 30000;
	while (dxl_now_ms() < end && !g_up_stop) {
		FILE *f = fopen(path, "r");
		if (f) {
			char line[1024];
			fseek(f, off, SEEK_SET);
			while (fgets(line, sizeof(line), f)) {
				char a[256];
				if (sscanf(line, "dxl-coord: coordinator %u serving on %255s", id, a) == 2) {
					snprintf(addr, cap, "%s", a);
					fclose(f);
					return 0;
				}
			}
			fclose(f);
		}
		if (waitpid(pid, NULL, WNOHANG) == pid || !pid_alive(pid)) {
			errf("coordinator %u (pid %d) exited during start-up", k, (int)pid);
			fprintf(stderr, "--- last lines of %s ---\n", path);
			char cmd[PATH_MAX + 96];
			snprintf(cmd, sizeof(cmd), "tail -n 5 '%s' >&2", path);
			if (system(cmd) != 0)
				fprintf(stderr, "(unreadable)\n");
			return EX_FAIL;
		}
		usleep(50000);
	}
	if (!g_up_stop)
		errf("coordinator %u (pid %d) was not serving within 30 s (see %s)", k, (int)pid,
		     path);
	return EX_FAIL;
}

static pid_t spawn_coord(const char *dir, const struct state *s, uint32_t k,
			 const char *session_timeout, long *off)
{
	char bin[PATH_MAX + 16], log[PATH_MAX + 64];
	snprintf(bin, sizeof(bin), "%s/dxl-coord", g_self_dir);
	snprintf(log, sizeof(log), "%s/logs/coord-%u.log", dir, k);
	const char *argv[] = {bin, "--zk", s->c.zk, "--cluster", s->c.cluster,
			      "--listen", "127.0.0.1:0", "--session-timeout", session_timeout,
			      NULL};
	return spawn_daemon(argv, log, false, off);
}

/* start coordinators 1..n, each recorded in the state file before it is
 * waited for (a failed start undoes what the state names); their ids and
 * addresses into ids[] and addrs[] (cluster up and cluster start) */
static int start_coords(const char *dir, struct state *s, uint32_t n, const char *session,
			uint32_t *ids, char (*addrs)[256])
{
	for (uint32_t k = 0; k < n; k++) {
		long off = 0;
		pid_t p = spawn_coord(dir, s, k + 1, session, &off);
		if (p < 0)
			return EX_FAIL;
		s->coord_pids[s->ncoords++] = p;
		if (state_write(dir, s))
			return EX_FAIL;
		int ret = wait_coord(dir, k + 1, p, off, &ids[k], addrs[k], sizeof(addrs[k]));
		if (ret)
			return ret;
		if (g_up_stop) {
			errf("interrupted");
			return EX_FAIL;
		}
	}
	return 0;
}

/* dir_nonempty -- path is a directory with an entry other than . and .. */
static bool dir_nonempty(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return false;
	struct dirent *e;
	bool any = false;
	while (!any && (e = readdir(d)))
		any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return any;
}

/* check_no_config -- cluster c has no configuration in ZooKeeper yet: 0,
 * else EX_FAIL (or EX_ZK) with a message; 'cluster up' never replaces
 * another cluster's configuration without --force */
static int check_no_config(struct dxl_zk *zk, const struct conn *c)
{
	struct dxl_cluster_config old;
	int r = dxl_cluster_config_read(zk, &old, NULL);
	if (r == DXL_E_NOENT)
		return 0;
	if (r == 0) {
		char shards[256];
		shard_list(&old, shards, sizeof(shards));
		errf("cluster %s already has a configuration in ZooKeeper %s (epoch %llu, %u "
		     "node(s), shards %s): refused, nothing of it changed. Use another "
		     "--cluster, or --force to replace it", c->cluster, c->zk,
		     (unsigned long long)old.epoch, old.nnodes, shards);
		dxl_cluster_config_clear(&old);
		return EX_FAIL;
	}
	errf("reading the configuration of cluster %s: %s", c->cluster, dxl_errmsg());
	return r == DXL_E_UNAVAIL ? EX_ZK : EX_FAIL;
}

int cmd_cluster_up(int argc, char **argv)
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
		{"session-timeout", required_argument, NULL, 'T'},
		{"min-replicas", required_argument, NULL, 'm'},
		{"coordinators", required_argument, NULL, 'c'},
		{"force", no_argument, NULL, 'F'},
		{"option", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir0 = "./dxl-cluster", *zkc = NULL, *cluster = "default";
	const char *session_timeout = "2000", *min_replicas = NULL;
	const char *extra[STATE_MAX_OPTS];
	uint32_t nextra = 0, ncoords = 0, min_rep = 0;
	const char *provider = "tcp", *durability = "process", *ring_size = NULL,
		   *slots = NULL;
	uint32_t n = 3, ns = 2;
	bool force = false;
	int c;
	while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir0 = optarg; break;
		case 'T': {
			uint32_t v;
			if (parse_u32(optarg, &v) || v < 100 || v > 600000) {
				errf("--session-timeout '%s': milliseconds, 100..600000", optarg);
				return EX_USAGE;
			}
			session_timeout = optarg;
			break;
		}
		case 'm':
			if (parse_u32(optarg, &min_rep) || min_rep < 1 || min_rep > MAX_REPLICAS) {
				errf("--min-replicas '%s': want 1..%d", optarg, MAX_REPLICAS);
				return EX_USAGE;
			}
			min_replicas = optarg;
			break;
		case 'c':
			if (parse_u32(optarg, &ncoords) || ncoords > STATE_MAX_COORDS) {
				errf("--coordinators '%s': want 0..%d", optarg, STATE_MAX_COORDS);
				return EX_USAGE;
			}
			break;
		case 'o':
			if (!strchr(optarg, '=') || optarg[0] == '=' ||
			    strlen(optarg) >= sizeof(((struct state *)0)->opts[0])) {
				errf("-o '%s': want key=value (a dxl-replica config key)", optarg);
				return EX_USAGE;
			}
			if (nextra + 6 >= STATE_MAX_OPTS) {
				errf("-o: at most %d options", STATE_MAX_OPTS - 6);
				return EX_USAGE;
			}
			extra[nextra++] = optarg;
			break;
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
		case 'z':
			if (!optarg[0] || strlen(optarg) >= DXL_ZK_CONNECT_MAX) {
				errf("--zk '%s': want HOST:PORT[,HOST:PORT...]", optarg);
				return EX_USAGE;
			}
			zkc = optarg;
			break;
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
		case 'F': force = true; break;
		case 'h': up_usage(stdout); return EX_OK;
		default: up_usage(stderr); return EX_USAGE;
		}
	}
	if (optind < argc) {
		errf("unexpected argument '%s' (see --help)", argv[optind]);
		return EX_USAGE;
	}
	if (check_cluster_name(cluster))
		return EX_USAGE;
	if (min_replicas && min_rep > n) {
		errf("--min-replicas %u: more than the %u replicas (the CM could never remove "
		     "a dead member)", min_rep, n);
		return EX_USAGE;
	}
	if (strlen(dir0) + 64 >= PATH_MAX) {
		errf("--dir '%s': too long", dir0);
		return EX_USAGE;
	}
	/* the state as it will be (the directory's absolute path comes later:
	 * the replicas' options are checked against a placeholder of it) */
	static struct state s;
	memset(&s, 0, sizeof(s));
	snprintf(s.c.cluster, sizeof(s.c.cluster), "%s", cluster);
	s.nshards = ns;
	s.nreplicas = n;
	snprintf(s.provider, sizeof(s.provider), "%s", provider);
	snprintf(s.durability, sizeof(s.durability), "%s", durability);
	snprintf(s.opts[s.nopts++], sizeof(s.opts[0]), "zk.session_timeout_ms=%s", session_timeout);
	snprintf(s.opts[s.nopts++], sizeof(s.opts[0]), "cm.replication=%u", n);
	snprintf(s.opts[s.nopts++], sizeof(s.opts[0]), "cm.min_replicas=%s",
		 min_replicas ? min_replicas : (n >= 3 ? "2" : "1"));
	if (ring_size)
		snprintf(s.opts[s.nopts++], sizeof(s.opts[0]), "log.ring_size=%s", ring_size);
	if (slots)
		snprintf(s.opts[s.nopts++], sizeof(s.opts[0]), "log.writer_slots=%s", slots);
	for (uint32_t i = 0; i < nextra; i++)
		snprintf(s.opts[s.nopts++], sizeof(s.opts[0]), "%s", extra[i]);
	int ret;
	if ((ret = check_replica_opts(dir0, &s, zkc, nextra, extra)))
		return ret;
	/* what must be there before anything starts (exit 1) */
	char bin[PATH_MAX + 16];
	snprintf(bin, sizeof(bin), "%s/dxl-replica", g_self_dir);
	if (access(bin, X_OK) != 0) {
		errf("%s: %s (build it with make)", bin, strerror(errno));
		return EX_FAIL;
	}
	if (ncoords) {
		snprintf(bin, sizeof(bin), "%s/dxl-coord", g_self_dir);
		if (access(bin, X_OK) != 0) {
			errf("%s: %s (build it with make)", bin, strerror(errno));
			return EX_FAIL;
		}
	}
	if (!zkc) {
		char script[PATH_MAX + 32];
		zk_script(script, sizeof(script));
		if (access(script, X_OK) != 0) {
			errf("cannot start ZooKeeper: %s: %s (set DXL_SCRIPTS to the scripts "
			     "directory, or give --zk CONNECT)", script, strerror(errno));
			return EX_FAIL;
		}
	}
	/* a cluster of this directory that still runs: refused at once */
	char dir[PATH_MAX], sub[PATH_MAX + 16];
	if (realpath(dir0, dir)) {
		struct state old;
		char path[PATH_MAX + 32];
		snprintf(path, sizeof(path), "%s/cluster.json", dir);
		if (access(path, F_OK) == 0 && state_read(dir, &old) == 0) {
			for (uint32_t i = 0; i < old.nreplicas; i++)
				if (pid_alive(old.pids[i]) && is_replica(old.pids[i])) {
					errf("a cluster is already running from %s (replica %u, pid %d); "
					     "run 'dxl cluster down --dir %s' first", dir, old.ids[i],
					     (int)old.pids[i], dir);
					return EX_FAIL;
				}
			for (uint32_t i = 0; i < old.ncoords; i++)
				if (pid_alive(old.coord_pids[i]) && is_prog(old.coord_pids[i], "dxl-coord")) {
					errf("a coordinator of %s still runs (pid %d); run 'dxl cluster "
					     "down --dir %s' first", dir, (int)old.coord_pids[i], dir);
					return EX_FAIL;
				}
		}
		/* data of an earlier cluster: restarting every replica on it
		 * under a new configuration (replica 1 primary) could drop
		 * what only another replica held */
		for (uint32_t i = 0; !force && i <= n; i++) {
			/* data/1..N, and anything else in data/ (an earlier
			 * cluster's replica N+1 added with 'cluster add') */
			if (i < n)
				snprintf(path, sizeof(path), "%s/data/%u", dir, i + 1);
			else
				snprintf(path, sizeof(path), "%s/data", dir);
			if (dir_nonempty(path)) {
				errf("%s holds the data of an earlier cluster (stopped with 'cluster "
				     "down'?): refused, nothing started. 'dxl cluster start --dir %s' "
				     "starts that cluster again on its data under its last "
				     "configuration; or use another --dir, remove it, or give --force "
				     "to start on it under a new configuration (replica 1 primary: "
				     "records only other replicas held may be lost)", path, dir);
				return EX_FAIL;
			}
		}
		if (zkc && zk_running(dir)) {
			errf("the ZooKeeper an earlier 'cluster up' started in %s/zk still runs, and "
			     "this start uses --zk %s: run 'dxl cluster down --dir %s' first", dir,
			     zkc, dir);
			return EX_FAIL;
		}
	}
	/* a given ZooKeeper must answer before anything starts */
	struct dxl_zk *zk = NULL;
	if (zkc) {
		snprintf(s.c.zk, sizeof(s.c.zk), "%s", zkc);
		if ((ret = zk_connect(&s.c, &zk)))
			return ret;
		if (!force && (ret = check_no_config(zk, &s.c))) {
			dxl_zk_delete(&zk);
			return ret;
		}
	}
	if (mkdir_p(dir0) || !realpath(dir0, dir)) {
		errf("cannot create %s: %s", dir0, strerror(errno));
		dxl_zk_delete(&zk);
		return EX_FAIL;
	}
	static struct up_undo u;
	memset(&u, 0, sizeof(u));
	{
		char path[PATH_MAX + 32];
		snprintf(path, sizeof(path), "%s/cluster.json", dir);
		u.old_json = slurp_file(path, &u.old_len);
		u.old_state = u.old_json != NULL;
		snprintf(path, sizeof(path), "%s/zk", dir);
		u.zk_dir_new = access(path, F_OK) != 0;
		snprintf(path, sizeof(path), "%s/data", dir);
		u.data_parent_new = access(path, F_OK) != 0;
		for (uint32_t i = 0; i < n; i++) {
			snprintf(path, sizeof(path), "%s/data/%u", dir, i + 1);
			u.data_new[i] = access(path, F_OK) != 0;
		}
	}
	snprintf(sub, sizeof(sub), "%s/logs", dir);
	mkdir_p(sub);
	snprintf(sub, sizeof(sub), "%s/data", dir);
	mkdir_p(sub);
	/* from here on a failure (or SIGINT/SIGTERM/SIGHUP) undoes the start */
	struct sigaction sa, old_int, old_term, old_hup;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_up_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	sigaction(SIGHUP, &sa, &old_hup);
	g_up_stop = 0;
	uint32_t want = n;
	s.nreplicas = 0;
	ret = EX_OK;
	if (!zkc) {
		bool was_running = zk_running(dir);
		if ((ret = start_zk(&s, dir)) == 0 && !was_running)
			u.zk_started = true;
		else if (ret && !was_running)
			u.zk_started = true; /* it may have started half-way: stop it */
		if (!ret && (ret = zk_connect(&s.c, &zk)) == EX_USAGE)
			ret = EX_FAIL;
		if (!ret && !force)
			ret = check_no_config(zk, &s.c);
	}
	for (uint32_t i = 0; !ret && i < want && !g_up_stop; i++) {
		s.ids[i] = i + 1;
		s.pids[i] = spawn_replica(dir, &s, i + 1);
		if (s.pids[i] < 0) {
			ret = EX_FAIL;
			break;
		}
		s.nreplicas = i + 1;
		/* listed at once: an interrupted start leaves nothing 'down' cannot find */
		if (state_write(dir, &s))
			ret = EX_FAIL;
	}
	/* wait (bounded) until every replica is registered */
	static struct dxl_replica_desc d[MAX_REPLICAS];
	bool have[MAX_REPLICAS] = {false};
	uint32_t got = 0;
	uint64_t end = dxl_now_ms() + 30000;
	while (!ret && got < n) {
		if (g_up_stop) {
			errf("interrupted");
			ret = EX_FAIL;
			break;
		}
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
	/* the coordinators, once there is a configuration to work with */
	static uint32_t coord_ids[STATE_MAX_COORDS];
	static char coord_addrs[STATE_MAX_COORDS][256];
	if (!ret)
		ret = start_coords(dir, &s, ncoords, session_timeout, coord_ids, coord_addrs);
	dxl_zk_delete(&zk);
	if (ret) {
		undo_start(dir, &s, &u);
		free(u.old_json);
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGTERM, &old_term, NULL);
		sigaction(SIGHUP, &old_hup, NULL);
		return ret;
	}
	free(u.old_json);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGHUP, &old_hup, NULL);
	printf("cluster %s is up: %u replicas, %u shards, config epoch %llu\n", s.c.cluster, n,
	       ns, (unsigned long long)epoch);
	printf("zookeeper: %s%s\n", s.c.zk, s.zk_dir[0] ? " (started here)" : "");
	for (uint32_t i = 0; i < n; i++)
		printf("replica %u: pid %d addr %s\n", s.ids[i], (int)s.pids[i], d[i].addr);
	for (uint32_t k = 0; k < s.ncoords; k++)
		printf("coordinator %u: pid %d addr %s\n", coord_ids[k], (int)s.coord_pids[k],
		       coord_addrs[k]);
	printf("state: %s/cluster.json\nlogs:  %s/logs/replica-<id>.log\ndata:  %s/data/<id>\n",
	       dir, dir, dir);
	return EX_OK;
}

/* ---- dxl cluster down ------------------------------------------------------- */

static void down_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl cluster down [--dir DIR]\n"
"\n"
"Stop the cluster started by 'dxl cluster up --dir DIR': SIGTERM the\n"
"coordinators it started (they finish the transactions in flight), then every\n"
"replica listed in DIR/cluster.json (a clean shutdown), SIGKILL those still\n"
"running after 10 s, then stop the ZooKeeper 'cluster up' started (if any).\n"
"Data and logs stay in DIR, and the configuration in ZooKeeper: 'dxl cluster\n"
"start --dir DIR' starts the cluster again on them.\n"
"\n"
"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP);
}

/* term_wait -- SIGTERM every live pid of prog, wait up to ms, SIGKILL the
 * rest; one line per process; returns how many would not die */
static int term_wait(const pid_t *pids, const uint32_t *ids, uint32_t n, const char *prog,
		     const char *what, uint64_t ms)
{
	bool term[MAX_REPLICAS + STATE_MAX_COORDS] = {false};
	for (uint32_t i = 0; i < n; i++)
		if (pid_alive(pids[i]) && is_prog(pids[i], prog) && kill(pids[i], SIGTERM) == 0)
			term[i] = true;
		else
			printf("%s %u (pid %d): not running\n", what, ids[i], (int)pids[i]);
	uint64_t end = dxl_now_ms() + ms;
	for (;;) {
		bool any = false;
		for (uint32_t i = 0; i < n; i++)
			any |= term[i] && pid_alive(pids[i]);
		if (!any || dxl_now_ms() > end)
			break;
		usleep(20000);
	}
	int left = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (!term[i])
			continue;
		if (pid_alive(pids[i])) {
			kill(pids[i], SIGKILL);
			uint64_t e2 = dxl_now_ms() + 2000;
			while (pid_alive(pids[i]) && dxl_now_ms() < e2)
				usleep(10000);
			printf("%s %u (pid %d): killed (did not stop in %llu s)%s\n", what, ids[i],
			       (int)pids[i], (unsigned long long)(ms / 1000),
			       pid_alive(pids[i]) ? " -- STILL RUNNING" : "");
			left += pid_alive(pids[i]);
		} else {
			printf("%s %u (pid %d): stopped\n", what, ids[i], (int)pids[i]);
		}
	}
	return left;
}

int cmd_cluster_down(int argc, char **argv)
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
	static struct state s;
	int ret = state_read(dir, &s);
	if (ret)
		return ret;
	if (s.ncoords) {
		uint32_t ks[STATE_MAX_COORDS];
		for (uint32_t k = 0; k < s.ncoords; k++)
			ks[k] = k + 1;
		if (term_wait(s.coord_pids, ks, s.ncoords, "dxl-coord", "coordinator", 12000))
			ret = EX_FAIL;
	}
	if (term_wait(s.pids, s.ids, s.nreplicas, "dxl-replica", "replica", 10000))
		ret = EX_FAIL;
	if (s.zk_dir[0]) {
		if (stop_zk(s.zk_dir)) {
			errf("stopping ZooKeeper in %s failed", s.zk_dir);
			ret = EX_FAIL;
		} else {
			printf("zookeeper %s: stopped\n", s.c.zk);
		}
	}
	printf("cluster %s is down; data and logs remain in %s ('dxl cluster start --dir %s' "
	       "starts it again)\n", s.c.cluster, dir, dir);
	return ret;
}

/* ---- dxl cluster start ------------------------------------------------------ */

static void start_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl cluster start [--dir DIR] [--timeout MS]\n"
"\n"
"Start a stopped cluster again -- after 'dxl cluster down', or after the\n"
"machine rebooted -- on its data and under its last configuration: the\n"
"ZooKeeper 'cluster up' started in DIR/zk (on its data), every replica of\n"
"DIR/cluster.json on its data directory with its original options, then as\n"
"many coordinators as it had. Nothing is created anew and the configuration\n"
"is not rewritten: each replica recovers its shards from its data directory,\n"
"a member with its member mark serves at once, and the configuration\n"
"manager goes on from the configuration ZooKeeper holds.\n"
"\n"
"Before anything is started (ZooKeeper of DIR/zk aside, which the checks\n"
"need and a refusal stops again), the start is refused with the reason and\n"
"nothing changed when:\n"
"  - DIR/cluster.json is missing (exit 3) or one of its replicas or\n"
"    coordinators still runs (exit 1: 'dxl cluster status')\n"
"  - a replica's data directory DIR/data/<id> is missing or empty (exit 1)\n"
"  - ZooKeeper does not answer (exit 4), or has no configuration of the\n"
"    cluster (exit 3: it lost it -- a new or wiped ZooKeeper; 'dxl cluster up\n"
"    --force' starts anew on this data under a new configuration, replica 1\n"
"    primary, and records only other replicas held may be lost)\n"
"  - the configuration names a member that is not a replica of\n"
"    DIR/cluster.json (exit 1)\n"
"  - a shard has no member whose copy the configuration can trust (exit 1):\n"
"    one whose member mark DIR/data/<id>/shard-<s>.member names the data\n"
"    identity the configuration recorded for it and, with durability\n"
"    'process', this boot (the page cache of an earlier boot is gone). A\n"
"    member without such a mark is started too: it catches up from one that\n"
"    has it (a line says so).\n"
"  - a replica id is registered in ZooKeeper by a live process (exit 1); the\n"
"    registration of a process that died without closing its session (a\n"
"    crash, a reboot) is waited for until ZooKeeper expires it.\n"
"Then it waits until every shard of the configuration is served (each\n"
"member registered for the configuration's epoch and 'member' of the\n"
"shard) and every coordinator serves. A start that fails then is undone like\n"
"a failed 'cluster up' (what it started is stopped, cluster.json restored;\n"
"the data stays).\n"
"\n"
"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n"
"  --timeout MS       how long the shards may take to be served [60000]\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP);
}

/* the session timeout the replicas were started with (their -o options) */
static uint32_t state_session_ms(const struct state *s)
{
	uint32_t ms = 3000;
	for (uint32_t i = 0; i < s->nopts; i++)
		if (!strncmp(s->opts[i], "zk.session_timeout_ms=", 22))
			parse_u32(s->opts[i] + 22, &ms);
	return ms;
}

static void read_boot(char *buf, size_t cap)
{
	buf[0] = 0;
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (!f)
		return;
	if (!fgets(buf, (int)cap, f))
		buf[0] = 0;
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
}

/*
 * mark_trusted -- member node's copy of shard sh in DIR/data/<node> is the
 * one the configuration recorded (docs/replica.md "Member mark"): its mark
 * names the recorded data identity (any, when none is recorded) and, with
 * durability process, this boot. Otherwise false with the reason in why.
 */
static bool mark_trusted(const char *dir, const struct state *s,
			 const struct dxl_cluster_shard *sh, uint32_t node, const char *boot,
			 char *why, size_t cap)
{
	char path[PATH_MAX + 64], text[256] = "";
	snprintf(path, sizeof(path), "%s/data/%u/shard-%u.member", dir, node, sh->id);
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(why, cap, "no member mark data/%u/shard-%u.member (%s)", node, sh->id,
			 strerror(errno));
		return false;
	}
	size_t got = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[got] = 0;
	uint64_t id = 0;
	char b[64] = "";
	const char *bl = strstr(text, "\nboot_id=");
	if (bl)
		sscanf(bl + 9, "%63[^\n]", b);
	if (strncmp(text, "data_id=", 8) || sscanf(text + 8, "%" SCNx64, &id) != 1 || !id) {
		snprintf(why, cap, "data/%u/shard-%u.member is not a member mark", node, sh->id);
		return false;
	}
	uint64_t rec = dxl_cluster_shard_data_id(sh, node);
	if (rec && rec != id) {
		snprintf(why, cap, "its data identity 0x%" PRIx64 " is not the configuration's 0x%" PRIx64
			 " (the data directory was recreated)", id, rec);
		return false;
	}
	if (!strcmp(s->durability, "process") && (!boot[0] || strcmp(b, boot))) {
		snprintf(why, cap, "durability 'process': its mark is of another boot (%s), whose "
			 "page cache is gone", b[0] ? b : "none");
		return false;
	}
	return true;
}

/*
 * start_checks -- what must hold before any replica starts (see
 * start_usage), zk connected and the configuration read into cfg. 0 or an
 * exit code with a message.
 */
static int start_checks(const char *dir, const struct state *s, struct dxl_zk *zk,
			struct dxl_cluster_config *cfg)
{
	int r = dxl_cluster_config_read(zk, cfg, NULL);
	if (r == DXL_E_NOENT) {
		errf("ZooKeeper %s has no configuration of cluster %s: it lost it (a new or wiped "
		     "ZooKeeper?). Refused, nothing started. 'dxl cluster up --dir %s --force' "
		     "starts anew on this data under a new configuration (replica 1 primary: "
		     "records only other replicas held may be lost)", s->c.zk, s->c.cluster, dir);
		return EX_CLUSTER;
	}
	if (r) {
		errf("reading the configuration of cluster %s: %s", s->c.cluster, dxl_errmsg());
		return r == DXL_E_UNAVAIL ? EX_ZK : EX_FAIL;
	}
	char boot[64];
	read_boot(boot, sizeof(boot));
	for (uint32_t k = 0; k < cfg->nshards; k++) {
		const struct dxl_cluster_shard *sh = &cfg->shards[k];
		uint32_t ids[DXL_CONFIG_MAX_REPLICAS];
		uint32_t n = dxl_cluster_shard_members(sh, ids), trusted = 0;
		char whys[DXL_CONFIG_MAX_REPLICAS][384];
		for (uint32_t m = 0; m < n; m++) {
			bool listed = false;
			for (uint32_t i = 0; i < s->nreplicas; i++)
				listed |= s->ids[i] == ids[m];
			if (!listed) {
				errf("the configuration (epoch %llu) names node %u a member of shard %u, "
				     "but %s/cluster.json has no replica %u: refused, nothing started",
				     (unsigned long long)cfg->epoch, ids[m], sh->id, dir, ids[m]);
				return EX_FAIL;
			}
			whys[m][0] = 0;
			if (mark_trusted(dir, s, sh, ids[m], boot, whys[m], sizeof(whys[m])))
				trusted++;
		}
		if (!trusted) {
			errf("shard %u: none of its %u member(s) in the configuration (epoch %llu) holds "
			     "a copy it can trust -- the shard's acknowledged records cannot be "
			     "vouched for: refused, nothing started", sh->id, n,
			     (unsigned long long)cfg->epoch);
			for (uint32_t m = 0; m < n; m++)
				fprintf(stderr, "  replica %u: %s\n", ids[m], whys[m]);
			return EX_FAIL;
		}
		for (uint32_t m = 0; m < n; m++)
			if (whys[m][0])
				printf("shard %u: replica %u will catch up from a member (%s)\n", sh->id,
				       ids[m], whys[m]);
	}
	/* registrations: a live process elsewhere is refused; an expired
	 * process's session (a crash, a reboot) is waited for */
	uint64_t end = dxl_now_ms() + 3ull * state_session_ms(s) + 5000;
	bool said[MAX_REPLICAS] = {false};
	for (;;) {
		uint32_t held = 0;
		for (uint32_t i = 0; i < s->nreplicas; i++) {
			char *js = NULL;
			int64_t sess = 0;
			if (dxl_member_get(zk, s->ids[i], &js, &sess) != 0)
				continue;
			json_t *o = json_loads(js, 0, NULL);
			json_int_t p = 0;
			json_unpack(o, "{s?I}", "pid", &p);
			json_decref(o);
			free(js);
			if (p > 0 && pid_alive((pid_t)p) && is_replica((pid_t)p)) {
				errf("replica %u is registered in ZooKeeper by a running process (pid "
				     "%lld): refused, nothing started ('dxl cluster status')", s->ids[i],
				     (long long)p);
				return EX_FAIL;
			}
			if (!said[i])
				printf("replica %u: waiting until ZooKeeper expires the session of its "
				       "last process (pid %lld)\n", s->ids[i], (long long)p);
			said[i] = true;
			held++;
		}
		if (!held)
			return 0;
		if (dxl_now_ms() > end) {
			errf("%u replica id(s) still registered in ZooKeeper after %.1f s: refused, "
			     "nothing started", held, (double)(3ull * state_session_ms(s) + 5000) / 1000);
			return EX_FAIL;
		}
		usleep(200000);
	}
}

/* shards_served -- every shard of the current configuration has each member
 * registered for its epoch and 'member' of it: 1; 0 not yet (what is
 * missing in why); -1 on a ZooKeeper error */
static int shards_served(struct dxl_zk *zk, uint64_t *epoch, char *why, size_t cap)
{
	struct dxl_cluster_config cfg;
	if (dxl_cluster_config_read(zk, &cfg, NULL)) {
		snprintf(why, cap, "reading the configuration: %s", dxl_errmsg());
		return 0;
	}
	*epoch = cfg.epoch;
	int ok = 1;
	for (uint32_t k = 0; ok && k < cfg.nshards; k++) {
		const struct dxl_cluster_shard *sh = &cfg.shards[k];
		uint32_t ids[DXL_CONFIG_MAX_REPLICAS];
		uint32_t n = dxl_cluster_shard_members(sh, ids);
		for (uint32_t m = 0; ok && m < n; m++) {
			static struct dxl_replica_desc d;
			int r = get_desc(zk, ids[m], &d);
			if (r < 0) {
				ok = -1;
				break;
			}
			const struct dxl_shard_desc *sd = r ? NULL : dxl_replica_desc_shard(&d, sh->id);
			if (r)
				snprintf(why, cap, "shard %u: member %u not registered", sh->id, ids[m]);
			else if (d.cfg_epoch != cfg.epoch)
				snprintf(why, cap, "shard %u: member %u registered for epoch %llu, the "
					 "configuration's is %llu", sh->id, ids[m],
					 (unsigned long long)d.cfg_epoch, (unsigned long long)cfg.epoch);
			else if (!sd || sd->state != DXL_SHARD_MEMBER)
				snprintf(why, cap, "shard %u: member %u is %s", sh->id, ids[m],
					 sd ? dxl_shard_state_name(sd->state) : "not hosting it");
			else
				continue;
			ok = 0;
		}
	}
	dxl_cluster_config_clear(&cfg);
	return ok;
}

int cmd_cluster_start(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"timeout", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir0 = "./dxl-cluster";
	uint32_t timeout_ms = 60000;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir0 = optarg; break;
		case 't':
			if (parse_u32(optarg, &timeout_ms) || timeout_ms < 1000 ||
			    timeout_ms > 3600000) {
				errf("--timeout '%s': milliseconds, 1000..3600000", optarg);
				return EX_USAGE;
			}
			break;
		case 'h': start_usage(stdout); return EX_OK;
		default: start_usage(stderr); return EX_USAGE;
		}
	}
	if (optind < argc) {
		errf("unexpected argument '%s' (see --help)", argv[optind]);
		return EX_USAGE;
	}
	char dir[PATH_MAX];
	if (!realpath(dir0, dir)) {
		errf("%s: %s (no cluster started with 'dxl cluster up --dir %s')", dir0,
		     strerror(errno), dir0);
		return EX_CLUSTER;
	}
	static struct state s;
	int ret = state_read(dir, &s);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < s.nreplicas; i++)
		if (pid_alive(s.pids[i]) && is_replica(s.pids[i])) {
			errf("replica %u of %s runs (pid %d): the cluster is not stopped ('dxl cluster "
			     "status --dir %s'; 'dxl cluster restart' starts one replica)", s.ids[i],
			     dir, (int)s.pids[i], dir);
			return EX_FAIL;
		}
	for (uint32_t k = 0; k < s.ncoords; k++)
		if (pid_alive(s.coord_pids[k]) && is_prog(s.coord_pids[k], "dxl-coord")) {
			errf("a coordinator of %s runs (pid %d): 'dxl cluster down --dir %s' first",
			     dir, (int)s.coord_pids[k], dir);
			return EX_FAIL;
		}
	char bin[PATH_MAX + 16];
	snprintf(bin, sizeof(bin), "%s/dxl-replica", g_self_dir);
	if (access(bin, X_OK) != 0) {
		errf("%s: %s (build it with make)", bin, strerror(errno));
		return EX_FAIL;
	}
	for (uint32_t i = 0; i < s.nreplicas; i++) {
		char data[PATH_MAX + 32];
		snprintf(data, sizeof(data), "%s/data/%u", dir, s.ids[i]);
		if (!dir_nonempty(data)) {
			errf("%s (replica %u's data directory) is missing or empty: refused, nothing "
			     "started. A replica without its data is added anew with 'dxl cluster "
			     "add' once the cluster runs", data, s.ids[i]);
			return EX_FAIL;
		}
	}
	static struct up_undo u;
	memset(&u, 0, sizeof(u));
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/cluster.json", dir);
	u.old_json = slurp_file(path, &u.old_len);
	u.old_state = u.old_json != NULL;
	struct sigaction sa, old_int, old_term, old_hup;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_up_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	sigaction(SIGHUP, &sa, &old_hup);
	g_up_stop = 0;
	/* from here on cluster.json lists what this start started (pid 0: not
	 * started yet), for undo_start and 'cluster down' */
	uint32_t n = s.nreplicas, ncoords = s.ncoords;
	for (uint32_t i = 0; i < n; i++)
		s.pids[i] = 0;
	s.ncoords = 0;
	struct dxl_zk *zk = NULL;
	if (s.zk_dir[0]) {
		char zd[PATH_MAX + 8];
		snprintf(zd, sizeof(zd), "%s", s.zk_dir);
		bool was_running = zk_running(dir);
		u.zk_dir_new = access(zd, F_OK) != 0;
		ret = start_zk(&s, dir);
		u.zk_started = !was_running;
		if (!ret && strcmp(zd, s.zk_dir))
			printf("note: ZooKeeper of %s started in %s (cluster.json said %s)\n", dir,
			       s.zk_dir, zd);
	}
	if (!ret && (ret = zk_connect(&s.c, &zk)) == EX_USAGE)
		ret = EX_FAIL;
	struct dxl_cluster_config cfg;
	dxl_cluster_config_init(&cfg);
	if (!ret)
		ret = start_checks(dir, &s, zk, &cfg);
	uint64_t epoch0 = cfg.epoch;
	dxl_cluster_config_clear(&cfg);
	if (ret) {
		/* refused: only the ZooKeeper of DIR/zk may have been started */
		if (u.zk_started && s.zk_dir[0]) {
			stop_zk(s.zk_dir);
			if (u.zk_dir_new)
				rm_tree(s.zk_dir);
		}
		dxl_zk_delete(&zk);
		free(u.old_json);
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGTERM, &old_term, NULL);
		sigaction(SIGHUP, &old_hup, NULL);
		return ret;
	}
	uint32_t started = 0;
	for (uint32_t i = 0; !ret && i < n && !g_up_stop; i++) {
		pid_t p = spawn_replica(dir, &s, s.ids[i]);
		if (p < 0) {
			ret = EX_FAIL;
			break;
		}
		s.pids[i] = p;
		started++;
		if (state_write(dir, &s))
			ret = EX_FAIL;
	}
	if (!ret && started < n)
		ret = EX_FAIL; /* interrupted */
	/* every replica registered, and every shard served */
	uint64_t start = dxl_now_ms(), end = start + timeout_ms, epoch = 0;
	char why[512] = "";
	while (!ret) {
		if (g_up_stop) {
			errf("interrupted");
			ret = EX_FAIL;
			break;
		}
		for (uint32_t i = 0; !ret && i < n; i++)
			if (waitpid(s.pids[i], NULL, WNOHANG) == s.pids[i] || !pid_alive(s.pids[i])) {
				errf("replica %u (pid %d) exited during start-up", s.ids[i],
				     (int)s.pids[i]);
				log_tail(dir, s.ids[i]);
				ret = EX_FAIL;
			}
		if (ret)
			break;
		int r = shards_served(zk, &epoch, why, sizeof(why));
		if (r < 0) {
			ret = EX_FAIL;
			break;
		}
		if (r > 0)
			break;
		if (dxl_now_ms() > end) {
			errf("the shards were not all served within %.1f s (--timeout): %s (see "
			     "%s/logs)", (double)timeout_ms / 1000, why, dir);
			ret = EX_FAIL;
			break;
		}
		usleep(100000);
	}
	static uint32_t coord_ids[STATE_MAX_COORDS];
	static char coord_addrs[STATE_MAX_COORDS][256];
	char session[16];
	snprintf(session, sizeof(session), "%u", state_session_ms(&s));
	if (!ret)
		ret = start_coords(dir, &s, ncoords, session, coord_ids, coord_addrs);
	dxl_zk_delete(&zk);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGHUP, &old_hup, NULL);
	if (ret) {
		undo_start(dir, &s, &u);
		free(u.old_json);
		return ret;
	}
	free(u.old_json);
	printf("cluster %s is up again on its data: %u replicas, %u shards served in %.1f s, "
	       "config epoch %llu (was %llu when started)\n", s.c.cluster, n, s.nshards,
	       (double)(dxl_now_ms() - start) / 1000, (unsigned long long)epoch,
	       (unsigned long long)epoch0);
	printf("zookeeper: %s%s\n", s.c.zk, s.zk_dir[0] ? " (started here)" : "");
	for (uint32_t i = 0; i < n; i++)
		printf("replica %u: pid %d\n", s.ids[i], (int)s.pids[i]);
	for (uint32_t k = 0; k < s.ncoords; k++)
		printf("coordinator %u: pid %d addr %s\n", coord_ids[k], (int)s.coord_pids[k],
		       coord_addrs[k]);
	return EX_OK;
}
