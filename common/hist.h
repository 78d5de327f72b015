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
/* dxl_hist_pct -- value at percentile p (0..100); 0 for an empty histogram */
uint64_t dxl_hist_pct(const struct dxl_hist *h, double p);
double dxl_hist_mean(const struct dxl_hist *h);

#endif /* DXL_HIST_H */
