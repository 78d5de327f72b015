/* test_tcp_peer.c -- dead (SIGKILL) and stuck (SIGSTOP) peers of the tcp provider */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_tcp_util.h"

/*
 * The target is a child process; this process streams requests at it and
 * kills or stops it. No call may hang: a dead peer is seen when its socket
 * closes (long before timeout_ms), a stuck one after timeout_ms.
 */

#define REGION (1u << 16)

static void start(struct tt_target *t, uint32_t target_timeout)
{
	struct tt_target_cfg tc = {
		.node = 2, .timeout_ms = target_timeout, .len = REGION,
		.access = DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE |
			  DXL_MR_REMOTE_ATOMIC,
		.fill = 0x33, .post_recvs = true,
	};
	assert_int_equal(tt_target_start(&tc, t), 0);
}

/* keep ~32 requests in flight (a mix, some unsignalled) until `stop` ms */
struct stream {
	int posted, ok, unreachable, flushed, other;
	uint64_t first_err_ms, all_done_ms;
};

static void run_stream(struct dxl_qp *qp, struct dxl_ctx *c,
		       const struct dxl_mr_desc *d, uint8_t *buf, int kill_after,
		       pid_t pid, int sig, struct stream *s, uint64_t *t_sig)
{
	memset(s, 0, sizeof(*s));
	uint64_t end = dxl_now_ms() + 20000;
	int outstanding_sig = 0; /* signalled ones not yet completed */
	bool sent_sig = false;
	while (dxl_now_ms() < end) {
		if (!sent_sig && s->ok >= kill_after) {
			*t_sig = dxl_now_ms();
			kill(pid, sig);
			sent_sig = true;
		}
		if (dxl_qp_state(qp) == DXL_QP_RTS && outstanding_sig < 32) {
			struct dxl_wr w[4];
			int nsig = 0;
			for (int i = 0; i < 4; i++) {
				int k = s->posted + i;
				w[i] = (struct dxl_wr){
					.wr_id = (uint64_t)k,
					.op = k % 3 == 0 ? DXL_WR_WRITE : DXL_WR_READ,
					.local = buf + (k % 64) * 64, .len = 64,
					.remote_addr = d->addr + (uint64_t)(k % 64) * 64,
					.rkey = d->rkey,
					.flags = k % 3 == 0 ? 0 : DXL_WR_SIGNALED,
					.next = i < 3 ? &w[i + 1] : NULL,
				};
				nsig += k % 3 != 0;
			}
			int ret = dxl_qp_post(qp, w, NULL);
			if (ret == 0) {
				s->posted += 4;
				outstanding_sig += nsig;
			} else {
				assert_true(ret == DXL_E_AGAIN || ret == DXL_E_STATE);
			}
		}
		struct dxl_wc wc[16];
		int n = dxl_ctx_poll(c, wc, 16);
		assert_true(n >= 0);
		for (int i = 0; i < n; i++) {
			if (wc[i].status == DXL_WC_SUCCESS) {
				s->ok++;
				outstanding_sig--;
				continue;
			}
			if (!s->first_err_ms)
				s->first_err_ms = dxl_now_ms();
			if (wc[i].status == DXL_WC_PEER_UNREACHABLE) {
				/* only the oldest request gets the cause */
				assert_int_equal(s->unreachable + s->flushed, 0);
				s->unreachable++;
			} else if (wc[i].status == DXL_WC_FLUSHED) {
				s->flushed++;
			} else {
				s->other++;
			}
		}
		if (dxl_qp_state(qp) == DXL_QP_ERR && n == 0) {
			s->all_done_ms = dxl_now_ms();
			return;
		}
		if (n == 0 && sent_sig)
			dxl_ctx_wait(c, 100);
	}
}

static void test_killed_peer(void **state)
{
	struct tt_target t;
	start(&t, 0);
	struct dxl_fabric *f = tt_fabric(1, 5000, 64); /* long timeout on purpose */
	struct dxl_ctx *c;
	struct dxl_qp *qp;
	assert_int_equal(dxl_ctx_new(f, 0, &c), 0);
	assert_int_equal(dxl_qp_connect(c, t.addr, 0, &qp), 0);
	uint8_t *buf = calloc(1, 4096);
	struct stream s;
	uint64_t t_kill = 0;
	run_stream(qp, c, &t.desc, buf, 500, t.pid, SIGKILL, &s, &t_kill);
	int st = tt_target_reap(&t, TT_WAIT_MS);
	assert_true(WIFSIGNALED(st));
	printf("  %d requests posted, %d ok, %d unreachable + %d flushed; "
	       "errors %llu ms after the kill, all done after %llu ms "
	       "(timeout_ms 5000)\n", s.posted, s.ok, s.unreachable, s.flushed,
	       (unsigned long long)(s.first_err_ms - t_kill),
	       (unsigned long long)(s.all_done_ms - t_kill));
	assert_int_equal(dxl_qp_state(qp), DXL_QP_ERR);
	assert_int_equal(s.unreachable, 1);
	assert_int_equal(s.other, 0);
	assert_true(s.all_done_ms > 0);
	/* seen from the socket, not from the 5 s timeout */
	assert_true(s.all_done_ms - t_kill < 4000);
	struct dxl_wr w = {.op = DXL_WR_READ, .local = buf, .len = 8,
			   .remote_addr = t.desc.addr, .rkey = t.desc.rkey};
	assert_int_equal(dxl_qp_post(qp, &w, NULL), DXL_E_STATE);
	/* connecting again fails cleanly */
	struct dxl_qp *q2 = NULL;
	assert_int_equal(dxl_qp_connect(c, t.addr, 0, &q2), DXL_E_UNREACHABLE);
	dxl_fabric_delete(&f);
	free(buf);
}

static void test_stopped_peer(void **state)
{
	struct tt_target t;
	start(&t, 0);
	struct dxl_fabric *f = tt_fabric(1, 300, 64);
	struct dxl_ctx *c;
	struct dxl_qp *qp;
	assert_int_equal(dxl_ctx_new(f, 0, &c), 0);
	assert_int_equal(dxl_qp_connect(c, t.addr, 0, &qp), 0);
	uint8_t *buf = calloc(1, 4096);
	struct stream s;
	uint64_t t_stop = 0;
	run_stream(qp, c, &t.desc, buf, 300, t.pid, SIGSTOP, &s, &t_stop);
	printf("  stopped peer: first error %llu ms after SIGSTOP, all done "
	       "after %llu ms (timeout_ms 300); %d unreachable + %d flushed\n",
	       (unsigned long long)(s.first_err_ms - t_stop),
	       (unsigned long long)(s.all_done_ms - t_stop), s.unreachable,
	       s.flushed);
	assert_int_equal(dxl_qp_state(qp), DXL_QP_ERR);
	assert_int_equal(s.unreachable, 1);
	assert_int_equal(s.other, 0);
	/* not before the timeout: the peer is alive, just not answering */
	assert_true(s.first_err_ms - t_stop >= 250);
	/* a new connection to the stopped peer is bounded by timeout_ms too */
	struct dxl_qp *q2 = NULL;
	assert_int_equal(dxl_qp_connect(c, t.addr, 0, &q2), DXL_E_UNREACHABLE);
	kill(t.pid, SIGCONT);
	kill(t.pid, SIGKILL);
	tt_target_reap(&t, TT_WAIT_MS);
	dxl_fabric_delete(&f);
	free(buf);
}

/* the target's side: its passive QP fails when the initiator goes away */
static void test_initiator_gone(void **state)
{
	struct dxl_fabric *fa = tt_fabric(1, 300, 0), *fb = tt_fabric(2, 300, 0);
	struct dxl_ctx *ca, *cb;
	struct dxl_qp *qp;
	assert_int_equal(dxl_ctx_new(fa, 0, &ca), 0);
	assert_int_equal(dxl_ctx_new(fb, 0, &cb), 0);
	assert_int_equal(dxl_qp_connect(ca, dxl_fabric_addr(fb), 0, &qp), 0);
	uint8_t rb[64];
	assert_int_equal(dxl_ctx_post_recv(cb, rb, sizeof(rb), 0, 1), 0);
	struct dxl_wr w = {.op = DXL_WR_SEND, .local = "q", .len = 1,
			   .flags = DXL_WR_INLINE};
	assert_int_equal(dxl_qp_post(qp, &w, NULL), 0);
	struct dxl_wc wc;
	assert_int_equal(tt_wait_wc(cb, &wc, TT_WAIT_MS), 1);
	struct dxl_qp *pq = wc.qp;
	/* a reply the initiator never reads, then the initiator closes */
	struct dxl_wr r = {.op = DXL_WR_SEND, .local = "r", .len = 1, .wr_id = 9,
			   .flags = DXL_WR_INLINE | DXL_WR_SIGNALED};
	assert_int_equal(dxl_qp_post(pq, &r, NULL), 0);
	dxl_qp_delete(&qp);
	assert_int_equal(tt_wait_wc(cb, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.wr_id, 9);
	assert_int_equal(wc.status, DXL_WC_PEER_UNREACHABLE);
	assert_int_equal(dxl_qp_state(pq), DXL_QP_ERR);
	assert_int_equal(dxl_qp_post(pq, &r, NULL), DXL_E_STATE);
	/* the same with an initiator that does not answer in time */
	assert_int_equal(dxl_qp_connect(ca, dxl_fabric_addr(fb), 0, &qp), 0);
	assert_int_equal(dxl_ctx_post_recv(cb, rb, sizeof(rb), 0, 2), 0);
	assert_int_equal(dxl_qp_post(qp, &w, NULL), 0);
	assert_int_equal(tt_wait_wc(cb, &wc, TT_WAIT_MS), 1);
	pq = wc.qp;
	r.wr_id = 10;
	assert_int_equal(dxl_qp_post(pq, &r, NULL), 0);
	uint64_t t0 = dxl_now_ms();
	assert_int_equal(tt_wait_wc(cb, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.wr_id, 10);
	assert_int_equal(wc.status, DXL_WC_PEER_UNREACHABLE);
	assert_true(dxl_now_ms() - t0 >= 250);
	dxl_qp_delete(&pq); /* deleting the passive QP is fine too */
	dxl_fabric_delete(&fa);
	dxl_fabric_delete(&fb);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_killed_peer),
		cmocka_unit_test(test_stopped_peer),
		cmocka_unit_test(test_initiator_gone),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
