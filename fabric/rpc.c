/* rpc.c -- batched RPC over SEND/RECV: wire format, batching, dispatch, matching */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/rpc.h"
#include "fabric/co_internal.h"
#include "fabric/fabric_internal.h"
#include "common/endian.h"

/*
 * Threads: an rpc belongs to its scheduler's thread. Everything here runs on
 * that thread: in a coroutine (calls), or in the scheduler's hooks (the
 * poller hands over completions; the round end flushes), so no locks.
 *
 * wr_ids of the RPC layer: class DXL_WRID_CLASS_RPC in bits 63..60, the kind
 * (a receive or a send buffer) in bits 59..56, the buffer index below.
 */
#define KIND_RECV 1u
#define KIND_SEND 2u
#define RPC_WRID(kind, idx)                                                   \
	((DXL_WRID_CLASS_RPC << DXL_WRID_CLASS_SHIFT) |                       \
	 ((uint64_t)(kind) << 56) | (uint64_t)(idx))

#define REQ_SEQ_BITS 40
#define REQ_SEQ_MASK ((1ull << REQ_SEQ_BITS) - 1)
#define FLAGS_KNOWN                                                           \
	(DXL_RPC_F_REQUEST | DXL_RPC_F_REPLY | DXL_RPC_F_NOREPLY |            \
	 DXL_RPC_F_ERROR)
#define CHAIN_MAX 32 /* messages posted with one doorbell */

static inline uint32_t pad8(uint32_t n)
{
	return (n + 7u) & ~7u;
}

/* ---- little-endian accessors --------------------------------------------- */

struct entry {
	uint16_t handler;
	uint16_t flags;
	int32_t status;
	uint64_t req_id;
	uint32_t plen;
	uint32_t reply_cap;
	const uint8_t *payload;
};

static void entry_decode(const uint8_t *p, struct entry *e)
{
	e->handler = dxl_get_le16(p);
	e->flags = dxl_get_le16(p + 2);
	e->status = (int32_t)dxl_get_le32(p + 4);
	e->req_id = dxl_get_le64(p + 8);
	e->plen = dxl_get_le32(p + 16);
	e->reply_cap = dxl_get_le32(p + 20);
	e->payload = p + DXL_RPC_ENTRY_SIZE;
}

static bool flags_valid(uint16_t f)
{
	uint16_t kind = f & (DXL_RPC_F_REQUEST | DXL_RPC_F_REPLY |
			     DXL_RPC_F_NOREPLY);
	if (f & ~FLAGS_KNOWN)
		return false;
	if (kind != DXL_RPC_F_REQUEST && kind != DXL_RPC_F_REPLY &&
	    kind != DXL_RPC_F_NOREPLY)
		return false;
	return !(f & DXL_RPC_F_ERROR) || kind == DXL_RPC_F_REPLY;
}

/* ---- objects ------------------------------------------------------------- */

struct rpc_peer;

/* a send buffer: one message being filled, queued or in flight */
struct sbuf {
	uint8_t *p;
	uint32_t lkey;
	uint32_t idx;
	uint32_t len;          /* bytes filled, batch header included */
	uint32_t count;        /* entries */
	struct rpc_peer *peer; /* queued/in flight for; NULL = orphan */
	struct sbuf *next;     /* free list or the peer's queue */
	bool in_flight;
};

/* memory registered in one piece; kept until dxl_rpc_delete */
struct slab {
	void *mem;
	size_t len;
	struct dxl_mr *mr;
	struct sbuf *bufs; /* the sbufs describing it */
	struct slab *next;
};

/*
 * A pending call, owned by the rpc (not by the caller's struct, which may
 * sit on the stack of a coroutine that has ended: see hook_co_exit). It is
 * on two lists: its coroutine slot's and its QP's.
 */
struct pend {
	struct dxl_rpc_call *call; /* written only while the record is live */
	uint64_t req_id;
	uint64_t deadline_ns;
	struct rpc_peer *peer;
	struct pend *co_next, *co_prev;
	struct pend *peer_next, *peer_prev; /* also the free list */
};

/* pend records are allocated in chunks, kept until dxl_rpc_delete */
#define PEND_CHUNK 64
struct pend_chunk {
	struct pend_chunk *next;
	struct pend v[PEND_CHUNK];
};

/* what the RPC keeps per QP it talks on */
struct rpc_peer {
	struct dxl_qp *qp;
	struct rpc_peer *hnext; /* hash chain */
	struct sbuf *open;      /* batch being filled this round */
	struct sbuf *txq_head, *txq_tail; /* closed batches not yet posted */
	uint32_t in_flight;     /* posted SENDs not yet completed */
	struct pend *calls;     /* pending calls on this QP */
	uint32_t n_pending;
	struct rpc_peer *pend_next, *pend_prev; /* in rpc->pend while n_pending */
	bool dirty;             /* in rpc->dirty */
	struct rpc_peer *dirty_next;
	bool failed;            /* its QP failed: calls were failed, queue dropped */
	uint64_t down_round;    /* passive: the round it was first seen down */
};

/* the pending calls of one coroutine slot */
struct rpc_co {
	struct pend *calls;
	uint32_t n_pending;
	uint32_t n_failed; /* finished with status != 0 since the last wait_all */
	/* what the coroutine is parked on, so that only the reply that ends
	 * its wait resumes it (R2: resume when ALL replies are in) */
	const struct dxl_rpc_call *wait_one;
	bool wait_all;
};

struct handler {
	dxl_rpc_handler_fn fn;
	void *arg;
};

struct dxl_rpc {
	struct dxl_sched *s;
	struct dxl_ctx *ctx;
	struct dxl_fabric *f;
	uint32_t ctx_idx;
	struct dxl_rpc_cfg cfg;
	uint32_t max_payload;

	struct handler h[DXL_RPC_MAX_HANDLERS];
	struct dxl_qp *cur_qp; /* inside a handler */
	uint8_t *scratch;      /* replies are built here, then copied */

	/* receive buffers: rbuf[i * max_msg], all posted except repost[] */
	uint8_t *rbuf;
	size_t rbuf_len;
	struct dxl_mr *rmr;
	uint32_t *repost;
	uint32_t n_repost;
	uint32_t n_posted;

	/* send buffers */
	struct slab *slabs;
	struct sbuf **sbufs;
	uint32_t n_sbufs;
	struct sbuf *free_sbufs;
	struct dxl_wr chain[CHAIN_MAX];

	/* peers by QP address */
	struct rpc_peer **ht;
	uint32_t ht_nb; /* buckets, a power of two */
	uint32_t n_peers;
	struct rpc_peer *dirty; /* peers with something to post */
	struct rpc_peer *pend;  /* peers with pending calls */

	struct rpc_co *cos;
	uint32_t n_cos;
	uint64_t seq;
	uint64_t next_reclaim_ns; /* reclaim_passive's next scan */
	uint64_t n_pending;
	struct pend *free_pends;
	struct pend_chunk *pend_chunks;

	struct dxl_rpc_stats st;
};

/*
 * Receive buffers still posted in a live ctx when their rpc goes away (see
 * dxl_rpc_delete). The provider may still write into them, so they are kept
 * (reachable, so leak checkers stay quiet) until the process ends.
 */
struct grave {
	void *mem;
	struct grave *next;
};
static pthread_mutex_t grave_lock = PTHREAD_MUTEX_INITIALIZER;
static struct grave *graveyard;

static void bury(void *mem)
{
	struct grave *g = malloc(sizeof(*g));
	if (!g) /* cannot even remember it: leak it, never free it */
		return;
	g->mem = mem;
	pthread_mutex_lock(&grave_lock);
	g->next = graveyard;
	graveyard = g;
	pthread_mutex_unlock(&grave_lock);
}

/* ---- configuration --------------------------------------------------------- */

void dxl_rpc_cfg_init(struct dxl_rpc_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->max_msg = 16384;
	cfg->n_recv_bufs = 256;
	cfg->n_send_bufs = 32;
	cfg->max_send_bufs = 4096;
	cfg->max_batch = 64;
	cfg->timeout_ms = 5000;
}

static int check_cfg(const struct dxl_rpc_cfg *c,
		     const struct dxl_fabric_cfg *fc)
{
	if (c->max_msg < 256 || c->max_msg > fc->max_msg || c->max_msg % 8)
		return dxl_err_set(DXL_E_INVAL,
				   "rpc: max_msg %u must be a multiple of 8 in "
				   "256..%u (the fabric's max_msg)",
				   c->max_msg, fc->max_msg);
	if (c->n_recv_bufs < 1 || c->n_recv_bufs > fc->srq_depth)
		return dxl_err_set(DXL_E_INVAL,
				   "rpc: n_recv_bufs %u out of range 1..%u (the "
				   "fabric's srq_depth)",
				   c->n_recv_bufs, fc->srq_depth);
	if (c->n_send_bufs < 1 || c->max_send_bufs < c->n_send_bufs ||
	    c->max_send_bufs > (1u << 20))
		return dxl_err_set(DXL_E_INVAL,
				   "rpc: need 1 <= n_send_bufs (%u) <= max_send_bufs "
				   "(%u) <= 1048576",
				   c->n_send_bufs, c->max_send_bufs);
	if (c->max_batch < 1 || c->max_batch > 65535)
		return dxl_err_set(DXL_E_INVAL,
				   "rpc: max_batch %u out of range 1..65535",
				   c->max_batch);
	if (c->timeout_ms < 1 || c->timeout_ms > 3600u * 1000u)
		return dxl_err_set(DXL_E_INVAL,
				   "rpc: timeout_ms %u out of range 1..3600000",
				   c->timeout_ms);
	return 0;
}

/* ---- peers ----------------------------------------------------------------- */

static uint32_t ptr_hash(const void *p, uint32_t nb)
{
	uint64_t x = (uint64_t)(uintptr_t)p;
	x ^= x >> 17;
	x *= 0x9e3779b97f4a7c15ull;
	return (uint32_t)(x >> 32) & (nb - 1);
}

static struct rpc_peer *peer_find(struct dxl_rpc *rpc, struct dxl_qp *qp)
{
	for (struct rpc_peer *p = rpc->ht[ptr_hash(qp, rpc->ht_nb)]; p;
	     p = p->hnext)
		if (p->qp == qp)
			return p;
	return NULL;
}

static void ht_grow(struct dxl_rpc *rpc)
{
	uint32_t nb = rpc->ht_nb * 2;
	struct rpc_peer **n = calloc(nb, sizeof(*n));
	if (!n)
		return; /* longer chains, still correct */
	for (uint32_t i = 0; i < rpc->ht_nb; i++) {
		struct rpc_peer *p = rpc->ht[i];
		while (p) {
			struct rpc_peer *next = p->hnext;
			uint32_t b = ptr_hash(p->qp, nb);
			p->hnext = n[b];
			n[b] = p;
			p = next;
		}
	}
	free(rpc->ht);
	rpc->ht = n;
	rpc->ht_nb = nb;
}

static struct rpc_peer *peer_get(struct dxl_rpc *rpc, struct dxl_qp *qp)
{
	struct rpc_peer *p = peer_find(rpc, qp);
	if (p)
		return p;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->qp = qp;
	if (rpc->n_peers >= rpc->ht_nb)
		ht_grow(rpc);
	uint32_t b = ptr_hash(qp, rpc->ht_nb);
	p->hnext = rpc->ht[b];
	rpc->ht[b] = p;
	rpc->n_peers++;
	return p;
}

static void dirty_add(struct dxl_rpc *rpc, struct rpc_peer *p)
{
	if (p->dirty)
		return;
	p->dirty = true;
	p->dirty_next = rpc->dirty;
	rpc->dirty = p;
}

static void pend_link(struct dxl_rpc *rpc, struct rpc_peer *p)
{
	p->pend_prev = NULL;
	p->pend_next = rpc->pend;
	if (rpc->pend)
		rpc->pend->pend_prev = p;
	rpc->pend = p;
}

static void pend_unlink(struct dxl_rpc *rpc, struct rpc_peer *p)
{
	if (p->pend_prev)
		p->pend_prev->pend_next = p->pend_next;
	else
		rpc->pend = p->pend_next;
	if (p->pend_next)
		p->pend_next->pend_prev = p->pend_prev;
	p->pend_next = p->pend_prev = NULL;
}

/* ---- send buffers ------------------------------------------------------------ */

/* add up to cfg.n_send_bufs buffers (one registered slab) to the pool */
static int sbuf_grow(struct dxl_rpc *rpc)
{
	uint32_t k = DXL_MIN(rpc->cfg.n_send_bufs,
			     rpc->cfg.max_send_bufs - rpc->n_sbufs);
	if (k == 0)
		return dxl_err_set(DXL_E_AGAIN,
				   "rpc: all %u send buffers are in use",
				   rpc->n_sbufs);
	struct slab *sl = calloc(1, sizeof(*sl));
	struct sbuf **arr = realloc(rpc->sbufs, (size_t)(rpc->n_sbufs + k) *
							sizeof(*arr));
	struct sbuf *bs = calloc(k, sizeof(*bs));
	if (arr)
		rpc->sbufs = arr;
	if (!sl || !arr || !bs)
		goto err_nomem;
	sl->len = (size_t)k * rpc->cfg.max_msg;
	if (posix_memalign(&sl->mem, 4096, sl->len) != 0)
		goto err_nomem;
	int ret = dxl_mr_reg(rpc->f, sl->mem, sl->len, DXL_MR_LOCAL_WRITE,
			     &sl->mr);
	if (ret) {
		free(sl->mem);
		free(sl);
		free(bs);
		dxl_err_prefix("rpc: registering send buffers");
		return ret;
	}
	uint32_t lkey = dxl_mr_lkey(sl->mr);
	for (uint32_t i = 0; i < k; i++) {
		struct sbuf *b = &bs[i];
		b->p = (uint8_t *)sl->mem + (size_t)i * rpc->cfg.max_msg;
		b->lkey = lkey;
		b->idx = rpc->n_sbufs + i;
		b->next = rpc->free_sbufs;
		rpc->free_sbufs = b;
		rpc->sbufs[b->idx] = b;
	}
	sl->bufs = bs;
	sl->next = rpc->slabs;
	rpc->slabs = sl;
	rpc->n_sbufs += k;
	rpc->st.send_bufs = rpc->n_sbufs;
	return 0;

err_nomem:
	free(sl);
	free(bs);
	return dxl_err_set(DXL_E_NOMEM, "rpc: out of memory for %u send buffers",
			   k);
}

static struct sbuf *sbuf_get(struct dxl_rpc *rpc, int *err)
{
	if (!rpc->free_sbufs && (*err = sbuf_grow(rpc)) != 0)
		return NULL;
	struct sbuf *b = rpc->free_sbufs;
	rpc->free_sbufs = b->next;
	b->next = NULL;
	b->len = DXL_RPC_HDR_SIZE;
	b->count = 0;
	b->peer = NULL;
	b->in_flight = false;
	return b;
}

static void sbuf_put(struct dxl_rpc *rpc, struct sbuf *b)
{
	b->peer = NULL;
	b->in_flight = false;
	b->next = rpc->free_sbufs;
	rpc->free_sbufs = b;
}

/* close the peer's open batch: write its header, queue it for posting */
static void batch_close(struct rpc_peer *p)
{
	struct sbuf *b = p->open;
	if (!b)
		return;
	p->open = NULL;
	dxl_put_le32(b->p, DXL_RPC_MAGIC);
	dxl_put_le16(b->p + 4, DXL_RPC_VERSION);
	dxl_put_le16(b->p + 6, (uint16_t)b->count);
	dxl_put_le32(b->p + 8, b->len);
	dxl_put_le32(b->p + 12, 0);
	b->next = NULL;
	if (p->txq_tail)
		p->txq_tail->next = b;
	else
		p->txq_head = b;
	p->txq_tail = b;
}

/*
 * append one entry to the peer's batch of this round. Returns 0, or
 * DXL_E_AGAIN / DXL_E_NOMEM when no send buffer can be had.
 */
static int append_entry(struct dxl_rpc *rpc, struct rpc_peer *p,
			uint16_t handler, uint16_t flags, int32_t status,
			uint64_t req_id, uint32_t reply_cap, const void *payload,
			uint32_t plen)
{
	uint32_t need = DXL_RPC_ENTRY_SIZE + pad8(plen);
	if (p->open && (p->open->count >= rpc->cfg.max_batch ||
			p->open->len + need > rpc->cfg.max_msg))
		batch_close(p);
	if (!p->open) {
		int err = 0;
		struct sbuf *b = sbuf_get(rpc, &err);
		if (!b)
			return err;
		b->peer = p;
		p->open = b;
	}
	struct sbuf *b = p->open;
	uint8_t *e = b->p + b->len;
	dxl_put_le16(e, handler);
	dxl_put_le16(e + 2, flags);
	dxl_put_le32(e + 4, (uint32_t)status);
	dxl_put_le64(e + 8, req_id);
	dxl_put_le32(e + 16, plen);
	dxl_put_le32(e + 20, reply_cap);
	if (plen)
		memcpy(e + DXL_RPC_ENTRY_SIZE, payload, plen);
	memset(e + DXL_RPC_ENTRY_SIZE + plen, 0, pad8(plen) - plen);
	b->len += need;
	b->count++;
	dirty_add(rpc, p);
	return 0;
}

/* ---- finishing calls ------------------------------------------------------- */

static struct pend *pend_alloc(struct dxl_rpc *rpc)
{
	if (!rpc->free_pends) {
		struct pend_chunk *ch = calloc(1, sizeof(*ch));
		if (!ch)
			return NULL;
		ch->next = rpc->pend_chunks;
		rpc->pend_chunks = ch;
		for (int i = 0; i < PEND_CHUNK; i++) {
			ch->v[i].peer_next = rpc->free_pends;
			rpc->free_pends = &ch->v[i];
		}
	}
	struct pend *pd = rpc->free_pends;
	rpc->free_pends = pd->peer_next;
	memset(pd, 0, sizeof(*pd));
	return pd;
}

/* take pd off its lists and free it; never touches pd->call */
static void pend_release(struct dxl_rpc *rpc, struct pend *pd)
{
	struct rpc_co *rc = &rpc->cos[DXL_CO_SLOT(pd->req_id >> REQ_SEQ_BITS)];
	if (pd->co_prev)
		pd->co_prev->co_next = pd->co_next;
	else
		rc->calls = pd->co_next;
	if (pd->co_next)
		pd->co_next->co_prev = pd->co_prev;
	rc->n_pending--;

	struct rpc_peer *p = pd->peer;
	if (pd->peer_prev)
		pd->peer_prev->peer_next = pd->peer_next;
	else
		p->calls = pd->peer_next;
	if (pd->peer_next)
		pd->peer_next->peer_prev = pd->peer_prev;
	if (--p->n_pending == 0)
		pend_unlink(rpc, p);
	rpc->n_pending--;
	pd->call = NULL;
	pd->peer_next = rpc->free_pends;
	rpc->free_pends = pd;
}

/* the call's result is final: release its record and wake its coroutine
 * (unless that is the one running, which sees `done` itself) */
static void call_finish(struct dxl_rpc *rpc, struct pend *pd, int status)
{
	struct dxl_rpc_call *c = pd->call;
	uint32_t co_id = (uint32_t)(pd->req_id >> REQ_SEQ_BITS);
	struct rpc_co *rc = &rpc->cos[DXL_CO_SLOT(co_id)];
	pend_release(rpc, pd);
	c->priv.pend = NULL;
	c->status = status;
	c->done = 1;
	if (status != 0 && !c->priv.sync)
		rc->n_failed++;
	bool ends_wait = rc->wait_one == c || (rc->wait_all && !rc->n_pending);
	if (ends_wait && (!dxl_co_self() || dxl_co_id(NULL) != co_id))
		dxl_co_resume(rpc->s, co_id);
}

/* the QP of p failed: fail its calls, drop what waits to be sent */
static void peer_fail(struct dxl_rpc *rpc, struct rpc_peer *p, const char *why)
{
	uint32_t dropped = 0;
	if (p->open) {
		dropped += p->open->count;
		sbuf_put(rpc, p->open);
		p->open = NULL;
	}
	while (p->txq_head) {
		struct sbuf *b = p->txq_head;
		p->txq_head = b->next;
		dropped += b->count;
		sbuf_put(rpc, b);
	}
	p->txq_tail = NULL;
	uint32_t failed = p->n_pending;
	while (p->calls) {
		rpc->st.unreachable++;
		call_finish(rpc, p->calls, DXL_E_UNREACHABLE);
	}
	rpc->st.dropped_out += dropped;
	if (!p->failed && (failed || dropped))
		DXL_WARN("rpc: QP to node %u failed (%s): %u pending calls "
			 "failed, %u queued entries dropped",
			 dxl_qp_remote_node(p->qp), why, failed, dropped);
	p->failed = true;
}

/* forget everything about p's QP before it is used again (a new QP at the
 * same address, or dxl_rpc_forget_qp) */
static void peer_reset(struct dxl_rpc *rpc, struct rpc_peer *p)
{
	peer_fail(rpc, p, "forgotten");
	/* sends still in flight on the old QP: their buffers come back
	 * through their completion, if one ever arrives */
	for (uint32_t i = 0; i < rpc->n_sbufs; i++)
		if (rpc->sbufs[i]->peer == p)
			rpc->sbufs[i]->peer = NULL;
	p->in_flight = 0;
	p->failed = false;
}

/* ---- posting --------------------------------------------------------------- */

/* post the peer's queued batches, up to CHAIN_MAX per doorbell */
static void peer_post(struct dxl_rpc *rpc, struct rpc_peer *p)
{
	while (p->txq_head) {
		int n = 0;
		uint32_t entries = 0;
		struct sbuf *b = p->txq_head;
		for (; b && n < CHAIN_MAX; b = b->next, n++) {
			rpc->chain[n] = (struct dxl_wr){
				.wr_id = RPC_WRID(KIND_SEND, b->idx),
				.op = DXL_WR_SEND,
				/* signalled: the completion returns the buffer */
				.flags = DXL_WR_SIGNALED,
				.local = b->p,
				.len = b->len,
				.lkey = b->lkey,
				.next = NULL,
			};
			if (n > 0)
				rpc->chain[n - 1].next = &rpc->chain[n];
			entries += b->count;
		}
		int r = dxl_qp_post(p->qp, rpc->chain, NULL);
		if (r == DXL_E_AGAIN)
			return; /* send queue full: the next round retries */
		if (r == DXL_E_STATE) {
			peer_fail(rpc, p, "QP in the error state");
			return;
		}
		if (r != 0) {
			/* a bug of ours (bad request): do not retry forever */
			DXL_ERROR("rpc: posting %d messages to node %u: %s", n,
				  dxl_qp_remote_node(p->qp), dxl_errmsg());
			peer_fail(rpc, p, "post failed");
			return;
		}
		rpc->st.doorbells++;
		for (int i = 0; i < n; i++) {
			struct sbuf *s = p->txq_head;
			p->txq_head = s->next;
			s->next = NULL;
			s->in_flight = true;
			p->in_flight++;
			rpc->st.msgs_sent++;
			if (s->count > 1)
				rpc->st.batched_msgs++;
			if (s->count > rpc->st.max_batch)
				rpc->st.max_batch = s->count;
		}
		rpc->st.entries_sent += entries;
		if (!p->txq_head)
			p->txq_tail = NULL;
	}
}

static void repost_pending(struct dxl_rpc *rpc)
{
	while (rpc->n_repost) {
		uint32_t idx = rpc->repost[rpc->n_repost - 1];
		int r = dxl_ctx_post_recv(rpc->ctx,
					  rpc->rbuf + (size_t)idx * rpc->cfg.max_msg,
					  rpc->cfg.max_msg, dxl_mr_lkey(rpc->rmr),
					  RPC_WRID(KIND_RECV, idx));
		if (r)
			return;
		rpc->n_repost--;
		rpc->n_posted++;
	}
}

int dxl_rpc_flush(struct dxl_rpc *rpc)
{
	if (!rpc)
		return dxl_err_set(DXL_E_INVAL, "rpc_flush: NULL rpc");
	struct rpc_peer *p = rpc->dirty, *keep = NULL;
	rpc->dirty = NULL;
	while (p) {
		struct rpc_peer *next = p->dirty_next;
		p->dirty = false;
		batch_close(p);
		peer_post(rpc, p);
		if (p->txq_head) { /* refused for now: stays dirty */
			p->dirty = true;
			p->dirty_next = keep;
			keep = p;
		}
		p = next;
	}
	rpc->dirty = keep;
	return 0;
}

/* ---- receiving -------------------------------------------------------------- */

static void reply_error(struct dxl_rpc *rpc, struct rpc_peer *p,
			const struct entry *e, int err)
{
	rpc->st.err_replies_sent++;
	rpc->st.replies_sent++;
	if (!p || append_entry(rpc, p, e->handler,
			       DXL_RPC_F_REPLY | DXL_RPC_F_ERROR, err, e->req_id,
			       0, NULL, 0) != 0)
		rpc->st.dropped_out++;
}

/*
 * A message failed validation: run nothing, but answer each request whose
 * entry header can still be read, so its caller does not wait for nothing.
 */
static void salvage(struct dxl_rpc *rpc, struct rpc_peer *p, const uint8_t *m,
		    uint32_t len, uint16_t count, int err)
{
	uint64_t off = DXL_RPC_HDR_SIZE;
	for (uint32_t i = 0; i < count; i++) {
		if (off + DXL_RPC_ENTRY_SIZE > len)
			break;
		struct entry e;
		entry_decode(m + off, &e);
		if (e.flags & DXL_RPC_F_REQUEST)
			reply_error(rpc, p, &e, err);
		if (e.plen > len) /* cannot be followed */
			break;
		off += DXL_RPC_ENTRY_SIZE + (uint64_t)pad8(e.plen);
	}
}

static void match_reply(struct dxl_rpc *rpc, uint32_t node, const struct entry *e)
{
	uint32_t slot = DXL_CO_SLOT((uint32_t)(e->req_id >> REQ_SEQ_BITS));
	struct pend *pd = NULL;
	if (slot < rpc->n_cos)
		for (pd = rpc->cos[slot].calls; pd; pd = pd->co_next)
			if (pd->req_id == e->req_id)
				break;
	if (!pd) {
		rpc->st.stale_replies++;
		DXL_DEBUG("rpc: reply %#llx from node %u matches no pending call "
			  "(timed out or abandoned): dropped",
			  (unsigned long long)e->req_id, node);
		return;
	}
	rpc->st.replies_recv++;
	struct dxl_rpc_call *c = pd->call;
	int status = e->status;
	size_t n = e->plen;
	if (n > c->cap) {
		DXL_WARN("rpc: node %u replied %u bytes to call %#llx with room "
			 "for %zu",
			 node, e->plen, (unsigned long long)e->req_id, c->cap);
		status = DXL_E_PROTO;
		n = c->cap;
	}
	if (n)
		memcpy(c->reply, e->payload, n);
	c->reply_len = n;
	call_finish(rpc, pd, status);
}

static void serve_request(struct dxl_rpc *rpc, struct rpc_peer *p,
			  struct dxl_qp *qp, uint32_t node, const struct entry *e)
{
	bool noreply = e->flags & DXL_RPC_F_NOREPLY;
	struct handler *h = e->handler < DXL_RPC_MAX_HANDLERS ? &rpc->h[e->handler]
							      : NULL;
	if (!h || !h->fn) {
		rpc->st.unknown_handler++;
		DXL_WARN("rpc: node %u asked for unknown handler %u%s", node,
			 e->handler, noreply ? " (no reply wanted)" : "");
		if (!noreply)
			reply_error(rpc, p, e, DXL_E_NOENT);
		return;
	}
	size_t cap = noreply ? 0 : DXL_MIN(e->reply_cap, rpc->max_payload);
	size_t rlen = 0;
	rpc->cur_qp = qp;
	int status = h->fn(rpc, e->payload, e->plen, rpc->scratch, cap, &rlen,
			   h->arg);
	rpc->cur_qp = NULL;
	if (noreply) {
		rpc->st.noreply_served++;
		if (status < 0)
			DXL_DEBUG("rpc: one-way handler %u from node %u returned %s",
				  e->handler, node, dxl_errname(status));
		return;
	}
	rpc->st.requests_served++;
	uint16_t flags = DXL_RPC_F_REPLY;
	if (rlen > cap) {
		DXL_WARN("rpc: handler %u wrote a %zu-byte reply into %zu bytes",
			 e->handler, rlen, cap);
		status = DXL_E_TOOBIG;
		flags |= DXL_RPC_F_ERROR;
		rlen = 0;
		rpc->st.err_replies_sent++;
	}
	rpc->st.replies_sent++;
	if (!p || append_entry(rpc, p, e->handler, flags, status, e->req_id, 0,
			       rpc->scratch, (uint32_t)rlen) != 0) {
		rpc->st.dropped_out++;
		DXL_WARN("rpc: no send buffer for the reply to node %u: dropped "
			 "(the caller will time out)",
			 node);
	}
}

static void handle_msg(struct dxl_rpc *rpc, struct dxl_qp *qp, const uint8_t *m,
		       uint32_t len)
{
	uint32_t node = qp ? dxl_qp_remote_node(qp) : UINT32_MAX;
	rpc->st.msgs_recv++;
	if (len < DXL_RPC_HDR_SIZE) {
		rpc->st.malformed_recv++;
		DXL_WARN("rpc: %u-byte message from node %u is shorter than a "
			 "header: dropped",
			 len, node);
		return;
	}
	uint32_t magic = dxl_get_le32(m);
	uint16_t version = dxl_get_le16(m + 4);
	uint16_t count = dxl_get_le16(m + 6);
	uint32_t total = dxl_get_le32(m + 8);
	if (magic != DXL_RPC_MAGIC || version != DXL_RPC_VERSION) {
		rpc->st.malformed_recv++;
		DXL_WARN("rpc: message from node %u has magic %#x version %u "
			 "(want %#x version %u): dropped",
			 node, magic, version, DXL_RPC_MAGIC, DXL_RPC_VERSION);
		return;
	}
	/* a reply to a malformed message needs a peer; a failure to get one
	 * (ENOMEM) only loses replies */
	struct rpc_peer *p = qp ? peer_get(rpc, qp) : NULL;

	/* validate everything before running anything */
	int err = 0;
	char why[128] = "";
	if (total > rpc->cfg.max_msg) {
		err = DXL_E_TOOBIG;
		snprintf(why, sizeof(why), "total_len %u over max_msg %u", total,
			 rpc->cfg.max_msg);
	} else if (total != len) {
		err = DXL_E_PROTO;
		snprintf(why, sizeof(why), "total_len %u but %u bytes arrived",
			 total, len);
	} else if (dxl_get_le32(m + 12) != 0) {
		err = DXL_E_PROTO;
		snprintf(why, sizeof(why), "reserved header word is %#x",
			 dxl_get_le32(m + 12));
	} else if (count == 0) {
		err = DXL_E_PROTO;
		snprintf(why, sizeof(why), "no entries");
	} else {
		uint64_t off = DXL_RPC_HDR_SIZE;
		for (uint32_t i = 0; i < count && !err; i++) {
			struct entry e;
			if (off + DXL_RPC_ENTRY_SIZE > len) {
				err = DXL_E_PROTO;
				snprintf(why, sizeof(why),
					 "entry %u of %u starts beyond the end", i,
					 count);
				break;
			}
			entry_decode(m + off, &e);
			off += DXL_RPC_ENTRY_SIZE;
			if (e.plen > rpc->max_payload ||
			    (uint64_t)pad8(e.plen) > len - off) {
				err = DXL_E_PROTO;
				snprintf(why, sizeof(why),
					 "entry %u payload of %u bytes overruns "
					 "the message",
					 i, e.plen);
			} else if (!flags_valid(e.flags)) {
				err = DXL_E_PROTO;
				snprintf(why, sizeof(why),
					 "entry %u has bad flags %#x", i, e.flags);
			}
			off += pad8(e.plen);
		}
		if (!err && off != total) {
			err = DXL_E_PROTO;
			snprintf(why, sizeof(why),
				 "entries end at byte %llu, total_len is %u",
				 (unsigned long long)off, total);
		}
	}
	if (err) {
		rpc->st.malformed_recv++;
		DXL_WARN("rpc: malformed message from node %u (%u bytes): %s; "
			 "answering its requests with %s",
			 node, len, why, dxl_errname(err));
		salvage(rpc, p, m, len, count, err);
		return;
	}

	uint64_t off = DXL_RPC_HDR_SIZE;
	for (uint32_t i = 0; i < count; i++) {
		struct entry e;
		entry_decode(m + off, &e);
		off += DXL_RPC_ENTRY_SIZE + pad8(e.plen);
		rpc->st.entries_recv++;
		if (e.flags & DXL_RPC_F_REPLY)
			match_reply(rpc, node, &e);
		else
			serve_request(rpc, p, qp, node, &e);
	}
}

static void on_send_done(struct dxl_rpc *rpc, const struct dxl_wc *wc,
			 uint32_t idx)
{
	if (idx >= rpc->n_sbufs || !rpc->sbufs[idx]->in_flight) {
		DXL_WARN("rpc: completion for send buffer %u that is not in "
			 "flight: ignored",
			 idx);
		return;
	}
	struct sbuf *b = rpc->sbufs[idx];
	struct rpc_peer *p = b->peer;
	sbuf_put(rpc, b);
	if (p && p->in_flight)
		p->in_flight--;
	if (wc->status != DXL_WC_SUCCESS) {
		rpc->st.send_errors++;
		if (p && !p->failed)
			peer_fail(rpc, p, dxl_wc_status_str(wc->status));
	}
}

static void on_recv_done(struct dxl_rpc *rpc, const struct dxl_wc *wc,
			 uint32_t idx)
{
	if (idx >= rpc->cfg.n_recv_bufs) {
		DXL_WARN("rpc: RECV completion for unknown buffer %u: ignored",
			 idx);
		return;
	}
	rpc->n_posted--;
	if (wc->status == DXL_WC_FLUSHED) {
		/* its QP was deleted before the message was polled: the buffer
		 * is back, unread; post it again or the queue shrinks for good
		 * (a ctx being deleted delivers nothing any more) */
		rpc->st.recv_flushed++;
		rpc->repost[rpc->n_repost++] = idx;
		repost_pending(rpc);
		return;
	}
	if (wc->status != DXL_WC_SUCCESS)
		DXL_WARN("rpc: RECV from node %u failed: %s",
			 wc->qp ? dxl_qp_remote_node(wc->qp) : UINT32_MAX,
			 dxl_wc_status_str(wc->status));
	else
		handle_msg(rpc, wc->qp, rpc->rbuf + (size_t)idx * rpc->cfg.max_msg,
			   DXL_MIN(wc->byte_len, rpc->cfg.max_msg));
	rpc->repost[rpc->n_repost++] = idx;
	repost_pending(rpc);
}

/* ---- scheduler hooks ------------------------------------------------------- */

static void hook_wc(void *arg, const struct dxl_wc *wc)
{
	struct dxl_rpc *rpc = arg;
	uint32_t kind = (uint32_t)(wc->wr_id >> 56) & 0xfu;
	uint32_t idx = (uint32_t)wc->wr_id;
	if (kind == KIND_RECV)
		on_recv_done(rpc, wc, idx);
	else if (kind == KIND_SEND)
		on_send_done(rpc, wc, idx);
	else
		DXL_WARN("rpc: completion with unknown wr_id %#llx: ignored",
			 (unsigned long long)wc->wr_id);
}

/*
 * forget_peer -- drop p (dxl_rpc_forget_qp without the lookup)
 */
static void forget_peer(struct dxl_rpc *rpc, struct rpc_peer *p);

/*
 * reclaim_passive -- passive QPs (requests came in on them) whose peer went
 * away: delete them, or every reconnecting client leaves one behind in the
 * ctx (the provider frees only passive QPs the user never saw). Once the QP
 * is down and no SEND of ours is in flight on it (those complete, FLUSHED,
 * first: the completion returns the buffer), and once a poll after the
 * round it was first seen down found the completion queue empty: requests
 * its peer sent before it closed may wait there beyond one poll's batch,
 * and deleting the QP would give their buffers back unserved. Checked
 * every 10 ms, and at every round's end while a down QP waits for that.
 */
static void reclaim_passive(struct dxl_rpc *rpc)
{
	uint64_t now = dxl_now_ns();
	if (now < rpc->next_reclaim_ns)
		return;
	rpc->next_reclaim_ns = now + 10000000ull;
	uint64_t round = dxl_sched_rounds(rpc->s);
	bool emptied = dxl_sched_cq_emptied(rpc->s);
	for (uint32_t b = 0; b < rpc->ht_nb; b++) {
		struct rpc_peer *p = rpc->ht[b], *next;
		for (; p; p = next) {
			next = p->hnext;
			if (!dxl_qp_is_passive(p->qp) ||
			    dxl_qp_state(p->qp) == DXL_QP_RTS || p->in_flight ||
			    p->n_pending)
				continue;
			if (!p->down_round)
				p->down_round = round; /* its last messages may follow */
			if (!emptied || round <= p->down_round) {
				/* look again at the next round's end */
				rpc->next_reclaim_ns = now;
				continue;
			}
			struct dxl_qp *qp = p->qp;
			forget_peer(rpc, p);
			dxl_qp_delete(&qp);
			rpc->st.passive_deleted++;
		}
	}
}

static void hook_round_end(void *arg)
{
	struct dxl_rpc *rpc = arg;
	reclaim_passive(rpc);
	/* a peer can die without any SEND of ours failing (we only wait for
	 * its replies): notice it from the QP state */
	for (struct rpc_peer *p = rpc->pend, *next; p; p = next) {
		next = p->pend_next;
		if (dxl_qp_state(p->qp) != DXL_QP_RTS)
			peer_fail(rpc, p, "QP in the error state");
	}
	dxl_rpc_flush(rpc);
	if (rpc->n_repost)
		repost_pending(rpc);
}

static void hook_co_exit(void *arg, uint32_t co_id)
{
	struct dxl_rpc *rpc = arg;
	struct rpc_co *rc = &rpc->cos[DXL_CO_SLOT(co_id)];
	uint32_t n = 0;
	/* their structs may have lived in the frames the coroutine has
	 * left: drop the records without touching them, so that no reply is
	 * ever written there */
	while (rc->calls) {
		pend_release(rpc, rc->calls);
		n++;
	}
	rc->wait_one = NULL;
	rc->wait_all = false;
	if (n)
		DXL_WARN("rpc: coroutine %u ended with %u calls in flight: "
			 "their replies will be dropped",
			 co_id, n);
	rc->n_failed = 0;
}

/* ---- life cycle ------------------------------------------------------------ */

static void rpc_free(struct dxl_rpc *rpc, bool ctx_alive)
{
	for (uint32_t i = 0; i < rpc->ht_nb; i++) {
		struct rpc_peer *p = rpc->ht[i];
		while (p) {
			struct rpc_peer *next = p->hnext;
			free(p);
			p = next;
		}
	}
	free(rpc->ht);
	bool sends_in_flight = false;
	for (uint32_t i = 0; i < rpc->n_sbufs; i++)
		sends_in_flight |= rpc->sbufs[i]->in_flight;
	struct slab *sl = rpc->slabs;
	while (sl) {
		struct slab *next = sl->next;
		dxl_mr_dereg(&sl->mr);
		if (ctx_alive && sends_in_flight)
			bury(sl->mem); /* a NIC may still read them */
		else
			free(sl->mem);
		free(sl->bufs);
		free(sl);
		sl = next;
	}
	free(rpc->sbufs);
	if (rpc->rmr)
		dxl_mr_dereg(&rpc->rmr);
	if (rpc->rbuf) {
		if (ctx_alive && rpc->n_posted) {
			DXL_WARN("rpc: deleted while its ctx %u is alive: keeping "
				 "its %u posted receive buffers (%zu bytes) "
				 "allocated; delete the ctx first",
				 rpc->ctx_idx, rpc->n_posted, rpc->rbuf_len);
			bury(rpc->rbuf);
		} else {
			free(rpc->rbuf);
		}
	}
	while (rpc->pend_chunks) {
		struct pend_chunk *ch = rpc->pend_chunks;
		rpc->pend_chunks = ch->next;
		free(ch);
	}
	free(rpc->repost);
	free(rpc->scratch);
	free(rpc->cos);
	free(rpc);
}

int dxl_rpc_new(struct dxl_sched *s, const struct dxl_rpc_cfg *cfg,
		struct dxl_rpc **out)
{
	if (!out)
		return dxl_err_set(DXL_E_INVAL, "rpc_new: out is NULL");
	*out = NULL;
	if (!s)
		return dxl_err_set(DXL_E_INVAL, "rpc_new: NULL scheduler");
	struct dxl_ctx *ctx = dxl_sched_ctx(s);
	if (!ctx)
		return dxl_err_set(DXL_E_INVAL,
				   "rpc_new: the scheduler has no fabric ctx");
	if (dxl_sched_user(s))
		return dxl_err_set(DXL_E_EXIST,
				   "rpc_new: the scheduler already has an rpc");
	struct dxl_fabric *f = dxl_ctx_fabric(ctx);
	const struct dxl_fabric_cfg *fc = dxl_fabric_cfg(f);
	struct dxl_rpc_cfg def;
	if (!cfg) {
		dxl_rpc_cfg_init(&def);
		def.max_msg = DXL_MIN(def.max_msg, fc->max_msg & ~7u);
		def.n_recv_bufs = DXL_MIN(def.n_recv_bufs, fc->srq_depth);
		cfg = &def;
	}
	int ret = check_cfg(cfg, fc);
	if (ret)
		return ret;

	struct dxl_rpc *rpc = calloc(1, sizeof(*rpc));
	if (!rpc)
		return dxl_err_set(DXL_E_NOMEM, "rpc_new: out of memory");
	rpc->s = s;
	rpc->ctx = ctx;
	rpc->f = f;
	rpc->ctx_idx = dxl_ctx_idx(ctx);
	rpc->cfg = *cfg;
	rpc->max_payload = cfg->max_msg - DXL_RPC_HDR_SIZE - DXL_RPC_ENTRY_SIZE;
	rpc->n_cos = dxl_sched_n_coroutines(s);
	rpc->ht_nb = 64;
	rpc->ht = calloc(rpc->ht_nb, sizeof(*rpc->ht));
	rpc->cos = calloc(rpc->n_cos, sizeof(*rpc->cos));
	rpc->scratch = malloc(rpc->max_payload);
	rpc->repost = calloc(cfg->n_recv_bufs, sizeof(*rpc->repost));
	rpc->rbuf_len = (size_t)cfg->n_recv_bufs * cfg->max_msg;
	if (!rpc->ht || !rpc->cos || !rpc->scratch || !rpc->repost ||
	    posix_memalign((void **)&rpc->rbuf, 4096, rpc->rbuf_len) != 0) {
		rpc->rbuf = NULL;
		rpc_free(rpc, false);
		return dxl_err_set(DXL_E_NOMEM,
				   "rpc_new: out of memory (%u receive buffers of "
				   "%u bytes)",
				   cfg->n_recv_bufs, cfg->max_msg);
	}
	ret = dxl_mr_reg(f, rpc->rbuf, rpc->rbuf_len, DXL_MR_LOCAL_WRITE,
			 &rpc->rmr);
	if (ret) {
		dxl_err_prefix("rpc_new: registering receive buffers");
		goto err_free;
	}
	ret = sbuf_grow(rpc);
	if (ret)
		goto err_free;
	for (uint32_t i = 0; i < cfg->n_recv_bufs; i++) {
		ret = dxl_ctx_post_recv(ctx, rpc->rbuf + (size_t)i * cfg->max_msg,
					cfg->max_msg, dxl_mr_lkey(rpc->rmr),
					RPC_WRID(KIND_RECV, i));
		if (ret) {
			dxl_err_prefix("rpc_new: posting receive buffer %u of %u",
				       i, cfg->n_recv_bufs);
			goto err_free;
		}
		rpc->n_posted++;
	}
	struct dxl_sched_hooks hooks = {.on_wc = hook_wc,
					.on_round_end = hook_round_end,
					.on_co_exit = hook_co_exit,
					.arg = rpc};
	ret = dxl_sched_set_hooks(s, &hooks);
	if (ret)
		goto err_free;
	dxl_sched_set_user(s, rpc);
	*out = rpc;
	return 0;

err_free:
	rpc_free(rpc, true); /* buffers already posted stay allocated */
	return ret;
}

void dxl_rpc_delete(struct dxl_rpc **rpcp)
{
	if (!rpcp || !*rpcp)
		return;
	struct dxl_rpc *rpc = *rpcp;
	dxl_sched_clear_hooks(rpc->s);
	dxl_sched_set_user(rpc->s, NULL);
	/* the ctx is alive iff the fabric still lists it (it may have been
	 * deleted first, as documented: then only compare the pointer) */
	bool alive = dxl_fabric_ctx_lookup(rpc->f, rpc->ctx_idx) == rpc->ctx;
	if (rpc->n_pending)
		DXL_WARN("rpc: deleted with %llu calls pending",
			 (unsigned long long)rpc->n_pending);
	rpc_free(rpc, alive);
	*rpcp = NULL;
}

int dxl_rpc_register(struct dxl_rpc *rpc, uint16_t handler_id,
		     dxl_rpc_handler_fn fn, void *arg)
{
	if (!rpc || !fn)
		return dxl_err_set(DXL_E_INVAL, "rpc_register: NULL argument");
	if (handler_id >= DXL_RPC_MAX_HANDLERS)
		return dxl_err_set(DXL_E_INVAL,
				   "rpc_register: handler id %u over %d",
				   handler_id, DXL_RPC_MAX_HANDLERS - 1);
	if (rpc->h[handler_id].fn)
		return dxl_err_set(DXL_E_EXIST,
				   "rpc_register: handler %u is already registered",
				   handler_id);
	rpc->h[handler_id].fn = fn;
	rpc->h[handler_id].arg = arg;
	return 0;
}

struct dxl_qp *dxl_rpc_current_qp(const struct dxl_rpc *rpc)
{
	return rpc ? rpc->cur_qp : NULL;
}

size_t dxl_rpc_max_payload(const struct dxl_rpc *rpc)
{
	return rpc->max_payload;
}

void dxl_rpc_stats(const struct dxl_rpc *rpc, struct dxl_rpc_stats *out)
{
	*out = rpc->st;
}

void dxl_rpc_forget_qp(struct dxl_rpc *rpc, struct dxl_qp *qp)
{
	if (!rpc || !qp)
		return;
	struct rpc_peer *p = peer_find(rpc, qp);
	if (p)
		forget_peer(rpc, p);
}

static void forget_peer(struct dxl_rpc *rpc, struct rpc_peer *p)
{
	struct dxl_qp *qp = p->qp;
	peer_reset(rpc, p);
	/* out of the dirty list and the hash table, then free */
	for (struct rpc_peer **pp = &rpc->dirty; *pp; pp = &(*pp)->dirty_next)
		if (*pp == p) {
			*pp = p->dirty_next;
			break;
		}
	for (struct rpc_peer **pp = &rpc->ht[ptr_hash(qp, rpc->ht_nb)]; *pp;
	     pp = &(*pp)->hnext)
		if (*pp == p) {
			*pp = p->hnext;
			break;
		}
	rpc->n_peers--;
	free(p);
}

/* ---- calls ----------------------------------------------------------------- */

/*
 * queue one request entry to qp. In a coroutine, a moment without send
 * buffers is waited out (until deadline_ns); elsewhere it is DXL_E_AGAIN.
 */
static int enqueue(struct dxl_rpc *rpc, struct dxl_qp *qp, uint16_t handler,
		   uint16_t flags, uint64_t req_id, uint32_t reply_cap,
		   const void *req, size_t len, uint64_t deadline_ns,
		   struct rpc_peer **pp)
{
	if (len > rpc->max_payload)
		return dxl_err_set(DXL_E_TOOBIG,
				   "rpc: %zu-byte request to handler %u is over "
				   "the %u-byte limit (max_msg %u); nothing sent",
				   len, handler, rpc->max_payload, rpc->cfg.max_msg);
	for (;;) {
		if (dxl_qp_state(qp) != DXL_QP_RTS)
			return dxl_err_set(DXL_E_UNREACHABLE,
					   "rpc: QP to node %u is in the error "
					   "state",
					   dxl_qp_remote_node(qp));
		struct rpc_peer *p = peer_get(rpc, qp);
		if (!p)
			return dxl_err_set(DXL_E_NOMEM, "rpc: out of memory");
		if (p->failed) /* RTS again: a new QP at the old one's address */
			peer_reset(rpc, p);
		int r = append_entry(rpc, p, handler, flags, 0, req_id, reply_cap,
				     req, (uint32_t)len);
		if (r == 0) {
			*pp = p;
			return 0;
		}
		if (r != DXL_E_AGAIN || !dxl_co_self())
			return r == DXL_E_AGAIN
				       ? dxl_err_set(DXL_E_AGAIN,
						     "rpc: all %u send buffers "
						     "are in use",
						     rpc->n_sbufs)
				       : r;
		/* every buffer is queued or in flight: let the poller
		 * return some (their SEND completions) */
		if (deadline_ns && dxl_now_ns() >= deadline_ns)
			return dxl_err_set(DXL_E_TIMEDOUT,
					   "rpc: no send buffer became free in "
					   "time");
		dxl_rpc_flush(rpc);
		dxl_co_yield();
	}
}

int dxl_rpc_call_async(struct dxl_rpc *rpc, struct dxl_rpc_call *c)
{
	if (!c)
		return dxl_err_set(DXL_E_INVAL, "rpc_call: NULL call");
	c->done = 0;
	c->status = 0;
	c->reply_len = 0;
	memset(&c->priv, 0, sizeof(c->priv));
	int r = 0;
	if (!rpc || !c->qp || (!c->req && c->len) || (!c->reply && c->cap))
		r = dxl_err_set(DXL_E_INVAL,
				"rpc_call: NULL rpc/qp, or NULL buffer with a "
				"length");
	else if (!dxl_co_self() || dxl_co_sched() != rpc->s)
		r = dxl_err_set(DXL_E_STATE,
				"rpc_call: not in a coroutine of the rpc's "
				"scheduler");
	if (r) {
		c->done = 1;
		c->status = r;
		return r;
	}
	uint32_t co_id = dxl_co_id(NULL);
	uint64_t timeout_ms = c->timeout_ms ? c->timeout_ms : rpc->cfg.timeout_ms;
	c->priv.deadline_ns = dxl_now_ns() + timeout_ms * 1000000ull;
	c->priv.req_id = ((uint64_t)co_id << REQ_SEQ_BITS) |
			 (++rpc->seq & REQ_SEQ_MASK);
	uint32_t reply_cap = (uint32_t)DXL_MIN(c->cap, (size_t)rpc->max_payload);
	struct pend *pd = pend_alloc(rpc);
	if (!pd) {
		c->done = 1;
		c->status = dxl_err_set(DXL_E_NOMEM, "rpc_call: out of memory");
		return c->status;
	}
	struct rpc_peer *p = NULL;
	r = enqueue(rpc, c->qp, c->handler_id, DXL_RPC_F_REQUEST, c->priv.req_id,
		    reply_cap, c->req, c->len, c->priv.deadline_ns, &p);
	if (r) {
		pd->peer_next = rpc->free_pends;
		rpc->free_pends = pd;
		c->done = 1;
		c->status = r;
		return r;
	}
	/* pending from now: linked to its coroutine and its QP */
	struct rpc_co *rc = &rpc->cos[DXL_CO_SLOT(co_id)];
	pd->call = c;
	pd->req_id = c->priv.req_id;
	pd->deadline_ns = c->priv.deadline_ns;
	pd->peer = p;
	c->priv.pend = pd;
	pd->co_next = rc->calls;
	if (rc->calls)
		rc->calls->co_prev = pd;
	rc->calls = pd;
	rc->n_pending++;
	pd->peer_next = p->calls;
	if (p->calls)
		p->calls->peer_prev = pd;
	p->calls = pd;
	if (p->n_pending++ == 0)
		pend_link(rpc, p);
	rpc->n_pending++;
	rpc->st.calls++;
	return 0;
}

static int status_msg(const struct dxl_rpc_call *c)
{
	if (c->status >= 0)
		return c->status;
	uint32_t node = dxl_qp_remote_node(c->qp);
	switch (c->status) {
	case DXL_E_TIMEDOUT:
		return dxl_err_set(c->status,
				   "rpc: call to handler %u at node %u timed out",
				   c->handler_id, node);
	case DXL_E_UNREACHABLE:
		return dxl_err_set(c->status,
				   "rpc: call to handler %u: node %u is unreachable",
				   c->handler_id, node);
	default:
		return dxl_err_set(c->status,
				   "rpc: handler %u at node %u answered %s",
				   c->handler_id, node, dxl_errname(c->status));
	}
}

int dxl_rpc_wait(struct dxl_rpc *rpc, struct dxl_rpc_call *c)
{
	if (!rpc || !c)
		return dxl_err_set(DXL_E_INVAL, "rpc_wait: NULL argument");
	if (c->done)
		return status_msg(c);
	if (!dxl_co_self() ||
	    dxl_co_id(NULL) != (uint32_t)(c->priv.req_id >> REQ_SEQ_BITS))
		return dxl_err_set(DXL_E_STATE,
				   "rpc_wait: not in the coroutine that issued "
				   "the call");
	struct rpc_co *rc = &rpc->cos[DXL_CO_SLOT(dxl_co_id(NULL))];
	while (!c->done) {
		rc->wait_one = c;
		int r = dxl_co_suspend(c->priv.deadline_ns);
		rc->wait_one = NULL;
		if (r == DXL_E_TIMEDOUT && !c->done) {
			rpc->st.timeouts++;
			call_finish(rpc, c->priv.pend, DXL_E_TIMEDOUT);
		}
	}
	return status_msg(c);
}

int dxl_rpc_wait_all(struct dxl_rpc *rpc)
{
	if (!rpc)
		return dxl_err_set(DXL_E_INVAL, "rpc_wait_all: NULL rpc");
	if (!dxl_co_self() || dxl_co_sched() != rpc->s)
		return dxl_err_set(DXL_E_STATE,
				   "rpc_wait_all: not in a coroutine of the rpc's "
				   "scheduler");
	struct rpc_co *rc = &rpc->cos[DXL_CO_SLOT(dxl_co_id(NULL))];
	while (rc->n_pending) {
		uint64_t dl = UINT64_MAX;
		for (struct pend *pd = rc->calls; pd; pd = pd->co_next)
			dl = DXL_MIN(dl, pd->deadline_ns);
		rc->wait_all = true;
		int r = dxl_co_suspend(dl);
		rc->wait_all = false;
		if (r == DXL_E_TIMEDOUT) {
			uint64_t now = dxl_now_ns();
			for (struct pend *pd = rc->calls, *next; pd; pd = next) {
				next = pd->co_next;
				if (pd->deadline_ns <= now) {
					rpc->st.timeouts++;
					call_finish(rpc, pd, DXL_E_TIMEDOUT);
				}
			}
		}
	}
	dxl_err_clear();
	int n = (int)rc->n_failed;
	rc->n_failed = 0;
	return n;
}

int dxl_rpc_call(struct dxl_rpc *rpc, struct dxl_qp *qp, uint16_t handler_id,
		 const void *req, size_t len, void *reply, size_t cap,
		 size_t *reply_len)
{
	struct dxl_rpc_call c = {.qp = qp, .handler_id = handler_id, .req = req,
				 .len = len, .reply = reply, .cap = cap};
	if (reply_len)
		*reply_len = 0;
	int r = dxl_rpc_call_async(rpc, &c);
	if (r)
		return r;
	c.priv.sync = 1; /* not counted by dxl_rpc_wait_all */
	r = dxl_rpc_wait(rpc, &c);
	if (reply_len)
		*reply_len = c.reply_len;
	return r;
}

int dxl_rpc_send_noreply(struct dxl_rpc *rpc, struct dxl_qp *qp,
			 uint16_t handler_id, const void *req, size_t len)
{
	if (!rpc || !qp || (!req && len))
		return dxl_err_set(DXL_E_INVAL,
				   "rpc_send_noreply: NULL rpc/qp or request");
	struct rpc_peer *p = NULL;
	int r = enqueue(rpc, qp, handler_id, DXL_RPC_F_NOREPLY, 0, 0, req, len,
			0, &p);
	if (r == 0)
		rpc->st.noreply_sent++;
	return r;
}
