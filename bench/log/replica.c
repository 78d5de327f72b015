/* replica.c -- the benchmark's replica processes */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/log/bench_log.h"
#include "common/common.h"
#include "dxl/replica.h"

static void serve(const char *dir, uint32_t node, uint32_t nrings,
		  uint64_t ring_size, enum dxl_durability mode,
		  uint32_t apply_us, int wfd)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct dxl_shard_cfg sc = {.node_id = node, .shard = 0, .nrings = nrings,
				   .ring_size = ring_size, .durability = mode,
				   .create = true};
	snprintf(sc.cluster, sizeof(sc.cluster), "bench");
	struct dxl_fabric *f = NULL;
	struct dxl_shard *sh = NULL;
	struct dxl_ctx *c = NULL;
	struct dxl_fabric_cfg fc;
	dxl_fabric_cfg_init(&fc);
	fc.node_id = node;
	int ret = dxl_fabric_new(&fc, &f);
	if (!ret) /* DIR/shard-0.log: create, register, bind (msync mode:
		     flush READs msync what they make durable) */
		ret = dxl_shard_open(dir, &sc, f, &sh);
	if (!ret)
		ret = dxl_ctx_new(f, 0, &c);
	struct dxl_log_target t[BL_MAX_WRITERS];
	memset(t, 0, sizeof(t));
	if (!ret)
		ret = dxl_shard_targets(sh, dxl_fabric_addr(f), 0, t, nrings);
	struct dxl_logstore *ls = ret ? NULL : dxl_shard_logstore(sh);
	int32_t st = ret;
	if (ret)
		fprintf(stderr, "bench replica %u: %s\n", node, dxl_errmsg());
	if (write(wfd, &st, sizeof(st)) != sizeof(st) ||
	    (!ret && write(wfd, t, sizeof(t)) != sizeof(t)))
		_exit(3);
	close(wfd);
	if (ret)
		_exit(2);
	for (;;) {
		usleep(apply_us);
		for (uint32_t i = 0; i < nrings; i++)
			dxl_ring_advance_head(ls, i);
	}
}

int bl_replica_start(struct bl_replica *r, const char *dir, uint32_t node,
		     uint32_t nrings, uint64_t ring_size,
		     enum dxl_durability mode, uint32_t apply_us)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->dir, sizeof(r->dir), "%s", dir);
	if (mkdir(dir, 0700) && errno != EEXIST)
		return dxl_err_errno(errno, "mkdir %s", dir);
	int p[2];
	if (pipe(p))
		return dxl_err_errno(errno, "pipe");
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return dxl_err_errno(errno, "fork");
	if (pid == 0) {
		close(p[0]);
		serve(dir, node, nrings, ring_size, mode, apply_us, p[1]);
		_exit(0);
	}
	close(p[1]);
	r->pid = pid;
	int32_t st = DXL_E_IO;
	ssize_t n = read(p[0], &st, sizeof(st));
	if (n == sizeof(st) && st == 0)
		n = read(p[0], r->target, sizeof(r->target));
	close(p[0]);
	if (n <= 0 || st) {
		bl_replica_stop(r);
		return dxl_err_set(st ? st : DXL_E_IO, "replica %u did not start", node);
	}
	return 0;
}

void bl_replica_stop(struct bl_replica *r)
{
	if (r->pid > 0) {
		kill(r->pid, SIGKILL);
		while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
			;
		r->pid = 0;
	}
}
