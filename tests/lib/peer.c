/* peer.c -- a remote fabric node in a child process, driven over a socket */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/peer.h"

/*
 * Wire format on the control socket (both directions): a struct msg_hdr,
 * then hdr.len payload bytes. Both ends are the same binary, so payload
 * structs are sent as they are in memory. A reply carries the command's op,
 * rc (< 0: a DXL_E_* code and the payload is the peer's dxl_errmsg()), and
 * the command's result bytes.
 */
enum peer_op {
	OP_HELLO = 1,   /* struct dxl_fabric_cfg -> {node_id u32, addr string} */
	OP_QUIT,
	OP_MR_REG,      /* struct mr_reg_req + path -> rc = region, desc wire */
	OP_MR_DEREG,    /* struct range_req (region only) */
	OP_MR_READ,     /* struct range_req -> bytes */
	OP_MR_WRITE,    /* struct range_req + bytes */
	OP_MR_DURABLE,  /* struct range_req */
	OP_CTX_NEW,     /* struct ctx_req */
	OP_CTX_DELETE,  /* struct ctx_req */
	OP_ECHO_NEW,    /* struct ctx_req */
	OP_ECHO_STATS,  /* struct ctx_req -> struct dxlt_echo_stats */
	OP_PENDING,     /* -> uint64_t */
	OP_POWER_FAIL,  /* struct pf_req; success = the peer dies */
	OP_JOB,         /* struct job_req + name + arg -> "started" */
	OP_JOB_DONE,    /* peer -> test only: rc = job's return, its output */
};

struct msg_hdr {
	uint32_t op;
	int32_t rc;
	uint64_t len;
};

struct mr_reg_req {
	uint64_t len;
	uint64_t seed;
	uint32_t access;
	uint32_t fill;
	uint32_t path_len; /* 0 = anonymous */
	uint32_t pad;
};

struct range_req {
	uint32_t region;
	uint32_t pad;
	uint64_t off;
	uint64_t len;
};

struct ctx_req {
	uint32_t idx;
	uint32_t recv_len;
	uint32_t nbufs;
	uint32_t pad;
};

struct pf_req {
	uint32_t policy;
	uint32_t pad;
	uint64_t seed;
};

struct job_req {
	uint32_t name_len;
	uint32_t pad;
	uint64_t arg_len;
};

#define PEER_MAX_REGIONS 64
#define PEER_MAX_LIVE 64
#define PEER_FD 3 /* the control socket's number in the peer */

/* ---- the registry of live peers (for the watchdog) ----------------------- */

/* Written by the test's main thread; read by a signal handler, hence
 * sig_atomic_t-sized slots and no locks. 0 = free. */
static volatile pid_t live_pids[PEER_MAX_LIVE];

static void live_add(pid_t pid)
{
	for (int i = 0; i < PEER_MAX_LIVE; i++) {
		if (live_pids[i] == 0) {
			live_pids[i] = pid;
			return;
		}
	}
}

static void live_del(pid_t pid)
{
	for (int i = 0; i < PEER_MAX_LIVE; i++)
		if (live_pids[i] == pid)
			live_pids[i] = 0;
}

void dxlt_peer_kill_all(void)
{
	for (int i = 0; i < PEER_MAX_LIVE; i++) {
		pid_t pid = live_pids[i];
		if (pid > 0)
			kill(pid, SIGKILL);
	}
}

/* ---- socket I/O (both sides) -------------------------------------------- */

static int send_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int send_msg(int fd, uint32_t op, int32_t rc, const void *a,
		    size_t alen, const void *b, size_t blen)
{
	struct msg_hdr h = {.op = op, .rc = rc, .len = alen + blen};
	if (send_all(fd, &h, sizeof(h)))
		return -1;
	if (alen && send_all(fd, a, alen))
		return -1;
	if (blen && send_all(fd, b, blen))
		return -1;
	return 0;
}

/* recv_all -- read exactly len bytes; deadline_ms 0 = block forever.
 * Returns 0, DXL_E_UNREACHABLE (EOF/error) or DXL_E_TIMEDOUT. */
static int recv_all(int fd, void *buf, size_t len, uint64_t deadline_ms)
{
	uint8_t *p = buf;
	while (len) {
		if (deadline_ms) {
			uint64_t now = dxl_now_ms();
			if (now >= deadline_ms)
				return DXL_E_TIMEDOUT;
			struct pollfd pfd = {.fd = fd, .events = POLLIN};
			int r = poll(&pfd, 1, (int)(deadline_ms - now));
			if (r < 0 && errno == EINTR)
				continue;
			if (r == 0)
				return DXL_E_TIMEDOUT;
			if (r < 0)
				return DXL_E_UNREACHABLE;
		}
		ssize_t n = recv(fd, p, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return DXL_E_UNREACHABLE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* ======================================================================== */
/* The peer side                                                             */
/* ======================================================================== */

struct region {
	void *addr;
	size_t len;     /* as requested */
	size_t map_len; /* page-rounded */
	struct dxl_mr *mr;
	bool used;
};

struct echo {
	struct dxlt_peer_self *self;
	uint32_t idx, recv_len, nbufs;
	pthread_t thread;
	atomic_bool stop;

	pthread_mutex_t lock; /* protects everything below */
	pthread_cond_t cond;
	bool ready;
	int rc;
	char err[256];
	struct dxlt_echo_stats st;
};

struct dxlt_peer_self {
	int fd;
	struct dxl_fabric *f;
	const struct dxlt_job *jobs;
	struct region reg[PEER_MAX_REGIONS];
	struct dxl_ctx *ctx[DXL_FABRIC_MAX_CTX]; /* plain ctxs (main thread) */
	struct echo *echo[DXL_FABRIC_MAX_CTX];
};

struct dxl_fabric *dxlt_self_fabric(struct dxlt_peer_self *s)
{
	return s->f;
}

struct dxl_mr *dxlt_self_mr(struct dxlt_peer_self *s, int region)
{
	if (region < 0 || region >= PEER_MAX_REGIONS || !s->reg[region].used)
		return NULL;
	return s->reg[region].mr;
}

static void reply(struct dxlt_peer_self *s, uint32_t op, int rc,
		  const void *buf, size_t len)
{
	if (rc < 0) {
		const char *m = dxl_errmsg();
		buf = m;
		len = strlen(m);
	}
	if (send_msg(s->fd, op, rc, buf, len, NULL, 0))
		_exit(3); /* the test is gone */
}

static size_t page_round(size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	return (len + pg - 1) / pg * pg;
}

static int do_mr_reg(struct dxlt_peer_self *s, const struct mr_reg_req *rq,
		     const char *path, uint8_t *wire)
{
	int idx = -1;
	for (int i = 0; i < PEER_MAX_REGIONS; i++) {
		if (!s->reg[i].used) {
			idx = i;
			break;
		}
	}
	if (idx < 0)
		return dxl_err_set(DXL_E_FULL, "peer: %d regions in use",
				   PEER_MAX_REGIONS);
	if (rq->len == 0)
		return dxl_err_set(DXL_E_INVAL, "peer: region of 0 bytes");
	struct region *r = &s->reg[idx];
	r->len = rq->len;
	r->map_len = page_round(rq->len);
	if (path) {
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			return dxl_err_errno(errno, "peer: open %s", path);
		if (ftruncate(fd, (off_t)rq->len)) {
			int e = errno;
			close(fd);
			return dxl_err_errno(e, "peer: ftruncate %s", path);
		}
		r->addr = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE,
			       MAP_SHARED, fd, 0);
		close(fd);
		if (r->addr == MAP_FAILED)
			return dxl_err_errno(errno, "peer: mmap %s", path);
	} else {
		r->addr = dxlt_alloc_pages(r->map_len);
		if (!r->addr)
			return dxl_err_errno(errno, "peer: mmap %zu bytes",
					     r->map_len);
	}
	if (rq->fill == DXLT_FILL_PATTERN)
		dxlt_pattern_fill(r->addr, r->len, rq->seed, 0);
	else if (rq->fill == DXLT_FILL_ZERO)
		memset(r->addr, 0, r->len);
	int ret = dxl_mr_reg(s->f, r->addr, r->len, rq->access, &r->mr);
	if (ret) {
		munmap(r->addr, r->map_len);
		return ret;
	}
	r->used = true;
	struct dxl_mr_desc d;
	dxl_mr_desc(r->mr, &d);
	ret = dxl_mr_desc_encode(&d, wire, DXL_MR_DESC_WIRE_SIZE);
	return ret < 0 ? ret : idx;
}

/* region_range -- the region and range a command names, or NULL with the
 * error code in *rc (and the message set) */
static struct region *region_range(struct dxlt_peer_self *s,
				   const struct range_req *rq, bool need_mr,
				   int *rc)
{
	if (rq->region >= PEER_MAX_REGIONS || !s->reg[rq->region].used) {
		*rc = dxl_err_set(DXL_E_NOENT, "peer: no region %u", rq->region);
		return NULL;
	}
	struct region *r = &s->reg[rq->region];
	if (need_mr && !r->mr) {
		*rc = dxl_err_set(DXL_E_STATE, "peer: region %u is deregistered",
				  rq->region);
		return NULL;
	}
	if (rq->off > r->len || rq->len > r->len - rq->off) {
		*rc = dxl_err_set(DXL_E_INVAL,
				  "peer: range [%llu, +%llu) outside region %u of %zu bytes",
				  (unsigned long long)rq->off,
				  (unsigned long long)rq->len, rq->region, r->len);
		return NULL;
	}
	*rc = 0;
	return r;
}

static void region_free(struct region *r)
{
	if (!r->used)
		return;
	if (r->mr)
		dxl_mr_dereg(&r->mr);
	munmap(r->addr, r->map_len);
	memset(r, 0, sizeof(*r));
}

/* ---- echo ctx ------------------------------------------------------------ */

static void echo_probe(struct echo *e, struct dxl_qp *qp, void *buf,
		       uint32_t lkey)
{
	struct dxlt_echo_probe_reply rep = {.magic = DXLT_ECHO_PROBE_MAGIC};
	uint64_t *res = (uint64_t *)((uint8_t *)buf + 48); /* 8-aligned */
	rep.passive = dxl_qp_is_passive(qp);
	struct dxl_wr wr = {.wr_id = 1, .flags = DXL_WR_SIGNALED,
			    .local = res, .len = 8, .lkey = lkey,
			    .remote_addr = 0x10000, .rkey = 1};
	wr.op = DXL_WR_READ;
	rep.rc_read = dxl_qp_post(qp, &wr, NULL);
	wr.op = DXL_WR_WRITE;
	rep.rc_write = dxl_qp_post(qp, &wr, NULL);
	wr.op = DXL_WR_CAS;
	rep.rc_cas = dxl_qp_post(qp, &wr, NULL);
	wr.op = DXL_WR_FAA;
	rep.rc_faa = dxl_qp_post(qp, &wr, NULL);
	rep.state = (int32_t)dxl_qp_state(qp);
	memcpy(buf, &rep, sizeof(rep));
	pthread_mutex_lock(&e->lock);
	e->st.probes++;
	pthread_mutex_unlock(&e->lock);
}

static void echo_send_failed(struct echo *e, int why)
{
	pthread_mutex_lock(&e->lock);
	e->st.send_err++;
	e->st.last_send_err = why;
	pthread_mutex_unlock(&e->lock);
}

static void *echo_main(void *arg)
{
	struct echo *e = arg;
	struct dxl_ctx *c = NULL;
	struct dxl_mr *mr = NULL;
	size_t map_len = page_round((size_t)e->recv_len * e->nbufs);
	uint8_t *bufs = dxlt_alloc_pages(map_len);
	int ret = bufs ? 0 : dxl_err_set(DXL_E_NOMEM, "echo: no memory");
	if (!ret)
		ret = dxl_ctx_new(e->self->f, e->idx, &c);
	if (!ret)
		ret = dxl_mr_reg(e->self->f, bufs, map_len, DXL_MR_LOCAL_WRITE,
				 &mr);
	for (uint32_t i = 0; !ret && i < e->nbufs; i++)
		ret = dxl_ctx_post_recv(c, bufs + (size_t)i * e->recv_len,
					e->recv_len, dxl_mr_lkey(mr), i);
	pthread_mutex_lock(&e->lock);
	e->ready = true;
	e->rc = ret;
	if (ret)
		snprintf(e->err, sizeof(e->err), "%s", dxl_errmsg());
	pthread_cond_signal(&e->cond);
	pthread_mutex_unlock(&e->lock);
	if (ret)
		goto out;

	uint32_t lkey = dxl_mr_lkey(mr);
	while (!atomic_load_explicit(&e->stop, memory_order_relaxed)) {
		struct dxl_wc wc[16];
		dxl_ctx_wait(c, 20);
		int n = dxl_ctx_poll(c, wc, 16);
		for (int i = 0; i < n; i++) {
			uint32_t b = (uint32_t)(wc[i].wr_id & 0xffffffffu);
			if (b >= e->nbufs)
				continue; /* not ours */
			uint8_t *buf = bufs + (size_t)b * e->recv_len;
			if (wc[i].opcode == DXL_WC_SEND) {
				/* reply done: the buffer receives again */
				if (wc[i].status != DXL_WC_SUCCESS)
					echo_send_failed(e, (int)wc[i].status);
				else {
					pthread_mutex_lock(&e->lock);
					e->st.send_ok++;
					pthread_mutex_unlock(&e->lock);
				}
				dxl_ctx_post_recv(c, buf, e->recv_len, lkey, b);
				continue;
			}
			if (wc[i].status != DXL_WC_SUCCESS) {
				pthread_mutex_lock(&e->lock);
				e->st.recv_err++;
				e->st.last_recv_err = (int32_t)wc[i].status;
				pthread_mutex_unlock(&e->lock);
				dxl_ctx_post_recv(c, buf, e->recv_len, lkey, b);
				continue;
			}
			uint32_t len = wc[i].byte_len;
			pthread_mutex_lock(&e->lock);
			e->st.recv_ok++;
			e->st.last_byte_len = len;
			e->st.last_passive = wc[i].qp ? dxl_qp_is_passive(wc[i].qp) : -1;
			pthread_mutex_unlock(&e->lock);
			uint64_t magic = 0;
			if (len >= 8)
				memcpy(&magic, buf, 8);
			if (magic == DXLT_ECHO_PROBE_MAGIC && wc[i].qp) {
				echo_probe(e, wc[i].qp, buf, lkey);
				len = sizeof(struct dxlt_echo_probe_reply);
			}
			struct dxl_wr wr = {.wr_id = (uint64_t)b | (1ull << 32),
					    .op = DXL_WR_SEND,
					    .flags = DXL_WR_SIGNALED,
					    .local = buf, .len = len, .lkey = lkey};
			ret = wc[i].qp ? dxl_qp_post(wc[i].qp, &wr, NULL)
				       : DXL_E_INVAL;
			if (ret) {
				echo_send_failed(e, ret);
				dxl_ctx_post_recv(c, buf, e->recv_len, lkey, b);
			}
		}
	}
out:
	if (c)
		dxl_ctx_delete(&c);
	if (mr)
		dxl_mr_dereg(&mr);
	dxlt_free_pages(bufs, map_len);
	return NULL;
}

static void echo_stop(struct dxlt_peer_self *s, uint32_t idx)
{
	struct echo *e = s->echo[idx];
	if (!e)
		return;
	atomic_store(&e->stop, true);
	pthread_join(e->thread, NULL);
	pthread_mutex_destroy(&e->lock);
	pthread_cond_destroy(&e->cond);
	free(e);
	s->echo[idx] = NULL;
}

static int do_echo_new(struct dxlt_peer_self *s, const struct ctx_req *rq)
{
	if (rq->idx >= DXL_FABRIC_MAX_CTX || s->echo[rq->idx] ||
	    s->ctx[rq->idx])
		return dxl_err_set(DXL_E_EXIST, "peer: ctx %u exists or invalid",
				   rq->idx);
	if (rq->recv_len < 64 || rq->nbufs == 0)
		return dxl_err_set(DXL_E_INVAL,
				   "peer: echo needs recv_len >= 64 and nbufs > 0");
	struct echo *e = calloc(1, sizeof(*e));
	if (!e)
		return dxl_err_set(DXL_E_NOMEM, "peer: no memory");
	e->self = s;
	e->idx = rq->idx;
	e->recv_len = rq->recv_len;
	e->nbufs = rq->nbufs;
	e->st.last_recv_err = -1;
	atomic_init(&e->stop, false);
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->cond, NULL);
	if (pthread_create(&e->thread, NULL, echo_main, e)) {
		pthread_mutex_destroy(&e->lock);
		pthread_cond_destroy(&e->cond);
		free(e);
		return dxl_err_set(DXL_E_IO, "peer: pthread_create failed");
	}
	s->echo[rq->idx] = e;
	pthread_mutex_lock(&e->lock);
	while (!e->ready)
		pthread_cond_wait(&e->cond, &e->lock);
	int rc = e->rc;
	char err[256];
	snprintf(err, sizeof(err), "%s", e->err);
	pthread_mutex_unlock(&e->lock);
	if (rc) {
		echo_stop(s, rq->idx);
		return dxl_err_set(rc, "peer: echo ctx %u: %s", rq->idx, err);
	}
	return 0;
}

/* ---- command loop ---------------------------------------------------------- */

static void peer_cleanup(struct dxlt_peer_self *s)
{
	for (uint32_t i = 0; i < DXL_FABRIC_MAX_CTX; i++) {
		echo_stop(s, i);
		if (s->ctx[i])
			dxl_ctx_delete(&s->ctx[i]);
	}
	for (int i = 0; i < PEER_MAX_REGIONS; i++)
		region_free(&s->reg[i]);
	dxl_fabric_delete(&s->f);
}

static void run_job(struct dxlt_peer_self *s, const uint8_t *p, size_t len)
{
	struct job_req jr;
	if (len < sizeof(jr)) {
		reply(s, OP_JOB, dxl_err_set(DXL_E_PROTO, "peer: short job"), 0, 0);
		return;
	}
	memcpy(&jr, p, sizeof(jr));
	if (sizeof(jr) + jr.name_len + jr.arg_len != len || jr.name_len > 200) {
		reply(s, OP_JOB, dxl_err_set(DXL_E_PROTO, "peer: bad job"), 0, 0);
		return;
	}
	char name[256];
	memcpy(name, p + sizeof(jr), jr.name_len);
	name[jr.name_len] = '\0';
	dxlt_job_fn fn = NULL;
	for (const struct dxlt_job *j = s->jobs; j && j->name; j++)
		if (strcmp(j->name, name) == 0)
			fn = j->fn;
	if (!fn) {
		reply(s, OP_JOB,
		      dxl_err_set(DXL_E_NOENT, "peer: no job named '%s'", name),
		      NULL, 0);
		return;
	}
	reply(s, OP_JOB, 0, NULL, 0);
	void *out = NULL;
	size_t out_len = 0;
	int rc = fn(s, p + sizeof(jr) + jr.name_len, (size_t)jr.arg_len, &out,
		    &out_len);
	if (send_msg(s->fd, OP_JOB_DONE, rc, out, out ? out_len : 0, NULL, 0))
		_exit(3);
	free(out);
}

static void serve(struct dxlt_peer_self *s)
{
	for (;;) {
		struct msg_hdr h;
		if (recv_all(s->fd, &h, sizeof(h), 0))
			return; /* the test is gone */
		uint8_t *p = NULL;
		if (h.len) {
			p = malloc(h.len);
			if (!p || recv_all(s->fd, p, h.len, 0))
				_exit(4);
		}
		struct range_req rr;
		struct ctx_req cr;
		struct region *r;
		int ret;
		memset(&rr, 0, sizeof(rr));
		memset(&cr, 0, sizeof(cr));
		if (h.len >= sizeof(rr))
			memcpy(&rr, p, sizeof(rr));
		if (h.len >= sizeof(cr))
			memcpy(&cr, p, sizeof(cr));
		switch (h.op) {
		case OP_QUIT:
			free(p);
			peer_cleanup(s);
			reply(s, OP_QUIT, 0, NULL, 0);
			return;
		case OP_MR_REG: {
			struct mr_reg_req mq;
			uint8_t wire[DXL_MR_DESC_WIRE_SIZE];
			char path[4096];
			memcpy(&mq, p, sizeof(mq));
			if (mq.path_len) {
				memcpy(path, p + sizeof(mq),
				       DXL_MIN(mq.path_len, sizeof(path) - 1));
				path[DXL_MIN(mq.path_len, sizeof(path) - 1)] = 0;
			}
			ret = do_mr_reg(s, &mq, mq.path_len ? path : NULL, wire);
			reply(s, h.op, ret, wire, sizeof(wire));
			break;
		}
		case OP_MR_DEREG:
			r = region_range(s, &rr, true, &ret);
			if (r)
				dxl_mr_dereg(&r->mr);
			reply(s, h.op, ret, NULL, 0);
			break;
		case OP_MR_READ:
			r = region_range(s, &rr, false, &ret);
			reply(s, h.op, ret,
			      r ? (uint8_t *)r->addr + rr.off : NULL, rr.len);
			break;
		case OP_MR_WRITE:
			r = region_range(s, &rr, false, &ret);
			if (r && h.len != sizeof(rr) + rr.len)
				ret = dxl_err_set(DXL_E_PROTO, "peer: bad write");
			else if (r)
				memcpy((uint8_t *)r->addr + rr.off,
				       p + sizeof(rr), rr.len);
			reply(s, h.op, ret, NULL, 0);
			break;
		case OP_MR_DURABLE:
			r = region_range(s, &rr, true, &ret);
			if (r)
				dxl_mr_mark_durable(r->mr,
						    (uint8_t *)r->addr + rr.off,
						    rr.len);
			reply(s, h.op, ret, NULL, 0);
			break;
		case OP_CTX_NEW:
			if (cr.idx < DXL_FABRIC_MAX_CTX && s->echo[cr.idx])
				ret = dxl_err_set(DXL_E_EXIST,
						  "peer: ctx %u is an echo ctx",
						  cr.idx);
			else
				ret = dxl_ctx_new(s->f, cr.idx,
						  &s->ctx[cr.idx %
							  DXL_FABRIC_MAX_CTX]);
			reply(s, h.op, ret, NULL, 0);
			break;
		case OP_CTX_DELETE:
			ret = 0;
			if (cr.idx >= DXL_FABRIC_MAX_CTX)
				ret = dxl_err_set(DXL_E_INVAL, "peer: bad idx");
			else if (s->echo[cr.idx])
				echo_stop(s, cr.idx);
			else if (s->ctx[cr.idx])
				dxl_ctx_delete(&s->ctx[cr.idx]);
			else
				ret = dxl_err_set(DXL_E_NOENT,
						  "peer: no ctx %u", cr.idx);
			reply(s, h.op, ret, NULL, 0);
			break;
		case OP_ECHO_NEW:
			reply(s, h.op, do_echo_new(s, &cr), NULL, 0);
			break;
		case OP_ECHO_STATS: {
			struct dxlt_echo_stats st;
			struct echo *e = cr.idx < DXL_FABRIC_MAX_CTX
						 ? s->echo[cr.idx] : NULL;
			if (e) {
				pthread_mutex_lock(&e->lock);
				st = e->st;
				pthread_mutex_unlock(&e->lock);
			}
			reply(s, h.op,
			      e ? 0 : dxl_err_set(DXL_E_NOENT,
						  "peer: no echo ctx %u", cr.idx),
			      &st, sizeof(st));
			break;
		}
		case OP_PENDING: {
			uint64_t n = dxl_fabric_pending_lines(s->f);
			reply(s, h.op, 0, &n, sizeof(n));
			break;
		}
		case OP_POWER_FAIL: {
			struct pf_req pq;
			memcpy(&pq, p, sizeof(pq));
			ret = dxl_fabric_power_fail(
				s->f, (enum dxl_pf_policy)pq.policy, pq.seed);
			/* only reached when the simulation was refused */
			reply(s, h.op, ret ? ret : DXL_E_INTERNAL, NULL, 0);
			break;
		}
		case OP_JOB:
			run_job(s, p, h.len);
			break;
		default:
			reply(s, h.op,
			      dxl_err_set(DXL_E_PROTO, "peer: unknown op %u", h.op),
			      NULL, 0);
		}
		free(p);
	}
}

void dxlt_peer_child_hook(const struct dxlt_job *jobs)
{
	const char *fd_env = getenv("DXLT_PEER_FD");
	if (!fd_env)
		return;
	const char *ppid_env = getenv("DXLT_PEER_PPID");
	if (!ppid_env || atoi(ppid_env) != (int)getppid())
		_exit(5); /* the test died before we got here */
	alarm((unsigned)atoi(getenv("DXL_TEST_PEER_ALARM_S")
				     ? getenv("DXL_TEST_PEER_ALARM_S")
				     : "300"));
	struct dxlt_peer_self *s = calloc(1, sizeof(*s));
	if (!s)
		_exit(6);
	s->fd = atoi(fd_env);
	s->jobs = jobs;
	unsetenv("DXLT_PEER_FD");
	unsetenv("DXLT_PEER_PPID");

	struct msg_hdr h;
	struct dxl_fabric_cfg cfg;
	if (recv_all(s->fd, &h, sizeof(h), 0) || h.op != OP_HELLO ||
	    h.len != sizeof(cfg) || recv_all(s->fd, &cfg, sizeof(cfg), 0))
		_exit(7);
	int ret = dxl_fabric_new(&cfg, &s->f);
	if (ret) {
		reply(s, OP_HELLO, ret, NULL, 0);
		exit(0);
	}
	uint32_t node = dxl_fabric_node_id(s->f);
	const char *addr = dxl_fabric_addr(s->f);
	if (send_msg(s->fd, OP_HELLO, 0, &node, sizeof(node), addr,
		     strlen(addr)))
		_exit(3);
	serve(s);
	if (s->f)
		peer_cleanup(s);
	close(s->fd);
	free(s);
	exit(0);
}

/* ======================================================================== */
/* The test side                                                             */
/* ======================================================================== */

struct dxlt_peer {
	pid_t pid;
	int fd;    /* -1 once closed */
	int pidfd; /* -1 if pidfd_open is unavailable */
	bool reaped;
	int status;
	bool job_running;
	int timeout_ms;
	uint32_t node;
	char addr[DXL_FABRIC_ADDR_MAX];
};

extern char **environ;

/* build the peer's environment before fork: nothing may allocate after it */
static char **peer_env(char *fd_var, char *ppid_var)
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 3, sizeof(*env));
	if (!env)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "DXLT_PEER_", 10) != 0)
			env[k++] = environ[i];
	env[k++] = fd_var;
	env[k++] = ppid_var;
	env[k] = NULL;
	return env;
}

static int peer_recv(struct dxlt_peer *p, uint32_t op, void *buf, size_t cap,
		     size_t *len_out)
{
	if (p->fd < 0)
		return dxl_err_set(DXL_E_UNREACHABLE, "peer %d is gone", (int)p->pid);
	uint64_t deadline = dxl_now_ms() + (uint64_t)p->timeout_ms;
	struct msg_hdr h;
	int ret = recv_all(p->fd, &h, sizeof(h), deadline);
	if (ret)
		return dxl_err_set(ret, "peer %d: no reply to op %u (%s)",
				   (int)p->pid, op,
				   ret == DXL_E_TIMEDOUT ? "timed out" : "peer gone");
	if (h.op != op)
		return dxl_err_set(DXL_E_PROTO, "peer %d: reply op %u, expected %u",
				   (int)p->pid, h.op, op);
	if (h.rc < 0) {
		char msg[512];
		size_t n = DXL_MIN(h.len, sizeof(msg) - 1);
		ret = recv_all(p->fd, msg, n, deadline);
		msg[ret ? 0 : n] = '\0';
		/* drain the rest, if any */
		for (uint64_t left = h.len - n; !ret && left;) {
			char junk[256];
			size_t k = DXL_MIN(left, sizeof(junk));
			ret = recv_all(p->fd, junk, k, deadline);
			left -= k;
		}
		return dxl_err_set(h.rc, "peer %d: %s", (int)p->pid, msg);
	}
	if (h.len > cap)
		return dxl_err_set(DXL_E_PROTO, "peer %d: reply of %llu bytes, room for %zu",
				   (int)p->pid, (unsigned long long)h.len, cap);
	if (h.len) {
		ret = recv_all(p->fd, buf, h.len, deadline);
		if (ret)
			return dxl_err_set(ret, "peer %d: short reply", (int)p->pid);
	}
	if (len_out)
		*len_out = h.len;
	return h.rc;
}

/* one command, one reply */
static int peer_call(struct dxlt_peer *p, uint32_t op, const void *a,
		     size_t alen, const void *b, size_t blen, void *out,
		     size_t cap, size_t *out_len)
{
	if (p->fd < 0)
		return dxl_err_set(DXL_E_UNREACHABLE, "peer %d is gone", (int)p->pid);
	if (p->job_running)
		return dxl_err_set(DXL_E_BUSY, "peer %d runs a job: job_wait first",
				   (int)p->pid);
	if (send_msg(p->fd, op, 0, a, alen, b, blen))
		return dxl_err_set(DXL_E_UNREACHABLE, "peer %d: send failed (%s)",
				   (int)p->pid, strerror(errno));
	return peer_recv(p, op, out, cap, out_len);
}

int dxlt_peer_start(const struct dxl_fabric_cfg *cfg, struct dxlt_peer **out)
{
	*out = NULL;
	struct dxlt_peer *p = calloc(1, sizeof(*p));
	if (!p)
		return dxl_err_set(DXL_E_NOMEM, "peer: no memory");
	p->fd = -1;
	p->pidfd = -1;
	p->timeout_ms = 3 * dxlt_wait_ms();
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		free(p);
		return dxl_err_errno(errno, "peer: socketpair");
	}
	char fd_var[32], ppid_var[48];
	snprintf(fd_var, sizeof(fd_var), "DXLT_PEER_FD=%d", PEER_FD);
	snprintf(ppid_var, sizeof(ppid_var), "DXLT_PEER_PPID=%d", (int)getpid());
	char **env = peer_env(fd_var, ppid_var);
	char arg0[] = "dxlt-peer";
	char *argv[] = {arg0, NULL};
	/* if /proc is not mounted: the program as it was started */
	char *self = realpath(program_invocation_name, NULL);
	if (!self)
		self = strdup("/proc/self/exe");
	if (!env || !self) {
		free(env);
		free(self);
		close(sv[0]);
		close(sv[1]);
		free(p);
		return dxl_err_set(DXL_E_NOMEM, "peer: no memory");
	}
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		free(env);
		free(self);
		close(sv[0]);
		close(sv[1]);
		free(p);
		return dxl_err_errno(e, "peer: fork");
	}
	if (pid == 0) {
		/* child: async-signal-safe calls only until execve */
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (sv[1] == PEER_FD)
			fcntl(PEER_FD, F_SETFD, 0);
		else if (dup2(sv[1], PEER_FD) < 0)
			_exit(126);
		syscall(SYS_close_range, PEER_FD + 1, ~0u, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execve("/proc/self/exe", argv, env);
		execve(self, argv, env);
		_exit(127);
	}
	free(env);
	free(self);
	close(sv[1]);
	p->pid = pid;
	p->fd = sv[0];
	live_add(pid);
#ifdef SYS_pidfd_open
	p->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (p->pidfd >= 0)
		fcntl(p->pidfd, F_SETFD, FD_CLOEXEC);
#endif
	int ret = send_msg(p->fd, OP_HELLO, 0, cfg, sizeof(*cfg), NULL, 0)
			  ? dxl_err_set(DXL_E_UNREACHABLE, "peer: hello failed")
			  : 0;
	char buf[4 + DXL_FABRIC_ADDR_MAX];
	size_t len = 0;
	if (!ret)
		ret = peer_recv(p, OP_HELLO, buf, sizeof(buf) - 1, &len);
	if (!ret && len < 5)
		ret = dxl_err_set(DXL_E_PROTO, "peer: short hello");
	if (ret) {
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
		dxlt_peer_stop(&p);
		return dxl_err_set(ret, "%s", msg);
	}
	memcpy(&p->node, buf, 4);
	buf[len] = '\0';
	snprintf(p->addr, sizeof(p->addr), "%s", buf + 4);
	*out = p;
	return 0;
}

const char *dxlt_peer_addr(const struct dxlt_peer *p)
{
	return p->addr;
}

uint32_t dxlt_peer_node_id(const struct dxlt_peer *p)
{
	return p->node;
}

pid_t dxlt_peer_pid(const struct dxlt_peer *p)
{
	return p->pid;
}

void dxlt_peer_set_timeout(struct dxlt_peer *p, int timeout_ms)
{
	p->timeout_ms = timeout_ms > 0 ? timeout_ms : 3 * dxlt_wait_ms();
}

static void peer_close_fd(struct dxlt_peer *p)
{
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
}

int dxlt_peer_wait_exit(struct dxlt_peer *p, int timeout_ms, int *status)
{
	uint64_t deadline = dxl_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	while (!p->reaped) {
		int st = 0;
		pid_t r = waitpid(p->pid, &st, WNOHANG);
		if (r == p->pid || (r < 0 && errno == ECHILD)) {
			p->reaped = true;
			p->status = r == p->pid ? st : -1;
			live_del(p->pid);
			peer_close_fd(p);
			break;
		}
		uint64_t now = dxl_now_ms();
		if (now >= deadline)
			return dxl_err_set(DXL_E_TIMEDOUT,
					   "peer %d did not exit in %d ms",
					   (int)p->pid, timeout_ms);
		int left = (int)DXL_MIN(deadline - now, 1000u);
		if (p->pidfd >= 0) {
			struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
			poll(&pfd, 1, left); /* readable when the child exits */
		} else {
			usleep(2000); /* no pidfd: short polling is all we have */
		}
	}
	if (status)
		*status = p->status;
	return 0;
}

int dxlt_peer_stop(struct dxlt_peer **pp)
{
	if (!pp || !*pp)
		return -1;
	struct dxlt_peer *p = *pp;
	if (!p->reaped && p->fd >= 0 && !p->job_running) {
		p->timeout_ms = 5000;
		if (peer_call(p, OP_QUIT, NULL, 0, NULL, 0, NULL, 0, NULL) == 0)
			dxlt_peer_wait_exit(p, 5000, NULL);
	}
	if (!p->reaped) {
		kill(p->pid, SIGKILL);
		dxlt_peer_wait_exit(p, 10000, NULL);
	}
	if (!p->reaped) { /* unkillable?! block rather than leave a zombie */
		int st;
		waitpid(p->pid, &st, 0);
		p->status = st;
		live_del(p->pid);
	}
	peer_close_fd(p);
	if (p->pidfd >= 0)
		close(p->pidfd);
	int status = p->status;
	free(p);
	*pp = NULL;
	return status;
}

int dxlt_peer_signal(struct dxlt_peer *p, int sig)
{
	if (p->reaped)
		return dxl_err_set(DXL_E_STATE, "peer %d already reaped", (int)p->pid);
	if (kill(p->pid, sig))
		return dxl_err_errno(errno, "kill(%d, %d)", (int)p->pid, sig);
	return 0;
}

int dxlt_peer_mr_reg(struct dxlt_peer *p, const struct dxlt_region_opts *o,
		     struct dxl_mr_desc *desc)
{
	struct mr_reg_req rq = {.len = o->len, .seed = o->seed,
				.access = o->access, .fill = (uint32_t)o->fill,
				.path_len = o->path ? (uint32_t)strlen(o->path) : 0};
	uint8_t wire[DXL_MR_DESC_WIRE_SIZE];
	size_t len = 0;
	int idx = peer_call(p, OP_MR_REG, &rq, sizeof(rq), o->path, rq.path_len,
			    wire, sizeof(wire), &len);
	if (idx < 0)
		return idx;
	int ret = dxl_mr_desc_decode(wire, len, desc);
	return ret ? ret : idx;
}

int dxlt_peer_mr_dereg(struct dxlt_peer *p, int region)
{
	struct range_req rq = {.region = (uint32_t)region};
	return peer_call(p, OP_MR_DEREG, &rq, sizeof(rq), NULL, 0, NULL, 0, NULL);
}

int dxlt_peer_mr_read(struct dxlt_peer *p, int region, uint64_t off, void *buf,
		      size_t len)
{
	struct range_req rq = {.region = (uint32_t)region, .off = off, .len = len};
	size_t got = 0;
	int ret = peer_call(p, OP_MR_READ, &rq, sizeof(rq), NULL, 0, buf, len,
			    &got);
	if (!ret && got != len)
		return dxl_err_set(DXL_E_PROTO, "peer: read %zu of %zu bytes", got,
				   len);
	return ret;
}

int dxlt_peer_mr_write(struct dxlt_peer *p, int region, uint64_t off,
		       const void *buf, size_t len)
{
	struct range_req rq = {.region = (uint32_t)region, .off = off, .len = len};
	return peer_call(p, OP_MR_WRITE, &rq, sizeof(rq), buf, len, NULL, 0, NULL);
}

int dxlt_peer_mr_mark_durable(struct dxlt_peer *p, int region, uint64_t off,
			      size_t len)
{
	struct range_req rq = {.region = (uint32_t)region, .off = off, .len = len};
	return peer_call(p, OP_MR_DURABLE, &rq, sizeof(rq), NULL, 0, NULL, 0,
			 NULL);
}

int dxlt_peer_ctx_new(struct dxlt_peer *p, uint32_t idx)
{
	struct ctx_req rq = {.idx = idx};
	return peer_call(p, OP_CTX_NEW, &rq, sizeof(rq), NULL, 0, NULL, 0, NULL);
}

int dxlt_peer_ctx_delete(struct dxlt_peer *p, uint32_t idx)
{
	struct ctx_req rq = {.idx = idx};
	return peer_call(p, OP_CTX_DELETE, &rq, sizeof(rq), NULL, 0, NULL, 0,
			 NULL);
}

int dxlt_peer_echo_new(struct dxlt_peer *p, uint32_t idx, uint32_t recv_len,
		       uint32_t nbufs)
{
	struct ctx_req rq = {.idx = idx, .recv_len = recv_len, .nbufs = nbufs};
	return peer_call(p, OP_ECHO_NEW, &rq, sizeof(rq), NULL, 0, NULL, 0, NULL);
}

int dxlt_peer_echo_stats(struct dxlt_peer *p, uint32_t idx,
			 struct dxlt_echo_stats *out)
{
	struct ctx_req rq = {.idx = idx};
	size_t len = 0;
	int ret = peer_call(p, OP_ECHO_STATS, &rq, sizeof(rq), NULL, 0, out,
			    sizeof(*out), &len);
	if (!ret && len != sizeof(*out))
		return dxl_err_set(DXL_E_PROTO, "peer: short echo stats");
	return ret;
}

int dxlt_peer_pending_lines(struct dxlt_peer *p, uint64_t *out)
{
	size_t len = 0;
	int ret = peer_call(p, OP_PENDING, NULL, 0, NULL, 0, out, sizeof(*out),
			    &len);
	if (!ret && len != sizeof(*out))
		return dxl_err_set(DXL_E_PROTO, "peer: short pending reply");
	return ret;
}

int dxlt_peer_power_fail(struct dxlt_peer *p, enum dxl_pf_policy policy,
			 uint64_t seed)
{
	struct pf_req rq = {.policy = (uint32_t)policy, .seed = seed};
	int ret = peer_call(p, OP_POWER_FAIL, &rq, sizeof(rq), NULL, 0, NULL, 0,
			    NULL);
	if (ret != DXL_E_UNREACHABLE)
		return ret < 0 ? ret : DXL_E_INTERNAL; /* refused: still alive */
	/* the socket closed: the peer must be dying by SIGKILL */
	int st = 0;
	ret = dxlt_peer_wait_exit(p, p->timeout_ms, &st);
	if (ret)
		return ret;
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
		return dxl_err_set(DXL_E_INTERNAL,
				   "peer %d: power failure ended with status 0x%x, "
				   "not SIGKILL", (int)p->pid, st);
	return 0;
}

int dxlt_peer_job_start(struct dxlt_peer *p, const char *name, const void *arg,
			size_t arg_len)
{
	size_t nl = strlen(name);
	struct job_req jr = {.name_len = (uint32_t)nl, .arg_len = arg_len};
	size_t total = sizeof(jr) + nl + arg_len;
	uint8_t *buf = malloc(total);
	if (!buf)
		return dxl_err_set(DXL_E_NOMEM, "peer: no memory");
	memcpy(buf, &jr, sizeof(jr));
	memcpy(buf + sizeof(jr), name, nl);
	if (arg_len)
		memcpy(buf + sizeof(jr) + nl, arg, arg_len);
	int ret = peer_call(p, OP_JOB, buf, total, NULL, 0, NULL, 0, NULL);
	free(buf);
	if (!ret)
		p->job_running = true;
	return ret;
}

int dxlt_peer_job_wait(struct dxlt_peer *p, int *job_rc, void **out,
		       size_t *out_len)
{
	if (!p->job_running)
		return dxl_err_set(DXL_E_STATE, "peer %d: no job running",
				   (int)p->pid);
	if (out)
		*out = NULL;
	if (out_len)
		*out_len = 0;
	uint64_t deadline = dxl_now_ms() + (uint64_t)p->timeout_ms;
	struct msg_hdr h;
	int ret = recv_all(p->fd, &h, sizeof(h), deadline);
	if (ret)
		return dxl_err_set(ret, "peer %d: job did not finish (%s)",
				   (int)p->pid,
				   ret == DXL_E_TIMEDOUT ? "timed out" : "peer gone");
	if (h.op != OP_JOB_DONE)
		return dxl_err_set(DXL_E_PROTO, "peer %d: op %u instead of job end",
				   (int)p->pid, h.op);
	p->job_running = false;
	void *buf = NULL;
	if (h.len) {
		buf = malloc(h.len);
		if (!buf)
			return dxl_err_set(DXL_E_NOMEM, "peer: no memory");
		ret = recv_all(p->fd, buf, h.len, deadline);
		if (ret) {
			free(buf);
			return dxl_err_set(ret, "peer %d: short job output",
					   (int)p->pid);
		}
	}
	if (job_rc)
		*job_rc = h.rc;
	if (out)
		*out = buf;
	else
		free(buf);
	if (out_len)
		*out_len = h.len;
	return 0;
}
