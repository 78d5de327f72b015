/* test_region.c -- persistent regions (libpmem2), superblocks, data directories */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/log.h"
#include "log/log_internal.h"

static char dir[256];

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/dxl-test-region-XXXXXX");
	assert_non_null(mkdtemp(dir));
	return 0;
}

static int teardown(void **state)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s/tiny", dir);
	umount2(cmd, MNT_DETACH); /* a failed test_region_on_full_filesystem */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static const struct dxl_region_id ID = {.cluster = "alpha", .node_id = 3,
					.kind = 1, .creation_id = 9};

static void path_of(char *buf, size_t cap, const char *name)
{
	snprintf(buf, cap, "%s/%s", dir, name);
}

static void read_file(const char *p, uint8_t **buf, size_t *len)
{
	struct stat st;
	assert_int_equal(stat(p, &st), 0);
	*len = (size_t)st.st_size;
	*buf = malloc(*len ? *len : 1);
	int fd = open(p, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, *buf, *len), (ssize_t)*len);
	close(fd);
}

static void test_create_write_reopen(void **state)
{
	const enum dxl_durability modes[] = {DXL_DUR_MSYNC, DXL_DUR_PROCESS};
	for (unsigned m = 0; m < 2; m++) {
		char p[512];
		path_of(p, sizeof(p), m ? "r-process" : "r-msync");
		struct dxl_region *r;
		assert_int_equal(dxl_region_create(p, 1 << 20, modes[m], &ID, &r), 0);
		assert_int_equal(dxl_region_data_size(r), 1 << 20);
		assert_int_equal(dxl_region_durability(r), modes[m]);
		assert_string_equal(dxl_region_id(r)->cluster, "alpha");
		uint8_t *d = dxl_region_data(r);
		assert_int_equal((uintptr_t)d % 4096, 0);
		for (int i = 0; i < (1 << 20); i += 4096)
			assert_int_equal(d[i], 0);
		memcpy(d + 100, "hello", 5);
		dxl_region_persist(r, d + 100, 5);
		static uint8_t big[70000];
		for (size_t i = 0; i < sizeof(big); i++)
			big[i] = (uint8_t)(i * 7);
		dxl_region_memcpy_persist(r, d + 8192, big, sizeof(big));
		dxl_region_close(&r);
		assert_null(r);
		assert_int_equal(dxl_region_create(p, 1 << 20, modes[m], &ID, &r),
				 DXL_E_EXIST);
		assert_int_equal(dxl_region_open(p, modes[m], &ID, &r), 0);
		d = dxl_region_data(r);
		assert_memory_equal(d + 100, "hello", 5);
		assert_memory_equal(d + 8192, big, sizeof(big));
		assert_int_equal(dxl_region_id(r)->creation_id, 9);
		dxl_region_close(&r);
	}
}

static void test_pmem_mode_refused_without_dax(void **state)
{
	char p[512];
	path_of(p, sizeof(p), "r-pmem");
	struct dxl_region *r = NULL;
	assert_int_equal(dxl_region_create(p, 1 << 20, DXL_DUR_PMEM, &ID, &r),
			 DXL_E_NOTSUP);
	assert_non_null(strstr(dxl_errmsg(), "DAX"));
	assert_null(r);
	assert_int_not_equal(access(p, F_OK), 0); /* nothing left behind */
}

/* every bad open is a clear error and leaves the file byte-for-byte alone */
static void expect_open_fails(const char *p, enum dxl_durability mode,
			      const struct dxl_region_id *id, int err,
			      const char *needle)
{
	uint8_t *before, *after;
	size_t lb, la;
	read_file(p, &before, &lb);
	struct dxl_region *r = NULL;
	int ret = dxl_region_open(p, mode, id, &r);
	if (ret != err)
		fail_msg("open %s: got %s (%s), want %s", p, dxl_errname(ret),
			 dxl_errmsg(), dxl_errname(err));
	assert_null(r);
	if (!strstr(dxl_errmsg(), needle))
		fail_msg("message '%s' lacks '%s'", dxl_errmsg(), needle);
	read_file(p, &after, &la);
	assert_int_equal(lb, la);
	assert_memory_equal(before, after, lb);
	free(before);
	free(after);
}

static void patch(const char *p, off_t off, const void *bytes, size_t n)
{
	int fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
	close(fd);
}

static void test_bad_regions(void **state)
{
	char p[512];
	path_of(p, sizeof(p), "r-bad");
	struct dxl_region *r;
	assert_int_equal(dxl_region_create(p, 64 << 10, DXL_DUR_PROCESS, &ID, &r), 0);
	dxl_region_close(&r);

	struct dxl_region_id other = ID;
	snprintf(other.cluster, sizeof(other.cluster), "beta");
	expect_open_fails(p, DXL_DUR_PROCESS, &other, DXL_E_STALE, "cluster 'alpha'");
	other = ID;
	other.node_id = 4;
	expect_open_fails(p, DXL_DUR_PROCESS, &other, DXL_E_STALE, "node 3");
	other = ID;
	other.kind = 2;
	expect_open_fails(p, DXL_DUR_PROCESS, &other, DXL_E_STALE, "kind");
	expect_open_fails(p, DXL_DUR_MSYNC, &ID, DXL_E_CONFIG,
			  "created with durability process, opened as msync");

	/* truncated: shorter than the superblock says */
	assert_int_equal(truncate(p, 4096 + 32768), 0);
	expect_open_fails(p, DXL_DUR_PROCESS, &ID, DXL_E_CORRUPT, "truncated");
	assert_int_equal(truncate(p, 100), 0);
	expect_open_fails(p, DXL_DUR_PROCESS, &ID, DXL_E_CORRUPT, "shorter than");
	assert_int_equal(truncate(p, 0), 0);
	expect_open_fails(p, DXL_DUR_PROCESS, &ID, DXL_E_CORRUPT, "shorter than");
	unlink(p);

	/* damaged superblock, other version, foreign file */
	assert_int_equal(dxl_region_create(p, 64 << 10, DXL_DUR_PROCESS, &ID, &r), 0);
	dxl_region_close(&r);
	uint8_t b = 0x55;
	patch(p, 60, &b, 1); /* inside the cluster name */
	expect_open_fails(p, DXL_DUR_PROCESS, &ID, DXL_E_CORRUPT, "checksum");
	unlink(p);
	assert_int_equal(dxl_region_create(p, 64 << 10, DXL_DUR_PROCESS, &ID, &r), 0);
	dxl_region_close(&r);
	uint8_t sb[124];
	int fd = open(p, O_RDONLY);
	assert_int_equal(read(fd, sb, sizeof(sb)), (ssize_t)sizeof(sb));
	close(fd);
	sb[8] = 2; /* format version 2, checksum fixed up */
	uint32_t crc = dxl_crc32c(0, sb, 120);
	memcpy(sb + 120, &crc, 4);
	patch(p, 0, sb, sizeof(sb));
	expect_open_fails(p, DXL_DUR_PROCESS, &ID, DXL_E_VERSION, "format version 2");
	patch(p, 0, "NOTDXL!!", 8);
	expect_open_fails(p, DXL_DUR_PROCESS, &ID, DXL_E_CORRUPT, "bad magic");

	assert_int_equal(dxl_region_open("/nonexistent/r", DXL_DUR_PROCESS, &ID, &r),
			 DXL_E_NOENT);
	assert_int_equal(dxl_region_create(p, 1000, DXL_DUR_PROCESS, &ID, &r),
			 DXL_E_INVAL); /* not a page multiple */
	struct dxl_region_id noname = ID;
	noname.cluster[0] = '\0';
	char q[512];
	path_of(q, sizeof(q), "r-noname");
	assert_int_equal(dxl_region_create(q, 4096, DXL_DUR_PROCESS, &noname, &r),
			 DXL_E_INVAL);
}

static void test_persist_outside_data_area_is_a_bug(void **state)
{
	char p[512];
	path_of(p, sizeof(p), "r-assert");
	struct dxl_region *r;
	assert_int_equal(dxl_region_create(p, 8192, DXL_DUR_PROCESS, &ID, &r), 0);
	pid_t pid = fork();
	if (pid == 0) {
		close(2); /* keep the expected assertion text out of the log */
		uint8_t *d = dxl_region_data(r);
		dxl_region_persist(r, d + 8000, 500);
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGABRT);
	dxl_region_close(&r);
}

static void test_datadir(void **state)
{
	char p[512];
	path_of(p, sizeof(p), "node3");
	struct dxl_datadir *d, *d2;
	assert_int_equal(dxl_datadir_open(p, "alpha", 3, DXL_DUR_MSYNC, 0, &d),
			 DXL_E_NOENT);
	assert_int_equal(dxl_datadir_open(p, "alpha", 3, DXL_DUR_MSYNC, 1, &d), 0);
	assert_string_equal(dxl_datadir_path(d), p);
	/* a second opener (same process, or another one) is refused */
	assert_int_equal(dxl_datadir_open(p, "alpha", 3, DXL_DUR_MSYNC, 1, &d2),
			 DXL_E_BUSY);
	char want[64];
	snprintf(want, sizeof(want), "pid %d", (int)getpid());
	assert_non_null(strstr(dxl_errmsg(), want));
	pid_t pid = fork();
	if (pid == 0) {
		struct dxl_datadir *x;
		_exit(dxl_datadir_open(p, "alpha", 3, DXL_DUR_MSYNC, 1, &x) ==
		      DXL_E_BUSY ? 0 : 1);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	dxl_datadir_close(&d);

	/* reopen with the same identity works; others are refused */
	assert_int_equal(dxl_datadir_open(p, "alpha", 3, DXL_DUR_MSYNC, 0, &d), 0);
	dxl_datadir_close(&d);
	assert_int_equal(dxl_datadir_open(p, "beta", 3, DXL_DUR_MSYNC, 0, &d),
			 DXL_E_STALE);
	assert_int_equal(dxl_datadir_open(p, "alpha", 4, DXL_DUR_MSYNC, 1, &d),
			 DXL_E_STALE);
	assert_int_equal(dxl_datadir_open(p, "alpha", 3, DXL_DUR_PROCESS, 1, &d),
			 DXL_E_CONFIG);
	assert_non_null(strstr(dxl_errmsg(), "created with durability msync"));
	assert_int_equal(dxl_datadir_open(p, "alpha", 3, DXL_DUR_PMEM, 1, &d),
			 DXL_E_CONFIG);

	/* a hand-edited description is caught */
	char meta[600];
	snprintf(meta, sizeof(meta), "%s/DXL_DATADIR", p);
	uint8_t *text;
	size_t len;
	read_file(meta, &text, &len);
	char *node = strstr((char *)text, "node_id = 3");
	assert_non_null(node);
	node[10] = '4';
	FILE *f = fopen(meta, "w");
	fwrite(text, 1, len, f);
	fclose(f);
	free(text);
	assert_int_equal(dxl_datadir_open(p, "alpha", 4, DXL_DUR_MSYNC, 0, &d),
			 DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "checksum"));
}

static void test_datadir_refuses_foreign_and_dax_less_dirs(void **state)
{
	char p[512], q[600];
	struct dxl_datadir *d;
	path_of(p, sizeof(p), "foreign");
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(q, sizeof(q), "%s/somebody-elses-file", p);
	FILE *f = fopen(q, "w");
	fputs("data", f);
	fclose(f);
	assert_int_equal(dxl_datadir_open(p, "alpha", 1, DXL_DUR_MSYNC, 1, &d),
			 DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "refusing"));
	assert_int_equal(access(q, F_OK), 0);

	path_of(p, sizeof(p), "dax-less");
	assert_int_equal(dxl_datadir_open(p, "alpha", 1, DXL_DUR_PMEM, 1, &d),
			 DXL_E_NOTSUP);
	assert_non_null(strstr(dxl_errmsg(), "not on DAX"));
	snprintf(q, sizeof(q), "%s/DXL_DATADIR", p);
	assert_int_not_equal(access(q, F_OK), 0); /* not initialised */

	assert_int_equal(dxl_datadir_open(p, "bad/name", 1, DXL_DUR_MSYNC, 1, &d),
			 DXL_E_INVAL);
	enum dxl_durability m;
	assert_int_equal(dxl_durability_parse("PROCESS", &m), 0);
	assert_int_equal(m, DXL_DUR_PROCESS);
	assert_int_equal(dxl_durability_parse("flash", &m), DXL_E_INVAL);
}

/* a region created without a creation id gets a random one: a region
 * recreated under the same name is told from the old one (the data
 * identity of replica shards, issue 16.3) */
static void test_creation_id(void **state)
{
	char p[512];
	path_of(p, sizeof(p), "ident.region");
	struct dxl_region_id id = ID;
	id.creation_id = 0;
	uint64_t seen[4];
	for (int i = 0; i < 4; i++) {
		struct dxl_region *r = NULL;
		assert_int_equal(dxl_region_create(p, 4096, DXL_DUR_PROCESS, &id, &r), 0);
		seen[i] = dxl_region_id(r)->creation_id;
		assert_true(seen[i] != 0);
		dxl_region_close(&r);
		/* the id is the file's: the same on every open */
		assert_int_equal(dxl_region_open(p, DXL_DUR_PROCESS, &id, &r), 0);
		assert_true(dxl_region_id(r)->creation_id == seen[i]);
		dxl_region_close(&r);
		assert_int_equal(unlink(p), 0);
		for (int j = 0; j < i; j++)
			assert_true(seen[j] != seen[i]);
	}
}

/* a region owns every block of its file from creation on (issue 19.8) */
static void test_region_blocks_allocated(void **state)
{
	char p[512];
	path_of(p, sizeof(p), "allocated");
	struct dxl_region *r;
	assert_int_equal(dxl_region_create(p, 8 << 20, DXL_DUR_PROCESS, &ID, &r), 0);
	struct stat st;
	assert_int_equal(stat(p, &st), 0);
	assert_true((uint64_t)st.st_blocks * 512 >= (uint64_t)st.st_size);
	dxl_region_close(&r);

	/* a failing allocation: a clear error, nothing left behind */
	dxl_test_fallocate_err = ENOSPC;
	path_of(p, sizeof(p), "no-space");
	int ret = dxl_region_create(p, 8 << 20, DXL_DUR_PROCESS, &ID, &r);
	dxl_test_fallocate_err = 0;
	assert_int_equal(ret, DXL_E_IO);
	assert_null(r);
	assert_non_null(strstr(dxl_errmsg(), "cannot allocate"));
	assert_non_null(strstr(dxl_errmsg(), "No space left on device"));
	char q[600];
	snprintf(q, sizeof(q), "%s.tmp", p);
	assert_int_not_equal(access(p, F_OK), 0);
	assert_int_not_equal(access(q, F_OK), 0);
}

/*
 * The same on a real full filesystem: a 1 MiB tmpfs mounted for the test.
 * Before, the file was created sparse and the first store into a hole
 * raised SIGBUS (in a replica: in the NIC thread, for a remote WRITE).
 * A sparse region an older build left is given its blocks when opened.
 */
static void test_region_on_full_filesystem(void **state)
{
	char mnt[512];
	path_of(mnt, sizeof(mnt), "tiny");
	assert_int_equal(mkdir(mnt, 0700), 0);
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") != 0) {
		fprintf(stderr, "SKIPPED: cannot mount a small tmpfs (%s; needs root)\n",
			strerror(errno));
		rmdir(mnt);
		skip();
	}
	char p[600], q[640];
	snprintf(p, sizeof(p), "%s/log", mnt);
	snprintf(q, sizeof(q), "%s.tmp", p);
	struct dxl_region *r;
	int ret = dxl_region_create(p, 4 << 20, DXL_DUR_PROCESS, &ID, &r);
	if (ret == 0) { /* the old behaviour: show what it leads to */
		pid_t pid = fork();
		if (pid == 0) {
			signal(SIGBUS, SIG_DFL); /* not cmocka's handler */
			memset(dxl_region_data(r), 1, dxl_region_data_size(r));
			_exit(0);
		}
		int st;
		waitpid(pid, &st, 0);
		fprintf(stderr, "a sparse region on a full filesystem: %s\n",
			WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "no signal");
		dxl_region_close(&r);
	}
	int created = ret;
	/* an older build's sparse region: superblock + holes */
	char big[512];
	path_of(big, sizeof(big), "model");
	assert_int_equal(dxl_region_create(big, 4 << 20, DXL_DUR_PROCESS, &ID, &r), 0);
	dxl_region_close(&r);
	uint8_t *img;
	size_t len;
	read_file(big, &img, &len);
	unlink(p);
	int fd = open(p, O_RDWR | O_CREAT, 0640);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, img, 4096, 0), 4096);
	assert_int_equal(ftruncate(fd, (off_t)len), 0);
	close(fd);
	free(img);
	int opened = dxl_region_open(p, DXL_DUR_PROCESS, &ID, &r);
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
	if (!opened)
		dxl_region_close(&r);
	unlink(p);
	assert_int_equal(umount2(mnt, MNT_DETACH), 0);
	rmdir(mnt);
	assert_int_equal(created, DXL_E_IO);
	assert_int_equal(opened, DXL_E_IO);
	assert_non_null(strstr(msg, "cannot allocate"));
	assert_non_null(strstr(msg, "bytes available"));
}

/*
 * Opening a sparse region (an older build's) that is not the one asked for
 * -- another cluster or node, another kind, another durability -- is
 * refused and changes nothing. Before, its blocks were allocated first and
 * the checks came after: a refused open had grown the file's allocation
 * (and could fill the filesystem with a region that was never used).
 */
static void test_refused_open_changes_nothing(void **state)
{
	char model[512], p[512];
	path_of(model, sizeof(model), "sparse-model");
	path_of(p, sizeof(p), "sparse");
	struct dxl_region *r;
	assert_int_equal(dxl_region_create(model, 4 << 20, DXL_DUR_PROCESS, &ID, &r), 0);
	dxl_region_close(&r);
	uint8_t *img;
	size_t len;
	read_file(model, &img, &len);
	int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0640);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, img, 4096, 0), 4096);
	assert_int_equal(ftruncate(fd, (off_t)len), 0);
	close(fd);
	free(img);
	struct stat before, after;
	assert_int_equal(stat(p, &before), 0);
	assert_true((uint64_t)before.st_blocks * 512 < (uint64_t)before.st_size);

	struct dxl_region_id other = ID;
	snprintf(other.cluster, sizeof(other.cluster), "beta");
	assert_int_equal(dxl_region_open(p, DXL_DUR_PROCESS, &other, &r), DXL_E_STALE);
	other = ID;
	other.node_id = 4;
	assert_int_equal(dxl_region_open(p, DXL_DUR_PROCESS, &other, &r), DXL_E_STALE);
	other = ID;
	other.kind = 2;
	assert_int_equal(dxl_region_open(p, DXL_DUR_PROCESS, &other, &r), DXL_E_STALE);
	assert_int_equal(dxl_region_open(p, DXL_DUR_MSYNC, &ID, &r), DXL_E_CONFIG);
	assert_int_equal(stat(p, &after), 0);
	assert_int_equal(after.st_blocks, before.st_blocks);
	assert_int_equal(after.st_size, before.st_size);

	/* the right open allocates it */
	assert_int_equal(dxl_region_open(p, DXL_DUR_PROCESS, &ID, &r), 0);
	dxl_region_close(&r);
	assert_int_equal(stat(p, &after), 0);
	assert_true((uint64_t)after.st_blocks * 512 >= (uint64_t)after.st_size);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_write_reopen),
		cmocka_unit_test(test_pmem_mode_refused_without_dax),
		cmocka_unit_test(test_bad_regions),
		cmocka_unit_test(test_persist_outside_data_area_is_a_bug),
		cmocka_unit_test(test_datadir),
		cmocka_unit_test(test_datadir_refuses_foreign_and_dax_less_dirs),
		cmocka_unit_test(test_creation_id),
		cmocka_unit_test(test_region_blocks_allocated),
		cmocka_unit_test(test_region_on_full_filesystem),
		cmocka_unit_test(test_refused_open_changes_nothing),
	};
	return cmocka_run_group_tests_name("regions and data directories", tests,
					   setup, teardown);
}
