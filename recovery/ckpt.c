/* ckpt.c -- checkpoints of a shard's tables: format, writer, reader, the newest complete one (include/dxl/recovery.h) */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "common/endian.h"
#include "dxl/recovery.h"
#include "recovery/recovery_internal.h"

/*
 * Manifest (the first DXL_CKPT_MAN_SIZE bytes of the data area), little-
 * endian:
 *
 *    0 magic "DXLCKPT\0"     56 entries u64        104 entries' CRC u32
 *    8 format u32 (2)        64 tombstones u64     108 manifest CRC u32
 *   12 shard u32             72 start_ts u64       112 tombstone digest t0
 *   16 seq u64               80 digest records u64 120 tombstone digest t1
 *   24 ntables u32           88 digest h0 u64
 *   28 nrings u32            96 digest h1 u64
 *   32 ring_size u64
 *   40 created_ms u64
 *   48 source node u32, 52 zero u32
 *
 *   128 + 48 t: table t {id u32, value_size u32, entry_size u32, zero u32,
 *               capacity u64 (its area holds capacity + capacity/16 + 16
 *               entries), offset u64 (of its area in the data area),
 *               count u64, CRC32C u32 of its count * entry_size bytes,
 *               zero u32}
 *   3200 + 16 r: ring r's start {pos u64, seq u64}
 *   19584 + 8 t: table t's reclaim floor u64 (format 2; engine.h
 *               dxl_store_reclaim_floor: the source lacked its tombstones
 *               below it)
 *
 * The manifest CRC covers bytes [0, 3200 + 16 nrings) with its own field
 * zeroed, then (format 2) [19584, 19584 + 8 ntables); the entries' CRC is
 * the CRC32C of the tables' CRCs (le32, in table order). Everything else
 * up to the first area is zero. Format 1 (no floors, no tombstone digest,
 * live entries only) is still read.
 */
#define MAN_MAGIC "DXLCKPT"
#define MAN_FORMAT 2
#define MAN_HDR 128
#define MAN_TAB 48
#define MAN_RINGS_OFF (MAN_HDR + MAN_TAB * DXL_STORE_MAX_TABLES)
#define MAN_FLOOR_OFF (MAN_RINGS_OFF + 16 * DXL_CKPT_MAX_RINGS)
#define MAN_CRC_OFF 108
#define ADD_CRASH_EVERY 64 /* test hook: a crash point every n entries */

_Static_assert(MAN_FLOOR_OFF + 8 * DXL_STORE_MAX_TABLES <= DXL_CKPT_MAN_SIZE,
	       "the manifest holds every ring's start and every table's floor");

/* the manifest's CRC: its header, tables and rings, then its floors */
static uint32_t man_crc(const uint8_t *m, uint32_t format, uint32_t ntables, uint32_t nrings)
{
	uint32_t crc = dxl_crc32c(0, m, MAN_RINGS_OFF + 16 * (size_t)nrings);
	if (format >= 2)
		crc = dxl_crc32c(crc, m + MAN_FLOOR_OFF, 8 * (size_t)ntables);
	return crc;
}

static dxl_ckpt_test_fn g_hook;
static void *g_hook_arg;

void dxl_ckpt_set_test_hook(dxl_ckpt_test_fn fn, void *arg)
{
	g_hook = fn;
	g_hook_arg = arg;
}

struct area {
	struct dxl_table_schema sc;
	uint32_t entry_size;
	uint64_t room, off, count;
	uint32_t crc;
};

struct dxl_ckpt_writer {
	struct dxl_region *r;
	char *path;
	struct dxl_ckpt_info info;
	struct area a[DXL_STORE_MAX_TABLES];
	struct dxl_log_pos *start;
	uint64_t adds;
	bool crashed;
};

struct dxl_ckpt {
	struct dxl_region *r;
	struct dxl_ckpt_info info;
	struct area a[DXL_STORE_MAX_TABLES];
	struct dxl_log_pos *start;
};

/* ---- names and sizes --------------------------------------------------------------- */

static uint32_t entry_size(uint32_t value_size)
{
	return DXL_CKPT_ENTRY_HDR + (uint32_t)DXL_ALIGN_UP(value_size, 8u);
}

static uint64_t room_of(uint64_t capacity)
{
	return capacity + capacity / 16 + 16;
}

int dxl_rcv_ckpt_name(char *buf, size_t cap, const char *dir, uint32_t shard,
		      uint64_t seq)
{
	if ((size_t)snprintf(buf, cap, "%s/ckpt-%u-%020" PRIu64 ".dat", dir, shard, seq) >= cap)
		return dxl_err_set(DXL_E_INVAL, "checkpoint path under %s too long", dir);
	return 0;
}

/* the seq of a file name "ckpt-<shard>-<20 digits>.dat", or 0 */
static uint64_t name_seq(const char *name, uint32_t shard)
{
	char pre[32];
	snprintf(pre, sizeof(pre), "ckpt-%u-", shard);
	size_t n = strlen(pre);
	if (strncmp(name, pre, n) != 0 || strlen(name) != n + 20 + 4 ||
	    strcmp(name + n + 20, ".dat") != 0)
		return 0;
	uint64_t seq = 0;
	for (size_t i = n; i < n + 20; i++) {
		if (name[i] < '0' || name[i] > '9')
			return 0;
		seq = seq * 10 + (uint64_t)(name[i] - '0');
	}
	return seq;
}

/* every seq of the shard's checkpoint files in dir, sorted, descending */
static int list_seqs(const char *dir, uint32_t shard, uint64_t **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return dxl_err_errno(errno, "checkpoints: open directory %s", dir);
	size_t cap = 0;
	struct dirent *e;
	int ret = 0;
	while ((e = readdir(d))) {
		uint64_t seq = name_seq(e->d_name, shard);
		if (!seq)
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 8;
			uint64_t *nv = realloc(*out, cap * sizeof(*nv));
			if (!nv) {
				ret = dxl_err_set(DXL_E_NOMEM, "checkpoints");
				break;
			}
			*out = nv;
		}
		(*out)[(*n)++] = seq;
	}
	closedir(d);
	if (ret) {
		free(*out);
		*out = NULL;
		*n = 0;
		return ret;
	}
	for (size_t i = 1; i < *n; i++) /* few files: insertion sort */
		for (size_t j = i; j > 0 && (*out)[j - 1] < (*out)[j]; j--) {
			uint64_t t = (*out)[j];
			(*out)[j] = (*out)[j - 1];
			(*out)[j - 1] = t;
		}
	return 0;
}

/* ---- the manifest ------------------------------------------------------------------- */

static void man_encode(uint8_t *m, const struct dxl_ckpt_info *in,
		       const struct area *a, const struct dxl_log_pos *start)
{
	memset(m, 0, DXL_CKPT_MAN_SIZE);
	memcpy(m, MAN_MAGIC, sizeof(MAN_MAGIC));
	dxl_put_le32(m + 8, MAN_FORMAT);
	dxl_put_le32(m + 12, in->shard);
	dxl_put_le64(m + 16, in->seq);
	dxl_put_le32(m + 24, in->ntables);
	dxl_put_le32(m + 28, in->nrings);
	dxl_put_le64(m + 32, in->ring_size);
	dxl_put_le64(m + 40, in->created_ms);
	dxl_put_le32(m + 48, in->source_node);
	dxl_put_le64(m + 56, in->entries);
	dxl_put_le64(m + 64, in->tombstones);
	dxl_put_le64(m + 72, in->start_ts);
	dxl_put_le64(m + 80, in->digest.records);
	dxl_put_le64(m + 88, in->digest.h[0]);
	dxl_put_le64(m + 96, in->digest.h[1]);
	dxl_put_le64(m + 112, in->digest.t[0]);
	dxl_put_le64(m + 120, in->digest.t[1]);
	uint8_t crcs[4 * DXL_STORE_MAX_TABLES];
	for (uint32_t t = 0; t < in->ntables; t++) {
		uint8_t *e = m + MAN_HDR + MAN_TAB * t;
		dxl_put_le32(e, a[t].sc.id);
		dxl_put_le32(e + 4, a[t].sc.value_size);
		dxl_put_le32(e + 8, a[t].entry_size);
		dxl_put_le64(e + 16, a[t].sc.capacity);
		dxl_put_le64(e + 24, a[t].off);
		dxl_put_le64(e + 32, a[t].count);
		dxl_put_le32(e + 40, a[t].crc);
		dxl_put_le32(crcs + 4 * t, a[t].crc);
		dxl_put_le64(m + MAN_FLOOR_OFF + 8 * t, in->floors[t]);
	}
	for (uint32_t r = 0; r < in->nrings; r++) {
		dxl_put_le64(m + MAN_RINGS_OFF + 16 * r, start[r].pos);
		dxl_put_le64(m + MAN_RINGS_OFF + 16 * r + 8, start[r].seq);
	}
	dxl_put_le32(m + 104, dxl_crc32c(0, crcs, 4 * (size_t)in->ntables));
	dxl_put_le32(m + MAN_CRC_OFF, man_crc(m, MAN_FORMAT, in->ntables, in->nrings));
}

/* the layout of the areas for these tables; returns the data size */
static uint64_t layout(const struct dxl_table_schema *t, unsigned n, struct area *a)
{
	uint64_t off = DXL_CKPT_MAN_SIZE;
	for (unsigned i = 0; i < n; i++) {
		memset(&a[i], 0, sizeof(a[i]));
		a[i].sc = t[i];
		a[i].entry_size = entry_size(t[i].value_size);
		a[i].room = room_of(t[i].capacity);
		a[i].off = off;
		off += DXL_ALIGN_UP(a[i].room * a[i].entry_size, 4096ull);
	}
	return off;
}

static int man_decode(const uint8_t *m, uint64_t data_size, const char *path,
		      struct dxl_ckpt_info *out, struct area *a,
		      struct dxl_log_pos **startp)
{
	static const uint8_t zero[16];
	if (memcmp(m, zero, 16) == 0)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: incomplete checkpoint (no manifest: cut before its commit)",
				   path);
	if (memcmp(m, MAN_MAGIC, sizeof(MAN_MAGIC)) != 0)
		return dxl_err_set(DXL_E_CORRUPT, "%s: not a checkpoint (bad magic)", path);
	uint32_t nrings = dxl_get_le32(m + 28), ntables = dxl_get_le32(m + 24);
	if (nrings == 0 || nrings > DXL_CKPT_MAX_RINGS || ntables == 0 ||
	    ntables > DXL_STORE_MAX_TABLES)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: manifest claims %u tables and %u rings", path,
				   ntables, nrings);
	static __thread uint8_t tmp[DXL_CKPT_MAN_SIZE];
	memcpy(tmp, m, DXL_CKPT_MAN_SIZE);
	memset(tmp + MAN_CRC_OFF, 0, 4);
	uint32_t format = dxl_get_le32(m + 8);
	uint32_t crc = man_crc(tmp, format, ntables, nrings);
	if (crc != dxl_get_le32(m + MAN_CRC_OFF))
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: manifest checksum 0x%08x, computed 0x%08x (a cut or damaged checkpoint)",
				   path, dxl_get_le32(m + MAN_CRC_OFF), crc);
	if (format != 1 && format != MAN_FORMAT)
		return dxl_err_set(DXL_E_VERSION, "%s: checkpoint format %u, this build reads 1..%d",
				   path, format, MAN_FORMAT);
	memset(out, 0, sizeof(*out));
	out->shard = dxl_get_le32(m + 12);
	out->seq = dxl_get_le64(m + 16);
	out->ntables = ntables;
	out->nrings = nrings;
	out->ring_size = dxl_get_le64(m + 32);
	out->created_ms = dxl_get_le64(m + 40);
	out->source_node = dxl_get_le32(m + 48);
	out->entries = dxl_get_le64(m + 56);
	out->tombstones = dxl_get_le64(m + 64);
	out->start_ts = dxl_get_le64(m + 72);
	out->digest.records = dxl_get_le64(m + 80);
	out->digest.h[0] = dxl_get_le64(m + 88);
	out->digest.h[1] = dxl_get_le64(m + 96);
	if (format >= 2) {
		out->digest.t[0] = dxl_get_le64(m + 112);
		out->digest.t[1] = dxl_get_le64(m + 120);
		out->digest.tombstones = out->tombstones;
	}
	struct dxl_table_schema sc[DXL_STORE_MAX_TABLES];
	for (uint32_t t = 0; t < ntables; t++) {
		const uint8_t *e = m + MAN_HDR + MAN_TAB * t;
		sc[t].id = dxl_get_le32(e);
		sc[t].value_size = dxl_get_le32(e + 4);
		sc[t].capacity = dxl_get_le64(e + 16);
	}
	uint64_t off = DXL_CKPT_MAN_SIZE, total = 0;
	uint8_t crcs[4 * DXL_STORE_MAX_TABLES];
	for (uint32_t t = 0; t < ntables; t++) {
		const uint8_t *e = m + MAN_HDR + MAN_TAB * t;
		struct area *x = &a[t];
		memset(x, 0, sizeof(*x));
		x->sc = sc[t];
		x->entry_size = dxl_get_le32(e + 8);
		x->room = room_of(x->sc.capacity);
		x->off = dxl_get_le64(e + 24);
		x->count = dxl_get_le64(e + 32);
		x->crc = dxl_get_le32(e + 40);
		dxl_put_le32(crcs + 4 * t, x->crc);
		if (!dxl_record_slot_size(x->sc.value_size) ||
		    x->entry_size != entry_size(x->sc.value_size) || x->off != off ||
		    x->sc.capacity == 0 || x->sc.capacity > DXL_TABLE_MAX_CAPACITY ||
		    x->count > x->room)
			return dxl_err_set(DXL_E_CORRUPT,
					   "%s: manifest entry of table %u is inconsistent", path,
					   x->sc.id);
		for (uint32_t j = 0; j < t; j++)
			if (a[j].sc.id == x->sc.id)
				return dxl_err_set(DXL_E_CORRUPT, "%s: table %u twice", path,
						   x->sc.id);
		off += DXL_ALIGN_UP(x->room * x->entry_size, 4096ull);
		total += x->count;
		out->tables[t] = x->sc;
		out->counts[t] = x->count;
		out->floors[t] = format >= 2 ? dxl_get_le64(m + MAN_FLOOR_OFF + 8 * t) : 0;
	}
	if (off != data_size)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: tables need %" PRIu64 " bytes, the data area has %" PRIu64,
				   path, off, data_size);
	if (total != out->entries)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: manifest counts %" PRIu64 " entries, its tables %" PRIu64,
				   path, out->entries, total);
	if (dxl_crc32c(0, crcs, 4 * (size_t)ntables) != dxl_get_le32(m + 104))
		return dxl_err_set(DXL_E_CORRUPT, "%s: tables' checksums disagree with the manifest",
				   path);
	struct dxl_log_pos *start = calloc(nrings, sizeof(*start));
	if (!start)
		return dxl_err_set(DXL_E_NOMEM, "checkpoint start position");
	for (uint32_t r = 0; r < nrings; r++) {
		start[r].pos = dxl_get_le64(m + MAN_RINGS_OFF + 16 * r);
		start[r].seq = dxl_get_le64(m + MAN_RINGS_OFF + 16 * r + 8);
	}
	*startp = start;
	return 0;
}

/* ---- the writer ---------------------------------------------------------------------- */

static int hook_crash(struct dxl_ckpt_writer *w)
{
	if (!g_hook || w->crashed)
		return w->crashed ? DXL_E_INTERNAL : 0;
	if (!g_hook(g_hook_arg, w->path, dxl_region_data(w->r),
		    dxl_region_data_size(w->r), 0))
		return 0;
	w->crashed = true;
	return dxl_err_set(DXL_E_INTERNAL, "%s: simulated crash (test hook)", w->path);
}

static int persist(struct dxl_ckpt_writer *w, uint64_t off, uint64_t len)
{
	uint8_t *base = dxl_region_data(w->r);
	dxl_region_persist(w->r, base + off, len);
	if (g_hook && !w->crashed && g_hook(g_hook_arg, w->path, base, off, len)) {
		w->crashed = true;
		return dxl_err_set(DXL_E_INTERNAL, "%s: simulated crash (test hook)", w->path);
	}
	return 0;
}

int dxl_ckpt_writer_new(const char *dir, enum dxl_durability mode,
			const struct dxl_region_id *id, uint32_t shard,
			const struct dxl_table_schema *tables, unsigned ntables,
			uint32_t nrings, uint64_t ring_size,
			const struct dxl_log_pos *start, uint64_t seq,
			uint32_t source_node, struct dxl_ckpt_writer **out)
{
	if (!dir || !id || !tables || !start || !out)
		return dxl_err_set(DXL_E_INVAL, "checkpoint writer: NULL argument");
	*out = NULL;
	if (!dxl_store_bytes(tables, ntables)) {
		dxl_err_prefix("checkpoint of shard %u", shard);
		return DXL_E_INVAL;
	}
	if (nrings == 0 || nrings > DXL_CKPT_MAX_RINGS)
		return dxl_err_set(DXL_E_INVAL, "checkpoint of shard %u: %u rings (1..%d)",
				   shard, nrings, DXL_CKPT_MAX_RINGS);
	if (!seq) {
		uint64_t *seqs;
		size_t n;
		int ret = list_seqs(dir, shard, &seqs, &n);
		if (ret)
			return ret;
		seq = (n ? seqs[0] : 0) + 1;
		free(seqs);
	}
	struct dxl_ckpt_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return dxl_err_set(DXL_E_NOMEM, "checkpoint writer");
	w->start = calloc(nrings, sizeof(*w->start));
	char path[1024];
	int ret = w->start ? dxl_rcv_ckpt_name(path, sizeof(path), dir, shard, seq)
			   : dxl_err_set(DXL_E_NOMEM, "checkpoint writer");
	if (!ret && !(w->path = strdup(path)))
		ret = dxl_err_set(DXL_E_NOMEM, "checkpoint writer");
	if (ret)
		goto fail;
	memcpy(w->start, start, nrings * sizeof(*start));
	w->info.shard = shard;
	w->info.seq = seq;
	w->info.ntables = ntables;
	w->info.nrings = nrings;
	w->info.ring_size = ring_size;
	w->info.source_node = source_node;
	for (unsigned t = 0; t < ntables; t++)
		w->info.tables[t] = tables[t];
	uint64_t bytes = layout(tables, ntables, w->a);
	struct dxl_region_id rid = *id;
	rid.kind = DXL_REGION_CKPT;
	if ((ret = dxl_region_create(w->path, bytes, mode, &rid, &w->r)))
		goto fail;
	*out = w;
	return 0;
fail:
	free(w->start);
	free(w->path);
	free(w);
	return ret;
}

const struct dxl_ckpt_info *dxl_rcv_writer_info(const struct dxl_ckpt_writer *w)
{
	return &w->info;
}

void dxl_rcv_writer_set_start_ts(struct dxl_ckpt_writer *w, uint64_t ts)
{
	w->info.start_ts = ts;
}

int dxl_ckpt_writer_set_floor(struct dxl_ckpt_writer *w, uint32_t table, uint64_t floor)
{
	for (uint32_t t = 0; t < w->info.ntables; t++)
		if (w->info.tables[t].id == table) {
			w->info.floors[t] = floor;
			return 0;
		}
	return dxl_err_set(DXL_E_NOENT, "checkpoint of shard %u: no table %u", w->info.shard,
			   table);
}

const char *dxl_ckpt_writer_path(const struct dxl_ckpt_writer *w)
{
	return w->path;
}

int dxl_ckpt_writer_add(struct dxl_ckpt_writer *w, uint32_t table, uint64_t key,
			uint64_t version, uint64_t ts, const void *value,
			uint32_t len, uint32_t flags)
{
	if (w->crashed)
		return dxl_err_set(DXL_E_INTERNAL, "%s: the writer crashed (test hook)", w->path);
	struct area *a = NULL;
	for (uint32_t t = 0; t < w->info.ntables; t++)
		if (w->a[t].sc.id == table)
			a = &w->a[t];
	if (!a)
		return dxl_err_set(DXL_E_NOENT, "checkpoint of shard %u: no table %u",
				   w->info.shard, table);
	if ((flags != DXL_CKPT_LIVE && flags != DXL_CKPT_TOMBSTONE) ||
	    (flags == DXL_CKPT_TOMBSTONE && len) || !version || (version & 1) ||
	    (len && !value))
		return dxl_err_set(DXL_E_INVAL,
				   "checkpoint entry: table %u key %" PRIu64 " version %" PRIu64
				   " flags %u len %u",
				   table, key, version, flags, len);
	if (len > a->sc.value_size)
		return dxl_err_set(DXL_E_TOOBIG, "checkpoint entry: table %u: %u bytes, value size %u",
				   table, len, a->sc.value_size);
	if (a->count == a->room)
		return dxl_err_set(DXL_E_FULL,
				   "checkpoint of shard %u: table %u has %" PRIu64
				   " entries already (keys moved during the scan: write it again)",
				   w->info.shard, table, a->count);
	uint8_t *e = (uint8_t *)dxl_region_data(w->r) + a->off + a->count * a->entry_size;
	memset(e, 0, a->entry_size);
	dxl_put_le64(e, key);
	dxl_put_le64(e + 8, version);
	dxl_put_le64(e + 16, ts);
	dxl_put_le32(e + 24, len);
	dxl_put_le32(e + 28, flags);
	if (len)
		memcpy(e + DXL_CKPT_ENTRY_HDR, value, len);
	a->crc = dxl_crc32c(a->crc, e, a->entry_size);
	a->count++;
	w->info.entries++;
	if (flags == DXL_CKPT_TOMBSTONE) {
		w->info.tombstones++;
		dxl_digest_add_tombstone(&w->info.digest, table, key, version);
	} else {
		dxl_digest_add(&w->info.digest, table, key, version, value, len);
	}
	if (++w->adds % ADD_CRASH_EVERY == 0)
		return hook_crash(w);
	return 0;
}

static void writer_free(struct dxl_ckpt_writer *w, bool remove)
{
	if (w->r)
		dxl_region_close(&w->r);
	if (remove && w->path) {
		unlink(w->path);
		dxl_rcv_fsync_parent(w->path);
	}
	free(w->start);
	free(w->path);
	free(w);
}

void dxl_ckpt_writer_abort(struct dxl_ckpt_writer **wp)
{
	if (!wp || !*wp)
		return;
	struct dxl_ckpt_writer *w = *wp;
	writer_free(w, !w->crashed);
	*wp = NULL;
}

int dxl_ckpt_writer_commit(struct dxl_ckpt_writer **wp, struct dxl_ckpt_info *info)
{
	if (!wp || !*wp)
		return dxl_err_set(DXL_E_INVAL, "checkpoint commit: no writer");
	struct dxl_ckpt_writer *w = *wp;
	*wp = NULL;
	int ret = w->crashed ? dxl_err_set(DXL_E_INTERNAL, "%s: the writer crashed", w->path)
			     : 0;
	/* 1. the entries, durable before the manifest can name them */
	for (uint32_t t = 0; !ret && t < w->info.ntables; t++)
		if (w->a[t].count)
			ret = persist(w, w->a[t].off, w->a[t].count * w->a[t].entry_size);
	if (!ret)
		ret = hook_crash(w);
	/* 2. the manifest: the commit point */
	w->info.created_ms = dxl_wall_ms();
	if (!ret) {
		static __thread uint8_t m[DXL_CKPT_MAN_SIZE];
		man_encode(m, &w->info, w->a, w->start);
		uint8_t *base = dxl_region_data(w->r);
		/* in two halves, with crash points between (a torn manifest
		 * must fail its checksum) */
		memcpy(base + DXL_CKPT_MAN_SIZE / 2, m + DXL_CKPT_MAN_SIZE / 2,
		       DXL_CKPT_MAN_SIZE / 2);
		ret = hook_crash(w);
		if (!ret) {
			memcpy(base, m, DXL_CKPT_MAN_SIZE / 2);
			ret = hook_crash(w);
		}
		if (!ret)
			ret = persist(w, 0, DXL_CKPT_MAN_SIZE);
	}
	if (!ret && info) {
		*info = w->info;
		for (uint32_t t = 0; t < w->info.ntables; t++)
			info->counts[t] = w->a[t].count;
	}
	if (!ret)
		DXL_INFO("event=checkpoint_written shard=%u seq=%" PRIu64 " entries=%" PRIu64
			 " path=%s",
			 w->info.shard, w->info.seq, w->info.entries, w->path);
	writer_free(w, ret && !w->crashed);
	return ret;
}

/* ---- reading ----------------------------------------------------------------------- */

int dxl_ckpt_open(const char *path, enum dxl_durability mode,
		  const struct dxl_region_id *id, struct dxl_ckpt **out)
{
	if (!path || !out)
		return dxl_err_set(DXL_E_INVAL, "checkpoint open: NULL argument");
	*out = NULL;
	struct dxl_region_id want;
	if (id) {
		want = *id;
		want.kind = DXL_REGION_CKPT;
	}
	struct dxl_ckpt *c = calloc(1, sizeof(*c));
	if (!c)
		return dxl_err_set(DXL_E_NOMEM, "checkpoint open");
	int ret = dxl_region_open(path, mode, id ? &want : NULL, &c->r);
	if (!ret && dxl_region_id(c->r)->kind != DXL_REGION_CKPT)
		ret = dxl_err_set(DXL_E_STALE, "%s: region kind %u, not a checkpoint", path,
				  dxl_region_id(c->r)->kind);
	if (!ret && dxl_region_data_size(c->r) < DXL_CKPT_MAN_SIZE)
		ret = dxl_err_set(DXL_E_CORRUPT, "%s: too small for a checkpoint", path);
	if (!ret)
		ret = man_decode(dxl_region_data(c->r), dxl_region_data_size(c->r), path,
				 &c->info, c->a, &c->start);
	const uint8_t *base = ret ? NULL : dxl_region_data(c->r);
	for (uint32_t t = 0; !ret && t < c->info.ntables; t++) {
		uint32_t crc = dxl_crc32c(0, base + c->a[t].off,
					  c->a[t].count * c->a[t].entry_size);
		if (crc != c->a[t].crc)
			ret = dxl_err_set(DXL_E_CORRUPT,
					  "%s: entries of table %u: checksum 0x%08x, manifest says 0x%08x",
					  path, c->a[t].sc.id, crc, c->a[t].crc);
	}
	if (ret) {
		dxl_ckpt_close(&c);
		return ret;
	}
	*out = c;
	return 0;
}

void dxl_ckpt_close(struct dxl_ckpt **cp)
{
	if (!cp || !*cp)
		return;
	struct dxl_ckpt *c = *cp;
	dxl_region_close(&c->r);
	free(c->start);
	free(c);
	*cp = NULL;
}

const struct dxl_ckpt_info *dxl_ckpt_get_info(const struct dxl_ckpt *c)
{
	return &c->info;
}

const char *dxl_ckpt_path(const struct dxl_ckpt *c)
{
	return dxl_region_path(c->r);
}

int dxl_ckpt_start(const struct dxl_ckpt *c, uint32_t ring, struct dxl_log_pos *out)
{
	if (ring >= c->info.nrings)
		return dxl_err_set(DXL_E_INVAL, "checkpoint: ring %u of %u", ring,
				   c->info.nrings);
	*out = c->start[ring];
	return 0;
}

int dxl_ckpt_foreach(const struct dxl_ckpt *c, dxl_ckpt_entry_fn fn, void *arg)
{
	const uint8_t *base = dxl_region_data(c->r);
	for (uint32_t t = 0; t < c->info.ntables; t++) {
		const struct area *a = &c->a[t];
		for (uint64_t i = 0; i < a->count; i++) {
			const uint8_t *e = base + a->off + i * a->entry_size;
			struct dxl_ckpt_entry x = {
				.table = a->sc.id,
				.key = dxl_get_le64(e),
				.version = dxl_get_le64(e + 8),
				.ts = dxl_get_le64(e + 16),
				.len = dxl_get_le32(e + 24),
				.flags = dxl_get_le32(e + 28),
				.value = e + DXL_CKPT_ENTRY_HDR,
			};
			/* checked by the CRC, but a writer of another build could
			 * have written nonsense: never hand it on */
			if (x.len > a->sc.value_size ||
			    (x.flags != DXL_CKPT_LIVE && x.flags != DXL_CKPT_TOMBSTONE))
				return dxl_err_set(DXL_E_CORRUPT,
						   "%s: table %u entry %" PRIu64 ": len %u flags %u",
						   dxl_ckpt_path(c), a->sc.id, i, x.len, x.flags);
			int ret = fn(arg, &x);
			if (ret)
				return ret;
		}
	}
	return 0;
}

int dxl_ckpt_find(const char *dir, enum dxl_durability mode,
		  const struct dxl_region_id *id, uint32_t shard,
		  struct dxl_ckpt **out, struct dxl_ckpt_scan *scan)
{
	struct dxl_ckpt_scan tmp;
	if (!scan)
		scan = &tmp;
	memset(scan, 0, sizeof(*scan));
	*out = NULL;
	uint64_t *seqs;
	size_t n;
	int ret = list_seqs(dir, shard, &seqs, &n);
	if (ret)
		return ret;
	scan->files = (uint32_t)n;
	for (size_t i = 0; i < n; i++) {
		char path[1024];
		if (dxl_rcv_ckpt_name(path, sizeof(path), dir, shard, seqs[i]))
			continue;
		struct dxl_ckpt *c;
		if (dxl_ckpt_open(path, mode, id, &c)) {
			scan->incomplete++;
			DXL_INFO("event=checkpoint_ignored shard=%u seq=%" PRIu64 " msg=\"%s\"",
				 shard, seqs[i], dxl_errmsg());
			continue;
		}
		if (c->info.shard != shard || c->info.seq != seqs[i]) {
			scan->incomplete++;
			DXL_WARN("event=checkpoint_ignored shard=%u seq=%" PRIu64
				 " msg=\"its manifest says shard %u seq %" PRIu64 "\"",
				 shard, seqs[i], c->info.shard, c->info.seq);
			dxl_ckpt_close(&c);
			continue;
		}
		scan->complete++;
		if (*out) {
			dxl_ckpt_close(&c);
			continue;
		}
		*out = c;
		scan->newest_seq = seqs[i];
	}
	free(seqs);
	if (!*out)
		return dxl_err_set(DXL_E_NOENT, "%s: no complete checkpoint of shard %u (%u files)",
				   dir, shard, scan->files);
	return 0;
}

int dxl_ckpt_prune(const char *dir, enum dxl_durability mode,
		   const struct dxl_region_id *id, uint32_t shard, unsigned keep)
{
	if (keep == 0)
		keep = 1;
	uint64_t *seqs;
	size_t n;
	int ret = list_seqs(dir, shard, &seqs, &n);
	if (ret)
		return ret;
	unsigned kept = 0;
	int removed = 0;
	char path[1024];
	for (size_t i = 0; i < n; i++) {
		if (dxl_rcv_ckpt_name(path, sizeof(path), dir, shard, seqs[i]))
			continue;
		struct dxl_ckpt *c;
		bool ok = dxl_ckpt_open(path, mode, id, &c) == 0;
		dxl_ckpt_close(&c);
		if (ok && kept < keep) {
			kept++;
			continue;
		}
		if (unlink(path) == 0)
			removed++;
	}
	free(seqs);
	/* leftovers of dxl_region_create cut by a crash (ckpt-*.dat.tmp) */
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l > 4 && strcmp(e->d_name + l - 4, ".tmp") == 0) {
			char base[300];
			snprintf(base, sizeof(base), "%.*s", (int)(l - 4), e->d_name);
			if (name_seq(base, shard) && (size_t)snprintf(path, sizeof(path), "%s/%s", dir,
								      e->d_name) < sizeof(path) &&
			    unlink(path) == 0)
				removed++;
		}
	}
	if (d)
		closedir(d);
	if (removed && !dxl_rcv_ckpt_name(path, sizeof(path), dir, shard, 1))
		dxl_rcv_fsync_parent(path);
	dxl_err_clear();
	return removed;
}

/* ---- the fuzzy checkpoint of a local store ---------------------------------------- */

enum { SLOT_TAKEN = 0, SLOT_LOCKED = 1, SLOT_BUSY = 2 };
#define LOCKED_TRIES 5000 /* rounds of 1 ms */

/*
 * One slot of s into w: a live record, or a tombstone at or above the
 * table's floor (below it, every write older than it had left the log
 * before the image's start position was read: the floor rose only once
 * the log's oldest record was past it). The same rule as a transfer's
 * (transfer.c): the slot read consistent, then its lock word 0, then the
 * slot still at that version -- an insert is locked from before it is
 * live until its transaction decides (an abort deletes it, unlogged,
 * before it unlocks), a write-back happens under the lock. SLOT_LOCKED:
 * read it again later. SLOT_BUSY: it stays inconsistent (torn by a
 * crash, awaiting the replay; or written right now): whatever is being
 * written there is a record at or above the start position, which the
 * replay applies -- left out.
 */
static int take_slot(struct dxl_store *s, struct dxl_ckpt_writer *w, uint32_t table,
		     uint64_t slot, uint64_t floor, uint8_t *val)
{
	struct dxl_record r;
	int ret;
	for (int k = 0;; k++) {
		ret = dxl_store_read(s, table, slot, &r, val, DXL_ENGINE_MAX_VALUE);
		if (ret != DXL_E_AGAIN || k == 20)
			break;
		usleep(50);
	}
	if (ret == DXL_E_AGAIN) {
		dxl_err_clear();
		return SLOT_BUSY;
	}
	if (ret)
		return ret;
	bool tomb = !r.live && r.version >= 2 && r.ts >= floor;
	if (!r.live && !tomb)
		return SLOT_TAKEN; /* free, never used, or below the floor */
	if (dxl_store_lock_word(s, table, slot) != 0 ||
	    dxl_record_version(dxl_store_slot_ptr(s, table, slot)) != r.version)
		return SLOT_LOCKED;
	if (r.live)
		return dxl_ckpt_writer_add(w, table, r.key, r.version, r.ts, val, r.len,
					   DXL_CKPT_LIVE);
	if (!dxl_rcv_is_tombstone(s, table, slot, &r))
		return SLOT_TAKEN; /* a superseded one */
	return dxl_ckpt_writer_add(w, table, r.key, r.version, r.ts, NULL, 0, DXL_CKPT_TOMBSTONE);
}


int dxl_ckpt_write(const char *dir, const struct dxl_region_id *id,
		   struct dxl_store *s, const struct dxl_logstore *ls,
		   struct dxl_ckpt_info *info)
{
	if (!dir || !id || !s || !ls)
		return dxl_err_set(DXL_E_INVAL, "checkpoint: NULL argument");
	uint32_t shard = dxl_store_shard(s);
	if (dxl_logstore_shard(ls) != shard)
		return dxl_err_set(DXL_E_CONFIG, "checkpoint: the store is shard %u's, the log shard %u's",
				   shard, dxl_logstore_shard(ls));
	uint32_t nrings = dxl_logstore_nrings(ls);
	struct dxl_log_pos *start = calloc(nrings, sizeof(*start));
	if (!start)
		return dxl_err_set(DXL_E_NOMEM, "checkpoint");
	/* the position, before any slot is read */
	uint64_t start_ts = 0;
	int ret = 0;
	for (uint32_t r = 0; !ret && r < nrings; r++) {
		struct dxl_ring_head h;
		if (!(ret = dxl_logstore_head(ls, r, &h))) {
			start[r].pos = h.pos;
			start[r].seq = h.seq;
			start_ts = DXL_MAX(start_ts, h.last_ts);
		}
	}
	if (!ret)
		ret = dxl_ckpt_write_from(dir, id, s, start, nrings, dxl_logstore_ring_size(ls),
					  start_ts, info);
	free(start);
	return ret;
}

int dxl_ckpt_write_from(const char *dir, const struct dxl_region_id *id,
			struct dxl_store *s, const struct dxl_log_pos *start,
			uint32_t nrings, uint64_t ring_size, uint64_t start_ts,
			struct dxl_ckpt_info *info)
{
	if (!dir || !id || !s || !start)
		return dxl_err_set(DXL_E_INVAL, "checkpoint: NULL argument");
	uint32_t shard = dxl_store_shard(s);
	int ret = 0;
	struct dxl_table_schema sc[DXL_STORE_MAX_TABLES];
	unsigned nt = dxl_store_ntables(s);
	for (unsigned t = 0; t < nt; t++)
		dxl_store_table_at(s, t, &sc[t]);
	struct dxl_ckpt_writer *w = NULL;
	ret = dxl_ckpt_writer_new(dir, dxl_region_durability(dxl_store_region(s)), id, shard, sc,
				  nt, nrings, ring_size, start, 0, id->node_id, &w);
	if (ret)
		return ret;
	dxl_rcv_writer_set_start_ts(w, start_ts);
	/* 2. every slot, as it is now (writers go on). A slot that stays
	 * inconsistent (torn by a crash, awaiting the replay; or a writer in
	 * the middle of it) is left out: whatever is being written there is
	 * a record at or above the heads, which the replay applies. A
	 * tombstone is kept (an older write of its key may still be in the
	 * log from the start position: the replay must pass over it), unless
	 * it is below the table's reclaim floor, read now: then every write
	 * older than it left the log before this started (the floor rose
	 * only once the log's oldest record was past it) */
	static __thread uint8_t val[DXL_ENGINE_MAX_VALUE];
	uint64_t busy = 0, locked = 0, floors[DXL_STORE_MAX_TABLES];
	for (unsigned t = 0; t < nt; t++) {
		floors[t] = dxl_store_reclaim_floor(s, sc[t].id);
		dxl_ckpt_writer_set_floor(w, sc[t].id, floors[t]);
	}
	struct again {
		unsigned t;
		uint64_t slot;
	} *again = NULL;
	size_t nagain = 0, cagain = 0;
	for (unsigned t = 0; !ret && t < nt; t++)
		for (uint64_t slot = 0; !ret && slot < sc[t].capacity; slot++) {
			int k = take_slot(s, w, sc[t].id, slot, floors[t], val);
			if (k == SLOT_LOCKED) {
				if (nagain == cagain) {
					cagain = cagain ? 2 * cagain : 256;
					struct again *na = realloc(again, cagain * sizeof(*na));
					if (!na) {
						ret = dxl_err_set(DXL_E_NOMEM, "checkpoint");
						break;
					}
					again = na;
				}
				again[nagain++] = (struct again){t, slot};
			} else if (k == SLOT_BUSY) {
				busy++;
			} else if (k < 0) {
				ret = k;
			}
		}
	/* the slots that were locked (a transaction holds them: an insert
	 * not decided yet, a write-back coming): again, one at a time, until
	 * free -- an uncommitted insert must never be imaged (an abort
	 * deletes it, unlogged) */
	for (size_t a = 0; !ret && a < nagain; a++) {
		locked++;
		for (unsigned round = 0;; round++) {
			int k = take_slot(s, w, sc[again[a].t].id, again[a].slot, floors[again[a].t],
					  val);
			if (k == SLOT_BUSY)
				busy++;
			if (k != SLOT_LOCKED) {
				ret = k < 0 ? k : 0;
				break;
			}
			if (round >= LOCKED_TRIES) {
				ret = dxl_err_set(DXL_E_TIMEDOUT,
						  "table %u slot %" PRIu64 " stayed locked for %u ms",
						  sc[again[a].t].id, again[a].slot, LOCKED_TRIES);
				break;
			}
			usleep(1000);
		}
	}
	free(again);
	if (ret) {
		dxl_err_prefix("checkpoint of shard %u", shard);
		dxl_ckpt_writer_abort(&w);
		return ret;
	}
	if (busy || locked)
		DXL_INFO("event=checkpoint_busy_skipped shard=%u slots=%" PRIu64 " locked_again=%" PRIu64,
			 shard, busy, locked);
	return dxl_ckpt_writer_commit(&w, info);
}

int dxl_ckpt_covered(const struct dxl_ckpt *c, const struct dxl_logstore *ls,
		     char *why, size_t cap)
{
	if (!c || !ls)
		return dxl_err_set(DXL_E_INVAL, "dxl_ckpt_covered: NULL argument");
	char dummy[8];
	if (!why) {
		why = dummy;
		cap = sizeof(dummy);
	}
	why[0] = 0;
	if (c->info.nrings != dxl_logstore_nrings(ls) ||
	    c->info.ring_size != dxl_logstore_ring_size(ls)) {
		snprintf(why, cap, "the checkpoint has %u rings of %" PRIu64 " bytes, the log %u of %" PRIu64,
			 c->info.nrings, c->info.ring_size, dxl_logstore_nrings(ls),
			 dxl_logstore_ring_size(ls));
		return 0;
	}
	for (uint32_t r = 0; r < c->info.nrings; r++) {
		struct dxl_ring_head h;
		int ret = dxl_logstore_head(ls, r, &h);
		if (ret)
			return ret;
		if (h.pos > c->start[r].pos) {
			snprintf(why, cap,
				 "ring %u: the log starts at %" PRIu64 ", the checkpoint at %" PRIu64
				 " (records it needs were reclaimed)",
				 r, h.pos, c->start[r].pos);
			return 0;
		}
	}
	return 1;
}
