/* digest.c -- order-independent state digests of a store's live records (include/dxl/recovery.h) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/recovery.h"
#include "recovery/recovery_internal.h"

/*
 * A record's two hashes: CRC32C of the value (isa-l, fast) folded with
 * table, key, version and length through two different 64-bit finalizers
 * (murmur3's fmix64 with two seeds). Summing per-record hashes makes the
 * digest independent of the order of the scan and of slot placement; the
 * count guards against records that cancel out.
 */

static uint64_t rec_hash(uint64_t seed, uint32_t table, uint64_t key,
			 uint64_t version, uint32_t vcrc, uint32_t len)
{
	uint64_t h = dxl_fmix64(seed ^ table);
	h = dxl_fmix64(h ^ key);
	h = dxl_fmix64(h ^ version);
	return dxl_fmix64(h ^ ((uint64_t)vcrc << 32 | len));
}

void dxl_rcv_digest_add_crc(struct dxl_digest *d, uint32_t table, uint64_t key,
			    uint64_t version, uint32_t vcrc, uint32_t len)
{
	d->records++;
	d->h[0] += rec_hash(0x243f6a8885a308d3ull, table, key, version, vcrc, len);
	d->h[1] += rec_hash(0x13198a2e03707344ull, table, key, version, vcrc, len);
}

void dxl_digest_add_tombstone(struct dxl_digest *d, uint32_t table, uint64_t key,
			      uint64_t version)
{
	/* seeds of their own: a tombstone never hashes like a record */
	d->tombstones++;
	d->t[0] += rec_hash(0xa4093822299f31d0ull, table, key, version, 0, 0);
	d->t[1] += rec_hash(0x082efa98ec4e6c89ull, table, key, version, 0, 0);
}

void dxl_digest_add(struct dxl_digest *d, uint32_t table, uint64_t key,
		    uint64_t version, const void *value, uint32_t len)
{
	dxl_rcv_digest_add_crc(d, table, key, version, len ? dxl_crc32c(0, value, len) : 0,
			       len);
}

void dxl_digest_merge(struct dxl_digest *a, const struct dxl_digest *b)
{
	a->records += b->records;
	a->h[0] += b->h[0];
	a->h[1] += b->h[1];
	a->tombstones += b->tombstones;
	a->t[0] += b->t[0];
	a->t[1] += b->t[1];
}

bool dxl_digest_equal(const struct dxl_digest *a, const struct dxl_digest *b)
{
	return a->records == b->records && a->h[0] == b->h[0] && a->h[1] == b->h[1] &&
	       a->tombstones == b->tombstones && a->t[0] == b->t[0] && a->t[1] == b->t[1];
}

int dxl_digest_format(const struct dxl_digest *d, char *buf, size_t cap)
{
	return snprintf(buf, cap,
			"records=%" PRIu64 " h=%016" PRIx64 "%016" PRIx64 " tombstones=%" PRIu64
			" t=%016" PRIx64 "%016" PRIx64,
			d->records, d->h[0], d->h[1], d->tombstones, d->t[0], d->t[1]);
}

static void hex128(const char *hex, uint64_t *out)
{
	char a[17], b[17];
	memcpy(a, hex, 16);
	a[16] = 0;
	memcpy(b, hex + 16, 16);
	b[16] = 0;
	out[0] = strtoull(a, NULL, 16);
	out[1] = strtoull(b, NULL, 16);
}

int dxl_digest_parse(const char *s, struct dxl_digest *out)
{
	char hex[33], thex[33];
	uint64_t n, m = 0;
	int used = 0, tused = 0;
	bool ok = s && sscanf(s, "records=%" SCNu64 " h=%32[0-9a-f]%n", &n, hex, &used) == 2 &&
		  strlen(hex) == 32;
	if (ok && s[used] != 0)
		ok = sscanf(s + used, " tombstones=%" SCNu64 " t=%32[0-9a-f]%n", &m, thex,
			    &tused) == 2 &&
		     strlen(thex) == 32 && s[used + tused] == 0;
	if (!ok)
		return dxl_err_set(DXL_E_INVAL,
				   "'%s' is not a digest (records=N h=<32 hex> [tombstones=M t=<32 hex>])",
				   s ? s : "(null)");
	memset(out, 0, sizeof(*out));
	out->records = n;
	hex128(hex, out->h);
	if (tused) {
		out->tombstones = m;
		hex128(thex, out->t);
	}
	return 0;
}

int dxl_digest_store(struct dxl_store *s, uint32_t table, struct dxl_digest *out,
		     uint64_t *torn)
{
	return dxl_digest_store_from(s, table, 0, out, torn);
}

int dxl_digest_store_from(struct dxl_store *s, uint32_t table, uint64_t tomb_from_ts,
			  struct dxl_digest *out, uint64_t *torn)
{
	memset(out, 0, sizeof(*out));
	if (torn)
		*torn = 0;
	bool found = false;
	static __thread uint8_t val[DXL_ENGINE_MAX_VALUE];
	for (unsigned i = 0; i < dxl_store_ntables(s); i++) {
		struct dxl_table_schema sc;
		dxl_store_table_at(s, i, &sc);
		if (table != UINT32_MAX && sc.id != table)
			continue;
		found = true;
		for (uint64_t slot = 0; slot < sc.capacity; slot++) {
			struct dxl_record r;
			int ret = dxl_store_read(s, sc.id, slot, &r, val, sizeof(val));
			if (ret == DXL_E_AGAIN) {
				/* a slot torn by a crash stays torn until the
				 * replay: not a state, not hashed */
				if (dxl_rcv_torn_reserved(s, sc.id, slot)) {
					if (torn)
						(*torn)++;
					dxl_err_clear();
					continue;
				}
				return dxl_err_set(DXL_E_AGAIN,
						   "digest: table %u slot %" PRIu64
						   " is being written (the store is not quiet)",
						   sc.id, slot);
			}
			if (ret)
				return ret;
			if (r.live)
				dxl_digest_add(out, sc.id, r.key, r.version, val, r.len);
			else if (r.version >= 2 && r.ts >= tomb_from_ts &&
				 dxl_rcv_is_tombstone(s, sc.id, slot, &r))
				dxl_digest_add_tombstone(out, sc.id, r.key, r.version);
		}
	}
	if (!found)
		return dxl_err_set(DXL_E_NOENT, "digest: no table %u", table);
	return 0;
}

bool dxl_rcv_torn_reserved(struct dxl_store *s, uint32_t table, uint64_t slot)
{
	const uint8_t *p = dxl_store_slot_ptr(s, table, slot);
	if (!p)
		return false;
	/* line 0's key word (engine.h's layout), read as the store writes it */
	uint64_t key = __atomic_load_n((const uint64_t *)(p + 16), __ATOMIC_ACQUIRE);
	uint64_t at;
	struct dxl_record r;
	bool torn = dxl_store_find(s, table, key, &at) == 0 && at == slot &&
		    dxl_store_read(s, table, slot, &r, NULL, 0) == DXL_E_AGAIN;
	dxl_err_clear();
	return torn;
}

bool dxl_rcv_is_tombstone(struct dxl_store *s, uint32_t table, uint64_t slot,
			  const struct dxl_record *r)
{
	struct dxl_store_absence a;
	bool tomb = !r->live && r->version >= 2 &&
		    dxl_store_absence(s, table, r->key, &a) == 0 && a.slot == slot &&
		    a.version == r->version;
	dxl_err_clear();
	return tomb;
}

/* ---- a state read slot by slot ---------------------------------------------------------- */

struct dxl_state {
	struct dxl_state_entry *e;
	uint64_t mask, n;
};

static struct dxl_state_entry *state_slot(struct dxl_state_entry *e, uint64_t mask,
					  uint32_t table, uint64_t key)
{
	for (uint64_t i = dxl_table_key_hash(table, key) & mask;; i = (i + 1) & mask)
		if (!e[i].used || (e[i].table == table && e[i].key == key))
			return &e[i];
}

static int state_grow(struct dxl_state *s, uint64_t size)
{
	struct dxl_state_entry *ne = calloc(size, sizeof(*ne));
	if (!ne)
		return dxl_err_set(DXL_E_NOMEM, "state of %" PRIu64 " keys", s->n);
	for (uint64_t i = 0; s->e && i <= s->mask; i++)
		if (s->e[i].used)
			*state_slot(ne, size - 1, s->e[i].table, s->e[i].key) = s->e[i];
	free(s->e);
	s->e = ne;
	s->mask = size - 1;
	return 0;
}

int dxl_state_new(uint64_t expect, struct dxl_state **out)
{
	struct dxl_state *s = calloc(1, sizeof(*s));
	if (!s)
		return dxl_err_set(DXL_E_NOMEM, "state");
	uint64_t size = 1024;
	while (size < 2 * expect + 2)
		size <<= 1;
	int ret = state_grow(s, size);
	if (ret) {
		free(s);
		return ret;
	}
	*out = s;
	return 0;
}

void dxl_state_delete(struct dxl_state **sp)
{
	if (!sp || !*sp)
		return;
	free((*sp)->e);
	free(*sp);
	*sp = NULL;
}

int dxl_rcv_state_add_crc(struct dxl_state *s, uint32_t table, uint64_t key, uint64_t version,
			  uint64_t ts, bool live, uint32_t vcrc, uint32_t len)
{
	if (2 * (s->n + 1) > s->mask + 1) {
		int ret = state_grow(s, 2 * (s->mask + 1));
		if (ret)
			return ret;
	}
	struct dxl_state_entry *e = state_slot(s->e, s->mask, table, key);
	if (!e->used)
		s->n++;
	/* the later state wins; at one version a record over a tombstone (a
	 * free slot may keep a key's version after a crash cut a write) */
	if (!e->used || version > e->version || (version == e->version && live && !e->live))
		*e = (struct dxl_state_entry){.key = key, .version = version, .ts = ts,
					      .table = table, .vcrc = live ? vcrc : 0,
					      .len = live ? len : 0, .live = live, .used = true};
	return 0;
}

int dxl_state_add(struct dxl_state *s, uint32_t table, uint64_t key, uint64_t version,
		  uint64_t ts, bool live, const void *value, uint32_t len)
{
	return dxl_rcv_state_add_crc(s, table, key, version, ts, live,
				     live && len ? dxl_crc32c(0, value, len) : 0, len);
}

const struct dxl_state_entry *dxl_state_find(const struct dxl_state *s, uint32_t table,
					     uint64_t key)
{
	const struct dxl_state_entry *e = state_slot(s->e, s->mask, table, key);
	return e->used ? e : NULL;
}

uint64_t dxl_state_count(const struct dxl_state *s)
{
	return s->n;
}

int dxl_state_foreach(const struct dxl_state *s,
		      int (*fn)(void *arg, const struct dxl_state_entry *e), void *arg)
{
	for (uint64_t i = 0; i <= s->mask; i++)
		if (s->e[i].used) {
			int ret = fn(arg, &s->e[i]);
			if (ret)
				return ret;
		}
	return 0;
}

void dxl_state_digest(const struct dxl_state *s, uint64_t tomb_from_ts, struct dxl_digest *out)
{
	memset(out, 0, sizeof(*out));
	for (uint64_t i = 0; i <= s->mask; i++) {
		const struct dxl_state_entry *e = &s->e[i];
		if (!e->used)
			continue;
		if (e->live)
			dxl_rcv_digest_add_crc(out, e->table, e->key, e->version, e->vcrc, e->len);
		else if (e->ts >= tomb_from_ts)
			dxl_digest_add_tombstone(out, e->table, e->key, e->version);
	}
}
