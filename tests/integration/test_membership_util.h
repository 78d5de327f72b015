/* test_membership_util.h -- helpers of the membership tests: throw-away
 * ZooKeeper servers (scripts/zk.sh), a watchdog that kills them, event
 * recorders. Included by test_membership*.c only (static functions). */
#ifndef DXLT_MEMBERSHIP_UTIL_H
#define DXLT_MEMBERSHIP_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include "common/common.h"
#include "dxl/membership.h"

extern char **environ;

#define MT_UNUSED __attribute__((unused))

/* ---- processes -------------------------------------------------------------- */

/* mt_run -- run argv (posix_spawn: safe with the ZooKeeper client's threads
 * running, unlike fork), stdout to /dev/null unless out != NULL (then into
 * out, cap bytes). Returns the exit status, or -1. */
MT_UNUSED static int mt_run(char *const argv[], char *out, size_t cap)
{
	int pfd[2] = {-1, -1};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	if (out) {
		if (pipe(pfd) != 0)
			return -1;
		posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
		posix_spawn_file_actions_addclose(&fa, pfd[0]);
		posix_spawn_file_actions_addclose(&fa, pfd[1]);
	} else {
		posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	}
	pid_t pid;
	int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (out)
		close(pfd[1]);
	if (rc != 0) {
		if (out)
			close(pfd[0]);
		return -1;
	}
	if (out) {
		size_t n = 0;
		ssize_t r;
		while (n < cap - 1 && (r = read(pfd[0], out + n, cap - 1 - n)) > 0)
			n += (size_t)r;
		out[n] = 0;
		char junk[256];
		while (read(pfd[0], junk, sizeof(junk)) > 0)
			;
		close(pfd[0]);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* mt_zk_sh -- path of scripts/zk.sh: $DXL_ZK_SH, ./scripts/zk.sh, or found
 * by walking up from the test binary (build/tests/.. or build/asan/tests/..) */
MT_UNUSED static const char *mt_zk_sh(void)
{
	static char path[PATH_MAX];
	if (path[0])
		return path;
	const char *e = getenv("DXL_ZK_SH");
	if (e && access(e, R_OK) == 0) {
		snprintf(path, sizeof(path), "%s", e);
		return path;
	}
	if (access("scripts/zk.sh", R_OK) == 0) {
		snprintf(path, sizeof(path), "scripts/zk.sh");
		return path;
	}
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = 0;
		for (int up = 0; up < 5; up++) {
			char *s = strrchr(exe, '/');
			if (!s)
				break;
			*s = 0;
			if ((size_t)snprintf(path, sizeof(path), "%s/scripts/zk.sh",
					     exe) < sizeof(path) &&
			    access(path, R_OK) == 0)
				return path;
		}
	}
	path[0] = 0;
	return NULL;
}

/* ---- throw-away servers ---------------------------------------------------------- */

#define MT_MAX_SERVERS 3

struct mt_server {
	char dir[128];
	char connect[256];
	int n;
	bool running;
	pid_t reaper; /* kills the servers if this process dies abnormally */
};

/* every started server, for the watchdog and the final clean-up */
static struct mt_server *mt_servers[8];
static volatile sig_atomic_t mt_pids[8][MT_MAX_SERVERS];

MT_UNUSED static int mt_read_pid(const struct mt_server *s, int i)
{
	char p[200];
	snprintf(p, sizeof(p), "%s/s%d/pid", s->dir, i);
	FILE *f = fopen(p, "r");
	int pid = 0;
	if (f) {
		if (fscanf(f, "%d", &pid) != 1)
			pid = 0;
		fclose(f);
	}
	return pid;
}

MT_UNUSED static void mt_note_pids(struct mt_server *s)
{
	for (int k = 0; k < 8; k++)
		if (mt_servers[k] == s)
			for (int i = 0; i < s->n; i++)
				mt_pids[k][i] = mt_read_pid(s, i + 1);
}

/* async-signal-safe: SIGCONT + SIGKILL every recorded server */
MT_UNUSED static void mt_kill_all_servers(void)
{
	for (int k = 0; k < 8; k++)
		for (int i = 0; i < MT_MAX_SERVERS; i++)
			if (mt_pids[k][i] > 0) {
				kill(mt_pids[k][i], SIGCONT);
				kill(mt_pids[k][i], SIGKILL);
			}
}

static pid_t mt_child_pid; /* a child of the test, killed by the watchdog */

MT_UNUSED static void mt_on_alarm(int sig)
{
	static const char msg[] = "\nmembership test: watchdog fired, killing "
				  "ZooKeeper servers and children\n";
	if (write(2, msg, sizeof(msg) - 1) < 0) {
	}
	mt_kill_all_servers();
	if (mt_child_pid > 0)
		kill(mt_child_pid, SIGKILL);
	_exit(124);
}

/* mt_alarm -- (re)arm the watchdog: every wait of a test is bounded */
MT_UNUSED static void mt_alarm(unsigned seconds)
{
	signal(SIGALRM, mt_on_alarm);
	alarm(seconds);
}

/*
 * mt_reaper -- a shell that outlives this process only if it dies without
 * clean-up (a sanitizer abort, SIGKILL by the test runner's timeout): then
 * it kills the servers of dir and removes dir. Normally mt_server_stop
 * kills and reaps it first.
 */
static pid_t mt_reaper(const char *dir)
{
	char script[768];
	snprintf(script, sizeof(script),
		 "while kill -0 %d 2>/dev/null; do sleep 0.3; done; "
		 "for f in '%s'/s*/pid; do [ -f \"$f\" ] || continue; "
		 "p=$(cat \"$f\"); kill -CONT $p; kill -KILL $p; done; "
		 "rm -rf '%s'",
		 (int)getpid(), dir, dir);
	char *argv[] = {"/bin/sh", "-c", script, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	return rc == 0 ? pid : 0;
}

MT_UNUSED static int mt_server_start(struct mt_server *s, int n)
{
	memset(s, 0, sizeof(*s));
	const char *sh = mt_zk_sh();
	if (!sh) {
		fprintf(stderr, "scripts/zk.sh not found (set DXL_ZK_SH)\n");
		return -1;
	}
	snprintf(s->dir, sizeof(s->dir), "/tmp/dxl-mt-zk.XXXXXX");
	if (!mkdtemp(s->dir))
		return -1;
	s->n = n;
	int slot = -1;
	for (int k = 0; k < 8 && slot < 0; k++)
		if (!mt_servers[k])
			slot = k;
	if (slot < 0)
		return -1;
	mt_servers[slot] = s;
	s->reaper = mt_reaper(s->dir);
	char nbuf[8];
	snprintf(nbuf, sizeof(nbuf), "%d", n);
	char *argv[] = {"/bin/bash", (char *)sh, "start", s->dir, "--servers", nbuf,
			NULL};
	int rc = mt_run(argv, s->connect, sizeof(s->connect));
	mt_note_pids(s);
	s->running = true;
	char *nl = strchr(s->connect, '\n');
	if (nl)
		*nl = 0;
	if (rc != 0 || !s->connect[0]) {
		fprintf(stderr, "zk.sh start %s failed (status %d)\n", s->dir, rc);
		return -1;
	}
	return 0;
}

MT_UNUSED static void mt_server_stop(struct mt_server *s)
{
	if (!s->dir[0])
		return;
	const char *sh = mt_zk_sh();
	for (int i = 1; i <= s->n; i++) { /* a stopped JVM ignores TERM */
		int pid = mt_read_pid(s, i);
		if (pid > 0)
			kill(pid, SIGCONT);
	}
	char *argv[] = {"/bin/bash", (char *)sh, "stop", s->dir, NULL};
	mt_run(argv, NULL, 0);
	char *rm[] = {"/bin/rm", "-rf", s->dir, NULL};
	mt_run(rm, NULL, 0);
	if (s->reaper > 0) {
		kill(s->reaper, SIGKILL);
		waitpid(s->reaper, NULL, 0);
		s->reaper = 0;
	}
	for (int k = 0; k < 8; k++)
		if (mt_servers[k] == s) {
			for (int i = 0; i < MT_MAX_SERVERS; i++)
				mt_pids[k][i] = 0;
			mt_servers[k] = NULL;
		}
	s->dir[0] = 0;
	s->running = false;
}

MT_UNUSED static void mt_stop_all_servers(void)
{
	for (int k = 0; k < 8; k++)
		if (mt_servers[k])
			mt_server_stop(mt_servers[k]);
}

MT_UNUSED static int mt_server_cmd(struct mt_server *s, const char *cmd, int i)
{
	char nbuf[8];
	snprintf(nbuf, sizeof(nbuf), "%d", i);
	char *argv[] = {"/bin/bash", (char *)mt_zk_sh(), (char *)cmd, s->dir, nbuf,
			NULL};
	int rc = mt_run(argv, NULL, 0);
	mt_note_pids(s);
	return rc;
}

MT_UNUSED static int mt_server_port(const struct mt_server *s, int i)
{
	char p[200];
	snprintf(p, sizeof(p), "%s/s%d/port", s->dir, i);
	FILE *f = fopen(p, "r");
	int port = 0;
	if (f) {
		if (fscanf(f, "%d", &port) != 1)
			port = 0;
		fclose(f);
	}
	return port;
}

/* mt_server_mode -- the "Mode:" of server i from the srvr four-letter word
 * ("leader", "follower", "standalone"), "" if it does not answer */
MT_UNUSED static void mt_server_mode(const struct mt_server *s, int i, char *mode,
			   size_t cap)
{
	mode[0] = 0;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return;
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)mt_server_port(s, i))};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	struct timeval tv = {1, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	char buf[2048];
	size_t n = 0;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    write(fd, "srvr", 4) == 4) {
		ssize_t r;
		while (n < sizeof(buf) - 1 &&
		       (r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
			n += (size_t)r;
	}
	close(fd);
	buf[n] = 0;
	const char *m = strstr(buf, "Mode: ");
	if (m) {
		m += 6;
		size_t k = strcspn(m, "\r\n");
		snprintf(mode, cap, "%.*s", (int)k, m);
	}
}

/* mt_free_port -- a TCP port nobody listens on (bound, then released) */
MT_UNUSED static int mt_free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	socklen_t len = sizeof(a);
	int port = -1;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* ---- recorders ---------------------------------------------------------------- */

#define MT_REC_MAX 256

struct mt_ev {
	int kind;     /* state, member event, election event, config status */
	uint32_t id;  /* node id / election index / config version */
	uint64_t epoch;
	uint64_t t_ns;
	char text[256];
};

struct mt_rec {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int n;
	struct mt_ev ev[MT_REC_MAX];
};

MT_UNUSED static void mt_rec_init(struct mt_rec *r)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
}

MT_UNUSED static void mt_rec_add(struct mt_rec *r, int kind, uint32_t id, uint64_t epoch,
		       const char *text)
{
	pthread_mutex_lock(&r->mu);
	if (r->n < MT_REC_MAX) {
		struct mt_ev *e = &r->ev[r->n++];
		e->kind = kind;
		e->id = id;
		e->epoch = epoch;
		e->t_ns = dxl_boot_ns();
		snprintf(e->text, sizeof(e->text), "%s", text ? text : "");
	}
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

/* mt_rec_wait -- index of the first event at or after index `from` with
 * this kind (and id, unless id == UINT32_MAX), waiting up to timeout_ms;
 * -1 if none came */
MT_UNUSED static int mt_rec_wait(struct mt_rec *r, int from, int kind, uint32_t id,
		       int timeout_ms)
{
	uint64_t deadline = dxl_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	pthread_mutex_lock(&r->mu);
	for (;;) {
		for (int i = from; i < r->n; i++)
			if (r->ev[i].kind == kind && (id == UINT32_MAX || r->ev[i].id == id)) {
				pthread_mutex_unlock(&r->mu);
				return i;
			}
		if (dxl_now_ns() >= deadline)
			break;
		pthread_mutex_unlock(&r->mu);
		usleep(2000);
		pthread_mutex_lock(&r->mu);
	}
	pthread_mutex_unlock(&r->mu);
	return -1;
}

MT_UNUSED static int mt_rec_count(struct mt_rec *r, int kind, uint32_t id)
{
	int c = 0;
	pthread_mutex_lock(&r->mu);
	for (int i = 0; i < r->n; i++)
		if (r->ev[i].kind == kind && (id == UINT32_MAX || r->ev[i].id == id))
			c++;
	pthread_mutex_unlock(&r->mu);
	return c;
}

MT_UNUSED static int mt_rec_len(struct mt_rec *r)
{
	pthread_mutex_lock(&r->mu);
	int n = r->n;
	pthread_mutex_unlock(&r->mu);
	return n;
}

MT_UNUSED static struct mt_ev mt_rec_get(struct mt_rec *r, int i)
{
	pthread_mutex_lock(&r->mu);
	struct mt_ev e = r->ev[i];
	pthread_mutex_unlock(&r->mu);
	return e;
}

/* kinds */
enum {
	MT_STATE = 100,   /* id = enum dxl_zk_state */
	MT_JOIN = 1,      /* = DXL_MEMBER_JOIN ... */
	MT_LEAVE = 2,
	MT_UPDATE = 3,
	MT_ELECTED = 201, /* id = candidate index */
	MT_LOST = 202,
	MT_CONFIG = 300,  /* id = version (or UINT32_MAX-1 when absent) */
};

MT_UNUSED static void mt_on_state(struct dxl_zk *zk, void *arg, enum dxl_zk_state s)
{
	mt_rec_add(arg, MT_STATE, (uint32_t)s, dxl_zk_session_epoch(zk),
		   dxl_zk_state_name(s));
}

MT_UNUSED static void mt_on_member(void *arg, enum dxl_member_event ev, uint32_t node_id,
			 const char *payload)
{
	mt_rec_add(arg, (int)ev, node_id, 0, payload);
}

/* mt_wait_true -- poll cond(arg) every ms until true or timeout; returns
 * whether it became true */
MT_UNUSED static bool mt_wait_true(bool (*cond)(void *), void *arg, int timeout_ms)
{
	uint64_t deadline = dxl_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	while (!cond(arg)) {
		if (dxl_now_ns() >= deadline)
			return false;
		usleep(1000);
	}
	return true;
}

/* a unique cluster name per test */
MT_UNUSED static void mt_cluster_name(char *buf, size_t cap, const char *what)
{
	static atomic_int counter;
	snprintf(buf, cap, "mt-%d-%d-%s", (int)getpid(), atomic_fetch_add(&counter, 1),
		 what);
}

#endif /* DXLT_MEMBERSHIP_UTIL_H */
