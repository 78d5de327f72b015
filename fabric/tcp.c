/* tcp.c -- placeholder of the tcp provider (being written) */
#include "fabric/fabric_internal.h"

static int stub_open(struct dxl_fabric *f)
{
	return dxl_err_set(DXL_E_NOTSUP, "fabric: the tcp provider is not built yet");
}

static void stub_close(struct dxl_fabric *f)
{
}

const struct dxl_fabric_ops dxl_fabric_tcp_ops = {
	.name = "tcp",
	.open = stub_open,
	.close = stub_close,
};
