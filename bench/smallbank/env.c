/* env.c -- dxl-bench-smallbank's cluster (DIR/cluster.json), coordinator and worker threads */
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/smallbank/sb.h"
#include "common/common.h"

void sb_errf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "dxl-bench-smallbank: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
}

int sb_cluster_read(const char *dir, struct sb_cluster *out)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/cluster.json", dir);
	json_error_t je;
	json_t *o = json_load_file(path, 0, &je);
	if (!o) {
		if (access(path, F_OK))
			return dxl_err_set(DXL_E_NOENT, "%s not found: no cluster started with "
					   "'dxl cluster up --dir %s'", path, dir);
		return dxl_err_set(DXL_E_CORRUPT, "%s: line %d: %s", path, je.line, je.text);
	}
	const char *zk = NULL, *name = NULL;
	json_int_t shards = 0;
	if (json_unpack_ex(o, &je, 0, "{s:s,s:s,s:I}", "zk", &zk, "cluster", &name, "shards",
			   &shards) ||
	    shards <= 0 || strlen(zk) >= sizeof(out->zk) || strlen(name) >= sizeof(out->name)) {
		int ret = dxl_err_set(DXL_E_CORRUPT, "%s: not a dxl cluster file (%s)", path, je.text);
		json_decref(o);
		return ret;
	}
	memset(out, 0, sizeof(*out));
	snprintf(out->zk, sizeof(out->zk), "%s", zk);
	snprintf(out->name, sizeof(out->name), "%s", name);
	out->shards = (uint32_t)shards;
	json_decref(o);
	return 0;
}

uint64_t sb_loaded_accounts(const char *dir, int64_t *init_balance)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/smallbank.json", dir);
	json_t *o = json_load_file(path, 0, NULL);
	json_int_t a = 0, b = 0;
	if (o && !json_unpack(o, "{s:I,s:I}", "accounts", &a, "init_balance", &b) && a > 0) {
		if (init_balance)
			*init_balance = b;
	} else {
		a = 0;
	}
	json_decref(o);
	return (uint64_t)a;
}

int sb_env_open(const char *dir, enum dxl_txn_mode mode, struct sb_env *e)
{
	memset(e, 0, sizeof(*e));
	e->mode = mode;
	int ret = sb_cluster_read(dir, &e->cl);
	if (ret)
		return ret;
	struct dxl_zk_cfg zc;
	dxl_zk_cfg_init(&zc);
	snprintf(zc.connect, sizeof(zc.connect), "%s", e->cl.zk);
	snprintf(zc.cluster, sizeof(zc.cluster), "%s", e->cl.name);
	zc.connect_timeout_ms = 10000;
	if ((ret = dxl_zk_new(&zc, &e->zk))) {
		dxl_err_prefix("ZooKeeper %s (cluster %s): ", e->cl.zk, e->cl.name);
		return ret;
	}
	struct dxl_coord_cfg cc;
	dxl_coord_cfg_init(&cc);
	cc.mode = mode;
	snprintf(cc.info, sizeof(cc.info), "{\"program\":\"dxl-bench-smallbank\",\"pid\":%d}",
		 (int)getpid());
	if ((ret = dxl_coord_new(e->zk, &cc, &e->coord))) {
		dxl_err_prefix("coordinator: ");
		dxl_zk_delete(&e->zk);
		return ret;
	}
	return 0;
}

void sb_env_close(struct sb_env *e)
{
	dxl_coord_delete(&e->coord);
	dxl_zk_delete(&e->zk);
}

/* ---- worker threads -------------------------------------------------------------- */

struct pool {
	struct sb_env *e;
	uint32_t ncoro;
	void (*fn)(void *);
	char *args;
	size_t arg_size;
	pthread_barrier_t done, go; /* every worker finished / stats read */
	bool barriers;
	pthread_mutex_t mu;
	int err;
	char errmsg[512];
};

struct tharg {
	struct pool *p;
	uint32_t thread;
};

static void pool_fail(struct pool *p, int err, const char *what)
{
	pthread_mutex_lock(&p->mu);
	if (!p->err) {
		p->err = err;
		snprintf(p->errmsg, sizeof(p->errmsg), "%s: %s", what, dxl_errmsg());
	}
	pthread_mutex_unlock(&p->mu);
}

static void *pool_thread(void *arg)
{
	struct tharg *ta = arg;
	struct pool *p = ta->p;
	struct dxl_coord_worker *w = NULL;
	int ret = dxl_coord_worker_new(p->e->coord, p->ncoro, &w);
	if (ret) {
		pool_fail(p, ret, "worker");
	} else {
		for (uint32_t i = 0; i < p->ncoro && !ret; i++) {
			struct sb_co *co =
				(struct sb_co *)(p->args + ((size_t)ta->thread * p->ncoro + i) * p->arg_size);
			co->w = w;
			co->thread = ta->thread;
			co->idx = i;
			ret = dxl_coord_worker_spawn(w, p->fn, co);
			if (ret)
				pool_fail(p, ret, "spawn");
		}
		if ((ret = dxl_coord_worker_run(w)))
			pool_fail(p, ret, "worker run");
	}
	if (p->barriers) {
		pthread_barrier_wait(&p->done);
		pthread_barrier_wait(&p->go);
	}
	dxl_coord_worker_delete(&w);
	return NULL;
}

int sb_run_threads(struct sb_env *e, uint32_t nthreads, uint32_t ncoro, void (*fn)(void *),
		   void *args, size_t arg_size, void (*before_delete)(void *), void *bd_arg)
{
	struct pool p = {.e = e, .ncoro = ncoro, .fn = fn, .args = args, .arg_size = arg_size,
			 .barriers = before_delete != NULL};
	pthread_mutex_init(&p.mu, NULL);
	if (p.barriers) {
		pthread_barrier_init(&p.done, NULL, nthreads + 1);
		pthread_barrier_init(&p.go, NULL, nthreads + 1);
	}
	pthread_t *th = calloc(nthreads, sizeof(*th));
	struct tharg *ta = calloc(nthreads, sizeof(*ta));
	if (!th || !ta) {
		free(th);
		free(ta);
		return dxl_err_set(DXL_E_NOMEM, "threads");
	}
	for (uint32_t i = 0; i < nthreads; i++) {
		ta[i] = (struct tharg){.p = &p, .thread = i};
		if (pthread_create(&th[i], NULL, pool_thread, &ta[i])) {
			/* fatal for a benchmark: the barriers count on every thread */
			sb_errf("pthread_create failed");
			exit(1);
		}
	}
	if (p.barriers) {
		pthread_barrier_wait(&p.done);
		before_delete(bd_arg);
		pthread_barrier_wait(&p.go);
	}
	for (uint32_t i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	free(th);
	free(ta);
	if (p.barriers) {
		pthread_barrier_destroy(&p.done);
		pthread_barrier_destroy(&p.go);
	}
	pthread_mutex_destroy(&p.mu);
	if (p.err)
		return dxl_err_set(p.err, "%s", p.errmsg);
	return 0;
}
