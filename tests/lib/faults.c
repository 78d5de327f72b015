/* faults.c -- the membership and reconfiguration fault kinds (faults.h) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include "common/common.h"
#include "tests/lib/faults.h"
#include "tests/lib/proc.h"

int dxlt_env_add(char **env, size_t cap, const char *name, const char *value)
{
	size_t n = 0;
	while (env[n])
		n++;
	if (n + 1 >= cap)
		return dxl_err_set(DXL_E_FULL, "environment: %zu entries", n);
	size_t len = strlen(name) + strlen(value) + 2;
	env[n] = malloc(len);
	if (!env[n])
		return dxl_err_set(DXL_E_NOMEM, "environment");
	snprintf(env[n], len, "%s=%s", name, value);
	env[n + 1] = NULL;
	return 0;
}

void dxlt_env_free(char **env)
{
	for (size_t i = 0; env[i]; i++) {
		free(env[i]);
		env[i] = NULL;
	}
}

pid_t dxlt_spawn_env(const struct dxlt_replica *r, const char *name, const char *value)
{
	const char *old = getenv(name);
	char *keep = old ? strdup(old) : NULL;
	setenv(name, value, 1);
	pid_t p = dxlt_replica_spawn(r);
	if (keep)
		setenv(name, keep, 1);
	else
		unsetenv(name);
	free(keep);
	return p;
}

void dxlt_pause_spec(char *buf, size_t cap, const char *point, const char *path)
{
	snprintf(buf, cap, "%s=wait:%s", point, path);
}

int dxlt_pause_wait(const char *path, int timeout_ms)
{
	char hit[600];
	snprintf(hit, sizeof(hit), "%s.hit", path);
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	while (access(hit, F_OK) != 0) {
		if (dxl_now_ms() >= end)
			return dxl_err_set(DXL_E_TIMEDOUT, "nothing paused at %s within %d ms", path,
					   timeout_ms);
		usleep(2000);
	}
	return 0;
}

int dxlt_pause_release(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT, 0644);
	if (fd < 0)
		return dxl_err_errno(errno, "release %s", path);
	close(fd);
	return 0;
}

void dxlt_pause_rearm(const char *path)
{
	char hit[600];
	snprintf(hit, sizeof(hit), "%s.hit", path);
	unlink(path);
	unlink(hit);
}

int dxlt_wipe_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return dxl_err_errno(errno, "opendir %s", dir);
	struct dirent *e;
	int ret = 0;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char f[1024];
		snprintf(f, sizeof(f), "%s/%s", dir, e->d_name);
		if (unlink(f) && !ret)
			ret = dxl_err_errno(errno, "unlink %s", f);
	}
	closedir(d);
	return ret;
}

static int raw_open(const char *connect, zhandle_t **out)
{
	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
	zhandle_t *zh = zookeeper_init(connect, NULL, 4000, NULL, NULL, 0);
	if (!zh)
		return dxl_err_errno(errno, "zookeeper_init %s", connect);
	for (int i = 0; i < 1000 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++)
		usleep(5000);
	if (zoo_state(zh) != ZOO_CONNECTED_STATE) {
		zookeeper_close(zh);
		return dxl_err_set(DXL_E_UNAVAIL, "no session with %s", connect);
	}
	*out = zh;
	return 0;
}

int dxlt_zk_raw_put(const char *connect, const char *path, const char *data)
{
	zhandle_t *zh;
	int ret = raw_open(connect, &zh);
	if (ret)
		return ret;
	char parent[512];
	snprintf(parent, sizeof(parent), "%s", path);
	for (char *p = strchr(parent + 1, '/'); p; p = strchr(p + 1, '/')) {
		*p = 0;
		zoo_create(zh, parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
		*p = '/';
	}
	int rc = zoo_set(zh, path, data, (int)strlen(data), -1);
	if (rc == ZNONODE)
		rc = zoo_create(zh, path, data, (int)strlen(data), &ZOO_OPEN_ACL_UNSAFE, 0, NULL,
				0);
	zookeeper_close(zh);
	return rc == ZOK ? 0 : dxl_err_set(DXL_E_IO, "zookeeper put %s: %s", path, zerror(rc));
}

int dxlt_zk_raw_delete(const char *connect, const char *path)
{
	zhandle_t *zh;
	int ret = raw_open(connect, &zh);
	if (ret)
		return ret;
	int rc = zoo_delete(zh, path, -1);
	zookeeper_close(zh);
	if (rc == ZNONODE)
		return dxl_err_set(DXL_E_NOENT, "zookeeper delete %s: no node", path);
	return rc == ZOK ? 0 : dxl_err_set(DXL_E_IO, "zookeeper delete %s: %s", path, zerror(rc));
}

int dxlt_zk_raw_delete_children(const char *connect, const char *path)
{
	zhandle_t *zh;
	int ret = raw_open(connect, &zh);
	if (ret)
		return ret;
	struct String_vector v;
	int rc = zoo_get_children(zh, path, 0, &v);
	int n = 0;
	for (int i = 0; rc == ZOK && i < v.count; i++) {
		char p[700];
		snprintf(p, sizeof(p), "%s/%s", path, v.data[i]);
		if (zoo_delete(zh, p, -1) == ZOK)
			n++;
	}
	if (rc == ZOK)
		deallocate_String_vector(&v);
	zookeeper_close(zh);
	return rc == ZOK || rc == ZNONODE ? n : dxl_err_set(DXL_E_IO, "zookeeper children of %s: %s",
							  path, zerror(rc));
}

int dxlt_config_put(struct dxl_zk *zk, uint32_t nshards, const uint32_t *shards,
		    const uint32_t *const *members, const uint32_t *n, uint64_t *epoch)
{
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	if (!d)
		return dxl_err_set(DXL_E_NOMEM, "descriptor");
	int ret = 0;
	for (int attempt = 0; attempt < 5; attempt++) {
		struct dxl_cluster_config c;
		int32_t ver = DXL_ZK_VERSION_NONE;
		ret = dxl_cluster_config_read(zk, &c, &ver);
		if (ret == DXL_E_NOENT) {
			dxl_cluster_config_init(&c);
			ver = DXL_ZK_VERSION_NONE;
			ret = 0;
		}
		if (ret)
			break;
		c.epoch++;
		for (uint32_t i = 0; !ret && i < nshards; i++) {
			struct dxl_cluster_shard old = {0};
			const struct dxl_cluster_shard *o = dxl_cluster_config_shard(&c, shards[i]);
			if (o)
				old = *o;
			ret = dxl_cluster_config_set_shard(&c, shards[i], members[i][0],
							   members[i] + 1, n[i] - 1);
			/* a node already listed keeps its address (it may be
			 * down), a member its recorded data identity; a new
			 * member's are taken from its descriptor (what the CM
			 * does) */
			for (uint32_t k = 0; !ret && k < n[i]; k++) {
				uint32_t id = members[i][k];
				uint64_t did = o ? dxl_cluster_shard_data_id(&old, id) : 0;
				bool listed = dxl_cluster_config_node(&c, id) != NULL;
				bool member = o && old.primary == id;
				for (uint32_t j = 0; o && j < old.nbackups; j++)
					member = member || old.backups[j] == id;
				if (listed && member) {
					ret = dxl_cluster_config_set_data_id(&c, shards[i], id, did);
					continue;
				}
				int r = dxl_replica_desc_get(zk, id, d);
				if (r && !listed) {
					ret = r;
					break;
				}
				if (!listed)
					ret = dxl_cluster_config_set_node(&c, id, d->addr);
				const struct dxl_shard_desc *sd =
					r ? NULL : dxl_replica_desc_shard(d, shards[i]);
				if (!ret)
					ret = dxl_cluster_config_set_data_id(&c, shards[i], id,
									     member ? did :
									     sd ? sd->data_id : 0);
			}
		}
		/* (nodes of the previous configuration stay listed) */
		if (!ret)
			ret = dxl_cluster_config_cas(zk, &c, ver, NULL);
		if (!ret && epoch)
			*epoch = c.epoch;
		dxl_cluster_config_clear(&c);
		if (ret != DXL_E_STALE)
			break;
	}
	free(d);
	return ret;
}

int dxlt_wait_cfg_epoch(struct dxl_zk *zk, uint32_t node, uint64_t epoch, uint32_t shard,
			int state, int timeout_ms)
{
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	if (!d)
		return dxl_err_set(DXL_E_NOMEM, "descriptor");
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	int ret = DXL_E_TIMEDOUT;
	uint64_t seen = 0;
	const char *st = "none";
	while (dxl_now_ms() < end) {
		if (dxl_replica_desc_get(zk, node, d) == 0) {
			seen = d->cfg_epoch;
			const struct dxl_shard_desc *sd = dxl_replica_desc_shard(d, shard);
			st = sd ? dxl_shard_state_name(sd->state) : "absent";
			if (d->cfg_epoch >= epoch &&
			    (state < 0 || (sd && (int)sd->state == state))) {
				ret = 0;
				break;
			}
		}
		usleep(10000);
	}
	free(d);
	if (ret)
		dxl_err_set(ret, "node %u: cfg_epoch %" PRIu64 " (want %" PRIu64 "), shard %u %s",
			    node, seen, epoch, shard, st);
	return ret;
}

void dxlt_server_cfg(struct dxl_replica_cfg *cfg, uint32_t node, const char *dir,
		     const char *zk, const char *cluster, uint32_t nshards)
{
	dxl_replica_cfg_init(cfg);
	cfg->node_id = node;
	snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s", dir);
	snprintf(cfg->zk.connect, sizeof(cfg->zk.connect), "%s", zk);
	snprintf(cfg->zk.cluster, sizeof(cfg->zk.cluster), "%s", cluster);
	cfg->zk.session_timeout_ms = 1000;
	cfg->durability = DXL_DUR_PROCESS;
	cfg->nshards = nshards;
	for (uint32_t i = 0; i < nshards; i++)
		cfg->shards[i] = i;
	cfg->ring_size = 256 << 10;
	cfg->writer_slots = 4;
	cfg->cm = false;
	cfg->pull_ms = 50;
	cfg->cm_check_ms = 100;
}

static void *server_main(void *arg)
{
	struct dxlt_server *srv = arg;
	srv->ret = dxl_replica_server_run(srv->s, &srv->stop);
	return NULL;
}

int dxlt_server_start(const struct dxl_replica_cfg *cfg, struct dxlt_server *srv)
{
	memset(srv, 0, sizeof(*srv));
	int ret = dxl_replica_server_new(cfg, &srv->s);
	if (ret)
		return ret;
	if (pthread_create(&srv->th, NULL, server_main, srv)) {
		dxl_replica_server_delete(&srv->s);
		return dxl_err_set(DXL_E_NOMEM, "server thread");
	}
	srv->running = true;
	return 0;
}

void dxlt_server_stop(struct dxlt_server *srv)
{
	if (srv->running) {
		__atomic_store_n(&srv->stop, 1, __ATOMIC_RELAXED);
		pthread_join(srv->th, NULL);
		srv->running = false;
	}
	dxl_replica_server_delete(&srv->s);
}
