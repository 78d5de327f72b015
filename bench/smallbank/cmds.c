/* cmds.c -- dxl-bench-smallbank load and check */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/smallbank/sb.h"
#include "common/common.h"

static int parse_count(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	if (dxl_parse_u64(s, out) || *out < lo || *out > hi) {
		sb_errf("--%s %s: a number in %" PRIu64 "..%" PRIu64, opt, s, lo, hi);
		return -1;
	}
	return 0;
}

/* ---- load ------------------------------------------------------------------------ */

static const char load_usage[] =
"Usage: dxl-bench-smallbank load --dir DIR [--accounts N] [--init-balance CENTS]\n"
"           [--batch B] [--threads T] [--coroutines C] [--mode M]\n"
"(dxl-bench-smallbank --help describes every option)\n";

int sb_cmd_load(int argc, char **argv)
{
	const char *dir = NULL;
	struct dxlb_sb_cfg cfg;
	dxlb_sb_cfg_init(&cfg);
	/* one worker with many coroutines loads as fast as two on 2 cores */
	uint64_t batch = 15, threads = 1, coroutines = 16, v;
	const char *mode_s = NULL;
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"accounts", required_argument, NULL, 'a'},
		{"init-balance", required_argument, NULL, 'i'},
		{"batch", required_argument, NULL, 'b'},
		{"threads", required_argument, NULL, 't'},
		{"coroutines", required_argument, NULL, 'c'},
		{"mode", required_argument, NULL, 'm'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int o;
	optind = 1;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'd': dir = optarg; break;
		case 'm': mode_s = optarg; break;
		case 'a':
			if (parse_count("accounts", optarg, 2, 1ull << 40, &cfg.accounts))
				return 2;
			break;
		case 'i':
			if (parse_count("init-balance", optarg, 0, 1ull << 40, &v))
				return 2;
			cfg.init_balance = (int64_t)v;
			break;
		case 'b':
			if (parse_count("batch", optarg, 1, DXL_TXN_MAX_OPS / 2, &batch))
				return 2;
			break;
		case 't':
			if (parse_count("threads", optarg, 1, 64, &threads))
				return 2;
			break;
		case 'c':
			if (parse_count("coroutines", optarg, 1, 256, &coroutines))
				return 2;
			break;
		case 'h': fputs(load_usage, stdout); return 0;
		default: fputs(load_usage, stderr); return 2;
		}
	}
	if (!dir || optind < argc) {
		sb_errf(!dir ? "load needs --dir DIR" : "unexpected argument '%s'", argv[optind]);
		fputs(load_usage, stderr);
		return 2;
	}
	enum dxl_txn_mode mode = DXL_TXN_HYBRID;
	if (mode_s && dxl_txn_mode_parse(mode_s, &mode)) {
		sb_errf("--mode: %s", dxl_errmsg());
		return 2;
	}
	struct sb_env env;
	if (sb_env_open(dir, mode, &env)) {
		sb_errf("%s", dxl_errmsg());
		return 1;
	}
	uint64_t t0 = dxl_now_ns(), existing = 0;
	int ret = sb_load(&env, cfg.accounts, cfg.init_balance, (uint32_t)batch,
			  (uint32_t)threads, (uint32_t)coroutines, &existing);
	if (ret == DXL_E_CONFIG && !mode_s) {
		/* the deployment's lock words are CPU-owned: load two-sided */
		sb_env_close(&env);
		if ((ret = sb_env_open(dir, DXL_TXN_TWOSIDED, &env))) {
			sb_errf("%s", dxl_errmsg());
			return 1;
		}
		ret = sb_load(&env, cfg.accounts, cfg.init_balance, (uint32_t)batch,
			      (uint32_t)threads, (uint32_t)coroutines, &existing);
	}
	double secs = (double)(dxl_now_ns() - t0) / 1e9;
	if (ret) {
		sb_errf("load: %s", dxl_errmsg());
		sb_env_close(&env);
		return 1;
	}
	printf("loaded %" PRIu64 " accounts (%" PRIu64 " rows, %" PRId64
	       " cents each) in %.1f s: %.0f rows/s (%s, %" PRIu64 " accounts per transaction)",
	       cfg.accounts, 2 * cfg.accounts, cfg.init_balance, secs,
	       (double)(2 * cfg.accounts) / secs, dxl_txn_mode_name(dxl_coord_mode(env.coord)), batch);
	if (existing)
		printf("; %" PRIu64 " rows existed already and were kept", existing);
	printf("\n");
	sb_env_close(&env);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/smallbank.json", dir);
	json_t *j = json_pack("{s:I,s:I,s:I}", "accounts", (json_int_t)cfg.accounts,
			      "init_balance", (json_int_t)cfg.init_balance, "existing",
			      (json_int_t)existing);
	if (!j || json_dump_file(j, path, JSON_INDENT(2))) {
		sb_errf("cannot write %s", path);
		json_decref(j);
		return 1;
	}
	json_decref(j);
	return 0;
}

/* ---- check ----------------------------------------------------------------------- */

static const char check_usage[] =
"Usage: dxl-bench-smallbank check --dir DIR --ledger PATH [--versions-before PATH]\n"
"           [--threads T] [--coroutines C]\n"
"(dxl-bench-smallbank --help describes every option)\n";

int sb_cmd_check(int argc, char **argv)
{
	const char *dir = NULL, *ledger = NULL, *vb_path = NULL;
	uint64_t threads = 1, coroutines = 16;
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"ledger", required_argument, NULL, 'l'},
		{"versions-before", required_argument, NULL, 'v'},
		{"threads", required_argument, NULL, 't'},
		{"coroutines", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int o;
	optind = 1;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'd': dir = optarg; break;
		case 'l': ledger = optarg; break;
		case 'v': vb_path = optarg; break;
		case 't':
			if (parse_count("threads", optarg, 1, 64, &threads))
				return 2;
			break;
		case 'c':
			if (parse_count("coroutines", optarg, 1, 256, &coroutines))
				return 2;
			break;
		case 'h': fputs(check_usage, stdout); return 0;
		default: fputs(check_usage, stderr); return 2;
		}
	}
	if (!dir || !ledger || optind < argc) {
		sb_errf(optind < argc ? "unexpected argument '%s'" : "check needs --dir DIR and --ledger PATH",
			argv[optind]);
		fputs(check_usage, stderr);
		return 2;
	}
	struct sb_ledger l;
	json_t *lj = NULL;
	if (sb_ledger_load(ledger, &l, &lj)) {
		printf("checker: FAILED: cannot read the ledger: %s\n", dxl_errmsg());
		return 1;
	}
	if (vb_path) {
		/* the versions before from another file (e.g. the ledger of an
		 * earlier run, or a scan kept aside) */
		struct sb_ledger other;
		if (sb_ledger_load(vb_path, &other, NULL)) {
			printf("checker: FAILED: --versions-before: %s\n", dxl_errmsg());
			sb_ledger_free(&l);
			json_decref(lj);
			return 1;
		}
		if (other.accounts != l.accounts) {
			printf("checker: FAILED: --versions-before has %" PRIu64 " accounts, the ledger %" PRIu64 "\n",
			       other.accounts, l.accounts);
			sb_ledger_free(&other);
			sb_ledger_free(&l);
			json_decref(lj);
			return 1;
		}
		for (int t = 0; t < SB_NTABLES; t++)
			memcpy(l.ver_before[t], other.ver_before[t], l.accounts * sizeof(uint64_t));
		sb_ledger_free(&other);
	}
	const char *ms = json_string_value(json_object_get(lj, "mode"));
	enum dxl_txn_mode mode = DXL_TXN_HYBRID;
	if (ms)
		dxl_txn_mode_parse(ms, &mode);
	json_decref(lj);
	struct sb_env env;
	struct sb_state s;
	int ret = sb_env_open(dir, mode, &env);
	if (ret) {
		printf("checker: FAILED: cannot reach the cluster: %s\n", dxl_errmsg());
		sb_ledger_free(&l);
		return 1;
	}
	if ((ret = sb_state_alloc(&s, l.accounts))) {
		printf("checker: FAILED: %s\n", dxl_errmsg());
		sb_env_close(&env);
		sb_ledger_free(&l);
		return 1;
	}
	uint64_t t0 = dxl_now_ns();
	ret = sb_scan(&env, &s, (uint32_t)threads, (uint32_t)coroutines);
	sb_env_close(&env);
	if (ret) {
		printf("checker: FAILED: reading the accounts: %s\n", dxl_errmsg());
		sb_state_free(&s);
		sb_ledger_free(&l);
		return 1;
	}
	fprintf(stderr, "dxl-bench-smallbank: %" PRIu64 " accounts read in %.1f s\n", l.accounts,
		(double)(dxl_now_ns() - t0) / 1e9);
	char msg[2048];
	ret = sb_check(&l, &s, msg, sizeof(msg));
	if (ret < 0)
		printf("checker: FAILED: %s\n", dxl_errmsg());
	else
		printf("checker: %s\n", msg);
	sb_state_free(&s);
	sb_ledger_free(&l);
	return ret == 0 ? 0 : 1;
}
