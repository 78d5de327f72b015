/* fuzz_head.c -- libFuzzer target for the head parser (see tests/fuzz/README) */
#include <stddef.h>
#include <stdint.h>

#include "tests/lib/parser_checks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dxl_check_head_parser(data, size);
	return 0;
}
