/* verify.c -- dxl cluster verify: the members of every shard hold the same tables (state digests read with one-sided READs) */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/membership.h"
#include "dxl/recovery.h"
#include "dxl/replica.h"

#include "cli.h"

static void verify_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl cluster verify [--dir DIR | --zk CONNECT [--cluster NAME]]\n"
"                          [--shard S] [--wait SECONDS] [--diff N]\n"
"\n"
"Compare, for every shard (or S), the tables of its members: each member's\n"
"store is read with one-sided READs (as a state transfer reads it: a record\n"
"locked or being written is read again) and summarised by a state digest\n"
"(count and hashes of (table, key, version, value) over the live records;\n"
"docs/recovery.md). The members agree when their digests are equal. A\n"
"backup applies the log a little after the primary, so while transactions\n"
"run the digests differ for a moment: verify reads again until they agree\n"
"or --wait runs out, then names the member that differs from the primary\n"
"and up to N keys that differ. Run it when the shard is quiet (after a\n"
"test's schedule, or with the writers stopped) for an exact answer.\n"
"\n"
"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n"
"  --zk CONNECT       ZooKeeper connect string (instead of DIR/cluster.json)\n"
"  --cluster NAME     cluster name with --zk [default]\n"
"  --shard S          only this shard\n"
"  --wait SECONDS     keep reading while members differ [10]\n"
"  --diff N           keys to show of a member that differs [10]\n"
"  -h, --help         this text\n"
"\n" EXIT_CODES_HELP
"    (verify exits 1 when a member differs or cannot be read)\n");
}

struct vnode {
	struct dxl_fabric *f;
	struct dxl_ctx *ctx;
};

/* a (table, key) -> (version, value CRC) map, for the keys that differ */
struct kv {
	uint64_t key, version;
	uint32_t table, vcrc;
	bool used;
};

struct kmap {
	struct kv *e;
	uint64_t mask, n;
};

static uint64_t kmix(uint32_t t, uint64_t k)
{
	k ^= (uint64_t)t << 40 | t;
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return k;
}

static struct kv *kmap_slot(struct kmap *m, uint32_t t, uint64_t k)
{
	for (uint64_t i = kmix(t, k) & m->mask;; i = (i + 1) & m->mask)
		if (!m->e[i].used || (m->e[i].table == t && m->e[i].key == k))
			return &m->e[i];
}

static int kmap_put(struct kmap *m, uint32_t t, uint64_t k, uint64_t v, uint32_t crc)
{
	if (2 * (m->n + 1) > m->mask + 1) {
		uint64_t size = m->e ? 2 * (m->mask + 1) : 4096;
		struct kmap n = {.e = calloc(size, sizeof(struct kv)), .mask = size - 1};
		if (!n.e)
			return DXL_E_NOMEM;
		for (uint64_t i = 0; m->e && i <= m->mask; i++)
			if (m->e[i].used)
				*kmap_slot(&n, m->e[i].table, m->e[i].key) = m->e[i];
		n.n = m->n;
		free(m->e);
		*m = n;
	}
	struct kv *e = kmap_slot(m, t, k);
	if (!e->used)
		m->n++;
	/* a key met twice (it moved slot while read): the later state wins */
	if (!e->used || v > e->version)
		*e = (struct kv){.key = k, .version = v, .table = t, .vcrc = crc, .used = true};
	return 0;
}

static int kmap_init(struct kmap *m)
{
	m->e = calloc(4096, sizeof(struct kv));
	m->mask = 4095;
	m->n = 0;
	return m->e ? 0 : DXL_E_NOMEM;
}

struct scan {
	struct dxl_digest d;
	struct kmap *m; /* NULL: digest only */
};

static int scan_rec(void *arg, uint32_t table, const struct dxl_record *r, const void *value)
{
	struct scan *s = arg;
	dxl_digest_add(&s->d, table, r->key, r->version, value, r->len);
	if (s->m)
		return kmap_put(s->m, table, r->key, r->version,
				r->len ? dxl_crc32c(0, value, r->len) : 0);
	return 0;
}

/* read member id's tables of shard: digest (and the key map if m) */
static int scan_member(struct dxl_zk *zk, struct vnode *vn, uint32_t id, uint32_t shard,
		       struct scan *s, char *why, size_t cap)
{
	static struct dxl_replica_desc d;
	static struct dxl_xfer_source src;
	int ret = dxl_replica_desc_get(zk, id, &d);
	if (ret) {
		snprintf(why, cap, "%s", ret == DXL_E_NOENT ? "not registered" : dxl_errmsg());
		return ret;
	}
	const struct dxl_shard_desc *sd = dxl_replica_desc_shard(&d, shard);
	if (!sd || !sd->ntables) {
		snprintf(why, cap, "%s", sd ? "publishes no tables (a promotion gate closed?)"
					    : "does not host the shard");
		return DXL_E_UNAVAIL;
	}
	if (!vn->f) {
		struct dxl_fabric_cfg fc;
		dxl_fabric_cfg_init(&fc);
		fc.provider = d.provider;
		if ((ret = dxl_fabric_new(&fc, &vn->f)) || (ret = dxl_ctx_new(vn->f, 0, &vn->ctx))) {
			snprintf(why, cap, "fabric: %s", dxl_errmsg());
			return ret;
		}
	}
	memset(&src, 0, sizeof(src));
	src.node_id = id;
	snprintf(src.addr, sizeof(src.addr), "%s", d.addr);
	src.ctx = d.ctx;
	src.ntables = sd->ntables;
	for (uint32_t t = 0; t < sd->ntables; t++)
		src.tables[t] = sd->tables[t].t;
	struct dxl_qp *qp = NULL;
	ret = dxl_qp_connect(vn->ctx, d.addr, d.ctx, &qp);
	memset(&s->d, 0, sizeof(s->d));
	if (!ret)
		ret = dxl_xfer_scan_store(qp, &src, scan_rec, s, 2000, NULL);
	dxl_qp_delete(&qp);
	if (ret)
		snprintf(why, cap, "%s", dxl_errmsg());
	return ret;
}

/* up to n keys where member b differs from a */
static void show_diff(const struct kmap *a, const struct kmap *b, uint32_t pa, uint32_t mb,
		      unsigned n)
{
	unsigned shown = 0;
	for (uint64_t i = 0; i <= a->mask && shown < n; i++) {
		const struct kv *x = &a->e[i];
		if (!x->used)
			continue;
		const struct kv *y = kmap_slot((struct kmap *)b, x->table, x->key);
		if (y->used && y->version == x->version && y->vcrc == x->vcrc)
			continue;
		if (y->used)
			printf("    table %u key %" PRIu64 ": node %u version %" PRIu64
			       ", node %u version %" PRIu64 "%s\n",
			       x->table, x->key, pa, x->version, mb, y->version,
			       y->version == x->version ? " (other value)" : "");
		else
			printf("    table %u key %" PRIu64 ": node %u version %" PRIu64
			       ", node %u: absent\n", x->table, x->key, pa, x->version, mb);
		shown++;
	}
	for (uint64_t i = 0; i <= b->mask && shown < n; i++) {
		const struct kv *y = &b->e[i];
		if (!y->used || kmap_slot((struct kmap *)a, y->table, y->key)->used)
			continue;
		printf("    table %u key %" PRIu64 ": node %u: absent, node %u version %" PRIu64 "\n",
		       y->table, y->key, pa, mb, y->version);
		shown++;
	}
}

int cmd_cluster_verify(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"zk", required_argument, NULL, 'z'},
		{"cluster", required_argument, NULL, 'C'},
		{"shard", required_argument, NULL, 's'},
		{"wait", required_argument, NULL, 'w'},
		{"diff", required_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = "./dxl-cluster", *zkc = NULL, *cl = NULL;
	int64_t only = -1;
	uint64_t wait_s = 10, ndiff = 10, v;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'z': zkc = optarg; break;
		case 'C': cl = optarg; break;
		case 's':
			if (dxl_parse_u64(optarg, &v) || v >= DXL_REPLICA_MAX_SHARDS * 1024ull) {
				errf("--shard '%s': not a shard id", optarg);
				return EX_USAGE;
			}
			only = (int64_t)v;
			break;
		case 'w':
			if (dxl_parse_u64(optarg, &wait_s) || wait_s > 86400) {
				errf("--wait '%s': seconds, 0..86400", optarg);
				return EX_USAGE;
			}
			break;
		case 'n':
			if (dxl_parse_u64(optarg, &ndiff) || ndiff > 1000000) {
				errf("--diff '%s': a count, 0..1000000", optarg);
				return EX_USAGE;
			}
			break;
		case 'h': verify_usage(stdout); return EX_OK;
		default: verify_usage(stderr); return EX_USAGE;
		}
	}
	if (optind < argc) {
		errf("unexpected argument '%s' (see --help)", argv[optind]);
		return EX_USAGE;
	}
	struct conn cn;
	int ret = resolve_conn(dir, zkc, cl, &cn);
	if (ret)
		return ret;
	struct dxl_zk *zk = NULL;
	if ((ret = zk_connect(&cn, &zk)))
		return ret;
	struct dxl_cluster_config cfg;
	int r = dxl_cluster_config_read(zk, &cfg, NULL);
	if (r) {
		errf("cluster %s: %s", cn.cluster,
		     r == DXL_E_NOENT ? "no configuration" : dxl_errmsg());
		dxl_zk_delete(&zk);
		return r == DXL_E_NOENT ? EX_CLUSTER : EX_FAIL;
	}
	struct vnode vn = {0};
	int rc = EX_OK;
	bool found = false;
	for (uint32_t si = 0; si < cfg.nshards; si++) {
		const struct dxl_cluster_shard *sh = &cfg.shards[si];
		if (only >= 0 && sh->id != (uint64_t)only)
			continue;
		found = true;
		uint32_t m[DXL_CONFIG_MAX_REPLICAS];
		uint32_t nm = dxl_cluster_shard_members(sh, m);
		struct scan s[DXL_CONFIG_MAX_REPLICAS];
		char why[DXL_CONFIG_MAX_REPLICAS][256];
		int err[DXL_CONFIG_MAX_REPLICAS];
		uint64_t end = dxl_now_ms() + wait_s * 1000, reads = 0;
		bool agree;
		for (;;) {
			agree = true;
			reads++;
			for (uint32_t k = 0; k < nm; k++) {
				memset(&s[k], 0, sizeof(s[k]));
				err[k] = scan_member(zk, &vn, m[k], sh->id, &s[k], why[k], sizeof(why[k]));
				agree &= !err[k] && dxl_digest_equal(&s[k].d, &s[0].d);
			}
			if (agree || dxl_now_ms() >= end)
				break;
			usleep(300 * 1000);
		}
		char dg[96];
		if (agree) {
			dxl_digest_format(&s[0].d, dg, sizeof(dg));
			printf("shard %u: %u members agree (epoch %" PRIu64 "): %s\n", sh->id, nm,
			       cfg.epoch, dg);
			continue;
		}
		rc = EX_FAIL;
		printf("shard %u: members DIFFER after %" PRIu64 " reads in %" PRIu64 " s:\n", sh->id,
		       reads, wait_s);
		for (uint32_t k = 0; k < nm; k++) {
			if (err[k]) {
				printf("  node %u%s: cannot be read: %s\n", m[k], k ? "" : " (primary)",
				       why[k]);
				continue;
			}
			dxl_digest_format(&s[k].d, dg, sizeof(dg));
			printf("  node %u%s: %s%s\n", m[k], k ? "" : " (primary)", dg,
			       k && !err[0] && !dxl_digest_equal(&s[k].d, &s[0].d) ? "  DIFFERS" : "");
		}
		/* which keys: the primary against each member that differs */
		if (err[0] || !ndiff)
			continue;
		struct kmap pm = {0};
		struct scan ps = {.m = &pm};
		char w0[256];
		if (kmap_init(&pm) || scan_member(zk, &vn, m[0], sh->id, &ps, w0, sizeof(w0))) {
			free(pm.e);
			continue;
		}
		for (uint32_t k = 1; k < nm; k++) {
			if (err[k] || dxl_digest_equal(&s[k].d, &s[0].d))
				continue;
			struct kmap bm = {0};
			struct scan bs = {.m = &bm};
			if (!kmap_init(&bm) && !scan_member(zk, &vn, m[k], sh->id, &bs, w0, sizeof(w0)))
				show_diff(&pm, &bm, m[0], m[k], (unsigned)ndiff);
			free(bm.e);
		}
		free(pm.e);
	}
	if (!found) {
		errf("cluster %s has no shard %" PRId64, cn.cluster, only);
		rc = EX_CLUSTER;
	}
	dxl_cluster_config_clear(&cfg);
	dxl_ctx_delete(&vn.ctx);
	dxl_fabric_delete(&vn.f);
	dxl_zk_delete(&zk);
	return rc;
}
