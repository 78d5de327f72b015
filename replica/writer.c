/* writer.c -- a shard's writer that follows the configuration: writer slot,
 * appender to every member, reopen with repair on failure or new epoch,
 * retry without duplicates (include/dxl/replica.h "writers",
 * docs/operations.md) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/replica.h"

enum ent_state { E_QUEUED = 0, E_POSTED = 1, E_DONE = 2 };

struct entry {
	uint64_t ts;
	uint64_t txn_id;
	uint64_t token;   /* the appender's, while POSTED */
	int status;       /* when DONE */
	enum ent_state state;
	bool sent;        /* posted at least once: may be in the log */
	uint32_t len;
	uint8_t *payload;
	uint16_t nparts;
	uint32_t parts[DXL_LOG_WRITER_MAX_PARTS];
};

/* hold_until_decided: the timestamps of records not decided yet, in append
 * (= timestamp) order; the watermark never passes the first */
struct und {
	uint64_t ts;
	bool decided;
};

struct dxl_log_writer {
	struct dxl_zk *zk; /* borrowed */
	struct dxl_log_writer_cfg cfg;
	uint32_t slot;
	bool slot_held;
	uint64_t session_epoch; /* the session holding the slot */
	struct dxl_hlc clk;
	struct dxl_fabric *f;
	struct dxl_ctx *ctx;
	struct dxl_appender *ap;
	/* the queue: entries [head, tail) are unfinished or unreported */
	struct entry *q;
	uint64_t head, post, tail; /* post: next QUEUED entry to post */
	uint32_t qcap;
	/* failure handling */
	bool broken;            /* stop posting; reopen */
	bool dead;              /* the slot lease ended: only delete is left */
	bool slot_ahead;        /* the slot's ring is ahead of our clock */
	uint64_t broken_since_ms;
	uint64_t drain_until_ms;
	uint64_t last_try_ms;
	uint64_t last_hb_ms;
	bool acked_since_hb;    /* an append was acknowledged after the last
				   heartbeat: the next idle moment writes one */
	char why[256];          /* why the shard is unavailable (last reopen) */
	struct und *und;        /* [ucap], entries [uhead, utail) */
	uint64_t uhead, utail;
	uint32_t ucap;
	/* what the writer appends to now */
	struct dxl_log_writer_info info;
};

void dxl_log_writer_cfg_init(struct dxl_log_writer_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->max_inflight = 16;
	cfg->max_queue = 4096;
	cfg->max_record = 65536;
	cfg->unavail_ms = 30000;
	cfg->retry_ms = 20;
	cfg->heartbeat_ms = 100;
	cfg->fabric_timeout_ms = 1000;
	cfg->slot = -1;
}

static struct entry *ent(struct dxl_log_writer *w, uint64_t i)
{
	return &w->q[i % w->qcap];
}

static uint64_t hold_ts(const struct dxl_log_writer *w)
{
	uint64_t h = w->uhead < w->utail ? w->und[w->uhead % w->ucap].ts : UINT64_MAX;
	return w->cfg.hold_below ? DXL_MIN(h, w->cfg.hold_below) : h;
}

static void apply_hold(struct dxl_log_writer *w)
{
	if (w->ap && (w->cfg.hold_until_decided || w->cfg.hold_below))
		dxl_appender_set_hold(w->ap, hold_ts(w));
}

void dxl_log_writer_set_hold_below(struct dxl_log_writer *w, uint64_t ts)
{
	bool was = w->cfg.hold_below != 0;
	w->cfg.hold_below = ts;
	if (w->ap && (was || ts))
		dxl_appender_set_hold(w->ap, hold_ts(w));
}

static void collect(struct dxl_log_writer *w);

/* ---- opening the shard (and reopening it) ----------------------------------- */

static void close_appender(struct dxl_log_writer *w)
{
	dxl_appender_delete(&w->ap);
	dxl_ctx_delete(&w->ctx);
}

/*
 * try_open -- one attempt: read the configuration, check that every member
 * of the shard is registered for this epoch (its rkeys are this epoch's),
 * and open an appender with repair (the primary is the reference). Entries
 * that were in flight are resolved by the ring's last timestamp: those at
 * or below it are in the log on every member now (acknowledged), the others
 * are queued again.
 */
static int try_open(struct dxl_log_writer *w)
{
	struct dxl_cluster_config c;
	int ret = dxl_cluster_config_read(w->zk, &c, NULL);
	if (ret == DXL_E_NOENT)
		return dxl_err_set(DXL_E_UNAVAIL, "the cluster has no configuration");
	if (ret)
		return ret;
	const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, w->cfg.shard);
	if (!sh) {
		dxl_cluster_config_clear(&c);
		return dxl_err_set(DXL_E_NOENT, "unknown shard %u (configuration epoch %" PRIu64 ")",
				   w->cfg.shard, c.epoch);
	}
	uint32_t ids[DXL_CONFIG_MAX_REPLICAS];
	uint64_t rec[DXL_CONFIG_MAX_REPLICAS];
	uint32_t n = dxl_cluster_shard_members(sh, ids);
	for (uint32_t i = 0; i < n; i++)
		rec[i] = dxl_cluster_shard_data_id(sh, ids[i]);
	uint64_t epoch = c.epoch;
	dxl_cluster_config_clear(&c);
	/* (the configuration and the descriptors are read one after the
	 * other: tests change the configuration here) */
	DXL_TESTPOINT("writer.open.config_read", w);

	struct dxl_log_target t[DXL_CONFIG_MAX_REPLICAS];
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	if (!d)
		return dxl_err_set(DXL_E_NOMEM, "writer");
	enum dxl_fabric_provider prov = DXL_FABRIC_TCP;
	for (uint32_t i = 0; i < n && !ret; i++) {
		ret = dxl_replica_desc_get(w->zk, ids[i], d);
		if (ret == DXL_E_NOENT) {
			ret = dxl_err_set(DXL_E_UNAVAIL,
					  "member %u of shard %u (epoch %" PRIu64 ") is not registered (down?)",
					  ids[i], w->cfg.shard, epoch);
			break;
		}
		if (ret)
			break;
		/* exactly this epoch: registered for an older one, its rkeys
		 * are not fenced at this epoch's change yet; for a newer one,
		 * the member set read is not that epoch's (it may lack a member
		 * that epoch added: appends acknowledged without it) */
		if (d->cfg_epoch != epoch) {
			ret = dxl_err_set(DXL_E_UNAVAIL,
					  d->cfg_epoch < epoch
						  ? "member %u of shard %u has not registered for epoch %" PRIu64
						    " yet (at %" PRIu64 ")"
						  : "member %u of shard %u: the configuration read (epoch %" PRIu64
						    ") is older than its registration (epoch %" PRIu64
						    "): reading it again",
					  ids[i], w->cfg.shard, epoch, d->cfg_epoch);
			break;
		}
		const struct dxl_shard_desc *sd = dxl_replica_desc_shard(d, w->cfg.shard);
		if (!sd) {
			ret = dxl_err_set(DXL_E_UNAVAIL, "member %u does not host shard %u", ids[i],
					  w->cfg.shard);
			break;
		}
		/* joining (its last copy from the primary is not done), or not
		 * yet a member as far as it knows: appends would not be on a
		 * complete copy */
		/* another copy than the one the configuration added (the member
		 * restarted on a new data directory): as the repair reference
		 * it would cut the others' acknowledged records */
		if (rec[i] && sd->data_id != rec[i]) {
			ret = dxl_err_set(DXL_E_UNAVAIL,
					  "member %u of shard %u is on a new store (data id 0x%" PRIx64
					  ", epoch %" PRIu64 " added 0x%" PRIx64
					  "): waiting for it to catch up and be added again",
					  ids[i], w->cfg.shard, sd->data_id, epoch, rec[i]);
			break;
		}
		if (sd->state != DXL_SHARD_MEMBER) {
			ret = dxl_err_set(DXL_E_UNAVAIL,
					  "member %u of shard %u is %s, not yet a member (epoch %" PRIu64 ")",
					  ids[i], w->cfg.shard, dxl_shard_state_name(sd->state), epoch);
			break;
		}
		if (w->slot >= sd->nrings) {
			ret = dxl_err_set(DXL_E_CONFIG,
					  "writer slot %u, but member %u has %u rings for shard %u",
					  w->slot, ids[i], sd->nrings, w->cfg.shard);
			break;
		}
		ret = dxl_replica_desc_target(d, w->cfg.shard, w->slot, &t[i]);
		prov = d->provider;
	}
	free(d);
	if (ret)
		return ret;
	if (!w->f) {
		struct dxl_fabric_cfg fc;
		dxl_fabric_cfg_init(&fc);
		/* verbs: connect from the interface that reaches the members */
		dxl_fabric_cfg_client(&fc, prov, t[0].addr);
		fc.timeout_ms = w->cfg.fabric_timeout_ms;
		if ((ret = dxl_fabric_new(&fc, &w->f)))
			return ret;
	}
	if ((ret = dxl_ctx_new(w->f, 0, &w->ctx)))
		return ret;
	struct dxl_appender_cfg ac;
	dxl_appender_cfg_init(&ac);
	ac.writer_id = w->slot;
	ac.epoch = (uint32_t)epoch;
	ac.max_inflight = w->cfg.max_inflight;
	ac.max_record = w->cfg.max_record;
	ac.repair = true;
	if ((ret = dxl_appender_new(w->ctx, &ac, t, n, &w->ap))) {
		dxl_ctx_delete(&w->ctx);
		return ret;
	}
	/* new timestamps above everything the rings promise (a previous
	 * holder of the slot may have had a clock ahead of ours) -- unless
	 * that is further ahead of our clock than a clock takes: a holder
	 * whose clock jumped forward; appending here would carry the jump on
	 * (issue 19.7), so this slot is not for us. Checked before observing:
	 * dxl_hlc_observe would take what it can of the jump (up to
	 * dxl_hlc_max_ts) into the clock, and the next slot would get it */
	uint64_t min_ts = dxl_appender_min_ts(w->ap);
	if (min_ts > dxl_hlc_max_ts(&w->clk) || dxl_hlc_observe(&w->clk, min_ts)) {
		ret = dxl_err_set(DXL_E_INVAL,
				  "writer slot %u of shard %u: its ring's records or watermark reach commit timestamp %" PRIu64
				  ", more than %u ms ahead of this host's clock (a writer's clock jumped forward): not appending there",
				  w->slot, w->cfg.shard, min_ts, DXL_HLC_MAX_AHEAD_MS);
		w->slot_ahead = true;
		close_appender(w);
		return ret;
	}
	apply_hold(w);
	/* resolve what was in flight */
	uint64_t last = dxl_appender_last_ts(w->ap);
	uint32_t recovered = 0, again = 0, dropped = 0;
	/* a new primary, and the caller's records must not follow it (their
	 * transactions' locks were at the old one): what is not in the log now
	 * -- the repair made every member equal to the new primary -- fails */
	bool drop = w->cfg.no_resend_on_new_primary && w->info.epoch && w->info.primary &&
		    w->info.primary != ids[0];
	for (uint64_t i = w->head; i < w->tail; i++) {
		struct entry *e = ent(w, i);
		if (e->state == E_DONE)
			continue;
		if (e->state == E_POSTED && e->ts <= last) {
			e->state = E_DONE;
			e->status = 0;
			recovered++;
		} else if (drop) {
			e->state = E_DONE;
			e->status = DXL_E_STALE;
			e->sent = false; /* certainly not in the log */
			dropped++;
		} else if (e->state == E_POSTED) {
			e->state = E_QUEUED;
			again++;
		}
	}
	/* post from the oldest queued entry */
	w->post = w->head;
	while (w->post < w->tail && ent(w, w->post)->state != E_QUEUED)
		w->post++;
	bool changed = epoch != w->info.epoch || n != w->info.nreplicas ||
		       memcmp(ids, w->info.replicas, n * sizeof(ids[0]));
	w->info.epoch = epoch;
	w->info.primary = ids[0];
	w->info.nreplicas = n;
	memcpy(w->info.replicas, ids, n * sizeof(ids[0]));
	w->info.reopens++;
	uint64_t bc = 0;
	uint32_t tt = 0;
	dxl_appender_repaired(w->ap, &bc, &tt);
	if (changed || recovered || again || bc || tt || dropped)
		DXL_INFO("event=writer_opened shard=%u slot=%u epoch=%" PRIu64
			 " primary=%u replicas=%u recovered=%u resent=%u dropped=%u repaired_bytes=%" PRIu64
			 " truncated=%u",
			 w->cfg.shard, w->slot, epoch, ids[0], n, recovered, again, dropped, bc, tt);
	return 0;
}

int dxl_log_writer_new(struct dxl_zk *zk, const struct dxl_log_writer_cfg *cfg,
		       struct dxl_log_writer **out)
{
	if (!zk || !cfg || !out)
		return dxl_err_set(DXL_E_INVAL, "dxl_log_writer_new: NULL argument");
	*out = NULL;
	if (cfg->max_queue < 1 || cfg->max_queue > (1u << 24) || cfg->max_inflight < 1 ||
	    cfg->max_inflight > 256 || cfg->retry_ms < 1)
		return dxl_err_set(DXL_E_INVAL,
				   "writer: max_queue %u (1..16M), max_inflight %u (1..256), retry_ms %u (>= 1)",
				   cfg->max_queue, cfg->max_inflight, cfg->retry_ms);
	struct dxl_log_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return dxl_err_set(DXL_E_NOMEM, "writer");
	w->zk = zk;
	w->cfg = *cfg;
	w->qcap = cfg->max_queue;
	w->q = calloc(w->qcap, sizeof(*w->q));
	if (!w->q) {
		free(w);
		return dxl_err_set(DXL_E_NOMEM, "writer queue");
	}
	dxl_hlc_init(&w->clk);
	w->clk.wall_ms = cfg->wall_ms;
	w->info.shard = cfg->shard;
	/* which members, how many rings: the slot must exist on all */
	struct dxl_cluster_config c;
	int ret = dxl_cluster_config_read(zk, &c, NULL);
	if (ret == DXL_E_NOENT)
		ret = dxl_err_set(DXL_E_NOENT, "the cluster has no configuration (is it up?)");
	if (ret)
		goto fail;
	const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, cfg->shard);
	uint32_t nslots = DXL_SHARD_MAX_RINGS;
	if (!sh) {
		char list[256] = "";
		for (uint32_t i = 0, o = 0; i < c.nshards && o + 12 < sizeof(list); i++)
			o += (uint32_t)snprintf(list + o, sizeof(list) - o, "%s%u", i ? "," : "",
						c.shards[i].id);
		ret = dxl_err_set(DXL_E_NOENT, "unknown shard %u: the cluster (epoch %" PRIu64
				  ") has shards %s", cfg->shard, c.epoch, list);
		dxl_cluster_config_clear(&c);
		goto fail;
	}
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	if (d && dxl_replica_desc_get(zk, sh->primary, d) == 0) {
		const struct dxl_shard_desc *sd = dxl_replica_desc_shard(d, cfg->shard);
		if (sd)
			nslots = sd->nrings;
	}
	dxl_err_clear(); /* not registered: the slot count is checked at open */
	free(d);
	dxl_cluster_config_clear(&c);
	/* a coordinator's writer (hold_until_decided) does not take over a
	 * ring whose last records are above its watermark: transactions of a
	 * gone coordinator in doubt, which only a resolver may decide (its
	 * watermark would confirm them); it takes the next free slot */
	uint64_t skip = 0;
	for (;;) {
		if (cfg->slot >= 0) {
			w->slot = (uint32_t)cfg->slot;
			ret = (uint32_t)cfg->slot >= nslots ?
				      dxl_err_set(DXL_E_INVAL, "writer slot %d: shard %u has %u",
						  cfg->slot, cfg->shard, nslots) :
				      dxl_writer_slot_take(zk, cfg->shard, w->slot);
		} else if (!skip) {
			ret = dxl_writer_slot_lease(zk, cfg->shard, nslots, &w->slot);
		} else {
			ret = dxl_err_set(DXL_E_FULL, "every free writer slot of shard %u holds records in doubt or is ahead of this host's clock",
					  cfg->shard);
			for (uint32_t k = 0; k < nslots && k < 64; k++) {
				if ((skip >> k) & 1)
					continue;
				ret = dxl_writer_slot_take(zk, cfg->shard, k);
				if (ret == DXL_E_EXIST)
					continue;
				w->slot = k;
				break;
			}
			if (ret == DXL_E_EXIST)
				ret = dxl_err_set(DXL_E_FULL,
						  "every writer slot of shard %u is taken, holds records in doubt or is ahead of this host's clock",
						  cfg->shard);
		}
		if (ret)
			goto fail;
		w->slot_held = true;
		w->session_epoch = dxl_zk_session_epoch(zk);
		w->info.slot = w->slot;
		/* open now: a clear error at once when the shard cannot be
		 * written; unavailability is retried for unavail_ms */
		uint64_t deadline = dxl_now_ms() + cfg->unavail_ms;
		for (;;) {
			ret = try_open(w);
			if (ret != DXL_E_UNAVAIL && ret != DXL_E_UNREACHABLE && ret != DXL_E_ACCESS &&
			    ret != DXL_E_STALE)
				break;
			if (dxl_now_ms() >= deadline)
				break;
			usleep(cfg->retry_ms * 1000);
		}
		if (ret && w->slot_ahead && cfg->slot < 0 && w->slot < 64) {
			DXL_WARN("event=writer_slot_ahead shard=%u slot=%u action=next_slot msg=\"%s\"",
				 cfg->shard, w->slot, dxl_errmsg());
			w->slot_ahead = false;
			skip |= 1ull << w->slot;
			dxl_writer_slot_release(zk, cfg->shard, w->slot);
			w->slot_held = false;
			continue;
		}
		if (ret)
			goto fail;
		if (!cfg->hold_until_decided || cfg->slot >= 0 || w->slot >= 64 ||
		    dxl_appender_last_ts(w->ap) <= dxl_appender_open_watermark(w->ap))
			break;
		DXL_INFO("event=writer_slot_in_doubt shard=%u slot=%u last_ts=%" PRIu64
			 " watermark=%" PRIu64 " action=next_slot",
			 cfg->shard, w->slot, dxl_appender_last_ts(w->ap),
			 dxl_appender_open_watermark(w->ap));
		skip |= 1ull << w->slot;
		close_appender(w);
		dxl_writer_slot_release(zk, cfg->shard, w->slot);
		w->slot_held = false;
	}
	w->info.available = true;
	*out = w;
	return 0;
fail:
	dxl_err_prefix("writer of shard %u", cfg->shard);
	{
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
		dxl_log_writer_delete(&w);
		dxl_err_set(ret, "%s", msg);
	}
	return ret;
}

/*
 * slot_surely_ours -- the session that leased the slot is still ours, and
 * its lease outlasts what dxl_appender_close may take (its final watermark
 * reaches every member within the fabric's timeout): no new holder of the
 * slot can have opened the ring before that WRITE lands. (Its owner-word
 * CAS is safe anyway: it only clears this holder's own word.) Checked
 * immediately before the close.
 */
static bool slot_surely_ours(const struct dxl_log_writer *w)
{
	uint64_t until = dxl_zk_lease_until_ns(w->zk), now = dxl_now_ns();
	return dxl_zk_session_epoch(w->zk) == w->session_epoch && until > now &&
	       until - now > (uint64_t)w->cfg.fabric_timeout_ms * 1000000ull;
}

void dxl_log_writer_delete(struct dxl_log_writer **wp)
{
	if (!wp || !*wp)
		return;
	struct dxl_log_writer *w = *wp;
	/* a clean end closes the ring, so that tailers stop holding their
	 * resolved timestamp at it (docs/log.md, "Tailing"); with records in
	 * flight or held undecided, or a member failed, it stays open for the
	 * next holder of the slot */
	if (w->ap && !w->broken && !w->dead && w->slot_held &&
	    dxl_zk_session_epoch(w->zk) == w->session_epoch && dxl_zk_lease_valid(w->zk)) {
		/* (only while the slot is surely ours: a new holder of it has
		 * the same writer id, and its owner word must stay set) */
		/* what is in flight finishes within the fabric's timeout */
		uint64_t end = dxl_now_ms() + w->cfg.fabric_timeout_ms;
		for (collect(w); !w->broken && dxl_appender_inflight(w->ap) &&
				 dxl_now_ms() < end;
		     collect(w))
			dxl_appender_wait(w->ap, 10);
		/* a lease that ends too soon for the close is renewed every
		 * session timeout / 6: wait for the next one (a lease no
		 * longer than the fabric's timeout never allows a close) */
		bool quiet = !w->broken && dxl_appender_inflight(w->ap) == 0;
		uint64_t renew = dxl_now_ms() + dxl_zk_lease_ms(w->zk);
		while (quiet && dxl_zk_lease_ms(w->zk) > w->cfg.fabric_timeout_ms &&
		       !slot_surely_ours(w) && dxl_zk_lease_valid(w->zk) &&
		       dxl_zk_session_epoch(w->zk) == w->session_epoch && dxl_now_ms() < renew)
			usleep(5000);
		const char *why = "records in flight or in doubt";
		if (quiet && !slot_surely_ours(w))
			why = "the slot lease could end during the close";
		else if (quiet && dxl_appender_close(w->ap, dxl_hlc_now(&w->clk)) == 0)
			why = NULL;
		else if (quiet)
			why = dxl_errmsg();
		if (!why)
			DXL_DEBUG("event=writer_closed shard=%u slot=%u", w->cfg.shard, w->slot);
		else
			DXL_INFO("event=writer_left_open shard=%u slot=%u msg=\"the ring stays open for the next holder of the slot: %s\"",
				 w->cfg.shard, w->slot, why);
	}
	close_appender(w);
	dxl_fabric_delete(&w->f);
	if (w->slot_held && !w->dead && dxl_zk_session_epoch(w->zk) == w->session_epoch)
		dxl_writer_slot_release(w->zk, w->cfg.shard, w->slot);
	for (uint64_t i = w->head; i < w->tail; i++)
		free(ent(w, i)->payload);
	free(w->q);
	free(w->und);
	free(w);
	*wp = NULL;
}

/* ---- appending ------------------------------------------------------------------ */

int dxl_log_writer_append(struct dxl_log_writer *w, const void *payload, uint32_t len,
			  uint64_t txn_id, uint64_t *ts)
{
	return dxl_log_writer_append_ex(w, payload, len, txn_id, NULL, 0, ts);
}

int dxl_log_writer_append_ex(struct dxl_log_writer *w, const void *payload, uint32_t len,
			     uint64_t txn_id, const uint32_t *parts, uint32_t nparts,
			     uint64_t *ts)
{
	if (!w || (!payload && len) || (nparts && !parts))
		return dxl_err_set(DXL_E_INVAL, "writer append: NULL argument");
	if (nparts > DXL_LOG_WRITER_MAX_PARTS)
		return dxl_err_set(DXL_E_INVAL, "writer append: %u participants (at most %d)",
				   nparts, DXL_LOG_WRITER_MAX_PARTS);
	if (w->dead)
		return dxl_err_set(DXL_E_STATE, "writer of shard %u: %s", w->cfg.shard, w->why);
	if (!len)
		return dxl_err_set(DXL_E_INVAL, "writer append: empty record");
	if (dxl_rec_size(nparts, len) > w->cfg.max_record)
		return dxl_err_set(DXL_E_TOOBIG,
				   "record of %u bytes: over the writer's max_record %u (encoded)",
				   len, w->cfg.max_record);
	if (w->tail - w->head >= w->qcap)
		return dxl_err_set(DXL_E_AGAIN, "writer: %u records not finished", w->qcap);
	if (w->cfg.hold_until_decided && w->utail - w->uhead >= w->ucap) {
		uint32_t ncap = w->ucap ? 2 * w->ucap : 256;
		struct und *n = malloc(ncap * sizeof(*n));
		if (!n)
			return dxl_err_set(DXL_E_NOMEM, "writer: undecided records");
		for (uint64_t i = w->uhead; i < w->utail; i++)
			n[i % ncap] = w->und[i % w->ucap];
		free(w->und);
		w->und = n;
		w->ucap = ncap;
	}
	struct entry *e = ent(w, w->tail);
	memset(e, 0, sizeof(*e));
	e->payload = malloc(len);
	if (!e->payload)
		return dxl_err_set(DXL_E_NOMEM, "writer: record copy");
	memcpy(e->payload, payload, len);
	e->len = len;
	e->ts = dxl_hlc_now(&w->clk);
	e->txn_id = txn_id ? txn_id : e->ts;
	e->state = E_QUEUED;
	e->nparts = (uint16_t)nparts;
	if (nparts)
		memcpy(e->parts, parts, nparts * sizeof(parts[0]));
	w->tail++;
	if (w->cfg.hold_until_decided) {
		w->und[w->utail % w->ucap] = (struct und){.ts = e->ts};
		w->utail++;
		apply_hold(w);
	}
	if (ts)
		*ts = e->ts;
	return 0;
}

static void set_broken(struct dxl_log_writer *w, int err, const char *what)
{
	if (w->broken)
		return;
	w->broken = true;
	w->broken_since_ms = dxl_now_ms();
	w->drain_until_ms = w->broken_since_ms + 2ull * w->cfg.fabric_timeout_ms;
	w->info.available = false;
	snprintf(w->why, sizeof(w->why), "%s: %s", what, dxl_errname(err));
	DXL_INFO("event=writer_broken shard=%u slot=%u epoch=%" PRIu64 " why=\"%s\"",
		 w->cfg.shard, w->slot, w->info.epoch, w->why);
}

/* post -- as many queued entries as the appender takes */
static void post(struct dxl_log_writer *w)
{
	while (!w->broken && w->post < w->tail) {
		struct entry *e = ent(w, w->post);
		if (e->state != E_QUEUED) {
			w->post++;
			continue;
		}
		struct dxl_rec rec = {.txn_id = e->txn_id, .commit_ts = e->ts,
				      .payload = e->payload, .payload_len = e->len,
				      .nparts = e->nparts};
		uint64_t tok;
		int ret = dxl_appender_append(w->ap, &rec, e->nparts ? e->parts : NULL, &tok);
		if (ret == DXL_E_AGAIN)
			return;
		if (ret == DXL_E_TOOBIG || ret == DXL_E_INVAL) {
			e->state = E_DONE; /* this record can never be appended */
			e->status = ret;
			w->post++;
			continue;
		}
		if (ret) {
			set_broken(w, ret, "append");
			return;
		}
		e->state = E_POSTED;
		e->sent = true;
		e->token = tok;
		w->post++;
	}
}

/* collect -- the appender's results onto the entries */
static void collect(struct dxl_log_writer *w)
{
	struct dxl_append_result res[32];
	for (;;) {
		int k = dxl_appender_poll(w->ap, res, 32);
		if (k < 0) {
			set_broken(w, k, "poll");
			return;
		}
		for (int j = 0; j < k; j++) {
			/* results come in append order: find the entry */
			for (uint64_t i = w->head; i < w->tail; i++) {
				struct entry *e = ent(w, i);
				if (e->state != E_POSTED || e->token != res[j].token)
					continue;
				if (res[j].status == 0) {
					e->state = E_DONE;
					e->status = 0;
					w->acked_since_hb = true;
				} else {
					/* maybe on some members: resolved at reopen */
					set_broken(w, res[j].status, "append not acknowledged");
				}
				break;
			}
		}
		if (k < 32)
			break;
	}
	if (!w->broken && dxl_appender_failed_targets(w->ap))
		set_broken(w, DXL_E_UNREACHABLE, "a member failed");
}

static void fail_unfinished(struct dxl_log_writer *w, int status)
{
	for (uint64_t i = w->head; i < w->tail; i++) {
		struct entry *e = ent(w, i);
		if (e->state != E_DONE) {
			e->state = E_DONE;
			e->status = status;
		}
	}
	w->post = w->tail;
}

/* progress -- everything that does not block */
static void progress(struct dxl_log_writer *w)
{
	if (w->dead)
		return;
	/* the slot is ours only while our session lives */
	if (dxl_zk_session_epoch(w->zk) != w->session_epoch ||
	    dxl_zk_state(w->zk) == DXL_ZK_EXPIRED) {
		w->dead = true;
		snprintf(w->why, sizeof(w->why),
			 "the ZooKeeper session holding writer slot %u ended: records in flight may or may not be in the log",
			 w->slot);
		DXL_WARN("event=writer_slot_lost shard=%u slot=%u", w->cfg.shard, w->slot);
		close_appender(w);
		fail_unfinished(w, DXL_E_STATE);
		return;
	}
	if (w->ap) {
		if (!w->broken && dxl_zk_lease_valid(w->zk))
			post(w);
		collect(w);
		/* idle (nothing in flight, nothing waiting to be posted: a
		 * heartbeat must not pass a queued record's timestamp): a
		 * watermark at once after acknowledgements (so tailers deliver
		 * the last records without waiting), else every heartbeat_ms;
		 * at most one per millisecond */
		uint64_t since = dxl_now_ms() - w->last_hb_ms;
		if (!w->broken && dxl_appender_inflight(w->ap) == 0 && w->post >= w->tail &&
		    ((w->acked_since_hb && since >= 1) || since >= w->cfg.heartbeat_ms)) {
			w->last_hb_ms = dxl_now_ms();
			w->acked_since_hb = false;
			int r = dxl_appender_heartbeat(w->ap, dxl_hlc_now(&w->clk));
			if (r && r != DXL_E_AGAIN)
				set_broken(w, r, "heartbeat");
		}
		if (w->broken && (dxl_appender_inflight(w->ap) == 0 ||
				  dxl_now_ms() >= w->drain_until_ms))
			close_appender(w);
		return;
	}
	/* broken and closed: reopen, at most every retry_ms */
	uint64_t now = dxl_now_ms();
	if (now - w->last_try_ms < w->cfg.retry_ms)
		return;
	w->last_try_ms = now;
	int ret = try_open(w);
	if (ret == 0) {
		uint64_t gap = dxl_now_ms() - w->broken_since_ms;
		w->broken = false;
		w->info.available = true;
		w->info.last_outage_ms = gap;
		w->info.outages++;
		return;
	}
	snprintf(w->why, sizeof(w->why), "%s", dxl_errmsg());
	if (ret == DXL_E_NOENT || ret == DXL_E_CONFIG) {
		/* the shard went away or cannot be written: no retrying */
		fail_unfinished(w, ret);
		w->broken_since_ms = now;
		return;
	}
	if (now - w->broken_since_ms >= w->cfg.unavail_ms && w->head < w->tail) {
		DXL_WARN("event=writer_unavailable shard=%u slot=%u ms=%" PRIu64 " why=\"%s\"",
			 w->cfg.shard, w->slot, now - w->broken_since_ms, w->why);
		fail_unfinished(w, DXL_E_UNAVAIL);
		w->broken_since_ms = now; /* the next records get a fresh period */
	}
}

int dxl_log_writer_poll(struct dxl_log_writer *w, struct dxl_log_writer_result *res,
			int max, int timeout_ms)
{
	if (!w || (!res && max))
		return dxl_err_set(DXL_E_INVAL, "writer poll: NULL argument");
	uint64_t end = dxl_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	for (;;) {
		progress(w);
		int k = 0;
		while (k < max && w->head < w->tail && ent(w, w->head)->state == E_DONE) {
			struct entry *e = ent(w, w->head);
			res[k].ts = e->ts;
			res[k].txn_id = e->txn_id;
			res[k].status = e->status;
			res[k].maybe = e->status && e->sent;
			free(e->payload);
			e->payload = NULL;
			w->head++;
			k++;
		}
		if (k || dxl_now_ms() >= end)
			return k;
		if (w->ap && !w->broken)
			dxl_appender_wait(w->ap, 10);
		else
			usleep(w->dead ? 10000 : 2000);
	}
}

int dxl_log_writer_decide(struct dxl_log_writer *w, uint64_t ts)
{
	if (!w || !w->cfg.hold_until_decided)
		return dxl_err_set(DXL_E_INVAL, "writer decide: not a holding writer");
	uint64_t i = w->uhead;
	while (i < w->utail && w->und[i % w->ucap].ts != ts)
		i++;
	if (i == w->utail)
		return dxl_err_set(DXL_E_NOENT, "writer of shard %u: no undecided record at %" PRIu64,
				   w->cfg.shard, ts);
	w->und[i % w->ucap].decided = true;
	bool moved = false;
	while (w->uhead < w->utail && w->und[w->uhead % w->ucap].decided) {
		w->uhead++;
		moved = true;
	}
	if (moved) {
		apply_hold(w);
		w->acked_since_hb = true; /* the new watermark soon (progress) */
	}
	return 0;
}

uint64_t dxl_log_writer_hold(const struct dxl_log_writer *w)
{
	return hold_ts(w);
}

void dxl_log_writer_observe(struct dxl_log_writer *w, uint64_t ts)
{
	dxl_hlc_observe(&w->clk, ts);
}

uint32_t dxl_log_writer_pending(const struct dxl_log_writer *w)
{
	return (uint32_t)(w->tail - w->head);
}

int dxl_log_writer_flush(struct dxl_log_writer *w, int timeout_ms)
{
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	while (dxl_now_ms() < end) {
		progress(w);
		if (w->dead)
			return dxl_err_set(DXL_E_STATE, "writer of shard %u: %s", w->cfg.shard, w->why);
		if (w->head == w->tail && w->ap && !w->broken) {
			int r = dxl_appender_heartbeat(w->ap, dxl_hlc_now(&w->clk));
			if (r == DXL_E_AGAIN) {
				dxl_appender_wait(w->ap, 10);
				dxl_appender_poll(w->ap, NULL, 0);
				continue;
			}
			if (r)
				return r;
			while (dxl_appender_inflight(w->ap) && dxl_now_ms() < end) {
				dxl_appender_wait(w->ap, 10);
				struct dxl_append_result tmp[4];
				dxl_appender_poll(w->ap, tmp, 4);
			}
			if (dxl_appender_failed_targets(w->ap))
				return dxl_err_set(DXL_E_UNREACHABLE, "flush: a member failed");
			return 0;
		}
		if (w->head != w->tail)
			return dxl_err_set(DXL_E_BUSY, "flush: %u records not reported by poll yet",
					   (unsigned)(w->tail - w->head));
		usleep(2000);
	}
	return dxl_err_set(DXL_E_TIMEDOUT, "flush of shard %u: %s", w->cfg.shard,
			   w->broken ? w->why : "timed out");
}

void dxl_log_writer_get_info(const struct dxl_log_writer *w,
			     struct dxl_log_writer_info *info)
{
	*info = w->info;
}

const char *dxl_log_writer_why(const struct dxl_log_writer *w)
{
	return w->why;
}
