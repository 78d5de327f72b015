/* proc.c -- the project's programs as child processes of tests (proc.h) */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <jansson.h>
#include <unistd.h>

#include "common/common.h"
#include "tests/lib/proc.h"

#define MAXP 32

static pid_t pids[MAXP];

int dxlt_prog_path(const char *prog, char *buf, size_t cap)
{
	const char *d = getenv("DXL_BIN_DIR");
	if (d) {
		snprintf(buf, cap, "%s/%s", d, prog);
		return 0;
	}
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return dxl_err_errno(errno, "readlink /proc/self/exe");
	self[n] = 0;
	snprintf(buf, cap, "%s/../bin/%s", dirname(self), prog);
	return 0;
}

void dxlt_slurp(const char *path, char *buf, size_t cap)
{
	buf[0] = 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	size_t n = fread(buf, 1, cap - 1, f);
	buf[n] = 0;
	fclose(f);
}

static int track(pid_t p)
{
	for (int i = 0; i < MAXP; i++)
		if (!pids[i]) {
			pids[i] = p;
			return 0;
		}
	return dxl_err_set(DXL_E_FULL, "more than %d child processes", MAXP);
}

void dxlt_untrack(pid_t p)
{
	for (int i = 0; i < MAXP; i++)
		if (pids[i] == p)
			pids[i] = 0;
}

void dxlt_kill_all(void)
{
	for (int i = 0; i < MAXP; i++)
		if (pids[i] > 0) {
			kill(pids[i], SIGCONT);
			kill(pids[i], SIGKILL);
			while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR)
				;
			pids[i] = 0;
		}
}

pid_t dxlt_spawn(const char *const *argv, const char *logfile, bool append)
{
	int fd = open(logfile, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC),
		      0600);
	if (fd < 0)
		return dxl_err_errno(errno, "open %s", logfile);
	fflush(NULL);
	pid_t p = fork();
	if (p < 0) {
		int e = errno;
		close(fd);
		return dxl_err_errno(e, "fork");
	}
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(fd);
	int ret = track(p);
	if (ret) {
		kill(p, SIGKILL);
		waitpid(p, NULL, 0);
		return ret;
	}
	return p;
}

int dxlt_wait_exit(pid_t p, int timeout_ms)
{
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	int st;
	for (;;) {
		pid_t r = waitpid(p, &st, WNOHANG);
		if (r == p)
			break;
		if (r < 0 && errno != EINTR) {
			fprintf(stderr, "waitpid(%d): %s\n", (int)p, strerror(errno));
			dxlt_untrack(p);
			return -1;
		}
		if (dxl_now_ms() > end) {
			fprintf(stderr, "process %d did not exit in %d ms\n", (int)p,
				timeout_ms);
			kill(p, SIGCONT);
			kill(p, SIGKILL);
			waitpid(p, &st, 0);
			dxlt_untrack(p);
			return -1;
		}
		usleep(10000);
	}
	dxlt_untrack(p);
	if (WIFSIGNALED(st))
		fprintf(stderr, "process %d killed by signal %d\n", (int)p,
			WTERMSIG(st));
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

pid_t dxlt_replica_spawn(const struct dxlt_replica *r)
{
	char node[16];
	snprintf(node, sizeof(node), "%u", r->node);
	const char *argv[48] = {
		r->bin, "--foreground", "--node-id", node, "--data-dir", r->dir,
		"--zk", r->zk, "--cluster", r->cluster, "--durability", "process",
		"--shards", "0", "-o", "log.ring_size=256K", "-o",
		"log.writer_slots=4"};
	int a = 18;
	for (int i = 0; r->extra && r->extra[i]; i++) {
		if (a >= 47)
			return dxl_err_set(DXL_E_INVAL, "dxlt_replica_spawn: too many flags");
		argv[a++] = r->extra[i];
	}
	argv[a] = NULL;
	return dxlt_spawn(argv, r->logfile, r->append);
}

int dxlt_replica_desc_wait(struct dxl_zk *zk, uint32_t node, uint64_t min_epoch,
			   pid_t p, int timeout_ms, struct dxl_replica_desc *d,
			   int64_t *sess)
{
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		char *json = NULL;
		int ret = dxl_member_get(zk, node, &json, sess);
		if (ret == 0) {
			ret = dxl_replica_desc_decode(json, strlen(json), d);
			if (ret)
				fprintf(stderr, "decode of node %u: %s\n%s\n", node,
					dxl_errmsg(), json);
			free(json);
			if (ret || d->reg_epoch >= min_epoch)
				return ret;
		}
		if (p > 0 && waitpid(p, NULL, WNOHANG) == p) {
			dxlt_untrack(p); /* it exited: reaped here */
			return ret ? ret : DXL_E_TIMEDOUT;
		}
		if (dxl_now_ms() > end)
			return ret ? ret : DXL_E_TIMEDOUT;
		usleep(20000);
	}
}

int dxlt_zk_open(const char *connect, const char *cluster, struct dxl_zk **out)
{
	struct dxl_zk_cfg c;
	dxl_zk_cfg_init(&c);
	snprintf(c.connect, sizeof(c.connect), "%s", connect);
	snprintf(c.cluster, sizeof(c.cluster), "%s", cluster);
	return dxl_zk_new(&c, out);
}

int dxlt_cluster_reap(const char *dir)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/cluster.json", dir);
	json_error_t jerr;
	json_t *root = json_load_file(path, 0, &jerr);
	if (!root)
		return 0;
	int n = 0;
	json_t *reps = json_object_get(root, "replicas"), *r;
	size_t i;
	json_array_foreach(reps, i, r) {
		json_t *jp = json_object_get(r, "pid");
		if (!json_is_integer(jp))
			continue;
		pid_t pid = (pid_t)json_integer_value(jp);
		char cpath[64], cmd[4096];
		snprintf(cpath, sizeof(cpath), "/proc/%d/cmdline", (int)pid);
		FILE *f = fopen(cpath, "r");
		if (!f)
			continue;
		size_t len = fread(cmd, 1, sizeof(cmd) - 1, f);
		fclose(f);
		for (size_t k = 0; k < len; k++)
			if (!cmd[k])
				cmd[k] = ' ';
		cmd[len] = 0;
		if (!strstr(cmd, dir))
			continue;
		kill(pid, SIGCONT);
		if (kill(pid, SIGKILL) == 0) {
			waitpid(pid, NULL, WNOHANG);
			n++;
		}
	}
	json_decref(root);
	return n;
}
