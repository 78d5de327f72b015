/* stores.h -- what the replicas' stores hold, for tests: every live record
 * of a replica's store file, and the comparison of the stores of every
 * replica of a shard key by key (issue 20: "the checker must see what the
 * stores hold"). Open store files of stopped replicas only (after a clean
 * shutdown, or killed): opening rewrites torn free slots. */
#ifndef DXLT_STORES_H
#define DXLT_STORES_H

#include <stddef.h>
#include <stdint.h>

#include "dxl/log.h"

struct dxlt_rec {
	uint32_t table;
	uint64_t key;
	uint64_t version;
	uint64_t ts;
	uint32_t len;
	const uint8_t *value; /* len bytes, in the set's memory */
};

struct dxlt_recset {
	struct dxlt_rec *r; /* live records, sorted by (table, key) */
	size_t n;
	uint64_t torn;       /* slots found torn (none after a clean shutdown) */
	uint64_t tombstones; /* the store's tombstones (dxl_store_stats) */
	uint8_t *values;
	/* the tombstones (version, ts; len 0), sorted by (table, key) */
	struct dxlt_rec *t;
	size_t nt;
	/* per table: its id and reclaim floor (dxl_store_reclaim_floor) */
	uint32_t ntables;
	uint32_t table_id[64];
	uint64_t floor[64];
};

/*
 * dxlt_store_load -- every live record and tombstone of
 * DATA_ROOT/<node>/store-<shard>.dat
 * (cluster: the region's cluster name; dur: its durability mode) into *out.
 * 0, or a negative DXL_E_* (dxl_errmsg says why).
 */
int dxlt_store_load(const char *data_root, const char *cluster, uint32_t node,
		    uint32_t shard, enum dxl_durability dur, struct dxlt_recset *out);
void dxlt_recset_free(struct dxlt_recset *s);
/* the record of (table, key) in s, or NULL */
const struct dxlt_rec *dxlt_recset_find(const struct dxlt_recset *s, uint32_t table,
					uint64_t key);

struct dxlt_stores_report {
	uint32_t stores;   /* store files compared */
	uint64_t keys;     /* distinct live keys over all of them */
	uint64_t records;  /* live records compared (keys x stores) */
	uint64_t tombstones; /* the stores' tombstones (all of them) */
	uint64_t tombs_compared; /* tombstones at or above the floors, compared */
	uint64_t diffs;    /* differences found */
};

/*
 * dxlt_stores_compare -- the stores of shard `shard` on nodes[0..n) (the
 * primary among them, promoted or not) hold the same live keys -- a key
 * live on one and absent on another is a difference, extra keys included
 * -- with the same version and value, and the same tombstones (deleted
 * keys, by version) among those at or above the largest reclaim floor of
 * their table (a store may have given away a tombstone below its floor:
 * dxl_store_reclaim_floor); no torn slot. 0 if identical, 1 if not (why:
 * the first differences), -1 if a store cannot be opened (why). rep (may
 * be NULL) receives the counts.
 */
int dxlt_stores_compare(const char *data_root, const char *cluster, uint32_t shard,
			const uint32_t *nodes, uint32_t n, enum dxl_durability dur,
			char *why, size_t cap, struct dxlt_stores_report *rep);

#endif /* DXLT_STORES_H */
