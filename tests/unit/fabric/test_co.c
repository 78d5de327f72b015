/* test_co.c -- coroutine scheduler: switches, order, stacks, completion routing */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fenv.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/co.h"
#include "dxl/fabric.h"
#include "tests/lib/fabric_fixture.h"

/*
 * Every scheduler test runs twice: with the assembly switch and with the
 * ucontext one (the state pointer names the implementation). Where the asm
 * switch is not built (not x86-64, or -DDXL_CO_UCONTEXT) its runs skip.
 */
static enum dxl_co_switch impl_asm = DXL_CO_SWITCH_ASM;
static enum dxl_co_switch impl_uc = DXL_CO_SWITCH_UCONTEXT;

static int setup(void **state)
{
	dxlt_watchdog_arm(60, "test_co");
	return 0;
}

static int teardown(void **state)
{
	dxlt_watchdog_disarm();
	return 0;
}

static enum dxl_co_switch impl_of(void **state)
{
	enum dxl_co_switch impl = *(enum dxl_co_switch *)*state;
	if (!dxl_co_switch_supported(impl)) {
		print_message("the %s switch is not built here: skipped\n",
			      dxl_co_switch_name(impl));
		skip();
	}
	return impl;
}

static struct dxl_sched *new_sched(void **state, uint32_t n, size_t stack,
				   struct dxl_ctx *ctx)
{
	struct dxl_sched_cfg cfg;
	dxl_sched_cfg_init(&cfg);
	cfg.n_coroutines = n;
	if (stack)
		cfg.stack_size = stack;
	cfg.switch_impl = impl_of(state);
	struct dxl_sched *s = NULL;
	int r = dxl_sched_new(&cfg, ctx, &s);
	if (r)
		print_message("sched_new: %s\n", dxl_errmsg());
	assert_int_equal(r, 0);
	assert_int_equal(dxl_sched_switch_impl(s), cfg.switch_impl);
	return s;
}

/* ---- configuration and misuse --------------------------------------------- */

static void test_cfg_errors(void **state)
{
	struct dxl_sched_cfg cfg;
	struct dxl_sched *s = (void *)1;
	dxl_sched_cfg_init(&cfg);
	assert_int_equal(cfg.n_coroutines, 16);
	assert_int_equal(cfg.stack_size, 128u << 10);

	assert_int_equal(dxl_sched_new(&cfg, NULL, NULL), DXL_E_INVAL);
	cfg.n_coroutines = 0;
	assert_int_equal(dxl_sched_new(&cfg, NULL, &s), DXL_E_INVAL);
	assert_null(s);
	assert_non_null(strstr(dxl_errmsg(), "n_coroutines"));
	cfg.n_coroutines = DXL_CO_MAX + 1;
	assert_int_equal(dxl_sched_new(&cfg, NULL, &s), DXL_E_INVAL);
	dxl_sched_cfg_init(&cfg);
	cfg.stack_size = 1024;
	assert_int_equal(dxl_sched_new(&cfg, NULL, &s), DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "stack_size"));
	dxl_sched_cfg_init(&cfg);
	cfg.poll_batch = 0;
	assert_int_equal(dxl_sched_new(&cfg, NULL, &s), DXL_E_INVAL);
	dxl_sched_cfg_init(&cfg);
	cfg.idle_wait_ms = 0;
	assert_int_equal(dxl_sched_new(&cfg, NULL, &s), DXL_E_INVAL);
	dxl_sched_cfg_init(&cfg);
	cfg.switch_impl = (enum dxl_co_switch)7;
	assert_int_equal(dxl_sched_new(&cfg, NULL, &s), DXL_E_INVAL);
	dxl_sched_cfg_init(&cfg);
	cfg.switch_impl = DXL_CO_SWITCH_ASM;
	if (!dxl_co_switch_supported(DXL_CO_SWITCH_ASM))
		assert_int_equal(dxl_sched_new(&cfg, NULL, &s), DXL_E_NOTSUP);

	/* defaults with a NULL cfg; the default switch resolves */
	assert_int_equal(dxl_sched_new(NULL, NULL, &s), 0);
	assert_int_not_equal(dxl_sched_switch_impl(s), DXL_CO_SWITCH_DEFAULT);
	assert_null(dxl_sched_ctx(s));
	assert_int_equal(dxl_sched_spawn(s, NULL, NULL, NULL), DXL_E_INVAL);
	assert_int_equal(dxl_sched_run_once(NULL, 0), DXL_E_INVAL);
	/* nothing live, no ctx: run returns at once */
	assert_int_equal(dxl_sched_run(s), 0);
	dxl_sched_delete(&s);
	assert_null(s);
	dxl_sched_delete(&s); /* no-op */
	dxl_sched_delete(NULL);
	assert_string_equal(dxl_co_switch_name(DXL_CO_SWITCH_UCONTEXT),
			    "ucontext");
	assert_int_equal(dxl_co_switch_supported(DXL_CO_SWITCH_UCONTEXT), 1);
}

static void test_outside_coroutine(void **state)
{
	assert_null(dxl_co_self());
	assert_null(dxl_co_sched());
	assert_int_equal(dxl_co_id(NULL), 0);
	assert_int_equal(dxl_co_wrid(5), 0);
	assert_int_equal(dxl_co_yield(), DXL_E_STATE);
	assert_int_equal(dxl_co_suspend(0), DXL_E_STATE);
	assert_int_equal(dxl_co_sleep_ms(1), DXL_E_STATE);
	assert_int_equal(dxl_co_wait_completions(1, NULL, 0), DXL_E_STATE);
	assert_int_equal(dxl_co_completions_buffered(), 0);
}

/* ---- order and interleaving ----------------------------------------------- */

#define IL_CO 8
#define IL_ITERS 50

struct il {
	int log[IL_CO * IL_ITERS];
	int n;
	uint32_t ids[IL_CO];
	struct dxl_sched *s;
};

struct il_arg {
	struct il *il;
	int who;
};

static void il_fn(void *p)
{
	struct il_arg *a = p;
	assert_int_equal(dxl_co_sched(), a->il->s);
	assert_non_null(dxl_co_self());
	assert_int_equal(dxl_co_id(NULL), a->il->ids[a->who]);
	assert_int_equal(dxl_co_id(dxl_co_self()), a->il->ids[a->who]);
	for (int i = 0; i < IL_ITERS; i++) {
		a->il->log[a->il->n++] = a->who * 1000 + i;
		assert_int_equal(dxl_co_yield(), 0);
	}
}

static void test_interleave_round_robin(void **state)
{
	struct dxl_sched *s = new_sched(state, IL_CO, 0, NULL);
	struct il il = {.n = 0, .s = s};
	struct il_arg args[IL_CO];
	for (int i = 0; i < IL_CO; i++) {
		args[i] = (struct il_arg){&il, i};
		assert_int_equal(dxl_sched_spawn(s, il_fn, &args[i], &il.ids[i]),
				 0);
	}
	assert_int_equal(dxl_sched_live(s), IL_CO);
	/* a full scheduler refuses another spawn */
	assert_int_equal(dxl_sched_spawn(s, il_fn, &args[0], NULL), DXL_E_AGAIN);
	assert_int_equal(dxl_sched_run(s), 0);
	assert_int_equal(dxl_sched_live(s), 0);
	assert_int_equal(il.n, IL_CO * IL_ITERS);
	/* strict round-robin: round i runs coroutine 0..7 at iteration i */
	for (int j = 0; j < IL_CO * IL_ITERS; j++)
		assert_int_equal(il.log[j], (j % IL_CO) * 1000 + j / IL_CO);
	struct dxl_sched_stats st;
	dxl_sched_stats(s, &st);
	assert_int_equal(st.spawned, IL_CO);
	assert_int_equal(st.finished, IL_CO);
	/* each of the 8 runs IL_ITERS+1 times, two switches each */
	assert_int_equal(st.switches, 2ull * IL_CO * (IL_ITERS + 1));
	assert_int_equal(st.rounds, IL_ITERS + 1);
	dxl_sched_delete(&s);
}

static int reuse_count;

static void reuse_fn(void *p)
{
	reuse_count++;
	dxl_co_yield();
}

static void test_slot_reuse(void **state)
{
	struct dxl_sched *s = new_sched(state, 2, 0, NULL);
	uint32_t a, b, c;
	reuse_count = 0;
	assert_int_equal(dxl_sched_spawn(s, reuse_fn, NULL, &a), 0);
	assert_int_equal(dxl_sched_spawn(s, reuse_fn, NULL, &b), 0);
	assert_int_equal(dxl_sched_spawn(s, reuse_fn, NULL, NULL), DXL_E_AGAIN);
	assert_int_equal(dxl_sched_run(s), 0);
	assert_int_equal(reuse_count, 2);
	/* the slot comes back with a new generation */
	assert_int_equal(dxl_sched_spawn(s, reuse_fn, NULL, &c), 0);
	assert_true((c & 0xfffu) == (a & 0xfffu) || (c & 0xfffu) == (b & 0xfffu));
	assert_int_not_equal(c, a);
	assert_int_not_equal(c, b);
	assert_int_equal(dxl_co_resume(s, a), DXL_E_NOENT); /* stale id */
	assert_int_equal(dxl_sched_run(s), 0);
	assert_int_equal(reuse_count, 3);
	dxl_sched_delete(&s);
}

/* spawning from inside a coroutine */
static int chain_left;

static void chain_fn(void *p)
{
	struct dxl_sched *s = p;
	if (--chain_left > 0)
		assert_int_equal(dxl_sched_spawn(s, chain_fn, s, NULL), 0);
}

static void test_spawn_from_coroutine(void **state)
{
	struct dxl_sched *s = new_sched(state, 2, 0, NULL);
	chain_left = 100;
	assert_int_equal(dxl_sched_spawn(s, chain_fn, s, NULL), 0);
	assert_int_equal(dxl_sched_run(s), 0);
	assert_int_equal(chain_left, 0);
	struct dxl_sched_stats st;
	dxl_sched_stats(s, &st);
	assert_int_equal(st.finished, 100);
	dxl_sched_delete(&s);
}

/* ---- stacks ---------------------------------------------------------------- */

struct deep {
	int who;
	int depth;
	uint64_t sum;
};

/* each frame holds 512 bytes of its own pattern and yields at the bottom,
 * so several coroutines sit deep in their stacks at the same time */
static uint64_t recurse(int who, int depth)
{
	volatile uint8_t buf[512];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(who * 31 + depth + i);
	uint64_t below = 0;
	if (depth > 0)
		below = recurse(who, depth - 1);
	else
		for (int i = 0; i < 3; i++)
			dxl_co_yield();
	uint64_t sum = below;
	for (size_t i = 0; i < sizeof(buf); i++) {
		if (buf[i] != (uint8_t)(who * 31 + depth + i))
			return UINT64_MAX; /* somebody wrote on our stack */
		sum += buf[i];
	}
	return sum;
}

static uint64_t expected_sum(int who, int depth)
{
	uint64_t sum = 0;
	for (int d = 0; d <= depth; d++)
		for (size_t i = 0; i < 512; i++)
			sum += (uint8_t)(who * 31 + d + i);
	return sum;
}

static void deep_fn(void *p)
{
	struct deep *d = p;
	d->sum = recurse(d->who, d->depth);
}

static void test_stack_isolation_deep_recursion(void **state)
{
	/* 800 frames of >= 512 bytes: about half of a 1 MiB stack (more
	 * under ASan, whose frames carry red zones) */
	struct dxl_sched *s = new_sched(state, 4, 1u << 20, NULL);
	struct deep d[4];
	for (int i = 0; i < 4; i++) {
		d[i] = (struct deep){.who = i + 1, .depth = 800, .sum = 0};
		assert_int_equal(dxl_sched_spawn(s, deep_fn, &d[i], NULL), 0);
	}
	assert_int_equal(dxl_sched_run(s), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(d[i].sum, expected_sum(i + 1, 800));
	dxl_sched_delete(&s);
}

/* recursion that only a stack limit ends (the condition is never true at
 * run time, but the compiler cannot know) */
static volatile int overflow_stop;

static void overflow_fn(void *p)
{
	volatile char buf[4096];
	buf[0] = (char)(uintptr_t)p;
	if (!overflow_stop)
		overflow_fn((void *)(uintptr_t)(buf[0] + 1));
	buf[1] = 0; /* not a tail call */
}

static void test_guard_page(void **state)
{
	/* unbounded recursion must die on the guard page, not scribble over
	 * whatever is mapped below the stack */
	enum dxl_co_switch impl = impl_of(state);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(20);
		struct dxl_sched_cfg cfg;
		dxl_sched_cfg_init(&cfg);
		cfg.switch_impl = impl;
		cfg.stack_size = 64u << 10;
		struct dxl_sched *s = NULL;
		if (dxl_sched_new(&cfg, NULL, &s) ||
		    dxl_sched_spawn(s, overflow_fn, NULL, NULL))
			_exit(2);
		dxl_sched_run(s);
		_exit(0); /* not reached if the guard page works */
	}
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	print_message("stack overflow child: %s %d\n",
		      WIFSIGNALED(st) ? "signal" : "exit",
		      WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	/* SIGSEGV natively; under ASan its report ends in abort or exit 1 */
	assert_true(WIFSIGNALED(st) ? WTERMSIG(st) != SIGALRM
				    : (WEXITSTATUS(st) != 0 &&
				       WEXITSTATUS(st) != 2));
}

/* ---- floating-point control state is per coroutine ------------------------ */

static int fp_seen[2];

static void fp_up(void *p)
{
	fesetround(FE_UPWARD);
	dxl_co_yield();
	fp_seen[0] = fegetround();
}

static void fp_check(void *p)
{
	fp_seen[1] = fegetround();
	dxl_co_yield();
}

static void test_fp_control_preserved(void **state)
{
	struct dxl_sched *s = new_sched(state, 2, 0, NULL);
	assert_int_equal(fegetround(), FE_TONEAREST);
	assert_int_equal(dxl_sched_spawn(s, fp_up, NULL, NULL), 0);
	assert_int_equal(dxl_sched_spawn(s, fp_check, NULL, NULL), 0);
	assert_int_equal(dxl_sched_run(s), 0);
	assert_int_equal(fp_seen[0], FE_UPWARD);     /* kept across its yield */
	assert_int_equal(fp_seen[1], FE_TONEAREST);  /* not leaked to the other */
	assert_int_equal(fegetround(), FE_TONEAREST); /* nor to the scheduler */
	dxl_sched_delete(&s);
}

/* ---- suspend, resume, deadlines, stop -------------------------------------- */

struct sr {
	struct dxl_sched *s;
	uint32_t sleeper;
	int r_sleeper, r_timed, r_token, r_sleep;
	uint64_t timed_ns, sleep_ns;
};

static void sr_sleeper(void *p)
{
	struct sr *x = p;
	x->r_sleeper = dxl_co_suspend(0); /* until the waker resumes it */
}

static void sr_timed(void *p)
{
	struct sr *x = p;
	uint64_t t0 = dxl_now_ns();
	x->r_timed = dxl_co_suspend(t0 + 20 * 1000000ull);
	x->timed_ns = dxl_now_ns() - t0;
}

static void sr_token(void *p)
{
	struct sr *x = p;
	/* a resume that arrives while we run is kept for the next suspend */
	assert_int_equal(dxl_co_resume(x->s, dxl_co_id(NULL)), 0);
	x->r_token = dxl_co_suspend(0);
	uint64_t t0 = dxl_now_ns();
	x->r_sleep = dxl_co_sleep_ms(15);
	x->sleep_ns = dxl_now_ns() - t0;
}

static void sr_waker(void *p)
{
	struct sr *x = p;
	dxl_co_yield(); /* let the sleeper park first */
	assert_int_equal(dxl_co_resume(x->s, x->sleeper), 0);
}

static void test_suspend_resume_deadline(void **state)
{
	struct dxl_sched *s = new_sched(state, 4, 0, NULL);
	struct sr x = {.s = s, .r_sleeper = 1, .r_timed = 1, .r_token = 1};
	assert_int_equal(dxl_sched_spawn(s, sr_sleeper, &x, &x.sleeper), 0);
	assert_int_equal(dxl_sched_spawn(s, sr_timed, &x, NULL), 0);
	assert_int_equal(dxl_sched_spawn(s, sr_token, &x, NULL), 0);
	assert_int_equal(dxl_sched_spawn(s, sr_waker, &x, NULL), 0);
	assert_int_equal(dxl_sched_run(s), 0);
	assert_int_equal(x.r_sleeper, 0);
	assert_int_equal(x.r_timed, DXL_E_TIMEDOUT);
	assert_true(x.timed_ns >= 20 * 1000000ull);
	assert_int_equal(x.r_token, 0);
	assert_int_equal(x.r_sleep, 0);
	assert_true(x.sleep_ns >= 15 * 1000000ull);
	struct dxl_sched_stats st;
	dxl_sched_stats(s, &st);
	assert_true(st.timeouts >= 2);
	assert_true(st.idle_waits >= 1); /* it slept instead of spinning */
	assert_int_equal(dxl_co_resume(NULL, 0), DXL_E_INVAL);
	dxl_sched_delete(&s);
}

static void forever_fn(void *p)
{
	dxl_co_suspend(0);
}

static void test_deadlock_detected(void **state)
{
	/* without a ctx, nothing can ever wake a coroutine suspended with
	 * no deadline: run reports it instead of hanging */
	struct dxl_sched *s = new_sched(state, 2, 0, NULL);
	assert_int_equal(dxl_sched_spawn(s, forever_fn, NULL, NULL), 0);
	assert_int_equal(dxl_sched_run(s), DXL_E_STATE);
	assert_non_null(strstr(dxl_errmsg(), "nothing can wake"));
	assert_int_equal(dxl_sched_live(s), 1);
	dxl_sched_delete(&s); /* abandons it */
}

static int stopper_rounds;

static void stopper_fn(void *p)
{
	struct dxl_sched *s = p;
	for (;;) {
		if (++stopper_rounds == 5)
			dxl_sched_stop(s);
		dxl_co_yield();
	}
}

static void nested_fn(void *p)
{
	struct dxl_sched *s = p;
	assert_int_equal(dxl_sched_run_once(s, 0), DXL_E_STATE);
	assert_int_equal(dxl_sched_run(s), DXL_E_STATE);
}

static void *stop_thread(void *p)
{
	struct timespec ts = {0, 30 * 1000000};
	nanosleep(&ts, NULL);
	dxl_sched_stop(p);
	return NULL;
}

static void test_stop_and_nesting(void **state)
{
	struct dxl_sched *s = new_sched(state, 2, 0, NULL);
	stopper_rounds = 0;
	assert_int_equal(dxl_sched_spawn(s, stopper_fn, s, NULL), 0);
	assert_int_equal(dxl_sched_spawn(s, nested_fn, s, NULL), 0);
	assert_int_equal(dxl_sched_run(s), 0);
	assert_int_equal(stopper_rounds, 5);
	assert_int_equal(dxl_sched_live(s), 1); /* stopped, not finished */
	dxl_sched_delete(&s);

	/* serve with nothing to do blocks (no spin) until another thread
	 * stops it; idle_wait_ms bounds how late it notices */
	struct dxl_sched_cfg cfg;
	dxl_sched_cfg_init(&cfg);
	cfg.switch_impl = impl_of(state);
	cfg.idle_wait_ms = 5;
	assert_int_equal(dxl_sched_new(&cfg, NULL, &s), 0);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, stop_thread, s), 0);
	assert_int_equal(dxl_sched_serve(s), 0);
	pthread_join(t, NULL);
	struct dxl_sched_stats st;
	dxl_sched_stats(s, &st);
	assert_true(st.idle_waits >= 1);
	/* every round but possibly the last slept: no spinning */
	assert_true(st.idle_waits + 1 >= st.rounds);
	assert_true(st.rounds < 10000);
	dxl_sched_delete(&s);
}

/* ---- completion routing with injected completions -------------------------- */

struct rt {
	struct dxl_sched *s;
	uint32_t waiter;
	struct dxl_wc got[4];
	int r_first, r_second, r_timeout, buffered_before;
	uint64_t wrid_seen;
};

static void rt_waiter(void *p)
{
	struct rt *x = p;
	x->wrid_seen = dxl_co_wrid(7);
	/* "posts" three requests, waits for all three */
	x->r_first = dxl_co_wait_completions(3, x->got, -1);
	/* a completion delivered before we wait is already buffered */
	dxl_co_yield();
	x->buffered_before = dxl_co_completions_buffered();
	x->r_second = dxl_co_wait_completions(1, &x->got[3], 1000);
	/* nothing more comes: a bounded wait times out */
	x->r_timeout = dxl_co_wait_completions(1, NULL, 10);
}

static void rt_deliverer(void *p)
{
	struct rt *x = p;
	struct dxl_wc wc = {.opcode = DXL_WC_READ, .status = DXL_WC_SUCCESS};
	dxl_co_yield(); /* the waiter is parked now */
	for (int i = 0; i < 3; i++) {
		wc.wr_id = dxl_co_wrid_make(x->waiter, 100 + i);
		wc.status = i == 1 ? DXL_WC_REM_ACCESS_ERR : DXL_WC_SUCCESS;
		assert_int_equal(dxl_sched_deliver(x->s, &wc), 0);
		if (i < 2) /* two of three: the waiter must stay parked */
			assert_int_equal(x->r_first, -1);
	}
	wc.wr_id = dxl_co_wrid_make(x->waiter, 200);
	wc.status = DXL_WC_PEER_UNREACHABLE;
	assert_int_equal(dxl_sched_deliver(x->s, &wc), 0);
}

static void test_completion_routing(void **state)
{
	struct dxl_sched *s = new_sched(state, 4, 0, NULL);
	struct rt x = {.s = s, .r_first = -1, .r_second = -1, .r_timeout = -1};
	assert_int_equal(dxl_sched_spawn(s, rt_waiter, &x, &x.waiter), 0);
	assert_int_equal(dxl_sched_spawn(s, rt_deliverer, &x, NULL), 0);
	assert_int_equal(dxl_sched_run(s), 0);

	uint32_t id;
	uint64_t tag;
	assert_int_equal(dxl_co_wrid_decode(x.wrid_seen, &id, &tag), 0);
	assert_int_equal(id, x.waiter);
	assert_int_equal(tag, 7);
	assert_int_equal(x.r_first, 1); /* one of three failed */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(dxl_co_wrid_decode(x.got[i].wr_id, &id, &tag), 0);
		assert_int_equal(tag, 100 + i); /* arrival order */
	}
	assert_int_equal(x.got[1].status, DXL_WC_REM_ACCESS_ERR);
	assert_int_equal(x.buffered_before, 1);
	assert_int_equal(x.r_second, 1);
	assert_int_equal(x.got[3].status, DXL_WC_PEER_UNREACHABLE);
	assert_int_equal(x.r_timeout, DXL_E_TIMEDOUT);

	/* the waiter is gone: its id is stale now */
	struct dxl_wc wc = {.wr_id = dxl_co_wrid_make(x.waiter, 1)};
	assert_int_equal(dxl_sched_deliver(s, &wc), DXL_E_NOENT);
	wc.wr_id = 42; /* class 0: nobody's */
	assert_int_equal(dxl_sched_deliver(s, &wc), DXL_E_NOENT);
	wc.wr_id = DXL_WRID_CLASS_RPC << DXL_WRID_CLASS_SHIFT; /* no rpc layer */
	assert_int_equal(dxl_sched_deliver(s, &wc), DXL_E_NOENT);
	assert_int_equal(dxl_sched_deliver(s, NULL), DXL_E_INVAL);
	struct dxl_sched_stats st;
	dxl_sched_stats(s, &st);
	assert_int_equal(st.wc_routed, 4);
	assert_int_equal(st.wc_stale, 1);
	assert_int_equal(st.wc_unrouted, 2);
	dxl_sched_delete(&s);

	/* the wr_id helpers: tag truncation, class check */
	uint64_t w = dxl_co_wrid_make(0xabcdef, DXL_CO_WRID_TAG_MAX + 5);
	assert_int_equal(dxl_co_wrid_decode(w, &id, &tag), 0);
	assert_int_equal(id, 0xabcdef);
	assert_int_equal(tag, 4);
	assert_int_equal(dxl_co_wrid_decode(0, &id, &tag), DXL_E_INVAL);
}

/* many completions for one coroutine: the buffer grows, nothing is lost */
static void burst_waiter(void *p)
{
	int *errs = p;
	struct dxl_wc wc[500];
	*errs = dxl_co_wait_completions(500, wc, -1);
	for (int i = 0; i < 500; i++) {
		uint64_t tag = 0;
		dxl_co_wrid_decode(wc[i].wr_id, NULL, &tag);
		if (tag != (uint64_t)i)
			*errs = -1000 - i;
	}
}

static void test_completion_burst(void **state)
{
	struct dxl_sched *s = new_sched(state, 2, 0, NULL);
	int errs = -1;
	uint32_t id;
	assert_int_equal(dxl_sched_spawn(s, burst_waiter, &errs, &id), 0);
	/* drive the rounds by hand: park the waiter, then inject */
	assert_true(dxl_sched_run_once(s, 0) >= 1);
	for (int i = 0; i < 500; i++) {
		struct dxl_wc wc = {.wr_id = dxl_co_wrid_make(id, (uint64_t)i),
				    .status = i % 50 == 0 ? DXL_WC_FLUSHED
							  : DXL_WC_SUCCESS};
		assert_int_equal(dxl_sched_deliver(s, &wc), 0);
	}
	assert_int_equal(dxl_sched_run(s), 0);
	assert_int_equal(errs, 10); /* the 10 FLUSHED ones, all kept */
	dxl_sched_delete(&s);
}

/* ---- completion routing over a real fabric --------------------------------- */

struct fr {
	struct dxl_ctx *ctx;
	struct dxl_mr *mr;     /* local buffer */
	struct dxl_mr_desc rd; /* target region */
	const char *addr;
	int r_ok, r_bad, n_ok_err;
	struct dxl_wc wc[8];
	uint64_t readback;
};

static void fr_fn(void *p)
{
	struct fr *x = p;
	struct dxl_qp *qp = NULL;
	int r = dxl_qp_connect(x->ctx, x->addr, 1, &qp);
	if (r) {
		print_message("connect: %s\n", dxl_errmsg());
		x->r_ok = r;
		return;
	}
	uint64_t *buf = dxl_mr_addr(x->mr);
	uint32_t lkey = dxl_mr_lkey(x->mr);
	/* OR + DB: 4 WRITEs (only the last signalled) and a READ, one chain */
	struct dxl_wr wr[5];
	memset(wr, 0, sizeof(wr));
	for (int i = 0; i < 4; i++) {
		buf[i] = 0x1111111111111111ull * (uint64_t)(i + 1);
		wr[i] = (struct dxl_wr){.wr_id = dxl_co_wrid((uint64_t)i),
					.op = DXL_WR_WRITE,
					.flags = i == 3 ? DXL_WR_SIGNALED : 0,
					.local = &buf[i], .len = 8, .lkey = lkey,
					.remote_addr = x->rd.addr + 8u * (unsigned)i,
					.rkey = x->rd.rkey, .next = &wr[i + 1]};
	}
	wr[4] = (struct dxl_wr){.wr_id = dxl_co_wrid(4), .op = DXL_WR_READ,
				.flags = DXL_WR_SIGNALED, .local = &buf[8],
				.len = 8, .lkey = lkey,
				.remote_addr = x->rd.addr + 16, .rkey = x->rd.rkey};
	r = dxl_qp_post(qp, wr, NULL);
	if (r) {
		x->r_ok = r;
		dxl_qp_delete(&qp);
		return;
	}
	x->r_ok = dxl_co_wait_completions(2, x->wc, 10000);
	x->readback = buf[8];
	/* a READ with a wrong rkey: the error completion reaches us */
	struct dxl_wr bad = {.wr_id = dxl_co_wrid(9), .op = DXL_WR_READ,
			     .flags = DXL_WR_SIGNALED, .local = &buf[9], .len = 8,
			     .lkey = lkey, .remote_addr = x->rd.addr,
			     .rkey = x->rd.rkey ^ 0x5a5a};
	r = dxl_qp_post(qp, &bad, NULL);
	x->r_bad = r ? r : dxl_co_wait_completions(1, &x->wc[2], 10000);
	dxl_qp_delete(&qp);
}

static void test_routing_real_fabric(void **state)
{
	enum dxl_co_switch impl = impl_of(state);
	struct dxl_fabric_cfg fcfg;
	dxlt_fabric_cfg_from_env(&fcfg);
	struct dxl_fabric *f = NULL;
	int r = dxl_fabric_new(&fcfg, &f);
	if (r == DXL_E_NOTSUP || r == DXL_E_NODEV) {
		print_message("no usable fabric (%s): skipped\n", dxl_errmsg());
		skip();
	}
	assert_int_equal(r, 0);
	struct dxl_ctx *c0 = NULL, *c1 = NULL;
	assert_int_equal(dxl_ctx_new(f, 0, &c0), 0);
	assert_int_equal(dxl_ctx_new(f, 1, &c1), 0); /* target only */
	void *local = dxlt_alloc_pages(4096), *target = dxlt_alloc_pages(4096);
	assert_non_null(local);
	assert_non_null(target);
	struct fr x = {.ctx = c0, .addr = dxl_fabric_addr(f), .r_ok = -1,
		       .r_bad = -1};
	struct dxl_mr *tmr = NULL;
	assert_int_equal(dxl_mr_reg(f, local, 4096, DXL_MR_LOCAL_WRITE, &x.mr), 0);
	assert_int_equal(dxl_mr_reg(f, target, 4096,
				    DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE, &tmr),
			 0);
	dxl_mr_desc(tmr, &x.rd);

	struct dxl_sched_cfg cfg;
	dxl_sched_cfg_init(&cfg);
	cfg.switch_impl = impl;
	struct dxl_sched *s = NULL;
	assert_int_equal(dxl_sched_new(&cfg, c0, &s), 0);
	assert_ptr_equal(dxl_sched_ctx(s), c0);
	assert_int_equal(dxl_sched_spawn(s, fr_fn, &x, NULL), 0);
	assert_int_equal(dxl_sched_run(s), 0);

	assert_int_equal(x.r_ok, 0); /* the two signalled ones, both fine */
	uint64_t tag;
	assert_int_equal(dxl_co_wrid_decode(x.wc[0].wr_id, NULL, &tag), 0);
	assert_int_equal(tag, 3);
	assert_int_equal(dxl_co_wrid_decode(x.wc[1].wr_id, NULL, &tag), 0);
	assert_int_equal(tag, 4);
	assert_int_equal(x.readback, 0x3333333333333333ull);
	assert_int_equal(((uint64_t *)target)[3], 0x4444444444444444ull);
	assert_int_equal(x.r_bad, 1);
	assert_int_equal(x.wc[2].status, DXL_WC_REM_ACCESS_ERR);
	struct dxl_sched_stats st;
	dxl_sched_stats(s, &st);
	assert_true(st.polls >= 1);
	assert_true(st.wc_routed >= 3);
	/* nothing ready, nothing in flight: a round blocks in dxl_ctx_wait
	 * (then times out) instead of spinning */
	uint64_t waits = st.idle_waits;
	assert_int_equal(dxl_sched_run_once(s, 20), 0);
	dxl_sched_stats(s, &st);
	assert_int_equal(st.idle_waits, waits + 1);

	dxl_sched_delete(&s);
	dxl_mr_dereg(&x.mr);
	dxl_mr_dereg(&tmr);
	dxl_ctx_delete(&c1);
	dxl_ctx_delete(&c0);
	dxl_fabric_delete(&f);
	dxlt_free_pages(local, 4096);
	dxlt_free_pages(target, 4096);
}

/* ---- switch cost (printed, never asserted) --------------------------------- */

static void spin_yield(void *p)
{
	for (long i = *(long *)p; i > 0; i--)
		dxl_co_yield();
}

static void cost_inside(void *p)
{
	double ns;
	*(int *)p = dxl_co_switch_cost(DXL_CO_SWITCH_DEFAULT, 10, &ns);
}

static void test_switch_cost(void **state)
{
	enum dxl_co_switch impl = impl_of(state);
	/* the bare switch (the diagnostic dxl-bench-co uses) */
	double raw = -1;
	assert_int_equal(dxl_co_switch_cost(impl, 200000, &raw), 0);
	assert_true(raw > 0);
	assert_int_equal(dxl_co_switch_cost(impl, 0, &raw), DXL_E_INVAL);
	assert_int_equal(dxl_co_switch_cost(impl, 10, NULL), DXL_E_INVAL);

	/* a yield round trip through the scheduler */
	struct dxl_sched *s = new_sched(state, 2, 0, NULL);
	long n = 200000;
	assert_int_equal(dxl_sched_spawn(s, spin_yield, &n, NULL), 0);
	int inside = 1;
	assert_int_equal(dxl_sched_spawn(s, cost_inside, &inside, NULL), 0);
	uint64_t t0 = dxl_now_ns();
	assert_int_equal(dxl_sched_run(s), 0);
	uint64_t dt = dxl_now_ns() - t0;
	assert_int_equal(inside, DXL_E_STATE);
	struct dxl_sched_stats st;
	dxl_sched_stats(s, &st);
	assert_int_equal(st.switches, 2ull * (uint64_t)(n + 1) + 2);
	print_message("%s switch: %.1f ns bare; %.1f ns per yield round trip "
		      "(2 switches + scheduler), %.1f ns per switch "
		      "(not asserted; see dxl-bench-co)\n",
		      dxl_co_switch_name(dxl_sched_switch_impl(s)), raw,
		      (double)dt / (double)n, (double)dt / (double)st.switches);
	dxl_sched_delete(&s);
}

#define BOTH(fn)                                                              \
	cmocka_unit_test_prestate_setup_teardown(fn, setup, teardown,         \
						 &impl_asm),                  \
	cmocka_unit_test_prestate_setup_teardown(fn, setup, teardown, &impl_uc)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cfg_errors),
		cmocka_unit_test(test_outside_coroutine),
		BOTH(test_interleave_round_robin),
		BOTH(test_slot_reuse),
		BOTH(test_spawn_from_coroutine),
		BOTH(test_stack_isolation_deep_recursion),
		BOTH(test_guard_page),
		BOTH(test_fp_control_preserved),
		BOTH(test_suspend_resume_deadline),
		BOTH(test_deadlock_detected),
		BOTH(test_stop_and_nesting),
		BOTH(test_completion_routing),
		BOTH(test_completion_burst),
		BOTH(test_routing_real_fabric),
		BOTH(test_switch_cost),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
