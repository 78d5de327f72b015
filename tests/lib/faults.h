/* faults.h -- the membership and reconfiguration fault kinds (issue 16), callable
 * from any test or harness
 *
 * Each fault kind here works on a daemon (environment variables read at its
 * start) and in-process (an API of the library):
 *
 *  - a ZooKeeper call applied and then reported as a connection loss (lost
 *    reply), or lost before being applied (lost request): creates, versioned
 *    sets, deletes, listings and reads. In-process: dxl_zk_inject_fault()
 *    (membership.h); a daemon: DXL_ZK_FAULTS in its environment
 *    (dxlt_env_add);
 *  - a pause at a named test point (DXL_TESTPOINT in the code; the list is in
 *    docs/fault-injection.md): in-process dxl_testpoint_set() (a callback that may
 *    act: change the configuration, stop a server...), a daemon
 *    DXL_TESTPOINTS="point=wait:PATH" -- dxlt_pause_wait() sees it arrive,
 *    dxlt_pause_release() lets it go on;
 *  - a node restarted on an empty data directory: dxlt_wipe_dir() between the
 *    kill and the restart;
 *  - configurations written the way the CM writes them (dxlt_config_put):
 *    crosswise joins (two nodes each joining a shard the other leads) and a
 *    second failure during a join pull (pause the joiner at
 *    replica.join_pull.copy, kill the primary, release) are built from it;
 *  - a suspend of the machine as the boot clock sees it:
 *    dxl_clock_inject_suspend_ns() (common.h).
 *
 * Like the rest of tests/lib: no cmocka; 0 or a negative DXL_E_* with a
 * message.
 */
#ifndef DXL_TEST_FAULTS_H
#define DXL_TEST_FAULTS_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dxl/membership.h"
#include "dxl/replica.h"

/* dxlt_env_add -- append "name=value" to a NULL-terminated environment
 * list for a child (env[cap]); entries are copied. Errors: DXL_E_FULL. */
int dxlt_env_add(char **env, size_t cap, const char *name, const char *value);
void dxlt_env_free(char **env);

/* dxlt_spawn_env -- dxlt_replica_spawn (proc.h) with name=value in the
 * daemon's environment (DXL_TESTPOINTS, DXL_ZK_FAULTS): set for the fork
 * only, the test's own environment is restored */
struct dxlt_replica;
pid_t dxlt_spawn_env(const struct dxlt_replica *r, const char *name, const char *value);

/* dxlt_pause_spec -- "point=wait:PATH" into buf (for DXL_TESTPOINTS; join
 * several with ',') */
void dxlt_pause_spec(char *buf, size_t cap, const char *point, const char *path);
/* dxlt_pause_wait -- wait until a process is paused at the point armed with
 * PATH (it created PATH.hit); 0 or DXL_E_TIMEDOUT */
int dxlt_pause_wait(const char *path, int timeout_ms);
/* dxlt_pause_release -- let it go on (creates PATH): the point passes from
 * now on */
int dxlt_pause_release(const char *path);
/* dxlt_pause_rearm -- the next arrival pauses again (removes PATH and
 * PATH.hit) */
void dxlt_pause_rearm(const char *path);

/* dxlt_wipe_dir -- remove every file in dir (not the directory): a node
 * restarted on an empty data directory. Errors: DXL_E_IO. */
int dxlt_wipe_dir(const char *dir);

/* dxlt_zk_raw_put -- write data at path with the plain ZooKeeper client
 * (creating it and its missing parents): what the module itself would never
 * write (a damaged cursor, a foreign znode). Errors: DXL_E_UNAVAIL, DXL_E_IO. */
int dxlt_zk_raw_put(const char *connect, const char *path, const char *data);
/* dxlt_zk_raw_delete -- delete a znode from another session (a candidacy
 * deleted from outside). Errors: DXL_E_NOENT, DXL_E_UNAVAIL, DXL_E_IO. */
int dxlt_zk_raw_delete(const char *connect, const char *path);

/* dxlt_zk_raw_delete_children -- delete every child of path (e.g. the CM
 * candidacies); returns how many, or DXL_E_UNAVAIL / DXL_E_IO */
int dxlt_zk_raw_delete_children(const char *connect, const char *path);

/*
 * dxlt_config_put -- write the next configuration (epoch + 1, or 1 when
 * there is none) by compare-and-set: shards[i] with members[i][0..n[i])
 * (primary first), node addresses and data identities taken from the
 * members' current descriptors (what the CM records when it adds a member).
 * *epoch (may be NULL) = the epoch written. Errors: DXL_E_NOENT (a member is
 * not registered), dxl_cluster_config_cas's.
 */
int dxlt_config_put(struct dxl_zk *zk, uint32_t nshards, const uint32_t *shards,
		    const uint32_t *const *members, const uint32_t *n, uint64_t *epoch);

/* dxlt_wait_cfg_epoch -- wait until nodes/<node> says cfg_epoch >= epoch
 * (and, if state >= 0, shard `shard` in that state); 0 or DXL_E_TIMEDOUT */
int dxlt_wait_cfg_epoch(struct dxl_zk *zk, uint32_t node, uint64_t epoch, uint32_t shard,
			int state, int timeout_ms);

/*
 * An in-process replica server (dxl_replica_server in a thread of the
 * test): what a daemon does, but the test reaches its ZooKeeper session
 * (dxl_zk_inject_expiry, dxl_zk_inject_fault) and its test points directly.
 */
struct dxlt_server {
	struct dxl_replica_server *s;
	pthread_t th;
	volatile sig_atomic_t stop;
	bool running;
	int ret; /* what dxl_replica_server_run returned */
};

/* dxlt_server_cfg -- the defaults of tests: node, data dir, ZooKeeper,
 * cluster, shards 0..nshards-1, process durability, 256K rings, 4 writer
 * slots, session timeout 1000 ms, no CM candidacy */
void dxlt_server_cfg(struct dxl_replica_cfg *cfg, uint32_t node, const char *dir,
		     const char *zk, const char *cluster, uint32_t nshards);
/* dxlt_server_start -- dxl_replica_server_new and its loop in a thread */
int dxlt_server_start(const struct dxl_replica_cfg *cfg, struct dxlt_server *srv);
/* dxlt_server_stop -- stop the loop, join, delete (a clean shutdown) */
void dxlt_server_stop(struct dxlt_server *srv);

#endif
