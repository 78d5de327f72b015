/* hist.h -- log-linear latency histogram (HdrHistogram-style, fixed memory) */
#ifndef DXL_HIST_H
#define DXL_HIST_H

#include <stdint.h>

/*
 * Values are unsigned 64-bit (we record nanoseconds). Buckets are
 * log-linear: each power of two is split into DXL_HIST_SUB sub-buckets, so
 * any reported percentile is within 2/DXL_HIST_SUB (3.1%) of a recorded
 * value. Not thread-safe: keep one per thread and merge.
 */
#define DXL_HIST_SUB_BITS 6
#define DXL_HIST_SUB (1u << DXL_HIST_SUB_BITS)
#define DXL_HIST_BUCKETS ((64 - DXL_HIST_SUB_BITS + 2) * (DXL_HIST_SUB / 2))

struct dxl_hist {
	uint64_t count;
	uint64_t sum;
	uint64_t min;
	uint64_t max;
	uint64_t b[DXL_HIST_BUCKETS];
};

void dxl_hist_reset(struct dxl_hist *h);
void dxl_hist_record(struct dxl_hist *h, uint64_t v);
void dxl_hist_merge(struct dxl_hist *dst, const struct dxl_hist *src);
/*
 * dxl_hist_pct -- value at percentile p (0..100) by the nearest-rank rule:
 * the value of the sample of rank ceil(p/100 * count) (1-based, in
 * ascending order), reported as the top of its bucket (clamped to min/max);
 * 0 for an empty histogram. p <= 0 gives the minimum, p >= 100 the maximum.
 */
uint64_t dxl_hist_pct(const struct dxl_hist *h, double p);

/*
 * dxl_pct_rank -- the nearest rank of percentile p among n samples:
 * ceil(p/100 * n), at least 1 and at most n (0 when n == 0). Exact in
 * integers: p is taken to 1e-4 (so 99 of 100 samples is rank 99, never 100
 * by a rounding error of 0.99 * 100).
 */
uint64_t dxl_pct_rank(uint64_t n, double p);

/*
 * dxl_pct_min_samples -- the fewest samples from which percentile p is
 * reported: enough that at least 10 samples lie at or above it,
 * ceil(10 / (1 - p/100)): 20 for p50, 100 for p90, 1 000 for p99, 10 000
 * for p99.9. 1 for p <= 0 and p >= 100 (the minimum and the maximum).
 */
uint64_t dxl_pct_min_samples(double p);

/* dxl_hist_pct_valid -- h has at least dxl_pct_min_samples(p) samples */
int dxl_hist_pct_valid(const struct dxl_hist *h, double p);
double dxl_hist_mean(const struct dxl_hist *h);

#endif /* DXL_HIST_H */
