/* test_persist_verbs.c -- a shard served by the verbs provider (fake rdma-core,
 * tests/unit/fabric/test_verbs_fake.h) gets the log persister exactly when
 * its durability needs one (msync), marks its rings for writers, serves a
 * request written into a ring as the NIC would, and stops with the
 * registration; a tcp registration clears the mark. The real NIC path is
 * test_persist in the Soft-RoCE guest. */
#include "tests/unit/fabric/test_verbs_fake.h"

#include <sys/stat.h>

#include "common/common.h"
#include "dxl/log.h"
#include "dxl/replica.h"

static char g_dir[64];

static int setup(void **state)
{
	fk_reset();
	snprintf(g_dir, sizeof(g_dir), "/tmp/dxl-test-pverbs-XXXXXX");
	assert_non_null(mkdtemp(g_dir));
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
	assert_int_equal(system(cmd), 0);
	return 0;
}

static struct dxl_shard *open_shard(struct dxl_fabric *f, enum dxl_durability d)
{
	struct dxl_shard_cfg sc = {.node_id = 1, .shard = 0, .nrings = 3,
				   .ring_size = 8192, .durability = d, .create = true};
	snprintf(sc.cluster, sizeof(sc.cluster), "t");
	struct dxl_shard *s = NULL;
	int ret = dxl_shard_open(g_dir, &sc, f, &s);
	if (ret)
		fail_msg("shard: %s", dxl_errmsg());
	return s;
}

/* every ring's confirmation state: 1 all marked, 0 none, -1 mixed */
static int marks(struct dxl_shard *s)
{
	struct dxl_logstore *ls = dxl_shard_logstore(s);
	const uint8_t *d = dxl_region_data(dxl_shard_region(s));
	int on = 0;
	uint64_t done;
	for (uint32_t i = 0; i < dxl_logstore_nrings(ls); i++)
		on += dxl_ring_pdone_decode(d + dxl_logstore_ctl_off(ls, i) +
						    DXL_RING_PDONE_OFF, &done);
	return on == 0 ? 0 : on == (int)dxl_logstore_nrings(ls) ? 1 : -1;
}

/* the confirmation line, read word by word (the persister thread writes it) */
static int pdone_now(const uint8_t *line, uint64_t *done)
{
	uint8_t b[DXL_RING_PLINE_SIZE];
	for (int w = 0; w < 3; w++) {
		uint64_t v = __atomic_load_n((const uint64_t *)(const void *)line + w,
					     __ATOMIC_ACQUIRE);
		memcpy(b + 8 * w, &v, 8);
	}
	return dxl_ring_pdone_decode(b, done);
}

static void test_msync_runs_persister(void **state)
{
	struct dxl_fabric *f = fk_open(NULL);
	struct dxl_shard *s = open_shard(f, DXL_DUR_MSYNC);
	assert_int_equal(fk.reg_calls, 1);
	assert_non_null(dxl_shard_persister(s));
	assert_int_equal(marks(s), 1);

	/* the "NIC" places a record and a request in ring 2 (the persister
	 * thread runs: word by word with atomics, and not the first word of
	 * a page, which the persister touches -- so that TSan sees no race) */
	struct dxl_logstore *ls = dxl_shard_logstore(s);
	uint8_t *ctl = (uint8_t *)dxl_region_data(dxl_shard_region(s)) +
		       dxl_logstore_ctl_off(ls, 2);
	for (int w = 8; w < 64; w++)
		__atomic_store_n((uint64_t *)(void *)(ctl + DXL_RING_CTL_SIZE) + w,
				 0xababababababababull, __ATOMIC_RELAXED);
	struct dxl_persist_req q = {.id = 41, .from = 64, .to = 512};
	uint8_t req[DXL_RING_PREQ_SIZE];
	dxl_ring_preq_encode(&q, req);
	for (int w = 0; w < DXL_RING_PREQ_SIZE / 8; w++) {
		uint64_t v;
		memcpy(&v, req + 8 * w, 8);
		__atomic_store_n((uint64_t *)(void *)(ctl + DXL_RING_PREQ_OFF) + w, v,
				 __ATOMIC_RELEASE);
	}
	uint64_t done = 0, end = dxl_now_ms() + 10000;
	while (pdone_now(ctl + DXL_RING_PDONE_OFF, &done) && done != 41 &&
	       dxl_now_ms() < end)
		usleep(1000);
	assert_true(done == 41);
	struct dxl_persist_stats st;
	dxl_persister_stats(dxl_shard_persister(s), &st);
	assert_true(st.requests == 1 && st.bytes == 448);

	/* deregistered: no persister; the rings stay marked (a writer that
	 * still finds them waits and fails, never acknowledges) */
	dxl_shard_deregister(s);
	assert_int_equal(fk.dereg_calls, 1);
	assert_null(dxl_shard_persister(s));
	assert_int_equal(marks(s), 1);
	/* registered again (a new epoch): a persister again */
	assert_int_equal(dxl_shard_register(s, f), 0);
	assert_non_null(dxl_shard_persister(s));
	dxl_shard_close(&s);
	dxl_fabric_delete(&f);

	/* the same log served by tcp: its flush READs msync, no persister,
	 * and the rings say so */
	struct dxl_fabric_cfg tc;
	dxl_fabric_cfg_init(&tc);
	struct dxl_fabric *t = NULL;
	assert_int_equal(dxl_fabric_new(&tc, &t), 0);
	s = open_shard(t, DXL_DUR_MSYNC);
	assert_null(dxl_shard_persister(s));
	assert_int_equal(marks(s), 0);
	dxl_shard_close(&s);
	dxl_fabric_delete(&t);
}

static void test_process_needs_none(void **state)
{
	struct dxl_fabric *f = fk_open(NULL);
	struct dxl_shard *s = open_shard(f, DXL_DUR_PROCESS);
	assert_int_equal(fk.reg_calls, 1);
	assert_null(dxl_shard_persister(s));
	assert_int_equal(marks(s), 0);
	dxl_shard_close(&s);
	dxl_fabric_delete(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_msync_runs_persister, setup, teardown),
		cmocka_unit_test_setup_teardown(test_process_needs_none, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
