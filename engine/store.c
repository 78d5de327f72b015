/* store.c -- the record store: tables of slots in a persistent region, DRAM lock words, key map, free lists */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "common/endian.h"
#include "dxl/engine.h"
#include "engine/record_internal.h"
#include "engine/writeset_internal.h"

/*
 * Layout: include/dxl/engine.h; decisions: docs/engine.md "Tables and the
 * record store". What is persistent: the catalog and the slots (every write
 * persisted before the call returns). What is DRAM, rebuilt at open by a
 * scan: the key -> slot map, the free lists, the slot states, the largest
 * version per table; and the lock words (all free after a restart).
 */

#define CAT_MAGIC "DXLSTOR" /* 8 bytes with the NUL */
#define CAT_FORMAT 1
#define CAT_SIZE 4096
#define CAT_HDR 32
#define CAT_ENT 32
#define CAT_CRC_OFF 20

_Static_assert(CAT_HDR + CAT_ENT * DXL_STORE_MAX_TABLES <= DXL_STORE_FLOOR_OFF &&
		       DXL_STORE_FLOOR_OFF + 8 * DXL_STORE_MAX_TABLES <= CAT_SIZE,
	       "the catalog holds every table, then the reclaim floors");

enum slot_state {
	ST_FREE = 0,
	ST_LIVE = 1,
	ST_TORN = 2, /* claims LIVE but its lines disagree: cut by a crash */
	ST_TOMB = 3, /* free, and its key's tombstone: the key map names it */
};

struct kent {
	uint64_t key;
	uint64_t slot1; /* slot + 1; 0 = empty entry */
};

struct table {
	struct dxl_table_schema sc;
	uint32_t slot_size;
	uint64_t off;      /* of slot 0 in the data area */
	uint8_t *slots;    /* slot 0 in the mapping */
	uint64_t *locks;   /* slot 0's lock word (DRAM) */
	uint64_t lock_idx; /* its index in the store's lock array */
	uint8_t *state;    /* enum slot_state per slot; atomic bytes */
	uint64_t max_version; /* largest version in the table; atomic */
	/* under mu: */
	pthread_mutex_t mu;
	struct kent *map; /* open addressing, linear probing, load <= 1/2 */
	uint64_t map_mask;
	uint32_t *fq;     /* free slots, a FIFO ring of capacity entries */
	uint64_t fq_head, fq_len;
	uint64_t nlive, ntorn, torn_at_open, ntomb;
	/* tombstones (docs/engine.md "Tombstones"): one whose commit
	 * timestamp is below reclaim_ts may give its slot to an insert;
	 * floor_ts is at least the timestamp of every tombstone reclaimed
	 * (what a miss without a tombstone reports) */
	uint64_t reclaim_ts, floor_ts;
	/* the reclaim floor (engine.h): every tombstone this table gave
	 * away had a timestamp below it; persisted in the catalog page
	 * (rfloor_p) before the slot of a tombstone at or above it is
	 * reused */
	uint64_t rfloor;
	uint8_t *rfloor_p;
};

struct dxl_store {
	struct dxl_region *r;
	uint32_t shard;
	unsigned nt;
	struct table *t;
	uint64_t *locks; /* every table's lock words, page-aligned DRAM */
	size_t locks_bytes;
	struct dxl_store_cfg cfg;
	/* reg_lock (read: using them; write: (de)registering) guards the MRs
	 * and the lock agent: a write-back made durable by the CPU tells the
	 * fabric's power-failure model through rec_mr (put_record), NIC-mode
	 * lock words change through the agent and lock_mr's rkey */
	pthread_rwlock_t reg_lock;
	struct dxl_mr *rec_mr, *lock_mr;
	struct dxl_lock_agent *agent;
};

void dxl_store_cfg_init(struct dxl_store_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->lock_mode = DXL_LOCKS_CPU;
	cfg->keep_tombstones = false;
}

/* ---- schemas and the catalog -------------------------------------------------- */

static int check_schemas(const struct dxl_table_schema *t, unsigned n)
{
	if (!t || n == 0 || n > DXL_STORE_MAX_TABLES)
		return dxl_err_set(DXL_E_INVAL, "store: %u tables (1..%d)", n,
				   DXL_STORE_MAX_TABLES);
	for (unsigned i = 0; i < n; i++) {
		if (!dxl_record_slot_size(t[i].value_size))
			return dxl_err_set(DXL_E_INVAL,
					   "store: table %u: value size %u (1..%d)",
					   t[i].id, t[i].value_size,
					   DXL_ENGINE_MAX_VALUE);
		if (t[i].capacity == 0 || t[i].capacity > DXL_TABLE_MAX_CAPACITY)
			return dxl_err_set(DXL_E_INVAL,
					   "store: table %u: capacity %llu (1..%llu)",
					   t[i].id,
					   (unsigned long long)t[i].capacity,
					   (unsigned long long)DXL_TABLE_MAX_CAPACITY);
		for (unsigned j = 0; j < i; j++)
			if (t[j].id == t[i].id)
				return dxl_err_set(DXL_E_INVAL,
						   "store: table id %u appears twice",
						   t[i].id);
	}
	return 0;
}

static uint64_t table_bytes(const struct dxl_table_schema *t)
{
	return DXL_ALIGN_UP(t->capacity * dxl_record_slot_size(t->value_size),
			    4096ull);
}

uint64_t dxl_store_bytes(const struct dxl_table_schema *tables, unsigned n)
{
	if (check_schemas(tables, n))
		return 0;
	uint64_t total = CAT_SIZE;
	for (unsigned i = 0; i < n; i++)
		total += table_bytes(&tables[i]);
	return total;
}

static void cat_encode(uint8_t *c, uint32_t shard,
		       const struct dxl_table_schema *t, unsigned n,
		       uint64_t data_size)
{
	memset(c, 0, CAT_SIZE);
	memcpy(c, CAT_MAGIC, sizeof(CAT_MAGIC));
	dxl_put_le32(c + 8, CAT_FORMAT);
	dxl_put_le32(c + 12, shard);
	dxl_put_le32(c + 16, n);
	dxl_put_le64(c + 24, data_size);
	uint64_t off = CAT_SIZE;
	for (unsigned i = 0; i < n; i++) {
		uint8_t *e = c + CAT_HDR + CAT_ENT * i;
		dxl_put_le32(e, t[i].id);
		dxl_put_le32(e + 4, t[i].value_size);
		dxl_put_le32(e + 8, dxl_record_slot_size(t[i].value_size));
		dxl_put_le64(e + 16, t[i].capacity);
		dxl_put_le64(e + 24, off);
		off += table_bytes(&t[i]);
	}
	dxl_put_le32(c + CAT_CRC_OFF,
		     dxl_crc32c(0, c, CAT_HDR + CAT_ENT * (size_t)n));
}

/* check the catalog at c against a data area of data_size bytes; fill
 * t[0..*n) (t holds DXL_STORE_MAX_TABLES) and offs */
static int cat_decode(const uint8_t *c, uint64_t data_size, const char *path,
		      uint32_t *shard, struct dxl_table_schema *t,
		      uint64_t *offs, unsigned *n)
{
	if (data_size < CAT_SIZE)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: data area of %llu bytes has no store catalog",
				   path, (unsigned long long)data_size);
	if (memcmp(c, CAT_MAGIC, sizeof(CAT_MAGIC)) != 0)
		return dxl_err_set(DXL_E_CORRUPT, "%s: not a record store (bad magic)",
				   path);
	uint32_t nt = dxl_get_le32(c + 16);
	if (nt == 0 || nt > DXL_STORE_MAX_TABLES)
		return dxl_err_set(DXL_E_CORRUPT, "%s: catalog claims %u tables", path,
				   nt);
	uint8_t tmp[CAT_HDR + CAT_ENT * DXL_STORE_MAX_TABLES];
	size_t clen = CAT_HDR + CAT_ENT * (size_t)nt;
	memcpy(tmp, c, clen);
	memset(tmp + CAT_CRC_OFF, 0, 4);
	uint32_t crc = dxl_crc32c(0, tmp, clen);
	if (crc != dxl_get_le32(c + CAT_CRC_OFF))
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: catalog checksum 0x%08x, computed 0x%08x", path,
				   dxl_get_le32(c + CAT_CRC_OFF), crc);
	if (dxl_get_le32(c + 8) != CAT_FORMAT)
		return dxl_err_set(DXL_E_VERSION,
				   "%s: store format %u, this build reads %d", path,
				   dxl_get_le32(c + 8), CAT_FORMAT);
	if (dxl_get_le64(c + 24) != data_size)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: catalog says %llu data bytes, the region has %llu",
				   path, (unsigned long long)dxl_get_le64(c + 24),
				   (unsigned long long)data_size);
	for (unsigned i = 0; i < nt; i++) {
		const uint8_t *e = c + CAT_HDR + CAT_ENT * i;
		t[i].id = dxl_get_le32(e);
		t[i].value_size = dxl_get_le32(e + 4);
		t[i].capacity = dxl_get_le64(e + 16);
		offs[i] = dxl_get_le64(e + 24);
	}
	if (check_schemas(t, nt)) {
		dxl_err_prefix("%s: catalog", path);
		return DXL_E_CORRUPT;
	}
	uint64_t off = CAT_SIZE;
	for (unsigned i = 0; i < nt; i++) {
		const uint8_t *e = c + CAT_HDR + CAT_ENT * i;
		if (dxl_get_le32(e + 8) != dxl_record_slot_size(t[i].value_size) ||
		    dxl_get_le32(e + 12) != 0 || offs[i] != off)
			return dxl_err_set(DXL_E_CORRUPT,
					   "%s: catalog entry of table %u disagrees with its schema",
					   path, t[i].id);
		off += table_bytes(&t[i]);
	}
	if (off != data_size)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: tables need %llu bytes, the data area has %llu",
				   path, (unsigned long long)off,
				   (unsigned long long)data_size);
	*shard = dxl_get_le32(c + 12);
	*n = nt;
	return 0;
}

/* ---- the key map and the free list (table mutex held) ----------------------- */

static struct kent *map_find(struct table *t, uint64_t key)
{
	for (uint64_t i = dxl_fmix64(key) & t->map_mask;; i = (i + 1) & t->map_mask) {
		struct kent *e = &t->map[i];
		if (!e->slot1)
			return NULL;
		if (e->key == key)
			return e;
	}
}

static void map_put(struct table *t, uint64_t key, uint64_t slot)
{
	uint64_t i = dxl_fmix64(key) & t->map_mask;
	while (t->map[i].slot1)
		i = (i + 1) & t->map_mask;
	t->map[i].key = key;
	t->map[i].slot1 = slot + 1;
}

/* remove e, shifting later entries of its probe run back (no tombstones) */
static void map_del(struct table *t, struct kent *e)
{
	uint64_t i = (uint64_t)(e - t->map), j = i, m = t->map_mask;
	for (;;) {
		j = (j + 1) & m;
		if (!t->map[j].slot1)
			break;
		uint64_t home = dxl_fmix64(t->map[j].key) & m;
		/* the entry at j may move to i unless its home lies in (i, j] */
		bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (!stays) {
			t->map[i] = t->map[j];
			i = j;
		}
	}
	t->map[i].slot1 = 0;
	t->map[i].key = 0;
}

static void fq_push(struct table *t, uint64_t slot)
{
	t->fq[(t->fq_head + t->fq_len) % t->sc.capacity] = (uint32_t)slot;
	t->fq_len++;
}

static void fq_push_front(struct table *t, uint64_t slot)
{
	t->fq_head = (t->fq_head + t->sc.capacity - 1) % t->sc.capacity;
	t->fq[t->fq_head] = (uint32_t)slot;
	t->fq_len++;
}

static uint8_t state_get(const struct table *t, uint64_t slot);
static void state_set(struct table *t, uint64_t slot, uint8_t st);
static void *slot_at(const struct table *t, uint64_t slot);

/*
 * The reclaim floor goes above ts (a tombstone's timestamp) before that
 * tombstone's slot is reused: written and persisted first, so after a
 * crash the floor still covers every tombstone whose slot a later write
 * took. Table mutex held.
 */
static void rfloor_raise(struct dxl_store *s, struct table *t, uint64_t ts)
{
	if (ts < t->rfloor)
		return;
	t->rfloor = ts == UINT64_MAX ? ts : ts + 1;
	uint8_t le[8];
	dxl_put_le64(le, t->rfloor);
	dxl_region_memcpy_persist(s->r, t->rfloor_p, le, 8);
}

/*
 * The oldest free slot whose lock word is 0 (a deleter may still hold the
 * lock of the slot it freed) and that is not a tombstone still needed (its
 * commit timestamp at or above reclaim_ts); the others go to the back. A
 * tombstone whose slot is taken is forgotten: its key unmapped, its
 * timestamp folded into floor_ts. May move key map entries (map_del): a
 * caller re-finds its own after this.
 */
static int fq_pop(struct dxl_store *s, struct table *t, uint64_t *slot)
{
	uint64_t kept = 0;
	for (uint64_t n = t->fq_len; n; n--) {
		uint64_t si = t->fq[t->fq_head];
		t->fq_head = (t->fq_head + 1) % t->sc.capacity;
		t->fq_len--;
		if (__atomic_load_n(&t->locks[si], __ATOMIC_ACQUIRE) != 0) {
			fq_push(t, si);
			continue;
		}
		if (state_get(t, si) == ST_TOMB) {
			struct dxl_record r;
			dxl_record_peek(slot_at(t, si), &r);
			if (r.ts >= t->reclaim_ts) {
				kept++;
				fq_push(t, si);
				continue;
			}
			struct kent *e = map_find(t, r.key);
			if (e && e->slot1 == si + 1)
				map_del(t, e);
			state_set(t, si, ST_FREE);
			t->ntomb--;
			t->floor_ts = DXL_MAX(t->floor_ts, r.ts);
			rfloor_raise(s, t, r.ts);
		}
		*slot = si;
		return 0;
	}
	return dxl_err_set(DXL_E_FULL, "table %u: all %llu slots are in use%s%s",
			   t->sc.id, (unsigned long long)t->sc.capacity,
			   t->fq_len > kept ? " (free ones are still locked)" : "",
			   kept ? " (tombstones not yet reclaimable: deletes newer than the log's oldest record)" : "");
}

static uint8_t state_get(const struct table *t, uint64_t slot)
{
	return __atomic_load_n(&t->state[slot], __ATOMIC_ACQUIRE);
}

static void state_set(struct table *t, uint64_t slot, uint8_t st)
{
	__atomic_store_n(&t->state[slot], st, __ATOMIC_RELEASE);
}

static uint64_t even_up(uint64_t v)
{
	return (v + 1) & ~1ull;
}

static void max_version_raise(struct table *t, uint64_t v)
{
	uint64_t cur = __atomic_load_n(&t->max_version, __ATOMIC_RELAXED);
	while (cur < v && !__atomic_compare_exchange_n(&t->max_version, &cur, v,
							true, __ATOMIC_RELAXED,
							__ATOMIC_RELAXED))
		;
}

/* ---- open and close ------------------------------------------------------------- */

static struct table *find_table(const struct dxl_store *s, uint32_t id)
{
	for (unsigned i = 0; i < s->nt; i++)
		if (s->t[i].sc.id == id)
			return &s->t[i];
	dxl_err_set(DXL_E_NOENT, "store of shard %u: no table %u", s->shard, id);
	return NULL;
}

static void *slot_at(const struct table *t, uint64_t slot)
{
	return t->slots + slot * t->slot_size;
}

static void free_tables(struct dxl_store *s)
{
	for (unsigned i = 0; s->t && i < s->nt; i++) {
		struct table *t = &s->t[i];
		free(t->map);
		free(t->fq);
		free(t->state);
		pthread_mutex_destroy(&t->mu);
	}
	free(s->t);
	free(s->locks);
	pthread_rwlock_destroy(&s->reg_lock);
}

/* build the DRAM state of table t by scanning its slots */
static int scan_table(struct dxl_store *s, struct table *t)
{
	const char *path = dxl_region_path(s->r);
	uint64_t max = 0, torn = 0;
	for (uint64_t i = 0; i < t->sc.capacity; i++) {
		struct dxl_record rec;
		int ret = dxl_record_read_check(slot_at(t, i), t->slot_size, &rec,
						NULL, 0);
		if (ret == DXL_E_AGAIN) {
			dxl_record_peek(slot_at(t, i), &rec);
			/* a cut write may have stamped some lines above line 0 */
			for (uint32_t l = 1; l < t->slot_size / DXL_RECORD_LINE; l++)
				rec.version = DXL_MAX(rec.version,
						      dxl_record_version((uint8_t *)slot_at(t, i) +
									 l * DXL_RECORD_LINE));
			state_set(t, i, ST_TORN); /* decided in the second pass */
			torn++;
		} else if (ret) {
			dxl_err_prefix("%s: table %u slot %llu", path, t->sc.id,
				       (unsigned long long)i);
			return ret;
		} else if (rec.live) {
			if (map_find(t, rec.key))
				return dxl_err_set(DXL_E_CORRUPT,
						   "%s: table %u: key %llu is live in slot %llu and slot %llu",
						   path, t->sc.id,
						   (unsigned long long)rec.key,
						   (unsigned long long)map_find(t, rec.key)->slot1 - 1,
						   (unsigned long long)i);
			map_put(t, rec.key, i);
			state_set(t, i, ST_LIVE);
			t->nlive++;
		} else {
			fq_push(t, i);
		}
		max = DXL_MAX(max, even_up(rec.version));
	}
	/* torn slots: one that claims a key no consistent slot holds stays
	 * reserved for it until the replay rewrites it; the others are free */
	for (uint64_t i = 0; torn && i < t->sc.capacity; i++) {
		if (state_get(t, i) != ST_TORN)
			continue;
		struct dxl_record rec;
		dxl_record_peek(slot_at(t, i), &rec);
		if (rec.live && rec.inc && !map_find(t, rec.key)) {
			map_put(t, rec.key, i);
			t->ntorn++;
		} else {
			/* stays ST_TORN until repair_free_torn rewrites it */
			fq_push(t, i);
		}
	}
	/* tombstones: a consistent free slot that held a key (version >= 2,
	 * incarnation > 0: an undone insert's slot has 0, it names no key)
	 * is that key's tombstone unless the key is live or torn elsewhere or
	 * a later tombstone names it (the largest version wins); the floor is
	 * every slot's timestamp (a reclaimed tombstone's was one of them) */
	uint64_t floor = 0;
	for (uint64_t i = 0; i < t->sc.capacity; i++) {
		struct dxl_record rec;
		dxl_record_peek(slot_at(t, i), &rec);
		floor = DXL_MAX(floor, rec.ts);
		if (state_get(t, i) != ST_FREE || rec.live || rec.version < 2 || (rec.version & 1) ||
		    !rec.inc)
			continue;
		struct kent *e = map_find(t, rec.key);
		if (!e) {
			map_put(t, rec.key, i);
			state_set(t, i, ST_TOMB);
			t->ntomb++;
			continue;
		}
		uint64_t o = e->slot1 - 1;
		if (state_get(t, o) != ST_TOMB)
			continue;
		struct dxl_record orec;
		dxl_record_peek(slot_at(t, o), &orec);
		if (orec.version < rec.version) {
			state_set(t, o, ST_FREE);
			e->slot1 = i + 1;
			state_set(t, i, ST_TOMB);
		}
	}
	t->floor_ts = floor;
	t->torn_at_open = torn;
	t->max_version = max;
	if (torn)
		DXL_WARN("%s: table %u: %llu torn slots (writes cut by a crash), %llu of them reserved for their keys until the log is replayed",
			 path, t->sc.id, (unsigned long long)torn,
			 (unsigned long long)t->ntorn);
	return 0;
}

static void put_record(struct dxl_store *s, struct table *t, uint64_t slot,
		       const struct dxl_record *r, const void *value,
		       uint64_t *version);
static uint32_t fresh_inc(uint32_t inc);

/*
 * After every table was scanned without error: rewrite each torn slot of
 * the free lists as a consistent free record that names no key
 * (incarnation 0, as a never-used slot: a live record's incarnation is
 * never 0), so a peer READing it through a stale location sees "not this
 * key" instead of a record that never becomes consistent. It is no
 * tombstone: the write it cut (a delete, an undone insert) is the log's to
 * replay, and a tombstone made up here (a version of its own, timestamp 0)
 * would be one no other replica has. The only write at open.
 */
static void repair_free_torn(struct dxl_store *s, struct table *t)
{
	for (uint64_t n = 0; n < t->fq_len; n++) {
		uint64_t i = t->fq[(t->fq_head + n) % t->sc.capacity];
		if (state_get(t, i) != ST_TORN)
			continue;
		struct dxl_record r;
		dxl_record_peek(slot_at(t, i), &r);
		r.version = 0; /* the next even version */
		r.ts = 0;
		r.inc = 0;
		r.len = 0;
		r.live = false;
		put_record(s, t, i, &r, NULL, NULL);
		state_set(t, i, ST_FREE);
	}
}

static int setup(struct dxl_region *r, const struct dxl_store_cfg *cfg,
		 struct dxl_store **out)
{
	struct dxl_store *s = calloc(1, sizeof(*s));
	if (!s)
		return dxl_err_set(DXL_E_NOMEM, "store: out of memory");
	s->r = r;
	pthread_rwlock_init(&s->reg_lock, NULL);
	if (cfg)
		s->cfg = *cfg;
	else
		dxl_store_cfg_init(&s->cfg);
	int ret = 0;
	if (s->cfg.lock_mode != DXL_LOCKS_NIC && s->cfg.lock_mode != DXL_LOCKS_CPU) {
		ret = dxl_err_set(DXL_E_INVAL, "store: unknown lock mode %d",
				  (int)s->cfg.lock_mode);
		goto err;
	}
	struct dxl_table_schema sc[DXL_STORE_MAX_TABLES];
	uint64_t offs[DXL_STORE_MAX_TABLES];
	unsigned nt = 0;
	ret = cat_decode(dxl_region_data(r), dxl_region_data_size(r),
			 dxl_region_path(r), &s->shard, sc, offs, &nt);
	if (ret)
		goto err;
	s->t = calloc(nt, sizeof(*s->t));
	if (!s->t) {
		ret = dxl_err_set(DXL_E_NOMEM, "store: out of memory");
		goto err;
	}
	uint64_t nlocks = 0;
	for (unsigned i = 0; i < nt; i++)
		nlocks += sc[i].capacity;
	s->locks_bytes = DXL_ALIGN_UP(nlocks * 8, 4096ull);
	if (posix_memalign((void **)&s->locks, 4096, s->locks_bytes)) {
		s->locks = NULL;
		ret = dxl_err_set(DXL_E_NOMEM, "store: no memory for %llu lock words",
				  (unsigned long long)nlocks);
		goto err;
	}
	memset(s->locks, 0, s->locks_bytes);
	uint64_t li = 0;
	for (unsigned i = 0; i < nt; i++, s->nt++) {
		struct table *t = &s->t[i];
		t->sc = sc[i];
		t->slot_size = dxl_record_slot_size(sc[i].value_size);
		t->off = offs[i];
		t->slots = (uint8_t *)dxl_region_data(r) + offs[i];
		t->lock_idx = li;
		t->locks = s->locks + li;
		li += sc[i].capacity;
		pthread_mutex_init(&t->mu, NULL);
		uint64_t msize = 16;
		while (msize < 2 * sc[i].capacity)
			msize <<= 1;
		t->map_mask = msize - 1;
		/* without keep_tombstones a tombstone lasts until its slot is
		 * the oldest free one (first in, first out) */
		t->reclaim_ts = s->cfg.keep_tombstones ? 0 : UINT64_MAX;
		t->rfloor_p = (uint8_t *)dxl_region_data(r) + DXL_STORE_FLOOR_OFF + 8 * i;
		t->rfloor = dxl_get_le64(t->rfloor_p);
		t->map = calloc(msize, sizeof(*t->map));
		t->fq = calloc(sc[i].capacity, sizeof(*t->fq));
		t->state = calloc(sc[i].capacity, 1);
		if (!t->map || !t->fq || !t->state) {
			s->nt++;
			ret = dxl_err_set(DXL_E_NOMEM,
					  "store: no memory for table %u's map",
					  sc[i].id);
			goto err;
		}
	}
	for (unsigned i = 0; i < nt; i++)
		if ((ret = scan_table(s, &s->t[i])))
			goto err;
	for (unsigned i = 0; i < nt; i++)
		repair_free_torn(s, &s->t[i]);
	*out = s;
	return 0;
err:
	free_tables(s);
	free(s);
	return ret;
}

int dxl_store_create(const char *path, enum dxl_durability mode,
		     const struct dxl_region_id *id, uint32_t shard,
		     const struct dxl_table_schema *tables, unsigned ntables,
		     const struct dxl_store_cfg *cfg, struct dxl_store **out)
{
	if (!path || !id || !out)
		return dxl_err_set(DXL_E_INVAL, "store create: bad argument");
	*out = NULL;
	uint64_t bytes = dxl_store_bytes(tables, ntables);
	if (!bytes) {
		dxl_err_prefix("store create %s", path);
		return DXL_E_INVAL;
	}
	struct dxl_region_id rid = *id;
	rid.kind = DXL_REGION_STORE;
	struct dxl_region *r;
	int ret = dxl_region_create(path, bytes, mode, &rid, &r);
	if (ret)
		return ret;
	/* the file is zeroed: every slot is a consistent free record of
	 * version 0; only the catalog needs writing */
	uint8_t *cat = dxl_region_data(r);
	static __thread uint8_t buf[CAT_SIZE];
	cat_encode(buf, shard, tables, ntables, bytes);
	dxl_region_memcpy_persist(r, cat, buf, CAT_SIZE);
	ret = setup(r, cfg, out);
	if (ret) {
		dxl_region_close(&r);
		unlink(path);
	}
	return ret;
}

int dxl_store_open(const char *path, enum dxl_durability mode,
		   const struct dxl_region_id *expect,
		   const struct dxl_store_cfg *cfg, struct dxl_store **out)
{
	if (!path || !out)
		return dxl_err_set(DXL_E_INVAL, "store open: bad argument");
	*out = NULL;
	struct dxl_region_id want;
	if (expect) {
		want = *expect;
		want.kind = DXL_REGION_STORE;
	}
	struct dxl_region *r;
	int ret = dxl_region_open(path, mode, expect ? &want : NULL, &r);
	if (ret)
		return ret;
	if (!expect && dxl_region_id(r)->kind != DXL_REGION_STORE) {
		ret = dxl_err_set(DXL_E_STALE, "%s: region kind %u, not a record store",
				  path, dxl_region_id(r)->kind);
		dxl_region_close(&r);
		return ret;
	}
	ret = setup(r, cfg, out);
	if (ret)
		dxl_region_close(&r);
	return ret;
}

void dxl_store_close(struct dxl_store **sp)
{
	if (!sp || !*sp)
		return;
	struct dxl_store *s = *sp;
	dxl_store_deregister(s);
	free_tables(s);
	dxl_region_close(&s->r);
	free(s);
	*sp = NULL;
}

uint32_t dxl_store_shard(const struct dxl_store *s)
{
	return s->shard;
}

unsigned dxl_store_ntables(const struct dxl_store *s)
{
	return s->nt;
}

struct dxl_region *dxl_store_region(const struct dxl_store *s)
{
	return s->r;
}

enum dxl_lock_mode dxl_store_lock_mode(const struct dxl_store *s)
{
	return s->cfg.lock_mode;
}

int dxl_store_schema(const struct dxl_store *s, uint32_t id,
		     struct dxl_table_schema *out)
{
	struct table *t = find_table(s, id);
	if (!t)
		return DXL_E_NOENT;
	*out = t->sc;
	return 0;
}

int dxl_store_table_at(const struct dxl_store *s, unsigned i,
		       struct dxl_table_schema *out)
{
	if (i >= s->nt)
		return dxl_err_set(DXL_E_NOENT, "store: no table #%u (%u tables)", i,
				   s->nt);
	*out = s->t[i].sc;
	return 0;
}

int dxl_store_stats(const struct dxl_store *s, uint32_t table,
		    struct dxl_store_stats *out)
{
	memset(out, 0, sizeof(*out));
	bool found = false;
	for (unsigned i = 0; i < s->nt; i++) {
		struct table *t = &s->t[i];
		if (table != UINT32_MAX && t->sc.id != table)
			continue;
		found = true;
		pthread_mutex_lock(&t->mu);
		out->live += t->nlive;
		out->free += t->fq_len;
		out->torn += t->ntorn;
		out->torn_at_open += t->torn_at_open;
		out->tombstones += t->ntomb;
		pthread_mutex_unlock(&t->mu);
	}
	if (!found)
		return dxl_err_set(DXL_E_NOENT, "store: no table %u", table);
	return 0;
}

/* ---- owner operations ------------------------------------------------------------ */

static int check_value(const struct table *t, const void *value, uint32_t len)
{
	if (len > t->sc.value_size)
		return dxl_err_set(DXL_E_TOOBIG,
				   "table %u: value of %u bytes, its value size is %u",
				   t->sc.id, len, t->sc.value_size);
	if (len && !value)
		return dxl_err_set(DXL_E_INVAL, "table %u: NULL value", t->sc.id);
	return 0;
}

static int get_slot(const struct dxl_store *s, uint32_t table, uint64_t slot,
		    struct table **tp)
{
	struct table *t = find_table(s, table);
	*tp = t;
	if (!t)
		return DXL_E_NOENT;
	if (slot >= t->sc.capacity)
		return dxl_err_set(DXL_E_NOENT, "table %u: slot %llu out of range (%llu)",
				   table, (unsigned long long)slot,
				   (unsigned long long)t->sc.capacity);
	*tp = t;
	return 0;
}

/*
 * persist_slot -- make the slot's bytes as they are now durable: the CPU
 * persists them (fence, msync or cache flush: the region's mode), then
 * tells the fabric, or its power-failure model still holds the pre-image
 * of an earlier remote write-back of these lines and a simulated failure
 * would bring it back over this durable write (docs/fabric-tcp.md).
 */
static void persist_slot(struct dxl_store *s, struct table *t, uint64_t slot)
{
	void *p = slot_at(t, slot);
	dxl_region_persist(s->r, p, t->slot_size);
	pthread_rwlock_rdlock(&s->reg_lock);
	if (s->rec_mr)
		dxl_mr_mark_durable(s->rec_mr, p, t->slot_size);
	pthread_rwlock_unlock(&s->reg_lock);
}

/* write r into slot and persist it (caller: the slot's only writer) */
static void put_record(struct dxl_store *s, struct table *t, uint64_t slot,
		       const struct dxl_record *r, const void *value,
		       uint64_t *version)
{
	void *p = slot_at(t, slot);
	uint64_t v;
	int ret = dxl_record_write(p, t->slot_size, r, value, &v);
	DXL_ASSERTF(ret == 0, "table %u slot %llu: %s", t->sc.id,
		    (unsigned long long)slot, dxl_errmsg());
	persist_slot(s, t, slot);
	max_version_raise(t, v);
	if (version)
		*version = v;
}

/* the new slot's incarnation: a never-used slot (0) starts at 1 */
static uint32_t fresh_inc(uint32_t inc)
{
	return inc ? inc : 1;
}

/* ---- lock words: who may touch them ------------------------------------------------ */

/*
 * The one CPU store to a lock word: only where the CPU owns lock words. In
 * NIC mode a CPU store is not atomic against the NIC's atomics (a stale
 * coordinator's CAS on the same word can be lost or win over it).
 */
static void lock_store_cpu(const struct dxl_store *s, uint64_t *w, uint64_t v)
{
	DXL_ASSERTF(s->cfg.lock_mode == DXL_LOCKS_CPU,
		    "store: a CPU store to a NIC-owned lock word at %p", (void *)w);
	__atomic_store_n(w, v, __ATOMIC_RELEASE);
}

/*
 * lock_cas -- the word of slot: cmp -> swp; *old = the old value. CPU mode:
 * a CPU CAS; NIC mode: a fabric CAS through the lock agent (the owner goes
 * through its own NIC like any coordinator). Any thread; t->mu may be held.
 */
static int lock_cas(struct dxl_store *s, struct table *t, uint64_t slot,
		    uint64_t cmp, uint64_t swp, uint64_t *old)
{
	uint64_t *w = &t->locks[slot];
	if (s->cfg.lock_mode == DXL_LOCKS_CPU) {
		uint64_t exp = cmp;
		/* acq_rel: as dxl_store_lock (acquire) and _unlock (release) */
		__atomic_compare_exchange_n(w, &exp, swp, false, __ATOMIC_ACQ_REL,
					    __ATOMIC_ACQUIRE);
		*old = exp;
		return 0;
	}
	pthread_rwlock_rdlock(&s->reg_lock);
	int ret;
	if (!s->agent || !s->lock_mr) {
		ret = dxl_err_set(DXL_E_STATE,
				  "table %u slot %llu: lock words are NIC-owned and the store has no %s: "
				  "the lock word was not changed",
				  t->sc.id, (unsigned long long)slot,
				  !s->agent ? "lock agent (dxl_store_set_lock_agent)"
					    : "registration (dxl_store_register)");
	} else {
		struct dxl_mr_desc d;
		dxl_mr_desc(s->lock_mr, &d);
		ret = dxl_lock_agent_cas(s->agent, (uint64_t)(uintptr_t)w, d.rkey, cmp,
					 swp, old);
		if (ret)
			dxl_err_prefix("table %u slot %llu", t->sc.id,
				       (unsigned long long)slot);
	}
	pthread_rwlock_unlock(&s->reg_lock);
	return ret;
}

/* lock_set -- the word := v whatever it holds (a CAS loop in NIC mode) */
static int lock_set(struct dxl_store *s, struct table *t, uint64_t slot, uint64_t v)
{
	if (s->cfg.lock_mode == DXL_LOCKS_CPU) {
		lock_store_cpu(s, &t->locks[slot], v);
		return 0;
	}
	uint64_t cur = __atomic_load_n(&t->locks[slot], __ATOMIC_ACQUIRE);
	for (;;) {
		uint64_t old;
		int ret = lock_cas(s, t, slot, cur, v, &old);
		if (ret || old == cur)
			return ret;
		cur = old; /* changed meanwhile by a peer: again */
	}
}

/*
 * lock_release_unknown -- a change of slot's word to `owner` failed with
 * its outcome unknown (ret: DXL_E_UNREACHABLE or DXL_E_TIMEDOUT from the
 * agent: the CAS may have executed, its answer lost). Leave the word not
 * `owner`: a CAS owner -> 0 -- on a new loopback QP, since the agent
 * reconnects after a failure, so the failed CAS cannot execute after it --
 * a few times. A word left `owner` would keep the slot off the free list
 * (fq_pop passes over locked slots) for as long as the owner lives.
 * dxl_errmsg() is kept (the caller reports the first failure).
 */
static void lock_release_unknown(struct dxl_store *s, struct table *t, uint64_t slot,
				 uint64_t owner, int ret)
{
	if (ret != DXL_E_UNREACHABLE && ret != DXL_E_TIMEDOUT)
		return; /* not executed */
	char msg[512];
	snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
	int r = 0;
	for (int k = 0; k < 3; k++) {
		uint64_t was = 0;
		if (!(r = lock_cas(s, t, slot, owner, 0, &was))) {
			if (was == owner)
				DXL_INFO("event=lock_word_released table=%u slot=%llu owner=0x%llx "
					 "msg=\"the failed CAS had executed\"",
					 t->sc.id, (unsigned long long)slot,
					 (unsigned long long)owner);
			break;
		}
	}
	if (r)
		DXL_ERROR("event=lock_word_leaked table=%u slot=%llu owner=0x%llx msg=\"%s\"",
			  t->sc.id, (unsigned long long)slot, (unsigned long long)owner,
			  dxl_errmsg());
	dxl_err_set(ret, "%s", msg);
}

void dxl_store_set_lock_agent(struct dxl_store *s, struct dxl_lock_agent *a)
{
	pthread_rwlock_wrlock(&s->reg_lock);
	s->agent = a;
	pthread_rwlock_unlock(&s->reg_lock);
}

/* key's live or torn entry (mutex held); NULL if absent or a tombstone */
static struct kent *map_find_present(struct table *t, uint64_t key)
{
	struct kent *e = map_find(t, key);
	return e && state_get(t, e->slot1 - 1) != ST_TOMB ? e : NULL;
}

/* take a free slot for key and make it live with version v (mutex held);
 * a tombstone of key gives way to it (its slot stays free) */
static int insert_locked(struct dxl_store *s, struct table *t, uint64_t key,
			 uint64_t v, uint64_t ts, const void *value,
			 uint32_t len, uint64_t owner, uint64_t *slot,
			 uint64_t *version)
{
	uint64_t si = 0;
	int ret = fq_pop(s, t, &si);
	if (ret)
		return ret;
	/* an owned insert: the lock word is taken before the index can name
	 * the slot. fq_pop passed over slots whose lock word is not 0, but a
	 * peer holding a stale location may CAS a free slot's word at any
	 * moment: a CAS 0 -> owner (through the NIC when it owns the words),
	 * and a slot such a peer got first is left to it (it sees "not my
	 * key" and unlocks). */
	for (uint64_t tries = t->fq_len + 1; owner; tries--) {
		uint64_t was = 0;
		if ((ret = lock_cas(s, t, si, 0, owner, &was))) {
			lock_release_unknown(s, t, si, owner, ret);
			fq_push_front(t, si);
			return ret;
		}
		if (was == 0)
			break;
		fq_push(t, si);
		if (!tries || (ret = fq_pop(s, t, &si)))
			return ret ? ret : dxl_err_set(DXL_E_FULL,
						       "table %u: every free slot is locked",
						       t->sc.id);
	}
	struct dxl_record old;
	dxl_record_peek(slot_at(t, si), &old);
	uint32_t inc = fresh_inc(old.inc);
	if (!v)
		v = DXL_MAX(__atomic_load_n(&t->max_version, __ATOMIC_RELAXED),
			    even_up(old.version)) + 2;
	if (s->cfg.hooks.insert &&
	    (ret = s->cfg.hooks.insert(s->cfg.hooks.arg, t->sc.id, key, si, inc))) {
		if (owner) {
			uint64_t was;
			char msg[256];
			snprintf(msg, sizeof(msg), "%s", dxl_errmsg());
			int r = lock_cas(s, t, si, owner, 0, &was);
			if (r)
				lock_release_unknown(s, t, si, owner, r);
			dxl_err_set(ret, "%s", msg);
		}
		fq_push_front(t, si);
		return ret;
	}
	struct dxl_record r = {.version = v, .ts = ts, .key = key, .inc = inc,
			       .len = len, .live = true};
	put_record(s, t, si, &r, value, version);
	/* after fq_pop, which may have moved map entries */
	struct kent *e = map_find(t, key);
	if (e) {
		DXL_ASSERTF(state_get(t, e->slot1 - 1) == ST_TOMB,
			    "table %u: insert of key %llu over a present record", t->sc.id,
			    (unsigned long long)key);
		state_set(t, e->slot1 - 1, ST_FREE); /* in the free list already */
		t->ntomb--;
		e->slot1 = si + 1;
	} else {
		map_put(t, key, si);
	}
	state_set(t, si, ST_LIVE);
	t->nlive++;
	if (slot)
		*slot = si;
	return 0;
}

int dxl_store_insert(struct dxl_store *s, uint32_t table, uint64_t key,
		     uint64_t ts, const void *value, uint32_t len,
		     uint64_t *slot, uint64_t *version)
{
	return dxl_store_insert_owned(s, table, key, ts, value, len, 0, slot, version);
}

int dxl_store_insert_owned(struct dxl_store *s, uint32_t table, uint64_t key,
			   uint64_t ts, const void *value, uint32_t len,
			   uint64_t owner, uint64_t *slot, uint64_t *version)
{
	struct table *t = find_table(s, table);
	if (!t)
		return DXL_E_NOENT;
	int ret = check_value(t, value, len);
	if (ret)
		return ret;
	pthread_mutex_lock(&t->mu);
	struct kent *e = map_find_present(t, key);
	if (e)
		ret = dxl_err_set(DXL_E_EXIST, "table %u: key %llu is in slot %llu%s",
				  table, (unsigned long long)key,
				  (unsigned long long)e->slot1 - 1,
				  state_get(t, e->slot1 - 1) == ST_TORN
					  ? " (torn: replay the log first)"
					  : "");
	else
		ret = insert_locked(s, t, key, 0, ts, value, len, owner, slot, version);
	pthread_mutex_unlock(&t->mu);
	return ret;
}

int dxl_store_insert_at(struct dxl_store *s, uint32_t table, uint64_t key,
			uint64_t version, uint64_t ts, const void *value, uint32_t len,
			uint64_t owner, uint64_t *slot)
{
	struct table *t = find_table(s, table);
	if (!t)
		return DXL_E_NOENT;
	if (version == 0 || (version & 1))
		return dxl_err_set(DXL_E_INVAL, "insert: version %llu (must be even and >= 2)",
				   (unsigned long long)version);
	int ret = check_value(t, value, len);
	if (ret)
		return ret;
	pthread_mutex_lock(&t->mu);
	struct kent *e = map_find(t, key);
	if (e && state_get(t, e->slot1 - 1) != ST_TOMB) {
		ret = dxl_err_set(DXL_E_EXIST, "table %u: key %llu is in slot %llu", table,
				  (unsigned long long)key, (unsigned long long)e->slot1 - 1);
	} else {
		struct dxl_record cur = {0};
		if (e)
			dxl_record_peek(slot_at(t, e->slot1 - 1), &cur);
		if (e && cur.version >= version)
			ret = 0; /* deleted later */
		else if (!(ret = insert_locked(s, t, key, version, ts, value, len, owner, slot,
					       NULL)))
			ret = 1;
	}
	pthread_mutex_unlock(&t->mu);
	return ret;
}

static int check_locked_live(const struct table *t, uint64_t slot,
			     uint64_t lock_owner)
{
	uint8_t st = state_get(t, slot);
	if (st != ST_LIVE)
		return st == ST_TORN
			       ? dxl_err_set(DXL_E_AGAIN,
					     "table %u slot %llu is torn (replay the log first)",
					     t->sc.id, (unsigned long long)slot)
			       : dxl_err_set(DXL_E_NOENT,
					     "table %u slot %llu holds no live record",
					     t->sc.id, (unsigned long long)slot);
	uint64_t w = __atomic_load_n(&t->locks[slot], __ATOMIC_ACQUIRE);
	if (!lock_owner || w != lock_owner)
		return dxl_err_set(DXL_E_STATE,
				   "table %u slot %llu: lock word 0x%llx, caller 0x%llx: write without the lock",
				   t->sc.id, (unsigned long long)slot,
				   (unsigned long long)w,
				   (unsigned long long)lock_owner);
	return 0;
}

/* the live record at slot, locked by lock_owner, and its key map entry
 * (mutex held); *r is the record's header */
static int locked_live_entry(struct table *t, uint64_t slot, uint64_t lock_owner,
			     struct kent **e, struct dxl_record *r)
{
	int ret = check_locked_live(t, slot, lock_owner);
	if (ret)
		return ret;
	dxl_record_peek(slot_at(t, slot), r);
	*e = map_find(t, r->key);
	DXL_ASSERTF(*e && (*e)->slot1 == slot + 1,
		    "table %u slot %llu: key %llu not mapped to it",
		    t->sc.id, (unsigned long long)slot, (unsigned long long)r->key);
	return 0;
}

int dxl_store_update(struct dxl_store *s, uint32_t table, uint64_t slot,
		     uint64_t lock_owner, uint64_t ts, const void *value,
		     uint32_t len, uint64_t *version)
{
	struct table *t;
	int ret = get_slot(s, table, slot, &t);
	if (!ret)
		ret = check_value(t, value, len);
	if (!ret)
		ret = check_locked_live(t, slot, lock_owner);
	if (ret)
		return ret;
	struct dxl_record r;
	dxl_record_peek(slot_at(t, slot), &r);
	r.version = 0; /* current + 2 */
	r.ts = ts;
	r.len = len;
	put_record(s, t, slot, &r, value, version);
	return 0;
}

/*
 * make the live or torn record of e deleted with version v (mutex held): the
 * slot, free now, is the key's tombstone (it keeps key, version and
 * timestamp; the key map keeps naming it) until an insert of the key or
 * the reclamation of the slot (fq_pop)
 */
static void delete_locked(struct dxl_store *s, struct table *t, struct kent *e,
			  uint64_t v, uint64_t ts, uint64_t *version)
{
	uint64_t slot = e->slot1 - 1;
	struct dxl_record r;
	dxl_record_peek(slot_at(t, slot), &r);
	uint8_t st = state_get(t, slot);
	r.version = v;
	r.ts = ts;
	r.inc = fresh_inc(r.inc + 1); /* stale locations no longer match */
	r.len = 0;
	r.live = false;
	put_record(s, t, slot, &r, NULL, version);
	state_set(t, slot, ST_TOMB);
	t->ntomb++;
	if (st == ST_TORN)
		t->ntorn--;
	else
		t->nlive--;
	fq_push(t, slot);
	if (s->cfg.hooks.remove)
		s->cfg.hooks.remove(s->cfg.hooks.arg, t->sc.id, r.key, slot);
}

/* rewrite the tombstone of e with a later delete's version and timestamp
 * (mutex held; the slot stays free and in the free list) */
static void tomb_rewrite(struct dxl_store *s, struct table *t, struct kent *e,
			 uint64_t v, uint64_t ts)
{
	uint64_t slot = e->slot1 - 1;
	struct dxl_record r;
	dxl_record_peek(slot_at(t, slot), &r);
	r.version = v;
	r.ts = ts;
	r.len = 0;
	r.live = false;
	put_record(s, t, slot, &r, NULL, NULL);
}

/* a tombstone of key (absent here) with version v: a delete applied before
 * the writes it follows (mutex held). Takes a free slot and puts it back. */
static int tomb_make(struct dxl_store *s, struct table *t, uint64_t key,
		     uint64_t v, uint64_t ts)
{
	uint64_t si;
	int ret = fq_pop(s, t, &si);
	if (ret)
		return ret;
	struct dxl_record r;
	dxl_record_peek(slot_at(t, si), &r);
	r.version = v;
	r.ts = ts;
	r.key = key;
	r.inc = fresh_inc(r.inc + 1); /* stale locations no longer match */
	r.len = 0;
	r.live = false;
	put_record(s, t, si, &r, NULL, NULL);
	map_put(t, key, si); /* absent: fq_pop's map_del cannot have added it */
	state_set(t, si, ST_TOMB);
	t->ntomb++;
	fq_push(t, si);
	return 0;
}

int dxl_store_delete(struct dxl_store *s, uint32_t table, uint64_t slot,
		     uint64_t lock_owner, uint64_t ts, uint64_t *version)
{
	struct table *t;
	int ret = get_slot(s, table, slot, &t);
	if (ret)
		return ret;
	pthread_mutex_lock(&t->mu);
	struct kent *e;
	struct dxl_record r;
	ret = locked_live_entry(t, slot, lock_owner, &e, &r);
	if (!ret)
		delete_locked(s, t, e, 0, ts, version);
	pthread_mutex_unlock(&t->mu);
	return ret;
}

int dxl_store_undo_insert(struct dxl_store *s, uint32_t table, uint64_t slot,
			  uint64_t lock_owner, const struct dxl_store_absence *was)
{
	struct table *t;
	int ret = get_slot(s, table, slot, &t);
	if (ret)
		return ret;
	bool tomb = was->slot != UINT64_MAX && was->version;
	if (tomb && (was->version & 1))
		return dxl_err_set(DXL_E_INVAL, "undo insert: version %llu is odd",
				   (unsigned long long)was->version);
	pthread_mutex_lock(&t->mu);
	struct kent *e;
	struct dxl_record r;
	ret = locked_live_entry(t, slot, lock_owner, &e, &r);
	if (!ret) {
		if (tomb) {
			/* the tombstone the insert replaced, as it was */
			delete_locked(s, t, e, was->version, was->ts, NULL);
		} else {
			/* no tombstone: the key unmapped, the slot free and
			 * naming no key -- incarnation 0, as a never-used slot
			 * (what a store opened, a transfer or a digest read slot
			 * by slot take for no tombstone); stale locations no
			 * longer match */
			r.version = 0;
			r.ts = was->ts;
			r.inc = 0;
			r.len = 0;
			r.live = false;
			put_record(s, t, slot, &r, NULL, NULL);
			map_del(t, e);
			state_set(t, slot, ST_FREE);
			t->nlive--;
			fq_push(t, slot);
			if (s->cfg.hooks.remove)
				s->cfg.hooks.remove(s->cfg.hooks.arg, t->sc.id, r.key, slot);
		}
	}
	pthread_mutex_unlock(&t->mu);
	return ret;
}

int dxl_store_read(const struct dxl_store *s, uint32_t table, uint64_t slot,
		   struct dxl_record *out, void *value, uint32_t cap)
{
	struct table *t;
	int ret = get_slot(s, table, slot, &t);
	if (ret)
		return ret;
	ret = dxl_record_read_local(slot_at(t, slot), t->slot_size, out, value,
				    cap, 0);
	if (ret)
		dxl_err_prefix("table %u slot %llu", table, (unsigned long long)slot);
	return ret;
}

int dxl_store_find(struct dxl_store *s, uint32_t table, uint64_t key,
		   uint64_t *slot)
{
	struct table *t = find_table(s, table);
	if (!t)
		return DXL_E_NOENT;
	pthread_mutex_lock(&t->mu);
	struct kent *e = map_find_present(t, key);
	if (e && slot)
		*slot = e->slot1 - 1;
	pthread_mutex_unlock(&t->mu);
	if (!e)
		return dxl_err_set(DXL_E_NOENT, "table %u: no key %llu", table,
				   (unsigned long long)key);
	return 0;
}

int dxl_store_absence(struct dxl_store *s, uint32_t table, uint64_t key,
		      struct dxl_store_absence *out)
{
	struct table *t = find_table(s, table);
	if (!t)
		return DXL_E_NOENT;
	int ret = 0;
	pthread_mutex_lock(&t->mu);
	struct kent *e = map_find(t, key);
	if (e && state_get(t, e->slot1 - 1) != ST_TOMB) {
		ret = dxl_err_set(DXL_E_EXIST, "table %u: key %llu is in slot %llu",
				  table, (unsigned long long)key,
				  (unsigned long long)e->slot1 - 1);
	} else if (e) {
		struct dxl_record r;
		dxl_record_peek(slot_at(t, e->slot1 - 1), &r);
		*out = (struct dxl_store_absence){.slot = e->slot1 - 1, .version = r.version,
						  .ts = r.ts};
	} else {
		*out = (struct dxl_store_absence){.slot = UINT64_MAX, .ts = t->floor_ts};
	}
	pthread_mutex_unlock(&t->mu);
	return ret;
}

bool dxl_store_keeps_tombstones(const struct dxl_store *s)
{
	return s->cfg.keep_tombstones;
}

void dxl_store_set_reclaim_ts(struct dxl_store *s, uint64_t ts)
{
	if (!s->cfg.keep_tombstones)
		return;
	for (unsigned i = 0; i < s->nt; i++) {
		pthread_mutex_lock(&s->t[i].mu);
		s->t[i].reclaim_ts = ts;
		pthread_mutex_unlock(&s->t[i].mu);
	}
}

uint64_t dxl_store_reclaim_floor(struct dxl_store *s, uint32_t table)
{
	struct table *t = find_table(s, table);
	if (!t) {
		dxl_err_clear();
		return 0;
	}
	pthread_mutex_lock(&t->mu);
	uint64_t f = t->rfloor;
	pthread_mutex_unlock(&t->mu);
	return f;
}

int dxl_store_raise_reclaim_floor(struct dxl_store *s, uint32_t table, uint64_t floor)
{
	struct table *t = find_table(s, table);
	if (!t)
		return DXL_E_NOENT;
	pthread_mutex_lock(&t->mu);
	if (floor > t->rfloor)
		rfloor_raise(s, t, floor - 1);
	pthread_mutex_unlock(&t->mu);
	return 0;
}

void *dxl_store_slot_ptr(const struct dxl_store *s, uint32_t table,
			 uint64_t slot)
{
	struct table *t = NULL;
	if (get_slot(s, table, slot, &t))
		return NULL;
	return slot_at(t, slot);
}

/* ---- locks ------------------------------------------------------------------------- */

static int lock_args(const struct dxl_store *s, uint32_t table, uint64_t slot,
		     uint64_t owner, struct table **tp)
{
	if (s->cfg.lock_mode != DXL_LOCKS_CPU)
		return dxl_err_set(DXL_E_NOTSUP,
				   "store: lock words are NIC-owned (DXL_LOCKS_NIC): lock with a fabric CAS");
	if (!owner)
		return dxl_err_set(DXL_E_INVAL, "store: lock owner 0 means free");
	return get_slot(s, table, slot, tp);
}

int dxl_store_lock_set(struct dxl_store *s, uint32_t table, uint64_t slot,
		       uint64_t word)
{
	struct table *t;
	int ret = get_slot(s, table, slot, &t);
	if (ret)
		return ret;
	return lock_set(s, t, slot, word);
}

int dxl_store_unlock_owner(struct dxl_store *s, uint32_t table, uint64_t slot,
			   uint64_t owner)
{
	struct table *t;
	int ret = get_slot(s, table, slot, &t);
	if (ret)
		return ret;
	if (!owner)
		return dxl_err_set(DXL_E_INVAL, "store: lock owner 0 means free");
	uint64_t was;
	if ((ret = lock_cas(s, t, slot, owner, 0, &was)))
		return ret;
	if (was != owner)
		return dxl_err_set(DXL_E_STATE,
				   "table %u slot %llu: release by 0x%llx, lock word is 0x%llx",
				   table, (unsigned long long)slot,
				   (unsigned long long)owner, (unsigned long long)was);
	return 0;
}

int dxl_store_persist(struct dxl_store *s, uint32_t table, uint64_t slot)
{
	struct table *t;
	int ret = get_slot(s, table, slot, &t);
	if (ret)
		return ret;
	persist_slot(s, t, slot);
	return 0;
}

int dxl_store_unlock_coord(struct dxl_store *s, uint32_t coord)
{
	int n = 0;
	for (uint32_t i = 0; i < s->nt; i++) {
		struct table *t = &s->t[i];
		for (uint64_t k = 0; k < t->sc.capacity; k++) {
			/* a CPU read to find them (reads are any mode's) */
			uint64_t w = __atomic_load_n(&t->locks[k], __ATOMIC_ACQUIRE);
			if (!w || (w >> 48) != coord)
				continue;
			uint64_t was;
			int ret = lock_cas(s, t, k, w, 0, &was);
			if (ret)
				return ret;
			n += was == w;
		}
	}
	return n;
}

/* Who may call: the owner's CPU in DXL_LOCKS_CPU mode, any thread. */
int dxl_store_lock(struct dxl_store *s, uint32_t table, uint64_t slot,
		   uint64_t owner, uint64_t *holder)
{
	struct table *t;
	int ret = lock_args(s, table, slot, owner, &t);
	if (ret)
		return ret;
	uint64_t exp = 0;
	DXL_ASSERT(s->cfg.lock_mode == DXL_LOCKS_CPU); /* lock_args checked it */
	/* acquire: the record the new holder reads is the last holder's */
	if (__atomic_compare_exchange_n(&t->locks[slot], &exp, owner, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return 0;
	if (holder)
		*holder = exp;
	return dxl_err_set(DXL_E_BUSY, "table %u slot %llu: locked by 0x%llx",
			   table, (unsigned long long)slot,
			   (unsigned long long)exp);
}

int dxl_store_unlock(struct dxl_store *s, uint32_t table, uint64_t slot,
		     uint64_t owner)
{
	struct table *t;
	int ret = lock_args(s, table, slot, owner, &t);
	if (ret)
		return ret;
	uint64_t exp = owner;
	DXL_ASSERT(s->cfg.lock_mode == DXL_LOCKS_CPU); /* lock_args checked it */
	/* release: the record written under the lock is visible to the next holder */
	if (__atomic_compare_exchange_n(&t->locks[slot], &exp, 0, false,
					__ATOMIC_RELEASE, __ATOMIC_RELAXED))
		return 0;
	return dxl_err_set(DXL_E_STATE,
			   "table %u slot %llu: unlock by 0x%llx, lock word is 0x%llx",
			   table, (unsigned long long)slot,
			   (unsigned long long)owner, (unsigned long long)exp);
}

uint64_t dxl_store_lock_word(const struct dxl_store *s, uint32_t table,
			     uint64_t slot)
{
	struct table *t = NULL;
	if (get_slot(s, table, slot, &t))
		return 0;
	return __atomic_load_n(&t->locks[slot], __ATOMIC_ACQUIRE);
}

/* ---- registration -------------------------------------------------------------------- */

int dxl_store_register(struct dxl_store *s, struct dxl_fabric *f)
{
	pthread_rwlock_wrlock(&s->reg_lock);
	int ret;
	if (s->rec_mr) {
		ret = dxl_err_set(DXL_E_EXIST, "store: already registered");
		goto out;
	}
	/* where a one-sided write-back could not be made durable (verbs, not
	 * persistent memory), no peer may WRITE records at all */
	unsigned acc = DXL_MR_REMOTE_READ | DXL_MR_PERSISTENT;
	if (dxl_record_wb_onesided_ok(dxl_fabric_provider(f), dxl_region_durability(s->r)))
		acc |= DXL_MR_REMOTE_WRITE;
	ret = dxl_mr_reg(f, dxl_region_data(s->r), dxl_region_data_size(s->r), acc,
			 &s->rec_mr);
	if (ret)
		goto out;
	if ((ret = dxl_region_bind_mr(s->r, s->rec_mr)) ||
	    (ret = dxl_mr_reg(f, s->locks, s->locks_bytes,
			      DXL_MR_REMOTE_ATOMIC | DXL_MR_REMOTE_READ, &s->lock_mr)))
		dxl_mr_dereg(&s->rec_mr);
out:
	pthread_rwlock_unlock(&s->reg_lock);
	return ret;
}

void dxl_store_deregister(struct dxl_store *s)
{
	pthread_rwlock_wrlock(&s->reg_lock);
	dxl_mr_dereg(&s->lock_mr);
	dxl_mr_dereg(&s->rec_mr);
	pthread_rwlock_unlock(&s->reg_lock);
}

struct dxl_mr *dxl_store_records_mr(const struct dxl_store *s)
{
	return s->rec_mr;
}

struct dxl_mr *dxl_store_locks_mr(const struct dxl_store *s)
{
	return s->lock_mr;
}

int dxl_store_table_desc(const struct dxl_store *s, uint32_t table,
			 struct dxl_table_desc *out)
{
	struct table *t = find_table(s, table);
	if (!t)
		return DXL_E_NOENT;
	if (!s->rec_mr || !s->lock_mr)
		return dxl_err_set(DXL_E_STATE, "store: not registered");
	memset(out, 0, sizeof(*out));
	out->id = t->sc.id;
	out->value_size = t->sc.value_size;
	out->slot_size = t->slot_size;
	out->lock_mode = (uint32_t)s->cfg.lock_mode;
	out->capacity = t->sc.capacity;
	dxl_mr_desc(s->rec_mr, &out->records);
	out->records.addr += t->off;
	out->records.len = t->sc.capacity * t->slot_size;
	dxl_mr_desc(s->lock_mr, &out->locks);
	out->locks.addr += 8 * t->lock_idx;
	out->locks.len = 8 * t->sc.capacity;
	return 0;
}

/* ---- applying the log -------------------------------------------------------------- */

/*
 * apply_one -- dxl_store_apply; tomb_optional: a delete of an absent key
 * that finds no free slot for its tombstone is passed over (returns 0)
 * instead of failing with DXL_E_FULL. Only for a replay, which applies the
 * last write of each key of its window (no older write of the key follows
 * it there); an applier must not lose a tombstone: a slot freed later
 * would let an older insert of the key in.
 */
static int apply_one(struct dxl_store *s, uint32_t table, uint64_t key, enum dxl_ws_op op,
		     uint64_t version, uint64_t ts, const void *value, uint32_t len,
		     bool tomb_optional);

int dxl_store_apply(struct dxl_store *s, uint32_t table, uint64_t key,
		    enum dxl_ws_op op, uint64_t version, uint64_t ts,
		    const void *value, uint32_t len)
{
	return apply_one(s, table, key, op, version, ts, value, len, false);
}

static int apply_one(struct dxl_store *s, uint32_t table, uint64_t key, enum dxl_ws_op op,
		     uint64_t version, uint64_t ts, const void *value, uint32_t len,
		     bool tomb_optional)
{
	struct table *t = find_table(s, table);
	if (!t)
		return DXL_E_NOENT;
	if (op != DXL_WS_INSERT && op != DXL_WS_UPDATE && op != DXL_WS_DELETE)
		return dxl_err_set(DXL_E_INVAL, "apply: bad op %d", (int)op);
	if (version == 0 || (version & 1))
		return dxl_err_set(DXL_E_INVAL,
				   "apply: version %llu (must be even and >= 2)",
				   (unsigned long long)version);
	int ret = check_value(t, value, len);
	if (ret)
		return ret;
	pthread_mutex_lock(&t->mu);
	struct kent *e = map_find(t, key);
	uint8_t st = e ? state_get(t, e->slot1 - 1) : ST_FREE;
	struct dxl_record cur = {0};
	if (e)
		dxl_record_peek(slot_at(t, e->slot1 - 1), &cur);
	if (e && st != ST_TORN && cur.version >= version) {
		/* applied before, or older than what is here -- a live record
		 * or a tombstone: idempotent and order-safe by version. But a
		 * live slot whose lock is still held may hold its version from
		 * a one-sided write-back whose flush READ never executed (its
		 * QP failed after the WRITEs): placed, not durable. A
		 * roll-forward unlocks next and the log's retention then
		 * passes the record, so persist it now (docs/engine.md "When a
		 * write-back is durable") */
		if (st == ST_LIVE &&
		    __atomic_load_n(&t->locks[e->slot1 - 1], __ATOMIC_ACQUIRE))
			persist_slot(s, t, e->slot1 - 1);
		ret = 0;
	} else if (e && st == ST_TOMB) {
		if (op == DXL_WS_DELETE)
			tomb_rewrite(s, t, e, version, ts);
		else
			ret = insert_locked(s, t, key, version, ts, value, len, 0, NULL, NULL);
		if (!ret)
			ret = 1;
	} else if (e && op == DXL_WS_DELETE) {
		delete_locked(s, t, e, version, ts, NULL);
		ret = 1;
	} else if (e) {
		/* a newer put, or the torn record of a cut write */
		uint64_t slot = e->slot1 - 1;
		struct dxl_record r = {.version = version, .ts = ts,
				       .key = key,
				       .inc = fresh_inc(cur.inc),
				       .len = len, .live = true};
		put_record(s, t, slot, &r, value, NULL);
		if (st == ST_TORN) {
			state_set(t, slot, ST_LIVE);
			t->ntorn--;
			t->nlive++;
		}
		ret = 1;
	} else if (op == DXL_WS_DELETE) {
		/* deleted before any write of it arrived here (or its tombstone
		 * was reclaimed): a tombstone keeps older writes out. A full
		 * table: DXL_E_FULL (the applier stops there and tries again
		 * once a slot is free) -- a replay's last write of a key needs
		 * none (docs/engine.md "Tombstones") */
		ret = tomb_make(s, t, key, version, ts);
		if (!ret)
			ret = 1;
		else if (ret == DXL_E_FULL && tomb_optional)
			ret = 0;
		else
			dxl_err_prefix("delete of absent key %llu: no slot for its tombstone",
				       (unsigned long long)key);
	} else {
		ret = insert_locked(s, t, key, version, ts, value, len, 0, NULL, NULL);
		if (!ret)
			ret = 1;
	}
	pthread_mutex_unlock(&t->mu);
	return ret;
}

/*
 * Apply (or, with check, only check) the entries of one write set: with
 * check every entry's table and length are checked and nothing is written.
 */
static int apply_entries(struct dxl_store *s, const void *payload, uint32_t len,
			 uint64_t ts, dxl_store_filter_fn filter, void *arg,
			 struct dxl_replay_stats *st, bool check)
{
	struct dxl_ws_iter it;
	int ret = dxl_ws_iter_init(&it, payload, len);
	if (ret < 0)
		return ret;
	if (!check) {
		st->records++;
		st->last_ts = ts;
	}
	struct dxl_ws_entry e;
	int applied = 0;
	for (uint32_t i = 0; dxl_ws_iter_next(&it, &e); i++) {
		if (filter && !filter(arg, e.table, e.key)) {
			if (!check) {
				st->entries++;
				st->filtered++;
			}
			continue;
		}
		if (check) {
			struct table *t = find_table(s, e.table);
			ret = t ? check_value(t, e.value, e.len) : DXL_E_NOENT;
			if (ret) {
				dxl_err_prefix("write set entry %u (table %u, key %llu)",
					       i, e.table, (unsigned long long)e.key);
				return ret;
			}
			continue;
		}
		st->entries++;
		ret = dxl_store_apply(s, e.table, e.key, e.op, e.version, ts,
				      e.value, e.len);
		if (ret < 0) {
			dxl_err_prefix("write set entry %u (table %u, key %llu)", i,
				       e.table, (unsigned long long)e.key);
			return ret;
		}
		if (ret) {
			st->applied++;
			applied++;
		} else {
			st->skipped++;
		}
	}
	return applied;
}

int dxl_store_apply_writeset(struct dxl_store *s, const void *payload,
			     uint32_t len, uint64_t ts,
			     dxl_store_filter_fn filter, void *arg,
			     struct dxl_replay_stats *st)
{
	struct dxl_replay_stats dummy;
	if (!st)
		st = memset(&dummy, 0, sizeof(dummy));
	/* check every entry before the first is applied */
	int ret = apply_entries(s, payload, len, ts, filter, arg, st, true);
	if (ret < 0)
		return ret;
	return apply_entries(s, payload, len, ts, filter, arg, st, false);
}
