/* test_bench_stats.c -- the statistics every published comparison uses
 * (bench/lib/stats.c): ranges, the claim rule, goals, percentiles only from
 * enough samples, the summary the comparison runner reads.
 *
 * bench/lib objects are not linked into tests, so the module is included whole.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench/lib/stats.c"

static void test_range(void **state)
{
	struct dxlb_range r;
	const double odd[] = {5, 1, 4, 2, 3};
	assert_int_equal(dxlb_range_of(odd, 5, &r), 0);
	assert_int_equal(r.n, 5);
	assert_true(r.median == 3 && r.min == 1 && r.max == 5);
	const double even[] = {10, 40, 20, 30};
	assert_int_equal(dxlb_range_of(even, 4, &r), 0);
	assert_true(r.median == 25 && r.min == 10 && r.max == 40);
	const double one[] = {7};
	assert_int_equal(dxlb_range_of(one, 1, &r), 0);
	assert_true(r.median == 7 && r.min == 7 && r.max == 7);
	assert_int_equal(dxlb_range_of(odd, 0, &r), DXL_E_INVAL);
	const double nan[] = {1, NAN, 3};
	assert_int_equal(dxlb_range_of(nan, 3, &r), DXL_E_INVAL);
	const double inf[] = {1, INFINITY};
	assert_int_equal(dxlb_range_of(inf, 2, &r), DXL_E_INVAL);
}

static void test_claim_higher_better(void **state)
{
	struct dxlb_cmp c;
	/* separated: A beats B */
	const double a[] = {210, 190, 205, 200, 195}, b[] = {100, 110, 90, 105, 95};
	assert_int_equal(dxlb_compare(a, b, 5, DXLB_HIGHER_BETTER, 5, 0, &c), 0);
	assert_int_equal(c.verdict, DXLB_A_BETTER);
	assert_int_equal(c.goal, DXLB_GOAL_NONE);
	/* paired ratios: 2.1, 1.727.., 2.277.., 1.904.., 2.052..: the median of
	 * the pairs (195/95), not the ratio of the medians (200/100) */
	assert_true(fabs(c.ratio.median - 195.0 / 95) < 1e-12); /* 200/100 = 2 would be wrong */
	assert_true(fabs(c.ratio.min - 190.0 / 110) < 1e-12);
	assert_true(fabs(c.ratio.max - 205.0 / 90) < 1e-12);
	assert_true(c.a.median == 200 && c.b.median == 100);
	/* B beats A the other way round */
	assert_int_equal(dxlb_compare(b, a, 5, DXLB_HIGHER_BETTER, 5, 0, &c), 0);
	assert_int_equal(c.verdict, DXLB_B_BETTER);
	/* one repetition of A as slow as B's best: the ranges touch -> no claim */
	const double a2[] = {210, 110, 205, 200, 195};
	assert_int_equal(dxlb_compare(a2, b, 5, DXLB_HIGHER_BETTER, 5, 0, &c), 0);
	assert_int_equal(c.verdict, DXLB_OVERLAP);
	/* every paired ratio is 2, but the machine drifted: the ranges overlap,
	 * so no claim is made (the rule asks for separated ranges) */
	const double a3[] = {10, 20, 30, 40, 50}, b3[] = {5, 10, 15, 20, 25};
	assert_int_equal(dxlb_compare(a3, b3, 5, DXLB_HIGHER_BETTER, 5, 0, &c), 0);
	assert_true(c.ratio.min == 2 && c.ratio.max == 2 && c.ratio.median == 2);
	assert_int_equal(c.verdict, DXLB_OVERLAP);
}

static void test_claim_lower_better(void **state)
{
	struct dxlb_cmp c;
	const double a[] = {10, 12, 11, 9, 13}, b[] = {20, 25, 22, 30, 21};
	assert_int_equal(dxlb_compare(a, b, 5, DXLB_LOWER_BETTER, 5, 0, &c), 0);
	assert_int_equal(c.verdict, DXLB_A_BETTER);
	assert_int_equal(dxlb_compare(b, a, 5, DXLB_LOWER_BETTER, 5, 0, &c), 0);
	assert_int_equal(c.verdict, DXLB_B_BETTER);
	const double a2[] = {10, 12, 11, 9, 20};
	assert_int_equal(dxlb_compare(a2, b, 5, DXLB_LOWER_BETTER, 5, 0, &c), 0);
	assert_int_equal(c.verdict, DXLB_OVERLAP);
}

static void test_too_few_reps(void **state)
{
	struct dxlb_cmp c;
	const double a[] = {1000, 1000, 1000, 1000}, b[] = {1, 1, 1, 1};
	/* 4 pairs of a 1000x difference are still no claim (and no goal) */
	assert_int_equal(dxlb_compare(a, b, 4, DXLB_HIGHER_BETTER, DXLB_MIN_REPS, 10, &c), 0);
	assert_int_equal(c.verdict, DXLB_TOO_FEW);
	assert_int_equal(c.goal, DXLB_GOAL_NO_CLAIM);
	assert_true(c.ratio.median == 1000); /* reported all the same */
	assert_int_equal(dxlb_compare(a, b, 0, DXLB_HIGHER_BETTER, DXLB_MIN_REPS, 0, &c),
			 DXL_E_INVAL);
}

static void test_goals(void **state)
{
	struct dxlb_cmp c;
	/* throughput goal A >= 10 x B: met when A's worst >= 10 x B's best */
	const double b[] = {100, 105, 98, 102, 101};
	const double met[] = {1050, 1100, 1060, 1200, 1080};   /* min 1050 >= 1050 */
	const double und[] = {1049, 1100, 1060, 1200, 1080};   /* 1049 < 1050, 1200 >= 980 */
	const double miss[] = {970, 900, 950, 979, 960};       /* max 979 < 980 */
	assert_int_equal(dxlb_compare(met, b, 5, DXLB_HIGHER_BETTER, 5, 10, &c), 0);
	assert_int_equal(c.goal, DXLB_GOAL_MET);
	assert_int_equal(dxlb_compare(und, b, 5, DXLB_HIGHER_BETTER, 5, 10, &c), 0);
	assert_int_equal(c.goal, DXLB_GOAL_UNDECIDED);
	assert_int_equal(dxlb_compare(miss, b, 5, DXLB_HIGHER_BETTER, 5, 10, &c), 0);
	assert_int_equal(c.goal, DXLB_GOAL_NOT_MET);
	assert_int_equal(c.verdict, DXLB_A_BETTER); /* better, but not 10x */
	/* latency goal A <= 0.1 x B: met when A's worst <= 0.1 x B's best */
	const double lb[] = {1000, 1100, 1200, 1050, 1010};
	const double lmet[] = {90, 100, 95, 80, 99};     /* max 100 <= 100 */
	const double lund[] = {90, 101, 95, 80, 99};     /* 101 > 100, 80 <= 120 */
	const double lmiss[] = {121, 130, 125, 140, 150}; /* min 121 > 120 */
	assert_int_equal(dxlb_compare(lmet, lb, 5, DXLB_LOWER_BETTER, 5, 0.1, &c), 0);
	assert_int_equal(c.goal, DXLB_GOAL_MET);
	assert_int_equal(dxlb_compare(lund, lb, 5, DXLB_LOWER_BETTER, 5, 0.1, &c), 0);
	assert_int_equal(c.goal, DXLB_GOAL_UNDECIDED);
	assert_int_equal(dxlb_compare(lmiss, lb, 5, DXLB_LOWER_BETTER, 5, 0.1, &c), 0);
	assert_int_equal(c.goal, DXLB_GOAL_NOT_MET);
}

/* a claim needs at least 5 repetitions of at least 10 s: anything less is a smoke run */
static void test_smoke(void **state)
{
	assert_false(dxlb_smoke(5, 10));
	assert_false(dxlb_smoke(9, 30));
	assert_true(dxlb_smoke(4, 10));
	assert_true(dxlb_smoke(5, 9.99));
	assert_true(dxlb_smoke(100, 0.3));
	assert_true(dxlb_smoke(5, NAN));
}

static void test_bad_input(void **state)
{
	struct dxlb_cmp c;
	const double a[] = {1, 2, 3, 4, 5}, z[] = {1, 0, 3, 4, 5}, neg[] = {1, 2, -3, 4, 5};
	assert_int_equal(dxlb_compare(a, z, 5, DXLB_HIGHER_BETTER, 5, 0, &c), DXL_E_INVAL);
	assert_int_equal(dxlb_compare(neg, a, 5, DXLB_HIGHER_BETTER, 5, 0, &c), DXL_E_INVAL);
	assert_int_equal(dxlb_compare(a, a, 5, (enum dxlb_better)0, 5, 0, &c), DXL_E_INVAL);
	assert_int_equal(dxlb_compare(a, a, 5, DXLB_HIGHER_BETTER, 5, -1, &c), DXL_E_INVAL);
	assert_int_equal(dxlb_compare(a, a, 5, DXLB_HIGHER_BETTER, 5, NAN, &c), DXL_E_INVAL);
	assert_string_equal(dxlb_verdict_name(DXLB_OVERLAP), "no claim: ranges overlap");
	assert_string_equal(dxlb_goal_name(DXLB_GOAL_NOT_MET), "not met");
}

/* no p99 from under 1 000 samples, no p99.9 from under 10 000 */
static void test_percentiles_need_samples(void **state)
{
	static struct dxl_hist h;
	char buf[64];
	dxl_hist_reset(&h);
	for (int i = 0; i < 40; i++)
		dxl_hist_record(&h, 1000 * (uint64_t)(i + 1)); /* 1..40 us */
	json_t *j = dxlb_lat_json(&h);
	assert_int_equal(json_integer_value(json_object_get(j, "n")), 40);
	assert_true(json_is_real(json_object_get(j, "p50_us")));
	assert_true(json_is_null(json_object_get(j, "p90_us")));  /* needs 100 */
	assert_true(json_is_null(json_object_get(j, "p99_us")));
	assert_true(json_is_null(json_object_get(j, "p999_us")));
	json_decref(j);
	assert_string_equal(dxlb_pct_str(&h, 99, buf, sizeof(buf)), "n/a (n=40)");
	for (int i = 0; i < 960; i++)
		dxl_hist_record(&h, 5000);
	j = dxlb_lat_json(&h);
	assert_true(json_is_real(json_object_get(j, "p99_us")));
	assert_true(json_is_null(json_object_get(j, "p999_us")));
	json_decref(j);
	assert_string_not_equal(dxlb_pct_str(&h, 99, buf, sizeof(buf)), "n/a (n=1000)");
	assert_string_equal(dxlb_pct_str(&h, 99.9, buf, sizeof(buf)), "n/a (n=1000)");
	static struct dxl_hist empty;
	dxl_hist_reset(&empty);
	j = dxlb_lat_json(&empty);
	assert_true(json_is_null(json_object_get(j, "p50_us")));
	assert_true(json_is_null(json_object_get(j, "mean_us")));
	json_decref(j);
}

static void test_summary(void **state)
{
	static struct dxl_hist lat, svc;
	dxl_hist_reset(&lat);
	dxl_hist_reset(&svc);
	for (int i = 0; i < 2000; i++) {
		dxl_hist_record(&lat, 10000);
		dxl_hist_record(&svc, 2000);
	}
	struct dxlb_summary s = {.ops = 2000, .seconds = 2, .offered_per_s = 1000,
				 .lat = &lat, .svc = &svc, .errors = 1, .retries = 3, .late = 4};
	json_t *j = dxlb_summary_json(&s);
	assert_true(json_real_value(json_object_get(j, "ops_per_s")) == 1000);
	assert_true(json_is_true(json_object_get(j, "open_loop")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "latency"), "from")),
			    "intended start");
	assert_true(json_real_value(json_object_get(j, "p50_us")) == 10);
	assert_true(json_real_value(json_object_get(json_object_get(j, "service"), "p50_us")) == 2);
	assert_int_equal(json_integer_value(json_object_get(j, "late")), 4);
	json_decref(j);
	s.offered_per_s = 0; /* closed loop: no service histogram, latency from the send */
	j = dxlb_summary_json(&s);
	assert_true(json_is_null(json_object_get(j, "service")));
	assert_true(json_is_null(json_object_get(j, "offered_per_s")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "latency"), "from")),
			    "send");
	json_decref(j);
	assert_true(dxlb_schedule_ns(100, 3, 1000) == 100 + 3000000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_range),
		cmocka_unit_test(test_claim_higher_better),
		cmocka_unit_test(test_claim_lower_better),
		cmocka_unit_test(test_too_few_reps),
		cmocka_unit_test(test_goals),
		cmocka_unit_test(test_smoke),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_percentiles_need_samples),
		cmocka_unit_test(test_summary),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
