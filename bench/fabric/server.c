/* server.c -- dxl-bench-fabric's server side: regions, echo threads, control protocol */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/fabric/bench_fabric.h"
#include "common/common.h"

/*
 * Control protocol (plain TCP, one text line per message):
 *
 *   client: "HELLO dxlb 1"
 *   server: "OK provider=tcp fabric=HOST:PORT nctx=N depth=D maxsize=M
 *            maxinline=I seed=S read=ADDR,LEN,RKEY write=... atomic=... rpc=0|1"
 *           then the connection stays open as the session; a --once server
 *           exits when it closes.
 *   client: "ECHO SIZE" or "ECHO SIZE SPIN"
 *   server: "OK", then echoes SIZE-byte messages until the client closes
 *           (the TCP ping-pong baseline; TCP_NODELAY on both ends); with
 *           SPIN it busy-polls for each message instead of sleeping in
 *           recv() (the busy-polling ping-pong).
 *
 * On the fabric, server ctx i (0..nctx-1) has a thread that echoes every
 * SEND it receives back on the QP it came in on. One-sided requests are
 * served by the provider alone (for tcp: its NIC thread).
 */

/* set by SIGTERM/SIGINT and by the end of a --once session; a lock-free
 * atomic, so both a signal handler and another thread may store it */
static atomic_int g_stop;

static void on_term(int sig)
{
	(void)sig;
	atomic_store_explicit(&g_stop, 1, memory_order_relaxed);
}

static bool stopping(void)
{
	return atomic_load_explicit(&g_stop, memory_order_relaxed) != 0;
}

struct srv_ctx;

struct srv {
	const struct bf_opts *o;
	struct dxl_fabric *f;
	uint8_t *read_buf, *write_buf, *atomic_buf;
	size_t read_len, write_len, atomic_len;
	struct dxl_mr *read_mr, *write_mr, *atomic_mr;
	uint32_t nctx;
	uint32_t depth;    /* receive buffers per ctx */
	uint32_t max_size; /* bytes per receive buffer */
	struct srv_ctx *ctxs;
	struct bf_rpc_srv *rpc;
	uint32_t rpc_msg;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint32_t ready; /* ctx threads that finished set-up (under lock) */
	int failed;     /* a ctx thread failed set-up (under lock) */
	atomic_int stop;
	char hello[512];
};

struct srv_ctx {
	struct srv *s;
	uint32_t idx;
	pthread_t th;
	struct dxl_ctx *c;
	uint8_t *bufs;
	struct dxl_mr *mr;
	/* echoes that could not be posted (send queue full), retried first */
	struct backlog {
		struct dxl_qp *qp;
		uint32_t buf;
		uint32_t len;
	} *bl;
	uint32_t bl_head, bl_n;
	uint64_t echoed;
	char err[256];
};

#define WR_SEND_TAG (1ull << 62)

static int repost(struct srv_ctx *sc, uint32_t b)
{
	struct srv *s = sc->s;
	return dxl_ctx_post_recv(sc->c, sc->bufs + (size_t)b * s->max_size,
				 s->max_size, dxl_mr_lkey(sc->mr), b);
}

/* post the echo of buffer b; DXL_E_AGAIN leaves it to the caller */
static int echo(struct srv_ctx *sc, struct dxl_qp *qp, uint32_t b, uint32_t len)
{
	struct srv *s = sc->s;
	const struct dxl_fabric_cfg *cfg = dxl_fabric_cfg(s->f);
	struct dxl_wr wr = {
		.wr_id = WR_SEND_TAG | b,
		.op = DXL_WR_SEND,
		.local = sc->bufs + (size_t)b * s->max_size,
		.len = len,
		.lkey = dxl_mr_lkey(sc->mr),
	};
	/* an inline payload is copied at post: the buffer is free at once */
	bool inl = s->o->inline_small && len <= cfg->max_inline;
	wr.flags = inl ? DXL_WR_INLINE : DXL_WR_SIGNALED;
	int rc = dxl_qp_post(qp, &wr, NULL);
	if (rc)
		return rc;
	sc->echoed++;
	if (inl)
		return repost(sc, b);
	return 0;
}

static void handle_wc(struct srv_ctx *sc, const struct dxl_wc *wc)
{
	struct srv *s = sc->s;
	if (wc->opcode == DXL_WC_RECV) {
		uint32_t b = (uint32_t)wc->wr_id;
		if (wc->status != DXL_WC_SUCCESS || !wc->qp ||
		    dxl_qp_state(wc->qp) != DXL_QP_RTS) {
			repost(sc, b);
			return;
		}
		if (sc->bl_n == 0) {
			int rc = echo(sc, wc->qp, b, wc->byte_len);
			if (rc != DXL_E_AGAIN) {
				if (rc)
					repost(sc, b); /* peer gone: drop it */
				return;
			}
		}
		uint32_t t = (sc->bl_head + sc->bl_n) % s->depth;
		sc->bl[t] = (struct backlog){wc->qp, b, wc->byte_len};
		sc->bl_n++;
		return;
	}
	if (wc->wr_id & WR_SEND_TAG) /* a signalled echo: its buffer is free */
		repost(sc, (uint32_t)(wc->wr_id & ~WR_SEND_TAG));
}

static void *ctx_thread(void *arg)
{
	struct srv_ctx *sc = arg;
	struct srv *s = sc->s;
	int rc = dxl_ctx_new(s->f, sc->idx, &sc->c);
	for (uint32_t b = 0; !rc && b < s->depth; b++)
		rc = repost(sc, b);
	if (rc)
		snprintf(sc->err, sizeof(sc->err), "ctx %u: %s: %s", sc->idx,
			 dxl_errname(rc), dxl_errmsg());
	pthread_mutex_lock(&s->lock);
	if (rc)
		s->failed = 1;
	s->ready++;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	if (rc)
		return NULL;

	struct dxl_wc wc[64];
	while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		while (sc->bl_n) {
			struct backlog *e = &sc->bl[sc->bl_head];
			rc = echo(sc, e->qp, e->buf, e->len);
			if (rc == DXL_E_AGAIN)
				break;
			if (rc)
				repost(sc, e->buf);
			sc->bl_head = (sc->bl_head + 1) % s->depth;
			sc->bl_n--;
		}
		int n = dxl_ctx_poll(sc->c, wc, (int)DXL_ARRAY_SIZE(wc));
		if (n < 0) {
			snprintf(sc->err, sizeof(sc->err), "ctx %u: poll: %s",
				 sc->idx, dxl_errmsg());
			break;
		}
		for (int i = 0; i < n; i++)
			handle_wc(sc, &wc[i]);
		if (n == 0 && sc->bl_n == 0)
			dxl_ctx_wait(sc->c, 100);
	}
	return NULL;
}

/* ---- HELLO ----------------------------------------------------------------- */

static void desc_str(char *buf, size_t cap, const struct dxl_mr *mr)
{
	struct dxl_mr_desc d;
	dxl_mr_desc(mr, &d);
	snprintf(buf, cap, "%" PRIx64 ",%" PRIx64 ",%" PRIx32, d.addr, d.len,
		 d.rkey);
}

static void build_hello(struct srv *s)
{
	char r[80], w[80], a[80];
	desc_str(r, sizeof(r), s->read_mr);
	desc_str(w, sizeof(w), s->write_mr);
	desc_str(a, sizeof(a), s->atomic_mr);
	snprintf(s->hello, sizeof(s->hello),
		 "OK provider=%s fabric=%s nctx=%u depth=%u maxsize=%u "
		 "maxinline=%u seed=%" PRIu64 " read=%s write=%s atomic=%s rpc=%d "
		 "rpcmsg=%u",
		 dxl_fabric_provider_name(dxl_fabric_provider(s->f)),
		 dxl_fabric_addr(s->f), s->nctx, s->depth, s->max_size,
		 dxl_fabric_cfg(s->f)->max_inline, s->o->seed, r, w, a,
		 s->rpc ? 1 : 0, s->rpc_msg);
}

static int parse_desc(const char *v, struct dxl_mr_desc *d)
{
	unsigned long long addr, len;
	unsigned rkey;
	if (sscanf(v, "%llx,%llx,%x", &addr, &len, &rkey) != 3)
		return -1;
	d->addr = addr;
	d->len = len;
	d->rkey = rkey;
	return 0;
}

int bf_hello_parse(const char *line, struct bf_hello *h)
{
	memset(h, 0, sizeof(*h));
	if (strncmp(line, "OK ", 3) != 0)
		return DXL_E_PROTO;
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", line + 3);
	int seen = 0;
	char *save = NULL;
	for (char *tok = strtok_r(buf, " ", &save); tok;
	     tok = strtok_r(NULL, " ", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq)
			return DXL_E_PROTO;
		*eq = '\0';
		const char *k = tok, *v = eq + 1;
		uint64_t n = 0;
		int rc = 0;
		if (!strcmp(k, "provider"))
			snprintf(h->provider, sizeof(h->provider), "%s", v);
		else if (!strcmp(k, "fabric"))
			snprintf(h->fabric_addr, sizeof(h->fabric_addr), "%s", v);
		else if (!strcmp(k, "read"))
			rc = parse_desc(v, &h->read);
		else if (!strcmp(k, "write"))
			rc = parse_desc(v, &h->write);
		else if (!strcmp(k, "atomic"))
			rc = parse_desc(v, &h->atomic);
		else if ((rc = dxl_parse_u64(v, &n)) == 0) {
			if (!strcmp(k, "nctx"))
				h->nctx = (uint32_t)n;
			else if (!strcmp(k, "depth"))
				h->depth = (uint32_t)n;
			else if (!strcmp(k, "maxsize"))
				h->max_size = (uint32_t)n;
			else if (!strcmp(k, "maxinline"))
				h->max_inline = (uint32_t)n;
			else if (!strcmp(k, "seed"))
				h->seed = n;
			else if (!strcmp(k, "rpc"))
				h->rpc = n != 0;
			else if (!strcmp(k, "rpcmsg"))
				h->rpc_msg = (uint32_t)n;
		}
		if (rc)
			return DXL_E_PROTO;
		seen++;
	}
	return seen >= 10 && h->nctx && h->read.len ? 0 : DXL_E_PROTO;
}

/* ---- control connections ------------------------------------------------- */

struct conn {
	struct srv *s;
	int fd;
};

/* spin: busy-poll for each message (the busy-polling floor) instead of
 * sleeping in recv() */
static void echo_loop(int fd, uint32_t size, bool spin)
{
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return;
	bf_set_nodelay(fd);
	if (bf_write_full(fd, "OK\n", 3) == 0)
		while ((spin ? bf_read_full_spin(fd, buf, size) : bf_read_full(fd, buf, size)) == 0 &&
		       bf_write_full(fd, buf, size) == 0)
			;
	free(buf);
}

static void *conn_thread(void *arg)
{
	struct conn *cn = arg;
	struct srv *s = cn->s;
	char line[128];
	if (bf_read_line(cn->fd, line, sizeof(line)) == 0) {
		uint64_t size;
		if (!strncmp(line, "HELLO ", 6)) {
			char reply[600];
			snprintf(reply, sizeof(reply), "%s\n", s->hello);
			bf_write_full(cn->fd, reply, strlen(reply));
			/* the session lasts until the client closes it */
			while (bf_read_line(cn->fd, line, sizeof(line)) == 0)
				;
			if (s->o->once)
				atomic_store_explicit(&g_stop, 1,
						      memory_order_relaxed);
		} else if (!strncmp(line, "ECHO ", 5) && strlen(line) > 10 &&
			   !strcmp(line + strlen(line) - 5, " SPIN")) {
			/* "ECHO SIZE SPIN": the busy-polling ping-pong */
			line[strlen(line) - 5] = 0;
			if (dxl_parse_u64(line + 5, &size) == 0 && size <= BF_MAX_SIZE)
				echo_loop(cn->fd, (uint32_t)size, true);
			else
				bf_write_full(cn->fd, "ERR bad request\n", 16);
		} else if (!strncmp(line, "ECHO ", 5) &&
			   dxl_parse_u64(line + 5, &size) == 0 &&
			   size <= BF_MAX_SIZE) {
			echo_loop(cn->fd, (uint32_t)size, false);
		} else {
			bf_write_full(cn->fd, "ERR bad request\n", 16);
		}
	}
	close(cn->fd);
	free(cn);
	return NULL;
}

static void announce(int fd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void announce(int fd, const char *fmt, ...)
{
	if (fd < 0)
		return;
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* a pipe: write(), not the socket helpers' send() */
	size_t len = strlen(buf), done = 0;
	while (done < len) {
		ssize_t n = write(fd, buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
}

static void *alloc_region(size_t len)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, len))
		return NULL;
	memset(p, 0, len);
	return p;
}

int bf_server_main(const struct bf_opts *o)
{
	struct srv s = {.o = o};
	int status = 1, lfd = -1;
	char err[256] = "";
	pthread_mutex_init(&s.lock, NULL);
	pthread_cond_init(&s.cond, NULL);
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = {.sa_handler = on_term};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	s.nctx = o->server_ctx;
	s.max_size = DXL_MAX(o->max_size, 64u);
	/* every SEND in flight from a client thread needs a receive buffer */
	s.depth = DXL_MAX(64u, bf_next_pow2(o->server_depth));
	s.read_len = BF_READ_REGION;
	s.write_len = (size_t)BF_WRITE_PER_THREAD * BF_MAX_THREADS;
	s.atomic_len = (size_t)BF_ATOMIC_PER_THREAD * BF_MAX_THREADS;

	struct dxl_fabric_cfg cfg;
	dxl_fabric_cfg_init(&cfg);
	cfg.provider = o->provider;
	cfg.node_id = 1;
	snprintf(cfg.listen_addr, sizeof(cfg.listen_addr), "%s", o->fabric_addr);
	cfg.srq_depth = s.depth;
	cfg.sq_depth = DXL_MAX(256u, bf_next_pow2(s.depth));
	cfg.cq_depth = DXL_MAX(4096u, 4 * cfg.sq_depth);
	s.rpc_msg = bf_rpc_msg_size(s.max_size);
	cfg.max_msg = DXL_MAX(s.max_size, s.rpc_msg);
	if (o->spin_us >= 0)
		cfg.idle_spin_us = (uint32_t)o->spin_us;
	int rc = dxl_fabric_new(&cfg, &s.f);
	if (rc) {
		snprintf(err, sizeof(err), "dxl_fabric_new(%s, %s): %s: %s",
			 dxl_fabric_provider_name(o->provider), cfg.listen_addr,
			 dxl_errname(rc), dxl_errmsg());
		goto out;
	}
	s.read_buf = alloc_region(s.read_len);
	s.write_buf = alloc_region(s.write_len);
	s.atomic_buf = alloc_region(s.atomic_len);
	s.ctxs = calloc(s.nctx, sizeof(*s.ctxs));
	if (!s.read_buf || !s.write_buf || !s.atomic_buf || !s.ctxs) {
		snprintf(err, sizeof(err), "out of memory for the server regions");
		goto out;
	}
	bf_pattern_fill(o->seed, 0, s.read_buf, s.read_len);
	rc = dxl_mr_reg(s.f, s.read_buf, s.read_len, DXL_MR_REMOTE_READ,
			&s.read_mr);
	if (!rc)
		rc = dxl_mr_reg(s.f, s.write_buf, s.write_len,
				DXL_MR_REMOTE_WRITE | DXL_MR_REMOTE_READ,
				&s.write_mr);
	if (!rc)
		rc = dxl_mr_reg(s.f, s.atomic_buf, s.atomic_len,
				DXL_MR_REMOTE_ATOMIC | DXL_MR_REMOTE_READ,
				&s.atomic_mr);
	for (uint32_t i = 0; !rc && i < s.nctx; i++) {
		struct srv_ctx *sc = &s.ctxs[i];
		sc->s = &s;
		sc->idx = i;
		sc->bufs = alloc_region((size_t)s.depth * s.max_size);
		sc->bl = calloc(s.depth, sizeof(*sc->bl));
		if (!sc->bufs || !sc->bl) {
			snprintf(err, sizeof(err), "out of memory for receive buffers");
			goto out;
		}
		rc = dxl_mr_reg(s.f, sc->bufs, (size_t)s.depth * s.max_size,
				DXL_MR_LOCAL_WRITE, &sc->mr);
	}
	if (rc) {
		snprintf(err, sizeof(err), "dxl_mr_reg: %s: %s", dxl_errname(rc),
			 dxl_errmsg());
		goto out;
	}
	uint32_t started = 0;
	for (; started < s.nctx; started++)
		if (pthread_create(&s.ctxs[started].th, NULL, ctx_thread,
				   &s.ctxs[started]))
			break;
	pthread_mutex_lock(&s.lock);
	while (s.ready < started)
		pthread_cond_wait(&s.cond, &s.lock);
	pthread_mutex_unlock(&s.lock);
	if (started < s.nctx || s.failed) {
		for (uint32_t i = 0; i < s.nctx; i++)
			if (s.ctxs[i].err[0])
				snprintf(err, sizeof(err), "%s", s.ctxs[i].err);
		if (!err[0])
			snprintf(err, sizeof(err), "cannot start ctx threads");
		goto stop;
	}
	/* RPC is optional: without it the other ops still run */
	if (bf_rpc_server_start(s.f, s.nctx, s.depth, s.rpc_msg, &s.rpc, err,
				sizeof(err))) {
		fprintf(stderr, "dxl-bench-fabric server: no RPC: %s\n", err);
		err[0] = '\0';
		bf_rpc_server_stop(&s.rpc);
	}
	build_hello(&s);

	uint16_t port = 0;
	lfd = bf_tcp_listen(o->addr, &port, err, sizeof(err));
	if (lfd < 0)
		goto stop;
	announce(o->ready_fd, "READY %u\n", port);
	if (o->ready_fd >= 0)
		close(o->ready_fd);
	if (!o->quiet)
		fprintf(stderr,
			"dxl-bench-fabric server: provider %s, control %s (port %u), "
			"fabric %s, %u ctx\n",
			dxl_fabric_provider_name(o->provider), o->addr, port,
			dxl_fabric_addr(s.f), s.nctx);
	while (!stopping()) {
		struct pollfd pfd = {.fd = lfd, .events = POLLIN};
		if (poll(&pfd, 1, 200) <= 0)
			continue;
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		struct conn *cn = malloc(sizeof(*cn));
		pthread_t th;
		if (!cn) {
			close(fd);
			continue;
		}
		*cn = (struct conn){&s, fd};
		if (pthread_create(&th, NULL, conn_thread, cn)) {
			close(fd);
			free(cn);
			continue;
		}
		pthread_detach(th);
	}
	status = 0;
stop:
	bf_rpc_server_stop(&s.rpc);
	atomic_store(&s.stop, 1);
	for (uint32_t i = 0; i < started; i++)
		pthread_join(s.ctxs[i].th, NULL);
	for (uint32_t i = 0; i < started; i++)
		dxl_ctx_delete(&s.ctxs[i].c);
out:
	if (err[0]) {
		announce(o->ready_fd, "ERR %s\n", err);
		if (o->ready_fd < 0) /* else the parent reports it */
			fprintf(stderr, "dxl-bench-fabric server: %s\n", err);
	}
	if (lfd >= 0)
		close(lfd);
	dxl_fabric_delete(&s.f); /* deregisters every region */
	for (uint32_t i = 0; s.ctxs && i < s.nctx; i++) {
		free(s.ctxs[i].bufs);
		free(s.ctxs[i].bl);
	}
	free(s.ctxs);
	free(s.read_buf);
	free(s.write_buf);
	free(s.atomic_buf);
	return status;
}

/* ---- idle probe ------------------------------------------------------------ */

/*
 * The process whose CPU use the idle goal is about: a fabric, one ctx whose
 * thread sits in dxl_ctx_wait, and (made by the client) one connected QP.
 */
int bf_idle_peer_main(const struct bf_opts *o)
{
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = {.sa_handler = on_term};
	sigaction(SIGTERM, &sa, NULL);
	struct dxl_fabric_cfg cfg;
	dxl_fabric_cfg_init(&cfg);
	cfg.provider = o->provider;
	cfg.node_id = 3;
	if (o->spin_us >= 0)
		cfg.idle_spin_us = (uint32_t)o->spin_us;
	snprintf(cfg.listen_addr, sizeof(cfg.listen_addr), "%s", o->fabric_addr);
	struct dxl_fabric *f = NULL;
	struct dxl_ctx *c = NULL;
	int rc = dxl_fabric_new(&cfg, &f);
	if (!rc)
		rc = dxl_ctx_new(f, 0, &c);
	if (rc) {
		announce(o->ready_fd, "ERR %s: %s\n", dxl_errname(rc),
			 dxl_errmsg());
		dxl_fabric_delete(&f);
		return 1;
	}
	announce(o->ready_fd, "READY %s\n", dxl_fabric_addr(f));
	close(o->ready_fd);
	struct dxl_wc wc[8];
	while (!stopping()) {
		dxl_ctx_wait(c, 1000);
		dxl_ctx_poll(c, wc, (int)DXL_ARRAY_SIZE(wc));
	}
	dxl_ctx_delete(&c);
	dxl_fabric_delete(&f);
	return 0;
}
