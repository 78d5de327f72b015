/* rpcbench.c -- dxl-bench-fabric's RPC cells: echo handlers and calling coroutines */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/fabric/bench_fabric.h"
#include "common/common.h"
#include "dxl/co.h"
#include "dxl/rpc.h"

/*
 * RPC runs on ctxs of its own (index BF_RPC_CTX_BASE + i on both sides),
 * because the RPC layer owns its ctx's shared receive queue while the SEND
 * cells post raw receive buffers.
 *
 * Server: one thread per RPC ctx with a scheduler and an rpc whose handler
 * BF_RPC_ECHO copies the request into the reply (dxl_sched_serve).
 *
 * Client: per worker thread a scheduler with O coroutines. Each coroutine
 * loops: issue B calls with dxl_rpc_call_async (the RPC layer puts calls to
 * one QP issued in one scheduling round into one SEND: its doorbell batch),
 * dxl_rpc_wait_all, check the replies. One latency sample = one coroutine's
 * B calls; ops counts calls.
 */

#define BF_RPC_ECHO 1

static int echo_handler(struct dxl_rpc *rpc, const void *req, size_t len,
			void *reply, size_t cap, size_t *reply_len, void *arg)
{
	(void)rpc;
	(void)arg;
	if (len > cap)
		return DXL_E_TOOBIG;
	memcpy(reply, req, len);
	*reply_len = len;
	return 0;
}

uint32_t bf_rpc_msg_size(uint32_t max_size)
{
	/* one call of max_size bytes must fit: 16 B header + 24 B entry */
	return DXL_MAX(16384u, bf_next_pow2(max_size + 64));
}

/* ---- server ---------------------------------------------------------------- */

struct rpc_srv_thread {
	struct bf_rpc_srv *srv;
	uint32_t idx;
	pthread_t th;
	struct dxl_ctx *ctx;
	struct dxl_sched *sched;
	struct dxl_rpc *rpc;
	char err[200];
};

struct bf_rpc_srv {
	struct dxl_fabric *f;
	uint32_t n, depth, msg;
	struct rpc_srv_thread *t;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint32_t ready;
	int failed;
	/* set by bf_rpc_server_stop; each thread checks it between rounds
	 * (a round blocks at most idle_wait_ms), so no other thread ever
	 * touches a scheduler that its owner may be deleting */
	atomic_int stop;
};

static void *srv_thread(void *arg)
{
	struct rpc_srv_thread *t = arg;
	struct bf_rpc_srv *s = t->srv;
	struct dxl_sched_cfg scfg;
	struct dxl_rpc_cfg rcfg;
	dxl_sched_cfg_init(&scfg);
	scfg.n_coroutines = 1; /* it only serves */
	scfg.idle_wait_ms = 50; /* how soon it notices s->stop */
	dxl_rpc_cfg_init(&rcfg);
	rcfg.max_msg = s->msg;
	rcfg.n_recv_bufs = s->depth;
	int rc = dxl_ctx_new(s->f, BF_RPC_CTX_BASE + t->idx, &t->ctx);
	if (!rc)
		rc = dxl_sched_new(&scfg, t->ctx, &t->sched);
	if (!rc)
		rc = dxl_rpc_new(t->sched, &rcfg, &t->rpc);
	if (!rc)
		rc = dxl_rpc_register(t->rpc, BF_RPC_ECHO, echo_handler, NULL);
	if (rc) {
		snprintf(t->err, sizeof(t->err), "rpc ctx %u: %s: %.120s",
			 BF_RPC_CTX_BASE + t->idx, dxl_errname(rc), dxl_errmsg());
		/* clean up before saying so: the main thread then never sees
		 * a scheduler that is going away */
		dxl_ctx_delete(&t->ctx);
		dxl_rpc_delete(&t->rpc);
		dxl_sched_delete(&t->sched);
	}
	pthread_mutex_lock(&s->lock);
	if (rc)
		s->failed = 1;
	s->ready++;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	if (rc)
		return NULL;
	while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		rc = dxl_sched_run_once(t->sched, -1);
		if (rc < 0) {
			DXL_WARN("bench rpc server ctx %u: %s", t->idx,
				 dxl_errmsg());
			break;
		}
	}
	/* the RPC layer's order: ctx, then rpc, then scheduler */
	dxl_ctx_delete(&t->ctx);
	dxl_rpc_delete(&t->rpc);
	dxl_sched_delete(&t->sched);
	return NULL;
}

int bf_rpc_server_start(struct dxl_fabric *f, uint32_t n, uint32_t depth,
			uint32_t msg, struct bf_rpc_srv **out, char *err,
			size_t cap)
{
	struct bf_rpc_srv *s = calloc(1, sizeof(*s));
	*out = NULL;
	if (!s || !(s->t = calloc(n, sizeof(*s->t)))) {
		free(s);
		snprintf(err, cap, "out of memory");
		return -1;
	}
	s->f = f;
	s->n = n;
	s->depth = depth;
	s->msg = msg;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	uint32_t started = 0;
	for (; started < n; started++) {
		s->t[started].srv = s;
		s->t[started].idx = started;
		if (pthread_create(&s->t[started].th, NULL, srv_thread,
				   &s->t[started]))
			break;
	}
	pthread_mutex_lock(&s->lock);
	while (s->ready < started)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
	s->n = started;
	*out = s;
	if (started < n || s->failed) {
		snprintf(err, cap, "cannot start the RPC threads");
		for (uint32_t i = 0; i < started; i++)
			if (s->t[i].err[0])
				snprintf(err, cap, "%s", s->t[i].err);
		return -1;
	}
	return 0;
}

void bf_rpc_server_stop(struct bf_rpc_srv **sp)
{
	struct bf_rpc_srv *s = *sp;
	if (!s)
		return;
	atomic_store_explicit(&s->stop, 1, memory_order_relaxed);
	for (uint32_t i = 0; i < s->n; i++)
		pthread_join(s->t[i].th, NULL);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s->t);
	free(s);
	*sp = NULL;
}

/* ---- client ---------------------------------------------------------------- */

struct rco;

struct bf_rpc_cli {
	uint32_t idx; /* worker thread index */
	struct dxl_ctx *ctx;
	struct dxl_qp *qp;
	struct dxl_sched *sched;
	struct dxl_rpc *rpc;
	uint32_t max_o, max_b, max_size;
	uint8_t *req, *rep; /* max_o x max_b x max_size each */
	struct rco *cos;
	uint8_t gen;
	/* the running cell */
	const struct bf_rpc_cell *cell;
	struct bf_rpc_result *res;
	uint64_t started, done;
	bool abort;
};

struct rco {
	struct bf_rpc_cli *cli;
	uint32_t idx;
	uint32_t seq;
	struct dxl_rpc_call calls[BF_MAX_BATCH];
};

static void cli_note(struct bf_rpc_cli *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void cli_note(struct bf_rpc_cli *c, const char *fmt, ...)
{
	c->res->errors++;
	if (c->res->note[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->res->note, sizeof(c->res->note), fmt, ap);
	va_end(ap);
}

static void cli_verr(struct bf_rpc_cli *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void cli_verr(struct bf_rpc_cli *c, const char *fmt, ...)
{
	if (!c->res->verrs && !c->res->note[0]) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(c->res->note, sizeof(c->res->note), fmt, ap);
		va_end(ap);
	}
	c->res->verrs++;
}

int bf_rpc_cli_new(struct dxl_fabric *f, uint32_t idx, const char *srv_addr,
		   uint32_t srv_ctx, uint32_t msg, uint32_t max_o, uint32_t max_b,
		   uint32_t max_size, struct bf_rpc_cli **out, char *err,
		   size_t cap)
{
	struct bf_rpc_cli *c = calloc(1, sizeof(*c));
	*out = NULL;
	if (!c) {
		snprintf(err, cap, "out of memory");
		return -1;
	}
	c->idx = idx;
	c->max_o = max_o;
	c->max_b = max_b;
	c->max_size = max_size;
	size_t area = (size_t)max_o * max_b * max_size;
	c->req = malloc(area);
	c->rep = malloc(area);
	c->cos = calloc(max_o, sizeof(*c->cos));
	if (!c->req || !c->rep || !c->cos) {
		snprintf(err, cap, "out of memory");
		goto fail;
	}
	struct dxl_sched_cfg scfg;
	struct dxl_rpc_cfg rcfg;
	dxl_sched_cfg_init(&scfg);
	scfg.n_coroutines = max_o;
	dxl_rpc_cfg_init(&rcfg);
	rcfg.max_msg = msg;
	rcfg.n_recv_bufs = dxl_fabric_cfg(f)->srq_depth;
	rcfg.timeout_ms = DXL_MAX(5000u, 2 * dxl_fabric_cfg(f)->timeout_ms);
	int rc = dxl_ctx_new(f, BF_RPC_CTX_BASE + idx, &c->ctx);
	if (!rc)
		rc = dxl_sched_new(&scfg, c->ctx, &c->sched);
	if (!rc)
		rc = dxl_rpc_new(c->sched, &rcfg, &c->rpc);
	if (!rc)
		rc = dxl_qp_connect(c->ctx, srv_addr, srv_ctx, &c->qp);
	if (rc) {
		snprintf(err, cap, "thread %u: RPC set-up: %s: %.150s", idx,
			 dxl_errname(rc), dxl_errmsg());
		goto fail;
	}
	*out = c;
	return 0;
fail:
	bf_rpc_cli_delete(&c);
	return -1;
}

void bf_rpc_cli_delete(struct bf_rpc_cli **cp)
{
	struct bf_rpc_cli *c = *cp;
	if (!c)
		return;
	if (c->qp && c->rpc)
		dxl_rpc_forget_qp(c->rpc, c->qp);
	if (c->qp)
		dxl_qp_delete(&c->qp);
	dxl_ctx_delete(&c->ctx);
	dxl_rpc_delete(&c->rpc);
	dxl_sched_delete(&c->sched);
	free(c->req);
	free(c->rep);
	free(c->cos);
	free(c);
	*cp = NULL;
}

static inline uint8_t *area(struct bf_rpc_cli *c, uint8_t *base, uint32_t co,
			    uint32_t i)
{
	return base + ((size_t)co * c->max_b + i) * c->max_size;
}

static void rpc_co(void *arg)
{
	struct rco *co = arg;
	struct bf_rpc_cli *c = co->cli;
	const struct bf_rpc_cell *cell = c->cell;
	struct bf_rpc_result *res = c->res;
	uint32_t B = cell->batch, S = cell->size;
	while (!c->abort) {
		uint64_t now = dxl_now_ns();
		if (cell->iters) {
			if (c->started >= cell->iters + cell->warmup_iters)
				break;
		} else if (now >= cell->t_end) {
			break;
		}
		bool verify = cell->verify_every &&
			      (c->started % cell->verify_every) == 0;
		c->started++;
		co->seq++;
		for (uint32_t i = 0; i < B; i++) {
			uint8_t *rq = area(c, c->req, co->idx, i);
			uint64_t hdr = ((uint64_t)co->idx << 48) | ((uint64_t)i << 40) |
				       ((uint64_t)c->gen << 32) | co->seq;
			memcpy(rq, &hdr, 8);
			if (verify)
				memset(area(c, c->rep, co->idx, i), 0, S);
		}
		uint64_t t0 = dxl_now_ns();
		for (uint32_t i = 0; i < B; i++) {
			struct dxl_rpc_call *call = &co->calls[i];
			memset(call, 0, sizeof(*call));
			call->qp = c->qp;
			call->handler_id = BF_RPC_ECHO;
			call->req = area(c, c->req, co->idx, i);
			call->len = S;
			call->reply = area(c, c->rep, co->idx, i);
			call->cap = S;
			int rc = dxl_rpc_call_async(c->rpc, call);
			if (rc) {
				cli_note(c, "dxl_rpc_call_async: %s: %.100s",
					 dxl_errname(rc), dxl_errmsg());
				c->abort = true;
				/* the calls already issued still complete */
				break;
			}
		}
		int nbad = dxl_rpc_wait_all(c->rpc);
		uint64_t t1 = dxl_now_ns();
		if (c->abort)
			break;
		if (nbad < 0) {
			cli_note(c, "dxl_rpc_wait_all: %s", dxl_errname(nbad));
			c->abort = true;
			break;
		}
		for (uint32_t i = 0; i < B; i++) {
			struct dxl_rpc_call *call = &co->calls[i];
			if (call->status != 0) {
				cli_note(c, "RPC call: status %s: %.100s",
					 dxl_errname(call->status), dxl_errmsg());
				c->abort = true;
				continue;
			}
			if (call->reply_len != S) {
				cli_verr(c, "RPC echo of %zu bytes, sent %u",
					 call->reply_len, S);
				continue;
			}
			if (!verify)
				continue;
			res->vchecked++;
			if (memcmp(call->reply, call->req, S) != 0)
				cli_verr(c, "RPC echo of %u B differs from the request",
					 S);
		}
		if (c->abort)
			break;
		c->done++;
		bool record;
		if (cell->iters) {
			record = c->done > cell->warmup_iters;
			if (c->done == cell->warmup_iters)
				res->t_first = t1;
		} else {
			record = t1 >= cell->t_measure && t1 <= cell->t_end;
		}
		if (record) {
			dxl_hist_record(res->hist, t1 - t0);
			res->ops += B;
			res->samples++;
			res->t_last = t1;
		}
	}
}

int bf_rpc_cli_run(struct bf_rpc_cli *c, const struct bf_rpc_cell *cell,
		   struct bf_rpc_result *res)
{
	c->cell = cell;
	c->res = res;
	c->started = c->done = 0;
	c->abort = false;
	c->gen++;
	if (dxl_qp_state(c->qp) != DXL_QP_RTS) {
		snprintf(res->note, sizeof(res->note),
			 "thread %u: the RPC QP is in the error state", c->idx);
		res->errors++;
		return -1;
	}
	/* the request payloads: a pattern after the 8-byte header */
	for (uint32_t o = 0; o < cell->outstanding; o++)
		for (uint32_t i = 0; i < cell->batch; i++)
			bf_pattern_fill(0x525043ull ^ c->idx,
					((uint64_t)o * cell->batch + i) * cell->size,
					area(c, c->req, o, i), cell->size);
	for (uint32_t o = 0; o < cell->outstanding; o++) {
		c->cos[o] = (struct rco){.cli = c, .idx = o};
		int rc = dxl_sched_spawn(c->sched, rpc_co, &c->cos[o], NULL);
		if (rc) {
			snprintf(res->note, sizeof(res->note),
				 "dxl_sched_spawn: %.120s", dxl_errmsg());
			res->errors++;
			c->abort = true;
			break;
		}
	}
	int rc = dxl_sched_run(c->sched);
	if (rc) {
		if (!res->note[0])
			snprintf(res->note, sizeof(res->note),
				 "dxl_sched_run: %.120s", dxl_errmsg());
		res->errors++;
	}
	return res->errors ? -1 : 0;
}
