/* recovery.h -- dxl's recovery: checkpoints of a shard's tables, installing one into a store, state digests, state transfer */
#ifndef DXL_RECOVERY_H
#define DXL_RECOVERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dxl/engine.h"
#include "dxl/err.h"
#include "dxl/fabric.h"
#include "dxl/log.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The log plus checkpoints are the truth; a replica's record store is a
 * cache of them (docs/recovery.md). This module owns:
 *
 *   - state digests: an order-independent hash of (table, key, version,
 *     value) over the live records of a store or a checkpoint, so members
 *     of a shard can be compared (dxl cluster verify);
 *   - checkpoints: an image of a shard's tables at a log position, written
 *     while transactions run (fuzzy: every record as it was at some moment
 *     after the position was taken; consistent once the log from that
 *     position is replayed over it, which is idempotent by version), in a
 *     region file with a CRC'd manifest written last, so a checkpoint cut
 *     by a crash is never found, never half-used;
 *   - installing a checkpoint into a store (the rebuild path): the store
 *     made equal to the image, then the log from the image's position
 *     replayed by the usual applier;
 *   - state transfer (dxl_xfer_*): a node that is not a member of a shard
 *     copies a member's tables with one-sided READs into a local
 *     checkpoint, while the shard keeps committing, and installs it.
 *
 * Layering: engine (the store) and log (rings, positions) below; the
 * replica server decides when to call what (docs/replica.md "Catch-up").
 */

/* ---- state digests ----------------------------------------------------------- */

/*
 * A digest of a shard's state: its live records {(table, key, version,
 * value)} and its tombstones {(table, key, version)} (a deleted key's
 * version, docs/engine.md "Tombstones"). For each part: the count and two
 * sums (mod 2^64) of independent 64-bit hashes of each element. Sums make
 * it independent of order and slot placement; two hashes make a chance
 * collision ~2^-128. A key that was never there contributes nothing.
 * Tombstones matter: a replica that lacks one applies an older write of
 * the key again (a deleted key comes back), so a comparison must see
 * them. Members reclaim tombstones at different times
 * (dxl_store_reclaim_floor), so digests that are compared take only the
 * tombstones at or above a cut-off every member still keeps (the largest
 * of their reclaim floors): dxl_digest_store_from, dxl_state_digest.
 */
struct dxl_digest {
	uint64_t records;
	uint64_t h[2];
	uint64_t tombstones;
	uint64_t t[2];
};

/* dxl_digest_add -- fold one live record in */
void dxl_digest_add(struct dxl_digest *d, uint32_t table, uint64_t key,
		    uint64_t version, const void *value, uint32_t len);
/* dxl_digest_add_tombstone -- fold one tombstone in */
void dxl_digest_add_tombstone(struct dxl_digest *d, uint32_t table, uint64_t key,
			      uint64_t version);
/* dxl_digest_merge -- fold b into a (the digest of the union of two
 * disjoint sets, e.g. two tables) */
void dxl_digest_merge(struct dxl_digest *a, const struct dxl_digest *b);
/* both parts equal */
bool dxl_digest_equal(const struct dxl_digest *a, const struct dxl_digest *b);
/* "records=N h=<32 hex digits> tombstones=M t=<32 hex digits>"; returns
 * snprintf's count */
int dxl_digest_format(const struct dxl_digest *d, char *buf, size_t cap);
/* the inverse of dxl_digest_format (the tombstone part may be absent:
 * zero); DXL_E_INVAL if s is not one */
int dxl_digest_parse(const char *s, struct dxl_digest *out);

/*
 * dxl_digest_store -- the digest of table (UINT32_MAX: every table) of s:
 * its live records and every tombstone the store keeps, read slot by slot
 * with the owner's seqlock read. Torn slots (cut by a crash, awaiting the
 * log's replay) are counted in *torn (may be NULL) and not hashed.
 * Meaningful as "the state" only while no writer changes the store (a
 * quiet shard, or a stopped applier).
 * dxl_digest_store_from -- the same with only the tombstones whose commit
 * timestamp is >= tomb_from_ts (UINT64_MAX: none).
 * Errors: DXL_E_NOENT (unknown table), DXL_E_AGAIN (a slot stayed busy),
 * DXL_E_CORRUPT.
 */
int dxl_digest_store(struct dxl_store *s, uint32_t table, struct dxl_digest *out,
		     uint64_t *torn);
int dxl_digest_store_from(struct dxl_store *s, uint32_t table, uint64_t tomb_from_ts,
			  struct dxl_digest *out, uint64_t *torn);

/*
 * A state read slot by slot (a member's store read with one-sided READs, a
 * checkpoint's entries): per (table, key) the entry of the largest version
 * -- a key can be met more than once: it moved slot during a fuzzy read,
 * or a free slot still names a key that was deleted and written again
 * since (a superseded tombstone); at equal versions a live record wins
 * over a tombstone. What remains is the state: live records and
 * tombstones.
 */
struct dxl_state;
struct dxl_state_entry {
	uint64_t key, version, ts;
	uint32_t table;
	uint32_t vcrc; /* CRC32C of the value (0 for a tombstone) */
	uint32_t len;
	bool live;
	bool used; /* internal */
};
/* dxl_state_new -- sized for about `expect` keys (it grows). DXL_E_NOMEM */
int dxl_state_new(uint64_t expect, struct dxl_state **out);
void dxl_state_delete(struct dxl_state **s);
/* dxl_state_add -- one slot's record (live) or tombstone (!live, len 0).
 * DXL_E_NOMEM */
int dxl_state_add(struct dxl_state *s, uint32_t table, uint64_t key, uint64_t version,
		  uint64_t ts, bool live, const void *value, uint32_t len);
/* the entry of (table, key), or NULL */
const struct dxl_state_entry *dxl_state_find(const struct dxl_state *s, uint32_t table,
					     uint64_t key);
/* keys held (live or tombstone) */
uint64_t dxl_state_count(const struct dxl_state *s);
/* every entry, in no order; a nonzero return of fn stops and is returned */
int dxl_state_foreach(const struct dxl_state *s,
		      int (*fn)(void *arg, const struct dxl_state_entry *e), void *arg);
/* the digest: every live record, the tombstones with ts >= tomb_from_ts */
void dxl_state_digest(const struct dxl_state *s, uint64_t tomb_from_ts,
		      struct dxl_digest *out);

/* ---- log positions --------------------------------------------------------------- */

/* Where ring r's next record is: the head {pos, seq} at some moment. */
struct dxl_log_pos {
	uint64_t pos;
	uint64_t seq;
};

/* ---- checkpoints ----------------------------------------------------------------- */

/*
 * A checkpoint is a region file (log/region.c: superblock, the data
 * directory's durability) DIR/ckpt-<shard>-<seq>.dat of kind
 * DXL_REGION_CKPT:
 *
 *   0      manifest (20480 B): magic "DXLCKPT\0", format, shard, seq,
 *          counts, the image's start position (per ring {pos, seq}), the
 *          digest of its entries, the CRC32C of its entries, its own
 *          CRC32C; then per table {id, value size, entry size, capacity,
 *          offset, count}
 *   20480  each table's entries: {key u64, version u64, ts u64, len u32,
 *          flags u32, value padded to 8} (entry size 32 + value size
 *          rounded up to 8), padded to 4096
 *
 * Writing: the entries first, persisted; then the manifest, persisted: the
 * commit point. Until its manifest is valid (checksum, magic, the entries'
 * CRC) a file is "incomplete" and ignored by dxl_ckpt_find; a crash while
 * writing leaves either the previous newest complete checkpoint or the new
 * one, never a half one (tests/unit/recovery/test_ckpt_crash.c).
 *
 * The start position: every record below it in every ring had its effects
 * in the imaged store before the image was taken (the replica's rule: a
 * ring's head passes a record only once its effects are persistent in the
 * store). Entries may be newer than the position (the image is fuzzy); a
 * key may even appear twice (it moved slot during the scan: the larger
 * version is the later state). Replaying the log from the start position
 * over the image gives the shard's state.
 */
#define DXL_REGION_CKPT 3u
#define DXL_CKPT_MAN_SIZE 20480u
#define DXL_CKPT_MAX_RINGS DXL_RING_MAX
#define DXL_CKPT_ENTRY_HDR 32u

enum dxl_ckpt_flags {
	DXL_CKPT_LIVE = 1,      /* a live record */
	DXL_CKPT_TOMBSTONE = 2, /* a deleted key at this version (no value) */
};

struct dxl_ckpt_info {
	uint32_t shard;
	uint64_t seq;         /* grows per shard in a directory: newest wins */
	uint32_t ntables;
	struct dxl_table_schema tables[DXL_STORE_MAX_TABLES];
	uint64_t counts[DXL_STORE_MAX_TABLES]; /* entries per table */
	uint32_t nrings;
	uint64_t ring_size;
	uint64_t start_ts;    /* largest last_ts of the start heads (display) */
	uint64_t created_ms;  /* wall clock when committed */
	uint32_t source_node; /* the node whose store it images */
	uint64_t entries;     /* all entries (tombstones included) */
	uint64_t tombstones;
	/* of the entries, duplicates included (the tombstone part: format 2) */
	struct dxl_digest digest;
	/* per table (in tables[] order): the source store's reclaim floor
	 * (dxl_store_reclaim_floor) when it was imaged: it held no tombstone
	 * below it that a replay could need; the image has none */
	uint64_t floors[DXL_STORE_MAX_TABLES];
};

struct dxl_ckpt;        /* a complete checkpoint, opened read-only */
struct dxl_ckpt_writer; /* a checkpoint being written */

/*
 * dxl_ckpt_writer_new -- start checkpoint `seq` of shard's tables in dir
 * (0 = one more than the largest seq of any checkpoint file of the shard
 * there, complete or not). id: the owner (cluster, node; kind is ignored).
 * start[0..nrings): the image's start position. The file is sized for
 * every slot of every table plus 1/16 (a fuzzy scan can meet a key twice);
 * it is sparse until written.
 * Errors: DXL_E_INVAL (bad schema, nrings 0 or > DXL_CKPT_MAX_RINGS, NULL),
 * DXL_E_EXIST (that seq exists), dxl_region_create's.
 */
int dxl_ckpt_writer_new(const char *dir, enum dxl_durability mode,
			const struct dxl_region_id *id, uint32_t shard,
			const struct dxl_table_schema *tables, unsigned ntables,
			uint32_t nrings, uint64_t ring_size,
			const struct dxl_log_pos *start, uint64_t seq,
			uint32_t source_node, struct dxl_ckpt_writer **out);

/*
 * dxl_ckpt_writer_add -- append one entry of table: a live record (flags
 * DXL_CKPT_LIVE, value[0..len)) or a tombstone (DXL_CKPT_TOMBSTONE, len 0).
 * Errors (nothing added): DXL_E_NOENT (unknown table), DXL_E_TOOBIG (len
 * over the value size), DXL_E_INVAL (flags, odd or 0 version), DXL_E_FULL
 * (more entries than the file holds: a scan that kept meeting moved keys;
 * write the checkpoint again).
 */
int dxl_ckpt_writer_add(struct dxl_ckpt_writer *w, uint32_t table, uint64_t key,
			uint64_t version, uint64_t ts, const void *value,
			uint32_t len, uint32_t flags);

/* dxl_ckpt_writer_set_floor -- the source's reclaim floor of table (see
 * dxl_ckpt_info.floors; 0 by default). DXL_E_NOENT for an unknown table */
int dxl_ckpt_writer_set_floor(struct dxl_ckpt_writer *w, uint32_t table, uint64_t floor);

/* the path of the file being written (for logs) */
const char *dxl_ckpt_writer_path(const struct dxl_ckpt_writer *w);

/*
 * dxl_ckpt_writer_commit -- persist the entries, then write and persist
 * the manifest: from then on the checkpoint is complete (found by
 * dxl_ckpt_find). *info (may be NULL) receives its summary. Frees w and
 * sets *wp = NULL whatever happens; on an error the file is removed.
 */
int dxl_ckpt_writer_commit(struct dxl_ckpt_writer **wp, struct dxl_ckpt_info *info);

/* dxl_ckpt_writer_abort -- drop an unfinished checkpoint: unmap, remove
 * the file; *wp = NULL */
void dxl_ckpt_writer_abort(struct dxl_ckpt_writer **wp);

/*
 * dxl_ckpt_open -- open the checkpoint file at path and check it: region
 * superblock (id: cluster and node, may be NULL), manifest magic, format,
 * checksum, sizes, and the CRC32C of every entry. A file whose manifest
 * was never written (a cut checkpoint) is DXL_E_CORRUPT "incomplete".
 * Errors: dxl_region_open's (DXL_E_NOENT, DXL_E_CORRUPT, DXL_E_STALE,
 * DXL_E_CONFIG, ...), DXL_E_CORRUPT, DXL_E_VERSION, DXL_E_NOMEM.
 */
int dxl_ckpt_open(const char *path, enum dxl_durability mode,
		  const struct dxl_region_id *id, struct dxl_ckpt **out);

/* What dxl_ckpt_find looked at. */
struct dxl_ckpt_scan {
	uint32_t files;      /* ckpt-<shard>-*.dat files of the shard */
	uint32_t complete;   /* of them, complete checkpoints */
	uint32_t incomplete; /* ignored: cut by a crash, or damaged */
	uint64_t newest_seq; /* of the one returned (0: none) */
};

/*
 * dxl_ckpt_find -- the newest complete checkpoint of shard in dir (largest
 * seq that opens cleanly); incomplete files are ignored (counted in *scan,
 * may be NULL). Errors: DXL_E_NOENT (none), DXL_E_IO (dir unreadable),
 * DXL_E_NOMEM.
 */
int dxl_ckpt_find(const char *dir, enum dxl_durability mode,
		  const struct dxl_region_id *id, uint32_t shard,
		  struct dxl_ckpt **out, struct dxl_ckpt_scan *scan);

/*
 * dxl_ckpt_prune -- remove the shard's checkpoint files in dir except the
 * `keep` newest complete ones (0 counts as 1), and every incomplete one
 * (and leftover ckpt-*.dat.tmp): call it only while no writer of the
 * shard's checkpoints is active. Returns the number removed, or DXL_E_IO.
 */
int dxl_ckpt_prune(const char *dir, enum dxl_durability mode,
		   const struct dxl_region_id *id, uint32_t shard, unsigned keep);

void dxl_ckpt_close(struct dxl_ckpt **c);
const struct dxl_ckpt_info *dxl_ckpt_get_info(const struct dxl_ckpt *c);
const char *dxl_ckpt_path(const struct dxl_ckpt *c);
/* dxl_ckpt_start -- the start position of ring; DXL_E_INVAL if out of range */
int dxl_ckpt_start(const struct dxl_ckpt *c, uint32_t ring, struct dxl_log_pos *out);

struct dxl_ckpt_entry {
	uint32_t table;
	uint32_t flags; /* DXL_CKPT_LIVE or DXL_CKPT_TOMBSTONE */
	uint64_t key;
	uint64_t version;
	uint64_t ts;
	uint32_t len;
	const void *value; /* into the mapping; valid while c is open */
};
/* dxl_ckpt_foreach -- fn for every entry, table by table; a nonzero return
 * of fn stops and is returned */
typedef int (*dxl_ckpt_entry_fn)(void *arg, const struct dxl_ckpt_entry *e);
int dxl_ckpt_foreach(const struct dxl_ckpt *c, dxl_ckpt_entry_fn fn, void *arg);

/*
 * dxl_ckpt_write -- the fuzzy checkpoint of a local store: the start
 * position is ls's heads (read first: everything below them is in the
 * store, the replica's rule), then every slot of every table is read with
 * the seqlock read while writers go on; live records become entries
 * (torn slots awaiting replay are skipped: their records are above the
 * heads). Writes DIR/ckpt-<shard>-<seq>.dat and commits it.
 * Errors: as the writer's; DXL_E_CONFIG (ls is not of the store's shard).
 */
int dxl_ckpt_write(const char *dir, const struct dxl_region_id *id,
		   struct dxl_store *s, const struct dxl_logstore *ls,
		   struct dxl_ckpt_info *info);
/* Caller of dxl_ckpt_write: the thread that moves ls's heads (a replica's
 * service loop), or with retention stopped: the heads are read with plain
 * loads. Other callers read the position themselves, under what orders
 * them with the heads' writer, and call dxl_ckpt_write_from: the same
 * checkpoint at that start position (nrings of ring_size; start_ts is
 * informational). */
int dxl_ckpt_write_from(const char *dir, const struct dxl_region_id *id,
			struct dxl_store *s, const struct dxl_log_pos *start,
			uint32_t nrings, uint64_t ring_size, uint64_t start_ts,
			struct dxl_ckpt_info *info);

/*
 * dxl_ckpt_covered -- 1 if the log ls holds every record from c's start
 * position on (same ring count and size, and every ring's head at or
 * before its start position: nothing the image lacks was reclaimed), 0 if
 * not (*why, if not NULL, says which ring), DXL_E_INVAL.
 */
int dxl_ckpt_covered(const struct dxl_ckpt *c, const struct dxl_logstore *ls,
		     char *why, size_t cap);

/* Test hook: called at every persistence point of a checkpoint writer
 * (after the bytes [addr, addr+len) of the mapping were made durable) and,
 * with len 0, at every step where a crash may be simulated; a nonzero
 * return makes the writer stop at once as if the process died (the call
 * returns DXL_E_INTERNAL, the file is left as it is, the mapping unmapped).
 * NULL: none. Process-wide; tests only. */
typedef int (*dxl_ckpt_test_fn)(void *arg, const char *path, const void *base,
				uint64_t off, uint64_t len);
void dxl_ckpt_set_test_hook(dxl_ckpt_test_fn fn, void *arg);

/* ---- installing a checkpoint (the rebuild path) ------------------------------ */

struct dxl_install_stats {
	uint64_t entries;   /* checkpoint entries */
	uint64_t keys;      /* distinct (table, key) among them */
	uint64_t written;   /* entries that changed the store */
	uint64_t unchanged; /* entries the store held already (version) */
	uint64_t removed;   /* live keys of the store the image lacks: deleted */
	uint64_t ms;
};

/*
 * dxl_ckpt_install -- make store s hold exactly c's image: every live key
 * of s that c lacks is deleted (with its version + 2), every entry of c is
 * applied (dxl_store_apply, idempotent by version: the larger version of a
 * key wins). Then the digest of s is compared with the image's (its keys at
 * their largest versions): a difference is DXL_E_CORRUPT. The caller stops
 * every writer of s first (the applier; no table RPCs) and afterwards
 * replays the log from c's start position (the applier's activation
 * replays from the heads). Idempotent: after a crash, installing again
 * finishes the job. st may be NULL.
 * Errors: DXL_E_CONFIG (c's shard or tables are not s's), dxl_store_apply's
 * (DXL_E_FULL...), DXL_E_CORRUPT, DXL_E_NOMEM.
 */
int dxl_ckpt_install(struct dxl_store *s, const struct dxl_ckpt *c,
		     struct dxl_install_stats *st);

/* ---- the store's recovery state ------------------------------------------------- */

/*
 * A store that may not hold everything below its log's heads -- the log
 * was copied from another member (catch-up) past what this store had
 * applied, or a transfer is being installed -- is marked by a small file
 * DIR/store-<shard>.incomplete (written and fsynced before the copy that
 * could make it so, removed once the store covers its log again). A node
 * that finds the mark at start must not trust the store: it installs a
 * complete received checkpoint that its log covers, or transfers again.
 * The file holds one line: "reason=<word> since_ms=<wall ms>\n".
 */
/* dxl_rcv_mark_incomplete -- create (or rewrite) the mark, fsynced.
 * Errors: DXL_E_IO. */
int dxl_rcv_mark_incomplete(const char *dir, uint32_t shard, const char *reason);
/* dxl_rcv_mark_clear -- remove it (fsync of the directory). DXL_E_IO. */
int dxl_rcv_mark_clear(const char *dir, uint32_t shard);
/* dxl_rcv_marked -- 1 if marked (*reason, if not NULL, gets the word),
 * 0 if not */
int dxl_rcv_marked(const char *dir, uint32_t shard, char *reason, size_t cap);

/*
 * dxl_rcv_rebuild -- the rebuild of a marked store at open (a replica's
 * start, replica/catchup.c): the newest complete checkpoint of shard in dir
 * (durability mode, identity id), if ls still covers it (dxl_ckpt_covered),
 * installed into s (dxl_ckpt_install), and only then the mark removed -- a
 * crash or power failure anywhere before the removal finds the mark again
 * and installs again (test_rebuild_crash). The caller replays the log from
 * the heads afterwards (the applier's activation). *seq (may be NULL) gets
 * the checkpoint's seq; is (may be NULL) the install's stats.
 * Errors: dxl_ckpt_find's (DXL_E_NOENT: no complete checkpoint),
 * DXL_E_STALE (the log no longer covers it), dxl_ckpt_install's; the mark
 * stays on every error.
 */
int dxl_rcv_rebuild(const char *dir, enum dxl_durability mode,
		    const struct dxl_region_id *id, uint32_t shard, struct dxl_store *s,
		    const struct dxl_logstore *ls, struct dxl_install_stats *is,
		    uint64_t *seq);

/* ---- staleness of a cursor, without comparing clocks ------------------------------ */

/*
 * How long a value kept elsewhere (a node's need cursor in ZooKeeper) has
 * stayed unchanged, measured on this host's monotonic clock only: the
 * first time a (stamp, value) pair of a key is seen here starts the count,
 * any change of either restarts it. The stamp (ZooKeeper's mtime) is only
 * compared for equality, never against this host's clock, so a skew
 * between the two clocks neither shortens nor lengthens the age (the TTL
 * of need cursors, docs/recovery.md). A key seen for the first time -- or
 * by a node that has just become the one that looks -- is 0 old: the age
 * errs on the long side, never the short one.
 */
#define DXL_RCV_WATCH_MAX 64
struct dxl_rcv_watch {
	struct {
		uint64_t key, stamp, value, since_ms;
		bool seen;
	} v[DXL_RCV_WATCH_MAX];
	uint32_t n;
};
/* dxl_rcv_watch_age -- observe (stamp, value) of key at now_ms (monotonic,
 * dxl_now_ms); returns for how long it has been seen unchanged. A full
 * table returns 0 (never old) for keys it cannot hold. */
uint64_t dxl_rcv_watch_age(struct dxl_rcv_watch *w, uint64_t key, uint64_t stamp,
			   uint64_t value, uint64_t now_ms);
/* dxl_rcv_watch_sweep -- forget the keys not observed since the last sweep
 * (call after observing a complete listing) */
void dxl_rcv_watch_sweep(struct dxl_rcv_watch *w);

/* ---- re-applying the log (restart) ---------------------------------------------- */

/*
 * dxl_recovery_replay -- re-apply the log window of ls to store s: every
 * valid data record of every ring from its persisted head, in
 * commit-timestamp order (dxl_log_scan_merged), below resolved_ts
 * (UINT64_MAX: no bound), records cancelled by an abort marker left out.
 * What a restarted replica does before it serves: the store is a cache of
 * the log, and some of the window may be applied already. Two passes: the
 * first checks every record (an error there changes nothing) and notes
 * each key's largest version in the window; the second applies only that
 * last write of each key (older ones are "superseded"), so a key the
 * window deletes later is never put back meanwhile (dxl_store_apply:
 * idempotent and order-safe by version). filter (may be NULL) keeps the
 * entries of this replica. st (may be NULL) is zeroed first. Returns the
 * number of log records, or the first error (DXL_E_CORRUPT for a bad
 * write set, DXL_E_NOENT for an unknown table, DXL_E_TOOBIG, naming the
 * ring and sequence number; DXL_E_NOMEM; dxl_store_apply's).
 */
int dxl_recovery_replay(struct dxl_store *s, const struct dxl_logstore *ls,
			uint64_t resolved_ts, dxl_store_filter_fn filter, void *arg,
			struct dxl_replay_stats *st);

/* ---- copying a member's ring (catch-up) ---------------------------------------- */

/*
 * dxl_xfer_pull makes ring `ring` of the local log ls an exact copy of
 * the remote ring src (typically the same ring of the shard's primary): its
 * control block (both head slots, owner word, watermark, the rest) and its
 * whole buffer, with one-sided READs on qp (connected to src->addr /
 * src->remote_ctx; nothing else may be in flight on its ctx). It is how a
 * replica that rejoins a shard catches up before an appender with repair
 * (which can only copy what lies above the reference's head) takes it in.
 *
 * The source's writer may keep appending and its replica keep advancing
 * the head meanwhile. The pull READs the control block, then the buffer,
 * then the control block again. The watermark and owner are taken from
 * the first READ (every record below that watermark is in the buffer read
 * after it). If the head moved between the two, the buffer below the new
 * head may have been overwritten by the writer's next lap: the pull tries
 * again, up to DXL_PULL_MAX_ATTEMPTS copies; if the head still moves, the
 * last copy is kept with the head of its second READ, which is consistent
 * too (the writer never writes at or above a position the head has not
 * passed, so from the new head on the copy is intact). A record an append
 * was writing during the copy is either whole or ends the copy's valid
 * content (checksum, sequence number): the copy is always a valid prefix
 * of what the source held.
 *
 * Preconditions: nobody writes the local ring meanwhile -- the replica
 * does not serve this shard's writers while it pulls (it is not in the
 * configuration), and its own CPU does not move the ring's head. The
 * local owner word is NIC-owned (H8) in normal operation; the pull writes
 * it with the CPU, which is only right because of this. A crash during a
 * pull leaves the ring in an unspecified state: pull again before using it.
 *
 * dxl_xfer_pull allocates and registers (on qp's fabric) a bounce
 * buffer of dxl_xfer_pull_bounce_bytes(ring size) bytes for the call;
 * dxl_xfer_pull_buf uses the caller's (registered DXL_MR_LOCAL_WRITE,
 * at least that long; NULL = allocate as dxl_xfer_pull).
 *
 * Only bytes that differ are written locally (by page, persisted with
 * dxl_region_memcpy_persist): the buffer first, the control block last.
 *
 * Errors: DXL_E_INVAL (ring out of range, src's ring size is not ls's,
 * bounce too small), DXL_E_CORRUPT (no valid head slot at the source),
 * DXL_E_NOMEM, and the READs' errors (DXL_E_UNREACHABLE, DXL_E_ACCESS,
 * DXL_E_STATE).
 */
#define DXL_PULL_MAX_ATTEMPTS 4

struct dxl_pull_stats {
	uint64_t changed;       /* local bytes whose value the pull changed
				   (0: the local ring was already the copy) */
	uint64_t bytes_read;    /* READ from the source, over all attempts */
	uint32_t attempts;      /* copies made (more: the head moved) */
	uint32_t records;       /* data records in the copy, head to end */
	struct dxl_ring_head head; /* the head copied */
	uint64_t end_pos;       /* where the copy's valid content ends */
	uint64_t end_seq;       /* (a writer's next position and sequence) */
	uint64_t watermark;     /* the watermark copied (0: none) */
};

uint64_t dxl_xfer_pull_bounce_bytes(uint64_t ring_size);

/* st may be NULL; it is zeroed first, so it is valid on error too */
int dxl_xfer_pull(struct dxl_logstore *ls, uint32_t ring, struct dxl_qp *qp,
		  const struct dxl_log_target *src, struct dxl_pull_stats *st);
int dxl_xfer_pull_buf(struct dxl_logstore *ls, uint32_t ring,
		      struct dxl_qp *qp, const struct dxl_log_target *src,
		      struct dxl_mr *bounce, struct dxl_pull_stats *st);

/* ---- state transfer --------------------------------------------------------------- */

/*
 * A source: a member of the shard, as its descriptor (nodes/<id>) says.
 * rings[r]: the log rings to pull; tables[i]: its tables (records and lock
 * words, registered for one-sided READs).
 */
struct dxl_xfer_source {
	uint32_t node_id;
	char addr[DXL_FABRIC_ADDR_MAX];
	uint32_t ctx;
	uint32_t nrings;
	struct dxl_log_target rings[DXL_RING_MAX];
	uint32_t ntables;
	struct dxl_table_desc tables[DXL_STORE_MAX_TABLES];
};

/* What a copy of a member's store found (dxl_xfer_copy_store). */
struct dxl_xfer_stats {
	uint64_t slots;       /* slots read */
	uint64_t bytes_read;  /* by one-sided READs (records, lock words) */
	uint64_t entries;     /* live records copied */
	uint64_t retried;     /* slots read again: being written, locked, or
				 changed between the two READs */
	uint64_t torn_skipped; /* slots torn at the source (its replay
				  pending): their records are in the log */
	uint64_t tombstones;  /* free slots naming a key at a version
				 (tombstones, maybe superseded) taken */
	uint64_t below_floor; /* of them, left out: below the source's
				 reclaim floor (dxl_xfer_copy_store) */
	uint64_t ms;
};

/*
 * dxl_xfer_copy_store -- copy every table of the source's store into the
 * checkpoint writer w with one-sided READs on qp (connected to the
 * source's ctx), while its owner keeps writing: per chunk of slots, READ
 * the records, READ their lock words, READ the records again; a slot is
 * taken when both record READs are consistent and equal and its lock word
 * was 0 in between (so no uncommitted insert of a transaction that later
 * aborts is taken: an abort deletes the record before it unlocks); other
 * slots are read again (at most `tries` rounds of 1 ms, 0 = 5000), and a
 * slot torn at the source since a crash (it stays torn) is skipped. The
 * caller read the source's log position (its ring heads) before calling
 * and gave it to w as the start. st may be NULL.
 * Errors: DXL_E_CONFIG (the source's tables are not w's), DXL_E_TIMEDOUT
 * (a slot stayed locked or changing), the fabric's (DXL_E_UNREACHABLE,
 * DXL_E_ACCESS: the source re-registered; copy again), the writer's.
 */
int dxl_xfer_copy_store(struct dxl_qp *qp, const struct dxl_xfer_source *src,
			struct dxl_ckpt_writer *w, unsigned tries,
			struct dxl_xfer_stats *st);

/*
 * dxl_xfer_follow -- bring local ring `ring` of ls up to date with the
 * member's ring src, reading only what may differ: the local records below
 * both watermarks (acknowledged everywhere, never cut) from the source's
 * head on are kept, the rest is READ from the source until its records
 * end (recovery/follow.c). Falls back to the whole ring
 * (dxl_xfer_pull_buf) when the local head is past the source's. The
 * result is what dxl_xfer_pull gives: a valid prefix of the source's
 * ring with its head (second READ), its watermark and owner (first READ).
 * bounce: registered LOCAL_WRITE memory of dxl_xfer_pull_bounce_bytes
 * (NULL: allocated here). Caller: as dxl_xfer_pull (not a member: no
 * writer uses the local ring).
 * Errors: DXL_E_INVAL, DXL_E_NOMEM, the fabric's (DXL_E_ACCESS,
 * DXL_E_UNREACHABLE), DXL_E_CORRUPT (the source's head slots).
 */
struct dxl_follow_stats {
	bool full;              /* the whole ring was copied */
	uint64_t bytes_read;    /* by READs */
	uint64_t changed;       /* local bytes that changed */
	struct dxl_ring_head head; /* the head copied */
	uint64_t end_pos, end_seq; /* where the copy's records end */
};
int dxl_xfer_follow(struct dxl_logstore *ls, uint32_t ring, struct dxl_qp *qp,
		    const struct dxl_log_target *src, struct dxl_mr *bounce,
		    struct dxl_follow_stats *st);

/*
 * dxl_xfer_scan_store -- the same READs, handing every slot that passes
 * the rule and holds a key at a version to fn (table, fields, value; a
 * nonzero return stops and is returned): live records (r->live) and free
 * slots that name a key (!r->live, version >= 2, incarnation > 0: its
 * tombstone, or a superseded one: dxl_state sorts them out; an undone
 * insert's slot names none, dxl_store_undo_insert). E.g. the digest of a
 * member's store (dxl cluster verify). No writer; the source's tables
 * need not be any local store's.
 */
typedef int (*dxl_xfer_record_fn)(void *arg, uint32_t table, const struct dxl_record *r,
				  const void *value);
int dxl_xfer_scan_store(struct dxl_qp *qp, const struct dxl_xfer_source *src,
			dxl_xfer_record_fn fn, void *arg, unsigned tries,
			struct dxl_xfer_stats *st);

/*
 * dxl_xfer_read_floors -- the reclaim floor of every table of the source
 * (dxl_store_reclaim_floor, read from its store's catalog with one READ)
 * into floors[0..src->ntables), in src->tables order. A state transfer
 * reads them before it copies the log and gives them to its checkpoint
 * (dxl_ckpt_writer_set_floor): dxl_xfer_copy_store leaves out the
 * tombstones below them (no write older than them can be in the log from
 * the start position on), and the install raises the receiver's floors to
 * them. Errors: DXL_E_INVAL, DXL_E_CONFIG, DXL_E_NOMEM, the fabric's.
 */
int dxl_xfer_read_floors(struct dxl_qp *qp, const struct dxl_xfer_source *src,
			 uint64_t *floors);

/*
 * dxl_xfer_read_heads -- the source's ring heads now (each ring's control
 * block READ, the newest valid head slot) into heads[0..src->nrings).
 * dxl_xfer_check_heads -- 0 if every ring's head is still at start[] (the
 * start position of a copy), DXL_E_AGAIN (with why) if the source's
 * retention moved one during the copy: a tombstone that the log from the
 * start position needs (an older write of its key is in it) can only have
 * been reclaimed at the source if a head moved past that write, so a copy
 * during which no head moved holds every tombstone the receiver's replay
 * needs; otherwise copy again (the receiver's need cursor stops the
 * source's retention by age meanwhile: docs/recovery.md).
 * Errors: DXL_E_INVAL, DXL_E_NOMEM, DXL_E_CORRUPT, the fabric's.
 */
int dxl_xfer_read_heads(struct dxl_qp *qp, const struct dxl_xfer_source *src,
			struct dxl_ring_head *heads);
int dxl_xfer_check_heads(struct dxl_qp *qp, const struct dxl_xfer_source *src,
			 const struct dxl_log_pos *start, char *why, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* DXL_RECOVERY_H */
