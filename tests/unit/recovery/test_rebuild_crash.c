/* test_rebuild_crash.c -- power failures inside the rebuild of a replica's store and hash indexes from checkpoint + log: after each (and after power failures during the recovery from one), reopening and rebuilding yields exactly the acknowledged state */
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/index.h"
#include "dxl/recovery.h"
#include "log/log_internal.h"
#include "replica/tables_internal.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/shard_fixture.h"

/*
 * The scene: a shard (tests/lib/shard_fixture.h) whose store holds the
 * acknowledged state (every transaction logged and applied); a checkpoint
 * of it at a log position; more transactions after it (in the log only
 * from there on). A replica's store that is stale (it holds the first
 * transactions only) and marked incomplete -- a node that received a state
 * transfer, or lost its store -- is rebuilt the way a replica starts:
 * dxl_tables_open (the store's slot scan, the hash indexes rebuilt from the
 * live slots, replica/tables.c), dxl_rcv_rebuild (the newest complete
 * checkpoint installed, then the mark removed: replica/catchup.c), then the
 * log replayed from the heads (dxl_recovery_replay, the applier's
 * activation; the indexes follow through the store's hooks).
 *
 * The power-failure model of CPU writes (dxl_test_persist_hook, log/
 * region.c): the store file's bytes as they were when the rebuilding
 * process started are durable (a shadow copy); every range the store
 * persists becomes durable (in 64-byte lines) when it is persisted. A power
 * failure strikes at a chosen persistence point -- the bytes at hand
 * written, not yet persisted -- and every 64-byte line of the store that
 * differs from the shadow is lost (put back to the shadow) or kept, by the
 * policy (each with p = 1/2, all, none); then the process is SIGKILLed.
 * The mark file is written and fsynced (durable when the call returns).
 *
 * Each round takes 1-3 power failures at random points of the rebuild (the
 * later ones strike the recovery from the earlier ones), then runs the
 * rebuild to its end and checks: the store holds exactly the live records
 * (key, version, timestamp, value) of the acknowledged state, and each hash
 * index finds every key at its slot and holds no other key.
 *
 * Coverage (printed; the test loops until the floors are met, bounded by a
 * deadline, then FAILS below them): power failures struck in the slot scan
 * at open, inside the install and inside the replay; distinct points
 * struck; lines lost and kept; torn slots found at reopen; second power
 * failures during a recovery; records and keys compared.
 *
 * Negatives (docs/recovery.md): with the mark removed before the install
 * (dxl_rcv_rebuild), or with a slot persisted only in part (persist_slot,
 * engine/store.c), acknowledged records are missing after a power failure.
 */

#define SHARD 5

static char g_dir[128];

/* shared with the rebuilding child (MAP_SHARED anonymous page) */
struct shared {
	char phase;             /* 'o' open, 'i' install, 'r' replay, 'd' done */
	uint64_t points;        /* persistence points seen in this run */
	uint64_t lost, kept;    /* lines at the strike */
	int struck;
};

struct pf {
	struct shared *sh;
	uint64_t crash_at;      /* 0: never */
	int policy;             /* 0 random, 1 drop all, 2 keep all */
	unsigned seed;
	struct dxl_region *r;   /* the store's region (the first one persisted) */
	uint8_t *shadow;        /* what is durable of its data part */
	uint64_t size;
};
static struct pf g_pf;

static void pf_hook(struct dxl_region *r, const void *addr, size_t len)
{
	struct pf *p = &g_pf;
	if (dxl_region_id(r)->kind != DXL_REGION_STORE)
		return;
	if (!p->r)
		p->r = r;
	DXL_ASSERTF(p->r == r, "a second store region was persisted");
	uint8_t *base = dxl_region_data(r);
	uint64_t off = (uint64_t)((const uint8_t *)addr - base);
	DXL_ASSERT(off + len <= p->size);
	p->sh->points++;
	if (p->sh->points == p->crash_at) {
		/* the power fails: un-persisted lines are lost or kept */
		for (uint64_t l = 0; l < p->size; l += 64) {
			uint64_t n = DXL_MIN(64, p->size - l);
			if (memcmp(base + l, p->shadow + l, n) == 0)
				continue;
			bool drop = p->policy == 1 || (p->policy == 0 && rand_r(&p->seed) % 2);
			if (drop) {
				memcpy(base + l, p->shadow + l, n);
				p->sh->lost++;
			} else {
				p->sh->kept++;
			}
		}
		p->sh->struck = 1;
		kill(getpid(), SIGKILL);
		for (;;)
			pause();
	}
	uint64_t a = off & ~63ull, b = DXL_MIN(DXL_ALIGN_UP(off + len, 64ull), p->size);
	memcpy(p->shadow + a, base + a, b - a);
}

/* the durable image of the store file's data part: its bytes now */
static void shadow_load(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	g_pf.size = (uint64_t)st.st_size - DXL_REGION_HDR_SIZE;
	free(g_pf.shadow);
	g_pf.shadow = malloc(g_pf.size);
	assert_non_null(g_pf.shadow);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, g_pf.shadow, g_pf.size, DXL_REGION_HDR_SIZE),
			 (ssize_t)g_pf.size);
	close(fd);
	g_pf.r = NULL;
}

static int open_tables(const char *dir, bool create, struct dxl_tables **t)
{
	struct dxl_tables_cfg tc = {.dir = dir, .cluster = DXLT_SHARD_ID.cluster,
				    .node_id = DXLT_SHARD_ID.node_id, .shard = SHARD,
				    .durability = DXL_DUR_PROCESS, .create = create,
				    .lock_mode = DXL_LOCKS_CPU, .tables = DXLT_SHARD_TABLES,
				    .ntables = 2};
	return dxl_tables_open(&tc, t);
}

static void phase(struct shared *sh, char c)
{
	if (sh)
		__atomic_store_n(&sh->phase, c, __ATOMIC_SEQ_CST);
}

/* the replica's start: open (scan, indexes), rebuild if marked, replay.
 * 0, or the first error (a child exits with it) */
static int rebuild(const char *dir, const struct dxl_logstore *ls, struct shared *sh,
		   struct dxl_tables **out)
{
	phase(sh, 'o');
	struct dxl_tables *t;
	int ret = open_tables(dir, false, &t);
	if (ret)
		return ret;
	if (dxl_rcv_marked(dir, SHARD, NULL, 0)) {
		phase(sh, 'i');
		ret = dxl_rcv_rebuild(dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, SHARD,
				      dxl_tables_store(t), ls, NULL, NULL);
	}
	if (!ret) {
		phase(sh, 'r');
		int n = dxl_recovery_replay(dxl_tables_store(t), ls, UINT64_MAX, NULL, NULL, NULL);
		ret = n < 0 ? n : 0;
	}
	phase(sh, 'd');
	if (ret || !out)
		dxl_tables_close(&t);
	else
		*out = t;
	return ret;
}

/* every live key of the acknowledged state is in t's store as it is there,
 * and each index finds it at its slot and holds no other key; returns the
 * records compared */
static uint64_t check_state(struct dxl_store *want, struct dxl_tables *t)
{
	struct dxl_store *s = dxl_tables_store(t);
	dxlt_shard_assert_same(want, s);
	uint64_t n = 0;
	for (int ti = 0; ti < 2; ti++) {
		const struct dxl_table_schema *sc = &DXLT_SHARD_TABLES[ti];
		struct dxl_index *ix = dxl_tables_index(t, sc->id);
		assert_non_null(ix);
		uint64_t live = 0;
		for (uint64_t slot = 0; slot < sc->capacity; slot++) {
			struct dxl_record r;
			if (dxl_store_read(want, sc->id, slot, &r, NULL, 0) || !r.live)
				continue;
			live++;
			uint64_t at;
			assert_int_equal(dxl_store_find(s, sc->id, r.key, &at), 0);
			struct dxl_index_loc loc;
			if (dxl_index_lookup(ix, r.key, &loc) != 0)
				fail_msg("table %u key %" PRIu64 ": not in the rebuilt index", sc->id,
					 r.key);
			assert_int_equal(loc.slot, at);
			n++;
		}
		struct dxl_index_stats is;
		dxl_index_stats(ix, &is);
		if (is.keys != live)
			fail_msg("table %u: the index holds %" PRIu64 " keys, the state %" PRIu64,
				 sc->id, is.keys, live);
	}
	return n;
}

static void copy_file(const char *from, const char *to)
{
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
	assert_int_equal(system(cmd), 0);
}

static void test_power_fail_during_rebuild(void **state)
{
	(void)state;
	unsigned budget_s = getenv("DXL_TEST_SANITIZER") ? 900 : 400;
	dxlt_watchdog_arm(budget_s + 120, "test_power_fail_during_rebuild");
	struct dxlt_shard sh;
	dxlt_shard_create(&sh, g_dir, "src", 1, 1 << 20, 41);
	/* the stale replica: the first 300 transactions (a tables store, as a
	 * replica's: tombstones kept, indexes) */
	char sdir[256], rdir[256], stale[400], store[400];
	snprintf(sdir, sizeof(sdir), "%s/stale", g_dir);
	snprintf(rdir, sizeof(rdir), "%s/node", g_dir);
	assert_int_equal(mkdir(sdir, 0755), 0);
	assert_int_equal(mkdir(rdir, 0755), 0);
	snprintf(stale, sizeof(stale), "%s/store-%u.dat", sdir, SHARD);
	snprintf(store, sizeof(store), "%s/store-%u.dat", rdir, SHARD);
	for (int i = 0; i < 300; i++)
		assert_int_equal(dxlt_shard_txn(&sh), 0);
	{
		struct dxl_tables *t;
		assert_int_equal(open_tables(sdir, true, &t), 0);
		assert_true(dxl_recovery_replay(dxl_tables_store(t), sh.log[0].ls, UINT64_MAX,
						NULL, NULL, NULL) > 0);
		dxl_tables_close(&t);
	}
	/* retention of everything, then the checkpoint (its start: the
	 * heads), then a few more: most keys are in the image only, so what
	 * the install wrote is not rewritten by the replay */
	for (int i = 0; i < 600; i++)
		assert_int_equal(dxlt_shard_txn(&sh), 0);
	assert_int_equal(dxlt_shard_retain(&sh, 0, 100000), 900);
	struct dxl_ckpt_info info;
	assert_int_equal(dxl_ckpt_write(rdir, &DXLT_SHARD_ID, sh.s, sh.log[0].ls, &info), 0);
	for (int i = 0; i < 60; i++)
		assert_int_equal(dxlt_shard_txn(&sh), 0);

	struct shared *shm = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				  -1, 0);
	assert_true(shm != MAP_FAILED);
	/* the points of one whole rebuild of the stale store (no strike) */
	uint64_t npoints;
	{
		copy_file(stale, store);
		assert_int_equal(dxl_rcv_mark_incomplete(rdir, SHARD, "xfer"), 0);
		memset(shm, 0, sizeof(*shm));
		g_pf = (struct pf){.sh = shm, .crash_at = 0};
		shadow_load(store);
		dxl_test_persist_hook = pf_hook;
		struct dxl_tables *t;
		int ret = rebuild(rdir, sh.log[0].ls, NULL, &t);
		dxl_test_persist_hook = NULL;
		if (ret)
			fail_msg("rebuild: %s", dxl_errmsg());
		check_state(sh.s, t);
		dxl_tables_close(&t);
		npoints = shm->points;
		assert_false(dxl_rcv_marked(rdir, SHARD, NULL, 0));
	}
	print_message("  one rebuild: %" PRIu64 " persistence points of the store\n", npoints);
	assert_true(npoints >= 100);

	/* floors */
	const uint64_t F_STRIKES = 150, F_OPEN_INSTALL = 50, F_REPLAY = 40, F_LOST = 200,
		       F_KEPT = 200, F_TORN = 5, F_SECOND = 20, F_POINTS = 100;
	uint64_t strikes = 0, by_phase[4] = {0}, lost = 0, kept = 0, torn = 0, second = 0,
		 compared = 0, rounds = 0, clean_runs = 0;
	uint8_t *hit = calloc(npoints + npoints / 4 + 2, 1);
	assert_non_null(hit);
	uint64_t distinct = 0;
	unsigned seed = 4242;
	uint64_t t0 = dxl_now_ms();
	for (;;) {
		bool floors = strikes >= F_STRIKES && by_phase[0] + by_phase[1] >= F_OPEN_INSTALL &&
			      by_phase[2] >= F_REPLAY && lost >= F_LOST && kept >= F_KEPT &&
			      torn >= F_TORN && second >= F_SECOND && distinct >= F_POINTS;
		if (floors || dxl_now_ms() - t0 > (uint64_t)budget_s * 1000 || rounds >= 5000)
			break;
		rounds++;
		copy_file(stale, store);
		assert_int_equal(dxl_rcv_mark_incomplete(rdir, SHARD, "xfer"), 0);
		int want = 1 + rand_r(&seed) % 3;
		for (int k = 0; k < want; k++) {
			memset(shm, 0, sizeof(*shm));
			uint64_t at = 1 + (uint64_t)rand_r(&seed) % (npoints + npoints / 8);
			int policy = rand_r(&seed) % 3;
			unsigned cseed = (unsigned)rand_r(&seed);
			pid_t pid = fork();
			assert_true(pid >= 0);
			if (pid == 0) {
				g_pf = (struct pf){.sh = shm, .crash_at = at, .policy = policy,
						   .seed = cseed};
				shadow_load(store);
				dxl_test_persist_hook = pf_hook;
				int ret = rebuild(rdir, sh.log[0].ls, shm, NULL);
				_exit(ret ? 3 : 0);
			}
			int status;
			assert_int_equal(waitpid(pid, &status, 0), pid);
			if (!shm->struck) {
				if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
					fail_msg("round %" PRIu64 ": the rebuild failed (status %d)", rounds,
						 status);
				clean_runs++;
				break; /* it finished before the chosen point */
			}
			assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
			strikes++;
			second += k > 0;
			lost += shm->lost;
			kept += shm->kept;
			switch (shm->phase) {
			case 'o': by_phase[0]++; break;
			case 'i': by_phase[1]++; break;
			case 'r': by_phase[2]++; break;
			default: by_phase[3]++; break;
			}
			if (at < npoints + npoints / 4 + 2 && !hit[at]) {
				hit[at] = 1;
				distinct++;
			}
		}
		/* the node starts again: the whole rebuild, then the check */
		struct dxl_tables *t;
		{
			struct dxl_store *s;
			assert_int_equal(dxl_store_open(store, DXL_DUR_PROCESS, &DXLT_SHARD_ID, NULL,
							&s), 0);
			struct dxl_store_stats st;
			assert_int_equal(dxl_store_stats(s, UINT32_MAX, &st), 0);
			torn += st.torn_at_open;
			dxl_store_close(&s);
		}
		int ret = rebuild(rdir, sh.log[0].ls, NULL, &t);
		if (ret)
			fail_msg("round %" PRIu64 ": rebuild after the power failures: %s", rounds,
				 dxl_errmsg());
		compared += check_state(sh.s, t);
		assert_false(dxl_rcv_marked(rdir, SHARD, NULL, 0));
		dxl_tables_close(&t);
	}
	free(hit);
	munmap(shm, 4096);
	dxlt_shard_close(&sh);
	print_message("  %" PRIu64 " rounds in %" PRIu64 " ms: %" PRIu64
		      " power failures (slot scan at open %" PRIu64 ", install %" PRIu64
		      ", replay %" PRIu64 ", after %" PRIu64 "), %" PRIu64
		      " of them during the recovery from another, %" PRIu64
		      " distinct points struck (of %" PRIu64 "), %" PRIu64
		      " rebuilds ended before their point; lines lost %" PRIu64 ", kept %" PRIu64
		      "; torn slots at reopen %" PRIu64 "; %" PRIu64
		      " records and index entries compared\n",
		      rounds, dxl_now_ms() - t0, strikes, by_phase[0], by_phase[1], by_phase[2],
		      by_phase[3], second, distinct, npoints, clean_runs, lost, kept, torn, compared);
	/* coverage floors */
	assert_true(strikes >= F_STRIKES);
	assert_true(by_phase[0] + by_phase[1] >= F_OPEN_INSTALL);
	assert_true(by_phase[2] >= F_REPLAY);
	assert_true(lost >= F_LOST);
	assert_true(kept >= F_KEPT);
	assert_true(torn >= F_TORN);
	assert_true(second >= F_SECOND);
	assert_true(distinct >= F_POINTS);
	dxlt_watchdog_disarm();
}

static int group_setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof(g_dir), "/tmp/dxl-test-rebuildcrash-XXXXXX");
	return mkdtemp(g_dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	free(g_pf.shadow);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
	return system(cmd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_power_fail_during_rebuild),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
