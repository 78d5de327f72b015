/* fabric.c -- the provider-independent face of the fabric: checks and dispatch */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fabric/fabric_internal.h"
#include "common/endian.h"

#define MR_DESC_MAGIC 0x4d52444cu /* "LDRM" little-endian: dxl mr desc */

static const char *const provider_names[] = {"tcp", "verbs"};

const char *dxl_fabric_provider_name(enum dxl_fabric_provider p)
{
	if ((unsigned)p < DXL_ARRAY_SIZE(provider_names))
		return provider_names[p];
	return "unknown";
}

int dxl_fabric_provider_parse(const char *name, enum dxl_fabric_provider *out)
{
	for (unsigned i = 0; name && i < DXL_ARRAY_SIZE(provider_names); i++) {
		if (strcasecmp(name, provider_names[i]) == 0) {
			*out = (enum dxl_fabric_provider)i;
			return 0;
		}
	}
	return dxl_err_set(DXL_E_INVAL,
			   "unknown fabric provider '%s' (expected tcp or verbs)",
			   name ? name : "(null)");
}

/* DXL_FABRIC_PF="SIG:POLICY[:SEED[:IDLE_MS]]", e.g. "USR2:random:42" */
static void pf_from_env(struct dxl_fabric_cfg *cfg)
{
	const char *env = getenv("DXL_FABRIC_PF");
	if (!env || !*env)
		return;
	char buf[128];
	snprintf(buf, sizeof(buf), "%s", env);
	char *save = NULL;
	char *sig = strtok_r(buf, ":", &save);
	char *pol = strtok_r(NULL, ":", &save);
	char *seed = strtok_r(NULL, ":", &save);
	char *idle = strtok_r(NULL, ":", &save);
	int signo = 0;
	if (sig && strcasecmp(sig, "USR1") == 0)
		signo = SIGUSR1;
	else if (sig && strcasecmp(sig, "USR2") == 0)
		signo = SIGUSR2;
	else if (sig)
		signo = atoi(sig);
	if (signo <= 0 || signo >= NSIG) {
		DXL_WARN("DXL_FABRIC_PF=%s: bad signal, ignored", env);
		return;
	}
	enum dxl_pf_policy p = DXL_PF_RANDOM;
	if (pol && strcasecmp(pol, "none") == 0)
		p = DXL_PF_NONE;
	else if (pol && strcasecmp(pol, "all") == 0)
		p = DXL_PF_ALL;
	else if (pol && strcasecmp(pol, "random") != 0) {
		DXL_WARN("DXL_FABRIC_PF=%s: bad policy, ignored", env);
		return;
	}
	uint64_t s = 0;
	if (seed && dxl_parse_u64(seed, &s) != 0) {
		DXL_WARN("DXL_FABRIC_PF=%s: bad seed, ignored", env);
		return;
	}
	uint64_t idle_ms = 0;
	if (idle && (dxl_parse_u64(idle, &idle_ms) != 0 || idle_ms > 3600000)) {
		DXL_WARN("DXL_FABRIC_PF=%s: bad idle time (ms), ignored", env);
		return;
	}
	cfg->pf_signal = signo;
	cfg->pf_policy = p;
	cfg->pf_seed = s;
	cfg->pf_idle_ms = (uint32_t)idle_ms;
}

void dxl_fabric_cfg_init(struct dxl_fabric_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->provider = DXL_FABRIC_TCP;
	snprintf(cfg->listen_addr, sizeof(cfg->listen_addr), "127.0.0.1:0");
	cfg->timeout_ms = 1000;
	cfg->sq_depth = 256;
	cfg->cq_depth = 4096;
	cfg->srq_depth = 512;
	cfg->max_inline = 64;
	cfg->max_msg = 65536;
	cfg->idle_spin_us = 50;
	cfg->port = 1;
	cfg->gid_index = -1;
	pf_from_env(cfg);
}

static int check_cfg(const struct dxl_fabric_cfg *c)
{
	char host[DXL_FABRIC_ADDR_MAX];
	uint16_t port;
	if ((unsigned)c->provider > DXL_FABRIC_VERBS)
		return dxl_err_set(DXL_E_INVAL, "fabric: unknown provider %d",
				   (int)c->provider);
	if (dxl_parse_hostport(c->listen_addr, host, sizeof(host), &port))
		return dxl_err_set(DXL_E_INVAL,
				   "fabric: listen address '%s' is not host:port",
				   c->listen_addr);
	if (c->timeout_ms == 0 || c->timeout_ms > 3600 * 1000)
		return dxl_err_set(DXL_E_INVAL,
				   "fabric: timeout_ms %u out of range 1..3600000",
				   c->timeout_ms);
	if (c->sq_depth < 4 || c->sq_depth > 65536)
		return dxl_err_set(DXL_E_INVAL,
				   "fabric: sq_depth %u out of range 4..65536",
				   c->sq_depth);
	if (c->cq_depth < c->sq_depth || c->cq_depth > (1u << 22))
		return dxl_err_set(DXL_E_INVAL,
				   "fabric: cq_depth %u must be in sq_depth(%u)..4194304",
				   c->cq_depth, c->sq_depth);
	if (c->srq_depth < 1 || c->srq_depth > 65536)
		return dxl_err_set(DXL_E_INVAL,
				   "fabric: srq_depth %u out of range 1..65536",
				   c->srq_depth);
	if (c->max_inline > 1024)
		return dxl_err_set(DXL_E_INVAL,
				   "fabric: max_inline %u over 1024", c->max_inline);
	if (c->max_msg < 64 || c->max_msg > (16u << 20))
		return dxl_err_set(DXL_E_INVAL,
				   "fabric: max_msg %u out of range 64..16777216",
				   c->max_msg);
	if ((unsigned)c->pf_policy > DXL_PF_RANDOM)
		return dxl_err_set(DXL_E_INVAL, "fabric: bad pf_policy %d",
				   (int)c->pf_policy);
	return 0;
}

int dxl_fabric_new(const struct dxl_fabric_cfg *cfg, struct dxl_fabric **out)
{
	struct dxl_fabric_cfg def;
	if (!out)
		return dxl_err_set(DXL_E_INVAL, "fabric: out is NULL");
	*out = NULL;
	if (!cfg) {
		dxl_fabric_cfg_init(&def);
		cfg = &def;
	}
	int ret = check_cfg(cfg);
	if (ret)
		return ret;

	struct dxl_fabric *f = calloc(1, sizeof(*f));
	if (!f)
		return dxl_err_set(DXL_E_NOMEM, "fabric: out of memory");
	f->cfg = *cfg;
	f->ops = cfg->provider == DXL_FABRIC_VERBS ? &dxl_fabric_verbs_ops
						   : &dxl_fabric_tcp_ops;
	pthread_mutex_init(&f->lock, NULL);
	ret = f->ops->open(f);
	if (ret) {
		pthread_mutex_destroy(&f->lock);
		free(f);
		return ret;
	}
	DXL_INFO("fabric: provider %s node %u listening on %s", f->ops->name,
		 f->cfg.node_id, f->addr);
	*out = f;
	return 0;
}

void dxl_fabric_delete(struct dxl_fabric **fp)
{
	if (!fp || !*fp)
		return;
	struct dxl_fabric *f = *fp;
	for (uint32_t i = 0; i < DXL_FABRIC_MAX_CTX; i++) {
		struct dxl_ctx *c = f->ctx[i];
		if (c)
			dxl_ctx_delete(&c);
	}
	while (f->mrs) {
		struct dxl_mr *mr = f->mrs;
		dxl_mr_dereg(&mr);
	}
	f->ops->close(f);
	pthread_mutex_destroy(&f->lock);
	free(f);
	*fp = NULL;
}

const char *dxl_fabric_addr(const struct dxl_fabric *f)
{
	return f->addr;
}

uint32_t dxl_fabric_node_id(const struct dxl_fabric *f)
{
	return f->cfg.node_id;
}

enum dxl_fabric_provider dxl_fabric_provider(const struct dxl_fabric *f)
{
	return f->cfg.provider;
}

const struct dxl_fabric_cfg *dxl_fabric_cfg(const struct dxl_fabric *f)
{
	return &f->cfg;
}

/* ---- memory regions ------------------------------------------------------ */

#define MR_ACCESS_ALL                                                        \
	(DXL_MR_LOCAL_WRITE | DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE |     \
	 DXL_MR_REMOTE_ATOMIC | DXL_MR_PERSISTENT)

int dxl_mr_reg(struct dxl_fabric *f, void *addr, size_t len, unsigned access,
	       struct dxl_mr **out)
{
	if (!f || !addr || !len || !out)
		return dxl_err_set(DXL_E_INVAL,
				   "mr_reg: NULL argument or zero length");
	*out = NULL;
	if (access & ~MR_ACCESS_ALL)
		return dxl_err_set(DXL_E_INVAL, "mr_reg: unknown access flags 0x%x",
				   access & ~MR_ACCESS_ALL);
	if ((access & DXL_MR_REMOTE_WRITE || access & DXL_MR_REMOTE_ATOMIC) &&
	    !(access & DXL_MR_LOCAL_WRITE))
		/* verbs rule: remote write/atomic access needs local write */
		access |= DXL_MR_LOCAL_WRITE;
	struct dxl_mr *mr = calloc(1, sizeof(*mr));
	if (!mr)
		return dxl_err_set(DXL_E_NOMEM, "mr_reg: out of memory");
	mr->f = f;
	mr->addr = addr;
	mr->len = len;
	mr->access = access;
	int ret = f->ops->mr_reg(mr);
	if (ret) {
		free(mr);
		return ret;
	}
	pthread_mutex_lock(&f->lock);
	mr->next = f->mrs;
	f->mrs = mr;
	pthread_mutex_unlock(&f->lock);
	*out = mr;
	return 0;
}

void dxl_mr_dereg(struct dxl_mr **mrp)
{
	if (!mrp || !*mrp)
		return;
	struct dxl_mr *mr = *mrp;
	struct dxl_fabric *f = mr->f;
	pthread_mutex_lock(&f->lock);
	for (struct dxl_mr **pp = &f->mrs; *pp; pp = &(*pp)->next) {
		if (*pp == mr) {
			*pp = mr->next;
			break;
		}
	}
	pthread_mutex_unlock(&f->lock);
	f->ops->mr_dereg(mr);
	free(mr);
	*mrp = NULL;
}

void dxl_mr_desc(const struct dxl_mr *mr, struct dxl_mr_desc *out)
{
	out->addr = (uint64_t)(uintptr_t)mr->addr;
	out->len = mr->len;
	out->rkey = mr->rkey;
	out->node = mr->f->cfg.node_id;
}

uint32_t dxl_mr_lkey(const struct dxl_mr *mr)
{
	return mr->lkey;
}

void *dxl_mr_addr(const struct dxl_mr *mr)
{
	return mr->addr;
}

size_t dxl_mr_len(const struct dxl_mr *mr)
{
	return mr->len;
}

int dxl_mr_desc_encode(const struct dxl_mr_desc *d, void *buf, size_t cap)
{
	if (!d || !buf || cap < DXL_MR_DESC_WIRE_SIZE)
		return dxl_err_set(DXL_E_INVAL,
				   "mr_desc_encode: buffer of %zu bytes, need %d",
				   cap, DXL_MR_DESC_WIRE_SIZE);
	uint8_t *p = buf;
	dxl_put_le32(p, MR_DESC_MAGIC);
	dxl_put_le64(p + 4, d->addr);
	dxl_put_le64(p + 12, d->len);
	dxl_put_le32(p + 20, d->rkey);
	dxl_put_le32(p + 24, d->node);
	return DXL_MR_DESC_WIRE_SIZE;
}

int dxl_mr_desc_decode(const void *buf, size_t len, struct dxl_mr_desc *out)
{
	if (!buf || !out || len < DXL_MR_DESC_WIRE_SIZE)
		return dxl_err_set(DXL_E_PROTO,
				   "mr_desc_decode: %zu bytes, need %d", len,
				   DXL_MR_DESC_WIRE_SIZE);
	const uint8_t *p = buf;
	uint32_t magic = dxl_get_le32(p);
	if (magic != MR_DESC_MAGIC)
		return dxl_err_set(DXL_E_PROTO,
				   "mr_desc_decode: bad magic 0x%08x", magic);
	out->addr = dxl_get_le64(p + 4);
	out->len = dxl_get_le64(p + 12);
	out->rkey = dxl_get_le32(p + 20);
	out->node = dxl_get_le32(p + 24);
	if (out->addr + out->len < out->addr)
		return dxl_err_set(DXL_E_PROTO,
				   "mr_desc_decode: region wraps the address space");
	return 0;
}

void dxl_mr_set_persist_fn(struct dxl_mr *mr, dxl_mr_persist_fn fn, void *arg)
{
	mr->persist_fn = fn;
	mr->persist_arg = arg;
}

void dxl_mr_mark_durable(struct dxl_mr *mr, const void *addr, size_t len)
{
	if (!mr || !(mr->access & DXL_MR_PERSISTENT) || !len)
		return;
	if (mr->f->ops->mr_mark_durable)
		mr->f->ops->mr_mark_durable(mr, addr, len);
}

int dxl_fabric_power_fail(struct dxl_fabric *f, enum dxl_pf_policy policy,
			  uint64_t seed)
{
	if (!f->ops->power_fail)
		return dxl_err_set(DXL_E_NOTSUP,
				   "power_fail: the %s provider has no power-failure model",
				   f->ops->name);
	if ((unsigned)policy > DXL_PF_RANDOM)
		return dxl_err_set(DXL_E_INVAL, "power_fail: bad policy %d",
				   (int)policy);
	return f->ops->power_fail(f, policy, seed);
}

int dxl_fabric_power_fail_arm(struct dxl_fabric *f, enum dxl_pf_policy policy,
			      uint64_t seed, uint32_t steps, uint32_t idle_ms)
{
	if (!f->ops->power_fail_arm)
		return dxl_err_set(DXL_E_NOTSUP,
				   "power_fail_arm: the %s provider has no power-failure model",
				   f->ops->name);
	if ((unsigned)policy > DXL_PF_RANDOM)
		return dxl_err_set(DXL_E_INVAL, "power_fail_arm: bad policy %d",
				   (int)policy);
	return f->ops->power_fail_arm(f, policy, seed, steps, idle_ms);
}

size_t dxl_fabric_pending_lines(struct dxl_fabric *f)
{
	return f->ops->pending_lines ? f->ops->pending_lines(f) : 0;
}

/* ---- contexts ------------------------------------------------------------ */

int dxl_ctx_new(struct dxl_fabric *f, uint32_t idx, struct dxl_ctx **out)
{
	if (!f || !out)
		return dxl_err_set(DXL_E_INVAL, "ctx_new: NULL argument");
	*out = NULL;
	if (idx >= DXL_FABRIC_MAX_CTX)
		return dxl_err_set(DXL_E_INVAL, "ctx_new: index %u over %d", idx,
				   DXL_FABRIC_MAX_CTX - 1);
	pthread_mutex_lock(&f->lock);
	bool taken = f->ctx[idx] != NULL;
	pthread_mutex_unlock(&f->lock);
	if (taken)
		return dxl_err_set(DXL_E_EXIST, "ctx_new: index %u is in use", idx);
	struct dxl_ctx *c = NULL;
	int ret = f->ops->ctx_new(f, idx, &c);
	if (ret)
		return ret;
	c->f = f;
	c->idx = idx;
	pthread_mutex_lock(&f->lock);
	if (f->ctx[idx]) { /* lost a race with another thread */
		pthread_mutex_unlock(&f->lock);
		f->ops->ctx_delete(c);
		return dxl_err_set(DXL_E_EXIST, "ctx_new: index %u is in use", idx);
	}
	f->ctx[idx] = c;
	pthread_mutex_unlock(&f->lock);
	*out = c;
	return 0;
}

void dxl_ctx_delete(struct dxl_ctx **cp)
{
	if (!cp || !*cp)
		return;
	struct dxl_ctx *c = *cp;
	struct dxl_fabric *f = c->f;
	pthread_mutex_lock(&f->lock);
	if (f->ctx[c->idx] == c)
		f->ctx[c->idx] = NULL;
	pthread_mutex_unlock(&f->lock);
	f->ops->ctx_delete(c);
	*cp = NULL;
}

struct dxl_ctx *dxl_fabric_ctx_lookup(struct dxl_fabric *f, uint32_t idx)
{
	if (idx >= DXL_FABRIC_MAX_CTX)
		return NULL;
	pthread_mutex_lock(&f->lock);
	struct dxl_ctx *c = f->ctx[idx];
	pthread_mutex_unlock(&f->lock);
	return c;
}

uint32_t dxl_ctx_qp_count(struct dxl_ctx *c)
{
	return c->f->ops->qp_count(c);
}

uint32_t dxl_ctx_idx(const struct dxl_ctx *c)
{
	return c->idx;
}

struct dxl_fabric *dxl_ctx_fabric(const struct dxl_ctx *c)
{
	return c->f;
}

/* ---- queue pairs --------------------------------------------------------- */

int dxl_qp_connect(struct dxl_ctx *c, const char *remote_addr,
		   uint32_t remote_ctx, struct dxl_qp **out)
{
	char host[DXL_FABRIC_ADDR_MAX];
	uint16_t port;
	if (!c || !remote_addr || !out)
		return dxl_err_set(DXL_E_INVAL, "qp_connect: NULL argument");
	*out = NULL;
	if (dxl_parse_hostport(remote_addr, host, sizeof(host), &port) || !port)
		return dxl_err_set(DXL_E_INVAL,
				   "qp_connect: '%s' is not host:port", remote_addr);
	if (remote_ctx >= DXL_FABRIC_MAX_CTX)
		return dxl_err_set(DXL_E_INVAL,
				   "qp_connect: remote ctx %u over %d", remote_ctx,
				   DXL_FABRIC_MAX_CTX - 1);
	int ret = c->f->ops->qp_connect(c, host, port, remote_ctx, out);
	if (ret)
		dxl_err_prefix("qp to %s ctx %u", remote_addr, remote_ctx);
	return ret;
}

void dxl_qp_delete(struct dxl_qp **qpp)
{
	if (!qpp || !*qpp)
		return;
	struct dxl_qp *qp = *qpp;
	qp->ctx->f->ops->qp_delete(qp);
	*qpp = NULL;
}

enum dxl_qp_state dxl_qp_state(const struct dxl_qp *qp)
{
	return qp->state;
}

uint32_t dxl_qp_remote_node(const struct dxl_qp *qp)
{
	return qp->remote_node;
}

struct dxl_ctx *dxl_qp_ctx(const struct dxl_qp *qp)
{
	return qp->ctx;
}

int dxl_qp_is_passive(const struct dxl_qp *qp)
{
	return qp->passive;
}

void dxl_qp_set_user(struct dxl_qp *qp, void *user)
{
	qp->user = user;
}

void *dxl_qp_user(const struct dxl_qp *qp)
{
	return qp->user;
}

int dxl_fabric_check_chain(const struct dxl_qp *qp, struct dxl_wr *chain,
			   struct dxl_wr **bad)
{
	const struct dxl_fabric_cfg *cfg = &qp->ctx->f->cfg;
	int n = 0;
	for (struct dxl_wr *wr = chain; wr; wr = wr->next, n++) {
		const char *why = NULL;
		switch (wr->op) {
		case DXL_WR_READ:
		case DXL_WR_WRITE:
			if (qp->passive)
				why = "one-sided request on a passive QP";
			else if (wr->len && !wr->local)
				why = "NULL local buffer";
			else if (wr->op == DXL_WR_READ &&
				 (wr->flags & DXL_WR_INLINE))
				why = "inline READ";
			break;
		case DXL_WR_CAS:
		case DXL_WR_FAA:
			if (qp->passive)
				why = "one-sided request on a passive QP";
			else if (wr->len != 8)
				why = "atomic length is not 8";
			else if (!wr->local || ((uintptr_t)wr->local & 7))
				why = "atomic result buffer NULL or not 8-byte aligned";
			else if (wr->flags & DXL_WR_INLINE)
				why = "inline atomic";
			break;
		case DXL_WR_SEND:
			if (wr->len > cfg->max_msg)
				why = "SEND over max_msg";
			else if (wr->len && !wr->local)
				why = "NULL local buffer";
			break;
		default:
			why = "unknown opcode";
		}
		if (!why && (wr->flags & DXL_WR_INLINE) &&
		    wr->len > cfg->max_inline)
			why = "inline payload over max_inline";
		if (!why && (wr->flags & ~(DXL_WR_SIGNALED | DXL_WR_INLINE)))
			why = "unknown flags";
		if (why) {
			if (bad)
				*bad = wr;
			return dxl_err_set(
				qp->passive && why[0] == 'o' ? DXL_E_NOTSUP
							     : DXL_E_INVAL,
				"qp_post: request %d (wr_id %llu, op %d, len %u): %s",
				n, (unsigned long long)wr->wr_id, (int)wr->op,
				wr->len, why);
		}
	}
	if (n == 0) {
		if (bad)
			*bad = NULL;
		return dxl_err_set(DXL_E_INVAL, "qp_post: empty chain");
	}
	return 0;
}

int dxl_qp_post(struct dxl_qp *qp, struct dxl_wr *chain, struct dxl_wr **bad)
{
	if (!qp || !chain) {
		if (bad)
			*bad = chain;
		return dxl_err_set(DXL_E_INVAL, "qp_post: NULL argument");
	}
	if (qp->state != DXL_QP_RTS) {
		if (bad)
			*bad = chain;
		return dxl_err_set(DXL_E_STATE,
				   "qp_post: QP to node %u is in the error state",
				   qp->remote_node);
	}
	int ret = dxl_fabric_check_chain(qp, chain, bad);
	if (ret)
		return ret;
	return qp->ctx->f->ops->qp_post(qp, chain, bad);
}

int dxl_ctx_post_recv(struct dxl_ctx *c, void *buf, uint32_t len, uint32_t lkey,
		      uint64_t wr_id)
{
	if (!c || !buf || !len)
		return dxl_err_set(DXL_E_INVAL,
				   "post_recv: NULL buffer or zero length");
	return c->f->ops->post_recv(c, buf, len, lkey, wr_id);
}

int dxl_ctx_poll(struct dxl_ctx *c, struct dxl_wc *wc, int n)
{
	if (!c || !wc || n < 0)
		return dxl_err_set(DXL_E_INVAL, "poll: bad argument");
	if (n == 0)
		return 0;
	return c->f->ops->poll(c, wc, n);
}

int dxl_ctx_wait(struct dxl_ctx *c, int timeout_ms)
{
	if (!c)
		return dxl_err_set(DXL_E_INVAL, "wait: NULL ctx");
	return c->f->ops->wait(c, timeout_ms);
}

const char *dxl_wc_status_str(enum dxl_wc_status s)
{
	switch (s) {
	case DXL_WC_SUCCESS:
		return "success";
	case DXL_WC_REM_ACCESS_ERR:
		return "remote access error";
	case DXL_WC_PEER_UNREACHABLE:
		return "peer unreachable";
	case DXL_WC_LOCAL_ERR:
		return "local error";
	case DXL_WC_REM_OP_ERR:
		return "remote operation error";
	case DXL_WC_FLUSHED:
		return "flushed";
	}
	return "unknown status";
}
