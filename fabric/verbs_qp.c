/* verbs_qp.c -- RC queue pairs of the verbs provider: create, connect states, post */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fabric/verbs_internal.h"

/* ---- create and move through INIT, RTR, RTS --------------------------------- */

int dxl_vrb_qp_new(struct dxl_vrb_ctx *c, struct rdma_cm_id *id, bool passive,
		   struct dxl_vrb_qp **out)
{
	struct dxl_vrb_fabric *vf = c->vf;
	const struct dxl_fabric_cfg *cfg = &c->base.f->cfg;
	int ret;
	struct dxl_vrb_qp *q = calloc(1, sizeof(*q));
	if (!q)
		return dxl_err_set(DXL_E_NOMEM, "qp: out of memory");
	q->base.ctx = &c->base;
	q->base.passive = passive;
	q->base.state = DXL_QP_RTS;
	q->vc = c;
	q->id = NULL; /* the caller owns id until we succeed */
	q->cause = DXL_WC_SUCCESS;
	atomic_init(&q->gone, 0);
	atomic_init(&q->last_wqe, 0);
	uint32_t ring = 1;
	while (ring < cfg->sq_depth)
		ring <<= 1;
	q->ring_mask = ring - 1;
	q->ring = calloc(ring, sizeof(*q->ring));
	if (!q->ring) {
		free(q);
		return dxl_err_set(DXL_E_NOMEM, "qp: out of memory");
	}

	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_context = q;
	a.send_cq = c->cq;
	a.recv_cq = c->cq;
	a.srq = c->srq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 0; /* selective signalling */
	a.cap.max_send_wr = cfg->sq_depth;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_wr = 0; /* receives come from the SRQ */
	a.cap.max_recv_sge = 0;
	a.cap.max_inline_data = cfg->max_inline;
	/* ibv_create_qp_ex with only a PD in comp_mask ends up here as well; a
	 * parent domain as the PD puts the QP in the ctx's thread domain */
	q->qp = ibv_create_qp(c->qp_pd, &a);
	if (!q->qp) {
		int e = errno;
		ret = dxl_err_set(e == ENOMEM ? DXL_E_NOMEM : DXL_E_IO,
				  "qp: ibv_create_qp(RC, sq_depth %u, max_inline %u) "
				  "on %s: %s",
				  cfg->sq_depth, cfg->max_inline, vf->dev_name,
				  strerror(e));
		goto err;
	}
	q->qpn = q->qp->qp_num;
	if (a.cap.max_inline_data < cfg->max_inline) {
		ret = dxl_err_set(DXL_E_INVAL,
				  "qp: %s gives max_inline %u < fabric.max_inline %u",
				  vf->dev_name, a.cap.max_inline_data,
				  cfg->max_inline);
		goto err;
	}

	struct ibv_qp_attr at;
	int mask = 0;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_INIT;
	if (rdma_init_qp_attr(id, &at, &mask)) {
		ret = dxl_err_errno(errno, "qp %u: rdma_init_qp_attr(INIT)", q->qpn);
		goto err;
	}
	/* rdma_cm grants nothing to the active side before the REP arrives;
	 * the MRs' own access flags are what protects memory */
	at.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
			     IBV_ACCESS_REMOTE_WRITE |
			     (vf->atomics ? IBV_ACCESS_REMOTE_ATOMIC : 0);
	mask |= IBV_QP_STATE | IBV_QP_ACCESS_FLAGS;
	int r = ibv_modify_qp(q->qp, &at, mask);
	if (r) {
		ret = dxl_err_errno(r, "qp %u: ibv_modify_qp(INIT)", q->qpn);
		goto err;
	}
	q->id = id;
	*out = q;
	return 0;
err:
	dxl_vrb_qp_free(q);
	return ret;
}

/* The kernel's rdma_ucm reports RoCE-only attribute bits (21-23) that an
 * InfiniBand port refuses; librdmacm masks them off the same way. */
#define VRB_ROCE_ONLY_MASK 0xe00000

int dxl_vrb_qp_rtr_rts(struct dxl_vrb_qp *q, uint8_t resp_res,
		       uint8_t init_depth)
{
	struct dxl_vrb_fabric *vf = q->vc->vf;
	const struct dxl_fabric_cfg *cfg = &q->vc->base.f->cfg;
	struct ibv_qp_attr at;
	int mask = 0;

	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	if (rdma_init_qp_attr(q->id, &at, &mask))
		return dxl_err_errno(errno, "qp %u: rdma_init_qp_attr(RTR)", q->qpn);
	if (vf->link_layer == IBV_LINK_LAYER_INFINIBAND)
		mask &= ~VRB_ROCE_ONLY_MASK;
	at.max_dest_rd_atomic = resp_res;
	at.min_rnr_timer = vf->to.rnr_timer; /* what our RNR NAKs ask for */
	mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	if (cfg->gid_index >= 0 && at.ah_attr.is_global)
		at.ah_attr.grh.sgid_index = (uint8_t)cfg->gid_index;
	int r = ibv_modify_qp(q->qp, &at, mask);
	if (r)
		return dxl_err_errno(r, "qp %u: ibv_modify_qp(RTR)", q->qpn);
	q->rtr = true;

	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	if (rdma_init_qp_attr(q->id, &at, &mask))
		return dxl_err_errno(errno, "qp %u: rdma_init_qp_attr(RTS)", q->qpn);
	/* dead peer -> IBV_WC_RETRY_EXC_ERR after about
	 * 4.096 us * 2^timeout * (retry_cnt + 1) <= timeout_ms */
	at.timeout = vf->to.ack_timeout;
	at.retry_cnt = vf->to.retry_cnt;
	at.rnr_retry = vf->to.rnr_retry;
	at.max_rd_atomic = init_depth;
	mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		IBV_QP_MAX_QP_RD_ATOMIC;
	r = ibv_modify_qp(q->qp, &at, mask);
	if (r)
		return dxl_err_errno(r, "qp %u: ibv_modify_qp(RTS)", q->qpn);
	return 0;
}

/*
 * to_error_and_wait -- IB spec 10.3.1 (destroying a QP attached to an
 * SRQ): a QP may hold receive WQEs it took from the SRQ; destroyed before
 * the device gave them back, they (and the user's buffers) are lost and
 * the SRQ shrinks. So: move the QP to the error state (the device flushes
 * what it holds to the CQ), wait for the affiliated Last WQE Reached event
 * (the CM thread reads async events), then destroy and drain the CQ
 * (dxl_vrb_qp_destroy). The wait is bounded by the fabric's timeout; a
 * device that let it pass without the event is taken not to send it, and
 * later destroys wait only DXL_VRB_LAST_WQE_GRACE_MS (warned once).
 */
/* devices found not to send Last WQE Reached (older rxe, e.g. Linux 6.1), by
 * name: every fabric of the process learns it from the first one */
static pthread_mutex_t lw_mu = PTHREAD_MUTEX_INITIALIZER;
static char lw_silent[8][IBV_SYSFS_NAME_MAX];
static unsigned lw_nsilent;

static bool lw_device_silent(const char *dev, bool set)
{
	pthread_mutex_lock(&lw_mu);
	bool found = false;
	for (unsigned i = 0; i < lw_nsilent && !found; i++)
		found = strcmp(lw_silent[i], dev) == 0;
	if (set && !found && lw_nsilent < 8)
		snprintf(lw_silent[lw_nsilent++], sizeof(lw_silent[0]), "%s", dev);
	pthread_mutex_unlock(&lw_mu);
	return found;
}

static void to_error_and_wait(struct dxl_vrb_qp *q)
{
	struct dxl_vrb_fabric *vf = q->vc->vf;
	struct ibv_qp_attr at;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_ERR;
	int r = ibv_modify_qp(q->qp, &at, IBV_QP_STATE);
	if (r) {
		DXL_DEBUG("verbs: QP %u: ibv_modify_qp(ERR): %s", q->qpn, strerror(r));
		return;
	}
	bool missing = atomic_load_explicit(&vf->no_last_wqe, memory_order_relaxed);
	if (!missing && lw_device_silent(vf->dev_name, false))
		atomic_store(&vf->no_last_wqe, missing = true);
	uint64_t wait_ms = missing ? DXL_VRB_LAST_WQE_GRACE_MS
				   : DXL_MIN(q->vc->base.f->cfg.timeout_ms,
					     (uint32_t)DXL_VRB_LAST_WQE_WAIT_MS);
	uint64_t end = dxl_now_ns() + wait_ms * 1000000ull;
	while (!atomic_load_explicit(&q->last_wqe, memory_order_acquire)) {
		if (dxl_now_ns() >= end) {
			if (!missing) {
				atomic_store(&vf->no_last_wqe, true);
				if (!lw_device_silent(vf->dev_name, true))
					DXL_WARN("verbs: %s sent no Last WQE Reached event for QP %u "
						 "in %llu ms: destroying QPs after %d ms from now on "
						 "(receive buffers a QP still held may be lost)",
						 vf->dev_name, q->qpn, (unsigned long long)wait_ms,
						 DXL_VRB_LAST_WQE_GRACE_MS);
			}
			return;
		}
		struct timespec ts = {.tv_sec = 0, .tv_nsec = 100000};
		nanosleep(&ts, NULL);
	}
	if (missing) /* it does send them after all */
		atomic_store(&vf->no_last_wqe, false);
}

/* ---- delete -------------------------------------------------------------- */

void dxl_vrb_qp_free(struct dxl_vrb_qp *q)
{
	if (q->qp) {
		int r = ibv_destroy_qp(q->qp);
		if (r)
			DXL_WARN("verbs: ibv_destroy_qp(%u): %s", q->qpn,
				 strerror(r));
	}
	if (q->id && rdma_destroy_id(q->id))
		DXL_WARN("verbs: rdma_destroy_id (QP %u): %s", q->qpn,
			 strerror(errno));
	free(q->ring);
	free(q);
}

void dxl_vrb_qp_destroy(struct dxl_vrb_qp *q)
{
	struct dxl_vrb_ctx *c = q->vc;
	if (q->id) {
		/* from now on the CM thread leaves q alone */
		pthread_mutex_lock(&c->vf->cm_lock);
		q->id->context = NULL;
		pthread_mutex_unlock(&c->vf->cm_lock);
	}
	/* tell the peer now rather than by its timeouts; a peer that already
	 * left, or a connection never established, makes this fail: fine */
	if (q->id && !atomic_load_explicit(&q->gone, memory_order_acquire))
		(void)rdma_disconnect(q->id);
	if (q->qp && q->rtr)
		to_error_and_wait(q);
	if (q->qp) {
		/* the QP's number may be reused by the next QP created: its
		 * completions still in the CQ (a receive holds one of the
		 * user's buffers) must not be credited to that QP. Destroy it
		 * (no completion of it appears after that), then move the CQ's
		 * contents out, q's translated as a dead QP's; cm_lock keeps
		 * the CM thread from creating a passive QP meanwhile. */
		pthread_mutex_lock(&c->vf->cm_lock);
		int r = ibv_destroy_qp(q->qp);
		if (r)
			DXL_WARN("verbs: ibv_destroy_qp(%u): %s", q->qpn, strerror(r));
		q->qp = NULL;
		q->dying = true;
		dxl_vrb_ctx_drain_cq(c, q);
		pthread_mutex_unlock(&c->vf->cm_lock);
	}
	dxl_vrb_ctx_forget(c, q);
	dxl_vrb_qp_free(q);
}

void dxl_vrb_qp_delete(struct dxl_qp *qp)
{
	dxl_vrb_qp_destroy((struct dxl_vrb_qp *)qp);
}

/* ---- post ---------------------------------------------------------------- */

static uint64_t send_wr_id(const struct dxl_vrb_qp *q, uint32_t seq)
{
	return ((uint64_t)q->serial << 32) | seq;
}

/*
 * The chain would never fit: the requests since the last signalled one (the
 * "run") can only be freed by a later signalled completion. Post a zero-byte
 * signalled RDMA WRITE of our own (C9-88: no R_Key check at zero length)
 * so that polling frees them. Needs one free slot.
 */
static void post_flush(struct dxl_vrb_qp *q)
{
	uint32_t seq = q->posted;
	struct dxl_vrb_slot *s = &q->ring[seq & q->ring_mask];
	s->wr_id = 0;
	s->len = 0;
	s->op = DXL_WR_WRITE;
	s->flags = DXL_VRB_SLOT_INTERNAL;
	struct ibv_send_wr w, *bad = NULL;
	memset(&w, 0, sizeof(w));
	w.wr_id = send_wr_id(q, seq);
	w.opcode = IBV_WR_RDMA_WRITE;
	w.send_flags = IBV_SEND_SIGNALED;
	w.num_sge = 0;
	int r = ibv_post_send(q->qp, &w, &bad);
	if (r) {
		DXL_DEBUG("verbs: QP %u: flush WRITE not posted: %s", q->qpn,
			  strerror(r));
		return;
	}
	q->posted++;
	q->run = 0;
}

int dxl_vrb_qp_post(struct dxl_qp *bq, struct dxl_wr *chain, struct dxl_wr **bad)
{
	struct dxl_vrb_qp *q = (struct dxl_vrb_qp *)bq;
	struct dxl_vrb_ctx *c = q->vc;
	const struct dxl_fabric_cfg *cfg = &c->base.f->cfg;
	const uint32_t depth = cfg->sq_depth;

	uint32_t n = 0;
	for (struct dxl_wr *wr = chain; wr; wr = wr->next, n++) {
		if ((wr->op == DXL_WR_CAS || wr->op == DXL_WR_FAA) &&
		    !c->vf->atomics) {
			if (bad)
				*bad = wr;
			return dxl_err_set(DXL_E_NOTSUP,
					   "qp_post: %s has no atomics",
					   c->vf->dev_name);
		}
		if (n >= depth) {
			if (bad)
				*bad = chain;
			return dxl_err_set(DXL_E_INVAL,
					   "qp_post: a chain of more than sq_depth "
					   "(%u) requests can never be posted",
					   depth);
		}
	}
	uint32_t used = q->posted - q->done;
	uint32_t free_slots = depth - used;
	if (n > free_slots) {
		if (n > depth - q->run && free_slots > 0)
			post_flush(q);
		if (bad)
			*bad = chain;
		return dxl_err_set(DXL_E_AGAIN,
				   "qp_post: %u requests, %u free send slots of %u "
				   "on QP %u: poll and retry",
				   n, free_slots, depth, q->qpn);
	}

	/* selective signalling: at least one request in every depth/2 asks
	 * for a completion, so the slots of unsignalled ones get freed */
	const uint32_t interval = depth / 2;
	uint32_t run = q->run;
	uint32_t i = 0;
	for (struct dxl_wr *wr = chain; wr; wr = wr->next, i++) {
		uint32_t seq = q->posted + i;
		struct dxl_vrb_slot *s = &q->ring[seq & q->ring_mask];
		bool user_sig = wr->flags & DXL_WR_SIGNALED;
		bool sig = user_sig || run + 1 >= interval;
		run = sig ? 0 : run + 1;
		s->wr_id = wr->wr_id;
		s->len = wr->len;
		s->op = (uint8_t)wr->op;
		s->flags = user_sig ? DXL_VRB_SLOT_USER_SIG : 0;

		struct ibv_send_wr *w = &c->wrs[i];
		struct ibv_sge *sg = &c->sges[i];
		memset(w, 0, sizeof(*w));
		w->wr_id = send_wr_id(q, seq);
		w->next = wr->next ? &c->wrs[i + 1] : NULL;
		sg->addr = (uintptr_t)wr->local;
		sg->length = wr->len;
		sg->lkey = wr->lkey;
		w->sg_list = sg;
		w->num_sge = wr->len ? 1 : 0;
		w->send_flags = (sig ? IBV_SEND_SIGNALED : 0) |
				((wr->flags & DXL_WR_INLINE) ? IBV_SEND_INLINE : 0);
		switch (wr->op) {
		case DXL_WR_READ:
			w->opcode = IBV_WR_RDMA_READ;
			w->wr.rdma.remote_addr = wr->remote_addr;
			w->wr.rdma.rkey = wr->rkey;
			break;
		case DXL_WR_WRITE:
			w->opcode = IBV_WR_RDMA_WRITE;
			w->wr.rdma.remote_addr = wr->remote_addr;
			w->wr.rdma.rkey = wr->rkey;
			break;
		case DXL_WR_CAS:
		case DXL_WR_FAA:
			if (wr->remote_addr & 7) {
				/* a misaligned remote atomic must fail as a remote
				 * access error completion at its place in the queue
				 * (fabric.h). Some providers (rxe) refuse it inside
				 * ibv_post_send instead, so post a stand-in that every
				 * device fails the same way: an 8-byte READ of remote
				 * address 0, which lies in no region. The slot keeps
				 * the caller's opcode for the completion. */
				w->opcode = IBV_WR_RDMA_READ;
				w->wr.rdma.remote_addr = 0;
				w->wr.rdma.rkey = wr->rkey;
				break;
			}
			if (wr->op == DXL_WR_FAA) {
				w->opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
				w->wr.atomic.remote_addr = wr->remote_addr;
				w->wr.atomic.rkey = wr->rkey;
				w->wr.atomic.compare_add = wr->compare_add;
				break;
			}
			w->opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
			w->wr.atomic.remote_addr = wr->remote_addr;
			w->wr.atomic.rkey = wr->rkey;
			w->wr.atomic.compare_add = wr->compare_add;
			w->wr.atomic.swap = wr->swap;
			break;
		case DXL_WR_SEND:
			w->opcode = IBV_WR_SEND;
			break;
		}
	}

	struct ibv_send_wr *bad_wr = NULL;
	int r = ibv_post_send(q->qp, c->wrs, &bad_wr); /* one doorbell */
	if (r) {
		/* the device refused something we did not foresee; requests
		 * before bad_wr are posted (verbs cannot take them back) */
		uint32_t k = 0;
		if (bad_wr >= c->wrs && bad_wr < c->wrs + n)
			k = (uint32_t)(bad_wr - c->wrs);
		struct dxl_wr *wr = chain;
		run = q->run;
		for (uint32_t j = 0; j < k; j++, wr = wr->next)
			run = (c->wrs[j].send_flags & IBV_SEND_SIGNALED) ? 0 : run + 1;
		q->posted += k;
		q->run = run;
		if (bad)
			*bad = wr;
		return dxl_err_set(r == ENOMEM && k == 0 ? DXL_E_AGAIN : DXL_E_IO,
				   "qp_post: ibv_post_send on QP %u refused request "
				   "%u of %u (%u posted): %s",
				   q->qpn, k, n, k, strerror(r));
	}
	q->posted += n;
	q->run = run;
	return 0;
}
