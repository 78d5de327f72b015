/* tcp_nic.c -- the NIC thread: accepts QPs, serves one-sided requests and SENDs */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sched.h>

#include "fabric/tcp_internal.h"

/*
 * One NIC thread per fabric. It owns the listener and the input side of
 * every passive connection: it runs the handshake, then executes the
 * requests of each connection strictly in arrival (= posting) order, one
 * at a time, so RC ordering holds per QP: an atomic or a WRITE is done
 * before the next request is even decoded, and a READ after a WRITE sees
 * it. Answers of one batch of input are built in tf->stage and written with
 * one send(). The thread never blocks on a peer: sockets are non-blocking,
 * output that does not fit waits in conn->out, and a connection whose
 * output is over TCP_OUT_HIGH is not read until it drains.
 *
 * Idle: spin on epoll_wait(0) for cfg.idle_spin_us after the last event,
 * then block in epoll_wait until the next deadline (handshake, parked SEND,
 * closing connection) or forever.
 */

void tcp_nic_kick(struct tcp_fab *tf)
{
	uint64_t one = 1;
	ssize_t r = write(tf->kick_fd, &one, sizeof(one));
	(void)r; /* EAGAIN: the counter is already non-zero, enough */
}

static void set_deadline(struct tcp_fab *tf, struct tcp_conn *conn,
			 uint64_t when)
{
	if (!conn->deadline_ns && when)
		tf->n_timed++;
	else if (conn->deadline_ns && !when)
		tf->n_timed--;
	conn->deadline_ns = when;
}

static uint64_t timeout_ns(const struct tcp_fab *tf)
{
	return (uint64_t)tf->f->cfg.timeout_ms * 1000000ull;
}

/* recompute want_in and the epoll mask; caller holds conn->mu */
static void update_in_locked(struct tcp_conn *conn)
{
	conn->want_in = conn->state != TCP_CONN_CLOSED && !conn->parked &&
			!conn->out_blocked;
	tcp_conn_update_mask_locked(conn);
}

static void nic_close(struct tcp_fab *tf, struct tcp_conn *conn,
		      const char *why)
{
	if (conn->state == TCP_CONN_CLOSED)
		return;
	DXL_DEBUG("fabric tcp: closing passive connection %llu: %s",
		  (unsigned long long)conn->id, why);
	set_deadline(tf, conn, 0);
	if (conn->parked) {
		conn->parked = false;
		atomic_fetch_sub(&tf->nparked, 1);
	}
	conn->state = TCP_CONN_CLOSED;
	pthread_mutex_lock(&conn->mu);
	struct tcp_ctx *c = conn->ctx;
	if (c && conn->qp) {
		struct tcp_ev ev = {.type = TCP_EV_DOWN};
		ev.wc.qp = &conn->qp->base;
		pthread_mutex_lock(&c->lock);
		tcp_ctx_push_ev_locked(c, &ev);
		pthread_mutex_unlock(&c->lock);
		tcp_ctx_wake(c);
	}
	if (conn->fd >= 0) {
		epoll_ctl(tf->ep, EPOLL_CTL_DEL, conn->fd, NULL);
		close(conn->fd);
		conn->fd = -1;
	}
	tcp_buf_consume(&conn->out, conn->out.len);
	conn->want_in = false;
	pthread_mutex_unlock(&conn->mu);
	tcp_buf_free(&conn->in);
	/* unlink now, drop our reference after this epoll batch (its events
	 * may still name the connection) */
	if (conn->prev)
		conn->prev->next = conn->next;
	else
		tf->conns = conn->next;
	if (conn->next)
		conn->next->prev = conn->prev;
	conn->next = conn->prev = NULL;
	conn->closed_next = tf->closed;
	tf->closed = conn;
}

static void nic_accept(struct tcp_fab *tf)
{
	for (int i = 0; i < 64; i++) {
		int fd = accept4(tf->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				/* the listener stays readable: pause it, or we spin */
				DXL_WARN("fabric tcp: accept: %s; not accepting for "
					 "100 ms", strerror(errno));
				struct epoll_event ev = {.events = 0,
							 .data.ptr = &tf->lfd};
				epoll_ctl(tf->ep, EPOLL_CTL_MOD, tf->lfd, &ev);
				tf->accept_resume_ns = dxl_now_ns() + 100000000ull;
			} else if (errno != EAGAIN && errno != EWOULDBLOCK) {
				DXL_WARN("fabric tcp: accept: %s", strerror(errno));
			}
			return;
		}
		tcp_set_sockopts(fd);
		struct tcp_conn *conn = tcp_conn_new(tf, fd, true);
		if (!conn) {
			DXL_WARN("fabric tcp: out of memory accepting a connection");
			close(fd);
			continue;
		}
		conn->state = TCP_CONN_HS;
		conn->epfd = tf->ep;
		conn->want_in = true;
		conn->ep_mask = EPOLLIN;
		conn->alive_ns = dxl_now_ns();
		struct epoll_event ev = {.events = conn->ep_mask, .data.ptr = conn};
		if (epoll_ctl(tf->ep, EPOLL_CTL_ADD, fd, &ev)) {
			DXL_WARN("fabric tcp: epoll_ctl ADD: %s", strerror(errno));
			tcp_conn_put(conn);
			continue;
		}
		set_deadline(tf, conn, dxl_now_ns() + timeout_ns(tf));
		conn->next = tf->conns;
		if (tf->conns)
			tf->conns->prev = conn;
		tf->conns = conn;
	}
}

/* ---- answers ---------------------------------------------------------------- */

/* reserve room for an answer of `len` payload bytes; NULL: out of memory */
static uint8_t *stage_resp(struct tcp_fab *tf, uint8_t rop, uint32_t seq,
			   uint8_t status, uint32_t len)
{
	if (tcp_buf_room(&tf->stage, TCP_FRAME_SIZE + (size_t)len))
		return NULL;
	struct tcp_frame fr = {.op = TCP_OP_RESP, .flags = status, .rop = rop,
			       .len = len, .seq = seq};
	uint8_t *p = tcp_buf_tail(&tf->stage);
	tcp_frame_encode(&fr, p);
	tf->stage.len += TCP_FRAME_SIZE + (size_t)len;
	return p + TCP_FRAME_SIZE;
}

/* a request failed: answer it, then discard everything and close (QP error) */
static void nic_fail(struct tcp_fab *tf, struct tcp_conn *conn, uint8_t rop,
		     uint32_t seq, uint8_t status)
{
	stage_resp(tf, rop, seq, status, 0);
	conn->state = TCP_CONN_DRAIN;
	conn->w_active = false;
	tcp_buf_consume(&conn->in, conn->in.len);
	if (conn->parked) {
		conn->parked = false;
		atomic_fetch_sub(&tf->nparked, 1);
	}
	set_deadline(tf, conn, dxl_now_ns() + timeout_ns(tf));
}

/*
 * Move tf->stage into conn->out and write it with one send(). Returns -1
 * if the socket failed.
 */
static int nic_flush(struct tcp_fab *tf, struct tcp_conn *conn)
{
	int ret = 0;
	/* group commit: the flush READs staged below promise durability; make
	 * good on all of them at once before any of their answers leaves
	 * (under mr_lock, as every use of the noted ranges: a region
	 * deregistered meanwhile ran its own) */
	pthread_mutex_lock(&tf->mr_lock);
	tcp_pf_run_persist(tf);
	pthread_mutex_unlock(&tf->mr_lock);
	pthread_mutex_lock(&conn->mu);
	if (conn->fd < 0) {
		tcp_buf_consume(&tf->stage, tf->stage.len);
		pthread_mutex_unlock(&conn->mu);
		return -1;
	}
	if (tf->stage.len) {
		if (!conn->out.len) {
			/* the common case: write straight from the stage */
			ssize_t n = send(conn->fd, tcp_buf_data(&tf->stage),
					 tf->stage.len, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n > 0)
				tcp_buf_consume(&tf->stage, (size_t)n);
			else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
				 errno != EINTR)
				ret = -1;
			if (ret == 0 && tf->stage.len) {
				/* the rest waits in out: swap buffers, no copy */
				struct tcp_buf t = conn->out;
				conn->out = tf->stage;
				tf->stage = t;
			}
			tcp_buf_consume(&tf->stage, tf->stage.len);
			tcp_conn_update_mask_locked(conn);
		} else {
			if (tcp_buf_append(&conn->out, tcp_buf_data(&tf->stage),
					   tf->stage.len))
				ret = -1;
			tcp_buf_consume(&tf->stage, tf->stage.len);
			if (tcp_conn_flush_locked(conn))
				ret = -1;
		}
	} else if (conn->out.len) {
		/* writable again (EPOLLOUT): go on with what waits */
		if (tcp_conn_flush_locked(conn))
			ret = -1;
	}
	conn->out_blocked = conn->out.len > TCP_OUT_HIGH;
	update_in_locked(conn);
	pthread_mutex_unlock(&conn->mu);
	return ret;
}

/* ---- one-sided requests ----------------------------------------------------- */

/*
 * tcp_dma_read -- copy a READ's bytes the way a NIC's DMA sees memory: each
 * 64-byte cache line at one moment (a PCIe read of a line is served
 * coherently), not byte by byte while the owner's CPU writes it. A line is
 * copied, then compared with memory; a difference means a store landed
 * during the copy, and the line is copied again. Equal copies are the line
 * at one moment (readers that check per-line versions, docs/engine.md, rely
 * on it: a plain memcpy let torn records through, 3 in 360000 READs racing
 * a CPU writer). A line that never stays still for max_tries copies fails
 * the copy: bytes that were never in memory together are never returned.
 */
bool tcp_dma_read(uint8_t *dst, const uint8_t *src, size_t len,
		  unsigned max_tries)
{
	while (len) {
		size_t seg = 64 - ((uintptr_t)src & 63);
		if (seg > len)
			seg = len;
		bool same = false;
		for (unsigned tries = 0; tries < max_tries && !same; tries++) {
			if (tries >= 64)
				dxl_cpu_relax(); /* let the writer finish its line */
			memcpy(dst, src, seg);
			same = memcmp(dst, src, seg) == 0;
		}
		if (!same)
			return false;
		dst += seg;
		src += seg;
		len -= seg;
	}
	return true;
}

static void nic_read(struct tcp_fab *tf, struct tcp_conn *conn,
		     const struct tcp_frame *fr)
{
	if (tcp_buf_room(&tf->stage, TCP_FRAME_SIZE + (size_t)fr->len)) {
		DXL_WARN("fabric tcp: no memory for a READ of %u bytes", fr->len);
		nic_fail(tf, conn, TCP_OP_READ, fr->seq, TCP_ST_ACCESS);
		return;
	}
	bool ok = true, copied = true;
	uint8_t *dst = tcp_buf_tail(&tf->stage) + TCP_FRAME_SIZE;
	pthread_mutex_lock(&tf->mr_lock);
	/* a zero-length READ checks no rkey (as in IB) but still flushes */
	if (fr->len) {
		ok = tcp_mr_find_locked(tf, fr->rkey, fr->raddr, fr->len,
					DXL_MR_REMOTE_READ) != NULL;
		if (ok) {
			TCP_DMA_BEGIN();
			copied = tcp_dma_read(dst, (const uint8_t *)(uintptr_t)fr->raddr,
					      fr->len, TCP_DMA_TRIES);
			TCP_DMA_END();
		}
	}
	if (ok && copied && conn->dirty.n) {
		/* H9 (000 L665-675): this READ flushes the QP's earlier WRITEs;
		 * done before the answer leaves, so its completion implies it
		 * (the persist ranges are noted under mr_lock: dereg drains
		 * them) */
		pthread_mutex_lock(&tf->pf_lock);
		tcp_pf_persist_locked(tf, conn);
		tcp_pf_flush_locked(tf, conn);
		pthread_mutex_unlock(&tf->pf_lock);
	}
	pthread_mutex_unlock(&tf->mr_lock);
	if (!ok) {
		nic_fail(tf, conn, TCP_OP_READ, fr->seq, TCP_ST_ACCESS);
		return;
	}
	if (!copied) {
		DXL_WARN("fabric tcp: READ of %u bytes at %#llx from node %u: a "
			 "line kept changing for %u copies: READ failed",
			 fr->len, (unsigned long long)fr->raddr, conn->peer_node,
			 TCP_DMA_TRIES);
		nic_fail(tf, conn, TCP_OP_READ, fr->seq, TCP_ST_OPERR);
		return;
	}
	stage_resp(tf, TCP_OP_READ, fr->seq, TCP_ST_OK, fr->len);
}

static void nic_atomic(struct tcp_fab *tf, struct tcp_conn *conn,
		       const struct tcp_frame *fr)
{
	uint64_t old = 0;
	bool ok = false;
	if (!(fr->raddr & 7)) {
		pthread_mutex_lock(&tf->mr_lock);
		/* a flush READ before this atomic on the same QP promised
		 * durability: keep it before the atomic executes, since an
		 * atomic is what tells others (an unlock after a write-back:
		 * lock word free => the record is durable; docs/engine.md) */
		tcp_pf_run_persist(tf);
		struct dxl_mr *mr = tcp_mr_find_locked(tf, fr->rkey, fr->raddr, 8,
						       DXL_MR_REMOTE_ATOMIC);
		if (mr) {
			uint64_t *p = (uint64_t *)(uintptr_t)fr->raddr;
			bool pers = mr->access & DXL_MR_PERSISTENT;
			ok = true;
			if (pers) {
				pthread_mutex_lock(&tf->pf_lock);
				if (tcp_pf_before_write_locked(tf, conn, mr,
							       fr->raddr, 8))
					ok = false;
			}
			/* atomic against every other fabric atomic on the word,
			 * whichever QP or node it comes from */
			TCP_DMA_BEGIN();
			if (ok && fr->op == TCP_OP_CAS) {
				old = fr->cmp_add;
				__atomic_compare_exchange_n(p, &old, fr->swap, false,
							    __ATOMIC_SEQ_CST,
							    __ATOMIC_SEQ_CST);
			} else if (ok) {
				old = __atomic_fetch_add(p, fr->cmp_add,
							 __ATOMIC_SEQ_CST);
			}
			TCP_DMA_END();
			if (pers)
				pthread_mutex_unlock(&tf->pf_lock);
		}
		pthread_mutex_unlock(&tf->mr_lock);
	}
	if (!ok) {
		nic_fail(tf, conn, fr->op, fr->seq, TCP_ST_ACCESS);
		return;
	}
	uint8_t *p = stage_resp(tf, fr->op, fr->seq, TCP_ST_OK, 8);
	if (p)
		dxl_put_le64(p, old);
}

static void nic_write_end(struct tcp_fab *tf, struct tcp_conn *conn)
{
	conn->w_active = false;
	if (!conn->w_ok)
		nic_fail(tf, conn, TCP_OP_WRITE, conn->w_seq, TCP_ST_ACCESS);
	else if (conn->w_flags & TCP_F_SIGNALED)
		stage_resp(tf, TCP_OP_WRITE, conn->w_seq, TCP_ST_OK, 0);
}

static void nic_write_begin(struct tcp_fab *tf, struct tcp_conn *conn,
			    const struct tcp_frame *fr)
{
	conn->w_seq = fr->seq;
	conn->w_flags = fr->flags;
	conn->w_rkey = fr->rkey;
	conn->w_addr = fr->raddr;
	conn->w_left = fr->len;
	conn->w_ok = true;
	conn->w_active = true;
	conn->w_line = UINT64_MAX;
	if (!fr->len) { /* zero length: no rkey check, nothing placed */
		nic_write_end(tf, conn);
		return;
	}
	/* check the whole range first: a bad WRITE leaves the target untouched */
	pthread_mutex_lock(&tf->mr_lock);
	conn->w_ok = tcp_mr_find_locked(tf, fr->rkey, fr->raddr, fr->len,
					DXL_MR_REMOTE_WRITE) != NULL;
	pthread_mutex_unlock(&tf->mr_lock);
}

/*
 * place_armed -- place n arrived bytes of conn's WRITE into persistent mr
 * while a power failure is armed: line by line, each line a step
 * (tcp_pf_tick) counted once per WRITE (a line split over two pieces
 * counts once). When it strikes at a line, each remaining line of this
 * piece is placed or not by a seeded coin, then the power fails. Caller
 * holds mr_lock and pf_lock. A journal without memory refuses the WRITE.
 */
static void place_armed(struct tcp_fab *tf, struct tcp_conn *conn,
			struct dxl_mr *mr, size_t n)
{
	const uint8_t *src = tcp_buf_data(&conn->in);
	uint64_t addr = conn->w_addr, end = conn->w_addr + n;
	while (addr < end) {
		uint64_t line = addr & ~63ull;
		uint64_t seg = DXL_MIN(end, line + 64) - addr;
		if (line != conn->w_line) {
			conn->w_line = line;
			if (tcp_pf_tick(tf)) {
				uint32_t lines = 0, placed = 0;
				for (; addr < end; addr = line + 64, line = addr) {
					seg = DXL_MIN(end, line + 64) - addr;
					lines++;
					if (!tcp_pf_coin(tf) ||
					    tcp_pf_before_write_locked(tf, conn, mr,
								       addr, seg))
						continue;
					TCP_DMA_BEGIN();
					memcpy((void *)(uintptr_t)addr,
					       src + (addr - conn->w_addr), seg);
					TCP_DMA_END();
					placed++;
				}
				tcp_pf_strike(tf, "inside", true, lines, placed);
			}
		}
		if (tcp_pf_before_write_locked(tf, conn, mr, addr, seg)) {
			DXL_WARN("fabric tcp: no memory for the power-failure "
				 "journal: WRITE refused");
			conn->w_ok = false;
			return;
		}
		TCP_DMA_BEGIN();
		memcpy((void *)(uintptr_t)addr, src + (addr - conn->w_addr), seg);
		TCP_DMA_END();
		addr += seg;
	}
}

/*
 * Place the WRITE payload that has arrived. Every piece is checked again
 * (the region may have been deregistered meanwhile). Returns false when it
 * needs more input.
 */
static bool nic_write_payload(struct tcp_fab *tf, struct tcp_conn *conn)
{
	size_t n = DXL_MIN(conn->in.len, (size_t)conn->w_left);
	if (!n)
		return false;
	if (conn->w_ok) {
		pthread_mutex_lock(&tf->mr_lock);
		struct dxl_mr *mr = tcp_mr_find_locked(tf, conn->w_rkey,
						       conn->w_addr, n,
						       DXL_MR_REMOTE_WRITE);
		void *dst = (void *)(uintptr_t)conn->w_addr;
		if (!mr) {
			conn->w_ok = false;
		} else if (mr->access & DXL_MR_PERSISTENT) {
			pthread_mutex_lock(&tf->pf_lock);
			if (tf->pf_armed) {
				/* never returns if the power fails in it */
				place_armed(tf, conn, mr, n);
			} else if (tcp_pf_before_write_locked(tf, conn, mr,
							      conn->w_addr, n)) {
				DXL_WARN("fabric tcp: no memory for the power-failure "
					 "journal: WRITE refused");
				conn->w_ok = false;
			} else {
				TCP_DMA_BEGIN();
				memcpy(dst, tcp_buf_data(&conn->in), n);
				TCP_DMA_END();
			}
			pthread_mutex_unlock(&tf->pf_lock);
		} else {
			TCP_DMA_BEGIN();
			memcpy(dst, tcp_buf_data(&conn->in), n);
			TCP_DMA_END();
		}
		pthread_mutex_unlock(&tf->mr_lock);
	}
	tcp_buf_consume(&conn->in, n);
	conn->w_addr += n;
	conn->w_left -= (uint32_t)n;
	if (!conn->w_left)
		nic_write_end(tf, conn);
	return true;
}

/* ---- two-sided ---------------------------------------------------------------- */

/*
 * The SEND at the head of conn's input found no receive buffer: stop
 * reading the connection until one is posted (like an RNR NAK). The caller
 * has counted it in tf->nparked under c->lock already (see tcp_post_recv).
 */
static void nic_park(struct tcp_fab *tf, struct tcp_conn *conn)
{
	/* RNR: wait for a receive buffer, but not past half the timeout so
	 * that the sender hears REM_OP_ERR before it gives up on us. The
	 * clock starts at the first attempt, not at each retry. */
	if (!conn->deadline_ns) {
		uint64_t wait = timeout_ns(tf) / 2;
		set_deadline(tf, conn, dxl_now_ns() + (wait ? wait : 1));
	}
}

static void nic_unpark(struct tcp_fab *tf, struct tcp_conn *conn)
{
	if (conn->parked) {
		conn->parked = false;
		atomic_fetch_sub(&tf->nparked, 1);
	}
	set_deadline(tf, conn, 0);
}

/*
 * A whole SEND frame is in conn->in: deliver it to the ctx's oldest receive
 * buffer. Returns false if it stays parked (no buffer).
 */
static bool nic_send(struct tcp_fab *tf, struct tcp_conn *conn,
		     const struct tcp_frame *fr)
{
	const uint8_t *payload = tcp_buf_data(&conn->in) + TCP_FRAME_SIZE;
	bool detached = false, too_big = false;
	struct tcp_srq_ent ent;
	/* as for atomics: a message may announce what a flush READ before it
	 * made durable */
	pthread_mutex_lock(&tf->mr_lock);
	tcp_pf_run_persist(tf);
	pthread_mutex_unlock(&tf->mr_lock);
	/* conn->mu keeps the ctx, its QP and its buffers alive: ctx and QP
	 * teardown detach the connection under it */
	pthread_mutex_lock(&conn->mu);
	struct tcp_ctx *c = conn->ctx;
	if (!c || !conn->qp) {
		detached = true;
	} else {
		pthread_mutex_lock(&c->lock);
		bool have = tcp_srq_pop_locked(c, &ent);
		if (!have && !conn->parked) {
			/* counted under c->lock: a buffer posted after our pop
			 * sees the count and kicks us (tcp_post_recv) */
			conn->parked = true;
			atomic_fetch_add(&tf->nparked, 1);
		}
		pthread_mutex_unlock(&c->lock);
		if (!have) {
			pthread_mutex_unlock(&conn->mu);
			nic_park(tf, conn);
			return false;
		}
		struct tcp_ev ev = {.type = TCP_EV_RECV};
		ev.wc.wr_id = ent.wr_id;
		ev.wc.opcode = DXL_WC_RECV;
		ev.wc.byte_len = fr->len;
		ev.wc.qp = &conn->qp->base;
		if (fr->len > ent.len) {
			too_big = true;
			ev.wc.status = DXL_WC_LOCAL_ERR;
		} else {
			ev.wc.status = DXL_WC_SUCCESS;
			if (fr->len)
				memcpy(ent.buf, payload, fr->len);
		}
		pthread_mutex_lock(&c->lock);
		tcp_ctx_push_ev_locked(c, &ev);
		pthread_mutex_unlock(&c->lock);
		tcp_ctx_wake(c);
	}
	pthread_mutex_unlock(&conn->mu);
	nic_unpark(tf, conn);
	tcp_buf_consume(&conn->in, TCP_FRAME_SIZE + (size_t)fr->len);
	conn->rx_seq++;
	if (detached) {
		nic_close(tf, conn, "SEND on a deleted QP");
	} else if (too_big) {
		nic_fail(tf, conn, TCP_OP_SEND, fr->seq, TCP_ST_OPERR);
	} else if (fr->flags & TCP_F_SIGNALED) {
		stage_resp(tf, TCP_OP_SEND, fr->seq, TCP_ST_OK, 0);
	}
	return true;
}

/* an answer to a SEND posted on the passive QP: hand it to the owner */
static void nic_resp(struct tcp_conn *conn, const struct tcp_frame *fr)
{
	pthread_mutex_lock(&conn->mu);
	struct tcp_ctx *c = conn->ctx;
	if (c && conn->qp) {
		struct tcp_ev ev = {.type = TCP_EV_RESP, .status = fr->flags,
				    .seq = fr->seq};
		ev.wc.qp = &conn->qp->base;
		pthread_mutex_lock(&c->lock);
		tcp_ctx_push_ev_locked(c, &ev);
		pthread_mutex_unlock(&c->lock);
		tcp_ctx_wake(c);
	}
	pthread_mutex_unlock(&conn->mu);
}

/* ---- parsing ------------------------------------------------------------------ */

static const char *bad_frame(const struct tcp_fab *tf, const struct tcp_conn *conn,
			     const struct tcp_frame *fr)
{
	if (fr->zero)
		return "reserved byte set";
	if (fr->op == TCP_OP_RESP) {
		if (fr->rop != TCP_OP_SEND || fr->len || fr->flags > TCP_ST_OPERR)
			return "bad answer";
		return NULL;
	}
	if (fr->op < TCP_OP_READ || fr->op > TCP_OP_SEND)
		return "unknown opcode";
	if (fr->rop || (fr->flags & ~TCP_F_SIGNALED))
		return "bad flags";
	if (fr->seq != conn->rx_seq)
		return "sequence gap";
	switch (fr->op) {
	case TCP_OP_READ:
	case TCP_OP_WRITE:
		if (fr->len > TCP_MAX_RDMA)
			return "length over the READ/WRITE limit";
		break;
	case TCP_OP_CAS:
	case TCP_OP_FAA:
		if (fr->len != 8)
			return "atomic length is not 8";
		break;
	case TCP_OP_SEND:
		if (fr->len > tf->f->cfg.max_msg)
			return "SEND over max_msg";
		break;
	}
	return NULL;
}

enum parse_stop {
	PARSE_INPUT,  /* needs more input (or the conn is done) */
	PARSE_STAGED, /* the stage is full: flush and go on */
};

/* the initiator has reset the socket (an error is pending on it), whatever
 * data is still unread before the reset */
static bool sock_reset(int fd)
{
	struct pollfd p = {.fd = fd, .events = 0};
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLNVAL));
}

/*
 * Before executing input that may have waited (a parked SEND, a stalled
 * NIC thread, a connection not read while its output was blocked): has the
 * initiator abandoned the connection? An initiator that fails a QP with
 * requests outstanding resets it (tcp_qp.c conn_down) after completing
 * them FLUSHED or PEER_UNREACHABLE: they must not execute after that. The
 * epoll events tell for fresh input (EPOLLERR); this syscall runs only when
 * the last such sign is older than timeout_ms/4.
 */
static bool nic_not_reset(struct tcp_fab *tf, struct tcp_conn *conn)
{
	if (conn->peer_reset)
		return false;
	uint64_t now = dxl_now_ns();
	if (now - conn->alive_ns < timeout_ns(tf) / 4)
		return true;
	if (conn->fd >= 0 && sock_reset(conn->fd)) {
		conn->peer_reset = true;
		return false;
	}
	conn->alive_ns = now;
	return true;
}

static enum parse_stop nic_parse(struct tcp_fab *tf, struct tcp_conn *conn)
{
	unsigned n = 0;
	while (conn->state == TCP_CONN_OPEN && !conn->parked) {
		if ((n++ & 63) == 0 && !nic_not_reset(tf, conn))
			return PARSE_INPUT; /* the caller closes it */
		if (atomic_load_explicit(&tf->pf_dead, memory_order_relaxed))
			return PARSE_INPUT; /* power failed: execute nothing */
		if (tf->stage.len >= TCP_OUT_HIGH)
			return PARSE_STAGED;
		if (conn->w_active) {
			if (!nic_write_payload(tf, conn))
				return PARSE_INPUT;
			continue;
		}
		if (conn->in.len < TCP_FRAME_SIZE)
			return PARSE_INPUT;
		struct tcp_frame fr;
		tcp_frame_decode(tcp_buf_data(&conn->in), &fr);
		const char *why = bad_frame(tf, conn, &fr);
		if (why) {
			DXL_WARN("fabric tcp: malformed frame from node %u (op %u, "
				 "len %u, seq %u): %s; closing the connection",
				 conn->peer_node, fr.op,
				 fr.len, fr.seq, why);
			nic_close(tf, conn, why);
			return PARSE_INPUT;
		}
		if (fr.op == TCP_OP_SEND) {
			size_t need = TCP_FRAME_SIZE + (size_t)fr.len;
			if (conn->in.len < need) {
				if (tcp_buf_room(&conn->in, need - conn->in.len)) {
					nic_close(tf, conn, "out of memory");
					return PARSE_INPUT;
				}
				return PARSE_INPUT;
			}
			if (conn->dirty.n && tcp_pf_tick(tf))
				tcp_pf_strike(tf, "between requests", false, 0, 0);
			if (!nic_send(tf, conn, &fr))
				return PARSE_INPUT; /* parked */
			continue;
		}
		tcp_buf_consume(&conn->in, TCP_FRAME_SIZE);
		if (fr.op == TCP_OP_RESP) {
			nic_resp(conn, &fr);
			continue;
		}
		/* an armed power failure may strike before any request of a QP
		 * with un-flushed lines: e.g. between a record's WRITE and its
		 * flush READ. (Before a request of a QP with none, a strike
		 * would find what the next counted step finds: not counted) */
		if (conn->dirty.n && tcp_pf_tick(tf))
			tcp_pf_strike(tf, "between requests", false, 0, 0);
		conn->rx_seq++;
		switch (fr.op) {
		case TCP_OP_READ:
			nic_read(tf, conn, &fr);
			break;
		case TCP_OP_WRITE:
			nic_write_begin(tf, conn, &fr);
			break;
		default:
			nic_atomic(tf, conn, &fr);
			break;
		}
	}
	return PARSE_INPUT;
}

/*
 * The initiator (nonce) has closed its connection `id` to us: if we still
 * serve it, close it now, its unexecuted requests discarded (those in our
 * input buffer and those still in the socket), before its initiator's new
 * connection is answered.
 */
static void nic_kill(struct tcp_fab *tf, const struct tcp_conn *by,
		     uint64_t nonce, uint64_t id)
{
	struct tcp_conn *next;
	for (struct tcp_conn *c = tf->conns; c; c = next) {
		next = c->next;
		if (c == by || c->peer_nonce != nonce || c->peer_conn != id)
			continue;
		DXL_DEBUG("fabric tcp: connection %llu of node %u abandoned by its "
			  "initiator: %zu bytes of input discarded",
			  (unsigned long long)c->id, c->peer_node, c->in.len);
		nic_close(tf, c, "abandoned by its initiator");
	}
}

static void nic_handshake(struct tcp_fab *tf, struct tcp_conn *conn)
{
	if (conn->in.len < TCP_HS_SIZE)
		return;
	struct dxl_fabric *f = tf->f;
	struct tcp_hs h;
	const uint8_t *p = tcp_buf_data(&conn->in);
	tcp_hs_decode(p, &h);
	if (h.magic != TCP_MAGIC) {
		DXL_WARN("fabric tcp: connection with a bad handshake (magic "
			 "0x%08x): closed", h.magic);
		nic_close(tf, conn, "bad handshake magic");
		return;
	}
	if (h.version == TCP_VERSION) {
		if (conn->in.len < TCP_HS_REQ_SIZE)
			return;
		tcp_hs_req_decode(p, &h);
		if (!h.nonce || !h.conn || h.nkill > TCP_HS_MAX_KILL) {
			DXL_WARN("fabric tcp: handshake of node %u with nonce %#llx, "
				 "connection %llu, %u abandoned: closed", h.node,
				 (unsigned long long)h.nonce,
				 (unsigned long long)h.conn, h.nkill);
			nic_close(tf, conn, "bad handshake");
			return;
		}
		size_t need = TCP_HS_REQ_SIZE + 8 * (size_t)h.nkill;
		if (conn->in.len < need)
			return;
		/* fence first: nothing of an abandoned connection executes
		 * after this connection exists */
		for (uint32_t i = 0; i < h.nkill; i++)
			nic_kill(tf, conn, h.nonce,
				 dxl_get_le64(p + TCP_HS_REQ_SIZE + 8 * (size_t)i));
		conn->peer_nonce = h.nonce;
		conn->peer_conn = h.conn;
		tcp_buf_consume(&conn->in, need);
	} else {
		tcp_buf_consume(&conn->in, TCP_HS_SIZE);
	}
	conn->peer_node = h.node;
	struct tcp_hs r = {.magic = TCP_MAGIC, .version = TCP_VERSION,
			   .status = TCP_HS_OK, .node = f->cfg.node_id,
			   .ctx = h.ctx};
	if (h.version != TCP_VERSION) {
		DXL_WARN("fabric tcp: node %u speaks protocol version %u, we "
			 "speak %u: refused", h.node, h.version, TCP_VERSION);
		r.status = TCP_HS_VERSION;
	} else {
		/* f->lock: the ctx cannot be deleted while we hand it the QP;
		 * fabric.c unpublishes a ctx under f->lock before deleting it */
		pthread_mutex_lock(&f->lock);
		struct dxl_ctx *bc = h.ctx < DXL_FABRIC_MAX_CTX ? f->ctx[h.ctx] : NULL;
		if (!bc) {
			r.status = TCP_HS_NOENT;
		} else {
			struct tcp_ctx *c = (struct tcp_ctx *)bc;
			struct tcp_qp *qp = tcp_qp_new_passive(c, conn, h.node,
							       h.src_ctx);
			if (!qp) {
				pthread_mutex_unlock(&f->lock);
				DXL_WARN("fabric tcp: out of memory for a passive QP");
				nic_close(tf, conn, "out of memory");
				return;
			}
			atomic_fetch_add(&conn->ref, 1); /* the QP's reference */
			pthread_mutex_lock(&conn->mu);
			conn->ctx = c;
			conn->qp = qp;
			pthread_mutex_lock(&c->lock);
			qp->next = c->handover;
			c->handover = qp;
			atomic_fetch_add(&c->pending, 1);
			pthread_mutex_unlock(&c->lock);
			pthread_mutex_unlock(&conn->mu);
		}
		pthread_mutex_unlock(&f->lock);
	}
	set_deadline(tf, conn, 0);
	if (tcp_buf_room(&tf->stage, TCP_HS_SIZE) == 0) {
		tcp_hs_encode(&r, tcp_buf_tail(&tf->stage));
		tf->stage.len += TCP_HS_SIZE;
	}
	if (r.status == TCP_HS_OK) {
		conn->state = TCP_CONN_OPEN;
	} else {
		conn->state = TCP_CONN_DRAIN;
		tcp_buf_consume(&conn->in, conn->in.len);
		set_deadline(tf, conn, dxl_now_ns() + timeout_ns(tf));
	}
}

/*
 * Service a connection: read once if it is readable and wanted, execute
 * what is complete, write the answers. Called on epoll events, after a
 * kick (receive buffer posted) and at deadlines.
 */
static void nic_service(struct tcp_fab *tf, struct tcp_conn *conn,
			bool readable)
{
	bool eof = false;
	if (conn->state == TCP_CONN_CLOSED)
		return;
	if (readable && conn->want_in) {
		if (tcp_buf_room(&conn->in, 4096)) {
			nic_close(tf, conn, "out of memory");
			return;
		}
		if (conn->in.len < TCP_IN_CAP && tcp_buf_free_bytes(&conn->in) <
						       TCP_IN_CAP - conn->in.len)
			tcp_buf_room(&conn->in, TCP_IN_CAP - conn->in.len);
		ssize_t n = recv(conn->fd, tcp_buf_tail(&conn->in),
				 tcp_buf_free_bytes(&conn->in), MSG_DONTWAIT);
		if (n > 0) {
			conn->in.len += (size_t)n;
			atomic_store_explicit(&conn->last_rx_ns, dxl_now_ns(),
					      memory_order_relaxed);
		} else if (n == 0) {
			eof = true; /* an orderly close: what came before runs */
		} else if (errno != EAGAIN && errno != EWOULDBLOCK &&
			   errno != EINTR) {
			conn->peer_reset = true;
		}
	}
	if (conn->peer_reset) {
		/* the initiator abandoned the connection: it completed what we
		 * have not executed as FLUSHED or PEER_UNREACHABLE, so that
		 * never runs */
		if (conn->in.len || conn->w_active)
			DXL_DEBUG("fabric tcp: connection %llu of node %u reset by "
				  "its initiator: %zu unexecuted bytes discarded",
				  (unsigned long long)conn->id, conn->peer_node,
				  conn->in.len);
		nic_close(tf, conn, "reset by the initiator");
		return;
	}
	if (conn->state == TCP_CONN_HS)
		nic_handshake(tf, conn);
	if (conn->state == TCP_CONN_DRAIN)
		tcp_buf_consume(&conn->in, conn->in.len);
	for (;;) {
		enum parse_stop st = PARSE_INPUT;
		if (conn->state == TCP_CONN_OPEN)
			st = nic_parse(tf, conn);
		if (conn->state == TCP_CONN_CLOSED) {
			tcp_buf_consume(&tf->stage, tf->stage.len);
			return;
		}
		if (conn->peer_reset) {
			/* answers of what ran before nobody reads; the rest of
			 * the input never runs */
			tcp_buf_consume(&tf->stage, tf->stage.len);
			nic_close(tf, conn, "reset by the initiator");
			return;
		}
		if (nic_flush(tf, conn)) {
			nic_close(tf, conn, "send failed");
			return;
		}
		if (st != PARSE_STAGED || conn->out_blocked)
			break;
	}
	if (conn->state == TCP_CONN_DRAIN) {
		pthread_mutex_lock(&conn->mu);
		bool flushed = conn->out.len == 0;
		if (flushed && conn->fd >= 0)
			shutdown(conn->fd, SHUT_WR); /* FIN after the answer */
		pthread_mutex_unlock(&conn->mu);
	}
	if (eof)
		nic_close(tf, conn, "peer closed");
}

/* a receive buffer was posted somewhere: retry the parked SENDs */
static void nic_retry_parked(struct tcp_fab *tf)
{
	if (!atomic_load(&tf->nparked))
		return;
	struct tcp_conn *next;
	for (struct tcp_conn *conn = tf->conns; conn; conn = next) {
		next = conn->next; /* conn may close */
		if (!conn->parked)
			continue;
		/* let nic_parse try again; the RNR deadline keeps running */
		conn->parked = false;
		atomic_fetch_sub(&tf->nparked, 1);
		nic_service(tf, conn, false);
	}
}

/* deadlines: handshakes, parked SENDs, closing connections */
static uint64_t nic_deadlines(struct tcp_fab *tf, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	if (!tf->n_timed)
		return next;
	struct tcp_conn *nx;
	for (struct tcp_conn *conn = tf->conns; conn; conn = nx) {
		nx = conn->next;
		if (!conn->deadline_ns)
			continue;
		if (now < conn->deadline_ns) {
			next = DXL_MIN(next, conn->deadline_ns);
			continue;
		}
		if (conn->state == TCP_CONN_HS || conn->state == TCP_CONN_DRAIN) {
			nic_close(tf, conn, conn->state == TCP_CONN_HS
						    ? "handshake timed out"
						    : "closed after an error");
		} else if (conn->parked) {
			/* RNR retries exhausted: the SEND fails at the sender */
			struct tcp_frame fr;
			tcp_frame_decode(tcp_buf_data(&conn->in), &fr);
			DXL_DEBUG("fabric tcp: SEND %u parked too long: refused",
				  fr.seq);
			nic_unpark(tf, conn);
			conn->rx_seq++;
			nic_fail(tf, conn, TCP_OP_SEND, fr.seq, TCP_ST_OPERR);
			nic_service(tf, conn, false);
			if (conn->deadline_ns)
				next = DXL_MIN(next, conn->deadline_ns);
		} else {
			set_deadline(tf, conn, 0);
		}
	}
	return next;
}

static void drain_fd(int fd)
{
	uint64_t v;
	ssize_t r = read(fd, &v, sizeof(v));
	(void)r;
}

/*
 * How long the NIC thread spins after its last event. On 2 CPUs or fewer
 * it does not spin at all: the owner thread it answers usually spins on the
 * other CPU, and a second spinner only steals CPU from it and from everyone
 * else (measured on the 2-core dev machine: 64 B READ p50 5.8 us with a
 * blocking NIC thread, 9 to 54 us with a spinning one; docs/fabric-tcp.md).
 * DXL_TCP_NIC_SPIN=1 forces spinning, =0 forbids it.
 */
static uint64_t nic_spin_ns(const struct dxl_fabric_cfg *cfg)
{
	uint64_t ns = (uint64_t)cfg->idle_spin_us * 1000ull;
	const char *env = getenv("DXL_TCP_NIC_SPIN");
	if (env && *env)
		return env[0] == '0' ? 0 : ns;
	return tcp_few_cpus() ? 0 : ns;
}

bool tcp_few_cpus(void)
{
	cpu_set_t set;
	return sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) <= 2;
}

void *tcp_nic_main(void *arg)
{
	struct tcp_fab *tf = arg;
	const struct dxl_fabric_cfg *cfg = &tf->f->cfg;
	uint64_t spin_ns = nic_spin_ns(cfg);
	uint64_t last_busy = dxl_now_ns();
	uint64_t next_dl = UINT64_MAX;
	struct epoll_event evs[64];
	while (!atomic_load_explicit(&tf->stop, memory_order_acquire)) {
		uint64_t now = dxl_now_ns();
		int tmo = 0;
		if (now - last_busy >= spin_ns) {
			/* idle: block until an event or the next deadline */
			if (next_dl == UINT64_MAX)
				tmo = -1;
			else if (next_dl > now)
				tmo = (int)DXL_MIN((next_dl - now + 999999) / 1000000,
						   (uint64_t)INT32_MAX);
		}
		int n = epoll_wait(tf->ep, evs, 64, tmo);
		if (n < 0) {
			if (errno != EINTR)
				DXL_ERROR("fabric tcp: NIC epoll_wait: %s",
					  strerror(errno));
			n = 0;
		}
		now = dxl_now_ns();
		if (n > 0)
			last_busy = now;
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;
			uint32_t e = evs[i].events;
			if (p == &tf->lfd) {
				nic_accept(tf);
			} else if (p == &tf->kick_fd) {
				drain_fd(tf->kick_fd);
				nic_retry_parked(tf);
			} else if (p == &tf->pf_fd) {
				/* the pf_signal or dxl_fabric_power_fail_arm */
				drain_fd(tf->pf_fd);
				tcp_pf_take_arm(tf);
			} else {
				struct tcp_conn *conn = p;
				if (conn->state == TCP_CONN_CLOSED)
					continue;
				/* a reset (the initiator abandoned the QP) is
				 * known before any of its input is read: what
				 * it has not had executed stays unexecuted */
				if (e & EPOLLERR)
					conn->peer_reset = true;
				else if (e & EPOLLIN)
					conn->alive_ns = now;
				if (e & EPOLLOUT)
					nic_service(tf, conn, false);
				if (conn->state != TCP_CONN_CLOSED &&
				    (e & (EPOLLIN | EPOLLHUP | EPOLLERR)))
					nic_service(tf, conn, true);
				if ((e & (EPOLLHUP | EPOLLERR)) &&
				    conn->state != TCP_CONN_CLOSED && !conn->want_in)
					nic_close(tf, conn, "connection lost");
			}
		}
		if (atomic_load_explicit(&tf->pf_dead, memory_order_relaxed)) {
			/* another thread is failing the power: stop here */
			pthread_mutex_lock(&tf->pf_lock);
			pthread_mutex_unlock(&tf->pf_lock);
		}
		if (tf->pf_armed && now >= tf->pf_deadline_ns)
			tcp_pf_strike(tf, "idle", false, 0, 0);
		next_dl = nic_deadlines(tf, now);
		if (tf->pf_armed)
			next_dl = DXL_MIN(next_dl, tf->pf_deadline_ns);
		if (tf->accept_resume_ns) {
			if (now >= tf->accept_resume_ns) {
				struct epoll_event ev = {.events = EPOLLIN,
							 .data.ptr = &tf->lfd};
				epoll_ctl(tf->ep, EPOLL_CTL_MOD, tf->lfd, &ev);
				tf->accept_resume_ns = 0;
			} else {
				next_dl = DXL_MIN(next_dl, tf->accept_resume_ns);
			}
		}
		while (tf->closed) {
			struct tcp_conn *conn = tf->closed;
			tf->closed = conn->closed_next;
			tcp_conn_put(conn);
		}
	}
	/* fabric close: every ctx is gone, close what is left */
	while (tf->conns)
		nic_close(tf, tf->conns, "fabric closed");
	while (tf->closed) {
		struct tcp_conn *conn = tf->closed;
		tf->closed = conn->closed_next;
		tcp_conn_put(conn);
	}
	return NULL;
}
