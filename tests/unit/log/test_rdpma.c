/* test_rdpma.c -- fat pointers, padding, the heap, and PWrite's durability (H9)
 *
 * The fabrics use the provider the environment names (DXL_TEST_PROVIDER ...,
 * tests/lib/fabric_fixture.h). What only the tcp provider models -- the
 * persist function of a flush READ and power failures -- is skipped with a
 * printed reason on other providers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/fabric.h"
#include "dxl/log.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/log_replica.h"

static void test_padding_rules(void **state)
{
	assert_int_equal(dxl_rdpma_padded(0), 0);
	assert_int_equal(dxl_rdpma_padded(1), 64);
	assert_int_equal(dxl_rdpma_padded(16), 64);  /* H6: 16 B -> one PCIe word */
	assert_int_equal(dxl_rdpma_padded(64), 64);
	assert_int_equal(dxl_rdpma_padded(65), 128);
	assert_int_equal(dxl_rdpma_padded(255), 256);
	assert_int_equal(dxl_rdpma_padded(256), 256); /* H5: XPLines from 256 B */
	assert_int_equal(dxl_rdpma_padded(257), 512);
	assert_int_equal(dxl_rdpma_padded(2048), 2048);
	assert_int_equal(dxl_rdpma_padded((16u << 20) + 1), 0);
	assert_string_equal(dxl_pwrite_mode_name(DXL_PWRITE_H9), "h9");
}

struct lo {
	struct dxl_fabric *f;
	struct dxl_ctx *c;
	struct dxl_qp *qp;
	uint8_t *mem;
	struct dxl_mr *mr;
	uint8_t *local;
	struct dxl_mr *lmr;
};

#define MEM (1 << 20)

/* a provider without a device here leaves *state NULL: the test skips (a
 * skip() in a setup function is an error in cmocka 1.1) */
static int lo_setup(void **state)
{
	struct dxl_fabric_cfg cfg;
	dxlt_fabric_cfg_from_env(&cfg);
	cfg.timeout_ms = 2000;
	struct dxl_fabric *f;
	int ret = dxl_fabric_new(&cfg, &f);
	if (dxl_test_nodev_skip(ret)) {
		*state = NULL;
		return 0;
	}
	assert_int_equal(ret, 0);
	assert_int_equal(dxl_fabric_provider(f), dxlt_test_provider());
	struct lo *l = calloc(1, sizeof(*l));
	l->f = f;
	assert_int_equal(posix_memalign((void **)&l->mem, 4096, MEM), 0);
	memset(l->mem, 0, MEM);
	assert_int_equal(dxl_mr_reg(l->f, l->mem, MEM,
				    DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE |
					    DXL_MR_PERSISTENT, &l->mr), 0);
	assert_int_equal(posix_memalign((void **)&l->local, 4096, 65536), 0);
	assert_int_equal(dxl_mr_reg(l->f, l->local, 65536, DXL_MR_LOCAL_WRITE, &l->lmr), 0);
	assert_int_equal(dxl_ctx_new(l->f, 0, &l->c), 0);
	assert_int_equal(dxl_qp_connect(l->c, dxl_fabric_addr(l->f), 0, &l->qp), 0);
	*state = l;
	return 0;
}

static int lo_teardown(void **state)
{
	struct lo *l = *state;
	if (!l)
		return 0;
	dxl_fabric_delete(&l->f);
	free(l->mem);
	free(l->local);
	free(l);
	return 0;
}

static void test_heap(void **state)
{
	struct lo *l = *state;
	if (!l)
		skip(); /* no device: lo_setup said why */
	struct dxl_rdpma_heap *h;
	assert_int_equal(dxl_rdpma_heap_new(l->mr, 100, 4096, &h), DXL_E_INVAL);
	assert_int_equal(dxl_rdpma_heap_new(l->mr, 0, MEM + 256, &h), DXL_E_INVAL);
	assert_int_equal(dxl_rdpma_heap_new(l->mr, 4096, 65536, &h), 0);
	struct dxl_mr_desc d;
	dxl_mr_desc(l->mr, &d);

	struct dxl_fatptr a, b, c, e;
	assert_int_equal(dxl_rdpma_alloc(h, 16, &a), 0);
	assert_int_equal(a.len, 64);
	assert_int_equal(a.addr % 64, 0);
	assert_int_equal(a.rkey, d.rkey);
	assert_int_equal(dxl_rdpma_alloc(h, 300, &b), 0);
	assert_int_equal(b.len, 512);
	assert_int_equal(b.addr % 256, 0);
	assert_true(b.addr >= a.addr + a.len);
	assert_int_equal(dxl_rdpma_heap_used(h), 576);
	assert_int_equal(dxl_rdpma_alloc(h, 0, &c), DXL_E_INVAL);
	assert_int_equal(dxl_rdpma_alloc(h, (16u << 20) + 1, &c), DXL_E_TOOBIG);

	/* free, reuse the same slot; double free and foreign pointers refused */
	assert_int_equal(dxl_rdpma_free(h, &a), 0);
	assert_int_equal(dxl_rdpma_heap_used(h), 512);
	assert_int_equal(dxl_rdpma_free(h, &a), DXL_E_INVAL);
	assert_int_equal(dxl_rdpma_heap_used(h), 512);
	assert_int_equal(dxl_rdpma_alloc(h, 60, &c), 0);
	assert_int_equal(c.addr, a.addr);
	e = b;
	e.len = 256; /* altered length */
	assert_int_equal(dxl_rdpma_free(h, &e), DXL_E_INVAL);
	e = b;
	e.rkey ^= 1;
	assert_int_equal(dxl_rdpma_free(h, &e), DXL_E_INVAL);
	e = b;
	e.addr += 64;
	assert_int_equal(dxl_rdpma_free(h, &e), DXL_E_INVAL);

	/* fill it up: no two live objects overlap, then FULL */
	static struct dxl_fatptr live[2048];
	int n = 0;
	for (;;) {
		uint32_t sz = 1 + (uint32_t)((n * 97) % 700);
		int ret = dxl_rdpma_alloc(h, sz, &live[n]);
		if (ret == DXL_E_FULL)
			break;
		assert_int_equal(ret, 0);
		assert_true(live[n].addr >= d.addr + 4096 &&
			    live[n].addr + live[n].len <= d.addr + 4096 + 65536);
		n++;
		assert_true(n < 2048);
	}
	assert_true(n > 100);
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			assert_true(live[i].addr + live[i].len <= live[j].addr ||
				    live[j].addr + live[j].len <= live[i].addr);
	/* free every other one, and the freed space is found again */
	for (int i = 0; i < n; i += 2)
		assert_int_equal(dxl_rdpma_free(h, &live[i]), 0);
	for (int i = 0; i < n; i += 2)
		assert_int_equal(dxl_rdpma_alloc(h, live[i].len, &live[i]), 0);
	dxl_rdpma_heap_delete(&h);
	assert_null(h);
}

static void test_onesided_ops_loopback(void **state)
{
	struct lo *l = *state;
	if (!l)
		skip(); /* no device: lo_setup said why */
	struct dxl_rdpma_heap *h;
	assert_int_equal(dxl_rdpma_heap_new(l->mr, 0, MEM, &h), 0);
	struct dxl_fatptr fp;
	assert_int_equal(dxl_rdpma_alloc(h, 1000, &fp), 0);
	uint32_t lkey = dxl_mr_lkey(l->lmr);
	uint8_t *src = l->local, *dst = l->local + 8192, *scratch = l->local + 16384;
	const enum dxl_pwrite_mode modes[] = {DXL_PWRITE_H9, DXL_PWRITE_STRAWMAN,
					      DXL_PWRITE_NOFLUSH};
	for (int m = 0; m < 3; m++) {
		for (int i = 0; i < 1000; i++)
			src[i] = (uint8_t)(i + m * 7);
		assert_int_equal(dxl_rdpma_pwrite(l->qp, &fp, 0, src, 1000, lkey,
						  modes[m], scratch, lkey), 0);
		uint8_t *target = l->mem + (fp.addr - (uintptr_t)l->mem);
		assert_memory_equal(target, src, 1000);
		memset(dst, 0, 1000);
		assert_int_equal(dxl_rdpma_read(l->qp, &fp, 0, dst, 1000, lkey), 0);
		assert_memory_equal(dst, src, 1000);
	}
	assert_int_equal(dxl_rdpma_write(l->qp, &fp, 1000, src, 24, lkey), 0);
	/* outside the (padded) object: refused before anything is posted */
	assert_int_equal(dxl_rdpma_write(l->qp, &fp, 1000, src, 25, lkey), DXL_E_INVAL);
	assert_int_equal(dxl_rdpma_read(l->qp, &fp, 2000, dst, 1, lkey), DXL_E_INVAL);
	/* a stale fat pointer (bad rkey) is a remote access error */
	struct dxl_fatptr bad = fp;
	bad.rkey ^= 0x5a5a;
	assert_int_equal(dxl_rdpma_read(l->qp, &bad, 0, dst, 8, lkey), DXL_E_ACCESS);
	dxl_rdpma_heap_delete(&h);
}

/* the region's persist function runs for what a flush READ makes durable,
 * before the READ completes, and not for an un-flushed WRITE */
static uint32_t rkey_of(const struct dxl_mr *mr)
{
	struct dxl_mr_desc d;
	dxl_mr_desc(mr, &d);
	return d.rkey;
}

struct persisted {
	uintptr_t lo, hi;
	int calls;
};

static void note_persist(void *arg, const void *addr, size_t len)
{
	struct persisted *p = arg;
	uintptr_t a = (uintptr_t)addr;
	if (!p->calls || a < p->lo)
		p->lo = a;
	if (!p->calls || a + len > p->hi)
		p->hi = a + len;
	p->calls++;
}

static void test_flush_read_runs_persist_fn(void **state)
{
	struct lo *l = *state;
	if (!l)
		skip(); /* no device: lo_setup said why */
	struct persisted p = {0};
	dxl_mr_set_persist_fn(l->mr, note_persist, &p);
	struct dxl_fatptr fp = {.addr = (uintptr_t)l->mem + 8192, .len = 4096,
				.rkey = rkey_of(l->mr)};
	uint32_t lkey = dxl_mr_lkey(l->lmr);
	memset(l->local, 7, 4096);
	assert_int_equal(dxl_rdpma_pwrite(l->qp, &fp, 0, l->local, 1000, lkey,
					  DXL_PWRITE_NOFLUSH, l->local + 16384, lkey), 0);
	const int tcp = dxlt_test_provider() == DXL_FABRIC_TCP;
	if (tcp)
		assert_int_equal(p.calls, 0); /* placed, not flushed: not persisted */
	assert_int_equal(dxl_rdpma_pwrite(l->qp, &fp, 1000, l->local, 1000, lkey,
					  DXL_PWRITE_H9, l->local + 16384, lkey), 0);
	/* both writes are placed, whatever the provider */
	for (int i = 0; i < 2000; i++)
		assert_int_equal(l->mem[8192 + i], 7);
	if (!dxl_test_tcp_only("the persist-function check",
			       "the tcp provider's flush model (verbs ignores "
			       "dxl_mr_set_persist_fn: the NIC's READ is the flush)")) {
		dxl_mr_set_persist_fn(l->mr, NULL, NULL);
		skip();
	}
	/* the flush covers both writes of this QP: [0, 2000), one range */
	assert_int_equal(p.calls, 1);
	assert_int_equal(p.lo, fp.addr);
	assert_true(p.hi >= fp.addr + 2000 && p.hi <= fp.addr + 2048);
	dxl_mr_set_persist_fn(l->mr, NULL, NULL);
}

/* ---- durability under the power-failure model ---------------------------- */

struct target_info {
	char addr[DXL_FABRIC_ADDR_MAX];
	struct dxl_mr_desc desc;
};

/* child: serve a persistent region on a file; a SIGUSR2 power-fails it */
static void target_main(const char *path, int wfd)
{
	struct dxl_fabric_cfg cfg;
	dxlt_fabric_cfg_from_env(&cfg); /* tcp: the test is skipped otherwise */
	cfg.pf_signal = SIGUSR2;
	cfg.pf_policy = DXL_PF_ALL;
	struct dxl_fabric *f;
	if (dxl_fabric_new(&cfg, &f))
		_exit(2);
	int fd = open(path, O_RDWR);
	void *mem = mmap(NULL, MEM, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	struct dxl_mr *mr;
	struct dxl_ctx *c;
	if (mem == MAP_FAILED ||
	    dxl_mr_reg(f, mem, MEM, DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE |
					    DXL_MR_PERSISTENT, &mr) ||
	    dxl_ctx_new(f, 0, &c))
		_exit(3);
	struct target_info ti;
	memset(&ti, 0, sizeof(ti));
	snprintf(ti.addr, sizeof(ti.addr), "%s", dxl_fabric_addr(f));
	dxl_mr_desc(mr, &ti.desc);
	if (write(wfd, &ti, sizeof(ti)) != sizeof(ti))
		_exit(4);
	for (;;)
		pause();
}

static void test_pwrite_survives_power_failure_noflush_does_not(void **state)
{
	if (!dxl_test_tcp_only("the power-failure test",
			       "the tcp provider's power-failure model"))
		skip();
	alarm(60);
	char dir[] = "/tmp/dxl-test-rdpma-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[128];
	snprintf(path, sizeof(path), "%s/nvm", dir);
	int fd = open(path, O_RDWR | O_CREAT, 0600);
	assert_int_equal(ftruncate(fd, MEM), 0);
	close(fd);

	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		target_main(path, p[1]);
	}
	close(p[1]);
	struct target_info ti;
	assert_int_equal(read(p[0], &ti, sizeof(ti)), (ssize_t)sizeof(ti));
	close(p[0]);

	struct dxl_fabric *f;
	struct dxl_ctx *c;
	struct dxl_qp *qp;
	struct dxl_mr *lmr;
	struct dxl_fabric_cfg fc;
	dxlt_fabric_cfg_from_env(&fc);
	assert_int_equal(dxl_fabric_new(&fc, &f), 0);
	uint8_t *local = aligned_alloc(4096, 65536);
	assert_int_equal(dxl_mr_reg(f, local, 65536, DXL_MR_LOCAL_WRITE, &lmr), 0);
	assert_int_equal(dxl_ctx_new(f, 0, &c), 0);
	assert_int_equal(dxl_qp_connect(c, ti.addr, 0, &qp), 0);
	uint32_t lkey = dxl_mr_lkey(lmr);

	/* three objects: H9, strawman, and no flush at all */
	struct dxl_fatptr obj[3];
	const enum dxl_pwrite_mode modes[] = {DXL_PWRITE_H9, DXL_PWRITE_STRAWMAN,
					      DXL_PWRITE_NOFLUSH};
	for (int i = 0; i < 3; i++) {
		obj[i] = (struct dxl_fatptr){.addr = ti.desc.addr + 4096u * (uint32_t)i,
					     .len = 512, .rkey = ti.desc.rkey,
					     .node = ti.desc.node};
		memset(local, 0xa0 + i, 512);
		assert_int_equal(dxl_rdpma_pwrite(qp, &obj[i], 0, local, 512, lkey,
						  modes[i], local + 32768, lkey), 0);
	}
	/* the NOFLUSH write is placed (a READ on another QP would see it) but
	 * not durable; power-fail the target now */
	kill(pid, SIGUSR2);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGKILL);

	fd = open(path, O_RDONLY);
	uint8_t buf[512];
	for (int i = 0; i < 3; i++) {
		assert_int_equal(pread(fd, buf, 512, 4096 * i), 512);
		uint8_t want = i < 2 ? (uint8_t)(0xa0 + i) : 0; /* noflush: lost */
		for (int j = 0; j < 512; j++)
			if (buf[j] != want)
				fail_msg("object %d (%s) byte %d: %#x, want %#x", i,
					 dxl_pwrite_mode_name(modes[i]), j, buf[j], want);
	}
	close(fd);
	dxl_fabric_delete(&f);
	free(local);
	unlink(path);
	rmdir(dir);
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_padding_rules),
		cmocka_unit_test_setup_teardown(test_heap, lo_setup, lo_teardown),
		cmocka_unit_test_setup_teardown(test_onesided_ops_loopback, lo_setup, lo_teardown),
		cmocka_unit_test_setup_teardown(test_flush_read_runs_persist_fn, lo_setup, lo_teardown),
		cmocka_unit_test(test_pwrite_survives_power_failure_noflush_does_not),
	};
	return cmocka_run_group_tests_name("rdpma", tests, NULL, NULL);
}
