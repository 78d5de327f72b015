/* record.c -- encode and validate self-describing log records */
#include <isa-l/crc.h>
#include <string.h>

#include "common/common.h"
#include "dxl/log.h"
#include "common/endian.h"

/* header field offsets (see the layout in include/dxl/log.h) */
enum {
	OFF_MAGIC = 0,
	OFF_VERSION = 4,
	OFF_TYPE = 5,
	OFF_NPARTS = 6,
	OFF_LEN = 8,
	OFF_WRITER = 12,
	OFF_EPOCH = 16,
	OFF_CRC = 20,
	OFF_SEQ = 24,
	OFF_TXN = 32,
	OFF_TS = 40,
	OFF_INC = 48,
	OFF_RSVD = 52,
	/* trailer, relative to its start */
	TOFF_TOTAL = 0,
	TOFF_CRC = 4,
};

uint32_t dxl_crc32c(uint32_t crc, const void *buf, size_t len)
{
	/* isa-l's crc32_iscsi neither pre- nor post-inverts; the standard
	 * CRC32C (RFC 3720) does both, which also makes chaining work. It takes
	 * an int length: feed large buffers in parts. */
	const unsigned char *p = buf;
	crc = ~crc;
	while (len) {
		int n = len > (1u << 30) ? (1 << 30) : (int)len;
		crc = crc32_iscsi((unsigned char *)p, n, crc);
		p += n;
		len -= (size_t)n;
	}
	return ~crc;
}

uint32_t dxl_rec_size(unsigned nparts, uint32_t payload_len)
{
	if (nparts > DXL_REC_MAX_PARTS || payload_len > DXL_REC_MAX_PAYLOAD)
		return 0;
	uint64_t raw = (uint64_t)DXL_REC_HDR_SIZE + 4ull * nparts + payload_len +
		       DXL_REC_TRL_SIZE;
	/* H6: < 256 B -> 64 B lines; H5: >= 256 B -> 256 B XPLines */
	uint64_t sz = DXL_ALIGN_UP(raw, 64ull);
	if (sz >= 256)
		sz = DXL_ALIGN_UP(raw, 256ull);
	return (uint32_t)sz;
}

uint32_t dxl_rec_part(const struct dxl_rec *r, unsigned i)
{
	DXL_ASSERT(i < r->nparts);
	return dxl_get_le32(r->parts + 4 * i);
}

/* CRC of the header with its CRC field zeroed, then participants+payload */
static uint32_t rec_crc(const uint8_t *b, uint32_t body_len)
{
	uint8_t hdr[DXL_REC_HDR_SIZE];
	memcpy(hdr, b, sizeof(hdr));
	dxl_put_le32(hdr + OFF_CRC, 0);
	uint32_t crc = dxl_crc32c(0, hdr, sizeof(hdr));
	return dxl_crc32c(crc, b + DXL_REC_HDR_SIZE, body_len);
}

static void finish(uint8_t *b, uint32_t total, uint32_t body_len)
{
	/* zero the padding so a record's bytes are a function of its fields */
	memset(b + DXL_REC_HDR_SIZE + body_len, 0,
	       total - DXL_REC_HDR_SIZE - body_len - DXL_REC_TRL_SIZE);
	dxl_put_le32(b + OFF_CRC, 0);
	uint32_t crc = rec_crc(b, body_len);
	dxl_put_le32(b + OFF_CRC, crc);
	uint8_t *t = b + total - DXL_REC_TRL_SIZE;
	dxl_put_le32(t + TOFF_TOTAL, total);
	dxl_put_le32(t + TOFF_CRC, crc);
}

static void put_header(uint8_t *b, const struct dxl_rec *r, uint16_t nparts,
		       uint32_t payload_len)
{
	dxl_put_le32(b + OFF_MAGIC, DXL_REC_MAGIC);
	b[OFF_VERSION] = DXL_REC_VERSION;
	b[OFF_TYPE] = (uint8_t)r->type;
	dxl_put_le16(b + OFF_NPARTS, nparts);
	dxl_put_le32(b + OFF_LEN, payload_len);
	dxl_put_le32(b + OFF_WRITER, r->writer);
	dxl_put_le32(b + OFF_EPOCH, r->epoch);
	dxl_put_le64(b + OFF_SEQ, r->seq);
	dxl_put_le64(b + OFF_TXN, r->txn_id);
	dxl_put_le64(b + OFF_TS, r->commit_ts);
	dxl_put_le32(b + OFF_INC, r->incarnation);
	dxl_put_le32(b + OFF_RSVD, 0);
}

int dxl_rec_encode(const struct dxl_rec *r, const uint32_t *parts, void *buf,
		   size_t cap)
{
	if (!r || !buf || (r->nparts && !parts) ||
	    (r->payload_len && !r->payload))
		return dxl_err_set(DXL_E_INVAL, "record encode: NULL argument");
	if (r->type != DXL_REC_DATA)
		return dxl_err_set(DXL_E_INVAL,
				   "record encode: type %d is not a data record",
				   (int)r->type);
	uint32_t total = dxl_rec_size(r->nparts, r->payload_len);
	if (!total)
		return dxl_err_set(DXL_E_TOOBIG,
				   "record encode: %u participants / %u payload bytes over the limits (%u / %u)",
				   r->nparts, r->payload_len, DXL_REC_MAX_PARTS,
				   DXL_REC_MAX_PAYLOAD);
	if (cap < total)
		return dxl_err_set(DXL_E_INVAL,
				   "record encode: buffer of %zu bytes, record needs %u",
				   cap, total);
	uint8_t *b = buf;
	uint32_t body = 4u * r->nparts + r->payload_len;
	put_header(b, r, r->nparts, r->payload_len);
	for (unsigned i = 0; i < r->nparts; i++)
		dxl_put_le32(b + DXL_REC_HDR_SIZE + 4 * i, parts[i]);
	if (r->payload_len)
		memcpy(b + DXL_REC_HDR_SIZE + 4u * r->nparts, r->payload,
		       r->payload_len);
	finish(b, total, body);
	return (int)total;
}

int dxl_rec_encode_skip(uint32_t writer, uint32_t epoch, uint64_t seq,
			uint32_t total, void *buf, size_t cap)
{
	return dxl_rec_encode_skip_inc(writer, epoch, 0, seq, total, buf, cap);
}

int dxl_rec_encode_skip_inc(uint32_t writer, uint32_t epoch,
			    uint32_t incarnation, uint64_t seq, uint32_t total,
			    void *buf, size_t cap)
{
	if (!buf || total < DXL_REC_MIN_SIZE || total % 64 ||
	    total - DXL_REC_HDR_SIZE - DXL_REC_TRL_SIZE > DXL_REC_MAX_PAYLOAD)
		return dxl_err_set(DXL_E_INVAL,
				   "skip record: total %u is not a multiple of 64 in 64..%u",
				   total, DXL_REC_MAX_PAYLOAD);
	if (cap < total)
		return dxl_err_set(DXL_E_INVAL,
				   "skip record: buffer of %zu bytes, need %u", cap,
				   total);
	struct dxl_rec r = {.type = DXL_REC_SKIP, .writer = writer,
			    .epoch = epoch, .seq = seq, .incarnation = incarnation};
	uint8_t *b = buf;
	/* a skip's "payload" is its padding: the length field says how much,
	 * its bytes are zero and covered by the checksum */
	uint32_t pad = total - DXL_REC_HDR_SIZE - DXL_REC_TRL_SIZE;
	put_header(b, &r, 0, pad);
	memset(b + DXL_REC_HDR_SIZE, 0, pad);
	finish(b, total, pad);
	return (int)total;
}

/* the total length a header with these fields claims; 0 if impossible */
static uint32_t total_of(uint8_t type, uint16_t nparts, uint32_t len)
{
	if (type == DXL_REC_DATA)
		return dxl_rec_size(nparts, len);
	if (type == DXL_REC_SKIP && !nparts && len <= DXL_REC_MAX_PAYLOAD &&
	    (len + DXL_REC_HDR_SIZE + DXL_REC_TRL_SIZE) % 64 == 0)
		return len + DXL_REC_HDR_SIZE + DXL_REC_TRL_SIZE;
	return 0;
}

uint32_t dxl_rec_peek_size(const void *buf, size_t avail)
{
	const uint8_t *b = buf;
	if (!b || avail < DXL_REC_HDR_SIZE ||
	    dxl_get_le32(b + OFF_MAGIC) != DXL_REC_MAGIC ||
	    b[OFF_VERSION] != DXL_REC_VERSION)
		return 0;
	return total_of(b[OFF_TYPE], dxl_get_le16(b + OFF_NPARTS),
			dxl_get_le32(b + OFF_LEN));
}

int dxl_rec_decode(const void *buf, size_t avail, struct dxl_rec *out)
{
	const uint8_t *b = buf;
	if (!b || !out)
		return dxl_err_set(DXL_E_INVAL, "record decode: NULL argument");
	if (avail < DXL_REC_MIN_SIZE)
		return dxl_err_set(DXL_E_CORRUPT,
				   "record: only %zu bytes left, a record has at least %d",
				   avail, DXL_REC_MIN_SIZE);
	uint32_t magic = dxl_get_le32(b + OFF_MAGIC);
	if (magic != DXL_REC_MAGIC)
		return dxl_err_set(DXL_E_CORRUPT, "record: bad magic 0x%08x",
				   magic);
	if (b[OFF_VERSION] != DXL_REC_VERSION)
		return dxl_err_set(DXL_E_CORRUPT,
				   "record: format version %u, this build reads %u",
				   b[OFF_VERSION], DXL_REC_VERSION);
	uint8_t type = b[OFF_TYPE];
	uint16_t nparts = dxl_get_le16(b + OFF_NPARTS);
	uint32_t len = dxl_get_le32(b + OFF_LEN);
	uint32_t total = total_of(type, nparts, len);
	if (!total) {
		if (type == DXL_REC_DATA)
			return dxl_err_set(DXL_E_CORRUPT,
					   "record: %u participants / %u payload bytes over the limits",
					   nparts, len);
		if (type == DXL_REC_SKIP)
			return dxl_err_set(DXL_E_CORRUPT,
					   "record: skip with %u participants and length %u",
					   nparts, len);
		return dxl_err_set(DXL_E_CORRUPT, "record: unknown type %u", type);
	}
	if (total > avail)
		return dxl_err_set(DXL_E_CORRUPT,
				   "record: length %u runs past the %zu readable bytes",
				   total, avail);
	const uint8_t *t = b + total - DXL_REC_TRL_SIZE;
	uint32_t ttotal = dxl_get_le32(t + TOFF_TOTAL);
	uint32_t hcrc = dxl_get_le32(b + OFF_CRC);
	uint64_t seq = dxl_get_le64(b + OFF_SEQ);
	if (ttotal != total)
		return dxl_err_set(DXL_E_CORRUPT,
				   "record: trailer length %u, header says %u",
				   ttotal, total);
	if (dxl_get_le32(t + TOFF_CRC) != hcrc)
		return dxl_err_set(DXL_E_CORRUPT,
				   "record: trailer checksum 0x%08x, header says 0x%08x",
				   dxl_get_le32(t + TOFF_CRC), hcrc);
	if (dxl_get_le32(b + OFF_RSVD) != 0)
		return dxl_err_set(DXL_E_CORRUPT,
				   "record: reserved header word is 0x%08x, not 0",
				   dxl_get_le32(b + OFF_RSVD));
	uint32_t body = 4u * nparts + len;
	uint32_t crc = rec_crc(b, body);
	if (crc != hcrc)
		return dxl_err_set(DXL_E_CORRUPT,
				   "record: checksum 0x%08x, computed 0x%08x (seq %llu)",
				   hcrc, crc, (unsigned long long)seq);
	out->type = (enum dxl_rec_type)type;
	out->writer = dxl_get_le32(b + OFF_WRITER);
	out->epoch = dxl_get_le32(b + OFF_EPOCH);
	out->seq = seq;
	out->txn_id = dxl_get_le64(b + OFF_TXN);
	out->commit_ts = dxl_get_le64(b + OFF_TS);
	out->incarnation = dxl_get_le32(b + OFF_INC);
	out->nparts = nparts;
	out->parts = b + DXL_REC_HDR_SIZE;
	out->payload = type == DXL_REC_DATA ? b + DXL_REC_HDR_SIZE + 4u * nparts
					    : NULL;
	out->payload_len = type == DXL_REC_DATA ? len : 0;
	out->total_len = total;
	return 0;
}
