/* test_tcp_util.h -- helpers of the tcp provider's own tests (fabrics, waits, a forked target) */
#ifndef DXL_TEST_TCP_UTIL_H
#define DXL_TEST_TCP_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/fabric.h"

/*
 * Everything is static: each test binary includes this once. A "target" is
 * a child process (fork before the test process starts any thread) that
 * opens a fabric, registers one region (anonymous, or a MAP_SHARED file for
 * the power-failure tests), sends its address and region descriptor back
 * through a pipe and then obeys one-byte commands on another pipe. Every
 * wait is bounded; children die with their parent (PDEATHSIG) and after
 * alarm(60) at the latest.
 */

#define TT_WAIT_MS 10000

static inline struct dxl_fabric *tt_fabric(uint32_t node, uint32_t timeout_ms,
					   uint32_t sq_depth)
{
	struct dxl_fabric_cfg cfg;
	dxl_fabric_cfg_init(&cfg);
	cfg.node_id = node;
	if (timeout_ms)
		cfg.timeout_ms = timeout_ms;
	if (sq_depth)
		cfg.sq_depth = sq_depth;
	struct dxl_fabric *f = NULL;
	int ret = dxl_fabric_new(&cfg, &f);
	if (ret) {
		fprintf(stderr, "dxl_fabric_new: %s: %s\n", dxl_errname(ret),
			dxl_errmsg());
		return NULL;
	}
	return f;
}

/* wait for one completion, at most timeout_ms; 1 = got it, 0 = none */
static inline int tt_wait_wc(struct dxl_ctx *c, struct dxl_wc *wc, int timeout_ms)
{
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		int n = dxl_ctx_poll(c, wc, 1);
		if (n == 1)
			return 1;
		if (n < 0)
			return 0;
		uint64_t now = dxl_now_ms();
		if (now >= end)
			return 0;
		dxl_ctx_wait(c, (int)(end - now));
	}
}

/* post, polling (completions must not come) while the SQ is full */
static inline int tt_post(struct dxl_qp *qp, struct dxl_ctx *c, struct dxl_wr *wr)
{
	uint64_t end = dxl_now_ms() + TT_WAIT_MS;
	int ret;
	while ((ret = dxl_qp_post(qp, wr, NULL)) == DXL_E_AGAIN &&
	       dxl_now_ms() < end) {
		struct dxl_wc wc;
		if (dxl_ctx_poll(c, &wc, 1) != 0)
			return DXL_E_INTERNAL;
	}
	return ret;
}

/* post one request and wait for its completion */
static inline int tt_do(struct dxl_qp *qp, struct dxl_ctx *c, struct dxl_wr *wr,
			struct dxl_wc *wc)
{
	wr->flags |= DXL_WR_SIGNALED;
	int ret = tt_post(qp, c, wr);
	if (ret)
		return ret;
	return tt_wait_wc(c, wc, TT_WAIT_MS) ? 0 : DXL_E_TIMEDOUT;
}

/* ---- a target in a child process ----------------------------------------- */

struct tt_target_cfg {
	uint32_t node;
	uint32_t timeout_ms;
	size_t len;             /* region bytes */
	unsigned access;        /* DXL_MR_* */
	const char *path;       /* MAP_SHARED file (created, len bytes), or NULL */
	uint8_t fill;           /* initial byte of the region */
	int pf_signal;          /* 0 = off */
	enum dxl_pf_policy pf_policy;
	uint64_t pf_seed;
	bool post_recvs;        /* post 16 receive buffers of 256 B on ctx 0 */
	int idle_spin_us;       /* 0 = default, -1 = no spinning */
};

struct tt_target {
	pid_t pid;
	int cmd_fd;   /* parent -> child */
	int rep_fd;   /* child -> parent */
	char addr[DXL_FABRIC_ADDR_MAX];
	struct dxl_mr_desc desc;
};

static inline int tt_read_full(int fd, void *buf, size_t len, int timeout_ms)
{
	size_t done = 0;
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	while (done < len) {
		uint64_t now = dxl_now_ms();
		if (now >= end)
			return -1;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int r = poll(&p, 1, (int)(end - now));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		ssize_t n = read(fd, (char *)buf + done, len - done);
		if (n <= 0)
			return -1;
		done += (size_t)n;
	}
	return 0;
}

static inline void tt_write_full(int fd, const void *buf, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = write(fd, (const char *)buf + done, len - done);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			return;
		}
		done += (size_t)n;
	}
}

static inline void tt_child(const struct tt_target_cfg *tc, int cmd_fd, int rep_fd)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	alarm(60);
	struct dxl_fabric_cfg cfg;
	dxl_fabric_cfg_init(&cfg);
	cfg.node_id = tc->node;
	if (tc->timeout_ms)
		cfg.timeout_ms = tc->timeout_ms;
	cfg.pf_signal = tc->pf_signal;
	cfg.pf_policy = tc->pf_policy;
	cfg.pf_seed = tc->pf_seed;
	if (tc->idle_spin_us)
		cfg.idle_spin_us = tc->idle_spin_us < 0 ? 0 : (uint32_t)tc->idle_spin_us;
	uint8_t *mem;
	if (tc->path) {
		int fd = open(tc->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || ftruncate(fd, (off_t)tc->len))
			_exit(2);
		mem = mmap(NULL, tc->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
	} else {
		mem = mmap(NULL, tc->len, PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	}
	if (mem == MAP_FAILED)
		_exit(3);
	memset(mem, tc->fill, tc->len);
	struct dxl_fabric *f = NULL;
	struct dxl_ctx *c = NULL;
	struct dxl_mr *mr = NULL;
	if (dxl_fabric_new(&cfg, &f) || dxl_ctx_new(f, 0, &c) ||
	    dxl_mr_reg(f, mem, tc->len, tc->access, &mr))
		_exit(4);
	static uint8_t rbuf[16][256];
	if (tc->post_recvs)
		for (int i = 0; i < 16; i++)
			dxl_ctx_post_recv(c, rbuf[i], sizeof(rbuf[i]), 0, (uint64_t)i);
	char hello[DXL_FABRIC_ADDR_MAX + DXL_MR_DESC_WIRE_SIZE];
	memset(hello, 0, sizeof(hello));
	snprintf(hello, DXL_FABRIC_ADDR_MAX, "%s", dxl_fabric_addr(f));
	struct dxl_mr_desc d;
	dxl_mr_desc(mr, &d);
	dxl_mr_desc_encode(&d, hello + DXL_FABRIC_ADDR_MAX, DXL_MR_DESC_WIRE_SIZE);
	tt_write_full(rep_fd, hello, sizeof(hello));
	for (;;) {
		uint8_t cmd;
		/* poll first: under TSan a signal reaches a thread blocked in
		 * poll at once, one blocked in read only when read returns */
		struct pollfd pfd = {.fd = cmd_fd, .events = POLLIN};
		if (poll(&pfd, 1, -1) < 0)
			continue;
		ssize_t n = read(cmd_fd, &cmd, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || cmd == 'Q')
			break;
		uint64_t rep = 0;
		if (cmd == 'P') {
			rep = dxl_fabric_pending_lines(f);
		} else if (cmd == 'D') { /* mark_durable off, len */
			uint64_t a[2];
			if (tt_read_full(cmd_fd, a, sizeof(a), TT_WAIT_MS))
				break;
			dxl_mr_mark_durable(mr, mem + a[0], a[1]);
		} else if (cmd == 'F') { /* power-fail from this thread */
			uint64_t a[2];
			if (tt_read_full(cmd_fd, a, sizeof(a), TT_WAIT_MS))
				break;
			dxl_fabric_power_fail(f, (enum dxl_pf_policy)a[0], a[1]);
		} else if (cmd == 'A') { /* arm: policy, seed, steps, idle_ms */
			uint64_t a[4];
			if (tt_read_full(cmd_fd, a, sizeof(a), TT_WAIT_MS))
				break;
			rep = (uint64_t)(int64_t)dxl_fabric_power_fail_arm(
				f, (enum dxl_pf_policy)a[0], a[1], (uint32_t)a[2],
				(uint32_t)a[3]);
		}
		tt_write_full(rep_fd, &rep, sizeof(rep));
	}
	dxl_mr_dereg(&mr);
	dxl_ctx_delete(&c);
	dxl_fabric_delete(&f);
	_exit(0);
}

static inline int tt_target_start(const struct tt_target_cfg *tc, struct tt_target *t)
{
	int cmd[2], rep[2];
	if (pipe(cmd) || pipe(rep))
		return -1;
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		close(cmd[1]);
		close(rep[0]);
		tt_child(tc, cmd[0], rep[1]);
	}
	close(cmd[0]);
	close(rep[1]);
	memset(t, 0, sizeof(*t));
	t->pid = pid;
	t->cmd_fd = cmd[1];
	t->rep_fd = rep[0];
	char hello[DXL_FABRIC_ADDR_MAX + DXL_MR_DESC_WIRE_SIZE];
	if (tt_read_full(t->rep_fd, hello, sizeof(hello), TT_WAIT_MS))
		return -1;
	memcpy(t->addr, hello, DXL_FABRIC_ADDR_MAX);
	t->addr[DXL_FABRIC_ADDR_MAX - 1] = '\0';
	return dxl_mr_desc_decode(hello + DXL_FABRIC_ADDR_MAX,
				  DXL_MR_DESC_WIRE_SIZE, &t->desc);
}

/* send a command with optional arguments; returns the reply or -1 */
static inline int64_t tt_target_cmd(struct tt_target *t, char cmd,
				    const uint64_t *args, size_t nargs)
{
	tt_write_full(t->cmd_fd, &cmd, 1);
	if (nargs)
		tt_write_full(t->cmd_fd, args, nargs * sizeof(*args));
	uint64_t rep;
	if (tt_read_full(t->rep_fd, &rep, sizeof(rep), TT_WAIT_MS))
		return -1;
	return (int64_t)rep;
}

/* wait for the child to end, at most timeout_ms, else SIGKILL it; status */
static inline int tt_target_reap(struct tt_target *t, int timeout_ms)
{
	int status = -1;
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		pid_t r = waitpid(t->pid, &status, WNOHANG);
		if (r == t->pid)
			break;
		if (r < 0 && errno != EINTR) {
			fprintf(stderr, "waitpid %d: %s\n", (int)t->pid,
				strerror(errno));
			status = -1;
			break;
		}
		if (dxl_now_ms() >= end) {
			kill(t->pid, SIGKILL);
			waitpid(t->pid, &status, 0);
			status = -2;
			break;
		}
		usleep(2000);
	}
	close(t->cmd_fd);
	close(t->rep_fd);
	t->pid = -1;
	return status;
}

static inline int tt_target_stop(struct tt_target *t)
{
	char q = 'Q';
	tt_write_full(t->cmd_fd, &q, 1);
	return tt_target_reap(t, TT_WAIT_MS);
}

#endif /* DXL_TEST_TCP_UTIL_H */
