/* test_tcp_pf.c -- the tcp provider's power-failure model (H9), across processes */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_tcp_util.h"

/*
 * A child process (the target) maps a file MAP_SHARED, fills it with OLD,
 * registers it DXL_MR_PERSISTENT and opens its fabric with pf_signal =
 * SIGUSR2. This process WRITEs NEW into it, then power-fails the child with
 * kill(SIGUSR2) and, once the child is dead, reads the file: the bytes a
 * restarted process would see.
 */

#define LINES 64
#define LEN (LINES * 64)
#define OLD 0xAA
#define NEW 0xBB

struct pf {
	char dir[64];
	char path[128];
	struct tt_target t;
	struct dxl_fabric *f;
	struct dxl_ctx *c;
	uint8_t *buf;
	struct dxl_mr *mr;
};

static void pf_start(struct pf *p, enum dxl_pf_policy pol, uint64_t seed)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->dir, sizeof(p->dir), "/tmp/dxl-tcp-pf-XXXXXX");
	assert_non_null(mkdtemp(p->dir));
	snprintf(p->path, sizeof(p->path), "%s/region", p->dir);
	/* every power failure of the target reports here (the target is a
	 * child: it inherits the environment) */
	char rpath[128];
	snprintf(rpath, sizeof(rpath), "%s/report", p->dir);
	setenv("DXL_FABRIC_PF_REPORT", rpath, 1);
	struct tt_target_cfg tc = {
		.node = 2, .timeout_ms = 2000, .len = LEN,
		.access = DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE |
			  DXL_MR_REMOTE_ATOMIC | DXL_MR_PERSISTENT,
		.path = p->path, .fill = OLD, .pf_signal = SIGUSR2,
		.pf_policy = pol, .pf_seed = seed,
	};
	/* fork first: this process has no thread yet */
	assert_int_equal(tt_target_start(&tc, &p->t), 0);
	p->f = tt_fabric(1, 2000, 0);
	assert_non_null(p->f);
	assert_int_equal(dxl_ctx_new(p->f, 0, &p->c), 0);
	p->buf = aligned_alloc(64, 2 * LEN);
	memset(p->buf, NEW, 2 * LEN);
	assert_int_equal(dxl_mr_reg(p->f, p->buf, 2 * LEN, DXL_MR_LOCAL_WRITE,
				    &p->mr), 0);
}

static struct dxl_qp *pf_qp(struct pf *p)
{
	struct dxl_qp *qp = NULL;
	assert_int_equal(dxl_qp_connect(p->c, p->t.addr, 0, &qp), 0);
	return qp;
}

/* signalled WRITE of len bytes of NEW at line `line`: placed, not durable */
static void pf_write(struct pf *p, struct dxl_qp *qp, unsigned line, uint32_t len)
{
	struct dxl_wr w = {.op = DXL_WR_WRITE, .local = p->buf, .len = len,
			   .remote_addr = p->t.desc.addr + line * 64u,
			   .rkey = p->t.desc.rkey, .wr_id = line};
	struct dxl_wc wc;
	assert_int_equal(tt_do(qp, p->c, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
}

static void pf_read(struct pf *p, struct dxl_qp *qp, unsigned line, uint32_t len)
{
	struct dxl_wr w = {.op = DXL_WR_READ, .local = p->buf + LEN, .len = len,
			   .remote_addr = p->t.desc.addr + line * 64u,
			   .rkey = p->t.desc.rkey, .wr_id = 1000 + line};
	struct dxl_wc wc;
	assert_int_equal(tt_do(qp, p->c, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
}

/* power-fail the child by its signal; wait until it is dead; read the file */
static void pf_fail(struct pf *p, uint8_t *file)
{
	assert_int_equal(kill(p->t.pid, SIGUSR2), 0);
	int st = tt_target_reap(&p->t, TT_WAIT_MS);
	if (st < 0 || !WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
		fprintf(stderr, "target wait status %d\n", st);
	assert_true(st >= 0);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGKILL);
	int fd = open(p->path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, file, LEN), LEN);
	close(fd);
}

static void pf_end(struct pf *p)
{
	dxl_fabric_delete(&p->f);
	free(p->buf);
	unlink(p->path);
	char rpath[128];
	snprintf(rpath, sizeof(rpath), "%s/report", p->dir);
	unlink(rpath);
	rmdir(p->dir);
}

/* 1 = every byte of the line is NEW, 0 = every byte OLD, -1 = torn */
static int line_state(const uint8_t *file, unsigned line)
{
	int s = file[line * 64] == NEW ? 1 : file[line * 64] == OLD ? 0 : -1;
	for (unsigned i = 1; i < 64 && s >= 0; i++) {
		uint8_t b = file[line * 64 + i];
		if (b != (s ? NEW : OLD))
			return -1;
	}
	return s;
}

/* un-flushed WRITEs are lost under ALL; the rest of the region is intact */
static void test_unflushed_lost(void **state)
{
	struct pf p;
	pf_start(&p, DXL_PF_ALL, 0);
	struct dxl_qp *qp = pf_qp(&p);
	pf_write(&p, qp, 0, 8 * 64);
	pf_write(&p, qp, 20, 100); /* lines 20 and 21, partly */
	assert_int_equal(tt_target_cmd(&p.t, 'P', NULL, 0), 10);
	uint8_t file[LEN];
	pf_fail(&p, file);
	for (unsigned l = 0; l < LINES; l++)
		assert_int_equal(line_state(file, l), 0);
	pf_end(&p);
}

/*
 * H9 negative: a WRITE that has been placed (its signalled completion came
 * and another QP's READ sees it) is still lost when no READ on ITS QP
 * followed. This is what proves the model can fail.
 */
static void test_h9_negative(void **state)
{
	struct pf p;
	pf_start(&p, DXL_PF_ALL, 0);
	struct dxl_qp *q1 = pf_qp(&p), *q2 = pf_qp(&p);
	pf_write(&p, q1, 4, 64);
	pf_read(&p, q2, 4, 64); /* visible ... */
	assert_int_equal(p.buf[LEN], NEW);
	assert_int_equal(tt_target_cmd(&p.t, 'P', NULL, 0), 1); /* ... not durable */
	uint8_t file[LEN];
	pf_fail(&p, file);
	assert_int_equal(line_state(file, 4), 0);
	pf_end(&p);
}

/* H9: WRITE then READ on the same QP survives ALL; other QPs' do not */
static void test_read_flushes(void **state)
{
	struct pf p;
	pf_start(&p, DXL_PF_ALL, 0);
	struct dxl_qp *q1 = pf_qp(&p), *q2 = pf_qp(&p);
	pf_write(&p, q1, 0, 8 * 64);
	pf_write(&p, q2, 8, 8 * 64);
	pf_write(&p, q2, 16, 64);
	pf_write(&p, q1, 16, 64); /* line 16: two QPs */
	/* the one-round-trip persist: unsignalled WRITE + READ in one chain */
	struct dxl_wr w[2] = {
		{.op = DXL_WR_WRITE, .local = p.buf, .len = 64,
		 .remote_addr = p.t.desc.addr + 30 * 64, .rkey = p.t.desc.rkey},
		{.op = DXL_WR_READ, .local = p.buf + LEN, .len = 0,
		 .remote_addr = p.t.desc.addr, .rkey = p.t.desc.rkey,
		 .flags = DXL_WR_SIGNALED, .wr_id = 5},
	};
	w[0].next = &w[1];
	assert_int_equal(tt_post(q1, p.c, w), 0);
	struct dxl_wc wc;
	assert_int_equal(tt_wait_wc(p.c, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.wr_id, 5);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	/* q1 flushed: lines 0-7 and 30 durable; 8-15 (q2 only) pending, and
	 * 16 until q2 reads too */
	assert_int_equal(tt_target_cmd(&p.t, 'P', NULL, 0), 9);
	uint8_t file[LEN];
	pf_fail(&p, file);
	for (unsigned l = 0; l < 8; l++)
		assert_int_equal(line_state(file, l), 1);
	for (unsigned l = 8; l < 17; l++)
		assert_int_equal(line_state(file, l), 0);
	assert_int_equal(line_state(file, 30), 1);
	pf_end(&p);
}

/* mark_durable on the target makes a range survive */
static void test_mark_durable(void **state)
{
	struct pf p;
	pf_start(&p, DXL_PF_ALL, 0);
	struct dxl_qp *qp = pf_qp(&p);
	pf_write(&p, qp, 0, 16 * 64);
	uint64_t args[2] = {64 + 10, 7 * 64}; /* lines 1..8 (partial ends) */
	assert_int_equal(tt_target_cmd(&p.t, 'D', args, 2), 0);
	assert_int_equal(tt_target_cmd(&p.t, 'P', NULL, 0), 8);
	uint8_t file[LEN];
	pf_fail(&p, file);
	for (unsigned l = 0; l < 16; l++)
		assert_int_equal(line_state(file, l), l >= 1 && l <= 8);
	pf_end(&p);
}

/* atomics on persistent memory follow the model too; NONE loses nothing */
static void test_atomic_and_none(void **state)
{
	struct pf p;
	pf_start(&p, DXL_PF_NONE, 0);
	struct dxl_qp *qp = pf_qp(&p);
	pf_write(&p, qp, 2, 64);
	struct dxl_wr w = {.op = DXL_WR_FAA, .local = p.buf + LEN, .len = 8,
			   .remote_addr = p.t.desc.addr + 5 * 64, .rkey = p.t.desc.rkey,
			   .compare_add = 1};
	struct dxl_wc wc;
	assert_int_equal(tt_do(qp, p.c, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_int_equal(tt_target_cmd(&p.t, 'P', NULL, 0), 2);
	uint8_t file[LEN];
	pf_fail(&p, file);
	assert_int_equal(line_state(file, 2), 1);
	uint64_t v;
	memcpy(&v, file + 5 * 64, 8);
	assert_int_equal(v, 0xAAAAAAAAAAAAAAABull);
	pf_end(&p);
}

/* RANDOM: a seeded subset of whole lines is lost, the same for the same seed */
static uint64_t random_run(uint64_t seed, bool direct)
{
	struct pf p;
	pf_start(&p, DXL_PF_RANDOM, seed);
	struct dxl_qp *qp = pf_qp(&p);
	pf_write(&p, qp, 0, LEN); /* every line, one WRITE */
	assert_int_equal(tt_target_cmd(&p.t, 'P', NULL, 0), LINES);
	uint8_t file[LEN];
	if (direct) { /* dxl_fabric_power_fail called by the target itself */
		uint64_t args[2] = {DXL_PF_RANDOM, seed};
		tt_target_cmd(&p.t, 'F', args, 2); /* no answer: it dies */
		int st = tt_target_reap(&p.t, TT_WAIT_MS);
		assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
		int fd = open(p.path, O_RDONLY);
		assert_int_equal(read(fd, file, LEN), LEN);
		close(fd);
	} else {
		pf_fail(&p, file);
	}
	uint64_t lost = 0;
	for (unsigned l = 0; l < LINES; l++) {
		int s = line_state(file, l);
		assert_true(s >= 0); /* never torn */
		if (!s)
			lost |= 1ull << l;
	}
	pf_end(&p);
	return lost;
}

static void test_random_seeded(void **state)
{
	uint64_t a = random_run(42, false);
	uint64_t b = random_run(42, true);
	uint64_t c = random_run(43, false);
	printf("  seed 42 lost %d of %d lines (mask %016llx), seed 43 lost %d\n",
	       __builtin_popcountll(a), LINES, (unsigned long long)a,
	       __builtin_popcountll(c));
	assert_int_not_equal(a, 0);          /* a subset ... */
	assert_int_not_equal(a, UINT64_MAX); /* ... not everything */
	assert_int_equal(a, b);              /* deterministic for the seed */
	assert_int_not_equal(a, c);          /* and the seed matters */
}

/* ---- the armed power failure: it strikes in the middle of a chain ---------- */

/* the file's last report line (DXL_FABRIC_PF_REPORT) into out */
static void last_report(const char *path, char *out, size_t cap)
{
	out[0] = '\0';
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char line[512];
	while (fgets(line, sizeof(line), f))
		snprintf(out, cap, "%s", line);
	fclose(f);
}

/*
 * One chain [WRITE 8 lines at line 0, WRITE 1 line at line 20, READ] with a
 * power failure armed to strike after `steps` steps: 0..7 at the lines of
 * the first WRITE, 8 before the second WRITE, 9 at its line, 10 before the
 * READ, later: after it (idle). (The first WRITE's request is no step: its
 * QP has nothing un-flushed yet.) Returns the file and the report line.
 */
static void strike_run(enum dxl_pf_policy pol, uint64_t seed, uint32_t steps,
		       uint8_t *file, char *rep, size_t cap)
{
	char rpath[128];
	struct pf p;
	pf_start(&p, pol, seed);
	snprintf(rpath, sizeof(rpath), "%s/report", p.dir);
	struct dxl_qp *qp = pf_qp(&p);
	uint64_t a[4] = {(uint64_t)pol, seed, steps, 300};
	assert_int_equal(tt_target_cmd(&p.t, 'A', a, 4), 0);
	struct dxl_wr w[3] = {
		{.op = DXL_WR_WRITE, .local = p.buf, .len = 8 * 64,
		 .remote_addr = p.t.desc.addr, .rkey = p.t.desc.rkey},
		{.op = DXL_WR_WRITE, .local = p.buf, .len = 64,
		 .remote_addr = p.t.desc.addr + 20 * 64, .rkey = p.t.desc.rkey},
		{.op = DXL_WR_READ, .local = p.buf + LEN, .len = 64,
		 .remote_addr = p.t.desc.addr + 40 * 64, .rkey = p.t.desc.rkey,
		 .flags = DXL_WR_SIGNALED, .wr_id = 7},
	};
	w[0].next = &w[1];
	w[1].next = &w[2];
	assert_int_equal(tt_post(qp, p.c, w), 0);
	int st = tt_target_reap(&p.t, TT_WAIT_MS);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	int fd = open(p.path, O_RDONLY);
	assert_int_equal(read(fd, file, LEN), LEN);
	close(fd);
	last_report(rpath, rep, cap);
	unlink(rpath);
	pf_end(&p);
}

/* policy NONE: the file shows exactly what was placed when it struck */
static void test_strike_anywhere_in_a_chain(void **state)
{
	unsigned gaps = 0, partial = 0;
	for (uint32_t k = 0; k <= 11; k++) {
		uint8_t file[LEN];
		char rep[512];
		strike_run(DXL_PF_NONE, 1000 + k, k, file, rep, sizeof(rep));
		int a[8], b = line_state(file, 20);
		unsigned na = 0;
		for (int l = 0; l < 8; l++) {
			a[l] = line_state(file, (unsigned)l);
			assert_true(a[l] >= 0); /* lines are never torn inside */
			na += (unsigned)a[l];
		}
		assert_true(b >= 0);
		if (k <= 7) { /* at line k of the first WRITE */
			for (uint32_t l = 0; l < k; l++)
				assert_int_equal(a[l], 1);
			assert_int_equal(b, 0);
			assert_non_null(strstr(rep, "struck=inside"));
			int seen_old = 0;
			for (uint32_t l = k; l < 8; l++) {
				if (!a[l])
					seen_old = 1;
				else if (seen_old)
					gaps++; /* placed after one that was not */
			}
			partial += na > k && na < 8;
		} else if (k == 8) { /* before the second WRITE */
			assert_int_equal(na, 8);
			assert_int_equal(b, 0);
			assert_non_null(strstr(rep, "struck=between requests"));
		} else if (k == 9) { /* at the second WRITE's line */
			assert_int_equal(na, 8);
			assert_non_null(strstr(rep, "struck=inside"));
		} else if (k == 10) { /* both WRITEs done, the READ not */
			assert_int_equal(na, 8);
			assert_int_equal(b, 1);
			assert_non_null(strstr(rep, "struck=between requests"));
			assert_non_null(strstr(rep, "pending=9"));
		} else { /* after the READ: nothing left to strike in */
			assert_int_equal(na, 8);
			assert_int_equal(b, 1);
			assert_non_null(strstr(rep, "struck=idle"));
			assert_non_null(strstr(rep, "pending=0"));
		}
	}
	printf("  12 strike points: %u WRITEs struck with some of their later lines placed, "
	       "%u lines placed after an unplaced one\n", partial, gaps);
	assert_true(partial > 0); /* lines land in any order ... */
	assert_true(gaps > 0);    /* ... not only as a prefix */
}

/* RANDOM: struck before the flush READ, a seeded subset of the chain's
 * lines is lost; after it, nothing */
static void test_strike_before_the_flush_tears(void **state)
{
	unsigned torn = 0;
	for (uint64_t seed = 1; seed <= 6; seed++) {
		uint8_t file[LEN];
		char rep[512];
		strike_run(DXL_PF_RANDOM, seed, 10, file, rep, sizeof(rep));
		unsigned na = 0;
		for (unsigned l = 0; l < 8; l++)
			na += (unsigned)line_state(file, l);
		torn += na > 0 && na < 8;
		assert_non_null(strstr(rep, "pending=9"));
		strike_run(DXL_PF_RANDOM, seed, 11, file, rep, sizeof(rep));
		for (unsigned l = 0; l < 8; l++)
			assert_int_equal(line_state(file, l), 1);
		assert_int_equal(line_state(file, 20), 1);
	}
	printf("  %u of 6 WRITEs torn by a failure before their flush READ\n", torn);
	assert_true(torn >= 2);
}

/* the pf_signal arms a seeded strike point within DXL_PF_STRIKE_WINDOW steps:
 * with chains flowing, it strikes inside one of the next few */
static void test_signal_strikes_in_the_traffic(void **state)
{
	unsigned mid = 0;
	for (uint64_t seed = 1; seed <= 4; seed++) {
		struct pf p;
		pf_start(&p, DXL_PF_RANDOM, seed);
		char rpath[128];
		snprintf(rpath, sizeof(rpath), "%s/report", p.dir);
		struct dxl_qp *qp = pf_qp(&p);
		assert_int_equal(kill(p.t.pid, SIGUSR2), 0);
		usleep(2000); /* the NIC thread arms (it strikes idle after 20 ms) */
		unsigned chains = 0;
		for (; chains < 100; chains++) {
			struct dxl_wr w[2] = {
				{.op = DXL_WR_WRITE, .local = p.buf, .len = 8 * 64,
				 .remote_addr = p.t.desc.addr + (chains % 7) * 512,
				 .rkey = p.t.desc.rkey},
				{.op = DXL_WR_READ, .local = p.buf + LEN, .len = 8,
				 .remote_addr = p.t.desc.addr, .rkey = p.t.desc.rkey,
				 .flags = DXL_WR_SIGNALED, .wr_id = chains},
			};
			w[0].next = &w[1];
			struct dxl_wc wc;
			if (tt_post(qp, p.c, w) || tt_wait_wc(p.c, &wc, TT_WAIT_MS) != 1 ||
			    wc.status != DXL_WC_SUCCESS)
				break;
		}
		int st = tt_target_reap(&p.t, TT_WAIT_MS);
		assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
		char rep[512];
		last_report(rpath, rep, sizeof(rep));
		unlink(rpath);
		/* 9 steps a chain: it struck within the first 8 */
		assert_true(chains <= DXL_PF_STRIKE_WINDOW / 9 + 1);
		assert_null(strstr(rep, "struck=idle"));
		mid += strstr(rep, "struck=inside") != NULL;
		pf_end(&p);
	}
	printf("  4 signalled power failures struck in the traffic, %u inside a WRITE\n", mid);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unflushed_lost),
		cmocka_unit_test(test_h9_negative),
		cmocka_unit_test(test_read_flushes),
		cmocka_unit_test(test_mark_durable),
		cmocka_unit_test(test_atomic_and_none),
		cmocka_unit_test(test_random_seeded),
		cmocka_unit_test(test_strike_anywhere_in_a_chain),
		cmocka_unit_test(test_strike_before_the_flush_tears),
		cmocka_unit_test(test_signal_strikes_in_the_traffic),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
