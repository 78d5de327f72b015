/* test_tcp_malformed.c -- the NIC thread survives garbage on its sockets */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "fabric/tcp_wire.h"
#include "test_tcp_util.h"

/*
 * A target fabric (its NIC thread) with one region, a well-behaved QP from
 * another fabric, and raw TCP sockets that send it malformed handshakes and
 * frames. After each attack the target has closed the raw connection, and
 * the well-behaved QP still works.
 */

struct env {
	struct dxl_fabric *fa, *fb;
	struct dxl_ctx *ca, *cb;
	struct dxl_qp *qp;
	uint8_t *mem, *loc;
	struct dxl_mr *mr;
	struct dxl_mr_desc d;
	uint16_t port;
};

static struct env E;

static int setup(void **state)
{
	memset(&E, 0, sizeof(E));
	E.fa = tt_fabric(1, 300, 0);
	E.fb = tt_fabric(2, 300, 0); /* handshake timeout 300 ms */
	if (!E.fa || !E.fb)
		return -1;
	E.mem = calloc(1, 4096);
	E.loc = calloc(1, 4096);
	if (dxl_ctx_new(E.fa, 0, &E.ca) || dxl_ctx_new(E.fb, 0, &E.cb) ||
	    dxl_mr_reg(E.fb, E.mem, 4096,
		       DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE, &E.mr) ||
	    dxl_qp_connect(E.ca, dxl_fabric_addr(E.fb), 0, &E.qp))
		return -1;
	dxl_mr_desc(E.mr, &E.d);
	char host[64];
	return dxl_parse_hostport(dxl_fabric_addr(E.fb), host, sizeof(host),
				  &E.port);
}

static int teardown(void **state)
{
	dxl_fabric_delete(&E.fa);
	dxl_fabric_delete(&E.fb);
	free(E.mem);
	free(E.loc);
	return 0;
}

/* the well-behaved QP: WRITE a value, READ it back */
static void check_alive(void)
{
	static uint64_t v = 100;
	v++;
	memcpy(E.loc, &v, 8);
	struct dxl_wr w = {.op = DXL_WR_WRITE, .local = E.loc, .len = 8,
			   .remote_addr = E.d.addr, .rkey = E.d.rkey};
	struct dxl_wc wc;
	assert_int_equal(tt_do(E.qp, E.ca, &w, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	struct dxl_wr r = {.op = DXL_WR_READ, .local = E.loc + 8, .len = 8,
			   .remote_addr = E.d.addr, .rkey = E.d.rkey};
	assert_int_equal(tt_do(E.qp, E.ca, &r, &wc), 0);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_memory_equal(E.loc + 8, &v, 8);
}

static int raw_connect(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(E.port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return s;
}

/* a raw connection that completed a valid handshake with ctx 0 */
static int raw_open(void)
{
	static uint64_t conn_id;
	int s = raw_connect();
	uint8_t b[TCP_HS_REQ_SIZE];
	struct tcp_hs h = {.magic = TCP_MAGIC, .version = TCP_VERSION, .node = 9,
			   .nonce = 0x5eed, .conn = ++conn_id};
	tcp_hs_req_encode(&h, b);
	tt_write_full(s, b, sizeof(b));
	assert_int_equal(tt_read_full(s, b, TCP_HS_SIZE, TT_WAIT_MS), 0);
	tcp_hs_decode(b, &h);
	assert_int_equal(h.magic, TCP_MAGIC);
	assert_int_equal(h.status, TCP_HS_OK);
	return s;
}

/* true if the peer closes the connection within ms (data before is skipped) */
static bool closed_within(int s, int ms)
{
	uint64_t end = dxl_now_ms() + (uint64_t)ms;
	for (;;) {
		uint64_t now = dxl_now_ms();
		if (now >= end)
			return false;
		struct pollfd p = {.fd = s, .events = POLLIN};
		if (poll(&p, 1, (int)(end - now)) <= 0)
			continue;
		char b[256];
		ssize_t n = recv(s, b, sizeof(b), 0);
		if (n <= 0)
			return true;
	}
}

static void send_frame(int s, const struct tcp_frame *fr, const void *payload,
		       size_t plen)
{
	uint8_t b[TCP_FRAME_SIZE];
	tcp_frame_encode(fr, b);
	tt_write_full(s, b, sizeof(b));
	if (plen)
		tt_write_full(s, payload, plen);
}

static void test_garbage_handshake(void **state)
{
	int s = raw_connect();
	const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
	tt_write_full(s, junk, sizeof(junk));
	assert_true(closed_within(s, TT_WAIT_MS));
	close(s);
	check_alive();
	/* a handshake cut short: closed after the handshake timeout */
	s = raw_connect();
	tt_write_full(s, "\x54\x44\x58", 3);
	uint64_t t0 = dxl_now_ms();
	assert_true(closed_within(s, TT_WAIT_MS));
	assert_true(dxl_now_ms() - t0 >= 200);
	close(s);
	/* a connection that says nothing at all */
	s = raw_connect();
	assert_true(closed_within(s, TT_WAIT_MS));
	close(s);
	check_alive();
}

static void test_bad_opcode(void **state)
{
	int s = raw_open();
	struct tcp_frame fr = {.op = 99, .len = 8};
	send_frame(s, &fr, NULL, 0);
	assert_true(closed_within(s, TT_WAIT_MS));
	close(s);
	check_alive();
	/* opcode 0 and a RESP-only opcode value out of range */
	for (uint8_t op = 0; op < 255; op += 7) {
		if (op >= TCP_OP_READ && op <= TCP_OP_RESP)
			continue;
		s = raw_open();
		fr.op = op;
		send_frame(s, &fr, NULL, 0);
		assert_true(closed_within(s, TT_WAIT_MS));
		close(s);
	}
	check_alive();
}

static void test_oversize_length(void **state)
{
	/* a WRITE over the READ/WRITE limit */
	int s = raw_open();
	struct tcp_frame fr = {.op = TCP_OP_WRITE, .len = 0xFFFFFFF0u,
			       .rkey = E.d.rkey, .raddr = E.d.addr};
	send_frame(s, &fr, "abcdefgh", 8);
	assert_true(closed_within(s, TT_WAIT_MS));
	close(s);
	/* a SEND over max_msg */
	s = raw_open();
	struct tcp_frame f2 = {.op = TCP_OP_SEND, .len = 1u << 30};
	send_frame(s, &f2, NULL, 0);
	assert_true(closed_within(s, TT_WAIT_MS));
	close(s);
	/* an atomic whose length is not 8 */
	s = raw_open();
	struct tcp_frame f3 = {.op = TCP_OP_FAA, .len = 16, .rkey = E.d.rkey,
			       .raddr = E.d.addr};
	send_frame(s, &f3, NULL, 0);
	assert_true(closed_within(s, TT_WAIT_MS));
	close(s);
	check_alive();
	assert_int_equal(E.mem[100], 0); /* nothing was placed */
}

static void test_truncated_and_misc(void **state)
{
	/* half a header, then the sender goes away */
	int s = raw_open();
	uint8_t b[TCP_FRAME_SIZE];
	struct tcp_frame fr = {.op = TCP_OP_READ, .len = 8, .rkey = E.d.rkey,
			       .raddr = E.d.addr};
	tcp_frame_encode(&fr, b);
	tt_write_full(s, b, 20);
	shutdown(s, SHUT_WR);
	assert_true(closed_within(s, TT_WAIT_MS));
	close(s);
	/* a WRITE whose payload never fully arrives */
	s = raw_open();
	struct tcp_frame w = {.op = TCP_OP_WRITE, .len = 1000, .rkey = E.d.rkey,
			      .raddr = E.d.addr + 1024};
	send_frame(s, &w, "xxxx", 4);
	shutdown(s, SHUT_WR);
	assert_true(closed_within(s, TT_WAIT_MS));
	close(s);
	/* a sequence gap, a reserved byte, an answer nobody asked for */
	struct tcp_frame bad[3] = {
		{.op = TCP_OP_READ, .len = 8, .seq = 5, .rkey = E.d.rkey,
		 .raddr = E.d.addr},
		{.op = TCP_OP_READ, .len = 8, .zero = 1, .rkey = E.d.rkey,
		 .raddr = E.d.addr},
		{.op = TCP_OP_RESP, .rop = TCP_OP_READ, .len = 8},
	};
	for (int i = 0; i < 3; i++) {
		s = raw_open();
		tcp_frame_encode(&bad[i], b);
		b[3] = bad[i].zero;
		tt_write_full(s, b, sizeof(b));
		assert_true(closed_within(s, TT_WAIT_MS));
		close(s);
	}
	check_alive();
	/* a valid raw READ is answered (the format is what the header says) */
	s = raw_open();
	struct tcp_frame rd = {.op = TCP_OP_READ, .len = 8, .seq = 0,
			       .rkey = E.d.rkey, .raddr = E.d.addr};
	send_frame(s, &rd, NULL, 0);
	uint8_t ans[TCP_FRAME_SIZE + 8];
	assert_int_equal(tt_read_full(s, ans, sizeof(ans), TT_WAIT_MS), 0);
	struct tcp_frame a;
	tcp_frame_decode(ans, &a);
	assert_int_equal(a.op, TCP_OP_RESP);
	assert_int_equal(a.flags, TCP_ST_OK);
	assert_int_equal(a.len, 8);
	assert_memory_equal(ans + TCP_FRAME_SIZE, E.mem, 8);
	close(s);
}

/* random bytes after a valid handshake, many times: never a crash */
static void test_fuzz(void **state)
{
	uint64_t x = 0x9E3779B97F4A7C15ull;
	enum dxl_log_level lvl = dxl_log_get_level();
	if (lvl < DXL_LOG_ERROR)
		dxl_log_set_level(DXL_LOG_ERROR); /* 200 warnings say nothing */
	for (int i = 0; i < 200; i++) {
		int s = raw_open();
		uint8_t b[200];
		for (size_t k = 0; k < sizeof(b); k++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			b[k] = (uint8_t)x;
		}
		if (i % 2) { /* a plausible header with random fields */
			b[0] = (uint8_t)(1 + b[0] % 6);
			b[3] = 0;
		}
		tt_write_full(s, b, (size_t)(40 + i % 160));
		close(s);
	}
	check_alive();
	dxl_log_set_level(lvl);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_garbage_handshake),
		cmocka_unit_test(test_bad_opcode),
		cmocka_unit_test(test_oversize_length),
		cmocka_unit_test(test_truncated_and_misc),
		cmocka_unit_test(test_fuzz),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
