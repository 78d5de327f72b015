/* test_fabric_conformance.c -- what every fabric provider must do, checked across processes */
/*
 * One cmocka program for all providers: DXL_TEST_PROVIDER=tcp|verbs picks
 * the provider, DXL_TEST_ADDR the host both sides listen on (see
 * docs/fabric-conformance.md). The target of one-sided requests is always
 * a separate process (tests/lib/peer.h) unless a test says it is local.
 *
 * Nothing here knows how a provider works inside. The only provider
 * distinctions are properties fabric.h states:
 *  - the power-failure model exists on tcp only (skipped elsewhere, with a
 *    printed reason);
 *  - whether one-sided requests are served by the target PROCESS (tcp: its
 *    NIC thread) or by hardware (verbs): only then does SIGSTOP of the
 *    target make it unreachable.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/common.h"
#include "dxl/fabric.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/peer.h"

#define RLEN (2u << 20)         /* the peer's main region */
#define LLEN (4u << 20)         /* the test's local region */
#define LDST_OFF (2u << 20)     /* local: [0, 2M) sources, [2M, 4M) sinks */
#define PEER_SEED 0xc0ffee11ull /* initial content of the peer's region */
#define NODE_TEST 1u
#define NODE_PEER 2u
#define MAX_EXTRA 4

/* ---- assertions with the library's error message ------------------------ */

#define CHECK(expr)                                                          \
	do {                                                                 \
		int rc_ = (expr);                                            \
		if (rc_ < 0)                                                 \
			fail_msg("%s:%d: %s = %d (%s): %s", __FILE__,        \
				 __LINE__, #expr, rc_, dxl_errname(rc_),     \
				 dxl_errmsg());                              \
	} while (0)

#define CHECK_ERR(expr, want)                                                \
	do {                                                                 \
		int rc_ = (expr);                                            \
		if (rc_ != (want))                                           \
			fail_msg("%s:%d: %s = %d (%s), expected %s; msg: %s", \
				 __FILE__, __LINE__, #expr, rc_,             \
				 dxl_errname(rc_), #want, dxl_errmsg());     \
	} while (0)

#define CHECK_WC(got, want)                                                  \
	do {                                                                 \
		int g_ = (int)(got), w_ = (int)(want);                       \
		if (g_ != w_)                                                \
			fail_msg("%s:%d: completion status %d (%s), expected " \
				 "%d (%s)", __FILE__, __LINE__, g_,          \
				 g_ < 0 ? dxl_errname(g_)                    \
					: dxl_wc_status_str((enum dxl_wc_status)g_), \
				 w_, dxl_wc_status_str((enum dxl_wc_status)w_)); \
	} while (0)

#define CHECK_PATTERN(buf, len, seed, start)                                 \
	do {                                                                 \
		long at_ = dxlt_pattern_check((buf), (len), (seed), (start)); \
		if (at_ >= 0)                                                \
			fail_msg("%s:%d: %s: byte %ld of %zu differs from "  \
				 "pattern %#llx", __FILE__, __LINE__, #buf,  \
				 at_, (size_t)(len),                         \
				 (unsigned long long)(seed));                \
	} while (0)

static bool nic_in_process(enum dxl_fabric_provider p)
{
	/* tcp: one-sided requests are served by a thread of the target process;
	 * verbs: by the (soft) NIC in the kernel or hardware */
	return p == DXL_FABRIC_TCP;
}

/* ---- the fixture ------------------------------------------------------------ */

struct fx {
	struct dxl_fabric_cfg cfg; /* the test process's */
	struct dxl_fabric *f;
	struct dxl_ctx *c;        /* ctx 0, main thread */
	uint8_t *lbuf;            /* LLEN, registered LOCAL_WRITE */
	struct dxl_mr *lmr;
	uint32_t lkey;

	struct dxlt_peer *peer;   /* the target: region rreg, ctx 0 */
	int rreg;
	struct dxl_mr_desc rd;
	uint8_t *shadow;          /* what the peer's region must hold */
	struct dxl_qp *qp;        /* ctx 0 -> peer ctx 0 */

	struct dxlt_peer *extra[MAX_EXTRA];
	char tmpdir[128];
};

static int fx_setup(void **state)
{
	struct fx *x = calloc(1, sizeof(*x));
	if (!x)
		return -1;
	dxlt_watchdog_arm(0, "fabric conformance test");
	*state = x;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *x = *state;
	if (x->qp)
		dxl_qp_delete(&x->qp);
	if (x->c)
		dxl_ctx_delete(&x->c);
	if (x->lmr)
		dxl_mr_dereg(&x->lmr);
	if (x->f)
		dxl_fabric_delete(&x->f);
	dxlt_free_pages(x->lbuf, LLEN);
	if (x->peer)
		dxlt_peer_stop(&x->peer);
	for (int i = 0; i < MAX_EXTRA; i++)
		if (x->extra[i])
			dxlt_peer_stop(&x->extra[i]);
	free(x->shadow);
	if (x->tmpdir[0]) {
		char path[200];
		snprintf(path, sizeof(path), "%s/pmem0", x->tmpdir);
		unlink(path);
		rmdir(x->tmpdir);
	}
	free(x);
	dxlt_watchdog_disarm();
	return 0;
}

typedef void (*cfg_tweak)(struct dxl_fabric_cfg *cfg);

/* fx_open -- the test process's fabric, ctx 0 and local region */
static void fx_open(struct fx *x, cfg_tweak tweak)
{
	dxlt_fabric_cfg_from_env(&x->cfg);
	x->cfg.node_id = NODE_TEST;
	if (tweak)
		tweak(&x->cfg);
	int ret = dxl_fabric_new(&x->cfg, &x->f);
	if (ret == DXL_E_NODEV && !getenv("DXL_TEST_REQUIRE_DEVICE")) {
		/* STYLE: missing hardware skips with a reason, never passes */
		print_message("  SKIPPED: provider %s has no device here: %s "
			      "(set DXL_TEST_REQUIRE_DEVICE=1 to make this a "
			      "failure)\n",
			      dxl_fabric_provider_name(x->cfg.provider),
			      dxl_errmsg());
		skip();
	}
	CHECK(ret);
	assert_int_equal(dxl_fabric_provider(x->f), x->cfg.provider);
	assert_int_equal(dxl_fabric_node_id(x->f), NODE_TEST);
	CHECK(dxl_ctx_new(x->f, 0, &x->c));
	assert_int_equal(dxl_ctx_idx(x->c), 0);
	assert_ptr_equal(dxl_ctx_fabric(x->c), x->f);
	x->lbuf = dxlt_alloc_pages(LLEN);
	assert_non_null(x->lbuf);
	CHECK(dxl_mr_reg(x->f, x->lbuf, LLEN, DXL_MR_LOCAL_WRITE, &x->lmr));
	x->lkey = dxl_mr_lkey(x->lmr);
}

/* peer_cfg -- the cfg of a peer process: the test's, another node id */
static struct dxl_fabric_cfg peer_cfg(const struct fx *x, uint32_t node)
{
	struct dxl_fabric_cfg pc = x->cfg;
	pc.node_id = node;
	return pc;
}

/* fx_peer -- the target process: region 0 (RLEN, read/write/atomic, filled
 * with PEER_SEED) and a plain ctx 0 */
static void fx_peer(struct fx *x)
{
	struct dxl_fabric_cfg pc = peer_cfg(x, NODE_PEER);
	CHECK(dxlt_peer_start(&pc, &x->peer));
	assert_int_equal(dxlt_peer_node_id(x->peer), NODE_PEER);
	struct dxlt_region_opts o = {
		.len = RLEN,
		.access = DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE |
			  DXL_MR_REMOTE_ATOMIC,
		.fill = DXLT_FILL_PATTERN,
		.seed = PEER_SEED,
	};
	x->rreg = dxlt_peer_mr_reg(x->peer, &o, &x->rd);
	CHECK(x->rreg);
	assert_int_equal(x->rd.len, RLEN);
	assert_int_equal(x->rd.node, NODE_PEER);
	CHECK(dxlt_peer_ctx_new(x->peer, 0));
	x->shadow = malloc(RLEN);
	assert_non_null(x->shadow);
	dxlt_pattern_fill(x->shadow, RLEN, PEER_SEED, 0);
}

static struct dxl_qp *fx_connect_ctx(struct fx *x, uint32_t remote_ctx)
{
	struct dxl_qp *qp = NULL;
	CHECK(dxl_qp_connect(x->c, dxlt_peer_addr(x->peer), remote_ctx, &qp));
	assert_non_null(qp);
	assert_int_equal(dxl_qp_state(qp), DXL_QP_RTS);
	assert_int_equal(dxl_qp_is_passive(qp), 0);
	assert_int_equal(dxl_qp_remote_node(qp), NODE_PEER);
	return qp;
}

static void fx_std(struct fx *x, cfg_tweak tweak)
{
	fx_open(x, tweak);
	fx_peer(x);
	x->qp = fx_connect_ctx(x, 0);
}

static uint8_t *lsrc(struct fx *x, size_t off)
{
	return x->lbuf + off;
}

static uint8_t *ldst(struct fx *x, size_t off)
{
	return x->lbuf + LDST_OFF + off;
}

static uint64_t raddr(const struct fx *x, uint64_t off)
{
	return x->rd.addr + off;
}

/* expect_peer -- the peer's region bytes [off, off+len) equal the shadow */
static void expect_peer(struct fx *x, uint64_t off, size_t len)
{
	uint8_t *got = malloc(len);
	assert_non_null(got);
	CHECK(dxlt_peer_mr_read(x->peer, x->rreg, off, got, len));
	for (size_t i = 0; i < len; i++) {
		if (got[i] != x->shadow[off + i]) {
			uint8_t g = got[i], w = x->shadow[off + i];
			free(got);
			fail_msg("peer region byte %llu is 0x%02x, expected 0x%02x",
				 (unsigned long long)(off + i), g, w);
		}
	}
	free(got);
}

/* peer_u64 -- one word of the peer's region, by CPU */
static uint64_t peer_u64(struct fx *x, uint64_t off)
{
	uint64_t v = 0;
	CHECK(dxlt_peer_mr_read(x->peer, x->rreg, off, &v, 8));
	return v;
}

static void set_peer_u64(struct fx *x, uint64_t off, uint64_t v)
{
	CHECK(dxlt_peer_mr_write(x->peer, x->rreg, off, &v, 8));
	memcpy(x->shadow + off, &v, 8);
}

/* expect_no_wc -- nothing more to reap right now */
static void expect_no_wc(struct fx *x)
{
	struct dxl_wc wc;
	int n = dxl_ctx_poll(x->c, &wc, 1);
	if (n != 0)
		fail_msg("unexpected completion: n=%d wr_id=%#llx status=%s", n,
			 (unsigned long long)wc.wr_id,
			 n > 0 ? dxl_wc_status_str(wc.status) : dxl_errmsg());
}

/* wait_one -- the next completion; fails the test after DXL_TEST_WAIT_MS */
static struct dxl_wc wait_one(struct fx *x)
{
	struct dxl_wc wc;
	memset(&wc, 0, sizeof(wc));
	int n = dxlt_wait_wc(x->c, &wc, 1, -1);
	CHECK(n);
	if (n != 1)
		fail_msg("no completion within %d ms", dxlt_wait_ms());
	return wc;
}

static enum dxl_wc_opcode wc_op_of(enum dxl_wr_opcode op)
{
	switch (op) {
	case DXL_WR_READ: return DXL_WC_READ;
	case DXL_WR_WRITE: return DXL_WC_WRITE;
	case DXL_WR_CAS: return DXL_WC_CAS;
	case DXL_WR_FAA: return DXL_WC_FAA;
	case DXL_WR_SEND: return DXL_WC_SEND;
	}
	return DXL_WC_RECV;
}

/* ========================================================================== */
/* memory-region descriptors (local: no peer needed)                          */
/* ========================================================================== */

static void test_mr_desc_roundtrip(void **state)
{
	struct fx *x = *state;
	fx_open(x, NULL);
	struct dxl_mr_desc d, back;
	dxl_mr_desc(x->lmr, &d);
	assert_int_equal(d.addr, (uint64_t)(uintptr_t)x->lbuf);
	assert_int_equal(d.len, LLEN);
	assert_int_equal(d.node, NODE_TEST);
	assert_ptr_equal(dxl_mr_addr(x->lmr), x->lbuf);
	assert_int_equal(dxl_mr_len(x->lmr), LLEN);

	uint8_t wire[DXL_MR_DESC_WIRE_SIZE + 4];
	memset(wire, 0xee, sizeof(wire));
	assert_int_equal(dxl_mr_desc_encode(&d, wire, sizeof(wire)),
			 DXL_MR_DESC_WIRE_SIZE);
	assert_int_equal(wire[DXL_MR_DESC_WIRE_SIZE], 0xee); /* no overrun */
	CHECK(dxl_mr_desc_decode(wire, DXL_MR_DESC_WIRE_SIZE, &back));
	assert_int_equal(back.addr, d.addr);
	assert_int_equal(back.len, d.len);
	assert_int_equal(back.rkey, d.rkey);
	assert_int_equal(back.node, d.node);

	/* all-ones values survive (little-endian, no truncation) */
	struct dxl_mr_desc big = {.addr = 0xfedcba9876543210ull, .len = 0x10,
				  .rkey = 0xffffffffu, .node = 0x80000001u};
	assert_int_equal(dxl_mr_desc_encode(&big, wire, DXL_MR_DESC_WIRE_SIZE),
			 DXL_MR_DESC_WIRE_SIZE);
	CHECK(dxl_mr_desc_decode(wire, DXL_MR_DESC_WIRE_SIZE, &back));
	assert_int_equal(back.addr, big.addr);
	assert_int_equal(back.rkey, big.rkey);
	assert_int_equal(back.node, big.node);

	/* errors */
	CHECK_ERR(dxl_mr_desc_encode(&d, wire, DXL_MR_DESC_WIRE_SIZE - 1),
		  DXL_E_INVAL);
	CHECK_ERR(dxl_mr_desc_decode(wire, DXL_MR_DESC_WIRE_SIZE - 1, &back),
		  DXL_E_PROTO);
	wire[0] ^= 0x01; /* bad magic */
	CHECK_ERR(dxl_mr_desc_decode(wire, DXL_MR_DESC_WIRE_SIZE, &back),
		  DXL_E_PROTO);

	struct dxl_mr *mr = NULL;
	CHECK_ERR(dxl_mr_reg(x->f, x->lbuf, 0, DXL_MR_LOCAL_WRITE, &mr),
		  DXL_E_INVAL);
	CHECK_ERR(dxl_mr_reg(x->f, x->lbuf, 4096, 1u << 20, &mr), DXL_E_INVAL);
	assert_null(mr);
}

/* ========================================================================== */
/* READ / WRITE                                                               */
/* ========================================================================== */

static void test_read_write_sizes(void **state)
{
	struct fx *x = *state;
	fx_std(x, NULL);
	static const uint32_t odd[] = {3, 7, 13, 63, 65, 100, 1000, 4095, 4097,
				       65537, 99999, (1u << 20) - 1};
	uint32_t sizes[64];
	int n = 0;
	for (uint32_t s = 1; s <= (1u << 20); s <<= 1)
		sizes[n++] = s;
	for (size_t i = 0; i < DXL_ARRAY_SIZE(odd); i++)
		sizes[n++] = odd[i];

	for (int k = 0; k < n; k++) {
		uint32_t len = sizes[k];
		uint64_t off = 4096 + (uint64_t)(k * 37 % 4096); /* unaligned too */
		uint64_t seed = 1000 + (uint64_t)k;
		/* before: READ sees what the shadow says */
		memset(ldst(x, 0), 0xee, len + 1);
		CHECK_WC(dxlt_read(x->c, x->qp, ldst(x, 0), x->lkey,
				   raddr(x, off), x->rd.rkey, len), DXL_WC_SUCCESS);
		assert_memory_equal(ldst(x, 0), x->shadow + off, len);
		assert_int_equal(ldst(x, 0)[len], 0xee); /* no overrun */

		/* WRITE, then check at the target with 64 guard bytes each side */
		dxlt_pattern_fill(lsrc(x, 0), len, seed, 0);
		CHECK_WC(dxlt_write(x->c, x->qp, lsrc(x, 0), x->lkey,
				    raddr(x, off), x->rd.rkey, len), DXL_WC_SUCCESS);
		memcpy(x->shadow + off, lsrc(x, 0), len);
		expect_peer(x, off - 64, len + 128);

		/* and back via READ */
		memset(ldst(x, 0), 0, len + 1);
		CHECK_WC(dxlt_read(x->c, x->qp, ldst(x, 0), x->lkey,
				   raddr(x, off), x->rd.rkey, len), DXL_WC_SUCCESS);
		CHECK_PATTERN(ldst(x, 0), len, seed, 0);
		assert_int_equal(ldst(x, 0)[len], 0);
	}
	expect_no_wc(x);
}

static void test_inline_write(void **state)
{
	struct fx *x = *state;
	fx_std(x, NULL);
	uint32_t max_inline = dxl_fabric_cfg(x->f)->max_inline;
	if (max_inline == 0) {
		print_message("max_inline is 0: no inline writes to test\n");
		skip();
	}
	uint32_t lens[] = {1, 8, 13, max_inline / 2 ? max_inline / 2 : 1,
			   max_inline};
	const int slots = 16;
	const uint64_t base = 64 * 1024;
	for (size_t li = 0; li < DXL_ARRAY_SIZE(lens); li++) {
		uint32_t len = lens[li];
		uint8_t buf[1024]; /* not registered: inline needs no lkey */
		struct dxl_wr wr;
		for (int j = 0; j < slots; j++) {
			uint64_t seed = 7000 + li * 100 + (uint64_t)j;
			uint64_t off = base + (uint64_t)j * 1024;
			dxlt_pattern_fill(buf, len, seed, 0);
			memset(&wr, 0, sizeof(wr));
			wr.wr_id = (uint64_t)j;
			wr.op = DXL_WR_WRITE;
			wr.flags = DXL_WR_INLINE |
				   (j == slots - 1 ? DXL_WR_SIGNALED : 0);
			wr.local = buf;
			wr.len = len;
			wr.remote_addr = raddr(x, off);
			wr.rkey = x->rd.rkey;
			CHECK(dxl_qp_post(x->qp, &wr, NULL));
			/* the payload was copied at post: scribble over it now */
			memset(buf, 0xa5, sizeof(buf));
			memset(&wr, 0x5a, sizeof(wr));
			dxlt_pattern_fill(x->shadow + off, len, seed, 0);
		}
		struct dxl_wc wc = wait_one(x);
		CHECK_WC(wc.status, DXL_WC_SUCCESS);
		assert_int_equal(wc.wr_id, slots - 1);
		assert_int_equal(wc.opcode, DXL_WC_WRITE);
		assert_ptr_equal(wc.qp, x->qp);
		expect_no_wc(x);
		expect_peer(x, base - 64, (size_t)slots * 1024 + 64);
		/* READ back: the same bytes */
		CHECK_WC(dxlt_read(x->c, x->qp, ldst(x, 0), x->lkey,
				   raddr(x, base), x->rd.rkey, slots * 1024),
			 DXL_WC_SUCCESS);
		assert_memory_equal(ldst(x, 0), x->shadow + base, slots * 1024);
	}
}

/* ========================================================================== */
/* atomics                                                                    */
/* ========================================================================== */

static void test_cas_faa_values(void **state)
{
	struct fx *x = *state;
	fx_std(x, NULL);
	uint64_t *res = (uint64_t *)ldst(x, 0);
	const uint64_t w = 8192; /* the word under test */
	set_peer_u64(x, w, 100);

	*res = 0xdeadbeef;
	CHECK_WC(dxlt_cas(x->c, x->qp, res, x->lkey, raddr(x, w), x->rd.rkey,
			  100, 200), DXL_WC_SUCCESS);
	assert_int_equal(*res, 100); /* success: old == compare */
	assert_int_equal(peer_u64(x, w), 200);

	*res = 0xdeadbeef;
	CHECK_WC(dxlt_cas(x->c, x->qp, res, x->lkey, raddr(x, w), x->rd.rkey,
			  100, 300), DXL_WC_SUCCESS);
	assert_int_equal(*res, 200); /* failure: the current value */
	assert_int_equal(peer_u64(x, w), 200);

	*res = 0;
	CHECK_WC(dxlt_faa(x->c, x->qp, res, x->lkey, raddr(x, w), x->rd.rkey, 5),
		 DXL_WC_SUCCESS);
	assert_int_equal(*res, 200);
	assert_int_equal(peer_u64(x, w), 205);

	CHECK_WC(dxlt_faa(x->c, x->qp, res, x->lkey, raddr(x, w), x->rd.rkey,
			  (uint64_t)-5), DXL_WC_SUCCESS);
	assert_int_equal(*res, 205);
	assert_int_equal(peer_u64(x, w), 200);

	/* full 64-bit values, wrap-around */
	set_peer_u64(x, w, UINT64_MAX);
	CHECK_WC(dxlt_faa(x->c, x->qp, res, x->lkey, raddr(x, w), x->rd.rkey, 2),
		 DXL_WC_SUCCESS);
	assert_int_equal(*res, UINT64_MAX);
	assert_int_equal(peer_u64(x, w), 1);

	set_peer_u64(x, w, 0x8000000000000001ull);
	CHECK_WC(dxlt_cas(x->c, x->qp, res, x->lkey, raddr(x, w), x->rd.rkey,
			  0x0000000000000001ull, 7), DXL_WC_SUCCESS);
	assert_int_equal(*res, 0x8000000000000001ull); /* high bit compared */
	assert_int_equal(peer_u64(x, w), 0x8000000000000001ull);
	CHECK_WC(dxlt_cas(x->c, x->qp, res, x->lkey, raddr(x, w), x->rd.rkey,
			  0x8000000000000001ull, 0xfedcba9876543210ull),
		 DXL_WC_SUCCESS);
	assert_int_equal(*res, 0x8000000000000001ull);
	assert_int_equal(peer_u64(x, w), 0xfedcba9876543210ull);
	memcpy(x->shadow + w, &(uint64_t){0xfedcba9876543210ull}, 8);

	/* atomics touch exactly 8 bytes */
	expect_peer(x, w - 64, 136);
	/* the result buffer is exactly 8 bytes too */
	res[1] = 0x1111111111111111ull;
	CHECK_WC(dxlt_faa(x->c, x->qp, res, x->lkey, raddr(x, w), x->rd.rkey, 0),
		 DXL_WC_SUCCESS);
	assert_int_equal(res[1], 0x1111111111111111ull);
	expect_no_wc(x);
}

/* ---- 8-byte atomicity under concurrency ----------------------------------- */

struct atomic_args {
	char addr[DXL_FABRIC_ADDR_MAX];
	uint32_t remote_ctx;
	uint32_t rkey;
	uint64_t faa_addr, cas_addr;
	uint32_t n_faa, n_cas;
	uint32_t my_ctx;
};

/* atomic_client -- on its own ctx and QP: n_faa FAA(+1) on faa_addr (in
 * chains of 8), then n_cas successful CAS-increments of cas_addr. olds gets
 * every FAA's old value, then the old value of every successful CAS.
 * Runs in test threads and in a peer job: no cmocka here. */
static int atomic_client(struct dxl_fabric *f, const struct atomic_args *a,
			 uint64_t *olds, char *err, size_t errcap)
{
	struct dxl_ctx *c = NULL;
	struct dxl_qp *qp = NULL;
	struct dxl_mr *mr = NULL;
	const size_t blen = 4096;
	uint64_t *res = dxlt_alloc_pages(blen);
	int ret = res ? 0 : DXL_E_NOMEM;
	if (!ret)
		ret = dxl_ctx_new(f, a->my_ctx, &c);
	if (!ret)
		ret = dxl_mr_reg(f, res, blen, DXL_MR_LOCAL_WRITE, &mr);
	if (!ret)
		ret = dxl_qp_connect(c, a->addr, a->remote_ctx, &qp);
	for (uint32_t i = 0; !ret && i < a->n_faa; i += 8) {
		struct dxl_wr wr[8];
		uint32_t k = DXL_MIN(8u, a->n_faa - i);
		for (uint32_t j = 0; j < k; j++) {
			wr[j] = (struct dxl_wr){.wr_id = i + j, .op = DXL_WR_FAA,
						.flags = DXL_WR_SIGNALED,
						.local = &res[j], .len = 8,
						.lkey = dxl_mr_lkey(mr),
						.remote_addr = a->faa_addr,
						.rkey = a->rkey, .compare_add = 1,
						.next = j + 1 < k ? &wr[j + 1] : NULL};
		}
		ret = dxl_qp_post(qp, wr, NULL);
		struct dxl_wc wc[8];
		int n = ret ? 0 : dxlt_wait_wc(c, wc, (int)k, -1);
		if (!ret && n != (int)k)
			ret = n < 0 ? n : DXL_E_TIMEDOUT;
		for (int j = 0; !ret && j < n; j++) {
			if (wc[j].status != DXL_WC_SUCCESS ||
			    wc[j].wr_id != i + (uint64_t)j)
				ret = dxl_err_set(DXL_E_INTERNAL,
						  "FAA wr_id %llu: status %s (expected wr_id %u)",
						  (unsigned long long)wc[j].wr_id,
						  dxl_wc_status_str(wc[j].status),
						  i + j);
		}
		for (uint32_t j = 0; !ret && j < k; j++)
			olds[i + j] = res[j];
	}
	uint64_t guess = 0;
	for (uint32_t done = 0, tries = 0; !ret && done < a->n_cas; tries++) {
		if (tries > 1000000u) {
			ret = dxl_err_set(DXL_E_INTERNAL, "CAS loop does not progress");
			break;
		}
		int st = dxlt_cas(c, qp, &res[0], dxl_mr_lkey(mr), a->cas_addr,
				  a->rkey, guess, guess + 1);
		if (st != DXL_WC_SUCCESS) {
			ret = st < 0 ? st
				     : dxl_err_set(DXL_E_INTERNAL, "CAS status %s",
						   dxl_wc_status_str((enum dxl_wc_status)st));
			break;
		}
		if (res[0] == guess) {
			olds[a->n_faa + done++] = guess;
			guess++;
		} else {
			guess = res[0];
		}
	}
	if (ret)
		snprintf(err, errcap, "client ctx %u: %s: %s", a->my_ctx,
			 dxl_errname(ret), dxl_errmsg());
	if (qp)
		dxl_qp_delete(&qp);
	if (c)
		dxl_ctx_delete(&c);
	if (mr)
		dxl_mr_dereg(&mr);
	dxlt_free_pages(res, blen);
	return ret;
}

/* the same client in a peer process (job "atomic_client") */
static int job_atomic_client(struct dxlt_peer_self *s, const void *arg,
			     size_t arg_len, void **out, size_t *out_len)
{
	struct atomic_args a;
	if (arg_len != sizeof(a))
		return DXL_E_PROTO;
	memcpy(&a, arg, sizeof(a));
	size_t n = (size_t)a.n_faa + a.n_cas;
	uint64_t *olds = calloc(n ? n : 1, 8);
	char err[512] = "";
	if (!olds)
		return DXL_E_NOMEM;
	int ret = atomic_client(dxlt_self_fabric(s), &a, olds, err, sizeof(err));
	if (ret) {
		free(olds);
		*out = strdup(err);
		*out_len = *out ? strlen(err) + 1 : 0;
		return ret;
	}
	*out = olds;
	*out_len = n * 8;
	return 0;
}

struct client_thread {
	pthread_t th;
	struct dxl_fabric *f;
	struct atomic_args a;
	uint64_t *olds;
	int rc;
	char err[512];
};

static void *client_thread_main(void *arg)
{
	struct client_thread *t = arg;
	t->rc = atomic_client(t->f, &t->a, t->olds, t->err, sizeof(t->err));
	return NULL;
}

/* every value in [0, n) exactly once */
static void expect_permutation(const uint64_t *v, size_t n, const char *what)
{
	uint8_t *seen = calloc(n ? n : 1, 1);
	assert_non_null(seen);
	for (size_t i = 0; i < n; i++) {
		if (v[i] >= n || seen[v[i]]) {
			uint64_t bad = v[i];
			free(seen);
			fail_msg("%s: old value %llu %s (entry %zu of %zu)", what,
				 (unsigned long long)bad,
				 bad >= n ? "out of range" : "seen twice", i, n);
		}
		seen[v[i]] = 1;
	}
	free(seen);
}

static void test_atomic_concurrency(void **state)
{
	struct fx *x = *state;
	fx_std(x, NULL);
	enum { THREADS = 3, N_FAA = 600, N_CAS = 150, CLIENTS = THREADS + 1 };
	const uint64_t faa_off = 16384, cas_off = 16384 + 64;
	set_peer_u64(x, faa_off, 0);
	set_peer_u64(x, cas_off, 0);
	struct atomic_args a = {.remote_ctx = 0, .rkey = x->rd.rkey,
				.faa_addr = raddr(x, faa_off),
				.cas_addr = raddr(x, cas_off),
				.n_faa = N_FAA, .n_cas = N_CAS};
	snprintf(a.addr, sizeof(a.addr), "%s", dxlt_peer_addr(x->peer));

	/* the second client process */
	struct dxl_fabric_cfg pc = peer_cfg(x, NODE_PEER + 1);
	CHECK(dxlt_peer_start(&pc, &x->extra[0]));
	a.my_ctx = 0;
	CHECK(dxlt_peer_job_start(x->extra[0], "atomic_client", &a, sizeof(a)));

	struct client_thread t[THREADS];
	uint64_t *all = calloc((size_t)CLIENTS * (N_FAA + N_CAS), 8);
	assert_non_null(all);
	for (int i = 0; i < THREADS; i++) {
		memset(&t[i], 0, sizeof(t[i]));
		t[i].f = x->f;
		t[i].a = a;
		t[i].a.my_ctx = 1 + (uint32_t)i;
		t[i].olds = all + (size_t)(1 + i) * (N_FAA + N_CAS);
		assert_int_equal(pthread_create(&t[i].th, NULL,
						client_thread_main, &t[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i].th, NULL);
	int job_rc = 0;
	void *out = NULL;
	size_t out_len = 0;
	CHECK(dxlt_peer_job_wait(x->extra[0], &job_rc, &out, &out_len));
	for (int i = 0; i < THREADS; i++)
		if (t[i].rc)
			fail_msg("thread %d: %s", i, t[i].err);
	if (job_rc) {
		char msg[512];
		snprintf(msg, sizeof(msg), "%.*s", (int)out_len,
			 out ? (char *)out : "");
		free(out);
		free(all);
		fail_msg("client process: %d %s: %s", job_rc,
			 dxl_errname(job_rc), msg);
	}
	assert_int_equal(out_len, (size_t)(N_FAA + N_CAS) * 8);
	memcpy(all, out, out_len);
	free(out);

	/* totals conserved exactly */
	assert_int_equal(peer_u64(x, faa_off), (uint64_t)CLIENTS * N_FAA);
	assert_int_equal(peer_u64(x, cas_off), (uint64_t)CLIENTS * N_CAS);
	/* and every FAA / successful CAS saw a distinct old value */
	uint64_t *faa = calloc((size_t)CLIENTS * N_FAA, 8);
	uint64_t *cas = calloc((size_t)CLIENTS * N_CAS, 8);
	assert_non_null(faa);
	assert_non_null(cas);
	for (int c = 0; c < CLIENTS; c++) {
		memcpy(faa + (size_t)c * N_FAA, all + (size_t)c * (N_FAA + N_CAS),
		       (size_t)N_FAA * 8);
		memcpy(cas + (size_t)c * N_CAS,
		       all + (size_t)c * (N_FAA + N_CAS) + N_FAA, (size_t)N_CAS * 8);
		/* one client's FAAs on one QP execute in order */
		for (int i = 1; i < N_FAA; i++)
			assert_true(faa[(size_t)c * N_FAA + i] >
				    faa[(size_t)c * N_FAA + i - 1]);
	}
	free(all);
	expect_permutation(faa, (size_t)CLIENTS * N_FAA, "FAA");
	expect_permutation(cas, (size_t)CLIENTS * N_CAS, "CAS");
	free(faa);
	free(cas);
	/* neighbours untouched */
	memcpy(x->shadow + faa_off, &(uint64_t){(uint64_t)CLIENTS * N_FAA}, 8);
	memcpy(x->shadow + cas_off, &(uint64_t){(uint64_t)CLIENTS * N_CAS}, 8);
	expect_peer(x, faa_off - 64, 256);
}

/* ========================================================================== */
/* ordering                                                                   */
/* ========================================================================== */

static void test_order_write_then_read(void **state)
{
	struct fx *x = *state;
	fx_std(x, NULL);
	const uint64_t off = 32768;
	for (int i = 0; i < 200; i++) {
		uint32_t len = 8u << (i % 10); /* 8 B .. 4 KiB */
		uint64_t seed = 50000 + (uint64_t)i;
		dxlt_pattern_fill(lsrc(x, 0), len, seed, 0);
		memset(ldst(x, 0), 0, len);
		struct dxl_wr rd = {.wr_id = 2, .op = DXL_WR_READ,
				    .flags = DXL_WR_SIGNALED, .local = ldst(x, 0),
				    .len = len, .lkey = x->lkey,
				    .remote_addr = raddr(x, off), .rkey = x->rd.rkey};
		struct dxl_wr wr = {.wr_id = 1, .op = DXL_WR_WRITE,
				    .local = lsrc(x, 0), .len = len,
				    .lkey = x->lkey, .remote_addr = raddr(x, off),
				    .rkey = x->rd.rkey};
		if (i % 2) { /* one doorbell */
			wr.next = &rd;
			CHECK(dxl_qp_post(x->qp, &wr, NULL));
		} else { /* two posts, no wait in between */
			CHECK(dxl_qp_post(x->qp, &wr, NULL));
			CHECK(dxl_qp_post(x->qp, &rd, NULL));
		}
		struct dxl_wc wc = wait_one(x);
		CHECK_WC(wc.status, DXL_WC_SUCCESS);
		assert_int_equal(wc.wr_id, 2);
		CHECK_PATTERN(ldst(x, 0), len, seed, 0);
	}
	memcpy(x->shadow + off, lsrc(x, 0), 4096);
	expect_no_wc(x);

	/* WRITE(x=1) WRITE(x=2) READ -> 2, also with a big first write */
	for (int i = 0; i < 50; i++) {
		uint64_t *v = (uint64_t *)lsrc(x, 0);
		uint32_t big = i % 2 ? 65536 : 8;
		dxlt_pattern_fill(v, big, 60000 + (uint64_t)i, 0);
		v[0] = 1;
		uint64_t *two = (uint64_t *)lsrc(x, 1 << 20);
		*two = 2 + (uint64_t)i;
		uint64_t *got = (uint64_t *)ldst(x, 0);
		memset(got, 0, big);
		struct dxl_wr r = {.wr_id = 3, .op = DXL_WR_READ,
				   .flags = DXL_WR_SIGNALED, .local = got,
				   .len = big, .lkey = x->lkey,
				   .remote_addr = raddr(x, off), .rkey = x->rd.rkey};
		struct dxl_wr w2 = {.wr_id = 2, .op = DXL_WR_WRITE, .local = two,
				    .len = 8, .lkey = x->lkey,
				    .remote_addr = raddr(x, off),
				    .rkey = x->rd.rkey, .next = &r};
		struct dxl_wr w1 = {.wr_id = 1, .op = DXL_WR_WRITE, .local = v,
				    .len = big, .lkey = x->lkey,
				    .remote_addr = raddr(x, off),
				    .rkey = x->rd.rkey, .next = &w2};
		CHECK(dxl_qp_post(x->qp, &w1, NULL));
		struct dxl_wc wc = wait_one(x);
		CHECK_WC(wc.status, DXL_WC_SUCCESS);
		assert_int_equal(wc.wr_id, 3);
		assert_int_equal(got[0], 2 + (uint64_t)i);
		if (big > 8)
			assert_memory_equal(got + 1, v + 1, big - 8);
		memcpy(x->shadow + off, v, big);
		memcpy(x->shadow + off, two, 8);
	}
	expect_peer(x, off, 65536);
}

static void test_order_atomic_then_read(void **state)
{
	struct fx *x = *state;
	fx_std(x, NULL);
	const uint64_t w = 40960;
	set_peer_u64(x, w, 0);
	uint64_t *res = (uint64_t *)ldst(x, 0);
	uint64_t *got = (uint64_t *)ldst(x, 64);
	uint64_t expect = 0;
	for (int i = 0; i < 100; i++) {
		*res = 0xdead;
		*got = 0xdead;
		struct dxl_wr r = {.wr_id = 2, .op = DXL_WR_READ,
				   .flags = DXL_WR_SIGNALED, .local = got,
				   .len = 8, .lkey = x->lkey,
				   .remote_addr = raddr(x, w), .rkey = x->rd.rkey};
		struct dxl_wr at = {.wr_id = 1, .local = res, .len = 8,
				    .lkey = x->lkey, .remote_addr = raddr(x, w),
				    .rkey = x->rd.rkey};
		uint64_t before = expect;
		if (i % 2) {
			at.op = DXL_WR_FAA;
			at.compare_add = 3;
			expect += 3;
		} else {
			at.op = DXL_WR_CAS;
			at.compare_add = expect;
			at.swap = expect * 2 + 1;
			expect = expect * 2 + 1;
		}
		if (i % 4 < 2) { /* one chain */
			at.next = &r;
			CHECK(dxl_qp_post(x->qp, &at, NULL));
		} else {
			CHECK(dxl_qp_post(x->qp, &at, NULL));
			CHECK(dxl_qp_post(x->qp, &r, NULL));
		}
		struct dxl_wc wc = wait_one(x);
		CHECK_WC(wc.status, DXL_WC_SUCCESS);
		assert_int_equal(wc.wr_id, 2);
		assert_int_equal(*res, before); /* the atomic's old value */
		assert_int_equal(*got, expect); /* the READ sees its result */
	}
	assert_int_equal(peer_u64(x, w), expect);
	expect_no_wc(x);
}

static void test_order_completions(void **state)
{
	struct fx *x = *state;
	fx_std(x, NULL);
	const uint64_t total = 2000;
	const uint64_t window = dxl_fabric_cfg(x->f)->sq_depth / 2;
	uint64_t posted = 0, done = 0;
	uint64_t cnt = 0; /* shadow of the FAA word */
	const uint64_t w = 512 * 1024;
	set_peer_u64(x, w, 0);
	struct dxl_wr wr[16];
	uint64_t deadline = dxl_now_ms() + 3u * (uint64_t)dxlt_wait_ms();
	enum dxl_wr_opcode ops[4096];
	while (done < total) {
		uint64_t room = DXL_MIN(window - (posted - done), total - posted);
		uint64_t k = DXL_MIN(room, 1 + posted % 16);
		if (k > 0) {
			for (uint64_t j = 0; j < k; j++) {
				uint64_t id = posted + j;
				memset(&wr[j], 0, sizeof(wr[j]));
				wr[j].wr_id = id;
				wr[j].flags = DXL_WR_SIGNALED;
				wr[j].lkey = x->lkey;
				wr[j].rkey = x->rd.rkey;
				wr[j].op = (enum dxl_wr_opcode)((id * 7) % 4);
				ops[id % 4096] = wr[j].op;
				size_t slot = (size_t)(id % 256) * 4096;
				switch (wr[j].op) {
				case DXL_WR_READ:
				case DXL_WR_WRITE:
					wr[j].len = 8u << (id % 10);
					wr[j].local = wr[j].op == DXL_WR_READ
							      ? ldst(x, slot)
							      : lsrc(x, slot);
					wr[j].remote_addr = raddr(x, slot);
					break;
				case DXL_WR_CAS:
					wr[j].len = 8;
					wr[j].local = ldst(x, (1 << 20) + slot);
					wr[j].remote_addr = raddr(x, w + 8);
					wr[j].compare_add = 1;
					wr[j].swap = 1;
					break;
				default:
					wr[j].len = 8;
					wr[j].local = ldst(x, (1 << 20) + slot);
					wr[j].remote_addr = raddr(x, w);
					wr[j].compare_add = 1;
					cnt++;
				}
				wr[j].next = j + 1 < k ? &wr[j + 1] : NULL;
			}
			int r = dxl_qp_post(x->qp, wr, NULL);
			if (r == DXL_E_AGAIN) {
				for (uint64_t j = 0; j < k; j++)
					if (wr[j].op == DXL_WR_FAA)
						cnt--;
			} else {
				CHECK(r);
				posted += k;
			}
		}
		struct dxl_wc wc[32];
		int n = dxl_ctx_poll(x->c, wc, 32);
		CHECK(n);
		for (int i = 0; i < n; i++) {
			if (wc[i].wr_id != done)
				fail_msg("completion of wr_id %llu, expected %llu "
					 "(posting order)",
					 (unsigned long long)wc[i].wr_id,
					 (unsigned long long)done);
			CHECK_WC(wc[i].status, DXL_WC_SUCCESS);
			assert_int_equal(wc[i].opcode, wc_op_of(ops[done % 4096]));
			assert_ptr_equal(wc[i].qp, x->qp);
			done++;
		}
		if (n == 0 && k == 0)
			dxl_ctx_wait(x->c, 100);
		if (dxl_now_ms() > deadline)
			fail_msg("only %llu of %llu completions",
				 (unsigned long long)done,
				 (unsigned long long)total);
	}
	assert_int_equal(peer_u64(x, w), cnt);
	expect_no_wc(x);
}

/* ========================================================================== */
/* doorbell chains and selective signalling                                   */
/* ========================================================================== */

static void test_doorbell_chains(void **state)
{
	struct fx *x = *state;
	fx_std(x, NULL);
	const uint64_t area = 128 * 1024; /* slots of 512 B */
	const uint64_t ctr = 8192;        /* FAA counter */
	set_peer_u64(x, ctr, 0);
	uint64_t cnt = 0;
	struct dxl_wr wr[64];
	for (int n = 1; n <= 64; n++) {
		uint64_t faa_expect[64] = {0}, cas_expect[64] = {0};
		memset(ldst(x, 0), 0xcc, 64 * 512);
		for (int i = 0; i < n; i++) {
			struct dxl_wr *r = &wr[i];
			memset(r, 0, sizeof(*r));
			r->wr_id = (uint64_t)n * 100 + (uint64_t)i;
			r->lkey = x->lkey;
			r->rkey = x->rd.rkey;
			uint64_t slot = area + (uint64_t)i * 512;
			uint64_t seed = (uint64_t)n * 1000 + (uint64_t)i;
			switch (i % 4) {
			case 0: /* WRITE a pattern into slot i */
			case 2:
				r->op = DXL_WR_WRITE;
				r->len = 1 + (uint32_t)((n * 31 + i * 17) % 512);
				r->local = lsrc(x, (size_t)i * 512);
				dxlt_pattern_fill(r->local, r->len, seed, 0);
				r->remote_addr = raddr(x, slot);
				memcpy(x->shadow + slot, r->local, r->len);
				break;
			case 1: /* FAA the counter */
				r->op = DXL_WR_FAA;
				r->len = 8;
				r->local = ldst(x, (size_t)i * 512);
				r->remote_addr = raddr(x, ctr);
				r->compare_add = 1;
				faa_expect[i] = cnt++;
				break;
			case 3: /* CAS a word of slot i, then READ slot i-1's word */
				r->op = i % 8 == 3 ? DXL_WR_CAS : DXL_WR_READ;
				r->len = i % 8 == 3 ? 8 : 512;
				r->local = ldst(x, (size_t)i * 512);
				if (r->op == DXL_WR_CAS) {
					uint64_t cur;
					memcpy(&cur, x->shadow + slot, 8);
					r->remote_addr = raddr(x, slot);
					r->compare_add = cur;
					r->swap = seed;
					cas_expect[i] = cur;
					memcpy(x->shadow + slot, &seed, 8);
				} else { /* read-after-write inside the chain */
					r->remote_addr = raddr(x, slot - 512);
				}
				break;
			}
			wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		}
		wr[n - 1].flags = DXL_WR_SIGNALED;
		/* shadow copies of READs are taken at completion below */
		CHECK(dxl_qp_post(x->qp, wr, NULL));
		struct dxl_wc wc = wait_one(x);
		CHECK_WC(wc.status, DXL_WC_SUCCESS);
		assert_int_equal(wc.wr_id, (uint64_t)n * 100 + (uint64_t)(n - 1));
		assert_int_equal(wc.opcode, wc_op_of(wr[n - 1].op));
		expect_no_wc(x);
		for (int i = 0; i < n; i++) {
			uint64_t got;
			switch (wr[i].op) {
			case DXL_WR_FAA:
				memcpy(&got, wr[i].local, 8);
				assert_int_equal(got, faa_expect[i]);
				break;
			case DXL_WR_CAS:
				memcpy(&got, wr[i].local, 8);
				assert_int_equal(got, cas_expect[i]);
				break;
			case DXL_WR_READ: /* slot i-1: its FAA-free neighbour */
				assert_memory_equal(
					wr[i].local,
					x->shadow + (wr[i].remote_addr - x->rd.addr),
					512);
				break;
			default:
				break;
			}
		}
	}
	memcpy(x->shadow + ctr, &cnt, 8);
	expect_peer(x, area, 64 * 512);
	assert_int_equal(peer_u64(x, ctr), cnt);
}

static void unsignalled_flood(struct fx *x)
{
	const uint32_t sq = dxl_fabric_cfg(x->f)->sq_depth;
	const uint32_t total = 10 * sq;
	const uint64_t area = 256 * 1024; /* 128 slots of 64 B */
	uint64_t agains = 0, polls = 0;
	uint64_t deadline = dxl_now_ms() + 3u * (uint64_t)dxlt_wait_ms();
	for (uint32_t i = 0; i < total; i++) {
		/* every request its own source: nothing is reused */
		uint8_t *src = lsrc(x, (size_t)i * 64);
		uint64_t off = area + (uint64_t)(i % 128) * 64;
		dxlt_pattern_fill(src, 64, 90000 + i, 0);
		struct dxl_wr wr = {.wr_id = i, .op = DXL_WR_WRITE, .local = src,
				    .len = 64, .lkey = x->lkey,
				    .remote_addr = raddr(x, off),
				    .rkey = x->rd.rkey};
		for (;;) {
			int r = dxl_qp_post(x->qp, &wr, NULL);
			if (r == 0)
				break;
			if (r != DXL_E_AGAIN)
				fail_msg("post %u of %u unsignalled WRITEs: %s: %s",
					 i, total, dxl_errname(r), dxl_errmsg());
			agains++;
			struct dxl_wc wc;
			int n = dxl_ctx_poll(x->c, &wc, 1);
			polls++;
			if (n != 0)
				fail_msg("unexpected completion (n=%d, wr_id %llu, %s) "
					 "with only unsignalled requests posted", n,
					 (unsigned long long)wc.wr_id,
					 n > 0 ? dxl_wc_status_str(wc.status) : "");
			if (dxl_now_ms() > deadline)
				fail_msg("send queue stays full (post %u)", i);
			dxl_ctx_wait(x->c, 1);
		}
		memcpy(x->shadow + off, src, 64);
		if (i % 97 == 96) { /* occasional polling */
			expect_no_wc(x);
			polls++;
		}
	}
	/* one signalled READ: all the WRITEs are placed before it */
	struct dxl_wr rd = {.wr_id = 0xf100d, .op = DXL_WR_READ,
			    .flags = DXL_WR_SIGNALED, .local = ldst(x, 0),
			    .len = 128 * 64, .lkey = x->lkey,
			    .remote_addr = raddr(x, area), .rkey = x->rd.rkey};
	int r;
	while ((r = dxl_qp_post(x->qp, &rd, NULL)) == DXL_E_AGAIN) {
		expect_no_wc(x);
		if (dxl_now_ms() > deadline)
			fail_msg("send queue stays full at the final READ");
		dxl_ctx_wait(x->c, 1);
	}
	CHECK(r);
	struct dxl_wc wc = wait_one(x);
	CHECK_WC(wc.status, DXL_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 0xf100d);
	assert_memory_equal(ldst(x, 0), x->shadow + area, 128 * 64);
	expect_no_wc(x);
	expect_peer(x, area, 128 * 64);
	print_message("  sq_depth %u: %u unsignalled WRITEs, %llu x DXL_E_AGAIN\n",
		      sq, total, (unsigned long long)agains);
}

static void tweak_sq16(struct dxl_fabric_cfg *cfg)
{
	cfg->sq_depth = 16;
}

static void test_unsignalled_flood_sq16(void **state)
{
	struct fx *x = *state;
	fx_std(x, tweak_sq16);
	unsignalled_flood(x);
}

static void test_unsignalled_flood_default(void **state)
{
	struct fx *x = *state;
	fx_std(x, NULL);
	unsignalled_flood(x);
}

/* ========================================================================== */
/* remote access errors                                                       */
/* ========================================================================== */

struct err_fx {
	int ro, wo, rw; /* peer regions: READ only, WRITE only, no ATOMIC */
	struct dxl_mr_desc ro_d, wo_d, rw_d;
};

static void err_setup(struct fx *x, struct err_fx *e)
{
	fx_std(x, NULL);
	struct dxlt_region_opts o = {.len = 64 * 1024, .fill = DXLT_FILL_PATTERN};
	o.access = DXL_MR_REMOTE_READ;
	o.seed = 11;
	e->ro = dxlt_peer_mr_reg(x->peer, &o, &e->ro_d);
	CHECK(e->ro);
	o.access = DXL_MR_REMOTE_WRITE;
	o.seed = 12;
	e->wo = dxlt_peer_mr_reg(x->peer, &o, &e->wo_d);
	CHECK(e->wo);
	o.access = DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE;
	o.seed = 13;
	e->rw = dxlt_peer_mr_reg(x->peer, &o, &e->rw_d);
	CHECK(e->rw);
}

/* the target's bytes of a region, to compare before/after */
static uint8_t *snap(struct fx *x, int region, uint64_t off, size_t len)
{
	uint8_t *b = malloc(len);
	assert_non_null(b);
	CHECK(dxlt_peer_mr_read(x->peer, region, off, b, len));
	return b;
}

static void expect_snap(struct fx *x, int region, uint64_t off, size_t len,
			uint8_t *before)
{
	uint8_t *now = snap(x, region, off, len);
	int diff = memcmp(now, before, len);
	free(now);
	free(before);
	if (diff)
		fail_msg("a failed request changed peer region %d [%llu, +%zu)",
			 region, (unsigned long long)off, len);
}

/* the target still serves: WRITE + READ on qp, data checked at the target */
static void expect_serving(struct fx *x, struct dxl_qp *qp, uint64_t seed)
{
	const uint64_t off = 1u << 20;
	dxlt_pattern_fill(lsrc(x, 0), 256, seed, 0);
	CHECK_WC(dxlt_write(x->c, qp, lsrc(x, 0), x->lkey, raddr(x, off),
			    x->rd.rkey, 256), DXL_WC_SUCCESS);
	memset(ldst(x, 0), 0, 256);
	CHECK_WC(dxlt_read(x->c, qp, ldst(x, 0), x->lkey, raddr(x, off),
			   x->rd.rkey, 256), DXL_WC_SUCCESS);
	CHECK_PATTERN(ldst(x, 0), 256, seed, 0);
	memcpy(x->shadow + off, lsrc(x, 0), 256);
	expect_peer(x, off, 256);
}

/*
 * access_case -- post `bad` on a fresh QP, signalled or not, followed by a
 * signalled WRITE to a sentinel. Expect: REM_ACCESS_ERR for bad, FLUSHED
 * for the WRITE (which must not execute), QP in DXL_QP_ERR, DXL_E_STATE on
 * later posts, [chk_off, +chk_len) of region chk unchanged, and the target
 * serving the old QP and a new one.
 */
static void access_case(struct fx *x, const char *what, struct dxl_wr bad,
			int chk, uint64_t chk_off, size_t chk_len, bool signalled)
{
	print_message("  %s (%s)\n", what, signalled ? "signalled" : "unsignalled");
	static uint64_t serial;
	serial++;
	struct dxl_qp *qp = fx_connect_ctx(x, 0);
	const uint64_t sent = 1536 * 1024;
	uint8_t *before = snap(x, chk, chk_off, chk_len);
	uint64_t sentinel_before = peer_u64(x, sent);

	bad.wr_id = 0xbad0;
	bad.flags = signalled ? DXL_WR_SIGNALED : 0;
	bad.next = NULL;
	if (bad.op == DXL_WR_CAS || bad.op == DXL_WR_FAA) {
		bad.local = ldst(x, 4096);
		*(uint64_t *)bad.local = 0x5eed5eed;
	} else {
		bad.local = bad.op == DXL_WR_READ ? ldst(x, 4096) : lsrc(x, 4096);
		if (bad.op == DXL_WR_WRITE)
			memset(bad.local, 0x77, bad.len);
		else
			memset(bad.local, 0x99, bad.len);
	}
	bad.lkey = x->lkey;
	uint64_t *val = (uint64_t *)lsrc(x, 8192);
	*val = 0x1122334455667788ull ^ serial;
	struct dxl_wr follow = {.wr_id = 0x600d, .op = DXL_WR_WRITE,
				.flags = DXL_WR_SIGNALED, .local = val, .len = 8,
				.lkey = x->lkey, .remote_addr = raddr(x, sent),
				.rkey = x->rd.rkey};
	int expect = 2;
	if (signalled) {
		/* two posts, the second one later: it reaches the target after
		 * the failure (widens the window; correctness does not depend
		 * on the delay). Posting may already see the error state. */
		CHECK(dxl_qp_post(qp, &bad, NULL));
		usleep(20000);
		int r = dxl_qp_post(qp, &follow, NULL);
		if (r == DXL_E_STATE)
			expect = 1;
		else
			CHECK(r);
	} else { /* one chain */
		bad.next = &follow;
		CHECK(dxl_qp_post(qp, &bad, NULL));
	}
	struct dxl_wc wc[2];
	int n = dxlt_wait_wc(x->c, wc, expect, -1);
	CHECK(n);
	if (n < 1)
		fail_msg("%s: no completion for the bad request", what);
	assert_int_equal(wc[0].wr_id, 0xbad0);
	CHECK_WC(wc[0].status, DXL_WC_REM_ACCESS_ERR);
	assert_int_equal(wc[0].opcode, wc_op_of(bad.op));
	assert_ptr_equal(wc[0].qp, qp);
	if (n < expect)
		fail_msg("%s: no completion for the WRITE after the bad request", what);
	if (expect == 2) {
		assert_int_equal(wc[1].wr_id, 0x600d);
		CHECK_WC(wc[1].status, DXL_WC_FLUSHED);
	}
	expect_no_wc(x);

	assert_int_equal(dxl_qp_state(qp), DXL_QP_ERR);
	struct dxl_wr again = follow;
	again.next = NULL;
	CHECK_ERR(dxl_qp_post(qp, &again, NULL), DXL_E_STATE);
	/* nothing changed at the target, the flushed WRITE did not run */
	expect_snap(x, chk, chk_off, chk_len, before);
	assert_int_equal(peer_u64(x, sent), sentinel_before);
	/* a failed READ/atomic must not have filled the local buffer either */
	if (bad.op == DXL_WR_CAS || bad.op == DXL_WR_FAA)
		assert_int_equal(*(uint64_t *)bad.local, 0x5eed5eed);
	dxl_qp_delete(&qp);
	assert_null(qp);

	/* the target serves an older QP and a new one */
	expect_serving(x, x->qp, 0x5e7 + serial);
	struct dxl_qp *qp2 = fx_connect_ctx(x, 0);
	expect_serving(x, qp2, 0x5e8 + serial);
	dxl_qp_delete(&qp2);
}

static void both(struct fx *x, const char *what, struct dxl_wr bad, int chk,
		 uint64_t chk_off, size_t chk_len)
{
	access_case(x, what, bad, chk, chk_off, chk_len, false);
	access_case(x, what, bad, chk, chk_off, chk_len, true);
}

static uint32_t bad_rkey(const struct fx *x, const struct err_fx *e)
{
	uint32_t k = x->rd.rkey ^ 0x5a5a5a5au;
	while (k == x->rd.rkey || k == e->ro_d.rkey || k == e->wo_d.rkey ||
	       k == e->rw_d.rkey)
		k = k * 2654435761u + 1;
	return k;
}

static void test_err_bad_rkey(void **state)
{
	struct fx *x = *state;
	struct err_fx e;
	err_setup(x, &e);
	struct dxl_wr w = {.op = DXL_WR_WRITE, .len = 64,
			   .remote_addr = raddr(x, 4096), .rkey = bad_rkey(x, &e)};
	both(x, "WRITE with a bad rkey", w, x->rreg, 4096, 64);
	w.op = DXL_WR_READ;
	both(x, "READ with a bad rkey", w, x->rreg, 4096, 64);
	w.op = DXL_WR_FAA;
	w.len = 8;
	w.compare_add = 1;
	both(x, "FAA with a bad rkey", w, x->rreg, 4096, 64);
}

static void test_err_out_of_bounds_end(void **state)
{
	struct fx *x = *state;
	struct err_fx e;
	err_setup(x, &e);
	struct dxl_wr w = {.op = DXL_WR_WRITE, .len = 16,
			   .remote_addr = raddr(x, RLEN - 8), .rkey = x->rd.rkey};
	both(x, "WRITE across the end", w, x->rreg, RLEN - 64, 64);
	w.op = DXL_WR_READ;
	both(x, "READ across the end", w, x->rreg, RLEN - 64, 64);
	w.remote_addr = raddr(x, RLEN);
	w.len = 1;
	both(x, "READ of the byte after the end", w, x->rreg, RLEN - 64, 64);
	w.op = DXL_WR_CAS;
	w.len = 8;
	w.remote_addr = raddr(x, RLEN);
	both(x, "CAS just after the end", w, x->rreg, RLEN - 64, 64);
}

static void test_err_below_start(void **state)
{
	struct fx *x = *state;
	struct err_fx e;
	err_setup(x, &e);
	struct dxl_wr w = {.op = DXL_WR_WRITE, .len = 16,
			   .remote_addr = x->rd.addr - 8, .rkey = x->rd.rkey};
	both(x, "WRITE across the start", w, x->rreg, 0, 64);
	w.op = DXL_WR_READ;
	both(x, "READ across the start", w, x->rreg, 0, 64);
	/* entirely below, possibly inside another region of the peer: that
	 * region must stay unchanged too */
	w.op = DXL_WR_WRITE;
	w.len = 64;
	w.remote_addr = x->rd.addr - 4096;
	both(x, "WRITE 4 KiB below the start", w, e.ro, 0, 64 * 1024);
	w.remote_addr = e.ro_d.addr;
	both(x, "WRITE into another region with this rkey", w, e.ro, 0, 64 * 1024);
}

static void test_err_address_wrap(void **state)
{
	struct fx *x = *state;
	struct err_fx e;
	err_setup(x, &e);
	struct dxl_wr w = {.op = DXL_WR_READ, .len = 16,
			   .remote_addr = UINT64_MAX - 7, .rkey = x->rd.rkey};
	both(x, "READ wrapping the address space", w, x->rreg, 0, 64);
	w.op = DXL_WR_WRITE;
	w.remote_addr = UINT64_MAX - 7;
	both(x, "WRITE wrapping the address space", w, x->rreg, 0, 64);
}

static void test_err_misaligned_atomic(void **state)
{
	struct fx *x = *state;
	struct err_fx e;
	err_setup(x, &e);
	const uint64_t off = 8192 + 4;
	uint64_t cur;
	memcpy(&cur, x->shadow + off, 8); /* so that a wrongly executed CAS
					     would change the memory */
	struct dxl_wr w = {.op = DXL_WR_CAS, .len = 8,
			   .remote_addr = raddr(x, off), .rkey = x->rd.rkey,
			   .compare_add = cur, .swap = ~cur};
	both(x, "CAS at addr % 8 == 4", w, x->rreg, 8192 - 64, 128);
	w.op = DXL_WR_FAA;
	w.compare_add = 1;
	w.remote_addr = raddr(x, 8192 + 1);
	both(x, "FAA at addr % 8 == 1", w, x->rreg, 8192 - 64, 128);
}

static void test_err_no_write_access(void **state)
{
	struct fx *x = *state;
	struct err_fx e;
	err_setup(x, &e);
	struct dxl_wr w = {.op = DXL_WR_WRITE, .len = 64,
			   .remote_addr = e.ro_d.addr + 128, .rkey = e.ro_d.rkey};
	both(x, "WRITE to a REMOTE_READ-only region", w, e.ro, 0, 4096);
	w.op = DXL_WR_FAA;
	w.len = 8;
	w.compare_add = 1;
	both(x, "FAA on a REMOTE_READ-only region", w, e.ro, 0, 4096);
}

static void test_err_no_read_access(void **state)
{
	struct fx *x = *state;
	struct err_fx e;
	err_setup(x, &e);
	struct dxl_wr w = {.op = DXL_WR_READ, .len = 64,
			   .remote_addr = e.wo_d.addr + 128, .rkey = e.wo_d.rkey};
	both(x, "READ of a REMOTE_WRITE-only region", w, e.wo, 0, 4096);
}

static void test_err_no_atomic_access(void **state)
{
	struct fx *x = *state;
	struct err_fx e;
	err_setup(x, &e);
	uint64_t cur;
	CHECK(dxlt_peer_mr_read(x->peer, e.rw, 256, &cur, 8));
	struct dxl_wr w = {.op = DXL_WR_CAS, .len = 8,
			   .remote_addr = e.rw_d.addr + 256, .rkey = e.rw_d.rkey,
			   .compare_add = cur, .swap = cur + 1};
	both(x, "CAS on a region without REMOTE_ATOMIC", w, e.rw, 0, 4096);
	w.op = DXL_WR_FAA;
	w.compare_add = 1;
	both(x, "FAA on a region without REMOTE_ATOMIC", w, e.rw, 0, 4096);
}

/* ========================================================================== */
/* memory-region lifecycle                                                    */
/* ========================================================================== */

static void test_mr_dereg_remote(void **state)
{
	struct fx *x = *state;
	fx_std(x, NULL);
	struct dxl_mr_desc d;
	struct dxlt_region_opts o = {.len = 16384,
				     .access = DXL_MR_REMOTE_READ |
					       DXL_MR_REMOTE_WRITE |
					       DXL_MR_REMOTE_ATOMIC,
				     .fill = DXLT_FILL_PATTERN, .seed = 77};
	int reg = dxlt_peer_mr_reg(x->peer, &o, &d);
	CHECK(reg);
	/* usable before */
	CHECK_WC(dxlt_read(x->c, x->qp, ldst(x, 0), x->lkey, d.addr + 100,
			   d.rkey, 1000), DXL_WC_SUCCESS);
	CHECK_PATTERN(ldst(x, 0), 1000, 77, 100);

	CHECK(dxlt_peer_mr_dereg(x->peer, reg));
	CHECK_ERR(dxlt_peer_mr_dereg(x->peer, reg), DXL_E_STATE); /* harness */

	/* READ, WRITE and FAA with the old rkey fail, each on its own QP */
	enum dxl_wr_opcode ops[] = {DXL_WR_READ, DXL_WR_WRITE, DXL_WR_FAA};
	for (size_t i = 0; i < DXL_ARRAY_SIZE(ops); i++) {
		struct dxl_qp *qp = fx_connect_ctx(x, 0);
		memset(lsrc(x, 0), 0x42, 64);
		struct dxl_wr w = {.wr_id = 9, .op = ops[i],
				   .local = ops[i] == DXL_WR_WRITE ? lsrc(x, 0)
								   : ldst(x, 0),
				   .len = ops[i] == DXL_WR_FAA ? 8 : 64,
				   .lkey = x->lkey, .remote_addr = d.addr + 64,
				   .rkey = d.rkey, .compare_add = 1};
		CHECK_WC(dxlt_post_wait(x->c, qp, &w), DXL_WC_REM_ACCESS_ERR);
		assert_int_equal(dxl_qp_state(qp), DXL_QP_ERR);
		dxl_qp_delete(&qp);
	}
	/* the memory is still mapped at the peer and unchanged */
	uint8_t *b = snap(x, reg, 0, 16384);
	CHECK_PATTERN(b, 16384, 77, 0);
	free(b);
	/* other regions keep working */
	expect_serving(x, x->qp, 0xdead);
}

/* ========================================================================== */
/* SEND / RECV                                                                */
/* ========================================================================== */

#define RECV_SLOTS 8
#define RECV_LEN 65536u

static void post_recv_slot(struct fx *x, int k)
{
	CHECK(dxl_ctx_post_recv(x->c, ldst(x, (size_t)k * RECV_LEN), RECV_LEN,
				x->lkey, 0x7000 + (uint64_t)k));
}

static void post_recvs(struct fx *x)
{
	for (int k = 0; k < RECV_SLOTS; k++)
		post_recv_slot(x, k);
}

/* echo_fx -- fixture + echo ctx 1 (64 KiB buffers) + recvs of our own */
static struct dxl_qp *echo_setup(struct fx *x)
{
	fx_std(x, NULL);
	CHECK(dxlt_peer_echo_new(x->peer, 1, RECV_LEN, 8));
	post_recvs(x);
	return fx_connect_ctx(x, 1);
}

/* send one message of len bytes at src and check the echo; returns the
 * receive slot used (reposted) */
static void echo_roundtrip(struct fx *x, struct dxl_qp *qp, void *src,
			   uint32_t len, unsigned flags, uint64_t seed,
			   uint32_t lkey)
{
	static uint64_t id = 0x5e00000;
	id++;
	struct dxl_wr s = {.wr_id = id, .op = DXL_WR_SEND,
			   .flags = flags | DXL_WR_SIGNALED, .local = src,
			   .len = len, .lkey = lkey};
	CHECK(dxl_qp_post(qp, &s, NULL));
	if (flags & DXL_WR_INLINE)
		memset(src, 0xab, len); /* copied at post */
	struct dxl_wc wc[2];
	int n = dxlt_wait_wc(x->c, wc, 2, -1);
	CHECK(n);
	if (n != 2)
		fail_msg("SEND of %u bytes: %d of 2 completions", len, n);
	int si = wc[0].opcode == DXL_WC_SEND ? 0 : 1;
	struct dxl_wc *sw = &wc[si], *rw = &wc[1 - si];
	assert_int_equal(sw->opcode, DXL_WC_SEND);
	assert_int_equal(sw->wr_id, id);
	CHECK_WC(sw->status, DXL_WC_SUCCESS);
	assert_int_equal(rw->opcode, DXL_WC_RECV);
	CHECK_WC(rw->status, DXL_WC_SUCCESS);
	assert_int_equal(rw->byte_len, len);
	assert_ptr_equal(rw->qp, qp); /* the reply came on our active QP */
	assert_in_range(rw->wr_id, 0x7000, 0x7000 + RECV_SLOTS - 1);
	int k = (int)(rw->wr_id - 0x7000);
	CHECK_PATTERN(ldst(x, (size_t)k * RECV_LEN), len, seed, 0);
	post_recv_slot(x, k);
}

static void test_send_recv_echo(void **state)
{
	struct fx *x = *state;
	struct dxl_qp *qp = echo_setup(x);
	const uint32_t max_msg = dxl_fabric_cfg(x->f)->max_msg;
	uint32_t sizes[] = {1, 7, 8, 63, 64, 100, 1000, 4096, 65535, 65536};
	uint64_t sent = 0;
	for (size_t i = 0; i < DXL_ARRAY_SIZE(sizes); i++) {
		uint32_t len = sizes[i];
		if (len > max_msg || len > RECV_LEN)
			continue;
		dxlt_pattern_fill(lsrc(x, 0), len, 300 + i, 0);
		echo_roundtrip(x, qp, lsrc(x, 0), len, 0, 300 + i, x->lkey);
		sent++;
	}
	/* inline SENDs from an unregistered buffer reused right after post */
	uint32_t max_inline = dxl_fabric_cfg(x->f)->max_inline;
	uint8_t buf[1024];
	for (uint32_t len = 1; len <= max_inline && len <= sizeof(buf);
	     len = len * 3 + 1) {
		dxlt_pattern_fill(buf, len, 400 + len, 0);
		echo_roundtrip(x, qp, buf, len, DXL_WR_INLINE, 400 + len, 0);
		sent++;
	}

	/* a pipeline of 6 messages in one chain: replies in order, each in the
	 * oldest posted receive buffer */
	struct dxl_wr s[6];
	uint32_t plen[6] = {10, 5000, 1, 777, 65536, 64};
	for (int i = 0; i < 6; i++) {
		dxlt_pattern_fill(lsrc(x, (size_t)i * 65536), plen[i], 500 + i, 0);
		s[i] = (struct dxl_wr){.wr_id = 600 + (uint64_t)i, .op = DXL_WR_SEND,
				       .flags = DXL_WR_SIGNALED,
				       .local = lsrc(x, (size_t)i * 65536),
				       .len = plen[i], .lkey = x->lkey,
				       .next = i < 5 ? &s[i + 1] : NULL};
	}
	CHECK(dxl_qp_post(qp, s, NULL));
	struct dxl_wc wc[12];
	int n = dxlt_wait_wc(x->c, wc, 12, -1);
	assert_int_equal(n, 12);
	int nsend = 0, nrecv = 0;
	for (int i = 0; i < 12; i++) {
		CHECK_WC(wc[i].status, DXL_WC_SUCCESS);
		if (wc[i].opcode == DXL_WC_SEND) {
			assert_int_equal(wc[i].wr_id, 600 + (uint64_t)nsend);
			nsend++;
			continue;
		}
		assert_int_equal(wc[i].opcode, DXL_WC_RECV);
		assert_int_equal(wc[i].byte_len, plen[nrecv]);
		int k = (int)(wc[i].wr_id - 0x7000);
		assert_in_range(k, 0, RECV_SLOTS - 1);
		CHECK_PATTERN(ldst(x, (size_t)k * RECV_LEN), plen[nrecv],
			      500 + (uint64_t)nrecv, 0);
		nrecv++;
	}
	assert_int_equal(nsend, 6);
	assert_int_equal(nrecv, 6);
	sent += 6;

	struct dxlt_echo_stats st;
	CHECK(dxlt_peer_echo_stats(x->peer, 1, &st));
	assert_int_equal(st.recv_ok, sent);
	assert_int_equal(st.recv_err, 0);
	assert_int_equal(st.send_err, 0);
	assert_int_equal(st.last_passive, 1);
	dxl_qp_delete(&qp);
}

static void test_recv_fifo(void **state)
{
	/* "any SEND arriving on any QP of this ctx lands in the oldest posted
	 * buffer": post buffers with ids in a known order, check the order */
	struct fx *x = *state;
	fx_std(x, NULL);
	CHECK(dxlt_peer_echo_new(x->peer, 1, 4096, 8));
	const int nb = 5;
	for (int k = 0; k < nb; k++)
		CHECK(dxl_ctx_post_recv(x->c, ldst(x, (size_t)k * 4096), 4096,
					x->lkey, 0x8000 + (uint64_t)(nb - 1 - k)));
	struct dxl_qp *qp = fx_connect_ctx(x, 1);
	for (int i = 0; i < nb; i++) {
		dxlt_pattern_fill(lsrc(x, 0), 100, 800 + i, 0);
		struct dxl_wr s = {.wr_id = 1, .op = DXL_WR_SEND,
				   .flags = DXL_WR_SIGNALED, .local = lsrc(x, 0),
				   .len = 100, .lkey = x->lkey};
		CHECK(dxl_qp_post(qp, &s, NULL));
		struct dxl_wc two[2];
		assert_int_equal(dxlt_wait_wc(x->c, two, 2, -1), 2);
		CHECK_WC(two[0].status, DXL_WC_SUCCESS);
		CHECK_WC(two[1].status, DXL_WC_SUCCESS);
		struct dxl_wc wc = two[0].opcode == DXL_WC_RECV ? two[0] : two[1];
		assert_int_equal(wc.opcode, DXL_WC_RECV);
		assert_int_equal(wc.byte_len, 100);
		assert_int_equal(wc.wr_id, 0x8000 + (uint64_t)(nb - 1 - i));
		CHECK_PATTERN(ldst(x, (size_t)i * 4096), 100, 800 + (uint64_t)i, 0);
	}
	dxl_qp_delete(&qp);
}

static void test_send_too_large(void **state)
{
	struct fx *x = *state;
	fx_std(x, NULL);
	post_recvs(x);
	CHECK(dxlt_peer_echo_new(x->peer, 2, 256, 4));
	struct dxl_qp *qp = fx_connect_ctx(x, 2);
	dxlt_pattern_fill(lsrc(x, 0), 257, 900, 0);
	echo_roundtrip(x, qp, lsrc(x, 0), 256, 0, 900, x->lkey); /* fits */

	struct dxl_wr s = {.wr_id = 0x2b16, .op = DXL_WR_SEND,
			   .flags = DXL_WR_SIGNALED, .local = lsrc(x, 0),
			   .len = 257, .lkey = x->lkey};
	CHECK(dxl_qp_post(qp, &s, NULL));
	struct dxl_wc wc = wait_one(x);
	assert_int_equal(wc.wr_id, 0x2b16);
	assert_int_equal(wc.opcode, DXL_WC_SEND);
	CHECK_WC(wc.status, DXL_WC_REM_OP_ERR);
	assert_int_equal(dxl_qp_state(qp), DXL_QP_ERR);
	s.len = 8;
	CHECK_ERR(dxl_qp_post(qp, &s, NULL), DXL_E_STATE);
	expect_no_wc(x); /* no reply to the too-large message */
	dxl_qp_delete(&qp);

	/* the echo ctx keeps serving on a new QP */
	struct dxl_qp *qp2 = fx_connect_ctx(x, 2);
	dxlt_pattern_fill(lsrc(x, 0), 200, 901, 0);
	echo_roundtrip(x, qp2, lsrc(x, 0), 200, 0, 901, x->lkey);
	struct dxlt_echo_stats st;
	CHECK(dxlt_peer_echo_stats(x->peer, 2, &st));
	assert_int_equal(st.recv_ok, 2); /* the 257-byte one was not received */
	assert_in_range(st.recv_err, 0, 1);
	if (st.recv_err == 1) /* if reported, as documented in fabric.h */
		assert_int_equal(st.last_recv_err, DXL_WC_LOCAL_ERR);
	dxl_qp_delete(&qp2);
}

/* ========================================================================== */
/* connection errors                                                          */
/* ========================================================================== */

static void test_connect_errors(void **state)
{
	struct fx *x = *state;
	fx_open(x, NULL);
	fx_peer(x);
	struct dxl_qp *qp = (struct dxl_qp *)(uintptr_t)0x1;

	/* nothing listening */
	char free_addr[DXL_FABRIC_ADDR_MAX];
	struct dxl_fabric_cfg fc = peer_cfg(x, 9);
	CHECK(dxlt_free_addr(&fc, free_addr));
	CHECK_ERR(dxl_qp_connect(x->c, free_addr, 0, &qp), DXL_E_UNREACHABLE);
	assert_null(qp);

	/* a ctx index the peer has not created, or has deleted */
	qp = (struct dxl_qp *)(uintptr_t)0x1;
	CHECK_ERR(dxl_qp_connect(x->c, dxlt_peer_addr(x->peer), 17, &qp),
		  DXL_E_NOENT);
	assert_null(qp);
	CHECK(dxlt_peer_ctx_new(x->peer, 5));
	CHECK(dxlt_peer_ctx_delete(x->peer, 5));
	CHECK_ERR(dxl_qp_connect(x->c, dxlt_peer_addr(x->peer), 5, &qp),
		  DXL_E_NOENT);
	CHECK_ERR(dxl_qp_connect(x->c, dxlt_peer_addr(x->peer),
				 DXL_FABRIC_MAX_CTX, &qp), DXL_E_INVAL);

	/* bad address strings */
	static const char *const bad[] = {
		"", "localhost", "127.0.0.1", "127.0.0.1:", ":4000",
		"127.0.0.1:99999", "127.0.0.1:abc", "127.0.0.1:0",
		"127.0.0.1:-1", "127.0.0.1: 80",
	};
	for (size_t i = 0; i < DXL_ARRAY_SIZE(bad); i++) {
		qp = (struct dxl_qp *)(uintptr_t)0x1;
		int r = dxl_qp_connect(x->c, bad[i], 0, &qp);
		if (r != DXL_E_INVAL)
			fail_msg("connect to '%s' = %d (%s), expected DXL_E_INVAL",
				 bad[i], r, dxl_errname(r));
		assert_null(qp);
	}

	/* and after all that the ctx connects and works */
	x->qp = fx_connect_ctx(x, 0);
	expect_serving(x, x->qp, 0xc0);
}

/* ========================================================================== */
/* post-time validation                                                       */
/* ========================================================================== */

static void test_post_validation(void **state)
{
	struct fx *x = *state;
	struct dxl_qp *eq = echo_setup(x);
	const struct dxl_fabric_cfg *cfg = dxl_fabric_cfg(x->f);
	const uint64_t sent = 4096;
	uint64_t sentinel = peer_u64(x, sent);
	struct dxl_wr *bad = NULL;
	struct dxl_wr good = {.wr_id = 1, .op = DXL_WR_WRITE,
			      .flags = DXL_WR_SIGNALED, .local = lsrc(x, 0),
			      .len = 8, .lkey = x->lkey,
			      .remote_addr = raddr(x, sent), .rkey = x->rd.rkey};
	memset(lsrc(x, 0), 0x6b, 8);
	struct dxl_wr w;

	w = good;
	w.op = (enum dxl_wr_opcode)99;
	CHECK_ERR(dxl_qp_post(x->qp, &w, &bad), DXL_E_INVAL);
	assert_ptr_equal(bad, &w);

	w = good;
	w.op = DXL_WR_CAS;
	w.local = ldst(x, 0);
	w.len = 4;
	CHECK_ERR(dxl_qp_post(x->qp, &w, &bad), DXL_E_INVAL);
	w.len = 16;
	CHECK_ERR(dxl_qp_post(x->qp, &w, &bad), DXL_E_INVAL);
	w.op = DXL_WR_FAA;
	w.len = 0;
	CHECK_ERR(dxl_qp_post(x->qp, &w, &bad), DXL_E_INVAL);

	w.len = 8;
	w.local = ldst(x, 4); /* misaligned result buffer */
	CHECK_ERR(dxl_qp_post(x->qp, &w, &bad), DXL_E_INVAL);
	w.op = DXL_WR_CAS;
	CHECK_ERR(dxl_qp_post(x->qp, &w, &bad), DXL_E_INVAL);

	uint8_t ibuf[2048];
	memset(ibuf, 1, sizeof(ibuf));
	w = good;
	w.flags |= DXL_WR_INLINE;
	w.local = ibuf;
	w.len = cfg->max_inline + 1;
	CHECK_ERR(dxl_qp_post(x->qp, &w, &bad), DXL_E_INVAL);
	w.op = DXL_WR_SEND;
	CHECK_ERR(dxl_qp_post(eq, &w, &bad), DXL_E_INVAL);

	w = good;
	w.op = DXL_WR_SEND;
	w.len = cfg->max_msg + 1;
	w.local = lsrc(x, 0);
	CHECK_ERR(dxl_qp_post(eq, &w, &bad), DXL_E_INVAL);

	w = good;
	w.flags |= 1u << 7; /* unknown flag */
	CHECK_ERR(dxl_qp_post(x->qp, &w, &bad), DXL_E_INVAL);

	/* a chain whose third request is bad: nothing of it is posted */
	struct dxl_wr c[3];
	c[0] = good;
	c[0].wr_id = 100;
	c[0].next = &c[1];
	c[1] = good;
	c[1].wr_id = 101;
	c[1].next = &c[2];
	c[2] = good;
	c[2].wr_id = 102;
	c[2].op = DXL_WR_CAS; /* len 8, but the local buffer is misaligned */
	c[2].local = ldst(x, 12);
	bad = NULL;
	CHECK_ERR(dxl_qp_post(x->qp, c, &bad), DXL_E_INVAL);
	assert_ptr_equal(bad, &c[2]);

	/* the QP is still fine, and the first completion is the READ below */
	assert_int_equal(dxl_qp_state(x->qp), DXL_QP_RTS);
	uint64_t got = 0;
	CHECK_WC(dxlt_read(x->c, x->qp, ldst(x, 64), x->lkey, raddr(x, sent),
			   x->rd.rkey, 8), DXL_WC_SUCCESS);
	memcpy(&got, ldst(x, 64), 8);
	assert_int_equal(got, sentinel);
	assert_int_equal(peer_u64(x, sent), sentinel);
	expect_no_wc(x);

	/* one-sided requests on a passive QP: the echo peer tries them */
	uint64_t *probe = (uint64_t *)lsrc(x, 0);
	memset(probe, 0, 64);
	probe[0] = DXLT_ECHO_PROBE_MAGIC;
	struct dxl_wr s = {.wr_id = 7, .op = DXL_WR_SEND,
			   .flags = DXL_WR_SIGNALED, .local = probe, .len = 64,
			   .lkey = x->lkey};
	CHECK(dxl_qp_post(eq, &s, NULL));
	struct dxl_wc wc[2];
	assert_int_equal(dxlt_wait_wc(x->c, wc, 2, -1), 2);
	struct dxl_wc *rw = wc[0].opcode == DXL_WC_RECV ? &wc[0] : &wc[1];
	CHECK_WC(wc[0].status, DXL_WC_SUCCESS);
	CHECK_WC(wc[1].status, DXL_WC_SUCCESS);
	assert_int_equal(rw->opcode, DXL_WC_RECV);
	assert_int_equal(rw->byte_len, sizeof(struct dxlt_echo_probe_reply));
	struct dxlt_echo_probe_reply rep;
	memcpy(&rep, ldst(x, (size_t)(rw->wr_id - 0x7000) * RECV_LEN), sizeof(rep));
	assert_int_equal(rep.magic, DXLT_ECHO_PROBE_MAGIC);
	assert_int_equal(rep.passive, 1);
	CHECK_ERR(rep.rc_read, DXL_E_NOTSUP);
	CHECK_ERR(rep.rc_write, DXL_E_NOTSUP);
	CHECK_ERR(rep.rc_cas, DXL_E_NOTSUP);
	CHECK_ERR(rep.rc_faa, DXL_E_NOTSUP);
	assert_int_equal(rep.state, DXL_QP_RTS); /* and the reply got through */
	dxl_qp_delete(&eq);
}

/* ========================================================================== */
/* dead and stuck peers                                                       */
/* ========================================================================== */

static void tweak_timeout500(struct dxl_fabric_cfg *cfg)
{
	cfg->timeout_ms = 500;
}

static bool is_dead_status(enum dxl_wc_status s)
{
	return s == DXL_WC_PEER_UNREACHABLE || s == DXL_WC_FLUSHED;
}

/* the peer died by SIGKILL and has been reaped */
static void reap_killed(struct dxlt_peer *p)
{
	int st = 0;
	CHECK(dxlt_peer_wait_exit(p, dxlt_wait_ms(), &st));
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGKILL);
}

static void test_dead_peer_signalled(void **state)
{
	struct fx *x = *state;
	fx_std(x, tweak_timeout500);
	const uint32_t tmo = x->cfg.timeout_ms;
	const uint64_t window = 32, len = 16384;
	uint64_t posted = 0, done = 0, after_kill = 0, errors = 0;
	bool killed = false, stop = false, seen_err = false;
	uint64_t t_kill = 0, t_last = 0, at_kill = 0;
	uint64_t deadline = dxl_now_ms() + 3u * (uint64_t)dxlt_wait_ms();
	while (!(stop && done == posted)) {
		bool posted_any = false;
		while (!stop && posted - done < window) { /* keep it full */
			uint64_t slot = posted % 64;
			struct dxl_wr r = {.wr_id = posted, .op = DXL_WR_READ,
					   .flags = DXL_WR_SIGNALED,
					   .local = ldst(x, slot * len),
					   .len = (uint32_t)len, .lkey = x->lkey,
					   .remote_addr = raddr(x, (posted % 100) * len),
					   .rkey = x->rd.rkey};
			int ret = dxl_qp_post(x->qp, &r, NULL);
			if (ret == 0) {
				posted++;
				posted_any = true;
				if (killed && ++after_kill >= 64)
					stop = true;
			} else if (ret == DXL_E_STATE && killed) {
				stop = true;
			} else if (ret == DXL_E_AGAIN) {
				break;
			} else {
				fail_msg("post: %s: %s", dxl_errname(ret), dxl_errmsg());
			}
		}
		/* the kill lands with a full window of requests in flight */
		if (!killed && done >= 64) {
			CHECK(dxlt_peer_signal(x->peer, SIGKILL));
			killed = true;
			t_kill = dxl_now_ms();
			at_kill = posted - done;
		}
		if (!posted_any)
			dxl_ctx_wait(x->c, 50);
		struct dxl_wc wc[16];
		int n = dxl_ctx_poll(x->c, wc, 16);
		CHECK(n);
		for (int i = 0; i < n; i++) {
			if (wc[i].wr_id != done)
				fail_msg("completion of wr_id %llu, expected %llu",
					 (unsigned long long)wc[i].wr_id,
					 (unsigned long long)done);
			if (wc[i].status == DXL_WC_SUCCESS) {
				if (seen_err)
					fail_msg("wr_id %llu succeeded after an error",
						 (unsigned long long)done);
				uint64_t slot = done % 64;
				CHECK_PATTERN(ldst(x, slot * len), len, PEER_SEED,
					      (done % 100) * len);
			} else {
				if (!killed)
					fail_msg("wr_id %llu: %s before the kill",
						 (unsigned long long)done,
						 dxl_wc_status_str(wc[i].status));
				if (!is_dead_status(wc[i].status))
					fail_msg("wr_id %llu: %s, expected peer "
						 "unreachable or flushed",
						 (unsigned long long)done,
						 dxl_wc_status_str(wc[i].status));
				seen_err = true;
				errors++;
			}
			done++;
			t_last = dxl_now_ms();
		}
		if (killed && dxl_now_ms() > t_kill + 4u * tmo + 2000)
			fail_msg("%llu of %llu requests still outstanding %u ms "
				 "after the kill (timeout_ms %u)",
				 (unsigned long long)(posted - done),
				 (unsigned long long)posted,
				 (unsigned)(dxl_now_ms() - t_kill), tmo);
		if (dxl_now_ms() > deadline)
			fail_msg("stream stalled: %llu of %llu done",
				 (unsigned long long)done, (unsigned long long)posted);
	}
	assert_true(errors > 0);
	assert_int_equal(dxl_qp_state(x->qp), DXL_QP_ERR);
	struct dxl_wr r = {.wr_id = 1, .op = DXL_WR_READ, .local = ldst(x, 0),
			   .len = 8, .lkey = x->lkey, .remote_addr = raddr(x, 0),
			   .rkey = x->rd.rkey};
	CHECK_ERR(dxl_qp_post(x->qp, &r, NULL), DXL_E_STATE);
	print_message("  %llu requests, %llu outstanding at the kill, %llu failed; "
		      "all completed %llu ms after the kill (timeout_ms %u)\n",
		      (unsigned long long)posted, (unsigned long long)at_kill,
		      (unsigned long long)errors,
		      (unsigned long long)(t_last - t_kill), tmo);
	reap_killed(x->peer);
	expect_no_wc(x);
}

static void test_dead_peer_unsignalled(void **state)
{
	/* groups of 7 unsignalled WRITEs + 1 signalled READ; the peer dies
	 * mid-stream: every signalled READ completes exactly once, failed
	 * unsignalled WRITEs report errors, all in posting order */
	struct fx *x = *state;
	fx_std(x, tweak_timeout500);
	const uint32_t tmo = x->cfg.timeout_ms;
	const int group = 8, max_groups = 4;
	uint64_t next_id = 0, last_seen = 0;
	bool any_seen = false, killed = false, stop = false, seen_err = false;
	uint64_t sig_q[64]; /* wr_ids of outstanding signalled READs, FIFO */
	int q_head = 0, q_len = 0, groups_done = 0, after_kill = 0;
	uint64_t t_kill = 0, errors = 0;
	uint64_t deadline = dxl_now_ms() + 3u * (uint64_t)dxlt_wait_ms();
	while (!(stop && q_len == 0)) {
		bool posted_any = false;
		while (!stop && q_len < max_groups) { /* keep it full */
			struct dxl_wr w[8];
			for (int j = 0; j < group; j++) {
				uint64_t id = next_id + (uint64_t)j;
				size_t slot = (size_t)(id % 512) * 4096;
				w[j] = (struct dxl_wr){
					.wr_id = id, .op = DXL_WR_WRITE,
					.local = lsrc(x, slot), .len = 4096,
					.lkey = x->lkey,
					.remote_addr = raddr(x, slot),
					.rkey = x->rd.rkey,
					.next = j + 1 < group ? &w[j + 1] : NULL};
			}
			w[group - 1].op = DXL_WR_READ;
			w[group - 1].flags = DXL_WR_SIGNALED;
			w[group - 1].local = ldst(x, (size_t)(q_head + q_len) % 64 * 4096);
			int ret = dxl_qp_post(x->qp, w, NULL);
			if (ret == 0) {
				sig_q[(q_head + q_len) % 64] = next_id + group - 1;
				q_len++;
				next_id += group;
				posted_any = true;
				if (killed && ++after_kill >= 8)
					stop = true;
			} else if (ret == DXL_E_STATE && killed) {
				stop = true;
			} else if (ret == DXL_E_AGAIN) {
				break;
			} else {
				fail_msg("post: %s: %s", dxl_errname(ret), dxl_errmsg());
			}
		}
		if (!posted_any)
			dxl_ctx_wait(x->c, 50);
		struct dxl_wc wc[16];
		int n = dxl_ctx_poll(x->c, wc, 16);
		CHECK(n);
		for (int i = 0; i < n; i++) {
			uint64_t id = wc[i].wr_id;
			if (any_seen && id <= last_seen)
				fail_msg("completion of wr_id %llu after %llu",
					 (unsigned long long)id,
					 (unsigned long long)last_seen);
			any_seen = true;
			last_seen = id;
			if (q_len == 0 || id > sig_q[q_head])
				fail_msg("wr_id %llu: the signalled READ %llu "
					 "never completed",
					 (unsigned long long)id,
					 q_len ? (unsigned long long)sig_q[q_head] : 0ull);
			if (wc[i].status == DXL_WC_SUCCESS) {
				if (id != sig_q[q_head])
					fail_msg("unsignalled wr_id %llu completed "
						 "with success", (unsigned long long)id);
				if (seen_err)
					fail_msg("wr_id %llu succeeded after an error",
						 (unsigned long long)id);
			} else {
				if (!killed || !is_dead_status(wc[i].status))
					fail_msg("wr_id %llu: %s (%s the kill)",
						 (unsigned long long)id,
						 dxl_wc_status_str(wc[i].status),
						 killed ? "after" : "before");
				seen_err = true;
				errors++;
			}
			if (id == sig_q[q_head]) {
				q_head = (q_head + 1) % 64;
				q_len--;
				groups_done++;
			}
		}
		if (!killed && groups_done >= 16) {
			CHECK(dxlt_peer_signal(x->peer, SIGKILL));
			killed = true;
			t_kill = dxl_now_ms();
		}
		if (killed && dxl_now_ms() > t_kill + 4u * tmo + 2000)
			fail_msg("%d signalled READs still outstanding %u ms after "
				 "the kill", q_len, (unsigned)(dxl_now_ms() - t_kill));
		if (dxl_now_ms() > deadline)
			fail_msg("stream stalled");
	}
	assert_true(errors > 0);
	assert_int_equal(dxl_qp_state(x->qp), DXL_QP_ERR);
	reap_killed(x->peer);
	expect_no_wc(x);
}

static void test_stopped_peer(void **state)
{
	struct fx *x = *state;
	fx_std(x, tweak_timeout500);
	const uint32_t tmo = x->cfg.timeout_ms;
	CHECK_WC(dxlt_read(x->c, x->qp, ldst(x, 0), x->lkey, raddr(x, 0),
			   x->rd.rkey, 64), DXL_WC_SUCCESS);
	CHECK(dxlt_peer_signal(x->peer, SIGSTOP));
	/* the peer may take a moment to actually stop; wait until it has */
	for (int i = 0; i < 1000; i++) {
		char path[64], buf[512];
		snprintf(path, sizeof(path), "/proc/%d/stat",
			 (int)dxlt_peer_pid(x->peer));
		FILE *fp = fopen(path, "r");
		if (!fp)
			break;
		size_t k = fread(buf, 1, sizeof(buf) - 1, fp);
		fclose(fp);
		buf[k] = 0;
		char *p = strrchr(buf, ')');
		if (p && (p[2] == 'T' || p[2] == 't'))
			break;
		usleep(1000); /* /proc offers no notification */
	}
	uint64_t t0 = dxl_now_ms();
	struct dxl_wr r[4];
	for (int i = 0; i < 4; i++)
		r[i] = (struct dxl_wr){.wr_id = 40 + (uint64_t)i, .op = DXL_WR_READ,
				       .flags = DXL_WR_SIGNALED,
				       .local = ldst(x, (size_t)i * 4096),
				       .len = 4096, .lkey = x->lkey,
				       .remote_addr = raddr(x, (uint64_t)i * 4096),
				       .rkey = x->rd.rkey,
				       .next = i < 3 ? &r[i + 1] : NULL};
	CHECK(dxl_qp_post(x->qp, r, NULL));
	struct dxl_wc wc[4];
	int n = dxlt_wait_wc(x->c, wc, 4, (int)(4 * tmo + 2000));
	uint64_t elapsed = dxl_now_ms() - t0;
	dxlt_peer_signal(x->peer, SIGCONT);
	dxlt_peer_signal(x->peer, SIGKILL);
	reap_killed(x->peer);
	CHECK(n);
	if (n != 4)
		fail_msg("stopped peer: %d of 4 completions after %llu ms "
			 "(timeout_ms %u)", n, (unsigned long long)elapsed, tmo);
	for (int i = 0; i < 4; i++)
		assert_int_equal(wc[i].wr_id, 40 + (uint64_t)i);
	if (nic_in_process(x->cfg.provider)) {
		CHECK_WC(wc[0].status, DXL_WC_PEER_UNREACHABLE);
		for (int i = 1; i < 4; i++)
			assert_true(is_dead_status(wc[i].status));
		assert_int_equal(dxl_qp_state(x->qp), DXL_QP_ERR);
		/* not declared dead before the timeout */
		assert_true(elapsed >= tmo / 2);
		print_message("  stopped peer unreachable after %llu ms "
			      "(timeout_ms %u)\n", (unsigned long long)elapsed, tmo);
	} else {
		/* the NIC serves a stopped process: all succeed (or, if the
		 * provider also watches the process, fail as unreachable) */
		print_message("  provider %s serves one-sided requests outside "
			      "the process: a stopped peer stays reachable\n",
			      dxl_fabric_provider_name(x->cfg.provider));
		for (int i = 0; i < 4; i++) {
			if (wc[i].status == DXL_WC_SUCCESS)
				CHECK_PATTERN(ldst(x, (size_t)i * 4096), 4096,
					      PEER_SEED, (uint64_t)i * 4096);
			else
				assert_true(is_dead_status(wc[i].status));
		}
	}
}

/* wait until the peer process has actually stopped (SIGSTOP) */
static void wait_stopped(struct dxlt_peer *peer)
{
	for (int i = 0; i < 1000; i++) {
		char path[64], buf[512];
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)dxlt_peer_pid(peer));
		FILE *fp = fopen(path, "r");
		if (!fp)
			return;
		size_t k = fread(buf, 1, sizeof(buf) - 1, fp);
		fclose(fp);
		buf[k] = 0;
		char *p = strrchr(buf, ')');
		if (p && (p[2] == 'T' || p[2] == 't'))
			return;
		usleep(1000); /* /proc offers no notification */
	}
}

/*
 * The contract of FLUSHED and PEER_UNREACHABLE after a timeout (fabric.h):
 * a request that completed so never executes afterwards. The peer is
 * stopped BEFORE the requests are posted (so none can have executed before
 * the initiator gave up), the QP times out, the peer resumes (SIGCONT
 * only) and runs for twice the timeout: every request reported in error
 * must have left the peer's memory untouched; one reported successful
 * (verbs: the NIC serves a stopped process) must be there. Then a new QP
 * to the resumed peer works and sees the same memory.
 */
#define SR_WRITES 16
#define SR_BASE 8192
static void test_stopped_peer_resumed(void **state)
{
	struct fx *x = *state;
	fx_std(x, tweak_timeout500);
	const uint32_t tmo = x->cfg.timeout_ms;
	CHECK_WC(dxlt_read(x->c, x->qp, ldst(x, 0), x->lkey, raddr(x, 0),
			   x->rd.rkey, 64), DXL_WC_SUCCESS);
	CHECK(dxlt_peer_signal(x->peer, SIGSTOP));
	wait_stopped(x->peer);
	/* 16 unsignalled WRITEs of 64 B (each slot a distinct byte), an
	 * unsignalled FAA, a signalled READ: one doorbell */
	struct dxl_wr w[SR_WRITES + 2];
	for (int i = 0; i < SR_WRITES; i++) {
		memset(lsrc(x, (size_t)i * 64), 0xC0 + i, 64);
		w[i] = (struct dxl_wr){.wr_id = 100 + (uint64_t)i, .op = DXL_WR_WRITE,
				       .local = lsrc(x, (size_t)i * 64), .len = 64,
				       .lkey = x->lkey,
				       .remote_addr = raddr(x, SR_BASE + (uint64_t)i * 64),
				       .rkey = x->rd.rkey};
	}
	uint64_t faa_off = SR_BASE + SR_WRITES * 64;
	w[SR_WRITES] = (struct dxl_wr){.wr_id = 200, .op = DXL_WR_FAA,
				       .local = ldst(x, 0), .len = 8, .lkey = x->lkey,
				       .remote_addr = raddr(x, faa_off),
				       .rkey = x->rd.rkey, .compare_add = 1};
	w[SR_WRITES + 1] = (struct dxl_wr){.wr_id = 300, .op = DXL_WR_READ,
					   .flags = DXL_WR_SIGNALED,
					   .local = ldst(x, 64), .len = 64,
					   .lkey = x->lkey, .remote_addr = raddr(x, 0),
					   .rkey = x->rd.rkey};
	for (int i = 0; i < SR_WRITES + 1; i++)
		w[i].next = &w[i + 1];
	CHECK(dxl_qp_post(x->qp, w, NULL));
	/* errors complete every request (unsignalled ones included);
	 * success only the signalled READ (and on verbs not the rest) */
	enum dxl_wc_status st[SR_WRITES + 2];
	for (int i = 0; i < SR_WRITES + 2; i++)
		st[i] = DXL_WC_SUCCESS;
	bool got_read = false;
	uint64_t end = dxl_now_ms() + 4ull * tmo + 2000;
	int nerr = 0;
	while (!got_read && dxl_now_ms() < end) {
		struct dxl_wc wc[8];
		int n = dxlt_wait_wc(x->c, wc, 1, (int)(end - dxl_now_ms()));
		for (int i = 0; i < n; i++) {
			int k = wc[i].wr_id == 300   ? SR_WRITES + 1
				: wc[i].wr_id == 200 ? SR_WRITES
						     : (int)(wc[i].wr_id - 100);
			assert_true(k >= 0 && k < SR_WRITES + 2);
			st[k] = wc[i].status;
			if (wc[i].status != DXL_WC_SUCCESS) {
				assert_true(is_dead_status(wc[i].status));
				nerr++;
			}
			got_read |= k == SR_WRITES + 1;
		}
	}
	assert_true(got_read);
	/* what came after the READ: nothing is outstanding any more */
	struct dxl_wc extra[8];
	int n;
	while ((n = dxl_ctx_poll(x->c, extra, 8)) > 0)
		for (int i = 0; i < n; i++) {
			int k = extra[i].wr_id == 200 ? SR_WRITES : (int)(extra[i].wr_id - 100);
			assert_true(k >= 0 && k < SR_WRITES + 1);
			st[k] = extra[i].status;
			nerr += extra[i].status != DXL_WC_SUCCESS;
		}
	CHECK(dxlt_peer_signal(x->peer, SIGCONT));
	usleep(2 * tmo * 1000); /* the resumed peer runs for twice the timeout */
	int landed = 0, held = 0;
	for (int i = 0; i < SR_WRITES; i++) {
		uint8_t got[64], want[64];
		CHECK(dxlt_peer_mr_read(x->peer, x->rreg, SR_BASE + (uint64_t)i * 64,
					got, 64));
		memset(want, 0xC0 + i, 64);
		if (st[i] == DXL_WC_SUCCESS) {
			assert_memory_equal(got, want, 64);
			landed++;
		} else {
			if (memcmp(got, x->shadow + SR_BASE + (size_t)i * 64, 64))
				fail_msg("WRITE %d completed %s, but its data reached the "
					 "peer after it resumed", i,
					 dxl_wc_status_str(st[i]));
			held++;
		}
	}
	uint64_t faa_was;
	memcpy(&faa_was, x->shadow + faa_off, 8);
	uint64_t faa_now = peer_u64(x, faa_off);
	if (st[SR_WRITES] == DXL_WC_SUCCESS) {
		assert_int_equal(faa_now, faa_was + 1);
	} else if (faa_now != faa_was) {
		fail_msg("FAA completed %s, but it executed after the peer resumed",
			 dxl_wc_status_str(st[SR_WRITES]));
	}
	print_message("  stopped, timed out, resumed for %u ms: %d requests "
		      "completed in error and did not execute, %d succeeded and "
		      "did\n", 2 * tmo, held + (st[SR_WRITES] != DXL_WC_SUCCESS),
		      landed + (st[SR_WRITES] == DXL_WC_SUCCESS));
	if (nic_in_process(x->cfg.provider)) {
		/* the stopped process is the NIC: everything failed, so the
		 * check above covered every request */
		assert_int_equal(nerr, SR_WRITES + 2);
		assert_int_equal(held, SR_WRITES);
	}
	/* the resumed peer serves a new QP, and its memory is as checked */
	struct dxl_qp *q2 = fx_connect_ctx(x, 0);
	CHECK_WC(dxlt_read(x->c, q2, ldst(x, 4096), x->lkey, raddr(x, SR_BASE),
			   x->rd.rkey, 64), DXL_WC_SUCCESS);
	if (st[0] != DXL_WC_SUCCESS)
		assert_memory_equal(ldst(x, 4096), x->shadow + SR_BASE, 64);
	dxl_qp_delete(&q2);
}

/* ========================================================================== */
/* power-failure model (tcp provider)                                         */
/* ========================================================================== */

static void test_power_fail_model(void **state)
{
	struct fx *x = *state;
	if (dxlt_test_provider() != DXL_FABRIC_TCP) {
		print_message("  SKIPPED: the power-failure model exists only in the "
			      "tcp provider (fabric.h); provider is %s\n",
			      dxl_fabric_provider_name(dxlt_test_provider()));
		skip();
	}
	fx_std(x, NULL);
	snprintf(x->tmpdir, sizeof(x->tmpdir), "/tmp/dxlt-conf-XXXXXX");
	assert_non_null(mkdtemp(x->tmpdir));
	char path[200];
	snprintf(path, sizeof(path), "%s/pmem0", x->tmpdir);
	struct dxl_mr_desc pd;
	struct dxlt_region_opts o = {.len = 8192,
				     .access = DXL_MR_REMOTE_READ |
					       DXL_MR_REMOTE_WRITE |
					       DXL_MR_PERSISTENT,
				     .fill = DXLT_FILL_PATTERN, .seed = 0x5000,
				     .path = path};
	int reg = dxlt_peer_mr_reg(x->peer, &o, &pd);
	CHECK(reg);
	uint64_t pending = 99;
	CHECK(dxlt_peer_pending_lines(x->peer, &pending));
	assert_int_equal(pending, 0);

	/* QP 2: WRITE [4096, 8192) + READ on the same QP -> durable (H9) */
	struct dxl_qp *qp2 = fx_connect_ctx(x, 0);
	dxlt_pattern_fill(lsrc(x, 4096), 4096, 0x5002, 0);
	struct dxl_wr rd = {.wr_id = 2, .op = DXL_WR_READ,
			    .flags = DXL_WR_SIGNALED, .local = ldst(x, 0),
			    .len = 8, .lkey = x->lkey, .remote_addr = pd.addr + 4096,
			    .rkey = pd.rkey};
	struct dxl_wr wr = {.wr_id = 1, .op = DXL_WR_WRITE, .local = lsrc(x, 4096),
			    .len = 4096, .lkey = x->lkey,
			    .remote_addr = pd.addr + 4096, .rkey = pd.rkey,
			    .next = &rd};
	CHECK(dxl_qp_post(qp2, &wr, NULL));
	struct dxl_wc wc = wait_one(x);
	CHECK_WC(wc.status, DXL_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 2);
	CHECK(dxlt_peer_pending_lines(x->peer, &pending));
	assert_int_equal(pending, 0);

	/* QP 1, afterwards: WRITE [0, 4096), completed but never flushed */
	dxlt_pattern_fill(lsrc(x, 0), 4096, 0x5001, 0);
	CHECK_WC(dxlt_write(x->c, x->qp, lsrc(x, 0), x->lkey, pd.addr, pd.rkey,
			    4096), DXL_WC_SUCCESS);
	CHECK(dxlt_peer_pending_lines(x->peer, &pending));
	assert_int_equal(pending, 4096 / 64);
	uint8_t *now = snap(x, reg, 0, 8192); /* placed: visible to the CPU */
	CHECK_PATTERN(now, 4096, 0x5001, 0);
	CHECK_PATTERN(now + 4096, 4096, 0x5002, 0);
	free(now);

	CHECK(dxlt_peer_power_fail(x->peer, DXL_PF_ALL, 1));
	dxl_qp_delete(&qp2);
	/* the file holds what survived */
	uint8_t img[8192];
	FILE *fp = fopen(path, "rb");
	assert_non_null(fp);
	assert_int_equal(fread(img, 1, sizeof(img), fp), sizeof(img));
	fclose(fp);
	CHECK_PATTERN(img, 4096, 0x5000, 0);           /* lost: old bytes */
	CHECK_PATTERN(img + 4096, 4096, 0x5002, 0);    /* flushed: new */
}

/* ========================================================================== */
/* a receive pending on a deleted QP                                          */
/* ========================================================================== */

struct two_sends_arg {
	char addr[DXL_FABRIC_ADDR_MAX]; /* the test's fabric, ctx 0 */
	uint64_t flag_addr;             /* a word of the test's to set to 1 */
	uint32_t flag_rkey;
	uint32_t pad;
};

/* job in the peer: connect to the test's ctx 0, SEND "first", SEND
 * "second" (each signalled: delivered when it completes), then WRITE 1
 * into the test's flag word: the second message is in a receive buffer by
 * then. The QP stays open until the test has looked. */
static int job_two_sends(struct dxlt_peer_self *self, const void *arg,
			 size_t arg_len, void **out, size_t *out_len)
{
	struct two_sends_arg a;
	if (arg_len != sizeof(a))
		return DXL_E_INVAL;
	memcpy(&a, arg, sizeof(a));
	struct dxl_ctx *c = NULL;
	struct dxl_qp *qp = NULL;
	int ret = dxl_ctx_new(dxlt_self_fabric(self), 9, &c);
	if (!ret)
		ret = dxl_qp_connect(c, a.addr, 0, &qp);
	static char first[8] = "first", second[8] = "second";
	static uint64_t one = 1;
	struct dxl_wr w[3] = {
		{.wr_id = 1, .op = DXL_WR_SEND, .local = first, .len = 8,
		 .flags = DXL_WR_SIGNALED | DXL_WR_INLINE},
		{.wr_id = 2, .op = DXL_WR_SEND, .local = second, .len = 8,
		 .flags = DXL_WR_SIGNALED | DXL_WR_INLINE},
		{.wr_id = 3, .op = DXL_WR_WRITE, .local = &one, .len = 8,
		 .flags = DXL_WR_SIGNALED | DXL_WR_INLINE,
		 .remote_addr = a.flag_addr, .rkey = a.flag_rkey},
	};
	for (int i = 0; !ret && i < 3; i++) {
		if (i == 1)
			usleep(100000); /* the test has seen the first by then */
		ret = dxl_qp_post(qp, &w[i], NULL);
		struct dxl_wc wc;
		if (!ret && dxlt_wait_wc(c, &wc, 1, dxlt_wait_ms()) != 1)
			ret = DXL_E_TIMEDOUT;
		if (!ret && wc.status != DXL_WC_SUCCESS)
			ret = dxl_err_set(DXL_E_IO, "request %d: %s", i,
					  dxl_wc_status_str(wc.status));
	}
	usleep(500000);
	dxl_qp_delete(&qp);
	dxl_ctx_delete(&c);
	return ret;
}

/*
 * A message waits in a receive buffer for its (passive) QP when the QP is
 * deleted: the buffer comes back to the user as a RECV completion with
 * DXL_WC_FLUSHED, its wr_id, byte_len 0 and no QP (fabric.h), on every
 * provider -- never lost (the receive queue would shrink for good).
 */
static void test_recv_of_deleted_qp(void **state)
{
	struct fx *x = *state;
	fx_open(x, NULL);
	fx_peer(x);
	uint64_t *flag = dxlt_alloc_pages(4096);
	assert_non_null(flag);
	struct dxl_mr *fmr;
	CHECK(dxl_mr_reg(x->f, flag, 4096, DXL_MR_LOCAL_WRITE | DXL_MR_REMOTE_WRITE,
			 &fmr));
	struct dxl_mr_desc fd;
	dxl_mr_desc(fmr, &fd);
	CHECK(dxl_ctx_post_recv(x->c, ldst(x, 0), 64, x->lkey, 501));
	CHECK(dxl_ctx_post_recv(x->c, ldst(x, 64), 64, x->lkey, 502));
	struct two_sends_arg a = {.flag_addr = fd.addr, .flag_rkey = fd.rkey};
	snprintf(a.addr, sizeof(a.addr), "%s", dxl_fabric_addr(x->f));
	CHECK(dxlt_peer_job_start(x->peer, "two_sends", &a, sizeof(a)));
	struct dxl_wc wc;
	assert_int_equal(dxlt_wait_wc(x->c, &wc, 1, dxlt_wait_ms()), 1);
	assert_int_equal(wc.wr_id, 501);
	CHECK_WC(wc.status, DXL_WC_SUCCESS);
	assert_int_equal(wc.opcode, DXL_WC_RECV);
	assert_memory_equal(ldst(x, 0), "first", 6);
	struct dxl_qp *pq = wc.qp;
	assert_non_null(pq);
	assert_int_equal(dxl_qp_is_passive(pq), 1);
	/* the second message is in buffer 502 once the flag is set; do not
	 * poll meanwhile */
	uint64_t end = dxl_now_ms() + (uint64_t)dxlt_wait_ms();
	while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE) && dxl_now_ms() < end)
		usleep(1000);
	assert_int_equal(__atomic_load_n(flag, __ATOMIC_ACQUIRE), 1);
	dxl_qp_delete(&pq);
	memset(&wc, 0xff, sizeof(wc));
	int n = dxlt_wait_wc(x->c, &wc, 1, 2000);
	if (n != 1)
		fail_msg("the buffer of a message for a deleted QP never came back");
	assert_int_equal(wc.wr_id, 502);
	assert_int_equal(wc.opcode, DXL_WC_RECV);
	CHECK_WC(wc.status, DXL_WC_FLUSHED);
	assert_int_equal(wc.byte_len, 0);
	assert_null(wc.qp);
	print_message("  a message pending on a deleted QP: its buffer came back "
		      "FLUSHED with no QP\n");
	int job_rc = -1;
	void *out = NULL;
	size_t out_len = 0;
	CHECK(dxlt_peer_job_wait(x->peer, &job_rc, &out, &out_len));
	free(out);
	CHECK(job_rc);
	expect_no_wc(x);
	dxl_mr_dereg(&fmr);
	dxlt_free_pages(flag, 4096);
}

/* ========================================================================== */

static const struct dxlt_job jobs[] = {
	{"atomic_client", job_atomic_client},
	{"two_sends", job_two_sends},
	{NULL, NULL},
};

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	dxlt_peer_child_hook(jobs);
	enum dxl_fabric_provider prov = dxlt_test_provider();
	printf("fabric conformance: provider=%s host=%s\n",
	       dxl_fabric_provider_name(prov), dxlt_test_host());
	fflush(stdout);
	const char *filter = getenv("DXL_TEST_FILTER");
	if (filter && *filter)
		cmocka_set_test_filter(filter);

	const struct CMUnitTest tests[] = {
		T(test_mr_desc_roundtrip),
		T(test_read_write_sizes),
		T(test_inline_write),
		T(test_cas_faa_values),
		T(test_atomic_concurrency),
		T(test_order_write_then_read),
		T(test_order_atomic_then_read),
		T(test_order_completions),
		T(test_doorbell_chains),
		T(test_unsignalled_flood_sq16),
		T(test_unsignalled_flood_default),
		T(test_err_bad_rkey),
		T(test_err_out_of_bounds_end),
		T(test_err_below_start),
		T(test_err_address_wrap),
		T(test_err_misaligned_atomic),
		T(test_err_no_write_access),
		T(test_err_no_read_access),
		T(test_err_no_atomic_access),
		T(test_mr_dereg_remote),
		T(test_send_recv_echo),
		T(test_recv_fifo),
		T(test_send_too_large),
		T(test_recv_of_deleted_qp),
		T(test_connect_errors),
		T(test_post_validation),
		T(test_dead_peer_signalled),
		T(test_dead_peer_unsignalled),
		T(test_stopped_peer),
		T(test_stopped_peer_resumed),
		T(test_power_fail_model),
	};
	char name[64];
	snprintf(name, sizeof(name), "fabric_conformance_%s",
		 dxl_fabric_provider_name(prov));
	return cmocka_run_group_tests_name(name, tests, NULL, NULL);
}
