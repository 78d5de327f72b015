/* test_replay.c -- a log window re-applied to a store (dxl_recovery_replay): the primary's contents, a bad write set changes nothing, a full table, a kill at any moment */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fcntl.h>
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
#include "dxl/recovery.h"
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

static void snapshot(struct dxl_store *s, uint8_t *buf)
{
	memcpy(buf, dxl_region_data(dxl_store_region(s)), DATA_BYTES);
}

static void val(uint8_t *v, uint32_t len, uint64_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		v[i] = (uint8_t)(seed * 29 + i * 5 + 3);
}

static struct dxl_store_stats stats(struct dxl_store *s, uint32_t table)
{
	struct dxl_store_stats st;
	assert_int_equal(dxl_store_stats(s, table, &st), 0);
	return st;
}

/* a log of two rings written locally, as in tests/unit/log/test_ring.c */
#define RING 65536

struct logfx {
	char path[300];
	struct dxl_region *r;
	struct dxl_logstore *ls;
	uint64_t tail_pos[2], tail_seq[2];
};

static void log_open(struct fx *f, struct logfx *l)
{
	snprintf(l->path, sizeof(l->path), "%s/log", f->dir);
	struct dxl_region_id lid = ID;
	lid.kind = DXL_REGION_LOG;
	uint64_t bytes = DXL_ALIGN_UP(dxl_logstore_bytes(2, RING), 4096ull);
	assert_int_equal(dxl_region_create(l->path, bytes, DXL_DUR_PROCESS, &lid, &l->r), 0);
	assert_int_equal(dxl_logstore_format(l->r, 3, 2, RING), 0);
	assert_int_equal(dxl_logstore_open(l->r, &l->ls), 0);
	for (int i = 0; i < 2; i++) {
		l->tail_pos[i] = 0;
		l->tail_seq[i] = 1;
	}
}

static void log_close(struct logfx *l)
{
	dxl_logstore_close(&l->ls);
	dxl_region_close(&l->r);
}

static void log_append(struct logfx *l, uint32_t ring, uint64_t ts,
		       const void *payload, uint32_t len)
{
	struct dxl_rec r = {.type = DXL_REC_DATA, .writer = ring, .epoch = 1,
			    .txn_id = ts, .commit_ts = ts, .payload = payload,
			    .payload_len = len};
	uint32_t size = dxl_rec_size(0, len);
	struct dxl_ring_head h;
	assert_int_equal(dxl_logstore_head(l->ls, ring, &h), 0);
	struct dxl_ring_place p;
	assert_int_equal(dxl_ring_place(RING, l->tail_pos[ring], l->tail_seq[ring],
					h.pos, size, &p), 0);
	uint8_t *buf = (uint8_t *)dxl_region_data(l->r) + dxl_logstore_buf_off(l->ls, ring);
	if (p.skip_len)
		assert_int_equal(dxl_rec_encode_skip(ring, 1, p.skip_seq, p.skip_len,
						     buf + p.skip_off, p.skip_len),
				 (int)p.skip_len);
	r.seq = p.rec_seq;
	assert_int_equal(dxl_rec_encode(&r, NULL, buf + p.rec_off, RING - p.rec_off),
			 (int)size);
	l->tail_pos[ring] = p.new_tail_pos;
	l->tail_seq[ring] = p.new_tail_seq;
}

/* the primary: random transactions on store a, logged as write sets */
static int primary_run(struct dxl_store *a, struct logfx *l, unsigned seed)
{
	int ntx = 0;
	uint64_t ts = 1000;
	for (int t = 0; t < 60; t++) {
		struct dxl_ws_entry e[3];
		uint8_t vals[3][4000];
		uint32_t n = 1 + (uint32_t)rand_r(&seed) % 3, k = 0;
		uint64_t used[3];
		ts += 1 + (uint64_t)rand_r(&seed) % 3;
		for (uint32_t i = 0; i < n; i++) {
			uint32_t table = rand_r(&seed) % 4 ? 7 : 9;
			uint64_t key = (uint64_t)rand_r(&seed) % (table == 7 ? 12 : 4);
			int dup = 0;
			for (uint32_t j = 0; j < k; j++)
				dup |= used[j] == (key | (uint64_t)table << 32);
			if (dup)
				continue;
			used[k] = key | (uint64_t)table << 32;
			uint32_t len = 1 + (uint32_t)rand_r(&seed) % (table == 7 ? 100 : 4000);
			val(vals[k], len, ts * 10 + k);
			uint64_t slot, ver;
			struct dxl_ws_entry *x = &e[k];
			*x = (struct dxl_ws_entry){.table = table, .key = key,
						   .value = vals[k], .len = len};
			if (dxl_store_find(a, table, key, &slot)) {
				int ret = dxl_store_insert(a, table, key, ts, vals[k],
							   len, &slot, &ver);
				if (ret == DXL_E_FULL)
					continue;
				assert_int_equal(ret, 0);
				x->op = DXL_WS_INSERT;
			} else {
				uint64_t own = DXL_LOCK_OWNER(1, t);
				assert_int_equal(dxl_store_lock(a, table, slot, own, NULL), 0);
				if (rand_r(&seed) % 3 == 0) {
					assert_int_equal(dxl_store_delete(a, table, slot, own,
									  ts, &ver), 0);
					x->op = DXL_WS_DELETE;
					x->value = NULL;
					x->len = 0;
				} else {
					assert_int_equal(dxl_store_update(a, table, slot, own,
									  ts, vals[k], len,
									  &ver), 0);
					x->op = DXL_WS_UPDATE;
				}
				assert_int_equal(dxl_store_unlock(a, table, slot, own), 0);
			}
			x->version = ver;
			k++;
		}
		if (!k)
			continue;
		static uint8_t ws[16384];
		int len = dxl_writeset_encode(e, k, ws, sizeof(ws));
		assert_true(len > 0);
		log_append(l, (uint32_t)t % 2, ts, ws, (uint32_t)len);
		ntx++;
	}
	return ntx;
}

/* every key of both tables: same liveness, version, ts, value */
static void assert_same_contents(struct dxl_store *a, struct dxl_store *b)
{
	static uint8_t va[4096], vb[4096];
	for (uint32_t table = 7; table <= 9; table += 2)
		for (uint64_t key = 0; key < 12; key++) {
			uint64_t sa, sb;
			int fa = dxl_store_find(a, table, key, &sa);
			int fb = dxl_store_find(b, table, key, &sb);
			assert_int_equal(fa, fb);
			if (fa)
				continue;
			struct dxl_record ra, rb;
			assert_int_equal(dxl_store_read(a, table, sa, &ra, va, sizeof(va)), 0);
			assert_int_equal(dxl_store_read(b, table, sb, &rb, vb, sizeof(vb)), 0);
			assert_int_equal(ra.version, rb.version);
			assert_int_equal(ra.ts, rb.ts);
			assert_int_equal(ra.len, rb.len);
			assert_memory_equal(va, vb, ra.len);
		}
	struct dxl_store_stats x, y;
	assert_int_equal(dxl_store_stats(a, UINT32_MAX, &x), 0);
	assert_int_equal(dxl_store_stats(b, UINT32_MAX, &y), 0);
	assert_int_equal(x.live, y.live);
}

static int only_table7(void *arg, uint32_t table, uint64_t key)
{
	(*(int *)arg)++;
	return table == 7;
}

static void test_replay_matches_primary(void **state)
{
	struct fx *f = *state;
	create(f, DXL_LOCKS_CPU);
	struct logfx l;
	log_open(f, &l);
	int ntx = primary_run(f->s, &l, 7);
	assert_true(ntx > 30);

	char pb[300];
	snprintf(pb, sizeof(pb), "%s/b", f->dir);
	struct dxl_store *b;
	assert_int_equal(dxl_store_create(pb, DXL_DUR_PROCESS, &ID, 3, TABLES, 2,
					  NULL, &b), 0);
	struct dxl_replay_stats st;
	assert_int_equal(dxl_recovery_replay(b, l.ls, UINT64_MAX, NULL, NULL, &st), ntx);
	assert_int_equal(st.records, (uint64_t)ntx);
	assert_true(st.applied > 0);
	assert_true(st.superseded > 0); /* keys written more than once */
	assert_int_equal(st.applied + st.skipped + st.superseded, st.entries);
	assert_same_contents(f->s, b);
	/* again: every entry is skipped, nothing changes */
	static uint8_t before[DATA_BYTES], after[DATA_BYTES];
	snapshot(b, before);
	assert_int_equal(dxl_recovery_replay(b, l.ls, UINT64_MAX, NULL, NULL, &st), ntx);
	assert_int_equal(st.applied, 0);
	assert_int_equal(st.skipped + st.superseded, st.entries);
	snapshot(b, after);
	assert_memory_equal(before, after, DATA_BYTES);
	dxl_store_close(&b);

	/* a replica that crashed half-way (replayed up to some timestamp, and
	 * restarted) and replays everything from the heads again */
	char pc[300];
	snprintf(pc, sizeof(pc), "%s/c", f->dir);
	struct dxl_store *c;
	assert_int_equal(dxl_store_create(pc, DXL_DUR_PROCESS, &ID, 3, TABLES, 2,
					  NULL, &c), 0);
	int half = dxl_recovery_replay(c, l.ls, 1000 + 60, NULL, NULL, &st);
	assert_true(half > 0 && half < ntx);
	assert_true(st.last_ts < 1060);
	dxl_store_close(&c);
	assert_int_equal(dxl_store_open(pc, DXL_DUR_PROCESS, &ID, NULL, &c), 0);
	assert_int_equal(dxl_recovery_replay(c, l.ls, UINT64_MAX, NULL, NULL, &st), ntx);
	/* (every key's last write is past the half here: a delete of a key
	 * the half replay had deleted is applied again as its tombstone) */
	assert_int_equal(st.applied + st.skipped + st.superseded, st.entries);
	assert_same_contents(f->s, c);
	dxl_store_close(&c);

	/* a filter: only table 7's entries */
	char pd[300];
	snprintf(pd, sizeof(pd), "%s/d", f->dir);
	struct dxl_store *d;
	assert_int_equal(dxl_store_create(pd, DXL_DUR_PROCESS, &ID, 3, TABLES, 2,
					  NULL, &d), 0);
	int calls = 0;
	assert_int_equal(dxl_recovery_replay(d, l.ls, UINT64_MAX, only_table7, &calls,
					  &st), ntx);
	assert_int_equal(calls, 2 * (int)st.entries); /* checked, then applied */
	assert_true(st.filtered > 0);
	assert_int_equal(stats(d, 9).live, 0);
	assert_int_equal(stats(d, 7).live, stats(f->s, 7).live);
	dxl_store_close(&d);
	log_close(&l);
}

static void test_replay_stops_at_a_bad_write_set(void **state)
{
	struct fx *f = *state;
	create(f, DXL_LOCKS_CPU);
	struct logfx l;
	log_open(f, &l);
	uint8_t ws[256], v[8] = "abcdefg";
	struct dxl_ws_entry e = {.table = 7, .op = DXL_WS_INSERT, .key = 1,
				 .version = 2, .value = v, .len = 8};
	int len = dxl_writeset_encode(&e, 1, ws, sizeof(ws));
	log_append(&l, 0, 10, ws, (uint32_t)len);
	/* a record whose checksum is fine but whose write set is not */
	e.key = 2;
	len = dxl_writeset_encode(&e, 1, ws, sizeof(ws));
	ws[16 + 4] = 9; /* op 9 */
	log_append(&l, 1, 11, ws, (uint32_t)len);
	e.key = 3;
	len = dxl_writeset_encode(&e, 1, ws, sizeof(ws));
	log_append(&l, 0, 12, ws, (uint32_t)len);
	/* an entry of an unknown table */
	e.key = 4;
	e.table = 8;
	len = dxl_writeset_encode(&e, 1, ws, sizeof(ws));
	log_append(&l, 0, 13, ws, (uint32_t)len);

	struct dxl_replay_stats st;
	assert_int_equal(dxl_recovery_replay(f->s, l.ls, UINT64_MAX, NULL, NULL, &st),
			 DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "ring 1 record seq 1"));
	assert_non_null(strstr(dxl_errmsg(), "bad op 9"));
	/* the whole window is checked before anything is applied */
	assert_int_equal(dxl_store_find(f->s, 7, 1, NULL), DXL_E_NOENT);
	assert_int_equal(stats(f->s, 7).live, 0);
	/* up to before the bad one, fine */
	assert_int_equal(dxl_recovery_replay(f->s, l.ls, 11, NULL, NULL, &st), 1);
	assert_int_equal(st.applied, 1);
	assert_int_equal(dxl_store_find(f->s, 7, 1, NULL), 0);
	/* an unknown table is refused too (a filter decides what is ours) */
	assert_int_equal(dxl_store_apply_writeset(f->s, ws, (uint32_t)len, 13, NULL,
						  NULL, NULL), DXL_E_NOENT);
	assert_non_null(strstr(dxl_errmsg(), "write set entry 0 (table 8, key 4)"));
	log_close(&l);
}

/*
 * Why replay applies only each key's last write: table 9 is full (4 keys),
 * key 0 was deleted and key 4 took its slot. Re-applying the window record
 * by record puts key 0 back first -- which needs a fifth slot.
 */
struct one_by_one {
	struct dxl_store *s;
	int ret;
};

static int apply_rec(uint32_t ring, const struct dxl_rec *rec, uint64_t pos,
		     void *arg)
{
	struct one_by_one *x = arg;
	if (x->ret >= 0)
		x->ret = dxl_store_apply_writeset(x->s, rec->payload,
						  rec->payload_len, rec->commit_ts,
						  NULL, NULL, NULL);
	return 0;
}

static void test_replay_of_a_full_table(void **state)
{
	struct fx *f = *state;
	create(f, DXL_LOCKS_CPU);
	struct logfx l;
	log_open(f, &l);
	uint8_t ws[256], v[8] = "1234567";
	uint64_t ts = 10, ver, slot;
	for (uint64_t k = 0; k < 4; k++) {
		assert_int_equal(dxl_store_insert(f->s, 9, k, ts, v, 8, NULL, &ver), 0);
		struct dxl_ws_entry e = {.table = 9, .op = DXL_WS_INSERT, .key = k,
					 .version = ver, .value = v, .len = 8};
		log_append(&l, 0, ts++, ws, (uint32_t)dxl_writeset_encode(&e, 1, ws, 256));
	}
	assert_int_equal(dxl_store_find(f->s, 9, 0, &slot), 0);
	assert_int_equal(dxl_store_lock(f->s, 9, slot, 1, NULL), 0);
	assert_int_equal(dxl_store_delete(f->s, 9, slot, 1, ts, &ver), 0);
	assert_int_equal(dxl_store_unlock(f->s, 9, slot, 1), 0);
	struct dxl_ws_entry d = {.table = 9, .op = DXL_WS_DELETE, .key = 0, .version = ver};
	log_append(&l, 1, ts++, ws, (uint32_t)dxl_writeset_encode(&d, 1, ws, 256));
	assert_int_equal(dxl_store_insert(f->s, 9, 4, ts, v, 8, NULL, &ver), 0);
	struct dxl_ws_entry i4 = {.table = 9, .op = DXL_WS_INSERT, .key = 4,
				  .version = ver, .value = v, .len = 8};
	log_append(&l, 0, ts++, ws, (uint32_t)dxl_writeset_encode(&i4, 1, ws, 256));
	/* f->s has applied the whole window (it is the primary) */
	struct dxl_replay_stats st;
	assert_int_equal(dxl_recovery_replay(f->s, l.ls, UINT64_MAX, NULL, NULL, &st), 6);
	assert_int_equal(st.applied, 0);
	assert_int_equal(st.superseded, 1); /* key 0's insert */
	assert_int_equal(st.skipped, 5);
	assert_int_equal(dxl_store_find(f->s, 9, 0, NULL), DXL_E_NOENT);
	/* record by record instead: key 0 comes back and finds no slot */
	struct one_by_one x = {.s = f->s};
	assert_int_equal(dxl_log_scan_merged(l.ls, UINT64_MAX, apply_rec, &x), 6);
	assert_int_equal(x.ret, DXL_E_FULL);
	log_close(&l);
}

/* a replay of a window whose last write of key 50 is its delete, on a full
 * table (key 50 absent): the tombstone has no slot. dxl_store_apply refuses
 * (an applier must not lose it: issue 20 review); a replay passes it over
 * -- no older write of the key follows in its window */
static void test_replay_delete_on_full_table(void **state)
{
	struct fx *f = *state;
	create(f, DXL_LOCKS_CPU);
	struct logfx l;
	log_open(f, &l);
	uint8_t ws[256], v[8] = "1234567";
	for (uint64_t k = 0; k < 4; k++) {
		assert_int_equal(dxl_store_apply(f->s, 9, k, DXL_WS_INSERT, 2 + 2 * k, 10, v, 8), 1);
		struct dxl_ws_entry e = {.table = 9, .op = DXL_WS_INSERT, .key = k,
					 .version = 2 + 2 * k, .value = v, .len = 8};
		log_append(&l, 0, 10 + k, ws, (uint32_t)dxl_writeset_encode(&e, 1, ws, 256));
	}
	struct dxl_ws_entry d = {.table = 9, .op = DXL_WS_DELETE, .key = 50, .version = 40};
	log_append(&l, 1, 20, ws, (uint32_t)dxl_writeset_encode(&d, 1, ws, 256));
	assert_int_equal(dxl_store_apply(f->s, 9, 50, DXL_WS_DELETE, 40, 20, NULL, 0), DXL_E_FULL);
	struct dxl_replay_stats st;
	assert_int_equal(dxl_recovery_replay(f->s, l.ls, UINT64_MAX, NULL, NULL, &st), 5);
	log_close(&l);
}

/* a replica killed at a random moment while it applies the log, then
 * reopened (torn slots and all) and replayed: the primary's contents */
static void test_replay_after_kill(void **state)
{
	struct fx *f = *state;
	dxlt_watchdog_arm(0, "test_replay_after_kill");
	create(f, DXL_LOCKS_CPU);
	struct logfx l;
	log_open(f, &l);
	int ntx = primary_run(f->s, &l, 99);
	unsigned seed = 5;
	int rounds = getenv("DXL_TEST_SANITIZER") ? 8 : 40, torn = 0;
	for (int round = 0; round < rounds; round++) {
		int p[2];
		assert_int_equal(pipe(p), 0);
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(p[0]);
			/* fresh replicas, made first (creating one takes
			 * longer than a replay); the parent opens the one whose
			 * replay it killed */
			enum { NREP = 64 };
			static struct dxl_store *c[NREP];
			for (uint32_t i = 0; i < NREP; i++) {
				char pc[300];
				snprintf(pc, sizeof(pc), "%s/k%d-%u", f->dir, round, i);
				if (dxl_store_create(pc, DXL_DUR_PROCESS, &ID, 3, TABLES,
						     2, NULL, &c[i]))
					_exit(2);
			}
			for (uint32_t i = 0;; i = (i + 1) % NREP) {
				if (write(p[1], &i, 4) != 4)
					_exit(3);
				if (dxl_recovery_replay(c[i], l.ls, UINT64_MAX, NULL, NULL,
						     NULL) != ntx)
					_exit(4);
			}
		}
		close(p[1]);
		uint32_t first;
		assert_int_equal(read(p[0], &first, 4), 4);
		usleep((useconds_t)(rand_r(&seed) % 1000)); /* a random kill point */
		kill(pid, SIGKILL);
		int status;
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFSIGNALED(status));
		uint32_t last = first, i;
		while (read(p[0], &i, 4) == 4)
			last = i;
		close(p[0]);
		char pc[300];
		snprintf(pc, sizeof(pc), "%s/k%d-%u", f->dir, round, last);
		struct dxl_store *c;
		assert_int_equal(dxl_store_open(pc, DXL_DUR_PROCESS, &ID, NULL, &c), 0);
		struct dxl_store_stats st0 = stats(c, UINT32_MAX);
		torn += (int)st0.torn_at_open;
		assert_int_equal(dxl_recovery_replay(c, l.ls, UINT64_MAX, NULL, NULL, NULL),
				 ntx);
		assert_int_equal(stats(c, UINT32_MAX).torn, 0);
		assert_same_contents(f->s, c);
		dxl_store_close(&c);
		char cmd[400];
		snprintf(cmd, sizeof(cmd), "rm -f %s/k%d-*", f->dir, round);
		assert_int_equal(system(cmd), 0);
	}
	printf("  %d kills, %d torn slots found at open\n", rounds, torn);
	log_close(&l);
	dxlt_watchdog_disarm();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_replay_matches_primary, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replay_stops_at_a_bad_write_set, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replay_of_a_full_table, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replay_delete_on_full_table, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replay_after_kill, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
