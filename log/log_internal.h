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

#endif /* DXL_LOG_INTERNAL_H */
