/* parser_checks.h -- properties of dxl's parsers on arbitrary input, shared by
 * the libFuzzer targets (tests/fuzz/) and the regression replay test */
#ifndef DXL_TEST_PARSER_CHECKS_H
#define DXL_TEST_PARSER_CHECKS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Each check feeds one input to a parser and verifies what must hold for
 * every input: no read outside the buffer (the sanitizers see that), and for
 * an accepted input, that the decoded fields are consistent and encoding
 * them again gives the same bytes. A violated property aborts (so the
 * fuzzer reports it and the replay test fails).
 */
void dxl_check_record_parser(const uint8_t *data, size_t size);
void dxl_check_superblock_parser(const uint8_t *data, size_t size);
void dxl_check_head_parser(const uint8_t *data, size_t size);
void dxl_check_writeset_parser(const uint8_t *data, size_t size);

#endif
