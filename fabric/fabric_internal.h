/* fabric_internal.h -- what fabric.c shares with the providers (tcp, verbs) */
#ifndef DXL_FABRIC_INTERNAL_H
#define DXL_FABRIC_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "common/common.h"
#include "dxl/fabric.h"

/*
 * The generic layer (fabric.c) owns the public objects' common part, checks
 * arguments that do not depend on the provider, and dispatches through a
 * struct dxl_fabric_ops chosen once at dxl_fabric_new (like libpmem2's
 * persist functions and raft's struct raft_io).
 *
 * Providers embed struct dxl_ctx and struct dxl_qp as the FIRST member of
 * their own ctx/qp structs and allocate them; struct dxl_fabric and struct
 * dxl_mr are allocated by fabric.c and carry a provider pointer `prov`.
 */

struct dxl_fabric_ops;

struct dxl_fabric {
	const struct dxl_fabric_ops *ops;
	struct dxl_fabric_cfg cfg;
	char addr[DXL_FABRIC_ADDR_MAX]; /* set by ops->open: actual listen addr */
	void *prov;                     /* provider state */

	pthread_mutex_t lock;           /* protects ctx[] and mrs */
	struct dxl_ctx *ctx[DXL_FABRIC_MAX_CTX];
	struct dxl_mr *mrs;             /* list of registered regions */
};

struct dxl_mr {
	struct dxl_fabric *f;
	void *addr;
	size_t len;
	unsigned access;
	uint32_t lkey;
	uint32_t rkey;
	void *prov;
	dxl_mr_persist_fn persist_fn; /* set before the region is served */
	void *persist_arg;
	struct dxl_mr *next; /* in f->mrs, under f->lock */
};

struct dxl_ctx {
	struct dxl_fabric *f;
	uint32_t idx;
};

struct dxl_qp {
	struct dxl_ctx *ctx;
	uint32_t remote_node;
	uint32_t remote_ctx;
	bool passive;
	enum dxl_qp_state state; /* written by the owner thread only */
	void *user;
};

struct dxl_fabric_ops {
	const char *name;
	/* open: f->cfg is set; create provider state in f->prov, listen, and
	 * write the actual listening address into f->addr */
	int (*open)(struct dxl_fabric *f);
	/* close: called after every ctx and MR has been destroyed */
	void (*close)(struct dxl_fabric *f);

	/* mr_reg: mr->{f,addr,len,access} set; fill lkey, rkey, prov */
	int (*mr_reg)(struct dxl_mr *mr);
	void (*mr_dereg)(struct dxl_mr *mr);
	void (*mr_mark_durable)(struct dxl_mr *mr, const void *addr, size_t len);
	int (*power_fail)(struct dxl_fabric *f, enum dxl_pf_policy p, uint64_t seed);
	int (*power_fail_arm)(struct dxl_fabric *f, enum dxl_pf_policy p,
			      uint64_t seed, uint32_t steps, uint32_t idle_ms);
	size_t (*pending_lines)(struct dxl_fabric *f);

	/* ctx_new: allocate a provider ctx, set ->f and ->idx; fabric.c then
	 * publishes it in f->ctx[idx] (under f->lock) */
	int (*ctx_new)(struct dxl_fabric *f, uint32_t idx, struct dxl_ctx **out);
	/* ctx_delete: destroy every QP of the ctx and free it; called after
	 * fabric.c has removed it from f->ctx[] */
	void (*ctx_delete)(struct dxl_ctx *c);

	int (*qp_connect)(struct dxl_ctx *c, const char *host, uint16_t port,
			  uint32_t remote_ctx, struct dxl_qp **out);
	void (*qp_delete)(struct dxl_qp *qp);
	/* qp_post: the chain has passed dxl_fabric_check_chain() */
	int (*qp_post)(struct dxl_qp *qp, struct dxl_wr *chain,
		       struct dxl_wr **bad);
	int (*post_recv)(struct dxl_ctx *c, void *buf, uint32_t len,
			 uint32_t lkey, uint64_t wr_id);
	int (*poll)(struct dxl_ctx *c, struct dxl_wc *wc, int n);
	/* qp_count: QPs the ctx holds (active, passive, handed over) */
	uint32_t (*qp_count)(struct dxl_ctx *c);
	int (*wait)(struct dxl_ctx *c, int timeout_ms);
};

extern const struct dxl_fabric_ops dxl_fabric_tcp_ops;
extern const struct dxl_fabric_ops dxl_fabric_verbs_ops;

/*
 * dxl_fabric_ctx_lookup -- the ctx with index idx, or NULL. For a provider's
 * listener thread routing an incoming connection. Takes f->lock.
 */
struct dxl_ctx *dxl_fabric_ctx_lookup(struct dxl_fabric *f, uint32_t idx);

/* dxl_fabric_check_chain -- provider-independent checks of a chain */
int dxl_fabric_check_chain(const struct dxl_qp *qp, struct dxl_wr *chain,
			   struct dxl_wr **bad);

#endif /* DXL_FABRIC_INTERNAL_H */
