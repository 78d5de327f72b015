/* co.c -- coroutine scheduler: stacks, context switches, completion routing */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "common/common.h"
#include "fabric/co_internal.h"

/* ---- sanitizer annotations ------------------------------------------------ */

#if defined(__SANITIZE_ADDRESS__)
#define CO_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CO_ASAN 1
#endif
#endif
#ifndef CO_ASAN
#define CO_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define CO_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CO_TSAN 1
#endif
#endif
#ifndef CO_TSAN
#define CO_TSAN 0
#endif

#if CO_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if CO_TSAN
#include <sanitizer/tsan_interface.h>
#endif

/* ---- objects ------------------------------------------------------------- */

enum co_state {
	CO_FREE = 0,  /* slot unused (its stack, if mapped, is kept) */
	CO_READY,     /* in the ready ring */
	CO_RUNNING,   /* on the CPU: s->cur */
	CO_SUSPENDED, /* parked in dxl_co_suspend */
	CO_DONE,      /* function returned; freed right after its last switch */
};

struct dxl_co {
	struct dxl_sched *s;
	uint32_t slot;
	uint32_t gen; /* DXL_CO_GEN of the current occupant */
	enum co_state state;
	dxl_co_fn fn;
	void *arg;

	void *sp;      /* asm switch: stack pointer while not running */
	ucontext_t uc; /* ucontext switch: context while not running */

	void *map;      /* stack mapping, guard page first; NULL until used */
	size_t map_len;
	char *stack_lo; /* lowest usable byte (just above the guard page) */
	size_t stack_len;

	bool wake_token;      /* a resume arrived while not suspended */
	int wake_result;      /* 0 or DXL_E_TIMEDOUT for the suspend */
	uint64_t deadline_ns; /* while suspended with a deadline, else 0 */

	/* completions routed to this coroutine, oldest at wc[wc_head] */
	struct dxl_wc *wc;
	uint32_t wc_cap, wc_head, wc_count;
	uint32_t wc_want;     /* > 0 while waiting for that many */
	uint32_t wc_lost;     /* arrived when the buffer could not grow */
	uint32_t wc_lost_err; /* ... of which with an error status */
	char errmsg[DXL_ERR_MSG_MAX]; /* its dxl_errmsg() while it runs */

	void *asan_fake;  /* ASan fake stack of this fiber while switched out */
	void *tsan_fiber; /* TSan fiber while live */
};

struct dxl_sched {
	struct dxl_sched_cfg cfg;
	struct dxl_ctx *ctx;
	enum dxl_co_switch impl;
	size_t stack_len; /* cfg.stack_size rounded up to pages */
	size_t page;

	struct dxl_co *cos;   /* cfg.n_coroutines slots */
	uint32_t *ready;      /* ring of slots; a slot is in it at most once */
	uint32_t ready_mask;  /* ring size - 1 (a power of two >= n_coroutines) */
	uint32_t ready_head, ready_count;
	uint32_t *free_slots; /* stack of free slots */
	uint32_t n_free;
	uint32_t n_live;

	struct dxl_co *cur; /* the running coroutine, NULL in the scheduler */
	bool in_round;      /* inside dxl_sched_run_once */
	bool cq_emptied;    /* this round's poll took fewer than poll_batch:
			       the ctx had no more completions then */
	void *sched_sp;     /* asm: the scheduler's stack pointer while a co runs */
	ucontext_t sched_uc;
	atomic_bool stop;   /* set by dxl_sched_stop, possibly from another thread */

	uint32_t n_timed;       /* suspended coroutines with a deadline */
	uint64_t next_deadline; /* <= the earliest of those deadlines */

	struct dxl_wc *pollbuf;
	struct dxl_sched_hooks hooks;
	bool has_hooks;
	void *user;
	struct dxl_sched_stats st;

	const void *asan_main_bottom; /* the thread's stack, learnt from ASan */
	size_t asan_main_size;
	void *asan_fake;
	void *tsan_main; /* the thread's own TSan fiber */
	bool bench_stop;  /* dxl_co_switch_cost's partner ends */
};

/* the scheduler running on this thread (inside dxl_sched_run_once) */
static __thread struct dxl_sched *tls_sched;

#define CO_STACK_MIN (16u << 10)
#define CO_STACK_MAX (64u << 20)

/* ---- configuration ------------------------------------------------------- */

void dxl_sched_cfg_init(struct dxl_sched_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->n_coroutines = 16;
	cfg->stack_size = 128u << 10;
	cfg->switch_impl = DXL_CO_SWITCH_DEFAULT;
	cfg->poll_batch = 64;
	cfg->wc_buf = 16;
	cfg->idle_wait_ms = 100;
}

int dxl_co_switch_supported(enum dxl_co_switch impl)
{
	switch (impl) {
	case DXL_CO_SWITCH_DEFAULT:
	case DXL_CO_SWITCH_UCONTEXT:
		return 1;
	case DXL_CO_SWITCH_ASM:
		return DXL_CO_HAVE_ASM;
	}
	return 0;
}

const char *dxl_co_switch_name(enum dxl_co_switch impl)
{
	switch (impl) {
	case DXL_CO_SWITCH_DEFAULT:
		return "default";
	case DXL_CO_SWITCH_ASM:
		return "asm";
	case DXL_CO_SWITCH_UCONTEXT:
		return "ucontext";
	}
	return "unknown";
}

static int check_cfg(const struct dxl_sched_cfg *c)
{
	if (c->n_coroutines < 1 || c->n_coroutines > DXL_CO_MAX)
		return dxl_err_set(DXL_E_INVAL,
				   "sched: n_coroutines %u out of range 1..%d",
				   c->n_coroutines, DXL_CO_MAX);
	if (c->stack_size < CO_STACK_MIN || c->stack_size > CO_STACK_MAX)
		return dxl_err_set(DXL_E_INVAL,
				   "sched: stack_size %zu out of range %u..%u",
				   c->stack_size, CO_STACK_MIN, CO_STACK_MAX);
	if (c->poll_batch < 1 || c->poll_batch > 4096)
		return dxl_err_set(DXL_E_INVAL,
				   "sched: poll_batch %u out of range 1..4096",
				   c->poll_batch);
	if (c->wc_buf < 1 || c->wc_buf > 65536)
		return dxl_err_set(DXL_E_INVAL,
				   "sched: wc_buf %u out of range 1..65536", c->wc_buf);
	if (c->idle_wait_ms < 1 || c->idle_wait_ms > 60000)
		return dxl_err_set(DXL_E_INVAL,
				   "sched: idle_wait_ms %u out of range 1..60000",
				   c->idle_wait_ms);
	if ((unsigned)c->switch_impl > DXL_CO_SWITCH_UCONTEXT)
		return dxl_err_set(DXL_E_INVAL, "sched: unknown switch_impl %d",
				   (int)c->switch_impl);
	if (!dxl_co_switch_supported(c->switch_impl))
		return dxl_err_set(DXL_E_NOTSUP,
				   "sched: the %s switch is not built into this binary "
				   "(x86-64 only, and not with -DDXL_CO_UCONTEXT)",
				   dxl_co_switch_name(c->switch_impl));
	return 0;
}

/* ---- ready ring and free slots (scheduler thread only) -------------------- */

static void ready_push(struct dxl_sched *s, uint32_t slot)
{
	DXL_ASSERTF(s->ready_count < s->cfg.n_coroutines,
		    "ready ring overflow (%u)", s->ready_count);
	s->ready[(s->ready_head + s->ready_count) & s->ready_mask] = slot;
	s->ready_count++;
}

static uint32_t ready_pop(struct dxl_sched *s)
{
	uint32_t slot = s->ready[s->ready_head];
	s->ready_head = (s->ready_head + 1) & s->ready_mask;
	s->ready_count--;
	return slot;
}

static uint32_t co_id_of(const struct dxl_co *co)
{
	return (co->gen << DXL_CO_SLOT_BITS) | co->slot;
}

/* the live coroutine with that id, or NULL (free, finished, slot reused) */
static struct dxl_co *co_lookup(struct dxl_sched *s, uint32_t id)
{
	uint32_t slot = DXL_CO_SLOT(id);
	if (slot >= s->cfg.n_coroutines)
		return NULL;
	struct dxl_co *co = &s->cos[slot];
	if (co->gen != DXL_CO_GEN(id) || co->state == CO_FREE ||
	    co->state == CO_DONE)
		return NULL;
	return co;
}

/* ---- context switches ----------------------------------------------------- */

/*
 * Switches always go scheduler -> coroutine -> scheduler (a hub), never
 * coroutine -> coroutine: the scheduler must poll between coroutines anyway,
 * and the hub keeps the sanitizer bookkeeping to two cases.
 */

static void switch_in(struct dxl_sched *s, struct dxl_co *co)
{
	s->cur = co;
	co->state = CO_RUNNING;
	/* the coroutine's own error message while it runs */
	char *prev_msg = dxl_err_use(co->errmsg);
#if CO_ASAN
	__sanitizer_start_switch_fiber(&s->asan_fake, co->stack_lo,
				       co->stack_len);
#endif
#if CO_TSAN
	__tsan_switch_to_fiber(co->tsan_fiber, 0);
#endif
#if DXL_CO_HAVE_ASM
	if (s->impl == DXL_CO_SWITCH_ASM)
		dxl_co_switch_asm(&s->sched_sp, co->sp);
	else
#endif
	{
		int r = swapcontext(&s->sched_uc, &co->uc);
		DXL_ASSERTF(r == 0, "swapcontext into coroutine %u failed",
			    co_id_of(co));
	}
#if CO_ASAN
	__sanitizer_finish_switch_fiber(s->asan_fake, NULL, NULL);
#endif
	s->cur = NULL;
	dxl_err_use(prev_msg);
	/* a finished coroutine's last message stays readable in the thread
	 * (after dxl_sched_run, as before messages were per coroutine) */
	if (co->state == CO_DONE && co->errmsg[0])
		dxl_err_set_text(co->errmsg);
	s->st.switches += 2;
}

/* final: the coroutine never runs again (lets ASan drop its fake stack) */
static void switch_out(struct dxl_co *co, bool final)
{
	struct dxl_sched *s = co->s;
#if CO_ASAN
	__sanitizer_start_switch_fiber(final ? NULL : &co->asan_fake,
				       s->asan_main_bottom, s->asan_main_size);
#else
	(void)final;
#endif
#if CO_TSAN
	__tsan_switch_to_fiber(s->tsan_main, 0);
#endif
#if DXL_CO_HAVE_ASM
	if (s->impl == DXL_CO_SWITCH_ASM)
		dxl_co_switch_asm(&co->sp, s->sched_sp);
	else
#endif
	{
		int r = swapcontext(&co->uc, &s->sched_uc);
		DXL_ASSERTF(r == 0, "swapcontext out of coroutine %u failed",
			    co_id_of(co));
	}
#if CO_ASAN
	__sanitizer_finish_switch_fiber(co->asan_fake, &s->asan_main_bottom,
					&s->asan_main_size);
#endif
}

/* the bottom of every coroutine stack */
__attribute__((noreturn)) static void co_main(struct dxl_co *co)
{
#if CO_ASAN
	/* first arrival on this stack: learn the thread stack we came from */
	__sanitizer_finish_switch_fiber(NULL, &co->s->asan_main_bottom,
					&co->s->asan_main_size);
#endif
	co->fn(co->arg);
	co->state = CO_DONE;
	switch_out(co, true);
	DXL_ASSERTF(0, "finished coroutine %u was resumed", co_id_of(co));
	__builtin_unreachable();
}

#if DXL_CO_HAVE_ASM
static void co_entry_asm(void *p)
{
	co_main(p);
}
#endif

/* makecontext passes int arguments only: the pointer comes in two halves */
static void co_entry_uc(unsigned hi, unsigned lo)
{
	co_main((struct dxl_co *)(((uintptr_t)hi << 32) | (uintptr_t)lo));
}

/* build a fresh context at the top of co's stack that enters co_main(co) */
static int context_prepare(struct dxl_sched *s, struct dxl_co *co)
{
#if DXL_CO_HAVE_ASM
	if (s->impl == DXL_CO_SWITCH_ASM) {
		/* the frame dxl_co_switch_asm pops; see co_switch_x86_64.S */
		uintptr_t top = (uintptr_t)(co->stack_lo + co->stack_len) &
				~(uintptr_t)15;
		uint64_t *sp = (uint64_t *)(top - 16 - 64);
		uint32_t mxcsr;
		uint16_t fpucw;
		/* a new coroutine inherits the scheduler thread's FP modes */
		__asm__ __volatile__("stmxcsr %0" : "=m"(mxcsr));
		__asm__ __volatile__("fnstcw %0" : "=m"(fpucw));
		sp[0] = (uint64_t)mxcsr | ((uint64_t)fpucw << 32);
		sp[1] = 0;                          /* r15 */
		sp[2] = 0;                          /* r14 */
		sp[3] = (uintptr_t)co_entry_asm;    /* r13: entry */
		sp[4] = (uintptr_t)co;              /* r12: its argument */
		sp[5] = 0;                          /* rbx */
		sp[6] = 0;                          /* rbp: ends frame chains */
		sp[7] = (uintptr_t)dxl_co_trampoline; /* return address */
		co->sp = sp;
		return 0;
	}
#endif
	if (getcontext(&co->uc) != 0)
		return dxl_err_errno(errno, "sched: getcontext");
	co->uc.uc_stack.ss_sp = co->stack_lo;
	co->uc.uc_stack.ss_size = co->stack_len;
	co->uc.uc_link = NULL; /* co_main never returns */
	uintptr_t p = (uintptr_t)co;
	makecontext(&co->uc, (void (*)(void))co_entry_uc, 2,
		    (unsigned)(p >> 32), (unsigned)(p & 0xffffffffu));
	return 0;
}

static int stack_map(struct dxl_sched *s, struct dxl_co *co)
{
	size_t len = s->stack_len + s->page;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
		       -1, 0);
	if (m == MAP_FAILED)
		return dxl_err_set(DXL_E_NOMEM,
				   "sched: mmap of a %zu-byte coroutine stack: %s",
				   len, strerror(errno));
	/* stacks grow down: the guard page is the lowest one */
	if (mprotect(m, s->page, PROT_NONE) != 0) {
		int e = errno;
		munmap(m, len);
		return dxl_err_set(DXL_E_NOMEM,
				   "sched: mprotect of a stack guard page: %s",
				   strerror(e));
	}
	co->map = m;
	co->map_len = len;
	co->stack_lo = (char *)m + s->page;
	co->stack_len = s->stack_len;
	return 0;
}

static void stack_unpoison(struct dxl_co *co)
{
#if CO_ASAN
	/* frames left by an earlier occupant must not look poisoned to the
	 * next one, nor to whatever reuses the addresses after munmap */
	if (co->map)
		ASAN_UNPOISON_MEMORY_REGION(co->stack_lo, co->stack_len);
#else
	(void)co;
#endif
}

/* ---- scheduler life cycle ------------------------------------------------- */

int dxl_sched_new(const struct dxl_sched_cfg *cfg, struct dxl_ctx *ctx,
		  struct dxl_sched **out)
{
	struct dxl_sched_cfg def;
	if (!out)
		return dxl_err_set(DXL_E_INVAL, "sched_new: out is NULL");
	*out = NULL;
	if (!cfg) {
		dxl_sched_cfg_init(&def);
		cfg = &def;
	}
	int ret = check_cfg(cfg);
	if (ret)
		return ret;

	struct dxl_sched *s = calloc(1, sizeof(*s));
	if (!s)
		return dxl_err_set(DXL_E_NOMEM, "sched_new: out of memory");
	s->cfg = *cfg;
	s->ctx = ctx;
	s->impl = cfg->switch_impl;
	if (s->impl == DXL_CO_SWITCH_DEFAULT)
		s->impl = DXL_CO_HAVE_ASM ? DXL_CO_SWITCH_ASM
					  : DXL_CO_SWITCH_UCONTEXT;
	long pg = sysconf(_SC_PAGESIZE);
	s->page = pg > 0 ? (size_t)pg : 4096;
	s->stack_len = DXL_ALIGN_UP(cfg->stack_size, s->page);
	atomic_init(&s->stop, false);

	uint32_t n = cfg->n_coroutines;
	s->cos = calloc(n, sizeof(*s->cos));
	uint32_t ring = 1;
	while (ring < n)
		ring <<= 1;
	s->ready_mask = ring - 1;
	s->ready = calloc(ring, sizeof(*s->ready));
	s->free_slots = calloc(n, sizeof(*s->free_slots));
	s->pollbuf = calloc(cfg->poll_batch, sizeof(*s->pollbuf));
	if (!s->cos || !s->ready || !s->free_slots || !s->pollbuf)
		goto err_nomem;
	for (uint32_t i = 0; i < n; i++) {
		struct dxl_co *co = &s->cos[i];
		co->s = s;
		co->slot = i;
		co->wc_cap = cfg->wc_buf;
		co->wc = calloc(co->wc_cap, sizeof(*co->wc));
		if (!co->wc)
			goto err_nomem;
		/* popped from the end: slot 0 is used first */
		s->free_slots[n - 1 - i] = i;
	}
	s->n_free = n;
	*out = s;
	return 0;

err_nomem:
	if (s->cos)
		for (uint32_t i = 0; i < n; i++)
			free(s->cos[i].wc);
	free(s->pollbuf);
	free(s->free_slots);
	free(s->ready);
	free(s->cos);
	free(s);
	return dxl_err_set(DXL_E_NOMEM, "sched_new: out of memory (%u coroutines)",
			   n);
}

void dxl_sched_delete(struct dxl_sched **sp)
{
	if (!sp || !*sp)
		return;
	struct dxl_sched *s = *sp;
	if (tls_sched == s) {
		/* from one of its coroutines: it would free its own stack */
		char here;
		DXL_ASSERTF(!(s->cur && &here >= s->cur->stack_lo &&
			      &here < s->cur->stack_lo + s->cur->stack_len),
			    "dxl_sched_delete called from one of its coroutines");
		/* a longjmp (e.g. a failed test assertion) left a coroutine
		 * without switching back: forget that round */
		tls_sched = NULL;
	}
	for (uint32_t i = 0; i < s->cfg.n_coroutines; i++) {
		struct dxl_co *co = &s->cos[i];
#if CO_TSAN
		if (co->tsan_fiber)
			__tsan_destroy_fiber(co->tsan_fiber);
#endif
		if (co->map) {
			stack_unpoison(co);
			munmap(co->map, co->map_len);
		}
		free(co->wc);
	}
	free(s->pollbuf);
	free(s->free_slots);
	free(s->ready);
	free(s->cos);
	free(s);
	*sp = NULL;
}

struct dxl_ctx *dxl_sched_ctx(const struct dxl_sched *s)
{
	return s->ctx;
}

enum dxl_co_switch dxl_sched_switch_impl(const struct dxl_sched *s)
{
	return s->impl;
}

uint32_t dxl_sched_live(const struct dxl_sched *s)
{
	return s->n_live;
}

void dxl_sched_stats(const struct dxl_sched *s, struct dxl_sched_stats *out)
{
	*out = s->st;
}

int dxl_sched_set_hooks(struct dxl_sched *s, const struct dxl_sched_hooks *h)
{
	if (s->has_hooks)
		return dxl_err_set(DXL_E_EXIST,
				   "sched: another layer is already attached");
	s->hooks = *h;
	s->has_hooks = true;
	return 0;
}

void dxl_sched_clear_hooks(struct dxl_sched *s)
{
	memset(&s->hooks, 0, sizeof(s->hooks));
	s->has_hooks = false;
}

uint32_t dxl_sched_n_coroutines(const struct dxl_sched *s)
{
	return s->cfg.n_coroutines;
}

bool dxl_sched_cq_emptied(const struct dxl_sched *s)
{
	return !s->ctx || s->cq_emptied;
}

uint64_t dxl_sched_rounds(const struct dxl_sched *s)
{
	return s->st.rounds;
}

void *dxl_sched_user(const struct dxl_sched *s)
{
	return s->user;
}

void dxl_sched_set_user(struct dxl_sched *s, void *user)
{
	s->user = user;
}

int dxl_sched_spawn(struct dxl_sched *s, dxl_co_fn fn, void *arg,
		    uint32_t *id_out)
{
	if (!s || !fn)
		return dxl_err_set(DXL_E_INVAL, "sched_spawn: NULL argument");
	if (s->n_free == 0)
		return dxl_err_set(DXL_E_AGAIN,
				   "sched_spawn: all %u coroutine slots are live",
				   s->cfg.n_coroutines);
	struct dxl_co *co = &s->cos[s->free_slots[s->n_free - 1]];
	DXL_ASSERT(co->state == CO_FREE);
	if (!co->map) {
		int ret = stack_map(s, co);
		if (ret)
			return ret;
	} else {
		stack_unpoison(co);
	}
	co->fn = fn;
	co->errmsg[0] = '\0';
	co->arg = arg;
	int ret = context_prepare(s, co);
	if (ret)
		return ret;
	s->n_free--;
	co->gen = (co->gen + 1) & 0xfffu;
	co->wake_token = false;
	co->wake_result = 0;
	co->deadline_ns = 0;
	co->wc_head = co->wc_count = co->wc_want = 0;
	co->wc_lost = co->wc_lost_err = 0;
	co->asan_fake = NULL;
#if CO_TSAN
	co->tsan_fiber = __tsan_create_fiber(0);
#endif
	co->state = CO_READY;
	ready_push(s, co->slot);
	s->n_live++;
	s->st.spawned++;
	if (id_out)
		*id_out = co_id_of(co);
	return 0;
}

/* after the coroutine's last switch: free its slot */
static void co_finish(struct dxl_sched *s, struct dxl_co *co)
{
	uint32_t id = co_id_of(co);
	if (s->has_hooks && s->hooks.on_co_exit)
		s->hooks.on_co_exit(s->hooks.arg, id);
	if (co->wc_count || co->wc_lost)
		DXL_WARN("sched: coroutine %u ended with %u completions it never "
			 "waited for (first wr_id 0x%llx, status %s)",
			 id, co->wc_count + co->wc_lost,
			 co->wc_count ? (unsigned long long)co->wc[co->wc_head].wr_id
				      : 0ull,
			 co->wc_count ? dxl_wc_status_str(co->wc[co->wc_head].status)
				      : "lost");
#if CO_TSAN
	__tsan_destroy_fiber(co->tsan_fiber);
	co->tsan_fiber = NULL;
#endif
	co->wc_head = co->wc_count = co->wc_lost = co->wc_lost_err = 0;
	co->fn = NULL;
	co->arg = NULL;
	co->state = CO_FREE;
	s->free_slots[s->n_free++] = co->slot;
	s->n_live--;
	s->st.finished++;
}

/* ---- waking and routing --------------------------------------------------- */

static void co_wake(struct dxl_sched *s, struct dxl_co *co, int result)
{
	if (co->state == CO_SUSPENDED) {
		if (co->deadline_ns) {
			s->n_timed--;
			co->deadline_ns = 0;
		}
		co->wake_result = result;
		co->state = CO_READY;
		ready_push(s, co->slot);
	} else if (co->state == CO_READY || co->state == CO_RUNNING) {
		co->wake_token = true;
	}
}

static void expire_timers(struct dxl_sched *s, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	for (uint32_t i = 0; i < s->cfg.n_coroutines && s->n_timed; i++) {
		struct dxl_co *co = &s->cos[i];
		if (co->state != CO_SUSPENDED || !co->deadline_ns)
			continue;
		if (co->deadline_ns <= now) {
			s->st.timeouts++;
			co_wake(s, co, DXL_E_TIMEDOUT);
		} else if (co->deadline_ns < next) {
			next = co->deadline_ns;
		}
	}
	s->next_deadline = next;
}

static bool wc_push(struct dxl_co *co, const struct dxl_wc *wc)
{
	if (co->wc_count == co->wc_cap) {
		uint32_t ncap = co->wc_cap * 2;
		struct dxl_wc *n = malloc((size_t)ncap * sizeof(*n));
		if (!n)
			return false;
		for (uint32_t i = 0; i < co->wc_count; i++)
			n[i] = co->wc[(co->wc_head + i) % co->wc_cap];
		free(co->wc);
		co->wc = n;
		co->wc_cap = ncap;
		co->wc_head = 0;
	}
	co->wc[(co->wc_head + co->wc_count) % co->wc_cap] = *wc;
	co->wc_count++;
	return true;
}

/* returns 0, or DXL_E_NOENT when nobody owns the completion (dropped) */
static int route_wc(struct dxl_sched *s, const struct dxl_wc *wc)
{
	uint64_t cls = wc->wr_id >> DXL_WRID_CLASS_SHIFT;
	if (cls == DXL_WRID_CLASS_CO) {
		uint32_t id = 0;
		dxl_co_wrid_decode(wc->wr_id, &id, NULL);
		struct dxl_co *co = co_lookup(s, id);
		if (!co) {
			s->st.wc_stale++;
			DXL_LOG(wc->status == DXL_WC_SUCCESS ? DXL_LOG_DEBUG
							     : DXL_LOG_WARN,
				"sched: completion wr_id 0x%llx (%s) for coroutine %u "
				"that is gone: dropped",
				(unsigned long long)wc->wr_id,
				dxl_wc_status_str(wc->status), id);
			return DXL_E_NOENT;
		}
		if (!wc_push(co, wc)) {
			/* out of memory: keep at least the count and the
			 * error, so the waiter still learns about it */
			co->wc_lost++;
			if (wc->status != DXL_WC_SUCCESS)
				co->wc_lost_err++;
			DXL_ERROR("sched: coroutine %u: no memory to buffer "
				  "completion wr_id 0x%llx; only its status is kept",
				  id, (unsigned long long)wc->wr_id);
		}
		s->st.wc_routed++;
		if (co->wc_want && co->wc_count + co->wc_lost >= co->wc_want)
			co_wake(s, co, 0);
		return 0;
	}
	if (cls == DXL_WRID_CLASS_RPC && s->has_hooks && s->hooks.on_wc) {
		s->st.wc_routed++;
		s->hooks.on_wc(s->hooks.arg, wc);
		return 0;
	}
	s->st.wc_unrouted++;
	DXL_WARN("sched: completion wr_id 0x%llx (%s, opcode %d) belongs to no "
		 "coroutine or layer: dropped",
		 (unsigned long long)wc->wr_id, dxl_wc_status_str(wc->status),
		 (int)wc->opcode);
	return DXL_E_NOENT;
}

int dxl_sched_deliver(struct dxl_sched *s, const struct dxl_wc *wc)
{
	if (!s || !wc)
		return dxl_err_set(DXL_E_INVAL, "sched_deliver: NULL argument");
	if (route_wc(s, wc) != 0)
		return dxl_err_set(DXL_E_NOENT,
				   "sched_deliver: wr_id 0x%llx belongs to no live "
				   "coroutine or layer",
				   (unsigned long long)wc->wr_id);
	return 0;
}

/* ---- the round ------------------------------------------------------------ */

static int idle_wait(struct dxl_sched *s, int timeout_ms)
{
	uint64_t wait_ns = (uint64_t)s->cfg.idle_wait_ms * 1000000ull;
	if (timeout_ms >= 0 && (uint64_t)timeout_ms * 1000000ull < wait_ns)
		wait_ns = (uint64_t)timeout_ms * 1000000ull;
	if (s->n_timed) {
		uint64_t now = dxl_now_ns();
		if (s->next_deadline <= now)
			return 0;
		if (s->next_deadline - now < wait_ns)
			wait_ns = s->next_deadline - now;
	}
	if (!s->ctx && s->n_live > 0 && s->n_timed == 0)
		return dxl_err_set(DXL_E_STATE,
				   "sched: all %u live coroutines are suspended "
				   "without a deadline and there is no fabric ctx: "
				   "nothing can wake them",
				   s->n_live);
	s->st.idle_waits++;
	if (s->ctx) {
		/* round up: waking a little late is fine, spinning is not */
		int ms = (int)((wait_ns + 999999ull) / 1000000ull);
		int r = dxl_ctx_wait(s->ctx, ms);
		if (r != 0 && r != DXL_E_TIMEDOUT)
			return r;
		return 0;
	}
	struct timespec ts = {.tv_sec = (time_t)(wait_ns / 1000000000ull),
			      .tv_nsec = (long)(wait_ns % 1000000000ull)};
	nanosleep(&ts, NULL);
	return 0;
}

int dxl_sched_run_once(struct dxl_sched *s, int timeout_ms)
{
	if (!s)
		return dxl_err_set(DXL_E_INVAL, "sched_run: NULL scheduler");
	if (s->in_round || (tls_sched && tls_sched->cur))
		return dxl_err_set(DXL_E_STATE,
				   "sched_run: called from a coroutine or a handler");
	struct dxl_sched *prev = tls_sched;
	tls_sched = s;
	s->in_round = true;
#if CO_TSAN
	s->tsan_main = __tsan_get_current_fiber();
#endif
	int events = 0, ret = 0;
	s->st.rounds++;

	if (s->ctx) {
		int n = dxl_ctx_poll(s->ctx, s->pollbuf, (int)s->cfg.poll_batch);
		s->st.polls++;
		if (n < 0) {
			ret = n;
			goto out;
		}
		s->cq_emptied = n < (int)s->cfg.poll_batch;
		for (int i = 0; i < n; i++)
			route_wc(s, &s->pollbuf[i]);
		events += n;
	}
	if (s->n_timed) {
		uint64_t now = dxl_now_ns();
		if (now >= s->next_deadline)
			expire_timers(s, now);
	}

	/* round-robin: everyone ready now runs once; those that become ready
	 * meanwhile (yield, resume) wait for the next round and its poll */
	for (uint32_t n = s->ready_count; n > 0; n--) {
		struct dxl_co *co = &s->cos[ready_pop(s)];
		DXL_ASSERTF(co->state == CO_READY,
			    "coroutine %u in the ready ring with state %d",
			    co_id_of(co), (int)co->state);
		switch_in(s, co);
		events++;
		if (co->state == CO_DONE)
			co_finish(s, co);
	}

	if (s->has_hooks && s->hooks.on_round_end)
		s->hooks.on_round_end(s->hooks.arg);

	/* block only after a round in which nothing happened: after a busy
	 * one the caller first gets to look (e.g. run returns when the last
	 * coroutine has finished) */
	if (events == 0 && s->ready_count == 0 && timeout_ms != 0 &&
	    !atomic_load_explicit(&s->stop, memory_order_relaxed))
		ret = idle_wait(s, timeout_ms);
out:
	s->in_round = false;
	tls_sched = prev;
	return ret < 0 ? ret : events;
}

int dxl_sched_run(struct dxl_sched *s)
{
	if (!s)
		return dxl_err_set(DXL_E_INVAL, "sched_run: NULL scheduler");
	int ret = 0;
	while (s->n_live > 0 &&
	       !atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		ret = dxl_sched_run_once(s, -1);
		if (ret < 0)
			break;
	}
	atomic_store_explicit(&s->stop, false, memory_order_relaxed);
	return ret < 0 ? ret : 0;
}

int dxl_sched_serve(struct dxl_sched *s)
{
	if (!s)
		return dxl_err_set(DXL_E_INVAL, "sched_serve: NULL scheduler");
	int ret = 0;
	while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		ret = dxl_sched_run_once(s, -1);
		if (ret < 0)
			break;
	}
	atomic_store_explicit(&s->stop, false, memory_order_relaxed);
	return ret < 0 ? ret : 0;
}

void dxl_sched_stop(struct dxl_sched *s)
{
	/* relaxed: the flag carries no data, and the owner thread rechecks it
	 * at least every idle_wait_ms */
	if (s)
		atomic_store_explicit(&s->stop, true, memory_order_relaxed);
}

/* ---- inside a coroutine --------------------------------------------------- */

static struct dxl_co *current(void)
{
	return tls_sched ? tls_sched->cur : NULL;
}

struct dxl_co *dxl_co_self(void)
{
	return current();
}

struct dxl_sched *dxl_co_sched(void)
{
	return tls_sched;
}

uint32_t dxl_co_id(const struct dxl_co *co)
{
	if (!co)
		co = current();
	return co ? co_id_of(co) : 0;
}

uint64_t dxl_co_wrid(uint64_t tag)
{
	struct dxl_co *co = current();
	return co ? dxl_co_wrid_make(co_id_of(co), tag) : 0;
}

int dxl_co_yield(void)
{
	struct dxl_co *co = current();
	if (!co)
		return dxl_err_set(DXL_E_STATE, "co_yield: not in a coroutine");
	co->state = CO_READY;
	ready_push(co->s, co->slot);
	switch_out(co, false);
	return 0;
}

int dxl_co_suspend(uint64_t deadline_ns)
{
	struct dxl_co *co = current();
	if (!co)
		return dxl_err_set(DXL_E_STATE, "co_suspend: not in a coroutine");
	if (co->wake_token) {
		co->wake_token = false;
		return 0;
	}
	struct dxl_sched *s = co->s;
	if (deadline_ns) {
		if (dxl_now_ns() >= deadline_ns)
			return dxl_err_set(DXL_E_TIMEDOUT,
					   "coroutine %u: deadline passed",
					   co_id_of(co));
		if (s->n_timed == 0 || deadline_ns < s->next_deadline)
			s->next_deadline = deadline_ns;
		s->n_timed++;
	}
	co->deadline_ns = deadline_ns;
	co->wake_result = 0;
	co->state = CO_SUSPENDED;
	switch_out(co, false);
	if (co->wake_result)
		return dxl_err_set(co->wake_result, "coroutine %u: deadline passed",
				   co_id_of(co));
	return 0;
}

int dxl_co_resume(struct dxl_sched *s, uint32_t co_id)
{
	if (!s)
		return dxl_err_set(DXL_E_INVAL, "co_resume: NULL scheduler");
	struct dxl_co *co = co_lookup(s, co_id);
	if (!co)
		return dxl_err_set(DXL_E_NOENT, "co_resume: no live coroutine %u",
				   co_id);
	co_wake(s, co, 0);
	return 0;
}

int dxl_co_sleep_ms(uint32_t ms)
{
	if (!current())
		return dxl_err_set(DXL_E_STATE, "co_sleep: not in a coroutine");
	uint64_t deadline = dxl_now_ns() + (uint64_t)ms * 1000000ull;
	if (ms == 0)
		return dxl_co_yield();
	/* a resume only ends one suspension; keep sleeping until the time */
	while (dxl_co_suspend(deadline) != DXL_E_TIMEDOUT)
		;
	dxl_err_clear();
	return 0;
}

int dxl_co_wait_completions(int k, struct dxl_wc *wc, int timeout_ms)
{
	struct dxl_co *co = current();
	if (!co)
		return dxl_err_set(DXL_E_STATE,
				   "co_wait_completions: not in a coroutine");
	if (k < 1 || k > 65536)
		return dxl_err_set(DXL_E_INVAL,
				   "co_wait_completions: k = %d out of range 1..65536",
				   k);
	uint64_t deadline = 0;
	if (timeout_ms >= 0)
		deadline = dxl_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	while (co->wc_count + co->wc_lost < (uint32_t)k) {
		co->wc_want = (uint32_t)k;
		int r = dxl_co_suspend(deadline ? deadline : 0);
		co->wc_want = 0;
		if (r == DXL_E_TIMEDOUT &&
		    co->wc_count + co->wc_lost < (uint32_t)k)
			return dxl_err_set(DXL_E_TIMEDOUT,
					   "coroutine %u: %u of %d completions "
					   "arrived within %d ms",
					   co_id_of(co), co->wc_count + co->wc_lost,
					   k, timeout_ms);
	}
	int errors = 0;
	for (int i = 0; i < k; i++) {
		struct dxl_wc w;
		if (co->wc_count) {
			w = co->wc[co->wc_head];
			co->wc_head = (co->wc_head + 1) % co->wc_cap;
			co->wc_count--;
		} else {
			/* buffered as a count only (see route_wc) */
			memset(&w, 0, sizeof(w));
			w.status = co->wc_lost_err ? DXL_WC_LOCAL_ERR
						   : DXL_WC_SUCCESS;
			if (co->wc_lost_err)
				co->wc_lost_err--;
			co->wc_lost--;
		}
		if (w.status != DXL_WC_SUCCESS)
			errors++;
		if (wc)
			wc[i] = w;
	}
	return errors;
}

int dxl_co_completions_buffered(void)
{
	struct dxl_co *co = current();
	return co ? (int)(co->wc_count + co->wc_lost) : 0;
}

/* ---- the switch-cost diagnostic ----------------------------------------- */

static void bench_partner(void *p)
{
	struct dxl_sched *s = p;
	struct dxl_co *co = s->cur;
	while (!s->bench_stop)
		switch_out(co, false);
}

int dxl_co_switch_cost(enum dxl_co_switch impl, uint64_t iters,
		       double *ns_per_switch)
{
	if (!iters || !ns_per_switch)
		return dxl_err_set(DXL_E_INVAL, "co_switch_cost: bad argument");
	if (tls_sched)
		return dxl_err_set(DXL_E_STATE,
				   "co_switch_cost: called inside a scheduler");
	struct dxl_sched_cfg cfg;
	dxl_sched_cfg_init(&cfg);
	cfg.n_coroutines = 1;
	cfg.switch_impl = impl;
	struct dxl_sched *s = NULL;
	int ret = dxl_sched_new(&cfg, NULL, &s);
	if (ret)
		return ret;
	ret = dxl_sched_spawn(s, bench_partner, s, NULL);
	if (ret) {
		dxl_sched_delete(&s);
		return ret;
	}
	/* drive the coroutine by hand instead of by rounds */
	ready_pop(s);
	struct dxl_co *co = &s->cos[0];
	tls_sched = s;
	s->in_round = true;
#if CO_TSAN
	s->tsan_main = __tsan_get_current_fiber();
#endif
	s->bench_stop = false;
	switch_in(s, co); /* first entry: not measured */
	uint64_t t0 = dxl_now_ns();
	for (uint64_t i = 0; i < iters; i++)
		switch_in(s, co); /* two switches: in and back out */
	uint64_t dt = dxl_now_ns() - t0;
	s->bench_stop = true;
	switch_in(s, co); /* its function returns */
	DXL_ASSERT(co->state == CO_DONE);
	co_finish(s, co);
	s->in_round = false;
	tls_sched = NULL;
	dxl_sched_delete(&s);
	*ns_per_switch = (double)dt / (2.0 * (double)iters);
	return 0;
}
