/* catchup.c -- catch-up of shards a node is not a member of: log pulls that never outrun the store, state transfer of tables, rebuild at open (replica/catchup_internal.h, docs/recovery.md) */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "replica/catchup_internal.h"

#define APPLY_BATCH (1u << 20)
#define NEED_PERIOD_MS 1000 /* the need cursor: at most this often */
#define XFER_BACKOFF_MS 1000
#define NEED_REFRESH_MS 60000 /* at most: a live node's need cursor is set
				 again this often (never older than the TTL) */
#define PRUNE_PERIOD_MS 5000  /* the primary looks at the cursors */

struct rc {
	bool marked;         /* the store may not cover its log */
	bool need_set;       /* our cursor exists in ZooKeeper */
	uint64_t need_ts, need_ms;
	uint64_t next_xfer_ms;
	bool ckpt_set;       /* our dxl-ckpt cursor exists */
	uint64_t ckpt_ts;
	uint64_t last_ckpt_ms, last_prune_ms;
	/* the primary's view of other nodes' need cursors: for how long each
	 * was seen unchanged here (its TTL; no clock compared with
	 * ZooKeeper's mtime) */
	struct dxl_rcv_watch need_watch;
	struct dxl_rcvm_stats st;
};

/* a local checkpoint of a member's store being written (one at a time) */
struct ckjob {
	bool running;
	atomic_bool done;
	pthread_t th;
	uint32_t i;
	struct dxl_rcvm *m;
	struct dxl_log_pos *start;
	uint32_t nrings;
	uint64_t ring_size, start_ts;
	int result;
	char msg[512];
	struct dxl_ckpt_info info;
	uint64_t t0_ms;
	uint64_t write_ms; /* the write itself (the thread's own clock) */
};

struct xfer {
	bool running;       /* a thread exists (loop only) */
	atomic_bool done;   /* it finished (set by the thread) */
	pthread_t th;
	uint32_t i;         /* the shard index */
	struct dxl_rcvm *m;
	struct dxl_xfer_source *src;
	int result;
	char msg[512];
	struct dxl_xfer_stats xs;
	struct dxl_install_stats is;
	struct dxl_ckpt_info info;
	uint64_t t0_ms;
};

struct dxl_rcvm {
	struct dxl_rcvm_cfg cfg;
	char dir[1024];
	char cluster[DXL_CLUSTER_NAME_MAX];
	struct dxl_shard *shards[DXL_REPLICA_MAX_SHARDS];
	struct dxl_tables *tables[DXL_REPLICA_MAX_SHARDS];
	struct rc rc[DXL_REPLICA_MAX_SHARDS];
	struct xfer x;
	struct ckjob ck;
	/* the loop's bounce buffer for log copies (registered LOCAL_WRITE) */
	uint8_t *bounce;
	struct dxl_mr *bounce_mr;
	uint64_t bounce_len;
};

static void region_id(const struct dxl_rcvm *m, struct dxl_region_id *id)
{
	memset(id, 0, sizeof(*id));
	snprintf(id->cluster, sizeof(id->cluster), "%s", m->cluster);
	id->node_id = m->cfg.node_id;
}

static uint32_t shard_of(const struct dxl_rcvm *m, uint32_t i)
{
	return dxl_shard_id(m->shards[i]);
}

/* ---- rebuild at open ----------------------------------------------------------------- */

static int rebuild(struct dxl_rcvm *m, uint32_t i)
{
	struct dxl_region_id id;
	region_id(m, &id);
	uint32_t shard = shard_of(m, i);
	struct dxl_install_stats is;
	uint64_t seq = 0;
	int ret = dxl_rcv_rebuild(m->dir, m->cfg.durability, &id, shard,
				  dxl_tables_store(m->tables[i]), dxl_shard_logstore(m->shards[i]),
				  &is, &seq);
	if (!ret) {
		m->rc[i].marked = false;
		m->rc[i].st.rebuilt++;
		DXL_INFO("event=store_rebuilt shard=%u checkpoint=%" PRIu64 " entries=%" PRIu64
			 " written=%" PRIu64 " removed=%" PRIu64 " ms=%" PRIu64
			 " msg=\"the log from the checkpoint's position is replayed when the applier starts\"",
			 shard, seq, is.entries, is.written, is.removed, is.ms);
	}
	return ret;
}

/*
 * A store that is empty (no record, no tombstone) while its log's heads are
 * past the start of a ring (records were applied to it and reclaimed) or a
 * complete checkpoint of the shard is in the directory: its file was lost
 * and an empty one created in its place (dxl_tables_open creates what is
 * absent).
 */
static bool store_lost(struct dxl_rcvm *m, uint32_t i)
{
	struct dxl_store_stats ss;
	if (dxl_store_stats(dxl_tables_store(m->tables[i]), UINT32_MAX, &ss) ||
	    ss.live || ss.tombstones || ss.torn)
		return false;
	const struct dxl_logstore *ls = dxl_shard_logstore(m->shards[i]);
	for (uint32_t r = 0; r < dxl_logstore_nrings(ls); r++) {
		struct dxl_ring_head h;
		if (dxl_logstore_head(ls, r, &h) == 0 && h.pos > 0)
			return true;
	}
	struct dxl_region_id id;
	region_id(m, &id);
	struct dxl_ckpt *c = NULL;
	bool found = dxl_ckpt_find(m->dir, m->cfg.durability, &id, shard_of(m, i), &c, NULL) == 0;
	dxl_ckpt_close(&c);
	dxl_err_clear();
	return found;
}

int dxl_rcvm_new(const struct dxl_rcvm_cfg *cfg, struct dxl_rcvm **out)
{
	if (!cfg || !out || !cfg->dir || !cfg->cluster || cfg->nshards > DXL_REPLICA_MAX_SHARDS)
		return dxl_err_set(DXL_E_INVAL, "dxl_rcvm_new: bad argument");
	struct dxl_rcvm *m = calloc(1, sizeof(*m));
	if (!m)
		return dxl_err_set(DXL_E_NOMEM, "catch-up state");
	m->cfg = *cfg;
	snprintf(m->dir, sizeof(m->dir), "%s", cfg->dir);
	snprintf(m->cluster, sizeof(m->cluster), "%s", cfg->cluster);
	m->cfg.dir = m->dir;
	m->cfg.cluster = m->cluster;
	if (!m->cfg.need_ttl_ms)
		m->cfg.need_ttl_ms = 600000;
	struct dxl_region_id id;
	region_id(m, &id);
	for (uint32_t i = 0; i < cfg->nshards; i++) {
		m->shards[i] = cfg->shards[i];
		m->tables[i] = cfg->tables ? cfg->tables[i] : NULL;
		if (!m->tables[i])
			continue;
		uint32_t shard = shard_of(m, i);
		/* no checkpoint is being written now: cut ones can go */
		dxl_ckpt_prune(m->dir, cfg->durability, &id, shard, 1);
		char reason[64];
		if (!dxl_rcv_marked(m->dir, shard, reason, sizeof(reason))) {
			if (!store_lost(m, i))
				continue;
			/* the store file was lost (replaced by an empty one):
			 * it does not hold what its log's heads say it does */
			snprintf(reason, sizeof(reason), "lost");
			if (dxl_rcv_mark_incomplete(m->dir, shard, reason))
				DXL_WARN("event=store_incomplete shard=%u msg=\"%s\"", shard,
					 dxl_errmsg());
			DXL_WARN("event=store_lost shard=%u msg=\"the store is empty but the log "
				 "or a checkpoint says it held data: rebuilt from the checkpoint, "
				 "or a state transfer\"",
				 shard);
		}
		m->rc[i].marked = true;
		if (rebuild(m, i))
			DXL_WARN("event=store_incomplete shard=%u reason=%s msg=\"%s; it takes a state transfer when it catches up\"",
				 shard, reason, dxl_errmsg());
	}
	*out = m;
	return 0;
}

static void xfer_join(struct dxl_rcvm *m)
{
	if (!m->x.running)
		return;
	pthread_join(m->x.th, NULL);
	m->x.running = false;
	free(m->x.src);
	m->x.src = NULL;
}

static void ck_join(struct dxl_rcvm *m)
{
	if (!m->ck.running)
		return;
	pthread_join(m->ck.th, NULL);
	m->ck.running = false;
	free(m->ck.start);
	m->ck.start = NULL;
}

void dxl_rcvm_delete(struct dxl_rcvm **mp)
{
	if (!mp || !*mp)
		return;
	xfer_join(*mp);
	ck_join(*mp);
	dxl_mr_dereg(&(*mp)->bounce_mr);
	free((*mp)->bounce);
	free(*mp);
	*mp = NULL;
}

bool dxl_rcvm_store_ok(const struct dxl_rcvm *m, uint32_t i)
{
	return !m->rc[i].marked && !dxl_rcvm_busy(m, i);
}

bool dxl_rcvm_busy(const struct dxl_rcvm *m, uint32_t i)
{
	return m->x.running && m->x.i == i;
}

void dxl_rcvm_stats(const struct dxl_rcvm *m, uint32_t i, struct dxl_rcvm_stats *out)
{
	*out = m->rc[i].st;
}

/* ---- what a node catching up still needs ---------------------------------------------- */

static void need_group(const struct dxl_rcvm *m, char *buf, size_t cap)
{
	snprintf(buf, cap, "dxl-recovery-%u", m->cfg.node_id);
}

/* the smallest timestamp of a record this store has not applied: the
 * first record at or after each ring's applied position, or, for a ring
 * with none, its watermark (a writer never appends below it) */
static uint64_t need_ts(const struct dxl_rcvm *m, uint32_t i)
{
	const struct dxl_logstore *ls = dxl_shard_logstore(m->shards[i]);
	uint64_t need = UINT64_MAX;
	for (uint32_t r = 0; r < dxl_logstore_nrings(ls); r++) {
		uint64_t pos = dxl_tables_applied_pos(m->tables[i], r), at, ts = 0;
		struct dxl_ring_iter it;
		struct dxl_rec rec;
		if (!dxl_ring_iter_init(&it, ls, r))
			while (dxl_ring_iter_next(&it, &rec, &at) == 1)
				if (pos == UINT64_MAX || at >= pos) {
					ts = rec.commit_ts;
					break;
				}
		need = DXL_MIN(need, ts ? ts : dxl_logstore_watermark(ls, r));
	}
	dxl_err_clear();
	return need;
}

static void need_publish(struct dxl_rcvm *m, uint32_t i, struct dxl_zk *zk, uint64_t ts)
{
	struct rc *rc = &m->rc[i];
	uint64_t now = dxl_now_ms();
	/* set again at least every refresh period, unchanged or not: the
	 * members drop the cursor of a node that is gone once it is older
	 * than need_ttl_ms (dxl_rcvm_tick) */
	uint64_t refresh = DXL_MIN((uint64_t)NEED_REFRESH_MS, m->cfg.need_ttl_ms / 4);
	if (!zk || (rc->need_set && rc->need_ts == ts && now - rc->need_ms < refresh) ||
	    (rc->need_set && now - rc->need_ms < NEED_PERIOD_MS && ts > rc->need_ts))
		return;
	char g[64];
	need_group(m, g, sizeof(g));
	if (dxl_cursor_set(zk, g, shard_of(m, i), ts, DXL_ZK_VERSION_ANY, NULL)) {
		DXL_DEBUG("event=need_cursor_failed shard=%u msg=\"%s\"", shard_of(m, i), dxl_errmsg());
		return;
	}
	rc->need_set = true;
	rc->need_ts = ts;
	rc->need_ms = now;
}

void dxl_rcvm_joined(struct dxl_rcvm *m, uint32_t i, struct dxl_zk *zk)
{
	struct rc *rc = &m->rc[i];
	if (!rc->need_set || !zk)
		return;
	char g[64];
	need_group(m, g, sizeof(g));
	int ret = dxl_cursor_delete(zk, g, shard_of(m, i));
	if (ret && ret != DXL_E_NOENT) {
		DXL_DEBUG("event=need_cursor_failed shard=%u msg=\"%s\"", shard_of(m, i), dxl_errmsg());
		return;
	}
	rc->need_set = false;
}

/* ---- state transfer ------------------------------------------------------------------ */

static void *xfer_main(void *arg)
{
	struct xfer *x = arg;
	struct dxl_rcvm *m = x->m;
	uint32_t i = x->i, shard = shard_of(m, i);
	struct dxl_logstore *ls = dxl_shard_logstore(m->shards[i]);
	struct dxl_store *st = dxl_tables_store(m->tables[i]);
	struct dxl_ctx *ctx = NULL;
	struct dxl_qp *qp = NULL;
	struct dxl_ckpt_writer *w = NULL;
	struct dxl_ckpt *c = NULL;
	uint32_t nr = dxl_logstore_nrings(ls);
	struct dxl_log_pos *start = calloc(nr, sizeof(*start));
	int ret = start ? 0 : dxl_err_set(DXL_E_NOMEM, "transfer");
	if (!ret && x->src->nrings != nr)
		ret = dxl_err_set(DXL_E_CONFIG, "node %u has %u rings of shard %u, this node %u",
				  x->src->node_id, x->src->nrings, shard, nr);
	if (!ret)
		ret = dxl_ctx_new(m->cfg.f, m->cfg.xfer_ctx, &ctx);
	if (!ret)
		ret = dxl_qp_connect(ctx, x->src->addr, x->src->ctx, &qp);
	/* 0. the source's reclaim floors, before its log: it keeps no
	 *    tombstone below them that the log from the start could need */
	uint64_t floors[DXL_STORE_MAX_TABLES] = {0};
	if (!ret)
		ret = dxl_xfer_read_floors(qp, x->src, floors);
	/* 1. the log: its heads are the image's start position (everything
	 *    below them is in the source's store before its slots are read) */
	uint64_t start_ts = 0;
	for (uint32_t r = 0; !ret && r < nr; r++) {
		struct dxl_follow_stats fs;
		if (!(ret = dxl_xfer_follow(ls, r, qp, &x->src->rings[r], NULL, &fs))) {
			start[r].pos = fs.head.pos;
			start[r].seq = fs.head.seq;
			start_ts = DXL_MAX(start_ts, fs.head.last_ts);
		}
	}
	/* 2. the tables, into a local checkpoint */
	struct dxl_region_id id;
	region_id(m, &id);
	unsigned nt = dxl_store_ntables(st);
	struct dxl_table_schema sc[DXL_STORE_MAX_TABLES];
	for (unsigned t = 0; t < nt; t++)
		dxl_store_table_at(st, t, &sc[t]);
	if (!ret)
		ret = dxl_ckpt_writer_new(m->dir, m->cfg.durability, &id, shard, sc, nt, nr,
					  dxl_logstore_ring_size(ls), start, 0, x->src->node_id, &w);
	for (uint32_t t = 0; !ret && t < x->src->ntables; t++)
		ret = dxl_ckpt_writer_set_floor(w, x->src->tables[t].id, floors[t]);
	if (!ret)
		ret = dxl_xfer_copy_store(qp, x->src, w, 0, &x->xs);
	/* 2b. no head of the source moved meanwhile: else a tombstone whose
	 *     key an older write in our log copy names may have been
	 *     reclaimed before its slot was read (dxl_xfer_check_heads) */
	if (!ret)
		ret = dxl_xfer_check_heads(qp, x->src, start, NULL, 0);
	if (!ret)
		ret = dxl_ckpt_writer_commit(&w, &x->info);
	dxl_ckpt_writer_abort(&w);
	/* 3. the store made the image; the log from start is replayed by the
	 *    applier when the next pass starts it */
	if (!ret) {
		char path[1200];
		snprintf(path, sizeof(path), "%s/ckpt-%u-%020" PRIu64 ".dat", m->dir, shard,
			 x->info.seq);
		ret = dxl_ckpt_open(path, m->cfg.durability, &id, &c);
	}
	if (!ret)
		ret = dxl_ckpt_install(st, c, &x->is);
	dxl_ckpt_close(&c);
	dxl_qp_delete(&qp);
	dxl_ctx_delete(&ctx);
	free(start);
	x->result = ret;
	snprintf(x->msg, sizeof(x->msg), "%s", ret ? dxl_errmsg() : "");
	atomic_store(&x->done, true);
	return NULL;
}

static int xfer_start(struct dxl_rcvm *m, uint32_t i, const struct dxl_replica_desc *d)
{
	uint32_t shard = shard_of(m, i);
	const struct dxl_shard_desc *sd = dxl_replica_desc_shard(d, shard);
	if (!sd)
		return dxl_err_set(DXL_E_NOENT, "node %u does not host shard %u", d->node_id, shard);
	if (!sd->ntables)
		return dxl_err_set(DXL_E_UNAVAIL, "node %u publishes no tables of shard %u (gated?)",
				   d->node_id, shard);
	struct dxl_xfer_source *src = calloc(1, sizeof(*src));
	if (!src)
		return dxl_err_set(DXL_E_NOMEM, "transfer");
	src->node_id = d->node_id;
	snprintf(src->addr, sizeof(src->addr), "%s", d->addr);
	src->ctx = d->ctx;
	src->nrings = sd->nrings;
	int ret = 0;
	for (uint32_t r = 0; !ret && r < sd->nrings && r < DXL_RING_MAX; r++)
		ret = dxl_replica_desc_target(d, shard, r, &src->rings[r]);
	src->ntables = sd->ntables;
	for (uint32_t t = 0; t < sd->ntables; t++)
		src->tables[t] = sd->tables[t].t;
	if (ret) {
		free(src);
		return ret;
	}
	/* nothing else touches the shard's log or store until it is done */
	dxl_tables_apply_stop(m->tables[i]);
	memset(&m->x, 0, sizeof(m->x));
	m->x.m = m;
	m->x.i = i;
	m->x.src = src;
	m->x.t0_ms = dxl_now_ms();
	if (pthread_create(&m->x.th, NULL, xfer_main, &m->x)) {
		free(src);
		m->x.src = NULL;
		return dxl_err_set(DXL_E_NOMEM, "transfer thread");
	}
	m->x.running = true;
	DXL_INFO("event=transfer_started shard=%u source=%u", shard, d->node_id);
	return 0;
}

/* the transfer of shard index i ended (the thread is done): its outcome */
static void xfer_finish(struct dxl_rcvm *m)
{
	uint32_t i = m->x.i, shard = shard_of(m, i);
	struct rc *rc = &m->rc[i];
	xfer_join(m);
	uint64_t ms = dxl_now_ms() - m->x.t0_ms;
	if (m->x.result) {
		rc->st.transfer_failures++;
		rc->next_xfer_ms = dxl_now_ms() + XFER_BACKOFF_MS;
		DXL_WARN("event=transfer_failed shard=%u code=%s msg=\"%s\"", shard,
			 dxl_errname(m->x.result), m->x.msg);
		return;
	}
	struct dxl_region_id id;
	region_id(m, &id);
	dxl_ckpt_prune(m->dir, m->cfg.durability, &id, shard, 1);
	m->rc[i].last_ckpt_ms = dxl_now_ms(); /* the transfer left one */
	if (dxl_rcv_mark_clear(m->dir, shard)) {
		DXL_WARN("event=transfer_failed shard=%u msg=\"%s\"", shard, dxl_errmsg());
		return;
	}
	rc->marked = false;
	rc->st.transfers++;
	rc->st.last_transfer_ms = ms;
	rc->st.last_transfer_entries = m->x.info.entries;
	DXL_INFO("event=transfer_done shard=%u source=%u checkpoint=%" PRIu64 " entries=%" PRIu64
		 " tombstones=%" PRIu64 " below_floor=%" PRIu64
		 " slots=%" PRIu64 " read_bytes=%" PRIu64 " retried=%" PRIu64 " torn_skipped=%" PRIu64
		 " copy_ms=%" PRIu64 " installed_written=%" PRIu64 " removed=%" PRIu64
		 " install_ms=%" PRIu64 " ms=%" PRIu64,
		 shard, m->x.info.source_node, m->x.info.seq, m->x.info.entries,
		 m->x.info.tombstones, m->x.xs.below_floor, m->x.xs.slots,
		 m->x.xs.bytes_read, m->x.xs.retried, m->x.xs.torn_skipped, m->x.xs.ms,
		 m->x.is.written, m->x.is.removed, m->x.is.ms, ms);
}

/* ---- a pass ---------------------------------------------------------------------------- */

static void apply_all(struct dxl_rcvm *m, uint32_t i, uint64_t live_mask)
{
	const struct dxl_logstore *ls = dxl_shard_logstore(m->shards[i]);
	int ret;
	do
		ret = dxl_tables_apply(m->tables[i], ls, live_mask, APPLY_BATCH);
	while (ret >= (int)APPLY_BATCH);
	/* errors were logged by the applier (event=apply_stuck) */
}

/* a ring's coverage: the position up to which the store holds its records */
static uint64_t coverage(const struct dxl_rcvm *m, uint32_t i, uint32_t r)
{
	uint64_t pos = dxl_tables_applied_pos(m->tables[i], r);
	if (pos != UINT64_MAX)
		return pos;
	struct dxl_ring_head h;
	if (dxl_logstore_head(dxl_shard_logstore(m->shards[i]), r, &h))
		return 0;
	return h.pos;
}

static int pull_rings(struct dxl_rcvm *m, uint32_t i, struct dxl_ctx *pull_ctx,
		      const struct dxl_replica_desc *d, const uint64_t *cov, uint64_t *changed,
		      int *gap_ring, uint64_t *gap_head)
{
	uint32_t shard = shard_of(m, i), src = d->node_id;
	struct dxl_logstore *ls = dxl_shard_logstore(m->shards[i]);
	const struct dxl_shard_desc *sd = dxl_replica_desc_shard(d, shard);
	*changed = 0;
	*gap_ring = -1;
	if (!sd)
		return dxl_err_set(DXL_E_NOENT, "node %u does not host shard %u", src, shard);
	if (sd->nrings != dxl_logstore_nrings(ls) || sd->ring_size != dxl_logstore_ring_size(ls))
		return dxl_err_set(DXL_E_CONFIG,
				   "shard %u: node %u has %u rings of %" PRIu64
				   " bytes, this node %u of %" PRIu64 " (log.writer_slots and log.ring_size must agree)",
				   shard, src, sd->nrings, sd->ring_size, dxl_logstore_nrings(ls),
				   dxl_logstore_ring_size(ls));
	/* one bounce buffer for every copy of the loop */
	uint64_t need = dxl_xfer_pull_bounce_bytes(dxl_logstore_ring_size(ls));
	if (m->bounce_len < need) {
		dxl_mr_dereg(&m->bounce_mr);
		free(m->bounce);
		m->bounce_len = 0;
		if (posix_memalign((void **)&m->bounce, 4096, need)) {
			m->bounce = NULL;
			return dxl_err_set(DXL_E_NOMEM, "catch-up: %" PRIu64 " bytes", need);
		}
		int r2 = dxl_mr_reg(dxl_ctx_fabric(pull_ctx), m->bounce, need, DXL_MR_LOCAL_WRITE,
				    &m->bounce_mr);
		if (r2) {
			free(m->bounce);
			m->bounce = NULL;
			return r2;
		}
		m->bounce_len = need;
	}
	struct dxl_qp *qp = NULL;
	int ret = dxl_qp_connect(pull_ctx, d->addr, d->ctx, &qp);
	for (uint32_t r = 0; !ret && r < dxl_logstore_nrings(ls); r++) {
		struct dxl_log_target t;
		struct dxl_follow_stats st;
		if ((ret = dxl_replica_desc_target(d, shard, r, &t)))
			break;
		ret = dxl_xfer_follow(ls, r, qp, &t, m->bounce_mr, &st);
		*changed += st.changed;
		m->rc[i].st.bytes_read += st.bytes_read;
		if (!ret && cov && st.head.pos > cov[r] && *gap_ring < 0) {
			*gap_ring = (int)r;
			*gap_head = st.head.pos;
		}
	}
	dxl_qp_delete(&qp);
	return ret;
}

int dxl_rcvm_pass(struct dxl_rcvm *m, uint32_t i, struct dxl_ctx *pull_ctx,
		  const struct dxl_replica_desc *d, uint64_t live_mask,
		  struct dxl_zk *zk, uint64_t *changed)
{
	*changed = 0;
	uint32_t shard = shard_of(m, i);
	struct rc *rc = &m->rc[i];
	int gap_ring;
	uint64_t gap_head = 0;
	if (!m->tables[i]) /* the log only: nothing to cover */
		return pull_rings(m, i, pull_ctx, d, NULL, changed, &gap_ring, &gap_head);
	if (m->x.running) {
		if (m->x.i != i || !atomic_load(&m->x.done))
			return dxl_err_set(DXL_E_AGAIN, "a state transfer is under way");
		xfer_finish(m);
		return dxl_err_set(DXL_E_AGAIN, "a state transfer just ended");
	}
	if (rc->marked) {
		if (dxl_now_ms() < rc->next_xfer_ms)
			return dxl_err_set(DXL_E_AGAIN, "a state transfer failed: waiting to retry");
		if (m->ck.running && m->ck.i == i)
			return dxl_err_set(DXL_E_AGAIN, "a checkpoint of the store is being written");
		/* hold the source's retention by age while it runs */
		need_publish(m, i, zk, 0);
		int ret = xfer_start(m, i, d);
		if (ret) {
			rc->next_xfer_ms = dxl_now_ms() + XFER_BACKOFF_MS;
			return ret;
		}
		return dxl_err_set(DXL_E_AGAIN, "a state transfer started");
	}
	/* 1. the store applies what its log holds; what it covers */
	apply_all(m, i, live_mask);
	const struct dxl_logstore *ls = dxl_shard_logstore(m->shards[i]);
	uint32_t nr = dxl_logstore_nrings(ls);
	uint64_t cov[DXL_RING_MAX];
	for (uint32_t r = 0; r < nr && r < DXL_RING_MAX; r++)
		cov[r] = coverage(m, i, r);
	need_publish(m, i, zk, need_ts(m, i));
	/* 2. the copy may move the heads past that: marked until checked */
	int ret = dxl_rcv_mark_incomplete(m->dir, shard, "pull");
	if (ret)
		return ret;
	ret = pull_rings(m, i, pull_ctx, d, cov, changed, &gap_ring, &gap_head);
	rc->st.passes++;
	if (gap_ring >= 0) {
		/* records this store never applied were reclaimed at the
		 * source: it misses data, whatever its log says now */
		rc->marked = true;
		rc->st.gaps++;
		dxl_tables_apply_stop(m->tables[i]);
		dxl_rcv_mark_incomplete(m->dir, shard, "gap");
		DXL_WARN("event=catch_up_gap shard=%u source=%u ring=%d source_head=%" PRIu64
			 " applied_to=%" PRIu64 " msg=\"records this store never applied were reclaimed at the source: state transfer\"",
			 shard, d->node_id, gap_ring, gap_head, cov[gap_ring]);
		return dxl_err_set(DXL_E_AGAIN, "shard %u: a gap: state transfer needed", shard);
	}
	int cret = dxl_rcv_mark_clear(m->dir, shard);
	if (cret && !ret)
		ret = cret;
	/* 3. what the copy brought */
	apply_all(m, i, live_mask);
	return ret;
}

/* ---- periodic checkpoints of a member's store, and the cursors -------------------- */

static void *ck_main(void *arg)
{
	struct ckjob *j = arg;
	struct dxl_rcvm *m = j->m;
	struct dxl_region_id id;
	region_id(m, &id);
	DXL_TESTPOINT("recovery.checkpoint.write", m); /* (tests: a slow write) */
	uint64_t t0 = dxl_now_ms();
	j->result = dxl_ckpt_write_from(m->dir, &id, dxl_tables_store(m->tables[j->i]), j->start,
					j->nrings, j->ring_size, j->start_ts, &j->info);
	j->write_ms = dxl_now_ms() - t0;
	snprintf(j->msg, sizeof(j->msg), "%s", j->result ? dxl_errmsg() : "");
	atomic_store(&j->done, true);
	return NULL;
}

/* the smallest commit timestamp of a record at or after the positions
 * start[] (a ring without one: its watermark, a writer never appends
 * below it; a ring without a watermark, never written or nothing
 * acknowledged yet: the clock now -- a 0 there held every ring's
 * retention by age for ever): what the log must keep for an image from
 * start */
static uint64_t keep_ts(const struct dxl_logstore *ls, const struct dxl_log_pos *start,
			uint32_t nrings)
{
	uint64_t keep = UINT64_MAX, now = DXL_HLC_MAKE(dxl_wall_ms(), 0);
	for (uint32_t r = 0; r < nrings && r < dxl_logstore_nrings(ls); r++) {
		struct dxl_ring_iter it;
		struct dxl_rec rec;
		uint64_t at, ts = 0;
		if (!dxl_ring_iter_init(&it, ls, r))
			while (dxl_ring_iter_next(&it, &rec, &at) == 1)
				if (at >= start[r].pos) {
					ts = rec.commit_ts;
					break;
				}
		uint64_t wm = dxl_logstore_watermark(ls, r);
		keep = DXL_MIN(keep, ts ? ts : wm ? wm : now);
	}
	dxl_err_clear();
	return keep;
}

/* *out: the position of ring's first record at or after applied (its end
 * if none); *last_ts: raised to the newest commit timestamp before it */
static int ck_start(const struct dxl_logstore *ls, uint32_t ring, uint64_t applied,
		    struct dxl_log_pos *out, uint64_t *last_ts)
{
	struct dxl_ring_head h;
	int ret = dxl_logstore_head(ls, ring, &h);
	if (ret)
		return ret;
	*out = (struct dxl_log_pos){.pos = h.pos, .seq = h.seq};
	*last_ts = DXL_MAX(*last_ts, h.last_ts);
	struct dxl_ring_iter it;
	if ((ret = dxl_ring_iter_init(&it, ls, ring)))
		return ret;
	struct dxl_rec rec;
	uint64_t at;
	while ((ret = dxl_ring_iter_next(&it, &rec, &at)) == 1) {
		if (at >= applied) {
			*out = (struct dxl_log_pos){.pos = at, .seq = rec.seq};
			return 0;
		}
		*last_ts = DXL_MAX(*last_ts, rec.commit_ts);
	}
	if (ret < 0)
		return ret;
	*out = (struct dxl_log_pos){.pos = it.pos, .seq = it.seq}; /* the end */
	return 0;
}

static void ckpt_group(const struct dxl_rcvm *m, char *buf, size_t cap)
{
	snprintf(buf, cap, "dxl-ckpt-%u", m->cfg.node_id);
}

/* the checkpoint of shard index i was written (or not): keep it if the
 * log still covers it (no head moved past its start while it was written:
 * then no tombstone it needs was reclaimed either), publish its cursor */
static void ck_finish(struct dxl_rcvm *m, const struct dxl_rcvm_tick *t)
{
	struct ckjob *j = &m->ck;
	uint32_t i = j->i, shard = shard_of(m, i);
	struct rc *rc = &m->rc[i];
	pthread_join(j->th, NULL);
	j->running = false;
	/* the period runs from the end of a write: one that takes longer than
	 * it must not starve the node's other shards (one write at a time) */
	rc->last_ckpt_ms = dxl_now_ms();
	uint64_t ms = dxl_now_ms() - j->t0_ms;
	const struct dxl_logstore *ls = dxl_shard_logstore(m->shards[i]);
	struct dxl_region_id id;
	region_id(m, &id);
	char path[1200], why[256] = "";
	snprintf(path, sizeof(path), "%s/ckpt-%u-%020" PRIu64 ".dat", m->dir, shard, j->info.seq);
	int ret = j->result;
	if (!ret) {
		struct dxl_ckpt *c = NULL;
		ret = dxl_ckpt_open(path, m->cfg.durability, &id, &c);
		if (!ret && dxl_ckpt_covered(c, ls, why, sizeof(why)) != 1)
			ret = dxl_err_set(DXL_E_STALE, "retention passed its start: %s", why);
		dxl_ckpt_close(&c);
		if (ret && j->result == 0) {
			unlink(path);
			snprintf(j->msg, sizeof(j->msg), "%s", dxl_errmsg());
		}
	}
	if (ret) {
		rc->st.checkpoint_failures++;
		DXL_WARN("event=checkpoint_failed shard=%u code=%s ms=%" PRIu64 " msg=\"%s\"", shard,
			 dxl_errname(ret), ms, j->msg);
		free(j->start);
		j->start = NULL;
		return;
	}
	dxl_ckpt_prune(m->dir, m->cfg.durability, &id, shard, 1);
	rc->st.checkpoints++;
	uint64_t keep = keep_ts(ls, j->start, j->nrings);
	free(j->start);
	j->start = NULL;
	char g[64];
	ckpt_group(m, g, sizeof(g));
	if (t->zk && t->member) {
		if (dxl_cursor_set(t->zk, g, shard, keep, DXL_ZK_VERSION_ANY, NULL)) {
			DXL_WARN("event=ckpt_cursor_failed shard=%u msg=\"%s\"", shard, dxl_errmsg());
		} else {
			rc->ckpt_set = true;
			rc->ckpt_ts = keep;
		}
	}
	DXL_INFO("event=checkpoint_done shard=%u seq=%" PRIu64 " entries=%" PRIu64
		 " tombstones=%" PRIu64 " ms=%" PRIu64 " write_ms=%" PRIu64 " keep_ts=%" PRIu64
		 " msg=\"the log from its start is kept (cursor %s); a lost store is rebuilt from it\"",
		 shard, j->info.seq, j->info.entries, j->info.tombstones, ms, j->write_ms, keep, g);
}

/* "dxl-recovery-<n>" / "dxl-ckpt-<n>": 1 / 2 and *node; 0 for other groups */
static int cursor_kind(const char *g, uint32_t *node)
{
	static const char *const pre[] = {"dxl-recovery-", "dxl-ckpt-"};
	for (int k = 0; k < 2; k++) {
		size_t n = strlen(pre[k]);
		char *end;
		if (strncmp(g, pre[k], n) || !g[n])
			continue;
		unsigned long v = strtoul(g + n, &end, 10);
		if (*end || v == 0 || v > UINT32_MAX)
			return 0;
		*node = (uint32_t)v;
		return k + 1;
	}
	return 0;
}

static bool has(const uint32_t *v, size_t n, uint32_t x)
{
	for (size_t k = 0; k < n; k++)
		if (v[k] == x)
			return true;
	return false;
}

void dxl_rcvm_prune_decide(struct dxl_rcv_watch *w, const struct dxl_rcvm_prune_in *in,
			   const struct dxl_cursor_info *v, uint32_t n, const char **why,
			   uint64_t *age)
{
	for (uint32_t k = 0; k < n; k++) {
		uint32_t node = 0;
		int kind = cursor_kind(v[k].group, &node);
		why[k] = NULL;
		age[k] = 0;
		if (!kind || node == in->self)
			continue;
		bool member = has(in->members, in->nmembers, node);
		if (kind == 2 && !member) {
			why[k] = "not a member of the shard";
		} else if (kind == 1 && member) {
			why[k] = "a member of the shard (it caught up)";
		} else if (kind == 1) {
			/* its age: how long this node has seen it unchanged
			 * (ZooKeeper's mtime compared for equality only: a
			 * skew between this host's clock and ZooKeeper's
			 * neither shortens nor lengthens the TTL) */
			age[k] = dxl_rcv_watch_age(w, node, v[k].mtime_ms, v[k].next_ts, in->now_ms);
			if (!has(in->live, in->nlive, node) && age[k] >= in->ttl_ms)
				why[k] = "its node is not live and did not set it for recovery.need_cursor_ttl_ms";
		}
	}
	dxl_rcv_watch_sweep(w);
}

/* the primary of a shard: cursors of nodes that no longer need them go */
static void prune_cursors(struct dxl_rcvm *m, uint32_t i, const struct dxl_rcvm_tick *t)
{
	uint32_t shard = shard_of(m, i);
	struct dxl_cursor_info *v = NULL;
	uint32_t n = 0;
	if (dxl_cursor_list(t->zk, shard, &v, &n)) {
		DXL_DEBUG("event=cursors_unknown shard=%u msg=\"%s\"", shard, dxl_errmsg());
		return;
	}
	const char **why = calloc(n + 1, sizeof(*why));
	uint64_t *age = calloc(n + 1, sizeof(*age));
	uint32_t members[DXL_CONFIG_MAX_REPLICAS], *live = NULL;
	struct dxl_rcvm_prune_in in = {
		.self = m->cfg.node_id, .ttl_ms = m->cfg.need_ttl_ms, .now_ms = t->now_ms,
		.members = members,
		.nmembers = dxl_cluster_shard_members(
			t->conf ? dxl_cluster_config_shard(t->conf, shard) : NULL, members),
	};
	/* the live nodes, when a need cursor could be a dead node's */
	bool need_live = false;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t node = 0;
		need_live |= cursor_kind(v[k].group, &node) == 1 && node != in.self &&
			     !has(members, in.nmembers, node);
	}
	struct dxl_member_list ml = {0};
	bool ok = why && age;
	if (ok && need_live) {
		ok = dxl_member_list(t->zk, &ml) == 0 && (live = calloc(ml.n + 1, sizeof(*live)));
		for (size_t x = 0; ok && x < ml.n; x++)
			live[in.nlive++] = ml.v[x].node_id;
		in.live = live;
	}
	if (ok)
		dxl_rcvm_prune_decide(&m->rc[i].need_watch, &in, v, n, why, age);
	for (uint32_t k = 0; ok && k < n; k++) {
		if (!why[k])
			continue;
		uint32_t node = 0;
		int kind = cursor_kind(v[k].group, &node);
		int dret = dxl_cursor_delete(t->zk, v[k].group, shard);
		if (dret && dret != DXL_E_NOENT) {
			DXL_DEBUG("event=cursor_drop_failed shard=%u group=%s msg=\"%s\"", shard,
				  v[k].group, dxl_errmsg());
			continue;
		}
		m->rc[i].st.cursors_dropped++;
		DXL_WARN("event=%s shard=%u group=%s node=%u next_ts=%" PRIu64 " unchanged_ms=%" PRIu64
			 " msg=\"%s: retention by age no longer keeps the log for it%s\"",
			 kind == 1 ? "need_cursor_dropped" : "ckpt_cursor_dropped", shard, v[k].group,
			 node, v[k].next_ts, age[k], why[k],
			 kind == 1 ? " (if it comes back it takes a state transfer)" : "");
	}
	if (need_live)
		dxl_member_list_free(&ml);
	free(live);
	free(why);
	free(age);
	free(v);
}

uint32_t dxl_rcvm_cap_groups(const struct dxl_cursor_info *v, uint32_t n, uint64_t to_ts,
			     char *buf, size_t cap)
{
	static const char *const what[] = {"stale", "transfer", "no_rebuild"};
	size_t off = 0;
	uint32_t transfers = 0;
	buf[0] = 0;
	for (uint32_t k = 0; k < n; k++) {
		if (v[k].next_ts > to_ts)
			continue;
		uint32_t node;
		int kind = cursor_kind(v[k].group, &node);
		transfers += kind == 1;
		int w = snprintf(buf + off, cap - off, "%s%s:%s", off ? "," : "", v[k].group,
				 what[kind]);
		if (w < 0 || (size_t)w >= cap - off) {
			buf[off] = 0; /* what fits */
			break;
		}
		off += (size_t)w;
	}
	if (!off)
		snprintf(buf, cap, "none");
	return transfers;
}

void dxl_rcvm_cap_passed(struct dxl_rcvm *m, uint32_t i, struct dxl_zk *zk, uint64_t to_ts,
			 char *buf, size_t cap)
{
	struct dxl_cursor_info *v = NULL;
	uint32_t n = 0;
	snprintf(buf, cap, "unknown");
	if (!zk || dxl_cursor_list(zk, shard_of(m, i), &v, &n)) {
		dxl_err_clear();
		return;
	}
	dxl_rcvm_cap_groups(v, n, to_ts, buf, cap);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t node;
		if (v[k].next_ts <= to_ts && cursor_kind(v[k].group, &node) == 1)
			DXL_WARN("event=retention_cap_transfer shard=%u node=%u need_ts=%" PRIu64
				 " reclaimed_to_ts=%" PRIu64
				 " msg=\"log.retention_bytes reclaimed records node %u still needs while it"
				 " catches up: it takes a full state transfer (a larger log.retention_bytes,"
				 " or log.ring_size, keeps a node this far behind)\"",
				 shard_of(m, i), node, v[k].next_ts, to_ts, node);
	}
	free(v);
}

void dxl_rcvm_tick(struct dxl_rcvm *m, uint32_t i, const struct dxl_rcvm_tick *t)
{
	struct rc *rc = &m->rc[i];
	uint32_t shard = shard_of(m, i);
	if (m->ck.running && m->ck.i == i && atomic_load(&m->ck.done))
		ck_finish(m, t);
	if (!m->tables[i])
		return;
	if (!t->member && rc->ckpt_set && t->zk) {
		char g[64];
		ckpt_group(m, g, sizeof(g));
		int ret = dxl_cursor_delete(t->zk, g, shard);
		if (!ret || ret == DXL_E_NOENT)
			rc->ckpt_set = false;
	}
	if (t->primary && t->zk && t->now_ms - rc->last_prune_ms >= PRUNE_PERIOD_MS) {
		rc->last_prune_ms = t->now_ms;
		prune_cursors(m, i, t);
	}
	if (!t->member || !t->may_start || !m->cfg.checkpoint_ms || m->ck.running ||
	    m->x.running || !dxl_rcvm_store_ok(m, i))
		return;
	if (!rc->last_ckpt_ms)
		rc->last_ckpt_ms = t->now_ms; /* the first one a period after start */
	if (t->now_ms - rc->last_ckpt_ms < m->cfg.checkpoint_ms)
		return;
	rc->last_ckpt_ms = t->now_ms;
	/* the start position: per ring, the first record whose effects may
	 * not be in the store yet (dxl_tables_applied_pos: a backup's applier,
	 * a primary's durable write-backs), read here (this thread applies and
	 * moves the heads). Not the heads: a cursor at the heads would keep
	 * everything the log holds, and the next checkpoint would start there
	 * again -- retention by age held for ever */
	const struct dxl_logstore *ls = dxl_shard_logstore(m->shards[i]);
	struct ckjob *j = &m->ck;
	memset(j, 0, sizeof(*j));
	j->m = m;
	j->i = i;
	j->nrings = dxl_logstore_nrings(ls);
	j->ring_size = dxl_logstore_ring_size(ls);
	j->start = calloc(j->nrings, sizeof(*j->start));
	if (!j->start)
		return;
	for (uint32_t r = 0; r < j->nrings; r++) {
		if (ck_start(ls, r, dxl_tables_applied_pos(m->tables[i], r), &j->start[r],
			     &j->start_ts)) {
			dxl_err_clear();
			free(j->start);
			j->start = NULL;
			return;
		}
	}
	/* the first checkpoint of this run: the log from its start is kept
	 * from now on (the cursor set before it is written, in this thread,
	 * before the next retention pass), or a write that takes longer than
	 * log.retention_ms on a loaded machine finds its start reclaimed, every
	 * time. Later ones: the previous checkpoint's cursor is older than
	 * this start and keeps it already */
	if (!rc->ckpt_set && t->zk) {
		char g[64];
		ckpt_group(m, g, sizeof(g));
		uint64_t keep = keep_ts(ls, j->start, j->nrings);
		if (dxl_cursor_set(t->zk, g, shard, keep, DXL_ZK_VERSION_ANY, NULL)) {
			DXL_WARN("event=ckpt_cursor_failed shard=%u msg=\"%s\"", shard, dxl_errmsg());
		} else {
			rc->ckpt_set = true;
			rc->ckpt_ts = keep;
		}
	}
	j->t0_ms = dxl_now_ms();
	if (pthread_create(&j->th, NULL, ck_main, j)) {
		free(j->start);
		j->start = NULL;
		return;
	}
	j->running = true;
	DXL_DEBUG("event=checkpoint_started shard=%u", shard);
}
