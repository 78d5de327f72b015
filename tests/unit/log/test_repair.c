/* test_repair.c -- the appender's repair mode: rings brought to the reference's end
 *
 * Three replicas live in this process, each a log region served by its own
 * fabric (its own NIC thread and address), of the provider the environment
 * names (tests/lib/fabric_fixture.h). A replica is "fenced" by
 * deregistering its region (as a replica does on a new epoch): the
 * appender's WRITEs to it then fail with a remote access error while the
 * others take them, which is how unacknowledged suffixes and lagging
 * replicas arise here. Between appender sessions the test reads and
 * changes the regions directly (heads advanced as a replica applying
 * records would).
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
#include "dxl/fabric.h"
#include "dxl/log.h"
#include "dxl/recovery.h"
#include "log/log_internal.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/log_replica.h"

#define NREP 3
#define NRINGS 2
#define RING 0

struct rep {
	char path[160];
	struct dxl_region *reg;
	struct dxl_logstore *ls;
	struct dxl_fabric *f;
	struct dxl_ctx *c0; /* the ctx index targets name */
	struct dxl_mr *mr;  /* NULL while fenced */
	struct dxl_log_target t[NRINGS];
};

struct fx {
	char dir[64];
	uint64_t ring_size;
	struct rep rep[NREP];
	struct dxl_fabric *f; /* the writer's */
	struct dxl_ctx *c;    /* ctx 0: appenders */
	struct dxl_ctx *pc;   /* ctx 1: pulls */
};

static void rep_serve(struct rep *r)
{
	assert_int_equal(dxl_mr_reg(r->f, dxl_region_data(r->reg),
				    dxl_region_data_size(r->reg),
				    DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE |
					    DXL_MR_REMOTE_ATOMIC | DXL_MR_PERSISTENT,
				    &r->mr), 0);
	assert_int_equal(dxl_region_bind_mr(r->reg, r->mr), 0);
	for (uint32_t i = 0; i < NRINGS; i++)
		assert_int_equal(dxl_log_target_init(&r->t[i], r->ls, r->mr,
						     dxl_fabric_addr(r->f), 0, i), 0);
}

/* remote accesses with the old rkey fail from now on */
static void fence(struct fx *x, int i)
{
	dxl_mr_dereg(&x->rep[i].mr);
}

static void unfence(struct fx *x, int i)
{
	rep_serve(&x->rep[i]);
}

static void fx_free(struct fx *x);

static struct fx *fx_new(uint64_t ring_size)
{
	alarm(120);
	struct fx *x = calloc(1, sizeof(*x));
	x->ring_size = ring_size;
	snprintf(x->dir, sizeof(x->dir), "/tmp/dxl-test-repair-XXXXXX");
	assert_non_null(mkdtemp(x->dir));
	struct dxl_fabric_cfg cfg;
	dxlt_fabric_cfg_from_env(&cfg);
	cfg.timeout_ms = 1000;
	int ret = dxl_fabric_new(&cfg, &x->f);
	if (dxl_test_nodev_skip(ret)) {
		fx_free(x);
		skip();
	}
	assert_int_equal(ret, 0);
	assert_int_equal(dxl_ctx_new(x->f, 0, &x->c), 0);
	assert_int_equal(dxl_ctx_new(x->f, 1, &x->pc), 0);
	for (int i = 0; i < NREP; i++) {
		struct rep *r = &x->rep[i];
		char dir[sizeof(x->dir)]; /* (a separate buffer: -Wrestrict) */
		memcpy(dir, x->dir, sizeof(dir));
		snprintf(r->path, sizeof(r->path), "%s/r%d.log", dir, i);
		struct dxl_region_id id = {.cluster = "t", .node_id = (uint32_t)i + 1,
					   .kind = DXL_REGION_LOG};
		uint64_t bytes = DXL_ALIGN_UP(dxl_logstore_bytes(NRINGS, ring_size),
					      4096ull);
		assert_int_equal(dxl_region_create(r->path, bytes, DXL_DUR_PROCESS,
						   &id, &r->reg), 0);
		assert_int_equal(dxl_logstore_format(r->reg, 0, NRINGS, ring_size), 0);
		assert_int_equal(dxl_logstore_open(r->reg, &r->ls), 0);
		struct dxl_fabric_cfg rc;
		dxlt_fabric_cfg_from_env(&rc);
		rc.node_id = (uint32_t)i + 1;
		assert_int_equal(dxl_fabric_new(&rc, &r->f), 0);
		assert_int_equal(dxl_ctx_new(r->f, 0, &r->c0), 0);
		rep_serve(r);
	}
	return x;
}

static void fx_free(struct fx *x)
{
	dxl_fabric_delete(&x->f);
	for (int i = 0; i < NREP; i++) {
		struct rep *r = &x->rep[i];
		dxl_fabric_delete(&r->f);
		dxl_logstore_close(&r->ls);
		dxl_region_close(&r->reg);
		if (r->path[0])
			unlink(r->path);
	}
	rmdir(x->dir);
	free(x);
	alarm(0);
}

/* ---- the writer ------------------------------------------------------------ */

static uint32_t len_of(uint64_t txn, int variant)
{
	return 40 + (uint32_t)((txn * 53 + (uint64_t)variant * 300) % 900);
}

static void make_payload(uint8_t *p, uint32_t len, uint64_t txn, int variant)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(txn * 131 + i + (uint64_t)variant * 7);
}

/* an appender on the replicas idx[0..n) (idx[0] the reference) */
static int open_app(struct fx *x, const int *idx, unsigned n, bool repair,
		    struct dxl_appender **a)
{
	struct dxl_log_target t[NREP];
	for (unsigned i = 0; i < n; i++)
		t[i] = x->rep[idx[i]].t[RING];
	struct dxl_appender_cfg cfg;
	dxl_appender_cfg_init(&cfg);
	cfg.writer_id = 0;
	cfg.epoch = 1;
	cfg.max_record = 8192;
	cfg.full_wait_ms = 200;
	cfg.repair = repair;
	return dxl_appender_new(x->c, &cfg, t, n, a);
}

static const int ALL[NREP] = {0, 1, 2};

/* append txn (commit ts 1000 + txn) and wait; the result's acked mask must
 * be want_acked (and then the status 0 iff every target has it) */
static void put_len(struct dxl_appender *a, uint64_t txn, int variant,
		    uint32_t len, uint32_t want_acked, unsigned n)
{
	static uint8_t p[8192];
	make_payload(p, len, txn, variant);
	struct dxl_rec r = {.txn_id = txn, .commit_ts = 1000 + txn, .payload = p,
			    .payload_len = len};
	struct dxl_append_result res;
	int ret = dxl_appender_append_sync(a, &r, NULL, &res);
	if (want_acked == (1u << n) - 1 && ret)
		fail_msg("append %llu: %s", (unsigned long long)txn, dxl_errmsg());
	if (want_acked != (1u << n) - 1)
		assert_int_not_equal(ret, 0);
	assert_int_equal(res.acked, want_acked);
}

static void put(struct dxl_appender *a, uint64_t txn, int variant,
		uint32_t want_acked, unsigned n)
{
	put_len(a, txn, variant, len_of(txn, variant), want_acked, n);
}

static void put_range(struct dxl_appender *a, uint64_t first, uint64_t last,
		      int variant, uint32_t want_acked, unsigned n)
{
	for (uint64_t t = first; t <= last; t++)
		put(a, t, variant, want_acked, n);
}

/* ---- looking at the replicas' rings ------------------------------------------ */

struct recs {
	uint32_t n;
	uint64_t txn[1024], pos[1024], seq[1024];
	int variant[1024];
};

static int collect(const struct dxl_rec *rec, uint64_t pos, void *arg)
{
	struct recs *c = arg;
	assert_true(c->n < 1024);
	assert_int_equal(rec->commit_ts, 1000 + rec->txn_id);
	/* which payload variant is it? (each byte identifies it) */
	int v = -1;
	uint8_t want[8192];
	for (int k = 0; k < 2 && v < 0; k++) {
		make_payload(want, rec->payload_len, rec->txn_id, k);
		if (memcmp(want, rec->payload, rec->payload_len) == 0)
			v = k;
	}
	assert_true(v >= 0);
	c->txn[c->n] = rec->txn_id;
	c->pos[c->n] = pos;
	c->seq[c->n] = rec->seq;
	c->variant[c->n] = v;
	c->n++;
	return 0;
}

static void scan(struct fx *x, int i, struct recs *c, uint64_t *end_pos,
		 uint64_t *end_seq)
{
	memset(c, 0, sizeof(*c));
	assert_true(dxl_ring_scan(x->rep[i].ls, RING, collect, c, end_pos,
				  end_seq) >= 0);
}

/* every replica's ring ends at the same place and holds the same records
 * at the same positions; the bytes from the latest head to the end agree */
static void assert_identical(struct fx *x, uint32_t want_n)
{
	static struct recs c[NREP];
	uint64_t end[NREP], seq[NREP], hmax = 0;
	for (int i = 0; i < NREP; i++) {
		scan(x, i, &c[i], &end[i], &seq[i]);
		struct dxl_ring_head h;
		assert_int_equal(dxl_logstore_head(x->rep[i].ls, RING, &h), 0);
		hmax = DXL_MAX(hmax, h.pos);
	}
	for (int i = 1; i < NREP; i++) {
		assert_int_equal(end[i], end[0]);
		assert_int_equal(seq[i], seq[0]);
	}
	for (int i = 0; i < NREP; i++) {
		/* records below the latest head may be reclaimed on that one */
		uint32_t k0 = 0, ki = 0;
		while (k0 < c[0].n && c[0].pos[k0] < hmax)
			k0++;
		while (ki < c[i].n && c[i].pos[ki] < hmax)
			ki++;
		assert_int_equal(c[i].n - ki, c[0].n - k0);
		for (; ki < c[i].n; ki++, k0++) {
			assert_int_equal(c[i].txn[ki], c[0].txn[k0]);
			assert_int_equal(c[i].pos[ki], c[0].pos[k0]);
			assert_int_equal(c[i].seq[ki], c[0].seq[k0]);
			assert_int_equal(c[i].variant[ki], c[0].variant[k0]);
		}
		for (uint64_t p = hmax; p < end[0]; p += 64) {
			uint64_t off = dxl_logstore_buf_off(x->rep[i].ls, RING) +
				       p % x->ring_size;
			uint64_t off0 = dxl_logstore_buf_off(x->rep[0].ls, RING) +
					p % x->ring_size;
			assert_memory_equal((uint8_t *)dxl_region_data(x->rep[i].reg) + off,
					    (uint8_t *)dxl_region_data(x->rep[0].reg) + off0,
					    64);
		}
	}
	if (want_n)
		assert_int_equal(c[0].n, want_n);
}

/* a copy of replica i's ring (control block and buffer) */
static uint8_t *snap(struct fx *x, int i)
{
	uint64_t len = DXL_RING_CTL_SIZE + x->ring_size;
	uint8_t *s = malloc(len);
	memcpy(s, (uint8_t *)dxl_region_data(x->rep[i].reg) +
			  dxl_logstore_ctl_off(x->rep[i].ls, RING),
	       len);
	return s;
}

/* (all but the owner word: a failed open's claim stands -- the ring is
 * its writer's now, with the claim's generation) */
static void assert_unchanged(struct fx *x, int i, uint8_t *s)
{
	const uint8_t *now = (uint8_t *)dxl_region_data(x->rep[i].reg) +
			     dxl_logstore_ctl_off(x->rep[i].ls, RING);
	assert_memory_equal(s, now, DXL_RING_OWNER_OFF);
	assert_memory_equal(s + DXL_RING_OWNER_OFF + 8, now + DXL_RING_OWNER_OFF + 8,
			    DXL_RING_CTL_SIZE + x->ring_size - DXL_RING_OWNER_OFF - 8);
	free(s);
}

static void advance_head(struct fx *x, int i)
{
	assert_true(dxl_ring_advance_head(x->rep[i].ls, RING) >= 0);
}

static uint64_t end_of(struct fx *x, int i)
{
	uint64_t e;
	assert_true(dxl_ring_scan(x->rep[i].ls, RING, NULL, NULL, &e, NULL) >= 0);
	return e;
}

/* ---- tests --------------------------------------------------------------------- */

/* repair off: rings that end apart are refused as before, and nothing is
 * changed; repair on: the lagging replica gets the missing records */
static void test_behind_copied_and_repair_off_refuses(void **state)
{
	struct fx *x = fx_new(1 << 20);
	struct dxl_appender *a;
	assert_int_equal(open_app(x, ALL, NREP, false, &a), 0);
	put_range(a, 1, 5, 0, 0x7, NREP);
	fence(x, 2);
	put_range(a, 6, 7, 0, 0x3, NREP); /* not acknowledged: 2 lacks them */
	dxl_appender_delete(&a);
	unfence(x, 2);

	uint8_t *s0 = snap(x, 0), *s1 = snap(x, 1), *s2 = snap(x, 2);
	assert_int_equal(open_app(x, ALL, NREP, false, &a), DXL_E_STALE);
	assert_non_null(strstr(dxl_errmsg(), "ends at"));
	assert_unchanged(x, 0, s0);
	assert_unchanged(x, 1, s1);
	assert_unchanged(x, 2, s2);

	uint64_t e2 = end_of(x, 2), e0 = end_of(x, 0);
	assert_true(e2 < e0);
	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	struct dxl_repair_stats st;
	dxl_appender_repair_stats(a, &st);
	assert_int_equal(st.copied, 0x4);
	assert_int_equal(st.truncated, 0);
	assert_int_equal(st.bytes_copied, e0 - e2);
	assert_int_equal(st.records_copied, 2);
	assert_int_equal(st.records_dropped, 0);
	uint64_t bc = 99;
	uint32_t tt = 99;
	dxl_appender_repaired(a, &bc, &tt);
	assert_int_equal(bc, e0 - e2);
	assert_int_equal(tt, 0);
	/* 6 and 7 are on every replica now: acknowledged */
	assert_int_equal(dxl_appender_last_ts(a), 1007);
	uint64_t tail;
	dxl_appender_tail(a, &tail, NULL);
	assert_int_equal(tail, e0);
	assert_identical(x, 7);
	put_range(a, 8, 12, 0, 0x7, NREP);
	dxl_appender_delete(&a);
	assert_identical(x, 12);
	/* nothing left to repair */
	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	dxl_appender_repair_stats(a, &st);
	assert_int_equal(st.copied | st.truncated, 0);
	assert_int_equal(st.bytes_copied, 0);
	dxl_appender_delete(&a);
	fx_free(x);
}

/* an unacknowledged suffix that reached one replica only is cut there; the
 * writer appends the lost records again, and every ring ends up the same */
static void test_ahead_truncated(void **state)
{
	struct fx *x = fx_new(1 << 20);
	struct dxl_appender *a;
	assert_int_equal(open_app(x, ALL, NREP, false, &a), 0);
	put_range(a, 1, 10, 0, 0x7, NREP);
	fence(x, 0);
	fence(x, 2);
	put_range(a, 11, 13, 0, 0x2, NREP); /* only replica 1 has them */
	dxl_appender_delete(&a);
	unfence(x, 0);
	unfence(x, 2);
	uint64_t e0 = end_of(x, 0), e1 = end_of(x, 1);
	assert_true(e1 > e0);
	/* replica 1's watermark went no further than the first lost append */
	assert_int_equal(dxl_logstore_watermark(x->rep[1].ls, RING), 1011);
	assert_int_equal(dxl_logstore_watermark(x->rep[0].ls, RING), 1010);

	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	struct dxl_repair_stats st;
	dxl_appender_repair_stats(a, &st);
	assert_int_equal(st.truncated, 0x2);
	assert_int_equal(st.copied, 0);
	assert_int_equal(st.records_dropped, 3);
	assert_int_equal(st.bytes_copied, 0);
	uint32_t tt = 0;
	dxl_appender_repaired(a, NULL, &tt);
	assert_int_equal(tt, 1);
	/* the writer's contract: <= 1010 are in the log, 11..13 must go again */
	assert_int_equal(dxl_appender_last_ts(a), 1010);
	/* the highest watermark binds: nothing below it may be appended */
	assert_int_equal(dxl_appender_min_ts(a), 1011);
	uint64_t tail;
	dxl_appender_tail(a, &tail, NULL);
	assert_int_equal(tail, e0);
	assert_int_equal(end_of(x, 1), e0); /* the scan stops at the cut */
	assert_identical(x, 10);
	/* appended again, with other sizes: a different layout than before */
	put_range(a, 11, 15, 1, 0x7, NREP);
	dxl_appender_delete(&a);
	assert_identical(x, 15);
	struct recs c;
	scan(x, 1, &c, NULL, NULL);
	for (uint32_t i = 0; i < c.n; i++) {
		assert_int_equal(c.txn[i], i + 1);
		assert_int_equal(c.variant[i], i < 10 ? 0 : 1);
	}
	/* a merged scan (what tailing replays) agrees on every replica */
	for (int i = 0; i < NREP; i++)
		assert_int_equal(dxl_log_scan_merged(x->rep[i].ls, UINT64_MAX, NULL,
						     NULL), 15);
	fx_free(x);
}

/* the missing bytes straddle the ring's end: a skip record, then records
 * at the start of the buffer, copied in two pieces */
static void test_behind_across_the_wrap(void **state)
{
	struct fx *x = fx_new(16384);
	struct dxl_appender *a;
	assert_int_equal(open_app(x, ALL, NREP, false, &a), 0);
	/* 12 records of 1024 bytes, then every replica applies them */
	for (uint64_t t = 1; t <= 12; t++)
		put_len(a, t, 0, 1024 - 64, 0x7, NREP);
	for (int i = 0; i < NREP; i++)
		advance_head(x, i);
	fence(x, 2);
	/* 1536-byte records: two fit before the end, then a skip of 1024 */
	for (uint64_t t = 13; t <= 16; t++)
		put_len(a, t, 0, 1536 - 64, 0x3, NREP);
	dxl_appender_delete(&a);
	unfence(x, 2);
	assert_int_equal(end_of(x, 2), 12288);
	assert_int_equal(end_of(x, 0), 16384 + 3072);

	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	struct dxl_repair_stats st;
	dxl_appender_repair_stats(a, &st);
	assert_int_equal(st.copied, 0x4);
	assert_int_equal(st.bytes_copied, 16384 + 3072 - 12288);
	assert_int_equal(st.records_copied, 4); /* the skip is not counted */
	assert_int_equal(dxl_appender_last_ts(a), 1016);
	assert_identical(x, 4);
	/* later appends keep them identical, around the ring again */
	for (uint64_t t = 17; t <= 40; t++) {
		put_len(a, t, 0, 1024 - 64, 0x7, NREP);
		if (t % 4 == 0)
			for (int i = 0; i < NREP; i++)
				advance_head(x, i);
	}
	dxl_appender_delete(&a);
	assert_identical(x, 0);
	fx_free(x);
}

/* a replica that ends below the reference's head, or whose unreclaimed
 * records the copy would overwrite, is refused and nothing changes; a pull
 * catches it up, and repair then makes all rings the same */
static void test_too_far_behind_then_pull(void **state)
{
	struct fx *x = fx_new(16384);
	struct dxl_appender *a;
	assert_int_equal(open_app(x, ALL, NREP, false, &a), 0);
	for (uint64_t t = 1; t <= 4; t++)
		put_len(a, t, 0, 1024 - 64, 0x7, NREP);
	advance_head(x, 0);
	advance_head(x, 1);
	fence(x, 2);
	/* 13 more on 0 and 1: 17408 bytes written, more than the ring; 2
	 * still has its head at 0 and ends at 4096, the reference's head */
	for (uint64_t t = 5; t <= 17; t++)
		put_len(a, t, 0, 1024 - 64, 0x3, NREP);
	dxl_appender_delete(&a);
	unfence(x, 2);
	uint8_t *s0 = snap(x, 0), *s1 = snap(x, 1), *s2 = snap(x, 2);
	assert_int_equal(open_app(x, ALL, NREP, true, &a), DXL_E_STALE);
	assert_non_null(strstr(dxl_errmsg(), "too far behind"));
	assert_non_null(strstr(dxl_errmsg(), "not reclaimed"));
	assert_non_null(strstr(dxl_errmsg(), "dxl_xfer_pull"));
	assert_unchanged(x, 0, s0);
	assert_unchanged(x, 1, s1);
	assert_unchanged(x, 2, s2);

	/* now the reference's head passes replica 2's end */
	advance_head(x, 0);
	s0 = snap(x, 0);
	s1 = snap(x, 1);
	s2 = snap(x, 2);
	assert_int_equal(open_app(x, ALL, NREP, true, &a), DXL_E_STALE);
	assert_non_null(strstr(dxl_errmsg(), "too far behind (ends at 4096, the reference's head is at 17408)"));
	assert_non_null(strstr(dxl_errmsg(), "it must be caught up first (dxl_xfer_pull)"));
	assert_unchanged(x, 0, s0);
	assert_unchanged(x, 1, s1);
	assert_unchanged(x, 2, s2);

	/* the rejoin: replica 2 pulls the reference's ring */
	struct dxl_qp *qp;
	assert_int_equal(dxl_qp_connect(x->pc, x->rep[0].t[RING].addr, 0, &qp), 0);
	struct dxl_pull_stats ps;
	assert_int_equal(dxl_xfer_pull(x->rep[2].ls, RING, qp,
					   &x->rep[0].t[RING], &ps), 0);
	assert_true(ps.changed > 0);
	assert_int_equal(ps.end_pos, 17408);
	assert_int_equal(ps.records, 0); /* everything applied */
	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	struct dxl_repair_stats st;
	dxl_appender_repair_stats(a, &st);
	assert_int_equal(st.copied, 0);  /* replica 1 had it all too */
	assert_int_equal(st.truncated, 0);
	assert_int_equal(dxl_appender_last_ts(a), 1017);
	advance_head(x, 1); /* room for the next appends */
	/* it falls behind again while fenced, is pulled meanwhile, and the
	 * next repair copies the rest */
	fence(x, 2);
	for (uint64_t t = 18; t <= 21; t++)
		put_len(a, t, 0, 1024 - 64, 0x3, NREP);
	unfence(x, 2);
	assert_int_equal(dxl_xfer_pull(x->rep[2].ls, RING, qp,
					   &x->rep[0].t[RING], &ps), 0);
	assert_int_equal(ps.records, 4);
	fence(x, 2);
	for (uint64_t t = 22; t <= 23; t++)
		put_len(a, t, 0, 1024 - 64, 0x3, NREP);
	dxl_appender_delete(&a);
	unfence(x, 2);
	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	dxl_appender_repair_stats(a, &st);
	assert_int_equal(st.copied, 0x4);
	assert_int_equal(st.records_copied, 2);
	put_range(a, 24, 25, 0, 0x7, NREP);
	dxl_appender_delete(&a);
	assert_identical(x, 8);
	dxl_qp_delete(&qp);
	fx_free(x);
}

/* records at the same positions that are not the same: refused, and no
 * ring is touched (not even one that could have been repaired) */
static void test_diverged_detected(void **state)
{
	struct fx *x = fx_new(1 << 20);
	struct dxl_appender *a;
	assert_int_equal(open_app(x, ALL, NREP, false, &a), 0);
	put_range(a, 1, 5, 0, 0x7, NREP);
	fence(x, 1);
	fence(x, 2);
	put_range(a, 6, 7, 0, 0x1, NREP); /* only replica 0 */
	dxl_appender_delete(&a);
	unfence(x, 1);
	/* replica 1 alone gets other records 6 and 7, of the same sizes:
	 * same end, other content */
	const int ONE[1] = {1};
	assert_int_equal(open_app(x, ONE, 1, false, &a), 0);
	for (uint64_t t = 6; t <= 7; t++)
		put_len(a, t, 1, len_of(t, 0), 0x1, 1);
	dxl_appender_delete(&a);
	unfence(x, 2);
	assert_int_equal(end_of(x, 0), end_of(x, 1));
	assert_true(end_of(x, 2) < end_of(x, 0));

	/* replica 2 (behind) is checked first and could be caught up, but 1
	 * diverged: nothing may be written anywhere */
	const int ORDER[NREP] = {0, 2, 1};
	uint8_t *s0 = snap(x, 0), *s1 = snap(x, 1), *s2 = snap(x, 2);
	assert_int_equal(open_app(x, ORDER, NREP, true, &a), DXL_E_STALE);
	assert_non_null(strstr(dxl_errmsg(), "diverged"));
	assert_unchanged(x, 0, s0);
	assert_unchanged(x, 1, s1);
	assert_unchanged(x, 2, s2);

	/* diverged and ahead */
	assert_int_equal(open_app(x, ONE, 1, false, &a), 0);
	put(a, 8, 1, 0x1, 1);
	dxl_appender_delete(&a);
	s1 = snap(x, 1);
	assert_int_equal(open_app(x, ALL, NREP, true, &a), DXL_E_STALE);
	assert_non_null(strstr(dxl_errmsg(), "diverged"));
	assert_unchanged(x, 1, s1);

	/* a record that differs only in its payload (same sizes, same
	 * timestamps): the checksums tell */
	uint8_t *d = (uint8_t *)dxl_region_data(x->rep[2].reg) +
		     dxl_logstore_buf_off(x->rep[2].ls, RING);
	struct recs c;
	scan(x, 2, &c, NULL, NULL);
	assert_int_equal(c.n, 5);
	/* rewrite replica 2's record 3 with another payload, validly */
	uint8_t p[1024];
	make_payload(p, len_of(3, 0), 3, 0);
	p[0] ^= 1;
	struct dxl_rec orig;
	assert_int_equal(dxl_rec_decode(d + c.pos[2], 8192, &orig), 0);
	struct dxl_rec r = {.type = DXL_REC_DATA, .writer = 0, .epoch = 1,
			    .seq = c.seq[2], .txn_id = 3, .commit_ts = 1003,
			    .incarnation = orig.incarnation,
			    .payload = p, .payload_len = len_of(3, 0)};
	assert_true(dxl_rec_encode(&r, NULL, d + c.pos[2], 8192) > 0);
	const int TWO[2] = {0, 2};
	assert_int_equal(open_app(x, TWO, 2, true, &a), DXL_E_STALE);
	assert_non_null(strstr(dxl_errmsg(), "diverged"));
	fx_free(x);
}

/* a lagging replica that holds a record past a gap (a later WRITE landed,
 * an earlier one did not): after the copy its scan must stop at the
 * reference's end, not run on into that record */
static void test_behind_with_a_stray_record(void **state)
{
	struct fx *x = fx_new(1 << 20);
	struct dxl_appender *a;
	assert_int_equal(open_app(x, ALL, NREP, false, &a), 0);
	put_range(a, 1, 5, 0, 0x7, NREP);
	fence(x, 2);
	put_range(a, 6, 7, 0, 0x3, NREP);
	dxl_appender_delete(&a);
	unfence(x, 2);
	uint64_t e0, s0;
	assert_true(dxl_ring_scan(x->rep[0].ls, RING, NULL, NULL, &e0, &s0) >= 0);
	uint64_t e2 = end_of(x, 2);
	/* replica 2 has the record that would follow the reference's end */
	uint8_t p[100];
	make_payload(p, 100, 8, 0);
	struct dxl_rec r = {.type = DXL_REC_DATA, .epoch = 1, .seq = s0, .txn_id = 8,
			    .commit_ts = 1008, .payload = p, .payload_len = 100};
	uint8_t *d = (uint8_t *)dxl_region_data(x->rep[2].reg) +
		     dxl_logstore_buf_off(x->rep[2].ls, RING);
	assert_true(dxl_rec_encode(&r, NULL, d + e0, 8192) > 0);
	assert_int_equal(end_of(x, 2), e2); /* behind the gap: not visible */
	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	struct dxl_repair_stats st;
	dxl_appender_repair_stats(a, &st);
	assert_int_equal(st.copied, 0x4);
	assert_int_equal(st.records_copied, 2);
	dxl_appender_delete(&a);
	assert_int_equal(end_of(x, 2), e0);
	assert_identical(x, 7);
	fx_free(x);
}

/* what dxl_appender_last_ts and dxl_appender_min_ts report */
static void test_last_ts_and_min_ts(void **state)
{
	struct fx *x = fx_new(1 << 20);
	struct dxl_appender *a;
	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	assert_int_equal(dxl_appender_last_ts(a), 0);
	assert_int_equal(dxl_appender_min_ts(a), 0);
	put_range(a, 1, 3, 0, 0x7, NREP);
	assert_int_equal(dxl_appender_last_ts(a), 0); /* fixed at open */
	assert_int_equal(dxl_appender_min_ts(a), 1003);
	dxl_appender_delete(&a);
	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	assert_int_equal(dxl_appender_last_ts(a), 1003);
	assert_int_equal(dxl_appender_min_ts(a), 1003);
	/* a promise outlives the appender that made it */
	assert_int_equal(dxl_appender_heartbeat(a, 5000), 0);
	while (dxl_appender_inflight(a)) {
		struct dxl_append_result res;
		assert_int_equal(dxl_appender_poll(a, &res, 1), 0);
		dxl_appender_wait(a, 10);
	}
	dxl_appender_delete(&a);
	assert_int_equal(open_app(x, ALL, NREP, false, &a), 0);
	assert_int_equal(dxl_appender_last_ts(a), 1003);
	assert_int_equal(dxl_appender_min_ts(a), 5000);
	uint8_t p[8] = {0};
	struct dxl_rec r = {.txn_id = 4, .commit_ts = 4000, .payload = p,
			    .payload_len = 8};
	assert_int_equal(dxl_appender_append(a, &r, NULL, NULL), DXL_E_INVAL);
	r.commit_ts = 5000;
	assert_int_equal(dxl_appender_append_sync(a, &r, NULL, NULL), 0);
	dxl_appender_delete(&a);
	/* every record applied: the head's last_ts says it */
	for (int i = 0; i < NREP; i++)
		advance_head(x, i);
	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	assert_int_equal(dxl_appender_last_ts(a), 5000);
	dxl_appender_delete(&a);
	fx_free(x);
}

/*
 * Issue 11 defect 1 through a real appender: a crash tore record k on
 * every replica while k+1 (never acknowledged) survived intact behind it.
 * The next process of the same writer opens with repair, finds the end at
 * k and appends k' of the same size there. No scan may ever return k+1
 * (it would follow k' with a lower timestamp): the records carry the
 * ring's incarnation, and the new appender's is higher.
 */
static void test_ghost_after_torn_record(void **state)
{
	struct fx *x = fx_new(65536);
	struct dxl_appender *a;
	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	put_range(a, 1, 4, 0, 0x7, NREP);
	/* k = 5 and k+1 = 6 in flight together: their watermark promises
	 * only 1..4 (5 was not acknowledged when 6 was posted) */
	static uint8_t p[8192];
	for (uint64_t t = 5; t <= 6; t++) {
		make_payload(p, len_of(t, 0), t, 0);
		struct dxl_rec r = {.txn_id = t, .commit_ts = 1000 + t,
				    .payload = p, .payload_len = len_of(t, 0)};
		assert_int_equal(dxl_appender_append(a, &r, NULL, NULL), 0);
	}
	struct dxl_append_result res[2];
	int got = 0;
	while (got < 2) {
		int k = dxl_appender_poll(a, res + got, 2 - got);
		assert_true(k >= 0);
		got += k;
		if (got < 2)
			dxl_appender_wait(a, 100);
	}
	dxl_appender_delete(&a);
	struct recs c;
	scan(x, 0, &c, NULL, NULL);
	assert_int_equal(c.n, 6);
	const uint64_t pos_k = c.pos[4], pos_k1 = c.pos[5];
	for (int i = 0; i < NREP; i++) {
		assert_true(dxl_logstore_watermark(x->rep[i].ls, RING) <= 1005);
		/* the power failure: a line in the middle of k is lost */
		uint8_t *d = (uint8_t *)dxl_region_data(x->rep[i].reg) +
			     dxl_logstore_buf_off(x->rep[i].ls, RING);
		memset(d + pos_k % x->ring_size + 128, 0, 64);
		scan(x, i, &c, NULL, NULL);
		assert_int_equal(c.n, 4);
	}
	/* the writer's next process (same writer id) */
	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	uint64_t tail;
	dxl_appender_tail(a, &tail, NULL);
	assert_int_equal(tail, pos_k);
	assert_int_equal(dxl_appender_last_ts(a), 1004);
	/* k': txn 5 again, another payload of the same size */
	put_len(a, 5, 1, len_of(5, 0), 0x7, NREP);
	dxl_appender_tail(a, &tail, NULL);
	assert_int_equal(tail, pos_k1);
	dxl_appender_delete(&a);
	for (int i = 0; i < NREP; i++) {
		scan(x, i, &c, NULL, NULL);
		if (c.n != 5)
			fail_msg("replica %d returns %u records (txn %llu last): the record behind the torn one came back",
				 i, c.n, (unsigned long long)c.txn[c.n - 1]);
		assert_int_equal(c.txn[4], 5);
		assert_int_equal(c.variant[4], 1);
		assert_int_equal(dxl_log_scan_merged(x->rep[i].ls, UINT64_MAX, NULL,
						     NULL), 5);
	}
	/* and the ring goes on from k' for the next writer too */
	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	dxl_appender_tail(a, &tail, NULL);
	assert_int_equal(tail, pos_k1);
	put_len(a, 6, 1, len_of(6, 0), 0x7, NREP);
	dxl_appender_delete(&a);
	assert_identical(x, 6);
	fx_free(x);
}

/* the incarnation slots: each open writes the one not holding the highest,
 * so a torn write leaves the previous incarnation readable */
static uint64_t inc_slot_val(struct fx *x, int i, int slot)
{
	const uint8_t *b = (const uint8_t *)dxl_region_data(x->rep[i].reg) +
			   dxl_logstore_ctl_off(x->rep[i].ls, RING) + DXL_RING_INC_OFF +
			   slot * DXL_RING_INC_SLOT;
	uint64_t v, chk;
	memcpy(&v, b, 8); /* little-endian host */
	memcpy(&chk, b + 8, 8);
	return chk == (v ^ DXL_RING_INC_MAGIC) ? v : 0;
}

static void test_incarnation_slots(void **state)
{
	struct fx *x = fx_new(65536);
	struct dxl_appender *a;
	for (uint32_t k = 1; k <= 3; k++) {
		assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
		assert_int_equal(dxl_appender_incarnation(a), k);
		put(a, k, 0, 0x7, NREP);
		dxl_appender_delete(&a);
		for (int i = 0; i < NREP; i++)
			assert_int_equal(dxl_logstore_incarnation(x->rep[i].ls, RING), k);
	}
	/* slots hold 3 and 2: a torn write of 3 leaves 2; the records carry 3,
	 * so the next appender still takes 4 */
	for (int i = 0; i < NREP; i++) {
		int s3 = inc_slot_val(x, i, 0) == 3 ? 0 : 1;
		assert_int_equal(inc_slot_val(x, i, s3), 3);
		assert_int_equal(inc_slot_val(x, i, !s3), 2);
		uint8_t *b = (uint8_t *)dxl_region_data(x->rep[i].reg) +
			     dxl_logstore_ctl_off(x->rep[i].ls, RING) + DXL_RING_INC_OFF +
			     s3 * DXL_RING_INC_SLOT;
		b[3] ^= 0x40;
		assert_int_equal(dxl_logstore_incarnation(x->rep[i].ls, RING), 2);
	}
	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	assert_int_equal(dxl_appender_incarnation(a), 4);
	put(a, 4, 0, 0x7, NREP);
	dxl_appender_delete(&a);
	for (int i = 0; i < NREP; i++) {
		assert_int_equal(dxl_logstore_incarnation(x->rep[i].ls, RING), 4);
		/* 4 went into the torn slot: 2 stays readable beside it */
		assert_true(inc_slot_val(x, i, 0) == 2 || inc_slot_val(x, i, 1) == 2);
	}
	assert_identical(x, 4);
	fx_free(x);
}

/* ---- issue 19.2: repair never truncates what a watermark proves acknowledged */

/* replica i's log region deleted and created anew, empty (a replaced disk) */
static void recreate(struct fx *x, int i)
{
	struct rep *r = &x->rep[i];
	fence(x, i);
	dxl_logstore_close(&r->ls);
	dxl_region_close(&r->reg);
	assert_int_equal(unlink(r->path), 0);
	struct dxl_region_id id = {.cluster = "t", .node_id = (uint32_t)i + 1,
				   .kind = DXL_REGION_LOG};
	uint64_t bytes = DXL_ALIGN_UP(dxl_logstore_bytes(NRINGS, x->ring_size),
				      4096ull);
	assert_int_equal(dxl_region_create(r->path, bytes, DXL_DUR_PROCESS, &id,
					   &r->reg), 0);
	assert_int_equal(dxl_logstore_format(r->reg, 0, NRINGS, x->ring_size), 0);
	assert_int_equal(dxl_logstore_open(r->reg, &r->ls), 0);
	unfence(x, i);
}

static void test_repair_keeps_what_a_watermark_proves(void **state)
{
	struct fx *x = fx_new(65536);
	struct dxl_appender *a;
	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	put_range(a, 1, 5, 0, 0x7, NREP);
	/* idle: the watermark says everything below 1200 is acknowledged */
	assert_int_equal(dxl_appender_heartbeat(a, 1200), 0);
	struct dxl_append_result res;
	while (dxl_appender_inflight(a)) {
		assert_true(dxl_appender_poll(a, &res, 1) >= 0);
		dxl_appender_wait(a, 100);
	}
	dxl_appender_delete(&a);
	for (int i = 0; i < NREP; i++)
		assert_int_equal(dxl_logstore_watermark(x->rep[i].ls, RING), 1200);

	/* the primary's disk was replaced: its ring is empty. As the
	 * reference it would make the others drop 1..5, acknowledged */
	recreate(x, 0);
	uint8_t *s1 = snap(x, 1), *s2 = snap(x, 2);
	assert_int_equal(open_app(x, ALL, NREP, true, &a), DXL_E_STALE);
	print_message("  refused: %s\n", dxl_errmsg());
	assert_non_null(strstr(dxl_errmsg(), "reference"));
	assert_non_null(strstr(dxl_errmsg(), "is behind"));
	assert_non_null(strstr(dxl_errmsg(), x->rep[0].t[RING].addr));
	assert_non_null(strstr(dxl_errmsg(), "below the watermark 1200"));
	assert_unchanged(x, 1, s1);
	assert_unchanged(x, 2, s2);
	struct recs c;
	scan(x, 1, &c, NULL, NULL);
	assert_int_equal(c.n, 5);

	/* a member that holds them as the reference catches the empty one up */
	const int FROM1[NREP] = {1, 0, 2};
	assert_int_equal(open_app(x, FROM1, NREP, true, &a), 0);
	put(a, 200, 0, 0x7, NREP); /* (not below the watermark: ts 1200) */
	dxl_appender_delete(&a);
	assert_identical(x, 6);

	/* records above every watermark (never acknowledged) are still cut */
	const int ONE2[1] = {2};
	assert_int_equal(open_app(x, ONE2, 1, false, &a), 0);
	put(a, 201, 0, 0x1, 1); /* only on replica 2: never acknowledged */
	dxl_appender_delete(&a);
	assert_int_equal(open_app(x, ALL, NREP, true, &a), 0);
	struct dxl_repair_stats rs;
	dxl_appender_repair_stats(a, &rs);
	assert_int_equal(rs.records_dropped, 1);
	dxl_appender_delete(&a);
	assert_identical(x, 6);
	fx_free(x);
}

/* ---- issue 19.1: a head is durable before any writer may use it ------------ */

struct head_crash {
	struct dxl_appender *a;
	uint32_t crash_step; /* set_head "crashes" after storing this copy */
	uint8_t *ctl;        /* the ring's control block */
	uint8_t pre[2 * DXL_RING_HEAD_SLOT_SIZE]; /* the slots before */
	uint64_t next_txn, acked_max;
	unsigned appended;   /* appends acknowledged while the head was not durable */
};

/* try to append txn (1000 + txn): 0 acknowledged, else the error */
static int try_put(struct dxl_appender *a, uint64_t txn)
{
	static uint8_t p[8192];
	uint32_t len = len_of(txn, 0);
	make_payload(p, len, txn, 0);
	struct dxl_rec r = {.txn_id = txn, .commit_ts = 1000 + txn, .payload = p,
			    .payload_len = len};
	return dxl_appender_append_sync(a, &r, NULL, NULL);
}

/* the new head is stored, not persisted: the writer runs, then the crash
 * loses the store */
static int head_crash_hook(void *slot, uint32_t step, void *arg)
{
	struct head_crash *hc = arg;
	if (step != hc->crash_step)
		return 0;
	for (int k = 0; k < 8 && try_put(hc->a, hc->next_txn) == 0; k++) {
		hc->acked_max = hc->next_txn++;
		hc->appended++;
	}
	dxl_err_clear();
	uint8_t *s = slot;
	memcpy(s, hc->pre + (s - hc->ctl), DXL_RING_HEAD_SLOT_SIZE);
	return 1;
}

static int head_crash_run(uint32_t step)
{
	struct fx *x = fx_new(16384);
	const int R0[1] = {0};
	struct head_crash hc = {.crash_step = step, .next_txn = 1};
	assert_int_equal(open_app(x, R0, 1, false, &hc.a), 0);
	/* fill the ring: the writer waits for the head */
	int full;
	while ((full = try_put(hc.a, hc.next_txn)) == 0)
		hc.acked_max = hc.next_txn++;
	assert_int_equal(full, DXL_E_FULL);
	dxl_err_clear();
	assert_true(hc.acked_max >= 8);
	/* the replica applied the first half: it moves the head past it */
	struct dxl_logstore *ls = x->rep[0].ls;
	struct dxl_ring_iter it;
	struct dxl_rec rec;
	uint64_t last = 0;
	assert_int_equal(dxl_ring_iter_init(&it, ls, RING), 0);
	while (last < hc.acked_max / 2 && dxl_ring_iter_next(&it, &rec, NULL))
		last = rec.txn_id;
	hc.ctl = (uint8_t *)dxl_region_data(x->rep[0].reg) +
		 dxl_logstore_ctl_off(ls, RING);
	memcpy(hc.pre, hc.ctl, sizeof(hc.pre));
	dxl_ring_set_head_test_hook(head_crash_hook, &hc);
	int ret = dxl_logstore_set_head(ls, RING, it.pos, it.seq, 1000 + last);
	dxl_ring_set_head_test_hook(NULL, NULL);
	assert_int_equal(ret, DXL_E_IO); /* the crash */
	dxl_err_clear();
	dxl_appender_delete(&hc.a);
	/* the replica restarts with what is durable: every acknowledged record
	 * above its head must be there */
	struct dxl_ring_head h;
	assert_int_equal(dxl_logstore_head(ls, RING, &h), 0);
	struct recs c;
	scan(x, 0, &c, NULL, NULL);
	uint64_t first = h.last_ts ? h.last_ts - 1000 + 1 : 1;
	print_message("  crash at copy %u of the head: %u appends acknowledged "
		      "meanwhile; after the restart the head is past txn %llu and "
		      "the ring holds %u records (%llu acknowledged above it)\n",
		      step, hc.appended, (unsigned long long)first - 1, c.n,
		      (unsigned long long)(hc.acked_max - first + 1));
	if (c.n != hc.acked_max - first + 1 || (c.n && c.txn[0] != first))
		fail_msg("crash at copy %u of a new head: %llu acknowledged records above the durable head, the ring holds %u",
			 step, (unsigned long long)(hc.acked_max - first + 1), c.n);
	fx_free(x);
	return (int)hc.appended;
}

static void test_head_durable_before_writers_use_it(void **state)
{
	/* the first copy is visible, not durable: nobody may use it */
	assert_int_equal(head_crash_run(1), 0);
	/* the first copy is durable (the second is not): writers go on */
	assert_true(head_crash_run(2) > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_behind_copied_and_repair_off_refuses),
		cmocka_unit_test(test_ahead_truncated),
		cmocka_unit_test(test_behind_across_the_wrap),
		cmocka_unit_test(test_too_far_behind_then_pull),
		cmocka_unit_test(test_diverged_detected),
		cmocka_unit_test(test_behind_with_a_stray_record),
		cmocka_unit_test(test_last_ts_and_min_ts),
		cmocka_unit_test(test_ghost_after_torn_record),
		cmocka_unit_test(test_incarnation_slots),
		cmocka_unit_test(test_head_durable_before_writers_use_it),
		cmocka_unit_test(test_repair_keeps_what_a_watermark_proves),
	};
	return cmocka_run_group_tests_name("appender repair", tests, NULL, NULL);
}
