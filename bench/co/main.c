/* main.c -- dxl-bench-co: the cost of a coroutine context switch */
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/co.h"

static const char usage_text[] =
"NAME\n"
"    dxl-bench-co - cost of a coroutine context switch in dxl's scheduler\n"
"\n"
"SYNOPSIS\n"
"    dxl-bench-co [--quick] [--iters N] [--reps N] [--switch LIST]\n"
"                 [--coroutines LIST] [--out PATH] [--csv[=PATH]]\n"
"\n"
"DESCRIPTION\n"
"    For each switch implementation (asm: the hand-written x86-64 switch\n"
"    that saves only callee-saved state; ucontext: swapcontext) it measures\n"
"\n"
"    raw    one bare switch: the thread and one coroutine switch back and\n"
"           forth N times with nothing in between (dxl_co_switch_cost);\n"
"           ns_per_switch = time / (2 N)\n"
"    yield  the scheduler's round trip: C coroutines each call dxl_co_yield\n"
"           N / C times under dxl_sched_run (no fabric ctx); a yield is two\n"
"           switches (coroutine -> scheduler -> next coroutine) plus the\n"
"           ready-queue work; ns_per_yield = time / yields and\n"
"           ns_per_switch = time / switches counted by the scheduler\n"
"\n"
"    Each cell runs --reps times; the minimum and the median are reported\n"
"    (the machine is shared and noisy: the minimum is the cost, the median\n"
"    the typical). Nothing is asserted; the goal of issue 2 (raw asm switch\n"
"    under 50 ns on x86-64) is reported as met or not.\n"
"\n"
"OPTIONS\n"
"    --iters N           switches (raw) or yields (yield) per repetition.\n"
"                        Default 2000000\n"
"    --reps N            repetitions per cell, 1..100. Default 5\n"
"    --switch LIST       asm,ucontext (or all). Default all that are built\n"
"    --coroutines LIST   coroutine counts for the yield cells, 1..4096.\n"
"                        Default 1,8\n"
"    --quick             --iters 300000 --reps 3 (for CI; options given\n"
"                        explicitly win)\n"
"    --out PATH          JSON result file. Default results/co.json\n"
"    --csv[=PATH]        also write a CSV (one line per cell); default path:\n"
"                        --out with .csv\n"
"    -h, --help          this text\n"
"\n"
"OUTPUT\n"
"    JSON: {benchmark, command, host{...}, iters, reps, results[{switch,\n"
"    kind, coroutines, ns_per_switch_min, ns_per_switch_median,\n"
"    ns_per_yield_min, ns_per_yield_median}], goal{...}}. A table goes to\n"
"    stdout.\n"
"\n"
"EXIT STATUS\n"
"    0 measured; 1 bad usage or a failure (message on stderr).\n"
"\n"
"EXAMPLE\n"
"    dxl-bench-co --out results/co.json\n";

#define MAX_LIST 16

struct cell {
	const char *impl;
	const char *kind;
	uint32_t coroutines;
	double sw_min, sw_med;
	double y_min, y_med; /* yield cells only */
};

struct opts {
	uint64_t iters;
	int reps;
	bool impl[3];
	uint32_t cos[MAX_LIST];
	int n_cos;
	const char *out;
	bool csv;
	char csv_path[4096];
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

struct yarg {
	uint64_t n;
};

static void yielder(void *p)
{
	for (uint64_t i = ((struct yarg *)p)->n; i > 0; i--)
		dxl_co_yield();
}

/* one yield repetition: ns per yield and per switch */
static int yield_once(enum dxl_co_switch impl, uint32_t n_co, uint64_t iters,
		      double *ns_yield, double *ns_switch)
{
	struct dxl_sched_cfg cfg;
	dxl_sched_cfg_init(&cfg);
	cfg.n_coroutines = n_co;
	cfg.switch_impl = impl;
	struct dxl_sched *s = NULL;
	int ret = dxl_sched_new(&cfg, NULL, &s);
	if (ret)
		return ret;
	struct yarg a = {.n = iters / n_co ? iters / n_co : 1};
	for (uint32_t i = 0; i < n_co && !ret; i++)
		ret = dxl_sched_spawn(s, yielder, &a, NULL);
	uint64_t t0 = dxl_now_ns();
	if (!ret)
		ret = dxl_sched_run(s);
	uint64_t dt = dxl_now_ns() - t0;
	struct dxl_sched_stats st;
	dxl_sched_stats(s, &st);
	dxl_sched_delete(&s);
	if (ret)
		return ret;
	*ns_yield = (double)dt / (double)(a.n * n_co);
	*ns_switch = (double)dt / (double)st.switches;
	return 0;
}

static int parse_list(const char *arg, uint32_t *v, int *n, uint32_t lo,
		      uint32_t hi)
{
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", arg);
	*n = 0;
	char *save = NULL;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		uint64_t x;
		if (*n >= MAX_LIST || dxl_parse_u64(t, &x) || x < lo || x > hi)
			return -1;
		v[(*n)++] = (uint32_t)x;
	}
	return *n ? 0 : -1;
}

static json_t *host_json(void)
{
	struct utsname u;
	json_t *h = json_object();
	if (uname(&u) == 0) {
		json_object_set_new(h, "sysname", json_string(u.sysname));
		json_object_set_new(h, "release", json_string(u.release));
		json_object_set_new(h, "machine", json_string(u.machine));
		json_object_set_new(h, "nodename", json_string(u.nodename));
	}
	json_object_set_new(h, "cpus", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
	char model[256] = "";
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (f) {
		char line[512];
		while (fgets(line, sizeof(line), f))
			if (strncmp(line, "model name", 10) == 0) {
				char *c = strchr(line, ':');
				if (c) {
					snprintf(model, sizeof(model), "%s", c + 2);
					model[strcspn(model, "\n")] = '\0';
				}
				break;
			}
		fclose(f);
	}
	json_object_set_new(h, "cpu_model", json_string(model));
	return h;
}

static int write_json(const struct opts *o, const struct cell *c, int n,
		      int argc, char **argv)
{
	json_t *root = json_object();
	char cmd[2048] = "";
	for (int i = 0; i < argc; i++) {
		strncat(cmd, argv[i], sizeof(cmd) - strlen(cmd) - 2);
		if (i + 1 < argc)
			strncat(cmd, " ", sizeof(cmd) - strlen(cmd) - 1);
	}
	json_object_set_new(root, "benchmark", json_string("co"));
	json_object_set_new(root, "command", json_string(cmd));
	json_object_set_new(root, "timestamp_ms", json_integer((json_int_t)dxl_wall_ms()));
	json_object_set_new(root, "host", host_json());
	json_object_set_new(root, "iters", json_integer((json_int_t)o->iters));
	json_object_set_new(root, "reps", json_integer(o->reps));
	json_t *res = json_array();
	double asm_raw = -1;
	for (int i = 0; i < n; i++) {
		json_t *r = json_object();
		json_object_set_new(r, "switch", json_string(c[i].impl));
		json_object_set_new(r, "kind", json_string(c[i].kind));
		json_object_set_new(r, "coroutines", json_integer(c[i].coroutines));
		json_object_set_new(r, "ns_per_switch_min", json_real(c[i].sw_min));
		json_object_set_new(r, "ns_per_switch_median", json_real(c[i].sw_med));
		if (strcmp(c[i].kind, "yield") == 0) {
			json_object_set_new(r, "ns_per_yield_min", json_real(c[i].y_min));
			json_object_set_new(r, "ns_per_yield_median",
					    json_real(c[i].y_med));
		}
		if (!strcmp(c[i].impl, "asm") && !strcmp(c[i].kind, "raw"))
			asm_raw = c[i].sw_min;
		json_array_append_new(res, r);
	}
	json_object_set_new(root, "results", res);
	json_t *goal = json_object();
	json_object_set_new(goal, "what", json_string("raw asm switch under 50 ns "
						      "on x86-64 (issue 2)"));
	json_object_set_new(goal, "ns_per_switch_max", json_real(50.0));
	if (asm_raw >= 0) {
		json_object_set_new(goal, "measured_ns", json_real(asm_raw));
		json_object_set_new(goal, "met", json_boolean(asm_raw < 50.0));
	} else {
		json_object_set_new(goal, "met", json_null());
	}
	json_object_set_new(root, "goal", goal);

	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", o->out);
	char *slash = strrchr(dir, '/');
	if (slash) {
		*slash = '\0';
		char cmdbuf[4200];
		snprintf(cmdbuf, sizeof(cmdbuf), "mkdir -p '%s'", dir);
		if (system(cmdbuf) != 0)
			fprintf(stderr, "dxl-bench-co: cannot create %s\n", dir);
	}
	int rc = json_dump_file(root, o->out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (rc) {
		fprintf(stderr, "dxl-bench-co: cannot write %s\n", o->out);
		return -1;
	}
	if (o->csv) {
		FILE *f = fopen(o->csv_path, "w");
		if (!f) {
			fprintf(stderr, "dxl-bench-co: cannot write %s\n", o->csv_path);
			return -1;
		}
		fprintf(f, "switch,kind,coroutines,ns_per_switch_min,"
			   "ns_per_switch_median,ns_per_yield_min,"
			   "ns_per_yield_median\n");
		for (int i = 0; i < n; i++)
			fprintf(f, "%s,%s,%u,%.2f,%.2f,%.2f,%.2f\n", c[i].impl,
				c[i].kind, c[i].coroutines, c[i].sw_min, c[i].sw_med,
				c[i].y_min, c[i].y_med);
		fclose(f);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = {.iters = 0, .reps = 0, .out = "results/co.json"};
	bool quick = false, any_impl = false;
	static const struct option lo[] = {
		{"help", no_argument, NULL, 'h'},
		{"quick", no_argument, NULL, 'q'},
		{"iters", required_argument, NULL, 'i'},
		{"reps", required_argument, NULL, 'r'},
		{"switch", required_argument, NULL, 's'},
		{"coroutines", required_argument, NULL, 'c'},
		{"out", required_argument, NULL, 'o'},
		{"csv", optional_argument, NULL, 'v'},
		{NULL, 0, NULL, 0},
	};
	int ch;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		uint64_t x;
		switch (ch) {
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		case 'q':
			quick = true;
			break;
		case 'i':
			if (dxl_parse_u64(optarg, &x) || x < 1000 || x > 1000000000ull) {
				fprintf(stderr, "dxl-bench-co: --iters %s: want 1000..1e9\n",
					optarg);
				return 1;
			}
			o.iters = x;
			break;
		case 'r':
			if (dxl_parse_u64(optarg, &x) || x < 1 || x > 100) {
				fprintf(stderr, "dxl-bench-co: --reps %s: want 1..100\n",
					optarg);
				return 1;
			}
			o.reps = (int)x;
			break;
		case 's': {
			char buf[128];
			snprintf(buf, sizeof(buf), "%s", optarg);
			char *save = NULL;
			for (char *t = strtok_r(buf, ",", &save); t;
			     t = strtok_r(NULL, ",", &save)) {
				if (!strcmp(t, "all")) {
					o.impl[DXL_CO_SWITCH_ASM] = true;
					o.impl[DXL_CO_SWITCH_UCONTEXT] = true;
				} else if (!strcmp(t, "asm")) {
					o.impl[DXL_CO_SWITCH_ASM] = true;
				} else if (!strcmp(t, "ucontext")) {
					o.impl[DXL_CO_SWITCH_UCONTEXT] = true;
				} else {
					fprintf(stderr, "dxl-bench-co: --switch: unknown "
							"'%s' (asm, ucontext, all)\n",
						t);
					return 1;
				}
				any_impl = true;
			}
			break;
		}
		case 'c':
			if (parse_list(optarg, o.cos, &o.n_cos, 1, DXL_CO_MAX)) {
				fprintf(stderr, "dxl-bench-co: --coroutines %s: want a "
						"list of 1..%d\n",
					optarg, DXL_CO_MAX);
				return 1;
			}
			break;
		case 'o':
			o.out = optarg;
			break;
		case 'v':
			o.csv = true;
			if (optarg && *optarg)
				snprintf(o.csv_path, sizeof(o.csv_path), "%s", optarg);
			break;
		default:
			fprintf(stderr, "see dxl-bench-co --help\n");
			return 1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "dxl-bench-co: unexpected argument '%s'\n",
			argv[optind]);
		return 1;
	}
	if (!o.iters)
		o.iters = quick ? 300000 : 2000000;
	if (!o.reps)
		o.reps = quick ? 3 : 5;
	if (!any_impl)
		o.impl[DXL_CO_SWITCH_ASM] = o.impl[DXL_CO_SWITCH_UCONTEXT] = true;
	if (!o.n_cos) {
		o.cos[0] = 1;
		o.cos[1] = 8;
		o.n_cos = 2;
	}
	if (o.csv && !o.csv_path[0]) {
		snprintf(o.csv_path, sizeof(o.csv_path), "%s", o.out);
		char *dot = strrchr(o.csv_path, '.');
		char *slash = strrchr(o.csv_path, '/');
		if (dot && (!slash || dot > slash))
			*dot = '\0';
		strncat(o.csv_path, ".csv", sizeof(o.csv_path) - strlen(o.csv_path) - 1);
	}

	struct cell cells[2 * (MAX_LIST + 1)];
	int n = 0;
	double *v = calloc((size_t)o.reps, sizeof(double));
	double *w = calloc((size_t)o.reps, sizeof(double));
	if (!v || !w)
		return 1;
	printf("%-9s %-6s %5s %14s %14s %14s %14s\n", "switch", "kind", "co",
	       "ns/switch min", "ns/switch med", "ns/yield min", "ns/yield med");
	const enum dxl_co_switch impls[] = {DXL_CO_SWITCH_ASM,
					    DXL_CO_SWITCH_UCONTEXT};
	for (int k = 0; k < 2; k++) {
		enum dxl_co_switch impl = impls[k];
		if (!o.impl[impl])
			continue;
		if (!dxl_co_switch_supported(impl)) {
			printf("%-9s not built in this binary: skipped\n",
			       dxl_co_switch_name(impl));
			continue;
		}
		/* warm-up: map the stacks, settle the clock */
		double dummy;
		dxl_co_switch_cost(impl, 10000, &dummy);

		struct cell *c = &cells[n++];
		*c = (struct cell){.impl = dxl_co_switch_name(impl), .kind = "raw",
				   .coroutines = 1};
		for (int r = 0; r < o.reps; r++) {
			int ret = dxl_co_switch_cost(impl, o.iters, &v[r]);
			if (ret) {
				fprintf(stderr, "dxl-bench-co: %s\n", dxl_errmsg());
				return 1;
			}
		}
		c->sw_med = median(v, o.reps);
		c->sw_min = v[0];
		printf("%-9s %-6s %5u %14.1f %14.1f %14s %14s\n", c->impl, c->kind,
		       1u, c->sw_min, c->sw_med, "-", "-");

		for (int j = 0; j < o.n_cos; j++) {
			c = &cells[n++];
			*c = (struct cell){.impl = dxl_co_switch_name(impl),
					   .kind = "yield", .coroutines = o.cos[j]};
			for (int r = 0; r < o.reps; r++) {
				int ret = yield_once(impl, o.cos[j], o.iters, &w[r],
						     &v[r]);
				if (ret) {
					fprintf(stderr, "dxl-bench-co: %s\n",
						dxl_errmsg());
					return 1;
				}
			}
			c->sw_med = median(v, o.reps);
			c->sw_min = v[0];
			c->y_med = median(w, o.reps);
			c->y_min = w[0];
			printf("%-9s %-6s %5u %14.1f %14.1f %14.1f %14.1f\n", c->impl,
			       c->kind, o.cos[j], c->sw_min, c->sw_med, c->y_min,
			       c->y_med);
		}
	}
	free(v);
	free(w);
	if (write_json(&o, cells, n, argc, argv))
		return 1;
	printf("results: %s%s%s\n", o.out, o.csv ? ", " : "",
	       o.csv ? o.csv_path : "");
	return 0;
}
