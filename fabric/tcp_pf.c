/* tcp_pf.c -- the power-failure model: a journal of un-flushed 64-byte lines */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabric/tcp_internal.h"

/*
 * Before the NIC thread changes a line (64 bytes) of a DXL_MR_PERSISTENT
 * region (WRITE, CAS, FAA), it saves the line's pre-image here, unless the
 * line is pending already, and records the connection (QP) that changed it.
 * The line is durable, and leaves the journal, when
 *   - every QP that changed it has executed a later READ (H9: 000 L665-675,
 *     a READ on a QP flushes the QP's earlier WRITEs), or
 *   - the target calls dxl_mr_mark_durable() on a range holding it, or
 *   - its region is deregistered (nothing can restore it any more).
 * A power failure restores the pre-image of the pending lines the policy
 * picks, then kills the process. Everything is under tf->pf_lock; the NIC
 * thread also holds it while it writes persistent memory, so a power
 * failure sees each line entirely before or entirely after a write.
 */

#define LINE 64u

static size_t hash_line(uintptr_t line, size_t nb)
{
	return (size_t)((((uint64_t)line >> 6) * 0x9E3779B97F4A7C15ull) >> 32) &
	       (nb - 1);
}

static struct tcp_pf_line *jr_find(struct tcp_pf_journal *jr, uintptr_t line)
{
	if (!jr->nb)
		return NULL;
	for (struct tcp_pf_line *e = jr->b[hash_line(line, jr->nb)]; e;
	     e = e->next)
		if (e->line == line)
			return e;
	return NULL;
}

static int jr_grow(struct tcp_pf_journal *jr)
{
	size_t nb = jr->nb ? jr->nb * 2 : 256;
	struct tcp_pf_line **b = calloc(nb, sizeof(*b));
	if (!b)
		return jr->nb ? 0 : DXL_E_NOMEM; /* longer chains, still right */
	for (size_t i = 0; i < jr->nb; i++) {
		struct tcp_pf_line *e = jr->b[i];
		while (e) {
			struct tcp_pf_line *n = e->next;
			size_t k = hash_line(e->line, nb);
			e->next = b[k];
			b[k] = e;
			e = n;
		}
	}
	free(jr->b);
	jr->b = b;
	jr->nb = nb;
	return 0;
}

static void line_free(struct tcp_pf_line *e)
{
	free(e->qs);
	free(e);
}

/* remove the entry of `line` (if any) */
static void jr_remove(struct tcp_pf_journal *jr, uintptr_t line)
{
	if (!jr->nb)
		return;
	for (struct tcp_pf_line **pp = &jr->b[hash_line(line, jr->nb)]; *pp;
	     pp = &(*pp)->next) {
		if ((*pp)->line == line) {
			struct tcp_pf_line *e = *pp;
			*pp = e->next;
			line_free(e);
			jr->n--;
			return;
		}
	}
}

void tcp_pf_fini(struct tcp_fab *tf)
{
	struct tcp_pf_journal *jr = &tf->jr;
	for (size_t i = 0; i < jr->nb; i++) {
		struct tcp_pf_line *e = jr->b[i];
		while (e) {
			struct tcp_pf_line *n = e->next;
			line_free(e);
			e = n;
		}
	}
	free(jr->b);
	memset(jr, 0, sizeof(*jr));
	free(tf->pend);
	tf->pend = NULL;
	tf->npend = tf->cappend = 0;
}

static bool line_has(const struct tcp_pf_line *e, uint64_t id)
{
	for (unsigned i = 0; i < e->nq; i++)
		if (e->qs[i] == id)
			return true;
	return false;
}

static int dirty_push(struct tcp_pf_dirty *d, uintptr_t line)
{
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 64;
		uintptr_t *v = realloc(d->v, cap * sizeof(*v));
		if (!v)
			return DXL_E_NOMEM;
		d->v = v;
		d->cap = cap;
	}
	d->v[d->n++] = line;
	return 0;
}

int tcp_pf_before_write_locked(struct tcp_fab *tf, struct tcp_conn *conn,
			       struct dxl_mr *mr, uint64_t addr, uint64_t len)
{
	struct tcp_pf_journal *jr = &tf->jr;
	uintptr_t base = (uintptr_t)mr->addr;
	uintptr_t end = base + mr->len;
	uintptr_t a = (uintptr_t)addr;
	for (uintptr_t line = a & ~(uintptr_t)(LINE - 1); line < a + len;
	     line += LINE) {
		struct tcp_pf_line *e = jr_find(jr, line);
		if (!e) {
			if (jr->n >= jr->nb && jr_grow(jr))
				return DXL_E_NOMEM;
			e = calloc(1, sizeof(*e));
			if (!e)
				return DXL_E_NOMEM;
			e->line = line;
			e->mr = mr;
			/* only the part of the line inside the region is ours */
			uintptr_t lo = line < base ? base : line;
			uintptr_t hi = line + LINE > end ? end : line + LINE;
			e->lo = (uint8_t)(lo - line);
			e->hi = (uint8_t)(hi - line);
			TCP_DMA_BEGIN();
			memcpy(e->pre + e->lo, (const void *)lo, hi - lo);
			TCP_DMA_END();
			size_t k = hash_line(line, jr->nb);
			e->next = jr->b[k];
			jr->b[k] = e;
			jr->n++;
		}
		if (line_has(e, conn->id))
			continue;
		if (e->nq == e->capq) {
			unsigned cap = e->capq ? e->capq * 2u : 2u;
			if (cap > UINT16_MAX)
				return DXL_E_NOMEM;
			uint64_t *qs = realloc(e->qs, cap * sizeof(*qs));
			if (!qs)
				return DXL_E_NOMEM;
			e->qs = qs;
			e->capq = (uint16_t)cap;
		}
		if (dirty_push(&conn->dirty, line))
			return DXL_E_NOMEM;
		e->qs[e->nq++] = conn->id;
	}
	return 0;
}

static void pend_add(struct tcp_fab *tf, const struct dxl_mr *mr, uintptr_t lo,
		     uintptr_t hi)
{
	if (tf->npend) {
		struct tcp_persist_pend *l = &tf->pend[tf->npend - 1];
		if (l->fn == mr->persist_fn && l->arg == mr->persist_arg &&
		    lo <= l->hi && hi >= l->lo) {
			l->lo = DXL_MIN(l->lo, lo);
			l->hi = DXL_MAX(l->hi, hi);
			return;
		}
	}
	if (tf->npend == tf->cappend) {
		size_t cap = tf->cappend ? tf->cappend * 2 : 16;
		struct tcp_persist_pend *p = realloc(tf->pend, cap * sizeof(*p));
		if (!p) {
			/* no room to defer: persist now (still before the answer) */
			mr->persist_fn(mr->persist_arg, (const void *)lo, hi - lo);
			return;
		}
		tf->pend = p;
		tf->cappend = cap;
	}
	tf->pend[tf->npend++] = (struct tcp_persist_pend){
		.fn = mr->persist_fn, .arg = mr->persist_arg, .lo = lo, .hi = hi};
}

void tcp_pf_persist_locked(struct tcp_fab *tf, struct tcp_conn *conn)
{
	struct tcp_pf_dirty *d = &conn->dirty;
	for (size_t i = 0; i < d->n; i++) {
		struct tcp_pf_line *e = jr_find(&tf->jr, d->v[i]);
		if (!e || !e->mr->persist_fn)
			continue; /* durable meanwhile, or nothing to run */
		pend_add(tf, e->mr, e->line + e->lo, e->line + e->hi);
	}
}

static int pend_cmp(const void *a, const void *b)
{
	const struct tcp_persist_pend *x = a, *y = b;
	if (x->arg != y->arg)
		return (uintptr_t)x->arg < (uintptr_t)y->arg ? -1 : 1;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

void tcp_pf_run_persist(struct tcp_fab *tf)
{
	if (!tf->npend)
		return;
	qsort(tf->pend, tf->npend, sizeof(*tf->pend), pend_cmp);
	struct tcp_persist_pend cur = tf->pend[0];
	for (size_t i = 1; i <= tf->npend; i++) {
		const struct tcp_persist_pend *p = i < tf->npend ? &tf->pend[i] : NULL;
		if (p && p->fn == cur.fn && p->arg == cur.arg && p->lo <= cur.hi) {
			cur.hi = DXL_MAX(cur.hi, p->hi);
			continue;
		}
		cur.fn(cur.arg, (const void *)cur.lo, cur.hi - cur.lo);
		if (p)
			cur = *p;
	}
	tf->npend = 0;
}

void tcp_pf_drain_persist_locked(struct tcp_fab *tf, const struct dxl_mr *mr)
{
	uintptr_t base = (uintptr_t)mr->addr, end = base + mr->len;
	size_t k = 0;
	if (!tf->npend)
		return;
	for (size_t i = 0; i < tf->npend; i++) {
		struct tcp_persist_pend p = tf->pend[i];
		if (p.fn == mr->persist_fn && p.arg == mr->persist_arg &&
		    p.lo >= base && p.hi <= end) {
			/* a flush READ promised it: keep the promise now, while
			 * the region is still there */
			p.fn(p.arg, (const void *)p.lo, p.hi - p.lo);
			continue;
		}
		tf->pend[k++] = p;
	}
	tf->npend = k;
}

void tcp_pf_flush_locked(struct tcp_fab *tf, struct tcp_conn *conn)
{
	struct tcp_pf_dirty *d = &conn->dirty;
	for (size_t i = 0; i < d->n; i++) {
		struct tcp_pf_line *e = jr_find(&tf->jr, d->v[i]);
		if (!e)
			continue; /* made durable meanwhile */
		for (unsigned k = 0; k < e->nq; k++) {
			if (e->qs[k] == conn->id) {
				e->qs[k] = e->qs[--e->nq];
				break;
			}
		}
		if (!e->nq)
			jr_remove(&tf->jr, e->line);
	}
	d->n = 0;
	if (d->cap > 4096) {
		free(d->v);
		d->v = NULL;
		d->cap = 0;
	}
}

void tcp_pf_drop_range(struct tcp_fab *tf, uintptr_t addr, size_t len)
{
	if (!len)
		return;
	struct tcp_pf_journal *jr = &tf->jr;
	uintptr_t first = addr & ~(uintptr_t)(LINE - 1);
	uintptr_t end = addr + len; /* exclusive */
	pthread_mutex_lock(&tf->pf_lock);
	if ((end - first) / LINE > 2 * jr->n) {
		/* a big range and few pending lines: walk the journal */
		for (size_t i = 0; i < jr->nb; i++) {
			struct tcp_pf_line **pp = &jr->b[i];
			while (*pp) {
				struct tcp_pf_line *e = *pp;
				if (e->line + LINE > addr && e->line < end) {
					*pp = e->next;
					line_free(e);
					jr->n--;
				} else {
					pp = &e->next;
				}
			}
		}
	} else {
		for (uintptr_t line = first; line < end; line += LINE)
			jr_remove(jr, line);
	}
	pthread_mutex_unlock(&tf->pf_lock);
}

void tcp_pf_mark_durable(struct dxl_mr *mr, const void *addr, size_t len)
{
	struct tcp_fab *tf = mr->f->prov;
	/* clip to the region: lines of other regions are not ours to drop */
	uintptr_t base = (uintptr_t)mr->addr, end = base + mr->len;
	uintptr_t lo = (uintptr_t)addr, hi = lo + len;
	if (hi < lo)
		hi = UINTPTR_MAX;
	if (lo < base)
		lo = base;
	if (hi > end)
		hi = end;
	if (lo < hi)
		tcp_pf_drop_range(tf, lo, hi - lo);
}

size_t tcp_pf_pending_lines(struct dxl_fabric *f)
{
	struct tcp_fab *tf = f->prov;
	pthread_mutex_lock(&tf->pf_lock);
	size_t n = tf->jr.n;
	pthread_mutex_unlock(&tf->pf_lock);
	return n;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static int cmp_line(const void *a, const void *b)
{
	uintptr_t x = (*(struct tcp_pf_line *const *)a)->line;
	uintptr_t y = (*(struct tcp_pf_line *const *)b)->line;
	return x < y ? -1 : x > y;
}

/* restore the pre-image of e if policy p picks it; 1 if it did */
static size_t pf_apply(struct tcp_pf_line *e, enum dxl_pf_policy p, uint64_t *s)
{
	bool lose = p == DXL_PF_ALL || (p == DXL_PF_RANDOM && (splitmix64(s) & 1));
	if (!lose)
		return 0;
	TCP_DMA_BEGIN();
	memcpy((void *)(e->line + e->lo), e->pre + e->lo, (size_t)(e->hi - e->lo));
	TCP_DMA_END();
	return 1;
}

static const char *const policy_names[] = {"none", "all", "random"};

/*
 * DXL_FABRIC_PF_REPORT=FILE: one line per power failure appended to FILE, so
 * that crash tests can count what their failures really did (the process
 * is gone right after). Written with one write(2) of O_APPEND.
 */
static void pf_report(struct dxl_fabric *f, enum dxl_pf_policy p, uint64_t seed,
		      size_t lost, size_t n, const char *where,
		      uint32_t write_lines, uint32_t placed)
{
	const char *path = getenv("DXL_FABRIC_PF_REPORT");
	if (!path || !*path)
		return;
	char line[256];
	int len = snprintf(line, sizeof(line),
			   "pf node=%u policy=%s seed=%llu lost=%zu pending=%zu "
			   "struck=%s write_lines=%u placed=%u\n",
			   f->cfg.node_id, policy_names[(unsigned)p < 3 ? p : 0],
			   (unsigned long long)seed, lost, n, where, write_lines,
			   placed);
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	ssize_t w = write(fd, line, (size_t)len);
	(void)w;
	close(fd);
}

/*
 * pf_fail_locked -- the power failure proper: pf_dead is set and pf_lock
 * held (never released: the process dies holding it). Restores the lines
 * the policy picks and raises SIGKILL.
 */
static void pf_fail_locked(struct tcp_fab *tf, enum dxl_pf_policy p,
			   uint64_t seed, const char *where,
			   uint32_t write_lines, uint32_t placed)
{
	struct dxl_fabric *f = tf->f;
	struct tcp_pf_journal *jr = &tf->jr;
	struct tcp_pf_line **v = malloc((jr->n ? jr->n : 1) * sizeof(*v));
	size_t n = 0, lost = 0;
	uint64_t s = seed;
	if (v) {
		for (size_t i = 0; i < jr->nb; i++)
			for (struct tcp_pf_line *e = jr->b[i]; e; e = e->next)
				v[n++] = e;
		/* by address, so a seed picks the same lines run after run */
		qsort(v, n, sizeof(*v), cmp_line);
	}
	if (v) {
		for (size_t i = 0; i < n; i++)
			lost += pf_apply(v[i], p, &s);
	} else { /* no memory to sort: journal order */
		for (size_t i = 0; i < jr->nb; i++)
			for (struct tcp_pf_line *e = jr->b[i]; e; e = e->next, n++)
				lost += pf_apply(e, p, &s);
	}
	DXL_WARN("fabric tcp: simulated power failure of node %u: %zu of %zu "
		 "un-flushed lines lost (policy %s, seed %llu, struck %s%s)",
		 f->cfg.node_id, lost, n,
		 policy_names[(unsigned)p < 3 ? p : 0], (unsigned long long)seed,
		 where, write_lines ? " a WRITE" : "");
	pf_report(f, p, seed, lost, n, where, write_lines, placed);
	raise(SIGKILL);
	for (;;)
		pause();
}

int tcp_pf_power_fail(struct dxl_fabric *f, enum dxl_pf_policy p,
		      uint64_t seed)
{
	struct tcp_fab *tf = f->prov;
	/* from here on the NIC executes nothing (it checks pf_dead), and what
	 * it is executing on persistent memory finishes before we get the lock */
	atomic_store(&tf->pf_dead, true);
	pthread_mutex_lock(&tf->pf_lock); /* never released: we die holding it */
	pf_fail_locked(tf, p, seed, "now", 0, 0);
	return 0;
}

/* ---- the armed power failure (strikes in the middle of the NIC's work) ------ */

/*
 * Why arm instead of failing at once: a power failure taken between two
 * batches of the NIC's input finds every chain of the batch executed, its
 * flush READ included, so nothing is ever lost (an H9 chain arrives in one
 * message). An armed failure strikes at a step of the NIC's work instead:
 * before any request (between two requests of one chain: after a record's
 * WRITE, before its flush READ), or before any 64-byte line of a WRITE
 * into a persistent region; at a strike inside a WRITE, each remaining
 * line of the piece at hand is placed or not by a seeded coin (a NIC's
 * DMA places the lines of a WRITE in any order: 003 §5). Then the policy
 * picks which un-flushed lines are lost, as for dxl_fabric_power_fail.
 */
void tcp_pf_take_arm(struct tcp_fab *tf)
{
	const struct dxl_fabric_cfg *cfg = &tf->f->cfg;
	struct tcp_pf_arm arm;
	pthread_mutex_lock(&tf->pf_lock);
	if (tf->pf_req) {
		arm = tf->pf_req_arm;
		tf->pf_req = false;
	} else { /* the signal: cfg's policy and seed, a seeded strike point */
		uint64_t s = cfg->pf_seed ^ 0x5354524b45ull; /* "STRKE" */
		arm = (struct tcp_pf_arm){
			.policy = cfg->pf_policy, .seed = cfg->pf_seed,
			.steps = (uint32_t)(splitmix64(&s) % TCP_PF_WINDOW),
			.idle_ms = cfg->pf_idle_ms ? cfg->pf_idle_ms
						   : TCP_PF_IDLE_MS};
	}
	pthread_mutex_unlock(&tf->pf_lock);
	if (tf->pf_armed)
		return; /* the first one stands */
	tf->pf_arm = arm;
	tf->pf_rng = arm.seed ^ 0x4c494e4553ull; /* "LINES" */
	tf->pf_deadline_ns = dxl_now_ns() + (uint64_t)arm.idle_ms * 1000000ull;
	tf->pf_armed = true;
	atomic_store(&tf->pf_armed_ack, true);
}

bool tcp_pf_coin(struct tcp_fab *tf)
{
	return splitmix64(&tf->pf_rng) & 1;
}

void tcp_pf_strike(struct tcp_fab *tf, const char *where, bool pf_locked,
		   uint32_t write_lines, uint32_t placed)
{
	atomic_store(&tf->pf_dead, true);
	if (!pf_locked)
		pthread_mutex_lock(&tf->pf_lock); /* never released */
	pf_fail_locked(tf, tf->pf_arm.policy, tf->pf_arm.seed, where,
		       write_lines, placed);
}

int tcp_pf_arm_request(struct dxl_fabric *f, enum dxl_pf_policy p,
		       uint64_t seed, uint32_t steps, uint32_t idle_ms)
{
	struct tcp_fab *tf = f->prov;
	pthread_mutex_lock(&tf->pf_lock);
	tf->pf_req = true;
	tf->pf_req_arm = (struct tcp_pf_arm){.policy = p, .seed = seed,
					     .steps = steps, .idle_ms = idle_ms};
	pthread_mutex_unlock(&tf->pf_lock);
	uint64_t one = 1;
	ssize_t w = write(tf->pf_fd, &one, sizeof(one));
	(void)w;
	/* return once the NIC counts steps: what the caller posts next is
	 * counted (bounded wait: the NIC thread may be gone already) */
	for (int i = 0; i < 5000 && !atomic_load(&tf->pf_armed_ack); i++)
		usleep(1000);
	return atomic_load(&tf->pf_armed_ack)
		       ? 0
		       : dxl_err_set(DXL_E_TIMEDOUT,
				     "power_fail_arm: the NIC thread did not take it");
}

/* ---- the power-failure signal ---------------------------------------------- */

/* the eventfd the handler writes; one fabric with pf_signal per process */
static atomic_int pf_sig_fd = -1;

static void pf_handler(int sig)
{
	(void)sig;
	int saved = errno;
	int fd = atomic_load_explicit(&pf_sig_fd, memory_order_relaxed);
	if (fd >= 0) {
		uint64_t one = 1;
		ssize_t r = write(fd, &one, sizeof(one)); /* async-signal-safe */
		(void)r;
	}
	errno = saved;
}

int tcp_pf_install_signal(struct tcp_fab *tf)
{
	int sig = tf->f->cfg.pf_signal;
	if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP)
		return dxl_err_set(DXL_E_INVAL, "fabric tcp: bad pf_signal %d", sig);
	atomic_store(&pf_sig_fd, tf->pf_fd);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = pf_handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	if (sigaction(sig, &sa, &tf->old_sa)) {
		atomic_store(&pf_sig_fd, -1);
		return dxl_err_errno(errno, "fabric tcp: sigaction %d", sig);
	}
	tf->sig_installed = true;
	return 0;
}

void tcp_pf_remove_signal(struct tcp_fab *tf)
{
	int fd = tf->pf_fd;
	if (atomic_compare_exchange_strong(&pf_sig_fd, &fd, -1))
		sigaction(tf->f->cfg.pf_signal, &tf->old_sa, NULL);
	tf->sig_installed = false;
}
