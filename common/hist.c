/* hist.c -- log-linear latency histogram */
#include <math.h>
#include <string.h>

#include "common/hist.h"

/*
 * Bucket index: values below DXL_HIST_SUB map to themselves; above, the top
 * DXL_HIST_SUB_BITS significant bits choose a sub-bucket inside the value's
 * power of two.
 */
static unsigned bucket_of(uint64_t v)
{
	if (v < DXL_HIST_SUB)
		return (unsigned)v;
	unsigned msb = 63u - (unsigned)__builtin_clzll(v);
	unsigned shift = msb - (DXL_HIST_SUB_BITS - 1);
	unsigned sub = (unsigned)(v >> shift) & (DXL_HIST_SUB / 2 - 1);
	return (shift + 1) * (DXL_HIST_SUB / 2) + sub;
}

/* the highest value that falls in bucket b (what percentiles report) */
static uint64_t bucket_top(unsigned b)
{
	if (b < DXL_HIST_SUB)
		return b;
	unsigned shift = b / (DXL_HIST_SUB / 2) - 1;
	uint64_t sub = b % (DXL_HIST_SUB / 2) + DXL_HIST_SUB / 2;
	if (shift >= 58)
		return UINT64_MAX;
	return ((sub + 1) << shift) - 1;
}

void dxl_hist_reset(struct dxl_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

void dxl_hist_record(struct dxl_hist *h, uint64_t v)
{
	unsigned b = bucket_of(v);
	if (b >= DXL_HIST_BUCKETS)
		b = DXL_HIST_BUCKETS - 1;
	h->b[b]++;
	h->count++;
	h->sum += v;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

void dxl_hist_merge(struct dxl_hist *dst, const struct dxl_hist *src)
{
	for (unsigned i = 0; i < DXL_HIST_BUCKETS; i++)
		dst->b[i] += src->b[i];
	dst->count += src->count;
	dst->sum += src->sum;
	if (src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
}

/* p in millionths of the whole (p = 99.9 -> 999000), 0..1000000 */
static uint64_t pct_ppm(double p)
{
	if (!(p > 0))
		return 0;
	if (p >= 100)
		return 1000000;
	return (uint64_t)llround(p * 10000.0);
}

uint64_t dxl_pct_rank(uint64_t n, double p)
{
	if (!n)
		return 0;
	unsigned __int128 x = (unsigned __int128)pct_ppm(p) * n;
	uint64_t rank = (uint64_t)((x + 999999) / 1000000);
	if (rank < 1)
		rank = 1;
	return rank > n ? n : rank;
}

uint64_t dxl_pct_min_samples(double p)
{
	uint64_t q = pct_ppm(p);
	if (q == 0 || q >= 1000000)
		return 1;
	uint64_t above = 1000000 - q; /* millionths at or above the percentile */
	return (10000000 + above - 1) / above;
}

int dxl_hist_pct_valid(const struct dxl_hist *h, double p)
{
	return h->count > 0 && h->count >= dxl_pct_min_samples(p);
}

uint64_t dxl_hist_pct(const struct dxl_hist *h, double p)
{
	if (!h->count)
		return 0;
	if (p <= 0)
		return h->min;
	if (p >= 100)
		return h->max;
	uint64_t rank = dxl_pct_rank(h->count, p);
	uint64_t seen = 0;
	for (unsigned i = 0; i < DXL_HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank) {
			uint64_t top = bucket_top(i);
			return top > h->max ? h->max : (top < h->min ? h->min : top);
		}
	}
	return h->max;
}

double dxl_hist_mean(const struct dxl_hist *h)
{
	return h->count ? (double)h->sum / (double)h->count : 0.0;
}
