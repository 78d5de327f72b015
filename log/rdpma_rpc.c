/* rdpma_rpc.c -- two-sided PWrite: the owner's CPU copies with ntstores and persists */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/log.h"
#include "dxl/rpc.h"
#include "common/endian.h"

/*
 * Request: u64 addr, u32 rkey, u32 len (little-endian), then len bytes.
 * Reply: no payload; the status says it all (0: persistent).
 */
#define REQ_HDR 16

struct dxl_rdpma_server {
	struct dxl_region *r;
	uint64_t base; /* the MR's first byte, as peers address it */
	uint64_t len;
	uint32_t rkey;
};

static int pwrite_handler(struct dxl_rpc *rpc, const void *req, size_t len,
			  void *reply, size_t cap, size_t *reply_len, void *arg)
{
	struct dxl_rdpma_server *srv = arg;
	const uint8_t *q = req;
	if (len < REQ_HDR)
		return DXL_E_PROTO;
	uint64_t addr = dxl_get_le64(q);
	uint32_t rkey = dxl_get_le32(q + 8), n = dxl_get_le32(q + 12);
	if (n != len - REQ_HDR)
		return DXL_E_PROTO;
	/* the same checks a NIC makes for a one-sided WRITE */
	if (rkey != srv->rkey || addr < srv->base || n > srv->len ||
	    addr - srv->base > srv->len - n)
		return DXL_E_ACCESS;
	void *dst = (uint8_t *)dxl_region_data(srv->r) + (addr - srv->base);
	/* H4/H7: non-temporal stores and a fence (or msync, by mode) */
	dxl_region_memcpy_persist(srv->r, dst, q + REQ_HDR, n);
	return 0;
}

int dxl_rdpma_serve(struct dxl_rpc *rpc, struct dxl_region *r,
		    const struct dxl_mr *mr, struct dxl_rdpma_server **out)
{
	*out = NULL;
	if (!rpc || !r || !mr || dxl_mr_addr(mr) != dxl_region_data(r) ||
	    dxl_mr_len(mr) > dxl_region_data_size(r))
		return dxl_err_set(DXL_E_INVAL,
				   "rdpma serve: the MR must be the region's data area");
	struct dxl_rdpma_server *srv = calloc(1, sizeof(*srv));
	if (!srv)
		return dxl_err_set(DXL_E_NOMEM, "rdpma serve: out of memory");
	struct dxl_mr_desc d;
	dxl_mr_desc(mr, &d);
	srv->r = r;
	srv->base = d.addr;
	srv->len = d.len;
	srv->rkey = d.rkey;
	int ret = dxl_rpc_register(rpc, DXL_RPC_ID_RDPMA_PWRITE, pwrite_handler, srv);
	if (ret) {
		free(srv);
		return ret;
	}
	*out = srv;
	return 0;
}

void dxl_rdpma_server_delete(struct dxl_rdpma_server **srv)
{
	if (srv && *srv) {
		free(*srv);
		*srv = NULL;
	}
}

int dxl_rdpma_pwrite_2s(struct dxl_rpc *rpc, struct dxl_qp *qp,
			const struct dxl_fatptr *fp, uint64_t off,
			const void *src, uint32_t len)
{
	if (!fp || !len || off > fp->len || len > fp->len - off)
		return dxl_err_set(DXL_E_INVAL,
				   "rdpma pwrite_2s: [%llu, +%u) outside the %u-byte object",
				   (unsigned long long)off, len, fp ? fp->len : 0);
	if ((size_t)len + REQ_HDR > dxl_rpc_max_payload(rpc))
		return dxl_err_set(DXL_E_TOOBIG,
				   "rdpma pwrite_2s: %u bytes over the RPC limit %zu",
				   len, dxl_rpc_max_payload(rpc) - REQ_HDR);
	uint8_t *req = malloc((size_t)len + REQ_HDR);
	if (!req)
		return dxl_err_set(DXL_E_NOMEM, "rdpma pwrite_2s: out of memory");
	dxl_put_le64(req, fp->addr + off);
	dxl_put_le32(req + 8, fp->rkey);
	dxl_put_le32(req + 12, len);
	memcpy(req + REQ_HDR, src, len);
	int ret = dxl_rpc_call(rpc, qp, DXL_RPC_ID_RDPMA_PWRITE, req,
			       (size_t)len + REQ_HDR, NULL, 0, NULL);
	free(req);
	if (ret == DXL_E_ACCESS)
		return dxl_err_set(ret, "rdpma pwrite_2s: the owner refused [%#llx, +%u) (rkey %#x)",
				   (unsigned long long)(fp->addr + off), len, fp->rkey);
	return ret;
}
