/* test_membership.c -- the membership module against a real ZooKeeper:
 * sessions, node registration, the cluster config, the CM election, cursors
 *
 * Uses the server of scripts/test.sh (DXL_TEST_ZK) when set, else starts a
 * throw-away standalone one with scripts/zk.sh (and stops it at the end,
 * also when a test fails or the watchdog fires). Every test works in its own
 * cluster root. The fault tests (stopped servers, ensembles, a paused
 * member) are in test_membership_faults.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/config.h"
#include "test_membership_util.h"

static struct mt_server g_srv;
static const char *g_zk; /* connect string */

static int group_setup(void **state)
{
	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
	atexit(mt_stop_all_servers);
	mt_alarm(120);
	g_zk = getenv("DXL_TEST_ZK");
	if (!g_zk || !g_zk[0]) {
		if (mt_server_start(&g_srv, 1) != 0)
			return -1;
		g_zk = g_srv.connect;
	}
	print_message("ZooKeeper at %s\n", g_zk);
	return 0;
}

static int group_teardown(void **state)
{
	mt_stop_all_servers();
	alarm(0);
	return 0;
}

static int test_setup(void **state)
{
	mt_alarm(60);
	return 0;
}

static void cfg_for(struct dxl_zk_cfg *c, const char *cluster,
		    struct mt_rec *rec)
{
	dxl_zk_cfg_init(c);
	snprintf(c->connect, sizeof(c->connect), "%s", g_zk);
	snprintf(c->cluster, sizeof(c->cluster), "%s", cluster);
	c->connect_timeout_ms = 10000;
	if (rec) {
		c->on_state = mt_on_state;
		c->arg = rec;
	}
}

static struct dxl_zk *open_zk(const char *cluster, struct mt_rec *rec)
{
	struct dxl_zk_cfg c;
	cfg_for(&c, cluster, rec);
	struct dxl_zk *zk = NULL;
	int rc = dxl_zk_new(&c, &zk);
	if (rc)
		print_message("dxl_zk_new: %s\n", dxl_errmsg());
	assert_int_equal(rc, 0);
	assert_non_null(zk);
	return zk;
}

/* a raw client handle, to plant bad data the module would never write */
static zhandle_t *raw_connect(void)
{
	zhandle_t *zh = zookeeper_init(g_zk, NULL, 4000, NULL, NULL, 0);
	assert_non_null(zh);
	for (int i = 0; i < 1000 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++)
		usleep(5000);
	assert_int_equal(zoo_state(zh), ZOO_CONNECTED_STATE);
	return zh;
}

static void raw_put(const char *path, const char *data)
{
	zhandle_t *zh = raw_connect();
	int rc = zoo_set(zh, path, data, (int)strlen(data), -1);
	if (rc == ZNONODE)
		rc = zoo_create(zh, path, data, (int)strlen(data),
				&ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
	assert_int_equal(rc, ZOK);
	zookeeper_close(zh);
}

/* ---- configuration and session ---------------------------------------------- */

static void test_cfg_defaults_and_load(void **state)
{
	struct dxl_zk_cfg c;
	dxl_zk_cfg_init(&c);
	assert_int_equal(c.session_timeout_ms, 3000);
	assert_int_equal(c.lease_pct, 50);
	assert_int_equal(c.connect_timeout_ms, 10000);
	assert_string_equal(c.cluster, "default");
	assert_string_equal(c.connect, "");

	struct dxl_config *conf;
	assert_int_equal(dxl_config_new(&conf), 0);
	assert_int_equal(dxl_config_set(conf, "zk.connect", "127.0.0.1:2181,127.0.0.1:2182"), 0);
	assert_int_equal(dxl_config_set(conf, "zk.cluster", "prod"), 0);
	assert_int_equal(dxl_config_set(conf, "zk.session_timeout_ms", "1500"), 0);
	assert_int_equal(dxl_zk_cfg_load(conf, &c), 0);
	assert_string_equal(c.connect, "127.0.0.1:2181,127.0.0.1:2182");
	assert_string_equal(c.cluster, "prod");
	assert_int_equal(c.session_timeout_ms, 1500);

	/* bad values and unknown keys: DXL_E_CONFIG, cfg unchanged */
	struct dxl_zk_cfg before = c;
	assert_int_equal(dxl_config_set(conf, "zk.lease_pct", "90"), 0);
	assert_int_equal(dxl_zk_cfg_load(conf, &c), DXL_E_CONFIG);
	assert_non_null(strstr(dxl_errmsg(), "zk.lease_pct"));
	assert_memory_equal(&before, &c, sizeof(c));
	assert_int_equal(dxl_config_set(conf, "zk.lease_pct", "40"), 0);
	assert_int_equal(dxl_config_set(conf, "zk.cluster", "a/b"), 0);
	assert_int_equal(dxl_zk_cfg_load(conf, &c), DXL_E_CONFIG);
	assert_memory_equal(&before, &c, sizeof(c));
	assert_int_equal(dxl_config_set(conf, "zk.cluster", "prod"), 0);
	assert_int_equal(dxl_config_set(conf, "zk.sesion_timeout_ms", "10"), 0);
	assert_int_equal(dxl_zk_cfg_load(conf, &c), DXL_E_CONFIG);
	assert_non_null(strstr(dxl_errmsg(), "zk.sesion_timeout_ms"));
	dxl_config_delete(&conf);

	/* dxl_zk_new refuses bad configurations before connecting */
	struct dxl_zk *zk = NULL;
	dxl_zk_cfg_init(&c);
	assert_int_equal(dxl_zk_new(&c, &zk), DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "connect string"));
	snprintf(c.connect, sizeof(c.connect), "%s", "127.0.0.1:1");
	snprintf(c.cluster, sizeof(c.cluster), "%s", "..");
	assert_int_equal(dxl_zk_new(&c, &zk), DXL_E_INVAL);
	snprintf(c.cluster, sizeof(c.cluster), "%s", "ok");
	c.lease_pct = 90;
	assert_int_equal(dxl_zk_new(&c, &zk), DXL_E_INVAL);
	assert_null(zk);
}

struct lease_probe {
	struct dxl_zk *zk;
	uint64_t first;
};

static bool lease_grew(void *arg)
{
	struct lease_probe *p = arg;
	return dxl_zk_lease_until_ns(p->zk) > p->first;
}

static bool lease_valid_p(void *arg)
{
	return dxl_zk_lease_valid(arg);
}

static void test_session_basics(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "basics");
	struct mt_rec rec;
	mt_rec_init(&rec);
	uint64_t t0 = dxl_boot_ns();
	struct dxl_zk *zk = open_zk(cl, &rec);
	assert_int_equal(dxl_zk_state(zk), DXL_ZK_CONNECTED);
	assert_true(dxl_zk_session_id(zk) != 0);
	assert_int_equal(dxl_zk_session_epoch(zk), 1);
	uint32_t to = dxl_zk_session_timeout_ms(zk);
	assert_true(to >= 400 && to <= 60000);
	assert_int_equal(dxl_zk_lease_ms(zk), to * 50 / 100);
	char root[128];
	snprintf(root, sizeof(root), "/dxl/%s", cl);
	assert_string_equal(dxl_zk_root(zk), root);
	assert_string_equal(dxl_zk_connect_string(zk), g_zk);

	/* the lease: valid, and it runs from before the connect began */
	assert_true(dxl_zk_lease_valid(zk));
	uint64_t until = dxl_zk_lease_until_ns(zk);
	assert_true(until > dxl_boot_ns());
	assert_true(until <= dxl_boot_ns() + (uint64_t)dxl_zk_lease_ms(zk) * 1000000ull);
	assert_true(until > t0);
	/* and the lease thread renews it */
	struct lease_probe p = {zk, until};
	assert_true(mt_wait_true(lease_grew, &p, 5000));

	/* the lease is counted on the boot clock, which goes on while the
	 * machine (or its VM) is suspended: resumed after a suspend longer than
	 * the lease, a member finds it over at once -- on the monotonic clock
	 * it would still look valid (issue 16.5) -- and the next renewal
	 * brings it back */
	dxl_clock_inject_suspend_ns(2ull * dxl_zk_lease_ms(zk) * 1000000ull);
	assert_false(dxl_zk_lease_valid(zk));
	assert_int_equal(dxl_zk_lease_until_ns(zk), 0);
	assert_true(mt_wait_true(lease_valid_p, zk, 5000));
	assert_true(dxl_zk_lease_until_ns(zk) > dxl_boot_ns());

	/* CONNECTED is reported once, on the event thread */
	assert_true(mt_rec_wait(&rec, 0, MT_STATE, DXL_ZK_CONNECTED, 5000) >= 0);

	char srv[128];
	assert_int_equal(dxl_zk_server(zk, srv, sizeof(srv)), 0);
	assert_non_null(strstr(g_zk, srv));
	assert_int_equal(dxl_zk_server(zk, srv, 4), DXL_E_INVAL);

	/* the tree exists, and making it again is fine */
	struct dxl_member_list l;
	assert_int_equal(dxl_member_list(zk, &l), 0);
	assert_int_equal(l.n, 0);
	dxl_member_list_free(&l);
	struct dxl_zk *zk2 = open_zk(cl, NULL);
	assert_int_equal(dxl_member_list(zk2, &l), 0);
	assert_int_equal(l.n, 0);
	dxl_member_list_free(&l);
	assert_true(dxl_zk_session_id(zk2) != dxl_zk_session_id(zk));
	char *data = NULL;
	assert_int_equal(dxl_election_leader(zk2, DXL_ELECTION_CM, &data, NULL),
			 DXL_E_NOENT);
	dxl_zk_delete(&zk2);
	assert_null(zk2);
	dxl_zk_delete(&zk);
	assert_null(zk);
	assert_int_equal(mt_rec_count(&rec, MT_STATE, DXL_ZK_CONNECTED), 1);
	dxl_zk_delete(&zk); /* NULL: no-op */
}

/* ---- nodes ------------------------------------------------------------------ */

static void test_register_duplicate_refused(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "dup");
	struct dxl_zk *a = open_zk(cl, NULL);
	struct dxl_zk *b = open_zk(cl, NULL);

	assert_int_equal(dxl_member_register(a, 7, "{\"addr\":\"10.0.0.1:7000\","
						  "\"provider\":\"tcp\"}"), 0);
	char *pa = NULL;
	int64_t owner = 0;
	assert_int_equal(dxl_member_get(a, 7, &pa, &owner), 0);
	assert_int_equal(owner, dxl_zk_session_id(a));
	assert_non_null(strstr(pa, "\"addr\":\"10.0.0.1:7000\""));
	char pidkey[64];
	snprintf(pidkey, sizeof(pidkey), "\"pid\":%d", (int)getpid());
	assert_non_null(strstr(pa, pidkey));
	assert_non_null(strstr(pa, "\"node_id\":7"));

	/* the same id from another session: refused, naming the holder */
	int rc = dxl_member_register(b, 7, "{\"addr\":\"10.0.0.2:7000\"}");
	assert_int_equal(rc, DXL_E_EXIST);
	char want[64];
	snprintf(want, sizeof(want), "pid %d on host", (int)getpid());
	assert_non_null(strstr(dxl_errmsg(), want));
	char sess[32];
	snprintf(sess, sizeof(sess), "0x%llx", (unsigned long long)dxl_zk_session_id(a));
	assert_non_null(strstr(dxl_errmsg(), sess));
	/* ... and nothing changed */
	char *pa2 = NULL;
	assert_int_equal(dxl_member_get(b, 7, &pa2, &owner), 0);
	assert_string_equal(pa, pa2);
	assert_int_equal(owner, dxl_zk_session_id(a));
	free(pa2);
	/* nor can b update or deregister a's node */
	assert_int_equal(dxl_member_update(b, 7, "{}"), DXL_E_NOENT);
	assert_int_equal(dxl_member_deregister(b, 7), DXL_E_NOENT);
	assert_int_equal(dxl_member_get(b, 7, &pa2, NULL), 0);
	assert_string_equal(pa, pa2);
	free(pa2);
	free(pa);

	/* the holder may register again (a retry): payload replaced */
	assert_int_equal(dxl_member_register(a, 7, "{\"addr\":\"10.0.0.1:7001\"}"), 0);
	assert_int_equal(dxl_member_get(b, 7, &pa, NULL), 0);
	assert_non_null(strstr(pa, "10.0.0.1:7001"));
	free(pa);

	/* bad payloads */
	assert_int_equal(dxl_member_register(b, 8, "[1,2]"), DXL_E_INVAL);
	assert_int_equal(dxl_member_register(b, 8, "{\"a\":"), DXL_E_INVAL);
	assert_int_equal(dxl_member_register(b, 8, NULL), DXL_E_INVAL);
	assert_int_equal(dxl_member_get(b, 8, &pa, NULL), DXL_E_NOENT);

	assert_int_equal(dxl_member_register(b, 8, "{\"addr\":\"10.0.0.2:7000\"}"), 0);
	assert_int_equal(dxl_member_register(b, 0, "{\"addr\":\"10.0.0.2:7009\"}"), 0);
	struct dxl_member_list l;
	assert_int_equal(dxl_member_list(a, &l), 0);
	assert_int_equal(l.n, 3);
	assert_int_equal(l.v[0].node_id, 0);
	assert_int_equal(l.v[1].node_id, 7);
	assert_int_equal(l.v[2].node_id, 8);
	assert_int_equal(l.v[1].session, dxl_zk_session_id(a));
	assert_int_equal(l.v[2].session, dxl_zk_session_id(b));
	assert_non_null(strstr(l.v[2].payload, "10.0.0.2:7000"));
	dxl_member_list_free(&l);
	assert_int_equal(l.n, 0);

	assert_int_equal(dxl_member_deregister(b, 0), 0);
	assert_int_equal(dxl_member_get(a, 0, &pa, NULL), DXL_E_NOENT);
	assert_int_equal(dxl_member_deregister(b, 0), DXL_E_NOENT);
	dxl_zk_delete(&a);
	dxl_zk_delete(&b);
}

static void test_ephemeral_vanishes_watch_sees_leave(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "leave");
	struct dxl_zk *w = open_zk(cl, NULL);
	struct dxl_zk *keep = open_zk(cl, NULL);
	assert_int_equal(dxl_member_register(keep, 1, "{\"addr\":\"h:1\"}"), 0);

	struct mt_rec rec;
	mt_rec_init(&rec);
	struct dxl_member_watch *mw = NULL;
	assert_int_equal(dxl_member_watch_new(w, mt_on_member, &rec, &mw), 0);
	/* the present ones first */
	assert_true(mt_rec_wait(&rec, 0, MT_JOIN, 1, 5000) >= 0);

	struct dxl_zk *a = open_zk(cl, NULL);
	assert_int_equal(dxl_member_register(a, 3, "{\"addr\":\"h:3\"}"), 0);
	int j = mt_rec_wait(&rec, 0, MT_JOIN, 3, 5000);
	assert_true(j >= 0);
	assert_non_null(strstr(mt_rec_get(&rec, j).text, "\"addr\":\"h:3\""));

	assert_int_equal(dxl_member_update(a, 3, "{\"addr\":\"h:3\",\"rkey\":99}"), 0);
	int u = mt_rec_wait(&rec, j, MT_UPDATE, 3, 5000);
	assert_true(u >= 0);
	assert_non_null(strstr(mt_rec_get(&rec, u).text, "\"rkey\":99"));

	/* closing the session removes the znode at once; the watch sees it */
	dxl_zk_delete(&a);
	int lv = mt_rec_wait(&rec, u, MT_LEAVE, 3, 5000);
	assert_true(lv >= 0);
	assert_non_null(strstr(mt_rec_get(&rec, lv).text, "\"rkey\":99"));
	char *p = NULL;
	assert_int_equal(dxl_member_get(w, 3, &p, NULL), DXL_E_NOENT);

	/* the same id again from a new process: a JOIN */
	struct dxl_zk *a2 = open_zk(cl, NULL);
	assert_int_equal(dxl_member_register(a2, 3, "{\"addr\":\"h:33\"}"), 0);
	int j2 = mt_rec_wait(&rec, lv, MT_JOIN, 3, 5000);
	assert_true(j2 >= 0);
	assert_non_null(strstr(mt_rec_get(&rec, j2).text, "h:33"));

	/* node 1 never left */
	assert_int_equal(mt_rec_count(&rec, MT_LEAVE, 1), 0);
	assert_int_equal(mt_rec_count(&rec, MT_JOIN, 1), 1);

	/* after delete, no more callbacks */
	dxl_member_watch_delete(&mw);
	assert_null(mw);
	int n = mt_rec_len(&rec);
	dxl_zk_delete(&a2);
	assert_int_equal(dxl_member_register(keep, 5, "{}"), 0);
	/* give a (wrong) callback time to show up: a negative check */
	usleep(200000);
	assert_int_equal(mt_rec_len(&rec), n);
	dxl_zk_delete(&keep);
	dxl_zk_delete(&w);
}

/* a callback that deletes its own watch (allowed) */
struct selfdel {
	struct dxl_member_watch *w;
	atomic_int calls;
};

static void selfdel_cb(void *arg, enum dxl_member_event ev, uint32_t id,
		       const char *payload)
{
	struct selfdel *s = arg;
	atomic_fetch_add(&s->calls, 1);
	dxl_member_watch_delete(&s->w);
}

static bool selfdel_done(void *arg)
{
	struct selfdel *s = arg;
	return atomic_load(&s->calls) > 0;
}

static void test_watch_deleted_from_its_callback(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "selfdel");
	struct dxl_zk *zk = open_zk(cl, NULL);
	assert_int_equal(dxl_member_register(zk, 1, "{}"), 0);
	assert_int_equal(dxl_member_register(zk, 2, "{}"), 0);
	struct selfdel s = {0};
	assert_int_equal(dxl_member_watch_new(zk, selfdel_cb, &s, &s.w), 0);
	assert_true(mt_wait_true(selfdel_done, &s, 5000));
	usleep(100000);
	/* two joins were pending; the watch was deleted in the first */
	assert_int_equal(atomic_load(&s.calls), 1);
	dxl_zk_delete(&zk);
}

/* ---- config ------------------------------------------------------------------ */

static void make_config(struct dxl_cluster_config *c, uint64_t epoch)
{
	dxl_cluster_config_init(c);
	c->epoch = epoch;
	assert_int_equal(dxl_cluster_config_set_node(c, 1, "10.0.0.1:7000"), 0);
	assert_int_equal(dxl_cluster_config_set_node(c, 2, "10.0.0.2:7000"), 0);
	assert_int_equal(dxl_cluster_config_set_node(c, 3, "10.0.0.3:7000"), 0);
	uint32_t b0[] = {2, 3}, b1[] = {1};
	assert_int_equal(dxl_cluster_config_set_shard(c, 0, 1, b0, 2), 0);
	assert_int_equal(dxl_cluster_config_set_shard(c, 1, 2, b1, 1), 0);
}

static void test_config_encode_decode(void **state)
{
	struct dxl_cluster_config c, d;
	make_config(&c, 5);
	char *js;
	size_t len;
	assert_int_equal(dxl_cluster_config_encode(&c, &js, &len), 0);
	assert_int_equal(strlen(js), len);
	assert_int_equal(dxl_cluster_config_decode(js, len, &d), 0);
	assert_int_equal(d.epoch, 5);
	assert_int_equal(d.nnodes, 3);
	assert_int_equal(d.nshards, 2);
	assert_string_equal(dxl_cluster_config_node(&d, 2)->addr, "10.0.0.2:7000");
	const struct dxl_cluster_shard *s0 = dxl_cluster_config_shard(&d, 0);
	assert_non_null(s0);
	assert_int_equal(s0->primary, 1);
	assert_int_equal(s0->nbackups, 2);
	assert_int_equal(s0->backups[0], 2);
	assert_int_equal(s0->backups[1], 3);
	assert_null(dxl_cluster_config_shard(&d, 9));
	free(js);
	dxl_cluster_config_clear(&d);

	/* replication factor 8 fits, 9 does not */
	uint32_t seven[7] = {2, 3, 4, 5, 6, 7, 8};
	for (uint32_t i = 4; i <= 8; i++) {
		char a[32];
		snprintf(a, sizeof(a), "10.0.0.%u:7000", i);
		assert_int_equal(dxl_cluster_config_set_node(&c, i, a), 0);
	}
	assert_int_equal(dxl_cluster_config_set_shard(&c, 2, 1, seven, 7), 0);
	assert_int_equal(dxl_cluster_config_validate(&c), 0);
	uint32_t eight[8] = {2, 3, 4, 5, 6, 7, 8, 9};
	assert_int_equal(dxl_cluster_config_set_shard(&c, 2, 1, eight, 8), DXL_E_INVAL);

	/* validation */
	struct dxl_cluster_config bad;
	assert_int_equal(dxl_cluster_config_copy(&bad, &c), 0);
	uint32_t pb[] = {1};
	assert_int_equal(dxl_cluster_config_set_shard(&bad, 3, 1, pb, 1), 0);
	assert_int_equal(dxl_cluster_config_validate(&bad), DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "both primary and backup"));
	uint32_t db[] = {2, 2};
	assert_int_equal(dxl_cluster_config_set_shard(&bad, 3, 1, db, 2), 0);
	assert_int_equal(dxl_cluster_config_validate(&bad), DXL_E_INVAL);
	uint32_t nb[] = {42};
	assert_int_equal(dxl_cluster_config_set_shard(&bad, 3, 1, nb, 1), 0);
	assert_int_equal(dxl_cluster_config_validate(&bad), DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "42"));
	assert_int_equal(dxl_cluster_config_encode(&bad, &js, &len), DXL_E_INVAL);
	assert_int_equal(dxl_cluster_config_set_shard(&bad, 3, 1, NULL, 0), 0);
	assert_int_equal(dxl_cluster_config_validate(&bad), 0);
	assert_int_equal(dxl_cluster_config_remove_node(&bad, 1), 0);
	assert_int_equal(dxl_cluster_config_validate(&bad), DXL_E_INVAL);
	assert_int_equal(dxl_cluster_config_remove_node(&bad, 1), DXL_E_NOENT);
	bad.epoch = 0;
	assert_int_equal(dxl_cluster_config_validate(&bad), DXL_E_INVAL);
	dxl_cluster_config_clear(&bad);
	assert_int_equal(dxl_cluster_config_set_node(&c, 1, ""), DXL_E_INVAL);
	dxl_cluster_config_clear(&c);

	/* strict decoding: each of these is DXL_E_CORRUPT with a message */
	static const struct {
		const char *json;
		const char *msg;
	} corrupt[] = {
		{"", "malformed JSON"},
		{"{\"format\":1,", "malformed JSON"},
		{"[]", "not a JSON object"},
		{"{\"format\":1,\"epoch\":1,\"nodes\":[]}", "missing \"shards\""},
		{"{\"format\":1,\"nodes\":[],\"shards\":[]}", "missing \"epoch\""},
		{"{\"epoch\":1,\"nodes\":[],\"shards\":[]}", "missing \"format\""},
		{"{\"format\":1,\"epoch\":0,\"nodes\":[],\"shards\":[]}", "\"epoch\" = 0"},
		{"{\"format\":1,\"epoch\":-3,\"nodes\":[],\"shards\":[]}", "\"epoch\""},
		{"{\"format\":1,\"epoch\":\"1\",\"nodes\":[],\"shards\":[]}",
		 "not an integer"},
		{"{\"format\":1,\"epoch\":1.5,\"nodes\":[],\"shards\":[]}",
		 "not an integer"},
		{"{\"format\":1,\"epoch\":1,\"nodes\":{},\"shards\":[]}", "not an array"},
		{"{\"format\":1,\"epoch\":1,\"nodes\":[],\"shards\":[],\"x\":1}",
		 "unknown key \"x\""},
		{"{\"format\":1,\"epoch\":1,\"epoch\":2,\"nodes\":[],\"shards\":[]}",
		 "malformed JSON"},
		{"{\"format\":1,\"epoch\":1,\"nodes\":[{\"id\":1}],\"shards\":[]}",
		 "missing \"addr\""},
		{"{\"format\":1,\"epoch\":1,\"nodes\":[{\"id\":4294967296,\"addr\":\"a\"}],"
		 "\"shards\":[]}", "out of"},
		{"{\"format\":1,\"epoch\":1,\"nodes\":[{\"id\":1,\"addr\":\"\"}],"
		 "\"shards\":[]}", "\"addr\""},
		{"{\"format\":1,\"epoch\":1,\"nodes\":[{\"id\":1,\"addr\":\"a\"}],"
		 "\"shards\":[{\"id\":0,\"primary\":2,\"backups\":[]}]}",
		 "not in the node list"},
		{"{\"format\":1,\"epoch\":1,\"nodes\":[{\"id\":1,\"addr\":\"a\"}],"
		 "\"shards\":[{\"id\":0,\"primary\":1}]}", "missing \"backups\""},
		{"{\"format\":1,\"epoch\":1,\"nodes\":[{\"id\":1,\"addr\":\"a\"},"
		 "{\"id\":1,\"addr\":\"b\"}],\"shards\":[]}", "listed twice"},
		{"{\"format\":1,\"epoch\":1,\"nodes\":[],\"shards\":[]} x", "malformed JSON"},
		/* data identities (issue 16.3): members only, strict hex, not 0 */
#define DID(ids) "{\"format\":1,\"epoch\":1,\"nodes\":[{\"id\":1,\"addr\":\"a\"},"       \
		 "{\"id\":2,\"addr\":\"b\"}],\"shards\":[{\"id\":0,\"primary\":1,"            \
		 "\"backups\":[],\"data_ids\":" ids "}]}"
		{DID("{\"2\":\"0x1\"}"), "\"2\" is not a member"},
		{DID("{\"01\":\"0x1\"}"), "\"01\" is not a member"},
		{DID("{\"x\":\"0x1\"}"), "\"x\" is not a member"},
		{DID("{\"1\":\"0x0\"}"), "not 0"},
		{DID("{\"1\":\"0x-1\"}"), "hex"},
		{DID("{\"1\":\"0x 1\"}"), "hex"},
		{DID("{\"1\":\"0x0x1\"}"), "hex"},
		{DID("{\"1\":1}"), "hex"},
		{DID("[]"), "\"data_ids\" is not an object"},
	};
	for (size_t i = 0; i < DXL_ARRAY_SIZE(corrupt); i++) {
		int rc = dxl_cluster_config_decode(corrupt[i].json,
						   strlen(corrupt[i].json), &d);
		if (rc != DXL_E_CORRUPT || !strstr(dxl_errmsg(), corrupt[i].msg))
			print_message("case %zu (%s): %s / %s\n", i, corrupt[i].json,
				      dxl_errname(rc), dxl_errmsg());
		assert_int_equal(rc, DXL_E_CORRUPT);
		assert_non_null(strstr(dxl_errmsg(), corrupt[i].msg));
		assert_int_equal(d.nnodes, 0);
		assert_null(d.nodes);
	}
	const char *v2 = "{\"format\":2,\"epoch\":1,\"nodes\":[],\"shards\":[]}";
	assert_int_equal(dxl_cluster_config_decode(v2, strlen(v2), &d), DXL_E_VERSION);
	const char *ok = "{\"format\":1,\"epoch\":1,\"nodes\":[],\"shards\":[]}";
	assert_int_equal(dxl_cluster_config_decode(ok, strlen(ok), &d), 0);
	dxl_cluster_config_clear(&d);
	/* data identities round-trip, follow their members, and are cleared
	 * by set_shard */
	const char *ids = DID("{\"1\":\"0xFfFfFfFfFfFfFfFf\"}");
	assert_int_equal(dxl_cluster_config_decode(ids, strlen(ids), &d), 0);
	assert_true(dxl_cluster_shard_data_id(&d.shards[0], 1) == UINT64_MAX);
	assert_int_equal(dxl_cluster_shard_data_id(&d.shards[0], 2), 0);
	uint32_t two = 2;
	assert_int_equal(dxl_cluster_config_set_shard(&d, 0, 1, &two, 1), 0);
	assert_int_equal(dxl_cluster_shard_data_id(&d.shards[0], 1), 0);
	assert_int_equal(dxl_cluster_config_set_data_id(&d, 0, 2, 0x2a), 0);
	assert_int_equal(dxl_cluster_config_set_data_id(&d, 0, 3, 0x2a), DXL_E_NOENT);
	assert_int_equal(dxl_cluster_config_set_data_id(&d, 9, 2, 0x2a), DXL_E_NOENT);
	char *js2 = NULL;
	assert_int_equal(dxl_cluster_config_encode(&d, &js2, NULL), 0);
	assert_non_null(strstr(js2, "\"data_ids\":{\"2\":\"0x2a\"}"));
	dxl_cluster_config_clear(&d);
	assert_int_equal(dxl_cluster_config_decode(js2, strlen(js2), &d), 0);
	assert_int_equal(dxl_cluster_shard_data_id(&d.shards[0], 2), 0x2a);
	free(js2);
	dxl_cluster_config_clear(&d);
#undef DID
}

static void test_config_create_read_cas(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "cfg");
	struct dxl_zk *a = open_zk(cl, NULL);
	struct dxl_zk *b = open_zk(cl, NULL);
	struct dxl_cluster_config c, r;
	int32_t v = 123;

	assert_int_equal(dxl_cluster_config_read(a, &r, &v), DXL_E_NOENT);
	make_config(&c, 1);
	assert_int_equal(dxl_cluster_config_cas(a, &c, DXL_ZK_VERSION_ANY, &v),
			 DXL_E_INVAL);
	assert_int_equal(dxl_cluster_config_cas(a, &c, 0, &v), DXL_E_STALE);
	assert_int_equal(dxl_cluster_config_cas(a, &c, DXL_ZK_VERSION_NONE, &v), 0);
	assert_int_equal(v, 0);
	/* a second creator loses */
	assert_int_equal(dxl_cluster_config_cas(b, &c, DXL_ZK_VERSION_NONE, &v),
			 DXL_E_STALE);
	assert_int_equal(dxl_cluster_config_read(b, &r, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(r.epoch, 1);
	assert_int_equal(r.nnodes, 3);
	assert_int_equal(r.nshards, 2);
	assert_int_equal(dxl_cluster_config_shard(&r, 1)->primary, 2);
	dxl_cluster_config_clear(&r);

	/* a changes it (epoch 2): version 1 */
	c.epoch = 2;
	uint32_t b0[] = {3};
	assert_int_equal(dxl_cluster_config_set_shard(&c, 0, 2, b0, 1), 0);
	int32_t nv = -5;
	assert_int_equal(dxl_cluster_config_cas(a, &c, 0, &nv), 0);
	assert_int_equal(nv, 1);
	/* b still holds version 0: its CAS fails and changes nothing */
	struct dxl_cluster_config cb;
	make_config(&cb, 3);
	assert_int_equal(dxl_cluster_config_cas(b, &cb, 0, &nv), DXL_E_STALE);
	assert_non_null(strstr(dxl_errmsg(), "version 1"));
	assert_int_equal(dxl_cluster_config_read(b, &r, &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(r.epoch, 2);
	assert_int_equal(dxl_cluster_config_shard(&r, 0)->primary, 2);
	dxl_cluster_config_clear(&r);
	/* the right version but an epoch that does not grow: refused */
	cb.epoch = 2;
	assert_int_equal(dxl_cluster_config_cas(b, &cb, 1, &nv), DXL_E_INVAL);
	assert_non_null(strstr(dxl_errmsg(), "does not exceed"));
	cb.epoch = 1;
	assert_int_equal(dxl_cluster_config_cas(b, &cb, 1, &nv), DXL_E_INVAL);
	/* an invalid config: refused before ZooKeeper is asked */
	cb.epoch = 3;
	uint32_t nb[] = {77};
	assert_int_equal(dxl_cluster_config_set_shard(&cb, 5, 1, nb, 1), 0);
	assert_int_equal(dxl_cluster_config_cas(b, &cb, 1, &nv), DXL_E_INVAL);
	assert_int_equal(dxl_cluster_config_read(a, &r, &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(r.epoch, 2);
	assert_null(dxl_cluster_config_shard(&r, 5));
	dxl_cluster_config_clear(&r);
	/* fixed: version 1 -> 2, epoch 3 */
	assert_int_equal(dxl_cluster_config_set_shard(&cb, 5, 1, NULL, 0), 0);
	assert_int_equal(dxl_cluster_config_cas(b, &cb, 1, &nv), 0);
	assert_int_equal(nv, 2);
	assert_int_equal(dxl_cluster_config_read(a, &r, &v), 0);
	assert_int_equal(r.epoch, 3);
	assert_non_null(dxl_cluster_config_shard(&r, 5));
	dxl_cluster_config_clear(&r);

	dxl_cluster_config_clear(&c);
	dxl_cluster_config_clear(&cb);
	dxl_zk_delete(&a);
	dxl_zk_delete(&b);
}

static void test_config_corrupt_znode(void **state)
{
	char cl[64], path[160];
	mt_cluster_name(cl, sizeof(cl), "cfgbad");
	struct dxl_zk *a = open_zk(cl, NULL);
	snprintf(path, sizeof(path), "/dxl/%s/config", cl);
	struct dxl_cluster_config c, r;
	int32_t v;

	raw_put(path, "{\"format\":1,\"epoch\":");
	assert_int_equal(dxl_cluster_config_read(a, &r, &v), DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), path));
	assert_non_null(strstr(dxl_errmsg(), "malformed JSON"));
	/* a CAS cannot check the epoch of garbage: refused, nothing changed */
	make_config(&c, 9);
	assert_int_equal(dxl_cluster_config_cas(a, &c, 0, &v), DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "repair it by hand"));
	assert_int_equal(dxl_cluster_config_read(a, &r, &v), DXL_E_CORRUPT);

	raw_put(path, "{\"format\":1,\"epoch\":4,\"nodes\":[]}");
	assert_int_equal(dxl_cluster_config_read(a, &r, &v), DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "missing \"shards\""));
	raw_put(path, "{\"format\":7,\"epoch\":4,\"nodes\":[],\"shards\":[]}");
	assert_int_equal(dxl_cluster_config_read(a, &r, &v), DXL_E_VERSION);
	raw_put(path, "{\"format\":1,\"epoch\":4,\"nodes\":[],\"shards\":[]}");
	assert_int_equal(dxl_cluster_config_read(a, &r, &v), 0);
	assert_int_equal(r.epoch, 4);
	dxl_cluster_config_clear(&r);
	/* the next CAS must go beyond epoch 4 */
	c.epoch = 4;
	assert_int_equal(dxl_cluster_config_cas(a, &c, v, NULL), DXL_E_INVAL);
	c.epoch = 5;
	assert_int_equal(dxl_cluster_config_cas(a, &c, v, NULL), 0);
	dxl_cluster_config_clear(&c);
	dxl_zk_delete(&a);
}

static void on_config(void *arg, const struct dxl_cluster_config *cfg,
		      int32_t version, int status)
{
	char text[64];
	snprintf(text, sizeof(text), "%d", status);
	mt_rec_add(arg, MT_CONFIG, version < 0 ? UINT32_MAX - 1 : (uint32_t)version,
		   cfg ? cfg->epoch : 0, text);
}

static void test_config_watch(void **state)
{
	char cl[64], path[160];
	mt_cluster_name(cl, sizeof(cl), "cfgwatch");
	struct dxl_zk *a = open_zk(cl, NULL);
	struct dxl_zk *w = open_zk(cl, NULL);
	struct mt_rec rec;
	mt_rec_init(&rec);
	struct dxl_cluster_config_watch *cw = NULL;
	assert_int_equal(dxl_cluster_config_watch_new(w, on_config, &rec, &cw), 0);
	/* absent at first */
	int i = mt_rec_wait(&rec, 0, MT_CONFIG, UINT32_MAX - 1, 5000);
	assert_true(i >= 0);
	char st[16];
	snprintf(st, sizeof(st), "%d", DXL_E_NOENT);
	assert_string_equal(mt_rec_get(&rec, i).text, st);

	struct dxl_cluster_config c;
	make_config(&c, 1);
	assert_int_equal(dxl_cluster_config_cas(a, &c, DXL_ZK_VERSION_NONE, NULL), 0);
	i = mt_rec_wait(&rec, i + 1, MT_CONFIG, 0, 5000);
	assert_true(i >= 0);
	assert_int_equal(mt_rec_get(&rec, i).epoch, 1);
	assert_string_equal(mt_rec_get(&rec, i).text, "0");

	c.epoch = 2;
	assert_int_equal(dxl_cluster_config_cas(a, &c, 0, NULL), 0);
	i = mt_rec_wait(&rec, i + 1, MT_CONFIG, 1, 5000);
	assert_true(i >= 0);
	assert_int_equal(mt_rec_get(&rec, i).epoch, 2);

	/* a corrupt znode is reported as such */
	snprintf(path, sizeof(path), "/dxl/%s/config", cl);
	raw_put(path, "not json");
	i = mt_rec_wait(&rec, i + 1, MT_CONFIG, 2, 5000);
	assert_true(i >= 0);
	snprintf(st, sizeof(st), "%d", DXL_E_CORRUPT);
	assert_string_equal(mt_rec_get(&rec, i).text, st);
	assert_int_equal(mt_rec_get(&rec, i).epoch, 0);

	dxl_cluster_config_watch_delete(&cw);
	assert_null(cw);
	dxl_cluster_config_clear(&c);
	dxl_zk_delete(&w);
	dxl_zk_delete(&a);
}

/* ---- election ---------------------------------------------------------------- */

struct cand {
	struct mt_rec *rec;
	uint32_t idx;
};

static void on_elect(void *arg, enum dxl_election_event ev)
{
	struct cand *c = arg;
	mt_rec_add(c->rec, ev == DXL_ELECTION_ELECTED ? MT_ELECTED : MT_LOST, c->idx,
		   0, NULL);
}

struct pred_probe {
	struct dxl_election *e;
	int64_t want;
};

static bool pred_is(void *arg)
{
	struct pred_probe *p = arg;
	return dxl_election_predecessor(p->e) == p->want;
}

static void test_election(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "elect");
	struct mt_rec rec;
	mt_rec_init(&rec);
	struct dxl_zk *zk[4];
	struct dxl_election *e[4];
	struct cand cand[4];
	for (int i = 0; i < 3; i++) {
		zk[i] = open_zk(cl, NULL);
		cand[i].rec = &rec;
		cand[i].idx = (uint32_t)i;
		char data[32];
		snprintf(data, sizeof(data), "{\"cm\":%d}", i);
		assert_int_equal(dxl_election_new(zk[i], DXL_ELECTION_CM, data, on_elect,
						  &cand[i], &e[i]), 0);
	}
	/* the first candidate leads; each other watches the one before it */
	assert_true(mt_rec_wait(&rec, 0, MT_ELECTED, 0, 5000) >= 0);
	assert_true(dxl_election_seq(e[0]) < dxl_election_seq(e[1]));
	assert_true(dxl_election_seq(e[1]) < dxl_election_seq(e[2]));
	struct pred_probe p1 = {e[1], dxl_election_seq(e[0])};
	struct pred_probe p2 = {e[2], dxl_election_seq(e[1])};
	assert_true(mt_wait_true(pred_is, &p1, 5000));
	assert_true(mt_wait_true(pred_is, &p2, 5000));
	assert_int_equal(dxl_election_predecessor(e[0]), -1);
	assert_true(dxl_election_is_leader(e[0]));
	assert_false(dxl_election_is_leader(e[1]));
	assert_false(dxl_election_is_leader(e[2]));
	char *data = NULL;
	int64_t seq;
	assert_int_equal(dxl_election_leader(zk[2], DXL_ELECTION_CM, &data, &seq), 0);
	assert_string_equal(data, "{\"cm\":0}");
	assert_int_equal(seq, dxl_election_seq(e[0]));
	free(data);
	assert_int_equal(dxl_election_leader(zk[2], "no/slash", &data, &seq),
			 DXL_E_INVAL);

	/* the leader's session ends: exactly one new leader, the next one */
	dxl_zk_delete(&zk[0]); /* frees e[0] too */
	int el = mt_rec_wait(&rec, 0, MT_ELECTED, 1, 5000);
	assert_true(el >= 0);
	assert_true(dxl_election_is_leader(e[1]));
	assert_false(dxl_election_is_leader(e[2]));
	/* candidate 2 was not woken: it still watches 1 */
	assert_int_equal(dxl_election_predecessor(e[2]), dxl_election_seq(e[1]));
	assert_int_equal(mt_rec_count(&rec, MT_ELECTED, UINT32_MAX), 2);
	assert_int_equal(dxl_election_leader(zk[2], DXL_ELECTION_CM, &data, NULL), 0);
	assert_string_equal(data, "{\"cm\":1}");
	free(data);

	/* a middle candidate resigns: the next one re-links to the leader */
	zk[3] = open_zk(cl, NULL);
	cand[3].rec = &rec;
	cand[3].idx = 3;
	assert_int_equal(dxl_election_new(zk[3], DXL_ELECTION_CM, NULL, on_elect,
					  &cand[3], &e[3]), 0);
	struct pred_probe p3 = {e[3], dxl_election_seq(e[2])};
	assert_true(mt_wait_true(pred_is, &p3, 5000));
	assert_int_equal(dxl_election_resign(e[2]), 0);
	assert_int_equal(dxl_election_resign(e[2]), DXL_E_STATE);
	assert_int_equal(dxl_election_seq(e[2]), -1);
	p3.want = dxl_election_seq(e[1]);
	assert_true(mt_wait_true(pred_is, &p3, 5000));
	assert_true(dxl_election_is_leader(e[1]));
	assert_false(dxl_election_is_leader(e[3]));

	/* the leader's session expires: LOST there, ELECTED at 3 */
	assert_int_equal(dxl_zk_inject_expiry(zk[1]), 0);
	assert_true(mt_rec_wait(&rec, 0, MT_LOST, 1, 10000) >= 0);
	assert_true(mt_rec_wait(&rec, 0, MT_ELECTED, 3, 10000) >= 0);
	assert_false(dxl_election_is_leader(e[1]));
	assert_true(dxl_election_is_leader(e[3]));
	assert_int_equal(mt_rec_count(&rec, MT_ELECTED, UINT32_MAX), 3);
	assert_int_equal(mt_rec_count(&rec, MT_ELECTED, 2), 0);
	assert_int_equal(mt_rec_count(&rec, MT_LOST, UINT32_MAX), 1);

	dxl_election_delete(&e[2]);
	dxl_election_delete(&e[3]);
	dxl_election_delete(&e[1]);
	assert_null(e[1]);
	/* resignation of the last candidate: nobody leads */
	assert_int_equal(dxl_election_leader(zk[2], DXL_ELECTION_CM, &data, NULL),
			 DXL_E_NOENT);
	for (int i = 1; i < 4; i++)
		dxl_zk_delete(&zk[i]);
}

/* ---- session expiry and a new session ------------------------------------------ */

static bool zk_expired(void *arg)
{
	return dxl_zk_state(arg) == DXL_ZK_EXPIRED;
}

static void test_expiry_and_reopen(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "reopen");
	struct mt_rec rec, mrec;
	mt_rec_init(&rec);
	mt_rec_init(&mrec);
	struct dxl_zk *zk = open_zk(cl, &rec);
	struct dxl_zk *obs = open_zk(cl, NULL);
	struct dxl_member_watch *mw;
	assert_int_equal(dxl_member_watch_new(zk, mt_on_member, &mrec, &mw), 0);
	assert_int_equal(dxl_member_register(zk, 4, "{\"addr\":\"x:4\"}"), 0);
	assert_true(mt_rec_wait(&mrec, 0, MT_JOIN, 4, 5000) >= 0);
	int64_t sid1 = dxl_zk_session_id(zk);

	assert_int_equal(dxl_zk_inject_expiry(zk), 0);
	assert_true(mt_wait_true(zk_expired, zk, 10000));
	assert_false(dxl_zk_lease_valid(zk));
	assert_int_equal(dxl_zk_lease_until_ns(zk), 0);
	int ex = mt_rec_wait(&rec, 0, MT_STATE, DXL_ZK_EXPIRED, 5000);
	assert_true(ex >= 0);
	/* the ephemeral znode went with the session */
	char *p;
	assert_int_equal(dxl_member_get(obs, 4, &p, NULL), DXL_E_NOENT);
	/* nothing more on this session */
	assert_int_equal(dxl_member_register(zk, 4, "{}"), DXL_E_STATE);
	assert_non_null(strstr(dxl_errmsg(), "expired"));

	/* a new session: a new membership epoch */
	assert_int_equal(dxl_zk_reopen(zk), 0);
	assert_int_equal(dxl_zk_state(zk), DXL_ZK_CONNECTED);
	assert_int_equal(dxl_zk_session_epoch(zk), 2);
	assert_true(dxl_zk_session_id(zk) != sid1);
	assert_true(dxl_zk_lease_valid(zk));
	int co = mt_rec_wait(&rec, ex, MT_STATE, DXL_ZK_CONNECTED, 5000);
	assert_true(co >= 0);
	assert_int_equal(mt_rec_get(&rec, co).epoch, 2);
	/* the watch survived and saw node 4 leave */
	assert_true(mt_rec_wait(&mrec, 0, MT_LEAVE, 4, 5000) >= 0);
	assert_int_equal(dxl_member_register(zk, 4, "{\"addr\":\"x:44\"}"), 0);
	int j = mt_rec_wait(&mrec, 1, MT_JOIN, 4, 5000);
	assert_true(j >= 0);
	assert_non_null(strstr(mt_rec_get(&mrec, j).text, "x:44"));
	assert_int_equal(dxl_member_get(obs, 4, &p, NULL), 0);
	free(p);

	dxl_member_watch_delete(&mw);
	dxl_zk_delete(&zk);
	dxl_zk_delete(&obs);
}

/* the usual owner: a new session from the EXPIRED callback itself */
struct reopener {
	struct mt_rec rec;
	atomic_int reopen_rc;
};

static void reopen_on_expiry(struct dxl_zk *zk, void *arg, enum dxl_zk_state s)
{
	struct reopener *r = arg;
	if (s == DXL_ZK_EXPIRED)
		atomic_store(&r->reopen_rc, dxl_zk_reopen(zk));
	mt_rec_add(&r->rec, MT_STATE, (uint32_t)s, dxl_zk_session_epoch(zk), NULL);
}

static void test_reopen_from_callback(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "reopencb");
	struct reopener r;
	mt_rec_init(&r.rec);
	atomic_store(&r.reopen_rc, 1);
	struct dxl_zk_cfg c;
	cfg_for(&c, cl, NULL);
	c.on_state = reopen_on_expiry;
	c.arg = &r;
	struct dxl_zk *zk;
	assert_int_equal(dxl_zk_new(&c, &zk), 0);
	struct mt_rec mrec;
	mt_rec_init(&mrec);
	struct dxl_member_watch *mw;
	assert_int_equal(dxl_member_watch_new(zk, mt_on_member, &mrec, &mw), 0);
	assert_int_equal(dxl_member_register(zk, 9, "{}"), 0);
	assert_true(mt_rec_wait(&mrec, 0, MT_JOIN, 9, 5000) >= 0);
	assert_int_equal(dxl_zk_inject_expiry(zk), 0);
	int ex = mt_rec_wait(&r.rec, 0, MT_STATE, DXL_ZK_EXPIRED, 10000);
	assert_true(ex >= 0);
	assert_int_equal(atomic_load(&r.reopen_rc), 0);
	int co = mt_rec_wait(&r.rec, ex, MT_STATE, DXL_ZK_CONNECTED, 10000);
	assert_true(co >= 0);
	assert_int_equal(mt_rec_get(&r.rec, co).epoch, 2);
	assert_int_equal(dxl_zk_session_epoch(zk), 2);
	assert_true(dxl_zk_lease_valid(zk));
	/* the watch, re-synced on the new session, saw our node go */
	assert_true(mt_rec_wait(&mrec, 0, MT_LEAVE, 9, 5000) >= 0);
	assert_int_equal(dxl_member_register(zk, 9, "{}"), 0);
	assert_true(mt_rec_wait(&mrec, 2, MT_JOIN, 9, 5000) >= 0);
	dxl_member_watch_delete(&mw);
	dxl_zk_delete(&zk);
}

/* ---- lost replies (issue 16.6) --------------------------------------------------- */

static bool is_leader(void *arg)
{
	return dxl_election_is_leader(arg);
}

/* the children of the cluster's dir `rel`, counted */
static int count_children(const char *cl, const char *rel)
{
	zhandle_t *zh = raw_connect();
	char path[200];
	snprintf(path, sizeof(path), "/dxl/%s/%s", cl, rel);
	struct String_vector v;
	int rc = zoo_get_children(zh, path, 0, &v);
	int n = rc == ZOK ? v.count : rc == ZNONODE ? 0 : -1;
	if (rc == ZOK)
		deallocate_String_vector(&v);
	zookeeper_close(zh);
	return n;
}

/*
 * A candidacy's create is applied but its reply lost, and the listing that
 * should tell whether it landed fails too. Creating again without knowing
 * left an orphan of the node's own session before its candidacy: no one
 * ever led. Then: a candidacy whose resignation was lost leaves a znode of
 * the session; the next candidacy of that session deletes it and leads.
 */
static void test_election_lost_reply(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "elost");
	struct mt_rec rec;
	mt_rec_init(&rec);
	struct cand cand = {.rec = &rec, .idx = 0};
	struct dxl_zk *zk = open_zk(cl, NULL);
	assert_int_equal(dxl_zk_inject_faults(zk, "create:/cm/c-:reply,list:/cm:request:0:2"), 0);
	struct dxl_election *e = NULL;
	assert_int_equal(dxl_election_new(zk, DXL_ELECTION_CM, "{}", on_elect, &cand, &e), 0);
	if (!mt_wait_true(is_leader, e, 5000))
		fail_msg("not elected: %d candidates for one candidacy (predecessor %lld)",
			 count_children(cl, "cm"), (long long)dxl_election_predecessor(e));
	assert_int_equal(count_children(cl, "cm"), 1);
	assert_int_equal(dxl_zk_faults_fired(zk), 3); /* the faults did happen */

	/* the resignation is lost (request lost every time) */
	dxl_zk_clear_faults(zk);
	assert_int_equal(dxl_zk_inject_fault(zk, DXL_ZK_OP_DELETE, "/cm/c-", DXL_ZK_LOSE_REQUEST,
					     0, 0), 0);
	assert_int_equal(dxl_election_resign(e), DXL_E_UNAVAIL);
	dxl_election_delete(&e);
	dxl_zk_clear_faults(zk);
	assert_int_equal(count_children(cl, "cm"), 1); /* the leftover */
	struct cand cand2 = {.rec = &rec, .idx = 1};
	assert_int_equal(dxl_election_new(zk, DXL_ELECTION_CM, "{}", on_elect, &cand2, &e), 0);
	if (!mt_wait_true(is_leader, e, 5000))
		fail_msg("not elected behind the leftover of its own session");
	assert_int_equal(count_children(cl, "cm"), 1);
	dxl_election_delete(&e);
	dxl_zk_delete(&zk);
}

/*
 * A candidacy's create is applied, its reply lost, and the connection does
 * not come back while the candidate waits to learn the outcome (the shim's
 * "acquire" fault: zk_acquire gives up). dxl_election_new fails; the znode
 * that landed is a leftover of the session nobody owns. It stayed
 * registered as a live candidacy of the process, so no sync ever deleted it:
 * lower than every later candidacy of the session, nobody led.
 */
static void test_election_lost_reply_disconnected(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "elostd");
	struct mt_rec rec;
	mt_rec_init(&rec);
	struct cand cand = {.rec = &rec, .idx = 0};
	struct dxl_zk *zk = open_zk(cl, NULL);
	/* the create lands, its reply is lost; the wait for the connection
	 * that follows gives up (the first acquire, of the create, passes) */
	assert_int_equal(dxl_zk_inject_faults(zk, "create:/cm/c-:reply,"
						  "acquire:joining the election:request:1:1"),
			 0);
	struct dxl_election *e = NULL;
	assert_int_equal(dxl_election_new(zk, DXL_ELECTION_CM, "{}", on_elect, &cand, &e),
			 DXL_E_UNAVAIL);
	assert_null(e);
	assert_int_equal(dxl_zk_faults_fired(zk), 2);
	dxl_zk_clear_faults(zk);
	assert_int_equal(count_children(cl, "cm"), 1); /* the leftover */
	/* the next candidacy of the session deletes it and leads */
	struct cand cand2 = {.rec = &rec, .idx = 1};
	assert_int_equal(dxl_election_new(zk, DXL_ELECTION_CM, "{}", on_elect, &cand2, &e), 0);
	if (!mt_wait_true(is_leader, e, 5000))
		fail_msg("not elected behind the leftover of a failed candidacy (%d candidates, "
			 "predecessor %lld)", count_children(cl, "cm"),
			 (long long)dxl_election_predecessor(e));
	assert_int_equal(count_children(cl, "cm"), 1);
	dxl_election_delete(&e);
	dxl_zk_delete(&zk);
}

/*
 * A candidacy's create is lost, and lands only after the listing that was
 * to tell whether it landed (a lagging server; the shim's "late" fault):
 * the candidate creates again, and two znodes of its own candidacy stand in
 * the queue, the older one first. Both matched the candidacy's name prefix,
 * so the older was taken for its own and never deleted: the candidacy
 * watched it as its predecessor and never led.
 */
static void test_election_late_create(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "elate");
	struct mt_rec rec;
	mt_rec_init(&rec);
	struct cand cand = {.rec = &rec, .idx = 0};
	struct dxl_zk *zk = open_zk(cl, NULL);
	assert_int_equal(dxl_zk_inject_faults(zk, "create:/cm/c-:late"), 0);
	struct dxl_election *e = NULL;
	assert_int_equal(dxl_election_new(zk, DXL_ELECTION_CM, "{}", on_elect, &cand, &e), 0);
	assert_int_equal(dxl_zk_faults_fired(zk), 1);
	dxl_zk_clear_faults(zk);
	if (!mt_wait_true(is_leader, e, 5000))
		fail_msg("not elected behind its own late create (%d candidates, predecessor %lld, "
			 "seq %lld)", count_children(cl, "cm"),
			 (long long)dxl_election_predecessor(e), (long long)dxl_election_seq(e));
	assert_int_equal(count_children(cl, "cm"), 1);
	/* the znode left is the candidacy's own (sequence 1: the late one
	 * was 0) */
	assert_int_equal(dxl_election_seq(e), 1);
	dxl_election_delete(&e);
	assert_int_equal(count_children(cl, "cm"), 0);
	dxl_zk_delete(&zk);
}

/*
 * A writer slot's create is applied, its reply lost: the slot is held by
 * this session, but no writer has it -- it counted as a live writer (it
 * held back the backups' appliers and retention) until the session ended.
 * Now the lease learns that it landed and takes it; a release whose reply
 * is lost leaves no orphan either.
 */
static void test_writer_slot_lost_reply(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "wlost");
	struct dxl_zk *zk = open_zk(cl, NULL);
	uint32_t slot = 99;
	uint64_t mask = 0;
	/* the reply of the create is lost, and the first look fails too */
	assert_int_equal(dxl_zk_inject_faults(zk, "create:/writers/0/0:reply,read:/writers/0/0:request"),
			 0);
	int ret = dxl_writer_slot_lease(zk, 0, 4, &slot);
	uint32_t fired = dxl_zk_faults_fired(zk);
	dxl_zk_clear_faults(zk);
	if (ret == 0) {
		assert_int_equal(slot, 0);
		assert_int_equal(dxl_writer_slot_release(zk, 0, slot), 0);
	}
	assert_int_equal(dxl_writer_slots_live(zk, 0, &mask), 0);
	if (mask)
		fail_msg("lease: %s; slots 0x%llx held by nobody", dxl_errname(ret),
			 (unsigned long long)mask);
	assert_int_equal(ret, 0);
	assert_int_equal(fired, 2);
	/* the create is lost before it is applied: created again */
	assert_int_equal(dxl_zk_inject_faults(zk, "create:/writers/0/0:request"), 0);
	assert_int_equal(dxl_writer_slot_lease(zk, 0, 4, &slot), 0);
	assert_int_equal(slot, 0);
	dxl_zk_clear_faults(zk);
	/* the release's delete is applied, its reply lost; then a release
	 * whose delete never happened: the next call deletes the orphan */
	assert_int_equal(dxl_zk_inject_faults(zk, "delete:/writers/0/0:reply"), 0);
	dxl_writer_slot_release(zk, 0, 0);
	dxl_zk_clear_faults(zk);
	assert_int_equal(dxl_writer_slots_live(zk, 0, &mask), 0);
	assert_int_equal(mask, 0);
	assert_int_equal(dxl_writer_slot_lease(zk, 0, 4, &slot), 0);
	assert_int_equal(dxl_zk_inject_faults(zk, "delete:/writers/0/0:request:0:0"), 0);
	assert_int_equal(dxl_writer_slot_release(zk, 0, slot), DXL_E_UNAVAIL);
	dxl_zk_clear_faults(zk);
	assert_int_equal(dxl_writer_slots_live(zk, 0, &mask), 0);
	assert_int_equal(mask, 0);
	dxl_zk_delete(&zk);
}

/*
 * The registry of held writer slots. It was one table for the process,
 * capped at 4096 entries that were never dropped when their session ended;
 * once full, a lease went unrecorded and the next writer of the same
 * session that met the znode ("ours", and held by nobody here) took the
 * same slot: two writers on one ring. Now it is per zk and per session: a
 * lease it cannot record is refused before anything is created, and a new
 * session starts empty (the old one's znodes went with it).
 */
static void test_writer_registry(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "wreg");
	/* the registry's size: 8 here (zk.writer_slots_max); with
	 * DXL_TEST_WRITER_SLOTS=4096 the default and the old table's size
	 * (4096 creates: about 17 s) */
	const char *env = getenv("DXL_TEST_WRITER_SLOTS");
	uint32_t n = env ? (uint32_t)atoi(env) : 8;
	assert_true(n >= 8 && n <= 4096);
	struct dxl_zk_cfg c;
	cfg_for(&c, cl, NULL);
	c.writer_slots_max = n;
	struct dxl_zk *zk = NULL;
	assert_int_equal(dxl_zk_new(&c, &zk), 0);
	uint64_t t0 = dxl_now_ms();
	/* n slots held by this session: shards 100.. x 64 slots */
	for (uint32_t i = 0; i < n; i++) {
		int ret = dxl_writer_slot_take(zk, 100 + i / 64, i % 64);
		if (ret)
			fail_msg("take %u/%u: %s", 100 + i / 64, i % 64, dxl_errmsg());
	}
	print_message("%u writer slots taken in %llu ms\n", n,
		      (unsigned long long)(dxl_now_ms() - t0));
	/* two writers of this session lease a slot of another shard: never
	 * the same one (or one of them is refused) */
	uint32_t a = 99, b = 99;
	int ra = dxl_writer_slot_lease(zk, 7, 4, &a);
	int rb = dxl_writer_slot_lease(zk, 7, 4, &b);
	if (!ra && !rb && a == b)
		fail_msg("two writers of one session leased slot %u of shard 7", a);
	assert_int_equal(ra, DXL_E_FULL);
	assert_int_equal(rb, DXL_E_FULL);
	uint64_t mask = 1;
	assert_int_equal(dxl_writer_slots_live(zk, 7, &mask), 0);
	assert_int_equal(mask, 0); /* refused before anything was created */
	/* a release makes room (a release of a slot not held changes
	 * nothing) */
	assert_int_equal(dxl_writer_slot_release(zk, 7, 2), DXL_E_NOENT);
	assert_int_equal(dxl_writer_slot_lease(zk, 7, 4, &a), DXL_E_FULL);
	assert_int_equal(dxl_writer_slot_release(zk, 100, 5), 0);
	assert_int_equal(dxl_writer_slot_lease(zk, 7, 4, &a), 0);
	assert_int_equal(a, 0);
	assert_int_equal(dxl_writer_slot_lease(zk, 7, 4, &b), DXL_E_FULL);

	/* the session ends (its slots with it), a new one starts: the
	 * registry of the old one is gone too */
	assert_int_equal(dxl_zk_inject_expiry(zk), 0);
	uint64_t end = dxl_now_ms() + 10000;
	while (dxl_zk_state(zk) != DXL_ZK_EXPIRED) {
		if (dxl_now_ms() > end)
			fail_msg("the session did not expire");
		usleep(10000);
	}
	assert_int_equal(dxl_zk_reopen(zk), 0);
	a = b = 99;
	ra = dxl_writer_slot_lease(zk, 7, 4, &a);
	rb = dxl_writer_slot_lease(zk, 7, 4, &b);
	if (!ra && !rb && a == b)
		fail_msg("two writers of the new session leased slot %u of shard 7", a);
	if (ra || rb)
		fail_msg("leases in a new session: %s / %s (the old session's registry "
			 "was kept): %s", dxl_errname(ra), dxl_errname(rb), dxl_errmsg());
	assert_int_equal(a, 0);
	assert_int_equal(b, 1);
	assert_int_equal(dxl_writer_slots_live(zk, 7, &mask), 0);
	assert_int_equal(mask, 3);
	dxl_zk_delete(&zk);
}

/*
 * Versioned sets and registrations whose reply is lost: the caller gets
 * DXL_E_UNAVAIL ("may or may not have been applied") and learns the
 * outcome by reading; a retry is safe -- a CAS retried with the old version
 * is refused (DXL_E_STALE) instead of applied twice, a registration retried
 * by its session just rewrites its own znode.
 */
static void test_versioned_set_lost_reply(void **state)
{
	char cl[64];
	mt_cluster_name(cl, sizeof(cl), "vlost");
	struct dxl_zk *zk = open_zk(cl, NULL);
	struct dxl_cluster_config c;
	dxl_cluster_config_init(&c);
	c.epoch = 1;
	assert_int_equal(dxl_cluster_config_set_node(&c, 1, "a:1"), 0);
	assert_int_equal(dxl_cluster_config_set_shard(&c, 0, 1, NULL, 0), 0);
	int32_t v = -9;
	assert_int_equal(dxl_cluster_config_cas(zk, &c, DXL_ZK_VERSION_NONE, &v), 0);
	c.epoch = 2;
	assert_int_equal(dxl_zk_inject_faults(zk, "set:/config:reply"), 0);
	assert_int_equal(dxl_cluster_config_cas(zk, &c, v, NULL), DXL_E_UNAVAIL);
	assert_int_equal(dxl_zk_faults_fired(zk), 1);
	struct dxl_cluster_config r;
	int32_t v2 = -9;
	assert_int_equal(dxl_cluster_config_read(zk, &r, &v2), 0);
	assert_int_equal(r.epoch, 2); /* it was applied */
	dxl_cluster_config_clear(&r);
	assert_int_equal(dxl_cluster_config_cas(zk, &c, v, NULL), DXL_E_STALE);
	/* a lost request: not applied, the retry applies it */
	c.epoch = 3;
	assert_int_equal(dxl_zk_inject_faults(zk, "set:/config:request"), 0);
	assert_int_equal(dxl_cluster_config_cas(zk, &c, v2, NULL), DXL_E_UNAVAIL);
	assert_int_equal(dxl_cluster_config_read(zk, &r, NULL), 0);
	assert_int_equal(r.epoch, 2);
	dxl_cluster_config_clear(&r);
	assert_int_equal(dxl_cluster_config_cas(zk, &c, v2, NULL), 0);
	dxl_cluster_config_clear(&c);
	/* nodes/<id>: a create and then a set that lose their replies */
	assert_int_equal(dxl_zk_inject_faults(zk, "create:/nodes/5:reply"), 0);
	assert_int_equal(dxl_member_register(zk, 5, "{\"v\":1}"), DXL_E_UNAVAIL);
	assert_int_equal(dxl_member_register(zk, 5, "{\"v\":2}"), 0); /* ours: updated */
	assert_int_equal(dxl_zk_inject_faults(zk, "set:/nodes/5:reply"), 0);
	assert_int_equal(dxl_member_update(zk, 5, "{\"v\":3}"), DXL_E_UNAVAIL);
	char *payload = NULL;
	assert_int_equal(dxl_member_get(zk, 5, &payload, NULL), 0);
	assert_non_null(strstr(payload, "\"v\":3"));
	free(payload);
	assert_int_equal(dxl_zk_faults_fired(zk), 4);
	dxl_zk_delete(&zk);
}

/* ---- cursors ------------------------------------------------------------------ */

static void test_cursors(void **state)
{
	char cl[64], path[160];
	mt_cluster_name(cl, sizeof(cl), "cursor");
	struct dxl_zk *a = open_zk(cl, NULL);
	struct dxl_zk *b = open_zk(cl, NULL);
	uint64_t ts = 1;
	int32_t v = -9, nv = -9;

	assert_int_equal(dxl_cursor_get(a, "cdc", 3, &ts, &v), DXL_E_NOENT);
	assert_int_equal(dxl_cursor_set(a, "cdc", 3, 1000, 0, &nv), DXL_E_STALE);
	assert_int_equal(dxl_cursor_set(a, "cdc", 3, 1000, DXL_ZK_VERSION_NONE, &nv), 0);
	assert_int_equal(nv, 0);
	assert_int_equal(dxl_cursor_get(b, "cdc", 3, &ts, &v), 0);
	assert_int_equal(ts, 1000);
	assert_int_equal(v, 0);
	/* two consumers of one group: the one with the old version loses */
	assert_int_equal(dxl_cursor_set(b, "cdc", 3, 2000, 0, &nv), 0);
	assert_int_equal(nv, 1);
	assert_int_equal(dxl_cursor_set(a, "cdc", 3, 1500, 0, &nv), DXL_E_STALE);
	assert_int_equal(dxl_cursor_get(a, "cdc", 3, &ts, &v), 0);
	assert_int_equal(ts, 2000);
	assert_int_equal(v, 1);
	assert_int_equal(dxl_cursor_set(a, "cdc", 3, 1, DXL_ZK_VERSION_NONE, &nv),
			 DXL_E_STALE);
	/* the full 64 bits round-trip */
	assert_int_equal(dxl_cursor_set(a, "cdc", 3, UINT64_MAX, 1, &nv), 0);
	assert_int_equal(dxl_cursor_get(b, "cdc", 3, &ts, &v), 0);
	assert_int_equal(ts, UINT64_MAX);
	assert_int_equal(v, 2);
	/* ANY writes whatever is there, creating if needed */
	assert_int_equal(dxl_cursor_set(a, "cdc", 3, 77, DXL_ZK_VERSION_ANY, &nv), 0);
	assert_int_equal(nv, 3);
	assert_int_equal(dxl_cursor_set(a, "other", 0, 5, DXL_ZK_VERSION_ANY, &nv), 0);
	assert_int_equal(nv, 0);
	assert_int_equal(dxl_cursor_get(b, "other", 0, &ts, NULL), 0);
	assert_int_equal(ts, 5);
	/* groups and shards are separate */
	assert_int_equal(dxl_cursor_get(b, "cdc", 4, &ts, NULL), DXL_E_NOENT);
	assert_int_equal(dxl_cursor_get(b, "other", 3, &ts, NULL), DXL_E_NOENT);
	/* bad input */
	assert_int_equal(dxl_cursor_get(a, "a/b", 0, &ts, NULL), DXL_E_INVAL);
	assert_int_equal(dxl_cursor_get(a, "", 0, &ts, NULL), DXL_E_INVAL);
	assert_int_equal(dxl_cursor_set(a, "..", 0, 1, DXL_ZK_VERSION_ANY, NULL),
			 DXL_E_INVAL);
	assert_int_equal(dxl_cursor_set(a, "g", 0, 1, -7, NULL), DXL_E_INVAL);
	/* a znode that is not a cursor */
	snprintf(path, sizeof(path), "/dxl/%s/cursors/cdc/9", cl);
	raw_put(path, "{\"next_ts\":12}");
	assert_int_equal(dxl_cursor_get(a, "cdc", 9, &ts, NULL), DXL_E_CORRUPT);
	raw_put(path, "{\"next_ts\":\"99999999999999999999\"}");
	assert_int_equal(dxl_cursor_get(a, "cdc", 9, &ts, NULL), DXL_E_CORRUPT);
	/* retention's minimum: a group whose cursor of that shard cannot be
	 * read is at an unknown position, so it holds everything (0): an
	 * error, not "no cursor" (issue 16.9) */
	uint32_t ng = 0;
	assert_int_equal(dxl_cursor_set(a, "fast", 9, 5000, DXL_ZK_VERSION_ANY, NULL), 0);
	assert_int_equal(dxl_cursor_min(b, 9, &ts, &ng), DXL_E_CORRUPT);
	assert_non_null(strstr(dxl_errmsg(), "cursors/cdc/9"));
	assert_int_equal(ts, 0);
	assert_int_equal(ng, 2);
	assert_int_equal(dxl_cursor_min(b, 3, &ts, &ng), 0); /* other shards: fine */
	assert_int_equal(ts, 77);
	assert_int_equal(ng, 1);
	assert_int_equal(dxl_cursor_set(a, "cdc", 9, 4000, DXL_ZK_VERSION_ANY, NULL), 0);
	assert_int_equal(dxl_cursor_min(b, 9, &ts, &ng), 0);
	assert_int_equal(ts, 4000);
	assert_int_equal(ng, 2);
	/* delete */
	assert_int_equal(dxl_cursor_delete(a, "cdc", 3), 0);
	assert_int_equal(dxl_cursor_get(b, "cdc", 3, &ts, NULL), DXL_E_NOENT);
	assert_int_equal(dxl_cursor_delete(a, "cdc", 3), DXL_E_NOENT);
	dxl_zk_delete(&a);
	dxl_zk_delete(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_cfg_defaults_and_load, test_setup),
		cmocka_unit_test_setup(test_session_basics, test_setup),
		cmocka_unit_test_setup(test_register_duplicate_refused, test_setup),
		cmocka_unit_test_setup(test_ephemeral_vanishes_watch_sees_leave,
				       test_setup),
		cmocka_unit_test_setup(test_watch_deleted_from_its_callback, test_setup),
		cmocka_unit_test_setup(test_config_encode_decode, test_setup),
		cmocka_unit_test_setup(test_config_create_read_cas, test_setup),
		cmocka_unit_test_setup(test_config_corrupt_znode, test_setup),
		cmocka_unit_test_setup(test_config_watch, test_setup),
		cmocka_unit_test_setup(test_election, test_setup),
		cmocka_unit_test_setup(test_expiry_and_reopen, test_setup),
		cmocka_unit_test_setup(test_reopen_from_callback, test_setup),
		cmocka_unit_test_setup(test_cursors, test_setup),
		cmocka_unit_test_setup(test_election_lost_reply, test_setup),
		cmocka_unit_test_setup(test_election_lost_reply_disconnected, test_setup),
		cmocka_unit_test_setup(test_election_late_create, test_setup),
		cmocka_unit_test_setup(test_writer_slot_lost_reply, test_setup),
		cmocka_unit_test_setup(test_writer_registry, test_setup),
		cmocka_unit_test_setup(test_versioned_set_lost_reply, test_setup),
	};
	return cmocka_run_group_tests_name("membership", tests, group_setup,
					   group_teardown);
}
