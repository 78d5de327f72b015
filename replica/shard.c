/* shard.c -- a hosted shard's log region, its registration, and the JSON
 * descriptors a replica publishes in nodes/<id> (include/dxl/replica.h) */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/replica.h"

struct dxl_shard {
	uint32_t id;
	struct dxl_region *reg;
	struct dxl_logstore *ls;
	struct dxl_mr *mr; /* NULL while deregistered */
	struct dxl_persister *ps; /* verbs + msync: while registered */
};

static const unsigned SHARD_ACCESS = DXL_MR_REMOTE_READ | DXL_MR_REMOTE_WRITE |
				     DXL_MR_REMOTE_ATOMIC | DXL_MR_PERSISTENT;

/* the offset of the first non-zero byte of [p, p + n), or n */
static uint64_t first_nonzero(const uint8_t *p, uint64_t n)
{
	static const uint8_t zero[4096];
	uint64_t off = 0;
	while (off < n) {
		uint64_t k = DXL_MIN(n - off, (uint64_t)sizeof(zero));
		if (memcmp(p + off, zero, k) != 0) {
			while (p[off] == 0)
				off++;
			return off;
		}
		off += k;
	}
	return n;
}

/*
 * resume_format -- the region at path was created but its log header is
 * absent: a crash between dxl_region_create and the end of
 * dxl_logstore_format (which writes the control blocks first and the header
 * last). Nobody can have written it since (a region is registered only once
 * it holds a log), so it holds nothing but what format wrote: format it
 * again -- after checking that every byte is zero or what format writes
 * (ctl_is_fresh), so that neither records nor the promises of control
 * blocks (a watermark, an owner word, a moved head) are formatted away.
 */
/* a control block as an interrupted dxl_logstore_format may leave it: zero
 * past the head slots (owner word, watermark, the rest), and the head slots
 * either without a valid head (not written yet, or torn) or with the empty
 * ring's head (position 0, nothing reclaimed) */
static bool ctl_is_fresh(const uint8_t *ctl)
{
	const uint64_t slots = 2 * DXL_RING_HEAD_SLOT_SIZE;
	if (first_nonzero(ctl + slots, DXL_RING_CTL_SIZE - slots) < DXL_RING_CTL_SIZE - slots)
		return false;
	struct dxl_ring_head h;
	if (dxl_ring_head_decode(ctl, &h) != 0) {
		dxl_err_clear();
		return true;
	}
	return h.pos == 0 && h.last_ts == 0;
}

static int resume_format(struct dxl_shard *s, const char *path,
			 const struct dxl_shard_cfg *cfg)
{
	const uint8_t *d = dxl_region_data(s->reg);
	uint64_t size = dxl_region_data_size(s->reg);
	if (first_nonzero(d, DXL_LOG_HDR_SIZE) < DXL_LOG_HDR_SIZE)
		return 1; /* a header is there: not this case */
	if (!cfg->create)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s holds no log: its creation was interrupted; start with replica.create to finish it",
				   path);
	if (cfg->nrings < 1 || cfg->nrings > DXL_SHARD_MAX_RINGS ||
	    dxl_logstore_bytes(cfg->nrings, cfg->ring_size) > size)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s holds no log (an interrupted creation?) and does not fit %u rings of %" PRIu64
				   " bytes: not formatting it; move it away to start afresh",
				   path, cfg->nrings, cfg->ring_size);
	uint64_t stride = DXL_RING_CTL_SIZE + cfg->ring_size;
	for (uint32_t i = 0; i < cfg->nrings; i++) {
		uint64_t at = DXL_LOG_HDR_SIZE + (uint64_t)i * stride;
		if (!ctl_is_fresh(d + at))
			return dxl_err_set(DXL_E_CORRUPT,
					   "%s has no log header, but the control block of ring %u (at byte %" PRIu64
					   " of its data area) holds more than a new log's (an owner, a watermark or a moved head): not formatting over it",
					   path, i, at);
	}
	for (uint32_t i = 0; i <= cfg->nrings; i++) {
		/* ring i's buffer, or (i == nrings) what follows the last ring */
		uint64_t lo = DXL_LOG_HDR_SIZE + (uint64_t)i * stride +
			      (i < cfg->nrings ? DXL_RING_CTL_SIZE : 0);
		uint64_t hi = i < cfg->nrings ? lo + cfg->ring_size : size;
		uint64_t at = first_nonzero(d + lo, hi - lo);
		if (at < hi - lo)
			return dxl_err_set(DXL_E_CORRUPT,
					   "%s has no log header, but byte %" PRIu64
					   " of its data area is not zero (%s): not formatting over it",
					   path, lo + at,
					   i < cfg->nrings ? "inside a ring" : "after the rings");
	}
	DXL_WARN("event=shard_format_resumed shard=%u path=%s rings=%u ring_size=%" PRIu64
		 " note=\"the region's creation was interrupted: formatting it\"",
		 cfg->shard, path, cfg->nrings, cfg->ring_size);
	return dxl_logstore_format(s->reg, cfg->shard, cfg->nrings, cfg->ring_size);
}

int dxl_shard_open(const char *dir, const struct dxl_shard_cfg *cfg,
		   struct dxl_fabric *f, struct dxl_shard **out)
{
	if (!dir || !cfg || !out)
		return dxl_err_set(DXL_E_INVAL, "dxl_shard_open: NULL argument");
	char path[1024];
	if ((size_t)snprintf(path, sizeof(path), "%s/shard-%u.log", dir,
			     cfg->shard) >= sizeof(path))
		return dxl_err_set(DXL_E_INVAL, "shard path under %s too long", dir);
	struct dxl_region_id id = {.node_id = cfg->node_id, .kind = DXL_REGION_LOG};
	snprintf(id.cluster, sizeof(id.cluster), "%s", cfg->cluster);
	struct dxl_shard *s = calloc(1, sizeof(*s));
	if (!s)
		return dxl_err_set(DXL_E_NOMEM, "shard %u", cfg->shard);
	s->id = cfg->shard;
	int ret = dxl_region_open(path, cfg->durability, &id, &s->reg);
	if (ret == DXL_E_NOENT && cfg->create) {
		if (cfg->nrings < 1 || cfg->nrings > DXL_SHARD_MAX_RINGS) {
			ret = dxl_err_set(DXL_E_INVAL, "shard %u: %u rings (1..%d)",
					  cfg->shard, cfg->nrings, DXL_SHARD_MAX_RINGS);
			goto fail;
		}
		uint64_t bytes = DXL_ALIGN_UP(dxl_logstore_bytes(cfg->nrings,
								 cfg->ring_size),
					      4096ull);
		ret = dxl_region_create(path, bytes, cfg->durability, &id, &s->reg);
		if (!ret)
			ret = dxl_logstore_format(s->reg, cfg->shard, cfg->nrings,
						  cfg->ring_size);
		if (!ret)
			DXL_INFO("event=shard_created shard=%u path=%s rings=%u ring_size=%" PRIu64,
				 cfg->shard, path, cfg->nrings, cfg->ring_size);
	}
	if (ret)
		goto fail;
	ret = resume_format(s, path, cfg);
	if (ret < 0)
		goto fail;
	ret = dxl_logstore_open(s->reg, &s->ls);
	if (ret)
		goto fail;
	if (dxl_logstore_shard(s->ls) != cfg->shard) {
		ret = dxl_err_set(DXL_E_CORRUPT, "%s holds shard %u, not shard %u",
				  path, dxl_logstore_shard(s->ls), cfg->shard);
		goto fail;
	}
	if (cfg->create && (dxl_logstore_nrings(s->ls) != cfg->nrings ||
			    dxl_logstore_ring_size(s->ls) != cfg->ring_size))
		DXL_INFO("event=shard_geometry shard=%u rings=%u ring_size=%" PRIu64
			 " note=\"existing region keeps its geometry\"",
			 cfg->shard, dxl_logstore_nrings(s->ls),
			 dxl_logstore_ring_size(s->ls));
	if (f && (ret = dxl_shard_register(s, f)))
		goto fail;
	*out = s;
	return 0;
fail:
	dxl_err_prefix("shard %u in %s", cfg->shard, dir);
	dxl_shard_close(&s);
	return ret;
}

void dxl_shard_close(struct dxl_shard **sp)
{
	if (!sp || !*sp)
		return;
	struct dxl_shard *s = *sp;
	dxl_shard_deregister(s);
	dxl_logstore_close(&s->ls);
	dxl_region_close(&s->reg);
	free(s);
	*sp = NULL;
}

int dxl_shard_register(struct dxl_shard *s, struct dxl_fabric *f)
{
	if (s->mr)
		return dxl_err_set(DXL_E_EXIST, "shard %u already registered", s->id);
	int ret = dxl_mr_reg(f, dxl_region_data(s->reg),
			     dxl_region_data_size(s->reg), SHARD_ACCESS, &s->mr);
	if (ret)
		return ret;
	/* msync mode: the flush READs msync what they make durable (tcp) */
	ret = dxl_region_bind_mr(s->reg, s->mr);
	/* verbs + msync: the NIC's flush READ persists nothing; our CPU does,
	 * and the rings tell writers to wait for it (docs/log.md). Marked
	 * before any writer can learn the descriptor. */
	if (!ret && dxl_persist_needed(dxl_region_durability(s->reg),
				       dxl_fabric_provider(f)))
		ret = dxl_persister_start(s->ls, &s->ps);
	else if (!ret)
		dxl_logstore_persister_mark(s->ls, 0);
	if (ret)
		dxl_mr_dereg(&s->mr);
	return ret;
}

void dxl_shard_deregister(struct dxl_shard *s)
{
	if (s && s->mr)
		dxl_mr_dereg(&s->mr);
	/* after the MR: no remote WRITE can arrive any more */
	if (s)
		dxl_persister_stop(&s->ps);
}

struct dxl_persister *dxl_shard_persister(const struct dxl_shard *s)
{
	return s->ps;
}

bool dxl_shard_registered(const struct dxl_shard *s)
{
	return s->mr != NULL;
}

uint32_t dxl_shard_id(const struct dxl_shard *s)
{
	return s->id;
}

struct dxl_logstore *dxl_shard_logstore(const struct dxl_shard *s)
{
	return s->ls;
}

struct dxl_region *dxl_shard_region(const struct dxl_shard *s)
{
	return s->reg;
}

struct dxl_mr *dxl_shard_mr(const struct dxl_shard *s)
{
	return s->mr;
}

int dxl_shard_targets(const struct dxl_shard *s, const char *addr,
		      uint32_t remote_ctx, struct dxl_log_target *t, uint32_t n)
{
	if (!s->mr)
		return dxl_err_set(DXL_E_STATE, "shard %u is not registered", s->id);
	if (n > dxl_logstore_nrings(s->ls))
		return dxl_err_set(DXL_E_INVAL, "shard %u has %u rings, not %u",
				   s->id, dxl_logstore_nrings(s->ls), n);
	for (uint32_t i = 0; i < n; i++) {
		int ret = dxl_log_target_init(&t[i], s->ls, s->mr, addr,
					      remote_ctx, i);
		if (ret)
			return ret;
	}
	return 0;
}

int dxl_shard_describe(const struct dxl_shard *s, struct dxl_shard_desc *out)
{
	if (!s->mr)
		return dxl_err_set(DXL_E_STATE, "shard %u is not registered", s->id);
	memset(out, 0, sizeof(*out));
	out->shard = s->id;
	dxl_mr_desc(s->mr, &out->region);
	out->nrings = dxl_logstore_nrings(s->ls);
	out->ring_size = dxl_logstore_ring_size(s->ls);
	out->ctl_off = dxl_logstore_ctl_off(s->ls, 0);
	out->ring_stride = out->nrings > 1 ?
				   dxl_logstore_ctl_off(s->ls, 1) - out->ctl_off :
				   DXL_RING_CTL_SIZE + out->ring_size;
	out->buf_delta = dxl_logstore_buf_off(s->ls, 0) - out->ctl_off;
	return 0;
}

/* ---- JSON ------------------------------------------------------------------ */

static const char *const STATE_NAMES[] = {"member", "catching_up", "synced",
					   "unassigned", "joining"};

const char *dxl_shard_state_name(enum dxl_shard_state st)
{
	return (unsigned)st < DXL_ARRAY_SIZE(STATE_NAMES) ? STATE_NAMES[st] : "?";
}

int dxl_shard_state_parse(const char *s, enum dxl_shard_state *out)
{
	for (unsigned i = 0; i < DXL_ARRAY_SIZE(STATE_NAMES); i++)
		if (!strcmp(s, STATE_NAMES[i])) {
			*out = (enum dxl_shard_state)i;
			return 0;
		}
	return dxl_err_set(DXL_E_INVAL, "unknown shard state '%s'", s);
}

#define SETN(o, k, v) (json_object_set_new((o), (k), (v)) == 0)

/* mr_json -- {"addr":"0x..","len":..,"rkey":..,"node":..} (NULL on ENOMEM);
 * the address as a hex string: 64-bit values do not survive JSON doubles */
static json_t *mr_json(const struct dxl_mr_desc *m)
{
	char addr[32];
	snprintf(addr, sizeof(addr), "0x%" PRIx64, m->addr);
	json_t *r = json_object();
	bool ok = r != NULL;
	ok = ok && SETN(r, "addr", json_string(addr));
	ok = ok && SETN(r, "len", json_integer((json_int_t)m->len));
	ok = ok && SETN(r, "rkey", json_integer(m->rkey));
	ok = ok && SETN(r, "node", json_integer(m->node));
	if (!ok) {
		json_decref(r);
		return NULL;
	}
	return r;
}

/* table_json -- one table of a shard (docs/replica.md "nodes/<id> payload") */
static json_t *table_json(const struct dxl_shard_table *st)
{
	char seed[32];
	snprintf(seed, sizeof(seed), "0x%" PRIx64, st->ihdr.seed);
	json_t *o = json_object();
	bool ok = o != NULL;
	ok = ok && SETN(o, "id", json_integer(st->t.id));
	ok = ok && SETN(o, "value_size", json_integer(st->t.value_size));
	ok = ok && SETN(o, "slot_size", json_integer(st->t.slot_size));
	ok = ok && SETN(o, "capacity", json_integer((json_int_t)st->t.capacity));
	ok = ok && SETN(o, "lock_mode",
			json_string(st->t.lock_mode == DXL_LOCKS_CPU ? "cpu" : "nic"));
	ok = ok && SETN(o, "records", mr_json(&st->t.records));
	ok = ok && SETN(o, "locks", mr_json(&st->t.locks));
	ok = ok && SETN(o, "index", mr_json(&st->index));
	ok = ok && SETN(o, "n_buckets", json_integer((json_int_t)st->ihdr.n_buckets));
	ok = ok && SETN(o, "n_indirect", json_integer((json_int_t)st->ihdr.n_indirect));
	ok = ok && SETN(o, "seed", json_string(seed));
	if (!ok) {
		json_decref(o);
		return NULL;
	}
	return o;
}

int dxl_replica_desc_encode(const struct dxl_replica_desc *d, char **json)
{
	if (!d || !json || d->nshards > DXL_REPLICA_MAX_SHARDS || !d->addr[0] ||
	    d->rpc_ctx >= DXL_FABRIC_MAX_CTX)
		return dxl_err_set(DXL_E_INVAL, "replica descriptor: bad argument");
	for (uint32_t i = 0; i < d->nshards; i++)
		if (d->shards[i].ntables > DXL_REPLICA_MAX_TABLES)
			return dxl_err_set(DXL_E_INVAL, "replica descriptor: shard %u has %u tables (at most %d)",
					   d->shards[i].shard, d->shards[i].ntables,
					   DXL_REPLICA_MAX_TABLES);
	json_t *o = json_object(), *arr = json_array();
	bool ok = o && arr;
	ok = ok && SETN(o, "format", json_integer(DXL_REPLICA_FORMAT));
	ok = ok && SETN(o, "addr", json_string(d->addr));
	ok = ok && SETN(o, "provider", json_string(dxl_fabric_provider_name(d->provider)));
	ok = ok && SETN(o, "ctx", json_integer(d->ctx));
	ok = ok && SETN(o, "reg_epoch", json_integer((json_int_t)d->reg_epoch));
	ok = ok && SETN(o, "durability", json_string(dxl_durability_name(d->durability)));
	ok = ok && SETN(o, "cfg_epoch", json_integer((json_int_t)d->cfg_epoch));
	if (d->rpc_ctx)
		ok = ok && SETN(o, "rpc_ctx", json_integer(d->rpc_ctx));
	for (uint32_t i = 0; ok && i < d->nshards; i++) {
		const struct dxl_shard_desc *sd = &d->shards[i];
		char addr[32];
		snprintf(addr, sizeof(addr), "0x%" PRIx64, sd->region.addr);
		json_t *r = json_object(), *sh = json_object();
		ok = r && sh;
		ok = ok && SETN(r, "addr", json_string(addr));
		ok = ok && SETN(r, "len", json_integer((json_int_t)sd->region.len));
		ok = ok && SETN(r, "rkey", json_integer(sd->region.rkey));
		ok = ok && SETN(r, "node", json_integer(sd->region.node));
		ok = ok && SETN(sh, "id", json_integer(sd->shard));
		ok = ok && SETN(sh, "region", r);
		r = NULL;
		ok = ok && SETN(sh, "nrings", json_integer(sd->nrings));
		ok = ok && SETN(sh, "ring_size", json_integer((json_int_t)sd->ring_size));
		ok = ok && SETN(sh, "ctl_off", json_integer((json_int_t)sd->ctl_off));
		ok = ok && SETN(sh, "ring_stride", json_integer((json_int_t)sd->ring_stride));
		ok = ok && SETN(sh, "buf_delta", json_integer((json_int_t)sd->buf_delta));
		ok = ok && SETN(sh, "state", json_string(dxl_shard_state_name(sd->state)));
		if (sd->data_id) {
			char did[32];
			snprintf(did, sizeof(did), "0x%" PRIx64, sd->data_id);
			ok = ok && SETN(sh, "data_id", json_string(did));
		}
		ok = ok && SETN(sh, "fill_pct", json_integer(sd->fill_pct));
		ok = ok && SETN(sh, "last_ts", json_integer((json_int_t)sd->last_ts));
		ok = ok && SETN(sh, "records", json_integer((json_int_t)sd->records));
		if (ok && sd->ntables) {
			json_t *ta = json_array();
			ok = ta != NULL;
			for (uint32_t k = 0; ok && k < sd->ntables; k++)
				ok = json_array_append_new(ta, table_json(&sd->tables[k])) == 0;
			ok = ok && SETN(sh, "tables", ta);
			if (!ok)
				json_decref(ta);
		}
		ok = ok && json_array_append_new(arr, sh) == 0;
		sh = NULL;
		json_decref(r);
		json_decref(sh);
	}
	ok = ok && SETN(o, "shards", arr);
	arr = NULL;
	char *txt = ok ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(arr);
	json_decref(o);
	if (!txt)
		return dxl_err_set(DXL_E_NOMEM, "replica descriptor: encoding JSON");
	*json = txt;
	return 0;
}

/* strict field access: every helper sets a DXL_E_CORRUPT message */

static int get_u64(json_t *o, const char *where, const char *key, uint64_t max,
		   uint64_t *out)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return dxl_err_set(DXL_E_CORRUPT, "%s: missing \"%s\"", where, key);
	if (!json_is_integer(v))
		return dxl_err_set(DXL_E_CORRUPT, "%s: \"%s\" is not an integer",
				   where, key);
	json_int_t x = json_integer_value(v);
	if (x < 0 || (uint64_t)x > max)
		return dxl_err_set(DXL_E_CORRUPT, "%s: \"%s\" = %lld out of range 0..%" PRIu64,
				   where, key, (long long)x, max);
	*out = (uint64_t)x;
	return 0;
}

static int get_str(json_t *o, const char *where, const char *key,
		   const char **out)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return dxl_err_set(DXL_E_CORRUPT, "%s: missing \"%s\"", where, key);
	if (!json_is_string(v))
		return dxl_err_set(DXL_E_CORRUPT, "%s: \"%s\" is not a string",
				   where, key);
	*out = json_string_value(v);
	return 0;
}

static int only_keys(json_t *o, const char *where, const char *const *known)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v) {
		bool found = false;
		for (const char *const *p = known; *p && !found; p++)
			found = strcmp(*p, k) == 0;
		if (!found)
			return dxl_err_set(DXL_E_CORRUPT, "%s: unknown key \"%s\"",
					   where, k);
	}
	return 0;
}

/* decode_mr -- the object key of o: {"addr":"0x<hex>","len","rkey","node"} */
static int decode_mr(json_t *o, const char *where, const char *key,
		     struct dxl_mr_desc *m)
{
	static const char *const rkeys[] = {"addr", "len", "rkey", "node", NULL};
	json_t *r = json_object_get(o, key);
	char rwhere[128];
	snprintf(rwhere, sizeof(rwhere), "%s.%s", where, key);
	if (!r)
		return dxl_err_set(DXL_E_CORRUPT, "%s: missing \"%s\"", where, key);
	if (!json_is_object(r))
		return dxl_err_set(DXL_E_CORRUPT, "%s is not an object", rwhere);
	int ret = only_keys(r, rwhere, rkeys);
	const char *a;
	uint64_t u;
	if (ret || (ret = get_str(r, rwhere, "addr", &a)))
		return ret;
	/* strict: strtoull would take "0x-1", "0x 10" and "0x0x10" */
	if (dxl_parse_hex64(a, &m->addr))
		return dxl_err_set(DXL_E_CORRUPT, "%s: addr '%s' is not 0x<1..16 hex digits>",
				   rwhere, a);
	if ((ret = get_u64(r, rwhere, "len", UINT64_MAX >> 12, &m->len)) ||
	    (ret = get_u64(r, rwhere, "rkey", UINT32_MAX, &u)))
		return ret;
	m->rkey = (uint32_t)u;
	if ((ret = get_u64(r, rwhere, "node", UINT32_MAX, &u)))
		return ret;
	m->node = (uint32_t)u;
	return 0;
}

/* decode_table -- one table of shards[i]: every field present, sizes that
 * agree with each other (slot size of the value size, records, lock words
 * and index area of the capacity and bucket counts) */
static int decode_table(json_t *o, const char *swhere, uint32_t k,
			struct dxl_shard_table *st)
{
	static const char *const tkeys[] = {"id", "value_size", "slot_size",
					    "capacity", "lock_mode", "records",
					    "locks", "index", "n_buckets",
					    "n_indirect", "seed", NULL};
	char where[96];
	snprintf(where, sizeof(where), "%s.tables[%u]", swhere, k);
	if (!json_is_object(o))
		return dxl_err_set(DXL_E_CORRUPT, "%s is not an object", where);
	memset(st, 0, sizeof(*st));
	int ret = only_keys(o, where, tkeys);
	uint64_t u;
	const char *s;
	if (ret || (ret = get_u64(o, where, "id", UINT32_MAX, &u)))
		return ret;
	st->t.id = (uint32_t)u;
	if ((ret = get_u64(o, where, "value_size", DXL_ENGINE_MAX_VALUE, &u)))
		return ret;
	st->t.value_size = (uint32_t)u;
	if ((ret = get_u64(o, where, "slot_size", DXL_RECORD_MAX_SLOT, &u)))
		return ret;
	st->t.slot_size = (uint32_t)u;
	if ((ret = get_u64(o, where, "capacity", DXL_TABLE_MAX_CAPACITY, &st->t.capacity)) ||
	    (ret = get_str(o, where, "lock_mode", &s)))
		return ret;
	if (!strcmp(s, "nic"))
		st->t.lock_mode = DXL_LOCKS_NIC;
	else if (!strcmp(s, "cpu"))
		st->t.lock_mode = DXL_LOCKS_CPU;
	else
		return dxl_err_set(DXL_E_CORRUPT, "%s: lock_mode '%s' (nic or cpu)", where, s);
	if ((ret = decode_mr(o, where, "records", &st->t.records)) ||
	    (ret = decode_mr(o, where, "locks", &st->t.locks)) ||
	    (ret = decode_mr(o, where, "index", &st->index)) ||
	    (ret = get_u64(o, where, "n_buckets", DXL_INDEX_MAX_BUCKETS, &st->ihdr.n_buckets)) ||
	    (ret = get_u64(o, where, "n_indirect", DXL_INDEX_MAX_INDIRECT, &st->ihdr.n_indirect)) ||
	    (ret = get_str(o, where, "seed", &s)))
		return ret;
	if (dxl_parse_hex64(s, &st->ihdr.seed))
		return dxl_err_set(DXL_E_CORRUPT, "%s: seed '%s' is not 0x<1..16 hex digits>",
				   where, s);
	st->ihdr.format = DXL_INDEX_FORMAT;
	st->ihdr.len = DXL_INDEX_HDR_SIZE +
		       DXL_INDEX_BUCKET_SIZE * (st->ihdr.n_buckets + st->ihdr.n_indirect);
	if (!st->t.value_size || st->t.capacity < 1 ||
	    st->t.slot_size != dxl_record_slot_size(st->t.value_size))
		return dxl_err_set(DXL_E_CORRUPT, "%s: value size %u, slot size %u, capacity %" PRIu64
				   " do not agree", where, st->t.value_size, st->t.slot_size,
				   st->t.capacity);
	if (st->t.records.len != st->t.capacity * st->t.slot_size ||
	    st->t.locks.len != 8 * st->t.capacity)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: records of %" PRIu64 " bytes and lock words of %" PRIu64
				   " bytes for %" PRIu64 " slots of %u bytes",
				   where, st->t.records.len, st->t.locks.len, st->t.capacity,
				   st->t.slot_size);
	if (!st->ihdr.n_buckets || (st->ihdr.n_buckets & (st->ihdr.n_buckets - 1)) ||
	    st->index.len != st->ihdr.len)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: index of %" PRIu64 " bytes for %" PRIu64 " + %" PRIu64
				   " buckets (a power of two main buckets; %" PRIu64 " bytes)",
				   where, st->index.len, st->ihdr.n_buckets, st->ihdr.n_indirect,
				   st->ihdr.len);
	return 0;
}

static int decode_shard(json_t *sh, uint32_t i, struct dxl_shard_desc *sd)
{
	static const char *const skeys[] = {"id", "region", "nrings", "ring_size",
					    "ctl_off", "ring_stride", "buf_delta",
					    "state", "fill_pct", "last_ts", "records",
					    "tables", "data_id", NULL};
	char where[64];
	snprintf(where, sizeof(where), "shards[%u]", i);
	if (!json_is_object(sh))
		return dxl_err_set(DXL_E_CORRUPT, "%s is not an object", where);
	int ret = only_keys(sh, where, skeys);
	uint64_t u;
	if (ret || (ret = get_u64(sh, where, "id", UINT32_MAX, &u)))
		return ret;
	sd->shard = (uint32_t)u;
	if ((ret = get_u64(sh, where, "nrings", DXL_SHARD_MAX_RINGS, &u)))
		return ret;
	if (u < 1)
		return dxl_err_set(DXL_E_CORRUPT, "%s: nrings 0", where);
	sd->nrings = (uint32_t)u;
	if ((ret = get_u64(sh, where, "ring_size", UINT64_MAX >> 12, &sd->ring_size)) ||
	    (ret = get_u64(sh, where, "ctl_off", UINT64_MAX >> 12, &sd->ctl_off)) ||
	    (ret = get_u64(sh, where, "ring_stride", UINT64_MAX >> 12, &sd->ring_stride)) ||
	    (ret = get_u64(sh, where, "buf_delta", UINT64_MAX >> 12, &sd->buf_delta)))
		return ret;
	if ((ret = decode_mr(sh, where, "region", &sd->region)))
		return ret;
	sd->state = DXL_SHARD_MEMBER; /* descriptors of before the state field */
	if (json_object_get(sh, "state")) {
		const char *st;
		if ((ret = get_str(sh, where, "state", &st)))
			return ret;
		if (dxl_shard_state_parse(st, &sd->state))
			return dxl_err_set(DXL_E_CORRUPT, "%s: unknown state '%s'", where, st);
	}
	if (json_object_get(sh, "data_id")) { /* optional: since issue 16 */
		const char *h;
		if ((ret = get_str(sh, where, "data_id", &h)))
			return ret;
		if (dxl_parse_hex64(h, &sd->data_id) || !sd->data_id)
			return dxl_err_set(DXL_E_CORRUPT, "%s: data_id '%s' is not 0x<1..16 hex digits>, not 0",
					   where, h);
	}
	if (json_object_get(sh, "fill_pct")) {
		if ((ret = get_u64(sh, where, "fill_pct", 100, &u)))
			return ret;
		sd->fill_pct = (uint32_t)u;
	}
	if (json_object_get(sh, "last_ts") &&
	    (ret = get_u64(sh, where, "last_ts", INT64_MAX, &sd->last_ts)))
		return ret;
	if (json_object_get(sh, "records") &&
	    (ret = get_u64(sh, where, "records", INT64_MAX, &sd->records)))
		return ret;
	json_t *ta = json_object_get(sh, "tables"); /* optional: since issue 6 */
	if (ta) {
		if (!json_is_array(ta))
			return dxl_err_set(DXL_E_CORRUPT, "%s: \"tables\" is not an array", where);
		if (json_array_size(ta) > DXL_REPLICA_MAX_TABLES)
			return dxl_err_set(DXL_E_CORRUPT, "%s: %zu tables (at most %d)", where,
					   json_array_size(ta), DXL_REPLICA_MAX_TABLES);
		for (size_t k = 0; k < json_array_size(ta); k++) {
			if ((ret = decode_table(json_array_get(ta, k), where, (uint32_t)k,
						&sd->tables[k])))
				return ret;
			for (size_t j = 0; j < k; j++)
				if (sd->tables[j].t.id == sd->tables[k].t.id)
					return dxl_err_set(DXL_E_CORRUPT, "%s: table %u listed twice",
							   where, sd->tables[k].t.id);
			sd->ntables = (uint32_t)k + 1;
		}
	}
	/* geometry: every ring inside the region */
	if (sd->ring_size < 8192 || sd->ring_size % 4096 ||
	    sd->buf_delta < DXL_RING_CTL_SIZE ||
	    sd->ring_stride < sd->buf_delta + sd->ring_size)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: inconsistent ring geometry (ring_size %" PRIu64
				   ", stride %" PRIu64 ", buf_delta %" PRIu64 ")",
				   where, sd->ring_size, sd->ring_stride, sd->buf_delta);
	uint64_t last_end = sd->ctl_off + (uint64_t)(sd->nrings - 1) * sd->ring_stride +
			    sd->buf_delta + sd->ring_size;
	if (last_end > sd->region.len || last_end < sd->ctl_off)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: %u rings end at %" PRIu64 ", beyond the region's %" PRIu64 " bytes",
				   where, sd->nrings, last_end, sd->region.len);
	return 0;
}

int dxl_replica_desc_decode(const char *json, size_t len,
			    struct dxl_replica_desc *out)
{
	static const char *const keys[] = {"format", "addr", "provider", "ctx",
					   "reg_epoch", "durability", "shards",
					   "cfg_epoch", "rpc_ctx",
					   /* added by membership */
					   "node_id", "pid", "host", "session",
					   "registered_ms", NULL};
	if (!json || !out)
		return dxl_err_set(DXL_E_INVAL, "dxl_replica_desc_decode: NULL");
	memset(out, 0, sizeof(*out));
	json_error_t jerr;
	json_t *o = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!o)
		return dxl_err_set(DXL_E_CORRUPT, "replica descriptor: line %d column %d: %s",
				   jerr.line, jerr.column, jerr.text);
	const char *w = "replica descriptor";
	int ret = 0;
	uint64_t u;
	const char *s;
	if (!json_is_object(o)) {
		ret = dxl_err_set(DXL_E_CORRUPT, "%s is not a JSON object", w);
		goto out;
	}
	if ((ret = only_keys(o, w, keys)) ||
	    (ret = get_u64(o, w, "format", UINT32_MAX, &u)))
		goto out;
	if (u != DXL_REPLICA_FORMAT) {
		ret = dxl_err_set(DXL_E_VERSION, "%s: format %" PRIu64 ", this build reads %d",
				  w, u, DXL_REPLICA_FORMAT);
		goto out;
	}
	if ((ret = get_str(o, w, "addr", &s)))
		goto out;
	if (!s[0] || strlen(s) >= sizeof(out->addr)) {
		ret = dxl_err_set(DXL_E_CORRUPT, "%s: addr '%s' empty or too long", w, s);
		goto out;
	}
	snprintf(out->addr, sizeof(out->addr), "%s", s);
	if ((ret = get_str(o, w, "provider", &s)))
		goto out;
	if (dxl_fabric_provider_parse(s, &out->provider)) {
		ret = dxl_err_set(DXL_E_CORRUPT, "%s: unknown provider '%s'", w, s);
		goto out;
	}
	if ((ret = get_str(o, w, "durability", &s)))
		goto out;
	if (dxl_durability_parse(s, &out->durability)) {
		ret = dxl_err_set(DXL_E_CORRUPT, "%s: unknown durability '%s'", w, s);
		goto out;
	}
	if ((ret = get_u64(o, w, "ctx", DXL_FABRIC_MAX_CTX - 1, &u)))
		goto out;
	out->ctx = (uint32_t)u;
	if ((ret = get_u64(o, w, "reg_epoch", INT64_MAX, &out->reg_epoch)))
		goto out;
	if (json_object_get(o, "cfg_epoch") &&
	    (ret = get_u64(o, w, "cfg_epoch", INT64_MAX, &out->cfg_epoch)))
		goto out;
	if (json_object_get(o, "rpc_ctx")) {
		if ((ret = get_u64(o, w, "rpc_ctx", DXL_FABRIC_MAX_CTX - 1, &u)))
			goto out;
		if (!u) {
			ret = dxl_err_set(DXL_E_CORRUPT, "%s: rpc_ctx 0 (ctx 0 serves writers; absent = no table RPCs)", w);
			goto out;
		}
		out->rpc_ctx = (uint32_t)u;
	}
	if (json_object_get(o, "node_id")) {
		if ((ret = get_u64(o, w, "node_id", UINT32_MAX, &u)))
			goto out;
		out->node_id = (uint32_t)u;
	}
	json_t *arr = json_object_get(o, "shards");
	if (!arr || !json_is_array(arr)) {
		ret = dxl_err_set(DXL_E_CORRUPT, "%s: \"shards\" missing or not an array", w);
		goto out;
	}
	if (json_array_size(arr) > DXL_REPLICA_MAX_SHARDS) {
		ret = dxl_err_set(DXL_E_CORRUPT, "%s: %zu shards (at most %d)", w,
				  json_array_size(arr), DXL_REPLICA_MAX_SHARDS);
		goto out;
	}
	for (size_t i = 0; i < json_array_size(arr); i++) {
		if ((ret = decode_shard(json_array_get(arr, i), (uint32_t)i,
					&out->shards[i])))
			goto out;
		for (size_t j = 0; j < i; j++)
			if (out->shards[j].shard == out->shards[i].shard) {
				ret = dxl_err_set(DXL_E_CORRUPT, "%s: shard %u listed twice",
						  w, out->shards[i].shard);
				goto out;
			}
		out->nshards = (uint32_t)i + 1;
	}
out:
	json_decref(o);
	if (ret)
		memset(out, 0, sizeof(*out));
	return ret;
}

int dxl_replica_desc_get(struct dxl_zk *zk, uint32_t id, struct dxl_replica_desc *out)
{
	char *json = NULL;
	int ret = dxl_member_get(zk, id, &json, NULL);
	if (ret == DXL_E_NOENT)
		return dxl_err_set(DXL_E_NOENT, "node %u is not registered", id);
	if (ret)
		return ret;
	ret = dxl_replica_desc_decode(json, strlen(json), out);
	free(json);
	if (ret)
		dxl_err_prefix("nodes/%u", id);
	else
		out->node_id = id;
	return ret;
}

const struct dxl_shard_desc *
dxl_replica_desc_shard(const struct dxl_replica_desc *d, uint32_t shard)
{
	for (uint32_t i = 0; i < d->nshards; i++)
		if (d->shards[i].shard == shard)
			return &d->shards[i];
	return NULL;
}

const struct dxl_shard_table *
dxl_replica_desc_table(const struct dxl_replica_desc *d, uint32_t shard,
		       uint32_t table)
{
	const struct dxl_shard_desc *sd = dxl_replica_desc_shard(d, shard);
	for (uint32_t i = 0; sd && i < sd->ntables; i++)
		if (sd->tables[i].t.id == table)
			return &sd->tables[i];
	return NULL;
}

int dxl_replica_desc_target(const struct dxl_replica_desc *d, uint32_t shard,
			    uint32_t ring, struct dxl_log_target *out)
{
	const struct dxl_shard_desc *sd = dxl_replica_desc_shard(d, shard);
	if (!sd)
		return dxl_err_set(DXL_E_NOENT, "node %u (%s) does not host shard %u",
				   d->node_id, d->addr, shard);
	if (ring >= sd->nrings)
		return dxl_err_set(DXL_E_INVAL, "shard %u has %u rings, not ring %u",
				   shard, sd->nrings, ring);
	memset(out, 0, sizeof(*out));
	snprintf(out->addr, sizeof(out->addr), "%s", d->addr);
	out->remote_ctx = d->ctx;
	out->data = sd->region;
	out->ring = ring;
	out->ring_size = sd->ring_size;
	out->ctl_off = sd->ctl_off + (uint64_t)ring * sd->ring_stride;
	out->buf_off = out->ctl_off + sd->buf_delta;
	return 0;
}
