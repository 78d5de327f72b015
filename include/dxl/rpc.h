/* rpc.h -- batched request/reply RPC over fabric SEND/RECV, served by the scheduler */
#ifndef DXL_RPC_H
#define DXL_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "dxl/co.h"
#include "dxl/err.h"
#include "dxl/fabric.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * R2's two-sided primitive (seed 000 L318-328) with its optimizations:
 * coroutines issue calls and yield until the replies arrive (CO), a
 * coroutine may have several calls in flight (OR), requests to the same QP
 * issued within one scheduling round travel in one SEND message and one
 * doorbell (DB), and a request may ask for no reply at all (passive ACK,
 * L351-355).
 *
 * Transport: SEND/RECV on the reliable connected QPs of the fabric, not UD
 * as in R2, because (1) the tcp provider has no UD; (2) RC delivers reliably
 * and in order, so the RPC layer needs no retransmission, duplicate
 * detection or reordering; (3) every ctx has ONE shared receive queue, so
 * the receive buffers cost O(threads), not O(peers), which was UD's main
 * advantage; (4) a batch travels on the QP of its destination anyway. UD
 * (connectionless, fewer QPs in the NIC cache) remains an option for very
 * large clusters; write-based mailboxes cost two one-sided WRITEs per call
 * and per-peer polling (L324).
 *
 * Symmetry: each worker both issues and serves (R2). The rpc object hangs on
 * the thread's scheduler; the scheduler's poller hands every RECV to it,
 * requests are dispatched to the registered handlers right there, and the
 * replies go back on the QP the request came in on (wc.qp: the passive QP at
 * a server, an active one if the peer sent on its passive QP).
 *
 * Wire format (little-endian; all nodes must use the same max_msg):
 *
 *   batch header, 16 bytes
 *     0  u32 magic       DXL_RPC_MAGIC
 *     4  u16 version     DXL_RPC_VERSION
 *     6  u16 count       entries that follow (>= 1)
 *     8  u32 total_len   bytes of the whole message, this header included
 *    12  u32 reserved    0
 *   then `count` entries, each 24 bytes + payload padded to 8 bytes
 *     0  u16 handler_id
 *     2  u16 flags       exactly one of REQUEST/REPLY/NOREPLY; ERROR only
 *                        with REPLY (the RPC layer, not the handler,
 *                        produced the status)
 *     4  i32 status      replies: the handler's return value or the error
 *     8  u64 req_id      the caller's coroutine id (24 bits) << 40 | a
 *                        sequence number
 *    16  u32 payload_len
 *    20  u32 reply_cap   requests: largest reply payload the caller takes
 *
 * A received message is validated completely before anything in it runs:
 * total_len == bytes received, total_len <= max_msg, count >= 1, every entry
 * inside the message, the lengths adding up to total_len, valid flags, zero
 * reserved bits. A message that fails is not executed; each request whose
 * header is intact gets an ERROR reply (DXL_E_TOOBIG if total_len is over
 * max_msg, else DXL_E_PROTO) and the rest is dropped. A bad magic or version
 * drops the whole message. A request for an unregistered handler gets an
 * ERROR reply DXL_E_NOENT. All of these are logged at warn level with the
 * peer's node id and counted in the stats; the server keeps serving.
 */

struct dxl_rpc;

#define DXL_RPC_MAGIC 0x31525844u /* "DXR1" */
#define DXL_RPC_VERSION 1
#define DXL_RPC_HDR_SIZE 16
#define DXL_RPC_ENTRY_SIZE 24
#define DXL_RPC_MAX_HANDLERS 1024 /* handler ids 0..1023 */

enum dxl_rpc_flags {
	DXL_RPC_F_REQUEST = 1u << 0,
	DXL_RPC_F_REPLY = 1u << 1,
	DXL_RPC_F_NOREPLY = 1u << 2,
	DXL_RPC_F_ERROR = 1u << 3,
};

struct dxl_rpc_cfg {
	/* bytes of one message (a batch), headers included; a multiple of 8;
	 * 256..the fabric's max_msg; default 16384 (or the fabric's max_msg
	 * if smaller). One call's payload may be up to max_msg - 40 bytes. */
	uint32_t max_msg;
	/* receive buffers of max_msg bytes posted to the ctx's shared
	 * receive queue; 1..the fabric's srq_depth; default 256 (or srq_depth
	 * if smaller) */
	uint32_t n_recv_bufs;
	/* send buffers of max_msg bytes allocated at start; the pool grows in
	 * steps of this size up to max_send_bufs; default 32 */
	uint32_t n_send_bufs;
	uint32_t max_send_bufs; /* default 4096 */
	/* most entries per message; 1 turns batching off; 1..65535; default 64 */
	uint32_t max_batch;
	/* a call's timeout when it does not set one; default 5000 ms. Keep it
	 * above the fabric's timeout_ms so a dead peer shows up as
	 * DXL_E_UNREACHABLE rather than DXL_E_TIMEDOUT. */
	uint32_t timeout_ms;
};

/* dxl_rpc_cfg_init -- fill cfg with the defaults above */
void dxl_rpc_cfg_init(struct dxl_rpc_cfg *cfg);

/*
 * dxl_rpc_new -- attach an RPC endpoint to scheduler s (which must have a
 * ctx): register and post the receive buffers to the ctx's shared receive
 * queue (the RPC owns that queue from now on), allocate the send buffers,
 * and hook into the scheduler's poller and round end.
 *
 * cfg  NULL = defaults (clamped to the fabric's limits)
 *
 * Returns 0. Errors: DXL_E_INVAL (NULL argument, s without a ctx, a cfg
 * value out of range or over the fabric's max_msg/srq_depth), DXL_E_EXIST
 * (s already has an rpc), DXL_E_NOMEM, and the errors of dxl_mr_reg and
 * dxl_ctx_post_recv.
 */
int dxl_rpc_new(struct dxl_sched *s, const struct dxl_rpc_cfg *cfg,
		struct dxl_rpc **out);

/*
 * dxl_rpc_delete -- detach from the scheduler and free everything; pending
 * calls are abandoned. The ctx's receive queue still holds the RPC's
 * buffers (a fabric cannot take them back), so delete the ctx FIRST, then
 * the rpc, then the scheduler; all before the fabric. If the ctx is still
 * alive the receive buffers are kept allocated (and a warning logged)
 * rather than freed under the provider's feet. *rpc = NULL.
 */
void dxl_rpc_delete(struct dxl_rpc **rpc);

/*
 * Handler: runs in the scheduler's poller (not in a coroutine), so it must
 * not block or wait; it may call dxl_rpc_send_noreply and dxl_sched_spawn
 * (e.g. to do longer work in a coroutine).
 *
 * req, len     the request payload (valid during the call only)
 * reply, cap   where to write the reply payload: cap is the smaller of the
 *              caller's reply capacity and the message limit (0 for a
 *              request sent with dxl_rpc_send_noreply)
 * reply_len    set it to the reply's length (starts at 0); more than cap
 *              turns the reply into DXL_E_TOOBIG
 * Returns the status the caller receives: >= 0 for the application's own
 * meaning, or a negative DXL_E_* code.
 */
typedef int (*dxl_rpc_handler_fn)(struct dxl_rpc *rpc, const void *req,
				  size_t len, void *reply, size_t cap,
				  size_t *reply_len, void *arg);

/*
 * dxl_rpc_register -- serve handler_id with fn(.., arg).
 * Returns 0. Errors: DXL_E_INVAL (NULL rpc or fn, handler_id >=
 * DXL_RPC_MAX_HANDLERS), DXL_E_EXIST (already registered).
 */
int dxl_rpc_register(struct dxl_rpc *rpc, uint16_t handler_id,
		     dxl_rpc_handler_fn fn, void *arg);

/* dxl_rpc_current_qp -- inside a handler: the QP the request came on (e.g.
 * for dxl_qp_remote_node); NULL elsewhere. When it is a passive QP (the
 * client connected to us), the RPC layer owns it: once it is down
 * (DXL_QP_ERR) and nothing of it is in flight, a round end deletes it
 * (docs/fabric-rpc.md), so keep it no longer than while it is
 * DXL_QP_RTS. */
struct dxl_qp *dxl_rpc_current_qp(const struct dxl_rpc *rpc);

/* dxl_rpc_max_payload -- the largest request or reply payload: max_msg - 40 */
size_t dxl_rpc_max_payload(const struct dxl_rpc *rpc);

/*
 * dxl_rpc_call -- from a coroutine: send a request to handler_id at the
 * other end of qp and yield until its reply arrives. The request is copied
 * at once (req may be reused on return); it leaves in the SEND of this
 * round's batch for qp.
 *
 * reply, cap   where the reply payload goes (reply may be NULL if cap is 0)
 * reply_len    if not NULL, the reply payload's length
 *
 * Returns the handler's status (>= 0, or the negative code it returned).
 * Errors of the call itself: DXL_E_STATE (not in a coroutine of the rpc's
 * scheduler), DXL_E_INVAL (NULL rpc/qp, req NULL with len > 0, reply NULL
 * with cap > 0), DXL_E_TOOBIG (len over dxl_rpc_max_payload: nothing is
 * sent), DXL_E_UNREACHABLE (the QP is or went into the error state: the
 * peer died or disconnected), DXL_E_TIMEDOUT (cfg.timeout_ms passed; a
 * reply that comes later is dropped), DXL_E_NOENT (no handler with that id
 * at the peer), DXL_E_PROTO (the peer found the message malformed, or sent
 * a reply over cap), DXL_E_NOMEM.
 */
int dxl_rpc_call(struct dxl_rpc *rpc, struct dxl_qp *qp, uint16_t handler_id,
		 const void *req, size_t len, void *reply, size_t cap,
		 size_t *reply_len);

/*
 * An asynchronous call. The caller fills the "in" fields, passes it to
 * dxl_rpc_call_async, and must keep the struct and its reply buffer valid
 * (e.g. on the coroutine's stack, without returning) until `done` is set,
 * which happens only while the coroutine waits (dxl_rpc_wait*, or any other
 * yield). A coroutine that ends abandons its pending calls.
 */
struct dxl_rpc_call {
	/* in */
	struct dxl_qp *qp;
	uint16_t handler_id;
	const void *req;
	size_t len;
	void *reply;
	size_t cap;
	uint32_t timeout_ms; /* 0 = cfg.timeout_ms */
	/* out */
	int done;            /* set when status is final */
	int status;          /* as dxl_rpc_call returns it */
	size_t reply_len;
	/* private to the RPC layer */
	struct {
		uint64_t req_id;
		uint64_t deadline_ns;
		uint32_t sync; /* issued by dxl_rpc_call */
		void *pend;    /* the layer's record while pending */
	} priv;
};

/*
 * dxl_rpc_call_async -- issue c without waiting. Several calls of one
 * coroutine (to one or several QPs) are in flight together; those to the
 * same QP share the round's message.
 * Returns 0 (c->done == 0; its result comes later). Errors (c->done is set
 * and c->status holds the same code): DXL_E_STATE, DXL_E_INVAL,
 * DXL_E_TOOBIG, DXL_E_UNREACHABLE, DXL_E_NOMEM, as for dxl_rpc_call.
 */
int dxl_rpc_call_async(struct dxl_rpc *rpc, struct dxl_rpc_call *c);

/*
 * dxl_rpc_wait -- yield until c is done; returns c->status. DXL_E_STATE if
 * not in the coroutine that issued c.
 */
int dxl_rpc_wait(struct dxl_rpc *rpc, struct dxl_rpc_call *c);

/*
 * dxl_rpc_wait_all -- yield until no call of the calling coroutine is
 * pending. Returns how many of its calls finished with a status other than
 * 0 since its previous dxl_rpc_wait_all (0 = all succeeded); each call's
 * own result is in its struct. Errors: DXL_E_STATE (not in a coroutine).
 */
int dxl_rpc_wait_all(struct dxl_rpc *rpc);

/*
 * dxl_rpc_send_noreply -- passive ACK (R2 PA, 000 L351-355): queue a request
 * whose handler runs at the peer but sends nothing back; the caller does not
 * wait. Requests on one QP run in order (RC), so a later dxl_rpc_call on
 * the same QP observes their effects. Losses are not reported to the caller
 * (a failed QP fails later calls); they are counted in the stats. From a
 * coroutine, a handler, or the scheduler's thread between rounds.
 * Returns 0. Errors: DXL_E_INVAL, DXL_E_TOOBIG (nothing sent),
 * DXL_E_UNREACHABLE (QP in the error state), DXL_E_AGAIN (no send buffer
 * free and none can be allocated: retry after a round), DXL_E_NOMEM.
 */
int dxl_rpc_send_noreply(struct dxl_rpc *rpc, struct dxl_qp *qp,
			 uint16_t handler_id, const void *req, size_t len);

/*
 * dxl_rpc_flush -- post every batch now instead of at the round's end.
 * Returns 0 (batches a full send queue refused stay queued for the next
 * round). Errors: DXL_E_INVAL (NULL rpc).
 */
int dxl_rpc_flush(struct dxl_rpc *rpc);

/*
 * dxl_rpc_forget_qp -- the application is about to dxl_qp_delete qp: fail
 * its pending calls with DXL_E_UNREACHABLE and drop the RPC state kept for
 * it. (Deleting a QP without this leaves stale state that is only noticed
 * and reset when the same address shows up again.)
 */
void dxl_rpc_forget_qp(struct dxl_rpc *rpc, struct dxl_qp *qp);

struct dxl_rpc_stats {
	uint64_t calls;            /* requests issued (sync and async) */
	uint64_t noreply_sent;     /* one-way requests issued */
	uint64_t replies_sent;     /* replies queued, error replies included */
	uint64_t err_replies_sent; /* replies made by the RPC layer itself */
	uint64_t msgs_sent;        /* SEND messages posted */
	uint64_t entries_sent;     /* entries in those messages */
	uint64_t batched_msgs;     /* messages carrying more than one entry */
	uint64_t max_batch;        /* most entries seen in one message */
	uint64_t doorbells;        /* dxl_qp_post calls (several messages each) */
	uint64_t msgs_recv;        /* RECVs that carried a message */
	uint64_t entries_recv;
	uint64_t requests_served;  /* handlers run for requests with a reply */
	uint64_t noreply_served;   /* handlers run for one-way requests */
	uint64_t replies_recv;     /* replies matched to a pending call */
	uint64_t malformed_recv;   /* messages that failed validation */
	uint64_t unknown_handler;  /* requests for an unregistered handler */
	uint64_t stale_replies;    /* replies to no pending call: dropped */
	uint64_t timeouts;         /* calls ended with DXL_E_TIMEDOUT */
	uint64_t unreachable;      /* calls ended with DXL_E_UNREACHABLE */
	uint64_t send_errors;      /* SEND completions with an error status */
	uint64_t dropped_out;      /* queued entries lost with a failed QP or
				      for want of a send buffer */
	uint64_t send_bufs;        /* send buffers allocated now */
	uint64_t recv_flushed;     /* receive buffers given back unread (their
				      QP was deleted first) and posted again */
	uint64_t passive_deleted;  /* passive QPs deleted once down */
};

/* dxl_rpc_stats -- copy the counters */
void dxl_rpc_stats(const struct dxl_rpc *rpc, struct dxl_rpc_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* DXL_RPC_H */
