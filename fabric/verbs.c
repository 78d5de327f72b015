/* verbs.c -- the verbs provider: device, PD, listener, memory regions */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabric/verbs_internal.h"
#include "common/endian.h"

/* ---- private data -------------------------------------------------------- */

void dxl_vrb_hello_encode(const struct dxl_vrb_hello *h,
			  uint8_t out[DXL_VRB_HELLO_SIZE])
{
	dxl_put_le32(out, h->magic);
	dxl_put_le16(out + 4, h->version);
	dxl_put_le16(out + 6, h->reason);
	dxl_put_le32(out + 8, h->node);
	dxl_put_le32(out + 12, h->ctx_dst);
	dxl_put_le32(out + 16, h->ctx_src);
}

int dxl_vrb_hello_decode(const void *buf, size_t len, struct dxl_vrb_hello *h)
{
	const uint8_t *p = buf;
	if (!p || len < DXL_VRB_HELLO_SIZE)
		return dxl_err_set(DXL_E_PROTO,
				   "verbs: private data of %zu bytes, need %d",
				   p ? len : 0, DXL_VRB_HELLO_SIZE);
	h->magic = dxl_get_le32(p);
	if (h->magic != DXL_VRB_MAGIC)
		return dxl_err_set(DXL_E_PROTO,
				   "verbs: private data has magic 0x%08x, not dxl's",
				   h->magic);
	h->version = dxl_get_le16(p + 4);
	h->reason = dxl_get_le16(p + 6);
	h->node = dxl_get_le32(p + 8);
	h->ctx_dst = dxl_get_le32(p + 12);
	h->ctx_src = dxl_get_le32(p + 16);
	return 0;
}

int dxl_vrb_reject_err(enum dxl_vrb_reject r)
{
	switch (r) {
	case DXL_VRB_REJ_NOCTX:
		return DXL_E_NOENT;
	case DXL_VRB_REJ_VERSION:
		return DXL_E_VERSION;
	case DXL_VRB_REJ_NORES:
		return DXL_E_NOMEM;
	default:
		return DXL_E_UNREACHABLE;
	}
}

/* ---- timeouts ------------------------------------------------------------ */

/* IB spec table of the RNR NAK timer field, in units of 10 us; code 0 is the
 * longest delay (655.36 ms). */
static const uint32_t rnr_10us[32] = {
	65536, 1,    2,    3,    4,    6,    8,     12,    16,    24,   32,
	48,    64,   96,   128,  192,  256,  384,   512,   768,   1024, 1536,
	2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
};

uint32_t dxl_vrb_rnr_timer_10us(uint8_t code)
{
	return rnr_10us[code & 31];
}

void dxl_vrb_timeouts(uint32_t timeout_ms, struct dxl_vrb_timeouts *out)
{
	/*
	 * Transport timer: T = 4.096 us * 2^t * (retry_cnt + 1). Seven retries
	 * ride out a few lost packets; t is the largest exponent whose total
	 * stays within timeout_ms (at least 1: 0 means "never time out").
	 * Hardware may wait up to a few times the nominal value.
	 */
	uint64_t budget_ns = (uint64_t)timeout_ms * 1000000ull;
	out->retry_cnt = 7;
	uint8_t t = 1;
	while (t < 31 && 4096ull * (1ull << (t + 1)) * 8 <= budget_ns)
		t++;
	out->ack_timeout = t;

	/* RNR: total = delay(rnr_timer) * (rnr_retry + 1), rnr_retry = 6 */
	out->rnr_retry = 6;
	uint64_t per_try = (uint64_t)timeout_ms * 100 / 7; /* in 10 us units */
	uint8_t best = 1;
	for (uint8_t c = 0; c < 32; c++) {
		if (rnr_10us[c] <= per_try && rnr_10us[c] > rnr_10us[best])
			best = c;
	}
	out->rnr_timer = best;
}

uint64_t dxl_vrb_ack_total_us(const struct dxl_vrb_timeouts *t)
{
	return 4096ull * (1ull << t->ack_timeout) * (t->retry_cnt + 1u) / 1000;
}

uint64_t dxl_vrb_rnr_total_us(const struct dxl_vrb_timeouts *t)
{
	return 10ull * dxl_vrb_rnr_timer_10us(t->rnr_timer) * (t->rnr_retry + 1u);
}

/* ---- translations -------------------------------------------------------- */

int dxl_vrb_mr_access(unsigned a)
{
	int v = 0;
	if (a & DXL_MR_LOCAL_WRITE)
		v |= IBV_ACCESS_LOCAL_WRITE;
	if (a & DXL_MR_REMOTE_READ)
		v |= IBV_ACCESS_REMOTE_READ;
	if (a & DXL_MR_REMOTE_WRITE)
		v |= IBV_ACCESS_REMOTE_WRITE;
	if (a & DXL_MR_REMOTE_ATOMIC)
		v |= IBV_ACCESS_REMOTE_ATOMIC;
	/* DXL_MR_PERSISTENT: real NICs place data; durability is the target
	 * platform's business (H9 read-after-write), nothing to register */
	return v;
}

enum dxl_wc_status dxl_vrb_wc_status(enum ibv_wc_status s, enum dxl_wc_opcode op)
{
	switch (s) {
	case IBV_WC_SUCCESS:
		return DXL_WC_SUCCESS;
	case IBV_WC_REM_INV_REQ_ERR:
		/* a SEND larger than the receive buffer is NAKed "invalid
		 * request" (mlx5, rxe): to the caller that is "the remote could
		 * not take the SEND"; for one-sided requests it means a bad
		 * length or alignment at the target */
		return op == DXL_WC_SEND ? DXL_WC_REM_OP_ERR : DXL_WC_REM_ACCESS_ERR;
	case IBV_WC_REM_ACCESS_ERR:
		return DXL_WC_REM_ACCESS_ERR;
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
	case IBV_WC_RESP_TIMEOUT_ERR:
		return DXL_WC_PEER_UNREACHABLE;
	case IBV_WC_WR_FLUSH_ERR:
		return DXL_WC_FLUSHED;
	case IBV_WC_REM_OP_ERR:
	case IBV_WC_REM_ABORT_ERR:
		return DXL_WC_REM_OP_ERR;
	default:
		/* LOC_LEN, LOC_QP_OP, LOC_PROT, LOC_ACCESS, MW_BIND,
		 * BAD_RESP, FATAL, GENERAL ... */
		return DXL_WC_LOCAL_ERR;
	}
}

/* ---- open / close -------------------------------------------------------- */

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	return 0;
}

int dxl_vrb_sockaddr(const char *host, uint16_t port, bool passive,
		     struct sockaddr_storage *out)
{
	struct addrinfo hints = {0};
	struct addrinfo *res = NULL;
	char serv[8];
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
	snprintf(serv, sizeof(serv), "%u", port);
	int r = getaddrinfo(host, serv, &hints, &res);
	if (r)
		return dxl_err_set(DXL_E_INVAL, "cannot resolve '%s': %s", host,
				   gai_strerror(r));
	bool found = false;
	for (struct addrinfo *a = res; a && !found; a = a->ai_next) {
		if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
		    a->ai_addrlen <= sizeof(*out)) {
			memset(out, 0, sizeof(*out));
			memcpy(out, a->ai_addr, a->ai_addrlen);
			found = true;
		}
	}
	freeaddrinfo(res);
	if (!found)
		return dxl_err_set(DXL_E_INVAL, "'%s' has no IPv4/IPv6 address",
				   host);
	return 0;
}

static bool sockaddr_is_any(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ((const struct sockaddr_in *)ss)->sin_addr.s_addr ==
		       htonl(INADDR_ANY);
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
	return memcmp(&s6->sin6_addr, &in6addr_any, sizeof(in6addr_any)) == 0;
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

/* "no device" in one place: the message other layers and users grep for */
static int no_device(const char *what, const char *why)
{
	return dxl_err_set(DXL_E_NODEV,
			   "no RDMA device found; use fabric=tcp (%s: %s)", what,
			   why);
}

/* pass 1: is there any device, and is cfg.device among them? */
static int check_devices(const struct dxl_fabric_cfg *cfg)
{
	int n = 0;
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		return no_device("ibv_get_device_list",
				 strerror(errno ? errno : ENODEV));
	if (n <= 0) {
		ibv_free_device_list(list);
		return no_device("ibv_get_device_list", "no devices");
	}
	int ret = 0;
	if (cfg->device[0]) {
		char names[256] = "";
		size_t used = 0;
		bool found = false;
		for (int i = 0; i < n; i++) {
			const char *nm = ibv_get_device_name(list[i]);
			if (nm && strcmp(nm, cfg->device) == 0)
				found = true;
			if (nm && used < sizeof(names))
				used += (size_t)snprintf(names + used,
							 sizeof(names) - used,
							 "%s%s", i ? ", " : "", nm);
		}
		if (!found)
			ret = dxl_err_set(DXL_E_NODEV,
					  "RDMA device '%s' not found (devices: %s); "
					  "set fabric.device or use fabric=tcp",
					  cfg->device, names);
	}
	ibv_free_device_list(list);
	return ret;
}

/* pass 2: rdma_cm's context of the device to use */
static int pick_device(struct dxl_vrb_fabric *vf)
{
	const struct dxl_fabric_cfg *cfg = &vf->f->cfg;
	int n = 0;
	vf->devs = rdma_get_devices(&n);
	if (!vf->devs || n <= 0)
		return no_device("rdma_get_devices",
				 strerror(errno ? errno : ENODEV));
	struct ibv_context *want = NULL;
	if (cfg->device[0]) {
		for (int i = 0; i < n; i++) {
			const char *nm = ibv_get_device_name(vf->devs[i]->device);
			if (nm && strcmp(nm, cfg->device) == 0)
				want = vf->devs[i];
		}
		if (!want)
			return dxl_err_set(DXL_E_NODEV,
					   "RDMA device '%s' is not usable by rdma_cm; "
					   "use fabric=tcp", cfg->device);
	}
	struct ibv_context *bound = vf->listen_id->verbs;
	if (want && bound && want != bound)
		return dxl_err_set(DXL_E_INVAL,
				   "listen address %s belongs to RDMA device %s, "
				   "but fabric.device is %s",
				   cfg->listen_addr,
				   ibv_get_device_name(bound->device), cfg->device);
	vf->verbs = want ? want : bound ? bound : vf->devs[0];
	snprintf(vf->dev_name, sizeof(vf->dev_name), "%s",
		 ibv_get_device_name(vf->verbs->device));
	vf->port = cfg->port;
	if (bound && vf->listen_id->port_num && vf->listen_id->port_num != cfg->port)
		return dxl_err_set(DXL_E_INVAL,
				   "listen address %s is on port %u of %s, but "
				   "fabric.port is %u",
				   cfg->listen_addr, vf->listen_id->port_num,
				   vf->dev_name, cfg->port);
	return 0;
}

static int query_device(struct dxl_vrb_fabric *vf)
{
	const struct dxl_fabric_cfg *cfg = &vf->f->cfg;
	int r = ibv_query_device(vf->verbs, &vf->dev);
	if (r)
		return dxl_err_errno(r, "ibv_query_device(%s)", vf->dev_name);
	struct ibv_port_attr pa;
	memset(&pa, 0, sizeof(pa));
	r = ibv_query_port(vf->verbs, vf->port, &pa);
	if (r)
		return dxl_err_set(DXL_E_INVAL,
				   "port %u of RDMA device %s: ibv_query_port: %s",
				   vf->port, vf->dev_name, strerror(r));
	if (pa.state != IBV_PORT_ACTIVE)
		DXL_WARN("verbs: port %u of %s is %s, not ACTIVE: connections "
			 "will fail until it is up",
			 vf->port, vf->dev_name, ibv_port_state_str(pa.state));
	vf->link_layer = pa.link_layer;
	if (cfg->gid_index >= 0) {
		union ibv_gid gid;
		static const union ibv_gid zero;
		if (cfg->gid_index >= pa.gid_tbl_len)
			return dxl_err_set(DXL_E_INVAL,
					   "fabric.gid_index %d: port %u of %s has %d GIDs",
					   cfg->gid_index, vf->port, vf->dev_name,
					   pa.gid_tbl_len);
		r = ibv_query_gid(vf->verbs, vf->port, cfg->gid_index, &gid);
		if (r || memcmp(&gid, &zero, sizeof(gid)) == 0)
			return dxl_err_set(DXL_E_INVAL,
					   "fabric.gid_index %d: entry of port %u of %s "
					   "is empty or unreadable",
					   cfg->gid_index, vf->port, vf->dev_name);
	}
	/* the configuration must fit the device */
	const struct ibv_device_attr *d = &vf->dev;
	if ((int)cfg->sq_depth > d->max_qp_wr)
		return dxl_err_set(DXL_E_INVAL,
				   "fabric.sq_depth %u over the max_qp_wr %d of %s",
				   cfg->sq_depth, d->max_qp_wr, vf->dev_name);
	if ((int)cfg->cq_depth > d->max_cqe)
		return dxl_err_set(DXL_E_INVAL,
				   "fabric.cq_depth %u over the max_cqe %d of %s",
				   cfg->cq_depth, d->max_cqe, vf->dev_name);
	if (d->max_srq <= 0)
		return dxl_err_set(DXL_E_NOTSUP,
				   "RDMA device %s has no shared receive queues",
				   vf->dev_name);
	if ((int)cfg->srq_depth > d->max_srq_wr)
		return dxl_err_set(DXL_E_INVAL,
				   "fabric.srq_depth %u over the max_srq_wr %d of %s",
				   cfg->srq_depth, d->max_srq_wr, vf->dev_name);
	vf->atomics = d->atomic_cap != IBV_ATOMIC_NONE;
	if (!vf->atomics)
		DXL_WARN("verbs: %s has no atomics: CAS/FAA will fail with "
			 "DXL_E_NOTSUP", vf->dev_name);
	/* READ/atomic depths: 16 is what ConnectX offers; never 0, or READs
	 * could not be issued at all */
	vf->resp_res = (uint8_t)DXL_MAX(1, DXL_MIN(d->max_qp_rd_atom, 16));
	vf->init_depth = (uint8_t)DXL_MAX(1, DXL_MIN(d->max_qp_init_rd_atom, 16));
	dxl_vrb_timeouts(cfg->timeout_ms, &vf->to);
	DXL_DEBUG("verbs: %s port %u (%s): ack_timeout %u retry %u (%llu us), "
		  "rnr_timer %u retry %u (%llu us)",
		  vf->dev_name, vf->port,
		  vf->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB",
		  vf->to.ack_timeout, vf->to.retry_cnt,
		  (unsigned long long)dxl_vrb_ack_total_us(&vf->to),
		  vf->to.rnr_timer, vf->to.rnr_retry,
		  (unsigned long long)dxl_vrb_rnr_total_us(&vf->to));
	return 0;
}

static int listen_bind(struct dxl_vrb_fabric *vf, const char *host,
		       uint16_t port, struct sockaddr_storage *sa)
{
	int ret = dxl_vrb_sockaddr(host, port, true, sa);
	if (ret)
		return dxl_err_set(ret, "fabric: listen address '%s': %s",
				   vf->f->cfg.listen_addr, dxl_errmsg());
	vf->ec = rdma_create_event_channel();
	if (!vf->ec)
		return no_device("rdma_create_event_channel",
				 strerror(errno ? errno : ENODEV));
	if (set_nonblock(vf->ec->fd))
		return dxl_err_errno(errno, "verbs: fcntl(rdma_cm channel)");
	if (rdma_create_id(vf->ec, &vf->listen_id, NULL, RDMA_PS_TCP)) {
		int e = errno;
		vf->listen_id = NULL;
		return dxl_err_errno(e, "verbs: rdma_create_id");
	}
	if (rdma_bind_addr(vf->listen_id, (struct sockaddr *)sa)) {
		int e = errno;
		if (e == EADDRINUSE)
			return dxl_err_set(DXL_E_BUSY,
					   "verbs: listen address %s is in use",
					   vf->f->cfg.listen_addr);
		if (e == ENODEV || e == EADDRNOTAVAIL || e == ENOENT)
			return dxl_err_set(DXL_E_NODEV,
					   "verbs: listen address %s is not on an RDMA "
					   "device (rdma_bind_addr: %s); listen on the IP "
					   "of the RDMA interface, or use fabric=tcp",
					   vf->f->cfg.listen_addr, strerror(e));
		return dxl_err_errno(e, "verbs: rdma_bind_addr(%s)",
				     vf->f->cfg.listen_addr);
	}
	return 0;
}

static void vrb_close(struct dxl_fabric *f);

static int vrb_open(struct dxl_fabric *f)
{
	const struct dxl_fabric_cfg *cfg = &f->cfg;
	char host[DXL_FABRIC_ADDR_MAX];
	uint16_t port;
	struct sockaddr_storage sa;

	int ret = check_devices(cfg);
	if (ret)
		return ret;
	if (dxl_parse_hostport(cfg->listen_addr, host, sizeof(host), &port))
		return dxl_err_set(DXL_E_INVAL,
				   "fabric: listen address '%s' is not host:port",
				   cfg->listen_addr);

	struct dxl_vrb_fabric *vf = calloc(1, sizeof(*vf));
	if (!vf)
		return dxl_err_set(DXL_E_NOMEM, "verbs: out of memory");
	vf->f = f;
	vf->stop_fd = -1;
	pthread_mutex_init(&vf->cm_lock, NULL);
	atomic_init(&vf->td_state, DXL_VRB_TD_UNKNOWN);
	f->prov = vf;

	if ((ret = listen_bind(vf, host, port, &sa)))
		goto err;
	if ((ret = pick_device(vf)))
		goto err;
	if ((ret = query_device(vf)))
		goto err;
	vf->pd = ibv_alloc_pd(vf->verbs);
	if (!vf->pd) {
		ret = dxl_err_errno(errno, "verbs: ibv_alloc_pd(%s)", vf->dev_name);
		goto err;
	}
	if (rdma_listen(vf->listen_id, 128)) {
		ret = dxl_err_errno(errno, "verbs: rdma_listen(%s)",
				    cfg->listen_addr);
		goto err;
	}
	uint16_t bound = ntohs(rdma_get_src_port(vf->listen_id));
	if (!bound)
		bound = port;
	snprintf(f->addr, sizeof(f->addr), strchr(host, ':') ? "[%s]:%u" : "%s:%u",
		 host, bound);
	if (!sockaddr_is_any(&sa)) {
		/* connect from the listen IP: same device, same GID */
		vf->src = sa;
		set_port(&vf->src, 0);
		vf->have_src = true;
	}
	if ((ret = dxl_vrb_cm_start(vf)))
		goto err;
	DXL_INFO("verbs: device %s port %u, listening on %s", vf->dev_name,
		 vf->port, f->addr);
	return 0;
err:
	vrb_close(f);
	return ret;
}

static void vrb_close(struct dxl_fabric *f)
{
	struct dxl_vrb_fabric *vf = f->prov;
	if (!vf)
		return;
	dxl_vrb_cm_stop(vf);
	if (vf->listen_id)
		rdma_destroy_id(vf->listen_id);
	if (vf->ec)
		rdma_destroy_event_channel(vf->ec);
	if (vf->pd) {
		int r = ibv_dealloc_pd(vf->pd);
		if (r)
			DXL_WARN("verbs: ibv_dealloc_pd: %s", strerror(r));
	}
	if (vf->devs)
		rdma_free_devices(vf->devs);
	pthread_mutex_destroy(&vf->cm_lock);
	free(vf);
	f->prov = NULL;
}

/* ---- memory regions ------------------------------------------------------ */

static int vrb_mr_reg(struct dxl_mr *mr)
{
	struct dxl_vrb_fabric *vf = mr->f->prov;
	if ((mr->access & DXL_MR_REMOTE_ATOMIC) && !vf->atomics)
		return dxl_err_set(DXL_E_NOTSUP,
				   "mr_reg: RDMA device %s has no atomics",
				   vf->dev_name);
	/* ibv_reg_mr() is a macro that picks ibv_reg_mr or ibv_reg_mr_iova2 by
	 * whether the flags are a compile-time constant; call the one it uses
	 * for run-time flags directly */
	struct ibv_mr *m = ibv_reg_mr_iova2(vf->pd, mr->addr, mr->len,
					    (uintptr_t)mr->addr,
					    (unsigned)dxl_vrb_mr_access(mr->access));
	if (!m) {
		int e = errno;
		if (e == ENOMEM)
			return dxl_err_set(DXL_E_NOMEM,
					   "mr_reg: ibv_reg_mr(%zu bytes) on %s: %s "
					   "(check ulimit -l)",
					   mr->len, vf->dev_name, strerror(e));
		return dxl_err_errno(e, "mr_reg: ibv_reg_mr(%zu bytes) on %s",
				     mr->len, vf->dev_name);
	}
	mr->lkey = m->lkey;
	mr->rkey = m->rkey;
	mr->prov = m;
	return 0;
}

static void vrb_mr_dereg(struct dxl_mr *mr)
{
	struct ibv_mr *m = mr->prov;
	if (!m)
		return;
	int r = ibv_dereg_mr(m);
	if (r)
		DXL_WARN("verbs: ibv_dereg_mr(rkey 0x%x): %s", mr->rkey,
			 strerror(r));
	mr->prov = NULL;
}

const struct dxl_fabric_ops dxl_fabric_verbs_ops = {
	.name = "verbs",
	.open = vrb_open,
	.close = vrb_close,
	.mr_reg = vrb_mr_reg,
	.mr_dereg = vrb_mr_dereg,
	.mr_mark_durable = NULL, /* real hardware: nothing to model */
	.power_fail = NULL,      /* fabric.c answers DXL_E_NOTSUP */
	.pending_lines = NULL,
	.ctx_new = dxl_vrb_ctx_new,
	.ctx_delete = dxl_vrb_ctx_delete,
	.qp_connect = dxl_vrb_qp_connect,
	.qp_delete = dxl_vrb_qp_delete,
	.qp_post = dxl_vrb_qp_post,
	.post_recv = dxl_vrb_post_recv,
	.poll = dxl_vrb_poll,
	.wait = dxl_vrb_wait,
	.qp_count = dxl_vrb_qp_count,
};
