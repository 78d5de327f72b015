/* verbs_internal.h -- what the files of the verbs provider (and its mock tests) share */
#ifndef DXL_FABRIC_VERBS_INTERNAL_H
#define DXL_FABRIC_VERBS_INTERNAL_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "fabric/fabric_internal.h"

/*
 * The verbs provider (docs/fabric-verbs.md):
 *
 *   verbs.c      the ops table; open/close: device, port and GID, the one PD,
 *                the rdma_cm listener; memory regions; timeout arithmetic
 *   verbs_ctx.c  per-thread context: thread domain, CQ + completion channel,
 *                SRQ, the qp_num -> QP table, poll, wait, post_recv
 *   verbs_qp.c   RC QPs: creation and state transitions, post (one
 *                ibv_post_send per chain, selective signalling), delete
 *   verbs_cm.c   connection management: the CM thread (passive side),
 *                dxl_qp_connect (active side), the private-data "hello"
 *
 * Threads. A ctx, its CQ/SRQ and its QPs belong to the ctx's owner thread.
 * The CM thread creates passive QPs in a ctx's CQ/SRQ/PD and hands them over
 * through ctx->pending; it also reacts to disconnections. What the two share
 * is marked "shared" below; everything else is owner-only.
 */

/* ---- private data of CONNECT / ACCEPT / REJECT ("hello") ----------------- */

#define DXL_VRB_MAGIC 0x564c5844u /* "DXLV" little-endian */
#define DXL_VRB_VERSION 1
#define DXL_VRB_HELLO_SIZE 20 /* fits the 56 bytes of an IB CM REQ */

enum dxl_vrb_reject {
	DXL_VRB_REJ_NONE = 0,
	DXL_VRB_REJ_NOCTX = 1,   /* no ctx with that index   -> DXL_E_NOENT */
	DXL_VRB_REJ_VERSION = 2, /* unsupported version      -> DXL_E_VERSION */
	DXL_VRB_REJ_NORES = 3,   /* QP creation failed       -> DXL_E_NOMEM */
	DXL_VRB_REJ_DEVICE = 4,  /* came in on another device -> DXL_E_UNREACHABLE */
	DXL_VRB_REJ_PROTO = 5,   /* malformed private data   -> DXL_E_UNREACHABLE */
};

/* One layout for the three messages: CONNECT {node, ctx_dst, ctx_src},
 * ACCEPT {node}, REJECT {reason, node}. Little-endian on the wire. */
struct dxl_vrb_hello {
	uint32_t magic;
	uint16_t version;
	uint16_t reason;  /* enum dxl_vrb_reject */
	uint32_t node;    /* sender's node id */
	uint32_t ctx_dst; /* CONNECT: the ctx index wanted at the passive side */
	uint32_t ctx_src; /* CONNECT: the active side's ctx index */
};

void dxl_vrb_hello_encode(const struct dxl_vrb_hello *h,
			  uint8_t out[DXL_VRB_HELLO_SIZE]);
/* dxl_vrb_hello_decode -- DXL_E_PROTO if buf is short or the magic is wrong
 * (the version is the caller's to check) */
int dxl_vrb_hello_decode(const void *buf, size_t len, struct dxl_vrb_hello *h);
/* dxl_vrb_reject_err -- the dxl_qp_connect error code for a reject reason */
int dxl_vrb_reject_err(enum dxl_vrb_reject r);

/* ---- timeouts ------------------------------------------------------------ */

/*
 * A dead peer is detected by the requester's transport timer: each packet is
 * retransmitted after 4.096 us * 2^ack_timeout, retry_cnt times, then the
 * request completes IBV_WC_RETRY_EXC_ERR. A receiver without buffers answers
 * RNR NAK; the sender waits rnr_timer (IB table) and retries rnr_retry times
 * (7 = forever, so we use at most 6), then IBV_WC_RNR_RETRY_EXC_ERR.
 * dxl_vrb_timeouts picks the values so that both totals fit timeout_ms.
 */
struct dxl_vrb_timeouts {
	uint8_t ack_timeout; /* 5-bit exponent, 1..31 (0 would be infinite) */
	uint8_t retry_cnt;   /* 0..7 */
	uint8_t rnr_timer;   /* 5-bit IB encoding of the minimal RNR NAK delay */
	uint8_t rnr_retry;   /* 0..6 */
};

void dxl_vrb_timeouts(uint32_t timeout_ms, struct dxl_vrb_timeouts *out);
/* worst case nominal detection time in microseconds */
uint64_t dxl_vrb_ack_total_us(const struct dxl_vrb_timeouts *t);
uint64_t dxl_vrb_rnr_total_us(const struct dxl_vrb_timeouts *t);
/* the RNR delay of an encoded rnr_timer value, in units of 10 us */
uint32_t dxl_vrb_rnr_timer_10us(uint8_t code);

/* ---- translations -------------------------------------------------------- */

/* DXL_MR_* -> IBV_ACCESS_* (DXL_MR_PERSISTENT has no verbs counterpart) */
int dxl_vrb_mr_access(unsigned dxl_access);
/* status of a failed completion; op is what the request was */
enum dxl_wc_status dxl_vrb_wc_status(enum ibv_wc_status s, enum dxl_wc_opcode op);

/* ---- objects ------------------------------------------------------------- */

enum dxl_vrb_td_state {
	DXL_VRB_TD_UNKNOWN = 0,
	DXL_VRB_TD_YES = 1, /* ibv_alloc_td + ibv_alloc_parent_domain work */
	DXL_VRB_TD_NO = 2,  /* the device has no thread domains (rxe) */
};

struct dxl_vrb_fabric {
	struct dxl_fabric *f;
	char dev_name[IBV_SYSFS_NAME_MAX];
	struct ibv_context *verbs;  /* rdma_cm's context of the device */
	struct ibv_context **devs;  /* rdma_get_devices() array, freed at close */
	struct ibv_pd *pd;          /* THE protection domain: one rkey per MR */
	struct ibv_device_attr dev;
	uint8_t port;
	uint8_t link_layer;         /* IBV_LINK_LAYER_* */
	bool atomics;               /* dev.atomic_cap != IBV_ATOMIC_NONE */
	uint8_t resp_res;           /* incoming READ/atomic we can serve per QP */
	uint8_t init_depth;         /* outstanding READ/atomic we issue per QP */
	struct dxl_vrb_timeouts to;
	struct sockaddr_storage src; /* listen IP with port 0: source of connects */
	bool have_src;

	struct rdma_event_channel *ec; /* listener + every established id */
	struct rdma_cm_id *listen_id;
	int stop_fd;                   /* eventfd that stops the CM thread */
	pthread_t cm_thread;
	bool cm_started;
	/*
	 * cm_lock is held by the CM thread while it handles one event and by an
	 * owner thread while it detaches a QP from its cm_id (id->context = NULL)
	 * or waits out a CM-thread creation in ctx_delete. It makes
	 * cm_id->context of connection ids, and the life of the QP it points
	 * to, consistent between the two. Lock order: cm_lock, then f->lock.
	 */
	pthread_mutex_t cm_lock;
	atomic_int td_state; /* enum dxl_vrb_td_state; any ctx_new may set it */
	/* Last WQE Reached events the CM thread saw; a destroy that waited
	 * in vain sets no_last_wqe (the device does not send them: later
	 * destroys wait only DXL_VRB_LAST_WQE_GRACE_MS) */
	atomic_uint last_wqe_events;
	atomic_bool no_last_wqe;
};

/* dxl_vrb_qp_destroy's wait for the Last WQE Reached event: the fabric's
 * timeout but at most DXL_VRB_LAST_WQE_WAIT_MS (a device sends it within
 * microseconds of the move to ERR), or DXL_VRB_LAST_WQE_GRACE_MS once the
 * device (by name, process-wide) was found not to send it */
#define DXL_VRB_LAST_WQE_WAIT_MS 500
#define DXL_VRB_LAST_WQE_GRACE_MS 10

#define DXL_VRB_STASH 16      /* completions dxl_ctx_wait may reap ahead */
#define DXL_VRB_POLL_BATCH 32 /* ibv_wc per ibv_poll_cq call */

/* slot flags */
#define DXL_VRB_SLOT_USER_SIG 1u /* the user asked for a completion */
#define DXL_VRB_SLOT_INTERNAL 2u /* our zero-length flush WRITE */

/* What a send-queue slot remembers of its request (owner only). */
struct dxl_vrb_slot {
	uint64_t wr_id; /* the user's */
	uint32_t len;
	uint8_t op;     /* enum dxl_wr_opcode */
	uint8_t flags;  /* DXL_VRB_SLOT_* */
};

/*
 * wr_id of an ibv_send_wr: serial << 32 | seq. The serial (31 bits, per ctx)
 * tells completions of this QP from those of a deleted QP whose qp_num was
 * reused; seq is the request's position in the QP's send sequence. Receive
 * wr_ids have bit 63 set and carry the SRQ slot.
 */
#define DXL_VRB_RECV_TAG (1ull << 63)

struct dxl_vrb_ctx;

struct dxl_vrb_qp {
	struct dxl_qp base; /* first: fabric.c sees this */
	struct dxl_vrb_ctx *vc;
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	uint32_t qpn;

	/* owner only */
	uint32_t serial;
	uint32_t posted;    /* requests posted (seq of the next one) */
	uint32_t done;      /* requests known complete (seq after the last) */
	uint32_t run;       /* unsignalled requests since the last signalled one */
	uint32_t ring_mask;
	struct dxl_vrb_slot *ring; /* slot of seq = ring[seq & ring_mask] */
	enum dxl_wc_status cause;  /* status for the next flushed user request
				      (after an internal failure), or SUCCESS */
	bool seen;          /* reported in a completion (passive) or connected */
	bool adopted;       /* in the ctx's table */
	bool dying;         /* destroyed: its last completions are being
			       drained from the CQ (dxl_vrb_qp_destroy) */
	bool rtr;           /* reached RTR: it may have taken receive WQEs
			       from the SRQ */

	/* shared with the CM thread */
	atomic_int gone;    /* the peer disconnected or the accept failed */
	atomic_int last_wqe; /* IBV_EVENT_QP_LAST_WQE_REACHED seen */
	struct dxl_vrb_qp *pending_next; /* link in ctx->pending */
};

struct dxl_vrb_ctx {
	struct dxl_ctx base; /* first: fabric.c sees this */
	struct dxl_vrb_fabric *vf;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	struct ibv_td *td;     /* NULL when the device has no thread domains */
	struct ibv_pd *pdom;   /* parent domain {vf->pd, td}, or NULL */
	struct ibv_pd *qp_pd;  /* pdom or vf->pd: where this ctx's QPs live */

	/* owner only */
	struct dxl_vrb_qp **tbl; /* open addressing on qp_num, linear probing */
	uint32_t tbl_cap;        /* power of two */
	uint32_t nqp;
	uint32_t next_serial;
	int cqe;                 /* capacity of cq now */
	bool cq_warned;
	bool reap_pending;       /* unseen passive QPs whose peer left */
	bool draining;           /* in dxl_vrb_ctx_drain_cq (cm_lock held) */
	struct dxl_vrb_qp *orphans; /* adoption failed while draining: destroy
				       them at the next reap */
	bool armed;              /* ibv_req_notify_cq done, event not taken */
	unsigned unacked;        /* CQ events not yet acknowledged */
	unsigned gone_seen;      /* value of `gone` last handled */
	struct ibv_send_wr *wrs; /* scratch for one chain (sq_depth entries) */
	struct ibv_sge *sges;
	struct ibv_wc raw[DXL_VRB_POLL_BATCH];
	/* completions reaped ahead (by wait, or drained from the CQ when a QP
	 * is destroyed), given out by poll first; grows as needed */
	struct dxl_wc *stash;
	int stash_head, stash_n, stash_cap;
	uint64_t *rx_wr_id;      /* SRQ slot -> user wr_id */
	uint32_t *rx_free;       /* stack of free SRQ slots */
	uint32_t rx_nfree;

	/* shared with the CM thread */
	_Atomic(struct dxl_vrb_qp *) pending; /* passive QPs to adopt (a stack) */
	atomic_uint gone;                       /* bumped when a QP's peer left */
};

/* ---- functions shared between the files (prefix dxl_vrb_) ----------------- */

/* verbs_ctx.c */
int dxl_vrb_ctx_new(struct dxl_fabric *f, uint32_t idx, struct dxl_ctx **out);
void dxl_vrb_ctx_delete(struct dxl_ctx *c);
int dxl_vrb_post_recv(struct dxl_ctx *c, void *buf, uint32_t len, uint32_t lkey,
		      uint64_t wr_id);
int dxl_vrb_poll(struct dxl_ctx *c, struct dxl_wc *wc, int n);
int dxl_vrb_wait(struct dxl_ctx *c, int timeout_ms);
/* owner: put qp into the ctx's table (and grow the CQ if needed) */
int dxl_vrb_ctx_adopt(struct dxl_vrb_ctx *c, struct dxl_vrb_qp *qp);
/* owner: take qp out of the table and drop its stashed completions */
void dxl_vrb_ctx_forget(struct dxl_vrb_ctx *c, struct dxl_vrb_qp *qp);
/*
 * owner: qp's hardware QP is destroyed (no completion of it can appear any
 * more): move every completion the CQ holds into the stash, those of qp
 * translated as a dead QP's (a receive gives its buffer back FLUSHED with
 * no QP, the rest are dropped). Afterwards no completion of qp is left in
 * the CQ, so one can never be credited to a new QP that reuses its number.
 * The caller holds cm_lock (no passive QP is created meanwhile).
 */
void dxl_vrb_ctx_drain_cq(struct dxl_vrb_ctx *c, struct dxl_vrb_qp *qp);
/* owner: QPs of the ctx (adopting pending passive ones first) */
uint32_t dxl_vrb_qp_count(struct dxl_ctx *c);
/* CM thread (under cm_lock): hand a new passive QP to the owner */
void dxl_vrb_ctx_push_pending(struct dxl_vrb_ctx *c, struct dxl_vrb_qp *qp);

/* verbs_qp.c */
/* create an RC QP on c's CQ/SRQ/PD for cm id `id` and move it to INIT */
int dxl_vrb_qp_new(struct dxl_vrb_ctx *c, struct rdma_cm_id *id, bool passive,
		   struct dxl_vrb_qp **out);
/* INIT -> RTR -> RTS with the negotiated READ/atomic depths */
int dxl_vrb_qp_rtr_rts(struct dxl_vrb_qp *qp, uint8_t resp_res,
		       uint8_t init_depth);
/* destroy QP, cm id and memory; the caller has detached it (or never
 * attached it) from the CM thread and from the ctx's table */
void dxl_vrb_qp_free(struct dxl_vrb_qp *qp);
/* owner: detach from the CM thread and the table, disconnect, free */
void dxl_vrb_qp_destroy(struct dxl_vrb_qp *qp);
void dxl_vrb_qp_delete(struct dxl_qp *qp);
int dxl_vrb_qp_post(struct dxl_qp *qp, struct dxl_wr *chain, struct dxl_wr **bad);

/* verbs_cm.c */
int dxl_vrb_cm_start(struct dxl_vrb_fabric *vf);
void dxl_vrb_cm_stop(struct dxl_vrb_fabric *vf);
/*
 * dxl_vrb_cm_handle -- the CM thread's handling of one event (the caller
 * acks it). Returns 1 when the caller must rdma_destroy_id(ev->id) after the
 * ack (a rejected connection request), else 0. Exposed for the mock tests.
 */
int dxl_vrb_cm_handle(struct dxl_vrb_fabric *vf, struct rdma_cm_event *ev);
/* dxl_vrb_async_handle -- the CM thread's handling of one device event */
void dxl_vrb_async_handle(struct dxl_vrb_fabric *vf, struct ibv_async_event *e);
int dxl_vrb_qp_connect(struct dxl_ctx *c, const char *host, uint16_t port,
		       uint32_t remote_ctx, struct dxl_qp **out);
/* "host:port" or "[v6]:port" -> sockaddr (AI_PASSIVE when passive) */
int dxl_vrb_sockaddr(const char *host, uint16_t port, bool passive,
		     struct sockaddr_storage *out);

#endif /* DXL_FABRIC_VERBS_INTERNAL_H */
