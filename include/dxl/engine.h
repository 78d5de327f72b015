/* engine.h -- dxl's engine: records with per-line versions, tables, the record store, applying the log */
#ifndef DXL_ENGINE_H
#define DXL_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dxl/err.h"
#include "dxl/fabric.h"
#include "dxl/log.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * This header is the records / tables / store part of the engine. The hash
 * index (one-sided lookups) is include/dxl/index.h. docs/engine.md has the
 * decisions and the ordering arguments; docs/engine-design.md the choices
 * they implement.
 */

/* ---- records --------------------------------------------------------------- */

/*
 * A record slot is a sequence of 64-byte lines (FaRM-style per-line
 * versions, thesis B.6/B.10: one READ is never trusted as a snapshot across
 * lines). Host byte order (dxl's hosts are little-endian):
 *
 *   line 0   0  version u64        even = committed, odd = being written
 *            8  commit timestamp u64 (HLC)
 *           16  key u64
 *           24  incarnation u32    + 1 at every delete of the slot
 *           28  length|flags u32   bits 0..15 value length, bit 31 LIVE,
 *                                  every other bit 0
 *           32  value bytes 0..31
 *   line i   0  stamp u64          = line 0's version when consistent
 *    (i>=1)  8  value bytes 32+56*(i-1) .. +55
 *
 * Value bytes past the length are zero. A copy of a slot is consistent when
 * every stamp equals line 0's version and that version is even.
 *
 * The writer (who holds the record's lock) makes line 0's version odd
 * first; then, line by line in address order, it stores the line's stamp
 * odd, the line's value, and the line's stamp = the new version; line 0's
 * fields and value come last and its version becomes the new version with
 * the final store. Each line is thus its own seqlock: a line copied at any
 * single moment (what a DMA READ does per 64-byte line) either shows an odd
 * stamp or the complete content of one write. docs/engine.md "Records"
 * explains why the per-line odd stamp is needed (the plain "line 0 odd,
 * then lines, then line 0" order is not enough when a READ fetches lines in
 * any order) and which readers are safe on which provider.
 */
#define DXL_ENGINE_MAX_VALUE 4000 /* largest value size of a table */
#define DXL_RECORD_LINE 64
#define DXL_RECORD_HDR_VALUE 32  /* value bytes in line 0 */
#define DXL_RECORD_LINE_VALUE 56 /* value bytes in each further line */
#define DXL_RECORD_LIVE (1u << 31)
#define DXL_RECORD_MAX_SLOT 4608 /* dxl_record_slot_size(DXL_ENGINE_MAX_VALUE) */

/* A record's fields, as written (input) or as read (output). */
struct dxl_record {
	uint64_t version; /* write: the new version (even, >= 2) or 0 = the
			     current one + 2; read: the version */
	uint64_t ts;      /* commit timestamp */
	uint64_t key;
	uint32_t inc;     /* incarnation */
	uint32_t len;     /* value length in bytes */
	bool live;        /* false: a free (deleted or never used) slot */
};

/*
 * dxl_record_slot_size -- bytes of a slot for values of up to value_size
 * bytes: 64 * (1 + ceil((value_size - 32) / 56)), or 64 when value_size <=
 * 32. 0 if value_size is 0 or over DXL_ENGINE_MAX_VALUE.
 */
uint32_t dxl_record_slot_size(uint32_t value_size);

/* dxl_record_value_cap -- value bytes a slot of slot_size holds; 0 if
 * slot_size is not a valid slot size (a multiple of 64, 64..DXL_RECORD_MAX_SLOT) */
uint32_t dxl_record_value_cap(uint32_t slot_size);

/*
 * dxl_record_write -- the local writer protocol (above): write record r and
 * its value (r->len bytes; NULL if 0) into the slot at `slot` (64-byte
 * aligned, slot_size bytes) with C11 atomic stores and release fences, so
 * that concurrent readers (other threads, the NIC) see either an odd or
 * mismatched version or the whole record. The caller holds the record's
 * lock (or is the only writer, like the log applier); nothing is persisted
 * here (the store does that). *version_out (may be NULL) receives the
 * version written.
 * Errors (nothing written): DXL_E_INVAL (slot size, alignment, odd version,
 * NULL value with len > 0, live with incarnation 0), DXL_E_TOOBIG (len over
 * the slot's capacity).
 */
int dxl_record_write(void *slot, uint32_t slot_size, const struct dxl_record *r,
		     const void *value, uint64_t *version_out);

/*
 * dxl_record_read_check -- validate a copy of a slot (e.g. the bytes of a
 * one-sided READ of the whole slot; size = the slot size) and extract it:
 * the fields into *out and the value into value[0..cap) (value may be NULL
 * to take the fields only; a value longer than cap is DXL_E_TOOBIG).
 * Returns 0 if consistent, or
 *   DXL_E_AGAIN    a writer was active: line 0's version is odd or a stamp
 *                  differs from it ("line 3 stamp 12, line 0 version 14");
 *                  READ again (after a crash: the slot is torn until the log
 *                  is replayed);
 *   DXL_E_CORRUPT  consistent but impossible (length over the capacity,
 *                  unknown flag bits, live with incarnation 0);
 *   DXL_E_INVAL    size is not a slot size, NULL pointers.
 */
int dxl_record_read_check(const void *bytes, uint32_t size,
			  struct dxl_record *out, void *value, uint32_t cap);

/*
 * dxl_record_read_local -- the owner's CPU reading a slot in its own memory
 * while writers may be active: a seqlock read (line 0's version, a copy
 * with atomic loads, an acquire fence, the version again) checked like
 * dxl_record_read_check. Retries up to `tries` times (0 = 1000) while a
 * writer is active, then DXL_E_AGAIN. Other errors as dxl_record_read_check.
 */
int dxl_record_read_local(const void *slot, uint32_t slot_size,
			  struct dxl_record *out, void *value, uint32_t cap,
			  unsigned tries);

/* dxl_record_version -- line 0's version (an acquire load; odd = being written) */
uint64_t dxl_record_version(const void *slot);

/*
 * One-sided write-back: a coordinator that holds a remote record's lock
 * writes the new record into the remote slot with WRITEs on ONE QP:
 *
 *   phase 1  n WRITEs of 8 bytes: every line's stamp (line 0's version
 *            first) := odd
 *   phase 2  one WRITE of the whole slot image: new header and value, every
 *            stamp still odd
 *   phase 3  n WRITEs of 8 bytes: every data line's stamp := new version,
 *            line 0's version last
 *
 * (n = slot_size / 64.) Correct only where the provider places the WRITEs
 * of one QP in posting order (each one complete before the next lands);
 * the order inside one WRITE does not matter. The tcp provider does
 * (docs/engine.md: "Remote write-back"); RDMA hardware does not promise it
 * (the IB spec orders execution, not the visibility of placed data; rdma-
 * core's ibv_query_qp_data_in_order speaks only of data within one WQE), so
 * on verbs the owner's CPU applies write-backs (RPC; dxl_store_update).
 * See dxl_record_wb_onesided_ok.
 *
 * The chain's buffer (dxl_record_wb_bytes) holds the image, then the odd
 * word, then the new-version word; it must stay registered and unchanged
 * until the chain completes.
 */
/* bytes of a write-back buffer for slot_size (0 if slot_size is invalid) */
uint32_t dxl_record_wb_bytes(uint32_t slot_size);
/* work requests of a write-back chain: 2 * slot_size / 64 + 1 (0 if invalid) */
uint32_t dxl_record_wb_nwr(uint32_t slot_size);

/*
 * dxl_record_wb_build -- fill buf (8-byte aligned, dxl_record_wb_bytes) for
 * writing r and its value over a slot whose current version is cur_version
 * (read under the lock). r->version 0 = cur_version + 2.
 * *version_out (may be NULL) receives the new version.
 * Errors: DXL_E_INVAL, DXL_E_TOOBIG (as dxl_record_write).
 */
int dxl_record_wb_build(void *buf, uint32_t slot_size, uint64_t cur_version,
			const struct dxl_record *r, const void *value,
			uint64_t *version_out);

/*
 * dxl_record_wb_chain -- fill wr[0 .. dxl_record_wb_nwr) with the three
 * phases above, linked in order (wr[last].next = NULL), all unsignalled
 * (flags 0, wr_id 0): the caller signals the last one or links a flush READ
 * after it (H9) and posts the chain on one QP. buf was built by
 * dxl_record_wb_build and lies in a region with lkey; raddr/rkey address
 * the remote slot. Returns the number of requests, or DXL_E_INVAL
 * (slot_size invalid, nwr too small, NULL pointers).
 */
int dxl_record_wb_chain(const void *buf, uint32_t slot_size, uint32_t lkey,
			uint64_t raddr, uint32_t rkey, struct dxl_wr *wr,
			uint32_t nwr);

/*
 * dxl_record_wb_unlock_chain -- a lock holder's whole commit of one record
 * on ONE QP: the write-back (dxl_record_wb_chain), then a flush READ of the
 * slot's first 8 bytes, then the unlock: a CAS of the lock word at
 * lock_raddr/lock_rkey from owner to 0. Only the CAS is signalled.
 *
 * The order is the rule "durable before unlocked": the READ, executed
 * after the WRITEs on the same QP, makes them durable at the target (H9,
 * 000 L665-675) before the CAS can free the word, so whoever sees the lock
 * word free (a new lock holder, the log's retention) sees a record that a
 * power failure keeps (docs/engine.md "When a write-back is durable").
 *
 * scratch: 16 bytes, 8-aligned, in the region of lkey: [0] receives the
 * READ, [1] the CAS's old value (== owner when the unlock took effect).
 * Returns the number of requests (dxl_record_wb_nwr + 2), or DXL_E_INVAL.
 */
#define DXL_RECORD_WB_UNLOCK_EXTRA 2
int dxl_record_wb_unlock_chain(const void *buf, uint32_t slot_size, uint32_t lkey,
			       uint64_t raddr, uint32_t rkey, uint64_t lock_raddr,
			       uint32_t lock_rkey, uint64_t owner, uint64_t *scratch,
			       struct dxl_wr *wr, uint32_t nwr);

/*
 * dxl_record_wb_onesided_ok -- 1 if a coordinator may write records back
 * one-sided (dxl_record_wb_unlock_chain) into a store served by provider
 * p with durability d, else 0 (write back through the owner's CPU). Two
 * conditions: the provider places the WRITEs of one QP in posting order
 * (the chain is then safe against concurrent one-sided readers), and the
 * chain's flush READ makes them durable. tcp: both, in every mode (it runs
 * the region's persist function for the flush). verbs: no placement order
 * is promised, so 0 today; and even with it, only a store in persistent
 * memory (DXL_DUR_PMEM: the NIC's READ is the flush) could qualify -- the
 * provider persists nothing else (fabric.h), and such a store registers
 * its records without DXL_MR_REMOTE_WRITE (dxl_store_register).
 */
int dxl_record_wb_onesided_ok(enum dxl_fabric_provider p, enum dxl_durability d);

/* ---- tables and the record store ------------------------------------------ */

/*
 * A store is one persistent region (log/region.c, kind DXL_REGION_STORE)
 * holding the record slots of every table of one shard replica, with a
 * catalog of the tables fixed at creation; plus, in DRAM, one lock word per
 * slot (8 bytes, slot i of a table at locks + 8*i) and the owner's key ->
 * slot map and free lists, rebuilt at open by scanning the slots.
 * docs/engine.md "Tables and the record store".
 *
 * Region data area:
 *   0      catalog (4096 B): magic "DXLSTOR\0", format, shard, ntables,
 *          CRC32C, data size, then per table {id, value_size, slot_size,
 *          capacity, offset of its slots}; at DXL_STORE_FLOOR_OFF + 8 i
 *          (outside the CRC) the reclaim floor of the catalog's i-th table
 *          (le64, 0 = none: see dxl_store_reclaim_floor)
 *   4096   table 0's slots (capacity * slot_size, padded to 4096), table 1's ...
 *
 * So the catalog of a store whose tables a peer READs is at the smallest
 * records.addr of its dxl_table_desc minus DXL_STORE_CATALOG_SIZE.
 */
#define DXL_STORE_CATALOG_SIZE 4096u
#define DXL_STORE_FLOOR_OFF 3584u
#define DXL_REGION_STORE 2u /* region kind, next to DXL_REGION_LOG (log.h) */
#define DXL_STORE_MAX_TABLES 64
#define DXL_TABLE_MAX_CAPACITY (1ull << 30) /* slots per table */

struct dxl_table_schema {
	uint32_t id;         /* unique within the store */
	uint32_t value_size; /* 1..DXL_ENGINE_MAX_VALUE */
	uint64_t capacity;   /* slots, 1..DXL_TABLE_MAX_CAPACITY */
};

/*
 * Who changes lock words: one switch per deployment, never mixed (DrTM L242,
 * DrTM+H L281; RDMA atomics are not atomic with CPU atomics, thesis B.10.7).
 *   DXL_LOCKS_NIC  every lock and unlock, the owner's own too, is a fabric
 *                  CAS; the owner's CPU only reads lock words.
 *   DXL_LOCKS_CPU  every lock and unlock is done by the owner's CPU
 *                  (dxl_store_lock/unlock, from RPC handlers); peers may
 *                  READ lock words but never CAS them.
 */
enum dxl_lock_mode {
	DXL_LOCKS_NIC = 0,
	DXL_LOCKS_CPU = 1,
};

/* A lock word: 0 = free, else the owner (coordinator id, transaction sequence) */
#define DXL_LOCK_OWNER(coord, seq)                                            \
	(((uint64_t)(coord) << 48) | ((uint64_t)(seq) & ((1ull << 48) - 1)))

/*
 * Observers of the key -> slot map, e.g. the hash index (index.h) that
 * peers READ: insert is called before a new record becomes live (a failure,
 * e.g. DXL_E_FULL, aborts the insert: nothing changed), remove after a
 * record was deleted. Called with the table's mutex held; they must not
 * call back into the store.
 */
struct dxl_store_hooks {
	int (*insert)(void *arg, uint32_t table, uint64_t key, uint64_t slot,
		      uint32_t inc);
	void (*remove)(void *arg, uint32_t table, uint64_t key, uint64_t slot);
	void *arg;
};

struct dxl_store_cfg {
	enum dxl_lock_mode lock_mode; /* default DXL_LOCKS_CPU */
	struct dxl_store_hooks hooks; /* default none */
	/* keep every tombstone until dxl_store_set_reclaim_ts passes its
	 * commit timestamp (a replica of the log: docs/engine.md
	 * "Tombstones"); false (default): a tombstone's slot is reused when
	 * it is the oldest free one */
	bool keep_tombstones;
};

void dxl_store_cfg_init(struct dxl_store_cfg *cfg);

struct dxl_store;

/*
 * dxl_store_bytes -- the region data size a store of these tables needs
 * (0 if a schema is invalid or ids repeat).
 */
uint64_t dxl_store_bytes(const struct dxl_table_schema *tables, unsigned n);

/*
 * dxl_store_create -- create the region file at path (must not exist) for
 * the given tables, write and persist the catalog, and open it (every slot
 * free). id is the owner (cluster, node, epoch; its kind is ignored:
 * DXL_REGION_STORE). cfg may be NULL (defaults).
 * Errors: DXL_E_INVAL (no tables, more than DXL_STORE_MAX_TABLES, a bad
 * schema, repeated table id, bad cfg), DXL_E_EXIST, DXL_E_NOTSUP (pmem mode
 * without DAX), DXL_E_IO, DXL_E_NOMEM.
 */
int dxl_store_create(const char *path, enum dxl_durability mode,
		     const struct dxl_region_id *id, uint32_t shard,
		     const struct dxl_table_schema *tables, unsigned ntables,
		     const struct dxl_store_cfg *cfg, struct dxl_store **out);

/*
 * dxl_store_open -- open an existing store: check the region (as
 * dxl_region_open with kind DXL_REGION_STORE) and the catalog, then scan
 * every slot: a consistent slot that is live (LIVE flag, incarnation > 0)
 * goes into the key map, any other consistent slot into the free list; a
 * torn slot (a write cut by a crash) that claims LIVE for a key no
 * consistent slot holds stays reserved for it, marked torn (reads say
 * DXL_E_AGAIN) until the log's replay rewrites it; any other torn slot is
 * rewritten as a free record (incarnation + 1: the one write at open, done
 * after every check passed) and freed.
 * Errors (nothing changed, nothing written): those of dxl_region_open
 * (DXL_E_NOENT, DXL_E_CORRUPT for a truncated file, DXL_E_STALE,
 * DXL_E_CONFIG, ...), DXL_E_CORRUPT (bad catalog: magic, checksum, tables
 * beyond the region; a consistent slot with impossible fields; two
 * consistent live slots with one key), DXL_E_VERSION, DXL_E_NOMEM.
 */
int dxl_store_open(const char *path, enum dxl_durability mode,
		   const struct dxl_region_id *expect,
		   const struct dxl_store_cfg *cfg, struct dxl_store **out);

/* dxl_store_close -- deregister (if registered), free, unmap; *s = NULL.
 * Persists nothing: every change was persisted when made. */
void dxl_store_close(struct dxl_store **s);

uint32_t dxl_store_shard(const struct dxl_store *s);
unsigned dxl_store_ntables(const struct dxl_store *s);
struct dxl_region *dxl_store_region(const struct dxl_store *s);
enum dxl_lock_mode dxl_store_lock_mode(const struct dxl_store *s);

/* dxl_store_schema -- the schema of table `id`; DXL_E_NOENT if unknown */
int dxl_store_schema(const struct dxl_store *s, uint32_t id,
		     struct dxl_table_schema *out);
/* dxl_store_table_at -- the schema of the i-th table (0..ntables-1) */
int dxl_store_table_at(const struct dxl_store *s, unsigned i,
		       struct dxl_table_schema *out);

/* What the scan at open found, and how full the tables are now. */
struct dxl_store_stats {
	uint64_t live;  /* slots holding a live record */
	uint64_t free;  /* slots in the free lists */
	uint64_t torn;  /* live slots still torn (cut by a crash, not yet replayed) */
	uint64_t torn_at_open; /* torn slots the scan at open found */
	uint64_t tombstones; /* free slots that are a deleted key's tombstone */
};
/* table = UINT32_MAX: all tables; DXL_E_NOENT for an unknown table */
int dxl_store_stats(const struct dxl_store *s, uint32_t table,
		    struct dxl_store_stats *out);

/*
 * Owner operations. Thread safety: each table has a mutex for its key map
 * and free list (insert, delete, apply, find take it); dxl_store_update and
 * reads do not. A record is written only by the holder of its lock (or,
 * on a backup, by the single log applier), so writes of one slot never race.
 * Versions: an insert's version is the table's largest version + 2, an
 * update's or delete's the record's version + 2; so every key's versions
 * grow over its whole history (deletes and re-inserts included) and every
 * slot's versions grow (docs/engine.md: what the log's replay relies on).
 */

/*
 * dxl_store_insert -- take a free slot (first in, first out; slots whose
 * lock word is not 0 are passed over), write a live record {key, ts,
 * value} into it (the slot keeps its incarnation; a never-used slot gets
 * 1), persist it, and map the key.
 * *slot and *version (either may be NULL) receive where and which version.
 * Errors (nothing changed): DXL_E_NOENT (unknown table), DXL_E_TOOBIG
 * (len over the table's value size), DXL_E_EXIST (the key is live or torn
 * in this table), DXL_E_FULL (no free slot), DXL_E_INVAL, or the insert
 * hook's error.
 */
int dxl_store_insert(struct dxl_store *s, uint32_t table, uint64_t key,
		     uint64_t ts, const void *value, uint32_t len,
		     uint64_t *slot, uint64_t *version);

/*
 * dxl_store_insert_owned -- dxl_store_insert, with the new record's lock
 * word set to owner (!= 0) before the record becomes live or the index
 * names it: a transaction's insert, held until its commit (write-back not
 * needed, unlock) or abort (delete, unlock). The word is taken with a CAS
 * 0 -> owner (NIC mode: through the lock agent): a peer with a stale
 * location may CAS the word of a free slot at any moment, and a slot it
 * holds is left to it (the next free slot is tried). owner 0 =
 * dxl_store_insert. Errors: as dxl_store_insert; NIC mode: see "Who
 * changes a lock word" below (nothing changed).
 */
int dxl_store_insert_owned(struct dxl_store *s, uint32_t table, uint64_t key,
			   uint64_t ts, const void *value, uint32_t len,
			   uint64_t owner, uint64_t *slot, uint64_t *version);

/*
 * dxl_store_insert_at -- dxl_store_insert_owned with the record's version
 * given (even, >= 2): a logged insert made live for its transaction still
 * in doubt (a promoted primary's gate). Returns 1 (inserted), 0 (nothing:
 * the key's tombstone has this version or a later one) or the errors of
 * dxl_store_insert_owned.
 */
int dxl_store_insert_at(struct dxl_store *s, uint32_t table, uint64_t key,
			uint64_t version, uint64_t ts, const void *value, uint32_t len,
			uint64_t owner, uint64_t *slot);

/*
 * dxl_store_update -- write a new value into the live record at slot
 * (version + 2) and persist it. The caller holds the record's lock: its
 * lock word must equal lock_owner.
 * Errors (nothing changed): DXL_E_NOENT (unknown table, slot out of range,
 * slot not live), DXL_E_STATE (the lock word is not lock_owner),
 * DXL_E_TOOBIG, DXL_E_INVAL.
 */
int dxl_store_update(struct dxl_store *s, uint32_t table, uint64_t slot,
		     uint64_t lock_owner, uint64_t ts, const void *value,
		     uint32_t len, uint64_t *version);

/*
 * dxl_store_delete -- logical delete of the live record at slot: its
 * incarnation + 1, not LIVE, value emptied, version + 2; persisted; the key
 * unmapped and the slot appended to the free list. The caller holds the
 * lock (lock_owner, as for update) and releases it afterwards; the slot is
 * not reused while its lock word is set.
 * Errors: as dxl_store_update.
 */
int dxl_store_delete(struct dxl_store *s, uint32_t table, uint64_t slot,
		     uint64_t lock_owner, uint64_t ts, uint64_t *version);

struct dxl_store_absence;

/*
 * dxl_store_undo_insert -- undo an insert that never committed: the live
 * record at slot (locked by lock_owner) goes and its key's absence becomes
 * exactly the one the insert replaced, was (dxl_store_absence of the key
 * just before the insert) -- as on every replica that never saw the
 * insert (its transaction's write set was never applied there): with a
 * tombstone (was->slot != UINT64_MAX) the slot becomes that tombstone, its
 * version and timestamp; without one the key is unmapped and the slot is
 * free, no tombstone: on disk a free record of incarnation 0, as a
 * never-used slot's, which names no key (a store opened, a state transfer
 * or a digest reading slot by slot take no tombstone from it). The caller
 * releases the lock afterwards.
 * Errors: as dxl_store_delete; DXL_E_INVAL (was's version odd).
 */
int dxl_store_undo_insert(struct dxl_store *s, uint32_t table, uint64_t slot,
			  uint64_t lock_owner, const struct dxl_store_absence *was);

/*
 * dxl_store_read -- read the record at slot (dxl_record_read_local): fields
 * into *out, value into value[0..cap) (value may be NULL).
 * Errors: DXL_E_NOENT (unknown table, slot out of range), DXL_E_AGAIN
 * (being written, or torn since a crash), DXL_E_TOOBIG, DXL_E_CORRUPT.
 */
int dxl_store_read(const struct dxl_store *s, uint32_t table, uint64_t slot,
		   struct dxl_record *out, void *value, uint32_t cap);

/* dxl_store_find -- the slot of key's live (or torn) record; DXL_E_NOENT if
 * none (a tombstone is none) */
int dxl_store_find(struct dxl_store *s, uint32_t table, uint64_t key,
		   uint64_t *slot);

/*
 * Tombstones (docs/engine.md "Tombstones"). A delete leaves the key's slot
 * free but still naming the key, with the delete's version and commit
 * timestamp: the key's tombstone. dxl_store_apply compares a write with it
 * as with a live record (a write of a smaller version is older than the
 * delete: passed over), so a replica applying writes of one key in any
 * order ends with the latest. An insert of the key replaces it; otherwise
 * its slot may be reused by another key once the tombstone is no longer
 * needed: with keep_tombstones, when its timestamp is below the bound
 * dxl_store_set_reclaim_ts set (the replica: below the oldest record its
 * log still holds, so no older write of the key can be applied again).
 */
struct dxl_store_absence {
	uint64_t slot;    /* the tombstone's slot; UINT64_MAX: no tombstone */
	uint64_t version; /* the delete's version; 0: no tombstone */
	uint64_t ts;      /* the delete's commit timestamp; without a
			     tombstone, at least that of every tombstone
			     this table reclaimed (0 if none) */
};
/* dxl_store_absence -- key is absent: 0 and *out; DXL_E_EXIST (live or
 * torn), DXL_E_NOENT (unknown table) */
int dxl_store_absence(struct dxl_store *s, uint32_t table, uint64_t key,
		      struct dxl_store_absence *out);
/* dxl_store_keeps_tombstones -- the store was opened with keep_tombstones */
bool dxl_store_keeps_tombstones(const struct dxl_store *s);
/* dxl_store_set_reclaim_ts -- with keep_tombstones: tombstones whose commit
 * timestamp is below ts may give their slots to inserts (no-op otherwise) */
void dxl_store_set_reclaim_ts(struct dxl_store *s, uint64_t ts);
/*
 * dxl_store_reclaim_floor -- every tombstone table ever gave its slot away
 * from (its key forgotten) had a commit timestamp below this; 0 if it
 * never did (or the table is unknown). Persisted in the catalog page before
 * the slot is reused, so it survives crashes; replicas whose tombstones
 * differ only below each other's floors hold the same state (one
 * reclaimed what the other still keeps): what comparisons of members use
 * (dxl cluster verify, docs/recovery.md "Digests").
 */
uint64_t dxl_store_reclaim_floor(struct dxl_store *s, uint32_t table);
/* dxl_store_raise_reclaim_floor -- the floor becomes at least `floor`
 * (persisted): a store made a copy of another's state (a state transfer,
 * a checkpoint installed) lacks that store's tombstones below its floor.
 * DXL_E_NOENT for an unknown table. */
int dxl_store_raise_reclaim_floor(struct dxl_store *s, uint32_t table, uint64_t floor);

/* dxl_store_slot_ptr -- the slot's address in the mapping (NULL if out of
 * range); for tests and for serving READs locally */
void *dxl_store_slot_ptr(const struct dxl_store *s, uint32_t table,
			 uint64_t slot);

/*
 * Lock helpers for DXL_LOCKS_CPU (the owner's CPU, e.g. in RPC handlers):
 * a CAS on the DRAM lock word. owner != 0.
 * dxl_store_lock: 0, or DXL_E_BUSY (held; *holder, if not NULL, receives
 * the owner), DXL_E_NOTSUP (the store is DXL_LOCKS_NIC: lock words are the
 * NIC's), DXL_E_NOENT, DXL_E_INVAL.
 * dxl_store_unlock: 0, or DXL_E_STATE (not held by owner; nothing
 * changed), DXL_E_NOTSUP, DXL_E_NOENT, DXL_E_INVAL.
 */
int dxl_store_lock(struct dxl_store *s, uint32_t table, uint64_t slot,
		   uint64_t owner, uint64_t *holder);
int dxl_store_unlock(struct dxl_store *s, uint32_t table, uint64_t slot,
		     uint64_t owner);
/*
 * Who changes a lock word (docs/engine.md "Lock words: who may touch
 * them"): in DXL_LOCKS_CPU mode the owner's CPU (atomics); in
 * DXL_LOCKS_NIC mode only the NIC: a peer's fabric CAS, or the owner's own
 * change sent through the fabric by its lock agent (a loopback QP,
 * dxl_store_set_lock_agent), never a CPU store or CPU CAS (RDMA atomics are
 * not atomic against them). A CPU write of a NIC-owned word is a broken
 * invariant (DXL_ASSERT). Reads (dxl_store_lock_word) are fine in any mode.
 * In NIC mode the calls below that change a word need the store registered
 * and an agent, else DXL_E_STATE; a failed fabric CAS is DXL_E_UNREACHABLE
 * or DXL_E_ACCESS.
 */
struct dxl_lock_agent;
/*
 * dxl_lock_agent_new -- an agent on fabric f: a ctx with index ctx_idx (free
 * at f) and a QP connected to it at f's own address. Any thread may use it
 * (one at a time: a mutex). Errors: those of dxl_ctx_new, dxl_mr_reg and
 * dxl_qp_connect.
 */
int dxl_lock_agent_new(struct dxl_fabric *f, uint32_t ctx_idx,
		       struct dxl_lock_agent **out);
/* dxl_lock_agent_delete -- after every store using it stopped; *a = NULL */
void dxl_lock_agent_delete(struct dxl_lock_agent **a);
/*
 * dxl_lock_agent_cas -- CAS the 8-byte word at raddr (rkey) from cmp to swp
 * with a fabric atomic; *old receives the word's old value (the CAS took
 * effect iff *old == cmp). Reconnects a failed loopback first: a CAS that
 * failed with its outcome unknown can no longer execute after the next
 * call's (the reconnection fences it). Waits for the completion at most
 * twice the fabric's timeout + 1 s (the fabric answers within its timeout;
 * this is a safety net).
 * Errors: DXL_E_ACCESS (rkey, bounds: not executed), DXL_E_UNREACHABLE or
 * DXL_E_TIMEDOUT (the outcome is unknown: it may have executed),
 * dxl_qp_connect's (not executed).
 */
int dxl_lock_agent_cas(struct dxl_lock_agent *a, uint64_t raddr, uint32_t rkey,
		       uint64_t cmp, uint64_t swp, uint64_t *old);
/* dxl_lock_agent_ops -- CASes it has executed (for tests) */
uint64_t dxl_lock_agent_ops(struct dxl_lock_agent *a);
/*
 * dxl_lock_agent_fail_next -- testing only: the next dxl_lock_agent_cas
 * fails with DXL_E_UNREACHABLE and its QP is dropped, as when the loopback
 * QP fails: LOST_BEFORE without executing the CAS, LOST_AFTER once it has
 * executed (its answer lost): the outcome a caller cannot tell apart.
 */
enum dxl_lock_agent_fault {
	DXL_LOCK_AGENT_OK = 0,
	DXL_LOCK_AGENT_LOST_BEFORE = 1,
	DXL_LOCK_AGENT_LOST_AFTER = 2,
};
void dxl_lock_agent_fail_next(struct dxl_lock_agent *a, enum dxl_lock_agent_fault f);
/* dxl_store_set_lock_agent -- the agent of a DXL_LOCKS_NIC store (NULL:
 * none); set before the store serves. Ignored in DXL_LOCKS_CPU mode. */
void dxl_store_set_lock_agent(struct dxl_store *s, struct dxl_lock_agent *a);

/*
 * dxl_store_lock_set -- set the lock word of a slot to word (0 = free),
 * whatever it held (a promoted primary recovering the locks of transactions
 * in doubt before it serves, docs/transactions.md "Failures"; a resolved
 * transaction's lock): CPU atomics in DXL_LOCKS_CPU mode, fabric CASes
 * through the lock agent in DXL_LOCKS_NIC mode.
 * Errors: DXL_E_NOENT (table, slot); NIC mode: see above.
 */
int dxl_store_lock_set(struct dxl_store *s, uint32_t table, uint64_t slot,
		       uint64_t word);
/*
 * dxl_store_unlock_coord -- release every lock word held by a transaction
 * of coordinator `coord` (DXL_LOCK_OWNER's top 16 bits), in every table,
 * for a coordinator that is gone and whose transactions were resolved
 * (docs/transactions.md): a CAS holder -> 0 per word, by the CPU or (NIC
 * mode) through the lock agent. Returns the count, or a negative DXL_E_*
 * (NIC mode: see above) with the words released so far released.
 */
int dxl_store_unlock_coord(struct dxl_store *s, uint32_t coord);
/*
 * dxl_store_unlock_owner -- release the lock word of slot if it holds
 * owner: a CAS owner -> 0 (CPU mode: a CPU CAS; NIC mode: through the lock
 * agent), never a store over whatever another holder put there (the
 * resolution of a transaction that met its key still locked by it).
 * Errors: DXL_E_STATE (the word is not owner: nothing changed),
 * DXL_E_NOENT, DXL_E_INVAL (owner 0); NIC mode: see above.
 */
int dxl_store_unlock_owner(struct dxl_store *s, uint32_t table, uint64_t slot,
			   uint64_t owner);
/*
 * dxl_store_persist -- persist the slot's bytes as they are now and report
 * them durable to the fabric (dxl_mr_mark_durable), as every store write
 * does. For whoever releases a lock after a one-sided write-back that may
 * have been placed without its flush READ (the write-back RPC that finds
 * the new version already there): the record must be durable before the
 * lock word is free (docs/engine.md "When a write-back is durable").
 * Errors: DXL_E_NOENT (table, slot).
 */
int dxl_store_persist(struct dxl_store *s, uint32_t table, uint64_t slot);
/* the current lock word (an acquire load; any mode); 0 if out of range */
uint64_t dxl_store_lock_word(const struct dxl_store *s, uint32_t table,
			     uint64_t slot);

/*
 * Registration for one-sided access. Records: the region's data area,
 * DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE | DXL_MR_PERSISTENT, bound to
 * the region's durability (dxl_region_bind_mr) -- without REMOTE_WRITE
 * where a one-sided write-back could not be made durable
 * (!dxl_record_wb_onesided_ok for f's provider and the store's durability:
 * verbs unless persistent memory), so none can land there. Locks: the DRAM
 * lock array of all tables, DXL_MR_REMOTE_ATOMIC | DXL_MR_REMOTE_READ.
 * Errors: DXL_E_EXIST (already registered), dxl_mr_reg's errors.
 */
int dxl_store_register(struct dxl_store *s, struct dxl_fabric *f);
void dxl_store_deregister(struct dxl_store *s);
struct dxl_mr *dxl_store_records_mr(const struct dxl_store *s);
struct dxl_mr *dxl_store_locks_mr(const struct dxl_store *s);

/*
 * What a peer needs to access one table: slot i at records.addr +
 * i * slot_size, its lock word at locks.addr + 8 * i (addr/len narrowed to
 * the table; the rkeys cover the whole store). Plain data.
 */
struct dxl_table_desc {
	uint32_t id;
	uint32_t value_size;
	uint32_t slot_size;
	uint32_t lock_mode; /* enum dxl_lock_mode */
	uint64_t capacity;
	struct dxl_mr_desc records;
	struct dxl_mr_desc locks;
};

/* Errors: DXL_E_NOENT (unknown table), DXL_E_STATE (not registered) */
int dxl_store_table_desc(const struct dxl_store *s, uint32_t table,
			 struct dxl_table_desc *out);

/* ---- write sets: what the coordinator logs ---------------------------------- */

/*
 * The payload of a data record in the log (dxl_rec.payload) is one write
 * set; the record's commit timestamp is the transaction's. Little-endian:
 *
 *   header (16 B)  0 magic "DXWS" (0x53575844)   4 format (1)
 *                  5 three zero bytes            8 entry count n (>= 1)
 *                 12 four zero bytes
 *   n entries      0 table id u32    4 op u8 (1 insert, 2 update, 3 delete)
 *                  5 zero u8         6 value length u16 (0 for delete)
 *                  8 key u64        16 version u64 (even, >= 2)
 *                 24 value, zero-padded to a multiple of 8
 *
 * Decoding is strict: every reserved byte and padding byte 0, lengths
 * within DXL_ENGINE_MAX_VALUE and within the payload, no bytes after the
 * last entry. The version is the one the primary's store gave the record
 * (dxl_store_insert/update/delete); replicas apply it verbatim.
 */
#define DXL_WS_MAGIC 0x53575844u
#define DXL_WS_FORMAT 1
#define DXL_WS_HDR_SIZE 16
#define DXL_WS_ENTRY_HDR 24

enum dxl_ws_op {
	DXL_WS_INSERT = 1,
	DXL_WS_UPDATE = 2,
	DXL_WS_DELETE = 3,
};

struct dxl_ws_entry {
	uint32_t table;
	enum dxl_ws_op op;
	uint64_t key;
	uint64_t version;
	const void *value; /* decode: points into the payload */
	uint32_t len;
};

/* dxl_writeset_size -- encoded bytes of entries e[0..n), or DXL_E_INVAL /
 * DXL_E_TOOBIG (as dxl_writeset_encode) */
int dxl_writeset_size(const struct dxl_ws_entry *e, uint32_t n);

/*
 * dxl_writeset_encode -- encode e[0..n) into buf. Returns the length, or
 * DXL_E_INVAL (n 0, bad op, odd or 0 version, a delete with a value, NULL
 * value with len > 0, cap too small), DXL_E_TOOBIG (a value over
 * DXL_ENGINE_MAX_VALUE, total over DXL_REC_MAX_PAYLOAD).
 */
int dxl_writeset_encode(const struct dxl_ws_entry *e, uint32_t n, void *buf,
			size_t cap);

/*
 * dxl_writeset_decode -- validate the whole payload, then fill
 * out[0..min(n, cap)) (out may be NULL with cap 0 to count). Returns n, or
 * DXL_E_CORRUPT with a message naming the entry and the field. Never reads
 * outside [buf, buf+len).
 */
int dxl_writeset_decode(const void *buf, size_t len, struct dxl_ws_entry *out,
			uint32_t cap);

/*
 * An abort marker is the payload of a log record that a coordinator appends
 * to a ring after its own record of transaction txn_id there, when that
 * transaction aborted after the record was sent (docs/transactions.md
 * "watermark = decided"): appliers skip the record of txn_id of that ring
 * (dxl_rec.writer). Little-endian, 16 bytes: magic "DXAB" (0x42415844),
 * format 1, three zero bytes, txn id u64 (not 0).
 */
#define DXL_ABORT_MAGIC 0x42415844u
#define DXL_ABORT_SIZE 16
/* dxl_abort_marker_encode -- DXL_ABORT_SIZE bytes into buf; returns 16 or
 * DXL_E_INVAL (txn_id 0, cap too small) */
int dxl_abort_marker_encode(uint64_t txn_id, void *buf, size_t cap);
/* dxl_abort_marker_decode -- 1 and *txn_id if payload is an abort marker,
 * 0 if it is not one (another magic), DXL_E_CORRUPT if it claims to be one
 * but is malformed */
int dxl_abort_marker_decode(const void *payload, size_t len, uint64_t *txn_id);

/* ---- applying the log -------------------------------------------------------- */

/*
 * dxl_store_apply -- apply one logged write to the store of a replica (or
 * during recovery): idempotent and order-safe by version. If the key has a
 * consistent record or a tombstone whose version >= version, nothing
 * happens (returns 0): the write is applied already, or older than what is
 * here. Otherwise the record is written with exactly this version and ts
 * (insert and update are both "put": an absent key gets a free slot,
 * replacing its tombstone; a delete leaves a tombstone with this version,
 * also for a key that is absent here: its older writes may still come) and
 * persisted (returns 1). A torn record (cut by a crash) is always
 * rewritten. No lock is checked: the applier is the only writer of a
 * backup's records. A live record found at or past version while its lock
 * word is held is persisted anyway (still returns 0): it may have been
 * placed by a one-sided write-back whose flush READ never executed, and a
 * roll-forward releases the lock next (recovery: RESOLVE, UNLOCK_COORD),
 * after which the log's retention may pass the record.
 * Errors (nothing changed): DXL_E_NOENT (unknown table), DXL_E_TOOBIG,
 * DXL_E_INVAL (odd or 0 version, bad op), DXL_E_FULL (no free slot for a
 * record, or for the tombstone of a delete of an absent key: a replay alone
 * passes that one over), a hook's error.
 */
int dxl_store_apply(struct dxl_store *s, uint32_t table, uint64_t key,
		    enum dxl_ws_op op, uint64_t version, uint64_t ts,
		    const void *value, uint32_t len);

/* Which entries a replica keeps (e.g. the keys of its shard); 1 = apply.
 * Called twice per entry (once while checking, once while applying). */
typedef int (*dxl_store_filter_fn)(void *arg, uint32_t table, uint64_t key);

struct dxl_replay_stats {
	uint64_t records;    /* log records applied */
	uint64_t entries;    /* write-set entries in them */
	uint64_t applied;    /* entries written */
	uint64_t skipped;    /* entries already applied (version) */
	uint64_t superseded; /* replay (dxl_recovery_replay): a later entry of
				the window writes the key */
	uint64_t filtered;   /* entries the filter refused */
	uint64_t last_ts;    /* commit timestamp of the last record applied */
};

/*
 * dxl_store_apply_writeset -- the online applier: apply one log record's
 * payload (a write set) with commit timestamp ts, records in log order,
 * each once. Checked first (strict decoding, every entry's table and value
 * length): a bad record changes nothing. filter may be NULL (every entry).
 * st (may be NULL) is added to. Returns the number of entries applied, or
 * DXL_E_CORRUPT, DXL_E_NOENT (unknown table), DXL_E_TOOBIG, or
 * dxl_store_apply's errors (DXL_E_FULL, a hook's: the entries before the
 * failing one stay applied; applying the record again is harmless).
 */
int dxl_store_apply_writeset(struct dxl_store *s, const void *payload,
			     uint32_t len, uint64_t ts,
			     dxl_store_filter_fn filter, void *arg,
			     struct dxl_replay_stats *st);

/* Re-applying a log window after a restart (each key's last write) is
 * recovery's: dxl_recovery_replay (include/dxl/recovery.h). */

#ifdef __cplusplus
}
#endif
/* The engine's hash index and the coordinators' location cache
 * (engine/hash.c, engine/loccache.c) are part of this face too. */
#include "dxl/index.h"

#endif /* DXL_ENGINE_H */
