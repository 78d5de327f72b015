/* test_append_verbs.c -- the appender on the verbs provider (fake rdma-core,
 * tests/unit/fabric/test_verbs_fake.h) against a ring whose replica runs a
 * persister: the ordering rules of the persist protocol, checked against a
 * model of the disk.
 *
 * A tiny "NIC" replaces the fake's post_send: it executes every work request
 * at once, in order, on this process's memory (the target ring lives here)
 * and queues the completions of the signalled ones. After EVERY WRITE it
 * runs one pass of the persister (dxl_logstore_persist_step), the most
 * hostile schedule a persister thread could have. The persister's test hook
 * copies each range it persists into a shadow of the region: the disk. So:
 *
 *  - the request must come after the record and watermark WRITEs (else the
 *    persister copies the range before the record is in it) and the ack
 *    must wait for the confirmation (else nothing is copied at all): every
 *    acknowledged record must be in the shadow, and the last watermark;
 *  - the WRs of each append go out in the order record, watermark,
 *    request, head READ, confirmation READ (checked on the NIC's log);
 *  - opening the appender has what the ring held from its head made durable
 *    before the first append (records a previous writer left unconfirmed,
 *    which repair would declare acknowledged).
 */
#include "tests/unit/fabric/test_verbs_fake.h"

#include "common/common.h"
#include "dxl/log.h"
#include "log/log_internal.h"

#define RING 65536
#define MAXLOG 4096

struct exec {
	enum ibv_wr_opcode op;
	uint64_t raddr;
	uint32_t len;
};

static struct {
	struct dxl_region *r;
	struct dxl_logstore *ls;
	uint8_t *data, *shadow;
	uint64_t size;
	uint64_t last[1];
	struct dxl_persist_stats st;
	bool persister; /* the NIC runs it after each WRITE */
	struct exec log[MAXLOG];
	int nlog;
} nic;

static void shadow_hook(uint32_t ring, const void *addr, size_t len, void *arg)
{
	uint64_t off = (uint64_t)((const uint8_t *)addr - nic.data);
	assert_true(off + len <= nic.size);
	memcpy(nic.shadow + off, addr, len);
}

static int nic_post(struct ibv_qp *qp, struct ibv_send_wr *wr,
		    struct ibv_send_wr **bad)
{
	if (fk.cq_head == fk.cq_tail) /* the fake's CQ array: start over */
		fk.cq_head = fk.cq_tail = 0;
	for (; wr; wr = wr->next) {
		uint32_t len = wr->num_sge ? wr->sg_list[0].length : 0;
		void *local = wr->num_sge ? (void *)(uintptr_t)wr->sg_list[0].addr : NULL;
		uint64_t ra = wr->wr.rdma.remote_addr;
		switch (wr->opcode) {
		case IBV_WR_RDMA_WRITE:
			if (len)
				memcpy((void *)(uintptr_t)ra, local, len);
			break;
		case IBV_WR_RDMA_READ:
			memcpy(local, (void *)(uintptr_t)ra, len);
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP: {
			ra = wr->wr.atomic.remote_addr;
			uint64_t *p = (uint64_t *)(uintptr_t)ra, old = *p;
			if (old == wr->wr.atomic.compare_add)
				*p = wr->wr.atomic.swap;
			memcpy(local, &old, 8);
			break;
		}
		default:
			fail_msg("the NIC does not do opcode %d", wr->opcode);
		}
		if (nic.nlog < MAXLOG)
			nic.log[nic.nlog++] = (struct exec){wr->opcode, ra, len};
		if (wr->opcode == IBV_WR_RDMA_WRITE && nic.persister)
			dxl_logstore_persist_step(nic.ls, nic.last, &nic.st);
		if (wr->send_flags & IBV_SEND_SIGNALED)
			fk_cqe(wr->wr_id, IBV_WC_SUCCESS, qp->qp_num, len);
	}
	*bad = NULL;
	return 0;
}

static int setup(void **state)
{
	fk_reset();
	memset(&nic, 0, sizeof(nic));
	return 0;
}

static void make_ring(const char *dir)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/log", dir);
	struct dxl_region_id id = {.cluster = "t", .node_id = 1,
				   .kind = DXL_REGION_LOG};
	nic.size = dxl_logstore_bytes(1, RING);
	assert_int_equal(dxl_region_create(path, nic.size, DXL_DUR_PROCESS, &id,
					   &nic.r), 0);
	assert_int_equal(dxl_logstore_format(nic.r, 0, 1, RING), 0);
	assert_int_equal(dxl_logstore_open(nic.r, &nic.ls), 0);
	nic.data = dxl_region_data(nic.r);
	nic.shadow = calloc(1, nic.size);
	memcpy(nic.shadow, nic.data, nic.size); /* formatted and persisted */
	dxl_logstore_persister_mark(nic.ls, 1);
	memcpy(nic.shadow, nic.data, nic.size);
	dxl_persist_set_test_hook(shadow_hook, NULL);
	nic.persister = true;
}

static void fill(uint8_t *p, uint32_t len, uint64_t n)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(n * 37 + i);
}

/* the data records of the shadow's ring from its head: how many, checked */
static uint64_t shadow_records(uint64_t *last_txn)
{
	const uint8_t *ctl = nic.shadow + dxl_logstore_ctl_off(nic.ls, 0);
	struct dxl_ring_head h;
	assert_int_equal(dxl_ring_head_decode(ctl, &h), 0);
	struct dxl_ring_iter it;
	dxl_ring_iter_init_buf(&it, ctl + DXL_RING_CTL_SIZE, RING, h.pos, h.seq);
	struct dxl_rec rec;
	uint64_t n = 0;
	*last_txn = 0;
	while (dxl_ring_iter_next(&it, &rec, NULL)) {
		uint8_t p[512];
		fill(p, rec.payload_len, rec.txn_id);
		assert_memory_equal(rec.payload, p, rec.payload_len);
		*last_txn = rec.txn_id;
		n++;
	}
	return n;
}

static struct dxl_appender *open_appender(struct dxl_ctx *c, struct dxl_mr *mr,
					  uint32_t writer)
{
	struct dxl_log_target t;
	assert_int_equal(dxl_log_target_init(&t, nic.ls, mr, "192.0.2.9:18515", 0, 0), 0);
	struct dxl_appender_cfg ac;
	dxl_appender_cfg_init(&ac);
	ac.writer_id = writer;
	ac.max_inflight = 8;
	struct dxl_appender *a = NULL;
	if (dxl_appender_new(c, &ac, &t, 1, &a))
		fail_msg("appender: %s", dxl_errmsg());
	return a;
}

static void test_request_after_data(void **state)
{
	char dir[] = "/tmp/dxl-test-apv-XXXXXX";
	assert_non_null(mkdtemp(dir));
	make_ring(dir);
	struct dxl_fabric *f = fk_open(NULL);
	fk_ctx()->ops.post_send = nic_post;
	struct dxl_ctx *c;
	assert_int_equal(dxl_ctx_new(f, 0, &c), 0);
	struct dxl_mr *mr;
	assert_int_equal(dxl_mr_reg(f, nic.data, nic.size,
				    DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE |
					    DXL_MR_REMOTE_ATOMIC | DXL_MR_PERSISTENT,
				    &mr), 0);
	struct dxl_appender *a = open_appender(c, mr, 2);
	struct dxl_appender_persist_stats ps;
	dxl_appender_persist_stats(a, &ps);
	assert_int_equal(ps.targets, 1u);

	/* pipelined appends (8 in flight), one heartbeat */
	const uint64_t n = 60;
	uint64_t next = 1, got = 0;
	struct dxl_append_result res;
	uint8_t payload[512];
	int first_chain = nic.nlog;
	while (got < n) {
		while (next <= n) {
			struct dxl_rec r = {.txn_id = next, .commit_ts = 100 + next,
					    .payload = payload,
					    .payload_len = 16 + (uint32_t)(next * 7 % 400)};
			fill(payload, r.payload_len, next);
			if (dxl_appender_append(a, &r, NULL, NULL))
				break;
			next++;
		}
		int k = dxl_appender_poll(a, &res, 1);
		assert_true(k >= 0);
		if (!k) {
			dxl_appender_wait(a, 10);
			continue;
		}
		assert_int_equal(res.status, 0);
		got++;
	}
	assert_int_equal(dxl_appender_heartbeat(a, 100 + n), 0);
	while (dxl_appender_inflight(a)) {
		assert_int_equal(dxl_appender_poll(a, &res, 1), 0); /* no result */
		dxl_appender_wait(a, 10);
	}
	/* the disk (shadow) has every acknowledged record, and the watermark
	 * of the heartbeat */
	uint64_t last = 0, on_disk = shadow_records(&last);
	uint64_t wm = dxl_ring_wmark_decode(nic.shadow + dxl_logstore_ctl_off(nic.ls, 0) +
					    DXL_RING_WMARK_OFF);
	print_message("  %llu requests served; on the model disk: %llu of %llu records "
		      "(last %llu), watermark %llu\n",
		      (unsigned long long)nic.st.requests, (unsigned long long)on_disk,
		      (unsigned long long)n, (unsigned long long)last,
		      (unsigned long long)wm);
	assert_true(on_disk == n && last == n);
	assert_true(wm == 100 + n);

	/* the NIC's log: every chain writes the request after the record and
	 * the watermark, then READs the heads and the confirmation */
	const uint8_t *base = nic.data;
	uint64_t ctl = (uint64_t)(uintptr_t)base + dxl_logstore_ctl_off(nic.ls, 0);
	int chains = 0;
	for (int i = first_chain; i < nic.nlog; i++) {
		if (nic.log[i].raddr != ctl + DXL_RING_PREQ_OFF)
			continue;
		chains++;
		/* before it: the watermark WRITE (and before that the record,
		 * except for the heartbeat); after it: the two READs */
		assert_true(i >= 1 && nic.log[i - 1].raddr == ctl + DXL_RING_WMARK_OFF);
		assert_true(nic.log[i - 1].op == IBV_WR_RDMA_WRITE);
		assert_true(i + 2 < nic.nlog);
		assert_true(nic.log[i + 1].op == IBV_WR_RDMA_READ &&
			    nic.log[i + 1].raddr == ctl);
		assert_true(nic.log[i + 2].op == IBV_WR_RDMA_READ &&
			    nic.log[i + 2].raddr == ctl + DXL_RING_PDONE_OFF);
	}
	assert_int_equal(chains, (int)n + 1); /* 60 appends, a heartbeat */
	/* a new writer (same id, as after a crash): the ring's records from its
	 * head on are made durable before it appends. Wipe them from the model
	 * disk and stop the persister: the open must not complete. */
	dxl_appender_delete(&a);
	memset(nic.shadow + dxl_logstore_buf_off(nic.ls, 0), 0, RING);
	nic.persister = false;
	struct dxl_log_target t;
	assert_int_equal(dxl_log_target_init(&t, nic.ls, mr, "192.0.2.9:18515", 0, 0), 0);
	struct dxl_appender_cfg ac;
	dxl_appender_cfg_init(&ac);
	ac.writer_id = 2;
	ac.persist_timeout_ms = 200;
	assert_int_equal(dxl_appender_new(c, &ac, &t, 1, &a), DXL_E_UNREACHABLE);
	assert_int_equal(shadow_records(&last), 0);
	nic.persister = true;
	a = open_appender(c, mr, 2);
	on_disk = shadow_records(&last);
	print_message("  reopened: %llu records back on the model disk\n",
		      (unsigned long long)on_disk);
	assert_true(on_disk == n && last == n);
	dxl_appender_delete(&a);

	dxl_persist_set_test_hook(NULL, NULL);
	dxl_mr_dereg(&mr);
	dxl_ctx_delete(&c);
	dxl_fabric_delete(&f);
	dxl_logstore_close(&nic.ls);
	dxl_region_close(&nic.r);
	free(nic.shadow);
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_request_after_data, setup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
