/* test_cursor_age.c -- dxl_rcv_watch_age: how long a cursor stayed unchanged, on the looking host's monotonic clock (ZooKeeper's mtime compared for equality only); the TTL rule that uses it, with skewed clocks: tests/unit/replica/test_cursor_prune.c */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <string.h>

#include "common/common.h"
#include "dxl/recovery.h"

static void test_set_again_restarts(void **state)
{
	(void)state;
	struct dxl_rcv_watch w;
	memset(&w, 0, sizeof(w));
	/* a live node that sets its cursor every 2.5 s (a new mtime each
	 * time, the same value): never old */
	uint64_t stamp = 100;
	for (uint64_t t = 0; t < 60000; t += 1000) {
		if (t % 2500 < 1000)
			stamp += 2500;
		assert_true(dxl_rcv_watch_age(&w, 3, stamp, 9, t) < 2500);
		dxl_rcv_watch_sweep(&w);
	}
	/* a new value with the same mtime (ms granularity): anew */
	assert_true(dxl_rcv_watch_age(&w, 3, stamp, 9, 70000) >= 10000);
	assert_int_equal(dxl_rcv_watch_age(&w, 3, stamp, 10, 70001), 0);
	/* a key not observed in a complete listing is forgotten: seen again
	 * later, its age starts from then (never from an old look) */
	dxl_rcv_watch_sweep(&w);
	dxl_rcv_watch_sweep(&w);
	assert_int_equal(w.n, 0);
	assert_int_equal(dxl_rcv_watch_age(&w, 3, stamp, 10, 90000), 0);
	assert_int_equal(dxl_rcv_watch_age(&w, 3, stamp, 10, 93000), 3000);
	/* a full table: new keys are never old */
	memset(&w, 0, sizeof(w));
	for (uint64_t k = 0; k < DXL_RCV_WATCH_MAX; k++)
		assert_int_equal(dxl_rcv_watch_age(&w, k, 1, 1, 0), 0);
	assert_int_equal(dxl_rcv_watch_age(&w, 1000, 1, 1, 0), 0);
	assert_int_equal(dxl_rcv_watch_age(&w, 1000, 1, 1, 1000000), 0);
	assert_int_equal(dxl_rcv_watch_age(&w, 5, 1, 1, 1000000), 1000000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_set_again_restarts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
