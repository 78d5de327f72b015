/* bench_log.h -- what the parts of dxl-bench-log share */
#ifndef DXL_BENCH_LOG_H
#define DXL_BENCH_LOG_H

#include <stdint.h>
#include <sys/types.h>

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
	struct dxl_hist lat; /* nanoseconds */
	char error[160];     /* non-empty if the cell failed */
};

/* ZooKeeper persistent-sequential creates, `inflight` outstanding */
int bl_zk_run(const char *connect, uint32_t payload, uint32_t inflight,
	      uint32_t duration_ms, struct bl_result *out);

/* local persist cost: ns per (copy + persist) of size bytes */
int bl_persist_cost(const char *dir, enum dxl_durability mode, uint32_t size,
		    uint32_t iters, double *ns_per_op, char *why, size_t whycap);

#endif
