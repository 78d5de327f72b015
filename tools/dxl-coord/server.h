/* server.h -- what dxl-coord's files share (tools/dxl-coord/): the
 * configuration, the request queue between the I/O thread and the workers,
 * the reply queue back (docs/coord.md "Inside dxl-coord") */
#ifndef DXL_TOOLS_COORD_SERVER_H
#define DXL_TOOLS_COORD_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "dxl/coordproto.h"
#include "dxl/membership.h"
#include "dxl/txn.h"

/* exit codes (--help and docs/coord.md) */
enum {
	EX_CLEAN = 0,   /* clean shutdown after SIGTERM/SIGINT */
	EX_FAIL = 1,    /* could not start (ZooKeeper, coordinator, socket) or
			   failed while serving */
	EX_USAGE = 2,   /* bad command line or configuration */
};

#define COORD_MAX_THREADS 64
#define COORD_MAX_COROUTINES 255 /* + the dispatcher = 256 slots */

/* everything the command line and the config file set */
struct srv_cfg {
	char listen_host[256];
	uint16_t listen_port;
	uint32_t threads;          /* worker threads */
	uint32_t coroutines;       /* transactions in flight per worker */
	uint32_t max_tries;        /* dxl_txn_run's max_tries when a request
				      says 0 (0 = the library's 1000) */
	uint32_t max_conns;
	uint32_t conn_inflight;    /* requests in flight per connection */
	uint32_t drain_ms;         /* shutdown: wait this long for replies */
	struct dxl_zk_cfg zk;
	struct dxl_coord_cfg coord;
};

/* srv_log -- one structured line on stderr: ts=... prog=dxl-coord pid=...
 * level=... <text>, when lvl passes the log level */
void srv_log(int lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* a transaction request on its way to a worker and back */
struct req {
	struct req *next;
	uint64_t conn_id;        /* where the reply goes (the connection may be
				    gone by then: the reply is dropped) */
	uint8_t *frame;          /* the request frame (m points into it) */
	struct dxl_cproto_msg m;
	uint32_t max_tries;
	/* filled by the worker */
	uint8_t *vals;           /* GET values: DXL_ENGINE_MAX_VALUE per op */
	uint32_t vlen[DXL_TXN_MAX_OPS];
	int failed_op;           /* the operation that failed in the last run */
	int op_err;
	char msg[DXL_CPROTO_MAX_MSG];
	struct worker *w;
};

/* an encoded reply on its way to the I/O thread */
struct reply {
	struct reply *next;
	uint64_t conn_id;
	uint8_t *buf;
	size_t len;
};

struct worker {
	struct server *srv;
	pthread_t th;
	uint32_t idx;
	struct dxl_coord_worker *cw;
	uint32_t live;            /* request coroutines running (own thread) */
	uint32_t disp_co;         /* the dispatcher's coroutine id */
	bool disp_waiting;        /* the dispatcher waits for a free slot */
	int start_ret;            /* dxl_coord_worker_new's result */
	char start_msg[256];      /* and its message (errmsg is per thread) */
	bool started;
};

struct server {
	struct srv_cfg cfg;
	struct dxl_zk *zk;
	struct dxl_coord *coord;
	char addr[200];           /* host:port served (published in coords/<id>) */

	/* requests: I/O thread -> workers (FIFO; under qmu) */
	pthread_mutex_t qmu;
	pthread_cond_t qcv;       /* worker start-up handshake */
	struct req *qhead, *qtail;
	uint32_t queued;
	/* replies: workers -> I/O thread (under rmu), evfd signals them */
	pthread_mutex_t rmu;
	struct reply *rhead, *rtail;
	int evfd;

	atomic_bool workers_stop; /* set once nothing is queued or running */
	atomic_int fatal;         /* a worker failed while serving */
	uint32_t nstarted;        /* workers that finished start-up (qmu) */

	struct worker *workers;   /* [cfg.threads] */

	/* counters, for STATS (I/O thread writes, atomics for the workers') */
	uint64_t conns_open, conns_total, requests, txn_requests, proto_errors,
		closed_absurd;
	uint64_t inflight;        /* TXN requests not yet answered */
	atomic_uint_fast64_t txn_ok, txn_failed;
};

/* worker.c */
/* workers_start -- start cfg.threads workers; 0 or the first worker's
 * error (those started are stopped again) */
int workers_start(struct server *s);
/* workers_join -- tell the workers to end once idle, join them */
void workers_join(struct server *s);
/* queue_push -- hand a request to the workers (I/O thread) */
void queue_push(struct server *s, struct req *r);
/* req_free -- a request and what it owns */
void req_free(struct req *r);

/* server.c */
/* serve -- the I/O loop on listen_fd until SIGTERM/SIGINT (sigfd) and the
 * drain; returns EX_CLEAN or EX_FAIL */
int serve(struct server *s, int listen_fd, int sigfd);

#endif /* DXL_TOOLS_COORD_SERVER_H */
