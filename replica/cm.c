/* cm.c -- the configuration manager's policy and its reconciliation step
 * (include/dxl/replica.h "configuration manager", docs/replica-design.md,
 * docs/operations.md) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/replica.h"

void dxl_cm_params_init(struct dxl_cm_params *p)
{
	p->min_replicas = 2;
	p->replication = 3;
}

static const struct dxl_replica_desc *find_live(const struct dxl_replica_desc *live,
						uint32_t nlive, uint32_t id)
{
	for (uint32_t i = 0; i < nlive; i++)
		if (live[i].node_id == id)
			return &live[i];
	return NULL;
}

static bool in_list(const uint32_t *v, uint32_t n, uint32_t id)
{
	for (uint32_t i = 0; i < n; i++)
		if (v[i] == id)
			return true;
	return false;
}

/* appendf -- add a clause to the reason text */
static void appendf(char *buf, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t cap, const char *fmt, ...)
{
	if (!buf || !cap)
		return;
	size_t o = strlen(buf);
	if (o + 1 >= cap)
		return;
	if (o)
		o += (size_t)snprintf(buf + o, cap - o, "; ");
	if (o + 1 >= cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + o, cap - o, fmt, ap);
	va_end(ap);
}

int dxl_cm_plan(const struct dxl_cluster_config *cur,
		const struct dxl_replica_desc *live, uint32_t nlive,
		const struct dxl_cm_params *p, struct dxl_cluster_config *next,
		char *why, size_t whycap)
{
	if (!cur || (!live && nlive) || !p || !next)
		return dxl_err_set(DXL_E_INVAL, "dxl_cm_plan: NULL argument");
	if (p->min_replicas < 1 || p->replication < 1 ||
	    p->replication > DXL_CONFIG_MAX_REPLICAS)
		return dxl_err_set(DXL_E_INVAL,
				   "cm: min_replicas %u / replication %u (1..%d)",
				   p->min_replicas, p->replication,
				   DXL_CONFIG_MAX_REPLICAS);
	if (why && whycap)
		why[0] = 0;
	/* the plan is built in n and moved to *next only when it is a change:
	 * *next stays untouched otherwise (header contract) */
	struct dxl_cluster_config n;
	int ret = dxl_cluster_config_copy(&n, cur);
	if (ret)
		return ret;
	bool changed = false;
	for (uint32_t si = 0; si < cur->nshards; si++) {
		const struct dxl_cluster_shard *sh = &cur->shards[si];
		uint32_t m[DXL_CONFIG_MAX_REPLICAS];
		uint32_t nm = dxl_cluster_shard_members(sh, m);
		/* the members that are alive (registered; a member that came
		 * back on its data directory is alive again: it missed nothing,
		 * since nothing is acknowledged without every member) */
		uint32_t a[DXL_CONFIG_MAX_REPLICAS], na = 0, ndead = 0;
		for (uint32_t i = 0; i < nm; i++) {
			const struct dxl_replica_desc *d = find_live(live, nlive, m[i]);
			if (d && dxl_replica_desc_shard(d, sh->id))
				a[na++] = m[i];
			else
				ndead++;
		}
		if (na == 0) {
			if (ndead)
				appendf(why, whycap, "shard %u: no member alive, unavailable", sh->id);
			continue; /* nobody holds the acknowledged records */
		}
		/* the candidates: live non-members that host the shard and have
		 * caught up with it, lowest id first */
		uint32_t c[DXL_CONFIG_MAX_REPLICAS], nc = 0;
		for (uint32_t i = 0; i < nlive && na + nc < p->replication &&
				     na + nc < DXL_CONFIG_MAX_REPLICAS; i++) {
			uint32_t best = UINT32_MAX;
			/* pick the smallest id not yet taken (live[] may be
			 * unsorted) */
			for (uint32_t j = 0; j < nlive; j++) {
				const struct dxl_shard_desc *sd =
					dxl_replica_desc_shard(&live[j], sh->id);
				uint32_t id = live[j].node_id;
				if (!sd || sd->state != DXL_SHARD_SYNCED || in_list(m, nm, id) ||
				    in_list(c, nc, id) || id >= best)
					continue;
				best = id;
			}
			if (best == UINT32_MAX)
				break;
			c[nc++] = best;
		}
		if (!ndead && !nc)
			continue;
		if (na + nc < p->min_replicas && ndead) {
			appendf(why, whycap,
				"shard %u: %u of %u members alive, below cm.min_replicas %u: unavailable until one returns",
				sh->id, na, nm, p->min_replicas);
			continue;
		}
		/* the primary stays if alive; otherwise the first live backup
		 * (every member holds every acknowledged record) */
		uint32_t primary = a[0];
		uint32_t b[DXL_CONFIG_MAX_REPLICAS], nb = 0;
		for (uint32_t i = 1; i < na; i++)
			b[nb++] = a[i];
		for (uint32_t i = 0; i < nc; i++)
			b[nb++] = c[i];
		if ((ret = dxl_cluster_config_set_shard(&n, sh->id, primary, b, nb)))
			goto fail;
		for (uint32_t i = 0; i < nc; i++) {
			const struct dxl_replica_desc *d = find_live(live, nlive, c[i]);
			if ((ret = dxl_cluster_config_set_node(&n, c[i], d->addr)))
				goto fail;
		}
		changed = true;
		char dead[96] = "", added[96] = "";
		for (uint32_t i = 0, o = 0; i < nm; i++)
			if (!in_list(a, na, m[i]) && o + 12 < sizeof(dead))
				o += (uint32_t)snprintf(dead + o, sizeof(dead) - o, "%s%u",
							o ? "," : "", m[i]);
		for (uint32_t i = 0, o = 0; i < nc; i++)
			if (o + 12 < sizeof(added))
				o += (uint32_t)snprintf(added + o, sizeof(added) - o, "%s%u",
							o ? "," : "", c[i]);
		appendf(why, whycap, "shard %u: primary %u%s%s%s%s%s", sh->id, primary,
			primary != sh->primary ? " (promoted)" : "", ndead ? ", removed " : "",
			dead, nc ? ", added " : "", added);
	}
	if (!changed) {
		dxl_cluster_config_clear(&n);
		return 0;
	}
	/* nodes in no replica set any more leave the configuration */
	for (uint32_t i = 0; i < n.nnodes;) {
		uint32_t id = n.nodes[i].id;
		bool used = false;
		for (uint32_t s = 0; s < n.nshards && !used; s++) {
			const struct dxl_cluster_shard *sh = &n.shards[s];
			used = sh->primary == id || in_list(sh->backups, sh->nbackups, id);
		}
		if (used) {
			i++;
			continue;
		}
		if ((ret = dxl_cluster_config_remove_node(&n, id)))
			goto fail;
	}
	n.epoch = cur->epoch + 1;
	if ((ret = dxl_cluster_config_validate(&n)))
		goto fail;
	*next = n;
	return 1;
fail:
	dxl_cluster_config_clear(&n);
	return ret;
}

int dxl_cm_reconcile(struct dxl_zk *zk, const struct dxl_cm_params *p,
		     uint64_t *new_epoch)
{
	struct dxl_cluster_config cur, next;
	int32_t ver = 0;
	int ret = dxl_cluster_config_read(zk, &cur, &ver);
	if (ret == DXL_E_NOENT)
		return 0; /* no configuration yet: nothing to manage */
	if (ret)
		return ret;
	struct dxl_member_list ml = {0};
	struct dxl_replica_desc *live = NULL;
	uint32_t nlive = 0;
	if ((ret = dxl_member_list(zk, &ml)))
		goto out;
	live = calloc(ml.n ? ml.n : 1, sizeof(*live));
	if (!live) {
		ret = dxl_err_set(DXL_E_NOMEM, "cm: member list");
		goto out;
	}
	for (size_t i = 0; i < ml.n; i++) {
		if (dxl_replica_desc_decode(ml.v[i].payload, strlen(ml.v[i].payload),
					    &live[nlive])) {
			DXL_WARN("event=cm_bad_descriptor node=%u msg=\"%s\"",
				 ml.v[i].node_id, dxl_errmsg());
			continue;
		}
		live[nlive].node_id = ml.v[i].node_id;
		nlive++;
	}
	char why[512];
	ret = dxl_cm_plan(&cur, live, nlive, p, &next, why, sizeof(why));
	if (ret == 1) {
		ret = dxl_cluster_config_cas(zk, &next, ver, NULL);
		if (ret == 0) {
			DXL_INFO("event=cm_reconfigured epoch=%" PRIu64 " why=\"%s\"",
				 next.epoch, why);
			if (new_epoch)
				*new_epoch = next.epoch;
			ret = 1;
		} else if (ret == DXL_E_STALE) {
			ret = 0; /* someone else changed it: the next round sees it */
		}
		dxl_cluster_config_clear(&next);
	} else if (ret == 0 && why[0]) {
		DXL_DEBUG("event=cm_no_change epoch=%" PRIu64 " why=\"%s\"", cur.epoch, why);
	}
out:
	free(live);
	dxl_member_list_free(&ml);
	dxl_cluster_config_clear(&cur);
	return ret;
}
