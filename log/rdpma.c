/* rdpma.c -- remote persistent memory: fat pointers, padding (H5/H6), PWrite (H9) */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dxl/log.h"
#include "log/log_internal.h"

#define RDPMA_MAX_OBJ (16u << 20)

uint32_t dxl_rdpma_padded(uint32_t size)
{
	if (!size || size > RDPMA_MAX_OBJ)
		return 0;
	/* H6/H7: below an XPLine, whole 64 B PCIe words; H5: XPLines above */
	return size < 256 ? DXL_ALIGN_UP(size, 64u) : DXL_ALIGN_UP(size, 256u);
}

const char *dxl_pwrite_mode_name(enum dxl_pwrite_mode m)
{
	switch (m) {
	case DXL_PWRITE_H9:
		return "h9";
	case DXL_PWRITE_STRAWMAN:
		return "strawman";
	case DXL_PWRITE_NOFLUSH:
		return "noflush";
	}
	return "unknown";
}

/* ---- heap ---------------------------------------------------------------- */

struct size_class {
	uint32_t len;
	uint64_t *free; /* offsets of free objects of this padded length */
	size_t n, cap;
};

/* live allocations: open addressing, key = offset + 1 (0 = empty) */
struct live {
	uint64_t key;
	uint32_t len;
};

struct dxl_rdpma_heap {
	struct dxl_mr *mr;
	uint8_t *base; /* the MR's start */
	uint64_t off, len;
	uint64_t bump; /* next never-used offset, relative to base */
	uint64_t used;
	struct size_class *cls;
	size_t ncls;
	struct live *live;
	size_t live_cap, live_n;
};

int dxl_rdpma_heap_new(struct dxl_mr *mr, uint64_t off, uint64_t len,
		       struct dxl_rdpma_heap **out)
{
	*out = NULL;
	if (!mr || !len || off % 256 || off > dxl_mr_len(mr) ||
	    len > dxl_mr_len(mr) - off)
		return dxl_err_set(DXL_E_INVAL,
				   "rdpma heap: [%llu, +%llu) is not a 256-aligned range of the %zu-byte region",
				   (unsigned long long)off, (unsigned long long)len,
				   mr ? dxl_mr_len(mr) : 0);
	if ((uintptr_t)dxl_mr_addr(mr) % 256)
		return dxl_err_set(DXL_E_INVAL, "rdpma heap: region not 256-aligned");
	struct dxl_rdpma_heap *h = calloc(1, sizeof(*h));
	if (!h)
		return dxl_err_set(DXL_E_NOMEM, "rdpma heap: out of memory");
	h->mr = mr;
	h->base = dxl_mr_addr(mr);
	h->off = off;
	h->len = len;
	h->bump = off;
	h->live_cap = 1024;
	h->live = calloc(h->live_cap, sizeof(*h->live));
	if (!h->live) {
		free(h);
		return dxl_err_set(DXL_E_NOMEM, "rdpma heap: out of memory");
	}
	*out = h;
	return 0;
}

void dxl_rdpma_heap_delete(struct dxl_rdpma_heap **hp)
{
	if (!hp || !*hp)
		return;
	struct dxl_rdpma_heap *h = *hp;
	for (size_t i = 0; i < h->ncls; i++)
		free(h->cls[i].free);
	free(h->cls);
	free(h->live);
	free(h);
	*hp = NULL;
}

uint64_t dxl_rdpma_heap_used(const struct dxl_rdpma_heap *h)
{
	return h->used;
}

static size_t live_slot(const struct dxl_rdpma_heap *h, uint64_t key)
{
	uint64_t x = key * 0x9e3779b97f4a7c15ull;
	return (size_t)(x >> 20) & (h->live_cap - 1);
}

static struct live *live_find(struct dxl_rdpma_heap *h, uint64_t off)
{
	uint64_t key = off + 1;
	for (size_t i = live_slot(h, key);; i = (i + 1) & (h->live_cap - 1)) {
		if (h->live[i].key == key)
			return &h->live[i];
		if (h->live[i].key == 0)
			return NULL;
	}
}

static int live_put(struct dxl_rdpma_heap *h, uint64_t off, uint32_t len);

static int live_grow(struct dxl_rdpma_heap *h)
{
	struct live *old = h->live;
	size_t oc = h->live_cap;
	h->live = calloc(oc * 2, sizeof(*h->live));
	if (!h->live) {
		h->live = old;
		return dxl_err_set(DXL_E_NOMEM, "rdpma heap: out of memory");
	}
	h->live_cap = oc * 2;
	h->live_n = 0;
	for (size_t i = 0; i < oc; i++)
		if (old[i].key)
			live_put(h, old[i].key - 1, old[i].len);
	free(old);
	return 0;
}

static int live_put(struct dxl_rdpma_heap *h, uint64_t off, uint32_t len)
{
	if ((h->live_n + 1) * 2 > h->live_cap) {
		int ret = live_grow(h);
		if (ret)
			return ret;
	}
	uint64_t key = off + 1;
	size_t i = live_slot(h, key);
	while (h->live[i].key)
		i = (i + 1) & (h->live_cap - 1);
	h->live[i].key = key;
	h->live[i].len = len;
	h->live_n++;
	return 0;
}

/* backward-shift deletion keeps probe chains intact */
static void live_del(struct dxl_rdpma_heap *h, struct live *e)
{
	size_t i = (size_t)(e - h->live);
	size_t j = i;
	for (;;) {
		j = (j + 1) & (h->live_cap - 1);
		if (!h->live[j].key)
			break;
		size_t k = live_slot(h, h->live[j].key);
		/* move j back to i unless its home lies cyclically in (i, j] */
		if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
			h->live[i] = h->live[j];
			i = j;
		}
	}
	h->live[i].key = 0;
	h->live_n--;
}

static struct size_class *class_of(struct dxl_rdpma_heap *h, uint32_t len,
				   int create)
{
	for (size_t i = 0; i < h->ncls; i++)
		if (h->cls[i].len == len)
			return &h->cls[i];
	if (!create)
		return NULL;
	struct size_class *c = realloc(h->cls, (h->ncls + 1) * sizeof(*c));
	if (!c)
		return NULL;
	h->cls = c;
	c = &h->cls[h->ncls++];
	memset(c, 0, sizeof(*c));
	c->len = len;
	return c;
}

static void fill(const struct dxl_rdpma_heap *h, uint64_t off, uint32_t len,
		 struct dxl_fatptr *out)
{
	struct dxl_mr_desc d;
	dxl_mr_desc(h->mr, &d);
	out->addr = d.addr + off;
	out->len = len;
	out->rkey = d.rkey;
	out->node = d.node;
}

int dxl_rdpma_alloc(struct dxl_rdpma_heap *h, uint32_t size,
		    struct dxl_fatptr *out)
{
	if (!size)
		return dxl_err_set(DXL_E_INVAL, "rdpma alloc: size 0");
	uint32_t len = dxl_rdpma_padded(size);
	if (!len)
		return dxl_err_set(DXL_E_TOOBIG,
				   "rdpma alloc: %u bytes over the %u-byte object limit",
				   size, RDPMA_MAX_OBJ);
	struct size_class *c = class_of(h, len, 0);
	uint64_t off;
	if (c && c->n) {
		off = c->free[--c->n];
	} else {
		uint64_t align = len < 256 ? 64 : 256;
		off = DXL_ALIGN_UP(h->bump, align);
		if (off + len > h->off + h->len)
			return dxl_err_set(DXL_E_FULL,
					   "rdpma alloc: heap of %llu bytes full (%llu in use)",
					   (unsigned long long)h->len,
					   (unsigned long long)h->used);
		h->bump = off + len;
	}
	int ret = live_put(h, off, len);
	if (ret)
		return ret;
	h->used += len;
	fill(h, off, len, out);
	return 0;
}

int dxl_rdpma_free(struct dxl_rdpma_heap *h, const struct dxl_fatptr *fp)
{
	struct dxl_mr_desc d;
	dxl_mr_desc(h->mr, &d);
	if (!fp || fp->rkey != d.rkey || fp->addr < d.addr + h->off ||
	    fp->addr >= d.addr + h->off + h->len)
		return dxl_err_set(DXL_E_INVAL,
				   "rdpma free: pointer not from this heap");
	uint64_t off = fp->addr - d.addr;
	struct live *e = live_find(h, off);
	if (!e || e->len != fp->len)
		return dxl_err_set(DXL_E_INVAL,
				   "rdpma free: %#llx (+%u) is not a live allocation (double free?)",
				   (unsigned long long)fp->addr, fp->len);
	struct size_class *c = class_of(h, e->len, 1);
	if (!c)
		return dxl_err_set(DXL_E_NOMEM, "rdpma free: out of memory");
	if (c->n == c->cap) {
		size_t nc = c->cap ? c->cap * 2 : 16;
		uint64_t *f = realloc(c->free, nc * sizeof(*f));
		if (!f)
			return dxl_err_set(DXL_E_NOMEM, "rdpma free: out of memory");
		c->free = f;
		c->cap = nc;
	}
	c->free[c->n++] = off;
	h->used -= e->len;
	live_del(h, e);
	return 0;
}

/* ---- one-sided operations ------------------------------------------------- */

static int check_range(const struct dxl_fatptr *fp, uint64_t off, uint32_t len)
{
	if (!fp || !len || off > fp->len || len > fp->len - off)
		return dxl_err_set(DXL_E_INVAL,
				   "rdpma: [%llu, +%u) outside the %u-byte object",
				   (unsigned long long)off, len, fp ? fp->len : 0);
	return 0;
}

int dxl_rdpma_pwrite_chain(struct dxl_wr wr[2], const struct dxl_fatptr *fp,
			   uint64_t off, const void *src, uint32_t len,
			   uint32_t lkey, uint64_t flush_raddr,
			   uint32_t flush_rkey, void *flush_dst,
			   uint32_t flush_lkey, uint64_t wr_id)
{
	int ret = check_range(fp, off, len);
	if (ret)
		return ret;
	memset(wr, 0, 2 * sizeof(*wr));
	wr[0].wr_id = wr_id;
	wr[0].op = DXL_WR_WRITE;
	wr[0].local = (void *)src;
	wr[0].len = len;
	wr[0].lkey = lkey;
	wr[0].remote_addr = fp->addr + off;
	wr[0].rkey = fp->rkey;
	wr[0].next = &wr[1];
	/* H9: 000 L665 -- a READ after a WRITE on one QP flushes the WRITE;
	 * only its completion is waited for */
	wr[1].wr_id = wr_id;
	wr[1].op = DXL_WR_READ;
	wr[1].flags = DXL_WR_SIGNALED;
	wr[1].local = flush_dst;
	wr[1].len = 8;
	wr[1].lkey = flush_lkey;
	wr[1].remote_addr = flush_raddr;
	wr[1].rkey = flush_rkey;
	return 2;
}

#define SYNC_WRID 0x5244504d41000000ull /* "RDPMA" */

static int wc_err(const struct dxl_wc *wc)
{
	switch (wc->status) {
	case DXL_WC_SUCCESS:
		return 0;
	case DXL_WC_REM_ACCESS_ERR:
		return dxl_err_set(DXL_E_ACCESS, "rdpma: remote access error");
	case DXL_WC_PEER_UNREACHABLE:
		return dxl_err_set(DXL_E_UNREACHABLE, "rdpma: peer unreachable");
	case DXL_WC_FLUSHED:
		return dxl_err_set(DXL_E_STATE, "rdpma: QP in the error state");
	default:
		return dxl_err_set(DXL_E_IO, "rdpma: completion %s",
				   dxl_wc_status_str(wc->status));
	}
}

int dxl_log_post_wait(struct dxl_qp *qp, struct dxl_wr *chain, uint64_t wr_id)
{
	int ret = dxl_qp_post(qp, chain, NULL);
	if (ret)
		return ret;
	struct dxl_ctx *c = dxl_qp_ctx(qp);
	for (;;) {
		struct dxl_wc wc;
		int n = dxl_ctx_poll(c, &wc, 1);
		if (n < 0)
			return n;
		if (n == 0) {
			dxl_ctx_wait(c, 100);
			continue;
		}
		if (wc.wr_id != wr_id)
			return dxl_err_set(DXL_E_STATE,
					   "rdpma: foreign completion (wr_id %#llx) reaped while waiting",
					   (unsigned long long)wc.wr_id);
		return wc_err(&wc);
	}
}

int dxl_rdpma_read(struct dxl_qp *qp, const struct dxl_fatptr *fp,
		   uint64_t off, void *dst, uint32_t len, uint32_t lkey)
{
	int ret = check_range(fp, off, len);
	if (ret)
		return ret;
	struct dxl_wr wr = {.wr_id = SYNC_WRID, .op = DXL_WR_READ,
			    .flags = DXL_WR_SIGNALED, .local = dst, .len = len,
			    .lkey = lkey, .remote_addr = fp->addr + off,
			    .rkey = fp->rkey};
	return dxl_log_post_wait(qp, &wr, SYNC_WRID);
}

int dxl_rdpma_write(struct dxl_qp *qp, const struct dxl_fatptr *fp,
		    uint64_t off, const void *src, uint32_t len, uint32_t lkey)
{
	int ret = check_range(fp, off, len);
	if (ret)
		return ret;
	struct dxl_wr wr = {.wr_id = SYNC_WRID, .op = DXL_WR_WRITE,
			    .flags = DXL_WR_SIGNALED, .local = (void *)src,
			    .len = len, .lkey = lkey,
			    .remote_addr = fp->addr + off, .rkey = fp->rkey};
	return dxl_log_post_wait(qp, &wr, SYNC_WRID);
}

int dxl_rdpma_cas(struct dxl_qp *qp, uint64_t raddr, uint32_t rkey,
		  uint64_t compare, uint64_t swap, uint64_t *old, void *scratch,
		  uint32_t scratch_lkey)
{
	struct dxl_wr wr = {.wr_id = SYNC_WRID, .op = DXL_WR_CAS,
			    .flags = DXL_WR_SIGNALED, .local = scratch, .len = 8,
			    .lkey = scratch_lkey, .remote_addr = raddr, .rkey = rkey,
			    .compare_add = compare, .swap = swap};
	int ret = dxl_log_post_wait(qp, &wr, SYNC_WRID);
	if (!ret && old)
		memcpy(old, scratch, 8);
	return ret;
}

int dxl_rdpma_pwrite(struct dxl_qp *qp, const struct dxl_fatptr *fp,
		     uint64_t off, const void *src, uint32_t len, uint32_t lkey,
		     enum dxl_pwrite_mode mode, void *scratch,
		     uint32_t scratch_lkey)
{
	struct dxl_wr wr[2];
	/* the flush READ reads the first word of the object just written */
	int ret = dxl_rdpma_pwrite_chain(wr, fp, off, src, len, lkey, fp->addr,
					 fp->rkey, scratch, scratch_lkey,
					 SYNC_WRID);
	if (ret < 0)
		return ret;
	switch (mode) {
	case DXL_PWRITE_H9:
		return dxl_log_post_wait(qp, wr, SYNC_WRID);
	case DXL_PWRITE_STRAWMAN:
		wr[0].flags = DXL_WR_SIGNALED;
		wr[0].next = NULL;
		if ((ret = dxl_log_post_wait(qp, &wr[0], SYNC_WRID)))
			return ret;
		return dxl_log_post_wait(qp, &wr[1], SYNC_WRID);
	case DXL_PWRITE_NOFLUSH:
		wr[0].flags = DXL_WR_SIGNALED;
		wr[0].next = NULL;
		return dxl_log_post_wait(qp, &wr[0], SYNC_WRID);
	}
	return dxl_err_set(DXL_E_INVAL, "rdpma pwrite: bad mode %d", (int)mode);
}
