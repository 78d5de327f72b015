/* cli_run.c -- the dxl tool as a child of tests, stdout and stderr apart (cli_run.h) */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "tests/lib/cli_run.h"
#include "tests/lib/proc.h"

pid_t dxlt_spawn_io(const char *const *argv, const char *in_path,
		    const char *out_path, const char *err_path)
{
	int in = open(in_path ? in_path : "/dev/null", O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return dxl_err_errno(errno, "open %s", in_path ? in_path : "/dev/null");
	int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int e = o < 0 ? -1 : open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (o < 0 || e < 0) {
		int err = errno;
		close(in);
		if (o >= 0)
			close(o);
		return dxl_err_errno(err, "open %s", o < 0 ? out_path : err_path);
	}
	fflush(NULL);
	pid_t p = fork();
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(in, 0);
		dup2(o, 1);
		dup2(e, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int err = errno;
	close(in);
	close(o);
	close(e);
	if (p < 0)
		return dxl_err_errno(err, "fork");
	return p;
}

int dxlt_run(const char *const *argv, const char *in_path, const char *tmpdir,
	     char *out, char *err, size_t cap, int timeout_ms)
{
	char of[512], ef[512];
	snprintf(of, sizeof(of), "%s/run.out", tmpdir);
	snprintf(ef, sizeof(ef), "%s/run.err", tmpdir);
	out[0] = err[0] = 0;
	pid_t p = dxlt_spawn_io(argv, in_path, of, ef);
	if (p < 0) {
		snprintf(err, cap, "spawn %s: %s", argv[0], dxl_errmsg());
		return -1;
	}
	int rc = dxlt_wait_exit(p, timeout_ms);
	dxlt_slurp(of, out, cap);
	dxlt_slurp(ef, err, cap);
	return rc;
}
