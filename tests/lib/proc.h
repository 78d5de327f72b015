/* proc.h -- the project's programs as child processes of integration tests
 *
 * Find a program of build/bin (dxl, dxl-replica), run it with its output in
 * a file, and keep a table of the children so that a test can kill and reap
 * every one of them, even when it fails half-way. Like the rest of
 * tests/lib: no cmocka here; functions return 0 / a pid or a DXL_E_* code
 * (message set) and the test asserts.
 */
#ifndef DXL_TEST_PROC_H
#define DXL_TEST_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dxl/membership.h"
#include "dxl/replica.h"

/* dxlt_prog_path -- $DXL_BIN_DIR/prog, else ../bin/prog next to the running
 * test binary (build/tests -> build/bin, also for build/asan, build/tsan) */
int dxlt_prog_path(const char *prog, char *buf, size_t cap);

struct dxl_zk;
/* dxlt_zk_open -- a ZooKeeper session on connect for cluster (defaults
 * otherwise); dxl_zk_new's errors */
int dxlt_zk_open(const char *connect, const char *cluster, struct dxl_zk **out);

/* dxlt_slurp -- up to cap-1 bytes of path into buf ("" if unreadable) */
void dxlt_slurp(const char *path, char *buf, size_t cap);

/*
 * dxlt_spawn -- fork and exec argv[0] (NULL-terminated argv) with stdout and
 * stderr into logfile (appended to, or truncated first); the child dies with
 * the test (PR_SET_PDEATHSIG) and is tracked. Returns its pid, or a negative
 * DXL_E_*.
 */
pid_t dxlt_spawn(const char *const *argv, const char *logfile, bool append);

/* dxlt_untrack -- forget p (it was reaped elsewhere) */
void dxlt_untrack(pid_t p);

/* dxlt_kill_all -- SIGCONT (a stopped child cannot die otherwise), SIGKILL
 * and reap every tracked child */
void dxlt_kill_all(void);

/* dxlt_cluster_reap -- after `dxl cluster down --dir DIR` (which may give
 * up on a slow daemon, e.g. a sanitizer build): SIGKILL every replica that
 * DIR/cluster.json lists and that is still a process of that cluster (its
 * command line names DIR). Returns how many were killed. */
int dxlt_cluster_reap(const char *dir);

/* dxlt_wait_exit -- p's exit status within timeout_ms; -1 if it was killed
 * by a signal or did not exit in time (then it is killed and reaped) */
int dxlt_wait_exit(pid_t p, int timeout_ms);

/*
 * A dxl-replica daemon for shard 0 with small shards (log.ring_size=256K,
 * log.writer_slots=4) and process durability; `extra` (NULL-terminated, may
 * be NULL) adds flags, later -o keys override earlier ones.
 */
struct dxlt_replica {
	const char *bin;      /* path of dxl-replica */
	const char *logfile;  /* its stdout and stderr */
	bool append;          /* append to logfile (restarts) */
	uint32_t node;
	const char *dir;      /* --data-dir */
	const char *zk;       /* --zk */
	const char *cluster;  /* --cluster */
	const char *const *extra;
};

pid_t dxlt_replica_spawn(const struct dxlt_replica *r);

/*
 * dxlt_replica_desc_wait -- wait (at most timeout_ms) until nodes/<node> is
 * registered with reg_epoch >= min_epoch, and decode it into *d (*sess, if
 * not NULL: its session). Gives up early when p (> 0) has exited.
 * Returns 0, DXL_E_TIMEDOUT, or the error of the lookup or the decoding.
 */
int dxlt_replica_desc_wait(struct dxl_zk *zk, uint32_t node, uint64_t min_epoch,
			   pid_t p, int timeout_ms, struct dxl_replica_desc *d,
			   int64_t *sess);

#endif
