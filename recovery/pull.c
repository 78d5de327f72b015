/* pull.c -- a local ring made an exact copy of a member's, with one-sided READs: catch-up's whole-ring copy (include/dxl/recovery.h) */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/recovery.h"
#include "recovery/recovery_internal.h"

/*
 * Who may call: the thread that owns qp's ctx, with nothing else in flight
 * on that ctx; nobody else writes the local ring meanwhile (recovery.h).
 * (Moved here from log/: the log keeps the rings, recovery copies them.)
 *
 * Why the copy is consistent (the source's writer keeps appending, its
 * replica keeps advancing the head): the writer writes position q only
 * once q + len <= head + ring size for a head it has read, and the head
 * only grows. While the buffer is READ the head is at most h2, the head of
 * the second control-block READ, so the writer can overwrite only bytes
 * of positions below h2 (and write fresh records at and above its tail).
 * From h2 on, the copy therefore holds the source's records as they were,
 * then possibly records appended during the copy, whole or torn; a torn
 * one fails its checksum or trailer and ends the scan. The watermark of
 * the first READ promises records that were persistent before the buffer
 * was READ: they are in the copy (or below the head).
 */

#define PULL_WRID 0x50554c4c00000000ull /* "PULL" */
#define CHUNK (1u << 20)                /* largest single READ */
#define PAGE 4096u                      /* compare and write granularity */

static dxl_rcv_pull_hook_fn test_hook;
static void *test_hook_arg;

void dxl_rcv_pull_set_test_hook(dxl_rcv_pull_hook_fn fn, void *arg)
{
	test_hook = fn;
	test_hook_arg = arg;
}

static dxl_rcv_pull_crash_fn crash_hook;
static void *crash_hook_arg;

void dxl_rcv_pull_set_crash_hook(dxl_rcv_pull_crash_fn fn, void *arg)
{
	crash_hook = fn;
	crash_hook_arg = arg;
}

uint64_t dxl_xfer_pull_bounce_bytes(uint64_t ring_size)
{
	return 2ull * DXL_RING_CTL_SIZE + ring_size;
}

/* READ [off, off+len) of src's data area into dst, in chunks, waiting */
int dxl_rcv_read_remote(struct dxl_qp *qp, const struct dxl_log_target *src,
			uint64_t off, uint8_t *dst, uint64_t len, uint32_t lkey,
			uint64_t wr_id, uint64_t *nread)
{
	for (uint64_t done = 0; done < len;) {
		uint32_t n = (uint32_t)DXL_MIN(len - done, (uint64_t)CHUNK);
		struct dxl_wr wr = {.wr_id = wr_id, .op = DXL_WR_READ,
				    .flags = DXL_WR_SIGNALED, .local = dst + done,
				    .len = n, .lkey = lkey,
				    .remote_addr = src->data.addr + off + done,
				    .rkey = src->data.rkey};
		int ret = dxl_rcv_post_wait(qp, &wr, wr_id);
		if (ret)
			return ret;
		done += n;
		*nread += n;
	}
	return 0;
}

uint64_t dxl_rcv_sync_bytes(struct dxl_region *r, uint8_t *dst,
			    const uint8_t *src, uint64_t len)
{
	uint64_t changed = 0, run = 0, run_len = 0;
	for (uint64_t off = 0; off < len; off += PAGE) {
		uint64_t n = DXL_MIN((uint64_t)PAGE, len - off);
		if (memcmp(dst + off, src + off, n) == 0) {
			if (run_len)
				dxl_region_memcpy_persist(r, dst + run, src + run,
							  run_len);
			run_len = 0;
			continue;
		}
		for (uint64_t i = off; i < off + n; i++)
			changed += dst[i] != src[i];
		if (!run_len)
			run = off;
		run_len += n;
	}
	if (run_len)
		dxl_region_memcpy_persist(r, dst + run, src + run, run_len);
	return changed;
}

int dxl_xfer_pull(struct dxl_logstore *ls, uint32_t ring, struct dxl_qp *qp,
		      const struct dxl_log_target *src, struct dxl_pull_stats *st)
{
	return dxl_xfer_pull_buf(ls, ring, qp, src, NULL, st);
}

int dxl_xfer_pull_buf(struct dxl_logstore *ls, uint32_t ring,
			  struct dxl_qp *qp, const struct dxl_log_target *src,
			  struct dxl_mr *bounce, struct dxl_pull_stats *st)
{
	struct dxl_pull_stats tmp;
	if (!st)
		st = &tmp;
	memset(st, 0, sizeof(*st));
	if (!ls || !qp || !src)
		return dxl_err_set(DXL_E_INVAL, "pull: NULL argument");
	if (ring >= dxl_logstore_nrings(ls))
		return dxl_err_set(DXL_E_INVAL, "pull: ring %u of %u", ring,
				   dxl_logstore_nrings(ls));
	const uint64_t size = dxl_logstore_ring_size(ls);
	if (src->ring_size != size)
		return dxl_err_set(DXL_E_INVAL,
				   "pull: ring %u at %s has %llu bytes, the local ring %llu",
				   src->ring, src->addr,
				   (unsigned long long)src->ring_size,
				   (unsigned long long)size);
	if (src->ctl_off + DXL_RING_CTL_SIZE > src->data.len ||
	    src->buf_off + size > src->data.len)
		return dxl_err_set(DXL_E_INVAL,
				   "pull: ring %u at %s lies outside its data area (%llu bytes)",
				   src->ring, src->addr,
				   (unsigned long long)src->data.len);
	const uint64_t need = dxl_xfer_pull_bounce_bytes(size);
	uint8_t *own_mem = NULL;
	struct dxl_mr *own_mr = NULL;
	int ret;
	if (!bounce) {
		if (posix_memalign((void **)&own_mem, PAGE, need))
			return dxl_err_set(DXL_E_NOMEM, "pull: out of memory (%llu bytes)",
					   (unsigned long long)need);
		ret = dxl_mr_reg(dxl_ctx_fabric(dxl_qp_ctx(qp)), own_mem, need,
				 DXL_MR_LOCAL_WRITE, &own_mr);
		if (ret) {
			free(own_mem);
			return ret;
		}
		bounce = own_mr;
	} else if (dxl_mr_len(bounce) < need) {
		return dxl_err_set(DXL_E_INVAL,
				   "pull: bounce buffer of %zu bytes, a ring of %llu needs %llu",
				   dxl_mr_len(bounce), (unsigned long long)size,
				   (unsigned long long)need);
	}
	uint8_t *c1 = dxl_mr_addr(bounce);
	uint8_t *buf = c1 + DXL_RING_CTL_SIZE;
	uint8_t *c2 = buf + size;
	const uint32_t lkey = dxl_mr_lkey(bounce);
	struct dxl_ring_head h1, h2;

	/* control block, buffer, control block; again while the head moves */
	for (;;) {
		st->attempts++;
		if ((ret = dxl_rcv_read_remote(qp, src, src->ctl_off, c1, DXL_RING_CTL_SIZE,
					       lkey, PULL_WRID, &st->bytes_read)) ||
		    (ret = dxl_rcv_read_remote(qp, src, src->buf_off, buf, size, lkey,
					       PULL_WRID, &st->bytes_read)))
			goto out;
		if (test_hook)
			test_hook(st->attempts, test_hook_arg);
		if ((ret = dxl_rcv_read_remote(qp, src, src->ctl_off, c2, DXL_RING_CTL_SIZE,
					       lkey, PULL_WRID, &st->bytes_read)))
			goto out;
		/* the replica's CPU rewrites one slot at a time: the other stays
		 * valid, so no valid slot at all is corruption, not a race */
		if ((ret = dxl_ring_head_decode(c2, &h2))) {
			dxl_err_prefix("pull: ring %u at %s", src->ring, src->addr);
			goto out;
		}
		int moved = dxl_ring_head_decode(c1, &h1) != 0 || h1.pos != h2.pos ||
			    h1.seq != h2.seq;
		dxl_err_clear();
		if (!moved || st->attempts >= DXL_PULL_MAX_ATTEMPTS)
			break;
	}
	/* the image: the first control block (watermark, owner) with the
	 * second's head slots (equal unless the head kept moving) */
	memcpy(c1, c2, 2 * DXL_RING_HEAD_SLOT_SIZE);
	st->head = h2;
	st->watermark = dxl_ring_wmark_decode(c1 + DXL_RING_WMARK_OFF);
	struct dxl_ring_iter it;
	dxl_ring_iter_init_buf(&it, buf, size, h2.pos, h2.seq);
	struct dxl_rec rec;
	while (dxl_ring_iter_next(&it, &rec, NULL))
		st->records++;
	st->end_pos = it.pos;
	st->end_seq = it.seq;

	/* the buffer first, the control block (head, watermark) last: until
	 * the copy's records are durable, the old control block promises only
	 * what the old ring held (a crash in between: test_pull) */
	struct dxl_region *r = dxl_logstore_region(ls);
	uint8_t *data = dxl_region_data(r);
	/* the persist request and confirmation lines are this replica's own
	 * (its persister's state and mark, its writers' request ids): kept */
	memcpy(c1 + DXL_RING_PREQ_OFF,
	       data + dxl_logstore_ctl_off(ls, ring) + DXL_RING_PREQ_OFF,
	       DXL_RING_PDONE_OFF + DXL_RING_PLINE_SIZE - DXL_RING_PREQ_OFF);
	st->changed = dxl_rcv_sync_bytes(r, data + dxl_logstore_buf_off(ls, ring),
				       buf, size);
	if (crash_hook && crash_hook(crash_hook_arg)) {
		ret = dxl_err_set(DXL_E_IO, "pull: stopped by the test hook");
		goto out;
	}
	st->changed += dxl_rcv_sync_bytes(r, data + dxl_logstore_ctl_off(ls, ring),
					c1, DXL_RING_CTL_SIZE);
	ret = 0;
out:
	if (own_mr) {
		dxl_mr_dereg(&own_mr);
		free(own_mem);
	}
	return ret;
}
