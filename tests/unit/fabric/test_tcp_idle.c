/* test_tcp_idle.c -- an idle tcp fabric does not burn a core (a resource check) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <sys/resource.h>
#include <time.h>

#include "test_tcp_util.h"

/*
 * Two fabrics (two NIC threads), an active QP and its passive QP, and two
 * owner threads blocked in dxl_ctx_wait: the whole process must use well
 * under a core while nothing happens. Not a speed test: the bound (5% of a
 * core over 1.5 s) is far above the expected ~0% and only fails if
 * something spins.
 */

struct waiter {
	struct dxl_ctx *c;
	int ret;
};

static void *wait_main(void *arg)
{
	struct waiter *w = arg;
	w->ret = dxl_ctx_wait(w->c, 2500);
	return NULL;
}

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void test_idle_cpu(void **state)
{
	struct dxl_fabric *fa = tt_fabric(1, 0, 0), *fb = tt_fabric(2, 0, 0);
	assert_non_null(fa);
	assert_non_null(fb);
	struct dxl_ctx *ca, *cb;
	struct dxl_qp *qp;
	assert_int_equal(dxl_ctx_new(fa, 0, &ca), 0);
	assert_int_equal(dxl_ctx_new(fb, 0, &cb), 0);
	assert_int_equal(dxl_qp_connect(ca, dxl_fabric_addr(fb), 0, &qp), 0);
	uint8_t rb[16];
	assert_int_equal(dxl_ctx_post_recv(cb, rb, sizeof(rb), 0, 1), 0);
	struct dxl_wr w = {.op = DXL_WR_SEND, .local = "x", .len = 1,
			   .flags = DXL_WR_INLINE | DXL_WR_SIGNALED};
	struct dxl_wc wc;
	assert_int_equal(tt_do(qp, ca, &w, &wc), 0);
	assert_int_equal(tt_wait_wc(cb, &wc, TT_WAIT_MS), 1); /* passive QP up */
	struct waiter wa = {.c = ca}, wb = {.c = cb};
	pthread_t ta, tb;
	pthread_create(&ta, NULL, wait_main, &wa);
	pthread_create(&tb, NULL, wait_main, &wb);
	struct timespec settle = {0, 100 * 1000 * 1000};
	nanosleep(&settle, NULL); /* let every spin phase end */
	double c0 = cpu_s();
	uint64_t t0 = dxl_now_ns();
	struct timespec win = {1, 500 * 1000 * 1000};
	nanosleep(&win, NULL); /* the measuring window, not a synchronisation */
	double used = cpu_s() - c0;
	double wall = (double)(dxl_now_ns() - t0) / 1e9;
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	assert_int_equal(wa.ret, DXL_E_TIMEDOUT);
	assert_int_equal(wb.ret, DXL_E_TIMEDOUT);
	double pct = 100.0 * used / wall;
	printf("  idle: %.3f ms of CPU in %.3f s = %.2f%% of a core "
	       "(2 NIC threads + 2 waiting owners)\n", used * 1e3, wall, pct);
	assert_true(pct < 5.0);
	dxl_fabric_delete(&fa);
	dxl_fabric_delete(&fb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_idle_cpu),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
