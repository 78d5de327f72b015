/* test_zk_fixture.c -- the test suite's ZooKeeper server and the C client work
 *
 * scripts/test.sh starts a real ZooKeeper (scripts/zk.sh) and exports its
 * connect string as DXL_TEST_ZK. This checks what membership will rely on:
 * sessions, ephemeral znodes that vanish with their session, versioned
 * compare-and-set, and sequential znodes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include "common/common.h"

static const char *zk_addr(void)
{
	return getenv("DXL_TEST_ZK");
}

static zhandle_t *zk_connect(void)
{
	zhandle_t *zh = zookeeper_init(zk_addr(), NULL, 4000, NULL, NULL, 0);
	assert_non_null(zh);
	for (int i = 0; i < 500 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++)
		usleep(10000);
	assert_int_equal(zoo_state(zh), ZOO_CONNECTED_STATE);
	return zh;
}

static int setup(void **state)
{
	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
	if (!zk_addr()) {
		print_message("DXL_TEST_ZK is not set: run through scripts/test.sh, "
			      "which starts ZooKeeper\n");
		return 0;
	}
	return 0;
}

#define NEED_ZK()                                                            \
	do {                                                                 \
		if (!zk_addr()) {                                            \
			print_message("SKIPPED: no ZooKeeper (DXL_TEST_ZK unset)\n"); \
			skip();                                              \
		}                                                            \
	} while (0)

static void test_ephemeral_vanishes_with_session(void **state)
{
	NEED_ZK();
	char path[128];
	snprintf(path, sizeof(path), "/dxl-test-eph-%d", (int)getpid());
	zhandle_t *a = zk_connect();
	zhandle_t *b = zk_connect();
	assert_int_equal(zoo_create(a, path, "addr", 4, &ZOO_OPEN_ACL_UNSAFE,
				    ZOO_EPHEMERAL, NULL, 0), ZOK);
	char buf[16];
	int len = sizeof(buf);
	struct Stat st;
	assert_int_equal(zoo_get(b, path, 0, buf, &len, &st), ZOK);
	assert_int_equal(len, 4);
	assert_memory_equal(buf, "addr", 4);
	/* a second ephemeral with the same name is refused */
	assert_int_equal(zoo_create(b, path, "x", 1, &ZOO_OPEN_ACL_UNSAFE,
				    ZOO_EPHEMERAL, NULL, 0), ZNODEEXISTS);
	zookeeper_close(a);
	/* closing the session removes the ephemeral node */
	int rc = ZOK;
	for (int i = 0; i < 300; i++) {
		rc = zoo_exists(b, path, 0, &st);
		if (rc == ZNONODE)
			break;
		usleep(10000);
	}
	assert_int_equal(rc, ZNONODE);
	zookeeper_close(b);
}

static void test_versioned_compare_and_set(void **state)
{
	NEED_ZK();
	char path[128];
	snprintf(path, sizeof(path), "/dxl-test-cas-%d", (int)getpid());
	zhandle_t *zh = zk_connect();
	assert_int_equal(zoo_create(zh, path, "epoch=1", 7, &ZOO_OPEN_ACL_UNSAFE,
				    0, NULL, 0), ZOK);
	struct Stat st;
	char buf[16];
	int len = sizeof(buf);
	assert_int_equal(zoo_get(zh, path, 0, buf, &len, &st), ZOK);
	int v = st.version;
	assert_int_equal(zoo_set(zh, path, "epoch=2", 7, v), ZOK);
	/* a writer holding the old version loses */
	assert_int_equal(zoo_set(zh, path, "epoch=9", 7, v), ZBADVERSION);
	len = sizeof(buf);
	assert_int_equal(zoo_get(zh, path, 0, buf, &len, &st), ZOK);
	assert_memory_equal(buf, "epoch=2", 7);
	assert_int_equal(zoo_delete(zh, path, -1), ZOK);
	zookeeper_close(zh);
}

static void test_sequential_nodes_are_ordered(void **state)
{
	NEED_ZK();
	char base[128], p1[256], p2[256];
	snprintf(base, sizeof(base), "/dxl-test-seq-%d", (int)getpid());
	zhandle_t *zh = zk_connect();
	assert_int_equal(zoo_create(zh, base, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0,
				    NULL, 0), ZOK);
	char prefix[160];
	snprintf(prefix, sizeof(prefix), "%s/n-", base);
	assert_int_equal(zoo_create(zh, prefix, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
				    ZOO_EPHEMERAL | ZOO_SEQUENCE, p1, sizeof(p1)), ZOK);
	assert_int_equal(zoo_create(zh, prefix, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
				    ZOO_EPHEMERAL | ZOO_SEQUENCE, p2, sizeof(p2)), ZOK);
	assert_true(strcmp(p1, p2) < 0);
	assert_int_equal(zoo_delete(zh, p1, -1), ZOK);
	assert_int_equal(zoo_delete(zh, p2, -1), ZOK);
	assert_int_equal(zoo_delete(zh, base, -1), ZOK);
	zookeeper_close(zh);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ephemeral_vanishes_with_session),
		cmocka_unit_test(test_versioned_compare_and_set),
		cmocka_unit_test(test_sequential_nodes_are_ordered),
	};
	return cmocka_run_group_tests_name("zookeeper fixture", tests, setup, NULL);
}
