/* append.c -- dxl log append (docs/cli.md) */
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

int cmd_log_append(int argc, char **argv)
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

