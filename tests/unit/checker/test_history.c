/* test_history.c -- the serializability checker (tests/lib/history.h) on
 * histories whose answer is known */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "tests/lib/history.h"

static int check(struct dxlt_history *h, char *why, size_t cap)
{
	return dxlt_history_check(h, why, cap, NULL, NULL);
}

/* two transactions, one after the other: T1 writes x v2; T2 reads x v2, writes x v4 */
static void test_serial(void **state)
{
	(void)state;
	struct dxlt_history *h = dxlt_history_new();
	dxlt_history_read(h, 1, 0, 10, 0);
	dxlt_history_write(h, 1, 0, 10, 2);
	dxlt_history_read(h, 2, 0, 10, 2);
	dxlt_history_write(h, 2, 0, 10, 4);
	char why[256];
	size_t nt = 0, ne = 0;
	assert_int_equal(dxlt_history_check(h, why, sizeof(why), &nt, &ne), 0);
	assert_int_equal(nt, 3); /* 0, 1, 2 */
	assert_true(ne >= 3);
	dxlt_history_free(h);
}

/* lost update: both read x v0, both write (v2 by T1, v4 by T2): T2 read v0
 * -rw-> T1 (T1 wrote the next version after v0), T1 -ww-> T2, and T1 read v0
 * -rw-> T1? no: T1 -rw-> T1 is a self edge; the cycle is T1 -ww-> T2 -rw-> T1 */
static void test_lost_update(void **state)
{
	(void)state;
	struct dxlt_history *h = dxlt_history_new();
	dxlt_history_read(h, 1, 0, 10, 0);
	dxlt_history_read(h, 2, 0, 10, 0);
	dxlt_history_write(h, 1, 0, 10, 2);
	dxlt_history_write(h, 2, 0, 10, 4);
	char why[256];
	assert_int_equal(check(h, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "cycle"));
	assert_non_null(strstr(why, "txn 1"));
	assert_non_null(strstr(why, "txn 2"));
	dxlt_history_free(h);
}

/* write skew: T1 reads x,y writes x; T2 reads x,y writes y (both from v0) */
static void test_write_skew(void **state)
{
	(void)state;
	struct dxlt_history *h = dxlt_history_new();
	dxlt_history_read(h, 1, 0, 1, 0);
	dxlt_history_read(h, 1, 0, 2, 0);
	dxlt_history_write(h, 1, 0, 1, 2);
	dxlt_history_read(h, 2, 0, 1, 0);
	dxlt_history_read(h, 2, 0, 2, 0);
	dxlt_history_write(h, 2, 0, 2, 2);
	char why[256];
	assert_int_equal(check(h, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "rw"));
	dxlt_history_free(h);
}

/* the same keys in different tables do not conflict */
static void test_tables_apart(void **state)
{
	(void)state;
	struct dxlt_history *h = dxlt_history_new();
	dxlt_history_read(h, 1, 0, 1, 0);
	dxlt_history_write(h, 1, 0, 1, 2);
	dxlt_history_read(h, 2, 1, 1, 0);
	dxlt_history_write(h, 2, 1, 1, 2);
	assert_int_equal(check(h, NULL, 0), 0);
	dxlt_history_free(h);
}

/* a read of a version nobody committed (a dirty read) and a version written
 * twice are malformed */
static void test_malformed(void **state)
{
	(void)state;
	char why[256];
	struct dxlt_history *h = dxlt_history_new();
	dxlt_history_read(h, 1, 0, 5, 6);
	assert_int_equal(check(h, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "no committed transaction wrote"));
	dxlt_history_free(h);
	h = dxlt_history_new();
	dxlt_history_write(h, 1, 0, 5, 2);
	dxlt_history_write(h, 2, 0, 5, 2);
	assert_int_equal(check(h, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "written by txn"));
	dxlt_history_free(h);
}

/* a long serial chain of read-modify-writes over a few keys, then one
 * transaction that read a stale version: exactly that creates a cycle */
static void test_long_chain(void **state)
{
	(void)state;
	struct dxlt_history *h = dxlt_history_new();
	uint64_t ver[4] = {0, 0, 0, 0};
	uint64_t t = 1;
	for (int i = 0; i < 2000; i++, t++) {
		uint64_t a = (uint64_t)i % 4, b = (uint64_t)(i * 7 + 1) % 4;
		dxlt_history_read(h, t, 0, a, ver[a]);
		dxlt_history_read(h, t, 0, b, ver[b]);
		ver[a] += 2;
		dxlt_history_write(h, t, 0, a, ver[a]);
	}
	assert_int_equal(check(h, NULL, 0), 0);
	/* a transaction that read key 0 at version 2 (long overwritten) and
	 * wrote key 1's next version: T -rw-> writer of v4 of key 0 ->...-> the
	 * writer of key 1's previous version -ww-> T */
	dxlt_history_read(h, t, 0, 0, 2);
	dxlt_history_write(h, t, 0, 1, ver[1] + 2);
	char why[512];
	assert_int_equal(check(h, why, sizeof(why)), 1);
	dxlt_history_free(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_serial),
		cmocka_unit_test(test_lost_update),
		cmocka_unit_test(test_write_skew),
		cmocka_unit_test(test_tables_apart),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_long_chain),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
