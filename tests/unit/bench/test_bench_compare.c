/* test_bench_compare.c -- the comparison runner (bench/compare/, the
 * dxl-bench-compare program): the order of the runs (setup, warm-ups of both
 * sides, repetitions interleaved in alternating order, teardown), the
 * verdicts it writes from the runs' summaries, smoke runs carrying no claim,
 * a failed run reported and the teardown run all the same, bad specs
 * refused before anything runs.
 *
 * The sides are the runner's own --synthetic benchmark (it writes a summary
 * with the ops/s it is given), so the test needs no cluster and takes a few
 * seconds. Each side's command logs "<side> <phase> <cell> <rep>" to a
 * shared file: the test reads the order back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/lib/cli_run.h"
#include "tests/lib/proc.h"

static char g_bin[512], g_tmp[256];
static char g_out[1 << 16], g_err[1 << 16];

static int setup(void **state)
{
	(void)state;
	assert_int_equal(dxlt_prog_path("dxl-bench-compare", g_bin, sizeof(g_bin)), 0);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-bench-compare-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", g_tmp);
	return 0;
}

/*
 * A side whose run logs itself to $ORDER and runs the synthetic benchmark at
 * the rate the shell expression rate gives (it may use $DXLB_REP, $DXLB_CELL
 * and the cell's env). fail_rep > 0: that repetition of the side exits 3.
 */
static json_t *side(const char *label, const char *id, const char *rate, int fail_rep,
		    const char *marker)
{
	char run[2048], setup_c[512], td[512];
	snprintf(run, sizeof(run),
		 "echo \"%s $DXLB_PHASE $DXLB_CELL $DXLB_REP${ONLY_C0:+ c0-env}\" >> \"$ORDER\"; "
		 "[ \"$DXLB_PHASE\" = rep ] && [ \"$DXLB_REP\" = %d ] && exit 3; "
		 "exec '%s' --synthetic \"$((%s))\" --seconds \"$DXLB_SECONDS\" --out \"$DXLB_OUT\"",
		 id, fail_rep, g_bin, rate);
	snprintf(setup_c, sizeof(setup_c),
		 "echo \"%s setup\" >> \"$ORDER\"; echo '{\"peer\": \"%s\"}' > "
		 "\"$DXLB_STATE/config.json\"; echo \"$ORDER_DIR\" > \"$DXLB_STATE/datadirs\"",
		 id, label);
	snprintf(td, sizeof(td), "echo \"%s teardown\" >> \"$ORDER\"; touch '%s/%s'", id, g_tmp,
		 marker);
	return json_pack("{s:s, s:s, s:s, s:s}", "label", label, "setup", setup_c, "run", run,
			 "teardown", td);
}

/* run the runner on spec (written to tmp/spec.json); its exit status */
static int run_spec(json_t *spec, const char *result, const char *extra)
{
	char path[512], order[512];
	snprintf(path, sizeof(path), "%s/spec.json", g_tmp);
	snprintf(order, sizeof(order), "%s/order", g_tmp);
	unlink(order);
	json_t *env = json_object_get(spec, "env");
	if (!env) {
		env = json_object();
		json_object_set_new(spec, "env", env);
	}
	json_object_set_new(env, "ORDER", json_string(order));
	json_object_set_new(env, "ORDER_DIR", json_string(g_tmp));
	assert_int_equal(json_dump_file(spec, path, JSON_INDENT(1)), 0);
	json_decref(spec);
	const char *argv[] = {g_bin, "--spec", path, "--out", result, extra, NULL};
	int rc = dxlt_run(argv, NULL, g_tmp, g_out, g_err, sizeof(g_out), 120000);
	printf("%s%s", g_out, g_err);
	return rc;
}

static json_t *metric(json_t *r, size_t cell, const char *name)
{
	json_t *ms = json_object_get(json_array_get(json_object_get(r, "cells"), cell), "metrics");
	size_t i;
	json_t *m;
	json_array_foreach(ms, i, m) {
		if (!strcmp(json_string_value(json_object_get(m, "name")), name))
			return m;
	}
	fail_msg("cell %zu has no metric %s", cell, name);
	return NULL;
}

/* equal to 1e-9 relative (ops / seconds in floating point) */
static bool near(double x, double want)
{
	return fabs(x - want) <= 1e-9 * fabs(want);
}

static const char *str(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "(null)";
}

/* setup once per side, warm-up of both, repetitions A B, B A, A B...; the
 * next cell starts with B; teardown once per side (B, then A) */
static void test_order(void **state)
{
	char result[512], order[4096], path[512];
	snprintf(result, sizeof(result), "%s/order.json", g_tmp);
	json_t *spec = json_pack("{s:s, s:i, s:f, s:f, s:f, s:o, s:o, s:[{s:s}, {s:s}]}", "name",
				 "order", "reps", 5, "seconds", 0.05, "warmup_seconds", 0.05,
				 "cell_warmup_seconds", 0.05, "a",
				 side("A", "a", "1000", 0, "td-a"), "b",
				 side("B", "b", "1000", 0, "td-b"), "cells", "name", "c0", "name",
				 "c1");
	/* cell 0 sets ONLY_C0: it must not leak into cell 1 */
	json_object_set_new(json_array_get(json_object_get(spec, "cells"), 0), "env",
			    json_pack("{s:s}", "ONLY_C0", "1"));
	assert_int_equal(run_spec(spec, result, NULL), 0);
	snprintf(path, sizeof(path), "%s/order", g_tmp);
	dxlt_slurp(path, order, sizeof(order));
	const char *want =
		"a setup\nb setup\n"
		"a warmup 0 0 c0-env\nb warmup 0 0 c0-env\n"
		"a rep 0 1 c0-env\nb rep 0 1 c0-env\nb rep 0 2 c0-env\na rep 0 2 c0-env\n"
		"a rep 0 3 c0-env\nb rep 0 3 c0-env\nb rep 0 4 c0-env\na rep 0 4 c0-env\n"
		"a rep 0 5 c0-env\nb rep 0 5 c0-env\n"
		"b warmup 1 0\na warmup 1 0\n"
		"b rep 1 1\na rep 1 1\na rep 1 2\nb rep 1 2\nb rep 1 3\na rep 1 3\n"
		"a rep 1 4\nb rep 1 4\nb rep 1 5\na rep 1 5\n"
		"b teardown\na teardown\n";
	assert_string_equal(order, want);
	json_error_t e;
	json_t *r = json_load_file(result, 0, &e);
	assert_non_null(r);
	/* the setup it records: the sides' configuration and data directories'
	 * filesystems, the machine, load before and after every run */
	json_t *sa = json_object_get(json_object_get(r, "sides"), "a");
	assert_string_equal(str(json_object_get(sa, "config"), "peer"), "A");
	json_t *dd = json_array_get(json_object_get(sa, "datadirs"), 0);
	assert_non_null(json_object_get(dd, "fstype"));
	assert_true(json_integer_value(json_object_get(json_object_get(r, "machine"), "cpus")) > 0);
	json_t *run0 = json_array_get(json_object_get(json_array_get(json_object_get(r, "cells"), 0),
						      "runs"), 1);
	assert_string_equal(str(run0, "order"), "b a");
	assert_true(json_is_array(json_object_get(json_object_get(run0, "a"), "loadavg_before")));
	assert_true(json_is_array(json_object_get(json_object_get(run0, "b"), "loadavg_after")));
	json_decref(r);
}

/* the verdicts: separated ranges -> a claim (and a goal judged), overlapping
 * ranges -> none even though A's median is higher, B ahead -> "b better";
 * and being a smoke run (0.05 s), every claim is withheld */
static void test_verdicts(void **state)
{
	char result[512];
	snprintf(result, sizeof(result), "%s/verdicts.json", g_tmp);
	/* cell 0: A 2000, B 1000; cell 1: A 1000+100*rep (1100..1500), B 1200:
	 * A's median 1300 > 1200 but the ranges overlap; cell 2: A 500, B 1000 */
	json_t *spec = json_pack(
		"{s:s, s:i, s:f, s:f, s:f,"
		" s:[{s:s, s:s, s:s, s:f}, {s:s, s:s, s:s}], s:o, s:o,"
		" s:[{s:s, s:{s:s, s:s, s:s}}, {s:s, s:{s:s, s:s, s:s}}, {s:s, s:{s:s, s:s, s:s}}]}",
		"name", "verdicts", "reps", 5, "seconds", 0.05, "warmup_seconds", 0.05,
		"cell_warmup_seconds", 0.0, "metrics", "name", "tput", "path", "ops_per_s", "better",
		"higher", "goal", 1.9, "name", "lat", "path", "latency.p50_us", "better", "lower",
		"a", side("A", "a", "$A_RATE + $A_STEP * $DXLB_REP", 0, "td-a"), "b",
		side("B", "b", "$B_RATE", 0, "td-b"), "cells",
		"name", "twice", "env", "A_RATE", "2000", "A_STEP", "0", "B_RATE", "1000",
		"name", "overlap", "env", "A_RATE", "1000", "A_STEP", "100", "B_RATE", "1200",
		"name", "behind", "env", "A_RATE", "500", "A_STEP", "0", "B_RATE", "1000");
	assert_int_equal(run_spec(spec, result, NULL), 0);
	json_error_t e;
	json_t *r = json_load_file(result, 0, &e);
	assert_non_null(r);
	assert_true(json_is_true(json_object_get(r, "smoke")));

	json_t *m = metric(r, 0, "tput");
	assert_int_equal(json_integer_value(json_object_get(m, "pairs")), 5);
	assert_string_equal(str(m, "verdict"), "a better");
	assert_string_equal(str(m, "goal_verdict"), "met");
	assert_string_equal(str(m, "claim"), "none: smoke run");
	assert_string_equal(str(m, "goal_claim"), "none: smoke run");
	json_t *ratio = json_object_get(m, "ratio");
	assert_true(near(json_real_value(json_object_get(ratio, "median")), 2.0));
	assert_string_equal(str(metric(r, 0, "lat"), "verdict"), "a better");

	m = metric(r, 1, "tput");
	json_t *a = json_object_get(m, "a");
	assert_true(near(json_real_value(json_object_get(a, "min")), 1100));
	assert_true(near(json_real_value(json_object_get(a, "max")), 1500));
	assert_true(near(json_real_value(json_object_get(a, "median")), 1300));
	assert_string_equal(str(m, "verdict"), "no claim: ranges overlap");
	assert_string_equal(str(m, "goal_verdict"), "not met");

	m = metric(r, 2, "tput");
	assert_string_equal(str(m, "verdict"), "b better");
	assert_true(near(json_real_value(json_object_get(json_object_get(m, "ratio"), "max")), 0.5));
	json_decref(r);
	/* the table on stdout says so too */
	assert_non_null(strstr(g_out, "SMOKE"));

	/* and so does the markdown of bench/report.py: a smoke run's heading,
	 * no claim in its table (found from the binary: build[/asan]/bin/ is
	 * one or two folders below the source tree) */
	char report[1024], cmd[4096], md[512];
	report[0] = 0;
	for (int up = 2; up <= 3 && !report[0]; up++) {
		char cand[1024];
		snprintf(cand, sizeof(cand), "%s", g_bin);
		for (int i = 0; i < up; i++) {
			char *sl = strrchr(cand, '/');
			if (sl)
				*sl = 0;
		}
		size_t l = strlen(cand);
		snprintf(cand + l, sizeof(cand) - l, "/../bench/report.py");
		if (access(cand, R_OK) == 0)
			snprintf(report, sizeof(report), "%s", cand);
	}
	if (!report[0] || system("python3 -c '' 2>/dev/null") != 0) {
		printf("bench/report.py or python3 not found: the markdown is not checked\n");
		return;
	}
	snprintf(md, sizeof(md), "%s/verdicts.md", g_tmp);
	snprintf(cmd, sizeof(cmd), "python3 '%s' --out '%s' '%s'", report, md, result);
	assert_int_equal(system(cmd), 0);
	static char text[1 << 16];
	dxlt_slurp(md, text, sizeof(text));
	assert_non_null(strstr(text, "SMOKE RUN, NOT A MEASUREMENT"));
	assert_non_null(strstr(text, "| none: smoke run |"));
	assert_null(strstr(text, "| a better"));
	assert_null(strstr(text, "| b better"));
	assert_non_null(strstr(text, "interleaved in alternating order"));
}

/* a run that fails: exit 1, the problem in the result, the pair left out
 * (4 pairs: too few for a claim), and both teardowns ran */
static void test_failed_run(void **state)
{
	char result[512], path[512];
	snprintf(result, sizeof(result), "%s/failed.json", g_tmp);
	snprintf(path, sizeof(path), "%s/td-fa", g_tmp);
	unlink(path);
	json_t *spec = json_pack("{s:s, s:i, s:f, s:f, s:o, s:o}", "name", "failed", "reps", 5,
				 "seconds", 0.05, "warmup_seconds", 0.0, "a",
				 side("A", "a", "2000", 3, "td-fa"), "b",
				 side("B", "b", "1000", 0, "td-fb"));
	char st[600];
	snprintf(st, sizeof(st), "--state=%s/state", g_tmp); /* kept on failure: ours */
	assert_int_equal(run_spec(spec, result, st), 1);
	json_error_t e;
	json_t *r = json_load_file(result, 0, &e);
	assert_non_null(r);
	json_t *probs = json_object_get(r, "problems");
	assert_int_equal(json_array_size(probs), 1);
	assert_non_null(strstr(json_string_value(json_array_get(probs, 0)), "rep 3 of side a"));
	json_t *m = metric(r, 0, "throughput");
	assert_int_equal(json_integer_value(json_object_get(m, "pairs")), 4);
	assert_int_equal(json_integer_value(json_object_get(m, "pairs_missing")), 1);
	assert_string_equal(str(m, "verdict"), "no claim: too few repetitions");
	json_decref(r);
	assert_int_equal(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "%s/td-fb", g_tmp);
	assert_int_equal(access(path, F_OK), 0);
}

/* a bad spec: exit 2, nothing run, no result written */
static void test_bad_spec(void **state)
{
	char result[512], path[512];
	snprintf(result, sizeof(result), "%s/bad.json", g_tmp);
	snprintf(path, sizeof(path), "%s/order", g_tmp);
	json_t *no_run = json_pack("{s:s, s:{s:s, s:s}, s:o}", "name", "bad", "a", "label", "A",
				   "setup", "echo a setup >> \"$ORDER\"", "b",
				   side("B", "b", "1000", 0, "td-bad"));
	assert_int_equal(run_spec(no_run, result, NULL), 2);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(access(result, F_OK), -1);
	assert_non_null(strstr(g_err, "needs a label and a run command"));
	json_t *bad_metric = json_pack("{s:s, s:[{s:s, s:s, s:s}], s:o, s:o}", "name", "bad",
				       "metrics", "name", "x", "path", "ops_per_s", "better",
				       "sideways", "a", side("A", "a", "1", 0, "td-bad"), "b",
				       side("B", "b", "1", 0, "td-bad"));
	assert_int_equal(run_spec(bad_metric, result, NULL), 2);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(access(result, F_OK), -1);
	json_t *bad_name = json_pack("{s:s, s:o, s:o}", "name", "../etc", "a",
				     side("A", "a", "1", 0, "td-bad"), "b",
				     side("B", "b", "1", 0, "td-bad"));
	assert_int_equal(run_spec(bad_name, result, NULL), 2);
	assert_int_equal(access(result, F_OK), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_verdicts),
		cmocka_unit_test(test_failed_run),
		cmocka_unit_test(test_bad_spec),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
