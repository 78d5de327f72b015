/* bench_failover.h -- what the parts of dxl-bench-failover share */
#ifndef DXL_BENCH_FAILOVER_H
#define DXL_BENCH_FAILOVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "dxl/membership.h"

#define BF_MAX_REPLICAS DXL_CONFIG_MAX_REPLICAS
#define BF_MAX_SHARDS 64

/* what 'dxl cluster up --dir DIR' wrote into DIR/cluster.json */
struct bf_cluster {
	char zk[DXL_ZK_CONNECT_MAX];
	char cluster[DXL_ZK_CLUSTER_MAX];
	uint32_t nreplicas;
	uint32_t ids[BF_MAX_REPLICAS];
	pid_t pids[BF_MAX_REPLICAS];
	uint32_t session_timeout_ms; /* from the replicas' options (0: unknown) */
};

/* bf_cluster_read -- DIR/cluster.json; 0 or -1 (message on stderr) */
int bf_cluster_read(const char *dir, struct bf_cluster *c);

/* bf_zk_open -- a session on the cluster's ZooKeeper; 0 or -1 (message) */
int bf_zk_open(const struct bf_cluster *c, struct dxl_zk **zk);

/* the "setup" of a result: dxlb_setup_json (bench/lib) */
#include "bench/lib/bench_lib.h"

/* bf_parse_list -- "10,100,1000" into v[0..*n); 0 or -1 */
int bf_parse_list(const char *s, uint32_t *v, uint32_t cap, uint32_t *n);

/* bf_ms -- nanoseconds as milliseconds (for JSON) */
static inline double bf_ms(int64_t ns)
{
	return (double)ns / 1e6;
}

/*
 * dxl-bench-failover run: one failover on a running cluster (see main.c's
 * usage). Returns the process exit status: 0, 1 (the run went wrong: no
 * failover seen, appends failed), 2 (bad command line).
 */
int bf_cmd_run(int argc, char **argv);

/* dxl-bench-failover taillag: acknowledged -> delivered lag at steady rates */
int bf_cmd_taillag(int argc, char **argv);

#endif
