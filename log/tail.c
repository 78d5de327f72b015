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
 * the position of the next record to deliver. A poll chains, on its one QP
 * and with one doorbell, three passes of READs (the replica executes them
 * in order):
 *   1. every ring's control block, first 256 bytes (head slots, owner word,
 *      watermark);
 *   2. every ring's window: up to `window` bytes of the buffer from the
 *      next record to deliver (two READs when it wraps past the ring's
 *      end; never a whole lap);
 *   3. every ring's control block again.
 * The rules, each with a test (test_tail) that fails when it is broken:
 *  - The watermarks come from pass 1, read before the windows: the writer
 *    wrote each record before the watermark that covers it (and flushed
 *    both), so every record below a watermark read is in the window read
 *    after it.
 *  - Only records at or above the pass-3 head are delivered: while the
 *    windows were read, the replica may have moved the head (retention) and
 *    the writer reused the space below it for its next lap; from the later
 *    head on, the bytes read are intact (the writer never writes a
 *    position the head has not passed by a lap). A head that passed a
 *    record not delivered yet, at or above the cursor, is DXL_E_STALE.
 *  - A ring holds the resolved timestamp at its pass-1 watermark when its
 *    owner word is claimed in pass 1, or the owner word or the watermark
 *    differ between pass 1 and pass 3, or it is in live_mask. Claimed: its
 *    writer is alive, or crashed (the next holder of its slot repairs the
 *    ring and confirms records above that watermark with their own
 *    timestamps), or a new holder just claimed it. The same unclaimed word
 *    and watermark in both passes: the ring was never used, or its last
 *    holder closed it (dxl_appender_close: every record acknowledged,
 *    below its final watermark, which was on every replica before the
 *    word was cleared), so nothing in it can change below that watermark;
 *    its records below it are delivered and it holds nobody back. A new
 *    holder claims the ring (the word's holder 0 -> 1 + writer id, its
 *    generation + 1) and only then reads every ring's watermark and starts
 *    above the largest (dxl_appender_new). Pass 3 reading the word pass 1
 *    read means the claim came after the pass-3 READ, so after every
 *    pass-1 READ: the new holder's records are above every watermark this
 *    poll used. A claim, appends and a close all between the two READs
 *    leave the word unclaimed but with the next generation (and a higher
 *    watermark): the ring holds.
 *  - A skip record is consumed only with the data record after it: until
 *    that record is delivered, repair may cut the skip and the next record
 *    land where it was.
 *  - A ring cut short by its window (a record bigger than it) keeps what
 *    its next window must cover until that record is delivered, whatever
 *    the other rings do.
 *  - A control-block READ with no whole head (it raced two head updates)
 *    is read again, with the whole poll (TAIL_HEAD_ATTEMPTS in a row:
 *    DXL_E_CORRUPT).
 *  - Nothing beyond this host's clock is resolved: a writer whose clock
 *    jumped forward does not carry the cursor with it (a new holder starts
 *    at most DXL_HLC_MAX_SKEW_MS ahead of its own clock, at least what a
 *    tailer whose clock is that far ahead resolved: see dxl_appender_new).
 */

#define CTL_READ 256
#define TAIL_MIN_WINDOW 4096
#define WR_TAIL 0x5441494c00000000ull /* "TAIL" */
#define WR_PER_RING 4                  /* control block, window (<= 2), again */
#define TAIL_HEAD_ATTEMPTS 8           /* READs of a control block with no whole head */
#define TAIL_SOON_MS 1000              /* resolved clipped by less: not caught up */

struct tring {
	struct dxl_log_target t;
	uint64_t pos, seq;     /* next record to deliver (the skips before it
				  included: they go with it) */
	uint64_t win_lo, win_hi; /* positions whose bytes this poll fetched */
	uint64_t need;         /* bytes the next window must cover (a big
				  record, or skips before one) */
	uint64_t win;          /* this ring's window: adapts between
				  TAIL_MIN_WINDOW and cfg.window */
	uint8_t *ctl;          /* CTL_READ bytes, in the MR: pass 1 */
	uint8_t *ctl2;         /* CTL_READ bytes, in the MR: pass 3 */
	uint8_t *mirror;       /* ring_size bytes, in the MR */
	struct dxl_ring_iter it;
	struct dxl_rec cur;    /* the ring's next candidate */
	uint64_t cur_pos;
	int have;              /* cur is valid */
	int blocked;           /* ran out of fetched bytes: may have more */
	int holds;             /* holds the resolved timestamp */
	uint64_t cap;          /* deliver only below this (a closed ring's
				  watermark); UINT64_MAX for holding rings */
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
	int delivered; /* a record was delivered since */
	int caught_up; /* the last poll delivered everything below resolved */
	unsigned holding; /* rings that held resolved at the last poll */
	uint64_t reclaimed_ts; /* largest head last_ts seen by the last poll */
	struct dxl_wr *wrs; /* a poll's chain: WR_PER_RING READs per ring */
	uint8_t *wstage;    /* per WR: its pass (enum dxl_tail_stage) */
	uint32_t *wring;    /* per WR: its ring */
	struct dxl_ring_head *h1, *h3; /* a poll's heads: first and last READ */
};

static dxl_tail_hook_fn g_hook;
static void *g_hook_arg;

void dxl_tail_set_test_hook(dxl_tail_hook_fn fn, void *arg)
{
	g_hook = fn;
	g_hook_arg = arg;
}

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
	t->mem_len = DXL_ALIGN_UP((uint64_t)n * (2 * CTL_READ + rs), 4096ull);
	t->r = calloc(n, sizeof(*t->r));
	t->wrs = calloc(WR_PER_RING * n, sizeof(*t->wrs));
	t->wstage = calloc(WR_PER_RING * n, sizeof(*t->wstage));
	t->wring = calloc(WR_PER_RING * n, sizeof(*t->wring));
	t->h1 = calloc(n, sizeof(*t->h1));
	t->h3 = calloc(n, sizeof(*t->h3));
	int ret;
	if (!t->r || !t->wrs || !t->wstage || !t->wring || !t->h1 || !t->h3 ||
	    posix_memalign((void **)&t->mem, 4096, t->mem_len)) {
		ret = dxl_err_set(DXL_E_NOMEM, "tailer: out of memory (%zu bytes)",
				  t->mem_len);
		goto err;
	}
	memset(t->mem, 0, t->mem_len);
	for (unsigned i = 0; i < n; i++) {
		t->r[i].t = targets[i];
		t->r[i].ctl = t->mem + (uint64_t)i * (2 * CTL_READ + rs);
		t->r[i].ctl2 = t->r[i].ctl + CTL_READ;
		t->r[i].mirror = t->r[i].ctl2 + CTL_READ;
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
	free(t->wstage);
	free(t->wring);
	free(t->h1);
	free(t->h3);
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
	free(t->wstage);
	free(t->wring);
	free(t->h1);
	free(t->h3);
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

unsigned dxl_tailer_holding(const struct dxl_tailer *t)
{
	return t->holding;
}

void dxl_tailer_set_live(struct dxl_tailer *t, uint64_t mask)
{
	t->cfg.live_mask = mask;
	t->cfg.live_given = 1;
}

static void add_read(struct dxl_tailer *t, unsigned *k, enum dxl_tail_stage stage,
		     uint32_t ring, void *local, uint64_t len, uint64_t remote_addr)
{
	t->wrs[*k] = (struct dxl_wr){.wr_id = WR_TAIL, .op = DXL_WR_READ,
				     .local = local, .len = (uint32_t)len,
				     .lkey = dxl_mr_lkey(t->mr),
				     .remote_addr = remote_addr,
				     .rkey = t->r[ring].t.data.rkey};
	t->wstage[*k] = (uint8_t)stage;
	t->wring[*k] = ring;
	(*k)++;
}

/* fetch -- READ every control block; with `windows`, then every ring's
 * window and every control block again: one chain (see the top) */
static int fetch(struct dxl_tailer *t, int windows)
{
	const uint64_t rs = t->r[0].t.ring_size;
	memset(t->wrs, 0, WR_PER_RING * t->n * sizeof(*t->wrs));
	unsigned k = 0;
	for (unsigned i = 0; i < t->n; i++)
		add_read(t, &k, DXL_TAIL_STAGE_CTL, i, t->r[i].ctl, CTL_READ,
			 t->r[i].t.data.addr + t->r[i].t.ctl_off);
	for (unsigned i = 0; i < t->n && windows; i++) {
		struct tring *r = &t->r[i];
		if (!r->win)
			r->win = DXL_MIN((uint64_t)TAIL_MIN_WINDOW, (uint64_t)t->cfg.window);
		uint64_t off = r->pos % rs;
		uint64_t len = DXL_MIN(DXL_MAX(r->win, r->need), rs);
		uint64_t first = DXL_MIN(len, rs - off);
		r->win_lo = r->pos;
		r->win_hi = r->pos + len;
		add_read(t, &k, DXL_TAIL_STAGE_WINDOW, i, r->mirror + off, first,
			 r->t.data.addr + r->t.buf_off + off);
		if (len > first) /* on over the ring's end: the next lap's start */
			add_read(t, &k, DXL_TAIL_STAGE_WINDOW, i, r->mirror, len - first,
				 r->t.data.addr + r->t.buf_off);
	}
	for (unsigned i = 0; i < t->n && windows; i++)
		add_read(t, &k, DXL_TAIL_STAGE_CTL_AGAIN, i, t->r[i].ctl2, CTL_READ,
			 t->r[i].t.data.addr + t->r[i].t.ctl_off);
	/* long chains go in pieces no longer than what a queue can hold (one
	 * READ at a time, and the hook after each, under a test hook) */
	int ret = 0;
	unsigned at = 0, step = g_hook ? 1 : 64;
	while (at < k && !ret) {
		unsigned end = DXL_MIN(k, at + step);
		for (unsigned i = at; i + 1 < end; i++)
			t->wrs[i].next = &t->wrs[i + 1];
		t->wrs[end - 1].next = NULL;
		t->wrs[end - 1].flags = DXL_WR_SIGNALED;
		ret = dxl_log_post_wait(t->qp, &t->wrs[at], WR_TAIL);
		if (ret)
			dxl_err_prefix("tailer: reading the log at %s", t->r[0].t.addr);
		else if (g_hook)
			g_hook((enum dxl_tail_stage)t->wstage[at], t->wring[at], g_hook_arg);
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
 * The next candidate of ring r: a record whose bytes this poll fetched.
 * Skip records passed on the way are not consumed here: r->pos stays
 * before them until the record after them is delivered (an unconfirmed skip
 * is like any unconfirmed record: repair may cut it, and the next record
 * then lands where it was). If the next record was not (entirely) fetched,
 * the ring is "blocked": it may hold more than this poll saw, and the merge
 * must not go past it.
 */
static void advance(struct tring *r)
{
	const uint64_t rs = r->t.ring_size;
	r->have = 0;
	r->blocked = 0;
	int got = dxl_ring_iter_next(&r->it, &r->cur, &r->cur_pos);
	if (got && r->cur_pos >= r->win_lo &&
	    r->cur_pos + r->cur.total_len <= r->win_hi) {
		r->have = 1;
		return;
	}
	/* the end of the valid content, or only of what was fetched? */
	uint64_t stop = got ? r->cur_pos : r->it.pos; /* after the skips */
	uint64_t claim = claimed_len(r, stop);
	if (stop < r->win_lo || stop + DXL_REC_HDR_SIZE > r->win_hi ||
	    (claim && stop + claim > r->win_hi)) {
		r->blocked = 1;
		/* read from r->pos through that record next time: a record
		 * (or the skips before one) bigger than the window. It stays
		 * until a record of the ring is consumed (even when a poll
		 * ends with another ring cut short: rings cut short in turn
		 * must not forget it, or none of them is ever delivered; and
		 * a ring that ends with stale bytes claiming a big record
		 * keeps its window wide rather than being cut every other
		 * poll) */
		uint64_t end = stop + (claim && claim <= rs ? claim : DXL_REC_HDR_SIZE);
		r->need = end > r->pos ? DXL_MIN(end - r->pos, rs) : 0;
	}
}

/*
 * fetch_heads -- fetch (with the windows or not) until every control block
 * READ holds a valid head: a READ that raced two head updates of the
 * replica's CPU (one per slot) may find neither slot whole; the next READ
 * finds the later one. DXL_E_CORRUPT only when that goes on.
 */
static int fetch_heads(struct dxl_tailer *t, int windows, struct dxl_ring_head *h1,
		       struct dxl_ring_head *h3)
{
	for (int attempt = 1;; attempt++) {
		int ret = fetch(t, windows);
		if (ret)
			return ret;
		unsigned bad = t->n;
		for (unsigned i = 0; i < t->n && bad == t->n; i++)
			if (dxl_ring_head_decode(t->r[i].ctl, &h1[i]) ||
			    (windows && dxl_ring_head_decode(t->r[i].ctl2, &h3[i])))
				bad = i;
		if (bad == t->n)
			return 0;
		if (attempt >= TAIL_HEAD_ATTEMPTS)
			return dxl_err_set(DXL_E_CORRUPT,
					   "tailer: ring %u at %s has no valid head (%d READs in a row)",
					   bad, t->r[bad].t.addr, attempt);
		dxl_err_clear();
	}
}

int dxl_tailer_poll(struct dxl_tailer *t, dxl_tail_fn fn, void *arg,
		    uint64_t *cursor)
{
	t->caught_up = 0;
	int ret;
	struct dxl_ring_head *h1 = t->h1, *h3 = t->h3;
	if (!t->started) {
		/* where to start: the heads, checked against the cursor */
		if ((ret = fetch_heads(t, 0, h1, h3)))
			return ret;
		t->reclaimed_ts = 0;
		for (unsigned i = 0; i < t->n; i++) {
			struct tring *r = &t->r[i];
			const struct dxl_ring_head *h = &h1[i];
			t->reclaimed_ts = DXL_MAX(t->reclaimed_ts, h->last_ts);
			/* records below the cursor that were reclaimed are
			 * fine; records at or above it must still be there.
			 * Cursor 0 means "the earliest record retained" */
			if (t->cursor > 0 && h->last_ts >= t->cursor)
				return dxl_err_set(DXL_E_STALE,
						   "tailer: cursor %llu is older than what ring %u retains (its head passed timestamp %llu)",
						   (unsigned long long)t->cursor, i,
						   (unsigned long long)h->last_ts);
			r->pos = h->pos;
			r->seq = h->seq;
		}
		t->started = 1;
	}
	if ((ret = fetch_heads(t, 1, h1, h3)))
		return ret;
	/* heads, owners, watermarks, and the resolved timestamp */
	uint64_t resolved = UINT64_MAX, caps = 0;
	t->reclaimed_ts = 0;
	t->holding = 0;
	for (unsigned i = 0; i < t->n; i++) {
		struct tring *r = &t->r[i];
		struct dxl_ring_head h = h3[i];
		if (h1[i].gen > h.gen) /* heads only move on: cannot happen */
			h = h1[i];
		uint64_t wm = dxl_ring_wmark_decode(r->ctl + DXL_RING_WMARK_OFF);
		t->reclaimed_ts = DXL_MAX(t->reclaimed_ts, h.last_ts);
		/* the later head: below it, the window may hold the writer's
		 * next lap */
		if (h.pos > r->pos) {
			/* (cursor 0, nothing delivered yet: "the earliest
			 * record retained" is still to be found) */
			if ((t->cursor > 0 || t->delivered) && h.last_ts >= t->cursor)
				return dxl_err_set(DXL_E_STALE,
						   "tailer: ring %u was reclaimed past the tailer (head %llu, past commit timestamp %llu; tailer at %llu, cursor %llu): the cursor is older than the retention",
						   i, (unsigned long long)h.pos,
						   (unsigned long long)h.last_ts,
						   (unsigned long long)r->pos,
						   (unsigned long long)t->cursor);
			/* it passed only records below the cursor */
			r->pos = h.pos;
			r->seq = h.seq;
		}
		/* closed (or never used) only if the owner word was unclaimed
		 * and the same in both READs, and so was the watermark: a claim
		 * in between, even one followed by appends and a close (the
		 * word unclaimed again, but with the next generation), may have
		 * started below the largest watermark this poll read */
		uint64_t o1 = dxl_get_le64(r->ctl + DXL_RING_OWNER_OFF);
		uint64_t o3 = dxl_get_le64(r->ctl2 + DXL_RING_OWNER_OFF);
		uint64_t wm3 = dxl_ring_wmark_decode(r->ctl2 + DXL_RING_WMARK_OFF);
		int owned = DXL_RING_OWNER_HOLDER(o1) != 0 || o1 != o3 || wm != wm3;
		int live = t->cfg.live_given && i < 64 && ((t->cfg.live_mask >> i) & 1);
		r->holds = owned || live;
		if (r->holds) {
			resolved = DXL_MIN(resolved, wm);
			t->holding++;
			r->cap = UINT64_MAX;
		} else {
			/* closed (or never used): below its watermark it is final */
			r->cap = wm;
			caps = DXL_MAX(caps, wm);
		}
	}
	if (!t->holding)
		resolved = caps; /* every ring closed: each up to its own watermark */
	uint64_t now = t->cfg.wall_ms ? t->cfg.wall_ms() : dxl_wall_ms();
	uint64_t limit = DXL_HLC_MAKE(now, 0);
	/* a writer's clock ahead of ours: by a little (hosts' clocks differ
	 * by milliseconds, and a timestamp of this millisecond is above
	 * `limit`), and its records come out at the next polls -- not caught
	 * up; by more than TAIL_SOON_MS (it jumped forward), and they are for
	 * later */
	int soon = 0;
	if (resolved > limit) {
		soon = resolved <= DXL_HLC_MAKE(now + TAIL_SOON_MS, 0);
		resolved = limit;
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
				r->have = 0; /* beyond what its closed ring confirmed */
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
		best->need = 0; /* what it was for is consumed */
		if (best->cur.commit_ts >= t->cursor) {
			n++;
			t->delivered = 1;
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
	if (!cut && resolved > t->cursor)
		t->cursor = resolved;
	t->caught_up = !cut && !soon;
	if (cursor)
		*cursor = t->cursor;
	return n;
}
