/* test_rpc.c -- RPC over the fabric: calls, batching, passive ACK, bad input, dead peers */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/co.h"
#include "dxl/fabric.h"
#include "dxl/rpc.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/peer.h"

/*
 * The server is a peer process (tests/lib/peer.h) running the job
 * "rpc_server": its own ctx, scheduler and rpc, serving until the H_STOP
 * call. The client is this process: one ctx, a scheduler with many
 * coroutines, an rpc. Results computed inside coroutines are stored and
 * asserted after dxl_sched_run returns (an assertion must not longjmp out of
 * a coroutine stack).
 */

#define SRV_CTX 3
#define SRV_NODE 7
#define CLI_NODE 5

enum {
	H_ECHO = 1,  /* reply: reversed request ^ 0xa5; status len % 97 */
	H_ADD = 2,   /* one-way: count++, sum += u64 */
	H_GET = 3,   /* reply {count, sum} */
	H_STOP = 4,  /* stop serving (after replying) */
	H_FAIL = 5,  /* reply "nope", status DXL_E_CONFLICT */
	H_NODE = 6,  /* reply: u32 node of the caller (dxl_rpc_current_qp) */
	H_BIG = 7,   /* reply: u32 n bytes of pattern, even if over cap */
	H_CALLBACK = 8, /* spawn a coroutine that calls H_PING back on the
			   QP the request came in on (passive at the server) */
	H_CBRESULT = 9, /* reply: i32 what that call returned; DXL_E_AGAIN
			   while it has not returned yet */
	H_PING = 10,    /* served by the CLIENT: status 42 */
	H_UNKNOWN = 99,
};

struct srv_args {
	uint32_t max_msg;
	uint32_t max_batch;
};

struct srv_result {
	int32_t rc;
	uint64_t add_count, add_sum;
	struct dxl_rpc_stats st;
};

struct srv_state {
	struct dxl_sched *s;
	struct dxl_rpc *rpc;
	uint64_t add_count, add_sum;
	struct dxl_qp *cb_qp;
	int cb_result; /* 1 = not yet */
};

static int h_echo(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		  size_t cap, size_t *reply_len, void *arg)
{
	if (len > cap)
		return DXL_E_TOOBIG;
	const uint8_t *in = req;
	uint8_t *out = reply;
	for (size_t i = 0; i < len; i++)
		out[i] = in[len - 1 - i] ^ 0xa5;
	*reply_len = len;
	return (int)(len % 97);
}

static int h_add(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		 size_t cap, size_t *reply_len, void *arg)
{
	struct srv_state *st = arg;
	uint64_t v = 0;
	if (len != 8)
		return DXL_E_INVAL;
	memcpy(&v, req, 8);
	st->add_count++;
	st->add_sum += v;
	return 0;
}

static int h_get(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		 size_t cap, size_t *reply_len, void *arg)
{
	struct srv_state *st = arg;
	uint64_t v[2] = {st->add_count, st->add_sum};
	if (cap < sizeof(v))
		return DXL_E_TOOBIG;
	memcpy(reply, v, sizeof(v));
	*reply_len = sizeof(v);
	return 0;
}

static int h_stop(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		  size_t cap, size_t *reply_len, void *arg)
{
	struct srv_state *st = arg;
	dxl_sched_stop(st->s); /* this round's replies still go out */
	return 0;
}

static int h_fail(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		  size_t cap, size_t *reply_len, void *arg)
{
	if (cap >= 4) {
		memcpy(reply, "nope", 4);
		*reply_len = 4;
	}
	return DXL_E_CONFLICT;
}

static int h_node(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		  size_t cap, size_t *reply_len, void *arg)
{
	struct dxl_qp *qp = dxl_rpc_current_qp(rpc);
	uint32_t node = qp ? dxl_qp_remote_node(qp) : UINT32_MAX;
	if (cap < 4)
		return DXL_E_TOOBIG;
	memcpy(reply, &node, 4);
	*reply_len = 4;
	return 0;
}

static int h_big(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		 size_t cap, size_t *reply_len, void *arg)
{
	uint32_t n = 0;
	if (len != 4)
		return DXL_E_INVAL;
	memcpy(&n, req, 4);
	dxlt_pattern_fill(reply, DXL_MIN((size_t)n, cap), 77, 0);
	*reply_len = n; /* over cap on purpose when n > cap */
	return 0;
}

static void callback_fn(void *p)
{
	struct srv_state *st = p;
	uint8_t rep[8];
	size_t rl = 0;
	st->cb_result = dxl_rpc_call(st->rpc, st->cb_qp, H_PING, "hi", 2, rep,
				     sizeof(rep), &rl);
	if (st->cb_result == 42 && (rl != 2 || memcmp(rep, "ih", 2) != 0))
		st->cb_result = -4242;
}

static int h_callback(struct dxl_rpc *rpc, const void *req, size_t len,
		      void *reply, size_t cap, size_t *reply_len, void *arg)
{
	struct srv_state *st = arg;
	/* handlers must not wait: do the call in a coroutine */
	st->cb_qp = dxl_rpc_current_qp(rpc);
	st->cb_result = 1;
	return dxl_sched_spawn(st->s, callback_fn, st, NULL);
}

static int h_cbresult(struct dxl_rpc *rpc, const void *req, size_t len,
		      void *reply, size_t cap, size_t *reply_len, void *arg)
{
	struct srv_state *st = arg;
	if (st->cb_result == 1)
		return DXL_E_AGAIN;
	if (cap < 4)
		return DXL_E_TOOBIG;
	memcpy(reply, &st->cb_result, 4);
	*reply_len = 4;
	return 0;
}

static int job_rpc_server(struct dxlt_peer_self *self, const void *arg,
			  size_t arg_len, void **out, size_t *out_len)
{
	struct srv_args a;
	if (arg_len != sizeof(a))
		return DXL_E_INVAL;
	memcpy(&a, arg, sizeof(a));
	struct dxl_fabric *f = dxlt_self_fabric(self);
	struct dxl_ctx *ctx = NULL;
	struct dxl_sched *s = NULL;
	struct dxl_rpc *rpc = NULL;
	struct srv_state st = {0};
	struct srv_result *res = calloc(1, sizeof(*res));
	if (!res)
		return DXL_E_NOMEM;
	int ret = dxl_ctx_new(f, SRV_CTX, &ctx);
	if (!ret)
		ret = dxl_sched_new(NULL, ctx, &s);
	if (!ret) {
		struct dxl_rpc_cfg cfg;
		dxl_rpc_cfg_init(&cfg);
		if (a.max_msg)
			cfg.max_msg = a.max_msg;
		if (a.max_batch)
			cfg.max_batch = a.max_batch;
		ret = dxl_rpc_new(s, &cfg, &rpc);
	}
	st.s = s;
	st.rpc = rpc;
	if (!ret)
		ret = dxl_rpc_register(rpc, H_ECHO, h_echo, &st) ||
		      dxl_rpc_register(rpc, H_ADD, h_add, &st) ||
		      dxl_rpc_register(rpc, H_GET, h_get, &st) ||
		      dxl_rpc_register(rpc, H_STOP, h_stop, &st) ||
		      dxl_rpc_register(rpc, H_FAIL, h_fail, &st) ||
		      dxl_rpc_register(rpc, H_NODE, h_node, &st) ||
		      dxl_rpc_register(rpc, H_BIG, h_big, &st) ||
		      dxl_rpc_register(rpc, H_CALLBACK, h_callback, &st) ||
		      dxl_rpc_register(rpc, H_CBRESULT, h_cbresult, &st);
	if (!ret)
		ret = dxl_sched_serve(s);
	if (ret)
		fprintf(stderr, "rpc_server: %s\n", dxl_errmsg());
	res->rc = ret;
	res->add_count = st.add_count;
	res->add_sum = st.add_sum;
	if (rpc)
		dxl_rpc_stats(rpc, &res->st);
	/* documented order: ctx, rpc, scheduler */
	dxl_ctx_delete(&ctx);
	dxl_rpc_delete(&rpc);
	dxl_sched_delete(&s);
	*out = res;
	*out_len = sizeof(*res);
	return ret;
}

static const struct dxlt_job jobs[] = {
	{"rpc_server", job_rpc_server},
	{NULL, NULL},
};

/* ---- the client side ------------------------------------------------------ */

struct env {
	struct dxlt_peer *peer;
	bool job;
	struct dxl_fabric *f;
	struct dxl_ctx *ctx;
	struct dxl_sched *s;
	struct dxl_rpc *rpc;
	struct dxl_qp *qp;
	struct srv_result srv; /* after env_stop_server */
};

static int setup(void **state)
{
	dxlt_watchdog_arm(90, "test_rpc");
	struct env *e = calloc(1, sizeof(*e));
	assert_non_null(e);
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;
	if (e->peer)
		dxlt_peer_stop(&e->peer); /* QUIT or SIGKILL, always reaped */
	dxl_ctx_delete(&e->ctx);
	dxl_rpc_delete(&e->rpc);
	dxl_sched_delete(&e->s);
	dxl_fabric_delete(&e->f);
	free(e);
	dxlt_watchdog_disarm();
	return 0;
}

/* client fabric, ctx, scheduler with n_co coroutines, rpc; no server */
static void env_client(struct env *e, uint32_t n_co,
		       const struct dxl_rpc_cfg *rcfg)
{
	struct dxl_fabric_cfg fc;
	dxlt_fabric_cfg_from_env(&fc);
	fc.node_id = CLI_NODE;
	int r = dxl_fabric_new(&fc, &e->f);
	if (r == DXL_E_NOTSUP || r == DXL_E_NODEV) {
		print_message("no usable fabric (%s): skipped\n", dxl_errmsg());
		skip();
	}
	assert_int_equal(r, 0);
	assert_int_equal(dxl_ctx_new(e->f, 0, &e->ctx), 0);
	struct dxl_sched_cfg sc;
	dxl_sched_cfg_init(&sc);
	sc.n_coroutines = n_co;
	assert_int_equal(dxl_sched_new(&sc, e->ctx, &e->s), 0);
	r = dxl_rpc_new(e->s, rcfg, &e->rpc);
	if (r)
		print_message("rpc_new: %s\n", dxl_errmsg());
	assert_int_equal(r, 0);
}

/* start the server peer and connect e->qp to it */
static void env_server(struct env *e, const struct srv_args *a)
{
	struct dxl_fabric_cfg fc;
	dxlt_fabric_cfg_from_env(&fc);
	fc.node_id = SRV_NODE;
	int r = dxlt_peer_start(&fc, &e->peer);
	if (r)
		print_message("peer_start: %s\n", dxl_errmsg());
	assert_int_equal(r, 0);
	struct srv_args def = {0, 0};
	assert_int_equal(dxlt_peer_job_start(e->peer, "rpc_server", a ? a : &def,
					     sizeof(def)),
			 0);
	e->job = true;
	/* the job creates its ctx after it has started: until then the
	 * peer answers DXL_E_NOENT (bounded readiness poll) */
	uint64_t deadline = dxl_now_ms() + (uint64_t)dxlt_wait_ms();
	for (;;) {
		r = dxl_qp_connect(e->ctx, dxlt_peer_addr(e->peer), SRV_CTX,
				   &e->qp);
		if (r != DXL_E_NOENT || dxl_now_ms() > deadline)
			break;
		struct timespec ts = {0, 2 * 1000000};
		nanosleep(&ts, NULL);
	}
	if (r)
		print_message("connect: %s\n", dxl_errmsg());
	assert_int_equal(r, 0);
	assert_int_equal(dxl_qp_remote_node(e->qp), SRV_NODE);
}

static void stop_fn(void *p)
{
	struct env *e = p;
	e->srv.rc = dxl_rpc_call(e->rpc, e->qp, H_STOP, NULL, 0, NULL, 0, NULL);
}

/* ask the server to stop, collect its result, reap it */
static void env_stop_server(struct env *e)
{
	e->srv.rc = -1;
	assert_int_equal(dxl_sched_spawn(e->s, stop_fn, e, NULL), 0);
	assert_int_equal(dxl_sched_run(e->s), 0);
	assert_int_equal(e->srv.rc, 0);
	int job_rc = -1;
	void *out = NULL;
	size_t out_len = 0;
	assert_int_equal(dxlt_peer_job_wait(e->peer, &job_rc, &out, &out_len), 0);
	e->job = false;
	assert_int_equal(job_rc, 0);
	assert_int_equal(out_len, sizeof(e->srv));
	memcpy(&e->srv, out, sizeof(e->srv));
	free(out);
	int st = dxlt_peer_stop(&e->peer);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void rpc_stats(struct env *e, struct dxl_rpc_stats *st)
{
	dxl_rpc_stats(e->rpc, st);
}

/* ---- argument checks (no server) -------------------------------------------- */

static void outside_fn(void *p)
{
	int *r = p;
	struct dxl_rpc_call c = {.qp = NULL};
	r[0] = dxl_rpc_call_async(NULL, &c);
	r[1] = c.done;
	r[2] = dxl_rpc_wait_all(NULL);
}

static void test_rpc_cfg_and_args(void **state)
{
	struct env *e = *state;
	env_client(e, 4, NULL);
	struct dxl_rpc *r2 = (void *)1;
	assert_int_equal(dxl_rpc_new(e->s, NULL, &r2), DXL_E_EXIST);
	assert_null(r2);
	assert_int_equal(dxl_rpc_new(NULL, NULL, &r2), DXL_E_INVAL);
	assert_int_equal(dxl_rpc_new(e->s, NULL, NULL), DXL_E_INVAL);
	assert_int_equal(dxl_rpc_max_payload(e->rpc), 16384 - 40);

	/* a scheduler without ctx, and configurations out of range */
	struct dxl_sched *bare = NULL;
	assert_int_equal(dxl_sched_new(NULL, NULL, &bare), 0);
	assert_int_equal(dxl_rpc_new(bare, NULL, &r2), DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "no fabric ctx"));
	dxl_sched_delete(&bare);
	struct dxl_sched *s2 = NULL;
	struct dxl_ctx *c2 = NULL;
	assert_int_equal(dxl_ctx_new(e->f, 1, &c2), 0);
	assert_int_equal(dxl_sched_new(NULL, c2, &s2), 0);
	struct dxl_rpc_cfg cfg;
	dxl_rpc_cfg_init(&cfg);
	cfg.max_msg = 1001;
	assert_int_equal(dxl_rpc_new(s2, &cfg, &r2), DXL_E_INVAL);
	cfg.max_msg = 1u << 20; /* over the fabric's max_msg */
	assert_int_equal(dxl_rpc_new(s2, &cfg, &r2), DXL_E_INVAL);
	dxl_rpc_cfg_init(&cfg);
	cfg.n_recv_bufs = 100000; /* over srq_depth */
	assert_int_equal(dxl_rpc_new(s2, &cfg, &r2), DXL_E_INVAL);
	dxl_rpc_cfg_init(&cfg);
	cfg.max_batch = 0;
	assert_int_equal(dxl_rpc_new(s2, &cfg, &r2), DXL_E_INVAL);
	dxl_rpc_cfg_init(&cfg);
	cfg.max_send_bufs = cfg.n_send_bufs - 1;
	assert_int_equal(dxl_rpc_new(s2, &cfg, &r2), DXL_E_INVAL);
	/* a small valid one works on the second ctx */
	dxl_rpc_cfg_init(&cfg);
	cfg.max_msg = 512;
	cfg.n_recv_bufs = 8;
	assert_int_equal(dxl_rpc_new(s2, &cfg, &r2), 0);
	assert_int_equal(dxl_rpc_max_payload(r2), 512 - 40);
	dxl_ctx_delete(&c2);
	dxl_rpc_delete(&r2);
	assert_null(r2);
	dxl_sched_delete(&s2);

	/* handlers */
	assert_int_equal(dxl_rpc_register(e->rpc, 1, h_echo, NULL), 0);
	assert_int_equal(dxl_rpc_register(e->rpc, 1, h_echo, NULL), DXL_E_EXIST);
	assert_int_equal(dxl_rpc_register(e->rpc, DXL_RPC_MAX_HANDLERS, h_echo,
					  NULL),
			 DXL_E_INVAL);
	assert_int_equal(dxl_rpc_register(e->rpc, 2, NULL, NULL), DXL_E_INVAL);
	assert_null(dxl_rpc_current_qp(e->rpc));

	/* calls need a coroutine of the rpc's scheduler */
	struct dxl_rpc_call c = {.qp = (struct dxl_qp *)1, .handler_id = 1};
	assert_int_equal(dxl_rpc_call_async(e->rpc, &c), DXL_E_STATE);
	assert_int_equal(c.done, 1);
	assert_int_equal(c.status, DXL_E_STATE);
	assert_int_equal(dxl_rpc_call(e->rpc, (struct dxl_qp *)1, 1, NULL, 0,
				      NULL, 0, NULL),
			 DXL_E_STATE);
	assert_int_equal(dxl_rpc_wait_all(e->rpc), DXL_E_STATE);
	assert_int_equal(dxl_rpc_send_noreply(e->rpc, NULL, 1, NULL, 0),
			 DXL_E_INVAL);
	assert_int_equal(dxl_rpc_flush(NULL), DXL_E_INVAL);
	int res[3] = {1, 1, 1};
	assert_int_equal(dxl_sched_spawn(e->s, outside_fn, res, NULL), 0);
	assert_int_equal(dxl_sched_run(e->s), 0);
	assert_int_equal(res[0], DXL_E_INVAL);
	assert_int_equal(res[1], 1);
	assert_int_equal(res[2], DXL_E_INVAL);
}

/* ---- many coroutines, concurrent calls ---------------------------------------- */

#define MC_CO 16
#define MC_CALLS 64

struct mc {
	struct env *e;
	int who;
	int bad;          /* calls whose reply or status was wrong */
	int first_err;
	uint32_t node;
};

static size_t mc_len(int who, int i)
{
	/* 0 .. ~3 KiB, different for every call */
	return (size_t)((who * 131 + i * 71) % 3000) + (i % 5 == 0 ? 0 : 1);
}

static bool echo_ok(const uint8_t *req, size_t len, const uint8_t *rep,
		    size_t rlen)
{
	if (rlen != len)
		return false;
	for (size_t i = 0; i < len; i++)
		if (rep[i] != (req[len - 1 - i] ^ 0xa5))
			return false;
	return true;
}

static void mc_fn(void *p)
{
	struct mc *m = p;
	struct env *e = m->e;
	uint8_t req[4][3000], rep[4][3000];
	/* synchronous calls */
	for (int i = 0; i < MC_CALLS / 2; i++) {
		size_t len = mc_len(m->who, i), rlen = 0;
		dxlt_pattern_fill(req[0], len, (uint64_t)(m->who * 1000 + i), 0);
		int r = dxl_rpc_call(e->rpc, e->qp, H_ECHO, req[0], len, rep[0],
				     sizeof(rep[0]), &rlen);
		if (r != (int)(len % 97) || !echo_ok(req[0], len, rep[0], rlen)) {
			if (!m->bad++)
				m->first_err = r;
		}
	}
	/* asynchronous: four in flight at a time */
	for (int i = MC_CALLS / 2; i < MC_CALLS; i += 4) {
		struct dxl_rpc_call c[4];
		size_t len[4];
		for (int k = 0; k < 4; k++) {
			len[k] = mc_len(m->who, i + k);
			dxlt_pattern_fill(req[k], len[k],
					  (uint64_t)(m->who * 1000 + i + k), 0);
			c[k] = (struct dxl_rpc_call){.qp = e->qp,
						     .handler_id = H_ECHO,
						     .req = req[k], .len = len[k],
						     .reply = rep[k],
						     .cap = sizeof(rep[k])};
			if (dxl_rpc_call_async(e->rpc, &c[k]) != 0 && !m->bad++)
				m->first_err = c[k].status;
		}
		int nfail = dxl_rpc_wait_all(e->rpc);
		/* statuses len % 97 are non-zero except for multiples */
		int expect_fail = 0;
		for (int k = 0; k < 4; k++) {
			expect_fail += len[k] % 97 != 0;
			if (!c[k].done || c[k].status != (int)(len[k] % 97) ||
			    !echo_ok(req[k], len[k], rep[k], c[k].reply_len))
				if (!m->bad++)
					m->first_err = c[k].status;
		}
		if (nfail != expect_fail && !m->bad++)
			m->first_err = -1000 - nfail;
	}
	uint8_t nb[4];
	size_t rl = 0;
	if (dxl_rpc_call(e->rpc, e->qp, H_NODE, NULL, 0, nb, sizeof(nb), &rl) == 0 &&
	    rl == 4)
		memcpy(&m->node, nb, 4);
}

static void test_rpc_many_coroutines(void **state)
{
	struct env *e = *state;
	env_client(e, MC_CO + 1, NULL);
	env_server(e, NULL);
	struct mc m[MC_CO];
	for (int i = 0; i < MC_CO; i++) {
		m[i] = (struct mc){.e = e, .who = i};
		assert_int_equal(dxl_sched_spawn(e->s, mc_fn, &m[i], NULL), 0);
	}
	assert_int_equal(dxl_sched_run(e->s), 0);
	for (int i = 0; i < MC_CO; i++) {
		if (m[i].bad)
			print_message("coroutine %d: %d bad calls, first %d (%s)\n",
				      i, m[i].bad, m[i].first_err, dxl_errmsg());
		assert_int_equal(m[i].bad, 0);
		assert_int_equal(m[i].node, CLI_NODE);
	}
	struct dxl_rpc_stats st;
	rpc_stats(e, &st);
	uint64_t calls = (uint64_t)MC_CO * (MC_CALLS + 1);
	assert_int_equal(st.calls, calls);
	assert_int_equal(st.replies_recv, calls);
	assert_int_equal(st.entries_sent, calls);
	assert_true(st.msgs_sent < calls); /* batched */
	assert_true(st.batched_msgs > 0);
	assert_int_equal(st.timeouts + st.unreachable + st.malformed_recv, 0);
	print_message("%llu calls in %llu messages (%llu doorbells), max batch "
		      "%llu\n",
		      (unsigned long long)calls, (unsigned long long)st.msgs_sent,
		      (unsigned long long)st.doorbells,
		      (unsigned long long)st.max_batch);
	env_stop_server(e);
	assert_int_equal(e->srv.st.requests_served, calls + 1); /* + stop */
	assert_true(e->srv.st.batched_msgs > 0); /* replies batched too */
}

/* ---- batching ------------------------------------------------------------------- */

struct one {
	struct env *e;
	int status;
	uint8_t rep[16];
	size_t rlen;
};

static void one_fn(void *p)
{
	struct one *o = p;
	uint8_t req[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	o->status = dxl_rpc_call(o->e->rpc, o->e->qp, H_ECHO, req, sizeof(req),
				 o->rep, sizeof(o->rep), &o->rlen);
}

struct async16 {
	struct env *e;
	int nfail;
	int bad;
};

static void async16_fn(void *p)
{
	struct async16 *a = p;
	struct dxl_rpc_call c[16];
	uint8_t req[16][4], rep[16][4];
	for (int i = 0; i < 16; i++) {
		memset(req[i], i, 4);
		c[i] = (struct dxl_rpc_call){.qp = a->e->qp, .handler_id = H_ECHO,
					     .req = req[i], .len = 4,
					     .reply = rep[i], .cap = 4};
		dxl_rpc_call_async(a->e->rpc, &c[i]);
	}
	a->nfail = dxl_rpc_wait_all(a->e->rpc);
	for (int i = 0; i < 16; i++)
		if (c[i].status != 4 || c[i].reply_len != 4 ||
		    rep[i][0] != (uint8_t)(i ^ 0xa5))
			a->bad++;
}

static void test_rpc_batching(void **state)
{
	struct env *e = *state;
	env_client(e, 9, NULL);
	env_server(e, NULL);
	struct dxl_rpc_stats s0, s1, s2;
	rpc_stats(e, &s0);
	/* 8 coroutines, one call each, all issued in the same round */
	struct one o[8];
	for (int i = 0; i < 8; i++) {
		o[i] = (struct one){.e = e, .status = -1};
		assert_int_equal(dxl_sched_spawn(e->s, one_fn, &o[i], NULL), 0);
	}
	assert_int_equal(dxl_sched_run(e->s), 0);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(o[i].status, 8);
		assert_int_equal(o[i].rlen, 8);
		assert_int_equal(o[i].rep[0], 8 ^ 0xa5);
	}
	rpc_stats(e, &s1);
	assert_int_equal(s1.entries_sent - s0.entries_sent, 8);
	assert_int_equal(s1.msgs_sent - s0.msgs_sent, 1); /* one SEND */
	assert_int_equal(s1.doorbells - s0.doorbells, 1);
	assert_int_equal(s1.max_batch, 8);
	assert_int_equal(s1.replies_recv - s0.replies_recv, 8);
	/* the server answered in one message as well */
	assert_int_equal(s1.msgs_recv - s0.msgs_recv, 1);

	/* one coroutine, 16 asynchronous calls: one message again */
	struct async16 a = {.e = e, .nfail = -1};
	assert_int_equal(dxl_sched_spawn(e->s, async16_fn, &a, NULL), 0);
	assert_int_equal(dxl_sched_run(e->s), 0);
	assert_int_equal(a.bad, 0);
	assert_int_equal(a.nfail, 16); /* status 4 != 0 counts as "failed" */
	rpc_stats(e, &s2);
	assert_int_equal(s2.msgs_sent - s1.msgs_sent, 1);
	assert_int_equal(s2.entries_sent - s1.entries_sent, 16);
	assert_int_equal(s2.max_batch, 16);
	env_stop_server(e);
	assert_true(e->srv.st.max_batch >= 16);
}

static void test_rpc_batching_off(void **state)
{
	/* max_batch = 1 on both sides: every entry is its own SEND, still
	 * posted together with one doorbell */
	struct env *e = *state;
	struct dxl_rpc_cfg cfg;
	dxl_rpc_cfg_init(&cfg);
	cfg.max_batch = 1;
	env_client(e, 8, &cfg);
	struct srv_args a = {.max_batch = 1};
	env_server(e, &a);
	struct one o[8];
	for (int i = 0; i < 8; i++) {
		o[i] = (struct one){.e = e, .status = -1};
		assert_int_equal(dxl_sched_spawn(e->s, one_fn, &o[i], NULL), 0);
	}
	assert_int_equal(dxl_sched_run(e->s), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(o[i].status, 8);
	struct dxl_rpc_stats st;
	rpc_stats(e, &st);
	assert_int_equal(st.msgs_sent, 8);
	assert_int_equal(st.max_batch, 1);
	assert_int_equal(st.batched_msgs, 0);
	assert_int_equal(st.doorbells, 1);
	env_stop_server(e);
	assert_int_equal(e->srv.st.max_batch, 1);
}

/* ---- passive ACK ------------------------------------------------------------------ */

#define PA_N 1000

struct pa {
	struct env *e;
	int send_err;
	int get_status;
	uint64_t got[2];
};

static void pa_fn(void *p)
{
	struct pa *x = p;
	for (uint64_t i = 1; i <= PA_N; i++) {
		int r = dxl_rpc_send_noreply(x->e->rpc, x->e->qp, H_ADD, &i, 8);
		if (r && !x->send_err)
			x->send_err = r;
		if (i % 100 == 0)
			dxl_co_yield(); /* ten rounds of 100 */
	}
	/* RC order: the call runs after every one-way request before it */
	size_t rl = 0;
	x->get_status = dxl_rpc_call(x->e->rpc, x->e->qp, H_GET, NULL, 0, x->got,
				     sizeof(x->got), &rl);
	if (rl != sizeof(x->got))
		x->get_status = -12345;
}

static void test_rpc_passive_ack(void **state)
{
	struct env *e = *state;
	env_client(e, 2, NULL);
	env_server(e, NULL);
	struct pa x = {.e = e, .get_status = -1};
	assert_int_equal(dxl_sched_spawn(e->s, pa_fn, &x, NULL), 0);
	assert_int_equal(dxl_sched_run(e->s), 0);
	assert_int_equal(x.send_err, 0);
	assert_int_equal(x.get_status, 0);
	assert_int_equal(x.got[0], PA_N);
	assert_int_equal(x.got[1], (uint64_t)PA_N * (PA_N + 1) / 2);
	struct dxl_rpc_stats st;
	rpc_stats(e, &st);
	assert_int_equal(st.noreply_sent, PA_N);
	assert_int_equal(st.calls, 1);
	assert_int_equal(st.replies_recv, 1); /* nothing came back for them */
	/* 100 per round, at 64 per message: 2 messages a round at most */
	assert_true(st.msgs_sent <= 2 * (PA_N / 100) + 1);
	env_stop_server(e);
	assert_int_equal(e->srv.add_count, PA_N);
	assert_int_equal(e->srv.st.noreply_served, PA_N);
	assert_int_equal(e->srv.st.replies_sent, 2); /* GET and STOP */
}

/* ---- errors ----------------------------------------------------------------------- */

struct errs {
	struct env *e;
	int unknown, after_unknown, fail, big_ok, big_over, toobig, toobig_async;
	int noreply_toobig, status_async;
	char fail_msg[8];
	size_t fail_len;
	uint64_t sent_before, sent_after;
	uint8_t big[200];
};

static void errs_fn(void *p)
{
	struct errs *x = p;
	struct env *e = x->e;
	struct dxl_rpc_stats st;
	uint8_t one = 1, rep[16];
	size_t rl = 0;
	x->unknown = dxl_rpc_call(e->rpc, e->qp, H_UNKNOWN, &one, 1, rep,
				  sizeof(rep), &rl);
	x->after_unknown = dxl_rpc_call(e->rpc, e->qp, H_ECHO, &one, 1, rep,
					sizeof(rep), &rl);
	x->fail = dxl_rpc_call(e->rpc, e->qp, H_FAIL, NULL, 0, x->fail_msg,
			       sizeof(x->fail_msg), &x->fail_len);
	uint32_t n = 150;
	x->big_ok = dxl_rpc_call(e->rpc, e->qp, H_BIG, &n, 4, x->big,
				 sizeof(x->big), &rl);
	if (rl != 150 || dxlt_pattern_check(x->big, 150, 77, 0) != -1)
		x->big_ok = -999;
	n = 300; /* over our capacity of 200: the server refuses */
	x->big_over = dxl_rpc_call(e->rpc, e->qp, H_BIG, &n, 4, x->big,
				   sizeof(x->big), &rl);

	/* over the message limit: refused before anything is sent */
	size_t big = dxl_rpc_max_payload(e->rpc) + 1;
	uint8_t *buf = calloc(1, big);
	dxl_rpc_stats(e->rpc, &st);
	x->sent_before = st.msgs_sent;
	x->toobig = dxl_rpc_call(e->rpc, e->qp, H_ECHO, buf, big, NULL, 0, NULL);
	struct dxl_rpc_call c = {.qp = e->qp, .handler_id = H_ECHO, .req = buf,
				 .len = big};
	x->toobig_async = dxl_rpc_call_async(e->rpc, &c);
	x->status_async = c.status;
	x->noreply_toobig = dxl_rpc_send_noreply(e->rpc, e->qp, H_ADD, buf, big);
	dxl_co_yield(); /* a round end: nothing to flush */
	dxl_rpc_stats(e->rpc, &st);
	x->sent_after = st.msgs_sent;
	free(buf);
}

/* a coroutine that leaves with a call in flight: its reply must not be
 * written to the dead stack */
static void abandon_fn(void *p)
{
	struct env *e = p;
	uint8_t req[64] = {0}, rep[64];
	struct dxl_rpc_call c = {.qp = e->qp, .handler_id = H_ECHO, .req = req,
				 .len = sizeof(req), .reply = rep,
				 .cap = sizeof(rep)};
	dxl_rpc_call_async(e->rpc, &c);
}

static void late_fn(void *p)
{
	struct env *e = p;
	uint8_t z = 0, rep[4];
	size_t rl;
	/* by the time this returns, the abandoned reply has arrived (RC) */
	dxl_rpc_call(e->rpc, e->qp, H_ECHO, &z, 1, rep, sizeof(rep), &rl);
}

static void test_rpc_errors(void **state)
{
	struct env *e = *state;
	env_client(e, 4, NULL);
	env_server(e, NULL);
	struct errs x = {.e = e};
	assert_int_equal(dxl_sched_spawn(e->s, errs_fn, &x, NULL), 0);
	assert_int_equal(dxl_sched_run(e->s), 0);
	assert_int_equal(x.unknown, DXL_E_NOENT);
	assert_int_equal(x.after_unknown, 1); /* still serving; 1 % 97 */
	assert_int_equal(x.fail, DXL_E_CONFLICT);
	assert_int_equal(x.fail_len, 4);
	assert_memory_equal(x.fail_msg, "nope", 4);
	assert_int_equal(x.big_ok, 0);
	assert_int_equal(x.big_over, DXL_E_TOOBIG);
	assert_int_equal(x.toobig, DXL_E_TOOBIG);
	assert_int_equal(x.toobig_async, DXL_E_TOOBIG);
	assert_int_equal(x.status_async, DXL_E_TOOBIG);
	assert_int_equal(x.noreply_toobig, DXL_E_TOOBIG);
	assert_int_equal(x.sent_after, x.sent_before);

	struct dxl_rpc_stats st0, st1;
	rpc_stats(e, &st0);
	assert_int_equal(dxl_sched_spawn(e->s, abandon_fn, e, NULL), 0);
	assert_int_equal(dxl_sched_spawn(e->s, late_fn, e, NULL), 0);
	assert_int_equal(dxl_sched_run(e->s), 0);
	rpc_stats(e, &st1);
	assert_int_equal(st1.stale_replies - st0.stale_replies, 1);

	env_stop_server(e);
	assert_int_equal(e->srv.st.unknown_handler, 1);
	assert_int_equal(e->srv.st.err_replies_sent, 2); /* NOENT, TOOBIG */
}

/* ---- malformed messages ---------------------------------------------------------- */

static uint32_t put_hdr(uint8_t *m, uint16_t count, uint32_t total)
{
	uint32_t magic = DXL_RPC_MAGIC;
	uint16_t ver = DXL_RPC_VERSION;
	uint32_t zero = 0;
	/* little-endian host (x86-64 and aarch64 Linux) */
	memcpy(m, &magic, 4);
	memcpy(m + 4, &ver, 2);
	memcpy(m + 6, &count, 2);
	memcpy(m + 8, &total, 4);
	memcpy(m + 12, &zero, 4);
	return DXL_RPC_HDR_SIZE;
}

static uint32_t put_entry(uint8_t *e, uint16_t handler, uint16_t flags,
			  uint64_t req_id, uint32_t plen, uint32_t cap)
{
	int32_t status = 0;
	memcpy(e, &handler, 2);
	memcpy(e + 2, &flags, 2);
	memcpy(e + 4, &status, 4);
	memcpy(e + 8, &req_id, 8);
	memcpy(e + 16, &plen, 4);
	memcpy(e + 20, &cap, 4);
	return DXL_RPC_ENTRY_SIZE;
}

struct mal {
	struct env *e;
	struct dxl_mr *mr;
	int post_err, wc_err;
	int after_magic;
	int st_overrun, st_toobig, st_count, st_flags;
	int final;
};

/* post the raw bytes m[0..len) as one SEND on the rpc's QP, wait for it */
static void raw_send(struct mal *x, uint32_t len)
{
	struct dxl_wr wr = {.wr_id = dxl_co_wrid(1), .op = DXL_WR_SEND,
			    .flags = DXL_WR_SIGNALED,
			    .local = dxl_mr_addr(x->mr), .len = len,
			    .lkey = dxl_mr_lkey(x->mr)};
	int r = dxl_qp_post(x->e->qp, &wr, NULL);
	if (r) {
		x->post_err = r;
		return;
	}
	if (dxl_co_wait_completions(1, NULL, -1) != 0)
		x->wc_err++;
}

/*
 * Issue an async echo call (queued in this round's batch, not posted yet),
 * then inject a malformed message carrying the same request id: it reaches
 * the server first, whose error reply completes our call; the real reply
 * later is stale.
 */
static int inject_for_call(struct mal *x, int kind)
{
	struct env *e = x->e;
	uint8_t req[8] = {9}, rep[8];
	struct dxl_rpc_call c = {.qp = e->qp, .handler_id = H_ECHO, .req = req,
				 .len = 8, .reply = rep, .cap = sizeof(rep)};
	if (dxl_rpc_call_async(e->rpc, &c) != 0)
		return -1;
	uint8_t *m = dxl_mr_addr(x->mr);
	memset(m, 0, 256);
	uint32_t off = DXL_RPC_HDR_SIZE, total;
	switch (kind) {
	case 0: /* payload length overruns the message */
		off += put_entry(m + off, H_ECHO, DXL_RPC_F_REQUEST,
				 c.priv.req_id, 5000, 8);
		total = off + 8;
		put_hdr(m, 1, total);
		break;
	case 1: /* total_len claims more than max_msg */
		off += put_entry(m + off, H_ECHO, DXL_RPC_F_REQUEST,
				 c.priv.req_id, 8, 8);
		total = off + 8;
		put_hdr(m, 1, 1u << 24);
		break;
	case 2: /* count says 3, one entry present */
		off += put_entry(m + off, H_ECHO, DXL_RPC_F_REQUEST,
				 c.priv.req_id, 8, 8);
		total = off + 8;
		put_hdr(m, 3, total);
		break;
	default: /* REQUEST|REPLY flags together */
		off += put_entry(m + off, H_ECHO,
				 DXL_RPC_F_REQUEST | DXL_RPC_F_REPLY,
				 c.priv.req_id, 8, 8);
		total = off + 8;
		put_hdr(m, 1, total);
		break;
	}
	raw_send(x, total);
	return dxl_rpc_wait(e->rpc, &c);
}

static void mal_fn(void *p)
{
	struct mal *x = p;
	struct env *e = x->e;
	uint8_t *m = dxl_mr_addr(x->mr);
	/* 1. bad magic: dropped, nothing answers, the server goes on */
	memset(m, 0x5a, 64);
	raw_send(x, 64);
	uint8_t one = 3, rep[4];
	size_t rl = 0;
	x->after_magic = dxl_rpc_call(e->rpc, e->qp, H_ECHO, &one, 1, rep,
				      sizeof(rep), &rl);
	/* 2.-5. malformed with a readable request id: error replies */
	x->st_overrun = inject_for_call(x, 0);
	x->st_toobig = inject_for_call(x, 1);
	x->st_count = inject_for_call(x, 2);
	x->st_flags = inject_for_call(x, 3);
	/* and the server still serves */
	x->final = dxl_rpc_call(e->rpc, e->qp, H_ECHO, &one, 1, rep, sizeof(rep),
				&rl);
}

static void test_rpc_malformed(void **state)
{
	struct env *e = *state;
	env_client(e, 2, NULL);
	env_server(e, NULL);
	void *raw = dxlt_alloc_pages(4096);
	assert_non_null(raw);
	struct mal x = {.e = e};
	assert_int_equal(dxl_mr_reg(e->f, raw, 4096, DXL_MR_LOCAL_WRITE, &x.mr), 0);
	assert_int_equal(dxl_sched_spawn(e->s, mal_fn, &x, NULL), 0);
	assert_int_equal(dxl_sched_run(e->s), 0);
	assert_int_equal(x.post_err, 0);
	assert_int_equal(x.wc_err, 0);
	assert_int_equal(x.after_magic, 1);
	assert_int_equal(x.st_overrun, DXL_E_PROTO);
	assert_int_equal(x.st_toobig, DXL_E_TOOBIG);
	assert_int_equal(x.st_count, DXL_E_PROTO);
	assert_int_equal(x.st_flags, DXL_E_PROTO);
	assert_int_equal(x.final, 1);
	env_stop_server(e);
	assert_int_equal(e->srv.st.malformed_recv, 5);
	assert_int_equal(e->srv.st.err_replies_sent, 4);
	/* the four real requests were answered too (their replies were stale) */
	struct dxl_rpc_stats st;
	rpc_stats(e, &st);
	assert_int_equal(st.stale_replies, 4);
	dxl_mr_dereg(&x.mr);
	dxlt_free_pages(raw, 4096);
}

/* ---- timeouts and dead peers ----------------------------------------------------- */

struct to {
	struct env *e;
	int timed, after;
	uint64_t elapsed_ns;
};

static void to_fn(void *p)
{
	struct to *x = p;
	uint8_t b = 1, rep[4];
	struct dxl_rpc_call c = {.qp = x->e->qp, .handler_id = H_ECHO, .req = &b,
				 .len = 1, .reply = rep, .cap = sizeof(rep),
				 .timeout_ms = 100};
	uint64_t t0 = dxl_now_ns();
	dxl_rpc_call_async(x->e->rpc, &c);
	x->timed = dxl_rpc_wait(x->e->rpc, &c);
	x->elapsed_ns = dxl_now_ns() - t0;
	dxlt_peer_signal(x->e->peer, SIGCONT);
	size_t rl;
	x->after = dxl_rpc_call(x->e->rpc, x->e->qp, H_ECHO, &b, 1, rep,
				sizeof(rep), &rl);
}

static void test_rpc_timeout(void **state)
{
	struct env *e = *state;
	env_client(e, 2, NULL);
	env_server(e, NULL);
	/* a stopped (not dead) server: the call times out, well within the
	 * fabric's dead-peer timeout, and the server resumes afterwards */
	assert_int_equal(dxlt_peer_signal(e->peer, SIGSTOP), 0);
	struct to x = {.e = e, .timed = 1, .after = -1};
	assert_int_equal(dxl_sched_spawn(e->s, to_fn, &x, NULL), 0);
	assert_int_equal(dxl_sched_run(e->s), 0);
	assert_int_equal(x.timed, DXL_E_TIMEDOUT);
	assert_true(x.elapsed_ns >= 100 * 1000000ull);
	assert_int_equal(x.after, 1);
	struct dxl_rpc_stats st;
	rpc_stats(e, &st);
	assert_int_equal(st.timeouts, 1);
	assert_int_equal(st.stale_replies, 1); /* the late reply */
	env_stop_server(e);
}

#define KILL_CO 8

struct kill {
	struct env *e;
	int status[KILL_CO];
	int after;
	int killed;
};

struct kill_arg {
	struct kill *k;
	int who;
};

static void kill_caller(void *p)
{
	struct kill_arg *a = p;
	uint8_t req[32] = {1}, rep[32];
	size_t rl;
	a->k->status[a->who] = dxl_rpc_call(a->k->e->rpc, a->k->e->qp, H_ECHO,
					    req, sizeof(req), rep, sizeof(rep),
					    &rl);
}

static void killer(void *p)
{
	struct kill *k = p;
	/* two rounds: the calls have been flushed to the (stopped) server */
	dxl_co_yield();
	dxl_co_yield();
	k->killed = dxlt_peer_signal(k->e->peer, SIGKILL);
	/* wait until every call has failed, then try a new one */
	for (int i = 0; i < KILL_CO; i++)
		while (k->status[i] == 1)
			dxl_co_sleep_ms(1);
	uint8_t b = 0;
	k->after = dxl_rpc_call(k->e->rpc, k->e->qp, H_ECHO, &b, 1, NULL, 0, NULL);
}

static void test_rpc_peer_killed(void **state)
{
	struct env *e = *state;
	struct dxl_rpc_cfg cfg;
	dxl_rpc_cfg_init(&cfg);
	cfg.timeout_ms = 30000; /* far beyond the test's budget: must not be
				   what ends the calls */
	env_client(e, KILL_CO + 1, &cfg);
	env_server(e, NULL);
	assert_int_equal(dxlt_peer_signal(e->peer, SIGSTOP), 0);
	struct kill k = {.e = e, .after = 1, .killed = -1};
	struct kill_arg args[KILL_CO];
	for (int i = 0; i < KILL_CO; i++) {
		k.status[i] = 1;
		args[i] = (struct kill_arg){&k, i};
		assert_int_equal(dxl_sched_spawn(e->s, kill_caller, &args[i], NULL),
				 0);
	}
	assert_int_equal(dxl_sched_spawn(e->s, killer, &k, NULL), 0);
	uint64_t t0 = dxl_now_ms();
	assert_int_equal(dxl_sched_run(e->s), 0);
	print_message("all calls failed within %llu ms of the start (kill included)\n",
		      (unsigned long long)(dxl_now_ms() - t0));
	assert_int_equal(k.killed, 0);
	for (int i = 0; i < KILL_CO; i++)
		assert_int_equal(k.status[i], DXL_E_UNREACHABLE);
	assert_int_equal(k.after, DXL_E_UNREACHABLE);
	struct dxl_rpc_stats st;
	rpc_stats(e, &st);
	assert_int_equal(st.unreachable, KILL_CO);
	assert_int_equal(st.timeouts, 0);
	int status = 0;
	assert_int_equal(dxlt_peer_wait_exit(e->peer, dxlt_wait_ms(), &status), 0);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	dxlt_peer_stop(&e->peer);
}

/* ---- symmetry: the server calls the client back ------------------------------ */

static int ping_count;

static int h_ping(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		  size_t cap, size_t *reply_len, void *arg)
{
	const uint8_t *in = req;
	uint8_t *out = reply;
	ping_count++;
	for (size_t i = 0; i < len && i < cap; i++)
		out[i] = in[len - 1 - i];
	*reply_len = len;
	return 42;
}

struct sym {
	struct env *e;
	int cb, res, got;
	struct dxl_qp *ping_qp;
};

static void sym_fn(void *p)
{
	struct sym *x = p;
	struct env *e = x->e;
	x->cb = dxl_rpc_call(e->rpc, e->qp, H_CALLBACK, NULL, 0, NULL, 0, NULL);
	/* the server's coroutine calls our H_PING over its passive QP; ask
	 * what it got (bounded: the fixture's wait budget) */
	uint64_t deadline = dxl_now_ms() + (uint64_t)dxlt_wait_ms();
	do {
		size_t rl = 0;
		x->res = dxl_rpc_call(e->rpc, e->qp, H_CBRESULT, NULL, 0, &x->got,
				      sizeof(x->got), &rl);
		if (x->res != DXL_E_AGAIN)
			break;
		dxl_co_sleep_ms(1);
	} while (dxl_now_ms() < deadline);
}

static void test_rpc_symmetric(void **state)
{
	struct env *e = *state;
	env_client(e, 2, NULL);
	ping_count = 0;
	assert_int_equal(dxl_rpc_register(e->rpc, H_PING, h_ping, NULL), 0);
	env_server(e, NULL);
	struct sym x = {.e = e, .cb = -1, .res = -1, .got = -1};
	assert_int_equal(dxl_sched_spawn(e->s, sym_fn, &x, NULL), 0);
	assert_int_equal(dxl_sched_run(e->s), 0);
	assert_int_equal(x.cb, 0);
	assert_int_equal(x.res, 0);
	assert_int_equal(x.got, 42); /* our handler's status, seen by the server */
	assert_int_equal(ping_count, 1);
	struct dxl_rpc_stats st;
	rpc_stats(e, &st);
	assert_int_equal(st.requests_served, 1); /* the client served one */
	env_stop_server(e);
	assert_int_equal(e->srv.st.calls, 1); /* the server issued one */
	assert_int_equal(e->srv.st.replies_recv, 1);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	dxlt_peer_child_hook(jobs);
	if (getenv("DXLT_TEST_FILTER")) /* e.g. "test_rpc_errors" */
		cmocka_set_test_filter(getenv("DXLT_TEST_FILTER"));
	const struct CMUnitTest tests[] = {
		T(test_rpc_cfg_and_args),
		T(test_rpc_many_coroutines),
		T(test_rpc_batching),
		T(test_rpc_batching_off),
		T(test_rpc_passive_ack),
		T(test_rpc_errors),
		T(test_rpc_malformed),
		T(test_rpc_symmetric),
		T(test_rpc_timeout),
		T(test_rpc_peer_killed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
