/* nemesis.c -- seeded faults over a local dxl cluster (nemesis.h) */
#include "nemesis.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/membership.h"
#include "dxl/replica.h"
#include "tests/lib/cli_run.h"
#include "tests/lib/proc.h"

#define OUT_CAP 65536

uint64_t dxlt_nem_rand(uint64_t *rng, uint64_t m)
{
	/* xorshift64* */
	uint64_t x = *rng ? *rng : 0x9e3779b97f4a7c15ull;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*rng = x;
	return m ? (x * 0x2545f4914f6cdd1dull) % m : 0;
}

int dxlt_nem_init(struct dxlt_nem *n)
{
	memset(n, 0, sizeof(*n));
	n->out = malloc(OUT_CAP);
	n->err = malloc(OUT_CAP);
	if (!n->out || !n->err)
		return dxl_err_set(DXL_E_NOMEM, "nemesis buffers");
	n->nshards = 2;
	return 0;
}

void dxlt_nem_clear(struct dxlt_nem *n)
{
	free(n->out);
	free(n->err);
	n->out = n->err = NULL;
}

int dxlt_nem_add(struct dxlt_nem *n, const struct dxlt_fault *f)
{
	if (n->nkinds == DXLT_NEM_MAX_KINDS)
		return dxl_err_set(DXL_E_FULL, "nemesis: %d fault kinds already", DXLT_NEM_MAX_KINDS);
	n->kinds[n->nkinds++] = *f;
	return 0;
}

void dxlt_nem_only(struct dxlt_nem *n, const char *names)
{
	for (uint32_t i = 0; i < n->nkinds; i++) {
		size_t l = strlen(n->kinds[i].name);
		bool in = false;
		for (const char *p = names; p && *p;) {
			const char *c = strchr(p, ',');
			size_t pl = c ? (size_t)(c - p) : strlen(p);
			in = in || (pl == l && !strncmp(p, n->kinds[i].name, l));
			p = c ? c + 1 : NULL;
		}
		if (!in)
			n->kinds[i].weight = 0;
		else if (!n->kinds[i].weight)
			n->kinds[i].weight = 1;
	}
}

int dxlt_nem_dxl(struct dxlt_nem *n, int timeout_ms, const char *const *args)
{
	const char *argv[64];
	int a = 0;
	argv[a++] = n->dxl;
	for (int i = 0; args[i] && a < 63; i++)
		argv[a++] = args[i];
	argv[a] = NULL;
	return dxlt_run(argv, NULL, n->tmp, n->out, n->err, OUT_CAP, timeout_ms);
}
#define DXL(n, t, ...) dxlt_nem_dxl((n), (t), (const char *const[]){__VA_ARGS__, NULL})

int dxlt_nem_members(struct dxlt_nem *n, uint32_t shard, uint32_t *primary, uint32_t *backups,
		     uint32_t cap, uint32_t *nbackups)
{
	struct dxl_zk *zk = NULL;
	int ret = dxlt_zk_open(n->zk, n->cluster, &zk);
	if (ret)
		return ret;
	struct dxl_cluster_config c;
	if ((ret = dxl_cluster_config_read(zk, &c, NULL))) {
		dxl_zk_delete(&zk);
		return ret;
	}
	const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, shard);
	if (!sh) {
		ret = dxl_err_set(DXL_E_NOENT, "shard %u not in the configuration", shard);
	} else {
		*primary = sh->primary;
		*nbackups = DXL_MIN(sh->nbackups, cap);
		for (uint32_t i = 0; i < *nbackups; i++)
			backups[i] = sh->backups[i];
	}
	dxl_cluster_config_clear(&c);
	dxl_zk_delete(&zk);
	return ret;
}

int dxlt_nem_wait_members(struct dxlt_nem *n, uint32_t want, int timeout_ms)
{
	uint64_t end = dxl_now_ms() + (uint64_t)timeout_ms;
	struct dxl_zk *zk = NULL;
	int ret = dxlt_zk_open(n->zk, n->cluster, &zk);
	if (ret)
		return ret;
	for (;;) {
		struct dxl_cluster_config c;
		bool ok = false;
		if (dxl_cluster_config_read(zk, &c, NULL) == 0) {
			ok = c.nshards > 0;
			for (uint32_t i = 0; i < c.nshards; i++)
				ok = ok && c.shards[i].nbackups + 1 == want;
			dxl_cluster_config_clear(&c);
		}
		if (ok)
			break;
		if (dxl_now_ms() > end) {
			ret = dxl_err_set(DXL_E_TIMEDOUT, "the shards did not get %u members in %d ms",
					  want, timeout_ms);
			break;
		}
		usleep(100 * 1000);
	}
	dxl_zk_delete(&zk);
	return ret;
}

int dxlt_nem_kill(struct dxlt_nem *n, uint32_t node, const char *how)
{
	char id[16];
	snprintf(id, sizeof(id), "%u", node);
	int rc = !strcmp(how, "power") ? DXL(n, 30000, "cluster", "kill", id, "--dir", n->dir,
					     "--power-fail")
					: DXL(n, 30000, "cluster", "kill", id, "--signal", how, "--dir",
					      n->dir);
	if (rc)
		return dxl_err_set(DXL_E_IO, "dxl cluster kill %s (%s): exit %d: %s%s", id, how, rc,
				   n->out, n->err);
	return 0;
}

int dxlt_nem_restart(struct dxlt_nem *n, uint32_t node)
{
	char id[16];
	snprintf(id, sizeof(id), "%u", node);
	int rc = DXL(n, 60000, "cluster", "restart", id, "--dir", n->dir);
	if (rc)
		return dxl_err_set(DXL_E_IO, "dxl cluster restart %s: exit %d: %s%s", id, rc, n->out,
				   n->err);
	return 0;
}

/* ---- the built-in kinds -------------------------------------------------------------- */

static bool no_hold(const struct dxlt_nem *n)
{
	return !n->held;
}

static void sleep_ms(uint64_t ms)
{
	usleep((useconds_t)(ms * 1000));
}

/* a replica of a random shard: the primary (backup = false) or a backup */
static int pick(struct dxlt_nem *n, uint64_t *rng, bool backup, uint32_t *node, uint32_t *shard)
{
	*shard = (uint32_t)dxlt_nem_rand(rng, n->nshards);
	uint32_t p, b[8], nb;
	int ret = dxlt_nem_members(n, *shard, &p, b, 8, &nb);
	if (ret)
		return ret;
	if (backup && !nb)
		return dxl_err_set(DXL_E_STATE, "shard %u has no backup", *shard);
	*node = backup ? b[dxlt_nem_rand(rng, nb)] : p;
	return 0;
}

static int kill_restart(struct dxlt_nem *n, uint64_t *rng, bool backup, const char *how,
			char *desc, size_t cap)
{
	uint32_t node, shard;
	int ret = pick(n, rng, backup, &node, &shard);
	if (ret)
		return ret;
	uint64_t down = 500 + dxlt_nem_rand(rng, 2500);
	n->t_inject_ms = dxl_wall_ms();
	if ((ret = dxlt_nem_kill(n, node, how)))
		return ret;
	snprintf(desc, cap, "%s node %u (%s of shard %u), down %llu ms", how, node,
		 backup ? "a backup" : "primary", shard, (unsigned long long)down);
	sleep_ms(down);
	return dxlt_nem_restart(n, node);
}

static int f_kill_primary(struct dxlt_nem *n, uint64_t *rng, char *d, size_t c)
{
	return kill_restart(n, rng, false, "KILL", d, c);
}

static int f_kill_backup(struct dxlt_nem *n, uint64_t *rng, char *d, size_t c)
{
	return kill_restart(n, rng, true, "KILL", d, c);
}

static int f_power(struct dxlt_nem *n, uint64_t *rng, char *d, size_t c)
{
	return kill_restart(n, rng, dxlt_nem_rand(rng, 2), "power", d, c);
}

/* SIGSTOP past the session timeout, then SIGCONT: the node's session
 * expires, it is replaced, and comes back as a new member */
static int stop_cont(struct dxlt_nem *n, uint64_t *rng, bool backup, char *desc, size_t cap)
{
	uint32_t node, shard;
	int ret = pick(n, rng, backup, &node, &shard);
	if (ret)
		return ret;
	uint64_t ms = n->session_timeout_ms + 300 + dxlt_nem_rand(rng, 1200);
	n->t_inject_ms = dxl_wall_ms();
	if ((ret = dxlt_nem_kill(n, node, "STOP")))
		return ret;
	sleep_ms(ms);
	snprintf(desc, cap, "SIGSTOP node %u (%s of shard %u) for %llu ms, then SIGCONT", node,
		 backup ? "a backup" : "primary", shard, (unsigned long long)ms);
	return dxlt_nem_kill(n, node, "CONT");
}

static int f_stop_primary(struct dxlt_nem *n, uint64_t *rng, char *d, size_t c)
{
	return stop_cont(n, rng, false, d, c);
}

static int f_stop_backup(struct dxlt_nem *n, uint64_t *rng, char *d, size_t c)
{
	return stop_cont(n, rng, true, d, c);
}

static bool can_coord(const struct dxlt_nem *n)
{
	return n->coord_kill != NULL;
}

static int f_coord(struct dxlt_nem *n, uint64_t *rng, char *d, size_t c)
{
	n->t_inject_ms = dxl_wall_ms();
	return n->coord_kill(n->coord_arg, rng, d, c);
}

static bool can_zk(const struct dxlt_nem *n)
{
	return n->zk_kill && n->nzk >= 3;
}

static int f_zk(struct dxlt_nem *n, uint64_t *rng, char *d, size_t c)
{
	int s = 1 + (int)dxlt_nem_rand(rng, n->nzk);
	uint64_t down = 500 + dxlt_nem_rand(rng, 2500);
	n->t_inject_ms = dxl_wall_ms();
	int ret = n->zk_kill(n->zk_arg, s);
	if (ret)
		return ret;
	snprintf(d, c, "kill -9 ZooKeeper server %d, down %llu ms", s, (unsigned long long)down);
	sleep_ms(down);
	return n->zk_restart(n->zk_arg, s);
}

/* a backup goes down and stays down for a few steps (the others go on;
 * retention reclaims what it misses: it comes back by copying) */
static int f_hold(struct dxlt_nem *n, uint64_t *rng, char *d, size_t c)
{
	uint32_t node, shard;
	int ret = pick(n, rng, true, &node, &shard);
	if (ret)
		return ret;
	n->t_inject_ms = dxl_wall_ms();
	if ((ret = dxlt_nem_kill(n, node, "KILL")))
		return ret;
	n->held = node;
	n->held_steps = 0;
	n->returned = 0;
	snprintf(d, c, "kill -9 node %u (a backup of shard %u), kept down", node, shard);
	/* the shards go on with two members */
	return dxlt_nem_wait_members(n, 2, 30000);
}

static bool can_return(const struct dxlt_nem *n)
{
	return n->held && n->held_steps >= 1;
}

static int f_return(struct dxlt_nem *n, uint64_t *rng, char *d, size_t c)
{
	(void)rng;
	n->t_inject_ms = dxl_wall_ms();
	uint32_t node = n->held;
	int ret = dxlt_nem_restart(n, node);
	if (ret)
		return ret;
	snprintf(d, c, "node %u back after %u steps down", node, n->held_steps);
	n->held = 0;
	n->returned = node;
	return 0;
}

static bool can_promote(const struct dxlt_nem *n)
{
	return !n->held && n->returned;
}

/* counts -- node is what the CM promotes in shard sh (replica/cm.c
 * classify, M_COUNTED): its descriptor says MEMBER of the shard for this
 * epoch, with the data identity the configuration recorded for it */
static bool counts(struct dxl_zk *zk, const struct dxl_cluster_config *c,
		   const struct dxl_cluster_shard *sh, uint32_t node, struct dxl_replica_desc *d,
		   char *why, size_t cap)
{
	if (dxl_replica_desc_get(zk, node, d)) {
		snprintf(why, cap, "node %u is not registered", node);
		return false;
	}
	const struct dxl_shard_desc *sd = dxl_replica_desc_shard(d, sh->id);
	uint64_t rec = dxl_cluster_shard_data_id(sh, node);
	if (!sd || sd->state != DXL_SHARD_MEMBER || d->cfg_epoch < c->epoch ||
	    (rec && sd->data_id != rec)) {
		snprintf(why, cap, "node %u: shard %u %s, cfg_epoch %llu of %llu, data id 0x%llx (recorded 0x%llx)",
			 node, sh->id, sd ? dxl_shard_state_name(sd->state) : "not hosted",
			 (unsigned long long)d->cfg_epoch, (unsigned long long)c->epoch,
			 sd ? (unsigned long long)sd->data_id : 0ull, (unsigned long long)rec);
		return false;
	}
	return true;
}

static bool in_ids(const uint32_t *ids, uint32_t n, uint32_t id)
{
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* reorder -- the next epoch lists node b first among shard's backups (the
 * same members, their data identities kept); *epoch = its epoch */
static int reorder(struct dxl_zk *zk, uint32_t shard, uint32_t b, uint64_t *epoch)
{
	for (int attempt = 0;; attempt++) {
		struct dxl_cluster_config c, w;
		int32_t ver;
		int ret = dxl_cluster_config_read(zk, &c, &ver);
		if (ret)
			return ret;
		dxl_cluster_config_init(&w);
		const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, shard);
		uint32_t bk[DXL_CONFIG_MAX_BACKUPS], nb = 0;
		if (!sh || !in_ids(sh->backups, sh->nbackups, b)) {
			dxl_cluster_config_clear(&c);
			return dxl_err_set(DXL_E_STATE, "node %u is no longer a backup of shard %u", b, shard);
		}
		bk[nb++] = b;
		for (uint32_t i = 0; i < sh->nbackups; i++)
			if (sh->backups[i] != b)
				bk[nb++] = sh->backups[i];
		uint32_t m[DXL_CONFIG_MAX_REPLICAS];
		uint32_t nm = dxl_cluster_shard_members(sh, m);
		ret = dxl_cluster_config_copy(&w, &c);
		if (!ret)
			ret = dxl_cluster_config_set_shard(&w, shard, sh->primary, bk, nb);
		for (uint32_t i = 0; !ret && i < nm; i++)
			if (dxl_cluster_shard_data_id(sh, m[i]))
				ret = dxl_cluster_config_set_data_id(&w, shard, m[i],
								     dxl_cluster_shard_data_id(sh, m[i]));
		w.epoch = c.epoch + 1;
		if (!ret)
			ret = dxl_cluster_config_cas(zk, &w, ver, NULL);
		if (!ret)
			*epoch = w.epoch;
		dxl_cluster_config_clear(&c);
		dxl_cluster_config_clear(&w);
		if (ret != DXL_E_STALE || attempt >= 10)
			return ret;
		sleep_ms(100); /* the CM wrote meanwhile */
	}
}

/*
 * promote-returned: the backup that was held down, copied its way back and
 * was added again becomes a primary. The CM promotes the first backup that
 * counts (MEMBER for this epoch, its recorded data identity) when the
 * primary dies, and a returned node is added last: so the next epoch lists
 * it first (the same members, reordered, as an operator could), and the
 * primary is killed. It must then become primary within the session
 * timeout + 15 s -- else the step fails. It may legitimately not be asked
 * to: it leads every shard it is a member of already (counted in
 * promote_skipped, the reason in promote_why). (Killing every other member
 * instead does not promote it: the CM does not replace a dead primary while
 * the shard cannot drop below cm.min_replicas.)
 */
static int f_promote(struct dxlt_nem *n, uint64_t *rng, char *d, size_t cap)
{
	uint32_t b = n->returned;
	n->returned = 0;
	int ret = dxlt_nem_wait_members(n, 3, 60000);
	if (ret)
		return ret;
	struct dxl_zk *zk = NULL;
	if ((ret = dxlt_zk_open(n->zk, n->cluster, &zk)))
		return ret;
	struct dxl_replica_desc *desc = calloc(1, sizeof(*desc));
	struct dxl_cluster_config c;
	dxl_cluster_config_init(&c);
	uint32_t victim = 0, shard = 0;
	uint64_t epoch = 0;
	char why[256] = "";
	if (!desc) {
		ret = dxl_err_set(DXL_E_NOMEM, "descriptor");
		goto out;
	}
	if ((ret = dxl_cluster_config_read(zk, &c, NULL)))
		goto out;
	uint32_t cand[16], nc = 0;
	for (uint32_t i = 0; i < c.nshards && nc < 16; i++)
		if (c.shards[i].primary != b && in_ids(c.shards[i].backups, c.shards[i].nbackups, b))
			cand[nc++] = c.shards[i].id;
	if (!nc) {
		n->promote_skipped++;
		snprintf(n->promote_why, sizeof(n->promote_why),
			 "node %u already leads every shard it is a member of", b);
		snprintf(d, cap, "node %u (back from being held down): %s, nothing to promote", b,
			 n->promote_why);
		goto out;
	}
	shard = cand[dxlt_nem_rand(rng, nc)];
	if ((ret = reorder(zk, shard, b, &epoch)))
		goto out;
	/* it counts for that epoch (its join is over: wait, as the CM would) */
	uint64_t end = dxl_now_ms() + 30000;
	for (;;) {
		dxl_cluster_config_clear(&c);
		if ((ret = dxl_cluster_config_read(zk, &c, NULL)))
			goto out;
		const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, shard);
		if (!sh || !sh->nbackups || sh->backups[0] != b) {
			ret = dxl_err_set(DXL_E_STATE,
					  "promote-returned: epoch %llu no longer lists node %u first in shard %u",
					  (unsigned long long)c.epoch, b, shard);
			goto out;
		}
		if (counts(zk, &c, sh, b, desc, why, sizeof(why))) {
			victim = sh->primary;
			break;
		}
		if (dxl_now_ms() > end) {
			ret = dxl_err_set(DXL_E_TIMEDOUT,
					  "promote-returned: the returned node does not count 30 s after it was listed first: %s",
					  why);
			goto out;
		}
		sleep_ms(100);
	}
	n->t_inject_ms = dxl_wall_ms();
	if ((ret = dxlt_nem_kill(n, victim, "KILL")))
		goto out;
	end = dxl_now_ms() + n->session_timeout_ms + 15000;
	uint32_t p = 0;
	for (;;) {
		uint32_t bk[8], nb;
		if (dxlt_nem_members(n, shard, &p, bk, 8, &nb))
			p = 0;
		if ((p && p != victim) || dxl_now_ms() > end)
			break;
		sleep_ms(100);
	}
	uint64_t took = dxl_wall_ms() - n->t_inject_ms;
	if (p != b) {
		ret = dxl_err_set(DXL_E_STATE,
				  "promote-returned: node %u (back from being held down; first backup of shard %u at epoch %llu and counted) was not made primary %llu ms after primary %u was killed (primary now %u)",
				  b, shard, (unsigned long long)c.epoch, (unsigned long long)took, victim, p);
		dxlt_nem_restart(n, victim); /* for the next schedule */
		goto out;
	}
	n->promoted++;
	snprintf(d, cap, "epoch %llu lists node %u (back from being held down) first in shard %u; kill -9 primary %u: node %u primary after %llu ms",
		 (unsigned long long)epoch, b, shard, victim, b, (unsigned long long)took);
	ret = dxlt_nem_restart(n, victim);
out:
	dxl_cluster_config_clear(&c);
	free(desc);
	dxl_zk_delete(&zk);
	return ret;
}

int dxlt_nem_add_builtin(struct dxlt_nem *n)
{
	static const struct dxlt_fault kinds[] = {
		{"kill-primary", 3, no_hold, f_kill_primary},
		{"kill-backup", 2, no_hold, f_kill_backup},
		{"stop-primary", 2, no_hold, f_stop_primary},
		{"stop-backup", 1, no_hold, f_stop_backup},
		{"power-fail", 2, no_hold, f_power},
		{"kill-coordinator", 2, can_coord, f_coord},
		{"kill-zookeeper", 2, can_zk, f_zk},
		{"hold-backup", 1, no_hold, f_hold},
		{"return-backup", 3, can_return, f_return},
		{"promote-returned", 3, can_promote, f_promote},
	};
	for (unsigned i = 0; i < DXL_ARRAY_SIZE(kinds); i++) {
		int ret = dxlt_nem_add(n, &kinds[i]);
		if (ret)
			return ret;
	}
	return 0;
}

int dxlt_nem_kind(const struct dxlt_nem *n, const char *name)
{
	for (uint32_t i = 0; i < n->nkinds; i++)
		if (!strcmp(n->kinds[i].name, name))
			return (int)i;
	return -1;
}

static bool runnable(const struct dxlt_nem *n, uint32_t i)
{
	return !n->kinds[i].can || n->kinds[i].can(n);
}

int dxlt_nem_step_kind(struct dxlt_nem *n, uint64_t *rng, int want, int *kind, char *desc,
		       size_t cap)
{
	uint64_t total = 0;
	for (uint32_t i = 0; i < n->nkinds; i++)
		if (n->kinds[i].weight && runnable(n, i))
			total += n->kinds[i].weight;
	/* a held backup must come back eventually: the draw always happens */
	uint64_t x = dxlt_nem_rand(rng, total ? total : 1);
	int pick = -1;
	if (want >= 0 && (uint32_t)want < n->nkinds && runnable(n, (uint32_t)want))
		pick = want;
	for (uint32_t i = 0; i < n->nkinds && pick < 0; i++) {
		if (!n->kinds[i].weight || !runnable(n, i))
			continue;
		if (x >= n->kinds[i].weight) {
			x -= n->kinds[i].weight;
			continue;
		}
		pick = (int)i;
	}
	if (pick < 0)
		return total ? dxl_err_set(DXL_E_INTERNAL, "nemesis: no kind drawn")
			     : dxl_err_set(DXL_E_STATE, "no fault kind can run now");
	*kind = pick;
	desc[0] = 0;
	if (n->held)
		n->held_steps++;
	int ret = n->kinds[pick].run(n, rng, desc, cap);
	if (!ret)
		n->applied[pick]++;
	return ret;
}

int dxlt_nem_step(struct dxlt_nem *n, uint64_t *rng, int *kind, char *desc, size_t cap)
{
	return dxlt_nem_step_kind(n, rng, -1, kind, desc, cap);
}

int dxlt_nem_heal(struct dxlt_nem *n, char *desc, size_t cap)
{
	desc[0] = 0;
	if (!n->held)
		return 0;
	uint32_t node = n->held;
	n->held = 0;
	n->returned = 0;
	snprintf(desc, cap, "node %u (held down) back at the end of the schedule", node);
	return dxlt_nem_restart(n, node);
}

/* ---- the reconfiguration kinds (issue 16) ------------------------------------------- */

uint64_t dxlt_nem_count_replica_logs(const struct dxlt_nem *n, const char *needle)
{
	char dir[600];
	snprintf(dir, sizeof(dir), "%s/logs", n->dir);
	DIR *dp = opendir(dir);
	if (!dp)
		return 0;
	uint64_t k = 0;
	static char line[8192];
	struct dirent *e;
	while ((e = readdir(dp))) {
		if (strncmp(e->d_name, "replica-", 8))
			continue;
		char path[900];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f))
			k += strstr(line, needle) != NULL;
		fclose(f);
	}
	closedir(dp);
	return k;
}

int dxlt_nem_restart_env(struct dxlt_nem *n, uint32_t node, const char *name, const char *value)
{
	/* the CLI passes its environment on to the replica it starts */
	setenv(name, value, 1);
	int ret = dxlt_nem_restart(n, node);
	unsetenv(name);
	return ret;
}

/* a replica: the primary or a backup of a random shard, by the rng */
static int pick_any(struct dxlt_nem *n, uint64_t *rng, uint32_t *node, uint32_t *shard,
		    bool *backup)
{
	*backup = dxlt_nem_rand(rng, 2);
	return pick(n, rng, *backup, node, shard);
}

/* zk-lost-reply: a replica (or a coordinator process) restarts with the
 * ZooKeeper shim armed: its first writes of each kind (the candidacy
 * create, its registration's create or first set, the CM's configuration
 * set, a writer slot's create or delete) are applied and then reported as
 * a connection loss (issue 16.6) */
static int f_lost_reply(struct dxlt_nem *n, uint64_t *rng, char *d, size_t cap)
{
	char spec[300];
	if (n->coord_kill_env && dxlt_nem_rand(rng, 3) == 0) {
		snprintf(spec, sizeof(spec), "create+delete:/writers/:reply:%u,create:/coords/:reply",
			 (unsigned)dxlt_nem_rand(rng, 3));
		n->t_inject_ms = dxl_wall_ms();
		int ret = n->coord_kill_env(n->coord_arg, rng, "DXL_ZK_FAULTS", spec, d, cap);
		size_t o = strlen(d);
		if (o < cap)
			snprintf(d + o, cap - o, ", with DXL_ZK_FAULTS=%s", spec);
		return ret;
	}
	uint32_t node, shard;
	bool backup;
	int ret = pick_any(n, rng, &node, &shard, &backup);
	if (ret)
		return ret;
	snprintf(spec, sizeof(spec),
		 "create:/cm/c-:reply,create+set:/nodes/:reply:%u,set:/config:reply,create+delete:/writers/:reply",
		 (unsigned)dxlt_nem_rand(rng, 2));
	uint64_t down = 300 + dxlt_nem_rand(rng, 3000);
	n->t_inject_ms = dxl_wall_ms();
	if ((ret = dxlt_nem_kill(n, node, "KILL")))
		return ret;
	snprintf(d, cap, "kill -9 node %u (%s of shard %u), down %llu ms, restarted with DXL_ZK_FAULTS=%s",
		 node, backup ? "a backup" : "primary", shard, (unsigned long long)down, spec);
	sleep_ms(down);
	return dxlt_nem_restart_env(n, node, "DXL_ZK_FAULTS", spec);
}

/* pause-points: a replica restarts with sleeps at its test points (its
 * descriptor published late; its join pull waiting), or a coordinator
 * process with sleeps between its configuration read and its descriptor
 * reads (writer open, view: issue 16.4) -- while the other kinds change the
 * configuration */
static int f_pause(struct dxlt_nem *n, uint64_t *rng, char *d, size_t cap)
{
	char spec[300];
	if (n->coord_kill_env && dxlt_nem_rand(rng, 2) == 0) {
		snprintf(spec, sizeof(spec), "writer.open.config_read=sleep:%u,coord.view.config_read=sleep:%u",
			 200 + (unsigned)dxlt_nem_rand(rng, 800), 200 + (unsigned)dxlt_nem_rand(rng, 800));
		n->t_inject_ms = dxl_wall_ms();
		int ret = n->coord_kill_env(n->coord_arg, rng, "DXL_TESTPOINTS", spec, d, cap);
		size_t o = strlen(d);
		if (o < cap)
			snprintf(d + o, cap - o, ", with DXL_TESTPOINTS=%s", spec);
		return ret;
	}
	uint32_t node, shard;
	bool backup;
	int ret = pick_any(n, rng, &node, &shard, &backup);
	if (ret)
		return ret;
	snprintf(spec, sizeof(spec), "replica.publish=sleep:%u,replica.join_pull.wait=sleep:%u",
		 200 + (unsigned)dxlt_nem_rand(rng, 600), 200 + (unsigned)dxlt_nem_rand(rng, 600));
	uint64_t down = 500 + dxlt_nem_rand(rng, 3000);
	n->t_inject_ms = dxl_wall_ms();
	if ((ret = dxlt_nem_kill(n, node, "KILL")))
		return ret;
	snprintf(d, cap, "kill -9 node %u (%s of shard %u), down %llu ms, restarted with DXL_TESTPOINTS=%s",
		 node, backup ? "a backup" : "primary", shard, (unsigned long long)down, spec);
	sleep_ms(down);
	if ((ret = dxlt_nem_restart_env(n, node, "DXL_TESTPOINTS", spec)))
		return ret;
	/* liveness from when it is registered again: a primary restarted
	 * before its session expired is the shard's primary again, and its
	 * pauses (every publication, on purpose) delay its service beyond the
	 * bound of a plain kill (kill-primary checks that one) */
	n->t_inject_ms = dxl_wall_ms();
	return 0;
}

/* empty-dir-restart: kill -9, every file of the data directory removed,
 * restart: the node must come back as a new copy (issue 16.3) -- a new
 * data identity, recorded by the configuration when the CM adds it again;
 * the old identity must never vouch for it */
static int f_empty(struct dxlt_nem *n, uint64_t *rng, char *d, size_t cap)
{
	uint32_t node, shard;
	bool backup;
	int ret = pick_any(n, rng, &node, &shard, &backup);
	if (ret)
		return ret;
	struct dxl_zk *zk = NULL;
	if ((ret = dxlt_zk_open(n->zk, n->cluster, &zk)))
		return ret;
	struct dxl_replica_desc *desc = calloc(1, sizeof(*desc));
	uint64_t old[16] = {0};
	if (!desc) {
		ret = dxl_err_set(DXL_E_NOMEM, "descriptor");
		goto out;
	}
	if ((ret = dxl_replica_desc_get(zk, node, desc)))
		goto out;
	for (uint32_t s = 0; s < n->nshards && s < 16; s++) {
		const struct dxl_shard_desc *sd = dxl_replica_desc_shard(desc, s);
		old[s] = sd ? sd->data_id : 0;
	}
	uint64_t down = 300 + dxlt_nem_rand(rng, 2500);
	n->t_inject_ms = dxl_wall_ms();
	if ((ret = dxlt_nem_kill(n, node, "KILL")))
		goto out;
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), "find '%s/data/%u' -mindepth 1 -delete", n->dir, node);
	if (system(cmd) != 0) {
		ret = dxl_err_set(DXL_E_IO, "%s failed", cmd);
		goto out;
	}
	snprintf(d, cap, "kill -9 node %u (%s of shard %u), data directory emptied, down %llu ms, restarted",
		 node, backup ? "a backup" : "primary", shard, (unsigned long long)down);
	sleep_ms(down);
	if ((ret = dxlt_nem_restart(n, node)))
		goto out;
	/* added again to every shard, under its new identity */
	uint64_t end = dxl_now_ms() + 90000;
	char why[300] = "";
	for (;;) {
		struct dxl_cluster_config c;
		bool ok = false;
		if (dxl_cluster_config_read(zk, &c, NULL) == 0) {
			ok = dxl_replica_desc_get(zk, node, desc) == 0;
			for (uint32_t s = 0; ok && s < n->nshards && s < 16; s++) {
				const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, s);
				const struct dxl_shard_desc *sd = dxl_replica_desc_shard(desc, s);
				uint32_t m[DXL_CONFIG_MAX_REPLICAS];
				uint32_t nm = sh ? dxl_cluster_shard_members(sh, m) : 0;
				uint64_t rec = sh ? dxl_cluster_shard_data_id(sh, node) : 0;
				if (sd && old[s] && sd->data_id == old[s]) {
					ret = dxl_err_set(DXL_E_STATE,
							  "node %u restarted on an empty data directory kept shard %u's data identity 0x%llx",
							  node, s, (unsigned long long)old[s]);
					dxl_cluster_config_clear(&c);
					goto out;
				}
				if (in_ids(m, nm, node) && rec && old[s] && rec == old[s] && sd &&
				    sd->state == DXL_SHARD_MEMBER) {
					ret = dxl_err_set(DXL_E_STATE,
							  "node %u on a new store says MEMBER of shard %u while the configuration still records its old data identity 0x%llx",
							  node, s, (unsigned long long)old[s]);
					dxl_cluster_config_clear(&c);
					goto out;
				}
				ok = sd && in_ids(m, nm, node) && sd->state == DXL_SHARD_MEMBER &&
				     rec == sd->data_id;
				if (!ok)
					snprintf(why, sizeof(why), "shard %u: %s, %s, recorded 0x%llx, its copy 0x%llx",
						 s, in_ids(m, nm, node) ? "a member" : "not a member",
						 sd ? dxl_shard_state_name(sd->state) : "not hosted",
						 (unsigned long long)rec, sd ? (unsigned long long)sd->data_id : 0ull);
			}
			dxl_cluster_config_clear(&c);
		}
		if (ok)
			break;
		if (dxl_now_ms() > end) {
			ret = dxl_err_set(DXL_E_TIMEDOUT,
					  "node %u, restarted on an empty data directory, was not added again under its new data identity in 90 s (%s)",
					  node, why);
			goto out;
		}
		sleep_ms(200);
	}
	n->empty_new_id++;
out:
	free(desc);
	dxl_zk_delete(&zk);
	return ret;
}

/* crosswise-joins: one configuration change (as an operator or a tool
 * would write it) takes a backup out of each shard; the CM adds both back,
 * so two nodes join at once -- each joining a shard the other leads when
 * the shards have different primaries (issue 16.1: that deadlocked) */
static int f_crosswise(struct dxlt_nem *n, uint64_t *rng, char *d, size_t cap)
{
	(void)rng;
	struct dxl_zk *zk = NULL;
	int ret = dxlt_zk_open(n->zk, n->cluster, &zk);
	if (ret)
		return ret;
	struct dxl_cluster_config c, w;
	dxl_cluster_config_init(&c);
	dxl_cluster_config_init(&w);
	uint32_t out0 = 0, out1 = 0;
	bool cross = false;
	uint64_t epoch = 0;
	for (int attempt = 0;; attempt++) {
		int32_t ver;
		dxl_cluster_config_clear(&c);
		dxl_cluster_config_clear(&w);
		if ((ret = dxl_cluster_config_read(zk, &c, &ver)))
			goto out;
		const struct dxl_cluster_shard *s0 = dxl_cluster_config_shard(&c, 0),
					       *s1 = dxl_cluster_config_shard(&c, 1);
		if (!s0 || !s1 || s0->nbackups < 2 || s1->nbackups < 2) {
			ret = dxl_err_set(DXL_E_STATE, "crosswise-joins: shards 0 and 1 need 3 members");
			goto out;
		}
		uint32_t m1[DXL_CONFIG_MAX_REPLICAS];
		uint32_t nm1 = dxl_cluster_shard_members(s1, m1);
		cross = s0->primary != s1->primary && in_ids(s0->backups, s0->nbackups, s1->primary) &&
			in_ids(s1->backups, s1->nbackups, s0->primary);
		if (cross) {
			out0 = s1->primary; /* joins shard 0, which s0->primary leads */
			out1 = s0->primary; /* joins shard 1, which s1->primary leads */
		} else {
			out0 = s0->backups[0];
			out1 = 0;
			for (uint32_t i = 0; i < s1->nbackups && !out1; i++)
				if (s1->backups[i] != out0)
					out1 = s1->backups[i];
			if (!out1 || !in_ids(m1, nm1, out1)) {
				ret = dxl_err_set(DXL_E_STATE, "crosswise-joins: no second backup");
				goto out;
			}
		}
		if ((ret = dxl_cluster_config_copy(&w, &c)))
			goto out;
		const uint32_t outs[2] = {out0, out1};
		for (uint32_t si = 0; si < 2; si++) {
			const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&c, si);
			uint32_t b[DXL_CONFIG_MAX_BACKUPS], nb = 0;
			for (uint32_t i = 0; i < sh->nbackups; i++)
				if (sh->backups[i] != outs[si])
					b[nb++] = sh->backups[i];
			if ((ret = dxl_cluster_config_set_shard(&w, si, sh->primary, b, nb)))
				goto out;
			/* set_shard forgets the identities: keep the members' */
			uint32_t m[DXL_CONFIG_MAX_REPLICAS];
			uint32_t nm = dxl_cluster_shard_members(sh, m);
			for (uint32_t i = 0; i < nm; i++)
				if (m[i] != outs[si] && dxl_cluster_shard_data_id(sh, m[i]) &&
				    (ret = dxl_cluster_config_set_data_id(&w, si, m[i],
									  dxl_cluster_shard_data_id(sh, m[i]))))
					goto out;
		}
		w.epoch = c.epoch + 1;
		n->t_inject_ms = dxl_wall_ms();
		ret = dxl_cluster_config_cas(zk, &w, ver, NULL);
		if (!ret) {
			epoch = w.epoch;
			break;
		}
		if (ret != DXL_E_STALE || attempt >= 10)
			goto out;
		sleep_ms(100); /* the CM wrote meanwhile */
	}
	/* the CM adds them back (each catches up, then joins) */
	uint64_t end = dxl_now_ms() + 90000, back = 0;
	for (;;) {
		struct dxl_cluster_config r;
		if (dxl_cluster_config_read(zk, &r, NULL) == 0) {
			uint32_t m0[DXL_CONFIG_MAX_REPLICAS], m1[DXL_CONFIG_MAX_REPLICAS];
			const struct dxl_cluster_shard *s0 = dxl_cluster_config_shard(&r, 0),
						       *s1 = dxl_cluster_config_shard(&r, 1);
			uint32_t n0 = s0 ? dxl_cluster_shard_members(s0, m0) : 0;
			uint32_t n1 = s1 ? dxl_cluster_shard_members(s1, m1) : 0;
			bool in0 = in_ids(m0, n0, out0), in1 = in_ids(m1, n1, out1);
			uint64_t e = r.epoch;
			dxl_cluster_config_clear(&r);
			if (in0 && in1) {
				back = e;
				break;
			}
		}
		if (dxl_now_ms() > end) {
			ret = dxl_err_set(DXL_E_TIMEDOUT,
					  "crosswise-joins: nodes %u (shard 0) and %u (shard 1), taken out at epoch %llu, were not added back in 90 s",
					  out0, out1, (unsigned long long)epoch);
			goto out;
		}
		sleep_ms(50);
	}
	if (cross)
		n->crosswise++;
	else
		n->parallel_joins++;
	if (back == epoch + 1)
		n->joins_one_epoch++;
	snprintf(d, cap, "epoch %llu: node %u out of shard 0, node %u out of shard 1 (%s); both added back by epoch %llu",
		 (unsigned long long)epoch, out0, out1,
		 cross ? "crosswise: each leads the other's shard" : "one primary leads both",
		 (unsigned long long)back);
out:
	dxl_cluster_config_clear(&c);
	dxl_cluster_config_clear(&w);
	dxl_zk_delete(&zk);
	return ret;
}

/* join-second-failure: a node is killed and removed, comes back and is
 * added again; while it is in its join pull (held there by a test-point
 * sleep, like a long whole-ring copy), the shard's primary (or its other
 * backup: a node leaving while another joins) is killed too (issue 16.2:
 * the joiner must not be promoted nor counted); then that one restarts */
static int f_join_fail(struct dxlt_nem *n, uint64_t *rng, char *d, size_t cap)
{
	uint32_t a, shard;
	bool backup;
	int ret = pick_any(n, rng, &a, &shard, &backup);
	if (ret)
		return ret;
	struct dxl_zk *zk = NULL;
	if ((ret = dxlt_zk_open(n->zk, n->cluster, &zk)))
		return ret;
	struct dxl_replica_desc *desc = calloc(1, sizeof(*desc));
	if (!desc) {
		ret = dxl_err_set(DXL_E_NOMEM, "descriptor");
		goto out;
	}
	n->t_inject_ms = dxl_wall_ms();
	if ((ret = dxlt_nem_kill(n, a, "KILL")))
		goto out;
	/* removed from every shard (the others go on with two) */
	if ((ret = dxlt_nem_wait_members(n, 2, 60000)))
		goto out;
	char spec[200];
	unsigned hold = 1500 + (unsigned)dxlt_nem_rand(rng, 1500);
	snprintf(spec, sizeof(spec), "replica.join_pull.copy=sleep:%u", hold);
	if ((ret = dxlt_nem_restart_env(n, a, "DXL_TESTPOINTS", spec)))
		goto out;
	/* added again: it says JOINING while it sleeps before its copy */
	uint64_t end = dxl_now_ms() + 60000;
	uint32_t js = UINT32_MAX;
	while (js == UINT32_MAX && dxl_now_ms() < end) {
		if (dxl_replica_desc_get(zk, a, desc) == 0)
			for (uint32_t i = 0; i < desc->nshards; i++)
				if (desc->shards[i].state == DXL_SHARD_JOINING)
					js = desc->shards[i].shard;
		if (js == UINT32_MAX)
			sleep_ms(20);
	}
	if (js == UINT32_MAX) {
		n->joins_missed++;
		snprintf(d, cap, "kill -9 node %u, removed, restarted with DXL_TESTPOINTS=%s: not seen joining in 60 s",
			 a, spec);
		goto out;
	}
	uint32_t p, bk[8], nb;
	if ((ret = dxlt_nem_members(n, js, &p, bk, 8, &nb)))
		goto out;
	uint32_t victim = p, other = 0;
	for (uint32_t i = 0; i < nb; i++)
		if (bk[i] != a && bk[i] != p)
			other = bk[i];
	bool leave = other && dxlt_nem_rand(rng, 3) == 0;
	if (leave)
		victim = other;
	if (victim == a) {
		ret = dxl_err_set(DXL_E_STATE, "join-second-failure: node %u joins shard %u it leads", a, js);
		goto out;
	}
	if ((ret = dxlt_nem_kill(n, victim, "KILL")))
		goto out;
	n->joins_struck++;
	uint64_t down = 500 + dxlt_nem_rand(rng, 2000);
	snprintf(d, cap, "kill -9 node %u, removed, restarted with DXL_TESTPOINTS=%s; while it joined shard %u, kill -9 node %u (%s), down %llu ms",
		 a, spec, js, victim, leave ? "a backup leaving" : "the primary it copies from",
		 (unsigned long long)down);
	sleep_ms(down);
	if ((ret = dxlt_nem_restart(n, victim)))
		goto out;
	n->t_inject_ms = dxl_wall_ms(); /* liveness: from when it is back */
out:
	free(desc);
	dxl_zk_delete(&zk);
	return ret;
}

int dxlt_nem_add_reconfig(struct dxlt_nem *n)
{
	static const struct dxlt_fault kinds[] = {
		{"zk-lost-reply", 2, no_hold, f_lost_reply},
		{"pause-points", 2, no_hold, f_pause},
		{"empty-dir-restart", 2, no_hold, f_empty},
		{"crosswise-joins", 1, no_hold, f_crosswise},
		{"join-second-failure", 1, no_hold, f_join_fail},
	};
	for (unsigned i = 0; i < DXL_ARRAY_SIZE(kinds); i++) {
		int ret = dxlt_nem_add(n, &kinds[i]);
		if (ret)
			return ret;
	}
	return 0;
}
