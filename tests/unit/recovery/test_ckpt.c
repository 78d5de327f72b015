/* test_ckpt.c -- checkpoints: format, the newest complete one, bad files, digests, installing one, the fuzzy checkpoint of a store being written */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/recovery.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/shard_fixture.h"
#include "tests/lib/stores.h"

struct fx {
	char dir[128];
	struct dxlt_shard sh;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/dxl-test-ckpt-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	dxlt_shard_close(&f->sh);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	int rc = system(cmd);
	free(f);
	return rc;
}

static void run_txns(struct dxlt_shard *sh, int n)
{
	for (int i = 0; i < n; i++)
		assert_int_equal(dxlt_shard_txn(sh), 0);
}

static struct dxl_digest digest2(struct dxl_store *a, struct dxl_store *b)
{
	struct dxl_digest d;
	dxlt_store_digest(a, b, &d);
	return d;
}

static struct dxl_digest digest(struct dxl_store *s)
{
	return digest2(s, NULL);
}

struct collect {
	struct dxl_digest d;
	uint64_t n;
};

static int collect_fn(void *arg, const struct dxl_ckpt_entry *e)
{
	struct collect *c = arg;
	c->n++;
	if (e->flags == DXL_CKPT_LIVE)
		dxl_digest_add(&c->d, e->table, e->key, e->version, e->value, e->len);
	else
		dxl_digest_add_tombstone(&c->d, e->table, e->key, e->version);
	return 0;
}

static void test_digest(void **state)
{
	(void)state;
	struct dxl_digest a = {0}, b = {0};
	uint8_t v1[4] = "abc", v2[4] = "abd";
	dxl_digest_add(&a, 1, 10, 2, v1, 3);
	dxl_digest_add(&a, 1, 11, 4, v2, 3);
	dxl_digest_add(&b, 1, 11, 4, v2, 3); /* another order */
	dxl_digest_add(&b, 1, 10, 2, v1, 3);
	assert_true(dxl_digest_equal(&a, &b));
	/* each field counts: table, key, version, value, length */
	struct dxl_digest c[5] = {{0}};
	dxl_digest_add(&c[0], 2, 10, 2, v1, 3);
	dxl_digest_add(&c[1], 1, 12, 2, v1, 3);
	dxl_digest_add(&c[2], 1, 10, 4, v1, 3);
	dxl_digest_add(&c[3], 1, 10, 2, v2, 3);
	dxl_digest_add(&c[4], 1, 10, 2, v1, 2);
	for (int i = 0; i < 5; i++) {
		dxl_digest_add(&c[i], 1, 11, 4, v2, 3);
		assert_false(dxl_digest_equal(&a, &c[i]));
		assert_int_equal(c[i].records, a.records);
	}
	/* a tombstone counts: a state that lacks one differs, and so does
	 * one whose tombstone has another version; a tombstone never hashes
	 * like a record */
	struct dxl_digest ta = a, tb = a, tc = a, td = {0}, te = {0};
	dxl_digest_add_tombstone(&ta, 1, 12, 6);
	assert_false(dxl_digest_equal(&ta, &a));
	dxl_digest_add_tombstone(&tb, 1, 12, 8);
	assert_false(dxl_digest_equal(&ta, &tb));
	dxl_digest_add_tombstone(&tc, 1, 12, 6);
	assert_true(dxl_digest_equal(&ta, &tc));
	dxl_digest_add_tombstone(&td, 1, 12, 6);
	dxl_digest_add(&te, 1, 12, 6, NULL, 0);
	assert_false(dxl_digest_equal(&td, &te));
	/* merging two parts is the digest of both */
	struct dxl_digest m1 = {0}, m2 = {0};
	dxl_digest_add(&m1, 1, 10, 2, v1, 3);
	dxl_digest_add(&m2, 1, 11, 4, v2, 3);
	dxl_digest_merge(&m1, &m2);
	assert_true(dxl_digest_equal(&m1, &a));
	char buf[160];
	dxl_digest_format(&ta, buf, sizeof(buf));
	struct dxl_digest p;
	assert_int_equal(dxl_digest_parse(buf, &p), 0);
	assert_true(dxl_digest_equal(&ta, &p));
	/* the older form (no tombstone part) still parses */
	assert_int_equal(dxl_digest_parse("records=1 h=0000000000000001000000000000000f", &p), 0);
	assert_int_equal(p.records, 1);
	assert_int_equal(p.h[1], 15);
	assert_int_equal(p.tombstones, 0);
	dxl_digest_format(&a, buf, sizeof(buf));
	assert_int_equal(dxl_digest_parse(buf, &p), 0);
	assert_true(dxl_digest_equal(&a, &p));
	assert_int_equal(dxl_digest_parse("records=1 h=00", &p), DXL_E_INVAL);
	assert_int_equal(dxl_digest_parse(NULL, &p), DXL_E_INVAL);
	strcat(buf, "0");
	assert_int_equal(dxl_digest_parse(buf, &p), DXL_E_INVAL);
}

/* a checkpoint of a quiet store holds exactly its live records; the newest
 * complete one is found, a cut one ignored, old ones pruned */
static void test_write_find_prune(void **state)
{
	struct fx *f = *state;
	dxlt_shard_create(&f->sh, f->dir, "a", 1, 1 << 20, 11);
	run_txns(&f->sh, 400);
	struct dxl_ckpt_info info;
	assert_int_equal(dxl_ckpt_write(f->dir, &DXLT_SHARD_ID, f->sh.s, f->sh.log[0].ls,
					&info), 0);
	assert_int_equal(info.seq, 1);
	assert_int_equal(info.shard, f->sh.shard);
	struct dxl_store_stats sst;
	assert_int_equal(dxl_store_stats(f->sh.s, UINT32_MAX, &sst), 0);
	/* the live records, and the tombstones at or above the floor */
	assert_int_equal(info.entries - info.tombstones, sst.live);
	assert_true(info.tombstones <= sst.tombstones);
	struct dxl_digest d1 = digest(f->sh.s);
	assert_int_equal(info.tombstones, d1.tombstones);
	assert_true(dxl_digest_equal(&info.digest, &d1));

	struct dxl_ckpt *c;
	struct dxl_ckpt_scan scan;
	assert_int_equal(dxl_ckpt_find(f->dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, f->sh.shard,
				       &c, &scan), 0);
	assert_int_equal(scan.files, 1);
	assert_int_equal(scan.complete, 1);
	const struct dxl_ckpt_info *ci = dxl_ckpt_get_info(c);
	assert_int_equal(ci->seq, 1);
	assert_int_equal(ci->entries, info.entries);
	assert_int_equal(ci->nrings, DXLT_SHARD_NRINGS);
	assert_int_equal(ci->tables[1].capacity, DXLT_SHARD_TABLES[1].capacity);
	struct collect col = {0};
	assert_int_equal(dxl_ckpt_foreach(c, collect_fn, &col), 0);
	assert_int_equal(col.n, info.entries);
	assert_true(dxl_digest_equal(&col.d, &d1));
	/* its start position: the heads when it was taken */
	for (uint32_t r = 0; r < DXLT_SHARD_NRINGS; r++) {
		struct dxl_log_pos p;
		struct dxl_ring_head h;
		assert_int_equal(dxl_ckpt_start(c, r, &p), 0);
		assert_int_equal(dxl_logstore_head(f->sh.log[0].ls, r, &h), 0);
		assert_int_equal(p.pos, h.pos);
		assert_int_equal(p.seq, h.seq);
	}
	struct dxl_log_pos p;
	assert_int_equal(dxl_ckpt_start(c, DXLT_SHARD_NRINGS, &p), DXL_E_INVAL);
	assert_int_equal(dxl_ckpt_covered(c, f->sh.log[0].ls, NULL, 0), 1);
	dxl_ckpt_close(&c);

	/* a second one cut before its manifest: ignored */
	run_txns(&f->sh, 100);
	struct dxl_table_schema sc[2] = {DXLT_SHARD_TABLES[0], DXLT_SHARD_TABLES[1]};
	struct dxl_log_pos start[DXLT_SHARD_NRINGS] = {{0}};
	struct dxl_ckpt_writer *w;
	assert_int_equal(dxl_ckpt_writer_new(f->dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID,
					     f->sh.shard, sc, 2, DXLT_SHARD_NRINGS, 1 << 20,
					     start, 0, 1, &w), 0);
	uint8_t v[8] = "value";
	assert_int_equal(dxl_ckpt_writer_add(w, 1, 7, 2, 1, v, 5, DXL_CKPT_LIVE), 0);
	char cut[512];
	snprintf(cut, sizeof(cut), "%s", dxl_ckpt_writer_path(w));
	assert_non_null(strstr(cut, "-00000000000000000002.dat"));
	/* "crash": the file stays as it is, without a manifest */
	assert_int_equal(dxl_ckpt_open(cut, DXL_DUR_PROCESS, &DXLT_SHARD_ID, &c), DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "incomplete"));
	assert_int_equal(dxl_ckpt_find(f->dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, f->sh.shard,
				       &c, &scan), 0);
	assert_int_equal(scan.files, 2);
	assert_int_equal(scan.incomplete, 1);
	assert_int_equal(dxl_ckpt_get_info(c)->seq, 1);
	dxl_ckpt_close(&c);
	dxl_ckpt_writer_abort(&w); /* removes it */
	assert_int_not_equal(access(cut, F_OK), 0);

	/* three more complete ones: the newest wins; prune keeps 2 */
	for (int i = 0; i < 3; i++) {
		run_txns(&f->sh, 50);
		assert_int_equal(dxl_ckpt_write(f->dir, &DXLT_SHARD_ID, f->sh.s,
						f->sh.log[0].ls, &info), 0);
	}
	assert_int_equal(info.seq, 4);
	assert_int_equal(dxl_ckpt_prune(f->dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, f->sh.shard, 2),
			 2);
	assert_int_equal(dxl_ckpt_find(f->dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, f->sh.shard,
				       &c, &scan), 0);
	assert_int_equal(scan.files, 2);
	assert_int_equal(dxl_ckpt_get_info(c)->seq, 4);
	assert_true(dxl_digest_equal(&dxl_ckpt_get_info(c)->digest, &info.digest));
	dxl_ckpt_close(&c);
	/* another shard has none */
	assert_int_equal(dxl_ckpt_find(f->dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, 9, &c, &scan),
			 DXL_E_NOENT);
	assert_null(c);
}

static void file_bytes(const char *path, uint8_t **buf, size_t *len)
{
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	*len = (size_t)st.st_size;
	*buf = malloc(*len);
	assert_int_equal(pread(fd, *buf, *len, 0), (ssize_t)*len);
	close(fd);
}

static void put_file(const char *path, const uint8_t *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, buf, len, 0), (ssize_t)len);
	close(fd);
}

/* every kind of damage is refused with a clear error, and changes nothing */
static void test_bad_files(void **state)
{
	struct fx *f = *state;
	dxlt_shard_create(&f->sh, f->dir, "a", 1, 1 << 20, 12);
	run_txns(&f->sh, 200);
	struct dxl_ckpt_info info;
	assert_int_equal(dxl_ckpt_write(f->dir, &DXLT_SHARD_ID, f->sh.s, f->sh.log[0].ls,
					&info), 0);
	char path[512];
	snprintf(path, sizeof(path), "%s/ckpt-%u-%020d.dat", f->dir, f->sh.shard, 1);
	uint8_t *orig;
	size_t len;
	file_bytes(path, &orig, &len);
	uint8_t *b = malloc(len);
	struct dxl_ckpt *c;
	const size_t man = 4096; /* the superblock, then the manifest */
	struct {
		size_t off;
		const char *what;
	} flips[] = {
		{man + 3, "magic"},          {man + 8, "format"},
		{man + 20, "seq"},           {man + 60, "entries"},
		{man + 90, "digest"},        {man + 115, "tombstone digest"},
		{man + 19584 + 2, "a table's reclaim floor"},
		{man + 128 + 16, "capacity"},
		{man + 128 + 40, "table crc"}, {man + 3200 + 3, "ring start"},
		{man + DXL_CKPT_MAN_SIZE + 9, "an entry"},
		{man + DXL_CKPT_MAN_SIZE + 24, "an entry's length"},
	};
	for (size_t i = 0; i < DXL_ARRAY_SIZE(flips); i++) {
		memcpy(b, orig, len);
		b[flips[i].off] ^= 0x10;
		put_file(path, b, len);
		int ret = dxl_ckpt_open(path, DXL_DUR_PROCESS, &DXLT_SHARD_ID, &c);
		print_message("  flip in %s: %s\n", flips[i].what, dxl_errmsg());
		assert_int_equal(ret, DXL_E_CORRUPT);
		assert_null(c);
		uint8_t *now;
		size_t nlen;
		file_bytes(path, &now, &nlen);
		assert_int_equal(nlen, len);
		assert_memory_equal(now, b, len); /* open changed nothing */
		free(now);
	}
	/* truncated: the region refuses it */
	put_file(path, orig, len - 4096);
	assert_int_equal(dxl_ckpt_open(path, DXL_DUR_PROCESS, &DXLT_SHARD_ID, &c), DXL_E_CORRUPT);
	/* another node's, another durability, not a checkpoint */
	put_file(path, orig, len);
	struct dxl_region_id other = DXLT_SHARD_ID;
	other.node_id = 2;
	assert_int_equal(dxl_ckpt_open(path, DXL_DUR_PROCESS, &other, &c), DXL_E_STALE);
	assert_int_equal(dxl_ckpt_open(path, DXL_DUR_MSYNC, &DXLT_SHARD_ID, &c), DXL_E_CONFIG);
	char sp[400];
	snprintf(sp, sizeof(sp), "%s/a.store", f->dir);
	assert_int_equal(dxl_ckpt_open(sp, DXL_DUR_PROCESS, &DXLT_SHARD_ID, &c), DXL_E_STALE);
	assert_int_equal(dxl_ckpt_open(path, DXL_DUR_PROCESS, &DXLT_SHARD_ID, &c), 0);
	dxl_ckpt_close(&c);
	/* bad arguments of the writer: nothing created */
	struct dxl_log_pos start[2] = {{0}};
	struct dxl_ckpt_writer *w = NULL;
	struct dxl_table_schema bad = {.id = 1, .value_size = 0, .capacity = 4};
	assert_int_equal(dxl_ckpt_writer_new(f->dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, 5, &bad,
					     1, 2, 4096, start, 0, 1, &w), DXL_E_INVAL);
	assert_int_equal(dxl_ckpt_writer_new(f->dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, 5,
					     DXLT_SHARD_TABLES, 2, 0, 4096, start, 0, 1, &w),
			 DXL_E_INVAL);
	assert_int_equal(dxl_ckpt_writer_new(f->dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, 5,
					     DXLT_SHARD_TABLES, 2, 2, 4096, start, 1, 1, &w),
			 DXL_E_EXIST);
	assert_null(w);
	assert_int_equal(dxl_ckpt_writer_new(f->dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, 5,
					     DXLT_SHARD_TABLES, 2, 2, 4096, start, 0, 1, &w), 0);
	uint8_t v[400] = {0};
	assert_int_equal(dxl_ckpt_writer_add(w, 3, 1, 2, 1, v, 1, DXL_CKPT_LIVE), DXL_E_NOENT);
	assert_int_equal(dxl_ckpt_writer_add(w, 1, 1, 3, 1, v, 1, DXL_CKPT_LIVE), DXL_E_INVAL);
	assert_int_equal(dxl_ckpt_writer_add(w, 1, 1, 2, 1, v, 1, 7), DXL_E_INVAL);
	assert_int_equal(dxl_ckpt_writer_add(w, 1, 1, 2, 1, v, 1, DXL_CKPT_TOMBSTONE),
			 DXL_E_INVAL);
	assert_int_equal(dxl_ckpt_writer_add(w, 1, 1, 2, 1, v, 25, DXL_CKPT_LIVE), DXL_E_TOOBIG);
	/* table 2 holds 64 + 4 + 16 entries: the 85th is refused */
	for (int i = 0; i < 84; i++)
		assert_int_equal(dxl_ckpt_writer_add(w, 2, (uint64_t)i, 2, 1, v, 300,
						     DXL_CKPT_LIVE), 0);
	assert_int_equal(dxl_ckpt_writer_add(w, 2, 99, 2, 1, v, 300, DXL_CKPT_LIVE), DXL_E_FULL);
	assert_int_equal(dxl_ckpt_writer_add(w, 1, 5, 4, 9, NULL, 0, DXL_CKPT_TOMBSTONE), 0);
	assert_int_equal(dxl_ckpt_writer_commit(&w, &info), 0);
	assert_null(w);
	assert_int_equal(info.entries, 85);
	assert_int_equal(info.tombstones, 1);
	assert_int_equal(info.digest.records, 84);
	free(orig);
	free(b);
}

/* a replica's store made equal to a checkpoint, whatever it held: extra
 * keys deleted, older records replaced, and the log from the checkpoint's
 * position brings it to the primary's state; installing again changes
 * nothing */
static void test_install(void **state)
{
	struct fx *f = *state;
	dxlt_shard_create(&f->sh, f->dir, "a", 1, 1 << 20, 13);
	run_txns(&f->sh, 300);
	/* a stale replica: the state after 300 transactions, then its own
	 * keys that the primary never had */
	char bp[400];
	snprintf(bp, sizeof(bp), "%s/b.store", f->dir);
	struct dxl_store *b = dxlt_shard_new_store(&f->sh, bp);
	assert_int_equal(dxl_recovery_replay(b, f->sh.log[0].ls, UINT64_MAX, NULL, NULL, NULL),
			 (int)f->sh.ntx);
	uint8_t v[8] = "stale";
	for (uint64_t k = 400; k < 420; k++)
		assert_int_equal(dxl_store_apply(b, 1, k, DXL_WS_INSERT, 2, 5, v, 5), 1);
	run_txns(&f->sh, 300);
	struct dxl_ckpt_info info;
	assert_int_equal(dxl_ckpt_write(f->dir, &DXLT_SHARD_ID, f->sh.s, f->sh.log[0].ls,
					&info), 0);
	struct dxl_ckpt *c;
	assert_int_equal(dxl_ckpt_find(f->dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, f->sh.shard,
				       &c, NULL), 0);
	struct dxl_install_stats st;
	assert_int_equal(dxl_ckpt_install(b, c, &st), 0);
	print_message("  install: %" PRIu64 " entries, %" PRIu64 " written, %" PRIu64
		      " unchanged, %" PRIu64 " removed\n",
		      st.entries, st.written, st.unchanged, st.removed);
	assert_true(st.removed >= 20);
	assert_true(st.written > 0 && st.unchanged > 0);
	dxlt_shard_assert_same(f->sh.s, b);
	/* again: nothing to do */
	assert_int_equal(dxl_ckpt_install(b, c, &st), 0);
	assert_int_equal(st.written, 0);
	assert_int_equal(st.removed, 0);
	/* more transactions; retention passes the checkpoint's position on
	 * the log: then it no longer covers it */
	run_txns(&f->sh, 200);
	assert_int_equal(dxl_recovery_replay(b, f->sh.log[0].ls, UINT64_MAX, NULL, NULL, NULL),
			 (int)f->sh.ntx);
	dxlt_shard_assert_same(f->sh.s, b);
	assert_int_equal(dxl_ckpt_covered(c, f->sh.log[0].ls, NULL, 0), 1);
	assert_true(dxlt_shard_retain(&f->sh, 0, 1000000) > 0);
	char why[256];
	assert_int_equal(dxl_ckpt_covered(c, f->sh.log[0].ls, why, sizeof(why)), 0);
	print_message("  not covered: %s\n", why);
	assert_non_null(strstr(why, "reclaimed"));
	/* a store of another shard or other tables is refused, unchanged */
	struct dxl_store *o;
	snprintf(bp, sizeof(bp), "%s/o.store", f->dir);
	struct dxl_table_schema other[1] = {{.id = 1, .value_size = 24, .capacity = 100}};
	assert_int_equal(dxl_store_create(bp, DXL_DUR_PROCESS, &DXLT_SHARD_ID, f->sh.shard,
					  other, 1, NULL, &o), 0);
	assert_int_equal(dxl_ckpt_install(o, c, &st), DXL_E_CONFIG);
	struct dxl_store_stats ost;
	assert_int_equal(dxl_store_stats(o, UINT32_MAX, &ost), 0);
	assert_int_equal(ost.live, 0);
	dxl_store_close(&o);
	dxl_ckpt_close(&c);
	dxl_store_close(&b);
}

static int pick(void *arg, const struct dxl_ckpt_entry *e)
{
	*(struct dxl_ckpt_entry *)arg = *e;
	return 1;
}

/* the store held a newer record than the image: install says so instead of
 * pretending the store equals the image */
static void test_install_detects_newer_store(void **state)
{
	struct fx *f = *state;
	dxlt_shard_create(&f->sh, f->dir, "a", 1, 1 << 20, 14);
	run_txns(&f->sh, 100);
	assert_int_equal(dxl_ckpt_write(f->dir, &DXLT_SHARD_ID, f->sh.s, f->sh.log[0].ls,
					NULL), 0);
	struct dxl_ckpt *c;
	assert_int_equal(dxl_ckpt_find(f->dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, f->sh.shard,
				       &c, NULL), 0);
	/* one key of the image, written again with a larger version */
	struct dxl_ckpt_entry first = {0};
	assert_int_equal(dxl_ckpt_foreach(c, pick, &first), 1);
	uint8_t v[4] = "new";
	assert_int_equal(dxl_store_apply(f->sh.s, first.table, first.key, DXL_WS_UPDATE,
					 first.version + 1000, 1, v, 3), 1);
	struct dxl_install_stats st;
	assert_int_equal(dxl_ckpt_install(f->sh.s, c, &st), DXL_E_CORRUPT);
	print_message("  %s\n", dxl_errmsg());
	dxl_ckpt_close(&c);
}

/*
 * The fuzzy checkpoint: a writer thread keeps applying transactions to the
 * store (and logging them: log 0 with retention moving the heads, log 1
 * kept whole) while the checkpoint is taken. The image alone is no state
 * at all; the image plus the log from its start position must be the
 * store's final state. Log 1's heads are set to the image's start before
 * the replay, so the replay cannot lean on records the image should have
 * covered. Fails if the start position is taken after the scan (planted:
 * records applied during the scan below a later position are lost; the
 * heads keep moving during the scan).
 */
struct churn {
	struct dxlt_shard *sh;
	atomic_bool stop;
	atomic_uint_fast64_t done;
	pthread_mutex_t heads; /* orders the heads' writer (retention) with
				  the test reading them (the checkpoint's
				  position): a replica does both in one thread */
};

static void locked_retain(struct churn *ch, uint32_t n)
{
	pthread_mutex_lock(&ch->heads);
	dxlt_shard_retain(ch->sh, 0, n);
	pthread_mutex_unlock(&ch->heads);
}

static void *churn_main(void *arg)
{
	struct churn *ch = arg;
	while (!atomic_load(&ch->stop)) {
		int ret = dxlt_shard_txn(ch->sh);
		if (ret == DXL_E_FULL) {
			locked_retain(ch, 8);
			continue;
		}
		/* retention right behind the applier: the heads move all
		 * the time, also while a checkpoint scans */
		atomic_fetch_add(&ch->done, 1);
		locked_retain(ch, 2);
	}
	return NULL;
}

static void test_fuzzy_checkpoint_under_writes(void **state)
{
	struct fx *f = *state;
	dxlt_watchdog_arm(120, "test_fuzzy_checkpoint_under_writes");
	int rounds = getenv("DXL_TEST_SANITIZER") ? 8 : 32;
	uint64_t moved = 0, applied_during = 0, replayed = 0, tombs = 0;
	for (int round = 0; round < rounds; round++) {
		char name[32];
		snprintf(name, sizeof(name), "r%d", round);
		struct dxlt_shard sh;
		dxlt_shard_create(&sh, f->dir, name, 2, 4 << 20, 100 + (unsigned)round);
		run_txns(&sh, 500);
		dxlt_shard_retain(&sh, 0, 100);
		struct churn ch = {.sh = &sh, .heads = PTHREAD_MUTEX_INITIALIZER};
		pthread_t th;
		assert_int_equal(pthread_create(&th, NULL, churn_main, &ch), 0);
		usleep(2000);
		uint64_t before = atomic_load(&ch.done);
		/* the position first (the heads, read in step with retention),
		 * then the slots while the writer and retention go on */
		struct dxl_log_pos start[DXLT_SHARD_NRINGS];
		pthread_mutex_lock(&ch.heads);
		for (uint32_t r = 0; r < DXLT_SHARD_NRINGS; r++) {
			struct dxl_ring_head h;
			assert_int_equal(dxl_logstore_head(sh.log[0].ls, r, &h), 0);
			start[r] = (struct dxl_log_pos){.pos = h.pos, .seq = h.seq};
		}
		pthread_mutex_unlock(&ch.heads);
		struct dxl_ckpt_info info;
		assert_int_equal(dxl_ckpt_write_from(f->dir, &DXLT_SHARD_ID, sh.s, start,
						     DXLT_SHARD_NRINGS, 4 << 20, 0, &info), 0);
		uint64_t during = atomic_load(&ch.done) - before;
		usleep(2000);
		atomic_store(&ch.stop, true);
		pthread_join(th, NULL);
		applied_during += during;
		struct dxl_ckpt *c;
		char ckp[512];
		snprintf(ckp, sizeof(ckp), "%s/ckpt-%u-%020" PRIu64 ".dat", f->dir, sh.shard,
			 info.seq);
		assert_int_equal(dxl_ckpt_open(ckp, DXL_DUR_PROCESS, &DXLT_SHARD_ID, &c), 0);
		/* log 1 from the image's start only */
		for (uint32_t r = 0; r < DXLT_SHARD_NRINGS; r++) {
			struct dxl_log_pos p;
			assert_int_equal(dxl_ckpt_start(c, r, &p), 0);
			moved += p.pos > 0;
			assert_int_equal(dxl_logstore_set_head(sh.log[1].ls, r, p.pos, p.seq, 0), 0);
		}
		char bp[400];
		snprintf(bp, sizeof(bp), "%s/%s.rebuilt", f->dir, name);
		struct dxl_store *b = dxlt_shard_new_store(&sh, bp);
		assert_int_equal(dxl_ckpt_install(b, c, NULL), 0);
		struct dxl_replay_stats rs;
		assert_true(dxl_recovery_replay(b, sh.log[1].ls, UINT64_MAX, NULL, NULL, &rs) >= 0);
		replayed += rs.records;
		dxlt_shard_assert_same(sh.s, b);
		/* tombstones too, those both keep (the rebuilt one lacks the
		 * source's below its floor: install raised its own to it) */
		for (uint32_t t = 0; t < 2; t++)
			assert_true(dxl_store_reclaim_floor(b, info.tables[t].id) >= info.floors[t]);
		struct dxl_digest da = digest2(sh.s, b), db = digest2(b, sh.s);
		assert_true(dxl_digest_equal(&da, &db));
		tombs += da.tombstones;
		dxl_store_close(&b);
		dxl_ckpt_close(&c);
		dxlt_shard_close(&sh);
	}
	print_message("  %d rounds: %" PRIu64 " transactions applied while checkpoints were taken,"
		      " %" PRIu64 " records replayed from their positions, %" PRIu64
		      " rings with a moved start, %" PRIu64 " tombstones compared\n",
		      rounds, applied_during, replayed, moved, tombs);
	/* coverage floors: the checkpoints really raced with writers, and
	 * their start positions were not the beginning of the log */
	assert_true(applied_during >= (uint64_t)rounds * 5);
	assert_true(moved >= (uint64_t)rounds);
	dxlt_watchdog_disarm();
}

/*
 * An install never writes a lock word: in DXL_LOCKS_NIC mode the words are
 * the NIC's (a CPU store is a broken invariant: DXL_ASSERT), so a store
 * that is not registered and has no lock agent (every change of a word
 * would fail with DXL_E_STATE) takes a checkpoint with live records and
 * tombstones into a stale state -- and its lock words are all 0 after.
 */
static void test_install_nic_lock_words(void **state)
{
	struct fx *f = *state;
	dxlt_shard_create(&f->sh, f->dir, "n", 1, 1 << 20, 17);
	run_txns(&f->sh, 400);
	struct dxl_ckpt_info info;
	assert_int_equal(dxl_ckpt_write(f->dir, &DXLT_SHARD_ID, f->sh.s, f->sh.log[0].ls,
					&info), 0);
	assert_true(info.tombstones > 0);
	struct dxl_ckpt *c;
	assert_int_equal(dxl_ckpt_find(f->dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, f->sh.shard,
				       &c, NULL), 0);
	char bp[400];
	snprintf(bp, sizeof(bp), "%s/nic.store", f->dir);
	struct dxl_store_cfg cfg;
	dxl_store_cfg_init(&cfg);
	cfg.lock_mode = DXL_LOCKS_NIC;
	cfg.keep_tombstones = true;
	struct dxl_store *b;
	assert_int_equal(dxl_store_create(bp, DXL_DUR_PROCESS, &DXLT_SHARD_ID, f->sh.shard,
					  DXLT_SHARD_TABLES, 2, &cfg, &b), 0);
	/* a stale state first (records the image lacks, others it has) */
	uint8_t v[8] = "stale";
	for (uint64_t k = 0; k < 40; k++)
		assert_int_equal(dxl_store_apply(b, 1, k, DXL_WS_INSERT, 2, 5, v, 5), 1);
	struct dxl_install_stats st;
	assert_int_equal(dxl_ckpt_install(b, c, &st), 0);
	assert_true(st.removed > 0);
	dxlt_shard_assert_same(f->sh.s, b);
	for (uint32_t t = 0; t < 2; t++)
		for (uint64_t slot = 0; slot < DXLT_SHARD_TABLES[t].capacity; slot++)
			assert_int_equal(dxl_store_lock_word(b, DXLT_SHARD_TABLES[t].id, slot), 0);
	dxl_store_close(&b);
	dxl_ckpt_close(&c);
}

/*
 * A checkpoint never images a slot whose lock is held: an insert whose
 * transaction has not decided is live in the store from before its
 * commit, and an abort deletes it without a log record, so an image that
 * took it would install a key that was never committed. Here key 900 is
 * inserted owned (locked) and aborted (deleted, unlocked) 150 ms into the
 * checkpoint; key 901 is inserted owned and committed (unlocked) the same
 * way. The image must lack 900 live and hold 901. Before, the scan took
 * 900 as it found it.
 */
struct lockjob {
	struct dxl_store *s;
	uint64_t slot_abort, slot_commit;
	int ret;
};

static void *lock_release_main(void *arg)
{
	struct lockjob *j = arg;
	usleep(150 * 1000);
	j->ret = dxl_store_delete(j->s, 1, j->slot_abort, 77, dxl_now_ms(), NULL);
	if (!j->ret)
		j->ret = dxl_store_unlock(j->s, 1, j->slot_abort, 77);
	if (!j->ret)
		j->ret = dxl_store_unlock(j->s, 1, j->slot_commit, 78);
	return NULL;
}

struct find_key {
	uint64_t key;
	int live, tomb;
};

static int find_key_fn(void *arg, const struct dxl_ckpt_entry *e)
{
	struct find_key *fk = arg;
	if (e->table == 1 && e->key == fk->key) {
		if (e->flags == DXL_CKPT_LIVE)
			fk->live++;
		else
			fk->tomb++;
	}
	return 0;
}

static void test_checkpoint_skips_locked_insert(void **state)
{
	struct fx *f = *state;
	char bp[400];
	snprintf(bp, sizeof(bp), "%s/locked.store", f->dir);
	struct dxl_store_cfg cfg;
	dxl_store_cfg_init(&cfg);
	cfg.keep_tombstones = true;
	struct dxl_store *s;
	assert_int_equal(dxl_store_create(bp, DXL_DUR_PROCESS, &DXLT_SHARD_ID, 5,
					  DXLT_SHARD_TABLES, 2, &cfg, &s), 0);
	uint8_t v[8] = "value";
	for (uint64_t k = 0; k < 100; k++)
		assert_int_equal(dxl_store_insert(s, 1, k, dxl_now_ms(), v, 5, NULL, NULL), 0);
	struct lockjob j = {.s = s};
	assert_int_equal(dxl_store_insert_owned(s, 1, 900, dxl_now_ms(), v, 5, 77,
						&j.slot_abort, NULL), 0);
	assert_int_equal(dxl_store_insert_owned(s, 1, 901, dxl_now_ms(), v, 5, 78,
						&j.slot_commit, NULL), 0);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, lock_release_main, &j), 0);
	struct dxl_log_pos start[1] = {{0}};
	struct dxl_ckpt_info info;
	uint64_t t0 = dxl_now_ms();
	int ret = dxl_ckpt_write_from(f->dir, &DXLT_SHARD_ID, s, start, 1, 1 << 20, 0, &info);
	uint64_t ms = dxl_now_ms() - t0;
	pthread_join(th, NULL);
	assert_int_equal(j.ret, 0);
	assert_int_equal(ret, 0);
	struct dxl_ckpt *c;
	assert_int_equal(dxl_ckpt_find(f->dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, 5, &c, NULL), 0);
	struct find_key aborted = {.key = 900}, committed = {.key = 901}, other = {.key = 7};
	assert_int_equal(dxl_ckpt_foreach(c, find_key_fn, &aborted), 0);
	assert_int_equal(dxl_ckpt_foreach(c, find_key_fn, &committed), 0);
	assert_int_equal(dxl_ckpt_foreach(c, find_key_fn, &other), 0);
	print_message("  checkpoint took %" PRIu64 " ms (locks released after 150 ms): %" PRIu64
		      " entries; aborted insert live %d, committed insert live %d\n",
		      ms, info.entries, aborted.live, committed.live);
	assert_int_equal(aborted.live, 0);
	assert_int_equal(committed.live, 1);
	assert_int_equal(other.live, 1);
	dxl_ckpt_close(&c);
	dxl_store_close(&s);
}

/*
 * Comparing replicas sees tombstones (a reviewer found a backup that
 * lacked one pass the store comparison): two stores with the same live
 * records differ when one lacks a deleted key's tombstone -- in the
 * digest and in tests/lib/stores.c -- unless that store's reclaim floor
 * is past it (it may have given it away).
 */
static void test_compare_sees_tombstones(void **state)
{
	struct fx *f = *state;
	const char *cl = "cmp";
	struct dxl_store *st[2];
	for (uint32_t n = 0; n < 2; n++) {
		char path[400];
		snprintf(path, sizeof(path), "%s/%u", f->dir, n + 1);
		mkdir(path, 0755);
		snprintf(path, sizeof(path), "%s/%u/store-0.dat", f->dir, n + 1);
		struct dxl_region_id id = {.node_id = n + 1, .kind = DXL_REGION_STORE};
		snprintf(id.cluster, sizeof(id.cluster), "%s", cl);
		struct dxl_store_cfg cfg;
		dxl_store_cfg_init(&cfg);
		cfg.keep_tombstones = true;
		assert_int_equal(dxl_store_create(path, DXL_DUR_PROCESS, &id, 0, DXLT_SHARD_TABLES, 2,
						  &cfg, &st[n]), 0);
		/* the same log applied on both */
		assert_int_equal(dxl_store_apply(st[n], 1, 10, DXL_WS_INSERT, 2, 100, "a", 1), 1);
		assert_int_equal(dxl_store_apply(st[n], 1, 11, DXL_WS_INSERT, 4, 110, "b", 1), 1);
		assert_int_equal(dxl_store_apply(st[n], 1, 11, DXL_WS_DELETE, 6, 120, NULL, 0), 1);
	}
	/* key 12's delete applied on node 1 only: node 2 lacks its tombstone */
	assert_int_equal(dxl_store_apply(st[0], 1, 12, DXL_WS_DELETE, 8, 130, NULL, 0), 1);
	struct dxl_digest a, b;
	dxlt_store_digest(st[0], st[1], &a);
	dxlt_store_digest(st[1], st[0], &b);
	assert_int_equal(a.records, b.records);
	assert_int_equal(a.tombstones, 2);
	assert_int_equal(b.tombstones, 1);
	assert_false(dxl_digest_equal(&a, &b));
	for (uint32_t n = 0; n < 2; n++)
		dxl_store_close(&st[n]);
	uint32_t nodes[2] = {1, 2};
	char why[1024];
	struct dxlt_stores_report rep;
	assert_int_equal(dxlt_stores_compare(f->dir, cl, 0, nodes, 2, DXL_DUR_PROCESS, why,
					     sizeof(why), &rep), 1);
	print_message("  a missing tombstone: %s\n", why);
	assert_non_null(strstr(why, "key 12"));
	assert_int_equal(rep.tombs_compared, 2);
	/* node 2 gave away tombstones up to ts 130 (its floor says so): the
	 * stores agree on what both must keep */
	char path[400];
	snprintf(path, sizeof(path), "%s/2/store-0.dat", f->dir);
	struct dxl_region_id id = {.node_id = 2, .kind = DXL_REGION_STORE};
	snprintf(id.cluster, sizeof(id.cluster), "%s", cl);
	assert_int_equal(dxl_store_open(path, DXL_DUR_PROCESS, &id, NULL, &st[1]), 0);
	assert_int_equal(dxl_store_raise_reclaim_floor(st[1], 1, 131), 0);
	dxl_store_close(&st[1]);
	assert_int_equal(dxlt_stores_compare(f->dir, cl, 0, nodes, 2, DXL_DUR_PROCESS, why,
					     sizeof(why), &rep), 0);
	assert_int_equal(rep.tombs_compared, 0);
	/* the floor survives a reopen (persisted in the catalog page) */
	assert_int_equal(dxl_store_open(path, DXL_DUR_PROCESS, &id, NULL, &st[1]), 0);
	assert_int_equal(dxl_store_reclaim_floor(st[1], 1), 131);
	assert_int_equal(dxl_store_reclaim_floor(st[1], 2), 0);
	/* a different version of a tombstone is a difference too */
	assert_int_equal(dxl_store_apply(st[1], 1, 11, DXL_WS_DELETE, 200, 140, NULL, 0), 1);
	dxl_store_close(&st[1]);
	assert_int_equal(dxlt_stores_compare(f->dir, cl, 0, nodes, 2, DXL_DUR_PROCESS, why,
					     sizeof(why), &rep), 1);
	print_message("  another version: %s\n", why);
	assert_non_null(strstr(why, "key 11"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_digest),
		cmocka_unit_test_setup_teardown(test_write_find_prune, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_install, setup, teardown),
		cmocka_unit_test_setup_teardown(test_install_detects_newer_store, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fuzzy_checkpoint_under_writes, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_compare_sees_tombstones, setup, teardown),
		cmocka_unit_test_setup_teardown(test_install_nic_lock_words, setup, teardown),
		cmocka_unit_test_setup_teardown(test_checkpoint_skips_locked_insert, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
