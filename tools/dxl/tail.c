/* tail.c -- dxl tail: change capture from one shard or all of them, merged
 * in commit-timestamp order, with consumer-group cursors and failover
 * (docs/cli.md) */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/log.h"
#include "dxl/membership.h"
#include "dxl/replica.h"

#include "cli.h"

/*
 * How it works (docs/cli.md, "dxl tail"):
 *
 * One tailer per shard (dxl_tailer_*, one-sided READs of one replica's
 * rings), each on its own fabric ctx. A tailer delivers a shard's records in
 * (commit_ts, writer, seq) order, exactly those below the shard's resolved
 * timestamp; they go into the shard's queue. The output is the k-way merge
 * of the queues by (commit_ts, shard, writer, seq): the smallest queued
 * record is printed once no other shard can still deliver anything before
 * it, i.e. for every shard with an empty queue, the record is below that
 * shard's bound (see bound()).
 *
 * A shard nobody writes to (no writer slot held in ZooKeeper) would hold
 * the merge back forever at its last watermark. A writer must lease a slot
 * before it appends, and then appends at its clock's time (or above the
 * shard's watermarks), so once a read of writers/<S> at wall time W found
 * no slot held and a later poll caught up with every ring of S closed (the
 * tailer says no ring held its resolved timestamp: a ring whose writer
 * crashed may still get records confirmed below W by the next holder of its
 * slot), nothing below W can still come from S: the bound of such a shard
 * is W - IDLE_MARGIN_MS (the margin covers clock skew between hosts and a
 * ZooKeeper read served a little late).
 *
 * Consumer group cursors (cursors/<group>/<shard>) hold "the next commit
 * timestamp to read": everything of the shard below it was printed and
 * flushed. The candidate is computed right after a successful fflush of
 * stdout, and written with a CAS on the znode version at most every
 * COMMIT_EVERY_MS and at exit.
 *
 * Failover: a poll that fails (the replica died, its rkeys were
 * re-registered, ...) or a configuration that no longer lists the tailed
 * replica for the shard closes that shard's tailer; it is reopened on a
 * live replica of the shard (configuration re-read each time, the failed
 * one tried last) from the resume point, with backoff, for at most
 * UNAVAIL_MAX_MS. The resume point is max(cursor, last delivered
 * commit_ts) and records up to the last delivered (commit_ts, writer, seq)
 * are dropped: the same record has the same key on every replica, so
 * nothing is lost or repeated, and two records of one timestamp from
 * different writers cannot be skipped (as resuming at last + 1 would).
 */

#define COMMIT_EVERY_MS 200
#define LIVE_EVERY_MS 200    /* writer slots (live rings) refresh */
#define CONFIG_EVERY_MS 1000 /* configuration check */
#define UNAVAIL_MAX_MS 30000 /* a shard with no tailable replica this long: exit 1 */
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000
#define IDLE_MARGIN_MS 500
#define IDLE_SLEEP_US 20000
#define QUEUE_MAX_BYTES (64u << 20) /* per shard: stop polling it beyond */

/* ---- usage ------------------------------------------------------------------ */

static void tail_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl tail (--shard S | --all) [--dir DIR | --zk CONNECT --cluster NAME]\n"
"                [--from earliest|latest|TS] [--group G] [--format text|json]\n"
"                [--follow] [--replica ID]\n"
"\n"
"Print the records of shard S, or of every shard of the cluster\n"
"configuration (--all), in commit-timestamp order. Each shard is read\n"
"one-sidedly from one of its replicas; only resolved records are printed\n"
"(below the watermark of every writer that is live or did not close its\n"
"ring: a killed writer's ring holds its shard until its slot is taken\n"
"again). With --all the shards are merged:\n"
"a record is printed once no shard can still deliver an earlier one\n"
"(order: commit_ts, then shard, writer, sequence). Without --follow it exits\n"
"once it has caught up.\n"
"\n"
"text:  <shard>\\t<commit_ts>\\t<writer>\\t<txn_id>\\t<payload>\n"
"json:  {\"shard\":S,\"commit_ts\":T,\"writer\":W,\"txn_id\":X,\"payload\":\"<base64>\"}\n"
"\n"
"  --shard S          this shard\n"
"  --all              every shard of the configuration (as read at start;\n"
"                     at most 64)\n"
"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n"
"  --zk CONNECT       ZooKeeper connect string (instead of DIR/cluster.json)\n"
"  --cluster NAME     cluster name with --zk [default]\n"
"  --from F           where to start: earliest (everything retained), latest\n"
"                     (records committed from now on), or a commit timestamp\n"
"                     TS (records with commit_ts >= TS) [earliest, or the\n"
"                     group's cursor]\n"
"  --group G          consumer group G ([A-Za-z0-9_.-]): start from its\n"
"                     committed cursor per shard (where absent: from --from's\n"
"                     default, earliest), and commit the cursor (the next\n"
"                     commit timestamp to read) after the output is flushed,\n"
"                     at most every %d ms and at exit. --from overrides the\n"
"                     stored cursors (a warning says so). Delivery is\n"
"                     at-least-once: records printed after the last commit\n"
"                     are printed again by the next run. A cursor older than\n"
"                     the retained log is an error (exit 1), never skipped.\n"
"                     Two consumers of one group on one shard are reported\n"
"                     (each prints every record; the later cursor is kept).\n"
"  --format F         text | json [text]\n"
"  --follow           keep printing new records until SIGINT/SIGTERM\n"
"  --replica ID       start on this replica [the first registered one of the\n"
"                     shard, primary first]; only a replica that is a member\n"
"                     of the shard with the data identity the configuration\n"
"                     recorded is read (a joining or catching-up copy may\n"
"                     lack records)\n"
"  -h, --help         this text\n"
"\n"
"FAILOVER\n"
"    When the replica being read fails (it dies, or re-registers its memory\n"
"    after a configuration change) or leaves the shard's replica set, the\n"
"    shard goes on where it was from another live member of the current\n"
"    configuration, without loss or repetition (a line on stderr says so).\n"
"    After %d s without any usable replica: exit 1.\n"
"\n" EXIT_CODES_HELP,
		COMMIT_EVERY_MS, UNAVAIL_MAX_MS / 1000);
}

/* ---- state ------------------------------------------------------------------ */

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

/* a delivered record waiting for its turn in the merge */
struct qrec {
	struct qrec *next;
	uint64_t ts, txn, seq;
	uint32_t writer, len;
	uint8_t payload[];
};

enum origin { FROM_DEFAULT, FROM_OPTION, FROM_GROUP };

struct stail {
	uint32_t shard;
	uint32_t idx;       /* its fabric ctx index */
	uint32_t replica;   /* node being tailed; 0 while down */
	struct dxl_ctx *ctx;
	struct dxl_tailer *tl;
	enum origin origin; /* where `start` came from (for messages) */
	uint64_t start;     /* the first tailer's from_ts */
	/* delivered into the queue: every record below cur, and every record
	 * up to the key (last_ts, last_writer, last_seq) */
	uint64_t cur;
	bool have_last;
	uint64_t last_ts, last_seq;
	uint32_t last_writer;
	bool caught_up;      /* the last poll left nothing below resolved */
	unsigned holding;    /* rings that held resolved at the last poll */
	uint64_t live_mask;  /* writer slots held, as last read */
	bool live_known;
	uint64_t live_at;    /* dxl_now_ms of the last read; 0 = read now */
	uint64_t idle_cand;  /* W - margin from a read finding no writer */
	uint64_t idle_bound; /* nothing below it can still come */
	struct qrec *qh, *qt;
	size_t qbytes;
	bool oom;
	/* consumer group */
	int32_t version;    /* of cursors/<group>/<shard>, as last known */
	uint64_t committed; /* what this run wrote (or resumed from) */
	uint64_t flushed;   /* everything below it is printed and flushed */
	unsigned conflicts;
	/* unavailability */
	uint64_t down_since; /* dxl_now_ms when it went down; 0 = up */
	uint64_t next_try;
	uint32_t backoff_ms;
	uint32_t failed;     /* the replica that failed (tried last) */
	char why0[512];      /* why it went down */
	char why[512];       /* why the last attempt to reopen failed */
};

struct tail {
	struct conn cn;
	struct dxl_zk *zk;
	struct dxl_fabric *f;
	const char *group;
	bool json;
	uint32_t prefer; /* --replica */
	uint32_t n;
	struct stail *s;
	uint64_t cfg_epoch, cfg_at;
	struct dxl_replica_desc desc; /* scratch (large) */
};

/* ---- output ------------------------------------------------------------------ */

static void b64(const uint8_t *p, size_t n)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < n)
			v |= p[i + 2];
		putchar(tab[(v >> 18) & 63]);
		putchar(tab[(v >> 12) & 63]);
		putchar(i + 1 < n ? tab[(v >> 6) & 63] : '=');
		putchar(i + 2 < n ? tab[v & 63] : '=');
	}
}

static void print_rec(const struct tail *t, uint32_t shard, const struct qrec *q)
{
	if (t->json) {
		printf("{\"shard\":%u,\"commit_ts\":%llu,\"writer\":%u,\"txn_id\":%llu,\"payload\":\"",
		       shard, (unsigned long long)q->ts, q->writer, (unsigned long long)q->txn);
		b64(q->payload, q->len);
		printf("\"}\n");
	} else {
		printf("%u\t%llu\t%u\t%llu\t", shard, (unsigned long long)q->ts, q->writer,
		       (unsigned long long)q->txn);
		fwrite(q->payload, 1, q->len, stdout);
		putchar('\n');
	}
}

/* ---- one shard's tailer -------------------------------------------------------- */

/* key order of a shard's records: (commit_ts, writer, seq) */
static int key_cmp(uint64_t ts, uint32_t w, uint64_t seq, uint64_t ts2, uint32_t w2,
		   uint64_t seq2)
{
	if (ts != ts2)
		return ts < ts2 ? -1 : 1;
	if (w != w2)
		return w < w2 ? -1 : 1;
	return seq < seq2 ? -1 : seq > seq2;
}

/* the tailer's callback: queue a copy (the record points into the mirror) */
static int on_rec(uint32_t ring, const struct dxl_rec *rec, void *arg)
{
	(void)ring;
	struct stail *st = arg;
	if (rec->type != DXL_REC_DATA)
		return 0;
	/* after a failover the new tailer starts at or before the last record
	 * delivered: drop what was delivered already */
	if (st->have_last && key_cmp(rec->commit_ts, rec->writer, rec->seq, st->last_ts,
				     st->last_writer, st->last_seq) <= 0)
		return 0;
	struct qrec *q = malloc(sizeof(*q) + rec->payload_len);
	if (!q) {
		st->oom = true;
		return 1; /* stop the poll; fatal */
	}
	q->next = NULL;
	q->ts = rec->commit_ts;
	q->txn = rec->txn_id;
	q->seq = rec->seq;
	q->writer = rec->writer;
	q->len = rec->payload_len;
	memcpy(q->payload, rec->payload, rec->payload_len);
	if (st->qt)
		st->qt->next = q;
	else
		st->qh = q;
	st->qt = q;
	st->qbytes += sizeof(*q) + q->len;
	st->have_last = true;
	st->last_ts = q->ts;
	st->last_writer = q->writer;
	st->last_seq = q->seq;
	return 0;
}

/* bound -- no record of st that is not queued yet has a commit_ts below it */
static uint64_t bound(const struct stail *st)
{
	uint64_t b = st->cur;
	if (st->have_last)
		b = DXL_MAX(b, st->last_ts);
	return DXL_MAX(b, st->idle_bound);
}

/* resume_ts -- where a new tailer of st starts: everything below it was
 * delivered (records at it may have been too: on_rec drops them) */
static uint64_t resume_ts(const struct stail *st)
{
	return st->have_last ? DXL_MAX(st->cur, st->last_ts) : st->cur;
}

/* commit_point -- everything of st below it is out of the queue (printed) */
static uint64_t commit_point(const struct stail *st)
{
	uint64_t c = resume_ts(st);
	if (st->qh)
		c = DXL_MIN(c, st->qh->ts);
	return c;
}

/* poll_shard -- refresh the live writer slots when due, poll once.
 * Returns the records delivered or the poll's error. */
static int poll_shard(struct tail *t, struct stail *st)
{
	uint64_t now = dxl_now_ms();
	if (!st->live_at || now - st->live_at >= LIVE_EVERY_MS) {
		/* the wall time before the read: a writer that leases a slot
		 * after the read appends above it */
		uint64_t w = dxl_wall_ms();
		uint64_t mask;
		if (dxl_writer_slots_live(t->zk, st->shard, &mask) == 0) {
			dxl_tailer_set_live(st->tl, mask);
			st->live_mask = mask;
			st->live_known = true;
			st->idle_cand = mask || w <= IDLE_MARGIN_MS
						? 0
						: DXL_HLC_MAKE(w - IDLE_MARGIN_MS, 0);
		}
		st->live_at = now ? now : 1;
	}
	uint64_t c = 0;
	int n = dxl_tailer_poll(st->tl, on_rec, st, &c);
	if (st->oom)
		return dxl_err_set(DXL_E_NOMEM, "out of memory queueing a record");
	if (n < 0) {
		st->caught_up = false;
		return n;
	}
	st->cur = DXL_MAX(st->cur, c);
	st->caught_up = dxl_tailer_caught_up(st->tl);
	st->holding = dxl_tailer_holding(st->tl);
	if (st->caught_up && st->idle_cand && !st->holding) {
		st->idle_bound = DXL_MAX(st->idle_bound, st->idle_cand);
		st->idle_cand = 0;
	}
	return n;
}

static void detach(struct stail *st)
{
	dxl_tailer_delete(&st->tl);
	dxl_ctx_delete(&st->ctx);
	if (st->replica)
		st->failed = st->replica;
	st->replica = 0;
	st->caught_up = false;
}

/* read_desc -- nodes/<id> decoded; DXL_E_NOENT if not registered */
static int read_desc(struct tail *t, uint32_t id)
{
	return dxl_replica_desc_get(t->zk, id, &t->desc);
}

/* stale_msg -- the DXL_E_STALE error of st's tailer from `from` on replica r */
static void stale_msg(struct tail *t, struct stail *st, uint64_t from, uint32_t r)
{
	uint64_t rec = st->tl ? dxl_tailer_reclaimed_ts(st->tl) : 0;
	char old[96];
	if (rec)
		snprintf(old, sizeof(old), "the first record after commit_ts %llu",
			 (unsigned long long)rec);
	else
		snprintf(old, sizeof(old), "unknown");
	if (!st->have_last && st->origin == FROM_GROUP && from == st->start)
		errf("cursor %llu of group %s for shard %u is older than the retained log "
		     "(oldest retained: %s, on replica %u); records were reclaimed before "
		     "the group read them (--from earliest skips them)",
		     (unsigned long long)from, t->group, st->shard, old, r);
	else if (!st->have_last && st->origin == FROM_OPTION && from == st->start)
		errf("--from %llu: shard %u: the commit timestamp is older than the retained "
		     "log (oldest retained: %s, on replica %u)",
		     (unsigned long long)from, st->shard, old, r);
	else
		errf("shard %u: commit_ts %llu is older than the retained log of replica %u "
		     "(oldest retained: %s): records were reclaimed before they were read (%s)",
		     st->shard, (unsigned long long)from, r, old, dxl_errmsg());
}

/*
 * attach -- open a tailer for st on a replica of its shard in cfg and poll
 * it once. `first`: the start (only --replica if given). Returns 0;
 * DXL_E_STALE (fatal, message printed); DXL_E_NOENT (no replica registered
 * or hosting the shard); another error (every candidate failed). st->why
 * says why.
 */
static int attach(struct tail *t, struct stail *st, const struct dxl_cluster_config *cfg,
		  bool first)
{
	const struct dxl_cluster_shard *cs = dxl_cluster_config_shard(cfg, st->shard);
	if (!cs) {
		snprintf(st->why, sizeof(st->why),
			 "shard %u is not in the configuration (epoch %llu)", st->shard,
			 (unsigned long long)cfg->epoch);
		return DXL_E_NOENT;
	}
	uint32_t ids[MAX_REPLICAS], n = 0;
	ids[n++] = cs->primary;
	for (uint32_t i = 0; i < cs->nbackups && n < MAX_REPLICAS; i++)
		ids[n++] = cs->backups[i];
	/* --replica first; the replica that just failed last */
	for (uint32_t i = 1; t->prefer && i < n; i++)
		if (ids[i] == t->prefer) {
			memmove(ids + 1, ids, i * sizeof(ids[0]));
			ids[0] = t->prefer;
		}
	for (uint32_t i = 0; st->failed && i + 1 < n; i++)
		if (ids[i] == st->failed) {
			memmove(ids + i, ids + i + 1, (n - i - 1) * sizeof(ids[0]));
			ids[n - 1] = st->failed;
			break;
		}
	if (first && t->prefer && n && ids[0] == t->prefer)
		n = 1;
	int ret = DXL_E_NOENT;
	snprintf(st->why, sizeof(st->why), "no replica of shard %u is registered in nodes/",
		 st->shard);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = ids[i];
		int r = read_desc(t, id);
		if (r == DXL_E_NOENT)
			continue; /* down: its nodes/<id> is gone */
		if (r) {
			ret = r;
			snprintf(st->why, sizeof(st->why), "reading nodes/%u: %s", id, dxl_errmsg());
			continue;
		}
		const struct dxl_shard_desc *sd = dxl_replica_desc_shard(&t->desc, st->shard);
		if (!sd) {
			if (ret == DXL_E_NOENT)
				snprintf(st->why, sizeof(st->why),
					 "replica %u does not host shard %u", id, st->shard);
			continue;
		}
		/* only a copy that holds every acknowledged record: one that
		 * says MEMBER, with the data identity the configuration
		 * recorded for it (a joining or catching-up copy, or one on a
		 * new store, lacks records: tailing it would skip them) */
		uint64_t rec = dxl_cluster_shard_data_id(cs, id);
		if (sd->state != DXL_SHARD_MEMBER || (rec && sd->data_id != rec)) {
			ret = DXL_E_UNAVAIL;
			if (sd->state != DXL_SHARD_MEMBER)
				snprintf(st->why, sizeof(st->why),
					 "replica %u is not a member of shard %u yet (%s): it may "
					 "lack records",
					 id, st->shard, dxl_shard_state_name(sd->state));
			else
				snprintf(st->why, sizeof(st->why),
					 "replica %u is on a new store for shard %u (data id "
					 "0x%llx, the configuration records 0x%llx): it may lack "
					 "records",
					 id, st->shard, (unsigned long long)sd->data_id,
					 (unsigned long long)rec);
			continue;
		}
		struct dxl_log_target *tg = calloc(sd->nrings, sizeof(*tg));
		if (!tg)
			return dxl_err_set(DXL_E_NOMEM, "out of memory");
		r = 0;
		for (uint32_t k = 0; !r && k < sd->nrings; k++)
			r = dxl_replica_desc_target(&t->desc, st->shard, k, &tg[k]);
		if (!r && !t->f) {
			struct dxl_fabric_cfg fc;
			dxl_fabric_cfg_init(&fc);
			r = dxl_fabric_cfg_client(&fc, t->desc.provider, t->desc.addr);
			if (!r)
				r = dxl_fabric_new(&fc, &t->f);
		}
		if (!r && !st->ctx)
			r = dxl_ctx_new(t->f, st->idx, &st->ctx);
		uint64_t from = resume_ts(st);
		if (!r) {
			struct dxl_tail_cfg tc = {.from_ts = from};
			r = dxl_tailer_new(st->ctx, &tc, tg, sd->nrings, &st->tl);
		}
		free(tg);
		if (!r) {
			st->replica = id;
			st->live_at = 0; /* the live set before the first poll */
			r = poll_shard(t, st);
			if (r == DXL_E_STALE) {
				stale_msg(t, st, from, id);
				detach(st);
				return DXL_E_STALE;
			}
			if (r == DXL_E_NOMEM)
				return r;
			if (r >= 0)
				return 0;
		}
		ret = r;
		snprintf(st->why, sizeof(st->why), "replica %u (%s): %s: %s", id, t->desc.addr,
			 dxl_errname(r), dxl_errmsg());
		uint32_t keep = st->failed;
		detach(st);
		st->failed = keep;
	}
	return ret;
}

/* went_down -- st's tailer failed (why); reopen it from the main loop */
static void went_down(struct stail *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void went_down(struct stail *st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(st->why0, sizeof(st->why0), fmt, ap);
	va_end(ap);
	detach(st);
	st->down_since = dxl_now_ms();
	st->next_try = st->down_since; /* at once, then with backoff */
	st->backoff_ms = BACKOFF_MIN_MS;
}

/* ---- consumer group ---------------------------------------------------------- */

/* commit -- write st's flushed cursor if it moved: CAS on the version; a
 * concurrent consumer of the group is reported and the later cursor kept */
static int commit(struct tail *t, struct stail *st)
{
	for (int tries = 0; tries < 4; tries++) {
		uint64_t v = st->flushed;
		if (!v || v <= st->committed)
			return 0;
		int32_t nv;
		int ret = dxl_cursor_set(t->zk, t->group, st->shard, v, st->version, &nv);
		if (!ret) {
			st->committed = v;
			st->version = nv;
			return 0;
		}
		if (ret != DXL_E_STALE) {
			errf("warning: committing cursor %llu of group %s for shard %u: %s "
			     "(retrying later)", (unsigned long long)v, t->group, st->shard,
			     dxl_errmsg());
			return ret;
		}
		/* someone else moved (or deleted) it since we read or wrote it */
		uint64_t other = 0;
		int32_t ov = DXL_ZK_VERSION_NONE;
		ret = dxl_cursor_get(t->zk, t->group, st->shard, &other, &ov);
		if (ret && ret != DXL_E_NOENT) {
			errf("warning: re-reading cursor of group %s for shard %u: %s",
			     t->group, st->shard, dxl_errmsg());
			return ret;
		}
		if (ret == DXL_E_NOENT)
			ov = DXL_ZK_VERSION_NONE;
		if (st->conflicts++ == 0) {
			if (ret == DXL_E_NOENT)
				errf("warning: cursor of group %s for shard %u was deleted by "
				     "someone else meanwhile; writing it again",
				     t->group, st->shard);
			else
				errf("warning: another consumer of group %s moved the cursor of "
				     "shard %u (to %llu; this one is at %llu): both print every "
				     "record (there is no partition assignment); keeping the later "
				     "cursor", t->group, st->shard, (unsigned long long)other,
				     (unsigned long long)v);
		}
		st->version = ov;
		if (ret == 0 && other >= v) {
			st->committed = other; /* theirs is later: leave it */
			return 0;
		}
	}
	errf("warning: cursor of group %s for shard %u keeps changing under this consumer",
	     t->group, st->shard);
	return DXL_E_STALE;
}

static int commit_all(struct tail *t)
{
	int ret = 0;
	for (uint32_t i = 0; t->group && i < t->n; i++) {
		int r = commit(t, &t->s[i]);
		if (r && !ret)
			ret = r;
	}
	return ret;
}

/* ---- the merge ---------------------------------------------------------------- */

/* emit -- print every queued record no shard can precede any more */
static int emit(struct tail *t)
{
	int n = 0;
	for (;;) {
		struct stail *b = NULL;
		for (uint32_t i = 0; i < t->n; i++) {
			struct stail *st = &t->s[i];
			if (!st->qh)
				continue;
			/* shards are in id order: ties go to the lower shard */
			if (!b || st->qh->ts < b->qh->ts)
				b = st;
		}
		if (!b)
			break;
		const struct qrec *q = b->qh;
		bool ok = true;
		for (uint32_t i = 0; ok && i < t->n; i++) {
			const struct stail *o = &t->s[i];
			if (o == b || o->qh)
				continue; /* a queued head is after q (b is the minimum) */
			uint64_t ob = bound(o);
			ok = q->ts < ob || (q->ts == ob && b->shard < o->shard);
		}
		if (!ok)
			break;
		print_rec(t, b->shard, q);
		b->qh = q->next;
		if (!b->qh)
			b->qt = NULL;
		b->qbytes -= sizeof(*q) + q->len;
		free((void *)q);
		n++;
	}
	return n;
}

/* waiting_helps -- a queued record is held back by an idle shard, whose
 * bound moves with the clock (without --follow: keep going until printed) */
static bool waiting_helps(const struct tail *t)
{
	const struct stail *b = NULL;
	for (uint32_t i = 0; i < t->n; i++)
		if (t->s[i].qh && (!b || t->s[i].qh->ts < b->qh->ts))
			b = &t->s[i];
	if (!b)
		return false;
	for (uint32_t i = 0; i < t->n; i++) {
		const struct stail *o = &t->s[i];
		if (o != b && !o->qh && bound(o) <= b->qh->ts && o->live_known && !o->live_mask &&
		    !o->holding)
			return true;
	}
	return false;
}

/* ---- configuration changes ----------------------------------------------------- */

/* check_config -- a tailed replica no longer in its shard's replica set is
 * left (it stops receiving appends: tailing it would stall) */
static void check_config(struct tail *t)
{
	struct dxl_cluster_config cfg;
	if (dxl_cluster_config_read(t->zk, &cfg, NULL))
		return; /* the next check, or a poll error, will tell */
	if (cfg.epoch != t->cfg_epoch) {
		for (uint32_t i = 0; i < t->n; i++) {
			struct stail *st = &t->s[i];
			if (!st->replica)
				continue;
			const struct dxl_cluster_shard *cs = dxl_cluster_config_shard(&cfg, st->shard);
			bool in = cs && cs->primary == st->replica;
			for (uint32_t k = 0; cs && k < cs->nbackups; k++)
				in |= cs->backups[k] == st->replica;
			if (!in)
				went_down(st, "replica %u is no longer a replica of shard %u "
					  "(configuration epoch %llu)", st->replica, st->shard,
					  (unsigned long long)cfg.epoch);
		}
		t->cfg_epoch = cfg.epoch;
	}
	dxl_cluster_config_clear(&cfg);
}

/* reopen -- try to reopen the down shards that are due.
 * Returns 0, or an exit code (fatal: message printed). */
static int reopen(struct tail *t)
{
	uint64_t now = dxl_now_ms();
	bool due = false;
	for (uint32_t i = 0; i < t->n; i++)
		due |= t->s[i].down_since && now >= t->s[i].next_try;
	if (!due)
		return 0;
	struct dxl_cluster_config cfg;
	int cr = dxl_cluster_config_read(t->zk, &cfg, NULL);
	char cwhy[512];
	if (cr)
		snprintf(cwhy, sizeof(cwhy), "reading the configuration: %s", dxl_errmsg());
	else
		t->cfg_epoch = cfg.epoch;
	int ret = 0;
	for (uint32_t i = 0; !ret && i < t->n; i++) {
		struct stail *st = &t->s[i];
		if (!st->down_since || now < st->next_try)
			continue;
		int r = cr;
		if (cr)
			snprintf(st->why, sizeof(st->why), "%s", cwhy);
		else
			r = attach(t, st, &cfg, false);
		if (r == DXL_E_STALE || r == DXL_E_NOMEM) {
			if (r == DXL_E_NOMEM)
				errf("shard %u: %s", st->shard, dxl_errmsg());
			ret = EX_FAIL;
			break;
		}
		now = dxl_now_ms();
		if (!r) {
			errf("shard %u: %s; continuing on replica %u from commit_ts %llu",
			     st->shard, st->why0, st->replica,
			     (unsigned long long)resume_ts(st));
			st->down_since = 0;
			continue;
		}
		if (now - st->down_since >= UNAVAIL_MAX_MS) {
			errf("shard %u: no replica could be read for %d s (%s); last attempt: %s",
			     st->shard, UNAVAIL_MAX_MS / 1000, st->why0, st->why);
			ret = EX_FAIL;
			break;
		}
		st->next_try = now + st->backoff_ms;
		st->backoff_ms = DXL_MIN(st->backoff_ms * 2, BACKOFF_MAX_MS);
	}
	if (!cr)
		dxl_cluster_config_clear(&cfg);
	return ret;
}

/* ---- the command ------------------------------------------------------------------ */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* start -- the shards, their start points (group cursors, --from), the
 * first tailers. Returns 0 or an exit code (message printed). */
static int start(struct tail *t, bool all, uint32_t shard, bool have_from, bool latest,
		 uint64_t from)
{
	struct dxl_cluster_config cfg;
	int ret = dxl_cluster_config_read(t->zk, &cfg, NULL);
	if (ret == DXL_E_NOENT) {
		errf("cluster %s has no configuration in ZooKeeper %s (is it up? see 'dxl cluster up')",
		     t->cn.cluster, t->cn.zk);
		return EX_CLUSTER;
	}
	if (ret) {
		errf("reading the configuration of cluster %s: %s", t->cn.cluster, dxl_errmsg());
		return ret == DXL_E_UNAVAIL ? EX_ZK : EX_FAIL;
	}
	t->cfg_epoch = cfg.epoch;
	t->cfg_at = dxl_now_ms();
	uint32_t *ids = NULL;
	if (all) {
		if (cfg.nshards > DXL_FABRIC_MAX_CTX) {
			errf("--all: the configuration has %u shards; at most %d can be tailed "
			     "at once (one fabric context each): use --shard", cfg.nshards,
			     DXL_FABRIC_MAX_CTX);
			ret = EX_FAIL;
			goto out;
		}
		t->n = cfg.nshards;
	} else {
		if (!dxl_cluster_config_shard(&cfg, shard)) {
			char list[256];
			shard_list(&cfg, list, sizeof(list));
			errf("unknown shard %u: cluster %s (config epoch %llu) has shards %s", shard,
			     t->cn.cluster, (unsigned long long)cfg.epoch, list);
			ret = EX_CLUSTER;
			goto out;
		}
		t->n = 1;
	}
	ids = calloc(t->n ? t->n : 1, sizeof(*ids));
	t->s = calloc(t->n ? t->n : 1, sizeof(*t->s));
	if (!ids || !t->s) {
		errf("out of memory");
		ret = EX_FAIL;
		goto out;
	}
	for (uint32_t i = 0; i < t->n; i++)
		ids[i] = all ? cfg.shards[i].id : shard;
	qsort(ids, t->n, sizeof(*ids), cmp_u32);
	if (t->n == 0) {
		errf("cluster %s has no shards in its configuration (epoch %llu)", t->cn.cluster,
		     (unsigned long long)cfg.epoch);
		ret = EX_CLUSTER;
		goto out;
	}
	if (t->prefer && !all) {
		const struct dxl_cluster_shard *cs = dxl_cluster_config_shard(&cfg, shard);
		bool in = cs->primary == t->prefer;
		for (uint32_t k = 0; k < cs->nbackups; k++)
			in |= cs->backups[k] == t->prefer;
		if (!in) {
			errf("replica %u is not a replica of shard %u", t->prefer, shard);
			ret = EX_CLUSTER;
			goto out;
		}
	}
	uint64_t latest_ts = 0;
	if (latest) {
		struct dxl_hlc clk;
		dxl_hlc_init(&clk);
		latest_ts = dxl_hlc_now(&clk);
	}
	for (uint32_t i = 0; i < t->n; i++) {
		struct stail *st = &t->s[i];
		st->shard = ids[i];
		st->idx = i;
		st->version = DXL_ZK_VERSION_NONE;
		st->origin = have_from ? FROM_OPTION : FROM_DEFAULT;
		st->start = latest ? latest_ts : from;
		if (!t->group)
			continue;
		uint64_t c = 0;
		int32_t ver;
		int r = dxl_cursor_get(t->zk, t->group, st->shard, &c, &ver);
		if (r == DXL_E_INVAL) {
			errf("--group '%s': %s", t->group, dxl_errmsg());
			ret = EX_USAGE;
			goto out;
		}
		if (r == DXL_E_NOENT)
			continue;
		if (r == DXL_E_CORRUPT) {
			/* overwritten by our first commit (same version) */
			errf("warning: %s; starting shard %u from %s", dxl_errmsg(), st->shard,
			     have_from ? "--from" : "earliest");
			st->version = ver;
			continue;
		}
		if (r) {
			errf("reading cursor of group %s for shard %u: %s", t->group, st->shard,
			     dxl_errmsg());
			ret = r == DXL_E_UNAVAIL ? EX_ZK : EX_FAIL;
			goto out;
		}
		st->version = ver;
		if (have_from) {
			errf("warning: --from overrides the committed cursor %llu of group %s "
			     "for shard %u", (unsigned long long)c, t->group, st->shard);
		} else {
			st->origin = FROM_GROUP;
			st->start = c;
			st->committed = c;
		}
	}
	for (uint32_t i = 0; i < t->n; i++) {
		struct stail *st = &t->s[i];
		st->cur = st->start;
		st->flushed = 0;
		int r = attach(t, st, &cfg, true);
		if (!r)
			continue;
		if (r == DXL_E_STALE) {
			ret = EX_FAIL;
			goto out;
		}
		if (r == DXL_E_NOENT && t->prefer && !all)
			errf("replica %u is not registered in nodes/ (down?)", t->prefer);
		else
			errf("tailing shard %u: %s", st->shard, st->why);
		ret = r == DXL_E_NOENT ? EX_CLUSTER : EX_FAIL;
		goto out;
	}
	ret = 0;
out:
	free(ids);
	dxl_cluster_config_clear(&cfg);
	return ret;
}

static void cleanup(struct tail *t)
{
	for (uint32_t i = 0; t->s && i < t->n; i++) {
		struct stail *st = &t->s[i];
		detach(st);
		while (st->qh) {
			struct qrec *q = st->qh;
			st->qh = q->next;
			free(q);
		}
	}
	free(t->s);
	t->s = NULL;
	dxl_fabric_delete(&t->f);
	dxl_zk_delete(&t->zk);
}

int cmd_tail(int argc, char **argv)
{
	static const struct option opts[] = {
		{"shard", required_argument, NULL, 's'},
		{"all", no_argument, NULL, 'a'},
		{"dir", required_argument, NULL, 'd'},
		{"zk", required_argument, NULL, 'z'},
		{"cluster", required_argument, NULL, 'C'},
		{"from", required_argument, NULL, 'F'},
		{"group", required_argument, NULL, 'g'},
		{"format", required_argument, NULL, 'o'},
		{"follow", no_argument, NULL, 'f'},
		{"replica", required_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = "./dxl-cluster", *zkc = NULL, *cl = NULL;
	uint32_t shard = 0;
	bool have_shard = false, all = false, follow = false, latest = false,
	     have_from = false;
	uint64_t from = 0;
	static struct tail t; /* big (a replica descriptor) */
	memset(&t, 0, sizeof(t));
	int c;
	while ((c = getopt_long(argc, argv, "hf", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (parse_u32(optarg, &shard)) {
				errf("--shard '%s': not a shard number", optarg);
				return EX_USAGE;
			}
			have_shard = true;
			break;
		case 'a': all = true; break;
		case 'd': dir = optarg; break;
		case 'z': zkc = optarg; break;
		case 'C': cl = optarg; break;
		case 'F':
			have_from = true;
			latest = false;
			from = 0;
			if (!strcmp(optarg, "earliest"))
				from = 0;
			else if (!strcmp(optarg, "latest"))
				latest = true;
			else if (dxl_parse_u64(optarg, &from)) {
				errf("--from '%s': want earliest, latest or a commit timestamp", optarg);
				return EX_USAGE;
			}
			break;
		case 'g':
			if (!optarg[0]) {
				errf("--group: empty group name");
				return EX_USAGE;
			}
			t.group = optarg;
			break;
		case 'o':
			if (!strcmp(optarg, "json"))
				t.json = true;
			else if (!strcmp(optarg, "text"))
				t.json = false;
			else {
				errf("--format '%s': want text or json", optarg);
				return EX_USAGE;
			}
			break;
		case 'f': follow = true; break;
		case 'r':
			if (parse_u32(optarg, &t.prefer) || !t.prefer) {
				errf("--replica '%s': not a node id", optarg);
				return EX_USAGE;
			}
			break;
		case 'h': tail_usage(stdout); return EX_OK;
		default: tail_usage(stderr); return EX_USAGE;
		}
	}
	if (optind < argc) {
		errf("unexpected argument '%s' (see --help)", argv[optind]);
		return EX_USAGE;
	}
	if (have_shard == all) {
		errf(all ? "--shard and --all exclude each other (see --help)"
			 : "--shard S or --all is required (see --help)");
		return EX_USAGE;
	}
	int ret = resolve_conn(dir, zkc, cl, &t.cn);
	if (ret)
		return ret;
	if ((ret = zk_connect(&t.cn, &t.zk)))
		return ret;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if ((ret = start(&t, all, shard, have_from, latest, from))) {
		cleanup(&t);
		return ret;
	}
	uint64_t commit_at = dxl_now_ms();
	bool out_ok = true;
	while (!g_stop) {
		uint64_t now = dxl_now_ms();
		if (now - t.cfg_at >= CONFIG_EVERY_MS) {
			check_config(&t);
			t.cfg_at = now;
		}
		if ((ret = reopen(&t)))
			break;
		int got = 0;
		bool all_up = true, all_caught = true;
		for (uint32_t i = 0; i < t.n; i++) {
			struct stail *st = &t.s[i];
			if (!st->replica) {
				all_up = false;
				continue;
			}
			if (st->qbytes > QUEUE_MAX_BYTES)
				continue; /* far ahead of another shard: wait for it */
			int n = poll_shard(&t, st);
			if (n == DXL_E_STALE) {
				stale_msg(&t, st, dxl_tailer_cursor(st->tl), st->replica);
				ret = EX_FAIL;
				break;
			}
			if (n == DXL_E_NOMEM) {
				errf("shard %u: %s", st->shard, dxl_errmsg());
				ret = EX_FAIL;
				break;
			}
			if (n == DXL_E_ACCESS) {
				went_down(st, "replica %u refused the read (%s: %s; its memory was "
					  "registered again, e.g. for a new configuration epoch)",
					  st->replica, dxl_errname(n), dxl_errmsg());
				all_up = false;
				continue;
			}
			if (n < 0) {
				went_down(st, "replica %u failed (%s: %s)", st->replica,
					  dxl_errname(n), dxl_errmsg());
				all_up = false;
				continue;
			}
			got += n;
			all_caught &= st->caught_up;
		}
		if (ret)
			break;
		int printed = emit(&t);
		if (fflush(stdout) != 0) {
			if (errno != EPIPE)
				errf("writing the output: %s", strerror(errno));
			ret = errno == EPIPE ? EX_OK : EX_FAIL;
			out_ok = false;
			break;
		}
		/* everything printed so far is out: the commit points hold */
		for (uint32_t i = 0; i < t.n; i++)
			t.s[i].flushed = DXL_MAX(t.s[i].flushed, commit_point(&t.s[i]));
		now = dxl_now_ms();
		if (t.group && now - commit_at >= COMMIT_EVERY_MS) {
			commit_all(&t);
			commit_at = now;
		}
		if (!follow && all_up && all_caught && !got && !printed && !waiting_helps(&t))
			break; /* caught up */
		if (!got && !printed)
			usleep(IDLE_SLEEP_US);
	}
	if (out_ok && fflush(stdout) == 0)
		for (uint32_t i = 0; i < t.n; i++)
			t.s[i].flushed = DXL_MAX(t.s[i].flushed, commit_point(&t.s[i]));
	if (t.group) {
		int r = commit_all(&t);
		if (r && !ret) {
			errf("the cursors of group %s could not be committed at exit: the next "
			     "run repeats what this one printed since the last commit", t.group);
			ret = r == DXL_E_UNAVAIL ? EX_ZK : EX_FAIL;
		}
		for (uint32_t i = 0; i < t.n; i++)
			if (t.s[i].conflicts > 1)
				errf("warning: %u conflicting commits on the cursor of group %s for "
				     "shard %u (another consumer of the group)", t.s[i].conflicts,
				     t.group, t.s[i].shard);
	}
	cleanup(&t);
	return ret;
}
