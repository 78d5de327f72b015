/* tail.c -- dxl tail (docs/cli.md) */
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

int cmd_tail(int argc, char **argv)
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

