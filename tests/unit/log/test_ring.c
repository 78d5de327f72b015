/* test_ring.c -- ring layout, head slots, placement at the wrap, backpressure, scan */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/log.h"

#define RING 16384

struct fx {
	char dir[128];
	char path[256];
	struct dxl_region *r;
	struct dxl_logstore *ls;
	/* a local writer on ring 0 */
	uint64_t tail_pos, tail_seq;
	uint32_t inc; /* its incarnation */
};

static const struct dxl_region_id ID = {.cluster = "t", .node_id = 1,
					.kind = DXL_REGION_LOG};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/dxl-test-ring-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/log", f->dir);
	uint64_t bytes = DXL_ALIGN_UP(dxl_logstore_bytes(2, RING), 4096ull);
	assert_int_equal(dxl_region_create(f->path, bytes, DXL_DUR_PROCESS, &ID, &f->r), 0);
	assert_int_equal(dxl_logstore_format(f->r, 7, 2, RING), 0);
	assert_int_equal(dxl_logstore_open(f->r, &f->ls), 0);
	f->tail_pos = 0;
	f->tail_seq = 1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	dxl_logstore_close(&f->ls);
	dxl_region_close(&f->r);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	int rc = system(cmd);
	free(f);
	return rc;
}

/* append a record with payload "rec-<n>" padded to len, as a writer would */
static int append(struct fx *f, uint32_t n, uint32_t len)
{
	uint8_t payload[4096];
	memset(payload, (int)(n & 0xff), len);
	snprintf((char *)payload, sizeof(payload), "rec-%u", n);
	struct dxl_rec r = {.type = DXL_REC_DATA, .writer = 0, .epoch = 1,
			    .txn_id = n, .commit_ts = n, .payload = payload,
			    .payload_len = len, .incarnation = f->inc};
	uint32_t size = dxl_rec_size(0, len);
	struct dxl_ring_head h;
	assert_int_equal(dxl_logstore_head(f->ls, 0, &h), 0);
	struct dxl_ring_place p;
	int ret = dxl_ring_place(RING, f->tail_pos, f->tail_seq, h.pos, size, &p);
	if (ret)
		return ret;
	uint8_t *buf = (uint8_t *)dxl_region_data(f->r) + dxl_logstore_buf_off(f->ls, 0);
	if (p.skip_len)
		assert_int_equal(dxl_rec_encode_skip_inc(0, 1, f->inc, p.skip_seq,
							 p.skip_len, buf + p.skip_off,
							 p.skip_len),
				 (int)p.skip_len);
	r.seq = p.rec_seq;
	assert_int_equal(dxl_rec_encode(&r, NULL, buf + p.rec_off, RING - p.rec_off),
			 (int)size);
	f->tail_pos = p.new_tail_pos;
	f->tail_seq = p.new_tail_seq;
	return 0;
}

struct seen {
	uint32_t n;
	uint64_t txn[1024];
	uint64_t pos[1024];
	uint32_t stop_after;
};

static int collect(const struct dxl_rec *rec, uint64_t pos, void *arg)
{
	struct seen *s = arg;
	s->pos[s->n] = pos;
	s->txn[s->n++] = rec->txn_id;
	char want[32];
	snprintf(want, sizeof(want), "rec-%llu", (unsigned long long)rec->txn_id);
	assert_memory_equal(rec->payload, want, strlen(want));
	return s->stop_after && s->n >= s->stop_after;
}

static void test_format_and_open(void **state)
{
	struct fx *f = *state;
	assert_int_equal(dxl_logstore_nrings(f->ls), 2);
	assert_int_equal(dxl_logstore_ring_size(f->ls), RING);
	assert_int_equal(dxl_logstore_shard(f->ls), 7);
	struct dxl_ring_head h;
	assert_int_equal(dxl_logstore_head(f->ls, 1, &h), 0);
	assert_int_equal(h.pos, 0);
	assert_int_equal(h.seq, 1);
	assert_int_equal(dxl_logstore_format(f->r, 7, 2, RING), DXL_E_EXIST);
	assert_int_equal(dxl_logstore_format(f->r, 7, 0, RING), DXL_E_INVAL);
	assert_int_equal(dxl_logstore_format(f->r, 7, 2, 5000), DXL_E_INVAL);
	assert_int_equal(dxl_logstore_format(f->r, 7, 64, RING), DXL_E_INVAL);
	assert_int_equal(dxl_ring_scan(f->ls, 0, NULL, NULL, NULL, NULL), 0);
	/* a damaged header is refused */
	uint8_t *d = dxl_region_data(f->r);
	d[13] ^= 1;
	struct dxl_logstore *ls2;
	assert_int_equal(dxl_logstore_open(f->r, &ls2), DXL_E_CORRUPT);
	d[13] ^= 1;
	assert_int_equal(dxl_logstore_open(f->r, &ls2), 0);
	dxl_logstore_close(&ls2);
}

static void test_place_arithmetic(void **state)
{
	struct dxl_ring_place p;
	/* plain */
	assert_int_equal(dxl_ring_place(RING, 0, 1, 0, 256, &p), 0);
	assert_int_equal(p.skip_len, 0);
	assert_int_equal(p.rec_off, 0);
	assert_int_equal(p.new_tail_pos, 256);
	assert_int_equal(p.new_tail_seq, 2);
	/* straddles the end: a skip record fills the rest */
	assert_int_equal(dxl_ring_place(RING, RING - 128, 10, RING - 1024, 256, &p), 0);
	assert_int_equal(p.skip_len, 128);
	assert_int_equal(p.skip_off, RING - 128);
	assert_int_equal(p.skip_seq, 10);
	assert_int_equal(p.rec_off, 0);
	assert_int_equal(p.rec_pos, RING);
	assert_int_equal(p.rec_seq, 11);
	assert_int_equal(p.new_tail_pos, RING + 256);
	assert_int_equal(p.new_tail_seq, 12);
	/* exactly fits up to the end: no skip */
	assert_int_equal(dxl_ring_place(RING, RING - 256, 3, 512, 256, &p), 0);
	assert_int_equal(p.skip_len, 0);
	assert_int_equal(p.new_tail_pos, RING);
	/* full: the head has not advanced far enough */
	assert_int_equal(dxl_ring_place(RING, RING, 5, 0, 64, &p), DXL_E_FULL);
	assert_int_equal(dxl_ring_place(RING, RING + 100 * 64, 5, 128, 256, &p), DXL_E_FULL);
	/* the skip counts against free space too */
	assert_int_equal(dxl_ring_place(RING, 2 * RING - 128, 5, RING + 200, 256, &p), DXL_E_FULL);
	assert_int_equal(dxl_ring_place(RING, 2 * RING - 128, 5, RING + 256, 256, &p), 0);
	/* never fits / bad input */
	assert_int_equal(dxl_ring_place(RING, 0, 1, 0, RING / 2 + 64, &p), DXL_E_TOOBIG);
	assert_int_equal(dxl_ring_place(RING, 0, 1, 0, 100, &p), DXL_E_INVAL);
	assert_int_equal(dxl_ring_place(RING, 10, 1, 64, 64, &p), DXL_E_STALE);
}

static void test_append_wrap_and_scan(void **state)
{
	struct fx *f = *state;
	uint32_t next_applied = 1;
	struct dxl_ring_head h;
	/* several laps: the "replica" applies and advances the head when full */
	for (uint32_t n = 1; n <= 400; n++) {
		uint32_t len = 20 + (n * 37) % 900;
		int ret;
		while ((ret = append(f, n, len)) == DXL_E_FULL) {
			/* apply everything visible, then reclaim it */
			struct seen s = {0};
			uint64_t end_pos, end_seq;
			int got = dxl_ring_scan(f->ls, 0, collect, &s, &end_pos, &end_seq);
			assert_true(got > 0);
			for (uint32_t i = 0; i < s.n; i++)
				assert_int_equal(s.txn[i], next_applied++);
			assert_int_equal(end_pos, f->tail_pos);
			assert_int_equal(end_seq, f->tail_seq);
			assert_int_equal(dxl_logstore_set_head(f->ls, 0, end_pos, end_seq, s.n ? s.txn[s.n - 1] : 0), 0);
		}
		assert_int_equal(ret, 0);
	}
	assert_true(f->tail_pos > 3 * RING); /* it wrapped several times */
	struct seen s = {0};
	int got = dxl_ring_scan(f->ls, 0, collect, &s, NULL, NULL);
	assert_int_equal(got, (int)(401 - next_applied));
	for (uint32_t i = 0; i < s.n; i++)
		assert_int_equal(s.txn[i], next_applied + i);
	/* head may not go back */
	assert_int_equal(dxl_logstore_head(f->ls, 0, &h), 0);
	assert_int_equal(dxl_logstore_set_head(f->ls, 0, h.pos - 64, h.seq, h.last_ts), DXL_E_INVAL);
	assert_int_equal(dxl_logstore_set_head(f->ls, 0, h.pos, h.seq, h.last_ts - 1), DXL_E_INVAL);
	/* the other ring is untouched */
	assert_int_equal(dxl_ring_scan(f->ls, 1, NULL, NULL, NULL, NULL), 0);
}

static void test_scan_stops_at_torn_and_stale(void **state)
{
	struct fx *f = *state;
	for (uint32_t n = 1; n <= 5; n++)
		assert_int_equal(append(f, n, 100), 0);
	uint64_t pos5 = f->tail_pos - dxl_rec_size(0, 100);
	/* tear record 5: its middle never arrived */
	uint8_t *buf = (uint8_t *)dxl_region_data(f->r) + dxl_logstore_buf_off(f->ls, 0);
	memset(buf + pos5 + 70, 0xee, 8);
	struct seen s = {0};
	uint64_t end_pos;
	assert_int_equal(dxl_ring_scan(f->ls, 0, collect, &s, &end_pos, NULL), 4);
	assert_int_equal(end_pos, pos5);
	/* stop early on request */
	struct seen s2 = {.stop_after = 2};
	assert_int_equal(dxl_ring_scan(f->ls, 0, collect, &s2, &end_pos, NULL), 2);
	assert_int_equal(end_pos, s2.pos[1]);

	/* a stale record of an earlier lap: a valid record with an old seq */
	f->tail_pos = pos5;
	f->tail_seq = 5;
	assert_int_equal(append(f, 5, 100), 0);
	uint8_t saved[512];
	uint32_t sz = dxl_rec_size(0, 100);
	memcpy(saved, buf, sz); /* record 1, seq 1, at offset 0 */
	memcpy(buf + f->tail_pos, saved, sz); /* as if left from a lap ago */
	s = (struct seen){0};
	assert_int_equal(dxl_ring_scan(f->ls, 0, collect, &s, &end_pos, NULL), 5);
	assert_int_equal(end_pos, f->tail_pos);
}

/* where a walk ends, and why */
static enum dxl_ring_end walk_end(struct fx *f, uint64_t *pos, uint32_t *n)
{
	struct dxl_ring_iter it;
	struct dxl_rec rec;
	assert_int_equal(dxl_ring_iter_init(&it, f->ls, 0), 0);
	*n = 0;
	while (dxl_ring_iter_next(&it, &rec, NULL))
		(*n)++;
	*pos = it.pos;
	return it.end;
}

/*
 * Issue 11 defect 1, with the library's own encode and scan: record k is
 * torn by a crash, k+1 (never acknowledged) survived behind it; a later
 * writer (a new incarnation) appends k' of the same size where k was. Its
 * scan must stop after k': k+1 was written after k, not after k', and
 * would come back with a lower timestamp (and an older epoch).
 */
static void test_ghost_record_never_returns(void **state)
{
	struct fx *f = *state;
	f->inc = 1;
	for (uint32_t n = 1; n <= 5; n++)
		assert_int_equal(append(f, n, 200), 0);
	const uint64_t pos_k = f->tail_pos, seq_k = f->tail_seq;
	assert_int_equal(append(f, 6, 200), 0); /* k */
	const uint64_t pos_k1 = f->tail_pos;
	assert_int_equal(append(f, 7, 200), 0); /* k+1 */
	uint8_t *buf = (uint8_t *)dxl_region_data(f->r) + dxl_logstore_buf_off(f->ls, 0);
	/* the power failure lost one line of k, none of k+1 */
	memset(buf + pos_k % RING + 128, 0, 64);
	uint64_t end;
	uint32_t n;
	assert_int_equal(walk_end(f, &end, &n), DXL_RING_END_TORN);
	assert_int_equal(n, 5);
	assert_int_equal(end, pos_k);
	/* the next writer appends from the end its scan found, k' the size of k */
	f->tail_pos = pos_k;
	f->tail_seq = seq_k;
	f->inc = 2;
	assert_int_equal(append(f, 106, 200), 0);
	assert_int_equal(f->tail_pos, pos_k1); /* k+1 lies right behind k' */
	struct seen s = {0};
	assert_int_equal(dxl_ring_scan(f->ls, 0, collect, &s, &end, NULL), 6);
	assert_int_equal(s.txn[5], 106);
	assert_int_equal(end, pos_k1);
	assert_int_equal(walk_end(f, &end, &n), DXL_RING_END_GHOST);
	/* the merged scan (what replay and tailers use) sees k' last, and no
	 * timestamp going backwards (k+1 has 7 < 106) */
	assert_int_equal(dxl_log_scan_merged(f->ls, UINT64_MAX, NULL, NULL), 6);
	/* the same writer incarnation after k' continues the ring normally */
	assert_int_equal(append(f, 107, 200), 0);
	assert_int_equal(dxl_ring_scan(f->ls, 0, NULL, NULL, NULL, NULL), 7);
	/* a higher incarnation may follow a lower one, never the reverse */
	f->inc = 1;
	assert_int_equal(append(f, 108, 200), 0);
	assert_int_equal(dxl_ring_scan(f->ls, 0, NULL, NULL, NULL, NULL), 7);
}

/* the end reasons a walk reports */
static void test_walk_end_reasons(void **state)
{
	struct fx *f = *state;
	uint64_t end;
	uint32_t n;
	assert_int_equal(walk_end(f, &end, &n), DXL_RING_END_EMPTY);
	for (uint32_t k = 1; k <= 3; k++)
		assert_int_equal(append(f, k, 64), 0);
	assert_int_equal(walk_end(f, &end, &n), DXL_RING_END_EMPTY);
	assert_int_equal(n, 3);
	/* a record of an earlier lap where the next one should be */
	uint8_t *buf = (uint8_t *)dxl_region_data(f->r) + dxl_logstore_buf_off(f->ls, 0);
	uint32_t sz = dxl_rec_size(0, 64);
	memcpy(buf + f->tail_pos, buf, sz);
	assert_int_equal(walk_end(f, &end, &n), DXL_RING_END_STALE);
	assert_int_equal(end, f->tail_pos);
	/* its header intact, a later line not */
	memset(buf + f->tail_pos, 0, sz);
	assert_int_equal(append(f, 4, 64), 0);
	buf[f->tail_pos - sz + 70] ^= 1;
	assert_int_equal(walk_end(f, &end, &n), DXL_RING_END_TORN);
	assert_int_equal(n, 3);
	/* a full ring: the lap ends the walk */
	buf[f->tail_pos - sz + 70] ^= 1;
	while (append(f, 5, 64) == 0)
		;
	dxl_err_clear();
	assert_int_equal(f->tail_pos, RING); /* exactly full: 128-byte records */
	assert_int_equal(walk_end(f, &end, &n), DXL_RING_END_LAP);
	assert_int_equal(n, RING / sz);
}

/* the head slot holding generation gen */
static uint8_t *slot_of(uint8_t *ctl, uint64_t gen)
{
	for (int i = 0; i < 2; i++) {
		uint64_t g;
		memcpy(&g, ctl + i * DXL_RING_HEAD_SLOT_SIZE, 8);
		if (g == gen)
			return ctl + i * DXL_RING_HEAD_SLOT_SIZE;
	}
	fail_msg("no head slot of generation %llu", (unsigned long long)gen);
	return NULL;
}

static void test_head_slots_survive_a_torn_update(void **state)
{
	struct fx *f = *state;
	for (uint32_t n = 1; n <= 3; n++)
		assert_int_equal(append(f, n, 10), 0);
	const uint64_t sz = dxl_rec_size(0, 10); /* 128 */
	uint8_t *ctl = (uint8_t *)dxl_region_data(f->r) + dxl_logstore_ctl_off(f->ls, 0);
	/* each head goes into both slots: generations 2 and 3, then 4 and 5 */
	assert_int_equal(dxl_logstore_set_head(f->ls, 0, sz, 2, 1), 0);
	struct dxl_ring_head h, d;
	assert_int_equal(dxl_logstore_head(f->ls, 0, &h), 0);
	assert_int_equal(h.gen, 3);
	assert_int_equal(h.pos, sz);
	uint8_t head_a[2 * DXL_RING_HEAD_SLOT_SIZE];
	memcpy(head_a, ctl, sizeof(head_a));
	assert_int_equal(dxl_logstore_set_head(f->ls, 0, 2 * sz, 3, 2), 0);
	assert_int_equal(dxl_logstore_head(f->ls, 0, &h), 0);
	assert_int_equal(h.gen, 5);
	assert_int_equal(h.pos, 2 * sz);
	assert_int_equal(dxl_ring_head_decode_durable(ctl, &d), 0);
	assert_int_equal(d.gen, 4); /* the older copy: the same head */
	assert_int_equal(d.pos, 2 * sz);
	/* the second copy is torn (a crash while writing it): the first one
	 * holds the same head */
	slot_of(ctl, 5)[9] ^= 0xff;
	assert_int_equal(dxl_logstore_head(f->ls, 0, &h), 0);
	assert_int_equal(h.gen, 4);
	assert_int_equal(h.pos, 2 * sz);
	/* the first copy is torn (generation 4 over generation 2; 3 is still
	 * there): the previous head is used, which is safe: it only
	 * re-applies records */
	uint8_t *s4 = slot_of(ctl, 4);
	memcpy(ctl, head_a, sizeof(head_a));
	assert_ptr_not_equal(slot_of(ctl, 3), s4);
	s4[9] ^= 0xff;
	assert_int_equal(dxl_logstore_head(f->ls, 0, &h), 0);
	assert_int_equal(h.gen, 3);
	assert_int_equal(h.pos, sz);
	assert_int_equal(h.seq, 2);
	assert_int_equal(h.last_ts, 1);
	struct seen s = {0};
	assert_int_equal(dxl_ring_scan(f->ls, 0, collect, &s, NULL, NULL), 2);
	assert_int_equal(s.txn[0], 2);
	/* both slots bad: an error, not a guess */
	slot_of(ctl, 3)[1] ^= 0xff;
	assert_int_equal(dxl_logstore_head(f->ls, 0, &h), DXL_E_CORRUPT);
	assert_int_equal(dxl_ring_head_decode_durable(ctl, &d), DXL_E_CORRUPT);
	assert_int_equal(dxl_ring_scan(f->ls, 0, collect, &s, NULL, NULL), DXL_E_CORRUPT);
}

static void test_survives_reopen(void **state)
{
	struct fx *f = *state;
	for (uint32_t n = 1; n <= 10; n++)
		assert_int_equal(append(f, n, 300), 0);
	assert_int_equal(dxl_logstore_set_head(f->ls, 0, dxl_rec_size(0, 300) * 3, 4, 3), 0);
	dxl_logstore_close(&f->ls);
	dxl_region_close(&f->r);
	assert_int_equal(dxl_region_open(f->path, DXL_DUR_PROCESS, &ID, &f->r), 0);
	assert_int_equal(dxl_logstore_open(f->r, &f->ls), 0);
	struct seen s = {0};
	assert_int_equal(dxl_ring_scan(f->ls, 0, collect, &s, NULL, NULL), 7);
	assert_int_equal(s.txn[0], 4);
	assert_int_equal(s.txn[6], 10);
}

/* write a record of writer w with commit timestamp ts into ring w */
static void put_rec(struct fx *f, uint32_t w, uint64_t *tail_pos,
		    uint64_t *tail_seq, uint64_t ts, uint64_t txn)
{
	uint8_t payload[32];
	snprintf((char *)payload, sizeof(payload), "rec-%llu", (unsigned long long)txn);
	struct dxl_rec r = {.type = DXL_REC_DATA, .writer = w, .epoch = 1,
			    .txn_id = txn, .commit_ts = ts, .payload = payload,
			    .payload_len = sizeof(payload)};
	uint32_t size = dxl_rec_size(0, sizeof(payload));
	struct dxl_ring_place p;
	assert_int_equal(dxl_ring_place(RING, *tail_pos, *tail_seq, 0, size, &p), 0);
	uint8_t *buf = (uint8_t *)dxl_region_data(f->r) + dxl_logstore_buf_off(f->ls, w);
	r.seq = p.rec_seq;
	assert_int_equal(dxl_rec_encode(&r, NULL, buf + p.rec_off, RING - p.rec_off),
			 (int)size);
	*tail_pos = p.new_tail_pos;
	*tail_seq = p.new_tail_seq;
}

struct merged {
	uint32_t n;
	uint64_t ts[64];
	uint32_t writer[64];
	uint64_t txn[64];
};

static int merge_collect(uint32_t ring, const struct dxl_rec *rec, uint64_t pos,
			 void *arg)
{
	struct merged *m = arg;
	assert_int_equal(ring, rec->writer);
	m->ts[m->n] = rec->commit_ts;
	m->writer[m->n] = rec->writer;
	m->txn[m->n++] = rec->txn_id;
	return 0;
}

static void test_merge_by_timestamp_and_writer(void **state)
{
	struct fx *f = *state;
	uint64_t tp[2] = {0, 0}, tq[2] = {1, 1};
	/* ring 0: ts 10, 20, 30, 40; ring 1: ts 5, 20, 35 */
	const uint64_t ts0[] = {10, 20, 30, 40}, ts1[] = {5, 20, 35};
	for (int i = 0; i < 4; i++)
		put_rec(f, 0, &tp[0], &tq[0], ts0[i], 100 + i);
	for (int i = 0; i < 3; i++)
		put_rec(f, 1, &tp[1], &tq[1], ts1[i], 200 + i);
	struct merged m = {0};
	assert_int_equal(dxl_log_scan_merged(f->ls, UINT64_MAX, merge_collect, &m), 7);
	const uint64_t want_ts[] = {5, 10, 20, 20, 30, 35, 40};
	const uint32_t want_w[] = {1, 0, 0, 1, 0, 1, 0};
	for (int i = 0; i < 7; i++) {
		assert_int_equal(m.ts[i], want_ts[i]);
		assert_int_equal(m.writer[i], want_w[i]); /* ties: lower writer first */
	}
	/* a resolved timestamp bounds what is emitted */
	m = (struct merged){0};
	assert_int_equal(dxl_log_scan_merged(f->ls, 30, merge_collect, &m), 4);
	assert_int_equal(m.ts[3], 20);
	m = (struct merged){0};
	assert_int_equal(dxl_log_scan_merged(f->ls, 5, merge_collect, &m), 0);
	/* from a head that was advanced, the merge starts there */
	assert_int_equal(dxl_logstore_set_head(f->ls, 0, 2 * dxl_rec_size(0, 32), 3, 20), 0);
	m = (struct merged){0};
	assert_int_equal(dxl_log_scan_merged(f->ls, UINT64_MAX, merge_collect, &m), 5);
	assert_int_equal(m.ts[0], 5);
	assert_int_equal(m.ts[1], 20);
	assert_int_equal(m.writer[1], 1);
	assert_int_equal(m.ts[2], 30);
}

static void test_merge_rejects_decreasing_timestamps(void **state)
{
	struct fx *f = *state;
	uint64_t tp = 0, tq = 1;
	put_rec(f, 0, &tp, &tq, 50, 1);
	put_rec(f, 0, &tp, &tq, 40, 2);
	struct merged m = {0};
	assert_int_equal(dxl_log_scan_merged(f->ls, UINT64_MAX, merge_collect, &m),
			 DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "must not decrease"));
}

static void test_truncate_repairs_a_ring(void **state)
{
	struct fx *f = *state;
	uint64_t pos[6], seq[6];
	for (uint32_t n = 1; n <= 5; n++) {
		pos[n] = f->tail_pos;
		seq[n] = f->tail_seq;
		assert_int_equal(append(f, n, 300), 0);
	}
	/* not a boundary, or the wrong sequence number: refused, nothing changes */
	assert_int_equal(dxl_logstore_truncate(f->ls, 0, pos[3] + 64, seq[3]), DXL_E_INVAL);
	assert_int_equal(dxl_logstore_truncate(f->ls, 0, pos[3], seq[3] + 1), DXL_E_INVAL);
	assert_int_equal(dxl_ring_scan(f->ls, 0, NULL, NULL, NULL, NULL), 5);
	/* at the end: nothing to drop */
	assert_int_equal(dxl_logstore_truncate(f->ls, 0, f->tail_pos, f->tail_seq), 0);
	assert_int_equal(dxl_ring_scan(f->ls, 0, NULL, NULL, NULL, NULL), 5);
	/* drop records 3..5 */
	assert_int_equal(dxl_logstore_truncate(f->ls, 0, pos[3], seq[3]), 3);
	struct seen s = {0};
	uint64_t end_pos, end_seq;
	assert_int_equal(dxl_ring_scan(f->ls, 0, collect, &s, &end_pos, &end_seq), 2);
	assert_int_equal(end_pos, pos[3]);
	assert_int_equal(end_seq, seq[3]);
	/* a writer continues there */
	f->tail_pos = pos[3];
	f->tail_seq = seq[3];
	assert_int_equal(append(f, 3, 100), 0);
	s = (struct seen){0};
	assert_int_equal(dxl_ring_scan(f->ls, 0, collect, &s, NULL, NULL), 3);
	assert_int_equal(s.txn[2], 3);
}

static void test_watermark_decode(void **state)
{
	struct fx *f = *state;
	assert_int_equal(dxl_logstore_watermark(f->ls, 0), 0); /* never written */
	uint8_t *w = (uint8_t *)dxl_region_data(f->r) + dxl_logstore_ctl_off(f->ls, 1) +
		     DXL_RING_WMARK_OFF;
	uint64_t ts = 123456789, chk = ts ^ DXL_RING_WMARK_MAGIC;
	memcpy(w, &ts, 8); /* little-endian host: the wire layout */
	memcpy(w + 8, &chk, 8);
	assert_int_equal(dxl_logstore_watermark(f->ls, 1), ts);
	assert_int_equal(dxl_ring_wmark_decode(w), ts);
	w[9] ^= 1; /* torn: the check word disagrees */
	assert_int_equal(dxl_logstore_watermark(f->ls, 1), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_and_open, setup, teardown),
		cmocka_unit_test(test_place_arithmetic),
		cmocka_unit_test_setup_teardown(test_append_wrap_and_scan, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scan_stops_at_torn_and_stale, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ghost_record_never_returns, setup, teardown),
		cmocka_unit_test_setup_teardown(test_walk_end_reasons, setup, teardown),
		cmocka_unit_test_setup_teardown(test_head_slots_survive_a_torn_update, setup, teardown),
		cmocka_unit_test_setup_teardown(test_survives_reopen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_merge_by_timestamp_and_writer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_merge_rejects_decreasing_timestamps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncate_repairs_a_ring, setup, teardown),
		cmocka_unit_test_setup_teardown(test_watermark_decode, setup, teardown),
	};
	return cmocka_run_group_tests_name("log rings", tests, NULL, NULL);
}
