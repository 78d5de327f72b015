/* test_fabric_config.c -- fabric.* config keys, cfg validation, MR descriptors */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>

#include "common/common.h"
#include "common/config.h"
#include "dxl/fabric.h"

static void test_cfg_defaults(void **state)
{
	struct dxl_fabric_cfg c;
	unsetenv("DXL_FABRIC_PF");
	dxl_fabric_cfg_init(&c);
	assert_int_equal(c.provider, DXL_FABRIC_TCP);
	assert_string_equal(c.listen_addr, "127.0.0.1:0");
	assert_int_equal(c.timeout_ms, 1000);
	assert_int_equal(c.sq_depth, 256);
	assert_int_equal(c.max_inline, 64);
	assert_int_equal(c.gid_index, -1);
	assert_int_equal(c.pf_signal, 0);
}

static void test_cfg_pf_env(void **state)
{
	struct dxl_fabric_cfg c;
	setenv("DXL_FABRIC_PF", "USR2:random:42", 1);
	dxl_fabric_cfg_init(&c);
	assert_int_equal(c.pf_signal, SIGUSR2);
	assert_int_equal(c.pf_policy, DXL_PF_RANDOM);
	assert_int_equal(c.pf_seed, 42);
	assert_int_equal(c.pf_idle_ms, 0); /* DXL_PF_IDLE_MS */
	setenv("DXL_FABRIC_PF", "USR2:random:7:1000", 1);
	dxl_fabric_cfg_init(&c);
	assert_int_equal(c.pf_seed, 7);
	assert_int_equal(c.pf_idle_ms, 1000);
	setenv("DXL_FABRIC_PF", "USR2:random:7:soon", 1); /* bad: ignored */
	dxl_fabric_cfg_init(&c);
	assert_int_equal(c.pf_signal, 0);
	setenv("DXL_FABRIC_PF", "USR1:all", 1);
	dxl_fabric_cfg_init(&c);
	assert_int_equal(c.pf_signal, SIGUSR1);
	assert_int_equal(c.pf_policy, DXL_PF_ALL);
	setenv("DXL_FABRIC_PF", "USR1:sometimes", 1); /* bad: ignored */
	dxl_fabric_cfg_init(&c);
	assert_int_equal(c.pf_signal, 0);
	unsetenv("DXL_FABRIC_PF");
}

static struct dxl_config *conf_of(const char *const *kv)
{
	struct dxl_config *conf;
	assert_int_equal(dxl_config_new(&conf), 0);
	for (; *kv; kv++)
		assert_int_equal(dxl_config_set_arg(conf, *kv), 0);
	return conf;
}

static void test_cfg_load_keys(void **state)
{
	const char *kv[] = {"fabric.provider=verbs", "fabric.listen=10.0.0.1:7000",
			    "fabric.timeout_ms=250", "fabric.max_msg=1M",
			    "fabric.device=rxe0", "fabric.gid_index=1",
			    "log.level=debug", /* another module's key */
			    NULL};
	struct dxl_config *conf = conf_of(kv);
	struct dxl_fabric_cfg c;
	dxl_fabric_cfg_init(&c);
	assert_int_equal(dxl_fabric_cfg_load(conf, &c), 0);
	assert_int_equal(c.provider, DXL_FABRIC_VERBS);
	assert_string_equal(c.listen_addr, "10.0.0.1:7000");
	assert_int_equal(c.timeout_ms, 250);
	assert_int_equal(c.max_msg, 1u << 20);
	assert_string_equal(c.device, "rxe0");
	assert_int_equal(c.gid_index, 1);
	assert_int_equal(c.sq_depth, 256); /* untouched default */
	dxl_config_delete(&conf);
}

static void check_bad(const char *kv, const char *needle)
{
	const char *list[] = {kv, NULL};
	struct dxl_config *conf = conf_of(list);
	struct dxl_fabric_cfg c, before;
	dxl_fabric_cfg_init(&c);
	before = c;
	assert_int_equal(dxl_fabric_cfg_load(conf, &c), DXL_E_CONFIG);
	if (!strstr(dxl_errmsg(), needle))
		fail_msg("'%s': message '%s' lacks '%s'", kv, dxl_errmsg(), needle);
	/* nothing changed */
	assert_memory_equal(&c, &before, sizeof(c));
	dxl_config_delete(&conf);
}

static void test_cfg_load_errors(void **state)
{
	check_bad("fabric.provider=infiniband", "not one of: tcp, verbs");
	check_bad("fabric.listen=nowhere", "fabric.listen");
	check_bad("fabric.timeout_ms=0", "out of range");
	check_bad("fabric.sq_depth=many", "fabric.sq_depth");
	check_bad("fabric.max_msg=1T", "out of range");
	check_bad("fabric.gid_index=300", "out of range");
	check_bad("fabric.timout_ms=5", "unknown key 'fabric.timout_ms'");
}

static void test_fabric_new_rejects_bad_cfg(void **state)
{
	struct dxl_fabric_cfg c;
	struct dxl_fabric *f = (struct dxl_fabric *)0x1;
	dxl_fabric_cfg_init(&c);
	c.sq_depth = 2;
	assert_int_equal(dxl_fabric_new(&c, &f), DXL_E_INVAL);
	assert_null(f);
	assert_non_null(strstr(dxl_errmsg(), "sq_depth"));
	dxl_fabric_cfg_init(&c);
	snprintf(c.listen_addr, sizeof(c.listen_addr), "no-port");
	assert_int_equal(dxl_fabric_new(&c, &f), DXL_E_INVAL);
	dxl_fabric_cfg_init(&c);
	c.provider = (enum dxl_fabric_provider)7;
	assert_int_equal(dxl_fabric_new(&c, &f), DXL_E_INVAL);
}

static void test_provider_names(void **state)
{
	enum dxl_fabric_provider p;
	assert_int_equal(dxl_fabric_provider_parse("VERBS", &p), 0);
	assert_int_equal(p, DXL_FABRIC_VERBS);
	assert_int_equal(dxl_fabric_provider_parse("tcp", &p), 0);
	assert_int_equal(p, DXL_FABRIC_TCP);
	assert_int_equal(dxl_fabric_provider_parse("udp", &p), DXL_E_INVAL);
	assert_string_equal(dxl_fabric_provider_name(DXL_FABRIC_VERBS), "verbs");
}

static void test_mr_desc_roundtrip(void **state)
{
	struct dxl_mr_desc d = {.addr = 0x7f0012345678ull, .len = 1u << 20,
				.rkey = 0xdeadbeef, .node = 42}, e;
	uint8_t buf[DXL_MR_DESC_WIRE_SIZE];
	assert_int_equal(dxl_mr_desc_encode(&d, buf, sizeof(buf)),
			 DXL_MR_DESC_WIRE_SIZE);
	assert_int_equal(dxl_mr_desc_decode(buf, sizeof(buf), &e), 0);
	assert_memory_equal(&d, &e, sizeof(d));
	/* little-endian on the wire, whatever the host */
	assert_int_equal(buf[20], 0xef);
	assert_int_equal(buf[23], 0xde);
	assert_int_equal(dxl_mr_desc_encode(&d, buf, sizeof(buf) - 1), DXL_E_INVAL);
	assert_int_equal(dxl_mr_desc_decode(buf, sizeof(buf) - 1, &e), DXL_E_PROTO);
	buf[0] ^= 1;
	assert_int_equal(dxl_mr_desc_decode(buf, sizeof(buf), &e), DXL_E_PROTO);
	buf[0] ^= 1;
	/* a region that wraps the address space is refused */
	d.addr = UINT64_MAX - 10;
	d.len = 100;
	assert_int_equal(dxl_mr_desc_encode(&d, buf, sizeof(buf)), DXL_MR_DESC_WIRE_SIZE);
	assert_int_equal(dxl_mr_desc_decode(buf, sizeof(buf), &e), DXL_E_PROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cfg_defaults),
		cmocka_unit_test(test_cfg_pf_env),
		cmocka_unit_test(test_cfg_load_keys),
		cmocka_unit_test(test_cfg_load_errors),
		cmocka_unit_test(test_fabric_new_rejects_bad_cfg),
		cmocka_unit_test(test_provider_names),
		cmocka_unit_test(test_mr_desc_roundtrip),
	};
	return cmocka_run_group_tests_name("fabric config", tests, NULL, NULL);
}
