/* history.h -- a serializability checker for tests: committed transactions'
 * reads and writes (with the record versions they saw and produced), the
 * conflict graph they imply, and a cycle search (issue 6, §4).
 *
 * Every committed transaction is reported with the version of each record it
 * read and the version it wrote (versions of one record are totally ordered
 * by their number; version 0 is the initial value, written by the implicit
 * transaction 0). Edges (Adya's direct serialization graph):
 *   ww: the writer of version v -> the writer of the next version;
 *   wr: the writer of version v -> every reader of v;
 *   rw: every reader of v -> the writer of the next version (anti-dependency).
 * A history is conflict-serializable iff the graph has no cycle.
 */
#ifndef DXLT_HISTORY_H
#define DXLT_HISTORY_H

#include <stddef.h>
#include <stdint.h>

struct dxlt_history;

struct dxlt_history *dxlt_history_new(void);
void dxlt_history_free(struct dxlt_history *h);

/* txn ids are the caller's (> 0, unique per committed transaction) */
int dxlt_history_read(struct dxlt_history *h, uint64_t txn, uint32_t table,
		      uint64_t key, uint64_t version);
int dxlt_history_write(struct dxlt_history *h, uint64_t txn, uint32_t table,
		       uint64_t key, uint64_t version);

/*
 * dxlt_history_check -- 0 if the history is conflict-serializable; 1 if the
 * conflict graph has a cycle (why: the transactions of one cycle and the
 * kinds of its edges); -1 if the history is malformed (two writers of one
 * version: why says which). Counts in *ntxn and *nedges when not NULL.
 */
int dxlt_history_check(struct dxlt_history *h, char *why, size_t cap,
		       size_t *ntxn, size_t *nedges);

#endif /* DXLT_HISTORY_H */
