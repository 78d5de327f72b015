/* writeset.c -- the write-set payload of a log record: encode, strict decode */
#include <stdbool.h>
#include <string.h>

#include "common/common.h"
#include "common/endian.h"
#include "dxl/engine.h"
#include "engine/writeset_internal.h"

/* Format: include/dxl/engine.h "write sets". */

static uint64_t entry_bytes(uint32_t len)
{
	return DXL_WS_ENTRY_HDR + DXL_ALIGN_UP((uint64_t)len, 8ull);
}

static int check_entry(const struct dxl_ws_entry *e, uint32_t i)
{
	if (e->op != DXL_WS_INSERT && e->op != DXL_WS_UPDATE &&
	    e->op != DXL_WS_DELETE)
		return dxl_err_set(DXL_E_INVAL, "write set entry %u: bad op %d", i,
				   (int)e->op);
	if (e->version == 0 || (e->version & 1))
		return dxl_err_set(DXL_E_INVAL,
				   "write set entry %u: version %llu (must be even and >= 2)",
				   i, (unsigned long long)e->version);
	if (e->op == DXL_WS_DELETE && e->len)
		return dxl_err_set(DXL_E_INVAL,
				   "write set entry %u: a delete with a %u-byte value",
				   i, e->len);
	if (e->len > DXL_ENGINE_MAX_VALUE)
		return dxl_err_set(DXL_E_TOOBIG,
				   "write set entry %u: value of %u bytes, limit %d", i,
				   e->len, DXL_ENGINE_MAX_VALUE);
	if (e->len && !e->value)
		return dxl_err_set(DXL_E_INVAL, "write set entry %u: NULL value", i);
	return 0;
}

int dxl_writeset_size(const struct dxl_ws_entry *e, uint32_t n)
{
	if (!e || n == 0)
		return dxl_err_set(DXL_E_INVAL, "write set: no entries");
	uint64_t total = DXL_WS_HDR_SIZE;
	for (uint32_t i = 0; i < n; i++) {
		int ret = check_entry(&e[i], i);
		if (ret)
			return ret;
		total += entry_bytes(e[i].len);
		if (total > DXL_REC_MAX_PAYLOAD)
			return dxl_err_set(DXL_E_TOOBIG,
					   "write set: over %u bytes at entry %u",
					   DXL_REC_MAX_PAYLOAD, i);
	}
	return (int)total;
}

int dxl_writeset_encode(const struct dxl_ws_entry *e, uint32_t n, void *buf,
			size_t cap)
{
	int total = dxl_writeset_size(e, n);
	if (total < 0)
		return total;
	if (!buf || cap < (size_t)total)
		return dxl_err_set(DXL_E_INVAL,
				   "write set: %d bytes do not fit in %zu", total, cap);
	uint8_t *p = buf;
	memset(p, 0, DXL_WS_HDR_SIZE);
	dxl_put_le32(p, DXL_WS_MAGIC);
	p[4] = DXL_WS_FORMAT;
	dxl_put_le32(p + 8, n);
	p += DXL_WS_HDR_SIZE;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t sz = entry_bytes(e[i].len);
		memset(p, 0, sz);
		dxl_put_le32(p, e[i].table);
		p[4] = (uint8_t)e[i].op;
		dxl_put_le16(p + 6, (uint16_t)e[i].len);
		dxl_put_le64(p + 8, e[i].key);
		dxl_put_le64(p + 16, e[i].version);
		if (e[i].len)
			memcpy(p + DXL_WS_ENTRY_HDR, e[i].value, e[i].len);
		p += sz;
	}
	return total;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

int dxl_ws_iter_init(struct dxl_ws_iter *it, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	if (!buf || len < DXL_WS_HDR_SIZE)
		return dxl_err_set(DXL_E_CORRUPT,
				   "write set: %zu bytes, shorter than its header (%d)",
				   len, DXL_WS_HDR_SIZE);
	if (dxl_get_le32(p) != DXL_WS_MAGIC)
		return dxl_err_set(DXL_E_CORRUPT, "write set: bad magic 0x%08x",
				   dxl_get_le32(p));
	if (p[4] != DXL_WS_FORMAT)
		return dxl_err_set(DXL_E_CORRUPT, "write set: format %u, expected %d",
				   p[4], DXL_WS_FORMAT);
	if (!all_zero(p + 5, 3) || !all_zero(p + 12, 4))
		return dxl_err_set(DXL_E_CORRUPT,
				   "write set: reserved header bytes are not zero");
	uint32_t n = dxl_get_le32(p + 8);
	if (n == 0)
		return dxl_err_set(DXL_E_CORRUPT, "write set: no entries");
	/* every entry takes at least DXL_WS_ENTRY_HDR bytes: a count the
	 * payload cannot hold is refused before any walk */
	if ((uint64_t)n * DXL_WS_ENTRY_HDR > len - DXL_WS_HDR_SIZE)
		return dxl_err_set(DXL_E_CORRUPT,
				   "write set: %u entries do not fit in %zu bytes", n,
				   len);
	size_t off = DXL_WS_HDR_SIZE;
	for (uint32_t i = 0; i < n; i++) {
		if (len - off < DXL_WS_ENTRY_HDR)
			return dxl_err_set(DXL_E_CORRUPT,
					   "write set entry %u at offset %zu: truncated header",
					   i, off);
		const uint8_t *q = p + off;
		uint8_t op = q[4];
		uint32_t vlen = dxl_get_le16(q + 6);
		uint64_t version = dxl_get_le64(q + 16);
		if (op < DXL_WS_INSERT || op > DXL_WS_DELETE)
			return dxl_err_set(DXL_E_CORRUPT,
					   "write set entry %u: bad op %u", i, op);
		if (q[5])
			return dxl_err_set(DXL_E_CORRUPT,
					   "write set entry %u: reserved byte is %u", i,
					   q[5]);
		if (vlen > DXL_ENGINE_MAX_VALUE)
			return dxl_err_set(DXL_E_CORRUPT,
					   "write set entry %u: value length %u over %d",
					   i, vlen, DXL_ENGINE_MAX_VALUE);
		if (op == DXL_WS_DELETE && vlen)
			return dxl_err_set(DXL_E_CORRUPT,
					   "write set entry %u: delete with a %u-byte value",
					   i, vlen);
		if (version == 0 || (version & 1))
			return dxl_err_set(DXL_E_CORRUPT,
					   "write set entry %u: version %llu is not even and >= 2",
					   i, (unsigned long long)version);
		uint64_t sz = entry_bytes(vlen);
		if (sz > len - off)
			return dxl_err_set(DXL_E_CORRUPT,
					   "write set entry %u at offset %zu: %llu bytes, %zu left",
					   i, off, (unsigned long long)sz, len - off);
		if (!all_zero(q + DXL_WS_ENTRY_HDR + vlen,
			      sz - DXL_WS_ENTRY_HDR - vlen))
			return dxl_err_set(DXL_E_CORRUPT,
					   "write set entry %u: padding is not zero", i);
		off += sz;
	}
	if (off != len)
		return dxl_err_set(DXL_E_CORRUPT,
				   "write set: %zu bytes after the last of %u entries",
				   len - off, n);
	it->p = p;
	it->len = len;
	it->off = DXL_WS_HDR_SIZE;
	it->n = n;
	it->i = 0;
	return (int)n;
}

int dxl_ws_iter_next(struct dxl_ws_iter *it, struct dxl_ws_entry *e)
{
	if (it->i >= it->n)
		return 0;
	const uint8_t *q = it->p + it->off;
	e->table = dxl_get_le32(q);
	e->op = (enum dxl_ws_op)q[4];
	e->len = dxl_get_le16(q + 6);
	e->key = dxl_get_le64(q + 8);
	e->version = dxl_get_le64(q + 16);
	e->value = e->len ? q + DXL_WS_ENTRY_HDR : NULL;
	it->off += entry_bytes(e->len);
	it->i++;
	return 1;
}

int dxl_writeset_decode(const void *buf, size_t len, struct dxl_ws_entry *out,
			uint32_t cap)
{
	struct dxl_ws_iter it;
	int n = dxl_ws_iter_init(&it, buf, len);
	if (n < 0)
		return n;
	for (uint32_t i = 0; i < cap && out && dxl_ws_iter_next(&it, &out[i]); i++)
		;
	return n;
}

int dxl_abort_marker_encode(uint64_t txn_id, void *buf, size_t cap)
{
	if (!txn_id || !buf || cap < DXL_ABORT_SIZE)
		return dxl_err_set(DXL_E_INVAL, "abort marker: txn id 0 or %zu bytes of room", cap);
	uint8_t *p = buf;
	memset(p, 0, DXL_ABORT_SIZE);
	dxl_put_le32(p, DXL_ABORT_MAGIC);
	p[4] = 1;
	dxl_put_le64(p + 8, txn_id);
	return DXL_ABORT_SIZE;
}

int dxl_abort_marker_decode(const void *payload, size_t len, uint64_t *txn_id)
{
	const uint8_t *p = payload;
	if (!p || len < 4 || dxl_get_le32(p) != DXL_ABORT_MAGIC)
		return 0;
	if (len != DXL_ABORT_SIZE || p[4] != 1 || p[5] || p[6] || p[7] || !dxl_get_le64(p + 8))
		return dxl_err_set(DXL_E_CORRUPT, "abort marker: %zu bytes, format %u", len,
				   len > 4 ? p[4] : 0);
	if (txn_id)
		*txn_id = dxl_get_le64(p + 8);
	return 1;
}
