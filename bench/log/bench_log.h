/* bench_log.h -- what the parts of dxl-bench-log share */
#ifndef DXL_BENCH_LOG_H
#define DXL_BENCH_LOG_H

#include <sched.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/types.h>

#include "bench/lib/bench_lib.h"
#include "common/common.h"
#include "common/hist.h"
#include "dxl/log.h"

#define BL_MAX_REPLICAS 3
#define BL_MAX_WRITERS 4

/* a replica process serving a log region with one ring per writer */
struct bl_replica {
	pid_t pid;
	char dir[256];
	struct dxl_log_target target[BL_MAX_WRITERS];
};

/* start a replica: region of nrings rings in dir, durability mode, heads
 * advanced every apply_us (the replica "applies" what it received) */
int bl_replica_start(struct bl_replica *r, const char *dir, uint32_t node,
		     uint32_t nrings, uint64_t ring_size,
		     enum dxl_durability mode, uint32_t apply_us);
void bl_replica_stop(struct bl_replica *r);

/* results of one measured cell */
struct bl_result {
	uint64_t ops;
	double secs;
	struct dxl_hist lat; /* nanoseconds: from the send (closed loop) or from
				the intended start (open loop, offered > 0) */
	struct dxl_hist svc; /* open loop: from the send (service time) */
	double offered;      /* open loop: the offered rate (ops/s); 0 closed */
	uint64_t late;       /* open loop: operations due before the end but
				never sent (the window was full: behind schedule) */
	char error[160];     /* non-empty if the cell failed */
};

/*
 * ZooKeeper persistent-sequential creates, at most `inflight` outstanding;
 * rate > 0: open loop, create k due at t0 + k/rate (latency from then),
 * inflight only caps what is outstanding
 */
int bl_zk_run(const char *connect, uint32_t payload, uint32_t inflight,
	      uint32_t duration_ms, double rate, struct bl_result *out);

/* bl_wait_until -- return at t (dxl_now_ns): sleep until 1 ms before it,
 * then spin with sched_yield(), so an open-loop sender is on time without a
 * sleeping thread's wake-up delay */
static inline void bl_wait_until(uint64_t t)
{
	for (;;) {
		uint64_t now = dxl_now_ns();
		if (now >= t)
			return;
		if (t - now > 2000000)
			usleep((useconds_t)((t - now - 1000000) / 1000));
		else
			sched_yield();
	}
}

/* local persist cost: ns per (copy + persist) of size bytes */
int bl_persist_cost(const char *dir, enum dxl_durability mode, uint32_t size,
		    uint32_t iters, double *ns_per_op, char *why, size_t whycap);

#endif
