/* region.c -- persistent memory regions: libpmem2 mappings with a checked superblock */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <libpmem2.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/log.h"
#include "log/log_internal.h"
#include "common/endian.h"

/*
 * Superblock, the first DXL_REGION_HDR_SIZE bytes of the file (little-endian):
 *   0  magic "DXLREGN\0"      48  file size (u64)
 *   8  format version (u32)   56  cluster name (64 bytes, NUL-padded)
 *  12  header size (u32)     120  CRC32C of bytes 0..119 (u32)
 *  16  durability (u32)      124  zero up to the header size
 *  20  node id (u32)
 *  24  kind (u32)
 *  28  reserved, 0
 *  32  creation id (u64)
 *  40  data size (u64)
 */
#define SB_MAGIC "DXLREGN"
#define SB_VERSION 1
#define SB_CRC_OFF 120

/* tests: a posix_fallocate error to return instead of calling it (0: call) */
int dxl_test_fallocate_err;

struct dxl_region {
	char *path;
	int fd;
	struct pmem2_map *map;
	struct pmem2_source *src;
	enum dxl_durability mode;
	struct dxl_region_id id;
	uint8_t *base;
	uint64_t data_size;
	pmem2_persist_fn persist;
	pmem2_memcpy_fn memcpy_fn;
};

static const char *const dur_names[] = {"pmem", "msync", "process"};

const char *dxl_durability_name(enum dxl_durability d)
{
	return (unsigned)d < DXL_ARRAY_SIZE(dur_names) ? dur_names[d] : "unknown";
}

int dxl_durability_parse(const char *s, enum dxl_durability *out)
{
	for (unsigned i = 0; s && i < DXL_ARRAY_SIZE(dur_names); i++) {
		if (strcasecmp(s, dur_names[i]) == 0) {
			*out = (enum dxl_durability)i;
			return 0;
		}
	}
	return dxl_err_set(DXL_E_INVAL,
			   "durability '%s' is not one of pmem, msync, process",
			   s ? s : "(null)");
}

static int check_id(const struct dxl_region_id *id)
{
	if (!id || !id->cluster[0] ||
	    memchr(id->cluster, '\0', sizeof(id->cluster)) == NULL)
		return dxl_err_set(DXL_E_INVAL,
				   "region: cluster name empty or longer than %d bytes",
				   DXL_CLUSTER_NAME_MAX - 1);
	return 0;
}

static void sb_encode(uint8_t *sb, enum dxl_durability mode,
		      const struct dxl_region_id *id, uint64_t data_size)
{
	memset(sb, 0, DXL_REGION_HDR_SIZE);
	memcpy(sb, SB_MAGIC, sizeof(SB_MAGIC));
	dxl_put_le32(sb + 8, SB_VERSION);
	dxl_put_le32(sb + 12, DXL_REGION_HDR_SIZE);
	dxl_put_le32(sb + 16, (uint32_t)mode);
	dxl_put_le32(sb + 20, id->node_id);
	dxl_put_le32(sb + 24, id->kind);
	dxl_put_le64(sb + 32, id->creation_id);
	dxl_put_le64(sb + 40, data_size);
	dxl_put_le64(sb + 48, DXL_REGION_HDR_SIZE + data_size);
	memcpy(sb + 56, id->cluster, strnlen(id->cluster, DXL_CLUSTER_NAME_MAX - 1));
	dxl_put_le32(sb + SB_CRC_OFF, dxl_crc32c(0, sb, SB_CRC_OFF));
}

int dxl_region_sb_decode(const uint8_t *sb, size_t len, const char *path,
			 enum dxl_durability *mode, struct dxl_region_id *id,
			 uint64_t *data_size, uint64_t *file_size)
{
	if (len < DXL_REGION_HDR_SIZE)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: %zu bytes, shorter than a region superblock (%d)",
				   path, len, DXL_REGION_HDR_SIZE);
	if (memcmp(sb, SB_MAGIC, sizeof(SB_MAGIC)) != 0)
		return dxl_err_set(DXL_E_CORRUPT, "%s: not a dxl region (bad magic)",
				   path);
	uint32_t crc = dxl_crc32c(0, sb, SB_CRC_OFF);
	if (crc != dxl_get_le32(sb + SB_CRC_OFF))
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: superblock checksum 0x%08x, computed 0x%08x",
				   path, dxl_get_le32(sb + SB_CRC_OFF), crc);
	if (dxl_get_le32(sb + 8) != SB_VERSION)
		return dxl_err_set(DXL_E_VERSION,
				   "%s: region format version %u, this build reads %u",
				   path, dxl_get_le32(sb + 8), SB_VERSION);
	if (dxl_get_le32(sb + 12) != DXL_REGION_HDR_SIZE)
		return dxl_err_set(DXL_E_CORRUPT, "%s: header size %u, expected %d",
				   path, dxl_get_le32(sb + 12), DXL_REGION_HDR_SIZE);
	uint32_t m = dxl_get_le32(sb + 16);
	if (m > DXL_DUR_PROCESS)
		return dxl_err_set(DXL_E_CORRUPT, "%s: unknown durability %u", path, m);
	if (sb[56 + DXL_CLUSTER_NAME_MAX - 1] != 0)
		return dxl_err_set(DXL_E_CORRUPT, "%s: cluster name not terminated",
				   path);
	*mode = (enum dxl_durability)m;
	memset(id, 0, sizeof(*id));
	memcpy(id->cluster, sb + 56, DXL_CLUSTER_NAME_MAX);
	id->node_id = dxl_get_le32(sb + 20);
	id->kind = dxl_get_le32(sb + 24);
	id->creation_id = dxl_get_le64(sb + 32);
	*data_size = dxl_get_le64(sb + 40);
	*file_size = dxl_get_le64(sb + 48);
	if (*file_size != DXL_REGION_HDR_SIZE + *data_size)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: superblock sizes disagree (file %llu, data %llu)",
				   path, (unsigned long long)*file_size,
				   (unsigned long long)*data_size);
	return 0;
}

static int map_region(struct dxl_region *r)
{
	struct pmem2_config *cfg = NULL;
	if (pmem2_source_from_fd(&r->src, r->fd))
		return dxl_err_set(DXL_E_IO, "%s: pmem2 source: %s", r->path,
				   pmem2_errormsg());
	enum pmem2_granularity g = r->mode == DXL_DUR_PMEM
					   ? PMEM2_GRANULARITY_CACHE_LINE
					   : PMEM2_GRANULARITY_PAGE;
	int ret = pmem2_config_new(&cfg);
	if (!ret)
		ret = pmem2_config_set_required_store_granularity(cfg, g);
	if (!ret)
		ret = pmem2_map_new(&r->map, cfg, r->src);
	if (cfg) /* libpmem2's destructors do not accept NULL */
		pmem2_config_delete(&cfg);
	if (ret) {
		int err = ret == PMEM2_E_GRANULARITY_NOT_SUPPORTED
				  ? dxl_err_set(DXL_E_NOTSUP,
						"%s: durability pmem needs a DAX file on real persistent memory (%s); use msync or process",
						r->path, pmem2_errormsg())
				  : dxl_err_set(DXL_E_IO, "%s: pmem2 map: %s",
						r->path, pmem2_errormsg());
		pmem2_source_delete(&r->src);
		return err;
	}
	r->base = pmem2_map_get_address(r->map);
	r->persist = pmem2_get_persist_fn(r->map);
	r->memcpy_fn = pmem2_get_memcpy_fn(r->map);
	return 0;
}

/* allocate -- give the file `path` (open as fd) all its blocks up to size
 * bytes; a clear error if the filesystem lacks the space */
static int allocate(int fd, const char *path, uint64_t size)
{
	int e = dxl_test_fallocate_err ? dxl_test_fallocate_err
				       : posix_fallocate(fd, 0, (off_t)size);
	if (!e)
		return 0;
	struct statvfs vfs;
	char avail[64] = "unknown";
	if (fstatvfs(fd, &vfs) == 0)
		snprintf(avail, sizeof(avail), "%llu",
			 (unsigned long long)vfs.f_bavail * vfs.f_frsize);
	if (e == ENOSPC || e == EDQUOT || e == EFBIG)
		return dxl_err_set(DXL_E_IO,
				   "region %s: cannot allocate its %llu bytes: %s (%s bytes available on its filesystem); free space or choose smaller rings (log.ring_size, log.writer_slots)",
				   path, (unsigned long long)size, strerror(e), avail);
	return dxl_err_set(DXL_E_IO, "region %s: allocating %llu bytes: %s", path,
			   (unsigned long long)size, strerror(e));
}

static int open_checked(const char *path, enum dxl_durability mode,
			const struct dxl_region_id *expect, struct dxl_region **out)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT
			       ? dxl_err_set(DXL_E_NOENT, "%s: no such region", path)
			       : dxl_err_errno(errno, "region: open %s", path);
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return dxl_err_errno(e, "region: stat %s", path);
	}
	static __thread uint8_t sb[DXL_REGION_HDR_SIZE];
	ssize_t n = st.st_size >= DXL_REGION_HDR_SIZE
			    ? pread(fd, sb, DXL_REGION_HDR_SIZE, 0)
			    : (ssize_t)st.st_size;
	enum dxl_durability m;
	struct dxl_region_id id;
	uint64_t data_size, file_size;
	int ret = dxl_region_sb_decode(sb, n < 0 ? 0 : (size_t)n, path, &m, &id,
				       &data_size, &file_size);
	if (!ret && (uint64_t)st.st_size != file_size)
		ret = dxl_err_set(DXL_E_CORRUPT,
				  "%s: file is %lld bytes, its superblock says %llu (truncated or extended)",
				  path, (long long)st.st_size,
				  (unsigned long long)file_size);
	if (!ret && expect &&
	    (strcmp(id.cluster, expect->cluster) != 0 ||
	     id.node_id != expect->node_id))
		ret = dxl_err_set(DXL_E_STALE,
				  "%s: belongs to cluster '%s' node %u, not cluster '%s' node %u",
				  path, id.cluster, id.node_id, expect->cluster,
				  expect->node_id);
	if (!ret && expect && expect->kind && id.kind != expect->kind)
		ret = dxl_err_set(DXL_E_STALE, "%s: region kind %u, expected %u",
				  path, id.kind, expect->kind);
	if (!ret && m != mode)
		ret = dxl_err_set(DXL_E_CONFIG,
				  "%s: created with durability %s, opened as %s",
				  path, dxl_durability_name(m),
				  dxl_durability_name(mode));
	/* a region an older build left sparse gets its blocks now -- only
	 * once it is known to be the region asked for: a refused open
	 * changes nothing */
	if (!ret && (uint64_t)st.st_blocks * 512 < (uint64_t)st.st_size)
		ret = allocate(fd, path, file_size);
	if (ret) {
		close(fd);
		return ret;
	}
	struct dxl_region *r = calloc(1, sizeof(*r));
	if (!r || !(r->path = strdup(path))) {
		free(r);
		close(fd);
		return dxl_err_set(DXL_E_NOMEM, "region: out of memory");
	}
	r->fd = fd;
	r->mode = m;
	r->id = id;
	r->data_size = data_size;
	if ((ret = map_region(r))) {
		close(fd);
		free(r->path);
		free(r);
		return ret;
	}
	*out = r;
	return 0;
}

int dxl_region_open(const char *path, enum dxl_durability mode,
		    const struct dxl_region_id *expect, struct dxl_region **out)
{
	if (!path || !out || (unsigned)mode > DXL_DUR_PROCESS)
		return dxl_err_set(DXL_E_INVAL, "region open: bad argument");
	*out = NULL;
	return open_checked(path, mode, expect, out);
}

int dxl_region_create(const char *path, uint64_t data_size,
		      enum dxl_durability mode, const struct dxl_region_id *id,
		      struct dxl_region **out)
{
	if (!path || !out || (unsigned)mode > DXL_DUR_PROCESS)
		return dxl_err_set(DXL_E_INVAL, "region create: bad argument");
	*out = NULL;
	int ret = check_id(id);
	if (ret)
		return ret;
	if (data_size == 0 || data_size % 4096 || data_size > (1ull << 44))
		return dxl_err_set(DXL_E_INVAL,
				   "region create %s: data size %llu is not a multiple of 4096 in 4K..16T",
				   path, (unsigned long long)data_size);
	if (access(path, F_OK) == 0)
		return dxl_err_set(DXL_E_EXIST, "%s: region already exists", path);

	char tmp[4096];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return dxl_err_set(DXL_E_INVAL, "region create: path too long");
	unlink(tmp); /* a leftover of a crash during an earlier create */
	int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
	if (fd < 0)
		return dxl_err_errno(errno, "region create: open %s", tmp);
	static __thread uint8_t sb[DXL_REGION_HDR_SIZE];
	/* a region recreated under the same name is another one: a new
	 * random creation id (the data identity, docs/replica.md) */
	struct dxl_region_id idc = *id;
	while (!idc.creation_id &&
	       getrandom(&idc.creation_id, sizeof(idc.creation_id), 0) != sizeof(idc.creation_id))
		;
	sb_encode(sb, mode, &idc, data_size);
	/* every block allocated now: a sparse file would fail its first
	 * store into a hole on a full filesystem with SIGBUS -- in the NIC
	 * thread, for a remote WRITE -- instead of here, with an error */
	if ((ret = allocate(fd, tmp, DXL_REGION_HDR_SIZE + data_size))) {
		close(fd);
		unlink(tmp);
		return ret;
	}
	if (pwrite(fd, sb, DXL_REGION_HDR_SIZE, 0) != DXL_REGION_HDR_SIZE ||
	    fsync(fd) != 0) {
		int e = errno;
		close(fd);
		unlink(tmp);
		return dxl_err_errno(e, "region create: write %s", tmp);
	}
	close(fd);
	if (rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		return dxl_err_errno(e, "region create: rename %s", tmp);
	}
	dxl_fsync_parent(path);
	ret = open_checked(path, mode, id, out);
	if (ret)
		unlink(path); /* e.g. pmem mode on a non-DAX file: leave nothing */
	return ret;
}

void dxl_region_close(struct dxl_region **rp)
{
	if (!rp || !*rp)
		return;
	struct dxl_region *r = *rp;
	pmem2_map_delete(&r->map);
	pmem2_source_delete(&r->src);
	close(r->fd);
	free(r->path);
	free(r);
	*rp = NULL;
}

void *dxl_region_data(const struct dxl_region *r)
{
	return r->base + DXL_REGION_HDR_SIZE;
}

uint64_t dxl_region_data_size(const struct dxl_region *r)
{
	return r->data_size;
}

const struct dxl_region_id *dxl_region_id(const struct dxl_region *r)
{
	return &r->id;
}

enum dxl_durability dxl_region_durability(const struct dxl_region *r)
{
	return r->mode;
}

const char *dxl_region_path(const struct dxl_region *r)
{
	return r->path;
}

static void check_range(const struct dxl_region *r, const void *addr, size_t len)
{
	const uint8_t *a = addr, *d = r->base + DXL_REGION_HDR_SIZE;
	DXL_ASSERTF(a >= d && len <= r->data_size &&
			    (size_t)(a - d) <= r->data_size - len,
		    "%s: persist of [%p, +%zu) outside the data area", r->path,
		    addr, len);
}

/* tests only (log_internal.h): called where written bytes are about to be
 * made durable -- a point where a simulated power failure may strike */
void (*dxl_test_persist_hook)(struct dxl_region *r, const void *addr, size_t len);

void dxl_region_persist(struct dxl_region *r, const void *addr, size_t len)
{
	if (!len)
		return;
	check_range(r, addr, len);
	if (dxl_test_persist_hook)
		dxl_test_persist_hook(r, addr, len);
	if (r->mode == DXL_DUR_PROCESS) {
		/* the stores are in the page cache already; order them */
		atomic_thread_fence(memory_order_seq_cst);
		return;
	}
	r->persist(addr, len); /* clwb+sfence (pmem) or msync (msync) */
}

void dxl_region_memcpy_persist(struct dxl_region *r, void *dst,
			       const void *src, size_t len)
{
	if (!len)
		return;
	check_range(r, dst, len);
	if (r->mode == DXL_DUR_PROCESS) {
		r->memcpy_fn(dst, src, len,
			     PMEM2_F_MEM_NONTEMPORAL | PMEM2_F_MEM_NOFLUSH);
		if (dxl_test_persist_hook)
			dxl_test_persist_hook(r, dst, len);
		atomic_thread_fence(memory_order_seq_cst);
		return;
	}
	/* H4/H7: non-temporal stores, then flush+drain (or msync) */
	r->memcpy_fn(dst, src, len, PMEM2_F_MEM_NONTEMPORAL);
}

void (*dxl_test_fsync_dir_hook)(const char *dir);

void dxl_fsync_parent(const char *path)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", path);
	const char *d = dirname(buf);
	if (dxl_test_fsync_dir_hook)
		dxl_test_fsync_dir_hook(d);
	int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		if (fsync(dfd) != 0)
			DXL_WARN("fsync of the directory of %s: %s", path,
				 strerror(errno));
		close(dfd);
	}
}
