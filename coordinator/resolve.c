/* resolve.c -- resolving the transactions of coordinators that died
 * (docs/transactions.md "Coordinator dies")
 *
 * A coordinator that dies leaves (a) lock words holding its transactions'
 * ids at the primaries and (b) records above its rings' watermarks:
 * transactions in doubt. Its writer slots and coords/<id> vanish with its
 * ZooKeeper session. Any coordinator that keeps meeting such a lock runs
 * the resolution:
 *
 *  1. For every shard and every ring whose writer slot is free: take the
 *     slot (exclusive: one resolver per ring; opening it repairs the ring
 *     across the members with the primary as the reference) and list the
 *     write sets above its watermark that no abort marker cancels.
 *  2. For each (transaction T, participants P): T committed iff every
 *     participant's primary has T's write set in its log and none has an
 *     abort marker for T. That is the commit point: every append
 *     acknowledged means present on every member, the primary included,
 *     and a primary's log is what repairs keep. Then each entry is applied
 *     at the shard's primary (RESOLVE: idempotent by version; T's lock
 *     released); else T's inserts are removed, its locks released, and an
 *     abort marker goes into the ring.
 *  3. The ring's watermark passes everything (a heartbeat of the resolver's
 *     writer): backups apply what committed, skip what aborted. The slot is
 *     released.
 *  4. The dead coordinators' remaining lock words (transactions that died
 *     before their Log phase) are released at every primary.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/endian.h"
#include "coordinator/coord_internal.h"

#define RESOLVE_BUF DXL_ENGINE_MAX_VALUE /* an RPC reply's data */

struct doubt {
	uint64_t txn, ts;
	uint32_t nparts;
	uint32_t parts[DXL_LOG_WRITER_MAX_PARTS];
	uint32_t len;
	const uint8_t *payload;
};

/* the status of T in every participant: 1 committed, 0 aborted, < 0 error */
static int txn_decision(struct dxl_coord_worker *w, const struct view *v, const struct doubt *d)
{
	if (!d->nparts)
		return 0;
	for (uint32_t i = 0; i < d->nparts; i++) {
		struct dxl_table_req req = {.key = d->txn};
		struct dxl_table_rep rep;
		int ret = coord_table_call(w, v, d->parts[i], DXL_RPC_ID_TABLE_TXN_STATUS, &req, &rep,
					   NULL, 0);
		if (ret)
			return ret;
		if (rep.holder != DXL_TXN_PRESENT)
			return 0;
	}
	return 1;
}

static int log_wait_one(struct dxl_log_writer *lw, uint64_t ts)
{
	struct dxl_log_writer_result res[8];
	uint64_t end = dxl_now_ms() + 10000;
	while (dxl_now_ms() < end) {
		int n = dxl_log_writer_poll(lw, res, 8, 0);
		for (int i = 0; i < n; i++)
			if (res[i].ts == ts)
				return res[i].status;
		if (n <= 0)
			dxl_co_suspend(dxl_now_ns() + 200000);
	}
	return dxl_err_set(DXL_E_TIMEDOUT, "abort marker not acknowledged in 10 s");
}

/* list_doubt -- every write set in doubt in ring r of shard s (copies) */
static int list_doubt(struct dxl_coord_worker *w, const struct view *v, uint32_t s, uint32_t r,
		      uint8_t *buf, struct doubt **out, uint32_t *nout)
{
	struct doubt *d = NULL;
	uint32_t n = 0, cap = 0;
	int ret = 0;
	for (uint64_t skip = 0;;) {
		struct dxl_table_req req = {.slot = r, .key = skip};
		struct dxl_table_rep rep;
		if ((ret = coord_table_call(w, v, s, DXL_RPC_ID_TABLE_IN_DOUBT, &req, &rep, buf,
					    RESOLVE_BUF)))
			break;
		if (!rep.slot && rep.holder) {
			ret = dxl_err_set(DXL_E_TOOBIG, "shard %u ring %u: a record in doubt is over %d bytes",
					  s, r, RESOLVE_BUF);
			break;
		}
		uint32_t off = 0;
		for (uint64_t k = 0; k < rep.slot; k++) {
			const uint8_t *p = buf + off;
			if (n == cap) {
				cap = cap ? 2 * cap : 16;
				struct doubt *nd = realloc(d, cap * sizeof(*d));
				if (!nd) {
					ret = dxl_err_set(DXL_E_NOMEM, "records in doubt");
					break;
				}
				d = nd;
			}
			struct doubt *x = &d[n];
			*x = (struct doubt){.txn = dxl_get_le64(p), .ts = dxl_get_le64(p + 8),
					    .nparts = dxl_get_le16(p + 16), .len = dxl_get_le32(p + 20)};
			if (x->nparts > DXL_LOG_WRITER_MAX_PARTS || off + DXL_IN_DOUBT_HDR +
			    4 * x->nparts + x->len > rep.data_len) {
				ret = dxl_err_set(DXL_E_PROTO, "shard %u ring %u: malformed in-doubt list", s, r);
				break;
			}
			for (uint32_t i = 0; i < x->nparts; i++)
				x->parts[i] = dxl_get_le32(p + DXL_IN_DOUBT_HDR + 4 * i);
			uint8_t *pl = malloc(x->len ? x->len : 1);
			if (!pl) {
				ret = dxl_err_set(DXL_E_NOMEM, "record in doubt");
				break;
			}
			memcpy(pl, p + DXL_IN_DOUBT_HDR + 4 * x->nparts, x->len);
			x->payload = pl;
			n++;
			off += (DXL_IN_DOUBT_HDR + 4 * x->nparts + x->len + 7u) & ~7u;
		}
		if (ret || !rep.holder)
			break;
		skip += rep.slot;
	}
	if (ret) {
		for (uint32_t i = 0; i < n; i++)
			free((void *)d[i].payload);
		free(d);
		return ret;
	}
	*out = d;
	*nout = n;
	return 0;
}

/* resolve_one -- step 2 for one transaction of ring r of shard s */
static int resolve_one(struct dxl_coord_worker *w, const struct view *v, uint32_t s,
		       uint32_t r, const struct doubt *d, struct dxl_log_writer *lw)
{
	int dec = txn_decision(w, v, d);
	if (dec < 0)
		return dec;
	struct dxl_ws_entry e[DXL_TXN_MAX_OPS];
	int ne = dxl_writeset_decode(d->payload, d->len, e, DXL_TXN_MAX_OPS);
	if (ne < 0)
		return ne;
	for (int i = 0; i < ne && i < DXL_TXN_MAX_OPS; i++) {
		struct dxl_table_req q = {
			.table = e[i].table, .key = e[i].key, .owner = d->txn, .ts = d->ts,
			.version = e[i].version,
			.flags = (uint32_t)e[i].op | (dec ? 0 : DXL_TABLE_RESOLVE_ABORT),
			.value = dec ? e[i].value : NULL, .len = dec ? e[i].len : 0};
		struct dxl_table_rep qr;
		int ret = coord_table_call(w, v, s, DXL_RPC_ID_TABLE_RESOLVE, &q, &qr, NULL, 0);
		if (ret == DXL_E_BUSY) {
			/* locked by another transaction: this one's lock was lost
			 * (a failover); what it wrote is decided by the log */
			DXL_WARN("event=resolve_busy shard=%u txn=0x%" PRIx64 " msg=\"%s\"", s, d->txn,
				 dxl_errmsg());
			ret = 0;
		}
		if (ret)
			return ret;
	}
	if (!dec) {
		uint8_t m[DXL_ABORT_SIZE];
		uint64_t ts;
		dxl_abort_marker_encode(d->txn, m, sizeof(m));
		int ret = dxl_log_writer_append(lw, m, sizeof(m), d->txn, &ts);
		if (!ret)
			ret = log_wait_one(lw, ts);
		if (ret)
			return ret;
	}
	DXL_INFO("event=txn_resolved shard=%u ring=%u txn=0x%" PRIx64 " ts=%" PRIu64
		 " decision=%s entries=%d",
		 s, r, d->txn, d->ts, dec ? "commit" : "abort", ne);
	return 0;
}

/* resolve_ring -- steps 1-3 for ring r of shard s; returns the number of
 * transactions resolved, 0 if nothing was in doubt, < 0 on error */
static int resolve_ring(struct dxl_coord_worker *w, const struct view *v, uint32_t s,
			uint32_t r, uint8_t *buf)
{
	struct dxl_coord *c = coord_worker_coord(w);
	struct doubt *d = NULL;
	uint32_t n = 0;
	int ret = list_doubt(w, v, s, r, buf, &d, &n);
	if (ret || !n)
		goto out;
	for (uint32_t i = 0; i < n; i++)
		free((void *)d[i].payload);
	free(d);
	d = NULL;
	n = 0;
	/* take the ring (which repairs it), then list again */
	struct dxl_log_writer_cfg lc;
	dxl_log_writer_cfg_init(&lc);
	lc.shard = s;
	lc.slot = (int32_t)r;
	lc.unavail_ms = 5000;
	struct dxl_log_writer *lw = NULL;
	if ((ret = dxl_log_writer_new(c->zk, &lc, &lw))) {
		if (ret == DXL_E_EXIST)
			ret = 0; /* another resolver or a new writer has it */
		goto out;
	}
	if (!(ret = list_doubt(w, v, s, r, buf, &d, &n)))
		for (uint32_t i = 0; i < n && !ret; i++)
			ret = resolve_one(w, v, s, r, &d[i], lw);
	/* the watermark past everything: backups apply the committed, skip
	 * the aborted */
	for (int k = 0; !ret && k < 100; k++) {
		ret = dxl_log_writer_flush(lw, 5000);
		if (ret != DXL_E_BUSY)
			break;
		struct dxl_log_writer_result res[8];
		dxl_log_writer_poll(lw, res, 8, 0);
	}
	dxl_log_writer_delete(&lw);
out:
	for (uint32_t i = 0; i < n; i++)
		free((void *)d[i].payload);
	free(d);
	return ret ? ret : (int)n;
}

void coord_maybe_resolve(struct dxl_coord_worker *w)
{
	struct dxl_coord *c = coord_worker_coord(w);
	uint32_t sus[8];
	uint64_t *last;
	uint32_t ns = coord_worker_suspects(w, sus, 8, &last);
	uint64_t now = dxl_now_ms();
	if (!ns || now - *last < 500)
		return;
	*last = now;
	if (atomic_exchange(&c->resolving, true))
		return;
	uint32_t live[1024];
	int nl = dxl_coord_znode_list(c->zk, live, 1024);
	uint32_t dead[8], nd = 0;
	for (uint32_t i = 0; nl >= 0 && i < ns; i++) {
		bool alive = false;
		for (int k = 0; k < nl && k < 1024; k++)
			alive = alive || live[k] == sus[i];
		if (!alive)
			dead[nd++] = sus[i];
	}
	coord_worker_clear_suspects(w);
	DXL_DEBUG("event=coord_suspects coord=%u suspects=%u first=%u live=%d dead=%u", c->id, ns,
		  sus[0], nl, nd);
	if (!nd) {
		atomic_store(&c->resolving, false);
		return;
	}
	struct view *v = coord_view_get(c);
	uint8_t *buf = malloc(RESOLVE_BUF);
	int total = 0, err = 0;
	for (uint32_t s = 0; buf && v && s < v->nshards && !err; s++) {
		if (!v->shards[s].ok)
			continue;
		uint64_t mask = 0;
		if (dxl_writer_slots_live(c->zk, s, &mask))
			continue;
		for (uint32_t r = 0; r < v->shards[s].nrings && r < 64; r++) {
			if ((mask >> r) & 1)
				continue;
			int n = resolve_ring(w, v, s, r, buf);
			if (n < 0) {
				DXL_WARN("event=resolve_failed shard=%u ring=%u msg=\"%s\"", s, r,
					 dxl_errmsg());
				err = n;
				break;
			}
			total += n;
		}
	}
	/* the dead coordinators' other locks (only once every ring is done) */
	for (uint32_t i = 0; !err && buf && v && i < nd; i++)
		for (uint32_t s = 0; s < v->nshards; s++) {
			struct dxl_table_req req = {.key = dead[i]};
			struct dxl_table_rep rep;
			if (coord_table_call(w, v, s, DXL_RPC_ID_TABLE_UNLOCK_COORD, &req, &rep, NULL, 0))
				DXL_WARN("event=unlock_coord_failed shard=%u coord=%u msg=\"%s\"", s,
					 dead[i], dxl_errmsg());
		}
	if (total > 0)
		atomic_fetch_add(&c->resolved, (uint64_t)total);
	DXL_INFO("event=coord_resolution coord=%u dead=%u resolved=%d err=%s", c->id, nd, total,
		 err ? dxl_errname(err) : "none");
	free(buf);
	coord_view_put(c, v);
	atomic_store(&c->resolving, false);
}
