/* record_internal.h -- what engine/record.c shares with the store and the tests */
#ifndef DXL_RECORD_INTERNAL_H
#define DXL_RECORD_INTERNAL_H

#include <stdint.h>

#include "dxl/engine.h"

/*
 * dxl_record_write_traced -- dxl_record_write, calling step(arg) after each
 * single store (in program order), so a test can take a snapshot of the
 * slot between any two stores and check every way a reader could combine
 * them (tests/unit/engine/test_record_model.c). step may be NULL.
 */
typedef void (*dxl_record_step_fn)(void *arg);
int dxl_record_write_traced(void *slot, uint32_t slot_size,
			    const struct dxl_record *r, const void *value,
			    uint64_t *version_out, dxl_record_step_fn step,
			    void *arg);

/*
 * dxl_record_peek -- line 0's fields as they are (atomic loads, no
 * consistency check): for the scan at open and for the slot's writer, who
 * needs the current key/incarnation/version of the slot it owns.
 */
void dxl_record_peek(const void *slot, struct dxl_record *out);

#endif /* DXL_RECORD_INTERNAL_H */
