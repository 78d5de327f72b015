/* log_internal.h -- what the files of log/ share */
#ifndef DXL_LOG_INTERNAL_H
#define DXL_LOG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dxl/log.h"

/* dxl_fsync_parent -- fsync the directory holding path (after a rename) */
void dxl_fsync_parent(const char *path);

/* tests: called with the directory each dxl_fsync_parent fsyncs (NULL =
 * none), and an errno for the region's posix_fallocate to fail with
 * instead of being called (0 = call it) */
extern void (*dxl_test_fsync_dir_hook)(const char *dir);
extern int dxl_test_fallocate_err;
/* tests only: called by dxl_region_persist before it makes [addr, addr+len)
 * durable (and by dxl_region_memcpy_persist in process mode after the copy):
 * a crash-test's power-failure model of CPU writes (test_rebuild_crash) */
extern void (*dxl_test_persist_hook)(struct dxl_region *r, const void *addr, size_t len);

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
 * dxl_persist_set_test_hook -- for tests of the persister's ordering: after
 * each dxl_region_persist a persister pass makes while serving a request of
 * ring `ring`, fn(ring, addr, len, arg) is called (the confirmation must not
 * be published yet). NULL = none. Set it while no persister runs.
 */
typedef void (*dxl_persist_hook_fn)(uint32_t ring, const void *addr, size_t len,
				    void *arg);
void dxl_persist_set_test_hook(dxl_persist_hook_fn fn, void *arg);

/*
 * dxl_tail_set_test_hook -- fault injection for tests: while set, a
 * tailer's poll posts its READs one at a time and calls fn(stage, ring,
 * arg) after each has completed (stage: which pass it belongs to), so a
 * test can append, move a head or claim a ring between any two of them.
 * NULL = none (one chain). Set and clear it from the thread that polls.
 */
enum dxl_tail_stage {
	DXL_TAIL_STAGE_CTL = 1,   /* a control block, before the windows */
	DXL_TAIL_STAGE_WINDOW,    /* (a piece of) a ring's window */
	DXL_TAIL_STAGE_CTL_AGAIN, /* a control block, after the windows */
};
typedef void (*dxl_tail_hook_fn)(enum dxl_tail_stage stage, uint32_t ring, void *arg);
void dxl_tail_set_test_hook(dxl_tail_hook_fn fn, void *arg);

/*
 * dxl_ring_set_head_test_hook -- fault injection for tests:
 * dxl_logstore_set_head calls fn(slot, step, arg) after it stored the new
 * head into a slot (step 1: the first copy, 2: the second) and before it
 * persists that slot, so a test can act while the store is visible to
 * remote READs but not yet durable. fn returning non-zero stands for a
 * crash right there: set_head returns DXL_E_IO without persisting or
 * storing anything more (the test then undoes what the crash would lose).
 * NULL = none. Process-wide; set and clear it from the thread that sets
 * heads.
 */
typedef int (*dxl_head_hook_fn)(void *slot, uint32_t step, void *arg);
void dxl_ring_set_head_test_hook(dxl_head_hook_fn fn, void *arg);

/*
 * dxl_appender_test_wmark_after_flush -- for the crash tests' negative only:
 * post each append's watermark WRITE after its flush READ instead of
 * before (H9 mode), breaking the rule that an acknowledged append's
 * watermark is durable. The crash schedules must catch it.
 */
struct dxl_appender;
void dxl_appender_test_wmark_after_flush(struct dxl_appender *a, bool on);

#endif /* DXL_LOG_INTERNAL_H */
