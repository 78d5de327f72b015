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
"(count and hashes of (table, key, version, value) over the live records,\n"
"and of (table, key, version) over the tombstones of deleted keys that\n"
"every member still keeps: those at or above the largest reclaim floor;\n"
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

struct scan {
	struct dxl_state *st;  /* the member's state */
	uint64_t floor;        /* the largest reclaim floor of its tables */
	struct dxl_xfer_stats xs;
};

static int scan_rec(void *arg, uint32_t table, const struct dxl_record *r, const void *value)
{
	struct scan *s = arg;
	return dxl_state_add(s->st, table, r->key, r->version, r->ts, r->live, value, r->len);
}

/* member id's tables of shard: their largest reclaim floor (s->floor),
 * and unless floor_only their state (s->st) */
static int scan_member(struct dxl_zk *zk, struct vnode *vn, uint32_t id, uint32_t shard,
		       struct scan *s, bool floor_only, char *why, size_t cap)
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
	dxl_state_delete(&s->st);
	s->floor = 0;
	uint64_t floors[DXL_STORE_MAX_TABLES];
	if (!ret)
		ret = dxl_xfer_read_floors(qp, &src, floors);
	for (uint32_t t = 0; !ret && t < src.ntables; t++)
		s->floor = DXL_MAX(s->floor, floors[t]);
	uint64_t slots = 0;
	for (uint32_t t = 0; t < src.ntables; t++)
		slots += src.tables[t].capacity;
	if (!ret && !floor_only)
		ret = dxl_state_new(slots / 2, &s->st);
	if (!ret && !floor_only)
		ret = dxl_xfer_scan_store(qp, &src, scan_rec, s, 2000, &s->xs);
	dxl_qp_delete(&qp);
	if (ret)
		snprintf(why, cap, "%s", dxl_errmsg());
	return ret;
}

static bool same_entry(const struct dxl_state_entry *x, const struct dxl_state_entry *y,
		       uint64_t cut)
{
	bool xin = x && (x->live || x->ts >= cut), yin = y && (y->live || y->ts >= cut);
	if (!xin || !yin)
		return xin == yin;
	return x->live == y->live && x->version == y->version && x->vcrc == y->vcrc &&
	       x->len == y->len;
}

static void show_entry(const struct dxl_state_entry *x, uint32_t node, uint64_t cut)
{
	if (!x || (!x->live && x->ts < cut))
		printf("node %u: absent", node);
	else if (x->live)
		printf("node %u version %" PRIu64, node, x->version);
	else
		printf("node %u: deleted (tombstone version %" PRIu64 ")", node, x->version);
}

struct diffarg {
	const struct dxl_state *other;
	uint32_t na, nb;
	bool a_first;
	uint64_t cut;
	unsigned left;
};

static int diff_one(void *arg, const struct dxl_state_entry *x)
{
	struct diffarg *a = arg;
	if (!a->left)
		return 1;
	const struct dxl_state_entry *y = dxl_state_find(a->other, x->table, x->key);
	if (!a->a_first && y)
		return 0; /* seen from the other side */
	if (same_entry(x, y, a->cut))
		return 0;
	const struct dxl_state_entry *pa = a->a_first ? x : y, *pb = a->a_first ? y : x;
	printf("    table %u key %" PRIu64 ": ", x->table, x->key);
	show_entry(pa, a->na, a->cut);
	printf(", ");
	show_entry(pb, a->nb, a->cut);
	printf("%s\n", pa && pb && pa->live && pb->live && pa->version == pb->version
			       ? " (other value)" : "");
	a->left--;
	return 0;
}

/* up to n keys where member b differs from the primary a */
static void show_diff(const struct dxl_state *a, const struct dxl_state *b, uint32_t pa,
		      uint32_t mb, uint64_t cut, unsigned n)
{
	struct diffarg d = {.other = b, .na = pa, .nb = mb, .a_first = true, .cut = cut, .left = n};
	dxl_state_foreach(a, diff_one, &d);
	d.other = a;
	d.a_first = false;
	dxl_state_foreach(b, diff_one, &d);
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
		memset(s, 0, sizeof(s));
		char why[DXL_CONFIG_MAX_REPLICAS][256];
		int err[DXL_CONFIG_MAX_REPLICAS];
		struct dxl_digest dg[DXL_CONFIG_MAX_REPLICAS];
		uint64_t end = dxl_now_ms() + wait_s * 1000, reads = 0, cut = 0;
		bool agree;
		for (;;) {
			agree = true;
			reads++;
			/* tombstones every member still keeps: at or above the
			 * largest reclaim floor (docs/recovery.md "Digests"),
			 * read before the states */
			cut = 0;
			for (uint32_t k = 0; k < nm; k++) {
				err[k] = scan_member(zk, &vn, m[k], sh->id, &s[k], true, why[k],
						     sizeof(why[k]));
				if (!err[k])
					cut = DXL_MAX(cut, s[k].floor);
			}
			/* one member's state at a time (a map of its keys) */
			for (uint32_t k = 0; k < nm; k++) {
				memset(&dg[k], 0, sizeof(dg[k]));
				if (!err[k])
					err[k] = scan_member(zk, &vn, m[k], sh->id, &s[k], false, why[k],
							     sizeof(why[k]));
				if (!err[k])
					dxl_state_digest(s[k].st, cut, &dg[k]);
				dxl_state_delete(&s[k].st);
				agree &= !err[k] && dxl_digest_equal(&dg[k], &dg[0]);
			}
			if (agree || dxl_now_ms() >= end)
				break;
			usleep(300 * 1000);
		}
		char txt[160];
		if (agree) {
			dxl_digest_format(&dg[0], txt, sizeof(txt));
			printf("shard %u: %u members agree (epoch %" PRIu64 "): %s (tombstones from ts %"
			       PRIu64 ")\n", sh->id, nm, cfg.epoch, txt, cut);
		} else {
			rc = EX_FAIL;
			printf("shard %u: members DIFFER after %" PRIu64 " reads in %" PRIu64 " s:\n",
			       sh->id, reads, wait_s);
			for (uint32_t k = 0; k < nm; k++) {
				if (err[k]) {
					printf("  node %u%s: cannot be read: %s\n", m[k],
					       k ? "" : " (primary)", why[k]);
					continue;
				}
				dxl_digest_format(&dg[k], txt, sizeof(txt));
				printf("  node %u%s: %s%s\n", m[k], k ? "" : " (primary)", txt,
				       k && !err[0] && !dxl_digest_equal(&dg[k], &dg[0]) ? "  DIFFERS"
											  : "");
			}
			/* which keys: the primary against each member that differs
			 * (read again, two states at a time) */
			char w0[256];
			for (uint32_t k = 1; !err[0] && ndiff && k < nm; k++) {
				if (err[k] || dxl_digest_equal(&dg[k], &dg[0]))
					continue;
				if (!s[0].st && scan_member(zk, &vn, m[0], sh->id, &s[0], false, w0,
							    sizeof(w0)))
					break;
				if (!scan_member(zk, &vn, m[k], sh->id, &s[k], false, w0, sizeof(w0)))
					show_diff(s[0].st, s[k].st, m[0], m[k], cut, (unsigned)ndiff);
				dxl_state_delete(&s[k].st);
			}
			dxl_state_delete(&s[0].st);
		}
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
