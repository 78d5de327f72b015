/* writeset_internal.h -- walking a validated write set without copying its entries */
#ifndef DXL_WRITESET_INTERNAL_H
#define DXL_WRITESET_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dxl/engine.h"

struct dxl_ws_iter {
	const uint8_t *p;
	size_t len;
	size_t off;
	uint32_t n;
	uint32_t i;
};

/* validate the whole payload (as dxl_writeset_decode); n or DXL_E_CORRUPT */
int dxl_ws_iter_init(struct dxl_ws_iter *it, const void *buf, size_t len);
/* 1 and the next entry (value points into the payload), 0 after the last */
int dxl_ws_iter_next(struct dxl_ws_iter *it, struct dxl_ws_entry *e);

#endif /* DXL_WRITESET_INTERNAL_H */
