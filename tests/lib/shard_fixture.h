/* shard_fixture.h -- a shard replica in one process for recovery tests: a record store applying a log it appends to, with retention */
#ifndef DXL_TESTS_SHARD_FIXTURE_H
#define DXL_TESTS_SHARD_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "dxl/engine.h"
#include "dxl/log.h"

/*
 * Tables: 1 (value size 24, 512 slots, keys 0..299) and 2 (value size 300,
 * 64 slots, keys 0..49). Every transaction writes 1..4 random keys
 * (insert, update or delete by what the store holds), with versions from
 * one counter (so every key's versions grow), is logged as a write set in
 * ring (txn % nrings) of each log attached, and applied to the store
 * (dxl_store_apply_writeset): a backup that applies as it appends. Two logs
 * can be kept (log 0 with retention, log 1 never truncated), so a test can
 * replay a window the first one reclaimed. Process durability.
 */
#define DXLT_SHARD_MAX_LOGS 2
#define DXLT_SHARD_NRINGS 2

extern const struct dxl_table_schema DXLT_SHARD_TABLES[2];

struct dxlt_shard_log {
	struct dxl_region *r;
	struct dxl_logstore *ls;
	uint64_t tail_pos[DXLT_SHARD_NRINGS], tail_seq[DXLT_SHARD_NRINGS];
};

struct dxlt_shard {
	char dir[256];
	uint32_t shard;
	struct dxl_store *s;
	uint32_t nlogs;
	struct dxlt_shard_log log[DXLT_SHARD_MAX_LOGS];
	uint64_t ts, version, ntx;
	unsigned seed;
};

extern const struct dxl_region_id DXLT_SHARD_ID;

/* create DIR/<name>.store and nlogs logs DIR/<name>.log<i> (ring_size
 * each ring); 0 or fails the test */
void dxlt_shard_create(struct dxlt_shard *x, const char *dir, const char *name,
		       uint32_t nlogs, uint64_t ring_size, unsigned seed);
void dxlt_shard_close(struct dxlt_shard *x);

/* one random transaction (logged, applied); DXL_E_FULL if a ring is full */
int dxlt_shard_txn(struct dxlt_shard *x);

/* log one write set (commit timestamp ts) in ring (ntx % nrings) of every
 * log, without applying it (a primary's coordinator logs, then writes
 * back); ntx + 1. DXL_E_FULL if a ring is full */
int dxlt_shard_log_ws(struct dxlt_shard *x, const void *ws, uint32_t len, uint64_t ts);

/* retention on log i: advance each ring's head over up to n records
 * (every record is applied already); returns the records passed */
int dxlt_shard_retain(struct dxlt_shard *x, uint32_t i, uint32_t n);

/* a fresh, empty store with the fixture's tables at path (shard x->shard) */
struct dxl_store *dxlt_shard_new_store(const struct dxlt_shard *x, const char *path);

/* 0 if a and b hold the same live records (key, version, ts, value) in
 * every table; else fails the test naming the first difference */
void dxlt_shard_assert_same(struct dxl_store *a, struct dxl_store *b);

/* the state digest of a (live records; tombstones from each table's
 * reclaim floor on, the larger of a's and b's: what both keep; b may be
 * NULL); fails the test on an error or a torn slot */
struct dxl_digest;
void dxlt_store_digest(struct dxl_store *a, struct dxl_store *b, struct dxl_digest *out);

#endif /* DXL_TESTS_SHARD_FIXTURE_H */
