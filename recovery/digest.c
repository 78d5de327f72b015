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
static uint64_t fmix(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	return k ^ (k >> 33);
}

static uint64_t rec_hash(uint64_t seed, uint32_t table, uint64_t key,
			 uint64_t version, uint32_t vcrc, uint32_t len)
{
	uint64_t h = fmix(seed ^ table);
	h = fmix(h ^ key);
	h = fmix(h ^ version);
	return fmix(h ^ ((uint64_t)vcrc << 32 | len));
}

void dxl_rcv_digest_add_crc(struct dxl_digest *d, uint32_t table, uint64_t key,
			    uint64_t version, uint32_t vcrc, uint32_t len)
{
	d->records++;
	d->h[0] += rec_hash(0x243f6a8885a308d3ull, table, key, version, vcrc, len);
	d->h[1] += rec_hash(0x13198a2e03707344ull, table, key, version, vcrc, len);
}

void dxl_digest_add(struct dxl_digest *d, uint32_t table, uint64_t key,
		    uint64_t version, const void *value, uint32_t len)
{
	dxl_rcv_digest_add_crc(d, table, key, version, len ? dxl_crc32c(0, value, len) : 0,
			       len);
}

bool dxl_digest_equal(const struct dxl_digest *a, const struct dxl_digest *b)
{
	return a->records == b->records && a->h[0] == b->h[0] && a->h[1] == b->h[1];
}

int dxl_digest_format(const struct dxl_digest *d, char *buf, size_t cap)
{
	return snprintf(buf, cap, "records=%" PRIu64 " h=%016" PRIx64 "%016" PRIx64,
			d->records, d->h[0], d->h[1]);
}

int dxl_digest_parse(const char *s, struct dxl_digest *out)
{
	char hex[33];
	uint64_t n;
	int used = 0;
	if (!s || sscanf(s, "records=%" SCNu64 " h=%32[0-9a-f]%n", &n, hex, &used) != 2 ||
	    strlen(hex) != 32 || s[used] != 0)
		return dxl_err_set(DXL_E_INVAL, "'%s' is not a digest (records=N h=<32 hex>)",
				   s ? s : "(null)");
	char a[17], b[17];
	memcpy(a, hex, 16);
	a[16] = 0;
	memcpy(b, hex + 16, 16);
	b[16] = 0;
	out->records = n;
	out->h[0] = strtoull(a, NULL, 16);
	out->h[1] = strtoull(b, NULL, 16);
	return 0;
}

int dxl_digest_store(struct dxl_store *s, uint32_t table, struct dxl_digest *out,
		     uint64_t *torn)
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
