/* tail.c -- change capture: one-sided reads of a replica's rings, merged below the watermarks */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/endian.h"
#include "dxl/log.h"
#include "log/log_internal.h"

/*
 * Who may call: the thread owning the ctx; the tailer owns the ctx's
 * completions while it polls.
 *
 * Per ring the tailer keeps a mirror of the ring buffer (same offsets) and
 * the position of the next record to deliver. A poll chains, per ring, a
 * READ of the control block's first 256 bytes (head slots, owner word,
 * watermark) and a READ of up to `window` bytes of the buffer from that
 * position (not past the ring's end, nor a full lap ahead), one doorbell.
 * Because the READs execute in order and the writer wrote each record
 * before the watermark that covers it (and flushed both), every record
 * below the watermark read is in the data read after it.
 */

#define CTL_READ 256
#define TAIL_MIN_WINDOW 4096
#define WR_TAIL 0x5441494c00000000ull /* "TAIL" */

struct tring {
	struct dxl_log_target t;
	uint64_t pos, seq;     /* next record to deliver */
	uint64_t win_lo, win_hi; /* positions whose bytes this poll fetched */
	uint64_t need;         /* bytes the next window must cover (big record) */
	uint64_t win;          /* this ring's window: adapts between
				  TAIL_MIN_WINDOW and cfg.window */
	uint8_t *ctl;          /* CTL_READ bytes, in the MR */
	uint8_t *mirror;       /* ring_size bytes, in the MR */
	struct dxl_ring_iter it;
	struct dxl_rec cur;    /* the ring's next candidate */
	uint64_t cur_pos;
	int have;              /* cur is valid */
	int blocked;           /* ran out of fetched bytes: may have more */
	uint64_t cap;          /* deliver only below this (a dead writer's
				  watermark); UINT64_MAX for live rings */
};

struct dxl_tailer {
	struct dxl_ctx *ctx;
	struct dxl_qp *qp;
	struct dxl_tail_cfg cfg;
	unsigned n;
	struct tring *r;
	uint8_t *mem;
	size_t mem_len;
	struct dxl_mr *mr;
	uint64_t cursor;
	int started; /* positions found from the heads and the cursor */
	int caught_up; /* the last poll delivered everything below resolved */
	uint64_t reclaimed_ts; /* largest head last_ts seen by the last poll */
	struct dxl_wr *wrs; /* a poll's chain: 2 READs per ring (set up once) */
};

int dxl_tailer_new(struct dxl_ctx *ctx, const struct dxl_tail_cfg *cfg,
		   const struct dxl_log_target *targets, unsigned n,
		   struct dxl_tailer **out)
{
	*out = NULL;
	if (!ctx || !cfg || !targets || n == 0 || n > DXL_RING_MAX)
		return dxl_err_set(DXL_E_INVAL, "tailer: bad argument");
	for (unsigned i = 0; i < n; i++)
		if (targets[i].ring_size != targets[0].ring_size ||
		    targets[i].data.rkey != targets[0].data.rkey ||
		    strcmp(targets[i].addr, targets[0].addr) != 0)
			return dxl_err_set(DXL_E_INVAL,
					   "tailer: the targets must be the rings of one replica's log");
	struct dxl_tailer *t = calloc(1, sizeof(*t));
	if (!t)
		return dxl_err_set(DXL_E_NOMEM, "tailer: out of memory");
	t->ctx = ctx;
	t->cfg = *cfg;
	if (!t->cfg.window)
		t->cfg.window = 256 * 1024;
	t->n = n;
	t->cursor = cfg->from_ts;
	uint64_t rs = targets[0].ring_size;
	t->mem_len = DXL_ALIGN_UP((uint64_t)n * (CTL_READ + rs), 4096ull);
	t->r = calloc(n, sizeof(*t->r));
	t->wrs = calloc(2u * n, sizeof(*t->wrs));
	int ret;
	if (!t->r || !t->wrs || posix_memalign((void **)&t->mem, 4096, t->mem_len)) {
		ret = dxl_err_set(DXL_E_NOMEM, "tailer: out of memory (%zu bytes)",
				  t->mem_len);
		goto err;
	}
	memset(t->mem, 0, t->mem_len);
	for (unsigned i = 0; i < n; i++) {
		t->r[i].t = targets[i];
		t->r[i].ctl = t->mem + (uint64_t)i * (CTL_READ + rs);
		t->r[i].mirror = t->r[i].ctl + CTL_READ;
	}
	if ((ret = dxl_mr_reg(dxl_ctx_fabric(ctx), t->mem, t->mem_len,
			      DXL_MR_LOCAL_WRITE, &t->mr)))
		goto err;
	if ((ret = dxl_qp_connect(ctx, targets[0].addr, targets[0].remote_ctx,
				  &t->qp)))
		goto err;
	*out = t;
	return 0;
err:
	dxl_mr_dereg(&t->mr);
	free(t->mem);
	free(t->wrs);
	free(t->r);
	free(t);
	return ret;
}

void dxl_tailer_delete(struct dxl_tailer **tp)
{
	if (!tp || !*tp)
		return;
	struct dxl_tailer *t = *tp;
	dxl_qp_delete(&t->qp);
	dxl_mr_dereg(&t->mr);
	free(t->mem);
	free(t->wrs);
	free(t->r);
	free(t);
	*tp = NULL;
}

uint64_t dxl_tailer_cursor(const struct dxl_tailer *t)
{
	return t->cursor;
}

int dxl_tailer_caught_up(const struct dxl_tailer *t)
{
	return t->caught_up;
}

uint64_t dxl_tailer_reclaimed_ts(const struct dxl_tailer *t)
{
	return t->reclaimed_ts;
}

void dxl_tailer_set_live(struct dxl_tailer *t, uint64_t mask)
{
	t->cfg.live_mask = mask;
	t->cfg.live_given = 1;
}

/* READ every control block, then every ring's window, in one chain */
static int fetch(struct dxl_tailer *t)
{
	const uint64_t rs = t->r[0].t.ring_size;
	uint32_t lkey = dxl_mr_lkey(t->mr);
	struct dxl_wr *w = t->wrs;
	memset(w, 0, 2u * t->n * sizeof(*w));
	unsigned k = 0;
	for (unsigned i = 0; i < t->n; i++) {
		struct tring *r = &t->r[i];
		w[k++] = (struct dxl_wr){.wr_id = WR_TAIL, .op = DXL_WR_READ,
					 .local = r->ctl, .len = CTL_READ, .lkey = lkey,
					 .remote_addr = r->t.data.addr + r->t.ctl_off,
					 .rkey = r->t.data.rkey};
	}
	for (unsigned i = 0; i < t->n && t->started; i++) {
		struct tring *r = &t->r[i];
		if (!r->win)
			r->win = DXL_MIN((uint64_t)TAIL_MIN_WINDOW, (uint64_t)t->cfg.window);
		uint64_t off = r->pos % rs;
		uint64_t len = DXL_MIN(DXL_MAX(r->win, r->need), rs - off);
		r->win_lo = r->pos;
		r->win_hi = r->pos + len;
		w[k++] = (struct dxl_wr){.wr_id = WR_TAIL, .op = DXL_WR_READ,
					 .local = r->mirror + off, .len = (uint32_t)len,
					 .lkey = lkey,
					 .remote_addr = r->t.data.addr + r->t.buf_off + off,
					 .rkey = r->t.data.rkey};
	}
	for (unsigned i = 0; i + 1 < k; i++)
		w[i].next = &w[i + 1];
	w[k - 1].flags = DXL_WR_SIGNALED;
	/* long chains go in pieces no longer than what a queue can hold */
	int ret = 0;
	unsigned at = 0, step = 64;
	while (at < k && !ret) {
		unsigned end = DXL_MIN(k, at + step);
		w[end - 1].next = NULL;
		w[end - 1].flags = DXL_WR_SIGNALED;
		ret = dxl_log_post_wait(t->qp, &w[at], WR_TAIL);
		if (ret)
			dxl_err_prefix("tailer: reading the log at %s", t->r[0].t.addr);
		at = end;
	}
	return ret;
}

/* bytes the record whose header is at position p claims (0: no header) */
static uint64_t claimed_len(const struct tring *r, uint64_t p)
{
	const uint64_t rs = r->t.ring_size;
	return dxl_rec_peek_size(r->mirror + p % rs, rs - p % rs);
}

/*
 * The next candidate of ring r: a record whose bytes this poll fetched. Skip
 * records passed on the way are consumed (nothing to deliver). If the next
 * record was not (entirely) fetched, the ring is "blocked": it may hold more
 * than this poll saw, and the merge must not go past it.
 */
static void advance(struct tring *r)
{
	const uint64_t rs = r->t.ring_size;
	uint64_t before = r->it.pos;
	r->have = 0;
	r->blocked = 0;
	int got = dxl_ring_iter_next(&r->it, &r->cur, &r->cur_pos);
	uint64_t stop = got ? r->cur_pos : r->it.pos;   /* first unconsumed */
	uint64_t stop_seq = got ? r->cur.seq : r->it.seq;
	if (got && r->cur_pos >= r->win_lo &&
	    r->cur_pos + r->cur.total_len <= r->win_hi) {
		r->have = 1;
		return;
	}
	/* skips between `before` and `stop` carry nothing: consume them, so the
	 * next window starts past them (e.g. on the next lap) */
	if (stop != before) {
		r->pos = stop;
		r->seq = stop_seq;
	}
	r->it.pos = stop;
	r->it.seq = stop_seq;
	/* the end of the valid content, or only of what was fetched? */
	uint64_t claim = claimed_len(r, stop);
	if (stop < r->win_lo || stop + DXL_REC_HDR_SIZE > r->win_hi ||
	    (claim && stop + claim > r->win_hi)) {
		r->blocked = 1;
		/* a record bigger than the window: read enough next time */
		r->need = claim && stop % rs + claim <= rs ? claim : 0;
	}
}

int dxl_tailer_poll(struct dxl_tailer *t, dxl_tail_fn fn, void *arg,
		    uint64_t *cursor)
{
	t->caught_up = 0;
	int ret = fetch(t);
	if (ret)
		return ret;
	/* heads, owners, watermarks, and the resolved timestamp */
	uint64_t resolved = UINT64_MAX;
	int any = 0;
	t->reclaimed_ts = 0;
	for (unsigned i = 0; i < t->n; i++) {
		struct tring *r = &t->r[i];
		struct dxl_ring_head h;
		if (dxl_ring_head_decode(r->ctl, &h))
			return dxl_err_set(DXL_E_CORRUPT,
					   "tailer: ring %u at %s has no valid head",
					   i, r->t.addr);
		uint64_t wm = dxl_ring_wmark_decode(r->ctl + DXL_RING_WMARK_OFF);
		t->reclaimed_ts = DXL_MAX(t->reclaimed_ts, h.last_ts);
		int live = t->cfg.live_given
				   ? (i < 64 && ((t->cfg.live_mask >> i) & 1))
				   : dxl_get_le64(r->ctl + DXL_RING_OWNER_OFF) != 0;
		if (live) {
			resolved = DXL_MIN(resolved, wm);
			any = 1;
			r->cap = UINT64_MAX;
		} else {
			/* its writer is gone: what it confirmed is final, the
			 * rest is not ours to deliver */
			r->cap = wm;
		}
		if (!t->started) {
			/* records below the cursor that were reclaimed are fine;
			 * records at or above it must still be there. Cursor 0
			 * means "the earliest record retained": nothing to miss */
			if (t->cursor > 0 && h.last_ts >= t->cursor)
				return dxl_err_set(DXL_E_STALE,
						   "tailer: cursor %llu is older than what ring %u retains (its head passed timestamp %llu)",
						   (unsigned long long)t->cursor, i,
						   (unsigned long long)h.last_ts);
			r->pos = h.pos;
			r->seq = h.seq;
		} else if (h.pos > r->pos) {
			return dxl_err_set(DXL_E_STALE,
					   "tailer: ring %u was reclaimed past the tailer (head %llu, tailer at %llu): the cursor is older than the retention",
					   i, (unsigned long long)h.pos,
					   (unsigned long long)r->pos);
		}
	}
	if (!any && !t->cfg.live_given)
		resolved = 0; /* nobody writes: nothing is promised */
	/* (with an explicit empty live set, every ring is capped by its own
	 * watermark instead: resolved stays unbounded) */
	if (!t->started) {
		t->started = 1;
		if ((ret = fetch(t))) /* now the windows, from the heads */
			return ret;
	}
	for (unsigned i = 0; i < t->n; i++) {
		struct tring *r = &t->r[i];
		dxl_ring_iter_init_buf(&r->it, r->mirror, r->t.ring_size, r->pos,
				       r->seq);
		r->it.ring = i;
		advance(r);
	}
	int n = 0;
	for (;;) {
		struct tring *best = NULL;
		int blocked = 0;
		for (unsigned i = 0; i < t->n; i++) {
			struct tring *r = &t->r[i];
			if (r->blocked)
				blocked = 1;
			if (r->have && r->cur.commit_ts >= r->cap)
				r->have = 0; /* beyond what its dead writer confirmed */
			if (!r->have)
				continue;
			if (!best || r->cur.commit_ts < best->cur.commit_ts ||
			    (r->cur.commit_ts == best->cur.commit_ts &&
			     r->cur.writer < best->cur.writer))
				best = r;
		}
		/* a ring that ran out of fetched bytes may hold an earlier
		 * record: stop the merge; the next poll reads further */
		if (!best || best->cur.commit_ts >= resolved || blocked)
			break;
		best->pos = best->it.pos;
		best->seq = best->it.seq;
		if (best->cur.commit_ts >= t->cursor) {
			n++;
			if (fn && fn((uint32_t)(best - t->r), &best->cur, arg)) {
				t->cursor = best->cur.commit_ts;
				if (cursor)
					*cursor = t->cursor;
				return n;
			}
		}
		advance(best);
	}
	/* everything below `resolved` that was fetched has been delivered; if
	 * no ring was cut short, that is everything below it */
	int cut = 0;
	for (unsigned i = 0; i < t->n; i++) {
		struct tring *r = &t->r[i];
		cut |= r->blocked;
		/* adapt the window: a ring that ran out of fetched bytes reads
		 * twice as much next time, one that used little reads less
		 * (a busy 2-core machine pays for every idle byte READ) */
		uint64_t used = r->pos - r->win_lo;
		if (r->blocked && r->pos >= r->win_lo)
			r->win = DXL_MIN(r->win * 2, (uint64_t)t->cfg.window);
		else if (used < r->win / 4)
			r->win = DXL_MAX(r->win / 2, DXL_MIN((uint64_t)TAIL_MIN_WINDOW,
							      (uint64_t)t->cfg.window));
	}
	uint64_t bound = resolved;
	if (bound == UINT64_MAX) {
		/* no live writer: each ring ends at its own watermark, all
		 * delivered; what lies above them is unconfirmed for good */
		bound = 0;
		for (unsigned i = 0; i < t->n; i++)
			bound = DXL_MAX(bound, t->r[i].cap);
	}
	if (!cut && bound > t->cursor)
		t->cursor = bound;
	t->caught_up = !cut;
	if (cursor)
		*cursor = t->cursor;
	return n;
}
