/* test_smallbank_check.c -- the checker of dxl-bench-smallbank (bench/smallbank/check.c)
 * and its ledger file (ledger.c) on runs whose answer is known: a clean run
 * passes; one corrupted balance, a lost acknowledged commit, a write nobody
 * committed, a version that is not a whole number of writes each fail; the
 * transactions of unknown outcome are allowed either way, but only
 * consistently (money and versions together).
 *
 * bench/ objects are not linked into tests: the files are included whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/lib/smallbank.c"
#include "bench/smallbank/check.c"
#include "bench/smallbank/ledger.c"

#define NACCT 8
#define INIT 10000

/* a bank: the ledger of a run and the state after it, built together */
struct bank {
	struct sb_ledger l;
	struct sb_state s;
	char msg[2048];
};

static void bank_init(struct bank *b)
{
	assert_int_equal(sb_ledger_alloc(&b->l, NACCT), 0);
	assert_int_equal(sb_state_alloc(&b->s, NACCT), 0);
	for (int t = 0; t < SB_NTABLES; t++)
		for (uint64_t a = 0; a < NACCT; a++) {
			/* loaded rows: versions differ per key, as in a real table */
			b->l.ver_before[t][a] = 2 + 2 * (a + (uint64_t)t * NACCT);
			b->s.ver[t][a] = b->l.ver_before[t][a];
			b->s.bal[t][a] = INIT;
		}
	b->l.total_before = 2 * NACCT * INIT;
}

static void bank_free(struct bank *b)
{
	sb_ledger_free(&b->l);
	sb_state_free(&b->s);
}

/* the in-memory bank as dxlb_sb_exec's callbacks: puts change the state
 * (balance, version + 2) and are remembered */
struct exec_ctx {
	struct bank *b;
	uint32_t nw;
	uint32_t table[DXLB_SB_MAX_KEYS];
	uint64_t acct[DXLB_SB_MAX_KEYS];
};

static int tix_of(uint32_t table)
{
	int t = sb_tix(table);
	assert_true(t >= 0 && t < SB_NTABLES);
	return t < 0 ? 0 : t;
}

static int mem_get(void *ctx, uint32_t table, uint64_t acct, int64_t *bal)
{
	struct exec_ctx *x = ctx;
	*bal = x->b->s.bal[tix_of(table)][acct];
	return 0;
}

static int mem_put(void *ctx, uint32_t table, uint64_t acct, int64_t bal)
{
	struct exec_ctx *x = ctx;
	int t = tix_of(table);
	x->b->s.bal[t][acct] = bal;
	x->b->s.ver[t][acct] += 2;
	x->table[x->nw] = table;
	x->acct[x->nw++] = acct;
	return 0;
}

static const struct dxlb_sb_ops mem_ops = {.get = mem_get, .put = mem_put};

/* a committed transaction: applied and recorded in the ledger */
static void commit(struct bank *b, const struct dxlb_sb_txn *t)
{
	struct exec_ctx x = {.b = b};
	int64_t delta = 0;
	assert_int_equal(dxlb_sb_exec(t, &mem_ops, &x, &delta), 0);
	b->l.committed++;
	b->l.sum_delta += delta;
	for (uint32_t i = 0; i < x.nw; i++)
		b->l.writes[tix_of(x.table[i])][x.acct[i]]++;
}

/* a transaction of unknown outcome: recorded as maybe; applied if happened */
static void maybe(struct bank *b, const struct dxlb_sb_txn *t, bool happened)
{
	struct exec_ctx x = {.b = b};
	int64_t delta = 0;
	struct sb_state keep;
	assert_int_equal(sb_state_alloc(&keep, NACCT), 0);
	for (int k = 0; k < SB_NTABLES; k++) {
		memcpy(keep.bal[k], b->s.bal[k], sizeof(int64_t) * NACCT);
		memcpy(keep.ver[k], b->s.ver[k], sizeof(uint64_t) * NACCT);
	}
	assert_int_equal(dxlb_sb_exec(t, &mem_ops, &x, &delta), 0);
	if (!happened)
		for (int k = 0; k < SB_NTABLES; k++) {
			memcpy(b->s.bal[k], keep.bal[k], sizeof(int64_t) * NACCT);
			memcpy(b->s.ver[k], keep.ver[k], sizeof(uint64_t) * NACCT);
		}
	sb_state_free(&keep);
	b->l.maybe = realloc(b->l.maybe, (b->l.nmaybe + 1) * sizeof(*b->l.maybe));
	assert_non_null(b->l.maybe);
	struct sb_maybe *m = &b->l.maybe[b->l.nmaybe++];
	memset(m, 0, sizeof(*m));
	m->type = (int)t->type;
	m->delta = delta;
	m->nw = x.nw;
	for (uint32_t i = 0; i < x.nw; i++) {
		m->table[i] = x.table[i];
		m->acct[i] = x.acct[i];
	}
}

/* a run of n generated transactions, all committed */
static void workload(struct bank *b, uint64_t seed, int n)
{
	struct dxlb_sb_cfg cfg;
	dxlb_sb_cfg_init(&cfg);
	cfg.accounts = NACCT;
	cfg.hot_frac = 0.25;
	for (int i = 0; i < n; i++) {
		struct dxlb_sb_txn t;
		dxlb_sb_gen(&cfg, &seed, &t);
		commit(b, &t);
	}
}

static int check(struct bank *b)
{
	int r = sb_check(&b->l, &b->s, b->msg, sizeof(b->msg));
	print_message("    %s\n", b->msg);
	return r;
}

static const struct dxlb_sb_txn deposit3 = {.type = DXLB_SB_DEPOSIT_CHECKING, .a = 3, .b = 3,
					    .amount = DXLB_SB_AMOUNT_DEPOSIT_CHECKING};
static const struct dxlb_sb_txn savings3 = {.type = DXLB_SB_TRANSACT_SAVINGS, .a = 3, .b = 3,
					    .amount = DXLB_SB_AMOUNT_TRANSACT_SAVINGS};
static const struct dxlb_sb_txn pay_5_6 = {.type = DXLB_SB_SEND_PAYMENT, .a = 5, .b = 6,
					   .amount = DXLB_SB_AMOUNT_SEND_PAYMENT};

static void test_clean_run_passes(void **state)
{
	(void)state;
	struct bank b;
	bank_init(&b);
	workload(&b, 7, 500);
	assert_int_equal(check(&b), 0);
	assert_non_null(strstr(b.msg, "OK (16 keys; 500 committed transactions"));
	bank_free(&b);
}

/* the checker's teeth: one balance off by one cent */
static void test_corrupt_balance_fails(void **state)
{
	(void)state;
	struct bank b;
	bank_init(&b);
	workload(&b, 8, 300);
	b.s.bal[1][4] += 1;
	assert_int_equal(check(&b), 1);
	assert_non_null(strstr(b.msg, "FAILED"));
	assert_non_null(strstr(b.msg, "off by 1"));
	/* and with the money moved between two accounts (total unchanged) the
	 * versions still catch a write that nobody committed */
	b.s.bal[1][4] -= 1;
	b.s.bal[0][2] -= 50;
	b.s.bal[0][3] += 50;
	b.s.ver[0][2] += 2;
	b.s.ver[0][3] += 2;
	assert_int_equal(check(&b), 1);
	assert_non_null(strstr(b.msg, "2 writes nobody committed, on 2 keys"));
	bank_free(&b);
}

/* an acknowledged commit lost: its write is not in the version (and its
 * money not in the total) */
static void test_lost_commit_fails(void **state)
{
	(void)state;
	struct bank b;
	bank_init(&b);
	workload(&b, 9, 200);
	b.l.writes[1][3]++; /* the ledger has a commit the state lacks */
	b.l.committed++;
	b.l.sum_delta += DXLB_SB_AMOUNT_DEPOSIT_CHECKING;
	assert_int_equal(check(&b), 1);
	assert_non_null(strstr(b.msg, "1 acknowledged commits LOST"));
	assert_non_null(strstr(b.msg, "checking[3]"));
	assert_non_null(strstr(b.msg, "off by -130"));
	bank_free(&b);
}

static void test_odd_version_fails(void **state)
{
	(void)state;
	struct bank b;
	bank_init(&b);
	workload(&b, 10, 50);
	b.s.ver[0][1] += 1;
	assert_int_equal(check(&b), 1);
	assert_non_null(strstr(b.msg, "not a whole number of writes"));
	b.s.ver[0][1] = b.l.ver_before[0][1] - 2; /* went back */
	assert_int_equal(check(&b), 1);
	bank_free(&b);
}

/* unknown outcome: allowed either way, the verdict says which */
static void test_maybe_either_way(void **state)
{
	(void)state;
	struct bank b;
	bank_init(&b);
	workload(&b, 11, 100);
	maybe(&b, &deposit3, true);
	maybe(&b, &savings3, false);
	maybe(&b, &pay_5_6, true);
	workload(&b, 12, 100);
	assert_int_equal(check(&b), 0);
	assert_non_null(strstr(b.msg, "of those 3: 2 happened, 1 did not"));
	bank_free(&b);
}

/* a maybe-transaction's versions say it happened but its money is not
 * there: no set of them fits */
static void test_maybe_inconsistent_fails(void **state)
{
	(void)state;
	struct bank b;
	bank_init(&b);
	workload(&b, 13, 100);
	maybe(&b, &deposit3, true);
	b.s.bal[1][3] -= DXLB_SB_AMOUNT_DEPOSIT_CHECKING; /* the write without the money */
	assert_int_equal(check(&b), 1);
	assert_non_null(strstr(b.msg, "the versions say 1 did (+130)"));
	assert_non_null(strstr(b.msg, "no choice fits"));
	bank_free(&b);
}

/* two maybes writing the same key (checking[3]), one happened: its version
 * says "one of the two", the money says which */
static void test_maybe_ambiguous_decided_by_money(void **state)
{
	(void)state;
	struct bank b;
	bank_init(&b);
	struct dxlb_sb_txn wc = {.type = DXLB_SB_WRITE_CHECK, .a = 3, .b = 3,
				 .amount = DXLB_SB_AMOUNT_WRITE_CHECK};
	maybe(&b, &deposit3, false); /* +130 on checking[3] */
	maybe(&b, &wc, true);        /* -500 on checking[3] */
	assert_int_equal(check(&b), 0);
	assert_non_null(strstr(b.msg, "2 undecided (1 of their 4 combinations fit)"));
	/* a total that neither choice explains */
	b.s.bal[0][0] += 7;
	assert_int_equal(check(&b), 1);
	bank_free(&b);
}

/* more undecided maybes than can be enumerated: each rule on its own */
static void test_many_maybes(void **state)
{
	(void)state;
	struct bank b;
	bank_init(&b);
	for (int i = 0; i < 30; i++)
		maybe(&b, &deposit3, i % 3 == 0); /* 10 of 30 happened, all on one key */
	assert_int_equal(check(&b), 0);
	assert_non_null(strstr(b.msg, "checked separately"));
	b.s.bal[0][0] += 1;
	assert_int_equal(check(&b), 1);
	bank_free(&b);
}

static void test_bad_input(void **state)
{
	(void)state;
	struct bank b;
	bank_init(&b);
	struct sb_state other;
	assert_int_equal(sb_state_alloc(&other, NACCT + 1), 0);
	assert_int_equal(sb_check(&b.l, &other, b.msg, sizeof(b.msg)), DXL_E_INVAL);
	sb_state_free(&other);
	bank_free(&b);
}

/* the ledger file: written, read back, the same verdict */
static void test_ledger_roundtrip(void **state)
{
	(void)state;
	struct bank b;
	bank_init(&b);
	workload(&b, 14, 80);
	maybe(&b, &pay_5_6, false);
	json_t *j = sb_ledger_json(&b.l);
	char path[] = "/tmp/dxl-test-sbledger-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(json_dump_file(j, path, JSON_COMPACT), 0);
	json_decref(j);
	struct sb_ledger l2;
	assert_int_equal(sb_ledger_load(path, &l2, NULL), 0);
	assert_int_equal(l2.accounts, NACCT);
	assert_int_equal(l2.committed, b.l.committed);
	assert_int_equal(l2.sum_delta, b.l.sum_delta);
	assert_int_equal(l2.total_before, b.l.total_before);
	assert_int_equal(l2.nmaybe, 1);
	assert_int_equal(l2.maybe[0].type, DXLB_SB_SEND_PAYMENT);
	assert_int_equal(l2.maybe[0].nw, 2);
	assert_int_equal(l2.maybe[0].acct[1], 6);
	for (int t = 0; t < SB_NTABLES; t++)
		for (int a = 0; a < NACCT; a++) {
			assert_int_equal(l2.writes[t][a], b.l.writes[t][a]);
			assert_int_equal(l2.ver_before[t][a], b.l.ver_before[t][a]);
		}
	char msg[1024];
	assert_int_equal(sb_check(&l2, &b.s, msg, sizeof(msg)), 0);
	sb_ledger_free(&l2);
	/* a file that is not a ledger */
	FILE *f = fopen(path, "w");
	fputs("{\"accounts\": 3}", f);
	fclose(f);
	assert_int_equal(sb_ledger_load(path, &l2, NULL), DXL_E_CORRUPT);
	unlink(path);
	bank_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clean_run_passes),
		cmocka_unit_test(test_corrupt_balance_fails),
		cmocka_unit_test(test_lost_commit_fails),
		cmocka_unit_test(test_odd_version_fails),
		cmocka_unit_test(test_maybe_either_way),
		cmocka_unit_test(test_maybe_inconsistent_fails),
		cmocka_unit_test(test_maybe_ambiguous_decided_by_money),
		cmocka_unit_test(test_many_maybes),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_ledger_roundtrip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
