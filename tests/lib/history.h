/* history.h -- a serializability checker for tests: transactions' reads and
 * writes (with the record versions they saw and produced), the conflict
 * graph they imply, real-time order, and a cycle search (issue 6, §4;
 * issue 20: deletes, absence, unknown outcomes, real time).
 *
 * Every transaction is reported with the version of each record it read
 * and the version it wrote. The versions of one record are totally ordered
 * by their number; version 0 is the initial state, written by the implicit
 * transaction 0. A write is a value (insert, update) or a delete: a delete's
 * version is its tombstone's, a state of its own ("absent since v"), not
 * the initial state. A read is a value read (a present version, exactly) or
 * an absence read (existence answers count: "no such key", and the
 * absence an insert relied on) made at version v: its state is the last
 * write at or below v, which must be a delete (or the initial state). An
 * absence read at version 0 of a key that was deleted is a miss without a
 * tombstone (reclaimed: which absence is not known): it gives no edge.
 *
 * Edges (Adya's direct serialization graph):
 *   ww: the writer of version v -> the writer of the next version;
 *   wr: the writer of the state read -> the reader;
 *   rw: the reader of a state -> the writer of the next version;
 *   rt: (real time) a transaction acknowledged before another began ->
 *       that one (strict serializability: a transaction that started after
 *       another was acknowledged must see it).
 * A history is (strictly) serializable iff the graph has no cycle.
 *
 * Transactions of unknown outcome ("maybe": the client was not told) count
 * as committed iff another counted transaction read a state they wrote (a
 * value read: that version; an absence read: the last delete at or below
 * its version, with no counted write after it), else as not committed. Both ways are sound: leaving out a transaction
 * nobody read from never creates a cycle, so the history passes iff one of
 * the two outcomes is serializable.
 */
#ifndef DXLT_HISTORY_H
#define DXLT_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dxlt_history;

struct dxlt_history *dxlt_history_new(void);
void dxlt_history_free(struct dxlt_history *h);

/* txn ids are the caller's (> 0, unique per transaction) */
int dxlt_history_read(struct dxlt_history *h, uint64_t txn, uint32_t table,
		      uint64_t key, uint64_t version);
/* an absence read: version = the tombstone seen (0: none) */
int dxlt_history_read_absent(struct dxlt_history *h, uint64_t txn, uint32_t table,
			     uint64_t key, uint64_t version);
int dxlt_history_write(struct dxlt_history *h, uint64_t txn, uint32_t table,
		       uint64_t key, uint64_t version);
/* a delete: its tombstone's version */
int dxlt_history_delete(struct dxlt_history *h, uint64_t txn, uint32_t table,
			uint64_t key, uint64_t version);

/*
 * dxlt_history_txn -- what is known of txn beyond its reads and writes (a
 * transaction never described is committed, without real time):
 * begin_ns: before its first read (the attempt that counted); end_ns: when
 * its commit was acknowledged (0: never: maybe or read-only unknown);
 * maybe: its outcome is unknown. Clock: one monotonic clock for the whole
 * history (CLOCK_MONOTONIC is one clock for every process of a machine).
 */
int dxlt_history_txn(struct dxlt_history *h, uint64_t txn, uint64_t begin_ns,
		     uint64_t end_ns, bool maybe);

struct dxlt_history_stats {
	size_t ntxn;      /* transactions counted (with the initial one) */
	size_t nedges;    /* conflict and real-time edges */
	size_t maybe_in;  /* unknown outcomes counted as committed */
	size_t maybe_out; /* ... as not committed */
	size_t rt_edges;  /* real-time edges */
	size_t deletes;   /* delete (tombstone) writes counted */
	size_t absent_reads;
	size_t absent_unknown; /* absence reads at version 0 of a deleted
				  key (a tombstone reclaimed: which
				  absence is unknown): no edges */
};

/*
 * dxlt_history_check -- 0 if the history is serializable; 1 if the graph
 * has a cycle (why: the transactions of one cycle and the kinds of its
 * edges); -1 if the history is malformed or impossible (two committed
 * writers of one version, a read of a version nobody wrote, a value read of
 * a deleted version, an absence read of a present state: why says which).
 * Counts in *ntxn and *nedges when not NULL.
 */
int dxlt_history_check(struct dxlt_history *h, char *why, size_t cap,
		       size_t *ntxn, size_t *nedges);
/* the same, with every count */
int dxlt_history_check_ex(struct dxlt_history *h, char *why, size_t cap,
			  struct dxlt_history_stats *st);

#endif /* DXLT_HISTORY_H */
