/* nemesis.c -- seeded faults over a local dxl cluster (nemesis.h) */
#include "nemesis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/membership.h"
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

/* the returned backup becomes a primary: kill the primary of a shard where
 * it is the first backup (the CM promotes the first live backup) */
static int f_promote(struct dxlt_nem *n, uint64_t *rng, char *d, size_t c)
{
	uint32_t b = n->returned, target = 0, victim = 0;
	int ret = dxlt_nem_wait_members(n, 3, 60000);
	if (ret)
		return ret;
	for (uint32_t s = 0; s < n->nshards && !victim; s++) {
		uint32_t p, bk[8], nb;
		if ((ret = dxlt_nem_members(n, s, &p, bk, 8, &nb)))
			return ret;
		if (p == b) {
			target = s; /* already a primary: kill someone else's */
			continue;
		}
		if (nb && bk[0] == b) {
			victim = p;
			target = s;
		}
	}
	if (!victim) {
		uint32_t p, bk[8], nb;
		target = (uint32_t)dxlt_nem_rand(rng, n->nshards);
		if ((ret = dxlt_nem_members(n, target, &p, bk, 8, &nb)))
			return ret;
		victim = p;
	}
	n->t_inject_ms = dxl_wall_ms();
	if ((ret = dxlt_nem_kill(n, victim, "KILL")))
		return ret;
	uint64_t end = dxl_now_ms() + 15000;
	uint32_t p = victim, bk[8], nb;
	while (p == victim && dxl_now_ms() < end) {
		sleep_ms(100);
		if (dxlt_nem_members(n, target, &p, bk, 8, &nb))
			p = victim;
	}
	snprintf(d, c, "kill -9 node %u (primary of shard %u): node %u (back from being held down) %s primary",
		 victim, target, b, p == b ? "is now" : "did not become");
	n->returned = 0;
	return dxlt_nem_restart(n, victim);
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

int dxlt_nem_step(struct dxlt_nem *n, uint64_t *rng, int *kind, char *desc, size_t cap)
{
	uint64_t total = 0;
	for (uint32_t i = 0; i < n->nkinds; i++)
		if (n->kinds[i].weight && (!n->kinds[i].can || n->kinds[i].can(n)))
			total += n->kinds[i].weight;
	/* a held backup must come back eventually: the draw always happens */
	uint64_t x = dxlt_nem_rand(rng, total ? total : 1);
	if (!total)
		return dxl_err_set(DXL_E_STATE, "no fault kind can run now");
	for (uint32_t i = 0; i < n->nkinds; i++) {
		if (!n->kinds[i].weight || (n->kinds[i].can && !n->kinds[i].can(n)))
			continue;
		if (x >= n->kinds[i].weight) {
			x -= n->kinds[i].weight;
			continue;
		}
		*kind = (int)i;
		desc[0] = 0;
		if (n->held)
			n->held_steps++;
		int ret = n->kinds[i].run(n, rng, desc, cap);
		if (!ret)
			n->applied[i]++;
		return ret;
	}
	return dxl_err_set(DXL_E_INTERNAL, "nemesis: no kind drawn");
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
