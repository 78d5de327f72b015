/* test_store_durable.c -- a record whose lock is free is durable: write-back flush before unlock, CPU persists known to the power-failure model */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/engine.h"
#include "dxl/fabric.h"
#include "dxl/log.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/peer.h"

/*
 * The store lives in a peer process (tests/lib/peer.h) on the tcp
 * provider, whose power-failure model can lose every remote WRITE not yet
 * flushed (docs/fabric-tcp.md); this process is the coordinator. Three
 * records of one table, each at version 2, locked by us with a fabric CAS
 * (NIC-owned lock words):
 *
 *   key 11  (version 2) one-sided write-back of version 4 with
 *           dxl_record_wb_unlock_chain (WRITEs, flush READ, unlock CAS):
 *           must survive at version 4;
 *   key 13  (version 6) control: the same write-back (version 8) with the
 *           unlock CAS right after the WRITEs, no flush READ (what
 *           commit_one did): the model loses it (version 6 again) -- the
 *           hazard is real, the READ is what prevents it;
 *   key 12  (version 4) the no-flush write-back of version 6, then the
 *           store's CPU writes version 8 under the lock (dxl_store_update:
 *           persisted); must survive at version 8, not come back at 4 (the
 *           model must know the CPU persisted the slot: dxl_mr_mark_durable).
 *
 * Then the peer power-fails losing every un-flushed line (DXL_PF_ALL) and
 * this process opens the store file.
 */

#define TBL 7
#define VSIZE 100
#define SLOT 192 /* dxl_record_slot_size(100) */

static const struct dxl_region_id ID = {.cluster = "d", .node_id = 2};
static const struct dxl_table_schema SCHEMA = {.id = TBL, .value_size = VSIZE,
					       .capacity = 16};

/* ---- the peer's side ------------------------------------------------------- */

static struct dxl_store *peer_store;

struct open_arg {
	char path[200];
};

struct open_out {
	struct dxl_table_desc d;
	uint64_t slot[3]; /* keys 11, 12, 13 */
};

static int job_store_open(struct dxlt_peer_self *self, const void *arg,
			  size_t arg_len, void **out, size_t *out_len)
{
	struct open_arg a;
	if (arg_len != sizeof(a))
		return DXL_E_INVAL;
	memcpy(&a, arg, sizeof(a));
	struct dxl_store_cfg sc;
	dxl_store_cfg_init(&sc);
	sc.lock_mode = DXL_LOCKS_NIC;
	int ret = dxl_store_create(a.path, DXL_DUR_PROCESS, &ID, 0, &SCHEMA, 1, &sc,
				   &peer_store);
	struct open_out *o = calloc(1, sizeof(*o));
	if (!o)
		return DXL_E_NOMEM;
	uint8_t v[VSIZE];
	memset(v, 0x22, sizeof(v));
	for (int i = 0; !ret && i < 3; i++) {
		uint64_t ver;
		ret = dxl_store_insert(peer_store, TBL, 11 + (uint64_t)i, 1, v, VSIZE,
				       &o->slot[i], &ver);
		if (!ret && ver != 2 + 2 * (uint64_t)i) /* the table's max + 2 */
			ret = dxl_err_set(DXL_E_INTERNAL, "insert version %llu",
					  (unsigned long long)ver);
	}
	if (!ret)
		ret = dxl_store_register(peer_store, dxlt_self_fabric(self));
	if (!ret)
		ret = dxl_store_table_desc(peer_store, TBL, &o->d);
	*out = o;
	*out_len = sizeof(*o);
	return ret;
}

struct update_arg {
	uint64_t slot, owner;
};

/* the owner's CPU writes a new value for the lock holder (RPC write-back) */
static int job_store_update(struct dxlt_peer_self *self, const void *arg,
			    size_t arg_len, void **out, size_t *out_len)
{
	struct update_arg a;
	if (arg_len != sizeof(a))
		return DXL_E_INVAL;
	memcpy(&a, arg, sizeof(a));
	uint8_t v[VSIZE];
	memset(v, 0x66, sizeof(v));
	uint64_t ver = 0;
	int ret = dxl_store_update(peer_store, TBL, a.slot, a.owner, 3, v, VSIZE, &ver);
	if (!ret && ver != 8)
		ret = dxl_err_set(DXL_E_INTERNAL, "update gave version %llu",
				  (unsigned long long)ver);
	return ret;
}

static const struct dxlt_job jobs[] = {
	{"store_open", job_store_open},
	{"store_update", job_store_update},
	{NULL, NULL},
};

/* ---- the coordinator's side ------------------------------------------------ */

struct coord {
	struct dxl_fabric *f;
	struct dxl_ctx *c;
	struct dxl_qp *qp;
	uint8_t *buf;
	struct dxl_mr *mr;
	uint32_t lkey;
	struct dxl_table_desc d;
};

static int run_job(struct dxlt_peer *p, const char *name, const void *arg, size_t len,
		   void *out, size_t cap)
{
	int rc = -1;
	void *o = NULL;
	size_t olen = 0;
	assert_int_equal(dxlt_peer_job_start(p, name, arg, len), 0);
	assert_int_equal(dxlt_peer_job_wait(p, &rc, &o, &olen), 0);
	if (out && o)
		memcpy(out, o, DXL_MIN(cap, olen));
	free(o);
	return rc;
}

static void lock(struct coord *k, uint64_t slot, uint64_t own)
{
	uint64_t *res = (uint64_t *)(void *)(k->buf + 8192);
	assert_int_equal(dxlt_cas(k->c, k->qp, res, k->lkey, k->d.locks.addr + 8 * slot,
				  k->d.locks.rkey, 0, own),
			 DXL_WC_SUCCESS);
	assert_int_equal(*res, 0);
}

/* write back version cur + 2 of slot (held by own) and unlock; flush: the
 * flush READ of dxl_record_wb_unlock_chain, else the CAS right after the
 * WRITEs */
static void write_back(struct coord *k, uint64_t slot, uint64_t key, uint64_t cur,
		       uint64_t own, bool flush)
{
	uint8_t *wb = k->buf;
	uint64_t *scratch = (uint64_t *)(void *)(k->buf + 4096);
	uint8_t v[VSIZE];
	memset(v, 0x44, sizeof(v));
	struct dxl_record r = {.version = 0, .ts = 2, .key = key, .inc = 1,
			       .len = VSIZE, .live = true};
	uint64_t nv = 0;
	assert_int_equal(dxl_record_wb_build(wb, SLOT, cur, &r, v, &nv), 0);
	assert_int_equal(nv, cur + 2);
	struct dxl_wr wr[16];
	uint64_t raddr = k->d.records.addr + slot * SLOT;
	uint64_t laddr = k->d.locks.addr + 8 * slot;
	int n;
	if (flush) {
		n = dxl_record_wb_unlock_chain(wb, SLOT, k->lkey, raddr, k->d.records.rkey,
					       laddr, k->d.locks.rkey, own, scratch, wr, 16);
		assert_int_equal(n, 9);
		/* the rule: what makes the record durable comes before the
		 * unlock. Post the chain only up to its unlock (as if the
		 * peer had failed right after executing it): the record
		 * must be durable with that alone */
		int cas = -1;
		for (int i = 0; i < n; i++)
			if (wr[i].op == DXL_WR_CAS)
				cas = i;
		assert_true(cas >= 0);
		wr[cas].next = NULL;
		wr[cas].flags |= DXL_WR_SIGNALED;
		n = cas + 1;
	} else {
		n = dxl_record_wb_chain(wb, SLOT, k->lkey, raddr, k->d.records.rkey, wr, 16);
		assert_int_equal(n, 7);
		wr[n] = (struct dxl_wr){.op = DXL_WR_CAS, .flags = DXL_WR_SIGNALED,
					.local = &scratch[1], .len = 8, .lkey = k->lkey,
					.remote_addr = laddr, .rkey = k->d.locks.rkey,
					.compare_add = own, .swap = 0};
		wr[n - 1].next = &wr[n];
		n++;
	}
	for (int i = 0; i < n; i++)
		wr[i].wr_id = 100 + (uint64_t)i;
	assert_int_equal(dxl_qp_post(k->qp, wr, NULL), 0);
	struct dxl_wc wc;
	assert_int_equal(dxlt_wait_wc(k->c, &wc, 1, dxlt_wait_ms()), 1);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 100 + (uint64_t)n - 1);
	assert_int_equal(scratch[1], own); /* the unlock took effect */
}

static void test_durable_when_unlocked(void **state)
{
	if (dxlt_test_provider() != DXL_FABRIC_TCP) {
		print_message("  SKIPPED: the power-failure model exists only in the "
			      "tcp provider\n");
		skip();
	}
	dxlt_watchdog_arm(120, "test_durable_when_unlocked");
	char dir[] = "/tmp/dxl-durable-XXXXXX";
	assert_non_null(mkdtemp(dir));
	struct open_arg oa;
	snprintf(oa.path, sizeof(oa.path), "%s/store", dir);
	struct dxl_fabric_cfg fc;
	dxlt_fabric_cfg_from_env(&fc);
	fc.node_id = 2;
	struct dxlt_peer *peer;
	assert_int_equal(dxlt_peer_start(&fc, &peer), 0);
	struct open_out o;
	int rc = run_job(peer, "store_open", &oa, sizeof(oa), &o, sizeof(o));
	if (rc)
		fail_msg("store_open in the peer: %s", dxl_errname(rc));

	struct coord k = {0};
	fc.node_id = 1;
	assert_int_equal(dxl_fabric_new(&fc, &k.f), 0);
	assert_int_equal(dxl_ctx_new(k.f, 0, &k.c), 0);
	assert_int_equal(dxl_qp_connect(k.c, dxlt_peer_addr(peer), 0, &k.qp),
			 DXL_E_NOENT); /* the peer made no ctx: one more */
	assert_int_equal(dxlt_peer_ctx_new(peer, 0), 0);
	assert_int_equal(dxl_qp_connect(k.c, dxlt_peer_addr(peer), 0, &k.qp), 0);
	k.buf = dxlt_alloc_pages(16384);
	assert_int_equal(dxl_mr_reg(k.f, k.buf, 16384, DXL_MR_LOCAL_WRITE, &k.mr), 0);
	k.lkey = dxl_mr_lkey(k.mr);
	k.d = o.d;
	const uint64_t own = DXL_LOCK_OWNER(9, 1);

	lock(&k, o.slot[0], own);
	write_back(&k, o.slot[0], 11, 2, own, true);  /* key 11: the fix */
	lock(&k, o.slot[2], own);
	write_back(&k, o.slot[2], 13, 6, own, false); /* key 13: control */
	lock(&k, o.slot[1], own);
	write_back(&k, o.slot[1], 12, 4, own, false); /* key 12: then the CPU */
	lock(&k, o.slot[1], own + 1);
	struct update_arg ua = {.slot = o.slot[1], .owner = own + 1};
	rc = run_job(peer, "store_update", &ua, sizeof(ua), NULL, 0);
	if (rc)
		fail_msg("store_update in the peer: %s", dxl_errname(rc));
	uint64_t pending = 0;
	assert_int_equal(dxlt_peer_pending_lines(peer, &pending), 0);
	print_message("  before the power failure: %llu un-flushed lines\n",
		      (unsigned long long)pending);
	assert_true(pending > 0); /* key 13's lines at least */
	assert_int_equal(dxlt_peer_power_fail(peer, DXL_PF_ALL, 1), 0);
	dxlt_peer_stop(&peer);

	struct dxl_store *s;
	assert_int_equal(dxl_store_open(oa.path, DXL_DUR_PROCESS, &ID, NULL, &s), 0);
	struct dxl_record r[3];
	uint8_t v[3][VSIZE];
	for (int i = 0; i < 3; i++)
		assert_int_equal(dxl_store_read(s, TBL, o.slot[i], &r[i], v[i], VSIZE), 0);
	print_message("  after it: key 11 (flush before unlock) version %llu, key 13 "
		      "(no flush) version %llu, key 12 (CPU write after a remote "
		      "one) version %llu\n", (unsigned long long)r[0].version,
		      (unsigned long long)r[2].version, (unsigned long long)r[1].version);
	uint8_t want[VSIZE];
	/* the control shows the model loses an unflushed write-back */
	assert_int_equal(r[2].version, 6);
	memset(want, 0x22, VSIZE);
	assert_memory_equal(v[2], want, VSIZE);
	/* the flush READ before the unlock kept it */
	assert_int_equal(r[0].version, 4);
	memset(want, 0x44, VSIZE);
	assert_memory_equal(v[0], want, VSIZE);
	/* the CPU's persisted write stays, whatever came remotely before */
	assert_int_equal(r[1].version, 8);
	memset(want, 0x66, VSIZE);
	assert_memory_equal(v[1], want, VSIZE);
	dxl_store_close(&s);
	dxl_mr_dereg(&k.mr);
	dxl_fabric_delete(&k.f);
	dxlt_free_pages(k.buf, 16384);
	char cmd[100];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
	dxlt_watchdog_disarm();
}

int main(void)
{
	dxlt_peer_child_hook(jobs);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_durable_when_unlocked),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
