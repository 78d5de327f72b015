/* sbe.h -- dxl-bench-smallbank-etcd: SmallBank on etcd through its JSON gateway */
#ifndef DXL_BENCH_SBE_H
#define DXL_BENCH_SBE_H

#include <stddef.h>
#include <stdint.h>

#include "bench/lib/smallbank.h"

/* ---- http.c: a small blocking HTTP/1.1 keep-alive client ------------------ */

/*
 * One connection to one server, used by one thread. A request is sent
 * whole, then the whole response is read (Content-Length, chunked, or until
 * the server closes); the connection stays open for the next request and is
 * opened again when the server closed it. No pipelining, no TLS.
 */
struct sbe_http {
	int fd;             /* -1 when closed */
	char host[64];
	uint16_t port;
	int timeout_ms;     /* per send/recv call (default 30000) */
	char *in;           /* raw bytes received */
	size_t in_len, in_cap;
	char *out;          /* the request being sent */
	size_t out_cap;
	char *body;         /* the last response's body, NUL-terminated */
	size_t body_len, body_cap;
	int status;         /* the last response's status code */
};

/* sbe_http_init -- prepare h for "host:port" (no connection yet); DXL_E_INVAL
 * for a bad address */
int sbe_http_init(struct sbe_http *h, const char *hostport);
/* sbe_http_fini -- close and free h */
void sbe_http_fini(struct sbe_http *h);
/* sbe_http_close -- close the connection only (the next request reopens it) */
void sbe_http_close(struct sbe_http *h);

/*
 * sbe_http_request -- send METHOD PATH with body (len bytes; NULL/0 for
 * none, sent as application/json) and read the response into h->status,
 * h->body, h->body_len. Returns 0 whatever the status code, or
 * DXL_E_UNREACHABLE (connect/send/recv failed or the server closed the
 * connection), DXL_E_TIMEDOUT, DXL_E_PROTO (a response we cannot parse),
 * DXL_E_NOMEM. After an error the connection is closed; whether the server
 * acted on the request is then unknown.
 */
int sbe_http_request(struct sbe_http *h, const char *method, const char *path,
		     const char *body, size_t len);

/* sbe_b64_encode -- standard base64 with padding of in[0..len) into out
 * (room for 4*((len+2)/3)+1 bytes, NUL-terminated); returns the length */
size_t sbe_b64_encode(const void *in, size_t len, char *out);
/* sbe_b64_decode -- decode the NUL-terminated in into out (cap bytes);
 * returns the length, or -1 if in is not base64 or out is too small */
long sbe_b64_decode(const char *in, void *out, size_t cap);

/* ---- etcd.c: the few etcd v3 calls the benchmark makes ------------------- */

/*
 * Keys are "sav/<acct>" and "chk/<acct>" (decimal), values the balance as a
 * decimal string. Every call returns 0 or a negative DXL_E_*: DXL_E_AGAIN
 * for "too many requests" (nothing was done, retry), DXL_E_UNAVAIL for
 * etcd's Unavailable, DXL_E_PROTO for other error replies or an unexpected
 * body, and the errors of sbe_http_request.
 */

/* sbe_etcd_key -- the key of (table, acct) into out (>= 32 bytes); its length */
int sbe_etcd_key(char *out, uint32_t table, uint64_t acct);

/*
 * sbe_etcd_read -- one read-only txn of n range requests (one per key):
 * an atomic snapshot of the keys at one revision. serializable: served by
 * the member from its local state without a quorum round (may be stale);
 * else linearizable. vals[i] and mod_revs[i] for each key; DXL_E_NOENT if a
 * key does not exist.
 */
int sbe_etcd_read(struct sbe_http *h, int serializable, int n, const uint32_t *tables,
		  const uint64_t *accts, int64_t *vals, int64_t *mod_revs);

/*
 * sbe_etcd_commit -- one txn: compare mod_revision == rev for each of the
 * ncmp keys (ctables/caccts/crevs), on success put the nput values. *ok = 1
 * if every compare held (the puts are applied), 0 if not (nothing applied).
 */
int sbe_etcd_commit(struct sbe_http *h, int ncmp, const uint32_t *ctables,
		    const uint64_t *caccts, const int64_t *crevs, int nput,
		    const uint32_t *ptables, const uint64_t *paccts, const int64_t *pvals,
		    int *ok);

/* sbe_etcd_load -- put savings and checking = bal for accounts
 * [first, first+count) in one txn (2*count <= etcd's --max-txn-ops) */
int sbe_etcd_load(struct sbe_http *h, uint64_t first, uint64_t count, int64_t bal);

/* sbe_etcd_delete_table -- delete every key of the table's prefix */
int sbe_etcd_delete_table(struct sbe_http *h, uint32_t table);

/*
 * sbe_etcd_sum_table -- the sum of all values under the table's prefix and
 * the number of keys, read in pages at one revision (a consistent snapshot);
 * DXL_E_PROTO if a value is not a decimal number.
 */
int sbe_etcd_sum_table(struct sbe_http *h, uint32_t table, int64_t *sum, uint64_t *count);

/* sbe_etcd_version -- the server's version ("3.4.23") into out */
int sbe_etcd_version(struct sbe_http *h, char *out, size_t cap);

/* sbe_etcd_members -- the number of members of the cluster */
int sbe_etcd_members(struct sbe_http *h, int *n);

#endif /* DXL_BENCH_SBE_H */
