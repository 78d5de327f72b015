/* tcp_mr.c -- the tcp provider's rkey table: registered regions by rkey */
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "fabric/tcp_internal.h"

/*
 * Keys: rkey = mix32(counter) ^ salt, with mix32 a bijection of 32-bit
 * words and counter and salt random at open. So keys look random to a peer,
 * and a deregistered key never comes back (until 2^32 registrations); 0 is
 * never used. lkey == rkey.
 *
 * The table is a chained hash map under tf->mr_lock. The NIC thread holds
 * the lock while it reads or writes a region's memory and while it runs a
 * region's persist function, so once dxl_mr_dereg returns no remote access
 * touches the memory and no persist function of it runs any more.
 */

static uint32_t mix32(uint32_t x)
{
	/* each step (xor-shift right, multiply by an odd number) is invertible */
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

static size_t bucket(const struct tcp_fab *tf, uint32_t key)
{
	return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> 32) &
	       (tf->mr_nb - 1);
}

static uint32_t random32(void)
{
	uint32_t v;
	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v))
		return v;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return mix32((uint32_t)ts.tv_nsec ^ (uint32_t)getpid() << 16);
}

int tcp_mr_init(struct tcp_fab *tf)
{
	tf->mr_nb = 64;
	tf->mr_b = calloc(tf->mr_nb, sizeof(*tf->mr_b));
	if (!tf->mr_b)
		return dxl_err_set(DXL_E_NOMEM, "fabric tcp: out of memory");
	tf->key_ctr = random32();
	tf->key_salt = random32();
	return 0;
}

void tcp_mr_fini(struct tcp_fab *tf)
{
	for (size_t i = 0; tf->mr_b && i < tf->mr_nb; i++) {
		struct tcp_mr_ent *e = tf->mr_b[i];
		while (e) {
			struct tcp_mr_ent *n = e->next;
			free(e);
			e = n;
		}
	}
	free(tf->mr_b);
	tf->mr_b = NULL;
}

static struct tcp_mr_ent *lookup(struct tcp_fab *tf, uint32_t key)
{
	for (struct tcp_mr_ent *e = tf->mr_b[bucket(tf, key)]; e; e = e->next)
		if (e->key == key)
			return e;
	return NULL;
}

static void grow(struct tcp_fab *tf)
{
	size_t nb = tf->mr_nb * 2;
	struct tcp_mr_ent **b = calloc(nb, sizeof(*b));
	if (!b)
		return; /* longer chains, still correct */
	struct tcp_mr_ent **old = tf->mr_b;
	size_t onb = tf->mr_nb;
	tf->mr_b = b;
	tf->mr_nb = nb;
	for (size_t i = 0; i < onb; i++) {
		struct tcp_mr_ent *e = old[i];
		while (e) {
			struct tcp_mr_ent *n = e->next;
			size_t k = bucket(tf, e->key);
			e->next = b[k];
			b[k] = e;
			e = n;
		}
	}
	free(old);
}

int tcp_mr_reg(struct dxl_mr *mr)
{
	struct tcp_fab *tf = mr->f->prov;
	struct tcp_mr_ent *e = calloc(1, sizeof(*e));
	if (!e)
		return dxl_err_set(DXL_E_NOMEM, "mr_reg: out of memory");
	pthread_mutex_lock(&tf->mr_lock);
	uint32_t key;
	do
		key = mix32(tf->key_ctr++) ^ tf->key_salt;
	while (key == 0 || lookup(tf, key));
	if (tf->mr_n >= tf->mr_nb)
		grow(tf);
	e->key = key;
	e->mr = mr;
	size_t k = bucket(tf, key);
	e->next = tf->mr_b[k];
	tf->mr_b[k] = e;
	tf->mr_n++;
	mr->lkey = mr->rkey = key;
	mr->prov = e;
	pthread_mutex_unlock(&tf->mr_lock);
	return 0;
}

void tcp_mr_dereg(struct dxl_mr *mr)
{
	struct tcp_fab *tf = mr->f->prov;
	pthread_mutex_lock(&tf->mr_lock);
	for (struct tcp_mr_ent **pp = &tf->mr_b[bucket(tf, mr->rkey)]; *pp;
	     pp = &(*pp)->next) {
		if ((*pp)->mr == mr) {
			struct tcp_mr_ent *e = *pp;
			*pp = e->next;
			free(e);
			tf->mr_n--;
			break;
		}
	}
	/* persist ranges that flush READs noted in the region run now (the
	 * NIC thread runs them under mr_lock too): none runs after we return */
	if (mr->persist_fn)
		tcp_pf_drain_persist_locked(tf, mr);
	pthread_mutex_unlock(&tf->mr_lock);
	mr->prov = NULL;
	/* its un-flushed lines can no longer be restored (the memory may go) */
	if (mr->access & DXL_MR_PERSISTENT)
		tcp_pf_drop_range(tf, (uintptr_t)mr->addr, mr->len);
}

struct dxl_mr *tcp_mr_find_locked(struct tcp_fab *tf, uint32_t rkey,
				  uint64_t addr, uint64_t len, unsigned need)
{
	struct tcp_mr_ent *e = lookup(tf, rkey);
	if (!e)
		return NULL;
	struct dxl_mr *mr = e->mr;
	if ((mr->access & need) != need)
		return NULL;
	uint64_t base = (uint64_t)(uintptr_t)mr->addr;
	if (addr < base)
		return NULL;
	uint64_t off = addr - base;
	if (off > mr->len || len > mr->len - off)
		return NULL;
	return mr;
}
