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
	c->max_ahead_ms = 0;
}

static uint64_t wall(const struct dxl_hlc *c)
{
	uint64_t ms = c->wall_ms ? c->wall_ms() : dxl_wall_ms();
	return ms > PHYS_MAX ? PHYS_MAX : ms;
}

uint64_t dxl_hlc_max_ts(const struct dxl_hlc *c)
{
	uint64_t ahead = c->max_ahead_ms ? c->max_ahead_ms : DXL_HLC_MAX_AHEAD_MS;
	uint64_t ms = wall(c);
	ms = ms > PHYS_MAX - ahead ? PHYS_MAX : ms + ahead;
	return DXL_HLC_MAKE(ms, LOGICAL_MAX);
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
		 * keeps timestamps strictly increasing. `last` only goes
		 * beyond the wall clock by what dxl_hlc_observe accepted (at
		 * most max_ahead_ms) plus this clock's own counting, so it
		 * cannot reach the largest timestamp before the year 10000 */
		next = pt > old ? pt : old + 1;
		DXL_ASSERTF(next > old, "hybrid clock overflow at %llu",
			    (unsigned long long)old);
		/* relaxed is enough: the CAS orders timestamps of this clock
		 * among themselves, nothing else is published through it */
	} while (!atomic_compare_exchange_weak_explicit(
		last, &old, next, memory_order_relaxed, memory_order_relaxed));
	return next;
}

int dxl_hlc_observe(struct dxl_hlc *c, uint64_t ts)
{
	int ret = 0;
	uint64_t max = dxl_hlc_max_ts(c);
	if (ts > max) {
		/* another node's clock jumped forward (or the value is
		 * garbage): taking it would make every later timestamp of this
		 * clock, and of every clock that observes ours, jump with it */
		ret = dxl_err_set(DXL_E_INVAL,
				  "hybrid clock: timestamp %llu is %llu ms ahead of this host's clock (at most %u ms accepted): not taken; the clock goes to %llu",
				  (unsigned long long)ts,
				  (unsigned long long)(DXL_HLC_PHYS(ts) - wall(c)),
				  c->max_ahead_ms ? c->max_ahead_ms : DXL_HLC_MAX_AHEAD_MS,
				  (unsigned long long)max);
		/* at most one warning a second: a peer whose clock jumped may
		 * be observed on every message */
		static _Atomic uint64_t warned_ms;
		uint64_t now = dxl_now_ms(), w = atomic_load(&warned_ms);
		if ((now - w >= 1000 || !w) &&
		    atomic_compare_exchange_strong(&warned_ms, &w, now ? now : 1))
			DXL_WARN("event=hlc_observe_clamped msg=\"%s\"", dxl_errmsg());
		ts = max;
	}
	_Atomic uint64_t *last = (_Atomic uint64_t *)&c->last;
	uint64_t old = atomic_load_explicit(last, memory_order_relaxed);
	while (ts > old &&
	       !atomic_compare_exchange_weak_explicit(last, &old, ts,
						      memory_order_relaxed,
						      memory_order_relaxed))
		;
	return ret;
}
