/* scan.c -- loading the accounts and reading all of them back (balances, versions) */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/smallbank/sb.h"
#include "common/common.h"

/* a batch that keeps failing with "unavailable" gives up after this long */
#define SB_UNAVAIL_GIVEUP_MS 30000

/* ---- load ---------------------------------------------------------------------- */

struct load_shared {
	uint64_t accounts, batch;
	int64_t bal;
	atomic_uint_fast64_t next;     /* first account of the next batch */
	atomic_uint_fast64_t existing; /* rows found there already */
	atomic_int err;
	char errmsg[400];
};

struct load_co {
	struct sb_co co; /* first */
	struct load_shared *sh;
	uint64_t first, n, existing; /* the batch; rows of it that existed */
};

static int load_fn(struct dxl_txn *t, void *arg)
{
	struct load_co *l = arg;
	uint8_t v[8];
	dxlb_sb_encode(l->sh->bal, v);
	l->existing = 0;
	for (uint64_t a = l->first; a < l->first + l->n; a++)
		for (uint32_t table = DXLB_SB_SAVINGS; table <= DXLB_SB_CHECKING; table++) {
			int ret = dxl_txn_insert(t, table, a, v, sizeof(v));
			if (ret == DXL_E_EXIST) { /* a reload: keep it (the transaction goes on) */
				l->existing++;
				continue;
			}
			if (ret)
				return ret;
		}
	return 0;
}

static void load_co_main(void *arg)
{
	struct load_co *l = arg;
	struct load_shared *sh = l->sh;
	for (;;) {
		if (atomic_load(&sh->err))
			return;
		uint64_t first = atomic_fetch_add(&sh->next, sh->batch);
		if (first >= sh->accounts)
			return;
		l->first = first;
		l->n = DXL_MIN(sh->batch, sh->accounts - first);
		uint64_t t0 = dxl_now_ms();
		int ret;
		for (;;) {
			struct dxl_txn_info info;
			ret = dxl_txn_run(l->co.w, load_fn, l, 0, &info);
			/* unavailable (a failover), or a conflict retried too often:
			 * nothing happened, or it did (maybe) and the inserts of the
			 * retry find the rows: either way the batch is run again */
			if ((ret == DXL_E_UNAVAIL || ret == DXL_E_CONFLICT) &&
			    dxl_now_ms() - t0 < SB_UNAVAIL_GIVEUP_MS) {
				dxl_co_sleep_ms(50);
				continue;
			}
			break;
		}
		if (ret) {
			int zero = 0;
			if (atomic_compare_exchange_strong(&sh->err, &zero, ret))
				snprintf(sh->errmsg, sizeof(sh->errmsg),
					 "accounts %" PRIu64 "..%" PRIu64 ": %s: %s", l->first,
					 l->first + l->n - 1, dxl_errname(ret), dxl_errmsg());
			return;
		}
		atomic_fetch_add(&sh->existing, l->existing);
	}
}

int sb_load(struct sb_env *e, uint64_t accounts, int64_t init_balance, uint32_t batch,
	    uint32_t threads, uint32_t coroutines, uint64_t *existing)
{
	if (!batch || batch * 2 > DXL_TXN_MAX_OPS)
		return dxl_err_set(DXL_E_INVAL, "load: %u accounts per transaction (1..%d)", batch,
				   DXL_TXN_MAX_OPS / 2);
	struct load_shared sh = {.accounts = accounts, .batch = batch, .bal = init_balance};
	size_t n = (size_t)threads * coroutines;
	struct load_co *cos = calloc(n, sizeof(*cos));
	if (!cos)
		return dxl_err_set(DXL_E_NOMEM, "load");
	for (size_t i = 0; i < n; i++)
		cos[i].sh = &sh;
	int ret = sb_run_threads(e, threads, coroutines, load_co_main, cos, sizeof(*cos), NULL,
				 NULL);
	free(cos);
	if (!ret && atomic_load(&sh.err))
		ret = dxl_err_set(atomic_load(&sh.err), "%s", sh.errmsg);
	if (existing)
		*existing = atomic_load(&sh.existing);
	return ret;
}

/* ---- scan ---------------------------------------------------------------------- */

#define SCAN_ACCTS 30 /* accounts per read-only transaction: 60 keys */

struct scan_shared {
	struct sb_state *s;
	atomic_uint_fast64_t next;
	atomic_uint_fast64_t missing;
	atomic_int err;
	char errmsg[400];
	char missing_ex[120];
};

struct scan_co {
	struct sb_co co; /* first */
	struct scan_shared *sh;
	uint64_t first, n;
	int64_t bal[SB_NTABLES][SCAN_ACCTS];
	bool present[SB_NTABLES][SCAN_ACCTS];
};

static int scan_fn(struct dxl_txn *t, void *arg)
{
	struct scan_co *sc = arg;
	for (uint64_t i = 0; i < sc->n; i++)
		for (int tix = 0; tix < SB_NTABLES; tix++) {
			uint8_t v[8];
			uint32_t len = 0;
			int ret = dxl_txn_get(t, sb_table_of(tix), sc->first + i, v, sizeof(v), &len);
			sc->present[tix][i] = ret == 0;
			if (ret == DXL_E_NOENT) /* the transaction goes on */
				continue;
			if (ret)
				return ret;
			if (len != 8)
				return dxl_err_set(DXL_E_CORRUPT, "%s[%" PRIu64 "]: a value of %u bytes",
						   dxlb_sb_table_name(sb_table_of(tix)), sc->first + i,
						   len);
			sc->bal[tix][i] = dxlb_sb_decode(v);
		}
	return 0;
}

static void scan_co_main(void *arg)
{
	struct scan_co *sc = arg;
	struct scan_shared *sh = sc->sh;
	struct sb_state *s = sh->s;
	for (;;) {
		if (atomic_load(&sh->err))
			return;
		uint64_t first = atomic_fetch_add(&sh->next, SCAN_ACCTS);
		if (first >= s->accounts)
			return;
		sc->first = first;
		sc->n = DXL_MIN((uint64_t)SCAN_ACCTS, s->accounts - first);
		uint64_t t0 = dxl_now_ms();
		int ret;
		for (;;) {
			ret = dxl_txn_run(sc->co.w, scan_fn, sc, 0, NULL);
			if ((ret == DXL_E_UNAVAIL || ret == DXL_E_CONFLICT) &&
			    dxl_now_ms() - t0 < SB_UNAVAIL_GIVEUP_MS) {
				dxl_co_sleep_ms(50);
				continue;
			}
			break;
		}
		if (ret) {
			int zero = 0;
			if (atomic_compare_exchange_strong(&sh->err, &zero, ret))
				snprintf(sh->errmsg, sizeof(sh->errmsg),
					 "reading accounts %" PRIu64 "..%" PRIu64 ": %s: %s", sc->first,
					 sc->first + sc->n - 1, dxl_errname(ret), dxl_errmsg());
			return;
		}
		/* the versions the committed (validated) reads saw */
		struct dxl_txn_access acc[2 * SCAN_ACCTS];
		int na = dxl_txn_footprint(dxl_txn_last(sc->co.w), acc, 2 * SCAN_ACCTS);
		for (int k = 0; k < na && k < 2 * SCAN_ACCTS; k++) {
			int tix = sb_tix(acc[k].table);
			if (acc[k].write || tix < 0 || acc[k].key < sc->first ||
			    acc[k].key >= sc->first + sc->n)
				continue;
			s->ver[tix][acc[k].key] = acc[k].version;
		}
		for (uint64_t i = 0; i < sc->n; i++)
			for (int tix = 0; tix < SB_NTABLES; tix++) {
				s->bal[tix][sc->first + i] = sc->present[tix][i] ? sc->bal[tix][i] : 0;
				if (!sc->present[tix][i] && atomic_fetch_add(&sh->missing, 1) == 0)
					snprintf(sh->missing_ex, sizeof(sh->missing_ex), "%s[%" PRIu64 "]",
						 dxlb_sb_table_name(sb_table_of(tix)), sc->first + i);
			}
	}
}

int sb_scan(struct sb_env *e, struct sb_state *s, uint32_t threads, uint32_t coroutines)
{
	struct scan_shared sh = {.s = s};
	size_t n = (size_t)threads * coroutines;
	struct scan_co *cos = calloc(n, sizeof(*cos));
	if (!cos)
		return dxl_err_set(DXL_E_NOMEM, "scan");
	for (size_t i = 0; i < n; i++)
		cos[i].sh = &sh;
	int ret = sb_run_threads(e, threads, coroutines, scan_co_main, cos, sizeof(*cos), NULL,
				 NULL);
	free(cos);
	if (!ret && atomic_load(&sh.err))
		ret = dxl_err_set(atomic_load(&sh.err), "%s", sh.errmsg);
	if (!ret && atomic_load(&sh.missing))
		ret = dxl_err_set(DXL_E_NOENT, "%" PRIu64 " of the %" PRIu64
				  " rows are missing (e.g. %s): not loaded ('load'), or lost",
				  (uint64_t)atomic_load(&sh.missing), 2 * s->accounts, sh.missing_ex);
	return ret;
}
