/* persist.c -- the replica's persister: remote WRITEs made durable by its CPU */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common.h"
#include "common/endian.h"
#include "dxl/log.h"
#include "log/log_internal.h"

/*
 * Who may call: dxl_logstore_persist_step from one thread at a time per
 * logstore (the persister thread, or a test); it runs concurrently with the
 * NIC (remote WRITEs into the rings) and with the replica's own CPU (head
 * slots). It writes only CPU-owned words (H8): the confirmation line, and a
 * no-op locked RMW on the first word of each ring-buffer page it persists
 * (ring buffers hold remote WRITEs only, never NIC atomics, so an atomic
 * "or 0" there cannot lose an update) and on the confirmation line.
 *
 * Why the RMW: a NIC (or rxe, in the kernel) writes pinned pages without
 * marking them dirty, so msync of a page the CPU has not written since its
 * last writeback writes nothing. Measured in the Soft-RoCE guest on ext4:
 * RDMA WRITE + flush READ + msync -> the disk still has the old bytes
 * (O_DIRECT read); with the RMW before the msync -> the new bytes.
 */

#define PREQ_MAGIC 0x5145525354535044ull  /* "DPSTSREQ" */
#define PDONE_MAGIC 0x454e4f4454535044ull /* "DPSTDONE" */

int dxl_persist_needed(enum dxl_durability d, enum dxl_fabric_provider p)
{
	return d == DXL_DUR_MSYNC && p == DXL_FABRIC_VERBS;
}

static uint64_t mix(uint64_t x)
{
	/* splitmix64's finaliser */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t preq_check(uint64_t id, uint64_t from, uint64_t to)
{
	return mix(id ^ mix(from ^ mix(to ^ PREQ_MAGIC)));
}

void dxl_ring_preq_encode(const struct dxl_persist_req *r, void *buf)
{
	uint8_t *b = buf;
	dxl_put_le64(b, r->id);
	dxl_put_le64(b + 8, r->from);
	dxl_put_le64(b + 16, r->to);
	dxl_put_le64(b + 24, preq_check(r->id, r->from, r->to));
}

int dxl_ring_preq_decode(const void *buf, struct dxl_persist_req *out)
{
	const uint8_t *b = buf;
	uint64_t id = dxl_get_le64(b), from = dxl_get_le64(b + 8),
		 to = dxl_get_le64(b + 16);
	if (id == 0 || dxl_get_le64(b + 24) != preq_check(id, from, to))
		return -1;
	out->id = id;
	out->from = from;
	out->to = to;
	return 0;
}

int dxl_ring_pdone_decode(const void *line, uint64_t *done)
{
	const uint8_t *b = line;
	uint64_t d = dxl_get_le64(b + 8);
	*done = dxl_get_le64(b + 16) == (d ^ PDONE_MAGIC) ? d : 0;
	return dxl_get_le64(b) == DXL_RING_PERSISTER_ON;
}

static uint8_t *ctl_of(struct dxl_logstore *ls, uint32_t ring)
{
	return (uint8_t *)dxl_region_data(dxl_logstore_region(ls)) +
	       dxl_logstore_ctl_off(ls, ring);
}

/* 8-byte words of the lines the NIC reads while the CPU writes them */
static void store64(uint8_t *p, uint64_t v)
{
	__atomic_store_n((uint64_t *)(void *)p, htole64(v), __ATOMIC_RELEASE);
}

void dxl_logstore_persister_mark(struct dxl_logstore *ls, int on)
{
	struct dxl_region *r = dxl_logstore_region(ls);
	for (uint32_t i = 0; i < dxl_logstore_nrings(ls); i++) {
		uint8_t *line = ctl_of(ls, i) + DXL_RING_PDONE_OFF;
		uint64_t done;
		if (dxl_ring_pdone_decode(line, &done) == !!on)
			continue; /* already so (one msync per ring saved) */
		store64(line, on ? DXL_RING_PERSISTER_ON : 0);
		dxl_region_persist(r, line, DXL_RING_PLINE_SIZE);
	}
}

/* make the kernel see the page holding p dirty: a locked no-op RMW */
static void touch(void *p)
{
#if defined(__x86_64__)
	__asm__ volatile("lock orq $0, %0" : "+m"(*(uint64_t *)p) : : "memory");
#else
	/* a CAS of the value with itself still writes (compilers may turn an
	 * idempotent fetch_or into a plain load) */
	uint64_t v = __atomic_load_n((uint64_t *)p, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n((uint64_t *)p, &v, v, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
#endif
}

static dxl_persist_hook_fn g_hook;
static void *g_hook_arg;

void dxl_persist_set_test_hook(dxl_persist_hook_fn fn, void *arg)
{
	g_hook = fn;
	g_hook_arg = arg;
}

static void persist(struct dxl_region *r, uint32_t ring, const void *addr,
		    size_t len)
{
	dxl_region_persist(r, addr, len);
	if (g_hook)
		g_hook(ring, addr, len, g_hook_arg);
}

/* touch and persist buffer bytes [off, off + len) of a ring (page-aligned
 * buffer, so every touched word is a ring-buffer word) */
static void persist_piece(struct dxl_region *r, uint32_t ring, uint8_t *buf,
			  uint64_t off, uint64_t len)
{
	if (!len)
		return;
	for (uint64_t pg = off & ~4095ull; pg < off + len; pg += 4096)
		touch(buf + pg);
	persist(r, ring, buf + off, len);
}

static int serve(struct dxl_logstore *ls, uint32_t ring, uint64_t *last,
		 struct dxl_persist_stats *st)
{
	uint8_t *ctl = ctl_of(ls, ring);
	const uint64_t size = dxl_logstore_ring_size(ls);
	struct dxl_region *r = dxl_logstore_region(ls);
	uint8_t req[DXL_RING_PREQ_SIZE];
	/* word by word (the NIC may be writing it: the check catches a mix) */
	for (int w = 0; w < DXL_RING_PREQ_SIZE / 8; w++) {
		uint64_t v = __atomic_load_n((const uint64_t *)(const void *)
						     (ctl + DXL_RING_PREQ_OFF + 8 * w),
					     __ATOMIC_ACQUIRE);
		memcpy(req + 8 * w, &v, 8);
	}
	struct dxl_persist_req q;
	if (dxl_ring_preq_decode(req, &q)) {
		/* never written, or being written right now */
		if (memcmp(req, (uint8_t[DXL_RING_PREQ_SIZE]){0}, sizeof(req)))
			st->torn++;
		return 0;
	}
	/* what this ring says is confirmed, not what we remember: a state
	 * transfer (dxl_xfer_pull) or a restart may have changed the
	 * line. Serving a request again is harmless; never serving one (a
	 * remembered id above the writers' ids) would stall them. The mark
	 * is re-asserted too. */
	uint64_t done;
	if (!dxl_ring_pdone_decode(ctl + DXL_RING_PDONE_OFF, &done)) {
		store64(ctl + DXL_RING_PDONE_OFF, DXL_RING_PERSISTER_ON);
		dxl_region_persist(r, ctl + DXL_RING_PDONE_OFF, DXL_RING_PLINE_SIZE);
	}
	if (q.id <= done)
		return 0;
	uint8_t *buf = ctl + DXL_RING_CTL_SIZE;
	if (q.to < q.from || q.to - q.from >= size) {
		/* a lap or more (an opening writer's whole ring), or nonsense:
		 * the whole buffer */
		persist_piece(r, ring, buf, 0, size);
		st->bytes += size;
	} else {
		uint64_t off = q.from % size, len = q.to - q.from;
		uint64_t first = DXL_MIN(len, size - off);
		persist_piece(r, ring, buf, off, first);
		persist_piece(r, ring, buf, 0, len - first);
		st->bytes += len;
	}
	/* the control block: watermark, owner word (the NIC's: not touched;
	 * the confirmation line is ours and on the same page) */
	touch(ctl + DXL_RING_PDONE_OFF + 8);
	persist(r, ring, ctl, DXL_RING_CTL_SIZE);
	/* only now: confirmed (the id word is checked against the second) */
	store64(ctl + DXL_RING_PDONE_OFF + 8, q.id);
	store64(ctl + DXL_RING_PDONE_OFF + 16, q.id ^ PDONE_MAGIC);
	*last = q.id;
	st->requests++;
	return 1;
}

int dxl_logstore_persist_step(struct dxl_logstore *ls, uint64_t *last,
			      struct dxl_persist_stats *st)
{
	int n = 0;
	for (uint32_t i = 0; i < dxl_logstore_nrings(ls); i++)
		n += serve(ls, i, &last[i], st);
	st->rounds++;
	return n;
}

/* ---- the thread --------------------------------------------------------------- */

struct dxl_persister {
	struct dxl_logstore *ls;
	pthread_t th;
	atomic_bool stop;
	atomic_bool paused;
	atomic_bool parked; /* the thread saw `paused` and does nothing */
	uint64_t *last;
	pthread_mutex_t mu; /* guards st for readers */
	struct dxl_persist_stats st;
};

static void nap_us(unsigned us)
{
	struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static void *persister_main(void *arg)
{
	struct dxl_persister *p = arg;
	unsigned idle_us = 20;
	while (!atomic_load(&p->stop)) {
		/* cleared before `paused` is looked at: a pause that sees
		 * parked == true knows no pass can start any more */
		atomic_store(&p->parked, false);
		if (atomic_load(&p->paused)) {
			atomic_store(&p->parked, true);
			nap_us(200);
			continue;
		}
		struct dxl_persist_stats st;
		pthread_mutex_lock(&p->mu);
		st = p->st;
		pthread_mutex_unlock(&p->mu);
		int n = dxl_logstore_persist_step(p->ls, p->last, &st);
		pthread_mutex_lock(&p->mu);
		p->st = st;
		pthread_mutex_unlock(&p->mu);
		if (n) {
			idle_us = 20; /* busy: look again at once, then soon */
			continue;
		}
		nap_us(idle_us);
		idle_us = DXL_MIN(idle_us * 2, 1000u);
	}
	return NULL;
}

int dxl_persister_start(struct dxl_logstore *ls, struct dxl_persister **out)
{
	*out = NULL;
	struct dxl_persister *p = calloc(1, sizeof(*p));
	uint32_t n = dxl_logstore_nrings(ls);
	if (p)
		p->last = calloc(n, sizeof(*p->last));
	if (!p || !p->last) {
		free(p);
		return dxl_err_set(DXL_E_NOMEM, "persister: out of memory");
	}
	p->ls = ls;
	atomic_init(&p->stop, false);
	atomic_init(&p->paused, false);
	atomic_init(&p->parked, false);
	pthread_mutex_init(&p->mu, NULL);
	/* requests already confirmed (by a previous run) are not served again;
	 * a new writer's ids start above them */
	for (uint32_t i = 0; i < n; i++)
		dxl_ring_pdone_decode(ctl_of(ls, i) + DXL_RING_PDONE_OFF, &p->last[i]);
	dxl_logstore_persister_mark(ls, 1);
	int e = pthread_create(&p->th, NULL, persister_main, p);
	if (e) {
		pthread_mutex_destroy(&p->mu);
		free(p->last);
		free(p);
		return dxl_err_errno(e, "persister: pthread_create");
	}
	DXL_INFO("event=persister_started shard=%u rings=%u region=%s",
		 dxl_logstore_shard(ls), n,
		 dxl_region_path(dxl_logstore_region(ls)));
	*out = p;
	return 0;
}

void dxl_persister_stop(struct dxl_persister **pp)
{
	if (!pp || !*pp)
		return;
	struct dxl_persister *p = *pp;
	atomic_store(&p->stop, true);
	pthread_join(p->th, NULL);
	pthread_mutex_destroy(&p->mu);
	free(p->last);
	free(p);
	*pp = NULL;
}

void dxl_persister_pause(struct dxl_persister *p, int paused)
{
	atomic_store(&p->paused, paused != 0);
	/* a pass in progress may still confirm: wait until it is over */
	while (paused && !atomic_load(&p->parked))
		nap_us(100);
}

void dxl_persister_stats(const struct dxl_persister *p,
			 struct dxl_persist_stats *out)
{
	pthread_mutex_lock((pthread_mutex_t *)&p->mu);
	*out = p->st;
	pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
}
