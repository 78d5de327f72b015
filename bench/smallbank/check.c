/* check.c -- SmallBank's checker on dxl: money conserved, every acknowledged
 * commit reflected in the versions; transactions of unknown outcome allowed
 * either way, jointly (no dxl calls here: tests/unit/bench includes this file) */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/smallbank/sb.h"
#include "common/common.h"

int sb_ledger_alloc(struct sb_ledger *l, uint64_t accounts)
{
	memset(l, 0, sizeof(*l));
	l->accounts = accounts;
	for (int t = 0; t < SB_NTABLES; t++) {
		l->ver_before[t] = calloc(accounts ? accounts : 1, sizeof(uint64_t));
		l->writes[t] = calloc(accounts ? accounts : 1, sizeof(uint32_t));
		if (!l->ver_before[t] || !l->writes[t]) {
			sb_ledger_free(l);
			return dxl_err_set(DXL_E_NOMEM, "ledger of %" PRIu64 " accounts", accounts);
		}
	}
	return 0;
}

void sb_ledger_free(struct sb_ledger *l)
{
	for (int t = 0; t < SB_NTABLES; t++) {
		free(l->ver_before[t]);
		free(l->writes[t]);
		l->ver_before[t] = NULL;
		l->writes[t] = NULL;
	}
	free(l->maybe);
	l->maybe = NULL;
	l->nmaybe = 0;
}

int sb_state_alloc(struct sb_state *s, uint64_t accounts)
{
	memset(s, 0, sizeof(*s));
	s->accounts = accounts;
	for (int t = 0; t < SB_NTABLES; t++) {
		s->bal[t] = calloc(accounts ? accounts : 1, sizeof(int64_t));
		s->ver[t] = calloc(accounts ? accounts : 1, sizeof(uint64_t));
		if (!s->bal[t] || !s->ver[t]) {
			sb_state_free(s);
			return dxl_err_set(DXL_E_NOMEM, "state of %" PRIu64 " accounts", accounts);
		}
	}
	return 0;
}

void sb_state_free(struct sb_state *s)
{
	for (int t = 0; t < SB_NTABLES; t++) {
		free(s->bal[t]);
		free(s->ver[t]);
		s->bal[t] = NULL;
		s->ver[t] = NULL;
	}
}

int64_t sb_state_total(const struct sb_state *s)
{
	int64_t total = 0;
	for (int t = 0; t < SB_NTABLES; t++)
		for (uint64_t a = 0; a < s->accounts; a++)
			total += s->bal[t][a];
	return total;
}

/* appending to a message buffer */
struct mbuf {
	char *p;
	size_t cap, len;
};

static void __attribute__((format(printf, 2, 3))) mb_add(struct mbuf *m, const char *fmt, ...)
{
	if (m->len + 1 >= m->cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(m->p + m->len, m->cap - m->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		m->len = DXL_MIN(m->len + (size_t)n, m->cap - 1);
}

/* a key touched by maybe-transactions: how many of them wrote it (m) and how
 * many of those must have happened for its version to add up (e) */
struct mkey {
	int tix;
	uint64_t acct;
	int64_t m, e;
};

static struct mkey *mkey_find(struct mkey *k, size_t n, int tix, uint64_t acct)
{
	for (size_t i = 0; i < n; i++)
		if (k[i].tix == tix && k[i].acct == acct)
			return &k[i];
	return NULL;
}

#define SB_EXACT_MAX 20 /* maybe-transactions decided by enumerating subsets */

/* the money rule over the undecided maybes when there are too many to
 * enumerate subsets: is `need` a sum of some of their deltas? (counts per
 * distinct delta value; SmallBank has five values) */
static bool sums_reach(const int64_t *val, const uint64_t *cnt, size_t nv, size_t i, int64_t need,
		       uint64_t *budget)
{
	if (i == nv)
		return need == 0;
	for (uint64_t c = 0; c <= cnt[i]; c++) {
		if (!(*budget)--)
			return false;
		if (sums_reach(val, cnt, nv, i + 1, need - (int64_t)c * val[i], budget))
			return true;
	}
	return false;
}

int sb_check(const struct sb_ledger *l, const struct sb_state *s, char *msg, size_t cap)
{
	struct mbuf mb = {msg, cap, 0};
	if (cap)
		msg[0] = 0;
	if (!l || !s || l->accounts != s->accounts)
		return dxl_err_set(DXL_E_INVAL, "checker: the ledger has %" PRIu64
				   " accounts, the state %" PRIu64,
				   l ? l->accounts : 0, s ? s->accounts : 0);
	for (size_t i = 0; i < l->nmaybe; i++)
		if (l->maybe[i].nw > DXLB_SB_MAX_KEYS)
			return dxl_err_set(DXL_E_INVAL, "checker: maybe-transaction %zu writes %u keys", i,
					   l->maybe[i].nw);

	/* the keys the maybe-transactions wrote */
	size_t nk = 0;
	struct mkey *keys = calloc(l->nmaybe * DXLB_SB_MAX_KEYS + 1, sizeof(*keys));
	int *state = calloc(l->nmaybe + 1, sizeof(int)); /* 0 undecided, 1 happened, -1 not */
	if (!keys || !state) {
		free(keys);
		free(state);
		return dxl_err_set(DXL_E_NOMEM, "checker");
	}
	for (size_t i = 0; i < l->nmaybe; i++)
		for (uint32_t j = 0; j < l->maybe[i].nw; j++) {
			int tix = sb_tix(l->maybe[i].table[j]);
			uint64_t a = l->maybe[i].acct[j];
			if (tix < 0 || a >= l->accounts) {
				free(keys);
				free(state);
				return dxl_err_set(DXL_E_INVAL, "checker: maybe-transaction %zu writes table %u account %" PRIu64,
						   i, l->maybe[i].table[j], a);
			}
			struct mkey *k = mkey_find(keys, nk, tix, a);
			if (!k) {
				k = &keys[nk++];
				k->tix = tix;
				k->acct = a;
			}
			k->m++;
		}

	/* rule 2 per key: committed <= (after - before)/2 <= committed + maybe */
	uint64_t nkeys = 0, cwrites = 0, lost_keys = 0, lost_writes = 0, extra_keys = 0,
		 extra_writes = 0, bad_keys = 0;
	char ex[3][160];
	int nex = 0;
	for (int t = 0; t < SB_NTABLES; t++)
		for (uint64_t a = 0; a < l->accounts; a++) {
			uint64_t b = l->ver_before[t][a], v = s->ver[t][a];
			uint64_t w = l->writes[t][a];
			nkeys++;
			cwrites += w;
			struct mkey *k = nk ? mkey_find(keys, nk, t, a) : NULL;
			int64_t m = k ? k->m : 0;
			const char *tn = dxlb_sb_table_name(sb_table_of(t));
			if (v < b || (v - b) % 2) {
				bad_keys++;
				if (nex < 3)
					snprintf(ex[nex++], sizeof(ex[0]),
						 "%s[%" PRIu64 "]: version %" PRIu64 " -> %" PRIu64 "%s",
						 tn, a, b, v,
						 v < b ? " went back" : " is not a whole number of writes");
				continue;
			}
			int64_t d = (int64_t)((v - b) / 2);
			if (d < (int64_t)w) {
				lost_keys++;
				lost_writes += w - (uint64_t)d;
				if (nex < 3)
					snprintf(ex[nex++], sizeof(ex[0]),
						 "%s[%" PRIu64 "]: version %" PRIu64 " -> %" PRIu64
						 " = %" PRId64 " writes, %" PRIu64 " committed%s",
						 tn, a, b, v, d, w, m ? " (+ maybe ones)" : "");
			} else if (d > (int64_t)w + m) {
				extra_keys++;
				extra_writes += (uint64_t)(d - (int64_t)w - m);
				if (nex < 3)
					snprintf(ex[nex++], sizeof(ex[0]),
						 "%s[%" PRIu64 "]: version %" PRIu64 " -> %" PRIu64
						 " = %" PRId64 " writes, only %" PRIu64 " committed + %" PRId64
						 " of unknown outcome",
						 tn, a, b, v, d, w, m);
			} else if (k) {
				k->e = d - (int64_t)w;
			}
		}
	bool writes_ok = !lost_keys && !extra_keys && !bad_keys;

	/* rule 1, jointly with rule 2 on the keys of the maybe-transactions */
	int64_t total = sb_state_total(s);
	int64_t base = l->total_before + l->sum_delta;
	int64_t need = total - base; /* what the maybe-transactions that happened must add */
	bool money_ok = false, joint = true, weak = false;
	size_t nin = 0, nout = 0, nund = 0;
	int64_t in_sum = 0; /* deltas of those the versions say happened */
	uint64_t nsol = 0;
	if (writes_ok && l->nmaybe) {
		/* fix what the versions decide alone: a key none of whose maybe
		 * writers happened (e == 0), or all of them (e == m) */
		bool changed = true, inconsistent = false;
		while (changed && !inconsistent) {
			changed = false;
			for (size_t i = 0; i < l->nmaybe; i++) {
				if (state[i])
					continue;
				int decide = 0;
				for (uint32_t j = 0; j < l->maybe[i].nw; j++) {
					struct mkey *k = mkey_find(keys, nk, sb_tix(l->maybe[i].table[j]),
								   l->maybe[i].acct[j]);
					if (k->e == 0)
						decide = decide == 1 ? 2 : -1;
					else if (k->e == k->m)
						decide = decide == -1 ? 2 : 1;
				}
				if (decide == 2) {
					inconsistent = true;
					break;
				}
				if (!decide)
					continue;
				state[i] = decide;
				changed = true;
				for (uint32_t j = 0; j < l->maybe[i].nw; j++) {
					struct mkey *k = mkey_find(keys, nk, sb_tix(l->maybe[i].table[j]),
								   l->maybe[i].acct[j]);
					k->m--;
					k->e -= decide == 1;
					if (k->e < 0 || k->e > k->m)
						inconsistent = true;
				}
				if (decide == 1) {
					need -= l->maybe[i].delta;
					in_sum += l->maybe[i].delta;
				}
			}
		}
		size_t und[SB_EXACT_MAX];
		for (size_t i = 0; i < l->nmaybe; i++) {
			nin += state[i] == 1;
			nout += state[i] == -1;
			if (!state[i]) {
				if (nund < SB_EXACT_MAX)
					und[nund] = i;
				nund++;
			}
		}
		if (inconsistent) {
			joint = false;
		} else if (nund == 0) {
			money_ok = need == 0;
			nsol = money_ok;
		} else if (nund <= SB_EXACT_MAX) {
			/* every subset of the undecided ones: its deltas must make up
			 * `need` and its writes each touched key's remaining e */
			for (uint64_t set = 0; set < (1ull << nund); set++) {
				int64_t sum = 0;
				for (size_t u = 0; u < nund; u++)
					if (set >> u & 1)
						sum += l->maybe[und[u]].delta;
				if (sum != need)
					continue;
				bool ok = true;
				for (size_t q = 0; q < nk && ok; q++) {
					if (!keys[q].m)
						continue;
					int64_t c = 0;
					for (size_t u = 0; u < nund; u++)
						if (set >> u & 1)
							for (uint32_t j = 0; j < l->maybe[und[u]].nw; j++)
								c += sb_tix(l->maybe[und[u]].table[j]) ==
									     keys[q].tix &&
								     l->maybe[und[u]].acct[j] == keys[q].acct;
					ok = c == keys[q].e;
				}
				nsol += ok;
			}
			money_ok = nsol > 0;
		} else {
			/* too many to enumerate: the money rule on its own (each key
			 * was checked within its bounds above) */
			weak = true;
			int64_t val[16];
			uint64_t cnt[16];
			size_t nv = 0;
			bool fits = true;
			for (size_t i = 0; i < l->nmaybe && fits; i++) {
				if (state[i] || l->maybe[i].delta == 0)
					continue;
				size_t v = 0;
				while (v < nv && val[v] != l->maybe[i].delta)
					v++;
				if (v == nv) {
					if (nv == 16) {
						fits = false;
						break;
					}
					val[nv] = l->maybe[i].delta;
					cnt[nv++] = 0;
				}
				cnt[v]++;
			}
			uint64_t budget = 100000000;
			money_ok = fits && sums_reach(val, cnt, nv, 0, need, &budget);
		}
	} else if (writes_ok) {
		money_ok = need == 0;
	} else {
		money_ok = l->nmaybe ? false : need == 0;
	}

	if (writes_ok && money_ok) {
		mb_add(&mb, "OK (%" PRIu64 " keys; %" PRIu64 " committed transactions, their %" PRIu64
		       " writes all reflected in the versions; money %" PRId64 " = %" PRId64
		       " before + %" PRId64 " committed deltas",
		       nkeys, l->committed, cwrites, total, l->total_before, l->sum_delta);
		if (l->nmaybe) {
			mb_add(&mb, " + %" PRId64 " from transactions of unknown outcome; of those %zu: "
			       "%zu happened, %zu did not",
			       total - base, l->nmaybe, nin, nout);
			if (nund && !weak)
				mb_add(&mb, ", %zu undecided (%" PRIu64 " of their %llu combinations fit)",
				       nund, nsol, 1ull << nund);
			if (weak)
				mb_add(&mb, ", %zu undecided: too many to decide jointly, so the money "
				       "and each key were checked separately", nund);
		}
		mb_add(&mb, ")");
		free(keys);
		free(state);
		return 0;
	}
	mb_add(&mb, "FAILED:");
	if (!writes_ok) {
		if (lost_keys)
			mb_add(&mb, " %" PRIu64 " acknowledged commits LOST: %" PRIu64
			       " keys have fewer writes than committed;", lost_writes, lost_keys);
		if (extra_keys)
			mb_add(&mb, " %" PRIu64 " writes nobody committed, on %" PRIu64 " keys;",
			       extra_writes, extra_keys);
		if (bad_keys)
			mb_add(&mb, " %" PRIu64 " keys with a version that went back or is odd;",
			       bad_keys);
		for (int i = 0; i < nex; i++)
			mb_add(&mb, "%s%s", i ? "; " : " e.g. ", ex[i]);
		mb_add(&mb, ";");
	}
	if (!joint) {
		mb_add(&mb, " the versions of the keys written by transactions of unknown outcome "
		       "fit no set of them;");
	} else if (!money_ok || !writes_ok) {
		if (need == 0 && !l->nmaybe)
			mb_add(&mb, " money: total %" PRId64 " as expected", total);
		else if (l->nmaybe && writes_ok)
			mb_add(&mb, " money: total is %" PRId64 ", expected %" PRId64
			       " (before %" PRId64 " + committed deltas %" PRId64
			       ") + the deltas of those of the %zu transactions of unknown outcome that "
			       "happened -- the versions say %zu did (%+" PRId64 "), %zu did not, %zu "
			       "undecided -- and no choice fits: off by %" PRId64 " from the committed "
			       "ones alone",
			       total, base, l->total_before, l->sum_delta, l->nmaybe, nin, in_sum,
			       nout, nund, total - base);
		else if (l->nmaybe)
			mb_add(&mb, " money: total is %" PRId64 ", expected %" PRId64
			       " (before %" PRId64 " + committed deltas %" PRId64
			       ") + the deltas of some of the %zu transactions of unknown outcome: "
			       "off by %" PRId64 " from the committed ones alone",
			       total, base, l->total_before, l->sum_delta, l->nmaybe, total - base);
		else
			mb_add(&mb, " money: total is %" PRId64 ", expected %" PRId64 " (before %" PRId64
			       " + committed deltas %" PRId64 "): off by %" PRId64,
			       total, base, l->total_before, l->sum_delta, total - base);
	}
	free(keys);
	free(state);
	return 1;
}
