/* cluster.c -- dxl cluster status|kill|restart|add (docs/cli.md); up and
 * down are in up.c */
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


/* ---- starting replicas (cluster up, restart, add) ---------------------- */

pid_t spawn_replica(const char *dir, const struct state *s, uint32_t id)
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
	/* 'dxl cluster kill --power-fail' = SIGUSR2: the tcp provider's
	 * power-failure model (docs/fabric.md) */
	return spawn_daemon(argv, log, !strcmp(s->provider, "tcp"), NULL);
}

pid_t spawn_daemon(const char *const *argv, const char *log, bool pf_signal, long *log_off)
{
	int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		errf("%s: %s", log, strerror(errno));
		return -1;
	}
	if (log_off)
		*log_off = lseek(fd, 0, SEEK_END);
	fflush(NULL);
	pid_t p = fork();
	if (p < 0) {
		errf("fork: %s", strerror(errno));
		close(fd);
		return -1;
	}
	if (p == 0) {
		setsid();
		if (pf_signal && !getenv("DXL_FABRIC_PF"))
			setenv("DXL_FABRIC_PF", "USR2:random", 1);
		int nul = open("/dev/null", O_RDONLY);
		if (nul >= 0)
			dup2(nul, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(fd);
	return p;
}

void log_tail(const char *dir, uint32_t id)
{
	char path[PATH_MAX + 64], cmd[PATH_MAX + 96];
	snprintf(path, sizeof(path), "%s/logs/replica-%u.log", dir, id);
	fprintf(stderr, "--- last lines of %s ---\n", path);
	snprintf(cmd, sizeof(cmd), "tail -n 5 '%s' >&2", path);
	if (system(cmd) != 0)
		fprintf(stderr, "(unreadable)\n");
}

/* ---- dxl cluster status ----------------------------------------------------- */

static void status_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl cluster status [--dir DIR | --zk CONNECT [--cluster NAME]\n"
"                          [--replication N]] [--json]\n"
"\n"
"Show, from ZooKeeper: the configuration manager (the elected replica); the\n"
"cluster configuration (epoch; per shard its members, primary first, each up\n"
"or DOWN (not registered), with the fullest ring's fill, the records it\n"
"retains and, for backups, how far its newest record is behind the\n"
"primary's -- statistics the replicas refresh every ~2 s); the registered\n"
"nodes (address, pid, the configuration epoch their regions are registered\n"
"for, and per hosted shard: member, catching_up, synced, joining or\n"
"unassigned); then what is MISSING: a shard with fewer members than the\n"
"replication it was started with (cm.replication of DIR/cluster.json, or\n"
"--replication), a replica of DIR/cluster.json that is not registered (a\n"
"removed member disappears from the configuration: it is named here).\n"
"\n"
"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n"
"  --zk CONNECT       ZooKeeper connect string (instead of DIR/cluster.json)\n"
"  --cluster NAME     cluster name with --zk [default]\n"
"  --replication N    with --zk: the members every shard should have\n"
"                     [not checked]\n"
"  --json             the same as one JSON object on stdout\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP
"    (status exits 1 when something is missing: a member of a shard down, a\n"
"    shard below its replication, a replica of cluster.json not registered;\n"
"    3 when there is no configuration)\n");
}

/* status_expect -- from DIR/cluster.json: the replicas it lists and the
 * replication they were started with (the last cm.replication=) */
static void status_expect(const struct state *st, uint32_t *replication)
{
	*replication = st->nreplicas;
	for (uint32_t i = 0; i < st->nopts; i++) {
		uint32_t v;
		if (!strncmp(st->opts[i], "cm.replication=", 15) &&
		    !parse_u32(st->opts[i] + 15, &v))
			*replication = v;
	}
}

int cmd_cluster_status(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"zk", required_argument, NULL, 'z'},
		{"cluster", required_argument, NULL, 'C'},
		{"replication", required_argument, NULL, 'r'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = "./dxl-cluster", *zkc = NULL, *cl = NULL;
	uint32_t want_rep = 0;
	bool as_json = false, rep_given = false;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'z': zkc = optarg; break;
		case 'C': cl = optarg; break;
		case 'r':
			if (parse_u32(optarg, &want_rep) || !want_rep || want_rep > MAX_REPLICAS) {
				errf("--replication '%s': want 1..%d", optarg, MAX_REPLICAS);
				return EX_USAGE;
			}
			rep_given = true;
			break;
		case 'j': as_json = true; break;
		case 'h': status_usage(stdout); return EX_OK;
		default: status_usage(stderr); return EX_USAGE;
		}
	}
	if (optind < argc) {
		errf("unexpected argument '%s' (see --help)", argv[optind]);
		return EX_USAGE;
	}
	if (rep_given && !zkc) {
		errf("--replication goes with --zk (with --dir it is read from DIR/cluster.json)");
		return EX_USAGE;
	}
	struct conn cn;
	int ret = resolve_conn(dir, zkc, cl, &cn);
	if (ret)
		return ret;
	static struct state st;
	memset(&st, 0, sizeof(st));
	bool have_state = !zkc && state_read(dir, &st) == 0;
	if (have_state)
		status_expect(&st, &want_rep);
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
	json_t *jo = json_object(), *jmissing = json_array();
	json_object_set_new(jo, "cluster", json_string(cn.cluster));
	json_object_set_new(jo, "zk", json_string(cn.zk));
	if (!as_json)
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
		json_object_set_new(jo, "cm", json_integer(id));
		if (!as_json)
			printf("configuration manager: node %lld\n", (long long)id);
	} else {
		json_object_set_new(jo, "cm", json_null());
		if (!as_json)
			printf("configuration manager: none elected\n");
	}
	free(cmdata);
	struct dxl_cluster_config cfg;
	r = dxl_cluster_config_read(zk, &cfg, NULL);
	char miss[128][160];
	uint32_t nmiss = 0;
#define MISS(...) do { if (nmiss < 128) snprintf(miss[nmiss++], sizeof(miss[0]), __VA_ARGS__); } while (0)
	if (r == DXL_E_NOENT) {
		if (!as_json)
			printf("config: none\n");
		json_object_set_new(jo, "config", json_null());
		ret = EX_CLUSTER;
	} else if (r) {
		errf("reading the configuration: %s", dxl_errmsg());
		ret = EX_FAIL;
	} else {
		json_t *jshards = json_array();
		if (!as_json)
			printf("config: epoch %llu, shards: %u, nodes: %u\n",
			       (unsigned long long)cfg.epoch, cfg.nshards, cfg.nnodes);
		for (uint32_t i = 0; i < cfg.nshards; i++) {
			const struct dxl_cluster_shard *sh = &cfg.shards[i];
			json_t *jmem = json_array();
			if (!as_json)
				printf("  shard %u:", sh->id);
			uint64_t pts = 0;
			uint32_t nup = 0;
			for (uint32_t j = 0; j <= sh->nbackups; j++) {
				uint32_t id = j ? sh->backups[j - 1] : sh->primary;
				const struct dxl_shard_desc *sd = NULL;
				for (size_t k = 0; k < nd; k++)
					if (ml.v[k].node_id == id && dok[k])
						sd = dxl_replica_desc_shard(&ds[k], sh->id);
				bool up = false;
				for (size_t k = 0; k < ml.n; k++)
					up |= ml.v[k].node_id == id;
				nup += up;
				if (!up)
					MISS("shard %u: member %u (%s) is DOWN (not registered)", sh->id,
					     id, j ? "backup" : "primary");
				char lag[48] = "";
				json_t *jm = json_pack("{s:i,s:s,s:b}", "id", (json_int_t)id, "role",
						       j ? "backup" : "primary", "up", up);
				if (sd && j == 0) {
					pts = sd->last_ts;
				} else if (sd && pts && sd->last_ts &&
					   DXL_HLC_PHYS(pts) >= DXL_HLC_PHYS(sd->last_ts)) {
					uint64_t l = DXL_HLC_PHYS(pts) - DXL_HLC_PHYS(sd->last_ts);
					snprintf(lag, sizeof(lag), ",lag %llums", (unsigned long long)l);
					json_object_set_new(jm, "lag_ms", json_integer((json_int_t)l));
				}
				if (sd) {
					json_object_set_new(jm, "fill_pct", json_integer(sd->fill_pct));
					json_object_set_new(jm, "records",
							    json_integer((json_int_t)sd->records));
				}
				json_array_append_new(jmem, jm);
				if (as_json)
					continue;
				if (sd)
					printf(" %u(%s%s,fill %u%%,%llu rec%s)", id, j ? "backup," : "primary,",
					       up ? "up" : "DOWN", sd->fill_pct,
					       (unsigned long long)sd->records, lag);
				else
					printf(" %u(%s%s)", id, j ? "backup," : "primary,", up ? "up" : "DOWN");
			}
			uint32_t nmem = sh->nbackups + 1;
			if (want_rep && nmem < want_rep)
				MISS("shard %u: %u of %u members (below its replication)", sh->id, nmem,
				     want_rep);
			if (!as_json)
				printf("%s\n", want_rep && nmem < want_rep ? "  <- UNDER-REPLICATED" : "");
			json_array_append_new(jshards,
					      json_pack("{s:i,s:o,s:i,s:i}", "id", (json_int_t)sh->id,
							"members", jmem, "live", (json_int_t)nup,
							"replication", (json_int_t)want_rep));
		}
		json_object_set_new(jo, "config",
				    json_pack("{s:I,s:o}", "epoch", (json_int_t)cfg.epoch,
					      "shards", jshards));
		dxl_cluster_config_clear(&cfg);
	}
	json_t *jnodes = json_array();
	if (!as_json)
		printf("nodes: %zu registered\n", ml.n);
	for (size_t k = 0; k < ml.n; k++) {
		json_t *o = json_loads(ml.v[k].payload, 0, NULL);
		json_int_t pid = 0;
		json_unpack(o, "{s?I}", "pid", &pid);
		json_decref(o);
		json_t *jn = json_pack("{s:i,s:I}", "id", (json_int_t)ml.v[k].node_id, "pid", pid);
		if (k < nd && dok[k]) {
			const struct dxl_replica_desc *d = &ds[k];
			json_t *jsh = json_object();
			for (uint32_t j = 0; j < d->nshards; j++) {
				char key[16];
				snprintf(key, sizeof(key), "%u", d->shards[j].shard);
				json_object_set_new(jsh, key,
						    json_string(dxl_shard_state_name(d->shards[j].state)));
			}
			json_object_set_new(jn, "addr", json_string(d->addr));
			json_object_set_new(jn, "provider",
					    json_string(dxl_fabric_provider_name(d->provider)));
			json_object_set_new(jn, "config_epoch", json_integer((json_int_t)d->cfg_epoch));
			json_object_set_new(jn, "reg_epoch", json_integer((json_int_t)d->reg_epoch));
			json_object_set_new(jn, "shards", jsh);
			if (!as_json) {
				printf("  node %u: addr %s provider %s pid %lld config epoch %llu reg_epoch %llu shards",
				       ml.v[k].node_id, d->addr, dxl_fabric_provider_name(d->provider),
				       (long long)pid, (unsigned long long)d->cfg_epoch,
				       (unsigned long long)d->reg_epoch);
				for (uint32_t j = 0; j < d->nshards; j++)
					printf(" %u=%s", d->shards[j].shard,
					       dxl_shard_state_name(d->shards[j].state));
				printf("\n");
			}
		} else if (!as_json) {
			printf("  node %u: (not a replica) pid %lld\n", ml.v[k].node_id,
			       (long long)pid);
		}
		json_array_append_new(jnodes, jn);
	}
	json_object_set_new(jo, "nodes", jnodes);
	/* the replicas cluster.json lists that are not registered */
	json_t *jabsent = json_array();
	for (uint32_t i = 0; have_state && i < st.nreplicas; i++) {
		bool reg = false;
		for (size_t k = 0; k < ml.n; k++)
			reg |= ml.v[k].node_id == st.ids[i];
		if (reg)
			continue;
		bool running = pid_alive(st.pids[i]) && is_replica(st.pids[i]);
		MISS("replica %u of %s/cluster.json is not registered (process %d %s)", st.ids[i],
		     dir, (int)st.pids[i], running ? "running" : "not running");
		json_array_append_new(jabsent, json_pack("{s:i,s:i,s:b}", "id",
							 (json_int_t)st.ids[i], "pid",
							 (json_int_t)st.pids[i], "running", running));
	}
#undef MISS
	json_object_set_new(jo, "absent", jabsent);
	for (uint32_t i = 0; i < nmiss; i++)
		json_array_append_new(jmissing, json_string(miss[i]));
	json_object_set_new(jo, "missing", jmissing);
	json_object_set_new(jo, "ok", json_boolean(!ret && !nmiss));
	if (as_json) {
		char *txt = json_dumps(jo, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		if (txt)
			printf("%s\n", txt);
		free(txt);
	} else if (nmiss) {
		printf("MISSING (%u):\n", nmiss);
		for (uint32_t i = 0; i < nmiss; i++)
			printf("  %s\n", miss[i]);
	}
	json_decref(jo);
	dxl_member_list_free(&ml);
	dxl_zk_delete(&zk);
	if (!ret && nmiss)
		ret = EX_FAIL;
	return ret;
}

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
	uint32_t node_arg;
	if (parse_u32(argv[optind], &node_arg)) { /* before any file is read */
		errf("'%s' is not a node id", argv[optind]);
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
				/* a replica registers before it applies a configuration
				 * (cfg_epoch 0 then, e.g. after a power failure): the
				 * cluster's epoch, and whether the replica has it yet */
				struct dxl_cluster_config cc;
				unsigned long long ce = 0;
				if (dxl_cluster_config_read(zk, &cc, NULL) == 0) {
					ce = (unsigned long long)cc.epoch;
					dxl_cluster_config_clear(&cc);
				}
				char applied[96];
				if (d.cfg_epoch)
					snprintf(applied, sizeof(applied), "applied epoch %llu",
						 (unsigned long long)d.cfg_epoch);
				else
					snprintf(applied, sizeof(applied), "no configuration applied yet");
				printf("replica %u: registered after %.1f s, addr %s; cluster config epoch "
				       "%llu, %s\n",
				       s->ids[i], (double)(dxl_now_ms() - start) / 1000, d.addr, ce,
				       applied);
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
	uint32_t node_arg;
	if (parse_u32(argv[optind], &node_arg)) { /* before any file is read */
		errf("'%s' is not a node id", argv[optind]);
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
