/* cli.h -- what the dxl tool's subcommand files share (tools/dxl/). */
#ifndef DXL_TOOLS_CLI_H
#define DXL_TOOLS_CLI_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "dxl/log.h"
#include "dxl/membership.h"
#include "dxl/replica.h"

/* exit codes (docs/cli.md, and every --help) */
enum {
	EX_OK = 0,
	EX_FAIL = 1,    /* the operation failed (append not acknowledged, a
			   replica did not start, a replica is down...) */
	EX_USAGE = 2,   /* bad command line */
	EX_CLUSTER = 3, /* the cluster does not have what was asked: no
			   cluster.json, no configuration, unknown shard,
			   replica not registered */
	EX_ZK = 4,      /* ZooKeeper unreachable */
};

#define EXIT_CODES_HELP                                                      \
	"EXIT STATUS\n"                                                      \
	"    0  success\n"                                                   \
	"    1  the operation failed (see the message)\n"                    \
	"    2  bad command line\n"                                          \
	"    3  the cluster lacks what was asked (no DIR/cluster.json, no\n" \
	"       configuration, unknown shard, replica not registered)\n"     \
	"    4  ZooKeeper unreachable\n"


#define MAX_REPLICAS DXL_CONFIG_MAX_REPLICAS

extern const char *g_cmd; /* "dxl log append" etc., for messages */
extern char g_self_dir[PATH_MAX];

void errf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void find_self(void);
int mkdir_p(const char *path);
int parse_u32(const char *s, uint32_t *out);
bool pid_alive(pid_t pid);
bool is_replica(pid_t pid);
bool is_prog(pid_t pid, const char *prog); /* pid runs build/bin/<prog> */
int check_cluster_name(const char *name); /* 0 or EX_USAGE with a message */
int rm_tree(const char *path);             /* rm -rf path (no symlinks followed) */

struct conn {
	char zk[DXL_ZK_CONNECT_MAX];
	char cluster[DXL_ZK_CLUSTER_MAX];
};

#define STATE_MAX_OPTS 32
#define STATE_MAX_COORDS 8

struct state {                  /* DIR/cluster.json */
	struct conn c;
	char zk_dir[PATH_MAX + 8]; /* "" when the ZooKeeper is not ours */
	uint32_t nreplicas, nshards;
	uint32_t ids[MAX_REPLICAS];
	pid_t pids[MAX_REPLICAS];
	/* how the replicas were started, for 'cluster restart' */
	char provider[16], durability[16];
	uint32_t nopts;
	char opts[32][160]; /* -o key=value for every replica */
	/* the dxl-coord processes 'cluster up --coordinators' started */
	uint32_t ncoords;
	pid_t coord_pids[STATE_MAX_COORDS];
};

int state_write(const char *dir, const struct state *s);
int state_read(const char *dir, struct state *s);
int resolve_conn(const char *dir, const char *zk, const char *cluster, struct conn *c);
int zk_connect(const struct conn *c, struct dxl_zk **zk);

struct shard_view {
	uint32_t n; /* replicas, primary first */
	uint32_t ids[MAX_REPLICAS];
	uint64_t epoch;
};

void shard_list(const struct dxl_cluster_config *cfg, char *buf, size_t cap);
int shard_view(struct dxl_zk *zk, const struct conn *c, uint32_t shard, struct shard_view *v);
int get_desc(struct dxl_zk *zk, uint32_t id, struct dxl_replica_desc *d);
/* cluster.c: start replica id of s (log DIR/logs/replica-<id>.log), -1 with
 * a message on failure; the last lines of its log to stderr */
pid_t spawn_replica(const char *dir, const struct state *s, uint32_t id);
/* cluster.c: fork argv[0] with argv in a session of its own, stdin
 * /dev/null, stdout and stderr appended to log (*log_off, when not NULL:
 * the log's size before); pf_signal: SIGUSR2 arms the tcp provider's
 * power-failure model unless DXL_FABRIC_PF says otherwise. The pid, or -1
 * with a message */
pid_t spawn_daemon(const char *const *argv, const char *log, bool pf_signal, long *log_off);
void log_tail(const char *dir, uint32_t id);

/* subcommands */
int cmd_cluster_up(int argc, char **argv);
int cmd_cluster_start(int argc, char **argv);
int cmd_cluster_add(int argc, char **argv);
int cmd_cluster_verify(int argc, char **argv);
int cmd_cluster_status(int argc, char **argv);
int cmd_cluster_down(int argc, char **argv);
int cmd_cluster_kill(int argc, char **argv);
int cmd_cluster_restart(int argc, char **argv);
int cmd_log_append(int argc, char **argv);
int cmd_log_load(int argc, char **argv);
int writer_err_exit(int ret);
int cmd_tail(int argc, char **argv);
int cmd_kv(int argc, char **argv);  /* get|put|insert|del (txn.c) */
int cmd_txn(int argc, char **argv);

#endif /* DXL_TOOLS_CLI_H */
