/* test_desc_tables.c -- nodes/<id> descriptors with the engine's tables:
 * round trip, older descriptors without tables, strict decoding of every
 * table field, the size of a full descriptor against ZooKeeper's 1 MB, and
 * the engine.tables parser */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/index.h"
#include "dxl/replica.h"

static char *edit(const char *json, const char *what, const char *with);
static void expect_corrupt(const char *base, const char *what, const char *with,
			   const char *msg_part);

static void mk_table(struct dxl_shard_table *t, uint32_t id, uint32_t vs,
		     uint64_t cap, uint64_t base)
{
	memset(t, 0, sizeof(*t));
	t->t.id = id;
	t->t.value_size = vs;
	t->t.slot_size = dxl_record_slot_size(vs);
	t->t.capacity = cap;
	t->t.lock_mode = id % 2 ? DXL_LOCKS_NIC : DXL_LOCKS_CPU;
	t->t.records = (struct dxl_mr_desc){.addr = base, .len = cap * t->t.slot_size,
					    .rkey = 0x9e3779b9u ^ id, .node = 4000000000u};
	t->t.locks = (struct dxl_mr_desc){.addr = base + (1ull << 40), .len = 8 * cap,
					  .rkey = 0x7f4a7c15u ^ id, .node = 4000000000u};
	struct dxl_index_cfg ic;
	dxl_index_cfg_init(&ic, cap);
	t->ihdr.format = DXL_INDEX_FORMAT;
	t->ihdr.n_buckets = ic.n_buckets;
	t->ihdr.n_indirect = ic.n_indirect;
	t->ihdr.seed = ic.seed ^ ((uint64_t)id << 60); /* above 2^63 for some */
	t->ihdr.len = DXL_INDEX_HDR_SIZE + DXL_INDEX_BUCKET_SIZE * (ic.n_buckets + ic.n_indirect);
	t->index = (struct dxl_mr_desc){.addr = base + (2ull << 40), .len = t->ihdr.len,
					.rkey = 0xdeadbeefu ^ id, .node = 4000000000u};
}

static void mk_desc(struct dxl_replica_desc *d, uint32_t nshards, uint32_t ntables)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->addr, sizeof(d->addr), "255.255.255.255:65535");
	d->provider = DXL_FABRIC_TCP;
	d->ctx = 0;
	d->rpc_ctx = DXL_REPLICA_RPC_CTX;
	d->reg_epoch = INT64_MAX;
	d->cfg_epoch = INT64_MAX;
	d->durability = DXL_DUR_MSYNC;
	d->nshards = nshards;
	for (uint32_t i = 0; i < nshards; i++) {
		struct dxl_shard_desc *sd = &d->shards[i];
		sd->shard = 4000000000u + i;
		sd->state = DXL_SHARD_SYNCED;
		sd->nrings = DXL_SHARD_MAX_RINGS;
		sd->ring_size = 1ull << 30;
		sd->ctl_off = 4096;
		sd->buf_delta = DXL_RING_CTL_SIZE;
		sd->ring_stride = sd->buf_delta + sd->ring_size;
		sd->region = (struct dxl_mr_desc){
			.addr = 0x7fffffffffffull,
			.len = sd->ctl_off + sd->nrings * sd->ring_stride,
			.rkey = UINT32_MAX, .node = UINT32_MAX};
		sd->fill_pct = 100;
		sd->last_ts = INT64_MAX;
		sd->records = INT64_MAX;
		sd->ntables = ntables;
		for (uint32_t k = 0; k < ntables; k++)
			mk_table(&sd->tables[k], 4000000000u + k, DXL_ENGINE_MAX_VALUE,
				 DXL_TABLE_MAX_CAPACITY, 0xfffffffff000ull - (k << 20));
	}
}

static void expect_same_table(const struct dxl_shard_table *a,
			      const struct dxl_shard_table *b)
{
	assert_int_equal(a->t.id, b->t.id);
	assert_int_equal(a->t.value_size, b->t.value_size);
	assert_int_equal(a->t.slot_size, b->t.slot_size);
	assert_int_equal(a->t.lock_mode, b->t.lock_mode);
	assert_int_equal(a->t.capacity, b->t.capacity);
	assert_memory_equal(&a->t.records, &b->t.records, sizeof(a->t.records));
	assert_memory_equal(&a->t.locks, &b->t.locks, sizeof(a->t.locks));
	assert_memory_equal(&a->index, &b->index, sizeof(a->index));
	assert_int_equal(a->ihdr.format, b->ihdr.format);
	assert_int_equal(a->ihdr.n_buckets, b->ihdr.n_buckets);
	assert_int_equal(a->ihdr.n_indirect, b->ihdr.n_indirect);
	assert_int_equal(a->ihdr.seed, b->ihdr.seed);
	assert_int_equal(a->ihdr.len, b->ihdr.len);
}

static void test_round_trip(void **state)
{
	(void)state;
	struct dxl_replica_desc *d = calloc(2, sizeof(*d));
	assert_non_null(d);
	mk_desc(&d[0], 2, 0);
	mk_table(&d[0].shards[0].tables[0], 1, 64, 1000, 0x7f0000001000ull);
	mk_table(&d[0].shards[0].tables[1], 2, 33, 5, 0x7f0000100000ull);
	d[0].shards[0].ntables = 2;
	mk_table(&d[0].shards[1].tables[0], 1, 4000, 3, 0x7f0000200000ull);
	d[0].shards[1].ntables = 1;
	char *json = NULL;
	assert_int_equal(dxl_replica_desc_encode(&d[0], &json), 0);
	assert_non_null(strstr(json, "\"rpc_ctx\":2"));
	assert_non_null(strstr(json, "\"lock_mode\":\"nic\""));
	int ret = dxl_replica_desc_decode(json, strlen(json), &d[1]);
	if (ret)
		fail_msg("%s\n%s", dxl_errmsg(), json);
	free(json);
	assert_int_equal(d[1].rpc_ctx, DXL_REPLICA_RPC_CTX);
	assert_int_equal(d[1].nshards, 2);
	assert_int_equal(d[1].shards[0].ntables, 2);
	assert_int_equal(d[1].shards[1].ntables, 1);
	expect_same_table(&d[0].shards[0].tables[0], &d[1].shards[0].tables[0]);
	expect_same_table(&d[0].shards[0].tables[1], &d[1].shards[0].tables[1]);
	expect_same_table(&d[0].shards[1].tables[0], &d[1].shards[1].tables[0]);
	const struct dxl_shard_table *t = dxl_replica_desc_table(&d[1], d[1].shards[0].shard, 2);
	assert_non_null(t);
	assert_int_equal(t->t.value_size, 33);
	assert_null(dxl_replica_desc_table(&d[1], d[1].shards[0].shard, 3));
	assert_null(dxl_replica_desc_table(&d[1], 7, 1));
	free(d);
}

/* a descriptor of before issue 6: no "tables", no "rpc_ctx" */
static void test_old_descriptor(void **state)
{
	(void)state;
	static const char old[] =
		"{\"format\":1,\"addr\":\"127.0.0.1:41875\",\"provider\":\"tcp\",\"ctx\":0,"
		"\"reg_epoch\":1,\"durability\":\"process\",\"cfg_epoch\":3,"
		"\"shards\":[{\"id\":0,\"region\":{\"addr\":\"0x7f3a1c000000\",\"len\":1069056,"
		"\"rkey\":1,\"node\":1},\"nrings\":4,\"ring_size\":262144,\"ctl_off\":4096,"
		"\"ring_stride\":266240,\"buf_delta\":4096}],"
		"\"node_id\":1,\"pid\":4242,\"host\":\"vm\",\"session\":\"0x10\",\"registered_ms\":1}";
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	assert_non_null(d);
	int ret = dxl_replica_desc_decode(old, strlen(old), d);
	if (ret)
		fail_msg("%s", dxl_errmsg());
	assert_int_equal(d->rpc_ctx, 0);
	assert_int_equal(d->nshards, 1);
	assert_int_equal(d->shards[0].ntables, 0);
	/* and a descriptor without tables encodes no "tables" / "rpc_ctx" */
	char *json = NULL;
	assert_int_equal(dxl_replica_desc_encode(d, &json), 0);
	assert_null(strstr(json, "tables"));
	assert_null(strstr(json, "rpc_ctx"));
	free(json);
	/* "tables" present: an array (empty is fine) */
	json = edit(old, "\"buf_delta\":4096}", "\"buf_delta\":4096,\"tables\":[]}");
	assert_int_equal(dxl_replica_desc_decode(json, strlen(json), d), 0);
	assert_int_equal(d->shards[0].ntables, 0);
	free(json);
	free(d);
	expect_corrupt(old, "\"buf_delta\":4096}", "\"buf_delta\":4096,\"tables\":7}",
		       "\"tables\" is not an array");
}

/* replace the first occurrence of `what` in json by `with` */
static char *edit(const char *json, const char *what, const char *with)
{
	const char *p = strstr(json, what);
	assert_non_null(p);
	size_t n = strlen(json) - strlen(what) + strlen(with) + 1;
	char *out = malloc(n);
	assert_non_null(out);
	snprintf(out, n, "%.*s%s%s", (int)(p - json), json, with, p + strlen(what));
	return out;
}

static void expect_corrupt(const char *base, const char *what, const char *with,
			   const char *msg_part)
{
	char *j = edit(base, what, with);
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	assert_non_null(d);
	int ret = dxl_replica_desc_decode(j, strlen(j), d);
	if (ret != DXL_E_CORRUPT || !strstr(dxl_errmsg(), msg_part))
		fail_msg("'%s' -> '%s': got %s \"%s\", expected DXL_E_CORRUPT with '%s'",
			 what, with, dxl_errname(ret), dxl_errmsg(), msg_part);
	/* nothing of a refused descriptor is left */
	assert_int_equal(d->nshards, 0);
	free(d);
	free(j);
}

static void test_strict(void **state)
{
	(void)state;
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	assert_non_null(d);
	mk_desc(d, 1, 0);
	mk_table(&d->shards[0].tables[0], 5, 64, 1000, 0x7f0000001000ull);
	mk_table(&d->shards[0].tables[1], 6, 100, 10, 0x7f0000100000ull);
	d->shards[0].ntables = 2;
	char *json = NULL;
	assert_int_equal(dxl_replica_desc_encode(d, &json), 0);
	free(d);
	/* each field: unknown, missing, mistyped, out of range, disagreeing */
	expect_corrupt(json, "\"value_size\":64", "\"value_size\":64,\"x\":1",
		       "unknown key \"x\"");
	expect_corrupt(json, "\"value_size\":64,", "", "missing \"value_size\"");
	expect_corrupt(json, "\"value_size\":64", "\"value_size\":4001", "out of range");
	expect_corrupt(json, "\"value_size\":64", "\"value_size\":0", "do not agree");
	expect_corrupt(json, "\"slot_size\":128", "\"slot_size\":192", "do not agree");
	expect_corrupt(json, "\"capacity\":1000", "\"capacity\":1001", "lock words");
	expect_corrupt(json, "\"lock_mode\":\"nic\"", "\"lock_mode\":\"both\"", "lock_mode");
	expect_corrupt(json, "\"id\":5", "\"id\":\"5\"", "not an integer");
	expect_corrupt(json, "\"id\":6", "\"id\":5", "table 5 listed twice");
	expect_corrupt(json, "\"n_buckets\":256", "\"n_buckets\":255", "power of two");
	expect_corrupt(json, "\"n_indirect\":80", "\"n_indirect\":81", "index of");
	expect_corrupt(json, "\"seed\":\"0x", "\"seed\":\"x", "seed");
	expect_corrupt(json, "\"records\":{\"addr\":\"0x", "\"records\":{\"addr\":\"",
		       "records: addr");
	expect_corrupt(json, "\"locks\":{", "\"locks\":{\"more\":1,", "locks: unknown key");
	/* hex fields are strict: "0x" then 1..16 hex digits. strtoull took a
	 * sign, spaces and a second "0x" after the first one */
	static const char *const after0x[] = {"-", " ", "0x", "+", "\\t", NULL};
	static const char *const fields[][2] = {{"\"seed\":\"0x", "seed"},
						{"\"records\":{\"addr\":\"0x", "records: addr"},
						{"\"region\":{\"addr\":\"0x", "region: addr"}};
	for (int i = 0; after0x[i]; i++)
		for (int f = 0; f < 3; f++) {
			char with[64];
			snprintf(with, sizeof(with), "%s%s", fields[f][0], after0x[i]);
			expect_corrupt(json, fields[f][0], with, fields[f][1]);
		}
	expect_corrupt(json, "\"seed\":\"0x", "\"seed\":\"0x1000000000000000", "seed");
	/* the data identity (issue 16.3): optional, strict hex, not 0 */
	struct dxl_replica_desc *dd = calloc(1, sizeof(*dd));
	assert_non_null(dd);
	mk_desc(dd, 1, 0);
	dd->shards[0].data_id = 0xfedcba9876543210ull;
	char *dj = NULL;
	assert_int_equal(dxl_replica_desc_encode(dd, &dj), 0);
	assert_non_null(strstr(dj, "\"data_id\":\"0xfedcba9876543210\""));
	assert_int_equal(dxl_replica_desc_decode(dj, strlen(dj), dd), 0);
	assert_true(dd->shards[0].data_id == 0xfedcba9876543210ull);
	free(dd);
	expect_corrupt(dj, "\"data_id\":\"0x", "\"data_id\":\"0x-", "data_id");
	expect_corrupt(dj, "\"data_id\":\"0x", "\"data_id\":\"0x0x", "data_id");
	expect_corrupt(dj, "\"data_id\":\"0xfedcba9876543210\"", "\"data_id\":\"0x0\"",
		       "not 0");
	expect_corrupt(dj, "\"data_id\":\"0xfedcba9876543210\"", "\"data_id\":7",
		       "not a string");
	free(dj);
	expect_corrupt(json, "\"n_buckets\":256", "\"n_buckets\":\"256\"", "not an integer");
	expect_corrupt(json, "\"rpc_ctx\":2", "\"rpc_ctx\":0", "rpc_ctx 0");
	expect_corrupt(json, "\"rpc_ctx\":2", "\"rpc_ctx\":64", "out of range");
	/* more than DXL_REPLICA_MAX_TABLES tables: 16 encoded, one more
	 * inserted by hand (the count is checked before the duplicate id) */
	d = calloc(1, sizeof(*d));
	assert_non_null(d);
	mk_desc(d, 1, DXL_REPLICA_MAX_TABLES);
	char *full = NULL;
	assert_int_equal(dxl_replica_desc_encode(d, &full), 0);
	const char *t0 = strstr(full, "\"tables\":[") + strlen("\"tables\":[");
	const char *t1 = strstr(t0, "},{\"id\":");
	assert_non_null(t1);
	char one[2048];
	snprintf(one, sizeof(one), "%.*s,", (int)(t1 - t0) + 1, t0);
	char *many = edit(full, "\"tables\":[", "\"tables\":[@");
	char *many2 = edit(many, "@", one);
	assert_int_equal(dxl_replica_desc_decode(many2, strlen(many2), d), DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "17 tables (at most 16)"));
	free(many);
	free(many2);
	free(full);
	free(d);
	free(json);
}

/* the largest descriptor: every shard with every table, every number at its
 * widest -- ZooKeeper refuses znodes over 1 MB (jute.maxbuffer) */
static void test_full_size(void **state)
{
	(void)state;
	struct dxl_replica_desc *d = calloc(2, sizeof(*d));
	assert_non_null(d);
	mk_desc(&d[0], DXL_REPLICA_MAX_SHARDS, DXL_REPLICA_MAX_TABLES);
	char *json = NULL;
	assert_int_equal(dxl_replica_desc_encode(&d[0], &json), 0);
	size_t len = strlen(json);
	print_message("full descriptor: %zu bytes (%d shards x %d tables)\n", len,
		      DXL_REPLICA_MAX_SHARDS, DXL_REPLICA_MAX_TABLES);
	/* membership adds < 200 bytes (node_id, pid, host, session, time) */
	assert_true(len + 1024 < 1024 * 1024);
	int ret = dxl_replica_desc_decode(json, len, &d[1]);
	if (ret)
		fail_msg("%s", dxl_errmsg());
	free(json);
	assert_int_equal(d[1].nshards, DXL_REPLICA_MAX_SHARDS);
	for (uint32_t i = 0; i < DXL_REPLICA_MAX_SHARDS; i++) {
		assert_int_equal(d[1].shards[i].ntables, DXL_REPLICA_MAX_TABLES);
		for (uint32_t k = 0; k < DXL_REPLICA_MAX_TABLES; k++)
			expect_same_table(&d[0].shards[i].tables[k], &d[1].shards[i].tables[k]);
	}
	/* encode refuses more tables than the limit */
	d[0].shards[3].ntables = DXL_REPLICA_MAX_TABLES + 1;
	assert_int_equal(dxl_replica_desc_encode(&d[0], &json), DXL_E_INVAL);
	free(d);
}

static void test_parse_tables(void **state)
{
	(void)state;
	struct dxl_table_schema t[DXL_REPLICA_MAX_TABLES];
	uint32_t n = 99;
	assert_int_equal(dxl_replica_parse_tables("", t, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(dxl_replica_parse_tables("1:64:100000,2:128:5K,7:4000:1M", t, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(t[0].id, 1);
	assert_int_equal(t[0].value_size, 64);
	assert_int_equal(t[0].capacity, 100000);
	assert_int_equal(t[1].capacity, 5 * 1024);
	assert_int_equal(t[2].id, 7);
	assert_int_equal(t[2].value_size, 4000);
	assert_int_equal(t[2].capacity, 1024 * 1024);
	static const char *const bad[] = {
		"1:64", "1:64:", "1:64:10,", "1:64:10;2:8:8", "x:1:1", "1:0:10",
		"1:4001:10", "1:8:0", "1:8:2G", "1:8:10,1:8:10", "-1:8:8",
		"4294967296:8:8", "1:8:8x",
		"1:8:8,2:8:8,3:8:8,4:8:8,5:8:8,6:8:8,7:8:8,8:8:8,9:8:8,10:8:8,"
		"11:8:8,12:8:8,13:8:8,14:8:8,15:8:8,16:8:8,17:8:8",
	};
	for (unsigned i = 0; i < DXL_ARRAY_SIZE(bad); i++) {
		int ret = dxl_replica_parse_tables(bad[i], t, &n);
		if (ret != DXL_E_INVAL)
			fail_msg("'%s' accepted", bad[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_old_descriptor),
		cmocka_unit_test(test_strict),
		cmocka_unit_test(test_full_size),
		cmocka_unit_test(test_parse_tables),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
