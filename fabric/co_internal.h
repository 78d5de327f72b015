/* co_internal.h -- what the coroutine scheduler shares with rpc.c and its asm */
#ifndef DXL_CO_INTERNAL_H
#define DXL_CO_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "dxl/co.h"

/* a coroutine id: slot in the low bits, generation above */
#define DXL_CO_SLOT_BITS 12
#define DXL_CO_SLOT(id) ((id) & ((1u << DXL_CO_SLOT_BITS) - 1))
#define DXL_CO_GEN(id) (((id) >> DXL_CO_SLOT_BITS) & 0xfffu)

_Static_assert((1u << DXL_CO_SLOT_BITS) == DXL_CO_MAX,
	       "slot bits must cover DXL_CO_MAX");
_Static_assert(2 * DXL_CO_SLOT_BITS == DXL_CO_ID_BITS,
	       "coroutine id = slot + generation of the same width");

/*
 * The layer above the scheduler (only rpc.c today) plugs in here. All hooks
 * run on the scheduler's thread, outside of any coroutine (on the thread's
 * own stack), so they must not block or yield.
 */
struct dxl_sched_hooks {
	/* a completion whose wr_id has class DXL_WRID_CLASS_RPC */
	void (*on_wc)(void *arg, const struct dxl_wc *wc);
	/* after each round's coroutines have run: flush batches */
	void (*on_round_end)(void *arg);
	/* a coroutine's function returned (slot is still not reusable) */
	void (*on_co_exit)(void *arg, uint32_t co_id);
	void *arg;
};

/* dxl_sched_set_hooks -- install h (copied). DXL_E_EXIST if hooks are set. */
int dxl_sched_set_hooks(struct dxl_sched *s, const struct dxl_sched_hooks *h);
/* dxl_sched_clear_hooks -- remove them */
void dxl_sched_clear_hooks(struct dxl_sched *s);

/* dxl_sched_n_coroutines -- cfg.n_coroutines (slots are 0..n-1) */
uint32_t dxl_sched_n_coroutines(const struct dxl_sched *s);

/* dxl_sched_cq_emptied -- the current round's poll (from a hook) took
 * fewer completions than poll_batch: the ctx held no more at that moment.
 * dxl_sched_rounds -- rounds run so far (the current one included). */
bool dxl_sched_cq_emptied(const struct dxl_sched *s);
uint64_t dxl_sched_rounds(const struct dxl_sched *s);

/* dxl_sched_user -- one pointer slot for the layer above (the rpc object),
 * so only one RPC instance attaches to a scheduler */
void *dxl_sched_user(const struct dxl_sched *s);
void dxl_sched_set_user(struct dxl_sched *s, void *user);

#if defined(__x86_64__) && !defined(DXL_CO_UCONTEXT)
#define DXL_CO_HAVE_ASM 1
/*
 * co_switch_x86_64.S. dxl_co_switch_asm saves the callee-saved state of the
 * caller on its stack, stores its stack pointer in *save_sp, and continues
 * on new_sp (a stack that dxl_co_switch_asm saved, or one prepared as
 * co.c's context_prepare() does). dxl_co_trampoline is never called: it is
 * the return address of a fresh stack and calls r13(r12).
 */
void dxl_co_switch_asm(void **save_sp, void *new_sp);
void dxl_co_trampoline(void);
#else
#define DXL_CO_HAVE_ASM 0
#endif

#endif /* DXL_CO_INTERNAL_H */
