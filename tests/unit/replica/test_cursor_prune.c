/* test_cursor_prune.c -- which consumer-group cursors a shard's primary drops (replica/catchup.c dxl_rcvm_prune_decide): a dead node's need cursor only after the primary has seen it unchanged for recovery.need_cursor_ttl_ms on its own monotonic clock, whatever the skew between its wall clock and ZooKeeper's mtime; and whom the size cap's event=retention_cap names (dxl_rcvm_cap_groups) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/common.h"
#include "replica/catchup_internal.h"

#define TTL 3000u
#define LOOK_MS 5000u /* the primary looks every PRUNE_PERIOD_MS */
#define HOUR 3600000ll

/*
 * Listings as ZooKeeper gives them: mtime_ms is ZooKeeper's clock when
 * the cursor was last set. The primary (node 1, members 1-3; node 4 is
 * live and catching up, node 9 died right after it set its cursor) looks
 * every 5 s. ZooKeeper's clock is `skew` away from the primary's wall clock
 * -- which, before, was compared with mtime_ms: an hour ahead dropped
 * node 9's cursor (and a catching-up node's, once it died for a moment) at
 * the first look; an hour behind never dropped it.
 */
static uint64_t look(int64_t skew, uint64_t *drop4)
{
	struct dxl_rcv_watch w;
	memset(&w, 0, sizeof(w));
	uint32_t members[] = {1, 2, 3}, live[] = {1, 2, 3, 4};
	/* ZooKeeper's clock at the first look (the primary's is dxl_wall_ms) */
	uint64_t zk_now = (uint64_t)((int64_t)dxl_wall_ms() - skew);
	uint64_t set9 = zk_now - 200;                          /* node 9's last set */
	uint64_t set4 = zk_now - 100;
	uint64_t dropped9 = UINT64_MAX;
	*drop4 = UINT64_MAX;
	for (uint64_t t = 0; t <= 60000; t += LOOK_MS) {
		/* node 4 sets its cursor every 2 s while it is alive */
		if (t <= 30000)
			set4 = zk_now + t - (t % 2000);
		struct dxl_cursor_info v[4];
		memset(v, 0, sizeof(v));
		snprintf(v[0].group, sizeof(v[0].group), "dxl-recovery-9");
		v[0].next_ts = 77;
		v[0].mtime_ms = set9;
		snprintf(v[1].group, sizeof(v[1].group), "dxl-recovery-4");
		v[1].next_ts = 88;
		v[1].mtime_ms = set4;
		snprintf(v[2].group, sizeof(v[2].group), "app-consumer");
		v[2].next_ts = 1;
		v[2].mtime_ms = set9 - 100000000; /* years ago: never dropped */
		snprintf(v[3].group, sizeof(v[3].group), "dxl-ckpt-2");
		v[3].next_ts = 5;
		v[3].mtime_ms = set9;
		uint32_t n = dropped9 == UINT64_MAX ? 4 : 3;
		struct dxl_cursor_info *vv = dropped9 == UINT64_MAX ? v : v + 1;
		struct dxl_rcvm_prune_in in = {.self = 1, .ttl_ms = TTL, .now_ms = 123456 + t,
					       .members = members, .nmembers = 3, .live = live,
					       .nlive = 4};
		const char *why[4];
		uint64_t age[4];
		dxl_rcvm_prune_decide(&w, &in, vv, n, why, age);
		for (uint32_t k = 0; k < n; k++) {
			if (!why[k])
				continue;
			if (strcmp(vv[k].group, "dxl-recovery-9") == 0)
				dropped9 = t;
			else if (strcmp(vv[k].group, "dxl-recovery-4") == 0 && *drop4 == UINT64_MAX)
				*drop4 = t; /* the first time (the listing keeps it) */
			else if (strcmp(vv[k].group, "dxl-recovery-4") == 0)
				continue;
			else
				fail_msg("%s dropped: %s", vv[k].group, why[k]);
		}
		/* node 4 dies at 30 s: its cursor is set no more */
		if (t >= 30000)
			live[3] = 0;
	}
	return dropped9;
}

static void test_ttl_is_skew_free(void **state)
{
	(void)state;
	int64_t skews[] = {HOUR, -HOUR, 150000, -150000, 0};
	for (size_t k = 0; k < sizeof(skews) / sizeof(skews[0]); k++) {
		uint64_t d4;
		uint64_t d9 = look(skews[k], &d4);
		print_message("  the primary's clock %+lld ms from ZooKeeper's: node 9's cursor "
			      "dropped at the look at %llu ms, node 4's (dead at 30 s) at %llu ms\n",
			      (long long)skews[k], (unsigned long long)d9, (unsigned long long)d4);
		/* first look at 0: unchanged for 5 s >= TTL at the second */
		assert_int_equal(d9, LOOK_MS);
		/* node 4 last set its cursor at 30 s (seen at the look at 30
		 * s, unchanged at 35 s); it is dead from then: dropped at 35 s,
		 * never while it was alive */
		assert_int_equal(d4, 35000);
	}
}

static void test_members_and_checkpoints(void **state)
{
	(void)state;
	struct dxl_rcv_watch w;
	memset(&w, 0, sizeof(w));
	uint32_t members[] = {1, 2, 3}, live[] = {1, 2, 3};
	struct dxl_cursor_info v[5];
	memset(v, 0, sizeof(v));
	const char *g[5] = {"dxl-recovery-2", "dxl-ckpt-7", "dxl-ckpt-3", "dxl-recovery-1",
			    "dxl-recovery-x"};
	for (int k = 0; k < 5; k++)
		snprintf(v[k].group, sizeof(v[k].group), "%s", g[k]);
	struct dxl_rcvm_prune_in in = {.self = 1, .ttl_ms = TTL, .now_ms = 10, .members = members,
				       .nmembers = 3, .live = live, .nlive = 3};
	const char *why[5];
	uint64_t age[5];
	dxl_rcvm_prune_decide(&w, &in, v, 5, why, age);
	assert_non_null(why[0]); /* a member's need cursor: it caught up */
	assert_non_null(why[1]); /* a checkpoint cursor of a node not a member */
	assert_null(why[2]);     /* a member's checkpoint cursor */
	assert_null(why[3]);     /* its own */
	assert_null(why[4]);     /* not a node's */
}

/* the size cap's line names who lost what (dxl_rcvm_cap_groups) */
static void test_cap_names_the_groups(void **state)
{
	(void)state;
	struct dxl_cursor_info v[5];
	memset(v, 0, sizeof(v));
	const char *g[5] = {"dxl-recovery-4", "dxl-ckpt-2", "app-slow", "dxl-ckpt-3", "app-fast"};
	uint64_t ts[5] = {100, 150, 1, 500, 900};
	for (int k = 0; k < 5; k++) {
		snprintf(v[k].group, sizeof(v[k].group), "%s", g[k]);
		v[k].next_ts = ts[k];
	}
	char buf[256];
	/* records up to ts 200 reclaimed: the first three needed some */
	assert_int_equal(dxl_rcvm_cap_groups(v, 5, 200, buf, sizeof(buf)), 1);
	assert_string_equal(buf, "dxl-recovery-4:transfer,dxl-ckpt-2:no_rebuild,app-slow:stale");
	assert_int_equal(dxl_rcvm_cap_groups(v, 5, 0, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "none");
	/* a short buffer: whole entries only */
	char small[30];
	dxl_rcvm_cap_groups(v, 5, 1000, small, sizeof(small));
	assert_string_equal(small, "dxl-recovery-4:transfer");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ttl_is_skew_free),
		cmocka_unit_test(test_members_and_checkpoints),
		cmocka_unit_test(test_cap_names_the_groups),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
