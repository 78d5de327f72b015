/* log_internal.h -- what the files of log/ share */
#ifndef DXL_LOG_INTERNAL_H
#define DXL_LOG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dxl/log.h"

/* dxl_fsync_parent -- fsync the directory holding path (after a rename) */
void dxl_fsync_parent(const char *path);

/* dxl_region_sb_decode -- check and decode a region superblock (fuzzed) */
int dxl_region_sb_decode(const uint8_t *sb, size_t len, const char *path,
			 enum dxl_durability *mode, struct dxl_region_id *id,
			 uint64_t *data_size, uint64_t *file_size);

/*
 * dxl_log_post_wait -- post chain on qp, then poll the QP's ctx until the
 * completion carrying wr_id (the chain's signalled request) and map its
 * status: DXL_E_ACCESS, DXL_E_UNREACHABLE, DXL_E_STATE (flushed), DXL_E_IO.
 * For callers with nothing else in flight on that ctx: another completion
 * reaped meanwhile is DXL_E_STATE.
 */
struct dxl_qp;
struct dxl_wr;
int dxl_log_post_wait(struct dxl_qp *qp, struct dxl_wr *chain, uint64_t wr_id);

/*
 * dxl_ring_iter_step -- like dxl_ring_iter_next, but every record counts,
 * skip records included: 1 and the record at it->pos (its position in *at),
 * 0 at the end of the valid content. For walks that need every record
 * boundary (truncation, repair).
 */
int dxl_ring_iter_step(struct dxl_ring_iter *it, struct dxl_rec *rec,
		       uint64_t *at);

/*
 * dxl_pull_set_test_hook -- fault injection for tests: dxl_logstore_pull
 * calls fn(attempt, arg) after each attempt's READ of the ring buffer and
 * before it READs the control block again (attempt counts from 1), so a
 * test can move the source's head at that exact moment. NULL = none. Set
 * and clear it from the thread that pulls.
 */
typedef void (*dxl_pull_hook_fn)(uint32_t attempt, void *arg);
void dxl_pull_set_test_hook(dxl_pull_hook_fn fn, void *arg);

/*
 * dxl_persist_set_test_hook -- for tests of the persister's ordering: after
 * each dxl_region_persist a persister pass makes while serving a request of
 * ring `ring`, fn(ring, addr, len, arg) is called (the confirmation must not
 * be published yet). NULL = none. Set it while no persister runs.
 */
typedef void (*dxl_persist_hook_fn)(uint32_t ring, const void *addr, size_t len,
				    void *arg);
void dxl_persist_set_test_hook(dxl_persist_hook_fn fn, void *arg);

#endif /* DXL_LOG_INTERNAL_H */
