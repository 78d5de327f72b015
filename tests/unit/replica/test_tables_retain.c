/* test_tables_retain.c -- the primary's retention passes only records whose effects are durable in its store */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/engine.h"
#include "dxl/log.h"
#include "replica/tables_internal.h"

/*
 * A primary's tables (one table, CPU-owned locks so the test can play the
 * coordinator) and its log (one ring written locally, with the writer's
 * watermark). dxl_tables_applied_pos is where the retention of a ring must
 * stop (replica/server.c): on the primary, before the first record whose
 * effects are not durable in the store yet (docs/engine.md: a ring's head
 * may pass a record only once its effects are persistent in the store).
 */

#define RING 65536
#define TBL 7

struct fx {
	char dir[64];
	struct dxl_tables *t;
	struct dxl_store *st;
	struct dxl_region *lr;
	struct dxl_logstore *ls;
	uint64_t tail_pos, tail_seq;
	uint64_t pos[16]; /* position of record i */
	int nrec;
};

static void wmark(struct fx *f, uint64_t ts)
{
	uint8_t *ctl = (uint8_t *)dxl_region_data(f->lr) + dxl_logstore_ctl_off(f->ls, 0);
	uint64_t w[2] = {ts, ts ^ DXL_RING_WMARK_MAGIC};
	memcpy(ctl + DXL_RING_WMARK_OFF, w, sizeof(w));
	assert_int_equal(dxl_logstore_watermark(f->ls, 0), ts);
}

static void append(struct fx *f, uint64_t txn, uint64_t ts, const void *payload,
		   uint32_t len)
{
	struct dxl_rec r = {.type = DXL_REC_DATA, .writer = 0, .epoch = 1,
			    .txn_id = txn, .commit_ts = ts, .payload = payload,
			    .payload_len = len};
	uint32_t size = dxl_rec_size(0, len);
	struct dxl_ring_head h;
	assert_int_equal(dxl_logstore_head(f->ls, 0, &h), 0);
	struct dxl_ring_place p;
	assert_int_equal(dxl_ring_place(RING, f->tail_pos, f->tail_seq, h.pos, size, &p), 0);
	assert_int_equal(p.skip_len, 0);
	uint8_t *buf = (uint8_t *)dxl_region_data(f->lr) + dxl_logstore_buf_off(f->ls, 0);
	r.seq = p.rec_seq;
	assert_int_equal(dxl_rec_encode(&r, NULL, buf + p.rec_off, RING - p.rec_off),
			 (int)size);
	f->pos[f->nrec++] = f->tail_pos;
	f->tail_pos = p.new_tail_pos;
	f->tail_seq = p.new_tail_seq;
}

/* a write set of one entry */
static void append_ws(struct fx *f, uint64_t txn, uint64_t ts, enum dxl_ws_op op,
		      uint64_t key, uint64_t version)
{
	uint8_t v[8] = "value!!";
	struct dxl_ws_entry e = {.table = TBL, .op = op, .key = key, .version = version,
				 .value = op == DXL_WS_DELETE ? NULL : v,
				 .len = op == DXL_WS_DELETE ? 0 : 8};
	uint8_t buf[256];
	int n = dxl_writeset_encode(&e, 1, buf, sizeof(buf));
	assert_true(n > 0);
	append(f, txn, ts, buf, (uint32_t)n);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/dxl-retain-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	struct dxl_table_schema sc = {.id = TBL, .value_size = 32, .capacity = 64};
	struct dxl_tables_cfg tc = {.dir = f->dir, .cluster = "c", .node_id = 1,
				    .shard = 0, .durability = DXL_DUR_PROCESS,
				    .create = true, .lock_mode = DXL_LOCKS_CPU,
				    .tables = &sc, .ntables = 1};
	assert_int_equal(dxl_tables_open(&tc, &f->t), 0);
	f->st = dxl_tables_store(f->t);
	char path[128];
	snprintf(path, sizeof(path), "%s/log", f->dir);
	struct dxl_region_id lid = {.node_id = 1, .kind = DXL_REGION_LOG};
	snprintf(lid.cluster, sizeof(lid.cluster), "c");
	uint64_t bytes = DXL_ALIGN_UP(dxl_logstore_bytes(1, RING), 4096ull);
	assert_int_equal(dxl_region_create(path, bytes, DXL_DUR_PROCESS, &lid, &f->lr), 0);
	assert_int_equal(dxl_logstore_format(f->lr, 0, 1, RING), 0);
	assert_int_equal(dxl_logstore_open(f->lr, &f->ls), 0);
	f->tail_seq = 1;
	dxl_tables_set_log(f->t, f->ls);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	dxl_tables_close(&f->t);
	dxl_logstore_close(&f->ls);
	dxl_region_close(&f->lr);
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static uint64_t ins(struct fx *f, uint64_t key, uint64_t *ver)
{
	uint64_t slot;
	assert_int_equal(dxl_store_insert(f->st, TBL, key, 10, "v", 1, &slot, ver), 0);
	return slot;
}

static void test_primary_retains_until_durable(void **state)
{
	struct fx *f = *state;
	uint64_t v1, v2, v3;
	uint64_t s1 = ins(f, 1, &v1), s2 = ins(f, 2, &v2);
	ins(f, 3, &v3);
	const uint64_t T1 = DXL_LOCK_OWNER(4, 1), T2 = DXL_LOCK_OWNER(4, 2),
		       T3 = DXL_LOCK_OWNER(4, 3), T4 = DXL_LOCK_OWNER(4, 4);
	/* T1 updates key 1: logged (decided), its write-back not done yet:
	 * the lock is still T1's, the store at the old version */
	assert_int_equal(dxl_store_lock(f->st, TBL, s1, T1, NULL), 0);
	append_ws(f, T1, 100, DXL_WS_UPDATE, 1, v1 + 2);
	/* T2 updates key 2 and aborts: a marker cancels it */
	append_ws(f, T2, 101, DXL_WS_UPDATE, 2, v2 + 2);
	uint8_t m[DXL_ABORT_SIZE];
	assert_int_equal(dxl_abort_marker_encode(T2, m, sizeof(m)), DXL_ABORT_SIZE);
	append(f, T2, 101, m, sizeof(m));
	/* T3 deletes key 3 (done: the key is gone) */
	uint64_t s3;
	assert_int_equal(dxl_store_find(f->st, TBL, 3, &s3), 0);
	assert_int_equal(dxl_store_lock(f->st, TBL, s3, T3, NULL), 0);
	assert_int_equal(dxl_store_delete(f->st, TBL, s3, T3, 102, NULL), 0);
	assert_int_equal(dxl_store_unlock(f->st, TBL, s3, T3), 0);
	append_ws(f, T3, 102, DXL_WS_DELETE, 3, v3 + 2);
	/* T4 after the watermark: not decided */
	append_ws(f, T4, 200, DXL_WS_UPDATE, 2, v2 + 2);
	wmark(f, 150);
	(void)s2;

	/* the write-back of T1 is missing: retention stops at T1's record */
	uint64_t p = dxl_tables_applied_pos(f->t, 0);
	print_message("  T1's write-back pending: retention bound %llu (T1's record "
		      "at %llu)\n", (unsigned long long)p,
		      (unsigned long long)f->pos[0]);
	assert_int_equal(p, f->pos[0]);
	/* its write-back (persisted by the CPU) without the unlock: still not */
	assert_int_equal(dxl_store_update(f->st, TBL, s1, T1, 100, "new", 3, NULL), 0);
	assert_int_equal(dxl_tables_applied_pos(f->t, 0), f->pos[0]);
	/* unlocked: T1 is durable; T2 aborted, T3's delete is done; T4 is
	 * past the watermark */
	assert_int_equal(dxl_store_unlock(f->st, TBL, s1, T1), 0);
	p = dxl_tables_applied_pos(f->t, 0);
	print_message("  after T1's write-back and unlock: bound %llu (T4's record, "
		      "past the watermark, at %llu)\n", (unsigned long long)p,
		      (unsigned long long)f->pos[4]);
	assert_int_equal(p, f->pos[4]);
	/* the watermark passes T4, whose write-back is not there */
	wmark(f, 300);
	assert_int_equal(dxl_tables_applied_pos(f->t, 0), f->pos[4]);
	/* a later record of the same key with a higher version covers it:
	 * key 2 written at T4's version by someone (as a later write-back) */
	assert_int_equal(dxl_store_lock(f->st, TBL, s2, T4, NULL), 0);
	assert_int_equal(dxl_store_update(f->st, TBL, s2, T4, 200, "x", 1, NULL), 0);
	assert_int_equal(dxl_store_unlock(f->st, TBL, s2, T4), 0);
	assert_int_equal(dxl_tables_applied_pos(f->t, 0), f->tail_pos);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_primary_retains_until_durable,
						setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
