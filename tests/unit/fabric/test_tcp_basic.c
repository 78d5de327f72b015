/* test_tcp_basic.c -- the tcp provider: one-sided ops, SEND/RECV, errors, signalling */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "test_tcp_util.h"

/*
 * Two fabrics in this process (node 1 = initiator, node 2 = target), so
 * the target's NIC thread serves the initiator's QPs over loopback TCP.
 */

#define REG 65536

struct env {
	struct dxl_fabric *fa, *fb;
	struct dxl_ctx *ca, *cb;
	struct dxl_qp *qp;
	uint8_t *mem;     /* target memory */
	struct dxl_mr *mr;
	struct dxl_mr_desc d;
	uint8_t *loc;     /* initiator buffer */
	struct dxl_mr *lmr;
};

static int env_open(struct env *e, uint32_t timeout_ms, uint32_t sq_depth,
		    unsigned access)
{
	memset(e, 0, sizeof(*e));
	e->fa = tt_fabric(1, timeout_ms, sq_depth);
	e->fb = tt_fabric(2, timeout_ms, sq_depth);
	if (!e->fa || !e->fb)
		return -1;
	e->mem = aligned_alloc(64, REG);
	e->loc = aligned_alloc(64, REG);
	memset(e->mem, 0, REG);
	memset(e->loc, 0, REG);
	if (dxl_ctx_new(e->fa, 0, &e->ca) || dxl_ctx_new(e->fb, 3, &e->cb) ||
	    dxl_mr_reg(e->fb, e->mem, REG, access, &e->mr) ||
	    dxl_mr_reg(e->fa, e->loc, REG, DXL_MR_LOCAL_WRITE, &e->lmr))
		return -1;
	dxl_mr_desc(e->mr, &e->d);
	int ret = dxl_qp_connect(e->ca, dxl_fabric_addr(e->fb), 3, &e->qp);
	if (ret)
		fprintf(stderr, "connect: %s\n", dxl_errmsg());
	return ret;
}

static void env_close(struct env *e)
{
	dxl_fabric_delete(&e->fa);
	dxl_fabric_delete(&e->fb);
	free(e->mem);
	free(e->loc);
}

#define ALL_REMOTE                                                            \
	(DXL_MR_LOCAL_WRITE | DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE |      \
	 DXL_MR_REMOTE_ATOMIC)

static struct dxl_wr mkwr(enum dxl_wr_opcode op, uint64_t id, void *local,
			  uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct dxl_wr w = {.wr_id = id, .op = op, .local = local, .len = len,
			   .remote_addr = raddr, .rkey = rkey};
	return w;
}

static void test_write_read(void **state)
{
	struct env e;
	assert_int_equal(env_open(&e, 0, 0, ALL_REMOTE), 0);
	assert_int_equal(dxl_qp_remote_node(e.qp), 2);
	for (int i = 0; i < 64; i++)
		e.loc[i] = (uint8_t)(i + 1);
	struct dxl_wc wc;
	struct dxl_wr w = mkwr(DXL_WR_WRITE, 7, e.loc, 64, e.d.addr + 128, e.d.rkey);
	assert_int_equal(tt_do(e.qp, e.ca, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 7);
	assert_int_equal(wc.opcode, DXL_WC_WRITE);
	assert_ptr_equal(wc.qp, e.qp);
	assert_memory_equal(e.mem + 128, e.loc, 64);
	/* READ it back elsewhere */
	w = mkwr(DXL_WR_READ, 8, e.loc + 4096, 64, e.d.addr + 128, e.d.rkey);
	assert_int_equal(tt_do(e.qp, e.ca, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_int_equal(wc.opcode, DXL_WC_READ);
	assert_memory_equal(e.loc + 4096, e.loc, 64);
	/* a big READ and WRITE (several socket buffers) */
	size_t big = REG;
	uint8_t *src = malloc(big), *dst = malloc(big);
	for (size_t i = 0; i < big; i++)
		src[i] = (uint8_t)(i * 7 + 3);
	w = mkwr(DXL_WR_WRITE, 9, src, (uint32_t)big, e.d.addr, e.d.rkey);
	assert_int_equal(tt_do(e.qp, e.ca, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_memory_equal(e.mem, src, big);
	w = mkwr(DXL_WR_READ, 10, dst, (uint32_t)big, e.d.addr, e.d.rkey);
	assert_int_equal(tt_do(e.qp, e.ca, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_memory_equal(dst, src, big);
	free(src);
	free(dst);
	env_close(&e);
}

static void test_atomics(void **state)
{
	struct env e;
	assert_int_equal(env_open(&e, 0, 0, ALL_REMOTE), 0);
	uint64_t *word = (uint64_t *)(e.mem + 64);
	*word = 5;
	uint64_t *res = (uint64_t *)e.loc;
	struct dxl_wc wc;
	struct dxl_wr w = mkwr(DXL_WR_CAS, 1, res, 8, e.d.addr + 64, e.d.rkey);
	w.compare_add = 5;
	w.swap = 9;
	assert_int_equal(tt_do(e.qp, e.ca, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_int_equal(wc.opcode, DXL_WC_CAS);
	assert_int_equal(*res, 5);
	assert_int_equal(__atomic_load_n(word, __ATOMIC_SEQ_CST), 9);
	w = mkwr(DXL_WR_CAS, 2, res, 8, e.d.addr + 64, e.d.rkey);
	w.compare_add = 5; /* fails: the word is 9 */
	w.swap = 1;
	assert_int_equal(tt_do(e.qp, e.ca, &w, &wc), 0);
	assert_int_equal(*res, 9);
	assert_int_equal(__atomic_load_n(word, __ATOMIC_SEQ_CST), 9);
	w = mkwr(DXL_WR_FAA, 3, res, 8, e.d.addr + 64, e.d.rkey);
	w.compare_add = 100;
	assert_int_equal(tt_do(e.qp, e.ca, &w, &wc), 0);
	assert_int_equal(wc.opcode, DXL_WC_FAA);
	assert_int_equal(*res, 9);
	assert_int_equal(__atomic_load_n(word, __ATOMIC_SEQ_CST), 109);
	env_close(&e);
}

/* FAA from two QPs of two ctxs, interleaved: no increment is lost */
static void test_atomic_contention(void **state)
{
	struct env e;
	assert_int_equal(env_open(&e, 0, 64, ALL_REMOTE), 0);
	struct dxl_ctx *c2;
	struct dxl_qp *qp2;
	assert_int_equal(dxl_ctx_new(e.fa, 1, &c2), 0);
	assert_int_equal(dxl_qp_connect(c2, dxl_fabric_addr(e.fb), 3, &qp2), 0);
	enum { N = 2000 };
	uint64_t res[2][8] __attribute__((aligned(8)));
	int done[2] = {0, 0}, posted[2] = {0, 0};
	struct dxl_qp *qps[2] = {e.qp, qp2};
	struct dxl_ctx *cs[2] = {e.ca, c2};
	uint64_t end = dxl_now_ms() + 20000;
	while ((done[0] < N || done[1] < N) && dxl_now_ms() < end) {
		for (int k = 0; k < 2; k++) {
			if (posted[k] < N && posted[k] - done[k] < 8) {
				struct dxl_wr w = mkwr(DXL_WR_FAA, 0,
						       &res[k][posted[k] % 8], 8,
						       e.d.addr + 8, e.d.rkey);
				w.compare_add = 1;
				w.flags = DXL_WR_SIGNALED;
				if (dxl_qp_post(qps[k], &w, NULL) == 0)
					posted[k]++;
			}
			struct dxl_wc wc[8];
			int n = dxl_ctx_poll(cs[k], wc, 8);
			for (int i = 0; i < n; i++)
				assert_int_equal(wc[i].status, DXL_WC_SUCCESS);
			done[k] += n > 0 ? n : 0;
		}
	}
	assert_int_equal(done[0], N);
	assert_int_equal(done[1], N);
	assert_int_equal(*(uint64_t *)(e.mem + 8), 2 * N);
	env_close(&e);
}

/* errors: bad rkey, bounds, rights, misaligned atomic; QP error afterwards */
static void check_access_error(unsigned access, struct dxl_wr w, bool fix_rkey)
{
	struct env e;
	assert_int_equal(env_open(&e, 0, 0, access), 0);
	memset(e.mem, 0x5a, REG);
	if (fix_rkey)
		w.rkey = e.d.rkey;
	w.remote_addr += e.d.addr;
	if (!w.local)
		w.local = e.loc;
	struct dxl_wc wc;
	assert_int_equal(tt_do(e.qp, e.ca, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_REM_ACCESS_ERR);
	assert_int_equal(wc.wr_id, w.wr_id);
	/* the target is untouched */
	for (size_t i = 0; i < REG; i++)
		if (e.mem[i] != 0x5a)
			fail_msg("target byte %zu changed", i);
	assert_int_equal(dxl_qp_state(e.qp), DXL_QP_ERR);
	struct dxl_wr r = mkwr(DXL_WR_READ, 99, e.loc, 8, e.d.addr, e.d.rkey);
	assert_int_equal(dxl_qp_post(e.qp, &r, NULL), DXL_E_STATE);
	/* the target still serves everybody else */
	struct dxl_qp *qp2;
	assert_int_equal(dxl_qp_connect(e.ca, dxl_fabric_addr(e.fb), 3, &qp2), 0);
	if (access & DXL_MR_REMOTE_READ) {
		assert_int_equal(tt_do(qp2, e.ca, &r, &wc), 0);
		assert_int_equal(wc.status, DXL_WC_SUCCESS);
		assert_int_equal(e.loc[0], 0x5a);
	}
	dxl_qp_delete(&qp2);
	dxl_qp_delete(&e.qp);
	env_close(&e);
}

static void test_access_errors(void **state)
{
	/* bad rkey */
	check_access_error(ALL_REMOTE, mkwr(DXL_WR_WRITE, 1, NULL, 8, 0, 12345),
			   false);
	/* out of bounds, by one byte */
	check_access_error(ALL_REMOTE,
			   mkwr(DXL_WR_WRITE, 2, NULL, 64, REG - 63, 0), true);
	check_access_error(ALL_REMOTE, mkwr(DXL_WR_READ, 3, NULL, 2, REG - 1, 0),
			   true);
	/* below the region */
	check_access_error(ALL_REMOTE, mkwr(DXL_WR_READ, 4, NULL, 8,
					    (uint64_t)-64, 0), true);
	/* missing rights */
	check_access_error(DXL_MR_REMOTE_READ, mkwr(DXL_WR_WRITE, 5, NULL, 8, 0, 0),
			   true);
	check_access_error(DXL_MR_REMOTE_WRITE, mkwr(DXL_WR_READ, 6, NULL, 8, 0, 0),
			   true);
	check_access_error(DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE,
			   mkwr(DXL_WR_FAA, 7, NULL, 8, 0, 0), true);
	/* misaligned atomic */
	check_access_error(ALL_REMOTE, mkwr(DXL_WR_CAS, 8, NULL, 8, 4, 0), true);
}

/* after an error, the later requests of the QP are flushed, in order */
static void test_error_flushes(void **state)
{
	struct env e;
	assert_int_equal(env_open(&e, 0, 0, ALL_REMOTE), 0);
	struct dxl_wr w[4];
	w[0] = mkwr(DXL_WR_WRITE, 10, e.loc, 8, e.d.addr, e.d.rkey);
	w[1] = mkwr(DXL_WR_WRITE, 11, e.loc, 8, e.d.addr, e.d.rkey ^ 1);
	w[2] = mkwr(DXL_WR_WRITE, 12, e.loc, 8, e.d.addr + 8, e.d.rkey);
	w[3] = mkwr(DXL_WR_READ, 13, e.loc + 64, 8, e.d.addr, e.d.rkey);
	e.loc[0] = 1;
	for (int i = 0; i < 4; i++) {
		w[i].next = i < 3 ? &w[i + 1] : NULL;
		w[i].flags = i == 2 ? 0 : DXL_WR_SIGNALED; /* 12 unsignalled */
	}
	assert_int_equal(dxl_qp_post(e.qp, w, NULL), 0);
	struct dxl_wc wc;
	enum dxl_wc_status want[4] = {DXL_WC_SUCCESS, DXL_WC_REM_ACCESS_ERR,
				      DXL_WC_FLUSHED, DXL_WC_FLUSHED};
	for (int i = 0; i < 4; i++) {
		assert_int_equal(tt_wait_wc(e.ca, &wc, TT_WAIT_MS), 1);
		assert_int_equal(wc.wr_id, 10 + i);
		assert_int_equal(wc.status, want[i]);
	}
	assert_int_equal(dxl_ctx_poll(e.ca, &wc, 1), 0);
	assert_int_equal(e.mem[0], 1);
	assert_int_equal(e.mem[8], 0); /* the flushed WRITE never ran */
	env_close(&e);
}

/* unsignalled requests never fill the SQ; no completion on success */
static void test_selective_signalling(void **state)
{
	struct env e;
	assert_int_equal(env_open(&e, 0, 16, ALL_REMOTE), 0);
	uint64_t *v = (uint64_t *)e.loc;
	int again = 0;
	for (uint64_t i = 1; i <= 5000; i++) {
		v[i % 512] = i;
		struct dxl_wr w = mkwr(DXL_WR_WRITE, i, &v[i % 512], 8, e.d.addr,
				       e.d.rkey);
		w.flags = DXL_WR_INLINE;
		int ret;
		uint64_t end = dxl_now_ms() + TT_WAIT_MS;
		while ((ret = dxl_qp_post(e.qp, &w, NULL)) == DXL_E_AGAIN &&
		       dxl_now_ms() < end) {
			struct dxl_wc wc;
			again++;
			assert_int_equal(dxl_ctx_poll(e.ca, &wc, 1), 0);
		}
		assert_int_equal(ret, 0);
	}
	struct dxl_wc wc;
	struct dxl_wr r = mkwr(DXL_WR_READ, 77, e.loc + 8192, 8, e.d.addr, e.d.rkey);
	assert_int_equal(tt_do(e.qp, e.ca, &r, &wc), 0);
	assert_int_equal(wc.wr_id, 77); /* the first and only completion */
	assert_int_equal(*(uint64_t *)(e.loc + 8192), 5000);
	assert_int_equal(dxl_ctx_poll(e.ca, &wc, 1), 0);
	env_close(&e);
}

/* a chain over the free SQ slots is refused whole */
static void test_sq_full(void **state)
{
	struct env e;
	assert_int_equal(env_open(&e, 0, 8, ALL_REMOTE), 0);
	struct dxl_wr w[9];
	for (int i = 0; i < 9; i++) {
		e.loc[i] = (uint8_t)(i + 1);
		w[i] = mkwr(DXL_WR_WRITE, (uint64_t)i, e.loc + i, 1,
			    e.d.addr + (uint64_t)i, e.d.rkey);
		w[i].flags = DXL_WR_SIGNALED;
		w[i].next = i < 8 ? &w[i + 1] : NULL;
	}
	struct dxl_wr *bad = NULL;
	assert_int_equal(dxl_qp_post(e.qp, w, &bad), DXL_E_AGAIN);
	assert_ptr_equal(bad, &w[0]);
	w[7].next = NULL; /* 8 fit */
	assert_int_equal(dxl_qp_post(e.qp, w, NULL), 0);
	struct dxl_wr one = mkwr(DXL_WR_READ, 50, e.loc + 100, 1, e.d.addr, e.d.rkey);
	assert_int_equal(dxl_qp_post(e.qp, &one, NULL), DXL_E_AGAIN);
	struct dxl_wc wc;
	for (int i = 0; i < 8; i++) {
		assert_int_equal(tt_wait_wc(e.ca, &wc, TT_WAIT_MS), 1);
		assert_int_equal(wc.wr_id, (uint64_t)i);
	}
	assert_int_equal(e.mem[8], 0); /* the refused 9th never ran */
	assert_memory_equal(e.mem, e.loc, 8);
	env_close(&e);
}

/* inline payloads are copied at post; chains keep order (RAW, atomics) */
static void test_inline_and_order(void **state)
{
	struct env e;
	assert_int_equal(env_open(&e, 0, 0, ALL_REMOTE), 0);
	uint8_t buf[32];
	memset(buf, 0x11, sizeof(buf));
	struct dxl_wr w[4];
	w[0] = mkwr(DXL_WR_WRITE, 1, buf, 32, e.d.addr + 256, e.d.rkey);
	w[0].flags = DXL_WR_INLINE;
	w[1] = mkwr(DXL_WR_FAA, 2, e.loc + 8, 8, e.d.addr + 256, e.d.rkey);
	w[1].compare_add = 1;
	w[2] = mkwr(DXL_WR_READ, 3, e.loc + 64, 32, e.d.addr + 256, e.d.rkey);
	w[2].flags = DXL_WR_SIGNALED;
	w[0].next = &w[1];
	w[1].next = &w[2];
	w[2].next = NULL;
	assert_int_equal(dxl_qp_post(e.qp, w, NULL), 0);
	memset(buf, 0x22, sizeof(buf)); /* reuse at once */
	struct dxl_wc wc;
	assert_int_equal(tt_wait_wc(e.ca, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.wr_id, 3);
	assert_int_equal(*(uint64_t *)(e.loc + 8), 0x1111111111111111ull);
	assert_int_equal(*(uint64_t *)(e.loc + 64), 0x1111111111111112ull);
	for (int i = 8; i < 32; i++)
		assert_int_equal(e.loc[64 + i], 0x11);
	env_close(&e);
}

/* deregistration makes the rkey fail */
static void test_dereg(void **state)
{
	struct env e;
	assert_int_equal(env_open(&e, 0, 0, ALL_REMOTE), 0);
	uint32_t key = e.d.rkey;
	dxl_mr_dereg(&e.mr);
	struct dxl_mr *again = NULL;
	assert_int_equal(dxl_mr_reg(e.fb, e.mem, REG, ALL_REMOTE, &again), 0);
	assert_int_not_equal(dxl_mr_lkey(again), key);
	struct dxl_wc wc;
	struct dxl_wr w = mkwr(DXL_WR_READ, 1, e.loc, 8, e.d.addr, key);
	assert_int_equal(tt_do(e.qp, e.ca, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_REM_ACCESS_ERR);
	env_close(&e);
}

static void test_send_recv(void **state)
{
	struct env e;
	assert_int_equal(env_open(&e, 0, 0, ALL_REMOTE), 0);
	uint8_t rb[4][128];
	for (int i = 0; i < 4; i++)
		assert_int_equal(dxl_ctx_post_recv(e.cb, rb[i], 128, 0, 100 + i), 0);
	const char *msg = "hello, passive side";
	struct dxl_wr w = mkwr(DXL_WR_SEND, 1, (void *)msg,
			       (uint32_t)strlen(msg) + 1, 0, 0);
	w.flags = DXL_WR_INLINE;
	struct dxl_wc wc;
	assert_int_equal(tt_do(e.qp, e.ca, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_int_equal(wc.opcode, DXL_WC_SEND);
	assert_int_equal(tt_wait_wc(e.cb, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.opcode, DXL_WC_RECV);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 100);
	assert_int_equal(wc.byte_len, strlen(msg) + 1);
	assert_string_equal((char *)rb[0], msg);
	struct dxl_qp *pq = wc.qp;
	assert_non_null(pq);
	assert_true(dxl_qp_is_passive(pq));
	assert_int_equal(dxl_qp_remote_node(pq), 1);
	/* one-sided ops are refused on the passive QP */
	struct dxl_wr r = mkwr(DXL_WR_READ, 5, e.loc, 8, 0, 0);
	assert_int_equal(dxl_qp_post(pq, &r, NULL), DXL_E_NOTSUP);
	/* the reply comes back to the active side's SRQ */
	uint8_t ab[128];
	assert_int_equal(dxl_ctx_post_recv(e.ca, ab, sizeof(ab), 0, 200), 0);
	const char *rep = "reply";
	w = mkwr(DXL_WR_SEND, 2, (void *)rep, 6, 0, 0);
	w.flags = DXL_WR_SIGNALED;
	assert_int_equal(dxl_qp_post(pq, &w, NULL), 0);
	/* the active side reads it in its poll (and acknowledges it then) */
	assert_int_equal(tt_wait_wc(e.ca, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.opcode, DXL_WC_RECV);
	assert_int_equal(wc.wr_id, 200);
	assert_ptr_equal(wc.qp, e.qp);
	assert_string_equal((char *)ab, rep);
	assert_int_equal(tt_wait_wc(e.cb, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_int_equal(wc.opcode, DXL_WC_SEND);
	assert_ptr_equal(wc.qp, pq);
	/* many unsignalled SENDs land in order in the remaining buffers */
	for (int i = 0; i < 3; i++) {
		char m[16];
		snprintf(m, sizeof(m), "m%d", i);
		w = mkwr(DXL_WR_SEND, 10 + i, m, 3, 0, 0);
		w.flags = DXL_WR_INLINE;
		assert_int_equal(dxl_qp_post(e.qp, &w, NULL), 0);
	}
	for (int i = 0; i < 3; i++) {
		assert_int_equal(tt_wait_wc(e.cb, &wc, TT_WAIT_MS), 1);
		assert_int_equal(wc.wr_id, 101 + i);
		char m[16];
		snprintf(m, sizeof(m), "m%d", i);
		assert_string_equal((char *)rb[1 + i], m);
	}
	dxl_qp_delete(&pq);
	env_close(&e);
}

/* no receive buffer: the SEND waits for one (RNR), then fails in time */
static void test_send_rnr(void **state)
{
	struct env e;
	assert_int_equal(env_open(&e, 400, 0, ALL_REMOTE), 0);
	struct dxl_wr w = mkwr(DXL_WR_SEND, 1, "x", 1, 0, 0);
	w.flags = DXL_WR_SIGNALED | DXL_WR_INLINE;
	assert_int_equal(dxl_qp_post(e.qp, &w, NULL), 0);
	struct dxl_wc wc;
	assert_int_equal(dxl_ctx_poll(e.ca, &wc, 1), 0);
	assert_int_equal(dxl_ctx_wait(e.cb, 50), DXL_E_TIMEDOUT);
	uint8_t rb[16];
	assert_int_equal(dxl_ctx_post_recv(e.cb, rb, sizeof(rb), 0, 5), 0);
	assert_int_equal(tt_wait_wc(e.cb, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.wr_id, 5);
	assert_int_equal(rb[0], 'x');
	assert_int_equal(tt_wait_wc(e.ca, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	/* now nobody posts: REM_OP_ERR at the sender, QP in error */
	w.wr_id = 2;
	assert_int_equal(dxl_qp_post(e.qp, &w, NULL), 0);
	assert_int_equal(tt_wait_wc(e.ca, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.wr_id, 2);
	assert_int_equal(wc.status, DXL_WC_REM_OP_ERR);
	assert_int_equal(dxl_qp_state(e.qp), DXL_QP_ERR);
	env_close(&e);
}

/* the active side has no buffer for a reply: it waits (parked) for one */
static void test_reply_rnr(void **state)
{
	struct env e;
	assert_int_equal(env_open(&e, 2000, 0, ALL_REMOTE), 0);
	uint8_t rb[16];
	assert_int_equal(dxl_ctx_post_recv(e.cb, rb, sizeof(rb), 0, 1), 0);
	struct dxl_wr w = mkwr(DXL_WR_SEND, 1, "q", 1, 0, 0);
	w.flags = DXL_WR_INLINE;
	assert_int_equal(dxl_qp_post(e.qp, &w, NULL), 0);
	struct dxl_wc wc;
	assert_int_equal(tt_wait_wc(e.cb, &wc, TT_WAIT_MS), 1);
	struct dxl_qp *pq = wc.qp;
	/* two replies; nothing posted on the active side yet */
	struct dxl_wr r[2] = {mkwr(DXL_WR_SEND, 10, "a", 1, 0, 0),
			      mkwr(DXL_WR_SEND, 11, "b", 1, 0, 0)};
	r[0].flags = r[1].flags = DXL_WR_INLINE | DXL_WR_SIGNALED;
	r[0].next = &r[1];
	assert_int_equal(dxl_qp_post(pq, r, NULL), 0);
	assert_int_equal(dxl_ctx_wait(e.ca, 50), DXL_E_TIMEDOUT); /* parked */
	uint8_t ab[2][16];
	assert_int_equal(dxl_ctx_post_recv(e.ca, ab[0], 16, 0, 20), 0);
	assert_int_equal(tt_wait_wc(e.ca, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.wr_id, 20);
	assert_int_equal(ab[0][0], 'a');
	assert_int_equal(dxl_ctx_wait(e.ca, 50), DXL_E_TIMEDOUT); /* parked again */
	assert_int_equal(dxl_ctx_post_recv(e.ca, ab[1], 16, 0, 21), 0);
	assert_int_equal(tt_wait_wc(e.ca, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.wr_id, 21);
	assert_int_equal(ab[1][0], 'b');
	for (int i = 0; i < 2; i++) {
		assert_int_equal(tt_wait_wc(e.cb, &wc, TT_WAIT_MS), 1);
		assert_int_equal(wc.wr_id, 10 + (uint64_t)i);
		assert_int_equal(wc.status, DXL_WC_SUCCESS);
	}
	/* input flows again after the parking: another reply, then a read */
	uint8_t ab2[16];
	assert_int_equal(dxl_ctx_post_recv(e.ca, ab2, 16, 0, 22), 0);
	r[0].wr_id = 12;
	r[0].next = NULL;
	assert_int_equal(dxl_qp_post(pq, r, NULL), 0);
	assert_int_equal(tt_wait_wc(e.ca, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.wr_id, 22);
	struct dxl_wr rd = mkwr(DXL_WR_READ, 30, e.loc, 8, e.d.addr, e.d.rkey);
	assert_int_equal(tt_do(e.qp, e.ca, &rd, &wc), 0);
	assert_int_equal(wc.wr_id, 30);
	/* no buffer for too long: the passive side's SEND fails */
	r[0].wr_id = 13;
	assert_int_equal(dxl_qp_post(pq, r, NULL), 0);
	/* the active side must keep polling: it refuses the parked reply */
	uint64_t end = dxl_now_ms() + TT_WAIT_MS;
	struct dxl_wc got[2];
	int n = 0;
	while (n < 2 && dxl_now_ms() < end) {
		struct dxl_wc x;
		assert_int_equal(dxl_ctx_poll(e.ca, &x, 1), 0);
		if (dxl_ctx_poll(e.cb, &got[n], 1) == 1)
			n++;
		else
			dxl_ctx_wait(e.cb, 5);
	}
	assert_int_equal(n, 2);
	assert_int_equal(got[0].wr_id, 12);
	assert_int_equal(got[0].status, DXL_WC_SUCCESS);
	assert_int_equal(got[1].wr_id, 13);
	assert_int_equal(got[1].status, DXL_WC_REM_OP_ERR);
	assert_int_equal(dxl_qp_state(pq), DXL_QP_ERR);
	env_close(&e);
}

/* SEND larger than the receive buffer: LOCAL_ERR there, REM_OP_ERR here */
static void test_send_too_big(void **state)
{
	struct env e;
	assert_int_equal(env_open(&e, 0, 0, ALL_REMOTE), 0);
	uint8_t rb[16];
	assert_int_equal(dxl_ctx_post_recv(e.cb, rb, sizeof(rb), 0, 5), 0);
	struct dxl_wr w = mkwr(DXL_WR_SEND, 1, e.loc, 100, 0, 0);
	struct dxl_wc wc;
	assert_int_equal(tt_do(e.qp, e.ca, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_REM_OP_ERR);
	assert_int_equal(tt_wait_wc(e.cb, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.opcode, DXL_WC_RECV);
	assert_int_equal(wc.status, DXL_WC_LOCAL_ERR);
	assert_int_equal(wc.byte_len, 100);
	assert_int_equal(wc.wr_id, 5);
	env_close(&e);
}

/* accepts one connection and answers its handshake with version 99 */
static void *fake_server(void *arg)
{
	int s = *(int *)arg;
	int x = accept(s, NULL, NULL);
	uint8_t hs[20];
	if (tt_read_full(x, hs, sizeof(hs), 5000) == 0) {
		hs[4] = 99; /* version 99, status ok */
		tt_write_full(x, hs, sizeof(hs));
		tt_read_full(x, hs, 1, 5000);
	}
	close(x);
	return NULL;
}

static void test_connect_errors(void **state)
{
	struct dxl_fabric *fa = tt_fabric(1, 300, 0), *fb = tt_fabric(2, 300, 0);
	assert_non_null(fa);
	assert_non_null(fb);
	struct dxl_ctx *c;
	struct dxl_qp *qp = NULL;
	assert_int_equal(dxl_ctx_new(fa, 0, &c), 0);
	/* no ctx 9 at the peer */
	assert_int_equal(dxl_qp_connect(c, dxl_fabric_addr(fb), 9, &qp), DXL_E_NOENT);
	assert_null(qp);
	/* nobody listens: refused */
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &sl), 0);
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sa.sin_port));
	assert_int_equal(dxl_qp_connect(c, addr, 0, &qp), DXL_E_UNREACHABLE);
	/* it listens but never answers: bounded by timeout_ms */
	assert_int_equal(listen(s, 4), 0);
	uint64_t t0 = dxl_now_ms();
	assert_int_equal(dxl_qp_connect(c, addr, 0, &qp), DXL_E_UNREACHABLE);
	assert_true(dxl_now_ms() - t0 < 5000);
	/* it answers with another protocol version */
	int a = accept(s, NULL, NULL);
	close(a);
	pthread_t t;
	pthread_create(&t, NULL, fake_server, &s);
	assert_int_equal(dxl_qp_connect(c, addr, 0, &qp), DXL_E_VERSION);
	pthread_join(t, NULL);
	close(s);
	/* a bad address */
	assert_int_equal(dxl_qp_connect(c, "nohostname", 0, &qp), DXL_E_INVAL);
	dxl_fabric_delete(&fa);
	dxl_fabric_delete(&fb);
}

/* the target side rejects a version it does not speak */
static void test_version_refused(void **state)
{
	struct dxl_fabric *fb = tt_fabric(2, 0, 0);
	struct dxl_ctx *cb;
	assert_int_equal(dxl_ctx_new(fb, 0, &cb), 0);
	char host[64];
	uint16_t port;
	assert_int_equal(dxl_parse_hostport(dxl_fabric_addr(fb), host, sizeof(host),
					    &port), 0);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	uint8_t hs[20] = {0x54, 0x44, 0x58, 0x4c, 7, 0}; /* magic, version 7 */
	tt_write_full(s, hs, sizeof(hs));
	uint8_t r[20];
	assert_int_equal(tt_read_full(s, r, sizeof(r), TT_WAIT_MS), 0);
	assert_int_equal(r[6], 2); /* TCP_HS_VERSION */
	assert_int_equal(tt_read_full(s, r, 1, TT_WAIT_MS), -1); /* closed */
	close(s);
	dxl_fabric_delete(&fb);
}

/* wait blocks, and wakes for a RECV the NIC thread delivers */
struct waiter {
	struct dxl_ctx *c;
	struct dxl_wc wc;
	int got;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	w->got = tt_wait_wc(w->c, &w->wc, TT_WAIT_MS);
	return NULL;
}

static void test_wait_wakes(void **state)
{
	struct env e;
	assert_int_equal(env_open(&e, 0, 0, ALL_REMOTE), 0);
	uint8_t rb[16];
	assert_int_equal(dxl_ctx_post_recv(e.cb, rb, sizeof(rb), 0, 5), 0);
	struct waiter w = {.c = e.cb};
	pthread_t t;
	/* the waiter owns cb from now on */
	pthread_create(&t, NULL, waiter_main, &w);
	usleep(20000);
	struct dxl_wr s = mkwr(DXL_WR_SEND, 1, "hi", 3, 0, 0);
	s.flags = DXL_WR_INLINE;
	assert_int_equal(dxl_qp_post(e.qp, &s, NULL), 0);
	pthread_join(t, NULL);
	assert_int_equal(w.got, 1);
	assert_int_equal(w.wc.wr_id, 5);
	assert_string_equal((char *)rb, "hi");
	assert_int_equal(dxl_ctx_wait(e.ca, 0), DXL_E_TIMEDOUT);
	env_close(&e);
}

/* transfers far over the socket buffers: partial writes, output buffers,
 * a NIC thread that stops reading while its answers wait */
static void test_big_transfers(void **state)
{
	struct env e;
	assert_int_equal(env_open(&e, 0, 0, ALL_REMOTE), 0);
	size_t big = 8u << 20;
	uint8_t *tgt = malloc(big), *src = malloc(big), *dst = malloc(big);
	struct dxl_mr *mr;
	assert_int_equal(dxl_mr_reg(e.fb, tgt, big, ALL_REMOTE, &mr), 0);
	struct dxl_mr_desc d;
	dxl_mr_desc(mr, &d);
	for (size_t i = 0; i < big; i++)
		src[i] = (uint8_t)(i * 131 + (i >> 12));
	struct dxl_wc wc;
	struct dxl_wr w = mkwr(DXL_WR_WRITE, 1, src, (uint32_t)big, d.addr, d.rkey);
	assert_int_equal(tt_do(e.qp, e.ca, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_memory_equal(tgt, src, big);
	w = mkwr(DXL_WR_READ, 2, dst, (uint32_t)big, d.addr, d.rkey);
	assert_int_equal(tt_do(e.qp, e.ca, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_memory_equal(dst, src, big);
	/* a chain of 64 READs of 128 KiB (8 MiB of answers at once) and
	 * 64 unsignalled WRITEs back, in one post each */
	struct dxl_wr ch[64];
	size_t piece = big / 64;
	memset(dst, 0, big);
	for (int i = 0; i < 64; i++) {
		ch[i] = mkwr(DXL_WR_READ, 100 + (uint64_t)i, dst + i * piece,
			     (uint32_t)piece, d.addr + i * piece, d.rkey);
		ch[i].flags = i == 63 ? DXL_WR_SIGNALED : 0;
		ch[i].next = i < 63 ? &ch[i + 1] : NULL;
	}
	assert_int_equal(tt_post(e.qp, e.ca, ch), 0);
	assert_int_equal(tt_wait_wc(e.ca, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.wr_id, 163);
	assert_memory_equal(dst, src, big);
	for (int i = 0; i < 64; i++) {
		src[i * piece] ^= 0xff;
		ch[i] = mkwr(DXL_WR_WRITE, 200 + (uint64_t)i, src + i * piece,
			     (uint32_t)piece, d.addr + i * piece, d.rkey);
		ch[i].flags = i == 63 ? DXL_WR_SIGNALED : 0;
		ch[i].next = i < 63 ? &ch[i + 1] : NULL;
	}
	assert_int_equal(tt_post(e.qp, e.ca, ch), 0);
	assert_int_equal(tt_wait_wc(e.ca, &wc, TT_WAIT_MS), 1);
	assert_int_equal(wc.wr_id, 263);
	assert_memory_equal(tgt, src, big);
	dxl_mr_dereg(&mr);
	free(tgt);
	free(src);
	free(dst);
	env_close(&e);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_read),
		cmocka_unit_test(test_atomics),
		cmocka_unit_test(test_atomic_contention),
		cmocka_unit_test(test_access_errors),
		cmocka_unit_test(test_error_flushes),
		cmocka_unit_test(test_selective_signalling),
		cmocka_unit_test(test_sq_full),
		cmocka_unit_test(test_inline_and_order),
		cmocka_unit_test(test_dereg),
		cmocka_unit_test(test_send_recv),
		cmocka_unit_test(test_send_rnr),
		cmocka_unit_test(test_reply_rnr),
		cmocka_unit_test(test_send_too_big),
		cmocka_unit_test(test_connect_errors),
		cmocka_unit_test(test_version_refused),
		cmocka_unit_test(test_wait_wakes),
		cmocka_unit_test(test_big_transfers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
