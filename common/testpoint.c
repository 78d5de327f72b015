/* testpoint.c -- named test points (pauses and actions at exact places) and the
 * boot clock with its injected suspend time (common/common.h) */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"

/* ---- the boot clock ---------------------------------------------------------- */

static uint64_t g_suspend_ns; /* __atomic */

uint64_t dxl_boot_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
	       __atomic_load_n(&g_suspend_ns, __ATOMIC_RELAXED);
}

void dxl_clock_inject_suspend_ns(uint64_t ns)
{
	__atomic_fetch_add(&g_suspend_ns, ns, __ATOMIC_RELAXED);
	DXL_WARN("event=clock_suspend_injected ms=%llu", (unsigned long long)(ns / 1000000ull));
}

/* ---- test points ------------------------------------------------------------- */

#define TP_MAX 64
#define TP_NAME 64

enum tp_kind { TP_FN = 1, TP_WAIT = 2, TP_SLEEP = 3 };

struct tp {
	char name[TP_NAME];
	enum tp_kind kind;
	dxl_testpoint_fn fn;
	void *arg;
	char path[256];  /* TP_WAIT */
	uint32_t ms;     /* TP_SLEEP */
	uint64_t hits;
};

int dxl_testpoints_armed;
static pthread_mutex_t g_tp_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tp g_tp[TP_MAX]; /* under g_tp_mu; kind 0 = free */

static void rearm(void)
{
	int n = 0;
	for (int i = 0; i < TP_MAX; i++)
		n += g_tp[i].kind != 0;
	__atomic_store_n(&dxl_testpoints_armed, n, __ATOMIC_RELAXED);
}

static struct tp *find(const char *name)
{
	for (int i = 0; i < TP_MAX; i++)
		if (g_tp[i].kind && !strcmp(g_tp[i].name, name))
			return &g_tp[i];
	return NULL;
}

static bool name_ok(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	if (!n || n >= TP_NAME)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_'))
			return false;
	}
	return true;
}

/* arm -- under g_tp_mu */
static int arm(const struct tp *t)
{
	struct tp *slot = find(t->name);
	for (int i = 0; !slot && i < TP_MAX; i++)
		if (!g_tp[i].kind)
			slot = &g_tp[i];
	if (!slot)
		return dxl_err_set(DXL_E_FULL, "test point %s: %d points armed already", t->name,
				   TP_MAX);
	uint64_t hits = !strcmp(slot->name, t->name) ? slot->hits : 0;
	*slot = *t;
	slot->hits = hits;
	rearm();
	return 0;
}

int dxl_testpoint_set(const char *name, dxl_testpoint_fn fn, void *arg)
{
	if (!name_ok(name))
		return dxl_err_set(DXL_E_INVAL, "test point name '%s': [a-z0-9._], 1..%d chars",
				   name ? name : "(null)", TP_NAME - 1);
	pthread_mutex_lock(&g_tp_mu);
	int ret = 0;
	if (!fn) {
		struct tp *t = find(name);
		if (t)
			t->kind = 0;
		rearm();
	} else {
		struct tp t = {.kind = TP_FN, .fn = fn, .arg = arg};
		snprintf(t.name, sizeof(t.name), "%s", name);
		ret = arm(&t);
	}
	pthread_mutex_unlock(&g_tp_mu);
	return ret;
}

uint64_t dxl_testpoint_hits(const char *name)
{
	pthread_mutex_lock(&g_tp_mu);
	uint64_t n = 0;
	for (int i = 0; i < TP_MAX; i++)
		if (!strcmp(g_tp[i].name, name))
			n = g_tp[i].hits;
	pthread_mutex_unlock(&g_tp_mu);
	return n;
}

void dxl_testpoint_clear_all(void)
{
	pthread_mutex_lock(&g_tp_mu);
	memset(g_tp, 0, sizeof(g_tp));
	rearm();
	pthread_mutex_unlock(&g_tp_mu);
}

/* wait_file -- TP_WAIT: say we are here (PATH.hit), then wait for PATH */
static void wait_file(const char *name, const char *path)
{
	if (access(path, F_OK) == 0)
		return;
	char hit[300];
	snprintf(hit, sizeof(hit), "%s.hit", path);
	int fd = open(hit, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		char msg[128];
		int n = snprintf(msg, sizeof(msg), "%d %s\n", (int)getpid(), name);
		if (write(fd, msg, (size_t)n) < 0) {
		}
		close(fd);
	}
	DXL_WARN("event=testpoint_wait point=%s until=%s", name, path);
	uint64_t end = dxl_now_ms() + 600000;
	while (access(path, F_OK) != 0 && dxl_now_ms() < end)
		usleep(1000);
	DXL_WARN("event=testpoint_released point=%s", name);
}

void dxl_testpoint_hit(const char *name, void *ctx)
{
	pthread_mutex_lock(&g_tp_mu);
	struct tp *t = find(name);
	struct tp copy;
	if (t) {
		t->hits++;
		copy = *t;
	}
	pthread_mutex_unlock(&g_tp_mu);
	if (!t)
		return;
	switch (copy.kind) {
	case TP_FN:
		copy.fn(name, ctx, copy.arg);
		break;
	case TP_WAIT:
		wait_file(name, copy.path);
		break;
	case TP_SLEEP:
		DXL_WARN("event=testpoint_sleep point=%s ms=%u", name, copy.ms);
		usleep(copy.ms * 1000u);
		break;
	}
}

/* DXL_TESTPOINTS="name=wait:PATH,name=sleep:MS", read once at start-up; a
 * malformed entry is reported and ignored (the test will see it did not
 * pause) */
__attribute__((constructor)) static void tp_from_env(void)
{
	const char *env = getenv("DXL_TESTPOINTS");
	if (!env || !*env)
		return;
	char *copy = strdup(env), *save = NULL;
	if (!copy)
		return;
	pthread_mutex_lock(&g_tp_mu);
	for (char *e = strtok_r(copy, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
		struct tp t = {0};
		char *eq = strchr(e, '='), *colon = eq ? strchr(eq, ':') : NULL;
		if (!eq || !colon) {
			fprintf(stderr, "DXL_TESTPOINTS: '%s': want name=wait:PATH or name=sleep:MS\n", e);
			continue;
		}
		*eq = 0;
		*colon = 0;
		snprintf(t.name, sizeof(t.name), "%s", e);
		uint64_t ms;
		if (!name_ok(e)) {
			fprintf(stderr, "DXL_TESTPOINTS: bad point name '%s'\n", e);
			continue;
		}
		if (!strcmp(eq + 1, "wait") && colon[1] && strlen(colon + 1) < sizeof(t.path) - 8) {
			t.kind = TP_WAIT;
			snprintf(t.path, sizeof(t.path), "%s", colon + 1);
		} else if (!strcmp(eq + 1, "sleep") && !dxl_parse_u64(colon + 1, &ms) &&
			   ms <= 600000) {
			t.kind = TP_SLEEP;
			t.ms = (uint32_t)ms;
		} else {
			fprintf(stderr, "DXL_TESTPOINTS: '%s=%s:%s': want wait:PATH or sleep:MS\n", e,
				eq + 1, colon + 1);
			continue;
		}
		arm(&t);
	}
	pthread_mutex_unlock(&g_tp_mu);
	free(copy);
}
