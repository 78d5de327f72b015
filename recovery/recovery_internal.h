/* recovery_internal.h -- helpers shared by recovery/'s files (recovery module only) */
#ifndef DXL_RECOVERY_INTERNAL_H
#define DXL_RECOVERY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dxl/recovery.h"

/* DIR/ckpt-<shard>-<seq, 20 digits>.dat; DXL_E_INVAL if it does not fit */
int dxl_rcv_ckpt_name(char *buf, size_t cap, const char *dir, uint32_t shard,
		      uint64_t seq);

/* true if slot of table is inconsistent (dxl_store_read: DXL_E_AGAIN after
 * its retries) and its key (line 0 offset 16) maps to it: a record torn by
 * a crash that the store keeps reserved for its key until the log's replay
 * rewrites it -- or a live record a writer is slow to finish */
bool dxl_rcv_torn_reserved(struct dxl_store *s, uint32_t table, uint64_t slot);

/* the record digest's hash from the value's CRC32C (dxl_digest_add
 * computes that CRC itself) */
void dxl_rcv_digest_add_crc(struct dxl_digest *d, uint32_t table, uint64_t key,
			    uint64_t version, uint32_t vcrc, uint32_t len);

/* true if slot of table holds key r->key's tombstone in s (r: the slot as
 * read; the store's key map names the slot for that absent key) */
bool dxl_rcv_is_tombstone(struct dxl_store *s, uint32_t table, uint64_t slot,
			  const struct dxl_record *r);

/* dxl_state_add with the value's CRC32C given */
int dxl_rcv_state_add_crc(struct dxl_state *s, uint32_t table, uint64_t key, uint64_t version,
			  uint64_t ts, bool live, uint32_t vcrc, uint32_t len);

/* the writer's start_ts (informational: the heads' largest last_ts) */
void dxl_rcv_writer_set_start_ts(struct dxl_ckpt_writer *w, uint64_t ts);

/* fsync the directory holding path (a create, rename or unlink in it is
 * durable afterwards); a failure is logged */
void dxl_rcv_fsync_parent(const char *path);

/* post chain on qp and wait for the completion of wr_id (the last,
 * signalled request); a failed completion is DXL_E_ACCESS (remote access
 * error: the source re-registered) or DXL_E_UNREACHABLE */
int dxl_rcv_post_wait(struct dxl_qp *qp, struct dxl_wr *chain, uint64_t wr_id);

/* READ [off, off+len) of src's data region into dst, in READs of at most
 * 1 MiB with wr_id; adds the bytes read to *nread */
int dxl_rcv_read_remote(struct dxl_qp *qp, const struct dxl_log_target *src,
			uint64_t off, uint8_t *dst, uint64_t len, uint32_t lkey,
			uint64_t wr_id, uint64_t *nread);

/* make [dst, dst+len) of region r equal to src: pages that differ are
 * copied and persisted, runs of them in one go. Returns the number of
 * bytes whose value changed. */
uint64_t dxl_rcv_sync_bytes(struct dxl_region *r, uint8_t *dst,
			    const uint8_t *src, uint64_t len);

/* the writer's summary so far (shard, tables, counts) */
const struct dxl_ckpt_info *dxl_rcv_writer_info(const struct dxl_ckpt_writer *w);

/*
 * dxl_rcv_xfer_judge -- what a state transfer does with one slot, from its
 * first READ a, the lock word READ after it, and its second READ b
 * (transfer.c has the argument): DXL_RCV_XFER_TAKE (*r and val[0..r->len)
 * hold the record; take it if live), DXL_RCV_XFER_SKIP (torn at the source
 * and unlocked: its record is in the log), DXL_RCV_XFER_AGAIN (locked, or
 * changed between the READs: read it again). *err: a consistent slot with
 * impossible fields (DXL_E_CORRUPT), else 0.
 */
enum { DXL_RCV_XFER_TAKE = 0, DXL_RCV_XFER_SKIP = 1, DXL_RCV_XFER_AGAIN = 2 };
int dxl_rcv_xfer_judge(const uint8_t *a, const uint8_t *b, uint64_t lock, uint32_t slot_size,
		       struct dxl_record *r, uint8_t *val, int *err);

/*
 * dxl_rcv_pull_set_test_hook -- fault injection for tests: dxl_xfer_pull
 * calls fn(attempt, arg) after each attempt's READ of the ring buffer and
 * before it READs the control block again (attempt counts from 1), so a
 * test can move the source's head at that exact moment. NULL = none. Set
 * and clear it from the thread that pulls.
 */
typedef void (*dxl_rcv_pull_hook_fn)(uint32_t attempt, void *arg);
void dxl_rcv_pull_set_test_hook(dxl_rcv_pull_hook_fn fn, void *arg);

/*
 * dxl_rcv_pull_set_crash_hook -- fault injection for tests: dxl_xfer_pull
 * calls fn(arg) once the ring buffer is written and persisted, before it
 * writes the control block; non-zero stands for a crash right there (the
 * pull returns DXL_E_IO, the control block untouched). NULL = none.
 */
typedef int (*dxl_rcv_pull_crash_fn)(void *arg);
void dxl_rcv_pull_set_crash_hook(dxl_rcv_pull_crash_fn fn, void *arg);

#endif /* DXL_RECOVERY_INTERNAL_H */
