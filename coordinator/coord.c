/* coord.c -- the coordinator: identity (coords/<id>), fabric, and its view of
 * the cluster (configuration epoch, primaries' table descriptors) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "coordinator/coord_internal.h"

void dxl_coord_cfg_init(struct dxl_coord_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->mode = DXL_TXN_HYBRID;
	cfg->loccache_bytes = 1u << 20;
	cfg->log_unavail_ms = 10000;
	cfg->fabric_timeout_ms = 1000;
	snprintf(cfg->bind, sizeof(cfg->bind), "127.0.0.1:0");
}

const char *dxl_txn_mode_name(enum dxl_txn_mode m)
{
	switch (m) {
	case DXL_TXN_HYBRID:
		return "hybrid";
	case DXL_TXN_ONESIDED:
		return "onesided";
	case DXL_TXN_TWOSIDED:
		return "twosided";
	}
	return "?";
}

int dxl_txn_mode_parse(const char *s, enum dxl_txn_mode *out)
{
	static const enum dxl_txn_mode all[] = {DXL_TXN_HYBRID, DXL_TXN_ONESIDED,
						DXL_TXN_TWOSIDED};
	for (unsigned i = 0; s && i < DXL_ARRAY_SIZE(all); i++)
		if (!strcmp(s, dxl_txn_mode_name(all[i]))) {
			*out = all[i];
			return 0;
		}
	return dxl_err_set(DXL_E_INVAL, "unknown transaction mode '%s' (hybrid, onesided, twosided)",
			   s ? s : "(null)");
}

static void view_free(struct dxl_coord *c, struct view *v)
{
	if (!v)
		return;
	for (uint32_t s = 0; s < v->nshards; s++)
		for (uint32_t i = 0; i < v->shards[s].ntables; i++)
			dxl_loccache_delete(&v->shards[s].tables[i].lc);
	free(v->shards);
	free(v);
	atomic_fetch_sub(&c->views_live, 1);
}

void coord_view_put(struct dxl_coord *c, struct view *v)
{
	if (v && atomic_fetch_sub(&v->refs, 1) == 1)
		view_free(c, v);
}

/* build a view of the configuration now in ZooKeeper */
static int view_build(struct dxl_coord *c, struct view **out)
{
	struct dxl_cluster_config cfg;
	dxl_cluster_config_init(&cfg);
	int ret = dxl_cluster_config_read(c->zk, &cfg, NULL);
	if (ret == DXL_E_NOENT)
		return dxl_err_set(DXL_E_UNAVAIL, "the cluster has no configuration (is it up?)");
	if (ret)
		return ret;
	struct view *v = calloc(1, sizeof(*v));
	struct dxl_replica_desc *d = malloc(sizeof(*d));
	if (v) {
		atomic_init(&v->refs, 1);
		atomic_fetch_add(&c->views_live, 1);
	}
	uint32_t n = 0;
	for (uint32_t i = 0; i < cfg.nshards; i++)
		n = DXL_MAX(n, cfg.shards[i].id + 1);
	if (v)
		v->shards = calloc(n ? n : 1, sizeof(*v->shards));
	if (!v || !d || !v->shards) {
		free(d);
		view_free(c, v);
		dxl_cluster_config_clear(&cfg);
		return dxl_err_set(DXL_E_NOMEM, "coordinator view");
	}
	v->epoch = cfg.epoch;
	v->nshards = n;
	v->provider = DXL_FABRIC_TCP;
	for (uint32_t s = 0; s < n; s++)
		snprintf(v->shards[s].why, sizeof(v->shards[s].why),
			 "shard %u is not in configuration epoch %" PRIu64, s, cfg.epoch);
	DXL_TESTPOINT("coord.view.config_read", c);
	for (uint32_t i = 0; i < cfg.nshards; i++) {
		const struct dxl_cluster_shard *sh = &cfg.shards[i];
		struct view_shard *vs = &v->shards[sh->id];
		vs->primary = sh->primary;
		int r = dxl_replica_desc_get(c->zk, sh->primary, d);
		if (r) {
			snprintf(vs->why, sizeof(vs->why), "shard %u: primary %u: %s", sh->id,
				 sh->primary, r == DXL_E_NOENT ? "not registered (down?)" : dxl_errmsg());
			continue;
		}
		/* any registered replica names the cluster's fabric provider,
		 * whatever its epoch or state (dxl_coord_new waits for one) */
		v->provider = d->provider;
		v->provider_known = true;
		if (c->f && d->provider != c->provider) {
			snprintf(vs->why, sizeof(vs->why),
				 "shard %u: primary %u serves the %s fabric, this coordinator "
				 "runs on %s (restart it)", sh->id, sh->primary,
				 dxl_fabric_provider_name(d->provider),
				 dxl_fabric_provider_name(c->provider));
			continue;
		}
		/* exactly this epoch: a descriptor of a newer one belongs to
		 * another configuration (this node may not be the primary in it
		 * any more; its rkeys would reach a backup's tables) */
		if (d->cfg_epoch != cfg.epoch) {
			snprintf(vs->why, sizeof(vs->why),
				 "shard %u: primary %u is registered for epoch %" PRIu64
				 ", not %" PRIu64 " (the configuration changed: read it again)",
				 sh->id, sh->primary, d->cfg_epoch, cfg.epoch);
			continue;
		}
		const struct dxl_shard_desc *sd = dxl_replica_desc_shard(d, sh->id);
		if (!sd || !d->rpc_ctx || !sd->ntables) {
			snprintf(vs->why, sizeof(vs->why),
				 "shard %u: primary %u hosts no tables (engine.tables)", sh->id,
				 sh->primary);
			continue;
		}
		if (sd->state != DXL_SHARD_MEMBER) {
			snprintf(vs->why, sizeof(vs->why), "shard %u: primary %u is %s, not a member",
				 sh->id, sh->primary, dxl_shard_state_name(sd->state));
			continue;
		}
		v->provider = d->provider;
		vs->durability = d->durability;
		snprintf(vs->addr, sizeof(vs->addr), "%s", d->addr);
		vs->rpc_ctx = d->rpc_ctx;
		vs->nrings = sd->nrings;
		vs->ntables = sd->ntables;
		for (uint32_t t = 0; t < sd->ntables && !ret; t++) {
			vs->tables[t].st = sd->tables[t];
			ret = dxl_loccache_new(&sd->tables[t].ihdr, c->cfg.loccache_bytes,
					       &vs->tables[t].lc);
		}
		vs->ok = !ret;
	}
	free(d);
	dxl_cluster_config_clear(&cfg);
	if (ret) {
		view_free(c, v);
		return ret;
	}
	*out = v;
	return 0;
}

int coord_refresh(struct dxl_coord *c)
{
	struct view *v = NULL;
	int ret = view_build(c, &v);
	if (ret)
		return ret;
	pthread_mutex_lock(&c->mu);
	struct view *cur = c->view;
	if (cur && cur->epoch > v->epoch) { /* someone published a newer one */
		pthread_mutex_unlock(&c->mu);
		coord_view_put(c, v);
		return 0;
	}
	c->view = v; /* its first reference is the coordinator's */
	atomic_store(&c->epoch, v->epoch);
	atomic_store(&c->stale, false);
	c->last_refresh_ns = dxl_now_ns();
	pthread_mutex_unlock(&c->mu);
	atomic_fetch_add(&c->refreshes, 1);
	coord_view_put(c, cur); /* freed now, or by the last transaction using it */
	DXL_DEBUG("event=coord_view coord=%u epoch=%" PRIu64, c->id, v->epoch);
	return 0;
}

void coord_mark_stale(struct dxl_coord *c, const char *why)
{
	if (!atomic_exchange(&c->stale, true))
		DXL_DEBUG("event=coord_view_stale coord=%u why=\"%s\"", c->id, why);
}

struct view *coord_view_get(struct dxl_coord *c)
{
	/* at most one refresh per 2 ms (every transaction of a failover
	 * window would re-read ZooKeeper otherwise) */
	if (atomic_load(&c->stale) && dxl_now_ns() - c->last_refresh_ns > 2000000) {
		if (coord_refresh(c))
			c->last_refresh_ns = dxl_now_ns();
	}
	pthread_mutex_lock(&c->mu);
	struct view *v = c->view;
	if (v)
		atomic_fetch_add(&v->refs, 1);
	pthread_mutex_unlock(&c->mu);
	return v;
}

int coord_session_check(struct dxl_coord *c)
{
	if (dxl_zk_state(c->zk) != DXL_ZK_EXPIRED &&
	    dxl_zk_session_epoch(c->zk) == c->session_epoch)
		return 0;
	pthread_mutex_lock(&c->reg_mu);
	int ret = 0;
	if (dxl_zk_state(c->zk) == DXL_ZK_EXPIRED) {
		/* its ephemeral znodes are gone: other coordinators resolve what
		 * the old id left (its writers died with the session) */
		DXL_WARN("event=coord_session_expired coord=%u action=reopen", (uint32_t)c->id);
		ret = dxl_zk_reopen(c->zk);
	}
	if (!ret && dxl_zk_session_epoch(c->zk) != c->session_epoch) {
		uint32_t old = c->id, id = 0;
		/* any free id: the old one is being resolved */
		ret = dxl_coord_znode_create(c->zk, 0, DXL_COORD_MAX_ID,
					     c->cfg.info[0] ? c->cfg.info : NULL, &id);
		if (!ret) {
			c->id = id;
			c->session_epoch = dxl_zk_session_epoch(c->zk);
			atomic_fetch_add(&c->inc, 1);
			coord_mark_stale(c, "new session");
			DXL_WARN("event=coord_registered_again coord=%u was=%u session_epoch=%" PRIu64,
				 id, old, c->session_epoch);
		}
	}
	pthread_mutex_unlock(&c->reg_mu);
	if (ret)
		dxl_err_prefix("coordinator %u: its ZooKeeper session expired", (uint32_t)c->id);
	return ret;
}

int dxl_coord_new(struct dxl_zk *zk, const struct dxl_coord_cfg *cfg,
		  struct dxl_coord **out)
{
	struct dxl_coord_cfg def;
	if (!cfg) {
		dxl_coord_cfg_init(&def);
		cfg = &def;
	}
	if (!zk || !out)
		return dxl_err_set(DXL_E_INVAL, "dxl_coord_new: NULL argument");
	if (cfg->coord_id > DXL_COORD_MAX_ID)
		return dxl_err_set(DXL_E_INVAL, "coordinator id %u over %u", cfg->coord_id,
				   DXL_COORD_MAX_ID);
	if (cfg->mode != DXL_TXN_HYBRID && cfg->mode != DXL_TXN_ONESIDED &&
	    cfg->mode != DXL_TXN_TWOSIDED)
		return dxl_err_set(DXL_E_INVAL, "unknown transaction mode %d", (int)cfg->mode);
	if (cfg->loccache_bytes < 4096)
		return dxl_err_set(DXL_E_INVAL, "loccache_bytes %zu (at least 4096)",
				   cfg->loccache_bytes);
	struct dxl_coord *c = calloc(1, sizeof(*c));
	if (!c)
		return dxl_err_set(DXL_E_NOMEM, "coordinator");
	c->zk = zk;
	c->cfg = *cfg;
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->reg_mu, NULL);
	atomic_init(&c->inc, 1);
	/* sequence numbers start at the wall clock in microseconds: a later
	 * coordinator with the same id (this one's znode gone) never reuses a
	 * transaction id -- a lock word left by this one stays recognisable */
	atomic_init(&c->seq, ((dxl_wall_ms() * 1000) & ((1ull << 47) - 1)));
	uint32_t id = 0;
	int ret = dxl_coord_znode_create(zk, cfg->coord_id, DXL_COORD_MAX_ID,
					 cfg->info[0] ? cfg->info : NULL, &id);
	if (ret)
		goto fail;
	c->id = id;
	c->session_epoch = dxl_zk_session_epoch(zk);
	/* the configuration first: the fabric is the primaries' provider,
	 * named by their descriptors. While none is registered yet (a cluster
	 * starting, every primary failing over) wait for one: a fabric
	 * guessed now (tcp) could never reach verbs replicas later. */
	uint64_t until = dxl_now_ms() + c->cfg.log_unavail_ms;
	while (!(ret = coord_refresh(c)) && !c->view->provider_known &&
	       dxl_now_ms() < until)
		usleep(50000);
	if (!ret && !c->view->provider_known)
		ret = dxl_err_set(DXL_E_UNAVAIL,
				  "no replica of the cluster registered in ZooKeeper within %u ms "
				  "(its descriptor names the fabric provider): is the cluster up?",
				  c->cfg.log_unavail_ms);
	if (ret) {
		if (c->view) { /* an earlier round's view: its only reference */
			coord_view_put(c, c->view);
			c->view = NULL;
		}
		dxl_coord_znode_delete(zk, c->id);
		goto fail;
	}
	struct view *v0 = c->view;
	c->provider = v0->provider;
	const char *peer = NULL;
	for (uint32_t s = 0; s < v0->nshards && !peer; s++)
		if (v0->shards[s].ok)
			peer = v0->shards[s].addr;
	struct dxl_fabric_cfg fc;
	dxl_fabric_cfg_init(&fc);
	fc.node_id = 0x10000u + c->id; /* coordinators are not replica nodes */
	snprintf(fc.listen_addr, sizeof(fc.listen_addr), "%s", cfg->bind);
	fc.timeout_ms = cfg->fabric_timeout_ms;
	/* verbs: a loopback bind becomes the interface that reaches them */
	if ((ret = dxl_fabric_cfg_client(&fc, v0->provider, peer)) ||
	    (ret = dxl_fabric_new(&fc, &c->f))) {
		coord_view_put(c, c->view); /* its only reference */
		c->view = NULL;
		dxl_coord_znode_delete(zk, c->id);
		goto fail;
	}
	DXL_INFO("event=coord_started coord=%u mode=%s epoch=%" PRIu64, c->id,
		 dxl_txn_mode_name(cfg->mode), atomic_load(&c->epoch));
	*out = c;
	return 0;
fail:
	pthread_mutex_destroy(&c->mu);
	pthread_mutex_destroy(&c->reg_mu);
	free(c);
	return ret;
}

void dxl_coord_delete(struct dxl_coord **cp)
{
	struct dxl_coord *c = cp ? *cp : NULL;
	if (!c)
		return;
	for (uint32_t i = 0; i < COORD_MAX_WORKERS; i++)
		DXL_ASSERT(!c->workers[i]);
	dxl_fabric_delete(&c->f);
	coord_view_put(c, c->view); /* every worker is gone: the last reference */
	c->view = NULL;
	if (atomic_load(&c->views_live))
		DXL_WARN("event=coord_views_leaked coord=%u views=%" PRId64, c->id,
			 (int64_t)atomic_load(&c->views_live));
	dxl_coord_znode_delete(c->zk, c->id);
	pthread_mutex_destroy(&c->mu);
	pthread_mutex_destroy(&c->reg_mu);
	free(c);
	*cp = NULL;
}

uint32_t dxl_coord_id(const struct dxl_coord *c)
{
	return c->id;
}

enum dxl_txn_mode dxl_coord_mode(const struct dxl_coord *c)
{
	return c->cfg.mode;
}

uint64_t dxl_coord_epoch(const struct dxl_coord *c)
{
	return atomic_load(&((struct dxl_coord *)c)->epoch);
}
