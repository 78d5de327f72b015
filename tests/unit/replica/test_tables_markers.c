/* test_tables_markers.c -- the backup's applier keeps every abort marker
 * whose record it has not passed (issue 12, defect 2)
 *
 * A coordinator whose transaction aborts after its write set reached the
 * log appends an abort marker (DXAB + txn id) after it in the same ring; a
 * backup's applier (replica/tables.c, dxl_tables_apply) collects the markers
 * as they arrive and passes over the write sets they cancel. Markers can
 * arrive long before their records are applied: the resolved timestamp
 * (the smallest watermark of the live rings) may stay behind while one
 * writer is slow. The applier once held at most 4096 markers and dropped
 * the older half beyond that: a record whose marker was dropped was later
 * applied, an aborted transaction's write on the backup only.
 *
 * Here a log of two rings is written locally: ring 0 (live) keeps its
 * watermark low, ring 1 holds an aborted write set A (key 1) and its marker,
 * then 6000 more aborted write sets with their markers, then a committed one
 * B (key 2). The applier runs once (it collects 6001 markers, applies
 * nothing), then ring 0's watermark rises and the applier passes
 * everything: A, and every other aborted one, must be skipped, B applied.
 * A second batch then shows that markers whose records were passed are
 * forgotten (the set does not grow without bound) and the new ones kept.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "common/endian.h"
#include "dxl/engine.h"
#include "dxl/log.h"
#include "replica/tables_internal.h"

#define RING (8u << 20)
#define NABORT 6000

struct fx {
	char dir[128];
	struct dxl_tables *t;
	struct dxl_region *r;
	struct dxl_logstore *ls;
	uint64_t tail_pos[2], tail_seq[2];
};

static void append(struct fx *f, uint32_t ring, uint64_t txn, uint64_t ts, const void *p,
		   uint32_t len)
{
	struct dxl_rec r = {.type = DXL_REC_DATA, .writer = ring, .epoch = 1, .txn_id = txn,
			    .commit_ts = ts, .payload = p, .payload_len = len};
	uint32_t size = dxl_rec_size(0, len);
	struct dxl_ring_head h;
	assert_int_equal(dxl_logstore_head(f->ls, ring, &h), 0);
	struct dxl_ring_place pl;
	assert_int_equal(dxl_ring_place(RING, f->tail_pos[ring], f->tail_seq[ring], h.pos, size,
					&pl),
			 0);
	uint8_t *buf = (uint8_t *)dxl_region_data(f->r) + dxl_logstore_buf_off(f->ls, ring);
	if (pl.skip_len)
		assert_int_equal(dxl_rec_encode_skip(ring, 1, pl.skip_seq, pl.skip_len,
						     buf + pl.skip_off, pl.skip_len),
				 (int)pl.skip_len);
	r.seq = pl.rec_seq;
	assert_int_equal(dxl_rec_encode(&r, NULL, buf + pl.rec_off, RING - pl.rec_off), (int)size);
	f->tail_pos[ring] = pl.new_tail_pos;
	f->tail_seq[ring] = pl.new_tail_seq;
}

/* an insert of key (table 1) by txn at ts */
static void append_ws(struct fx *f, uint32_t ring, uint64_t txn, uint64_t ts, uint64_t key)
{
	uint8_t v[8], buf[256];
	dxl_put_le64(v, key * 7);
	struct dxl_ws_entry e = {.table = 1, .op = DXL_WS_INSERT, .key = key, .version = 2,
				 .value = v, .len = 8};
	int n = dxl_writeset_encode(&e, 1, buf, sizeof(buf));
	assert_true(n > 0);
	append(f, ring, txn, ts, buf, (uint32_t)n);
}

static void append_marker(struct fx *f, uint32_t ring, uint64_t txn, uint64_t ts)
{
	uint8_t m[DXL_ABORT_SIZE];
	assert_int_equal(dxl_abort_marker_encode(txn, m, sizeof(m)), DXL_ABORT_SIZE);
	append(f, ring, txn, ts, m, sizeof(m));
}

static void set_watermark(struct fx *f, uint32_t ring, uint64_t ts)
{
	uint8_t *p = (uint8_t *)dxl_region_data(f->r) + dxl_logstore_ctl_off(f->ls, ring) +
		     DXL_RING_WMARK_OFF;
	dxl_put_le64(p, ts);
	dxl_put_le64(p + 8, ts ^ DXL_RING_WMARK_MAGIC);
	assert_int_equal(dxl_logstore_watermark(f->ls, ring), ts);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/dxl-test-markers-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	static const struct dxl_table_schema sc[] = {{.id = 1, .value_size = 8, .capacity = 16384}};
	struct dxl_tables_cfg tc = {.dir = f->dir, .cluster = "mk", .node_id = 1, .shard = 0,
				    .durability = DXL_DUR_PROCESS, .create = true,
				    .lock_mode = DXL_LOCKS_NIC, .tables = sc, .ntables = 1};
	if (dxl_tables_open(&tc, &f->t))
		fail_msg("tables: %s", dxl_errmsg());
	char path[300];
	snprintf(path, sizeof(path), "%s/shard-0.log", f->dir);
	struct dxl_region_id id = {.node_id = 1, .kind = DXL_REGION_LOG};
	snprintf(id.cluster, sizeof(id.cluster), "mk");
	uint64_t bytes = DXL_ALIGN_UP(dxl_logstore_bytes(2, RING), 4096ull);
	assert_int_equal(dxl_region_create(path, bytes, DXL_DUR_PROCESS, &id, &f->r), 0);
	assert_int_equal(dxl_logstore_format(f->r, 0, 2, RING), 0);
	assert_int_equal(dxl_logstore_open(f->r, &f->ls), 0);
	for (int i = 0; i < 2; i++)
		f->tail_seq[i] = 1;
	dxl_tables_set_log(f->t, f->ls);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	dxl_tables_close(&f->t);
	dxl_logstore_close(&f->ls);
	dxl_region_close(&f->r);
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	if (system(cmd)) {
	}
	free(f);
	return 0;
}

static bool has_key(struct fx *f, uint64_t key)
{
	return dxl_store_find(dxl_tables_store(f->t), 1, key, NULL) == 0;
}

static void test_markers_beyond_4096_are_kept(void **state)
{
	struct fx *f = *state;
	const uint64_t A = DXL_LOCK_OWNER(7, 1), B = DXL_LOCK_OWNER(7, 2);
	uint64_t ts = 10;
	append_ws(f, 1, A, ts++, 1);
	append_marker(f, 1, A, ts++);
	for (uint64_t i = 0; i < NABORT; i++) {
		uint64_t txn = DXL_LOCK_OWNER(8, i + 1);
		append_ws(f, 1, txn, ts++, 100 + i % 1000);
		append_marker(f, 1, txn, ts++);
	}
	append_ws(f, 1, B, ts++, 2);
	set_watermark(f, 1, ts);
	set_watermark(f, 0, 1); /* ring 0's writer is live and behind */
	/* both rings live: resolved = 1, nothing applied, every marker seen */
	int n = dxl_tables_apply(f->t, f->ls, 3, 1000000);
	assert_int_equal(n, 0);
	struct dxl_tables_apply_stats st;
	dxl_tables_apply_stats(f->t, &st);
	uint64_t held = st.markers;
	printf("  markers held while nothing is applied: %llu\n", (unsigned long long)held);
	/* ring 0 catches up: everything below ts is resolved */
	set_watermark(f, 0, ts);
	n = dxl_tables_apply(f->t, f->ls, 3, 1000000);
	dxl_tables_apply_stats(f->t, &st);
	printf("  passed %d records: %llu aborted, %llu entries applied\n", n,
	       (unsigned long long)st.aborted, (unsigned long long)st.applied);
	assert_int_equal(n, 2 * (NABORT + 1) + 1);
	if (has_key(f, 1))
		fail_msg("key 1 of the aborted transaction A was applied: its abort marker was dropped");
	for (uint64_t k = 100; k < 1100; k++)
		if (has_key(f, k))
			fail_msg("key %llu of an aborted transaction was applied", (unsigned long long)k);
	assert_true(has_key(f, 2)); /* B committed */
	assert_int_equal(st.aborted, NABORT + 1);
	assert_int_equal(held, NABORT + 1);

	/* a second batch: the passed markers are forgotten, the new ones kept */
	uint64_t ts2 = ts;
	for (uint64_t i = 0; i < NABORT; i++) {
		uint64_t txn = DXL_LOCK_OWNER(9, i + 1);
		append_ws(f, 1, txn, ts2++, 2000 + i % 1000);
		append_marker(f, 1, txn, ts2++);
	}
	set_watermark(f, 1, ts2);
	n = dxl_tables_apply(f->t, f->ls, 3, 1000000); /* ring 0 still at ts */
	assert_int_equal(n, 0);
	dxl_tables_apply_stats(f->t, &st);
	printf("  second batch: %llu markers held (of %d seen in all)\n",
	       (unsigned long long)st.markers, 2 * NABORT + 1);
	assert_true(st.markers >= NABORT);
	assert_true(st.markers < 2 * NABORT + 1);
	set_watermark(f, 0, ts2);
	n = dxl_tables_apply(f->t, f->ls, 3, 1000000);
	assert_int_equal(n, 2 * NABORT);
	for (uint64_t k = 2000; k < 3000; k++)
		if (has_key(f, k))
			fail_msg("key %llu of an aborted transaction was applied", (unsigned long long)k);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_markers_beyond_4096_are_kept, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
