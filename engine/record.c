/* record.c -- record slots with per-64-byte-line versions: writer, checks, remote write-back */
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "common/common.h"
#include "dxl/engine.h"
#include "engine/record_internal.h"

/*
 * Layout and protocol: include/dxl/engine.h; the ordering argument:
 * docs/engine.md "Records". Every word of a slot is stored and loaded with
 * __atomic builtins, 8 bytes at a time: slots are shared with readers on
 * other threads and with the NIC, and a plain store would be a data race.
 */

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "record slots are stored in host order; dxl hosts are little-endian");

#define OFF_VERSION 0
#define OFF_TS 8
#define OFF_KEY 16
#define OFF_INCLEN 24 /* incarnation (low 32 bits) | length|flags (high 32) */
#define OFF_VAL0 32
#define LEN_MASK 0xffffu

uint32_t dxl_record_slot_size(uint32_t value_size)
{
	if (value_size == 0 || value_size > DXL_ENGINE_MAX_VALUE)
		return 0;
	if (value_size <= DXL_RECORD_HDR_VALUE)
		return DXL_RECORD_LINE;
	uint32_t rest = value_size - DXL_RECORD_HDR_VALUE;
	return DXL_RECORD_LINE *
	       (1 + (rest + DXL_RECORD_LINE_VALUE - 1) / DXL_RECORD_LINE_VALUE);
}

static bool slot_size_ok(uint32_t slot_size)
{
	return slot_size >= DXL_RECORD_LINE && slot_size <= DXL_RECORD_MAX_SLOT &&
	       slot_size % DXL_RECORD_LINE == 0;
}

uint32_t dxl_record_value_cap(uint32_t slot_size)
{
	if (!slot_size_ok(slot_size))
		return 0;
	return DXL_RECORD_HDR_VALUE +
	       (slot_size / DXL_RECORD_LINE - 1) * DXL_RECORD_LINE_VALUE;
}

static inline uint64_t *word(void *slot, uint32_t off)
{
	return (uint64_t *)((uint8_t *)slot + off);
}

static inline const uint64_t *cword(const void *slot, uint32_t off)
{
	return (const uint64_t *)((const uint8_t *)slot + off);
}

/* value bytes [vo, vo+8) as a word, zero past len */
static inline uint64_t value_word(const void *value, uint32_t len, uint32_t vo)
{
	uint64_t w = 0;
	if (vo < len)
		memcpy(&w, (const uint8_t *)value + vo, DXL_MIN(8u, len - vo));
	return w;
}

static inline uint64_t inclen_word(const struct dxl_record *r)
{
	uint32_t lf = (r->len & LEN_MASK) | (r->live ? DXL_RECORD_LIVE : 0);
	return (uint64_t)r->inc | ((uint64_t)lf << 32);
}

/* the version a write of r over a slot at version cur gives */
static int new_version(uint64_t cur, const struct dxl_record *r, uint64_t *out)
{
	if (r->version == 0) {
		*out = (cur | 1) + 1; /* cur + 2, or the next even after a torn odd */
		return 0;
	}
	if (r->version & 1)
		return dxl_err_set(DXL_E_INVAL,
				   "record write: version %llu is odd (odd means being written)",
				   (unsigned long long)r->version);
	*out = r->version;
	return 0;
}

static int check_write_args(const void *slot, uint32_t slot_size,
			    const struct dxl_record *r, const void *value)
{
	if (!slot || !r || ((uintptr_t)slot & 7))
		return dxl_err_set(DXL_E_INVAL,
				   "record write: NULL or misaligned slot/record");
	if (!slot_size_ok(slot_size))
		return dxl_err_set(DXL_E_INVAL,
				   "record write: slot size %u is not a multiple of 64 in 64..%d",
				   slot_size, DXL_RECORD_MAX_SLOT);
	if (r->len > dxl_record_value_cap(slot_size))
		return dxl_err_set(DXL_E_TOOBIG,
				   "record write: value of %u bytes, the slot holds %u",
				   r->len, dxl_record_value_cap(slot_size));
	if (r->len && !value)
		return dxl_err_set(DXL_E_INVAL, "record write: NULL value of %u bytes",
				   r->len);
	if (r->live && r->inc == 0)
		return dxl_err_set(DXL_E_INVAL,
				   "record write: a live record needs an incarnation > 0");
	return 0;
}

#define STEP()                                                                \
	do {                                                                  \
		if (step)                                                     \
			step(arg);                                            \
	} while (0)

/*
 * Who may call: the holder of the record's lock, or the single applier of
 * a backup. The stores of one line: stamp odd, value words, stamp new. The
 * release fence after an odd stamp keeps the value stores after it (for a
 * reader that saw a value word, the stamp it loads later is odd or newer);
 * the release store of the new stamp keeps the value before it. On x86 (TSO)
 * both are compiler barriers only: stores leave the core in program order,
 * which is also the order a DMA read observes them (docs/engine.md).
 */
static inline int write_slot(void *slot, uint32_t slot_size,
			     const struct dxl_record *r, const void *value,
			     uint64_t *version_out, dxl_record_step_fn step,
			     void *arg)
{
	int ret = check_write_args(slot, slot_size, r, value);
	if (ret)
		return ret;
	uint64_t cur = __atomic_load_n(word(slot, OFF_VERSION), __ATOMIC_RELAXED);
	uint64_t nv = 0;
	if ((ret = new_version(cur, r, &nv)))
		return ret;
	uint64_t odd = nv - 1;
	uint32_t nlines = slot_size / DXL_RECORD_LINE;

	/* line 0 odd for the whole write: a local seqlock reader retries */
	__atomic_store_n(word(slot, OFF_VERSION), odd, __ATOMIC_RELAXED);
	STEP();
	atomic_thread_fence(memory_order_release);
	for (uint32_t i = 1; i < nlines; i++) {
		uint32_t lo = i * DXL_RECORD_LINE;
		uint32_t vo = DXL_RECORD_HDR_VALUE + (i - 1) * DXL_RECORD_LINE_VALUE;
		__atomic_store_n(word(slot, lo), odd, __ATOMIC_RELAXED);
		STEP();
		atomic_thread_fence(memory_order_release);
		for (uint32_t w = 0; w < DXL_RECORD_LINE_VALUE / 8; w++) {
			__atomic_store_n(word(slot, lo + 8 + 8 * w),
					 value_word(value, r->len, vo + 8 * w),
					 __ATOMIC_RELAXED);
			STEP();
		}
		__atomic_store_n(word(slot, lo), nv, __ATOMIC_RELEASE);
		STEP();
	}
	__atomic_store_n(word(slot, OFF_TS), r->ts, __ATOMIC_RELAXED);
	STEP();
	__atomic_store_n(word(slot, OFF_KEY), r->key, __ATOMIC_RELAXED);
	STEP();
	__atomic_store_n(word(slot, OFF_INCLEN), inclen_word(r), __ATOMIC_RELAXED);
	STEP();
	for (uint32_t w = 0; w < DXL_RECORD_HDR_VALUE / 8; w++) {
		__atomic_store_n(word(slot, OFF_VAL0 + 8 * w),
				 value_word(value, r->len, 8 * w), __ATOMIC_RELAXED);
		STEP();
	}
	/* last: every other store of this write is visible before it */
	__atomic_store_n(word(slot, OFF_VERSION), nv, __ATOMIC_RELEASE);
	STEP();
	if (version_out)
		*version_out = nv;
	return 0;
}

int dxl_record_write(void *slot, uint32_t slot_size, const struct dxl_record *r,
		     const void *value, uint64_t *version_out)
{
	return write_slot(slot, slot_size, r, value, version_out, NULL, NULL);
}

int dxl_record_write_traced(void *slot, uint32_t slot_size,
			    const struct dxl_record *r, const void *value,
			    uint64_t *version_out, dxl_record_step_fn step,
			    void *arg)
{
	return write_slot(slot, slot_size, r, value, version_out, step, arg);
}

void dxl_record_peek(const void *slot, struct dxl_record *out)
{
	uint64_t il = __atomic_load_n(cword(slot, OFF_INCLEN), __ATOMIC_RELAXED);
	uint32_t lf = (uint32_t)(il >> 32);
	out->version = __atomic_load_n(cword(slot, OFF_VERSION), __ATOMIC_ACQUIRE);
	out->ts = __atomic_load_n(cword(slot, OFF_TS), __ATOMIC_RELAXED);
	out->key = __atomic_load_n(cword(slot, OFF_KEY), __ATOMIC_RELAXED);
	out->inc = (uint32_t)il;
	out->len = lf & LEN_MASK;
	out->live = (lf & DXL_RECORD_LIVE) != 0;
}

uint64_t dxl_record_version(const void *slot)
{
	return __atomic_load_n(cword(slot, OFF_VERSION), __ATOMIC_ACQUIRE);
}

/* ---- readers ------------------------------------------------------------------ */

static inline uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8); /* a copy may be unaligned */
	return v;
}

int dxl_record_read_check(const void *bytes, uint32_t size,
			  struct dxl_record *out, void *value, uint32_t cap)
{
	if (!bytes || !out)
		return dxl_err_set(DXL_E_INVAL, "record check: NULL buffer");
	if (!slot_size_ok(size))
		return dxl_err_set(DXL_E_INVAL,
				   "record check: %u bytes is not a slot size (a multiple of 64 in 64..%d)",
				   size, DXL_RECORD_MAX_SLOT);
	const uint8_t *b = bytes;
	uint64_t v = get64(b + OFF_VERSION);
	if (v & 1)
		return dxl_err_set(DXL_E_AGAIN,
				   "record check: line 0 version %llu is odd (being written)",
				   (unsigned long long)v);
	uint32_t nlines = size / DXL_RECORD_LINE;
	for (uint32_t i = 1; i < nlines; i++) {
		uint64_t st = get64(b + i * DXL_RECORD_LINE);
		if (st != v)
			return dxl_err_set(DXL_E_AGAIN,
					   "record check: line %u stamp %llu, line 0 version %llu",
					   i, (unsigned long long)st,
					   (unsigned long long)v);
	}
	uint64_t il = get64(b + OFF_INCLEN);
	uint32_t inc = (uint32_t)il, lf = (uint32_t)(il >> 32);
	uint32_t len = lf & LEN_MASK, vcap = dxl_record_value_cap(size);
	bool live = (lf & DXL_RECORD_LIVE) != 0;
	if (lf & ~(LEN_MASK | DXL_RECORD_LIVE))
		return dxl_err_set(DXL_E_CORRUPT,
				   "record check: unknown flag bits 0x%08x (version %llu)",
				   lf & ~(LEN_MASK | DXL_RECORD_LIVE),
				   (unsigned long long)v);
	if (len > vcap)
		return dxl_err_set(DXL_E_CORRUPT,
				   "record check: value length %u, the slot holds %u",
				   len, vcap);
	if (live && inc == 0)
		return dxl_err_set(DXL_E_CORRUPT,
				   "record check: live record with incarnation 0");
	/* value bytes past the length are zero (the writers pad): anything else
	 * is not a record this code wrote */
	for (uint32_t vo = len; vo < vcap; vo++) {
		uint32_t at = vo < DXL_RECORD_HDR_VALUE
				      ? OFF_VAL0 + vo
				      : DXL_RECORD_LINE *
						(1 + (vo - DXL_RECORD_HDR_VALUE) /
							     DXL_RECORD_LINE_VALUE) +
					8 + (vo - DXL_RECORD_HDR_VALUE) % DXL_RECORD_LINE_VALUE;
		if (b[at])
			return dxl_err_set(DXL_E_CORRUPT,
					   "record check: value byte %u past the length %u is not zero",
					   vo, len);
	}
	if (value && len > cap)
		return dxl_err_set(DXL_E_TOOBIG,
				   "record check: value of %u bytes, buffer of %u",
				   len, cap);
	out->version = v;
	out->ts = get64(b + OFF_TS);
	out->key = get64(b + OFF_KEY);
	out->inc = inc;
	out->len = len;
	out->live = live;
	if (value && len) {
		uint32_t n = DXL_MIN(len, (uint32_t)DXL_RECORD_HDR_VALUE);
		memcpy(value, b + OFF_VAL0, n);
		for (uint32_t vo = n, i = 1; vo < len; vo += DXL_RECORD_LINE_VALUE, i++)
			memcpy((uint8_t *)value + vo, b + i * DXL_RECORD_LINE + 8,
			       DXL_MIN(len - vo, (uint32_t)DXL_RECORD_LINE_VALUE));
	}
	return 0;
}

/*
 * Who may call: any thread of the owner. A seqlock read: line 0's version
 * is odd during every write (local or remote write-back), so equal even
 * versions before and after the copy (acquire load, copy, acquire fence,
 * load) mean no write overlapped the copy.
 */
int dxl_record_read_local(const void *slot, uint32_t slot_size,
			  struct dxl_record *out, void *value, uint32_t cap,
			  unsigned tries)
{
	if (!slot || ((uintptr_t)slot & 7) || !slot_size_ok(slot_size))
		return dxl_err_set(DXL_E_INVAL,
				   "record read: NULL or misaligned slot, or bad slot size %u",
				   slot_size);
	uint64_t copy[DXL_RECORD_MAX_SLOT / 8];
	uint32_t nw = slot_size / 8;
	if (!tries)
		tries = 1000;
	for (unsigned t = 0; t < tries; t++) {
		uint64_t v1 = __atomic_load_n(cword(slot, OFF_VERSION),
					      __ATOMIC_ACQUIRE);
		if (v1 & 1) {
			dxl_cpu_relax();
			continue;
		}
		for (uint32_t i = 0; i < nw; i++)
			copy[i] = __atomic_load_n(cword(slot, 8 * i),
						  __ATOMIC_RELAXED);
		atomic_thread_fence(memory_order_acquire);
		uint64_t v2 = __atomic_load_n(cword(slot, OFF_VERSION),
					      __ATOMIC_RELAXED);
		if (v1 != v2) {
			dxl_cpu_relax();
			continue;
		}
		copy[0] = v1;
		int ret = dxl_record_read_check(copy, slot_size, out, value, cap);
		if (ret == DXL_E_AGAIN) /* no write overlapped: torn */
			dxl_err_prefix("record read: torn slot (a write cut by a crash; replay the log)");
		return ret;
	}
	return dxl_err_set(DXL_E_AGAIN,
			   "record read: still being written after %u tries", tries);
}

/* ---- one-sided write-back ------------------------------------------------------ */

uint32_t dxl_record_wb_bytes(uint32_t slot_size)
{
	return slot_size_ok(slot_size) ? slot_size + 16 : 0;
}

uint32_t dxl_record_wb_nwr(uint32_t slot_size)
{
	return slot_size_ok(slot_size) ? 2 * (slot_size / DXL_RECORD_LINE) + 1 : 0;
}

int dxl_record_wb_build(void *buf, uint32_t slot_size, uint64_t cur_version,
			const struct dxl_record *r, const void *value,
			uint64_t *version_out)
{
	int ret = check_write_args(buf, slot_size, r, value);
	if (ret)
		return ret;
	uint64_t nv = 0;
	if ((ret = new_version(cur_version, r, &nv)))
		return ret;
	uint8_t *b = buf;
	uint64_t odd = nv - 1, w;
	uint32_t nlines = slot_size / DXL_RECORD_LINE;
	/* the image: the new record with every stamp odd (phase 2) */
	memcpy(b + OFF_VERSION, &odd, 8);
	memcpy(b + OFF_TS, &r->ts, 8);
	memcpy(b + OFF_KEY, &r->key, 8);
	w = inclen_word(r);
	memcpy(b + OFF_INCLEN, &w, 8);
	for (uint32_t k = 0; k < DXL_RECORD_HDR_VALUE / 8; k++) {
		w = value_word(value, r->len, 8 * k);
		memcpy(b + OFF_VAL0 + 8 * k, &w, 8);
	}
	for (uint32_t i = 1; i < nlines; i++) {
		uint8_t *l = b + i * DXL_RECORD_LINE;
		uint32_t vo = DXL_RECORD_HDR_VALUE + (i - 1) * DXL_RECORD_LINE_VALUE;
		memcpy(l, &odd, 8);
		for (uint32_t k = 0; k < DXL_RECORD_LINE_VALUE / 8; k++) {
			w = value_word(value, r->len, vo + 8 * k);
			memcpy(l + 8 + 8 * k, &w, 8);
		}
	}
	memcpy(b + slot_size, &odd, 8);     /* phase 1's source */
	memcpy(b + slot_size + 8, &nv, 8);  /* phase 3's source */
	if (version_out)
		*version_out = nv;
	return 0;
}

static void wb_wr(struct dxl_wr *wr, void *local, uint32_t len, uint32_t lkey,
		  uint64_t raddr, uint32_t rkey)
{
	memset(wr, 0, sizeof(*wr));
	wr->op = DXL_WR_WRITE;
	wr->local = local;
	wr->len = len;
	wr->lkey = lkey;
	wr->remote_addr = raddr;
	wr->rkey = rkey;
}

int dxl_record_wb_chain(const void *buf, uint32_t slot_size, uint32_t lkey,
			uint64_t raddr, uint32_t rkey, struct dxl_wr *wr,
			uint32_t nwr)
{
	uint32_t need = dxl_record_wb_nwr(slot_size);
	if (!buf || !wr || !need || nwr < need)
		return dxl_err_set(DXL_E_INVAL,
				   "record write-back: bad slot size %u or %u requests for %u",
				   slot_size, nwr, need);
	uint8_t *b = (uint8_t *)(uintptr_t)buf; /* dxl_wr.local is not const */
	uint32_t nlines = slot_size / DXL_RECORD_LINE, k = 0;
	/* phase 1: every stamp odd, line 0 first */
	for (uint32_t i = 0; i < nlines; i++)
		wb_wr(&wr[k++], b + slot_size, 8, lkey,
		      raddr + (uint64_t)i * DXL_RECORD_LINE, rkey);
	/* phase 2: the new content, stamps still odd */
	wb_wr(&wr[k++], b, slot_size, lkey, raddr, rkey);
	/* phase 3: data lines' stamps, then line 0's version */
	for (uint32_t i = 1; i <= nlines; i++)
		wb_wr(&wr[k++], b + slot_size + 8, 8, lkey,
		      raddr + (uint64_t)(i % nlines) * DXL_RECORD_LINE, rkey);
	for (uint32_t i = 0; i + 1 < k; i++)
		wr[i].next = &wr[i + 1];
	return (int)k;
}

int dxl_record_wb_unlock_chain(const void *buf, uint32_t slot_size, uint32_t lkey,
			       uint64_t raddr, uint32_t rkey, uint64_t lock_raddr,
			       uint32_t lock_rkey, uint64_t owner, uint64_t *scratch,
			       struct dxl_wr *wr, uint32_t nwr)
{
	uint32_t need = dxl_record_wb_nwr(slot_size);
	if (!need || nwr < need + DXL_RECORD_WB_UNLOCK_EXTRA || !scratch ||
	    ((uintptr_t)scratch & 7) || (lock_raddr & 7) || !owner)
		return dxl_err_set(DXL_E_INVAL,
				   "record write-back and unlock: slot size %u, %u requests "
				   "for %u, scratch %p, lock word at %#llx, owner %#llx",
				   slot_size, nwr, need + DXL_RECORD_WB_UNLOCK_EXTRA,
				   (void *)scratch, (unsigned long long)lock_raddr,
				   (unsigned long long)owner);
	int k = dxl_record_wb_chain(buf, slot_size, lkey, raddr, rkey, wr, nwr);
	if (k < 0)
		return k;
	/* H9: the READ flushes every WRITE before it on this QP ... */
	struct dxl_wr *rd = &wr[k], *cas = &wr[k + 1];
	memset(rd, 0, sizeof(*rd));
	rd->op = DXL_WR_READ;
	rd->local = &scratch[0];
	rd->len = 8;
	rd->lkey = lkey;
	rd->remote_addr = raddr;
	rd->rkey = rkey;
	/* ... and executes before the unlock (RC order): durable, then free */
	memset(cas, 0, sizeof(*cas));
	cas->op = DXL_WR_CAS;
	cas->flags = DXL_WR_SIGNALED;
	cas->local = &scratch[1];
	cas->len = 8;
	cas->lkey = lkey;
	cas->remote_addr = lock_raddr;
	cas->rkey = lock_rkey;
	cas->compare_add = owner;
	cas->swap = 0;
	wr[k - 1].next = rd;
	rd->next = cas;
	return k + DXL_RECORD_WB_UNLOCK_EXTRA;
}

int dxl_record_wb_onesided_ok(enum dxl_fabric_provider p, enum dxl_durability d)
{
	/* tcp: one NIC thread executes a QP's requests one after the other and
	 * places a WRITE with memcpy, and a flush READ runs the region's
	 * persist function: ordered and durable in every mode */
	if (p == DXL_FABRIC_TCP)
		return 1;
	/* verbs: (1) WRITEs of one QP are not promised to land in posting
	 * order (docs/engine.md "Remote write-back"): no deployment may opt in
	 * today; (2) the flush READ persists only what the NIC placed in the
	 * persistence domain: persistent memory, not a file's page cache (the
	 * provider runs no persist function). (2) stays when (1) is lifted. */
	const bool ordered_placement = false;
	return ordered_placement && d == DXL_DUR_PMEM;
}
