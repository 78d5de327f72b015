/* cluster.c -- dxl cluster up|status|down (docs/cli.md) */
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

#include "cli.h"


/* ---- dxl cluster up ------------------------------------------------------- */

static void up_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl cluster up [--dir DIR] [--replicas N] [--shards S] [--zk CONNECT]\n"
"                      [--cluster NAME] [--provider tcp] [--durability MODE]\n"
"                      [--ring-size BYTES] [--writer-slots W]\n"
"                      [--session-timeout MS] [--min-replicas M] [-o KEY=VALUE]...\n"
"\n"
"Start a local cluster: N dxl-replica processes (node ids 1..N) each hosting\n"
"shards 0..S-1 (every shard on every replica, replica 1 primary), registered\n"
"in ZooKeeper, and the cluster configuration in /dxl/NAME/config (created, or\n"
"replaced with the next epoch). From then on the configuration manager (one\n"
"of the replicas, elected) changes it on failures: see docs/operations.md.\n"
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
"  --session-timeout MS  ZooKeeper session timeout of the replicas = failure\n"
"                     detection time [2000]\n"
"  --min-replicas M   cm.min_replicas: the CM never shrinks a shard below M\n"
"                     live members (it reports it unavailable instead)\n"
"                     [2 with 3+ replicas, else 1]\n"
"  -o KEY=VALUE       any dxl-replica config key, for every replica\n"
"                     (dxl-replica --help lists them); repeatable\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP, MAX_REPLICAS, DXL_REPLICA_MAX_SHARDS);
}

static pid_t spawn_replica(const char *dir, const struct state *s, uint32_t id)
{
	char bin[PATH_MAX + 16], data[PATH_MAX + 32], log[PATH_MAX + 64], nid[16],
		shards[32];
	snprintf(bin, sizeof(bin), "%s/dxl-replica", g_self_dir);
	snprintf(data, sizeof(data), "%s/data/%u", dir, id);
	snprintf(log, sizeof(log), "%s/logs/replica-%u.log", dir, id);
	snprintf(nid, sizeof(nid), "%u", id);
	if (s->nshards == 1)
		snprintf(shards, sizeof(shards), "0");
	else
		snprintf(shards, sizeof(shards), "0-%u", s->nshards - 1);
	const char *argv[32 + 2 * STATE_MAX_OPTS];
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
	argv[a++] = s->provider;
	argv[a++] = "--durability";
	argv[a++] = s->durability;
	argv[a++] = "--shards";
	argv[a++] = shards;
	for (uint32_t i = 0; i < s->nopts; i++) {
		argv[a++] = "-o";
		argv[a++] = s->opts[i];
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
		/* 'dxl cluster kill --power-fail' = SIGUSR2: the tcp provider's
		 * power-failure model (docs/fabric.md) */
		if (!strcmp(s->provider, "tcp") && !getenv("DXL_FABRIC_PF"))
			setenv("DXL_FABRIC_PF", "USR2:random", 1);
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
		{"option", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir0 = "./dxl-cluster", *zkc = NULL, *cluster = "default";
	const char *session_timeout = "2000", *min_replicas = NULL;
	const char *extra[STATE_MAX_OPTS];
	uint32_t nextra = 0;
	const char *provider = "tcp", *durability = "process", *ring_size = NULL,
		   *slots = NULL;
	uint32_t n = 3, ns = 2;
	int c;
	while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir0 = optarg; break;
		case 'T': {
			uint32_t v;
			if (parse_u32(optarg, &v) || v < 100) {
				errf("--session-timeout '%s': milliseconds, >= 100", optarg);
				return EX_USAGE;
			}
			session_timeout = optarg;
			break;
		}
		case 'm': {
			uint32_t v;
			if (parse_u32(optarg, &v) || v < 1 || v > MAX_REPLICAS) {
				errf("--min-replicas '%s': want 1..%d", optarg, MAX_REPLICAS);
				return EX_USAGE;
			}
			min_replicas = optarg;
			break;
		}
		case 'o':
			if (!strchr(optarg, '=') || strlen(optarg) >= sizeof(((struct state *)0)->opts[0])) {
				errf("-o '%s': want key=value (a dxl-replica config key)", optarg);
				return EX_USAGE;
			}
			if (nextra + 4 >= STATE_MAX_OPTS) {
				errf("-o: at most %d options", STATE_MAX_OPTS - 4);
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
	if (zkc)
		snprintf(s.c.zk, sizeof(s.c.zk), "%s", zkc);
	else if ((ret = start_zk(&s, dir)))
		return ret;
	for (uint32_t i = 0; i < n; i++) {
		s.ids[i] = i + 1;
		s.pids[i] = spawn_replica(dir, &s, i + 1);
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
"Show, from ZooKeeper: the configuration manager (the elected replica); the\n"
"cluster configuration (epoch; per shard its members, primary first, each up\n"
"or DOWN (not registered), with the fullest ring's fill, the records it\n"
"retains and, for backups, how far its newest record is behind the\n"
"primary's -- statistics the replicas refresh every ~2 s); the registered\n"
"nodes (address, pid, the configuration epoch their regions are registered\n"
"for, and per hosted shard: member, catching_up, synced or unassigned).\n"
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

int cmd_cluster_status(int argc, char **argv)
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
	/* the descriptors of the live nodes */
	static struct dxl_replica_desc ds[64];
	bool dok[64] = {false};
	size_t nd = ml.n < 64 ? ml.n : 64;
	for (size_t k = 0; k < nd; k++)
		dok[k] = dxl_replica_desc_decode(ml.v[k].payload, strlen(ml.v[k].payload),
						 &ds[k]) == 0;
	char *cmdata = NULL;
	int64_t cmseq = -1;
	if (dxl_election_leader(zk, DXL_ELECTION_CM, &cmdata, &cmseq) == 0 && cmdata) {
		json_t *o = json_loads(cmdata, 0, NULL);
		json_int_t id = 0;
		json_unpack(o, "{s?I}", "node_id", &id);
		json_decref(o);
		printf("configuration manager: node %lld\n", (long long)id);
	} else {
		printf("configuration manager: none elected\n");
	}
	free(cmdata);
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
			const struct dxl_cluster_shard *sh = &cfg.shards[i];
			printf("  shard %u:", sh->id);
			uint64_t pts = 0;
			for (uint32_t j = 0; j <= sh->nbackups; j++) {
				uint32_t id = j ? sh->backups[j - 1] : sh->primary;
				const struct dxl_shard_desc *sd = NULL;
				for (size_t k = 0; k < nd; k++)
					if (ml.v[k].node_id == id && dok[k])
						sd = dxl_replica_desc_shard(&ds[k], sh->id);
				bool up = false;
				for (size_t k = 0; k < ml.n; k++)
					up |= ml.v[k].node_id == id;
				all_up &= up;
				char lag[48] = "";
				if (sd && j == 0)
					pts = sd->last_ts;
				else if (sd && pts && sd->last_ts && DXL_HLC_PHYS(pts) >= DXL_HLC_PHYS(sd->last_ts))
					snprintf(lag, sizeof(lag), ",lag %llums",
						 (unsigned long long)(DXL_HLC_PHYS(pts) -
								      DXL_HLC_PHYS(sd->last_ts)));
				if (sd)
					printf(" %u(%s%s,fill %u%%,%llu rec%s)", id, j ? "backup," : "primary,",
					       up ? "up" : "DOWN", sd->fill_pct,
					       (unsigned long long)sd->records, lag);
				else
					printf(" %u(%s%s)", id, j ? "backup," : "primary,", up ? "up" : "DOWN");
			}
			printf("\n");
		}
		dxl_cluster_config_clear(&cfg);
	}
	printf("nodes: %zu registered\n", ml.n);
	for (size_t k = 0; k < ml.n; k++) {
		json_t *o = json_loads(ml.v[k].payload, 0, NULL);
		json_int_t pid = 0;
		json_unpack(o, "{s?I}", "pid", &pid);
		json_decref(o);
		if (k < nd && dok[k]) {
			const struct dxl_replica_desc *d = &ds[k];
			printf("  node %u: addr %s provider %s pid %lld config epoch %llu reg_epoch %llu shards",
			       ml.v[k].node_id, d->addr, dxl_fabric_provider_name(d->provider),
			       (long long)pid, (unsigned long long)d->cfg_epoch,
			       (unsigned long long)d->reg_epoch);
			for (uint32_t j = 0; j < d->nshards; j++)
				printf(" %u=%s", d->shards[j].shard,
				       dxl_shard_state_name(d->shards[j].state));
			printf("\n");
		} else {
			printf("  node %u: (not a replica) pid %lld\n", ml.v[k].node_id,
			       (long long)pid);
		}
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

/* ---- dxl cluster kill / restart --------------------------------------------- */

static void kill_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl cluster kill NODE [--signal KILL|TERM|STOP|CONT] [--power-fail]\n"
"                        [--dir DIR]\n"
"\n"
"Send a signal to replica NODE of the cluster started by 'dxl cluster up\n"
"--dir DIR', to exercise failure handling:\n"
"\n"
"  KILL  (default) the process dies at once; its ZooKeeper session expires\n"
"        after the session timeout and the configuration manager removes it\n"
"        from its shards (epoch + 1), promoting a backup where it was primary\n"
"  TERM  clean shutdown: its registration goes at once (faster failover)\n"
"  STOP  freeze it: past the session timeout it is removed like a dead one;\n"
"        after CONT it finds its lease lapsed, stops serving, and comes back\n"
"        as a new member after catching up (it is fenced: nothing it does\n"
"        after its removal reaches the log)\n"
"  CONT  resume a stopped replica\n"
"\n"
"  --power-fail       simulate a power failure instead (tcp provider): the\n"
"                     writes not yet flushed to its persistent regions are\n"
"                     lost line by line at random, then it dies (SIGUSR2,\n"
"                     docs/fabric.md 'power-failure model')\n"
"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n"
"  -h, --help         this text\n"
"\n"
"Bring it back with 'dxl cluster restart NODE'.\n"
"\n" EXIT_CODES_HELP);
}

static int find_node(const struct state *s, const char *arg, uint32_t *idx)
{
	uint32_t id;
	if (parse_u32(arg, &id)) {
		errf("'%s' is not a node id", arg);
		return EX_USAGE;
	}
	for (uint32_t i = 0; i < s->nreplicas; i++)
		if (s->ids[i] == id) {
			*idx = i;
			return 0;
		}
	errf("no replica %u in this cluster (it has node ids 1..%u)", id, s->nreplicas);
	return EX_CLUSTER;
}

int cmd_cluster_kill(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"signal", required_argument, NULL, 's'},
		{"power-fail", no_argument, NULL, 'P'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = "./dxl-cluster";
	int sig = SIGKILL;
	bool pf = false, have_sig = false;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 's': {
			const char *n = optarg;
			if (!strncasecmp(n, "SIG", 3))
				n += 3;
			if (!strcasecmp(n, "KILL"))
				sig = SIGKILL;
			else if (!strcasecmp(n, "TERM"))
				sig = SIGTERM;
			else if (!strcasecmp(n, "STOP"))
				sig = SIGSTOP;
			else if (!strcasecmp(n, "CONT"))
				sig = SIGCONT;
			else {
				errf("--signal '%s': want KILL, TERM, STOP or CONT", optarg);
				return EX_USAGE;
			}
			have_sig = true;
			break;
		}
		case 'P': pf = true; break;
		case 'h': kill_usage(stdout); return EX_OK;
		default: kill_usage(stderr); return EX_USAGE;
		}
	}
	if (optind + 1 != argc) {
		errf(optind >= argc ? "which NODE? (see --help)" : "one NODE only (see --help)");
		return EX_USAGE;
	}
	if (pf && have_sig) {
		errf("--power-fail and --signal exclude each other");
		return EX_USAGE;
	}
	struct state s;
	int ret = state_read(dir, &s);
	if (ret)
		return ret;
	uint32_t i;
	if ((ret = find_node(&s, argv[optind], &i)))
		return ret;
	if (pf && strcmp(s.provider, "tcp")) {
		errf("--power-fail needs the tcp provider (this cluster uses %s)", s.provider);
		return EX_USAGE;
	}
	pid_t pid = s.pids[i];
	if (!pid_alive(pid) || !is_replica(pid)) {
		errf("replica %u (pid %d) is not running", s.ids[i], (int)pid);
		return EX_FAIL;
	}
	if (pf)
		sig = SIGUSR2;
	if (kill(pid, sig)) {
		errf("kill %d: %s", (int)pid, strerror(errno));
		return EX_FAIL;
	}
	const char *what = pf ? "power failure (SIGUSR2)" : strsignal(sig);
	if (sig == SIGKILL || sig == SIGTERM || pf) {
		uint64_t end = dxl_now_ms() + 15000;
		while (pid_alive(pid) && dxl_now_ms() < end)
			usleep(10000);
		if (pid_alive(pid)) {
			errf("replica %u (pid %d) still running 15 s after %s", s.ids[i], (int)pid,
			     what);
			return EX_FAIL;
		}
		printf("replica %u (pid %d): %s; it is gone\n", s.ids[i], (int)pid, what);
	} else {
		printf("replica %u (pid %d): %s\n", s.ids[i], (int)pid, what);
	}
	return EX_OK;
}

/* wait_registered -- until replica i (pid) has registered nodes/<id> */
static int wait_registered(const char *dir, const struct state *s, uint32_t i, pid_t pid)
{
	int ret;
	struct dxl_zk *zk = NULL;
	if ((ret = zk_connect(&s->c, &zk)))
		return ret;
	uint64_t start = dxl_now_ms(), end = start + 60000;
	ret = EX_FAIL;
	while (dxl_now_ms() < end) {
		struct dxl_replica_desc d;
		char *json = NULL;
		int64_t sess = 0;
		if (dxl_member_get(zk, s->ids[i], &json, &sess) == 0) {
			json_t *o = json_loads(json, 0, NULL);
			json_int_t p = 0;
			json_unpack(o, "{s?I}", "pid", &p);
			json_decref(o);
			int r = dxl_replica_desc_decode(json, strlen(json), &d);
			free(json);
			if (r == 0 && p == pid) {
				printf("replica %u: registered after %.1f s, addr %s, config epoch %llu\n",
				       s->ids[i], (double)(dxl_now_ms() - start) / 1000, d.addr,
				       (unsigned long long)d.cfg_epoch);
				ret = EX_OK;
				break;
			}
		}
		if (!pid_alive(pid)) {
			errf("replica %u (pid %d) exited during start-up", s->ids[i], (int)pid);
			log_tail(dir, s->ids[i]);
			break;
		}
		usleep(50000);
	}
	if (ret && pid_alive(pid))
		errf("replica %u did not register within 60 s (see %s/logs/replica-%u.log)",
		     s->ids[i], dir, s->ids[i]);
	dxl_zk_delete(&zk);
	return ret;
}

static void restart_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl cluster restart NODE [--dir DIR] [--no-wait]\n"
"\n"
"Start replica NODE of the cluster started by 'dxl cluster up --dir DIR'\n"
"again, on its data directory and with its original options, and wait until\n"
"it is registered in ZooKeeper (the node id of a killed process stays taken\n"
"until its session expires: up to the session timeout). It recovers its\n"
"shards from its logs; a shard it is still a member of is served at once,\n"
"one it was removed from is copied from a member and the configuration\n"
"manager adds it back as a backup (dxl cluster status shows the states).\n"
"\n"
"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n"
"  --no-wait          do not wait for the registration\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP);
}

int cmd_cluster_restart(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"no-wait", no_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir0 = "./dxl-cluster";
	bool wait_reg = true;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir0 = optarg; break;
		case 'n': wait_reg = false; break;
		case 'h': restart_usage(stdout); return EX_OK;
		default: restart_usage(stderr); return EX_USAGE;
		}
	}
	if (optind + 1 != argc) {
		errf(optind >= argc ? "which NODE? (see --help)" : "one NODE only (see --help)");
		return EX_USAGE;
	}
	char dir[PATH_MAX];
	if (!realpath(dir0, dir)) {
		errf("%s: %s", dir0, strerror(errno));
		return EX_CLUSTER;
	}
	struct state s;
	int ret = state_read(dir, &s);
	if (ret)
		return ret;
	uint32_t i;
	if ((ret = find_node(&s, argv[optind], &i)))
		return ret;
	if (pid_alive(s.pids[i]) && is_replica(s.pids[i])) {
		errf("replica %u is running (pid %d): 'dxl cluster kill %u' first", s.ids[i],
		     (int)s.pids[i], s.ids[i]);
		return EX_FAIL;
	}
	pid_t pid = spawn_replica(dir, &s, s.ids[i]);
	if (pid < 0)
		return EX_FAIL;
	s.pids[i] = pid;
	if (state_write(dir, &s))
		return EX_FAIL;
	printf("replica %u: started, pid %d\n", s.ids[i], (int)pid);
	if (!wait_reg)
		return EX_OK;
	return wait_registered(dir, &s, i, pid);
}

/* ---- dxl cluster add ------------------------------------------------------------ */

static void add_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl cluster add [--dir DIR] [--no-wait]\n"
"\n"
"Start one more replica (the next node id) for the cluster started by 'dxl\n"
"cluster up --dir DIR', hosting every shard, with the cluster's options, on a\n"
"new data directory, and wait until it is registered in ZooKeeper. It is no\n"
"member of any shard yet: it copies each shard's log and, when its tables\n"
"miss records the members no longer keep in their logs, their tables (state\n"
"transfer, docs/recovery.md), while the shard keeps committing; then it says\n"
"synced and the configuration manager adds it as a backup while a shard has\n"
"fewer than cm.replication members. 'dxl cluster status' shows the states.\n"
"\n"
"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n"
"  --no-wait          do not wait for the registration\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP);
}

int cmd_cluster_add(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"no-wait", no_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir0 = "./dxl-cluster";
	bool wait_reg = true;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir0 = optarg; break;
		case 'n': wait_reg = false; break;
		case 'h': add_usage(stdout); return EX_OK;
		default: add_usage(stderr); return EX_USAGE;
		}
	}
	if (optind != argc) {
		errf("unexpected argument '%s' (see --help)", argv[optind]);
		return EX_USAGE;
	}
	char dir[PATH_MAX];
	if (!realpath(dir0, dir)) {
		errf("%s: %s", dir0, strerror(errno));
		return EX_CLUSTER;
	}
	struct state s;
	int ret = state_read(dir, &s);
	if (ret)
		return ret;
	if (s.nreplicas >= MAX_REPLICAS) {
		errf("the cluster has %u replicas already (at most %d)", s.nreplicas, MAX_REPLICAS);
		return EX_FAIL;
	}
	uint32_t id = 0;
	for (uint32_t k = 0; k < s.nreplicas; k++)
		id = s.ids[k] > id ? s.ids[k] : id;
	id++;
	char data[PATH_MAX + 32];
	snprintf(data, sizeof(data), "%s/data/%u", dir, id);
	if (access(data, F_OK) == 0) {
		errf("%s exists: a replica %u ran here before ('dxl cluster restart' is for a "
		     "listed one)", data, id);
		return EX_FAIL;
	}
	uint32_t i = s.nreplicas;
	pid_t pid = spawn_replica(dir, &s, id);
	if (pid < 0)
		return EX_FAIL;
	s.ids[i] = id;
	s.pids[i] = pid;
	s.nreplicas++;
	if (state_write(dir, &s))
		return EX_FAIL;
	printf("replica %u: added, pid %d\n", id, (int)pid);
	if (!wait_reg)
		return EX_OK;
	return wait_registered(dir, &s, i, pid);
}
