/* coordproto.h -- the wire protocol of dxl-coord: frames, their encoding
 * and strict decoding (header-only; docs/coord.md) */
#ifndef DXL_COORDPROTO_H
#define DXL_COORDPROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dxl/engine.h"
#include "dxl/err.h"
#include "dxl/txn.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * dxl-coord (tools/dxl-coord/) serves transactions to clients over TCP; the
 * dxl CLI (tools/dxl/txn.c) is one. Both use the codec below, so there is one
 * definition of the format; docs/coord.md describes it byte by byte.
 *
 * Every integer is little-endian. A frame is
 *
 *   0  u32 len   bytes after this field (type + body): 4..DXL_CPROTO_MAX_FRAME
 *   4  u32 type  DXL_CPROTO_MAGIC | version << 8 | kind
 *   8  body      kind-specific (below)
 *
 * Requests (client -> server) start their body with a u64 request id that
 * the reply echoes; a connection may carry many requests at once and the
 * replies may come back in any order. Replies (server -> client) start with
 * a common prefix: u64 request id, i32 status (0 or a DXL_E_* code), u16
 * message length, u16 reserved 0, the message bytes (no NUL).
 *
 * The functions here never allocate except through struct dxl_cproto_buf
 * (malloc/realloc), never print, and report what is wrong in a caller's
 * buffer (they are used by programs that each link libdxl, but this header
 * does not depend on its private parts).
 */

#define DXL_CPROTO_MAGIC 0x44430000u     /* "CD" in the top 16 bits */
#define DXL_CPROTO_MAGIC_MASK 0xffff0000u
#define DXL_CPROTO_VERSION 1u
#define DXL_CPROTO_MAX_FRAME (1u << 20)  /* the largest len field (1 MiB) */
#define DXL_CPROTO_HDR 8u                /* len + type */
#define DXL_CPROTO_MAX_MSG 1024u         /* reply message bytes */
#define DXL_CPROTO_DEFAULT_PORT 7400

/* frame kinds (the low byte of the type word) */
enum dxl_cproto_kind {
	DXL_CPROTO_TXN = 0x01,         /* a whole transaction */
	DXL_CPROTO_PING = 0x02,        /* liveness; answered by the I/O thread */
	DXL_CPROTO_STATS = 0x03,       /* counters as key=value text */
	DXL_CPROTO_TXN_REPLY = 0x81,
	DXL_CPROTO_PONG = 0x82,
	DXL_CPROTO_STATS_REPLY = 0x83,
	DXL_CPROTO_ERROR = 0xff,       /* a request that could not be decoded */
};

/* operations of a transaction */
enum dxl_cproto_opcode {
	DXL_CPROTO_OP_GET = 1,
	DXL_CPROTO_OP_PUT = 2,
	DXL_CPROTO_OP_INSERT = 3,
	DXL_CPROTO_OP_DELETE = 4,
};

/* the status of an operation whose transaction did not commit and that was
 * not the one that failed (it has no effect and no result) */
#define DXL_CPROTO_OP_NOT_DONE 1

/* body sizes of the fixed parts */
#define DXL_CPROTO_TXN_FIXED 16u   /* req_id, max_tries, nops, reserved */
#define DXL_CPROTO_OP_FIXED 20u    /* op, 3 reserved, table, key, len */
#define DXL_CPROTO_REPLY_FIXED 16u /* req_id, status, msg_len, reserved */
#define DXL_CPROTO_TXNR_FIXED 24u  /* txn_id, commit_ts, attempts, maybe,
				      reserved, nops */
#define DXL_CPROTO_OPR_FIXED 8u    /* status, len */

/* the largest frames: a request of DXL_TXN_MAX_OPS puts/gets of the largest
 * values, its reply (both well under DXL_CPROTO_MAX_FRAME) */
#define DXL_CPROTO_MAX_TXN                                                     \
	(DXL_CPROTO_HDR + DXL_CPROTO_TXN_FIXED +                              \
	 DXL_TXN_MAX_OPS * (DXL_CPROTO_OP_FIXED + DXL_ENGINE_MAX_VALUE))
#define DXL_CPROTO_MAX_TXN_REPLY                                               \
	(DXL_CPROTO_HDR + DXL_CPROTO_REPLY_FIXED + DXL_CPROTO_MAX_MSG +       \
	 DXL_CPROTO_TXNR_FIXED +                                              \
	 DXL_TXN_MAX_OPS * (DXL_CPROTO_OPR_FIXED + DXL_ENGINE_MAX_VALUE))

/* one operation: in a request (op, table, key, value of PUT/INSERT) or in a
 * reply (status; value of a GET of a committed transaction). Decoded values
 * point into the frame. */
struct dxl_cproto_op {
	uint8_t op;           /* enum dxl_cproto_opcode (requests) */
	uint32_t table;
	uint64_t key;
	int32_t status;       /* replies: 0, DXL_E_*, DXL_CPROTO_OP_NOT_DONE */
	const void *value;
	uint32_t len;
};

/* a decoded frame of any kind (the fields of other kinds are zero) */
struct dxl_cproto_msg {
	uint8_t kind;
	uint64_t req_id;
	/* TXN */
	uint32_t max_tries;   /* 0 = the server's default */
	uint32_t nops;
	struct dxl_cproto_op ops[DXL_TXN_MAX_OPS];
	/* every reply */
	int32_t status;
	const char *msg;      /* not NUL-terminated */
	uint32_t msg_len;
	/* TXN_REPLY */
	uint64_t txn_id, commit_ts;
	uint32_t attempts;
	bool maybe;
	/* PONG */
	uint32_t coord_id;
	uint64_t epoch;
	/* STATS_REPLY */
	const char *text;     /* not NUL-terminated */
	uint32_t text_len;
};

/* ---- little-endian helpers ------------------------------------------------ */

static inline void dxl_cproto_st32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void dxl_cproto_st64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t dxl_cproto_ld32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static inline uint64_t dxl_cproto_ld64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static inline uint16_t dxl_cproto_ld16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

/* dxl_cproto_opname -- "get", "put", "insert", "delete", or "?" */
static inline const char *dxl_cproto_opname(uint8_t op)
{
	switch (op) {
	case DXL_CPROTO_OP_GET: return "get";
	case DXL_CPROTO_OP_PUT: return "put";
	case DXL_CPROTO_OP_INSERT: return "insert";
	case DXL_CPROTO_OP_DELETE: return "delete";
	default: return "?";
	}
}

/* ---- encoding ------------------------------------------------------------- */

/*
 * A growable output buffer. Start with {0} (or reuse one: len = 0). An
 * allocation failure sets oom and makes every later append a no-op; check
 * it once at the end (dxl_cproto_end returns DXL_E_NOMEM then). Free p with
 * free().
 */
struct dxl_cproto_buf {
	uint8_t *p;
	size_t len, cap;
	size_t frame;   /* offset of the frame being written */
	bool oom;
};

static inline uint8_t *dxl_cproto_grow(struct dxl_cproto_buf *b, size_t n)
{
	if (b->oom)
		return NULL;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n)
			cap *= 2;
		uint8_t *np = (uint8_t *)realloc(b->p, cap);
		if (!np) {
			b->oom = true;
			return NULL;
		}
		b->p = np;
		b->cap = cap;
	}
	uint8_t *at = b->p + b->len;
	b->len += n;
	return at;
}

static inline void dxl_cproto_put8(struct dxl_cproto_buf *b, uint8_t v)
{
	uint8_t *p = dxl_cproto_grow(b, 1);
	if (p)
		*p = v;
}

static inline void dxl_cproto_put16(struct dxl_cproto_buf *b, uint16_t v)
{
	uint8_t *p = dxl_cproto_grow(b, 2);
	if (p) {
		p[0] = (uint8_t)v;
		p[1] = (uint8_t)(v >> 8);
	}
}

static inline void dxl_cproto_put32(struct dxl_cproto_buf *b, uint32_t v)
{
	uint8_t *p = dxl_cproto_grow(b, 4);
	if (p)
		dxl_cproto_st32(p, v);
}

static inline void dxl_cproto_put64(struct dxl_cproto_buf *b, uint64_t v)
{
	uint8_t *p = dxl_cproto_grow(b, 8);
	if (p)
		dxl_cproto_st64(p, v);
}

static inline void dxl_cproto_putn(struct dxl_cproto_buf *b, const void *v,
				   size_t n)
{
	uint8_t *p = dxl_cproto_grow(b, n);
	if (p && n)
		memcpy(p, v, n);
}

/* dxl_cproto_begin -- start a frame of kind at the end of b */
static inline void dxl_cproto_begin(struct dxl_cproto_buf *b, uint8_t kind)
{
	b->frame = b->len;
	dxl_cproto_put32(b, 0); /* len, filled by dxl_cproto_end */
	dxl_cproto_put32(b, DXL_CPROTO_MAGIC | DXL_CPROTO_VERSION << 8 | kind);
}

/* dxl_cproto_end -- fill in the frame's length. Returns 0, DXL_E_NOMEM
 * (some append failed) or DXL_E_TOOBIG (over DXL_CPROTO_MAX_FRAME). */
static inline int dxl_cproto_end(struct dxl_cproto_buf *b)
{
	if (b->oom)
		return DXL_E_NOMEM;
	size_t n = b->len - b->frame - 4;
	if (n > DXL_CPROTO_MAX_FRAME)
		return DXL_E_TOOBIG;
	dxl_cproto_st32(b->p + b->frame, (uint32_t)n);
	return 0;
}

/* dxl_cproto_encode_txn -- a TXN request of ops[0..nops) (op, table, key;
 * value and len for PUT and INSERT). Encodes what it is given, even what
 * the server will refuse (tests send such frames on purpose). */
static inline int dxl_cproto_encode_txn(struct dxl_cproto_buf *b, uint64_t req_id,
					uint32_t max_tries,
					const struct dxl_cproto_op *ops,
					uint32_t nops)
{
	dxl_cproto_begin(b, DXL_CPROTO_TXN);
	dxl_cproto_put64(b, req_id);
	dxl_cproto_put32(b, max_tries);
	dxl_cproto_put16(b, (uint16_t)nops);
	dxl_cproto_put16(b, 0);
	for (uint32_t i = 0; i < nops; i++) {
		const struct dxl_cproto_op *o = &ops[i];
		bool has_value = o->op == DXL_CPROTO_OP_PUT ||
				 o->op == DXL_CPROTO_OP_INSERT;
		uint32_t len = has_value ? o->len : 0;
		dxl_cproto_put8(b, o->op);
		dxl_cproto_put8(b, 0);
		dxl_cproto_put16(b, 0);
		dxl_cproto_put32(b, o->table);
		dxl_cproto_put64(b, o->key);
		dxl_cproto_put32(b, len);
		dxl_cproto_putn(b, o->value, len);
	}
	return dxl_cproto_end(b);
}

/* dxl_cproto_encode_simple -- a request without arguments (PING, STATS) */
static inline int dxl_cproto_encode_simple(struct dxl_cproto_buf *b,
					   uint8_t kind, uint64_t req_id)
{
	dxl_cproto_begin(b, kind);
	dxl_cproto_put64(b, req_id);
	return dxl_cproto_end(b);
}

/* the common prefix of every reply (msg may be NULL; it is cut at
 * DXL_CPROTO_MAX_MSG bytes) */
static inline void dxl_cproto_reply_prefix(struct dxl_cproto_buf *b, uint8_t kind,
					   uint64_t req_id, int32_t status,
					   const char *msg)
{
	size_t ml = msg ? strlen(msg) : 0;
	if (ml > DXL_CPROTO_MAX_MSG)
		ml = DXL_CPROTO_MAX_MSG;
	dxl_cproto_begin(b, kind);
	dxl_cproto_put64(b, req_id);
	dxl_cproto_put32(b, (uint32_t)status);
	dxl_cproto_put16(b, (uint16_t)ml);
	dxl_cproto_put16(b, 0);
	dxl_cproto_putn(b, msg, ml);
}

/* dxl_cproto_encode_error -- an ERROR reply */
static inline int dxl_cproto_encode_error(struct dxl_cproto_buf *b, uint64_t req_id,
					  int32_t status, const char *msg)
{
	dxl_cproto_reply_prefix(b, DXL_CPROTO_ERROR, req_id, status, msg);
	return dxl_cproto_end(b);
}

/* dxl_cproto_encode_txn_reply -- the outcome of a transaction; ops give each
 * operation's status, and value/len for a GET whose status is 0 */
static inline int dxl_cproto_encode_txn_reply(
	struct dxl_cproto_buf *b, uint64_t req_id, int32_t status, const char *msg,
	uint64_t txn_id, uint64_t commit_ts, uint32_t attempts, bool maybe,
	const struct dxl_cproto_op *ops, uint32_t nops)
{
	dxl_cproto_reply_prefix(b, DXL_CPROTO_TXN_REPLY, req_id, status, msg);
	dxl_cproto_put64(b, txn_id);
	dxl_cproto_put64(b, commit_ts);
	dxl_cproto_put32(b, attempts);
	dxl_cproto_put8(b, maybe ? 1 : 0);
	dxl_cproto_put8(b, 0);
	dxl_cproto_put16(b, (uint16_t)nops);
	for (uint32_t i = 0; i < nops; i++) {
		uint32_t len = ops[i].status == 0 ? ops[i].len : 0;
		dxl_cproto_put32(b, (uint32_t)ops[i].status);
		dxl_cproto_put32(b, len);
		dxl_cproto_putn(b, ops[i].value, len);
	}
	return dxl_cproto_end(b);
}

/* dxl_cproto_encode_pong -- the answer to PING */
static inline int dxl_cproto_encode_pong(struct dxl_cproto_buf *b, uint64_t req_id,
					 uint32_t coord_id, uint64_t epoch)
{
	dxl_cproto_reply_prefix(b, DXL_CPROTO_PONG, req_id, 0, NULL);
	dxl_cproto_put32(b, coord_id);
	dxl_cproto_put32(b, 0);
	dxl_cproto_put64(b, epoch);
	return dxl_cproto_end(b);
}

/* dxl_cproto_encode_stats_reply -- "key=value\n" lines */
static inline int dxl_cproto_encode_stats_reply(struct dxl_cproto_buf *b,
						uint64_t req_id, const char *text)
{
	size_t tl = text ? strlen(text) : 0;
	dxl_cproto_reply_prefix(b, DXL_CPROTO_STATS_REPLY, req_id, 0, NULL);
	dxl_cproto_put32(b, (uint32_t)tl);
	dxl_cproto_putn(b, text, tl);
	return dxl_cproto_end(b);
}

/* ---- decoding ------------------------------------------------------------- */

/*
 * dxl_cproto_frame_len -- look at the first avail bytes of a stream:
 * returns 0 when fewer than 4 bytes are there, else the frame's total size
 * (4 + len) in *total and 1; -1 when the len field is over
 * DXL_CPROTO_MAX_FRAME (the stream cannot be trusted: close it).
 */
static inline int dxl_cproto_frame_len(const uint8_t *p, size_t avail,
				       size_t *total)
{
	if (avail < 4)
		return 0;
	uint32_t len = dxl_cproto_ld32(p);
	if (len > DXL_CPROTO_MAX_FRAME)
		return -1;
	*total = 4 + (size_t)len;
	return 1;
}

/* a cursor over a frame's body; every read checks the bounds */
struct dxl_cproto_rd {
	const uint8_t *p;
	size_t len, off;
	char *why;
	size_t why_cap;
	const char *what; /* frame kind, for messages */
};

static inline int dxl_cproto_need(struct dxl_cproto_rd *r, size_t n,
				  const char *field)
{
	if (r->len - r->off >= n)
		return 0;
	snprintf(r->why, r->why_cap,
		 "short %s frame: %s needs %zu bytes at body offset %zu, the body has %zu",
		 r->what, field, n, r->off, r->len);
	return DXL_E_PROTO;
}

static inline int dxl_cproto_zero(struct dxl_cproto_rd *r, size_t at, size_t n,
				  const char *field)
{
	for (size_t i = 0; i < n; i++)
		if (r->p[at + i]) {
			snprintf(r->why, r->why_cap,
				 "%s frame: reserved %s at body offset %zu is not 0",
				 r->what, field, at);
			return DXL_E_PROTO;
		}
	return 0;
}

static inline int dxl_cproto_decode_txn(struct dxl_cproto_rd *r,
					struct dxl_cproto_msg *m)
{
	int ret;
	if ((ret = dxl_cproto_need(r, DXL_CPROTO_TXN_FIXED, "the header")))
		return ret;
	m->max_tries = dxl_cproto_ld32(r->p + 8);
	m->nops = dxl_cproto_ld16(r->p + 12);
	if ((ret = dxl_cproto_zero(r, 14, 2, "field")))
		return ret;
	r->off = DXL_CPROTO_TXN_FIXED;
	if (m->nops == 0) {
		snprintf(r->why, r->why_cap, "TXN frame without operations");
		return DXL_E_PROTO;
	}
	if (m->nops > DXL_TXN_MAX_OPS) {
		snprintf(r->why, r->why_cap,
			 "TXN frame: %u operations, at most %u in one transaction",
			 m->nops, (unsigned)DXL_TXN_MAX_OPS);
		return DXL_E_PROTO;
	}
	for (uint32_t i = 0; i < m->nops; i++) {
		char field[48];
		snprintf(field, sizeof(field), "operation %u", i);
		if ((ret = dxl_cproto_need(r, DXL_CPROTO_OP_FIXED, field)))
			return ret;
		const uint8_t *q = r->p + r->off;
		struct dxl_cproto_op *o = &m->ops[i];
		o->op = q[0];
		if (o->op < DXL_CPROTO_OP_GET || o->op > DXL_CPROTO_OP_DELETE) {
			snprintf(r->why, r->why_cap,
				 "TXN frame: operation %u has unknown opcode %u (1 get, 2 put, 3 insert, 4 delete)",
				 i, o->op);
			return DXL_E_PROTO;
		}
		if ((ret = dxl_cproto_zero(r, r->off + 1, 3, "bytes of an operation")))
			return ret;
		o->table = dxl_cproto_ld32(q + 4);
		o->key = dxl_cproto_ld64(q + 8);
		o->len = dxl_cproto_ld32(q + 16);
		r->off += DXL_CPROTO_OP_FIXED;
		bool has_value = o->op == DXL_CPROTO_OP_PUT || o->op == DXL_CPROTO_OP_INSERT;
		if (!has_value && o->len) {
			snprintf(r->why, r->why_cap,
				 "TXN frame: operation %u (%s) carries a value of %u bytes (only put and insert have one)",
				 i, dxl_cproto_opname(o->op), o->len);
			return DXL_E_PROTO;
		}
		if (o->len > DXL_ENGINE_MAX_VALUE) {
			snprintf(r->why, r->why_cap,
				 "TXN frame: operation %u (%s) has a value of %u bytes, over the largest value size %u",
				 i, dxl_cproto_opname(o->op), o->len,
				 (unsigned)DXL_ENGINE_MAX_VALUE);
			return DXL_E_TOOBIG;
		}
		snprintf(field, sizeof(field), "the value of operation %u", i);
		if ((ret = dxl_cproto_need(r, o->len, field)))
			return ret;
		o->value = o->len ? r->p + r->off : NULL;
		r->off += o->len;
	}
	return 0;
}

static inline int dxl_cproto_decode_reply(struct dxl_cproto_rd *r,
					  struct dxl_cproto_msg *m)
{
	int ret;
	if ((ret = dxl_cproto_need(r, DXL_CPROTO_REPLY_FIXED, "the reply header")))
		return ret;
	m->status = (int32_t)dxl_cproto_ld32(r->p + 8);
	m->msg_len = dxl_cproto_ld16(r->p + 12);
	if ((ret = dxl_cproto_zero(r, 14, 2, "field")))
		return ret;
	r->off = DXL_CPROTO_REPLY_FIXED;
	if ((ret = dxl_cproto_need(r, m->msg_len, "the message")))
		return ret;
	m->msg = (const char *)r->p + r->off;
	r->off += m->msg_len;
	const uint8_t *q = r->p + r->off;
	switch (m->kind) {
	case DXL_CPROTO_ERROR:
		return 0;
	case DXL_CPROTO_PONG:
		if ((ret = dxl_cproto_need(r, 16, "coord_id and epoch")))
			return ret;
		m->coord_id = dxl_cproto_ld32(q);
		if ((ret = dxl_cproto_zero(r, r->off + 4, 4, "field")))
			return ret;
		m->epoch = dxl_cproto_ld64(q + 8);
		r->off += 16;
		return 0;
	case DXL_CPROTO_STATS_REPLY:
		if ((ret = dxl_cproto_need(r, 4, "the text length")))
			return ret;
		m->text_len = dxl_cproto_ld32(q);
		r->off += 4;
		if ((ret = dxl_cproto_need(r, m->text_len, "the text")))
			return ret;
		m->text = (const char *)r->p + r->off;
		r->off += m->text_len;
		return 0;
	default: /* DXL_CPROTO_TXN_REPLY */
		break;
	}
	if ((ret = dxl_cproto_need(r, DXL_CPROTO_TXNR_FIXED, "the outcome")))
		return ret;
	m->txn_id = dxl_cproto_ld64(q);
	m->commit_ts = dxl_cproto_ld64(q + 8);
	m->attempts = dxl_cproto_ld32(q + 16);
	if (q[20] > 1) {
		snprintf(r->why, r->why_cap, "TXN_REPLY frame: maybe is %u (0 or 1)", q[20]);
		return DXL_E_PROTO;
	}
	m->maybe = q[20] == 1;
	if ((ret = dxl_cproto_zero(r, r->off + 21, 1, "byte")))
		return ret;
	m->nops = dxl_cproto_ld16(q + 22);
	r->off += DXL_CPROTO_TXNR_FIXED;
	if (m->nops > DXL_TXN_MAX_OPS) {
		snprintf(r->why, r->why_cap, "TXN_REPLY frame: %u operations, at most %u",
			 m->nops, (unsigned)DXL_TXN_MAX_OPS);
		return DXL_E_PROTO;
	}
	for (uint32_t i = 0; i < m->nops; i++) {
		char field[48];
		snprintf(field, sizeof(field), "result %u", i);
		if ((ret = dxl_cproto_need(r, DXL_CPROTO_OPR_FIXED, field)))
			return ret;
		struct dxl_cproto_op *o = &m->ops[i];
		o->status = (int32_t)dxl_cproto_ld32(r->p + r->off);
		o->len = dxl_cproto_ld32(r->p + r->off + 4);
		r->off += DXL_CPROTO_OPR_FIXED;
		if (o->len > DXL_ENGINE_MAX_VALUE || (o->len && o->status != 0)) {
			snprintf(r->why, r->why_cap,
				 "TXN_REPLY frame: result %u has status %d and a value of %u bytes",
				 i, o->status, o->len);
			return DXL_E_PROTO;
		}
		snprintf(field, sizeof(field), "the value of result %u", i);
		if ((ret = dxl_cproto_need(r, o->len, field)))
			return ret;
		o->value = o->len ? r->p + r->off : NULL;
		r->off += o->len;
	}
	return 0;
}

/*
 * dxl_cproto_decode -- decode one whole frame (frame[0..size), size = 4 +
 * its len field) into *m, strictly: the magic and version, a known kind,
 * every field inside the frame, reserved bytes 0, opcodes known, values only
 * on put/insert, at most DXL_TXN_MAX_OPS operations, no bytes after the
 * last field. Values and texts in *m point into frame.
 *
 * m->req_id is set as soon as the body holds one (also on error, so the
 * error reply can name the request; 0 otherwise) and m->kind as soon as
 * the type word is known.
 *
 * Returns 0. Errors (why = what is wrong, NUL-terminated, why_cap > 0):
 *   DXL_E_PROTO    bad magic, unknown kind, a field beyond the frame,
 *                  reserved bytes not 0, unknown opcode, a value on get or
 *                  delete, no operations or more than DXL_TXN_MAX_OPS,
 *                  trailing bytes, a len field that disagrees with size
 *   DXL_E_VERSION  another protocol version
 *   DXL_E_TOOBIG   a value over DXL_ENGINE_MAX_VALUE bytes
 */
static inline int dxl_cproto_decode(const uint8_t *frame, size_t size,
				    struct dxl_cproto_msg *m, char *why,
				    size_t why_cap)
{
	memset(m, 0, sizeof(*m));
	why[0] = 0;
	if (size < 4 || !frame || dxl_cproto_ld32(frame) != size - 4) {
		snprintf(why, why_cap, "frame of %zu bytes: the len field does not match", size);
		return DXL_E_PROTO;
	}
	if (size < DXL_CPROTO_HDR) {
		snprintf(why, why_cap, "frame len %zu: too short for the type word (at least 4)",
			 size - 4);
		return DXL_E_PROTO;
	}
	uint32_t type = dxl_cproto_ld32(frame + 4);
	if ((type & DXL_CPROTO_MAGIC_MASK) != DXL_CPROTO_MAGIC) {
		snprintf(why, why_cap, "bad magic: type word 0x%08x, want 0x%04xVVKK",
			 type, DXL_CPROTO_MAGIC >> 16);
		return DXL_E_PROTO;
	}
	uint32_t ver = (type >> 8) & 0xff;
	uint8_t kind = (uint8_t)(type & 0xff);
	struct dxl_cproto_rd r = {.p = frame + DXL_CPROTO_HDR,
				  .len = size - DXL_CPROTO_HDR,
				  .why = why,
				  .why_cap = why_cap,
				  .what = "?"};
	if (r.len >= 8)
		m->req_id = dxl_cproto_ld64(r.p);
	if (ver != DXL_CPROTO_VERSION) {
		snprintf(why, why_cap, "protocol version %u, this side speaks %u", ver,
			 DXL_CPROTO_VERSION);
		return DXL_E_VERSION;
	}
	int ret;
	switch (kind) {
	case DXL_CPROTO_TXN:
		r.what = "TXN";
		m->kind = kind;
		ret = dxl_cproto_decode_txn(&r, m);
		break;
	case DXL_CPROTO_PING:
	case DXL_CPROTO_STATS:
		r.what = kind == DXL_CPROTO_PING ? "PING" : "STATS";
		m->kind = kind;
		ret = dxl_cproto_need(&r, 8, "the request id");
		r.off = 8;
		break;
	case DXL_CPROTO_TXN_REPLY:
	case DXL_CPROTO_PONG:
	case DXL_CPROTO_STATS_REPLY:
	case DXL_CPROTO_ERROR:
		r.what = kind == DXL_CPROTO_TXN_REPLY ? "TXN_REPLY" :
			 kind == DXL_CPROTO_PONG      ? "PONG" :
			 kind == DXL_CPROTO_ERROR     ? "ERROR" : "STATS_REPLY";
		m->kind = kind;
		ret = dxl_cproto_decode_reply(&r, m);
		break;
	default:
		snprintf(why, why_cap, "unknown frame kind 0x%02x", kind);
		return DXL_E_PROTO;
	}
	if (ret)
		return ret;
	if (r.off != r.len) {
		snprintf(why, why_cap, "%s frame: %zu bytes after the last field", r.what,
			 r.len - r.off);
		return DXL_E_PROTO;
	}
	return 0;
}

#ifdef __cplusplus
}
#endif
#endif /* DXL_COORDPROTO_H */
