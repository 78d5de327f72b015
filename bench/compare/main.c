/* main.c -- dxl-bench-compare: the one way every published comparison is run
 * (docs/performance.md "Method"): two sides A and B, interleaved in
 * alternating order, repeated, with a warm-up both get; the median and
 * range of the paired ratios; a claim only when the ranges do not overlap.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/lib/bench_lib.h"
#include "common/common.h"
#include "common/version.h"

static const char usage[] =
"NAME\n"
"    dxl-bench-compare -- run an A/B comparison the way every published\n"
"    number of dxl is run, and write its result file\n"
"\n"
"SYNOPSIS\n"
"    dxl-bench-compare --spec FILE --out RESULT [--reps N] [--seconds S]\n"
"                      [--warmup S] [--state DIR] [--keep] [--cells LIST]\n"
"    dxl-bench-compare --quick [--out RESULT]     (a self-check, ~10 s)\n"
"    dxl-bench-compare --synthetic OPS_PER_S --seconds S --out FILE\n"
"\n"
"DESCRIPTION\n"
"    The spec (JSON) names two sides, a and b, each with shell commands:\n"
"      setup     once, before anything (start a cluster, a peer...);\n"
"      run       one measurement of DXLB_SECONDS seconds writing the\n"
"                benchmark's JSON to DXLB_OUT; it must hold a \"summary\"\n"
"                object (bench/lib/bench_lib.h: ops_per_s, p50_us, ...);\n"
"      teardown  once at the end, also after a failure or a signal.\n"
"    For each cell of the spec (a set of environment variables: payload,\n"
"    in flight, offered rate...; a cell's variables are unset again before\n"
"    the next cell) both sides get a warm-up run first, then\n"
"    REPS repetitions, each running A and B back to back, in alternating\n"
"    order (A B, B A, A B, ...; the first cell starts with A, the next with\n"
"    B). For each metric (a path in the summary, higher or lower better,\n"
"    optionally a goal factor) it reports the median and range of A, of B,\n"
"    and of the paired ratios A/B, and a verdict: \"a better\" or \"b\n"
"    better\" only when the ranges of A and B do not overlap, and only from\n"
"    at least 5 repetitions; otherwise no claim. A goal \"A >= G x B\"\n"
"    (higher better) is met only when A's worst >= G x B's best, not met\n"
"    when A's best < G x B's worst, else undecided (lower better: mirrored).\n"
"    A run with fewer than 5 repetitions or under 10 s each is marked\n"
"    \"smoke\": its numbers carry no claim (each metric's \"claim\" says\n"
"    \"none: smoke run\"; \"verdict\" still shows what the rule found).\n"
"\n"
"    Every run records its setup: the load averages before and after, the\n"
"    machine's CPU use during it (/proc/stat), the CPU time the idle side's\n"
"    processes used meanwhile (pids its setup listed), and the benchmark's\n"
"    own setup block (build, provider, durability...). The result also has\n"
"    the machine (CPU model and count, kernel, memory), the source tree's\n"
"    `git describe --dirty`, each side's configuration (what its setup\n"
"    wrote: peer version and flags...) and the filesystem of each data\n"
"    directory it listed.\n"
"\n"
"    The spec (every field but a, b and name optional):\n"
"      {\"name\": \"log-durable\", \"title\": \"...\", \"description\": \"...\",\n"
"       \"reps\": 5, \"seconds\": 10, \"warmup_seconds\": 10,\n"
"       \"cell_warmup_seconds\": 3, \"env\": {\"K\": \"V\"},\n"
"       \"metrics\": [{\"name\": \"throughput\", \"path\": \"ops_per_s\",\n"
"                    \"better\": \"higher\", \"goal\": 10, \"unit\": \"ops/s\"}],\n"
"       \"a\": {\"label\": \"dxl msync\", \"durable\": true, \"setup\": \"...\",\n"
"             \"run\": \"...\", \"teardown\": \"...\"},\n"
"       \"b\": {...},\n"
"       \"cells\": [{\"name\": \"64 B x 16\", \"env\": {\"INFLIGHT\": \"16\"}}]}\n"
"    Commands run with /bin/sh -c in the directory the runner was started\n"
"    in, with the spec's and the cell's env and: DXLB_SIDE (a|b), DXLB_STATE\n"
"    (the side's scratch folder), DXLB_PHASE (setup|warmup|rep|teardown),\n"
"    DXLB_REP, DXLB_CELL, DXLB_SECONDS, DXLB_OUT. A setup may write, in\n"
"    DXLB_STATE: env (KEY=VALUE lines, exported to the later commands),\n"
"    config.json (the side's configuration, kept in the result), datadirs\n"
"    (a path per line) and pids (a pid per line).\n"
"\n"
"OPTIONS\n"
"    --spec FILE        the comparison (above)\n"
"    --out RESULT       the result file (JSON) [results/compare-NAME.json]\n"
"    --reps N           repetitions (overrides the spec)\n"
"    --seconds S        seconds per run (overrides the spec)\n"
"    --warmup S         seconds of the first warm-up (overrides the spec)\n"
"    --cells LIST       only these cells (their index, 0-based: 0,2)\n"
"    --state DIR        scratch folder [a new /tmp/dxl-bench-compare.*]\n"
"    --keep             keep the scratch folder (it is kept on failure)\n"
"    --quick            the self-check: two synthetic sides (this program's\n"
"                       --synthetic), 5 repetitions of 0.3 s, one cell\n"
"                       where A is twice B and one where they are equal\n"
"    --synthetic R      act as a benchmark for tests: sleep --seconds, write\n"
"                       a summary with R ops/s and a fixed latency to --out\n"
"    -h, --help         this text\n"
"\n"
"OUTPUT\n"
"    A line per run and a table per cell on stdout; RESULT: {format, name,\n"
"    title, spec, smoke, reps, seconds, machine, source_git, runner_build,\n"
"    date_start, date_end, wall_s, loadavg_start, loadavg_end, sides {a, b:\n"
"    {label, config, datadirs}}, cells [{name, env, warmup {a, b}, runs [{rep,\n"
"    order, a, b: {exit, wall_s, loadavg_before, loadavg_after, cpu_busy,\n"
"    idle_side_cpu_s, summary}}], bench_setup {a, b}, metrics [{name, path,\n"
"    better, unit, goal, pairs, a, b, ratio: {median, min, max, values},\n"
"    verdict, goal_verdict, claim, goal_claim}]}], problems}.\n"
"\n"
"EXIT STATUS\n"
"    0 every run of every cell gave its metrics; 1 a setup or run failed (the\n"
"    result file is written all the same, with the problems); 2 bad usage.\n";

#define MAX_METRICS 8
#define MAX_CELLS 64

struct side {
	char id; /* 'a' or 'b' */
	const char *label;
	const char *setup, *run, *teardown;
	char state[PATH_MAX];
	json_t *env;  /* from the setup's env file */
	pid_t pids[64];
	int npids;
	bool up;
};

struct metric {
	const char *name, *path, *unit;
	enum dxlb_better better;
	double goal;
};

static volatile sig_atomic_t g_stop;
static pid_t g_child;

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
	if (g_child > 0)
		kill(-g_child, SIGTERM);
}

static void die_usage(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "dxl-bench-compare: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, " (--help)\n");
	va_end(ap);
	exit(2);
}

static double now_s(void)
{
	return (double)dxl_now_ns() / 1e9;
}

static json_t *iso_now(void)
{
	time_t t = time(NULL);
	char ts[64];
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
	return json_string(ts);
}

/* ---- the machine ------------------------------------------------------------ */

struct cpustat {
	unsigned long long busy, total;
};

static int cpustat_read(struct cpustat *c)
{
	FILE *f = fopen("/proc/stat", "r");
	unsigned long long v[10] = {0};
	int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
			   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9])
		  : 0;
	if (f)
		fclose(f);
	if (n < 8)
		return -1;
	/* user nice system idle iowait irq softirq steal (guest counted in user) */
	c->total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
	c->busy = c->total - v[3] - v[4];
	return 0;
}

/* CPU seconds (user + system) of a process, -1 if it is gone */
static double proc_cpu_s(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	if (!p)
		return -1;
	/* after ") ": state(3) ppid pgrp session tty tpgid flags minflt cminflt
	 * majflt cmajflt utime(14) stime(15) */
	unsigned long long ut = 0, st = 0;
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double side_cpu_s(const struct side *s)
{
	double t = 0;
	for (int i = 0; i < s->npids; i++) {
		double c = proc_cpu_s(s->pids[i]);
		if (c > 0)
			t += c;
	}
	return t;
}

static json_t *machine_json(void)
{
	json_t *s = dxlb_setup_json(0, NULL);
	json_t *m = json_object();
	const char *keep[] = {"kernel", "host", "cpus", "cpu_model", "mem_gib"};
	for (size_t i = 0; i < DXL_ARRAY_SIZE(keep); i++) {
		json_t *v = json_object_get(s, keep[i]);
		if (v)
			json_object_set(m, keep[i], v);
	}
	json_decref(s);
	return m;
}

/* the first line of a command's output, or "" */
static void cmd_line(const char *cmd, char *out, size_t cap)
{
	out[0] = 0;
	FILE *p = popen(cmd, "r");
	if (!p)
		return;
	if (fgets(out, (int)cap, p))
		out[strcspn(out, "\n")] = 0;
	pclose(p);
}

/* ---- running a command -------------------------------------------------------- */

static void set_env_obj(json_t *env)
{
	const char *k;
	json_t *v;
	json_object_foreach(env, k, v) {
		if (json_is_string(v))
			setenv(k, json_string_value(v), 1);
		else if (json_is_integer(v)) {
			char b[32];
			snprintf(b, sizeof(b), "%lld", (long long)json_integer_value(v));
			setenv(k, b, 1);
		} else if (json_is_real(v)) {
			char b[64];
			snprintf(b, sizeof(b), "%.17g", json_real_value(v));
			setenv(k, b, 1);
		}
	}
}

/*
 * run_cmd -- /bin/sh -c cmd in a process group of its own, stdout and stderr
 * appended to log; killed (TERM, then KILL 10 s later) after limit_s.
 * Returns the exit status, 128+signal, or -1 if it could not start.
 */
static int run_cmd(const char *cmd, const char *log, double limit_s, bool reap_group)
{
	fflush(NULL);
	pid_t p = fork();
	if (p < 0)
		return -1;
	if (p == 0) {
		setpgid(0, 0);
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		int nul = open("/dev/null", O_RDONLY);
		if (nul >= 0) {
			dup2(nul, 0);
			close(nul);
		}
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	setpgid(p, p);
	g_child = p;
	double end = now_s() + limit_s, kill_at = 0;
	int st = 0;
	for (;;) {
		pid_t r = waitpid(p, &st, WNOHANG);
		if (r == p)
			break;
		if (r < 0 && errno != EINTR)
			break;
		double t = now_s();
		if (!kill_at && t > end) {
			fprintf(stderr, "dxl-bench-compare: '%.60s...' ran past %.0f s: stopping it\n",
				cmd, limit_s);
			kill(-p, SIGTERM);
			kill_at = t + 10;
		} else if (kill_at && t > kill_at) {
			kill(-p, SIGKILL);
			kill_at = t + 3600;
		}
		usleep(20000);
	}
	g_child = 0;
	/* a run's leftovers in its group are not ours to keep (a setup's
	 * daemons stay: its teardown stops them) */
	if (reap_group)
		kill(-p, SIGKILL);
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return -1;
}

static void show_tail(const char *log, int lines)
{
	char cmd[PATH_MAX + 64];
	snprintf(cmd, sizeof(cmd), "tail -n %d '%s' >&2", lines, log);
	if (system(cmd) != 0)
		fprintf(stderr, "(no log)\n");
}

/* the side's environment for a command */
static void side_env(const struct side *s, const char *phase, int cell, int rep,
		     double seconds, const char *out)
{
	char b[64];
	setenv("DXLB_SIDE", s->id == 'a' ? "a" : "b", 1);
	setenv("DXLB_STATE", s->state, 1);
	setenv("DXLB_PHASE", phase, 1);
	snprintf(b, sizeof(b), "%d", cell);
	setenv("DXLB_CELL", b, 1);
	snprintf(b, sizeof(b), "%d", rep);
	setenv("DXLB_REP", b, 1);
	snprintf(b, sizeof(b), "%g", seconds);
	setenv("DXLB_SECONDS", b, 1);
	setenv("DXLB_OUT", out ? out : "", 1);
	if (s->env)
		set_env_obj(s->env);
}

/* read DXLB_STATE/env (KEY=VALUE lines) and pids after a setup */
static void side_read_setup(struct side *s)
{
	char path[PATH_MAX + 16], line[4096];
	snprintf(path, sizeof(path), "%s/env", s->state);
	FILE *f = fopen(path, "r");
	json_decref(s->env);
	s->env = json_object();
	while (f && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		char *eq = strchr(line, '=');
		if (!eq || eq == line)
			continue;
		*eq = 0;
		json_object_set_new(s->env, line, json_string(eq + 1));
	}
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "%s/pids", s->state);
	f = fopen(path, "r");
	s->npids = 0;
	while (f && s->npids < (int)DXL_ARRAY_SIZE(s->pids) && fgets(line, sizeof(line), f)) {
		long v = strtol(line, NULL, 10);
		if (v > 0)
			s->pids[s->npids++] = (pid_t)v;
	}
	if (f)
		fclose(f);
}

static json_t *side_config_json(const struct side *s)
{
	char path[PATH_MAX + 16], line[PATH_MAX];
	json_t *o = json_object();
	json_object_set_new(o, "label", json_string(s->label));
	snprintf(path, sizeof(path), "%s/config.json", s->state);
	json_error_t e;
	json_t *c = json_load_file(path, 0, &e);
	json_object_set_new(o, "config", c ? c : json_null());
	json_t *dd = json_array();
	snprintf(path, sizeof(path), "%s/datadirs", s->state);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (line[0])
			json_array_append_new(dd, dxlb_fs_json(line));
	}
	if (f)
		fclose(f);
	json_object_set_new(o, "datadirs", dd);
	return o;
}

/* a dotted path ("latency.p50_us") in obj; NULL if absent */
static json_t *json_path(json_t *obj, const char *path)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", path);
	char *save = NULL;
	json_t *cur = obj;
	for (char *t = strtok_r(buf, ".", &save); t && cur; t = strtok_r(NULL, ".", &save))
		cur = json_object_get(cur, t);
	return cur;
}

/* ---- the comparison -------------------------------------------------------------- */

struct ctx {
	json_t *spec, *result, *problems;
	struct side side[2];
	struct metric m[MAX_METRICS];
	int nm;
	int reps;
	double seconds, warmup, cell_warmup;
	const char *name;
	bool smoke; /* dxlb_smoke: no claim whatever the numbers */
};

static void problem(struct ctx *c, const char *fmt, ...)
{
	char b[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(b, sizeof(b), fmt, ap);
	va_end(ap);
	fprintf(stderr, "dxl-bench-compare: %s\n", b);
	json_array_append_new(c->problems, json_string(b));
}

/* one run of a side: its record (exit, times, load, summary) */
static json_t *one_run(struct ctx *c, struct side *s, struct side *other, const char *phase,
		       int cell, int rep, double seconds, json_t **bench_setup)
{
	char out[PATH_MAX + 64], log[PATH_MAX + 16];
	snprintf(out, sizeof(out), "%s/c%d-%s%d.json", s->state, cell, phase, rep);
	snprintf(log, sizeof(log), "%s/log", s->state);
	unlink(out);
	json_t *r = json_object();
	json_object_set_new(r, "loadavg_before", dxlb_loadavg_json());
	struct cpustat c0, c1;
	int have_cpu = cpustat_read(&c0) == 0;
	double o0 = side_cpu_s(other), t0 = now_s();
	side_env(s, phase, cell, rep, seconds, out);
	int rc = run_cmd(s->run, log, 3 * seconds + 180, true);
	double t1 = now_s();
	double o1 = side_cpu_s(other);
	json_object_set_new(r, "exit", json_integer(rc));
	json_object_set_new(r, "wall_s", json_real(t1 - t0));
	json_object_set_new(r, "loadavg_after", dxlb_loadavg_json());
	if (have_cpu && cpustat_read(&c1) == 0 && c1.total > c0.total)
		json_object_set_new(r, "cpu_busy", json_real((double)(c1.busy - c0.busy) /
							     (double)(c1.total - c0.total)));
	if (other->npids)
		json_object_set_new(r, "idle_side_cpu_s", json_real(o1 - o0));
	json_error_t e;
	json_t *res = json_load_file(out, 0, &e);
	json_t *sum = res ? json_object_get(res, "summary") : NULL;
	if (sum)
		json_object_set(r, "summary", sum);
	if (res && bench_setup && !*bench_setup && json_object_get(res, "setup"))
		*bench_setup = json_incref(json_object_get(res, "setup"));
	if (rc != 0 || !sum) {
		problem(c, "cell %d, %s %d of side %c (%s): %s", cell, phase, rep, s->id, s->label,
			rc != 0 ? "the run failed" : "its result has no summary");
		if (rc != 0) {
			char b[32];
			snprintf(b, sizeof(b), "exit %d", rc);
			json_object_set_new(r, "error", json_string(b));
		} else {
			json_object_set_new(r, "error", json_string("no summary in the result"));
		}
		show_tail(log, 15);
	}
	json_decref(res);
	return r;
}

static const char *fmt_val(double v, char *b, size_t cap)
{
	if (v >= 100000)
		snprintf(b, cap, "%.0f", v);
	else if (v >= 100)
		snprintf(b, cap, "%.0f", v);
	else if (v >= 10)
		snprintf(b, cap, "%.1f", v);
	else
		snprintf(b, cap, "%.3g", v);
	return b;
}

static json_t *range_json(const struct dxlb_range *r, const double *v, size_t n)
{
	json_t *o = json_object();
	json_object_set_new(o, "median", json_real(r->median));
	json_object_set_new(o, "min", json_real(r->min));
	json_object_set_new(o, "max", json_real(r->max));
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_real(v[i]));
	json_object_set_new(o, "values", a);
	return o;
}

/* the metrics of a cell from its runs */
static json_t *cell_metrics(struct ctx *c, json_t *runs, const char *cellname)
{
	json_t *ms = json_array();
	size_t nr = json_array_size(runs);
	for (int k = 0; k < c->nm; k++) {
		const struct metric *m = &c->m[k];
		double *a = calloc(nr + 1, sizeof(double)), *b = calloc(nr + 1, sizeof(double));
		size_t n = 0, missing = 0;
		for (size_t i = 0; i < nr; i++) {
			json_t *run = json_array_get(runs, i);
			json_t *va = json_path(json_object_get(json_object_get(run, "a"), "summary"),
					       m->path);
			json_t *vb = json_path(json_object_get(json_object_get(run, "b"), "summary"),
					       m->path);
			double x = json_number_value(va), y = json_number_value(vb);
			if (!json_is_number(va) || !json_is_number(vb) || !(x > 0) || !(y > 0)) {
				missing++;
				continue;
			}
			a[n] = x;
			b[n] = y;
			n++;
		}
		json_t *o = json_object();
		json_object_set_new(o, "name", json_string(m->name));
		json_object_set_new(o, "path", json_string(m->path));
		json_object_set_new(o, "better", json_string(m->better == DXLB_HIGHER_BETTER ? "higher"
											 : "lower"));
		json_object_set_new(o, "unit", json_string(m->unit ? m->unit : ""));
		json_object_set_new(o, "goal", m->goal > 0 ? json_real(m->goal) : json_null());
		json_object_set_new(o, "pairs", json_integer((json_int_t)n));
		json_object_set_new(o, "pairs_missing", json_integer((json_int_t)missing));
		struct dxlb_cmp cmp;
		if (n && dxlb_compare(a, b, n, m->better, DXLB_MIN_REPS, m->goal, &cmp) == 0) {
			double *r = calloc(n, sizeof(double));
			for (size_t i = 0; i < n; i++)
				r[i] = a[i] / b[i];
			json_object_set_new(o, "a", range_json(&cmp.a, a, n));
			json_object_set_new(o, "b", range_json(&cmp.b, b, n));
			json_object_set_new(o, "ratio", range_json(&cmp.ratio, r, n));
			json_object_set_new(o, "verdict", json_string(dxlb_verdict_name(cmp.verdict)));
			json_object_set_new(o, "goal_verdict",
					    m->goal > 0 ? json_string(dxlb_goal_name(cmp.goal))
							: json_null());
			/* what may be said: the verdict, unless the run is a smoke run */
			json_object_set_new(o, "claim",
					    json_string(c->smoke ? "none: smoke run"
								 : dxlb_verdict_name(cmp.verdict)));
			json_object_set_new(o, "goal_claim",
					    m->goal <= 0 ? json_null()
					    : c->smoke   ? json_string("none: smoke run")
							 : json_string(dxlb_goal_name(cmp.goal)));
			free(r);
			char x1[32], x2[32], x3[32], y1[32], y2[32], y3[32];
			printf("  %-14s a %s [%s-%s]  b %s [%s-%s]  a/b %.3g [%.3g-%.3g]  n=%zu  %s%s%s%s\n",
			       m->name, fmt_val(cmp.a.median, x1, 32), fmt_val(cmp.a.min, x2, 32),
			       fmt_val(cmp.a.max, x3, 32), fmt_val(cmp.b.median, y1, 32),
			       fmt_val(cmp.b.min, y2, 32), fmt_val(cmp.b.max, y3, 32),
			       cmp.ratio.median, cmp.ratio.min, cmp.ratio.max, n,
			       dxlb_verdict_name(cmp.verdict), m->goal > 0 ? "; goal " : "",
			       m->goal > 0 ? dxlb_goal_name(cmp.goal) : "",
			       c->smoke ? "  (SMOKE: no claim)" : "");
		} else {
			json_object_set_new(o, "verdict", json_string("no claim: no valid pairs"));
			json_object_set_new(o, "goal_verdict", json_null());
			json_object_set_new(o, "claim", json_string("no claim: no valid pairs"));
			json_object_set_new(o, "goal_claim", json_null());
			printf("  %-14s no valid pairs (%s)\n", m->name, cellname);
		}
		json_array_append_new(ms, o);
		free(a);
		free(b);
	}
	return ms;
}

static int do_setup(struct ctx *c, struct side *s)
{
	char log[PATH_MAX + 16];
	snprintf(log, sizeof(log), "%s/log", s->state);
	if (!s->setup || !s->setup[0]) {
		side_read_setup(s);
		s->up = true;
		return 0;
	}
	printf("setup %c (%s)\n", s->id, s->label);
	fflush(stdout);
	side_env(s, "setup", -1, 0, c->seconds, NULL);
	int rc = run_cmd(s->setup, log, 900, false);
	s->up = true; /* the teardown runs whatever happened */
	side_read_setup(s);
	if (rc != 0) {
		problem(c, "setup of side %c (%s) failed: exit %d", s->id, s->label, rc);
		show_tail(log, 25);
		return -1;
	}
	return 0;
}

static void do_teardown(struct ctx *c, struct side *s)
{
	if (!s->up)
		return;
	s->up = false;
	if (!s->teardown || !s->teardown[0])
		return;
	char log[PATH_MAX + 16];
	snprintf(log, sizeof(log), "%s/log", s->state);
	side_env(s, "teardown", -1, 0, c->seconds, NULL);
	int rc = run_cmd(s->teardown, log, 300, false);
	if (rc != 0)
		problem(c, "teardown of side %c (%s) failed: exit %d", s->id, s->label, rc);
}

static int parse_metric(json_t *j, struct metric *m)
{
	m->name = json_string_value(json_object_get(j, "name"));
	m->path = json_string_value(json_object_get(j, "path"));
	m->unit = json_string_value(json_object_get(j, "unit"));
	const char *b = json_string_value(json_object_get(j, "better"));
	json_t *g = json_object_get(j, "goal");
	m->goal = json_is_number(g) ? json_number_value(g) : 0;
	if (!m->name || !m->path || !b || (strcmp(b, "higher") && strcmp(b, "lower")) ||
	    !(m->goal >= 0))
		return -1;
	m->better = strcmp(b, "higher") ? DXLB_LOWER_BETTER : DXLB_HIGHER_BETTER;
	return 0;
}

/* ---- the synthetic benchmark (tests, --quick) ----------------------------------- */

static int synthetic(double ops_per_s, double seconds, const char *out)
{
	static struct dxl_hist h;
	dxl_hist_reset(&h);
	uint64_t n = (uint64_t)(ops_per_s * seconds);
	/* latency 1e6 / ops_per_s us: one operation in flight */
	for (uint64_t i = 0; i < n && i < 100000; i++)
		dxl_hist_record(&h, (uint64_t)(1e9 / ops_per_s));
	struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
	nanosleep(&ts, NULL);
	struct dxlb_summary s = {.ops = n, .seconds = seconds, .lat = &h};
	json_t *r = json_object();
	json_object_set_new(r, "summary", dxlb_summary_json(&s));
	char *argv[] = {"synthetic", NULL};
	json_t *setup = dxlb_setup_json(1, argv);
	dxlb_setup_end(setup);
	json_object_set_new(r, "setup", setup);
	int rc = json_dump_file(r, out, JSON_INDENT(1));
	json_decref(r);
	return rc ? 1 : 0;
}

static json_t *quick_spec(void)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return NULL;
	self[n] = 0;
	char a[PATH_MAX + 128], b[PATH_MAX + 128];
	snprintf(a, sizeof(a), "'%s' --synthetic \"$A_RATE\" --seconds \"$DXLB_SECONDS\" --out \"$DXLB_OUT\"", self);
	snprintf(b, sizeof(b), "'%s' --synthetic 1000 --seconds \"$DXLB_SECONDS\" --out \"$DXLB_OUT\"", self);
	return json_pack(
		"{s:s, s:s, s:i, s:f, s:f, s:f,"
		" s:[{s:s, s:s, s:s, s:f, s:s}, {s:s, s:s, s:s, s:s}],"
		" s:{s:s, s:s, s:s, s:s}, s:{s:s, s:s, s:s, s:s},"
		" s:[{s:s, s:{s:s}}, {s:s, s:{s:s}}]}",
		"name", "self-check", "title", "the runner's self-check: synthetic sides", "reps", 5,
		"seconds", 0.3, "warmup_seconds", 0.1, "cell_warmup_seconds", 0.1, "metrics",
		"name", "throughput", "path", "ops_per_s", "better", "higher", "goal", 1.5, "unit",
		"ops/s", "name", "p50", "path", "p50_us", "better", "lower", "unit", "us", "a",
		"label", "synthetic A", "setup", "echo pid=$$ > \"$DXLB_STATE/setup-ran\"", "run", a,
		"teardown", "true", "b", "label", "synthetic B (1000 ops/s)", "setup", "", "run", b,
		"teardown", "", "cells", "name", "A twice B", "env", "A_RATE", "2000", "name",
		"A equal to B", "env", "A_RATE", "1000");
}

/* ---- main ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	const char *spec_path = NULL, *out = NULL, *state = NULL, *cells_opt = NULL;
	double reps_o = -1, seconds_o = -1, warmup_o = -1, synth = -1;
	bool keep = false, quick = false;
	static const struct option lo[] = {
		{"spec", 1, 0, 's'},   {"out", 1, 0, 'o'},      {"reps", 1, 0, 'r'},
		{"seconds", 1, 0, 'S'}, {"warmup", 1, 0, 'w'},  {"state", 1, 0, 'd'},
		{"keep", 0, 0, 'k'},   {"cells", 1, 0, 'c'},    {"quick", 0, 0, 'q'},
		{"synthetic", 1, 0, 'y'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	int ch;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		char *end = NULL;
		switch (ch) {
		case 's': spec_path = optarg; break;
		case 'o': out = optarg; break;
		case 'd': state = optarg; break;
		case 'k': keep = true; break;
		case 'c': cells_opt = optarg; break;
		case 'q': quick = true; break;
		case 'r':
		case 'S':
		case 'w':
		case 'y': {
			double v = strtod(optarg, &end);
			if (!*optarg || *end || !(v >= 0) || (ch == 'r' && (v < 1 || v != (int)v)))
				die_usage("--%s '%s': a number%s", ch == 'r' ? "reps" : ch == 'S' ? "seconds"
								   : ch == 'w' ? "warmup" : "synthetic",
					  optarg, ch == 'r' ? " >= 1" : " >= 0");
			*(ch == 'r' ? &reps_o : ch == 'S' ? &seconds_o : ch == 'w' ? &warmup_o : &synth) = v;
			break;
		}
		case 'h': fputs(usage, stdout); return 0;
		default: die_usage("bad option");
		}
	}
	if (optind < argc)
		die_usage("unexpected argument '%s'", argv[optind]);
	if (synth >= 0) {
		if (!out || !(synth > 0) || seconds_o < 0)
			die_usage("--synthetic needs a rate > 0, --seconds and --out");
		return synthetic(synth, seconds_o, out);
	}
	struct ctx c;
	memset(&c, 0, sizeof(c));
	json_error_t je;
	if (quick)
		c.spec = quick_spec();
	else if (spec_path)
		c.spec = json_load_file(spec_path, 0, &je);
	else
		die_usage("--spec FILE or --quick is needed");
	if (!c.spec) {
		fprintf(stderr, "dxl-bench-compare: %s: %s (line %d)\n", spec_path ? spec_path : "quick",
			je.text, je.line);
		return 2;
	}
	c.name = json_string_value(json_object_get(c.spec, "name"));
	if (!c.name || !c.name[0] || strspn(c.name, "abcdefghijklmnopqrstuvwxyz0123456789-_.") !=
					     strlen(c.name))
		die_usage("the spec needs a \"name\" of [a-z0-9-_.]");
	json_t *jr = json_object_get(c.spec, "reps"), *js = json_object_get(c.spec, "seconds");
	json_t *jw = json_object_get(c.spec, "warmup_seconds"),
	       *jcw = json_object_get(c.spec, "cell_warmup_seconds");
	c.reps = reps_o > 0 ? (int)reps_o : json_is_integer(jr) ? (int)json_integer_value(jr) : 5;
	c.seconds = seconds_o > 0 ? seconds_o : json_is_number(js) ? json_number_value(js) : 10;
	c.warmup = warmup_o >= 0 ? warmup_o : json_is_number(jw) ? json_number_value(jw) : 10;
	c.cell_warmup = json_is_number(jcw) ? json_number_value(jcw) : 3;
	if (warmup_o >= 0 && c.cell_warmup > c.warmup)
		c.cell_warmup = c.warmup;
	if (c.reps < 1 || c.reps > 100 || !(c.seconds > 0) || !(c.warmup >= 0))
		die_usage("reps 1..100, seconds > 0, warmup >= 0");
	json_t *jm = json_object_get(c.spec, "metrics");
	if (!jm) {
		/* the default: throughput and p50 */
		jm = json_pack("[{s:s,s:s,s:s,s:s},{s:s,s:s,s:s,s:s}]", "name", "throughput",
			       "path", "ops_per_s", "better", "higher", "unit", "ops/s", "name",
			       "p50", "path", "p50_us", "better", "lower", "unit", "us");
		json_object_set_new(c.spec, "metrics", jm);
	}
	size_t i;
	json_t *v;
	json_array_foreach(jm, i, v) {
		if (c.nm == MAX_METRICS || parse_metric(v, &c.m[c.nm]))
			die_usage("metric %zu: needs name, path, better (higher|lower), goal >= 0", i);
		c.nm++;
	}
	for (int k = 0; k < 2; k++) {
		struct side *s = &c.side[k];
		json_t *js2 = json_object_get(c.spec, k ? "b" : "a");
		s->id = k ? 'b' : 'a';
		s->label = json_string_value(json_object_get(js2, "label"));
		s->setup = json_string_value(json_object_get(js2, "setup"));
		s->run = json_string_value(json_object_get(js2, "run"));
		s->teardown = json_string_value(json_object_get(js2, "teardown"));
		if (!js2 || !s->label || !s->run)
			die_usage("side %c needs a label and a run command", s->id);
	}
	json_t *cells = json_object_get(c.spec, "cells");
	if (!cells || !json_array_size(cells)) {
		cells = json_pack("[{s:s,s:{}}]", "name", "", "env");
		json_object_set_new(c.spec, "cells", cells);
	}
	if (json_array_size(cells) > MAX_CELLS)
		die_usage("at most %d cells", MAX_CELLS);
	bool use_cell[MAX_CELLS];
	for (size_t k = 0; k < MAX_CELLS; k++)
		use_cell[k] = !cells_opt;
	if (cells_opt) {
		char buf[256];
		snprintf(buf, sizeof(buf), "%s", cells_opt);
		char *save = NULL;
		for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
			uint64_t x;
			if (dxl_parse_u64(t, &x) || x >= json_array_size(cells))
				die_usage("--cells: index '%s' not among the %zu cells", t,
					  json_array_size(cells));
			use_cell[x] = true;
		}
	}
	char outbuf[PATH_MAX];
	if (!out) {
		snprintf(outbuf, sizeof(outbuf), "results/compare-%s.json", c.name);
		out = outbuf;
	}
	char tmp[64] = "/tmp/dxl-bench-compare.XXXXXX";
	if (!state) {
		if (!mkdtemp(tmp)) {
			perror("mkdtemp");
			return 1;
		}
		state = tmp;
	} else if (mkdir(state, 0755) && errno != EEXIST) {
		perror(state);
		return 1;
	}
	char root[PATH_MAX - 64];
	char rootbuf[PATH_MAX];
	if (!realpath(state, rootbuf) || strlen(rootbuf) >= sizeof(root)) {
		fprintf(stderr, "dxl-bench-compare: %s: no such folder or too long a path\n", state);
		return 1;
	}
	memcpy(root, rootbuf, strlen(rootbuf) + 1);
	for (int k = 0; k < 2; k++) {
		snprintf(c.side[k].state, sizeof(c.side[k].state), "%s/%c", root, c.side[k].id);
		mkdir(c.side[k].state, 0755);
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	set_env_obj(json_object_get(c.spec, "env"));

	c.problems = json_array();
	c.result = json_object();
	json_t *R = c.result;
	bool smoke = c.smoke = dxlb_smoke(c.reps, c.seconds);
	char git[128];
	cmd_line("git describe --always --dirty --abbrev=12 2>/dev/null", git, sizeof(git));
	json_object_set_new(R, "format", json_string("dxl-bench-compare/1"));
	json_object_set_new(R, "name", json_string(c.name));
	json_t *title = json_object_get(c.spec, "title");
	json_object_set_new(R, "title", title ? json_incref(title) : json_string(c.name));
	json_object_set_new(R, "smoke", json_boolean(smoke));
	json_object_set_new(R, "reps", json_integer(c.reps));
	json_object_set_new(R, "seconds", json_real(c.seconds));
	json_object_set_new(R, "warmup_seconds", json_real(c.warmup));
	json_object_set_new(R, "cell_warmup_seconds", json_real(c.cell_warmup));
	char cmdline[4096] = "";
	for (int k = 0; k < argc; k++) {
		size_t l = strlen(cmdline);
		snprintf(cmdline + l, sizeof(cmdline) - l, "%s%s", k ? " " : "", argv[k]);
	}
	json_object_set_new(R, "command", json_string(cmdline));
	json_object_set_new(R, "machine", machine_json());
	json_object_set_new(R, "source_git", json_string(git));
	json_object_set_new(R, "runner_build", json_string(dxl_build_git));
	json_object_set_new(R, "date_start", iso_now());
	json_object_set_new(R, "loadavg_start", dxlb_loadavg_json());
	double wall0 = now_s();
	printf("dxl-bench-compare %s: %d repetitions of %g s, warm-up %g s%s\n", c.name, c.reps,
	       c.seconds, c.warmup, smoke ? " (SMOKE: too short or too few for any claim)" : "");

	int failed = 0;
	if (do_setup(&c, &c.side[0]) || g_stop || do_setup(&c, &c.side[1]))
		failed = 1;
	json_t *jcells = json_array();
	size_t ci;
	json_t *cell;
	int nth = 0; /* cells run so far */
	json_t *prev_env = NULL; /* the env of the cell before */
	json_array_foreach(cells, ci, cell) {
		if (failed || g_stop)
			break;
		if (!use_cell[ci])
			continue;
		const char *cname = json_string_value(json_object_get(cell, "name"));
		/* a cell's env is its own: what the previous cell set is unset
		 * (the spec's env restored) before this one's is applied */
		if (prev_env) {
			const char *k;
			json_t *pv;
			json_object_foreach(prev_env, k, pv) unsetenv(k);
			set_env_obj(json_object_get(c.spec, "env"));
		}
		prev_env = json_object_get(cell, "env");
		set_env_obj(prev_env);
		printf("cell %zu%s%s\n", ci, cname && cname[0] ? ": " : "", cname ? cname : "");
		fflush(stdout);
		json_t *jc = json_object();
		json_object_set_new(jc, "index", json_integer((json_int_t)ci));
		json_object_set_new(jc, "name", json_string(cname ? cname : ""));
		json_object_set(jc, "env", json_object_get(cell, "env") ? json_object_get(cell, "env")
									 : json_object());
		/* warm-up: both sides, the first cell's long, later ones short */
		double wu = nth == 0 ? c.warmup : c.cell_warmup;
		json_t *jw2 = json_object();
		for (int k = 0; k < 2 && wu > 0 && !g_stop; k++) {
			int sidx = (nth + k) % 2;
			json_t *r = one_run(&c, &c.side[sidx], &c.side[1 - sidx], "warmup", (int)ci, 0,
					    wu, NULL);
			printf("  warm-up %c %g s: exit %lld\n", c.side[sidx].id, wu,
			       (long long)json_integer_value(json_object_get(r, "exit")));
			json_object_set_new(jw2, sidx ? "b" : "a", r);
		}
		json_object_set_new(jc, "warmup", jw2);
		json_t *runs = json_array();
		json_t *bs[2] = {NULL, NULL};
		for (int rep = 0; rep < c.reps && !g_stop; rep++) {
			json_t *jrun = json_object();
			int first = (rep + nth) % 2; /* 0: a first */
			json_object_set_new(jrun, "rep", json_integer(rep + 1));
			json_object_set_new(jrun, "order", json_string(first ? "b a" : "a b"));
			for (int k = 0; k < 2 && !g_stop; k++) {
				int sidx = (first + k) % 2;
				struct side *s = &c.side[sidx];
				json_t *r = one_run(&c, s, &c.side[1 - sidx], "rep", (int)ci, rep + 1,
						    c.seconds, &bs[sidx]);
				json_t *sum = json_object_get(r, "summary");
				char b1[32] = "-", b2[64] = "-";
				if (sum) {
					snprintf(b1, sizeof(b1), "%.0f",
						 json_number_value(json_object_get(sum, "ops_per_s")));
					json_t *p = json_object_get(sum, "p50_us");
					if (json_is_number(p))
						snprintf(b2, sizeof(b2), "%.1f", json_number_value(p));
				}
				printf("  rep %d %c: %s ops/s, p50 %s us, load %.2f%s\n", rep + 1, s->id,
				       b1, b2,
				       json_real_value(json_array_get(json_object_get(r, "loadavg_after"), 0)),
				       json_integer_value(json_object_get(r, "exit")) ? "  FAILED" : "");
				fflush(stdout);
				json_object_set_new(jrun, sidx ? "b" : "a", r);
			}
			json_array_append_new(runs, jrun);
		}
		json_object_set_new(jc, "runs", runs);
		json_object_set_new(jc, "bench_setup", json_pack("{s:o,s:o}", "a",
								 bs[0] ? bs[0] : json_null(), "b",
								 bs[1] ? bs[1] : json_null()));
		json_object_set_new(jc, "metrics", cell_metrics(&c, runs, cname ? cname : ""));
		json_array_append_new(jcells, jc);
		nth++;
	}
	json_t *sides = json_object();
	for (int k = 0; k < 2; k++)
		json_object_set_new(sides, k ? "b" : "a", side_config_json(&c.side[k]));
	do_teardown(&c, &c.side[1]);
	do_teardown(&c, &c.side[0]);
	if (g_stop)
		problem(&c, "stopped by a signal");
	json_object_set_new(R, "sides", sides);
	json_object_set_new(R, "cells", jcells);
	json_object_set_new(R, "date_end", iso_now());
	json_object_set_new(R, "loadavg_end", dxlb_loadavg_json());
	json_object_set_new(R, "wall_s", json_real(now_s() - wall0));
	json_object_set(R, "spec", c.spec);
	json_object_set_new(R, "problems", c.problems);
	/* the folder of the result */
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", out);
	char *sl = strrchr(dir, '/');
	if (sl) {
		*sl = 0;
		mkdir(dir, 0755);
	}
	if (json_dump_file(R, out, JSON_INDENT(1) | JSON_REAL_PRECISION(6))) {
		fprintf(stderr, "dxl-bench-compare: cannot write %s\n", out);
		failed = 1;
	} else {
		printf("result: %s\n", out);
	}
	bool bad = failed || json_array_size(json_object_get(R, "problems")) > 0;
	if (!bad && !keep) {
		char cmd[PATH_MAX + 16];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
		if (system(cmd) != 0)
			fprintf(stderr, "dxl-bench-compare: could not remove %s\n", root);
	} else {
		printf("scratch folder kept: %s\n", root);
	}
	json_decref(R);
	json_decref(c.spec);
	for (int k = 0; k < 2; k++)
		json_decref(c.side[k].env);
	return bad ? 1 : 0;
}
