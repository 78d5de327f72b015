/* log.h -- dxl's log module: commit timestamps, log records, (later) rings and appends */
#ifndef DXL_LOG_H
#define DXL_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "dxl/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- hybrid logical clock (commit timestamps) ---------------------------- */

/*
 * A commit timestamp is 64 bits: 48 bits of physical time in milliseconds
 * since the Unix epoch, then 16 logical bits (000 L1973-2005: DST's scalar
 * timestamp). Timestamps from one clock strictly increase, even if the wall
 * clock steps back; dxl_hlc_observe() folds in a timestamp seen from another
 * node so causally later events get larger timestamps.
 */
#define DXL_HLC_LOGICAL_BITS 16
#define DXL_HLC_PHYS(ts) ((ts) >> DXL_HLC_LOGICAL_BITS)
#define DXL_HLC_LOGICAL(ts) ((ts) & ((1u << DXL_HLC_LOGICAL_BITS) - 1))
#define DXL_HLC_MAKE(ms, l) (((uint64_t)(ms) << DXL_HLC_LOGICAL_BITS) | (uint64_t)(l))

struct dxl_hlc {
	uint64_t last; /* accessed with atomics: any thread may call */
	uint64_t (*wall_ms)(void); /* NULL = CLOCK_REALTIME; tests inject */
};

void dxl_hlc_init(struct dxl_hlc *c);
/* dxl_hlc_now -- a timestamp larger than every one this clock returned or observed */
uint64_t dxl_hlc_now(struct dxl_hlc *c);
/* dxl_hlc_observe -- remember ts (e.g. from a received message) */
void dxl_hlc_observe(struct dxl_hlc *c, uint64_t ts);

/* ---- log records ---------------------------------------------------------- */

/*
 * A record is self-describing; every integer is little-endian:
 *
 *   offset  size  header (48 bytes)
 *        0     4  magic "DXLR" (0x524c5844)
 *        4     1  format version (1)
 *        5     1  type: 1 = data, 2 = skip (padding up to the ring's end)
 *        6     2  number of participant shards (nparts)
 *        8     4  payload length in bytes
 *       12     4  writer id
 *       16     4  epoch
 *       20     4  CRC32C of header (this field as 0), participants, payload
 *       24     8  per-writer sequence number
 *       32     8  transaction id
 *       40     8  commit timestamp (HLC)
 *       48  4*np  participant shard ids (u32)
 *        .     .  payload
 *        .     .  zero padding
 *   tot-16    16  trailer: total length (u32), CRC32C (u32, = header's),
 *                 sequence number (u64, = header's)
 *
 * The total length is aligned and padded to 64 bytes (H6), or to 256 bytes
 * once it reaches 256 (H5) (000 L623-649). The smallest record is 64 bytes.
 * A record exists only if magic, version, type, lengths, the trailer and the
 * checksum all agree: a single RDMA WRITE is not placed in address order
 * (003 §5), so a record whose header and trailer arrived but whose middle did
 * not is caught by the checksum, and a stale record from an earlier lap of a
 * ring by its sequence number.
 */
#define DXL_REC_MAGIC 0x524c5844u
#define DXL_REC_VERSION 1
#define DXL_REC_HDR_SIZE 48
#define DXL_REC_TRL_SIZE 16
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
 * commit_ts, nparts, parts, payload, payload_len; total_len is ignored) into
 * buf. `parts` here may be any array of u32 in host order: pass them with
 * dxl_rec_encode_parts. Returns the total length, or DXL_E_TOOBIG (over the
 * limits), DXL_E_INVAL (NULL pointers, bad type, cap too small).
 */
int dxl_rec_encode(const struct dxl_rec *r, const uint32_t *parts, void *buf,
		   size_t cap);

/*
 * dxl_rec_encode_skip -- a skip record of exactly `total` bytes (a multiple
 * of 64, >= 64) telling readers to continue at the ring's start.
 */
int dxl_rec_encode_skip(uint32_t writer, uint32_t epoch, uint64_t seq,
			uint32_t total, void *buf, size_t cap);

/*
 * dxl_rec_decode -- validate and decode the record at buf, of which `avail`
 * bytes are readable. Returns 0 and fills *out, or DXL_E_CORRUPT with a
 * message saying what disagrees ("trailer length 96, header says 128"). A
 * record claiming more than avail bytes is DXL_E_CORRUPT. Never reads
 * outside [buf, buf+avail).
 */
int dxl_rec_decode(const void *buf, size_t avail, struct dxl_rec *out);

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
	uint64_t creation_epoch; /* configuration epoch when it was created */
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

#ifdef __cplusplus
}
#endif
#endif /* DXL_LOG_H */
