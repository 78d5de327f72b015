/* table_rpc.c -- the table RPCs' wire format and the caller's side (include/dxl/replica.h "table RPCs") */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/common.h"
#include "common/endian.h"
#include "dxl/replica.h"
#include "dxl/rpc.h"

/* which request fields each operation uses (the others must be 0) */
enum {
	F_KEY = 1u << 0,
	F_SLOT = 1u << 1,
	F_OWNER = 1u << 2,
	F_TS = 1u << 3,
	F_VERSION = 1u << 4,
	F_FLAGS = 1u << 5,
	F_VALUE = 1u << 6,
};

static const struct {
	uint16_t op;
	const char *name;
	unsigned fields;
	uint32_t flags; /* allowed flag bits */
} OPS[] = {
	{DXL_RPC_ID_TABLE_LOOKUP, "lookup", F_KEY, 0},
	{DXL_RPC_ID_TABLE_INSERT, "insert", F_KEY | F_OWNER | F_TS | F_VALUE, 0},
	{DXL_RPC_ID_TABLE_DELETE, "delete", F_KEY | F_OWNER | F_TS | F_SLOT | F_VERSION | F_FLAGS,
	 DXL_TABLE_DEL_AT_SLOT},
	{DXL_RPC_ID_TABLE_READ, "read", F_SLOT, 0},
	{DXL_RPC_ID_TABLE_LOCK, "lock", F_SLOT | F_OWNER, 0},
	{DXL_RPC_ID_TABLE_UNLOCK, "unlock", F_SLOT | F_OWNER, 0},
	{DXL_RPC_ID_TABLE_WRITEBACK, "writeback",
	 F_SLOT | F_OWNER | F_TS | F_VERSION | F_FLAGS | F_VALUE, DXL_TABLE_WB_UNLOCK},
	{DXL_RPC_ID_TABLE_TXN_STATUS, "txn-status", F_KEY, 0},
	{DXL_RPC_ID_TABLE_IN_DOUBT, "in-doubt", F_KEY | F_SLOT | F_VERSION, 0},
	{DXL_RPC_ID_TABLE_RESOLVE, "resolve", F_KEY | F_OWNER | F_TS | F_VERSION | F_FLAGS | F_VALUE,
	 0x3u | DXL_TABLE_RESOLVE_ABORT},
	{DXL_RPC_ID_TABLE_UNLOCK_COORD, "unlock-coord", F_KEY, 0},
	{DXL_RPC_ID_TABLE_FENCE, "fence", 0, 0},
	{DXL_RPC_ID_TABLE_LOCK_OWNERS, "lock-owners", 0, 0},
};

static int op_index(uint16_t op)
{
	for (unsigned i = 0; i < DXL_ARRAY_SIZE(OPS); i++)
		if (OPS[i].op == op)
			return (int)i;
	return -1;
}

const char *dxl_table_op_name(uint16_t op)
{
	int i = op_index(op);
	return i < 0 ? "?" : OPS[i].name;
}

/* the first field r sets that op does not use, NULL if none */
static const char *stray_field(unsigned fields, uint32_t allowed_flags,
			       const struct dxl_table_req *r)
{
	if (!(fields & F_KEY) && r->key)
		return "key";
	if (!(fields & F_SLOT) && r->slot)
		return "slot";
	if (!(fields & F_OWNER) && r->owner)
		return "owner";
	if (!(fields & F_TS) && r->ts)
		return "ts";
	if (!(fields & F_VERSION) && r->version)
		return "version";
	if (r->flags & ~allowed_flags)
		return "flags";
	if (!(fields & F_VALUE) && r->len)
		return "value length";
	return NULL;
}

int dxl_table_req_encode(uint16_t op, const struct dxl_table_req *r, void *buf,
			 size_t cap)
{
	int i = op_index(op);
	if (i < 0 || !r || !buf)
		return dxl_err_set(DXL_E_INVAL, "table request: unknown operation %u or NULL", op);
	const char *bad = stray_field(OPS[i].fields, OPS[i].flags, r);
	if (bad)
		return dxl_err_set(DXL_E_INVAL, "table %s request: %s is not used (must be 0)",
				   OPS[i].name, bad);
	if (r->len > DXL_ENGINE_MAX_VALUE)
		return dxl_err_set(DXL_E_TOOBIG, "table %s request: value of %u bytes (at most %d)",
				   OPS[i].name, r->len, DXL_ENGINE_MAX_VALUE);
	if (r->len && !r->value)
		return dxl_err_set(DXL_E_INVAL, "table %s request: NULL value", OPS[i].name);
	size_t n = DXL_TABLE_REQ_SIZE + (size_t)r->len;
	if (cap < n)
		return dxl_err_set(DXL_E_INVAL, "table request: %zu bytes do not fit in %zu", n, cap);
	uint8_t *p = buf;
	dxl_put_le32(p + 0, r->shard);
	dxl_put_le32(p + 4, r->table);
	dxl_put_le64(p + 8, r->epoch);
	dxl_put_le64(p + 16, r->key);
	dxl_put_le64(p + 24, r->slot);
	dxl_put_le64(p + 32, r->owner);
	dxl_put_le64(p + 40, r->ts);
	dxl_put_le64(p + 48, r->version);
	dxl_put_le32(p + 56, r->flags);
	dxl_put_le32(p + 60, r->len);
	if (r->len)
		memcpy(p + DXL_TABLE_REQ_SIZE, r->value, r->len);
	return (int)n;
}

int dxl_table_req_decode(uint16_t op, const void *buf, size_t len,
			 struct dxl_table_req *out)
{
	int i = op_index(op);
	if (i < 0 || !out || (!buf && len))
		return dxl_err_set(DXL_E_PROTO, "table request: unknown operation %u", op);
	memset(out, 0, sizeof(*out));
	if (len < DXL_TABLE_REQ_SIZE)
		return dxl_err_set(DXL_E_PROTO, "table %s request of %zu bytes (at least %d)",
				   OPS[i].name, len, DXL_TABLE_REQ_SIZE);
	const uint8_t *p = buf;
	struct dxl_table_req r = {
		.shard = dxl_get_le32(p + 0),
		.table = dxl_get_le32(p + 4),
		.epoch = dxl_get_le64(p + 8),
		.key = dxl_get_le64(p + 16),
		.slot = dxl_get_le64(p + 24),
		.owner = dxl_get_le64(p + 32),
		.ts = dxl_get_le64(p + 40),
		.version = dxl_get_le64(p + 48),
		.flags = dxl_get_le32(p + 56),
		.len = dxl_get_le32(p + 60),
	};
	if (r.len > DXL_ENGINE_MAX_VALUE)
		return dxl_err_set(DXL_E_TOOBIG, "table %s request: value of %u bytes (at most %d)",
				   OPS[i].name, r.len, DXL_ENGINE_MAX_VALUE);
	if (len != DXL_TABLE_REQ_SIZE + (size_t)r.len)
		return dxl_err_set(DXL_E_PROTO,
				   "table %s request of %zu bytes, its value length says %u",
				   OPS[i].name, len, DXL_TABLE_REQ_SIZE + r.len);
	const char *bad = stray_field(OPS[i].fields, OPS[i].flags, &r);
	if (bad)
		return dxl_err_set(DXL_E_PROTO, "table %s request: %s is set but not used",
				   OPS[i].name, bad);
	if (r.len)
		r.value = p + DXL_TABLE_REQ_SIZE;
	*out = r;
	return 0;
}

int dxl_table_rep_encode(const struct dxl_table_rep *rep, void *buf, size_t cap)
{
	size_t n = DXL_TABLE_REP_SIZE + (size_t)rep->data_len;
	if (!buf || cap < n || (rep->data_len && !rep->data))
		return dxl_err_set(DXL_E_INVAL, "table reply: %zu bytes do not fit in %zu", n, cap);
	uint8_t *p = buf;
	dxl_put_le64(p + 0, rep->epoch);
	dxl_put_le32(p + 8, rep->primary);
	dxl_put_le32(p + 12, rep->rec.live ? DXL_TABLE_REP_LIVE : 0);
	dxl_put_le64(p + 16, rep->slot);
	dxl_put_le64(p + 24, rep->rec.version);
	dxl_put_le64(p + 32, rep->rec.ts);
	dxl_put_le64(p + 40, rep->rec.key);
	dxl_put_le32(p + 48, rep->rec.inc);
	dxl_put_le32(p + 52, rep->data_len);
	dxl_put_le64(p + 56, rep->holder);
	/* data may already be in place (the server writes values there) */
	if (rep->data_len && rep->data != p + DXL_TABLE_REP_SIZE)
		memmove(p + DXL_TABLE_REP_SIZE, rep->data, rep->data_len);
	return (int)n;
}

int dxl_table_rep_decode(const void *buf, size_t len, struct dxl_table_rep *out)
{
	if (!out || (!buf && len))
		return dxl_err_set(DXL_E_PROTO, "table reply: NULL");
	memset(out, 0, sizeof(*out));
	if (len < DXL_TABLE_REP_SIZE)
		return dxl_err_set(DXL_E_PROTO, "table reply of %zu bytes (at least %d)", len,
				   DXL_TABLE_REP_SIZE);
	const uint8_t *p = buf;
	uint32_t flags = dxl_get_le32(p + 12);
	uint32_t dlen = dxl_get_le32(p + 52);
	if (flags & ~DXL_TABLE_REP_LIVE)
		return dxl_err_set(DXL_E_PROTO, "table reply: unknown flags 0x%x", flags);
	if (len != DXL_TABLE_REP_SIZE + (size_t)dlen)
		return dxl_err_set(DXL_E_PROTO, "table reply of %zu bytes, its data length says %u",
				   len, DXL_TABLE_REP_SIZE + dlen);
	out->epoch = dxl_get_le64(p + 0);
	out->primary = dxl_get_le32(p + 8);
	out->rec.live = flags & DXL_TABLE_REP_LIVE;
	out->slot = dxl_get_le64(p + 16);
	out->rec.version = dxl_get_le64(p + 24);
	out->rec.ts = dxl_get_le64(p + 32);
	out->rec.key = dxl_get_le64(p + 40);
	out->rec.inc = dxl_get_le32(p + 48);
	out->holder = dxl_get_le64(p + 56);
	out->data_len = dlen;
	out->data = dlen ? p + DXL_TABLE_REP_SIZE : NULL;
	return 0;
}

int dxl_table_call(struct dxl_rpc *rpc, struct dxl_qp *qp, uint16_t op,
		   const struct dxl_table_req *req, struct dxl_table_rep *rep,
		   void *value, uint32_t cap)
{
	if (!rpc || !qp || !req || !rep || (cap && !value))
		return dxl_err_set(DXL_E_INVAL, "dxl_table_call: NULL argument");
	memset(rep, 0, sizeof(*rep));
	/* on the coroutine's stack: 2 x (64 + 4000) bytes */
	uint8_t rq[DXL_TABLE_REQ_SIZE + DXL_ENGINE_MAX_VALUE];
	uint8_t rp[DXL_TABLE_REP_MAX];
	int n = dxl_table_req_encode(op, req, rq, sizeof(rq));
	if (n < 0)
		return n;
	size_t rlen = 0;
	int status = dxl_rpc_call(rpc, qp, op, rq, (size_t)n, rp, sizeof(rp), &rlen);
	if (status < 0 && rlen == 0)
		return status; /* the call's own error (message set) */
	int ret = dxl_table_rep_decode(rp, rlen, rep);
	if (ret) {
		dxl_err_prefix("table %s at node %u", dxl_table_op_name(op),
			       dxl_qp_remote_node(qp));
		return ret;
	}
	if (status < 0) {
		char msg[512];
		size_t m = DXL_MIN((size_t)rep->data_len, sizeof(msg) - 1);
		if (m)
			memcpy(msg, rep->data, m);
		msg[m] = 0;
		rep->data = NULL;
		rep->data_len = 0;
		return dxl_err_set(status, "node %u: %s", dxl_qp_remote_node(qp),
				   m ? msg : dxl_strerror(status));
	}
	if (rep->data_len) {
		if (rep->data_len > cap) {
			rep->data = NULL;
			return dxl_err_set(DXL_E_TOOBIG,
					   "table %s at node %u: value of %u bytes, room for %u",
					   dxl_table_op_name(op), dxl_qp_remote_node(qp),
					   rep->data_len, cap);
		}
		memcpy(value, rep->data, rep->data_len);
		rep->data = value;
	}
	rep->rec.len = rep->data_len;
	return status;
}
