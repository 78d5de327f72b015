/* test_shard.c -- a hosted shard's log region across an interrupted first
 * initialisation and on a filesystem short of space (issue 19.6, 19.8) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "common/endian.h"
#include "dxl/log.h"
#include "dxl/replica.h"
#include "log/log_internal.h"

#define NRINGS 4
#define RING (64 * 1024)

static char dir[256];

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/dxl-test-shard-XXXXXX");
	assert_non_null(mkdtemp(dir));
	return 0;
}

static int teardown(void **state)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s/tiny", dir);
	umount2(cmd, MNT_DETACH); /* a test that failed while it was mounted */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void cfg_of(struct dxl_shard_cfg *c, uint32_t shard)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->cluster, sizeof(c->cluster), "t");
	c->node_id = 1;
	c->shard = shard;
	c->nrings = NRINGS;
	c->ring_size = RING;
	c->durability = DXL_DUR_PROCESS;
	c->create = true;
}

static uint64_t region_bytes(void)
{
	return DXL_ALIGN_UP(dxl_logstore_bytes(NRINGS, RING), 4096ull);
}

/* the region of shard `shard` as dxl_region_create leaves it: no log yet */
static struct dxl_region *bare_region(const char *d, uint32_t shard)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/shard-%u.log", d, shard);
	struct dxl_region_id id = {.cluster = "t", .node_id = 1, .kind = DXL_REGION_LOG};
	struct dxl_region *r;
	assert_int_equal(dxl_region_create(p, region_bytes(), DXL_DUR_PROCESS, &id, &r), 0);
	return r;
}

static void expect_log(uint32_t shard)
{
	struct dxl_shard_cfg c;
	cfg_of(&c, shard);
	struct dxl_shard *s = NULL;
	assert_int_equal(dxl_shard_open(dir, &c, NULL, &s), 0);
	const struct dxl_logstore *ls = dxl_shard_logstore(s);
	assert_int_equal(dxl_logstore_nrings(ls), NRINGS);
	assert_int_equal(dxl_logstore_ring_size(ls), RING);
	assert_int_equal(dxl_logstore_shard(ls), shard);
	struct dxl_ring_head h;
	for (uint32_t i = 0; i < NRINGS; i++) {
		assert_int_equal(dxl_logstore_head(ls, i, &h), 0);
		assert_int_equal(h.pos, 0);
	}
	dxl_shard_close(&s);
}

/*
 * A crash right after the region was created (before the log was
 * formatted), or in the middle of the format (control blocks written, the
 * header -- written last -- not): the next start finishes the creation.
 * Before, every later start refused the shard ("holds no log").
 */
static void test_interrupted_creation_is_finished(void **state)
{
	struct dxl_region *r = bare_region(dir, 0);
	dxl_region_close(&r);
	expect_log(0);

	r = bare_region(dir, 1);
	assert_int_equal(dxl_logstore_format(r, 1, NRINGS, RING), 0);
	/* the header had not reached the file yet */
	memset(dxl_region_data(r), 0, DXL_LOG_HDR_SIZE);
	dxl_region_close(&r);
	expect_log(1);
	/* and a second open finds the log as it is */
	expect_log(1);
}

/* no header, but something in a ring: never formatted over, nothing
 * changed; and without create, a clear word on what to do */
static void test_headless_region_with_data_is_refused(void **state)
{
	struct dxl_region *r = bare_region(dir, 2);
	uint8_t *d = dxl_region_data(r);
	uint64_t at = DXL_LOG_HDR_SIZE + 2 * (DXL_RING_CTL_SIZE + RING) +
		      DXL_RING_CTL_SIZE + 4096;
	memcpy(d + at, "DXLR", 4);
	dxl_region_close(&r);
	struct dxl_shard_cfg c;
	cfg_of(&c, 2);
	struct dxl_shard *s = NULL;
	assert_int_equal(dxl_shard_open(dir, &c, NULL, &s), DXL_E_CORRUPT);
	assert_null(s);
	assert_non_null(strstr(dxl_errmsg(), "not formatting over it"));
	char p[512];
	snprintf(p, sizeof(p), "%s/shard-2.log", dir);
	struct dxl_region_id id = {.cluster = "t", .node_id = 1, .kind = DXL_REGION_LOG};
	assert_int_equal(dxl_region_open(p, DXL_DUR_PROCESS, &id, &r), 0);
	d = dxl_region_data(r);
	assert_memory_equal(d + at, "DXLR", 4);
	for (uint64_t i = 0; i < DXL_LOG_HDR_SIZE; i++)
		assert_int_equal(d[i], 0);
	dxl_region_close(&r);

	r = bare_region(dir, 3);
	dxl_region_close(&r);
	cfg_of(&c, 3);
	c.create = false;
	assert_int_equal(dxl_shard_open(dir, &c, NULL, &s), DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "creation was interrupted"));
	c.create = true;
	assert_int_equal(dxl_shard_open(dir, &c, NULL, &s), 0);
	dxl_shard_close(&s);
}

/*
 * No header, the rings' buffers all zero, but a control block holds more
 * than a new log's: an owner word, a watermark, a moved head (a log whose
 * header was lost, not an interrupted format). Never formatted over, the
 * bytes unchanged. Before, the control blocks were left out of the check
 * and formatted away (a watermark is a promise to tailers). A control
 * block an interrupted format left half written (a torn head slot) is
 * still formatted.
 */
static void headless_with_ctl(uint32_t shard, uint64_t off, const void *bytes, size_t n,
			      bool refused)
{
	struct dxl_region *r = bare_region(dir, shard);
	assert_int_equal(dxl_logstore_format(r, shard, NRINGS, RING), 0);
	uint8_t *d = dxl_region_data(r);
	memset(d, 0, DXL_LOG_HDR_SIZE); /* the header is gone */
	uint64_t at = DXL_LOG_HDR_SIZE + 1 * (DXL_RING_CTL_SIZE + RING) + off; /* ring 1 */
	memcpy(d + at, bytes, n);
	dxl_region_close(&r);
	struct dxl_shard_cfg c;
	cfg_of(&c, shard);
	struct dxl_shard *s = NULL;
	int ret = dxl_shard_open(dir, &c, NULL, &s);
	if (!refused) {
		assert_int_equal(ret, 0);
		dxl_shard_close(&s);
		expect_log(shard);
		return;
	}
	assert_int_equal(ret, DXL_E_CORRUPT);
	assert_null(s);
	assert_non_null(strstr(dxl_errmsg(), "control block of ring 1"));
	char p[512];
	snprintf(p, sizeof(p), "%s/shard-%u.log", dir, shard);
	struct dxl_region_id id = {.cluster = "t", .node_id = 1, .kind = DXL_REGION_LOG};
	assert_int_equal(dxl_region_open(p, DXL_DUR_PROCESS, &id, &r), 0);
	d = dxl_region_data(r);
	assert_memory_equal(d + at, bytes, n);
	for (uint64_t i = 0; i < DXL_LOG_HDR_SIZE; i++)
		assert_int_equal(d[i], 0);
	dxl_region_close(&r);
}

static void test_headless_region_with_used_control_block_is_refused(void **state)
{
	uint8_t owner[8], wm[16], head[2 * DXL_RING_HEAD_SLOT_SIZE];
	dxl_put_le64(owner, DXL_RING_OWNER(1, 1 + 1));
	headless_with_ctl(10, DXL_RING_OWNER_OFF, owner, 8, true);
	dxl_put_le64(owner, DXL_RING_OWNER(1, 0)); /* closed */
	headless_with_ctl(11, DXL_RING_OWNER_OFF, owner, 8, true);
	dxl_put_le64(wm, 5000);
	dxl_put_le64(wm + 8, 5000 ^ DXL_RING_WMARK_MAGIC);
	headless_with_ctl(12, DXL_RING_WMARK_OFF, wm, 16, true);
	/* a head moved on: the slots as a log whose head passed records */
	{
		struct dxl_region *r = bare_region(dir, 13);
		assert_int_equal(dxl_logstore_format(r, 13, NRINGS, RING), 0);
		struct dxl_logstore *ls;
		assert_int_equal(dxl_logstore_open(r, &ls), 0);
		assert_int_equal(dxl_logstore_set_head(ls, 1, 4096, 9, 777), 0);
		memcpy(head, (uint8_t *)dxl_region_data(r) + dxl_logstore_ctl_off(ls, 1), sizeof(head));
		dxl_logstore_close(&ls);
		dxl_region_close(&r);
		char p[512];
		snprintf(p, sizeof(p), "%s/shard-13.log", dir);
		unlink(p);
	}
	headless_with_ctl(13, 0, head, sizeof(head), true);
	/* a format interrupted while it wrote ring 1's head slot: resumed */
	uint8_t torn[DXL_RING_HEAD_SLOT_SIZE];
	memset(torn, 0, sizeof(torn));
	torn[8] = 0x33;
	headless_with_ctl(14, 0, torn, sizeof(torn), false);
}

/*
 * A leftover of an interrupted first initialisation of the data directory
 * (DXL_DATADIR.tmp, .dax-probe) does not make it "not empty" for every
 * later start, and the new directory is fsynced in its parent.
 */
static char synced[8][512];
static int nsynced;

static void on_fsync_dir(const char *d)
{
	if (nsynced < 8)
		snprintf(synced[nsynced++], sizeof(synced[0]), "%s", d);
}

static void test_interrupted_datadir_init(void **state)
{
	char p[512], q[600];
	snprintf(p, sizeof(p), "%s/node", dir);
	assert_int_equal(mkdir(p, 0700), 0);
	const char *left[] = {"DXL_DATADIR.tmp", ".dax-probe", "LOCK"};
	for (int i = 0; i < 3; i++) {
		snprintf(q, sizeof(q), "%s/%s", p, left[i]);
		FILE *f = fopen(q, "w");
		fputs("half", f);
		fclose(f);
	}
	struct dxl_datadir *d;
	assert_int_equal(dxl_datadir_open(p, "t", 1, DXL_DUR_PROCESS, 1, &d), 0);
	dxl_datadir_close(&d);
	snprintf(q, sizeof(q), "%s/DXL_DATADIR.tmp", p);
	assert_int_not_equal(access(q, F_OK), 0);
	snprintf(q, sizeof(q), "%s/.dax-probe", p);
	assert_int_not_equal(access(q, F_OK), 0);
	assert_int_equal(dxl_datadir_open(p, "t", 1, DXL_DUR_PROCESS, 0, &d), 0);
	dxl_datadir_close(&d);

	/* a directory that holds anything else is still refused */
	snprintf(p, sizeof(p), "%s/other", dir);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(q, sizeof(q), "%s/DXL_DATADIR.tmpx", p);
	FILE *f = fopen(q, "w");
	fclose(f);
	assert_int_equal(dxl_datadir_open(p, "t", 1, DXL_DUR_PROCESS, 1, &d), DXL_E_INVAL);
	assert_int_equal(access(q, F_OK), 0);

	/* a new directory: its parent is fsynced (the directory's entry),
	 * and then the directory itself (DXL_DATADIR's entry) */
	snprintf(p, sizeof(p), "%s/fresh", dir);
	nsynced = 0;
	dxl_test_fsync_dir_hook = on_fsync_dir;
	int ret = dxl_datadir_open(p, "t", 1, DXL_DUR_PROCESS, 1, &d);
	dxl_test_fsync_dir_hook = NULL;
	assert_int_equal(ret, 0);
	dxl_datadir_close(&d);
	assert_int_equal(nsynced, 2);
	assert_string_equal(synced[0], dir);
	assert_string_equal(synced[1], p);

	/* a directory an earlier start made and died before its fsync (or
	 * before DXL_DATADIR was written): its entry is fsynced in its parent
	 * now. Before, only a start that made the directory itself did it */
	snprintf(p, sizeof(p), "%s/made-earlier", dir);
	assert_int_equal(mkdir(p, 0700), 0);
	nsynced = 0;
	dxl_test_fsync_dir_hook = on_fsync_dir;
	ret = dxl_datadir_open(p, "t", 1, DXL_DUR_PROCESS, 1, &d);
	dxl_test_fsync_dir_hook = NULL;
	assert_int_equal(ret, 0);
	dxl_datadir_close(&d);
	assert_int_equal(nsynced, 2);
	assert_string_equal(synced[0], dir);
	assert_string_equal(synced[1], p);
	/* and at every later open (cheap: one fsync of a directory) */
	nsynced = 0;
	dxl_test_fsync_dir_hook = on_fsync_dir;
	ret = dxl_datadir_open(p, "t", 1, DXL_DUR_PROCESS, 0, &d);
	dxl_test_fsync_dir_hook = NULL;
	assert_int_equal(ret, 0);
	dxl_datadir_close(&d);
	assert_int_equal(nsynced, 1);
	assert_string_equal(synced[0], dir);
}

/* a shard on a filesystem short of space: a clear error at the start, no
 * file left (before: a sparse region, and SIGBUS at the first store into
 * one of its holes on the full filesystem) */
static void test_shard_on_full_filesystem(void **state)
{
	char mnt[512];
	snprintf(mnt, sizeof(mnt), "%s/tiny", dir);
	assert_int_equal(mkdir(mnt, 0700), 0);
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=128k") != 0) {
		fprintf(stderr, "SKIPPED: cannot mount a small tmpfs (%s; needs root)\n",
			strerror(errno));
		rmdir(mnt);
		skip();
	}
	struct dxl_shard_cfg c;
	cfg_of(&c, 5);
	struct dxl_shard *s = NULL;
	int ret = dxl_shard_open(mnt, &c, NULL, &s);
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
	char p[600];
	snprintf(p, sizeof(p), "%s/shard-5.log", mnt);
	int left = access(p, F_OK) == 0;
	if (!ret)
		dxl_shard_close(&s);
	assert_int_equal(umount2(mnt, MNT_DETACH), 0);
	rmdir(mnt);
	assert_int_equal(ret, DXL_E_IO);
	assert_false(left);
	assert_non_null(strstr(msg, "shard 5 in"));
	assert_non_null(strstr(msg, "cannot allocate"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_interrupted_creation_is_finished),
		cmocka_unit_test(test_headless_region_with_data_is_refused),
		cmocka_unit_test(test_headless_region_with_used_control_block_is_refused),
		cmocka_unit_test(test_interrupted_datadir_init),
		cmocka_unit_test(test_shard_on_full_filesystem),
	};
	return cmocka_run_group_tests_name("shard regions", tests, setup, teardown);
}
