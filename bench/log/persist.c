/* persist.c -- the local cost of making a store durable, per durability mode */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/log/bench_log.h"
#include "common/common.h"

int bl_persist_cost(const char *dir, enum dxl_durability mode, uint32_t size,
		    uint32_t iters, double *ns_per_op, char *why, size_t whycap)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/persist-%s-%u.region", dir,
		 dxl_durability_name(mode), size);
	unlink(path);
	struct dxl_region_id id = {.cluster = "bench", .node_id = 1, .kind = 9};
	struct dxl_region *r;
	uint64_t area = 16ull << 20;
	int ret = dxl_region_create(path, area, mode, &id, &r);
	if (ret) {
		snprintf(why, whycap, "%s", dxl_errmsg());
		return ret;
	}
	uint8_t *d = dxl_region_data(r);
	uint8_t *src = malloc(size);
	memset(src, 0x5a, size);
	uint64_t slots = area / DXL_ALIGN_UP(size, 4096u);
	uint64_t t0 = dxl_now_ns();
	for (uint32_t i = 0; i < iters; i++) {
		/* a fresh page each time: msync has real work every time */
		uint8_t *dst = d + (i % slots) * DXL_ALIGN_UP(size, 4096u);
		dxl_region_memcpy_persist(r, dst, src, size);
	}
	*ns_per_op = (double)(dxl_now_ns() - t0) / iters;
	free(src);
	dxl_region_close(&r);
	unlink(path);
	return 0;
}
