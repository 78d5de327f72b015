/* hash.c -- the one-sided-readable hash index: DrTM cluster chaining, owner and reader sides */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/common.h"
#include "dxl/index.h"

/*
 * Layout and rules: include/dxl/index.h; the ordering argument:
 * docs/engine-index.md. Every 8-byte word of the area is written by the
 * writer with one atomic store and read by local readers with one atomic
 * load: remote readers (the NIC's DMA) see each aligned word whole, in some
 * order, and the contract lets them be wrong only in ways the record check
 * catches.
 */

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "the index area is little-endian and accessed in host order");

#define TYPE_SHIFT 62
#define INC_SHIFT 48
#define OFF_MASK ((1ull << 48) - 1)
#define WORDS_PER_BUCKET (DXL_INDEX_BUCKET_SIZE / 8)
#define LAST (DXL_INDEX_SLOTS - 1)

/* header field offsets */
#define H_MAGIC 0
#define H_FORMAT 4
#define H_NBUCKETS 8
#define H_NINDIRECT 16
#define H_SEED 24
#define H_LEN 32

#define DEFAULT_SEED 0x64786c2d696478ull /* "dxl-idx" */

struct dxl_index {
	uint64_t *mem; /* the area, as words */
	size_t len;
	struct dxl_index_hdr hdr;
	uint64_t mask; /* n_buckets - 1 */
	/* writer-only state, published to readers of stats with atomics */
	_Atomic uint64_t keys;
	_Atomic uint64_t indirect_used; /* next free pool bucket (bump) */
	_Atomic uint64_t conversions;
	dxl_index_hook_fn hook;
	void *hook_arg;
};

/* ---- words ------------------------------------------------------------------ */

static inline uint64_t mk_word(enum dxl_index_type t, uint32_t inc, uint64_t off)
{
	return (uint64_t)t << TYPE_SHIFT |
	       (uint64_t)(inc & DXL_INDEX_INC_MASK) << INC_SHIFT | (off & OFF_MASK);
}

static inline unsigned w_type(uint64_t w)
{
	return (unsigned)(w >> TYPE_SHIFT);
}

static inline uint16_t w_inc(uint64_t w)
{
	return (uint16_t)((w >> INC_SHIFT) & DXL_INDEX_INC_MASK);
}

static inline uint64_t w_off(uint64_t w)
{
	return w & OFF_MASK;
}

static inline uint64_t rd_le64(const void *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static inline uint32_t rd_le32(const void *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* ---- hash and addressing ----------------------------------------------------- */

uint64_t dxl_index_hash(uint64_t seed, uint64_t key)
{
	/* the seed is mixed first so that related seeds give unrelated maps */
	return dxl_fmix64(key ^ dxl_fmix64(seed + 0x9e3779b97f4a7c15ull));
}

static inline uint64_t bucket_off(uint64_t bucket_no)
{
	return DXL_INDEX_HDR_SIZE + bucket_no * DXL_INDEX_BUCKET_SIZE;
}

uint64_t dxl_index_bucket_addr(const struct dxl_index_hdr *hdr, uint64_t key)
{
	return bucket_off(dxl_index_hash(hdr->seed, key) & (hdr->n_buckets - 1));
}

uint64_t dxl_index_chain_max(const struct dxl_index_hdr *hdr)
{
	return hdr->n_indirect + 1;
}

static bool is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

static int check_counts(uint64_t nb, uint64_t ni)
{
	return is_pow2(nb) && nb <= DXL_INDEX_MAX_BUCKETS &&
	       ni <= DXL_INDEX_MAX_INDIRECT;
}

int dxl_index_hdr_decode(const void *buf, size_t len, struct dxl_index_hdr *out)
{
	if (!buf || !out || len < DXL_INDEX_HDR_SIZE)
		return dxl_err_set(DXL_E_PROTO,
				   "index header: %zu bytes, need %d", len,
				   DXL_INDEX_HDR_SIZE);
	const uint8_t *p = buf;
	uint32_t magic = rd_le32(p + H_MAGIC);
	if (magic != DXL_INDEX_MAGIC)
		return dxl_err_set(DXL_E_PROTO,
				   "index header: magic 0x%08x, want 0x%08x",
				   magic, DXL_INDEX_MAGIC);
	struct dxl_index_hdr h = {
		.format = rd_le32(p + H_FORMAT),
		.n_buckets = rd_le64(p + H_NBUCKETS),
		.n_indirect = rd_le64(p + H_NINDIRECT),
		.seed = rd_le64(p + H_SEED),
		.len = rd_le64(p + H_LEN),
	};
	if (h.format != DXL_INDEX_FORMAT)
		return dxl_err_set(DXL_E_VERSION,
				   "index header: format %u, this build reads %d",
				   h.format, DXL_INDEX_FORMAT);
	if (!check_counts(h.n_buckets, h.n_indirect) ||
	    h.len != bucket_off(h.n_buckets + h.n_indirect))
		return dxl_err_set(DXL_E_CORRUPT,
				   "index header: %llu main buckets, %llu indirect, "
				   "length %llu do not fit together",
				   (unsigned long long)h.n_buckets,
				   (unsigned long long)h.n_indirect,
				   (unsigned long long)h.len);
	*out = h;
	return 0;
}

/* ---- reader side --------------------------------------------------------------- */

int dxl_index_bucket_find(const struct dxl_index_hdr *hdr, const void *bucket,
			  uint64_t key, struct dxl_index_find *res)
{
	const uint8_t *b = bucket;
	int found = -1;
	uint64_t fw = 0;
	/* validate every slot, so a bucket that is cached has been checked whole */
	for (int s = 0; s < DXL_INDEX_SLOTS; s++) {
		uint64_t k = rd_le64(b + 16 * s);
		uint64_t w = rd_le64(b + 16 * s + 8);
		unsigned t = w_type(w);
		if (t == DXL_INDEX_ENTRY) {
			if (k == key && found < 0) {
				found = s;
				fw = w;
			}
		} else if (t == DXL_INDEX_HEADER) {
			if (s != LAST || w_off(w) >= hdr->n_indirect)
				return dxl_err_set(DXL_E_CORRUPT,
						   "index bucket: slot %d is a header "
						   "to indirect bucket %llu of %llu",
						   s, (unsigned long long)w_off(w),
						   (unsigned long long)hdr->n_indirect);
		} else if (t != DXL_INDEX_EMPTY) {
			return dxl_err_set(DXL_E_CORRUPT,
					   "index bucket: slot %d has type %u", s, t);
		}
	}
	if (found >= 0) {
		res->result = DXL_INDEX_FOUND;
		res->slot = w_off(fw);
		res->lossy_inc = w_inc(fw);
		return DXL_INDEX_FOUND;
	}
	uint64_t last = rd_le64(b + 16 * LAST + 8);
	if (w_type(last) == DXL_INDEX_HEADER) {
		res->result = DXL_INDEX_NEXT;
		res->next_off = bucket_off(hdr->n_buckets + w_off(last));
		return DXL_INDEX_NEXT;
	}
	res->result = DXL_INDEX_ABSENT;
	return DXL_INDEX_ABSENT;
}

/* ---- owner side ------------------------------------------------------------------ */

void dxl_index_cfg_init(struct dxl_index_cfg *cfg, uint64_t capacity)
{
	if (capacity == 0)
		capacity = 1;
	uint64_t want = (capacity + 5) / 6;
	uint64_t nb = 1;
	while (nb < want && nb < DXL_INDEX_MAX_BUCKETS)
		nb <<= 1;
	cfg->n_buckets = nb;
	cfg->n_indirect = nb / 4 + 16;
	cfg->seed = DEFAULT_SEED;
}

int dxl_index_new(const struct dxl_index_cfg *cfg, struct dxl_index **out)
{
	if (!cfg || !out)
		return dxl_err_set(DXL_E_INVAL, "dxl_index_new: NULL argument");
	if (!check_counts(cfg->n_buckets, cfg->n_indirect))
		return dxl_err_set(DXL_E_INVAL,
				   "dxl_index_new: %llu main buckets (need a power "
				   "of two <= 2^36), %llu indirect (<= 2^36)",
				   (unsigned long long)cfg->n_buckets,
				   (unsigned long long)cfg->n_indirect);
	struct dxl_index *ix = calloc(1, sizeof(*ix));
	if (!ix)
		return dxl_err_set(DXL_E_NOMEM, "dxl_index_new: no memory");
	size_t len = bucket_off(cfg->n_buckets + cfg->n_indirect);
	void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		free(ix);
		return dxl_err_set(DXL_E_NOMEM,
				   "dxl_index_new: cannot map %zu bytes", len);
	}
	ix->len = len;
	ix->mem = mem;
	ix->hdr = (struct dxl_index_hdr){
		.format = DXL_INDEX_FORMAT,
		.n_buckets = cfg->n_buckets,
		.n_indirect = cfg->n_indirect,
		.seed = cfg->seed,
		.len = ix->len,
	};
	ix->mask = cfg->n_buckets - 1;
	/* the header is written before anyone can see the area: plain stores */
	uint8_t *h = mem;
	uint32_t magic = DXL_INDEX_MAGIC, format = DXL_INDEX_FORMAT;
	memcpy(h + H_MAGIC, &magic, 4);
	memcpy(h + H_FORMAT, &format, 4);
	memcpy(h + H_NBUCKETS, &ix->hdr.n_buckets, 8);
	memcpy(h + H_NINDIRECT, &ix->hdr.n_indirect, 8);
	memcpy(h + H_SEED, &ix->hdr.seed, 8);
	memcpy(h + H_LEN, &ix->hdr.len, 8);
	atomic_init(&ix->keys, 0);
	atomic_init(&ix->indirect_used, 0);
	atomic_init(&ix->conversions, 0);
	*out = ix;
	return 0;
}

void dxl_index_delete(struct dxl_index **pix)
{
	if (!pix || !*pix)
		return;
	struct dxl_index *ix = *pix;
	munmap(ix->mem, ix->len);
	free(ix);
	*pix = NULL;
}

void *dxl_index_mem(const struct dxl_index *ix)
{
	return ix->mem;
}

size_t dxl_index_mem_len(const struct dxl_index *ix)
{
	return ix->len;
}

void dxl_index_get_hdr(const struct dxl_index *ix, struct dxl_index_hdr *out)
{
	*out = ix->hdr;
}

void dxl_index_set_store_hook(struct dxl_index *ix, dxl_index_hook_fn fn,
			      void *arg)
{
	ix->hook = fn;
	ix->hook_arg = arg;
}

void dxl_index_stats(const struct dxl_index *ix, struct dxl_index_stats *out)
{
	out->keys = atomic_load_explicit(&ix->keys, memory_order_relaxed);
	out->n_buckets = ix->hdr.n_buckets;
	out->indirect_used =
		atomic_load_explicit(&ix->indirect_used, memory_order_relaxed);
	out->indirect_total = ix->hdr.n_indirect;
	out->conversions =
		atomic_load_explicit(&ix->conversions, memory_order_relaxed);
}

/* word index of slot s of bucket number b (main 0.., then the pool) */
static inline uint64_t *slot_ptr(const struct dxl_index *ix, uint64_t b, int s)
{
	return ix->mem + (bucket_off(b) / 8) + 2 * (unsigned)s;
}

/* Loads: acquire on the word pairs with the writer's release store of it,
 * so a reader that sees an ENTRY or HEADER also sees what was stored
 * before it (the key; a new indirect bucket's contents). */
static inline uint64_t ld_word(const uint64_t *p)
{
	return __atomic_load_n(p + 1, __ATOMIC_ACQUIRE);
}

static inline uint64_t ld_key(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/*
 * Stores (writer only). On x86 both are plain movs in program order; the
 * release on the word keeps the compiler (and weaker CPUs) from moving the
 * key store, or a new bucket's stores, after it. The NIC's DMA sees each
 * aligned 8-byte store whole.
 */
static inline void st_key(struct dxl_index *ix, uint64_t *p, uint64_t key)
{
	__atomic_store_n(p, key, __ATOMIC_RELAXED);
	if (ix->hook)
		ix->hook(ix->hook_arg);
}

static inline void st_word(struct dxl_index *ix, uint64_t *p, uint64_t w)
{
	__atomic_store_n(p + 1, w, __ATOMIC_RELEASE);
	if (ix->hook)
		ix->hook(ix->hook_arg);
}

/* where a walk of key's chain stopped */
struct walk {
	uint64_t *hit;       /* the key's slot, or NULL */
	uint64_t hit_word;   /* its word as the walk saw it */
	uint64_t *empty;     /* first EMPTY slot in chain order, or NULL */
	uint64_t last;       /* the chain's last bucket number */
	uint64_t buckets;    /* buckets walked */
};

static void walk_chain(const struct dxl_index *ix, uint64_t key, struct walk *wk)
{
	uint64_t b = dxl_index_hash(ix->hdr.seed, key) & ix->mask;
	memset(wk, 0, sizeof(*wk));
	for (;;) {
		wk->buckets++;
		DXL_ASSERTF(wk->buckets <= ix->hdr.n_indirect + 1,
			    "index chain of key %llu longer than the pool",
			    (unsigned long long)key);
		uint64_t next = UINT64_MAX;
		for (int s = 0; s < DXL_INDEX_SLOTS; s++) {
			uint64_t *p = slot_ptr(ix, b, s);
			uint64_t w = ld_word(p);
			switch (w_type(w)) {
			case DXL_INDEX_ENTRY:
				if (ld_key(p) == key) {
					wk->hit = p;
					wk->hit_word = w;
					wk->last = b;
					return;
				}
				break;
			case DXL_INDEX_EMPTY:
				if (!wk->empty)
					wk->empty = p;
				break;
			case DXL_INDEX_HEADER:
				DXL_ASSERT(s == LAST && w_off(w) < ix->hdr.n_indirect);
				next = ix->hdr.n_buckets + w_off(w);
				break;
			default:
				DXL_ASSERTF(0, "index slot of type %u", w_type(w));
			}
		}
		if (next == UINT64_MAX) {
			wk->last = b;
			return;
		}
		b = next;
	}
}

int dxl_index_lookup(const struct dxl_index *ix, uint64_t key,
		     struct dxl_index_loc *out)
{
	struct walk wk;
	walk_chain(ix, key, &wk);
	if (!wk.hit)
		return dxl_err_set(DXL_E_NOENT, "index: no key %llu",
				   (unsigned long long)key);
	/* the word the walk matched, not a re-load: a concurrent remove
	 * could have emptied the slot since */
	uint64_t w = wk.hit_word;
	if (out) {
		out->slot = w_off(w);
		out->lossy_inc = w_inc(w);
	}
	return 0;
}

int dxl_index_insert(struct dxl_index *ix, uint64_t key, uint64_t slot,
		     uint32_t incarnation)
{
	if (slot > DXL_INDEX_MAX_SLOT)
		return dxl_err_set(DXL_E_INVAL,
				   "index insert of key %llu: slot %llu over 2^48-1",
				   (unsigned long long)key,
				   (unsigned long long)slot);
	struct walk wk;
	walk_chain(ix, key, &wk);
	if (wk.hit)
		return dxl_err_set(DXL_E_EXIST, "index: key %llu exists",
				   (unsigned long long)key);
	uint64_t entry = mk_word(DXL_INDEX_ENTRY, incarnation, slot);
	if (wk.empty) {
		/* key first: a reader that sees the ENTRY sees this key;
		 * one that sees the key with the old EMPTY word skips it */
		st_key(ix, wk.empty, key);
		st_word(ix, wk.empty, entry);
		atomic_fetch_add_explicit(&ix->keys, 1, memory_order_relaxed);
		return 0;
	}
	/* the chain is full: extend it by one pool bucket */
	uint64_t used = atomic_load_explicit(&ix->indirect_used,
					     memory_order_relaxed);
	if (used >= ix->hdr.n_indirect)
		return dxl_err_set(DXL_E_FULL,
				   "index: chain of key %llu is full (%llu buckets) "
				   "and all %llu indirect buckets are in use",
				   (unsigned long long)key,
				   (unsigned long long)wk.buckets,
				   (unsigned long long)ix->hdr.n_indirect);
	uint64_t nb = ix->hdr.n_buckets + used;
	uint64_t *last = slot_ptr(ix, wk.last, LAST);
	uint64_t *dst0 = slot_ptr(ix, nb, 0), *dst1 = slot_ptr(ix, nb, 1);
	/* pool buckets are never used before nor given back: still all zero */
	DXL_ASSERT(ld_word(dst0) == 0 && ld_word(dst1) == 0);
	/*
	 * 1. copy slot 7's entry into the new bucket, 2. put the new key next
	 * to it, 3. publish the bucket by turning slot 7 into a HEADER with
	 * one release store. Until 3 readers see slot 7's entry in place;
	 * from 3 on they follow the header, READ after they saw it, and find
	 * the copy (docs/engine-index.md, "The move").
	 */
	uint64_t moved_key = ld_key(last), moved_word = ld_word(last);
	DXL_ASSERT(w_type(moved_word) == DXL_INDEX_ENTRY);
	st_key(ix, dst0, moved_key);
	st_word(ix, dst0, moved_word);
	st_key(ix, dst1, key);
	st_word(ix, dst1, entry);
	atomic_store_explicit(&ix->indirect_used, used + 1, memory_order_relaxed);
	/* slot 7 keeps the moved key in its key field: HEADER ignores it */
	st_word(ix, last, mk_word(DXL_INDEX_HEADER, 0, used));
	atomic_fetch_add_explicit(&ix->conversions, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&ix->keys, 1, memory_order_relaxed);
	return 0;
}

int dxl_index_remove(struct dxl_index *ix, uint64_t key,
		     struct dxl_index_loc *old)
{
	struct walk wk;
	walk_chain(ix, key, &wk);
	if (!wk.hit)
		return dxl_err_set(DXL_E_NOENT, "index: no key %llu to remove",
				   (unsigned long long)key);
	uint64_t w = wk.hit_word;
	if (old) {
		old->slot = w_off(w);
		old->lossy_inc = w_inc(w);
	}
	/* the word alone: EMPTY from now on; the stale key field is ignored
	 * by readers and overwritten (first) by the next insert here */
	st_word(ix, wk.hit, 0);
	atomic_fetch_sub_explicit(&ix->keys, 1, memory_order_relaxed);
	return 0;
}
