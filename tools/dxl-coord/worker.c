/* worker.c -- dxl-coord's worker threads: a dispatcher coroutine per worker
 * takes requests off the shared queue and runs each as one transaction in a
 * coroutine of its own (docs/coord.md "Inside dxl-coord") */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/co.h"
#include "dxl/coordproto.h"
#include "dxl/txn.h"

#include "server.h"

void req_free(struct req *r)
{
	if (!r)
		return;
	free(r->frame);
	free(r->vals);
	free(r);
}

/* queue_push -- the I/O thread hands a request over (any thread; qmu) */
void queue_push(struct server *s, struct req *r)
{
	r->next = NULL;
	pthread_mutex_lock(&s->qmu);
	if (s->qtail)
		s->qtail->next = r;
	else
		s->qhead = r;
	s->qtail = r;
	s->queued++;
	pthread_mutex_unlock(&s->qmu);
}

/* queue_pop -- the oldest request or NULL (any thread; qmu) */
static struct req *queue_pop(struct server *s)
{
	pthread_mutex_lock(&s->qmu);
	struct req *r = s->qhead;
	if (r) {
		s->qhead = r->next;
		if (!s->qhead)
			s->qtail = NULL;
		s->queued--;
	}
	pthread_mutex_unlock(&s->qmu);
	return r;
}

/* reply_push -- hand an encoded reply (buf malloc'ed, or NULL: close the
 * connection) to the I/O thread and wake it (any thread; rmu) */
static void reply_push(struct server *s, uint64_t conn_id, uint8_t *buf, size_t len)
{
	struct reply *p = malloc(sizeof(*p));
	if (!p) {
		/* the I/O thread would wait for this reply until its drain
		 * timeout; losing it is the lesser evil under ENOMEM */
		srv_log(DXL_LOG_ERROR, "event=reply_lost conn=%" PRIu64 " reason=ENOMEM", conn_id);
		free(buf);
		return;
	}
	p->next = NULL;
	p->conn_id = conn_id;
	p->buf = buf;
	p->len = len;
	pthread_mutex_lock(&s->rmu);
	if (s->rtail)
		s->rtail->next = p;
	else
		s->rhead = p;
	s->rtail = p;
	pthread_mutex_unlock(&s->rmu);
	uint64_t one = 1;
	ssize_t n = write(s->evfd, &one, sizeof(one));
	(void)n; /* EAGAIN: the counter is already non-zero, the I/O thread wakes */
}

/* ---- one request = one transaction ----------------------------------------- */

/* txn_fn -- the operations of a request, in order (dxl_txn_run calls it once
 * per attempt). The first one that fails ends the attempt with its error. */
static int txn_fn(struct dxl_txn *t, void *arg)
{
	struct req *r = arg;
	static const char empty[1];
	r->failed_op = -1;
	r->op_err = 0;
	for (uint32_t i = 0; i < r->m.nops; i++) {
		const struct dxl_cproto_op *o = &r->m.ops[i];
		const void *v = o->value ? o->value : empty;
		int ret;
		switch (o->op) {
		case DXL_CPROTO_OP_GET:
			r->vlen[i] = 0;
			ret = dxl_txn_get(t, o->table, o->key,
					  r->vals + (size_t)i * DXL_ENGINE_MAX_VALUE,
					  DXL_ENGINE_MAX_VALUE, &r->vlen[i]);
			break;
		case DXL_CPROTO_OP_PUT:
			ret = dxl_txn_put(t, o->table, o->key, v, o->len);
			break;
		case DXL_CPROTO_OP_INSERT:
			ret = dxl_txn_insert(t, o->table, o->key, v, o->len);
			break;
		default:
			ret = dxl_txn_delete(t, o->table, o->key);
			break;
		}
		if (ret) {
			/* read the message before anything can yield (the
			 * thread's message is shared by its coroutines) */
			const char *em = dxl_errmsg();
			r->failed_op = (int)i;
			r->op_err = ret;
			snprintf(r->msg, sizeof(r->msg), "operation %u (%s table %u key %" PRIu64
				 "): %s: %s", i, dxl_cproto_opname(o->op), o->table, o->key,
				 dxl_errname(ret), em[0] ? em : dxl_strerror(ret));
			return ret;
		}
	}
	return 0;
}

/* finish -- encode the reply of r and hand it to the I/O thread */
static void finish(struct server *s, struct req *r, int ret, const struct dxl_txn_info *info)
{
	struct dxl_cproto_op res[DXL_TXN_MAX_OPS];
	const char *msg = NULL;
	char buf[DXL_CPROTO_MAX_MSG];
	bool op_failed = ret && ret != DXL_E_CONFLICT && r->failed_op >= 0 &&
			 r->op_err == ret;
	memset(res, 0, sizeof(res));
	for (uint32_t i = 0; i < r->m.nops; i++) {
		res[i].op = r->m.ops[i].op;
		if (!ret) {
			res[i].status = 0;
			if (r->m.ops[i].op == DXL_CPROTO_OP_GET) {
				res[i].value = r->vals + (size_t)i * DXL_ENGINE_MAX_VALUE;
				res[i].len = r->vlen[i];
			}
		} else if (op_failed && (int)i == r->failed_op) {
			res[i].status = ret;
		} else {
			res[i].status = DXL_CPROTO_OP_NOT_DONE;
		}
	}
	if (ret) {
		const char *em = dxl_errmsg();
		if (op_failed)
			msg = r->msg;
		else if (ret == DXL_E_CONFLICT)
			snprintf(buf, sizeof(buf), "aborted by conflicts %u times (max_tries %u): %s",
				 info->attempts, r->max_tries ? r->max_tries : 1000,
				 em[0] ? em : "conflict");
		else
			snprintf(buf, sizeof(buf), "%s: %s", dxl_errname(ret),
				 em[0] ? em : dxl_strerror(ret));
		if (!msg)
			msg = buf;
		atomic_fetch_add(&s->txn_failed, 1);
	} else {
		atomic_fetch_add(&s->txn_ok, 1);
	}
	struct dxl_cproto_buf b = {0};
	int e = dxl_cproto_encode_txn_reply(&b, r->m.req_id, ret, msg, info->id,
					     info->commit_ts, info->attempts, info->maybe,
					     res, r->m.nops);
	if (e) {
		srv_log(DXL_LOG_ERROR, "event=reply_encode_failed req=%" PRIu64 " code=%s",
			r->m.req_id, dxl_errname(e));
		b.len = 0;
		b.oom = false;
		if (dxl_cproto_encode_error(&b, r->m.req_id, e, "the reply could not be encoded")) {
			free(b.p);
			b.p = NULL;
			b.len = 0;
		}
	}
	reply_push(s, r->conn_id, b.p, b.len);
}

/* handle -- the coroutine of one request */
static void handle(void *arg)
{
	struct req *r = arg;
	struct worker *w = r->w;
	struct server *s = w->srv;
	struct dxl_txn_info info;
	memset(&info, 0, sizeof(info));
	int ret = 0;
	bool has_get = false;
	for (uint32_t i = 0; i < r->m.nops; i++)
		has_get |= r->m.ops[i].op == DXL_CPROTO_OP_GET;
	if (has_get) {
		r->vals = malloc((size_t)r->m.nops * DXL_ENGINE_MAX_VALUE);
		if (!r->vals)
			ret = dxl_err_set(DXL_E_NOMEM, "buffers for %u values", r->m.nops);
	}
	r->failed_op = -1;
	if (!ret)
		ret = dxl_txn_run(w->cw, txn_fn, r, r->max_tries, &info);
	srv_log(DXL_LOG_DEBUG, "event=txn req=%" PRIu64 " worker=%u ops=%u status=%s attempts=%u commit_ts=%" PRIu64,
		r->m.req_id, w->idx, r->m.nops, ret ? dxl_errname(ret) : "ok",
		info.attempts, info.commit_ts);
	finish(s, r, ret, &info);
	req_free(r);
	w->live--;
	if (w->disp_waiting)
		dxl_co_resume(dxl_co_sched(), w->disp_co);
}

/* dispatcher -- the first coroutine of a worker: requests off the queue
 * into coroutines while slots are free; ends once told to stop and idle */
static void dispatcher(void *arg)
{
	struct worker *w = arg;
	struct server *s = w->srv;
	w->disp_co = dxl_co_id(NULL);
	for (;;) {
		struct req *r = w->live < s->cfg.coroutines ? queue_pop(s) : NULL;
		if (r) {
			r->w = w;
			w->live++;
			int ret = dxl_coord_worker_spawn(w->cw, handle, r);
			if (ret) {
				/* cannot happen (a slot is kept for each of
				 * cfg.coroutines); answer rather than lose it */
				w->live--;
				struct dxl_txn_info info;
				memset(&info, 0, sizeof(info));
				finish(s, r, ret, &info);
				req_free(r);
			}
			continue;
		}
		if (atomic_load(&s->workers_stop) && w->live == 0)
			return;
		if (w->live >= s->cfg.coroutines) {
			/* every slot busy: the next handler to end resumes us */
			w->disp_waiting = true;
			dxl_co_suspend(dxl_now_ns() + 1000000ull);
			w->disp_waiting = false;
		} else {
			/* the queue is empty: the worker's log writers still
			 * progress -- watermark heartbeats past its decided
			 * records, a failed member noticed and the writer
			 * reopened under the new configuration -- and queued
			 * settles are retried. Without this a worker with no
			 * request holds a new primary's promotion gate until
			 * its writer is treated as gone (two session timeouts),
			 * and its committed records stay locked there as in
			 * doubt until its next request (docs/replica.md "The
			 * promotion gate"). Then, as the I/O thread cannot
			 * resume a coroutine of another thread, look again in
			 * 1 ms */
			dxl_coord_worker_poll(w->cw);
			dxl_co_sleep_ms(1);
		}
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct server *s = w->srv;
	/* one slot for the dispatcher, cfg.coroutines for transactions */
	int ret = dxl_coord_worker_new(s->coord, s->cfg.coroutines + 1, &w->cw);
	if (!ret)
		ret = dxl_coord_worker_spawn(w->cw, dispatcher, w);
	pthread_mutex_lock(&s->qmu);
	w->start_ret = ret;
	if (ret)
		snprintf(w->start_msg, sizeof(w->start_msg), "%s", dxl_errmsg());
	s->nstarted++;
	pthread_cond_broadcast(&s->qcv);
	pthread_mutex_unlock(&s->qmu);
	if (ret) {
		if (w->cw)
			dxl_coord_worker_delete(&w->cw);
		return NULL;
	}
	ret = dxl_coord_worker_run(w->cw);
	if (ret) {
		srv_log(DXL_LOG_ERROR, "event=worker_failed worker=%u code=%s msg=\"%s\"", w->idx,
			dxl_errname(ret), dxl_errmsg());
		atomic_store(&s->fatal, 1);
		uint64_t one = 1;
		ssize_t n = write(s->evfd, &one, sizeof(one));
		(void)n;
	}
	dxl_coord_worker_delete(&w->cw);
	return NULL;
}

int workers_start(struct server *s)
{
	s->workers = calloc(s->cfg.threads, sizeof(*s->workers));
	if (!s->workers)
		return dxl_err_set(DXL_E_NOMEM, "%u workers", s->cfg.threads);
	uint32_t made = 0;
	int ret = 0;
	for (; made < s->cfg.threads; made++) {
		struct worker *w = &s->workers[made];
		w->srv = s;
		w->idx = made;
		int e = pthread_create(&w->th, NULL, worker_main, w);
		if (e) {
			ret = dxl_err_errno(e, "starting worker thread %u", made);
			break;
		}
		w->started = true;
	}
	pthread_mutex_lock(&s->qmu);
	while (s->nstarted < made)
		pthread_cond_wait(&s->qcv, &s->qmu);
	pthread_mutex_unlock(&s->qmu);
	for (uint32_t i = 0; !ret && i < made; i++)
		if (s->workers[i].start_ret)
			ret = dxl_err_set(s->workers[i].start_ret, "worker %u: %s", i,
					  s->workers[i].start_msg);
	if (ret)
		workers_join(s);
	return ret;
}

void workers_join(struct server *s)
{
	atomic_store(&s->workers_stop, true);
	for (uint32_t i = 0; s->workers && i < s->cfg.threads; i++)
		if (s->workers[i].started) {
			pthread_join(s->workers[i].th, NULL);
			s->workers[i].started = false;
		}
}
