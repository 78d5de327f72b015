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

/* issue 20: a delete is a version of its own; absence reads read it */
static void test_deletes_and_absence(void **state)
{
	(void)state;
	char why[512];
	struct dxlt_history *h = dxlt_history_new();
	dxlt_history_read_absent(h, 1, 0, 7, 0);  /* insert: was absent */
	dxlt_history_write(h, 1, 0, 7, 2);
	dxlt_history_read(h, 2, 0, 7, 2);
	dxlt_history_delete(h, 2, 0, 7, 4);
	dxlt_history_read_absent(h, 3, 0, 7, 4);  /* "no such key" */
	dxlt_history_read_absent(h, 4, 0, 7, 5);  /* its tombstone: an aborted
						     insert's, past the delete */
	dxlt_history_write(h, 4, 0, 7, 8);        /* inserted again */
	struct dxlt_history_stats st;
	assert_int_equal(dxlt_history_check_ex(h, why, sizeof(why), &st), 0);
	assert_int_equal(st.deletes, 1);
	assert_int_equal(st.absent_reads, 3);
	/* write skew through an absence: T4 read key 9 initial, T5 read key 7
	 * absent (before T4's insert) and wrote key 9: T4 -rw-> T5 -rw-> T4 */
	dxlt_history_read(h, 4, 0, 9, 0);
	dxlt_history_read_absent(h, 5, 0, 7, 4);
	dxlt_history_write(h, 5, 0, 9, 2);
	assert_int_equal(check(h, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "rw"));
	dxlt_history_free(h);

	/* impossible reads */
	h = dxlt_history_new();
	dxlt_history_write(h, 1, 0, 7, 2);
	dxlt_history_read_absent(h, 2, 0, 7, 3); /* absent, but v2 is present */
	assert_int_equal(check(h, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "as absent"));
	dxlt_history_free(h);
	h = dxlt_history_new();
	dxlt_history_write(h, 1, 0, 7, 2);
	dxlt_history_delete(h, 2, 0, 7, 4);
	dxlt_history_read(h, 3, 0, 7, 4); /* a value at the tombstone */
	assert_int_equal(check(h, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "deleted"));
	dxlt_history_free(h);
}

/* real time: a transaction that began after another was acknowledged must
 * see it. A deleted key that comes back (a backup that never applied the
 * delete, promoted) is serializable without real time (the late reader
 * ordered first) and a cycle with it. */
static void test_real_time(void **state)
{
	(void)state;
	char why[512];
	for (int rt = 0; rt < 2; rt++) {
		struct dxlt_history *h = dxlt_history_new();
		dxlt_history_write(h, 1, 0, 7, 2);
		dxlt_history_read(h, 2, 0, 7, 2);
		dxlt_history_delete(h, 2, 0, 7, 4);
		dxlt_history_read(h, 3, 0, 7, 2); /* the deleted key, back */
		if (rt) {
			dxlt_history_txn(h, 1, 10, 20, false);
			dxlt_history_txn(h, 2, 30, 40, false);
			dxlt_history_txn(h, 3, 50, 60, false); /* after 2's ack */
		}
		struct dxlt_history_stats st;
		int r = dxlt_history_check_ex(h, why, sizeof(why), &st);
		if (!rt) {
			assert_int_equal(r, 0);
		} else {
			assert_int_equal(r, 1);
			assert_non_null(strstr(why, "rt"));
			assert_true(st.rt_edges > 0);
		}
		dxlt_history_free(h);
	}
	/* overlapping transactions impose nothing */
	struct dxlt_history *h = dxlt_history_new();
	dxlt_history_write(h, 1, 0, 7, 2);
	dxlt_history_read(h, 2, 0, 7, 0);
	dxlt_history_txn(h, 1, 10, 40, false);
	dxlt_history_txn(h, 2, 30, 50, false);
	assert_int_equal(check(h, why, sizeof(why)), 0);
	/* one that began after the ack and read the old version: a cycle */
	dxlt_history_read(h, 3, 0, 7, 0);
	dxlt_history_txn(h, 3, 41, 45, false);
	assert_int_equal(check(h, why, sizeof(why)), 1);
	dxlt_history_free(h);
}

/* unknown outcomes: counted iff someone read what they wrote */
static void test_maybe(void **state)
{
	(void)state;
	char why[512];
	struct dxlt_history_stats st;
	/* a lost update with a maybe that nobody read: left out, fine */
	struct dxlt_history *h = dxlt_history_new();
	dxlt_history_read(h, 1, 0, 7, 0);
	dxlt_history_write(h, 1, 0, 7, 2);
	dxlt_history_read(h, 2, 0, 7, 0);
	dxlt_history_write(h, 2, 0, 7, 4);
	dxlt_history_txn(h, 2, 0, 0, true);
	assert_int_equal(dxlt_history_check_ex(h, why, sizeof(why), &st), 0);
	assert_int_equal(st.maybe_out, 1);
	/* someone read its version: counted, and the cycle shows */
	dxlt_history_read(h, 3, 0, 7, 4);
	assert_int_equal(dxlt_history_check_ex(h, why, sizeof(why), &st), 1);
	assert_int_equal(st.maybe_in, 1);
	dxlt_history_free(h);
	/* a maybe whose version a committed transaction wrote did not commit
	 * (no "two writers"); the same for two committed ones is malformed */
	h = dxlt_history_new();
	dxlt_history_write(h, 1, 0, 7, 2);
	dxlt_history_write(h, 2, 0, 7, 2);
	dxlt_history_txn(h, 2, 0, 0, true);
	dxlt_history_read(h, 3, 0, 7, 2);
	assert_int_equal(dxlt_history_check_ex(h, why, sizeof(why), &st), 0);
	assert_int_equal(st.maybe_out, 1);
	dxlt_history_txn(h, 2, 0, 0, false);
	assert_int_equal(check(h, why, sizeof(why)), -1);
	dxlt_history_free(h);
	/* a maybe delete read as the absence: counted */
	h = dxlt_history_new();
	dxlt_history_write(h, 1, 0, 7, 2);
	dxlt_history_delete(h, 2, 0, 7, 4);
	dxlt_history_txn(h, 2, 0, 0, true);
	dxlt_history_read_absent(h, 3, 0, 7, 4);
	assert_int_equal(dxlt_history_check_ex(h, why, sizeof(why), &st), 0);
	assert_int_equal(st.maybe_in, 1);
	dxlt_history_free(h);
}

/* the issue 20 review's false alarms: an insert's absence read is at its
 * lock version - 1, past a maybe's delete (the evidence must use the last
 * write at or below it, not the exact version); a miss after a reclaimed
 * tombstone reports version 0 (not the initial state when the key was
 * deleted) */
static void test_review_false_alarms(void **state)
{
	(void)state;
	char why[512];
	struct dxlt_history_stats st;
	/* T1 wrote v2, maybe T2 deleted it (v4), T3 inserted v8 after an
	 * absence at 5 (its lock version 6 - 1): T2 committed */
	struct dxlt_history *h = dxlt_history_new();
	dxlt_history_write(h, 1, 0, 7, 2);
	dxlt_history_read(h, 2, 0, 7, 2);
	dxlt_history_delete(h, 2, 0, 7, 4);
	dxlt_history_txn(h, 2, 0, 0, true);
	dxlt_history_read_absent(h, 3, 0, 7, 5);
	dxlt_history_write(h, 3, 0, 7, 8);
	int r = dxlt_history_check_ex(h, why, sizeof(why), &st);
	if (r)
		fail_msg("false alarm: %s", why);
	assert_int_equal(st.maybe_in, 1);
	/* a maybe value write after the maybe delete: the delete still counts
	 * (the value write may be left out) */
	dxlt_history_write(h, 4, 0, 7, 6);
	dxlt_history_txn(h, 4, 0, 0, true);
	assert_int_equal(dxlt_history_check_ex(h, why, sizeof(why), &st), 0);
	assert_int_equal(st.maybe_in, 1);
	assert_int_equal(st.maybe_out, 1);
	dxlt_history_free(h);

	/* inserted, deleted, then a miss without a tombstone (reclaimed):
	 * version 0, by a transaction that began after both were acked */
	h = dxlt_history_new();
	dxlt_history_read_absent(h, 1, 0, 7, 1);
	dxlt_history_write(h, 1, 0, 7, 2);
	dxlt_history_read(h, 2, 0, 7, 2);
	dxlt_history_delete(h, 2, 0, 7, 4);
	dxlt_history_read_absent(h, 3, 0, 7, 0);
	dxlt_history_txn(h, 1, 10, 20, false);
	dxlt_history_txn(h, 2, 30, 40, false);
	dxlt_history_txn(h, 3, 50, 60, false);
	r = dxlt_history_check_ex(h, why, sizeof(why), &st);
	if (r)
		fail_msg("false alarm: %s", why);
	assert_int_equal(st.absent_unknown, 1);
	dxlt_history_free(h);

	/* a key never deleted: version 0 is its initial state -- write skew
	 * through it is still found (T1 read key 7 absent and wrote key 9, T2
	 * read key 9 initial and inserted key 7) */
	h = dxlt_history_new();
	dxlt_history_read_absent(h, 1, 0, 7, 0);
	dxlt_history_write(h, 1, 0, 9, 2);
	dxlt_history_read(h, 2, 0, 9, 0);
	dxlt_history_write(h, 2, 0, 7, 2);
	assert_int_equal(dxlt_history_check_ex(h, why, sizeof(why), &st), 1);
	assert_int_equal(st.absent_unknown, 0);
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
		cmocka_unit_test(test_deletes_and_absence),
		cmocka_unit_test(test_real_time),
		cmocka_unit_test(test_maybe),
		cmocka_unit_test(test_review_false_alarms),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
