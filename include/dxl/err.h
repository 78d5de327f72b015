/* err.h -- dxl error codes, their names and the thread-local detail message */
#ifndef DXL_ERR_H
#define DXL_ERR_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Every dxl function that can fail returns 0 (or a non-negative count) on
 * success and one of these negative codes on failure. The codes live in a
 * private range so they never collide with -errno values. After a failure,
 * dxl_errmsg() returns a message that says what failed and where.
 */
enum dxl_err {
	DXL_OK = 0,
	DXL_E_FIRST = -10000,
	DXL_E_INVAL = DXL_E_FIRST, /* invalid argument */
	DXL_E_NOMEM,               /* out of memory */
	DXL_E_NOENT,               /* no such object (key, endpoint, file, shard) */
	DXL_E_EXIST,               /* object already exists */
	DXL_E_AGAIN,               /* resource temporarily exhausted: poll and retry */
	DXL_E_TIMEDOUT,            /* operation timed out */
	DXL_E_IO,                  /* a system call failed (message has errno text) */
	DXL_E_PROTO,               /* malformed or unexpected message on the wire */
	DXL_E_NOTSUP,              /* operation not supported by this provider/object */
	DXL_E_NODEV,               /* no RDMA device (use fabric=tcp) */
	DXL_E_UNREACHABLE,         /* peer unreachable: dead, disconnected, timed out */
	DXL_E_ACCESS,              /* remote access error: bad rkey, bounds, alignment */
	DXL_E_STATE,               /* object in the wrong state (e.g. QP in error) */
	DXL_E_TOOBIG,              /* message, record or value over the limit */
	DXL_E_CONFIG,              /* bad configuration key or value */
	DXL_E_CORRUPT,             /* checksum or structure mismatch in stored data */
	DXL_E_VERSION,             /* unsupported format or protocol version */
	DXL_E_STALE,               /* stale epoch or stale cached object */
	DXL_E_FULL,                /* ring or table full (backpressure) */
	DXL_E_CONFLICT,            /* transaction conflict: aborted, may retry */
	DXL_E_UNAVAIL,             /* service unavailable (no quorum, no primary) */
	DXL_E_BUSY,                /* resource in use (locked, address in use) */
	DXL_E_INTERNAL,            /* internal error (a bug; please report) */
	DXL_E_LAST                 /* not an error: one past the last code */
};

/*
 * dxl_strerror -- a short constant description of a dxl error code
 * (negative DXL_E_*), or of a negative errno value. Never NULL.
 */
const char *dxl_strerror(int err);

/*
 * dxl_errname -- the symbolic name of a code ("DXL_E_TIMEDOUT"). Never NULL.
 */
const char *dxl_errname(int err);

/*
 * dxl_errmsg -- the detail message of the last error raised in this thread
 * ("qp to 127.0.0.1:7000: connect: Connection refused"), or "" if none.
 * The string stays valid until the next dxl call in this thread.
 */
const char *dxl_errmsg(void);

#ifdef __cplusplus
}
#endif
#endif /* DXL_ERR_H */
