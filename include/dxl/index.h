/* index.h -- the engine's one-sided-readable hash index (DrTM cluster chaining) and the coordinator's location cache */
#ifndef DXL_INDEX_H
#define DXL_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "dxl/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The hash index of one table of one shard maps a u64 key to a record slot
 * index (the table's store) and the low 14 bits of the record's incarnation
 * (DrTM, seed 002 L362-376; notes §A.3). It lives in one contiguous area
 * that the owner registers as one memory region (DXL_MR_REMOTE_READ), so a
 * coordinator finds a key with one-sided READs of 128-byte buckets.
 * docs/engine-index.md has the layout, the store ordering and why a
 * concurrent reader finds a key or misses safely.
 *
 * Area (every integer little-endian; hosts must be little-endian):
 *
 *   offset                      size
 *        0                       128  header: magic "DXLI" (u32), format (u32),
 *                                     n_buckets (u64), n_indirect (u64),
 *                                     seed (u64), area length (u64), zeros
 *      128          128*n_buckets     main buckets (n_buckets a power of two)
 *        .          128*n_indirect    indirect buckets (a pool shared by all
 *                                     chains; a bucket joins one chain for good)
 *
 * A bucket is 8 slots of 16 bytes {key u64, word u64}; word = type (2 bits,
 * 63..62) | lossy incarnation (14 bits, 61..48) | offset (48 bits, 47..0).
 *   EMPTY  (0): word is 0; the key field is meaningless (may be an old key)
 *   ENTRY  (1): key -> record slot index `offset`, incarnation & 0x3fff
 *   HEADER (2): only ever in slot 7; `offset` = index of the next (indirect)
 *               bucket of this chain; never changes back
 *   3 is invalid (DrTM's "Cached" type: our cache is keyed by bucket offset
 *   and never rewrites slots, see dxl_loccache below).
 *
 * Contract of a one-sided lookup: whatever dxl_index_bucket_find returns is a
 * hint. The caller READs the record at the slot and accepts it only if (1)
 * the slot index is below the table's slot count, (2) the record's key equals
 * the key, (3) the record is live, and (4) (record incarnation & 0x3fff)
 * equals the hint's lossy incarnation (dxl_index_inc_match). A mismatch means
 * the key changed (or a cached bucket is stale): drop the cache's buckets
 * (dxl_loccache_stale), retry once with fresh READs, then fall back to an RPC
 * lookup at the owner. ABSENT from fresh READs means the key had no entry at
 * some moment during the READs; ABSENT is never concluded from cached buckets.
 */

#define DXL_INDEX_MAGIC 0x494c5844u /* "DXLI" */
#define DXL_INDEX_FORMAT 1
#define DXL_INDEX_HDR_SIZE 128
#define DXL_INDEX_BUCKET_SIZE 128
#define DXL_INDEX_SLOTS 8 /* per bucket */
#define DXL_INDEX_INC_BITS 14
#define DXL_INDEX_INC_MASK ((1u << DXL_INDEX_INC_BITS) - 1)
#define DXL_INDEX_MAX_SLOT ((1ull << 48) - 1)     /* largest record slot index */
#define DXL_INDEX_MAX_BUCKETS (1ull << 36)        /* main buckets */
#define DXL_INDEX_MAX_INDIRECT (1ull << 36)       /* indirect buckets */

/* slot types (bits 63..62 of a slot's word) */
enum dxl_index_type {
	DXL_INDEX_EMPTY = 0,
	DXL_INDEX_ENTRY = 1,
	DXL_INDEX_HEADER = 2,
};

/* The decoded header: all a reader needs to address buckets. Plain data. */
struct dxl_index_hdr {
	uint32_t format;     /* DXL_INDEX_FORMAT */
	uint64_t n_buckets;  /* main buckets, a power of two */
	uint64_t n_indirect; /* indirect buckets in the pool */
	uint64_t seed;       /* hash seed */
	uint64_t len;        /* area bytes = 128 * (1 + n_buckets + n_indirect) */
};

/* A location: where the owner's index says a key's record is. */
struct dxl_index_loc {
	uint64_t slot;      /* record slot index in the table's store */
	uint16_t lossy_inc; /* incarnation & DXL_INDEX_INC_MASK at insert */
};

/* ---- owner side ----------------------------------------------------------- */

struct dxl_index;

struct dxl_index_cfg {
	uint64_t n_buckets;  /* main buckets: a power of two, 1..2^36 */
	uint64_t n_indirect; /* indirect bucket pool: 0..2^36 */
	uint64_t seed;       /* hash seed; default 0x64786c2d696478 */
};

/*
 * dxl_index_cfg_init -- defaults sized for `capacity` keys: n_buckets = the
 * power of two >= capacity/6 (6 of 8 slots used on average), n_indirect =
 * n_buckets/4 + 16 (at 6 keys per bucket about 15% of the buckets overflow
 * under a uniform hash; see docs/engine-index.md). capacity 0 counts as 1.
 */
void dxl_index_cfg_init(struct dxl_index_cfg *cfg, uint64_t capacity);

/*
 * dxl_index_new -- allocate and format an empty index (zeroed, page-aligned
 * anonymous memory; every slot EMPTY). Register dxl_index_mem() /
 * dxl_index_mem_len() as one region with DXL_MR_REMOTE_READ and hand peers
 * its descriptor; they decode the first DXL_INDEX_HDR_SIZE bytes.
 * Errors: DXL_E_INVAL (n_buckets not a power of two or out of range,
 * n_indirect out of range), DXL_E_NOMEM.
 */
int dxl_index_new(const struct dxl_index_cfg *cfg, struct dxl_index **out);

/* dxl_index_delete -- free the index (deregister its region first); *ix = NULL */
void dxl_index_delete(struct dxl_index **ix);

/* the area to register, its length, and its decoded header */
void *dxl_index_mem(const struct dxl_index *ix);
size_t dxl_index_mem_len(const struct dxl_index *ix);
void dxl_index_get_hdr(const struct dxl_index *ix, struct dxl_index_hdr *out);

/*
 * Writers: dxl_index_insert and dxl_index_remove change the index; calls on
 * one index must be serialized by the caller (the owner's RPC handler
 * thread, or a lock the caller holds). Readers: remote peers READ the area
 * at any time; dxl_index_lookup may run in any thread concurrently with the
 * writer. The writer never moves a slot except in one case: when an insert
 * finds its chain full, the last bucket's slot 7 entry is copied to slot 0
 * of a fresh indirect bucket, the new key to slot 1, and only then slot 7
 * becomes a HEADER to it (docs/engine-index.md: why a reader that sees any
 * moment of this still finds the moved key).
 */

/*
 * dxl_index_insert -- add key -> (slot, incarnation & 0x3fff) in the first
 * EMPTY slot of the key's chain, extending the chain by an indirect bucket
 * when it is full.
 * Errors: DXL_E_EXIST (the key has an entry; nothing changed), DXL_E_INVAL
 * (slot > DXL_INDEX_MAX_SLOT), DXL_E_FULL (the chain is full and the
 * indirect pool is used up; nothing changed).
 */
int dxl_index_insert(struct dxl_index *ix, uint64_t key, uint64_t slot,
		     uint32_t incarnation);

/*
 * dxl_index_lookup -- the key's location. Exact when called by the writer
 * (or under its lock). From another thread while the writer runs it has the
 * contract of a one-sided lookup: a key that is not being inserted or
 * removed meanwhile is found; a key being changed may be missed.
 * Errors: DXL_E_NOENT (no entry).
 */
int dxl_index_lookup(const struct dxl_index *ix, uint64_t key,
		     struct dxl_index_loc *out);

/*
 * dxl_index_remove -- delete the key's entry (its index slot becomes EMPTY
 * and is reused by a later insert into the chain; indirect buckets stay in
 * their chain). If old is not NULL it receives the removed location.
 * Errors: DXL_E_NOENT (no entry; nothing changed).
 */
int dxl_index_remove(struct dxl_index *ix, uint64_t key,
		     struct dxl_index_loc *old);

struct dxl_index_stats {
	uint64_t keys;          /* entries now */
	uint64_t n_buckets;     /* main buckets */
	uint64_t indirect_used; /* indirect buckets linked into chains */
	uint64_t indirect_total;
	uint64_t conversions;   /* slot-7 entries moved into a new indirect bucket */
};

/* dxl_index_stats -- counters (any thread; each field read atomically) */
void dxl_index_stats(const struct dxl_index *ix, struct dxl_index_stats *out);

/*
 * dxl_index_set_store_hook -- testing only: call fn(arg) right after every
 * 8-byte store that insert/remove make to the area, in the writer's thread,
 * so a test can take snapshots of each intermediate state (NULL = off).
 */
typedef void (*dxl_index_hook_fn)(void *arg);
void dxl_index_set_store_hook(struct dxl_index *ix, dxl_index_hook_fn fn,
			      void *arg);

/* ---- reader side: pure functions on bytes READ from the owner ------------- */

/*
 * dxl_index_hdr_decode -- decode the first DXL_INDEX_HDR_SIZE bytes of an
 * index area.
 * Errors: DXL_E_PROTO (len < DXL_INDEX_HDR_SIZE or bad magic),
 * DXL_E_VERSION (unknown format), DXL_E_CORRUPT (bucket counts out of range,
 * not a power of two, or a length that does not match them).
 */
int dxl_index_hdr_decode(const void *buf, size_t len, struct dxl_index_hdr *out);

/* dxl_index_hash -- the 64-bit mix of key under seed (murmur3's finalizer) */
uint64_t dxl_index_hash(uint64_t seed, uint64_t key);

/* dxl_index_bucket_addr -- byte offset in the area of key's main bucket */
uint64_t dxl_index_bucket_addr(const struct dxl_index_hdr *hdr, uint64_t key);

/* dxl_index_chain_max -- the most buckets a chain can have (n_indirect + 1):
 * a walk longer than this is corrupt */
uint64_t dxl_index_chain_max(const struct dxl_index_hdr *hdr);

enum dxl_index_result {
	DXL_INDEX_ABSENT = 0, /* no ENTRY for the key here and no next bucket */
	DXL_INDEX_FOUND = 1,  /* slot, lossy_inc: a hint, check the record */
	DXL_INDEX_NEXT = 2,   /* not here: READ the bucket at next_off */
};

struct dxl_index_find {
	enum dxl_index_result result;
	uint64_t slot;      /* FOUND */
	uint16_t lossy_inc; /* FOUND */
	uint64_t next_off;  /* NEXT: byte offset of the next bucket in the area */
	uint32_t reads;     /* dxl_loccache_resolve: READs it issued (0 = hit) */
};

/*
 * dxl_index_bucket_find -- look for key in one bucket (DXL_INDEX_BUCKET_SIZE
 * bytes as READ; any alignment). hdr bounds the HEADER's bucket index and
 * turns it into next_off. Returns the result (also in res->result).
 * Errors: DXL_E_CORRUPT (a slot of type 3, a HEADER outside slot 7, or a
 * HEADER to a bucket beyond the pool). res->reads is left as is.
 */
int dxl_index_bucket_find(const struct dxl_index_hdr *hdr, const void *bucket,
			  uint64_t key, struct dxl_index_find *res);

/* dxl_index_inc_match -- does a record's full incarnation match a hint? */
static inline int dxl_index_inc_match(uint16_t lossy_inc, uint32_t incarnation)
{
	return (incarnation & DXL_INDEX_INC_MASK) == lossy_inc;
}

/* ---- coordinator side: the location cache -------------------------------- */

/*
 * A location cache holds copies of one remote index's buckets (main and
 * indirect), direct-mapped by bucket offset, as DrTM's evaluated cache does
 * (002 L378-388, L425). It caches locations, never values, is never
 * invalidated by the owner, and is shared by all threads of a coordinator
 * process (per-line seqlocks: lookups never block; a fill that meets another
 * thread's fill of the same line is skipped). Staleness shows when the
 * record READ through a cached location fails the contract above: the
 * caller then calls dxl_loccache_stale() and resolves again with
 * DXL_LOCCACHE_FRESH.
 */
struct dxl_loccache;

/*
 * dxl_loccache_new -- a cache for the index described by hdr, using at most
 * `bytes` for its lines (144 bytes each: a 128-byte bucket and 16 bytes of
 * seqlock and tag; the line count is the largest power of two that fits).
 * Errors: DXL_E_INVAL (NULL hdr, or bytes below one line), DXL_E_NOMEM.
 */
int dxl_loccache_new(const struct dxl_index_hdr *hdr, size_t bytes,
		     struct dxl_loccache **out);

/* dxl_loccache_delete -- free it (no thread may still use it); *c = NULL */
void dxl_loccache_delete(struct dxl_loccache **c);

/* dxl_loccache_lines -- number of lines (buckets it can hold) */
size_t dxl_loccache_lines(const struct dxl_loccache *c);

/*
 * dxl_loccache_read_fn -- READ DXL_INDEX_BUCKET_SIZE bytes at byte offset
 * off of the remote index area into buf; 0 or a negative DXL_E_* code. It may
 * block or yield a coroutine; the cache holds no lock while it runs.
 */
typedef int (*dxl_loccache_read_fn)(void *arg, uint64_t off, void *buf);

enum dxl_loccache_flags {
	DXL_LOCCACHE_FRESH = 1u << 0, /* do not use cached buckets (still fill) */
};

/*
 * dxl_loccache_resolve -- find key: walk its chain through cached buckets;
 * on a missing bucket READ it (and the rest of the chain) with read(arg, ..)
 * and cache what was READ. A walk through cached buckets that ends ABSENT is
 * redone with fresh READs from the main bucket (cached buckets may predate
 * an insert). Returns DXL_INDEX_FOUND (res->slot, res->lossy_inc: a hint to
 * check as above) or DXL_INDEX_ABSENT (only from fresh READs); res->reads
 * says how many READs it issued.
 * Errors: whatever read returns; DXL_E_CORRUPT (a bad bucket or a chain
 * longer than dxl_index_chain_max).
 */
int dxl_loccache_resolve(struct dxl_loccache *c, uint64_t key, unsigned flags,
			 dxl_loccache_read_fn read, void *arg,
			 struct dxl_index_find *res);

/*
 * The steps of dxl_loccache_resolve, for callers that issue READs their own
 * way (e.g. several lookups in one doorbell batch):
 *
 * dxl_loccache_get -- copy the cached bucket at byte offset off into buf
 * (DXL_INDEX_BUCKET_SIZE bytes). Returns 1 (hit) or 0 (not cached, or being
 * filled by another thread right now: a miss, not an error).
 *
 * dxl_loccache_fill -- cache the bucket at byte offset off (as just READ).
 * Replaces whatever bucket shares its line (an eviction); skipped if
 * another thread is writing that line at this moment.
 */
int dxl_loccache_get(struct dxl_loccache *c, uint64_t off, void *buf);
void dxl_loccache_fill(struct dxl_loccache *c, uint64_t off, const void *buf);

/*
 * dxl_loccache_stale -- the caller found the location of key stale (record
 * key or incarnation mismatch): drop key's main bucket and every cached
 * bucket of its chain reachable through the cached copies.
 */
void dxl_loccache_stale(struct dxl_loccache *c, uint64_t key);

struct dxl_loccache_stats {
	uint64_t hits;      /* resolves answered without a READ */
	uint64_t misses;    /* resolves that READ at least one bucket */
	uint64_t reads;     /* bucket READs issued by resolves */
	uint64_t fills;     /* buckets stored */
	uint64_t evictions; /* fills that replaced another bucket */
	uint64_t stale;     /* dxl_loccache_stale calls */
	uint64_t dropped;   /* lines dropped by them */
};

/* dxl_loccache_stats -- counters since creation (any thread) */
void dxl_loccache_stats(const struct dxl_loccache *c,
			struct dxl_loccache_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* DXL_INDEX_H */
