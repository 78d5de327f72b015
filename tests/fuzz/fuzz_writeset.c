/* fuzz_writeset.c -- libFuzzer target for the write-set parser (see tests/fuzz/README) */
#include <stddef.h>
#include <stdint.h>

#include "tests/lib/parser_checks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dxl_check_writeset_parser(data, size);
	return 0;
}
