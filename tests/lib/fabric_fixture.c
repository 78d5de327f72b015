/* fabric_fixture.c -- test helpers for fabric users: cfg from env, patterns, waits */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/common.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/peer.h"

enum dxl_fabric_provider dxlt_test_provider(void)
{
	const char *env = getenv("DXL_TEST_PROVIDER");
	enum dxl_fabric_provider p = DXL_FABRIC_TCP;
	if (env && *env && dxl_fabric_provider_parse(env, &p) != 0) {
		fprintf(stderr, "dxlt: DXL_TEST_PROVIDER=%s unknown, using tcp\n",
			env);
		p = DXL_FABRIC_TCP;
	}
	return p;
}

const char *dxlt_test_host(void)
{
	const char *env = getenv("DXL_TEST_ADDR");
	return env && *env ? env : "127.0.0.1";
}

void dxlt_cluster_args(const char **argv, int *n, int cap)
{
	static char listen[96];
	if (dxlt_test_provider() != DXL_FABRIC_VERBS)
		return;
	const char *host = dxlt_test_host();
	snprintf(listen, sizeof(listen), strchr(host, ':') ? "fabric.listen=[%s]:0"
							    : "fabric.listen=%s:0",
		 host);
	const char *st = getenv("DXL_TEST_SESSION_MS");
	const char *add[] = {"--provider", "verbs", "--durability", "msync", "-o", listen,
			     "--session-timeout", st && *st ? st : "4000"};
	for (size_t i = 0; i < sizeof(add) / sizeof(add[0]) && *n < cap; i++)
		argv[(*n)++] = add[i];
}

static long env_long(const char *name, long def)
{
	const char *env = getenv(name);
	if (!env || !*env)
		return def;
	char *end = NULL;
	long v = strtol(env, &end, 10);
	return end && !*end && v > 0 ? v : def;
}

int dxlt_wait_ms(void)
{
	return (int)env_long("DXL_TEST_WAIT_MS", 10000);
}

void dxlt_fabric_cfg_from_env(struct dxl_fabric_cfg *cfg)
{
	dxl_fabric_cfg_init(cfg);
	cfg->provider = dxlt_test_provider();
	const char *host = dxlt_test_host();
	if (strchr(host, ':')) /* IPv6 literal */
		snprintf(cfg->listen_addr, sizeof(cfg->listen_addr), "[%s]:0",
			 host);
	else
		snprintf(cfg->listen_addr, sizeof(cfg->listen_addr), "%s:0",
			 host);
	const char *dev = getenv("DXL_TEST_DEVICE");
	if (dev && *dev)
		snprintf(cfg->device, sizeof(cfg->device), "%s", dev);
	const char *gid = getenv("DXL_TEST_GID_INDEX");
	if (gid && *gid)
		cfg->gid_index = atoi(gid);
}

/* ---- watchdog ------------------------------------------------------------- */

static char watchdog_what[128];

static void watchdog_fire(int sig)
{
	(void)sig;
	dxlt_peer_kill_all();
	static const char pre[] = "\ndxlt watchdog: test did not finish in time: ";
	ssize_t r = write(2, pre, sizeof(pre) - 1);
	r = write(2, watchdog_what, strnlen(watchdog_what, sizeof(watchdog_what)));
	r = write(2, "\n", 1);
	(void)r;
	_exit(124);
}

void dxlt_watchdog_arm(unsigned seconds, const char *what)
{
	if (seconds == 0)
		seconds = (unsigned)env_long("DXL_TEST_ALARM_S", 120);
	snprintf(watchdog_what, sizeof(watchdog_what), "%s", what ? what : "?");
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = watchdog_fire;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	alarm(seconds);
}

void dxlt_watchdog_disarm(void)
{
	alarm(0);
}

/* ---- patterns ------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

uint8_t dxlt_pattern_byte(uint64_t seed, uint64_t off)
{
	uint64_t w = splitmix64(seed * 0x100000001b3ull ^ (off >> 3));
	return (uint8_t)(w >> (8 * (off & 7)));
}

void dxlt_pattern_fill(void *buf, size_t len, uint64_t seed, uint64_t start)
{
	uint8_t *p = buf;
	size_t i = 0;
	/* byte-wise up to a word boundary of the stream, then 8 at a time */
	for (; i < len && ((start + i) & 7); i++)
		p[i] = dxlt_pattern_byte(seed, start + i);
	for (; i + 8 <= len; i += 8) {
		uint64_t w = splitmix64(seed * 0x100000001b3ull ^ ((start + i) >> 3));
		for (int b = 0; b < 8; b++)
			p[i + b] = (uint8_t)(w >> (8 * b));
	}
	for (; i < len; i++)
		p[i] = dxlt_pattern_byte(seed, start + i);
}

long dxlt_pattern_check(const void *buf, size_t len, uint64_t seed,
			uint64_t start)
{
	const uint8_t *p = buf;
	for (size_t i = 0; i < len; i++)
		if (p[i] != dxlt_pattern_byte(seed, start + i))
			return (long)i;
	return -1;
}

/* ---- memory ----------------------------------------------------------------- */

void *dxlt_alloc_pages(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void dxlt_free_pages(void *p, size_t len)
{
	if (p)
		munmap(p, len);
}

/* ---- completions ---------------------------------------------------------- */

int dxlt_wait_wc(struct dxl_ctx *c, struct dxl_wc *wc, int n, int timeout_ms)
{
	if (timeout_ms < 0)
		timeout_ms = dxlt_wait_ms();
	uint64_t deadline = dxl_now_ms() + (uint64_t)timeout_ms;
	int got = 0;
	while (got < n) {
		int r = dxl_ctx_poll(c, wc + got, n - got);
		if (r < 0)
			return r;
		got += r;
		if (got >= n)
			break;
		uint64_t now = dxl_now_ms();
		if (now >= deadline)
			break;
		uint64_t left = deadline - now;
		dxl_ctx_wait(c, (int)DXL_MIN(left, 100u));
	}
	return got;
}

int dxlt_post_wait(struct dxl_ctx *c, struct dxl_qp *qp, struct dxl_wr *wr)
{
	wr->flags |= DXL_WR_SIGNALED;
	wr->next = NULL;
	int ret = dxl_qp_post(qp, wr, NULL);
	if (ret)
		return ret;
	struct dxl_wc wc;
	int n = dxlt_wait_wc(c, &wc, 1, -1);
	if (n < 0)
		return n;
	if (n == 0)
		return dxl_err_set(DXL_E_TIMEDOUT,
				   "dxlt_post_wait: no completion for wr_id %llu",
				   (unsigned long long)wr->wr_id);
	if (wc.wr_id != wr->wr_id)
		return dxl_err_set(DXL_E_INTERNAL,
				   "dxlt_post_wait: completion of wr_id %llu, expected %llu",
				   (unsigned long long)wc.wr_id,
				   (unsigned long long)wr->wr_id);
	return (int)wc.status;
}

int dxlt_read(struct dxl_ctx *c, struct dxl_qp *qp, void *local, uint32_t lkey,
	      uint64_t raddr, uint32_t rkey, uint32_t len)
{
	struct dxl_wr wr = {.wr_id = 0x5eadull, .op = DXL_WR_READ,
			    .local = local, .len = len, .lkey = lkey,
			    .remote_addr = raddr, .rkey = rkey};
	return dxlt_post_wait(c, qp, &wr);
}

int dxlt_write(struct dxl_ctx *c, struct dxl_qp *qp, const void *local,
	       uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t len)
{
	struct dxl_wr wr = {.wr_id = 0x3717eull, .op = DXL_WR_WRITE,
			    .local = (void *)(uintptr_t)local, .len = len,
			    .lkey = lkey, .remote_addr = raddr, .rkey = rkey};
	return dxlt_post_wait(c, qp, &wr);
}

int dxlt_cas(struct dxl_ctx *c, struct dxl_qp *qp, uint64_t *result,
	     uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t compare,
	     uint64_t swap)
{
	struct dxl_wr wr = {.wr_id = 0xca5ull, .op = DXL_WR_CAS,
			    .local = result, .len = 8, .lkey = lkey,
			    .remote_addr = raddr, .rkey = rkey,
			    .compare_add = compare, .swap = swap};
	return dxlt_post_wait(c, qp, &wr);
}

int dxlt_faa(struct dxl_ctx *c, struct dxl_qp *qp, uint64_t *result,
	     uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t add)
{
	struct dxl_wr wr = {.wr_id = 0xfaaull, .op = DXL_WR_FAA,
			    .local = result, .len = 8, .lkey = lkey,
			    .remote_addr = raddr, .rkey = rkey,
			    .compare_add = add};
	return dxlt_post_wait(c, qp, &wr);
}

int dxlt_free_addr(const struct dxl_fabric_cfg *cfg, char *out)
{
	struct dxl_fabric *f = NULL;
	int ret = dxl_fabric_new(cfg, &f);
	if (ret)
		return ret;
	snprintf(out, DXL_FABRIC_ADDR_MAX, "%s", dxl_fabric_addr(f));
	dxl_fabric_delete(&f);
	return 0;
}
