/* ring.c -- per-writer log rings in persistent memory: layout, heads, placement, scan */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/log.h"
#include "log/log_internal.h"
#include "common/endian.h"

/*
 * Log header (data-area offset 0), little-endian:
 *   0 magic "DXLLOG\0\0"   16 nrings (u32)       32 CRC32C of 0..31 (u32)
 *   8 version (u32)        20 reserved (u32)
 *  12 shard (u32)          24 ring size (u64)
 *
 * Head slot (control block offsets 0 and 64):
 *   0 generation (u64)  8 pos (u64)  16 seq (u64)  24 last_ts (u64)
 *  32 CRC32C of 0..31 (u32), then zero up to 64
 * Incarnation slot (control block offsets 256 and 320, one line each):
 *   0 incarnation (u64)  8 incarnation ^ DXL_RING_INC_MAGIC (u64)
 * Who writes what (H8: CPU-owned words stay with the CPU): the log header
 * and the head slots are written only by the replica's CPU; remote writers
 * only READ them. Ring buffers, the watermark and the incarnation slots are
 * written only by their writer (remote WRITEs, or a local writer), and read
 * by scans.
 */
#define LOG_MAGIC "DXLLOG"
#define LOG_VERSION 2 /* 2: incarnation slots, records of version 2 */
#define FIRST_SEQ 1

struct dxl_logstore {
	struct dxl_region *r;
	uint8_t *data;
	uint32_t shard;
	uint32_t nrings;
	uint64_t ring_size;
};

uint64_t dxl_logstore_bytes(uint32_t nrings, uint64_t ring_size)
{
	return DXL_LOG_HDR_SIZE + (uint64_t)nrings * (DXL_RING_CTL_SIZE + ring_size);
}

uint64_t dxl_logstore_ctl_off(const struct dxl_logstore *ls, uint32_t ring)
{
	DXL_ASSERT(ring < ls->nrings);
	return DXL_LOG_HDR_SIZE + (uint64_t)ring * (DXL_RING_CTL_SIZE + ls->ring_size);
}

uint64_t dxl_logstore_buf_off(const struct dxl_logstore *ls, uint32_t ring)
{
	return dxl_logstore_ctl_off(ls, ring) + DXL_RING_CTL_SIZE;
}

static void slot_encode(uint8_t *s, uint64_t gen, uint64_t pos, uint64_t seq,
			uint64_t last_ts)
{
	memset(s, 0, DXL_RING_HEAD_SLOT_SIZE);
	dxl_put_le64(s, gen);
	dxl_put_le64(s + 8, pos);
	dxl_put_le64(s + 16, seq);
	dxl_put_le64(s + 24, last_ts);
	dxl_put_le32(s + 32, dxl_crc32c(0, s, 32));
}

static int slot_decode(const uint8_t *s, struct dxl_ring_head *h)
{
	if (dxl_crc32c(0, s, 32) != dxl_get_le32(s + 32))
		return 0;
	h->gen = dxl_get_le64(s);
	h->pos = dxl_get_le64(s + 8);
	h->seq = dxl_get_le64(s + 16);
	h->last_ts = dxl_get_le64(s + 24);
	return h->gen != 0;
}

/* the valid slots of a control block: n (0..2), newest first */
static int slots_decode(const void *slots, struct dxl_ring_head h[2])
{
	const uint8_t *s = slots;
	int n = 0;
	for (int i = 0; i < 2; i++)
		n += slot_decode(s + i * DXL_RING_HEAD_SLOT_SIZE, &h[n]);
	if (n == 2 && h[1].gen > h[0].gen) {
		struct dxl_ring_head t = h[0];
		h[0] = h[1];
		h[1] = t;
	}
	return n;
}

int dxl_ring_head_decode(const void *slots, struct dxl_ring_head *out)
{
	struct dxl_ring_head h[2];
	if (!slots_decode(slots, h))
		return dxl_err_set(DXL_E_CORRUPT, "ring head: no valid head slot");
	*out = h[0];
	return 0;
}

int dxl_ring_head_decode_durable(const void *slots, struct dxl_ring_head *out)
{
	struct dxl_ring_head h[2];
	int n = slots_decode(slots, h);
	if (!n)
		return dxl_err_set(DXL_E_CORRUPT, "ring head: no valid head slot");
	/* the older of two: dxl_logstore_set_head persisted it before it
	 * stored the newer one */
	*out = h[n - 1];
	return 0;
}

int dxl_logstore_format(struct dxl_region *r, uint32_t shard, uint32_t nrings,
			uint64_t ring_size)
{
	if (!r || nrings < 1 || nrings > DXL_RING_MAX || ring_size < 8192 ||
	    ring_size % 4096)
		return dxl_err_set(DXL_E_INVAL,
				   "log format: %u rings of %llu bytes (want 1..%d rings, size a multiple of 4096 >= 8192)",
				   nrings, (unsigned long long)ring_size,
				   DXL_RING_MAX);
	uint64_t need = dxl_logstore_bytes(nrings, ring_size);
	if (need > dxl_region_data_size(r))
		return dxl_err_set(DXL_E_INVAL,
				   "log format: %u rings of %llu bytes need %llu bytes, region %s has %llu",
				   nrings, (unsigned long long)ring_size,
				   (unsigned long long)need, dxl_region_path(r),
				   (unsigned long long)dxl_region_data_size(r));
	uint8_t *d = dxl_region_data(r);
	if (memcmp(d, LOG_MAGIC, sizeof(LOG_MAGIC)) == 0)
		return dxl_err_set(DXL_E_EXIST, "log format: %s already holds a log",
				   dxl_region_path(r));
	/* control blocks first, the header last: a crash in between leaves a
	 * region that is simply not formatted yet */
	for (uint32_t i = 0; i < nrings; i++) {
		uint8_t *ctl = d + DXL_LOG_HDR_SIZE +
			       (uint64_t)i * (DXL_RING_CTL_SIZE + ring_size);
		memset(ctl, 0, DXL_RING_CTL_SIZE);
		slot_encode(ctl, 1, 0, FIRST_SEQ, 0);
		dxl_region_persist(r, ctl, DXL_RING_CTL_SIZE);
		/* a ring's first record must not be mistaken for a stale one:
		 * zero the first line (new regions are zero anyway) */
		memset(ctl + DXL_RING_CTL_SIZE, 0, 64);
		dxl_region_persist(r, ctl + DXL_RING_CTL_SIZE, 64);
	}
	uint8_t h[64] = {0};
	memcpy(h, LOG_MAGIC, sizeof(LOG_MAGIC));
	dxl_put_le32(h + 8, LOG_VERSION);
	dxl_put_le32(h + 12, shard);
	dxl_put_le32(h + 16, nrings);
	dxl_put_le64(h + 24, ring_size);
	dxl_put_le32(h + 32, dxl_crc32c(0, h, 32));
	memcpy(d, h, sizeof(h));
	dxl_region_persist(r, d, sizeof(h));
	return 0;
}

int dxl_logstore_open(struct dxl_region *r, struct dxl_logstore **out)
{
	*out = NULL;
	const uint8_t *h = dxl_region_data(r);
	const char *p = dxl_region_path(r);
	if (memcmp(h, LOG_MAGIC, sizeof(LOG_MAGIC)) != 0)
		return dxl_err_set(DXL_E_CORRUPT, "%s: holds no log (bad magic)", p);
	if (dxl_crc32c(0, h, 32) != dxl_get_le32(h + 32))
		return dxl_err_set(DXL_E_CORRUPT, "%s: log header checksum mismatch", p);
	if (dxl_get_le32(h + 8) != LOG_VERSION)
		return dxl_err_set(DXL_E_VERSION,
				   "%s: log format version %u, this build reads %d",
				   p, dxl_get_le32(h + 8), LOG_VERSION);
	uint32_t nrings = dxl_get_le32(h + 16);
	uint64_t size = dxl_get_le64(h + 24);
	if (nrings < 1 || nrings > DXL_RING_MAX || size < 8192 || size % 4096 ||
	    size > (1ull << 40) ||
	    dxl_logstore_bytes(nrings, size) > dxl_region_data_size(r))
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: log header says %u rings of %llu bytes, region has %llu",
				   p, nrings, (unsigned long long)size,
				   (unsigned long long)dxl_region_data_size(r));
	struct dxl_logstore *ls = calloc(1, sizeof(*ls));
	if (!ls)
		return dxl_err_set(DXL_E_NOMEM, "logstore: out of memory");
	ls->r = r;
	ls->data = dxl_region_data(r);
	ls->shard = dxl_get_le32(h + 12);
	ls->nrings = nrings;
	ls->ring_size = size;
	*out = ls;
	return 0;
}

void dxl_logstore_close(struct dxl_logstore **ls)
{
	if (ls && *ls) {
		free(*ls);
		*ls = NULL;
	}
}

uint32_t dxl_logstore_nrings(const struct dxl_logstore *ls)
{
	return ls->nrings;
}

uint64_t dxl_logstore_ring_size(const struct dxl_logstore *ls)
{
	return ls->ring_size;
}

uint32_t dxl_logstore_shard(const struct dxl_logstore *ls)
{
	return ls->shard;
}

struct dxl_region *dxl_logstore_region(const struct dxl_logstore *ls)
{
	return ls->r;
}

int dxl_logstore_head(const struct dxl_logstore *ls, uint32_t ring,
		      struct dxl_ring_head *out)
{
	if (ring >= ls->nrings)
		return dxl_err_set(DXL_E_INVAL, "ring %u of %u", ring, ls->nrings);
	int ret = dxl_ring_head_decode(ls->data + dxl_logstore_ctl_off(ls, ring),
				       out);
	if (ret)
		dxl_err_prefix("%s: ring %u", dxl_region_path(ls->r), ring);
	return ret;
}

static dxl_head_hook_fn head_hook;
static void *head_hook_arg;

void dxl_ring_set_head_test_hook(dxl_head_hook_fn fn, void *arg)
{
	head_hook = fn;
	head_hook_arg = arg;
}

/*
 * Who may call: the replica's CPU, one thread per ring (the head slots are
 * CPU-owned, H8). Remote readers see every store at once (a NIC READ is
 * coherent with the CPU's cache, and on msync/process regions the page is
 * shared), but a store is durable only once persisted. So the new head
 * goes into both slots, one after the other, each persisted before the
 * next is stored: the older of the two valid slots
 * (dxl_ring_head_decode_durable, what writers use) is always durable, and
 * becomes the new head only once the first copy is.
 */
int dxl_logstore_set_head(struct dxl_logstore *ls, uint32_t ring, uint64_t pos,
			  uint64_t seq, uint64_t last_ts)
{
	struct dxl_ring_head cur;
	int ret = dxl_logstore_head(ls, ring, &cur);
	if (ret)
		return ret;
	if (pos < cur.pos || seq < cur.seq || last_ts < cur.last_ts)
		return dxl_err_set(DXL_E_INVAL,
				   "ring %u: head may not go back (pos %llu -> %llu, seq %llu -> %llu, ts %llu -> %llu)",
				   ring, (unsigned long long)cur.pos,
				   (unsigned long long)pos,
				   (unsigned long long)cur.seq,
				   (unsigned long long)seq,
				   (unsigned long long)cur.last_ts,
				   (unsigned long long)last_ts);
	uint8_t *ctl = ls->data + dxl_logstore_ctl_off(ls, ring);
	/* the slot holding the newest head: the other one is written first
	 * (the newest stays valid if that store tears), then this one */
	struct dxl_ring_head s1;
	int newest = slot_decode(ctl + DXL_RING_HEAD_SLOT_SIZE, &s1) &&
		     s1.gen == cur.gen;
	for (uint32_t step = 1; step <= 2; step++) {
		int idx = step == 1 ? !newest : newest;
		uint8_t *slot = ctl + idx * DXL_RING_HEAD_SLOT_SIZE;
		slot_encode(slot, cur.gen + step, pos, seq, last_ts);
		if (head_hook && head_hook(slot, step, head_hook_arg))
			return dxl_err_set(DXL_E_IO,
					   "ring %u: head update stopped by the test hook (step %u)",
					   ring, step);
		dxl_region_persist(ls->r, slot, DXL_RING_HEAD_SLOT_SIZE);
	}
	return 0;
}

uint64_t dxl_ring_wmark_decode(const void *buf)
{
	const uint8_t *b = buf;
	uint64_t ts = dxl_get_le64(b);
	/* an RDMA WRITE is not guaranteed to land in one piece: both words
	 * must agree, else nothing is promised */
	return dxl_get_le64(b + 8) == (ts ^ DXL_RING_WMARK_MAGIC) ? ts : 0;
}

uint64_t dxl_logstore_watermark(const struct dxl_logstore *ls, uint32_t ring)
{
	DXL_ASSERT(ring < ls->nrings);
	return dxl_ring_wmark_decode(ls->data + dxl_logstore_ctl_off(ls, ring) +
				     DXL_RING_WMARK_OFF);
}

void dxl_ring_inc_encode(void *slot, uint32_t inc)
{
	uint8_t *b = slot;
	dxl_put_le64(b, inc);
	dxl_put_le64(b + 8, (uint64_t)inc ^ DXL_RING_INC_MAGIC);
}

uint32_t dxl_ring_inc_decode(const void *ctl)
{
	const uint8_t *b = (const uint8_t *)ctl + DXL_RING_INC_OFF;
	uint32_t best = 0;
	for (int i = 0; i < 2; i++, b += DXL_RING_INC_SLOT) {
		uint64_t v = dxl_get_le64(b);
		/* both words must agree (a torn or never-written slot does not
		 * count) and the value must fit a record's field */
		if (dxl_get_le64(b + 8) == (v ^ DXL_RING_INC_MAGIC) &&
		    v <= UINT32_MAX && v > best)
			best = (uint32_t)v;
	}
	return best;
}

uint32_t dxl_logstore_incarnation(const struct dxl_logstore *ls, uint32_t ring)
{
	DXL_ASSERT(ring < ls->nrings);
	return dxl_ring_inc_decode(ls->data + dxl_logstore_ctl_off(ls, ring));
}

static int ring_step(struct dxl_ring_iter *it, struct dxl_rec *rec,
		     uint64_t *at);

int dxl_logstore_truncate(struct dxl_logstore *ls, uint32_t ring, uint64_t pos,
			  uint64_t seq)
{
	struct dxl_ring_iter it;
	int ret = dxl_ring_iter_init(&it, ls, ring);
	if (ret)
		return ret;
	uint8_t *buf = ls->data + dxl_logstore_buf_off(ls, ring);
	struct dxl_rec rec;
	uint64_t at;
	int found = 0, dropped = 0;
	/* walk every record boundary, skips included */
	for (;;) {
		if (it.pos == pos && it.seq == seq)
			found = 1;
		if (!ring_step(&it, &rec, &at))
			break;
		if (found && rec.type == DXL_REC_DATA)
			dropped++;
	}
	if (!found)
		return dxl_err_set(DXL_E_INVAL,
				   "ring %u: (pos %llu, seq %llu) is not a record boundary between the head (%llu) and the end (%llu)",
				   ring, (unsigned long long)pos,
				   (unsigned long long)seq,
				   (unsigned long long)it.start_pos,
				   (unsigned long long)it.pos);
	if (pos != it.pos || dropped) {
		/* invalidate the first line of the record at pos: the scan
		 * stops there, so everything after it is gone */
		uint8_t *line = buf + pos % ls->ring_size;
		memset(line, 0, DXL_REC_MIN_SIZE);
		dxl_region_persist(ls->r, line, DXL_REC_MIN_SIZE);
	}
	return dropped;
}

int dxl_ring_place(uint64_t ring_size, uint64_t tail_pos, uint64_t tail_seq,
		   uint64_t head_pos, uint32_t rec_size,
		   struct dxl_ring_place *out)
{
	if (!rec_size || rec_size % 64 || ring_size % 4096 || !ring_size)
		return dxl_err_set(DXL_E_INVAL,
				   "ring place: record of %u bytes in a ring of %llu",
				   rec_size, (unsigned long long)ring_size);
	if (rec_size > ring_size / 2)
		return dxl_err_set(DXL_E_TOOBIG,
				   "record of %u bytes can never fit a ring of %llu bytes (limit: half the ring)",
				   rec_size, (unsigned long long)ring_size);
	if (head_pos > tail_pos)
		return dxl_err_set(DXL_E_STALE,
				   "ring head %llu is past the writer's tail %llu",
				   (unsigned long long)head_pos,
				   (unsigned long long)tail_pos);
	uint64_t used = tail_pos - head_pos;
	uint64_t off = tail_pos % ring_size;
	uint64_t rem = ring_size - off;
	memset(out, 0, sizeof(*out));
	uint64_t need = rec_size;
	if (rec_size > rem) {
		out->skip_len = (uint32_t)rem;
		out->skip_off = off;
		out->skip_seq = tail_seq;
		need += rem;
	}
	if (used + need > ring_size)
		return dxl_err_set(DXL_E_FULL,
				   "ring full: %llu of %llu bytes in use, need %llu more",
				   (unsigned long long)used,
				   (unsigned long long)ring_size,
				   (unsigned long long)need);
	out->rec_pos = tail_pos + (out->skip_len ? rem : 0);
	out->rec_off = out->rec_pos % ring_size;
	out->rec_seq = tail_seq + (out->skip_len ? 1 : 0);
	out->new_tail_pos = out->rec_pos + rec_size;
	out->new_tail_seq = out->rec_seq + 1;
	return 0;
}

int dxl_ring_iter_init_at(struct dxl_ring_iter *it,
			  const struct dxl_logstore *ls, uint32_t ring,
			  uint64_t pos, uint64_t seq)
{
	if (ring >= ls->nrings)
		return dxl_err_set(DXL_E_INVAL, "ring %u of %u", ring, ls->nrings);
	dxl_ring_iter_init_buf(it, ls->data + dxl_logstore_buf_off(ls, ring),
			       ls->ring_size, pos, seq);
	it->ring = ring;
	return 0;
}

void dxl_ring_iter_init_buf(struct dxl_ring_iter *it, const void *buf,
			    uint64_t ring_size, uint64_t pos, uint64_t seq)
{
	it->buf = buf;
	it->ring_size = ring_size;
	it->ring = 0;
	it->start_pos = pos;
	it->pos = pos;
	it->seq = seq;
	it->inc = 0;
	it->done = 0;
	it->end = DXL_RING_END_NONE;
}

int dxl_ring_iter_init(struct dxl_ring_iter *it, const struct dxl_logstore *ls,
		       uint32_t ring)
{
	struct dxl_ring_head h;
	int ret = dxl_logstore_head(ls, ring, &h);
	if (ret)
		return ret;
	return dxl_ring_iter_init_at(it, ls, ring, h.pos, h.seq);
}

/* the walk ends at it->pos, for reason why */
static int ring_end(struct dxl_ring_iter *it, enum dxl_ring_end why)
{
	it->done = 1;
	if (it->end == DXL_RING_END_NONE)
		it->end = why;
	return 0;
}

/*
 * ring_step -- consume the record at it->pos, skip or data: 1 and the record
 * (and its position in *at), or 0 at the end of the valid content (nothing
 * written, a torn or stale record, a ghost, or a full lap), which ends the
 * walk; it->end says which.
 */
static int ring_step(struct dxl_ring_iter *it, struct dxl_rec *rec,
		     uint64_t *at)
{
	const uint64_t size = it->ring_size;
	if (it->done)
		return 0;
	if (it->pos - it->start_pos >= size)
		return ring_end(it, DXL_RING_END_LAP);
	uint64_t off = it->pos % size;
	/* a failed decode is the end of the valid content, not an error: do
	 * not leave its message behind */
	if (dxl_rec_decode(it->buf + off, size - off, rec) != 0) {
		dxl_err_clear();
		return ring_end(it, dxl_rec_peek_size(it->buf + off, size - off)
					    ? DXL_RING_END_TORN
					    : DXL_RING_END_EMPTY);
	}
	if (rec->seq != it->seq) /* a record of an earlier lap */
		return ring_end(it, DXL_RING_END_STALE);
	if (it->pos - it->start_pos + rec->total_len > size)
		return ring_end(it, DXL_RING_END_LAP);
	/* written by an earlier appender than its predecessor: it was not
	 * written after it (see DXL_RING_END_GHOST) */
	if (rec->incarnation < it->inc)
		return ring_end(it, DXL_RING_END_GHOST);
	*at = it->pos;
	it->pos += rec->total_len;
	it->seq++;
	it->inc = rec->incarnation;
	return 1;
}

int dxl_ring_iter_step(struct dxl_ring_iter *it, struct dxl_rec *rec,
		       uint64_t *at)
{
	return ring_step(it, rec, at);
}

int dxl_ring_iter_next(struct dxl_ring_iter *it, struct dxl_rec *rec,
		       uint64_t *pos)
{
	uint64_t at;
	while (ring_step(it, rec, &at)) {
		if (rec->type == DXL_REC_DATA) {
			if (pos)
				*pos = at;
			return 1;
		}
	}
	return 0;
}

int dxl_ring_scan(const struct dxl_logstore *ls, uint32_t ring,
		  dxl_ring_scan_fn fn, void *arg, uint64_t *end_pos,
		  uint64_t *end_seq)
{
	struct dxl_ring_iter it;
	int ret = dxl_ring_iter_init(&it, ls, ring);
	if (ret)
		return ret;
	struct dxl_rec rec;
	uint64_t pos;
	int n = 0;
	while (dxl_ring_iter_next(&it, &rec, &pos)) {
		n++;
		if (fn && fn(&rec, pos, arg)) {
			/* the caller stops here: report this record's position */
			it.pos = pos;
			it.seq = rec.seq;
			break;
		}
	}
	if (end_pos)
		*end_pos = it.pos;
	if (end_seq)
		*end_seq = it.seq;
	return n;
}

int dxl_ring_advance_head(struct dxl_logstore *ls, uint32_t ring)
{
	struct dxl_ring_iter it;
	int ret = dxl_ring_iter_init(&it, ls, ring);
	if (ret)
		return ret;
	struct dxl_ring_head h;
	dxl_logstore_head(ls, ring, &h);
	uint64_t ts = h.last_ts;
	struct dxl_rec rec;
	int n = 0;
	while (dxl_ring_iter_next(&it, &rec, NULL)) {
		if (rec.commit_ts > ts)
			ts = rec.commit_ts;
		n++;
	}
	ret = dxl_logstore_set_head(ls, ring, it.pos, it.seq, ts);
	return ret ? ret : n;
}

struct merge_head {
	struct dxl_ring_iter it;
	struct dxl_rec rec;
	uint64_t pos;
	int have;
};

static int merge_advance(struct merge_head *m)
{
	uint64_t prev = m->have ? m->rec.commit_ts : 0;
	m->have = dxl_ring_iter_next(&m->it, &m->rec, &m->pos);
	if (m->have && m->rec.commit_ts < prev)
		return dxl_err_set(DXL_E_CORRUPT,
				   "ring %u: commit timestamp %llu after %llu (seq %llu): timestamps of a ring must not decrease",
				   m->it.ring, (unsigned long long)m->rec.commit_ts,
				   (unsigned long long)prev,
				   (unsigned long long)m->rec.seq);
	return 0;
}

int dxl_log_scan_merged(const struct dxl_logstore *ls, uint64_t resolved_ts,
			dxl_log_merge_fn fn, void *arg)
{
	uint32_t k = ls->nrings;
	struct merge_head *m = calloc(k, sizeof(*m));
	if (!m)
		return dxl_err_set(DXL_E_NOMEM, "log scan: out of memory");
	int ret = 0, n = 0;
	for (uint32_t i = 0; i < k && !ret; i++) {
		ret = dxl_ring_iter_init(&m[i].it, ls, i);
		if (!ret)
			ret = merge_advance(&m[i]);
	}
	/* k-way merge by (commit_ts, writer); k is small (rings per shard) so
	 * a linear minimum is cheaper than keeping a heap */
	while (!ret) {
		struct merge_head *best = NULL;
		for (uint32_t i = 0; i < k; i++) {
			if (!m[i].have)
				continue;
			if (!best || m[i].rec.commit_ts < best->rec.commit_ts ||
			    (m[i].rec.commit_ts == best->rec.commit_ts &&
			     m[i].rec.writer < best->rec.writer))
				best = &m[i];
		}
		if (!best || best->rec.commit_ts >= resolved_ts)
			break;
		n++;
		if (fn && fn(best->it.ring, &best->rec, best->pos, arg))
			break;
		ret = merge_advance(best);
	}
	free(m);
	return ret ? ret : n;
}
