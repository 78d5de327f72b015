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

/* what a member of a shard is to the CM */
enum member_class {
	M_DEAD = 0,    /* no descriptor, or it does not list the shard: its
			  session ended (or it lost the shard) -- removable */
	M_COUNTED = 1, /* registered for this epoch (cfg_epoch >= it) and says
			  MEMBER for the shard: holds every acknowledged record
			  -- counts as alive, may be promoted */
	M_WAITING = 2, /* alive but not (yet) in sync: joining (its join pull
			  is not done), registered for an older epoch, not yet
			  through its configuration -- kept, never counted */
	M_RENEWED = 3, /* alive, but its copy of the shard has another data
			  identity than the one recorded when it was added (it
			  restarted on an empty or recreated data directory):
			  it holds nothing it was added for -- removable like a
			  dead member; once it has caught up (SYNCED) it is
			  added again with its new identity */
	M_LEFT = 4,    /* alive and registered for this epoch, but it says
			  it is not a member (catching up, synced or
			  unassigned): it gave up its join (its join pull
			  failed for replica.join_timeout_ms), or its store is
			  incomplete -- handled like M_RENEWED */
};

/* gone -- the member holds nothing the shard may rely on: removable (down
 * to min_replicas), never primary */
static bool gone(enum member_class c)
{
	return c == M_DEAD || c == M_RENEWED || c == M_LEFT;
}

/*
 * classify -- the rule for who counts as alive (docs/replica.md "Who counts
 * as alive"): only a member that has registered for this epoch as a MEMBER
 * of the shard. A member joins (JOINING) until its last copy from the
 * primary is done, and says MEMBER only then, so "registered for this epoch
 * as a MEMBER" implies "registered for the epoch that added it, after its
 * join pull". Candidates (SYNCED non-members) never count.
 */
static enum member_class classify(const struct dxl_replica_desc *live, uint32_t nlive,
				  uint64_t epoch, const struct dxl_cluster_shard *sh, uint32_t id)
{
	const struct dxl_replica_desc *d = find_live(live, nlive, id);
	const struct dxl_shard_desc *sd = d ? dxl_replica_desc_shard(d, sh->id) : NULL;
	if (!sd)
		return M_DEAD;
	uint64_t rec = dxl_cluster_shard_data_id(sh, id);
	if (rec && sd->data_id != rec)
		return M_RENEWED;
	if (sd->state == DXL_SHARD_MEMBER && d->cfg_epoch >= epoch)
		return M_COUNTED;
	if (sd->state != DXL_SHARD_JOINING && d->cfg_epoch >= epoch)
		return M_LEFT;
	return M_WAITING;
}

/* joining -- the member waits for its join pull, which copies from the
 * primary (JOINING, whatever epoch it says) */
static bool joining(const struct dxl_replica_desc *live, uint32_t nlive,
		    const struct dxl_cluster_shard *sh, uint32_t id)
{
	const struct dxl_replica_desc *d = find_live(live, nlive, id);
	const struct dxl_shard_desc *sd = d ? dxl_replica_desc_shard(d, sh->id) : NULL;
	return sd && sd->state == DXL_SHARD_JOINING;
}

/* list -- "1,4" into buf */
static void list(char *buf, size_t cap, const uint32_t *v, uint32_t n)
{
	buf[0] = 0;
	for (uint32_t i = 0, o = 0; i < n && o + 12 < cap; i++)
		o += (uint32_t)snprintf(buf + o, cap - o, "%s%u", o ? "," : "", v[i]);
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
		enum member_class cls[DXL_CONFIG_MAX_REPLICAS] = {M_DEAD};
		uint32_t na = 0, ndead = 0, nnew = 0, nleft = 0, njoin = 0, first_counted = 0;
		for (uint32_t i = 0; i < nm; i++) {
			cls[i] = classify(live, nlive, cur->epoch, sh, m[i]);
			if (cls[i] == M_COUNTED && !na++)
				first_counted = m[i];
			ndead += cls[i] == M_DEAD;
			nnew += cls[i] == M_RENEWED;
			nleft += cls[i] == M_LEFT;
			njoin += cls[i] == M_WAITING && joining(live, nlive, sh, m[i]);
		}
		/* the primary stays unless it is gone (dead, on a new store, or
		 * no longer a member); then the first member that counts (every
		 * one of those holds every acknowledged record: nothing is
		 * acknowledged without them) */
		uint32_t primary = sh->primary;
		if (gone(cls[0])) {
			if (!na) {
				appendf(why, whycap,
					"shard %u: no member alive and in sync (%u of %u dead, %u on a new store, %u not members), unavailable",
					sh->id, ndead, nm, nnew, nleft);
				continue; /* nobody is sure to hold the records */
			}
			primary = first_counted;
		}
		/* dead members go only if at least min_replicas members that
		 * count remain; a candidate never counts (it has not joined) */
		bool can_remove = na >= p->min_replicas;
		uint32_t b[DXL_CONFIG_MAX_REPLICAS], nb = 0, nlive_kept = 0;
		uint32_t removed[DXL_CONFIG_MAX_REPLICAS], nrem = 0;
		uint32_t kept_dead[DXL_CONFIG_MAX_REPLICAS], nkd = 0;
		uint32_t readmit[DXL_CONFIG_MAX_REPLICAS], nre = 0;
		bool readmit_new = false; /* one of them on a new store */
		for (uint32_t i = 0; i < nm; i++) {
			/* a member on a new store that has caught up: added
			 * again, with its new identity (it joins like any new
			 * member: JOINING, its last copy from the primary) */
			if (cls[i] == M_RENEWED || cls[i] == M_LEFT) {
				const struct dxl_shard_desc *sd = dxl_replica_desc_shard(
					find_live(live, nlive, m[i]), sh->id);
				if (sd->state == DXL_SHARD_SYNCED) {
					readmit_new |= cls[i] == M_RENEWED;
					readmit[nre++] = m[i];
					nlive_kept++;
					if (m[i] != primary)
						b[nb++] = m[i];
					continue;
				}
			}
			bool g = gone(cls[i]);
			if (g && can_remove) {
				removed[nrem++] = m[i];
				continue;
			}
			if (g)
				kept_dead[nkd++] = m[i];
			else
				nlive_kept++;
			if (m[i] != primary)
				b[nb++] = m[i];
		}
		/* the candidates: live non-members that host the shard and have
		 * caught up with it, lowest id first, while the shard has fewer
		 * than `replication` live members */
		uint32_t c[DXL_CONFIG_MAX_REPLICAS], nc = 0;
		while (nlive_kept + nc < p->replication && 1 + nb + nc < DXL_CONFIG_MAX_REPLICAS) {
			uint32_t best = UINT32_MAX;
			/* the smallest id not yet taken (live[] may be unsorted) */
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
		/* nothing removed or added: no change -- a dead primary alone
		 * is not replaced while its shard cannot lose a member anyway
		 * (writers wait for it either way). Unless a member waits to
		 * join: its join pull copies from the primary, so with a dead
		 * one it waits for good, and the shard with it (the members
		 * that count are below min_replicas until it has joined).
		 * Then the first member that counts is promoted and the dead
		 * primary stays listed, as a backup (writers still wait for
		 * it); once the joiner has joined from the new primary it
		 * counts, and the dead go. */
		bool promote_for_join = primary != sh->primary && njoin;
		if (!nrem && !nc && !nre && !promote_for_join) {
			if (nkd)
				appendf(why, whycap,
					"shard %u: %u of %u members alive and in sync, below cm.min_replicas %u: unavailable until one returns",
					sh->id, na, nm, p->min_replicas);
			continue;
		}
		for (uint32_t i = 0; i < nc; i++)
			b[nb++] = c[i];
		if ((ret = dxl_cluster_config_set_shard(&n, sh->id, primary, b, nb)))
			goto fail;
		for (uint32_t i = 0; i < nc; i++) {
			const struct dxl_replica_desc *d = find_live(live, nlive, c[i]);
			if ((ret = dxl_cluster_config_set_node(&n, c[i], d->addr)))
				goto fail;
		}
		/* the data identities: kept for the members that stay, taken
		 * from the descriptor of those added or added again, and
		 * recorded for the members that count and had none recorded */
		uint32_t nm2 = 1 + nb;
		for (uint32_t k = 0; k < nm2; k++) {
			uint32_t id = k ? b[k - 1] : primary;
			uint64_t did = dxl_cluster_shard_data_id(sh, id);
			const struct dxl_replica_desc *d = find_live(live, nlive, id);
			const struct dxl_shard_desc *sd = d ? dxl_replica_desc_shard(d, sh->id) : NULL;
			bool fresh = in_list(c, nc, id) || in_list(readmit, nre, id) ||
				     (!did && in_list(m, nm, id) && sd &&
				      classify(live, nlive, cur->epoch, sh, id) == M_COUNTED);
			if (fresh)
				did = sd ? sd->data_id : 0;
			if ((ret = dxl_cluster_config_set_data_id(&n, sh->id, id, did)))
				goto fail;
		}
		changed = true;
		char rem[96], added[96], kd[96], ra[96];
		list(rem, sizeof(rem), removed, nrem);
		list(added, sizeof(added), c, nc);
		list(kd, sizeof(kd), kept_dead, nkd);
		list(ra, sizeof(ra), readmit, nre);
		appendf(why, whycap, "shard %u: primary %u%s%s%s%s%s%s%s%s%s%s%s%s", sh->id, primary,
			primary != sh->primary ? " (promoted)" : "",
			promote_for_join && !nrem && !nc && !nre
				? " for a member that waits to join from it"
				: "",
			nrem ? ", removed " : "", rem,
			nc ? ", added " : "", added, nre ? ", added again " : "", ra,
			!nre ? "" : readmit_new ? " (caught up on a new store)" : " (caught up)",
			nkd ? ", kept " : "", kd,
			nkd ? " (dead, on a new store or no longer a member, but below cm.min_replicas)" : "");
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
