/* etcd.c -- the etcd v3 calls of the SmallBank peer, over etcd's JSON gateway */
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/smallbank-etcd/sbe.h"
#include "common/common.h"

/*
 * etcd 3.4 serves its gRPC API as JSON at /v3/<service>/<method> (grpc-
 * gateway): bytes fields are base64, int64 fields are decimal strings, and
 * fields with their zero value are left out (a failed txn has no
 * "succeeded"). An error is a non-200 reply {"error", "message", "code"}
 * with the gRPC code.
 */

int sbe_etcd_key(char *out, uint32_t table, uint64_t acct)
{
	return snprintf(out, 32, "%s/%" PRIu64, table == DXLB_SB_SAVINGS ? "sav" : "chk", acct);
}

/* the base64 of (table, acct)'s key into out (>= 48 bytes) */
static void key64(char *out, uint32_t table, uint64_t acct)
{
	char k[32];
	int n = sbe_etcd_key(k, table, acct);
	sbe_b64_encode(k, (size_t)n, out);
}

static void val64(char *out, int64_t v)
{
	char s[32];
	int n = snprintf(s, sizeof(s), "%" PRId64, v);
	sbe_b64_encode(s, (size_t)n, out);
}

/* a growing request body */
struct buf {
	char *p;
	size_t len, cap;
	int oom;
};

static void bprintf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(struct buf *b, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = b->oom ? 0 : vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (b->oom)
			return;
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t nc = b->cap ? b->cap * 2 : 1024;
		while (nc < b->len + (size_t)n + 1)
			nc *= 2;
		char *q = realloc(b->p, nc);
		if (!q) {
			b->oom = 1;
			return;
		}
		b->p = q;
		b->cap = nc;
	}
}

/* POST path with body b (freed); on a 200 reply the parsed JSON in *out */
static int call(struct sbe_http *h, const char *path, struct buf *b, json_t **out)
{
	*out = NULL;
	if (b->oom) {
		free(b->p);
		return dxl_err_set(DXL_E_NOMEM, "etcd %s: request body", path);
	}
	int ret = sbe_http_request(h, "POST", path, b->p, b->len);
	free(b->p);
	memset(b, 0, sizeof(*b));
	if (ret) {
		dxl_err_prefix("etcd %s", path);
		return ret;
	}
	json_error_t je;
	json_t *j = json_loadb(h->body, h->body_len, 0, &je);
	if (h->status != 200) {
		const char *msg = j ? json_string_value(json_object_get(j, "message")) : NULL;
		json_int_t code = j ? json_integer_value(json_object_get(j, "code")) : 0;
		/* gRPC codes: 8 ResourceExhausted ("too many requests", refused before
		 * it was proposed), 14 Unavailable */
		ret = code == 8 ? DXL_E_AGAIN : code == 14 ? DXL_E_UNAVAIL : DXL_E_PROTO;
		dxl_err_set(ret, "etcd %s:%u %s: HTTP %d, code %lld: %s", h->host, h->port, path,
			    h->status, (long long)code, msg ? msg : h->body);
		json_decref(j);
		return ret;
	}
	if (!j)
		return dxl_err_set(DXL_E_PROTO, "etcd %s: reply is not JSON (%s): %.200s", path,
				   je.text, h->body);
	*out = j;
	return 0;
}

static int64_t jint(json_t *o, const char *name)
{
	json_t *v = json_object_get(o, name);
	if (json_is_string(v))
		return strtoll(json_string_value(v), NULL, 10);
	if (json_is_integer(v))
		return json_integer_value(v);
	return 0; /* left out: zero */
}

/* a kv's value as a decimal number */
static int kv_value(json_t *kv, int64_t *val)
{
	const char *v64 = json_string_value(json_object_get(kv, "value"));
	char s[64];
	long n = v64 ? sbe_b64_decode(v64, s, sizeof(s) - 1) : 0;
	if (n <= 0)
		return dxl_err_set(DXL_E_PROTO, "etcd: value %s is not a base64 number",
				   v64 ? v64 : "(none)");
	s[n] = '\0';
	char *end;
	*val = strtoll(s, &end, 10);
	if (*end)
		return dxl_err_set(DXL_E_PROTO, "etcd: value \"%s\" is not a number", s);
	return 0;
}

int sbe_etcd_read(struct sbe_http *h, int serializable, int n, const uint32_t *tables,
		  const uint64_t *accts, int64_t *vals, int64_t *mod_revs)
{
	struct buf b = {0};
	bprintf(&b, "{\"success\":[");
	for (int i = 0; i < n; i++) {
		char k[48];
		key64(k, tables[i], accts[i]);
		bprintf(&b, "%s{\"request_range\":{\"key\":\"%s\"%s}}", i ? "," : "", k,
			serializable ? ",\"serializable\":true" : "");
	}
	bprintf(&b, "]}");
	json_t *j;
	int ret = call(h, "/v3/kv/txn", &b, &j);
	if (ret)
		return ret;
	json_t *rs = json_object_get(j, "responses");
	if (json_array_size(rs) != (size_t)n) {
		ret = dxl_err_set(DXL_E_PROTO, "etcd read: %zu responses for %d ranges",
				  json_array_size(rs), n);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		json_t *rr = json_object_get(json_array_get(rs, (size_t)i), "response_range");
		json_t *kv = json_array_get(json_object_get(rr, "kvs"), 0);
		if (!kv) {
			char k[32];
			sbe_etcd_key(k, tables[i], accts[i]);
			ret = dxl_err_set(DXL_E_NOENT, "etcd read: no key %s (not loaded?)", k);
			goto out;
		}
		if ((ret = kv_value(kv, &vals[i])))
			goto out;
		mod_revs[i] = jint(kv, "mod_revision");
	}
out:
	json_decref(j);
	return ret;
}

int sbe_etcd_commit(struct sbe_http *h, int ncmp, const uint32_t *ctables,
		    const uint64_t *caccts, const int64_t *crevs, int nput,
		    const uint32_t *ptables, const uint64_t *paccts, const int64_t *pvals,
		    int *ok)
{
	struct buf b = {0};
	char k[48], v[48];
	bprintf(&b, "{\"compare\":[");
	for (int i = 0; i < ncmp; i++) {
		key64(k, ctables[i], caccts[i]);
		bprintf(&b,
			"%s{\"key\":\"%s\",\"target\":\"MOD\",\"result\":\"EQUAL\","
			"\"mod_revision\":\"%" PRId64 "\"}",
			i ? "," : "", k, crevs[i]);
	}
	bprintf(&b, "],\"success\":[");
	for (int i = 0; i < nput; i++) {
		key64(k, ptables[i], paccts[i]);
		val64(v, pvals[i]);
		bprintf(&b, "%s{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}}", i ? "," : "", k,
			v);
	}
	bprintf(&b, "]}");
	json_t *j;
	int ret = call(h, "/v3/kv/txn", &b, &j);
	if (ret)
		return ret;
	*ok = json_is_true(json_object_get(j, "succeeded"));
	json_decref(j);
	return 0;
}

int sbe_etcd_load(struct sbe_http *h, uint64_t first, uint64_t count, int64_t bal)
{
	struct buf b = {0};
	char k[48], v[48];
	val64(v, bal);
	bprintf(&b, "{\"success\":[");
	for (uint64_t a = first; a < first + count; a++) {
		for (uint32_t t = DXLB_SB_SAVINGS; t <= DXLB_SB_CHECKING; t++) {
			key64(k, t, a);
			bprintf(&b, "%s{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}}",
				a == first && t == DXLB_SB_SAVINGS ? "" : ",", k, v);
		}
	}
	bprintf(&b, "]}");
	json_t *j;
	int ret = call(h, "/v3/kv/txn", &b, &j);
	json_decref(j);
	return ret;
}

/* the prefix "sav/" or "chk/" and the end of its range ("sav0": '/' + 1) */
static void prefix_range(uint32_t table, char *key, char *end)
{
	const char *p = table == DXLB_SB_SAVINGS ? "sav/" : "chk/";
	const char *e = table == DXLB_SB_SAVINGS ? "sav0" : "chk0";
	sbe_b64_encode(p, 4, key);
	sbe_b64_encode(e, 4, end);
}

int sbe_etcd_delete_table(struct sbe_http *h, uint32_t table)
{
	char k[16], e[16];
	prefix_range(table, k, e);
	struct buf b = {0};
	bprintf(&b, "{\"key\":\"%s\",\"range_end\":\"%s\"}", k, e);
	json_t *j;
	int ret = call(h, "/v3/kv/deleterange", &b, &j);
	json_decref(j);
	return ret;
}

int sbe_etcd_sum_table(struct sbe_http *h, uint32_t table, int64_t *sum, uint64_t *count)
{
	enum { PAGE = 5000 };
	char e[16], start64[96], start[64];
	prefix_range(table, start64, e);
	int64_t rev = 0;
	*sum = 0;
	*count = 0;
	for (;;) {
		struct buf b = {0};
		bprintf(&b, "{\"key\":\"%s\",\"range_end\":\"%s\",\"limit\":\"%d\"", start64, e,
			PAGE);
		if (rev)
			bprintf(&b, ",\"revision\":\"%" PRId64 "\"", rev);
		bprintf(&b, "}");
		json_t *j;
		int ret = call(h, "/v3/kv/range", &b, &j);
		if (ret)
			return ret;
		if (!rev) /* every later page at the first page's revision */
			rev = jint(json_object_get(j, "header"), "revision");
		json_t *kvs = json_object_get(j, "kvs");
		size_t n = json_array_size(kvs);
		for (size_t i = 0; i < n; i++) {
			int64_t v;
			if ((ret = kv_value(json_array_get(kvs, i), &v))) {
				json_decref(j);
				return ret;
			}
			*sum += v;
		}
		*count += n;
		int more = json_is_true(json_object_get(j, "more"));
		if (more && n) {
			/* the next page starts just after the last key: key + "\0" */
			const char *last = json_string_value(
				json_object_get(json_array_get(kvs, n - 1), "key"));
			long l = last ? sbe_b64_decode(last, start, sizeof(start) - 1) : -1;
			if (l < 0) {
				json_decref(j);
				return dxl_err_set(DXL_E_PROTO, "etcd range: bad key in reply");
			}
			start[l] = '\0';
			sbe_b64_encode(start, (size_t)l + 1, start64);
		}
		json_decref(j);
		if (!more || !n)
			return 0;
	}
}

int sbe_etcd_version(struct sbe_http *h, char *out, size_t cap)
{
	int ret = sbe_http_request(h, "GET", "/version", NULL, 0);
	if (ret)
		return ret;
	json_t *j = json_loadb(h->body, h->body_len, 0, NULL);
	const char *v = json_string_value(json_object_get(j, "etcdserver"));
	if (h->status != 200 || !v) {
		json_decref(j);
		return dxl_err_set(DXL_E_PROTO, "etcd /version: HTTP %d: %.200s", h->status,
				   h->body);
	}
	snprintf(out, cap, "%s", v);
	json_decref(j);
	return 0;
}

int sbe_etcd_members(struct sbe_http *h, int *n)
{
	struct buf b = {0};
	bprintf(&b, "{}");
	json_t *j;
	int ret = call(h, "/v3/cluster/member/list", &b, &j);
	if (ret)
		return ret;
	*n = (int)json_array_size(json_object_get(j, "members"));
	json_decref(j);
	return 0;
}
