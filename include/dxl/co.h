/* co.h -- per-thread coroutine scheduler that routes fabric completions (R2 CO) */
#ifndef DXL_CO_H
#define DXL_CO_H

#include <stddef.h>
#include <stdint.h>

#include "dxl/err.h"
#include "dxl/fabric.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * R2 runs a handful of coroutines on every worker thread; a coroutine posts
 * its network requests, yields, and is resumed when their completions (or
 * its RPC replies) have arrived, so one thread keeps many requests in flight
 * (CO and OR, seed 000 L334-343).
 *
 *   struct dxl_sched  one per worker thread: N coroutine slots with fixed,
 *                     mmap'ed stacks (a PROT_NONE guard page below each), a
 *                     ready queue run round-robin, and a poller that reaps
 *                     the thread's fabric ctx and routes every completion
 *                     to the coroutine named in its wr_id.
 *   struct dxl_co     one coroutine. Only the scheduler's thread may touch
 *                     it; every dxl_co_* call acts on the calling coroutine.
 *
 * A scheduling round (dxl_sched_run_once): poll the ctx once and route what
 * it returns (RPC requests are served here, see rpc.h); wake coroutines whose
 * deadline passed; run every coroutine that was ready at the start of the
 * round once, in FIFO order; flush the RPC batches; then, if nothing is
 * ready, block in dxl_ctx_wait (or sleep until the next deadline) instead of
 * spinning.
 *
 * Context switches: hand-written x86-64 assembly that saves only the
 * callee-saved registers (rbx, rbp, r12-r15, rsp, MXCSR, x87 control word),
 * or the portable ucontext path (swapcontext: one sigprocmask system call per
 * switch). The implementation is chosen per scheduler at run time; builds on
 * other architectures, or with -DDXL_CO_UCONTEXT, only have ucontext. Under
 * ASan and TSan the switches are annotated (fiber APIs), so both sanitizers
 * follow the stacks.
 *
 * Threads: a scheduler and its coroutines belong to the thread that runs it.
 * Only dxl_sched_stop() may be called from another thread.
 */

struct dxl_sched;
struct dxl_co;

#define DXL_CO_MAX 4096 /* coroutine slots per scheduler */

enum dxl_co_switch {
	DXL_CO_SWITCH_DEFAULT = 0,  /* asm where built, else ucontext */
	DXL_CO_SWITCH_ASM = 1,      /* x86-64 assembly (callee-saved only) */
	DXL_CO_SWITCH_UCONTEXT = 2, /* getcontext/makecontext/swapcontext */
};

struct dxl_sched_cfg {
	uint32_t n_coroutines;          /* slots; default 16; 1..DXL_CO_MAX */
	/* usable bytes per stack, rounded up to the page size (a guard page
	 * is added below); default 128 KiB; 16 KiB..64 MiB. Stacks are mapped
	 * lazily at the first spawn into a slot and reused afterwards. */
	size_t stack_size;
	enum dxl_co_switch switch_impl; /* default DXL_CO_SWITCH_DEFAULT */
	uint32_t poll_batch;            /* completions per dxl_ctx_poll; default 64; 1..4096 */
	uint32_t wc_buf;                /* initial per-coroutine completion buffer
					   (grows on demand); default 16; 1..65536 */
	/* longest single block when idle, so that dxl_sched_stop() from
	 * another thread is noticed; default 100; 1..60000 */
	uint32_t idle_wait_ms;
};

/* dxl_sched_cfg_init -- fill cfg with the defaults above */
void dxl_sched_cfg_init(struct dxl_sched_cfg *cfg);

/* dxl_co_switch_supported -- 1 if this build has that switch, else 0
 * (DXL_CO_SWITCH_DEFAULT is always supported) */
int dxl_co_switch_supported(enum dxl_co_switch impl);

/* dxl_co_switch_name -- "asm", "ucontext" ("default" resolves to one) */
const char *dxl_co_switch_name(enum dxl_co_switch impl);

/*
 * dxl_sched_new -- create a scheduler for the calling thread.
 *
 * cfg    the configuration; NULL = defaults
 * ctx    the thread's fabric context whose completions the scheduler polls
 *        and routes, or NULL for a scheduler without a fabric (completions
 *        can then only come from dxl_sched_deliver)
 * out    the new scheduler
 *
 * Returns 0. Errors: DXL_E_INVAL (NULL out, cfg value out of range),
 * DXL_E_NOTSUP (switch_impl not built in this binary), DXL_E_NOMEM.
 */
int dxl_sched_new(const struct dxl_sched_cfg *cfg, struct dxl_ctx *ctx,
		  struct dxl_sched **out);

/*
 * dxl_sched_delete -- free the scheduler and every stack; coroutines that
 * have not finished are abandoned without being resumed (nothing on their
 * stacks is unwound). Must not be called from one of its coroutines, nor
 * while an rpc object still uses it. *s = NULL; NULL or *s == NULL is a no-op.
 */
void dxl_sched_delete(struct dxl_sched **s);

/* dxl_sched_ctx -- the ctx given to dxl_sched_new (may be NULL) */
struct dxl_ctx *dxl_sched_ctx(const struct dxl_sched *s);

/* dxl_sched_switch_impl -- the switch in use (never _DEFAULT) */
enum dxl_co_switch dxl_sched_switch_impl(const struct dxl_sched *s);

typedef void (*dxl_co_fn)(void *arg);

/*
 * dxl_sched_spawn -- start fn(arg) in a free coroutine slot. The coroutine
 * is ready and first runs in the next round. It ends when fn returns; its
 * slot (and stack) is then reused by later spawns. May be called from a
 * coroutine or an RPC handler of the same scheduler.
 *
 * id_out  if not NULL, receives the coroutine id (see dxl_co_id)
 *
 * Returns 0. Errors: DXL_E_INVAL (NULL s or fn), DXL_E_AGAIN (all
 * n_coroutines slots are live), DXL_E_NOMEM (mapping the stack failed).
 */
int dxl_sched_spawn(struct dxl_sched *s, dxl_co_fn fn, void *arg,
		    uint32_t *id_out);

/*
 * dxl_sched_run_once -- one scheduling round (see the top of this file).
 *
 * timeout_ms  the longest time to block when nothing is ready: 0 = never
 *             block, -1 = up to cfg.idle_wait_ms (or until the next
 *             deadline); blocking is also capped by cfg.idle_wait_ms.
 *
 * Returns the number of events handled (completions routed plus coroutines
 * run; 0 if it only waited). Errors: DXL_E_STATE (called from a coroutine,
 * or every live coroutine is suspended with no deadline and there is no ctx:
 * nothing could ever wake them), DXL_E_INVAL (NULL s), or the error of
 * dxl_ctx_poll.
 */
int dxl_sched_run_once(struct dxl_sched *s, int timeout_ms);

/*
 * dxl_sched_run -- run rounds until every coroutine has finished or
 * dxl_sched_stop() was called (the stop request is consumed).
 * Returns 0. Errors: as dxl_sched_run_once.
 */
int dxl_sched_run(struct dxl_sched *s);

/*
 * dxl_sched_serve -- run rounds until dxl_sched_stop(), even when no
 * coroutine is live: a server whose work arrives as RPCs.
 * Returns 0. Errors: as dxl_sched_run_once.
 */
int dxl_sched_serve(struct dxl_sched *s);

/* dxl_sched_stop -- make run/serve return after the current round. Any
 * thread (noticed within cfg.idle_wait_ms when called from another thread). */
void dxl_sched_stop(struct dxl_sched *s);

/* dxl_sched_live -- coroutines spawned and not yet finished */
uint32_t dxl_sched_live(const struct dxl_sched *s);

/*
 * dxl_sched_deliver -- route wc exactly as if dxl_ctx_poll had returned it:
 * to the coroutine named in wc->wr_id (see dxl_co_wrid), or to the RPC layer.
 * For tests, and for code that produces completions of its own.
 * Returns 0. Errors: DXL_E_INVAL (NULL argument), DXL_E_NOENT (no live
 * coroutine or layer owns that wr_id; the completion is counted as stale
 * or unrouted and dropped).
 */
int dxl_sched_deliver(struct dxl_sched *s, const struct dxl_wc *wc);

struct dxl_sched_stats {
	uint64_t spawned;     /* coroutines started */
	uint64_t finished;    /* coroutines whose function returned */
	uint64_t switches;    /* context switches (two per resume) */
	uint64_t rounds;      /* dxl_sched_run_once calls */
	uint64_t polls;       /* dxl_ctx_poll calls */
	uint64_t wc_routed;   /* completions handed to a coroutine or the RPC layer */
	uint64_t wc_stale;    /* completions for a finished/reused coroutine: dropped */
	uint64_t wc_unrouted; /* completions with a wr_id of no known class: dropped */
	uint64_t idle_waits;  /* times the scheduler blocked with nothing ready */
	uint64_t timeouts;    /* suspensions ended by their deadline */
};

/* dxl_sched_stats -- copy the counters */
void dxl_sched_stats(const struct dxl_sched *s, struct dxl_sched_stats *out);

/*
 * dxl_co_switch_cost -- a diagnostic: the cost of one bare context switch
 * with implementation impl, measured on the calling thread by switching
 * iters times between it and a coroutine of a temporary scheduler (no
 * scheduling round in between; sanitizer annotations included when built
 * with them). Used by dxl-bench-co; never call it from a coroutine.
 *
 * ns_per_switch  receives the mean wall-clock time of one switch
 *
 * Returns 0. Errors: DXL_E_INVAL (iters 0 or NULL output), DXL_E_NOTSUP
 * (impl not built), DXL_E_STATE (called from a coroutine), DXL_E_NOMEM.
 */
int dxl_co_switch_cost(enum dxl_co_switch impl, uint64_t iters,
		       double *ns_per_switch);

/* ---- inside a coroutine --------------------------------------------------- */

/* dxl_co_self -- the calling coroutine, or NULL outside of one (e.g. in an
 * RPC handler, which runs in the poller) */
struct dxl_co *dxl_co_self(void);

/* dxl_co_sched -- the scheduler running on this thread right now, or NULL */
struct dxl_sched *dxl_co_sched(void);

/*
 * dxl_co_id -- a coroutine's id: slot index (low 12 bits) and a generation
 * (next 12 bits) that changes at each spawn into the slot, so completions
 * and wake-ups meant for an earlier occupant are recognised as stale.
 * co == NULL means the calling coroutine (then 0 outside of one).
 */
uint32_t dxl_co_id(const struct dxl_co *co);

/*
 * dxl_co_yield -- let the other ready coroutines (and the poller) run; the
 * caller is ready again and runs in the next round.
 * Returns 0. Errors: DXL_E_STATE (not in a coroutine).
 */
int dxl_co_yield(void);

/*
 * dxl_co_suspend -- park the calling coroutine until dxl_co_resume() names
 * it or the deadline passes. A resume that arrives while the coroutine is
 * not parked is remembered (one token), so the next suspend returns at once;
 * callers therefore re-check their condition in a loop.
 *
 * deadline_ns  absolute dxl_now_ns() time; 0 = no deadline
 *
 * Returns 0 (resumed). Errors: DXL_E_TIMEDOUT (deadline passed),
 * DXL_E_STATE (not in a coroutine).
 */
int dxl_co_suspend(uint64_t deadline_ns);

/*
 * dxl_co_resume -- make coroutine co_id of s ready (or give it the wake-up
 * token, see dxl_co_suspend). From a coroutine, an RPC handler or the thread
 * that runs s.
 * Returns 0. Errors: DXL_E_INVAL (NULL s), DXL_E_NOENT (no live coroutine
 * with that id: finished, or the slot was reused).
 */
int dxl_co_resume(struct dxl_sched *s, uint32_t co_id);

/* dxl_co_sleep_ms -- suspend for ms milliseconds (other coroutines run).
 * Returns 0. Errors: DXL_E_STATE (not in a coroutine). */
int dxl_co_sleep_ms(uint32_t ms);

/*
 * Routing completions: the scheduler looks at the top 4 bits of a wr_id.
 * Class 1 (DXL_WRID_CLASS_CO) is a coroutine's request: bits 59..36 carry the
 * coroutine id, bits 35..0 a tag of the caller's choice (e.g. an index into
 * its read set). Class 2 belongs to the RPC layer. Completions of any other
 * class (0 included) are counted as unrouted and dropped with a warning.
 *
 * Put dxl_co_wrid(tag) into EVERY request of a coroutine, signalled or not:
 * an unsignalled request that fails still produces an error completion, and
 * it must reach its coroutine.
 */
#define DXL_WRID_CLASS_SHIFT 60
#define DXL_WRID_CLASS_CO 1ull
#define DXL_WRID_CLASS_RPC 2ull
#define DXL_CO_ID_BITS 24
#define DXL_CO_WRID_TAG_BITS 36
#define DXL_CO_WRID_TAG_MAX ((1ull << DXL_CO_WRID_TAG_BITS) - 1)

/* dxl_co_wrid_make -- the wr_id of request `tag` of coroutine co_id (tag is
 * truncated to DXL_CO_WRID_TAG_BITS bits) */
static inline uint64_t dxl_co_wrid_make(uint32_t co_id, uint64_t tag)
{
	return (DXL_WRID_CLASS_CO << DXL_WRID_CLASS_SHIFT) |
	       ((uint64_t)(co_id & ((1u << DXL_CO_ID_BITS) - 1))
		<< DXL_CO_WRID_TAG_BITS) |
	       (tag & DXL_CO_WRID_TAG_MAX);
}

/* dxl_co_wrid_decode -- split a coroutine wr_id; returns 0, or DXL_E_INVAL
 * (without setting a message) when wr_id is not of class DXL_WRID_CLASS_CO */
static inline int dxl_co_wrid_decode(uint64_t wr_id, uint32_t *co_id,
				     uint64_t *tag)
{
	if ((wr_id >> DXL_WRID_CLASS_SHIFT) != DXL_WRID_CLASS_CO)
		return DXL_E_INVAL;
	if (co_id)
		*co_id = (uint32_t)(wr_id >> DXL_CO_WRID_TAG_BITS) &
			 ((1u << DXL_CO_ID_BITS) - 1);
	if (tag)
		*tag = wr_id & DXL_CO_WRID_TAG_MAX;
	return 0;
}

/* dxl_co_wrid -- dxl_co_wrid_make(id of the calling coroutine, tag); 0 (an
 * unrouted wr_id) outside of a coroutine */
uint64_t dxl_co_wrid(uint64_t tag);

/*
 * dxl_co_wait_completions -- wait until k completions routed to the calling
 * coroutine are buffered, then hand out (and forget) the k oldest, in
 * arrival order. Completions that arrived before the call count, so a
 * coroutine posts, then waits, without racing the poller.
 *
 * k           how many; 1..65536
 * wc          if not NULL, receives the k completions (status, wr_id, ...)
 * timeout_ms  -1 = no limit (the fabric itself reports a dead peer as an
 *             error completion within its timeout_ms), else milliseconds
 *
 * Returns how many of the k completions have a status other than
 * DXL_WC_SUCCESS (0 = all succeeded); an error completion is never dropped.
 * Errors (nothing handed out): DXL_E_STATE (not in a coroutine),
 * DXL_E_INVAL (k out of range), DXL_E_TIMEDOUT (fewer than k arrived in
 * time; those that did stay buffered).
 */
int dxl_co_wait_completions(int k, struct dxl_wc *wc, int timeout_ms);

/* dxl_co_completions_buffered -- completions buffered for the calling
 * coroutine and not yet handed out (0 outside of a coroutine) */
int dxl_co_completions_buffered(void);

#ifdef __cplusplus
}
#endif
#endif /* DXL_CO_H */
