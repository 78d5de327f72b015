/* test_verbs_nodev.c -- the verbs provider on a machine without RDMA (real rdma-core) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "dxl/fabric.h"

/*
 * No mocks: this runs the real libibverbs/librdmacm. On the build machines
 * there is no RDMA device (ibv_get_device_list fails with ENOSYS), and
 * dxl_fabric_new(verbs) must say so cleanly. Where a device exists (the
 * Soft-RoCE guest), the tests skip: the conformance suite covers that case.
 */

static bool have_device(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l)
		return false;
	ibv_free_device_list(l);
	return n > 0;
}

static void skip_if_device(void)
{
	if (have_device()) {
		print_message("an RDMA device exists here: no-device test skipped\n");
		skip();
	}
}

static void test_no_device_is_nodev(void **state)
{
	skip_if_device();
	struct dxl_fabric_cfg cfg;
	dxl_fabric_cfg_init(&cfg);
	cfg.provider = DXL_FABRIC_VERBS;
	struct dxl_fabric *f = (struct dxl_fabric *)&cfg; /* must become NULL */
	int ret = dxl_fabric_new(&cfg, &f);
	assert_int_equal(ret, DXL_E_NODEV);
	assert_null(f);
	const char *m = dxl_errmsg();
	print_message("message: %s\n", m);
	assert_non_null(strstr(m, "no RDMA device found; use fabric=tcp"));
	/* plus the underlying reason, naming the call that failed */
	assert_non_null(strstr(m, "ibv_get_device_list"));
	errno = 0;
	int n = -1;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l)
		assert_non_null(strstr(m, strerror(errno)));
	else
		ibv_free_device_list(l);
}

static void test_no_device_named_device(void **state)
{
	skip_if_device();
	struct dxl_fabric_cfg cfg;
	dxl_fabric_cfg_init(&cfg);
	cfg.provider = DXL_FABRIC_VERBS;
	snprintf(cfg.device, sizeof(cfg.device), "mlx5_0");
	cfg.gid_index = 3;
	struct dxl_fabric *f = NULL;
	assert_int_equal(dxl_fabric_new(&cfg, &f), DXL_E_NODEV);
	assert_null(f);
	assert_non_null(strstr(dxl_errmsg(), "use fabric=tcp"));
}

static void test_bad_cfg_checked_before_device(void **state)
{
	/* generic checks (fabric.c) come first and do not need a device */
	struct dxl_fabric_cfg cfg;
	dxl_fabric_cfg_init(&cfg);
	cfg.provider = DXL_FABRIC_VERBS;
	cfg.sq_depth = 2;
	struct dxl_fabric *f = NULL;
	assert_int_equal(dxl_fabric_new(&cfg, &f), DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "sq_depth"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_device_is_nodev),
		cmocka_unit_test(test_no_device_named_device),
		cmocka_unit_test(test_bad_cfg_checked_before_device),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
