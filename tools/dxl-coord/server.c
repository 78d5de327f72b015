/* server.c -- dxl-coord's I/O thread: accepts connections, reads and
 * decodes frames, answers PING and STATS itself, hands transactions to the
 * workers and writes their replies back (docs/coord.md) */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/coordproto.h"
#include "dxl/txn.h"

#include "server.h"

#define TAG_LISTEN (UINT64_MAX - 1)
#define TAG_EVFD (UINT64_MAX - 2)
#define TAG_SIG (UINT64_MAX - 3)
#define READ_CHUNK 65536

struct conn {
	int fd;
	uint32_t slot;
	uint64_t id;             /* gen << 32 | slot */
	uint64_t seq;            /* 1, 2, ... in order of accept (logs) */
	uint8_t *rbuf;           /* bytes read and not yet decoded */
	size_t rlen, rcap;
	struct dxl_cproto_buf out; /* replies not yet written */
	size_t out_off;
	uint32_t inflight;       /* TXN requests at the workers */
	uint32_t events;         /* registered with epoll */
	bool eof;                /* the peer shut its side: answer, then close */
	char peer[64];
};

struct io {
	struct server *s;
	int ep, lfd, sigfd;
	struct conn **conns;     /* [max_conns] */
	uint32_t *gens;          /* [max_conns] */
	bool stopping;
	uint64_t drain_end_ms;
	int rc;
};

/* ---- connections ------------------------------------------------------------ */

static struct conn *conn_find(struct io *io, uint64_t id)
{
	uint32_t slot = (uint32_t)id;
	if (slot >= io->s->cfg.max_conns)
		return NULL;
	struct conn *c = io->conns[slot];
	return c && c->id == id ? c : NULL;
}

static void conn_close(struct io *io, struct conn *c, const char *why)
{
	srv_log(DXL_LOG_INFO, "event=conn_closed conn=%" PRIu64 " peer=%s inflight=%u reason=\"%s\"",
		c->seq, c->peer, c->inflight, why);
	epoll_ctl(io->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	io->conns[c->slot] = NULL;
	io->gens[c->slot]++;
	io->s->conns_open--;
	free(c->rbuf);
	free(c->out.p);
	free(c);
}

static bool out_pending(const struct conn *c)
{
	return c->out.len > c->out_off;
}

/* conn_events -- register what c waits for now: input while it may take
 * requests (not stopping, not at its in-flight cap, no EOF), output while
 * replies wait */
static void conn_events(struct io *io, struct conn *c)
{
	uint32_t ev = 0;
	if (!io->stopping && !c->eof && c->inflight < io->s->cfg.conn_inflight)
		ev |= EPOLLIN;
	if (out_pending(c))
		ev |= EPOLLOUT;
	if (ev == c->events)
		return;
	struct epoll_event e = {.events = ev, .data.u64 = c->id};
	if (epoll_ctl(io->ep, EPOLL_CTL_MOD, c->fd, &e) == 0)
		c->events = ev;
}

/* conn_flush -- write what can be written; false if c was closed */
static bool conn_flush(struct io *io, struct conn *c)
{
	while (out_pending(c)) {
		ssize_t n = send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off,
				 MSG_NOSIGNAL);
		if (n > 0) {
			c->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		char why[128];
		snprintf(why, sizeof(why), "write: %s", n < 0 ? strerror(errno) : "closed");
		conn_close(io, c, why);
		return false;
	}
	if (!out_pending(c)) {
		c->out.len = 0;
		c->out_off = 0;
	}
	if (c->eof && !c->inflight && !out_pending(c)) {
		conn_close(io, c, "peer finished");
		return false;
	}
	conn_events(io, c);
	return true;
}

static void conn_reply_error(struct conn *c, uint64_t req_id, int code, const char *why)
{
	dxl_cproto_encode_error(&c->out, req_id, code, why);
}

/* ---- requests ------------------------------------------------------------------ */

static void stats_text(struct io *io, char *buf, size_t cap)
{
	struct server *s = io->s;
	struct dxl_coord_stats st;
	dxl_coord_stats(s->coord, &st);
	pthread_mutex_lock(&s->qmu);
	uint32_t queued = s->queued;
	pthread_mutex_unlock(&s->qmu);
	snprintf(buf, cap,
		 "coord_id=%u\nmode=%s\nepoch=%" PRIu64 "\naddr=%s\nthreads=%u\ncoroutines=%u\n"
		 "connections=%" PRIu64 "\nconnections_total=%" PRIu64 "\nrequests=%" PRIu64
		 "\ntxn_requests=%" PRIu64 "\ntxn_ok=%" PRIu64 "\ntxn_failed=%" PRIu64
		 "\nproto_errors=%" PRIu64 "\nclosed_absurd=%" PRIu64 "\ninflight=%" PRIu64
		 "\nqueued=%u\n"
		 "committed=%" PRIu64 "\naborted=%" PRIu64 "\nconflicts=%" PRIu64
		 "\nunavail=%" PRIu64 "\nonesided_reads=%" PRIu64 "\nrpc_reads=%" PRIu64
		 "\ncache_hits=%" PRIu64 "\ncache_misses=%" PRIu64 "\nlog_appends=%" PRIu64
		 "\nview_refreshes=%" PRIu64 "\nviews_live=%" PRIu64 "\nresolved=%" PRIu64
		 "\nwb_lock_lost=%" PRIu64 "\n",
		 dxl_coord_id(s->coord), dxl_txn_mode_name(dxl_coord_mode(s->coord)),
		 dxl_coord_epoch(s->coord), s->addr, s->cfg.threads, s->cfg.coroutines,
		 s->conns_open, s->conns_total, s->requests, s->txn_requests,
		 (uint64_t)atomic_load(&s->txn_ok), (uint64_t)atomic_load(&s->txn_failed),
		 s->proto_errors, s->closed_absurd, s->inflight, queued, st.committed,
		 st.aborted, st.conflicts, st.unavail, st.onesided_reads, st.rpc_reads,
		 st.cache_hits, st.cache_misses, st.log_appends, st.view_refreshes,
		 st.views_live, st.resolved, st.wb_lock_lost);
}

/* handle_frame -- one whole frame of c (frame[0..size)) */
static void handle_frame(struct io *io, struct conn *c, const uint8_t *frame, size_t size)
{
	struct server *s = io->s;
	s->requests++;
	struct req *r = calloc(1, sizeof(*r));
	uint8_t *copy = r ? malloc(size) : NULL;
	if (!copy) {
		free(r);
		conn_reply_error(c, 0, DXL_E_NOMEM, "out of memory for the request");
		return;
	}
	memcpy(copy, frame, size);
	r->frame = copy;
	char why[256];
	int ret = dxl_cproto_decode(copy, size, &r->m, why, sizeof(why));
	if (!ret && r->m.kind != DXL_CPROTO_TXN && r->m.kind != DXL_CPROTO_PING &&
	    r->m.kind != DXL_CPROTO_STATS) {
		snprintf(why, sizeof(why), "frame kind 0x%02x is a reply, not a request",
			 r->m.kind);
		ret = DXL_E_PROTO;
	}
	if (ret) {
		s->proto_errors++;
		srv_log(DXL_LOG_INFO, "event=bad_request conn=%" PRIu64 " peer=%s req=%" PRIu64
			" code=%s why=\"%s\"", c->seq, c->peer, r->m.req_id, dxl_errname(ret), why);
		conn_reply_error(c, r->m.req_id, ret, why);
		req_free(r);
		return;
	}
	if (r->m.kind == DXL_CPROTO_PING) {
		dxl_cproto_encode_pong(&c->out, r->m.req_id, dxl_coord_id(s->coord),
				       dxl_coord_epoch(s->coord));
		req_free(r);
		return;
	}
	if (r->m.kind == DXL_CPROTO_STATS) {
		char text[4096];
		stats_text(io, text, sizeof(text));
		dxl_cproto_encode_stats_reply(&c->out, r->m.req_id, text);
		req_free(r);
		return;
	}
	r->conn_id = c->id;
	r->max_tries = r->m.max_tries ? r->m.max_tries : s->cfg.max_tries;
	c->inflight++;
	s->inflight++;
	s->txn_requests++;
	queue_push(s, r);
}

/* conn_decode -- handle the whole frames in c's buffer while c may take
 * requests; false if c was closed */
static bool conn_decode(struct io *io, struct conn *c)
{
	size_t off = 0;
	while (!io->stopping && c->inflight < io->s->cfg.conn_inflight) {
		size_t total = 0;
		int k = dxl_cproto_frame_len(c->rbuf + off, c->rlen - off, &total);
		if (k == 0)
			break;
		if (k < 0) {
			/* the stream cannot be trusted past this: say why, close */
			char why[160];
			uint32_t len = dxl_cproto_ld32(c->rbuf + off);
			snprintf(why, sizeof(why),
				 "frame length %u over the limit %u: closing the connection", len,
				 DXL_CPROTO_MAX_FRAME);
			io->s->closed_absurd++;
			io->s->proto_errors++;
			struct dxl_cproto_buf b = {0};
			if (!dxl_cproto_encode_error(&b, 0, DXL_E_PROTO, why)) {
				/* best effort, without waiting: the peer may not read */
				ssize_t n = send(c->fd, b.p, b.len, MSG_NOSIGNAL | MSG_DONTWAIT);
				(void)n;
			}
			free(b.p);
			conn_close(io, c, why);
			return false;
		}
		if (c->rlen - off < total)
			break;
		if (total < DXL_CPROTO_HDR) {
			/* the boundary holds, but there is no type word */
			char why[96];
			snprintf(why, sizeof(why), "frame length %zu: shorter than the type word",
				 total - 4);
			io->s->requests++;
			io->s->proto_errors++;
			conn_reply_error(c, 0, DXL_E_PROTO, why);
		} else {
			handle_frame(io, c, c->rbuf + off, total);
		}
		off += total;
	}
	if (off) {
		memmove(c->rbuf, c->rbuf + off, c->rlen - off);
		c->rlen -= off;
	}
	if (c->out.oom) {
		conn_close(io, c, "out of memory for the output");
		return false;
	}
	return conn_flush(io, c);
}

/* conn_read -- read what is there (bounded, for fairness), then decode */
static void conn_read(struct io *io, struct conn *c)
{
	for (int round = 0; round < 16; round++) {
		if (c->rcap - c->rlen < READ_CHUNK) {
			size_t cap = c->rcap ? c->rcap * 2 : 2 * READ_CHUNK;
			while (cap - c->rlen < READ_CHUNK)
				cap *= 2;
			uint8_t *p = realloc(c->rbuf, cap);
			if (!p) {
				conn_close(io, c, "out of memory for the input");
				return;
			}
			c->rbuf = p;
			c->rcap = cap;
		}
		ssize_t n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
		if (n > 0) {
			c->rlen += (size_t)n;
			if (c->rlen >= 4) {
				/* decode as we go: an absurd length closes at
				 * once, and the buffer stays about a frame */
				if (!conn_decode(io, c))
					return;
				if (!(c->events & EPOLLIN))
					return; /* at its in-flight cap */
			}
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0) {
			char why[128];
			snprintf(why, sizeof(why), "read: %s", strerror(errno));
			conn_close(io, c, why);
			return;
		}
		/* EOF: answer what was asked, then close */
		c->eof = true;
		if (c->rlen)
			srv_log(DXL_LOG_INFO, "event=partial_frame conn=%" PRIu64 " peer=%s bytes=%zu",
				c->seq, c->peer, c->rlen);
		break;
	}
	conn_decode(io, c);
}

static void do_accept(struct io *io)
{
	struct server *s = io->s;
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(io->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				srv_log(DXL_LOG_WARN, "event=accept_failed err=\"%s\"", strerror(errno));
			return;
		}
		char peer[64] = "?";
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *a = (struct sockaddr_in *)&ss;
			char h[INET_ADDRSTRLEN];
			inet_ntop(AF_INET, &a->sin_addr, h, sizeof(h));
			snprintf(peer, sizeof(peer), "%s:%u", h, ntohs(a->sin_port));
		} else if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
			char h[INET6_ADDRSTRLEN];
			inet_ntop(AF_INET6, &a->sin6_addr, h, sizeof(h));
			snprintf(peer, sizeof(peer), "[%s]:%u", h, ntohs(a->sin6_port));
		}
		uint32_t slot = 0;
		while (slot < s->cfg.max_conns && io->conns[slot])
			slot++;
		struct conn *c = slot < s->cfg.max_conns ? calloc(1, sizeof(*c)) : NULL;
		if (!c) {
			srv_log(DXL_LOG_WARN, "event=conn_refused peer=%s reason=\"%s\"", peer,
				slot < s->cfg.max_conns ? "out of memory" : "coord.max_conns reached");
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd;
		c->slot = slot;
		c->id = (uint64_t)io->gens[slot] << 32 | slot;
		snprintf(c->peer, sizeof(c->peer), "%s", peer);
		c->events = EPOLLIN;
		struct epoll_event e = {.events = EPOLLIN, .data.u64 = c->id};
		if (epoll_ctl(io->ep, EPOLL_CTL_ADD, fd, &e)) {
			srv_log(DXL_LOG_WARN, "event=conn_refused peer=%s reason=\"epoll: %s\"", peer,
				strerror(errno));
			close(fd);
			free(c);
			continue;
		}
		io->conns[slot] = c;
		s->conns_open++;
		s->conns_total++;
		c->seq = s->conns_total;
		srv_log(DXL_LOG_INFO, "event=conn_open conn=%" PRIu64 " peer=%s", c->seq, peer);
	}
}

/* take_replies -- the workers' replies into their connections */
static void take_replies(struct io *io)
{
	struct server *s = io->s;
	uint64_t cnt;
	ssize_t n = read(s->evfd, &cnt, sizeof(cnt));
	(void)n;
	pthread_mutex_lock(&s->rmu);
	struct reply *p = s->rhead;
	s->rhead = s->rtail = NULL;
	pthread_mutex_unlock(&s->rmu);
	while (p) {
		struct reply *next = p->next;
		s->inflight--;
		struct conn *c = conn_find(io, p->conn_id);
		if (c) {
			c->inflight--;
			if (!p->buf) {
				conn_close(io, c, "a reply could not be encoded");
			} else {
				dxl_cproto_putn(&c->out, p->buf, p->len);
				/* room again: decode what was held back */
				if (c->out.oom)
					conn_close(io, c, "out of memory for the output");
				else
					conn_decode(io, c);
			}
		}
		free(p->buf);
		free(p);
		p = next;
	}
}

static void begin_stop(struct io *io, const char *why)
{
	struct server *s = io->s;
	io->stopping = true;
	io->drain_end_ms = dxl_now_ms() + s->cfg.drain_ms;
	srv_log(DXL_LOG_INFO, "event=stopping reason=%s inflight=%" PRIu64 " connections=%" PRIu64,
		why, s->inflight, s->conns_open);
	if (io->lfd >= 0) {
		epoll_ctl(io->ep, EPOLL_CTL_DEL, io->lfd, NULL);
		close(io->lfd);
		io->lfd = -1;
	}
	for (uint32_t i = 0; i < s->cfg.max_conns; i++)
		if (io->conns[i])
			conn_events(io, io->conns[i]);
}

static bool drained(struct io *io)
{
	if (io->s->inflight)
		return false;
	for (uint32_t i = 0; i < io->s->cfg.max_conns; i++)
		if (io->conns[i] && out_pending(io->conns[i]))
			return false;
	return true;
}

int serve(struct server *s, int listen_fd, int sigfd)
{
	struct io io = {.s = s, .lfd = listen_fd, .sigfd = sigfd, .rc = EX_CLEAN};
	io.conns = calloc(s->cfg.max_conns, sizeof(*io.conns));
	io.gens = calloc(s->cfg.max_conns, sizeof(*io.gens));
	io.ep = epoll_create1(EPOLL_CLOEXEC);
	if (!io.conns || !io.gens || io.ep < 0) {
		srv_log(DXL_LOG_ERROR, "event=serve_failed reason=\"epoll or memory: %s\"",
			strerror(errno));
		free(io.conns);
		free(io.gens);
		if (io.ep >= 0)
			close(io.ep);
		return EX_FAIL;
	}
	for (uint32_t i = 0; i < s->cfg.max_conns; i++)
		io.gens[i] = 1;
	struct epoll_event e = {.events = EPOLLIN, .data.u64 = TAG_LISTEN};
	epoll_ctl(io.ep, EPOLL_CTL_ADD, listen_fd, &e);
	e.data.u64 = TAG_EVFD;
	epoll_ctl(io.ep, EPOLL_CTL_ADD, s->evfd, &e);
	e.data.u64 = TAG_SIG;
	epoll_ctl(io.ep, EPOLL_CTL_ADD, sigfd, &e);

	for (;;) {
		if (io.stopping) {
			if (drained(&io))
				break;
			if (dxl_now_ms() >= io.drain_end_ms) {
				srv_log(DXL_LOG_WARN, "event=drain_timeout inflight=%" PRIu64
					" drain_ms=%u", s->inflight, s->cfg.drain_ms);
				break;
			}
		}
		if (atomic_load(&s->fatal) && !io.stopping) {
			io.rc = EX_FAIL;
			begin_stop(&io, "worker_failed");
		}
		struct epoll_event evs[64];
		int n = epoll_wait(io.ep, evs, 64, io.stopping ? 50 : 1000);
		if (n < 0 && errno != EINTR) {
			srv_log(DXL_LOG_ERROR, "event=serve_failed reason=\"epoll_wait: %s\"",
				strerror(errno));
			io.rc = EX_FAIL;
			break;
		}
		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;
			if (tag == TAG_LISTEN) {
				if (!io.stopping)
					do_accept(&io);
			} else if (tag == TAG_EVFD) {
				take_replies(&io);
			} else if (tag == TAG_SIG) {
				struct signalfd_siginfo si;
				if (read(sigfd, &si, sizeof(si)) != sizeof(si))
					continue;
				if (!io.stopping) {
					begin_stop(&io, si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM");
				} else {
					srv_log(DXL_LOG_WARN, "event=second_signal inflight=%" PRIu64
						" action=stop_now", s->inflight);
					io.drain_end_ms = 0;
				}
			} else {
				struct conn *c = conn_find(&io, tag);
				if (!c)
					continue; /* closed earlier in this round */
				if (evs[i].events & (EPOLLERR | EPOLLHUP) &&
				    !(evs[i].events & EPOLLIN)) {
					conn_close(&io, c, "connection error or hang-up");
					continue;
				}
				if (evs[i].events & EPOLLOUT && !conn_flush(&io, c))
					continue;
				if (evs[i].events & EPOLLIN)
					conn_read(&io, c);
			}
		}
	}
	/* the workers end once idle (after a drain timeout, when the
	 * transactions still running end) */
	workers_join(s);
	pthread_mutex_lock(&s->rmu);
	struct reply *p = s->rhead;
	s->rhead = s->rtail = NULL;
	pthread_mutex_unlock(&s->rmu);
	while (p) {
		struct reply *next = p->next;
		free(p->buf);
		free(p);
		p = next;
	}
	for (uint32_t i = 0; i < s->cfg.max_conns; i++)
		if (io.conns[i])
			conn_close(&io, io.conns[i], "shutdown");
	if (io.lfd >= 0)
		close(io.lfd);
	close(io.ep);
	free(io.conns);
	free(io.gens);
	return io.rc;
}
