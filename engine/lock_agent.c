/* lock_agent.c -- the owner's own lock-word changes through its NIC (a loopback QP) */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/engine.h"

/*
 * In DXL_LOCKS_NIC mode the lock words are the NIC's (thesis B.10.7, seed
 * 000 L1426): an RDMA atomic is atomic only against other RDMA atomics of
 * the same device, not against the CPU's stores or CAS (rxe runs an atomic
 * as a locked load and store on a kernel CPU; hardware NICs keep their own
 * lock tables). So when the owner itself must change a lock word (an insert
 * created locked, locks of transactions in doubt, a dead coordinator's
 * locks) it does what a coordinator does: a fabric CAS, here on a QP from a
 * ctx of its own fabric to that same ctx.
 *
 * One agent per fabric; any thread may call dxl_lock_agent_cas, one at a
 * time (a mutex): the ctx and its QPs are used by one thread at a time,
 * which is what the fabric asks of a ctx's owner.
 */

struct dxl_lock_agent {
	struct dxl_fabric *f;
	uint32_t ctx_idx;
	pthread_mutex_t mu;
	/* under mu */
	struct dxl_ctx *ctx;
	struct dxl_qp *qp;
	struct dxl_mr *mr;
	uint64_t *res; /* the CAS's old value lands here (registered) */
	uint64_t ops, reconnects;
	int fail_next; /* testing: enum dxl_lock_agent_fault of the next CAS */
};

/* (re)connect the loopback QP; caller holds mu */
static int agent_qp(struct dxl_lock_agent *a)
{
	if (a->qp && dxl_qp_state(a->qp) == DXL_QP_RTS)
		return 0;
	if (a->qp) {
		dxl_qp_delete(&a->qp);
		a->reconnects++;
	}
	int ret = dxl_qp_connect(a->ctx, dxl_fabric_addr(a->f), a->ctx_idx, &a->qp);
	if (ret)
		dxl_err_prefix("lock agent: loopback QP");
	return ret;
}

int dxl_lock_agent_new(struct dxl_fabric *f, uint32_t ctx_idx,
		       struct dxl_lock_agent **out)
{
	if (!f || !out)
		return dxl_err_set(DXL_E_INVAL, "lock agent: NULL argument");
	*out = NULL;
	struct dxl_lock_agent *a = calloc(1, sizeof(*a));
	if (!a)
		return dxl_err_set(DXL_E_NOMEM, "lock agent: out of memory");
	a->f = f;
	a->ctx_idx = ctx_idx;
	pthread_mutex_init(&a->mu, NULL);
	int ret;
	if (posix_memalign((void **)&a->res, 64, 64)) {
		a->res = NULL;
		ret = dxl_err_set(DXL_E_NOMEM, "lock agent: out of memory");
		goto err;
	}
	memset(a->res, 0, 64);
	if ((ret = dxl_mr_reg(f, a->res, 64, DXL_MR_LOCAL_WRITE, &a->mr)) ||
	    (ret = dxl_ctx_new(f, ctx_idx, &a->ctx)))
		goto err;
	pthread_mutex_lock(&a->mu);
	ret = agent_qp(a);
	pthread_mutex_unlock(&a->mu);
	if (ret)
		goto err;
	*out = a;
	return 0;
err:
	dxl_lock_agent_delete(&a);
	return ret;
}

void dxl_lock_agent_delete(struct dxl_lock_agent **ap)
{
	if (!ap || !*ap)
		return;
	struct dxl_lock_agent *a = *ap;
	dxl_qp_delete(&a->qp);
	dxl_ctx_delete(&a->ctx);
	dxl_mr_dereg(&a->mr);
	free(a->res);
	pthread_mutex_destroy(&a->mu);
	free(a);
	*ap = NULL;
}

void dxl_lock_agent_fail_next(struct dxl_lock_agent *a, enum dxl_lock_agent_fault f)
{
	pthread_mutex_lock(&a->mu);
	a->fail_next = (int)f;
	pthread_mutex_unlock(&a->mu);
}

int dxl_lock_agent_cas(struct dxl_lock_agent *a, uint64_t raddr, uint32_t rkey,
		       uint64_t cmp, uint64_t swp, uint64_t *old)
{
	pthread_mutex_lock(&a->mu);
	int ret = agent_qp(a);
	if (ret)
		goto out;
	int fault = a->fail_next;
	a->fail_next = DXL_LOCK_AGENT_OK;
	if (fault == DXL_LOCK_AGENT_LOST_BEFORE) {
		/* as if the CAS never reached the NIC and the QP failed */
		dxl_qp_delete(&a->qp);
		ret = dxl_err_set(DXL_E_UNREACHABLE, "lock agent: CAS at %#llx: %s (injected)",
				  (unsigned long long)raddr,
				  dxl_wc_status_str(DXL_WC_PEER_UNREACHABLE));
		goto out;
	}
	struct dxl_wr w = {.wr_id = 1, .op = DXL_WR_CAS, .flags = DXL_WR_SIGNALED,
			   .local = a->res, .len = 8, .lkey = dxl_mr_lkey(a->mr),
			   .remote_addr = raddr, .rkey = rkey, .compare_add = cmp,
			   .swap = swp};
	if ((ret = dxl_qp_post(a->qp, &w, NULL))) {
		dxl_err_prefix("lock agent: CAS at %#llx", (unsigned long long)raddr);
		goto out;
	}
	/* the QP fails within the fabric's timeout if the NIC does not
	 * answer, so the completion comes in any case; the wait is bounded
	 * all the same (a caller holds the store's table mutex): past twice
	 * the timeout the QP is given up (the CAS executed or not: the next
	 * call reconnects, which fences it off, docs/fabric.md "Failures") */
	uint32_t tmo = dxl_fabric_cfg(a->f)->timeout_ms;
	uint64_t deadline = dxl_now_ms() + 2ull * tmo + 1000;
	struct dxl_wc wc;
	int n;
	while ((n = dxl_ctx_poll(a->ctx, &wc, 1)) == 0) {
		if (dxl_now_ms() >= deadline) {
			dxl_qp_delete(&a->qp);
			ret = dxl_err_set(DXL_E_TIMEDOUT,
					  "lock agent: CAS at %#llx: no completion in %u ms "
					  "(outcome unknown)",
					  (unsigned long long)raddr, 2 * tmo + 1000);
			goto out;
		}
		dxl_ctx_wait(a->ctx, 100);
	}
	if (n < 0) {
		ret = n;
		goto out;
	}
	if (wc.status == DXL_WC_SUCCESS && fault == DXL_LOCK_AGENT_LOST_AFTER) {
		/* as if the CAS executed and its answer was lost with the QP */
		dxl_qp_delete(&a->qp);
		a->ops++;
		ret = dxl_err_set(DXL_E_UNREACHABLE, "lock agent: CAS at %#llx: %s (injected, "
				  "executed)", (unsigned long long)raddr,
				  dxl_wc_status_str(DXL_WC_PEER_UNREACHABLE));
		goto out;
	}
	if (wc.status == DXL_WC_SUCCESS) {
		*old = __atomic_load_n(a->res, __ATOMIC_ACQUIRE);
		a->ops++;
	} else if (wc.status == DXL_WC_REM_ACCESS_ERR) {
		ret = dxl_err_set(DXL_E_ACCESS,
				  "lock agent: CAS at %#llx (rkey %#x): remote access error",
				  (unsigned long long)raddr, rkey);
	} else {
		ret = dxl_err_set(DXL_E_UNREACHABLE, "lock agent: CAS at %#llx: %s",
				  (unsigned long long)raddr, dxl_wc_status_str(wc.status));
	}
out:
	pthread_mutex_unlock(&a->mu);
	return ret;
}

uint64_t dxl_lock_agent_ops(struct dxl_lock_agent *a)
{
	pthread_mutex_lock(&a->mu);
	uint64_t n = a->ops;
	pthread_mutex_unlock(&a->mu);
	return n;
}
