/* hlc.c -- hybrid logical clock for commit timestamps (48-bit ms + 16-bit logical) */
#include <stdatomic.h>

#include "common/common.h"
#include "dxl/log.h"

#define LOGICAL_MAX ((1u << DXL_HLC_LOGICAL_BITS) - 1)
#define PHYS_MAX ((1ull << (64 - DXL_HLC_LOGICAL_BITS)) - 1)

void dxl_hlc_init(struct dxl_hlc *c)
{
	atomic_init((_Atomic uint64_t *)&c->last, 0);
	c->wall_ms = NULL;
}

static uint64_t wall(const struct dxl_hlc *c)
{
	uint64_t ms = c->wall_ms ? c->wall_ms() : dxl_wall_ms();
	return ms > PHYS_MAX ? PHYS_MAX : ms;
}

uint64_t dxl_hlc_now(struct dxl_hlc *c)
{
	_Atomic uint64_t *last = (_Atomic uint64_t *)&c->last;
	uint64_t pt = DXL_HLC_MAKE(wall(c), 0);
	uint64_t old = atomic_load_explicit(last, memory_order_relaxed);
	uint64_t next;
	do {
		/* ahead of the wall clock (or it stepped back): count logically;
		 * a full logical field carries into the physical part, which
		 * keeps timestamps strictly increasing */
		next = pt > old ? pt : old + 1;
		DXL_ASSERTF(next > old, "hybrid clock overflow at %llu",
			    (unsigned long long)old);
		/* relaxed is enough: the CAS orders timestamps of this clock
		 * among themselves, nothing else is published through it */
	} while (!atomic_compare_exchange_weak_explicit(
		last, &old, next, memory_order_relaxed, memory_order_relaxed));
	return next;
}

void dxl_hlc_observe(struct dxl_hlc *c, uint64_t ts)
{
	_Atomic uint64_t *last = (_Atomic uint64_t *)&c->last;
	uint64_t old = atomic_load_explicit(last, memory_order_relaxed);
	while (ts > old &&
	       !atomic_compare_exchange_weak_explicit(last, &old, ts,
						      memory_order_relaxed,
						      memory_order_relaxed))
		;
}
