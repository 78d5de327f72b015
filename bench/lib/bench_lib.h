/* bench_lib.h -- code every benchmark links (the .c files of bench/lib) */
#ifndef DXL_BENCH_LIB_H
#define DXL_BENCH_LIB_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hist.h"

/* ---- the setup of a run (setup.c) ----------------------------------------- */

/*
 * dxlb_setup_json -- what every result says about the run, taken from the
 * machine and the build, never assumed: date, command line, build (the
 * `git describe --dirty` compiled into this binary), kernel, host name, CPU
 * model and count (/proc/cpuinfo), memory, load averages at the start.
 * The benchmark adds what it knows from its real configuration (provider,
 * durability, replicas, shards, in flight, threads, data directories'
 * filesystems) and calls dxlb_setup_end at the end.
 */
json_t *dxlb_setup_json(int argc, char **argv);

/* dxlb_setup_end -- the load averages and the date at the end of the run */
void dxlb_setup_end(json_t *setup);

/*
 * dxlb_fs_json -- the filesystem path is on: {path, fstype, mount, source}
 * from /proc/self/mountinfo (the longest mount point that is a prefix of
 * the real path); {path, error} if it cannot be found.
 */
json_t *dxlb_fs_json(const char *path);

/* dxlb_loadavg_json -- [1 min, 5 min, 15 min] now */
json_t *dxlb_loadavg_json(void);

/* ---- latencies and summaries (stats.c) ------------------------------------ */

/*
 * dxlb_lat_json -- a latency histogram (nanoseconds) as
 * {n, p50_us, p90_us, p99_us, p999_us, mean_us, min_us, max_us}: each
 * percentile by the nearest rank, null when there are fewer samples than
 * dxl_pct_min_samples (no p99 from under 1 000 samples, no p99.9 from
 * under 10 000).
 */
json_t *dxlb_lat_json(const struct dxl_hist *h);

/*
 * dxlb_pct_str -- percentile p of h in microseconds as text ("123.4"), or
 * "n/a (n=40)" when h has too few samples for it (dxl_pct_min_samples).
 * Returns buf.
 */
const char *dxlb_pct_str(const struct dxl_hist *h, double p, char *buf, size_t cap);

/*
 * The summary every benchmark writes for the comparison runner
 * (dxl-bench-compare), the same fields for dxl and its peers:
 *   {ops, seconds, ops_per_s, open_loop, offered_per_s, latency, service,
 *    p50_us, p99_us, p999_us, errors, retries}
 * latency is dxlb_lat_json of the latencies from the INTENDED start of each
 * operation in an open-loop run (offered_per_s > 0: the schedule of a fixed
 * rate, so a stall and the queue behind it count: no coordinated omission),
 * from its send in a closed-loop run; service is from the send, in an
 * open-loop run only (null otherwise). p50_us.. repeat latency's values
 * (null when too few samples). errors: operations that failed; retries:
 * operations sent again (after an abort, a refused request, a lost
 * connection...), as each benchmark defines them.
 */
struct dxlb_summary {
	uint64_t ops;
	double seconds;
	double offered_per_s;        /* 0: closed loop */
	const struct dxl_hist *lat;  /* from the intended start (open) or the send */
	const struct dxl_hist *svc;  /* open loop: from the send; NULL otherwise */
	uint64_t errors, retries;
	uint64_t late;               /* open loop: operations never sent (behind the schedule at the end) */
};
json_t *dxlb_summary_json(const struct dxlb_summary *s);

/*
 * dxlb_schedule_ns -- the intended start of operation k of an open-loop
 * run at rate ops/s from t0: t0 + k * 1e9 / rate (exact for any k).
 */
static inline uint64_t dxlb_schedule_ns(uint64_t t0, uint64_t k, double rate)
{
	return t0 + (uint64_t)((double)k * 1e9 / rate);
}

/* ---- the comparison statistics (stats.c) ---------------------------------- */

/* the median (mean of the middle two for an even n), minimum, maximum of n values */
struct dxlb_range {
	size_t n;
	double median, min, max;
};

/* dxlb_range_of -- the range of v[0..n); DXL_E_INVAL if n == 0 or a value
 * is not a finite number */
int dxlb_range_of(const double *v, size_t n, struct dxlb_range *out);

enum dxlb_better { DXLB_LOWER_BETTER = -1, DXLB_HIGHER_BETTER = 1 };

/* the claim a paired comparison supports */
enum dxlb_verdict {
	DXLB_TOO_FEW = 0, /* fewer than min_reps valid pairs: no claim */
	DXLB_OVERLAP,     /* the ranges of A and B overlap: no claim */
	DXLB_A_BETTER,    /* every A beats every B */
	DXLB_B_BETTER,    /* every B beats every A */
};

/* a goal "A >= goal x B" (higher better) or "A <= goal x B" (lower better) */
enum dxlb_goal {
	DXLB_GOAL_NONE = 0,   /* no goal given */
	DXLB_GOAL_NO_CLAIM,   /* too few pairs */
	DXLB_GOAL_UNDECIDED,  /* the ranges (B scaled by goal) overlap */
	DXLB_GOAL_MET,        /* even A's worst beats goal x B's best */
	DXLB_GOAL_NOT_MET,    /* even A's best misses goal x B's worst */
};

#define DXLB_MIN_REPS 5     /* the fewest repetitions a claim is made from */
#define DXLB_MIN_SECONDS 10 /* the shortest measured run a claim is made from */

/*
 * dxlb_smoke -- a run of reps repetitions of seconds each is a smoke run
 * (its numbers carry no claim, whatever they show) when reps <
 * DXLB_MIN_REPS or seconds < DXLB_MIN_SECONDS.
 */
static inline int dxlb_smoke(int reps, double seconds)
{
	return reps < DXLB_MIN_REPS || !(seconds >= DXLB_MIN_SECONDS);
}

struct dxlb_cmp {
	struct dxlb_range a, b;
	struct dxlb_range ratio; /* of the paired ratios a[i] / b[i] */
	enum dxlb_verdict verdict;
	enum dxlb_goal goal;
};

/*
 * dxlb_compare -- the claim rule of every published comparison, on n
 * paired repetitions (a[i] and b[i] measured back to back, in alternating
 * order). The ratio is reported as the median and range of a[i] / b[i].
 * A claim that A beats B is made only when the ranges do not overlap:
 * higher better: min(a) > max(b); lower better: max(a) < min(b) -- and only
 * from at least min_reps pairs. A goal (goal > 0) is judged the same way
 * against B scaled by it: higher better, met when min(a) >= goal x max(b),
 * not met when max(a) < goal x min(b); lower better, met when max(a) <=
 * goal x min(b), not met when min(a) > goal x max(b); otherwise undecided.
 * Values must be finite and > 0. Returns 0 or DXL_E_INVAL.
 */
int dxlb_compare(const double *a, const double *b, size_t n, enum dxlb_better better,
		 size_t min_reps, double goal, struct dxlb_cmp *out);

/* "a better", "b better", "no claim: ranges overlap", "no claim: too few repetitions" */
const char *dxlb_verdict_name(enum dxlb_verdict v);
/* "met", "not met", "undecided: ranges overlap", "no claim: too few repetitions", "none" */
const char *dxlb_goal_name(enum dxlb_goal g);

#endif /* DXL_BENCH_LIB_H */
