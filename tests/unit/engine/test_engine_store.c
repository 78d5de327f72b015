/* test_engine_store.c -- the record store: create/open/reopen, crashes, torn slots, bad input, locks, registration, apply (the replay of a window: tests/unit/recovery/test_replay.c) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/engine.h"
#include "dxl/fabric.h"
#include "dxl/log.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/log_replica.h"

/* table 7: 100-byte values (192-byte slots) x 16; table 9: 4000 x 4 */
static const struct dxl_table_schema TABLES[] = {
	{.id = 7, .value_size = 100, .capacity = 16},
	{.id = 9, .value_size = 4000, .capacity = 4},
};
#define T7_OFF 4096ull   /* data-area offsets of the tables' slots */
#define T9_OFF 8192ull
#define DATA_BYTES (4096ull + 4096 + 20480)

static const struct dxl_region_id ID = {.cluster = "t", .node_id = 1};

struct fx {
	char dir[128];
	char path[256];
	struct dxl_store *s;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/dxl-test-store-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/store", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	dxl_store_close(&f->s);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	int rc = system(cmd);
	free(f);
	return rc;
}

static void create(struct fx *f, enum dxl_lock_mode mode)
{
	struct dxl_store_cfg cfg;
	dxl_store_cfg_init(&cfg);
	cfg.lock_mode = mode;
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_PROCESS, &ID, 3, TABLES,
					  2, &cfg, &f->s), 0);
}

static int reopen(struct fx *f)
{
	dxl_store_close(&f->s);
	return dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, NULL, &f->s);
}

static void val(uint8_t *v, uint32_t len, uint64_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		v[i] = (uint8_t)(seed * 29 + i * 5 + 3);
}

/* the record of key in table: its fields and value; asserts it is there */
static void expect(struct dxl_store *s, uint32_t table, uint64_t key,
		   uint64_t ts, uint32_t len, uint64_t seed, struct dxl_record *out)
{
	uint64_t slot;
	assert_int_equal(dxl_store_find(s, table, key, &slot), 0);
	uint8_t v[4096], want[4096];
	struct dxl_record r;
	assert_int_equal(dxl_store_read(s, table, slot, &r, v, sizeof(v)), 0);
	assert_true(r.live);
	assert_int_equal(r.key, key);
	assert_int_equal(r.ts, ts);
	assert_int_equal(r.len, len);
	val(want, len, seed);
	assert_memory_equal(v, want, len);
	assert_true(r.inc > 0);
	assert_int_equal(r.version % 2, 0);
	if (out)
		*out = r;
}

static uint64_t ins(struct dxl_store *s, uint32_t table, uint64_t key,
		    uint64_t ts, uint32_t len, uint64_t seed)
{
	uint8_t v[4096];
	val(v, len, seed);
	uint64_t slot, ver;
	assert_int_equal(dxl_store_insert(s, table, key, ts, v, len, &slot, &ver), 0);
	return slot;
}

static struct dxl_store_stats stats(struct dxl_store *s, uint32_t table)
{
	struct dxl_store_stats st;
	assert_int_equal(dxl_store_stats(s, table, &st), 0);
	return st;
}

static void test_create_insert_reopen(void **state)
{
	struct fx *f = *state;
	create(f, DXL_LOCKS_CPU);
	assert_int_equal(dxl_store_shard(f->s), 3);
	assert_int_equal(dxl_store_ntables(f->s), 2);
	struct dxl_table_schema sc;
	assert_int_equal(dxl_store_schema(f->s, 9, &sc), 0);
	assert_int_equal(sc.value_size, 4000);
	assert_int_equal(sc.capacity, 4);
	assert_int_equal(dxl_store_table_at(f->s, 0, &sc), 0);
	assert_int_equal(sc.id, 7);
	assert_int_equal(dxl_store_table_at(f->s, 2, &sc), DXL_E_NOENT);
	assert_int_equal(dxl_store_schema(f->s, 8, &sc), DXL_E_NOENT);
	assert_int_equal(dxl_store_bytes(TABLES, 2), DATA_BYTES);
	assert_int_equal(dxl_region_data_size(dxl_store_region(f->s)), DATA_BYTES);
	assert_int_equal(dxl_region_id(dxl_store_region(f->s))->kind, DXL_REGION_STORE);
	struct dxl_store_stats st = stats(f->s, UINT32_MAX);
	assert_int_equal(st.live, 0);
	assert_int_equal(st.free, 20);

	/* first in, first out: slots in order */
	for (uint64_t k = 0; k < 5; k++)
		assert_int_equal(ins(f->s, 7, 100 + k, 10 + k, 100, k), k);
	assert_int_equal(ins(f->s, 9, 1, 50, 4000, 9), 0);
	assert_int_equal(ins(f->s, 9, 2, 51, 17, 10), 1);
	/* update 101 under its lock, delete 102 */
	uint64_t own = DXL_LOCK_OWNER(5, 1);
	assert_int_equal(dxl_store_lock(f->s, 7, 1, own, NULL), 0);
	uint8_t v[100];
	val(v, 60, 77);
	uint64_t ver;
	assert_int_equal(dxl_store_update(f->s, 7, 1, own, 99, v, 60, &ver), 0);
	assert_int_equal(dxl_store_unlock(f->s, 7, 1, own), 0);
	assert_int_equal(dxl_store_lock(f->s, 7, 2, own, NULL), 0);
	assert_int_equal(dxl_store_delete(f->s, 7, 2, own, 98, NULL), 0);
	assert_int_equal(dxl_store_unlock(f->s, 7, 2, own), 0);
	assert_int_equal(dxl_store_find(f->s, 7, 102, NULL), DXL_E_NOENT);
	struct dxl_record r;
	expect(f->s, 7, 101, 99, 60, 77, &r);
	assert_int_equal(r.version, ver);
	st = stats(f->s, 7);
	assert_int_equal(st.live, 4);
	assert_int_equal(st.free, 12);
	/* the deleted slot reads as a free record with a new incarnation */
	assert_int_equal(dxl_store_read(f->s, 7, 2, &r, NULL, 0), 0);
	assert_false(r.live);
	assert_int_equal(r.inc, 2);
	assert_int_equal(r.key, 102);

	assert_int_equal(reopen(f), 0);
	st = stats(f->s, UINT32_MAX);
	assert_int_equal(st.live, 6);
	assert_int_equal(st.free, 14);
	assert_int_equal(st.torn_at_open, 0);
	for (uint64_t k = 0; k < 5; k++)
		if (k != 1 && k != 2)
			expect(f->s, 7, 100 + k, 10 + k, 100, k, NULL);
	expect(f->s, 7, 101, 99, 60, 77, NULL);
	expect(f->s, 9, 1, 50, 4000, 9, NULL);
	expect(f->s, 9, 2, 51, 17, 10, NULL);
	assert_int_equal(dxl_store_find(f->s, 7, 102, NULL), DXL_E_NOENT);
	/* the free list rebuilt in slot order: slot 2 is reused first; it
	 * keeps the incarnation the delete gave it */
	assert_int_equal(ins(f->s, 7, 200, 300, 1, 1), 2);
	assert_int_equal(dxl_store_read(f->s, 7, 2, &r, NULL, 0), 0);
	assert_int_equal(r.inc, 2);
	assert_int_equal(ins(f->s, 7, 201, 301, 1, 1), 5);
}

/* msync durability: the same operations, persisted with msync */
static void test_msync_mode(void **state)
{
	struct fx *f = *state;
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_MSYNC, &ID, 3, TABLES, 2,
					  NULL, &f->s), 0);
	ins(f->s, 7, 1, 10, 100, 1);
	ins(f->s, 9, 2, 11, 3000, 2);
	uint64_t slot;
	assert_int_equal(dxl_store_find(f->s, 9, 2, &slot), 0);
	assert_int_equal(dxl_store_lock(f->s, 9, slot, 4, NULL), 0);
	uint8_t v[4000];
	val(v, 4000, 3);
	assert_int_equal(dxl_store_update(f->s, 9, slot, 4, 12, v, 4000, NULL), 0);
	assert_int_equal(dxl_store_unlock(f->s, 9, slot, 4), 0);
	dxl_store_close(&f->s);
	assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, NULL, &f->s),
			 DXL_E_CONFIG);
	assert_int_equal(dxl_store_open(f->path, DXL_DUR_MSYNC, &ID, NULL, &f->s), 0);
	expect(f->s, 7, 1, 10, 100, 1, NULL);
	expect(f->s, 9, 2, 12, 4000, 3, NULL);
}

/* a crash: the child writes and is killed without closing anything */
static void test_crash_without_close(void **state)
{
	struct fx *f = *state;
	create(f, DXL_LOCKS_CPU);
	dxl_store_close(&f->s);
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct dxl_store *s;
		if (dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, NULL, &s))
			_exit(2);
		uint8_t v[100];
		for (uint64_t k = 0; k < 10; k++) {
			val(v, 100, k);
			if (dxl_store_insert(s, 7, k, 1000 + k, v, 100, NULL, NULL))
				_exit(3);
		}
		uint64_t slot;
		if (dxl_store_find(s, 7, 4, &slot) ||
		    dxl_store_lock(s, 7, slot, 1, NULL) ||
		    dxl_store_delete(s, 7, slot, 1, 2000, NULL))
			_exit(4);
		if (write(p[1], "k", 1) != 1)
			_exit(5);
		for (;;)
			pause(); /* killed here, store open */
	}
	close(p[1]);
	char c;
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	kill(pid, SIGKILL);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, NULL, &f->s), 0);
	struct dxl_store_stats st = stats(f->s, 7);
	assert_int_equal(st.live, 9);
	assert_int_equal(st.free, 7);
	assert_int_equal(st.torn_at_open, 0);
	for (uint64_t k = 0; k < 10; k++)
		if (k != 4)
			expect(f->s, 7, k, 1000 + k, 100, k, NULL);
	assert_int_equal(dxl_store_find(f->s, 7, 4, NULL), DXL_E_NOENT);
}

/* write len bytes at data-area offset off of the store file */
static void poke(const char *path, uint64_t off, const void *b, size_t len)
{
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, b, len, (off_t)(DXL_REGION_HDR_SIZE + off)),
			 (ssize_t)len);
	close(fd);
}

static void test_torn_slots_at_open(void **state)
{
	struct fx *f = *state;
	create(f, DXL_LOCKS_CPU);
	ins(f->s, 7, 1, 10, 100, 1);
	ins(f->s, 7, 2, 11, 100, 2);
	ins(f->s, 7, 3, 12, 100, 3);
	struct dxl_record r2;
	expect(f->s, 7, 2, 11, 100, 2, &r2);
	dxl_store_close(&f->s);
	/* slot 0 (key 1): line 2's stamp from another write (cut update);
	 * slot 1 (key 2): line 0 odd (cut while being written);
	 * slot 2 (key 3): cut delete -- flags say free, a stamp disagrees */
	uint64_t st = 1000;
	poke(f->path, T7_OFF + 0 * 192 + 128, &st, 8);
	uint64_t odd = r2.version + 1;
	poke(f->path, T7_OFF + 1 * 192, &odd, 8);
	uint64_t inclen = 1; /* incarnation 1, not live, length 0 */
	poke(f->path, T7_OFF + 2 * 192 + 24, &inclen, 8);
	poke(f->path, T7_OFF + 2 * 192 + 64, &st, 8);

	assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, NULL, &f->s), 0);
	struct dxl_store_stats s = stats(f->s, 7);
	assert_int_equal(s.torn_at_open, 3);
	assert_int_equal(s.torn, 2);
	assert_int_equal(s.live, 0);
	assert_int_equal(s.free, 14);
	/* keys 1 and 2 stay reserved for their torn slots: found, not readable */
	uint64_t slot;
	assert_int_equal(dxl_store_find(f->s, 7, 1, &slot), 0);
	assert_int_equal(slot, 0);
	struct dxl_record r;
	assert_int_equal(dxl_store_read(f->s, 7, 0, &r, NULL, 0), DXL_E_AGAIN);
	assert_non_null(strstr(dxl_errmsg(), "torn"));
	assert_int_equal(dxl_store_read(f->s, 7, 1, &r, NULL, 0), DXL_E_AGAIN);
	assert_int_equal(dxl_store_insert(f->s, 7, 1, 1, NULL, 0, NULL, NULL),
			 DXL_E_EXIST);
	assert_non_null(strstr(dxl_errmsg(), "torn"));
	assert_int_equal(dxl_store_lock(f->s, 7, 0, 9, NULL), 0);
	assert_int_equal(dxl_store_update(f->s, 7, 0, 9, 1, NULL, 0, NULL),
			 DXL_E_AGAIN);
	assert_int_equal(dxl_store_unlock(f->s, 7, 0, 9), 0);
	/* key 3's cut delete: gone */
	assert_int_equal(dxl_store_find(f->s, 7, 3, NULL), DXL_E_NOENT);
	/* the replay rewrites torn records whatever their version says */
	uint8_t v[100];
	val(v, 100, 21);
	assert_int_equal(dxl_store_apply(f->s, 7, 1, DXL_WS_UPDATE, 4, 20, v, 100), 1);
	assert_int_equal(dxl_store_apply(f->s, 7, 2, DXL_WS_DELETE, r2.version + 2,
					 21, NULL, 0), 1);
	expect(f->s, 7, 1, 20, 100, 21, NULL);
	assert_int_equal(dxl_store_find(f->s, 7, 2, NULL), DXL_E_NOENT);
	s = stats(f->s, 7);
	assert_int_equal(s.torn, 0);
	assert_int_equal(s.live, 1);
	assert_int_equal(s.free, 15);
	assert_int_equal(reopen(f), 0);
	s = stats(f->s, 7);
	assert_int_equal(s.torn_at_open, 0);
	assert_int_equal(s.live, 1);
	/* the only tombstone is key 2's, which the replay wrote: the repair of
	 * key 3's cut free slot made no tombstone (a version the repair made
	 * up, at timestamp 0, that no other replica has); the log's replay is
	 * what recreates a cut delete's tombstone */
	assert_int_equal(s.tombstones, 1);
	struct dxl_record r3;
	assert_int_equal(dxl_store_read(f->s, 7, 2, &r3, NULL, 0), 0);
	assert_false(r3.live);
	assert_int_equal(r3.inc, 0);
}

static void snapshot(struct dxl_store *s, uint8_t *buf)
{
	memcpy(buf, dxl_region_data(dxl_store_region(s)), DATA_BYTES);
}

static void test_bad_operations_change_nothing(void **state)
{
	struct fx *f = *state;
	create(f, DXL_LOCKS_CPU);
	for (uint64_t k = 0; k < 4; k++)
		ins(f->s, 9, k, 1, 10, k);
	ins(f->s, 7, 5, 1, 10, 5);
	static uint8_t before[DATA_BYTES], after[DATA_BYTES];
	snapshot(f->s, before);
	struct dxl_store_stats s0 = stats(f->s, UINT32_MAX);
	uint8_t v[4096] = {0};
	uint64_t own = 77;
	/* unknown table */
	assert_int_equal(dxl_store_insert(f->s, 8, 1, 1, v, 1, NULL, NULL), DXL_E_NOENT);
	assert_non_null(strstr(dxl_errmsg(), "no table 8"));
	assert_int_equal(dxl_store_update(f->s, 8, 0, own, 1, v, 1, NULL), DXL_E_NOENT);
	assert_int_equal(dxl_store_delete(f->s, 8, 0, own, 1, NULL), DXL_E_NOENT);
	assert_int_equal(dxl_store_apply(f->s, 8, 0, DXL_WS_UPDATE, 100, 1, v, 1),
			 DXL_E_NOENT);
	assert_int_equal(dxl_store_find(f->s, 8, 0, NULL), DXL_E_NOENT);
	assert_int_equal(dxl_store_lock(f->s, 8, 0, own, NULL), DXL_E_NOENT);
	assert_null(dxl_store_slot_ptr(f->s, 8, 0));
	/* value larger than the schema's */
	assert_int_equal(dxl_store_insert(f->s, 7, 6, 1, v, 101, NULL, NULL),
			 DXL_E_TOOBIG);
	assert_int_equal(dxl_store_apply(f->s, 9, 9, DXL_WS_INSERT, 100, 1, v, 4001),
			 DXL_E_TOOBIG);
	assert_int_equal(dxl_store_insert(f->s, 7, 6, 1, NULL, 5, NULL, NULL),
			 DXL_E_INVAL);
	/* capacity exhausted */
	assert_int_equal(dxl_store_insert(f->s, 9, 10, 1, v, 1, NULL, NULL), DXL_E_FULL);
	assert_non_null(strstr(dxl_errmsg(), "all 4 slots"));
	assert_int_equal(dxl_store_apply(f->s, 9, 10, DXL_WS_INSERT, 100, 1, v, 1),
			 DXL_E_FULL);
	/* duplicate key */
	assert_int_equal(dxl_store_insert(f->s, 7, 5, 1, v, 1, NULL, NULL), DXL_E_EXIST);
	/* writes without the lock, with another's lock, on a free slot, out of range */
	uint64_t slot;
	assert_int_equal(dxl_store_find(f->s, 7, 5, &slot), 0);
	assert_int_equal(dxl_store_update(f->s, 7, slot, own, 1, v, 1, NULL),
			 DXL_E_STATE);
	assert_non_null(strstr(dxl_errmsg(), "without the lock"));
	assert_int_equal(dxl_store_update(f->s, 7, slot, 0, 1, v, 1, NULL),
			 DXL_E_STATE);
	assert_int_equal(dxl_store_lock(f->s, 7, slot, own + 1, NULL), 0);
	assert_int_equal(dxl_store_update(f->s, 7, slot, own, 1, v, 1, NULL),
			 DXL_E_STATE);
	assert_int_equal(dxl_store_delete(f->s, 7, slot, own, 1, NULL), DXL_E_STATE);
	assert_int_equal(dxl_store_unlock(f->s, 7, slot, own), DXL_E_STATE);
	assert_int_equal(dxl_store_unlock(f->s, 7, slot, own + 1), 0);
	assert_int_equal(dxl_store_lock(f->s, 7, slot + 1, own, NULL), 0);
	assert_int_equal(dxl_store_update(f->s, 7, slot + 1, own, 1, v, 1, NULL),
			 DXL_E_NOENT);
	assert_int_equal(dxl_store_delete(f->s, 7, slot + 1, own, 1, NULL), DXL_E_NOENT);
	assert_int_equal(dxl_store_unlock(f->s, 7, slot + 1, own), 0);
	assert_int_equal(dxl_store_update(f->s, 7, 16, own, 1, v, 1, NULL), DXL_E_NOENT);
	assert_int_equal(dxl_store_lock(f->s, 7, 16, own, NULL), DXL_E_NOENT);
	assert_int_equal(dxl_store_lock(f->s, 7, 0, 0, NULL), DXL_E_INVAL);
	struct dxl_record r;
	assert_int_equal(dxl_store_read(f->s, 7, 16, &r, NULL, 0), DXL_E_NOENT);
	/* bad apply arguments */
	assert_int_equal(dxl_store_apply(f->s, 7, 5, DXL_WS_UPDATE, 101, 1, v, 1),
			 DXL_E_INVAL);
	assert_int_equal(dxl_store_apply(f->s, 7, 5, DXL_WS_UPDATE, 0, 1, v, 1),
			 DXL_E_INVAL);
	assert_int_equal(dxl_store_apply(f->s, 7, 5, (enum dxl_ws_op)0, 100, 1, v, 1),
			 DXL_E_INVAL);
	assert_int_equal(dxl_store_apply_writeset(f->s, v, 40, 1, NULL, NULL, NULL),
			 DXL_E_CORRUPT);

	snapshot(f->s, after);
	assert_memory_equal(before, after, DATA_BYTES);
	struct dxl_store_stats s1 = stats(f->s, UINT32_MAX);
	assert_memory_equal(&s0, &s1, sizeof(s0));
	assert_int_equal(dxl_store_lock_word(f->s, 7, slot), 0);
	assert_int_equal(dxl_store_stats(f->s, 8, &s1), DXL_E_NOENT);
}

static int file_equals(const char *path, const uint8_t *b, size_t len)
{
	static uint8_t cur[DXL_REGION_HDR_SIZE + DATA_BYTES + 4096];
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	ssize_t n = read(fd, cur, sizeof(cur));
	close(fd);
	return n == (ssize_t)len && memcmp(cur, b, len) == 0;
}

static void test_bad_files(void **state)
{
	struct fx *f = *state;
	struct dxl_store *s = NULL;
	/* bad schemas: nothing created */
	struct dxl_table_schema bad[DXL_STORE_MAX_TABLES + 1];
	for (unsigned i = 0; i < DXL_ARRAY_SIZE(bad); i++)
		bad[i] = (struct dxl_table_schema){.id = i, .value_size = 8, .capacity = 1};
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_PROCESS, &ID, 0, bad,
					  DXL_STORE_MAX_TABLES + 1, NULL, &s), DXL_E_INVAL);
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_PROCESS, &ID, 0, bad, 0,
					  NULL, &s), DXL_E_INVAL);
	bad[1].id = 0;
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_PROCESS, &ID, 0, bad, 2,
					  NULL, &s), DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "twice"));
	bad[1] = (struct dxl_table_schema){.id = 1, .value_size = 0, .capacity = 1};
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_PROCESS, &ID, 0, bad, 2,
					  NULL, &s), DXL_E_INVAL);
	bad[1].value_size = DXL_ENGINE_MAX_VALUE + 1;
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_PROCESS, &ID, 0, bad, 2,
					  NULL, &s), DXL_E_INVAL);
	bad[1].value_size = 1;
	bad[1].capacity = 0;
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_PROCESS, &ID, 0, bad, 2,
					  NULL, &s), DXL_E_INVAL);
	bad[1].capacity = DXL_TABLE_MAX_CAPACITY + 1;
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_PROCESS, &ID, 0, bad, 2,
					  NULL, &s), DXL_E_INVAL);
	struct dxl_store_cfg cfg;
	dxl_store_cfg_init(&cfg);
	cfg.lock_mode = (enum dxl_lock_mode)5;
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_PROCESS, &ID, 0, TABLES,
					  2, &cfg, &s), DXL_E_INVAL);
	assert_int_equal(access(f->path, F_OK), -1);
	assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, NULL, &s),
			 DXL_E_NOENT);

	create(f, DXL_LOCKS_CPU);
	ins(f->s, 7, 1, 1, 100, 1);
	ins(f->s, 7, 2, 1, 100, 2);
	dxl_store_close(&f->s);
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_PROCESS, &ID, 0, TABLES,
					  2, NULL, &s), DXL_E_EXIST);
	static uint8_t good[DXL_REGION_HDR_SIZE + DATA_BYTES];
	int fd = open(f->path, O_RDONLY);
	assert_int_equal(read(fd, good, sizeof(good)), (ssize_t)sizeof(good));
	close(fd);
	/* another cluster, another durability, no expectation but another kind */
	struct dxl_region_id other = ID;
	other.node_id = 2;
	assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, &other, NULL, &s),
			 DXL_E_STALE);
	assert_int_equal(dxl_store_open(f->path, DXL_DUR_MSYNC, &ID, NULL, &s),
			 DXL_E_CONFIG);
	assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, NULL, NULL, &s), 0);
	dxl_store_close(&s);
	char logpath[300];
	snprintf(logpath, sizeof(logpath), "%s.log", f->path);
	struct dxl_region *lr;
	struct dxl_region_id lid = ID;
	lid.kind = DXL_REGION_LOG;
	assert_int_equal(dxl_region_create(logpath, 8192, DXL_DUR_PROCESS, &lid, &lr), 0);
	dxl_region_close(&lr);
	assert_int_equal(dxl_store_open(logpath, DXL_DUR_PROCESS, &ID, NULL, &s),
			 DXL_E_STALE);
	assert_int_equal(dxl_store_open(logpath, DXL_DUR_PROCESS, NULL, NULL, &s),
			 DXL_E_STALE);
	assert_non_null(strstr(dxl_errmsg(), "not a record store"));
	unlink(logpath);

	/* truncated */
	assert_int_equal(truncate(f->path, DXL_REGION_HDR_SIZE + DATA_BYTES - 4096), 0);
	assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, NULL, &s),
			 DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "truncated"));
	assert_int_equal(truncate(f->path, 100), 0);
	assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, NULL, &s),
			 DXL_E_CORRUPT);
	/* each damaged catalog or slot: refused, the file unchanged */
	struct {
		uint64_t off; /* data-area offset */
		uint8_t x;
		const char *msg;
	} damage[] = {
		{0, 0x01, "bad magic"},
		{8, 0x01, "checksum"},           /* format (under the CRC) */
		{16, 0x01, "checksum"},          /* ntables */
		{20, 0x01, "checksum"},          /* the CRC itself */
		{32 + 4, 0x01, "checksum"},      /* table 7's value size */
		{T7_OFF + 24 + 4 + 3, 0x40, "flag"}, /* slot 0: unknown flag bit */
		{T7_OFF + 24 + 4, 0xff, "length"},   /* slot 0: length 155 */
		{T7_OFF + 191, 0x01, "past the length"},
	};
	for (unsigned i = 0; i < DXL_ARRAY_SIZE(damage); i++) {
		uint8_t *img = malloc(sizeof(good));
		memcpy(img, good, sizeof(good));
		img[DXL_REGION_HDR_SIZE + damage[i].off] ^= damage[i].x;
		fd = open(f->path, O_WRONLY | O_TRUNC);
		assert_int_equal(write(fd, img, sizeof(good)), (ssize_t)sizeof(good));
		close(fd);
		assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, NULL, &s),
				 DXL_E_CORRUPT);
		if (!strstr(dxl_errmsg(), damage[i].msg))
			fail_msg("damage %u: '%s' does not say '%s'", i, dxl_errmsg(),
				 damage[i].msg);
		assert_true(file_equals(f->path, img, sizeof(good)));
		free(img);
	}
	/* a catalog whose checksum is right but that disagrees with the file */
	{
		uint8_t *img = malloc(sizeof(good));
		memcpy(img, good, sizeof(good));
		uint8_t *cat = img + DXL_REGION_HDR_SIZE;
		cat[32 + 16] = 40; /* table 7's capacity 16 -> 40: table 9 would move */
		memset(cat + 20, 0, 4);
		uint32_t crc = dxl_crc32c(0, cat, 32 + 2 * 32);
		memcpy(cat + 20, &crc, 4);
		fd = open(f->path, O_WRONLY | O_TRUNC);
		assert_int_equal(write(fd, img, sizeof(good)), (ssize_t)sizeof(good));
		close(fd);
		assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, NULL, &s),
				 DXL_E_CORRUPT);
		free(img);
	}
	/* the same key live in two consistent slots */
	{
		uint8_t *img = malloc(sizeof(good));
		memcpy(img, good, sizeof(good));
		uint64_t key1 = 1;
		memcpy(img + DXL_REGION_HDR_SIZE + T7_OFF + 192 + 16, &key1, 8);
		fd = open(f->path, O_WRONLY | O_TRUNC);
		assert_int_equal(write(fd, img, sizeof(good)), (ssize_t)sizeof(good));
		close(fd);
		assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, NULL, &s),
				 DXL_E_CORRUPT);
		assert_non_null(strstr(dxl_errmsg(), "key 1 is live in slot 0 and slot 1"));
		free(img);
	}
	/* and the intact file still opens */
	fd = open(f->path, O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, good, sizeof(good)), (ssize_t)sizeof(good));
	close(fd);
	assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, NULL, &f->s), 0);
	expect(f->s, 7, 2, 1, 100, 2, NULL);
}

static void test_versions_grow(void **state)
{
	struct fx *f = *state;
	create(f, DXL_LOCKS_CPU);
	uint8_t v[100] = {1};
	uint64_t s1, v1, v2, v3, v4, v5, own = 3;
	assert_int_equal(dxl_store_insert(f->s, 7, 1, 1, v, 1, &s1, &v1), 0);
	assert_int_equal(v1, 2);
	assert_int_equal(dxl_store_lock(f->s, 7, s1, own, NULL), 0);
	assert_int_equal(dxl_store_update(f->s, 7, s1, own, 2, v, 1, &v2), 0);
	assert_int_equal(dxl_store_update(f->s, 7, s1, own, 3, v, 1, &v3), 0);
	assert_int_equal(v2, 4);
	assert_int_equal(v3, 6);
	/* another key's insert is above every version of the table */
	uint64_t s2;
	assert_int_equal(dxl_store_insert(f->s, 7, 2, 4, v, 1, &s2, &v4), 0);
	assert_int_equal(v4, 8);
	assert_int_equal(dxl_store_delete(f->s, 7, s1, own, 5, &v5), 0);
	assert_int_equal(v5, 8);
	assert_int_equal(dxl_store_unlock(f->s, 7, s1, own), 0);
	/* key 1 again: its new life starts above its deleted one, whatever slot */
	uint64_t s3, v6;
	assert_int_equal(dxl_store_insert(f->s, 7, 1, 6, v, 1, &s3, &v6), 0);
	assert_true(v6 > v5);
	assert_int_not_equal(s3, s1); /* first in, first out: the old slot waits */
	/* and after a restart (the largest version comes from the scan) */
	assert_int_equal(reopen(f), 0);
	uint64_t v7;
	assert_int_equal(dxl_store_insert(f->s, 7, 3, 7, v, 1, NULL, &v7), 0);
	assert_true(v7 > v6);
}

static void test_cpu_locks(void **state)
{
	struct fx *f = *state;
	create(f, DXL_LOCKS_CPU);
	assert_int_equal(dxl_store_lock_mode(f->s), DXL_LOCKS_CPU);
	uint64_t a = DXL_LOCK_OWNER(1, 5), b = DXL_LOCK_OWNER(2, 5), h = 0;
	assert_int_equal(a >> 48, 1);
	assert_int_equal(dxl_store_lock(f->s, 7, 3, a, NULL), 0);
	assert_int_equal(dxl_store_lock_word(f->s, 7, 3), a);
	assert_int_equal(dxl_store_lock(f->s, 7, 3, b, &h), DXL_E_BUSY);
	assert_int_equal(h, a);
	assert_int_equal(dxl_store_lock(f->s, 7, 3, a, &h), DXL_E_BUSY);
	assert_int_equal(dxl_store_unlock(f->s, 7, 3, b), DXL_E_STATE);
	assert_int_equal(dxl_store_lock_word(f->s, 7, 3), a);
	assert_int_equal(dxl_store_unlock(f->s, 7, 3, a), 0);
	assert_int_equal(dxl_store_unlock(f->s, 7, 3, a), DXL_E_STATE);
	assert_int_equal(dxl_store_lock(f->s, 9, 3, b, NULL), 0);
	assert_int_equal(dxl_store_lock_word(f->s, 9, 3), b);
	assert_int_equal(dxl_store_lock_word(f->s, 7, 3), 0);
	assert_int_equal(dxl_store_lock_word(f->s, 9, 4), 0); /* out of range */
	/* lock words are DRAM: free after a restart */
	assert_int_equal(reopen(f), 0);
	assert_int_equal(dxl_store_lock_word(f->s, 9, 3), 0);
}

/* ---- registration and the NIC-owned mode ------------------------------------------- */

struct net {
	struct dxl_fabric *f;
	struct dxl_ctx *server, *c;
	struct dxl_qp *qp;
	uint8_t *buf;
	struct dxl_mr *lmr;
};

static int net_up(struct net *n)
{
	struct dxl_fabric_cfg cfg;
	dxlt_fabric_cfg_from_env(&cfg);
	int ret = dxl_fabric_new(&cfg, &n->f);
	if (dxl_test_nodev_skip(ret))
		return 0;
	assert_int_equal(ret, 0);
	assert_int_equal(dxl_ctx_new(n->f, 0, &n->server), 0);
	assert_int_equal(dxl_ctx_new(n->f, 1, &n->c), 0);
	assert_int_equal(dxl_qp_connect(n->c, dxl_fabric_addr(n->f), 0, &n->qp), 0);
	n->buf = aligned_alloc(4096, 16384);
	assert_int_equal(dxl_mr_reg(n->f, n->buf, 16384, DXL_MR_LOCAL_WRITE, &n->lmr), 0);
	return 1;
}

static void net_down(struct net *n)
{
	dxl_mr_dereg(&n->lmr);
	dxl_qp_delete(&n->qp);
	dxl_ctx_delete(&n->c);
	dxl_ctx_delete(&n->server);
	dxl_fabric_delete(&n->f);
	free(n->buf);
}

static void test_registration_and_nic_locks(void **state)
{
	struct fx *f = *state;
	dxlt_watchdog_arm(0, "test_registration_and_nic_locks");
	struct net n = {0};
	if (!net_up(&n))
		skip();
	create(f, DXL_LOCKS_NIC);
	uint64_t s0 = ins(f->s, 7, 11, 5, 100, 11);
	struct dxl_table_desc d;
	assert_int_equal(dxl_store_table_desc(f->s, 7, &d), DXL_E_STATE);
	assert_int_equal(dxl_store_register(f->s, n.f), 0);
	assert_int_equal(dxl_store_register(f->s, n.f), DXL_E_EXIST);
	assert_int_equal(dxl_store_table_desc(f->s, 8, &d), DXL_E_NOENT);
	assert_int_equal(dxl_store_table_desc(f->s, 7, &d), 0);
	assert_int_equal(d.id, 7);
	assert_int_equal(d.slot_size, 192);
	assert_int_equal(d.value_size, 100);
	assert_int_equal(d.capacity, 16);
	assert_int_equal(d.lock_mode, DXL_LOCKS_NIC);
	assert_int_equal(d.records.addr,
			 (uint64_t)(uintptr_t)dxl_region_data(dxl_store_region(f->s)) + T7_OFF);
	assert_int_equal(d.records.len, 16 * 192);
	assert_int_equal(d.locks.len, 16 * 8);
	struct dxl_table_desc d9;
	assert_int_equal(dxl_store_table_desc(f->s, 9, &d9), 0);
	assert_int_equal(d9.records.addr, d.records.addr - T7_OFF + T9_OFF);
	assert_int_equal(d9.locks.addr, d.locks.addr + 16 * 8);
	assert_int_equal(d9.locks.rkey, d.locks.rkey);

	/* a coordinator: READ the record, CAS its lock, write back, unlock */
	assert_int_equal(dxlt_read(n.c, n.qp, n.buf, dxl_mr_lkey(n.lmr),
				   d.records.addr + s0 * 192, d.records.rkey, 192),
			 DXL_WC_SUCCESS);
	struct dxl_record r;
	uint8_t v[100];
	assert_int_equal(dxl_record_read_check(n.buf, 192, &r, v, sizeof(v)), 0);
	assert_int_equal(r.key, 11);
	uint64_t own = DXL_LOCK_OWNER(4, 1);
	uint64_t *res = (uint64_t *)(void *)(n.buf + 8192);
	assert_int_equal(dxlt_cas(n.c, n.qp, res, dxl_mr_lkey(n.lmr),
				  d.locks.addr + 8 * s0, d.locks.rkey, 0, own),
			 DXL_WC_SUCCESS);
	assert_int_equal(*res, 0);
	assert_int_equal(dxl_store_lock_word(f->s, 7, s0), own);
	/* the CPU never changes NIC-owned lock words */
	assert_int_equal(dxl_store_lock(f->s, 7, s0, own, NULL), DXL_E_NOTSUP);
	assert_int_equal(dxl_store_unlock(f->s, 7, s0, own), DXL_E_NOTSUP);
	/* the owner's CPU applies an update for the lock holder (RPC mode) */
	val(v, 100, 12);
	uint64_t ver;
	assert_int_equal(dxl_store_update(f->s, 7, s0, own, 6, v, 100, &ver), 0);
	/* ...or the holder writes back one-sidedly (tcp places in order) */
	uint8_t *wb = n.buf + 4096;
	r.ts = 7;
	r.version = 0;
	r.len = 100;
	val(v, 100, 13);
	uint64_t nv;
	assert_int_equal(dxl_record_wb_build(wb, 192, ver, &r, v, &nv), 0);
	struct dxl_wr wr[7];
	assert_int_equal(dxl_record_wb_chain(wb, 192, dxl_mr_lkey(n.lmr),
					     d.records.addr + s0 * 192,
					     d.records.rkey, wr, 7), 7);
	wr[6].flags = DXL_WR_SIGNALED;
	wr[6].wr_id = 99;
	assert_int_equal(dxl_qp_post(n.qp, wr, NULL), 0);
	struct dxl_wc wc;
	assert_int_equal(dxlt_wait_wc(n.c, &wc, 1, -1), 1);
	assert_int_equal(wc.status, DXL_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 99);
	struct dxl_record r2;
	expect(f->s, 7, 11, 7, 100, 13, &r2);
	assert_int_equal(r2.version, nv);
	assert_int_equal(nv, ver + 2);
	/* a deleted slot whose lock is still held is not reused */
	assert_int_equal(dxl_store_delete(f->s, 7, s0, own, 8, NULL), 0);
	uint64_t s1 = ins(f->s, 7, 12, 9, 1, 1);
	assert_int_not_equal(s1, s0);
	assert_int_equal(dxlt_cas(n.c, n.qp, res, dxl_mr_lkey(n.lmr),
				  d.locks.addr + 8 * s0, d.locks.rkey, own, 0),
			 DXL_WC_SUCCESS);
	assert_int_equal(*res, own);
	assert_int_equal(dxl_store_lock_word(f->s, 7, s0), 0);
	/* a READ of a lock word works; a CAS into the records does not */
	assert_int_equal(dxlt_read(n.c, n.qp, n.buf, dxl_mr_lkey(n.lmr),
				   d.locks.addr, d.locks.rkey, 8), DXL_WC_SUCCESS);
	assert_int_not_equal(dxlt_cas(n.c, n.qp, res, dxl_mr_lkey(n.lmr),
				      d.records.addr, d.records.rkey, 0, 1),
			     DXL_WC_SUCCESS);
	dxl_store_close(&f->s); /* deregisters */
	net_down(&n);
	dxlt_watchdog_disarm();
}

/* ---- hooks --------------------------------------------------------------------------- */

struct hooks_seen {
	int inserts, removes, fail;
	uint64_t last_key, last_slot;
	uint32_t last_inc;
};

static int hook_insert(void *arg, uint32_t table, uint64_t key, uint64_t slot,
		       uint32_t inc)
{
	struct hooks_seen *h = arg;
	if (h->fail)
		return dxl_err_set(DXL_E_FULL, "index full (test)");
	h->inserts++;
	h->last_key = key;
	h->last_slot = slot;
	h->last_inc = inc;
	return 0;
}

static void hook_remove(void *arg, uint32_t table, uint64_t key, uint64_t slot)
{
	struct hooks_seen *h = arg;
	h->removes++;
	h->last_key = key;
	h->last_slot = slot;
}

static void test_hooks(void **state)
{
	struct fx *f = *state;
	struct hooks_seen h = {0};
	struct dxl_store_cfg cfg;
	dxl_store_cfg_init(&cfg);
	cfg.hooks = (struct dxl_store_hooks){.insert = hook_insert,
					     .remove = hook_remove, .arg = &h};
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_PROCESS, &ID, 3, TABLES,
					  2, &cfg, &f->s), 0);
	uint64_t s0 = ins(f->s, 7, 5, 1, 10, 1);
	assert_int_equal(h.inserts, 1);
	assert_int_equal(h.last_key, 5);
	assert_int_equal(h.last_slot, s0);
	assert_int_equal(h.last_inc, 1);
	static uint8_t before[DATA_BYTES], after[DATA_BYTES];
	snapshot(f->s, before);
	h.fail = 1;
	uint8_t v[10] = {0};
	assert_int_equal(dxl_store_insert(f->s, 7, 6, 1, v, 10, NULL, NULL), DXL_E_FULL);
	assert_non_null(strstr(dxl_errmsg(), "index full"));
	assert_int_equal(dxl_store_apply(f->s, 7, 6, DXL_WS_INSERT, 50, 1, v, 10),
			 DXL_E_FULL);
	snapshot(f->s, after);
	assert_memory_equal(before, after, DATA_BYTES);
	assert_int_equal(dxl_store_find(f->s, 7, 6, NULL), DXL_E_NOENT);
	assert_int_equal(stats(f->s, 7).free, 15);
	h.fail = 0;
	/* the slot the failed insert took is taken first again */
	assert_int_equal(ins(f->s, 7, 6, 1, 10, 1), 1);
	assert_int_equal(dxl_store_lock(f->s, 7, s0, 1, NULL), 0);
	assert_int_equal(dxl_store_delete(f->s, 7, s0, 1, 2, NULL), 0);
	assert_int_equal(h.removes, 1);
	assert_int_equal(h.last_key, 5);
	assert_int_equal(h.last_slot, s0);
	assert_int_equal(dxl_store_apply(f->s, 7, 6, DXL_WS_DELETE, 1000, 3, NULL, 0), 1);
	assert_int_equal(h.removes, 2);
	assert_int_equal(h.last_key, 6);
}

/* ---- applying the log ------------------------------------------------------------------ */

static void test_apply_idempotent(void **state)
{
	struct fx *f = *state;
	create(f, DXL_LOCKS_CPU);
	uint8_t v[100];
	val(v, 100, 1);
	assert_int_equal(dxl_store_apply(f->s, 7, 42, DXL_WS_INSERT, 10, 100, v, 100), 1);
	assert_int_equal(dxl_store_apply(f->s, 7, 42, DXL_WS_INSERT, 10, 100, v, 100), 0);
	struct dxl_record r;
	expect(f->s, 7, 42, 100, 100, 1, &r);
	assert_int_equal(r.version, 10); /* verbatim */
	static uint8_t before[DATA_BYTES], after[DATA_BYTES];
	snapshot(f->s, before);
	val(v, 100, 2);
	assert_int_equal(dxl_store_apply(f->s, 7, 42, DXL_WS_UPDATE, 8, 90, v, 100), 0);
	assert_int_equal(dxl_store_apply(f->s, 7, 42, DXL_WS_UPDATE, 10, 90, v, 100), 0);
	assert_int_equal(dxl_store_apply(f->s, 7, 42, DXL_WS_DELETE, 10, 90, NULL, 0), 0);
	snapshot(f->s, after);
	assert_memory_equal(before, after, DATA_BYTES); /* skips write nothing */
	assert_int_equal(dxl_store_apply(f->s, 7, 42, DXL_WS_UPDATE, 12, 110, v, 50), 1);
	expect(f->s, 7, 42, 110, 50, 2, &r);
	assert_int_equal(r.version, 12);
	assert_int_equal(dxl_store_apply(f->s, 7, 42, DXL_WS_UPDATE, 12, 110, v, 50), 0);
	/* an update of a key the replica does not have is a put */
	assert_int_equal(dxl_store_apply(f->s, 7, 43, DXL_WS_UPDATE, 6, 111, v, 50), 1);
	expect(f->s, 7, 43, 111, 50, 2, NULL);
	assert_int_equal(dxl_store_apply(f->s, 7, 42, DXL_WS_DELETE, 14, 120, NULL, 0), 1);
	assert_int_equal(dxl_store_find(f->s, 7, 42, NULL), DXL_E_NOENT);
	assert_int_equal(dxl_store_apply(f->s, 7, 42, DXL_WS_DELETE, 14, 120, NULL, 0), 0);
	/* a later delete moves the tombstone's version */
	assert_int_equal(dxl_store_apply(f->s, 7, 42, DXL_WS_DELETE, 16, 121, NULL, 0), 1);
	assert_int_equal(dxl_store_apply(f->s, 7, 42, DXL_WS_DELETE, 16, 121, NULL, 0), 0);
	/* the applied state survives a restart and applying again is a no-op */
	assert_int_equal(reopen(f), 0);
	expect(f->s, 7, 43, 111, 50, 2, NULL);
	assert_int_equal(dxl_store_apply(f->s, 7, 43, DXL_WS_UPDATE, 6, 111, v, 50), 0);
	assert_int_equal(stats(f->s, 7).live, 1);
}

/* issue 20: a delete applied before the writes it follows (out of commit
 * order) leaves a tombstone that keeps them out: the key stays deleted */
static void test_apply_out_of_order(void **state)
{
	struct fx *f = *state;
	struct dxl_store_cfg cfg;
	dxl_store_cfg_init(&cfg);
	cfg.keep_tombstones = true; /* reclaim_ts stays 0: every tombstone kept */
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_PROCESS, &ID, 3, TABLES, 2, &cfg,
					  &f->s), 0);
	uint8_t v[100];
	val(v, 100, 3);
	struct dxl_store_absence ab;
	/* insert (v2) then delete (v4), applied delete first */
	assert_int_equal(dxl_store_apply(f->s, 7, 50, DXL_WS_DELETE, 4, 200, NULL, 0), 1);
	assert_int_equal(dxl_store_apply(f->s, 7, 50, DXL_WS_INSERT, 2, 100, v, 100), 0);
	assert_int_equal(dxl_store_find(f->s, 7, 50, NULL), DXL_E_NOENT);
	assert_int_equal(dxl_store_absence(f->s, 7, 50, &ab), 0);
	assert_int_equal(ab.version, 4);
	assert_int_equal(ab.ts, 200);
	/* update (v4) then delete (v6) of a present key, delete first */
	assert_int_equal(dxl_store_apply(f->s, 7, 51, DXL_WS_INSERT, 2, 100, v, 100), 1);
	assert_int_equal(dxl_store_apply(f->s, 7, 51, DXL_WS_DELETE, 6, 300, NULL, 0), 1);
	assert_int_equal(dxl_store_apply(f->s, 7, 51, DXL_WS_UPDATE, 4, 250, v, 50), 0);
	assert_int_equal(dxl_store_find(f->s, 7, 51, NULL), DXL_E_NOENT);
	assert_int_equal(dxl_store_absence(f->s, 7, 51, &ab), 0);
	assert_int_equal(ab.version, 6);
	assert_int_equal(stats(f->s, 7).tombstones, 2);
	/* the tombstones survive a restart */
	dxl_store_close(&f->s);
	assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, &cfg, &f->s), 0);
	assert_int_equal(stats(f->s, 7).tombstones, 2);
	assert_int_equal(dxl_store_apply(f->s, 7, 51, DXL_WS_UPDATE, 4, 250, v, 50), 0);
	assert_int_equal(dxl_store_apply(f->s, 7, 50, DXL_WS_UPDATE, 2, 100, v, 50), 0);
	assert_int_equal(dxl_store_find(f->s, 7, 51, NULL), DXL_E_NOENT);
	/* a later insert replaces the tombstone */
	assert_int_equal(dxl_store_apply(f->s, 7, 51, DXL_WS_INSERT, 8, 400, v, 100), 1);
	expect(f->s, 7, 51, 400, 100, 3, NULL);
	assert_int_equal(dxl_store_absence(f->s, 7, 51, &ab), DXL_E_EXIST);
	assert_int_equal(stats(f->s, 7).tombstones, 1);
	assert_int_equal(stats(f->s, 7).live, 1);
	/* an owner's delete leaves one too; an insert of the key over it gets
	 * a larger version */
	uint64_t slot, ver;
	assert_int_equal(dxl_store_find(f->s, 7, 51, &slot), 0);
	assert_int_equal(dxl_store_lock(f->s, 7, slot, 5, NULL), 0);
	assert_int_equal(dxl_store_delete(f->s, 7, slot, 5, 500, &ver), 0);
	assert_int_equal(dxl_store_unlock(f->s, 7, slot, 5), 0);
	assert_int_equal(ver, 10);
	assert_int_equal(dxl_store_absence(f->s, 7, 51, &ab), 0);
	assert_int_equal(ab.slot, slot);
	assert_int_equal(ab.version, 10);
	assert_int_equal(ab.ts, 500);
	assert_int_equal(dxl_store_insert(f->s, 7, 51, 600, v, 10, &slot, &ver), 0);
	assert_true(ver > 10);
}

/* the same writes applied in any order end in the same store: random
 * histories of inserts, updates and deletes on a primary store, their
 * entries shuffled and applied to a fresh store */
static void test_apply_any_order_converges(void **state)
{
	struct fx *f = *state;
	create(f, DXL_LOCKS_CPU);
	char path[300];
	snprintf(path, sizeof(path), "%s/b", f->dir);
	enum { N = 240 };
	static struct {
		uint64_t key, version, ts;
		int op;
		uint8_t v[100];
		uint32_t len;
	} w[N];
	unsigned seed = 7;
	for (int round = 0; round < 20; round++) {
		struct dxl_store *b = NULL;
		struct dxl_store_cfg cfg;
		dxl_store_cfg_init(&cfg);
		cfg.keep_tombstones = true;
		unlink(path);
		assert_int_equal(dxl_store_create(path, DXL_DUR_PROCESS, &ID, 3, TABLES, 2, &cfg,
						  &b), 0);
		/* the primary: a fresh table 7 each round (keys 100*round..) */
		int n = 0;
		uint64_t base = 100 * (uint64_t)round, ts = 1000;
		for (int i = 0; i < N && n < N; i++) {
			uint64_t key = base + (uint64_t)rand_r(&seed) % 6, slot;
			w[n].key = key;
			w[n].ts = ++ts;
			w[n].len = 1 + (uint32_t)rand_r(&seed) % 100;
			val(w[n].v, w[n].len, ts);
			if (dxl_store_find(f->s, 7, key, &slot)) {
				if (dxl_store_insert(f->s, 7, key, ts, w[n].v, w[n].len, NULL,
						     &w[n].version))
					continue;
				w[n].op = DXL_WS_INSERT;
			} else {
				assert_int_equal(dxl_store_lock(f->s, 7, slot, 9, NULL), 0);
				if (rand_r(&seed) % 2) {
					assert_int_equal(dxl_store_delete(f->s, 7, slot, 9, ts,
									  &w[n].version), 0);
					w[n].op = DXL_WS_DELETE;
					w[n].len = 0;
				} else {
					assert_int_equal(dxl_store_update(f->s, 7, slot, 9, ts, w[n].v,
									  w[n].len, &w[n].version), 0);
					w[n].op = DXL_WS_UPDATE;
				}
				assert_int_equal(dxl_store_unlock(f->s, 7, slot, 9), 0);
			}
			n++;
		}
		/* shuffle, apply */
		for (int i = n - 1; i > 0; i--) {
			int j = rand_r(&seed) % (i + 1);
			__typeof__(w[0]) x = w[i];
			w[i] = w[j];
			w[j] = x;
		}
		for (int i = 0; i < n; i++)
			assert_true(dxl_store_apply(b, 7, w[i].key, (enum dxl_ws_op)w[i].op,
						    w[i].version, w[i].ts,
						    w[i].op == DXL_WS_DELETE ? NULL : w[i].v,
						    w[i].len) >= 0);
		for (uint64_t key = base; key < base + 6; key++) {
			uint64_t sa, sb;
			int fa = dxl_store_find(f->s, 7, key, &sa);
			int fb = dxl_store_find(b, 7, key, &sb);
			if (fa != fb)
				fail_msg("round %d key %llu: %s on the primary, %s after applying in another order",
					 round, (unsigned long long)key, fa ? "absent" : "present",
					 fb ? "absent" : "present");
			if (fa)
				continue;
			static uint8_t va[100], vb[100];
			struct dxl_record ra, rb;
			assert_int_equal(dxl_store_read(f->s, 7, sa, &ra, va, sizeof(va)), 0);
			assert_int_equal(dxl_store_read(b, 7, sb, &rb, vb, sizeof(vb)), 0);
			assert_int_equal(ra.version, rb.version);
			assert_int_equal(ra.len, rb.len);
			assert_memory_equal(va, vb, ra.len);
		}
		dxl_store_close(&b);
		/* the primary's table 7 is small: clear this round's keys */
		for (uint64_t key = base; key < base + 6; key++) {
			uint64_t slot, ver;
			if (dxl_store_find(f->s, 7, key, &slot))
				continue;
			assert_int_equal(dxl_store_lock(f->s, 7, slot, 9, NULL), 0);
			assert_int_equal(dxl_store_delete(f->s, 7, slot, 9, ts, &ver), 0);
			assert_int_equal(dxl_store_unlock(f->s, 7, slot, 9), 0);
		}
	}
}

/* keep_tombstones: a tombstone's slot is reused only once its timestamp is
 * below the bound; the key's absence then reports the floor */
static void test_tombstone_reclaim(void **state)
{
	struct fx *f = *state;
	struct dxl_store_cfg cfg;
	dxl_store_cfg_init(&cfg);
	cfg.keep_tombstones = true;
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_PROCESS, &ID, 3, TABLES, 2, &cfg,
					  &f->s), 0);
	for (uint64_t k = 0; k < 4; k++)
		ins(f->s, 9, k, 10, 8, k);
	uint64_t slot, ver;
	for (uint64_t k = 0; k < 2; k++) {
		assert_int_equal(dxl_store_find(f->s, 9, k, &slot), 0);
		assert_int_equal(dxl_store_lock(f->s, 9, slot, 3, NULL), 0);
		assert_int_equal(dxl_store_delete(f->s, 9, slot, 3, 100 * (k + 1), &ver), 0);
		assert_int_equal(dxl_store_unlock(f->s, 9, slot, 3), 0);
	}
	assert_int_equal(stats(f->s, 9).tombstones, 2);
	uint8_t v[8] = {0};
	/* both tombstones are still needed */
	assert_int_equal(dxl_store_insert(f->s, 9, 10, 300, v, 8, NULL, NULL), DXL_E_FULL);
	assert_non_null(strstr(dxl_errmsg(), "tombstones"));
	dxl_store_set_reclaim_ts(f->s, 150);
	assert_int_equal(dxl_store_insert(f->s, 9, 10, 300, v, 8, NULL, NULL), 0);
	assert_int_equal(stats(f->s, 9).tombstones, 1);
	struct dxl_store_absence ab;
	assert_int_equal(dxl_store_absence(f->s, 9, 0, &ab), 0);
	assert_int_equal(ab.slot, UINT64_MAX);
	assert_int_equal(ab.version, 0);
	assert_true(ab.ts >= 100); /* the floor */
	assert_int_equal(dxl_store_absence(f->s, 9, 1, &ab), 0);
	assert_int_equal(ab.ts, 200);
	assert_int_equal(dxl_store_insert(f->s, 9, 11, 300, v, 8, NULL, NULL), DXL_E_FULL);
	/* the tombstone of key 1 is still there after a restart; the bound is
	 * the owner's to set again */
	dxl_store_close(&f->s);
	assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, &cfg, &f->s), 0);
	assert_int_equal(stats(f->s, 9).tombstones, 1);
	assert_int_equal(dxl_store_insert(f->s, 9, 11, 300, v, 8, NULL, NULL), DXL_E_FULL);
	dxl_store_set_reclaim_ts(f->s, 201);
	assert_int_equal(dxl_store_insert(f->s, 9, 11, 300, v, 8, NULL, NULL), 0);
	assert_int_equal(stats(f->s, 9).tombstones, 0);
	/* without keep_tombstones the bound is ignored: no effect, no error */
	dxl_store_close(&f->s);
	assert_int_equal(reopen(f), 0);
	dxl_store_set_reclaim_ts(f->s, 0);
}

/*
 * A delete of an absent key applied to a full table (issue 20 review): the
 * tombstone has no slot. It used to be dropped silently (apply returned 0):
 * once a slot freed, an older insert of the key was applied and the
 * deleted key came back. Now the apply fails with DXL_E_FULL and changes
 * nothing (the applier stops there and tries again); with a slot free it
 * leaves the tombstone, which keeps the older insert out. (A replay, the
 * last write of each key of its window, still passes it over:
 * tests/unit/recovery/test_replay.c.)
 */
static void test_apply_delete_full_table(void **state)
{
	struct fx *f = *state;
	create(f, DXL_LOCKS_CPU);
	uint8_t v[8] = "1234567";
	for (uint64_t k = 0; k < 4; k++)
		assert_int_equal(dxl_store_apply(f->s, 9, k, DXL_WS_INSERT, 2 + 2 * k, 10, v, 8), 1);
	static uint8_t before[DATA_BYTES], after[DATA_BYTES];
	snapshot(f->s, before);
	int ret = dxl_store_apply(f->s, 9, 50, DXL_WS_DELETE, 40, 100, NULL, 0);
	if (ret != DXL_E_FULL)
		fail_msg("a delete of an absent key on a full table returned %d (%s), not DXL_E_FULL: its tombstone is lost",
			 ret, dxl_errname(ret));
	snapshot(f->s, after);
	assert_memory_equal(before, after, DATA_BYTES);
	/* a slot frees up (key 0 deleted, its tombstone reused: no
	 * keep_tombstones here); the applier tries again */
	assert_int_equal(dxl_store_apply(f->s, 9, 0, DXL_WS_DELETE, 20, 20, NULL, 0), 1);
	assert_int_equal(dxl_store_apply(f->s, 9, 50, DXL_WS_DELETE, 40, 100, NULL, 0), 1);
	/* the older insert of key 50 arrives: passed over */
	assert_int_equal(dxl_store_apply(f->s, 9, 50, DXL_WS_INSERT, 38, 90, v, 8), 0);
	assert_int_equal(dxl_store_find(f->s, 9, 50, NULL), DXL_E_NOENT);
	struct dxl_store_absence ab;
	assert_int_equal(dxl_store_absence(f->s, 9, 50, &ab), 0);
	assert_int_equal(ab.version, 40);
	assert_int_equal(ab.ts, 100);
}

/*
 * An insert that never committed, undone (dxl_store_undo_insert), gives its
 * key back the absence it replaced, exactly: the same tombstone (version,
 * timestamp) as a replica that never saw the insert, or none. Before, the
 * undo was a delete: a tombstone of a new version (above the insert's) at
 * the primary only -- the replicas' tombstones differed (a backup with
 * version 10, the primary 14) and a key that never existed got one at the
 * primary alone (merge of recovery2 into txn-merge: `dxl cluster verify`).
 */
static void test_undo_insert_restores_absence(void **state)
{
	struct fx *f = *state;
	struct dxl_store_cfg cfg;
	dxl_store_cfg_init(&cfg);
	cfg.keep_tombstones = true;
	assert_int_equal(dxl_store_create(f->path, DXL_DUR_PROCESS, &ID, 3, TABLES, 2, &cfg,
					  &f->s), 0);
	uint8_t v[100];
	val(v, 100, 4);
	/* key 60 deleted (a committed delete: version 10, ts 500) */
	uint64_t slot, ver;
	assert_int_equal(dxl_store_apply(f->s, 7, 60, DXL_WS_INSERT, 8, 400, v, 100), 1);
	assert_int_equal(dxl_store_apply(f->s, 7, 60, DXL_WS_DELETE, 10, 500, NULL, 0), 1);
	struct dxl_store_absence was, ab;
	assert_int_equal(dxl_store_absence(f->s, 7, 60, &was), 0);
	assert_int_equal(was.version, 10);
	/* a transaction inserts it at its lock phase, then aborts */
	assert_int_equal(dxl_store_insert_owned(f->s, 7, 60, was.ts, v, 100, 77, &slot, &ver), 0);
	assert_true(ver > 10);
	/* not its lock owner: refused, nothing changes */
	assert_int_equal(dxl_store_undo_insert(f->s, 7, slot, 78, &was), DXL_E_STATE);
	assert_int_equal(dxl_store_find(f->s, 7, 60, NULL), 0);
	assert_int_equal(dxl_store_undo_insert(f->s, 7, slot, 77, &was), 0);
	assert_int_equal(dxl_store_unlock(f->s, 7, slot, 77), 0);
	assert_int_equal(dxl_store_find(f->s, 7, 60, NULL), DXL_E_NOENT);
	assert_int_equal(dxl_store_absence(f->s, 7, 60, &ab), 0);
	if (ab.version != 10 || ab.ts != 500)
		fail_msg("the undone insert left tombstone version %" PRIu64 " ts %" PRIu64
			 ", not the one it replaced (version 10, ts 500)", ab.version, ab.ts);
	assert_int_equal(stats(f->s, 7).tombstones, 1);
	assert_int_equal(stats(f->s, 7).live, 0);
	/* a write of the key from another primary (version 12) is applied */
	assert_int_equal(dxl_store_apply(f->s, 7, 60, DXL_WS_INSERT, 12, 600, v, 100), 1);
	assert_int_equal(dxl_store_find(f->s, 7, 60, NULL), 0);
	/* key 61 never existed: after the undo, no tombstone */
	assert_int_equal(dxl_store_absence(f->s, 7, 61, &was), 0);
	assert_int_equal(was.slot, UINT64_MAX);
	assert_int_equal(dxl_store_insert_owned(f->s, 7, 61, was.ts, v, 100, 77, &slot, &ver), 0);
	assert_int_equal(dxl_store_undo_insert(f->s, 7, slot, 77, &was), 0);
	assert_int_equal(dxl_store_unlock(f->s, 7, slot, 77), 0);
	assert_int_equal(dxl_store_absence(f->s, 7, 61, &ab), 0);
	if (ab.slot != UINT64_MAX)
		fail_msg("the undone insert of a key that never existed left a tombstone (version %" PRIu64 ")",
			 ab.version);
	assert_int_equal(ab.ts, was.ts);
	assert_int_equal(stats(f->s, 7).tombstones, 0);
	assert_int_equal(stats(f->s, 7).live, 1);
	/* on disk too: its slot names no key (incarnation 0) -- a store
	 * reopened finds key 60's tombstone and none of key 61 */
	struct dxl_record rec;
	assert_int_equal(dxl_store_read(f->s, 7, slot, &rec, NULL, 0), 0);
	assert_false(rec.live);
	assert_int_equal(rec.inc, 0);
	dxl_store_close(&f->s);
	assert_int_equal(dxl_store_open(f->path, DXL_DUR_PROCESS, &ID, &cfg, &f->s), 0);
	assert_int_equal(dxl_store_absence(f->s, 7, 61, &ab), 0);
	if (ab.slot != UINT64_MAX)
		fail_msg("reopened: key 61, inserted and undone, has a tombstone (version %" PRIu64 ")",
			 ab.version);
	assert_int_equal(stats(f->s, 7).tombstones, 0);
	assert_int_equal(stats(f->s, 7).live, 1);
	/* the slot is free again: an insert may take it */
	assert_int_equal(dxl_store_apply(f->s, 7, 61, DXL_WS_INSERT, 2, 700, v, 100), 1);
	assert_int_equal(dxl_store_find(f->s, 7, 61, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_create_insert_reopen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_msync_mode, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash_without_close, setup, teardown),
		cmocka_unit_test_setup_teardown(test_torn_slots_at_open, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_operations_change_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_versions_grow, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cpu_locks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_registration_and_nic_locks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hooks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_apply_idempotent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_apply_out_of_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_apply_any_order_converges, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tombstone_reclaim, setup, teardown),
		cmocka_unit_test_setup_teardown(test_apply_delete_full_table, setup, teardown),
		cmocka_unit_test_setup_teardown(test_undo_insert_restores_absence, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
