/* smallbank.h -- the SmallBank workload, once for every system we benchmark */
#ifndef DXL_BENCH_SMALLBANK_H
#define DXL_BENCH_SMALLBANK_H

#include <stdint.h>

/*
 * SmallBank (H-Store's benchmark, as DrTM+H runs it: 004 L226) models a bank
 * with `accounts` customers; each has a savings and a checking balance, two
 * tables keyed by the account number (0 .. accounts-1). Every balance starts
 * at init_balance, so the bank holds accounts * 2 * init_balance at the
 * start. Balances are int64 in cents; a checking balance may go negative
 * (WriteCheck's overdraft).
 *
 * The six transactions, with the standard mix in percent:
 *
 *   Amalgamate(a, b)          15  read savings[a], checking[a], checking[b];
 *                                 savings[a] = 0, checking[a] = 0,
 *                                 checking[b] += savings[a] + checking[a].
 *                                 Money is moved, not made: delta 0.
 *   Balance(a)                15  read savings[a] and checking[a]; writes
 *                                 nothing (the only read-only one). delta 0.
 *   DepositChecking(a, v)     15  read checking[a]; checking[a] += v.
 *                                 v = 130 (H-Store's 1.3). delta +v.
 *   SendPayment(a, b, v)      25  read checking[a], checking[b]; if
 *                                 checking[a] >= v: checking[a] -= v,
 *                                 checking[b] += v; else (insufficient
 *                                 funds) write nothing. v = 500 (5.0).
 *                                 delta 0 either way.
 *   TransactSavings(a, v)     15  read savings[a]; savings[a] += v.
 *                                 v = 2020 (20.20). delta +v.
 *   WriteCheck(a, v)          15  read savings[a], checking[a]; if
 *                                 savings[a] + checking[a] < v: checking[a]
 *                                 -= v + 1 (the overdraft penalty), delta
 *                                 -(v + 1); else checking[a] -= v, delta -v.
 *                                 v = 500 (5.0).
 *
 * Where H-Store aborts on insufficient funds (SendPayment) we commit a
 * read-only outcome instead: every system then commits exactly the same
 * transactions, and the reads still count for conflicts.
 *
 * Account choice (DrTM+H 004 L226: "4% of records are accessed by 90% of
 * transactions"): the hot set is accounts [0, H) with H = hot_frac *
 * accounts (at least 1 when hot_frac > 0); each account drawn is, with
 * probability hot_prob, uniform in the hot set, otherwise uniform in the
 * cold set [H, accounts) -- so the hot set gets hot_prob of all draws. With
 * H == 0 or H >= accounts the draw is uniform over all accounts. A
 * two-account transaction draws b again until b != a.
 *
 * Keys: table DXLB_SB_SAVINGS / DXLB_SB_CHECKING and the account number. In
 * dxl the table id is the table and the value is 8 bytes little-endian
 * (dxlb_sb_encode); in etcd the key is "sav/<acct>" or "chk/<acct>" in
 * decimal and the value the balance as a decimal string.
 */

#define DXLB_SB_SAVINGS 1  /* table ids in dxl; key prefixes "sav/" "chk/" in etcd */
#define DXLB_SB_CHECKING 2

/* the amounts, in cents (H-Store's floats times 100) */
#define DXLB_SB_AMOUNT_DEPOSIT_CHECKING 130
#define DXLB_SB_AMOUNT_SEND_PAYMENT 500
#define DXLB_SB_AMOUNT_TRANSACT_SAVINGS 2020
#define DXLB_SB_AMOUNT_WRITE_CHECK 500

/* the most keys any transaction reads (Amalgamate) */
#define DXLB_SB_MAX_KEYS 3

enum dxlb_sb_type {
	DXLB_SB_AMALGAMATE,
	DXLB_SB_BALANCE,
	DXLB_SB_DEPOSIT_CHECKING,
	DXLB_SB_SEND_PAYMENT,
	DXLB_SB_TRANSACT_SAVINGS,
	DXLB_SB_WRITE_CHECK,
	DXLB_SB_NTYPES
};

struct dxlb_sb_cfg {
	uint64_t accounts;      /* default 100000 */
	double hot_frac;        /* 0.04: 4% of accounts ... */
	double hot_prob;        /* 0.90: ... get 90% of the accesses (DrTM+H 004 L226) */
	int64_t init_balance;   /* 10000 in each of savings and checking */
	unsigned mix[DXLB_SB_NTYPES]; /* percent, default the standard 15,15,15,25,15,15 */
};

/* dxlb_sb_cfg_init -- the defaults above */
void dxlb_sb_cfg_init(struct dxlb_sb_cfg *c);

/*
 * dxlb_sb_cfg_check -- 0 if c can be used; DXL_E_INVAL (with a message) if
 * accounts < 2, hot_frac or hot_prob is outside [0, 1], init_balance < 0, or
 * the mix is all zero. dxlb_sb_gen expects a checked configuration.
 */
int dxlb_sb_cfg_check(const struct dxlb_sb_cfg *c);

/* dxlb_sb_type_name -- "amalgamate", "balance", "deposit_checking",
 * "send_payment", "transact_savings", "write_check"; "?" otherwise */
const char *dxlb_sb_type_name(enum dxlb_sb_type t);

/* dxlb_sb_table_name -- "savings" / "checking"; "?" otherwise */
const char *dxlb_sb_table_name(uint32_t table);

struct dxlb_sb_txn {
	enum dxlb_sb_type type;
	uint64_t a, b;  /* b only for Amalgamate and SendPayment (else == a) */
	int64_t amount; /* the DXLB_SB_AMOUNT_* of the type; 0 if it has none */
};

/*
 * dxlb_sb_rand -- the next 64 random bits of the splitmix64 state *rng (any
 * seed works, 0 included; one state per thread)
 */
uint64_t dxlb_sb_rand(uint64_t *rng);

/*
 * dxlb_sb_gen -- draw the next transaction into *out: its type by c->mix
 * (weights, normally summing to 100), its accounts as described above (a and
 * b distinct for two-account types), the type's fixed amount. rng is a
 * per-thread state the caller seeds (dxlb_sb_rand). c must pass
 * dxlb_sb_cfg_check.
 */
void dxlb_sb_gen(const struct dxlb_sb_cfg *c, uint64_t *rng, struct dxlb_sb_txn *out);

/*
 * dxlb_sb_reads -- the keys t reads, in the order dxlb_sb_exec reads them:
 * tables[i], accts[i] for i < the returned count (1..DXLB_SB_MAX_KEYS). The
 * keys t writes are always among them, so a system can fetch the whole read
 * set in one round trip before dxlb_sb_exec.
 */
int dxlb_sb_reads(const struct dxlb_sb_txn *t, uint32_t tables[DXLB_SB_MAX_KEYS],
		  uint64_t accts[DXLB_SB_MAX_KEYS]);

/*
 * The transaction logic, once for every system: reads and writes go through
 * callbacks. get: 0 or a negative error (propagated unchanged as the return
 * of dxlb_sb_exec; e.g. an abort). put: buffered write of the new balance,
 * 0 or a negative error likewise. Every key is put at most once per
 * transaction and only after it was read.
 */
struct dxlb_sb_ops {
	int (*get)(void *ctx, uint32_t table, uint64_t acct, int64_t *bal);
	int (*put)(void *ctx, uint32_t table, uint64_t acct, int64_t bal);
};

/*
 * dxlb_sb_exec -- run t's logic (the semantics above) through ops with ctx.
 * *delta = the net change of the bank's total money if this transaction
 * commits (deposit +amount, transact-savings +amount, write-check -amount or
 * -(amount+1) with the overdraft penalty, amalgamate and send-payment 0;
 * send-payment with insufficient funds and balance write nothing).
 * Returns 0, or the first callback error unchanged (then *delta is 0 and
 * nothing after the failing call was done); DXL_E_INVAL for an unknown type.
 */
int dxlb_sb_exec(const struct dxlb_sb_txn *t, const struct dxlb_sb_ops *ops, void *ctx,
		 int64_t *delta);

/* value encoding in dxl: 8 bytes little-endian int64 */
void dxlb_sb_encode(int64_t bal, uint8_t out[8]);
int64_t dxlb_sb_decode(const uint8_t in[8]);

/*
 * dxlb_sb_check_total -- the checker's money rule: 0 if total ==
 * accounts * 2 * init_balance + sum_delta, else DXL_E_CORRUPT with a
 * message giving both numbers (expected and found) and the difference.
 */
int dxlb_sb_check_total(const struct dxlb_sb_cfg *c, int64_t total, int64_t sum_delta);

/*
 * dxlb_sb_check_money -- the same rule from any starting total (a run on
 * data an earlier run left): 0 if total == initial + sum_delta, else
 * DXL_E_CORRUPT with both numbers in the message.
 */
int dxlb_sb_check_money(int64_t initial, int64_t total, int64_t sum_delta);

#endif /* DXL_BENCH_SMALLBANK_H */
