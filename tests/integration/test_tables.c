/* test_tables.c -- dxl-replica hosting the engine's tables (engine.tables):
 * the store file and its refusals, the descriptors, the table RPCs of the
 * primary (insert, lookup, read, delete, lock, unlock, write-back) with
 * NIC- and CPU-owned lock words, one-sided READs of index buckets and
 * records found through them, the refusals (stale epoch, not primary,
 * unknown table, oversize value, malformed request: nothing changed), and a
 * restart that keeps the records (store reopened, index rebuilt).
 *
 * Needs DXL_TEST_ZK=host:port (scripts/test.sh sets it); skips otherwise.
 * A real dxl-replica process (build/bin, or $DXL_BIN_DIR) is made primary
 * of shard 0 by a configuration this test writes; test_backup_apply adds a
 * backup, appends write sets with a dxl_log_writer and READs the backup's
 * store. DXL_TEST_KEEP=1 keeps the temporary directory (daemon logs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/co.h"
#include "dxl/engine.h"
#include "dxl/index.h"
#include "dxl/membership.h"
#include "dxl/replica.h"
#include "dxl/rpc.h"
#include "dxl/txn.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/proc.h"

#define TABLES "engine.tables=1:64:1000,2:200:16"

static const char *g_zkc;
static char g_bin[PATH_MAX];
static char g_tmp[128];
static char g_cluster[48];
static int g_ncluster;

#define NEED_ZK()                                                            \
	do {                                                                 \
		if (!g_zkc) {                                                \
			print_message("SKIPPED: no ZooKeeper (DXL_TEST_ZK unset; " \
				      "scripts/test.sh sets it)\n");         \
			skip();                                              \
		}                                                            \
		if (access(g_bin, X_OK) != 0) {                              \
			print_message("SKIPPED: %s not built\n", g_bin);     \
			skip();                                              \
		}                                                            \
	} while (0)

/* ---- processes and ZooKeeper ---------------------------------------------- */

/* a fresh cluster name per test: tests do not see each other's configurations */
static void new_cluster(void)
{
	snprintf(g_cluster, sizeof(g_cluster), "tt%d-%d", (int)getpid(), ++g_ncluster);
}

static pid_t spawn(const char *logfile, bool append, uint32_t node, const char *dir,
		   const char *const *extra)
{
	const char *argv[32];
	int a = 0;
	argv[a++] = "-o";
	argv[a++] = "replica.cm=false";
	for (int i = 0; extra && extra[i] && a < 30; i++)
		argv[a++] = extra[i];
	argv[a] = NULL;
	struct dxlt_replica r = {.bin = g_bin, .logfile = logfile, .append = append,
				 .node = node, .dir = dir, .zk = g_zkc,
				 .cluster = g_cluster, .extra = argv};
	pid_t p = dxlt_replica_spawn(&r);
	if (p < 0)
		fail_msg("spawn: %s", dxl_errmsg());
	return p;
}

static struct dxl_zk *zk_open(void)
{
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxlt_zk_open(g_zkc, g_cluster, &zk), 0);
	return zk;
}

/* set_config -- the next epoch: shard `shard` with primary `primary` (whose
 * address is addr); returns the new epoch */
static uint64_t set_config(struct dxl_zk *zk, uint32_t shard, uint32_t primary,
			   const char *addr)
{
	struct dxl_cluster_config c;
	int32_t ver = DXL_ZK_VERSION_NONE;
	int ret = dxl_cluster_config_read(zk, &c, &ver);
	if (ret == DXL_E_NOENT) {
		dxl_cluster_config_init(&c);
		ver = DXL_ZK_VERSION_NONE;
	} else if (ret) {
		fail_msg("config read: %s", dxl_errmsg());
	}
	c.epoch++;
	assert_int_equal(dxl_cluster_config_set_node(&c, primary, addr), 0);
	assert_int_equal(dxl_cluster_config_set_shard(&c, shard, primary, NULL, 0), 0);
	ret = dxl_cluster_config_cas(zk, &c, ver, NULL);
	if (ret)
		fail_msg("config cas: %s", dxl_errmsg());
	uint64_t e = c.epoch;
	dxl_cluster_config_clear(&c);
	return e;
}

/* wait_desc -- nodes/<node> once it was published for epoch >= min_cfg */
static void wait_desc(struct dxl_zk *zk, uint32_t node, pid_t p, uint64_t min_cfg,
		      struct dxl_replica_desc *d, const char *logf)
{
	uint64_t end = dxl_now_ms() + 15000;
	for (;;) {
		int ret = dxlt_replica_desc_wait(zk, node, 1, p, 15000, d, NULL);
		if (ret) {
			char out[8192];
			dxlt_slurp(logf, out, sizeof(out));
			fail_msg("node %u: %s\n%s", node, dxl_errmsg(), out);
		}
		if (d->cfg_epoch >= min_cfg)
			return;
		if (dxl_now_ms() > end)
			fail_msg("node %u did not apply epoch %" PRIu64, node, min_cfg);
		usleep(20000);
	}
}

/* wait_tables -- a node that became the primary of shard 0 publishes its
 * tables once its promotion gate opened (docs/replica.md) */
static void wait_tables(struct dxl_zk *zk, uint32_t node, pid_t p, uint64_t min_cfg,
			struct dxl_replica_desc *d, const char *logf)
{
	uint64_t end = dxl_now_ms() + 15000;
	for (;;) {
		wait_desc(zk, node, p, min_cfg, d, logf);
		if (dxl_replica_desc_table(d, 0, 1))
			return;
		if (dxl_now_ms() > end)
			fail_msg("node %u did not open its tables (promotion gate)", node);
		usleep(20000);
	}
}

/* ---- the client: RPCs from a coroutine, one-sided READs on another ctx ---- */

struct client {
	struct dxl_fabric *f;
	struct dxl_ctx *ctx;  /* the scheduler's: RPCs */
	struct dxl_ctx *rctx; /* one-sided READs and CASes */
	struct dxl_sched *s;
	struct dxl_rpc *rpc;
	struct dxl_qp *qp, *rqp;
	struct dxl_mr *mr;
	uint8_t *buf; /* 64 KiB, registered */
	char msg[512];
};

static struct client g;

static void client_open(const struct dxl_replica_desc *d)
{
	memset(&g, 0, sizeof(g));
	struct dxl_fabric_cfg fc;
	dxl_fabric_cfg_init(&fc);
	fc.node_id = 900;
	assert_int_equal(dxl_fabric_new(&fc, &g.f), 0);
	assert_int_equal(dxl_ctx_new(g.f, 0, &g.ctx), 0);
	assert_int_equal(dxl_ctx_new(g.f, 1, &g.rctx), 0);
	assert_int_equal(dxl_sched_new(NULL, g.ctx, &g.s), 0);
	assert_int_equal(dxl_rpc_new(g.s, NULL, &g.rpc), 0);
	assert_int_equal(d->rpc_ctx, DXL_REPLICA_RPC_CTX);
	assert_int_equal(dxl_qp_connect(g.ctx, d->addr, d->rpc_ctx, &g.qp), 0);
	assert_int_equal(dxl_qp_connect(g.rctx, d->addr, 0, &g.rqp), 0);
	g.buf = dxlt_alloc_pages(65536);
	assert_non_null(g.buf);
	assert_int_equal(dxl_mr_reg(g.f, g.buf, 65536, DXL_MR_LOCAL_WRITE, &g.mr), 0);
}

static void client_close(void)
{
	dxl_mr_dereg(&g.mr);
	dxl_ctx_delete(&g.ctx);
	dxl_ctx_delete(&g.rctx);
	dxl_rpc_delete(&g.rpc);
	dxl_sched_delete(&g.s);
	dxl_fabric_delete(&g.f);
	dxlt_free_pages(g.buf, 65536);
	g.buf = NULL;
}

struct callarg {
	uint16_t op;
	const struct dxl_table_req *req;
	struct dxl_table_rep *rep;
	void *val;
	uint32_t cap;
	const void *raw; /* a raw payload instead of req (malformed requests) */
	size_t raw_len;
	int ret;
};

static void call_co(void *a)
{
	struct callarg *c = a;
	if (c->raw) {
		uint8_t rp[DXL_TABLE_REP_MAX];
		size_t rlen = 0;
		c->ret = dxl_rpc_call(g.rpc, g.qp, c->op, c->raw, c->raw_len, rp,
				      sizeof(rp), &rlen);
		int r = dxl_table_rep_decode(rp, rlen, c->rep);
		if (r && c->ret >= 0)
			c->ret = r;
		/* keep the node's message */
		size_t m = c->rep->data_len < sizeof(g.msg) - 1 ? c->rep->data_len :
								  sizeof(g.msg) - 1;
		if (m)
			memcpy(g.msg, c->rep->data, m);
		g.msg[m] = 0;
		c->rep->data = NULL;
		return;
	}
	c->ret = dxl_table_call(g.rpc, g.qp, c->op, c->req, c->rep, c->val, c->cap);
	snprintf(g.msg, sizeof(g.msg), "%s", c->ret ? dxl_errmsg() : "");
}

/* call -- one table RPC, run to completion; g.msg holds the error message */
static int call(uint16_t op, const struct dxl_table_req *req,
		struct dxl_table_rep *rep, void *val, uint32_t cap)
{
	struct callarg c = {.op = op, .req = req, .rep = rep, .val = val, .cap = cap};
	assert_int_equal(dxl_sched_spawn(g.s, call_co, &c, NULL), 0);
	assert_int_equal(dxl_sched_run(g.s), 0);
	return c.ret;
}

static int call_raw(uint16_t op, const void *raw, size_t len, struct dxl_table_rep *rep)
{
	struct callarg c = {.op = op, .rep = rep, .raw = raw, .raw_len = len};
	assert_int_equal(dxl_sched_spawn(g.s, call_co, &c, NULL), 0);
	assert_int_equal(dxl_sched_run(g.s), 0);
	return c.ret;
}

static void rd(uint64_t raddr, uint32_t rkey, uint32_t len, void *out)
{
	assert_true(len <= 65536);
	int st = dxlt_read(g.rctx, g.rqp, g.buf, dxl_mr_lkey(g.mr), raddr, rkey, len);
	if (st != DXL_WC_SUCCESS)
		fail_msg("READ of %u bytes at 0x%" PRIx64 ": %s", len, raddr,
			 st < 0 ? dxl_errmsg() : dxl_wc_status_str(st));
	memcpy(out, g.buf, len);
}

/* cas -- on a lock word; returns the word found */
static uint64_t cas(const struct dxl_shard_table *t, uint64_t slot, uint64_t cmp,
		    uint64_t swap)
{
	uint64_t *res = (uint64_t *)(g.buf + 60000);
	int st = dxlt_cas(g.rctx, g.rqp, res, dxl_mr_lkey(g.mr),
			  t->t.locks.addr + 8 * slot, t->t.locks.rkey, cmp, swap);
	assert_int_equal(st, DXL_WC_SUCCESS);
	return *res;
}

/*
 * onesided_find -- the coordinator's path: READ the index header (checked
 * against the descriptor), walk the key's chain with bucket READs, READ the
 * record at the slot found and check it (index.h's contract). Returns
 * DXL_INDEX_FOUND with *rec/value filled, DXL_INDEX_ABSENT, or STALE_HINT
 * (the index named a record that is not the key's).
 */
#define STALE_HINT 99
static int onesided_find(const struct dxl_shard_table *t, uint64_t key,
			 struct dxl_record *rec, void *value, uint32_t cap)
{
	uint8_t hb[DXL_INDEX_HDR_SIZE];
	rd(t->index.addr, t->index.rkey, sizeof(hb), hb);
	struct dxl_index_hdr h;
	assert_int_equal(dxl_index_hdr_decode(hb, sizeof(hb), &h), 0);
	assert_int_equal(h.n_buckets, t->ihdr.n_buckets);
	assert_int_equal(h.n_indirect, t->ihdr.n_indirect);
	assert_int_equal(h.seed, t->ihdr.seed);
	assert_int_equal(h.len, t->index.len);
	uint64_t off = dxl_index_bucket_addr(&h, key);
	struct dxl_index_find res = {0};
	for (uint64_t n = 0; n <= dxl_index_chain_max(&h); n++) {
		uint8_t b[DXL_INDEX_BUCKET_SIZE];
		rd(t->index.addr + off, t->index.rkey, sizeof(b), b);
		int r = dxl_index_bucket_find(&h, b, key, &res);
		assert_true(r >= 0);
		if (r != DXL_INDEX_NEXT)
			break;
		off = res.next_off;
	}
	if (res.result == DXL_INDEX_ABSENT)
		return DXL_INDEX_ABSENT;
	assert_int_equal(res.result, DXL_INDEX_FOUND);
	assert_true(res.slot < t->t.capacity);
	uint8_t slot[DXL_RECORD_MAX_SLOT];
	rd(t->t.records.addr + res.slot * t->t.slot_size, t->t.records.rkey,
	   t->t.slot_size, slot);
	int r = dxl_record_read_check(slot, t->t.slot_size, rec, value, cap);
	if (r)
		fail_msg("record at slot %" PRIu64 ": %s", res.slot, dxl_errmsg());
	/* the contract: key, liveness, incarnation; a hint that fails it is
	 * an index out of step with the store (nothing changes meanwhile) */
	if (rec->key != key || !rec->live || !dxl_index_inc_match(res.lossy_inc, rec->inc))
		return STALE_HINT;
	return DXL_INDEX_FOUND;
}

/* ---- fixture ---------------------------------------------------------------- */

static int setup(void **state)
{
	(void)state;
	g_zkc = getenv("DXL_TEST_ZK");
	assert_int_equal(dxlt_prog_path("dxl-replica", g_bin, sizeof(g_bin)), 0);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/dxl-test-tables-XXXXXX");
	assert_non_null(mkdtemp(g_tmp));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	dxlt_kill_all();
	if (getenv("DXL_TEST_KEEP")) {
		fprintf(stderr, "kept %s (DXL_TEST_KEEP)\n", g_tmp);
		return 0;
	}
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", g_tmp);
	return 0;
}

static void stop(pid_t p, const char *logf)
{
	kill(p, SIGTERM);
	int st = dxlt_wait_exit(p, 10000);
	if (st != 0) {
		char out[8192];
		dxlt_slurp(logf, out, sizeof(out));
		fail_msg("exit %d:\n%s", st, out);
	}
}

/* ---- step 1: hosting ----------------------------------------------------- */

static void test_hosting(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(60);
	new_cluster();
	struct dxl_zk *zk = zk_open();
	char dir[256], logf[256], path[300], out[16384];
	snprintf(dir, sizeof(dir), "%s/host", g_tmp);
	snprintf(logf, sizeof(logf), "%s/host.out", g_tmp);
	snprintf(path, sizeof(path), "%s/store-0.dat", dir);
	const char *tables[] = {"-o", TABLES, NULL};
	pid_t p = spawn(logf, false, 1, dir, tables);
	static struct dxl_replica_desc d;
	wait_desc(zk, 1, p, 0, &d, logf);
	assert_int_equal(access(path, F_OK), 0);
	assert_int_equal(d.rpc_ctx, DXL_REPLICA_RPC_CTX);
	const struct dxl_shard_desc *sd = dxl_replica_desc_shard(&d, 0);
	assert_non_null(sd);
	assert_int_equal(sd->ntables, 2);
	const struct dxl_shard_table *t1 = dxl_replica_desc_table(&d, 0, 1);
	const struct dxl_shard_table *t2 = dxl_replica_desc_table(&d, 0, 2);
	assert_non_null(t1);
	assert_non_null(t2);
	assert_int_equal(t1->t.value_size, 64);
	assert_int_equal(t1->t.slot_size, 128);
	assert_int_equal(t1->t.capacity, 1000);
	assert_int_equal(t1->t.lock_mode, DXL_LOCKS_NIC);
	assert_int_equal(t1->t.records.len, 1000 * 128);
	assert_int_equal(t1->t.locks.len, 8 * 1000);
	assert_int_equal(t2->t.value_size, 200);
	assert_int_equal(t2->t.capacity, 16);
	assert_true(t1->index.len >= DXL_INDEX_HDR_SIZE + DXL_INDEX_BUCKET_SIZE);
	stop(p, logf);

	/* other tables on the existing store: refused, exit 3, file untouched */
	struct stat st0, st1;
	assert_int_equal(stat(path, &st0), 0);
	const char *other[] = {"-o", "engine.tables=1:64:1000,2:200:17", NULL};
	p = spawn(logf, false, 1, dir, other);
	assert_int_equal(dxlt_wait_exit(p, 15000), 3);
	dxlt_slurp(logf, out, sizeof(out));
	if (!strstr(out, "holds the tables 1:64:1000,2:200:16"))
		fail_msg("output:\n%s", out);
	assert_non_null(strstr(out, "engine.tables says 1:64:1000,2:200:17"));
	/* no tables configured, a store on disk: refused, exit 3 */
	p = spawn(logf, false, 1, dir, NULL);
	assert_int_equal(dxlt_wait_exit(p, 15000), 3);
	dxlt_slurp(logf, out, sizeof(out));
	if (!strstr(out, "exists but engine.tables is empty"))
		fail_msg("output:\n%s", out);
	assert_int_equal(stat(path, &st1), 0);
	assert_int_equal(st0.st_size, st1.st_size);
	assert_int_equal(st0.st_mtime, st1.st_mtime);

	/* bad values: exit 2, nothing created */
	char dir2[256];
	snprintf(dir2, sizeof(dir2), "%s/never", g_tmp);
	const char *bad1[] = {"-o", "engine.tables=1:64:1000,1:8:8", NULL};
	p = spawn(logf, false, 2, dir2, bad1);
	assert_int_equal(dxlt_wait_exit(p, 15000), 2);
	dxlt_slurp(logf, out, sizeof(out));
	assert_non_null(strstr(out, "engine.tables"));
	assert_non_null(strstr(out, "table 1 twice"));
	const char *bad2[] = {"-o", TABLES, "-o", "engine.lock_mode=gpu", NULL};
	p = spawn(logf, false, 2, dir2, bad2);
	assert_int_equal(dxlt_wait_exit(p, 15000), 2);
	dxlt_slurp(logf, out, sizeof(out));
	assert_non_null(strstr(out, "engine.lock_mode"));
	assert_int_equal(access(dir2, F_OK), -1);

	/* the same tables again: it starts, the store reopened */
	p = spawn(logf, false, 1, dir, tables);
	wait_desc(zk, 1, p, 0, &d, logf);
	assert_int_equal(dxl_replica_desc_shard(&d, 0)->ntables, 2);
	stop(p, logf);
	dxlt_slurp(logf, out, sizeof(out));
	assert_non_null(strstr(out, "event=index_rebuilt shard=0 table=1 keys=0"));
	dxl_zk_delete(&zk);
	alarm(0);
}

/* ---- step 3: the RPCs ------------------------------------------------------ */

static void fill(uint8_t *v, uint32_t len, uint64_t seed)
{
	dxlt_pattern_fill(v, len, seed, 0);
}

static void test_rpc_nic(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(90);
	new_cluster();
	struct dxl_zk *zk = zk_open();
	char dir[256], logf[256];
	snprintf(dir, sizeof(dir), "%s/nic", g_tmp);
	snprintf(logf, sizeof(logf), "%s/nic.out", g_tmp);
	const char *tables[] = {"-o", TABLES, NULL};
	pid_t p = spawn(logf, false, 1, dir, tables);
	static struct dxl_replica_desc d;
	wait_desc(zk, 1, p, 0, &d, logf);
	uint64_t e = set_config(zk, 0, 1, d.addr);
	wait_tables(zk, 1, p, e, &d, logf);
	client_open(&d);
	const struct dxl_shard_table *t1 = dxl_replica_desc_table(&d, 0, 1);
	assert_non_null(t1);

	/* insert 100 keys of table 1 and 10 of table 2 */
	struct dxl_table_rep rep;
	uint8_t v[4096], got[4096];
	uint64_t slot42 = 0, ver42 = 0;
	uint32_t inc42 = 0;
	for (uint64_t k = 1; k <= 100; k++) {
		fill(v, 64, k);
		struct dxl_table_req rq = {.shard = 0, .table = 1, .epoch = e, .key = k * 1000,
					   .ts = 77 + k, .value = v, .len = 64 - (uint32_t)(k % 7)};
		int r = call(DXL_RPC_ID_TABLE_INSERT, &rq, &rep, NULL, 0);
		if (r)
			fail_msg("insert %" PRIu64 ": %s", k, g.msg);
		assert_int_equal(rep.epoch, e);
		assert_int_equal(rep.primary, 1);
		assert_true(rep.slot < 1000);
		assert_true(rep.rec.live);
		assert_int_equal(rep.rec.key, k * 1000);
		assert_true(rep.rec.version >= 2 && !(rep.rec.version & 1));
		assert_true(rep.rec.inc >= 1);
		if (k == 42) {
			slot42 = rep.slot;
			ver42 = rep.rec.version;
			inc42 = rep.rec.inc;
		}
	}
	for (uint64_t k = 1; k <= 10; k++) {
		fill(v, 200, k + 500);
		struct dxl_table_req rq = {.table = 2, .epoch = e, .key = k, .value = v, .len = 200};
		assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &rq, &rep, NULL, 0), 0);
	}
	/* the same key again: DXL_E_EXIST */
	struct dxl_table_req dup = {.table = 1, .epoch = e, .key = 42000, .value = v, .len = 8};
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &dup, &rep, NULL, 0), DXL_E_EXIST);
	assert_non_null(strstr(g.msg, "key 42000"));

	/* lookup and read by RPC */
	struct dxl_table_req lk = {.table = 1, .epoch = e, .key = 42000};
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got)), 0);
	assert_int_equal(rep.slot, slot42);
	assert_int_equal(rep.rec.version, ver42);
	assert_int_equal(rep.rec.inc, inc42);
	assert_int_equal(rep.rec.ts, 77 + 42);
	assert_int_equal(rep.rec.len, 64 - 42 % 7);
	fill(v, 64, 42);
	assert_memory_equal(got, v, rep.rec.len);
	struct dxl_table_req rdq = {.table = 1, .epoch = e, .slot = slot42};
	memset(got, 0, sizeof(got));
	assert_int_equal(call(DXL_RPC_ID_TABLE_READ, &rdq, &rep, got, sizeof(got)), 0);
	assert_int_equal(rep.rec.key, 42000);
	assert_true(rep.rec.live);
	assert_memory_equal(got, v, 64 - 42 % 7);
	/* a slot out of range */
	rdq.slot = 1000;
	assert_int_equal(call(DXL_RPC_ID_TABLE_READ, &rdq, &rep, got, sizeof(got)), DXL_E_NOENT);
	assert_non_null(strstr(g.msg, "out of range"));
	rdq.slot = slot42;
	/* a value larger than the caller's buffer: DXL_E_TOOBIG at the caller */
	assert_int_equal(call(DXL_RPC_ID_TABLE_READ, &rdq, &rep, got, 10), DXL_E_TOOBIG);

	/* one-sided: index bucket(s), then the record, for every key */
	for (uint64_t k = 1; k <= 100; k++) {
		struct dxl_record rec;
		memset(got, 0, sizeof(got));
		assert_int_equal(onesided_find(t1, k * 1000, &rec, got, sizeof(got)),
				 DXL_INDEX_FOUND);
		fill(v, 64, k);
		assert_int_equal(rec.len, 64 - k % 7);
		assert_memory_equal(got, v, rec.len);
		assert_int_equal(rec.ts, 77 + k);
	}
	struct dxl_record rec;
	assert_int_equal(onesided_find(t1, 4242, &rec, NULL, 0), DXL_INDEX_ABSENT);

	/* refusals; each changes nothing */
	struct dxl_table_req stale = {.table = 1, .epoch = e - 1, .key = 42000};
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &stale, &rep, got, sizeof(got)),
			 DXL_E_STALE);
	assert_int_equal(rep.epoch, e);
	assert_non_null(strstr(g.msg, "epoch"));
	stale.epoch = e + 1;
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &stale, &rep, got, sizeof(got)),
			 DXL_E_STALE);
	struct dxl_table_req ins = {.table = 1, .epoch = e - 1, .key = 77, .value = v, .len = 8};
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &ins, &rep, NULL, 0), DXL_E_STALE);
	ins.epoch = e;
	ins.table = 9;
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &ins, &rep, NULL, 0), DXL_E_NOENT);
	assert_non_null(strstr(g.msg, "no table 9"));
	ins.table = 1;
	ins.len = 65;
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &ins, &rep, NULL, 0), DXL_E_TOOBIG);
	assert_non_null(strstr(g.msg, "value size is 64"));
	ins.len = 8;
	ins.shard = 5;
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &ins, &rep, NULL, 0), DXL_E_UNAVAIL);
	assert_non_null(strstr(g.msg, "shard 5 is not in the configuration"));
	ins.shard = 0;
	/* malformed: short, a length that disagrees, a stray field */
	uint8_t raw[DXL_TABLE_REQ_SIZE + 16];
	int n = dxl_table_req_encode(DXL_RPC_ID_TABLE_INSERT, &ins, raw, sizeof(raw));
	assert_int_equal(n, DXL_TABLE_REQ_SIZE + 8);
	assert_int_equal(call_raw(DXL_RPC_ID_TABLE_INSERT, raw, 40, &rep), DXL_E_PROTO);
	assert_int_equal(rep.epoch, e);
	assert_int_equal(call_raw(DXL_RPC_ID_TABLE_INSERT, raw, (size_t)n - 1, &rep),
			 DXL_E_PROTO);
	raw[24] = 1; /* slot: not used by INSERT */
	assert_int_equal(call_raw(DXL_RPC_ID_TABLE_INSERT, raw, (size_t)n, &rep), DXL_E_PROTO);
	assert_non_null(strstr(g.msg, "slot is set but not used"));
	/* key 77 was never inserted: not by RPC, not in the index */
	struct dxl_table_req lk77 = {.table = 1, .epoch = e, .key = 77};
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &lk77, &rep, got, sizeof(got)),
			 DXL_E_NOENT);
	assert_int_equal(onesided_find(t1, 77, &rec, NULL, 0), DXL_INDEX_ABSENT);
	/* NIC-owned lock words: LOCK by RPC is refused */
	struct dxl_table_req lq = {.table = 1, .epoch = e, .slot = slot42, .owner = 5};
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOCK, &lq, &rep, NULL, 0), DXL_E_NOTSUP);

	/* write-back under a NIC lock (fabric CAS), then unlock by CAS */
	uint64_t owner = DXL_LOCK_OWNER(900, 1);
	fill(v, 64, 4242);
	struct dxl_table_req wb = {.table = 1, .epoch = e, .slot = slot42, .owner = owner,
				   .ts = 1000, .version = ver42 + 2, .value = v, .len = 64};
	assert_int_equal(call(DXL_RPC_ID_TABLE_WRITEBACK, &wb, &rep, NULL, 0), DXL_E_STATE);
	assert_int_equal(cas(t1, slot42, 0, owner), 0);
	wb.version = ver42 + 4; /* does not follow the record's version */
	assert_int_equal(call(DXL_RPC_ID_TABLE_WRITEBACK, &wb, &rep, NULL, 0), DXL_E_STATE);
	wb.version = ver42 + 2;
	wb.flags = DXL_TABLE_WB_UNLOCK; /* not with NIC-owned words */
	assert_int_equal(call(DXL_RPC_ID_TABLE_WRITEBACK, &wb, &rep, NULL, 0), DXL_E_NOTSUP);
	wb.flags = 0;
	assert_int_equal(call(DXL_RPC_ID_TABLE_WRITEBACK, &wb, &rep, NULL, 0), 0);
	assert_int_equal(rep.rec.version, ver42 + 2);
	/* a retry of the same write-back: nothing more happens */
	assert_int_equal(call(DXL_RPC_ID_TABLE_WRITEBACK, &wb, &rep, NULL, 0), 0);
	assert_int_equal(rep.rec.version, ver42 + 2);
	assert_int_equal(onesided_find(t1, 42000, &rec, got, sizeof(got)), DXL_INDEX_FOUND);
	assert_int_equal(rec.version, ver42 + 2);
	assert_int_equal(rec.ts, 1000);
	assert_memory_equal(got, v, 64);

	/* delete: without the lock refused; with it done; index entry gone */
	struct dxl_table_req del = {.table = 1, .epoch = e, .key = 42000, .owner = owner + 1,
				    .ts = 1001};
	assert_int_equal(call(DXL_RPC_ID_TABLE_DELETE, &del, &rep, NULL, 0), DXL_E_STATE);
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got)), 0);
	del.owner = owner;
	assert_int_equal(call(DXL_RPC_ID_TABLE_DELETE, &del, &rep, NULL, 0), 0);
	assert_int_equal(rep.slot, slot42);
	assert_false(rep.rec.live);
	assert_int_equal(rep.rec.inc, inc42 + 1);
	assert_int_equal(cas(t1, slot42, owner, 0), owner);
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got)),
			 DXL_E_NOENT);
	assert_int_equal(call(DXL_RPC_ID_TABLE_DELETE, &del, &rep, NULL, 0), DXL_E_NOENT);
	assert_int_equal(onesided_find(t1, 42000, &rec, NULL, 0), DXL_INDEX_ABSENT);
	/* the slot itself, READ one-sidedly: free, incarnation + 1 */
	uint8_t sl[DXL_RECORD_MAX_SLOT];
	rd(t1->t.records.addr + slot42 * t1->t.slot_size, t1->t.records.rkey,
	   t1->t.slot_size, sl);
	assert_int_equal(dxl_record_read_check(sl, t1->t.slot_size, &rec, NULL, 0), 0);
	assert_false(rec.live);
	assert_int_equal(rec.inc, inc42 + 1);

	/* another primary for shard 0: this node refuses, naming it */
	uint64_t e2 = set_config(zk, 0, 7, "127.0.0.1:1");
	wait_desc(zk, 1, p, e2, &d, logf);
	lk.epoch = e2;
	lk.key = 1000;
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got)),
			 DXL_E_UNAVAIL);
	assert_int_equal(rep.primary, 7);
	assert_int_equal(rep.epoch, e2);
	assert_non_null(strstr(g.msg, "not the primary of shard 0 (node 7 is)"));
	client_close();

	/* restart: the store reopened, the index rebuilt, records kept */
	stop(p, logf);
	p = spawn(logf, true, 1, dir, tables);
	wait_desc(zk, 1, p, 0, &d, logf);
	uint64_t e3 = set_config(zk, 0, 1, d.addr);
	wait_tables(zk, 1, p, e3, &d, logf);
	client_open(&d);
	t1 = dxl_replica_desc_table(&d, 0, 1);
	const struct dxl_shard_table *t2 = dxl_replica_desc_table(&d, 0, 2);
	assert_non_null(t1);
	assert_non_null(t2);
	for (uint64_t k = 1; k <= 100; k++) {
		int r = onesided_find(t1, k * 1000, &rec, got, sizeof(got));
		if (k == 42) {
			assert_int_equal(r, DXL_INDEX_ABSENT);
			continue;
		}
		assert_int_equal(r, DXL_INDEX_FOUND);
		fill(v, 64, k);
		assert_int_equal(rec.len, 64 - k % 7);
		assert_memory_equal(got, v, rec.len);
		lk = (struct dxl_table_req){.table = 1, .epoch = e3, .key = k * 1000};
		assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got)), 0);
		assert_memory_equal(got, v, rec.len);
	}
	for (uint64_t k = 1; k <= 10; k++) {
		assert_int_equal(onesided_find(t2, k, &rec, got, sizeof(got)), DXL_INDEX_FOUND);
		fill(v, 200, k + 500);
		assert_memory_equal(got, v, 200);
	}
	/* a new insert reuses free slots, its version above every earlier one */
	ins = (struct dxl_table_req){.table = 1, .epoch = e3, .key = 42000, .value = v, .len = 3};
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &ins, &rep, NULL, 0), 0);
	assert_true(rep.rec.version > ver42 + 4);
	assert_int_equal(onesided_find(t1, 42000, &rec, got, sizeof(got)), DXL_INDEX_FOUND);
	client_close();
	stop(p, logf);
	char out[65536];
	dxlt_slurp(logf, out, sizeof(out));
	assert_non_null(strstr(out, "event=index_rebuilt shard=0 table=1 keys=99"));
	assert_non_null(strstr(out, "event=index_rebuilt shard=0 table=2 keys=10"));
	dxl_zk_delete(&zk);
	alarm(0);
}

static void test_rpc_cpu(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(60);
	new_cluster();
	struct dxl_zk *zk = zk_open();
	char dir[256], logf[256];
	snprintf(dir, sizeof(dir), "%s/cpu", g_tmp);
	snprintf(logf, sizeof(logf), "%s/cpu.out", g_tmp);
	const char *tables[] = {"-o", TABLES, "-o", "engine.lock_mode=cpu", NULL};
	pid_t p = spawn(logf, false, 3, dir, tables);
	static struct dxl_replica_desc d;
	wait_desc(zk, 3, p, 0, &d, logf);
	uint64_t e = set_config(zk, 0, 3, d.addr);
	wait_tables(zk, 3, p, e, &d, logf);
	const struct dxl_shard_table *t2 = dxl_replica_desc_table(&d, 0, 2);
	assert_non_null(t2);
	assert_int_equal(t2->t.lock_mode, DXL_LOCKS_CPU);
	client_open(&d);
	struct dxl_table_rep rep;
	uint8_t v[256], got[256];
	fill(v, 200, 1);
	struct dxl_table_req ins = {.table = 2, .epoch = e, .key = 5, .ts = 10, .value = v,
				    .len = 200};
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &ins, &rep, NULL, 0), 0);
	uint64_t slot = rep.slot, ver = rep.rec.version;
	/* table 2 holds 16 records: the 17th insert is DXL_E_FULL, nothing changed */
	for (uint64_t k = 6; k < 21; k++) {
		ins.key = k;
		assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &ins, &rep, NULL, 0), 0);
	}
	ins.key = 21;
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &ins, &rep, NULL, 0), DXL_E_FULL);
	struct dxl_record rec;
	assert_int_equal(onesided_find(t2, 21, &rec, NULL, 0), DXL_INDEX_ABSENT);

	/* lock + version in one RPC; another owner is told who holds it */
	uint64_t a = DXL_LOCK_OWNER(900, 7), b = DXL_LOCK_OWNER(901, 1);
	struct dxl_table_req lq = {.table = 2, .epoch = e, .slot = slot, .owner = a};
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOCK, &lq, &rep, NULL, 0), 0);
	assert_int_equal(rep.rec.version, ver);
	assert_int_equal(rep.rec.key, 5);
	lq.owner = b;
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOCK, &lq, &rep, NULL, 0), DXL_E_BUSY);
	assert_int_equal(rep.holder, a);
	/* the lock word, READ one-sidedly (peers may READ CPU-owned words) */
	uint64_t w = 0;
	rd(t2->t.locks.addr + 8 * slot, t2->t.locks.rkey, 8, &w);
	assert_int_equal(w, a);
	/* unlock by the wrong owner: refused */
	struct dxl_table_req uq = {.table = 2, .epoch = e, .slot = slot, .owner = b};
	assert_int_equal(call(DXL_RPC_ID_TABLE_UNLOCK, &uq, &rep, NULL, 0), DXL_E_STATE);
	/* write-back + unlock in one RPC */
	fill(v, 200, 99);
	struct dxl_table_req wb = {.table = 2, .epoch = e, .slot = slot, .owner = a, .ts = 11,
				   .version = 0, .flags = DXL_TABLE_WB_UNLOCK, .value = v,
				   .len = 150};
	assert_int_equal(call(DXL_RPC_ID_TABLE_WRITEBACK, &wb, &rep, NULL, 0), 0);
	assert_int_equal(rep.rec.version, ver + 2);
	rd(t2->t.locks.addr + 8 * slot, t2->t.locks.rkey, 8, &w);
	assert_int_equal(w, 0);
	assert_int_equal(onesided_find(t2, 5, &rec, got, sizeof(got)), DXL_INDEX_FOUND);
	assert_int_equal(rec.len, 150);
	assert_int_equal(rec.version, ver + 2);
	assert_memory_equal(got, v, 150);
	/* delete under a CPU lock, then unlock */
	lq.owner = b;
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOCK, &lq, &rep, NULL, 0), 0);
	struct dxl_table_req del = {.table = 2, .epoch = e, .key = 5, .owner = b, .ts = 12};
	assert_int_equal(call(DXL_RPC_ID_TABLE_DELETE, &del, &rep, NULL, 0), 0);
	uq.owner = b;
	assert_int_equal(call(DXL_RPC_ID_TABLE_UNLOCK, &uq, &rep, NULL, 0), 0);
	assert_int_equal(onesided_find(t2, 5, &rec, NULL, 0), DXL_INDEX_ABSENT);
	/* the freed slot takes key 21 now */
	ins.key = 21;
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &ins, &rep, NULL, 0), 0);
	assert_int_equal(rep.slot, slot);
	assert_int_equal(onesided_find(t2, 21, &rec, NULL, 0), DXL_INDEX_FOUND);
	client_close();
	stop(p, logf);
	dxl_zk_delete(&zk);
	alarm(0);
}

/* ---- issue 20: tombstones through the RPCs, idempotent DELETE, RESOLVE
 * keeps its lock ------------------------------------------------------------ */

static uint64_t lock_word(const struct dxl_shard_table *t, uint64_t slot)
{
	uint64_t w;
	rd(t->t.locks.addr + 8 * slot, t->t.locks.rkey, 8, &w);
	return w;
}

static void test_txn_rpcs(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(90);
	new_cluster();
	struct dxl_zk *zk = zk_open();
	char dir[256], logf[256];
	snprintf(dir, sizeof(dir), "%s/txr", g_tmp);
	snprintf(logf, sizeof(logf), "%s/txr.out", g_tmp);
	const char *tables[] = {"-o", TABLES, NULL};
	pid_t p = spawn(logf, false, 1, dir, tables);
	static struct dxl_replica_desc d;
	wait_desc(zk, 1, p, 0, &d, logf);
	uint64_t e = set_config(zk, 0, 1, d.addr);
	wait_tables(zk, 1, p, e, &d, logf);
	client_open(&d);
	const struct dxl_shard_table *t1 = dxl_replica_desc_table(&d, 0, 1);
	assert_non_null(t1);
	struct dxl_table_rep rep;
	uint8_t v[64];
	fill(v, 64, 5);
	struct dxl_table_req ins = {.table = 1, .epoch = e, .key = 5000, .ts = 100, .value = v,
				    .len = 64};
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &ins, &rep, NULL, 0), 0);
	assert_int_equal(rep.holder, 0); /* never here before */
	uint64_t slot = rep.slot, ver = rep.rec.version;

	/* a transaction X deletes it: lock (CAS), DELETE at its slot */
	uint64_t X = DXL_LOCK_OWNER(77, 1);
	assert_int_equal(cas(t1, slot, 0, X), 0);
	struct dxl_table_req del = {.table = 1, .epoch = e, .key = 5000, .owner = X, .ts = 300,
				    .slot = slot, .flags = DXL_TABLE_DEL_AT_SLOT};
	int r = call(DXL_RPC_ID_TABLE_DELETE, &del, &rep, NULL, 0);
	if (r)
		fail_msg("delete: %s", g.msg);
	assert_int_equal(rep.rec.version, ver + 2);
	/* LOOKUP: a versioned miss, the tombstone's version and timestamp */
	struct dxl_table_req lk = {.table = 1, .epoch = e, .key = 5000};
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, NULL, 0), DXL_E_NOENT);
	assert_int_equal(rep.rec.version, ver + 2);
	assert_int_equal(rep.rec.ts, 300);
	/* defect 5: the reply was lost, X retries: done already, not NOENT
	 * (which made the coordinator drop the lock without unlocking) */
	r = call(DXL_RPC_ID_TABLE_DELETE, &del, &rep, NULL, 0);
	if (r)
		fail_msg("delete retried: %s: %s", dxl_errname(r), g.msg);
	assert_int_equal(rep.slot, slot);
	assert_false(rep.rec.live);
	/* someone inserts the key again meanwhile (another slot): X's retry
	 * still answers from X's slot; another owner's does not */
	ins.ts = 400;
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &ins, &rep, NULL, 0), 0);
	assert_int_equal(rep.holder, 300); /* the absence it replaced */
	assert_true(rep.slot != slot);
	assert_true(rep.rec.version > ver + 2);
	assert_int_equal(call(DXL_RPC_ID_TABLE_DELETE, &del, &rep, NULL, 0), 0);
	struct dxl_table_req del2 = del;
	del2.owner = DXL_LOCK_OWNER(77, 2);
	assert_int_equal(call(DXL_RPC_ID_TABLE_DELETE, &del2, &rep, NULL, 0), DXL_E_STATE);
	/* X unlocks: its lock word was still there */
	assert_int_equal(cas(t1, slot, X, 0), X);

	/* RESOLVE forward keeps the lock (released by UNLOCK_COORD once the
	 * ring's watermark passed the record): the second path of defect 1 */
	fill(v, 64, 6);
	struct dxl_table_req i6 = {.table = 1, .epoch = e, .key = 6000, .ts = 100, .value = v,
				   .len = 64};
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &i6, &rep, NULL, 0), 0);
	uint64_t s6 = rep.slot, v6 = rep.rec.version;
	uint64_t T = DXL_LOCK_OWNER(78, 5);
	assert_int_equal(cas(t1, s6, 0, T), 0);
	struct dxl_table_req rs = {.table = 1, .epoch = e, .key = 6000, .owner = T,
				   .version = v6 + 2, .ts = 500, .flags = DXL_WS_UPDATE,
				   .value = v, .len = 32};
	r = call(DXL_RPC_ID_TABLE_RESOLVE, &rs, &rep, NULL, 0);
	if (r)
		fail_msg("resolve: %s", g.msg);
	assert_int_equal(rep.rec.version, v6 + 2);
	assert_int_equal(lock_word(t1, s6), T);
	struct dxl_table_req uc = {.epoch = e, .key = 78};
	assert_int_equal(call(DXL_RPC_ID_TABLE_UNLOCK_COORD, &uc, &rep, NULL, 0), 0);
	assert_int_equal(lock_word(t1, s6), 0);
	/* RESOLVE abort of an insert: deleted whatever version the log gave
	 * it (the log has the insert's commit version, lock version + 2) */
	uint64_t T2 = DXL_LOCK_OWNER(78, 6);
	struct dxl_table_req i7 = {.table = 1, .epoch = e, .key = 7000, .owner = T2, .value = v,
				   .len = 64};
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &i7, &rep, NULL, 0), 0);
	uint64_t s7 = rep.slot;
	struct dxl_table_req ra = {.table = 1, .epoch = e, .key = 7000, .owner = T2,
				   .version = rep.rec.version + 2,
				   .flags = DXL_WS_INSERT | DXL_TABLE_RESOLVE_ABORT};
	assert_int_equal(call(DXL_RPC_ID_TABLE_RESOLVE, &ra, &rep, NULL, 0), 0);
	lk.key = 7000;
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, NULL, 0), DXL_E_NOENT);
	assert_int_equal(lock_word(t1, s7), 0);

	/* issue 20 review 1: RESOLVE abort of an insert whose transaction
	 * holds the lock of a record that is not its insert (a committed one
	 * a gate locked for it): the record stays, the lock goes */
	fill(v, 64, 86);
	struct dxl_table_req i86 = {.table = 1, .epoch = e, .key = 8600, .ts = 100, .value = v,
				    .len = 64};
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &i86, &rep, NULL, 0), 0);
	uint64_t s86 = rep.slot, v86 = rep.rec.version;
	uint64_t X86 = DXL_LOCK_OWNER(79, 1);
	assert_int_equal(cas(t1, s86, 0, X86), 0);
	struct dxl_table_req ra86 = {.table = 1, .epoch = e, .key = 8600, .owner = X86,
				     .version = v86 - 10,
				     .flags = DXL_WS_INSERT | DXL_TABLE_RESOLVE_ABORT};
	assert_int_equal(call(DXL_RPC_ID_TABLE_RESOLVE, &ra86, &rep, NULL, 0), 0);
	lk.key = 8600;
	uint8_t got[64];
	r = call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got));
	if (r)
		fail_msg("the aborted insert's resolution deleted another's record: %s", dxl_errname(r));
	assert_int_equal(rep.rec.version, v86);
	assert_int_equal(lock_word(t1, s86), 0);
	/* a DELETE for another version changes nothing (an abort's delete of
	 * its own insert: never another record it holds the lock of) */
	assert_int_equal(cas(t1, s86, 0, X86), 0);
	struct dxl_table_req dv = {.table = 1, .epoch = e, .key = 8600, .owner = X86,
				   .slot = s86, .version = v86 + 2, .flags = DXL_TABLE_DEL_AT_SLOT};
	assert_int_equal(call(DXL_RPC_ID_TABLE_DELETE, &dv, &rep, NULL, 0), DXL_E_STATE);
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got)), 0);
	assert_int_equal(rep.rec.version, v86);
	assert_int_equal(cas(t1, s86, X86, 0), X86);

	/* issue 20 review 2: an aborted insert leaves the key's absence as
	 * it found it -- the tombstone's timestamp too (a reader of the
	 * absence orders its commit after the delete) */
	fill(v, 64, 85);
	struct dxl_table_req i85 = {.table = 1, .epoch = e, .key = 8500, .ts = 100, .value = v,
				    .len = 64};
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &i85, &rep, NULL, 0), 0);
	uint64_t s85 = rep.slot;
	uint64_t D85 = DXL_LOCK_OWNER(79, 2), Y85 = DXL_LOCK_OWNER(79, 3);
	assert_int_equal(cas(t1, s85, 0, D85), 0);
	struct dxl_table_req d85 = {.table = 1, .epoch = e, .key = 8500, .owner = D85, .ts = 1000,
				    .slot = s85, .flags = DXL_TABLE_DEL_AT_SLOT};
	assert_int_equal(call(DXL_RPC_ID_TABLE_DELETE, &d85, &rep, NULL, 0), 0);
	uint64_t tomb85 = rep.rec.version;
	assert_int_equal(cas(t1, s85, D85, 0), D85);
	/* Y inserts at its lock phase (no timestamp yet), then aborts: the
	 * DELETE of its insert carries no timestamp */
	i85.ts = 0;
	i85.owner = Y85;
	assert_int_equal(call(DXL_RPC_ID_TABLE_INSERT, &i85, &rep, NULL, 0), 0);
	assert_int_equal(rep.holder, 1000); /* the absence it replaces */
	struct dxl_table_req a85 = {.table = 1, .epoch = e, .key = 8500, .owner = Y85};
	assert_int_equal(call(DXL_RPC_ID_TABLE_DELETE, &a85, &rep, NULL, 0), 0);
	lk.key = 8500;
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, NULL, 0), DXL_E_NOENT);
	print_message("  key 8500: deleted at ts 1000 (version %" PRIu64 "), an insert aborted: the miss reports version %" PRIu64 " ts %" PRIu64 "\n",
		      tomb85, rep.rec.version, rep.rec.ts);
	if (rep.rec.ts != 1000)
		fail_msg("the aborted insert erased the tombstone's timestamp: a miss reports ts %" PRIu64
			 " (the delete was at 1000)", rep.rec.ts);
	assert_true(rep.rec.version > tomb85);
	client_close();
	stop(p, logf);
	dxl_zk_delete(&zk);
	alarm(0);
}

/* ---- step 4: a backup applies its log to its store ------------------------ */

/* append -- one record through the writer, acknowledged */
static void append(struct dxl_log_writer *w, const void *payload, uint32_t len)
{
	uint64_t ts = 0;
	int ret = dxl_log_writer_append(w, payload, len, 0, &ts);
	if (ret)
		fail_msg("append: %s", dxl_errmsg());
	struct dxl_log_writer_result res;
	uint64_t end = dxl_now_ms() + 20000;
	while (dxl_log_writer_pending(w)) {
		int n = dxl_log_writer_poll(w, &res, 1, 100);
		if (n == 1 && res.status)
			fail_msg("record not acknowledged: %s (%s)", dxl_errname(res.status),
				 dxl_log_writer_why(w));
		assert_true(dxl_now_ms() < end);
	}
}

static int encode_ws(const struct dxl_ws_entry *e, uint32_t n, uint8_t *buf, size_t cap)
{
	int len = dxl_writeset_encode(e, n, buf, cap);
	if (len < 0)
		fail_msg("writeset: %s", dxl_errmsg());
	return len;
}

/* wait_found -- until the backup's store (READ one-sidedly) shows key with
 * version v (0: until the key is absent); at most 10 s */
static void wait_version(const struct dxl_shard_table *t, uint64_t key, uint64_t v,
			 struct dxl_record *rec, void *val, uint32_t cap)
{
	uint64_t end = dxl_now_ms() + 10000;
	for (;;) {
		int r = onesided_find(t, key, rec, val, cap);
		if (v ? r == DXL_INDEX_FOUND && rec->version == v : r == DXL_INDEX_ABSENT)
			return;
		if (dxl_now_ms() > end)
			fail_msg("key %" PRIu64 " of table %u: %s (version %" PRIu64 "), wanted %s %" PRIu64,
				 key, t->t.id, r == DXL_INDEX_FOUND ? "found" : "not found",
				 rec->version, v ? "version" : "absent", v);
		usleep(10000);
	}
}

static void test_backup_apply(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(90);
	new_cluster();
	struct dxl_zk *zk = zk_open();
	char dir[2][256], logf[2][256];
	pid_t p[2];
	static struct dxl_replica_desc d[2];
	const char *tables[] = {"-o", TABLES, NULL};
	for (int i = 0; i < 2; i++) {
		snprintf(dir[i], sizeof(dir[i]), "%s/ap%d", g_tmp, i + 1);
		snprintf(logf[i], sizeof(logf[i]), "%s/ap%d.out", g_tmp, i + 1);
		p[i] = spawn(logf[i], false, (uint32_t)i + 1, dir[i], tables);
	}
	for (int i = 0; i < 2; i++)
		wait_desc(zk, (uint32_t)i + 1, p[i], 0, &d[i], logf[i]);
	/* shard 0: primary 1, backup 2 */
	struct dxl_cluster_config c;
	dxl_cluster_config_init(&c);
	c.epoch = 1;
	uint32_t b2 = 2;
	assert_int_equal(dxl_cluster_config_set_node(&c, 1, d[0].addr), 0);
	assert_int_equal(dxl_cluster_config_set_node(&c, 2, d[1].addr), 0);
	assert_int_equal(dxl_cluster_config_set_shard(&c, 0, 1, &b2, 1), 0);
	assert_int_equal(dxl_cluster_config_cas(zk, &c, DXL_ZK_VERSION_NONE, NULL), 0);
	dxl_cluster_config_clear(&c);
	for (int i = 0; i < 2; i++)
		wait_desc(zk, (uint32_t)i + 1, p[i], 1, &d[i], logf[i]);

	struct dxl_log_writer_cfg wc;
	dxl_log_writer_cfg_init(&wc);
	wc.shard = 0;
	struct dxl_log_writer *w = NULL;
	if (dxl_log_writer_new(zk, &wc, &w))
		fail_msg("writer: %s", dxl_errmsg());
	static uint8_t vals[64][64], buf[16384];
	struct dxl_ws_entry e[32];
	/* A: insert keys 1..30 (version 2) */
	for (uint32_t k = 1; k <= 30; k++) {
		fill(vals[k], 64, k);
		e[k - 1] = (struct dxl_ws_entry){.table = 1, .op = DXL_WS_INSERT, .key = k,
						 .version = 2, .value = vals[k], .len = 64};
	}
	append(w, buf, (uint32_t)encode_ws(e, 30, buf, sizeof(buf)));
	/* a record that is not a write set: passed over */
	append(w, "not a write set", 15);
	/* B: update 1..10 (version 4); C: delete 21..30 (version 4) */
	for (uint32_t k = 1; k <= 10; k++) {
		fill(vals[k + 32], 40, k + 1000);
		e[k - 1] = (struct dxl_ws_entry){.table = 1, .op = DXL_WS_UPDATE, .key = k,
						 .version = 4, .value = vals[k + 32], .len = 40};
	}
	append(w, buf, (uint32_t)encode_ws(e, 10, buf, sizeof(buf)));
	for (uint32_t k = 21; k <= 30; k++)
		e[k - 21] = (struct dxl_ws_entry){.table = 1, .op = DXL_WS_DELETE, .key = k,
						  .version = 4};
	/* D: table 2, key 7, in the same record */
	static uint8_t big[200];
	fill(big, 200, 77);
	e[10] = (struct dxl_ws_entry){.table = 2, .op = DXL_WS_INSERT, .key = 7, .version = 2,
				      .value = big, .len = 200};
	append(w, buf, (uint32_t)encode_ws(e, 11, buf, sizeof(buf)));
	assert_int_equal(dxl_log_writer_flush(w, 5000), 0);

	/* the backup's store, READ one-sidedly through its index */
	client_open(&d[1]);
	const struct dxl_shard_table *t1 = dxl_replica_desc_table(&d[1], 0, 1);
	const struct dxl_shard_table *t2 = dxl_replica_desc_table(&d[1], 0, 2);
	assert_non_null(t1);
	assert_non_null(t2);
	struct dxl_record rec;
	uint8_t got[256];
	for (uint64_t k = 1; k <= 30; k++) {
		memset(got, 0, sizeof(got));
		wait_version(t1, k, k <= 10 ? 4 : k <= 20 ? 2 : 0, &rec, got, sizeof(got));
		if (k <= 10) {
			assert_int_equal(rec.len, 40);
			assert_memory_equal(got, vals[k + 32], 40);
		} else if (k <= 20) {
			assert_int_equal(rec.len, 64);
			assert_memory_equal(got, vals[k], 64);
		}
	}
	wait_version(t2, 7, 2, &rec, got, sizeof(got));
	assert_memory_equal(got, big, 200);
	/* the backup serves no RPC: it is not the primary */
	struct dxl_table_rep rep;
	struct dxl_table_req lk = {.table = 1, .epoch = 1, .key = 11};
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got)),
			 DXL_E_UNAVAIL);
	assert_int_equal(rep.primary, 1);
	client_close();
	/* the primary did not apply its log: its store is written by
	 * coordinators (write-backs) */
	client_open(&d[0]);
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got)),
			 DXL_E_NOENT);
	client_close();

	/* restart the backup: the window is replayed at activation, and what
	 * is appended later is applied too */
	stop(p[1], logf[1]);
	p[1] = spawn(logf[1], true, 2, dir[1], tables);
	wait_desc(zk, 2, p[1], 1, &d[1], logf[1]);
	e[0] = (struct dxl_ws_entry){.table = 1, .op = DXL_WS_UPDATE, .key = 11, .version = 6,
				     .value = big, .len = 64};
	append(w, buf, (uint32_t)encode_ws(e, 1, buf, sizeof(buf)));
	assert_int_equal(dxl_log_writer_flush(w, 5000), 0);
	client_open(&d[1]);
	t1 = dxl_replica_desc_table(&d[1], 0, 1);
	wait_version(t1, 11, 6, &rec, got, sizeof(got));
	assert_memory_equal(got, big, 64);
	wait_version(t1, 1, 4, &rec, got, sizeof(got));
	wait_version(t1, 25, 0, &rec, got, sizeof(got));
	client_close();
	dxl_log_writer_delete(&w);
	for (int i = 0; i < 2; i++)
		stop(p[i], logf[i]);
	char out[65536];
	dxlt_slurp(logf[1], out, sizeof(out));
	if (!strstr(out, "event=apply_started shard=0"))
		fail_msg("backup log:\n%s", out);
	assert_null(strstr(out, "event=apply_stuck"));
	/* the primary applied its log once, at its promotion gate (nothing
	 * was logged yet), and never after: LOOKUP above found nothing */
	dxlt_slurp(logf[0], out, sizeof(out));
	assert_non_null(strstr(out, "event=gate_opened shard=0"));
	assert_non_null(strstr(out, "applied=0"));
	dxl_zk_delete(&zk);
	alarm(0);
}

/* ---- issue 20, defect 3: a promoted primary whose gate stopped waiting
 * gets the inserts in doubt too, and settles them once they are decided */

static uint64_t append_txn(struct dxl_log_writer *w, uint64_t txn, const void *payload,
			   uint32_t len)
{
	uint64_t ts = 0;
	uint32_t part = 0;
	if (dxl_log_writer_append_ex(w, payload, len, txn, &part, 1, &ts))
		fail_msg("append: %s", dxl_errmsg());
	struct dxl_log_writer_result res;
	uint64_t end = dxl_now_ms() + 20000;
	while (dxl_log_writer_pending(w)) {
		int n = dxl_log_writer_poll(w, &res, 1, 100);
		if (n == 1 && res.status)
			fail_msg("record not acknowledged: %s (%s)", dxl_errname(res.status),
				 dxl_log_writer_why(w));
		assert_true(dxl_now_ms() < end);
	}
	return ts;
}

static void test_gate_insert_in_doubt(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(120);
	new_cluster();
	struct dxl_zk *zk = zk_open();
	char dir[2][256], logf[2][256];
	pid_t p[2];
	static struct dxl_replica_desc d[2];
	/* a short session: the gate gives a writer 2 x 1 s */
	const char *tables[] = {"-o", TABLES, "-o", "zk.session_timeout_ms=1000", NULL};
	for (int i = 0; i < 2; i++) {
		snprintf(dir[i], sizeof(dir[i]), "%s/gd%d", g_tmp, i + 1);
		snprintf(logf[i], sizeof(logf[i]), "%s/gd%d.out", g_tmp, i + 1);
		p[i] = spawn(logf[i], false, (uint32_t)i + 1, dir[i], tables);
	}
	for (int i = 0; i < 2; i++)
		wait_desc(zk, (uint32_t)i + 1, p[i], 0, &d[i], logf[i]);
	struct dxl_cluster_config c;
	int32_t ver = DXL_ZK_VERSION_NONE;
	dxl_cluster_config_init(&c);
	c.epoch = 1;
	uint32_t b2 = 2, b1 = 1;
	assert_int_equal(dxl_cluster_config_set_node(&c, 1, d[0].addr), 0);
	assert_int_equal(dxl_cluster_config_set_node(&c, 2, d[1].addr), 0);
	assert_int_equal(dxl_cluster_config_set_shard(&c, 0, 1, &b2, 1), 0);
	assert_int_equal(dxl_cluster_config_cas(zk, &c, DXL_ZK_VERSION_NONE, NULL), 0);
	dxl_cluster_config_clear(&c);
	for (int i = 0; i < 2; i++)
		wait_desc(zk, (uint32_t)i + 1, p[i], 1, &d[i], logf[i]);

	/* a coordinator's writer: its records stay above the watermark until
	 * decided. X inserts key 8000, Y inserts key 8001: acknowledged (on
	 * both members), not decided (the coordinator is slow) */
	struct dxl_log_writer_cfg wc;
	dxl_log_writer_cfg_init(&wc);
	wc.shard = 0;
	wc.hold_until_decided = true;
	struct dxl_log_writer *w = NULL;
	if (dxl_log_writer_new(zk, &wc, &w))
		fail_msg("writer: %s", dxl_errmsg());
	uint64_t X = DXL_LOCK_OWNER(90, 1), Y = DXL_LOCK_OWNER(90, 2);
	static uint8_t vx[64], vy[64], buf[4096];
	fill(vx, 64, 8000);
	fill(vy, 64, 8001);
	struct dxl_ws_entry ex = {.table = 1, .op = DXL_WS_INSERT, .key = 8000, .version = 10,
				  .value = vx, .len = 64};
	struct dxl_ws_entry ey = {.table = 1, .op = DXL_WS_INSERT, .key = 8001, .version = 12,
				  .value = vy, .len = 64};
	uint64_t tx = append_txn(w, X, buf, (uint32_t)encode_ws(&ex, 1, buf, sizeof(buf)));
	uint64_t ty = append_txn(w, Y, buf, (uint32_t)encode_ws(&ey, 1, buf, sizeof(buf)));

	/* node 2 is promoted (node 1 stays a backup); the writer stays live
	 * and holds its watermark below X: the gate stops waiting after 2 s */
	assert_int_equal(dxl_cluster_config_read(zk, &c, &ver), 0);
	c.epoch++;
	assert_int_equal(dxl_cluster_config_set_shard(&c, 0, 2, &b1, 1), 0);
	assert_int_equal(dxl_cluster_config_cas(zk, &c, ver, NULL), 0);
	uint64_t e = c.epoch;
	dxl_cluster_config_clear(&c);
	uint64_t t0 = dxl_now_ms();
	while (!dxl_replica_desc_table(&d[1], 0, 1) || d[1].cfg_epoch < e) {
		struct dxl_log_writer_result res;
		dxl_log_writer_poll(w, &res, 1, 50); /* heartbeats: live, held */
		int ret = dxlt_replica_desc_wait(zk, 2, 1, p[1], 1000, &d[1], NULL);
		assert_int_equal(ret, 0);
		if (dxl_now_ms() - t0 > 20000)
			fail_msg("node 2 did not open its tables");
	}
	char out[65536];
	dxlt_slurp(logf[1], out, sizeof(out));
	if (!strstr(out, "writers_late=1"))
		fail_msg("the gate did not stop waiting for the writer:\n%s", out);
	client_open(&d[1]);
	const struct dxl_shard_table *t1 = dxl_replica_desc_table(&d[1], 0, 1);
	assert_non_null(t1);
	/* the inserts in doubt are there, held for their transactions */
	struct dxl_table_rep rep;
	uint8_t got[64];
	struct dxl_table_req lk = {.table = 1, .epoch = e, .key = 8000};
	int r = call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got));
	if (r)
		fail_msg("the committed insert in doubt is not at the new primary: %s", g.msg);
	assert_int_equal(rep.rec.version, 10);
	assert_memory_equal(got, vx, 64);
	uint64_t sx = rep.slot;
	assert_int_equal(lock_word(t1, sx), X);
	lk.key = 8001;
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got)), 0);
	uint64_t sy = rep.slot;
	assert_int_equal(lock_word(t1, sy), Y);
	/* the coordinator wakes up: X committed, Y aborted (a marker); both
	 * decided, the watermark passes them -- and its write-back never
	 * reaches the new primary (it wrote back at the old one) */
	uint8_t m[DXL_ABORT_SIZE];
	dxl_abort_marker_encode(Y, m, sizeof(m));
	uint64_t tm = append_txn(w, Y, m, sizeof(m));
	assert_int_equal(dxl_log_writer_decide(w, tx), 0);
	assert_int_equal(dxl_log_writer_decide(w, ty), 0);
	assert_int_equal(dxl_log_writer_decide(w, tm), 0);
	assert_int_equal(dxl_log_writer_flush(w, 5000), 0);
	uint64_t end = dxl_now_ms() + 10000;
	for (;;) {
		lk.key = 8001;
		r = call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got));
		if (r == DXL_E_NOENT && lock_word(t1, sx) == 0)
			break;
		if (dxl_now_ms() > end)
			fail_msg("not settled: key 8001 %s, key 8000's lock word 0x%" PRIx64,
				 r ? "absent" : "present", lock_word(t1, sx));
		usleep(20000);
	}
	assert_int_equal(lock_word(t1, sy), 0);
	lk.key = 8000;
	assert_int_equal(call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got)), 0);
	assert_int_equal(rep.rec.version, 10);
	client_close();
	dxl_log_writer_delete(&w);
	for (int i = 0; i < 2; i++)
		stop(p[i], logf[i]);
	dxlt_slurp(logf[1], out, sizeof(out));
	assert_non_null(strstr(out, "event=txn_settled"));
	dxl_zk_delete(&zk);
	alarm(0);
}

/*
 * Issue 20 review 1: an aborted insert in doubt must not delete another
 * transaction's committed record at a promoted primary. X inserted key
 * 8100 (its record acknowledged, undecided: its abort marker could not be
 * written yet); meanwhile -- its locks released at the old primary -- Z
 * inserted 8100 again and committed (decided). Node 2 is promoted: its gate
 * applies Z's record (8100 present, version 20) and recovers the locks of
 * what is in doubt. It used to lock Z's record for X (the key was present)
 * and, once X's marker landed, settle X's abort by deleting whatever record
 * X held: Z's committed insert vanished at the new primary while the
 * backups kept it. Now a present record that is not X's insert is not
 * locked for X, and an abort deletes only the insert's own version.
 */
static void test_gate_clobber(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(120);
	new_cluster();
	struct dxl_zk *zk = zk_open();
	char dir[2][256], logf[2][256];
	pid_t p[2];
	static struct dxl_replica_desc d[2];
	const char *tables[] = {"-o", TABLES, "-o", "zk.session_timeout_ms=1000", NULL};
	for (int i = 0; i < 2; i++) {
		snprintf(dir[i], sizeof(dir[i]), "%s/gc%d", g_tmp, i + 1);
		snprintf(logf[i], sizeof(logf[i]), "%s/gc%d.out", g_tmp, i + 1);
		p[i] = spawn(logf[i], false, (uint32_t)i + 1, dir[i], tables);
	}
	for (int i = 0; i < 2; i++)
		wait_desc(zk, (uint32_t)i + 1, p[i], 0, &d[i], logf[i]);
	struct dxl_cluster_config c;
	int32_t ver = DXL_ZK_VERSION_NONE;
	dxl_cluster_config_init(&c);
	c.epoch = 1;
	uint32_t b2 = 2, b1 = 1;
	assert_int_equal(dxl_cluster_config_set_node(&c, 1, d[0].addr), 0);
	assert_int_equal(dxl_cluster_config_set_node(&c, 2, d[1].addr), 0);
	assert_int_equal(dxl_cluster_config_set_shard(&c, 0, 1, &b2, 1), 0);
	assert_int_equal(dxl_cluster_config_cas(zk, &c, DXL_ZK_VERSION_NONE, NULL), 0);
	dxl_cluster_config_clear(&c);
	for (int i = 0; i < 2; i++)
		wait_desc(zk, (uint32_t)i + 1, p[i], 1, &d[i], logf[i]);

	/* X's writer: its insert of 8100 (version 10) acknowledged, undecided */
	struct dxl_log_writer_cfg wc;
	dxl_log_writer_cfg_init(&wc);
	wc.shard = 0;
	wc.hold_until_decided = true;
	struct dxl_log_writer *wx = NULL, *wz = NULL;
	if (dxl_log_writer_new(zk, &wc, &wx) || dxl_log_writer_new(zk, &wc, &wz))
		fail_msg("writer: %s", dxl_errmsg());
	uint64_t X = DXL_LOCK_OWNER(91, 1), Z = DXL_LOCK_OWNER(92, 1);
	static uint8_t vx[64], vz[64], buf[4096];
	fill(vx, 64, 81);
	fill(vz, 64, 82);
	struct dxl_ws_entry ex = {.table = 1, .op = DXL_WS_INSERT, .key = 8100, .version = 10,
				  .value = vx, .len = 64};
	struct dxl_ws_entry ez = {.table = 1, .op = DXL_WS_INSERT, .key = 8100, .version = 20,
				  .value = vz, .len = 64};
	uint64_t tx = append_txn(wx, X, buf, (uint32_t)encode_ws(&ex, 1, buf, sizeof(buf)));
	/* Z's insert of 8100 (version 20): committed, decided */
	uint64_t tz = append_txn(wz, Z, buf, (uint32_t)encode_ws(&ez, 1, buf, sizeof(buf)));
	assert_int_equal(dxl_log_writer_decide(wz, tz), 0);
	assert_int_equal(dxl_log_writer_flush(wz, 5000), 0);

	/* node 2 is promoted; X's writer stays live and holds: the gate stops
	 * waiting for it after 2 s */
	assert_int_equal(dxl_cluster_config_read(zk, &c, &ver), 0);
	c.epoch++;
	assert_int_equal(dxl_cluster_config_set_shard(&c, 0, 2, &b1, 1), 0);
	assert_int_equal(dxl_cluster_config_cas(zk, &c, ver, NULL), 0);
	uint64_t e = c.epoch;
	dxl_cluster_config_clear(&c);
	uint64_t t0 = dxl_now_ms();
	while (!dxl_replica_desc_table(&d[1], 0, 1) || d[1].cfg_epoch < e) {
		struct dxl_log_writer_result res;
		dxl_log_writer_poll(wx, &res, 1, 25);
		dxl_log_writer_poll(wz, &res, 1, 25);
		int ret = dxlt_replica_desc_wait(zk, 2, 1, p[1], 1000, &d[1], NULL);
		assert_int_equal(ret, 0);
		if (dxl_now_ms() - t0 > 20000)
			fail_msg("node 2 did not open its tables");
	}
	client_open(&d[1]);
	const struct dxl_shard_table *t1 = dxl_replica_desc_table(&d[1], 0, 1);
	assert_non_null(t1);
	struct dxl_table_rep rep;
	uint8_t got[64];
	struct dxl_table_req lk = {.table = 1, .epoch = e, .key = 8100};
	int r = call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got));
	if (r)
		fail_msg("Z's committed insert is not at the new primary: %s", g.msg);
	uint64_t slot = rep.slot;
	print_message("  after the gate: key 8100 version %" PRIu64 ", lock word 0x%" PRIx64 "\n",
		      rep.rec.version, lock_word(t1, slot));
	assert_int_equal(rep.rec.version, 20);
	if (lock_word(t1, slot) == X)
		print_message("  (Z's record is locked for X's insert in doubt)\n");
	/* X's coordinator wakes up: X aborted (a marker), decided */
	uint8_t m[DXL_ABORT_SIZE];
	dxl_abort_marker_encode(X, m, sizeof(m));
	uint64_t tm = append_txn(wx, X, m, sizeof(m));
	assert_int_equal(dxl_log_writer_decide(wx, tx), 0);
	assert_int_equal(dxl_log_writer_decide(wx, tm), 0);
	assert_int_equal(dxl_log_writer_flush(wx, 5000), 0);
	/* the gate's settle runs once the watermark passed X's record */
	char out[65536];
	uint64_t end = dxl_now_ms() + 10000;
	for (;;) {
		dxlt_slurp(logf[1], out, sizeof(out));
		if (strstr(out, "event=txn_settled") && lock_word(t1, slot) == 0)
			break;
		if (dxl_now_ms() > end)
			fail_msg("X's abort not settled: key 8100's lock word 0x%" PRIx64, lock_word(t1, slot));
		usleep(20000);
	}
	r = call(DXL_RPC_ID_TABLE_LOOKUP, &lk, &rep, got, sizeof(got));
	print_message("  after the settle: key 8100 %s (version %" PRIu64 ")\n", r ? "ABSENT" : "present",
		      rep.rec.version);
	if (r)
		fail_msg("X's aborted insert deleted Z's committed record at the new primary (a miss at version %" PRIu64 ")",
			 rep.rec.version);
	assert_int_equal(rep.rec.version, 20);
	assert_memory_equal(got, vz, 64);
	client_close();
	dxl_log_writer_delete(&wx);
	dxl_log_writer_delete(&wz);
	for (int i = 0; i < 2; i++)
		stop(p[i], logf[i]);
	dxl_zk_delete(&zk);
	alarm(0);
}

/* ---- a coordinator started before any replica registered ------------------ */

/* The coordinator's fabric provider is the replicas' (their descriptors name
 * it). Started while the configuration's replicas are not registered yet
 * (a cluster starting), it must wait for one -- a guessed provider (tcp)
 * could never reach verbs replicas, and every transaction then failed with
 * "connection refused" (the Soft-RoCE guest's test_txn, setup lost 5 min).
 * Without any registration within log_unavail_ms: DXL_E_UNAVAIL, said so. */
static void test_coord_waits_for_a_replica(void **state)
{
	(void)state;
	NEED_ZK();
	alarm(90);
	new_cluster();
	struct dxl_zk *zk = zk_open();
	set_config(zk, 0, 1, "127.0.0.1:1"); /* node 1: not running yet */
	struct dxl_coord_cfg cfg;
	dxl_coord_cfg_init(&cfg);
	cfg.log_unavail_ms = 700;
	struct dxl_coord *c = NULL;
	uint64_t t0 = dxl_now_ms();
	int ret = dxl_coord_new(zk, &cfg, &c);
	uint64_t took = dxl_now_ms() - t0;
	print_message("no replica registered: %s after %" PRIu64 " ms: %s\n",
		      ret ? dxl_errname(ret) : "started", took, ret ? dxl_errmsg() : "");
	if (!ret)
		dxl_coord_delete(&c);
	assert_int_equal(ret, DXL_E_UNAVAIL);
	assert_non_null(strstr(dxl_errmsg(), "no replica of the cluster registered"));
	assert_true(took >= 650);
	/* its registration must not be left behind */
	assert_null(c);

	/* the replica comes up while the coordinator waits: it starts, on the
	 * replica's provider */
	char dir[300], logf[300];
	snprintf(dir, sizeof(dir), "%s/cw1", g_tmp);
	snprintf(logf, sizeof(logf), "%s/cw1.out", g_tmp);
	const char *tables[] = {"-o", TABLES, NULL};
	pid_t p = spawn(logf, false, 1, dir, tables);
	cfg.log_unavail_ms = 60000;
	t0 = dxl_now_ms();
	ret = dxl_coord_new(zk, &cfg, &c);
	if (ret)
		fail_msg("coordinator: %s", dxl_errmsg());
	print_message("started %" PRIu64 " ms after the replica was spawned\n",
		      dxl_now_ms() - t0);
	struct dxl_replica_desc d;
	assert_int_equal(dxl_replica_desc_get(zk, 1, &d), 0);
	assert_int_equal(d.provider, dxlt_test_provider());
	dxl_coord_delete(&c);
	stop(p, logf);
	dxl_zk_delete(&zk);
	alarm(0);
}

int main(void)
{
	if (getenv("DXL_TEST_FILTER"))
		cmocka_set_test_filter(getenv("DXL_TEST_FILTER"));
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hosting),
		cmocka_unit_test(test_rpc_nic),
		cmocka_unit_test(test_rpc_cpu),
		cmocka_unit_test(test_txn_rpcs),
		cmocka_unit_test(test_backup_apply),
		cmocka_unit_test(test_gate_insert_in_doubt),
		cmocka_unit_test(test_gate_clobber),
		cmocka_unit_test(test_coord_waits_for_a_replica),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
