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

#ifdef __cplusplus
}
#endif
#endif /* DXL_LOG_H */
