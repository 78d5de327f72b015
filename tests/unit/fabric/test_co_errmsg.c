/* test_co_errmsg.c -- each coroutine has its own error message (issue 12,
 * item 7): dxl_errmsg() was per thread, so a coroutine that set a message
 * and yielded before reading it (a transaction's phase failing, then a
 * release that yields) could read another coroutine's message instead. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "common/common.h"
#include "dxl/co.h"

struct arg {
	const char *name;
	char seen[DXL_ERR_MSG_MAX];
};

static void co_fn(void *p)
{
	struct arg *a = p;
	dxl_err_set(DXL_E_CONFLICT, "coroutine %s failed", a->name);
	/* the others run (and set their own messages) meanwhile */
	for (int i = 0; i < 3; i++)
		dxl_co_yield();
	dxl_err_prefix("in %s", a->name);
	snprintf(a->seen, sizeof(a->seen), "%s", dxl_errmsg());
}

static void test_messages_are_per_coroutine(void **state)
{
	(void)state;
	struct dxl_sched_cfg cfg;
	dxl_sched_cfg_init(&cfg);
	cfg.n_coroutines = 4;
	struct dxl_sched *s = NULL;
	assert_int_equal(dxl_sched_new(&cfg, NULL, &s), 0);
	struct arg a[3] = {{.name = "A"}, {.name = "B"}, {.name = "C"}};
	for (int i = 0; i < 3; i++)
		assert_int_equal(dxl_sched_spawn(s, co_fn, &a[i], NULL), 0);
	dxl_err_set(DXL_E_INVAL, "the thread's own message");
	assert_int_equal(dxl_sched_run(s), 0);
	for (int i = 0; i < 3; i++) {
		char want[64];
		snprintf(want, sizeof(want), "in %s: coroutine %s failed", a[i].name, a[i].name);
		print_message("  coroutine %s read \"%s\"\n", a[i].name, a[i].seen);
		assert_string_equal(a[i].seen, want);
	}
	/* after the run the thread reads the last finished coroutine's message */
	assert_non_null(strstr(dxl_errmsg(), "coroutine"));
	dxl_sched_delete(&s);
	/* outside any scheduler the thread's own buffer is used */
	dxl_err_set(DXL_E_INVAL, "plain");
	assert_string_equal(dxl_errmsg(), "plain");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_messages_are_per_coroutine),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
