/* test_parser_regress.c -- replay every saved fuzzer input through the parser checks */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/parser_checks.h"

/* inputs live under $DXL_SRC_DIR/tests/fuzz/{regress,corpus}/<target>/ */
static int replay(const char *target, void (*check)(const uint8_t *, size_t))
{
	const char *src = getenv("DXL_SRC_DIR") ? getenv("DXL_SRC_DIR") : ".";
	const char *kinds[] = {"regress", "corpus"};
	int n = 0;
	for (int k = 0; k < 2; k++) {
		char dir[1024];
		snprintf(dir, sizeof(dir), "%s/tests/fuzz/%s/%s", src, kinds[k], target);
		DIR *d = opendir(dir);
		if (!d)
			continue;
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			char p[2048];
			snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
			FILE *f = fopen(p, "rb");
			assert_non_null(f);
			static uint8_t buf[1 << 20];
			size_t len = fread(buf, 1, sizeof(buf), f);
			fclose(f);
			/* copy to an exact-size heap block so ASan sees overreads */
			uint8_t *in = malloc(len ? len : 1);
			memcpy(in, buf, len);
			check(in, len);
			free(in);
			n++;
		}
		closedir(d);
	}
	return n;
}

static void test_record_inputs(void **state)
{
	int n = replay("record", dxl_check_record_parser);
	print_message("replayed %d record inputs\n", n);
	assert_true(n > 0);
}

static void test_superblock_inputs(void **state)
{
	int n = replay("superblock", dxl_check_superblock_parser);
	print_message("replayed %d superblock inputs\n", n);
	assert_true(n > 0);
}

static void test_writeset_inputs(void **state)
{
	(void)state;
	int n = replay("writeset", dxl_check_writeset_parser);
	print_message("replayed %d writeset inputs\n", n);
	assert_true(n > 0);
}

static void test_head_inputs(void **state)
{
	int n = replay("head", dxl_check_head_parser);
	print_message("replayed %d head inputs\n", n);
	assert_true(n > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_record_inputs),
		cmocka_unit_test(test_superblock_inputs),
		cmocka_unit_test(test_head_inputs),
		cmocka_unit_test(test_writeset_inputs),
	};
	return cmocka_run_group_tests_name("parser regressions", tests, NULL, NULL);
}
