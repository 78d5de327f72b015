/* bench_fabric.h -- what the parts of dxl-bench-fabric share: options, cells, results */
#ifndef DXL_BENCH_FABRIC_H
#define DXL_BENCH_FABRIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/hist.h"
#include "dxl/fabric.h"

/*
 * Process layout (see --help):
 *   fork mode (default)  this process is the client; it execs a copy of
 *                        itself as `--server --once` on loopback
 *   --server             serve clients on --addr until killed
 *   --client             measure against a --server at --addr
 *
 * The client talks to the server over a plain TCP control connection
 * (text lines, see server.c) to learn the fabric address and the region
 * descriptors; the same listener echoes bytes for the TCP ping-pong
 * baseline.
 */

#define BF_MAX_THREADS 8
#define BF_MAX_BATCH 64
#define BF_MAX_OUTSTANDING 64
#define BF_MAX_SIZE (64u * 1024)
#define BF_MAX_LIST 16
#define BF_DEFAULT_PORT 7470
#define BF_IDLE_CTX (DXL_FABRIC_MAX_CTX - 1) /* client ctx index of the idle probe */
#define BF_RPC_CTX_BASE 32 /* RPC ctxs: BF_RPC_CTX_BASE + i, both sides */
#define BF_MAX_SERVER_CTX (BF_RPC_CTX_BASE - 1)

/* server regions */
#define BF_READ_REGION (4u << 20)       /* known pattern, READ target */
#define BF_WRITE_PER_THREAD (4u << 20)  /* WRITE target, one slice per thread */
#define BF_ATOMIC_PER_THREAD (BF_MAX_BATCH * BF_MAX_OUTSTANDING * 8u)

enum bf_op {
	BF_READ = 0,
	BF_WRITE,
	BF_CAS,
	BF_FAA,
	BF_SEND,
	BF_RPC,
	BF_NOPS
};

enum bf_mode {
	BF_MODE_FORK = 0,
	BF_MODE_SERVER,
	BF_MODE_CLIENT,
	BF_MODE_IDLE_PEER, /* internal: the idle-CPU probe process */
};

enum bf_poll {
	BF_POLL_WAIT = 0, /* dxl_ctx_wait when the CQ is empty (spin, then block) */
	BF_POLL_SPIN,     /* busy-poll dxl_ctx_poll */
};

struct bf_list {
	uint32_t v[BF_MAX_LIST];
	int n;
};

struct bf_opts {
	enum bf_mode mode;
	enum dxl_fabric_provider provider;
	char addr[DXL_FABRIC_ADDR_MAX];        /* control address */
	char fabric_addr[DXL_FABRIC_ADDR_MAX]; /* our fabric listen address */
	bool ops[BF_NOPS];
	struct bf_list sizes, batch, outstanding, threads;
	uint32_t duration_ms;
	uint32_t warmup_ms;
	uint64_t iters;        /* measured chains per thread per cell; 0 = by time */
	uint64_t warmup_iters; /* when iters != 0 */
	const char *out;       /* JSON path ("-" = stdout, "" = none) */
	int json_fd;           /* --out -: the real stdout (text goes to stderr) */
	char csv[512];         /* CSV path, "" = none */
	bool quick;
	uint64_t seed;
	enum bf_poll poll;
	bool driver_co;        /* one-sided cells driven by coroutines */
	uint32_t idle_ms;      /* idle-CPU probe window; 0 = skip */
	uint32_t pp_ms;        /* ping-pong time per size */
	uint32_t paired_rounds; /* rounds of the paired READ/ping-pong probe */
	uint32_t verify_every; /* verify every Nth chain of READ/SEND/RPC */
	bool inline_small;     /* INLINE for WRITE/SEND <= max_inline */
	int spin_us;           /* cfg.idle_spin_us of every fabric; -1 = default */
	uint32_t cell_timeout_ms; /* no completion for this long fails a cell */
	/* server side */
	uint32_t server_ctx;   /* ctxs (and serving threads) of the server */
	uint32_t server_depth; /* receive buffers per server ctx */
	uint32_t max_size;     /* largest SEND/RPC payload the server accepts */
	bool once;             /* server: exit when the first session ends */
	int ready_fd;          /* server: write "port\n" here when ready */
	bool quiet;
	int argc;
	char **argv;
};

struct bf_cell {
	enum bf_op op;
	uint32_t size, batch, outstanding, threads;
};

/* what one cell measured (merged over threads) */
struct bf_result {
	struct bf_cell cell;
	bool skipped;
	char note[160];        /* why skipped / first error */
	int errors;            /* failed completions, timeouts */
	uint64_t verify_checked;
	uint64_t verify_errors;
	uint64_t ops;          /* work requests (or RPCs) completed in the window */
	double secs;           /* measurement window */
	double ops_per_s;
	uint64_t p50_ns, p99_ns, p999_ns, min_ns, max_ns;
	double mean_ns;
	uint64_t samples;      /* latency samples = chains completed */
	double pp_ratio_p50;   /* p50 / TCP ping-pong p50 of the same size; 0 = n/a */
	/* noise: CPUs' worth of work done by processes other than this
	 * benchmark (client, server) while the cell ran; -1 = unknown */
	double other_cpus;
};

/* the TCP ping-pong baseline of one payload size */
#define BF_PP_RUNS 3
struct bf_pp {
	uint32_t size;
	int runs;              /* runs done: before, in the middle of and
				  after the matrix (BF_PP_RUNS) */
	uint64_t p50_ns[BF_PP_RUNS], p99_ns[BF_PP_RUNS], p999_ns[BF_PP_RUNS];
	double mean_ns[BF_PP_RUNS], ops_per_s[BF_PP_RUNS];
	uint64_t samples[BF_PP_RUNS];
	uint64_t verify_errors;
	/* each run measures both a blocking and a busy-polling ping-pong (both
	 * ends); p50_ns.. of a run are those of the faster (lower p50) of the two */
	uint64_t p50_block_ns[BF_PP_RUNS], p50_spin_ns[BF_PP_RUNS];
	bool spin_won[BF_PP_RUNS];
	uint64_t floor_p50_ns; /* min over runs: the floor used for ratios */
	char note[160];
};

/* idle CPU of processes blocked in dxl_ctx_wait */
struct bf_idle {
	bool measured;
	char note[160];
	double window_s;
	double peer_pct;       /* idle probe process: fabric + ctx in dxl_ctx_wait */
	double peer_pct_ticks; /* same, from /proc/<pid>/stat utime+stime */
	double server_pct;     /* the benchmark server between cells (fork mode) */
	double client_pct;     /* this process, main thread in dxl_ctx_wait */
	int peer_threads;
};

/*
 * The 64 B READ goal, measured robustly on a noisy host: `rounds` times in
 * a row a TCP ping-pong of 64 B, then a 64 B READ cell (batch 1, 1
 * outstanding, 1 thread); the goal's value is the median of the per-round
 * p50 ratios, so a burst of foreign load hits both sides of one ratio.
 */
#define BF_PAIRED_MAX 9
struct bf_paired {
	int rounds;
	uint32_t size;
	uint64_t pp_p50_ns[BF_PAIRED_MAX], read_p50_ns[BF_PAIRED_MAX];
	double ratio[BF_PAIRED_MAX];
	double median;
	char note[160];
};

/* What the server tells the client in its HELLO reply. */
struct bf_hello {
	char provider[16];
	char fabric_addr[DXL_FABRIC_ADDR_MAX];
	uint32_t nctx;
	uint32_t depth; /* SENDs/RPCs a server ctx can have in flight */
	uint32_t max_size;
	uint32_t max_inline;
	uint64_t seed;
	struct dxl_mr_desc read, write, atomic;
	bool rpc;         /* the server serves RPC ctxs */
	uint32_t rpc_msg; /* their max_msg (every node must use the same) */
};

/* ---- shared helpers (util.c) --------------------------------------------- */

const char *bf_op_name(enum bf_op op);
int bf_op_parse(const char *s, enum bf_op *out);
/* bf_pattern_fill -- the READ region's content at [off, off+len) for seed */
void bf_pattern_fill(uint64_t seed, uint64_t off, void *buf, size_t len);
uint64_t bf_rand(uint64_t *state);
/* blocking socket helpers: 0 or -1 (errno set); read_line NUL-terminates */
int bf_write_full(int fd, const void *buf, size_t len);
int bf_read_full(int fd, void *buf, size_t len);
/* bf_read_full_spin -- the same, busy-polling: recv(MSG_DONTWAIT) in a loop
 * (sched_yield() between empty polls), never sleeping in the kernel */
int bf_read_full_spin(int fd, void *buf, size_t len);
int bf_read_line(int fd, char *buf, size_t cap);
/* bf_tcp_connect -- connect to host:port with TCP_NODELAY; fd or -1 with msg */
int bf_tcp_connect(const char *hostport, int timeout_ms, char *err, size_t errcap);
/* bf_tcp_listen -- bind+listen on host:port; fd or -1; *port = actual port */
int bf_tcp_listen(const char *hostport, uint16_t *port, char *err, size_t errcap);
void bf_set_nodelay(int fd);
/* CPU time (ns) of every thread of pid (0 = self) from schedstat; 0 if absent */
uint64_t bf_proc_cpu_ns(pid_t pid);
/* utime+stime of pid in ns from /proc/<pid>/stat (clock-tick resolution) */
uint64_t bf_proc_ticks_ns(pid_t pid);
int bf_proc_threads(pid_t pid);
/* CPU time all CPUs of the host spent busy (/proc/stat, tick resolution) */
uint64_t bf_host_busy_ns(void);
uint32_t bf_next_pow2(uint32_t v);

/* ---- server.c ----------------------------------------------------------- */

/* bf_server_main -- run the benchmark server (--server); returns exit status */
int bf_server_main(const struct bf_opts *o);
/* bf_idle_peer_main -- the idle-CPU probe process; returns exit status */
int bf_idle_peer_main(const struct bf_opts *o);
/* bf_hello_parse -- parse the server's "OK ..." HELLO reply */
int bf_hello_parse(const char *line, struct bf_hello *h);

/* ---- client.c ----------------------------------------------------------- */

/* bf_client_main -- fork mode and --client; returns exit status */
int bf_client_main(struct bf_opts *o);

/* ---- rpcbench.c ----------------------------------------------------------- */

struct bf_rpc_srv;
struct bf_rpc_cli;

struct bf_rpc_cell {
	uint32_t size, batch, outstanding;
	uint64_t t_measure, t_end;   /* time mode window */
	uint64_t iters, warmup_iters; /* iteration mode (iters != 0) */
	uint32_t verify_every;
};

struct bf_rpc_result {
	struct dxl_hist *hist; /* the worker's, reset by the caller */
	uint64_t ops, samples, vchecked, verrs;
	int errors;
	char note[160];
	uint64_t t_first, t_last; /* iteration mode window */
};

/* bf_rpc_msg_size -- the RPC max_msg used for payloads up to max_size */
uint32_t bf_rpc_msg_size(uint32_t max_size);
/* server: n threads serving echo RPCs on ctxs BF_RPC_CTX_BASE + 0..n-1 */
int bf_rpc_server_start(struct dxl_fabric *f, uint32_t n, uint32_t depth,
			uint32_t msg, struct bf_rpc_srv **out, char *err,
			size_t cap);
void bf_rpc_server_stop(struct bf_rpc_srv **s);
/* client: called by worker thread idx, which owns the result */
int bf_rpc_cli_new(struct dxl_fabric *f, uint32_t idx, const char *srv_addr,
		   uint32_t srv_ctx, uint32_t msg, uint32_t max_o, uint32_t max_b,
		   uint32_t max_size, struct bf_rpc_cli **out, char *err,
		   size_t cap);
void bf_rpc_cli_delete(struct bf_rpc_cli **c);
int bf_rpc_cli_run(struct bf_rpc_cli *c, const struct bf_rpc_cell *cell,
		   struct bf_rpc_result *res);

/* ---- pingpong.c --------------------------------------------------------- */

/* bf_pingpong -- run one blocking TCP ping-pong of `size` against the
 * server's echo service; fills run `run` of pp */
int bf_pingpong(const struct bf_opts *o, const char *ctl_addr, uint32_t size,
		struct bf_pp *pp, int run);

/* ---- report.c ----------------------------------------------------------- */

struct bf_report {
	const struct bf_opts *o;
	const struct bf_hello *hello;
	const char *mode;
	struct bf_result *res;
	int nres;
	struct bf_pp *pp;
	int npp;
	struct bf_idle idle;
	struct bf_paired paired;
	double loadavg_start[3], loadavg_end[3];
	double other_cpus_mean; /* mean of the cells' other_cpus; -1 unknown */
	double wall_s;
	char started[64];
	char git[96];
	char server_addr[DXL_FABRIC_ADDR_MAX];
};

void bf_table_header(void);
void bf_table_row(const struct bf_result *r);
/* bf_report_finish -- ratios, goal verdicts, summary on stdout, JSON, CSV */
int bf_report_finish(struct bf_report *rep);

#endif /* DXL_BENCH_FABRIC_H */
