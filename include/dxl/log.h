/* log.h -- dxl's log module: commit timestamps, log records, (later) rings and appends */
#ifndef DXL_LOG_H
#define DXL_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dxl/err.h"
#include "dxl/fabric.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- hybrid logical clock (commit timestamps) ---------------------------- */

/*
 * A commit timestamp is 64 bits: 48 bits of physical time in milliseconds
 * since the Unix epoch, then 16 logical bits (000 L1973-2005: DST's scalar
 * timestamp). Timestamps from one clock strictly increase, even if the wall
 * clock steps back; dxl_hlc_observe() folds in a timestamp seen from another
 * node so causally later events get larger timestamps -- but never one
 * further ahead of this host's physical clock than max_ahead_ms: a clock
 * that jumped forward on one node must not drag every other clock (and
 * every later holder of its writer slot) with it.
 */
#define DXL_HLC_LOGICAL_BITS 16
#define DXL_HLC_PHYS(ts) ((ts) >> DXL_HLC_LOGICAL_BITS)
#define DXL_HLC_LOGICAL(ts) ((ts) & ((1u << DXL_HLC_LOGICAL_BITS) - 1))
#define DXL_HLC_MAKE(ms, l) (((uint64_t)(ms) << DXL_HLC_LOGICAL_BITS) | (uint64_t)(l))
/* how far ahead of the physical clock an observed timestamp may be */
#define DXL_HLC_MAX_AHEAD_MS 60000u
/* how far apart the physical clocks of two hosts may be (what the tail's
 * guarantee assumes: docs/log.md, "Tailing") */
#define DXL_HLC_MAX_SKEW_MS (DXL_HLC_MAX_AHEAD_MS / 2)

struct dxl_hlc {
	uint64_t last; /* accessed with atomics: any thread may call */
	uint64_t (*wall_ms)(void); /* NULL = CLOCK_REALTIME; tests inject */
	uint32_t max_ahead_ms; /* 0 = DXL_HLC_MAX_AHEAD_MS */
};

void dxl_hlc_init(struct dxl_hlc *c);
/* dxl_hlc_now -- a timestamp larger than every one this clock returned or observed */
uint64_t dxl_hlc_now(struct dxl_hlc *c);
/*
 * dxl_hlc_observe -- remember ts (e.g. from a received message, a ring's
 * watermark): later dxl_hlc_now values are above it. A ts more than
 * max_ahead_ms ahead of this host's physical clock is not taken: the clock
 * goes only as far as dxl_hlc_max_ts(), a warning is logged, and the call
 * returns DXL_E_INVAL (the caller then knows its timestamps stay below ts).
 * Returns 0 otherwise. Never aborts, whatever ts is.
 */
int dxl_hlc_observe(struct dxl_hlc *c, uint64_t ts);
/* dxl_hlc_max_ts -- the largest timestamp dxl_hlc_observe accepts now */
uint64_t dxl_hlc_max_ts(const struct dxl_hlc *c);

/* ---- log records ---------------------------------------------------------- */

/*
 * A record is self-describing; every integer is little-endian:
 *
 *   offset  size  header (56 bytes)
 *        0     4  magic "DXLR" (0x524c5844)
 *        4     1  format version (2)
 *        5     1  type: 1 = data, 2 = skip (padding up to the ring's end)
 *        6     2  number of participant shards (nparts)
 *        8     4  payload length in bytes
 *       12     4  writer id
 *       16     4  epoch
 *       20     4  CRC32C of header (this field as 0), participants, payload
 *       24     8  per-writer sequence number
 *       32     8  transaction id
 *       40     8  commit timestamp (HLC)
 *       48     4  incarnation: the ring's incarnation its appender wrote in
 *       52     4  reserved, 0
 *       56  4*np  participant shard ids (u32)
 *        .     .  payload
 *        .     .  zero padding
 *    tot-8     8  trailer: total length (u32), CRC32C (u32, = header's)
 *
 * The total length is aligned and padded to 64 bytes (H6), or to 256 bytes
 * once it reaches 256 (H5) (000 L623-649). The smallest record is 64 bytes.
 * A record exists only if magic, version, type, lengths, the trailer and the
 * checksum all agree: a single RDMA WRITE is not placed in address order
 * (003 §5), so a record whose header and trailer arrived but whose middle did
 * not is caught by the checksum, and a stale record from an earlier lap of a
 * ring by its sequence number.
 *
 * The incarnation makes a record follow only the record it was written
 * after: every appender that opens a ring takes a new incarnation, higher
 * than any the ring ever had, and a scan stops at a record whose
 * incarnation is lower than its predecessor's (DXL_RING_END_GHOST). Without
 * it, a record k+1 that survived a crash behind a torn record k (never
 * acknowledged) would come back to life once a later appender rewrote
 * position k with a record of the same size.
 */
#define DXL_REC_MAGIC 0x524c5844u
#define DXL_REC_VERSION 2
#define DXL_REC_HDR_SIZE 56
#define DXL_REC_TRL_SIZE 8
#define DXL_REC_MIN_SIZE 64
#define DXL_REC_MAX_PARTS 1024
#define DXL_REC_MAX_PAYLOAD (16u << 20)

enum dxl_rec_type {
	DXL_REC_DATA = 1,
	DXL_REC_SKIP = 2,
};

/* A decoded record (pointers point into the decoded buffer). */
struct dxl_rec {
	enum dxl_rec_type type;
	uint32_t writer;
	uint32_t epoch;
	uint64_t seq;
	uint64_t txn_id;
	uint64_t commit_ts;
	uint32_t incarnation; /* the ring's incarnation (an appender sets it) */
	uint16_t nparts;
	const uint8_t *parts; /* nparts little-endian u32; use dxl_rec_part() */
	const void *payload;
	uint32_t payload_len;
	uint32_t total_len; /* bytes the record occupies, padding included */
};

/* dxl_rec_part -- participant i of a decoded record */
uint32_t dxl_rec_part(const struct dxl_rec *r, unsigned i);

/*
 * dxl_rec_size -- bytes a record with nparts participants and payload_len
 * payload bytes occupies (aligned and padded as above), or 0 if over the
 * limits (DXL_REC_MAX_PARTS, DXL_REC_MAX_PAYLOAD).
 */
uint32_t dxl_rec_size(unsigned nparts, uint32_t payload_len);

/*
 * dxl_rec_encode -- write record r (its type, writer, epoch, seq, txn_id,
 * commit_ts, incarnation, nparts, parts, payload, payload_len; total_len is
 * ignored) into
 * buf. `parts` here may be any array of u32 in host order: pass them with
 * dxl_rec_encode_parts. Returns the total length, or DXL_E_TOOBIG (over the
 * limits), DXL_E_INVAL (NULL pointers, bad type, cap too small).
 */
int dxl_rec_encode(const struct dxl_rec *r, const uint32_t *parts, void *buf,
		   size_t cap);

/*
 * dxl_rec_encode_skip -- a skip record of exactly `total` bytes (a multiple
 * of 64, >= 64) telling readers to continue at the ring's start, of
 * incarnation 0; dxl_rec_encode_skip_inc gives it the ring's incarnation.
 */
int dxl_rec_encode_skip(uint32_t writer, uint32_t epoch, uint64_t seq,
			uint32_t total, void *buf, size_t cap);
int dxl_rec_encode_skip_inc(uint32_t writer, uint32_t epoch,
			    uint32_t incarnation, uint64_t seq, uint32_t total,
			    void *buf, size_t cap);

/*
 * dxl_rec_decode -- validate and decode the record at buf, of which `avail`
 * bytes are readable. Returns 0 and fills *out, or DXL_E_CORRUPT with a
 * message saying what disagrees ("trailer length 96, header says 128"). A
 * record claiming more than avail bytes is DXL_E_CORRUPT. Never reads
 * outside [buf, buf+avail).
 */
int dxl_rec_decode(const void *buf, size_t avail, struct dxl_rec *out);

/*
 * dxl_rec_peek_size -- the total length the header at buf claims (at least
 * DXL_REC_HDR_SIZE bytes readable), or 0 if it is no plausible header. Only
 * the header is looked at: the record may be incomplete or corrupt (for a
 * reader deciding how many bytes to fetch; dxl_rec_decode validates).
 */
uint32_t dxl_rec_peek_size(const void *buf, size_t avail);

/* dxl_crc32c -- CRC32C (Castagnoli) of len bytes, continuing from crc */
uint32_t dxl_crc32c(uint32_t crc, const void *buf, size_t len);

/* ---- persistent memory regions ------------------------------------------- */

/*
 * How a region's stores become durable. Chosen when a data directory is
 * created, recorded in it and in every region's superblock, checked at open.
 *
 *   pmem     a DAX file or device (real NVM): persist = CPU cache flush
 *            (clwb/clflushopt) + fence. Survives power failure. Refused with
 *            DXL_E_NOTSUP on a mapping that is not DAX.
 *   msync    an ordinary file: persist = msync(MS_SYNC) of the touched pages.
 *            Survives an OS crash and power failure (as far as the disk
 *            honours flushes); costs a system call and a disk flush.
 *   process  an ordinary file (page cache; tmpfs is fine): persist = store
 *            fence only. Survives the crash of the process, not of the OS.
 *            This is libpmem2's PMEM2_FORCE_GRANULARITY semantics, made an
 *            explicit mode. What a *power* failure would lose in this mode
 *            is simulated by the tcp fabric's power-failure model.
 */
enum dxl_durability {
	DXL_DUR_PMEM = 0,
	DXL_DUR_MSYNC = 1,
	DXL_DUR_PROCESS = 2,
};

const char *dxl_durability_name(enum dxl_durability d);
/* "pmem"/"msync"/"process" -> enum; DXL_E_INVAL otherwise */
int dxl_durability_parse(const char *s, enum dxl_durability *out);

#define DXL_CLUSTER_NAME_MAX 64 /* including the NUL */
#define DXL_REGION_HDR_SIZE 4096 /* superblock; the data area follows */

/* Who a region belongs to; stored in its superblock, checked at open. */
struct dxl_region_id {
	char cluster[DXL_CLUSTER_NAME_MAX];
	uint32_t node_id;
	uint32_t kind;           /* what the data area holds (a DXL_REGION_*) */
	uint64_t creation_id;    /* chosen at random by dxl_region_create when 0:
				    tells this region from one recreated under
				    the same name (a data identity) */
};

struct dxl_region;

/*
 * dxl_region_create -- create the file at path (which must not exist) of
 * DXL_REGION_HDR_SIZE + data_size bytes, zeroed, with a superblock
 * {magic, format version, durability, id, sizes, CRC32C}, and map it. The
 * file appears under its name only once complete (written as path.tmp,
 * persisted, renamed). Errors: DXL_E_INVAL (bad size or id), DXL_E_EXIST,
 * DXL_E_NOTSUP (pmem mode on a non-DAX file), DXL_E_IO.
 */
int dxl_region_create(const char *path, uint64_t data_size,
		      enum dxl_durability mode, const struct dxl_region_id *id,
		      struct dxl_region **out);

/*
 * dxl_region_open -- map an existing region after checking its superblock.
 * `expect` gives the cluster and node id it must belong to, and `kind`
 * (0 = any). Every mismatch is a clear error that changes nothing:
 * DXL_E_NOENT (no file), DXL_E_CORRUPT (too short for a superblock, bad
 * magic, bad checksum, file size disagrees with the superblock, i.e.
 * truncated), DXL_E_VERSION (other format version), DXL_E_STALE (another
 * cluster or node id, or another kind), DXL_E_CONFIG (other durability
 * mode), DXL_E_NOTSUP (pmem mode on a non-DAX file), DXL_E_IO.
 */
int dxl_region_open(const char *path, enum dxl_durability mode,
		    const struct dxl_region_id *expect, struct dxl_region **out);

/* dxl_region_close -- unmap; *r = NULL. Does not persist anything. */
void dxl_region_close(struct dxl_region **r);

/* The data area: DXL_REGION_HDR_SIZE bytes into the mapping, page-aligned. */
void *dxl_region_data(const struct dxl_region *r);
uint64_t dxl_region_data_size(const struct dxl_region *r);
const struct dxl_region_id *dxl_region_id(const struct dxl_region *r);
enum dxl_durability dxl_region_durability(const struct dxl_region *r);
const char *dxl_region_path(const struct dxl_region *r);

/*
 * dxl_region_persist -- make [addr, addr+len) of the data area durable as
 * the region's mode defines. Every store to a region that must survive goes
 * through this (or dxl_region_memcpy_persist): that is where the persistence
 * points of the code are.
 */
void dxl_region_persist(struct dxl_region *r, const void *addr, size_t len);

/*
 * dxl_region_memcpy_persist -- copy len bytes to dst in the data area with
 * non-temporal stores (H4, H7: no read-for-ownership of NVM lines), then
 * persist. What a two-sided PWrite handler uses.
 */
void dxl_region_memcpy_persist(struct dxl_region *r, void *dst,
			       const void *src, size_t len);

/*
 * dxl_region_bind_mr -- mr is the fabric registration of r's data area (as
 * a replica serves it): make remote WRITEs into it durable the way r's mode
 * says when the fabric flushes them (dxl_mr_set_persist_fn), e.g. msync in
 * msync mode. Call right after dxl_mr_reg. DXL_E_INVAL if mr is not r's
 * data area.
 */
int dxl_region_bind_mr(struct dxl_region *r, struct dxl_mr *mr);

/* ---- data directory -------------------------------------------------------- */

/*
 * A node's data directory holds its regions and a small file DXL_DATADIR
 * recording {format version, cluster, node id, durability}. Opening it takes
 * an exclusive lock (flock on DATADIR/LOCK), so a second process on the same
 * directory is refused with DXL_E_BUSY and changes nothing.
 */
struct dxl_datadir;

/*
 * dxl_datadir_open -- open (create = 0) or create-if-empty (create = 1) the
 * directory at path for cluster/node with the given durability mode.
 * Errors: DXL_E_BUSY (locked by another process), DXL_E_NOENT (no such
 * directory, or not initialised and create = 0), DXL_E_STALE (other cluster
 * or node id), DXL_E_CONFIG (initialised with another durability mode),
 * DXL_E_CORRUPT, DXL_E_VERSION, DXL_E_INVAL, DXL_E_IO.
 */
int dxl_datadir_open(const char *path, const char *cluster, uint32_t node_id,
		     enum dxl_durability mode, int create,
		     struct dxl_datadir **out);
void dxl_datadir_close(struct dxl_datadir **d);
const char *dxl_datadir_path(const struct dxl_datadir *d);
enum dxl_durability dxl_datadir_durability(const struct dxl_datadir *d);

/* ---- rings: the log's layout inside a region ------------------------------ */

/*
 * A log region (kind DXL_REGION_LOG) holds one ring per writer (DrTM+H:
 * per coordinator thread), so an append needs no remote atomic on a shared
 * tail. Data area layout:
 *
 *   0                     log header (4096 B): magic, version, shard, nrings,
 *                         ring size, CRC32C
 *   4096 + i*(4096+size)  ring i control block (4096 B): two head slots
 *                         (written by the replica's CPU), owner word, watermark
 *   ... + 4096            ring i buffer (size bytes, a multiple of 4096)
 *
 * Control block offset 128 holds the ring's owner word: low 32 bits 0
 * while unclaimed (never used, or closed by dxl_appender_close), else 1 +
 * the writer id; high 32 bits the ring's claim generation, which every
 * claim increments and a close keeps (so the word of one holder is never
 * the word of another, nor the closed word before a claim the one after
 * its close: DXL_RING_OWNER). It is NIC-owned (H8): changed only by a
 * fabric CAS, which is how a writer claims its ring at start-up.
 *
 * Control block offset 192 (its own cache line) holds the writer's
 * watermark {T, T ^ DXL_RING_WMARK_MAGIC}, its last-add-confirmed: every
 * record of this writer with a commit timestamp below T is acknowledged
 * (persistent on every replica), and the writer will never append below T.
 * The writer writes it with every append (remote WRITE before the flush
 * READ, so it is as durable as the record) and when idle
 * (dxl_appender_heartbeat). After a failed append it stays at that append's
 * timestamp. Tailers take the minimum over the live writers' rings as the
 * resolved timestamp and deliver only records below it.
 *
 * Control block offsets 256 and 320 (one line each) hold the ring's
 * incarnation in two slots {I, I ^ DXL_RING_INC_MAGIC} (writer-written):
 * every appender that opens the ring takes I = one more than the highest
 * incarnation any target's slots or records show, writes it on every
 * target into the slot that does not hold that target's highest, and
 * flushes it before its first append; its records carry I. A torn slot
 * leaves the other one readable, so a target's incarnation never goes
 * back. The highest valid slot is the ring's incarnation.
 *
 * Positions are 64-bit logical byte offsets that only grow; a record at
 * position p lives at buffer offset p % size. Records never straddle the
 * end of the buffer: the writer fills the rest with a skip record first.
 * Every record of a ring, skips included, carries the next sequence number,
 * so a reader can tell the record it expects from a stale one of an earlier
 * lap, and stops at the first record that is not valid.
 *
 * The head (pos, seq) is what the replica has applied or retained: the
 * writer may reuse space below it. The replica persists it in one of two
 * slots {generation, pos, seq, last_ts, CRC32C}, alternating, so a crash
 * during the update leaves the previous head readable. last_ts is the
 * commit timestamp of the last record below the head, so a restarted writer
 * never appends below what was already applied. Writers learn it by READing the
 * control block (the flush READ of an append does that for free).
 */
#define DXL_REGION_LOG 1u
#define DXL_LOG_HDR_SIZE 4096
#define DXL_RING_CTL_SIZE 4096
#define DXL_RING_MAX 1024
#define DXL_RING_HEAD_SLOT_SIZE 64 /* two slots at control-block offset 0 */
#define DXL_RING_OWNER_OFF 128     /* owner word in the control block */
/* the owner word: generation << 32 | (0 unclaimed, else 1 + writer id) */
#define DXL_RING_OWNER(gen, holder) (((uint64_t)(uint32_t)(gen) << 32) | (uint32_t)(holder))
#define DXL_RING_OWNER_GEN(w) ((uint32_t)((uint64_t)(w) >> 32))
#define DXL_RING_OWNER_HOLDER(w) ((uint32_t)(w)) /* 0, or 1 + writer id */
#define DXL_RING_WMARK_OFF 192     /* watermark {ts, ts ^ magic}, own line */
#define DXL_RING_WMARK_SIZE 16
#define DXL_RING_INC_OFF 256       /* incarnation slots, one line each */
#define DXL_RING_INC_SLOT 64       /* slot i at DXL_RING_INC_OFF + i * 64 */
/* what an appender READs of a control block at open: up to the second
 * incarnation slot's words */
#define DXL_RING_CTL_READ (DXL_RING_INC_OFF + DXL_RING_INC_SLOT + 16)

struct dxl_logstore;

/* dxl_logstore_bytes -- data size a region needs for nrings of ring_size */
uint64_t dxl_logstore_bytes(uint32_t nrings, uint64_t ring_size);

/*
 * dxl_logstore_format -- lay out an empty log in region r (its data area
 * must be at least dxl_logstore_bytes) and persist it.
 * Errors: DXL_E_INVAL (nrings 1..DXL_RING_MAX, ring_size a multiple of
 * 4096 >= 8192, region too small), DXL_E_EXIST (already formatted).
 */
int dxl_logstore_format(struct dxl_region *r, uint32_t shard, uint32_t nrings,
			uint64_t ring_size);

/*
 * dxl_logstore_open -- check the log header of region r.
 * Errors: DXL_E_CORRUPT (bad magic/checksum, sizes beyond the region),
 * DXL_E_VERSION, DXL_E_NOMEM.
 */
int dxl_logstore_open(struct dxl_region *r, struct dxl_logstore **out);
void dxl_logstore_close(struct dxl_logstore **ls);

uint32_t dxl_logstore_nrings(const struct dxl_logstore *ls);
uint64_t dxl_logstore_ring_size(const struct dxl_logstore *ls);
uint32_t dxl_logstore_shard(const struct dxl_logstore *ls);
struct dxl_region *dxl_logstore_region(const struct dxl_logstore *ls);
/* offsets (in the region's data area) of ring i's control block and buffer */
uint64_t dxl_logstore_ctl_off(const struct dxl_logstore *ls, uint32_t ring);
uint64_t dxl_logstore_buf_off(const struct dxl_logstore *ls, uint32_t ring);

/* the replica's persisted head of a ring */
struct dxl_ring_head {
	uint64_t gen; /* increases with every update */
	uint64_t pos;
	uint64_t seq; /* sequence number of the record at pos */
	uint64_t last_ts; /* commit timestamp of the last record before pos */
};

/*
 * dxl_ring_head_decode -- the valid head slot with the highest generation
 * among the two slots of a control block (as read locally or by a remote
 * READ of DXL_RING_HEAD_SLOT_SIZE * 2 bytes): the head the replica set
 * last. What the replica itself and a restart (everything left is durable)
 * read. DXL_E_CORRUPT if neither slot is valid.
 *
 * dxl_ring_head_decode_durable -- the head a reader of a RUNNING replica may
 * rely on: the older of two valid slots (else the only valid one).
 * dxl_logstore_set_head stores a new head into both slots in turn and
 * persists each before storing the next, so the newer slot may be visible
 * before it is durable, the older never. A writer reuses space only below
 * this head: reusing space below a head that a power failure can take back
 * overwrites records the replica still needs after its restart.
 */
int dxl_ring_head_decode(const void *slots, struct dxl_ring_head *out);
int dxl_ring_head_decode_durable(const void *slots, struct dxl_ring_head *out);

int dxl_logstore_head(const struct dxl_logstore *ls, uint32_t ring,
		      struct dxl_ring_head *out);

/*
 * dxl_logstore_set_head -- persist a new head for ring: pos, seq and the
 * commit timestamp of the last record before pos (none may go backwards:
 * DXL_E_INVAL). Replica side only (CPU-owned words, H8). The head is
 * written into both slots, one after the other, each persisted before the
 * next (two persists): writers, which trust the older slot
 * (dxl_ring_head_decode_durable), see it only once it is durable.
 */
int dxl_logstore_set_head(struct dxl_logstore *ls, uint32_t ring, uint64_t pos,
			  uint64_t seq, uint64_t last_ts);

#define DXL_RING_WMARK_MAGIC 0x574d41524b444c58ull /* "XLDKRAMW" */

/*
 * dxl_logstore_watermark -- ring's watermark as last written by its writer;
 * 0 if none was ever written or the two words disagree (a torn write: the
 * caller treats it as "nothing promised").
 */
uint64_t dxl_logstore_watermark(const struct dxl_logstore *ls, uint32_t ring);

/* dxl_ring_wmark_decode -- the same, from 16 bytes read remotely */
uint64_t dxl_ring_wmark_decode(const void *buf);

#define DXL_RING_INC_MAGIC 0x434e49524c58444eull /* "NDXLRINC" */

/*
 * dxl_ring_inc_decode -- the incarnation recorded in a control block (as
 * read locally or remotely, at least DXL_RING_CTL_READ bytes): the highest
 * of the two slots whose words agree, 0 if none does (never opened).
 */
uint32_t dxl_ring_inc_decode(const void *ctl);
/* dxl_ring_inc_encode -- slot bytes (16) for incarnation inc */
void dxl_ring_inc_encode(void *slot, uint32_t inc);
/* dxl_logstore_incarnation -- dxl_ring_inc_decode of ring's control block */
uint32_t dxl_logstore_incarnation(const struct dxl_logstore *ls, uint32_t ring);

/*
 * dxl_logstore_truncate -- repair: make ring end at (pos, seq), dropping the
 * records from there on (which must never have been acknowledged: the
 * membership layer decides). pos must be a record boundary at or after the
 * head, reached by the scan with sequence seq. The record at pos is
 * invalidated and persisted; a later append continues at (pos, seq).
 * Returns the number of records dropped. Errors: DXL_E_INVAL (pos, seq is
 * not such a boundary), DXL_E_CORRUPT (unreadable head).
 */
int dxl_logstore_truncate(struct dxl_logstore *ls, uint32_t ring, uint64_t pos,
			  uint64_t seq);

/* ---- the persister: remote WRITEs made durable by the replica's CPU -------- */

/*
 * Where the flush READ alone does not make a ring's remote WRITEs durable,
 * the replica's CPU does it and the writer waits for that (docs/log.md,
 * "What an acknowledgement means"). That is the verbs provider on an
 * `msync` region: a real NIC places WRITEs into the page cache, and its
 * READ flushes nothing to the disk; worse, the pages it writes are pinned
 * and the kernel does not see them dirtied, so even an msync writes nothing
 * back until the CPU writes to the page itself (measured in the Soft-RoCE
 * guest: docs/rdma.md). The tcp provider runs the region's persist function
 * at the flush READ instead; `pmem` needs nothing (the READ flushes the NIC's
 * writes to the persistence domain); `process` promises only what the page
 * cache keeps.
 *
 * Two lines of each ring's control block serve it:
 *
 *   DXL_RING_PREQ_OFF   the persist REQUEST, written by the ring's writer with
 *                       a remote WRITE after the WRITEs it covers and before
 *                       the flush READ: {id, from, to, check}: "make ring
 *                       positions [from, to) and the control block durable";
 *                       ids only grow; a request covers every earlier one
 *                       not yet confirmed, so the persister may skip to the
 *                       latest. check = a hash of the three (a torn request
 *                       is ignored until it is whole).
 *   DXL_RING_PDONE_OFF  the CONFIRMATION, written by the replica's CPU only:
 *                       {state, done, done ^ magic}. state ==
 *                       DXL_RING_PERSISTER_ON: this replica runs a persister,
 *                       and a writer acknowledges an append on it only once
 *                       done >= the id of a request covering the append
 *                       (record, skip record and watermark). Any other state:
 *                       the flush READ is enough.
 *
 * The persister (a thread of the replica) polls the request lines; for a new
 * request it writes every page of the range and of the control block with a
 * no-op locked RMW (so the kernel sees them dirty: NIC-written pinned pages
 * are not), persists them (dxl_region_persist: msync) and only then
 * publishes done = id.
 */
#define DXL_RING_PREQ_OFF 512       /* persist request line (writer) */
#define DXL_RING_PDONE_OFF 576      /* persist confirmation line (replica CPU) */
#define DXL_RING_PLINE_SIZE 64
#define DXL_RING_PREQ_SIZE 32       /* the bytes of a request a writer sends */
#define DXL_RING_PERSISTER_ON 0x4e4f525453525044ull /* "DPRSTRON" */

struct dxl_persist_req {
	uint64_t id;   /* > 0 */
	uint64_t from; /* ring positions [from, to) */
	uint64_t to;
};

/* dxl_persist_needed -- 1 when remote WRITEs into a region of durability d
 * served by provider p need the replica's persister (verbs + msync) */
int dxl_persist_needed(enum dxl_durability d, enum dxl_fabric_provider p);

/* encode a request into DXL_RING_PREQ_SIZE bytes / decode one read from a
 * ring (0, or -1 when it is torn or was never written: nothing set) */
void dxl_ring_preq_encode(const struct dxl_persist_req *r, void *buf);
int dxl_ring_preq_decode(const void *buf, struct dxl_persist_req *out);

/* decode a confirmation line: 1 if its state is DXL_RING_PERSISTER_ON;
 * *done = the confirmed id (0 when none, or torn) */
int dxl_ring_pdone_decode(const void *line, uint64_t *done);

/*
 * dxl_logstore_persister_mark -- set (on) or clear every ring's
 * confirmation state and persist it. A replica calls it before its log is
 * reachable: on when it will run a persister (dxl_persister_start does it),
 * off when the flush READ is enough. Writers read it when they open.
 */
void dxl_logstore_persister_mark(struct dxl_logstore *ls, int on);

struct dxl_persist_stats {
	uint64_t requests; /* requests served (each one confirmed) */
	uint64_t torn;     /* request lines read torn (retried later) */
	uint64_t bytes;    /* ring bytes persisted */
	uint64_t rounds;   /* passes over the rings */
};

/*
 * dxl_logstore_persist_step -- one pass over every ring of ls: serve each
 * request whose id is above the ring's confirmation line (touch, persist,
 * confirm) and keep the rings marked DXL_RING_PERSISTER_ON (the line, not
 * a remembered id, decides: a state transfer or a restart may rewrite
 * it). last[] (nrings entries) receives the id served last per ring.
 * Returns the number of requests served. For the persister thread, and for
 * tests that drive it by hand.
 */
int dxl_logstore_persist_step(struct dxl_logstore *ls, uint64_t *last,
			      struct dxl_persist_stats *st);

struct dxl_persister;

/*
 * dxl_persister_start -- mark ls's rings (DXL_RING_PERSISTER_ON) and start a
 * thread that serves their requests until dxl_persister_stop. Idle, it
 * polls every 20 us .. 1 ms (backing off). Errors: DXL_E_NOMEM.
 */
int dxl_persister_start(struct dxl_logstore *ls, struct dxl_persister **out);
/* stop and join the thread; the rings stay marked (a writer then waits and
 * times out: never an acknowledgement without persistence). *p = NULL. */
void dxl_persister_stop(struct dxl_persister **p);
/* tests: pause (returns once the thread is parked: nothing is confirmed
 * from then on) or resume the persister */
void dxl_persister_pause(struct dxl_persister *p, int paused);
void dxl_persister_stats(const struct dxl_persister *p,
			 struct dxl_persist_stats *out);

/* ---- placing records (writer side, pure arithmetic) ------------------------ */

/*
 * Where an append of a record of rec_size bytes goes in a ring of
 * ring_size bytes whose writer tail is (tail_pos, tail_seq) and whose head
 * position is head_pos: optionally a skip record first (when the record
 * would straddle the end), then the record. DXL_E_FULL if it does not fit
 * before the head (the writer must wait for the replica to advance it),
 * DXL_E_TOOBIG if it could never fit (rec_size > ring_size / 2).
 */
struct dxl_ring_place {
	uint32_t skip_len;  /* 0 = no skip record */
	uint64_t skip_off;  /* buffer offset of the skip record */
	uint64_t skip_seq;
	uint64_t rec_off;   /* buffer offset of the record */
	uint64_t rec_pos;   /* logical position of the record */
	uint64_t rec_seq;
	uint64_t new_tail_pos;
	uint64_t new_tail_seq;
};

int dxl_ring_place(uint64_t ring_size, uint64_t tail_pos, uint64_t tail_seq,
		   uint64_t head_pos, uint32_t rec_size,
		   struct dxl_ring_place *out);

/* ---- scanning a ring ------------------------------------------------------- */

/*
 * dxl_ring_scan -- walk ring `ring` from its persisted head: decode each
 * record, check that it carries the expected sequence number, step over
 * skip records, and call fn for each data record, stopping at the first
 * invalid one (a torn, stale or never-written record: the end of the ring's
 * valid content) or when fn returns non-zero, or after a full lap.
 * *end_pos / *end_seq (may be NULL) receive where the scan stopped: the
 * position a writer would append at next.
 * Returns the number of data records visited, or DXL_E_CORRUPT when the
 * head itself is unreadable.
 */
typedef int (*dxl_ring_scan_fn)(const struct dxl_rec *rec, uint64_t pos,
				void *arg);
int dxl_ring_scan(const struct dxl_logstore *ls, uint32_t ring,
		  dxl_ring_scan_fn fn, void *arg, uint64_t *end_pos,
		  uint64_t *end_seq);

/*
 * dxl_ring_advance_head -- apply-all for tests and tools: set ring's head to
 * the end of its valid records (what a replica does after applying them).
 * Returns the number of records passed, or a negative error.
 */
int dxl_ring_advance_head(struct dxl_logstore *ls, uint32_t ring);

/*
 * A ring iterator walks the valid records of one ring from a start point
 * (the persisted head, or a cursor position/sequence a tailer kept), with
 * the checks of dxl_ring_scan. Only data records are returned.
 */
/* why a walk ended (dxl_ring_iter.end): what lies at it->pos */
enum dxl_ring_end {
	DXL_RING_END_NONE = 0,  /* not ended yet */
	DXL_RING_END_EMPTY = 1, /* no record header: never written, or zeroed */
	DXL_RING_END_TORN = 2,  /* a record header, but the record does not
				   check out (torn by a crash, or corrupt) */
	DXL_RING_END_STALE = 3, /* a valid record of an earlier lap (its
				   sequence number is not the next one) */
	DXL_RING_END_GHOST = 4, /* a valid record with the next sequence number
				   but of a lower incarnation than its
				   predecessor: written before it, not after */
	DXL_RING_END_LAP = 5,   /* a whole lap walked */
};

struct dxl_ring_iter {
	const uint8_t *buf; /* the ring buffer (a region's, or a copy of one) */
	uint64_t ring_size;
	uint32_t ring;
	uint64_t start_pos;
	uint64_t pos; /* position of the next record to examine */
	uint64_t seq; /* its expected sequence number */
	uint32_t inc; /* incarnation of the last record passed (0: none yet) */
	int done;
	enum dxl_ring_end end; /* set once done */
};

/* from the persisted head; DXL_E_CORRUPT if it is unreadable */
int dxl_ring_iter_init(struct dxl_ring_iter *it, const struct dxl_logstore *ls,
		       uint32_t ring);
/* from (pos, seq); DXL_E_INVAL if ring is out of range */
int dxl_ring_iter_init_at(struct dxl_ring_iter *it,
			  const struct dxl_logstore *ls, uint32_t ring,
			  uint64_t pos, uint64_t seq);
/* over a ring buffer in memory, e.g. a copy READ from a remote replica */
void dxl_ring_iter_init_buf(struct dxl_ring_iter *it, const void *buf,
			    uint64_t ring_size, uint64_t pos, uint64_t seq);
/* 1 and the next data record (and its position), or 0 at the end */
int dxl_ring_iter_next(struct dxl_ring_iter *it, struct dxl_rec *rec,
		       uint64_t *pos);

/*
 * dxl_log_scan_merged -- every valid data record of every ring from its
 * persisted head, merged in the log's order (commit timestamp, then writer
 * id), stopping before the first record whose commit timestamp is >=
 * resolved_ts (UINT64_MAX: no bound): no writer can still append below a
 * resolved timestamp, so what is emitted is a stable prefix of the log.
 * Records of one ring must carry non-decreasing timestamps (one writer's
 * hybrid clock); a ring that violates it is reported with DXL_E_CORRUPT.
 * fn returning non-zero stops the scan. Returns the number of records
 * emitted, or a negative error.
 */
typedef int (*dxl_log_merge_fn)(uint32_t ring, const struct dxl_rec *rec,
				uint64_t pos, void *arg);
int dxl_log_scan_merged(const struct dxl_logstore *ls, uint64_t resolved_ts,
			dxl_log_merge_fn fn, void *arg);

/* ---- RDPMA: remote persistent memory over the fabric (000 §2.3.5) --------- */

/*
 * Users do not touch remote NVM through raw pointers: they allocate fat
 * pointers {node, rkey, addr, padded length} and RDPMA applies the hints
 * (000 L681-697): an object below 256 bytes is aligned and padded to 64-byte
 * PCIe words (H6/H7: no partial-line read-modify-write), one of 256 bytes
 * or more to 256-byte XPLines (H5). Locks and other atomics live in DRAM
 * (H8), never in an RDPMA object.
 */
struct dxl_fatptr {
	uint64_t addr; /* remote virtual address, aligned as above */
	uint32_t len;  /* padded length */
	uint32_t rkey;
	uint32_t node;
};

/* dxl_rdpma_padded -- the padded size of an object of size bytes (0 if 0) */
uint32_t dxl_rdpma_padded(uint32_t size);

/*
 * A heap hands out fat pointers inside [base+off, base+off+len) of a
 * registered region; its bookkeeping is in DRAM (the owner rebuilds it after
 * a crash from what it stored). One thread at a time.
 */
struct dxl_rdpma_heap;

/* Errors: DXL_E_INVAL (range outside the region, not 256-aligned), DXL_E_NOMEM */
int dxl_rdpma_heap_new(struct dxl_mr *mr, uint64_t off, uint64_t len,
		       struct dxl_rdpma_heap **out);
void dxl_rdpma_heap_delete(struct dxl_rdpma_heap **h);
/* Errors: DXL_E_INVAL (size 0), DXL_E_TOOBIG (over 16 MiB), DXL_E_FULL */
int dxl_rdpma_alloc(struct dxl_rdpma_heap *h, uint32_t size,
		    struct dxl_fatptr *out);
/* Errors: DXL_E_INVAL (not a live allocation of this heap: double free,
 * foreign or altered pointer); nothing changes then */
int dxl_rdpma_free(struct dxl_rdpma_heap *h, const struct dxl_fatptr *fp);
/* bytes handed out (padded), for tests and stats */
uint64_t dxl_rdpma_heap_used(const struct dxl_rdpma_heap *h);

/* How a one-sided PWrite makes its WRITE durable */
enum dxl_pwrite_mode {
	/* H9: WRITE (unsignalled) + READ (signalled) on the same QP, one
	 * doorbell; the READ's completion means the WRITE is persistent
	 * (000 L663-675). One round trip. */
	DXL_PWRITE_H9 = 0,
	/* the librpmem strawman: WRITE, wait for it, then READ, wait. Two round
	 * trips; kept so benchmarks can show the difference. */
	DXL_PWRITE_STRAWMAN = 1,
	/* no flush READ at all: the WRITE is placed, NOT durable. Only for the
	 * negative tests that prove the crash tests can fail. */
	DXL_PWRITE_NOFLUSH = 2,
};

const char *dxl_pwrite_mode_name(enum dxl_pwrite_mode m);

/*
 * dxl_rdpma_pwrite_chain -- fill wr[0..1] with the H9 pair for writing len
 * bytes from src (in the MR of lkey) at fp->addr + off: wr[0] an unsignalled
 * WRITE, wr[1] a signalled 8-byte READ of flush_raddr (any 8 readable bytes
 * of the same node under flush_rkey, e.g. a ring's head slots) into
 * flush_dst (8-byte aligned, in the MR of flush_lkey), linked. The READ
 * carries wr_id. Returns 2. Errors: DXL_E_INVAL (off+len beyond the fat
 * pointer, len 0).
 */
int dxl_rdpma_pwrite_chain(struct dxl_wr wr[2], const struct dxl_fatptr *fp,
			   uint64_t off, const void *src, uint32_t len,
			   uint32_t lkey, uint64_t flush_raddr,
			   uint32_t flush_rkey, void *flush_dst,
			   uint32_t flush_lkey, uint64_t wr_id);

/*
 * Synchronous one-sided Read/Write/PWrite on fat pointers: post, then poll
 * the QP's ctx until the request completes (dxl_ctx_wait while idle). For
 * callers that have nothing else in flight on that ctx (tools, tests, set-up
 * paths): a completion of another request reaped meanwhile is an error
 * (DXL_E_STATE). Code with many requests in flight builds chains with
 * dxl_rdpma_pwrite_chain and routes completions itself (coroutines).
 * `scratch` is an 8-byte-aligned 8-byte buffer in the MR of scratch_lkey
 * used as the flush READ's destination.
 * Errors: DXL_E_INVAL (range outside the fat pointer), DXL_E_ACCESS (remote
 * access error), DXL_E_UNREACHABLE (peer dead or timed out), DXL_E_STATE
 * (QP in error), and dxl_qp_post's errors.
 */
int dxl_rdpma_read(struct dxl_qp *qp, const struct dxl_fatptr *fp,
		   uint64_t off, void *dst, uint32_t len, uint32_t lkey);
int dxl_rdpma_write(struct dxl_qp *qp, const struct dxl_fatptr *fp,
		    uint64_t off, const void *src, uint32_t len, uint32_t lkey);
int dxl_rdpma_pwrite(struct dxl_qp *qp, const struct dxl_fatptr *fp,
		     uint64_t off, const void *src, uint32_t len, uint32_t lkey,
		     enum dxl_pwrite_mode mode, void *scratch,
		     uint32_t scratch_lkey);
/*
 * Two-sided PWrite (000 L697): an RPC whose handler, on the node that owns
 * the memory, copies the data with non-temporal stores and persists it
 * (dxl_region_memcpy_persist: H4/H7 ntstore + fence, or msync by mode).
 * dxl_rdpma_serve registers that handler on the node's RPC endpoint for
 * the region r, registered as mr; requests for addresses outside mr or with
 * another rkey are refused (DXL_E_ACCESS) and change nothing.
 */
#define DXL_RPC_ID_RDPMA_PWRITE 1000 /* handler ids 1000..1023: dxl's own */

struct dxl_rpc;
struct dxl_rdpma_server;

/* Errors: DXL_E_INVAL (mr is not r's data area), DXL_E_EXIST, DXL_E_NOMEM */
int dxl_rdpma_serve(struct dxl_rpc *rpc, struct dxl_region *r,
		    const struct dxl_mr *mr, struct dxl_rdpma_server **out);
/* frees the server state; delete it after the rpc (handlers stop first) */
void dxl_rdpma_server_delete(struct dxl_rdpma_server **srv);

/*
 * dxl_rdpma_pwrite_2s -- from a coroutine of rpc's scheduler: write len
 * bytes to fp at off through the owner's CPU; persistent at return.
 * Errors: DXL_E_INVAL (range outside fp), DXL_E_TOOBIG (over the RPC's
 * largest payload minus 16), DXL_E_ACCESS (refused by the owner), and the
 * errors of dxl_rpc_call (DXL_E_UNREACHABLE, DXL_E_TIMEDOUT, ...).
 */
int dxl_rdpma_pwrite_2s(struct dxl_rpc *rpc, struct dxl_qp *qp,
			const struct dxl_fatptr *fp, uint64_t off,
			const void *src, uint32_t len);

/* a synchronous 8-byte CAS at raddr; *old receives the previous value */
int dxl_rdpma_cas(struct dxl_qp *qp, uint64_t raddr, uint32_t rkey,
		  uint64_t compare, uint64_t swap, uint64_t *old, void *scratch,
		  uint32_t scratch_lkey);

/* ---- replicated append --------------------------------------------------- */

/*
 * What a writer needs to append to one replica's ring: where the replica
 * listens, its log data area as registered (REMOTE_READ | REMOTE_WRITE |
 * REMOTE_ATOMIC | PERSISTENT; addr = the first byte of the region's data
 * area), and the ring assigned to this writer. Plain data: the replica fills it
 * (dxl_log_target_init) and publishes it; writers copy it.
 */
struct dxl_log_target {
	char addr[DXL_FABRIC_ADDR_MAX];
	uint32_t remote_ctx;
	struct dxl_mr_desc data;
	uint32_t ring;
	uint64_t ring_size;
	uint64_t ctl_off; /* ring's control block, offset in the data area */
	uint64_t buf_off; /* ring's buffer, offset in the data area */
};

/*
 * dxl_log_target_init -- describe ring `ring` of ls, whose data area is
 * registered as data_mr, served at addr/remote_ctx.
 * Errors: DXL_E_INVAL (ring out of range, data_mr not the data area).
 */
int dxl_log_target_init(struct dxl_log_target *t, const struct dxl_logstore *ls,
			const struct dxl_mr *data_mr, const char *addr,
			uint32_t remote_ctx, uint32_t ring);

#define DXL_APPEND_MAX_TARGETS 8

struct dxl_appender_cfg {
	uint32_t writer_id;      /* written into every record */
	uint32_t epoch;          /* written into every record */
	uint32_t max_inflight;   /* appends in flight; default 16, 1..256 */
	uint32_t max_record;     /* largest encoded record; default 65536 */
	enum dxl_pwrite_mode mode; /* default DXL_PWRITE_H9 */
	uint32_t full_wait_ms;   /* wait for ring space at most; default 2000 */
	/* default false: targets whose rings end at different places are
	 * refused (DXL_E_STALE). true: targets[0] is the reference and every
	 * other target's ring is repaired to its content at start-up (see
	 * "Repair" below). */
	bool repair;
	/* a target that runs a persister (DXL_RING_PERSISTER_ON: verbs +
	 * msync) must confirm each append's request; no progress for this
	 * long fails it (DXL_E_UNREACHABLE). Default 10000. */
	uint32_t persist_timeout_ms;
};

void dxl_appender_cfg_init(struct dxl_appender_cfg *cfg);

/* One finished append, delivered in append order. */
struct dxl_append_result {
	uint64_t token;  /* as returned by dxl_appender_append */
	/* 0: persistent on every target (acknowledged). Otherwise the append
	 * is NOT acknowledged: DXL_E_UNREACHABLE (a target died or timed out),
	 * DXL_E_ACCESS (a target refused the access: stale rkey, fenced),
	 * DXL_E_STATE (a target's QP had failed earlier). */
	int status;
	uint32_t acked;  /* bit i: target i has it persistent */
	uint32_t failed; /* bit i: target i may not have it */
	uint64_t seq;    /* the record's sequence number in the ring */
	uint64_t pos;    /* its ring position */
	uint64_t wmark;  /* the watermark this append wrote (written before
			    its flush READ: durable on every target that
			    acknowledged it) */
};

struct dxl_appender;

/*
 * dxl_appender_new -- connect ctx to every target, claim each ring for
 * cfg.writer_id (a CAS on its owner word: from unclaimed, or taking over
 * an earlier holder of the same writer id, to 1 + writer id with the next
 * claim generation), read its head and contents to
 * find where this writer's records end (its tail), and get ready to append.
 * The appender owns ctx's completions from now on: do not post on or poll
 * ctx elsewhere while it lives.
 *
 * The next append's commit timestamp may not go below the last record's,
 * the head's last_ts, nor any target's watermark (the writer promised
 * never to append below it): dxl_appender_min_ts().
 *
 * Repair (cfg.repair). targets[0] is the REFERENCE: the shard's primary,
 * which holds every acknowledged record (an append is acknowledged only
 * when it is persistent on every target of the configuration, so every
 * surviving replica holds all of them and they differ at most in
 * unacknowledged suffixes, or lag behind). Every other target's ring is
 * made to end exactly where the reference's does (position and sequence):
 *  - ahead (it holds records the reference lacks: never acknowledged): the
 *    first line at the reference's end is zeroed and persisted, so its
 *    scan stops there (as dxl_logstore_truncate does locally);
 *  - behind: the reference's missing bytes are copied to it with
 *    one-sided WRITEs (two pieces across the ring's wrap), the line after
 *    them is zeroed, all persisted by a flush READ (H9). Only possible
 *    when it ends at or after the reference's head (bytes below it may be
 *    gone) and the copy would not overwrite records it has not reclaimed.
 * Before anything is written, the records both rings hold (from the later
 * of the two heads to the earlier of the two ends) are compared one by one
 * (position, sequence, type, length, checksum, commit timestamp); any
 * difference is DXL_E_STALE "diverged" (a bug or a foreign ring, never
 * silently repaired). Every target is checked before any is changed: an
 * error leaves every ring as it was but for its owner word (the claim
 * stands: the ring is this writer id's new holder's). Watermarks are left as they are (a
 * watermark above the reference's still holds: it only covers
 * acknowledged records, which every member has; the appender does not
 * append below it), and they bound what may be cut: a target's record
 * past the reference's end with a commit timestamp below the highest
 * watermark of any target was acknowledged, so the reference lost it:
 * refused (DXL_E_STALE "the reference ... is behind"), never truncated. The previous appender of this writer must be gone
 * (deleted, or its process dead), or its late WRITEs could land after the
 * repair.
 *
 * Incarnation (with or without repair). Before its first append the
 * appender takes a new incarnation of the ring (one more than the highest
 * any target's control block or records show; dxl_appender_incarnation),
 * writes it into every target's control block, zeroes the line at the
 * tail on every target (reference included) and flushes both (H9). Its
 * records carry it, and a scan never passes from a record to one of a
 * lower incarnation: a record that an earlier appender left beyond the end
 * (never acknowledged: e.g. behind a torn one) can never reappear after
 * this appender's records.
 *
 * The writer's contract after a failure: a writer whose appender failed
 * with appends in flight (their outcome unknown) opens a new appender with
 * repair on the new configuration. Every record in the reference ring is
 * then on every target, hence acknowledged. dxl_appender_last_ts() says
 * which of its records those are: the ones with commit_ts <= last_ts; the
 * ones above it are not in the log and must be appended again. This needs
 * the writer's commit timestamps to strictly increase (dxl_hlc_now does).
 *
 * Errors: DXL_E_INVAL (n 0 or over DXL_APPEND_MAX_TARGETS, bad cfg, rings
 * of different sizes), DXL_E_STALE (a ring is owned by or holds records of
 * another writer; without repair: the targets' rings end at different
 * places; with repair: a target is too far behind ("it must be caught up
 * first (dxl_xfer_pull)"), its records differ from the reference's
 * ("diverged"), or the reference lacks acknowledged records ("is
 * behind")), DXL_E_UNREACHABLE, DXL_E_ACCESS, DXL_E_CORRUPT
 * (unreadable head), DXL_E_NOMEM.
 */
int dxl_appender_new(struct dxl_ctx *ctx, const struct dxl_appender_cfg *cfg,
		     const struct dxl_log_target *targets, unsigned n,
		     struct dxl_appender **out);

/* dxl_appender_delete -- close the QPs; appends still in flight are
 * abandoned (neither acknowledged nor guaranteed absent). *a = NULL. */
void dxl_appender_delete(struct dxl_appender **a);

/*
 * dxl_appender_append -- start appending one data record to every target's
 * ring: one round trip per target (H9), all targets in parallel; many
 * appends may be in flight. The appender fills the record's type, writer,
 * epoch and seq; the caller gives txn_id, commit_ts (not below the previous
 * append's), nparts/parts and the payload. The payload is copied: the
 * caller's buffers may be reused at return. *token identifies the append in
 * its dxl_append_result.
 * Returns 0 once posted. Errors (nothing appended): DXL_E_AGAIN
 * (max_inflight appends await dxl_appender_poll), DXL_E_TOOBIG (over
 * max_record or half a ring), DXL_E_FULL (no ring space within
 * full_wait_ms: the replicas do not advance their heads), DXL_E_INVAL
 * (bad record: empty (no payload and no participants), commit_ts going
 * back), DXL_E_UNAVAIL (every target failed).
 */
int dxl_appender_append(struct dxl_appender *a, const struct dxl_rec *rec,
			const uint32_t *parts, uint64_t *token);

/*
 * dxl_appender_poll -- make progress without blocking and return up to n
 * finished appends, oldest first. Returns the count (0..n).
 */
int dxl_appender_poll(struct dxl_appender *a, struct dxl_append_result *res,
		      int n);

/* dxl_appender_wait -- block (spin, then sleep) until a result may be
 * ready, at most timeout_ms. 0 or DXL_E_TIMEDOUT. */
int dxl_appender_wait(struct dxl_appender *a, int timeout_ms);

/*
 * dxl_appender_append_sync -- append and wait for the result. Only when no
 * other append is in flight (DXL_E_BUSY otherwise). Returns 0 when the
 * record is persistent on every target, else the result's status (and
 * *res says which targets have it) or an error of dxl_appender_append.
 */
int dxl_appender_append_sync(struct dxl_appender *a, const struct dxl_rec *rec,
			     const uint32_t *parts,
			     struct dxl_append_result *res);

/*
 * dxl_appender_heartbeat -- an idle writer's promise: write the watermark
 * (ts, or the timestamp of the oldest append not yet acknowledged if that
 * is lower) to every live target, flushed like an append, without waiting;
 * later appends may not go below ts. Call it every few hundred ms while
 * idle so tailers' resolved timestamps advance.
 * Errors: DXL_E_INVAL (ts going back), DXL_E_AGAIN (max_inflight appends
 * in flight), DXL_E_UNAVAIL (every target failed).
 */
int dxl_appender_heartbeat(struct dxl_appender *a, uint64_t ts);

/*
 * dxl_appender_close -- the writer is done with its ring: write the final
 * watermark max(ts, the last timestamp + 1) to every target, wait until
 * every target has it, then clear the ring's owner word on every target
 * (CAS from this appender's own word -- its writer id and its claim's
 * generation -- to unclaimed with that generation, made durable by a
 * READ). A tailer then no longer holds its resolved timestamp at this ring
 * (docs/log.md, "Tailing"): nothing in it can change below the final
 * watermark. Only when every append was acknowledged and polled and no
 * hold keeps records unconfirmed; otherwise the ring is left open (owner
 * claimed), and tailers wait for the next holder of the slot, whose repair
 * confirms or drops what is in doubt. Once the final watermark is on every
 * target, appends and heartbeats are refused (DXL_E_STATE); the appender
 * is still to be deleted. A close that failed after that (an owner word
 * not cleared) is retried by calling it again: only the words left are
 * cleared. It returns 0 once every target's word is cleared, and then
 * again. A new holder of the writer id that took the ring over on a
 * target (the previous one's slot lease ended) has its own word there,
 * which this close leaves alone (DXL_E_STALE); its final watermark WRITE
 * is not so guarded: close only while the writer id (e.g. the ZooKeeper
 * slot) is surely still this writer's until the close's WRITEs land.
 * Errors: DXL_E_BUSY (appends in flight or not polled, or a hold below the
 * final watermark), DXL_E_STATE (a target failed: appends of unknown
 * outcome), DXL_E_STALE (a target's word is another holder's), the
 * heartbeat's and the CASes' and READs' errors (then the ring may be
 * closed on some targets and open on others: both are safe).
 */
int dxl_appender_close(struct dxl_appender *a, uint64_t ts);

/*
 * dxl_appender_set_hold -- the watermarks written from now on (inline with
 * appends, heartbeats) stay at or below ts, whatever is acknowledged:
 * records at or above ts are not "confirmed" for tailers and appliers yet
 * (a coordinator holds its transactions' records until they are decided:
 * docs/transactions.md). UINT64_MAX = no hold (the default). The caller
 * never sets it below a watermark already written (it holds only records
 * appended after that watermark).
 */
void dxl_appender_set_hold(struct dxl_appender *a, uint64_t ts);

uint32_t dxl_appender_inflight(const struct dxl_appender *a);
/* bit i set: target i's QP failed; appends no longer reach it */
uint32_t dxl_appender_failed_targets(const struct dxl_appender *a);
/* the next append's ring position and sequence number */
void dxl_appender_tail(const struct dxl_appender *a, uint64_t *pos,
		       uint64_t *seq);

/*
 * dxl_appender_last_ts -- as found by dxl_appender_new (after repair): the
 * commit timestamp of the last record in the reference ring (targets[0]),
 * or the head's last_ts if no record is left above the head; 0 if this
 * ring never held a record. Does not change with later appends. See the
 * writer's contract above.
 */
uint64_t dxl_appender_last_ts(const struct dxl_appender *a);

/*
 * dxl_appender_min_ts -- the smallest commit timestamp the next append (or
 * heartbeat) may carry: the largest of the previous append's, last_ts,
 * every target's watermark of this ring and, when this appender claimed a
 * ring that was closed or never used (its owner word unclaimed on some
 * target),
 * the shard floor (dxl_appender_shard_floor). A writer whose clock is
 * behind observes it (dxl_hlc_observe) before taking timestamps.
 */
uint64_t dxl_appender_min_ts(const struct dxl_appender *a);

/*
 * dxl_appender_shard_floor -- 0, or, when this appender claimed a ring that
 * was closed or never used: the largest watermark of every ring of the
 * shard on every target, read after the claim (each at most
 * DXL_HLC_MAX_SKEW_MS ahead of this host's clock: tailers resolve nothing
 * beyond their own clock). Tailers may have passed every timestamp below
 * it while the ring was closed; no append of this appender goes below it.
 */
uint64_t dxl_appender_shard_floor(const struct dxl_appender *a);

/* dxl_appender_incarnation -- the incarnation this appender took at open
 * (written into the rings' control blocks and into each of its records) */
uint32_t dxl_appender_incarnation(const struct dxl_appender *a);

/* dxl_appender_open_watermark -- the reference ring's watermark when the
 * appender opened it (0: none); records above it (dxl_appender_last_ts >
 * it) were not confirmed by their writer: a coordinator's transactions in
 * doubt, if that writer held its records (docs/transactions.md) */
uint64_t dxl_appender_open_watermark(const struct dxl_appender *a);

/* What the repair of dxl_appender_new did (all 0 without cfg.repair). */
struct dxl_repair_stats {
	uint32_t copied;          /* bit i: target i was behind, bytes copied */
	uint32_t truncated;       /* bit i: target i was ahead, cut */
	uint64_t bytes_copied;    /* ring bytes written, over all targets */
	uint32_t records_copied;  /* data records among them */
	uint32_t records_dropped; /* data records cut off, over all targets */
};

void dxl_appender_repair_stats(const struct dxl_appender *a,
			       struct dxl_repair_stats *out);

/* What waiting for targets' persisters (DXL_RING_PERSISTER_ON) involved */
struct dxl_appender_persist_stats {
	uint32_t targets;  /* bit i: target i runs a persister; its acks wait */
	uint64_t requests; /* persist requests sent (appends, heartbeats, open) */
	uint64_t waited;   /* operations whose flush READ came back unconfirmed */
	uint64_t rereads;  /* extra READs of a confirmation line */
};

void dxl_appender_persist_stats(const struct dxl_appender *a,
				struct dxl_appender_persist_stats *out);

/* the short form (for logs): bytes copied and how many targets were
 * truncated; either pointer may be NULL */
void dxl_appender_repaired(const struct dxl_appender *a, uint64_t *bytes_copied,
			   uint32_t *targets_truncated);

/* Copying a ring from another replica (a node catching up) is recovery's:
 * dxl_xfer_pull, dxl_xfer_follow (include/dxl/recovery.h). */

/* ---- tailing: change capture from one replica ------------------------------ */

/*
 * A tailer reads one replica's log of a shard with one-sided READs only
 * (the replica's CPU is not involved): each poll READs every ring's control
 * block (head, owner, watermark), then a window of new ring content, then
 * every control block again, on one QP, so every record below a watermark
 * it read is in the data it reads after, and only bytes above the later
 * head (not reused by the writer meanwhile) are trusted. It merges the
 * rings by (commit timestamp, writer) and delivers exactly the records with
 * cursor <= ts < resolved. resolved is the smallest watermark of the rings
 * that hold it: every ring whose owner word is claimed (a live writer, a
 * crashed one whose records above its watermark the next holder may still
 * confirm, or a new holder), or whose owner word or watermark changed
 * between the poll's two control-block READs (a claim came between them),
 * and every ring in live_mask when given. A ring whose owner word is
 * unclaimed was closed by its last holder (dxl_appender_close) or never
 * used: it holds nobody back and its records below its own watermark are
 * delivered; when no ring holds, resolved is the largest watermark.
 * resolved never goes beyond this host's clock. Every record below
 * resolved is final: no
 * writer appends, resends or repairs a record below it (a new holder of a
 * ring starts above every ring's watermark: dxl_appender_new). The cursor
 * then becomes `resolved`: it is "the next position to read", a commit
 * timestamp. Delivery is at-least-once across restarts (resume from the
 * last cursor you stored), exactly once within a tailer, in
 * commit-timestamp order; a record reclaimed before it was delivered is
 * DXL_E_STALE, never skipped.
 */
struct dxl_tailer;

struct dxl_tail_cfg {
	uint64_t from_ts;     /* cursor: deliver records with ts >= from_ts;
				 0 = from the earliest record still retained */
	/* rings whose writers are alive (e.g. hold their ZooKeeper writer
	 * slot): they bound `resolved` even before their writer claims the
	 * ring. Used when live_given is set. A ring outside the set still
	 * holds resolved while its owner word is set: its writer may have
	 * crashed with records above its watermark that the next holder of
	 * the slot confirms. */
	uint64_t live_mask;   /* bit i = ring i (rings 0..63) */
	int live_given;
	uint32_t window;      /* the most bytes READ per ring per poll (default
				 256 KiB): each ring's window starts at 4 KiB,
				 doubles while the ring has more than it
				 fetched and halves while it uses less than a
				 quarter */
	uint64_t (*wall_ms)(void); /* NULL = CLOCK_REALTIME; tests inject */
};

/*
 * dxl_tailer_new -- tail the rings described by targets[0..n) (all of one
 * replica's log: same address and region, rings 0..n-1), from cfg->from_ts.
 * ctx must have nothing else in flight. Errors: DXL_E_INVAL, DXL_E_NOMEM,
 * and dxl_qp_connect's.
 */
int dxl_tailer_new(struct dxl_ctx *ctx, const struct dxl_tail_cfg *cfg,
		   const struct dxl_log_target *targets, unsigned n,
		   struct dxl_tailer **out);
void dxl_tailer_delete(struct dxl_tailer **t);

typedef int (*dxl_tail_fn)(uint32_t ring, const struct dxl_rec *rec, void *arg);

/*
 * dxl_tailer_poll -- deliver (fn) what became resolved since the last poll.
 * fn returning non-zero stops the poll after that record; the cursor is then
 * that record's timestamp (this tailer goes on after it; a tailer restarted
 * from the cursor may deliver records of that timestamp again:
 * at-least-once). Returns the number delivered; *cursor (if not NULL)
 * receives the new cursor.
 * Errors: DXL_E_STALE (the cursor is older than what the replica retained:
 * records were reclaimed before they were read), DXL_E_UNREACHABLE,
 * DXL_E_ACCESS (the replica re-registered: fenced), DXL_E_STATE (the QP had
 * failed before), DXL_E_CORRUPT.
 */
int dxl_tailer_poll(struct dxl_tailer *t, dxl_tail_fn fn, void *arg,
		    uint64_t *cursor);

/* the cursor: the commit timestamp of the next record to deliver */
uint64_t dxl_tailer_cursor(const struct dxl_tailer *t);

/*
 * dxl_tailer_caught_up -- 1 if the last poll delivered every record below
 * the resolved timestamp it read (no ring ran out of fetched bytes: the
 * cursor is that resolved timestamp); 0 before the first poll, after a
 * failed poll, after a poll that fn stopped or that must read further (poll
 * again at once), and while the watermarks are less than a second ahead of
 * this host's clock (what they confirm comes out once the clock passes it:
 * poll again shortly).
 */
int dxl_tailer_caught_up(const struct dxl_tailer *t);

/*
 * dxl_tailer_reclaimed_ts -- the largest commit timestamp the replica had
 * reclaimed (over the rings' heads, as the last poll read them; 0 = nothing
 * reclaimed): records up to it may be gone, the oldest retained record is
 * later. What a DXL_E_STALE error is about.
 */
uint64_t dxl_tailer_reclaimed_ts(const struct dxl_tailer *t);

/*
 * dxl_tailer_holding -- how many rings held the resolved timestamp at the
 * last poll (owner word set, or live). 0: every ring was closed or never
 * used -- nothing below the cursor can still appear, and a writer that
 * claims a ring later starts above it.
 */
unsigned dxl_tailer_holding(const struct dxl_tailer *t);

/* dxl_tailer_set_live -- from the next poll on, the live rings are `mask`
 * (as dxl_tail_cfg.live_mask with live_given set), e.g. refreshed from the
 * shard's writer slots in ZooKeeper */
void dxl_tailer_set_live(struct dxl_tailer *t, uint64_t mask);

#ifdef __cplusplus
}
#endif
#endif /* DXL_LOG_H */
