/* shard_fixture.c -- a shard replica in one process for recovery tests (shard_fixture.h) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/recovery.h"
#include "tests/lib/shard_fixture.h"

const struct dxl_table_schema DXLT_SHARD_TABLES[2] = {
	{.id = 1, .value_size = 24, .capacity = 512},
	{.id = 2, .value_size = 300, .capacity = 64},
};

const struct dxl_region_id DXLT_SHARD_ID = {.cluster = "rcv", .node_id = 1};

static const uint64_t NKEYS[2] = {300, 50};

void dxlt_shard_create(struct dxlt_shard *x, const char *dir, const char *name,
		       uint32_t nlogs, uint64_t ring_size, unsigned seed)
{
	memset(x, 0, sizeof(*x));
	snprintf(x->dir, sizeof(x->dir), "%s", dir);
	x->shard = 5;
	x->seed = seed;
	x->ts = 1000;
	char p[400];
	snprintf(p, sizeof(p), "%s/%s.store", dir, name);
	x->s = dxlt_shard_new_store(x, p);
	x->nlogs = nlogs;
	for (uint32_t i = 0; i < nlogs; i++) {
		struct dxlt_shard_log *l = &x->log[i];
		snprintf(p, sizeof(p), "%s/%s.log%u", dir, name, i);
		struct dxl_region_id lid = DXLT_SHARD_ID;
		lid.kind = DXL_REGION_LOG;
		uint64_t bytes = DXL_ALIGN_UP(dxl_logstore_bytes(DXLT_SHARD_NRINGS, ring_size),
					      4096ull);
		assert_int_equal(dxl_region_create(p, bytes, DXL_DUR_PROCESS, &lid, &l->r), 0);
		assert_int_equal(dxl_logstore_format(l->r, x->shard, DXLT_SHARD_NRINGS,
						     ring_size), 0);
		assert_int_equal(dxl_logstore_open(l->r, &l->ls), 0);
		for (int r = 0; r < DXLT_SHARD_NRINGS; r++) {
			l->tail_pos[r] = 0;
			l->tail_seq[r] = 1;
		}
	}
}

struct dxl_store *dxlt_shard_new_store(const struct dxlt_shard *x, const char *path)
{
	struct dxl_store *s = NULL;
	int ret = dxl_store_create(path, DXL_DUR_PROCESS, &DXLT_SHARD_ID, x->shard,
				   DXLT_SHARD_TABLES, 2, NULL, &s);
	if (ret)
		fail_msg("store %s: %s", path, dxl_errmsg());
	return s;
}

void dxlt_shard_close(struct dxlt_shard *x)
{
	dxl_store_close(&x->s);
	for (uint32_t i = 0; i < x->nlogs; i++) {
		dxl_logstore_close(&x->log[i].ls);
		dxl_region_close(&x->log[i].r);
	}
}

static int append(struct dxlt_shard_log *l, uint32_t ring, uint64_t ts,
		  const void *payload, uint32_t len)
{
	struct dxl_rec r = {.type = DXL_REC_DATA, .writer = ring, .epoch = 1,
			    .txn_id = ts, .commit_ts = ts, .payload = payload,
			    .payload_len = len};
	uint64_t size = dxl_logstore_ring_size(l->ls);
	uint32_t rsize = dxl_rec_size(0, len);
	struct dxl_ring_head h;
	assert_int_equal(dxl_logstore_head(l->ls, ring, &h), 0);
	struct dxl_ring_place p;
	int ret = dxl_ring_place(size, l->tail_pos[ring], l->tail_seq[ring], h.pos, rsize, &p);
	if (ret)
		return ret;
	uint8_t *buf = (uint8_t *)dxl_region_data(l->r) + dxl_logstore_buf_off(l->ls, ring);
	if (p.skip_len)
		assert_int_equal(dxl_rec_encode_skip(ring, 1, p.skip_seq, p.skip_len,
						     buf + p.skip_off, p.skip_len),
				 (int)p.skip_len);
	r.seq = p.rec_seq;
	assert_int_equal(dxl_rec_encode(&r, NULL, buf + p.rec_off, size - p.rec_off),
			 (int)rsize);
	l->tail_pos[ring] = p.new_tail_pos;
	l->tail_seq[ring] = p.new_tail_seq;
	return 0;
}

static void val(uint8_t *v, uint32_t len, uint64_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		v[i] = (uint8_t)(seed * 31 + i * 7 + 1);
}

int dxlt_shard_txn(struct dxlt_shard *x)
{
	struct dxl_ws_entry e[4];
	static __thread uint8_t vals[4][300];
	uint32_t n = 1 + (uint32_t)rand_r(&x->seed) % 4, k = 0;
	x->ts += 1 + (uint64_t)rand_r(&x->seed) % 3;
	for (uint32_t i = 0; i < n; i++) {
		int ti = rand_r(&x->seed) % 4 ? 0 : 1;
		uint32_t table = DXLT_SHARD_TABLES[ti].id;
		uint64_t key = (uint64_t)rand_r(&x->seed) % NKEYS[ti];
		bool dup = false;
		for (uint32_t j = 0; j < k; j++)
			dup |= e[j].table == table && e[j].key == key;
		if (dup)
			continue;
		uint64_t slot;
		bool present = dxl_store_find(x->s, table, key, &slot) == 0;
		struct dxl_ws_entry *w = &e[k];
		*w = (struct dxl_ws_entry){.table = table, .key = key,
					   .version = 2 * ++x->version};
		if (present && rand_r(&x->seed) % 4 == 0) {
			w->op = DXL_WS_DELETE;
		} else {
			w->op = present ? DXL_WS_UPDATE : DXL_WS_INSERT;
			w->len = 1 + (uint32_t)rand_r(&x->seed) % DXLT_SHARD_TABLES[ti].value_size;
			val(vals[k], w->len, x->version);
			w->value = vals[k];
		}
		k++;
	}
	dxl_err_clear();
	if (!k)
		return 0;
	static __thread uint8_t ws[4 * 400];
	int len = dxl_writeset_encode(e, k, ws, sizeof(ws));
	assert_true(len > 0);
	uint32_t ring = (uint32_t)(x->ntx % DXLT_SHARD_NRINGS);
	for (uint32_t i = 0; i < x->nlogs; i++) {
		int ret = append(&x->log[i], ring, x->ts, ws, (uint32_t)len);
		if (ret)
			return ret;
	}
	int ret = dxl_store_apply_writeset(x->s, ws, (uint32_t)len, x->ts, NULL, NULL, NULL);
	if (ret < 0)
		fail_msg("apply: %s", dxl_errmsg());
	x->ntx++;
	return 0;
}

int dxlt_shard_log_ws(struct dxlt_shard *x, const void *ws, uint32_t len, uint64_t ts)
{
	uint32_t ring = (uint32_t)(x->ntx % DXLT_SHARD_NRINGS);
	for (uint32_t i = 0; i < x->nlogs; i++) {
		int ret = append(&x->log[i], ring, ts, ws, len);
		if (ret)
			return ret;
	}
	x->ntx++;
	return 0;
}

int dxlt_shard_retain(struct dxlt_shard *x, uint32_t i, uint32_t n)
{
	struct dxl_logstore *ls = x->log[i].ls;
	int total = 0;
	for (uint32_t r = 0; r < DXLT_SHARD_NRINGS; r++) {
		struct dxl_ring_iter it;
		assert_int_equal(dxl_ring_iter_init(&it, ls, r), 0);
		struct dxl_rec rec;
		uint64_t pos, npos = 0, nseq = 0, last = 0;
		uint32_t k = 0;
		while (k < n && dxl_ring_iter_next(&it, &rec, &pos) == 1) {
			npos = pos + rec.total_len;
			nseq = rec.seq + 1;
			last = rec.commit_ts;
			k++;
		}
		if (k)
			assert_int_equal(dxl_logstore_set_head(ls, r, npos, nseq, last), 0);
		total += (int)k;
	}
	return total;
}

void dxlt_shard_assert_same(struct dxl_store *a, struct dxl_store *b)
{
	static uint8_t va[4096], vb[4096];
	for (int ti = 0; ti < 2; ti++) {
		uint32_t table = DXLT_SHARD_TABLES[ti].id;
		for (uint64_t key = 0; key < NKEYS[ti]; key++) {
			uint64_t sa, sb;
			int fa = dxl_store_find(a, table, key, &sa);
			int fb = dxl_store_find(b, table, key, &sb);
			if (fa != fb)
				fail_msg("table %u key %" PRIu64 ": %s in a, %s in b", table, key,
					 fa ? "absent" : "present", fb ? "absent" : "present");
			if (fa)
				continue;
			struct dxl_record ra, rb;
			assert_int_equal(dxl_store_read(a, table, sa, &ra, va, sizeof(va)), 0);
			assert_int_equal(dxl_store_read(b, table, sb, &rb, vb, sizeof(vb)), 0);
			if (ra.version != rb.version || ra.ts != rb.ts || ra.len != rb.len ||
			    memcmp(va, vb, ra.len))
				fail_msg("table %u key %" PRIu64 ": version %" PRIu64 "/%" PRIu64
					 " ts %" PRIu64 "/%" PRIu64 " len %u/%u",
					 table, key, ra.version, rb.version, ra.ts, rb.ts, ra.len,
					 rb.len);
		}
	}
	struct dxl_store_stats x, y;
	assert_int_equal(dxl_store_stats(a, UINT32_MAX, &x), 0);
	assert_int_equal(dxl_store_stats(b, UINT32_MAX, &y), 0);
	assert_int_equal(x.live, y.live);
}

void dxlt_store_digest(struct dxl_store *a, struct dxl_store *b, struct dxl_digest *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < dxl_store_ntables(a); i++) {
		struct dxl_table_schema sc;
		assert_int_equal(dxl_store_table_at(a, i, &sc), 0);
		uint64_t cut = dxl_store_reclaim_floor(a, sc.id), torn = 0;
		if (b)
			cut = DXL_MAX(cut, dxl_store_reclaim_floor(b, sc.id));
		struct dxl_digest t;
		assert_int_equal(dxl_digest_store_from(a, sc.id, cut, &t, &torn), 0);
		assert_int_equal(torn, 0);
		dxl_digest_merge(out, &t);
	}
}
