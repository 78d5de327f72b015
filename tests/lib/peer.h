/* peer.h -- a remote fabric node in a child process, driven over a socket */
#ifndef DXLT_PEER_H
#define DXLT_PEER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dxl/fabric.h"

/*
 * A "peer" is a separate process that opens its own fabric and plays the
 * remote node of a test: it registers regions, creates ctxs (plain targets of
 * one-sided requests, or echo servers for SEND/RECV), reads and writes its
 * own region bytes for checks, runs named jobs of the test program (e.g. a
 * second client), simulates a power failure, or is killed/stopped by the
 * test. Everything a test needs to reach a process boundary.
 *
 * How it works
 *  - dxlt_peer_start() forks and the child immediately re-executes the test
 *    binary (/proc/self/exe) with DXLT_PEER_FD in its environment, so the peer
 *    starts single-threaded and clean even when the test process already
 *    runs fabric threads (fork of a threaded process is unsafe, TSan refuses
 *    it, and verbs resources must not be shared across fork).
 *  - Therefore EVERY test program linking tests/lib that starts peers must
 *    call dxlt_peer_child_hook(jobs) first thing in main(): in a peer it runs
 *    the peer and never returns; in the test process it returns at once.
 *  - Commands and replies travel over a socketpair as framed binary
 *    messages. Each parent call sends one command and waits (bounded by
 *    DXL_TEST_WAIT_MS or the peer's reply timeout) for its reply; a peer
 *    that died or hangs gives DXL_E_UNREACHABLE / DXL_E_TIMEDOUT, never a
 *    hang. Region descriptors come back encoded with dxl_mr_desc_encode.
 *  - The peer exits when the socket closes (the test died), when its parent
 *    dies (PR_SET_PDEATHSIG=SIGKILL; fork from the thread that will live
 *    longest, normally the main thread), and at the latest after
 *    DXL_TEST_PEER_ALARM_S seconds (default 300) by alarm().
 *  - Every live peer is in a registry; dxlt_peer_kill_all() (called by the
 *    watchdog of fabric_fixture.h) SIGKILLs them all.
 *  - dxlt_peer_stop() quits a peer in order (so sanitizers see its exit),
 *    falls back to SIGKILL, and always reaps it.
 *
 * Inside the peer: one main thread serves the commands. Plain ctxs and jobs
 * run on it (so a job may create and use ctxs itself); every echo ctx has its
 * own thread. Regions are anonymous mappings, or MAP_SHARED mappings of a
 * file when a path is given (the bytes outlive the peer: power-failure and
 * restart tests read or re-map the file).
 */

struct dxlt_peer;

/* dxlt_peer_start -- start a peer that opens a fabric with *cfg (sent as is;
 * listen_addr usually "HOST:0"). Returns 0 or a negative DXL_E_* (the
 * peer's own dxl_fabric_new error code when that failed, with its message). */
int dxlt_peer_start(const struct dxl_fabric_cfg *cfg, struct dxlt_peer **out);

/* dxlt_peer_stop -- QUIT (bounded wait), else SIGKILL; reap; free; *p = NULL.
 * Returns the wait status of the peer (as waitpid), or -1 if unknown. */
int dxlt_peer_stop(struct dxlt_peer **p);

const char *dxlt_peer_addr(const struct dxlt_peer *p); /* its fabric address */
uint32_t dxlt_peer_node_id(const struct dxlt_peer *p); /* its cfg.node_id */
pid_t dxlt_peer_pid(const struct dxlt_peer *p);

/* dxlt_peer_set_timeout -- bound of each reply wait in ms (default
 * 3 * DXL_TEST_WAIT_MS); jobs that run long need more */
void dxlt_peer_set_timeout(struct dxlt_peer *p, int timeout_ms);

/* ---- regions ------------------------------------------------------------ */

enum dxlt_fill {
	DXLT_FILL_ZERO = 0,    /* zeroes (a new file is zero anyway) */
	DXLT_FILL_PATTERN = 1, /* dxlt_pattern_fill(seed, 0), before dxl_mr_reg */
	DXLT_FILL_KEEP = 2,    /* file-backed: keep the file's bytes */
};

struct dxlt_region_opts {
	size_t len;         /* bytes (> 0) */
	unsigned access;    /* DXL_MR_* */
	enum dxlt_fill fill;
	uint64_t seed;      /* DXLT_FILL_PATTERN */
	const char *path;   /* NULL: anonymous; else a file created if needed,
			       resized to len, mapped MAP_SHARED */
};

/* dxlt_peer_mr_reg -- allocate and register a region in the peer. Returns its
 * region index (>= 0) and fills *desc (decoded from the wire); < 0 on error */
int dxlt_peer_mr_reg(struct dxlt_peer *p, const struct dxlt_region_opts *o,
		     struct dxl_mr_desc *desc);
/* dxlt_peer_mr_dereg -- dxl_mr_dereg; the memory stays mapped (bytes can
 * still be read back with dxlt_peer_mr_read) */
int dxlt_peer_mr_dereg(struct dxlt_peer *p, int region);
/* copy [off, off+len) of a region out of / into the peer (CPU access) */
int dxlt_peer_mr_read(struct dxlt_peer *p, int region, uint64_t off, void *buf,
		      size_t len);
int dxlt_peer_mr_write(struct dxlt_peer *p, int region, uint64_t off,
		       const void *buf, size_t len);
/* dxl_mr_mark_durable of [off, off+len) */
int dxlt_peer_mr_mark_durable(struct dxlt_peer *p, int region, uint64_t off,
			      size_t len);

/* ---- contexts ----------------------------------------------------------- */

/* dxlt_peer_ctx_new -- a plain ctx with index idx, owned by the peer's main
 * thread and never polled (a target of one-sided requests) */
int dxlt_peer_ctx_new(struct dxlt_peer *p, uint32_t idx);
/* dxlt_peer_ctx_delete -- delete a plain or echo ctx */
int dxlt_peer_ctx_delete(struct dxlt_peer *p, uint32_t idx);

/*
 * dxlt_peer_echo_new -- an echo ctx with index idx on its own thread: it
 * posts nbufs receive buffers of recv_len bytes (>= 64) and answers every
 * message by a signalled SEND of the same bytes on wc.qp (the passive QP),
 * re-posting the buffer when that SEND completes. A message that starts with
 * the 8 bytes DXLT_ECHO_PROBE_MAGIC is answered by a struct
 * dxlt_echo_probe_reply instead: the results of posting READ, WRITE, CAS and
 * FAA on the passive QP it came in on.
 */
int dxlt_peer_echo_new(struct dxlt_peer *p, uint32_t idx, uint32_t recv_len,
		       uint32_t nbufs);

#define DXLT_ECHO_PROBE_MAGIC 0x45424f5250545844ull /* "DXTPROBE" */

struct dxlt_echo_probe_reply {
	uint64_t magic;      /* DXLT_ECHO_PROBE_MAGIC */
	int32_t passive;     /* dxl_qp_is_passive(wc.qp) */
	int32_t rc_read;     /* dxl_qp_post of one READ on wc.qp */
	int32_t rc_write;
	int32_t rc_cas;
	int32_t rc_faa;
	int32_t state;       /* dxl_qp_state(wc.qp) after the attempts */
};

struct dxlt_echo_stats {
	uint64_t recv_ok;     /* successful RECV completions */
	uint64_t recv_err;    /* RECV completions with an error status */
	uint64_t send_ok;     /* successful reply SENDs */
	uint64_t send_err;    /* reply SENDs that failed (post or completion) */
	uint64_t probes;
	int32_t last_recv_err; /* status of the last failed RECV, or -1 */
	int32_t last_send_err; /* status (>= 0) or post error (< 0), or 0 */
	uint32_t last_byte_len; /* byte_len of the last successful RECV */
	int32_t last_passive;  /* dxl_qp_is_passive of the last RECV's qp */
};

int dxlt_peer_echo_stats(struct dxlt_peer *p, uint32_t idx,
			 struct dxlt_echo_stats *out);

/* ---- fault injection -------------------------------------------------- */

/* dxlt_peer_signal -- kill(pid, sig): SIGKILL, SIGSTOP, SIGCONT ... */
int dxlt_peer_signal(struct dxlt_peer *p, int sig);

/* dxlt_peer_wait_exit -- reap the peer within timeout_ms; *status as waitpid.
 * DXL_E_TIMEDOUT if still alive. After it the peer only answers with
 * DXL_E_UNREACHABLE and dxlt_peer_stop just frees it. */
int dxlt_peer_wait_exit(struct dxlt_peer *p, int timeout_ms, int *status);

/* dxlt_peer_pending_lines -- dxl_fabric_pending_lines of the peer */
int dxlt_peer_pending_lines(struct dxlt_peer *p, uint64_t *out);

/* dxlt_peer_power_fail -- the peer calls dxl_fabric_power_fail(policy, seed);
 * on success it dies by SIGKILL and is reaped here (returns 0). If the call
 * fails (e.g. DXL_E_NOTSUP on verbs) the peer answers with that error and
 * stays alive. */
int dxlt_peer_power_fail(struct dxlt_peer *p, enum dxl_pf_policy policy,
			 uint64_t seed);

/* ---- jobs: code of the test program run inside the peer ------------------ */

/* what a job can use in the peer */
struct dxlt_peer_self;
struct dxl_fabric *dxlt_self_fabric(struct dxlt_peer_self *s);
struct dxl_mr *dxlt_self_mr(struct dxlt_peer_self *s, int region);

/*
 * A job runs on the peer's main thread with the argument bytes the test
 * sent; it may set *out to a malloc'ed result of *out_len bytes (the harness
 * sends it back and frees it). Its return value is handed to the test.
 */
typedef int (*dxlt_job_fn)(struct dxlt_peer_self *self, const void *arg,
			   size_t arg_len, void **out, size_t *out_len);

struct dxlt_job {
	const char *name;
	dxlt_job_fn fn;
};

/* dxlt_peer_child_hook -- first line of main() of every program that starts
 * peers. jobs: table ending with {NULL, NULL}, or NULL. Returns only in the
 * test process. */
void dxlt_peer_child_hook(const struct dxlt_job *jobs);

/*
 * dxlt_peer_job_start -- run job `name` in the peer without waiting: the
 * peer answers when the job has STARTED (DXL_E_NOENT: no such job). Until
 * dxlt_peer_job_wait has collected its result, other commands to this peer
 * return DXL_E_BUSY (signals still work). dxlt_peer_job_wait: *job_rc = the
 * job's return value, *out (malloc'ed, caller frees; may be NULL) and
 * *out_len; DXL_E_TIMEDOUT after the peer's reply timeout.
 */
int dxlt_peer_job_start(struct dxlt_peer *p, const char *name, const void *arg,
			size_t arg_len);
int dxlt_peer_job_wait(struct dxlt_peer *p, int *job_rc, void **out,
		       size_t *out_len);

/* dxlt_peer_kill_all -- SIGKILL every live peer (async-signal-safe) */
void dxlt_peer_kill_all(void);

#endif /* DXLT_PEER_H */
