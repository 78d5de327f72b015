/* log_replica.c -- a log replica in a child process (see log_replica.h) */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "tests/lib/fabric_fixture.h"
#include "dxl/replica.h"
#include "dxl/log.h"
#include "tests/lib/log_replica.h"

static const char CLUSTER[] = "test";

static void shard_cfg(struct dxl_shard_cfg *sc, uint32_t node_id,
		      uint32_t nrings, uint64_t ring_size)
{
	memset(sc, 0, sizeof(*sc));
	snprintf(sc->cluster, sizeof(sc->cluster), "%s", CLUSTER);
	sc->node_id = node_id;
	sc->shard = 0;
	sc->nrings = nrings;
	sc->ring_size = ring_size;
	sc->durability = DXL_DUR_PROCESS;
}

/* the child's answer to one command from the parent: 'p' pause, 'r' resume
 * the persister, 's' its statistics */
static void serve_ctl(int cfd, int bfd, struct dxl_persister *ps)
{
	char c;
	if (read(cfd, &c, 1) != 1)
		_exit(0); /* the parent is gone */
	int32_t st = ps ? 0 : DXL_E_NOENT;
	struct dxl_persist_stats ps_st;
	memset(&ps_st, 0, sizeof(ps_st));
	if (ps && (c == 'p' || c == 'r'))
		dxl_persister_pause(ps, c == 'p');
	if (ps && c == 's')
		dxl_persister_stats(ps, &ps_st);
	if (write(bfd, &st, sizeof(st)) != sizeof(st) ||
	    write(bfd, &ps_st, sizeof(ps_st)) != sizeof(ps_st))
		_exit(3);
}

/* advance ring's head past the records below its watermark: those are
 * acknowledged, the only ones a replica may retire (retention's rule). A
 * skip record is passed only with the record after it: the skip of an
 * append that was never acknowledged may be on this replica alone */
static void apply_below_wmark(struct dxl_logstore *ls, uint32_t ring)
{
	uint64_t wm = dxl_logstore_watermark(ls, ring);
	struct dxl_ring_head h;
	struct dxl_ring_iter it;
	if (!wm || dxl_logstore_head(ls, ring, &h) || dxl_ring_iter_init(&it, ls, ring))
		return;
	uint64_t pos = it.pos, seq = it.seq, ts = h.last_ts;
	struct dxl_rec rec;
	int n = 0;
	while (dxl_ring_iter_next(&it, &rec, NULL) && rec.commit_ts < wm) {
		ts = DXL_MAX(ts, rec.commit_ts);
		pos = it.pos;
		seq = it.seq;
		n++;
	}
	if (n)
		dxl_logstore_set_head(ls, ring, pos, seq, ts);
}

static void child(const char *dir, const struct dxl_test_replica_cfg *cfg,
		  int wfd, int cfd, int bfd)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
	int ret = 0;
	struct dxl_fabric_cfg fc;
	dxlt_fabric_cfg_from_env(&fc);
	fc.node_id = cfg->node_id;
	if (fc.provider == DXL_FABRIC_TCP) { /* the power-failure model */
		fc.pf_signal = SIGUSR2;
		fc.pf_policy = cfg->pf_policy;
		fc.pf_seed = cfg->pf_seed;
	}
	struct dxl_fabric *f = NULL;
	struct dxl_shard *sh = NULL;
	struct dxl_ctx *c = NULL;
	if (!ret)
		ret = dxl_fabric_new(&fc, &f);
	if (!ret) { /* DIR/shard-0.log: open or create, register, bind */
		struct dxl_shard_cfg sc;
		shard_cfg(&sc, cfg->node_id, cfg->nrings, cfg->ring_size);
		sc.create = true;
		if (cfg->msync)
			sc.durability = DXL_DUR_MSYNC;
		ret = dxl_shard_open(dir, &sc, f, &sh);
	}
	/* the shard's own persister (verbs + msync), or one asked for */
	struct dxl_persister *own = NULL, *ps = NULL;
	if (!ret) {
		ps = dxl_shard_persister(sh);
		if (!ps && cfg->persister &&
		    !(ret = dxl_persister_start(dxl_shard_logstore(sh), &own)))
			ps = own;
	}
	if (!ret)
		ret = dxl_ctx_new(f, 0, &c);
	struct dxl_log_target t[DXL_TEST_REPLICA_MAX_RINGS];
	memset(t, 0, sizeof(t));
	if (!ret)
		ret = dxl_shard_targets(sh, dxl_fabric_addr(f), 0, t, cfg->nrings);
	struct dxl_logstore *ls = ret ? NULL : dxl_shard_logstore(sh);
	int32_t status = ret;
	if (write(wfd, &status, sizeof(status)) != sizeof(status) ||
	    (ret == 0 && write(wfd, t, sizeof(t)) != sizeof(t)))
		_exit(3);
	if (ret) {
		fprintf(stderr, "test replica %u: %s\n", cfg->node_id, dxl_errmsg());
		_exit(2);
	}
	close(wfd);
	uint64_t next_apply = dxl_now_ms() + cfg->apply_ms;
	for (;;) {
		int wait = -1;
		if (cfg->apply_ms) {
			uint64_t now = dxl_now_ms();
			wait = next_apply > now ? (int)(next_apply - now) : 0;
		}
		struct pollfd pfd = {.fd = cfd, .events = POLLIN};
		int n = poll(&pfd, 1, wait);
		if (n > 0) {
			serve_ctl(cfd, bfd, ps);
			continue;
		}
		if (!cfg->apply_ms || dxl_now_ms() < next_apply)
			continue;
		next_apply = dxl_now_ms() + cfg->apply_ms;
		for (uint32_t i = 0; i < cfg->nrings; i++) {
			/* the head slots are CPU-written (never by remote
			 * WRITEs), so the power-failure model does not track them */
			if (cfg->apply_below_wmark)
				apply_below_wmark(ls, i);
			else
				dxl_ring_advance_head(ls, i);
		}
	}
}

int dxl_test_replica_start(struct dxl_test_replica *r, const char *dir,
			   const struct dxl_test_replica_cfg *cfg)
{
	if (cfg->nrings < 1 || cfg->nrings > DXL_TEST_REPLICA_MAX_RINGS)
		return dxl_err_set(DXL_E_INVAL, "test replica: nrings %u", cfg->nrings);
	memset(r, 0, sizeof(*r));
	snprintf(r->dir, sizeof(r->dir), "%s", dir);
	r->node_id = cfg->node_id;
	r->nrings = cfg->nrings;
	r->durability = cfg->msync ? DXL_DUR_MSYNC : DXL_DUR_PROCESS;
	r->ctl = r->ctl_back = -1;
	mkdir(dir, 0700);
	int p[2], c[2], b[2];
	if (pipe(p))
		return dxl_err_errno(errno, "test replica: pipe");
	if (pipe2(c, O_CLOEXEC) || pipe2(b, O_CLOEXEC)) {
		close(p[0]);
		close(p[1]);
		return dxl_err_errno(errno, "test replica: pipe");
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return dxl_err_errno(errno, "test replica: fork");
	if (pid == 0) {
		close(p[0]);
		close(c[1]);
		close(b[0]);
		child(dir, cfg, p[1], c[0], b[1]);
		_exit(0);
	}
	close(p[1]);
	close(c[0]);
	close(b[1]);
	r->ctl = c[1];
	r->ctl_back = b[0];
	r->pid = pid;
	int32_t status = DXL_E_IO;
	ssize_t n = read(p[0], &status, sizeof(status));
	if (n == sizeof(status) && status == 0)
		n = read(p[0], r->target, sizeof(r->target));
	close(p[0]);
	if (n <= 0 || status) {
		dxl_test_replica_stop(r);
		return dxl_err_set(status ? status : DXL_E_IO,
				   "test replica %u did not start (see its stderr)",
				   cfg->node_id);
	}
	return 0;
}

static int ctl_call(struct dxl_test_replica *r, char c,
		    struct dxl_persist_stats *out)
{
	int32_t st;
	struct dxl_persist_stats ps;
	if (r->pid <= 0 || r->ctl < 0 || write(r->ctl, &c, 1) != 1)
		return dxl_err_set(DXL_E_IO, "test replica %u: not running", r->node_id);
	struct pollfd pfd = {.fd = r->ctl_back, .events = POLLIN};
	if (poll(&pfd, 1, dxlt_wait_ms()) != 1 ||
	    read(r->ctl_back, &st, sizeof(st)) != sizeof(st) ||
	    read(r->ctl_back, &ps, sizeof(ps)) != sizeof(ps))
		return dxl_err_set(DXL_E_IO, "test replica %u: no answer", r->node_id);
	if (st)
		return dxl_err_set(st, "test replica %u runs no persister", r->node_id);
	if (out)
		*out = ps;
	return 0;
}

int dxl_test_replica_persister(struct dxl_test_replica *r, int paused)
{
	return ctl_call(r, paused ? 'p' : 'r', NULL);
}

int dxl_test_replica_persist_stats(struct dxl_test_replica *r,
				   struct dxl_persist_stats *out)
{
	return ctl_call(r, 's', out);
}

static void close_ctl(struct dxl_test_replica *r)
{
	if (r->ctl >= 0)
		close(r->ctl);
	if (r->ctl_back >= 0)
		close(r->ctl_back);
	r->ctl = r->ctl_back = -1;
}

void dxl_test_replica_signal(struct dxl_test_replica *r, int sig)
{
	if (r->pid <= 0)
		return;
	kill(r->pid, sig);
	if (sig == SIGKILL || sig == SIGUSR2) {
		int st;
		while (waitpid(r->pid, &st, 0) < 0 && errno == EINTR)
			;
		r->pid = 0;
		close_ctl(r);
	}
}

void dxl_test_replica_kill(struct dxl_test_replica *r, int sig)
{
	if (r->pid > 0)
		kill(r->pid, sig);
}

void dxl_test_replica_wait(struct dxl_test_replica *r)
{
	if (r->pid <= 0)
		return;
	int st;
	while (waitpid(r->pid, &st, 0) < 0 && errno == EINTR)
		;
	r->pid = 0;
	close_ctl(r);
}

void dxl_test_replica_stop(struct dxl_test_replica *r)
{
	if (r->pid > 0) {
		kill(r->pid, SIGCONT);
		dxl_test_replica_signal(r, SIGKILL);
	}
}

int dxl_test_replica_open_log(const struct dxl_test_replica *r,
			      struct dxl_region **reg, struct dxl_logstore **ls)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/shard-0.log", r->dir);
	struct dxl_region_id id = {.node_id = r->node_id, .kind = DXL_REGION_LOG};
	snprintf(id.cluster, sizeof(id.cluster), "%s", CLUSTER);
	int ret = dxl_region_open(path, r->durability, &id, reg);
	if (ret)
		return ret;
	ret = dxl_logstore_open(*reg, ls);
	if (ret)
		dxl_region_close(reg);
	return ret;
}

int dxl_test_tcp_only(const char *what, const char *why)
{
	enum dxl_fabric_provider p = dxlt_test_provider();
	if (p == DXL_FABRIC_TCP)
		return 1;
	printf("  SKIPPED on %s: %s -- requires %s\n",
	       dxl_fabric_provider_name(p), what, why);
	fflush(stdout);
	return 0;
}

int dxl_test_nodev_skip(int ret)
{
	if (ret != DXL_E_NODEV || getenv("DXL_TEST_REQUIRE_DEVICE"))
		return 0;
	printf("  SKIPPED: provider %s has no device here: %s "
	       "(set DXL_TEST_REQUIRE_DEVICE=1 to make this a failure)\n",
	       dxl_fabric_provider_name(dxlt_test_provider()), dxl_errmsg());
	fflush(stdout);
	return 1;
}
