/* err.c -- dxl error codes, names, and the thread-local detail message */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/common.h"

#define MSG_MAX DXL_ERR_MSG_MAX

/* the thread's own message, and the buffer in use: a coroutine's own while
 * it runs (co.c swaps it at every switch), so that a yield between setting
 * a message and reading it cannot let another coroutine overwrite it */
static __thread char thread_msg[MSG_MAX];
static __thread char *cur_msg;

static char *msgbuf(void)
{
	return cur_msg ? cur_msg : thread_msg;
}

void dxl_err_set_text(const char *msg)
{
	snprintf(msgbuf(), MSG_MAX, "%s", msg);
}

char *dxl_err_use(char *buf)
{
	char *prev = cur_msg;
	cur_msg = buf;
	return prev;
}

struct err_info {
	const char *name;
	const char *desc;
};

static const struct err_info infos[] = {
	[DXL_E_INVAL - DXL_E_FIRST] = {"DXL_E_INVAL", "invalid argument"},
	[DXL_E_NOMEM - DXL_E_FIRST] = {"DXL_E_NOMEM", "out of memory"},
	[DXL_E_NOENT - DXL_E_FIRST] = {"DXL_E_NOENT", "no such object"},
	[DXL_E_EXIST - DXL_E_FIRST] = {"DXL_E_EXIST", "object already exists"},
	[DXL_E_AGAIN - DXL_E_FIRST] = {"DXL_E_AGAIN",
				       "resource temporarily exhausted, retry"},
	[DXL_E_TIMEDOUT - DXL_E_FIRST] = {"DXL_E_TIMEDOUT", "timed out"},
	[DXL_E_IO - DXL_E_FIRST] = {"DXL_E_IO", "system call failed"},
	[DXL_E_PROTO - DXL_E_FIRST] = {"DXL_E_PROTO", "malformed message"},
	[DXL_E_NOTSUP - DXL_E_FIRST] = {"DXL_E_NOTSUP", "operation not supported"},
	[DXL_E_NODEV - DXL_E_FIRST] = {"DXL_E_NODEV", "no RDMA device"},
	[DXL_E_UNREACHABLE - DXL_E_FIRST] = {"DXL_E_UNREACHABLE",
					     "peer unreachable"},
	[DXL_E_ACCESS - DXL_E_FIRST] = {"DXL_E_ACCESS", "remote access error"},
	[DXL_E_STATE - DXL_E_FIRST] = {"DXL_E_STATE", "object in wrong state"},
	[DXL_E_TOOBIG - DXL_E_FIRST] = {"DXL_E_TOOBIG", "too large"},
	[DXL_E_CONFIG - DXL_E_FIRST] = {"DXL_E_CONFIG", "bad configuration"},
	[DXL_E_CORRUPT - DXL_E_FIRST] = {"DXL_E_CORRUPT", "corrupt data"},
	[DXL_E_VERSION - DXL_E_FIRST] = {"DXL_E_VERSION", "unsupported version"},
	[DXL_E_STALE - DXL_E_FIRST] = {"DXL_E_STALE", "stale epoch or object"},
	[DXL_E_FULL - DXL_E_FIRST] = {"DXL_E_FULL", "full"},
	[DXL_E_CONFLICT - DXL_E_FIRST] = {"DXL_E_CONFLICT",
					  "conflict, transaction aborted"},
	[DXL_E_UNAVAIL - DXL_E_FIRST] = {"DXL_E_UNAVAIL", "service unavailable"},
	[DXL_E_BUSY - DXL_E_FIRST] = {"DXL_E_BUSY", "resource busy"},
	[DXL_E_INTERNAL - DXL_E_FIRST] = {"DXL_E_INTERNAL", "internal error"},
};

_Static_assert(DXL_ARRAY_SIZE(infos) == DXL_E_LAST - DXL_E_FIRST,
	       "every dxl_err code needs a name and a description");

static const struct err_info *info(int err)
{
	if (err >= DXL_E_FIRST && err < DXL_E_LAST)
		return &infos[err - DXL_E_FIRST];
	return NULL;
}

const char *dxl_strerror(int err)
{
	if (err == 0)
		return "success";
	const struct err_info *i = info(err);
	if (i)
		return i->desc;
	if (err < 0 && err > -4096)
		return strerror(-err);
	return "unknown error";
}

const char *dxl_errname(int err)
{
	if (err == 0)
		return "DXL_OK";
	const struct err_info *i = info(err);
	return i ? i->name : "DXL_E_UNKNOWN";
}

const char *dxl_errmsg(void)
{
	return msgbuf();
}

void dxl_err_clear(void)
{
	msgbuf()[0] = '\0';
}

int dxl_err_set(int err, const char *fmt, ...)
{
	char *last_msg = msgbuf();
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_msg, MSG_MAX, fmt, ap);
	va_end(ap);
	DXL_DEBUG("error %s: %s", dxl_errname(err), last_msg);
	return err;
}

int dxl_err_errno(int errno_val, const char *fmt, ...)
{
	char buf[MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return dxl_err_set(DXL_E_IO, "%s: %s", buf, strerror(errno_val));
}

void dxl_err_prefix(const char *fmt, ...)
{
	char pre[MSG_MAX];
	char old[MSG_MAX];
	char *last_msg = msgbuf();
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof(pre), fmt, ap);
	va_end(ap);
	memcpy(old, last_msg, sizeof(old));
	size_t n = strlen(pre);
	if (n > MSG_MAX - 3)
		n = MSG_MAX - 3;
	memcpy(last_msg, pre, n);
	memcpy(last_msg + n, ": ", 2);
	size_t room = MSG_MAX - n - 3;
	size_t ol = strnlen(old, room);
	memcpy(last_msg + n + 2, old, ol);
	last_msg[n + 2 + ol] = '\0';
}
