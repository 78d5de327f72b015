/* test_verbs_poll.c -- verbs provider: completions, receives, waiting (mocks) */
#include <poll.h>

#include "test_verbs_fake.h"

struct env {
	struct dxl_fabric *f;
	struct dxl_ctx *c;
	struct dxl_qp *qp;
};

static struct env env;

static int setup(void **state)
{
	fk_reset();
	env.f = fk_open(NULL); /* sq_depth 8, srq_depth 4 */
	assert_int_equal(dxl_ctx_new(env.f, 0, &env.c), 0);
	env.qp = fk_connect(env.c, 1);
	return 0;
}

static int teardown(void **state)
{
	dxl_fabric_delete(&env.f);
	assert_int_equal(fk.ids_live, 0);
	assert_int_equal(fk.chans_live, 0);
	return 0;
}

static uint64_t buf[16];

static uint32_t qpn(struct dxl_qp *qp)
{
	return fk_vqp(qp)->qpn;
}

/* post one request; returns the provider's wr_id of it */
static uint64_t post1(struct dxl_qp *qp, enum dxl_wr_opcode op, uint64_t id,
		      unsigned flags)
{
	struct dxl_wr w = {.wr_id = id, .op = op, .flags = flags,
			   .local = buf, .len = op == DXL_WR_CAS ||
						      op == DXL_WR_FAA ? 8 : 24,
			   .lkey = 1, .remote_addr = 0x1000, .rkey = 2};
	assert_int_equal(dxl_qp_post(qp, &w, NULL), 0);
	assert_int_equal(fk.nposted, 1);
	return fk.posted[0].wr.wr_id;
}

static void test_status_mapping(void **state)
{
	static const struct {
		enum ibv_wc_status in;
		enum dxl_wc_opcode op;
		enum dxl_wc_status out;
	} t[] = {
		{IBV_WC_SUCCESS, DXL_WC_READ, DXL_WC_SUCCESS},
		{IBV_WC_REM_ACCESS_ERR, DXL_WC_WRITE, DXL_WC_REM_ACCESS_ERR},
		{IBV_WC_REM_INV_REQ_ERR, DXL_WC_READ, DXL_WC_REM_ACCESS_ERR},
		{IBV_WC_REM_INV_REQ_ERR, DXL_WC_CAS, DXL_WC_REM_ACCESS_ERR},
		/* a SEND too large for the receive buffer */
		{IBV_WC_REM_INV_REQ_ERR, DXL_WC_SEND, DXL_WC_REM_OP_ERR},
		{IBV_WC_RETRY_EXC_ERR, DXL_WC_WRITE, DXL_WC_PEER_UNREACHABLE},
		{IBV_WC_RNR_RETRY_EXC_ERR, DXL_WC_SEND, DXL_WC_PEER_UNREACHABLE},
		{IBV_WC_RESP_TIMEOUT_ERR, DXL_WC_READ, DXL_WC_PEER_UNREACHABLE},
		{IBV_WC_WR_FLUSH_ERR, DXL_WC_READ, DXL_WC_FLUSHED},
		{IBV_WC_LOC_LEN_ERR, DXL_WC_RECV, DXL_WC_LOCAL_ERR},
		{IBV_WC_LOC_PROT_ERR, DXL_WC_WRITE, DXL_WC_LOCAL_ERR},
		{IBV_WC_LOC_QP_OP_ERR, DXL_WC_WRITE, DXL_WC_LOCAL_ERR},
		{IBV_WC_LOC_ACCESS_ERR, DXL_WC_READ, DXL_WC_LOCAL_ERR},
		{IBV_WC_GENERAL_ERR, DXL_WC_READ, DXL_WC_LOCAL_ERR},
		{IBV_WC_REM_OP_ERR, DXL_WC_SEND, DXL_WC_REM_OP_ERR},
		{IBV_WC_REM_ABORT_ERR, DXL_WC_SEND, DXL_WC_REM_OP_ERR},
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		assert_int_equal(dxl_vrb_wc_status(t[i].in, t[i].op), t[i].out);
}

static void test_each_error_end_to_end(void **state)
{
	/* through poll: status, opcode, wr_id and the QP state */
	static const struct {
		enum ibv_wc_status in;
		enum dxl_wr_opcode op;
		enum dxl_wc_opcode wop;
		enum dxl_wc_status out;
	} t[] = {
		{IBV_WC_REM_ACCESS_ERR, DXL_WR_READ, DXL_WC_READ,
		 DXL_WC_REM_ACCESS_ERR},
		{IBV_WC_REM_INV_REQ_ERR, DXL_WR_CAS, DXL_WC_CAS,
		 DXL_WC_REM_ACCESS_ERR},
		{IBV_WC_REM_INV_REQ_ERR, DXL_WR_SEND, DXL_WC_SEND,
		 DXL_WC_REM_OP_ERR},
		{IBV_WC_RETRY_EXC_ERR, DXL_WR_WRITE, DXL_WC_WRITE,
		 DXL_WC_PEER_UNREACHABLE},
		{IBV_WC_RNR_RETRY_EXC_ERR, DXL_WR_SEND, DXL_WC_SEND,
		 DXL_WC_PEER_UNREACHABLE},
		{IBV_WC_WR_FLUSH_ERR, DXL_WR_FAA, DXL_WC_FAA, DXL_WC_FLUSHED},
		{IBV_WC_LOC_LEN_ERR, DXL_WR_READ, DXL_WC_READ, DXL_WC_LOCAL_ERR},
		{IBV_WC_LOC_PROT_ERR, DXL_WR_WRITE, DXL_WC_WRITE,
		 DXL_WC_LOCAL_ERR},
		{IBV_WC_REM_OP_ERR, DXL_WR_SEND, DXL_WC_SEND, DXL_WC_REM_OP_ERR},
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct dxl_qp *qp = fk_connect(env.c, 1);
		/* unsignalled: a failure still produces a completion */
		uint64_t id = post1(qp, t[i].op, 500 + i, 0);
		fk_cqe(id, t[i].in, qpn(qp), 0);
		struct dxl_wc wc;
		memset(&wc, 0xff, sizeof(wc));
		assert_int_equal(dxl_ctx_poll(env.c, &wc, 1), 1);
		assert_int_equal(wc.wr_id, 500 + i);
		assert_int_equal(wc.status, t[i].out);
		assert_int_equal(wc.opcode, t[i].wop);
		assert_ptr_equal(wc.qp, qp);
		assert_int_equal(dxl_qp_state(qp), DXL_QP_ERR);
		dxl_qp_delete(&qp);
	}
}

static void test_success_and_internal_filtering(void **state)
{
	/* READ signalled, 2 WRITEs unsignalled, then the auto-signalled 4th
	 * (unsignalled by the user): only the READ is reported */
	uint64_t r = post1(env.qp, DXL_WR_READ, 11, DXL_WR_SIGNALED);
	uint64_t w1 = post1(env.qp, DXL_WR_WRITE, 12, 0);
	uint64_t w2 = post1(env.qp, DXL_WR_WRITE, 13, 0);
	uint64_t w3 = post1(env.qp, DXL_WR_WRITE, 14, 0);
	assert_false(fk.posted[0].wr.send_flags & IBV_SEND_SIGNALED);
	uint64_t w4 = post1(env.qp, DXL_WR_WRITE, 15, 0);
	assert_true(fk.posted[0].wr.send_flags & IBV_SEND_SIGNALED);
	(void)w1;
	(void)w2;
	(void)w3;
	uint64_t w5 = post1(env.qp, DXL_WR_FAA, 16, 0);
	uint64_t w6 = post1(env.qp, DXL_WR_WRITE, 17, 0);
	uint64_t w7 = post1(env.qp, DXL_WR_WRITE, 18, 0);
	/* seq 0 READ (sig), 1-3 run, 4 = w4 run 4 -> auto-signalled */
	assert_int_equal((uint32_t)w4, 4);
	(void)w5;
	(void)w6;
	(void)w7;

	fk_cqe(r, IBV_WC_SUCCESS, qpn(env.qp), 24);
	fk_cqe(w4, IBV_WC_SUCCESS, qpn(env.qp), 0);
	struct dxl_wc wc[4];
	assert_int_equal(dxl_ctx_poll(env.c, wc, 4), 1);
	assert_int_equal(wc[0].wr_id, 11);
	assert_int_equal(wc[0].status, DXL_WC_SUCCESS);
	assert_int_equal(wc[0].opcode, DXL_WC_READ);
	assert_int_equal(wc[0].byte_len, 24);
	assert_ptr_equal(wc[0].qp, env.qp);
	/* five slots freed by the two completions: 8 - 3 outstanding */
	struct dxl_vrb_qp *q = fk_vqp(env.qp);
	assert_int_equal(q->posted - q->done, 3);
}

static void test_failed_unsignalled_then_flushes(void **state)
{
	uint64_t a = post1(env.qp, DXL_WR_WRITE, 21, 0);
	uint64_t b = post1(env.qp, DXL_WR_WRITE, 22, 0);
	uint64_t c = post1(env.qp, DXL_WR_READ, 23, DXL_WR_SIGNALED);
	(void)a;
	fk_cqe(b, IBV_WC_REM_ACCESS_ERR, qpn(env.qp), 0);
	fk_cqe(c, IBV_WC_WR_FLUSH_ERR, qpn(env.qp), 0);
	struct dxl_wc wc[4];
	assert_int_equal(dxl_ctx_poll(env.c, wc, 4), 2);
	assert_int_equal(wc[0].wr_id, 22);
	assert_int_equal(wc[0].status, DXL_WC_REM_ACCESS_ERR);
	assert_int_equal(wc[1].wr_id, 23);
	assert_int_equal(wc[1].status, DXL_WC_FLUSHED);
	assert_int_equal(dxl_qp_state(env.qp), DXL_QP_ERR);
}

static void test_internal_flush_failure_passes_cause(void **state)
{
	/* a run of 3 unsignalled, a chain that cannot fit: the provider's
	 * flush WRITE is the one that meets the dead peer */
	uint64_t w[3];
	for (int i = 0; i < 3; i++)
		w[i] = post1(env.qp, DXL_WR_WRITE, 30 + (uint64_t)i, 0);
	struct dxl_wr ch[6];
	for (int i = 0; i < 6; i++) {
		ch[i] = (struct dxl_wr){.wr_id = 40 + (uint64_t)i,
					.op = DXL_WR_WRITE, .local = buf,
					.len = 8, .lkey = 1, .rkey = 2};
		ch[i].next = i < 5 ? &ch[i + 1] : NULL;
	}
	assert_int_equal(dxl_qp_post(env.qp, ch, NULL), DXL_E_AGAIN);
	uint64_t flush = fk.posted[0].wr.wr_id;
	uint64_t after = post1(env.qp, DXL_WR_READ, 50, DXL_WR_SIGNALED);
	(void)w;
	fk_cqe(flush, IBV_WC_RETRY_EXC_ERR, qpn(env.qp), 0);
	fk_cqe(after, IBV_WC_WR_FLUSH_ERR, qpn(env.qp), 0);
	struct dxl_wc wc[4];
	assert_int_equal(dxl_ctx_poll(env.c, wc, 4), 1);
	assert_int_equal(wc[0].wr_id, 50);
	/* the user learns why, not just "flushed" */
	assert_int_equal(wc[0].status, DXL_WC_PEER_UNREACHABLE);
}

static void test_stale_completions_dropped(void **state)
{
	uint64_t id = post1(env.qp, DXL_WR_READ, 61, DXL_WR_SIGNALED);
	/* same QP number, other serial (a deleted QP's) */
	fk_cqe(id ^ (1ull << 40), IBV_WC_SUCCESS, qpn(env.qp), 24);
	/* unknown QP number */
	fk_cqe(id, IBV_WC_SUCCESS, 999, 24);
	/* a seq that is not outstanding */
	fk_cqe(id + 5, IBV_WC_SUCCESS, qpn(env.qp), 24);
	fk_cqe(id, IBV_WC_SUCCESS, qpn(env.qp), 24);
	struct dxl_wc wc[4];
	assert_int_equal(dxl_ctx_poll(env.c, wc, 4), 1);
	assert_int_equal(wc[0].wr_id, 61);
}

static void test_poll_respects_n(void **state)
{
	uint64_t a = post1(env.qp, DXL_WR_READ, 1, DXL_WR_SIGNALED);
	uint64_t b = post1(env.qp, DXL_WR_READ, 2, DXL_WR_SIGNALED);
	uint64_t c = post1(env.qp, DXL_WR_READ, 3, DXL_WR_SIGNALED);
	fk_cqe(a, IBV_WC_SUCCESS, qpn(env.qp), 24);
	fk_cqe(b, IBV_WC_SUCCESS, qpn(env.qp), 24);
	fk_cqe(c, IBV_WC_SUCCESS, qpn(env.qp), 24);
	struct dxl_wc wc[3];
	assert_int_equal(dxl_ctx_poll(env.c, wc, 2), 2);
	assert_int_equal(wc[0].wr_id, 1);
	assert_int_equal(wc[1].wr_id, 2);
	assert_int_equal(dxl_ctx_poll(env.c, wc, 2), 1);
	assert_int_equal(wc[0].wr_id, 3);
	assert_int_equal(dxl_ctx_poll(env.c, wc, 2), 0);
}

static void test_recv_path(void **state)
{
	char rb[4][64];
	for (int i = 0; i < 4; i++)
		assert_int_equal(dxl_ctx_post_recv(env.c, rb[i], 64, 0x77,
						   900 + (uint64_t)i),
				 0);
	assert_int_equal(fk.recv_calls, 4);
	assert_int_equal(fk.recv_sge.addr, (uintptr_t)rb[3]);
	assert_int_equal(fk.recv_sge.length, 64);
	assert_int_equal(fk.recv_sge.lkey, 0x77);
	uint64_t tag3 = fk.recv_wr.wr_id;
	assert_true(tag3 & DXL_VRB_RECV_TAG);
	/* srq_depth (4) posted: the fifth is refused without a call */
	assert_int_equal(dxl_ctx_post_recv(env.c, rb[0], 64, 0x77, 999),
			 DXL_E_AGAIN);
	assert_int_equal(fk.recv_calls, 4);

	fk_cqe(tag3, IBV_WC_SUCCESS, qpn(env.qp), 17);
	struct dxl_wc wc;
	assert_int_equal(dxl_ctx_poll(env.c, &wc, 1), 1);
	assert_int_equal(wc.wr_id, 903);
	assert_int_equal(wc.opcode, DXL_WC_RECV);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 17);
	assert_ptr_equal(wc.qp, env.qp);
	/* that buffer's slot is free again */
	assert_int_equal(dxl_ctx_post_recv(env.c, rb[3], 64, 0x77, 913), 0);
	assert_int_equal(fk.recv_wr.wr_id, tag3);

	/* a receive buffer too small: local error, the QP is in error */
	fk_cqe(tag3, IBV_WC_LOC_LEN_ERR, qpn(env.qp), 0);
	assert_int_equal(dxl_ctx_poll(env.c, &wc, 1), 1);
	assert_int_equal(wc.wr_id, 913);
	assert_int_equal(wc.status, DXL_WC_LOCAL_ERR);
	assert_int_equal(wc.opcode, DXL_WC_RECV);
	assert_int_equal(dxl_qp_state(env.qp), DXL_QP_ERR);

	/* the device refuses a receive: the slot is not lost */
	fk.recv_ret = ENOMEM;
	assert_int_equal(dxl_ctx_post_recv(env.c, rb[3], 64, 0x77, 914),
			 DXL_E_AGAIN);
	fk.recv_ret = 0;
	assert_int_equal(dxl_ctx_post_recv(env.c, rb[3], 64, 0x77, 914), 0);
}

static void test_recv_on_deleted_qp(void **state)
{
	char rb[64];
	assert_int_equal(dxl_ctx_post_recv(env.c, rb, 64, 1, 77), 0);
	uint64_t tag = fk.recv_wr.wr_id;
	uint32_t n = qpn(env.qp);
	dxl_qp_delete(&env.qp);
	assert_true(fk.qp_destroyed[0]);
	assert_int_equal(fk.disconnect_calls, 1);
	/* the message came in before the delete: the buffer comes back */
	fk_cqe(tag, IBV_WC_SUCCESS, n, 10);
	struct dxl_wc wc;
	assert_int_equal(dxl_ctx_poll(env.c, &wc, 1), 1);
	assert_int_equal(wc.wr_id, 77);
	assert_int_equal(wc.status, DXL_WC_FLUSHED);
	assert_null(wc.qp);
}

/*
 * A message for a QP is in the CQ when the QP is deleted, and the next QP
 * created gets the deleted one's number (devices reuse them). The message
 * must come back as the buffer's FLUSHED completion with no QP, never as a
 * message of the new QP (receive completions carry no serial: the CQ is
 * drained when a QP is destroyed).
 */
static void test_recv_of_deleted_qp_not_given_to_reuser(void **state)
{
	char rb[2][64];
	assert_int_equal(dxl_ctx_post_recv(env.c, rb[0], 64, 1, 77), 0);
	uint64_t tag = fk.recv_wr.wr_id;
	assert_int_equal(dxl_ctx_post_recv(env.c, rb[1], 64, 1, 78), 0);
	uint64_t tag2 = fk.recv_wr.wr_id;
	uint32_t n = qpn(env.qp);
	fk_cqe(tag, IBV_WC_SUCCESS, n, 10); /* arrived, not polled yet */
	dxl_qp_delete(&env.qp);
	fk.next_qpn = n;
	struct dxl_qp *q2 = fk_connect(env.c, 1);
	assert_int_equal(qpn(q2), n);
	fk_cqe(tag2, IBV_WC_SUCCESS, n, 11); /* really the new QP's */
	struct dxl_wc wc[2];
	assert_int_equal(dxl_ctx_poll(env.c, wc, 2), 2);
	assert_int_equal(wc[0].wr_id, 77);
	assert_int_equal(wc[0].status, DXL_WC_FLUSHED);
	assert_int_equal(wc[0].opcode, DXL_WC_RECV);
	assert_int_equal(wc[0].byte_len, 0);
	assert_null(wc[0].qp);
	assert_int_equal(wc[1].wr_id, 78);
	assert_int_equal(wc[1].status, DXL_WC_SUCCESS);
	assert_int_equal(wc[1].byte_len, 11);
	assert_ptr_equal(wc[1].qp, q2);
	dxl_qp_delete(&q2);
}

static void test_wait(void **state)
{
	/* something ready: no blocking, no arming */
	uint64_t id = post1(env.qp, DXL_WR_READ, 5, DXL_WR_SIGNALED);
	fk_cqe(id, IBV_WC_SUCCESS, qpn(env.qp), 24);
	assert_int_equal(dxl_ctx_wait(env.c, 1000), 0);
	assert_int_equal(fk.notify_calls, 0);
	struct dxl_wc wc;
	assert_int_equal(dxl_ctx_poll(env.c, &wc, 1), 1); /* from the stash */
	assert_int_equal(wc.wr_id, 5);

	/* nothing: check only, then a short block that arms the CQ */
	assert_int_equal(dxl_ctx_wait(env.c, 0), DXL_E_TIMEDOUT);
	assert_int_equal(fk.notify_calls, 0);
	assert_int_equal(dxl_ctx_wait(env.c, 20), DXL_E_TIMEDOUT);
	assert_int_equal(fk.notify_calls, 1);
	assert_true(fk.armed);

	/* a completion arrives while blocked: an event on the channel */
	id = post1(env.qp, DXL_WR_READ, 6, DXL_WR_SIGNALED);
	fk_cqe(id, IBV_WC_SUCCESS, qpn(env.qp), 24);
	fk.hold_until_event = true;
	uint64_t one = 1;
	assert_int_equal(write(fk.ch.fd, &one, sizeof(one)), sizeof(one));
	assert_int_equal(dxl_ctx_wait(env.c, -1), 0);
	assert_int_equal(fk.notify_calls, 1); /* still armed from before */
	assert_false(fk_vqp(env.qp)->vc->armed); /* the event took it */
	assert_int_equal(dxl_ctx_poll(env.c, &wc, 1), 1);
	assert_int_equal(wc.wr_id, 6);
	/* the event is acknowledged by ctx_delete at the latest */
	dxl_ctx_delete(&env.c);
	assert_int_equal(fk.acked_events, 1);
}

static void test_wait_race_after_arming(void **state)
{
	/* the completion lands between the spin and the arming: the re-poll
	 * after ibv_req_notify_cq must find it (no event will come) */
	uint64_t id = post1(env.qp, DXL_WR_READ, 7, DXL_WR_SIGNALED);
	fk_cqe(id, IBV_WC_SUCCESS, qpn(env.qp), 24);
	fk.cqes_on_arm = true;
	assert_int_equal(dxl_ctx_wait(env.c, 5000), 0);
	assert_int_equal(fk.notify_calls, 1);
	struct dxl_wc wc;
	assert_int_equal(dxl_ctx_poll(env.c, &wc, 1), 1);
	assert_int_equal(wc.wr_id, 7);
}

static void test_delete_drops_stashed(void **state)
{
	struct dxl_qp *qp2 = fk_connect(env.c, 2);
	uint64_t a = post1(env.qp, DXL_WR_READ, 1, DXL_WR_SIGNALED);
	uint64_t b = post1(qp2, DXL_WR_READ, 2, DXL_WR_SIGNALED);
	fk_cqe(a, IBV_WC_SUCCESS, qpn(env.qp), 24);
	fk_cqe(b, IBV_WC_SUCCESS, qpn(qp2), 24);
	assert_int_equal(dxl_ctx_wait(env.c, 0), 0); /* both stashed */
	dxl_qp_delete(&env.qp);
	struct dxl_wc wc[2];
	assert_int_equal(dxl_ctx_poll(env.c, wc, 2), 1);
	assert_int_equal(wc[0].wr_id, 2);
	assert_ptr_equal(wc[0].qp, qp2);
}

/*
 * IB spec 10.3.1: a QP attached to an SRQ may hold receive WQEs it took
 * from the SRQ. Deleting it: move it to ERR (the device flushes what it
 * holds to the CQ), wait for the Last WQE Reached event, then destroy and
 * drain: the buffer comes back (FLUSHED, no QP) and the SRQ keeps its
 * size. Here the QP holds one receive WQE and the event comes 50 ms after
 * the move to ERR (from another thread, as the CM thread delivers it).
 */
static void test_delete_waits_for_last_wqe(void **state)
{
	char rb[64];
	assert_int_equal(dxl_ctx_post_recv(env.c, rb, 64, 1, 77), 0);
	int i = fk_qp_index(env.qp);
	fk.held_recv[i] = fk.recv_wr.wr_id; /* the QP took it from the SRQ */
	fk.lw_mode = FK_LW_LATER;
	fk.lw_delay_ms = 50;
	uint64_t t0 = dxl_now_ms();
	dxl_qp_delete(&env.qp);
	uint64_t took = dxl_now_ms() - t0;
	if (fk.lw_thread_started)
		pthread_join(fk.lw_thread, NULL);
	int err = atomic_load(&fk.err_step[i]), lw = atomic_load(&fk.lw_step[i]),
	    de = atomic_load(&fk.destroy_step[i]);
	print_message("  steps: to ERR %d, Last WQE Reached %d, destroyed %d; delete took "
		      "%llu ms\n", err, lw, de, (unsigned long long)took);
	assert_true(err > 0);  /* moved to the error state */
	assert_true(lw > err); /* (the fake sends the event only after it) */
	assert_true(de > lw);  /* destroyed only after the event */
	assert_true(took >= 40);
	struct dxl_wc wc;
	assert_int_equal(dxl_ctx_poll(env.c, &wc, 1), 1);
	assert_int_equal(wc.wr_id, 77);
	assert_int_equal(wc.opcode, DXL_WC_RECV);
	assert_int_equal(wc.status, DXL_WC_FLUSHED);
	assert_null(wc.qp);
	/* the slot is free again: the SRQ did not shrink */
	assert_int_equal(dxl_ctx_post_recv(env.c, rb, 64, 1, 78), 0);
}

/* a device that never sends the event: the delete is bounded by the
 * fabric's timeout (at most 500 ms) once, then waits only a grace period
 * (every fabric of the process: the device is remembered by name, so this
 * test runs after every other one that waits for the event) */
static void test_delete_without_last_wqe_is_bounded(void **state)
{
	fk.lw_mode = FK_LW_NEVER;
	struct dxl_qp *q2 = fk_connect(env.c, 2);
	uint32_t tmo = DXL_MIN(dxl_fabric_cfg(env.f)->timeout_ms, 500u);
	uint64_t t0 = dxl_now_ms();
	dxl_qp_delete(&env.qp);
	uint64_t first = dxl_now_ms() - t0;
	t0 = dxl_now_ms();
	dxl_qp_delete(&q2);
	uint64_t second = dxl_now_ms() - t0;
	print_message("  no event: first delete %llu ms (timeout %u), second %llu ms\n",
		      (unsigned long long)first, tmo, (unsigned long long)second);
	assert_true(first >= tmo && first < tmo + 2000);
	assert_true(second < 500);
	assert_true(fk.qp_destroyed[0] && fk.qp_destroyed[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status_mapping),
		cmocka_unit_test_setup_teardown(test_each_error_end_to_end, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_success_and_internal_filtering,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_unsignalled_then_flushes,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_internal_flush_failure_passes_cause, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stale_completions_dropped,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_poll_respects_n, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_recv_path, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recv_on_deleted_qp, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_recv_of_deleted_qp_not_given_to_reuser, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait_race_after_arming, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_delete_drops_stashed, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_delete_waits_for_last_wqe, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_delete_without_last_wqe_is_bounded,
						setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
