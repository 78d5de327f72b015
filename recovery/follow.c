/* follow.c -- a local ring kept a copy of a member's by reading only what changed (include/dxl/recovery.h) */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/recovery.h"
#include "recovery/recovery_internal.h"

/*
 * Who may call: the thread that owns qp's ctx, nothing else in flight on
 * it; nobody else writes the local ring meanwhile (it is not a member).
 *
 * dxl_xfer_pull (log/pull.c) copies a whole ring every time: right for
 * a ring that has nothing in common with the source, far too much for one
 * that is a copy of it from a moment ago (a node catching up pulls every
 * 200 ms; the last pull before it joins holds up the shard's writers).
 * Here, when the local ring is a copy of the same log (its head at or
 * before the source's), only the part that may differ is read:
 *
 *   - below min(local watermark, source watermark) every record was
 *     acknowledged on every member, so it is the same everywhere and is
 *     never cut by a repair: the local copy of it is kept;
 *   - from there on (records in flight, or cut and appended again by a
 *     writer's repair, or not copied yet) the source's bytes are READ, in
 *     chunks, until its records end inside what was read, and written
 *     over the local ones (the line after the source's end included, so a
 *     longer stale local suffix cannot extend the scan).
 *
 * The same three steps as the full pull make the copy consistent:
 * control block, buffer, control block; the image's head is the second
 * READ's (the writer only writes positions below head + size, so from that
 * head on the copy is intact), watermark and owner from the first; buffer
 * written first, control block last. When the conditions do not hold (the
 * local head is past the source's, or the ring sizes differ), it is the
 * full pull.
 */

#define FOLLOW_WRID 0x464f4c4c00000000ull /* "FOLL" */
#define CHUNK0 (8u << 10)  /* the first READ of the part that may differ */
/* of a control block: head slots, owner word, watermark (the rest is 0) */
#define CTL_USED 256u
_Static_assert(DXL_RING_WMARK_OFF + DXL_RING_WMARK_SIZE <= CTL_USED, "control block");
#define CHUNKMAX (1u << 20)
#define PAGE 4096u

static int read_at(struct dxl_qp *qp, const struct dxl_log_target *src, uint64_t off,
		   uint8_t *dst, uint64_t len, uint32_t lkey, uint64_t *nread)
{
	return dxl_rcv_read_remote(qp, src, off, dst, len, lkey, FOLLOW_WRID, nread);
}

/* READ ring positions [pos, pos+len) (len <= size) of src into buf at
 * their ring offsets (two pieces when they wrap) */
static int read_ring(struct dxl_qp *qp, const struct dxl_log_target *src, uint64_t size,
		     uint64_t pos, uint64_t len, uint8_t *buf, uint32_t lkey, uint64_t *nread)
{
	uint64_t o = pos % size, first = DXL_MIN(len, size - o);
	int ret = read_at(qp, src, src->buf_off + o, buf + o, first, lkey, nread);
	if (!ret && first < len)
		ret = read_at(qp, src, src->buf_off, buf, len - first, lkey, nread);
	return ret;
}

/* write local [pos, pos+len) from buf where it differs (pages), persisted */
static uint64_t sync_range(struct dxl_region *r, uint8_t *dst, const uint8_t *src, uint64_t size,
			   uint64_t pos, uint64_t len)
{
	uint64_t changed = 0;
	while (len) {
		uint64_t o = pos % size, n = DXL_MIN(len, size - o);
		changed += dxl_rcv_sync_bytes(r, dst + o, src + o, n);
		pos += n;
		len -= n;
	}
	return changed;
}

int dxl_xfer_follow(struct dxl_logstore *ls, uint32_t ring, struct dxl_qp *qp,
		    const struct dxl_log_target *src, struct dxl_mr *bounce,
		    struct dxl_follow_stats *st)
{
	struct dxl_follow_stats tmp;
	if (!st)
		st = &tmp;
	memset(st, 0, sizeof(*st));
	if (!ls || !qp || !src)
		return dxl_err_set(DXL_E_INVAL, "follow: NULL argument");
	if (ring >= dxl_logstore_nrings(ls))
		return dxl_err_set(DXL_E_INVAL, "follow: ring %u of %u", ring, dxl_logstore_nrings(ls));
	const uint64_t size = dxl_logstore_ring_size(ls);
	if (src->ring_size != size || src->ctl_off + DXL_RING_CTL_SIZE > src->data.len ||
	    src->buf_off + size > src->data.len)
		return dxl_err_set(DXL_E_INVAL, "follow: ring %u at %s: sizes disagree", src->ring,
				   src->addr);
	const uint64_t need = dxl_xfer_pull_bounce_bytes(size);
	uint8_t *own_mem = NULL;
	struct dxl_mr *own_mr = NULL;
	int ret;
	if (!bounce) {
		if (posix_memalign((void **)&own_mem, PAGE, need))
			return dxl_err_set(DXL_E_NOMEM, "follow: %" PRIu64 " bytes", need);
		ret = dxl_mr_reg(dxl_ctx_fabric(dxl_qp_ctx(qp)), own_mem, need, DXL_MR_LOCAL_WRITE,
				 &own_mr);
		if (ret) {
			free(own_mem);
			return ret;
		}
		bounce = own_mr;
	} else if (dxl_mr_len(bounce) < need) {
		return dxl_err_set(DXL_E_INVAL, "follow: bounce buffer of %zu bytes, needs %" PRIu64,
				   dxl_mr_len(bounce), need);
	}
	uint8_t *c1 = dxl_mr_addr(bounce), *buf = c1 + DXL_RING_CTL_SIZE, *c2 = buf + size;
	const uint32_t lkey = dxl_mr_lkey(bounce);
	struct dxl_region *r = dxl_logstore_region(ls);
	uint8_t *lbuf = (uint8_t *)dxl_region_data(r) + dxl_logstore_buf_off(ls, ring);
	uint8_t *lctl = (uint8_t *)dxl_region_data(r) + dxl_logstore_ctl_off(ls, ring);
	struct dxl_ring_head h1, h2, hl;
	/* 1. the source's control block */
	memset(c1, 0, DXL_RING_CTL_SIZE);
	if ((ret = read_at(qp, src, src->ctl_off, c1, CTL_USED, lkey, &st->bytes_read)))
		goto out;
	if ((ret = dxl_ring_head_decode(c1, &h1)) || (ret = dxl_logstore_head(ls, ring, &hl))) {
		dxl_err_prefix("follow: ring %u at %s", src->ring, src->addr);
		goto out;
	}
	if (hl.pos > h1.pos) {
		/* the local ring is ahead of the source's head: not a copy of
		 * it that can be completed; copy all of it */
		st->full = true;
		struct dxl_pull_stats ps;
		ret = dxl_xfer_pull_buf(ls, ring, qp, src, bounce, &ps);
		st->bytes_read += ps.bytes_read;
		st->changed = ps.changed;
		st->head = ps.head;
		st->end_pos = ps.end_pos;
		st->end_seq = ps.end_seq;
		goto out;
	}
	/* 2. what the local copy keeps: its records from the source's head
	 *    on that are below both watermarks */
	uint64_t wm = DXL_MIN(dxl_ring_wmark_decode(c1 + DXL_RING_WMARK_OFF),
			      dxl_logstore_watermark(ls, ring));
	uint64_t from = h1.pos, from_seq = h1.seq;
	{
		struct dxl_ring_iter it;
		struct dxl_rec rec;
		uint64_t at;
		dxl_ring_iter_init_buf(&it, lbuf, size, hl.pos, hl.seq);
		while (dxl_ring_iter_next(&it, &rec, &at) == 1 && rec.commit_ts < wm) {
			if (it.pos > h1.pos) {
				from = it.pos;
				from_seq = it.seq;
			}
		}
		/* (kept records are contiguous from the local head: when they
		 * do not reach past h1, everything is read from h1) */
	}
	/* the part that may differ, READ from the source into buf at its ring
	 * offsets (the kept part stays where it is, in the local ring) */
	uint64_t read_to = from, chunk = CHUNK0;
	struct dxl_ring_iter it;
	struct dxl_rec rec;
	uint64_t at;
	for (;;) {
		uint64_t limit = h1.pos + size; /* the writer never passes it */
		uint64_t n = DXL_MIN(chunk, limit - read_to);
		chunk = DXL_MIN(2 * chunk, (uint64_t)CHUNKMAX);
		if (n && (ret = read_ring(qp, src, size, read_to, n, buf, lkey, &st->bytes_read)))
			goto out;
		read_to += n;
		/* nothing past what was read may look like a record (the
		 * bounce buffer may hold an older copy) */
		if (read_to < limit) {
			uint64_t o = read_to % size;
			memset(buf + o, 0, DXL_MIN((uint64_t)DXL_REC_MIN_SIZE, size - o));
		}
		dxl_ring_iter_init_buf(&it, buf, size, from, from_seq);
		while (it.pos < read_to && dxl_ring_iter_next(&it, &rec, &at) == 1)
			;
		/* the records end inside what was read: at it.pos there is no
		 * header, or a whole record that is not valid (torn, or of an
		 * older lap); the line there is copied too (the source's
		 * terminator). Or the ring is read. */
		if (read_to >= limit)
			break;
		uint64_t p = it.pos, o = p % size;
		if (p + DXL_RING_HEAD_SLOT_SIZE <= read_to) {
			uint32_t sz = dxl_rec_peek_size(buf + o, size - o);
			if (!sz || p + sz <= read_to)
				break;
		}
	}
	/* 3. the source's control block again: its head */
	if ((ret = read_at(qp, src, src->ctl_off, c2, CTL_USED, lkey, &st->bytes_read)))
		goto out;
	if ((ret = dxl_ring_head_decode(c2, &h2))) {
		dxl_err_prefix("follow: ring %u at %s", src->ring, src->addr);
		goto out;
	}
	memcpy(c1, c2, 2 * DXL_RING_HEAD_SLOT_SIZE);
	st->head = h2;
	/* where the copy's records end: from the head if it passed what was
	 * kept, else from the first byte read (the kept records are valid) */
	if (h2.pos > from)
		dxl_ring_iter_init_buf(&it, buf, size, h2.pos, h2.seq);
	else
		dxl_ring_iter_init_buf(&it, buf, size, from, from_seq);
	while (it.pos < read_to && dxl_ring_iter_next(&it, &rec, &at) == 1)
		;
	st->end_pos = it.pos;
	st->end_seq = it.seq;
	/* 4. the buffer where it was read, then the control block */
	st->changed = sync_range(r, lbuf, buf, size, from, read_to - from);
	st->changed += sync_range(r, lctl, c1, DXL_RING_CTL_SIZE, 0, CTL_USED);
	ret = 0;
out:
	if (own_mr) {
		dxl_mr_dereg(&own_mr);
		free(own_mem);
	}
	return ret;
}
