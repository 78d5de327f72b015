/* log_replica.h -- a log replica in a child process, for append and crash tests
 *
 * dxl_test_replica_start forks a process that opens (or creates and formats)
 * the log region DIR/log.region, registers its data area with a tcp fabric,
 * and serves it. It reports one struct dxl_log_target per ring to the parent
 * and then only serves (the NIC thread does the work) and, if apply_ms > 0,
 * advances every ring's head to the end of its valid records every apply_ms
 * (as a replica that applied them would). SIGUSR2 power-fails it with the
 * given policy and seed (the tcp fabric's power-failure model). After it is
 * dead, the parent can open the same files and scan them.
 */
#ifndef DXL_TEST_LOG_REPLICA_H
#define DXL_TEST_LOG_REPLICA_H

#include <stdint.h>
#include <sys/types.h>

#include "dxl/fabric.h"
#include "dxl/log.h"

#define DXL_TEST_REPLICA_MAX_RINGS 8

struct dxl_test_replica {
	pid_t pid;
	char dir[256];
	uint32_t node_id;
	uint32_t nrings;
	struct dxl_log_target target[DXL_TEST_REPLICA_MAX_RINGS];
};

struct dxl_test_replica_cfg {
	uint32_t node_id;
	uint32_t nrings;
	uint64_t ring_size;
	uint32_t apply_ms;           /* 0: never advance heads */
	enum dxl_pf_policy pf_policy; /* on SIGUSR2 */
	uint64_t pf_seed;
};

/* start (or restart on the same dir); 0 or a negative code (message set) */
int dxl_test_replica_start(struct dxl_test_replica *r, const char *dir,
			   const struct dxl_test_replica_cfg *cfg);
/* send sig; for SIGKILL and SIGUSR2 (power failure) also reap the child */
void dxl_test_replica_signal(struct dxl_test_replica *r, int sig);
/* kill -9 and reap, if still running */
void dxl_test_replica_stop(struct dxl_test_replica *r);

/* open the (dead) replica's log from its files; close with _close */
int dxl_test_replica_open_log(const struct dxl_test_replica *r,
			      struct dxl_region **reg, struct dxl_logstore **ls);

#endif
