/* main.c -- dxl-replica: the replica daemon (docs/replica.md, docs/operations.md) */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "common/config.h"
#include "dxl/replica.h"

/* exit codes (also in --help and docs/replica.md) */
enum {
	EX_CLEAN = 0,    /* clean shutdown after SIGTERM/SIGINT */
	EX_RUNTIME = 1,  /* the service failed after start-up */
	EX_USAGE = 2,    /* bad command line or configuration */
	EX_DATADIR = 3,  /* data directory refused: locked, other identity or durability, damaged */
	EX_EXIST = 4,    /* the node id is registered by another live process */
	EX_ZK = 5,       /* ZooKeeper unreachable */
	EX_START = 6,    /* any other start-up failure (fabric, memory, I/O) */
};

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

/* rlog -- one structured line: ts=... prog=dxl-replica level=... event=... */
static void rlog(const char *level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void rlog(const char *level, const char *fmt, ...)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char buf[2048];
	int n = snprintf(buf, sizeof(buf),
			 "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ prog=dxl-replica pid=%d level=%s ",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
			 tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, (int)getpid(), level);
	va_list ap;
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(buf))
		vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", buf);
	fflush(stderr);
}

static void usage(FILE *out)
{
	fprintf(out,
"NAME\n"
"    dxl-replica - serve shards of dxl's replicated log\n"
"\n"
"SYNOPSIS\n"
"    dxl-replica [--config FILE] [-o key=value]... [--node-id N] [--data-dir DIR]\n"
"                [--provider tcp|verbs] [--listen HOST:PORT] [--zk CONNECT]\n"
"                [--cluster NAME] [--durability pmem|msync|process]\n"
"                [--shards LIST] [--foreground] [--help]\n"
"\n"
"DESCRIPTION\n"
"    Opens (or initialises) the data directory, which it locks, opens or\n"
"    creates one log region DIR/shard-<s>.log per hosted shard, registers\n"
"    them with the fabric so writers append with one-sided RDMA, and\n"
"    publishes their descriptors in ZooKeeper at /dxl/<cluster>/nodes/<id>.\n"
"    It serves writes only while its ZooKeeper lease is valid: when the\n"
"    lease lapses it deregisters the regions at once and registers them\n"
"    again (new rkeys, re-published) once it holds a session again.\n"
"    It hosts the shards configured (replica.shards); it is a member of those\n"
"    the cluster configuration (/dxl/<cluster>/config) lists it for. On\n"
"    every new configuration epoch it registers its regions again (new\n"
"    rkeys: writers of older epochs are fenced off). A hosted shard it is\n"
"    not a member of is copied from a member (catch-up) until the\n"
"    configuration manager adds it back. One replica of the cluster is the\n"
"    configuration manager (CM, elected in ZooKeeper): it removes dead\n"
"    members (down to cm.min_replicas), promotes a backup when a primary\n"
"    dies and re-adds caught-up nodes (docs/operations.md).\n"
"    With engine.tables set, each hosted shard also has a record store\n"
"    DIR/store-<s>.dat with hash indexes, served by one-sided READs and\n"
"    table RPCs on the primary and kept up to date from the log on backups\n"
"    (docs/replica.md \"Tables\").\n"
"\n"
"OPTIONS (each overrides the config key named)\n"
"    --config FILE        INI file ([section] and key = value lines)\n"
"    -o key=value         set any config key (repeatable; applied last)\n"
"    --node-id N          replica.node_id\n"
"    --data-dir DIR       replica.data_dir\n"
"    --durability MODE    replica.durability\n"
"    --shards LIST        replica.shards (e.g. 0,2,4-7)\n"
"    --provider P         fabric.provider\n"
"    --listen HOST:PORT   fabric.listen\n"
"    --zk CONNECT         zk.connect\n"
"    --cluster NAME       zk.cluster\n"
"    --foreground         run in the foreground (dxl-replica never\n"
"                         daemonizes itself; accepted for service managers)\n"
"    -h, --help           this text\n"
"\n"
"CONFIGURATION KEYS (default in brackets). Unknown keys and bad values are\n"
"errors naming the file, line and key.\n");
	const char *const *k = dxl_replica_cfg_keys();
	for (; k[0]; k += 3)
		fprintf(out, "    %-24s [%s]\n        %s\n", k[0], k[1], k[2]);
	fprintf(out,
"\n"
"SIGNALS\n"
"    SIGTERM, SIGINT  clean shutdown: stop serving, a last retention pass,\n"
"                     leave ZooKeeper (nodes/<id> disappears at once), close\n"
"                     the regions, unlock the data directory; exit 0.\n"
"\n"
"LOGGING\n"
"    One line per event on stderr: ts=... prog=dxl-replica pid=... level=...\n"
"    event=... key=value... Level: log.level or DXL_LOG_LEVEL (default info).\n"
"\n"
"EXIT STATUS\n"
"    0  clean shutdown after SIGTERM or SIGINT\n"
"    1  the service failed after start-up (e.g. node id taken after a new\n"
"       ZooKeeper session)\n"
"    2  bad command line or configuration (nothing was created)\n"
"    3  data directory refused: locked by another process, of another\n"
"       cluster, node or durability mode, or damaged (nothing was changed)\n"
"    4  the node id is registered by another live process\n"
"    5  ZooKeeper unreachable (after zk.connect_timeout_ms of retries)\n"
"    6  other start-up failure (fabric, a listen address in use included;\n"
"       memory, I/O)\n"
"\n"
"SEE ALSO\n"
"    docs/operations.md, docs/replica.md, docs/membership.md, docs/log.md,\n"
"    docs/fabric.md; dxl cluster status shows what each replica is doing\n");
}

static int start_exit_code(int err)
{
	switch (err) {
	case DXL_E_BUSY:
	case DXL_E_STALE:
	case DXL_E_CONFIG:
	case DXL_E_CORRUPT:
	case DXL_E_VERSION:
	case DXL_E_NOENT:
		return EX_DATADIR;
	case DXL_E_EXIST:
		return EX_EXIST;
	case DXL_E_UNAVAIL:
		return EX_ZK;
	case DXL_E_INVAL:
		return EX_USAGE;
	default:
		return EX_START;
	}
}

int main(int argc, char **argv)
{
	if (!getenv("DXL_LOG_LEVEL"))
		dxl_log_set_level(DXL_LOG_INFO);
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'},
		{"node-id", required_argument, NULL, 'n'},
		{"data-dir", required_argument, NULL, 'd'},
		{"provider", required_argument, NULL, 'p'},
		{"listen", required_argument, NULL, 'l'},
		{"zk", required_argument, NULL, 'z'},
		{"cluster", required_argument, NULL, 'C'},
		{"durability", required_argument, NULL, 'D'},
		{"shards", required_argument, NULL, 's'},
		{"foreground", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	static const char *const flag_key[128] = {
		['n'] = "replica.node_id", ['d'] = "replica.data_dir",
		['p'] = "fabric.provider", ['l'] = "fabric.listen",
		['z'] = "zk.connect",      ['C'] = "zk.cluster",
		['D'] = "replica.durability", ['s'] = "replica.shards",
	};
	const char *config_file = NULL;
	/* flags and -o are applied after the file, in command-line order */
	char **sets = calloc((size_t)argc * 2 + 2, sizeof(char *));
	int nsets = 0, c;
	if (!sets)
		return EX_START;
	while ((c = getopt_long(argc, argv, "o:hc:", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_file = optarg;
			break;
		case 'o':
			sets[nsets++] = NULL; /* marker: a "key=value" follows */
			sets[nsets++] = optarg;
			break;
		case 'f':
			break;
		case 'h':
			usage(stdout);
			free(sets);
			return EX_CLEAN;
		default:
			if (c > 0 && c < 128 && flag_key[c]) {
				sets[nsets++] = (char *)flag_key[c];
				sets[nsets++] = optarg;
				break;
			}
			fprintf(stderr, "dxl-replica: see --help\n");
			free(sets);
			return EX_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "dxl-replica: unexpected argument '%s' (see --help)\n",
			argv[optind]);
		free(sets);
		return EX_USAGE;
	}
	struct dxl_config *conf = NULL;
	int ret = dxl_config_new(&conf);
	if (!ret && config_file)
		ret = dxl_config_load_file(conf, config_file);
	for (int i = 0; !ret && i < nsets; i += 2)
		ret = sets[i] ? dxl_config_set(conf, sets[i], sets[i + 1]) :
				dxl_config_set_arg(conf, sets[i + 1]);
	free(sets);
	struct dxl_replica_cfg cfg;
	dxl_replica_cfg_init(&cfg);
	if (!ret)
		ret = dxl_replica_cfg_load(conf, &cfg);
	dxl_config_delete(&conf);
	if (!ret && !cfg.node_id)
		ret = dxl_err_set(DXL_E_CONFIG, "replica.node_id is required (--node-id N)");
	if (!ret && !cfg.data_dir[0])
		ret = dxl_err_set(DXL_E_CONFIG, "replica.data_dir is required (--data-dir DIR)");
	if (!ret && !cfg.zk.connect[0])
		ret = dxl_err_set(DXL_E_CONFIG, "zk.connect is required (--zk HOST:PORT)");
	if (ret) {
		rlog("error", "event=config_error exit=%d msg=\"%s\"", EX_USAGE, dxl_errmsg());
		return EX_USAGE;
	}

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	rlog("info", "event=starting node=%u data_dir=%s cluster=%s zk=%s durability=%s shards=%u",
	     cfg.node_id, cfg.data_dir, cfg.zk.cluster, cfg.zk.connect,
	     dxl_durability_name(cfg.durability), cfg.nshards);
	struct dxl_replica_server *srv = NULL;
	ret = dxl_replica_server_new(&cfg, &srv);
	if (ret) {
		int code = start_exit_code(ret);
		/* a listen address in use is the fabric's failure, not the data
		 * directory's (both are DXL_E_BUSY; the providers' message names
		 * the listen address) */
		if (ret == DXL_E_BUSY && strstr(dxl_errmsg(), "listen address"))
			code = EX_START;
		rlog("error", "event=start_failed code=%s exit=%d msg=\"%s\"",
		     dxl_strerror(ret), code, dxl_errmsg());
		return code;
	}
	rlog("info", "event=ready node=%u addr=%s", cfg.node_id,
	     dxl_replica_server_addr(srv));
	ret = dxl_replica_server_run(srv, &g_stop);
	if (ret)
		rlog("error", "event=service_failed code=%s msg=\"%s\"",
		     dxl_strerror(ret), dxl_errmsg());
	else
		rlog("info", "event=stopping node=%u reason=signal", cfg.node_id);
	dxl_replica_server_delete(&srv);
	rlog("info", "event=stopped node=%u exit=%d", cfg.node_id,
	     ret ? EX_RUNTIME : EX_CLEAN);
	return ret ? EX_RUNTIME : EX_CLEAN;
}
