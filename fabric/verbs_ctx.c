/* verbs_ctx.c -- per-thread context of the verbs provider: CQ, SRQ, poll, wait */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/verbs_internal.h"

static struct dxl_vrb_ctx *vctx(struct dxl_ctx *c)
{
	return (struct dxl_vrb_ctx *)c;
}

/* ---- thread domain ------------------------------------------------------- */

/*
 * R2 (000 L312-316): QPs of different threads must not share a doorbell
 * register, or the driver serialises them. A thread domain gives the QPs
 * created in it their own doorbell (mlx5: a dedicated UAR/BlueFlame page);
 * a parent domain {PD, TD} lets us create them there while MRs stay in the
 * one process-wide PD, so one rkey serves every thread. Devices without
 * thread domains (rxe, EOPNOTSUPP) fall back to the plain PD.
 */
static void alloc_thread_domain(struct dxl_vrb_ctx *c)
{
	struct dxl_vrb_fabric *vf = c->vf;
	if (atomic_load_explicit(&vf->td_state, memory_order_relaxed) ==
	    DXL_VRB_TD_NO)
		return;
	struct ibv_td_init_attr ta;
	memset(&ta, 0, sizeof(ta));
	errno = 0;
	c->td = ibv_alloc_td(vf->verbs, &ta);
	int e = errno;
	if (c->td) {
		struct ibv_parent_domain_init_attr pa;
		memset(&pa, 0, sizeof(pa));
		pa.pd = vf->pd;
		pa.td = c->td;
		errno = 0;
		c->pdom = ibv_alloc_parent_domain(vf->verbs, &pa);
		e = errno;
		if (!c->pdom) {
			ibv_dealloc_td(c->td);
			c->td = NULL;
		}
	}
	if (c->pdom) {
		atomic_store_explicit(&vf->td_state, DXL_VRB_TD_YES,
				      memory_order_relaxed);
		return;
	}
	if (e == EOPNOTSUPP || e == ENOSYS || e == 0) {
		if (atomic_exchange_explicit(&vf->td_state, DXL_VRB_TD_NO,
					     memory_order_relaxed) != DXL_VRB_TD_NO)
			DXL_DEBUG("verbs: %s has no thread domains (%s): the "
				  "ctxs' QPs use the process PD",
				  vf->dev_name, strerror(e ? e : EOPNOTSUPP));
	} else {
		DXL_DEBUG("verbs: ctx %u: thread domain refused (%s): its QPs "
			  "use the process PD",
			  c->base.idx, strerror(e));
	}
}

/* ---- create / delete ----------------------------------------------------- */

static void ctx_free(struct dxl_vrb_ctx *c);

int dxl_vrb_ctx_new(struct dxl_fabric *f, uint32_t idx, struct dxl_ctx **out)
{
	struct dxl_vrb_fabric *vf = f->prov;
	const struct dxl_fabric_cfg *cfg = &f->cfg;
	struct dxl_vrb_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return dxl_err_set(DXL_E_NOMEM, "ctx_new: out of memory");
	c->base.f = f;
	c->base.idx = idx;
	c->vf = vf;
	atomic_init(&c->pending, NULL);
	atomic_init(&c->gone, 0);
	c->next_serial = 1;
	c->tbl_cap = 16;
	c->tbl = calloc(c->tbl_cap, sizeof(*c->tbl));
	c->wrs = calloc(cfg->sq_depth, sizeof(*c->wrs));
	c->sges = calloc(cfg->sq_depth, sizeof(*c->sges));
	c->rx_wr_id = calloc(cfg->srq_depth, sizeof(*c->rx_wr_id));
	c->rx_free = calloc(cfg->srq_depth, sizeof(*c->rx_free));
	c->stash_cap = DXL_VRB_STASH;
	c->stash = calloc((size_t)c->stash_cap, sizeof(*c->stash));
	int ret;
	if (!c->tbl || !c->wrs || !c->sges || !c->rx_wr_id || !c->rx_free ||
	    !c->stash) {
		ret = dxl_err_set(DXL_E_NOMEM, "ctx_new: out of memory");
		goto err;
	}
	for (uint32_t i = 0; i < cfg->srq_depth; i++)
		c->rx_free[i] = cfg->srq_depth - 1 - i; /* pop 0 first */
	c->rx_nfree = cfg->srq_depth;

	alloc_thread_domain(c);
	c->qp_pd = c->pdom ? c->pdom : vf->pd;

	c->ch = ibv_create_comp_channel(vf->verbs);
	if (!c->ch) {
		ret = dxl_err_errno(errno, "ctx_new %u: ibv_create_comp_channel", idx);
		goto err;
	}
	int fl = fcntl(c->ch->fd, F_GETFL);
	if (fl < 0 || fcntl(c->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		ret = dxl_err_errno(errno, "ctx_new %u: fcntl(completion channel)",
				    idx);
		goto err;
	}
	/* spread the ctxs over the device's interrupt vectors */
	int vec = vf->verbs->num_comp_vectors > 0
			  ? (int)(idx % (uint32_t)vf->verbs->num_comp_vectors)
			  : 0;
	c->cq = ibv_create_cq(vf->verbs, (int)cfg->cq_depth, c, c->ch, vec);
	if (!c->cq) {
		ret = dxl_err_errno(errno, "ctx_new %u: ibv_create_cq(%u entries)",
				    idx, cfg->cq_depth);
		goto err;
	}
	c->cqe = c->cq->cqe;
	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof(sa));
	sa.srq_context = c;
	sa.attr.max_wr = cfg->srq_depth;
	sa.attr.max_sge = 1;
	c->srq = ibv_create_srq(vf->pd, &sa);
	if (!c->srq) {
		ret = dxl_err_errno(errno, "ctx_new %u: ibv_create_srq(%u buffers)",
				    idx, cfg->srq_depth);
		goto err;
	}
	*out = &c->base;
	return 0;
err:
	ctx_free(c);
	return ret;
}

static void ctx_free(struct dxl_vrb_ctx *c)
{
	int r;
	if (c->srq && (r = ibv_destroy_srq(c->srq)))
		DXL_WARN("verbs: ctx %u: ibv_destroy_srq: %s", c->base.idx,
			 strerror(r));
	if (c->cq) {
		if (c->unacked)
			ibv_ack_cq_events(c->cq, c->unacked);
		if ((r = ibv_destroy_cq(c->cq)))
			DXL_WARN("verbs: ctx %u: ibv_destroy_cq: %s", c->base.idx,
				 strerror(r));
	}
	if (c->ch && (r = ibv_destroy_comp_channel(c->ch)))
		DXL_WARN("verbs: ctx %u: ibv_destroy_comp_channel: %s",
			 c->base.idx, strerror(r));
	if (c->pdom && (r = ibv_dealloc_pd(c->pdom)))
		DXL_WARN("verbs: ctx %u: parent domain: %s", c->base.idx,
			 strerror(r));
	if (c->td && (r = ibv_dealloc_td(c->td)))
		DXL_WARN("verbs: ctx %u: ibv_dealloc_td: %s", c->base.idx,
			 strerror(r));
	free(c->tbl);
	free(c->wrs);
	free(c->sges);
	free(c->rx_wr_id);
	free(c->rx_free);
	free(c->stash);
	free(c);
}

static void drain_pending(struct dxl_vrb_ctx *c);
static void destroy_orphans(struct dxl_vrb_ctx *c);

void dxl_vrb_ctx_delete(struct dxl_ctx *bc)
{
	struct dxl_vrb_ctx *c = vctx(bc);
	/* fabric.c has unpublished c: once the CM thread is out of cm_lock it
	 * can no longer be creating a passive QP for it */
	pthread_mutex_lock(&c->vf->cm_lock);
	pthread_mutex_unlock(&c->vf->cm_lock);
	drain_pending(c);
	destroy_orphans(c);
	/* removal shifts entries (cyclically), so rescan from the start */
	while (c->nqp) {
		for (uint32_t i = 0; i < c->tbl_cap; i++) {
			if (c->tbl[i]) {
				dxl_vrb_qp_destroy(c->tbl[i]);
				break;
			}
		}
	}
	ctx_free(c);
}

/* ---- the qp_num -> QP table (owner only) ---------------------------------- */

static uint32_t tbl_hash(uint32_t qpn, uint32_t cap)
{
	return (qpn * 2654435761u) & (cap - 1);
}

static struct dxl_vrb_qp *tbl_find(struct dxl_vrb_ctx *c, uint32_t qpn)
{
	for (uint32_t i = tbl_hash(qpn, c->tbl_cap);; i = (i + 1) & (c->tbl_cap - 1)) {
		struct dxl_vrb_qp *q = c->tbl[i];
		if (!q || q->qpn == qpn)
			return q;
	}
}

static void tbl_put(struct dxl_vrb_qp **tbl, uint32_t cap, struct dxl_vrb_qp *qp)
{
	uint32_t i = tbl_hash(qp->qpn, cap);
	while (tbl[i])
		i = (i + 1) & (cap - 1);
	tbl[i] = qp;
}

static int tbl_insert(struct dxl_vrb_ctx *c, struct dxl_vrb_qp *qp)
{
	if ((c->nqp + 1) * 2 > c->tbl_cap) {
		uint32_t cap = c->tbl_cap * 2;
		struct dxl_vrb_qp **t = calloc(cap, sizeof(*t));
		if (!t)
			return dxl_err_set(DXL_E_NOMEM, "ctx %u: out of memory",
					   c->base.idx);
		for (uint32_t i = 0; i < c->tbl_cap; i++)
			if (c->tbl[i])
				tbl_put(t, cap, c->tbl[i]);
		free(c->tbl);
		c->tbl = t;
		c->tbl_cap = cap;
	}
	tbl_put(c->tbl, c->tbl_cap, qp);
	c->nqp++;
	return 0;
}

static void tbl_remove(struct dxl_vrb_ctx *c, struct dxl_vrb_qp *qp)
{
	uint32_t mask = c->tbl_cap - 1;
	uint32_t i = tbl_hash(qp->qpn, c->tbl_cap);
	while (c->tbl[i] && c->tbl[i] != qp)
		i = (i + 1) & mask;
	if (!c->tbl[i])
		return;
	c->tbl[i] = NULL;
	c->nqp--;
	/* backward-shift the rest of the cluster so probes never stop early */
	for (uint32_t j = (i + 1) & mask; c->tbl[j]; j = (j + 1) & mask) {
		struct dxl_vrb_qp *q = c->tbl[j];
		uint32_t home = tbl_hash(q->qpn, c->tbl_cap);
		/* q may move to i if i lies cyclically in [home, j) */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			c->tbl[i] = q;
			c->tbl[j] = NULL;
			i = j;
		}
	}
}

/* ---- adoption of QPs ----------------------------------------------------- */

/* Keep the CQ large enough for the worst case: every QP's send queue full of
 * completions (flushes included) plus every posted receive. */
static void ensure_cq(struct dxl_vrb_ctx *c)
{
	const struct dxl_fabric_cfg *cfg = &c->base.f->cfg;
	uint64_t need = (uint64_t)cfg->srq_depth + (uint64_t)c->nqp * cfg->sq_depth;
	if (need <= (uint64_t)c->cqe)
		return;
	int max = c->vf->dev.max_cqe;
	if (c->cqe < max) {
		uint64_t want = DXL_MAX(need, 2 * (uint64_t)c->cqe);
		int n = (int)DXL_MIN(want, (uint64_t)max);
		int r = ibv_resize_cq(c->cq, n);
		if (!r) {
			c->cqe = c->cq->cqe;
			DXL_DEBUG("verbs: ctx %u: CQ grown to %d entries",
				  c->base.idx, c->cqe);
			if (need <= (uint64_t)c->cqe)
				return;
		} else if (!c->cq_warned) {
			DXL_DEBUG("verbs: ctx %u: ibv_resize_cq(%d): %s",
				  c->base.idx, n, strerror(r));
		}
	}
	if (!c->cq_warned) {
		c->cq_warned = true;
		DXL_WARN("verbs: ctx %u: %u QPs could need %llu CQ entries, the "
			 "CQ has %d: poll often or raise fabric.cq_depth",
			 c->base.idx, c->nqp, (unsigned long long)need, c->cqe);
	}
}

int dxl_vrb_ctx_adopt(struct dxl_vrb_ctx *c, struct dxl_vrb_qp *qp)
{
	qp->serial = c->next_serial;
	c->next_serial = (c->next_serial + 1) & 0x7fffffffu;
	if (!c->next_serial)
		c->next_serial = 1;
	int ret = tbl_insert(c, qp);
	if (ret)
		return ret;
	qp->adopted = true;
	ensure_cq(c);
	return 0;
}

void dxl_vrb_ctx_forget(struct dxl_vrb_ctx *c, struct dxl_vrb_qp *qp)
{
	if (qp->adopted) {
		tbl_remove(c, qp);
		qp->adopted = false;
	}
	/* "completions of its outstanding requests are dropped"; a received
	 * message whose QP is gone gives its buffer back as FLUSHED, qp NULL */
	int w = 0;
	if (c->stash_head) /* compact in place: w never passes r */
		memmove(c->stash, c->stash + c->stash_head,
			(size_t)c->stash_n * sizeof(*c->stash));
	c->stash_head = 0;
	for (int r = 0; r < c->stash_n; r++) {
		struct dxl_wc wc = c->stash[r];
		if (wc.qp == &qp->base) {
			if (wc.opcode != DXL_WC_RECV)
				continue;
			wc.qp = NULL;
			wc.status = DXL_WC_FLUSHED;
		}
		c->stash[w++] = wc;
	}
	c->stash_head = 0;
	c->stash_n = w;
}

void dxl_vrb_ctx_push_pending(struct dxl_vrb_ctx *c, struct dxl_vrb_qp *qp)
{
	struct dxl_vrb_qp *head = atomic_load_explicit(&c->pending,
						       memory_order_relaxed);
	do {
		qp->pending_next = head;
		/* release: the owner that takes qp sees it fully built */
	} while (!atomic_compare_exchange_weak_explicit(
		&c->pending, &head, qp, memory_order_release,
		memory_order_relaxed));
}

static void drain_pending(struct dxl_vrb_ctx *c)
{
	/* acquire: pairs with the release in push_pending */
	struct dxl_vrb_qp *q = atomic_exchange_explicit(&c->pending, NULL,
							memory_order_acquire);
	while (q) {
		struct dxl_vrb_qp *next = q->pending_next;
		q->pending_next = NULL;
		if (dxl_vrb_ctx_adopt(c, q)) {
			DXL_WARN("verbs: ctx %u: cannot track passive QP %u: %s",
				 c->base.idx, q->qpn, dxl_errmsg());
			if (c->draining) {
				/* inside a QP's destruction (cm_lock held):
				 * destroy it afterwards, in reap() */
				q->pending_next = c->orphans;
				c->orphans = q;
			} else {
				dxl_vrb_qp_destroy(q);
			}
		} else if (atomic_load_explicit(&q->gone, memory_order_acquire)) {
			c->reap_pending = true;
		}
		q = next;
	}
}

static void destroy_orphans(struct dxl_vrb_ctx *c)
{
	while (c->orphans) {
		struct dxl_vrb_qp *q = c->orphans;
		c->orphans = q->pending_next;
		q->pending_next = NULL;
		dxl_vrb_qp_destroy(q);
	}
}

static struct dxl_vrb_qp *lookup(struct dxl_vrb_ctx *c, uint32_t qpn)
{
	struct dxl_vrb_qp *q = tbl_find(c, qpn);
	if (!q && atomic_load_explicit(&c->pending, memory_order_relaxed)) {
		drain_pending(c);
		q = tbl_find(c, qpn);
	}
	return q;
}

/* A peer left (the CM thread set qp->gone and moved the QP to ERR): show it
 * in dxl_qp_state, and collect passive QPs the user never saw. */
static void check_gone(struct dxl_vrb_ctx *c)
{
	unsigned g = atomic_load_explicit(&c->gone, memory_order_acquire);
	if (g == c->gone_seen)
		return;
	c->gone_seen = g;
	for (uint32_t i = 0; i < c->tbl_cap; i++) {
		struct dxl_vrb_qp *q = c->tbl[i];
		if (!q || !atomic_load_explicit(&q->gone, memory_order_acquire))
			continue;
		if (q->base.state == DXL_QP_RTS) {
			q->base.state = DXL_QP_ERR;
			/* the first outstanding request that gets flushed
			 * reports why */
			q->cause = DXL_WC_PEER_UNREACHABLE;
		}
		if (!q->seen)
			c->reap_pending = true;
	}
}

/* Destroy unseen passive QPs whose peer left, once the CQ has been emptied
 * (a message that arrived before the disconnect has been reported by then
 * and made its QP "seen"). */
static void reap_gone(struct dxl_vrb_ctx *c)
{
	c->reap_pending = false;
	/* removal shifts entries (cyclically), so rescan after each one */
	for (uint32_t i = 0; i < c->tbl_cap;) {
		struct dxl_vrb_qp *q = c->tbl[i];
		if (q && !q->seen &&
		    atomic_load_explicit(&q->gone, memory_order_acquire)) {
			DXL_DEBUG("verbs: ctx %u: dropping passive QP %u of node "
				  "%u (peer left)",
				  c->base.idx, q->qpn, q->base.remote_node);
			dxl_vrb_qp_destroy(q);
			i = 0;
			continue;
		}
		i++;
	}
}

/* ---- completions --------------------------------------------------------- */

static const enum dxl_wc_opcode wc_op[] = {
	[DXL_WR_READ] = DXL_WC_READ, [DXL_WR_WRITE] = DXL_WC_WRITE,
	[DXL_WR_CAS] = DXL_WC_CAS,   [DXL_WR_FAA] = DXL_WC_FAA,
	[DXL_WR_SEND] = DXL_WC_SEND,
};

static bool translate_recv(struct dxl_vrb_ctx *c, const struct ibv_wc *w,
			   struct dxl_wc *out)
{
	uint32_t slot = (uint32_t)w->wr_id;
	if (slot >= c->base.f->cfg.srq_depth) {
		DXL_WARN("verbs: ctx %u: receive completion with bad slot %u",
			 c->base.idx, slot);
		return false;
	}
	out->wr_id = c->rx_wr_id[slot];
	c->rx_free[c->rx_nfree++] = slot;
	out->opcode = DXL_WC_RECV;
	out->byte_len = w->status == IBV_WC_SUCCESS ? w->byte_len : 0;
	struct dxl_vrb_qp *q = lookup(c, w->qp_num);
	out->qp = q && !q->dying ? &q->base : NULL;
	out->status = dxl_vrb_wc_status(w->status, DXL_WC_RECV);
	if (!out->qp) {
		/* the QP was deleted: give the buffer back (the CQ was
		 * drained when it was, so a QP found here is never a newer
		 * one that reuses a deleted QP's number) */
		out->status = DXL_WC_FLUSHED;
		out->byte_len = 0;
		return true;
	}
	q->seen = true;
	if (out->status != DXL_WC_SUCCESS) {
		DXL_DEBUG("verbs: ctx %u: receive on QP %u failed: %s (vendor "
			  "0x%x)",
			  c->base.idx, q->qpn, ibv_wc_status_str(w->status),
			  w->vendor_err);
		q->base.state = DXL_QP_ERR;
	}
	return true;
}

/* One CQE -> at most one dxl_wc. Returns whether *out was filled. */
static bool translate(struct dxl_vrb_ctx *c, const struct ibv_wc *w,
		      struct dxl_wc *out)
{
	if (w->wr_id & DXL_VRB_RECV_TAG)
		return translate_recv(c, w, out);
	struct dxl_vrb_qp *q = lookup(c, w->qp_num);
	uint32_t serial = (uint32_t)(w->wr_id >> 32);
	uint32_t seq = (uint32_t)w->wr_id;
	if (!q || q->serial != serial || q->dying) {
		/* a completion of a deleted QP: dropped */
		return false;
	}
	uint32_t outstanding = q->posted - q->done;
	if ((uint32_t)(seq - q->done) >= outstanding) {
		DXL_WARN("verbs: ctx %u: QP %u: completion of seq %u outside "
			 "the outstanding [%u, %u)",
			 c->base.idx, q->qpn, seq, q->done, q->posted);
		return false;
	}
	const struct dxl_vrb_slot *s = &q->ring[seq & q->ring_mask];
	/* RC completes in order: everything up to seq is done, so a
	 * signalled completion frees the slots of the unsignalled ones
	 * before it */
	q->done = seq + 1;
	if (w->status == IBV_WC_SUCCESS) {
		if (!(s->flags & DXL_VRB_SLOT_USER_SIG))
			return false; /* our own signal */
		out->wr_id = s->wr_id;
		out->status = DXL_WC_SUCCESS;
		out->opcode = wc_op[s->op];
		out->byte_len = s->len;
		out->qp = &q->base;
		return true;
	}
	enum dxl_wc_status st = dxl_vrb_wc_status(w->status, wc_op[s->op]);
	bool first = q->base.state == DXL_QP_RTS;
	q->base.state = DXL_QP_ERR;
	if (st == DXL_WC_FLUSHED) {
		if (first && atomic_load_explicit(&q->gone, memory_order_acquire))
			st = DXL_WC_PEER_UNREACHABLE; /* flushed: peer left */
		else if (q->cause != DXL_WC_SUCCESS)
			st = q->cause;
	}
	if (first || st != DXL_WC_FLUSHED)
		DXL_DEBUG("verbs: ctx %u: QP %u to node %u: request seq %u "
			  "failed: %s (vendor 0x%x)",
			  c->base.idx, q->qpn, q->base.remote_node, seq,
			  ibv_wc_status_str(w->status), w->vendor_err);
	if (s->flags & DXL_VRB_SLOT_INTERNAL) {
		/* not the user's request: pass the reason on */
		if (st != DXL_WC_FLUSHED)
			q->cause = st;
		return false;
	}
	q->cause = DXL_WC_SUCCESS;
	out->wr_id = s->wr_id;
	out->status = st;
	out->opcode = wc_op[s->op];
	out->byte_len = 0;
	out->qp = &q->base;
	return true;
}

/* cq_take -- poll up to n completions from the CQ, translated into out[];
 * *empty: the CQ had no more */
static int cq_take(struct dxl_vrb_ctx *c, struct dxl_wc *out, int n, bool *empty)
{
	int got = 0;
	*empty = false;
	while (got < n) {
		int want = DXL_MIN(n - got, DXL_VRB_POLL_BATCH);
		int k = ibv_poll_cq(c->cq, want, c->raw);
		if (k < 0) {
			if (got)
				return got;
			return dxl_err_set(DXL_E_IO,
					   "poll: ibv_poll_cq on ctx %u failed (%d)",
					   c->base.idx, k);
		}
		for (int i = 0; i < k; i++)
			if (translate(c, &c->raw[i], &out[got]))
				got++;
		if (k < want) {
			*empty = true;
			break;
		}
	}
	return got;
}

void dxl_vrb_ctx_drain_cq(struct dxl_vrb_ctx *c, struct dxl_vrb_qp *qp)
{
	(void)qp; /* marked dying: translate() knows it */
	c->draining = true;
	drain_pending(c); /* a message of a pending QP is not a dead one's */
	if (c->stash_head && c->stash_n)
		memmove(c->stash, c->stash + c->stash_head,
			(size_t)c->stash_n * sizeof(*c->stash));
	c->stash_head = 0;
	for (;;) {
		if (c->stash_n + DXL_VRB_POLL_BATCH > c->stash_cap) {
			int cap = c->stash_cap * 2;
			struct dxl_wc *n = realloc(c->stash, (size_t)cap * sizeof(*n));
			if (!n) {
				/* cannot hold them: the rest stays in the CQ
				 * (and may be credited to a reused number) */
				DXL_ERROR("verbs: ctx %u: out of memory draining the "
					  "CQ for QP %u", c->base.idx, qp->qpn);
				break;
			}
			c->stash = n;
			c->stash_cap = cap;
		}
		bool empty;
		int k = cq_take(c, c->stash + c->stash_n, DXL_VRB_POLL_BATCH, &empty);
		if (k < 0)
			break;
		c->stash_n += k;
		if (empty)
			break;
	}
	c->draining = false;
}

uint32_t dxl_vrb_qp_count(struct dxl_ctx *bc)
{
	struct dxl_vrb_ctx *c = vctx(bc);
	drain_pending(c);
	return c->nqp;
}

/* reap -- move up to n completions from the CQ into out[] */
static int reap(struct dxl_vrb_ctx *c, struct dxl_wc *out, int n)
{
	if (atomic_load_explicit(&c->pending, memory_order_relaxed))
		drain_pending(c);
	if (c->orphans)
		destroy_orphans(c);
	check_gone(c);
	bool empty = false;
	int got = cq_take(c, out, n, &empty);
	if (got >= 0 && empty && c->reap_pending)
		reap_gone(c);
	return got;
}

int dxl_vrb_poll(struct dxl_ctx *bc, struct dxl_wc *wc, int n)
{
	struct dxl_vrb_ctx *c = vctx(bc);
	int got = 0;
	while (got < n && c->stash_n > 0) {
		wc[got++] = c->stash[c->stash_head++];
		c->stash_n--;
	}
	if (c->stash_n == 0)
		c->stash_head = 0;
	if (got < n) {
		int k = reap(c, wc + got, n - got);
		if (k < 0)
			return got ? got : k;
		got += k;
	}
	return got;
}

/* Reap ahead into the stash; > 0 when a completion is waiting for poll. */
static int fill_stash(struct dxl_vrb_ctx *c)
{
	if (c->stash_n > 0)
		return c->stash_n;
	c->stash_head = 0;
	int k = reap(c, c->stash, DXL_MIN(DXL_VRB_STASH, c->stash_cap));
	if (k > 0)
		c->stash_n = k;
	return k;
}

int dxl_vrb_wait(struct dxl_ctx *bc, int timeout_ms)
{
	struct dxl_vrb_ctx *c = vctx(bc);
	int k = fill_stash(c);
	if (k)
		return k > 0 ? 0 : k;
	if (timeout_ms == 0)
		return dxl_err_set(DXL_E_TIMEDOUT, "wait: nothing on ctx %u",
				   bc->idx);
	uint64_t now = dxl_now_ns();
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX
					   : now + (uint64_t)timeout_ms * 1000000ull;
	uint64_t spin_end = now + (uint64_t)c->base.f->cfg.idle_spin_us * 1000ull;
	if (spin_end > deadline)
		spin_end = deadline;
	while (dxl_now_ns() < spin_end) {
		if ((k = fill_stash(c)))
			return k > 0 ? 0 : k;
		dxl_cpu_relax();
	}
	for (;;) {
		if (!c->armed) {
			int r = ibv_req_notify_cq(c->cq, 0);
			if (r)
				return dxl_err_errno(r, "wait: ibv_req_notify_cq on "
						     "ctx %u", c->base.idx);
			c->armed = true;
		}
		/* a completion may have arrived between the last poll and
		 * arming: it raised no event, so look again */
		if ((k = fill_stash(c)))
			return k > 0 ? 0 : k;
		int ms = -1;
		if (deadline != UINT64_MAX) {
			now = dxl_now_ns();
			if (now >= deadline)
				break;
			ms = (int)((deadline - now + 999999) / 1000000);
		}
		struct pollfd p = {.fd = c->ch->fd, .events = POLLIN};
		int r = poll(&p, 1, ms);
		if (r < 0 && errno != EINTR)
			return dxl_err_errno(errno, "wait: poll on ctx %u",
					     c->base.idx);
		if (r > 0) {
			struct ibv_cq *ev_cq;
			void *ev_ctx;
			if (ibv_get_cq_event(c->ch, &ev_cq, &ev_ctx) == 0) {
				c->armed = false;
				if (++c->unacked >= 64) {
					ibv_ack_cq_events(c->cq, c->unacked);
					c->unacked = 0;
				}
			}
		}
		if ((k = fill_stash(c)))
			return k > 0 ? 0 : k;
		if (r == 0)
			break;
	}
	return dxl_err_set(DXL_E_TIMEDOUT, "wait: nothing on ctx %u within %d ms",
			   bc->idx, timeout_ms);
}

/* ---- receive ------------------------------------------------------------- */

int dxl_vrb_post_recv(struct dxl_ctx *bc, void *buf, uint32_t len, uint32_t lkey,
		      uint64_t wr_id)
{
	struct dxl_vrb_ctx *c = vctx(bc);
	if (c->rx_nfree == 0)
		return dxl_err_set(DXL_E_AGAIN,
				   "post_recv: ctx %u has srq_depth (%u) buffers "
				   "posted",
				   bc->idx, bc->f->cfg.srq_depth);
	uint32_t slot = c->rx_free[--c->rx_nfree];
	c->rx_wr_id[slot] = wr_id;
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
	struct ibv_recv_wr w, *bad = NULL;
	memset(&w, 0, sizeof(w));
	w.wr_id = DXL_VRB_RECV_TAG | slot;
	w.sg_list = &sge;
	w.num_sge = 1;
	int r = ibv_post_srq_recv(c->srq, &w, &bad);
	if (r) {
		c->rx_free[c->rx_nfree++] = slot;
		return dxl_err_set(r == ENOMEM ? DXL_E_AGAIN : DXL_E_IO,
				   "post_recv: ibv_post_srq_recv on ctx %u: %s",
				   bc->idx, strerror(r));
	}
	return 0;
}
