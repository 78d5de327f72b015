/* test_pull.c -- state transfer: a local ring made an exact copy of a remote one
 *
 * The source is a log region served from this process by its own fabric
 * (the provider the environment names), or, for the copy under concurrent
 * appends, a replica process (tests/lib/log_replica.h) whose CPU advances
 * its heads. The destination is a plain local region, as in a replica that
 * rejoins a shard.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/fabric.h"
#include "dxl/log.h"
#include "dxl/recovery.h"
#include "recovery/recovery_internal.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/log_replica.h"

#define NRINGS 2

struct fx {
	char dir[64], spath[128], lpath[128];
	uint64_t ring_size;
	/* the source, served */
	struct dxl_region *sreg;
	struct dxl_logstore *sls;
	struct dxl_fabric *sf;
	struct dxl_ctx *sc0;
	struct dxl_mr *smr;
	struct dxl_log_target t[NRINGS];
	/* the destination */
	struct dxl_region *lreg;
	struct dxl_logstore *lls;
	/* the writer and the puller */
	struct dxl_fabric *f;
	struct dxl_ctx *c;  /* ctx 0: the appender */
	struct dxl_ctx *pc; /* ctx 1: pulls */
	struct dxl_qp *qp;
	struct dxl_appender *a;
};

static void fx_free(struct fx *x);

static void make_region(const char *path, uint32_t node, uint64_t ring_size,
			struct dxl_region **reg, struct dxl_logstore **ls)
{
	struct dxl_region_id id = {.cluster = "t", .node_id = node,
				   .kind = DXL_REGION_LOG};
	uint64_t bytes = DXL_ALIGN_UP(dxl_logstore_bytes(NRINGS, ring_size), 4096ull);
	assert_int_equal(dxl_region_create(path, bytes, DXL_DUR_PROCESS, &id, reg), 0);
	assert_int_equal(dxl_logstore_format(*reg, 0, NRINGS, ring_size), 0);
	assert_int_equal(dxl_logstore_open(*reg, ls), 0);
}

static struct fx *fx_new(uint64_t ring_size)
{
	alarm(120);
	struct fx *x = calloc(1, sizeof(*x));
	x->ring_size = ring_size;
	snprintf(x->dir, sizeof(x->dir), "/tmp/dxl-test-pull-XXXXXX");
	assert_non_null(mkdtemp(x->dir));
	struct dxl_fabric_cfg cfg;
	dxlt_fabric_cfg_from_env(&cfg);
	int ret = dxl_fabric_new(&cfg, &x->f);
	if (dxl_test_nodev_skip(ret)) {
		fx_free(x);
		skip();
	}
	assert_int_equal(ret, 0);
	assert_int_equal(dxl_ctx_new(x->f, 0, &x->c), 0);
	assert_int_equal(dxl_ctx_new(x->f, 1, &x->pc), 0);
	snprintf(x->spath, sizeof(x->spath), "%s/src.log", x->dir);
	snprintf(x->lpath, sizeof(x->lpath), "%s/dst.log", x->dir);
	make_region(x->spath, 1, ring_size, &x->sreg, &x->sls);
	make_region(x->lpath, 2, ring_size, &x->lreg, &x->lls);
	dxlt_fabric_cfg_from_env(&cfg);
	cfg.node_id = 1;
	assert_int_equal(dxl_fabric_new(&cfg, &x->sf), 0);
	assert_int_equal(dxl_ctx_new(x->sf, 0, &x->sc0), 0);
	assert_int_equal(dxl_mr_reg(x->sf, dxl_region_data(x->sreg),
				    dxl_region_data_size(x->sreg),
				    DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE |
					    DXL_MR_REMOTE_ATOMIC | DXL_MR_PERSISTENT,
				    &x->smr), 0);
	assert_int_equal(dxl_region_bind_mr(x->sreg, x->smr), 0);
	for (uint32_t i = 0; i < NRINGS; i++)
		assert_int_equal(dxl_log_target_init(&x->t[i], x->sls, x->smr,
						     dxl_fabric_addr(x->sf), 0, i), 0);
	assert_int_equal(dxl_qp_connect(x->pc, dxl_fabric_addr(x->sf), 0, &x->qp), 0);
	struct dxl_appender_cfg ac;
	dxl_appender_cfg_init(&ac);
	ac.max_record = 8192;
	ac.full_wait_ms = 200;
	assert_int_equal(dxl_appender_new(x->c, &ac, &x->t[0], 1, &x->a), 0);
	return x;
}

static void fx_free(struct fx *x)
{
	dxl_appender_delete(&x->a);
	dxl_fabric_delete(&x->f);
	dxl_fabric_delete(&x->sf);
	dxl_logstore_close(&x->sls);
	dxl_region_close(&x->sreg);
	dxl_logstore_close(&x->lls);
	dxl_region_close(&x->lreg);
	if (x->spath[0])
		unlink(x->spath);
	if (x->lpath[0])
		unlink(x->lpath);
	rmdir(x->dir);
	free(x);
	alarm(0);
}

static void make_payload(uint8_t *p, uint32_t len, uint64_t txn)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(txn * 131 + i);
}

static void put(struct fx *x, uint64_t txn, uint32_t len)
{
	static uint8_t p[8192];
	make_payload(p, len, txn);
	struct dxl_rec r = {.txn_id = txn, .commit_ts = 1000 + txn, .payload = p,
			    .payload_len = len};
	if (dxl_appender_append_sync(x->a, &r, NULL, NULL))
		fail_msg("append %llu: %s", (unsigned long long)txn, dxl_errmsg());
}

static uint8_t *ring_bytes(struct dxl_region *reg, struct dxl_logstore *ls,
			   uint32_t ring)
{
	return (uint8_t *)dxl_region_data(reg) + dxl_logstore_ctl_off(ls, ring);
}

/* the local ring is byte for byte the source's */
static void assert_same_bytes(struct fx *x, uint32_t lring, uint32_t sring)
{
	assert_memory_equal(ring_bytes(x->lreg, x->lls, lring),
			    ring_bytes(x->sreg, x->sls, sring),
			    DXL_RING_CTL_SIZE + x->ring_size);
}

struct list {
	uint32_t n;
	uint64_t txn[4096], pos[4096];
};

static int collect(const struct dxl_rec *rec, uint64_t pos, void *arg)
{
	struct list *l = arg;
	assert_true(l->n < 4096);
	assert_int_equal(rec->commit_ts, 1000 + rec->txn_id);
	uint8_t want[8192];
	make_payload(want, rec->payload_len, rec->txn_id);
	assert_memory_equal(rec->payload, want, rec->payload_len);
	l->txn[l->n] = rec->txn_id;
	l->pos[l->n++] = pos;
	return 0;
}

/* the two rings' records from their heads are the same */
static void assert_same_records(struct dxl_logstore *a, uint32_t ra,
				struct dxl_logstore *b, uint32_t rb, uint32_t want_n)
{
	static struct list la, lb;
	memset(&la, 0, sizeof(la));
	memset(&lb, 0, sizeof(lb));
	uint64_t ea, eb, sa, sb;
	assert_true(dxl_ring_scan(a, ra, collect, &la, &ea, &sa) >= 0);
	assert_true(dxl_ring_scan(b, rb, collect, &lb, &eb, &sb) >= 0);
	assert_int_equal(la.n, want_n);
	assert_int_equal(lb.n, want_n);
	assert_int_equal(ea, eb);
	assert_int_equal(sa, sb);
	for (uint32_t i = 0; i < la.n; i++) {
		assert_int_equal(la.txn[i], lb.txn[i]);
		assert_int_equal(la.pos[i], lb.pos[i]);
	}
}

/* ---- tests --------------------------------------------------------------------- */

static void test_pull_records_then_nothing_changes(void **state)
{
	struct fx *x = fx_new(1 << 20);
	for (uint64_t t = 1; t <= 50; t++)
		put(x, t, 1 + (uint32_t)(t * 97 % 3000));
	struct dxl_pull_stats st;
	assert_int_equal(dxl_xfer_pull(x->lls, 0, x->qp, &x->t[0], &st), 0);
	uint64_t tail, tseq;
	dxl_appender_tail(x->a, &tail, &tseq);
	assert_int_equal(st.records, 50);
	assert_int_equal(st.end_pos, tail);
	assert_int_equal(st.end_seq, tseq);
	assert_int_equal(st.attempts, 1);
	assert_int_equal(st.head.pos, 0);
	assert_int_equal(st.watermark, 1050);
	assert_int_equal(st.bytes_read, 2 * DXL_RING_CTL_SIZE + x->ring_size);
	assert_true(st.changed >= tail / 2); /* the records' bytes, at least */
	assert_true(st.changed <= tail + DXL_RING_CTL_SIZE);
	assert_same_bytes(x, 0, 0);
	assert_same_records(x->lls, 0, x->sls, 0, 50);
	assert_int_equal(dxl_logstore_watermark(x->lls, 0), 1050);
	/* the owner word came along: writer 0's claim (generation 1) owns the
	 * copy too */
	uint64_t owner;
	memcpy(&owner, ring_bytes(x->lreg, x->lls, 0) + DXL_RING_OWNER_OFF, 8);
	assert_int_equal(owner, DXL_RING_OWNER(1, 1));

	/* a quiet ring: nothing to change */
	assert_int_equal(dxl_xfer_pull(x->lls, 0, x->qp, &x->t[0], &st), 0);
	assert_int_equal(st.changed, 0);
	assert_int_equal(st.records, 50);

	/* five more: only what they changed (their bytes, the watermark) */
	for (uint64_t t = 51; t <= 55; t++)
		put(x, t, 100);
	uint64_t tail2;
	dxl_appender_tail(x->a, &tail2, NULL);
	/* with a caller's bounce buffer this time */
	size_t blen = dxl_xfer_pull_bounce_bytes(x->ring_size);
	void *bmem = dxlt_alloc_pages(blen);
	struct dxl_mr *bmr;
	assert_int_equal(dxl_mr_reg(x->f, bmem, blen, DXL_MR_LOCAL_WRITE, &bmr), 0);
	assert_int_equal(dxl_xfer_pull_buf(x->lls, 0, x->qp, &x->t[0], bmr, &st), 0);
	assert_int_equal(st.records, 55);
	assert_true(st.changed > 0);
	assert_true(st.changed <= tail2 - tail + 16);
	assert_same_bytes(x, 0, 0);
	dxl_mr_dereg(&bmr);
	dxlt_free_pages(bmem, blen);
	fx_free(x);
}

/* an empty source ring empties the local one; empty onto empty changes
 * nothing */
static void test_pull_empty_ring(void **state)
{
	struct fx *x = fx_new(65536);
	for (uint64_t t = 1; t <= 20; t++)
		put(x, t, 500);
	struct dxl_pull_stats st;
	assert_int_equal(dxl_xfer_pull(x->lls, 0, x->qp, &x->t[0], &st), 0);
	assert_int_equal(st.records, 20);
	/* source ring 1 is empty (never written) */
	assert_int_equal(dxl_xfer_pull(x->lls, 0, x->qp, &x->t[1], &st), 0);
	assert_int_equal(st.records, 0);
	assert_int_equal(st.end_pos, 0);
	assert_int_equal(st.end_seq, 1);
	assert_int_equal(st.watermark, 0);
	assert_true(st.changed > 0);
	assert_same_bytes(x, 0, 1);
	assert_int_equal(dxl_ring_scan(x->lls, 0, NULL, NULL, NULL, NULL), 0);
	assert_int_equal(dxl_xfer_pull(x->lls, 1, x->qp, &x->t[1], &st), 0);
	assert_int_equal(st.changed, 0);
	assert_int_equal(st.records, 0);
	fx_free(x);
}

/* the source applied (advanced its head) and lapped the ring many times */
static void test_pull_after_retention_and_wrap(void **state)
{
	struct fx *x = fx_new(16384);
	uint64_t t = 1;
	for (int lap = 0; lap < 40; lap++) {
		for (int k = 0; k < 3; k++, t++)
			put(x, t, 64 + (uint32_t)(t * 211 % 2500));
		assert_true(dxl_ring_advance_head(x->sls, 0) >= 0);
	}
	for (int k = 0; k < 4; k++, t++)
		put(x, t, 64 + (uint32_t)(t * 211 % 2500));
	struct dxl_ring_head h;
	assert_int_equal(dxl_logstore_head(x->sls, 0, &h), 0);
	assert_true(h.pos > 3 * 16384);
	struct dxl_pull_stats st;
	assert_int_equal(dxl_xfer_pull(x->lls, 0, x->qp, &x->t[0], &st), 0);
	assert_int_equal(st.head.pos, h.pos);
	assert_int_equal(st.head.seq, h.seq);
	assert_int_equal(st.head.last_ts, h.last_ts);
	assert_int_equal(st.records, 4);
	assert_same_bytes(x, 0, 0);
	assert_same_records(x->lls, 0, x->sls, 0, 4);
	struct dxl_ring_head lh;
	assert_int_equal(dxl_logstore_head(x->lls, 0, &lh), 0);
	assert_int_equal(lh.pos, h.pos);
	assert_int_equal(lh.gen, h.gen);
	assert_int_equal(dxl_xfer_pull(x->lls, 0, x->qp, &x->t[0], &st), 0);
	assert_int_equal(st.changed, 0);
	fx_free(x);
}

/* ---- the head moving during the copy (fault injection) ------------------------ */

struct mover {
	struct fx *x;
	uint32_t moves_until; /* move the head in attempts 1..moves_until */
	uint32_t calls;
	int scribble;         /* then overwrite what the head passed */
};

/* the source's replica applies one more record, and (scribble) its writer
 * reuses the space at once, as a writer lapping the ring may */
static void move_head(uint32_t attempt, void *arg)
{
	struct mover *m = arg;
	m->calls++;
	if (attempt > m->moves_until)
		return;
	struct dxl_logstore *ls = m->x->sls;
	struct dxl_ring_iter it;
	assert_int_equal(dxl_ring_iter_init(&it, ls, 0), 0);
	uint64_t from = it.pos;
	struct dxl_rec rec;
	assert_int_equal(dxl_ring_iter_next(&it, &rec, NULL), 1);
	struct dxl_ring_head h;
	assert_int_equal(dxl_logstore_head(ls, 0, &h), 0);
	assert_int_equal(dxl_logstore_set_head(ls, 0, it.pos, it.seq, rec.commit_ts), 0);
	if (m->scribble) {
		uint8_t *b = (uint8_t *)dxl_region_data(m->x->sreg) +
			     dxl_logstore_buf_off(ls, 0);
		memset(b + from % m->x->ring_size, 0xa5, it.pos - from);
	}
}

static void test_pull_retries_while_the_head_moves(void **state)
{
	struct fx *x = fx_new(65536);
	for (uint64_t t = 1; t <= 30; t++)
		put(x, t, 300);
	/* moved once: the second copy is exact */
	struct mover m = {.x = x, .moves_until = 1};
	dxl_rcv_pull_set_test_hook(move_head, &m);
	struct dxl_pull_stats st;
	int ret = dxl_xfer_pull(x->lls, 0, x->qp, &x->t[0], &st);
	dxl_rcv_pull_set_test_hook(NULL, NULL);
	assert_int_equal(ret, 0);
	assert_int_equal(m.calls, 2);
	assert_int_equal(st.attempts, 2);
	assert_int_equal(st.records, 29);
	assert_int_equal(st.bytes_read,
			 2 * (2 * DXL_RING_CTL_SIZE + x->ring_size));
	assert_same_bytes(x, 0, 0);
	assert_same_records(x->lls, 0, x->sls, 0, 29);

	/* moving all the time, the space behind it reused at once: the last
	 * copy is kept with the later head, and from there it is right */
	m = (struct mover){.x = x, .moves_until = 100, .scribble = 1};
	dxl_rcv_pull_set_test_hook(move_head, &m);
	ret = dxl_xfer_pull(x->lls, 0, x->qp, &x->t[0], &st);
	dxl_rcv_pull_set_test_hook(NULL, NULL);
	assert_int_equal(ret, 0);
	assert_int_equal(st.attempts, DXL_PULL_MAX_ATTEMPTS);
	assert_int_equal(m.calls, DXL_PULL_MAX_ATTEMPTS);
	assert_int_equal(st.records, 29 - DXL_PULL_MAX_ATTEMPTS);
	struct dxl_ring_head sh, lh;
	assert_int_equal(dxl_logstore_head(x->sls, 0, &sh), 0);
	assert_int_equal(dxl_logstore_head(x->lls, 0, &lh), 0);
	assert_int_equal(lh.pos, sh.pos);
	assert_int_equal(lh.seq, sh.seq);
	assert_int_equal(st.head.pos, sh.pos);
	assert_same_records(x->lls, 0, x->sls, 0, 29 - DXL_PULL_MAX_ATTEMPTS);
	/* (the bytes below the head differ: the copy kept the old ones) */
	fx_free(x);
}

/* a record whose WRITE landed in part ends the copy's valid content */
static void test_torn_record_at_the_end(void **state)
{
	struct fx *x = fx_new(65536);
	for (uint64_t t = 1; t <= 10; t++)
		put(x, t, 700);
	uint64_t tail, seq;
	dxl_appender_tail(x->a, &tail, &seq);
	dxl_appender_delete(&x->a);
	/* record 11 at the tail, its middle line not yet there */
	uint8_t rec[1024], p[700];
	make_payload(p, 700, 11);
	struct dxl_rec r = {.type = DXL_REC_DATA, .seq = seq, .txn_id = 11,
			    .commit_ts = 1011, .payload = p, .payload_len = 700,
			    .incarnation = dxl_logstore_incarnation(x->sls, 0)};
	int len = dxl_rec_encode(&r, NULL, rec, sizeof(rec));
	assert_int_equal(len, 768);
	uint8_t *b = (uint8_t *)dxl_region_data(x->sreg) +
		     dxl_logstore_buf_off(x->sls, 0) + tail % x->ring_size;
	memcpy(b, rec, 256);
	memcpy(b + 512, rec + 512, 256); /* header and trailer, not 256..511 */
	struct dxl_pull_stats st;
	assert_int_equal(dxl_xfer_pull(x->lls, 0, x->qp, &x->t[0], &st), 0);
	assert_int_equal(st.records, 10);
	assert_int_equal(st.end_pos, tail);
	assert_int_equal(st.end_seq, seq);
	assert_same_bytes(x, 0, 0);
	assert_int_equal(dxl_ring_scan(x->lls, 0, NULL, NULL, NULL, NULL), 10);
	/* the rest lands: the next pull has it */
	memcpy(b + 256, rec + 256, 256);
	assert_int_equal(dxl_xfer_pull(x->lls, 0, x->qp, &x->t[0], &st), 0);
	assert_int_equal(st.records, 11);
	assert_int_equal(st.end_pos, tail + 768);
	uint64_t nonzero = 0; /* the local bytes there were zero */
	for (int i = 256; i < 512; i++)
		nonzero += rec[i] != 0;
	assert_int_equal(st.changed, nonzero);
	fx_free(x);
}

static void test_pull_errors(void **state)
{
	struct fx *x = fx_new(65536);
	put(x, 1, 100);
	struct dxl_pull_stats st;
	assert_int_equal(dxl_xfer_pull(x->lls, 2, x->qp, &x->t[0], &st),
			 DXL_E_INVAL);
	struct dxl_log_target t = x->t[0];
	t.ring_size = 2 * x->ring_size;
	assert_int_equal(dxl_xfer_pull(x->lls, 0, x->qp, &t, &st), DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "the local ring 65536"));
	/* a bounce buffer too small */
	void *bmem = dxlt_alloc_pages(65536);
	struct dxl_mr *bmr;
	assert_int_equal(dxl_mr_reg(x->f, bmem, 65536, DXL_MR_LOCAL_WRITE, &bmr), 0);
	assert_int_equal(dxl_xfer_pull_buf(x->lls, 0, x->qp, &x->t[0], bmr, &st),
			 DXL_E_INVAL);
	dxl_mr_dereg(&bmr);
	dxlt_free_pages(bmem, 65536);
	/* the source re-registered (fenced): refused, nothing written */
	uint8_t *before = malloc(DXL_RING_CTL_SIZE + x->ring_size);
	memcpy(before, ring_bytes(x->lreg, x->lls, 0), DXL_RING_CTL_SIZE + x->ring_size);
	dxl_mr_dereg(&x->smr);
	assert_int_equal(dxl_xfer_pull(x->lls, 0, x->qp, &x->t[0], &st),
			 DXL_E_ACCESS);
	assert_int_equal(st.changed, 0);
	assert_memory_equal(before, ring_bytes(x->lreg, x->lls, 0),
			    DXL_RING_CTL_SIZE + x->ring_size);
	free(before);
	fx_free(x);
}

/* ---- a writer appending during the copies -------------------------------------- */

struct writer {
	struct dxl_fabric *f;
	struct dxl_log_target t;
	atomic_int stop;
	atomic_uint_fast64_t progress; /* acknowledged so far */
	atomic_int done;
	uint64_t appended; /* after the join */
	uint64_t tail, tail_seq;
	int err;
};

#define WRITER_MAX 2000

static uint32_t wlen(uint64_t txn)
{
	return 1 + (uint32_t)(txn * 389 % 3000);
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	struct dxl_ctx *c = NULL;
	struct dxl_appender *a = NULL;
	w->err = dxl_ctx_new(w->f, 2, &c);
	struct dxl_appender_cfg cfg;
	dxl_appender_cfg_init(&cfg);
	cfg.max_inflight = 8;
	cfg.max_record = 8192;
	cfg.full_wait_ms = 5000;
	if (!w->err)
		w->err = dxl_appender_new(c, &cfg, &w->t, 1, &a);
	static uint8_t p[8192];
	uint64_t next = 1, done = 0;
	while (!w->err && (!atomic_load(&w->stop) || done + 1 < next)) {
		if (next > WRITER_MAX)
			atomic_store(&w->stop, 1);
		if (!atomic_load(&w->stop)) {
			make_payload(p, wlen(next), next);
			struct dxl_rec r = {.txn_id = next, .commit_ts = 1000 + next,
					    .payload = p, .payload_len = wlen(next)};
			int ret = dxl_appender_append(a, &r, NULL, NULL);
			if (ret == 0)
				next++;
			else if (ret != DXL_E_AGAIN)
				w->err = ret;
		}
		struct dxl_append_result res[8];
		int k = dxl_appender_poll(a, res, 8);
		for (int i = 0; i < k; i++) {
			if (res[i].status)
				w->err = res[i].status;
			done++;
		}
		atomic_store(&w->progress, done);
		if (k == 0 && dxl_appender_inflight(a) >= 8)
			dxl_appender_wait(a, 10);
	}
	w->appended = done;
	if (a)
		dxl_appender_tail(a, &w->tail, &w->tail_seq);
	dxl_appender_delete(&a);
	dxl_ctx_delete(&c);
	atomic_store(&w->done, 1);
	return NULL;
}

/* the copy is a valid prefix of the writer's stream: consecutive
 * transactions from the head on, each intact; and the watermark copied
 * promises nothing the copy lacks */
static uint64_t check_prefix(struct dxl_logstore *ls, const struct dxl_pull_stats *st)
{
	static struct list l;
	memset(&l, 0, sizeof(l));
	uint64_t end;
	int n = dxl_ring_scan(ls, 0, collect, &l, &end, NULL);
	assert_int_equal(n, (int)st->records);
	assert_int_equal(end, st->end_pos);
	for (uint32_t i = 1; i < l.n; i++)
		assert_int_equal(l.txn[i], l.txn[i - 1] + 1);
	uint64_t last_ts = st->head.last_ts;
	if (l.n) {
		assert_int_equal(1000 + l.txn[0], st->head.last_ts ? st->head.last_ts + 1 : 1001);
		last_ts = 1000 + l.txn[l.n - 1];
	}
	/* records below the watermark were persistent before the copy */
	assert_true(st->watermark <= last_ts + 1);
	return l.n ? l.txn[l.n - 1] : 0;
}

static void test_pull_while_a_writer_appends(void **state)
{
	alarm(120);
	char dir[64];
	snprintf(dir, sizeof(dir), "/tmp/dxl-test-pull-XXXXXX");
	assert_non_null(mkdtemp(dir));
	struct dxl_test_replica rep;
	char rdir[128];
	snprintf(rdir, sizeof(rdir), "%s/src", dir);
	/* the ring holds everything the writer appends (nothing is reclaimed
	 * here: the head moving during a copy is test_pull_retries_...) */
	const uint64_t size = 4u << 20;
	struct dxl_test_replica_cfg rc = {.node_id = 1, .nrings = NRINGS,
					  .ring_size = size, .apply_ms = 0};
	int ret = dxl_test_replica_start(&rep, rdir, &rc);
	if (dxl_test_nodev_skip(ret)) {
		rmdir(dir);
		skip();
	}
	assert_int_equal(ret, 0);
	char lpath[128];
	snprintf(lpath, sizeof(lpath), "%s/dst.log", dir);
	struct dxl_region *lreg;
	struct dxl_logstore *lls;
	make_region(lpath, 2, size, &lreg, &lls);
	struct dxl_fabric_cfg cfg;
	dxlt_fabric_cfg_from_env(&cfg);
	struct dxl_fabric *f;
	assert_int_equal(dxl_fabric_new(&cfg, &f), 0);
	struct dxl_ctx *pc;
	assert_int_equal(dxl_ctx_new(f, 1, &pc), 0);
	struct dxl_qp *qp;
	assert_int_equal(dxl_qp_connect(pc, rep.target[0].addr, 0, &qp), 0);

	struct writer w = {.f = f, .t = rep.target[0]};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, writer_main, &w), 0);
	/* start copying once the writer is under way */
	while (atomic_load(&w.progress) < 20 && !atomic_load(&w.done))
		usleep(1000);
	struct dxl_pull_stats st;
	uint64_t prev_last = 0, pulls = 0, mid_stream = 0, torn = 0;
	while (pulls < 40 && (pulls < 3 || !atomic_load(&w.done))) {
		/* what was acknowledged before the copy began is in it */
		uint64_t acked = atomic_load(&w.progress);
		assert_int_equal(dxl_xfer_pull(lls, 0, qp, &rep.target[0], &st), 0);
		uint64_t last = check_prefix(lls, &st);
		assert_true(last >= acked);
		assert_true(last >= prev_last);
		prev_last = last;
		pulls++;
		mid_stream += !atomic_load(&w.done) && last < WRITER_MAX;
		/* a header at the copy's end: a record caught half-written */
		const uint8_t *end = (const uint8_t *)dxl_region_data(lreg) +
				     dxl_logstore_buf_off(lls, 0) + st.end_pos % size;
		torn += dxl_rec_peek_size(end, size - st.end_pos % size) != 0;
	}
	atomic_store(&w.stop, 1);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(w.err, 0);
	assert_true(w.appended > 0);
	/* once the writer is done, the copy ends where the writer did */
	assert_int_equal(dxl_xfer_pull(lls, 0, qp, &rep.target[0], &st), 0);
	uint64_t last = check_prefix(lls, &st);
	assert_int_equal(st.end_pos, w.tail);
	assert_int_equal(st.end_seq, w.tail_seq);
	if (st.records)
		assert_int_equal(last, w.appended);
	else
		assert_int_equal(st.head.last_ts, 1000 + w.appended);
	printf("  %llu appends, %llu pulls, %llu of them while the writer appended, %llu ended at a half-written record\n",
	       (unsigned long long)w.appended, (unsigned long long)pulls,
	       (unsigned long long)mid_stream, (unsigned long long)torn);
	dxl_qp_delete(&qp);
	dxl_fabric_delete(&f);
	dxl_test_replica_stop(&rep);
	dxl_logstore_close(&lls);
	dxl_region_close(&lreg);
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
	alarm(0);
}

/*
 * The pull writes the ring buffer before the control block (issue 19's
 * ordering rules): a crash in between leaves a control block (head,
 * watermark) that promises only what the ring it describes holds. The
 * local ring was a copy from earlier, behind; the source went on, moved
 * its head and promised more (heartbeat). Crash mid-pull, then check: every
 * source record below the local watermark, from the local head on, is in
 * the local scan. Written control block first, the watermark would promise
 * records the local buffer does not have.
 */
static int crash_now(void *arg)
{
	(void)arg;
	return 1;
}

static void test_crash_mid_pull_keeps_a_consistent_ring(void **state)
{
	struct fx *x = fx_new(65536);
	for (uint64_t t = 1; t <= 10; t++)
		put(x, t, 700);
	assert_int_equal(dxl_appender_heartbeat(x->a, 1011), 0);
	while (dxl_appender_inflight(x->a)) {
		struct dxl_append_result res;
		assert_true(dxl_appender_poll(x->a, &res, 1) >= 0);
		dxl_appender_wait(x->a, 100);
	}
	struct dxl_pull_stats st;
	assert_int_equal(dxl_xfer_pull(x->lls, 0, x->qp, &x->t[0], &st), 0);
	assert_int_equal(st.records, 10);
	for (uint64_t t = 11; t <= 30; t++)
		put(x, t, 700);
	assert_int_equal(dxl_appender_heartbeat(x->a, 1031), 0);
	while (dxl_appender_inflight(x->a)) {
		struct dxl_append_result res;
		assert_true(dxl_appender_poll(x->a, &res, 1) >= 0);
		dxl_appender_wait(x->a, 100);
	}
	/* the source's replica applied 1..5 */
	struct dxl_ring_iter it;
	struct dxl_rec rec;
	assert_int_equal(dxl_ring_iter_init(&it, x->sls, 0), 0);
	for (int k = 0; k < 5; k++)
		assert_int_equal(dxl_ring_iter_next(&it, &rec, NULL), 1);
	assert_int_equal(dxl_logstore_set_head(x->sls, 0, it.pos, it.seq, 1005), 0);
	assert_int_equal(dxl_logstore_watermark(x->sls, 0), 1031);

	dxl_rcv_pull_set_crash_hook(crash_now, NULL);
	int ret = dxl_xfer_pull(x->lls, 0, x->qp, &x->t[0], &st);
	dxl_rcv_pull_set_crash_hook(NULL, NULL);
	assert_int_equal(ret, DXL_E_IO);
	dxl_err_clear();
	/* what a restart of the local replica finds */
	uint64_t wm = dxl_logstore_watermark(x->lls, 0);
	struct dxl_ring_head h;
	assert_int_equal(dxl_logstore_head(x->lls, 0, &h), 0);
	uint64_t last = h.last_ts ? h.last_ts - 1000 : 0, n = 0;
	assert_int_equal(dxl_ring_iter_init(&it, x->lls, 0), 0);
	while (dxl_ring_iter_next(&it, &rec, NULL)) {
		assert_int_equal(rec.txn_id, last + 1);
		last = rec.txn_id;
		n++;
	}
	print_message("  crash mid-pull: local head past txn %llu, watermark %llu, %llu records after the head (up to txn %llu)\n",
		      (unsigned long long)(h.last_ts ? h.last_ts - 1000 : 0),
		      (unsigned long long)wm, (unsigned long long)n,
		      (unsigned long long)last);
	/* every record below the watermark (ts 1000 + txn) is there */
	if (wm && 1000 + last + 1 < wm)
		fail_msg("crash mid-pull: the watermark %llu promises up to txn %llu, the ring ends at txn %llu",
			 (unsigned long long)wm, (unsigned long long)(wm - 1001),
			 (unsigned long long)last);
	/* the next pull completes the copy */
	assert_int_equal(dxl_xfer_pull(x->lls, 0, x->qp, &x->t[0], &st), 0);
	assert_same_bytes(x, 0, 0);
	assert_int_equal(dxl_logstore_watermark(x->lls, 0), 1031);
	fx_free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pull_records_then_nothing_changes),
		cmocka_unit_test(test_pull_empty_ring),
		cmocka_unit_test(test_pull_after_retention_and_wrap),
		cmocka_unit_test(test_pull_retries_while_the_head_moves),
		cmocka_unit_test(test_torn_record_at_the_end),
		cmocka_unit_test(test_pull_errors),
		cmocka_unit_test(test_pull_while_a_writer_appends),
		cmocka_unit_test(test_crash_mid_pull_keeps_a_consistent_ring),
	};
	return cmocka_run_group_tests_name("ring pull", tests, NULL, NULL);
}
