/* util.c -- dxl-bench-fabric helpers: op names, the READ pattern, sockets, /proc */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/fabric/bench_fabric.h"
#include "common/common.h"

static const char *const op_names[BF_NOPS] = {"read", "write", "cas",
					      "faa",  "send",  "rpc"};

const char *bf_op_name(enum bf_op op)
{
	return (unsigned)op < BF_NOPS ? op_names[op] : "?";
}

int bf_op_parse(const char *s, enum bf_op *out)
{
	for (int i = 0; i < BF_NOPS; i++) {
		if (strcasecmp(s, op_names[i]) == 0) {
			*out = (enum bf_op)i;
			return 0;
		}
	}
	return DXL_E_INVAL;
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * Byte b of the READ region is byte (b % 8) of splitmix64(seed ^ (b / 8)):
 * every 8-byte word differs, so data read from a wrong offset, a stale
 * buffer or a zero page does not match.
 */
void bf_pattern_fill(uint64_t seed, uint64_t off, void *buf, size_t len)
{
	uint8_t *p = buf;
	for (size_t i = 0; i < len; i++) {
		uint64_t b = off + i;
		uint64_t w = splitmix64(seed ^ (b >> 3));
		p[i] = (uint8_t)(w >> (8 * (b & 7)));
	}
}

uint64_t bf_rand(uint64_t *state)
{
	*state += 0x9e3779b97f4a7c15ull;
	return splitmix64(*state);
}

uint32_t bf_next_pow2(uint32_t v)
{
	uint32_t p = 1;
	while (p < v && p < (1u << 31))
		p <<= 1;
	return p;
}

int bf_write_full(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int bf_read_full(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = recv(fd, p, len, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (n == 0) {
			errno = ECONNRESET;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int bf_read_full_spin(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				sched_yield(); /* a spin that lets a runnable thread in */
				continue;
			}
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (n == 0) {
			errno = ECONNRESET;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int bf_read_line(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	while (n + 1 < cap) {
		char ch;
		ssize_t r = read(fd, &ch, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = ECONNRESET;
			return -1;
		}
		if (ch == '\n') {
			buf[n] = '\0';
			return 0;
		}
		buf[n++] = ch;
	}
	errno = EMSGSIZE;
	return -1;
}

void bf_set_nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int resolve(const char *hostport, bool passive, struct addrinfo **res,
		   char *err, size_t errcap)
{
	char host[DXL_FABRIC_ADDR_MAX], port[8];
	uint16_t p;
	if (dxl_parse_hostport(hostport, host, sizeof(host), &p)) {
		snprintf(err, errcap, "'%s' is not host:port", hostport);
		return -1;
	}
	snprintf(port, sizeof(port), "%u", p);
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = passive ? AI_PASSIVE : 0};
	int rc = getaddrinfo(host, port, &hints, res);
	if (rc) {
		snprintf(err, errcap, "%s: %s", hostport, gai_strerror(rc));
		return -1;
	}
	return 0;
}

int bf_tcp_connect(const char *hostport, int timeout_ms, char *err,
		   size_t errcap)
{
	struct addrinfo *res;
	if (resolve(hostport, false, &res, err, errcap))
		return -1;
	int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errcap, "socket: %s", strerror(errno));
		freeaddrinfo(res);
		return -1;
	}
	struct timeval tv = {.tv_sec = timeout_ms / 1000,
			     .tv_usec = (timeout_ms % 1000) * 1000};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, res->ai_addr, res->ai_addrlen)) {
		snprintf(err, errcap, "connect %s: %s", hostport, strerror(errno));
		close(fd);
		freeaddrinfo(res);
		return -1;
	}
	freeaddrinfo(res);
	/* reads of the control protocol time out instead of hanging */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	bf_set_nodelay(fd);
	return fd;
}

int bf_tcp_listen(const char *hostport, uint16_t *port, char *err,
		  size_t errcap)
{
	struct addrinfo *res;
	if (resolve(hostport, true, &res, err, errcap))
		return -1;
	int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errcap, "socket: %s", strerror(errno));
		freeaddrinfo(res);
		return -1;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 64)) {
		snprintf(err, errcap, "bind/listen %s: %s", hostport,
			 strerror(errno));
		close(fd);
		freeaddrinfo(res);
		return -1;
	}
	freeaddrinfo(res);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	if (ss.ss_family == AF_INET)
		*port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	else
		*port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return fd;
}

static void task_dir(pid_t pid, char *buf, size_t cap)
{
	if (pid)
		snprintf(buf, cap, "/proc/%d/task", (int)pid);
	else
		snprintf(buf, cap, "/proc/self/task");
}

/* schedstat's first field is the time the task has run, in ns; summing it
 * over /proc/<pid>/task/ gives the process's CPU time far more precisely than
 * the 10 ms ticks of /proc/<pid>/stat */
uint64_t bf_proc_cpu_ns(pid_t pid)
{
	char dir[64], path[400];
	task_dir(pid, dir, sizeof(dir));
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	uint64_t sum = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/schedstat", dir, e->d_name);
		FILE *fp = fopen(path, "r");
		if (!fp)
			continue;
		unsigned long long ns = 0;
		if (fscanf(fp, "%llu", &ns) == 1)
			sum += ns;
		fclose(fp);
	}
	closedir(d);
	return sum;
}

int bf_proc_threads(pid_t pid)
{
	char dir[64];
	task_dir(pid, dir, sizeof(dir));
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

uint64_t bf_proc_ticks_ns(pid_t pid)
{
	char path[64], buf[1024];
	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/stat");
	FILE *fp = fopen(path, "r");
	if (!fp)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	buf[n] = '\0';
	/* the command name may contain spaces: fields start after the last ')' */
	char *p = strrchr(buf, ')');
	if (!p)
		return 0;
	p++;
	unsigned long long ut = 0, st = 0;
	/* field 3 is the state; utime and stime are fields 14 and 15 */
	if (sscanf(p, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
		   &ut, &st) != 2)
		return 0;
	long hz = sysconf(_SC_CLK_TCK);
	if (hz <= 0)
		hz = 100;
	return (ut + st) * (1000000000ull / (uint64_t)hz);
}

uint64_t bf_host_busy_ns(void)
{
	FILE *fp = fopen("/proc/stat", "r");
	if (!fp)
		return 0;
	unsigned long long v[8] = {0};
	/* cpu  user nice system idle iowait irq softirq steal ... */
	int n = fscanf(fp, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
		       &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
	fclose(fp);
	if (n < 7)
		return 0;
	long hz = sysconf(_SC_CLK_TCK);
	if (hz <= 0)
		hz = 100;
	/* busy = everything but idle and iowait; steal counts: on a VM it is
	 * time another guest took from us */
	uint64_t busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
	return busy * (1000000000ull / (uint64_t)hz);
}
