/* zkpeer.c -- the replicated-log peer: ZooKeeper persistent-sequential creates */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include "bench/log/bench_log.h"
#include "common/common.h"

/*
 * A ZooKeeper create is a replicated, durable append to the ensemble's log
 * (ZAB): the leader logs it, a quorum acknowledges, the znode gets the next
 * sequence number. With forceSync=yes each server fsyncs its transaction log
 * before acknowledging. We keep `inflight` asynchronous creates outstanding,
 * as dxl keeps that many appends in flight.
 */

struct zk_run {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t outstanding;
	uint64_t done;
	int failed_rc;
	int open_loop;
	struct dxl_hist lat, svc;
};

struct zk_op {
	struct zk_run *run;
	uint64_t start, due; /* sent; intended (open loop) */
};

static void on_create(int rc, const char *value, const void *data)
{
	struct zk_op *op = (struct zk_op *)data;
	struct zk_run *r = op->run;
	uint64_t now = dxl_now_ns();
	pthread_mutex_lock(&r->mu);
	if (rc == ZOK) {
		dxl_hist_record(&r->lat, now - (r->open_loop ? op->due : op->start));
		if (r->open_loop)
			dxl_hist_record(&r->svc, now - op->start);
		r->done++;
	} else if (!r->failed_rc) {
		r->failed_rc = rc;
	}
	r->outstanding--;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
	free(op);
}

int bl_zk_run(const char *connect, uint32_t payload, uint32_t inflight,
	      uint32_t duration_ms, double rate, struct bl_result *out)
{
	memset(out, 0, sizeof(*out));
	dxl_hist_reset(&out->lat);
	dxl_hist_reset(&out->svc);
	out->offered = rate > 0 ? rate : 0;
	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
	zhandle_t *zh = zookeeper_init(connect, NULL, 10000, NULL, NULL, 0);
	if (!zh) {
		snprintf(out->error, sizeof(out->error), "zookeeper_init failed");
		return -1;
	}
	for (int i = 0; i < 1000 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++)
		usleep(10000);
	if (zoo_state(zh) != ZOO_CONNECTED_STATE) {
		snprintf(out->error, sizeof(out->error), "cannot connect to %s", connect);
		zookeeper_close(zh);
		return -1;
	}
	zoo_create(zh, "/dxlbench", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
	char *val = malloc(payload ? payload : 1);
	memset(val, 'z', payload);
	static struct zk_run r;
	memset(&r, 0, sizeof(r));
	pthread_mutex_init(&r.mu, NULL);
	pthread_cond_init(&r.cv, NULL);
	dxl_hist_reset(&r.lat);
	dxl_hist_reset(&r.svc);
	r.open_loop = rate > 0;
	uint64_t t0 = dxl_now_ns(), end = t0 + (uint64_t)duration_ms * 1000000ull, k = 0;
	pthread_mutex_lock(&r.mu);
	while (dxl_now_ns() < end && !r.failed_rc) {
		while (r.outstanding >= inflight)
			pthread_cond_wait(&r.cv, &r.mu);
		uint64_t due = r.open_loop ? dxlb_schedule_ns(t0, k, rate) : 0;
		if (r.open_loop && due >= end)
			break;
		if (r.open_loop && dxl_now_ns() < due) {
			/* not due yet: sleep until 1 ms before, then spin (a
			 * wake-up's delay must not count against the peer) */
			pthread_mutex_unlock(&r.mu);
			bl_wait_until(due);
			pthread_mutex_lock(&r.mu);
			continue;
		}
		struct zk_op *op = malloc(sizeof(*op));
		op->run = &r;
		op->due = due;
		op->start = dxl_now_ns();
		k++;
		r.outstanding++;
		pthread_mutex_unlock(&r.mu);
		int rc = zoo_acreate(zh, "/dxlbench/n-", val, (int)payload,
				     &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT_SEQUENTIAL,
				     on_create, op);
		pthread_mutex_lock(&r.mu);
		if (rc != ZOK) {
			r.outstanding--;
			free(op);
			r.failed_rc = rc;
		}
	}
	while (r.outstanding)
		pthread_cond_wait(&r.cv, &r.mu);
	pthread_mutex_unlock(&r.mu);
	out->secs = (double)(dxl_now_ns() - t0) / 1e9;
	out->ops = r.done;
	out->lat = r.lat;
	out->svc = r.svc;
	if (r.open_loop) {
		/* due before the end but never sent: the window was full */
		uint64_t due_total = (uint64_t)((double)duration_ms / 1000.0 * rate);
		out->late = due_total > k ? due_total - k : 0;
	}
	if (r.failed_rc)
		snprintf(out->error, sizeof(out->error), "create failed: %s",
			 zerror(r.failed_rc));
	zookeeper_close(zh);
	free(val);
	return r.failed_rc ? -1 : 0;
}
