/* test_ckpt_crash.c -- power failure while a checkpoint is written (64-byte lines not yet persisted lost in any subset), and kill -9 while one is installed: the newest complete checkpoint is always whole, an install always finishes when redone */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/recovery.h"
#include "tests/lib/fabric_fixture.h"
#include "tests/lib/shard_fixture.h"

static char g_dir[128];

/*
 * The power-failure model of a checkpoint file (process durability: the
 * mapping is the page cache, so the test decides what a power failure
 * would have kept). shadow = what is durable: zeros at creation (the file
 * is created sparse and fsynced), then every range the writer persists.
 * At the chosen crash point every 64-byte line that differs from the
 * shadow is either kept or reverted to the shadow (policy), in the
 * mapping itself, before the writer stops.
 */
enum policy { P_RANDOM, P_DROP_ALL, P_KEEP_ALL };

struct pf {
	char path[512];
	uint8_t *shadow;
	uint64_t size;
	int points, crash_at;
	enum policy policy;
	unsigned seed;
	/* coverage */
	uint64_t lines_dropped, lines_kept, crashes;
};

static int pf_hook(void *arg, const char *path, const void *base, uint64_t off, uint64_t len)
{
	struct pf *p = arg;
	if (strcmp(p->path, path) != 0) {
		struct stat st;
		assert_int_equal(stat(path, &st), 0);
		snprintf(p->path, sizeof(p->path), "%s", path);
		free(p->shadow);
		p->size = (uint64_t)st.st_size - DXL_REGION_HDR_SIZE;
		p->shadow = calloc(1, p->size);
		assert_non_null(p->shadow);
	}
	if (len) {
		memcpy(p->shadow + off, (const uint8_t *)base + off, len);
		return 0;
	}
	if (++p->points != p->crash_at)
		return 0;
	uint8_t *b = (uint8_t *)base;
	for (uint64_t l = 0; l < p->size; l += 64) {
		if (memcmp(b + l, p->shadow + l, 64) == 0)
			continue;
		bool drop = p->policy == P_DROP_ALL ||
			    (p->policy == P_RANDOM && rand_r(&p->seed) % 2);
		if (drop) {
			memcpy(b + l, p->shadow + l, 64);
			p->lines_dropped++;
		} else {
			p->lines_kept++;
		}
	}
	p->crashes++;
	return 1;
}

struct collect {
	struct dxl_digest d;
};

static int collect_fn(void *arg, const struct dxl_ckpt_entry *e)
{
	struct collect *c = arg;
	if (e->flags == DXL_CKPT_LIVE)
		dxl_digest_add(&c->d, e->table, e->key, e->version, e->value, e->len);
	else
		dxl_digest_add_tombstone(&c->d, e->table, e->key, e->version);
	return 0;
}

/* live records, tombstones from the store's reclaim floors on (what its
 * checkpoints hold) */
static struct dxl_digest store_digest(struct dxl_store *s)
{
	struct dxl_digest d;
	dxlt_store_digest(s, NULL, &d);
	return d;
}

static void test_power_fail_during_checkpoint(void **state)
{
	(void)state;
	dxlt_watchdog_arm(300, "test_power_fail_during_checkpoint");
	int rounds = getenv("DXL_TEST_SANITIZER") ? 40 : 150;
	if (getenv("DXL_CRASH_SEEDS"))
		rounds = atoi(getenv("DXL_CRASH_SEEDS"));
	struct dxlt_shard sh;
	dxlt_shard_create(&sh, g_dir, "pf", 1, 1 << 20, 21);
	for (int i = 0; i < 300; i++)
		assert_int_equal(dxlt_shard_txn(&sh), 0);
	struct dxl_ckpt_info info;
	assert_int_equal(dxl_ckpt_write(g_dir, &DXLT_SHARD_ID, sh.s, sh.log[0].ls, &info), 0);
	uint64_t good_seq = info.seq;
	struct dxl_digest good = info.digest;
	struct pf p = {.seed = 77};
	uint64_t found_old = 0, found_new = 0, torn_manifests = 0, no_manifest = 0,
		 bad_entries = 0, incomplete = 0, no_crash = 0;
	for (int round = 0; round < rounds; round++) {
		for (int i = 0; i < 20; i++)
			assert_int_equal(dxlt_shard_txn(&sh), 0);
		struct dxl_digest want = store_digest(sh.s);
		struct dxl_store_stats sst;
		assert_int_equal(dxl_store_stats(sh.s, UINT32_MAX, &sst), 0);
		/* crash points: one per 64 entries, entries persisted, the two
		 * manifest halves; one more = no crash. A third of the rounds
		 * aim at the manifest */
		int npoints = (int)((want.records + want.tombstones) / 64) + 3;
		assert_int_equal(want.records, sst.live);
		p.points = 0;
		p.crash_at = round % 3 == 0 ? npoints - 2 + rand_r(&p.seed) % 3
					    : 1 + rand_r(&p.seed) % (npoints + 1);
		p.policy = (enum policy)(rand_r(&p.seed) % 3);
		if (round % 6 == 0) { /* the manifest written, not persisted */
			p.crash_at = npoints;
			p.policy = P_RANDOM;
		}
		p.path[0] = 0;
		dxl_ckpt_set_test_hook(pf_hook, &p);
		int ret = dxl_ckpt_write(g_dir, &DXLT_SHARD_ID, sh.s, sh.log[0].ls, &info);
		dxl_ckpt_set_test_hook(NULL, NULL);
		if (ret == 0)
			no_crash++;
		else
			assert_int_equal(ret, DXL_E_INTERNAL);
		/* after the power failure: the newest complete checkpoint is
		 * the old one or the new one, whole */
		struct dxl_ckpt *c;
		struct dxl_ckpt_scan scan;
		assert_int_equal(dxl_ckpt_find(g_dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, sh.shard, &c,
					       &scan), 0);
		const struct dxl_ckpt_info *ci = dxl_ckpt_get_info(c);
		struct collect col = {{0}};
		assert_int_equal(dxl_ckpt_foreach(c, collect_fn, &col), 0);
		assert_true(dxl_digest_equal(&col.d, &ci->digest));
		if (ci->seq == good_seq) {
			assert_true(dxl_digest_equal(&ci->digest, &good));
			found_old++;
		} else {
			assert_true(ci->seq > good_seq);
			assert_true(dxl_digest_equal(&ci->digest, &want));
			found_new++;
			good_seq = ci->seq;
			good = want;
		}
		dxl_ckpt_close(&c);
		if (ret != 0 && strlen(p.path) && access(p.path, F_OK) == 0 && scan.incomplete) {
			incomplete++;
			ret = dxl_ckpt_open(p.path, DXL_DUR_PROCESS, &DXLT_SHARD_ID, &c);
			if (ret == 0) {
				dxl_ckpt_close(&c); /* the crash came after the commit */
			} else if (strstr(dxl_errmsg(), "no manifest")) {
				no_manifest++;
			} else if (strstr(dxl_errmsg(), "manifest checksum") ||
				   strstr(dxl_errmsg(), "bad magic")) {
				torn_manifests++;
			} else if (strstr(dxl_errmsg(), "entries of table")) {
				bad_entries++;
			}
		}
		assert_true(dxl_ckpt_prune(g_dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, sh.shard, 1) >= 0);
	}
	free(p.shadow);
	dxlt_shard_close(&sh);
	print_message("  %d power failures planned: %" PRIu64 " crashes, %" PRIu64
		      " runs without one; lines lost %" PRIu64 ", kept %" PRIu64
		      "; found the old checkpoint %" PRIu64 " times, the new one %" PRIu64
		      "; cut files ignored %" PRIu64 " (no manifest %" PRIu64
		      ", torn manifest %" PRIu64 ", damaged entries %" PRIu64 ")\n",
		      rounds, p.crashes, no_crash, p.lines_dropped, p.lines_kept, found_old,
		      found_new, incomplete, no_manifest, torn_manifests, bad_entries);
	/* coverage floors: what a power failure can do was really done */
	assert_true(p.crashes >= (uint64_t)rounds / 2);
	assert_true(p.lines_dropped >= (uint64_t)rounds);
	assert_true(p.lines_kept >= (uint64_t)rounds);
	assert_true(found_old >= (uint64_t)rounds / 4);
	assert_true(found_new >= 3);
	uint64_t some = (uint64_t)DXL_MAX(1, rounds / 50);
	assert_true(no_manifest >= some);
	assert_true(torn_manifests >= some);
	dxlt_watchdog_disarm();
}

/*
 * kill -9 while a checkpoint is installed into a replica's store: reopened
 * (torn slots found), installed again: the store is the image, the log
 * brings it to the primary's state. Every store write is persisted before
 * the next one starts, so what a power failure could lose is the slot being
 * written: what a kill at a random moment leaves torn.
 */
static void test_kill_during_install(void **state)
{
	(void)state;
	dxlt_watchdog_arm(300, "test_kill_during_install");
	int rounds = getenv("DXL_TEST_SANITIZER") ? 10 : 40; /* kills inside an install */
	struct dxlt_shard sh;
	dxlt_shard_create(&sh, g_dir, "k", 1, 1 << 20, 31);
	for (int i = 0; i < 300; i++)
		assert_int_equal(dxlt_shard_txn(&sh), 0);
	/* the replica's stale state: the first 300 transactions */
	char stale[400];
	snprintf(stale, sizeof(stale), "%s/k.stale", g_dir);
	{
		struct dxl_store *b = dxlt_shard_new_store(&sh, stale);
		assert_true(dxl_recovery_replay(b, sh.log[0].ls, UINT64_MAX, NULL, NULL, NULL) > 0);
		dxl_store_close(&b);
	}

	for (int i = 0; i < 600; i++)
		assert_int_equal(dxlt_shard_txn(&sh), 0);
	struct dxl_ckpt_info info;
	assert_int_equal(dxl_ckpt_write(g_dir, &DXLT_SHARD_ID, sh.s, sh.log[0].ls, &info), 0);
	struct dxl_ckpt *c;
	assert_int_equal(dxl_ckpt_find(g_dir, DXL_DUR_PROCESS, &DXLT_SHARD_ID, sh.shard, &c, NULL),
			 0);
	/* how long one install takes here: the kills land inside it */
	uint64_t t_us;
	{
		char path[400], cmd[1000];
		snprintf(path, sizeof(path), "%s/k.dry", g_dir);
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", stale, path);
		assert_int_equal(system(cmd), 0);
		struct dxl_store *b;
		assert_int_equal(dxl_store_open(path, DXL_DUR_PROCESS, &DXLT_SHARD_ID, NULL, &b), 0);
		uint64_t t0 = dxl_now_ns();
		int iret = dxl_ckpt_install(b, c, NULL);
		if (iret)
			fail_msg("install: %s", dxl_errmsg());
		t_us = (dxl_now_ns() - t0) / 1000 + 1;
		dxl_store_close(&b);
		unlink(path);
	}
	unsigned seed = 9;
	uint64_t torn = 0, partial = 0, done_before_kill = 0, inside = 0;
	/* the kill delay adapts: shorter after a kill that came too late */
	uint64_t range = t_us + t_us / 4;
	int round = 0;
	for (; round < 8 * rounds && inside < (uint64_t)rounds; round++) {
		char path[400], cmd[1000];
		snprintf(path, sizeof(path), "%s/k.r%d", g_dir, round);
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", stale, path);
		assert_int_equal(system(cmd), 0);
		int pp[2];
		assert_int_equal(pipe(pp), 0);
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(pp[0]);
			/* over and over: the stale store put in place (a copy
			 * renamed over it: atomic), then the install; the kill
			 * lands anywhere */
			char tmp[500];
			snprintf(tmp, sizeof(tmp), "%s.tmp", path);
			for (bool first = true;; first = false) {
				snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", stale, tmp);
				if (!first && (system(cmd) != 0 || rename(tmp, path) != 0))
					_exit(5);
				struct dxl_store *b;
				if (dxl_store_open(path, DXL_DUR_PROCESS, &DXLT_SHARD_ID, NULL, &b))
					_exit(2);
				if (write(pp[1], "i", 1) != 1)
					_exit(3);
				if (dxl_ckpt_install(b, c, NULL))
					_exit(4);
				if (write(pp[1], "d", 1) != 1)
					_exit(3);
				dxl_store_close(&b);
			}
		}
		close(pp[1]);
		char x;
		assert_int_equal(read(pp[0], &x, 1), 1);
		usleep((useconds_t)(rand_r(&seed) % range));
		kill(pid, SIGKILL);
		int status;
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFSIGNALED(status));
		/* 'i' = an install started, 'd' = it ended */
		char tail = 'i';
		while (read(pp[0], &x, 1) == 1)
			tail = x;
		close(pp[0]);
		inside += tail == 'i';
		range = tail == 'i' ? range + range / 8 : DXL_MAX(range - range / 4, 20);
		struct dxl_store *b;
		assert_int_equal(dxl_store_open(path, DXL_DUR_PROCESS, &DXLT_SHARD_ID, NULL, &b), 0);
		struct dxl_store_stats st0;
		assert_int_equal(dxl_store_stats(b, UINT32_MAX, &st0), 0);
		torn += st0.torn_at_open;
		struct dxl_install_stats ist;
		assert_int_equal(dxl_ckpt_install(b, c, &ist), 0);
		if (ist.written || ist.removed)
			partial++;
		else
			done_before_kill++;
		dxlt_shard_assert_same(sh.s, b);
		dxl_store_close(&b);
		unlink(path);
	}
	dxl_ckpt_close(&c);
	dxlt_shard_close(&sh);
	print_message("  one install: %" PRIu64 " us\n", t_us);
	print_message("  %d kills: %" PRIu64 " inside an install; %" PRIu64
		      " left the store unlike the image (finished by installing again), %" PRIu64
		      " after a complete install; %" PRIu64 " torn slots found at open\n",
		      round, inside, partial, done_before_kill, torn);
	assert_true(inside >= (uint64_t)rounds);
	assert_true(partial >= (uint64_t)rounds / 2);
	dxlt_watchdog_disarm();
}

static int group_setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof(g_dir), "/tmp/dxl-test-ckptcrash-XXXXXX");
	return mkdtemp(g_dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
	return system(cmd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_power_fail_during_checkpoint),
		cmocka_unit_test(test_kill_during_install),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
