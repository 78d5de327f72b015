/* main.c -- dxl-bench-locks: what an owned insert costs when the owner's lock-word changes go through its NIC */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/engine.h"
#include "dxl/fabric.h"

static const char usage_text[] =
"NAME\n"
"    dxl-bench-locks - cost of the record store's owned insert per lock mode\n"
"\n"
"SYNOPSIS\n"
"    dxl-bench-locks [--iters N] [--reps N] [--provider tcp|verbs] [--dir DIR]\n"
"\n"
"DESCRIPTION\n"
"    A store of one table (value 32 bytes, 1024 slots, process durability)\n"
"    under DIR. One cycle is what a transaction's insert and its abort do at\n"
"    the owner: dxl_store_insert_owned (the slot's lock word 0 -> owner),\n"
"    dxl_store_delete, and the release of the word (owner -> 0). Modes:\n"
"\n"
"    cpu  DXL_LOCKS_CPU: the word changes by CPU CAS (dxl_store_unlock);\n"
"    nic  DXL_LOCKS_NIC: every change is a fabric CAS through the store's\n"
"         lock agent, a loopback QP of the node's own fabric (the insert's\n"
"         CAS and the release; engine.md \"Lock words: who may touch\n"
"         them\"), waited for while the table's mutex is held.\n"
"\n"
"    Reports ns per cycle and per owned insert alone (min and median of the\n"
"    repetitions; the machine may be shared: the minimum is the cost).\n"
"    Nothing is asserted.\n"
"\n"
"OPTIONS\n"
"    --iters N        cycles per repetition. Default 20000\n"
"    --reps N         repetitions, 1..100. Default 5\n"
"    --provider P     the fabric of the nic mode. Default tcp\n"
"    --dir DIR        where the store file goes. Default /tmp\n"
"    -h, --help       this text\n"
"\n"
"EXIT STATUS\n"
"    0 measured; 1 bad usage or a failure (message on stderr).\n"
"\n"
"EXAMPLE\n"
"    dxl-bench-locks --iters 20000 --reps 5\n";

#define TBL 1

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* one repetition: ns per cycle and per insert */
static int rep(struct dxl_store *s, enum dxl_lock_mode m, struct dxl_lock_agent *ag,
	       uint64_t iters, uint64_t *seq, double *cyc, double *ins)
{
	(void)ag;
	uint64_t t_ins = 0, t0 = dxl_now_ns();
	for (uint64_t i = 0; i < iters; i++) {
		uint64_t own = DXL_LOCK_OWNER(3, ++*seq), slot;
		uint64_t a = dxl_now_ns();
		int r = dxl_store_insert_owned(s, TBL, *seq, 1, "value", 5, own, &slot, NULL);
		t_ins += dxl_now_ns() - a;
		if (!r)
			r = dxl_store_delete(s, TBL, slot, own, 2, NULL);
		if (!r)
			r = m == DXL_LOCKS_CPU ? dxl_store_unlock(s, TBL, slot, own)
					       : dxl_store_unlock_owner(s, TBL, slot, own);
		if (r) {
			fprintf(stderr, "dxl-bench-locks: cycle %llu: %s: %s\n",
				(unsigned long long)i, dxl_errname(r), dxl_errmsg());
			return r;
		}
	}
	*cyc = (double)(dxl_now_ns() - t0) / (double)iters;
	*ins = (double)t_ins / (double)iters;
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t iters = 20000;
	int reps = 5;
	const char *dir = "/tmp", *prov = "tcp";
	static const struct option lo[] = {
		{"iters", required_argument, NULL, 'i'}, {"reps", required_argument, NULL, 'r'},
		{"provider", required_argument, NULL, 'p'}, {"dir", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'i':
			iters = strtoull(optarg, NULL, 10);
			break;
		case 'r':
			reps = atoi(optarg);
			break;
		case 'p':
			prov = optarg;
			break;
		case 'd':
			dir = optarg;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		default:
			fputs(usage_text, stderr);
			return 1;
		}
	}
	struct dxl_fabric_cfg fc;
	dxl_fabric_cfg_init(&fc);
	if (!iters || reps < 1 || reps > 100 || dxl_fabric_provider_parse(prov, &fc.provider)) {
		fprintf(stderr, "dxl-bench-locks: bad --iters, --reps or --provider\n%s", usage_text);
		return 1;
	}
	struct dxl_fabric *f = NULL;
	int ret = dxl_fabric_new(&fc, &f);
	if (ret) {
		fprintf(stderr, "dxl-bench-locks: fabric: %s\n", dxl_errmsg());
		return 1;
	}
	printf("mode  provider  iters   cycle_ns(min/median)   insert_ns(min/median)\n");
	const enum dxl_lock_mode modes[2] = {DXL_LOCKS_CPU, DXL_LOCKS_NIC};
	for (int mi = 0; mi < 2 && !ret; mi++) {
		char path[512];
		snprintf(path, sizeof(path), "%s/dxl-bench-locks-%d.store", dir, (int)getpid());
		struct dxl_store_cfg sc;
		dxl_store_cfg_init(&sc);
		sc.lock_mode = modes[mi];
		struct dxl_table_schema t = {.id = TBL, .value_size = 32, .capacity = 1024};
		struct dxl_region_id id = {.cluster = "bench", .node_id = 1};
		struct dxl_store *s = NULL;
		struct dxl_lock_agent *ag = NULL;
		ret = dxl_store_create(path, DXL_DUR_PROCESS, &id, 0, &t, 1, &sc, &s);
		if (!ret && modes[mi] == DXL_LOCKS_NIC) {
			ret = dxl_store_register(s, f);
			if (!ret)
				ret = dxl_lock_agent_new(f, 7, &ag);
			if (!ret)
				dxl_store_set_lock_agent(s, ag);
		}
		double cyc[100], ins[100];
		uint64_t seq = 0;
		for (int r = 0; r < reps && !ret; r++)
			ret = rep(s, modes[mi], ag, iters, &seq, &cyc[r], &ins[r]);
		if (!ret) {
			qsort(cyc, (size_t)reps, sizeof(double), cmp_d);
			qsort(ins, (size_t)reps, sizeof(double), cmp_d);
			printf("%-5s %-9s %-7llu %9.0f / %-9.0f       %9.0f / %-9.0f\n",
			       modes[mi] == DXL_LOCKS_CPU ? "cpu" : "nic",
			       modes[mi] == DXL_LOCKS_CPU ? "-" : prov, (unsigned long long)iters,
			       cyc[0], cyc[reps / 2], ins[0], ins[reps / 2]);
		} else {
			fprintf(stderr, "dxl-bench-locks: %s mode: %s\n",
				modes[mi] == DXL_LOCKS_CPU ? "cpu" : "nic", dxl_errmsg());
		}
		dxl_store_close(&s);
		dxl_lock_agent_delete(&ag);
		unlink(path);
	}
	dxl_fabric_delete(&f);
	return ret ? 1 : 0;
}
