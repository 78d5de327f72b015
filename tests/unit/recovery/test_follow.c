/* test_follow.c -- a local ring kept a copy of a member's by reading only what changed (dxl_xfer_follow): after every round of appends, retention, wrap-arounds, a repair that cut and rewrote the unacknowledged suffix, or appends during the copy, the local ring holds exactly the source's records from its head, for a fraction of a full pull's READs */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "common/endian.h"
#include "dxl/recovery.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/log_replica.h"

#define NR 2

struct fx {
	char dir[64], spath[128], lpath[128];
	uint64_t size;
	struct dxl_region *sreg, *lreg;
	struct dxl_logstore *sls, *lls;
	struct dxl_fabric *sf, *f;
	struct dxl_ctx *sc0, *pc;
	struct dxl_mr *smr;
	struct dxl_log_target t[NR];
	struct dxl_qp *qp;
	/* the source's writer, in this process: tails and the next ts */
	uint64_t tail_pos[NR], tail_seq[NR], ts;
	unsigned seed;
};

static void make_region(const char *path, uint32_t node, uint64_t size, struct dxl_region **reg,
			struct dxl_logstore **ls)
{
	struct dxl_region_id id = {.cluster = "t", .node_id = node, .kind = DXL_REGION_LOG};
	uint64_t bytes = DXL_ALIGN_UP(dxl_logstore_bytes(NR, size), 4096ull);
	assert_int_equal(dxl_region_create(path, bytes, DXL_DUR_PROCESS, &id, reg), 0);
	assert_int_equal(dxl_logstore_format(*reg, 0, NR, size), 0);
	assert_int_equal(dxl_logstore_open(*reg, ls), 0);
}

static struct fx *fx_new(uint64_t size)
{
	struct fx *x = calloc(1, sizeof(*x));
	x->size = size;
	x->ts = 100;
	x->seed = 5;
	snprintf(x->dir, sizeof(x->dir), "/tmp/dxl-test-follow-XXXXXX");
	assert_non_null(mkdtemp(x->dir));
	struct dxl_fabric_cfg cfg;
	dxlt_fabric_cfg_from_env(&cfg);
	int ret = dxl_fabric_new(&cfg, &x->f);
	if (dxl_test_nodev_skip(ret))
		skip();
	assert_int_equal(ret, 0);
	assert_int_equal(dxl_ctx_new(x->f, 1, &x->pc), 0);
	snprintf(x->spath, sizeof(x->spath), "%s/src.log", x->dir);
	snprintf(x->lpath, sizeof(x->lpath), "%s/dst.log", x->dir);
	make_region(x->spath, 1, size, &x->sreg, &x->sls);
	make_region(x->lpath, 2, size, &x->lreg, &x->lls);
	dxlt_fabric_cfg_from_env(&cfg);
	cfg.node_id = 1;
	assert_int_equal(dxl_fabric_new(&cfg, &x->sf), 0);
	assert_int_equal(dxl_ctx_new(x->sf, 0, &x->sc0), 0);
	assert_int_equal(dxl_mr_reg(x->sf, dxl_region_data(x->sreg), dxl_region_data_size(x->sreg),
				    DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE | DXL_MR_PERSISTENT,
				    &x->smr), 0);
	for (uint32_t i = 0; i < NR; i++) {
		assert_int_equal(dxl_log_target_init(&x->t[i], x->sls, x->smr,
						     dxl_fabric_addr(x->sf), 0, i), 0);
		x->tail_pos[i] = 0;
		x->tail_seq[i] = 1;
	}
	assert_int_equal(dxl_qp_connect(x->pc, dxl_fabric_addr(x->sf), 0, &x->qp), 0);
	return x;
}

static void fx_free(struct fx *x)
{
	dxl_qp_delete(&x->qp);
	dxl_mr_dereg(&x->smr);
	dxl_fabric_delete(&x->f);
	dxl_fabric_delete(&x->sf);
	dxl_logstore_close(&x->sls);
	dxl_region_close(&x->sreg);
	dxl_logstore_close(&x->lls);
	dxl_region_close(&x->lreg);
	unlink(x->spath);
	unlink(x->lpath);
	rmdir(x->dir);
	free(x);
}

/* the source's writer: one record of len payload bytes in ring r */
static int append(struct fx *x, uint32_t r, uint32_t len)
{
	static uint8_t p[2048];
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(x->ts + i);
	struct dxl_rec rec = {.type = DXL_REC_DATA, .writer = r, .epoch = 1, .txn_id = x->ts,
			      .commit_ts = x->ts, .payload = p, .payload_len = len};
	struct dxl_ring_head h;
	assert_int_equal(dxl_logstore_head(x->sls, r, &h), 0);
	struct dxl_ring_place pl;
	uint32_t sz = dxl_rec_size(0, len);
	int ret = dxl_ring_place(x->size, x->tail_pos[r], x->tail_seq[r], h.pos, sz, &pl);
	if (ret)
		return ret;
	uint8_t *buf = (uint8_t *)dxl_region_data(x->sreg) + dxl_logstore_buf_off(x->sls, r);
	if (pl.skip_len)
		assert_int_equal(dxl_rec_encode_skip(r, 1, pl.skip_seq, pl.skip_len,
						     buf + pl.skip_off, pl.skip_len), (int)pl.skip_len);
	rec.seq = pl.rec_seq;
	assert_int_equal(dxl_rec_encode(&rec, NULL, buf + pl.rec_off, x->size - pl.rec_off),
			 (int)sz);
	x->tail_pos[r] = pl.new_tail_pos;
	x->tail_seq[r] = pl.new_tail_seq;
	x->ts++;
	return 0;
}

/* the writer's watermark: every record of ring r below ts acknowledged */
static void set_wmark(struct fx *x, uint32_t r, uint64_t ts)
{
	uint8_t *w = (uint8_t *)dxl_region_data(x->sreg) + dxl_logstore_ctl_off(x->sls, r) +
		     DXL_RING_WMARK_OFF;
	dxl_put_le64(w, ts);
	dxl_put_le64(w + 8, ts ^ DXL_RING_WMARK_MAGIC);
}

/* retention at the source: the head over up to n records below the
 * watermark */
static void retain(struct fx *x, uint32_t r, uint32_t n)
{
	struct dxl_ring_iter it;
	assert_int_equal(dxl_ring_iter_init(&it, x->sls, r), 0);
	struct dxl_rec rec;
	uint64_t at, npos = 0, nseq = 0, last = 0, wm = dxl_logstore_watermark(x->sls, r);
	uint32_t k = 0;
	while (k < n && dxl_ring_iter_next(&it, &rec, &at) == 1 && rec.commit_ts < wm) {
		npos = at + rec.total_len;
		nseq = rec.seq + 1;
		last = rec.commit_ts;
		k++;
	}
	if (k)
		assert_int_equal(dxl_logstore_set_head(x->sls, r, npos, nseq, last), 0);
}

struct recs {
	uint32_t n;
	uint64_t pos[4096], seq[4096], ts[4096];
	uint32_t crc[4096];
};

static void list(const struct dxl_logstore *ls, uint32_t r, struct recs *o)
{
	struct dxl_ring_iter it;
	assert_int_equal(dxl_ring_iter_init(&it, ls, r), 0);
	struct dxl_rec rec;
	uint64_t at;
	o->n = 0;
	while (o->n < 4096 && dxl_ring_iter_next(&it, &rec, &at) == 1) {
		o->pos[o->n] = at;
		o->seq[o->n] = rec.seq;
		o->ts[o->n] = rec.commit_ts;
		o->crc[o->n] = dxl_crc32c(0, rec.payload, rec.payload_len);
		o->n++;
	}
}

/* the local ring holds exactly the source's records, from the same head */
static void assert_copy(struct fx *x, uint32_t r)
{
	static struct recs a, b;
	list(x->sls, r, &a);
	list(x->lls, r, &b);
	struct dxl_ring_head ha, hb;
	assert_int_equal(dxl_logstore_head(x->sls, r, &ha), 0);
	assert_int_equal(dxl_logstore_head(x->lls, r, &hb), 0);
	assert_int_equal(ha.pos, hb.pos);
	assert_int_equal(ha.seq, hb.seq);
	if (a.n != b.n)
		fail_msg("ring %u: the source has %u records, the copy %u", r, a.n, b.n);
	for (uint32_t i = 0; i < a.n; i++)
		if (a.pos[i] != b.pos[i] || a.seq[i] != b.seq[i] || a.ts[i] != b.ts[i] ||
		    a.crc[i] != b.crc[i])
			fail_msg("ring %u record %u: position %" PRIu64 "/%" PRIu64 " seq %" PRIu64
				 "/%" PRIu64 " ts %" PRIu64 "/%" PRIu64,
				 r, i, a.pos[i], b.pos[i], a.seq[i], b.seq[i], a.ts[i], b.ts[i]);
	assert_int_equal(dxl_logstore_watermark(x->sls, r), dxl_logstore_watermark(x->lls, r));
}

static uint64_t follow(struct fx *x, uint32_t r, bool *full)
{
	struct dxl_follow_stats st;
	int ret = dxl_xfer_follow(x->lls, r, x->qp, &x->t[r], NULL, &st);
	if (ret)
		fail_msg("follow: %s", dxl_errmsg());
	if (full)
		*full = st.full;
	return st.bytes_read;
}

/*
 * Rounds of appends (some acknowledged: below the watermark, some not),
 * retention and wrap-arounds of small rings, each followed by a follow:
 * the copy is exact every time, and reads a fraction of the ring.
 */
static void test_rounds(void **state)
{
	(void)state;
	struct fx *x = fx_new(64 << 10);
	uint64_t read = 0, full_bytes = 0, rounds = 300, fulls = 0, laps = 0;
	for (uint64_t round = 0; round < rounds; round++) {
		uint32_t r = (uint32_t)(round % NR);
		uint32_t n = (uint32_t)rand_r(&x->seed) % 12;
		for (uint32_t i = 0; i < n; i++) {
			if (append(x, r, 16 + (uint32_t)rand_r(&x->seed) % 1500) == DXL_E_FULL) {
				retain(x, r, 1000);
				break;
			}
		}
		/* the watermark: most of what was appended, not all */
		set_wmark(x, r, x->ts - (uint64_t)rand_r(&x->seed) % 3);
		if (rand_r(&x->seed) % 2)
			retain(x, r, (uint32_t)rand_r(&x->seed) % 8);
		bool full;
		read += follow(x, r, &full);
		fulls += full;
		full_bytes += x->size + 2 * DXL_RING_CTL_SIZE;
		assert_copy(x, r);
	}
	for (uint32_t r = 0; r < NR; r++)
		laps += x->tail_pos[r] / x->size;
	print_message("  %" PRIu64 " rounds, %" PRIu64 " laps of the rings: read %" PRIu64
		      " bytes, %.1f%% of full pulls (%" PRIu64 " were full)\n",
		      rounds, laps, read, 100.0 * (double)read / (double)full_bytes, fulls);
	assert_true(laps >= 4);           /* wrap-arounds were covered */
	assert_true(read * 4 < full_bytes); /* it reads what changed */
	assert_int_equal(fulls, 0);
	fx_free(x);
}

/*
 * A writer's repair cut the source's unacknowledged suffix (records the
 * copy has already) and the next writer appended other records at those
 * positions with the same sequence numbers: the copy must take them, not
 * keep its stale ones. (Fails when the local records are kept up to the
 * local end instead of the watermark.)
 */
static void test_repaired_suffix(void **state)
{
	(void)state;
	struct fx *x = fx_new(64 << 10);
	for (int i = 0; i < 20; i++)
		assert_int_equal(append(x, 0, 100), 0);
	uint64_t wm = x->ts - 5; /* the last 5 not acknowledged */
	set_wmark(x, 0, wm);
	follow(x, 0, NULL);
	assert_copy(x, 0);
	/* the repair: cut at the first unacknowledged record */
	struct recs a;
	list(x->sls, 0, &a);
	uint32_t cut = a.n - 5;
	assert_int_equal(dxl_logstore_truncate(x->sls, 0, a.pos[cut], a.seq[cut]) >= 0, 1);
	x->tail_pos[0] = a.pos[cut];
	x->tail_seq[0] = a.seq[cut];
	/* the next writer: other payloads, same positions and sequence */
	for (int i = 0; i < 3; i++)
		assert_int_equal(append(x, 0, 100 + 7 * (uint32_t)i), 0);
	follow(x, 0, NULL);
	assert_copy(x, 0);
	/* cut again, nothing appended: the copy ends there too */
	list(x->sls, 0, &a);
	assert_int_equal(dxl_logstore_truncate(x->sls, 0, a.pos[a.n - 2], a.seq[a.n - 2]) >= 0, 1);
	follow(x, 0, NULL);
	assert_copy(x, 0);
	fx_free(x);
}

/* a local ring ahead of the source's head (it ran retention as a member
 * further than the source did): the whole ring is copied */
static void test_local_ahead(void **state)
{
	(void)state;
	struct fx *x = fx_new(64 << 10);
	for (int i = 0; i < 30; i++)
		assert_int_equal(append(x, 1, 200), 0);
	set_wmark(x, 1, x->ts);
	follow(x, 1, NULL);
	assert_copy(x, 1);
	struct dxl_ring_iter it;
	assert_int_equal(dxl_ring_iter_init(&it, x->lls, 1), 0);
	struct dxl_rec rec;
	uint64_t at;
	for (int i = 0; i < 10; i++)
		assert_int_equal(dxl_ring_iter_next(&it, &rec, &at), 1);
	assert_int_equal(dxl_logstore_set_head(x->lls, 1, it.pos, it.seq, rec.commit_ts), 0);
	bool full;
	follow(x, 1, &full);
	assert_true(full);
	assert_copy(x, 1);
	fx_free(x);
}

/* appends while the follow reads: the copy is a valid prefix of the
 * source (every record it has is the source's at that position), and the
 * next follow completes it */
struct bg {
	struct fx *x;
	atomic_bool stop;
	atomic_uint n;
	pthread_mutex_t mu; /* held by the writer per append; by the test while
			       it compares with the source's bytes */
};

static void *bg_main(void *arg)
{
	struct bg *b = arg;
	while (!atomic_load(&b->stop)) {
		pthread_mutex_lock(&b->mu);
		if (append(b->x, 0, 64 + (uint32_t)rand_r(&b->x->seed) % 900) == DXL_E_FULL) {
			set_wmark(b->x, 0, b->x->ts);
			retain(b->x, 0, 50);
		}
		pthread_mutex_unlock(&b->mu);
		atomic_fetch_add(&b->n, 1);
	}
	return NULL;
}

static void test_appends_during_follow(void **state)
{
	(void)state;
	struct fx *x = fx_new(256 << 10);
	struct bg b = {.x = x, .mu = PTHREAD_MUTEX_INITIALIZER};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, bg_main, &b), 0);
	uint32_t checks = 0;
	/* at least 200 follows, and on until 1000 records were compared
	 * (how many a follow finds still in place at the source depends on
	 * how fast the writer laps the ring: a loaded machine gets few) */
	int i;
	uint64_t t0 = dxl_now_ns();
	for (i = 0; i < 200 || (checks < 1000 && dxl_now_ns() - t0 < 30ull * 1000000000ull); i++) {
		if (i >= 200 && i % 8 == 0)
			sched_yield();
		follow(x, 0, NULL);
		/* every record of the copy is the source's */
		static struct recs l;
		list(x->lls, 0, &l);
		pthread_mutex_lock(&b.mu);
		struct dxl_ring_iter it;
		uint8_t *sbuf = (uint8_t *)dxl_region_data(x->sreg) + dxl_logstore_buf_off(x->sls, 0);
		for (uint32_t k = 0; k < l.n; k++) {
			/* the source may have reclaimed and overwritten old
			 * positions: compare what it still has there */
			dxl_ring_iter_init_buf(&it, sbuf, x->size, l.pos[k], l.seq[k]);
			struct dxl_rec rec;
			uint64_t at;
			if (dxl_ring_iter_next(&it, &rec, &at) == 1) {
				if (rec.commit_ts != l.ts[k] ||
				    dxl_crc32c(0, rec.payload, rec.payload_len) != l.crc[k])
					fail_msg("follow %d: record %u of %u at %" PRIu64 " seq %" PRIu64
						 ": ts %" PRIu64 " in the copy, %" PRIu64 " at the source",
						 i, k, l.n, l.pos[k], l.seq[k], l.ts[k], rec.commit_ts);
				checks++;
			}
		}
		pthread_mutex_unlock(&b.mu);
	}
	atomic_store(&b.stop, true);
	pthread_join(th, NULL);
	set_wmark(x, 0, x->ts);
	follow(x, 0, NULL);
	assert_copy(x, 0);
	print_message("  %d follows during %u appends: %u records checked against the source\n",
		      i, atomic_load(&b.n), checks);
	assert_true(atomic_load(&b.n) >= 200);
	assert_true(checks >= 1000);
	fx_free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rounds),
		cmocka_unit_test(test_repaired_suffix),
		cmocka_unit_test(test_local_ahead),
		cmocka_unit_test(test_appends_during_follow),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
