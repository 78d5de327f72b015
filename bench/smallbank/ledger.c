/* ledger.c -- the ledger file of a run: what the checker needs (versions
 * before, committed writes per key, money deltas, transactions of unknown
 * outcome) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/smallbank/sb.h"
#include "common/common.h"

static json_t *u64_array(const uint64_t *v, uint64_t n)
{
	json_t *a = json_array();
	for (uint64_t i = 0; i < n; i++)
		json_array_append_new(a, json_integer((json_int_t)v[i]));
	return a;
}

static json_t *u32_array(const uint32_t *v, uint64_t n)
{
	json_t *a = json_array();
	for (uint64_t i = 0; i < n; i++)
		json_array_append_new(a, json_integer((json_int_t)v[i]));
	return a;
}

json_t *sb_ledger_json(const struct sb_ledger *l)
{
	json_t *o = json_object();
	json_object_set_new(o, "format", json_integer(1));
	json_object_set_new(o, "accounts", json_integer((json_int_t)l->accounts));
	json_object_set_new(o, "total_before", json_integer(l->total_before));
	json_object_set_new(o, "committed", json_integer((json_int_t)l->committed));
	json_object_set_new(o, "sum_delta", json_integer(l->sum_delta));
	json_t *vb = json_object(), *wr = json_object();
	for (int t = 0; t < SB_NTABLES; t++) {
		const char *tn = dxlb_sb_table_name(sb_table_of(t));
		json_object_set_new(vb, tn, u64_array(l->ver_before[t], l->accounts));
		json_object_set_new(wr, tn, u32_array(l->writes[t], l->accounts));
	}
	json_object_set_new(o, "versions_before", vb);
	json_object_set_new(o, "writes", wr);
	json_t *m = json_array();
	int64_t msum = 0;
	for (size_t i = 0; i < l->nmaybe; i++) {
		const struct sb_maybe *x = &l->maybe[i];
		json_t *w = json_array();
		for (uint32_t j = 0; j < x->nw; j++)
			json_array_append_new(w, json_pack("[s,I]", dxlb_sb_table_name(x->table[j]),
							   (json_int_t)x->acct[j]));
		json_array_append_new(m, json_pack("{s:s,s:I,s:o}", "type",
						   dxlb_sb_type_name((enum dxlb_sb_type)x->type),
						   "delta", (json_int_t)x->delta, "writes", w));
		msum += x->delta;
	}
	json_object_set_new(o, "maybe", m);
	json_object_set_new(o, "maybe_sum_delta", json_integer(msum));
	return o;
}

static int read_u64s(json_t *a, uint64_t n, uint64_t *out, const char *what)
{
	if (!json_is_array(a) || json_array_size(a) != n)
		return dxl_err_set(DXL_E_CORRUPT, "ledger: %s is not an array of %" PRIu64 " numbers",
				   what, n);
	for (uint64_t i = 0; i < n; i++) {
		json_t *v = json_array_get(a, i);
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return dxl_err_set(DXL_E_CORRUPT, "ledger: %s[%" PRIu64 "] is not a number",
					   what, i);
		out[i] = (uint64_t)json_integer_value(v);
	}
	return 0;
}

static int table_parse(const char *s, uint32_t *table)
{
	if (!strcmp(s, "savings"))
		*table = DXLB_SB_SAVINGS;
	else if (!strcmp(s, "checking"))
		*table = DXLB_SB_CHECKING;
	else
		return dxl_err_set(DXL_E_CORRUPT, "ledger: unknown table '%s'", s);
	return 0;
}

int sb_ledger_load(const char *path, struct sb_ledger *l, json_t **file)
{
	json_error_t je;
	json_t *o = json_load_file(path, 0, &je);
	if (!o)
		return dxl_err_set(DXL_E_NOENT, "ledger %s: %s (line %d)", path, je.text, je.line);
	json_int_t acc = 0, before = 0, committed = 0, sum = 0;
	json_t *vb = NULL, *wr = NULL, *m = NULL;
	if (json_unpack_ex(o, &je, 0, "{s:I,s:I,s:I,s:I,s:o,s:o,s:o}", "accounts", &acc,
			   "total_before", &before, "committed", &committed, "sum_delta", &sum,
			   "versions_before", &vb, "writes", &wr, "maybe", &m) ||
	    acc < 2 || !json_is_array(m)) {
		json_decref(o);
		return dxl_err_set(DXL_E_CORRUPT, "ledger %s: not a SmallBank ledger (%s)", path,
				   je.text);
	}
	int ret = sb_ledger_alloc(l, (uint64_t)acc);
	if (ret) {
		json_decref(o);
		return ret;
	}
	l->total_before = before;
	l->committed = (uint64_t)committed;
	l->sum_delta = sum;
	uint64_t *tmp = calloc((size_t)acc, sizeof(uint64_t));
	if (!tmp)
		ret = dxl_err_set(DXL_E_NOMEM, "ledger");
	for (int t = 0; t < SB_NTABLES && !ret; t++) {
		const char *tn = dxlb_sb_table_name(sb_table_of(t));
		char what[64];
		snprintf(what, sizeof(what), "versions_before.%s", tn);
		ret = read_u64s(json_object_get(vb, tn), l->accounts, l->ver_before[t], what);
		snprintf(what, sizeof(what), "writes.%s", tn);
		if (!ret)
			ret = read_u64s(json_object_get(wr, tn), l->accounts, tmp, what);
		for (uint64_t i = 0; !ret && i < l->accounts; i++)
			l->writes[t][i] = (uint32_t)tmp[i];
	}
	free(tmp);
	size_t nm = json_array_size(m);
	if (!ret && nm) {
		l->maybe = calloc(nm, sizeof(*l->maybe));
		if (!l->maybe)
			ret = dxl_err_set(DXL_E_NOMEM, "ledger");
	}
	for (size_t i = 0; !ret && i < nm; i++) {
		json_t *x = json_array_get(m, i), *w = NULL;
		json_int_t d = 0;
		const char *type = "";
		if (json_unpack(x, "{s:s,s:I,s:o}", "type", &type, "delta", &d, "writes", &w) ||
		    !json_is_array(w) || json_array_size(w) > DXLB_SB_MAX_KEYS) {
			ret = dxl_err_set(DXL_E_CORRUPT, "ledger: maybe[%zu] is malformed", i);
			break;
		}
		struct sb_maybe *y = &l->maybe[i];
		y->type = -1;
		for (int k = 0; k < DXLB_SB_NTYPES; k++)
			if (!strcmp(type, dxlb_sb_type_name((enum dxlb_sb_type)k)))
				y->type = k;
		y->delta = d;
		for (size_t j = 0; !ret && j < json_array_size(w); j++) {
			const char *tn = "";
			json_int_t a = -1;
			if (json_unpack(json_array_get(w, j), "[s,I]", &tn, &a) || a < 0 ||
			    (uint64_t)a >= l->accounts) {
				ret = dxl_err_set(DXL_E_CORRUPT, "ledger: maybe[%zu].writes[%zu] is malformed",
						  i, j);
				break;
			}
			ret = table_parse(tn, &y->table[j]);
			y->acct[j] = (uint64_t)a;
			y->nw++;
		}
		l->nmaybe++;
	}
	if (ret) {
		sb_ledger_free(l);
		json_decref(o);
		return ret;
	}
	if (file)
		*file = o;
	else
		json_decref(o);
	return 0;
}
