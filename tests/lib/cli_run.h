/* cli_run.h -- run the dxl tool from integration tests with its stdout and
 * stderr kept apart
 *
 * proc.h's dxlt_spawn sends both streams to one file; a test of a command's
 * output and of its messages needs them separately. Like the rest of
 * tests/lib: no cmocka here, the test asserts.
 */
#ifndef DXL_TEST_CLI_RUN_H
#define DXL_TEST_CLI_RUN_H

#include <stddef.h>
#include <sys/types.h>

/*
 * dxlt_spawn_io -- fork and exec argv[0] (NULL-terminated argv) with stdin
 * from in_path (NULL: /dev/null), stdout into out_path and stderr into
 * err_path (both truncated first). The child dies with the test
 * (PR_SET_PDEATHSIG); it is NOT in proc.h's table: reap it with
 * dxlt_wait_exit (which also kills it after its timeout). Returns its pid or
 * a negative DXL_E_*.
 */
pid_t dxlt_spawn_io(const char *const *argv, const char *in_path,
		    const char *out_path, const char *err_path);

/*
 * dxlt_run -- dxlt_spawn_io, then wait at most timeout_ms (then SIGKILL),
 * then read the output files into out and err (NUL-terminated, cap bytes
 * each; the files are tmpdir/run.out and tmpdir/run.err). Returns the exit
 * status; -1 if it was killed or did not start (out/err say why if they
 * can).
 */
int dxlt_run(const char *const *argv, const char *in_path, const char *tmpdir,
	     char *out, char *err, size_t cap, int timeout_ms);

#endif
