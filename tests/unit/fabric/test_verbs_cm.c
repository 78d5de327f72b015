/* test_verbs_cm.c -- verbs provider: connect, accept, reject, disconnect (mocks) */
#include <sched.h>

#include "test_verbs_fake.h"

struct env {
	struct dxl_fabric *f;
	struct dxl_ctx *c;
};

static struct env env;

static int setup(void **state)
{
	fk_reset();
	env.f = fk_open(NULL); /* node 3, sq_depth 8, timeout 1000 ms */
	assert_int_equal(dxl_ctx_new(env.f, 0, &env.c), 0);
	return 0;
}

static int teardown(void **state)
{
	dxl_fabric_delete(&env.f);
	assert_int_equal(fk.ids_live, 0);
	assert_int_equal(fk.chans_live, 0);
	for (int i = 0; i < fk.nqp; i++)
		assert_true(fk.qp_destroyed[i]);
	return 0;
}

static struct dxl_vrb_fabric *vfab(void)
{
	return env.f->prov;
}

static void test_active_connect(void **state)
{
	struct dxl_qp *qp = fk_connect(env.c, 5);
	struct dxl_vrb_qp *q = fk_vqp(qp);
	struct dxl_vrb_fabric *vf = vfab();

	/* resolved from the listen IP (same device), to the peer */
	assert_true(fk.resolve_src_set);
	const struct sockaddr_in *src = (const void *)&fk.resolve_src;
	const struct sockaddr_in *dst = (const void *)&fk.resolve_dst;
	assert_int_equal(src->sin_addr.s_addr, inet_addr("192.0.2.1"));
	assert_int_equal(src->sin_port, 0);
	assert_int_equal(dst->sin_addr.s_addr, inet_addr("192.0.2.9"));
	assert_int_equal(ntohs(dst->sin_port), 18515);

	/* the QP: RC on the ctx's CQ and SRQ, selective signalling */
	assert_int_equal(fk.nqp, 1);
	const struct ibv_qp_init_attr *a = &fk.qp_attr[0];
	struct dxl_vrb_ctx *vc = (struct dxl_vrb_ctx *)env.c;
	assert_int_equal(a->qp_type, IBV_QPT_RC);
	assert_ptr_equal(a->send_cq, vc->cq);
	assert_ptr_equal(a->recv_cq, vc->cq);
	assert_ptr_equal(a->srq, vc->srq);
	assert_int_equal(a->sq_sig_all, 0);
	assert_int_equal(a->cap.max_send_wr, 8);
	assert_int_equal(a->cap.max_send_sge, 1);
	assert_int_equal(a->cap.max_inline_data, 64);

	/* INIT with every remote right (the MRs decide), then RTR, RTS */
	const struct fk_mod *mi = fk_find_mod(0, IBV_QPS_INIT);
	const struct fk_mod *mr = fk_find_mod(0, IBV_QPS_RTR);
	const struct fk_mod *ms = fk_find_mod(0, IBV_QPS_RTS);
	assert_non_null(mi);
	assert_non_null(mr);
	assert_non_null(ms);
	assert_true(mi < mr && mr < ms);
	assert_int_equal(mi->attr.qp_access_flags,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
				 IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	assert_true(mi->mask & IBV_QP_ACCESS_FLAGS);
	assert_int_equal(mi->attr.port_num, 1);
	/* RTR: the CM's path, our depths and RNR delay */
	assert_int_equal(mr->attr.dest_qp_num, 0x4242);
	assert_int_equal(mr->attr.path_mtu, IBV_MTU_1024);
	assert_int_equal(mr->attr.max_dest_rd_atomic, 8); /* min(16, peer's 8) */
	assert_int_equal(mr->attr.min_rnr_timer, vf->to.rnr_timer);
	assert_int_equal(mr->attr.min_rnr_timer, 27);
	assert_int_equal(mr->attr.ah_attr.grh.sgid_index, 1); /* rdma_cm's */
	assert_true(mr->mask & 0x200000); /* RoCE: kept */
	assert_true(mr->mask & IBV_QP_MIN_RNR_TIMER);
	/* RTS: dead peer within ~timeout_ms */
	assert_int_equal(ms->attr.timeout, 14);
	assert_int_equal(ms->attr.retry_cnt, 7);
	assert_int_equal(ms->attr.rnr_retry, 6);
	assert_int_equal(ms->attr.max_rd_atomic, 4); /* min(16, peer's 4) */
	assert_int_equal(ms->attr.sq_psn, 88);
	int need = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		   IBV_QP_MAX_QP_RD_ATOMIC;
	assert_int_equal(ms->mask & need, need);

	/* CONNECT: the hello, our QP on an SRQ, retry counts */
	assert_int_equal(fk.connect_calls, 1);
	const struct rdma_conn_param *p = &fk.connect_param;
	assert_int_equal(p->private_data_len, DXL_VRB_HELLO_SIZE);
	struct dxl_vrb_hello h;
	assert_int_equal(dxl_vrb_hello_decode(fk.connect_pdata,
					      p->private_data_len, &h),
			 0);
	assert_int_equal(h.version, DXL_VRB_VERSION);
	assert_int_equal(h.node, 3);
	assert_int_equal(h.ctx_dst, 5);
	assert_int_equal(h.ctx_src, 0);
	assert_int_equal(p->qp_num, 100);
	assert_int_equal(p->srq, 1);
	assert_int_equal(p->retry_count, 7);
	assert_int_equal(p->rnr_retry_count, 6);
	assert_int_equal(p->responder_resources, 16);
	assert_int_equal(p->initiator_depth, 16);

	/* established, then handed to the CM thread's channel */
	assert_int_equal(fk.establish_calls, 1);
	assert_int_equal(fk.migrate_calls, 1);
	assert_ptr_equal(fk.migrated_to, vf->ec);
	assert_ptr_equal(q->id->context, q);
	assert_int_equal(fk.chans_live, 1); /* the private one is gone */

	assert_int_equal(dxl_qp_remote_node(qp), 7);
	assert_int_equal(dxl_qp_is_passive(qp), 0);
	assert_int_equal(dxl_qp_state(qp), DXL_QP_RTS);

	dxl_qp_delete(&qp);
	assert_null(qp);
	assert_int_equal(fk.disconnect_calls, 1);
	assert_true(fk.qp_destroyed[0]);
}

static void test_gid_index_override(void **state)
{
	dxl_fabric_delete(&env.f);
	fk_reset();
	struct dxl_fabric_cfg cfg;
	fk_cfg(&cfg);
	cfg.gid_index = 3;
	env.f = fk_open(&cfg);
	assert_int_equal(dxl_ctx_new(env.f, 0, &env.c), 0);
	fk_connect(env.c, 1);
	const struct fk_mod *mr = fk_find_mod(0, IBV_QPS_RTR);
	assert_int_equal(mr->attr.ah_attr.grh.sgid_index, 3);
}

static void test_infiniband_port_masks_roce_bits(void **state)
{
	/* librdmacm's workaround: rdma_ucm reports RoCE-only attribute bits
	 * that an InfiniBand port refuses */
	dxl_fabric_delete(&env.f);
	fk_reset();
	fk.port.link_layer = IBV_LINK_LAYER_INFINIBAND;
	env.f = fk_open(NULL);
	assert_int_equal(dxl_ctx_new(env.f, 0, &env.c), 0);
	fk_connect(env.c, 1);
	const struct fk_mod *mr = fk_find_mod(0, IBV_QPS_RTR);
	assert_int_equal(mr->mask & 0xe00000, 0);
	assert_true(mr->mask & IBV_QP_AV);
}

static void connect_fails(int code, const char *words)
{
	int qps = fk.nqp;
	struct dxl_qp *qp = (struct dxl_qp *)1;
	assert_int_equal(dxl_qp_connect(env.c, "192.0.2.9:18515", 4, &qp), code);
	assert_null(qp);
	print_message("  %s\n", dxl_errmsg());
	assert_non_null(strstr(dxl_errmsg(), "qp to 192.0.2.9:18515 ctx 4: "));
	assert_non_null(strstr(dxl_errmsg(), words));
	/* nothing left behind: QP, id, private channel */
	for (int i = qps; i < fk.nqp; i++)
		assert_true(fk.qp_destroyed[i]);
	assert_int_equal(fk.ids_live, 1);   /* the listener */
	assert_int_equal(fk.chans_live, 1); /* the fabric's */
	assert_int_equal(fk.nev, 0);
}

static void test_connect_failures(void **state)
{
	fk.outcome = FK_REJECT;
	fk.reject_reason = DXL_VRB_REJ_NOCTX;
	connect_fails(DXL_E_NOENT, "no ctx with index 4 at the peer (node 7)");
	fk.reject_reason = DXL_VRB_REJ_VERSION;
	fk.peer_version = 9;
	connect_fails(DXL_E_VERSION, "version 9, we speak 1");
	fk.peer_version = DXL_VRB_VERSION;
	fk.reject_reason = DXL_VRB_REJ_NORES;
	connect_fails(DXL_E_NOMEM, "could not create a QP");
	fk.outcome = FK_REFUSED;
	connect_fails(DXL_E_UNREACHABLE, "connection refused");
	fk.outcome = FK_UNREACHABLE;
	connect_fails(DXL_E_UNREACHABLE, "RDMA_CM_EVENT_UNREACHABLE");
	/* accepted, but by a newer protocol */
	fk.outcome = FK_ACCEPT;
	fk.peer_version = 2;
	connect_fails(DXL_E_VERSION, "version 2");
	fk.peer_version = DXL_VRB_VERSION;
	fk.create_qp_errno = ENOMEM;
	connect_fails(DXL_E_NOMEM, "ibv_create_qp");
	fk.create_qp_errno = 0;
	assert_int_equal(fk.establish_calls, 0);
	struct dxl_qp *qp = NULL;
	assert_int_equal(dxl_qp_connect(env.c, "no such host!:1", 0, &qp),
			 DXL_E_INVAL);
}

static void test_connect_timeout(void **state)
{
	dxl_fabric_delete(&env.f);
	fk_reset();
	struct dxl_fabric_cfg cfg;
	fk_cfg(&cfg);
	cfg.timeout_ms = 50;
	env.f = fk_open(&cfg);
	assert_int_equal(dxl_ctx_new(env.f, 0, &env.c), 0);
	fk.outcome = FK_SILENT;
	uint64_t t0 = dxl_now_ms();
	connect_fails(DXL_E_UNREACHABLE, "no answer within 50 ms");
	assert_true(dxl_now_ms() - t0 >= 40); /* it did wait, bounded */
}

static void test_passive_accept(void **state)
{
	struct dxl_vrb_fabric *vf = vfab();
	uint8_t hello[DXL_VRB_HELLO_SIZE];
	struct dxl_vrb_hello h = {.magic = DXL_VRB_MAGIC,
				  .version = DXL_VRB_VERSION, .node = 9,
				  .ctx_dst = 0, .ctx_src = 5};
	dxl_vrb_hello_encode(&h, hello);
	struct rdma_cm_id *id = fk_passive_id(env.f);
	struct rdma_cm_event ev;
	/* the peer will issue 2 READs/atomics, can serve 6 of ours */
	fk_request_event(&ev, id, hello, 56, 2, 6);
	assert_int_equal(dxl_vrb_cm_handle(vf, &ev), 0);

	assert_int_equal(fk.nqp, 1);
	struct dxl_vrb_ctx *vc = (struct dxl_vrb_ctx *)env.c;
	assert_ptr_equal(fk.qp_attr[0].send_cq, vc->cq);
	assert_ptr_equal(fk.qp_attr[0].srq, vc->srq);
	assert_ptr_equal(fk.qp_pd[0], vc->qp_pd);
	const struct fk_mod *mr = fk_find_mod(0, IBV_QPS_RTR);
	const struct fk_mod *ms = fk_find_mod(0, IBV_QPS_RTS);
	assert_int_equal(mr->attr.max_dest_rd_atomic, 2);
	assert_int_equal(ms->attr.max_rd_atomic, 6);
	assert_int_equal(ms->attr.timeout, 14);
	assert_int_equal(fk.accept_calls, 1);
	const struct rdma_conn_param *p = &fk.accept_param;
	assert_int_equal(p->qp_num, 100);
	assert_int_equal(p->srq, 1);
	assert_int_equal(p->responder_resources, 2);
	assert_int_equal(p->initiator_depth, 6);
	struct dxl_vrb_hello o;
	assert_int_equal(dxl_vrb_hello_decode(fk.accept_pdata,
					      p->private_data_len, &o),
			 0);
	assert_int_equal(o.node, 3);
	assert_int_equal(o.reason, DXL_VRB_REJ_NONE);
	struct dxl_vrb_qp *q = id->context;
	assert_non_null(q);
	assert_int_equal(q->qpn, 100);

	/* the first message on it shows the QP to its owner */
	char rb[64];
	assert_int_equal(dxl_ctx_post_recv(env.c, rb, 64, 1, 42), 0);
	fk_cqe(fk.recv_wr.wr_id, IBV_WC_SUCCESS, 100, 12);
	struct dxl_wc wc;
	assert_int_equal(dxl_ctx_poll(env.c, &wc, 1), 1);
	assert_int_equal(wc.wr_id, 42);
	assert_int_equal(wc.opcode, DXL_WC_RECV);
	assert_ptr_equal(wc.qp, &q->base);
	assert_int_equal(dxl_qp_is_passive(wc.qp), 1);
	assert_int_equal(dxl_qp_remote_node(wc.qp), 9);
	assert_int_equal(q->base.remote_ctx, 5);

	/* a passive QP may SEND (a reply), nothing one-sided */
	struct dxl_wr w = {.wr_id = 1, .op = DXL_WR_SEND, .local = rb, .len = 8};
	assert_int_equal(dxl_qp_post(wc.qp, &w, NULL), 0);
	assert_int_equal(fk.posted[0].wr.opcode, IBV_WR_SEND);
	w.op = DXL_WR_READ;
	assert_int_equal(dxl_qp_post(wc.qp, &w, NULL), DXL_E_NOTSUP);
}

static void request_rejected(const void *hello, uint8_t len,
			     enum dxl_vrb_reject why)
{
	int calls = fk.reject_calls, qps = fk.nqp;
	struct rdma_cm_id *id = fk_passive_id(env.f);
	struct rdma_cm_event ev;
	fk_request_event(&ev, id, hello, len, 1, 1);
	/* 1: the CM thread destroys the id after acking */
	assert_int_equal(dxl_vrb_cm_handle(vfab(), &ev), 1);
	__wrap_rdma_destroy_id(id);
	assert_int_equal(fk.reject_calls, calls + 1);
	struct dxl_vrb_hello o;
	assert_int_equal(dxl_vrb_hello_decode(fk.reject_pdata,
					      (size_t)fk.reject_len, &o),
			 0);
	assert_int_equal(o.reason, why);
	assert_int_equal(o.node, 3);
	for (int i = qps; i < fk.nqp; i++)
		assert_true(fk.qp_destroyed[i]);
	assert_int_equal(fk.accept_calls, 0);
}

static void test_passive_rejects(void **state)
{
	uint8_t hello[DXL_VRB_HELLO_SIZE];
	struct dxl_vrb_hello h = {.magic = DXL_VRB_MAGIC,
				  .version = DXL_VRB_VERSION, .node = 9,
				  .ctx_dst = 17};
	dxl_vrb_hello_encode(&h, hello);
	request_rejected(hello, sizeof(hello), DXL_VRB_REJ_NOCTX);
	assert_int_equal(fk.nqp, 0);
	h.ctx_dst = 0;
	h.version = 2;
	dxl_vrb_hello_encode(&h, hello);
	request_rejected(hello, sizeof(hello), DXL_VRB_REJ_VERSION);
	request_rejected(NULL, 0, DXL_VRB_REJ_PROTO);
	request_rejected("not dxl at all, no sir", 20, DXL_VRB_REJ_PROTO);
	h.version = DXL_VRB_VERSION;
	dxl_vrb_hello_encode(&h, hello);
	fk.create_qp_errno = ENOMEM;
	request_rejected(hello, sizeof(hello), DXL_VRB_REJ_NORES);
	assert_int_equal(fk.nqp, 0);
	fk.create_qp_errno = 0;
	assert_int_equal(fk.nqp, 0);
}

static void test_disconnect_of_active_qp(void **state)
{
	struct dxl_qp *qp = fk_connect(env.c, 1);
	struct dxl_vrb_qp *q = fk_vqp(qp);
	uint64_t ids[3];
	static uint64_t buf[4];
	for (int i = 0; i < 3; i++) {
		struct dxl_wr w = {.wr_id = 70 + (uint64_t)i, .op = DXL_WR_WRITE,
				   .flags = i == 2 ? DXL_WR_SIGNALED : 0,
				   .local = buf, .len = 8, .lkey = 1, .rkey = 2};
		assert_int_equal(dxl_qp_post(qp, &w, NULL), 0);
		ids[i] = fk.posted[0].wr.wr_id;
	}
	/* the peer goes away: the CM thread sees DISCONNECTED */
	int mods = fk.nmod, disc = fk.disconnect_calls;
	struct rdma_cm_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.event = RDMA_CM_EVENT_DISCONNECTED;
	ev.id = q->id;
	assert_int_equal(dxl_vrb_cm_handle(vfab(), &ev), 0);
	assert_int_equal(fk.nmod, mods + 1);
	assert_ptr_equal(fk.mod[mods].qp, q->qp);
	assert_int_equal(fk.mod[mods].attr.qp_state, IBV_QPS_ERR);
	assert_int_equal(fk.mod[mods].mask, IBV_QP_STATE);
	assert_int_equal(fk.disconnect_calls, disc + 1); /* DREP */
	/* a second event for it changes nothing */
	ev.event = RDMA_CM_EVENT_TIMEWAIT_EXIT;
	assert_int_equal(dxl_vrb_cm_handle(vfab(), &ev), 0);
	assert_int_equal(fk.nmod, mods + 1);

	/* the owner sees the QP in error even with nothing to reap, and the
	 * flushed requests: the first says why */
	struct dxl_wc wc[4];
	assert_int_equal(dxl_ctx_poll(env.c, wc, 4), 0);
	assert_int_equal(dxl_qp_state(qp), DXL_QP_ERR);
	for (int i = 0; i < 3; i++)
		fk_cqe(ids[i], IBV_WC_WR_FLUSH_ERR, q->qpn, 0);
	assert_int_equal(dxl_ctx_poll(env.c, wc, 4), 3);
	assert_int_equal(wc[0].wr_id, 70);
	assert_int_equal(wc[0].status, DXL_WC_PEER_UNREACHABLE);
	assert_int_equal(wc[1].status, DXL_WC_FLUSHED);
	assert_int_equal(wc[2].status, DXL_WC_FLUSHED);
	/* deleting it does not disconnect again */
	dxl_qp_delete(&qp);
	assert_int_equal(fk.disconnect_calls, disc + 1);
}

static void test_unseen_passive_qp_reaped(void **state)
{
	uint8_t hello[DXL_VRB_HELLO_SIZE];
	struct dxl_vrb_hello h = {.magic = DXL_VRB_MAGIC,
				  .version = DXL_VRB_VERSION, .node = 9};
	dxl_vrb_hello_encode(&h, hello);
	/* two passive QPs; only the second ever receives */
	struct rdma_cm_id *id1 = fk_passive_id(env.f);
	struct rdma_cm_id *id2 = fk_passive_id(env.f);
	struct rdma_cm_event ev;
	fk_request_event(&ev, id1, hello, 56, 1, 1);
	assert_int_equal(dxl_vrb_cm_handle(vfab(), &ev), 0);
	fk_request_event(&ev, id2, hello, 56, 1, 1);
	assert_int_equal(dxl_vrb_cm_handle(vfab(), &ev), 0);
	char rb[64];
	assert_int_equal(dxl_ctx_post_recv(env.c, rb, 64, 1, 1), 0);
	fk_cqe(fk.recv_wr.wr_id, IBV_WC_SUCCESS, 101, 4);
	struct dxl_wc wc;
	assert_int_equal(dxl_ctx_poll(env.c, &wc, 1), 1);
	struct dxl_qp *seen = wc.qp;
	assert_non_null(seen);

	/* both peers leave */
	memset(&ev, 0, sizeof(ev));
	ev.event = RDMA_CM_EVENT_DISCONNECTED;
	ev.id = id1;
	dxl_vrb_cm_handle(vfab(), &ev);
	ev.id = id2;
	dxl_vrb_cm_handle(vfab(), &ev);
	int live = fk.ids_live;
	assert_int_equal(dxl_ctx_poll(env.c, &wc, 1), 0);
	/* the unseen one is gone with its id, the seen one is the user's */
	assert_true(fk.qp_destroyed[0]);
	assert_false(fk.qp_destroyed[1]);
	assert_int_equal(fk.ids_live, live - 1);
	assert_int_equal(dxl_qp_state(seen), DXL_QP_ERR);
	dxl_qp_delete(&seen);
	assert_true(fk.qp_destroyed[1]);
}

/*
 * 1000 peers connect, and leave (DISCONNECTED), one after the other; the
 * device reuses the QP slots and numbers. Odd ones only connect (unseen:
 * the provider frees them), even ones send a message the user sees, then
 * another one that is still in the CQ when the user, finding the QP down,
 * deletes it (what the RPC layer does). The ctx must stay at most one QP,
 * the CQ never grows, ids and QPs are all released, and the message left
 * behind comes back as its buffer (FLUSHED, no QP) -- never as a message
 * of the next QP with the same number -- so the 4 receive buffers last.
 */
static void test_passive_churn(void **state)
{
	struct dxl_vrb_fabric *vf = vfab();
	uint8_t hello[DXL_VRB_HELLO_SIZE];
	struct dxl_vrb_hello h = {.magic = DXL_VRB_MAGIC,
				  .version = DXL_VRB_VERSION, .node = 9};
	dxl_vrb_hello_encode(&h, hello);
	fk.recycle_qps = true;
	int ids0 = fk.ids_live;
	static char rb[4][64];
	for (int i = 0; i < 4; i++)
		assert_int_equal(dxl_ctx_post_recv(env.c, rb[i], 64, 1, (uint64_t)i), 0);
	uint64_t flushed = 0, delivered = 0;
	for (int cyc = 0; cyc < 1000; cyc++) {
		struct rdma_cm_id *id = fk_passive_id(env.f);
		struct rdma_cm_event ev;
		fk_request_event(&ev, id, hello, 56, 1, 1);
		assert_int_equal(dxl_vrb_cm_handle(vf, &ev), 0);
		struct dxl_vrb_qp *q = id->context;
		assert_non_null(q);
		uint32_t n = q->qpn;
		struct dxl_wc wc[4];
		struct dxl_qp *seen = NULL;
		/* what the last peer left in the CQ, polled now that a new QP
		 * has its number: only buffers given back */
		int k = dxl_ctx_poll(env.c, wc, 4);
		for (int j = 0; j < k; j++) {
			assert_int_equal(wc[j].opcode, DXL_WC_RECV);
			assert_int_equal(wc[j].status, DXL_WC_FLUSHED);
			assert_null(wc[j].qp);
			flushed++;
			assert_int_equal(dxl_ctx_post_recv(env.c, rb[wc[j].wr_id], 64, 1,
							   wc[j].wr_id), 0);
		}
		if (cyc % 2 == 0) {
			/* a message the user sees, then one left in the CQ */
			fk_cqe(fk.recv_wr.wr_id, IBV_WC_SUCCESS, n, 8);
			assert_int_equal(dxl_ctx_poll(env.c, wc, 4), 1);
			assert_int_equal(wc[0].status, DXL_WC_SUCCESS);
			seen = wc[0].qp;
			assert_ptr_equal(seen, &q->base);
			delivered++;
			assert_int_equal(dxl_ctx_post_recv(env.c, rb[wc[0].wr_id], 64, 1,
							   wc[0].wr_id), 0);
		}
		memset(&ev, 0, sizeof(ev));
		ev.event = RDMA_CM_EVENT_DISCONNECTED;
		ev.id = id;
		assert_int_equal(dxl_vrb_cm_handle(vf, &ev), 0);
		if (seen) {
			/* the user polls, finds the QP down; a last message
			 * lands in the CQ before the user deletes the QP */
			assert_int_equal(dxl_ctx_poll(env.c, wc, 4), 0);
			assert_int_equal(dxl_qp_state(seen), DXL_QP_ERR);
			fk_cqe(fk.recv_wr.wr_id, IBV_WC_SUCCESS, n, 9);
			dxl_qp_delete(&seen);
		} else {
			assert_int_equal(dxl_ctx_poll(env.c, wc, 4), 0); /* reaps */
		}
		assert_int_equal(dxl_ctx_qp_count(env.c), 0);
		assert_int_equal(fk.ids_live, ids0);
	}
	print_message("  1000 passive QPs (one number, reused): %llu messages seen, "
		      "%llu buffers back FLUSHED; QPs in the ctx after each: 0; CQ "
		      "resized %d times\n", (unsigned long long)delivered,
		      (unsigned long long)flushed, fk.resize_calls);
	assert_int_equal(flushed, 500);
	assert_int_equal(fk.resize_calls, 0);
	assert_int_equal(fk.nqp, 1); /* one slot, reused every time */
}

static void test_accept_failure(void **state)
{
	uint8_t hello[DXL_VRB_HELLO_SIZE];
	struct dxl_vrb_hello h = {.magic = DXL_VRB_MAGIC,
				  .version = DXL_VRB_VERSION, .node = 9};
	dxl_vrb_hello_encode(&h, hello);
	fk.accept_errno = EIO;
	struct rdma_cm_id *id = fk_passive_id(env.f);
	struct rdma_cm_event ev;
	fk_request_event(&ev, id, hello, 56, 1, 1);
	/* the QP is already the ctx's: its owner cleans up, id included */
	assert_int_equal(dxl_vrb_cm_handle(vfab(), &ev), 0);
	const struct fk_mod *me = fk_find_mod(0, IBV_QPS_ERR);
	assert_non_null(me);
	int live = fk.ids_live;
	struct dxl_wc wc;
	assert_int_equal(dxl_ctx_poll(env.c, &wc, 1), 0);
	assert_true(fk.qp_destroyed[0]);
	assert_int_equal(fk.ids_live, live - 1);
}

static void test_ctx_delete_takes_pending(void **state)
{
	/* a passive QP created for the ctx but never adopted by a poll */
	uint8_t hello[DXL_VRB_HELLO_SIZE];
	struct dxl_vrb_hello h = {.magic = DXL_VRB_MAGIC,
				  .version = DXL_VRB_VERSION, .node = 9};
	dxl_vrb_hello_encode(&h, hello);
	struct rdma_cm_id *id = fk_passive_id(env.f);
	struct rdma_cm_event ev;
	fk_request_event(&ev, id, hello, 56, 1, 1);
	assert_int_equal(dxl_vrb_cm_handle(vfab(), &ev), 0);
	fk_connect(env.c, 2);
	dxl_ctx_delete(&env.c);
	assert_true(fk.qp_destroyed[0]);
	assert_true(fk.qp_destroyed[1]);
	assert_int_equal(fk.ids_live, 1); /* the listener */
	/* a request for the deleted ctx is now refused */
	id = fk_passive_id(env.f);
	fk_request_event(&ev, id, hello, 56, 1, 1);
	assert_int_equal(dxl_vrb_cm_handle(vfab(), &ev), 1);
	__wrap_rdma_destroy_id(id);
}

static void test_async_comm_est(void **state)
{
	/* first packet before the RTU: the CM is told, for attached QPs only */
	struct dxl_qp *qp = fk_connect(env.c, 1);
	struct ibv_async_event e;
	memset(&e, 0, sizeof(e));
	e.event_type = IBV_EVENT_COMM_EST;
	e.element.qp = fk_vqp(qp)->qp;
	dxl_vrb_async_handle(vfab(), &e);
	assert_int_equal(fk.notify_cm_calls, 1);
	fk_vqp(qp)->id->context = NULL; /* as while its owner deletes it */
	dxl_vrb_async_handle(vfab(), &e);
	assert_int_equal(fk.notify_cm_calls, 1);
	fk_vqp(qp)->id->context = fk_vqp(qp);
	/* the rest is logged only */
	e.event_type = IBV_EVENT_QP_FATAL;
	dxl_vrb_async_handle(vfab(), &e);
	e.event_type = IBV_EVENT_PORT_ERR;
	e.element.port_num = 1;
	dxl_vrb_async_handle(vfab(), &e);
	assert_int_equal(fk.notify_cm_calls, 1);
	assert_int_equal(dxl_qp_state(qp), DXL_QP_RTS);
}

static void test_cm_thread_hands_over_passive_qp(void **state)
{
	/* the real CM thread accepts while this (owner) thread polls; the
	 * peer's first message becomes visible once accepted, and must find
	 * its QP through the ctx's pending list (run it under TSan) */
	struct dxl_vrb_fabric *vf = vfab();
	char rb[64];
	assert_int_equal(dxl_ctx_post_recv(env.c, rb, 64, 1, 4242), 0);
	fk_cqe(fk.recv_wr.wr_id, IBV_WC_SUCCESS, 100, 9);
	fk.hold_until_accept = true;
	struct dxl_vrb_hello h = {.magic = DXL_VRB_MAGIC,
				  .version = DXL_VRB_VERSION, .node = 11,
				  .ctx_dst = 0, .ctx_src = 2};
	uint8_t hello[DXL_VRB_HELLO_SIZE];
	dxl_vrb_hello_encode(&h, hello);
	struct rdma_cm_id *id = fk_passive_id(env.f);
	fk_queue_event(vf->ec, RDMA_CM_EVENT_CONNECT_REQUEST, 0, id, hello,
		       sizeof(hello));
	fk.evq[fk.nev - 1].ev.param.conn.responder_resources = 1;
	fk.evq[fk.nev - 1].ev.param.conn.initiator_depth = 1;
	uint64_t one = 1;
	assert_int_equal(write(vf->ec->fd, &one, sizeof(one)), sizeof(one));

	struct dxl_wc wc;
	int n = 0;
	uint64_t give_up = dxl_now_ms() + 10000;
	while ((n = dxl_ctx_poll(env.c, &wc, 1)) == 0 && dxl_now_ms() < give_up)
		sched_yield();
	assert_int_equal(n, 1);
	assert_int_equal(wc.wr_id, 4242);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_non_null(wc.qp);
	assert_int_equal(dxl_qp_remote_node(wc.qp), 11);
	assert_true(dxl_qp_is_passive(wc.qp));
	assert_int_equal(fk.accept_calls, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_active_connect, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_gid_index_override, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_infiniband_port_masks_roce_bits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connect_failures, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_connect_timeout, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_passive_accept, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_passive_rejects, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_disconnect_of_active_qp,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_passive_churn, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unseen_passive_qp_reaped,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_accept_failure, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_ctx_delete_takes_pending,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_async_comm_est, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_cm_thread_hands_over_passive_qp,
						setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
