/* tcp_qp.c -- the tcp provider's initiator side: ctx, QPs, post, poll, wait */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fabric/tcp_internal.h"

/*
 * Everything here runs on the ctx's owner thread; there is no extra thread
 * on the initiator side. dxl_qp_post encodes the chain and writes it with
 * one sendmsg() (doorbell batching); dxl_ctx_poll reads the answers and the
 * incoming SENDs of the ctx's active sockets (found with one epoll_wait(0))
 * and turns them into completions in posting order; it also drains the
 * inbox the NIC thread fills for passive QPs (their RECVs, the answers to
 * their SENDs, their connection losses). dxl_ctx_wait spins idle_spin_us,
 * then sleeps on the ctx's epoll (active sockets + an eventfd the NIC
 * thread signals only when the owner sleeps).
 *
 * Send queue: a ring of sq_depth entries per QP, in posting order. The
 * target answers every READ/CAS/FAA and every request flagged
 * TCP_F_SIGNALED; an answer for seq k completes every earlier unanswered
 * (unsignalled WRITE/SEND) entry silently. To bound those, every
 * sq_depth/2-th consecutive unsignalled request is flagged on the wire
 * anyway and its completion is swallowed here.
 *
 * Failure: the oldest entry gets the error (remote error, or
 * PEER_UNREACHABLE when the socket dies or when the oldest entry that
 * waits for an answer is older than timeout_ms and nothing has arrived
 * for timeout_ms), every later one DXL_WC_FLUSHED, and the QP enters
 * DXL_QP_ERR for good.
 */

static struct tcp_ctx *to_ctx(struct dxl_ctx *c)
{
	return (struct tcp_ctx *)c;
}

static struct tcp_qp *to_qp(struct dxl_qp *q)
{
	return (struct tcp_qp *)q;
}

static uint64_t timeout_ns(const struct tcp_ctx *c)
{
	return (uint64_t)c->base.f->cfg.timeout_ms * 1000000ull;
}

static uint8_t wire_op(unsigned op)
{
	switch (op) {
	case DXL_WR_READ:
		return TCP_OP_READ;
	case DXL_WR_WRITE:
		return TCP_OP_WRITE;
	case DXL_WR_CAS:
		return TCP_OP_CAS;
	case DXL_WR_FAA:
		return TCP_OP_FAA;
	default:
		return TCP_OP_SEND;
	}
}

static enum dxl_wc_opcode wc_op(unsigned op)
{
	switch (op) {
	case DXL_WR_READ:
		return DXL_WC_READ;
	case DXL_WR_WRITE:
		return DXL_WC_WRITE;
	case DXL_WR_CAS:
		return DXL_WC_CAS;
	case DXL_WR_FAA:
		return DXL_WC_FAA;
	default:
		return DXL_WC_SEND;
	}
}

/* ---- completion queue (owner) ------------------------------------------------ */

static void cq_push(struct tcp_ctx *c, const struct dxl_wc *wc)
{
	if (c->cq_n == c->cq_cap) {
		/* more completions than cq_depth: grow rather than lose one */
		uint32_t cap = c->cq_cap * 2;
		struct dxl_wc *n = malloc((size_t)cap * sizeof(*n));
		if (!n) {
			DXL_ERROR("fabric tcp: completion queue overflow: completion "
				  "of wr_id %llu lost", (unsigned long long)wc->wr_id);
			return;
		}
		for (uint32_t i = 0; i < c->cq_n; i++)
			n[i] = c->cq[(c->cq_head + i) % c->cq_cap];
		free(c->cq);
		c->cq = n;
		c->cq_cap = cap;
		c->cq_head = 0;
	}
	c->cq[(c->cq_head + c->cq_n) % c->cq_cap] = *wc;
	c->cq_n++;
}

static int cq_drain(struct tcp_ctx *c, struct dxl_wc *wc, int n)
{
	int k = 0;
	while (k < n && c->cq_n) {
		wc[k++] = c->cq[c->cq_head];
		c->cq_head = (c->cq_head + 1) % c->cq_cap;
		c->cq_n--;
	}
	return k;
}

/* ---- inbox (NIC thread -> owner) ---------------------------------------------- */

int tcp_ctx_push_ev_locked(struct tcp_ctx *c, const struct tcp_ev *ev)
{
	if (c->inbox_n == c->inbox_cap) {
		size_t cap = c->inbox_cap ? c->inbox_cap * 2 : 64;
		struct tcp_ev *n = realloc(c->inbox, cap * sizeof(*n));
		if (!n) {
			DXL_ERROR("fabric tcp: out of memory: event for ctx %u lost",
				  c->base.idx);
			return DXL_E_NOMEM;
		}
		c->inbox = n;
		c->inbox_cap = cap;
	}
	c->inbox[c->inbox_n++] = *ev;
	/* seq_cst, paired with the owner's store to `sleeping` in tcp_wait:
	 * either it sees this count or we see it sleeping and wake it */
	atomic_fetch_add(&c->pending, 1);
	return 0;
}

void tcp_ctx_wake(struct tcp_ctx *c)
{
	if (atomic_load(&c->sleeping)) {
		uint64_t one = 1;
		ssize_t r = write(c->evfd, &one, sizeof(one));
		(void)r;
	}
}

bool tcp_srq_pop_locked(struct tcp_ctx *c, struct tcp_srq_ent *out)
{
	if (!c->srq_n)
		return false;
	*out = c->srq[c->srq_head];
	c->srq_head = (c->srq_head + 1) % c->srq_cap;
	c->srq_n--;
	return true;
}

/* ---- QP list and send queue (owner) -------------------------------------------- */

static void list_add(struct tcp_ctx *c, struct tcp_qp *qp)
{
	qp->prev = NULL;
	qp->next = c->qps;
	if (c->qps)
		c->qps->prev = qp;
	c->qps = qp;
	c->n_qps++;
}

static void list_del(struct tcp_ctx *c, struct tcp_qp *qp)
{
	if (qp->prev)
		qp->prev->next = qp->next;
	else
		c->qps = qp->next;
	if (qp->next)
		qp->next->prev = qp->prev;
	qp->next = qp->prev = NULL;
	c->n_qps--;
}

static struct tcp_sq_ent *sq_head(struct tcp_qp *qp)
{
	return &qp->sq[qp->sq_head];
}

static void sq_pop(struct tcp_qp *qp)
{
	qp->sq_head = (qp->sq_head + 1) % qp->sq_cap;
	qp->sq_n--;
}

static void sq_complete(struct tcp_ctx *c, struct tcp_qp *qp,
			const struct tcp_sq_ent *e, enum dxl_wc_status st)
{
	struct dxl_wc wc = {.wr_id = e->wr_id, .status = st,
			    .opcode = wc_op(e->op),
			    .byte_len = st == DXL_WC_SUCCESS ? e->len : 0,
			    .qp = &qp->base};
	cq_push(c, &wc);
}

static struct tcp_qp *qp_alloc(struct tcp_ctx *c, struct tcp_conn *conn)
{
	struct tcp_qp *qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	qp->sq_cap = c->base.f->cfg.sq_depth;
	qp->sq = calloc(qp->sq_cap, sizeof(*qp->sq));
	if (!qp->sq) {
		free(qp);
		return NULL;
	}
	qp->base.ctx = &c->base;
	qp->base.state = DXL_QP_RTS;
	qp->conn = conn;
	return qp;
}

struct tcp_qp *tcp_qp_new_passive(struct tcp_ctx *c, struct tcp_conn *conn,
				  uint32_t remote_node, uint32_t remote_ctx)
{
	struct tcp_qp *qp = qp_alloc(c, conn);
	if (!qp)
		return NULL;
	qp->base.passive = true;
	qp->base.remote_node = remote_node;
	qp->base.remote_ctx = remote_ctx;
	return qp;
}

/*
 * close our side of the connection of a failed QP. `abandoned`: requests
 * of ours, completed in error just now, may still wait unexecuted at the
 * target. They must never execute (docs/fabric-tcp.md "Failures"): an
 * active connection is then reset, not closed (the target discards the
 * input of a reset connection), and noted, so that our next handshake with
 * that target closes it there first should the reset still be on its way.
 */
static void conn_down(struct tcp_ctx *c, struct tcp_qp *qp, bool abandoned)
{
	struct tcp_conn *conn = qp->conn;
	pthread_mutex_lock(&conn->mu);
	if (conn->fd >= 0) {
		if (conn->passive) {
			/* the NIC thread owns the fd: it sees EOF and closes it */
			shutdown(conn->fd, SHUT_RDWR);
		} else {
			abandoned = abandoned && !conn->peer_eof;
			if (abandoned) {
				struct linger l = {.l_onoff = 1, .l_linger = 0};
				setsockopt(conn->fd, SOL_SOCKET, SO_LINGER, &l,
					   sizeof(l)); /* close = RST */
			} else {
				tcp_conn_flush_locked(conn); /* a last error answer */
			}
			epoll_ctl(c->ep, EPOLL_CTL_DEL, conn->fd, NULL);
			close(conn->fd);
			conn->fd = -1;
			c->n_sock--;
			if (abandoned)
				tcp_abandon_note(c->tf, conn->key, conn->id);
		}
	}
	pthread_mutex_unlock(&conn->mu);
}

static void qp_unpark(struct tcp_ctx *c, struct tcp_qp *qp)
{
	if (!qp->parked)
		return;
	qp->parked = false;
	c->n_parked--;
	struct tcp_conn *conn = qp->conn;
	pthread_mutex_lock(&conn->mu);
	conn->want_in = true;
	tcp_conn_update_mask_locked(conn);
	pthread_mutex_unlock(&conn->mu);
}

/*
 * qp_fail -- the QP enters the error state: the oldest outstanding request
 * completes with st, the others with DXL_WC_FLUSHED (unsignalled ones
 * included: failures always complete).
 */
static void qp_fail(struct tcp_ctx *c, struct tcp_qp *qp, enum dxl_wc_status st)
{
	if (qp->base.state == DXL_QP_ERR)
		return;
	qp->base.state = DXL_QP_ERR;
	bool unfinished = qp->sq_n > 0;
	while (qp->sq_n) {
		sq_complete(c, qp, sq_head(qp), st);
		sq_pop(qp);
		st = DXL_WC_FLUSHED;
	}
	qp_unpark(c, qp);
	qp->rx_resp = false;
	conn_down(c, qp, unfinished);
	if (qp->base.passive && !qp->seen)
		c->reap = true; /* nobody knows it: free it (ctx_reap) */
}

/* ---- answers -------------------------------------------------------------------- */

/* an answer from the owner to a SEND of the passive side (active QPs) */
static void qp_answer(struct tcp_qp *qp, uint32_t seq, uint8_t status)
{
	struct tcp_frame fr = {.op = TCP_OP_RESP, .flags = status,
			       .rop = TCP_OP_SEND, .seq = seq};
	uint8_t b[TCP_FRAME_SIZE];
	tcp_frame_encode(&fr, b);
	pthread_mutex_lock(&qp->conn->mu);
	tcp_buf_append(&qp->conn->out, b, sizeof(b));
	pthread_mutex_unlock(&qp->conn->mu);
}

/* the head entry was answered with success and its data is in place */
static void sq_finish(struct tcp_ctx *c, struct tcp_qp *qp)
{
	struct tcp_sq_ent *e = sq_head(qp);
	if (e->op == DXL_WR_CAS || e->op == DXL_WR_FAA) {
		uint64_t v = dxl_get_le64(qp->rx_atomic);
		memcpy(e->local, &v, sizeof(v));
	}
	if (e->user_sig)
		sq_complete(c, qp, e, DXL_WC_SUCCESS);
	sq_pop(qp);
}

/*
 * An answer arrived: complete the silent requests before it and check it
 * against its request. Sets rx_resp if a payload follows.
 */
static void qp_on_resp(struct tcp_ctx *c, struct tcp_qp *qp,
		       const struct tcp_frame *fr)
{
	const char *why = NULL;
	struct tcp_sq_ent *e = NULL;
	while (qp->sq_n) {
		e = sq_head(qp);
		if (e->seq == fr->seq)
			break;
		if (e->expect) {
			why = "an answer is missing";
			break;
		}
		sq_pop(qp); /* unsignalled, executed: no completion */
		e = NULL;
	}
	if (!why && !e)
		why = "answer to no outstanding request";
	if (!why && fr->rop != wire_op(e->op))
		why = "answer for another operation";
	if (!why && fr->flags == TCP_ST_OK) {
		uint32_t want = e->op == DXL_WR_READ ? e->len
				: (e->op == DXL_WR_CAS || e->op == DXL_WR_FAA) ? 8
									   : 0;
		if (fr->len != want)
			why = "answer of the wrong length";
	} else if (!why && (fr->flags > TCP_ST_OPERR || fr->len)) {
		why = "bad error answer";
	}
	if (why) {
		DXL_WARN("fabric tcp: QP to node %u: %s (seq %u): QP in error",
			 qp->base.remote_node, why, fr->seq);
		qp_fail(c, qp, DXL_WC_PEER_UNREACHABLE);
		return;
	}
	if (fr->flags != TCP_ST_OK) {
		sq_complete(c, qp, e, fr->flags == TCP_ST_ACCESS
					      ? DXL_WC_REM_ACCESS_ERR
					      : DXL_WC_REM_OP_ERR);
		sq_pop(qp);
		qp_fail(c, qp, DXL_WC_FLUSHED);
		return;
	}
	if (fr->len) {
		qp->rx_resp = true;
		qp->rx_dst = e->op == DXL_WR_READ ? e->local : qp->rx_atomic;
		qp->rx_left = fr->len;
		return;
	}
	sq_finish(c, qp);
}

/* ---- active QP: receive side --------------------------------------------------- */

/*
 * A whole SEND from the passive side is in the input: put it in the oldest
 * receive buffer. Returns false if there is none (parked, like an RNR).
 */
static bool qp_deliver(struct tcp_ctx *c, struct tcp_qp *qp,
		       const struct tcp_frame *fr)
{
	struct tcp_buf *in = &qp->conn->in;
	struct tcp_srq_ent ent;
	pthread_mutex_lock(&c->lock);
	bool have = tcp_srq_pop_locked(c, &ent);
	pthread_mutex_unlock(&c->lock);
	if (!have) {
		if (!qp->parked) {
			qp->parked = true;
			c->n_parked++;
			/* RNR budget from the first attempt, not from a retry */
			if (!qp->park_deadline)
				qp->park_deadline = dxl_now_ns() + timeout_ns(c) / 2;
			pthread_mutex_lock(&qp->conn->mu);
			qp->conn->want_in = false;
			tcp_conn_update_mask_locked(qp->conn);
			pthread_mutex_unlock(&qp->conn->mu);
		}
		return false;
	}
	qp_unpark(c, qp);
	qp->park_deadline = 0;
	struct dxl_wc wc = {.wr_id = ent.wr_id, .opcode = DXL_WC_RECV,
			    .byte_len = fr->len, .qp = &qp->base};
	bool too_big = fr->len > ent.len;
	if (too_big) {
		wc.status = DXL_WC_LOCAL_ERR;
	} else {
		wc.status = DXL_WC_SUCCESS;
		if (fr->len)
			memcpy(ent.buf, tcp_buf_data(in) + TCP_FRAME_SIZE, fr->len);
	}
	cq_push(c, &wc);
	tcp_buf_consume(in, TCP_FRAME_SIZE + (size_t)fr->len);
	qp->rx_seq++;
	if (too_big) {
		qp_answer(qp, fr->seq, TCP_ST_OPERR);
		qp_fail(c, qp, DXL_WC_FLUSHED);
	} else if (fr->flags & TCP_F_SIGNALED) {
		qp_answer(qp, fr->seq, TCP_ST_OK);
	}
	return true;
}

static void qp_parse(struct tcp_ctx *c, struct tcp_qp *qp)
{
	struct tcp_buf *in = &qp->conn->in;
	uint32_t max_msg = c->base.f->cfg.max_msg;
	while (qp->base.state == DXL_QP_RTS && !qp->parked) {
		if (qp->rx_resp) {
			size_t n = DXL_MIN(in->len, (size_t)qp->rx_left);
			if (!n)
				return;
			memcpy(qp->rx_dst, tcp_buf_data(in), n);
			tcp_buf_consume(in, n);
			qp->rx_dst += n;
			qp->rx_left -= (uint32_t)n;
			if (!qp->rx_left) {
				qp->rx_resp = false;
				sq_finish(c, qp);
			}
			continue;
		}
		if (in->len < TCP_FRAME_SIZE)
			return;
		struct tcp_frame fr;
		tcp_frame_decode(tcp_buf_data(in), &fr);
		const char *why = NULL;
		if (fr.zero)
			why = "reserved byte set";
		else if (fr.op == TCP_OP_RESP)
			; /* checked against its request */
		else if (fr.op != TCP_OP_SEND)
			why = "unexpected opcode";
		else if (fr.rop || (fr.flags & ~TCP_F_SIGNALED))
			why = "bad flags";
		else if (fr.seq != qp->rx_seq)
			why = "sequence gap";
		else if (fr.len > max_msg)
			why = "SEND over max_msg";
		if (why) {
			DXL_WARN("fabric tcp: malformed frame from node %u (op %u, "
				 "len %u): %s; QP in error",
				 qp->base.remote_node, fr.op, fr.len, why);
			qp_fail(c, qp, DXL_WC_PEER_UNREACHABLE);
			return;
		}
		if (fr.op == TCP_OP_RESP) {
			tcp_buf_consume(in, TCP_FRAME_SIZE);
			qp_on_resp(c, qp, &fr);
			continue;
		}
		size_t need = TCP_FRAME_SIZE + (size_t)fr.len;
		if (in->len < need) {
			if (tcp_buf_room(in, need - in->len)) {
				DXL_ERROR("fabric tcp: no memory for a SEND of %u bytes",
					  fr.len);
				qp_fail(c, qp, DXL_WC_LOCAL_ERR);
			}
			return;
		}
		if (!qp_deliver(c, qp, &fr))
			return;
	}
}

static bool io_again(int e)
{
	return e == EAGAIN || e == EWOULDBLOCK || e == EINTR;
}

/* read what the socket has (a few rounds at most) and parse it */
static void qp_rx(struct tcp_ctx *c, struct tcp_qp *qp)
{
	struct tcp_conn *conn = qp->conn;
	for (int round = 0; round < 8; round++) {
		if (qp->base.state != DXL_QP_RTS || qp->parked)
			break;
		ssize_t n;
		size_t want;
		bool eof = false;
		if (qp->rx_resp && !conn->in.len && qp->rx_left >= 1024) {
			/* a big READ answer: straight into the local buffer */
			want = qp->rx_left;
			n = recv(conn->fd, qp->rx_dst, want, MSG_DONTWAIT);
			if (n > 0) {
				qp->rx_dst += n;
				qp->rx_left -= (uint32_t)n;
				if (!qp->rx_left) {
					qp->rx_resp = false;
					sq_finish(c, qp);
				}
			}
		} else {
			if (tcp_buf_room(&conn->in, 4096)) {
				qp_fail(c, qp, DXL_WC_LOCAL_ERR);
				break;
			}
			if (conn->in.len < TCP_IN_CAP &&
			    tcp_buf_free_bytes(&conn->in) < TCP_IN_CAP - conn->in.len)
				tcp_buf_room(&conn->in, TCP_IN_CAP - conn->in.len);
			want = tcp_buf_free_bytes(&conn->in);
			n = recv(conn->fd, tcp_buf_tail(&conn->in), want, MSG_DONTWAIT);
			if (n > 0)
				conn->in.len += (size_t)n;
		}
		if (n == 0)
			eof = true;
		else if (n < 0 && !io_again(errno))
			eof = true;
		else if (n > 0)
			atomic_store_explicit(&conn->last_rx_ns, dxl_now_ns(),
					      memory_order_relaxed);
		if (eof)
			conn->peer_eof = true;
		qp_parse(c, qp);
		if (eof) {
			qp_fail(c, qp, DXL_WC_PEER_UNREACHABLE);
			break;
		}
		if (n < 0 || (size_t)n < want)
			break;
	}
	if (conn->out.len && qp->base.state == DXL_QP_RTS) {
		pthread_mutex_lock(&conn->mu);
		tcp_conn_flush_locked(conn);
		pthread_mutex_unlock(&conn->mu);
	}
}

static void qp_io(struct tcp_ctx *c, struct tcp_qp *qp, uint32_t events)
{
	if (qp->base.state != DXL_QP_RTS)
		return;
	struct tcp_conn *conn = qp->conn;
	if (events & EPOLLOUT) {
		pthread_mutex_lock(&conn->mu);
		tcp_conn_flush_locked(conn); /* errors show up on the read side */
		pthread_mutex_unlock(&conn->mu);
	}
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
		if (!qp->parked) {
			qp_rx(c, qp);
		} else if (events & (EPOLLHUP | EPOLLERR)) {
			conn->peer_eof = true;
			qp_fail(c, qp, DXL_WC_PEER_UNREACHABLE);
		}
	}
}

/* ---- progress -------------------------------------------------------------------- */

static void drain_evfd(struct tcp_ctx *c)
{
	uint64_t v;
	ssize_t r = read(c->evfd, &v, sizeof(v));
	(void)r;
}

static void ctx_take_inbox(struct tcp_ctx *c)
{
	pthread_mutex_lock(&c->lock);
	struct tcp_qp *ho = c->handover;
	c->handover = NULL;
	struct tcp_ev *evs = c->inbox;
	size_t n = c->inbox_n, cap = c->inbox_cap;
	c->inbox = c->evs_tmp;
	c->inbox_cap = c->evs_tmp_cap;
	c->inbox_n = 0;
	atomic_store(&c->pending, 0);
	pthread_mutex_unlock(&c->lock);
	c->evs_tmp = evs;
	c->evs_tmp_cap = cap;
	while (ho) { /* before the events: they may name these QPs */
		struct tcp_qp *next = ho->next;
		list_add(c, ho);
		ho = next;
	}
	for (size_t i = 0; i < n; i++) {
		struct tcp_ev *ev = &evs[i];
		struct tcp_qp *qp = to_qp(ev->wc.qp);
		switch (ev->type) {
		case TCP_EV_RECV:
			if (qp)
				qp->seen = true; /* the user learns of it now */
			cq_push(c, &ev->wc);
			break;
		case TCP_EV_RESP:
			if (qp->base.state == DXL_QP_RTS) {
				struct tcp_frame fr = {.op = TCP_OP_RESP,
						       .flags = ev->status,
						       .rop = TCP_OP_SEND,
						       .seq = ev->seq};
				qp_on_resp(c, qp, &fr);
			}
			break;
		case TCP_EV_DOWN:
			qp_fail(c, qp, DXL_WC_PEER_UNREACHABLE);
			break;
		}
	}
}

/*
 * Time out QPs: a parked incoming SEND after timeout_ms/2, a QP whose oldest
 * request that waits for an answer is older than timeout_ms while nothing
 * arrived for timeout_ms. Returns the next deadline (UINT64_MAX: none).
 */
static uint64_t ctx_scan(struct tcp_ctx *c, uint64_t now)
{
	uint64_t to = timeout_ns(c), next = UINT64_MAX;
	struct tcp_qp *nx;
	for (struct tcp_qp *qp = c->qps; qp; qp = nx) {
		nx = qp->next;
		if (qp->base.state != DXL_QP_RTS)
			continue;
		if (qp->parked) {
			if (now >= qp->park_deadline) {
				struct tcp_frame fr;
				tcp_frame_decode(tcp_buf_data(&qp->conn->in), &fr);
				qp_answer(qp, fr.seq, TCP_ST_OPERR);
				qp_fail(c, qp, DXL_WC_FLUSHED);
				continue;
			}
			next = DXL_MIN(next, qp->park_deadline);
		}
		uint64_t last_rx = atomic_load_explicit(&qp->conn->last_rx_ns,
							memory_order_relaxed);
		for (uint32_t i = 0; i < qp->sq_n; i++) {
			struct tcp_sq_ent *e = &qp->sq[(qp->sq_head + i) % qp->sq_cap];
			if (!e->expect)
				continue;
			uint64_t dl = DXL_MAX(e->post_ns, last_rx) + to;
			if (now >= dl) {
				DXL_INFO("fabric tcp: QP to node %u: no answer for %u ms: "
					 "peer unreachable", qp->base.remote_node,
					 c->base.f->cfg.timeout_ms);
				qp_fail(c, qp, DXL_WC_PEER_UNREACHABLE);
			} else {
				next = DXL_MIN(next, dl);
			}
			break;
		}
	}
	return next;
}

static void qp_destroy(struct tcp_ctx *c, struct tcp_qp *qp);

/*
 * Free the passive QPs that are down and that the user never saw (no RECV
 * named them, so no pointer to them is out there and no completion of
 * theirs is queued): a connection used only for one-sided requests leaves
 * nothing behind. Passive QPs the user has seen are the user's to delete
 * (docs/fabric.md).
 */
static void ctx_reap(struct tcp_ctx *c)
{
	c->reap = false;
	struct tcp_qp *nx;
	for (struct tcp_qp *qp = c->qps; qp; qp = nx) {
		nx = qp->next;
		if (qp->base.passive && !qp->seen && qp->base.state == DXL_QP_ERR) {
			list_del(c, qp);
			qp_destroy(c, qp);
		}
	}
}

static void ctx_progress(struct tcp_ctx *c, uint64_t now)
{
	/* acquire: pairs with the NIC's push (which it makes under c->lock
	 * anyway); a stale zero only delays the events to the next poll */
	if (atomic_load_explicit(&c->pending, memory_order_acquire))
		ctx_take_inbox(c);
	if (c->reap)
		ctx_reap(c);
	if (c->retry_parked) {
		c->retry_parked = false;
		for (struct tcp_qp *qp = c->qps; qp; qp = qp->next) {
			if (!qp->parked || qp->base.state != DXL_QP_RTS)
				continue;
			/* the parked SEND is whole at the head of the input */
			struct tcp_frame fr;
			tcp_frame_decode(tcp_buf_data(&qp->conn->in), &fr);
			if (!qp_deliver(c, qp, &fr))
				continue; /* still no buffer for it */
			qp_parse(c, qp); /* what came after it */
			if (!qp->parked)
				qp_rx(c, qp);
		}
	}
	if (c->n_sock) {
		struct epoll_event evs[32];
		int m = epoll_wait(c->ep, evs, 32, 0);
		for (int i = 0; i < m; i++) {
			struct tcp_conn *conn = evs[i].data.ptr;
			if (!conn)
				drain_evfd(c);
			else
				qp_io(c, conn->qp, evs[i].events);
		}
	}
	if (now >= c->next_scan_ns) {
		ctx_scan(c, now);
		c->next_scan_ns = now + TCP_SCAN_NS;
	}
}

int tcp_poll(struct dxl_ctx *bc, struct dxl_wc *wc, int n)
{
	struct tcp_ctx *c = to_ctx(bc);
	int k = cq_drain(c, wc, n);
	if (k == n)
		return k;
	ctx_progress(c, dxl_now_ns());
	return k + cq_drain(c, wc + k, n - k);
}

uint32_t tcp_qp_count(struct dxl_ctx *bc)
{
	struct tcp_ctx *c = to_ctx(bc);
	uint32_t n = c->n_qps;
	pthread_mutex_lock(&c->lock);
	for (struct tcp_qp *q = c->handover; q; q = q->next)
		n++;
	pthread_mutex_unlock(&c->lock);
	return n;
}

int tcp_wait(struct dxl_ctx *bc, int timeout_ms)
{
	struct tcp_ctx *c = to_ctx(bc);
	uint64_t now = dxl_now_ns();
	uint64_t end = timeout_ms < 0 ? UINT64_MAX
				      : now + (uint64_t)timeout_ms * 1000000ull;
	uint64_t spin_end = now + (uint64_t)c->base.f->cfg.idle_spin_us * 1000ull;
	for (;;) {
		if (c->cq_n)
			return 0;
		ctx_progress(c, now);
		if (c->cq_n)
			return 0;
		now = dxl_now_ns();
		if (now >= end)
			return dxl_err_set(DXL_E_TIMEDOUT,
					   "wait: no completion on ctx %u in %d ms",
					   c->base.idx, timeout_ms);
		if (now < spin_end) {
			/* on 2 CPUs or fewer the NIC thread that must answer (a
			 * SEND's delivery, a peer's request) often waits for this
			 * CPU: yield it instead of burning it (SEND/RPC p50 under
			 * load 115-131 us with a plain spin; docs/fabric-bench.md) */
			if (c->spin_yield)
				sched_yield();
			else
				dxl_cpu_relax();
			continue;
		}
		/* block until a socket, the NIC, the caller's timeout or the
		 * next QP deadline (recomputed now: posts may have added some) */
		uint64_t dl = ctx_scan(c, now);
		c->next_scan_ns = now + TCP_SCAN_NS;
		if (c->cq_n)
			return 0;
		uint64_t until = DXL_MIN(end, dl);
		int ms = -1;
		if (until != UINT64_MAX)
			ms = (int)DXL_MIN((until - now + 999999) / 1000000,
					  (uint64_t)INT_MAX);
		/* seq_cst store then load, against the NIC's push then load */
		atomic_store(&c->sleeping, 1);
		if (!atomic_load(&c->pending)) {
			struct epoll_event evs[8];
			int m = epoll_wait(c->ep, evs, 8, ms);
			for (int i = 0; i < m; i++)
				if (!evs[i].data.ptr)
					drain_evfd(c);
		}
		atomic_store(&c->sleeping, 0);
		now = dxl_now_ns();
		if (now >= dl)
			c->next_scan_ns = 0; /* scan in the next progress */
	}
}

/* ---- post ---------------------------------------------------------------------- */

#define POST_IOV 64

/* append the bytes of iov[] after the first `done` to out */
static int append_rest(struct tcp_buf *out, const struct iovec *iov, int niov,
		       size_t done)
{
	for (int i = 0; i < niov; i++) {
		if (done >= iov[i].iov_len) {
			done -= iov[i].iov_len;
			continue;
		}
		if (tcp_buf_append(out, (const uint8_t *)iov[i].iov_base + done,
				   iov[i].iov_len - done))
			return DXL_E_NOMEM;
		done = 0;
	}
	return 0;
}

int tcp_qp_post(struct dxl_qp *bqp, struct dxl_wr *chain, struct dxl_wr **bad)
{
	struct tcp_qp *qp = to_qp(bqp);
	uint32_t n = 0;
	size_t total = 0;
	for (struct dxl_wr *wr = chain; wr; wr = wr->next) {
		bool data_op = wr->op == DXL_WR_WRITE || wr->op == DXL_WR_SEND;
		if ((wr->op == DXL_WR_READ || wr->op == DXL_WR_WRITE) &&
		    wr->len > TCP_MAX_RDMA) {
			if (bad)
				*bad = wr;
			return dxl_err_set(DXL_E_INVAL,
					   "qp_post: request %u (wr_id %llu): length %u "
					   "over the tcp provider's limit %u",
					   n, (unsigned long long)wr->wr_id, wr->len,
					   TCP_MAX_RDMA);
		}
		total += TCP_FRAME_SIZE + (data_op ? wr->len : 0);
		if (++n > qp->sq_cap)
			break;
	}
	if (n > qp->sq_cap - qp->sq_n) {
		if (bad)
			*bad = chain;
		return dxl_err_set(DXL_E_AGAIN,
				   "qp_post: send queue full (%u of %u slots used, "
				   "chain of %u%s): poll and retry",
				   qp->sq_n, qp->sq_cap, n,
				   n > qp->sq_cap ? "+" : "");
	}
	if (qp->hdrs_cap < (size_t)n * TCP_FRAME_SIZE) {
		size_t cap = DXL_MAX((size_t)n * TCP_FRAME_SIZE, (size_t)4096);
		uint8_t *h = realloc(qp->hdrs, cap);
		if (!h) {
			if (bad)
				*bad = chain;
			return dxl_err_set(DXL_E_NOMEM, "qp_post: out of memory");
		}
		qp->hdrs = h;
		qp->hdrs_cap = cap;
	}
	struct tcp_conn *conn = qp->conn;
	bool use_iov = 2 * n <= POST_IOV;
	pthread_mutex_lock(&conn->mu);
	if (!use_iov || conn->out.len) {
		/* everything goes through out: reserve it before committing */
		if (tcp_buf_room(&conn->out, total)) {
			pthread_mutex_unlock(&conn->mu);
			if (bad)
				*bad = chain;
			return dxl_err_set(DXL_E_NOMEM, "qp_post: out of memory");
		}
		use_iov = false;
	}
	struct iovec iov[POST_IOV];
	int niov = 0;
	uint64_t now = dxl_now_ns();
	uint32_t half = qp->sq_cap / 2;
	uint32_t i = 0;
	for (struct dxl_wr *wr = chain; wr; wr = wr->next, i++) {
		bool user_sig = wr->flags & DXL_WR_SIGNALED;
		bool data_op = wr->op == DXL_WR_WRITE || wr->op == DXL_WR_SEND;
		bool answered = !data_op || user_sig;
		/* selective signalling: never let silent requests fill the SQ */
		if (!answered && ++qp->unsig_run >= half)
			answered = true;
		if (answered)
			qp->unsig_run = 0;
		struct tcp_frame fr = {
			.op = wire_op(wr->op),
			.flags = data_op && answered ? TCP_F_SIGNALED : 0,
			.len = wr->len,
			.seq = qp->tx_seq++,
		};
		if (wr->op != DXL_WR_SEND) {
			fr.rkey = wr->rkey;
			fr.raddr = wr->remote_addr;
			fr.cmp_add = wr->compare_add;
			fr.swap = wr->swap;
		}
		uint8_t *h = qp->hdrs + (size_t)i * TCP_FRAME_SIZE;
		tcp_frame_encode(&fr, h);
		struct tcp_sq_ent *e = &qp->sq[(qp->sq_head + qp->sq_n) % qp->sq_cap];
		qp->sq_n++;
		e->wr_id = wr->wr_id;
		e->post_ns = now;
		e->local = wr->local;
		e->len = wr->len;
		e->seq = fr.seq;
		e->op = (uint8_t)wr->op;
		e->user_sig = user_sig;
		e->expect = answered;
		if (use_iov) {
			iov[niov].iov_base = h;
			iov[niov++].iov_len = TCP_FRAME_SIZE;
			if (data_op && wr->len) {
				iov[niov].iov_base = wr->local;
				iov[niov++].iov_len = wr->len;
			}
		} else {
			/* room reserved above */
			tcp_buf_append(&conn->out, h, TCP_FRAME_SIZE);
			if (data_op)
				tcp_buf_append(&conn->out, wr->local, wr->len);
		}
	}
	if (conn->fd < 0) {
		/* the connection is gone; the loss completes these requests */
		tcp_buf_consume(&conn->out, conn->out.len);
	} else if (use_iov) {
		/* the doorbell: one syscall for the whole chain */
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
		ssize_t w = sendmsg(conn->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		size_t done = w > 0 ? (size_t)w : 0;
		if (w < 0 && !io_again(errno)) {
			/* broken: the read side reports it */
		} else if (done < total &&
			   append_rest(&conn->out, iov, niov, done)) {
			/* the stream is torn: make the loss visible */
			DXL_ERROR("fabric tcp: out of memory queueing a chain: "
				  "closing the QP to node %u", bqp->remote_node);
			shutdown(conn->fd, SHUT_RDWR);
		}
		tcp_conn_update_mask_locked(conn);
	} else {
		tcp_conn_flush_locked(conn);
	}
	pthread_mutex_unlock(&conn->mu);
	return 0;
}

int tcp_post_recv(struct dxl_ctx *bc, void *buf, uint32_t len, uint32_t lkey,
		  uint64_t wr_id)
{
	struct tcp_ctx *c = to_ctx(bc);
	pthread_mutex_lock(&c->lock);
	if (c->srq_n == c->srq_cap) {
		pthread_mutex_unlock(&c->lock);
		return dxl_err_set(DXL_E_AGAIN,
				   "post_recv: ctx %u has %u receive buffers posted "
				   "already (srq_depth)", c->base.idx, c->srq_cap);
	}
	struct tcp_srq_ent *e = &c->srq[(c->srq_head + c->srq_n) % c->srq_cap];
	e->buf = buf;
	e->len = len;
	e->lkey = lkey;
	e->wr_id = wr_id;
	c->srq_n++;
	pthread_mutex_unlock(&c->lock);
	/* the NIC counts a parked connection under c->lock, so after our
	 * unlock we see it if it missed this buffer */
	if (atomic_load(&c->tf->nparked))
		tcp_nic_kick(c->tf);
	if (c->n_parked)
		c->retry_parked = true;
	return 0;
}

/* ---- ctx ---------------------------------------------------------------------- */

int tcp_ctx_new(struct dxl_fabric *f, uint32_t idx, struct dxl_ctx **out)
{
	const struct dxl_fabric_cfg *cfg = &f->cfg;
	struct tcp_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return dxl_err_set(DXL_E_NOMEM, "ctx_new: out of memory");
	c->base.f = f;
	c->base.idx = idx;
	c->tf = f->prov;
	c->ep = c->evfd = -1;
	pthread_mutex_init(&c->lock, NULL);
	atomic_init(&c->pending, 0);
	atomic_init(&c->sleeping, 0);
	c->cq_cap = cfg->cq_depth;
	c->cq = calloc(c->cq_cap, sizeof(*c->cq));
	c->srq_cap = cfg->srq_depth;
	c->srq = calloc(c->srq_cap, sizeof(*c->srq));
	int ret;
	if (!c->cq || !c->srq) {
		ret = dxl_err_set(DXL_E_NOMEM, "ctx_new: out of memory");
		goto err;
	}
	c->ep = epoll_create1(EPOLL_CLOEXEC);
	c->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	c->spin_yield = tcp_few_cpus() && !getenv("DXL_TCP_SPIN_RELAX");
	if (c->ep < 0 || c->evfd < 0) {
		ret = dxl_err_errno(errno, "ctx_new: epoll/eventfd");
		goto err;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	if (epoll_ctl(c->ep, EPOLL_CTL_ADD, c->evfd, &ev)) {
		ret = dxl_err_errno(errno, "ctx_new: epoll_ctl");
		goto err;
	}
	*out = &c->base;
	return 0;
err:
	if (c->ep >= 0)
		close(c->ep);
	if (c->evfd >= 0)
		close(c->evfd);
	free(c->cq);
	free(c->srq);
	pthread_mutex_destroy(&c->lock);
	free(c);
	return ret;
}

static void qp_destroy(struct tcp_ctx *c, struct tcp_qp *qp)
{
	struct tcp_conn *conn = qp->conn;
	if (conn->passive) {
		/* detach: after this the NIC thread cannot reach the QP, the
		 * ctx or its buffers through the connection */
		pthread_mutex_lock(&conn->mu);
		conn->ctx = NULL;
		conn->qp = NULL;
		if (conn->fd >= 0)
			shutdown(conn->fd, SHUT_RDWR);
		pthread_mutex_unlock(&conn->mu);
		pthread_mutex_lock(&c->lock);
		size_t k = 0;
		for (size_t i = 0; i < c->inbox_n; i++) {
			struct tcp_ev *ev = &c->inbox[i];
			if (ev->wc.qp != &qp->base) {
				c->inbox[k++] = *ev;
			} else if (ev->type == TCP_EV_RECV) {
				/* a message for the deleted QP holds a receive
				 * buffer: give the buffer back (as verbs does) */
				ev->wc.qp = NULL;
				ev->wc.status = DXL_WC_FLUSHED;
				ev->wc.byte_len = 0;
				c->inbox[k++] = *ev;
			}
		}
		c->inbox_n = k;
		pthread_mutex_unlock(&c->lock);
	} else {
		/* an orderly close: requests the user posted before deleting
		 * the QP (their completions are dropped) may still execute */
		pthread_mutex_lock(&conn->mu);
		if (conn->fd >= 0) {
			epoll_ctl(c->ep, EPOLL_CTL_DEL, conn->fd, NULL);
			close(conn->fd);
			conn->fd = -1;
			c->n_sock--;
		}
		pthread_mutex_unlock(&conn->mu);
	}
	if (qp->parked)
		c->n_parked--;
	tcp_conn_put(conn);
	free(qp->sq);
	free(qp->hdrs);
	free(qp);
}

void tcp_qp_delete(struct dxl_qp *bqp)
{
	struct tcp_qp *qp = to_qp(bqp);
	struct tcp_ctx *c = to_ctx(bqp->ctx);
	list_del(c, qp);
	/* its completions still queued would name a freed QP: drop them,
	 * except received messages: their buffers go back to the user as
	 * FLUSHED with no QP */
	uint32_t k = 0;
	for (uint32_t i = 0; i < c->cq_n; i++) {
		struct dxl_wc wc = c->cq[(c->cq_head + i) % c->cq_cap];
		if (wc.qp == bqp) {
			if (wc.opcode != DXL_WC_RECV)
				continue;
			wc.qp = NULL;
			wc.status = DXL_WC_FLUSHED;
			wc.byte_len = 0;
		}
		c->cq[(c->cq_head + k++) % c->cq_cap] = wc;
	}
	c->cq_n = k;
	qp_destroy(c, qp);
}

void tcp_ctx_delete(struct dxl_ctx *bc)
{
	struct tcp_ctx *c = to_ctx(bc);
	/* fabric.c has unpublished the ctx: no new hand-over can come */
	pthread_mutex_lock(&c->lock);
	struct tcp_qp *ho = c->handover;
	c->handover = NULL;
	pthread_mutex_unlock(&c->lock);
	while (ho) {
		struct tcp_qp *next = ho->next;
		qp_destroy(c, ho);
		ho = next;
	}
	while (c->qps) {
		struct tcp_qp *qp = c->qps;
		list_del(c, qp);
		qp_destroy(c, qp);
	}
	close(c->ep);
	close(c->evfd);
	free(c->cq);
	free(c->srq);
	free(c->inbox);
	free(c->evs_tmp);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* ---- connect ---------------------------------------------------------------------- */

static int wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		uint64_t now = dxl_now_ns();
		if (now >= deadline)
			return DXL_E_TIMEDOUT;
		int ms = (int)DXL_MIN((deadline - now + 999999) / 1000000,
				      (uint64_t)INT_MAX);
		struct pollfd p = {.fd = fd, .events = events};
		int r = poll(&p, 1, ms);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return dxl_err_errno(errno, "poll");
	}
}

static int connect_to(const char *host, uint16_t port, uint64_t deadline,
		      uint32_t timeout_ms, int *fd_out)
{
	char portstr[8];
	snprintf(portstr, sizeof(portstr), "%u", port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	int gai = getaddrinfo(host, portstr, &hints, &ai);
	if (gai)
		return dxl_err_set(DXL_E_INVAL, "cannot resolve '%s': %s", host,
				   gai_strerror(gai));
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
			0);
	if (fd < 0) {
		int e = errno;
		freeaddrinfo(ai);
		return dxl_err_errno(e, "socket");
	}
	int ret = tcp_set_sockopts(fd);
	if (ret) {
		freeaddrinfo(ai);
		close(fd);
		return ret;
	}
	int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
	int e = r ? errno : 0;
	freeaddrinfo(ai);
	if (r && e == EINPROGRESS) {
		ret = wait_fd(fd, POLLOUT, deadline);
		if (ret) {
			close(fd);
			if (ret == DXL_E_TIMEDOUT)
				return dxl_err_set(DXL_E_UNREACHABLE,
						   "connect timed out after %u ms",
						   timeout_ms);
			return ret;
		}
		socklen_t sl = sizeof(e);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl))
			e = errno;
	}
	if (e) {
		close(fd);
		return dxl_err_set(DXL_E_UNREACHABLE, "connect: %s", strerror(e));
	}
	*fd_out = fd;
	return 0;
}

/* send or receive exactly len bytes before the deadline */
static int xfer(int fd, void *buf, size_t len, bool tx, uint64_t deadline,
		uint32_t timeout_ms)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = tx ? send(fd, (uint8_t *)buf + done, len - done,
				      MSG_NOSIGNAL | MSG_DONTWAIT)
			       : recv(fd, (uint8_t *)buf + done, len - done,
				      MSG_DONTWAIT);
		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n == 0)
			return dxl_err_set(DXL_E_UNREACHABLE,
					   "peer closed the connection during the "
					   "handshake");
		if (!io_again(errno))
			return dxl_err_set(DXL_E_UNREACHABLE, "handshake: %s",
					   strerror(errno));
		int ret = wait_fd(fd, tx ? POLLOUT : POLLIN, deadline);
		if (ret == DXL_E_TIMEDOUT)
			return dxl_err_set(DXL_E_UNREACHABLE,
					   "no handshake answer in %u ms", timeout_ms);
		if (ret)
			return ret;
	}
	return 0;
}

/* "ip:port" of the connected socket's peer ("" if unknown) */
static void sock_key(int fd, char *out, size_t cap)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char ip[INET6_ADDRSTRLEN];
	out[0] = '\0';
	if (getpeername(fd, (struct sockaddr *)&ss, &sl))
		return;
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		if (inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip)))
			snprintf(out, cap, "[%s]:%u", ip, ntohs(s6->sin6_port));
	} else if (ss.ss_family == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		if (inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip)))
			snprintf(out, cap, "%s:%u", ip, ntohs(s4->sin_port));
	}
}

/*
 * send_handshake -- on connected fd: our handshake as connection cid to
 * remote_ctx, naming up to TCP_HS_MAX_KILL of our abandoned connections to
 * key (the oldest first); read the answer into *r. The target closes those
 * before it answers, whatever its answer: then they are forgotten here.
 */
static int send_handshake(struct tcp_ctx *c, int fd, const char *key, uint32_t remote_ctx,
			  uint64_t cid, uint64_t deadline, uint32_t tmo, struct tcp_hs *r)
{
	struct dxl_fabric *f = c->base.f;
	uint8_t b[TCP_HS_REQ_SIZE + 8 * TCP_HS_MAX_KILL];
	uint64_t kill[TCP_HS_MAX_KILL];
	uint32_t nkill = key[0] ? tcp_abandon_take(c->tf, key, kill) : 0;
	struct tcp_hs h = {.magic = TCP_MAGIC, .version = TCP_VERSION,
			   .node = f->cfg.node_id, .ctx = remote_ctx,
			   .src_ctx = c->base.idx, .nonce = c->tf->nonce,
			   .conn = cid, .nkill = nkill};
	tcp_hs_req_encode(&h, b);
	for (uint32_t i = 0; i < nkill; i++)
		dxl_put_le64(b + TCP_HS_REQ_SIZE + 8 * (size_t)i, kill[i]);
	int ret = xfer(fd, b, TCP_HS_REQ_SIZE + 8 * (size_t)nkill, true, deadline, tmo);
	if (!ret)
		ret = xfer(fd, b, TCP_HS_SIZE, false, deadline, tmo);
	if (ret)
		return ret;
	tcp_hs_decode(b, r);
	if (r->magic != TCP_MAGIC)
		return dxl_err_set(DXL_E_PROTO, "handshake answer has a bad magic "
				   "0x%08x (not a dxl tcp fabric?)", r->magic);
	if (r->version != TCP_VERSION || r->status == TCP_HS_VERSION)
		return dxl_err_set(DXL_E_VERSION, "peer speaks protocol version %u, "
				   "we speak %u", r->version, TCP_VERSION);
	/* the target has closed those before it answered */
	tcp_abandon_done(c->tf, key, kill, nkill);
	return 0;
}

int tcp_qp_connect(struct dxl_ctx *bc, const char *host, uint16_t port,
		   uint32_t remote_ctx, struct dxl_qp **out)
{
	struct tcp_ctx *c = to_ctx(bc);
	struct dxl_fabric *f = bc->f;
	uint32_t tmo = f->cfg.timeout_ms;
	uint64_t deadline = dxl_now_ns() + (uint64_t)tmo * 1000000ull;
	int fd = -1;
	int ret = connect_to(host, port, deadline, tmo, &fd);
	if (ret)
		return ret;
	/* the target's address as the kernel sees it: the key under which
	 * our abandoned connections to it are remembered */
	char key[DXL_FABRIC_ADDR_MAX] = "";
	sock_key(fd, key, sizeof(key));
	/* more abandoned connections to it than one handshake names: the
	 * oldest go first in handshakes of their own (connections closed at
	 * once), so that every one is closed there before this connection
	 * exists -- none may run after a request of ours on it */
	for (int k = 0; key[0] && tcp_abandon_count(c->tf, key) > TCP_HS_MAX_KILL; k++) {
		int fd2 = -1;
		struct tcp_hs r2;
		if (k == 1000) /* noted faster than we send them: give up */
			ret = dxl_err_set(DXL_E_UNREACHABLE, "%s: cannot fence %u abandoned "
					  "connections", key, tcp_abandon_count(c->tf, key));
		if (!ret)
			ret = connect_to(host, port, deadline, tmo, &fd2);
		if (!ret)
			ret = send_handshake(c, fd2, key, remote_ctx,
					     atomic_fetch_add(&c->tf->next_conn_id, 1) + 1,
					     deadline, tmo, &r2);
		if (fd2 >= 0)
			close(fd2);
		if (ret) {
			dxl_err_prefix("fencing abandoned connections");
			goto err;
		}
	}
	uint64_t cid = atomic_fetch_add(&c->tf->next_conn_id, 1) + 1;
	struct tcp_hs r;
	if ((ret = send_handshake(c, fd, key, remote_ctx, cid, deadline, tmo, &r)))
		goto err;
	if (r.status == TCP_HS_NOENT) {
		ret = dxl_err_set(DXL_E_NOENT, "peer node %u has no ctx %u", r.node,
				  remote_ctx);
		goto err;
	}
	if (r.status != TCP_HS_OK) {
		ret = dxl_err_set(DXL_E_PROTO, "handshake status %u", r.status);
		goto err;
	}
	struct tcp_conn *conn = tcp_conn_new(c->tf, fd, false);
	if (!conn) {
		ret = dxl_err_set(DXL_E_NOMEM, "out of memory");
		goto err;
	}
	conn->id = cid;
	snprintf(conn->key, sizeof(conn->key), "%s", key);
	struct tcp_qp *qp = qp_alloc(c, conn);
	if (!qp) {
		conn->fd = -1;
		tcp_conn_put(conn);
		ret = dxl_err_set(DXL_E_NOMEM, "out of memory");
		goto err;
	}
	qp->base.remote_node = r.node;
	qp->base.remote_ctx = remote_ctx;
	conn->qp = qp;
	conn->epfd = c->ep;
	conn->want_in = true;
	conn->ep_mask = EPOLLIN;
	struct epoll_event ev = {.events = conn->ep_mask, .data.ptr = conn};
	if (epoll_ctl(c->ep, EPOLL_CTL_ADD, fd, &ev)) {
		ret = dxl_err_errno(errno, "epoll_ctl");
		conn->fd = -1;
		tcp_conn_put(conn);
		free(qp->sq);
		free(qp);
		goto err;
	}
	c->n_sock++;
	list_add(c, qp);
	*out = &qp->base;
	return 0;
err:
	close(fd);
	return ret;
}
