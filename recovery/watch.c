/* watch.c -- how long a value kept elsewhere stayed unchanged, on this host's monotonic clock only (dxl_rcv_watch_*, include/dxl/recovery.h) */
#include <string.h>

#include "common/common.h"
#include "dxl/recovery.h"

uint64_t dxl_rcv_watch_age(struct dxl_rcv_watch *w, uint64_t key, uint64_t stamp,
			   uint64_t value, uint64_t now_ms)
{
	for (uint32_t k = 0; k < w->n; k++) {
		if (w->v[k].key != key)
			continue;
		w->v[k].seen = true;
		if (w->v[k].stamp != stamp || w->v[k].value != value || now_ms < w->v[k].since_ms) {
			/* set again since (or a clock that went back): anew */
			w->v[k].stamp = stamp;
			w->v[k].value = value;
			w->v[k].since_ms = now_ms;
			return 0;
		}
		return now_ms - w->v[k].since_ms;
	}
	if (w->n == DXL_RCV_WATCH_MAX)
		return 0;
	w->v[w->n].key = key;
	w->v[w->n].stamp = stamp;
	w->v[w->n].value = value;
	w->v[w->n].since_ms = now_ms;
	w->v[w->n].seen = true;
	w->n++;
	return 0;
}

void dxl_rcv_watch_sweep(struct dxl_rcv_watch *w)
{
	uint32_t j = 0;
	for (uint32_t k = 0; k < w->n; k++) {
		if (!w->v[k].seen)
			continue;
		w->v[j] = w->v[k];
		w->v[j].seen = false;
		j++;
	}
	w->n = j;
}
