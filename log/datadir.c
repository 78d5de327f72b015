/* datadir.c -- a node's data directory: recorded identity and durability, exclusive lock */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libpmem2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/log.h"
#include "log/log_internal.h"

/*
 * DATADIR/DXL_DATADIR is a small text file, written once at creation
 * (tmp + fsync + rename) and checked at every open:
 *
 *   # dxl data directory -- do not edit
 *   format = 1
 *   cluster = prod
 *   node_id = 3
 *   durability = msync
 *   checksum = 0x1a2b3c4d        (CRC32C of the lines above it)
 *
 * DATADIR/LOCK is held with flock(LOCK_EX) while the directory is open, and
 * holds the owner's pid for error messages.
 */
#define META_NAME "DXL_DATADIR"
#define LOCK_NAME "LOCK"
#define META_FORMAT 1
#define DAX_PROBE ".dax-probe"

struct dxl_datadir {
	char *path;
	int lock_fd;
	enum dxl_durability mode;
};

static int join(char *buf, size_t cap, const char *dir, const char *name)
{
	if (snprintf(buf, cap, "%s/%s", dir, name) >= (int)cap)
		return dxl_err_set(DXL_E_INVAL, "data directory path too long: %s",
				   dir);
	return 0;
}

static int format_meta(char *buf, size_t cap, const char *cluster,
		       uint32_t node_id, enum dxl_durability mode)
{
	int n = snprintf(buf, cap,
			 "# dxl data directory -- do not edit\n"
			 "format = %d\ncluster = %s\nnode_id = %u\ndurability = %s\n",
			 META_FORMAT, cluster, node_id, dxl_durability_name(mode));
	uint32_t crc = dxl_crc32c(0, buf, (size_t)n);
	n += snprintf(buf + n, cap - (size_t)n, "checksum = 0x%08x\n", crc);
	return n;
}

/* parse and check the metadata text; fills the fields it finds */
static int parse_meta(const char *path, char *text, char *cluster, size_t ccap,
		      uint32_t *node_id, enum dxl_durability *mode)
{
	char *cs = strstr(text, "checksum = ");
	if (!cs)
		return dxl_err_set(DXL_E_CORRUPT, "%s: no checksum line", path);
	uint64_t want;
	char *nl = strchr(cs, '\n');
	if (nl)
		*nl = '\0';
	if (dxl_parse_u64(cs + strlen("checksum = "), &want))
		return dxl_err_set(DXL_E_CORRUPT, "%s: bad checksum line", path);
	uint32_t crc = dxl_crc32c(0, text, (size_t)(cs - text));
	if (crc != want)
		return dxl_err_set(DXL_E_CORRUPT,
				   "%s: checksum 0x%08llx, computed 0x%08x (edited or damaged)",
				   path, (unsigned long long)want, crc);
	*cs = '\0';
	int have = 0;
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (line[0] == '#' || !line[0])
			continue;
		char *eq = strstr(line, " = ");
		if (!eq)
			return dxl_err_set(DXL_E_CORRUPT, "%s: bad line '%s'", path, line);
		*eq = '\0';
		const char *k = line, *v = eq + 3;
		uint64_t u;
		if (strcmp(k, "format") == 0) {
			if (dxl_parse_u64(v, &u))
				return dxl_err_set(DXL_E_CORRUPT, "%s: bad format", path);
			if (u != META_FORMAT)
				return dxl_err_set(DXL_E_VERSION,
						   "%s: data directory format %llu, this build reads %d",
						   path, (unsigned long long)u, META_FORMAT);
			have |= 1;
		} else if (strcmp(k, "cluster") == 0) {
			snprintf(cluster, ccap, "%s", v);
			have |= 2;
		} else if (strcmp(k, "node_id") == 0) {
			if (dxl_parse_u64(v, &u) || u > UINT32_MAX)
				return dxl_err_set(DXL_E_CORRUPT, "%s: bad node_id", path);
			*node_id = (uint32_t)u;
			have |= 4;
		} else if (strcmp(k, "durability") == 0) {
			if (dxl_durability_parse(v, mode))
				return dxl_err_set(DXL_E_CORRUPT, "%s: bad durability '%s'",
						   path, v);
			have |= 8;
		}
	}
	if (have != 15)
		return dxl_err_set(DXL_E_CORRUPT, "%s: missing keys", path);
	return 0;
}

/* pmem mode needs DAX: probe with a small file before taking the directory */
static int probe_dax(const char *dir)
{
	char p[4096];
	int ret = join(p, sizeof(p), dir, DAX_PROBE);
	if (ret)
		return ret;
	int fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return dxl_err_errno(errno, "data directory %s: probe", dir);
	struct pmem2_source *src = NULL;
	struct pmem2_config *cfg = NULL;
	struct pmem2_map *map = NULL;
	ret = ftruncate(fd, 1 << 21) ? -1 : pmem2_source_from_fd(&src, fd);
	if (!ret)
		ret = pmem2_config_new(&cfg);
	if (!ret)
		ret = pmem2_config_set_required_store_granularity(
			cfg, PMEM2_GRANULARITY_CACHE_LINE);
	if (!ret)
		ret = pmem2_map_new(&map, cfg, src);
	int err = 0;
	if (ret)
		err = dxl_err_set(DXL_E_NOTSUP,
				  "data directory %s is not on DAX persistent memory, so durability pmem cannot hold (%s); use msync or process",
				  dir, ret == -1 ? strerror(errno) : pmem2_errormsg());
	/* libpmem2's destructors do not accept NULL objects */
	if (map)
		pmem2_map_delete(&map);
	if (cfg)
		pmem2_config_delete(&cfg);
	if (src)
		pmem2_source_delete(&src);
	close(fd);
	unlink(p);
	return err;
}

/* what a crash during the first initialisation can leave behind */
static int leftover(const char *name)
{
	return !strcmp(name, LOCK_NAME) || !strcmp(name, META_NAME ".tmp") ||
	       !strcmp(name, DAX_PROBE);
}

/* 1 if path holds nothing but what an interrupted initialisation leaves
 * (those are removed, LOCK excepted: we hold it) */
static int dir_is_empty(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return 0;
	struct dirent *e;
	int empty = 1;
	while ((e = readdir(d))) {
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    !leftover(e->d_name)) {
			empty = 0;
			break;
		}
	}
	closedir(d);
	if (!empty)
		return 0;
	char p[4096];
	if (!join(p, sizeof(p), path, META_NAME ".tmp"))
		unlink(p);
	if (!join(p, sizeof(p), path, DAX_PROBE))
		unlink(p);
	return 1;
}

static int take_lock(const char *path, int *fd_out)
{
	char p[4096];
	int ret = join(p, sizeof(p), path, LOCK_NAME);
	if (ret)
		return ret;
	int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	if (fd < 0)
		return dxl_err_errno(errno, "data directory %s: lock", path);
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int e = errno;
		char who[32] = "";
		ssize_t n = pread(fd, who, sizeof(who) - 1, 0);
		who[n > 0 ? n : 0] = '\0';
		who[strcspn(who, "\n")] = '\0';
		close(fd);
		if (e == EWOULDBLOCK)
			return dxl_err_set(DXL_E_BUSY,
					   "data directory %s is in use by another process (pid %s)",
					   path, who[0] ? who : "?");
		return dxl_err_errno(e, "data directory %s: flock", path);
	}
	char pid[32];
	int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
		DXL_WARN("data directory %s: cannot record pid in LOCK", path);
	*fd_out = fd;
	return 0;
}

int dxl_datadir_open(const char *path, const char *cluster, uint32_t node_id,
		     enum dxl_durability mode, int create,
		     struct dxl_datadir **out)
{
	if (!path || !cluster || !out || (unsigned)mode > DXL_DUR_PROCESS)
		return dxl_err_set(DXL_E_INVAL, "data directory: bad argument");
	*out = NULL;
	if (!cluster[0] || strlen(cluster) >= DXL_CLUSTER_NAME_MAX ||
	    strpbrk(cluster, "\n/ "))
		return dxl_err_set(DXL_E_INVAL,
				   "cluster name '%s' must be 1..%d characters without '/', spaces or newlines",
				   cluster, DXL_CLUSTER_NAME_MAX - 1);
	struct stat st;
	if (stat(path, &st) != 0) {
		if (errno != ENOENT || !create)
			return errno == ENOENT
				       ? dxl_err_set(DXL_E_NOENT,
						     "data directory %s does not exist",
						     path)
				       : dxl_err_errno(errno, "data directory %s", path);
		if (mkdir(path, 0750) != 0)
			return dxl_err_errno(errno, "data directory: mkdir %s", path);
	} else if (!S_ISDIR(st.st_mode)) {
		return dxl_err_set(DXL_E_INVAL, "%s is not a directory", path);
	}
	/* the directory's entry must survive a power failure before anything
	 * in it is relied on: fsync its parent at every open, not only after
	 * our own mkdir (a run that made it may have died before its fsync;
	 * one fsync of a directory per start is cheap) */
	dxl_fsync_parent(path);

	int lock_fd = -1;
	int ret = take_lock(path, &lock_fd);
	if (ret)
		return ret;

	char meta[4096], text[2048];
	if ((ret = join(meta, sizeof(meta), path, META_NAME)))
		goto err_lock;
	int fd = open(meta, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, text, sizeof(text) - 1);
		close(fd);
		if (n < 0) {
			ret = dxl_err_errno(errno, "data directory: read %s", meta);
			goto err_lock;
		}
		text[n] = '\0';
		char c[DXL_CLUSTER_NAME_MAX] = "";
		uint32_t id = 0;
		enum dxl_durability m = DXL_DUR_MSYNC;
		if ((ret = parse_meta(meta, text, c, sizeof(c), &id, &m)))
			goto err_lock;
		if (strcmp(c, cluster) != 0 || id != node_id) {
			ret = dxl_err_set(DXL_E_STALE,
					  "data directory %s belongs to cluster '%s' node %u, not cluster '%s' node %u",
					  path, c, id, cluster, node_id);
			goto err_lock;
		}
		if (m != mode) {
			ret = dxl_err_set(DXL_E_CONFIG,
					  "data directory %s was created with durability %s, not %s",
					  path, dxl_durability_name(m),
					  dxl_durability_name(mode));
			goto err_lock;
		}
	} else if (errno != ENOENT) {
		ret = dxl_err_errno(errno, "data directory: open %s", meta);
		goto err_lock;
	} else if (!create) {
		ret = dxl_err_set(DXL_E_NOENT,
				  "%s is not an initialised dxl data directory (no %s)",
				  path, META_NAME);
		goto err_lock;
	} else if (!dir_is_empty(path)) {
		ret = dxl_err_set(DXL_E_INVAL,
				  "%s is not empty and not a dxl data directory; refusing to take it over",
				  path);
		goto err_lock;
	} else {
		if (mode == DXL_DUR_PMEM && (ret = probe_dax(path)))
			goto err_lock;
		char tmp[4096 + 8];
		snprintf(tmp, sizeof(tmp), "%s.tmp", meta);
		int n = format_meta(text, sizeof(text), cluster, node_id, mode);
		int wfd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
		if (wfd < 0 || write(wfd, text, (size_t)n) != n || fsync(wfd) != 0 ||
		    rename(tmp, meta) != 0) {
			ret = dxl_err_errno(errno, "data directory: write %s", meta);
			if (wfd >= 0)
				close(wfd);
			unlink(tmp);
			goto err_lock;
		}
		close(wfd);
		dxl_fsync_parent(meta);
	}
	if (mode == DXL_DUR_PMEM && (ret = probe_dax(path)))
		goto err_lock;

	struct dxl_datadir *d = calloc(1, sizeof(*d));
	if (!d || !(d->path = strdup(path))) {
		free(d);
		ret = dxl_err_set(DXL_E_NOMEM, "data directory: out of memory");
		goto err_lock;
	}
	d->lock_fd = lock_fd;
	d->mode = mode;
	*out = d;
	return 0;

err_lock:
	close(lock_fd);
	return ret;
}

void dxl_datadir_close(struct dxl_datadir **dp)
{
	if (!dp || !*dp)
		return;
	close((*dp)->lock_fd); /* releases the flock */
	free((*dp)->path);
	free(*dp);
	*dp = NULL;
}

const char *dxl_datadir_path(const struct dxl_datadir *d)
{
	return d->path;
}

enum dxl_durability dxl_datadir_durability(const struct dxl_datadir *d)
{
	return d->mode;
}
