/* listappend.h -- a list-append history and its serializability checker
 * (issue 12; Elle's list-append idea: Kingsbury & Alvaro, "Elle", VLDB 2020)
 *
 * Every key holds a list of unique elements; a transaction reads whole
 * lists and appends elements. Because every element is unique and lists
 * only grow, the final list of a key gives the order of every append to
 * it (the version order), and every read names exactly the appends it saw
 * (a prefix of that order). From that, without trusting the system's own
 * version numbers:
 *   ww  the appender of element i -> the appender of element i+1;
 *   wr  the appender of the last element a read saw -> the reader;
 *   rw  a reader -> the appender of the first element it did not see;
 * (the initial empty list is written by the implicit transaction 0), and
 * serializability = no cycle (Adya's G0, G1c, G2). Besides the cycles it
 * reports: a read that is not a prefix of the final list (an append lost,
 * reordered or invented), an element of an aborted transaction seen
 * (G1a), an appended element of a committed transaction missing, a
 * transaction of unknown outcome (its coordinator died) seen in part.
 *
 * A transaction of unknown outcome counts as committed iff one of its
 * elements is in a final list -- then all of them must be.
 */
#ifndef DXLT_LISTAPPEND_H
#define DXLT_LISTAPPEND_H

#include <stddef.h>
#include <stdint.h>

enum dxlt_la_status {
	DXLT_LA_COMMITTED = 1,
	DXLT_LA_ABORTED = 2, /* certainly not committed */
	DXLT_LA_UNKNOWN = 3, /* may have committed */
};

struct dxlt_la;

struct dxlt_la *dxlt_la_new(void);
void dxlt_la_free(struct dxlt_la *h);

/* a transaction (ids unique, > 0); its reads and appends follow, in order */
int dxlt_la_txn(struct dxlt_la *h, uint64_t txn, enum dxlt_la_status st);
int dxlt_la_read(struct dxlt_la *h, uint64_t txn, uint64_t key, const uint32_t *elems,
		 uint32_t n);
int dxlt_la_append(struct dxlt_la *h, uint64_t txn, uint64_t key, uint32_t elem);
/* the final list of key, read after every transaction ended */
int dxlt_la_final(struct dxlt_la *h, uint64_t key, const uint32_t *elems, uint32_t n);

struct dxlt_la_result {
	size_t txns;        /* committed + unknown-and-seen (in the graph) */
	size_t unknown_in, unknown_out;
	size_t reads, appends, edges;
	size_t anomalies;   /* every kind above, counted */
	char why[1024];     /* the first anomaly */
};

/* dxlt_la_check -- 0 serializable and consistent; 1 anomalies (r->why says
 * the first); -1 the history is malformed (an element appended twice, a
 * read of a transaction not declared) or out of memory */
int dxlt_la_check(struct dxlt_la *h, struct dxlt_la_result *r);

#endif
