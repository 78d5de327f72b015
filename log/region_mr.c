/* region_mr.c -- a region served over the fabric: its persist function on the MR */
#include "common/common.h"
#include "dxl/fabric.h"
#include "dxl/log.h"

/*
 * Kept apart from region.c so that persistent memory (region.c) does not
 * depend on the fabric: the parsers' fuzz targets link region.c alone.
 */

static void region_persist_cb(void *arg, const void *addr, size_t len)
{
	dxl_region_persist(arg, addr, len);
}

int dxl_region_bind_mr(struct dxl_region *r, struct dxl_mr *mr)
{
	if (!r || !mr || dxl_mr_addr(mr) != dxl_region_data(r) ||
	    dxl_mr_len(mr) > dxl_region_data_size(r))
		return dxl_err_set(DXL_E_INVAL,
				   "region bind: the MR is not the data area of %s",
				   r ? dxl_region_path(r) : "(null)");
	dxl_mr_set_persist_fn(mr, region_persist_cb, r);
	return 0;
}

