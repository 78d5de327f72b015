/* tcp_internal.h -- what the files of the tcp provider share */
#ifndef DXL_TCP_INTERNAL_H
#define DXL_TCP_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "fabric/fabric_internal.h"
#include "fabric/tcp_wire.h"

/*
 * Files: tcp.c (ops table, fabric open/close, buffers), tcp_nic.c (the NIC
 * thread: listener, handshakes, serving passive connections), tcp_qp.c
 * (ctx, QPs, post/poll/wait: the initiator side, run by the owner thread),
 * tcp_mr.c (the rkey table), tcp_pf.c (the power-failure journal).
 *
 * Threads and locks (take them in this order, never the reverse):
 *   tf->mr_lock -> tf->pf_lock
 *   f->lock -> conn->mu -> c->lock
 *   tf->mr_lock is never taken while holding conn->mu or c->lock.
 * The NIC thread owns the input side of passive connections. The owner
 * thread of a ctx owns its active connections entirely, its QPs' send
 * queues and its completion queue. Shared between them: a passive
 * connection's output buffer and fd (conn->mu), a ctx's shared receive
 * queue, inbox and hand-over list (c->lock).
 */

/*
 * The NIC thread's loads and stores on registered memory play the part of
 * a real NIC's DMA: they are ordered for the application by the fabric (a
 * completion, then a message to the target), across processes, where TSan
 * cannot follow. So TSan is told to ignore exactly those accesses, as it
 * never sees a real NIC's; races among application threads are still
 * reported. Keep the windows tight: only the copy or atomic itself.
 */
#if defined(__SANITIZE_THREAD__)
#define TCP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TCP_TSAN 1
#endif
#endif
#ifdef TCP_TSAN
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#define TCP_DMA_BEGIN() __tsan_ignore_thread_begin()
#define TCP_DMA_END() __tsan_ignore_thread_end()
#else
#define TCP_DMA_BEGIN() ((void)0)
#define TCP_DMA_END() ((void)0)
#endif

#define TCP_IN_CAP (64u << 10)  /* input buffer (grows for one whole SEND) */
#define TCP_OUT_HIGH (1u << 20) /* stop reading a conn whose output is over this */
#define TCP_SCAN_NS 1000000ull  /* owner: look for timed-out QPs every 1 ms */

/* A byte buffer: valid data is p[off .. off+len). */
struct tcp_buf {
	uint8_t *p;
	size_t cap;
	size_t off;
	size_t len;
};

/* tcp_buf_room -- make at least n free bytes after the data (compact, grow) */
int tcp_buf_room(struct tcp_buf *b, size_t n);
int tcp_buf_append(struct tcp_buf *b, const void *src, size_t n);
void tcp_buf_consume(struct tcp_buf *b, size_t n);
void tcp_buf_free(struct tcp_buf *b);
static inline uint8_t *tcp_buf_data(const struct tcp_buf *b)
{
	return b->p + b->off;
}
static inline uint8_t *tcp_buf_tail(const struct tcp_buf *b)
{
	return b->p + b->off + b->len;
}
static inline size_t tcp_buf_free_bytes(const struct tcp_buf *b)
{
	return b->cap - b->off - b->len;
}

struct tcp_ctx;
struct tcp_qp;

/* power-failure journal: line address -> pre-image and dirtying conns */
struct tcp_pf_line {
	uintptr_t line;    /* 64-byte aligned */
	struct dxl_mr *mr; /* its region (lines leave the journal at dereg) */
	uint8_t lo, hi;    /* saved bytes [lo, hi) of the line (inside the region) */
	uint16_t nq, capq; /* conns with unflushed writes to the line */
	uint64_t *qs;
	struct tcp_pf_line *next;
	uint8_t pre[64];
};

struct tcp_pf_journal {
	struct tcp_pf_line **b;
	size_t nb; /* buckets, power of two */
	size_t n;  /* lines */
};

/* an armed power failure: strikes after `steps` NIC steps or `idle_ms` */
struct tcp_pf_arm {
	enum dxl_pf_policy policy;
	uint64_t seed;
	uint32_t steps;
	uint32_t idle_ms;
};

/* per-conn list of lines it dirtied (NIC thread only) */
struct tcp_pf_dirty {
	uintptr_t *v;
	size_t n, cap;
};

enum tcp_conn_state {
	TCP_CONN_HS = 0,    /* passive: waiting for the handshake */
	TCP_CONN_OPEN = 1,  /* serving */
	TCP_CONN_DRAIN = 2, /* error answered: discard input, close when flushed */
	TCP_CONN_CLOSED = 3,
};

/*
 * One TCP connection (= one QP). An active connection belongs to its owner
 * thread alone. A passive one is shared by the NIC thread (input, closing)
 * and the owner of the ctx it was handed to (output of SEND replies,
 * shutdown); it lives until both have dropped their reference.
 */
struct tcp_conn {
	atomic_int ref;
	bool passive;
	uint64_t id; /* unique per fabric: names the QP in the pf journal */

	pthread_mutex_t mu;
	/* under mu */
	int fd;              /* -1 once closed */
	int epfd;            /* epoll the fd is registered in */
	uint32_t ep_mask;    /* events currently registered */
	bool want_in;        /* read it (not parked, output not over the bound) */
	struct tcp_buf out;  /* frames not yet written */
	struct tcp_ctx *ctx; /* passive: ctx it is handed to (NULL = detached) */
	struct tcp_qp *qp;   /* passive: its QP object in that ctx */

	_Atomic uint64_t last_rx_ns; /* when bytes were last received */

	/* active only (owner): "ip:port" of the target, the key of the
	 * abandoned-connection list (tcp_abandon_*); the target closed first
	 * (EOF or reset seen): nothing of ours is left to discard there */
	char key[DXL_FABRIC_ADDR_MAX];
	bool peer_eof;

	/* NIC thread only (passive) */
	enum tcp_conn_state state;
	struct tcp_buf in;
	uint32_t rx_seq;      /* seq expected of the next request */
	uint64_t deadline_ns; /* handshake or parked SEND; 0 = none */
	bool parked;          /* a SEND waits for a receive buffer */
	bool out_blocked;     /* output over TCP_OUT_HIGH */
	uint32_t peer_node;   /* node id from the handshake */
	uint64_t peer_nonce;  /* the initiator fabric's identity (handshake) */
	uint64_t peer_conn;   /* its id for this connection (handshake) */
	/* the initiator abandoned the connection (reset it: it completed its
	 * outstanding requests in error): what we have not executed of it is
	 * discarded, never executed (docs/fabric-tcp.md "Failures") */
	bool peer_reset;
	uint64_t alive_ns;    /* when the connection was last seen not reset */
	/* WRITE being received */
	bool w_active, w_ok;
	uint8_t w_flags;
	uint32_t w_seq, w_rkey, w_left;
	uint64_t w_addr;
	uint64_t w_line; /* armed power failure: last line of it counted */
	struct tcp_pf_dirty dirty;
	struct tcp_conn *next, *prev; /* in the NIC's list */
	struct tcp_conn *closed_next;
};

void tcp_conn_put(struct tcp_conn *conn);
/*
 * tcp_conn_flush_locked -- write conn->out with one send() and keep the
 * epoll registration in line (EPOLLOUT while output remains). Caller holds
 * conn->mu. Returns 0, or -1 when the socket has failed.
 */
int tcp_conn_flush_locked(struct tcp_conn *conn);
void tcp_conn_update_mask_locked(struct tcp_conn *conn);

/* the NIC thread reads passive conns; everything else of a QP is the owner's */
struct tcp_sq_ent {
	uint64_t wr_id;
	uint64_t post_ns;
	void *local;
	uint32_t len;
	uint32_t seq;
	uint8_t op;      /* enum dxl_wr_opcode */
	bool user_sig;   /* the application asked for a completion */
	bool expect;     /* the target answers it (READ/atomic/signalled) */
};

struct tcp_qp {
	struct dxl_qp base; /* first */
	struct tcp_conn *conn;
	struct tcp_qp *next, *prev; /* in the ctx's list (owner) */

	/* send queue (owner) */
	struct tcp_sq_ent *sq;
	uint32_t sq_cap, sq_head, sq_n;
	uint32_t tx_seq;
	uint32_t unsig_run; /* unanswered requests since the last answered one */
	uint8_t *hdrs;      /* scratch headers for a chain */
	size_t hdrs_cap;

	/* active: receive side (owner) */
	uint32_t rx_seq;
	bool rx_resp; /* receiving the payload of a RESP into rx_dst */
	uint8_t *rx_dst;
	uint32_t rx_left;
	uint8_t rx_atomic[8];
	bool parked;           /* a SEND waits for a receive buffer */
	uint64_t park_deadline;
	/* passive: a RECV completion named it (the user knows it); until
	 * then the provider frees it by itself once it is down */
	bool seen;
};

struct tcp_srq_ent {
	void *buf;
	uint32_t len;
	uint32_t lkey;
	uint64_t wr_id;
};

enum tcp_ev_type {
	TCP_EV_RECV = 1, /* a SEND landed: wc is ready */
	TCP_EV_RESP = 2, /* answer to a SEND of a passive QP */
	TCP_EV_DOWN = 3, /* passive connection lost */
};

struct tcp_ev {
	enum tcp_ev_type type;
	uint8_t status; /* TCP_ST_* for RESP */
	uint32_t seq;
	struct dxl_wc wc; /* RECV; wc.qp is the QP for every type */
};

struct tcp_ctx {
	struct dxl_ctx base; /* first */
	struct tcp_fab *tf;
	int ep;   /* active sockets + evfd */
	int evfd; /* the NIC thread wakes a sleeping owner */
	bool spin_yield; /* spin with sched_yield (<= 2 CPUs, see tcp_wait) */

	/* owner only */
	struct tcp_qp *qps; /* active and passive (after hand-over) */
	uint32_t n_sock; /* active QPs with an open socket */
	struct dxl_wc *cq;
	uint32_t cq_cap, cq_head, cq_n;
	uint64_t next_scan_ns;
	uint32_t n_parked; /* active QPs parked on an empty SRQ */
	uint32_t n_qps;    /* in qps (active and passive) */
	bool reap;         /* an unseen passive QP went down: free it */
	bool retry_parked; /* an active QP is parked and a buffer came */
	struct tcp_ev *evs_tmp;
	size_t evs_tmp_cap;

	pthread_mutex_t lock;
	/* under lock */
	struct tcp_srq_ent *srq;
	uint32_t srq_cap, srq_head, srq_n;
	struct tcp_ev *inbox;
	size_t inbox_n, inbox_cap;
	struct tcp_qp *handover; /* passive QPs from the NIC, linked by next */

	atomic_uint pending; /* inbox entries + hand-overs (hint, seq_cst) */
	atomic_int sleeping; /* owner blocked in epoll_wait */
};

/* the provider's fabric state (f->prov) */
struct tcp_fab {
	struct dxl_fabric *f;
	int lfd;     /* listener */
	int ep;      /* the NIC's epoll */
	int kick_fd; /* eventfd: stop, receive buffer posted */
	int pf_fd;   /* eventfd: power-failure signal */
	pthread_t nic;
	bool nic_started;
	atomic_bool stop;
	bool sig_installed;
	struct sigaction old_sa;
	atomic_int nparked; /* passive conns parked on an empty SRQ */

	/* rkey table (tcp_mr.c) */
	pthread_mutex_t mr_lock;
	struct tcp_mr_ent **mr_b;
	size_t mr_nb, mr_n;
	uint32_t key_ctr, key_salt;

	/* power-failure journal (tcp_pf.c) */
	pthread_mutex_t pf_lock;
	struct tcp_pf_journal jr;
	/* group commit: ranges flush READs made durable whose persist
	 * functions run once, just before the staged answers leave (NIC
	 * thread only) */
	struct tcp_persist_pend *pend;
	size_t npend, cappend;
	atomic_bool pf_dead; /* power failed: execute nothing more */
	/* a power failure that strikes after some steps (tcp_pf.c): a
	 * request from another thread (under pf_lock, then pf_fd), taken by
	 * the NIC thread, which alone counts the steps */
	bool pf_req;                 /* under pf_lock */
	struct tcp_pf_arm pf_req_arm; /* under pf_lock */
	atomic_bool pf_armed_ack;    /* the NIC took the request */
	bool pf_armed;               /* NIC thread only, from here on */
	struct tcp_pf_arm pf_arm;
	uint64_t pf_deadline_ns;
	uint64_t pf_rng;             /* lines placed at a strike inside a WRITE */

	/* this fabric's identity in handshakes (random, != 0) */
	uint64_t nonce;
	/* connections we closed, by target address, until a handshake has
	 * told that target to discard them (tcp.c, under ab_lock) */
	pthread_mutex_t ab_lock;
	struct tcp_abandon *ab;
	size_t nab, capab;

	/* NIC thread only */
	struct tcp_conn *conns;
	struct tcp_conn *closed;
	atomic_uint_fast64_t next_conn_id; /* active conns take ids too */
	struct tcp_buf stage;  /* answers being built for one conn */
	uint32_t n_timed;      /* conns with a deadline */
	uint64_t accept_resume_ns; /* listener paused (out of fds) until then */
};

/* ---- tcp.c ---- */
struct tcp_conn *tcp_conn_new(struct tcp_fab *tf, int fd, bool passive);
int tcp_set_sockopts(int fd);

/*
 * The abandoned-connection lists (any owner thread; they take ab_lock).
 * tcp_abandon_note -- we closed active connection `id` to the target `key`
 * ("ip:port") while the target may still hold requests of it. A list keeps
 * every id until a handshake has carried it (none is ever forgotten: one
 * that is not sent could still run at the target after a reconnection).
 * tcp_abandon_take -- copy up to TCP_HS_MAX_KILL ids noted for key, the
 * oldest first (for a handshake); returns how many.
 * tcp_abandon_count -- how many are noted for key.
 * tcp_abandon_done -- the target has discarded those: forget them.
 *
 * The key is the target's address as the kernel reports it (getpeername),
 * not the target's identity: a node reached at two addresses has two lists,
 * and a connection made through one address does not fence those abandoned
 * through the other (docs/fabric-tcp.md "Failures"; dxl reaches each node
 * at the one address it registered).
 */
struct tcp_abandon {
	char key[DXL_FABRIC_ADDR_MAX];
	uint32_t n, cap;
	uint64_t *ids;
};
void tcp_abandon_note(struct tcp_fab *tf, const char *key, uint64_t id);
uint32_t tcp_abandon_take(struct tcp_fab *tf, const char *key, uint64_t *ids);
uint32_t tcp_abandon_count(struct tcp_fab *tf, const char *key);
void tcp_abandon_done(struct tcp_fab *tf, const char *key, const uint64_t *ids,
		      uint32_t n);

/* ---- tcp_nic.c ---- */
void *tcp_nic_main(void *arg);
void tcp_nic_kick(struct tcp_fab *tf);
/*
 * tcp_dma_read -- copy [src, src+len) the way a NIC's DMA sees memory: each
 * 64-byte line as it was at one moment (copied, compared with memory,
 * copied again on a difference). A line still changing after max_tries
 * copies makes it return false: the READ fails rather than return bytes
 * that were never in memory together. Exposed for the unit test.
 */
bool tcp_dma_read(uint8_t *dst, const uint8_t *src, size_t len,
		  unsigned max_tries);
#define TCP_DMA_TRIES 4096 /* NIC READs: about 0.1 ms of a line rewritten non-stop */

/* ---- tcp_qp.c ---- */
int tcp_ctx_new(struct dxl_fabric *f, uint32_t idx, struct dxl_ctx **out);
void tcp_ctx_delete(struct dxl_ctx *bc);
int tcp_qp_connect(struct dxl_ctx *bc, const char *host, uint16_t port,
		   uint32_t remote_ctx, struct dxl_qp **out);
void tcp_qp_delete(struct dxl_qp *bqp);
int tcp_qp_post(struct dxl_qp *bqp, struct dxl_wr *chain, struct dxl_wr **bad);
int tcp_post_recv(struct dxl_ctx *bc, void *buf, uint32_t len, uint32_t lkey,
		  uint64_t wr_id);
int tcp_poll(struct dxl_ctx *bc, struct dxl_wc *wc, int n);
int tcp_wait(struct dxl_ctx *bc, int timeout_ms);
uint32_t tcp_qp_count(struct dxl_ctx *bc);
/* tcp_qp_new_passive -- the NIC's QP object for an accepted connection */
struct tcp_qp *tcp_qp_new_passive(struct tcp_ctx *c, struct tcp_conn *conn,
				  uint32_t remote_node, uint32_t remote_ctx);
/*
 * tcp_ctx_push_ev_locked -- queue an event for the owner; then call
 * tcp_ctx_wake (after unlocking) to wake it if it sleeps.
 * Caller holds c->lock.
 */
int tcp_ctx_push_ev_locked(struct tcp_ctx *c, const struct tcp_ev *ev);
void tcp_ctx_wake(struct tcp_ctx *c);
/*
 * tcp_srq_pop_locked -- take the oldest receive buffer; false if none.
 * Caller holds c->lock.
 */
bool tcp_srq_pop_locked(struct tcp_ctx *c, struct tcp_srq_ent *out);

/* ---- tcp_mr.c ---- */
struct tcp_mr_ent {
	uint32_t key;
	struct dxl_mr *mr;
	struct tcp_mr_ent *next;
};
int tcp_mr_init(struct tcp_fab *tf);
void tcp_mr_fini(struct tcp_fab *tf);
int tcp_mr_reg(struct dxl_mr *mr);
void tcp_mr_dereg(struct dxl_mr *mr);
/*
 * tcp_mr_find_locked -- the region of rkey if it holds [addr, addr+len) and
 * grants `need` (DXL_MR_* bits), else NULL. Caller holds tf->mr_lock and
 * keeps it while it touches the memory (dereg waits for it).
 */
struct dxl_mr *tcp_mr_find_locked(struct tcp_fab *tf, uint32_t rkey,
				  uint64_t addr, uint64_t len, unsigned need);

/* ---- tcp_pf.c ---- */
void tcp_pf_fini(struct tcp_fab *tf);
/*
 * tcp_pf_before_write_locked -- journal the lines of [addr, addr+len) of
 * persistent region mr that conn is about to change. Caller holds
 * tf->mr_lock and tf->pf_lock. Returns 0 or DXL_E_NOMEM.
 */
int tcp_pf_before_write_locked(struct tcp_fab *tf, struct tcp_conn *conn,
			       struct dxl_mr *mr, uint64_t addr, uint64_t len);
struct tcp_persist_pend {
	dxl_mr_persist_fn fn;
	void *arg;
	uintptr_t lo, hi;
};

/*
 * tcp_few_cpus -- true on 2 CPUs or fewer (this thread's affinity): then a
 * spinning thread steals the CPU the thread it waits for needs, so the NIC
 * thread does not spin and pollers spin with sched_yield (tcp_nic.c,
 * tcp_qp.c; docs/fabric-bench.md)
 */
bool tcp_few_cpus(void);

/* tcp_pf_persist_locked -- a flush READ on conn: note the ranges conn
 * wrote in regions with a persist function (coalesced), to run with
 * tcp_pf_run_persist before the READ's answer leaves (NIC thread; caller
 * holds tf->mr_lock and tf->pf_lock) */
void tcp_pf_persist_locked(struct tcp_fab *tf, struct tcp_conn *conn);
/* tcp_pf_run_persist -- run and forget the noted persist ranges, merging
 * overlapping ones: one msync for many appends (group commit). Caller
 * holds tf->mr_lock: a region being deregistered waits for it (or drains
 * its ranges itself, tcp_pf_drain_persist_locked) */
void tcp_pf_run_persist(struct tcp_fab *tf);
/*
 * tcp_pf_drain_persist_locked -- mr is being deregistered: run now, and
 * forget, the noted persist ranges that lie in it, so that no persist
 * function of the region runs after dxl_mr_dereg returns. Caller holds
 * tf->mr_lock (as does every user of the noted ranges).
 */
void tcp_pf_drain_persist_locked(struct tcp_fab *tf, const struct dxl_mr *mr);
/* tcp_pf_flush_locked -- a READ on conn executed: its writes are durable */
void tcp_pf_flush_locked(struct tcp_fab *tf, struct tcp_conn *conn);
void tcp_pf_drop_range(struct tcp_fab *tf, uintptr_t addr, size_t len);
void tcp_pf_mark_durable(struct dxl_mr *mr, const void *addr, size_t len);
/*
 * The armed power failure (NIC thread): tcp_pf_take_arm takes a pending
 * request or, for the pf_signal, arms with cfg's policy and seed (steps
 * below TCP_PF_WINDOW, from the seed; TCP_PF_IDLE_MS). tcp_pf_tick counts
 * one step and returns true when the failure strikes at it; the failure
 * also strikes once no step came for idle_ms. tcp_pf_strike
 * fails the power with what was placed until now (never returns);
 * pf_locked: the caller holds pf_lock. tcp_pf_coin draws the seeded coin
 * that decides whether a line of a struck WRITE was placed.
 */
#define TCP_PF_WINDOW DXL_PF_STRIKE_WINDOW
#define TCP_PF_IDLE_MS DXL_PF_IDLE_MS
void tcp_pf_take_arm(struct tcp_fab *tf);
static inline bool tcp_pf_tick(struct tcp_fab *tf)
{
	if (!tf->pf_armed)
		return false;
	if (!tf->pf_arm.steps)
		return true;
	tf->pf_arm.steps--;
	/* idle_ms counts from the last step: under slow traffic it still
	 * strikes in the traffic, at its step */
	tf->pf_deadline_ns = dxl_now_ns() + (uint64_t)tf->pf_arm.idle_ms * 1000000ull;
	return false;
}
bool tcp_pf_coin(struct tcp_fab *tf);
void tcp_pf_strike(struct tcp_fab *tf, const char *where, bool pf_locked,
		   uint32_t write_lines, uint32_t placed);
int tcp_pf_arm_request(struct dxl_fabric *f, enum dxl_pf_policy p,
		       uint64_t seed, uint32_t steps, uint32_t idle_ms);
int tcp_pf_power_fail(struct dxl_fabric *f, enum dxl_pf_policy p,
		      uint64_t seed);
size_t tcp_pf_pending_lines(struct dxl_fabric *f);
int tcp_pf_install_signal(struct tcp_fab *tf);
void tcp_pf_remove_signal(struct tcp_fab *tf);

#endif /* DXL_TCP_INTERNAL_H */
