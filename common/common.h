/* common.h -- pieces every dxl module uses: errors, logging, asserts, clocks */
#ifndef DXL_COMMON_H
#define DXL_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "dxl/err.h"

/* ---- errors -------------------------------------------------------------- */

/*
 * dxl_err_set -- record a detail message for code err in this thread and
 * return err, so that error paths read `return dxl_err_set(DXL_E_INVAL, ...)`.
 */
int dxl_err_set(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* dxl_err_errno -- like dxl_err_set with DXL_E_IO, appending strerror(errno_val). */
int dxl_err_errno(int errno_val, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* dxl_err_clear -- forget the last message of this thread */
void dxl_err_clear(void);

/* dxl_err_use -- make buf (DXL_ERR_MSG_MAX bytes; NULL: the thread's own)
 * the buffer of this thread's messages from now on; returns the previous
 * one. The coroutine scheduler gives each coroutine its own (co.c). */
#define DXL_ERR_MSG_MAX 512
char *dxl_err_use(char *buf);
/* dxl_err_set_text -- the current message := msg (no code, not logged) */
void dxl_err_set_text(const char *msg);

/* dxl_err_prefix -- prepend "what: " to this thread's current message */
void dxl_err_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- logging ------------------------------------------------------------- */

enum dxl_log_level {
	DXL_LOG_DEBUG = 0,
	DXL_LOG_INFO = 1,
	DXL_LOG_WARN = 2,
	DXL_LOG_ERROR = 3,
	DXL_LOG_OFF = 4,
};

/*
 * The level starts at the value of the environment variable DXL_LOG_LEVEL
 * (debug|info|warn|error|off, default warn) and can be changed at run time
 * (e.g. from the config key log.level).
 */
void dxl_log_set_level(enum dxl_log_level lvl);
enum dxl_log_level dxl_log_get_level(void);
/* dxl_log_level_parse -- "debug"... -> level; DXL_E_CONFIG on anything else */
int dxl_log_level_parse(const char *s, enum dxl_log_level *out);
void dxl_log_msg(enum dxl_log_level lvl, const char *file, int line,
		 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define DXL_LOG(lvl, ...)                                                     \
	do {                                                                  \
		if ((lvl) >= dxl_log_get_level())                             \
			dxl_log_msg((lvl), __FILE__, __LINE__, __VA_ARGS__);  \
	} while (0)
#define DXL_DEBUG(...) DXL_LOG(DXL_LOG_DEBUG, __VA_ARGS__)
#define DXL_INFO(...) DXL_LOG(DXL_LOG_INFO, __VA_ARGS__)
#define DXL_WARN(...) DXL_LOG(DXL_LOG_WARN, __VA_ARGS__)
#define DXL_ERROR(...) DXL_LOG(DXL_LOG_ERROR, __VA_ARGS__)

/* ---- invariants ---------------------------------------------------------- */

/* A broken invariant is a bug: print where and what, then abort. Always on. */
void dxl_assert_fail(const char *expr, const char *file, int line,
		     const char *func, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 5, 6)));

#define DXL_ASSERT(cond)                                                      \
	do {                                                                  \
		if (__builtin_expect(!(cond), 0))                             \
			dxl_assert_fail(#cond, __FILE__, __LINE__, __func__,  \
					" ");                                 \
	} while (0)
#define DXL_ASSERTF(cond, ...)                                                \
	do {                                                                  \
		if (__builtin_expect(!(cond), 0))                             \
			dxl_assert_fail(#cond, __FILE__, __LINE__, __func__,  \
					__VA_ARGS__);                         \
	} while (0)

#define DXL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define DXL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DXL_MAX(a, b) ((a) > (b) ? (a) : (b))
#define DXL_ALIGN_UP(x, a) (((x) + ((a)-1)) & ~((__typeof__(x))(a)-1))
#define DXL_CACHELINE 64

/* ---- clocks -------------------------------------------------------------- */

/* dxl_now_ns -- CLOCK_MONOTONIC in nanoseconds */
static inline uint64_t dxl_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* dxl_now_ms -- CLOCK_MONOTONIC in milliseconds */
static inline uint64_t dxl_now_ms(void)
{
	return dxl_now_ns() / 1000000ull;
}

/*
 * dxl_boot_ns -- CLOCK_BOOTTIME in nanoseconds: unlike CLOCK_MONOTONIC it
 * advances while the machine (or the VM) is suspended, so a deadline measured
 * with it -- a lease -- also runs out across a suspend. Plus the suspend time
 * a test injected (dxl_clock_inject_suspend_ns).
 */
uint64_t dxl_boot_ns(void);

/* dxl_clock_inject_suspend_ns -- fault injection: from now on dxl_boot_ns()
 * of this process is ns further ahead, as after a suspend of that length
 * (CLOCK_MONOTONIC and the wall clock are not moved) */
void dxl_clock_inject_suspend_ns(uint64_t ns);

/* dxl_wall_ms -- CLOCK_REALTIME in milliseconds since the epoch */
static inline uint64_t dxl_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

/* murmur3's 64-bit finaliser: a bijective mix of all 64 bits, the hash of
 * the open-addressing maps and of the state digests */
static inline uint64_t dxl_fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	return k ^ (k >> 33);
}

/* the hash of a (table, key) pair, for maps keyed by both */
static inline uint64_t dxl_table_key_hash(uint32_t table, uint64_t key)
{
	return dxl_fmix64(key ^ ((uint64_t)table << 32 | table));
}

/* dxl_cpu_relax -- a spin-wait hint to the CPU */
static inline void dxl_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* ---- test points (fault injection) --------------------------------------- */

/*
 * A test point is a named place in the code where a test may pause a thread
 * or act (change the configuration, stop a server...) at an exact moment:
 * DXL_TESTPOINT("writer.open.config_read", w). Unarmed, it costs one relaxed
 * atomic load. Names are "<module>.<what>" (docs/fault-injection.md lists them).
 *
 * Armed either in-process, by dxl_testpoint_set (the callback runs on the
 * thread that reaches the point, with the point's ctx), or for a whole
 * process by the environment variable DXL_TESTPOINTS, read at start-up:
 *
 *   DXL_TESTPOINTS="name=wait:PATH,name2=sleep:MS"
 *
 *   wait:PATH  while the file PATH does not exist, a thread reaching the
 *              point creates PATH.hit (so the test knows it is there) and
 *              waits (polling every millisecond, at most 10 minutes) until
 *              the test creates PATH; once PATH exists the point passes
 *   sleep:MS   the thread sleeps MS milliseconds at every hit
 *
 * tests/lib/faults.h has the helpers that build the variable and wait for
 * and release the pauses.
 */
typedef void (*dxl_testpoint_fn)(const char *name, void *ctx, void *arg);

extern int dxl_testpoints_armed; /* read with __atomic loads only */

void dxl_testpoint_hit(const char *name, void *ctx);

#define DXL_TESTPOINT(name, ctx)                                               \
	do {                                                                   \
		if (__builtin_expect(__atomic_load_n(&dxl_testpoints_armed,    \
						     __ATOMIC_RELAXED), 0))    \
			dxl_testpoint_hit((name), (ctx));                      \
	} while (0)

/* dxl_testpoint_set -- arm name with fn (NULL: disarm it). At most 64
 * points are armed at once. Errors: DXL_E_INVAL (bad name), DXL_E_FULL. */
int dxl_testpoint_set(const char *name, dxl_testpoint_fn fn, void *arg);
/* dxl_testpoint_hits -- how many times name was reached while armed */
uint64_t dxl_testpoint_hits(const char *name);
/* dxl_testpoint_clear_all -- disarm every point (also those of the
 * environment) */
void dxl_testpoint_clear_all(void);

/* ---- small helpers ------------------------------------------------------- */

/* dxl_parse_u64 -- whole-string decimal/hex number; DXL_E_INVAL otherwise */
int dxl_parse_u64(const char *s, uint64_t *out);
/* dxl_parse_hex64 -- exactly "0x" followed by 1 to 16 hex digits (no sign,
 * no space, no second prefix); DXL_E_INVAL otherwise */
int dxl_parse_hex64(const char *s, uint64_t *out);
/* dxl_parse_size -- "4096", "64K", "1M", "2G" (powers of 1024) */
int dxl_parse_size(const char *s, uint64_t *out);
/* dxl_parse_hostport -- "host:port" -> host (cap bytes) and port */
int dxl_parse_hostport(const char *s, char *host, size_t cap, uint16_t *port);

#endif /* DXL_COMMON_H */
