/* test_verbs_fake.h -- a fake rdma-core for the verbs provider's mock tests */
#ifndef TEST_VERBS_FAKE_H
#define TEST_VERBS_FAKE_H

/*
 * Included by exactly one test_verbs_*.c per binary (it defines the fake's
 * state and the __wrap_ functions). How the fake works, as in librpma's unit
 * tests:
 *
 *  - Exported libibverbs/librdmacm functions the provider calls are
 *    redirected here with -Wl,--wrap=NAME (see the .flags files): they hand
 *    out objects from `fk`, record what they were given, and fail on demand.
 *  - ibv_post_send, ibv_poll_cq, ibv_post_srq_recv and ibv_req_notify_cq are
 *    static inline in verbs.h and call through ctx->ops: the fake
 *    ibv_context's ops point to fk_post_send & co. ibv_alloc_td and
 *    ibv_alloc_parent_domain go through a verbs_context: the fake context is
 *    one (abi_compat = __VERBS_ABI_IS_EXTENDED) with those two ops set.
 *  - rdma_cm events are queued per channel by the fakes of the calls that
 *    cause them (resolve_addr -> ADDR_RESOLVED, connect -> the scripted
 *    answer) and handed out by rdma_get_cm_event.
 *
 * Nothing here talks to a kernel except eventfds standing in for the
 * channels' file descriptors (so poll() works).
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fabric/verbs_internal.h"

/* each test file uses a different part of the fake */
#pragma GCC diagnostic ignored "-Wunused-function"

#define FK_MAX_QP 16
#define FK_MAX_WR 80
#define FK_MAX_CQE 80
#define FK_MAX_MOD 64
#define FK_MAX_EV 8
#define FK_PORT 18515 /* the port rdma_bind_addr "picks" for port 0 */
#define FK_LW_NOW 0
#define FK_LW_NEVER 1
#define FK_LW_LATER 2

enum fk_outcome {
	FK_ACCEPT = 0,  /* CONNECT_RESPONSE with the peer's hello */
	FK_REJECT,      /* REJECTED with a dxl reject hello (reject_reason) */
	FK_REFUSED,     /* REJECTED, status 8, no dxl private data */
	FK_SILENT,      /* no answer at all */
	FK_UNREACHABLE, /* RDMA_CM_EVENT_UNREACHABLE */
};

struct fk_posted {
	struct ibv_send_wr wr; /* copy; next/sg_list point nowhere useful */
	struct ibv_sge sge;
};

struct fk_mod {
	struct ibv_qp *qp;
	struct ibv_qp_attr attr;
	int mask;
};

struct fk_ev {
	struct rdma_event_channel *ch;
	struct rdma_cm_event ev;
	uint8_t pdata[64];
};

struct fk_state {
	/* device */
	struct verbs_context vctx; /* vctx.context is THE fake ibv_context */
	struct ibv_device dev;
	struct ibv_device_attr attr;
	struct ibv_port_attr port;
	union ibv_gid gid[4];
	bool td_supported;
	int td_allocs, td_deallocs, pdom_allocs;
	struct ibv_td td;
	struct ibv_pd pd, pdom;
	struct ibv_parent_domain_init_attr pdom_attr;
	int pd_allocs, pd_deallocs, pdom_deallocs;
	int device_list_calls;
	/* memory registration */
	struct ibv_mr mr;
	void *mr_addr;
	size_t mr_len;
	uint64_t mr_iova;
	unsigned mr_access;
	struct ibv_pd *mr_pd;
	int reg_errno, reg_calls, dereg_calls;
	unsigned reg_access[16]; /* of the first 16 registrations */
	/* ctx objects */
	struct ibv_comp_channel ch;
	struct ibv_cq cq;
	int cq_cqe_asked, cq_vector, cq_creates, cq_destroys, resize_calls;
	int resize_ret;
	void *cq_user_ctx;
	struct ibv_srq srq;
	struct ibv_srq_init_attr srq_attr;
	struct ibv_pd *srq_pd;
	int srq_destroys;
	int notify_calls;
	int acked_events;
	bool cqes_on_arm; /* queued CQEs only become visible once armed */
	bool hold_until_event; /* ... or once a CQ event has been read */
	bool hold_until_accept; /* ... or once rdma_accept was called */
	atomic_int accepted;    /* set (release) by rdma_accept */
	bool armed;
	/* QPs */
	struct ibv_qp qp[FK_MAX_QP];
	struct ibv_qp_init_attr qp_attr[FK_MAX_QP];
	struct ibv_pd *qp_pd[FK_MAX_QP];
	bool qp_destroyed[FK_MAX_QP];
	int nqp;
	int create_qp_errno;
	bool recycle_qps; /* a new QP takes a destroyed one's slot and number */
	uint32_t next_qpn; /* if set: the number of the next QP created */
	struct fk_mod mod[FK_MAX_MOD];
	int nmod;
	/* the Last WQE Reached event of a QP moved to ERR (an SRQ's QP):
	 * FK_LW_NOW delivered at once, FK_LW_NEVER not at all, FK_LW_LATER by
	 * a thread lw_delay_ms later. The step at which each happened (a
	 * counter over modify-to-ERR, event, destroy), 0 = not yet. held_recv:
	 * a receive WQE (its provider wr_id) QP i took from the SRQ; the move
	 * to ERR flushes it to the CQ (as a device gives it back). */
	int lw_mode;
	int lw_delay_ms;
	atomic_int step;
	atomic_int err_step[FK_MAX_QP], lw_step[FK_MAX_QP], destroy_step[FK_MAX_QP];
	uint64_t held_recv[FK_MAX_QP];
	pthread_t lw_thread;
	bool lw_thread_started;
	/* post / poll / recv */
	int post_calls;
	struct fk_posted posted[FK_MAX_WR];
	int nposted;    /* requests in the last ibv_post_send call */
	int post_ret;   /* returned when post_fail_at >= 0 */
	int post_fail_at;
	struct ibv_wc cqe[FK_MAX_CQE];
	int cq_head, cq_tail;
	int recv_calls;
	struct ibv_recv_wr recv_wr;
	struct ibv_sge recv_sge;
	int recv_ret;
	/* rdma_cm */
	int bind_errno;
	bool bind_sets_verbs;
	struct fk_ev evq[FK_MAX_EV];
	int nev;
	int ids_live, chans_live;
	enum fk_outcome outcome;
	uint32_t peer_node;
	uint16_t peer_version;
	uint16_t reject_reason;
	uint8_t peer_resp_res, peer_init_depth; /* REP, from our side */
	struct sockaddr_storage resolve_src;
	bool resolve_src_set;
	struct sockaddr_storage resolve_dst;
	int connect_calls, accept_calls, reject_calls, establish_calls;
	int migrate_calls, disconnect_calls, listen_calls, notify_cm_calls;
	int accept_errno;
	struct rdma_conn_param connect_param, accept_param;
	uint8_t connect_pdata[64], accept_pdata[64], reject_pdata[64];
	int reject_len;
	struct rdma_event_channel *migrated_to;
};

static struct fk_state fk;

static struct ibv_context *fk_ctx(void)
{
	return &fk.vctx.context;
}

/* ---- ops reached through the fake context -------------------------------- */

static int fk_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
			struct ibv_send_wr **bad)
{
	fk.post_calls++;
	fk.nposted = 0;
	for (int i = 0; wr; wr = wr->next, i++) {
		if (i == fk.post_fail_at) {
			*bad = wr;
			return fk.post_ret;
		}
		assert_true(fk.nposted < FK_MAX_WR);
		struct fk_posted *p = &fk.posted[fk.nposted++];
		p->wr = *wr;
		memset(&p->sge, 0, sizeof(p->sge));
		if (wr->num_sge > 0) {
			assert_int_equal(wr->num_sge, 1);
			p->sge = wr->sg_list[0];
		}
	}
	return 0;
}

static int fk_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	assert_ptr_equal(cq, &fk.cq);
	if ((fk.cqes_on_arm && !fk.armed) || fk.hold_until_event)
		return 0;
	/* a peer can send only once accepted (the CM thread accepts) */
	if (fk.hold_until_accept &&
	    !atomic_load_explicit(&fk.accepted, memory_order_acquire))
		return 0;
	int k = 0;
	while (k < n && fk.cq_head < fk.cq_tail)
		wc[k++] = fk.cqe[fk.cq_head++];
	return k;
}

static int fk_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	assert_ptr_equal(cq, &fk.cq);
	assert_int_equal(solicited_only, 0);
	fk.notify_calls++;
	fk.armed = true;
	return 0;
}

static int fk_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			    struct ibv_recv_wr **bad)
{
	assert_ptr_equal(srq, &fk.srq);
	fk.recv_calls++;
	if (fk.recv_ret) {
		*bad = wr;
		return fk.recv_ret;
	}
	fk.recv_wr = *wr;
	assert_int_equal(wr->num_sge, 1);
	fk.recv_sge = wr->sg_list[0];
	assert_null(wr->next);
	return 0;
}

static struct ibv_td *fk_alloc_td(struct ibv_context *c,
				  struct ibv_td_init_attr *a)
{
	assert_ptr_equal(c, fk_ctx());
	fk.td_allocs++;
	if (!fk.td_supported) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	fk.td.context = c;
	return &fk.td;
}

static int fk_dealloc_td(struct ibv_td *td)
{
	assert_ptr_equal(td, &fk.td);
	fk.td_deallocs++;
	return 0;
}

static struct ibv_pd *fk_alloc_parent_domain(struct ibv_context *c,
					     struct ibv_parent_domain_init_attr *a)
{
	fk.pdom_allocs++;
	fk.pdom_attr = *a;
	fk.pdom.context = c;
	return &fk.pdom;
}

/* ---- helpers for tests ---------------------------------------------------- */

static void fk_reset(void)
{
	memset(&fk, 0, sizeof(fk));
	snprintf(fk.dev.name, sizeof(fk.dev.name), "mlx5_fake");
	struct ibv_context *c = fk_ctx();
	c->device = &fk.dev;
	c->num_comp_vectors = 3;
	c->async_fd = -1; /* no device events (poll ignores it) */
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	c->ops.post_send = fk_post_send;
	c->ops.poll_cq = fk_poll_cq;
	c->ops.req_notify_cq = fk_req_notify_cq;
	c->ops.post_srq_recv = fk_post_srq_recv;
	fk.vctx.sz = sizeof(fk.vctx);
	fk.vctx.alloc_td = fk_alloc_td;
	fk.vctx.dealloc_td = fk_dealloc_td;
	fk.vctx.alloc_parent_domain = fk_alloc_parent_domain;
	fk.attr.max_qp_wr = 16384;
	fk.attr.max_cqe = 65536;
	fk.attr.max_srq = 1024;
	fk.attr.max_srq_wr = 16384;
	fk.attr.max_sge = 16;
	fk.attr.atomic_cap = IBV_ATOMIC_HCA;
	fk.attr.max_qp_rd_atom = 16;
	fk.attr.max_qp_init_rd_atom = 16;
	fk.port.state = IBV_PORT_ACTIVE;
	fk.port.link_layer = IBV_LINK_LAYER_ETHERNET;
	fk.port.gid_tbl_len = 4;
	fk.port.active_mtu = IBV_MTU_1024;
	fk.gid[3].raw[15] = 9; /* entries 0..2 are empty */
	fk.bind_sets_verbs = true;
	fk.post_fail_at = -1;
	fk.outcome = FK_ACCEPT;
	fk.peer_node = 7;
	fk.peer_version = DXL_VRB_VERSION;
	fk.peer_resp_res = 8;
	fk.peer_init_depth = 4;
	fk.ch.fd = -1;
}

static void fk_cfg(struct dxl_fabric_cfg *cfg)
{
	dxl_fabric_cfg_init(cfg);
	cfg->provider = DXL_FABRIC_VERBS;
	cfg->node_id = 3;
	snprintf(cfg->listen_addr, sizeof(cfg->listen_addr), "192.0.2.1:0");
	cfg->sq_depth = 8;
	cfg->cq_depth = 64;
	cfg->srq_depth = 4;
}

static struct dxl_fabric *fk_open(const struct dxl_fabric_cfg *cfg)
{
	struct dxl_fabric_cfg def;
	if (!cfg) {
		fk_cfg(&def);
		cfg = &def;
	}
	struct dxl_fabric *f = NULL;
	int ret = dxl_fabric_new(cfg, &f);
	if (ret)
		print_message("dxl_fabric_new: %s\n", dxl_errmsg());
	assert_int_equal(ret, 0);
	return f;
}

static struct dxl_qp *fk_connect(struct dxl_ctx *c, uint32_t remote_ctx)
{
	struct dxl_qp *qp = NULL;
	int ret = dxl_qp_connect(c, "192.0.2.9:18515", remote_ctx, &qp);
	if (ret)
		print_message("dxl_qp_connect: %s\n", dxl_errmsg());
	assert_int_equal(ret, 0);
	return qp;
}

static struct dxl_vrb_qp *fk_vqp(struct dxl_qp *qp)
{
	return (struct dxl_vrb_qp *)qp;
}

/* index of the fake ibv_qp behind a dxl QP */
static int fk_qp_index(struct dxl_qp *qp)
{
	int i = (int)(fk_vqp(qp)->qp - fk.qp);
	assert_true(i >= 0 && i < fk.nqp);
	return i;
}

/* queue a completion for poll_cq */
static void fk_cqe(uint64_t wr_id, enum ibv_wc_status st, uint32_t qpn,
		   uint32_t byte_len)
{
	if (fk.cq_head == fk.cq_tail)
		fk.cq_head = fk.cq_tail = 0; /* empty: start over */
	assert_true(fk.cq_tail < FK_MAX_CQE);
	struct ibv_wc *w = &fk.cqe[fk.cq_tail++];
	memset(w, 0, sizeof(*w));
	w->wr_id = wr_id;
	w->status = st;
	w->qp_num = qpn;
	w->byte_len = byte_len;
}

/* the last modify of fake QP i to state s (NULL if none) */
static const struct fk_mod *fk_find_mod(int i, enum ibv_qp_state s)
{
	const struct fk_mod *m = NULL;
	for (int k = 0; k < fk.nmod; k++)
		if (fk.mod[k].qp == &fk.qp[i] && fk.mod[k].attr.qp_state == s)
			m = &fk.mod[k];
	return m;
}

static void fk_queue_event(struct rdma_event_channel *ch,
			   enum rdma_cm_event_type type, int status,
			   struct rdma_cm_id *id, const void *pdata, uint8_t plen)
{
	assert_true(fk.nev < FK_MAX_EV);
	struct fk_ev *e = &fk.evq[fk.nev++];
	memset(e, 0, sizeof(*e));
	e->ch = ch;
	e->ev.event = type;
	e->ev.status = status;
	e->ev.id = id;
	if (pdata) {
		memcpy(e->pdata, pdata, plen);
		/* private data as the CM delivers it: padded */
		e->ev.param.conn.private_data_len = 56;
	}
}

/* ---- wrapped libibverbs ------------------------------------------------------ */

struct ibv_device **__wrap_ibv_get_device_list(int *n);
void __wrap_ibv_free_device_list(struct ibv_device **l);
const char *__wrap_ibv_get_device_name(struct ibv_device *d);
int __wrap_ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a);
int __wrap_ibv_query_port(struct ibv_context *c, uint8_t port,
			  struct _compat_ibv_port_attr *a);
int __wrap_ibv_query_gid(struct ibv_context *c, uint8_t port, int index,
			 union ibv_gid *gid);
struct ibv_pd *__wrap_ibv_alloc_pd(struct ibv_context *c);
int __wrap_ibv_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *__wrap_ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr,
				       size_t len, uint64_t iova,
				       unsigned int access);
int __wrap_ibv_dereg_mr(struct ibv_mr *mr);
struct ibv_comp_channel *__wrap_ibv_create_comp_channel(struct ibv_context *c);
int __wrap_ibv_destroy_comp_channel(struct ibv_comp_channel *ch);
struct ibv_cq *__wrap_ibv_create_cq(struct ibv_context *c, int cqe,
				    void *cq_context,
				    struct ibv_comp_channel *ch, int vec);
int __wrap_ibv_destroy_cq(struct ibv_cq *cq);
int __wrap_ibv_resize_cq(struct ibv_cq *cq, int cqe);
int __wrap_ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq,
			    void **cq_context);
void __wrap_ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n);
struct ibv_srq *__wrap_ibv_create_srq(struct ibv_pd *pd,
				      struct ibv_srq_init_attr *a);
int __wrap_ibv_destroy_srq(struct ibv_srq *srq);
struct ibv_qp *__wrap_ibv_create_qp(struct ibv_pd *pd,
				    struct ibv_qp_init_attr *a);
int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask);
int __wrap_ibv_destroy_qp(struct ibv_qp *qp);

struct ibv_device **__wrap_ibv_get_device_list(int *n)
{
	fk.device_list_calls++;
	struct ibv_device **l = calloc(2, sizeof(*l));
	assert_non_null(l);
	l[0] = &fk.dev;
	*n = 1;
	return l;
}

void __wrap_ibv_free_device_list(struct ibv_device **l)
{
	free(l);
}

const char *__wrap_ibv_get_device_name(struct ibv_device *d)
{
	return d->name;
}

int __wrap_ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	assert_ptr_equal(c, fk_ctx());
	*a = fk.attr;
	return 0;
}

int __wrap_ibv_query_port(struct ibv_context *c, uint8_t port,
			  struct _compat_ibv_port_attr *a)
{
	assert_ptr_equal(c, fk_ctx());
	if (port != 1)
		return EINVAL;
	*(struct ibv_port_attr *)a = fk.port;
	return 0;
}

int __wrap_ibv_query_gid(struct ibv_context *c, uint8_t port, int index,
			 union ibv_gid *gid)
{
	if (index < 0 || index >= 4)
		return -1;
	*gid = fk.gid[index];
	return 0;
}

struct ibv_pd *__wrap_ibv_alloc_pd(struct ibv_context *c)
{
	assert_ptr_equal(c, fk_ctx());
	fk.pd_allocs++;
	fk.pd.context = c;
	return &fk.pd;
}

int __wrap_ibv_dealloc_pd(struct ibv_pd *pd)
{
	if (pd == &fk.pdom)
		fk.pdom_deallocs++;
	else if (pd == &fk.pd)
		fk.pd_deallocs++;
	else
		fail_msg("dealloc of an unknown PD");
	return 0;
}

struct ibv_mr *__wrap_ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr,
				       size_t len, uint64_t iova,
				       unsigned int access)
{
	fk.reg_calls++;
	if (fk.reg_errno) {
		errno = fk.reg_errno;
		return NULL;
	}
	fk.mr_pd = pd;
	fk.mr_addr = addr;
	fk.mr_len = len;
	fk.mr_iova = iova;
	fk.mr_access = access;
	if (fk.reg_calls <= 16)
		fk.reg_access[fk.reg_calls - 1] = access;
	fk.mr.lkey = 0x1000u + (uint32_t)fk.reg_calls;
	fk.mr.rkey = 0x2000u + (uint32_t)fk.reg_calls;
	return &fk.mr;
}

int __wrap_ibv_dereg_mr(struct ibv_mr *mr)
{
	assert_ptr_equal(mr, &fk.mr);
	fk.dereg_calls++;
	return 0;
}

struct ibv_comp_channel *__wrap_ibv_create_comp_channel(struct ibv_context *c)
{
	assert_int_equal(fk.ch.fd, -1); /* one ctx at a time in these tests */
	fk.ch.context = c;
	fk.ch.fd = eventfd(0, EFD_CLOEXEC);
	assert_true(fk.ch.fd >= 0);
	return &fk.ch;
}

int __wrap_ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	assert_ptr_equal(ch, &fk.ch);
	close(ch->fd);
	ch->fd = -1;
	return 0;
}

struct ibv_cq *__wrap_ibv_create_cq(struct ibv_context *c, int cqe,
				    void *cq_context,
				    struct ibv_comp_channel *ch, int vec)
{
	assert_ptr_equal(ch, &fk.ch);
	fk.cq_creates++;
	fk.cq_cqe_asked = cqe;
	fk.cq_vector = vec;
	fk.cq_user_ctx = cq_context;
	fk.cq.context = c;
	fk.cq.channel = ch;
	fk.cq.cq_context = cq_context;
	fk.cq.cqe = cqe;
	return &fk.cq;
}

int __wrap_ibv_destroy_cq(struct ibv_cq *cq)
{
	assert_ptr_equal(cq, &fk.cq);
	fk.cq_destroys++;
	return 0;
}

int __wrap_ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	fk.resize_calls++;
	if (fk.resize_ret)
		return fk.resize_ret;
	cq->cqe = cqe;
	return 0;
}

int __wrap_ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq,
			    void **cq_context)
{
	uint64_t v;
	if (read(ch->fd, &v, sizeof(v)) != sizeof(v)) {
		errno = EAGAIN;
		return -1;
	}
	fk.armed = false;
	fk.hold_until_event = false;
	*cq = &fk.cq;
	*cq_context = fk.cq.cq_context;
	return 0;
}

void __wrap_ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	assert_ptr_equal(cq, &fk.cq);
	fk.acked_events += (int)n;
}

struct ibv_srq *__wrap_ibv_create_srq(struct ibv_pd *pd,
				      struct ibv_srq_init_attr *a)
{
	fk.srq_pd = pd;
	fk.srq_attr = *a;
	fk.srq.context = pd->context;
	fk.srq.pd = pd;
	fk.srq.srq_context = a->srq_context;
	return &fk.srq;
}

int __wrap_ibv_destroy_srq(struct ibv_srq *srq)
{
	assert_ptr_equal(srq, &fk.srq);
	fk.srq_destroys++;
	return 0;
}

struct ibv_qp *__wrap_ibv_create_qp(struct ibv_pd *pd,
				    struct ibv_qp_init_attr *a)
{
	if (fk.create_qp_errno) {
		errno = fk.create_qp_errno;
		return NULL;
	}
	int i = -1;
	for (int k = 0; fk.recycle_qps && k < fk.nqp && i < 0; k++)
		if (fk.qp_destroyed[k])
			i = k;
	if (i < 0) {
		assert_true(fk.nqp < FK_MAX_QP);
		i = fk.nqp++;
	}
	fk.qp_destroyed[i] = false;
	struct ibv_qp *q = &fk.qp[i];
	memset(q, 0, sizeof(*q));
	q->context = pd->context;
	q->pd = pd;
	q->qp_num = 100 + (uint32_t)i;
	if (fk.next_qpn) {
		q->qp_num = fk.next_qpn;
		fk.next_qpn = 0;
	}
	q->send_cq = a->send_cq;
	q->recv_cq = a->recv_cq;
	q->srq = a->srq;
	q->qp_type = a->qp_type;
	q->qp_context = a->qp_context;
	fk.qp_attr[i] = *a;
	fk.qp_pd[i] = pd;
	return q;
}

/* what the CM thread does with the device's Last WQE Reached event of qp */
static void fk_last_wqe(struct ibv_qp *qp)
{
	struct dxl_vrb_qp *q = qp->qp_context;
	int i = (int)(qp - fk.qp);
	atomic_store(&fk.lw_step[i], atomic_fetch_add(&fk.step, 1) + 1);
	struct ibv_async_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.event_type = IBV_EVENT_QP_LAST_WQE_REACHED;
	ev.element.qp = qp;
	dxl_vrb_async_handle(q->vc->vf, &ev);
}

static void *fk_lw_main(void *arg)
{
	usleep((useconds_t)fk.lw_delay_ms * 1000);
	fk_last_wqe(arg);
	return NULL;
}

int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	if (fk.recycle_qps && fk.nmod == FK_MAX_MOD)
		fk.nmod = 0; /* a churn test: only the latest ones matter */
	assert_true(fk.nmod < FK_MAX_MOD);
	struct fk_mod *m = &fk.mod[fk.nmod++];
	m->qp = qp;
	m->attr = *a;
	m->mask = mask;
	int i = (int)(qp - fk.qp);
	if ((mask & IBV_QP_STATE) && a->qp_state == IBV_QPS_ERR && qp->srq && i >= 0 &&
	    i < FK_MAX_QP) {
		atomic_store(&fk.err_step[i], atomic_fetch_add(&fk.step, 1) + 1);
		if (fk.held_recv[i]) { /* given back to the CQ, flushed */
			fk_cqe(fk.held_recv[i], IBV_WC_WR_FLUSH_ERR, qp->qp_num, 0);
			fk.held_recv[i] = 0;
		}
		if (fk.lw_mode == FK_LW_NOW) {
			fk_last_wqe(qp);
		} else if (fk.lw_mode == FK_LW_LATER) {
			assert_int_equal(pthread_create(&fk.lw_thread, NULL, fk_lw_main, qp), 0);
			fk.lw_thread_started = true;
		}
	}
	return 0;
}

int __wrap_ibv_destroy_qp(struct ibv_qp *qp)
{
	int i = (int)(qp - fk.qp);
	assert_true(i >= 0 && i < fk.nqp);
	assert_false(fk.qp_destroyed[i]);
	atomic_store(&fk.destroy_step[i], atomic_fetch_add(&fk.step, 1) + 1);
	fk.qp_destroyed[i] = true;
	return 0;
}

/* ---- wrapped librdmacm -------------------------------------------------------- */

struct rdma_event_channel *__wrap_rdma_create_event_channel(void);
void __wrap_rdma_destroy_event_channel(struct rdma_event_channel *ch);
int __wrap_rdma_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id,
			  void *context, enum rdma_port_space ps);
int __wrap_rdma_destroy_id(struct rdma_cm_id *id);
int __wrap_rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr);
int __wrap_rdma_listen(struct rdma_cm_id *id, int backlog);
struct ibv_context **__wrap_rdma_get_devices(int *n);
void __wrap_rdma_free_devices(struct ibv_context **l);
int __wrap_rdma_get_cm_event(struct rdma_event_channel *ch,
			     struct rdma_cm_event **ev);
int __wrap_rdma_ack_cm_event(struct rdma_cm_event *ev);
int __wrap_rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src,
			     struct sockaddr *dst, int timeout_ms);
int __wrap_rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms);
int __wrap_rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *a,
			     int *mask);
int __wrap_rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p);
int __wrap_rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p);
int __wrap_rdma_reject(struct rdma_cm_id *id, const void *pdata, uint8_t len);
int __wrap_rdma_establish(struct rdma_cm_id *id);
int __wrap_rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *ch);
int __wrap_rdma_disconnect(struct rdma_cm_id *id);
int __wrap_rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event);

struct rdma_event_channel *__wrap_rdma_create_event_channel(void)
{
	struct rdma_event_channel *ch = calloc(1, sizeof(*ch));
	assert_non_null(ch);
	ch->fd = eventfd(0, EFD_CLOEXEC); /* never readable */
	assert_true(ch->fd >= 0);
	fk.chans_live++;
	return ch;
}

void __wrap_rdma_destroy_event_channel(struct rdma_event_channel *ch)
{
	close(ch->fd);
	free(ch);
	fk.chans_live--;
}

int __wrap_rdma_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id,
			  void *context, enum rdma_port_space ps)
{
	assert_int_equal(ps, RDMA_PS_TCP);
	struct rdma_cm_id *i = calloc(1, sizeof(*i));
	assert_non_null(i);
	i->channel = ch;
	i->context = context;
	i->ps = ps;
	i->qp_type = IBV_QPT_RC;
	*id = i;
	fk.ids_live++;
	return 0;
}

int __wrap_rdma_destroy_id(struct rdma_cm_id *id)
{
	free(id);
	fk.ids_live--;
	return 0;
}

int __wrap_rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	if (fk.bind_errno) {
		errno = fk.bind_errno;
		return -1;
	}
	struct sockaddr_in *sin = (struct sockaddr_in *)&id->route.addr.src_addr;
	assert_int_equal(addr->sa_family, AF_INET);
	memcpy(sin, addr, sizeof(*sin));
	if (sin->sin_port == 0)
		sin->sin_port = htons(FK_PORT);
	if (fk.bind_sets_verbs && sin->sin_addr.s_addr != htonl(INADDR_ANY)) {
		id->verbs = fk_ctx();
		id->port_num = 1;
	}
	return 0;
}

int __wrap_rdma_listen(struct rdma_cm_id *id, int backlog)
{
	fk.listen_calls++;
	return 0;
}

struct ibv_context **__wrap_rdma_get_devices(int *n)
{
	struct ibv_context **l = calloc(2, sizeof(*l));
	assert_non_null(l);
	l[0] = fk_ctx();
	if (n)
		*n = 1;
	return l;
}

void __wrap_rdma_free_devices(struct ibv_context **l)
{
	free(l);
}

int __wrap_rdma_get_cm_event(struct rdma_event_channel *ch,
			     struct rdma_cm_event **ev)
{
	/* a test that wakes the CM thread writes the channel's eventfd after
	 * queueing: reading it orders the two threads (and re-arms poll) */
	uint64_t v;
	if (read(ch->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		fail_msg("fake event channel: %s", strerror(errno));
	for (int i = 0; i < fk.nev; i++) {
		if (fk.evq[i].ch != ch)
			continue;
		struct fk_ev *e = malloc(sizeof(*e));
		assert_non_null(e);
		*e = fk.evq[i];
		if (e->ev.param.conn.private_data_len)
			e->ev.param.conn.private_data = e->pdata;
		memmove(&fk.evq[i], &fk.evq[i + 1],
			(size_t)(fk.nev - i - 1) * sizeof(fk.evq[0]));
		fk.nev--;
		*ev = &e->ev;
		return 0;
	}
	errno = EAGAIN;
	return -1;
}

int __wrap_rdma_ack_cm_event(struct rdma_cm_event *ev)
{
	free((char *)ev - offsetof(struct fk_ev, ev));
	return 0;
}

int __wrap_rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src,
			     struct sockaddr *dst, int timeout_ms)
{
	assert_true(timeout_ms > 0);
	fk.resolve_src_set = src != NULL;
	if (src)
		memcpy(&fk.resolve_src, src, sizeof(struct sockaddr_in));
	memcpy(&fk.resolve_dst, dst, sizeof(struct sockaddr_in));
	id->verbs = fk_ctx();
	id->port_num = 1;
	fk_queue_event(id->channel, RDMA_CM_EVENT_ADDR_RESOLVED, 0, id, NULL, 0);
	return 0;
}

int __wrap_rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	assert_true(timeout_ms > 0);
	fk_queue_event(id->channel, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, id, NULL, 0);
	return 0;
}

/* attributes in the shape the kernel gives them, with values the provider
 * must override (max_dest_rd_atomic 99, timeout 18 ...) */
int __wrap_rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *a,
			     int *mask)
{
	enum ibv_qp_state s = a->qp_state;
	memset(a, 0, sizeof(*a));
	a->qp_state = s;
	switch (s) {
	case IBV_QPS_INIT:
		a->pkey_index = 0;
		a->port_num = 1;
		a->qp_access_flags = 0;
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			IBV_QP_ACCESS_FLAGS;
		break;
	case IBV_QPS_RTR:
		a->path_mtu = IBV_MTU_1024;
		a->dest_qp_num = 0x4242;
		a->rq_psn = 77;
		a->max_dest_rd_atomic = 99;
		a->min_rnr_timer = 0;
		a->ah_attr.is_global = 1;
		a->ah_attr.grh.sgid_index = 1;
		a->ah_attr.grh.hop_limit = 64;
		a->ah_attr.port_num = 1;
		*mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER |
			0x200000; /* a RoCE-only bit, as the kernel reports */
		break;
	case IBV_QPS_RTS:
		a->sq_psn = 88;
		a->timeout = 18;
		a->retry_cnt = 3;
		a->rnr_retry = 7;
		a->max_rd_atomic = 99;
		*mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
		break;
	default:
		fail_msg("rdma_init_qp_attr for state %d", (int)s);
	}
	return 0;
}

int __wrap_rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	fk.connect_calls++;
	fk.connect_param = *p;
	assert_true(p->private_data_len <= sizeof(fk.connect_pdata));
	memcpy(fk.connect_pdata, p->private_data, p->private_data_len);
	uint8_t buf[DXL_VRB_HELLO_SIZE];
	struct dxl_vrb_hello h = {.magic = DXL_VRB_MAGIC,
				  .version = fk.peer_version,
				  .node = fk.peer_node};
	switch (fk.outcome) {
	case FK_ACCEPT:
		dxl_vrb_hello_encode(&h, buf);
		fk_queue_event(id->channel, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, id,
			       buf, sizeof(buf));
		fk.evq[fk.nev - 1].ev.param.conn.responder_resources =
			fk.peer_resp_res;
		fk.evq[fk.nev - 1].ev.param.conn.initiator_depth =
			fk.peer_init_depth;
		break;
	case FK_REJECT:
		h.reason = fk.reject_reason;
		dxl_vrb_hello_encode(&h, buf);
		fk_queue_event(id->channel, RDMA_CM_EVENT_REJECTED, 28, id, buf,
			       sizeof(buf));
		break;
	case FK_REFUSED:
		fk_queue_event(id->channel, RDMA_CM_EVENT_REJECTED, 8, id, NULL, 0);
		break;
	case FK_UNREACHABLE:
		fk_queue_event(id->channel, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT,
			       id, NULL, 0);
		break;
	case FK_SILENT:
		break;
	}
	return 0;
}

int __wrap_rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	fk.accept_calls++;
	fk.accept_param = *p;
	memcpy(fk.accept_pdata, p->private_data, p->private_data_len);
	if (fk.accept_errno) {
		errno = fk.accept_errno;
		return -1;
	}
	atomic_store_explicit(&fk.accepted, 1, memory_order_release);
	return 0;
}

int __wrap_rdma_reject(struct rdma_cm_id *id, const void *pdata, uint8_t len)
{
	fk.reject_calls++;
	fk.reject_len = len;
	memcpy(fk.reject_pdata, pdata, len);
	return 0;
}

int __wrap_rdma_establish(struct rdma_cm_id *id)
{
	fk.establish_calls++;
	return 0;
}

int __wrap_rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *ch)
{
	fk.migrate_calls++;
	fk.migrated_to = ch;
	id->channel = ch;
	return 0;
}

int __wrap_rdma_disconnect(struct rdma_cm_id *id)
{
	fk.disconnect_calls++;
	return 0;
}

int __wrap_rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	assert_int_equal(event, IBV_EVENT_COMM_EST);
	fk.notify_cm_calls++;
	return 0;
}

/* a connection request as the CM thread would get it */
static struct rdma_cm_id *fk_passive_id(struct dxl_fabric *f)
{
	struct dxl_vrb_fabric *vf = f->prov;
	struct rdma_cm_id *id = NULL;
	__wrap_rdma_create_id(vf->ec, &id, NULL, RDMA_PS_TCP);
	id->verbs = fk_ctx();
	id->port_num = 1;
	return id;
}

static void fk_request_event(struct rdma_cm_event *ev, struct rdma_cm_id *id,
			     const uint8_t *hello, uint8_t len, uint8_t resp,
			     uint8_t init)
{
	memset(ev, 0, sizeof(*ev));
	ev->event = RDMA_CM_EVENT_CONNECT_REQUEST;
	ev->id = id;
	ev->param.conn.private_data = hello;
	ev->param.conn.private_data_len = len;
	ev->param.conn.responder_resources = resp;
	ev->param.conn.initiator_depth = init;
}

#endif /* TEST_VERBS_FAKE_H */
