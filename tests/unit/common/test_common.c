/* test_common.c -- errors, parsers, histogram and config of common/ */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "common/config.h"
#include "common/hist.h"

static void test_err_codes_have_names(void **state)
{
	for (int e = DXL_E_FIRST; e < DXL_E_LAST; e++) {
		assert_string_not_equal(dxl_errname(e), "DXL_E_UNKNOWN");
		assert_string_not_equal(dxl_strerror(e), "unknown error");
	}
	assert_string_equal(dxl_errname(DXL_E_TIMEDOUT), "DXL_E_TIMEDOUT");
	assert_string_equal(dxl_strerror(0), "success");
	/* negative errno values are described by libc */
	assert_string_equal(dxl_strerror(-2), strerror(2));
	assert_string_equal(dxl_errname(-5), "DXL_E_UNKNOWN");
}

static void test_err_message(void **state)
{
	dxl_err_clear();
	assert_string_equal(dxl_errmsg(), "");
	int r = dxl_err_set(DXL_E_INVAL, "ring %d: bad %s", 3, "head");
	assert_int_equal(r, DXL_E_INVAL);
	assert_string_equal(dxl_errmsg(), "ring 3: bad head");
	dxl_err_prefix("shard %d", 7);
	assert_string_equal(dxl_errmsg(), "shard 7: ring 3: bad head");
	r = dxl_err_errno(2, "open %s", "/x");
	assert_int_equal(r, DXL_E_IO);
	assert_non_null(strstr(dxl_errmsg(), "open /x: "));
	assert_non_null(strstr(dxl_errmsg(), strerror(2)));
}

static void *other_thread(void *arg)
{
	dxl_err_set(DXL_E_BUSY, "from another thread");
	return NULL;
}

static void test_err_message_is_per_thread(void **state)
{
	pthread_t t;
	dxl_err_set(DXL_E_INVAL, "mine");
	assert_int_equal(pthread_create(&t, NULL, other_thread, NULL), 0);
	pthread_join(t, NULL);
	assert_string_equal(dxl_errmsg(), "mine");
}

static void test_parsers(void **state)
{
	uint64_t v;
	assert_int_equal(dxl_parse_u64("42", &v), 0);
	assert_int_equal(v, 42);
	assert_int_equal(dxl_parse_u64("0x10", &v), 0);
	assert_int_equal(v, 16);
	assert_int_not_equal(dxl_parse_u64("-1", &v), 0);
	assert_int_not_equal(dxl_parse_u64("12abc", &v), 0);
	assert_int_not_equal(dxl_parse_u64("", &v), 0);
	assert_int_not_equal(dxl_parse_u64("99999999999999999999999", &v), 0);
	assert_int_equal(dxl_parse_size("64K", &v), 0);
	assert_int_equal(v, 65536);
	assert_int_equal(dxl_parse_size("2MiB", &v), 0);
	assert_int_equal(v, 2u << 20);
	assert_int_equal(dxl_parse_size("1g", &v), 0);
	assert_int_equal(v, 1u << 30);
	assert_int_not_equal(dxl_parse_size("1X", &v), 0);
	assert_int_not_equal(dxl_parse_size("K", &v), 0);
	assert_int_not_equal(dxl_parse_size("99999999999T", &v), 0);

	char host[64];
	uint16_t port;
	assert_int_equal(dxl_parse_hostport("127.0.0.1:7000", host, sizeof(host), &port), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 7000);
	assert_int_equal(dxl_parse_hostport("[::1]:9", host, sizeof(host), &port), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 9);
	assert_int_not_equal(dxl_parse_hostport("localhost", host, sizeof(host), &port), 0);
	assert_int_not_equal(dxl_parse_hostport(":80", host, sizeof(host), &port), 0);
	assert_int_not_equal(dxl_parse_hostport("h:65536", host, sizeof(host), &port), 0);
	assert_int_not_equal(dxl_parse_hostport("h:", host, sizeof(host), &port), 0);
}

/* strict hex: what strtoull would let through is refused */
static void test_parse_hex64(void **state)
{
	(void)state;
	uint64_t v = 7;
	assert_int_equal(dxl_parse_hex64("0x10", &v), 0);
	assert_int_equal(v, 16);
	assert_int_equal(dxl_parse_hex64("0xFFFFffffFFFFffff", &v), 0);
	assert_true(v == UINT64_MAX);
	assert_int_equal(dxl_parse_hex64("0x0", &v), 0);
	assert_int_equal(v, 0);
	static const char *const bad[] = {"0x-1", "0x 10", "0x0x10", "0x+1", "0x", "10",
					  "0X10", " 0x10", "0x10 ", "0x10000000000000000",
					  "0x1g", "", "x10", NULL};
	for (int i = 0; bad[i]; i++) {
		v = 7;
		assert_int_equal(dxl_parse_hex64(bad[i], &v), DXL_E_INVAL);
		assert_int_equal(v, 7); /* unchanged */
	}
	assert_int_equal(dxl_parse_hex64(NULL, &v), DXL_E_INVAL);
}

/* test points: unarmed they do nothing; armed, the callback runs on the
 * thread that reaches them, with the point's context; hits are counted */
static void tp_cb(const char *name, void *ctx, void *arg)
{
	int *calls = arg;
	assert_string_equal(name, "common.test");
	assert_int_equal(*(int *)ctx, 42);
	(*calls)++;
}

static void test_testpoints(void **state)
{
	(void)state;
	int calls = 0, ctx = 42;
	DXL_TESTPOINT("common.test", &ctx); /* not armed */
	assert_int_equal(dxl_testpoint_hits("common.test"), 0);
	assert_int_equal(dxl_testpoint_set("common.test", tp_cb, &calls), 0);
	DXL_TESTPOINT("common.test", &ctx);
	DXL_TESTPOINT("common.other", &ctx);
	DXL_TESTPOINT("common.test", &ctx);
	assert_int_equal(calls, 2);
	assert_int_equal(dxl_testpoint_hits("common.test"), 2);
	assert_int_equal(dxl_testpoint_set("common.test", NULL, NULL), 0);
	DXL_TESTPOINT("common.test", &ctx);
	assert_int_equal(calls, 2);
	assert_int_equal(dxl_testpoint_set("Bad Name", tp_cb, &calls), DXL_E_INVAL);
	assert_int_equal(dxl_testpoint_set("", tp_cb, &calls), DXL_E_INVAL);
	dxl_testpoint_clear_all();
	/* the boot clock: an injected suspend moves it, not the monotonic one */
	uint64_t b0 = dxl_boot_ns(), m0 = dxl_now_ns();
	dxl_clock_inject_suspend_ns(3600ull * 1000000000ull);
	uint64_t b1 = dxl_boot_ns(), m1 = dxl_now_ns();
	assert_true(b1 - b0 >= 3600ull * 1000000000ull);
	assert_true(m1 - m0 < 60ull * 1000000000ull);
}

static void test_hist_percentiles(void **state)
{
	static struct dxl_hist h, h2;
	dxl_hist_reset(&h);
	assert_int_equal(dxl_hist_pct(&h, 50), 0);
	for (uint64_t v = 1; v <= 100000; v++)
		dxl_hist_record(&h, v);
	assert_int_equal(h.count, 100000);
	assert_int_equal(h.min, 1);
	assert_int_equal(h.max, 100000);
	/* log-linear buckets: within 2/64 of the true value */
	uint64_t p50 = dxl_hist_pct(&h, 50), p99 = dxl_hist_pct(&h, 99);
	assert_in_range(p50, 50000, 50000 + 50000 / 32);
	assert_in_range(p99, 99000, 99000 + 99000 / 32);
	assert_int_equal(dxl_hist_pct(&h, 100), 100000);
	assert_int_equal(dxl_hist_pct(&h, 0), 1);
	assert_true(dxl_hist_mean(&h) > 50000.0 && dxl_hist_mean(&h) < 50001.0);

	/* small values are exact */
	dxl_hist_reset(&h2);
	for (int i = 0; i < 10; i++)
		dxl_hist_record(&h2, 7);
	dxl_hist_record(&h2, 1000000000000ull);
	assert_int_equal(dxl_hist_pct(&h2, 50), 7);
	assert_int_equal(dxl_hist_pct(&h2, 99.99), 1000000000000ull);

	dxl_hist_merge(&h, &h2);
	assert_int_equal(h.count, 100011);
	assert_int_equal(h.max, 1000000000000ull);
	assert_int_equal(h.min, 1);
	/* huge values do not overflow bucket arithmetic */
	dxl_hist_record(&h2, UINT64_MAX);
	assert_int_equal(dxl_hist_pct(&h2, 100), UINT64_MAX);
}

/*
 * Nearest rank (issue 18): the p-th percentile of n samples is the sample
 * of rank ceil(p/100 * n). The old code rounded p/100 * n to the nearest
 * integer instead, one rank low whenever the fraction was below one half
 * (p99 of 60 samples: rank 59.4 -> 59 instead of 60). Values below 64 are
 * stored exactly, so the ranks show as values.
 */
static void test_hist_nearest_rank(void **state)
{
	static struct dxl_hist h;
	dxl_hist_reset(&h);
	for (uint64_t v = 1; v <= 60; v++)
		dxl_hist_record(&h, v);
	assert_int_equal(dxl_hist_pct(&h, 99), 60);  /* ceil(59.4); rounding gave 59 */
	assert_int_equal(dxl_hist_pct(&h, 2), 2);    /* ceil(1.2); rounding gave 1 */
	assert_int_equal(dxl_hist_pct(&h, 50), 30);  /* exactly 30.0 */
	assert_int_equal(dxl_hist_pct(&h, 95), 57);  /* 57.0: no float error -> 58 */
	assert_int_equal(dxl_hist_pct(&h, 10), 6);   /* 6.0 */
	assert_int_equal(dxl_hist_pct(&h, 0.1), 1);  /* 0.06 -> rank 1 */
	assert_int_equal(dxl_hist_pct(&h, 99.9), 60);
	/* the rank alone, exact in integers */
	assert_int_equal(dxl_pct_rank(100, 99), 99);
	assert_int_equal(dxl_pct_rank(160, 99), 159); /* 158.4 */
	assert_int_equal(dxl_pct_rank(1000, 99.9), 999);
	assert_int_equal(dxl_pct_rank(1001, 99.9), 1000); /* 999.999 */
	assert_int_equal(dxl_pct_rank(3, 50), 2);
	assert_int_equal(dxl_pct_rank(1, 1), 1);
	assert_int_equal(dxl_pct_rank(7, 100), 7);
	assert_int_equal(dxl_pct_rank(0, 50), 0);
	assert_int_equal(dxl_pct_rank(UINT64_MAX, 50), UINT64_MAX / 2 + 1);
	/* a percentile is reported only with 10 samples at or above it */
	assert_int_equal(dxl_pct_min_samples(50), 20);
	assert_int_equal(dxl_pct_min_samples(90), 100);
	assert_int_equal(dxl_pct_min_samples(99), 1000);
	assert_int_equal(dxl_pct_min_samples(99.9), 10000);
	assert_int_equal(dxl_pct_min_samples(99.99), 100000);
	assert_int_equal(dxl_pct_min_samples(100), 1);
	assert_int_equal(dxl_pct_min_samples(0), 1);
	assert_true(dxl_hist_pct_valid(&h, 50));
	assert_false(dxl_hist_pct_valid(&h, 99)); /* 60 < 1000 */
	for (int i = 0; i < 940; i++)
		dxl_hist_record(&h, 5);
	assert_true(dxl_hist_pct_valid(&h, 99));   /* 1000 */
	assert_false(dxl_hist_pct_valid(&h, 99.9));
}

static char *write_tmp(const char *text)
{
	char *path = strdup("/tmp/dxl-test-config-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void test_config_file_and_getters(void **state)
{
	char *path = write_tmp("# a comment\n"
			       "top = 1\n"
			       "[fabric]\n"
			       "provider = verbs\n"
			       "timeout_ms = 250\n"
			       "\n"
			       "[log]\n"
			       "ring_size = 64K\n"
			       "sync = yes\n");
	struct dxl_config *c;
	assert_int_equal(dxl_config_new(&c), 0);
	assert_int_equal(dxl_config_load_file(c, path), 0);

	uint64_t v;
	assert_int_equal(dxl_config_get_u64(c, "fabric.timeout_ms", 1000, 1, 10000, &v), 0);
	assert_int_equal(v, 250);
	assert_int_equal(dxl_config_get_u64(c, "fabric.absent", 77, 0, 100, &v), 0);
	assert_int_equal(v, 77);
	assert_int_equal(dxl_config_get_size(c, "log.ring_size", 0, 0, UINT64_MAX, &v), 0);
	assert_int_equal(v, 65536);
	bool b = false;
	assert_int_equal(dxl_config_get_bool(c, "log.sync", false, &b), 0);
	assert_true(b);
	int e = -1;
	const char *const provs[] = {"tcp", "verbs", NULL};
	assert_int_equal(dxl_config_get_enum(c, "fabric.provider", provs, 0, &e), 0);
	assert_int_equal(e, 1);
	const char *s;
	assert_int_equal(dxl_config_get_str(c, "top", NULL, &s), 0);
	assert_string_equal(s, "1");

	/* origins name the file and line */
	char want[300];
	snprintf(want, sizeof(want), "%s:5", path);
	assert_string_equal(dxl_config_origin(c, "fabric.timeout_ms"), want);

	/* an override wins and says so */
	assert_int_equal(dxl_config_set_arg(c, "fabric.timeout_ms=99"), 0);
	assert_int_equal(dxl_config_get_u64(c, "fabric.timeout_ms", 1000, 1, 10000, &v), 0);
	assert_int_equal(v, 99);
	assert_string_equal(dxl_config_origin(c, "fabric.timeout_ms"), "override");
	assert_int_equal(dxl_config_set_arg(c, "novalue"), DXL_E_CONFIG);
	assert_int_equal(dxl_config_set_arg(c, "=x"), DXL_E_CONFIG);

	dxl_config_delete(&c);
	assert_null(c);
	unlink(path);
	free(path);
}

static void test_config_errors_name_key_and_line(void **state)
{
	char *path = write_tmp("[fabric]\n"
			       "timeout_ms = ten\n"
			       "sq_depth = 100000\n"
			       "provider = carrier-pigeon\n"
			       "inline = maybe\n"
			       "size = 12Q\n"
			       "typo_key = 1\n");
	struct dxl_config *c;
	assert_int_equal(dxl_config_new(&c), 0);
	assert_int_equal(dxl_config_load_file(c, path), 0);
	char want[300];
	uint64_t v = 12345;

	assert_int_equal(dxl_config_get_u64(c, "fabric.timeout_ms", 1, 1, 100, &v), DXL_E_CONFIG);
	snprintf(want, sizeof(want), "%s:2: key fabric.timeout_ms: 'ten'", path);
	assert_non_null(strstr(dxl_errmsg(), want));
	assert_int_equal(v, 12345); /* untouched on error */

	assert_int_equal(dxl_config_get_u64(c, "fabric.sq_depth", 1, 4, 65536, &v), DXL_E_CONFIG);
	assert_non_null(strstr(dxl_errmsg(), "out of range 4..65536"));

	int e;
	const char *const provs[] = {"tcp", "verbs", NULL};
	assert_int_equal(dxl_config_get_enum(c, "fabric.provider", provs, 0, &e), DXL_E_CONFIG);
	assert_non_null(strstr(dxl_errmsg(), "not one of: tcp, verbs"));

	bool b;
	assert_int_equal(dxl_config_get_bool(c, "fabric.inline", false, &b), DXL_E_CONFIG);
	assert_int_equal(dxl_config_get_size(c, "fabric.size", 0, 0, UINT64_MAX, &v), DXL_E_CONFIG);

	const char *const known[] = {"fabric.timeout_ms", "fabric.sq_depth",
				     "fabric.provider", "fabric.inline",
				     "fabric.size", NULL};
	assert_int_equal(dxl_config_check_known(c, known), DXL_E_CONFIG);
	snprintf(want, sizeof(want), "%s:7: unknown key 'fabric.typo_key'", path);
	assert_string_equal(dxl_errmsg(), want);
	const char *const wild[] = {"fabric.*", NULL};
	assert_int_equal(dxl_config_check_known(c, wild), 0);

	dxl_config_delete(&c);
	unlink(path);
	free(path);
}

static void test_config_bad_files(void **state)
{
	struct dxl_config *c;
	assert_int_equal(dxl_config_new(&c), 0);
	assert_int_equal(dxl_config_load_file(c, "/nonexistent/dxl.conf"), DXL_E_IO);
	assert_non_null(strstr(dxl_errmsg(), "/nonexistent/dxl.conf"));

	char *path = write_tmp("[fabric]\nok = 1\nthis line has no equals sign\n");
	assert_int_equal(dxl_config_load_file(c, path), DXL_E_CONFIG);
	char want[300];
	snprintf(want, sizeof(want), "%s:3: syntax error", path);
	assert_non_null(strstr(dxl_errmsg(), want));
	unlink(path);
	free(path);
	dxl_config_delete(&c);
}

static void test_log_levels(void **state)
{
	enum dxl_log_level l;
	assert_int_equal(dxl_log_level_parse("DEBUG", &l), 0);
	assert_int_equal(l, DXL_LOG_DEBUG);
	assert_int_equal(dxl_log_level_parse("error", &l), 0);
	assert_int_equal(l, DXL_LOG_ERROR);
	assert_int_equal(dxl_log_level_parse("loud", &l), DXL_E_CONFIG);
	enum dxl_log_level old = dxl_log_get_level();
	dxl_log_set_level(DXL_LOG_ERROR);
	assert_int_equal(dxl_log_get_level(), DXL_LOG_ERROR);
	dxl_log_set_level(old);
}

static void test_log_level_from_config(void **state)
{
	enum dxl_log_level old = dxl_log_get_level();
	struct dxl_config *c;
	assert_int_equal(dxl_config_new(&c), 0);
	assert_int_equal(dxl_log_configure(c), 0); /* absent: unchanged */
	assert_int_equal(dxl_log_get_level(), old);
	assert_int_equal(dxl_config_set(c, "log.level", "debug"), 0);
	assert_int_equal(dxl_log_configure(c), 0);
	assert_int_equal(dxl_log_get_level(), DXL_LOG_DEBUG);
	assert_int_equal(dxl_config_set(c, "log.level", "chatty"), 0);
	assert_int_equal(dxl_log_configure(c), DXL_E_CONFIG);
	assert_non_null(strstr(dxl_errmsg(), "log.level"));
	assert_int_equal(dxl_log_get_level(), DXL_LOG_DEBUG); /* unchanged */
	dxl_config_delete(&c);
	dxl_log_set_level(old);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_err_codes_have_names),
		cmocka_unit_test(test_err_message),
		cmocka_unit_test(test_err_message_is_per_thread),
		cmocka_unit_test(test_parsers),
		cmocka_unit_test(test_parse_hex64),
		cmocka_unit_test(test_testpoints),
		cmocka_unit_test(test_hist_percentiles),
		cmocka_unit_test(test_hist_nearest_rank),
		cmocka_unit_test(test_config_file_and_getters),
		cmocka_unit_test(test_config_errors_name_key_and_line),
		cmocka_unit_test(test_config_bad_files),
		cmocka_unit_test(test_log_levels),
		cmocka_unit_test(test_log_level_from_config),
	};
	return cmocka_run_group_tests_name("common", tests, NULL, NULL);
}
