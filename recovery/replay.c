/* replay.c -- the log window re-applied to a store: what a restarted replica does before its applier goes on (include/dxl/recovery.h) */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/recovery.h"
#include "recovery/recovery_internal.h"

/*
 * Who may call: the store's only writer (a replica's applier before it
 * serves; a rebuild), with nobody appending to ls below resolved_ts.
 *
 * Why each key's last write only (docs/engine.md "Re-applying a window"):
 * applying the window record by record puts back a key that the window
 * deletes later (the store may hold no tombstone for it), which writes,
 * and needs a free slot a full table does not have. Two passes over the
 * window in commit-timestamp order: the first checks every record (strict
 * write set, known table, value length: an error there changes nothing)
 * and notes each key's largest version; the second applies only that last
 * write of each key (dxl_store_apply: idempotent and order-safe by
 * version). Abort markers (docs/transactions.md) cancel their records:
 * every marker of every ring is collected first, whatever its timestamp.
 */

struct wkey {
	uint64_t key;
	uint64_t version; /* 0 = empty entry (versions are >= 2) */
	uint32_t table;
};

struct wmap {
	struct wkey *e;
	uint64_t mask, n;
};

static struct wkey *wmap_get(struct wmap *m, uint32_t table, uint64_t key, bool add)
{
	if (add && 2 * (m->n + 1) > m->mask + 1) {
		uint64_t size = m->e ? 2 * (m->mask + 1) : 1024;
		struct wkey *ne = calloc(size, sizeof(*ne));
		if (!ne)
			return NULL;
		for (uint64_t i = 0; m->e && i <= m->mask; i++) {
			if (!m->e[i].version)
				continue;
			uint64_t j = dxl_table_key_hash(m->e[i].table, m->e[i].key) & (size - 1);
			while (ne[j].version)
				j = (j + 1) & (size - 1);
			ne[j] = m->e[i];
		}
		free(m->e);
		m->e = ne;
		m->mask = size - 1;
	}
	if (!m->e)
		return NULL;
	for (uint64_t i = dxl_table_key_hash(table, key) & m->mask;; i = (i + 1) & m->mask) {
		struct wkey *w = &m->e[i];
		if (!w->version) {
			if (!add)
				return NULL;
			w->table = table;
			w->key = key;
			m->n++;
			return w;
		}
		if (w->table == table && w->key == key)
			return w;
	}
}

struct aborted {
	uint32_t writer;
	uint64_t txn;
};

struct replay {
	struct dxl_store *s;
	dxl_store_filter_fn filter;
	void *arg;
	struct dxl_replay_stats *st;
	struct wmap wm;
	bool pass1;
	int err;
	struct aborted *ab; /* the rings' abort markers */
	size_t nab, abcap;
	struct dxl_ws_entry *e; /* a decoded write set */
	uint32_t ecap;
};

/* pass 0: every abort marker of every ring (whatever its timestamp) */
static int collect_marker(uint32_t ring, const struct dxl_rec *rec, uint64_t pos, void *arg)
{
	(void)ring;
	(void)pos;
	struct replay *rp = arg;
	uint64_t txn;
	if (dxl_abort_marker_decode(rec->payload, rec->payload_len, &txn) != 1)
		return 0;
	if (rp->nab == rp->abcap) {
		size_t ncap = rp->abcap ? 2 * rp->abcap : 64;
		struct aborted *n = realloc(rp->ab, ncap * sizeof(*n));
		if (!n) {
			rp->err = dxl_err_set(DXL_E_NOMEM, "replay: abort markers");
			return 1;
		}
		rp->ab = n;
		rp->abcap = ncap;
	}
	rp->ab[rp->nab++] = (struct aborted){.writer = rec->writer, .txn = txn};
	return 0;
}

static bool is_aborted(const struct replay *rp, const struct dxl_rec *rec)
{
	for (size_t i = 0; i < rp->nab; i++)
		if (rp->ab[i].writer == rec->writer && rp->ab[i].txn == rec->txn_id)
			return true;
	return false;
}

/* the write set of rec into rp->e; returns the entry count or an error */
static int decode(struct replay *rp, const struct dxl_rec *rec)
{
	int n = dxl_writeset_decode(rec->payload, rec->payload_len, NULL, 0);
	if (n < 0)
		return n;
	if ((uint32_t)n > rp->ecap) {
		uint32_t cap = DXL_MAX((uint32_t)n, 2 * rp->ecap);
		struct dxl_ws_entry *ne = realloc(rp->e, cap * sizeof(*ne));
		if (!ne)
			return dxl_err_set(DXL_E_NOMEM, "replay: a write set of %d entries", n);
		rp->e = ne;
		rp->ecap = cap;
	}
	return dxl_writeset_decode(rec->payload, rec->payload_len, rp->e, rp->ecap);
}

/* pass 1: check every entry and note each key's largest version; pass 2:
 * apply each key's last write */
static int entries(struct replay *rp, const struct dxl_rec *rec)
{
	int n = decode(rp, rec);
	if (n < 0)
		return n;
	struct dxl_replay_stats *st = rp->st;
	if (!rp->pass1) {
		st->records++;
		st->last_ts = rec->commit_ts;
	}
	for (int i = 0; i < n; i++) {
		const struct dxl_ws_entry *e = &rp->e[i];
		if (rp->filter && !rp->filter(rp->arg, e->table, e->key)) {
			if (!rp->pass1) {
				st->entries++;
				st->filtered++;
			}
			continue;
		}
		if (rp->pass1) {
			struct dxl_table_schema sc;
			int ret = dxl_store_schema(rp->s, e->table, &sc);
			if (!ret && e->len > sc.value_size)
				ret = dxl_err_set(DXL_E_TOOBIG,
						  "table %u: value of %u bytes, its value size is %u",
						  e->table, e->len, sc.value_size);
			struct wkey *w = NULL;
			if (!ret && !(w = wmap_get(&rp->wm, e->table, e->key, true)))
				ret = dxl_err_set(DXL_E_NOMEM, "replay: out of memory");
			if (ret) {
				dxl_err_prefix("write set entry %d (table %u, key %" PRIu64 ")", i,
					       e->table, e->key);
				return ret;
			}
			w->version = DXL_MAX(w->version, e->version);
			continue;
		}
		st->entries++;
		struct wkey *w = wmap_get(&rp->wm, e->table, e->key, false);
		if (w && e->version < w->version) {
			st->superseded++;
			continue;
		}
		int ret = dxl_store_apply(rp->s, e->table, e->key, e->op, e->version, rec->commit_ts,
					  e->value, e->len);
		/* the delete of an absent key on a full table: no slot for its
		 * tombstone (dxl_store_apply refuses: an applier must keep it).
		 * A replay applies the last write of each key of its window --
		 * no older write of the key follows here -- so it passes it
		 * over (issue 20 review) */
		if (ret == DXL_E_FULL && e->op == DXL_WS_DELETE)
			ret = 0;
		if (ret < 0) {
			dxl_err_prefix("write set entry %d (table %u, key %" PRIu64 ")", i, e->table,
				       e->key);
			return ret;
		}
		if (ret)
			st->applied++;
		else
			st->skipped++;
	}
	return 0;
}

static int replay_one(uint32_t ring, const struct dxl_rec *rec, uint64_t pos, void *arg)
{
	struct replay *rp = arg;
	int m = dxl_abort_marker_decode(rec->payload, rec->payload_len, NULL);
	if (m == 1 || (m == 0 && is_aborted(rp, rec)))
		return 0; /* a marker, or a record it cancels */
	int ret = m < 0 ? m : entries(rp, rec);
	if (ret < 0) {
		dxl_err_prefix("replay: ring %u record seq %" PRIu64 " (ts %" PRIu64
			       ", position %" PRIu64 ")",
			       ring, rec->seq, rec->commit_ts, pos);
		rp->err = ret;
		return 1;
	}
	return 0;
}

int dxl_recovery_replay(struct dxl_store *s, const struct dxl_logstore *ls,
			uint64_t resolved_ts, dxl_store_filter_fn filter, void *arg,
			struct dxl_replay_stats *st)
{
	struct dxl_replay_stats dummy;
	if (!st)
		st = &dummy;
	memset(st, 0, sizeof(*st));
	if (!s || !ls)
		return dxl_err_set(DXL_E_INVAL, "replay: NULL store or log");
	struct replay rp = {.s = s, .filter = filter, .arg = arg, .st = st, .pass1 = true};
	int n = dxl_log_scan_merged(ls, UINT64_MAX, collect_marker, &rp);
	if (!rp.err && n >= 0)
		n = dxl_log_scan_merged(ls, resolved_ts, replay_one, &rp);
	if (!rp.err && n >= 0) {
		rp.pass1 = false;
		n = dxl_log_scan_merged(ls, resolved_ts, replay_one, &rp);
	}
	free(rp.wm.e);
	free(rp.ab);
	free(rp.e);
	if (rp.err)
		return rp.err;
	return n;
}
