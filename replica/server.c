/* server.c -- the replica server behind dxl-replica: data directory, fabric,
 * hosted shards, ZooKeeper registration, the lease rule and retention
 * (include/dxl/replica.h, docs/replica.md) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "common/config.h"
#include "dxl/replica.h"
#include "replica/catchup_internal.h"
#include "replica/tables_internal.h"

struct dxl_replica_server {
	struct dxl_replica_cfg cfg;
	struct dxl_datadir *dd;
	struct dxl_fabric *f;
	struct dxl_ctx *ctx; /* ctx 0: the one writers and tailers connect to */
	struct dxl_zk *zk;
	uint32_t nshards;
	struct dxl_shard *shards[DXL_REPLICA_MAX_SHARDS];
	/* the engine's tables of each shard (NULL: engine.tables empty) and
	 * their RPC service (NULL without tables) */
	struct dxl_tables *tables[DXL_REPLICA_MAX_SHARDS];
	struct dxl_table_svc *svc;
	/* the promotion gate (docs/transactions.md "Failures"): a shard this
	 * node just became the primary of serves no table before every
	 * decided transaction in its log is applied and the locks of those in
	 * doubt are set; gate_ts: the time of the promotion; live writers'
	 * watermarks must pass it (or gate_until_ms) */
	bool gated[DXL_REPLICA_MAX_SHARDS];
	uint64_t gate_ts[DXL_REPLICA_MAX_SHARDS];
	uint64_t gate_since_ms[DXL_REPLICA_MAX_SHARDS];
	/* the backup's applier: which writer slots are held, per shard */
	uint64_t live_mask[DXL_REPLICA_MAX_SHARDS];
	uint64_t live_ms[DXL_REPLICA_MAX_SHARDS]; /* when read; 0 = never */
	atomic_bool serving;   /* regions registered: remote accesses allowed */
	uint64_t lease_lost_ms; /* replica.test_nic_pause_ms: when the lease was
				   first seen invalid (reg_mu) */
	atomic_bool published; /* nodes/<id> holds the current descriptors */
	uint64_t reg_epoch; /* +1 per registration of the regions */
	uint64_t last_retain_ms;
	/* the configuration: the watch hands new versions to the loop */
	struct dxl_cluster_config_watch *cw;
	pthread_mutex_t mu;
	struct dxl_cluster_config pend; /* guarded by mu */
	bool pend_new;                  /* guarded by mu */
	struct dxl_cluster_config conf; /* the one applied (loop only) */
	uint64_t cfg_epoch;             /* its epoch, 0 = none yet */
	enum dxl_shard_state st[DXL_REPLICA_MAX_SHARDS];
	uint32_t pull_skip[DXL_REPLICA_MAX_SHARDS];
	/* the data identity of each shard's copy here (shard_data_id) */
	uint64_t data_id[DXL_REPLICA_MAX_SHARDS];
	/* DATADIR/shard-<s>.member exists for this identity: the copy was a
	 * MEMBER of the shard as of its last configuration (member_mark) */
	bool marked[DXL_REPLICA_MAX_SHARDS];
	/* the mark vouches for the copy: read at start (valid), or written
	 * while MEMBER; false from the moment the shard stops being a member,
	 * even when the mark could not be removed (marked stays true) */
	bool vouch[DXL_REPLICA_MAX_SHARDS];
	/* this boot of the machine (/proc/sys/kernel/random/boot_id; "" if
	 * unknown): in marks, which durability=process trusts only within
	 * the boot that wrote them */
	char boot_id[40];
	/* when a JOINING shard started joining in its current epoch */
	uint64_t join_since_ms[DXL_REPLICA_MAX_SHARDS];
	/* a configuration was read (or found absent) on this session: only
	 * then is nodes/<id> published (issue 16.8) */
	bool cfg_synced;
	/* published statistics per shard (fill, newest record, count) */
	uint32_t fill[DXL_REPLICA_MAX_SHARDS];
	uint64_t last_ts[DXL_REPLICA_MAX_SHARDS];
	uint64_t nrec[DXL_REPLICA_MAX_SHARDS];
	uint64_t last_stats_pub_ms;
	uint64_t cursor_warn_ms[DXL_REPLICA_MAX_SHARDS]; /* last unreadable-cursor warning */
	/* the size cap's reclaims of records a cursor still needs, summed
	 * between two event=retention_cap lines (at most one per shard every
	 * CAP_WARN_MS: a checkpoint cursor is always there, a busy shard
	 * would say it on every pass and ring) */
	uint64_t cap_warn_ms[DXL_REPLICA_MAX_SHARDS];
	uint64_t cap_records[DXL_REPLICA_MAX_SHARDS], cap_from_ts[DXL_REPLICA_MAX_SHARDS];
	uint64_t cap_to_ts[DXL_REPLICA_MAX_SHARDS];
	uint64_t cap_need_ts[DXL_REPLICA_MAX_SHARDS];
	uint32_t cap_rings[DXL_REPLICA_MAX_SHARDS];
	uint64_t last_pull_ms;
	struct dxl_ctx *pull_ctx;       /* ctx 1: catch-up copies */
	/* engine.lock_mode=nic: the node's own lock-word changes go through
	 * its NIC (ctx DXL_REPLICA_LOCK_CTX, a loopback QP; engine.h) */
	struct dxl_lock_agent *lock_agent;
	/* catch-up that never outruns the store, state transfer, rebuild at
	 * open (replica/catchup.c; its transfer thread uses ctx 4) */
	struct dxl_rcvm *rcvm;
	struct dxl_replica_desc *src_desc; /* the source of a copy (loop only;
					      too big for the stack) */
	/* the configuration manager */
	struct dxl_election *el;
	uint64_t last_cm_ms;
	uint64_t last_cand_ms;
	struct dxl_member_watch *mw;  /* nodes/: wakes the CM at once */
	atomic_bool members_changed;
	atomic_bool is_cm; /* leads the election with a valid lease (set by
			      the loop; read by any thread) */
	/* the lease guard: enforces the lease rule every service_ms even
	 * while the loop waits in a ZooKeeper call (reg_mu guards serving,
	 * reg_epoch and the registrations) */
	pthread_mutex_t reg_mu;
	pthread_t guard;
	bool guard_started;
	atomic_bool guard_stop;
};

/* ---- configuration ---------------------------------------------------------- */

static const char *const KEYS[] = {
	/* key, default, meaning (for --help and docs/replica.md) */
	"replica.node_id", "(required)", "this node's id (1..2^32-1); nodes/<id> in ZooKeeper",
	"replica.data_dir", "(required)", "data directory: DXL_DATADIR, LOCK, shard-<s>.log, store-<s>.dat",
	"replica.durability", "msync", "pmem | msync | process (recorded at creation, checked at every start)",
	"replica.create", "true", "initialise an empty or absent data directory",
	"replica.shards", "0", "shards hosted: list of ids and ranges, e.g. 0,2,4-7",
	"replica.service_ms", "10", "service loop period: lease checks, re-registration",
	"replica.exist_wait_ms", "(2 x session timeout)", "retry this long when the node id is held by another session",
	"replica.cm", "true", "stand in the election of the configuration manager (CM)",
	"replica.pull_ms", "200", "catch-up: period of the copy passes of a shard this node hosts but is not a member of",
	"replica.sync_bytes", "256K", "catch-up: a pass that changed fewer bytes makes the shard SYNCED (the CM may add it)",
	"replica.test_nic_pause_ms", "0", "testing only: after the lease lapsed keep the regions registered this long, as an RDMA NIC keeps serving a stopped host's memory (table RPCs are refused at once)",
	"recovery.checkpoint_ms", "600000", "a member writes a checkpoint of each shard's tables this often (0 = never); the log from its start is kept for it (docs/recovery.md)",
	"recovery.need_cursor_ttl_ms", "600000", "the need cursor of a node catching up that is no longer live is dropped after this long (retention by age keeps the log for it until then)",
	"replica.join_timeout_ms", "30000", "a shard whose join pull has not succeeded this long gives up joining (catching_up: the CM removes it and adds it again once caught up); 0 = never",
	"cm.min_replicas", "2", "CM: never shrink a shard below this many live members (it is unavailable instead)",
	"cm.replication", "3", "CM: add caught-up replicas while a shard has fewer members",
	"cm.check_ms", "500", "CM: period of its reconciliation rounds (it also runs one at once when nodes/ changes)",
	"engine.tables", "(none)", "tables of every hosted shard: id:value_size:capacity,... (at most 16; fixed when a shard's store is created)",
	"engine.lock_mode", "nic", "who changes lock words: nic (fabric CAS, local ones too) | cpu (RPC handlers); one per deployment",
	"log.writer_slots", "16", "rings per shard (one per writer slot); used when a shard is created",
	"log.ring_size", "1M", "bytes per ring (multiple of 4096, >= 8K); used when a shard is created",
	"log.retention_ms", "600000", "reclaim records older than this (and below the ring's watermark)",
	"log.retention_bytes", "0", "reclaim the oldest records beyond this many bytes per ring (0 = ring_size/2)",
	"log.retention_check_ms", "1000", "how often retention runs",
	"log.level", "info", "debug | info | warn | error | off (DXL_LOG_LEVEL overrides the default)",
	"fabric.provider", "tcp", "tcp | verbs",
	"fabric.listen", "127.0.0.1:0", "host:port to serve on (port 0: any free port)",
	"fabric.*", "", "the other fabric keys: docs/fabric.md",
	"zk.connect", "(required)", "ZooKeeper connect string host:port[,host:port...]",
	"zk.cluster", "default", "cluster name: everything lives under /dxl/<cluster>",
	"zk.session_timeout_ms", "3000", "session timeout = failure detection time",
	"zk.connect_timeout_ms", "10000", "give up connecting after this long (exit 5)",
	"zk.*", "", "the other zk keys: docs/membership.md",
	NULL,
};

const char *const *dxl_replica_cfg_keys(void)
{
	return KEYS;
}

void dxl_replica_cfg_init(struct dxl_replica_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->durability = DXL_DUR_MSYNC;
	cfg->create = true;
	cfg->nshards = 1;
	cfg->shards[0] = 0;
	cfg->writer_slots = 16;
	cfg->ring_size = 1u << 20;
	cfg->retention_ms = 600000;
	cfg->retention_bytes = 0;
	cfg->retention_check_ms = 1000;
	cfg->service_ms = 10;
	cfg->exist_wait_ms = UINT32_MAX;
	cfg->cm = true;
	dxl_cm_params_init(&cfg->cm_params);
	cfg->cm_check_ms = 500;
	cfg->pull_ms = 200;
	cfg->sync_bytes = 256 << 10;
	cfg->checkpoint_ms = 600000;
	cfg->need_ttl_ms = 600000;
	cfg->join_timeout_ms = 30000;
	dxl_fabric_cfg_init(&cfg->fabric);
	dxl_zk_cfg_init(&cfg->zk);
}

int dxl_replica_parse_shards(const char *s, uint32_t *ids, uint32_t *n)
{
	uint32_t cnt = 0;
	const char *p = s;
	if (!s || !*s)
		return dxl_err_set(DXL_E_INVAL, "empty shard list");
	while (*p) {
		char *end;
		errno = 0;
		unsigned long a = strtoul(p, &end, 10), b;
		if (end == p || errno || a > UINT32_MAX)
			return dxl_err_set(DXL_E_INVAL, "shard list '%s': bad number at '%s'", s, p);
		b = a;
		p = end;
		if (*p == '-') {
			const char *q = p + 1;
			b = strtoul(q, &end, 10);
			if (end == q || errno || b > UINT32_MAX || b < a)
				return dxl_err_set(DXL_E_INVAL, "shard list '%s': bad range", s);
			p = end;
		}
		for (unsigned long x = a; x <= b; x++) {
			if (cnt >= DXL_REPLICA_MAX_SHARDS)
				return dxl_err_set(DXL_E_INVAL, "shard list '%s': more than %d shards",
						   s, DXL_REPLICA_MAX_SHARDS);
			for (uint32_t j = 0; j < cnt; j++)
				if (ids[j] == x)
					return dxl_err_set(DXL_E_INVAL, "shard list '%s': shard %lu twice", s, x);
			ids[cnt++] = (uint32_t)x;
		}
		if (*p == ',')
			p++;
		else if (*p)
			return dxl_err_set(DXL_E_INVAL, "shard list '%s': unexpected '%c'", s, *p);
	}
	*n = cnt;
	return 0;
}

/* parse_size -- a number with an optional K/M/G suffix (powers of 1024) */
static int parse_size(const char *p, const char **end, uint64_t *out)
{
	char *e;
	errno = 0;
	unsigned long long v = strtoull(p, &e, 10);
	if (e == p || errno || *p == '-')
		return DXL_E_INVAL;
	unsigned shift = *e == 'K' ? 10 : *e == 'M' ? 20 : *e == 'G' ? 30 : 0;
	if (shift) {
		if (v > (UINT64_MAX >> shift))
			return DXL_E_INVAL;
		v <<= shift;
		e++;
	}
	*end = e;
	*out = v;
	return 0;
}

int dxl_replica_parse_tables(const char *s, struct dxl_table_schema *t, uint32_t *n)
{
	uint32_t cnt = 0;
	if (!s || !t || !n)
		return dxl_err_set(DXL_E_INVAL, "dxl_replica_parse_tables: NULL");
	const char *p = s;
	while (*p) {
		uint64_t f[3];
		for (int k = 0; k < 3; k++) {
			if (parse_size(p, &p, &f[k]))
				return dxl_err_set(DXL_E_INVAL,
						   "table list '%s': expected id:value_size:capacity at '%s'",
						   s, p);
			if (k < 2 && *p++ != ':')
				return dxl_err_set(DXL_E_INVAL,
						   "table list '%s': expected id:value_size:capacity", s);
		}
		if (f[0] > UINT32_MAX)
			return dxl_err_set(DXL_E_INVAL, "table list '%s': table id %" PRIu64 " over %u",
					   s, f[0], UINT32_MAX);
		if (f[1] < 1 || f[1] > DXL_ENGINE_MAX_VALUE)
			return dxl_err_set(DXL_E_INVAL, "table list '%s': table %" PRIu64
					   ": value size %" PRIu64 " (1..%d)",
					   s, f[0], f[1], DXL_ENGINE_MAX_VALUE);
		if (f[2] < 1 || f[2] > DXL_TABLE_MAX_CAPACITY)
			return dxl_err_set(DXL_E_INVAL, "table list '%s': table %" PRIu64
					   ": capacity %" PRIu64 " (1..%llu)",
					   s, f[0], f[2], (unsigned long long)DXL_TABLE_MAX_CAPACITY);
		if (cnt >= DXL_REPLICA_MAX_TABLES)
			return dxl_err_set(DXL_E_INVAL, "table list '%s': more than %d tables",
					   s, DXL_REPLICA_MAX_TABLES);
		for (uint32_t j = 0; j < cnt; j++)
			if (t[j].id == f[0])
				return dxl_err_set(DXL_E_INVAL, "table list '%s': table %" PRIu64 " twice",
						   s, f[0]);
		t[cnt].id = (uint32_t)f[0];
		t[cnt].value_size = (uint32_t)f[1];
		t[cnt].capacity = f[2];
		cnt++;
		if (*p == ',' && p[1])
			p++;
		else if (*p)
			return dxl_err_set(DXL_E_INVAL, "table list '%s': unexpected '%c'", s, *p);
	}
	*n = cnt;
	return 0;
}

int dxl_replica_cfg_load(const struct dxl_config *conf, struct dxl_replica_cfg *cfg)
{
	static const char *const known[] = {
		"replica.node_id", "replica.data_dir", "replica.durability",
		"replica.create", "replica.shards", "replica.service_ms",
		"replica.exist_wait_ms", "replica.cm", "replica.pull_ms",
		"replica.sync_bytes", "replica.test_nic_pause_ms", "replica.join_timeout_ms",
		"cm.min_replicas", "cm.replication",
		"cm.check_ms", "engine.tables", "engine.lock_mode",
		"log.writer_slots", "log.ring_size",
		"log.retention_ms", "log.retention_bytes",
		"log.retention_check_ms", "log.level", "recovery.checkpoint_ms",
		"recovery.need_cursor_ttl_ms", "fabric.*", "zk.*", NULL,
	};
	int ret = dxl_config_check_known(conf, known);
	if (ret)
		return ret;
	uint64_t u;
	const char *s;
	if ((ret = dxl_config_get_u64(conf, "replica.node_id", cfg->node_id, 0,
				      UINT32_MAX, &u)))
		return ret;
	cfg->node_id = (uint32_t)u;
	if ((ret = dxl_config_get_str(conf, "replica.data_dir", cfg->data_dir, &s)))
		return ret;
	if (strlen(s) >= sizeof(cfg->data_dir))
		return dxl_err_set(DXL_E_CONFIG, "%s: key replica.data_dir: path too long",
				   dxl_config_origin(conf, "replica.data_dir"));
	memmove(cfg->data_dir, s, strlen(s) + 1);
	static const char *const durs[] = {"pmem", "msync", "process", NULL};
	int d = (int)cfg->durability;
	if ((ret = dxl_config_get_enum(conf, "replica.durability", durs, d, &d)))
		return ret;
	cfg->durability = (enum dxl_durability)d;
	if ((ret = dxl_config_get_bool(conf, "replica.create", cfg->create, &cfg->create)))
		return ret;
	if (dxl_config_has(conf, "replica.shards")) {
		dxl_config_get_str(conf, "replica.shards", "0", &s);
		if (dxl_replica_parse_shards(s, cfg->shards, &cfg->nshards))
			return dxl_err_set(DXL_E_CONFIG, "%s: key replica.shards: %s",
					   dxl_config_origin(conf, "replica.shards"),
					   dxl_errmsg());
	}
	if (dxl_config_has(conf, "engine.tables")) {
		dxl_config_get_str(conf, "engine.tables", "", &s);
		if (dxl_replica_parse_tables(s, cfg->tables, &cfg->ntables))
			return dxl_err_set(DXL_E_CONFIG, "%s: key engine.tables: %s",
					   dxl_config_origin(conf, "engine.tables"),
					   dxl_errmsg());
	}
	static const char *const lmodes[] = {"nic", "cpu", NULL};
	int lm = cfg->lock_mode == DXL_LOCKS_CPU ? 1 : 0;
	if ((ret = dxl_config_get_enum(conf, "engine.lock_mode", lmodes, lm, &lm)))
		return ret;
	cfg->lock_mode = lm ? DXL_LOCKS_CPU : DXL_LOCKS_NIC;
#define U32(key, field, lo, hi)                                                  \
	do {                                                                     \
		if ((ret = dxl_config_get_u64(conf, key, cfg->field, lo, hi, &u))) \
			return ret;                                              \
		cfg->field = (uint32_t)u;                                        \
	} while (0)
	U32("replica.service_ms", service_ms, 1, 10000);
	U32("replica.exist_wait_ms", exist_wait_ms, 0, UINT32_MAX);
	U32("log.writer_slots", writer_slots, 1, DXL_SHARD_MAX_RINGS);
	U32("log.retention_check_ms", retention_check_ms, 1, 3600000);
	U32("replica.pull_ms", pull_ms, 1, 3600000);
	U32("replica.test_nic_pause_ms", nic_pause_ms, 0, 60000);
	U32("replica.join_timeout_ms", join_timeout_ms, 0, 86400000);
	U32("cm.check_ms", cm_check_ms, 1, 3600000);
	U32("cm.min_replicas", cm_params.min_replicas, 1, DXL_CONFIG_MAX_REPLICAS);
	U32("cm.replication", cm_params.replication, 1, DXL_CONFIG_MAX_REPLICAS);
#undef U32
	if ((ret = dxl_config_get_bool(conf, "replica.cm", cfg->cm, &cfg->cm)) ||
	    (ret = dxl_config_get_size(conf, "replica.sync_bytes", cfg->sync_bytes, 0,
				       1ull << 40, &cfg->sync_bytes)))
		return ret;
	if ((ret = dxl_config_get_size(conf, "log.ring_size", cfg->ring_size, 8192,
				       1ull << 40, &cfg->ring_size)))
		return ret;
	if (cfg->ring_size % 4096)
		return dxl_err_set(DXL_E_CONFIG, "%s: key log.ring_size: %" PRIu64
				   " is not a multiple of 4096",
				   dxl_config_origin(conf, "log.ring_size"), cfg->ring_size);
	if ((ret = dxl_config_get_u64(conf, "log.retention_ms", cfg->retention_ms, 0,
				      UINT64_MAX, &cfg->retention_ms)) ||
	    (ret = dxl_config_get_size(conf, "log.retention_bytes",
				       cfg->retention_bytes, 0, 1ull << 40,
				       &cfg->retention_bytes)))
		return ret;
	if ((ret = dxl_config_get_u64(conf, "recovery.checkpoint_ms", cfg->checkpoint_ms, 0,
				      UINT64_MAX, &cfg->checkpoint_ms)) ||
	    (ret = dxl_config_get_u64(conf, "recovery.need_cursor_ttl_ms", cfg->need_ttl_ms, 1000,
				      UINT64_MAX, &cfg->need_ttl_ms)))
		return ret;
	if ((ret = dxl_log_configure(conf)))
		return ret;
	if ((ret = dxl_fabric_cfg_load(conf, &cfg->fabric)))
		return ret;
	return dxl_zk_cfg_load(conf, &cfg->zk);
}

/* ---- registration ----------------------------------------------------------- */

static void stop_serving(struct dxl_replica_server *s, const char *why)
{
	if (!s->serving)
		return;
	/* the regions first (one-sided accesses fail from now on); then the
	 * table RPCs, which waits for a request being served -- a handler
	 * also checks the lease itself, before it serves and before it
	 * replies, so a long one cannot hold the fencing back */
	for (uint32_t i = 0; i < s->nshards; i++) {
		dxl_shard_deregister(s->shards[i]);
		dxl_tables_deregister(s->tables[i]);
	}
	if (s->svc)
		dxl_table_svc_set_serving(s->svc, false);
	s->serving = false;
	s->published = false;
	DXL_LOG(strcmp(why, "shutdown") && strcmp(why, "new configuration epoch") ?
			DXL_LOG_WARN : DXL_LOG_INFO,
		"event=regions_deregistered node=%u reg_epoch=%" PRIu64 " reason=\"%s\"",
		s->cfg.node_id, s->reg_epoch, why);
}

static int start_serving(struct dxl_replica_server *s)
{
	for (uint32_t i = 0; i < s->nshards; i++) {
		int ret = dxl_shard_register(s->shards[i], s->f);
		if (!ret && s->tables[i] &&
		    (ret = dxl_tables_register(s->tables[i], s->f)))
			dxl_shard_deregister(s->shards[i]);
		if (ret) {
			for (uint32_t j = 0; j < i; j++) {
				dxl_shard_deregister(s->shards[j]);
				dxl_tables_deregister(s->tables[j]);
			}
			return ret;
		}
	}
	if (s->svc)
		dxl_table_svc_set_serving(s->svc, true);
	s->serving = true;
	s->published = false;
	s->reg_epoch++;
	DXL_INFO("event=regions_registered node=%u reg_epoch=%" PRIu64 " shards=%u",
		 s->cfg.node_id, s->reg_epoch, s->nshards);
	return 0;
}

/* lease_lapsed -- the lease rule (s->reg_mu held): deregister at once --
 * or, testing only, replica.test_nic_pause_ms after the lease was first
 * seen invalid */
static void lease_lapsed(struct dxl_replica_server *s)
{
	if (s->cfg.nic_pause_ms && s->serving) {
		uint64_t now = dxl_now_ms();
		if (!s->lease_lost_ms)
			s->lease_lost_ms = now;
		if (now - s->lease_lost_ms < s->cfg.nic_pause_ms)
			return;
	}
	s->lease_lost_ms = 0;
	stop_serving(s, "zookeeper lease not valid");
}

/* lease_until -- the table RPC service's view of the lease */
static uint64_t lease_until(void *arg)
{
	struct dxl_replica_server *s = arg;
	return s->zk ? dxl_zk_lease_until_ns(s->zk) : 0;
}

/* guard_main -- the lease rule, independent of the service loop */
static void *guard_main(void *arg)
{
	struct dxl_replica_server *s = arg;
	while (!atomic_load(&s->guard_stop)) {
		usleep(s->cfg.service_ms * 1000);
		if (dxl_zk_lease_valid(s->zk))
			continue;
		/* (tests hold the lease rule here: a guard held up) */
		DXL_TESTPOINT("replica.lease_rule", s);
		pthread_mutex_lock(&s->reg_mu);
		if (!dxl_zk_lease_valid(s->zk))
			lease_lapsed(s);
		pthread_mutex_unlock(&s->reg_mu);
	}
	return NULL;
}

/* publish -- register nodes/<id> with the current descriptors; DXL_E_EXIST
 * is retried for exist_wait_ms (a dead previous incarnation's session), a
 * connection loss too (a lost reply) */
static int publish(struct dxl_replica_server *s, bool wait_exist)
{
	struct dxl_replica_desc *d = calloc(1, sizeof(*d));
	if (!d)
		return dxl_err_set(DXL_E_NOMEM, "replica descriptor");
	d->node_id = s->cfg.node_id;
	snprintf(d->addr, sizeof(d->addr), "%s", dxl_fabric_addr(s->f));
	d->provider = dxl_fabric_provider(s->f);
	d->ctx = 0;
	d->rpc_ctx = s->svc ? DXL_REPLICA_RPC_CTX : 0;
	d->cfg_epoch = s->cfg_epoch;
	d->durability = s->cfg.durability;
	d->nshards = s->nshards;
	int ret = 0;
	pthread_mutex_lock(&s->reg_mu);
	d->reg_epoch = s->reg_epoch;
	if (!s->serving)
		ret = dxl_err_set(DXL_E_STATE, "not serving (lease lapsed)");
	for (uint32_t i = 0; !ret && i < s->nshards; i++) {
		ret = dxl_shard_describe(s->shards[i], &d->shards[i]);
		if (!ret && s->tables[i] && !s->gated[i])
			ret = dxl_tables_describe(s->tables[i], &d->shards[i]);
		d->shards[i].state = s->st[i];
		d->shards[i].data_id = s->data_id[i];
		d->shards[i].fill_pct = s->fill[i];
		d->shards[i].last_ts = s->last_ts[i];
		d->shards[i].records = s->nrec[i];
	}
	pthread_mutex_unlock(&s->reg_mu);
	char *json = NULL;
	if (!ret)
		ret = dxl_replica_desc_encode(d, &json);
	if (!ret)
		DXL_TESTPOINT("replica.publish", d);
	free(d);
	if (ret)
		return ret;
	/* a dead incarnation's session expires at the earliest a session
	 * timeout after its last contact, and ZooKeeper checks expiries only
	 * every tick (sessions are bucketed by tick): the default is twice the
	 * session timeout, so a restart right after a kill is not refused */
	uint32_t wait = s->cfg.exist_wait_ms == UINT32_MAX ?
				2 * dxl_zk_session_timeout_ms(s->zk) :
				s->cfg.exist_wait_ms;
	uint64_t deadline = dxl_now_ms() + wait;
	uint64_t unavail_deadline = dxl_now_ms() + 2 * dxl_zk_session_timeout_ms(s->zk);
	bool warned = false;
	for (;;) {
		ret = dxl_member_register(s->zk, s->cfg.node_id, json);
		/* a connection loss (a create whose reply was lost: it may have
		 * been applied) is retried too: registering an id this session
		 * holds replaces its payload (issue 16.6; it ended the daemon's
		 * start-up: found by test_nemesis's zk-lost-reply) */
		if (ret == DXL_E_UNAVAIL && dxl_now_ms() < unavail_deadline) {
			usleep(100 * 1000);
			continue;
		}
		if (ret != DXL_E_EXIST || !wait_exist || dxl_now_ms() >= deadline)
			break;
		if (!warned)
			DXL_WARN("event=node_id_held node=%u wait_ms=%u msg=\"%s\"",
				 s->cfg.node_id, wait, dxl_errmsg());
		warned = true;
		usleep(100 * 1000);
	}
	free(json);
	if (ret)
		return ret;
	s->published = true;
	DXL_INFO("event=registered node=%u addr=%s session=0x%" PRIx64
		 " session_epoch=%" PRIu64 " reg_epoch=%" PRIu64,
		 s->cfg.node_id, dxl_fabric_addr(s->f),
		 (uint64_t)dxl_zk_session_id(s->zk), dxl_zk_session_epoch(s->zk),
		 s->reg_epoch);
	return 0;
}

/* ---- shard states and the member mark ----------------------------------------- */

/*
 * The member mark, DATADIR/shard-<s>.member, holding the copy's data
 * identity: written (and made durable) when the shard becomes a MEMBER here,
 * removed when it stops being one, before a copy rewrites its rings. A node
 * starts with every shard UNASSIGNED (issue 16.8); a configuration that
 * names it a member makes a marked shard a MEMBER again at once (it missed
 * nothing: nothing was acknowledged without it), an unmarked one JOINING --
 * e.g. a node that was added, then stopped before its join pull was done,
 * still lacks what was acknowledged before it joined.
 *
 * Two rules keep the mark from vouching for a copy it does not describe:
 *  - a mark that could not be removed stays "on" in memory, and no copy
 *    rewrites the shard's rings until it is gone (mark_gone): a crash in
 *    the middle of such a copy would bring the node back a member;
 *  - with durability=process the log lives in the page cache: an OS crash
 *    loses what was not written back, but not the fsynced mark. The mark
 *    says which boot wrote it, and in process mode a mark of another boot
 *    (or without one) is stale: the copy joins again.
 */
static void mark_path(const struct dxl_replica_server *s, uint32_t i, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/shard-%u.member", s->cfg.data_dir, dxl_shard_id(s->shards[i]));
}

static void read_boot_id(char *buf, size_t cap)
{
	buf[0] = 0;
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (!f)
		return;
	if (!fgets(buf, (int)cap, f))
		buf[0] = 0;
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
}

static void fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		if (fsync(fd))
			DXL_WARN("event=fsync_failed path=%s errno=%d", dir, errno);
		close(fd);
	}
}

/* member_mark -- write (on) or remove (off) the mark of shard index i;
 * s->marked[i] says whether it is (still) there */
static void member_mark(struct dxl_replica_server *s, uint32_t i, bool on)
{
	char path[1100], tmp[1110];
	mark_path(s, i, path, sizeof(path));
	if (!on) {
		int err = 0; /* (tests: an unlink that fails) */
		DXL_TESTPOINT("replica.member_mark.unlink", &err);
		if (err ? (errno = err, -1) : unlink(path)) {
			if (errno != ENOENT) {
				/* still there: still "on", retried by the next
				 * set_state or mark_gone; nothing copies into
				 * the rings meanwhile */
				DXL_ERROR("event=member_mark_failed path=%s op=unlink errno=%d", path,
					  errno);
				return;
			}
		}
		fsync_dir(s->cfg.data_dir);
		s->marked[i] = false;
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	char text[192];
	int n = snprintf(text, sizeof(text), "data_id=0x%" PRIx64 "\nboot_id=%s\n", s->data_id[i],
			 s->boot_id);
	bool ok = fd >= 0 && write(fd, text, (size_t)n) == n && fsync(fd) == 0;
	if (fd >= 0)
		close(fd);
	ok = ok && rename(tmp, path) == 0;
	if (!ok) {
		/* without the mark a restart joins again (a copy from the
		 * primary): slower, never wrong */
		DXL_WARN("event=member_mark_failed path=%s op=write errno=%d", path, errno);
		unlink(tmp);
		return;
	}
	fsync_dir(s->cfg.data_dir);
	s->marked[i] = true;
}

/* mark_gone -- shard index i has no mark (removing it if needed): only
 * then may a copy rewrite its rings */
static bool mark_gone(struct dxl_replica_server *s, uint32_t i)
{
	if (s->marked[i])
		member_mark(s, i, false);
	return !s->marked[i];
}

/* member_mark_read -- the mark of shard index i is there, for this identity
 * (and, with durability=process, this boot); another one is stale: removed */
static bool member_mark_read(struct dxl_replica_server *s, uint32_t i)
{
	char path[1100], text[256] = "";
	mark_path(s, i, path, sizeof(path));
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t got = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[got] = 0;
	uint64_t id = 0;
	char boot[64] = "";
	char *nl = strchr(text, '\n');
	if (nl) {
		*nl = 0;
		const char *b = nl + 1;
		if (!strncmp(b, "boot_id=", 8)) {
			snprintf(boot, sizeof(boot), "%s", b + 8);
			boot[strcspn(boot, "\n")] = 0;
		}
	}
	bool id_ok = !strncmp(text, "data_id=", 8) && !dxl_parse_hex64(text + 8, &id) &&
		     id == s->data_id[i];
	bool boot_ok = s->cfg.durability != DXL_DUR_PROCESS ||
		       (s->boot_id[0] && !strcmp(boot, s->boot_id));
	if (id_ok && boot_ok)
		return true;
	DXL_WARN("event=member_mark_stale path=%s data_id=0x%" PRIx64 " reason=%s action=remove",
		 path, s->data_id[i], !id_ok ? "data_id" : "boot_id");
	/* removed; if that fails it stays stale for good (its identity or
	 * boot never matches again): harmless, copies may go on */
	member_mark(s, i, false);
	return false;
}

/* set_state -- shard index i's state; the member mark follows MEMBER */
static void set_state(struct dxl_replica_server *s, uint32_t i, enum dxl_shard_state st)
{
	s->vouch[i] = st == DXL_SHARD_MEMBER;
	if (st == DXL_SHARD_MEMBER && !s->marked[i])
		member_mark(s, i, true);
	else if (st != DXL_SHARD_MEMBER && s->marked[i])
		member_mark(s, i, false);
	s->st[i] = st;
}

/* ---- the configuration: epochs and fencing ------------------------------------ */

/* on_config -- the watch (event thread): hand the new version to the loop */
static void on_config(void *arg, const struct dxl_cluster_config *cfg,
		      int32_t version, int status)
{
	(void)version;
	struct dxl_replica_server *s = arg;
	if (status || !cfg)
		return;
	pthread_mutex_lock(&s->mu);
	struct dxl_cluster_config c;
	if (dxl_cluster_config_copy(&c, cfg) == 0) {
		dxl_cluster_config_clear(&s->pend);
		s->pend = c;
		s->pend_new = true;
	} else {
		DXL_WARN("event=config_copy_failed msg=\"%s\"", dxl_errmsg());
	}
	pthread_mutex_unlock(&s->mu);
}

static bool in_shard(const struct dxl_cluster_shard *sh, uint32_t id)
{
	if (!sh)
		return false;
	if (sh->primary == id)
		return true;
	for (uint32_t i = 0; i < sh->nbackups; i++)
		if (sh->backups[i] == id)
			return true;
	return false;
}

/* sync_config -- read the configuration now, not waiting for the watch: a
 * newer one than applied goes to apply_config; cfg_synced once it was read
 * (or is known absent) on this session */
static void sync_config(struct dxl_replica_server *s)
{
	struct dxl_cluster_config c;
	int ret = dxl_cluster_config_read(s->zk, &c, NULL);
	if (ret && ret != DXL_E_NOENT) {
		DXL_DEBUG("event=config_read_failed node=%u msg=\"%s\"", s->cfg.node_id,
			  dxl_errmsg());
		return;
	}
	if (!ret) {
		pthread_mutex_lock(&s->mu);
		if (c.epoch > s->cfg_epoch && (!s->pend_new || c.epoch > s->pend.epoch)) {
			dxl_cluster_config_clear(&s->pend);
			s->pend = c;
			s->pend_new = true;
		} else {
			dxl_cluster_config_clear(&c);
		}
		pthread_mutex_unlock(&s->mu);
	}
	s->cfg_synced = true;
}

/* apply_config -- a configuration with a newer epoch: re-register every
 * region (new rkeys: writers and tailers of older epochs are fenced off by
 * the fabric) and publish the new descriptors with cfg_epoch; a shard this
 * node hosts but is not a member of goes to catch-up */
static void apply_config(struct dxl_replica_server *s)
{
	struct dxl_cluster_config c;
	pthread_mutex_lock(&s->mu);
	bool have = s->pend_new;
	if (have) {
		c = s->pend;
		dxl_cluster_config_init(&s->pend);
		s->pend_new = false;
	}
	pthread_mutex_unlock(&s->mu);
	if (!have)
		return;
	if (c.epoch <= s->cfg_epoch) {
		dxl_cluster_config_clear(&c);
		return;
	}
	bool was_primary[DXL_REPLICA_MAX_SHARDS];
	for (uint32_t i = 0; i < s->nshards; i++) {
		const struct dxl_cluster_shard *osh =
			dxl_cluster_config_shard(&s->conf, dxl_shard_id(s->shards[i]));
		was_primary[i] = s->cfg_epoch && osh && osh->primary == s->cfg.node_id &&
				 s->st[i] == DXL_SHARD_MEMBER;
	}
	dxl_cluster_config_clear(&s->conf);
	s->conf = c;
	s->cfg_epoch = c.epoch;
	for (uint32_t i = 0; i < s->nshards; i++) {
		const struct dxl_cluster_shard *sh =
			dxl_cluster_config_shard(&s->conf, dxl_shard_id(s->shards[i]));
		enum dxl_shard_state old = s->st[i];
		bool primary = sh && sh->primary == s->cfg.node_id;
		/* the configuration added another copy of this shard than the
		 * one here (this node restarted on an empty or recreated data
		 * directory): not a member until it has caught up and been
		 * added again with this identity (issue 16.3) */
		uint64_t rec = dxl_cluster_shard_data_id(sh, s->cfg.node_id);
		bool renewed = in_shard(sh, s->cfg.node_id) && rec && rec != s->data_id[i];
		/* a store marked incomplete (a copy or a state transfer was
		 * cut short) misses records' effects: never a member at once */
		bool store_ok = !s->rcvm || dxl_rcvm_store_ok(s->rcvm, i);
		if (in_shard(sh, s->cfg.node_id) && !renewed) {
			/* a node that joins copies the shard from the primary
			 * once more before it says MEMBER (join_pulls); the
			 * other shards do not wait for it (issue 16.1). A copy
			 * that was a member when the node stopped (its mark)
			 * is one at once: nothing was acknowledged without it.
			 * With an incomplete store: a backup joins again (its
			 * join pull transfers state from the primary); the
			 * primary, which has nobody to join from, says it is
			 * not a member (catching up: the CM promotes a member
			 * that counts) */
			if (s->st[i] != DXL_SHARD_MEMBER) {
				if (!store_ok && primary)
					set_state(s, i, DXL_SHARD_CATCHING_UP);
				else
					set_state(s, i, (primary || s->vouch[i]) && store_ok
								? DXL_SHARD_MEMBER
								: DXL_SHARD_JOINING);
			}
			if (s->st[i] == DXL_SHARD_JOINING)
				s->join_since_ms[i] = dxl_now_ms(); /* its timeout */
		} else if (s->st[i] == DXL_SHARD_MEMBER || s->st[i] == DXL_SHARD_JOINING ||
			   (s->st[i] == DXL_SHARD_UNASSIGNED && (sh || renewed))) {
			set_state(s, i, DXL_SHARD_CATCHING_UP);
		}
		if (renewed && old != s->st[i])
			DXL_WARN("event=store_renewed shard=%u epoch=%" PRIu64 " data_id=0x%" PRIx64
				 " recorded=0x%" PRIx64 " action=catch_up",
				 dxl_shard_id(s->shards[i]), c.epoch, s->data_id[i], rec);
		/* only a MEMBER primary serves the shard's tables */
		primary = primary && s->st[i] == DXL_SHARD_MEMBER;
		if (s->tables[i] && primary && !was_primary[i] && !s->gated[i]) {
			s->gated[i] = true;
			s->live_ms[i] = 0; /* the live writers as of now */
			s->gate_ts[i] = DXL_HLC_MAKE(dxl_wall_ms(), 0);
			s->gate_since_ms[i] = dxl_now_ms();
			DXL_INFO("event=gate_closed shard=%u epoch=%" PRIu64 " gate_ts=%" PRIu64,
				 dxl_shard_id(s->shards[i]), c.epoch, s->gate_ts[i]);
		} else if (!primary && s->gated[i]) {
			s->gated[i] = false;
		}
		/* no longer the primary (paused, not restarted): its lock words
		 * are stale -- readers of its store take them for writes */
		if (s->tables[i] && was_primary[i] && !primary)
			dxl_tables_clear_locks(s->tables[i]);
		/* the table RPCs: closed while gated, and for a shard whose
		 * copy here is not a member's (on a new store) */
		if (s->svc)
			dxl_table_svc_set_gated(s->svc, dxl_shard_id(s->shards[i]),
						s->gated[i] || (sh && sh->primary == s->cfg.node_id &&
								s->st[i] != DXL_SHARD_MEMBER));
		if (old != s->st[i])
			DXL_INFO("event=shard_state shard=%u epoch=%" PRIu64 " state=%s was=%s",
				 dxl_shard_id(s->shards[i]), s->cfg_epoch,
				 dxl_shard_state_name(s->st[i]), dxl_shard_state_name(old));
	}
	s->last_pull_ms = 0; /* catch up at once */
	/* table RPCs of older epochs are refused from now on */
	if (s->svc)
		dxl_table_svc_set_config(s->svc, &s->conf);
	pthread_mutex_lock(&s->reg_mu);
	if (s->serving) {
		stop_serving(s, "new configuration epoch");
		int ret = dxl_zk_lease_valid(s->zk) ? start_serving(s) : 0;
		if (ret)
			DXL_WARN("event=register_failed node=%u msg=\"%s\"", s->cfg.node_id,
				 dxl_errmsg());
	}
	pthread_mutex_unlock(&s->reg_mu);
	s->published = false; /* publish() in the loop, with cfg_epoch */
	DXL_INFO("event=config_applied node=%u epoch=%" PRIu64 " reg_epoch=%" PRIu64,
		 s->cfg.node_id, s->cfg_epoch, s->reg_epoch);
}

/* on_members -- (event thread) a node joined, left or changed: the CM's
 * next round runs at once instead of at its period */
static void on_members(void *arg, enum dxl_member_event ev, uint32_t node_id,
		       const char *payload)
{
	(void)ev;
	(void)node_id;
	(void)payload;
	struct dxl_replica_server *s = arg;
	atomic_store(&s->members_changed, true);
}

/* on_election -- (event thread) only logged: the loop asks
 * dxl_election_is_leader and the lease before every CM round, and stands
 * again when the candidacy is over (dxl_election_seq < 0) */
static void on_election(void *arg, enum dxl_election_event ev)
{
	struct dxl_replica_server *s = arg;
	if (ev == DXL_ELECTION_ELECTED)
		DXL_INFO("event=cm_elected node=%u", s->cfg.node_id);
	else
		DXL_WARN("event=cm_lost node=%u", s->cfg.node_id);
}

/* ---- catch-up: state transfer for shards this node is not a member of -------- */

static bool live_writers(struct dxl_replica_server *s, uint32_t i, uint64_t now);

/* pull_shard -- one copy pass of shard index i from the node described by
 * d (its nodes/<id>): every ring made an exact copy of the source's,
 * checked against what the store applied (catchup.c: a gap starts a state
 * transfer; DXL_E_AGAIN while it runs); *changed = bytes that differed */
static int pull_shard(struct dxl_replica_server *s, uint32_t i,
		      const struct dxl_replica_desc *d, uint64_t *changed)
{
	uint64_t mask = 0;
	if (s->tables[i] && live_writers(s, i, dxl_now_ms()))
		mask = s->live_mask[i];
	return dxl_rcvm_pass(s->rcvm, i, s->pull_ctx, d, mask, s->zk, changed);
}

/* catch_up -- for every hosted shard that is not a member: copy it from a
 * live member (the primary first), and say SYNCED once a pass changed
 * little (the CM then adds it; writers repair the last gap when they
 * reopen, docs/log.md). A SYNCED shard keeps copying, slower, until it is
 * added. */
static void catch_up(struct dxl_replica_server *s)
{
	bool republish = false;
	for (uint32_t i = 0; i < s->nshards; i++) {
		if (s->st[i] == DXL_SHARD_MEMBER || s->st[i] == DXL_SHARD_JOINING)
			continue; /* a member; a joiner copies in join_pulls */
		uint32_t shard = dxl_shard_id(s->shards[i]);
		const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&s->conf, shard);
		enum dxl_shard_state old = s->st[i];
		if (s->st[i] == DXL_SHARD_SYNCED && ++s->pull_skip[i] % 5)
			continue; /* synced: one pass in five */
		if (!mark_gone(s, i))
			continue; /* its member mark is still there: no copy */
		bool skip = false; /* (tests: a copy that takes long) */
		DXL_TESTPOINT("replica.catch_up.pass", &skip);
		if (skip)
			continue;
		uint32_t m[DXL_CONFIG_MAX_REPLICAS];
		uint32_t nm = dxl_cluster_shard_members(sh, m);
		int ret = DXL_E_NOENT;
		uint64_t changed = 0;
		uint32_t src = 0;
		for (uint32_t k = 0; k < nm && ret && ret != DXL_E_AGAIN; k++) {
			src = m[k];
			if (src == s->cfg.node_id)
				continue;
			ret = dxl_replica_desc_get(s->zk, src, s->src_desc);
			/* only a member that holds the shard is a source (not
			 * one that is joining or restarted on a new store) */
			const struct dxl_shard_desc *ssd =
				ret ? NULL : dxl_replica_desc_shard(s->src_desc, shard);
			if (!ret && (!ssd || ssd->state != DXL_SHARD_MEMBER))
				ret = dxl_err_set(DXL_E_NOENT, "node %u is not a member of shard %u yet",
						  src, shard);
			if (!ret)
				ret = pull_shard(s, i, s->src_desc, &changed);
			if (ret && ret != DXL_E_NOENT)
				DXL_DEBUG("event=catch_up_failed shard=%u source=%u msg=\"%s\"",
					  shard, src, dxl_errmsg());
		}
		if (ret) {
			set_state(s, i, nm ? DXL_SHARD_CATCHING_UP : DXL_SHARD_UNASSIGNED);
		} else {
			set_state(s, i, changed < s->cfg.sync_bytes ? DXL_SHARD_SYNCED :
								    DXL_SHARD_CATCHING_UP);
			if (changed)
				DXL_DEBUG("event=catch_up_pass shard=%u source=%u changed=%" PRIu64,
					  shard, src, changed);
		}
		if (old != s->st[i]) {
			DXL_INFO("event=shard_state shard=%u epoch=%" PRIu64 " state=%s was=%s",
				 shard, s->cfg_epoch, dxl_shard_state_name(s->st[i]),
				 dxl_shard_state_name(old));
			republish = true;
		}
	}
	if (republish)
		s->published = false;
}

/*
 * join_pulls -- a shard this node joined (JOINING, since apply_config): its
 * last copy pass may predate records a writer of the previous epoch appended
 * and had acknowledged by the old members, and a writer that has gone since
 * will never repair them. So, once the primary is registered for this epoch
 * as a member of the shard (no writer of an older epoch can reach it:
 * nothing more is acknowledged there), copy the shard from the primary once
 * more; then say MEMBER. Until then the shard is published as JOINING:
 * writers of this epoch do not open with it, and the CM does not count it.
 * Per shard: the node's other shards are published and served meanwhile
 * (two nodes joining each other's shards do not wait for each other).
 */
static void join_pulls(struct dxl_replica_server *s)
{
	for (uint32_t i = 0; i < s->nshards; i++) {
		if (s->st[i] != DXL_SHARD_JOINING)
			continue;
		uint32_t shard = dxl_shard_id(s->shards[i]);
		const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&s->conf, shard);
		if (!sh || sh->primary == s->cfg.node_id) {
			set_state(s, i, sh ? DXL_SHARD_MEMBER : DXL_SHARD_UNASSIGNED);
			s->published = false;
			continue;
		}
		DXL_TESTPOINT("replica.join_pull.wait", s);
		/* the primary's descriptor, read once: its cfg_epoch says whether
		 * it registered for this epoch, and it is what the pull uses */
		int ret = dxl_replica_desc_get(s->zk, sh->primary, s->src_desc);
		const struct dxl_shard_desc *psd =
			ret ? NULL : dxl_replica_desc_shard(s->src_desc, shard);
		bool ready = !ret && s->src_desc->cfg_epoch >= s->cfg_epoch && psd &&
			     psd->state == DXL_SHARD_MEMBER;
		uint64_t changed = 0;
		if (ready && !mark_gone(s, i)) {
			ready = false; /* a mark that will not go: no copy */
			ret = dxl_err_set(DXL_E_IO, "shard %u: its member mark cannot be removed",
					  shard);
		}
		if (ready) {
			DXL_TESTPOINT("replica.join_pull.copy", s);
			int inj = 0; /* (tests: a copy that fails) */
			DXL_TESTPOINT("replica.join_pull.fail", &inj);
			ret = inj ? dxl_err_set(inj, "join pull failed (injected)")
				  : pull_shard(s, i, s->src_desc, &changed);
		}
		if (!ready || ret) {
			if (ret)
				DXL_DEBUG("event=join_pull_failed shard=%u source=%u msg=\"%s\"", shard,
					  sh->primary, dxl_errmsg());
			/* a join that does not get done in join_timeout_ms
			 * (the primary unreachable from here, copies failing,
			 * a state transfer failing; not one under way) is
			 * given up: the shard says it is not a member, the CM
			 * removes it (min_replicas allowing) and adds it again
			 * once it has caught up -- instead of a member that
			 * writers refuse to open with, kept for good */
			uint64_t waited = dxl_now_ms() - s->join_since_ms[i];
			if (s->cfg.join_timeout_ms && waited >= s->cfg.join_timeout_ms &&
			    !(s->rcvm && dxl_rcvm_busy(s->rcvm, i))) {
				DXL_WARN("event=join_timeout shard=%u epoch=%" PRIu64 " source=%u ms=%" PRIu64
					 " msg=\"%s\" action=catch_up",
					 shard, s->cfg_epoch, sh->primary, waited,
					 ret ? dxl_errmsg() : "the primary is not registered for the epoch");
				set_state(s, i, DXL_SHARD_CATCHING_UP);
				s->published = false;
				DXL_INFO("event=shard_state shard=%u epoch=%" PRIu64
					 " state=catching_up was=joining", shard, s->cfg_epoch);
			}
			continue;
		}
		set_state(s, i, DXL_SHARD_MEMBER);
		s->published = false; /* say MEMBER */
		dxl_rcvm_joined(s->rcvm, i, s->zk);
		DXL_INFO("event=join_pull shard=%u epoch=%" PRIu64 " source=%u changed=%" PRIu64,
			 shard, s->cfg_epoch, sh->primary, changed);
		DXL_INFO("event=shard_state shard=%u epoch=%" PRIu64 " state=member was=joining",
			 shard, s->cfg_epoch);
	}
}

/* ---- retention ---------------------------------------------------------------- */

static int retain_ring(struct dxl_replica_server *s, struct dxl_logstore *ls,
		       uint32_t ring, uint64_t now_ms, uint64_t keep_from,
		       uint64_t applied_pos, uint64_t *cap_records, uint64_t *cap_from_ts,
		       uint64_t *cap_to_ts)
{
	uint64_t wm = dxl_logstore_watermark(ls, ring);
	if (!wm)
		return 0; /* nothing promised: nothing is known to be acknowledged */
	uint64_t end_pos = 0, end_seq = 0;
	int ret = dxl_ring_scan(ls, ring, NULL, NULL, &end_pos, &end_seq);
	if (ret < 0)
		return ret;
	uint64_t limit = s->cfg.retention_bytes ? s->cfg.retention_bytes :
						  dxl_logstore_ring_size(ls) / 2;
	struct dxl_ring_iter it;
	if ((ret = dxl_ring_iter_init(&it, ls, ring)))
		return ret;
	struct dxl_rec rec;
	uint64_t pos, npos = 0, nseq = 0, last_ts = 0, needed = 0, needed_ts = 0;
	int n = 0;
	while (dxl_ring_iter_next(&it, &rec, &pos) == 1) {
		if (rec.commit_ts >= wm)
			break; /* (1) not below the watermark: maybe unacknowledged */
		if (pos >= applied_pos)
			break; /* not yet applied to this backup's tables */
		/* (3) age alone does not reclaim what a consumer group has not
		 * read yet (keep_from: the slowest group's cursor); size does */
		bool old = now_ms > DXL_HLC_PHYS(rec.commit_ts) &&
			   now_ms - DXL_HLC_PHYS(rec.commit_ts) > s->cfg.retention_ms &&
			   rec.commit_ts < keep_from;
		bool over = end_pos - pos > limit;
		if (!old && !over)
			break; /* (2) neither too old nor beyond the size */
		if (!old && rec.commit_ts >= keep_from) {
			if (!needed++)
				needed_ts = rec.commit_ts;
			*cap_to_ts = DXL_MAX(*cap_to_ts, rec.commit_ts);
		}
		npos = pos + rec.total_len;
		nseq = rec.seq + 1;
		last_ts = rec.commit_ts;
		n++;
	}
	/* the size cap reclaims what a consumer group, a node catching up
	 * (its dxl-recovery-<node> cursor) or a member's checkpoint
	 * (dxl-ckpt-<node>) still needs: counted, said by the caller */
	if (needed) {
		*cap_records += needed;
		if (!*cap_from_ts || needed_ts < *cap_from_ts)
			*cap_from_ts = needed_ts;
	}
	if (n) {
		struct dxl_ring_head h;
		if ((ret = dxl_logstore_head(ls, ring, &h)))
			return ret;
		if (last_ts < h.last_ts)
			last_ts = h.last_ts;
		if ((ret = dxl_logstore_set_head(ls, ring, npos, nseq, last_ts)))
			return ret;
	}
	return n;
}

static int stat_rec(const struct dxl_rec *rec, uint64_t pos, void *arg)
{
	(void)pos;
	uint64_t *last = arg;
	if (rec->commit_ts > *last)
		*last = rec->commit_ts;
	return 0;
}

/* refresh_stats -- ring fill, newest record, record count per shard;
 * true if a value changed enough to publish */
static bool refresh_stats(struct dxl_replica_server *s)
{
	bool changed = false;
	for (uint32_t i = 0; i < s->nshards; i++) {
		struct dxl_logstore *ls = dxl_shard_logstore(s->shards[i]);
		uint64_t last = 0, n = 0, used_max = 0;
		for (uint32_t r = 0; r < dxl_logstore_nrings(ls); r++) {
			struct dxl_ring_head h;
			uint64_t end = 0;
			int k = dxl_ring_scan(ls, r, stat_rec, &last, &end, NULL);
			if (k < 0 || dxl_logstore_head(ls, r, &h))
				continue;
			n += (uint64_t)k;
			if (end - h.pos > used_max)
				used_max = end - h.pos;
		}
		uint32_t fill = (uint32_t)(used_max * 100 / dxl_logstore_ring_size(ls));
		if (fill != s->fill[i] || n != s->nrec[i] || last != s->last_ts[i])
			changed = true;
		s->fill[i] = fill;
		s->last_ts[i] = last;
		s->nrec[i] = n;
	}
	return changed;
}

#define CAP_WARN_MS 10000

/* one event=retention_cap line per shard at most every CAP_WARN_MS, with
 * what the size cap reclaimed since the last one */
static void cap_warn(struct dxl_replica_server *s, uint32_t i)
{
	uint64_t now = dxl_now_ms();
	if (!s->cap_records[i] || (s->cap_warn_ms[i] && now - s->cap_warn_ms[i] < CAP_WARN_MS))
		return;
	/* who lost what (recovery: a node catching up transfers state) */
	char passed[1024] = "unknown";
	if (s->rcvm)
		dxl_rcvm_cap_passed(s->rcvm, i, s->zk, s->cap_to_ts[i], passed, sizeof(passed));
	DXL_WARN("event=retention_cap shard=%u rings=0x%x records=%" PRIu64 " from_ts=%" PRIu64
		 " to_ts=%" PRIu64 " need_ts=%" PRIu64 " passed=%s"
		 " msg=\"log.retention_bytes reclaimed records a cursor still"
		 " needs (since the last such line, at most one every %d s): a consumer group behind"
		 " it gets DXL_E_STALE (stale), a node catching up transfers state (transfer), a"
		 " member's checkpoint no longer rebuilds a lost store (no_rebuild)\"",
		 dxl_shard_id(s->shards[i]), s->cap_rings[i], s->cap_records[i], s->cap_from_ts[i],
		 s->cap_to_ts[i], s->cap_need_ts[i], passed, CAP_WARN_MS / 1000);
	s->cap_warn_ms[i] = now;
	s->cap_records[i] = 0;
	s->cap_from_ts[i] = 0;
	s->cap_to_ts[i] = 0;
	s->cap_rings[i] = 0;
}

int dxl_replica_server_retain(struct dxl_replica_server *s, uint64_t now_ms)
{
	int total = 0;
	for (uint32_t i = 0; i < s->nshards; i++) {
		if (s->rcvm) { /* checkpoints, their cursors, stale cursors (catchup.c) */
			const struct dxl_cluster_shard *sh =
				dxl_cluster_config_shard(&s->conf, dxl_shard_id(s->shards[i]));
			struct dxl_rcvm_tick t = {
				.zk = s->zk, .conf = &s->conf, .now_ms = dxl_now_ms(),
				.member = s->st[i] == DXL_SHARD_MEMBER,
				.primary = s->st[i] == DXL_SHARD_MEMBER && sh &&
					   sh->primary == s->cfg.node_id && !s->gated[i],
				.may_start = s->serving,
			};
			dxl_rcvm_tick(s->rcvm, i, &t);
		}
		/* a member; or a node that never had a configuration (nothing
		 * copies into it). Not a copy in progress: its heads are the
		 * source's */
		if (s->st[i] != DXL_SHARD_MEMBER &&
		    !(s->cfg_epoch == 0 && s->st[i] == DXL_SHARD_UNASSIGNED))
			continue;
		if (s->rcvm && !dxl_rcvm_store_ok(s->rcvm, i))
			continue; /* a store being transferred or not trusted yet */
		struct dxl_logstore *ls = dxl_shard_logstore(s->shards[i]);
		uint64_t keep_from = UINT64_MAX;
		int cr = s->zk ? dxl_cursor_min(s->zk, dxl_shard_id(s->shards[i]), &keep_from,
						NULL) : 0;
		if (cr) {
			/* cursors unknown (ZooKeeper unreachable, or a group's
			 * cursor unreadable): nothing goes by age, size only */
			if (cr == DXL_E_CORRUPT &&
			    dxl_now_ms() - s->cursor_warn_ms[i] >= 60000) {
				s->cursor_warn_ms[i] = dxl_now_ms();
				DXL_WARN("event=cursor_unreadable shard=%u action=keep_by_age msg=\"%s\"",
					 dxl_shard_id(s->shards[i]), dxl_errmsg());
			} else {
				DXL_DEBUG("event=cursors_unknown shard=%u msg=\"%s\"",
					  dxl_shard_id(s->shards[i]), dxl_errmsg());
			}
			keep_from = 0;
		}
		for (uint32_t r = 0; r < dxl_logstore_nrings(ls); r++) {
			uint64_t capped = s->cap_records[i];
			int n = retain_ring(s, ls, r, now_ms, keep_from,
					    dxl_tables_applied_pos(s->tables[i], r),
					    &s->cap_records[i], &s->cap_from_ts[i], &s->cap_to_ts[i]);
			if (n < 0) {
				DXL_WARN("event=retention_failed shard=%u ring=%u msg=\"%s\"",
					 dxl_shard_id(s->shards[i]), r, dxl_errmsg());
				continue;
			}
			if (s->cap_records[i] > capped) {
				s->cap_rings[i] |= r < 32 ? 1u << r : 0;
				s->cap_need_ts[i] = keep_from;
			}
			if (n)
				DXL_DEBUG("event=retained shard=%u ring=%u records=%d",
					  dxl_shard_id(s->shards[i]), r, n);
			total += n;
		}
		cap_warn(s, i);
	}
	return total;
}

/* ---- the backups' tables: applying the log ------------------------------------ */

/* live_writers -- s->live_mask[i], the writer slots of shard i held by live
 * sessions, read from ZooKeeper at most every 50 ms; false while it was
 * never read */
static bool live_writers(struct dxl_replica_server *s, uint32_t i, uint64_t now)
{
	if (!s->live_ms[i] || now - s->live_ms[i] >= 50) {
		uint64_t mask = 0;
		uint32_t shard = dxl_shard_id(s->shards[i]);
		if (dxl_writer_slots_live(s->zk, shard, &mask)) {
			DXL_DEBUG("event=writer_slots_unknown shard=%u msg=\"%s\"", shard,
				  dxl_errmsg());
			return s->live_ms[i] != 0;
		}
		s->live_mask[i] = mask;
		s->live_ms[i] = now;
	}
	return true;
}

/*
 * apply_backups -- for every shard with tables this node is a backup of
 * (a member, not the primary), apply what became decided in its log to its
 * store (tables.c: dxl_tables_apply); for every other shard, stop (the
 * primary's store is written by its coordinators; a shard catching up is
 * being rewritten by copies). Bounded work per call.
 */
static void apply_backups(struct dxl_replica_server *s)
{
	uint64_t now = dxl_now_ms();
	for (uint32_t i = 0; i < s->nshards; i++) {
		if (!s->tables[i] || s->gated[i])
			continue;
		uint32_t shard = dxl_shard_id(s->shards[i]);
		const struct dxl_cluster_shard *sh = dxl_cluster_config_shard(&s->conf, shard);
		bool backup = s->st[i] == DXL_SHARD_MEMBER && sh &&
			      sh->primary != s->cfg.node_id;
		if (s->rcvm && !dxl_rcvm_store_ok(s->rcvm, i))
			continue; /* being transferred, or not trusted yet */
		if (s->st[i] == DXL_SHARD_MEMBER) /* tombstones (issue 20) */
			dxl_tables_reclaim(s->tables[i], dxl_shard_logstore(s->shards[i]));
		if (!backup) {
			/* a shard catching up applies in its passes (catchup.c) */
			if (s->st[i] == DXL_SHARD_MEMBER)
				dxl_tables_apply_stop(s->tables[i]);
			s->live_ms[i] = 0;
			continue;
		}
		/* which writers are alive: their rings bound the resolved
		 * timestamp */
		if (!live_writers(s, i, now))
			continue; /* never known: nothing is resolved */
		dxl_tables_apply(s->tables[i], dxl_shard_logstore(s->shards[i]),
				 s->live_mask[i], 4096);
	}
	/* what was in doubt when a promotion gate opened and is decided now */
	if (s->svc)
		dxl_table_svc_settle(s->svc);
}

/*
 * gate_step -- a shard this node was promoted to primary of opens its tables
 * once (1) every live writer's ring has a watermark at or past the
 * promotion (gate_ts): every record below it is decided, and a writer that
 * still holds one is a coordinator that must decide it first; a writer that
 * does not get there within two session timeouts is treated as gone; (2)
 * everything decided in the local log is applied (every ring up to its own
 * watermark, abort markers honoured); (3) the records still undecided hold
 * their keys' locks for their transactions (dxl_tables_recover_locks).
 * Then the table RPCs serve the shard and its tables are published.
 */
static void gate_step(struct dxl_replica_server *s)
{
	uint64_t now = dxl_now_ms();
	for (uint32_t i = 0; i < s->nshards; i++) {
		if (!s->gated[i])
			continue;
		uint32_t shard = dxl_shard_id(s->shards[i]);
		if (s->rcvm && !dxl_rcvm_store_ok(s->rcvm, i))
			continue; /* a store missing records (catchup.c): never served */
		const struct dxl_logstore *ls = dxl_shard_logstore(s->shards[i]);
		if (!live_writers(s, i, now))
			continue; /* retried next round */
		uint64_t mask = s->live_mask[i];
		uint64_t limit = 2ull * dxl_zk_session_timeout_ms(s->zk);
		bool late = now - s->gate_since_ms[i] >= limit;
		uint32_t waiting = 0;
		for (uint32_t r = 0; r < dxl_logstore_nrings(ls) && r < 64; r++)
			if (((mask >> r) & 1) && dxl_logstore_watermark(ls, r) < s->gate_ts[i])
				waiting++;
		if (waiting && !late)
			continue;
		int ret;
		uint64_t applied0 = 0;
		struct dxl_tables_apply_stats st;
		dxl_tables_apply_stats(s->tables[i], &st);
		applied0 = st.applied;
		do
			ret = dxl_tables_apply(s->tables[i], ls, 0, 1u << 20);
		while (ret >= (int)(1u << 20));
		if (ret < 0) {
			DXL_WARN("event=gate_apply_failed shard=%u msg=\"%s\"", shard, dxl_errmsg());
			continue;
		}
		uint32_t nlocks = 0;
		/* words of an earlier primaryship (paused, not restarted) */
		dxl_tables_clear_locks(s->tables[i]);
		int ndoubt = dxl_tables_recover_locks(s->tables[i], ls, &nlocks);
		if (ndoubt < 0) {
			DXL_WARN("event=gate_recover_failed shard=%u msg=\"%s\"", shard, dxl_errmsg());
			continue;
		}
		dxl_tables_apply_stats(s->tables[i], &st);
		dxl_tables_apply_stop(s->tables[i]);
		s->gated[i] = false;
		if (s->svc)
			dxl_table_svc_set_gated(s->svc, shard, false);
		s->published = false; /* the tables appear in nodes/<id> */
		DXL_INFO("event=gate_opened shard=%u epoch=%" PRIu64 " wait_ms=%" PRIu64
			 " applied=%" PRIu64 " in_doubt=%d locks=%u writers_late=%u",
			 shard, s->cfg_epoch, now - s->gate_since_ms[i], st.applied - applied0,
			 ndoubt, nlocks, waiting);
	}
}

/* ---- lifecycle ---------------------------------------------------------------- */

/*
 * shard_data_id -- the data identity of this node's copy of shard index i
 * (docs/replica.md "Data identity"): the random creation ids of its log
 * region and, with tables, of its store, mixed. Both are chosen when the
 * file is created, so a store created anew (an empty or recreated data
 * directory, a deleted file) has another identity; never 0 (= unknown).
 * A copy that receives the shard's state from another node (catch-up, and
 * the state transfer of recovery/) keeps its identity: the CM records it
 * when it adds the node again.
 */
static uint64_t shard_data_id(const struct dxl_replica_server *s, uint32_t i)
{
	uint64_t id = dxl_region_id(dxl_shard_region(s->shards[i]))->creation_id;
	if (s->tables[i]) {
		uint64_t t = dxl_region_id(dxl_store_region(dxl_tables_store(s->tables[i])))
				     ->creation_id;
		id ^= t << 1 | t >> 63;
	}
	return id ? id : 1;
}

/* dir_state -- 0: absent, 1: an empty directory, 2: anything else */
static int dir_state(const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return errno == ENOENT ? 0 : 2;
	if (!S_ISDIR(st.st_mode))
		return 2;
	DIR *d = opendir(path);
	if (!d)
		return 2;
	struct dirent *e;
	int state = 1;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			state = 2;
	closedir(d);
	return state;
}

/* undo_fresh_dir -- a start refused after this process initialised an
 * absent or empty data directory: remove what it created there, so the
 * refusal leaves nothing behind (the directory itself only if it did not
 * exist) */
static void undo_fresh_dir(const char *path, int before)
{
	DIR *d = opendir(path);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char f[1024];
		if (snprintf(f, sizeof(f), "%s/%s", path, e->d_name) < (int)sizeof(f))
			unlink(f);
	}
	closedir(d);
	if (before == 0)
		rmdir(path);
}

/* the names in an existing data directory before a start (issue 21.4) */
struct dir_names {
	char **v;
	size_t n;
};

static void dir_names_read(const char *path, struct dir_names *dn)
{
	memset(dn, 0, sizeof(*dn));
	DIR *d = opendir(path);
	if (!d)
		return;
	struct dirent *e;
	size_t cap = 0;
	while ((e = readdir(d))) {
		if (dn->n == cap) {
			size_t nc = cap ? cap * 2 : 32;
			char **nv = realloc(dn->v, nc * sizeof(*nv));
			if (!nv)
				break;
			dn->v = nv;
			cap = nc;
		}
		if (!(dn->v[dn->n] = strdup(e->d_name)))
			break;
		dn->n++;
	}
	closedir(d);
}

static void dir_names_free(struct dir_names *dn)
{
	for (size_t i = 0; i < dn->n; i++)
		free(dn->v[i]);
	free(dn->v);
	memset(dn, 0, sizeof(*dn));
}

/* undo_new_files -- a start that failed on an existing data directory it
 * had locked: remove the files it created there (e.g. store-<s>.dat for
 * new engine.tables, shard-<s>.log for a new shard), so the refusal changes
 * nothing and the normal start still works (docs/replica.md) */
static void undo_new_files(const char *path, const struct dir_names *before)
{
	DIR *d = opendir(path);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		bool old = false;
		for (size_t i = 0; !old && i < before->n; i++)
			old = !strcmp(before->v[i], e->d_name);
		if (old || e->d_type == DT_DIR)
			continue;
		char f[1024];
		if (snprintf(f, sizeof(f), "%s/%s", path, e->d_name) < (int)sizeof(f) &&
		    unlink(f) == 0)
			DXL_WARN("event=start_undone removed=%s", f);
	}
	closedir(d);
}

int dxl_replica_server_new(const struct dxl_replica_cfg *cfg,
			   struct dxl_replica_server **out)
{
	if (!cfg || !out)
		return dxl_err_set(DXL_E_INVAL, "dxl_replica_server_new: NULL");
	if (!cfg->node_id)
		return dxl_err_set(DXL_E_INVAL, "replica.node_id is required (1..%u)", UINT32_MAX);
	if (!cfg->data_dir[0])
		return dxl_err_set(DXL_E_INVAL, "replica.data_dir is required");
	if (!cfg->zk.connect[0])
		return dxl_err_set(DXL_E_INVAL, "zk.connect is required");
	if (!cfg->nshards || cfg->nshards > DXL_REPLICA_MAX_SHARDS)
		return dxl_err_set(DXL_E_INVAL, "%u shards", cfg->nshards);
	struct dxl_replica_server *s = calloc(1, sizeof(*s));
	if (!s)
		return dxl_err_set(DXL_E_NOMEM, "replica server");
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->reg_mu, NULL);
	s->cfg = *cfg;
	s->src_desc = calloc(1, sizeof(*s->src_desc));
	if (!s->src_desc) {
		pthread_mutex_destroy(&s->mu);
		pthread_mutex_destroy(&s->reg_mu);
		free(s);
		return dxl_err_set(DXL_E_NOMEM, "replica server");
	}
	s->cfg.fabric.node_id = cfg->node_id;
	const char *cluster = cfg->zk.cluster[0] ? cfg->zk.cluster : "default";
	snprintf(s->cfg.zk.cluster, sizeof(s->cfg.zk.cluster), "%s", cluster);
	/* 1. the data directory: lock, identity, durability (nothing else
	 *    happens before we own it) */
	int before = dir_state(cfg->data_dir);
	struct dir_names names;
	dir_names_read(cfg->data_dir, &names);
	int ret = dxl_datadir_open(cfg->data_dir, cluster, cfg->node_id,
				   cfg->durability, cfg->create, &s->dd);
	if (ret)
		goto fail;
	/* 2. the fabric and ctx 0 */
	if ((ret = dxl_fabric_new(&s->cfg.fabric, &s->f)) ||
	    (ret = dxl_ctx_new(s->f, 0, &s->ctx)) ||
	    (ret = dxl_ctx_new(s->f, 1, &s->pull_ctx)))
		goto fail;
	if (cfg->ntables && cfg->lock_mode == DXL_LOCKS_NIC &&
	    (ret = dxl_lock_agent_new(s->f, DXL_REPLICA_LOCK_CTX, &s->lock_agent)))
		goto fail;
	/* 3. the shards (registered: ready to serve once published) */
	for (uint32_t i = 0; i < cfg->nshards; i++) {
		struct dxl_shard_cfg sc = {
			.node_id = cfg->node_id,
			.shard = cfg->shards[i],
			.nrings = cfg->writer_slots,
			.ring_size = cfg->ring_size,
			.durability = cfg->durability,
			.create = cfg->create,
		};
		snprintf(sc.cluster, sizeof(sc.cluster), "%s", cluster);
		if ((ret = dxl_shard_open(cfg->data_dir, &sc, NULL, &s->shards[i])))
			goto fail;
		s->nshards = i + 1;
		/* its tables: DATADIR/store-<s>.dat and the indexes */
		struct dxl_tables_cfg tc = {
			.dir = cfg->data_dir,
			.cluster = cluster,
			.node_id = cfg->node_id,
			.shard = cfg->shards[i],
			.durability = cfg->durability,
			.create = cfg->create,
			.lock_mode = cfg->lock_mode,
			.lock_agent = s->lock_agent,
			.tables = cfg->tables,
			.ntables = cfg->ntables,
		};
		if ((ret = dxl_tables_open(&tc, &s->tables[i])))
			goto fail;
		if (s->tables[i])
			dxl_tables_set_log(s->tables[i], dxl_shard_logstore(s->shards[i]));
		s->data_id[i] = shard_data_id(s, i);
		if (!i)
			read_boot_id(s->boot_id, sizeof(s->boot_id));
		/* no configuration yet: nothing is assigned (issue 16.8) */
		s->st[i] = DXL_SHARD_UNASSIGNED;
		s->marked[i] = member_mark_read(s, i);
		s->vouch[i] = s->marked[i];
		DXL_INFO("event=shard_data_id shard=%u data_id=0x%" PRIx64 " member_mark=%d",
			 cfg->shards[i], s->data_id[i], s->marked[i]);
	}
	/* catch-up and recovery state; a store marked incomplete is rebuilt
	 * from its checkpoint here if its log covers it */
	{
		struct dxl_rcvm_cfg rc = {
			.dir = cfg->data_dir,
			.cluster = cluster,
			.node_id = cfg->node_id,
			.durability = cfg->durability,
			.f = s->f,
			.xfer_ctx = 4, /* 0 served, 1 catch-up, 2 table RPCs, 3 the NIC lock agent */
			.nshards = s->nshards,
			.shards = s->shards,
			.tables = s->tables,
			.checkpoint_ms = cfg->checkpoint_ms,
			.need_ttl_ms = cfg->need_ttl_ms,
		};
		if ((ret = dxl_rcvm_new(&rc, &s->rcvm)))
			goto fail;
	}
	/* the table RPC service (its own thread and ctx) */
	if (cfg->ntables &&
	    (ret = dxl_table_svc_start(s->f, cfg->node_id, s->tables, s->nshards,
				       &s->svc)))
		goto fail;
	if ((ret = start_serving(s)))
		goto fail;
	/* 4. ZooKeeper: session, then nodes/<id> */
	if ((ret = dxl_zk_new(&s->cfg.zk, &s->zk)))
		goto fail;
	if (s->svc)
		dxl_table_svc_set_lease(s->svc, lease_until, s);
	/* the configuration before the first publication (states it says) */
	sync_config(s);
	apply_config(s);
	if ((ret = publish(s, true)))
		goto fail;
	/* 5. the lease guard */
	if (pthread_create(&s->guard, NULL, guard_main, s)) {
		ret = dxl_err_set(DXL_E_NOMEM, "lease guard thread");
		goto fail;
	}
	s->guard_started = true;
	/* 6. follow the configuration; stand for the CM */
	if ((ret = dxl_cluster_config_watch_new(s->zk, on_config, s, &s->cw)))
		goto fail;
	if (cfg->cm && (ret = dxl_member_watch_new(s->zk, on_members, s, &s->mw)))
		goto fail;
	/* (the CM candidacy starts in the service loop) */
	s->last_retain_ms = dxl_now_ms();
	dir_names_free(&names);
	*out = s;
	return 0;
fail:
	dxl_err_prefix("replica node %u", cfg->node_id);
	{
		/* keep the message across the cleanup */
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
		bool ours = s->dd != NULL && before < 2;
		bool locked = s->dd != NULL; /* nobody else changed the directory */
		dxl_replica_server_delete(&s);
		if (ours)
			undo_fresh_dir(cfg->data_dir, before);
		else if (locked && names.n)
			undo_new_files(cfg->data_dir, &names);
		dir_names_free(&names);
		dxl_err_set(ret, "%s", msg);
	}
	return ret;
}

int dxl_replica_server_run(struct dxl_replica_server *s,
			   volatile sig_atomic_t *stop)
{
	uint64_t last_epoch = dxl_zk_session_epoch(s->zk);
	while (!__atomic_load_n(stop, __ATOMIC_RELAXED)) { /* (also set by other threads: tests) */
		bool lease = dxl_zk_lease_valid(s->zk);
		/* the lease rule first: no remote writes without a lease (the
		 * guard thread applies it too, while this loop waits) */
		if (!lease)
			DXL_TESTPOINT("replica.lease_rule", s);
		pthread_mutex_lock(&s->reg_mu);
		if (!lease)
			lease_lapsed(s);
		else
			s->lease_lost_ms = 0;
		pthread_mutex_unlock(&s->reg_mu);
		enum dxl_zk_state st = dxl_zk_state(s->zk);
		if (st == DXL_ZK_EXPIRED) {
			DXL_WARN("event=session_expired node=%u action=reopen",
				 s->cfg.node_id);
			int ret = dxl_zk_reopen(s->zk);
			if (ret == DXL_E_STATE)
				return ret;
			if (ret)
				DXL_WARN("event=reopen_failed node=%u msg=\"%s\"",
					 s->cfg.node_id, dxl_errmsg());
			continue;
		}
		if (lease && dxl_zk_session_epoch(s->zk) != last_epoch) {
			last_epoch = dxl_zk_session_epoch(s->zk);
			s->published = false;
			/* the configuration may have moved on meanwhile: read
			 * and apply it before publishing anything (issue 16.8) */
			s->cfg_synced = false;
			/* the old session's candidacy ended with it */
			dxl_election_delete(&s->el);
			DXL_INFO("event=new_session node=%u session_epoch=%" PRIu64,
				 s->cfg.node_id, last_epoch);
			DXL_TESTPOINT("replica.session.new", s);
		}
		if (lease && !s->serving) {
			pthread_mutex_lock(&s->reg_mu);
			int ret = dxl_zk_lease_valid(s->zk) ? start_serving(s) : 0;
			pthread_mutex_unlock(&s->reg_mu);
			if (ret)
				DXL_WARN("event=register_failed node=%u msg=\"%s\"",
					 s->cfg.node_id, dxl_errmsg());
		}
		if (lease && !s->cfg_synced)
			sync_config(s);
		if (lease)
			apply_config(s);
		/* publish what was applied, then the join pulls (a long copy
		 * does not hold back the other shards' publication) */
		if (lease && s->serving && !s->published && s->cfg_synced) {
			int ret = publish(s, true);
			if (ret == DXL_E_EXIST) {
				pthread_mutex_lock(&s->reg_mu);
				stop_serving(s, "node id taken by another session");
				pthread_mutex_unlock(&s->reg_mu);
				return ret;
			}
			if (ret)
				DXL_WARN("event=publish_failed node=%u msg=\"%s\"",
					 s->cfg.node_id, dxl_errmsg());
		}
		if (lease && s->serving && s->published)
			join_pulls(s);
		/* a candidacy that ended while the session lives (its znode was
		 * deleted from outside): stand again (issue 16.7) */
		if (s->el && dxl_election_seq(s->el) < 0 &&
		    dxl_zk_session_epoch(s->zk) == last_epoch) {
			DXL_WARN("event=cm_candidacy_lost node=%u action=rejoin", s->cfg.node_id);
			dxl_election_delete(&s->el);
		}
		if (lease && s->cfg.cm && !s->el && dxl_now_ms() - s->last_cand_ms >= 1000) {
			char data[64];
			s->last_cand_ms = dxl_now_ms();
			snprintf(data, sizeof(data), "{\"node_id\":%u}", s->cfg.node_id);
			if (dxl_election_new(s->zk, DXL_ELECTION_CM, data, on_election, s, &s->el))
				DXL_WARN("event=cm_candidacy_failed node=%u msg=\"%s\"",
					 s->cfg.node_id, dxl_errmsg());
		}
		if (lease && s->serving && s->published) {
			gate_step(s);
			apply_backups(s);
		}
		uint64_t now = dxl_now_ms();
		if (lease && s->serving && s->published &&
		    now - s->last_pull_ms >= s->cfg.pull_ms) {
			s->last_pull_ms = now;
			catch_up(s);
		}
		atomic_store(&s->is_cm, lease && s->el && dxl_election_is_leader(s->el));
		if (lease && s->el && dxl_election_is_leader(s->el) &&
		    (now - s->last_cm_ms >= s->cfg.cm_check_ms ||
		     atomic_exchange(&s->members_changed, false))) {
			s->last_cm_ms = now;
			int r = dxl_cm_reconcile(s->zk, &s->cfg.cm_params, NULL);
			if (r < 0)
				DXL_WARN("event=cm_round_failed node=%u msg=\"%s\"",
					 s->cfg.node_id, dxl_errmsg());
		}
		if (now - s->last_retain_ms >= s->cfg.retention_check_ms) {
			s->last_retain_ms = now;
			dxl_replica_server_retain(s, dxl_wall_ms());
			/* statistics for 'dxl cluster status': at most every 2 s */
			if (now - s->last_stats_pub_ms >= 2000 && refresh_stats(s)) {
				s->last_stats_pub_ms = now;
				s->published = false;
			}
		}
		usleep(s->cfg.service_ms * 1000);
	}
	return 0;
}

bool dxl_replica_server_serving(const struct dxl_replica_server *s)
{
	return s->serving;
}

uint64_t dxl_replica_server_reg_epoch(const struct dxl_replica_server *s)
{
	return s->reg_epoch;
}

uint64_t dxl_replica_server_cfg_epoch(const struct dxl_replica_server *s)
{
	return s->cfg_epoch;
}

int dxl_replica_server_shard_state(const struct dxl_replica_server *s,
				   uint32_t shard, enum dxl_shard_state *st)
{
	for (uint32_t i = 0; i < s->nshards; i++)
		if (dxl_shard_id(s->shards[i]) == shard) {
			*st = s->st[i];
			return 0;
		}
	return dxl_err_set(DXL_E_NOENT, "shard %u is not hosted here", shard);
}

bool dxl_replica_server_is_cm(const struct dxl_replica_server *s)
{
	return atomic_load(&((struct dxl_replica_server *)s)->is_cm);
}

const char *dxl_replica_server_addr(const struct dxl_replica_server *s)
{
	return dxl_fabric_addr(s->f);
}

struct dxl_zk *dxl_replica_server_zk(const struct dxl_replica_server *s)
{
	return s->zk;
}

struct dxl_shard *dxl_replica_server_shard(const struct dxl_replica_server *s,
					   uint32_t shard)
{
	for (uint32_t i = 0; i < s->nshards; i++)
		if (dxl_shard_id(s->shards[i]) == shard)
			return s->shards[i];
	return NULL;
}

void dxl_replica_server_delete(struct dxl_replica_server **sp)
{
	if (!sp || !*sp)
		return;
	struct dxl_replica_server *s = *sp;
	bool was_published = s->published;
	if (s->guard_started) {
		atomic_store(&s->guard_stop, true);
		pthread_join(s->guard, NULL);
	}
	/* 1. stop remote accesses (in-flight one-sided requests finish or
	 *    fail with a remote access error) and the table RPCs */
	stop_serving(s, "shutdown");
	dxl_table_svc_stop(&s->svc);
	/* 2. a last retention pass; heads are persisted as they move */
	if (s->nshards && s->f)
		dxl_replica_server_retain(s, dxl_wall_ms());
	/* 3. leave ZooKeeper: the CM role and nodes/<id> go at once */
	dxl_member_watch_delete(&s->mw);
	dxl_cluster_config_watch_delete(&s->cw);
	dxl_election_delete(&s->el);
	if (s->zk && was_published)
		dxl_member_deregister(s->zk, s->cfg.node_id);
	dxl_zk_delete(&s->zk);
	/* 4. close the regions, the fabric, unlock the data directory */
	dxl_rcvm_delete(&s->rcvm);
	for (uint32_t i = 0; i < s->nshards; i++) {
		dxl_shard_close(&s->shards[i]);
		dxl_tables_close(&s->tables[i]);
	}
	dxl_lock_agent_delete(&s->lock_agent);
	dxl_ctx_delete(&s->pull_ctx);
	dxl_ctx_delete(&s->ctx);
	dxl_fabric_delete(&s->f);
	dxl_datadir_close(&s->dd);
	dxl_cluster_config_clear(&s->pend);
	dxl_cluster_config_clear(&s->conf);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->reg_mu);
	free(s->src_desc);
	free(s);
	*sp = NULL;
}
