/* smallbank.c -- the SmallBank workload: generator, transaction logic, money check */
#include <string.h>

#include "bench/lib/smallbank.h"
#include "common/common.h"

/* the standard H-Store mix, in enum order */
static const unsigned std_mix[DXLB_SB_NTYPES] = {15, 15, 15, 25, 15, 15};

void dxlb_sb_cfg_init(struct dxlb_sb_cfg *c)
{
	memset(c, 0, sizeof(*c));
	c->accounts = 100000;
	c->hot_frac = 0.04;
	c->hot_prob = 0.90;
	c->init_balance = 10000;
	memcpy(c->mix, std_mix, sizeof(std_mix));
}

int dxlb_sb_cfg_check(const struct dxlb_sb_cfg *c)
{
	if (c->accounts < 2)
		return dxl_err_set(DXL_E_INVAL, "smallbank: %llu accounts, need at least 2",
				   (unsigned long long)c->accounts);
	if (!(c->hot_frac >= 0.0 && c->hot_frac <= 1.0))
		return dxl_err_set(DXL_E_INVAL, "smallbank: hot_frac %g not in [0, 1]",
				   c->hot_frac);
	if (!(c->hot_prob >= 0.0 && c->hot_prob <= 1.0))
		return dxl_err_set(DXL_E_INVAL, "smallbank: hot_prob %g not in [0, 1]",
				   c->hot_prob);
	if (c->init_balance < 0)
		return dxl_err_set(DXL_E_INVAL, "smallbank: init_balance %lld < 0",
				   (long long)c->init_balance);
	uint64_t sum = 0;
	for (int i = 0; i < DXLB_SB_NTYPES; i++)
		sum += c->mix[i];
	if (sum == 0)
		return dxl_err_set(DXL_E_INVAL, "smallbank: transaction mix is all zero");
	return 0;
}

const char *dxlb_sb_type_name(enum dxlb_sb_type t)
{
	static const char *const names[DXLB_SB_NTYPES] = {
		"amalgamate", "balance", "deposit_checking",
		"send_payment", "transact_savings", "write_check",
	};
	if ((unsigned)t >= DXLB_SB_NTYPES)
		return "?";
	return names[t];
}

const char *dxlb_sb_table_name(uint32_t table)
{
	return table == DXLB_SB_SAVINGS ? "savings" : table == DXLB_SB_CHECKING ? "checking" : "?";
}

uint64_t dxlb_sb_rand(uint64_t *rng)
{
	/* splitmix64: a Weyl sequence through a mixer, so every seed is fine */
	uint64_t z = (*rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* uniform in [0, n), n > 0 (multiply-shift; the bias is below 2^-40 for our n) */
static uint64_t below(uint64_t *rng, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)dxlb_sb_rand(rng) * n) >> 64);
}

/* 53 random bits as a double in [0, 1) */
static double unit(uint64_t *rng)
{
	return (double)(dxlb_sb_rand(rng) >> 11) * (1.0 / 9007199254740992.0);
}

static uint64_t hot_size(const struct dxlb_sb_cfg *c)
{
	if (c->hot_frac <= 0.0)
		return 0;
	uint64_t h = (uint64_t)(c->hot_frac * (double)c->accounts);
	return h ? h : 1;
}

static uint64_t pick_account(const struct dxlb_sb_cfg *c, uint64_t *rng)
{
	uint64_t h = hot_size(c);
	if (h == 0 || h >= c->accounts)
		return below(rng, c->accounts);
	if (unit(rng) < c->hot_prob)
		return below(rng, h);
	return h + below(rng, c->accounts - h);
}

void dxlb_sb_gen(const struct dxlb_sb_cfg *c, uint64_t *rng, struct dxlb_sb_txn *out)
{
	DXL_ASSERTF(c->accounts >= 2, "smallbank config not checked: %llu accounts",
		    (unsigned long long)c->accounts);
	uint64_t sum = 0;
	for (int i = 0; i < DXLB_SB_NTYPES; i++)
		sum += c->mix[i];
	DXL_ASSERTF(sum > 0, "smallbank config not checked: empty mix");
	uint64_t r = below(rng, sum);
	int type = 0;
	while (r >= c->mix[type]) {
		r -= c->mix[type];
		type++;
	}
	out->type = (enum dxlb_sb_type)type;
	out->a = pick_account(c, rng);
	out->b = out->a;
	if (out->type == DXLB_SB_AMALGAMATE || out->type == DXLB_SB_SEND_PAYMENT) {
		/* redraw from the same distribution; a hot set of one account
		 * with hot_prob 1 could repeat forever, so after 64 tries take
		 * any other account uniformly */
		for (int i = 0; i < 64 && out->b == out->a; i++)
			out->b = pick_account(c, rng);
		if (out->b == out->a) {
			out->b = below(rng, c->accounts - 1);
			out->b += out->b >= out->a;
		}
	}
	switch (out->type) {
	case DXLB_SB_DEPOSIT_CHECKING: out->amount = DXLB_SB_AMOUNT_DEPOSIT_CHECKING; break;
	case DXLB_SB_SEND_PAYMENT: out->amount = DXLB_SB_AMOUNT_SEND_PAYMENT; break;
	case DXLB_SB_TRANSACT_SAVINGS: out->amount = DXLB_SB_AMOUNT_TRANSACT_SAVINGS; break;
	case DXLB_SB_WRITE_CHECK: out->amount = DXLB_SB_AMOUNT_WRITE_CHECK; break;
	default: out->amount = 0; break;
	}
}

int dxlb_sb_reads(const struct dxlb_sb_txn *t, uint32_t tables[DXLB_SB_MAX_KEYS],
		  uint64_t accts[DXLB_SB_MAX_KEYS])
{
	int n = 0;
	switch (t->type) {
	case DXLB_SB_AMALGAMATE:
		tables[n] = DXLB_SB_SAVINGS, accts[n++] = t->a;
		tables[n] = DXLB_SB_CHECKING, accts[n++] = t->a;
		tables[n] = DXLB_SB_CHECKING, accts[n++] = t->b;
		break;
	case DXLB_SB_BALANCE:
	case DXLB_SB_WRITE_CHECK:
		tables[n] = DXLB_SB_SAVINGS, accts[n++] = t->a;
		tables[n] = DXLB_SB_CHECKING, accts[n++] = t->a;
		break;
	case DXLB_SB_DEPOSIT_CHECKING:
		tables[n] = DXLB_SB_CHECKING, accts[n++] = t->a;
		break;
	case DXLB_SB_SEND_PAYMENT:
		tables[n] = DXLB_SB_CHECKING, accts[n++] = t->a;
		tables[n] = DXLB_SB_CHECKING, accts[n++] = t->b;
		break;
	case DXLB_SB_TRANSACT_SAVINGS:
		tables[n] = DXLB_SB_SAVINGS, accts[n++] = t->a;
		break;
	default:
		return dxl_err_set(DXL_E_INVAL, "smallbank: unknown transaction type %d",
				   (int)t->type);
	}
	return n;
}

/* the logic of each type; every get/put error returns at once */
#define SB_TRY(call)                                                          \
	do {                                                                  \
		int rc_ = (call);                                             \
		if (rc_)                                                      \
			return rc_;                                           \
	} while (0)

int dxlb_sb_exec(const struct dxlb_sb_txn *t, const struct dxlb_sb_ops *ops, void *ctx,
		 int64_t *delta)
{
	int64_t sa, ca, cb;
	*delta = 0;
	switch (t->type) {
	case DXLB_SB_AMALGAMATE:
		SB_TRY(ops->get(ctx, DXLB_SB_SAVINGS, t->a, &sa));
		SB_TRY(ops->get(ctx, DXLB_SB_CHECKING, t->a, &ca));
		SB_TRY(ops->get(ctx, DXLB_SB_CHECKING, t->b, &cb));
		SB_TRY(ops->put(ctx, DXLB_SB_SAVINGS, t->a, 0));
		SB_TRY(ops->put(ctx, DXLB_SB_CHECKING, t->a, 0));
		SB_TRY(ops->put(ctx, DXLB_SB_CHECKING, t->b, cb + sa + ca));
		return 0;
	case DXLB_SB_BALANCE:
		SB_TRY(ops->get(ctx, DXLB_SB_SAVINGS, t->a, &sa));
		SB_TRY(ops->get(ctx, DXLB_SB_CHECKING, t->a, &ca));
		return 0;
	case DXLB_SB_DEPOSIT_CHECKING:
		SB_TRY(ops->get(ctx, DXLB_SB_CHECKING, t->a, &ca));
		SB_TRY(ops->put(ctx, DXLB_SB_CHECKING, t->a, ca + t->amount));
		*delta = t->amount;
		return 0;
	case DXLB_SB_SEND_PAYMENT:
		SB_TRY(ops->get(ctx, DXLB_SB_CHECKING, t->a, &ca));
		SB_TRY(ops->get(ctx, DXLB_SB_CHECKING, t->b, &cb));
		if (ca < t->amount)
			return 0; /* insufficient funds: nothing written */
		SB_TRY(ops->put(ctx, DXLB_SB_CHECKING, t->a, ca - t->amount));
		SB_TRY(ops->put(ctx, DXLB_SB_CHECKING, t->b, cb + t->amount));
		return 0;
	case DXLB_SB_TRANSACT_SAVINGS:
		SB_TRY(ops->get(ctx, DXLB_SB_SAVINGS, t->a, &sa));
		SB_TRY(ops->put(ctx, DXLB_SB_SAVINGS, t->a, sa + t->amount));
		*delta = t->amount;
		return 0;
	case DXLB_SB_WRITE_CHECK: {
		SB_TRY(ops->get(ctx, DXLB_SB_SAVINGS, t->a, &sa));
		SB_TRY(ops->get(ctx, DXLB_SB_CHECKING, t->a, &ca));
		/* overdraft: the check is paid anyway, plus a penalty of 1 */
		int64_t debit = sa + ca < t->amount ? t->amount + 1 : t->amount;
		SB_TRY(ops->put(ctx, DXLB_SB_CHECKING, t->a, ca - debit));
		*delta = -debit;
		return 0;
	}
	default:
		return dxl_err_set(DXL_E_INVAL, "smallbank: unknown transaction type %d",
				   (int)t->type);
	}
}

#undef SB_TRY

void dxlb_sb_encode(int64_t bal, uint8_t out[8])
{
	uint64_t v = (uint64_t)bal;
	for (int i = 0; i < 8; i++)
		out[i] = (uint8_t)(v >> (8 * i));
}

int64_t dxlb_sb_decode(const uint8_t in[8])
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)in[i] << (8 * i);
	return (int64_t)v;
}

int dxlb_sb_check_money(int64_t initial, int64_t total, int64_t sum_delta)
{
	int64_t want = initial + sum_delta;
	if (total == want)
		return 0;
	return dxl_err_set(DXL_E_CORRUPT,
			   "smallbank money check: total is %lld, expected %lld (initial %lld + "
			   "committed deltas %lld): off by %lld",
			   (long long)total, (long long)want, (long long)initial,
			   (long long)sum_delta, (long long)(total - want));
}

int dxlb_sb_check_total(const struct dxlb_sb_cfg *c, int64_t total, int64_t sum_delta)
{
	int64_t initial = (int64_t)c->accounts * 2 * c->init_balance;
	return dxlb_sb_check_money(initial, total, sum_delta);
}
