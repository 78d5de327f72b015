/* transfer.c -- state transfer: a member's store copied with one-sided READs into a local checkpoint while it keeps committing (include/dxl/recovery.h) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "common/endian.h"
#include "dxl/recovery.h"
#include "recovery/recovery_internal.h"

/*
 * Who may call: the thread that owns qp's ctx, with nothing else in flight
 * on it.
 *
 * Why a slot taken this way is a committed record (or a safe omission):
 * the three READs of a chunk -- records (A), lock words (L), records (B)
 * -- are posted on one QP and a responder executes READs of one QP in
 * order, so L is read after A and before B. A slot is taken when A and B
 * are consistent and byte-equal and L is 0: the record did not change
 * between A and B, and at L no transaction held it. An uncommitted insert
 * (dxl_store_insert_owned: locked from before it is live until its
 * transaction decides; an abort deletes it before unlocking) cannot pass:
 * if its lock was free at L the transaction had decided, and an abort had
 * already rewritten the slot (A != B) unless A was taken after the delete.
 * A write-back happens under the lock, so a changing slot is locked or
 * differs between A and B. A slot that stays inconsistent while unlocked
 * is either torn at the source (a crash cut a write; its replay is
 * pending) or being written by a backup's applier: in both cases the
 * record being written is at or above the source's heads, which the
 * caller read before calling, so the log replayed from there restores it;
 * such slots are left out (torn_skipped).
 */

#define XFER_WRID 0x5846455200000000ull /* "XFER" */
#define CHUNK (512u << 10)              /* record bytes per READ */

int dxl_rcv_post_wait(struct dxl_qp *qp, struct dxl_wr *chain, uint64_t wr_id)
{
	int ret = dxl_qp_post(qp, chain, NULL);
	if (ret)
		return ret;
	struct dxl_ctx *c = dxl_qp_ctx(qp);
	for (;;) {
		struct dxl_wc wc;
		int n = dxl_ctx_poll(c, &wc, 1);
		if (n < 0)
			return n;
		if (n == 0) {
			dxl_ctx_wait(c, 100);
			continue;
		}
		if (wc.status != DXL_WC_SUCCESS)
			return dxl_err_set(wc.status == DXL_WC_REM_ACCESS_ERR ? DXL_E_ACCESS
									 : DXL_E_UNREACHABLE,
					   "READ from node %u: %s",
					   dxl_qp_remote_node(qp), dxl_wc_status_str(wc.status));
		if (wc.wr_id == wr_id)
			return 0;
	}
}

struct cbuf {
	uint8_t *a, *b;
	uint64_t *l;
	uint32_t lkey;
};

/* the three READs of slots [first, first+n) of table d */
static int read3(struct dxl_qp *qp, const struct dxl_table_desc *d, uint64_t first,
		 uint32_t n, const struct cbuf *cb, struct dxl_xfer_stats *st)
{
	uint32_t bytes = n * d->slot_size;
	struct dxl_wr wr[3] = {
		{.op = DXL_WR_READ, .local = cb->a, .len = bytes, .lkey = cb->lkey,
		 .remote_addr = d->records.addr + first * d->slot_size, .rkey = d->records.rkey},
		{.op = DXL_WR_READ, .local = cb->l, .len = 8 * n, .lkey = cb->lkey,
		 .remote_addr = d->locks.addr + 8 * first, .rkey = d->locks.rkey},
		{.op = DXL_WR_READ, .local = cb->b, .len = bytes, .lkey = cb->lkey,
		 .remote_addr = d->records.addr + first * d->slot_size, .rkey = d->records.rkey,
		 .wr_id = XFER_WRID, .flags = DXL_WR_SIGNALED},
	};
	wr[0].next = &wr[1];
	wr[1].next = &wr[2];
	st->bytes_read += 2ull * bytes + 8ull * n;
	return dxl_rcv_post_wait(qp, wr, XFER_WRID);
}

#define V_TAKE DXL_RCV_XFER_TAKE
#define V_SKIP_TORN DXL_RCV_XFER_SKIP
#define V_AGAIN DXL_RCV_XFER_AGAIN
#define judge dxl_rcv_xfer_judge

int dxl_rcv_xfer_judge(const uint8_t *a, const uint8_t *b, uint64_t lock, uint32_t slot_size,
		       struct dxl_record *r, uint8_t *val, int *err)
{
	*err = 0;
	if (lock)
		return V_AGAIN;
	bool same = memcmp(a, b, slot_size) == 0;
	int ca = dxl_record_read_check(a, slot_size, r, val, DXL_ENGINE_MAX_VALUE);
	if (ca == 0 && same)
		return V_TAKE;
	if (ca == DXL_E_AGAIN && same) {
		dxl_err_clear();
		return V_SKIP_TORN;
	}
	if (ca != 0 && ca != DXL_E_AGAIN) {
		*err = ca;
		return V_AGAIN;
	}
	dxl_err_clear();
	return V_AGAIN;
}

struct copy_arg {
	struct dxl_ckpt_writer *w;
	const struct dxl_ckpt_info *wi;
	uint64_t below_floor;
};

/*
 * A free slot that names a key at a version is that key's tombstone, or a
 * superseded one (the key was written again since, in another slot: the
 * larger version wins at install), or one the source already gave away
 * (its slot not reused yet). Tombstones below the source's reclaim floor
 * (read before the log copy, dxl_xfer_read_floors) are left out: every
 * write older than them had left the source's log before the copy's start
 * position was read, so none is replayed here.
 */
static int copy_one(void *arg, uint32_t table, const struct dxl_record *r, const void *value)
{
	struct copy_arg *c = arg;
	if (!r->live) {
		for (uint32_t t = 0; t < c->wi->ntables; t++)
			if (c->wi->tables[t].id == table && r->ts < c->wi->floors[t]) {
				c->below_floor++;
				return 0;
			}
		return dxl_ckpt_writer_add(c->w, table, r->key, r->version, r->ts, NULL, 0,
					   DXL_CKPT_TOMBSTONE);
	}
	return dxl_ckpt_writer_add(c->w, table, r->key, r->version, r->ts, value, r->len,
				   DXL_CKPT_LIVE);
}

int dxl_xfer_copy_store(struct dxl_qp *qp, const struct dxl_xfer_source *src,
			struct dxl_ckpt_writer *w, unsigned tries,
			struct dxl_xfer_stats *st)
{
	struct dxl_xfer_stats tmp;
	if (!st)
		st = &tmp;
	if (!qp || !src || !w)
		return dxl_err_set(DXL_E_INVAL, "transfer: NULL argument");
	const struct dxl_ckpt_info *wi = dxl_rcv_writer_info(w);
	if (wi->ntables != src->ntables)
		return dxl_err_set(DXL_E_CONFIG, "transfer: node %u has %u tables, this store %u",
				   src->node_id, src->ntables, wi->ntables);
	for (uint32_t t = 0; t < src->ntables; t++) {
		const struct dxl_table_desc *d = &src->tables[t];
		bool ok = false;
		for (uint32_t j = 0; j < wi->ntables; j++)
			ok |= wi->tables[j].id == d->id && wi->tables[j].value_size == d->value_size &&
			      wi->tables[j].capacity == d->capacity;
		if (!ok)
			return dxl_err_set(DXL_E_CONFIG,
					   "transfer: table %u of node %u (%u bytes x %" PRIu64
					   ") is not one of this store's",
					   d->id, src->node_id, d->value_size, d->capacity);
	}
	struct copy_arg c = {.w = w, .wi = wi};
	int ret = dxl_xfer_scan_store(qp, src, copy_one, &c, tries, st);
	st->below_floor = c.below_floor;
	return ret;
}

/* a live record, or a free slot that names a key at a version (an
 * incarnation > 0: the slot of an undone insert, incarnation 0, names
 * none -- dxl_store_undo_insert) */
static bool taken(const struct dxl_record *r)
{
	return r->live || (r->version >= 2 && r->inc);
}

static void count_taken(struct dxl_xfer_stats *st, const struct dxl_record *r)
{
	if (r->live)
		st->entries++;
	else
		st->tombstones++;
}

int dxl_xfer_scan_store(struct dxl_qp *qp, const struct dxl_xfer_source *src,
			dxl_xfer_record_fn fn, void *arg, unsigned tries,
			struct dxl_xfer_stats *st)
{
	struct dxl_xfer_stats tmp;
	if (!st)
		st = &tmp;
	memset(st, 0, sizeof(*st));
	if (!qp || !src || !fn)
		return dxl_err_set(DXL_E_INVAL, "transfer: NULL argument");
	if (!tries)
		tries = 5000;
	uint64_t t0 = dxl_now_ms();
	uint32_t max_slot = 0;
	for (uint32_t t = 0; t < src->ntables; t++)
		max_slot = DXL_MAX(max_slot, src->tables[t].slot_size);
	if (!src->ntables || !max_slot || max_slot > DXL_RECORD_MAX_SLOT)
		return dxl_err_set(DXL_E_CONFIG, "transfer: node %u describes no tables", src->node_id);
	for (uint32_t t = 0; t < src->ntables; t++)
		if (src->tables[t].slot_size != dxl_record_slot_size(src->tables[t].value_size))
			return dxl_err_set(DXL_E_CONFIG, "transfer: table %u of node %u: slot size %u",
					   src->tables[t].id, src->node_id, src->tables[t].slot_size);
	uint32_t per = DXL_MAX(1u, CHUNK / max_slot);
	size_t rec_bytes = (size_t)per * max_slot;
	size_t len = 2 * rec_bytes + 8 * (size_t)per;
	uint8_t *mem = NULL;
	struct dxl_mr *mr = NULL;
	if (posix_memalign((void **)&mem, 4096, len))
		return dxl_err_set(DXL_E_NOMEM, "transfer: %zu bytes", len);
	int ret = dxl_mr_reg(dxl_ctx_fabric(dxl_qp_ctx(qp)), mem, len, DXL_MR_LOCAL_WRITE, &mr);
	if (ret) {
		free(mem);
		return ret;
	}
	struct cbuf cb = {.a = mem, .b = mem + rec_bytes, .l = (uint64_t *)(mem + 2 * rec_bytes),
			  .lkey = dxl_mr_lkey(mr)};
	uint64_t *again = malloc(per * sizeof(*again));
	static __thread uint8_t val[DXL_ENGINE_MAX_VALUE];
	if (!again)
		ret = dxl_err_set(DXL_E_NOMEM, "transfer");
	for (uint32_t t = 0; !ret && t < src->ntables; t++) {
		const struct dxl_table_desc *d = &src->tables[t];
		for (uint64_t first = 0; !ret && first < d->capacity; first += per) {
			uint32_t n = (uint32_t)DXL_MIN((uint64_t)per, d->capacity - first);
			uint32_t nagain = 0;
			if ((ret = read3(qp, d, first, n, &cb, st)))
				break;
			st->slots += n;
			for (uint32_t i = 0; !ret && i < n; i++) {
				struct dxl_record r;
				int err;
				int v = judge(cb.a + (size_t)i * d->slot_size,
							    cb.b + (size_t)i * d->slot_size,
							    cb.l[i], d->slot_size, &r, val, &err);
				if (err)
					ret = err;
				else if (v == V_TAKE && taken(&r))
					ret = fn(arg, d->id, &r, val);
				else if (v == V_SKIP_TORN)
					st->torn_skipped++;
				else if (v == V_AGAIN)
					again[nagain++] = first + i;
				if (!ret && v == V_TAKE && taken(&r))
					count_taken(st, &r);
			}
			/* the slots that were busy: one at a time, until settled */
			for (uint32_t k = 0; !ret && k < nagain; k++) {
				uint64_t slot = again[k];
				unsigned round = 0;
				for (;;) {
					st->retried++;
					if ((ret = read3(qp, d, slot, 1, &cb, st)))
						break;
					struct dxl_record r;
					int err;
					int v = judge(cb.a, cb.b, cb.l[0], d->slot_size,
								    &r, val, &err);
					if (err) {
						ret = err;
						break;
					}
					if (v == V_TAKE) {
						if (taken(&r)) {
							ret = fn(arg, d->id, &r, val);
							count_taken(st, &r);
						}
						break;
					}
					if (v == V_SKIP_TORN) {
						st->torn_skipped++;
						break;
					}
					if (++round >= tries) {
						ret = dxl_err_set(DXL_E_TIMEDOUT,
								  "transfer: table %u slot %" PRIu64
								  " of node %u stayed locked or changing for %u rounds",
								  d->id, slot, src->node_id, tries);
						break;
					}
					usleep(1000);
				}
			}
		}
	}
	free(again);
	dxl_mr_dereg(&mr);
	free(mem);
	st->ms = dxl_now_ms() - t0;
	if (ret)
		dxl_err_prefix("transfer of shard from node %u", src->node_id);
	return ret;
}

/* ---- what the source says besides its slots --------------------------------------------- */

int dxl_xfer_read_floors(struct dxl_qp *qp, const struct dxl_xfer_source *src,
			 uint64_t *floors)
{
	if (!qp || !src || !floors || !src->ntables || src->ntables > DXL_STORE_MAX_TABLES)
		return dxl_err_set(DXL_E_INVAL, "transfer: floors: bad argument");
	/* the catalog: before the first table's slots (engine.h); the i-th
	 * table of the catalog is the i-th in address order */
	uint32_t order[DXL_STORE_MAX_TABLES];
	for (uint32_t t = 0; t < src->ntables; t++)
		order[t] = t;
	for (uint32_t i = 1; i < src->ntables; i++)
		for (uint32_t j = i; j > 0 && src->tables[order[j - 1]].records.addr >
					       src->tables[order[j]].records.addr; j--) {
			uint32_t x = order[j];
			order[j] = order[j - 1];
			order[j - 1] = x;
		}
	const struct dxl_table_desc *d0 = &src->tables[order[0]];
	if (d0->records.addr < DXL_STORE_CATALOG_SIZE)
		return dxl_err_set(DXL_E_CONFIG, "transfer: node %u: table %u at address %" PRIu64,
				   src->node_id, d0->id, d0->records.addr);
	uint64_t *buf = NULL;
	struct dxl_mr *mr = NULL;
	size_t len = 8 * DXL_STORE_MAX_TABLES;
	if (posix_memalign((void **)&buf, 4096, 4096))
		return dxl_err_set(DXL_E_NOMEM, "transfer: floors");
	int ret = dxl_mr_reg(dxl_ctx_fabric(dxl_qp_ctx(qp)), buf, 4096, DXL_MR_LOCAL_WRITE, &mr);
	if (!ret) {
		struct dxl_wr wr = {.op = DXL_WR_READ, .local = buf, .len = (uint32_t)len,
				    .lkey = dxl_mr_lkey(mr), .wr_id = XFER_WRID,
				    .flags = DXL_WR_SIGNALED,
				    .remote_addr = d0->records.addr - DXL_STORE_CATALOG_SIZE +
						   DXL_STORE_FLOOR_OFF,
				    .rkey = d0->records.rkey};
		ret = dxl_rcv_post_wait(qp, &wr, XFER_WRID);
	}
	for (uint32_t i = 0; !ret && i < src->ntables; i++)
		floors[order[i]] = dxl_get_le64((const uint8_t *)buf + 8 * i);
	dxl_mr_dereg(&mr);
	free(buf);
	if (ret)
		dxl_err_prefix("transfer: the reclaim floors of node %u", src->node_id);
	return ret;
}

int dxl_xfer_read_heads(struct dxl_qp *qp, const struct dxl_xfer_source *src,
			struct dxl_ring_head *heads)
{
	if (!qp || !src || !heads || !src->nrings || src->nrings > DXL_RING_MAX)
		return dxl_err_set(DXL_E_INVAL, "transfer: heads: bad argument");
	uint8_t *buf = NULL;
	struct dxl_mr *mr = NULL;
	if (posix_memalign((void **)&buf, 4096, DXL_RING_CTL_SIZE))
		return dxl_err_set(DXL_E_NOMEM, "transfer: heads");
	int ret = dxl_mr_reg(dxl_ctx_fabric(dxl_qp_ctx(qp)), buf, DXL_RING_CTL_SIZE,
			     DXL_MR_LOCAL_WRITE, &mr);
	for (uint32_t r = 0; !ret && r < src->nrings; r++) {
		const struct dxl_log_target *t = &src->rings[r];
		struct dxl_wr wr = {.op = DXL_WR_READ, .local = buf,
				    .len = 2 * DXL_RING_HEAD_SLOT_SIZE, .lkey = dxl_mr_lkey(mr),
				    .wr_id = XFER_WRID, .flags = DXL_WR_SIGNALED,
				    .remote_addr = t->data.addr + t->ctl_off, .rkey = t->data.rkey};
		if (!(ret = dxl_rcv_post_wait(qp, &wr, XFER_WRID)))
			ret = dxl_ring_head_decode(buf, &heads[r]);
		if (ret)
			dxl_err_prefix("transfer: head of ring %u of node %u", r, src->node_id);
	}
	dxl_mr_dereg(&mr);
	free(buf);
	return ret;
}

int dxl_xfer_check_heads(struct dxl_qp *qp, const struct dxl_xfer_source *src,
			 const struct dxl_log_pos *start, char *why, size_t cap)
{
	struct dxl_ring_head *h = calloc(src && src->nrings ? src->nrings : 1, sizeof(*h));
	if (!h)
		return dxl_err_set(DXL_E_NOMEM, "transfer: heads");
	int ret = dxl_xfer_read_heads(qp, src, h);
	for (uint32_t r = 0; !ret && r < src->nrings; r++)
		if (h[r].pos != start[r].pos) {
			if (why && cap)
				snprintf(why, cap, "ring %u: head %" PRIu64 ", the copy started at %" PRIu64,
					 r, h[r].pos, start[r].pos);
			ret = dxl_err_set(DXL_E_AGAIN,
					  "transfer from node %u: its retention moved ring %u's head from %"
					  PRIu64 " to %" PRIu64 " during the copy (a tombstone the log "
					  "from the start position needs may be gone): copy again",
					  src->node_id, r, start[r].pos, h[r].pos);
		}
	free(h);
	return ret;
}
