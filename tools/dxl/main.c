/* main.c -- dxl: the command-line tool (docs/cli.md): dispatch to the
 * subcommands (cluster.c, append.c, tail.c). */
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

/* ---- dispatch --------------------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
"Usage: dxl COMMAND [OPTIONS]   (dxl COMMAND --help for each)\n"
"\n"
"Commands:\n"
"  cluster up       start a local cluster: ZooKeeper (unless --zk), N replicas,\n"
"                   the cluster configuration (and --coordinators); every\n"
"                   option checked first, a failed start undone\n"
"  cluster status   configuration, registered nodes, what is missing\n"
"  cluster down     stop what 'cluster up' started (data and logs stay)\n"
"  cluster start    start a stopped cluster again on its data under its last\n"
"                   configuration (after 'cluster down' or a reboot)\n"
"  cluster kill     kill (or stop, or power-fail) one replica\n"
"  cluster restart  start a killed replica again on its data\n"
"  cluster add      start one more replica: it catches up and joins\n"
"  cluster verify   compare the members' tables of every shard (state digests)\n"
"  log append       append records to a shard (arguments or stdin lines)\n"
"  log load         a steady append stream with a progress line, failover\n"
"                   reports and verification by tailing\n"
"  tail             print a shard's (or every shard's) records in\n"
"                   commit-timestamp order; consumer groups\n"
"  status           the same as 'cluster status'\n"
"  get, put, insert, del\n"
"                   one operation as one transaction through a dxl-coord\n"
"                   coordinator (exit 3: no such key, 4: conflicts)\n"
"  txn              operations from stdin, committed as one transaction\n"
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
				!strcmp(argv[1], "cluster") ? "up, status, down, start, kill, restart, add or verify" : "append or load");
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
			if (!strcmp(argv[2], "start"))
				return cmd_cluster_start(sub_argc, sub_argv);
			if (!strcmp(argv[2], "kill"))
				return cmd_cluster_kill(sub_argc, sub_argv);
			if (!strcmp(argv[2], "restart"))
				return cmd_cluster_restart(sub_argc, sub_argv);
			if (!strcmp(argv[2], "add"))
				return cmd_cluster_add(sub_argc, sub_argv);
			if (!strcmp(argv[2], "verify"))
				return cmd_cluster_verify(sub_argc, sub_argv);
		} else if (!strcmp(argv[2], "append")) {
			return cmd_log_append(sub_argc, sub_argv);
		} else if (!strcmp(argv[2], "load")) {
			return cmd_log_load(sub_argc, sub_argv);
		}
		fprintf(stderr, "dxl %s: unknown subcommand '%s' (see dxl --help)\n", argv[1],
			argv[2]);
		return EX_USAGE;
	}
	if (!strcmp(argv[1], "status")) {
		g_cmd = "dxl status";
		return cmd_cluster_status(argc - 1, argv + 1);
	}
	if (!strcmp(argv[1], "tail")) {
		g_cmd = "dxl tail";
		return cmd_tail(argc - 1, argv + 1);
	}
	if (!strcmp(argv[1], "get") || !strcmp(argv[1], "put") || !strcmp(argv[1], "insert") ||
	    !strcmp(argv[1], "del") || !strcmp(argv[1], "delete")) {
		snprintf(cmdname, sizeof(cmdname), "dxl %s", argv[1]);
		g_cmd = cmdname;
		return cmd_kv(argc - 1, argv + 1);
	}
	if (!strcmp(argv[1], "txn")) {
		g_cmd = "dxl txn";
		return cmd_txn(argc - 1, argv + 1);
	}
	fprintf(stderr, "dxl: unknown command '%s' (see dxl --help)\n", argv[1]);
	return EX_USAGE;
}
