/* install.c -- a checkpoint made the contents of a store (the rebuild path), and the store's "incomplete" mark (include/dxl/recovery.h) */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/recovery.h"
#include "recovery/recovery_internal.h"

/*
 * The image's keys, each at its largest version: what the store must hold
 * afterwards. Open addressing over (table, key).
 */
struct ikey {
	uint64_t key;
	uint64_t version; /* 0 = empty entry (versions are >= 2) */
	uint32_t table;
	uint32_t flags;
	uint32_t vcrc, len;
};

struct imap {
	struct ikey *e;
	uint64_t mask;
};

static struct ikey *imap_slot(const struct imap *m, uint32_t table, uint64_t key)
{
	for (uint64_t i = dxl_table_key_hash(table, key) & m->mask;; i = (i + 1) & m->mask) {
		struct ikey *e = &m->e[i];
		if (!e->version || (e->table == table && e->key == key))
			return e;
	}
}

struct inst {
	struct dxl_store *s;
	struct imap m;
	struct dxl_install_stats *st;
	uint64_t keys;
};

static int note_entry(void *arg, const struct dxl_ckpt_entry *x)
{
	struct inst *in = arg;
	struct ikey *e = imap_slot(&in->m, x->table, x->key);
	if (!e->version)
		in->keys++;
	/* the larger version; at one version a record over a tombstone (as
	 * dxl_state: a free slot can keep a key's version after a crash) */
	if (x->version > e->version ||
	    (x->version == e->version && x->flags == DXL_CKPT_LIVE)) {
		e->table = x->table;
		e->key = x->key;
		e->version = x->version;
		e->flags = x->flags;
		e->len = x->len;
		e->vcrc = x->len ? dxl_crc32c(0, x->value, x->len) : 0;
	}
	return 0;
}

static int apply_entry(void *arg, const struct dxl_ckpt_entry *x)
{
	struct inst *in = arg;
	int ret = dxl_store_apply(in->s, x->table, x->key,
				  x->flags == DXL_CKPT_TOMBSTONE ? DXL_WS_DELETE : DXL_WS_UPDATE,
				  x->version, x->ts, x->len ? x->value : NULL, x->len);
	if (ret < 0) {
		dxl_err_prefix("install: table %u key %" PRIu64 " version %" PRIu64, x->table,
			       x->key, x->version);
		return ret;
	}
	if (ret)
		in->st->written++;
	else
		in->st->unchanged++;
	return 0;
}

/* a tombstone entry of the image: afterwards the store holds its key at
 * that version or a later one (deleted, or written again by a later entry) */
static int check_tomb(void *arg, const struct dxl_ckpt_entry *x)
{
	struct inst *in = arg;
	if (x->flags != DXL_CKPT_TOMBSTONE)
		return 0;
	struct dxl_store_absence a;
	uint64_t slot, v = 0;
	int ret = dxl_store_absence(in->s, x->table, x->key, &a);
	if (ret == 0) {
		v = a.version;
	} else if (ret == DXL_E_EXIST && dxl_store_find(in->s, x->table, x->key, &slot) == 0) {
		struct dxl_record r;
		if (dxl_store_read(in->s, x->table, slot, &r, NULL, 0) == 0)
			v = r.version;
	}
	dxl_err_clear();
	if (v >= x->version)
		return 0;
	return dxl_err_set(DXL_E_CORRUPT,
			   "install: table %u key %" PRIu64 ": the image's tombstone is version %" PRIu64
			   ", the store holds version %" PRIu64
			   " (0: nothing; a full table keeps no tombstone)",
			   x->table, x->key, x->version, v);
}

static int check_tables(struct dxl_store *s, const struct dxl_ckpt_info *ci)
{
	if (ci->shard != dxl_store_shard(s) || ci->ntables != dxl_store_ntables(s))
		return dxl_err_set(DXL_E_CONFIG,
				   "install: the checkpoint is shard %u's with %u tables, the store shard %u's with %u",
				   ci->shard, ci->ntables, dxl_store_shard(s), dxl_store_ntables(s));
	for (uint32_t t = 0; t < ci->ntables; t++) {
		struct dxl_table_schema sc;
		if (dxl_store_schema(s, ci->tables[t].id, &sc) ||
		    sc.value_size != ci->tables[t].value_size ||
		    sc.capacity != ci->tables[t].capacity)
			return dxl_err_set(DXL_E_CONFIG,
					   "install: table %u of the checkpoint (%u bytes x %" PRIu64
					   ") is not the store's",
					   ci->tables[t].id, ci->tables[t].value_size,
					   ci->tables[t].capacity);
	}
	return 0;
}

int dxl_ckpt_install(struct dxl_store *s, const struct dxl_ckpt *c,
		     struct dxl_install_stats *st)
{
	struct dxl_install_stats dummy;
	if (!st)
		st = &dummy;
	memset(st, 0, sizeof(*st));
	if (!s || !c)
		return dxl_err_set(DXL_E_INVAL, "install: NULL argument");
	uint64_t t0 = dxl_now_ms();
	const struct dxl_ckpt_info *ci = dxl_ckpt_get_info(c);
	int ret = check_tables(s, ci);
	if (ret)
		return ret;
	struct inst in = {.s = s, .st = st};
	st->entries = ci->entries;
	/* no tombstone at or above the image's floors may give its slot away
	 * until the node's log decides (dxl_tables_reclaim, once it is a
	 * member): the image's ones protect their keys from the older writes
	 * the replay from its start position brings. Below them: as at the
	 * source (no write older than them is in the log from there on) --
	 * the store's own old ones for keys the image lacks may go */
	uint64_t floor = UINT64_MAX;
	for (uint32_t t = 0; t < ci->ntables; t++)
		floor = DXL_MIN(floor, ci->floors[t]);
	dxl_store_set_reclaim_ts(s, floor);
	struct dxl_store_stats ss;
	if ((ret = dxl_store_stats(s, UINT32_MAX, &ss)))
		return ret;
	static __thread uint8_t val[DXL_ENGINE_MAX_VALUE];
	if (ss.live || ss.torn) {
		/* 1. the image: each key at its largest version */
		uint64_t size = 1024;
		while (size < 2 * ci->entries + 2)
			size <<= 1;
		in.m.mask = size - 1;
		if (!(in.m.e = calloc(size, sizeof(*in.m.e))))
			return dxl_err_set(DXL_E_NOMEM, "install: %" PRIu64 " entries", ci->entries);
		if ((ret = dxl_ckpt_foreach(c, note_entry, &in)))
			goto out;
		st->keys = in.keys;
	}
	/* 2. what the store holds and the image does not: deleted (nothing to
	 *    do in an empty store: a fresh one, the usual case) */
	for (uint32_t t = 0; in.m.e && !ret && t < ci->ntables; t++) {
		uint32_t id = ci->tables[t].id;
		for (uint64_t slot = 0; !ret && slot < ci->tables[t].capacity; slot++) {
			struct dxl_record r;
			int k = dxl_store_read(s, id, slot, &r, val, sizeof(val));
			if (k == DXL_E_AGAIN) {
				/* torn since a crash, reserved for its key: a
				 * delete rewrites it (the image has no such key) */
				if (!dxl_rcv_torn_reserved(s, id, slot))
					continue; /* a free slot the scan freed */
				const uint8_t *p = dxl_store_slot_ptr(s, id, slot);
				r.key = __atomic_load_n((const uint64_t *)(p + 16), __ATOMIC_ACQUIRE);
				r.version = (dxl_record_version(p) | 1) + 1; /* even, past it */
				r.ts = 0;
				r.live = true;
			} else if (k) {
				ret = k;
				break;
			}
			if (!r.live)
				continue;
			struct ikey *e = imap_slot(&in.m, id, r.key);
			if (e->version && e->flags == DXL_CKPT_LIVE)
				continue; /* step 3 writes it */
			ret = dxl_store_apply(s, id, r.key, DXL_WS_DELETE,
					      DXL_MAX(r.version + 2, e->version), r.ts, NULL, 0);
			if (ret > 0) {
				st->removed++;
				ret = 0;
			}
		}
	}
	/* 3. every entry (the larger version of a key wins, in any order);
	 *    the source had no tombstone below its floors: neither has the
	 *    image, nor (by comparisons: dxl_store_reclaim_floor) the store */
	if (!ret)
		ret = dxl_ckpt_foreach(c, apply_entry, &in);
	for (uint32_t t = 0; !ret && t < ci->ntables; t++)
		ret = dxl_store_raise_reclaim_floor(s, ci->tables[t].id, ci->floors[t]);
	/* 4. the store now holds exactly the image: its digest is the image's
	 *    (the manifest's when no key appears twice: then every live entry
	 *    is a live record) */
	if (!ret) {
		struct dxl_digest want = {0}, have;
		uint64_t torn = 0;
		ret = dxl_digest_store_from(s, UINT32_MAX, UINT64_MAX, &have, &torn);
		if (!ret && !in.m.e && have.records == ci->digest.records) {
			want.records = ci->digest.records; /* the live part */
			want.h[0] = ci->digest.h[0];
			want.h[1] = ci->digest.h[1];
		} else if (!ret) {
			if (!in.m.e) { /* keys met twice by a fuzzy scan: the map */
				uint64_t size = 1024;
				while (size < 2 * ci->entries + 2)
					size <<= 1;
				in.m.mask = size - 1;
				if (!(in.m.e = calloc(size, sizeof(*in.m.e))))
					ret = dxl_err_set(DXL_E_NOMEM, "install: %" PRIu64 " entries",
							  ci->entries);
				else
					ret = dxl_ckpt_foreach(c, note_entry, &in);
				st->keys = in.keys;
			}
			for (uint64_t i = 0; !ret && i <= in.m.mask; i++) {
				struct ikey *e = &in.m.e[i];
				if (e->version && e->flags == DXL_CKPT_LIVE)
					dxl_rcv_digest_add_crc(&want, e->table, e->key, e->version,
							       e->vcrc, e->len);
			}
		}
		/* and every tombstone of the image is kept (or superseded) */
		if (!ret && ci->tombstones && dxl_store_keeps_tombstones(s))
			ret = dxl_ckpt_foreach(c, check_tomb, &in);
		if (!ret && (!dxl_digest_equal(&want, &have) || torn)) {
			char a[160], b[160];
			dxl_digest_format(&want, a, sizeof(a));
			dxl_digest_format(&have, b, sizeof(b));
			ret = dxl_err_set(DXL_E_CORRUPT,
					  "install of %s: the store's digest is %s (%" PRIu64
					  " torn), the image's %s (the store held newer records than the image?)",
					  dxl_ckpt_path(c), b, torn, a);
		}
	}
	if (!st->keys && !ret)
		st->keys = ci->entries - ci->tombstones;
out:
	free(in.m.e);
	st->ms = dxl_now_ms() - t0;
	if (ret)
		dxl_err_prefix("shard %u", ci->shard);
	return ret;
}

/* ---- the mark ------------------------------------------------------------------------ */

void dxl_rcv_fsync_parent(const char *path)
{
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", path);
	int dfd = open(dirname(buf), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return;
	if (fsync(dfd) != 0)
		DXL_WARN("fsync of the directory of %s: %s", path, strerror(errno));
	close(dfd);
}

static int mark_path(char *buf, size_t cap, const char *dir, uint32_t shard)
{
	if ((size_t)snprintf(buf, cap, "%s/store-%u.incomplete", dir, shard) >= cap)
		return dxl_err_set(DXL_E_INVAL, "mark path under %s too long", dir);
	return 0;
}

int dxl_rcv_mark_incomplete(const char *dir, uint32_t shard, const char *reason)
{
	char path[1024], tmp[1100], line[160];
	int ret = mark_path(path, sizeof(path), dir, shard);
	if (ret)
		return ret;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int n = snprintf(line, sizeof(line), "reason=%s since_ms=%" PRIu64 "\n",
			 reason && *reason ? reason : "unknown", dxl_wall_ms());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
	if (fd < 0)
		return dxl_err_errno(errno, "mark %s", tmp);
	if (write(fd, line, (size_t)n) != n || fsync(fd) != 0) {
		int e = errno;
		close(fd);
		unlink(tmp);
		return dxl_err_errno(e, "mark %s", tmp);
	}
	close(fd);
	if (rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		return dxl_err_errno(e, "mark %s", path);
	}
	dxl_rcv_fsync_parent(path);
	return 0;
}

int dxl_rcv_mark_clear(const char *dir, uint32_t shard)
{
	char path[1024];
	int ret = mark_path(path, sizeof(path), dir, shard);
	if (ret)
		return ret;
	if (unlink(path) != 0 && errno != ENOENT)
		return dxl_err_errno(errno, "unmark %s", path);
	dxl_rcv_fsync_parent(path);
	return 0;
}

int dxl_rcv_marked(const char *dir, uint32_t shard, char *reason, size_t cap)
{
	char path[1024], line[160] = "";
	if (mark_path(path, sizeof(path), dir, shard))
		return 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	if (!fgets(line, sizeof(line), f))
		line[0] = 0;
	fclose(f);
	if (reason && cap) {
		const char *r = strncmp(line, "reason=", 7) == 0 ? line + 7 : "unknown";
		size_t n = strcspn(r, " \n");
		snprintf(reason, cap, "%.*s", (int)n, r);
	}
	return 1;
}

/* ---- the rebuild at open ----------------------------------------------------------- */

int dxl_rcv_rebuild(const char *dir, enum dxl_durability mode,
		    const struct dxl_region_id *id, uint32_t shard, struct dxl_store *s,
		    const struct dxl_logstore *ls, struct dxl_install_stats *is,
		    uint64_t *seq)
{
	if (!dir || !id || !s || !ls)
		return dxl_err_set(DXL_E_INVAL, "dxl_rcv_rebuild: NULL argument");
	struct dxl_ckpt *c = NULL;
	int ret = dxl_ckpt_find(dir, mode, id, shard, &c, NULL);
	if (ret)
		return ret;
	uint64_t cseq = dxl_ckpt_get_info(c)->seq;
	if (seq)
		*seq = cseq;
	char why[256];
	ret = dxl_ckpt_covered(c, ls, why, sizeof(why));
	if (ret == 0)
		ret = dxl_err_set(DXL_E_STALE, "checkpoint %" PRIu64 " is not covered by the log: %s",
				  cseq, why);
	/* the order that makes a crash safe: install, then unmark */
	if (ret == 1)
		ret = dxl_ckpt_install(s, c, is);
	if (!ret)
		ret = dxl_rcv_mark_clear(dir, shard);
	dxl_ckpt_close(&c);
	return ret;
}
