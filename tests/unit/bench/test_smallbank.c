/* test_smallbank.c -- the SmallBank workload: mix, hot set, each transaction's logic, the money check
 *
 * bench/lib objects are not linked into tests, so the module is included
 * whole. The logic runs against an in-memory bank (two arrays) whose get/put
 * callbacks log every call, so the read order, the write set and the delta
 * of each type are checked exactly, and callbacks can be made to fail at
 * the k-th call.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/lib/smallbank.c"

/* ---- an in-memory bank ---------------------------------------------------- */

#define NACCT 16

struct call {
	int put; /* 0 get, 1 put */
	uint32_t table;
	uint64_t acct;
	int64_t val;
};

struct bank {
	int64_t sav[NACCT], chk[NACCT];
	/* buffered puts, applied by bank_apply */
	struct call puts[8];
	int nputs;
	struct call log[16];
	int nlog;
	int fail_at; /* fail the call with this index (0-based), -1 never */
	int fail_code;
};

static int64_t *slot(struct bank *k, uint32_t table, uint64_t acct)
{
	assert_true(acct < NACCT);
	assert_true(table == DXLB_SB_SAVINGS || table == DXLB_SB_CHECKING);
	return table == DXLB_SB_SAVINGS ? &k->sav[acct] : &k->chk[acct];
}

static int bank_get(void *ctx, uint32_t table, uint64_t acct, int64_t *bal)
{
	struct bank *k = ctx;
	if (k->nlog == k->fail_at)
		return k->fail_code;
	k->log[k->nlog++] = (struct call){0, table, acct, 0};
	*bal = *slot(k, table, acct);
	return 0;
}

static int bank_put(void *ctx, uint32_t table, uint64_t acct, int64_t bal)
{
	struct bank *k = ctx;
	if (k->nlog == k->fail_at)
		return k->fail_code;
	k->log[k->nlog++] = (struct call){1, table, acct, bal};
	(void)slot(k, table, acct);
	k->puts[k->nputs++] = (struct call){1, table, acct, bal};
	return 0;
}

static const struct dxlb_sb_ops bank_ops = {bank_get, bank_put};

static void bank_init(struct bank *k, int64_t bal)
{
	memset(k, 0, sizeof(*k));
	for (int i = 0; i < NACCT; i++)
		k->sav[i] = k->chk[i] = bal;
	k->fail_at = -1;
}

static void bank_begin(struct bank *k)
{
	k->nputs = 0;
	k->nlog = 0;
}

static void bank_apply(struct bank *k)
{
	for (int i = 0; i < k->nputs; i++)
		*slot(k, k->puts[i].table, k->puts[i].acct) = k->puts[i].val;
	k->nputs = 0;
}

static int64_t bank_total(const struct bank *k)
{
	int64_t s = 0;
	for (int i = 0; i < NACCT; i++)
		s += k->sav[i] + k->chk[i];
	return s;
}

/* run t on k; check that the gets are exactly dxlb_sb_reads in order, come
 * before every put, and that every put is to a key read, at most once */
static int64_t run(struct bank *k, const struct dxlb_sb_txn *t)
{
	uint32_t tables[DXLB_SB_MAX_KEYS];
	uint64_t accts[DXLB_SB_MAX_KEYS];
	int n = dxlb_sb_reads(t, tables, accts);
	assert_true(n >= 1 && n <= DXLB_SB_MAX_KEYS);
	bank_begin(k);
	int64_t delta = 12345;
	assert_int_equal(dxlb_sb_exec(t, &bank_ops, k, &delta), 0);
	assert_true(k->nlog >= n);
	for (int i = 0; i < n; i++) {
		assert_int_equal(k->log[i].put, 0);
		assert_int_equal(k->log[i].table, tables[i]);
		assert_int_equal(k->log[i].acct, accts[i]);
	}
	for (int i = n; i < k->nlog; i++) {
		assert_int_equal(k->log[i].put, 1);
		int found = 0;
		for (int j = 0; j < n; j++)
			found += tables[j] == k->log[i].table && accts[j] == k->log[i].acct;
		assert_int_equal(found, 1);
		for (int j = n; j < i; j++)
			assert_false(k->log[j].table == k->log[i].table &&
				     k->log[j].acct == k->log[i].acct);
	}
	int64_t before = bank_total(k);
	bank_apply(k);
	assert_int_equal(bank_total(k), before + delta);
	return delta;
}

/* ---- generator ---------------------------------------------------------- */

static void test_cfg(void **state)
{
	struct dxlb_sb_cfg c;
	dxlb_sb_cfg_init(&c);
	assert_int_equal(c.accounts, 100000);
	assert_true(c.hot_frac == 0.04 && c.hot_prob == 0.90);
	assert_int_equal(c.init_balance, 10000);
	unsigned want[DXLB_SB_NTYPES] = {15, 15, 15, 25, 15, 15};
	assert_memory_equal(c.mix, want, sizeof(want));
	assert_int_equal(dxlb_sb_cfg_check(&c), 0);

	struct dxlb_sb_cfg b = c;
	b.accounts = 1;
	assert_int_equal(dxlb_sb_cfg_check(&b), DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "1 accounts"));
	b = c, b.hot_frac = 1.5;
	assert_int_equal(dxlb_sb_cfg_check(&b), DXL_E_INVAL);
	b = c, b.hot_prob = -0.1;
	assert_int_equal(dxlb_sb_cfg_check(&b), DXL_E_INVAL);
	b = c, b.init_balance = -1;
	assert_int_equal(dxlb_sb_cfg_check(&b), DXL_E_INVAL);
	b = c, memset(b.mix, 0, sizeof(b.mix));
	assert_int_equal(dxlb_sb_cfg_check(&b), DXL_E_INVAL);

	assert_string_equal(dxlb_sb_type_name(DXLB_SB_AMALGAMATE), "amalgamate");
	assert_string_equal(dxlb_sb_type_name(DXLB_SB_BALANCE), "balance");
	assert_string_equal(dxlb_sb_type_name(DXLB_SB_DEPOSIT_CHECKING), "deposit_checking");
	assert_string_equal(dxlb_sb_type_name(DXLB_SB_SEND_PAYMENT), "send_payment");
	assert_string_equal(dxlb_sb_type_name(DXLB_SB_TRANSACT_SAVINGS), "transact_savings");
	assert_string_equal(dxlb_sb_type_name(DXLB_SB_WRITE_CHECK), "write_check");
	assert_string_equal(dxlb_sb_type_name(DXLB_SB_NTYPES), "?");
	assert_string_equal(dxlb_sb_table_name(DXLB_SB_SAVINGS), "savings");
	assert_string_equal(dxlb_sb_table_name(DXLB_SB_CHECKING), "checking");
}

#define DRAWS 1000000

static void test_mix_and_hot_set(void **state)
{
	struct dxlb_sb_cfg c;
	dxlb_sb_cfg_init(&c);
	uint64_t rng = 42, hot = (uint64_t)(c.hot_frac * (double)c.accounts);
	uint64_t count[DXLB_SB_NTYPES] = {0}, hot_a = 0, hot_b = 0, two = 0;
	uint64_t min_acct = UINT64_MAX, max_acct = 0;
	for (int i = 0; i < DRAWS; i++) {
		struct dxlb_sb_txn t;
		dxlb_sb_gen(&c, &rng, &t);
		assert_true((unsigned)t.type < DXLB_SB_NTYPES);
		count[t.type]++;
		assert_true(t.a < c.accounts && t.b < c.accounts);
		min_acct = DXL_MIN(min_acct, t.a);
		max_acct = DXL_MAX(max_acct, t.a);
		hot_a += t.a < hot;
		if (t.type == DXLB_SB_AMALGAMATE || t.type == DXLB_SB_SEND_PAYMENT) {
			assert_true(t.a != t.b);
			hot_b += t.b < hot;
			two++;
		} else {
			assert_true(t.a == t.b);
		}
		int64_t want = t.type == DXLB_SB_DEPOSIT_CHECKING ? 130
			     : t.type == DXLB_SB_SEND_PAYMENT ? 500
			     : t.type == DXLB_SB_TRANSACT_SAVINGS ? 2020
			     : t.type == DXLB_SB_WRITE_CHECK ? 500 : 0;
		assert_int_equal(t.amount, want);
	}
	/* binomial sd of a share p over 1e6 draws is <= 0.05 points: allow 0.3 */
	for (int i = 0; i < DXLB_SB_NTYPES; i++) {
		double share = 100.0 * (double)count[i] / DRAWS;
		printf("  %-17s %6.3f%% (want %u%%)\n", dxlb_sb_type_name(i), share, c.mix[i]);
		assert_true(share > c.mix[i] - 0.3 && share < c.mix[i] + 0.3);
	}
	double ha = (double)hot_a / DRAWS, hb = (double)hot_b / (double)two;
	printf("  hot set [0, %llu): %.4f of a, %.4f of b\n", (unsigned long long)hot, ha, hb);
	assert_true(ha > 0.897 && ha < 0.903);
	/* b is redrawn when equal to a: a hot b collides more often, so its
	 * share is a little below hot_prob */
	assert_true(hb > 0.89 && hb < 0.903);
	assert_int_equal(min_acct, 0);
	assert_true(max_acct >= c.accounts - 100);

	/* a one-type mix, and uniform draws with hot_frac 0 */
	memset(c.mix, 0, sizeof(c.mix));
	c.mix[DXLB_SB_BALANCE] = 1;
	c.hot_frac = 0;
	c.accounts = 1000;
	uint64_t low = 0;
	for (int i = 0; i < 100000; i++) {
		struct dxlb_sb_txn t;
		dxlb_sb_gen(&c, &rng, &t);
		assert_int_equal(t.type, DXLB_SB_BALANCE);
		low += t.a < 40;
	}
	assert_true(low > 3400 && low < 4600); /* 4% of draws, not 90% */
}

static void test_tiny_hot_set_terminates(void **state)
{
	/* 2 accounts, hot set {0} with probability 1: b must still differ */
	struct dxlb_sb_cfg c;
	dxlb_sb_cfg_init(&c);
	c.accounts = 2;
	c.hot_prob = 1.0;
	memset(c.mix, 0, sizeof(c.mix));
	c.mix[DXLB_SB_SEND_PAYMENT] = 1;
	assert_int_equal(dxlb_sb_cfg_check(&c), 0);
	uint64_t rng = 7;
	for (int i = 0; i < 1000; i++) {
		struct dxlb_sb_txn t;
		dxlb_sb_gen(&c, &rng, &t);
		assert_int_equal(t.a, 0);
		assert_int_equal(t.b, 1);
	}
}

static void test_rng_seeds(void **state)
{
	uint64_t a = 0, b = 0, c = 1;
	uint64_t x = dxlb_sb_rand(&a);
	assert_int_equal(x, dxlb_sb_rand(&b));
	assert_true(x != 0);
	assert_true(dxlb_sb_rand(&a) != x);
	assert_true(dxlb_sb_rand(&c) != x);
}

/* ---- logic -------------------------------------------------------------- */

static void test_each_type(void **state)
{
	struct bank k;
	bank_init(&k, 1000);
	struct dxlb_sb_txn t;

	/* Amalgamate(1, 2): all of 1's money into 2's checking */
	k.sav[1] = 100, k.chk[1] = 50, k.chk[2] = 7;
	t = (struct dxlb_sb_txn){DXLB_SB_AMALGAMATE, 1, 2, 0};
	assert_int_equal(run(&k, &t), 0);
	assert_int_equal(k.nlog, 6);
	assert_int_equal(k.sav[1], 0);
	assert_int_equal(k.chk[1], 0);
	assert_int_equal(k.chk[2], 157);
	assert_int_equal(k.sav[2], 1000);

	/* Balance(3): two reads, no writes */
	t = (struct dxlb_sb_txn){DXLB_SB_BALANCE, 3, 3, 0};
	assert_int_equal(run(&k, &t), 0);
	assert_int_equal(k.nlog, 2);

	/* DepositChecking(4, 130) */
	t = (struct dxlb_sb_txn){DXLB_SB_DEPOSIT_CHECKING, 4, 4, 130};
	assert_int_equal(run(&k, &t), 130);
	assert_int_equal(k.chk[4], 1130);
	assert_int_equal(k.sav[4], 1000);

	/* SendPayment(5, 6, 500): enough (exactly), then not enough */
	k.chk[5] = 500, k.chk[6] = 10;
	t = (struct dxlb_sb_txn){DXLB_SB_SEND_PAYMENT, 5, 6, 500};
	assert_int_equal(run(&k, &t), 0);
	assert_int_equal(k.nlog, 4);
	assert_int_equal(k.chk[5], 0);
	assert_int_equal(k.chk[6], 510);
	k.chk[5] = 499;
	assert_int_equal(run(&k, &t), 0);
	assert_int_equal(k.nlog, 2); /* insufficient funds: reads only */
	assert_int_equal(k.chk[5], 499);
	assert_int_equal(k.chk[6], 510);

	/* TransactSavings(7, 2020) */
	t = (struct dxlb_sb_txn){DXLB_SB_TRANSACT_SAVINGS, 7, 7, 2020};
	assert_int_equal(run(&k, &t), 2020);
	assert_int_equal(k.sav[7], 3020);
	assert_int_equal(k.chk[7], 1000);

	/* WriteCheck(8, 500): covered (exactly), then overdraft with penalty */
	k.sav[8] = 300, k.chk[8] = 200;
	t = (struct dxlb_sb_txn){DXLB_SB_WRITE_CHECK, 8, 8, 500};
	assert_int_equal(run(&k, &t), -500);
	assert_int_equal(k.chk[8], -300);
	assert_int_equal(k.sav[8], 300);
	/* now savings+checking = 0 < 500: checking -= 501 */
	assert_int_equal(run(&k, &t), -501);
	assert_int_equal(k.chk[8], -801);
	assert_int_equal(k.sav[8], 300);

	/* an unknown type is an error, not a crash */
	t.type = DXLB_SB_NTYPES;
	int64_t d = 1;
	assert_int_equal(dxlb_sb_exec(&t, &bank_ops, &k, &d), DXL_E_INVAL);
	uint32_t tb[DXLB_SB_MAX_KEYS];
	uint64_t ac[DXLB_SB_MAX_KEYS];
	assert_int_equal(dxlb_sb_reads(&t, tb, ac), DXL_E_INVAL);
}

static void test_callback_errors_propagate(void **state)
{
	/* every type, failing at every call: the error comes back unchanged,
	 * delta is 0 and no call happens after the failed one */
	struct dxlb_sb_txn ts[] = {
		{DXLB_SB_AMALGAMATE, 1, 2, 0},
		{DXLB_SB_BALANCE, 1, 1, 0},
		{DXLB_SB_DEPOSIT_CHECKING, 1, 1, 130},
		{DXLB_SB_SEND_PAYMENT, 1, 2, 500},
		{DXLB_SB_TRANSACT_SAVINGS, 1, 1, 2020},
		{DXLB_SB_WRITE_CHECK, 1, 1, 500},
	};
	int codes[] = {DXL_E_CONFLICT, DXL_E_UNREACHABLE, -5 /* any negative */};
	int checked = 0;
	for (size_t i = 0; i < DXL_ARRAY_SIZE(ts); i++) {
		struct bank k;
		bank_init(&k, 1000);
		bank_begin(&k);
		int64_t d;
		assert_int_equal(dxlb_sb_exec(&ts[i], &bank_ops, &k, &d), 0);
		int calls = k.nlog;
		for (int at = 0; at < calls; at++) {
			for (size_t c = 0; c < DXL_ARRAY_SIZE(codes); c++) {
				bank_init(&k, 1000);
				bank_begin(&k);
				k.fail_at = at;
				k.fail_code = codes[c];
				d = 99;
				assert_int_equal(dxlb_sb_exec(&ts[i], &bank_ops, &k, &d), codes[c]);
				assert_int_equal(d, 0);
				assert_int_equal(k.nlog, at);
				checked++;
			}
		}
	}
	/* 6 + 2 + 2 + 4 + 2 + 3 calls, 3 codes each */
	assert_int_equal(checked, 19 * 3);
}

static void test_random_run_and_check(void **state)
{
	/* many random transactions on a small bank (heavy reuse, overdrafts,
	 * insufficient funds): the summed deltas explain the total */
	struct dxlb_sb_cfg c;
	dxlb_sb_cfg_init(&c);
	c.accounts = NACCT;
	c.init_balance = 700;
	c.hot_frac = 0.25;
	struct bank k;
	bank_init(&k, c.init_balance);
	uint64_t rng = 2024;
	int64_t sum = 0;
	uint64_t writes_none = 0;
	for (int i = 0; i < 100000; i++) {
		struct dxlb_sb_txn t;
		dxlb_sb_gen(&c, &rng, &t);
		sum += run(&k, &t);
		writes_none += t.type == DXLB_SB_SEND_PAYMENT && k.nlog == 2;
	}
	assert_true(writes_none > 0); /* the insufficient-funds path ran */
	assert_int_equal(dxlb_sb_check_total(&c, bank_total(&k), sum), 0);

	/* one cent too many or too few is caught, with both numbers */
	int64_t total = bank_total(&k);
	assert_int_equal(dxlb_sb_check_total(&c, total + 1, sum), DXL_E_CORRUPT);
	char want[64];
	snprintf(want, sizeof(want), "total is %lld", (long long)(total + 1));
	assert_non_null(strstr(dxl_errmsg(), want));
	snprintf(want, sizeof(want), "expected %lld", (long long)total);
	assert_non_null(strstr(dxl_errmsg(), want));
	assert_int_equal(dxlb_sb_check_total(&c, total, sum - 130), DXL_E_CORRUPT);
	assert_int_equal(dxlb_sb_check_money(5, 12, 7), 0);
	assert_int_equal(dxlb_sb_check_money(5, 12, 6), DXL_E_CORRUPT);
}

static void test_encoding(void **state)
{
	uint8_t b[8];
	dxlb_sb_encode(0x0102030405060708ll, b);
	uint8_t want[8] = {8, 7, 6, 5, 4, 3, 2, 1};
	assert_memory_equal(b, want, 8);
	assert_int_equal(dxlb_sb_decode(b), 0x0102030405060708ll);
	int64_t vals[] = {0, 1, -1, -801, INT64_MIN, INT64_MAX, 10000};
	for (size_t i = 0; i < DXL_ARRAY_SIZE(vals); i++) {
		dxlb_sb_encode(vals[i], b);
		assert_int_equal(dxlb_sb_decode(b), vals[i]);
	}
	dxlb_sb_encode(-1, b);
	for (int i = 0; i < 8; i++)
		assert_int_equal(b[i], 0xff);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cfg),
		cmocka_unit_test(test_mix_and_hot_set),
		cmocka_unit_test(test_tiny_hot_set_terminates),
		cmocka_unit_test(test_rng_seeds),
		cmocka_unit_test(test_each_type),
		cmocka_unit_test(test_callback_errors_propagate),
		cmocka_unit_test(test_random_run_and_check),
		cmocka_unit_test(test_encoding),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
