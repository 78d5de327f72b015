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

/* one resolution's context: the coordinators alive when it started */
struct rctx {
	struct dxl_coord_worker *w;
	const struct view *v;
	const uint32_t *live;
	int nlive;
	uint8_t *buf;
};

static bool coord_alive(const struct rctx *x, uint32_t id)
{
	if (x->nlive < 0)
		return true; /* unknown: never take a lock over */
	for (int k = 0; k < x->nlive; k++)
		if (x->live[k] == id)
			return true;
	return false;
}

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
	uint8_t *const orig_buf = buf;
	struct doubt *d = NULL;
	uint32_t n = 0, cap = 0;
	int ret = 0;
	uint8_t *part = NULL; /* a record larger than a reply, put together */
	uint32_t part_len = 0;
	for (uint64_t skip = 0, at = 0;;) {
		struct dxl_table_req req = {.slot = r, .key = skip, .version = at};
		struct dxl_table_rep rep;
		if ((ret = coord_table_call(w, v, s, DXL_RPC_ID_TABLE_IN_DOUBT, &req, &rep, buf,
					    RESOLVE_BUF)))
			break;
		if (!rep.slot && rep.holder && rep.rec.key == 1) {
			/* a part of a large record: header, then payload from at */
			const uint8_t *p = buf;
			uint32_t np = dxl_get_le16(p + 16), len = dxl_get_le32(p + 20);
			uint32_t head = DXL_IN_DOUBT_HDR + 4 * np;
			if (np > DXL_LOG_WRITER_MAX_PARTS || rep.data_len < head ||
			    rep.rec.version != at || (at && len != part_len) ||
			    at + (rep.data_len - head) > len) {
				ret = dxl_err_set(DXL_E_PROTO, "shard %u ring %u: malformed part of a record in doubt",
						  s, r);
				break;
			}
			if (!at) {
				free(part);
				part_len = len;
				part = malloc(head + len + 8);
				if (!part) {
					ret = dxl_err_set(DXL_E_NOMEM, "record in doubt of %u bytes", len);
					break;
				}
				memcpy(part, p, head);
			}
			memcpy(part + head + at, p + head, rep.data_len - head);
			at += rep.data_len - head;
			if (at < len)
				continue;
			/* whole: parsed below like a reply of one record */
			buf = part;
			rep.slot = 1;
			rep.holder = 1;
			rep.data_len = head + len;
			at = 0;
		} else if (!rep.slot && rep.holder) {
			ret = dxl_err_set(DXL_E_TOOBIG, "shard %u ring %u: a record in doubt is over %d bytes (the node does not send parts)",
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
		if (buf == part) { /* back to the caller's buffer */
			buf = orig_buf;
			free(part);
			part = NULL;
		}
		if (ret || !rep.holder)
			break;
		skip += rep.slot;
	}
	free(part);
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

/*
 * resolve_entry -- RESOLVE one entry of d at shard s, never skipping it: the
 * entry's key may be locked by another transaction (its own lock was lost,
 * e.g. an insert in doubt across a failover before the promotion gate
 * locked those too). Applying it anyway would race with that holder's
 * write-back; skipping it (as before) left the primary without a write
 * the backups apply from the log. So: a holder whose coordinator is alive
 * is waited for; a holder of a dead coordinator that has no write set in
 * this shard's log never reached its commit point -- its lock is released
 * here (what UNLOCK_COORD would do) -- and one that has is in doubt in
 * another ring: waited for (its ring is resolved in this pass or the next).
 * After RESOLVE_WAIT_MS the ring stays unresolved (DXL_E_BUSY) and is
 * tried again at the next resolution.
 */
#define RESOLVE_WAIT_MS 5000

static int resolve_entry(struct rctx *x, uint32_t s, const struct doubt *d,
			 const struct dxl_ws_entry *e, bool commit)
{
	uint64_t end = dxl_now_ms() + RESOLVE_WAIT_MS;
	for (uint32_t tries = 0;; tries++) {
		struct dxl_table_req q = {
			.table = e->table, .key = e->key, .owner = d->txn, .ts = d->ts,
			.version = e->version,
			.flags = (uint32_t)e->op | (commit ? 0 : DXL_TABLE_RESOLVE_ABORT),
			.value = commit ? e->value : NULL, .len = commit ? e->len : 0};
		struct dxl_table_rep qr;
		int ret = coord_table_call(x->w, x->v, s, DXL_RPC_ID_TABLE_RESOLVE, &q, &qr, NULL, 0);
		if (ret != DXL_E_BUSY)
			return ret;
		uint64_t holder = qr.holder;
		uint32_t hc = (uint32_t)(holder >> 48);
		if (tries % 50 == 0)
			DXL_WARN("event=resolve_busy shard=%u txn=0x%" PRIx64 " table=%u key=%" PRIu64
				 " holder=0x%" PRIx64 " holder_alive=%d msg=\"waiting: never skipped\"",
				 s, d->txn, e->table, e->key, holder, coord_alive(x, hc));
		if (holder && !coord_alive(x, hc)) {
			struct dxl_table_req st = {.key = holder};
			struct dxl_table_rep sr;
			int r2 = coord_table_call(x->w, x->v, s, DXL_RPC_ID_TABLE_TXN_STATUS, &st, &sr,
						  NULL, 0);
			if (r2 == 0 && sr.holder == DXL_TXN_ABSENT) {
				/* never logged here: it cannot commit; take its lock
				 * away (an abort of an update releases the lock only) */
				struct dxl_table_req rel = {.table = e->table, .key = e->key,
							    .owner = holder, .version = 2,
							    .flags = DXL_WS_UPDATE |
								     DXL_TABLE_RESOLVE_ABORT};
				struct dxl_table_rep rr;
				r2 = coord_table_call(x->w, x->v, s, DXL_RPC_ID_TABLE_RESOLVE, &rel, &rr,
						      NULL, 0);
				DXL_INFO("event=resolve_took_lock shard=%u key=%" PRIu64 " from=0x%" PRIx64
					 " for=0x%" PRIx64 " code=%s",
					 s, e->key, holder, d->txn, dxl_errname(r2));
				continue;
			}
		}
		if (dxl_now_ms() >= end)
			return dxl_err_set(DXL_E_BUSY,
					   "shard %u: key %" PRIu64 " of transaction 0x%" PRIx64
					   " in doubt stays locked by 0x%" PRIx64 ": the ring is left for the next resolution",
					   s, e->key, d->txn, holder);
		dxl_co_suspend(dxl_now_ns() + 20000000ull);
	}
}

/* resolve_one -- step 2 for one transaction of ring r of shard s */
static int resolve_one(struct rctx *x, uint32_t s, uint32_t r, const struct doubt *d,
		       struct dxl_log_writer *lw)
{
	int dec = txn_decision(x->w, x->v, d);
	if (dec < 0)
		return dec;
	struct dxl_ws_entry e[DXL_TXN_MAX_OPS];
	int ne = dxl_writeset_decode(d->payload, d->len, e, DXL_TXN_MAX_OPS);
	if (ne < 0)
		return ne;
	for (int i = 0; i < ne && i < DXL_TXN_MAX_OPS; i++) {
		int ret = resolve_entry(x, s, d, &e[i], dec == 1);
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
 * transactions resolved, 0 if nothing was in doubt, < 0 on error
 * (DXL_E_EXIST: records were in doubt and another resolver holds the
 * ring) */
static int resolve_ring(struct rctx *x, uint32_t s, uint32_t r)
{
	struct dxl_coord *c = coord_worker_coord(x->w);
	struct doubt *d = NULL;
	uint32_t n = 0;
	int ret = list_doubt(x->w, x->v, s, r, x->buf, &d, &n);
	if (ret || !n)
		goto out;
	/* the oldest record in doubt: the resolver's watermark stays below it
	 * until every one is resolved (a heartbeat past them would let the
	 * backups apply records not resolved yet) */
	uint64_t oldest = UINT64_MAX;
	for (uint32_t i = 0; i < n; i++) {
		oldest = DXL_MIN(oldest, d[i].ts);
		free((void *)d[i].payload);
	}
	free(d);
	d = NULL;
	n = 0;
	/* take the ring (which repairs it), then list again */
	struct dxl_log_writer_cfg lc;
	dxl_log_writer_cfg_init(&lc);
	lc.shard = s;
	lc.slot = (int32_t)r;
	lc.unavail_ms = 5000;
	lc.hold_below = oldest;
	struct dxl_log_writer *lw = NULL;
	if ((ret = dxl_log_writer_new(c->zk, &lc, &lw)))
		goto out; /* DXL_E_EXIST: another resolver has it (the caller
			     must not release the locks it still resolves) */
	if (!(ret = list_doubt(x->w, x->v, s, r, x->buf, &d, &n)))
		for (uint32_t i = 0; i < n && !ret; i++)
			ret = resolve_one(x, s, r, &d[i], lw);
	/* every one resolved: the watermark past everything (backups apply
	 * the committed, skip the aborted); else it stays below them */
	if (!ret)
		dxl_log_writer_set_hold_below(lw, 0);
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
	coord_worker_resolving(w, true);
	struct view *v = coord_view_get(c);
	uint8_t *buf = malloc(RESOLVE_BUF);
	int total = 0, err = 0;
	struct rctx x = {.w = w, .v = v, .live = live, .nlive = nl, .buf = buf};
	/* a dead coordinator whose records in doubt someone else is resolving
	 * (a ring held by another resolver) keeps its locks: that resolver's
	 * RESOLVE keeps a forward entry's lock until its watermark moved, and
	 * transactions it has not resolved yet hold theirs (issue 20 review) */
	bool others[8] = {false};
	/* every ring, even after one failed (a ring waiting for another's
	 * resolution must not stop that one) */
	for (uint32_t s = 0; buf && v && s < v->nshards; s++) {
		if (!v->shards[s].ok)
			continue;
		uint64_t mask = 0;
		if (dxl_writer_slots_live(c->zk, s, &mask)) {
			err = err ? err : DXL_E_UNAVAIL; /* cannot tell: keep the locks */
			continue;
		}
		for (uint32_t r = 0; r < v->shards[s].nrings && r < 64; r++) {
			int n;
			if ((mask >> r) & 1) {
				/* held: a live writer -- or another resolver */
				struct doubt *d = NULL;
				uint32_t nn = 0;
				n = list_doubt(w, v, s, r, buf, &d, &nn);
				for (uint32_t k = 0; k < nn; k++) {
					for (uint32_t i = 0; i < nd; i++)
						others[i] = others[i] || (d[k].txn >> 48) == dead[i];
					free((void *)d[k].payload);
				}
				free(d);
				if (n < 0) {
					err = n;
					DXL_WARN("event=resolve_failed shard=%u ring=%u msg=\"%s\"", s, r,
						 dxl_errmsg());
				}
				continue;
			}
			n = resolve_ring(&x, s, r);
			if (n == DXL_E_EXIST) {
				/* taken by another resolver meanwhile: whose records are
				 * in doubt there is not known -- keep every lock */
				for (uint32_t i = 0; i < nd; i++)
					others[i] = true;
				DXL_INFO("event=resolve_ring_taken shard=%u ring=%u msg=\"another resolver has it\"",
					 s, r);
				continue;
			}
			if (n < 0) {
				DXL_WARN("event=resolve_failed shard=%u ring=%u msg=\"%s\"", s, r,
					 dxl_errmsg());
				err = n;
				continue;
			}
			total += n;
		}
	}
	/* the dead coordinators' other locks (only once every ring is done,
	 * by this resolution) */
	for (uint32_t i = 0; !err && buf && v && i < nd; i++)
		for (uint32_t s = 0; !others[i] && s < v->nshards; s++) {
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
	coord_worker_resolving(w, false);
	atomic_store(&c->resolving, false);
}

void coord_sweep(struct dxl_coord_worker *w)
{
	struct dxl_coord *c = coord_worker_coord(w);
	uint64_t now = dxl_now_ms(), last = atomic_load(&c->last_sweep_ms);
	if (now - last < COORD_SWEEP_MS ||
	    !atomic_compare_exchange_strong(&c->last_sweep_ms, &last, now))
		return;
	struct view *v = coord_view_get(c);
	uint32_t live[1024];
	int nl = v ? dxl_coord_znode_list(c->zk, live, 1024) : -1;
	uint32_t found = 0;
	for (uint32_t s = 0; nl >= 0 && s < v->nshards; s++) {
		if (!v->shards[s].ok)
			continue;
		uint8_t ids[4000];
		struct dxl_table_req req = {0};
		struct dxl_table_rep rep;
		if (coord_table_call(w, v, s, DXL_RPC_ID_TABLE_LOCK_OWNERS, &req, &rep, ids,
				     sizeof(ids)))
			continue; /* a failover: the next sweep */
		for (uint64_t k = 0; k < rep.slot && k < sizeof(ids) / 4; k++) {
			uint32_t id = dxl_get_le32(ids + 4 * k);
			bool alive = id == (uint32_t)c->id;
			for (int i = 0; i < nl && i < 1024 && !alive; i++)
				alive = live[i] == id;
			if (!alive) {
				coord_note_holder(w, DXL_LOCK_OWNER(id, 1));
				found++;
			}
		}
	}
	coord_view_put(c, v);
	if (found) {
		DXL_INFO("event=coord_sweep coord=%u gone_lock_holders=%u", (uint32_t)c->id, found);
		coord_maybe_resolve(w);
	}
}
