/* txn.c -- workers and transactions: hybrid OCC in the phases of DrTM+H
 * (include/dxl/txn.h, docs/transactions.md) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/endian.h"
#include "coordinator/coord_internal.h"

/* ---- workers -------------------------------------------------------------------- */

struct nqp { /* a QP to one node's RPC ctx (one-sided ops use it too) */
	uint32_t node;
	char addr[DXL_FABRIC_ADDR_MAX];
	struct dxl_qp *qp;
};

struct pend { /* an append waiting for its result, in append order */
	struct dxl_txn *t; /* NULL: a background abort marker (und) */
	uint64_t ts;
	uint64_t gen; /* t->gen when appended: a result for an older run is dropped */
	uint32_t idx; /* in t->lrec */
	uint64_t txn; /* background marker: its transaction */
};

/*
 * A record of an aborted transaction that is not decided yet: an abort
 * marker could not be written after it within log_unavail_ms (or a marker
 * that may be in the log). The worker keeps appending markers for it
 * (dxl_coord_worker_poll) until one is acknowledged; then the record and
 * every marker sent for it are decided (issue 20: an undecided record
 * holds its ring's watermark, and every backup's applier, for good).
 */
struct und {
	uint32_t shard;
	uint64_t txn, ts;
	bool inflight; /* a background marker for txn is pending */
};

struct wlog { /* the worker's writer of one shard */
	struct dxl_log_writer *lw;
	struct pend *q;
	uint32_t qcap, head, n;
};

struct stats {
	uint64_t committed, aborted, conflicts, unavail;
	uint64_t onesided_reads, rpc_reads, cache_hits, cache_misses, log_appends;
	uint64_t wb_lock_lost;
};

struct dxl_coord_worker {
	struct dxl_coord *c;
	/* coordinators whose transactions held locks we met (resolve.c) */
	uint32_t suspects[8];
	uint32_t nsuspects;
	uint64_t last_resolve_ms;
	uint32_t idx;
	uint32_t nco;
	struct dxl_ctx *ctx;
	struct dxl_sched *sched;
	struct dxl_rpc *rpc;
	struct dxl_mr *mr;
	uint8_t *scratch;            /* nco * COORD_SCRATCH, registered */
	struct dxl_txn **txns;       /* per coroutine id */
	struct nqp *qps;
	uint32_t nqps, qcap;
	/* replaced QPs: other coroutines may still be inside a call on one
	 * (it fails). Freed once no coroutine that could hold it is left: a
	 * QP retired at qepoch E can only be held by a transaction (or a
	 * settle, a resolution) that started before E (qp_reclaim) */
	struct dead_qp {
		struct dxl_qp *qp;
		uint64_t retired;
	} *dead_qps;
	uint32_t ndead, deadcap;
	uint64_t qepoch;
	uint64_t resolve_qe;         /* a resolution in progress: its start */
	bool in_resolve;
	struct wlog *logs;           /* per shard */
	uint32_t nlogs;
	struct und *und;             /* records not decided yet (struct und) */
	uint32_t nund, undcap;
	uint64_t und_next_ms;        /* next background marker round */
	struct stats st;             /* written by the worker, read by anyone */
	uint64_t rng;
	/* settles whose first attempt failed (release_all, commit_phase) */
	struct settle *settles;
	uint32_t nsettle, settlecap;
	uint64_t settle_gen; /* +1 when the queue is dropped (a renewal) */
	bool settling;
	struct dxl_txn *settler;     /* the handle settles run with (own scratch) */
	uint32_t inc;                /* the coordinator's registration it works for */
};

static __thread struct dxl_coord_worker *tl_worker;

struct dxl_coord_worker *dxl_coord_worker_self(void)
{
	return tl_worker;
}

static int worker_settle_init(struct dxl_coord_worker *w);
static void worker_settle_free(struct dxl_coord_worker *w);

int dxl_coord_worker_new(struct dxl_coord *c, uint32_t ncoroutines,
			 struct dxl_coord_worker **out)
{
	if (!c || !out || !ncoroutines || ncoroutines > 256)
		return dxl_err_set(DXL_E_INVAL, "dxl_coord_worker_new: %u coroutines (1..256)",
				   ncoroutines);
	pthread_mutex_lock(&c->mu);
	uint32_t idx = COORD_MAX_WORKERS;
	for (uint32_t i = 0; i < COORD_MAX_WORKERS; i++)
		if (!c->workers[i]) {
			idx = i;
			break;
		}
	if (idx == COORD_MAX_WORKERS) {
		pthread_mutex_unlock(&c->mu);
		return dxl_err_set(DXL_E_FULL, "coordinator %u has %u workers already", c->id,
				   COORD_MAX_WORKERS);
	}
	struct dxl_coord_worker *w = calloc(1, sizeof(*w));
	if (!w) {
		pthread_mutex_unlock(&c->mu);
		return dxl_err_set(DXL_E_NOMEM, "worker");
	}
	c->workers[idx] = w; /* reserved */
	pthread_mutex_unlock(&c->mu);
	w->c = c;
	w->idx = idx;
	w->nco = ncoroutines;
	w->inc = (uint32_t)atomic_load(&c->inc);
	w->rng = dxl_now_ns() ^ ((uint64_t)c->id << 32) ^ idx;
	int ret = dxl_ctx_new(c->f, idx, &w->ctx);
	struct dxl_sched_cfg sc;
	dxl_sched_cfg_init(&sc);
	sc.n_coroutines = ncoroutines + 1;
	sc.idle_wait_ms = 5;
	if (!ret)
		ret = dxl_sched_new(&sc, w->ctx, &w->sched);
	if (!ret)
		ret = dxl_rpc_new(w->sched, NULL, &w->rpc);
	/* one scratch per coroutine slot, and the settler's */
	size_t sbytes = (size_t)(ncoroutines + 2) * COORD_SCRATCH;
	if (!ret) {
		w->scratch = aligned_alloc(4096, sbytes);
		w->txns = calloc(ncoroutines + 1, sizeof(*w->txns));
		if (!w->scratch || !w->txns || worker_settle_init(w))
			ret = dxl_err_set(DXL_E_NOMEM, "worker scratch");
	}
	if (!ret) {
		memset(w->scratch, 0, sbytes);
		ret = dxl_mr_reg(c->f, w->scratch, sbytes, DXL_MR_LOCAL_WRITE, &w->mr);
	}
	if (ret) {
		dxl_coord_worker_delete(&w);
		return ret;
	}
	tl_worker = w;
	*out = w;
	return 0;
}

static void worker_free_txns(struct dxl_coord_worker *w);

void dxl_coord_worker_delete(struct dxl_coord_worker **wp)
{
	struct dxl_coord_worker *w = wp ? *wp : NULL;
	if (!w)
		return;
	/* records not decided yet: a last try (2 s) to mark them */
	for (int k = 0; k < 200 && w->nund; k++) {
		w->und_next_ms = 0;
		dxl_coord_worker_poll(w);
		if (w->nund)
			usleep(10000);
	}
	if (w->nund)
		DXL_WARN("event=coord_undecided_left worker=%u records=%u msg=\"left for resolution\"",
			 w->idx, w->nund);
	free(w->und);
	worker_settle_free(w);
	for (uint32_t s = 0; s < w->nlogs; s++) {
		/* a last watermark past every decided record: the next holder
		 * of the slot finds nothing in doubt */
		if (w->logs[s].lw) {
			struct dxl_log_writer_result res[16];
			for (int k = 0; k < 50 && dxl_log_writer_pending(w->logs[s].lw); k++)
				dxl_log_writer_poll(w->logs[s].lw, res, 16, 10);
			/* retried across a reopen (a new epoch fails a flush):
			 * committed records above the watermark of a ring whose
			 * writer is gone are never applied by the backups */
			int ret = DXL_E_STATE;
			uint64_t end = dxl_now_ms() + 10000;
			while (dxl_log_writer_hold(w->logs[s].lw) == UINT64_MAX &&
			       (ret = dxl_log_writer_flush(w->logs[s].lw, 2000)) &&
			       ret != DXL_E_STATE && dxl_now_ms() < end)
				dxl_log_writer_poll(w->logs[s].lw, res, 16, 100);
			if (ret)
				DXL_WARN("event=coord_final_flush_failed shard=%u msg=\"%s\"", s,
					 dxl_errmsg());
		}
		dxl_log_writer_delete(&w->logs[s].lw);
		free(w->logs[s].q);
	}
	free(w->logs);
	for (uint32_t i = 0; i < w->nqps; i++)
		dxl_qp_delete(&w->qps[i].qp);
	free(w->qps);
	for (uint32_t i = 0; i < w->ndead; i++)
		dxl_qp_delete(&w->dead_qps[i].qp);
	free(w->dead_qps);
	dxl_ctx_delete(&w->ctx); /* before the rpc (rpc.h) */
	dxl_rpc_delete(&w->rpc);
	dxl_sched_delete(&w->sched);
	dxl_mr_dereg(&w->mr);
	free(w->scratch);
	worker_free_txns(w);
	free(w->txns);
	pthread_mutex_lock(&w->c->mu);
	w->c->workers[w->idx] = NULL;
	pthread_mutex_unlock(&w->c->mu);
	if (tl_worker == w)
		tl_worker = NULL;
	free(w);
	*wp = NULL;
}

int dxl_coord_worker_spawn(struct dxl_coord_worker *w, dxl_co_fn fn, void *arg)
{
	if (!w || !fn)
		return dxl_err_set(DXL_E_INVAL, "dxl_coord_worker_spawn: NULL argument");
	int ret = dxl_sched_spawn(w->sched, fn, arg, NULL);
	if (ret == DXL_E_AGAIN)
		return dxl_err_set(DXL_E_FULL, "every coroutine slot of the worker is busy");
	return ret;
}

int dxl_coord_worker_run(struct dxl_coord_worker *w)
{
	return dxl_sched_run(w->sched);
}

static void st_add(uint64_t *p, uint64_t n)
{
	__atomic_fetch_add(p, n, __ATOMIC_RELAXED);
}

void dxl_coord_stats(const struct dxl_coord *c, struct dxl_coord_stats *out)
{
	memset(out, 0, sizeof(*out));
	struct dxl_coord *cc = (struct dxl_coord *)c;
	pthread_mutex_lock(&cc->mu);
	for (uint32_t i = 0; i < COORD_MAX_WORKERS; i++) {
		struct dxl_coord_worker *w = cc->workers[i];
		if (!w)
			continue;
#define LD(f) __atomic_load_n(&w->st.f, __ATOMIC_RELAXED)
		out->committed += LD(committed);
		out->aborted += LD(aborted);
		out->conflicts += LD(conflicts);
		out->unavail += LD(unavail);
		out->onesided_reads += LD(onesided_reads);
		out->rpc_reads += LD(rpc_reads);
		out->cache_hits += LD(cache_hits);
		out->cache_misses += LD(cache_misses);
		out->log_appends += LD(log_appends);
		out->wb_lock_lost += LD(wb_lock_lost);
#undef LD
	}
	out->resolved = atomic_load(&cc->resolved);
	out->view_refreshes = atomic_load(&cc->refreshes);
	out->views_live = (uint64_t)atomic_load(&cc->views_live);
	pthread_mutex_unlock(&cc->mu);
}

static bool txn_holds_qps(const struct dxl_txn *t);
static uint64_t txn_qe(const struct dxl_txn *t);

/* qp_reclaim -- free the retired QPs no running transaction, settle or
 * resolution can hold any more (each started after the QP was retired) */
static void qp_reclaim(struct dxl_coord_worker *w)
{
	if (!w->ndead)
		return;
	uint64_t low = UINT64_MAX;
	for (uint32_t i = 0; w->txns && i <= w->nco; i++)
		if (w->txns[i] && txn_holds_qps(w->txns[i]))
			low = DXL_MIN(low, txn_qe(w->txns[i]));
	if (w->settling && w->settler)
		low = DXL_MIN(low, txn_qe(w->settler));
	if (w->in_resolve)
		low = DXL_MIN(low, w->resolve_qe);
	for (uint32_t i = 0; i < w->ndead;) {
		if (w->dead_qps[i].retired <= low) {
			dxl_qp_delete(&w->dead_qps[i].qp);
			w->dead_qps[i] = w->dead_qps[--w->ndead];
		} else {
			i++;
		}
	}
}

void coord_worker_resolving(struct dxl_coord_worker *w, bool on)
{
	w->in_resolve = on;
	w->resolve_qe = w->qepoch;
	if (!on)
		qp_reclaim(w);
}

/* the QP to a node's RPC ctx, connected on first use (and again after an
 * error or an address change) */
static int node_qp(struct dxl_coord_worker *w, const struct view_shard *vs,
		   struct dxl_qp **out)
{
	struct nqp *e = NULL;
	for (uint32_t i = 0; i < w->nqps; i++)
		if (w->qps[i].node == vs->primary) {
			e = &w->qps[i];
			break;
		}
	if (!e) {
		if (w->nqps == w->qcap) {
			uint32_t ncap = w->qcap ? 2 * w->qcap : 8;
			struct nqp *n = realloc(w->qps, ncap * sizeof(*n));
			if (!n)
				return dxl_err_set(DXL_E_NOMEM, "worker QPs");
			w->qps = n;
			w->qcap = ncap;
		}
		e = &w->qps[w->nqps++];
		memset(e, 0, sizeof(*e));
		e->node = vs->primary;
	}
	if (e->qp && (strcmp(e->addr, vs->addr) || dxl_qp_state(e->qp) != DXL_QP_RTS)) {
		dxl_rpc_forget_qp(w->rpc, e->qp);
		if (w->ndead == w->deadcap) {
			uint32_t nc = w->deadcap ? 2 * w->deadcap : 8;
			struct dead_qp *n = realloc(w->dead_qps, nc * sizeof(*n));
			if (!n)
				return dxl_err_set(DXL_E_NOMEM, "worker QPs");
			w->dead_qps = n;
			w->deadcap = nc;
		}
		w->dead_qps[w->ndead++] = (struct dead_qp){.qp = e->qp, .retired = ++w->qepoch};
		e->qp = NULL;
		qp_reclaim(w);
	}
	if (!e->qp) {
		int ret = dxl_qp_connect(w->ctx, vs->addr, vs->rpc_ctx, &e->qp);
		if (ret) {
			dxl_err_prefix("node %u at %s", vs->primary, vs->addr);
			return ret;
		}
		snprintf(e->addr, sizeof(e->addr), "%s", vs->addr);
	}
	*out = e->qp;
	return 0;
}

/* ---- the log: one writer per shard and worker ----------------------------------- */

static int wlog_get(struct dxl_coord_worker *w, uint32_t shard, struct wlog **out)
{
	if (shard >= w->nlogs) {
		uint32_t n = shard + 1;
		struct wlog *l = realloc(w->logs, n * sizeof(*l));
		if (!l)
			return dxl_err_set(DXL_E_NOMEM, "worker writers");
		memset(l + w->nlogs, 0, (n - w->nlogs) * sizeof(*l));
		w->logs = l;
		w->nlogs = n;
	}
	struct wlog *l = &w->logs[shard];
	if (!l->lw) {
		struct dxl_log_writer_cfg lc;
		dxl_log_writer_cfg_init(&lc);
		lc.shard = shard;
		lc.unavail_ms = w->c->cfg.log_unavail_ms;
		/* a member that stops answering (a paused or dead primary) must
		 * be noticed quickly: a new primary's promotion gate waits for
		 * this writer's watermark, which it writes only after reopening
		 * under the new configuration -- and it learns of that one only
		 * when an append or heartbeat to the old members times out */
		lc.fabric_timeout_ms = DXL_MIN(w->c->cfg.fabric_timeout_ms, 400u);
		lc.max_inflight = 64;
		lc.hold_until_decided = true;
		lc.no_resend_on_new_primary = true;
		lc.wall_ms = w->c->cfg.wall_ms;
		int ret = dxl_log_writer_new(w->c->zk, &lc, &l->lw);
		if (ret) {
			dxl_err_prefix("log writer of shard %u", shard);
			return ret;
		}
		if (!l->q) {
			l->qcap = lc.max_queue;
			l->q = calloc(l->qcap, sizeof(*l->q));
			if (!l->q) {
				dxl_log_writer_delete(&l->lw);
				return dxl_err_set(DXL_E_NOMEM, "worker writer queue");
			}
		}
	}
	*out = l;
	return 0;
}

/* ---- transactions ----------------------------------------------------------------- */

enum { W_NONE = 0 }; /* op->wop: 0 or a dxl_ws_op */

struct op {
	uint32_t table, shard;
	uint64_t key;
	const struct view_table *vt;
	/* E */
	bool read;       /* the caller read it, its value or its existence
			    (validated: under the lock if written, else by V) */
	bool fetched;    /* E done: exists/slot/version known */
	bool exists;
	uint64_t slot;
	uint64_t version; /* the record's; absent: its tombstone's (0: none
			     or not known: a one-sided miss, until V) */
	uint32_t inc;
	uint32_t vlen;
	size_t voff;     /* value read, in the arena */
	/* writes */
	int wop;         /* 0 or enum dxl_ws_op */
	uint32_t wlen;
	size_t woff;
	/* L / Log / C */
	bool locked;
	uint64_t lock_version; /* version under the lock */
	uint64_t new_version;
	uint64_t rec_ts;
};

struct dxl_txn {
	struct dxl_coord_worker *w;
	uint32_t co_id;
	uint64_t gen;            /* runs of this handle */
	struct view *v;
	uint64_t id;
	bool active;
	uint32_t nops;
	struct op ops[DXL_TXN_MAX_OPS];
	uint8_t *arena;
	size_t used, cap;
	/* the Log phase */
	uint32_t log_wait;       /* appends without a result yet */
	/* the Log phase: one record per written shard, then abort markers */
	struct lrec {
		uint32_t shard;
		uint64_t ts;
		uint32_t primary; /* the shard's primary when the record was acked */
		int status;
		bool done, maybe, marker;
		bool orphan; /* its writer died with the session: no marker can
				follow it in its ring -- resolution decides */
	} lrec[2 * DXL_TXN_MAX_OPS];
	uint32_t nlrec;
	/* shards whose record of this (aborted) transaction is not decided
	 * (log_abort): their locks are kept -- released once the worker's
	 * background marker is acknowledged (KEEP_UND), or left to the
	 * resolution of its coordinator id (KEEP_RESOLVE: its writer died with
	 * the session) -- so that whoever decides the record later finds them
	 * (issue 20 review: released early, a resolution that judged the
	 * record committed applied it over a later writer) */
	struct keep {
		uint32_t shard;
		enum { KEEP_UND = 1, KEEP_RESOLVE = 2 } how;
	} keep[DXL_LOG_WRITER_MAX_PARTS];
	uint32_t nkeep;
	/* the largest commit timestamp of a state it read, overwrote or
	 * replaced (records, tombstones): its own are larger (issue 20) */
	uint64_t seen_ts;
	/* the tag of its current batch of one-sided requests (wr_ids): a
	 * completion of an older batch (left behind by an error) is stale */
	uint64_t wtag;
	struct dxl_txn_info info;
	uint8_t *scr;            /* this coroutine's registered scratch */
	uint64_t qe;             /* w->qepoch when it began (qp_reclaim) */
	uint32_t inc;            /* w->inc when it began: its records' writers */
};

/* a state of commit timestamp ts was seen (read, locked, replaced) */
static void seen(struct dxl_txn *t, uint64_t ts)
{
	if (ts > t->seen_ts)
		t->seen_ts = ts;
}

/* the locks of shard are kept (struct keep) */
static void keep_add(struct dxl_txn *t, uint32_t shard, int how)
{
	for (uint32_t i = 0; i < t->nkeep; i++)
		if (t->keep[i].shard == shard) {
			if (how == KEEP_RESOLVE)
				t->keep[i].how = KEEP_RESOLVE;
			return;
		}
	if (t->nkeep < DXL_ARRAY_SIZE(t->keep))
		t->keep[t->nkeep++] = (struct keep){.shard = shard, .how = how};
}

static int keep_how(const struct dxl_txn *t, uint32_t shard)
{
	for (uint32_t i = 0; i < t->nkeep; i++)
		if (t->keep[i].shard == shard)
			return t->keep[i].how;
	return 0;
}

/*
 * txn_unregistered -- t began under a registration of its coordinator that
 * is over (its session expired; the coordinator registered again under a
 * new id, in this worker or another): its id's locks belong to resolution
 * now (other coordinators may have released them and committed over them).
 * It must not log, nor write back: it aborts and leaves its locks to the
 * resolution of its id (review of issue 12, #2: a zombie commit).
 */
static bool txn_unregistered(const struct dxl_txn *t)
{
	return t->inc != t->w->inc || t->inc != (uint32_t)atomic_load(&t->w->c->inc);
}

/* every lock t holds is left to the resolution of its id */
static void leave_locks(struct dxl_txn *t, const char *why)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < t->nops; i++) {
		struct op *o = &t->ops[i];
		if (!o->locked)
			continue;
		o->locked = false;
		n++;
		DXL_INFO("event=coord_lock_left txn=0x%" PRIx64 " shard=%u key=%" PRIu64
			 " msg=\"%s: left to resolution\"",
			 t->id, o->shard, o->key, why);
	}
	if (n)
		DXL_WARN("event=coord_txn_old_registration txn=0x%" PRIx64 " locks=%u msg=\"%s: its locks are left to resolution\"",
			 t->id, n, why);
}

static bool txn_holds_qps(const struct dxl_txn *t)
{
	return t->active;
}

static uint64_t txn_qe(const struct dxl_txn *t)
{
	return t->qe;
}

static void worker_free_txns(struct dxl_coord_worker *w)
{
	for (uint32_t i = 0; w->txns && i <= w->nco; i++)
		if (w->txns[i]) {
			coord_view_put(w->c, w->txns[i]->v);
			free(w->txns[i]->arena);
			free(w->txns[i]);
		}
}

static int arena_put(struct dxl_txn *t, const void *p, uint32_t len, size_t *off)
{
	if (t->used + len > t->cap) {
		size_t ncap = DXL_MAX(t->cap ? 2 * t->cap : 16384, t->used + len);
		uint8_t *n = realloc(t->arena, ncap);
		if (!n)
			return dxl_err_set(DXL_E_NOMEM, "transaction values");
		t->arena = n;
		t->cap = ncap;
	}
	*off = t->used;
	if (len)
		memcpy(t->arena + t->used, p, len);
	t->used += len;
	return 0;
}

static uint32_t lkey(const struct dxl_txn *t)
{
	return dxl_mr_lkey(t->w->mr);
}

/* a new batch of one-sided requests of t: its wr_id tag */
static uint64_t batch(struct dxl_txn *t)
{
	t->wtag = (t->wtag + 1) & DXL_CO_WRID_TAG_MAX;
	if (!t->wtag)
		t->wtag = 1;
	return t->wtag;
}

/*
 * wait_tag -- k completions of batch tag for the calling coroutine; those
 * of other batches (requests an early error left in flight, unsignalled
 * ones that failed) are dropped: counted toward this batch they returned
 * before its own requests were done, and a READ into scratch memory that
 * another batch reuses landed later (a "record" shifted by 8 bytes: issue
 * 20). Returns the failed count (the first failure's status in *st), < 0
 * on error. Then drains what is buffered already.
 */
static int wait_tag(int k, uint64_t tag, enum dxl_wc_status *st)
{
	int failed = 0;
	while (k > 0) {
		struct dxl_wc wc;
		int f = dxl_co_wait_completions(1, &wc, -1);
		if (f < 0)
			return f;
		uint64_t wt = 0;
		if (dxl_co_wrid_decode(wc.wr_id, NULL, &wt) || wt != tag)
			continue; /* stale: another batch's */
		if (f) {
			failed++;
			if (st && *st == DXL_WC_SUCCESS)
				*st = wc.status;
		}
		k--;
	}
	/* an unsignalled request of this batch that failed also produced a
	 * completion */
	while (dxl_co_completions_buffered() > 0) {
		struct dxl_wc wc;
		int f = dxl_co_wait_completions(1, &wc, 0);
		if (f < 0)
			break;
		uint64_t wt = 0;
		if (f > 0 && !dxl_co_wrid_decode(wc.wr_id, NULL, &wt) && wt == tag) {
			failed++;
			if (st && *st == DXL_WC_SUCCESS)
				*st = wc.status;
		}
	}
	return failed;
}

/* post chain (every wr_id of batch tag) and wait for its nsignaled
 * completions */
static int co_post_wait(struct dxl_qp *qp, struct dxl_wr *chain, int nsignaled, uint64_t tag,
			const char *what)
{
	struct dxl_wr *bad = NULL;
	int ret;
	for (;;) {
		ret = dxl_qp_post(qp, chain, &bad);
		if (ret != DXL_E_AGAIN)
			break;
		dxl_co_yield();
	}
	if (ret) {
		dxl_err_prefix("%s", what);
		return ret;
	}
	enum dxl_wc_status st = DXL_WC_SUCCESS;
	int failed = wait_tag(nsignaled, tag, &st);
	if (failed < 0)
		return failed;
	if (!failed)
		return 0;
	if (st == DXL_WC_REM_ACCESS_ERR)
		return dxl_err_set(DXL_E_ACCESS, "%s: remote access error (fenced: new epoch?)", what);
	return dxl_err_set(DXL_E_UNREACHABLE, "%s: %s", what, dxl_wc_status_str(st));
}

static void wr_read(struct dxl_wr *wr, void *local, uint32_t lk, uint32_t len,
		    uint64_t raddr, uint32_t rkey, bool signaled, uint64_t tag)
{
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = dxl_co_wrid(tag);
	wr->op = DXL_WR_READ;
	wr->flags = signaled ? DXL_WR_SIGNALED : 0;
	wr->local = local;
	wr->lkey = lk;
	wr->len = len;
	wr->remote_addr = raddr;
	wr->rkey = rkey;
}

static void wr_cas(struct dxl_wr *wr, uint64_t *local, uint32_t lk, uint64_t raddr,
		   uint32_t rkey, uint64_t cmp, uint64_t swp, bool signaled, uint64_t tag)
{
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = dxl_co_wrid(tag);
	wr->op = DXL_WR_CAS;
	wr->flags = signaled ? DXL_WR_SIGNALED : 0;
	wr->local = local;
	wr->lkey = lk;
	wr->len = 8;
	wr->remote_addr = raddr;
	wr->rkey = rkey;
	wr->compare_add = cmp;
	wr->swap = swp;
}

/* a one-sided failure or an RPC's "not here any more": look again */
static bool is_view_error(int err)
{
	return err == DXL_E_STALE || err == DXL_E_UNAVAIL || err == DXL_E_ACCESS ||
	       err == DXL_E_UNREACHABLE || err == DXL_E_TIMEDOUT;
}

/* an error of a phase before the commit point: a change of the
 * configuration (no serving primary, a promotion gate, a dead or fenced
 * member, a stale epoch) is DXL_E_UNAVAIL -- nothing of the transaction
 * happened; dxl_txn_run retries it by time (log_unavail_ms), and a client
 * tells it from contention (DXL_E_CONFLICT, retried max_tries times) by
 * the code alone */
static int phase_err(struct dxl_txn *t, int err, const char *phase)
{
	if (is_view_error(err)) {
		char msg[400];
		snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
		coord_mark_stale(t->w->c, msg);
		return dxl_err_set(DXL_E_UNAVAIL, "%s: %s (configuration changing: retry)", phase,
				   msg);
	}
	return err;
}

struct dxl_coord *coord_worker_coord(const struct dxl_coord_worker *w)
{
	return w->c;
}

static void settle_due_now(struct dxl_coord_worker *w, uint64_t txn);

void coord_note_holder(struct dxl_coord_worker *w, uint64_t holder)
{
	uint32_t id = (uint32_t)(holder >> 48);
	if (!holder)
		return;
	if (id == w->c->id) {
		/* our own: perhaps a release or write-back this worker
		 * still has to settle */
		settle_due_now(w, holder);
		return;
	}
	for (uint32_t i = 0; i < w->nsuspects; i++)
		if (w->suspects[i] == id)
			return;
	if (w->nsuspects < DXL_ARRAY_SIZE(w->suspects))
		w->suspects[w->nsuspects++] = id;
}

int coord_table_call(struct dxl_coord_worker *w, const struct view *v, uint32_t shard,
		     uint16_t op, struct dxl_table_req *req, struct dxl_table_rep *rep,
		     void *val, uint32_t cap)
{
	if (shard >= v->nshards || !v->shards[shard].ok)
		return dxl_err_set(DXL_E_UNAVAIL, "shard %u has no serving primary", shard);
	struct dxl_qp *qp;
	int ret = node_qp(w, &v->shards[shard], &qp);
	if (ret)
		return ret;
	req->shard = shard;
	req->epoch = v->epoch;
	return dxl_table_call(w->rpc, qp, op, req, rep, val, cap);
}

uint32_t coord_worker_suspects(struct dxl_coord_worker *w, uint32_t *ids, uint32_t cap,
			       uint64_t **last_ms)
{
	uint32_t n = DXL_MIN(w->nsuspects, cap);
	memcpy(ids, w->suspects, n * sizeof(ids[0]));
	*last_ms = &w->last_resolve_ms;
	return n;
}

void coord_worker_clear_suspects(struct dxl_coord_worker *w)
{
	w->nsuspects = 0;
}

static int table_rpc(struct dxl_txn *t, const struct op *o, uint16_t opc,
		     struct dxl_table_req *req, struct dxl_table_rep *rep, void *val,
		     uint32_t cap)
{
	req->table = o->table;
	return coord_table_call(t->w, t->v, o->shard, opc, req, rep, val, cap);
}

/* ---- E: reading a record ---------------------------------------------------------- */

struct bucket_arg {
	struct dxl_txn *t;
	const struct view_table *vt;
	struct dxl_qp *qp;
	bool cache_only; /* hybrid: a miss goes to the RPC path */
	bool missed;     /* read_bucket refused (cache_only): take the RPC */
};

static int read_bucket(void *arg, uint64_t off, void *buf)
{
	struct bucket_arg *a = arg;
	if (a->cache_only) {
		a->missed = true;
		return DXL_E_AGAIN; /* not an error: the caller takes the RPC */
	}
	uint8_t *local = a->t->scr + COORD_SCRATCH - DXL_INDEX_BUCKET_SIZE;
	struct dxl_wr wr;
	uint64_t tag = batch(a->t);
	wr_read(&wr, local, lkey(a->t), DXL_INDEX_BUCKET_SIZE, a->vt->st.index.addr + off,
		a->vt->st.index.rkey, true, tag);
	int ret = co_post_wait(a->qp, &wr, 1, tag, "index bucket READ");
	if (!ret)
		memcpy(buf, local, DXL_INDEX_BUCKET_SIZE);
	return ret;
}

/* READ the slot and check it; 1 = it holds key (live, incarnation as the
 * index said), 0 = it does not (stale location), < 0 error */
static int read_slot(struct dxl_txn *t, struct op *o, struct dxl_qp *qp, uint64_t slot,
		     uint16_t lossy_inc, bool check_inc, uint8_t *val, uint32_t cap)
{
	const struct view_table *vt = o->vt;
	uint32_t ss = vt->st.t.slot_size;
	uint8_t *local = t->scr;
	for (int tries = 0;; tries++) {
		struct dxl_wr wr;
		uint64_t tag = batch(t);
		wr_read(&wr, local, lkey(t), ss, vt->st.t.records.addr + slot * ss,
			vt->st.t.records.rkey, true, tag);
		int ret = co_post_wait(qp, &wr, 1, tag, "record READ");
		if (ret)
			return ret;
		struct dxl_record r;
		ret = dxl_record_read_check(local, ss, &r, val, cap);
		if (ret == DXL_E_AGAIN && tries < 64) {
			dxl_co_yield(); /* a write-back in progress */
			continue;
		}
		if (ret)
			return ret;
		if (!r.live || r.key != o->key ||
		    (check_inc && !dxl_index_inc_match(lossy_inc, r.inc)))
			return 0;
		o->slot = slot;
		o->version = r.version;
		o->inc = r.inc;
		o->vlen = r.len;
		seen(t, r.ts);
		return 1;
	}
}

static int exec_rpc(struct dxl_txn *t, struct op *o, uint8_t *val, uint32_t cap,
		    struct bucket_arg *ba)
{
	struct dxl_table_req req = {.key = o->key};
	struct dxl_table_rep rep;
	/* hybrid: refill the cache with the key's main bucket in the same
	 * round trip (DrTM+H: a miss costs one RPC, the next access is a hit) */
	uint8_t *bk = t->scr + COORD_SCRATCH - DXL_INDEX_BUCKET_SIZE;
	uint64_t boff = 0;
	bool refill = ba && ba->qp && t->w->c->cfg.mode == DXL_TXN_HYBRID;
	uint64_t tag = batch(t);
	if (refill) {
		boff = dxl_index_bucket_addr(&o->vt->st.ihdr, o->key);
		struct dxl_wr wr;
		wr_read(&wr, bk, lkey(t), DXL_INDEX_BUCKET_SIZE, o->vt->st.index.addr + boff,
			o->vt->st.index.rkey, true, tag);
		if (dxl_qp_post(ba->qp, &wr, NULL))
			refill = false;
	}
	int ret = table_rpc(t, o, DXL_RPC_ID_TABLE_LOOKUP, &req, &rep, val, cap);
	if (refill) {
		if (wait_tag(1, tag, NULL) == 0) {
			struct dxl_index_find f;
			if (dxl_index_bucket_find(&o->vt->st.ihdr, bk, o->key, &f) >= 0)
				dxl_loccache_fill(o->vt->lc, boff, bk);
			else
				DXL_WARN("event=coord_bad_bucket off=%" PRIu64 " addr=%" PRIx64 " len=%" PRIu64 " w0=%" PRIx64 " w1=%" PRIx64 " msg=\"%s\"", boff, o->vt->st.index.addr, o->vt->st.index.len, dxl_get_le64(bk), dxl_get_le64(bk + 8), dxl_errmsg());
		}
	}
	st_add(&t->w->st.rpc_reads, 1);
	if (ret == DXL_E_NOENT) {
		/* a versioned miss: the tombstone (0: none) */
		o->exists = false;
		o->version = rep.rec.version;
		seen(t, rep.rec.ts);
		return 0;
	}
	if (ret)
		return ret;
	o->exists = true;
	o->slot = rep.slot;
	o->version = rep.rec.version;
	o->inc = rep.rec.inc;
	o->vlen = rep.rec.len;
	seen(t, rep.rec.ts);
	return 0;
}

/* fetch o (exists, slot, version, value into val) from the primary */
static int exec_fetch(struct dxl_txn *t, struct op *o, uint8_t *val, uint32_t cap)
{
	enum dxl_txn_mode mode = t->w->c->cfg.mode;
	if (mode == DXL_TXN_TWOSIDED)
		return exec_rpc(t, o, val, cap, NULL);
	const struct view_shard *vs = &t->v->shards[o->shard];
	struct bucket_arg ba = {.t = t, .vt = o->vt, .cache_only = mode == DXL_TXN_HYBRID};
	int ret = node_qp(t->w, vs, &ba.qp);
	if (ret)
		return ret;
	unsigned flags = 0;
	for (int attempt = 0; attempt < 4; attempt++) {
		struct dxl_index_find f;
		ret = dxl_loccache_resolve(o->vt->lc, o->key, flags, read_bucket, &ba, &f);
		if (ret < 0 && ba.missed) {
			st_add(&t->w->st.cache_misses, 1);
			return exec_rpc(t, o, val, cap, &ba);
		}
		if (ret < 0)
			return ret;
		st_add(f.reads ? &t->w->st.cache_misses : &t->w->st.cache_hits, 1);
		if (f.result == DXL_INDEX_ABSENT) {
			o->exists = false;
			o->version = 0;
			return 0;
		}
		st_add(&t->w->st.onesided_reads, 1);
		ret = read_slot(t, o, ba.qp, f.slot, f.lossy_inc, true, val, cap);
		if (ret < 0)
			return ret;
		if (ret == 1) {
			o->exists = true;
			return 0;
		}
		/* stale: the key moved or was deleted since the bucket was cached */
		dxl_loccache_stale(o->vt->lc, o->key);
		if (mode == DXL_TXN_HYBRID)
			return exec_rpc(t, o, val, cap, &ba);
		flags = DXL_LOCCACHE_FRESH;
	}
	return dxl_err_set(DXL_E_CONFLICT, "table %u key %" PRIu64 ": location kept changing",
			   o->table, o->key);
}

/* ---- the handle ------------------------------------------------------------------- */

static int check_usable(struct dxl_txn *t)
{
	if (!t || !t->active)
		return dxl_err_set(DXL_E_INVAL, "the transaction is over (begin a new one)");
	return 0;
}

static void release_all(struct dxl_txn *t);

/*
 * worker_renew -- the coordinator registered again after its session
 * expired (coord_session_check): its old id, writer slots and locks belong
 * to resolution now. The worker's writers are dead: the records still
 * waiting for a result are failed as "maybe" (they may be in the log; no
 * abort marker can follow them in their ring any more), the writers are
 * deleted (new ones, new slots, at the next append), the settles of the old
 * id dropped.
 */
static void settles_drop(struct dxl_coord_worker *w);

static void worker_renew(struct dxl_coord_worker *w)
{
	uint32_t inc = (uint32_t)atomic_load(&w->c->inc);
	if (w->inc == inc)
		return;
	uint32_t failed = 0;
	for (uint32_t s = 0; s < w->nlogs; s++) {
		struct wlog *l = &w->logs[s];
		for (; l->n; l->n--, l->head = (l->head + 1) % l->qcap) {
			struct pend *p = &l->q[l->head];
			struct dxl_txn *t = p->t;
			if (!t || t->gen != p->gen || p->idx >= t->nlrec)
				continue;
			struct lrec *lr = &t->lrec[p->idx];
			lr->done = true;
			lr->status = DXL_E_STATE;
			lr->maybe = true;
			lr->orphan = true;
			if (t->log_wait)
				t->log_wait--;
			failed++;
		}
		dxl_log_writer_delete(&l->lw);
	}
	/* records still being marked (und): their markers cannot follow them
	 * in their rings any more -- resolution decides them */
	DXL_WARN("event=coord_worker_renewed coord=%u worker=%u records_in_flight=%u settles_dropped=%u undecided_dropped=%u",
		 (uint32_t)w->c->id, w->idx, failed, w->nsettle, w->nund);
	w->nund = 0;
	settles_drop(w);
	w->inc = inc;
}

int dxl_txn_begin(struct dxl_coord_worker *w, struct dxl_txn **out)
{
	struct dxl_co *co = dxl_co_self();
	if (!w || !out || !co || dxl_co_sched() != w->sched)
		return dxl_err_set(DXL_E_STATE, "dxl_txn_begin: not in a coroutine of this worker");
	uint32_t id = dxl_co_id(co) & 0xfffu; /* the slot index */
	if (id > w->nco)
		return dxl_err_set(DXL_E_STATE, "coroutine id %u out of range", id);
	struct dxl_txn *t = w->txns[id];
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t)
			return dxl_err_set(DXL_E_NOMEM, "transaction");
		t->w = w;
		t->co_id = id;
		t->scr = w->scratch + (size_t)id * COORD_SCRATCH;
		w->txns[id] = t;
	}
	if (t->active)
		dxl_txn_abort(t);
	/* a session that expired: register again, drop the old id's state */
	if (coord_session_check(w->c) == 0)
		worker_renew(w);
	/* t is not active: settles, and every few seconds the sweep for gone
	 * coordinators' locks */
	dxl_coord_worker_poll(w);
	t->gen++;
	t->qe = w->qepoch;
	t->inc = w->inc;
	qp_reclaim(w);
	coord_view_put(w->c, t->v); /* normally given back at the end already */
	t->v = coord_view_get(w->c);
	t->id = DXL_LOCK_OWNER(w->c->id, atomic_fetch_add(&w->c->seq, 1) + 1);
	t->active = true;
	t->nops = 0;
	t->used = 0;
	t->log_wait = 0;
	t->nlrec = 0;
	t->nkeep = 0;
	t->seen_ts = 0;
	memset(&t->info, 0, sizeof(t->info));
	t->info.id = t->id;
	*out = t;
	return 0;
}

struct dxl_txn *dxl_txn_last(struct dxl_coord_worker *w)
{
	struct dxl_co *co = dxl_co_self();
	uint32_t id = dxl_co_id(co) & 0xfffu;
	if (!w || !co || dxl_co_sched() != w->sched || id > w->nco)
		return NULL;
	return w->txns[id];
}

/* the op of (table, key), adding it if absent (fetching nothing yet) */
static int find_op(struct dxl_txn *t, uint32_t table, uint64_t key, struct op **out)
{
	for (uint32_t i = 0; i < t->nops; i++)
		if (t->ops[i].table == table && t->ops[i].key == key) {
			*out = &t->ops[i];
			return 0;
		}
	if (!t->v || !t->v->nshards)
		return dxl_err_set(DXL_E_UNAVAIL, "no configuration");
	uint32_t shard = dxl_txn_shard_of(key, t->v->nshards);
	const struct view_shard *vs = &t->v->shards[shard];
	if (!vs->ok) {
		coord_mark_stale(t->w->c, vs->why);
		return dxl_err_set(DXL_E_UNAVAIL, "%s", vs->why);
	}
	const struct view_table *vt = NULL;
	for (uint32_t i = 0; i < vs->ntables; i++)
		if (vs->tables[i].st.t.id == table)
			vt = &vs->tables[i];
	if (!vt)
		return dxl_err_set(DXL_E_INVAL, "unknown table %u (shard %u's primary %u has %u tables)",
				   table, shard, vs->primary, vs->ntables);
	if (t->nops == DXL_TXN_MAX_OPS)
		return dxl_err_set(DXL_E_INVAL, "over %d records in one transaction",
				   DXL_TXN_MAX_OPS);
	struct op *o = &t->ops[t->nops++];
	memset(o, 0, sizeof(*o));
	o->table = table;
	o->key = key;
	o->shard = shard;
	o->vt = vt;
	*out = o;
	return 0;
}

/* E for o if not done yet: fetch into the arena */
static int ensure_fetched(struct dxl_txn *t, struct op *o)
{
	if (o->fetched)
		return 0;
	uint32_t cap = o->vt->st.t.value_size;
	if (t->used + cap > t->cap) {
		size_t ncap = DXL_MAX(t->cap ? 2 * t->cap : 16384, t->used + cap);
		uint8_t *n = realloc(t->arena, ncap);
		if (!n)
			return dxl_err_set(DXL_E_NOMEM, "transaction values");
		t->arena = n;
		t->cap = ncap;
	}
	size_t off = t->used;
	int ret = exec_fetch(t, o, t->arena + off, cap);
	if (ret)
		return ret;
	o->voff = off;
	if (o->exists)
		t->used += o->vlen;
	o->fetched = true;
	return 0;
}

static int op_fail(struct dxl_txn *t, int err, const char *what)
{
	err = phase_err(t, err, what);
	if (err == DXL_E_CONFLICT)
		st_add(&t->w->st.conflicts, 1);
	else if (err == DXL_E_UNAVAIL)
		st_add(&t->w->st.unavail, 1);
	release_all(t);
	return err;
}

int dxl_txn_get(struct dxl_txn *t, uint32_t table, uint64_t key, void *buf,
		uint32_t cap, uint32_t *len)
{
	int ret = check_usable(t);
	if (ret)
		return ret;
	if ((!buf && cap) || !len)
		return dxl_err_set(DXL_E_INVAL, "dxl_txn_get: NULL buffer");
	struct op *o;
	if ((ret = find_op(t, table, key, &o)))
		return ret == DXL_E_UNAVAIL ? op_fail(t, ret, "get") : ret;
	if (o->wop) { /* read your own writes */
		if (o->wop == DXL_WS_DELETE)
			return dxl_err_set(DXL_E_NOENT, "table %u key %" PRIu64 ": deleted by this transaction",
					   table, key);
		if (o->wlen > cap)
			return dxl_err_set(DXL_E_TOOBIG, "value of %u bytes, room for %u", o->wlen, cap);
		memcpy(buf, t->arena + o->woff, o->wlen);
		*len = o->wlen;
		return 0;
	}
	if ((ret = ensure_fetched(t, o)))
		return op_fail(t, ret, "get");
	o->read = true;
	if (!o->exists)
		return dxl_err_set(DXL_E_NOENT, "table %u: no key %" PRIu64, table, key);
	if (o->vlen > cap)
		return dxl_err_set(DXL_E_TOOBIG, "table %u key %" PRIu64 ": value of %u bytes, room for %u",
				   table, key, o->vlen, cap);
	memcpy(buf, t->arena + o->voff, o->vlen);
	*len = o->vlen;
	return 0;
}

/* the lock word of o's record at the primary (RPC READ: any mode), and
 * whether the record is still the version E saw */
static int read_holder(struct dxl_txn *t, struct op *o, uint64_t *holder, bool *same)
{
	struct dxl_table_req req = {.slot = o->slot};
	struct dxl_table_rep rep;
	int ret = table_rpc(t, o, DXL_RPC_ID_TABLE_READ, &req, &rep, NULL, 0);
	if (ret && ret != DXL_E_TOOBIG)
		return ret;
	*holder = rep.holder;
	*same = rep.rec.live && rep.rec.key == o->key && rep.rec.version == o->version;
	return 0;
}

static int buffer_write(struct dxl_txn *t, uint32_t table, uint64_t key, int wop,
			const void *value, uint32_t len)
{
	int ret = check_usable(t);
	if (ret)
		return ret;
	if (len && !value)
		return dxl_err_set(DXL_E_INVAL, "NULL value");
	struct op *o;
	if ((ret = find_op(t, table, key, &o)))
		return ret == DXL_E_UNAVAIL ? op_fail(t, ret, "write") : ret;
	if (len > o->vt->st.t.value_size)
		return dxl_err_set(DXL_E_TOOBIG, "table %u: value of %u bytes, its value size is %u",
				   table, len, o->vt->st.t.value_size);
	/* the state of the key as this transaction sees it */
	bool exists;
	if (o->wop)
		exists = o->wop != DXL_WS_DELETE;
	else {
		if ((ret = ensure_fetched(t, o)))
			return op_fail(t, ret, "write");
		exists = o->exists;
		/* what the caller learns (exists or not) is a read: validated
		 * at commit like a value (issue 20) */
		o->read = true;
	}
	if (wop == DXL_WS_INSERT && exists) {
		if (!o->wop) {
			/* another transaction's insert is live (locked) from
			 * its lock phase on, before it may abort: "exists" only
			 * for a record nobody holds (issue 20) */
			uint64_t holder = 0;
			bool same = false;
			if ((ret = read_holder(t, o, &holder, &same)))
				return op_fail(t, ret, "insert");
			if (holder || !same) {
				coord_note_holder(t->w, holder);
				return op_fail(t, dxl_err_set(DXL_E_CONFLICT,
							      "table %u key %" PRIu64 ": %s (an insert not yet committed?)",
							      table, key, holder ? "locked" : "changed"),
					       "insert");
			}
		}
		return dxl_err_set(DXL_E_EXIST, "table %u: key %" PRIu64 " exists", table, key);
	}
	if (wop != DXL_WS_INSERT && !exists)
		return dxl_err_set(DXL_E_NOENT, "table %u: no key %" PRIu64, table, key);
	/* what the log will say: relative to the record at the primary */
	int eff = wop;
	if (o->exists && wop == DXL_WS_INSERT)
		eff = DXL_WS_UPDATE; /* deleted, then inserted again, here */
	if (!o->exists && wop == DXL_WS_UPDATE)
		eff = DXL_WS_INSERT; /* inserted here, then updated */
	if (!o->exists && wop == DXL_WS_DELETE)
		eff = W_NONE;        /* inserted here, then deleted: nothing (the
				        absence read stays: validated by V) */
	size_t off = 0;
	if (len && (ret = arena_put(t, value, len, &off)))
		return ret;
	o->wop = eff;
	o->woff = off;
	o->wlen = len;
	return 0;
}

int dxl_txn_put(struct dxl_txn *t, uint32_t table, uint64_t key, const void *value,
		uint32_t len)
{
	return buffer_write(t, table, key, DXL_WS_UPDATE, value, len);
}

int dxl_txn_insert(struct dxl_txn *t, uint32_t table, uint64_t key, const void *value,
		   uint32_t len)
{
	return buffer_write(t, table, key, DXL_WS_INSERT, value, len);
}

int dxl_txn_delete(struct dxl_txn *t, uint32_t table, uint64_t key)
{
	return buffer_write(t, table, key, DXL_WS_DELETE, NULL, 0);
}

/* ---- L: locking the write set ----------------------------------------------------- */

static bool nic_locks(const struct op *o)
{
	return o->vt->st.t.lock_mode == DXL_LOCKS_NIC;
}

static int unlock_one(struct dxl_txn *t, struct op *o)
{
	const struct view_shard *vs = &t->v->shards[o->shard];
	int ret;
	if (nic_locks(o)) {
		struct dxl_qp *qp;
		if ((ret = node_qp(t->w, vs, &qp)))
			return ret;
		uint64_t *res = (uint64_t *)(t->scr + COORD_SCRATCH - 8);
		struct dxl_wr wr;
		uint64_t tag = batch(t);
		*res = 0;
		wr_cas(&wr, res, lkey(t), o->vt->st.t.locks.addr + 8 * o->slot,
		       o->vt->st.t.locks.rkey, t->id, 0, true, tag);
		uint32_t *inj = &t->w->c->cfg.test_unlock_post_fail;
		uint32_t n = __atomic_load_n(inj, __ATOMIC_RELAXED);
		if (n && __atomic_compare_exchange_n(inj, &n, n - 1, false, __ATOMIC_RELAXED,
						     __ATOMIC_RELAXED))
			ret = dxl_err_set(DXL_E_STATE, "unlock CAS: QP in the error state (injected)");
		else
			ret = co_post_wait(qp, &wr, 1, tag, "unlock CAS");
		/* a local failure (the post refused: a QP in the error state,
		 * DXL_E_STATE) is a transport error: nothing ran at the
		 * primary. DXL_E_STATE is kept for what the CAS found: a lock
		 * word that is not t's (review of issue 12, #6) */
		if (ret == DXL_E_STATE)
			ret = dxl_err_set(DXL_E_UNREACHABLE, "%s", dxl_errmsg());
		else if (!ret && *(volatile uint64_t *)res != t->id)
			ret = dxl_err_set(DXL_E_STATE,
					  "unlock CAS: the lock word of table %u key %" PRIu64 " was 0x%" PRIx64 ", not 0x%" PRIx64,
					  o->table, o->key, *(volatile uint64_t *)res, t->id);
	} else {
		struct dxl_table_req req = {.slot = o->slot, .owner = t->id};
		struct dxl_table_rep rep;
		ret = table_rpc(t, o, DXL_RPC_ID_TABLE_UNLOCK, &req, &rep, NULL, 0);
	}
	o->locked = false;
	return ret;
}

/* the lock word of o's slot (o->vt, t->v) is t's (a READ: its holder) */
static bool lock_is_ours(struct dxl_txn *t, struct op *o)
{
	struct dxl_table_req req = {.slot = o->slot};
	struct dxl_table_rep rep;
	int ret = table_rpc(t, o, DXL_RPC_ID_TABLE_READ, &req, &rep, NULL, 0);
	return (ret == 0 || ret == DXL_E_TOOBIG) && rep.holder == t->id;
}

/* ---- settling: locks and write-backs whose first attempt failed ---------------------
 *
 * Every lock a coordinator takes is released by it (or, once it is gone, by
 * resolution), whatever the configuration did meanwhile: a release or a
 * committed write-back that fails is queued on the worker and tried again
 * (settle_drain: at the end of the transaction for a while, then at every
 * begin and from dxl_coord_worker_poll outside transactions) until it is
 * done:
 *  - the same primary (a new epoch: new rkeys; or it was unreachable for a
 *    while): with a fresh view, through RPCs that check the lock word is the
 *    transaction's -- a commit writes back (WRITEBACK, idempotent by
 *    version) or deletes, then unlocks; an abort deletes what it inserted,
 *    then unlocks. A lock word that is not the transaction's any more (the
 *    node restarted: lock words are DRAM, and its promotion gate applied the
 *    decided records) ends it;
 *  - a new primary: its promotion gate locked the keys of records still in
 *    doubt for their transactions (dxl_tables_recover_locks); where the lock
 *    word is this transaction's, the same as above; elsewhere nothing is
 *    left to do (decided records were applied by the gate, transactions
 *    that never logged hold nothing there).
 * The entries live as long as the worker; one left when the worker ends is
 * logged (event=coord_settle_abandoned) and left to resolution.
 */
struct settle {
	uint64_t txn;
	uint32_t shard, table;
	uint64_t key, slot;
	uint32_t locked_at;  /* the primary the lock was taken at */
	bool commit;         /* committed: write back (wop), then unlock */
	bool inserted;       /* created by the transaction at L */
	int wop;
	uint32_t inc;
	uint64_t lock_version, new_version, rec_ts;
	uint8_t *value;
	uint32_t len;
	uint64_t since_ms, next_ms;
	uint32_t tries;
	int last_err;
	bool after_und;      /* not before the transaction's record in this
				shard is decided (its background marker) */
};

static int worker_settle_init(struct dxl_coord_worker *w)
{
	w->settler = calloc(1, sizeof(*w->settler));
	if (!w->settler)
		return DXL_E_NOMEM;
	w->settler->w = w;
	w->settler->co_id = UINT32_MAX;
	w->settler->scr = w->scratch + (size_t)(w->nco + 1) * COORD_SCRATCH;
	return 0;
}

static void worker_settle_free(struct dxl_coord_worker *w)
{
	for (uint32_t i = 0; i < w->nsettle; i++) {
		struct settle *e = &w->settles[i];
		DXL_WARN("event=coord_settle_abandoned txn=0x%" PRIx64 " shard=%u key=%" PRIu64
			 " %s tries=%u code=%s msg=\"left to resolution when this coordinator is gone\"",
			 e->txn, e->shard, e->key, e->commit ? "write-back" : "release", e->tries,
			 dxl_errname(e->last_err));
		free(e->value);
	}
	free(w->settles);
	w->settles = NULL;
	w->nsettle = 0;
	if (w->settler) {
		coord_view_put(w->c, w->settler->v);
		free(w->settler->arena);
		free(w->settler);
		w->settler = NULL;
	}
}

static void settles_drop(struct dxl_coord_worker *w)
{
	for (uint32_t i = 0; i < w->nsettle; i++)
		free(w->settles[i].value);
	w->nsettle = 0;
	w->settle_gen++; /* a drain suspended in a settle must not touch it */
}

static bool settle_retryable(int err)
{
	return is_view_error(err) || err == DXL_E_NOMEM || err == DXL_E_AGAIN ||
	       err == DXL_E_BUSY;
}

static int settle_push(struct dxl_txn *t, const struct op *o, uint32_t locked_at, bool commit,
		       int err)
{
	struct dxl_coord_worker *w = t->w;
	if (w->nsettle == w->settlecap) {
		uint32_t nc = w->settlecap ? 2 * w->settlecap : 16;
		struct settle *n = realloc(w->settles, nc * sizeof(*n));
		if (!n)
			return dxl_err_set(DXL_E_NOMEM, "settle queue");
		w->settles = n;
		w->settlecap = nc;
	}
	struct settle *e = &w->settles[w->nsettle];
	*e = (struct settle){.txn = t->id, .shard = o->shard, .table = o->table, .key = o->key,
			     .slot = o->slot, .locked_at = locked_at, .commit = commit,
			     .inserted = !o->exists, .wop = o->wop, .inc = o->inc,
			     .lock_version = o->lock_version, .new_version = o->new_version,
			     .rec_ts = o->rec_ts, .len = 0, .since_ms = dxl_now_ms(),
			     .last_err = err};
	if (commit && (o->wop == DXL_WS_UPDATE || o->wop == DXL_WS_INSERT) && o->wlen) {
		e->value = malloc(o->wlen);
		if (!e->value)
			return dxl_err_set(DXL_E_NOMEM, "settle queue value");
		memcpy(e->value, t->arena + o->woff, o->wlen);
		e->len = o->wlen;
	}
	w->nsettle++;
	DXL_INFO("event=coord_settle_queued txn=0x%" PRIx64 " shard=%u table=%u key=%" PRIu64
		 " %s code=%s",
		 t->id, o->shard, o->table, o->key, commit ? "write-back" : "release",
		 dxl_errname(err));
	return 0;
}

/* one attempt of e with the settler's handle s: 0 = done, < 0 = again later */
static int settle_once(struct dxl_coord_worker *w, struct dxl_txn *s, struct settle *e)
{
	struct view *v = coord_view_get(w->c);
	const struct view_table *vt = NULL;
	if (v && e->shard < v->nshards && v->shards[e->shard].ok)
		for (uint32_t x = 0; x < v->shards[e->shard].ntables; x++)
			if (v->shards[e->shard].tables[x].st.t.id == e->table)
				vt = &v->shards[e->shard].tables[x];
	if (!vt) {
		coord_view_put(w->c, v);
		coord_mark_stale(w->c, "settle: no serving primary");
		return dxl_err_set(DXL_E_UNAVAIL, "shard %u has no serving primary", e->shard);
	}
	s->v = v;
	s->id = e->txn;
	s->nops = 1;
	s->used = 0;
	struct op *o = &s->ops[0];
	memset(o, 0, sizeof(*o));
	o->table = e->table;
	o->shard = e->shard;
	o->key = e->key;
	o->vt = vt;
	o->slot = e->slot;
	o->exists = !e->inserted;
	o->wop = e->wop;
	o->inc = e->inc;
	o->lock_version = e->lock_version;
	o->new_version = e->new_version;
	o->rec_ts = e->rec_ts;
	o->locked = true;
	o->wlen = e->len;
	int ret = e->len ? arena_put(s, e->value, e->len, &o->woff) : 0;
	bool nic = nic_locks(o);
	bool same = v->shards[e->shard].primary == e->locked_at;
	struct dxl_table_rep rep;
	if (!ret && !same) {
		/* a new primary: where is the key, and is its lock ours? */
		struct dxl_table_req req = {.key = o->key};
		ret = table_rpc(s, o, DXL_RPC_ID_TABLE_LOOKUP, &req, &rep, NULL, 0);
		if (ret == DXL_E_TOOBIG)
			ret = 0; /* the value, not asked for: the reply's fields are there */
		if (ret == DXL_E_NOENT) {
			ret = 0; /* nothing of it there */
			goto out;
		}
		if (ret)
			goto out;
		o->slot = rep.slot;
		if (!lock_is_ours(s, o))
			goto out; /* decided (applied by the gate) or never logged */
	}
	if (ret)
		goto out;
	if (e->commit && (e->wop == DXL_WS_UPDATE || e->wop == DXL_WS_INSERT)) {
		/* an insert too: its record (made at L, or made live for the
		 * transaction by a promotion gate) is written back with its
		 * commit timestamp, version new_version (issue 20) */
		struct dxl_table_req wb = {.slot = o->slot, .owner = s->id, .ts = o->rec_ts,
					   .version = o->new_version,
					   .flags = nic ? 0 : DXL_TABLE_WB_UNLOCK,
					   .value = s->arena + o->woff, .len = o->wlen};
		ret = table_rpc(s, o, DXL_RPC_ID_TABLE_WRITEBACK, &wb, &rep, NULL, 0);
		if (ret == DXL_E_STATE) {
			/* the lock word is not ours any more: the node restarted
			 * (its gate applied the decided record) */
			DXL_INFO("event=coord_settle_not_ours txn=0x%" PRIx64 " shard=%u key=%" PRIu64
				 " msg=\"%s\"",
				 s->id, o->shard, o->key, dxl_errmsg());
			ret = 0;
			goto out;
		}
		if (!ret && nic && (ret = unlock_one(s, o)) == DXL_E_STATE)
			ret = 0; /* the CAS found it not ours (any more) */
	} else {
		if (e->commit && e->wop == DXL_WS_DELETE) {
			/* at the slot it locked: a retry after a lost reply finds
			 * it done (idempotent) */
			struct dxl_table_req del = {.key = o->key, .owner = s->id, .ts = o->rec_ts,
						    .slot = o->slot, .flags = DXL_TABLE_DEL_AT_SLOT};
			ret = table_rpc(s, o, DXL_RPC_ID_TABLE_DELETE, &del, &rep, NULL, 0);
		} else if (!e->commit && e->inserted) {
			/* aborted: the record it inserted at L (version
			 * lock_version) or the one a promotion gate made for it
			 * (as logged: lock_version + 2) goes -- never another
			 * record whose lock it holds (a DELETE for another
			 * version changes nothing: DXL_E_STATE) */
			uint64_t v0 = same ? o->lock_version : o->lock_version + 2;
			uint64_t v1 = same ? o->lock_version + 2 : o->lock_version;
			struct dxl_table_req del = {.key = o->key, .owner = s->id, .slot = o->slot,
						    .version = v0, .flags = DXL_TABLE_DEL_AT_SLOT};
			ret = table_rpc(s, o, DXL_RPC_ID_TABLE_DELETE, &del, &rep, NULL, 0);
			if (ret == DXL_E_STATE) {
				del.version = v1;
				ret = table_rpc(s, o, DXL_RPC_ID_TABLE_DELETE, &del, &rep, NULL, 0);
			}
		}
		/* gone already, or not ours: a retry after a lost reply */
		if (ret == DXL_E_NOENT || ret == DXL_E_STATE)
			ret = 0;
		if (!ret)
			ret = unlock_one(s, o);
		if (ret == DXL_E_STATE) /* the primary says: not ours (any more) */
			ret = 0;
	}
out:
	if (!ret)
		DXL_INFO("event=coord_settled txn=0x%" PRIx64 " shard=%u key=%" PRIu64
			 " %s at %s primary %u after %u tries",
			 s->id, o->shard, o->key, e->commit ? "write-back" : "release",
			 same ? "the same" : "a new", v->shards[e->shard].primary, e->tries + 1);
	s->v = NULL;
	s->nops = 0;
	coord_view_put(w->c, v);
	return ret;
}

/*
 * settle_drain -- try the queued settles that are due; with budget_ms > 0
 * keep at it until txn's (0: every one) are done or the budget ran out.
 * From a coroutine of w, never inside another settle.
 */
/* txn's record in shard still waits for its background marker (und) */
static bool und_pending(const struct dxl_coord_worker *w, uint32_t shard, uint64_t txn)
{
	for (uint32_t i = 0; i < w->nund; i++)
		if (w->und[i].shard == shard && w->und[i].txn == txn)
			return true;
	return false;
}

static void settle_drain(struct dxl_coord_worker *w, uint64_t txn, uint32_t budget_ms)
{
	if (!w->nsettle || w->settling || !dxl_co_self() || dxl_co_sched() != w->sched)
		return;
	w->settling = true;
	w->settler->qe = w->qepoch;
	uint64_t end = dxl_now_ms() + budget_ms;
	for (;;) {
		uint64_t now = dxl_now_ms();
		for (uint32_t i = 0; i < w->nsettle;) {
			struct settle *e = &w->settles[i];
			if (e->next_ms > now) {
				i++;
				continue;
			}
			if (e->after_und) {
				if (und_pending(w, e->shard, e->txn)) {
					i++;
					continue;
				}
				e->after_und = false; /* decided: released now */
			}
			/* settle_once yields: meanwhile other coroutines push
			 * (w->settles may move: realloc) or a renewal drops the
			 * whole queue (settles_drop). Work on a copy; take the
			 * entry again afterwards, if it is still there. */
			struct settle cur = *e;
			uint64_t gen = w->settle_gen;
			int ret = settle_once(w, w->settler, &cur);
			if (gen != w->settle_gen)
				break; /* dropped, values freed: nothing is ours */
			e = &w->settles[i];
			cur.next_ms = DXL_MIN(cur.next_ms, e->next_ms); /* hurried meanwhile */
			*e = cur;
			/* never dropped (review of issue 12, #6): whatever the
			 * error, the lock is still set by a live coordinator,
			 * which the sweep for gone ones skips; a resolver waiting
			 * on the key would wait for good. Done only when done or
			 * when the primary says the lock is not ours. */
			if (ret) {
				e->tries++;
				e->last_err = ret;
				e->next_ms = dxl_now_ms() + DXL_MIN(20ull << DXL_MIN(e->tries, 6u), 1000ull);
				if (e->tries % 50 == 0 || (e->tries == 1 && !settle_retryable(ret)))
					DXL_WARN("event=coord_settle_pending txn=0x%" PRIx64 " shard=%u key=%" PRIu64
						 " tries=%u since_ms=%" PRIu64 " code=%s msg=\"%s\"",
						 e->txn, e->shard, e->key, e->tries,
						 dxl_now_ms() - e->since_ms, dxl_errname(ret), dxl_errmsg());
				i++;
				continue;
			}
			free(e->value);
			w->settles[i] = w->settles[--w->nsettle];
		}
		bool mine = false;
		uint64_t due = UINT64_MAX;
		for (uint32_t i = 0; i < w->nsettle; i++) {
			if (w->settles[i].after_und) /* waits for its marker */
				continue;
			mine = mine || !txn || w->settles[i].txn == txn;
			due = DXL_MIN(due, w->settles[i].next_ms);
		}
		if (!mine || dxl_now_ms() >= end)
			break;
		dxl_co_suspend(dxl_now_ns() +
			       1000000ull * DXL_MIN(DXL_MAX(due, dxl_now_ms() + 1) - dxl_now_ms(), 50ull));
	}
	w->settling = false;
}

/* release what is held: inserted records are deleted, locks released; what
 * fails is queued and settled later (above) */
static void release_all(struct dxl_txn *t)
{
	if (!t->active)
		return;
	bool queued = false;
	if (txn_unregistered(t))
		leave_locks(t, "registration over");
	for (uint32_t i = 0; i < t->nops; i++) {
		struct op *o = &t->ops[i];
		if (!o->locked)
			continue;
		int how = keep_how(t, o->shard);
		if (how == KEEP_RESOLVE) {
			/* its record there is undecided and its writer gone with
			 * the session: the resolution of its id decides and
			 * releases */
			o->locked = false;
			DXL_INFO("event=coord_lock_left txn=0x%" PRIx64 " shard=%u key=%" PRIu64
				 " msg=\"record undecided: left to resolution\"",
				 t->id, o->shard, o->key);
			continue;
		}
		if (how == KEEP_UND) {
			/* released once its record there is decided (the worker's
			 * background marker acknowledged) */
			o->locked = false;
			if (!settle_push(t, o, t->v->shards[o->shard].primary, false, 0))
				t->w->settles[t->w->nsettle - 1].after_und = true;
			continue;
		}
		int ret = 0;
		if (o->wop == DXL_WS_INSERT && !o->exists) {
			/* its own record only (the version its INSERT made), at
			 * the slot it locked */
			struct dxl_table_req req = {.key = o->key, .owner = t->id, .slot = o->slot,
						    .version = o->lock_version,
						    .flags = DXL_TABLE_DEL_AT_SLOT};
			struct dxl_table_rep rep;
			ret = table_rpc(t, o, DXL_RPC_ID_TABLE_DELETE, &req, &rep, NULL, 0);
			if (ret == DXL_E_NOENT)
				ret = 0;
		}
		if (!ret) {
			ret = unlock_one(t, o);
			if (ret == DXL_E_STATE)
				ret = 0; /* the primary says the lock is not ours */
		} else {
			o->locked = false;
		}
		if (ret) {
			coord_mark_stale(t->w->c, "release failed");
			if (!settle_push(t, o, t->v->shards[o->shard].primary, false, ret))
				queued = true;
		}
	}
	t->active = false;
	coord_view_put(t->w->c, t->v);
	t->v = NULL;
	st_add(&t->w->st.aborted, 1);
	if (queued)
		settle_drain(t->w, t->id, 1000);
}

void dxl_txn_abort(struct dxl_txn *t)
{
	if (t && t->active)
		release_all(t);
}

static int lock_phase(struct dxl_txn *t)
{
	/* NIC-owned lock words: per op a CAS and a READ of line 0 on one QP,
	 * all ops posted before waiting (one round trip for the write set) */
	struct {
		struct op *o;
		struct dxl_qp *qp;
		uint64_t *cas;
		uint8_t *hdr;
	} bt[DXL_TXN_MAX_OPS];
	uint32_t nn = 0;
	int ret = 0;
	enum dxl_txn_mode mode = t->w->c->cfg.mode;
	uint64_t tag = batch(t);
	/* pass 0: RPCs (inserts, CPU-owned locks); pass 1: the CAS+READ batch,
	 * so that an early refusal never leaves posted CASes behind */
	for (int pass = 0; pass < 2; pass++)
	for (uint32_t i = 0; i < t->nops; i++) {
		struct op *o = &t->ops[i];
		if (!o->wop)
			continue;
		bool nic = nic_locks(o);
		if ((pass == 1) != (nic && o->exists))
			continue;
		if ((nic && mode == DXL_TXN_TWOSIDED) || (!nic && mode != DXL_TXN_TWOSIDED)) {
			ret = dxl_err_set(DXL_E_CONFIG,
					  "table %u: lock words are %s-owned (engine.lock_mode=%s) but the coordinator's mode is %s (use %s)",
					  o->table, nic ? "NIC" : "CPU", nic ? "nic" : "cpu",
					  dxl_txn_mode_name(mode), nic ? "hybrid or onesided" : "twosided");
			goto reap;
		}
		if (!o->exists) { /* insert: created locked at the primary */
			struct dxl_table_req req = {.key = o->key, .owner = t->id, .ts = 0,
						    .value = t->arena + o->woff, .len = o->wlen};
			struct dxl_table_rep rep;
			ret = table_rpc(t, o, DXL_RPC_ID_TABLE_INSERT, &req, &rep, NULL, 0);
			if (ret == DXL_E_EXIST)
				return dxl_err_set(DXL_E_CONFLICT, "table %u key %" PRIu64 ": inserted by another transaction",
						   o->table, o->key);
			if (ret)
				return ret;
			o->locked = true;
			o->slot = rep.slot;
			o->inc = rep.rec.inc;
			o->lock_version = rep.rec.version;
			o->new_version = rep.rec.version;
			seen(t, rep.holder); /* the absence it replaces */
			continue;
		}
		if (!nic) {
			struct dxl_table_req req = {.slot = o->slot, .owner = t->id};
			struct dxl_table_rep rep;
			ret = table_rpc(t, o, DXL_RPC_ID_TABLE_LOCK, &req, &rep, NULL, 0);
			if (ret == DXL_E_BUSY) {
				coord_note_holder(t->w, rep.holder);
				return dxl_err_set(DXL_E_CONFLICT, "table %u key %" PRIu64 ": locked by 0x%" PRIx64,
						   o->table, o->key, rep.holder);
			}
			if (ret)
				return ret;
			o->locked = true;
			o->lock_version = rep.rec.version;
			seen(t, rep.rec.ts);
			if (!rep.rec.live || rep.rec.key != o->key || rep.rec.version != o->version)
				return dxl_err_set(DXL_E_CONFLICT, "table %u key %" PRIu64 ": changed since read (version %" PRIu64 " -> %" PRIu64 ")",
						   o->table, o->key, o->version, rep.rec.version);
			continue;
		}
		if (nn * 72 + 72 > COORD_SCRATCH - 256) {
			ret = dxl_err_set(DXL_E_INVAL, "write set too large for one lock round");
			goto reap;
		}
		const struct view_shard *vs = &t->v->shards[o->shard];
		if ((ret = node_qp(t->w, vs, &bt[nn].qp)))
			goto reap;
		bt[nn].o = o;
		bt[nn].cas = (uint64_t *)(t->scr + nn * 72);
		bt[nn].hdr = t->scr + nn * 72 + 8;
		/* the CAS, then the version under the lock (coord_lock_order;
		 * both signalled: the count is exact whatever fails) */
		struct dxl_wr wr[2];
		for (int k = 0; k < 2; k++) {
			if (coord_lock_order[k] == COORD_STEP_LOCK)
				wr_cas(&wr[k], bt[nn].cas, lkey(t),
				       o->vt->st.t.locks.addr + 8 * o->slot, o->vt->st.t.locks.rkey,
				       0, t->id, true, tag);
			else
				wr_read(&wr[k], bt[nn].hdr, lkey(t), 64,
					o->vt->st.t.records.addr + o->slot * o->vt->st.t.slot_size,
					o->vt->st.t.records.rkey, true, tag);
		}
		wr[0].next = &wr[1];
		struct dxl_wr *bad;
		while ((ret = dxl_qp_post(bt[nn].qp, wr, &bad)) == DXL_E_AGAIN)
			dxl_co_yield();
		if (ret)
			goto reap;
		nn++;
	}
	if (!nn)
		return 0;
	/* two completions per op (CAS and READ, both signalled: the count is
	 * exact whatever fails) */
	int failed = wait_tag(2 * (int)nn, tag, NULL);
	if (failed < 0)
		return failed;
	int verdict = 0;
	for (uint32_t k = 0; k < nn; k++) {
		struct op *o = bt[k].o;
		uint64_t old = *(volatile uint64_t *)bt[k].cas;
		if (failed) {
			/* we cannot tell which CASes landed: release by owner
			 * (a CAS from t->id to 0 is harmless where we failed) */
			o->locked = true;
			continue;
		}
		if (old != 0) {
			coord_note_holder(t->w, old);
			if (!verdict)
				verdict = dxl_err_set(DXL_E_CONFLICT, "table %u key %" PRIu64 ": locked by 0x%" PRIx64,
						      o->table, o->key, old);
			continue;
		}
		o->locked = true;
		const uint8_t *h = bt[k].hdr;
		uint64_t ver = dxl_get_le64(h);
		uint64_t key = dxl_get_le64(h + 16);
		uint32_t lf = dxl_get_le32(h + 28);
		o->lock_version = ver;
		o->inc = dxl_get_le32(h + 24);
		seen(t, dxl_get_le64(h + 8)); /* the commit timestamp of what it overwrites */
		if (!verdict && ((ver & 1) || ver != o->version || key != o->key ||
				 !(lf & DXL_RECORD_LIVE)))
			verdict = dxl_err_set(DXL_E_CONFLICT, "table %u key %" PRIu64 ": changed since read (version %" PRIu64 " -> %" PRIu64 ")",
					      o->table, o->key, o->version, ver);
	}
	if (failed)
		return dxl_err_set(DXL_E_UNREACHABLE, "lock CAS/READ failed (%d completions)", failed);
	return verdict;
reap:
	/* an error after some CASes were posted: they may land; wait for
	 * them, and release by owner where they did (release_all: a CAS from
	 * t->id to 0 is harmless where one did not) */
	if (nn) {
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
		wait_tag(2 * (int)nn, tag, NULL);
		for (uint32_t k = 0; k < nn; k++)
			bt[k].o->locked = true;
		dxl_err_set(ret, "%s", msg);
	}
	return ret;
}

/* ---- V: validating the read set ----------------------------------------------- */

/* coord_internal.h: the orders the model test checks */
const enum coord_step coord_lock_order[2] = {COORD_STEP_LOCK, COORD_STEP_VERSION};
const enum coord_step coord_validate_order[2] = {COORD_STEP_LOCK, COORD_STEP_VERSION};

/* all: also the reads of records it writes (before the lock phase:
 * dxl_txn_validate), else those were checked under their locks */
static int validate_phase(struct dxl_txn *t, bool all)
{
	if (t->w->c->cfg.no_validation)
		return 0;
	enum dxl_txn_mode mode = t->w->c->cfg.mode;
	struct {
		struct op *o;
		uint8_t *hdr;
		uint64_t *lock;
	} v[DXL_TXN_MAX_OPS];
	uint32_t nv = 0;
	int ret;
	uint64_t tag = batch(t);
	/* an error once READs are posted: wait for them first (reap) */
#define V_FAIL(e)                  \
	do {                       \
		ret = (e);         \
		goto reap;         \
	} while (0)
	for (uint32_t i = 0; i < t->nops; i++) {
		struct op *o = &t->ops[i];
		if (!o->read || (o->wop && !all))
			continue; /* written records were checked under their lock */
		if (!o->exists || mode == DXL_TXN_TWOSIDED) {
			/* absence (any mode), or everything in two-sided mode: RPC */
			struct dxl_table_req req = {0};
			struct dxl_table_rep rep;
			uint16_t opc = o->exists ? DXL_RPC_ID_TABLE_READ : DXL_RPC_ID_TABLE_LOOKUP;
			if (o->exists)
				req.slot = o->slot;
			else
				req.key = o->key;
			ret = table_rpc(t, o, opc, &req, &rep, NULL, 0);
			if (!o->exists) {
				if (ret == DXL_E_NOENT) {
					/* still absent: the state at V (its
					 * tombstone) is what it read */
					o->version = rep.rec.version;
					seen(t, rep.rec.ts);
					continue;
				}
				if (ret == 0 || ret == DXL_E_TOOBIG)
					V_FAIL(dxl_err_set(DXL_E_CONFLICT, "table %u key %" PRIu64 ": inserted since read",
							   o->table, o->key));
				V_FAIL(ret);
			}
			if (ret && ret != DXL_E_TOOBIG)
				V_FAIL(ret == DXL_E_NOENT ? dxl_err_set(DXL_E_CONFLICT, "table %u key %" PRIu64 ": deleted since read", o->table, o->key) : ret);
			coord_note_holder(t->w, rep.holder);
			if (rep.rec.version != o->version || rep.rec.key != o->key || !rep.rec.live ||
			    rep.holder)
				V_FAIL(dxl_err_set(DXL_E_CONFLICT, "table %u key %" PRIu64 ": changed or locked since read",
						   o->table, o->key));
			continue;
		}
		v[nv].o = o;
		v[nv].hdr = t->scr + nv * 72;
		v[nv].lock = (uint64_t *)(t->scr + nv * 72 + 64);
		const struct view_shard *vs = &t->v->shards[o->shard];
		struct dxl_qp *qp;
		if ((ret = node_qp(t->w, vs, &qp)))
			V_FAIL(ret);
		/* the lock word, then the version (coord_validate_order): a
		 * free lock word read before an unchanged version means no
		 * writer wrote it back in between */
		struct dxl_wr wr[2];
		for (int k = 0; k < 2; k++) {
			if (coord_validate_order[k] == COORD_STEP_LOCK)
				wr_read(&wr[k], v[nv].lock, lkey(t), 8,
					o->vt->st.t.locks.addr + 8 * o->slot, o->vt->st.t.locks.rkey,
					true, tag);
			else
				wr_read(&wr[k], v[nv].hdr, lkey(t), 64,
					o->vt->st.t.records.addr + o->slot * o->vt->st.t.slot_size,
					o->vt->st.t.records.rkey, true, tag);
		}
		wr[0].next = &wr[1];
		struct dxl_wr *bad;
		while ((ret = dxl_qp_post(qp, wr, &bad)) == DXL_E_AGAIN)
			dxl_co_yield();
		if (ret)
			V_FAIL(ret);
		nv++;
	}
#undef V_FAIL
	if (!nv)
		return 0;
	/* two signalled READs per record: the count is exact */
	int f = wait_tag(2 * (int)nv, tag, NULL);
	if (f < 0)
		return f;
	if (f)
		return dxl_err_set(DXL_E_UNREACHABLE, "validation READs failed (%d)", f);
	for (uint32_t k = 0; k < nv; k++) {
		struct op *o = v[k].o;
		uint64_t ver = dxl_get_le64(v[k].hdr);
		uint64_t lock = *(volatile uint64_t *)v[k].lock;
		coord_note_holder(t->w, lock);
		if (!coord_validates(o->version, ver, lock))
			return dxl_err_set(DXL_E_CONFLICT, "table %u key %" PRIu64 ": %s since read",
					   o->table, o->key, lock ? "locked" : "changed");
	}
	/* the fence: the READs above were served by a primary -- but one
	 * whose session may have expired (a paused process that resumed, a
	 * NIC serving a stopped host) while another node became the primary
	 * and took writes. A FENCE per shard, on the QP of the READs, after
	 * they completed: its node checks, at that moment, the epoch and its
	 * own lease (a lease ends before its session can expire, and a
	 * primary is replaced only once its session expired): valid then,
	 * valid when the READs were served (docs/transactions.md) */
	if (!t->w->c->cfg.no_fence) {
		uint32_t done[DXL_TXN_MAX_OPS], nd = 0;
		for (uint32_t k = 0; k < nv; k++) {
			struct op *o = v[k].o;
			bool seen = false;
			for (uint32_t j = 0; j < nd && !seen; j++)
				seen = done[j] == o->shard;
			if (seen)
				continue;
			done[nd++] = o->shard;
			struct dxl_table_req req = {0};
			struct dxl_table_rep rep;
			if ((ret = table_rpc(t, o, DXL_RPC_ID_TABLE_FENCE, &req, &rep, NULL, 0))) {
				dxl_err_prefix("fence of shard %u at node %u", o->shard,
					       t->v->shards[o->shard].primary);
				return ret;
			}
		}
	}
	return 0;
reap:
	if (nv) {
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
		wait_tag(2 * (int)nv, tag, NULL);
		dxl_err_set(ret, "%s", msg);
	}
	return ret;
}

/* ---- Log ---------------------------------------------------------------------------- */

/* ---- records that are not decided yet: background abort markers ------------ */

static void und_add(struct dxl_coord_worker *w, uint32_t shard, uint64_t txn, uint64_t ts)
{
	if (w->nund == w->undcap) {
		uint32_t nc = w->undcap ? 2 * w->undcap : 16;
		struct und *n = realloc(w->und, nc * sizeof(*n));
		DXL_ASSERTF(n, "worker %u: no memory for %u undecided records", w->idx, nc);
		w->und = n;
		w->undcap = nc;
	}
	w->und[w->nund++] = (struct und){.shard = shard, .txn = txn, .ts = ts};
}

/* a background marker for txn in shard's ring was acknowledged or failed:
 * the marker is decided either way (harmless wherever it is); its records
 * once it is in the log */
static void und_result(struct dxl_coord_worker *w, uint32_t shard, struct wlog *l,
		       uint64_t txn, uint64_t mts, int status)
{
	if (dxl_log_writer_decide(l->lw, mts))
		DXL_WARN("event=coord_decide_failed shard=%u ts=%" PRIu64 " msg=\"%s\"", shard, mts,
			 dxl_errmsg());
	uint32_t keep = 0;
	for (uint32_t i = 0; i < w->nund; i++) {
		struct und *u = &w->und[i];
		if (u->shard == shard && u->txn == txn) {
			u->inflight = false;
			if (!status) {
				if (dxl_log_writer_decide(l->lw, u->ts))
					DXL_WARN("event=coord_decide_failed shard=%u ts=%" PRIu64
						 " msg=\"%s\"", shard, u->ts, dxl_errmsg());
				DXL_INFO("event=coord_abort_marked txn=0x%" PRIx64 " shard=%u ts=%" PRIu64
					 " msg=\"decided late\"", txn, shard, u->ts);
				continue;
			}
		}
		w->und[keep++] = *u;
	}
	w->nund = keep;
}

/* a marker for every transaction with records not decided yet (at most
 * every 50 ms; results through dxl_coord_worker_poll) */
static void und_round(struct dxl_coord_worker *w)
{
	uint64_t now = dxl_now_ms();
	if (!w->nund || now < w->und_next_ms)
		return;
	w->und_next_ms = now + 50;
	for (uint32_t i = 0; i < w->nund; i++) {
		struct und *u = &w->und[i];
		if (u->inflight || u->shard >= w->nlogs || !w->logs[u->shard].lw)
			continue;
		struct wlog *l = &w->logs[u->shard];
		if (l->n == l->qcap)
			continue;
		uint8_t m[DXL_ABORT_SIZE];
		dxl_abort_marker_encode(u->txn, m, sizeof(m));
		uint64_t ts = 0;
		if (dxl_log_writer_append_ex(l->lw, m, sizeof(m), u->txn, NULL, 0, &ts))
			continue; /* full or broken: the next round */
		l->q[(l->head + l->n) % l->qcap] = (struct pend){.ts = ts, .txn = u->txn};
		l->n++;
		for (uint32_t k = i; k < w->nund; k++)
			if (w->und[k].shard == u->shard && w->und[k].txn == u->txn)
				w->und[k].inflight = true;
	}
}

static void settle_drain(struct dxl_coord_worker *w, uint64_t txn, uint32_t budget_ms);

void dxl_coord_worker_poll(struct dxl_coord_worker *w)
{
	/* queued settles, from a coroutine that is not inside a transaction
	 * (dxl-coord's dispatcher, a begin) */
	struct dxl_co *co = dxl_co_self();
	if (co && dxl_co_sched() == w->sched) {
		uint32_t id = dxl_co_id(co) & 0xfffu;
		struct dxl_txn *cur = id <= w->nco ? w->txns[id] : NULL;
		if (!cur || !cur->active) {
			settle_drain(w, 0, 0);
			coord_sweep(w);
		}
	}
	struct dxl_log_writer_result res[64];
	for (uint32_t s = 0; s < w->nlogs; s++) {
		struct wlog *l = &w->logs[s];
		if (!l->lw)
			continue;
		int n;
		while ((n = dxl_log_writer_poll(l->lw, res, 64, 0)) > 0) {
			for (int i = 0; i < n; i++) {
				if (!l->n) {
					DXL_WARN("event=coord_log_unexpected shard=%u ts=%" PRIu64, s,
						 res[i].ts);
					continue;
				}
				struct pend *p = &l->q[l->head];
				l->head = (l->head + 1) % l->qcap;
				l->n--;
				if (p->ts != res[i].ts)
					DXL_WARN("event=coord_log_order shard=%u want=%" PRIu64 " got=%" PRIu64,
						 s, p->ts, res[i].ts);
				struct dxl_txn *t = p->t;
				if (!t && p->txn) {
					und_result(w, s, l, p->txn, p->ts, res[i].status);
					continue;
				}
				if (!t || t->gen != p->gen || p->idx >= t->nlrec)
					continue;
				struct lrec *lr = &t->lrec[p->idx];
				struct dxl_log_writer_info wi;
				dxl_log_writer_get_info(l->lw, &wi);
				lr->done = true;
				lr->status = res[i].status;
				lr->maybe = res[i].status && res[i].maybe;
				lr->primary = wi.primary;
				if (t->log_wait)
					t->log_wait--;
			}
		}
	}
	und_round(w);
}

/* append one record (a shard's write set, or an abort marker) for t; its
 * result arrives in t->lrec[*idx] through dxl_coord_worker_poll */
static int log_append(struct dxl_txn *t, uint32_t shard, const void *buf, uint32_t len,
		      const uint32_t *parts, uint32_t nparts, bool marker)
{
	struct wlog *l = NULL;
	/* never through a writer of a later registration (wlog_get would open
	 * one): t's id is the old registration's, resolved by others */
	if (txn_unregistered(t))
		return dxl_err_set(DXL_E_STALE, "transaction 0x%" PRIx64 " began before its coordinator registered again (session expired): aborted",
				   t->id);
	int ret = wlog_get(t->w, shard, &l);
	if (ret)
		return ret;
	if (l->n == l->qcap || t->nlrec == DXL_ARRAY_SIZE(t->lrec))
		return dxl_err_set(DXL_E_AGAIN, "shard %u: writer queue full", shard);
	uint64_t ts = 0;
	/* commit timestamps respect conflict order: above the timestamp of
	 * every state the transaction read, overwrote or replaced (issue 20) */
	dxl_log_writer_observe(l->lw, t->seen_ts);
	while ((ret = dxl_log_writer_append_ex(l->lw, buf, len, t->id, parts, nparts, &ts)) ==
	       DXL_E_AGAIN) {
		dxl_coord_worker_poll(t->w);
		dxl_co_yield();
	}
	if (ret)
		return ret;
	uint32_t idx = t->nlrec++;
	t->lrec[idx] = (struct lrec){.shard = shard, .ts = ts, .marker = marker};
	struct pend *p = &l->q[(l->head + l->n) % l->qcap];
	*p = (struct pend){.t = t, .ts = ts, .gen = t->gen, .idx = idx};
	l->n++;
	t->log_wait++;
	st_add(&t->w->st.log_appends, 1);
	return 0;
}

static void log_wait_all(struct dxl_txn *t)
{
	/* an append is acknowledged in a few hundred microseconds: spin
	 * (yielding to the other coroutines) that long, then sleep in short
	 * steps; a scheduler with nothing else to run would otherwise block
	 * for its shortest wait (a millisecond) on every commit */
	uint64_t spin_until = dxl_now_ns() + 1000000;
	while (t->log_wait) {
		dxl_coord_worker_poll(t->w);
		if (!t->log_wait)
			break;
		if (dxl_now_ns() < spin_until)
			dxl_co_yield();
		else
			dxl_co_suspend(dxl_now_ns() + 30000);
	}
}

/* the record of lrec[i] is decided: the watermark of its ring may pass it */
static void log_decide(struct dxl_txn *t, uint32_t i)
{
	struct wlog *l = NULL;
	if (wlog_get(t->w, t->lrec[i].shard, &l) == 0 &&
	    dxl_log_writer_decide(l->lw, t->lrec[i].ts))
		DXL_WARN("event=coord_decide_failed shard=%u ts=%" PRIu64 " msg=\"%s\"",
			 t->lrec[i].shard, t->lrec[i].ts, dxl_errmsg());
}

/*
 * log_abort -- t will not commit, but some of its records may be in the
 * log: an abort marker goes after each of them (appliers skip the record),
 * then both are decided. A record certainly not in the log (failed, not
 * maybe) is decided at once; a marker is decided whatever became of it
 * (one more marker is harmless). A record whose marker could not be
 * appended within log_unavail_ms goes to the worker, which keeps marking
 * it (und_round) until it is decided: an undecided record would hold its
 * ring's watermark, and every backup's applier of the shard, for good.
 * Returns true if every record is decided now.
 */
static bool log_abort(struct dxl_txn *t)
{
	uint32_t n = t->nlrec;
	uint8_t m[DXL_ABORT_SIZE];
	dxl_abort_marker_encode(t->id, m, sizeof(m));
	bool orphans = false;
	uint64_t end = dxl_now_ms() + t->w->c->cfg.log_unavail_ms;
	bool pending = true;
	while (pending && dxl_now_ms() < end) {
		if (txn_unregistered(t)) {
			/* the writers its records went through died with the
			 * session: a marker cannot follow them in their rings */
			DXL_WARN("event=coord_abort_orphaned txn=0x%" PRIx64 " msg=\"records left to resolution\"",
				 t->id);
			for (uint32_t i = 0; i < n; i++)
				if (!t->lrec[i].marker && (t->lrec[i].ts || t->lrec[i].orphan))
					keep_add(t, t->lrec[i].shard, KEEP_RESOLVE);
			t->nlrec = n;
			return false;
		}
		pending = false;
		for (uint32_t i = 0; i < n; i++) {
			struct lrec *r = &t->lrec[i];
			if (r->marker || r->ts == 0)
				continue;
			if (r->orphan) {
				orphans = true; /* resolution decides it */
				keep_add(t, r->shard, KEEP_RESOLVE);
				r->ts = 0;
				continue;
			}
			if (r->status && !r->maybe) {
				log_decide(t, i); /* not in the log */
				r->ts = 0;
				continue;
			}
			/* in the log, or maybe: mark it */
			if (log_append(t, r->shard, m, sizeof(m), NULL, 0, true))
				pending = true;
		}
		uint32_t first = n;
		log_wait_all(t);
		for (uint32_t k = first; k < t->nlrec; k++) {
			struct lrec *mk = &t->lrec[k];
			log_decide(t, k);
			/* the record this marker is for: same shard, not marker */
			for (uint32_t i = 0; i < n; i++) {
				struct lrec *r = &t->lrec[i];
				if (r->marker || r->ts == 0 || r->shard != mk->shard)
					continue;
				if (mk->status == 0) {
					log_decide(t, i);
					r->ts = 0;
				} else {
					pending = true; /* marked again next round */
				}
			}
		}
		t->nlrec = n; /* markers decided: forget them */
		if (pending)
			dxl_co_suspend(dxl_now_ns() + 50000000ull); /* 50 ms: a failover */
	}
	if (!pending)
		return !orphans;
	for (uint32_t i = 0; i < n; i++) {
		struct lrec *r = &t->lrec[i];
		if (r->marker || !r->ts)
			continue;
		if (txn_unregistered(t)) {
			/* its writers died with the session: resolution */
			keep_add(t, r->shard, KEEP_RESOLVE);
			continue;
		}
		und_add(t->w, r->shard, t->id, r->ts);
		keep_add(t, r->shard, KEEP_UND);
	}
	DXL_WARN("event=coord_abort_unmarked txn=0x%" PRIx64 " msg=\"no abort marker yet: the worker keeps trying\"",
		 t->id);
	return false;
}

static int log_phase(struct dxl_txn *t)
{
	struct dxl_ws_entry e[DXL_TXN_MAX_OPS];
	uint8_t *buf = NULL;
	uint32_t parts[DXL_LOG_WRITER_MAX_PARTS];
	uint32_t nparts = 0;
	int ret = 0;
	if (txn_unregistered(t))
		return dxl_err_set(DXL_E_STALE, "transaction 0x%" PRIx64 " began before its coordinator registered again (session expired): aborted",
				   t->id);
	for (uint32_t i = 0; i < t->nops; i++) {
		struct op *o = &t->ops[i];
		if (!o->wop)
			continue;
		bool seen = false;
		for (uint32_t k = 0; k < nparts; k++)
			seen = seen || parts[k] == o->shard;
		if (seen)
			continue;
		if (nparts == DXL_LOG_WRITER_MAX_PARTS)
			return dxl_err_set(DXL_E_INVAL, "a transaction may write at most %d shards",
					   DXL_LOG_WRITER_MAX_PARTS);
		parts[nparts++] = o->shard;
	}
	for (uint32_t k = 0; k < nparts && !ret; k++) {
		uint32_t shard = parts[k], n = 0;
		for (uint32_t j = 0; j < t->nops; j++) {
			struct op *p = &t->ops[j];
			if (!p->wop || p->shard != shard)
				continue;
			/* an insert too: its record (made at L, version
			 * lock_version, no timestamp yet) is written back
			 * with its commit timestamp at C */
			p->new_version = p->lock_version + 2;
			e[n++] = (struct dxl_ws_entry){
				.table = p->table,
				.op = p->exists ? (enum dxl_ws_op)p->wop : DXL_WS_INSERT,
				.key = p->key,
				.version = p->new_version,
				.value = p->wop == DXL_WS_DELETE ? NULL : t->arena + p->woff,
				.len = p->wop == DXL_WS_DELETE ? 0 : p->wlen,
			};
		}
		int sz = dxl_writeset_size(e, n);
		if (sz < 0) {
			ret = sz;
			break;
		}
		uint8_t *nb = realloc(buf, (size_t)sz);
		if (!nb) {
			ret = dxl_err_set(DXL_E_NOMEM, "write set");
			break;
		}
		buf = nb;
		if ((ret = dxl_writeset_encode(e, n, buf, (size_t)sz)) < 0)
			break;
		ret = log_append(t, shard, buf, (uint32_t)sz, parts, nparts, false);
	}
	free(buf);
	t->info.nshards = nparts;
	/* every append sent gets its result (even after an error: they tell
	 * what may be in the log) */
	log_wait_all(t);
	uint32_t nrec = t->nlrec;
	for (uint32_t i = 0; i < nrec; i++) {
		const struct lrec *r = &t->lrec[i];
		for (uint32_t j = 0; j < t->nops; j++)
			if (t->ops[j].wop && t->ops[j].shard == r->shard)
				t->ops[j].rec_ts = r->ts;
		t->info.commit_ts = DXL_MAX(t->info.commit_ts, r->ts);
		if (!ret && r->status)
			ret = dxl_err_set(r->status, "shard %u: %s", r->shard,
					  r->status == DXL_E_STALE ?
						  "its primary changed (records not kept)" :
						  dxl_strerror(r->status));
		t->info.maybe = t->info.maybe || r->maybe;
		/* the locks are at the primary of the view: a record acked under
		 * another primary cannot commit (that one did not hold them) */
		if (!ret && r->primary != t->v->shards[r->shard].primary)
			ret = dxl_err_set(DXL_E_CONFLICT,
					  "shard %u: primary %u -> %u while committing (retry)",
					  r->shard, t->v->shards[r->shard].primary, r->primary);
	}
	if (ret) {
		/* the outcome is known now: aborted (markers) -- unless a marker
		 * could not be written: then resolution decides (maybe) */
		t->info.maybe = nrec && !log_abort(t);
		return ret;
	}
	/* COMMITTED: every record acknowledged under the primaries holding
	 * the locks. Decided: the watermarks may pass the records. */
	if (t->w->c->cfg.test_hook)
		t->w->c->cfg.test_hook(DXL_TXN_HOOK_LOGGED, t->id, t->w->c->cfg.test_hook_arg);
	for (uint32_t i = 0; i < nrec; i++)
		log_decide(t, i);
	return 0;
}

/* ---- C: write back and unlock --------------------------------------------------- */

/* retry: an earlier commit_one of o failed (its outcome is unknown) */
static int commit_one(struct dxl_txn *t, struct op *o, bool retry)
{
	const struct view_shard *vs = &t->v->shards[o->shard];
	enum dxl_txn_mode mode = t->w->c->cfg.mode;
	int ret;
	if (o->wop == DXL_WS_DELETE) {
		/* at the slot it locked: a retry after a lost reply finds it
		 * done (idempotent, as write-back is: issue 20) */
		struct dxl_table_req req = {.key = o->key, .owner = t->id, .ts = o->rec_ts,
					    .slot = o->slot, .flags = DXL_TABLE_DEL_AT_SLOT};
		struct dxl_table_rep rep;
		if ((ret = table_rpc(t, o, DXL_RPC_ID_TABLE_DELETE, &req, &rep, NULL, 0)))
			return ret;
		return unlock_one(t, o);
	}
	bool nic = nic_locks(o);
	/* one-sided only while this coordinator's lease holds: once its
	 * session may have expired, others may resolve its transactions and
	 * the lock word may have moved on -- the RPC checks it is still ours */
	if (txn_unregistered(t))
		return dxl_err_set(DXL_E_STALE, "transaction 0x%" PRIx64 ": its coordinator registered again: write-back left to resolution",
				   t->id);
	if (mode != DXL_TXN_TWOSIDED && nic &&
	    dxl_record_wb_onesided_ok(t->v->provider, vs->durability) &&
	    dxl_zk_lease_valid(t->w->c->zk)) {
		uint32_t ss = o->vt->st.t.slot_size;
		uint32_t nb = dxl_record_wb_bytes(ss);
		uint32_t nwr = dxl_record_wb_nwr(ss) + DXL_RECORD_WB_UNLOCK_EXTRA;
		if (nb + 64 > COORD_SCRATCH || nwr > 258)
			return dxl_err_set(DXL_E_INTERNAL, "write-back of %u bytes does not fit", nb);
		struct dxl_qp *qp;
		if ((ret = node_qp(t->w, vs, &qp)))
			return ret;
		uint64_t *res = (uint64_t *)t->scr; /* [0] flush READ, [1] unlock CAS */
		uint64_t lock_addr = o->vt->st.t.locks.addr + 8 * o->slot;
		if (retry) {
			/* the last attempt's outcome is unknown. Its unlock took
			 * effect: then its write-back was durable before (the
			 * chain below) and the record may be another holder's
			 * by now: write nothing. Else that attempt never
			 * executes any more (a failed QP's requests do not run
			 * after a newer connection's: docs/fabric.md), so write
			 * again. */
			struct dxl_wr rd;
			uint64_t rtag = batch(t);
			wr_read(&rd, res, lkey(t), 8, lock_addr, o->vt->st.t.locks.rkey, true, rtag);
			if ((ret = co_post_wait(qp, &rd, 1, rtag, "write-back: lock check")))
				return ret;
			if (*(volatile uint64_t *)res != t->id) {
				o->locked = false;
				return 0;
			}
		}
		uint8_t *wb = t->scr + 64;
		struct dxl_record r = {.version = o->new_version, .ts = o->rec_ts, .key = o->key,
				       .inc = o->inc, .len = o->wlen, .live = true};
		if ((ret = dxl_record_wb_build(wb, ss, o->lock_version, &r, t->arena + o->woff,
					       NULL)))
			return ret;
		/* the record, a flush READ (H9: durable), then the unlock CAS
		 * (the NIC owns lock words), on one QP in that order: a free
		 * lock word means a durable record (docs/engine.md) */
		struct dxl_wr wr[258];
		int n = dxl_record_wb_unlock_chain(wb, ss, lkey(t),
						   o->vt->st.t.records.addr + o->slot * ss,
						   o->vt->st.t.records.rkey, lock_addr,
						   o->vt->st.t.locks.rkey, t->id, res, wr, 258);
		if (n < 0)
			return n;
		uint64_t tag = batch(t);
		for (int i = 0; i < n; i++)
			wr[i].wr_id = dxl_co_wrid(tag);
		res[1] = t->id; /* what the unlock CAS must find */
		ret = co_post_wait(qp, wr, 1, tag, "write-back");
		if (ret)
			return ret;
		o->locked = false;
		uint64_t was = *(volatile uint64_t *)&res[1];
		if (was != t->id) {
			/* the lock was not ours when the chain ran: our WRITEs
			 * overwrote a record someone else may hold -- a broken
			 * invariant (a lock freed under its holder), never a
			 * normal outcome. The commit stands (the log has it). */
			st_add(&t->w->st.wb_lock_lost, 1);
			DXL_ERROR("event=invariant_violation what=writeback_without_lock txn=0x%" PRIx64
				  " shard=%u table=%u key=%" PRIu64 " slot=%" PRIu64
				  " lock_word=0x%" PRIx64
				  " msg=\"the unlock CAS found the lock word not ours: the one-sided "
				  "write-back overwrote the record of its holder\"",
				  t->id, o->shard, o->table, o->key, o->slot, was);
		}
		return 0;
	}
	struct dxl_table_req req = {.slot = o->slot, .owner = t->id, .ts = o->rec_ts,
				    .version = o->new_version,
				    .flags = nic ? 0 : DXL_TABLE_WB_UNLOCK,
				    .value = t->arena + o->woff, .len = o->wlen};
	struct dxl_table_rep rep;
	if ((ret = table_rpc(t, o, DXL_RPC_ID_TABLE_WRITEBACK, &req, &rep, NULL, 0)))
		return ret;
	if (!nic) {
		o->locked = false;
		return 0;
	}
	return unlock_one(t, o);
}

/* a transaction of this worker met txn's lock: a settle of it still queued
 * (a release or committed write-back that failed) is tried at the next
 * dxl_txn_begin (the meeting transaction's retry), not after its backoff --
 * a retry budget of a few ms would otherwise run out against the worker's
 * own lock */
static void settle_due_now(struct dxl_coord_worker *w, uint64_t txn)
{
	for (uint32_t i = 0; i < w->nsettle; i++)
		if (w->settles[i].txn == txn && !w->settles[i].after_und)
			w->settles[i].next_ms = 0;
}

uint32_t dxl_coord_worker_writebacks_pending(const struct dxl_coord_worker *w)
{
	uint32_t n = 0;
	for (uint32_t i = 0; w && i < w->nsettle; i++)
		n += w->settles[i].commit;
	return n;
}

static void commit_phase(struct dxl_txn *t)
{
	bool queued = false;
	if (txn_unregistered(t)) {
		/* committed (every record acknowledged under the old
		 * registration) but its id is resolution's now: the records
		 * are in the log, resolution applies them at the primaries
		 * (UNLOCK_COORD rolls forward what is decided, the ring's
		 * resolver what is in doubt). A write-back from here could land
		 * after resolution released the key and another wrote it. */
		leave_locks(t, "committed, registration over");
		return;
	}
	for (uint32_t i = 0; i < t->nops; i++) {
		struct op *o = &t->ops[i];
		if (!o->wop || !o->locked)
			continue;
		uint32_t locked_at = t->v->shards[o->shard].primary;
		int ret = commit_one(t, o, false);
		/* past the commit point: the log has it. A write-back that
		 * failed is settled later (the same primary: again, with a new
		 * view, through RPCs that check the lock word is still t's; a
		 * new primary: where its gate locked the key for t) */
		if (ret && txn_unregistered(t)) {
			/* its coordinator registered again meanwhile */
			leave_locks(t, "committed, registration over");
			break;
		}
		if (ret) {
			coord_mark_stale(t->w->c, "write-back failed");
			o->locked = false;
			if (!settle_push(t, o, locked_at, true, ret))
				queued = true;
			else
				DXL_WARN("event=coord_writeback_lost txn=0x%" PRIx64 " shard=%u key=%" PRIu64
					 " msg=\"%s\"",
					 t->id, o->shard, o->key, dxl_errmsg());
		}
	}
	if (queued)
		settle_drain(t->w, t->id, 2000);
}

int dxl_txn_commit(struct dxl_txn *t, struct dxl_txn_info *info)
{
	int ret = check_usable(t);
	if (ret)
		return ret;
	uint32_t nw = 0, nr = 0;
	for (uint32_t i = 0; i < t->nops; i++) {
		nw += t->ops[i].wop != 0;
		nr += t->ops[i].read;
	}
	t->info.nreads = nr;
	t->info.nwrites = nw;
	const char *phase = "lock";
	/* begun before its coordinator registered again: nothing taken yet,
	 * a retry begins under the new registration */
	ret = txn_unregistered(t)
		      ? dxl_err_set(DXL_E_CONFLICT, "transaction 0x%" PRIx64 " began before its coordinator registered again (retry)",
				    t->id)
		      : lock_phase(t);
	if (!ret) {
		phase = "validate";
		if (t->w->c->cfg.test_hook)
			t->w->c->cfg.test_hook(DXL_TXN_HOOK_VALIDATE, t->id, t->w->c->cfg.test_hook_arg);
		ret = validate_phase(t, false);
	}
	if (!ret && nw) {
		phase = "log";
		ret = log_phase(t);
		if (ret) {
			/* not committed: aborted, markers written. Whatever failed
			 * here (a primary changed while committing, a stale epoch,
			 * a registration over, a log that cannot be written) is
			 * the configuration, not contention: DXL_E_UNAVAIL,
			 * retried by time unless maybe (never retried blindly) */
			int err = DXL_E_UNAVAIL;
			char msg[400];
			snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
			coord_mark_stale(t->w->c, msg);
			release_all(t);
			st_add(&t->w->st.unavail, 1);
			if (info)
				*info = t->info;
			return dxl_err_set(err, "log: %s", msg);
		}
	}
	if (ret) {
		ret = phase_err(t, ret, phase);
		if (ret == DXL_E_CONFLICT)
			st_add(&t->w->st.conflicts, 1);
		else if (ret == DXL_E_UNAVAIL)
			st_add(&t->w->st.unavail, 1);
		char msg[400];
		snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
		release_all(t);
		if (info)
			*info = t->info;
		return dxl_err_set(ret, "%s", msg);
	}
	/* committed */
	commit_phase(t);
	t->active = false;
	coord_view_put(t->w->c, t->v);
	t->v = NULL;
	st_add(&t->w->st.committed, 1);
	if (info)
		*info = t->info;
	return 0;
}

int dxl_txn_footprint(const struct dxl_txn *t, struct dxl_txn_access *out, uint32_t cap)
{
	uint32_t n = 0;
	for (uint32_t i = 0; t && i < t->nops; i++) {
		const struct op *o = &t->ops[i];
		if (o->read) {
			/* the absence an insert replaced: the state just below
			 * the version its record got under the lock (E's
			 * one-sided miss does not know the tombstone) */
			uint64_t v = o->wop == DXL_WS_INSERT && !o->exists ? o->lock_version - 1
									   : o->version;
			if (n < cap)
				out[n] = (struct dxl_txn_access){.table = o->table, .key = o->key,
								 .version = v, .absent = !o->exists};
			n++;
		}
		if (o->wop) {
			if (n < cap)
				out[n] = (struct dxl_txn_access){.table = o->table, .write = true,
								 .op = (enum dxl_ws_op)o->wop,
								 .key = o->key,
								 .version = o->new_version};
			n++;
		}
	}
	return (int)n;
}

static uint64_t rnd(struct dxl_coord_worker *w)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return w->rng;
}

int dxl_txn_validate(struct dxl_txn *t)
{
	int ret = check_usable(t);
	if (ret)
		return ret;
	if ((ret = validate_phase(t, true)))
		return op_fail(t, ret, "validate");
	return 0;
}

int dxl_txn_run(struct dxl_coord_worker *w, dxl_txn_fn fn, void *arg, uint32_t max_tries,
		struct dxl_txn_info *info)
{
	if (!w || !fn)
		return dxl_err_set(DXL_E_INVAL, "dxl_txn_run: NULL argument");
	if (!max_tries)
		max_tries = 1000;
	uint64_t deadline = dxl_now_ms() + w->c->cfg.log_unavail_ms;
	int ret = 0;
	struct dxl_txn_info last = {0};
	/* conflicts are retried max_tries times -- and, while the locks met
	 * may belong to a coordinator that died (resolved once its session
	 * expires), for log_unavail_ms at least */
	bool foreign = false; /* met another coordinator's lock */
	/* no serving primary, a changing configuration (DXL_E_UNAVAIL): retried
	 * for log_unavail_ms too, whatever max_tries says (that counts
	 * conflicts) -- and so are the conflicts after it: a promoted backup
	 * may hold a record it applied locked until the transaction is settled
	 * there (measured: ~0.4 s after a promotion gate), which max_tries
	 * quick retries would take for contention */
	bool reconfig = false;
	for (uint32_t k = 1;
	     k <= max_tries || ((foreign || reconfig) && dxl_now_ms() < deadline); k++) {
		struct dxl_txn *t;
		if ((ret = dxl_txn_begin(w, &t)))
			return ret;
		ret = fn(t, arg);
		if (!ret) {
			ret = dxl_txn_commit(t, &last);
		} else {
			/* an existence answer ends the attempt: like any read it
			 * stands only if still true (issue 20) */
			if ((ret == DXL_E_EXIST || ret == DXL_E_NOENT) && t->active) {
				char msg[512];
				snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
				int v = dxl_txn_validate(t);
				if (v)
					ret = v; /* not validated: a conflict (retried), or
						    why it could not be (never the answer) */
				else
					dxl_err_set(ret, "%s", msg);
			}
			last = t->info;
			dxl_txn_abort(t);
		}
		last.attempts = k;
		if (info)
			*info = last;
		reconfig = reconfig || ret == DXL_E_UNAVAIL;
		bool retry = ret == DXL_E_CONFLICT ||
			     (ret == DXL_E_UNAVAIL && !last.maybe && dxl_now_ms() < deadline);
		if (!retry)
			return ret;
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
		if (ret == DXL_E_CONFLICT && w->nsuspects) {
			foreign = true;
			coord_maybe_resolve(w);
		}
		/* randomized backoff: 0..(2^min(k,6)) * 20 us; while the
		 * configuration changes 0..5 ms doubling to at most 80 ms (the
		 * new primary serves within a few hundred ms of its promotion:
		 * longer sleeps only add to the time without a commit) */
		uint64_t span = ret == DXL_E_UNAVAIL ? 5000000ull << DXL_MIN(k, 4u)
						     : 20000ull << DXL_MIN(k, 6u);
		dxl_co_suspend(dxl_now_ns() + rnd(w) % (span ? span : 1));
		dxl_err_set(ret, "%s", msg); /* the attempt's reason, not the sleep's */
	}
	return ret;
}
