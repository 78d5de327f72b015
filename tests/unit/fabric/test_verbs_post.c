/* test_verbs_post.c -- verbs provider: a chain becomes one ibv_post_send (mocks) */
#include "test_verbs_fake.h"

/*
 * Each test opens a fabric on the fake device (sq_depth 8: the provider
 * signals by itself every 4th unsignalled request), creates ctx 0 and one
 * active QP through the fake rdma_cm, and looks at what reached the fake
 * ibv_post_send.
 */

struct env {
	struct dxl_fabric *f;
	struct dxl_ctx *c;
	struct dxl_qp *qp;
};

static struct env env;

static int setup(void **state)
{
	fk_reset();
	env.f = fk_open(NULL);
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

static struct dxl_wr wr_write(uint64_t id, unsigned flags)
{
	struct dxl_wr w = {.wr_id = id, .op = DXL_WR_WRITE, .flags = flags,
			   .local = buf, .len = 16, .lkey = 0x11,
			   .remote_addr = 0x7000 + id, .rkey = 0x22};
	return w;
}

static bool posted_signaled(int i)
{
	return fk.posted[i].wr.send_flags & IBV_SEND_SIGNALED;
}

/* the provider's wr_id: serial << 32 | seq */
static uint32_t posted_seq(int i)
{
	return (uint32_t)fk.posted[i].wr.wr_id;
}

static void test_chain_is_one_post_send(void **state)
{
	uint64_t *res = &buf[4];
	struct dxl_wr w[5] = {
		{.wr_id = 101, .op = DXL_WR_READ, .flags = DXL_WR_SIGNALED,
		 .local = buf, .len = 32, .lkey = 0xa1, .remote_addr = 0x10000,
		 .rkey = 0xb1},
		{.wr_id = 102, .op = DXL_WR_WRITE, .flags = DXL_WR_INLINE,
		 .local = buf, .len = 40, .lkey = 0xdead, .remote_addr = 0x20000,
		 .rkey = 0xb2},
		{.wr_id = 103, .op = DXL_WR_CAS, .local = res, .len = 8,
		 .lkey = 0xa3, .remote_addr = 0x30008, .rkey = 0xb3,
		 .compare_add = 5, .swap = 9},
		{.wr_id = 104, .op = DXL_WR_FAA, .flags = DXL_WR_SIGNALED,
		 .local = res, .len = 8, .lkey = 0xa4, .remote_addr = 0x40010,
		 .rkey = 0xb4, .compare_add = 3},
		{.wr_id = 105, .op = DXL_WR_SEND, .local = buf, .len = 0,
		 .lkey = 0xa5},
	};
	for (int i = 0; i < 4; i++)
		w[i].next = &w[i + 1];
	struct dxl_wr *bad = NULL;
	assert_int_equal(dxl_qp_post(env.qp, w, &bad), 0);
	assert_null(bad);

	assert_int_equal(fk.post_calls, 1); /* one doorbell */
	assert_int_equal(fk.nposted, 5);
	const struct ibv_send_wr *p0 = &fk.posted[0].wr, *p1 = &fk.posted[1].wr,
				 *p2 = &fk.posted[2].wr, *p3 = &fk.posted[3].wr,
				 *p4 = &fk.posted[4].wr;
	assert_int_equal(p0->opcode, IBV_WR_RDMA_READ);
	assert_int_equal(p0->send_flags, IBV_SEND_SIGNALED);
	assert_int_equal(p0->wr.rdma.remote_addr, 0x10000);
	assert_int_equal(p0->wr.rdma.rkey, 0xb1);
	assert_int_equal(fk.posted[0].sge.addr, (uintptr_t)buf);
	assert_int_equal(fk.posted[0].sge.length, 32);
	assert_int_equal(fk.posted[0].sge.lkey, 0xa1);

	assert_int_equal(p1->opcode, IBV_WR_RDMA_WRITE);
	assert_int_equal(p1->send_flags, IBV_SEND_INLINE); /* unsignalled */
	assert_int_equal(p1->wr.rdma.remote_addr, 0x20000);
	assert_int_equal(p1->wr.rdma.rkey, 0xb2);
	assert_int_equal(fk.posted[1].sge.length, 40);

	assert_int_equal(p2->opcode, IBV_WR_ATOMIC_CMP_AND_SWP);
	assert_int_equal(p2->send_flags, 0);
	assert_int_equal(p2->wr.atomic.remote_addr, 0x30008);
	assert_int_equal(p2->wr.atomic.rkey, 0xb3);
	assert_int_equal(p2->wr.atomic.compare_add, 5);
	assert_int_equal(p2->wr.atomic.swap, 9);
	assert_int_equal(fk.posted[2].sge.addr, (uintptr_t)res);
	assert_int_equal(fk.posted[2].sge.length, 8);
	assert_int_equal(fk.posted[2].sge.lkey, 0xa3);

	assert_int_equal(p3->opcode, IBV_WR_ATOMIC_FETCH_AND_ADD);
	assert_int_equal(p3->send_flags, IBV_SEND_SIGNALED);
	assert_int_equal(p3->wr.atomic.remote_addr, 0x40010);
	assert_int_equal(p3->wr.atomic.rkey, 0xb4);
	assert_int_equal(p3->wr.atomic.compare_add, 3);

	assert_int_equal(p4->opcode, IBV_WR_SEND);
	assert_int_equal(p4->num_sge, 0); /* zero-length SEND */
	assert_int_equal(p4->send_flags, 0);

	/* our own wr_ids: one serial, consecutive sequence numbers */
	for (int i = 0; i < 5; i++) {
		assert_int_equal(posted_seq(i), (uint32_t)i);
		assert_int_equal(fk.posted[i].wr.wr_id >> 32,
				 fk_vqp(env.qp)->serial);
		assert_int_equal(fk.posted[i].wr.wr_id & DXL_VRB_RECV_TAG, 0);
	}
}

/* a misaligned remote atomic goes out as a READ of remote address 0, which
 * every device fails with a remote access error at that place in the queue
 * (rxe would refuse the atomic itself inside ibv_post_send) */
static void test_misaligned_atomic_becomes_failing_read(void **state)
{
	uint64_t *res = &buf[4];
	struct dxl_wr w[3] = {
		{.wr_id = 1, .op = DXL_WR_CAS, .local = res, .len = 8, .lkey = 0xa1,
		 .remote_addr = 0x30004, .rkey = 0xb1, .compare_add = 1, .swap = 2},
		{.wr_id = 2, .op = DXL_WR_FAA, .flags = DXL_WR_SIGNALED, .local = res,
		 .len = 8, .lkey = 0xa2, .remote_addr = 0x40001, .rkey = 0xb2,
		 .compare_add = 3},
		{.wr_id = 3, .op = DXL_WR_CAS, .flags = DXL_WR_SIGNALED, .local = res,
		 .len = 8, .lkey = 0xa3, .remote_addr = 0x50008, .rkey = 0xb3},
	};
	w[0].next = &w[1];
	w[1].next = &w[2];
	assert_int_equal(dxl_qp_post(env.qp, w, NULL), 0);
	assert_int_equal(fk.post_calls, 1);
	assert_int_equal(fk.nposted, 3);
	for (int i = 0; i < 2; i++) {
		const struct ibv_send_wr *p = &fk.posted[i].wr;
		assert_int_equal(p->opcode, IBV_WR_RDMA_READ);
		assert_int_equal(p->wr.rdma.remote_addr, 0);
		assert_int_equal(p->wr.rdma.rkey, w[i].rkey);
		assert_int_equal(fk.posted[i].sge.addr, (uintptr_t)res);
		assert_int_equal(fk.posted[i].sge.length, 8);
		assert_int_equal(fk.posted[i].sge.lkey, w[i].lkey);
	}
	assert_int_equal(fk.posted[0].wr.send_flags, 0);
	assert_int_equal(fk.posted[1].wr.send_flags, IBV_SEND_SIGNALED);
	/* an aligned one is untouched */
	assert_int_equal(fk.posted[2].wr.opcode, IBV_WR_ATOMIC_CMP_AND_SWP);
	assert_int_equal(fk.posted[2].wr.wr.atomic.remote_addr, 0x50008);
}

static void test_auto_signal_every_half_depth(void **state)
{
	/* sq_depth 8: among unsignalled requests, the 4th and 8th are
	 * signalled by the provider */
	for (int i = 0; i < 8; i++) {
		struct dxl_wr w = wr_write((uint64_t)i, 0);
		assert_int_equal(dxl_qp_post(env.qp, &w, NULL), 0);
		assert_int_equal(fk.nposted, 1);
		assert_int_equal(posted_signaled(0), i == 3 || i == 7);
	}
	assert_int_equal(fk.post_calls, 8);

	/* a user-signalled request restarts the count */
	dxl_fabric_delete(&env.f);
	setup(state);
	struct dxl_wr a = wr_write(1, 0), b = wr_write(2, DXL_WR_SIGNALED),
		      c = wr_write(3, 0), d = wr_write(4, 0), e = wr_write(5, 0),
		      g = wr_write(6, 0);
	a.next = &b;
	b.next = &c;
	c.next = &d;
	d.next = &e;
	e.next = &g;
	assert_int_equal(dxl_qp_post(env.qp, &a, NULL), 0);
	assert_int_equal(fk.nposted, 6);
	bool want[6] = {false, true, false, false, false, true};
	for (int i = 0; i < 6; i++)
		assert_int_equal(posted_signaled(i), want[i]);
}

static void test_full_queue_is_again_and_posts_nothing(void **state)
{
	struct dxl_wr w[8];
	for (int i = 0; i < 8; i++) {
		w[i] = wr_write((uint64_t)i, 0);
		w[i].next = i < 7 ? &w[i + 1] : NULL;
	}
	assert_int_equal(dxl_qp_post(env.qp, w, NULL), 0);
	assert_int_equal(fk.nposted, 8);
	assert_true(posted_signaled(3));
	assert_true(posted_signaled(7));
	uint64_t sig3 = fk.posted[3].wr.wr_id;

	struct dxl_wr x = wr_write(50, DXL_WR_SIGNALED);
	struct dxl_wr *bad = NULL;
	int calls = fk.post_calls;
	assert_int_equal(dxl_qp_post(env.qp, &x, &bad), DXL_E_AGAIN);
	assert_ptr_equal(bad, &x);
	assert_int_equal(fk.post_calls, calls); /* nothing posted */

	/* the provider's own signal at seq 3 completes: slots 0..3 are
	 * free, and the completion is not the user's */
	fk_cqe(sig3, IBV_WC_SUCCESS, fk_vqp(env.qp)->qpn, 16);
	struct dxl_wc wc[4];
	assert_int_equal(dxl_ctx_poll(env.c, wc, 4), 0);
	struct dxl_wr y[5];
	for (int i = 0; i < 5; i++) {
		y[i] = wr_write(60 + (uint64_t)i, 0);
		y[i].next = i < 4 ? &y[i + 1] : NULL;
	}
	assert_int_equal(dxl_qp_post(env.qp, y, &bad), DXL_E_AGAIN); /* 4 free */
	assert_int_equal(fk.post_calls, calls);
	y[3].next = NULL;
	assert_int_equal(dxl_qp_post(env.qp, y, &bad), 0);
	assert_int_equal(fk.post_calls, calls + 1);
	assert_int_equal(fk.nposted, 4);
	assert_int_equal(posted_seq(0), 8);
}

static void test_stuck_run_gets_a_flush(void **state)
{
	/* 3 unsignalled requests: no completion will ever free them, so a
	 * chain of 6 (> 8 - 3) could never fit by polling alone */
	struct dxl_wr w[6];
	for (int i = 0; i < 3; i++) {
		w[i] = wr_write((uint64_t)i, 0);
		assert_int_equal(dxl_qp_post(env.qp, &w[i], NULL), 0);
		assert_false(posted_signaled(0));
	}
	for (int i = 0; i < 6; i++) {
		w[i] = wr_write(10 + (uint64_t)i, 0);
		w[i].next = i < 5 ? &w[i + 1] : NULL;
	}
	int calls = fk.post_calls;
	assert_int_equal(dxl_qp_post(env.qp, w, NULL), DXL_E_AGAIN);
	/* ...but the provider posted one zero-length signalled WRITE */
	assert_int_equal(fk.post_calls, calls + 1);
	assert_int_equal(fk.nposted, 1);
	const struct ibv_send_wr *fl = &fk.posted[0].wr;
	assert_int_equal(fl->opcode, IBV_WR_RDMA_WRITE);
	assert_int_equal(fl->send_flags, IBV_SEND_SIGNALED);
	assert_int_equal(fl->num_sge, 0);
	assert_int_equal((uint32_t)fl->wr_id, 3);

	/* its completion frees all four slots and is not reported */
	fk_cqe(fl->wr_id, IBV_WC_SUCCESS, fk_vqp(env.qp)->qpn, 0);
	struct dxl_wc wc[2];
	assert_int_equal(dxl_ctx_poll(env.c, wc, 2), 0);
	assert_int_equal(dxl_qp_post(env.qp, w, NULL), 0);
	assert_int_equal(fk.nposted, 6);
	assert_int_equal(posted_seq(0), 4);
}

static void test_chain_longer_than_depth_is_inval(void **state)
{
	struct dxl_wr w[9];
	for (int i = 0; i < 9; i++) {
		w[i] = wr_write((uint64_t)i, 0);
		w[i].next = i < 8 ? &w[i + 1] : NULL;
	}
	assert_int_equal(dxl_qp_post(env.qp, w, NULL), DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "sq_depth"));
	assert_int_equal(fk.post_calls, 0);
	w[7].next = NULL; /* exactly sq_depth is fine */
	assert_int_equal(dxl_qp_post(env.qp, w, NULL), 0);
	assert_int_equal(fk.nposted, 8);
}

static void test_device_refusal_midway(void **state)
{
	/* the device takes two requests, refuses the third: verbs cannot
	 * take the two back, so they count as posted */
	struct dxl_wr w[4];
	for (int i = 0; i < 4; i++) {
		w[i] = wr_write((uint64_t)i, 0);
		w[i].next = i < 3 ? &w[i + 1] : NULL;
	}
	fk.post_fail_at = 2;
	fk.post_ret = EINVAL;
	struct dxl_wr *bad = NULL;
	assert_int_equal(dxl_qp_post(env.qp, w, &bad), DXL_E_IO);
	assert_ptr_equal(bad, &w[2]);
	assert_non_null(strstr(dxl_errmsg(), "2 posted"));
	assert_int_equal(fk_vqp(env.qp)->posted, 2);
	assert_int_equal(fk_vqp(env.qp)->run, 2);
	fk.post_fail_at = -1;
	struct dxl_wr x = wr_write(9, 0);
	assert_int_equal(dxl_qp_post(env.qp, &x, NULL), 0);
	assert_int_equal(posted_seq(0), 2);
	assert_false(posted_signaled(0)); /* third of the run */
}

static void test_error_state_refuses_posts(void **state)
{
	struct dxl_wr w = wr_write(1, DXL_WR_SIGNALED);
	assert_int_equal(dxl_qp_post(env.qp, &w, NULL), 0);
	fk_cqe(fk.posted[0].wr.wr_id, IBV_WC_REM_ACCESS_ERR,
	       fk_vqp(env.qp)->qpn, 0);
	struct dxl_wc wc;
	assert_int_equal(dxl_ctx_poll(env.c, &wc, 1), 1);
	assert_int_equal(wc.status, DXL_WC_REM_ACCESS_ERR);
	assert_int_equal(dxl_qp_state(env.qp), DXL_QP_ERR);
	int calls = fk.post_calls;
	assert_int_equal(dxl_qp_post(env.qp, &w, NULL), DXL_E_STATE);
	assert_int_equal(fk.post_calls, calls);
}

static void test_no_atomics_device(void **state)
{
	dxl_fabric_delete(&env.f);
	fk_reset();
	fk.attr.atomic_cap = IBV_ATOMIC_NONE;
	env.f = fk_open(NULL);
	assert_int_equal(dxl_ctx_new(env.f, 0, &env.c), 0);
	env.qp = fk_connect(env.c, 1);
	/* no atomic access on the QP either */
	const struct fk_mod *m = fk_find_mod(0, IBV_QPS_INIT);
	assert_non_null(m);
	assert_int_equal(m->attr.qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC, 0);
	struct dxl_wr w = {.wr_id = 1, .op = DXL_WR_FAA, .local = &buf[0],
			   .len = 8, .compare_add = 1};
	struct dxl_wr *bad = NULL;
	assert_int_equal(dxl_qp_post(env.qp, &w, &bad), DXL_E_NOTSUP);
	assert_ptr_equal(bad, &w);
	assert_int_equal(fk.post_calls, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_chain_is_one_post_send, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_misaligned_atomic_becomes_failing_read,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_auto_signal_every_half_depth,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_full_queue_is_again_and_posts_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stuck_run_gets_a_flush, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_chain_longer_than_depth_is_inval,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_device_refusal_midway, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_error_state_refuses_posts,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_atomics_device, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
