/* tables.c -- the engine's tables a replica node hosts: per shard a record store and its hash indexes, their registration and descriptors (replica/tables_internal.h, docs/replica.md "Tables") */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "common/endian.h"
#include "dxl/co.h"
#include "dxl/recovery.h"
#include "dxl/rpc.h"
#include "replica/tables_internal.h"

struct tab {
	struct dxl_table_schema sc;
	struct dxl_index *ix;
	struct dxl_mr *ix_mr; /* NULL while deregistered */
};

/* the backup's applier: where each ring of the local log is applied up to */
struct abm { /* an abort marker seen: its ring, writer, transaction, sequence */
	uint32_t ring, writer;
	uint64_t txn, seq;
};

struct applier {
	bool active;
	uint32_t nrings;
	uint64_t *pos, *seq; /* per ring: the next record to apply */
	uint64_t *mpos, *mseq; /* per ring: the next record to look at for markers */
	/* the abort markers whose records the applier has not passed yet:
	 * every one is kept (a dropped marker lets its record be applied); a
	 * marker is forgotten only once the applier's position in its ring is
	 * past it -- its record, earlier in the same ring, was passed too.
	 * ab is dense; hidx (hcap slots, a power of two) maps (writer, txn) to
	 * 1 + its index in ab, 0 = empty */
	struct abm *ab;
	size_t nab, abcap;
	uint32_t *hidx;
	size_t hcap;
	size_t compact_at; /* compact when nab reaches it */
	struct dxl_tables_apply_stats st;
	uint64_t last_warn_ms;
};

/* the primary's retention bound per ring: records before (pos, seq) have
 * their effects durable in the store (dxl_tables_applied_pos) */
struct durable_mark {
	uint64_t pos, seq;
	bool valid;
	/* the record retention is held at: since when, last warned */
	uint64_t blocked_seq, blocked_since_ms, warned_ms;
};

/* a record that holds retention this long is reported (a write-back that
 * never finishes: docs/engine.md "When a write-back is durable") */
#define RETAIN_BLOCKED_WARN_MS 10000u

/* a transaction in doubt when this node's promotion gate opened: settled
 * here once its ring's watermark passes it (dxl_table_svc_settle) */
struct doubt {
	uint32_t ring;
	uint64_t txn, ts;
	uint8_t *payload; /* its write set (a copy) */
	uint32_t len;
};

/*
 * an insert a transaction made here at its lock phase (INSERT with an
 * owner): live and locked by it, not committed -- until its write-back
 * (version + 2), its delete, or the release of its lock. Resolution must
 * tell it from a committed record the transaction merely locked (a dead
 * coordinator's never-logged insert is deleted, a locked record only
 * unlocked). In DRAM, as the lock words; an entry is stale (ignored, and
 * dropped by prov_prune) once the slot's lock word is not its owner's or
 * the record is not live at its version any more.
 */
struct prov {
	uint32_t table;
	uint64_t slot, owner, version;
	struct dxl_store_absence was; /* the key's absence the insert replaced */
};

struct dxl_tables {
	const struct dxl_logstore *ls; /* the shard's local log (resolution) */
	uint32_t shard;
	struct dxl_store *st;
	uint32_t n;
	struct tab t[DXL_REPLICA_MAX_TABLES];
	bool registered;
	struct applier ap;
	struct durable_mark dm[DXL_RING_MAX]; /* retention's thread only */
	struct doubt *dq;  /* in doubt at the gate, not yet settled */
	size_t ndq, dqcap;
	uint64_t reclaim_ms;
	struct prov *pv;   /* inserts made at L (the RPC service's mutex) */
	size_t npv, pvcap, pv_prune_at;
	uint32_t retain_warn_ms; /* RETAIN_BLOCKED_WARN_MS unless a test says */
	void (*resolve_hook)(void *arg, uint32_t table, uint64_t slot); /* testing */
	void *resolve_hook_arg;
};

static struct tab *find_tab(const struct dxl_tables *t, uint32_t id)
{
	for (uint32_t i = 0; i < t->n; i++)
		if (t->t[i].sc.id == id)
			return (struct tab *)&t->t[i];
	return NULL;
}

/* ---- the store's hooks: the index follows the key map ------------------------- */

/*
 * Called by the store with the table's mutex held: that mutex serializes
 * the writers of this table's index (index.h asks the caller to), whoever
 * calls the store (RPC thread, log applier).
 */
static int hook_insert(void *arg, uint32_t table, uint64_t key, uint64_t slot,
		       uint32_t inc)
{
	struct dxl_tables *t = arg;
	struct tab *tb = find_tab(t, table);
	if (!tb)
		return dxl_err_set(DXL_E_INTERNAL, "shard %u: the store has table %u, the indexes not",
				   t->shard, table);
	int ret = dxl_index_insert(tb->ix, key, slot, inc);
	if (ret == DXL_E_FULL)
		dxl_err_prefix("shard %u table %u: index full (skewed keys exhausted its overflow buckets)",
			       t->shard, table);
	else if (ret)
		dxl_err_prefix("shard %u table %u: index", t->shard, table);
	return ret;
}

static void hook_remove(void *arg, uint32_t table, uint64_t key, uint64_t slot)
{
	struct dxl_tables *t = arg;
	struct tab *tb = find_tab(t, table);
	struct dxl_index_loc old = {0};
	if (!tb || dxl_index_remove(tb->ix, key, &old) || old.slot != slot)
		DXL_WARN("event=index_out_of_step shard=%u table=%u key=%" PRIu64
			 " slot=%" PRIu64 " msg=\"the index had no entry for the deleted record\"",
			 t->shard, table, key, slot);
}

/* ---- open, rebuild, close ------------------------------------------------------- */

static void schema_text(const struct dxl_table_schema *sc, uint32_t n, char *buf,
			size_t cap)
{
	size_t off = 0;
	buf[0] = 0;
	for (uint32_t i = 0; i < n && off < cap; i++) {
		int k = snprintf(buf + off, cap - off, "%s%u:%u:%" PRIu64, i ? "," : "",
				 sc[i].id, sc[i].value_size, sc[i].capacity);
		if (k < 0)
			break;
		off += (size_t)k;
	}
	if (!n)
		snprintf(buf, cap, "(none)");
}

/* check_schema -- the file holds exactly the configured tables (any order) */
static int check_schema(struct dxl_tables *t, const struct dxl_tables_cfg *cfg,
			const char *path)
{
	struct dxl_table_schema have[DXL_STORE_MAX_TABLES];
	unsigned nh = dxl_store_ntables(t->st);
	bool same = nh == cfg->ntables && dxl_store_shard(t->st) == cfg->shard;
	for (unsigned i = 0; i < nh && i < DXL_STORE_MAX_TABLES; i++)
		dxl_store_table_at(t->st, i, &have[i]);
	for (uint32_t i = 0; same && i < cfg->ntables; i++) {
		struct dxl_table_schema sc;
		same = dxl_store_schema(t->st, cfg->tables[i].id, &sc) == 0 &&
		       sc.value_size == cfg->tables[i].value_size &&
		       sc.capacity == cfg->tables[i].capacity;
	}
	if (same)
		return 0;
	char a[512], b[512];
	schema_text(have, DXL_MIN(nh, (unsigned)DXL_STORE_MAX_TABLES), a, sizeof(a));
	schema_text(cfg->tables, cfg->ntables, b, sizeof(b));
	if (dxl_store_shard(t->st) != cfg->shard)
		return dxl_err_set(DXL_E_CONFIG, "%s holds the tables of shard %u, not of shard %u",
				   path, dxl_store_shard(t->st), cfg->shard);
	return dxl_err_set(DXL_E_CONFIG,
			   "%s holds the tables %s, engine.tables says %s (tables cannot be changed on an existing store)",
			   path, a, b);
}

/*
 * rebuild -- one index entry per live slot. A slot torn by a crash that the
 * store keeps reserved for its key (dxl_store_find names it) is indexed
 * too, from its line 0 (key at 16, incarnation at 24: engine.h's layout),
 * so the index stays in step with the key map when the log's replay
 * rewrites the slot (which calls no hook).
 */
static int rebuild(struct dxl_tables *t)
{
	for (uint32_t i = 0; i < t->n; i++) {
		struct tab *tb = &t->t[i];
		uint64_t live = 0, torn = 0;
		for (uint64_t slot = 0; slot < tb->sc.capacity; slot++) {
			struct dxl_record r;
			int ret = dxl_store_read(t->st, tb->sc.id, slot, &r, NULL, 0);
			if (ret == 0 && r.live) {
				ret = dxl_index_insert(tb->ix, r.key, slot, r.inc);
				live++;
			} else if (ret == DXL_E_AGAIN) {
				const uint8_t *p = dxl_store_slot_ptr(t->st, tb->sc.id, slot);
				uint64_t key = dxl_get_le64(p + 16), at = 0;
				ret = 0;
				if (dxl_store_find(t->st, tb->sc.id, key, &at) == 0 && at == slot) {
					ret = dxl_index_insert(tb->ix, key, slot,
							       dxl_get_le32(p + 24));
					torn++;
				}
			}
			if (ret) {
				dxl_err_prefix("shard %u table %u: rebuilding the index at slot %" PRIu64,
					       t->shard, tb->sc.id, slot);
				return ret;
			}
		}
		DXL_INFO("event=index_rebuilt shard=%u table=%u keys=%" PRIu64 " torn=%" PRIu64,
			 t->shard, tb->sc.id, live + torn, torn);
	}
	return 0;
}

int dxl_tables_open(const struct dxl_tables_cfg *cfg, struct dxl_tables **out)
{
	if (!cfg || !out || !cfg->dir || !cfg->cluster ||
	    (cfg->ntables && !cfg->tables))
		return dxl_err_set(DXL_E_INVAL, "dxl_tables_open: bad argument");
	*out = NULL;
	char path[1024];
	if ((size_t)snprintf(path, sizeof(path), "%s/store-%u.dat", cfg->dir,
			     cfg->shard) >= sizeof(path))
		return dxl_err_set(DXL_E_INVAL, "store path under %s too long", cfg->dir);
	if (!cfg->ntables) {
		if (access(path, F_OK) == 0)
			return dxl_err_set(DXL_E_CONFIG,
					   "%s exists but engine.tables is empty (its records would not be served)",
					   path);
		return 0;
	}
	if (cfg->ntables > DXL_REPLICA_MAX_TABLES)
		return dxl_err_set(DXL_E_INVAL, "%u tables (at most %d per shard)",
				   cfg->ntables, DXL_REPLICA_MAX_TABLES);
	struct dxl_tables *t = calloc(1, sizeof(*t));
	if (!t)
		return dxl_err_set(DXL_E_NOMEM, "tables of shard %u", cfg->shard);
	t->shard = cfg->shard;
	t->retain_warn_ms = RETAIN_BLOCKED_WARN_MS;
	int ret = 0;
	for (uint32_t i = 0; i < cfg->ntables; i++, t->n++) {
		t->t[i].sc = cfg->tables[i];
		struct dxl_index_cfg ic;
		dxl_index_cfg_init(&ic, cfg->tables[i].capacity);
		if ((ret = dxl_index_new(&ic, &t->t[i].ix))) {
			dxl_err_prefix("index of table %u", cfg->tables[i].id);
			goto fail;
		}
	}
	struct dxl_store_cfg sc;
	dxl_store_cfg_init(&sc);
	sc.lock_mode = cfg->lock_mode;
	/* tombstones until no older write of their key can be applied again
	 * (dxl_tables_reclaim) */
	sc.keep_tombstones = true;
	sc.hooks.insert = hook_insert;
	sc.hooks.remove = hook_remove;
	sc.hooks.arg = t;
	struct dxl_region_id id = {.node_id = cfg->node_id, .kind = DXL_REGION_STORE};
	snprintf(id.cluster, sizeof(id.cluster), "%s", cfg->cluster);
	ret = dxl_store_open(path, cfg->durability, &id, &sc, &t->st);
	if (ret == DXL_E_NOENT && cfg->create && access(path, F_OK) != 0) {
		ret = dxl_store_create(path, cfg->durability, &id, cfg->shard,
				       cfg->tables, cfg->ntables, &sc, &t->st);
		if (!ret) {
			char txt[512];
			schema_text(cfg->tables, cfg->ntables, txt, sizeof(txt));
			DXL_INFO("event=store_created shard=%u path=%s tables=%s lock_mode=%s",
				 cfg->shard, path, txt,
				 cfg->lock_mode == DXL_LOCKS_CPU ? "cpu" : "nic");
		}
	}
	if (ret)
		goto fail;
	if ((ret = check_schema(t, cfg, path)) || (ret = rebuild(t)))
		goto fail;
	/* NIC-owned lock words: the node's own changes go through its NIC */
	dxl_store_set_lock_agent(t->st, cfg->lock_agent);
	*out = t;
	return 0;
fail:
	dxl_err_prefix("tables of shard %u", cfg->shard);
	dxl_tables_close(&t);
	return ret;
}

void dxl_tables_close(struct dxl_tables **tp)
{
	if (!tp || !*tp)
		return;
	struct dxl_tables *t = *tp;
	dxl_tables_deregister(t);
	free(t->ap.pos);
	free(t->ap.seq);
	free(t->ap.mpos);
	free(t->ap.mseq);
	free(t->ap.ab);
	for (size_t i = 0; i < t->ndq; i++)
		free(t->dq[i].payload);
	free(t->dq);
	free(t->ap.hidx);
	free(t->pv);
	dxl_store_close(&t->st);
	for (uint32_t i = 0; i < t->n; i++)
		dxl_index_delete(&t->t[i].ix);
	free(t);
	*tp = NULL;
}

/* ---- registration and descriptors ------------------------------------------------ */

int dxl_tables_register(struct dxl_tables *t, struct dxl_fabric *f)
{
	if (t->registered)
		return dxl_err_set(DXL_E_EXIST, "tables of shard %u already registered",
				   t->shard);
	int ret = dxl_store_register(t->st, f);
	for (uint32_t i = 0; !ret && i < t->n; i++)
		ret = dxl_mr_reg(f, dxl_index_mem(t->t[i].ix),
				 dxl_index_mem_len(t->t[i].ix), DXL_MR_REMOTE_READ,
				 &t->t[i].ix_mr);
	if (ret) {
		dxl_err_prefix("registering the tables of shard %u", t->shard);
		for (uint32_t i = 0; i < t->n; i++)
			dxl_mr_dereg(&t->t[i].ix_mr);
		dxl_store_deregister(t->st);
		return ret;
	}
	t->registered = true;
	return 0;
}

void dxl_tables_deregister(struct dxl_tables *t)
{
	if (!t || !t->registered)
		return;
	for (uint32_t i = 0; i < t->n; i++)
		dxl_mr_dereg(&t->t[i].ix_mr);
	dxl_store_deregister(t->st);
	t->registered = false;
}

int dxl_tables_describe(const struct dxl_tables *t, struct dxl_shard_desc *sd)
{
	if (!t->registered)
		return dxl_err_set(DXL_E_STATE, "tables of shard %u are not registered",
				   t->shard);
	sd->ntables = t->n;
	for (uint32_t i = 0; i < t->n; i++) {
		struct dxl_shard_table *st = &sd->tables[i];
		memset(st, 0, sizeof(*st));
		int ret = dxl_store_table_desc(t->st, t->t[i].sc.id, &st->t);
		if (ret)
			return ret;
		dxl_mr_desc(t->t[i].ix_mr, &st->index);
		dxl_index_get_hdr(t->t[i].ix, &st->ihdr);
	}
	return 0;
}

uint32_t dxl_tables_shard(const struct dxl_tables *t)
{
	return t->shard;
}

struct dxl_store *dxl_tables_store(const struct dxl_tables *t)
{
	return t->st;
}

struct dxl_index *dxl_tables_index(const struct dxl_tables *t, uint32_t table)
{
	struct tab *tb = find_tab(t, table);
	return tb ? tb->ix : NULL;
}

/* ---- the backup's applier ---------------------------------------------------------- */

/*
 * A backup applies the decided write sets of its own copy of the shard's
 * log to its store (docs/transactions.md "watermark = decided"): in the
 * log's order (commit timestamp, then writer id), a record only once it is
 * below the resolved timestamp, the smallest watermark of the rings whose
 * writers hold their slots (live_mask); of any other ring only the records
 * below its own watermark (what its gone writer confirmed is final; the
 * rest waits for recovery and does not hold the others back). The
 * tailer's rule (log.h).
 *
 * Positions are kept in DRAM. On activation (this node became a backup,
 * or restarted as one) the window from the heads is replayed first
 * (dxl_recovery_replay: each key's last write only) below the smallest bound,
 * and each ring's position put after what that covered; later rounds go on
 * from there record by record (dxl_store_apply_writeset). Both are
 * idempotent by version, so re-applying what the store already holds is
 * harmless. Retention does not pass the positions (dxl_tables_applied_pos).
 *
 * A payload that is not a write set (no "DXWS" magic: other record kinds,
 * test payloads) is passed over and counted; a write set that fails
 * (unknown table, full table, ...) stops the applier at that record: it is
 * retried every round and the error logged every 10 s.
 */

struct bounds {
	uint64_t resolved;        /* the live rings' smallest watermark */
	uint64_t cap[DXL_RING_MAX]; /* a ring's own bound: UINT64_MAX if
				       live, else its watermark */
};

static void ring_bounds(const struct dxl_logstore *ls, uint64_t live_mask,
			struct bounds *bd)
{
	uint32_t n = dxl_logstore_nrings(ls);
	bd->resolved = UINT64_MAX;
	for (uint32_t r = 0; r < n && r < 64; r++)
		if ((live_mask >> r) & 1)
			bd->resolved = DXL_MIN(bd->resolved, dxl_logstore_watermark(ls, r));
	for (uint32_t r = 0; r < n; r++) {
		bool live = r < 64 && ((live_mask >> r) & 1);
		bd->cap[r] = live ? UINT64_MAX : dxl_logstore_watermark(ls, r);
	}
}

static bool is_writeset(const struct dxl_rec *rec)
{
	return rec->payload_len >= DXL_WS_HDR_SIZE &&
	       dxl_get_le32(rec->payload) == DXL_WS_MAGIC;
}

static int ap_warn(struct dxl_tables *t, int ret, const char *what)
{
	uint64_t now = dxl_now_ms();
	if (now - t->ap.last_warn_ms >= 10000) {
		t->ap.last_warn_ms = now;
		DXL_WARN("event=apply_stuck shard=%u what=\"%s\" code=%s msg=\"%s\"", t->shard,
			 what, dxl_errname(ret), dxl_errmsg());
	}
	return ret;
}

/* activate -- replay the window below one bound (the resolved timestamp,
 * or lower: the watermark of a gone writer's ring that holds unconfirmed
 * records), then put every ring's position after the records it covered */
static int ap_activate(struct dxl_tables *t, const struct dxl_logstore *ls,
		       const struct bounds *bd)
{
	uint32_t n = dxl_logstore_nrings(ls);
	uint64_t bound = bd->resolved;
	for (uint32_t r = 0; r < n; r++) {
		struct dxl_ring_iter it;
		struct dxl_rec rec;
		uint64_t at;
		if (bd->cap[r] >= bound || dxl_ring_iter_init(&it, ls, r))
			continue;
		while (dxl_ring_iter_next(&it, &rec, &at) == 1)
			if (rec.commit_ts >= bd->cap[r]) {
				bound = bd->cap[r];
				break;
			}
	}
	if (t->ap.nrings != n) {
		free(t->ap.pos);
		free(t->ap.seq);
		free(t->ap.mpos);
		free(t->ap.mseq);
		t->ap.pos = calloc(n, sizeof(uint64_t));
		t->ap.seq = calloc(n, sizeof(uint64_t));
		t->ap.mpos = calloc(n, sizeof(uint64_t));
		t->ap.mseq = calloc(n, sizeof(uint64_t));
		t->ap.nrings = t->ap.pos && t->ap.seq && t->ap.mpos && t->ap.mseq ? n : 0;
		if (!t->ap.nrings)
			return dxl_err_set(DXL_E_NOMEM, "applier of shard %u", t->shard);
	}
	struct dxl_replay_stats rs;
	int ret = dxl_recovery_replay(t->st, ls, bound, NULL, NULL, &rs);
	if (ret == DXL_E_CORRUPT) {
		/* the window holds records that are not write sets (or a bad
		 * one): the record-by-record path passes over them */
		DXL_INFO("event=apply_no_replay shard=%u msg=\"%s\"", t->shard, dxl_errmsg());
		memset(&rs, 0, sizeof(rs));
		bound = 0;
	} else if (ret < 0) {
		return ap_warn(t, ret, "replay at activation");
	}
	for (uint32_t r = 0; r < n; r++) {
		struct dxl_ring_iter it;
		if ((ret = dxl_ring_iter_init(&it, ls, r)))
			return ap_warn(t, ret, "ring head");
		t->ap.pos[r] = it.pos;
		t->ap.seq[r] = it.seq;
		t->ap.mpos[r] = it.pos; /* markers: from the head */
		t->ap.mseq[r] = it.seq;
		struct dxl_rec rec;
		uint64_t at;
		while (dxl_ring_iter_next(&it, &rec, &at) == 1 && rec.commit_ts < bound) {
			t->ap.pos[r] = it.pos;
			t->ap.seq[r] = it.seq;
		}
	}
	t->ap.active = true;
	t->ap.nab = 0;
	if (t->ap.hidx)
		memset(t->ap.hidx, 0, t->ap.hcap * sizeof(*t->ap.hidx));
	t->ap.st.records += rs.records;
	t->ap.st.applied += rs.applied;
	t->ap.st.last_ts = DXL_MAX(t->ap.st.last_ts, rs.last_ts);
	DXL_INFO("event=apply_started shard=%u replayed=%" PRIu64 " applied=%" PRIu64
		 " superseded=%" PRIu64 " below_ts=%" PRIu64,
		 t->shard, rs.records, rs.applied, rs.superseded, bound);
	return 0;
}

static size_t ab_hash(uint32_t writer, uint64_t txn, size_t cap)
{
	uint64_t h = (txn ^ ((uint64_t)writer << 40)) * 0x9e3779b97f4a7c15ull;
	return (size_t)(h >> 17) & (cap - 1);
}

/* rebuild the hash index over ab[0..nab) with cap slots */
static int ab_reindex(struct applier *ap, size_t cap)
{
	if (cap != ap->hcap) {
		uint32_t *n = calloc(cap, sizeof(*n));
		if (!n)
			return dxl_err_set(DXL_E_NOMEM, "abort markers: index of %zu slots", cap);
		free(ap->hidx);
		ap->hidx = n;
		ap->hcap = cap;
	} else {
		memset(ap->hidx, 0, cap * sizeof(*ap->hidx));
	}
	for (size_t i = 0; i < ap->nab; i++) {
		size_t h = ab_hash(ap->ab[i].writer, ap->ab[i].txn, cap);
		while (ap->hidx[h])
			h = (h + 1) & (cap - 1);
		ap->hidx[h] = (uint32_t)(i + 1);
	}
	return 0;
}

/* forget the markers the applier passed (their records were passed) */
static void ab_compact(struct applier *ap)
{
	size_t k = 0;
	for (size_t i = 0; i < ap->nab; i++) {
		const struct abm *m = &ap->ab[i];
		if (m->ring < ap->nrings && m->seq < ap->seq[m->ring])
			continue;
		ap->ab[k++] = *m;
	}
	ap->nab = k;
}

static int ab_add(struct applier *ap, const struct abm *m)
{
	if (ap->nab == ap->abcap || ap->nab + 1 > ap->hcap / 2) {
		if (ap->nab >= ap->compact_at) {
			ab_compact(ap);
			/* amortized: the next compaction after as many again */
			ap->compact_at = DXL_MAX((size_t)4096, 2 * ap->nab);
		}
		if (ap->nab == ap->abcap) {
			size_t nc = ap->abcap ? 2 * ap->abcap : 32;
			struct abm *nb = realloc(ap->ab, nc * sizeof(*nb));
			if (!nb)
				return dxl_err_set(DXL_E_NOMEM, "abort markers: %zu held", ap->nab);
			ap->ab = nb;
			ap->abcap = nc;
		}
		size_t cap = ap->hcap ? ap->hcap : 64;
		while (ap->nab + 1 > cap / 2)
			cap *= 2;
		int ret = ab_reindex(ap, cap);
		if (ret)
			return ret;
	}
	if (ap->nab >= UINT32_MAX - 1)
		return dxl_err_set(DXL_E_FULL, "abort markers: %zu held", ap->nab);
	ap->ab[ap->nab] = *m;
	size_t h = ab_hash(m->writer, m->txn, ap->hcap);
	while (ap->hidx[h])
		h = (h + 1) & (ap->hcap - 1);
	ap->hidx[h] = (uint32_t)(ap->nab + 1);
	ap->nab++;
	return 0;
}

/* scan_markers -- the abort markers appended since the last scan (a
 * record's marker follows it in its ring, and it is there before the
 * watermark passes the record: the coordinator holds it until then) */
static int scan_markers(struct dxl_tables *t, const struct dxl_logstore *ls)
{
	if (!t->ap.compact_at)
		t->ap.compact_at = 4096;
	for (uint32_t r = 0; r < t->ap.nrings; r++) {
		struct dxl_ring_iter it;
		struct dxl_rec rec;
		uint64_t at;
		if (dxl_ring_iter_init_at(&it, ls, r, t->ap.mpos[r], t->ap.mseq[r]))
			continue;
		while (dxl_ring_iter_next(&it, &rec, &at) == 1) {
			uint64_t txn;
			if (dxl_abort_marker_decode(rec.payload, rec.payload_len, &txn) == 1) {
				struct abm m = {.ring = r, .writer = rec.writer, .txn = txn,
						.seq = rec.seq};
				int ret = ab_add(&t->ap, &m);
				if (ret)
					return ret; /* not scanned: the next call tries again */
			}
			t->ap.mpos[r] = it.pos;
			t->ap.mseq[r] = it.seq;
		}
	}
	t->ap.st.markers = t->ap.nab;
	return 0;
}

static bool ap_aborted(const struct dxl_tables *t, const struct dxl_rec *rec)
{
	const struct applier *ap = &t->ap;
	if (!ap->nab)
		return false;
	size_t h = ab_hash(rec->writer, rec->txn_id, ap->hcap);
	for (uint32_t i; (i = ap->hidx[h]); h = (h + 1) & (ap->hcap - 1))
		if (ap->ab[i - 1].writer == rec->writer && ap->ab[i - 1].txn == rec->txn_id)
			return true;
	return false;
}

int dxl_tables_apply(struct dxl_tables *t, const struct dxl_logstore *ls,
		     uint64_t live_mask, uint32_t max_records)
{
	struct bounds *bd = malloc(sizeof(*bd));
	if (!bd)
		return dxl_err_set(DXL_E_NOMEM, "applier of shard %u", t->shard);
	ring_bounds(ls, live_mask, bd);
	t->ap.st.resolved = bd->resolved;
	int ret = 0;
	if (!t->ap.active && (ret = ap_activate(t, ls, bd))) {
		free(bd);
		return ret;
	}
	if ((ret = scan_markers(t, ls))) {
		free(bd);
		return ap_warn(t, ret, "abort markers");
	}
	uint32_t n = t->ap.nrings, done = 0;
	/* the merge: each ring's next record, the smallest (ts, writer) first */
	struct cand {
		bool have;
		struct dxl_rec rec;
		uint64_t npos, nseq;
	} *c = calloc(n, sizeof(*c));
	if (!c) {
		free(bd);
		return dxl_err_set(DXL_E_NOMEM, "applier of shard %u", t->shard);
	}
	for (uint32_t r = 0; r < n; r++) {
		struct dxl_ring_iter it;
		uint64_t at;
		if (dxl_ring_iter_init_at(&it, ls, r, t->ap.pos[r], t->ap.seq[r]) == 0 &&
		    dxl_ring_iter_next(&it, &c[r].rec, &at) == 1) {
			c[r].have = true;
			c[r].npos = it.pos;
			c[r].nseq = it.seq;
		}
	}
	while (done < max_records) {
		int best = -1;
		for (uint32_t r = 0; r < n; r++) {
			if (!c[r].have || c[r].rec.commit_ts >= bd->cap[r])
				continue; /* a gone writer's unconfirmed records */
			if (best < 0 || c[r].rec.commit_ts < c[best].rec.commit_ts ||
			    (c[r].rec.commit_ts == c[best].rec.commit_ts &&
			     c[r].rec.writer < c[best].rec.writer))
				best = (int)r;
		}
		/* the next record in the log's order must be resolved */
		if (best < 0 || c[best].rec.commit_ts >= bd->resolved)
			break;
		struct dxl_rec *rec = &c[best].rec;
		if (!is_writeset(rec)) {
			t->ap.st.foreign++;
		} else if (ap_aborted(t, rec)) {
			t->ap.st.aborted++;
		} else {
			struct dxl_replay_stats rs = {0};
			ret = dxl_store_apply_writeset(t->st, rec->payload, rec->payload_len,
						       rec->commit_ts, NULL, NULL, &rs);
			if (ret == DXL_E_CORRUPT) {
				/* a bad write set changes nothing and never will */
				DXL_WARN("event=apply_bad_writeset shard=%u ring=%d seq=%" PRIu64
					 " msg=\"%s\"", t->shard, best, rec->seq, dxl_errmsg());
				t->ap.st.corrupt++;
				ret = 0;
			} else if (ret < 0) {
				dxl_err_prefix("ring %d record seq %" PRIu64 " (ts %" PRIu64 ")",
					       best, rec->seq, rec->commit_ts);
				ap_warn(t, ret, "apply");
				break;
			} else {
				t->ap.st.entries += rs.entries;
				t->ap.st.applied += rs.applied;
				t->ap.st.skipped += rs.skipped;
			}
		}
		t->ap.st.records++;
		t->ap.st.last_ts = rec->commit_ts;
		t->ap.pos[best] = c[best].npos;
		t->ap.seq[best] = c[best].nseq;
		done++;
		struct dxl_ring_iter it;
		uint64_t at;
		c[best].have = dxl_ring_iter_init_at(&it, ls, (uint32_t)best, t->ap.pos[best],
						     t->ap.seq[best]) == 0 &&
			       dxl_ring_iter_next(&it, &c[best].rec, &at) == 1;
		if (c[best].have) {
			c[best].npos = it.pos;
			c[best].nseq = it.seq;
		}
	}
	free(c);
	free(bd);
	return ret < 0 ? ret : (int)done;
}

static void doubt_clear(struct dxl_tables *t)
{
	for (size_t i = 0; i < t->ndq; i++)
		free(t->dq[i].payload);
	t->ndq = 0;
}

static int doubt_add(struct dxl_tables *t, uint32_t ring, const struct dxl_rec *rec)
{
	if (t->ndq == t->dqcap) {
		size_t nc = t->dqcap ? 2 * t->dqcap : 16;
		struct doubt *n = realloc(t->dq, nc * sizeof(*n));
		if (!n)
			return dxl_err_set(DXL_E_NOMEM, "shard %u: transactions in doubt", t->shard);
		t->dq = n;
		t->dqcap = nc;
	}
	uint8_t *p = malloc(rec->payload_len);
	if (!p)
		return dxl_err_set(DXL_E_NOMEM, "shard %u: transactions in doubt", t->shard);
	memcpy(p, rec->payload, rec->payload_len);
	t->dq[t->ndq++] = (struct doubt){.ring = ring, .txn = rec->txn_id, .ts = rec->commit_ts,
					 .payload = p, .len = rec->payload_len};
	return 0;
}

int dxl_tables_clear_locks(struct dxl_tables *t)
{
	int n = 0;
	for (uint32_t i = 0; i < t->n; i++) {
		uint32_t table = t->t[i].sc.id;
		for (uint64_t slot = 0; slot < t->t[i].sc.capacity; slot++) {
			uint64_t w = dxl_store_lock_word(t->st, table, slot);
			if (w && dxl_store_unlock_owner(t->st, table, slot, w) == 0)
				n++;
		}
	}
	if (n)
		DXL_INFO("event=stale_locks_cleared shard=%u locks=%d", t->shard, n);
	return n;
}

static int prov_reserve(struct dxl_tables *t);

int dxl_tables_recover_locks(struct dxl_tables *t, const struct dxl_logstore *ls,
			     uint32_t *nlocks)
{
	if (!t->ap.active)
		return dxl_err_set(DXL_E_STATE, "shard %u: the applier is not active", t->shard);
	int ret = scan_markers(t, ls);
	if (ret)
		return ret;
	doubt_clear(t);
	uint32_t ndoubt = 0, nl = 0;
	struct dxl_ws_entry e[64];
	for (uint32_t r = 0; r < t->ap.nrings; r++) {
		uint64_t wm = dxl_logstore_watermark(ls, r);
		struct dxl_ring_iter it;
		struct dxl_rec rec;
		uint64_t at;
		if (dxl_ring_iter_init_at(&it, ls, r, t->ap.pos[r], t->ap.seq[r]))
			continue;
		while (dxl_ring_iter_next(&it, &rec, &at) == 1) {
			if (rec.commit_ts < wm || !is_writeset(&rec) || ap_aborted(t, &rec))
				continue;
			int n = dxl_writeset_decode(rec.payload, rec.payload_len, e, 64);
			if (n < 0)
				continue;
			ndoubt++;
			for (int k = 0; k < n && k < 64; k++) {
				uint64_t slot;
				if (dxl_store_find(t->st, e[k].table, e[k].key, &slot) == 0) {
					struct dxl_record cur;
					if (e[k].op == DXL_WS_INSERT &&
					    (dxl_store_read(t->st, e[k].table, slot, &cur, NULL, 0) ||
					     (cur.version != e[k].version &&
					      cur.version + 2 != e[k].version))) {
						/* present, and not this insert's record (an
						 * earlier gate of this node made it at
						 * e.version, its lock phase here at e.version
						 * - 2): another transaction's. Locked for this
						 * one, its abort would delete a committed
						 * record (issue 20 review) */
						DXL_INFO("event=txn_in_doubt_insert_present shard=%u txn=0x%" PRIx64
							 " table=%u key=%" PRIu64 " version=%" PRIu64
							 " present=%" PRIu64 " msg=\"another's record: not locked\"",
							 t->shard, rec.txn_id, e[k].table, e[k].key,
							 e[k].version, cur.version);
						continue;
					}
					int r2 = dxl_store_lock_set(t->st, e[k].table, slot,
								    rec.txn_id);
					if (r2 && r2 != DXL_E_NOENT)
						return r2; /* NIC-owned words and no fabric path now */
					if (!r2)
						nl++;
					continue;
				}
				if (e[k].op != DXL_WS_INSERT)
					continue; /* absent: deleted since (a tombstone) */
				/* an insert in doubt: the record as logged, held
				 * for its transaction (a commit finds it, an abort
				 * deletes it; issue 20) */
				struct dxl_store_absence was;
				uint64_t islot = 0;
				int x = dxl_store_absence(t->st, e[k].table, e[k].key, &was);
				if (!x)
					x = prov_reserve(t);
				if (!x)
					x = dxl_store_insert_at(t->st, e[k].table, e[k].key,
								e[k].version, rec.commit_ts,
								e[k].value, e[k].len, rec.txn_id,
								&islot);
				if (x == 1) {
					/* an abort gives the key back this absence,
					 * as the backups have it (undo_insert) */
					t->pv[t->npv++] = (struct prov){.table = e[k].table,
									.slot = islot,
									.owner = rec.txn_id,
									.version = e[k].version,
									.was = was};
					nl++;
				}
				else if (x < 0)
					DXL_WARN("event=txn_in_doubt_insert_failed shard=%u txn=0x%" PRIx64
						 " table=%u key=%" PRIu64 " msg=\"%s\"",
						 t->shard, rec.txn_id, e[k].table, e[k].key, dxl_errmsg());
			}
			if ((ret = doubt_add(t, r, &rec)))
				return ret;
			DXL_INFO("event=txn_in_doubt shard=%u ring=%u txn=0x%" PRIx64 " ts=%" PRIu64
				 " entries=%d",
				 t->shard, r, rec.txn_id, rec.commit_ts, n);
		}
	}
	if (nlocks)
		*nlocks = nl;
	return (int)ndoubt;
}

void dxl_tables_reclaim(struct dxl_tables *t, const struct dxl_logstore *ls)
{
	uint64_t now = dxl_now_ms();
	if (now - t->reclaim_ms < 100)
		return;
	t->reclaim_ms = now;
	/* no write older than the oldest record the log still holds can be
	 * applied again (replay or applier): a delete's tombstone below it
	 * protects nothing. Commit timestamps respect conflict order, so
	 * every earlier write of a deleted key has a smaller timestamp. */
	uint64_t bound = UINT64_MAX;
	for (uint32_t r = 0; r < dxl_logstore_nrings(ls); r++) {
		struct dxl_ring_iter it;
		struct dxl_rec rec;
		uint64_t at;
		if (dxl_ring_iter_init(&it, ls, r) == 0 && dxl_ring_iter_next(&it, &rec, &at) == 1)
			bound = DXL_MIN(bound, rec.commit_ts);
	}
	dxl_store_set_reclaim_ts(t->st, bound);
}

void dxl_tables_apply_stop(struct dxl_tables *t)
{
	if (t && t->ap.active) {
		t->ap.active = false;
		DXL_INFO("event=apply_stopped shard=%u records=%" PRIu64 " applied=%" PRIu64,
			 t->shard, t->ap.st.records, t->ap.st.applied);
	}
}

bool dxl_tables_applying(const struct dxl_tables *t)
{
	return t && t->ap.active;
}

static int collect_aborts(const struct dxl_logstore *ls, uint64_t txn, bool *aborted,
			  bool *present);

/*
 * entry_durable -- is the effect of a committed write-set entry of
 * transaction txn durable in the store? The key's lock word is not txn's
 * (the transaction's write-back and unlock are done: a write-back's flush
 * precedes its unlock, dxl_record_wb_unlock_chain; RPC write-backs and
 * deletes are persisted by the CPU before the RPC unlocks; inserts before
 * the record is even logged), and the store holds the key at the entry's
 * version or later, or no longer holds it (deleted by this entry or a later
 * one, persisted before the key left the map). A torn or half-written
 * record is not durable yet.
 */
static bool entry_durable(struct dxl_store *st, uint64_t txn,
			  const struct dxl_ws_entry *e)
{
	uint64_t slot;
	if (dxl_store_find(st, e->table, e->key, &slot))
		return true; /* gone: deleted (a CPU write, persisted) */
	if (dxl_store_lock_word(st, e->table, slot) == txn)
		return false; /* still its transaction's: write-back not done */
	struct dxl_record r;
	if (dxl_store_read(st, e->table, slot, &r, NULL, 0))
		return false; /* being written, torn, or reused meanwhile */
	if (r.key != e->key)
		return false; /* the slot moved on meanwhile: look again later */
	return r.version >= e->version;
}

/* rec_durable -- are all of rec's effects on this store durable? If not
 * and why is not NULL: the first entry that is not, in words */
static bool rec_durable(struct dxl_tables *t, const struct dxl_rec *rec, char *why,
			size_t cap)
{
	if (!is_writeset(rec))
		return true; /* no effect on the tables */
	struct dxl_ws_entry e[64], *v = e;
	int n = dxl_writeset_decode(rec->payload, rec->payload_len, e, 64);
	if (n < 0)
		return true; /* nothing any replay could apply either */
	if (n > 64) {
		v = malloc((size_t)n * sizeof(*v));
		if (!v || dxl_writeset_decode(rec->payload, rec->payload_len, v,
					      (uint32_t)n) != n) {
			free(v);
			return false;
		}
	}
	bool ok = true;
	int k = 0;
	for (; k < n && ok; k++)
		ok = find_tab(t, v[k].table) == NULL || /* not hosted: not ours */
		     entry_durable(t->st, rec->txn_id, &v[k]);
	if (!ok && why) {
		const struct dxl_ws_entry *x = &v[k - 1];
		uint64_t slot = 0;
		struct dxl_record r = {0};
		bool have = dxl_store_find(t->st, x->table, x->key, &slot) == 0;
		int rr = have ? dxl_store_read(t->st, x->table, slot, &r, NULL, 0) : 0;
		snprintf(why, cap, "table %u key %" PRIu64 " (slot %" PRIu64 "): lock word 0x%" PRIx64
			 ", record %s version %" PRIu64 ", the entry's %" PRIu64,
			 x->table, x->key, slot,
			 have ? dxl_store_lock_word(t->st, x->table, slot) : 0,
			 rr ? dxl_errname(rr) : "at", r.version, x->version);
	}
	if (v != e)
		free(v);
	if (!ok && t->ls) {
		/* an aborted transaction has no effect to wait for */
		bool aborted, present;
		collect_aborts(t->ls, rec->txn_id, &aborted, &present);
		ok = aborted;
	}
	return ok;
}

/*
 * durable_pos -- on the primary (the applier is off: coordinators write its
 * store): the position of the first record of ring below its watermark
 * whose effects are not durable in the store yet. Retention must not pass
 * it (docs/engine.md: "a ring's head may pass a record only once its
 * effects are persistent in the store"); after a power failure nothing
 * would replay it. Records at or past the watermark are not looked at
 * (retention stops there anyway). The position reached is remembered, as
 * durability never goes back.
 */
static uint64_t durable_pos(struct dxl_tables *t, uint32_t ring)
{
	const struct dxl_logstore *ls = t->ls;
	if (!ls || ring >= dxl_logstore_nrings(ls) || ring >= DXL_RING_MAX)
		return 0; /* cannot tell: keep everything */
	struct durable_mark *m = &t->dm[ring];
	struct dxl_ring_iter it;
	struct dxl_ring_head h;
	if (dxl_logstore_head(ls, ring, &h))
		return 0;
	if (!m->valid || m->pos < h.pos) {
		if (dxl_ring_iter_init(&it, ls, ring))
			return 0;
	} else if (dxl_ring_iter_init_at(&it, ls, ring, m->pos, m->seq)) {
		m->valid = false;
		return 0;
	}
	uint64_t wm = dxl_logstore_watermark(ls, ring);
	struct dxl_rec rec;
	uint64_t at;
	uint64_t pos = it.pos, seq = it.seq;
	bool blocked = false;
	char why[256] = "";
	while (dxl_ring_iter_next(&it, &rec, &at) == 1) {
		if (rec.commit_ts >= wm)
			break;
		if (!rec_durable(t, &rec, why, sizeof(why))) {
			blocked = true;
			break;
		}
		pos = it.pos;
		seq = it.seq;
	}
	m->pos = pos;
	m->seq = seq;
	m->valid = true;
	/* a decided record whose effects never become durable holds the
	 * ring's retention (and, once the ring fills, its appends): say so */
	uint64_t now = dxl_now_ms();
	if (!blocked) {
		m->blocked_since_ms = 0;
	} else if (!m->blocked_since_ms || m->blocked_seq != rec.seq) {
		m->blocked_seq = rec.seq;
		m->blocked_since_ms = now;
	} else if (now - m->blocked_since_ms >= t->retain_warn_ms &&
		   (!m->warned_ms || now - m->warned_ms >= RETAIN_BLOCKED_WARN_MS)) {
		m->warned_ms = now;
		DXL_WARN("event=retention_blocked shard=%u ring=%u seq=%" PRIu64 " txn=0x%" PRIx64
			 " ts=%" PRIu64 " pos=%" PRIu64 " since_ms=%" PRIu64
			 " msg=\"retention waits for this committed record's write-back to be durable: %s\"",
			 t->shard, ring, rec.seq, rec.txn_id, rec.commit_ts, pos,
			 now - m->blocked_since_ms, why);
	}
	return pos;
}

uint64_t dxl_tables_applied_pos(struct dxl_tables *t, uint32_t ring)
{
	if (!t)
		return UINT64_MAX; /* no tables: nothing in the log has effects */
	if (!t->ap.active)
		return durable_pos(t, ring);
	for (uint32_t r = 0; r < DXL_RING_MAX; r++)
		t->dm[r].valid = false; /* the applier writes the store now */
	if (ring >= t->ap.nrings)
		return UINT64_MAX;
	return t->ap.pos[ring];
}

void dxl_tables_apply_stats(const struct dxl_tables *t,
			    struct dxl_tables_apply_stats *out)
{
	*out = t->ap.st;
}

/* ---- the table RPC service -------------------------------------------------------- */

struct dxl_table_svc {
	struct dxl_fabric *f;
	uint32_t node_id;
	pthread_t th;
	bool th_started;
	/* mu guards everything below; a handler holds it while it runs, so
	 * set_config/set_serving wait for the request being served */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool started;     /* the thread finished its set-up (start_ret) */
	int start_ret;
	char start_msg[512];
	struct dxl_sched *sched;
	struct dxl_cluster_config conf; /* the node's applied configuration */
	bool serving;
	/* the lease: fn(arg) = its end in dxl_boot_ns() time, 0 = none */
	uint64_t (*lease_fn)(void *arg);
	void *lease_arg;
	uint32_t n;
	struct dxl_tables *t[DXL_REPLICA_MAX_SHARDS];
	bool gated[DXL_REPLICA_MAX_SHARDS]; /* by index in t[] */
	uint64_t served, refused;
};

static struct dxl_tables *svc_tables(const struct dxl_table_svc *svc, uint32_t shard)
{
	for (uint32_t i = 0; i < svc->n; i++)
		if (svc->t[i] && svc->t[i]->shard == shard)
			return svc->t[i];
	return NULL;
}

/* read_fields -- the header of the record at slot into rep (no value) */
static int read_fields(struct dxl_store *st, uint32_t table, uint64_t slot,
		       struct dxl_table_rep *rep)
{
	int ret = dxl_store_read(st, table, slot, &rep->rec, NULL, 0);
	if (!ret)
		rep->slot = slot;
	return ret;
}

void dxl_tables_set_log(struct dxl_tables *t, const struct dxl_logstore *ls)
{
	t->ls = ls;
}

/* the markers of every ring, from the heads (resolution is rare) */
static int collect_aborts(const struct dxl_logstore *ls, uint64_t txn, bool *aborted,
			  bool *present)
{
	*aborted = *present = false;
	for (uint32_t r = 0; r < dxl_logstore_nrings(ls); r++) {
		struct dxl_ring_iter it;
		struct dxl_rec rec;
		uint64_t at, m;
		if (dxl_ring_iter_init(&it, ls, r))
			continue;
		while (dxl_ring_iter_next(&it, &rec, &at) == 1) {
			if (rec.txn_id != txn)
				continue;
			if (dxl_abort_marker_decode(rec.payload, rec.payload_len, &m) == 1)
				*aborted = true;
			else if (is_writeset(&rec))
				*present = true;
		}
	}
	return 0;
}

/* the txn ids every abort marker of the log names: one pass over the rings
 * for a whole request (the caller frees *ids) */
static int log_aborted(const struct dxl_logstore *ls, uint64_t **ids, size_t *n)
{
	size_t cap = 0;
	*ids = NULL;
	*n = 0;
	for (uint32_t r = 0; r < dxl_logstore_nrings(ls); r++) {
		struct dxl_ring_iter it;
		struct dxl_rec rec;
		uint64_t at, m;
		if (dxl_ring_iter_init(&it, ls, r))
			continue;
		while (dxl_ring_iter_next(&it, &rec, &at) == 1) {
			if (dxl_abort_marker_decode(rec.payload, rec.payload_len, &m) != 1)
				continue;
			if (*n == cap) {
				cap = cap ? 2 * cap : 16;
				uint64_t *x = realloc(*ids, cap * sizeof(*x));
				if (!x) {
					free(*ids);
					*ids = NULL;
					return dxl_err_set(DXL_E_NOMEM, "abort markers");
				}
				*ids = x;
			}
			(*ids)[(*n)++] = m;
		}
	}
	return 0;
}

/* ---- inserts made at L (struct prov) ----------------------------------------- */

static bool prov_live(struct dxl_tables *t, const struct prov *p)
{
	struct dxl_record cur;
	return dxl_store_lock_word(t->st, p->table, p->slot) == p->owner &&
	       dxl_store_read(t->st, p->table, p->slot, &cur, NULL, 0) == 0 && cur.live &&
	       cur.version == p->version;
}

/* room for one more entry (stale ones dropped now and then) */
static int prov_reserve(struct dxl_tables *t)
{
	if (t->npv >= t->pv_prune_at) {
		size_t k = 0;
		for (size_t i = 0; i < t->npv; i++)
			if (prov_live(t, &t->pv[i]))
				t->pv[k++] = t->pv[i];
		t->npv = k;
		t->pv_prune_at = DXL_MAX((size_t)256, 2 * k);
	}
	if (t->npv == t->pvcap) {
		size_t nc = t->pvcap ? 2 * t->pvcap : 64;
		struct prov *n = realloc(t->pv, nc * sizeof(*n));
		if (!n)
			return dxl_err_set(DXL_E_NOMEM, "shard %u: inserts in progress", t->shard);
		t->pv = n;
		t->pvcap = nc;
	}
	return 0;
}

/* is the record at slot an insert owner made here at its lock phase,
 * still uncommitted? */
static bool prov_is(struct dxl_tables *t, uint32_t table, uint64_t slot, uint64_t owner)
{
	for (size_t i = 0; i < t->npv; i++) {
		const struct prov *p = &t->pv[i];
		if (p->table == table && p->slot == slot && p->owner == owner && prov_live(t, p))
			return true;
	}
	return false;
}

/*
 * del_keep_ts -- delete the live record at slot (its lock word is owner's)
 * keeping its commit timestamp in the tombstone: a delete that undoes an
 * insert (an abort) is no new state of the key -- the absence it leaves is
 * the one the insert replaced, whose timestamp the insert carries (INSERT
 * with an owner: the absence's), or later (a promotion gate's record: its
 * transaction's). With timestamp 0 the next reader of the absence could
 * commit below the delete it read (issue 20 review).
 */
static int del_keep_ts(struct dxl_store *st, uint32_t table, uint64_t slot, uint64_t owner)
{
	struct dxl_record cur;
	int ret = dxl_store_read(st, table, slot, &cur, NULL, 0);
	if (ret)
		return ret;
	return dxl_store_delete(st, table, slot, owner, cur.ts, NULL);
}

/*
 * undo_insert -- remove the record at slot that owner inserted and never
 * committed. One this node made at owner's lock phase (struct prov) gives
 * the key back the absence it replaced, exactly -- the tombstone's version
 * and timestamp, or none (dxl_store_undo_insert): the backups never saw
 * the insert (its write set was never applied there), so a new tombstone
 * here -- another version, or one they lack -- would part the replicas
 * (recovery2 compares tombstones), and its version, above what another
 * primary may give the key next, would make this node pass over that
 * insert as older. Any other (a promotion gate's record, made from the
 * logged write set): del_keep_ts.
 */
static int undo_insert(struct dxl_tables *t, uint32_t table, uint64_t slot, uint64_t owner)
{
	for (size_t i = 0; i < t->npv; i++) {
		const struct prov *p = &t->pv[i];
		if (p->table == table && p->slot == slot && p->owner == owner && prov_live(t, p))
			return dxl_store_undo_insert(t->st, table, slot, owner, &p->was);
	}
	return del_keep_ts(t->st, table, slot, owner);
}

static bool id_in(const uint64_t *ids, size_t n, uint64_t id)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/*
 * unlock_coord_forward -- before the locks of a gone coordinator are
 * released: a transaction of it whose lock is still held here and whose
 * write set is in this shard's log BELOW its ring's watermark was decided
 * -- committed, since no abort marker cancels it -- but its write-back
 * may not have happened: apply it (idempotent by version). A write set
 * above the watermark is in doubt: its locks stay for the ring's resolver.
 * Returns the write sets applied.
 */
static int unlock_coord_forward(struct dxl_tables *t, uint32_t coord)
{
	uint64_t *ab_ids;
	size_t nab;
	int applied = log_aborted(t->ls, &ab_ids, &nab);
	if (applied < 0)
		return applied;
	for (uint32_t r = 0; r < dxl_logstore_nrings(t->ls); r++) {
		uint64_t wm = dxl_logstore_watermark(t->ls, r);
		struct dxl_ring_iter it;
		struct dxl_rec rec;
		uint64_t at;
		if (dxl_ring_iter_init(&it, t->ls, r))
			continue;
		while (dxl_ring_iter_next(&it, &rec, &at) == 1) {
			if ((rec.txn_id >> 48) != coord || !is_writeset(&rec))
				continue;
			struct dxl_ws_entry e[64];
			int n = dxl_writeset_decode(rec.payload, rec.payload_len, e, 64);
			bool held = false;
			for (int k = 0; k < n && k < 64 && !held; k++) {
				uint64_t slot;
				held = dxl_store_find(t->st, e[k].table, e[k].key, &slot) == 0 &&
				       dxl_store_lock_word(t->st, e[k].table, slot) == rec.txn_id;
			}
			if (!held)
				continue;
			bool ab = id_in(ab_ids, nab, rec.txn_id);
			if (ab || rec.commit_ts >= wm) {
				if (!ab) { /* in doubt: keep every lock of it */
					free(ab_ids);
					return dxl_err_set(DXL_E_BUSY,
							   "shard %u: transaction 0x%" PRIx64 " of coordinator %u is in doubt (ring %u): resolve its ring first",
							   t->shard, rec.txn_id, coord, r);
				}
				continue;
			}
			int ret = dxl_store_apply_writeset(t->st, rec.payload, rec.payload_len,
							   rec.commit_ts, NULL, NULL, NULL);
			if (ret < 0) {
				free(ab_ids);
				return ret;
			}
			applied++;
			DXL_INFO("event=txn_rolled_forward shard=%u ring=%u txn=0x%" PRIx64 " ts=%" PRIu64,
				 t->shard, r, rec.txn_id, rec.commit_ts);
		}
	}
	free(ab_ids);
	return applied;
}

/*
 * unlock_coord_inserts -- before the locks of a gone coordinator are
 * released: a record it inserted at L (INSERT with its transaction as the
 * owner: live, locked; struct prov) for a transaction that never reached
 * this shard's log was never committed -- releasing its lock alone would
 * publish it. Such records are deleted. (A decided insert has its write
 * set in the log: unlock_coord_forward kept it; one in doubt made
 * unlock_coord_forward refuse.) Returns the records deleted.
 */
static int unlock_coord_inserts(struct dxl_tables *t, uint32_t coord)
{
	uint64_t *logged = NULL;
	size_t nlog = 0, cap = 0;
	for (uint32_t r = 0; r < dxl_logstore_nrings(t->ls); r++) {
		struct dxl_ring_iter it;
		struct dxl_rec rec;
		uint64_t at;
		if (dxl_ring_iter_init(&it, t->ls, r))
			continue;
		while (dxl_ring_iter_next(&it, &rec, &at) == 1) {
			if ((rec.txn_id >> 48) != coord || !is_writeset(&rec))
				continue;
			if (nlog == cap) {
				cap = cap ? 2 * cap : 64;
				uint64_t *x = realloc(logged, cap * sizeof(*x));
				if (!x) {
					free(logged);
					return dxl_err_set(DXL_E_NOMEM, "unlock-coord");
				}
				logged = x;
			}
			logged[nlog++] = rec.txn_id;
		}
	}
	int gone = 0;
	for (size_t i = 0; i < t->npv; i++) {
		const struct prov *p = &t->pv[i];
		if ((p->owner >> 48) != coord || id_in(logged, nlog, p->owner) || !prov_live(t, p))
			continue;
		struct dxl_record cur;
		if (dxl_store_read(t->st, p->table, p->slot, &cur, NULL, 0))
			continue;
		if (undo_insert(t, p->table, p->slot, p->owner) == 0) {
			gone++;
			DXL_INFO("event=coord_insert_removed shard=%u table=%u key=%" PRIu64
				 " txn=0x%" PRIx64 " msg=\"inserted by a transaction that never logged\"",
				 t->shard, p->table, cur.key, p->owner);
		}
	}
	free(logged);
	return gone;
}

/* serve_resolution -- the resolution RPCs (no table lookup for the first) */
static int serve_resolution(struct dxl_tables *t, uint16_t op, const struct dxl_table_req *r,
			    struct dxl_table_rep *rep, uint8_t *val, uint32_t vcap)
{
	if (!t->ls)
		return dxl_err_set(DXL_E_STATE, "shard %u: no log attached", t->shard);
	if (op == DXL_RPC_ID_TABLE_TXN_STATUS) {
		bool ab, pr;
		collect_aborts(t->ls, r->key, &ab, &pr);
		rep->holder = ab ? DXL_TXN_ABORTED : pr ? DXL_TXN_PRESENT : DXL_TXN_ABSENT;
		return 0;
	}
	if (op == DXL_RPC_ID_TABLE_UNLOCK_COORD) {
		if (!r->key || r->key > 0xffff)
			return dxl_err_set(DXL_E_INVAL, "unlock-coord: coordinator id %" PRIu64, r->key);
		int fwd = unlock_coord_forward(t, (uint32_t)r->key);
		if (fwd < 0)
			return fwd;
		int gone = unlock_coord_inserts(t, (uint32_t)r->key);
		if (gone < 0)
			return gone;
		rep->slot = (uint64_t)dxl_store_unlock_coord(t->st, (uint32_t)r->key);
		rep->holder = (uint64_t)fwd;
		if (rep->slot || fwd)
			DXL_INFO("event=coord_locks_released shard=%u coord=%" PRIu64 " locks=%" PRIu64
				 " rolled_forward=%d",
				 t->shard, r->key, rep->slot, fwd);
		return 0;
	}
	/* IN_DOUBT */
	if (r->slot >= dxl_logstore_nrings(t->ls))
		return dxl_err_set(DXL_E_NOENT, "shard %u has no ring %" PRIu64, t->shard, r->slot);
	uint32_t ring = (uint32_t)r->slot;
	uint64_t wm = dxl_logstore_watermark(t->ls, ring);
	struct dxl_ring_iter it;
	struct dxl_rec rec;
	uint64_t at, skip = r->key, k = 0, n = 0;
	uint32_t used = 0;
	int ret = dxl_ring_iter_init(&it, t->ls, ring);
	if (ret)
		return ret;
	uint64_t *ab_ids;
	size_t nab;
	if ((ret = log_aborted(t->ls, &ab_ids, &nab)))
		return ret;
	while (dxl_ring_iter_next(&it, &rec, &at) == 1) {
		if (rec.commit_ts < wm || !is_writeset(&rec) || id_in(ab_ids, nab, rec.txn_id))
			continue;
		if (k++ < skip)
			continue;
		uint32_t need = DXL_IN_DOUBT_HDR + 4u * rec.nparts + rec.payload_len;
		need = (need + 7u) & ~7u;
		uint32_t head = DXL_IN_DOUBT_HDR + 4u * rec.nparts;
		if (!used && (need > vcap || r->version)) {
			/* a record larger than a reply (or the rest of one): its
			 * header and the part of its payload from byte
			 * r->version; rec.key = 1 says so, rec.version = where */
			if (r->version >= rec.payload_len || head >= vcap) {
				free(ab_ids);
				return dxl_err_set(DXL_E_INVAL, "in-doubt: part at %" PRIu64 " of a %u-byte record",
						   r->version, rec.payload_len);
			}
			uint32_t part = DXL_MIN(rec.payload_len - (uint32_t)r->version, vcap - head);
			uint8_t *p = val;
			memset(p, 0, head);
			dxl_put_le64(p, rec.txn_id);
			dxl_put_le64(p + 8, rec.commit_ts);
			dxl_put_le16(p + 16, rec.nparts);
			dxl_put_le32(p + 20, rec.payload_len);
			for (unsigned i = 0; i < rec.nparts; i++)
				dxl_put_le32(p + DXL_IN_DOUBT_HDR + 4 * i, dxl_rec_part(&rec, i));
			memcpy(p + head, (const uint8_t *)rec.payload + r->version, part);
			used = head + part;
			rep->rec.key = 1;
			rep->rec.version = r->version;
			rep->holder = 1;
			break;
		}
		if (used + need > vcap) {
			rep->holder = 1;
			break;
		}
		uint8_t *p = val + used;
		memset(p, 0, need);
		dxl_put_le64(p, rec.txn_id);
		dxl_put_le64(p + 8, rec.commit_ts);
		dxl_put_le16(p + 16, rec.nparts);
		dxl_put_le32(p + 20, rec.payload_len);
		for (unsigned i = 0; i < rec.nparts; i++)
			dxl_put_le32(p + DXL_IN_DOUBT_HDR + 4 * i, dxl_rec_part(&rec, i));
		memcpy(p + DXL_IN_DOUBT_HDR + 4u * rec.nparts, rec.payload, rec.payload_len);
		used += need;
		n++;
	}
	free(ab_ids);
	rep->slot = n;
	rep->data = val;
	rep->data_len = used;
	return 0;
}

/* RESOLVE of one entry (the table known) */
static int serve_resolve(struct dxl_tables *t, const struct dxl_table_req *r,
			 struct dxl_table_rep *rep)
{
	struct dxl_store *st = t->st;
	uint32_t opv = r->flags & 0x3u;
	bool abort = r->flags & DXL_TABLE_RESOLVE_ABORT;
	if (!r->owner || opv < DXL_WS_INSERT || opv > DXL_WS_DELETE || !r->version || (r->version & 1))
		return dxl_err_set(DXL_E_INVAL, "resolve: owner 0x%" PRIx64 ", op %u, version %" PRIu64,
				   r->owner, opv, r->version);
	uint64_t slot = 0;
	bool have = dxl_store_find(st, r->table, r->key, &slot) == 0;
	uint64_t w = have ? dxl_store_lock_word(st, r->table, slot) : 0;
	if (have && w && w != r->owner) {
		rep->holder = w; /* the resolver decides whether to wait */
		return dxl_err_set(DXL_E_BUSY, "table %u key %" PRIu64 ": locked by 0x%" PRIx64
				   ", not by 0x%" PRIx64, r->table, r->key, w, r->owner);
	}
	int ret = 0;
	if (abort && have && w == r->owner) {
		/* the record is owner's insert -- made at its lock phase here
		 * (struct prov), or by a promotion gate as logged (version) --
		 * and goes; a record owner only locked (another's, a committed
		 * one) stays: the lock alone is released (issue 20 review: an
		 * aborted insert in doubt deleted a committed record) */
		struct dxl_record cur;
		bool mine = prov_is(t, r->table, slot, r->owner) ||
			    (opv == DXL_WS_INSERT &&
			     dxl_store_read(st, r->table, slot, &cur, NULL, 0) == 0 && cur.live &&
			     cur.version == r->version);
		if (mine)
			ret = undo_insert(t, r->table, slot, r->owner);
	} else if (!abort) {
		ret = dxl_store_apply(st, r->table, r->key, (enum dxl_ws_op)opv, r->version,
				      r->ts, r->value, r->len);
		if (ret > 0)
			ret = 0;
	}
	if (ret)
		return ret;
	if (t->resolve_hook)
		t->resolve_hook(t->resolve_hook_arg, r->table, slot);
	/* forward: the lock stays until the ring's watermark passed the
	 * record (UNLOCK_COORD): a later writer of the key through a live
	 * ring cannot reach the backups before it (issue 20). abort: the
	 * transaction's lock is released, never another holder's: a CAS
	 * owner -> 0; if the word changed since it was read (its holder,
	 * alive after all, finished and another transaction locked the
	 * slot) the entry is resolved all the same */
	if (abort && have && w == r->owner &&
	    (ret = dxl_store_unlock_owner(st, r->table, slot, r->owner))) {
		if (ret != DXL_E_STATE)
			return ret;
		DXL_INFO("event=resolve_lock_moved shard=%u table=%u key=%" PRIu64 " txn=0x%" PRIx64
			 " msg=\"%s\"", t->shard, r->table, r->key, r->owner, dxl_errmsg());
	}
	if (dxl_store_find(st, r->table, r->key, &slot) == 0)
		read_fields(st, r->table, slot, rep);
	return 0;
}

/* serve -- one operation on the tables of a shard this node is primary of
 * (svc->mu held); the value of LOOKUP/READ goes to val[0..vcap) */
static int serve(struct dxl_tables *t, uint16_t op,
		 const struct dxl_table_req *r, struct dxl_table_rep *rep,
		 uint8_t *val, uint32_t vcap)
{
	struct dxl_store *st = t->st;
	if (op == DXL_RPC_ID_TABLE_TXN_STATUS || op == DXL_RPC_ID_TABLE_IN_DOUBT ||
	    op == DXL_RPC_ID_TABLE_UNLOCK_COORD)
		return serve_resolution(t, op, r, rep, val, vcap);
	if (op == DXL_RPC_ID_TABLE_FENCE)
		return 0; /* handle() checked everything */
	if (op == DXL_RPC_ID_TABLE_LOCK_OWNERS) {
		uint32_t n = 0, cap = DXL_MIN(vcap / 4, 1000u);
		for (uint32_t i = 0; i < t->n; i++)
			for (uint64_t slot = 0; slot < t->t[i].sc.capacity; slot++) {
				uint64_t w = dxl_store_lock_word(st, t->t[i].sc.id, slot);
				if (!w)
					continue;
				uint32_t id = (uint32_t)(w >> 48);
				bool seen = false;
				for (uint32_t k = 0; k < n && !seen; k++)
					seen = dxl_get_le32(val + 4 * k) == id;
				if (!seen && n < cap)
					dxl_put_le32(val + 4 * n++, id);
			}
		rep->slot = n;
		rep->data = val;
		rep->data_len = 4 * n;
		return 0;
	}
	struct tab *tb = find_tab(t, r->table);
	if (!tb)
		return dxl_err_set(DXL_E_NOENT, "shard %u has no table %u", t->shard, r->table);
	if (r->len > tb->sc.value_size)
		return dxl_err_set(DXL_E_TOOBIG, "table %u: value of %u bytes, its value size is %u",
				   r->table, r->len, tb->sc.value_size);
	bool by_slot = op == DXL_RPC_ID_TABLE_READ || op == DXL_RPC_ID_TABLE_LOCK ||
		       op == DXL_RPC_ID_TABLE_UNLOCK || op == DXL_RPC_ID_TABLE_WRITEBACK;
	if (by_slot && r->slot >= tb->sc.capacity)
		return dxl_err_set(DXL_E_NOENT, "table %u: slot %" PRIu64 " out of range (%" PRIu64 ")",
				   r->table, r->slot, tb->sc.capacity);
	uint64_t slot = 0;
	int ret;
	switch (op) {
	case DXL_RPC_ID_TABLE_LOOKUP:
		if ((ret = dxl_store_find(st, r->table, r->key, &slot))) {
			/* a versioned miss: the tombstone's version and
			 * timestamp (a transaction reading the absence
			 * observes its deleter's) */
			struct dxl_store_absence ab;
			if (dxl_store_absence(st, r->table, r->key, &ab) == 0) {
				rep->rec.version = ab.version;
				rep->rec.ts = ab.ts;
				rep->rec.key = r->key;
			}
			return dxl_err_set(ret, "table %u: no key %" PRIu64, r->table, r->key);
		}
		ret = dxl_store_read(st, r->table, slot, &rep->rec, val, vcap);
		if (!ret && (!rep->rec.live || rep->rec.key != r->key))
			ret = dxl_err_set(DXL_E_NOENT, "table %u: no key %" PRIu64,
					  r->table, r->key); /* deleted meanwhile */
		if (!ret) {
			rep->slot = slot;
			rep->data = val;
			rep->data_len = rep->rec.len;
		}
		return ret;
	case DXL_RPC_ID_TABLE_READ:
		ret = dxl_store_read(st, r->table, r->slot, &rep->rec, val, vcap);
		if (!ret) {
			/* the lock word too: a two-sided validation needs it */
			rep->holder = dxl_store_lock_word(st, r->table, r->slot);
			rep->slot = r->slot;
			rep->data = val;
			rep->data_len = rep->rec.len;
		}
		return ret;
	case DXL_RPC_ID_TABLE_INSERT: {
		/* owner != 0: a transaction's insert, locked by it; holder =
		 * the commit timestamp of the absence it replaces */
		struct dxl_store_absence ab = {0};
		dxl_store_absence(st, r->table, r->key, &ab);
		/* a transaction's insert (not committed yet) carries the
		 * timestamp of the absence it replaces, so that its abort (a
		 * delete keeping the record's timestamp) leaves that absence
		 * as it was; its write-back at commit puts the commit's */
		uint64_t ts = r->owner ? DXL_MAX(r->ts, ab.ts) : r->ts;
		if (r->owner && (ret = prov_reserve(t)))
			return ret;
		ret = dxl_store_insert_owned(st, r->table, r->key, ts, r->value,
					     r->len, r->owner, &slot, NULL);
		if (ret)
			return ret;
		if ((ret = read_fields(st, r->table, slot, rep))) {
			/* an error must mean "not inserted" (the caller then
			 * believes it holds no lock here): undo it, as LOCK
			 * does (keeping the absence's timestamp, issue 20) */
			char msg[512];
			snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
			if (r->owner && dxl_store_undo_insert(st, r->table, slot, r->owner, &ab) == 0) {
				dxl_store_unlock(st, r->table, slot, r->owner);
				return dxl_err_set(ret, "%s (not inserted)", msg);
			}
			return dxl_err_set(ret, "%s (inserted at slot %" PRIu64 ")", msg, slot);
		}
		rep->holder = ab.ts;
		if (r->owner)
			t->pv[t->npv++] = (struct prov){.table = r->table, .slot = slot,
							.owner = r->owner,
							.version = rep->rec.version, .was = ab};
		return 0;
	}
	case DXL_RPC_ID_TABLE_DELETE:
		if ((r->flags & DXL_TABLE_DEL_AT_SLOT) && r->slot < tb->sc.capacity &&
		    r->owner && dxl_store_lock_word(st, r->table, r->slot) == r->owner) {
			/* a retry of the caller's own delete (its reply was
			 * lost): the slot it locked no longer holds the key
			 * live, and the caller still holds its lock word */
			struct dxl_record cur;
			if (dxl_store_read(st, r->table, r->slot, &cur, NULL, 0) == 0 &&
			    cur.key == r->key && !cur.live) {
				rep->rec = cur;
				rep->slot = r->slot;
				return 0;
			}
		}
		if ((ret = dxl_store_find(st, r->table, r->key, &slot)))
			return ret;
		uint64_t dts = r->ts;
		if (r->version || !dts) {
			struct dxl_record cur;
			if ((ret = dxl_store_read(st, r->table, slot, &cur, NULL, 0)))
				return ret;
			/* version: only the record of that version (an abort's
			 * delete of its own insert, never another's record) */
			if (r->version && cur.version != r->version)
				return dxl_err_set(DXL_E_STATE,
						   "table %u key %" PRIu64 ": version %" PRIu64
						   ", the delete is for version %" PRIu64 " (not deleted)",
						   r->table, r->key, cur.version, r->version);
			/* no timestamp (an abort undoing its insert): the record's,
			 * the absence's it replaced (del_keep_ts), or that very
			 * absence for an insert made here at its lock phase
			 * (undo_insert) */
			if (!dts && r->version) {
				if ((ret = undo_insert(t, r->table, slot, r->owner)))
					return ret;
				return read_fields(st, r->table, slot, rep);
			}
			if (!dts)
				dts = cur.ts;
		}
		if ((ret = dxl_store_delete(st, r->table, slot, r->owner, dts, NULL)))
			return ret;
		return read_fields(st, r->table, slot, rep);
	case DXL_RPC_ID_TABLE_LOCK:
		if ((ret = dxl_store_lock(st, r->table, r->slot, r->owner, &rep->holder)))
			return ret;
		/* the version under the lock (DrTM+H's RPC lock + version) */
		if ((ret = read_fields(st, r->table, r->slot, rep))) {
			char msg[512];
			snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
			dxl_store_unlock(st, r->table, r->slot, r->owner);
			return dxl_err_set(ret, "%s (not locked)", msg);
		}
		return 0;
	case DXL_RPC_ID_TABLE_UNLOCK:
		return dxl_store_unlock(st, r->table, r->slot, r->owner);
	case DXL_RPC_ID_TABLE_WRITEBACK: {
		bool unlock = r->flags & DXL_TABLE_WB_UNLOCK;
		if (unlock && dxl_store_lock_mode(st) != DXL_LOCKS_CPU)
			return dxl_err_set(DXL_E_NOTSUP,
					   "table %u: lock words are NIC-owned: unlock with a fabric CAS",
					   r->table);
		if (dxl_store_lock_word(st, r->table, r->slot) != r->owner || !r->owner)
			return dxl_err_set(DXL_E_STATE,
					   "table %u slot %" PRIu64 ": write-back by 0x%" PRIx64
					   ", lock word 0x%" PRIx64,
					   r->table, r->slot, r->owner,
					   dxl_store_lock_word(st, r->table, r->slot));
		struct dxl_record cur;
		ret = dxl_store_read(st, r->table, r->slot, &cur, NULL, 0);
		if (ret == DXL_E_AGAIN && r->version &&
		    dxl_record_version(dxl_store_slot_ptr(st, r->table, r->slot)) ==
			    r->version - 1) {
			/* a one-sided write-back of this very version was cut
			 * (its QP failed): line 0 still says "being written".
			 * Under the owner's lock nobody else writes: write it
			 * over (the next even version is r->version) */
			cur.version = r->version - 2;
			cur.live = true;
			ret = 0;
		}
		if (ret)
			return ret;
		bool done = r->version && r->version == cur.version && cur.live;
		if (r->version && !done && r->version != cur.version + 2)
			return dxl_err_set(DXL_E_STATE,
					   "table %u slot %" PRIu64 ": write-back of version %" PRIu64
					   " over version %" PRIu64,
					   r->table, r->slot, r->version, cur.version);
		if (!done &&
		    (ret = dxl_store_update(st, r->table, r->slot, r->owner, r->ts,
					    r->value, r->len, NULL)))
			return ret;
		/* there already: placed by a one-sided write-back that failed
		 * before (or without) its flush READ, perhaps not durable --
		 * and the unlock follows this reply. Persist it first. */
		if (done && (ret = dxl_store_persist(st, r->table, r->slot)))
			return ret;
		if (unlock)
			dxl_store_unlock(st, r->table, r->slot, r->owner);
		return read_fields(st, r->table, r->slot, rep);
	}
	case DXL_RPC_ID_TABLE_RESOLVE:
		return serve_resolve(t, r, rep);
	case DXL_RPC_ID_TABLE_FENCE:
		return 0; /* handle() checked everything */
	default:
		return dxl_err_set(DXL_E_PROTO, "unknown table operation %u", op);
	}
}

void dxl_tables_set_retain_warn_ms(struct dxl_tables *t, uint32_t ms)
{
	t->retain_warn_ms = ms;
}

void dxl_tables_set_resolve_hook(struct dxl_tables *t,
				 void (*fn)(void *arg, uint32_t table, uint64_t slot),
				 void *arg)
{
	t->resolve_hook = fn;
	t->resolve_hook_arg = arg;
}

int dxl_tables_serve(struct dxl_tables *t, uint16_t op, const struct dxl_table_req *r,
		     struct dxl_table_rep *rep, uint8_t *val, uint32_t vcap)
{
	return serve(t, op, r, rep, val, vcap);
}

static bool svc_gated(const struct dxl_table_svc *svc, uint32_t shard)
{
	for (uint32_t i = 0; i < svc->n; i++)
		if (svc->t[i] && svc->t[i]->shard == shard)
			return svc->gated[i];
	return false;
}

void dxl_table_svc_set_gated(struct dxl_table_svc *svc, uint32_t shard, bool gated)
{
	pthread_mutex_lock(&svc->mu);
	for (uint32_t i = 0; i < svc->n; i++)
		if (svc->t[i] && svc->t[i]->shard == shard)
			svc->gated[i] = gated;
	pthread_mutex_unlock(&svc->mu);
}

/* lease_ok -- the node's lease is valid now (svc->mu held) */
static bool lease_ok(const struct dxl_table_svc *svc)
{
	uint64_t until = svc->lease_fn ? svc->lease_fn(svc->lease_arg) : 0;
	return until && dxl_boot_ns() < until;
}

void dxl_table_svc_set_lease(struct dxl_table_svc *svc, uint64_t (*fn)(void *arg),
			     void *arg)
{
	pthread_mutex_lock(&svc->mu);
	svc->lease_fn = fn;
	svc->lease_arg = arg;
	pthread_mutex_unlock(&svc->mu);
}

/* mutates -- the operation changes the store (or a lock word) when it
 * succeeds. Every other one (LOOKUP, READ, TXN_STATUS, IN_DOUBT, and any
 * operation added later unless listed here) only answers, and its answer is
 * what must not outlive the lease. */
static bool mutates(uint16_t op)
{
	switch (op) {
	case DXL_RPC_ID_TABLE_INSERT:
	case DXL_RPC_ID_TABLE_DELETE:
	case DXL_RPC_ID_TABLE_LOCK:
	case DXL_RPC_ID_TABLE_UNLOCK:
	case DXL_RPC_ID_TABLE_WRITEBACK:
	case DXL_RPC_ID_TABLE_RESOLVE:
	case DXL_RPC_ID_TABLE_UNLOCK_COORD:
		return true;
	}
	return false;
}

static int handle(struct dxl_table_svc *svc, uint16_t op, const void *req,
		  size_t len, void *reply, size_t cap, size_t *reply_len)
{
	if (cap < DXL_TABLE_REP_SIZE)
		return dxl_err_set(DXL_E_TOOBIG, "table %s: the caller takes %zu reply bytes",
				   dxl_table_op_name(op), cap);
	uint8_t *val = (uint8_t *)reply + DXL_TABLE_REP_SIZE;
	uint32_t vcap = (uint32_t)DXL_MIN(cap - DXL_TABLE_REP_SIZE, (size_t)UINT32_MAX);
	struct dxl_table_rep rep;
	memset(&rep, 0, sizeof(rep));
	struct dxl_table_req r;
	pthread_mutex_lock(&svc->mu);
	rep.epoch = svc->conf.epoch;
	int ret = dxl_table_req_decode(op, req, len, &r);
	const struct dxl_cluster_shard *cs =
		ret ? NULL : dxl_cluster_config_shard(&svc->conf, r.shard);
	rep.primary = cs ? cs->primary : 0;
	struct dxl_tables *t = ret ? NULL : svc_tables(svc, r.shard);
	if (ret)
		;
	else if (r.epoch != svc->conf.epoch)
		ret = dxl_err_set(DXL_E_STALE, "request of epoch %" PRIu64 ", node %u is at epoch %" PRIu64,
				  r.epoch, svc->node_id, svc->conf.epoch);
	else if (!svc->serving)
		ret = dxl_err_set(DXL_E_UNAVAIL, "node %u is not serving (lease lapsed, or shutting down)",
				  svc->node_id);
	else if (!lease_ok(svc))
		ret = dxl_err_set(DXL_E_UNAVAIL, "node %u: its ZooKeeper lease has run out",
				  svc->node_id);
	else if (!cs)
		ret = dxl_err_set(DXL_E_UNAVAIL, "shard %u is not in the configuration of epoch %" PRIu64,
				  r.shard, svc->conf.epoch);
	else if (cs->primary != svc->node_id)
		ret = dxl_err_set(DXL_E_UNAVAIL, "node %u is not the primary of shard %u (node %u is)",
				  svc->node_id, r.shard, cs->primary);
	else if (!t)
		ret = dxl_err_set(DXL_E_NOENT, "node %u hosts no tables of shard %u",
				  svc->node_id, r.shard);
	else if (svc_gated(svc, r.shard))
		ret = dxl_err_set(DXL_E_UNAVAIL,
				  "node %u became the primary of shard %u and is applying its log",
				  svc->node_id, r.shard);
	else
		ret = serve(t, op, &r, &rep, val, vcap);
	/* and before the reply of a read-only operation: what was read may be
	 * stale once the lease is over (another primary may have been
	 * promoted; issue 16.5). Not for an operation that changed the store:
	 * it is done, and an error would tell its caller "not done" (a
	 * coordinator would never release the lock of its insert or LOCK); its
	 * caller's next step in the epoch is fenced anyway (the log's rkeys,
	 * the epoch of every later request). */
	DXL_TESTPOINT("replica.table_rpc.served", svc);
	if (!ret && !mutates(op) && !lease_ok(svc)) {
		ret = dxl_err_set(DXL_E_UNAVAIL,
				  "node %u: its ZooKeeper lease ran out while it served the request",
				  svc->node_id);
		memset(&rep, 0, sizeof(rep));
		rep.epoch = svc->conf.epoch;
		rep.primary = cs ? cs->primary : 0;
	}
	if (ret) {
		svc->refused++;
		/* the reply carries the message instead of a value */
		const char *m = dxl_errmsg();
		rep.data = m;
		rep.data_len = (uint32_t)DXL_MIN(strlen(m), (size_t)vcap);
		DXL_DEBUG("event=table_rpc_refused op=%s code=%s msg=\"%s\"",
			  dxl_table_op_name(op), dxl_errname(ret), m);
	} else {
		svc->served++;
	}
	pthread_mutex_unlock(&svc->mu);
	int n = dxl_table_rep_encode(&rep, reply, cap);
	*reply_len = n > 0 ? (size_t)n : 0;
	return ret;
}

#define HANDLER(name, id)                                                     \
	static int h_##name(struct dxl_rpc *rpc, const void *req, size_t len, \
			    void *reply, size_t cap, size_t *reply_len,       \
			    void *arg)                                        \
	{                                                                     \
		(void)rpc;                                                    \
		return handle(arg, id, req, len, reply, cap, reply_len);      \
	}
HANDLER(lookup, DXL_RPC_ID_TABLE_LOOKUP)
HANDLER(insert, DXL_RPC_ID_TABLE_INSERT)
HANDLER(delete, DXL_RPC_ID_TABLE_DELETE)
HANDLER(read, DXL_RPC_ID_TABLE_READ)
HANDLER(lock, DXL_RPC_ID_TABLE_LOCK)
HANDLER(unlock, DXL_RPC_ID_TABLE_UNLOCK)
HANDLER(writeback, DXL_RPC_ID_TABLE_WRITEBACK)
HANDLER(txn_status, DXL_RPC_ID_TABLE_TXN_STATUS)
HANDLER(in_doubt, DXL_RPC_ID_TABLE_IN_DOUBT)
HANDLER(resolve, DXL_RPC_ID_TABLE_RESOLVE)
HANDLER(unlock_coord, DXL_RPC_ID_TABLE_UNLOCK_COORD)
HANDLER(fence, DXL_RPC_ID_TABLE_FENCE)
HANDLER(lock_owners, DXL_RPC_ID_TABLE_LOCK_OWNERS)
#undef HANDLER

static const struct {
	uint16_t id;
	dxl_rpc_handler_fn fn;
} HANDLERS[] = {
	{DXL_RPC_ID_TABLE_LOOKUP, h_lookup},
	{DXL_RPC_ID_TABLE_INSERT, h_insert},
	{DXL_RPC_ID_TABLE_DELETE, h_delete},
	{DXL_RPC_ID_TABLE_READ, h_read},
	{DXL_RPC_ID_TABLE_LOCK, h_lock},
	{DXL_RPC_ID_TABLE_UNLOCK, h_unlock},
	{DXL_RPC_ID_TABLE_WRITEBACK, h_writeback},
	{DXL_RPC_ID_TABLE_TXN_STATUS, h_txn_status},
	{DXL_RPC_ID_TABLE_IN_DOUBT, h_in_doubt},
	{DXL_RPC_ID_TABLE_RESOLVE, h_resolve},
	{DXL_RPC_ID_TABLE_UNLOCK_COORD, h_unlock_coord},
	{DXL_RPC_ID_TABLE_FENCE, h_fence},
	{DXL_RPC_ID_TABLE_LOCK_OWNERS, h_lock_owners},
};

/* svc_main -- the service thread: its ctx, scheduler and RPC endpoint are
 * made, used and destroyed here (a scheduler belongs to its thread) */
static void *svc_main(void *arg)
{
	struct dxl_table_svc *svc = arg;
	struct dxl_ctx *ctx = NULL;
	struct dxl_sched *sched = NULL;
	struct dxl_rpc *rpc = NULL;
	int ret = dxl_ctx_new(svc->f, DXL_REPLICA_RPC_CTX, &ctx);
	if (!ret)
		ret = dxl_sched_new(NULL, ctx, &sched);
	if (!ret)
		ret = dxl_rpc_new(sched, NULL, &rpc);
	for (unsigned i = 0; !ret && i < DXL_ARRAY_SIZE(HANDLERS); i++)
		ret = dxl_rpc_register(rpc, HANDLERS[i].id, HANDLERS[i].fn, svc);
	pthread_mutex_lock(&svc->mu);
	svc->start_ret = ret;
	if (ret)
		snprintf(svc->start_msg, sizeof(svc->start_msg), "%s", dxl_errmsg());
	svc->sched = ret ? NULL : sched;
	svc->started = true;
	pthread_cond_broadcast(&svc->cv);
	pthread_mutex_unlock(&svc->mu);
	if (!ret) {
		DXL_INFO("event=table_rpc_serving node=%u ctx=%d", svc->node_id,
			 DXL_REPLICA_RPC_CTX);
		if ((ret = dxl_sched_serve(sched)))
			DXL_ERROR("event=table_rpc_failed node=%u msg=\"%s\"", svc->node_id,
				  dxl_errmsg());
	}
	/* rpc.h: the ctx first, then the rpc, then the scheduler */
	dxl_ctx_delete(&ctx);
	dxl_rpc_delete(&rpc);
	dxl_sched_delete(&sched);
	return NULL;
}

int dxl_table_svc_start(struct dxl_fabric *f, uint32_t node_id,
			struct dxl_tables *const *t, uint32_t n,
			struct dxl_table_svc **out)
{
	if (!f || !out || n > DXL_REPLICA_MAX_SHARDS || (n && !t))
		return dxl_err_set(DXL_E_INVAL, "dxl_table_svc_start: bad argument");
	struct dxl_table_svc *svc = calloc(1, sizeof(*svc));
	if (!svc)
		return dxl_err_set(DXL_E_NOMEM, "table RPC service");
	svc->f = f;
	svc->node_id = node_id;
	svc->n = n;
	for (uint32_t i = 0; i < n; i++)
		svc->t[i] = t[i];
	dxl_cluster_config_init(&svc->conf);
	pthread_mutex_init(&svc->mu, NULL);
	pthread_cond_init(&svc->cv, NULL);
	if (pthread_create(&svc->th, NULL, svc_main, svc)) {
		dxl_table_svc_stop(&svc);
		return dxl_err_set(DXL_E_NOMEM, "table RPC service: no thread");
	}
	svc->th_started = true;
	pthread_mutex_lock(&svc->mu);
	while (!svc->started)
		pthread_cond_wait(&svc->cv, &svc->mu);
	int ret = svc->start_ret;
	pthread_mutex_unlock(&svc->mu);
	if (ret) {
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", svc->start_msg);
		dxl_table_svc_stop(&svc);
		return dxl_err_set(ret, "table RPC service on ctx %d: %s",
				   DXL_REPLICA_RPC_CTX, msg);
	}
	*out = svc;
	return 0;
}

void dxl_table_svc_stop(struct dxl_table_svc **sp)
{
	if (!sp || !*sp)
		return;
	struct dxl_table_svc *svc = *sp;
	if (svc->th_started) {
		pthread_mutex_lock(&svc->mu);
		if (svc->sched)
			dxl_sched_stop(svc->sched);
		pthread_mutex_unlock(&svc->mu);
		pthread_join(svc->th, NULL);
		DXL_INFO("event=table_rpc_stopped node=%u served=%" PRIu64 " refused=%" PRIu64,
			 svc->node_id, svc->served, svc->refused);
	}
	dxl_cluster_config_clear(&svc->conf);
	pthread_mutex_destroy(&svc->mu);
	pthread_cond_destroy(&svc->cv);
	free(svc);
	*sp = NULL;
}

void dxl_table_svc_set_config(struct dxl_table_svc *svc,
			      const struct dxl_cluster_config *c)
{
	struct dxl_cluster_config copy;
	if (dxl_cluster_config_copy(&copy, c)) {
		/* keep refusing with the old epoch: the caller's requests go stale */
		DXL_WARN("event=table_rpc_config_failed msg=\"%s\"", dxl_errmsg());
		pthread_mutex_lock(&svc->mu);
		svc->serving = false;
		pthread_mutex_unlock(&svc->mu);
		return;
	}
	pthread_mutex_lock(&svc->mu);
	dxl_cluster_config_clear(&svc->conf);
	svc->conf = copy;
	pthread_mutex_unlock(&svc->mu);
}

/*
 * settle_one -- d (in doubt when the gate opened) is decided now: committed
 * unless an abort marker names it. Acts only where d's transaction still
 * holds the lock here (recover_locks set it): nobody else can be writing
 * the record then. Committed: the entry applied (idempotent by version:
 * its coordinator may have written it back already) and the lock
 * released; aborted: a record it inserted deleted, its lock released.
 * svc->mu held (the RPC handlers are the other writers).
 */
static void settle_one(struct dxl_tables *t, const struct doubt *d)
{
	bool aborted, present;
	collect_aborts(t->ls, d->txn, &aborted, &present);
	struct dxl_ws_entry e[64];
	int n = dxl_writeset_decode(d->payload, d->len, e, 64);
	uint32_t done = 0;
	for (int k = 0; k < n && k < 64; k++) {
		uint64_t slot;
		if (dxl_store_find(t->st, e[k].table, e[k].key, &slot) ||
		    dxl_store_lock_word(t->st, e[k].table, slot) != d->txn)
			continue;
		int ret = 0;
		if (aborted) {
			/* its insert goes -- the record recover_locks made or
			 * locked for it (version as logged, or its lock phase's
			 * here), never another record it holds the lock of */
			struct dxl_record cur;
			if (e[k].op == DXL_WS_INSERT &&
			    dxl_store_read(t->st, e[k].table, slot, &cur, NULL, 0) == 0 &&
			    (cur.version == e[k].version || cur.version + 2 == e[k].version))
				ret = undo_insert(t, e[k].table, slot, d->txn);
		} else {
			ret = dxl_store_apply(t->st, e[k].table, e[k].key, e[k].op, e[k].version,
					      d->ts, e[k].value, e[k].len);
		}
		if (ret < 0)
			DXL_WARN("event=txn_settle_failed shard=%u txn=0x%" PRIx64 " key=%" PRIu64
				 " msg=\"%s\"", t->shard, d->txn, e[k].key, dxl_errmsg());
		/* a CAS from its transaction to 0: a word its coordinator
		 * released meanwhile (one-sided) and a third one took stays
		 * that one's (issue 20 review) */
		if ((ret = dxl_store_unlock_owner(t->st, e[k].table, slot, d->txn)) &&
		    ret != DXL_E_STATE)
			DXL_WARN("event=txn_settle_unlock_failed shard=%u txn=0x%" PRIx64 " key=%" PRIu64
				 " msg=\"%s\"", t->shard, d->txn, e[k].key, dxl_errmsg());
		done++;
	}
	DXL_INFO("event=txn_settled shard=%u ring=%u txn=0x%" PRIx64 " ts=%" PRIu64
		 " decision=%s entries=%u",
		 t->shard, d->ring, d->txn, d->ts, aborted ? "abort" : "commit", done);
}

void dxl_table_svc_settle(struct dxl_table_svc *svc)
{
	pthread_mutex_lock(&svc->mu);
	for (uint32_t i = 0; i < svc->n; i++) {
		struct dxl_tables *t = svc->t[i];
		if (!t || !t->ndq)
			continue;
		const struct dxl_cluster_shard *cs = dxl_cluster_config_shard(&svc->conf, t->shard);
		if (!t->ls || !cs || cs->primary != svc->node_id) {
			doubt_clear(t); /* not ours to settle any more */
			continue;
		}
		if (svc->gated[i])
			continue;
		size_t keep = 0;
		for (size_t k = 0; k < t->ndq; k++) {
			struct doubt *d = &t->dq[k];
			if (d->ts >= dxl_logstore_watermark(t->ls, d->ring)) {
				t->dq[keep++] = *d; /* still in doubt */
				continue;
			}
			settle_one(t, d);
			free(d->payload);
		}
		t->ndq = keep;
	}
	pthread_mutex_unlock(&svc->mu);
}

void dxl_table_svc_set_serving(struct dxl_table_svc *svc, bool serving)
{
	pthread_mutex_lock(&svc->mu);
	svc->serving = serving;
	pthread_mutex_unlock(&svc->mu);
}
