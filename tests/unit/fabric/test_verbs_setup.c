/* test_verbs_setup.c -- verbs provider: open, device/port/GID, MRs, ctx (mocks) */
#include "dxl/engine.h"
#include "test_verbs_fake.h"

static int reset(void **state)
{
	fk_reset();
	return 0;
}

static void test_open_and_close(void **state)
{
	struct dxl_fabric *f = fk_open(NULL);
	struct dxl_vrb_fabric *vf = f->prov;
	/* port 0 asked: the one rdma_bind_addr picked is reported */
	assert_string_equal(dxl_fabric_addr(f), "192.0.2.1:18515");
	assert_ptr_equal(vf->verbs, fk_ctx());
	assert_string_equal(vf->dev_name, "mlx5_fake");
	assert_int_equal(vf->port, 1);
	assert_int_equal(vf->link_layer, IBV_LINK_LAYER_ETHERNET);
	assert_int_equal(fk.pd_allocs, 1); /* one PD for the process */
	assert_int_equal(fk.listen_calls, 1);
	assert_true(vf->have_src); /* connects leave from the listen IP */
	assert_int_equal(vf->resp_res, 16);
	assert_int_equal(vf->init_depth, 16);
	assert_int_equal(vf->to.ack_timeout, 14);
	assert_int_equal(dxl_fabric_power_fail(f, DXL_PF_ALL, 1), DXL_E_NOTSUP);
	assert_int_equal(dxl_fabric_pending_lines(f), 0);
	dxl_fabric_delete(&f);
	assert_null(f);
	assert_int_equal(fk.pd_deallocs, 1);
	assert_int_equal(fk.ids_live, 0);
	assert_int_equal(fk.chans_live, 0);
}

static void test_open_wildcard_uses_first_device(void **state)
{
	struct dxl_fabric_cfg cfg;
	fk_cfg(&cfg);
	snprintf(cfg.listen_addr, sizeof(cfg.listen_addr), "0.0.0.0:7000");
	struct dxl_fabric *f = fk_open(&cfg);
	struct dxl_vrb_fabric *vf = f->prov;
	assert_string_equal(dxl_fabric_addr(f), "0.0.0.0:7000"); /* as asked */
	assert_ptr_equal(vf->verbs, fk_ctx());
	assert_false(vf->have_src);
	dxl_fabric_delete(&f);
}

static void open_fails(const struct dxl_fabric_cfg *cfg, int code,
		       const char *words)
{
	struct dxl_fabric *f = (struct dxl_fabric *)1;
	assert_int_equal(dxl_fabric_new(cfg, &f), code);
	assert_null(f);
	print_message("  %s\n", dxl_errmsg());
	assert_non_null(strstr(dxl_errmsg(), words));
	/* everything taken is given back */
	assert_int_equal(fk.pd_allocs, fk.pd_deallocs);
	assert_int_equal(fk.ids_live, 0);
	assert_int_equal(fk.chans_live, 0);
}

static void test_open_errors(void **state)
{
	struct dxl_fabric_cfg cfg;
	fk_cfg(&cfg);
	fk.bind_errno = EADDRINUSE;
	open_fails(&cfg, DXL_E_BUSY, "in use");
	fk.bind_errno = EADDRNOTAVAIL;
	open_fails(&cfg, DXL_E_NODEV, "not on an RDMA device");
	fk.bind_errno = 0;

	snprintf(cfg.device, sizeof(cfg.device), "mlx4_9");
	open_fails(&cfg, DXL_E_NODEV, "'mlx4_9' not found (devices: mlx5_fake)");
	snprintf(cfg.device, sizeof(cfg.device), "mlx5_fake");
	struct dxl_fabric *f = fk_open(&cfg);
	dxl_fabric_delete(&f);

	fk_cfg(&cfg);
	cfg.port = 2;
	open_fails(&cfg, DXL_E_INVAL, "port 1 of mlx5_fake, but fabric.port is 2");

	fk_cfg(&cfg);
	cfg.sq_depth = 64;
	fk.attr.max_qp_wr = 32;
	open_fails(&cfg, DXL_E_INVAL, "sq_depth 64 over the max_qp_wr 32");
	fk.attr.max_qp_wr = 16384;
	fk.attr.max_srq = 0;
	open_fails(&cfg, DXL_E_NOTSUP, "no shared receive queues");
	fk.attr.max_srq = 1024;
	fk.attr.max_srq_wr = 2;
	open_fails(&cfg, DXL_E_INVAL, "srq_depth 4 over the max_srq_wr 2");
}

static void test_gid_index(void **state)
{
	struct dxl_fabric_cfg cfg;
	fk_cfg(&cfg);
	cfg.gid_index = 3; /* non-zero entry */
	struct dxl_fabric *f = fk_open(&cfg);
	dxl_fabric_delete(&f);
	cfg.gid_index = 1; /* empty entry */
	open_fails(&cfg, DXL_E_INVAL, "gid_index 1");
	cfg.gid_index = 4; /* past the table */
	open_fails(&cfg, DXL_E_INVAL, "has 4 GIDs");
}

/*
 * A record store on verbs that is not persistent memory: the flush READ of
 * a one-sided write-back would make nothing durable (the provider runs no
 * persist function), so no peer may WRITE its records: registered without
 * REMOTE_WRITE (dxl_record_wb_onesided_ok). Its lock words stay atomic.
 */
static void test_store_records_not_writable(void **state)
{
	struct dxl_fabric *f = fk_open(NULL);
	char dir[] = "/tmp/dxl-vstore-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[64];
	snprintf(path, sizeof(path), "%s/store", dir);
	struct dxl_table_schema t = {.id = 1, .value_size = 32, .capacity = 8};
	struct dxl_region_id id = {.cluster = "v", .node_id = 3};
	const enum dxl_durability modes[2] = {DXL_DUR_PROCESS, DXL_DUR_MSYNC};
	for (int m = 0; m < 2; m++) {
		struct dxl_store *s = NULL;
		assert_int_equal(dxl_store_create(path, modes[m], &id, 0, &t, 1, NULL, &s), 0);
		int first = fk.reg_calls;
		assert_int_equal(dxl_store_register(s, f), 0);
		assert_int_equal(fk.reg_calls, first + 2);
		unsigned rec = fk.reg_access[first], lk = fk.reg_access[first + 1];
		print_message("  %s store on verbs: records registered with access %#x, "
			      "lock words %#x\n", dxl_durability_name(modes[m]), rec, lk);
		assert_int_equal(rec & IBV_ACCESS_REMOTE_WRITE, 0);
		assert_true(rec & IBV_ACCESS_REMOTE_READ);
		assert_true(lk & IBV_ACCESS_REMOTE_ATOMIC);
		dxl_store_close(&s);
		unlink(path);
	}
	rmdir(dir);
	dxl_fabric_delete(&f);
}

static void test_mr_access_mapping(void **state)
{
	struct dxl_fabric *f = fk_open(NULL);
	static char region[4096];
	static const struct {
		unsigned dxl;
		unsigned ibv;
	} t[] = {
		{DXL_MR_LOCAL_WRITE, IBV_ACCESS_LOCAL_WRITE},
		{DXL_MR_REMOTE_READ, IBV_ACCESS_REMOTE_READ},
		/* fabric.c adds LOCAL_WRITE, which verbs requires */
		{DXL_MR_REMOTE_WRITE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE},
		{DXL_MR_REMOTE_ATOMIC,
		 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC},
		{DXL_MR_REMOTE_READ | DXL_MR_PERSISTENT, IBV_ACCESS_REMOTE_READ},
		{DXL_MR_LOCAL_WRITE | DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE |
			 DXL_MR_REMOTE_ATOMIC | DXL_MR_PERSISTENT,
		 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
			 IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC},
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct dxl_mr *mr = NULL;
		assert_int_equal(dxl_mr_reg(f, region + 64, 1000, t[i].dxl, &mr), 0);
		assert_int_equal(fk.mr_access, t[i].ibv);
		assert_ptr_equal(fk.mr_pd, &fk.pd);
		assert_ptr_equal(fk.mr_addr, region + 64);
		assert_int_equal(fk.mr_len, 1000);
		assert_int_equal(fk.mr_iova, (uintptr_t)(region + 64));
		assert_int_equal(dxl_mr_lkey(mr), fk.mr.lkey);
		struct dxl_mr_desc d;
		dxl_mr_desc(mr, &d);
		assert_int_equal(d.rkey, fk.mr.rkey);
		assert_int_equal(d.node, 3);
		dxl_mr_mark_durable(mr, region + 64, 64); /* a no-op */
		int before = fk.dereg_calls;
		dxl_mr_dereg(&mr);
		assert_int_equal(fk.dereg_calls, before + 1);
	}
	fk.reg_errno = ENOMEM;
	struct dxl_mr *mr = NULL;
	assert_int_equal(dxl_mr_reg(f, region, 64, DXL_MR_REMOTE_READ, &mr),
			 DXL_E_NOMEM);
	assert_non_null(strstr(dxl_errmsg(), "ulimit -l"));
	fk.reg_errno = EFAULT;
	assert_int_equal(dxl_mr_reg(f, region, 64, DXL_MR_REMOTE_READ, &mr),
			 DXL_E_IO);
	fk.reg_errno = 0;
	/* an MR left registered is released by dxl_fabric_delete */
	assert_int_equal(dxl_mr_reg(f, region, 64, DXL_MR_REMOTE_READ, &mr), 0);
	int before = fk.dereg_calls;
	dxl_fabric_delete(&f);
	assert_int_equal(fk.dereg_calls, before + 1);
}

static void test_ctx_without_thread_domain(void **state)
{
	struct dxl_fabric_cfg cfg;
	fk_cfg(&cfg);
	struct dxl_fabric *f = fk_open(&cfg);
	struct dxl_vrb_fabric *vf = f->prov;
	struct dxl_ctx *c = NULL;
	assert_int_equal(dxl_ctx_new(f, 5, &c), 0);
	assert_int_equal(fk.td_allocs, 1);
	assert_int_equal(atomic_load(&vf->td_state), DXL_VRB_TD_NO);
	struct dxl_vrb_ctx *vc = (struct dxl_vrb_ctx *)c;
	assert_ptr_equal(vc->qp_pd, &fk.pd);
	assert_null(vc->pdom);
	/* CQ: cq_depth entries, the ctx as context, vector 5 % 3 */
	assert_int_equal(fk.cq_cqe_asked, 64);
	assert_int_equal(fk.cq_vector, 2);
	assert_ptr_equal(fk.cq_user_ctx, vc);
	assert_true(fcntl(fk.ch.fd, F_GETFL) & O_NONBLOCK);
	/* SRQ: srq_depth one-entry buffers in the process PD */
	assert_ptr_equal(fk.srq_pd, &fk.pd);
	assert_int_equal(fk.srq_attr.attr.max_wr, 4);
	assert_int_equal(fk.srq_attr.attr.max_sge, 1);
	/* the QPs go to the plain PD */
	struct dxl_qp *qp = fk_connect(c, 0);
	assert_ptr_equal(fk.qp_pd[fk_qp_index(qp)], &fk.pd);
	dxl_ctx_delete(&c);
	assert_int_equal(fk.cq_destroys, 1);
	assert_int_equal(fk.srq_destroys, 1);
	assert_true(fk.qp_destroyed[0]);
	/* the next ctx does not try again */
	assert_int_equal(dxl_ctx_new(f, 6, &c), 0);
	assert_int_equal(fk.td_allocs, 1);
	dxl_fabric_delete(&f);
	assert_int_equal(fk.pdom_deallocs, 0);
	assert_int_equal(fk.td_deallocs, 0);
}

static void test_ctx_with_thread_domain(void **state)
{
	fk.td_supported = true;
	struct dxl_fabric *f = fk_open(NULL);
	struct dxl_ctx *c = NULL;
	assert_int_equal(dxl_ctx_new(f, 0, &c), 0);
	assert_int_equal(fk.td_allocs, 1);
	assert_int_equal(fk.pdom_allocs, 1);
	/* the parent domain joins the process PD and the ctx's TD */
	assert_ptr_equal(fk.pdom_attr.pd, &fk.pd);
	assert_ptr_equal(fk.pdom_attr.td, &fk.td);
	/* QPs in the parent domain, the SRQ and MRs in the PD */
	struct dxl_qp *qp = fk_connect(c, 0);
	assert_ptr_equal(fk.qp_pd[fk_qp_index(qp)], &fk.pdom);
	assert_ptr_equal(fk.srq_pd, &fk.pd);
	static char region[64];
	struct dxl_mr *mr = NULL;
	assert_int_equal(dxl_mr_reg(f, region, sizeof(region), DXL_MR_REMOTE_READ,
				    &mr),
			 0);
	assert_ptr_equal(fk.mr_pd, &fk.pd);
	dxl_ctx_delete(&c);
	assert_int_equal(fk.pdom_deallocs, 1);
	assert_int_equal(fk.td_deallocs, 1);
	dxl_fabric_delete(&f);
	assert_int_equal(fk.pd_deallocs, 1);
}

static void test_ctx_cq_grows_with_qps(void **state)
{
	/* cq_depth 16, srq_depth 4, sq_depth 8: the third QP needs 4 + 24 */
	struct dxl_fabric_cfg cfg;
	fk_cfg(&cfg);
	cfg.cq_depth = 16;
	struct dxl_fabric *f = fk_open(&cfg);
	struct dxl_ctx *c = NULL;
	assert_int_equal(dxl_ctx_new(f, 0, &c), 0);
	fk_connect(c, 0);
	assert_int_equal(fk.resize_calls, 0); /* 4 + 8 <= 16 */
	fk_connect(c, 0);
	assert_int_equal(fk.resize_calls, 1); /* 4 + 16 > 16 -> 32 */
	assert_int_equal(fk.cq.cqe, 32);
	fk_connect(c, 0);
	assert_int_equal(fk.resize_calls, 1); /* 28 <= 32 */
	dxl_fabric_delete(&f);
}

static void test_timeouts(void **state)
{
	static const struct {
		uint32_t ms;
		uint8_t ack, rnr;
	} t[] = {
		{1, 4, 7},          /* 4.096us*16*8 = 0.52 ms; 0.12 ms RNR */
		{10, 8, 14},        /* 8.4 ms; 1.28 ms * 7 */
		{1000, 14, 27},     /* 537 ms; 122.88 ms * 7 = 860 ms */
		{3600000, 26, 0},   /* 2199 s; 655.36 ms * 7 */
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct dxl_vrb_timeouts to;
		dxl_vrb_timeouts(t[i].ms, &to);
		assert_int_equal(to.retry_cnt, 7);
		assert_int_equal(to.rnr_retry, 6);
		assert_int_equal(to.ack_timeout, t[i].ack);
		assert_int_equal(to.rnr_timer, t[i].rnr);
		/* totals within the budget, and the next step would not be */
		assert_true(dxl_vrb_ack_total_us(&to) <= t[i].ms * 1000ull);
		if (to.ack_timeout < 31) {
			struct dxl_vrb_timeouts up = to;
			up.ack_timeout++;
			assert_true(dxl_vrb_ack_total_us(&up) > t[i].ms * 1000ull);
		}
		assert_true(dxl_vrb_rnr_total_us(&to) <= t[i].ms * 1000ull);
	}
	assert_int_equal(dxl_vrb_rnr_timer_10us(0), 65536);
	assert_int_equal(dxl_vrb_rnr_timer_10us(27), 12288);
}

static void test_hello_codec(void **state)
{
	struct dxl_vrb_hello h = {.magic = DXL_VRB_MAGIC, .version = 1,
				  .reason = 2, .node = 0x01020304,
				  .ctx_dst = 63, .ctx_src = 7};
	uint8_t b[DXL_VRB_HELLO_SIZE];
	dxl_vrb_hello_encode(&h, b);
	/* little-endian on the wire */
	assert_int_equal(b[0], 0x44);
	assert_int_equal(b[3], 0x56);
	assert_int_equal(b[8], 0x04);
	assert_int_equal(b[11], 0x01);
	struct dxl_vrb_hello o;
	assert_int_equal(dxl_vrb_hello_decode(b, sizeof(b), &o), 0);
	assert_memory_equal(&o, &h, sizeof(h));
	assert_int_equal(dxl_vrb_hello_decode(b, sizeof(b) - 1, &o), DXL_E_PROTO);
	assert_int_equal(dxl_vrb_hello_decode(NULL, 0, &o), DXL_E_PROTO);
	b[1] ^= 1;
	assert_int_equal(dxl_vrb_hello_decode(b, sizeof(b), &o), DXL_E_PROTO);
	assert_int_equal(dxl_vrb_reject_err(DXL_VRB_REJ_NOCTX), DXL_E_NOENT);
	assert_int_equal(dxl_vrb_reject_err(DXL_VRB_REJ_VERSION), DXL_E_VERSION);
	assert_int_equal(dxl_vrb_reject_err(DXL_VRB_REJ_NORES), DXL_E_NOMEM);
	assert_int_equal(dxl_vrb_reject_err(DXL_VRB_REJ_PROTO), DXL_E_UNREACHABLE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_open_and_close, reset),
		cmocka_unit_test_setup(test_open_wildcard_uses_first_device, reset),
		cmocka_unit_test_setup(test_open_errors, reset),
		cmocka_unit_test_setup(test_gid_index, reset),
		cmocka_unit_test_setup(test_mr_access_mapping, reset),
		cmocka_unit_test_setup(test_store_records_not_writable, reset),
		cmocka_unit_test_setup(test_ctx_without_thread_domain, reset),
		cmocka_unit_test_setup(test_ctx_with_thread_domain, reset),
		cmocka_unit_test_setup(test_ctx_cq_grows_with_qps, reset),
		cmocka_unit_test(test_timeouts),
		cmocka_unit_test(test_hello_codec),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
