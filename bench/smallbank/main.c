/* main.c -- dxl-bench-smallbank: SmallBank on dxl's transactions (load, run, check) */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/smallbank/sb.h"
#include "common/common.h"

static const char usage[] =
"NAME\n"
"    dxl-bench-smallbank -- SmallBank on dxl's transactions: load, run, check\n"
"\n"
"SYNOPSIS\n"
"    dxl-bench-smallbank load  --dir DIR [--accounts N] [OPTIONS]\n"
"    dxl-bench-smallbank run   --dir DIR [--duration S] [--threads T]\n"
"                              [--coroutines C] [--mode M] [OPTIONS]\n"
"    dxl-bench-smallbank check --dir DIR --ledger PATH [OPTIONS]\n"
"    dxl-bench-smallbank [--quick] [--out FILE] [SCRIPT OPTIONS]\n"
"\n"
"DESCRIPTION\n"
"    SmallBank (bench/lib/smallbank.h: the six transactions in H-Store's\n"
"    mix, 4% of the accounts drawn by 90% of the transactions, as DrTM+H\n"
"    runs it) against a cluster started with 'dxl cluster up --dir DIR'\n"
"    that hosts the tables 1 (savings) and 2 (checking) with 8-byte values:\n"
"\n"
"        dxl cluster up --dir DIR --replicas 3 --shards 3 --ring-size 16M \\\n"
"            --writer-slots 16 -o engine.tables=1:8:N,2:8:N \\\n"
"            -o engine.lock_mode=nic        (cpu for --mode twosided)\n"
"\n"
"    with N >= 1.3 x accounts / shards. The program finds ZooKeeper and the\n"
"    cluster's name in DIR/cluster.json. Its coordinator (include/dxl/txn.h)\n"
"    runs in this process: one dxl_coord on a ZooKeeper session of its own,\n"
"    a dxl_coord_worker per thread, one transaction in flight per coroutine.\n"
"    Balances are int64 cents, 8 bytes little-endian.\n"
"\n"
"    load   inserts the savings and checking row of every account with the\n"
"           initial balance, --batch accounts (2 rows each) per transaction,\n"
"           from THREADS x COROUTINES coroutines. Rows that exist already\n"
"           are kept (counted). Writes DIR/smallbank.json (accounts, initial\n"
"           balance): the default --accounts of run.\n"
"\n"
"    run    first reads every account (read-only transactions of 60 keys):\n"
"           the money and every key's version before the run. Then THREADS x\n"
"           COROUTINES coroutines run SmallBank transactions for DURATION\n"
"           seconds, each through dxl_txn_run (which runs a transaction\n"
"           again after a conflict). A transaction that still fails\n"
"           (DXL_E_UNAVAIL: no primary, e.g. during a failover, which takes\n"
"           2-3 s; or a conflict past dxl_txn_run's tries) is run again\n"
"           after 20 ms until it commits or the run ends; any other failure\n"
"           (e.g. DXL_E_NOENT: a row missing) is counted and the coroutine\n"
"           goes on with its next transaction; one whose outcome\n"
"           is unknown (dxl_txn_info.maybe: it may have committed) is\n"
"           recorded as such and never run again. Latency is per\n"
"           transaction, from its first attempt to its commit (retries and\n"
"           waits for a failover included).\n"
"           With --progress, one line per second on stdout: elapsed time,\n"
"           commits/s, abort rate (attempts that did not commit / attempts),\n"
"           p50 and p99 latency of the transactions committed in that\n"
"           second, runs that failed in that second (errors: unavailable,\n"
"           or a missing row), transactions of unknown outcome so far\n"
"           (maybe), and the configuration epoch the\n"
"           coordinator works with (marked when it changes).\n"
"           At the end a summary on stdout; --json the result; --ledger what\n"
"           check needs.\n"
"\n"
"    Without a subcommand it runs scripts/bench-smallbank.sh (found at\n"
"    ../../scripts from this binary, or in $DXL_SCRIPTS) with the given\n"
"    options and --bin <this binary's folder>: the three modes at several\n"
"    coroutine counts on fresh clusters, each run checked, and the etcd\n"
"    peer; results/smallbank.json and .md. 'make bench' uses this form.\n"
"\n"
"    check  reads every account (read-only transactions of at most 60 keys)\n"
"           and applies two rules to the ledger of a run:\n"
"             money   total now == total before + the money deltas of the\n"
"                     committed transactions (DepositChecking +130,\n"
"                     TransactSavings +2020, WriteCheck -500 or -501; the\n"
"                     others move money);\n"
"             commits for every key, (version now - version before) / 2 ==\n"
"                     the committed writes to it: every write adds 2 to a\n"
"                     record's version, so a lost acknowledged commit (or a\n"
"                     write nobody committed) shows.\n"
"           A transaction of unknown outcome may have happened or not: the\n"
"           rules must hold for SOME set of them, both rules at once (the\n"
"           versions of the keys they wrote usually decide each one; the\n"
"           verdict says how many happened). Prints one line, 'checker: OK\n"
"           (...)' or 'checker: FAILED: ...'. Run nothing else on the\n"
"           tables between run and check.\n"
"\n"
"OPTIONS (load)\n"
"    --dir DIR            the cluster's directory (required)\n"
"    --accounts N         accounts (default 100000)\n"
"    --init-balance C     each balance at the start, in cents (default 10000)\n"
"    --batch B            accounts per transaction, 1..32 (default 15)\n"
"    --threads T          worker threads (default 1)\n"
"    --coroutines C       coroutines per thread (default 16)\n"
"    --mode M             hybrid | onesided | twosided (default hybrid, or\n"
"                         twosided when the cluster's lock words are\n"
"                         CPU-owned)\n"
"\n"
"OPTIONS (run)\n"
"    --dir DIR            the cluster's directory (required)\n"
"    --duration S         seconds of transactions (default 10)\n"
"    --threads T          worker threads, each a dxl_coord_worker (default 2)\n"
"    --coroutines C       coroutines per thread, one transaction in flight\n"
"                         each (default 8)\n"
"    --mode M             hybrid (DrTM+H: one-sided reads on a location-\n"
"                         cache hit, CAS locks), onesided (every phase\n"
"                         one-sided), twosided (every phase an RPC to the\n"
"                         primary's CPU; needs engine.lock_mode=cpu)\n"
"                         (default hybrid)\n"
"    --accounts N         accounts (default: what load recorded in\n"
"                         DIR/smallbank.json, else 100000)\n"
"    --hot-frac F         share of the accounts in the hot set (0.04)\n"
"    --hot-prob P         share of the account draws that hit it (0.90)\n"
"    --seed S             random seed (default 1); coroutine i draws from S, i\n"
"    --json PATH          the result: system \"dxl\", mode, shards, threads,\n"
"                         coroutines, accounts, duration_s, committed,\n"
"                         attempts, aborts, abort_rate, txn_per_s, p50_us,\n"
"                         p90_us, p99_us, p999_us, mean_us, per_type counts,\n"
"                         unavailable / gave_up / other_errors (failed runs\n"
"                         retried), maybe, maybe_delta, unfinished (failing\n"
"                         when the run ended; nothing of them happened),\n"
"                         epoch_start, epoch_end, max_gap_s and\n"
"                         max_gap_from_s (the longest time without a commit,\n"
"                         after the first second; a stall lasting to the end\n"
"                         of the run counts, max_gap_to_end true), coord_stats\n"
"                         (dxl_coord_stats),\n"
"                         timeline (the per-second lines), summary (the\n"
"                         fields dxl-bench-compare reads: ops = committed,\n"
"                         latency, errors = failed runs, retries = aborts),\n"
"                         setup (with the cluster's cluster.json and the\n"
"                         filesystem of its data)\n"
"    --ledger PATH        the ledger for check (JSON): accounts,\n"
"                         total_before, versions_before {savings, checking},\n"
"                         committed, sum_delta, writes {savings, checking}\n"
"                         (committed writes per key, from the write sets\n"
"                         dxl_txn_footprint gives for the committed\n"
"                         transactions), maybe [{type, delta, writes}]\n"
"    --progress           a line per second (see above)\n"
"    --rate R             open loop: offer R transactions per second on a\n"
"                         fixed schedule (transaction k due at start + k/R,\n"
"                         warm-up included); a coroutine takes the next one\n"
"                         when it is free and waits for its time; latency is\n"
"                         from when it was due (a stall and the backlog\n"
"                         behind it count), the service time from its start;\n"
"                         the in-flight limit is threads x coroutines\n"
"                         (default: closed loop, each coroutine back to back)\n"
"    --warmup S           run S seconds before DURATION starts and leave\n"
"                         them out of the result (first connections, log\n"
"                         writers opened, location caches filled); the\n"
"                         ledger has them all (default 0)\n"
"    --grace S            after DURATION, wait at most S seconds for the\n"
"                         transactions in flight (default 30); past that\n"
"                         the run fails (exit 1, no result, no ledger)\n"
"    --tamper             (testing the checker) after the run, add 1 cent to\n"
"                         checking[0] in a transaction the ledger does not\n"
"                         record: check must then fail\n"
"\n"
"OPTIONS (check)\n"
"    --dir DIR            the cluster's directory (required)\n"
"    --ledger PATH        the ledger of run (required)\n"
"    --versions-before P  take versions_before from another ledger file\n"
"                         (the one in --ledger otherwise)\n"
"    --threads T          threads reading (default 1)\n"
"    --coroutines C       coroutines per thread (default 16)\n"
"\n"
"EXIT STATUS\n"
"    0 success (check: the checker's OK); 1 failure (check: FAILED, or the\n"
"    accounts could not be read); 2 bad usage.\n"
"\n"
"ENVIRONMENT\n"
"    DXL_LOG_LEVEL        debug | info | warn | error | off (default warn)\n"
"\n"
"EXAMPLE\n"
"    dxl cluster up --dir /tmp/c --replicas 3 --shards 3 --ring-size 16M \\\n"
"        --writer-slots 16 -o engine.tables=1:8:20000,2:8:20000 \\\n"
"        -o engine.lock_mode=nic\n"
"    dxl-bench-smallbank load --dir /tmp/c --accounts 40000\n"
"    dxl-bench-smallbank run --dir /tmp/c --duration 10 --threads 2 \\\n"
"        --coroutines 8 --progress --json r.json --ledger l.json\n"
"    dxl-bench-smallbank check --dir /tmp/c --ledger l.json\n"
"    scripts/bench-smallbank.sh runs the three modes and the etcd peer;\n"
"    scripts/run.sh runs SmallBank through a failover.\n";

/* without a subcommand: scripts/bench-smallbank.sh with the tools next to this binary */
static int run_script(int argc, char **argv)
{
	char script[PATH_MAX + 64], self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0) {
		sb_errf("/proc/self/exe: %s", strerror(errno));
		return 1;
	}
	self[n] = 0;
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = 0;
	const char *sd = getenv("DXL_SCRIPTS");
	if (sd)
		snprintf(script, sizeof(script), "%s/bench-smallbank.sh", sd);
	else
		snprintf(script, sizeof(script), "%s/../../scripts/bench-smallbank.sh", self);
	if (access(script, R_OK) != 0) {
		sb_errf("%s: %s (set DXL_SCRIPTS to the scripts folder)", script, strerror(errno));
		return 1;
	}
	char **av = calloc((size_t)argc + 5, sizeof(*av));
	if (!av)
		return 1;
	av[0] = "bash";
	av[1] = script;
	av[2] = "--bin";
	av[3] = self;
	for (int i = 1; i < argc; i++)
		av[i + 3] = argv[i];
	fflush(NULL);
	execvp("bash", av);
	sb_errf("exec bash %s: %s", script, strerror(errno));
	free(av);
	return 1;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc && argv[i][0] == '-'; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			fputs(usage, stdout);
			printf("\nSCRIPT OPTIONS (scripts/bench-smallbank.sh --help):\n"
			       "    --accounts N --duration S --coroutines LIST --threads T\n"
			       "    --modes LIST --shards S --no-etcd --quick --out FILE --keep\n");
			return 0;
		}
	if (argc < 2 || argv[1][0] == '-')
		return run_script(argc, argv);
	if (!strcmp(argv[1], "load"))
		return sb_cmd_load(argc - 1, argv + 1);
	if (!strcmp(argv[1], "run"))
		return sb_cmd_run(argc - 1, argv + 1);
	if (!strcmp(argv[1], "check"))
		return sb_cmd_check(argc - 1, argv + 1);
	sb_errf("unknown command '%s' (load, run, check; --help)", argv[1]);
	return 2;
}
