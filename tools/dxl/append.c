/* append.c -- dxl log append (docs/cli.md) */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
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
"                      [--unavail-ms MS] [RECORD...]\n"
"\n"
"Append records to shard S: each RECORD argument is one record; without\n"
"arguments every line of stdin is one (newline removed, empty lines\n"
"skipped). Leases the first free writer slot k of the shard (the ephemeral\n"
"znode writers/<S>/<k>; the writer id is k) and appends to ring k of every\n"
"member of the shard in the current configuration, with commit timestamps\n"
"from a hybrid logical clock. It prints one line per record, in order, as\n"
"soon as the record is acknowledged (persistent on every member):\n"
"\n"
"    <commit_ts>\tok\n"
"    <commit_ts>\tFAILED <error>: <why>\n"
"\n"
"Across a failover (a member dies, the configuration manager installs a new\n"
"epoch) the records in flight are not lost or duplicated: the writer\n"
"reopens on the new members, repairs the rings from the primary, counts the\n"
"records it finds there as acknowledged and appends the others again. A\n"
"record fails only when the shard stays unavailable for --unavail-ms.\n"
"At the end it writes a watermark (heartbeat) so tailers deliver everything\n"
"appended, closes its ring (tailers no longer wait for it) and releases the\n"
"slot. A slot whose ring promises timestamps far ahead of this host's clock\n"
"(a writer whose clock jumped forward) is passed over for the next free one.\n"
"\n"
"  --shard S          the shard (required)\n"
"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n"
"  --zk CONNECT       ZooKeeper connect string (instead of DIR/cluster.json)\n"
"  --cluster NAME     cluster name with --zk [default]\n"
"  --unavail-ms MS    give a record up after the shard was unavailable this\n"
"                     long [30000]\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP
"    (append exits 1 if any record was not acknowledged)\n");
}

/* writer_err_exit -- the exit code for an error opening a writer */
int writer_err_exit(int ret)
{
	switch (ret) {
	case DXL_E_NOENT: return EX_CLUSTER;
	case DXL_E_INVAL: return EX_USAGE;
	default: return EX_FAIL;
	}
}

static uint32_t report(struct dxl_log_writer *w, int timeout_ms)
{
	struct dxl_log_writer_result res[64];
	uint32_t failed = 0;
	int k = dxl_log_writer_poll(w, res, 64, timeout_ms);
	for (int j = 0; j < k; j++) {
		if (res[j].status == 0) {
			printf("%llu\tok\n", (unsigned long long)res[j].ts);
			continue;
		}
		failed++;
		printf("%llu\tFAILED %s%s: %s\n", (unsigned long long)res[j].ts,
		       dxl_errname(res[j].status),
		       res[j].maybe ? " (sent before the failure: it may be in the log)" : "",
		       dxl_log_writer_why(w));
	}
	return failed;
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
		{"unavail-ms", required_argument, NULL, 'U'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = "./dxl-cluster", *zkc = NULL, *cl = NULL;
	uint32_t shard = 0, unavail = 30000;
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
		case 'U':
			if (parse_u32(optarg, &unavail) || !unavail) {
				errf("--unavail-ms '%s': milliseconds, > 0", optarg);
				return EX_USAGE;
			}
			break;
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
	struct dxl_log_writer_cfg wc;
	dxl_log_writer_cfg_init(&wc);
	wc.shard = shard;
	wc.unavail_ms = unavail;
	struct dxl_log_writer *w = NULL;
	if ((ret = dxl_log_writer_new(zk, &wc, &w))) {
		errf("%s", dxl_errmsg());
		dxl_zk_delete(&zk);
		return writer_err_exit(ret);
	}
	uint32_t failed = 0, nrec = 0;
	char *line = NULL;
	size_t lcap = 0;
	int ai = optind;
	bool from_stdin = optind >= argc;
	for (;;) {
		const char *p = NULL;
		size_t plen = 0;
		if (!from_stdin) {
			if (ai < argc) {
				p = argv[ai++];
				plen = strlen(p);
			}
		} else {
			/* while no line is there: report results as they come and
			 * let the writer heartbeat, so an idle producer holds
			 * neither its own "ok" lines nor any tailer back */
			for (;;) {
				if (stdin->_IO_read_ptr < stdin->_IO_read_end)
					break; /* buffered input */
				struct pollfd pfd = {.fd = 0, .events = POLLIN};
				int pr = poll(&pfd, 1, 20);
				if (pr != 0)
					break; /* input, EOF, or an error getline reports */
				failed += report(w, 0);
			}
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
			break;
		nrec++;
		uint64_t ts = 0;
		for (;;) {
			ret = dxl_log_writer_append(w, p, (uint32_t)DXL_MIN(plen, UINT32_MAX), 0, &ts);
			if (ret != DXL_E_AGAIN)
				break;
			failed += report(w, 100);
		}
		if (ret) {
			/* not queued: report it in order once earlier ones are in
			 * (polling may set other errors: keep this one's text) */
			char msg[512];
			snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
			while (dxl_log_writer_pending(w))
				failed += report(w, 100);
			failed++;
			printf("-\tFAILED %s: %s\n", dxl_errname(ret), msg);
			if (ret == DXL_E_STATE)
				break;
			continue;
		}
		failed += report(w, 0);
	}
	free(line);
	while (dxl_log_writer_pending(w))
		failed += report(w, 100);
	/* the final watermark, so tailers deliver everything appended */
	if ((ret = dxl_log_writer_flush(w, 5000)))
		errf("final heartbeat: %s", dxl_errmsg());
	fflush(stdout);
	dxl_log_writer_delete(&w);
	dxl_zk_delete(&zk);
	if (failed)
		errf("%u of %u records not acknowledged by every member of shard %u", failed, nrec,
		     shard);
	return failed ? EX_FAIL : EX_OK;
}
