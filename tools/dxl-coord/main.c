/* main.c -- dxl-coord: a coordinator daemon serving transactions to
 * clients over TCP (docs/coord.md): options, configuration, start-up and
 * shutdown */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "common/config.h"
#include "dxl/coordproto.h"
#include "dxl/membership.h"
#include "dxl/txn.h"

#include "server.h"

void srv_log(int lvl, const char *fmt, ...)
{
	if (lvl < (int)dxl_log_get_level())
		return;
	static const char *const names[] = {"debug", "info", "warn", "error"};
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char buf[2048];
	int n = snprintf(buf, sizeof(buf),
			 "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ prog=dxl-coord pid=%d level=%s ",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			 tm.tm_sec, ts.tv_nsec / 1000000, (int)getpid(),
			 names[lvl >= 0 && lvl <= 3 ? lvl : 3]);
	va_list ap;
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(buf))
		vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", buf);
	fflush(stderr);
}

/* the configuration keys: name, default, meaning (--help, docs/coord.md) */
static const char *const g_keys[] = {
	"coord.listen", "127.0.0.1:7400",
	"HOST:PORT clients connect to (port 0: any free port, printed and published)",
	"coord.threads", "2", "worker threads, 1..64 (one dxl_coord_worker each)",
	"coord.coroutines", "8",
	"transactions in flight per worker, 1..255 (plus one dispatcher coroutine)",
	"coord.mode", "hybrid", "hybrid | onesided | twosided (docs/transactions.md)",
	"coord.id", "0", "coordinator id, 0 = the first free coords/<id>",
	"coord.max_tries", "0",
	"runs of a transaction aborted by conflicts when the request says 0 (0 = 1000)",
	"coord.max_conns", "1024", "client connections at once, 1..65536",
	"coord.conn_inflight", "64",
	"transactions in flight per connection (more are read once replies go out)",
	"coord.drain_ms", "10000", "shutdown: how long to wait for in-flight transactions",
	"coord.loccache_bytes", "1M", "location cache per shard and table",
	"coord.log_unavail_ms", "10000", "a shard's log unwritable this long: DXL_E_UNAVAIL",
	"coord.fabric_timeout_ms", "1000", "dead-primary detection",
	"coord.bind", "127.0.0.1:0",
	"the coordinator's fabric address (its provider is the primaries'; with verbs a loopback address becomes the local address that reaches them)",
	"zk.connect", "(required)", "ZooKeeper connect string",
	"zk.cluster", "default", "cluster name",
	"zk.session_timeout_ms", "3000",
	"session timeout: coords/<id> vanishes this long after a crash",
	"zk.*", "", "the other ZooKeeper keys (docs/membership.md)",
	"log.level", "info", "debug | info | warn | error | off (DXL_LOG_LEVEL sets the default)",
	NULL,
};

static void usage(FILE *out)
{
	fprintf(out,
"NAME\n"
"    dxl-coord - serve dxl transactions to clients over TCP\n"
"\n"
"SYNOPSIS\n"
"    dxl-coord --zk HOSTS [--cluster NAME] [--listen HOST:PORT] [--threads N]\n"
"              [--coroutines N] [--mode hybrid|onesided|twosided] [--id N]\n"
"              [--session-timeout MS] [-c FILE] [-o key=value]...\n"
"              [--log-level LEVEL] [--help]\n"
"\n"
"DESCRIPTION\n"
"    A coordinator of the cluster NAME (include/dxl/txn.h): it registers the\n"
"    ephemeral znode /dxl/NAME/coords/<id> holding {\"addr\":\"HOST:PORT\",\n"
"    \"pid\":N}, so that clients (dxl get, put, del, insert, txn) find it, and\n"
"    serves the length-prefixed binary protocol of docs/coord.md on\n"
"    HOST:PORT: each TXN request is one transaction of up to %u operations\n"
"    (get, put, insert, delete) run with dxl_txn_run (a conflict is retried\n"
"    with backoff), answered with its status, commit timestamp, attempts and\n"
"    each operation's result; PING and STATS (counters as key=value lines)\n"
"    are answered at once. A malformed request gets an ERROR reply saying\n"
"    what is wrong and changes nothing; a frame length over 1 MiB closes the\n"
"    connection.\n"
"\n"
"    One I/O thread (epoll) accepts connections, reads frames and writes\n"
"    replies; N worker threads each run a dxl_coord_worker whose dispatcher\n"
"    coroutine takes requests off a shared queue and runs each in a\n"
"    coroutine of its own, up to --coroutines at once per worker.\n"
"\n"
"OPTIONS (each overrides the config key named)\n"
"    -c, --config FILE     INI file ([coord], [zk], [log] sections)\n"
"    -o key=value          set any config key (repeatable; applied last)\n"
"    --zk HOSTS            zk.connect\n"
"    --cluster NAME        zk.cluster\n"
"    --listen HOST:PORT    coord.listen\n"
"    --threads N           coord.threads\n"
"    --coroutines N        coord.coroutines\n"
"    --mode MODE           coord.mode\n"
"    --id N                coord.id\n"
"    --session-timeout MS  zk.session_timeout_ms\n"
"    --log-level LEVEL     log.level\n"
"    -h, --help            this text\n"
"\n"
"CONFIGURATION KEYS (default in brackets). Unknown keys and bad values are\n"
"errors naming the file, line and key.\n", (unsigned)DXL_TXN_MAX_OPS);
	for (const char *const *k = g_keys; k[0]; k += 3)
		fprintf(out, "    %-24s [%s]\n        %s\n", k[0], k[1], k[2]);
	fprintf(out,
"\n"
"OUTPUT\n"
"    When ready, one line on stdout: \"dxl-coord: coordinator ID serving on\n"
"    HOST:PORT\" (the port chosen when --listen has port 0).\n"
"\n"
"SIGNALS\n"
"    SIGTERM, SIGINT  clean shutdown: stop accepting and reading requests,\n"
"                     finish the transactions in flight and send their\n"
"                     replies (at most coord.drain_ms), close the\n"
"                     connections, leave ZooKeeper (coords/<id> disappears\n"
"                     at once); exit 0. A second signal stops waiting.\n"
"\n"
"LOGGING\n"
"    One line per event on stderr: ts=... prog=dxl-coord pid=... level=...\n"
"    event=... key=value... (debug: one line per transaction).\n"
"\n"
"EXIT STATUS\n"
"    0  clean shutdown after SIGTERM or SIGINT\n"
"    1  could not start (ZooKeeper unreachable, no cluster configuration,\n"
"       coordinator id taken, address in use, ...) or failed while serving\n"
"    2  bad command line or configuration\n"
"\n"
"EXAMPLE\n"
"    dxl cluster up --replicas 3 -o engine.tables=1:8:1000 --zk 127.0.0.1:2181\n"
"    dxl-coord --zk 127.0.0.1:2181 --listen 127.0.0.1:7400 --threads 2 &\n"
"    dxl insert 1 42 hello --zk 127.0.0.1:2181; dxl get 1 42 --zk 127.0.0.1:2181\n"
"\n"
"SEE ALSO\n"
"    docs/coord.md (protocol), docs/transactions.md, docs/cli.md\n");
}

static int cfg_u32(const struct dxl_config *conf, const char *key, uint32_t def,
		   uint32_t min, uint32_t max, uint32_t *out)
{
	uint64_t v;
	int ret = dxl_config_get_u64(conf, key, def, min, max, &v);
	if (!ret)
		*out = (uint32_t)v;
	return ret;
}

/* load -- the srv_cfg from conf (defaults for absent keys) */
static int load(const struct dxl_config *conf, struct srv_cfg *c)
{
	static const char *const known[] = {
		"coord.listen", "coord.threads", "coord.coroutines", "coord.mode", "coord.id",
		"coord.max_tries", "coord.max_conns", "coord.conn_inflight", "coord.drain_ms",
		"coord.loccache_bytes", "coord.log_unavail_ms", "coord.fabric_timeout_ms",
		"coord.bind", "zk.*", "log.level", NULL,
	};
	int ret = dxl_config_check_known(conf, known);
	if (ret)
		return ret;
	if ((ret = dxl_log_configure(conf)))
		return ret;
	const char *listen = NULL, *mode = NULL, *bind = NULL;
	if ((ret = dxl_config_get_str(conf, "coord.listen", "127.0.0.1:7400", &listen)))
		return ret;
	if (dxl_parse_hostport(listen, c->listen_host, sizeof(c->listen_host),
			       &c->listen_port))
		return dxl_err_set(DXL_E_CONFIG, "%s: key coord.listen: '%s' is not HOST:PORT",
				   dxl_config_origin(conf, "coord.listen") ?: "default", listen);
	if ((ret = cfg_u32(conf, "coord.threads", 2, 1, COORD_MAX_THREADS, &c->threads)) ||
	    (ret = cfg_u32(conf, "coord.coroutines", 8, 1, COORD_MAX_COROUTINES,
			   &c->coroutines)) ||
	    (ret = cfg_u32(conf, "coord.id", 0, 0, DXL_COORD_MAX_ID, &c->coord.coord_id)) ||
	    (ret = cfg_u32(conf, "coord.max_tries", 0, 0, 1000000, &c->max_tries)) ||
	    (ret = cfg_u32(conf, "coord.max_conns", 1024, 1, 65536, &c->max_conns)) ||
	    (ret = cfg_u32(conf, "coord.conn_inflight", 64, 1, 4096, &c->conn_inflight)) ||
	    (ret = cfg_u32(conf, "coord.drain_ms", 10000, 0, 3600000, &c->drain_ms)) ||
	    (ret = cfg_u32(conf, "coord.log_unavail_ms", c->coord.log_unavail_ms, 1, 3600000,
			   &c->coord.log_unavail_ms)) ||
	    (ret = cfg_u32(conf, "coord.fabric_timeout_ms", c->coord.fabric_timeout_ms, 1,
			   3600000, &c->coord.fabric_timeout_ms)))
		return ret;
	uint64_t lc;
	if ((ret = dxl_config_get_size(conf, "coord.loccache_bytes", c->coord.loccache_bytes, 0,
				       1ull << 34, &lc)))
		return ret;
	c->coord.loccache_bytes = (size_t)lc;
	if ((ret = dxl_config_get_str(conf, "coord.mode", "hybrid", &mode)))
		return ret;
	if (dxl_txn_mode_parse(mode, &c->coord.mode))
		return dxl_err_set(DXL_E_CONFIG,
				   "%s: key coord.mode: '%s' is not hybrid, onesided or twosided",
				   dxl_config_origin(conf, "coord.mode") ?: "default", mode);
	if (dxl_config_has(conf, "coord.bind")) { /* else dxl_coord_cfg_init's */
		if ((ret = dxl_config_get_str(conf, "coord.bind", "", &bind)))
			return ret;
		if (strlen(bind) >= sizeof(c->coord.bind))
			return dxl_err_set(DXL_E_CONFIG, "key coord.bind: '%s' is too long", bind);
		snprintf(c->coord.bind, sizeof(c->coord.bind), "%s", bind);
	}
	if ((ret = dxl_zk_cfg_load(conf, &c->zk)))
		return ret;
	if (!c->zk.connect[0])
		return dxl_err_set(DXL_E_CONFIG, "zk.connect is required (--zk HOSTS)");
	return 0;
}

/* open_listener -- bind and listen on the configured address; the address
 * really served (the port chosen for port 0) into s->addr */
static int open_listener(struct server *s, int *out)
{
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	char port[8];
	snprintf(port, sizeof(port), "%u", s->cfg.listen_port);
	int gai = getaddrinfo(s->cfg.listen_host, port, &hints, &res);
	if (gai)
		return dxl_err_set(DXL_E_CONFIG, "coord.listen %s:%s: %s", s->cfg.listen_host, port,
				   gai_strerror(gai));
	int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int e = errno;
		freeaddrinfo(res);
		return dxl_err_errno(e, "socket");
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 128)) {
		int e = errno;
		freeaddrinfo(res);
		close(fd);
		return dxl_err_set(e == EADDRINUSE ? DXL_E_BUSY : DXL_E_IO,
				   "listening on %s:%u: %s", s->cfg.listen_host, s->cfg.listen_port,
				   strerror(e));
	}
	freeaddrinfo(res);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[180], serv[8];
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) ||
	    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), serv, sizeof(serv),
			NI_NUMERICHOST | NI_NUMERICSERV)) {
		close(fd);
		return dxl_err_errno(errno, "getsockname");
	}
	/* a wildcard address cannot be dialled: publish this host's name */
	if (!strcmp(host, "0.0.0.0") || !strcmp(host, "::")) {
		if (gethostname(host, sizeof(host)))
			snprintf(host, sizeof(host), "127.0.0.1");
		host[sizeof(host) - 1] = 0;
	}
	if (strchr(host, ':'))
		snprintf(s->addr, sizeof(s->addr), "[%s]:%s", host, serv);
	else
		snprintf(s->addr, sizeof(s->addr), "%s:%s", host, serv);
	*out = fd;
	return 0;
}

int main(int argc, char **argv)
{
	if (!getenv("DXL_LOG_LEVEL"))
		dxl_log_set_level(DXL_LOG_INFO);
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'},
		{"zk", required_argument, NULL, 'z'},
		{"cluster", required_argument, NULL, 'C'},
		{"listen", required_argument, NULL, 'l'},
		{"threads", required_argument, NULL, 't'},
		{"coroutines", required_argument, NULL, 'k'},
		{"mode", required_argument, NULL, 'm'},
		{"id", required_argument, NULL, 'i'},
		{"session-timeout", required_argument, NULL, 'S'},
		{"log-level", required_argument, NULL, 'L'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	static const char *const flag_key[128] = {
		['z'] = "zk.connect",      ['C'] = "zk.cluster",
		['l'] = "coord.listen",    ['t'] = "coord.threads",
		['k'] = "coord.coroutines", ['m'] = "coord.mode",
		['i'] = "coord.id",        ['S'] = "zk.session_timeout_ms",
		['L'] = "log.level",
	};
	const char *config_file = NULL;
	/* flags and -o are applied after the file, in command-line order */
	char **sets = calloc((size_t)argc * 2 + 2, sizeof(char *));
	int nsets = 0, c;
	if (!sets)
		return EX_FAIL;
	while ((c = getopt_long(argc, argv, "o:hc:", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_file = optarg;
			break;
		case 'o':
			sets[nsets++] = NULL; /* marker: a "key=value" follows */
			sets[nsets++] = optarg;
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
			fprintf(stderr, "dxl-coord: see --help\n");
			free(sets);
			return EX_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "dxl-coord: unexpected argument '%s' (see --help)\n", argv[optind]);
		free(sets);
		return EX_USAGE;
	}
	struct server *s = calloc(1, sizeof(*s));
	struct dxl_config *conf = NULL;
	int ret = s ? dxl_config_new(&conf) : DXL_E_NOMEM;
	if (!ret && config_file)
		ret = dxl_config_load_file(conf, config_file);
	for (int i = 0; !ret && i < nsets; i += 2)
		ret = sets[i] ? dxl_config_set(conf, sets[i], sets[i + 1]) :
				dxl_config_set_arg(conf, sets[i + 1]);
	free(sets);
	if (!ret) {
		dxl_zk_cfg_init(&s->cfg.zk);
		dxl_coord_cfg_init(&s->cfg.coord);
		ret = load(conf, &s->cfg);
	}
	dxl_config_delete(&conf);
	if (ret) {
		fprintf(stderr, "dxl-coord: %s (see --help)\n", dxl_errmsg());
		free(s);
		return ret == DXL_E_NOMEM ? EX_FAIL : EX_USAGE;
	}

	/* SIGTERM/SIGINT arrive through a signalfd in the I/O loop; blocked
	 * before any thread starts (ZooKeeper's, the workers'), so none of
	 * them takes the signal */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	int sigfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
	s->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&s->qmu, NULL);
	pthread_cond_init(&s->qcv, NULL);
	pthread_mutex_init(&s->rmu, NULL);
	int rc = EX_FAIL, lfd = -1;
	bool served = false;
	if (sigfd < 0 || s->evfd < 0) {
		srv_log(DXL_LOG_ERROR, "event=start_failed reason=\"signalfd/eventfd: %s\"",
			strerror(errno));
		goto out;
	}
	if ((ret = open_listener(s, &lfd))) {
		srv_log(DXL_LOG_ERROR, "event=start_failed code=%s msg=\"%s\"", dxl_errname(ret),
			dxl_errmsg());
		fprintf(stderr, "dxl-coord: %s\n", dxl_errmsg());
		goto out;
	}
	srv_log(DXL_LOG_INFO, "event=starting cluster=%s zk=%s listen=%s mode=%s threads=%u coroutines=%u",
		s->cfg.zk.cluster, s->cfg.zk.connect, s->addr,
		dxl_txn_mode_name(s->cfg.coord.mode), s->cfg.threads, s->cfg.coroutines);
	if ((ret = dxl_zk_new(&s->cfg.zk, &s->zk))) {
		srv_log(DXL_LOG_ERROR, "event=start_failed stage=zookeeper code=%s msg=\"%s\"",
			dxl_errname(ret), dxl_errmsg());
		fprintf(stderr, "dxl-coord: cannot connect to ZooKeeper %s (cluster %s): %s\n",
			s->cfg.zk.connect, s->cfg.zk.cluster, dxl_errmsg());
		goto out;
	}
	snprintf(s->cfg.coord.info, sizeof(s->cfg.coord.info), "{\"addr\":\"%s\",\"pid\":%d}",
		 s->addr, (int)getpid());
	if ((ret = dxl_coord_new(s->zk, &s->cfg.coord, &s->coord))) {
		srv_log(DXL_LOG_ERROR, "event=start_failed stage=coordinator code=%s msg=\"%s\"",
			dxl_errname(ret), dxl_errmsg());
		fprintf(stderr, "dxl-coord: cannot start the coordinator of cluster %s: %s: %s\n",
			s->cfg.zk.cluster, dxl_errname(ret), dxl_errmsg());
		goto out;
	}
	if ((ret = workers_start(s))) {
		srv_log(DXL_LOG_ERROR, "event=start_failed stage=workers code=%s msg=\"%s\"",
			dxl_errname(ret), dxl_errmsg());
		fprintf(stderr, "dxl-coord: cannot start the workers: %s\n", dxl_errmsg());
		goto out;
	}
	srv_log(DXL_LOG_INFO, "event=ready coord=%u addr=%s mode=%s epoch=%" PRIu64,
		dxl_coord_id(s->coord), s->addr, dxl_txn_mode_name(dxl_coord_mode(s->coord)),
		dxl_coord_epoch(s->coord));
	printf("dxl-coord: coordinator %u serving on %s\n", dxl_coord_id(s->coord), s->addr);
	fflush(stdout);
	rc = serve(s, lfd, sigfd);
	lfd = -1; /* serve closed it */
	served = true;
out:
	if (s->workers) {
		workers_join(s);
		free(s->workers);
	}
	uint32_t id = s->coord ? dxl_coord_id(s->coord) : 0;
	uint64_t t0 = dxl_now_ms();
	if (s->coord)
		dxl_coord_delete(&s->coord);
	uint64_t t1 = dxl_now_ms();
	dxl_zk_delete(&s->zk);
	if (served)
		srv_log(DXL_LOG_INFO, "event=stopped coord=%u exit=%d committed=%" PRIu64
			" failed=%" PRIu64 " coord_delete_ms=%" PRIu64 " zk_close_ms=%" PRIu64,
			id, rc, (uint64_t)atomic_load(&s->txn_ok),
			(uint64_t)atomic_load(&s->txn_failed), t1 - t0, dxl_now_ms() - t1);
	if (lfd >= 0)
		close(lfd);
	if (sigfd >= 0)
		close(sigfd);
	if (s->evfd >= 0)
		close(s->evfd);
	pthread_mutex_destroy(&s->qmu);
	pthread_cond_destroy(&s->qcv);
	pthread_mutex_destroy(&s->rmu);
	free(s);
	return rc;
}
