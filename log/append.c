/* append.c -- replicated appends: one round trip per replica (H9), pipelined */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common.h"
#include "common/endian.h"
#include "dxl/log.h"
#include "log/log_internal.h"

/*
 * Who may call: everything here runs on the thread that owns the ctx given
 * to dxl_appender_new; nothing is shared with other threads.
 *
 * An append k uses staging slot k % max_inflight: the encoded record (and a
 * skip record when it wraps the ring) sits there, in memory registered with
 * the fabric, until every target has completed it. For each live target the
 * chain [skip WRITE] + record WRITE (both unsignalled) + READ of the ring's
 * two head slots (signalled) goes out with one doorbell. The READ completing
 * means the WRITEs before it on that QP are persistent (H9, 000 L665-675),
 * and what it read is the replica's current head: free space is learnt for
 * free. Completions of one QP arrive in posting order, so appends finish in
 * order per target, and hence in order overall.
 *
 * wr_id = slot << 8 | target.
 *
 * A target whose control block says DXL_RING_PERSISTER_ON (verbs + msync:
 * its flush READ makes nothing durable) also gets a persist request (one
 * inline WRITE after the watermark) and its chain READs the confirmation
 * line after the head slots. Its share of an append is acknowledged only
 * when the confirmation covers the request: if the flush READ came back
 * before that, the appender keeps one re-read of the confirmation line in
 * flight per target (wr_id slot RR_SLOT) until it does, or until
 * persist_timeout_ms pass without progress (the target then fails). After a
 * few re-reads that found nothing new, the next ones are spaced (50 us
 * doubling to 1 ms): a persister's msync takes hundreds of microseconds.
 */

#define HEADS_READ (2 * DXL_RING_HEAD_SLOT_SIZE)
/* discovery reads the control block up to the incarnation slots' end and
 * the persist confirmation line, whichever is further */
#define CTL_READ DXL_MAX(DXL_RING_CTL_READ, DXL_RING_PDONE_OFF + DXL_RING_PLINE_SIZE)
#define PLINE DXL_RING_PLINE_SIZE
#define RR_SLOT 0xffffffu /* wr_id slot of a confirmation re-read */
/* per slot and target: the confirmation line READ, then the request sent */
#define PSTAGE (PLINE + DXL_RING_PREQ_SIZE + 32)
#define CHUNK (1u << 20) /* largest single READ/WRITE of ring bytes */

struct target {
	struct dxl_log_target t;
	struct dxl_qp *qp;
	int dead;
	uint64_t head_gen;
	uint64_t head_pos;
	/* the target's persister (DXL_RING_PERSISTER_ON) */
	int confirm;
	uint64_t preq_base;   /* the request of token k has id preq_base + 2 + k */
	uint64_t pdone;       /* the highest id it confirmed */
	uint64_t ppos;        /* ring positions below it are confirmed */
	int reread;           /* a re-read of its confirmation line is in flight */
	uint32_t rr_idle;     /* re-reads in a row that found no progress */
	uint64_t rr_due_ns;   /* the next re-read not before (backing off) */
	uint64_t wait_ms;     /* waiting for it since (no progress); 0: not */
	uint64_t warned_ms;   /* the wait_ms a slow-persister warning was for */
	uint64_t owner;  /* the owner word this appender's claim wrote */
	int owner_closed; /* dxl_appender_close cleared it */
};

struct slot {
	int used;
	int done;            /* every target answered */
	int heartbeat;       /* a watermark only: no result is delivered */
	uint64_t ts;         /* its commit timestamp (heartbeat: its promise) */
	uint64_t wmark;      /* the watermark this operation writes */
	uint64_t token;
	uint32_t pending;    /* targets still to answer */
	uint32_t acked;
	uint32_t failed;
	int err;             /* first failure's code */
	uint8_t straw_read_posted[DXL_APPEND_MAX_TARGETS];
	uint64_t seq, pos;
	uint64_t rec_off, skip_off;
	uint32_t rec_len, skip_len;
	uint8_t *rec;        /* staging: the record */
	uint8_t *skip;       /* staging: a skip record */
	uint8_t *heads;      /* DXL_APPEND_MAX_TARGETS * HEADS_READ: flush READs */
	uint8_t *pdone;      /* DXL_APPEND_MAX_TARGETS * PLINE: confirmations */
	uint32_t chain_done; /* targets whose flush READ came back unconfirmed */
	uint64_t preq_to;    /* the ring position its persist requests cover to */
};

struct dxl_appender {
	struct dxl_ctx *ctx;
	struct dxl_appender_cfg cfg;
	unsigned n;
	struct target tg[DXL_APPEND_MAX_TARGETS];
	uint8_t *mem;
	size_t mem_len;
	struct dxl_mr *mr;
	struct slot *slots;
	uint64_t next_token; /* next append */
	uint64_t done_token; /* next result to deliver */
	uint64_t tail_pos, tail_seq;
	/* the floor of the next commit timestamp: the previous append's, and
	 * at start the last record's, the head's and every watermark */
	uint64_t last_ts;
	uint64_t ref_last_ts; /* dxl_appender_last_ts */
	uint64_t ref_wmark;   /* the reference's watermark at open */
	uint32_t inc;         /* this appender's incarnation of the ring */
	struct dxl_repair_stats repair;
	/* the commit timestamp of the first append that was not acknowledged:
	 * the watermark never passes it (UINT64_MAX: none failed) */
	uint64_t failed_floor;
	/* the caller's hold (dxl_appender_set_hold): the watermark never
	 * passes it either (UINT64_MAX: none) */
	uint64_t hold;
	uint64_t ring_size;
	/* tailing (issue 19.3): the largest watermark of the shard's rings
	 * when this appender claimed a closed or unused ring (0: it did not),
	 * and whether dxl_appender_close closed it */
	uint64_t shard_floor;
	int closed;      /* the final watermark is on every target: no more appends */
	int close_done;  /* and every target's owner word is cleared */
	bool test_wmark_after_flush; /* dxl_appender_test_wmark_after_flush */
	uint8_t *rr;          /* DXL_APPEND_MAX_TARGETS * PLINE: re-reads */
	struct dxl_appender_persist_stats pst;
};

void dxl_appender_test_wmark_after_flush(struct dxl_appender *a, bool on)
{
	a->test_wmark_after_flush = on;
}

void dxl_appender_cfg_init(struct dxl_appender_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->max_inflight = 16;
	cfg->max_record = 65536;
	cfg->mode = DXL_PWRITE_H9;
	cfg->full_wait_ms = 2000;
	cfg->persist_timeout_ms = 10000;
}

int dxl_log_target_init(struct dxl_log_target *t, const struct dxl_logstore *ls,
			const struct dxl_mr *data_mr, const char *addr,
			uint32_t remote_ctx, uint32_t ring)
{
	if (!t || !ls || !data_mr || !addr || ring >= dxl_logstore_nrings(ls))
		return dxl_err_set(DXL_E_INVAL, "log target: bad argument (ring %u)",
				   ring);
	struct dxl_region *r = dxl_logstore_region(ls);
	uint64_t need = dxl_logstore_bytes(dxl_logstore_nrings(ls),
					   dxl_logstore_ring_size(ls));
	if (dxl_mr_addr(data_mr) != dxl_region_data(r) || dxl_mr_len(data_mr) < need)
		return dxl_err_set(DXL_E_INVAL,
				   "log target: the MR must cover the data area of %s",
				   dxl_region_path(r));
	memset(t, 0, sizeof(*t));
	if (snprintf(t->addr, sizeof(t->addr), "%s", addr) >= (int)sizeof(t->addr))
		return dxl_err_set(DXL_E_INVAL, "log target: address too long");
	t->remote_ctx = remote_ctx;
	dxl_mr_desc(data_mr, &t->data);
	t->ring = ring;
	t->ring_size = dxl_logstore_ring_size(ls);
	t->ctl_off = dxl_logstore_ctl_off(ls, ring);
	t->buf_off = dxl_logstore_buf_off(ls, ring);
	return 0;
}

static struct dxl_fatptr data_fp(const struct target *t)
{
	struct dxl_fatptr fp = {.addr = t->t.data.addr,
				.len = (uint32_t)DXL_MIN(t->t.data.len, UINT32_MAX),
				.rkey = t->t.data.rkey, .node = t->t.data.node};
	return fp;
}

static void note_head(struct target *t, const uint8_t *slots)
{
	struct dxl_ring_head h;
	if (dxl_ring_head_decode_durable(slots, &h) == 0 && h.gen > t->head_gen) {
		t->head_gen = h.gen;
		t->head_pos = h.pos;
	}
	dxl_err_clear();
}

/* what discovery found in one target's ring */
struct ring_view {
	struct dxl_ring_head head;
	uint64_t end_pos, end_seq; /* where the valid content ends */
	uint64_t last_ts;          /* the last record's commit ts, else the head's */
	uint64_t wmark;            /* 0: none */
	int was_free;              /* the claim found the owner word 0 */
	uint32_t inc;              /* highest incarnation of its slots and records */
	int inc_slot;              /* the slot holding the highest (-1: none) */
};

/* claim target t's ring, read its control block and ring into buf
 * (nothing else in flight on ctx yet) and find where this writer's records
 * end. The control block is read first: the watermark read covers records
 * in the buffer read after it. */
static int discover(struct dxl_appender *a, struct target *t, uint8_t *buf,
		    uint32_t lkey, struct ring_view *v)
{
	struct dxl_fatptr fp = data_fp(t);
	uint8_t *hb = a->slots[0].heads;
	/* claim the ring: the owner word goes from unclaimed, or from an
	 * earlier holder of this writer id (crashed, or its slot lease
	 * ended), to 1 + writer id with the next generation: this holder's own
	 * word, which only its close clears (a late close of an earlier
	 * holder no longer matches). One CAS when the word is 0; otherwise the
	 * first CAS returns the word and the next one replaces it */
	const uint32_t me = a->cfg.writer_id + 1;
	uint64_t cur = 0, owner = 0;
	int ret;
	for (int tries = 0;; tries++) {
		uint64_t want = DXL_RING_OWNER(DXL_RING_OWNER_GEN(cur) + 1, me);
		if ((ret = dxl_rdpma_cas(t->qp, fp.addr + t->t.ctl_off + DXL_RING_OWNER_OFF,
					 fp.rkey, cur, want, &owner, hb, dxl_mr_lkey(a->mr))))
			return ret;
		uint32_t holder = DXL_RING_OWNER_HOLDER(owner);
		if (holder != 0 && holder != me)
			return dxl_err_set(DXL_E_STALE,
					   "ring %u at %s is owned by writer %u, not %u",
					   t->t.ring, t->t.addr, holder - 1, a->cfg.writer_id);
		if (owner == cur) {
			t->owner = want;
			t->owner_closed = 0;
			break;
		}
		if (tries >= 8) /* an earlier holder's close racing us, 8 times */
			return dxl_err_set(DXL_E_STALE,
					   "ring %u at %s: its owner word keeps changing (%#llx): is another holder of writer %u alive?",
					   t->t.ring, t->t.addr, (unsigned long long)owner,
					   a->cfg.writer_id);
		cur = owner;
	}
	ret = dxl_rdpma_read(t->qp, &fp, t->t.ctl_off, hb, CTL_READ,
			     dxl_mr_lkey(a->mr));
	if (ret)
		return ret;
	memset(v, 0, sizeof(*v));
	v->was_free = DXL_RING_OWNER_HOLDER(owner) == 0;
	if ((ret = dxl_ring_head_decode_durable(hb, &v->head)))
		return ret;
	v->wmark = dxl_ring_wmark_decode(hb + DXL_RING_WMARK_OFF);
	v->inc = dxl_ring_inc_decode(hb);
	v->inc_slot = -1;
	for (int i = 0; i < 2 && v->inc; i++) {
		uint8_t slot[16];
		dxl_ring_inc_encode(slot, v->inc);
		if (!memcmp(hb + DXL_RING_INC_OFF + i * DXL_RING_INC_SLOT, slot, 16))
			v->inc_slot = i;
	}
	/* a persister to wait for? Our request ids start above every id its
	 * line holds (a previous writer's requests and confirmations) */
	struct dxl_persist_req q = {0};
	uint64_t done = 0;
	t->confirm = dxl_ring_pdone_decode(hb + DXL_RING_PDONE_OFF, &done);
	dxl_ring_preq_decode(hb + DXL_RING_PREQ_OFF, &q);
	t->preq_base = DXL_MAX(q.id, done);
	t->pdone = t->preq_base;
	if (t->confirm)
		a->pst.targets |= 1u << (unsigned)(t - a->tg);
	t->head_gen = v->head.gen;
	t->head_pos = v->head.pos;
	v->last_ts = v->head.last_ts;
	for (uint64_t off = 0; off < t->t.ring_size; off += CHUNK) {
		uint32_t len = (uint32_t)DXL_MIN(CHUNK, t->t.ring_size - off);
		if ((ret = dxl_rdpma_read(t->qp, &fp, t->t.buf_off + off, buf + off,
					  len, lkey)))
			return ret;
	}
	struct dxl_ring_iter it;
	dxl_ring_iter_init_buf(&it, buf, t->t.ring_size, v->head.pos, v->head.seq);
	struct dxl_rec rec;
	uint64_t at;
	while (dxl_ring_iter_step(&it, &rec, &at)) {
		if (rec.writer != a->cfg.writer_id)
			return dxl_err_set(DXL_E_STALE,
					   "ring %u at %s holds records of writer %u, not %u",
					   t->t.ring, t->t.addr, rec.writer,
					   a->cfg.writer_id);
		if (rec.incarnation > v->inc)
			v->inc = rec.incarnation;
		if (rec.type == DXL_REC_DATA && rec.commit_ts > v->last_ts)
			v->last_ts = rec.commit_ts;
	}
	v->end_pos = it.pos;
	v->end_seq = it.seq;
	return 0;
}

/* ---- repair: bring a target's ring to the reference's end ----------------- */

enum repair_action { REPAIR_NONE, REPAIR_TRUNCATE, REPAIR_COPY };

struct repair_plan {
	enum repair_action action;
	uint64_t from, to;  /* copy [from, to); truncate at to */
	int zero_line;      /* zero the line at `to` */
	uint32_t records;   /* data records copied or dropped */
	/* truncate: the first data record dropped with the lowest commit
	 * timestamp (UINT64_MAX: none), checked against every watermark */
	uint64_t drop_min_ts, drop_min_txn, drop_min_pos;
};

static uint32_t rec_crc(const uint8_t *buf, uint64_t size, uint64_t pos)
{
	return dxl_get_le32(buf + pos % size + 20);
}

/* step it over records until it reaches position c exactly: 0, or -1 when
 * c is not a record boundary of the valid content */
static int walk_to(struct dxl_ring_iter *it, uint64_t c)
{
	struct dxl_rec rec;
	uint64_t at;
	while (it->pos < c)
		if (!dxl_ring_iter_step(it, &rec, &at))
			return -1;
	return it->pos == c ? 0 : -1;
}

static int diverged(const struct target *t, uint64_t pos, const char *what)
{
	return dxl_err_set(DXL_E_STALE,
			   "ring %u at %s diverged from the reference at position %llu (%s): its records are not the reference's",
			   t->t.ring, t->t.addr, (unsigned long long)pos, what);
}

/*
 * plan_repair -- decide what brings target t (view tv, ring bytes tbuf) to
 * the reference's end (view rv, bytes rbuf), after checking that the
 * records both hold are the same. Writes nothing.
 */
static int plan_repair(const struct dxl_appender *a, const struct target *t,
		       const struct ring_view *rv, const uint8_t *rbuf,
		       const struct ring_view *tv, const uint8_t *tbuf,
		       struct repair_plan *p)
{
	const uint64_t size = a->ring_size;
	memset(p, 0, sizeof(*p));
	p->drop_min_ts = UINT64_MAX;
	if (tv->end_pos < rv->head.pos)
		return dxl_err_set(DXL_E_STALE,
				   "replica at %s is too far behind (ends at %llu, the reference's head is at %llu): it must be caught up first (dxl_xfer_pull)",
				   t->t.addr, (unsigned long long)tv->end_pos,
				   (unsigned long long)rv->head.pos);
	if (tv->head.pos > rv->end_pos)
		return diverged(t, tv->head.pos,
				"its head is past the reference's end");
	if (tv->end_pos < rv->end_pos && rv->end_pos - tv->head.pos > size)
		return dxl_err_set(DXL_E_STALE,
				   "replica at %s is too far behind (ends at %llu, its head is at %llu: copying up to the reference's end %llu would overwrite records it has not reclaimed): it must be caught up first (dxl_xfer_pull)",
				   t->t.addr, (unsigned long long)tv->end_pos,
				   (unsigned long long)tv->head.pos,
				   (unsigned long long)rv->end_pos);
	/* compare the records both hold, [c, m) */
	uint64_t c = DXL_MAX(rv->head.pos, tv->head.pos);
	uint64_t m = DXL_MIN(rv->end_pos, tv->end_pos);
	struct dxl_ring_iter ri, ti;
	dxl_ring_iter_init_buf(&ri, rbuf, size, rv->head.pos, rv->head.seq);
	dxl_ring_iter_init_buf(&ti, tbuf, size, tv->head.pos, tv->head.seq);
	if (walk_to(&ri, c) || walk_to(&ti, c))
		return diverged(t, c, "the later head is not a record boundary of both");
	if (ri.seq != ti.seq)
		return diverged(t, c, "other sequence numbers");
	struct dxl_rec r, q;
	uint64_t ra, qa;
	while (ri.pos < m) {
		if (!dxl_ring_iter_step(&ri, &r, &ra) ||
		    !dxl_ring_iter_step(&ti, &q, &qa))
			return diverged(t, ri.pos, "a record ends early");
		if (ra != qa || r.type != q.type || r.total_len != q.total_len ||
		    r.seq != q.seq || r.writer != q.writer ||
		    r.commit_ts != q.commit_ts || r.txn_id != q.txn_id ||
		    r.incarnation != q.incarnation ||
		    rec_crc(rbuf, size, ra) != rec_crc(tbuf, size, qa))
			return diverged(t, ra, "another record");
	}
	if (ri.pos != m || ti.pos != m)
		return diverged(t, m, "the earlier end is not a record boundary of both");
	if (tv->end_pos == rv->end_pos) {
		if (tv->end_seq != rv->end_seq)
			return diverged(t, m, "other sequence numbers at the end");
		return 0;
	}
	if (tv->end_pos > rv->end_pos) {
		p->action = REPAIR_TRUNCATE;
		p->to = rv->end_pos;
		/* tv->end_pos - tv->head.pos <= size: the line at `to` is the
		 * target's own first record past the reference's end */
		p->zero_line = 1;
		while (dxl_ring_iter_step(&ti, &q, &qa)) {
			if (q.type != DXL_REC_DATA)
				continue;
			p->records++;
			if (q.commit_ts < p->drop_min_ts) {
				p->drop_min_ts = q.commit_ts;
				p->drop_min_txn = q.txn_id;
				p->drop_min_pos = qa;
			}
		}
		return 0;
	}
	p->action = REPAIR_COPY;
	p->from = tv->end_pos;
	p->to = rv->end_pos;
	/* whatever the target holds at the reference's end (e.g. a record of
	 * the reference's missing range that it did get) must not extend its
	 * scan; when the copy fills the ring exactly, the lap limit ends it */
	p->zero_line = rv->end_pos - tv->head.pos < size;
	while (ri.pos < rv->end_pos && dxl_ring_iter_step(&ri, &r, &ra))
		if (r.type == DXL_REC_DATA)
			p->records++;
	return 0;
}

/* carry out plan p on target t: WRITEs, then one flush READ (H9) */
static int exec_repair(struct dxl_appender *a, struct target *t,
		       const struct repair_plan *p, const uint8_t *rbuf,
		       uint32_t rlkey)
{
	const uint64_t size = a->ring_size;
	struct dxl_fatptr fp = data_fp(t);
	int ret;
	for (uint64_t pos = p->from; p->action == REPAIR_COPY && pos < p->to;) {
		uint64_t off = pos % size;
		uint32_t len = (uint32_t)DXL_MIN(DXL_MIN(p->to - pos, size - off),
						 (uint64_t)CHUNK);
		if ((ret = dxl_rdpma_write(t->qp, &fp, t->t.buf_off + off, rbuf + off,
					   len, rlkey)))
			return ret;
		pos += len;
	}
	if (p->zero_line) {
		/* a->mem starts with the first staging slot, unused so far */
		uint8_t *zero = a->mem;
		memset(zero, 0, DXL_REC_MIN_SIZE);
		if ((ret = dxl_rdpma_write(t->qp, &fp, t->t.buf_off + p->to % size,
					   zero, DXL_REC_MIN_SIZE,
					   dxl_mr_lkey(a->mr))))
			return ret;
	}
	/* H9: 000 L665 -- the READ after the WRITEs on this QP persists them */
	uint8_t *hb = a->slots[0].heads;
	if ((ret = dxl_rdpma_read(t->qp, &fp, t->t.ctl_off, hb, HEADS_READ,
				  dxl_mr_lkey(a->mr))))
		return ret;
	note_head(t, hb);
	return 0;
}

static void nap_us(unsigned us)
{
	struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)us * 1000};
	nanosleep(&ts, NULL);
}

/*
 * open_confirm -- on every target with a persister, have what its ring holds
 * from its head on, and the line after the end (repair's zeroed line),
 * made durable before the first append: repair has just made records a
 * previous writer never saw confirmed acknowledged, and truncated or
 * completed rings with one-sided WRITEs.
 */
static int open_confirm(struct dxl_appender *a)
{
	uint32_t lkey = dxl_mr_lkey(a->mr);
	uint8_t *b = a->slots[0].rec; /* staging; nothing in flight yet */
	for (unsigned i = 0; i < a->n; i++) {
		struct target *t = &a->tg[i];
		if (!t->confirm)
			continue;
		struct dxl_persist_req q = {.id = t->preq_base + 1,
					    .from = t->head_pos,
					    .to = a->tail_pos + DXL_REC_MIN_SIZE};
		struct dxl_fatptr fp = data_fp(t);
		dxl_ring_preq_encode(&q, b);
		int ret = dxl_rdpma_write(t->qp, &fp, t->t.ctl_off + DXL_RING_PREQ_OFF,
					  b, DXL_RING_PREQ_SIZE, lkey);
		a->pst.requests++;
		uint64_t deadline = dxl_now_ms() + a->cfg.persist_timeout_ms, done = 0;
		while (!ret) {
			ret = dxl_rdpma_read(t->qp, &fp, t->t.ctl_off + DXL_RING_PDONE_OFF,
					     b + PLINE, PLINE, lkey);
			if (ret)
				break;
			dxl_ring_pdone_decode(b + PLINE, &done);
			if (done >= q.id)
				break;
			if (dxl_now_ms() >= deadline)
				ret = dxl_err_set(DXL_E_UNREACHABLE,
						  "its persister confirmed nothing in %u ms",
						  a->cfg.persist_timeout_ms);
			a->pst.rereads++;
			nap_us(50);
		}
		if (ret) {
			dxl_err_prefix("appender (writer %u): persisting ring %u at %s",
				       a->cfg.writer_id, t->t.ring, t->t.addr);
			return ret;
		}
		t->pdone = done;
		t->ppos = a->tail_pos;
	}
	return 0;
}

/*
 * open_incarnation -- before this appender's first append, on target t:
 * record its incarnation (in the slot not holding the target's highest, so
 * that one stays readable if this WRITE tears: inc_slot) and zero the line
 * at the tail, where
 * the first append goes, so that no member's scan goes past the end this
 * appender starts from (the reference included: repair zeroes it on the
 * others). Then one flush READ (H9): both are durable before any record of
 * the new incarnation is written. head_pos is the target's head at
 * discovery: the line at the tail holds no live record only while the ring
 * is not full.
 */
static int open_incarnation(struct dxl_appender *a, struct target *t,
			    uint64_t head_pos, int inc_slot)
{
	const uint64_t size = a->ring_size;
	struct dxl_fatptr fp = data_fp(t);
	/* a->mem starts with the first staging slot, unused so far */
	uint8_t *b = a->mem;
	memset(b, 0, 2 * DXL_REC_MIN_SIZE);
	dxl_ring_inc_encode(b, a->inc);
	int ret = dxl_rdpma_write(t->qp, &fp,
				  t->t.ctl_off + DXL_RING_INC_OFF +
					  (inc_slot == 0 ? 1 : 0) * DXL_RING_INC_SLOT,
				  b, 16, dxl_mr_lkey(a->mr));
	if (!ret && a->tail_pos - head_pos < size)
		ret = dxl_rdpma_write(t->qp, &fp,
				      t->t.buf_off + a->tail_pos % size,
				      b + DXL_REC_MIN_SIZE, DXL_REC_MIN_SIZE,
				      dxl_mr_lkey(a->mr));
	/* H9: 000 L665 -- the READ after the WRITEs on this QP persists them */
	uint8_t *hb = a->slots[0].heads;
	if (!ret)
		ret = dxl_rdpma_read(t->qp, &fp, t->t.ctl_off, hb, HEADS_READ,
				     dxl_mr_lkey(a->mr));
	if (!ret)
		note_head(t, hb);
	return ret;
}

static int check_cfg(const struct dxl_appender_cfg *c, unsigned n)
{
	if (n == 0 || n > DXL_APPEND_MAX_TARGETS)
		return dxl_err_set(DXL_E_INVAL, "appender: %u targets (1..%d)", n,
				   DXL_APPEND_MAX_TARGETS);
	if (c->writer_id == UINT32_MAX) /* the owner word holds 1 + it in 32 bits */
		return dxl_err_set(DXL_E_INVAL, "appender: writer id %u (at most %u)",
				   c->writer_id, UINT32_MAX - 1);
	if (c->max_inflight < 1 || c->max_inflight > 256)
		return dxl_err_set(DXL_E_INVAL, "appender: max_inflight %u (1..256)",
				   c->max_inflight);
	if (c->max_record < DXL_REC_MIN_SIZE || c->max_record % 64 ||
	    c->max_record > DXL_REC_MAX_PAYLOAD)
		return dxl_err_set(DXL_E_INVAL,
				   "appender: max_record %u (a multiple of 64 in 64..%u)",
				   c->max_record, DXL_REC_MAX_PAYLOAD);
	if ((unsigned)c->mode > DXL_PWRITE_NOFLUSH)
		return dxl_err_set(DXL_E_INVAL, "appender: bad mode %d", (int)c->mode);
	return 0;
}

struct ringbuf {
	uint8_t *p;
	struct dxl_mr *mr;
};

static int ringbuf_new(struct dxl_fabric *f, uint64_t size, struct ringbuf *b)
{
	if (posix_memalign((void **)&b->p, 4096, size)) {
		b->p = NULL;
		return dxl_err_set(DXL_E_NOMEM, "appender: out of memory");
	}
	int ret = dxl_mr_reg(f, b->p, size, DXL_MR_LOCAL_WRITE, &b->mr);
	if (ret) {
		free(b->p);
		b->p = NULL;
	}
	return ret;
}

static void ringbuf_free(struct ringbuf *b)
{
	dxl_mr_dereg(&b->mr);
	free(b->p);
	b->p = NULL;
}

/*
 * shard_floor -- the largest watermark of any ring of target t's log (read
 * with one-sided READs into buf, at least 1 KiB of registered memory), each
 * taken at most DXL_HLC_MAX_SKEW_MS ahead of this host's clock.
 *
 * Why (tailing, issue 19.3): a ring whose owner word is unclaimed (closed
 * by its last holder, or never used) holds no tailer back, so a tailer's
 * cursor may be anywhere up to the largest watermark of the rings -- and
 * this appender's records, appended below it, would never be delivered.
 * The claim came first on this QP, so these READs execute after it: a
 * tailer that read the same unclaimed owner word before and after its
 * windows read every watermark it used before the claim, so before these
 * READs (docs/log.md, "Tailing"); one that saw the word change holds the
 * ring. A watermark further ahead than the bound came from a clock that
 * jumped forward: the tailers do not resolve past their own clock, which
 * is at most DXL_HLC_MAX_SKEW_MS ahead of ours, so starting there is
 * enough -- and takes no more of the jump than that.
 */
static int shard_floor(struct dxl_appender *a, struct target *t, uint8_t *buf,
		       uint32_t lkey, uint64_t *floor)
{
	struct dxl_fatptr fp = data_fp(t);
	const uint64_t rs = t->t.ring_size, stride = DXL_RING_CTL_SIZE + rs;
	int ret = dxl_rdpma_read(t->qp, &fp, 0, buf, 64, lkey);
	if (ret)
		return ret;
	/* the log header (ring.c): nrings at 16, ring size at 24 */
	uint32_t nrings = dxl_get_le32(buf + 16);
	if (nrings < 1 || nrings > DXL_RING_MAX || dxl_get_le64(buf + 24) != rs ||
	    t->t.ctl_off != DXL_LOG_HDR_SIZE + (uint64_t)t->t.ring * stride ||
	    DXL_LOG_HDR_SIZE + (uint64_t)nrings * stride > t->t.data.len)
		return dxl_err_set(DXL_E_CORRUPT,
				   "ring %u at %s: the log header does not describe this ring (%u rings of %llu bytes)",
				   t->t.ring, t->t.addr, nrings,
				   (unsigned long long)dxl_get_le64(buf + 24));
	uint64_t bound = DXL_HLC_MAKE(dxl_wall_ms() + DXL_HLC_MAX_SKEW_MS, 0);
	struct dxl_wr w[64];
	for (uint32_t j0 = 0; j0 < nrings; j0 += 64) {
		uint32_t m = DXL_MIN(64u, nrings - j0);
		memset(w, 0, sizeof(w));
		for (uint32_t k = 0; k < m; k++) {
			w[k] = (struct dxl_wr){.wr_id = 0x464c4f4f52ull /* FLOOR */,
					       .op = DXL_WR_READ,
					       .local = buf + k * DXL_RING_WMARK_SIZE,
					       .len = DXL_RING_WMARK_SIZE, .lkey = lkey,
					       .remote_addr = fp.addr + DXL_LOG_HDR_SIZE +
							      (uint64_t)(j0 + k) * stride +
							      DXL_RING_WMARK_OFF,
					       .rkey = fp.rkey};
			w[k].next = k + 1 < m ? &w[k + 1] : NULL;
		}
		w[m - 1].flags = DXL_WR_SIGNALED;
		if ((ret = dxl_log_post_wait(t->qp, w, w[0].wr_id)))
			return ret;
		for (uint32_t k = 0; k < m; k++) {
			uint64_t wm = dxl_ring_wmark_decode(buf + k * DXL_RING_WMARK_SIZE);
			if (wm > bound) {
				DXL_WARN("appender (writer %u): ring %u at %s has watermark %llu, %llu ms ahead of this host's clock: a writer's clock jumped forward; starting at %llu",
					 a->cfg.writer_id, j0 + k, t->t.addr,
					 (unsigned long long)wm,
					 (unsigned long long)(DXL_HLC_PHYS(wm) - dxl_wall_ms()),
					 (unsigned long long)bound);
				wm = bound;
			}
			*floor = DXL_MAX(*floor, wm);
		}
	}
	return 0;
}

/*
 * find_tail -- discover every target's ring. Without repair they must all
 * end at the same place. With repair, target 0 is the reference: every
 * other target is checked and planned against it first, and only when all
 * of them can be repaired are the plans carried out.
 */
static int find_tail(struct dxl_appender *a, struct dxl_fabric *f)
{
	struct ringbuf rb = {0}, tb = {0};
	struct ring_view rv, tv;
	struct repair_plan plan[DXL_APPEND_MAX_TARGETS];
	const struct dxl_log_target *t0 = &a->tg[0].t;
	memset(plan, 0, sizeof(plan));
	int ret = ringbuf_new(f, a->ring_size, &rb);
	if (!ret && a->n > 1)
		ret = ringbuf_new(f, a->ring_size, &tb);
	if (!ret && (ret = discover(a, &a->tg[0], rb.p, dxl_mr_lkey(rb.mr), &rv)))
		dxl_err_prefix("appender: ring %u at %s", t0->ring, t0->addr);
	if (ret)
		goto out;
	a->tail_pos = rv.end_pos;
	a->tail_seq = rv.end_seq;
	a->ref_last_ts = rv.last_ts;
	a->ref_wmark = rv.wmark;
	a->last_ts = DXL_MAX(rv.last_ts, rv.wmark);
	int was_free = rv.was_free;
	uint32_t max_inc = rv.inc;
	uint64_t head_pos[DXL_APPEND_MAX_TARGETS];
	int inc_slot[DXL_APPEND_MAX_TARGETS];
	head_pos[0] = rv.head.pos;
	inc_slot[0] = rv.inc_slot;
	/* the highest watermark of any target, and whose it is */
	uint64_t wmax = rv.wmark;
	unsigned wmax_at = 0;
	for (unsigned i = 1; i < a->n; i++) {
		const struct dxl_log_target *ti = &a->tg[i].t;
		if ((ret = discover(a, &a->tg[i], tb.p, dxl_mr_lkey(tb.mr), &tv))) {
			dxl_err_prefix("appender: ring %u at %s", ti->ring, ti->addr);
			goto out;
		}
		/* a watermark above the reference's still holds (it covers
		 * acknowledged records only, which the reference has): never
		 * append below it */
		a->last_ts = DXL_MAX(a->last_ts, tv.wmark);
		was_free |= tv.was_free;
		max_inc = DXL_MAX(max_inc, tv.inc);
		if (tv.wmark > wmax) {
			wmax = tv.wmark;
			wmax_at = i;
		}
		head_pos[i] = tv.head.pos;
		inc_slot[i] = tv.inc_slot;
		if (!a->cfg.repair) {
			if (tv.end_pos != a->tail_pos || tv.end_seq != a->tail_seq) {
				ret = dxl_err_set(DXL_E_STALE,
						  "appender: ring %u ends at %llu (seq %llu) on %s but at %llu (seq %llu) on %s",
						  ti->ring, (unsigned long long)a->tail_pos,
						  (unsigned long long)a->tail_seq, t0->addr,
						  (unsigned long long)tv.end_pos,
						  (unsigned long long)tv.end_seq, ti->addr);
				goto out;
			}
			a->last_ts = DXL_MAX(a->last_ts, tv.last_ts);
			continue;
		}
		if ((ret = plan_repair(a, &a->tg[i], &rv, rb.p, &tv, tb.p, &plan[i]))) {
			dxl_err_prefix("appender (writer %u, repair)", a->cfg.writer_id);
			goto out;
		}
	}
	/*
	 * A watermark W proves every record below W acknowledged: on every
	 * member. A record below the highest watermark of any target that only
	 * a target holds past the reference's end proves the reference lost
	 * it: repair would spread that loss to every member. Refuse, before
	 * anything is written, and never truncate below a watermark.
	 */
	for (unsigned i = 1; i < a->n && a->cfg.repair; i++) {
		const struct repair_plan *p = &plan[i];
		if (p->action != REPAIR_TRUNCATE || p->drop_min_ts >= wmax)
			continue;
		ret = dxl_err_set(DXL_E_STALE,
				  "appender (writer %u, repair): the reference %s is behind: it lacks acknowledged records of ring %u that %s holds past the reference's end (txn %llu, commit ts %llu at position %llu, below the watermark %llu of %s); repair it from a member that holds them (promote it or dxl_xfer_pull)",
				  a->cfg.writer_id, t0->addr, t0->ring,
				  a->tg[i].t.addr,
				  (unsigned long long)p->drop_min_txn,
				  (unsigned long long)p->drop_min_ts,
				  (unsigned long long)p->drop_min_pos,
				  (unsigned long long)wmax, a->tg[wmax_at].t.addr);
		goto out;
	}
	for (unsigned i = 1; i < a->n && a->cfg.repair; i++) {
		const struct repair_plan *p = &plan[i];
		if (p->action == REPAIR_NONE)
			continue;
		if ((ret = exec_repair(a, &a->tg[i], p, rb.p, dxl_mr_lkey(rb.mr)))) {
			dxl_err_prefix("appender (writer %u): repairing ring %u at %s",
				       a->cfg.writer_id, a->tg[i].t.ring,
				       a->tg[i].t.addr);
			goto out;
		}
		if (p->action == REPAIR_COPY) {
			a->repair.copied |= 1u << i;
			a->repair.bytes_copied += p->to - p->from;
			a->repair.records_copied += p->records;
		} else {
			a->repair.truncated |= 1u << i;
			a->repair.records_dropped += p->records;
		}
		DXL_INFO("appender (writer %u): ring %u at %s %s to end at %llu (seq %llu): %u records %s",
			 a->cfg.writer_id, a->tg[i].t.ring, a->tg[i].t.addr,
			 p->action == REPAIR_COPY ? "caught up" : "truncated",
			 (unsigned long long)a->tail_pos,
			 (unsigned long long)a->tail_seq, p->records,
			 p->action == REPAIR_COPY ? "copied" : "dropped");
	}
	/* a closed or unused ring (on some target): tailers may have passed
	 * every watermark of the shard; start above them all. A ring we
	 * found owned was holding every tailer at its watermark meanwhile. */
	for (unsigned i = 0; i < a->n && was_free; i++) {
		if ((ret = shard_floor(a, &a->tg[i], rb.p, dxl_mr_lkey(rb.mr),
				       &a->shard_floor))) {
			dxl_err_prefix("appender (writer %u): reading the watermarks of the log at %s",
				       a->cfg.writer_id, a->tg[i].t.addr);
			goto out;
		}
	}
	a->last_ts = DXL_MAX(a->last_ts, a->shard_floor);
	if (max_inc == UINT32_MAX) {
		ret = dxl_err_set(DXL_E_STALE,
				  "appender: ring %u has used up its incarnations (%u)",
				  t0->ring, max_inc);
		goto out;
	}
	a->inc = max_inc + 1;
	for (unsigned i = 0; i < a->n; i++) {
		if ((ret = open_incarnation(a, &a->tg[i], head_pos[i],
					    inc_slot[i]))) {
			dxl_err_prefix("appender (writer %u): opening ring %u at %s",
				       a->cfg.writer_id, a->tg[i].t.ring,
				       a->tg[i].t.addr);
			goto out;
		}
	}
out:
	ringbuf_free(&tb);
	ringbuf_free(&rb);
	return ret;
}

int dxl_appender_new(struct dxl_ctx *ctx, const struct dxl_appender_cfg *cfg,
		     const struct dxl_log_target *targets, unsigned n,
		     struct dxl_appender **out)
{
	struct dxl_appender_cfg def;
	if (!ctx || !targets || !out)
		return dxl_err_set(DXL_E_INVAL, "appender: NULL argument");
	*out = NULL;
	if (!cfg) {
		dxl_appender_cfg_init(&def);
		cfg = &def;
	}
	int ret = check_cfg(cfg, n);
	if (ret)
		return ret;
	for (unsigned i = 1; i < n; i++)
		if (targets[i].ring_size != targets[0].ring_size)
			return dxl_err_set(DXL_E_INVAL,
					   "appender: targets have rings of different sizes");

	struct dxl_appender *a = calloc(1, sizeof(*a));
	if (!a)
		return dxl_err_set(DXL_E_NOMEM, "appender: out of memory");
	a->ctx = ctx;
	a->cfg = *cfg;
	a->failed_floor = UINT64_MAX;
	a->hold = UINT64_MAX;
	a->n = n;
	a->ring_size = targets[0].ring_size;
	a->slots = calloc(cfg->max_inflight, sizeof(*a->slots));
	size_t per = 2ull * cfg->max_record +
		     DXL_APPEND_MAX_TARGETS * (HEADS_READ + PSTAGE);
	a->mem_len = DXL_ALIGN_UP(per * cfg->max_inflight +
					  DXL_APPEND_MAX_TARGETS * PLINE,
				  4096ull);
	if (!a->slots || posix_memalign((void **)&a->mem, 4096, a->mem_len)) {
		ret = dxl_err_set(DXL_E_NOMEM, "appender: out of memory");
		goto err_free;
	}
	memset(a->mem, 0, a->mem_len);
	for (uint32_t i = 0; i < cfg->max_inflight; i++) {
		struct slot *s = &a->slots[i];
		s->rec = a->mem + per * i;
		s->skip = s->rec + cfg->max_record;
		s->heads = s->skip + cfg->max_record;
		s->pdone = s->heads + DXL_APPEND_MAX_TARGETS * HEADS_READ;
	}
	a->rr = a->mem + per * cfg->max_inflight;
	struct dxl_fabric *f = dxl_ctx_fabric(ctx);
	if ((ret = dxl_mr_reg(f, a->mem, a->mem_len, DXL_MR_LOCAL_WRITE, &a->mr)))
		goto err_free;
	for (unsigned i = 0; i < n; i++) {
		a->tg[i].t = targets[i];
		if ((ret = dxl_qp_connect(ctx, targets[i].addr, targets[i].remote_ctx,
					  &a->tg[i].qp)))
			goto err_qps;
	}

	if ((ret = find_tail(a, f)) || (ret = open_confirm(a)))
		goto err_qps;
	*out = a;
	return 0;

err_qps:
	for (unsigned i = 0; i < n; i++)
		dxl_qp_delete(&a->tg[i].qp);
	dxl_mr_dereg(&a->mr);
err_free:
	free(a->mem);
	free(a->slots);
	free(a);
	return ret;
}

void dxl_appender_delete(struct dxl_appender **ap)
{
	if (!ap || !*ap)
		return;
	struct dxl_appender *a = *ap;
	for (unsigned i = 0; i < a->n; i++)
		dxl_qp_delete(&a->tg[i].qp);
	dxl_mr_dereg(&a->mr);
	free(a->mem);
	free(a->slots);
	free(a);
	*ap = NULL;
}

uint32_t dxl_appender_inflight(const struct dxl_appender *a)
{
	return (uint32_t)(a->next_token - a->done_token);
}

uint32_t dxl_appender_failed_targets(const struct dxl_appender *a)
{
	uint32_t m = 0;
	for (unsigned i = 0; i < a->n; i++)
		if (a->tg[i].dead)
			m |= 1u << i;
	return m;
}

void dxl_appender_tail(const struct dxl_appender *a, uint64_t *pos,
		       uint64_t *seq)
{
	if (pos)
		*pos = a->tail_pos;
	if (seq)
		*seq = a->tail_seq;
}

uint64_t dxl_appender_last_ts(const struct dxl_appender *a)
{
	return a->ref_last_ts;
}

uint32_t dxl_appender_incarnation(const struct dxl_appender *a)
{
	return a->inc;
}

uint64_t dxl_appender_open_watermark(const struct dxl_appender *a)
{
	return a->ref_wmark;
}

uint64_t dxl_appender_min_ts(const struct dxl_appender *a)
{
	return a->last_ts;
}

uint64_t dxl_appender_shard_floor(const struct dxl_appender *a)
{
	return a->shard_floor;
}

void dxl_appender_repair_stats(const struct dxl_appender *a,
			       struct dxl_repair_stats *out)
{
	*out = a->repair;
}

void dxl_appender_persist_stats(const struct dxl_appender *a,
				struct dxl_appender_persist_stats *out)
{
	*out = a->pst;
}

void dxl_appender_repaired(const struct dxl_appender *a, uint64_t *bytes_copied,
			   uint32_t *targets_truncated)
{
	if (bytes_copied)
		*bytes_copied = a->repair.bytes_copied;
	if (targets_truncated)
		*targets_truncated = (uint32_t)__builtin_popcount(a->repair.truncated);
}

static int status_err(enum dxl_wc_status st)
{
	switch (st) {
	case DXL_WC_REM_ACCESS_ERR:
		return DXL_E_ACCESS;
	case DXL_WC_FLUSHED:
		return DXL_E_STATE;
	default:
		return DXL_E_UNREACHABLE;
	}
}

static void slot_fail(struct slot *s, uint32_t bit, int err)
{
	s->pending &= ~bit;
	s->failed |= bit;
	if (!s->err)
		s->err = err;
	if (!s->pending)
		s->done = 1;
}

/* target t is dead: the operations whose flush READ came back and which
 * only waited for its persister's confirmation will hear nothing more */
static void drop_waiting(struct dxl_appender *a, unsigned t, int err)
{
	uint32_t bit = 1u << t;
	for (uint64_t k = a->done_token; k < a->next_token; k++) {
		struct slot *s = &a->slots[k % a->cfg.max_inflight];
		if (s->used && (s->pending & bit) && (s->chain_done & bit))
			slot_fail(s, bit, err);
	}
	a->tg[t].wait_ms = 0;
}

static void target_failed(struct dxl_appender *a, struct slot *s, unsigned t,
			  int err)
{
	uint32_t bit = 1u << t;
	if (!(s->pending & bit))
		return; /* a second completion of the same chain (flushed) */
	if (!a->tg[t].dead) {
		DXL_WARN("appender (writer %u): ring %u at %s failed: %s",
			 a->cfg.writer_id, a->tg[t].t.ring, a->tg[t].t.addr,
			 dxl_strerror(err));
		a->tg[t].dead = 1;
		drop_waiting(a, t, err);
	}
	s->pending &= ~bit;
	s->failed |= bit;
	if (!s->err)
		s->err = err;
}

static uint64_t preq_id(const struct target *tg, uint64_t token)
{
	return tg->preq_base + 2 + token;
}

/* the flush READs of operation s on target t: the head slots, and with a
 * persister the confirmation line; the last one carries wr_id, signalled */
static int flush_reads(struct dxl_appender *a, struct slot *s, unsigned t,
		       uint64_t wr_id, struct dxl_wr rd[2])
{
	struct target *tg = &a->tg[t];
	uint32_t lkey = dxl_mr_lkey(a->mr);
	rd[0] = (struct dxl_wr){.wr_id = wr_id, .op = DXL_WR_READ,
				.flags = tg->confirm ? 0 : DXL_WR_SIGNALED,
				.local = s->heads + t * HEADS_READ,
				.len = HEADS_READ, .lkey = lkey,
				.remote_addr = tg->t.data.addr + tg->t.ctl_off,
				.rkey = tg->t.data.rkey};
	if (!tg->confirm)
		return 1;
	rd[1] = (struct dxl_wr){.wr_id = wr_id, .op = DXL_WR_READ,
				.flags = DXL_WR_SIGNALED,
				.local = s->pdone + t * PSTAGE, .len = PLINE,
				.lkey = lkey,
				.remote_addr = tg->t.data.addr + tg->t.ctl_off +
					       DXL_RING_PDONE_OFF,
				.rkey = tg->t.data.rkey};
	rd[0].next = &rd[1];
	return 2;
}

/* the persist request of operation s for target t (after its WRITEs) */
static void preq_write(struct dxl_appender *a, struct slot *s, unsigned t,
		       uint64_t wr_id, struct dxl_wr *w)
{
	struct target *tg = &a->tg[t];
	uint8_t *b = s->pdone + t * PSTAGE + PLINE;
	struct dxl_persist_req q = {.id = preq_id(tg, s->token), .from = tg->ppos,
				    .to = s->preq_to};
	dxl_ring_preq_encode(&q, b);
	*w = (struct dxl_wr){.wr_id = wr_id, .op = DXL_WR_WRITE, .local = b,
			     .len = DXL_RING_PREQ_SIZE, .lkey = dxl_mr_lkey(a->mr),
			     .remote_addr = tg->t.data.addr + tg->t.ctl_off +
					    DXL_RING_PREQ_OFF,
			     .rkey = tg->t.data.rkey};
	a->pst.requests++;
}

static int post_reread(struct dxl_appender *a, unsigned t)
{
	struct target *tg = &a->tg[t];
	struct dxl_wr r = {.wr_id = (uint64_t)RR_SLOT << 8 | t,
			   .op = DXL_WR_READ, .flags = DXL_WR_SIGNALED,
			   .local = a->rr + t * PLINE, .len = PLINE,
			   .lkey = dxl_mr_lkey(a->mr),
			   .remote_addr = tg->t.data.addr + tg->t.ctl_off +
					  DXL_RING_PDONE_OFF,
			   .rkey = tg->t.data.rkey};
	int ret = dxl_qp_post(tg->qp, &r, NULL);
	if (ret == DXL_E_AGAIN)
		return 0; /* the send queue is full: progress() tries again */
	if (ret) {
		DXL_WARN("appender (writer %u): ring %u at %s failed: %s",
			 a->cfg.writer_id, tg->t.ring, tg->t.addr, dxl_errmsg());
		tg->dead = 1;
		drop_waiting(a, t, ret == DXL_E_STATE ? DXL_E_STATE : DXL_E_UNREACHABLE);
		return ret;
	}
	tg->reread = 1;
	a->pst.rereads++;
	return 0;
}

/* a confirmation line READ from target t; 1 if it confirmed more */
static int note_pdone(struct target *tg, const uint8_t *line)
{
	uint64_t d;
	dxl_ring_pdone_decode(line, &d);
	if (d <= tg->pdone)
		return 0;
	tg->pdone = d;
	tg->rr_idle = 0;
	tg->rr_due_ns = 0;
	if (tg->wait_ms)
		tg->wait_ms = dxl_now_ms(); /* progress */
	return 1;
}

/* acknowledge on target t what its persister confirmed; keep a re-read in
 * flight while something still waits */
static void confirm_sweep(struct dxl_appender *a, unsigned t)
{
	struct target *tg = &a->tg[t];
	uint32_t bit = 1u << t;
	int waiting = 0;
	for (uint64_t k = a->done_token; k < a->next_token; k++) {
		struct slot *s = &a->slots[k % a->cfg.max_inflight];
		if (!s->used || !(s->pending & bit) || !(s->chain_done & bit))
			continue;
		if (preq_id(tg, s->token) > tg->pdone) {
			waiting = 1;
			continue;
		}
		s->pending &= ~bit;
		s->acked |= bit;
		if (s->preq_to > tg->ppos)
			tg->ppos = s->preq_to;
		if (!s->pending)
			s->done = 1;
	}
	if (!waiting || tg->dead) {
		tg->wait_ms = 0;
		return;
	}
	if (!tg->wait_ms)
		tg->wait_ms = dxl_now_ms();
	if (!tg->reread && (!tg->rr_due_ns || dxl_now_ns() >= tg->rr_due_ns))
		post_reread(a, t);
}

/* from progress(): re-reads the send queue refused, and persisters that
 * stopped confirming */
static void confirm_check(struct dxl_appender *a)
{
	uint64_t now = 0;
	for (unsigned t = 0; t < a->n; t++) {
		struct target *tg = &a->tg[t];
		if (!tg->confirm || tg->dead || !tg->wait_ms)
			continue;
		if (!tg->reread && (!tg->rr_due_ns || dxl_now_ns() >= tg->rr_due_ns) &&
		    post_reread(a, t))
			continue;
		if (!now)
			now = dxl_now_ms();
		if (now - tg->wait_ms >= 1000 && tg->warned_ms != tg->wait_ms) {
			tg->warned_ms = tg->wait_ms;
			DXL_WARN("appender (writer %u): ring %u at %s: its persister has confirmed nothing for %llu ms (confirmed id %llu, next wanted %llu, %llu re-reads so far)",
				 a->cfg.writer_id, tg->t.ring, tg->t.addr,
				 (unsigned long long)(now - tg->wait_ms),
				 (unsigned long long)tg->pdone,
				 (unsigned long long)preq_id(tg, a->done_token),
				 (unsigned long long)a->pst.rereads);
		}
		if (now - tg->wait_ms < a->cfg.persist_timeout_ms)
			continue;
		DXL_WARN("appender (writer %u): ring %u at %s failed: its persister confirmed nothing in %u ms",
			 a->cfg.writer_id, tg->t.ring, tg->t.addr,
			 a->cfg.persist_timeout_ms);
		tg->dead = 1;
		drop_waiting(a, t, DXL_E_UNREACHABLE);
	}
}

static int post_chain(struct dxl_appender *a, struct slot *s, unsigned t,
		      uint32_t slot_idx)
{
	struct target *tg = &a->tg[t];
	struct dxl_fatptr fp = data_fp(tg);
	uint32_t lkey = dxl_mr_lkey(a->mr);
	uint64_t wr_id = (uint64_t)slot_idx << 8 | t;
	struct dxl_wr w[7];
	int k = 0;
	memset(w, 0, sizeof(w));
	int confirm = tg->confirm && a->cfg.mode != DXL_PWRITE_NOFLUSH;
	/* the watermark goes inline (copied at post), after the record */
	uint8_t wm[DXL_RING_WMARK_SIZE];
	dxl_put_le64(wm, s->wmark);
	dxl_put_le64(wm + 8, s->wmark ^ DXL_RING_WMARK_MAGIC);
	struct dxl_wr wmw = {.wr_id = wr_id, .op = DXL_WR_WRITE,
			     .flags = DXL_WR_INLINE, .local = wm,
			     .len = DXL_RING_WMARK_SIZE,
			     .remote_addr = fp.addr + tg->t.ctl_off + DXL_RING_WMARK_OFF,
			     .rkey = fp.rkey};
	if (s->heartbeat) {
		w[k++] = wmw;
		if (confirm)
			preq_write(a, s, t, wr_id, &w[k++]);
		k += flush_reads(a, s, t, wr_id, &w[k]);
		for (int i = 0; i + 1 < k; i++)
			w[i].next = &w[i + 1];
		return dxl_qp_post(tg->qp, w, NULL);
	}
	if (s->skip_len) {
		w[k] = (struct dxl_wr){.wr_id = wr_id, .op = DXL_WR_WRITE,
				       .local = s->skip, .len = s->skip_len,
				       .lkey = lkey,
				       .remote_addr = fp.addr + tg->t.buf_off + s->skip_off,
				       .rkey = fp.rkey};
		k++;
	}
	struct dxl_wr pair[2];
	int ret = dxl_rdpma_pwrite_chain(pair, &fp, tg->t.buf_off + s->rec_off,
					 s->rec, s->rec_len, lkey,
					 fp.addr + tg->t.ctl_off, fp.rkey,
					 s->heads + t * HEADS_READ, lkey, wr_id);
	if (ret < 0)
		return ret;
	/* the READs: flush_reads (both head slots: flush + free space, and
	 * the persister's confirmation) instead of pair[1] */
	w[k++] = pair[0];
	/* the watermark before the flush READ: as durable as the record when
	 * the append is acknowledged (a tailer may deliver below it at once) */
	if (!a->test_wmark_after_flush)
		w[k++] = wmw;
	if (confirm)
		preq_write(a, s, t, wr_id, &w[k++]);
	switch (a->cfg.mode) {
	case DXL_PWRITE_H9:
		k += flush_reads(a, s, t, wr_id, &w[k]);
		if (a->test_wmark_after_flush) /* the broken order, for tests */
			w[k++] = wmw;
		break;
	case DXL_PWRITE_STRAWMAN:
	case DXL_PWRITE_NOFLUSH:
		/* wait for the WRITEs themselves; the strawman READs afterwards */
		w[k - 1].flags |= DXL_WR_SIGNALED;
		break;
	}
	for (int i = 0; i + 1 < k; i++)
		w[i].next = &w[i + 1];
	w[k - 1].next = NULL;
	return dxl_qp_post(tg->qp, w, NULL);
}

/* the strawman's second round trip: the flush READ after the WRITE came back */
static int post_straw_read(struct dxl_appender *a, struct slot *s, unsigned t,
			   uint32_t slot_idx)
{
	struct dxl_wr r[2];
	flush_reads(a, s, t, (uint64_t)slot_idx << 8 | t, r);
	return dxl_qp_post(a->tg[t].qp, r, NULL);
}

static void on_wc(struct dxl_appender *a, const struct dxl_wc *wc)
{
	uint32_t si = (uint32_t)(wc->wr_id >> 8);
	unsigned t = (unsigned)(wc->wr_id & 0xff);
	if (si == RR_SLOT && t < a->n) { /* a confirmation re-read */
		a->tg[t].reread = 0;
		if (wc->status != DXL_WC_SUCCESS) {
			if (!a->tg[t].dead)
				DXL_WARN("appender (writer %u): ring %u at %s failed: %s",
					 a->cfg.writer_id, a->tg[t].t.ring,
					 a->tg[t].t.addr,
					 dxl_strerror(status_err(wc->status)));
			a->tg[t].dead = 1;
			drop_waiting(a, t, status_err(wc->status));
			return;
		}
		struct target *tg = &a->tg[t];
		if (!note_pdone(tg, a->rr + t * PLINE) && ++tg->rr_idle > 4)
			tg->rr_due_ns = dxl_now_ns() +
					DXL_MIN(50000ull << DXL_MIN(tg->rr_idle - 5, 5u),
						1000000ull);
		confirm_sweep(a, t);
		return;
	}
	if (si >= a->cfg.max_inflight || t >= a->n)
		return; /* not ours (cannot happen: we own the ctx) */
	struct slot *s = &a->slots[si];
	uint32_t bit = 1u << t;
	if (!s->used || !(s->pending & bit))
		return;
	if (wc->status != DXL_WC_SUCCESS) {
		target_failed(a, s, t, status_err(wc->status));
	} else if (a->cfg.mode == DXL_PWRITE_STRAWMAN && !s->straw_read_posted[t]) {
		s->straw_read_posted[t] = 1;
		int ret = post_straw_read(a, s, t, si);
		if (ret)
			target_failed(a, s, t, ret == DXL_E_STATE ? DXL_E_STATE
								   : DXL_E_UNREACHABLE);
		return;
	} else {
		if (a->cfg.mode != DXL_PWRITE_NOFLUSH)
			note_head(&a->tg[t], s->heads + t * HEADS_READ);
		if (a->tg[t].confirm && a->cfg.mode != DXL_PWRITE_NOFLUSH) {
			/* placed; durable once the persister confirms */
			note_pdone(&a->tg[t], s->pdone + t * PSTAGE);
			s->chain_done |= bit;
			if (preq_id(&a->tg[t], s->token) > a->tg[t].pdone)
				a->pst.waited++;
			confirm_sweep(a, t);
			return;
		}
		s->pending &= ~bit;
		s->acked |= bit;
	}
	if (!s->pending)
		s->done = 1;
}

static int progress(struct dxl_appender *a)
{
	struct dxl_wc wc[32];
	int total = 0;
	for (;;) {
		int n = dxl_ctx_poll(a->ctx, wc, 32);
		if (n < 0)
			return n;
		for (int i = 0; i < n; i++)
			on_wc(a, &wc[i]);
		total += n;
		if (n < 32) {
			confirm_check(a);
			return total;
		}
	}
}

int dxl_appender_poll(struct dxl_appender *a, struct dxl_append_result *res,
		      int n)
{
	if (!a || (!res && n))
		return dxl_err_set(DXL_E_INVAL, "appender poll: NULL argument");
	int ret = progress(a);
	if (ret < 0)
		return ret;
	int k = 0;
	while (k < n && a->done_token < a->next_token) {
		struct slot *s = &a->slots[a->done_token % a->cfg.max_inflight];
		if (!s->done)
			break;
		if (s->heartbeat) { /* nothing to report */
			s->used = 0;
			a->done_token++;
			continue;
		}
		if (s->failed && s->ts < a->failed_floor)
			a->failed_floor = s->ts;
		res[k].token = s->token;
		res[k].acked = s->acked;
		res[k].failed = s->failed;
		res[k].status = s->failed ? (s->err ? s->err : DXL_E_UNREACHABLE) : 0;
		res[k].seq = s->seq;
		res[k].pos = s->pos;
		res[k].wmark = s->wmark;
		s->used = 0;
		a->done_token++;
		k++;
	}
	return k;
}

int dxl_appender_wait(struct dxl_appender *a, int timeout_ms)
{
	if (a->done_token < a->next_token &&
	    a->slots[a->done_token % a->cfg.max_inflight].done)
		return 0;
	/* a re-read held back (backing off) is posted by the next poll: do
	 * not sleep past it */
	uint64_t due = UINT64_MAX;
	for (unsigned t = 0; t < a->n; t++) {
		const struct target *tg = &a->tg[t];
		if (tg->confirm && !tg->dead && tg->wait_ms && !tg->reread &&
		    tg->rr_due_ns < due)
			due = tg->rr_due_ns;
	}
	if (due != UINT64_MAX) {
		uint64_t now = dxl_now_ns();
		if (due <= now)
			return 0;
		if (due - now < 1000000ull || timeout_ms == 0) {
			if (timeout_ms != 0)
				nap_us((unsigned)((due - now) / 1000));
			return 0;
		}
		int ms = (int)((due - now + 999999) / 1000000);
		if (timeout_ms < 0 || ms < timeout_ms)
			timeout_ms = ms;
	}
	return dxl_ctx_wait(a->ctx, timeout_ms);
}

/*
 * The watermark an operation posted now may promise (BookKeeper's
 * last-add-confirmed): every record below it is acknowledged -- persistent on
 * every target -- and nothing will be appended below it. That is the
 * commit timestamp of the oldest append not acknowledged yet (in flight, or
 * failed: a failure freezes it for good), else `upto`.
 */
static uint64_t ack_floor(const struct dxl_appender *a, uint64_t upto)
{
	uint64_t f = DXL_MIN(DXL_MIN(upto, a->failed_floor), a->hold);
	for (uint64_t k = a->done_token; k < a->next_token; k++) {
		const struct slot *s = &a->slots[k % a->cfg.max_inflight];
		if (!s->heartbeat && (!s->done || s->failed))
			return DXL_MIN(f, s->ts);
	}
	return f;
}

/* 1 if some posted request has not completed yet (results merely waiting
 * to be polled do not count: their requests are done) */
static int outstanding(const struct dxl_appender *a)
{
	for (uint64_t k = a->done_token; k < a->next_token; k++)
		if (!a->slots[k % a->cfg.max_inflight].done)
			return 1;
	for (unsigned t = 0; t < a->n; t++)
		if (a->tg[t].reread)
			return 1;
	return 0;
}

/* the smallest head position over the live targets (what bounds space) */
static uint64_t min_head(const struct dxl_appender *a)
{
	uint64_t m = UINT64_MAX;
	for (unsigned i = 0; i < a->n; i++)
		if (!a->tg[i].dead && a->tg[i].head_pos < m)
			m = a->tg[i].head_pos;
	return m == UINT64_MAX ? a->tail_pos : m;
}

/* nothing outstanding on the ctx: ask the live targets for their heads */
static int refresh_heads(struct dxl_appender *a)
{
	uint8_t *hb = a->slots[a->next_token % a->cfg.max_inflight].heads;
	for (unsigned i = 0; i < a->n; i++) {
		struct target *t = &a->tg[i];
		if (t->dead)
			continue;
		struct dxl_fatptr fp = data_fp(t);
		int ret = dxl_rdpma_read(t->qp, &fp, t->t.ctl_off, hb, HEADS_READ,
					 dxl_mr_lkey(a->mr));
		if (ret) {
			t->dead = 1;
			DXL_WARN("appender (writer %u): ring %u at %s failed: %s",
				 a->cfg.writer_id, t->t.ring, t->t.addr, dxl_errmsg());
			continue;
		}
		note_head(t, hb);
	}
	return 0;
}

int dxl_appender_append(struct dxl_appender *a, const struct dxl_rec *rec,
			const uint32_t *parts, uint64_t *token)
{
	if (!a || !rec)
		return dxl_err_set(DXL_E_INVAL, "append: NULL argument");
	if (a->closed)
		return dxl_err_set(DXL_E_STATE, "append: ring %u is closed", a->tg[0].t.ring);
	if (rec->payload_len == 0 && rec->nparts == 0)
		return dxl_err_set(DXL_E_INVAL,
				   "append: empty record (no payload, no participants)");
	if (rec->commit_ts < a->last_ts)
		return dxl_err_set(DXL_E_INVAL,
				   "append: commit timestamp %llu is below the previous %llu",
				   (unsigned long long)rec->commit_ts,
				   (unsigned long long)a->last_ts);
	uint32_t size = dxl_rec_size(rec->nparts, rec->payload_len);
	if (!size || size > a->cfg.max_record || size > a->ring_size / 2)
		return dxl_err_set(DXL_E_TOOBIG,
				   "append: record of %u participants and %u payload bytes exceeds max_record %u or half the ring (%llu)",
				   rec->nparts, rec->payload_len, a->cfg.max_record,
				   (unsigned long long)a->ring_size / 2);
	if (dxl_appender_failed_targets(a) == (1u << a->n) - 1)
		return dxl_err_set(DXL_E_UNAVAIL, "append: every target has failed");
	if (dxl_appender_inflight(a) >= a->cfg.max_inflight)
		return dxl_err_set(DXL_E_AGAIN,
				   "append: %u appends in flight; poll for results first",
				   a->cfg.max_inflight);

	/* place it; while the rings are full, make progress and re-read heads */
	struct dxl_ring_place p;
	uint64_t deadline = 0;
	for (;;) {
		int ret = dxl_ring_place(a->ring_size, a->tail_pos, a->tail_seq,
					 min_head(a), size, &p);
		if (!ret)
			break;
		if (ret != DXL_E_FULL)
			return ret;
		uint64_t now = dxl_now_ms();
		if (!deadline)
			deadline = now + a->cfg.full_wait_ms;
		else if (now >= deadline)
			return dxl_err_set(DXL_E_FULL,
					   "append: ring full for %u ms on writer %u: replica heads not advancing (tail %llu, oldest head %llu)",
					   a->cfg.full_wait_ms, a->cfg.writer_id,
					   (unsigned long long)a->tail_pos,
					   (unsigned long long)min_head(a));
		if (!outstanding(a)) {
			refresh_heads(a);
			if (dxl_appender_failed_targets(a) == (1u << a->n) - 1)
				return dxl_err_set(DXL_E_UNAVAIL,
						   "append: every target has failed");
			if (dxl_ring_place(a->ring_size, a->tail_pos, a->tail_seq,
					   min_head(a), size, &p) == 0)
				break;
			dxl_ctx_wait(a->ctx, 1); /* nothing to poll: back off */
		} else {
			progress(a);
			dxl_ctx_wait(a->ctx, 1);
		}
	}
	dxl_err_clear();

	uint32_t si = (uint32_t)(a->next_token % a->cfg.max_inflight);
	struct slot *s = &a->slots[si];
	DXL_ASSERT(!s->used);
	struct dxl_rec r = *rec;
	r.type = DXL_REC_DATA;
	r.writer = a->cfg.writer_id;
	r.epoch = a->cfg.epoch;
	r.seq = p.rec_seq;
	r.incarnation = a->inc;
	int n = dxl_rec_encode(&r, parts, s->rec, a->cfg.max_record);
	if (n < 0)
		return n;
	s->rec_len = (uint32_t)n;
	s->rec_off = p.rec_off;
	s->skip_len = p.skip_len;
	s->skip_off = p.skip_off;
	if (p.skip_len) {
		int m = dxl_rec_encode_skip_inc(a->cfg.writer_id, a->cfg.epoch,
						a->inc, p.skip_seq, p.skip_len,
						s->skip, a->cfg.max_record);
		if (m < 0)
			return m;
	}
	s->used = 1;
	s->done = 0;
	s->heartbeat = 0;
	s->ts = rec->commit_ts;
	s->wmark = ack_floor(a, rec->commit_ts);
	s->token = a->next_token;
	s->pending = 0;
	s->acked = 0;
	s->failed = 0;
	s->err = 0;
	s->seq = p.rec_seq;
	s->pos = p.rec_pos;
	s->chain_done = 0;
	s->preq_to = p.new_tail_pos;
	memset(s->straw_read_posted, 0, sizeof(s->straw_read_posted));
	for (unsigned t = 0; t < a->n; t++) {
		s->pending |= 1u << t;
		if (a->tg[t].dead) {
			target_failed(a, s, t, DXL_E_STATE);
			continue;
		}
		int ret = post_chain(a, s, t, si);
		uint64_t sq_deadline = 0;
		while (ret == DXL_E_AGAIN) {
			/* the send queue is full of earlier appends: a normal state
			 * with deep pipelines, not a failure. Reap and retry, for
			 * as long as a full ring may make us wait. */
			progress(a);
			ret = post_chain(a, s, t, si);
			if (ret != DXL_E_AGAIN)
				break;
			uint64_t now = dxl_now_ms();
			if (!sq_deadline)
				sq_deadline = now + a->cfg.full_wait_ms;
			else if (now >= sq_deadline)
				break;
			dxl_ctx_wait(a->ctx, 1);
		}
		if (ret)
			target_failed(a, s, t, ret == DXL_E_STATE ? DXL_E_STATE
								   : DXL_E_UNREACHABLE);
	}
	if (!s->pending)
		s->done = 1;
	a->tail_pos = p.new_tail_pos;
	a->tail_seq = p.new_tail_seq;
	a->last_ts = rec->commit_ts;
	if (token)
		*token = a->next_token;
	a->next_token++;
	return 0;
}

void dxl_appender_set_hold(struct dxl_appender *a, uint64_t ts)
{
	a->hold = ts;
}

int dxl_appender_heartbeat(struct dxl_appender *a, uint64_t ts)
{
	if (!a)
		return dxl_err_set(DXL_E_INVAL, "heartbeat: NULL appender");
	if (a->closed)
		return dxl_err_set(DXL_E_STATE, "heartbeat: ring %u is closed", a->tg[0].t.ring);
	if (ts < a->last_ts)
		return dxl_err_set(DXL_E_INVAL,
				   "heartbeat: watermark %llu is below the last timestamp %llu",
				   (unsigned long long)ts,
				   (unsigned long long)a->last_ts);
	if (dxl_appender_failed_targets(a) == (1u << a->n) - 1)
		return dxl_err_set(DXL_E_UNAVAIL, "heartbeat: every target has failed");
	if (dxl_appender_inflight(a) >= a->cfg.max_inflight)
		return dxl_err_set(DXL_E_AGAIN, "heartbeat: %u operations in flight",
				   a->cfg.max_inflight);
	uint32_t si = (uint32_t)(a->next_token % a->cfg.max_inflight);
	struct slot *s = &a->slots[si];
	DXL_ASSERT(!s->used);
	/* its chain already ends in the READ, in every mode */
	memset(s->straw_read_posted, 1, sizeof(s->straw_read_posted));
	s->used = 1;
	s->done = 0;
	s->heartbeat = 1;
	s->ts = ts;
	s->wmark = ack_floor(a, ts);
	s->token = a->next_token;
	s->pending = s->acked = s->failed = 0;
	s->err = 0;
	s->chain_done = 0;
	s->preq_to = a->tail_pos;
	for (unsigned t = 0; t < a->n; t++) {
		s->pending |= 1u << t;
		if (a->tg[t].dead) {
			target_failed(a, s, t, DXL_E_STATE);
			continue;
		}
		int ret = post_chain(a, s, t, si);
		if (ret)
			target_failed(a, s, t, ret == DXL_E_STATE ? DXL_E_STATE
								   : DXL_E_UNREACHABLE);
	}
	if (!s->pending)
		s->done = 1;
	/* the promise binds the appends that follow */
	a->last_ts = ts;
	a->next_token++;
	return 0;
}

int dxl_appender_append_sync(struct dxl_appender *a, const struct dxl_rec *rec,
			     const uint32_t *parts,
			     struct dxl_append_result *res)
{
	struct dxl_append_result tmp;
	if (!res)
		res = &tmp;
	if (a && dxl_appender_inflight(a))
		return dxl_err_set(DXL_E_BUSY,
				   "append_sync: %u appends already in flight",
				   dxl_appender_inflight(a));
	uint64_t token;
	int ret = dxl_appender_append(a, rec, parts, &token);
	if (ret)
		return ret;
	for (;;) {
		int n = dxl_appender_poll(a, res, 1);
		if (n < 0)
			return n;
		if (n == 1) {
			DXL_ASSERT(res->token == token);
			if (res->status)
				return dxl_err_set(res->status,
						   "append: not acknowledged (targets with it: %#x, without: %#x)",
						   res->acked, res->failed);
			return 0;
		}
		dxl_appender_wait(a, 100);
	}
}

/*
 * dxl_appender_close -- see log.h. The final watermark is written and
 * acknowledged by every target before any owner word is cleared: a tailer
 * that sees the owner word unclaimed (and so no longer holds its resolved
 * timestamp at this ring) reads a watermark above every record of the ring
 * (test_close_watermark_before_owner). Each target's owner word is cleared
 * only from this appender's own word (its claim's generation), so a close
 * that comes after a new holder of the writer id took the ring over
 * changes nothing there. A close that failed on some target is retried by
 * calling it again: the final watermark stands, only the owner words not
 * cleared yet are.
 */
int dxl_appender_close(struct dxl_appender *a, uint64_t ts)
{
	if (!a)
		return dxl_err_set(DXL_E_INVAL, "close: NULL appender");
	if (a->close_done)
		return 0;
	int ret;
	if (!a->closed) {
		if ((ret = progress(a)) < 0)
			return ret;
		/* heartbeats that completed leave nothing to report */
		while (a->done_token < a->next_token) {
			struct slot *d = &a->slots[a->done_token % a->cfg.max_inflight];
			if (!d->done || !d->heartbeat)
				break;
			d->used = 0;
			a->done_token++;
		}
		if (dxl_appender_inflight(a))
			return dxl_err_set(DXL_E_BUSY,
					   "close: %u appends of ring %u in flight or not polled yet",
					   dxl_appender_inflight(a), a->tg[0].t.ring);
		if (a->failed_floor != UINT64_MAX || dxl_appender_failed_targets(a))
			return dxl_err_set(DXL_E_STATE,
					   "close: ring %u has appends of unknown outcome (a target failed): left open for the next holder's repair",
					   a->tg[0].t.ring);
		uint64_t final = DXL_MAX(ts, a->last_ts + 1);
		if (a->hold < final)
			return dxl_err_set(DXL_E_BUSY,
					   "close: ring %u holds records not confirmed yet (hold %llu)",
					   a->tg[0].t.ring, (unsigned long long)a->hold);
		if ((ret = dxl_appender_heartbeat(a, final)))
			return ret;
		uint64_t hb = a->next_token - 1;
		struct slot *s = &a->slots[hb % a->cfg.max_inflight];
		while (!s->done) {
			if ((ret = progress(a)) < 0)
				return ret;
			if (!s->done)
				dxl_ctx_wait(a->ctx, 10);
		}
		if (s->failed)
			return dxl_err_set(s->err ? s->err : DXL_E_UNREACHABLE,
					   "close: the final watermark of ring %u did not reach every target (failed %#x): left open",
					   a->tg[0].t.ring, s->failed);
		s->used = 0; /* the only request: nothing to report */
		a->done_token++;
		/* from here on no append or heartbeat: what is left is clearing
		 * the owner words, which a failed close retries */
		a->closed = 1;
	}
	uint8_t *scratch = a->slots[0].heads;
	for (unsigned i = 0; i < a->n; i++) {
		struct target *t = &a->tg[i];
		if (t->owner_closed)
			continue;
		struct dxl_fatptr fp = data_fp(t);
		/* unclaimed, the generation kept: the next claim's word differs
		 * from every word before it */
		uint64_t closed = DXL_RING_OWNER(DXL_RING_OWNER_GEN(t->owner), 0);
		uint64_t owner = 0;
		ret = dxl_rdpma_cas(t->qp, fp.addr + t->t.ctl_off + DXL_RING_OWNER_OFF,
				    fp.rkey, t->owner, closed, &owner, scratch,
				    dxl_mr_lkey(a->mr));
		/* the READ after the CAS on this QP makes it durable (H9) */
		if (!ret)
			ret = dxl_rdpma_read(t->qp, &fp, t->t.ctl_off, scratch,
					     HEADS_READ, dxl_mr_lkey(a->mr));
		/* (closed already: an earlier call's CAS landed, its answer
		 * did not) */
		if (!ret && owner != t->owner && owner != closed)
			ret = dxl_err_set(DXL_E_STALE,
					  "close: ring %u at %s has owner word %#llx, not this holder's %#llx (a new holder of writer %u took it over): left to it",
					  t->t.ring, t->t.addr, (unsigned long long)owner,
					  (unsigned long long)t->owner, a->cfg.writer_id);
		if (ret) {
			dxl_err_prefix("close: ring %u at %s (the other targets' copies stay open or closed as they are: both are safe)",
				       t->t.ring, t->t.addr);
			return ret;
		}
		t->owner_closed = 1;
	}
	a->close_done = 1;
	return 0;
}
