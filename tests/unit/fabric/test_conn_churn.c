/* test_conn_churn.c -- reconnecting peers leave nothing behind: passive QPs, receive buffers, memory */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/co.h"
#include "dxl/fabric.h"
#include "dxl/rpc.h"
#include "tests/lib/fabric_fixture.h"

/*
 * A server (its own thread: a ctx served by a scheduler and an rpc, plus a
 * registered region) and a client in this thread, on the provider of
 * DXL_TEST_PROVIDER (tcp by default; the Soft-RoCE guest runs it on verbs).
 *
 *  - one-sided churn: DXL_TEST_CHURN (default 1000) cycles of connect,
 *    WRITE + READ, delete against the server ctx. The passive QPs the
 *    server never saw (no RECV) are freed by the provider once down.
 *  - RPC churn: as many cycles of connect, call, delete. The server's rpc
 *    deletes its passive QPs once they are down.
 *    In both the server ctx's QP count must stay bounded, and (without a
 *    sanitizer, whose quarantine keeps freed memory) the process's
 *    resident memory too.
 *  - receive buffers: the server deletes a passive QP while a message for
 *    it sits in the receive queue, more times than it has receive buffers;
 *    the buffers must come back (FLUSHED, reposted) and RPCs keep working.
 *
 * This binary is also built and run under ASan by scripts/test.sh (make
 * test-churn-asan): a freed passive QP used again would show there.
 */

#define SRV_CTX 5
#define SRV_NODE 2
#define CLI_NODE 1
#define REGION 4096

enum {
	H_ECHO = 1,  /* reply: the request */
	H_COUNT = 2, /* reply: struct counts */
	H_DROPQP = 3, /* one-way: after 50 ms, delete the QP it came on */
	H_NOP = 4,   /* one-way: nothing */
	H_STOP = 5,
	H_NAP = 6,   /* one-way: the server's thread sleeps until woken (no poll) */
	H_ADD = 7,   /* one-way: count it (1 ms) */
};

struct counts {
	uint32_t qps;
	uint32_t pad;
	uint64_t recv_flushed;
	uint64_t passive_deleted;
};

struct srv {
	struct dxl_fabric *f;
	uint32_t n_recv;
	pthread_t th;
	atomic_int state; /* 0 starting, 1 serving, 2 failed, 3 done */
	struct dxl_ctx *ctx;
	struct dxl_sched *s;
	struct dxl_rpc *rpc;
	uint8_t *mem;
	struct dxl_mr *mr;
	struct dxl_mr_desc d;
	struct dxl_qp *victim;
	atomic_uint asleep; /* drop_victim rounds begun (the client waits) */
	uint32_t poll_batch; /* of the server's scheduler; 0 = default */
	atomic_uint napping, adds, wake;
};

static int h_echo(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		  size_t cap, size_t *reply_len, void *arg)
{
	if (len > cap)
		return DXL_E_TOOBIG;
	memcpy(reply, req, len);
	*reply_len = len;
	return 0;
}

static int h_count(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		   size_t cap, size_t *reply_len, void *arg)
{
	struct srv *sv = arg;
	struct dxl_rpc_stats st;
	dxl_rpc_stats(rpc, &st);
	struct counts c = {.qps = dxl_ctx_qp_count(sv->ctx),
			   .recv_flushed = st.recv_flushed,
			   .passive_deleted = st.passive_deleted};
	if (cap < sizeof(c))
		return DXL_E_TOOBIG;
	memcpy(reply, &c, sizeof(c));
	*reply_len = sizeof(c);
	return 0;
}

/* runs in a coroutine after the handler's round: the thread sleeps (no
 * poll), so the client's next message lands in the receive queue, then
 * the QP it will come on is deleted under it */
static void drop_victim(void *arg)
{
	struct srv *sv = arg;
	atomic_fetch_add(&sv->asleep, 1);
	usleep(50000);
	dxl_rpc_forget_qp(sv->rpc, sv->victim);
	dxl_qp_delete(&sv->victim);
}

static int h_dropqp(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		    size_t cap, size_t *reply_len, void *arg)
{
	struct srv *sv = arg;
	if (sv->victim)
		return DXL_E_BUSY;
	sv->victim = dxl_rpc_current_qp(rpc);
	return dxl_sched_spawn(sv->s, drop_victim, sv, NULL);
}

static int h_nop(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		 size_t cap, size_t *reply_len, void *arg)
{
	return 0;
}

static int h_nap(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		 size_t cap, size_t *reply_len, void *arg)
{
	struct srv *sv = arg;
	atomic_store(&sv->napping, 1);
	/* until the test wakes it (a fixed nap was too short on a loaded
	 * machine: the server woke before the client had closed), 10 s at most */
	for (int i = 0; i < 1000 && !atomic_load(&sv->wake); i++)
		usleep(10000);
	atomic_store(&sv->napping, 0);
	return 0;
}

static int h_add(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		 size_t cap, size_t *reply_len, void *arg)
{
	struct srv *sv = arg;
	atomic_fetch_add(&sv->adds, 1);
	usleep(1000); /* a slow handler: the rounds last longer than the
			 rpc's 10 ms between looks at down QPs */
	return 0;
}

static int h_stop(struct dxl_rpc *rpc, const void *req, size_t len, void *reply,
		  size_t cap, size_t *reply_len, void *arg)
{
	struct srv *sv = arg;
	dxl_sched_stop(sv->s);
	return 0;
}

static void *srv_main(void *arg)
{
	struct srv *sv = arg;
	struct dxl_rpc_cfg rc;
	dxl_rpc_cfg_init(&rc);
	rc.n_recv_bufs = sv->n_recv;
	struct dxl_sched_cfg sc;
	dxl_sched_cfg_init(&sc);
	if (sv->poll_batch)
		sc.poll_batch = sv->poll_batch;
	int ret = dxl_ctx_new(sv->f, SRV_CTX, &sv->ctx);
	if (!ret)
		ret = dxl_sched_new(&sc, sv->ctx, &sv->s);
	if (!ret)
		ret = dxl_rpc_new(sv->s, &rc, &sv->rpc);
	if (!ret)
		ret = dxl_rpc_register(sv->rpc, H_ECHO, h_echo, sv) ||
		      dxl_rpc_register(sv->rpc, H_COUNT, h_count, sv) ||
		      dxl_rpc_register(sv->rpc, H_DROPQP, h_dropqp, sv) ||
		      dxl_rpc_register(sv->rpc, H_NOP, h_nop, sv) ||
		      dxl_rpc_register(sv->rpc, H_STOP, h_stop, sv) ||
		      dxl_rpc_register(sv->rpc, H_NAP, h_nap, sv) ||
		      dxl_rpc_register(sv->rpc, H_ADD, h_add, sv);
	if (ret) {
		fprintf(stderr, "server: %s\n", dxl_errmsg());
		atomic_store(&sv->state, 2);
	} else {
		atomic_store(&sv->state, 1);
		ret = dxl_sched_serve(sv->s);
		atomic_store(&sv->state, ret ? 2 : 3);
	}
	dxl_ctx_delete(&sv->ctx);
	dxl_rpc_delete(&sv->rpc);
	dxl_sched_delete(&sv->s);
	return NULL;
}

struct env {
	struct srv sv;
	struct dxl_fabric *f; /* the client's */
	struct dxl_ctx *ctx;
	struct dxl_sched *s;
	struct dxl_rpc *rpc;
	uint8_t *buf;
	struct dxl_mr *lmr;
	bool skipped;
};

static int env_up_batch(struct env *e, uint32_t n_recv, uint32_t poll_batch)
{
	memset(e, 0, sizeof(*e));
	e->sv.poll_batch = poll_batch;
	dxlt_watchdog_arm(300, "test_conn_churn");
	struct dxl_fabric_cfg fc;
	dxlt_fabric_cfg_from_env(&fc);
	fc.node_id = SRV_NODE;
	fc.timeout_ms = 5000; /* rdma_cm connects under QEMU/TCG take long */
	int r = dxl_fabric_new(&fc, &e->sv.f);
	if (r == DXL_E_NODEV && !getenv("DXL_TEST_REQUIRE_DEVICE")) {
		print_message("  SKIPPED: no device for provider %s: %s\n",
			      dxl_fabric_provider_name(fc.provider), dxl_errmsg());
		e->skipped = true;
		return 0;
	}
	assert_int_equal(r, 0);
	fc.node_id = CLI_NODE;
	assert_int_equal(dxl_fabric_new(&fc, &e->f), 0);
	e->sv.n_recv = n_recv;
	e->sv.mem = dxlt_alloc_pages(REGION);
	assert_int_equal(dxl_mr_reg(e->sv.f, e->sv.mem, REGION,
				    DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE, &e->sv.mr),
			 0);
	dxl_mr_desc(e->sv.mr, &e->sv.d);
	atomic_init(&e->sv.state, 0);
	atomic_init(&e->sv.asleep, 0);
	assert_int_equal(pthread_create(&e->sv.th, NULL, srv_main, &e->sv), 0);
	while (atomic_load(&e->sv.state) == 0)
		usleep(1000);
	assert_int_equal(atomic_load(&e->sv.state), 1);
	assert_int_equal(dxl_ctx_new(e->f, 0, &e->ctx), 0);
	assert_int_equal(dxl_sched_new(NULL, e->ctx, &e->s), 0);
	assert_int_equal(dxl_rpc_new(e->s, NULL, &e->rpc), 0);
	e->buf = dxlt_alloc_pages(REGION);
	assert_int_equal(dxl_mr_reg(e->f, e->buf, REGION, DXL_MR_LOCAL_WRITE, &e->lmr), 0);
	return 1;
}

static int env_up(struct env *e, uint32_t n_recv)
{
	return env_up_batch(e, n_recv, 0);
}

struct call {
	struct env *e;
	struct dxl_qp *qp;
	uint16_t h;
	int rc;
	uint8_t reply[64];
	size_t reply_len;
};

static void call_fn(void *arg)
{
	struct call *c = arg;
	c->rc = dxl_rpc_call(c->e->rpc, c->qp, c->h, "ping", 4, c->reply,
			     sizeof(c->reply), &c->reply_len);
}

/* one call from a coroutine of the client's scheduler; its status */
static int do_call(struct env *e, struct dxl_qp *qp, uint16_t h, void *out,
		   size_t cap)
{
	struct call c = {.e = e, .qp = qp, .h = h, .rc = 1};
	assert_int_equal(dxl_sched_spawn(e->s, call_fn, &c, NULL), 0);
	assert_int_equal(dxl_sched_run(e->s), 0);
	if (out && c.rc == 0)
		memcpy(out, c.reply, DXL_MIN(cap, c.reply_len));
	return c.rc;
}

static struct dxl_qp *connect_srv(struct env *e)
{
	struct dxl_qp *qp = NULL;
	int r = dxl_qp_connect(e->ctx, dxl_fabric_addr(e->sv.f), SRV_CTX, &qp);
	if (r)
		print_message("connect: %s\n", dxl_errmsg());
	assert_int_equal(r, 0);
	return qp;
}

static struct counts counts(struct env *e)
{
	struct dxl_qp *qp = connect_srv(e);
	struct counts c;
	memset(&c, 0, sizeof(c));
	assert_int_equal(do_call(e, qp, H_COUNT, &c, sizeof(c)), 0);
	dxl_rpc_forget_qp(e->rpc, qp);
	dxl_qp_delete(&qp);
	return c;
}

static void env_down(struct env *e)
{
	if (e->skipped)
		return;
	struct dxl_qp *qp = connect_srv(e);
	assert_int_equal(do_call(e, qp, H_STOP, NULL, 0), 0);
	dxl_rpc_forget_qp(e->rpc, qp);
	dxl_qp_delete(&qp);
	pthread_join(e->sv.th, NULL);
	assert_int_equal(atomic_load(&e->sv.state), 3);
	dxl_ctx_delete(&e->ctx);
	dxl_rpc_delete(&e->rpc);
	dxl_sched_delete(&e->s);
	dxl_mr_dereg(&e->lmr);
	dxl_mr_dereg(&e->sv.mr);
	dxl_fabric_delete(&e->f);
	dxl_fabric_delete(&e->sv.f);
	dxlt_free_pages(e->buf, REGION);
	dxlt_free_pages(e->sv.mem, REGION);
	dxlt_watchdog_disarm();
}

static long rss_kib(void)
{
	FILE *fp = fopen("/proc/self/statm", "r");
	long pages = 0, res = 0;
	if (!fp)
		return -1;
	if (fscanf(fp, "%ld %ld", &pages, &res) != 2)
		res = -1;
	fclose(fp);
	return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

static int cycles(void)
{
	const char *s = getenv("DXL_TEST_CHURN");
	int n = s ? atoi(s) : 1000;
	return n > 0 ? n : 1000;
}

/* the server ctx's QP count settles (a down QP is freed at the next poll
 * or round end after it went down) */
static uint32_t settled_qps(struct env *e, uint32_t bound)
{
	struct counts c = counts(e);
	for (int i = 0; i < 200 && c.qps > bound; i++) {
		usleep(10000);
		c = counts(e);
	}
	return c.qps;
}

static void check_rss(const char *what, long before, long after)
{
	print_message("  %s: resident %ld KiB -> %ld KiB\n", what, before, after);
	if (getenv("DXL_TEST_SANITIZER")) {
		print_message("  (a sanitizer build keeps freed memory: RSS not checked)\n");
		return;
	}
	/* 1000 leaked passive QPs would be far more (tcp: 64 KiB input
	 * buffer and a send queue each; verbs: a hardware QP and CQ growth) */
	assert_true(after - before < 8 * 1024);
}

static void test_onesided_churn(void **state)
{
	struct env e;
	if (!env_up(&e, 16))
		skip();
	int n = cycles(), warm = n / 10;
	long rss0 = 0;
	uint32_t max_seen = 0;
	for (int i = 0; i < n; i++) {
		if (i == warm)
			rss0 = rss_kib();
		struct dxl_qp *qp = connect_srv(&e);
		uint64_t v = (uint64_t)i;
		memcpy(e.buf, &v, 8);
		assert_int_equal(dxlt_write(e.ctx, qp, e.buf, dxl_mr_lkey(e.lmr),
					    e.sv.d.addr, e.sv.d.rkey, 8),
				 DXL_WC_SUCCESS);
		assert_int_equal(dxlt_read(e.ctx, qp, e.buf + 64, dxl_mr_lkey(e.lmr),
					   e.sv.d.addr, e.sv.d.rkey, 8),
				 DXL_WC_SUCCESS);
		assert_memory_equal(e.buf + 64, &v, 8);
		dxl_qp_delete(&qp);
		if (i % 100 == 99) {
			struct counts c = counts(&e);
			max_seen = DXL_MAX(max_seen, c.qps);
		}
	}
	uint32_t q = settled_qps(&e, 4);
	long rss1 = rss_kib();
	print_message("  %d one-sided connect/WRITE/READ/delete cycles: the server "
		      "ctx holds %u QPs (at most %u seen on the way)\n",
		      n, q, max_seen);
	/* the QP of the count call itself may still be there */
	assert_true(q <= 4);
	/* down QPs are freed as they go (the rpc looks every 10 ms): what is
	 * held at any time is far below the cycles run */
	assert_true(max_seen <= (uint32_t)DXL_MAX(n / 4, 16));
	check_rss("one-sided churn", rss0, rss1);
	env_down(&e);
}

static void test_rpc_churn(void **state)
{
	struct env e;
	if (!env_up(&e, 16))
		skip();
	int n = cycles(), warm = n / 10;
	long rss0 = 0;
	uint32_t max_seen = 0;
	for (int i = 0; i < n; i++) {
		if (i == warm)
			rss0 = rss_kib();
		struct dxl_qp *qp = connect_srv(&e);
		uint8_t r[4];
		assert_int_equal(do_call(&e, qp, H_ECHO, r, sizeof(r)), 0);
		assert_memory_equal(r, "ping", 4);
		dxl_rpc_forget_qp(e.rpc, qp);
		dxl_qp_delete(&qp);
		if (i % 100 == 99) {
			struct counts c = counts(&e);
			max_seen = DXL_MAX(max_seen, c.qps);
		}
	}
	uint32_t q = settled_qps(&e, 4);
	struct counts c = counts(&e);
	long rss1 = rss_kib();
	print_message("  %d RPC connect/call/delete cycles: the server ctx holds %u "
		      "QPs (at most %u seen on the way); its rpc deleted %llu passive "
		      "QPs\n", n, q, max_seen, (unsigned long long)c.passive_deleted);
	assert_true(q <= 4);
	/* down QPs are freed as they go (the rpc looks every 10 ms): what is
	 * held at any time is far below the cycles run */
	assert_true(max_seen <= (uint32_t)DXL_MAX(n / 4, 16));
	/* the cycles' QPs and the count calls' went through the rpc */
	assert_true(c.passive_deleted >= (uint64_t)n);
	check_rss("RPC churn", rss0, rss1);
	env_down(&e);
}

/* the server deletes a passive QP with a message for it in the receive
 * queue, more times than it has receive buffers: each buffer comes back */
static void test_recv_buffers_come_back(void **state)
{
	struct env e;
	const uint32_t nbuf = 4;
	if (!env_up(&e, nbuf))
		skip();
	int rounds = (int)nbuf + 4;
	for (int i = 0; i < rounds; i++) {
		struct dxl_qp *qp = connect_srv(&e);
		assert_int_equal(dxl_rpc_send_noreply(e.rpc, qp, H_DROPQP, NULL, 0), 0);
		assert_int_equal(dxl_rpc_flush(e.rpc), 0);
		/* the server's thread sleeps 50 ms before it deletes the QP:
		 * this one lands in its receive queue meanwhile */
		uint64_t end = dxl_now_ms() + (uint64_t)dxlt_wait_ms();
		while (atomic_load(&e.sv.asleep) < (unsigned)i + 1 && dxl_now_ms() < end)
			dxl_sched_run_once(e.s, 1);
		assert_int_equal(atomic_load(&e.sv.asleep), (unsigned)i + 1);
		assert_int_equal(dxl_rpc_send_noreply(e.rpc, qp, H_NOP, NULL, 0), 0);
		assert_int_equal(dxl_rpc_flush(e.rpc), 0);
		/* until the server has deleted it (our QP fails) */
		end = dxl_now_ms() + (uint64_t)dxlt_wait_ms();
		while (dxl_qp_state(qp) == DXL_QP_RTS && dxl_now_ms() < end)
			dxl_sched_run_once(e.s, 10);
		assert_int_equal(dxl_qp_state(qp), DXL_QP_ERR);
		dxl_rpc_forget_qp(e.rpc, qp);
		dxl_qp_delete(&qp);
	}
	/* every buffer still serves: a few calls, more than nbuf messages */
	struct dxl_qp *qp = connect_srv(&e);
	for (uint32_t i = 0; i < 2 * nbuf; i++) {
		uint8_t r[4];
		assert_int_equal(do_call(&e, qp, H_ECHO, r, sizeof(r)), 0);
	}
	dxl_rpc_forget_qp(e.rpc, qp);
	dxl_qp_delete(&qp);
	struct counts c = counts(&e);
	print_message("  %d passive QPs deleted with a message queued, %u receive "
		      "buffers: %llu buffers came back FLUSHED and were reposted; "
		      "RPCs still work\n", rounds, nbuf,
		      (unsigned long long)c.recv_flushed);
	/* the coverage this test is for: the FLUSHED path ran more often
	 * than there are buffers */
	assert_true(c.recv_flushed > nbuf);
	env_down(&e);
}

/*
 * A client sends requests and closes its QP in order (dxl_qp_delete): the
 * server must still serve every request it received, even when the QP is
 * down (peer gone) while its requests wait in the completion queue beyond
 * what one poll takes (poll batch 4 here, 40 requests). The rpc reclaims
 * a down passive QP only after a poll found the CQ empty; deleting it
 * earlier gave the waiting requests' buffers back unserved.
 */
static void test_requests_of_a_closed_qp_served(void **state)
{
	struct env e;
	const uint32_t nreq = 40;
	if (!env_up_batch(&e, 64, 4))
		skip();
	struct dxl_qp *qp = connect_srv(&e);
	assert_int_equal(dxl_rpc_send_noreply(e.rpc, qp, H_NAP, NULL, 0), 0);
	assert_int_equal(dxl_rpc_flush(e.rpc), 0);
	uint64_t end = dxl_now_ms() + (uint64_t)dxlt_wait_ms();
	while (!atomic_load(&e.sv.napping) && dxl_now_ms() < end)
		dxl_sched_run_once(e.s, 1);
	assert_int_equal(atomic_load(&e.sv.napping), 1);
	/* while the server's thread sleeps: one SEND per request, then close */
	for (uint32_t i = 0; i < nreq; i++) {
		assert_int_equal(dxl_rpc_send_noreply(e.rpc, qp, H_ADD, NULL, 0), 0);
		assert_int_equal(dxl_rpc_flush(e.rpc), 0);
		for (int k = 0; k < 3; k++)
			dxl_sched_run_once(e.s, 0);
	}
	/* their SENDs leave (the server's NIC takes them into its receive
	 * buffers while its thread sleeps) */
	end = dxl_now_ms() + 30;
	while (dxl_now_ms() < end)
		dxl_sched_run_once(e.s, 1);
	assert_int_equal(atomic_load(&e.sv.napping), 1); /* still asleep */
	dxl_rpc_forget_qp(e.rpc, qp);
	dxl_qp_delete(&qp);
	/* the server wakes up, serves, and reclaims the QP */
	atomic_store(&e.sv.wake, 1);
	end = dxl_now_ms() + 2000;
	while (atomic_load(&e.sv.adds) < nreq && dxl_now_ms() < end)
		usleep(10000);
	usleep(50000);
	struct counts c = counts(&e);
	print_message("  %u requests sent before the client closed its QP: %u served, "
		      "%llu receive buffers given back unserved (server poll batch 4)\n",
		      nreq, atomic_load(&e.sv.adds), (unsigned long long)c.recv_flushed);
	assert_int_equal(atomic_load(&e.sv.adds), nreq);
	assert_int_equal(c.recv_flushed, 0);
	env_down(&e);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	print_message("conn churn: provider=%s\n",
		      dxl_fabric_provider_name(dxlt_test_provider()));
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_onesided_churn),
		cmocka_unit_test(test_rpc_churn),
		cmocka_unit_test(test_recv_buffers_come_back),
		cmocka_unit_test(test_requests_of_a_closed_qp_served),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
