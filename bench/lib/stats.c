/* stats.c -- latency summaries and the claim rule of comparisons (bench/lib/)
 *
 * The rule every published number follows (docs/performance.md "Method"):
 * A and B run back to back, in alternating order, for at least
 * DXLB_MIN_REPS repetitions; the ratio is reported as the median and range
 * of the paired ratios; "A beats B" is said only when the ranges of A and B
 * do not overlap. Percentiles are nearest-rank (common/hist.c) and only
 * from enough samples (dxl_pct_min_samples).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/lib/bench_lib.h"
#include "common/common.h"

static json_t *pct_json(const struct dxl_hist *h, double p)
{
	if (!dxl_hist_pct_valid(h, p))
		return json_null();
	return json_real((double)dxl_hist_pct(h, p) / 1000.0);
}

json_t *dxlb_lat_json(const struct dxl_hist *h)
{
	json_t *o = json_object();
	json_object_set_new(o, "n", json_integer((json_int_t)h->count));
	json_object_set_new(o, "p50_us", pct_json(h, 50));
	json_object_set_new(o, "p90_us", pct_json(h, 90));
	json_object_set_new(o, "p99_us", pct_json(h, 99));
	json_object_set_new(o, "p999_us", pct_json(h, 99.9));
	json_object_set_new(o, "mean_us", h->count ? json_real(dxl_hist_mean(h) / 1000.0)
						   : json_null());
	json_object_set_new(o, "min_us", h->count ? json_real((double)h->min / 1000.0)
						  : json_null());
	json_object_set_new(o, "max_us", h->count ? json_real((double)h->max / 1000.0)
						  : json_null());
	return o;
}

const char *dxlb_pct_str(const struct dxl_hist *h, double p, char *buf, size_t cap)
{
	if (!dxl_hist_pct_valid(h, p))
		snprintf(buf, cap, "n/a (n=%llu)", (unsigned long long)h->count);
	else
		snprintf(buf, cap, "%.1f", (double)dxl_hist_pct(h, p) / 1000.0);
	return buf;
}

json_t *dxlb_summary_json(const struct dxlb_summary *s)
{
	json_t *o = json_object();
	bool open = s->offered_per_s > 0;
	json_object_set_new(o, "ops", json_integer((json_int_t)s->ops));
	json_object_set_new(o, "seconds", json_real(s->seconds));
	json_object_set_new(o, "ops_per_s",
			    json_real(s->seconds > 0 ? (double)s->ops / s->seconds : 0));
	json_object_set_new(o, "open_loop", json_boolean(open));
	json_object_set_new(o, "offered_per_s", open ? json_real(s->offered_per_s) : json_null());
	json_t *lat = dxlb_lat_json(s->lat);
	json_object_set_new(lat, "from", json_string(open ? "intended start" : "send"));
	json_object_set_new(o, "p50_us", json_incref(json_object_get(lat, "p50_us")));
	json_object_set_new(o, "p99_us", json_incref(json_object_get(lat, "p99_us")));
	json_object_set_new(o, "p999_us", json_incref(json_object_get(lat, "p999_us")));
	json_object_set_new(o, "latency", lat);
	if (open && s->svc) {
		json_t *svc = dxlb_lat_json(s->svc);
		json_object_set_new(svc, "from", json_string("send"));
		json_object_set_new(o, "service", svc);
	} else {
		json_object_set_new(o, "service", json_null());
	}
	json_object_set_new(o, "errors", json_integer((json_int_t)s->errors));
	json_object_set_new(o, "retries", json_integer((json_int_t)s->retries));
	if (open)
		json_object_set_new(o, "late", json_integer((json_int_t)s->late));
	return o;
}

/* ---- ranges and the claim rule -------------------------------------------- */

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return a < b ? -1 : a > b;
}

int dxlb_range_of(const double *v, size_t n, struct dxlb_range *out)
{
	memset(out, 0, sizeof(*out));
	if (!n || !v)
		return dxl_err_set(DXL_E_INVAL, "a range of no values");
	double *s = malloc(n * sizeof(*s));
	if (!s)
		return dxl_err_set(DXL_E_NOMEM, "%zu values", n);
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(v[i])) {
			free(s);
			return dxl_err_set(DXL_E_INVAL, "value %zu is not a finite number", i);
		}
		s[i] = v[i];
	}
	qsort(s, n, sizeof(*s), cmp_double);
	out->n = n;
	out->min = s[0];
	out->max = s[n - 1];
	out->median = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
	free(s);
	return 0;
}

int dxlb_compare(const double *a, const double *b, size_t n, enum dxlb_better better,
		 size_t min_reps, double goal, struct dxlb_cmp *out)
{
	memset(out, 0, sizeof(*out));
	if (better != DXLB_LOWER_BETTER && better != DXLB_HIGHER_BETTER)
		return dxl_err_set(DXL_E_INVAL, "better must be lower or higher");
	if (!(goal >= 0) || !isfinite(goal))
		return dxl_err_set(DXL_E_INVAL, "goal %g: a factor > 0, or 0 for none", goal);
	for (size_t i = 0; i < n; i++)
		if (!(a[i] > 0) || !(b[i] > 0) || !isfinite(a[i]) || !isfinite(b[i]))
			return dxl_err_set(DXL_E_INVAL, "pair %zu (%g, %g): values must be > 0",
					   i, a[i], b[i]);
	double *r = malloc((n ? n : 1) * sizeof(*r));
	if (!r)
		return dxl_err_set(DXL_E_NOMEM, "%zu ratios", n);
	for (size_t i = 0; i < n; i++)
		r[i] = a[i] / b[i];
	int ret = dxlb_range_of(a, n, &out->a);
	if (!ret)
		ret = dxlb_range_of(b, n, &out->b);
	if (!ret)
		ret = dxlb_range_of(r, n, &out->ratio);
	free(r);
	if (ret)
		return ret;
	const struct dxlb_range *A = &out->a, *B = &out->b;
	if (n < min_reps || n < 1) {
		out->verdict = DXLB_TOO_FEW;
		out->goal = goal > 0 ? DXLB_GOAL_NO_CLAIM : DXLB_GOAL_NONE;
		return 0;
	}
	if (better == DXLB_HIGHER_BETTER)
		out->verdict = A->min > B->max ? DXLB_A_BETTER
			       : B->min > A->max ? DXLB_B_BETTER : DXLB_OVERLAP;
	else
		out->verdict = A->max < B->min ? DXLB_A_BETTER
			       : B->max < A->min ? DXLB_B_BETTER : DXLB_OVERLAP;
	if (!(goal > 0))
		out->goal = DXLB_GOAL_NONE;
	else if (better == DXLB_HIGHER_BETTER)
		out->goal = A->min >= goal * B->max ? DXLB_GOAL_MET
			    : A->max < goal * B->min ? DXLB_GOAL_NOT_MET : DXLB_GOAL_UNDECIDED;
	else
		out->goal = A->max <= goal * B->min ? DXLB_GOAL_MET
			    : A->min > goal * B->max ? DXLB_GOAL_NOT_MET : DXLB_GOAL_UNDECIDED;
	return 0;
}

const char *dxlb_verdict_name(enum dxlb_verdict v)
{
	switch (v) {
	case DXLB_A_BETTER: return "a better";
	case DXLB_B_BETTER: return "b better";
	case DXLB_OVERLAP: return "no claim: ranges overlap";
	default: return "no claim: too few repetitions";
	}
}

const char *dxlb_goal_name(enum dxlb_goal g)
{
	switch (g) {
	case DXLB_GOAL_MET: return "met";
	case DXLB_GOAL_NOT_MET: return "not met";
	case DXLB_GOAL_UNDECIDED: return "undecided: ranges overlap";
	case DXLB_GOAL_NO_CLAIM: return "no claim: too few repetitions";
	default: return "none";
	}
}
