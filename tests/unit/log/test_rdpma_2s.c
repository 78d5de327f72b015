/* test_rdpma_2s.c -- two-sided PWrite: an RPC whose handler persists with ntstores
 *
 * The fabrics use the provider the environment names (DXL_TEST_PROVIDER ...,
 * tests/lib/fabric_fixture.h). On tcp the owner is power-failed at the end
 * (the tcp provider's model: un-flushed NIC writes are lost); other
 * providers have no power-failure model, so there the owner is SIGKILLed
 * instead and the same data must be in its region file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/co.h"
#include "dxl/fabric.h"
#include "dxl/log.h"
#include "dxl/rpc.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/log_replica.h"

static const struct dxl_region_id ID = {.cluster = "t", .node_id = 1, .kind = 5};

struct info {
	int32_t status; /* 0, or the server's set-up error (message in err) */
	char err[256];
	char addr[DXL_FABRIC_ADDR_MAX];
	struct dxl_mr_desc desc;
};

/* the owner: serves two-sided PWrite on a region; on tcp, SIGUSR2
 * power-fails it */
static void server(const char *path, int wfd)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct dxl_fabric_cfg fc;
	dxlt_fabric_cfg_from_env(&fc);
	if (fc.provider == DXL_FABRIC_TCP) {
		fc.pf_signal = SIGUSR2;
		fc.pf_policy = DXL_PF_ALL;
	}
	struct dxl_fabric *f;
	struct dxl_region *r;
	struct dxl_mr *mr;
	struct dxl_ctx *c;
	struct dxl_sched *s;
	struct dxl_rpc *rpc;
	struct dxl_rdpma_server *srv;
	struct info in = {0};
	if ((in.status = dxl_fabric_new(&fc, &f)) ||
	    (in.status = dxl_region_create(path, 1 << 20, DXL_DUR_PROCESS, &ID, &r)) ||
	    (in.status = dxl_mr_reg(f, dxl_region_data(r), dxl_region_data_size(r),
				    DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE |
					    DXL_MR_PERSISTENT,
				    &mr)) ||
	    (in.status = dxl_ctx_new(f, 0, &c)) ||
	    (in.status = dxl_sched_new(NULL, c, &s)) ||
	    (in.status = dxl_rpc_new(s, NULL, &rpc)) ||
	    (in.status = dxl_rdpma_serve(rpc, r, mr, &srv))) {
		fprintf(stderr, "server: %s\n", dxl_errmsg());
		snprintf(in.err, sizeof(in.err), "%s", dxl_errmsg());
		if (write(wfd, &in, sizeof(in)) != sizeof(in))
			_exit(3);
		_exit(2);
	}
	snprintf(in.addr, sizeof(in.addr), "%s", dxl_fabric_addr(f));
	dxl_mr_desc(mr, &in.desc);
	if (write(wfd, &in, sizeof(in)) != sizeof(in))
		_exit(3);
	dxl_sched_serve(s);
	_exit(0);
}

struct client {
	struct dxl_rpc *rpc;
	struct dxl_ctx *c;
	struct info in;
	int results[6];
	char msg[256];
};

static void client_co(void *arg)
{
	struct client *cl = arg;
	struct dxl_qp *qp;
	if (dxl_qp_connect(cl->c, cl->in.addr, 0, &qp)) {
		cl->results[0] = -1;
		return;
	}
	struct dxl_fatptr fp = {.addr = cl->in.desc.addr + 4096, .len = 8192,
				.rkey = cl->in.desc.rkey, .node = 1};
	static uint8_t data[8192];
	for (int i = 0; i < 8192; i++)
		data[i] = (uint8_t)(i * 13 + 1);
	cl->results[0] = dxl_rdpma_pwrite_2s(cl->rpc, qp, &fp, 0, data, 8000);
	cl->results[1] = dxl_rdpma_pwrite_2s(cl->rpc, qp, &fp, 8000, data, 192);
	/* a stale rkey, and an address outside the region: refused */
	struct dxl_fatptr bad = fp;
	bad.rkey ^= 0x77;
	cl->results[2] = dxl_rdpma_pwrite_2s(cl->rpc, qp, &bad, 0, data, 64);
	snprintf(cl->msg, sizeof(cl->msg), "%s", dxl_errmsg());
	bad = fp;
	bad.addr = cl->in.desc.addr + cl->in.desc.len - 32;
	cl->results[3] = dxl_rdpma_pwrite_2s(cl->rpc, qp, &bad, 0, data, 64);
	/* outside the fat pointer: refused before sending */
	cl->results[4] = dxl_rdpma_pwrite_2s(cl->rpc, qp, &fp, 8190, data, 8);
	/* over the RPC's payload limit: refused before sending */
	struct dxl_fatptr big = fp;
	big.len = 512 * 1024;
	static uint8_t large[64 * 1024];
	cl->results[5] = dxl_rdpma_pwrite_2s(cl->rpc, qp, &big, 0, large,
					     (uint32_t)dxl_rpc_max_payload(cl->rpc));
}

static void test_pwrite_2s_persists_through_the_owner(void **state)
{
	alarm(60);
	char dir[] = "/tmp/dxl-test-2s-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[128];
	snprintf(path, sizeof(path), "%s/region", dir);
	int p[2];
	assert_int_equal(pipe(p), 0);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		server(path, p[1]);
	}
	close(p[1]);
	struct client cl = {0};
	assert_int_equal(read(p[0], &cl.in, sizeof(cl.in)), (ssize_t)sizeof(cl.in));
	close(p[0]);
	if (cl.in.status) {
		int st;
		waitpid(pid, &st, 0);
		unlink(path);
		rmdir(dir);
		alarm(0);
		dxl_err_set(cl.in.status, "server: %s", cl.in.err);
		if (dxl_test_nodev_skip(cl.in.status))
			skip();
		fail_msg("the server did not start: %s", cl.in.err);
	}

	struct dxl_fabric *f;
	struct dxl_sched *s;
	struct dxl_fabric_cfg fc;
	dxlt_fabric_cfg_from_env(&fc);
	assert_int_equal(dxl_fabric_new(&fc, &f), 0);
	assert_int_equal(dxl_fabric_provider(f), dxlt_test_provider());
	assert_int_equal(dxl_ctx_new(f, 0, &cl.c), 0);
	assert_int_equal(dxl_sched_new(NULL, cl.c, &s), 0);
	assert_int_equal(dxl_rpc_new(s, NULL, &cl.rpc), 0);
	assert_int_equal(dxl_sched_spawn(s, client_co, &cl, NULL), 0);
	assert_int_equal(dxl_sched_run(s), 0);
	assert_int_equal(cl.results[0], 0);
	assert_int_equal(cl.results[1], 0);
	assert_int_equal(cl.results[2], DXL_E_ACCESS);
	assert_non_null(strstr(cl.msg, "refused"));
	assert_int_equal(cl.results[3], DXL_E_ACCESS);
	assert_int_equal(cl.results[4], DXL_E_INVAL);
	assert_int_equal(cl.results[5], DXL_E_TOOBIG);

	/* power-fail the owner losing every un-flushed NIC write: what its CPU
	 * persisted stays. Without the tcp model: a crash (SIGKILL), after which
	 * the same must be in the region file. */
	const int tcp = dxlt_test_provider() == DXL_FABRIC_TCP;
	if (!tcp)
		print_message("  %s has no power-failure model: the owner is "
			      "SIGKILLed instead of power-failed\n",
			      dxl_fabric_provider_name(dxlt_test_provider()));
	kill(pid, tcp ? SIGUSR2 : SIGKILL);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	if (!tcp)
		assert_int_equal(WTERMSIG(st), SIGKILL);
	struct dxl_region *r;
	assert_int_equal(dxl_region_open(path, DXL_DUR_PROCESS, &ID, &r), 0);
	const uint8_t *d = (const uint8_t *)dxl_region_data(r) + 4096;
	for (int i = 0; i < 8000; i++)
		assert_int_equal(d[i], (uint8_t)(i * 13 + 1));
	for (int i = 0; i < 192; i++)
		assert_int_equal(d[8000 + i], (uint8_t)(i * 13 + 1));
	/* the refused write near the end changed nothing */
	const uint8_t *end = (const uint8_t *)dxl_region_data(r) + cl.in.desc.len - 32;
	for (int i = 0; i < 32; i++)
		assert_int_equal(end[i], 0);
	dxl_region_close(&r);

	dxl_ctx_delete(&cl.c);
	dxl_rpc_delete(&cl.rpc);
	dxl_sched_delete(&s);
	dxl_fabric_delete(&f);
	unlink(path);
	rmdir(dir);
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pwrite_2s_persists_through_the_owner),
	};
	return cmocka_run_group_tests_name("rdpma two-sided", tests, NULL, NULL);
}
