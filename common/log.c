/* log.c -- leveled logging to stderr, and DXL_ASSERT's failure path */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/common.h"

static const char *const level_names[] = {"debug", "info", "warn", "error",
					  "off"};

/* -1 = not yet read from DXL_LOG_LEVEL */
static atomic_int cur_level = -1;

int dxl_log_level_parse(const char *s, enum dxl_log_level *out)
{
	for (int i = 0; s && i < (int)DXL_ARRAY_SIZE(level_names); i++) {
		if (strcasecmp(s, level_names[i]) == 0) {
			*out = (enum dxl_log_level)i;
			return 0;
		}
	}
	return dxl_err_set(DXL_E_CONFIG,
			   "log level '%s' is not one of debug, info, warn, error, off",
			   s ? s : "(null)");
}

enum dxl_log_level dxl_log_get_level(void)
{
	int l = atomic_load_explicit(&cur_level, memory_order_relaxed);
	if (__builtin_expect(l >= 0, 1))
		return (enum dxl_log_level)l;
	enum dxl_log_level lvl = DXL_LOG_WARN;
	const char *env = getenv("DXL_LOG_LEVEL");
	if (env && *env && dxl_log_level_parse(env, &lvl) != 0) {
		fprintf(stderr, "dxl: DXL_LOG_LEVEL=%s is not a level; using warn\n",
			env);
		lvl = DXL_LOG_WARN;
	}
	atomic_store_explicit(&cur_level, (int)lvl, memory_order_relaxed);
	return lvl;
}

void dxl_log_set_level(enum dxl_log_level lvl)
{
	atomic_store_explicit(&cur_level, (int)lvl, memory_order_relaxed);
}

static void vlog(const char *lvl, const char *file, int line, const char *fmt,
		 va_list ap)
{
	char msg[1024];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	const char *base = strrchr(file, '/');
	/* one fprintf per line so concurrent lines do not interleave */
	fprintf(stderr,
		"%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ %-5s [%d/%ld] %s:%d: %s\n",
		tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000, lvl, (int)getpid(),
		(long)syscall(SYS_gettid), base ? base + 1 : file, line, msg);
}

void dxl_log_msg(enum dxl_log_level lvl, const char *file, int line,
		 const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(level_names[lvl < DXL_LOG_OFF ? lvl : DXL_LOG_ERROR], file, line,
	     fmt, ap);
	va_end(ap);
}

void dxl_assert_fail(const char *expr, const char *file, int line,
		     const char *func, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "dxl: %s:%d: %s: assertion '%s' failed.%s\n", file, line,
		func, expr, msg);
	fflush(stderr);
	abort();
}
