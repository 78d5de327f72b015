/* verbs_cm.c -- connection management of the verbs provider (rdma_cm) */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fabric/verbs_internal.h"

/*
 * QP state transitions are ours, not rdma_cm's (no rdma_create_qp): that is
 * what lets a QP live in the ctx's parent domain, carry our transport
 * timeouts and honour fabric.gid_index. rdma_cm still resolves the address
 * and route, exchanges the private data and gives us the attributes
 * (rdma_init_qp_attr) for each transition.
 *
 * Active side (the owner thread, in dxl_qp_connect): a private event channel,
 * resolve address and route, create the QP (INIT), rdma_connect, wait for
 * CONNECT_RESPONSE, RTR, RTS, rdma_establish, then migrate the id to the
 * fabric's channel so that the CM thread sees its DISCONNECTED.
 *
 * Passive side (the CM thread): CONNECT_REQUEST -> check the hello, find the
 * ctx, create the QP in the ctx's CQ/SRQ/PD, INIT, RTR, RTS, hand it to the
 * ctx (pending list), rdma_accept. A QP whose peer leaves is marked gone and
 * moved to ERR (its outstanding requests flush); its owner does the rest.
 */

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	return 0;
}

static void hello_bytes(uint32_t node, enum dxl_vrb_reject reason,
			uint32_t ctx_dst, uint32_t ctx_src,
			uint8_t out[DXL_VRB_HELLO_SIZE])
{
	struct dxl_vrb_hello h = {
		.magic = DXL_VRB_MAGIC,
		.version = DXL_VRB_VERSION,
		.reason = (uint16_t)reason,
		.node = node,
		.ctx_dst = ctx_dst,
		.ctx_src = ctx_src,
	};
	dxl_vrb_hello_encode(&h, out);
}

static const char *status_str(int status)
{
	/* rdma_cm reports -errno, or a positive IB CM reject reason */
	return status < 0 ? strerror(-status) : "see status";
}

/* ---- the CM thread (passive side and disconnections) ----------------------- */

/* CM thread, under cm_lock: the peer of q left (or never came). */
static void mark_gone(struct dxl_vrb_qp *q)
{
	if (atomic_exchange_explicit(&q->gone, 1, memory_order_acq_rel))
		return;
	/* flag first, then the QP error: the owner that reaps a flushed
	 * completion caused by this modify sees the flag (release/acquire) */
	atomic_fetch_add_explicit(&q->vc->gone, 1, memory_order_release);
	struct ibv_qp_attr at;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_ERR;
	int r = ibv_modify_qp(q->qp, &at, IBV_QP_STATE);
	if (r)
		DXL_DEBUG("verbs: QP %u: ibv_modify_qp(ERR): %s", q->qpn,
			  strerror(r));
}

static int reject(struct rdma_cm_id *id, enum dxl_vrb_reject why, uint32_t me)
{
	uint8_t buf[DXL_VRB_HELLO_SIZE];
	hello_bytes(me, why, 0, 0, buf);
	if (rdma_reject(id, buf, sizeof(buf)))
		DXL_DEBUG("verbs: rdma_reject: %s", strerror(errno));
	return 1; /* the caller destroys the id after the ack */
}

static int on_request(struct dxl_vrb_fabric *vf, struct rdma_cm_event *ev)
{
	struct dxl_fabric *f = vf->f;
	struct rdma_cm_id *id = ev->id;
	const uint32_t me = f->cfg.node_id;
	struct dxl_vrb_hello h;

	if (dxl_vrb_hello_decode(ev->param.conn.private_data,
				 ev->param.conn.private_data_len, &h)) {
		DXL_DEBUG("verbs: connection request without dxl private data "
			  "rejected: %s", dxl_errmsg());
		return reject(id, DXL_VRB_REJ_PROTO, me);
	}
	if (h.version != DXL_VRB_VERSION) {
		DXL_WARN("verbs: node %u speaks fabric protocol version %u, we "
			 "speak %u: connection rejected",
			 h.node, h.version, DXL_VRB_VERSION);
		return reject(id, DXL_VRB_REJ_VERSION, me);
	}
	if (id->verbs != vf->verbs) {
		DXL_WARN("verbs: connection from node %u arrived on device %s, "
			 "the fabric uses %s: rejected",
			 h.node,
			 id->verbs ? ibv_get_device_name(id->verbs->device) : "?",
			 vf->dev_name);
		return reject(id, DXL_VRB_REJ_DEVICE, me);
	}

	pthread_mutex_lock(&vf->cm_lock);
	struct dxl_ctx *bc = dxl_fabric_ctx_lookup(f, h.ctx_dst);
	if (!bc) {
		pthread_mutex_unlock(&vf->cm_lock);
		DXL_DEBUG("verbs: node %u asked for ctx %u: none here", h.node,
			  h.ctx_dst);
		return reject(id, DXL_VRB_REJ_NOCTX, me);
	}
	struct dxl_vrb_ctx *c = (struct dxl_vrb_ctx *)bc;
	struct dxl_vrb_qp *q = NULL;
	if (dxl_vrb_qp_new(c, id, true, &q)) {
		pthread_mutex_unlock(&vf->cm_lock);
		DXL_WARN("verbs: connection from node %u to ctx %u: %s", h.node,
			 h.ctx_dst, dxl_errmsg());
		return reject(id, DXL_VRB_REJ_NORES, me);
	}
	q->base.remote_node = h.node;
	q->base.remote_ctx = h.ctx_src;
	/* the IB CM reports the REQ's depths from our point of view:
	 * responder_resources = READs/atomics the peer will send us */
	uint8_t resp = DXL_MIN(vf->resp_res, ev->param.conn.responder_resources);
	uint8_t init = DXL_MIN(vf->init_depth, ev->param.conn.initiator_depth);
	if (dxl_vrb_qp_rtr_rts(q, resp, init)) {
		DXL_WARN("verbs: connection from node %u to ctx %u: %s", h.node,
			 h.ctx_dst, dxl_errmsg());
		q->id = NULL; /* still ours: destroyed after the reject */
		dxl_vrb_qp_free(q);
		pthread_mutex_unlock(&vf->cm_lock);
		return reject(id, DXL_VRB_REJ_NORES, me);
	}
	/* known to the ctx before the peer can send: its first RECV
	 * completion finds the QP */
	id->context = q;
	dxl_vrb_ctx_push_pending(c, q);

	uint8_t buf[DXL_VRB_HELLO_SIZE];
	hello_bytes(me, DXL_VRB_REJ_NONE, 0, 0, buf);
	struct rdma_conn_param p;
	memset(&p, 0, sizeof(p));
	p.private_data = buf;
	p.private_data_len = sizeof(buf);
	p.responder_resources = resp;
	p.initiator_depth = init;
	p.flow_control = 1;
	p.retry_count = vf->to.retry_cnt;
	p.rnr_retry_count = vf->to.rnr_retry;
	p.srq = 1;
	p.qp_num = q->qpn;
	if (rdma_accept(id, &p)) {
		DXL_WARN("verbs: rdma_accept (node %u, ctx %u): %s", h.node,
			 h.ctx_dst, strerror(errno));
		mark_gone(q); /* its owner destroys it and the id */
	} else {
		DXL_DEBUG("verbs: accepted node %u ctx %u on QP %u of ctx %u",
			  h.node, h.ctx_src, q->qpn, h.ctx_dst);
	}
	pthread_mutex_unlock(&vf->cm_lock);
	return 0;
}

static void on_gone(struct dxl_vrb_fabric *vf, struct rdma_cm_event *ev)
{
	pthread_mutex_lock(&vf->cm_lock);
	struct dxl_vrb_qp *q = ev->id->context;
	if (q) {
		DXL_DEBUG("verbs: QP %u (ctx %u, node %u): %s, status %d",
			  q->qpn, q->vc->base.idx, q->base.remote_node,
			  rdma_event_str(ev->event), ev->status);
		mark_gone(q);
		if (ev->event == RDMA_CM_EVENT_DISCONNECTED)
			(void)rdma_disconnect(ev->id); /* answer the DREQ */
	}
	pthread_mutex_unlock(&vf->cm_lock);
}

int dxl_vrb_cm_handle(struct dxl_vrb_fabric *vf, struct rdma_cm_event *ev)
{
	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		return on_request(vf, ev);
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		if (ev->id == vf->listen_id) {
			DXL_ERROR("verbs: listener on %s: %s", vf->f->addr,
				  rdma_event_str(ev->event));
			return 0;
		}
		on_gone(vf, ev);
		return 0;
	case RDMA_CM_EVENT_ADDR_CHANGE:
		DXL_WARN("verbs: the address of %s changed", vf->dev_name);
		return 0;
	default: /* ESTABLISHED (the QP is RTS already), TIMEWAIT_EXIT, ... */
		DXL_DEBUG("verbs: CM event %s", rdma_event_str(ev->event));
		return 0;
	}
}

void dxl_vrb_async_handle(struct dxl_vrb_fabric *vf, struct ibv_async_event *e)
{
	const char *what = ibv_event_type_str(e->event_type);
	struct dxl_vrb_qp *q;
	switch (e->event_type) {
	case IBV_EVENT_COMM_EST:
		/* a packet arrived before the RTU: tell the CM the connection
		 * is up, or it would keep resending the REP */
		q = e->element.qp->qp_context; /* alive: destroy waits for our ack */
		pthread_mutex_lock(&vf->cm_lock);
		if (q && q->id && q->id->context == q && rdma_notify(q->id, e->event_type))
			DXL_DEBUG("verbs: QP %u: rdma_notify: %s", q->qpn,
				  strerror(errno));
		pthread_mutex_unlock(&vf->cm_lock);
		break;
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		/* the QP in error holds no more receive WQEs of the SRQ:
		 * dxl_vrb_qp_destroy waits for this (alive until we ack) */
		q = e->element.qp->qp_context;
		atomic_fetch_add_explicit(&vf->last_wqe_events, 1, memory_order_relaxed);
		if (q)
			atomic_store_explicit(&q->last_wqe, 1, memory_order_release);
		DXL_DEBUG("verbs: QP %u: %s", e->element.qp->qp_num, what);
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_PATH_MIG_ERR:
		/* the QP is in error; its completions tell the owner */
		DXL_DEBUG("verbs: QP %u: %s", e->element.qp->qp_num, what);
		break;
	case IBV_EVENT_CQ_ERR:
		DXL_ERROR("verbs: %s: a ctx's completion queue overflowed, its QPs "
			  "fail; poll more often or raise fabric.cq_depth",
			  what);
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_DEVICE_FATAL:
		DXL_ERROR("verbs: %s on %s", what, vf->dev_name);
		break;
	case IBV_EVENT_PORT_ERR:
		DXL_WARN("verbs: %s: port %d of %s is down", what,
			 e->element.port_num, vf->dev_name);
		break;
	default: /* PORT_ACTIVE, LID/PKEY/GID change, SRQ_LIMIT, ... */
		DXL_INFO("verbs: %s on %s", what, vf->dev_name);
		break;
	}
}

static void drain_async(struct dxl_vrb_fabric *vf)
{
	struct ibv_async_event e;
	while (ibv_get_async_event(vf->verbs, &e) == 0) {
		dxl_vrb_async_handle(vf, &e);
		ibv_ack_async_event(&e);
	}
}

static void *cm_main(void *arg)
{
	struct dxl_vrb_fabric *vf = arg;
	/* rdma_cm owns the device context but never reads its async events:
	 * they are ours (a negative fd is ignored by poll) */
	struct pollfd p[3] = {
		{.fd = vf->ec->fd, .events = POLLIN},
		{.fd = vf->stop_fd, .events = POLLIN},
		{.fd = vf->verbs->async_fd, .events = POLLIN},
	};
	for (;;) {
		int r = poll(p, 3, -1);
		if (r < 0 && errno != EINTR) {
			DXL_ERROR("verbs: CM thread: poll: %s", strerror(errno));
			break;
		}
		if (p[1].revents)
			break;
		if (p[2].revents)
			drain_async(vf);
		if (!p[0].revents)
			continue;
		for (;;) {
			struct rdma_cm_event *ev;
			if (rdma_get_cm_event(vf->ec, &ev)) {
				if (errno != EAGAIN && errno != EWOULDBLOCK) {
					DXL_WARN("verbs: rdma_get_cm_event: %s",
						 strerror(errno));
					/* do not spin on a broken channel */
					poll(&p[1], 1, 100);
				}
				break;
			}
			struct rdma_cm_id *done = dxl_vrb_cm_handle(vf, ev) ? ev->id
									    : NULL;
			rdma_ack_cm_event(ev);
			if (done)
				rdma_destroy_id(done);
		}
	}
	return NULL;
}

int dxl_vrb_cm_start(struct dxl_vrb_fabric *vf)
{
	vf->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (vf->stop_fd < 0)
		return dxl_err_errno(errno, "verbs: eventfd");
	if (vf->verbs->async_fd >= 0 && set_nonblock(vf->verbs->async_fd))
		return dxl_err_errno(errno, "verbs: fcntl(async events of %s)",
				     vf->dev_name);
	/* the CM thread takes no signals: they belong to the application */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int r = pthread_create(&vf->cm_thread, NULL, cm_main, vf);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r)
		return dxl_err_errno(r, "verbs: pthread_create(CM thread)");
	pthread_setname_np(vf->cm_thread, "dxl-verbs-cm");
	vf->cm_started = true;
	return 0;
}

void dxl_vrb_cm_stop(struct dxl_vrb_fabric *vf)
{
	if (vf->cm_started) {
		uint64_t one = 1;
		if (write(vf->stop_fd, &one, sizeof(one)) != sizeof(one))
			DXL_WARN("verbs: cannot stop the CM thread: %s",
				 strerror(errno));
		else
			pthread_join(vf->cm_thread, NULL);
		vf->cm_started = false;
	}
	if (vf->stop_fd >= 0) {
		close(vf->stop_fd);
		vf->stop_fd = -1;
	}
}

/* ---- the active side ----------------------------------------------------- */

static int ms_left(uint64_t deadline)
{
	uint64_t now = dxl_now_ns();
	if (now >= deadline)
		return 1;
	return (int)DXL_MIN((deadline - now + 999999) / 1000000, (uint64_t)INT32_MAX);
}

/* next event of ch, waiting until deadline */
static int cm_next(struct rdma_event_channel *ch, uint64_t deadline,
		   uint32_t timeout_ms, const char *what,
		   struct rdma_cm_event **out)
{
	for (;;) {
		if (rdma_get_cm_event(ch, out) == 0)
			return 0;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return dxl_err_errno(errno, "rdma_get_cm_event (%s)", what);
		uint64_t now = dxl_now_ns();
		if (now >= deadline)
			return dxl_err_set(DXL_E_UNREACHABLE,
					   "%s: no answer within %u ms", what,
					   timeout_ms);
		struct pollfd p = {.fd = ch->fd, .events = POLLIN};
		poll(&p, 1, ms_left(deadline));
	}
}

/* the one event we want, else DXL_E_UNREACHABLE saying what came instead */
static int cm_expect(struct rdma_event_channel *ch, uint64_t deadline,
		     uint32_t timeout_ms, enum rdma_cm_event_type want,
		     const char *what)
{
	struct rdma_cm_event *ev;
	int ret = cm_next(ch, deadline, timeout_ms, what, &ev);
	if (ret)
		return ret;
	if (ev->event != want)
		ret = dxl_err_set(DXL_E_UNREACHABLE, "%s: %s (status %d: %s)",
				  what, rdma_event_str(ev->event), ev->status,
				  status_str(ev->status));
	rdma_ack_cm_event(ev);
	return ret;
}

static int rejected(const struct rdma_cm_event *ev, uint32_t remote_ctx)
{
	struct dxl_vrb_hello h;
	if (ev->param.conn.private_data &&
	    dxl_vrb_hello_decode(ev->param.conn.private_data,
				 ev->param.conn.private_data_len, &h) == 0 &&
	    h.reason != DXL_VRB_REJ_NONE) {
		int code = dxl_vrb_reject_err((enum dxl_vrb_reject)h.reason);
		switch (h.reason) {
		case DXL_VRB_REJ_NOCTX:
			return dxl_err_set(code,
					   "no ctx with index %u at the peer (node %u)",
					   remote_ctx, h.node);
		case DXL_VRB_REJ_VERSION:
			return dxl_err_set(code,
					   "the peer (node %u) speaks fabric protocol "
					   "version %u, we speak %u",
					   h.node, h.version, DXL_VRB_VERSION);
		case DXL_VRB_REJ_NORES:
			return dxl_err_set(code,
					   "the peer (node %u) could not create a QP",
					   h.node);
		case DXL_VRB_REJ_DEVICE:
			return dxl_err_set(code,
					   "the request reached the peer (node %u) "
					   "on an RDMA device it does not use",
					   h.node);
		default:
			return dxl_err_set(code,
					   "rejected by the peer (node %u, reason %u)",
					   h.node, h.reason);
		}
	}
	if (ev->status == 8) /* IB_CM_REJ_INVALID_SERVICE_ID: no listener */
		return dxl_err_set(DXL_E_UNREACHABLE,
				   "connection refused: nothing listens there");
	return dxl_err_set(DXL_E_UNREACHABLE, "connection rejected (status %d)",
			   ev->status);
}

int dxl_vrb_qp_connect(struct dxl_ctx *bc, const char *host, uint16_t port,
		       uint32_t remote_ctx, struct dxl_qp **out)
{
	struct dxl_vrb_ctx *c = (struct dxl_vrb_ctx *)bc;
	struct dxl_vrb_fabric *vf = c->vf;
	const struct dxl_fabric_cfg *cfg = &bc->f->cfg;
	const uint32_t tmo = cfg->timeout_ms;
	const uint64_t deadline = dxl_now_ns() + (uint64_t)tmo * 1000000ull;
	struct sockaddr_storage dst;
	struct rdma_event_channel *ch = NULL;
	struct rdma_cm_id *id = NULL;
	struct dxl_vrb_qp *q = NULL;
	struct rdma_cm_event *ev = NULL;
	int ret = dxl_vrb_sockaddr(host, port, false, &dst);
	if (ret)
		return ret;

	ch = rdma_create_event_channel();
	if (!ch)
		return dxl_err_errno(errno, "rdma_create_event_channel");
	if (set_nonblock(ch->fd)) {
		ret = dxl_err_errno(errno, "fcntl(rdma_cm channel)");
		goto err;
	}
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		ret = dxl_err_errno(errno, "rdma_create_id");
		id = NULL;
		goto err;
	}
	struct sockaddr *src = vf->have_src && vf->src.ss_family == dst.ss_family
				       ? (struct sockaddr *)&vf->src
				       : NULL;
	if (rdma_resolve_addr(id, src, (struct sockaddr *)&dst, ms_left(deadline))) {
		ret = dxl_err_set(DXL_E_UNREACHABLE, "rdma_resolve_addr: %s",
				  strerror(errno));
		goto err;
	}
	if ((ret = cm_expect(ch, deadline, tmo, RDMA_CM_EVENT_ADDR_RESOLVED,
			     "address resolution")))
		goto err;
	if (id->verbs != vf->verbs) {
		ret = dxl_err_set(DXL_E_UNREACHABLE,
				  "the peer is reached through RDMA device %s, the "
				  "fabric uses %s",
				  id->verbs ? ibv_get_device_name(id->verbs->device)
					    : "(none)",
				  vf->dev_name);
		goto err;
	}
	if (cfg->gid_index >= 0 && id->port_num != vf->port) {
		ret = dxl_err_set(DXL_E_UNREACHABLE,
				  "the route leaves through port %u, fabric.port "
				  "(and gid_index %d) is for port %u",
				  id->port_num, cfg->gid_index, vf->port);
		goto err;
	}
	if (rdma_resolve_route(id, ms_left(deadline))) {
		ret = dxl_err_set(DXL_E_UNREACHABLE, "rdma_resolve_route: %s",
				  strerror(errno));
		goto err;
	}
	if ((ret = cm_expect(ch, deadline, tmo, RDMA_CM_EVENT_ROUTE_RESOLVED,
			     "route resolution")))
		goto err;
	if ((ret = dxl_vrb_qp_new(c, id, false, &q)))
		goto err;
	id = NULL; /* q owns it now */
	q->base.remote_ctx = remote_ctx;

	uint8_t buf[DXL_VRB_HELLO_SIZE];
	hello_bytes(cfg->node_id, DXL_VRB_REJ_NONE, remote_ctx, bc->idx, buf);
	struct rdma_conn_param p;
	memset(&p, 0, sizeof(p));
	p.private_data = buf;
	p.private_data_len = sizeof(buf);
	p.responder_resources = vf->resp_res;
	p.initiator_depth = vf->init_depth;
	p.flow_control = 1;
	p.retry_count = vf->to.retry_cnt;
	p.rnr_retry_count = vf->to.rnr_retry;
	p.srq = 1;
	p.qp_num = q->qpn;
	if (rdma_connect(q->id, &p)) {
		ret = dxl_err_errno(errno, "rdma_connect");
		goto err;
	}
	if ((ret = cm_next(ch, deadline, tmo, "connect", &ev)))
		goto err;
	if (ev->event == RDMA_CM_EVENT_REJECTED) {
		ret = rejected(ev, remote_ctx);
		goto err;
	}
	if (ev->event != RDMA_CM_EVENT_CONNECT_RESPONSE) {
		ret = dxl_err_set(DXL_E_UNREACHABLE, "connect: %s (status %d: %s)",
				  rdma_event_str(ev->event), ev->status,
				  status_str(ev->status));
		goto err;
	}
	struct dxl_vrb_hello h;
	if (dxl_vrb_hello_decode(ev->param.conn.private_data,
				 ev->param.conn.private_data_len, &h)) {
		ret = dxl_err_set(DXL_E_UNREACHABLE,
				  "the peer accepted without dxl private data "
				  "(not a dxl node?)");
		goto err;
	}
	if (h.version != DXL_VRB_VERSION) {
		ret = dxl_err_set(DXL_E_VERSION,
				  "the peer (node %u) speaks fabric protocol version "
				  "%u, we speak %u",
				  h.node, h.version, DXL_VRB_VERSION);
		goto err;
	}
	q->base.remote_node = h.node;
	/* the REP's depths, from our point of view (see on_request) */
	uint8_t resp = DXL_MIN(vf->resp_res, ev->param.conn.responder_resources);
	uint8_t init = DXL_MIN(vf->init_depth, ev->param.conn.initiator_depth);
	if ((ret = dxl_vrb_qp_rtr_rts(q, resp, init)))
		goto err;
	if (rdma_establish(q->id)) {
		ret = dxl_err_errno(errno, "rdma_establish");
		goto err;
	}
	rdma_ack_cm_event(ev); /* before migrating: it waits for our acks */
	ev = NULL;

	/* from now on the CM thread reports this id's disconnection */
	pthread_mutex_lock(&vf->cm_lock);
	q->id->context = q;
	pthread_mutex_unlock(&vf->cm_lock);
	if (rdma_migrate_id(q->id, vf->ec)) {
		ret = dxl_err_errno(errno, "rdma_migrate_id");
		pthread_mutex_lock(&vf->cm_lock);
		q->id->context = NULL;
		pthread_mutex_unlock(&vf->cm_lock);
		(void)rdma_disconnect(q->id);
		goto err;
	}
	rdma_destroy_event_channel(ch);
	ch = NULL;
	q->seen = true;
	if ((ret = dxl_vrb_ctx_adopt(c, q))) {
		dxl_vrb_qp_destroy(q);
		return ret;
	}
	DXL_DEBUG("verbs: ctx %u: QP %u connected to %s:%u ctx %u (node %u)",
		  bc->idx, q->qpn, host, port, remote_ctx, h.node);
	*out = &q->base;
	return 0;
err:
	if (ev)
		rdma_ack_cm_event(ev);
	if (q)
		dxl_vrb_qp_free(q); /* destroys its id */
	if (id)
		rdma_destroy_id(id);
	if (ch)
		rdma_destroy_event_channel(ch);
	return ret;
}
