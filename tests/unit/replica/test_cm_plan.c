/* test_cm_plan.c -- the configuration manager's policy (dxl_cm_plan) on
 * hand-built configurations and live descriptor arrays */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/membership.h"
#include "dxl/replica.h"

#define MAXLIVE 16
#define SENTINEL 0x5a

struct fx {
	struct dxl_cluster_config cur;
	struct dxl_cluster_config next;
	bool next_owned; /* next holds a plan's result (to be cleared) */
	struct dxl_replica_desc live[MAXLIVE];
	uint32_t nlive;
	struct dxl_cm_params p;
	char why[512];
};

static int setup(void **state)
{
	struct fx *x = calloc(1, sizeof(*x));
	if (!x)
		return -1;
	dxl_cluster_config_init(&x->cur);
	/* a recognisable pattern: "untouched" means still exactly this */
	memset(&x->next, SENTINEL, sizeof(x->next));
	dxl_cm_params_init(&x->p);
	memset(x->why, 'X', sizeof(x->why) - 1);
	*state = x;
	return 0;
}

static int teardown(void **state)
{
	struct fx *x = *state;
	dxl_cluster_config_clear(&x->cur);
	if (x->next_owned)
		dxl_cluster_config_clear(&x->next);
	free(x);
	return 0;
}

/* ---- building configurations and descriptors ---------------------------- */

static void cfg_addr(uint32_t id, char *buf, size_t cap)
{
	snprintf(buf, cap, "10.0.0.%u:7000", id);
}

static void live_addr(uint32_t id, char *buf, size_t cap)
{
	snprintf(buf, cap, "127.0.0.1:%u", 7000 + id);
}

static void cfg_nodes(struct dxl_cluster_config *c, uint32_t from, uint32_t to)
{
	char a[DXL_CONFIG_ADDR_MAX];
	for (uint32_t id = from; id <= to; id++) {
		cfg_addr(id, a, sizeof(a));
		assert_int_equal(dxl_cluster_config_set_node(c, id, a), 0);
	}
}

/* cfg_shard(c, id, primary, nbackups, backup...) */
static void cfg_shard(struct dxl_cluster_config *c, uint32_t id, uint32_t primary,
		      uint32_t nb, ...)
{
	uint32_t b[DXL_CONFIG_MAX_BACKUPS];
	va_list ap;
	va_start(ap, nb);
	for (uint32_t i = 0; i < nb; i++)
		b[i] = va_arg(ap, uint32_t);
	va_end(ap);
	assert_int_equal(dxl_cluster_config_set_shard(c, id, primary, b, nb), 0);
}

static struct dxl_replica_desc *live_add(struct fx *x, uint32_t id)
{
	assert_true(x->nlive < MAXLIVE);
	struct dxl_replica_desc *d = &x->live[x->nlive++];
	memset(d, 0, sizeof(*d));
	d->node_id = id;
	d->cfg_epoch = x->cur.epoch; /* registered for the current epoch */
	live_addr(id, d->addr, sizeof(d->addr));
	return d;
}

static void host(struct dxl_replica_desc *d, uint32_t shard, enum dxl_shard_state st)
{
	assert_true(d->nshards < DXL_REPLICA_MAX_SHARDS);
	d->shards[d->nshards].shard = shard;
	d->shards[d->nshards].state = st;
	d->nshards++;
}

/* a live node hosting one shard */
static struct dxl_replica_desc *live1(struct fx *x, uint32_t id, uint32_t shard,
				      enum dxl_shard_state st)
{
	struct dxl_replica_desc *d = live_add(x, id);
	host(d, shard, st);
	return d;
}

/* nodes 1..3, shard 0 = primary 1, backups 2, 3; epoch 7 */
static void std_cfg(struct fx *x)
{
	x->cur.epoch = 7;
	cfg_nodes(&x->cur, 1, 3);
	cfg_shard(&x->cur, 0, 1, 2, 2u, 3u);
	assert_int_equal(dxl_cluster_config_validate(&x->cur), 0);
}

/* reset_next -- forget the last plan: next is the sentinel again */
static void reset_next(struct fx *x)
{
	if (x->next_owned)
		dxl_cluster_config_clear(&x->next);
	x->next_owned = false;
	memset(&x->next, SENTINEL, sizeof(x->next));
}

static int plan(struct fx *x)
{
	assert_false(x->next_owned);
	int ret = dxl_cm_plan(&x->cur, x->live, x->nlive, &x->p, &x->next, x->why,
			      sizeof(x->why));
	if (ret == 1)
		x->next_owned = true;
	return ret;
}

/* ---- checking results --------------------------------------------------- */

static void assert_untouched(const struct fx *x)
{
	struct dxl_cluster_config s;
	memset(&s, SENTINEL, sizeof(s));
	assert_memory_equal(&x->next, &s, sizeof(s));
}

/* assert_shard(c, id, primary, nbackups, backup...) -- exact, in order */
static void assert_shard(const struct dxl_cluster_config *c, uint32_t id,
			 uint32_t primary, uint32_t nb, ...)
{
	const struct dxl_cluster_shard *s = dxl_cluster_config_shard(c, id);
	assert_non_null(s);
	assert_int_equal(s->id, id);
	assert_int_equal(s->primary, primary);
	assert_int_equal(s->nbackups, nb);
	va_list ap;
	va_start(ap, nb);
	for (uint32_t i = 0; i < nb; i++)
		assert_int_equal(s->backups[i], va_arg(ap, uint32_t));
	va_end(ap);
}

static void assert_node_addr(const struct dxl_cluster_config *c, uint32_t id,
			     bool from_live)
{
	char a[DXL_CONFIG_ADDR_MAX];
	if (from_live)
		live_addr(id, a, sizeof(a));
	else
		cfg_addr(id, a, sizeof(a));
	const struct dxl_cluster_node *n = dxl_cluster_config_node(c, id);
	assert_non_null(n);
	assert_string_equal(n->addr, a);
}

static void assert_no_node(const struct dxl_cluster_config *c, uint32_t id)
{
	assert_null(dxl_cluster_config_node(c, id));
}

static void assert_same_config(const struct dxl_cluster_config *a,
			       const struct dxl_cluster_config *b)
{
	assert_int_equal(a->epoch, b->epoch);
	assert_int_equal(a->nnodes, b->nnodes);
	assert_int_equal(a->nshards, b->nshards);
	for (uint32_t i = 0; i < a->nnodes; i++) {
		const struct dxl_cluster_node *n = dxl_cluster_config_node(b, a->nodes[i].id);
		assert_non_null(n);
		assert_string_equal(n->addr, a->nodes[i].addr);
	}
	for (uint32_t i = 0; i < a->nshards; i++) {
		const struct dxl_cluster_shard *s = &a->shards[i];
		const struct dxl_cluster_shard *t = dxl_cluster_config_shard(b, s->id);
		assert_non_null(t);
		assert_int_equal(t->primary, s->primary);
		assert_int_equal(t->nbackups, s->nbackups);
		for (uint32_t j = 0; j < s->nbackups; j++)
			assert_int_equal(t->backups[j], s->backups[j]);
		for (uint32_t j = 0; j <= s->nbackups; j++)
			assert_int_equal(t->data_id[j], s->data_id[j]);
	}
}

/* the plan's result is a valid configuration that survives the znode's
 * JSON form unchanged */
static void assert_valid_roundtrip(const struct dxl_cluster_config *c)
{
	assert_int_equal(dxl_cluster_config_validate(c), 0);
	char *json = NULL;
	size_t len = 0;
	assert_int_equal(dxl_cluster_config_encode(c, &json, &len), 0);
	assert_non_null(json);
	assert_int_equal(strlen(json), len);
	struct dxl_cluster_config d;
	assert_int_equal(dxl_cluster_config_decode(json, len, &d), 0);
	assert_same_config(c, &d);
	assert_same_config(&d, c);
	dxl_cluster_config_clear(&d);
	free(json);
}

static void assert_why_has(const struct fx *x, const char *s)
{
	if (!strstr(x->why, s))
		fail_msg("why \"%s\" does not say \"%s\"", x->why, s);
}

/* ---- the cases ---------------------------------------------------------- */

static void test_params_init(void **state)
{
	(void)state;
	struct dxl_cm_params p = {0, 0};
	dxl_cm_params_init(&p);
	assert_int_equal(p.min_replicas, 2);
	assert_int_equal(p.replication, 3);
}

static void test_nothing_dead_no_change(void **state)
{
	struct fx *x = *state;
	std_cfg(x);
	for (uint32_t id = 1; id <= 3; id++)
		live1(x, id, 0, DXL_SHARD_MEMBER);
	/* a live stranger hosting a shard that is not in the configuration */
	live1(x, 9, 42, DXL_SHARD_SYNCED);
	assert_int_equal(plan(x), 0);
	assert_untouched(x);
	assert_string_equal(x->why, "");
	/* why may be NULL */
	assert_int_equal(dxl_cm_plan(&x->cur, x->live, x->nlive, &x->p, &x->next,
				     NULL, 0), 0);
	assert_untouched(x);
	/* the current configuration is not changed either */
	assert_int_equal(x->cur.epoch, 7);
	assert_shard(&x->cur, 0, 1, 2, 2u, 3u);
	assert_int_equal(x->cur.nnodes, 3);
}

static void test_backup_dead_removed(void **state)
{
	struct fx *x = *state;
	std_cfg(x);
	live1(x, 3, 0, DXL_SHARD_MEMBER);
	live1(x, 1, 0, DXL_SHARD_MEMBER); /* live[] need not be sorted */
	assert_int_equal(plan(x), 1);
	assert_int_equal(x->next.epoch, 8);
	assert_int_equal(x->next.nshards, 1);
	assert_shard(&x->next, 0, 1, 1, 3u);
	assert_int_equal(x->next.nnodes, 2);
	assert_no_node(&x->next, 2);
	assert_node_addr(&x->next, 1, false); /* members keep their address */
	assert_node_addr(&x->next, 3, false);
	assert_why_has(x, "shard 0");
	assert_why_has(x, "removed 2");
	assert_valid_roundtrip(&x->next);
	/* cur is an input only */
	assert_int_equal(x->cur.epoch, 7);
	assert_shard(&x->cur, 0, 1, 2, 2u, 3u);
	assert_int_equal(x->cur.nnodes, 3);
}

static void test_last_backup_dead_removed(void **state)
{
	struct fx *x = *state;
	std_cfg(x);
	live1(x, 1, 0, DXL_SHARD_MEMBER);
	live1(x, 2, 0, DXL_SHARD_MEMBER);
	assert_int_equal(plan(x), 1);
	assert_int_equal(x->next.epoch, 8);
	assert_shard(&x->next, 0, 1, 1, 2u);
	assert_int_equal(x->next.nnodes, 2);
	assert_no_node(&x->next, 3);
	assert_valid_roundtrip(&x->next);
}

static void test_primary_dead_first_backup_promoted(void **state)
{
	struct fx *x = *state;
	x->cur.epoch = 100;
	cfg_nodes(&x->cur, 1, 4);
	/* backups deliberately not sorted: their order must be kept */
	cfg_shard(&x->cur, 0, 1, 3, 4u, 2u, 3u);
	x->p.replication = 4;
	live1(x, 2, 0, DXL_SHARD_MEMBER);
	live1(x, 3, 0, DXL_SHARD_MEMBER);
	live1(x, 4, 0, DXL_SHARD_MEMBER);
	assert_int_equal(plan(x), 1);
	assert_int_equal(x->next.epoch, 101);
	assert_shard(&x->next, 0, 4, 2, 2u, 3u);
	assert_int_equal(x->next.nnodes, 3);
	assert_no_node(&x->next, 1);
	assert_why_has(x, "primary 4 (promoted)");
	assert_why_has(x, "removed 1");
	assert_valid_roundtrip(&x->next);
}

static void test_primary_and_first_backup_dead(void **state)
{
	struct fx *x = *state;
	x->cur.epoch = 3;
	cfg_nodes(&x->cur, 1, 4);
	cfg_shard(&x->cur, 0, 1, 3, 4u, 2u, 3u);
	x->p.replication = 4;
	live1(x, 3, 0, DXL_SHARD_MEMBER);
	live1(x, 2, 0, DXL_SHARD_MEMBER);
	assert_int_equal(plan(x), 1);
	assert_int_equal(x->next.epoch, 4);
	assert_shard(&x->next, 0, 2, 1, 3u);
	assert_int_equal(x->next.nnodes, 2);
	assert_no_node(&x->next, 1);
	assert_no_node(&x->next, 4);
	assert_why_has(x, "removed 1,4");
	assert_valid_roundtrip(&x->next);
}

static void test_below_min_replicas_unavailable(void **state)
{
	struct fx *x = *state;
	std_cfg(x);
	live1(x, 3, 0, DXL_SHARD_MEMBER);
	/* live nodes that cannot help: not SYNCED */
	live1(x, 4, 0, DXL_SHARD_CATCHING_UP);
	live1(x, 5, 0, DXL_SHARD_UNASSIGNED);
	assert_int_equal(plan(x), 0);
	assert_untouched(x);
	assert_why_has(x, "shard 0: 1 of 3 members alive");
	assert_why_has(x, "below cm.min_replicas 2");
	assert_why_has(x, "unavailable");
	/* min_replicas 1 lets the survivor go on alone */
	x->p.min_replicas = 1;
	assert_int_equal(plan(x), 1);
	assert_int_equal(x->next.epoch, 8);
	assert_shard(&x->next, 0, 3, 0);
	assert_int_equal(x->next.nnodes, 1);
	assert_node_addr(&x->next, 3, false);
	assert_valid_roundtrip(&x->next);
}

/* issue 16.2: a caught-up candidate does not count for min_replicas (it
 * has not joined: its last copy from the primary is not done). Below
 * min_replicas, the dead members stay; the candidate is added (nothing is
 * removed, so nothing is lost), under a live primary it can copy from; once
 * it has joined it counts, and the dead ones go (next round) */
static void test_below_min_rescued_by_synced(void **state)
{
	struct fx *x = *state;
	std_cfg(x);
	live1(x, 4, 0, DXL_SHARD_SYNCED);
	struct dxl_replica_desc *n3 = live1(x, 3, 0, DXL_SHARD_MEMBER);
	assert_int_equal(plan(x), 1);
	assert_int_equal(x->next.epoch, 8);
	assert_shard(&x->next, 0, 3, 3, 1u, 2u, 4u);
	assert_int_equal(x->next.nnodes, 4);
	assert_node_addr(&x->next, 3, false);
	assert_node_addr(&x->next, 4, true); /* the address it published */
	assert_why_has(x, "primary 3 (promoted)");
	assert_why_has(x, "added 4");
	assert_why_has(x, "kept 1,2 (dead, on a new store or no longer a member, but below cm.min_replicas)");
	if (strstr(x->why, "removed"))
		fail_msg("why \"%s\": a candidate counted for min_replicas", x->why);
	assert_valid_roundtrip(&x->next);

	/* the next epoch: 4 is joining -- still nothing removed */
	struct dxl_cluster_config e8;
	assert_int_equal(dxl_cluster_config_copy(&e8, &x->next), 0);
	reset_next(x);
	dxl_cluster_config_clear(&x->cur);
	x->cur = e8;
	n3->cfg_epoch = 8;
	x->live[0].cfg_epoch = 8;
	x->live[0].shards[0].state = DXL_SHARD_JOINING;
	assert_int_equal(plan(x), 0);
	assert_untouched(x);
	assert_why_has(x, "1 of 4 members alive and in sync");
	/* 4 joined: two count, the dead go */
	x->live[0].shards[0].state = DXL_SHARD_MEMBER;
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 3, 1, 4u);
	assert_int_equal(x->next.nnodes, 2);
	assert_why_has(x, "removed 1,2");
	assert_valid_roundtrip(&x->next);
}

/* issue 16.2: only a member registered for the epoch as a MEMBER of the
 * shard may be promoted: not one still joining (its join pull from the dead
 * primary never finished: it may miss acknowledged records), not one whose
 * descriptor is of an older epoch */
static void test_only_members_in_sync_promoted(void **state)
{
	struct fx *x = *state;
	x->cur.epoch = 20;
	cfg_nodes(&x->cur, 1, 4);
	cfg_shard(&x->cur, 0, 1, 3, 2u, 3u, 4u);
	x->p.replication = 4;
	x->p.min_replicas = 1;
	live1(x, 2, 0, DXL_SHARD_JOINING);
	struct dxl_replica_desc *n3 = live1(x, 3, 0, DXL_SHARD_MEMBER);
	n3->cfg_epoch = 19; /* registered for the epoch before */
	live1(x, 4, 0, DXL_SHARD_MEMBER);
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 4, 2, 2u, 3u);
	assert_why_has(x, "primary 4 (promoted), removed 1");
	assert_valid_roundtrip(&x->next);
	reset_next(x);

	/* a second failure during the join window: the primary dies while the
	 * only other member is still joining -- nobody is promoted, the shard
	 * waits for the primary (even with min_replicas 1) */
	x->nlive = 0;
	live1(x, 2, 0, DXL_SHARD_JOINING);
	assert_int_equal(plan(x), 0);
	assert_untouched(x);
	assert_why_has(x, "no member alive and in sync");
	/* neither are the waiting members removed, nor counted for the
	 * removal of a dead backup */
	x->nlive = 0;
	live1(x, 1, 0, DXL_SHARD_MEMBER);
	live1(x, 2, 0, DXL_SHARD_JOINING);
	n3 = live1(x, 3, 0, DXL_SHARD_MEMBER);
	n3->cfg_epoch = 19;
	x->p.min_replicas = 2;
	assert_int_equal(plan(x), 0); /* 4 is dead, but only 1 counts */
	assert_untouched(x);
	assert_why_has(x, "1 of 4 members alive and in sync, below cm.min_replicas 2");
	n3->cfg_epoch = 20;
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 1, 2, 2u, 3u);
	assert_why_has(x, "removed 4");
}

/* a dead primary, one member that counts, one that waits to join, below
 * min_replicas: the joiner's pull copies from the primary, so without a
 * change it waits for good (and the shard with it, until the dead primary
 * returns). The member that counts is promoted; the dead primary stays
 * listed (a backup: writers still wait for it), nothing is removed; once the
 * joiner has joined from the new primary, it counts and the dead one goes */
static void test_dead_primary_promoted_for_joiner(void **state)
{
	struct fx *x = *state;
	std_cfg(x); /* 1 primary, 2 and 3; min_replicas 2, replication 3 */
	live1(x, 2, 0, DXL_SHARD_MEMBER);
	struct dxl_replica_desc *n3 = live1(x, 3, 0, DXL_SHARD_JOINING);
	assert_int_equal(plan(x), 1);
	assert_int_equal(x->next.epoch, 8);
	assert_shard(&x->next, 0, 2, 2, 1u, 3u);
	assert_why_has(x, "primary 2 (promoted) for a member that waits to join from it");
	assert_why_has(x, "kept 1");
	if (strstr(x->why, "removed"))
		fail_msg("why \"%s\": removed below min_replicas", x->why);
	assert_valid_roundtrip(&x->next);

	/* the next epoch: 3 still joining (from 2 now): no change */
	struct dxl_cluster_config e8;
	assert_int_equal(dxl_cluster_config_copy(&e8, &x->next), 0);
	reset_next(x);
	dxl_cluster_config_clear(&x->cur);
	x->cur = e8;
	x->live[0].cfg_epoch = 8;
	n3->cfg_epoch = 8;
	assert_int_equal(plan(x), 0);
	assert_untouched(x);
	/* 3 joined: two count, the dead primary goes */
	n3->shards[0].state = DXL_SHARD_MEMBER;
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 2, 1, 3u);
	assert_why_has(x, "removed 1");
	reset_next(x);

	/* without a joiner a dead primary alone is still left as it is */
	dxl_cluster_config_clear(&x->cur);
	dxl_cluster_config_init(&x->cur);
	std_cfg(x);
	x->nlive = 0;
	live1(x, 2, 0, DXL_SHARD_MEMBER);
	live1(x, 3, 0, DXL_SHARD_CATCHING_UP)->cfg_epoch = 6; /* not through epoch 7 */
	assert_int_equal(plan(x), 0);
	assert_untouched(x);
	/* nor is a joiner helped when no member counts */
	x->nlive = 0;
	live1(x, 3, 0, DXL_SHARD_JOINING);
	assert_int_equal(plan(x), 0);
	assert_untouched(x);
	assert_why_has(x, "no member alive and in sync");
}

/* a member registered for the epoch that says it is not a member: it gave
 * up its join (replica.join_timeout_ms) or its store is incomplete. It does
 * not count, is removed like a dead one (min_replicas allowing), is never
 * primary, and is added again once it has caught up */
static void test_member_left(void **state)
{
	struct fx *x = *state;
	std_cfg(x);
	live1(x, 1, 0, DXL_SHARD_MEMBER);
	live1(x, 2, 0, DXL_SHARD_MEMBER);
	struct dxl_replica_desc *n3 = live1(x, 3, 0, DXL_SHARD_CATCHING_UP);
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 1, 1, 2u);
	assert_why_has(x, "removed 3");
	reset_next(x);
	/* caught up: added again at once (it joins again) */
	n3->shards[0].state = DXL_SHARD_SYNCED;
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 1, 2, 2u, 3u);
	assert_why_has(x, "added again 3 (caught up)");
	reset_next(x);
	/* below min_replicas it stays while catching up */
	n3->shards[0].state = DXL_SHARD_CATCHING_UP;
	x->p.min_replicas = 3;
	assert_int_equal(plan(x), 0);
	assert_untouched(x);
	assert_why_has(x, "2 of 3 members alive and in sync, below cm.min_replicas 3");
	/* still on an older epoch: it is applying the configuration, not
	 * leaving: kept, as before */
	x->p.min_replicas = 2;
	n3->cfg_epoch = 6;
	assert_int_equal(plan(x), 0);
	assert_untouched(x);
	n3->cfg_epoch = 7;
	/* the primary no longer a member (its store incomplete): replaced */
	x->nlive = 0;
	live1(x, 1, 0, DXL_SHARD_CATCHING_UP);
	live1(x, 2, 0, DXL_SHARD_MEMBER);
	live1(x, 3, 0, DXL_SHARD_MEMBER);
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 2, 1, 3u);
	assert_why_has(x, "primary 2 (promoted), removed 1");
	assert_valid_roundtrip(&x->next);
}

static uint64_t data_id_of(const struct dxl_cluster_config *c, uint32_t shard,
			   uint32_t node)
{
	return dxl_cluster_shard_data_id(dxl_cluster_config_shard(c, shard), node);
}

/* issue 16.3: the configuration records each member's data identity; a
 * member whose copy has another one now (restarted on an empty or recreated
 * data directory) holds nothing it was added for: it neither counts nor is
 * promoted, it is removed like a dead one (min_replicas allowing), and once
 * it has caught up it is added again with its new identity */
static void test_member_on_new_store(void **state)
{
	struct fx *x = *state;
	std_cfg(x);
	assert_int_equal(dxl_cluster_config_set_data_id(&x->cur, 0, 1, 0x11), 0);
	assert_int_equal(dxl_cluster_config_set_data_id(&x->cur, 0, 2, 0x22), 0);
	assert_int_equal(dxl_cluster_config_set_data_id(&x->cur, 0, 3, 0x33), 0);
	assert_int_equal(dxl_cluster_config_set_data_id(&x->cur, 0, 4, 0x44), DXL_E_NOENT);
	struct dxl_replica_desc *n1 = live1(x, 1, 0, DXL_SHARD_MEMBER);
	struct dxl_replica_desc *n2 = live1(x, 2, 0, DXL_SHARD_MEMBER);
	struct dxl_replica_desc *n3 = live1(x, 3, 0, DXL_SHARD_MEMBER);
	n1->shards[0].data_id = 0x11;
	n2->shards[0].data_id = 0x22;
	n3->shards[0].data_id = 0x33;
	assert_int_equal(plan(x), 0); /* all as recorded */
	assert_untouched(x);

	/* backup 2 restarted on a new store (and says MEMBER): removed */
	n2->shards[0].data_id = 0x99;
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 1, 1, 3u);
	assert_why_has(x, "removed 2");
	assert_int_equal(data_id_of(&x->next, 0, 1), 0x11);
	assert_int_equal(data_id_of(&x->next, 0, 3), 0x33);
	assert_valid_roundtrip(&x->next);
	reset_next(x);

	/* the primary on a new store: the first backup that counts takes over */
	n2->shards[0].data_id = 0x22;
	n1->shards[0].data_id = 0x98;
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 2, 1, 3u);
	assert_why_has(x, "primary 2 (promoted), removed 1");
	assert_valid_roundtrip(&x->next);
	reset_next(x);

	/* with only two members and min_replicas 2 it cannot be removed: it
	 * stays, the shard waits, until it has caught up; then it is added
	 * again with its new identity, as a backup of the member that counts */
	reset_next(x);
	dxl_cluster_config_clear(&x->cur);
	x->cur.epoch = 7;
	cfg_nodes(&x->cur, 1, 2);
	cfg_shard(&x->cur, 0, 1, 1, 2u);
	assert_int_equal(dxl_cluster_config_set_data_id(&x->cur, 0, 1, 0x11), 0);
	assert_int_equal(dxl_cluster_config_set_data_id(&x->cur, 0, 2, 0x22), 0);
	x->nlive = 0;
	n1 = live1(x, 1, 0, DXL_SHARD_CATCHING_UP);
	n1->shards[0].data_id = 0x98;
	n2 = live1(x, 2, 0, DXL_SHARD_MEMBER);
	n2->shards[0].data_id = 0x22;
	assert_int_equal(plan(x), 0);
	assert_untouched(x);
	assert_why_has(x, "1 of 2 members alive and in sync, below cm.min_replicas 2");
	n1->shards[0].state = DXL_SHARD_SYNCED;
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 2, 1, 1u);
	assert_why_has(x, "primary 2 (promoted), added again 1 (caught up on a new store)");
	assert_int_equal(data_id_of(&x->next, 0, 1), 0x98);
	assert_int_equal(data_id_of(&x->next, 0, 2), 0x22);
	assert_valid_roundtrip(&x->next);
	reset_next(x);

	/* nobody else holds the shard: nothing can be done */
	x->nlive = 0;
	n1 = live1(x, 1, 0, DXL_SHARD_MEMBER);
	n1->shards[0].data_id = 0x98;
	x->p.min_replicas = 1;
	assert_int_equal(plan(x), 0);
	assert_why_has(x, "no member alive and in sync (1 of 2 dead, 1 on a new store, 0 not members)");
}

/* the identities a change records: a candidate's (from its descriptor), and
 * those of members that count and had none recorded */
static void test_data_ids_recorded(void **state)
{
	struct fx *x = *state;
	x->cur.epoch = 4;
	cfg_nodes(&x->cur, 1, 2);
	cfg_shard(&x->cur, 0, 1, 1, 2u);
	assert_int_equal(dxl_cluster_config_set_data_id(&x->cur, 0, 2, 0x22), 0);
	struct dxl_replica_desc *d;
	d = live1(x, 1, 0, DXL_SHARD_MEMBER);
	d->shards[0].data_id = 0x11;
	d = live1(x, 2, 0, DXL_SHARD_MEMBER);
	d->shards[0].data_id = 0x22;
	assert_int_equal(plan(x), 0); /* recording alone is no change */
	d = live1(x, 3, 0, DXL_SHARD_SYNCED);
	d->shards[0].data_id = 0x33;
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 1, 2, 2u, 3u);
	assert_int_equal(data_id_of(&x->next, 0, 1), 0x11);
	assert_int_equal(data_id_of(&x->next, 0, 2), 0x22);
	assert_int_equal(data_id_of(&x->next, 0, 3), 0x33);
	assert_valid_roundtrip(&x->next);
}

static void test_below_min_even_with_synced(void **state)
{
	struct fx *x = *state;
	std_cfg(x);
	x->p.min_replicas = 3;
	live1(x, 3, 0, DXL_SHARD_MEMBER);
	live1(x, 4, 0, DXL_SHARD_SYNCED);
	/* the candidate is added, the dead stay */
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 3, 3, 1u, 2u, 4u);
	assert_why_has(x, "kept 1,2");
	reset_next(x);
	/* without a candidate nothing changes, not even the dead primary */
	x->live[1].shards[0].state = DXL_SHARD_CATCHING_UP;
	assert_int_equal(plan(x), 0);
	assert_untouched(x);
	assert_why_has(x, "1 of 3 members alive and in sync, below cm.min_replicas 3");
}

static void test_all_members_dead(void **state)
{
	struct fx *x = *state;
	std_cfg(x);
	/* nobody alive at all (live may be NULL then) */
	assert_int_equal(dxl_cm_plan(&x->cur, NULL, 0, &x->p, &x->next, x->why,
				     sizeof(x->why)), 0);
	assert_untouched(x);
	assert_why_has(x, "shard 0");
	assert_why_has(x, "no member alive");
	/* a SYNCED non-member cannot replace all of them: only a member is
	 * sure to hold every acknowledged record */
	live1(x, 4, 0, DXL_SHARD_SYNCED);
	live1(x, 5, 0, DXL_SHARD_SYNCED);
	x->p.min_replicas = 1;
	assert_int_equal(plan(x), 0);
	assert_untouched(x);
	assert_why_has(x, "no member alive");
}

static void test_synced_added_when_short(void **state)
{
	struct fx *x = *state;
	x->cur.epoch = 12;
	cfg_nodes(&x->cur, 1, 2);
	cfg_shard(&x->cur, 0, 1, 1, 2u);
	live1(x, 1, 0, DXL_SHARD_MEMBER);
	live1(x, 2, 0, DXL_SHARD_MEMBER);
	live1(x, 3, 0, DXL_SHARD_SYNCED);
	assert_int_equal(plan(x), 1);
	assert_int_equal(x->next.epoch, 13);
	assert_shard(&x->next, 0, 1, 2, 2u, 3u);
	assert_int_equal(x->next.nnodes, 3);
	assert_node_addr(&x->next, 1, false);
	assert_node_addr(&x->next, 2, false);
	assert_node_addr(&x->next, 3, true);
	assert_why_has(x, "added 3");
	if (strstr(x->why, "removed") || strstr(x->why, "promoted"))
		fail_msg("why \"%s\": nothing was removed or promoted", x->why);
	assert_valid_roundtrip(&x->next);
}

static void test_synced_added_even_below_min(void **state)
{
	struct fx *x = *state;
	/* a one-member shard that stays below min_replicas even with the new
	 * backup still grows: nobody is removed, so nothing is lost */
	x->p.min_replicas = 3;
	x->cur.epoch = 1;
	cfg_nodes(&x->cur, 1, 1);
	cfg_shard(&x->cur, 0, 1, 0);
	live1(x, 1, 0, DXL_SHARD_MEMBER);
	live1(x, 2, 0, DXL_SHARD_SYNCED);
	assert_int_equal(plan(x), 1);
	assert_int_equal(x->next.epoch, 2);
	assert_shard(&x->next, 0, 1, 1, 2u);
	assert_int_equal(x->next.nnodes, 2);
	assert_node_addr(&x->next, 2, true);
	assert_valid_roundtrip(&x->next);
}

static void test_only_synced_non_members_added(void **state)
{
	struct fx *x = *state;
	x->cur.epoch = 5;
	cfg_nodes(&x->cur, 1, 2);
	cfg_shard(&x->cur, 0, 1, 1, 2u);
	live1(x, 1, 0, DXL_SHARD_MEMBER);
	live1(x, 2, 0, DXL_SHARD_MEMBER);
	live1(x, 3, 0, DXL_SHARD_CATCHING_UP);
	struct dxl_replica_desc *n4 = live1(x, 4, 0, DXL_SHARD_UNASSIGNED);
	live1(x, 5, 0, DXL_SHARD_MEMBER); /* says MEMBER, but is not one */
	/* SYNCED for another shard only */
	struct dxl_replica_desc *n6 = live1(x, 6, 1, DXL_SHARD_SYNCED);
	host(n6, 0, DXL_SHARD_CATCHING_UP);
	assert_int_equal(plan(x), 0);
	assert_untouched(x);
	assert_string_equal(x->why, "");

	n4->shards[0].state = DXL_SHARD_SYNCED;
	assert_int_equal(plan(x), 1);
	assert_int_equal(x->next.epoch, 6);
	assert_shard(&x->next, 0, 1, 2, 2u, 4u);
	assert_int_equal(x->next.nnodes, 3);
	assert_node_addr(&x->next, 4, true);
	assert_no_node(&x->next, 3);
	assert_no_node(&x->next, 5);
	assert_no_node(&x->next, 6);
	assert_valid_roundtrip(&x->next);
}

static void test_replication_caps_additions(void **state)
{
	struct fx *x = *state;
	x->cur.epoch = 9;
	cfg_nodes(&x->cur, 1, 1);
	cfg_shard(&x->cur, 0, 1, 0);
	live1(x, 9, 0, DXL_SHARD_SYNCED);
	live1(x, 1, 0, DXL_SHARD_MEMBER);
	live1(x, 5, 0, DXL_SHARD_SYNCED);
	live1(x, 7, 0, DXL_SHARD_SYNCED);
	live1(x, 6, 0, DXL_SHARD_SYNCED);
	assert_int_equal(plan(x), 1);
	assert_int_equal(x->next.epoch, 10);
	/* replication 3: two of the four, the lowest ids, in id order */
	assert_shard(&x->next, 0, 1, 2, 5u, 6u);
	assert_int_equal(x->next.nnodes, 3);
	assert_node_addr(&x->next, 1, false);
	assert_node_addr(&x->next, 5, true);
	assert_node_addr(&x->next, 6, true);
	assert_no_node(&x->next, 7);
	assert_no_node(&x->next, 9);
	assert_why_has(x, "added 5,6");
	assert_valid_roundtrip(&x->next);
}

static void test_replication_caps_additions_after_death(void **state)
{
	struct fx *x = *state;
	x->cur.epoch = 9;
	cfg_nodes(&x->cur, 1, 2);
	cfg_shard(&x->cur, 0, 1, 1, 2u);
	live1(x, 8, 0, DXL_SHARD_SYNCED);
	live1(x, 1, 0, DXL_SHARD_MEMBER);
	live1(x, 7, 0, DXL_SHARD_SYNCED);
	live1(x, 6, 0, DXL_SHARD_SYNCED);
	/* 2 is dead, but with one member that counts it stays (min 2); the
	 * candidates fill up to `replication` live members */
	assert_int_equal(plan(x), 1);
	assert_int_equal(x->next.epoch, 10);
	assert_shard(&x->next, 0, 1, 3, 2u, 6u, 7u);
	assert_int_equal(x->next.nnodes, 4);
	assert_no_node(&x->next, 8);
	assert_node_addr(&x->next, 6, true);
	assert_node_addr(&x->next, 7, true);
	assert_valid_roundtrip(&x->next);
}

static void test_full_shard_not_grown(void **state)
{
	struct fx *x = *state;
	std_cfg(x);
	for (uint32_t id = 1; id <= 3; id++)
		live1(x, id, 0, DXL_SHARD_MEMBER);
	live1(x, 4, 0, DXL_SHARD_SYNCED);
	assert_int_equal(plan(x), 0); /* already `replication` members */
	assert_untouched(x);
	/* more members than `replication`: nothing is taken away either */
	x->p.replication = 2;
	assert_int_equal(plan(x), 0);
	assert_untouched(x);
	/* a larger replication factor takes the synced node */
	x->p.replication = 4;
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 1, 3, 2u, 3u, 4u);
	assert_int_equal(x->next.nnodes, 4);
	assert_node_addr(&x->next, 4, true);
	assert_valid_roundtrip(&x->next);
}

static void test_max_replication(void **state)
{
	struct fx *x = *state;
	x->cur.epoch = 2;
	cfg_nodes(&x->cur, 1, 1);
	cfg_shard(&x->cur, 0, 1, 0);
	live1(x, 1, 0, DXL_SHARD_MEMBER);
	for (uint32_t id = 20; id > 10; id--) /* ten candidates, descending */
		live1(x, id, 0, DXL_SHARD_SYNCED);
	x->p.replication = DXL_CONFIG_MAX_REPLICAS;
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 1, 7, 11u, 12u, 13u, 14u, 15u, 16u, 17u);
	assert_int_equal(x->next.nnodes, 8);
	for (uint32_t id = 11; id <= 17; id++)
		assert_node_addr(&x->next, id, true);
	assert_valid_roundtrip(&x->next);
}

static void test_live_without_shard_counts_dead(void **state)
{
	struct fx *x = *state;
	std_cfg(x);
	live1(x, 1, 0, DXL_SHARD_MEMBER);
	live1(x, 2, 5, DXL_SHARD_MEMBER); /* alive, but without shard 0 */
	live1(x, 3, 0, DXL_SHARD_MEMBER);
	assert_int_equal(plan(x), 1);
	assert_int_equal(x->next.epoch, 8);
	assert_shard(&x->next, 0, 1, 1, 3u);
	assert_int_equal(x->next.nnodes, 2);
	assert_no_node(&x->next, 2);
	assert_why_has(x, "removed 2");
	assert_valid_roundtrip(&x->next);

	/* a primary that lost the shard is replaced the same way */
	dxl_cluster_config_clear(&x->next);
	x->next_owned = false;
	x->live[0].nshards = 0; /* node 1 hosts nothing */
	x->live[1].shards[0].shard = 0; /* node 2 has it back */
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 2, 1, 3u);
	assert_int_equal(x->next.nnodes, 2);
	assert_no_node(&x->next, 1);
	assert_valid_roundtrip(&x->next);
}

static void test_several_shards_independent(void **state)
{
	struct fx *x = *state;
	x->cur.epoch = 50;
	cfg_nodes(&x->cur, 1, 9);
	cfg_shard(&x->cur, 0, 1, 2, 2u, 3u); /* 2 dead, 10 synced: 1; 3, 10 */
	cfg_shard(&x->cur, 1, 2, 2, 3u, 4u); /* 2 dead: 3 promoted; 4 */
	cfg_shard(&x->cur, 2, 4, 2, 5u, 6u); /* healthy: unchanged */
	cfg_shard(&x->cur, 3, 7, 2, 8u, 9u); /* 8, 9 dead: unavailable */
	cfg_shard(&x->cur, 4, 5, 1, 6u);     /* 6 lacks it, 10 synced: 5; 6, 10 */
	assert_int_equal(dxl_cluster_config_validate(&x->cur), 0);

	struct dxl_replica_desc *d;
	d = live_add(x, 1);
	host(d, 0, DXL_SHARD_MEMBER);
	d = live_add(x, 3);
	host(d, 0, DXL_SHARD_MEMBER);
	host(d, 1, DXL_SHARD_MEMBER);
	d = live_add(x, 4);
	host(d, 1, DXL_SHARD_MEMBER);
	host(d, 2, DXL_SHARD_MEMBER);
	d = live_add(x, 5);
	host(d, 2, DXL_SHARD_MEMBER);
	host(d, 4, DXL_SHARD_MEMBER);
	d = live_add(x, 6);
	host(d, 2, DXL_SHARD_MEMBER); /* not shard 4 */
	d = live_add(x, 7);
	host(d, 3, DXL_SHARD_MEMBER);
	d = live_add(x, 10);
	host(d, 4, DXL_SHARD_SYNCED);
	host(d, 0, DXL_SHARD_SYNCED);
	host(d, 3, DXL_SHARD_CATCHING_UP);

	assert_int_equal(plan(x), 1);
	assert_int_equal(x->next.epoch, 51);
	assert_int_equal(x->next.nshards, 5);
	for (uint32_t i = 0; i < 5; i++) /* shards keep their places */
		assert_int_equal(x->next.shards[i].id, i);
	assert_shard(&x->next, 0, 1, 2, 3u, 10u);
	assert_shard(&x->next, 1, 3, 1, 4u);
	assert_shard(&x->next, 2, 4, 2, 5u, 6u);
	assert_shard(&x->next, 3, 7, 2, 8u, 9u);
	assert_shard(&x->next, 4, 5, 2, 6u, 10u); /* 10 does not count yet */
	/* 2 leaves; 6, 8, 9 stay (still named by shards 2 and 3); 10 joins */
	assert_int_equal(x->next.nnodes, 9);
	assert_no_node(&x->next, 2);
	for (uint32_t id = 1; id <= 9; id++)
		if (id != 2)
			assert_node_addr(&x->next, id, false);
	assert_node_addr(&x->next, 10, true);
	assert_why_has(x, "shard 0: primary 1, removed 2, added 10");
	assert_why_has(x, "shard 1: primary 3 (promoted), removed 2");
	assert_why_has(x, "shard 3: 1 of 3 members alive");
	assert_why_has(x, "shard 4: primary 5, added 10, kept 6");
	if (strstr(x->why, "shard 2"))
		fail_msg("why \"%s\" mentions the healthy shard 2", x->why);
	assert_valid_roundtrip(&x->next);
}

static void test_params_invalid(void **state)
{
	struct fx *x = *state;
	std_cfg(x);
	live1(x, 1, 0, DXL_SHARD_MEMBER); /* would change something */
	live1(x, 2, 0, DXL_SHARD_MEMBER);
	const struct dxl_cm_params bad[] = {
		{.min_replicas = 0, .replication = 3},
		{.min_replicas = 2, .replication = 0},
		{.min_replicas = 2, .replication = DXL_CONFIG_MAX_REPLICAS + 1},
		{.min_replicas = 0, .replication = 0},
		{.min_replicas = 1, .replication = UINT32_MAX},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		x->p = bad[i];
		assert_int_equal(plan(x), DXL_E_INVAL);
		assert_untouched(x);
		assert_non_null(strstr(dxl_errmsg(), "replication"));
	}
	dxl_cm_params_init(&x->p);
	char why[64];
	assert_int_equal(dxl_cm_plan(NULL, x->live, x->nlive, &x->p, &x->next, why,
				     sizeof(why)), DXL_E_INVAL);
	assert_int_equal(dxl_cm_plan(&x->cur, NULL, 2, &x->p, &x->next, why,
				     sizeof(why)), DXL_E_INVAL);
	assert_int_equal(dxl_cm_plan(&x->cur, x->live, x->nlive, NULL, &x->next,
				     why, sizeof(why)), DXL_E_INVAL);
	assert_int_equal(dxl_cm_plan(&x->cur, x->live, x->nlive, &x->p, NULL, why,
				     sizeof(why)), DXL_E_INVAL);
	assert_untouched(x);
	/* the limits themselves are fine */
	x->p.min_replicas = 1;
	x->p.replication = DXL_CONFIG_MAX_REPLICAS;
	assert_int_equal(plan(x), 1);
	assert_shard(&x->next, 0, 1, 1, 2u);
}

static void test_epoch_overflow(void **state)
{
	struct fx *x = *state;
	std_cfg(x);
	x->cur.epoch = INT64_MAX; /* the largest epoch a config may have */
	live1(x, 1, 0, DXL_SHARD_MEMBER);
	live1(x, 2, 0, DXL_SHARD_MEMBER);
	assert_int_equal(plan(x), DXL_E_INVAL);
	assert_untouched(x);
}

static void test_why_truncated(void **state)
{
	struct fx *x = *state;
	std_cfg(x);
	live1(x, 2, 0, DXL_SHARD_MEMBER);
	live1(x, 3, 0, DXL_SHARD_MEMBER);
	char why[12];
	memset(why, 'X', sizeof(why));
	assert_int_equal(dxl_cm_plan(&x->cur, x->live, x->nlive, &x->p, &x->next,
				     why, 8), 1);
	x->next_owned = true;
	assert_int_equal(strlen(why), 7);
	assert_memory_equal(why, "shard 0", 8);
	assert_int_equal(why[8], 'X'); /* nothing written past whycap */
	assert_shard(&x->next, 0, 2, 1, 3u);
	assert_int_equal(x->next.epoch, 8);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_params_init),
		T(test_nothing_dead_no_change),
		T(test_backup_dead_removed),
		T(test_last_backup_dead_removed),
		T(test_primary_dead_first_backup_promoted),
		T(test_primary_and_first_backup_dead),
		T(test_below_min_replicas_unavailable),
		T(test_below_min_rescued_by_synced),
		T(test_only_members_in_sync_promoted),
		T(test_member_on_new_store),
		T(test_dead_primary_promoted_for_joiner),
		T(test_member_left),
		T(test_data_ids_recorded),
		T(test_below_min_even_with_synced),
		T(test_all_members_dead),
		T(test_synced_added_when_short),
		T(test_synced_added_even_below_min),
		T(test_only_synced_non_members_added),
		T(test_replication_caps_additions),
		T(test_replication_caps_additions_after_death),
		T(test_full_shard_not_grown),
		T(test_max_replication),
		T(test_live_without_shard_counts_dead),
		T(test_several_shards_independent),
		T(test_params_invalid),
		T(test_epoch_overflow),
		T(test_why_truncated),
	};
#undef T
	return cmocka_run_group_tests_name("cm plan", tests, NULL, NULL);
}
