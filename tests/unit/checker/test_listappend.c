/* test_listappend.c -- the list-append checker (tests/lib/listappend.h) on
 * histories whose answer is known */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "tests/lib/listappend.h"

#define X 10
#define Y 11

static int check(struct dxlt_la *h, struct dxlt_la_result *r)
{
	int ret = dxlt_la_check(h, r);
	print_message("    -> %d: %zu txns, %zu edges, %zu anomalies %s\n", ret, r->txns, r->edges,
		      r->anomalies, r->why);
	return ret;
}

/* T1 appends 1 to x; T2 reads [1], appends 2; final [1,2] */
static void test_serial(void **state)
{
	(void)state;
	struct dxlt_la *h = dxlt_la_new();
	dxlt_la_txn(h, 1, DXLT_LA_COMMITTED);
	dxlt_la_read(h, 1, X, NULL, 0);
	dxlt_la_append(h, 1, X, 1);
	dxlt_la_txn(h, 2, DXLT_LA_COMMITTED);
	dxlt_la_read(h, 2, X, (uint32_t[]){1}, 1);
	dxlt_la_append(h, 2, X, 2);
	dxlt_la_final(h, X, (uint32_t[]){1, 2}, 2);
	struct dxlt_la_result r;
	assert_int_equal(check(h, &r), 0);
	assert_int_equal(r.txns, 2);
	assert_true(r.edges >= 3);
	dxlt_la_free(h);
}

/* both read x = [], both append: T2's read misses T1's append that comes
 * first: T2 -rw-> T1 -ww-> T2 */
static void test_lost_update(void **state)
{
	(void)state;
	struct dxlt_la *h = dxlt_la_new();
	dxlt_la_txn(h, 1, DXLT_LA_COMMITTED);
	dxlt_la_read(h, 1, X, NULL, 0);
	dxlt_la_append(h, 1, X, 1);
	dxlt_la_txn(h, 2, DXLT_LA_COMMITTED);
	dxlt_la_read(h, 2, X, NULL, 0);
	dxlt_la_append(h, 2, X, 2);
	dxlt_la_final(h, X, (uint32_t[]){1, 2}, 2);
	struct dxlt_la_result r;
	assert_int_equal(check(h, &r), 1);
	assert_non_null(strstr(r.why, "cycle"));
	dxlt_la_free(h);
}

/* T1 reads x = [] and appends to y; T2 reads y = [] and appends to x */
static void test_write_skew(void **state)
{
	(void)state;
	struct dxlt_la *h = dxlt_la_new();
	dxlt_la_txn(h, 1, DXLT_LA_COMMITTED);
	dxlt_la_read(h, 1, X, NULL, 0);
	dxlt_la_append(h, 1, Y, 1);
	dxlt_la_txn(h, 2, DXLT_LA_COMMITTED);
	dxlt_la_read(h, 2, Y, NULL, 0);
	dxlt_la_append(h, 2, X, 2);
	dxlt_la_final(h, X, (uint32_t[]){2}, 1);
	dxlt_la_final(h, Y, (uint32_t[]){1}, 1);
	struct dxlt_la_result r;
	assert_int_equal(check(h, &r), 1);
	assert_non_null(strstr(r.why, "rw"));
	dxlt_la_free(h);
}

/* a read-only transaction sees T1's append to x but not to y (T1 wrote
 * both): T1 -wr-> R -rw-> T1 */
static void test_fractured_read(void **state)
{
	(void)state;
	struct dxlt_la *h = dxlt_la_new();
	dxlt_la_txn(h, 1, DXLT_LA_COMMITTED);
	dxlt_la_append(h, 1, X, 1);
	dxlt_la_append(h, 1, Y, 2);
	dxlt_la_txn(h, 3, DXLT_LA_COMMITTED);
	dxlt_la_read(h, 3, X, (uint32_t[]){1}, 1);
	dxlt_la_read(h, 3, Y, NULL, 0);
	dxlt_la_final(h, X, (uint32_t[]){1}, 1);
	dxlt_la_final(h, Y, (uint32_t[]){2}, 1);
	struct dxlt_la_result r;
	assert_int_equal(check(h, &r), 1);
	assert_non_null(strstr(r.why, "cycle"));
	dxlt_la_free(h);
}

static void test_aborted_and_lost(void **state)
{
	(void)state;
	/* an aborted transaction's element is visible (G1a) */
	struct dxlt_la *h = dxlt_la_new();
	dxlt_la_txn(h, 1, DXLT_LA_ABORTED);
	dxlt_la_append(h, 1, X, 1);
	dxlt_la_final(h, X, (uint32_t[]){1}, 1);
	struct dxlt_la_result r;
	assert_int_equal(check(h, &r), 1);
	assert_non_null(strstr(r.why, "G1a"));
	dxlt_la_free(h);
	/* a committed append missing */
	h = dxlt_la_new();
	dxlt_la_txn(h, 1, DXLT_LA_COMMITTED);
	dxlt_la_append(h, 1, X, 1);
	dxlt_la_txn(h, 2, DXLT_LA_COMMITTED);
	dxlt_la_append(h, 2, X, 2);
	dxlt_la_final(h, X, (uint32_t[]){2}, 1);
	assert_int_equal(check(h, &r), 1);
	assert_non_null(strstr(r.why, "lost"));
	dxlt_la_free(h);
	/* a read that is not a prefix of the final list */
	h = dxlt_la_new();
	dxlt_la_txn(h, 1, DXLT_LA_COMMITTED);
	dxlt_la_append(h, 1, X, 1);
	dxlt_la_txn(h, 2, DXLT_LA_COMMITTED);
	dxlt_la_append(h, 2, X, 2);
	dxlt_la_txn(h, 3, DXLT_LA_COMMITTED);
	dxlt_la_read(h, 3, X, (uint32_t[]){2}, 1);
	dxlt_la_final(h, X, (uint32_t[]){1, 2}, 2);
	assert_int_equal(check(h, &r), 1);
	assert_non_null(strstr(r.why, "prefix"));
	dxlt_la_free(h);
}

static void test_unknown_outcomes(void **state)
{
	(void)state;
	struct dxlt_la *h = dxlt_la_new();
	/* unknown, seen whole: it committed */
	dxlt_la_txn(h, 1, DXLT_LA_UNKNOWN);
	dxlt_la_append(h, 1, X, 1);
	dxlt_la_append(h, 1, Y, 2);
	/* unknown, not seen: it did not */
	dxlt_la_txn(h, 2, DXLT_LA_UNKNOWN);
	dxlt_la_append(h, 2, X, 3);
	dxlt_la_txn(h, 3, DXLT_LA_COMMITTED);
	dxlt_la_read(h, 3, X, (uint32_t[]){1}, 1);
	dxlt_la_append(h, 3, X, 4);
	dxlt_la_final(h, X, (uint32_t[]){1, 4}, 2);
	dxlt_la_final(h, Y, (uint32_t[]){2}, 1);
	struct dxlt_la_result r;
	assert_int_equal(check(h, &r), 0);
	assert_int_equal(r.unknown_in, 1);
	assert_int_equal(r.unknown_out, 1);
	dxlt_la_free(h);
	/* unknown, seen in part: not atomic */
	h = dxlt_la_new();
	dxlt_la_txn(h, 1, DXLT_LA_UNKNOWN);
	dxlt_la_append(h, 1, X, 1);
	dxlt_la_append(h, 1, Y, 2);
	dxlt_la_final(h, X, (uint32_t[]){1}, 1);
	dxlt_la_final(h, Y, NULL, 0);
	assert_int_equal(check(h, &r), 1);
	assert_non_null(strstr(r.why, "partly"));
	dxlt_la_free(h);
}

static void test_malformed(void **state)
{
	(void)state;
	struct dxlt_la *h = dxlt_la_new();
	dxlt_la_txn(h, 1, DXLT_LA_COMMITTED);
	dxlt_la_append(h, 1, X, 1);
	dxlt_la_txn(h, 2, DXLT_LA_COMMITTED);
	dxlt_la_append(h, 2, X, 1);
	struct dxlt_la_result r;
	assert_int_equal(dxlt_la_check(h, &r), -1);
	assert_non_null(strstr(r.why, "twice"));
	dxlt_la_free(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_serial),
		cmocka_unit_test(test_lost_update),
		cmocka_unit_test(test_write_skew),
		cmocka_unit_test(test_fractured_read),
		cmocka_unit_test(test_aborted_and_lost),
		cmocka_unit_test(test_unknown_outcomes),
		cmocka_unit_test(test_malformed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
