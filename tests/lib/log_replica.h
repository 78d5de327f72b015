/* log_replica.h -- a log replica in a child process, for append and crash tests
 *
 * dxl_test_replica_start forks a process that opens (or creates and formats)
 * the log region DIR/shard-0.log (replica/shard.c), registers its data area with a fabric,
 * and serves it. It reports one struct dxl_log_target per ring to the parent
 * and then only serves (the NIC thread does the work) and, if apply_ms > 0,
 * advances every ring's head to the end of its valid records every apply_ms
 * (as a replica that applied them would). After it is dead, the parent can
 * open the same files and scan them.
 *
 * The fabric is the one the environment names (DXL_TEST_PROVIDER,
 * DXL_TEST_ADDR, DXL_TEST_DEVICE, DXL_TEST_GID_INDEX: see
 * tests/lib/fabric_fixture.h, dxlt_fabric_cfg_from_env); the tests' own
 * fabrics should use the same. With the tcp provider, SIGUSR2 power-fails
 * the replica with the given policy and seed (the tcp fabric's power-failure
 * model). Other providers have no such model: pf_policy and pf_seed are
 * ignored and SIGUSR2 simply terminates the process, so a test that needs
 * the model must check dxl_test_tcp_only first.
 */
#ifndef DXL_TEST_LOG_REPLICA_H
#define DXL_TEST_LOG_REPLICA_H

#include <stdbool.h>
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
	enum dxl_durability durability;
	int ctl;      /* commands to the child (dxl_test_replica_persister) */
	int ctl_back; /* its answers */
	struct dxl_log_target target[DXL_TEST_REPLICA_MAX_RINGS];
};

struct dxl_test_replica_cfg {
	uint32_t node_id;
	uint32_t nrings;
	uint64_t ring_size;
	uint32_t apply_ms;           /* 0: never advance heads */
	bool apply_below_wmark;      /* advance only past records below the
					ring's watermark (as retention does);
					else past every valid record */
	enum dxl_pf_policy pf_policy; /* on SIGUSR2 */
	uint64_t pf_seed;
	/* the log region's durability: process (the default), or msync */
	bool msync;
	/* run the log persister (include/dxl/log.h) even where the provider
	 * and durability do not need one (dxl_shard_register decides
	 * otherwise): protocol tests on tcp */
	bool persister;
};

/* start (or restart on the same dir); 0 or a negative code (message set) */
int dxl_test_replica_start(struct dxl_test_replica *r, const char *dir,
			   const struct dxl_test_replica_cfg *cfg);
/* send sig; for SIGKILL and SIGUSR2 (power failure) also reap the child */
void dxl_test_replica_signal(struct dxl_test_replica *r, int sig);
/*
 * dxl_test_replica_persister -- pause (1) or resume (0) the child's log
 * persister; returns once it is done (paused: nothing more is confirmed).
 * DXL_E_NOENT if the child runs none, DXL_E_IO if it does not answer.
 */
int dxl_test_replica_persister(struct dxl_test_replica *r, int paused);
/* the child's persister statistics (DXL_E_NOENT: none) */
int dxl_test_replica_persist_stats(struct dxl_test_replica *r,
				   struct dxl_persist_stats *out);

/* send sig and return (several replicas fail at once); reap with _wait */
void dxl_test_replica_kill(struct dxl_test_replica *r, int sig);
/* reap the child after SIGKILL or SIGUSR2 */
void dxl_test_replica_wait(struct dxl_test_replica *r);
/* kill -9 and reap, if still running */
void dxl_test_replica_stop(struct dxl_test_replica *r);

/* open the (dead) replica's log from its files; close with _close */
int dxl_test_replica_open_log(const struct dxl_test_replica *r,
			      struct dxl_region **reg, struct dxl_logstore **ls);

/*
 * dxl_test_tcp_only -- 1 if DXL_TEST_PROVIDER is tcp. Otherwise prints
 * "SKIPPED on <provider>: <what> -- requires <why>" and returns 0; the caller
 * then calls cmocka's skip() (never a silent pass).
 */
int dxl_test_tcp_only(const char *what, const char *why);

/*
 * dxl_test_nodev_skip -- 1 if ret (from a fabric or replica start) is
 * DXL_E_NODEV and DXL_TEST_REQUIRE_DEVICE is not set: the provider has no
 * device here (verbs on a machine without RDMA). Prints the reason; the
 * caller cleans up and skip()s. 0 otherwise (the caller asserts ret).
 */
int dxl_test_nodev_skip(int ret);

#endif
