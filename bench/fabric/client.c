/* client.c -- dxl-bench-fabric's measuring side: worker threads, cells, idle probe */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/fabric/bench_fabric.h"
#include "common/common.h"
#include "dxl/co.h"

/*
 * A cell is (op, size, batch B, outstanding O, threads T). Each of the T
 * worker threads owns a ctx and one QP to server ctx (thread % nctx) and
 * keeps O "slots" busy; a slot is a chain of B requests posted with one
 * doorbell (dxl_qp_post of a B-long chain), only the last one signalled
 * (selective signalling). One latency sample = one chain, from just before
 * its post to the poll that returned its last completion; ops counts
 * requests. SEND chains complete when all B echoes are back; a slot is a
 * coroutine of the real system, without the coroutine machinery.
 */

#define WR_SLOT_MASK 0xffffull
#define WR_SEND_BIT (1ull << 40)
#define WR_SYNC_ID (1ull << 50) /* synchronous set-up / verification READs */

/* SEND payload header: slot(16) | index in chain(8) | cell generation(8) | seq(32) */
#define HDR(slot, i, gen, seq)                                                \
	(((uint64_t)(slot) << 48) | ((uint64_t)(i) << 40) |                   \
	 ((uint64_t)(gen) << 32) | (uint64_t)(uint32_t)(seq))

struct client;

enum slot_state { SLOT_IDLE = 0, SLOT_BUSY };

struct slot {
	enum slot_state state;
	bool verify;
	bool send_done;
	uint32_t replies; /* SEND: echoes still expected */
	uint32_t seq;
	uint64_t t_post;
	uint64_t off[BF_MAX_BATCH]; /* READ: offsets in the READ region */
	struct dxl_wr wr[BF_MAX_BATCH];
};

struct worker {
	struct client *cl;
	uint32_t idx;
	pthread_t th;
	struct dxl_ctx *ctx;
	struct dxl_qp *qp;
	uint8_t *mem;
	size_t mem_len;
	struct dxl_mr *mr;
	uint8_t *slotmem; /* BF_MAX_OUTSTANDING x max batch x stride */
	size_t stride;
	uint8_t *recvmem;
	uint32_t nrecv;
	uint8_t *scratch;
	size_t scratch_len;
	struct slot *slots;
	uint64_t *mirror; /* CAS/FAA: the value each of our words must hold */
	uint64_t rng;
	uint64_t wctr;
	uint8_t gen;
	uint32_t idle_q[BF_MAX_OUTSTANDING]; /* slots waiting to be posted */
	uint32_t idle_head, idle_n;
	/* results of the current cell */
	struct dxl_hist hist;
	uint64_t ops, samples, vchecked, verrs;
	double secs;
	int errors;
	char note[160];
	bool setup_ok;
	char setup_err[256];
	struct bf_rpc_cli *rpc; /* NULL: no RPC (rpc_err says why) */
	struct dxl_sched *sched; /* --driver co: coroutines on ctx */
	char rpc_err[160];
};

struct client {
	struct bf_opts *o;
	struct bf_hello hello;
	char ctl_addr[DXL_FABRIC_ADDR_MAX];
	char srv_fabric[DXL_FABRIC_ADDR_MAX];
	int ctl_fd;
	pid_t server_pid;
	struct dxl_fabric *f;
	uint8_t *expect; /* the server's READ region, computed locally */
	uint32_t max_b, max_o, max_t, max_size;
	struct worker w[BF_MAX_THREADS];
	pthread_barrier_t start, end;
	bool running; /* worker threads exist and wait at `start` */
	struct bf_cell cell;
	uint64_t t_start;
	atomic_int quit;
};

static pid_t g_server_pid;

static void *xalloc(size_t len)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, len))
		return NULL;
	memset(p, 0, len);
	return p;
}

static inline uint8_t *wr_buf(struct worker *w, uint32_t s, uint32_t i)
{
	return w->slotmem + ((size_t)s * w->cl->max_b + i) * w->stride;
}

static void note(struct worker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void note(struct worker *w, const char *fmt, ...)
{
	w->errors++;
	if (w->note[0])
		return; /* keep the first */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->note, sizeof(w->note), fmt, ap);
	va_end(ap);
}

static const char *wc_op_name(enum dxl_wc_opcode op)
{
	static const char *const n[] = {"READ", "WRITE", "CAS",
					"FAA",  "SEND",  "RECV"};
	return (unsigned)op < DXL_ARRAY_SIZE(n) ? n[op] : "?";
}

static int connect_qp(struct worker *w)
{
	struct client *cl = w->cl;
	if (w->qp)
		dxl_qp_delete(&w->qp);
	int rc = dxl_qp_connect(w->ctx, cl->srv_fabric, w->idx % cl->hello.nctx,
				&w->qp);
	if (rc)
		note(w, "thread %u: connect to %s: %s", w->idx, cl->srv_fabric,
		     dxl_errmsg());
	return rc;
}

/* poll until the completion with wr_id `id` arrives (synchronous helper) */
static int wait_sync(struct worker *w, uint64_t id)
{
	uint64_t deadline = dxl_now_ns() +
			    (uint64_t)w->cl->o->cell_timeout_ms * 1000000ull;
	struct dxl_wc wc[16];
	for (;;) {
		int n = dxl_ctx_poll(w->ctx, wc, 16);
		if (n < 0) {
			note(w, "poll: %s", dxl_errmsg());
			return n;
		}
		for (int i = 0; i < n; i++) {
			if (wc[i].opcode == DXL_WC_RECV) {
				/* a stale echo from an aborted cell */
				uint32_t b = (uint32_t)wc[i].wr_id;
				dxl_ctx_post_recv(w->ctx,
						  w->recvmem + (size_t)b * w->cl->max_size,
						  w->cl->max_size, dxl_mr_lkey(w->mr), b);
				continue;
			}
			if (wc[i].status != DXL_WC_SUCCESS) {
				note(w, "%s completion: %s", wc_op_name(wc[i].opcode),
				     dxl_wc_status_str(wc[i].status));
				return DXL_E_IO;
			}
			if (wc[i].wr_id == id)
				return 0;
		}
		if (n == 0) {
			if (dxl_now_ns() > deadline) {
				note(w, "no completion for %u ms",
				     w->cl->o->cell_timeout_ms);
				return DXL_E_TIMEDOUT;
			}
			dxl_ctx_wait(w->ctx, 10);
		}
	}
}

static int sync_read(struct worker *w, uint64_t raddr, uint32_t rkey,
		     void *dst, uint32_t len)
{
	struct dxl_wr wr = {
		.wr_id = WR_SYNC_ID,
		.op = DXL_WR_READ,
		.flags = DXL_WR_SIGNALED,
		.local = dst,
		.len = len,
		.lkey = dxl_mr_lkey(w->mr),
		.remote_addr = raddr,
		.rkey = rkey,
	};
	int rc = dxl_qp_post(w->qp, &wr, NULL);
	if (rc) {
		note(w, "post READ: %s", dxl_errmsg());
		return rc;
	}
	return wait_sync(w, WR_SYNC_ID);
}

/* ---- one cell on one thread ------------------------------------------------- */

struct run {
	struct worker *w;
	const struct bf_cell *c;
	enum bf_op op;
	uint32_t B, O, S;
	uint64_t wbase, wslots, wstride; /* WRITE: this thread's slice */
	uint64_t abase;                  /* CAS/FAA: this thread's words */
	uint64_t chains_posted, chains_done;
	uint64_t limit;                  /* iters mode: chains to post */
	uint64_t t_measure, t_end;
	uint64_t t_iter0, t_last;        /* iters mode window */
	uint32_t busy;
	int32_t last_slot;               /* WRITE: slot of the last chain posted */
	bool stopping;
	bool abort;
	bool co; /* driven by coroutines: no idle queue */
};

static void prepare(struct run *r)
{
	struct worker *w = r->w;
	struct client *cl = w->cl;
	const struct bf_hello *h = &cl->hello;
	const struct dxl_fabric_cfg *cfg = dxl_fabric_cfg(cl->f);
	bool inl = cl->o->inline_small && r->S <= cfg->max_inline &&
		   (r->op == BF_WRITE || r->op == BF_SEND);
	for (uint32_t s = 0; s < r->O; s++) {
		struct slot *sl = &w->slots[s];
		memset(sl, 0, offsetof(struct slot, wr));
		for (uint32_t i = 0; i < r->B; i++) {
			struct dxl_wr *wr = &sl->wr[i];
			memset(wr, 0, sizeof(*wr));
			wr->wr_id = s | ((uint64_t)i << 16) |
				    (r->op == BF_SEND ? WR_SEND_BIT : 0);
			wr->local = wr_buf(w, s, i);
			wr->lkey = dxl_mr_lkey(w->mr);
			wr->len = r->S;
			wr->next = i + 1 < r->B ? &sl->wr[i + 1] : NULL;
			wr->flags = i + 1 == r->B ? DXL_WR_SIGNALED : 0;
			if (inl)
				wr->flags |= DXL_WR_INLINE;
			switch (r->op) {
			case BF_READ:
				wr->op = DXL_WR_READ;
				wr->rkey = h->read.rkey;
				break;
			case BF_WRITE:
				wr->op = DXL_WR_WRITE;
				wr->rkey = h->write.rkey;
				bf_pattern_fill(cl->o->seed ^ (0x5752ull << 32) ^ w->idx,
						((uint64_t)s * r->B + i) * r->S,
						wr->local, r->S);
				break;
			case BF_CAS:
			case BF_FAA:
				wr->op = r->op == BF_CAS ? DXL_WR_CAS : DXL_WR_FAA;
				wr->len = 8;
				wr->rkey = h->atomic.rkey;
				wr->remote_addr = r->abase + ((uint64_t)s * r->B + i) * 8;
				break;
			case BF_SEND:
				wr->op = DXL_WR_SEND;
				bf_pattern_fill(cl->o->seed ^ (0x5345ull << 32) ^ w->idx,
						((uint64_t)s * r->B + i) * r->S,
						wr->local, r->S);
				break;
			default:
				break;
			}
		}
	}
	w->idle_head = 0;
	w->idle_n = r->O;
	for (uint32_t s = 0; s < r->O; s++)
		w->idle_q[s] = s;
}

/* post slot s; DXL_E_AGAIN: send queue full, try again after polling */
static int post_slot(struct run *r, uint32_t s)
{
	struct worker *w = r->w;
	struct client *cl = w->cl;
	struct slot *sl = &w->slots[s];
	uint32_t B = r->B, S = r->S;
	bool verify = cl->o->verify_every &&
		      (r->chains_posted % cl->o->verify_every) == 0;
	sl->seq++;
	for (uint32_t i = 0; i < B; i++) {
		struct dxl_wr *wr = &sl->wr[i];
		uint64_t k = (uint64_t)s * B + i;
		switch (r->op) {
		case BF_READ: {
			uint64_t span = (cl->hello.read.len - S) / 8 + 1;
			uint64_t off = (bf_rand(&w->rng) % span) * 8;
			sl->off[i] = off;
			wr->remote_addr = cl->hello.read.addr + off;
			if (verify)
				memset(wr->local, 0, S);
			break;
		}
		case BF_WRITE: {
			uint64_t ctr = w->wctr++;
			wr->remote_addr = r->wbase + (ctr % r->wslots) * r->wstride;
			if (S >= 8) {
				uint64_t stamp = ((uint64_t)w->idx << 56) | ctr;
				memcpy(wr->local, &stamp, 8);
			}
			break;
		}
		case BF_CAS:
			wr->compare_add = w->mirror[k];
			wr->swap = w->mirror[k] + 1;
			memset(wr->local, 0xa5, 8);
			break;
		case BF_FAA:
			wr->compare_add = 1;
			memset(wr->local, 0xa5, 8);
			break;
		case BF_SEND: {
			uint64_t hdr = HDR(s, i, w->gen, sl->seq);
			memcpy(wr->local, &hdr, 8);
			break;
		}
		default:
			break;
		}
	}
	sl->verify = verify;
	sl->send_done = false;
	sl->replies = r->op == BF_SEND ? B : 0;
	sl->t_post = dxl_now_ns();
	int rc = dxl_qp_post(w->qp, &sl->wr[0], NULL);
	if (rc == DXL_E_AGAIN) {
		sl->seq--;
		if (r->op == BF_WRITE)
			w->wctr -= B; /* the same counters go out on the retry */
		return rc;
	}
	if (rc) {
		note(w, "post %s chain of %u: %s: %s", bf_op_name(r->op), B,
		     dxl_errname(rc), dxl_errmsg());
		return rc;
	}
	sl->state = SLOT_BUSY;
	r->busy++;
	r->chains_posted++;
	r->last_slot = (int32_t)s;
	return 0;
}

static void verify_chain(struct run *r, uint32_t s)
{
	struct worker *w = r->w;
	struct slot *sl = &w->slots[s];
	uint32_t S = r->S;
	for (uint32_t i = 0; i < r->B; i++) {
		const uint8_t *buf = sl->wr[i].local;
		uint64_t k = (uint64_t)s * r->B + i;
		uint64_t got;
		switch (r->op) {
		case BF_READ:
			if (!sl->verify)
				return;
			w->vchecked++;
			if (memcmp(buf, w->cl->expect + sl->off[i], S) != 0) {
				if (!w->verrs)
					note(w, "READ of %u B at offset %" PRIu64
					     " returned wrong data", S, sl->off[i]);
				w->verrs++;
			}
			break;
		case BF_CAS:
		case BF_FAA:
			/* every atomic is checked: the word is ours alone, so its
			 * old value is exactly what we expect */
			memcpy(&got, buf, 8);
			w->vchecked++;
			if (got != w->mirror[k]) {
				if (!w->verrs)
					note(w, "%s on word %" PRIu64 ": old value %" PRIu64
					     ", expected %" PRIu64, bf_op_name(r->op), k,
					     got, w->mirror[k]);
				w->verrs++;
				/* resynchronise: a failed CAS left `got` there */
				w->mirror[k] = r->op == BF_CAS ? got : got + 1;
			} else {
				w->mirror[k]++;
			}
			break;
		default:
			return;
		}
	}
}

static void chain_done(struct run *r, uint32_t s, uint64_t now)
{
	struct worker *w = r->w;
	struct slot *sl = &w->slots[s];
	const struct bf_opts *o = w->cl->o;
	verify_chain(r, s);
	sl->state = SLOT_IDLE;
	r->busy--;
	r->chains_done++;
	bool record;
	if (o->iters) {
		record = r->chains_done > o->warmup_iters;
		if (r->chains_done == o->warmup_iters)
			r->t_iter0 = now;
		if (record)
			r->t_last = now;
	} else {
		record = now >= r->t_measure && now <= r->t_end;
	}
	if (record) {
		dxl_hist_record(&w->hist, now - sl->t_post);
		w->ops += r->B;
		w->samples++;
	}
	if (r->co)
		return;
	w->idle_q[(w->idle_head + w->idle_n) % BF_MAX_OUTSTANDING] = s;
	w->idle_n++;
}

static void on_recv(struct run *r, const struct dxl_wc *wc, uint64_t now)
{
	struct worker *w = r->w;
	struct client *cl = w->cl;
	uint32_t b = (uint32_t)wc->wr_id;
	uint8_t *buf = w->recvmem + (size_t)b * cl->max_size;
	if (wc->status != DXL_WC_SUCCESS) {
		note(w, "RECV completion: %s", dxl_wc_status_str(wc->status));
		r->abort = true;
	} else if (wc->byte_len >= 8) {
		uint64_t hdr;
		memcpy(&hdr, buf, 8);
		uint32_t s = (uint32_t)(hdr >> 48), i = (hdr >> 40) & 0xff;
		uint8_t gen = (hdr >> 32) & 0xff;
		uint32_t seq = (uint32_t)hdr;
		struct slot *sl = s < r->O ? &w->slots[s] : NULL;
		if (gen != w->gen) {
			/* an echo of an aborted earlier cell: ignore */
		} else if (!sl || sl->state != SLOT_BUSY || sl->seq != seq ||
			   i >= r->B || !sl->replies || wc->byte_len != r->S) {
			if (!w->verrs)
				note(w, "unexpected echo: slot %u index %u seq %u, "
				     "%u bytes", s, i, seq, wc->byte_len);
			w->verrs++;
		} else {
			if (sl->verify) {
				w->vchecked++;
				if (memcmp(buf, sl->wr[i].local, r->S) != 0) {
					if (!w->verrs)
						note(w, "echo of %u B differs from "
						     "what was sent", r->S);
					w->verrs++;
				}
			}
			if (--sl->replies == 0 && sl->send_done)
				chain_done(r, s, now);
		}
	} else {
		if (!w->verrs)
			note(w, "echo of %u bytes, expected %u", wc->byte_len, r->S);
		w->verrs++;
	}
	dxl_ctx_post_recv(w->ctx, buf, cl->max_size, dxl_mr_lkey(w->mr), b);
}

static void on_wc(struct run *r, const struct dxl_wc *wc, uint64_t now)
{
	struct worker *w = r->w;
	if (wc->opcode == DXL_WC_RECV) {
		on_recv(r, wc, now);
		return;
	}
	if (wc->status != DXL_WC_SUCCESS) {
		note(w, "%s completion (wr_id 0x%" PRIx64 "): %s",
		     wc_op_name(wc->opcode), wc->wr_id,
		     dxl_wc_status_str(wc->status));
		r->abort = true;
		return;
	}
	uint32_t s = (uint32_t)(wc->wr_id & WR_SLOT_MASK);
	if (wc->wr_id == WR_SYNC_ID || s >= r->O ||
	    w->slots[s].state != SLOT_BUSY) {
		note(w, "unexpected %s completion, wr_id 0x%" PRIx64,
		     wc_op_name(wc->opcode), wc->wr_id);
		r->abort = true;
		return;
	}
	if (r->op == BF_SEND) {
		w->slots[s].send_done = true;
		if (w->slots[s].replies == 0)
			chain_done(r, s, now);
		return;
	}
	chain_done(r, s, now);
}

/* after a WRITE cell: the last chain posted must be at the target */
static void verify_writes(struct run *r)
{
	struct worker *w = r->w;
	if (r->last_slot < 0 || r->S > w->scratch_len)
		return;
	struct slot *sl = &w->slots[r->last_slot];
	for (uint32_t i = 0; i < r->B; i++) {
		if (sync_read(w, sl->wr[i].remote_addr, sl->wr[i].rkey,
			      w->scratch, r->S))
			return;
		w->vchecked++;
		if (memcmp(w->scratch, sl->wr[i].local, r->S) != 0) {
			if (!w->verrs)
				note(w, "WRITE of %u B to 0x%" PRIx64
				     " not found at the target", r->S,
				     sl->wr[i].remote_addr);
			w->verrs++;
		}
	}
}

static void rpc_cell_run(struct worker *w, const struct bf_cell *c)
{
	const struct bf_opts *o = w->cl->o;
	struct bf_rpc_cell rc = {
		.size = c->size,
		.batch = c->batch,
		.outstanding = c->outstanding,
		.iters = o->iters,
		.warmup_iters = o->warmup_iters,
		.verify_every = o->verify_every,
	};
	rc.t_measure = w->cl->t_start + (uint64_t)o->warmup_ms * 1000000ull;
	rc.t_end = rc.t_measure + (uint64_t)o->duration_ms * 1000000ull;
	struct bf_rpc_result rr = {.hist = &w->hist, .t_first = w->cl->t_start};
	bf_rpc_cli_run(w->rpc, &rc, &rr);
	w->ops = rr.ops;
	w->samples = rr.samples;
	w->vchecked = rr.vchecked;
	w->verrs = rr.verrs;
	w->errors = rr.errors;
	snprintf(w->note, sizeof(w->note), "%s", rr.note);
	if (o->iters)
		w->secs = (double)(rr.t_last - rr.t_first) / 1e9;
	else
		w->secs = (double)o->duration_ms / 1e3;
}

/*
 * --driver co: slot s is a coroutine of the worker's scheduler (the way the
 * transaction layer will drive the fabric). It posts its chain with its
 * coroutine's wr_ids and sleeps in dxl_co_wait_completions until the
 * scheduler's poller routes the chain's completion to it.
 */
struct co_arg {
	struct run *r;
	uint32_t s;
};

static void slot_co(void *arg)
{
	struct co_arg *a = arg;
	struct run *r = a->r;
	struct worker *w = r->w;
	const struct bf_opts *o = w->cl->o;
	struct slot *sl = &w->slots[a->s];
	for (uint32_t i = 0; i < r->B; i++)
		sl->wr[i].wr_id = dxl_co_wrid(((uint64_t)a->s << 8) | i);
	while (!r->abort) {
		if (r->limit ? r->chains_posted >= r->limit
			     : dxl_now_ns() >= r->t_end)
			break;
		int rc = post_slot(r, a->s);
		if (rc == DXL_E_AGAIN) {
			dxl_co_yield();
			continue;
		}
		if (rc) {
			r->abort = true;
			break;
		}
		struct dxl_wc wc;
		int bad = dxl_co_wait_completions(1, &wc, (int)o->cell_timeout_ms);
		uint64_t now = dxl_now_ns();
		if (bad < 0) {
			note(w, "thread %u: no completion for %u ms", w->idx,
			     o->cell_timeout_ms);
			r->abort = true;
			break;
		}
		if (bad > 0) {
			note(w, "%s completion (wr_id 0x%" PRIx64 "): %s",
			     wc_op_name(wc.opcode), wc.wr_id,
			     dxl_wc_status_str(wc.status));
			r->abort = true;
			break;
		}
		chain_done(r, a->s, now);
	}
}

static int run_coroutines(struct run *r)
{
	struct worker *w = r->w;
	struct co_arg args[BF_MAX_OUTSTANDING];
	r->co = true;
	for (uint32_t s = 0; s < r->O; s++) {
		args[s] = (struct co_arg){r, s};
		int rc = dxl_sched_spawn(w->sched, slot_co, &args[s], NULL);
		if (rc) {
			note(w, "dxl_sched_spawn: %s", dxl_errmsg());
			r->abort = true;
			break;
		}
	}
	/* returns when every coroutine has finished (the spawned ones run
	 * even after an abort, and stop at once) */
	int rc = dxl_sched_run(w->sched);
	if (rc) {
		note(w, "dxl_sched_run: %s", dxl_errmsg());
		r->abort = true;
	}
	return r->abort ? -1 : 0;
}

static void cell_run(struct worker *w, const struct bf_cell *c)
{
	struct client *cl = w->cl;
	const struct bf_opts *o = cl->o;
	struct run r = {
		.w = w,
		.c = c,
		.op = c->op,
		.B = c->batch,
		.O = c->outstanding,
		.S = c->op == BF_CAS || c->op == BF_FAA ? 8 : c->size,
		.last_slot = -1,
	};
	dxl_hist_reset(&w->hist);
	w->ops = w->samples = w->vchecked = w->verrs = 0;
	w->errors = 0;
	w->note[0] = '\0';
	w->secs = 0;
	w->gen++;
	if (c->op == BF_RPC) {
		rpc_cell_run(w, c);
		return;
	}
	if ((!w->qp || dxl_qp_state(w->qp) != DXL_QP_RTS) && connect_qp(w))
		return;
	r.wstride = DXL_ALIGN_UP((uint64_t)r.S, 8);
	r.wslots = BF_WRITE_PER_THREAD / r.wstride;
	r.wbase = cl->hello.write.addr + (uint64_t)w->idx * BF_WRITE_PER_THREAD;
	r.abase = cl->hello.atomic.addr + (uint64_t)w->idx * BF_ATOMIC_PER_THREAD;
	prepare(&r);
	if (r.op == BF_CAS || r.op == BF_FAA) {
		/* learn the current values of our words (earlier cells and
		 * earlier clients of a --server have changed them) */
		uint32_t len = r.O * r.B * 8;
		if (sync_read(w, r.abase, cl->hello.atomic.rkey, w->scratch, len))
			goto fail;
		memcpy(w->mirror, w->scratch, len);
	}
	if (o->iters)
		r.limit = o->iters + o->warmup_iters;
	r.t_measure = cl->t_start + (uint64_t)o->warmup_ms * 1000000ull;
	r.t_end = r.t_measure + (uint64_t)o->duration_ms * 1000000ull;
	r.t_iter0 = cl->t_start;

	if (w->sched && r.op != BF_SEND) {
		if (run_coroutines(&r))
			goto fail;
		goto done;
	}
	struct dxl_wc wc[64];
	uint64_t last_progress = dxl_now_ns();
	uint64_t timeout_ns = (uint64_t)o->cell_timeout_ms * 1000000ull;
	for (;;) {
		while (w->idle_n && !r.stopping && !r.abort) {
			if (r.limit && r.chains_posted >= r.limit) {
				r.stopping = true;
				break;
			}
			int rc = post_slot(&r, w->idle_q[w->idle_head]);
			if (rc == DXL_E_AGAIN)
				break;
			if (rc) {
				r.abort = true;
				break;
			}
			w->idle_head = (w->idle_head + 1) % BF_MAX_OUTSTANDING;
			w->idle_n--;
		}
		if (r.abort || (r.stopping && r.busy == 0))
			break;
		int n = dxl_ctx_poll(w->ctx, wc, (int)DXL_ARRAY_SIZE(wc));
		uint64_t now = dxl_now_ns();
		if (n < 0) {
			note(w, "poll: %s", dxl_errmsg());
			r.abort = true;
			break;
		}
		for (int i = 0; i < n && !r.abort; i++)
			on_wc(&r, &wc[i], now);
		if (!o->iters && now >= r.t_end)
			r.stopping = true;
		if (n > 0) {
			last_progress = now;
			continue;
		}
		if (now - last_progress > timeout_ns) {
			note(w, "thread %u: no completion for %u ms (%u chains in "
			     "flight)", w->idx, o->cell_timeout_ms, r.busy);
			r.abort = true;
			break;
		}
		if (o->poll == BF_POLL_WAIT)
			dxl_ctx_wait(w->ctx, 1);
	}
	if (r.abort)
		goto fail;
done:
	if (r.op == BF_WRITE)
		verify_writes(&r);
	if (o->iters)
		w->secs = (double)(r.t_last - r.t_iter0) / 1e9;
	else
		w->secs = (double)o->duration_ms / 1e3;
	return;
fail:
	/* requests may still be in flight: a fresh QP for the next cell drops
	 * their completions */
	if (w->qp)
		dxl_qp_delete(&w->qp);
	if (!w->errors)
		w->errors = 1;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct client *cl = w->cl;
	int rc = dxl_ctx_new(cl->f, w->idx, &w->ctx);
	if (rc)
		snprintf(w->setup_err, sizeof(w->setup_err), "thread %u: ctx: %s",
			 w->idx, dxl_errmsg());
	else if (connect_qp(w))
		snprintf(w->setup_err, sizeof(w->setup_err), "%s", w->note);
	for (uint32_t b = 0; !w->setup_err[0] && b < w->nrecv; b++) {
		rc = dxl_ctx_post_recv(w->ctx, w->recvmem + (size_t)b * cl->max_size,
				       cl->max_size, dxl_mr_lkey(w->mr), b);
		if (rc)
			snprintf(w->setup_err, sizeof(w->setup_err),
				 "thread %u: post_recv: %s", w->idx, dxl_errmsg());
	}
	if (!w->setup_err[0] && cl->o->driver_co) {
		struct dxl_sched_cfg scfg;
		dxl_sched_cfg_init(&scfg);
		scfg.n_coroutines = cl->max_o;
		rc = dxl_sched_new(&scfg, w->ctx, &w->sched);
		if (rc)
			snprintf(w->setup_err, sizeof(w->setup_err),
				 "thread %u: dxl_sched_new: %.150s", w->idx,
				 dxl_errmsg());
	}
	w->setup_ok = !w->setup_err[0];
	if (w->setup_ok && cl->o->ops[BF_RPC] && cl->hello.rpc)
		bf_rpc_cli_new(cl->f, w->idx, cl->srv_fabric,
			       BF_RPC_CTX_BASE + w->idx % cl->hello.nctx,
			       cl->hello.rpc_msg, cl->max_o, cl->max_b,
			       cl->max_size, &w->rpc, w->rpc_err,
			       sizeof(w->rpc_err));
	else if (!cl->hello.rpc)
		snprintf(w->rpc_err, sizeof(w->rpc_err),
			 "the server has no RPC service");
	pthread_barrier_wait(&cl->end);
	for (;;) {
		pthread_barrier_wait(&cl->start);
		if (atomic_load(&cl->quit))
			break;
		if (w->idx < cl->cell.threads && w->setup_ok)
			cell_run(w, &cl->cell);
		pthread_barrier_wait(&cl->end);
	}
	bf_rpc_cli_delete(&w->rpc);
	if (w->qp)
		dxl_qp_delete(&w->qp);
	if (w->ctx)
		dxl_ctx_delete(&w->ctx);
	dxl_sched_delete(&w->sched);
	return NULL;
}

/* ---- processes ------------------------------------------------------------- */

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] =
		"dxl-bench-fabric: overall time limit reached, giving up\n";
	if (write(2, msg, sizeof(msg) - 1) < 0) {
		/* nothing more to do */
	}
	if (g_server_pid > 0)
		kill(g_server_pid, SIGKILL);
	_exit(3);
}

static void on_int(int sig)
{
	if (g_server_pid > 0)
		kill(g_server_pid, SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

/*
 * spawn_self -- exec this binary with args (NULL-terminated, without argv[0]
 * and --ready-fd) and read its first line ("READY ..." / "ERR ...") into
 * line. The child dies with us (PR_SET_PDEATHSIG).
 */
static pid_t spawn_self(const char *const *args, char *line, size_t cap)
{
	int p[2];
	if (pipe(p))
		return -1;
	char fdbuf[16];
	snprintf(fdbuf, sizeof(fdbuf), "%d", p[1]);
	const char *argv[40];
	int n = 0;
	argv[n++] = "dxl-bench-fabric";
	for (int i = 0; args[i] && n < 36; i++)
		argv[n++] = args[i];
	argv[n++] = "--ready-fd";
	argv[n++] = fdbuf;
	argv[n] = NULL;
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		close(p[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		execv("/proc/self/exe", (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	line[0] = '\0';
	struct pollfd pfd = {.fd = p[0], .events = POLLIN};
	size_t len = 0;
	uint64_t deadline = dxl_now_ms() + 20000;
	while (len + 1 < cap) {
		int left = (int)(deadline - dxl_now_ms());
		if (left <= 0 || poll(&pfd, 1, left) <= 0)
			break;
		char ch;
		if (read(p[0], &ch, 1) != 1 || ch == '\n')
			break;
		line[len++] = ch;
	}
	line[len] = '\0';
	close(p[0]);
	return pid;
}

static void reap(pid_t pid, int grace_ms)
{
	if (pid <= 0)
		return;
	for (int i = 0; i < grace_ms / 10; i++) {
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return;
		struct timespec ts = {0, 10 * 1000000};
		nanosleep(&ts, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* the idle-CPU probe (see --help, IDLE CPU) */
static void idle_probe(struct client *cl, struct bf_idle *out)
{
	const struct bf_opts *o = cl->o;
	char line[256];
	char spin[16];
	snprintf(spin, sizeof(spin), "%d", o->spin_us);
	const char *args[] = {"--idle-peer", "--provider",
			      dxl_fabric_provider_name(o->provider),
			      "--fabric-addr", "127.0.0.1:0",
			      o->spin_us >= 0 ? "--spin-us" : NULL, spin, NULL};
	memset(out, 0, sizeof(*out));
	pid_t pid = spawn_self(args, line, sizeof(line));
	if (pid < 0 || strncmp(line, "READY ", 6) != 0) {
		snprintf(out->note, sizeof(out->note), "idle peer failed: %.120s",
			 line[0] ? line : "no answer");
		reap(pid, 100);
		return;
	}
	struct dxl_ctx *c = NULL;
	struct dxl_qp *qp = NULL;
	int rc = dxl_ctx_new(cl->f, BF_IDLE_CTX, &c);
	if (!rc)
		rc = dxl_qp_connect(c, line + 6, 0, &qp);
	if (rc) {
		snprintf(out->note, sizeof(out->note), "idle probe: %s",
			 dxl_errmsg());
		goto done;
	}
	/* let connection set-up finish before sampling */
	struct dxl_wc wc[8];
	uint64_t settle = dxl_now_ns() + 200 * 1000000ull;
	while (dxl_now_ns() < settle) {
		dxl_ctx_wait(c, 50);
		dxl_ctx_poll(c, wc, 8);
	}
	uint64_t t0 = dxl_now_ns();
	uint64_t p0 = bf_proc_cpu_ns(pid), k0 = bf_proc_ticks_ns(pid);
	uint64_t s0 = cl->server_pid > 0 ? bf_proc_cpu_ns(cl->server_pid) : 0;
	uint64_t m0 = bf_proc_cpu_ns(0);
	uint64_t end = t0 + (uint64_t)o->idle_ms * 1000000ull;
	while (dxl_now_ns() < end) {
		dxl_ctx_wait(c, 100);
		dxl_ctx_poll(c, wc, 8);
	}
	uint64_t t1 = dxl_now_ns();
	uint64_t p1 = bf_proc_cpu_ns(pid), k1 = bf_proc_ticks_ns(pid);
	uint64_t s1 = cl->server_pid > 0 ? bf_proc_cpu_ns(cl->server_pid) : 0;
	uint64_t m1 = bf_proc_cpu_ns(0);
	double wall = (double)(t1 - t0);
	out->measured = true;
	out->window_s = wall / 1e9;
	out->peer_pct = 100.0 * (double)(p1 - p0) / wall;
	out->peer_pct_ticks = 100.0 * (double)(k1 - k0) / wall;
	out->server_pct = cl->server_pid > 0 ? 100.0 * (double)(s1 - s0) / wall : -1;
	out->client_pct = 100.0 * (double)(m1 - m0) / wall;
	out->peer_threads = bf_proc_threads(pid);
	if (!p0 && !p1)
		snprintf(out->note, sizeof(out->note),
			 "no schedstat: peer_pct from /proc/<pid>/stat ticks");
	if (!p0 && !p1)
		out->peer_pct = out->peer_pct_ticks;
done:
	if (qp)
		dxl_qp_delete(&qp);
	if (c)
		dxl_ctx_delete(&c);
	kill(pid, SIGTERM);
	reap(pid, 2000);
}

/* ---- the matrix ------------------------------------------------------------- */

static void run_cell(struct client *cl, struct bf_result *res);

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* the paired READ / ping-pong probe of the 64 B goal (see bench_fabric.h) */
static void paired_probe(struct client *cl, struct bf_paired *out)
{
	const struct bf_opts *o = cl->o;
	memset(out, 0, sizeof(*out));
	out->size = 64;
	for (int k = 0; k < (int)o->paired_rounds && k < BF_PAIRED_MAX; k++) {
		struct bf_pp pp;
		struct bf_result res;
		memset(&pp, 0, sizeof(pp));
		memset(&res, 0, sizeof(res));
		if (bf_pingpong(o, cl->ctl_addr, out->size, &pp, 0)) {
			snprintf(out->note, sizeof(out->note), "ping-pong: %.140s",
				 pp.note);
			break;
		}
		res.cell = (struct bf_cell){BF_READ, out->size, 1, 1, 1};
		run_cell(cl, &res);
		if (res.errors || res.verify_errors || !res.p50_ns) {
			snprintf(out->note, sizeof(out->note), "READ: %.140s", res.note);
			break;
		}
		out->pp_p50_ns[k] = pp.p50_ns[0];
		out->read_p50_ns[k] = res.p50_ns;
		out->ratio[k] = (double)res.p50_ns / (double)pp.p50_ns[0];
		out->rounds = k + 1;
	}
	if (out->rounds) {
		double v[BF_PAIRED_MAX];
		memcpy(v, out->ratio, sizeof(v));
		qsort(v, (size_t)out->rounds, sizeof(double), cmp_double);
		out->median = out->rounds % 2
				      ? v[out->rounds / 2]
				      : (v[out->rounds / 2 - 1] + v[out->rounds / 2]) / 2;
	}
}

static int cell_count(const struct bf_opts *o)
{
	int n = 0;
	for (int op = 0; op < BF_NOPS; op++) {
		if (!o->ops[op])
			continue;
		int ns = (op == BF_CAS || op == BF_FAA) ? 1 : o->sizes.n;
		n += ns * o->batch.n * o->outstanding.n * o->threads.n;
	}
	return n;
}

static void skip(struct bf_result *res, const char *why)
{
	res->skipped = true;
	snprintf(res->note, sizeof(res->note), "%s", why);
}

static void run_cell(struct client *cl, struct bf_result *res)
{
	const struct bf_cell *c = &res->cell;
	char why[160];
	if (c->op == BF_RPC) {
		for (uint32_t t = 0; t < c->threads; t++) {
			if (!cl->w[t].rpc) {
				snprintf(why, sizeof(why), "no RPC: %s",
					 cl->w[t].rpc_err[0] ? cl->w[t].rpc_err
							     : "set-up failed");
				skip(res, why);
				return;
			}
		}
		if (c->size + 64 > cl->hello.rpc_msg) {
			skip(res, "payload over the RPC message size");
			return;
		}
	}
	if (c->op == BF_SEND && c->size > cl->hello.max_size) {
		snprintf(why, sizeof(why), "server takes SENDs up to %u B",
			 cl->hello.max_size);
		skip(res, why);
		return;
	}
	if (c->op == BF_SEND && c->batch * c->outstanding > cl->hello.depth) {
		snprintf(why, sizeof(why),
			 "batch x outstanding %u over the server's %u receive buffers",
			 c->batch * c->outstanding, cl->hello.depth);
		skip(res, why);
		return;
	}
	if (c->op == BF_READ && c->size > cl->hello.read.len) {
		skip(res, "size over the READ region");
		return;
	}
	cl->cell = *c;
	uint64_t busy0 = bf_host_busy_ns();
	uint64_t own0 = bf_proc_cpu_ns(0) +
			(cl->server_pid > 0 ? bf_proc_cpu_ns(cl->server_pid) : 0);
	cl->t_start = dxl_now_ns();
	pthread_barrier_wait(&cl->start);
	pthread_barrier_wait(&cl->end);
	uint64_t t1 = dxl_now_ns();
	uint64_t busy1 = bf_host_busy_ns();
	uint64_t own1 = bf_proc_cpu_ns(0) +
			(cl->server_pid > 0 ? bf_proc_cpu_ns(cl->server_pid) : 0);
	res->other_cpus = -1;
	if (busy0 && busy1 && own0 && t1 > cl->t_start) {
		double other = (double)(busy1 - busy0) - (double)(own1 - own0);
		res->other_cpus = DXL_MAX(0.0, other / (double)(t1 - cl->t_start));
	}

	struct dxl_hist *h = malloc(sizeof(*h));
	if (!h) {
		skip(res, "out of memory");
		return;
	}
	dxl_hist_reset(h);
	double secs = 0;
	for (uint32_t t = 0; t < c->threads; t++) {
		struct worker *w = &cl->w[t];
		if (!w->setup_ok) {
			res->errors++;
			if (!res->note[0])
				snprintf(res->note, sizeof(res->note), "%s",
					 w->setup_err);
			continue;
		}
		dxl_hist_merge(h, &w->hist);
		res->ops += w->ops;
		res->samples += w->samples;
		res->verify_checked += w->vchecked;
		res->verify_errors += w->verrs;
		res->errors += w->errors;
		if (w->note[0] && !res->note[0])
			snprintf(res->note, sizeof(res->note), "%s", w->note);
		if (w->secs > secs)
			secs = w->secs;
	}
	res->secs = secs;
	res->ops_per_s = secs > 0 ? (double)res->ops / secs : 0;
	res->p50_ns = dxl_hist_pct(h, 50);
	res->p99_ns = dxl_hist_pct(h, 99);
	res->p999_ns = dxl_hist_pct(h, 99.9);
	res->min_ns = h->count ? h->min : 0;
	res->max_ns = h->max;
	res->mean_ns = dxl_hist_mean(h);
	free(h);
}

static void matrix_max(struct client *cl)
{
	const struct bf_opts *o = cl->o;
	cl->max_b = cl->max_o = cl->max_t = 1;
	cl->max_size = 64;
	for (int i = 0; i < o->batch.n; i++)
		cl->max_b = DXL_MAX(cl->max_b, o->batch.v[i]);
	for (int i = 0; i < o->outstanding.n; i++)
		cl->max_o = DXL_MAX(cl->max_o, o->outstanding.v[i]);
	for (int i = 0; i < o->threads.n; i++)
		cl->max_t = DXL_MAX(cl->max_t, o->threads.v[i]);
	for (int i = 0; i < o->sizes.n; i++)
		cl->max_size = DXL_MAX(cl->max_size, o->sizes.v[i]);
}

static int setup_workers(struct client *cl, char *err, size_t cap)
{
	for (uint32_t t = 0; t < cl->max_t; t++) {
		struct worker *w = &cl->w[t];
		w->cl = cl;
		w->idx = t;
		w->rng = cl->o->seed * 0x100000001b3ull + t + 1;
		w->stride = DXL_ALIGN_UP((size_t)cl->max_size, 64);
		w->nrecv = DXL_MAX(64u, bf_next_pow2(cl->max_b * cl->max_o));
		w->scratch_len = DXL_MAX((size_t)cl->max_size,
					 (size_t)BF_ATOMIC_PER_THREAD);
		size_t slots_len = (size_t)cl->max_o * cl->max_b * w->stride;
		size_t recv_len = (size_t)w->nrecv * cl->max_size;
		w->mem_len = slots_len + recv_len + w->scratch_len;
		w->mem = xalloc(w->mem_len);
		w->slots = calloc(BF_MAX_OUTSTANDING, sizeof(*w->slots));
		w->mirror = calloc(BF_ATOMIC_PER_THREAD / 8, sizeof(uint64_t));
		if (!w->mem || !w->slots || !w->mirror) {
			snprintf(err, cap, "out of memory for thread buffers");
			return -1;
		}
		w->slotmem = w->mem;
		w->recvmem = w->mem + slots_len;
		w->scratch = w->recvmem + recv_len;
		int rc = dxl_mr_reg(cl->f, w->mem, w->mem_len, DXL_MR_LOCAL_WRITE,
				    &w->mr);
		if (rc) {
			snprintf(err, cap, "dxl_mr_reg: %s", dxl_errmsg());
			return -1;
		}
	}
	pthread_barrier_init(&cl->start, NULL, cl->max_t + 1);
	pthread_barrier_init(&cl->end, NULL, cl->max_t + 1);
	uint32_t t = 0;
	for (; t < cl->max_t; t++)
		if (pthread_create(&cl->w[t].th, NULL, worker_main, &cl->w[t]))
			break;
	if (t < cl->max_t) {
		/* cannot happen in practice; the barriers would hang */
		fprintf(stderr, "dxl-bench-fabric: pthread_create failed\n");
		_exit(1);
	}
	pthread_barrier_wait(&cl->end);
	cl->running = true;
	for (t = 0; t < cl->max_t; t++) {
		if (!cl->w[t].setup_ok) {
			snprintf(err, cap, "%s", cl->w[t].setup_err);
			return -1;
		}
	}
	return 0;
}

static void stop_workers(struct client *cl)
{
	atomic_store(&cl->quit, 1);
	pthread_barrier_wait(&cl->start);
	for (uint32_t t = 0; t < cl->max_t; t++)
		pthread_join(cl->w[t].th, NULL);
	pthread_barrier_destroy(&cl->start);
	pthread_barrier_destroy(&cl->end);
}

static void free_workers(struct client *cl)
{
	for (uint32_t t = 0; t < cl->max_t; t++) {
		struct worker *w = &cl->w[t];
		dxl_mr_dereg(&w->mr);
		free(w->mem);
		free(w->slots);
		free(w->mirror);
	}
}

/* the sizes the ping-pong baseline runs: every size of a measured op */
static int pp_sizes(const struct bf_opts *o, uint32_t *v)
{
	int n = 0;
	bool atom = o->ops[BF_CAS] || o->ops[BF_FAA];
	bool sized = o->ops[BF_READ] || o->ops[BF_WRITE] || o->ops[BF_SEND] ||
		     o->ops[BF_RPC];
	if (atom)
		v[n++] = 8;
	for (int i = 0; sized && i < o->sizes.n; i++) {
		bool dup = false;
		for (int j = 0; j < n; j++)
			dup |= v[j] == o->sizes.v[i];
		if (!dup)
			v[n++] = o->sizes.v[i];
	}
	return n;
}

static void fix_fabric_host(struct client *cl)
{
	/* a server listening on a wildcard address is reached at the host we
	 * used for the control connection */
	char host[DXL_FABRIC_ADDR_MAX], chost[DXL_FABRIC_ADDR_MAX];
	uint16_t port, cport;
	snprintf(cl->srv_fabric, sizeof(cl->srv_fabric), "%s",
		 cl->hello.fabric_addr);
	if (dxl_parse_hostport(cl->hello.fabric_addr, host, sizeof(host), &port) ||
	    dxl_parse_hostport(cl->ctl_addr, chost, sizeof(chost), &cport))
		return;
	if (!strcmp(host, "0.0.0.0") || !strcmp(host, "::") || !host[0])
		snprintf(cl->srv_fabric, sizeof(cl->srv_fabric),
			 strchr(chost, ':') ? "[%s]:%u" : "%s:%u", chost, port);
}

static void now_iso(char *buf, size_t cap)
{
	time_t t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void git_commit(char *buf, size_t cap)
{
	/* the commit of the tree the binary was built in, if it is a git tree */
	char exe[512], cmd[1200];
	buf[0] = '\0';
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return;
	exe[n] = '\0';
	char *slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	snprintf(cmd, sizeof(cmd),
		 "git -C '%s' rev-parse --short=12 HEAD 2>/dev/null && "
		 "git -C '%s' status --porcelain --untracked-files=no 2>/dev/null "
		 "| head -1",
		 exe, exe);
	FILE *p = popen(cmd, "r");
	if (!p)
		return;
	char line[128];
	if (fgets(line, sizeof(line), p)) {
		line[strcspn(line, "\n")] = '\0';
		snprintf(buf, cap, "%.40s", line);
		if (fgets(line, sizeof(line), p))
			snprintf(buf + strlen(buf), cap - strlen(buf), "-dirty");
	}
	pclose(p);
}

static void loadavg(double v[3])
{
	v[0] = v[1] = v[2] = -1;
	if (getloadavg(v, 3) != 3)
		v[0] = v[1] = v[2] = -1;
}

int bf_client_main(struct bf_opts *o)
{
	struct client *cl = calloc(1, sizeof(*cl));
	struct bf_report rep = {.o = o};
	struct bf_pp pp[BF_MAX_LIST + 1];
	uint32_t ppsz[BF_MAX_LIST + 1];
	char err[512] = "", line[600];
	int status = 1;
	bool workers = false;
	if (!cl) {
		fprintf(stderr, "dxl-bench-fabric: out of memory\n");
		return 1;
	}
	cl->o = o;
	cl->ctl_fd = -1;
	memset(pp, 0, sizeof(pp));
	matrix_max(cl);
	now_iso(rep.started, sizeof(rep.started));
	git_commit(rep.git, sizeof(rep.git));
	loadavg(rep.loadavg_start);
	uint64_t t_begin = dxl_now_ns();

	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	signal(SIGINT, on_int);
	signal(SIGTERM, on_int);
	int ncells = cell_count(o);
	double est = ncells * (o->warmup_ms + o->duration_ms + 5) / 1e3 +
		     2.0 * 8 * (o->warmup_ms + o->pp_ms) / 1e3 + o->idle_ms / 1e3;
	unsigned budget = o->iters ? 600u + 30u * (unsigned)ncells
				   : 60u + (unsigned)(3 * est);
	alarm(budget);

	if (o->mode == BF_MODE_FORK) {
		/* the server listens (control, echo and fabric) on the host of
		 * our --fabric-addr: 127.0.0.1 by default; an interface's
		 * address for verbs over Soft-RoCE in a guest */
		char host[DXL_FABRIC_ADDR_MAX], any[DXL_FABRIC_ADDR_MAX + 8];
		uint16_t hport;
		if (dxl_parse_hostport(o->fabric_addr, host, sizeof(host), &hport))
			snprintf(host, sizeof(host), "127.0.0.1");
		snprintf(any, sizeof(any), strchr(host, ':') ? "[%s]:0" : "%s:0",
			 host);
		char ctx[16], depth[16], msz[16], seed[32], spin[16];
		snprintf(spin, sizeof(spin), "%d", o->spin_us);
		snprintf(ctx, sizeof(ctx), "%u", cl->max_t);
		snprintf(depth, sizeof(depth), "%u",
			 DXL_MAX(64u, bf_next_pow2(cl->max_b * cl->max_o)));
		snprintf(msz, sizeof(msz), "%u", cl->max_size);
		snprintf(seed, sizeof(seed), "%" PRIu64, o->seed);
		const char *args[] = {"--server", "--once", "--quiet",
				      "--provider",
				      dxl_fabric_provider_name(o->provider),
				      "--addr", any, "--fabric-addr", any,
				      "--server-ctx", ctx,
				      "--server-depth", depth, "--max-size", msz,
				      "--seed", seed,
				      o->spin_us >= 0 ? "--spin-us" : NULL, spin,
				      NULL};
		cl->server_pid = spawn_self(args, line, sizeof(line));
		g_server_pid = cl->server_pid;
		unsigned port;
		if (cl->server_pid < 0 || sscanf(line, "READY %u", &port) != 1) {
			snprintf(err, sizeof(err), "server process: %.400s",
				 line[0] ? line : "no answer");
			goto out;
		}
		snprintf(cl->ctl_addr, sizeof(cl->ctl_addr),
			 strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
		rep.mode = "fork";
	} else {
		snprintf(cl->ctl_addr, sizeof(cl->ctl_addr), "%s", o->addr);
		rep.mode = "client";
	}
	cl->ctl_fd = bf_tcp_connect(cl->ctl_addr, 10000, err, sizeof(err));
	if (cl->ctl_fd < 0)
		goto out;
	if (bf_write_full(cl->ctl_fd, "HELLO dxlb 1\n", 13) ||
	    bf_read_line(cl->ctl_fd, line, sizeof(line))) {
		snprintf(err, sizeof(err), "control connection to %s: %s",
			 cl->ctl_addr, strerror(errno));
		goto out;
	}
	if (bf_hello_parse(line, &cl->hello)) {
		snprintf(err, sizeof(err), "bad HELLO reply from %s: '%.300s'",
			 cl->ctl_addr, line);
		goto out;
	}
	if (strcmp(cl->hello.provider, dxl_fabric_provider_name(o->provider))) {
		snprintf(err, sizeof(err),
			 "the server runs provider %s, this client --provider %s",
			 cl->hello.provider, dxl_fabric_provider_name(o->provider));
		goto out;
	}
	if (cl->max_t > cl->hello.nctx)
		fprintf(stderr,
			"dxl-bench-fabric: note: server has %u ctx, %u threads share "
			"them for SEND/RPC\n",
			cl->hello.nctx, cl->max_t);
	fix_fabric_host(cl);
	rep.hello = &cl->hello;
	snprintf(rep.server_addr, sizeof(rep.server_addr), "%s", cl->ctl_addr);

	struct dxl_fabric_cfg cfg;
	dxl_fabric_cfg_init(&cfg);
	cfg.provider = o->provider;
	cfg.node_id = 2;
	snprintf(cfg.listen_addr, sizeof(cfg.listen_addr), "%s", o->fabric_addr);
	uint32_t inflight = bf_next_pow2(cl->max_b * cl->max_o);
	cfg.sq_depth = DXL_MAX(256u, 2 * inflight);
	cfg.srq_depth = DXL_MAX(64u, inflight);
	cfg.cq_depth = DXL_MAX(4096u, 2 * cfg.sq_depth + 2 * cfg.srq_depth);
	cfg.max_msg = DXL_MAX(DXL_MAX(64u, cl->max_size), cl->hello.rpc_msg);
	if (o->spin_us >= 0)
		cfg.idle_spin_us = (uint32_t)o->spin_us;
	int rc = dxl_fabric_new(&cfg, &cl->f);
	if (rc) {
		snprintf(err, sizeof(err), "dxl_fabric_new(%s): %s: %s",
			 dxl_fabric_provider_name(o->provider), dxl_errname(rc),
			 dxl_errmsg());
		goto out;
	}
	cl->expect = xalloc(cl->hello.read.len);
	if (!cl->expect) {
		snprintf(err, sizeof(err), "out of memory");
		goto out;
	}
	bf_pattern_fill(cl->hello.seed, 0, cl->expect, cl->hello.read.len);
	workers = true;
	if (setup_workers(cl, err, sizeof(err)))
		goto out;

	if (!o->quiet)
		printf("dxl-bench-fabric: provider %s, server %s (fabric %s), "
		       "%d cells\n",
		       cl->hello.provider, cl->ctl_addr, cl->srv_fabric, ncells);
	/* 1. the floor: TCP ping-pong of each size */
	int npp = pp_sizes(o, ppsz);
	for (int i = 0; i < npp; i++)
		if (bf_pingpong(o, cl->ctl_addr, ppsz[i], &pp[i], 0) && !o->quiet)
			printf("ping-pong %u B: %s\n", ppsz[i], pp[i].note);
	/* 2. idle CPU, while nothing else of ours runs */
	if (o->idle_ms)
		idle_probe(cl, &rep.idle);
	/* 3. the 64 B READ goal, paired against the ping-pong round by round */
	if (o->ops[BF_READ] && o->paired_rounds)
		paired_probe(cl, &rep.paired);
	/* 4. the matrix */
	rep.res = calloc((size_t)ncells, sizeof(*rep.res));
	if (!rep.res) {
		snprintf(err, sizeof(err), "out of memory");
		goto out;
	}
	if (!o->quiet)
		bf_table_header();
	for (int op = 0; op < BF_NOPS; op++) {
		if (!o->ops[op])
			continue;
		bool atom = op == BF_CAS || op == BF_FAA;
		for (int si = 0; si < (atom ? 1 : o->sizes.n); si++)
			for (int ti = 0; ti < o->threads.n; ti++)
				for (int bi = 0; bi < o->batch.n; bi++)
					for (int oi = 0; oi < o->outstanding.n; oi++) {
						struct bf_result *res = &rep.res[rep.nres++];
						if (rep.nres == ncells / 2 + 1)
							/* the floor in the middle */
							for (int k = 0; k < npp; k++)
								bf_pingpong(o, cl->ctl_addr,
									    ppsz[k], &pp[k], 1);
						res->cell = (struct bf_cell){
							.op = (enum bf_op)op,
							.size = atom ? 8 : o->sizes.v[si],
							.batch = o->batch.v[bi],
							.outstanding = o->outstanding.v[oi],
							.threads = o->threads.v[ti],
						};
						run_cell(cl, res);
						/* provisional: the final ratio uses the
						 * lower of both ping-pong runs */
						for (int k = 0; k < npp; k++)
							if (pp[k].size == res->cell.size &&
							    pp[k].floor_p50_ns && res->p50_ns)
								res->pp_ratio_p50 =
									(double)res->p50_ns /
									(double)pp[k].floor_p50_ns;
						if (!o->quiet) {
							bf_table_row(res);
							fflush(stdout);
						}
					}
	}
	/* 5. the floor again: the machine may have been busier before */
	for (int i = 0; i < npp; i++)
		bf_pingpong(o, cl->ctl_addr, ppsz[i], &pp[i], 2);
	rep.pp = pp;
	rep.npp = npp;
	status = 0;
out:
	alarm(0);
	if (cl->running)
		stop_workers(cl);
	if (workers)
		free_workers(cl);
	dxl_fabric_delete(&cl->f);
	if (cl->ctl_fd >= 0)
		close(cl->ctl_fd); /* a --once server exits now */
	if (cl->server_pid > 0) {
		reap(cl->server_pid, 3000);
		g_server_pid = 0;
	}
	if (err[0]) {
		fprintf(stderr, "dxl-bench-fabric: %s\n", err);
		status = 1;
	}
	if (status == 0) {
		loadavg(rep.loadavg_end);
		rep.wall_s = (double)(dxl_now_ns() - t_begin) / 1e9;
		status = bf_report_finish(&rep);
	}
	free(rep.res);
	free(cl->expect);
	free(cl);
	return status;
}
