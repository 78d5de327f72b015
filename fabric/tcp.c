/* tcp.c -- the tcp provider: software one-sided RDMA over TCP (fabric, buffers) */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fabric/tcp_internal.h"

/*
 * See docs/fabric-tcp.md for the design: one TCP connection per QP, a NIC
 * thread per process serving the passive side, the initiator side run by
 * the owner thread inside post/poll/wait.
 */

/* ---- byte buffers ---------------------------------------------------------- */

int tcp_buf_room(struct tcp_buf *b, size_t n)
{
	if (tcp_buf_free_bytes(b) >= n)
		return 0;
	if (b->off && b->cap - b->len >= n) {
		memmove(b->p, b->p + b->off, b->len);
		b->off = 0;
		return 0;
	}
	size_t need = b->len + n;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < need)
		cap *= 2;
	uint8_t *p = malloc(cap);
	if (!p)
		return DXL_E_NOMEM;
	if (b->len)
		memcpy(p, b->p + b->off, b->len);
	free(b->p);
	b->p = p;
	b->cap = cap;
	b->off = 0;
	return 0;
}

int tcp_buf_append(struct tcp_buf *b, const void *src, size_t n)
{
	if (!n)
		return 0;
	int ret = tcp_buf_room(b, n);
	if (ret)
		return ret;
	memcpy(tcp_buf_tail(b), src, n);
	b->len += n;
	return 0;
}

void tcp_buf_consume(struct tcp_buf *b, size_t n)
{
	DXL_ASSERT(n <= b->len);
	b->off += n;
	b->len -= n;
	if (!b->len) {
		b->off = 0;
		/* give back what one huge READ or SEND made us allocate */
		if (b->cap > 4 * TCP_OUT_HIGH) {
			free(b->p);
			b->p = NULL;
			b->cap = 0;
		}
	}
}

void tcp_buf_free(struct tcp_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* ---- connections ------------------------------------------------------------ */

int tcp_set_sockopts(int fd)
{
	int one = 1;
	/* requests and answers are small and latency-bound */
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
		return dxl_err_errno(errno, "fabric tcp: setsockopt TCP_NODELAY");
	return 0;
}

struct tcp_conn *tcp_conn_new(struct tcp_fab *tf, int fd, bool passive)
{
	struct tcp_conn *conn = calloc(1, sizeof(*conn));
	if (!conn)
		return NULL;
	atomic_init(&conn->ref, 1);
	conn->passive = passive;
	conn->id = atomic_fetch_add(&tf->next_conn_id, 1) + 1;
	pthread_mutex_init(&conn->mu, NULL);
	conn->fd = fd;
	conn->epfd = -1;
	atomic_init(&conn->last_rx_ns, dxl_now_ns());
	return conn;
}

void tcp_conn_put(struct tcp_conn *conn)
{
	if (!conn)
		return;
	/* acq_rel: the last dropper sees every write of the other holder */
	if (atomic_fetch_sub_explicit(&conn->ref, 1, memory_order_acq_rel) != 1)
		return;
	if (conn->fd >= 0)
		close(conn->fd);
	tcp_buf_free(&conn->out);
	tcp_buf_free(&conn->in);
	free(conn->dirty.v);
	pthread_mutex_destroy(&conn->mu);
	free(conn);
}

void tcp_conn_update_mask_locked(struct tcp_conn *conn)
{
	if (conn->fd < 0 || conn->epfd < 0)
		return;
	uint32_t m = (conn->want_in ? EPOLLIN : 0) |
		     (conn->out.len ? EPOLLOUT : 0);
	if (m == conn->ep_mask)
		return;
	struct epoll_event ev = {.events = m, .data.ptr = conn};
	if (epoll_ctl(conn->epfd, EPOLL_CTL_MOD, conn->fd, &ev) == 0)
		conn->ep_mask = m;
	else
		DXL_WARN("fabric tcp: epoll_ctl MOD fd %d: %s", conn->fd,
			 strerror(errno));
}

int tcp_conn_flush_locked(struct tcp_conn *conn)
{
	int ret = 0;
	if (conn->fd < 0) {
		tcp_buf_consume(&conn->out, conn->out.len);
		return -1;
	}
	if (conn->out.len) {
		ssize_t n = send(conn->fd, tcp_buf_data(&conn->out), conn->out.len,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			tcp_buf_consume(&conn->out, (size_t)n);
		} else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
			   errno != EINTR) {
			/* the peer is gone: the reader side reports it */
			tcp_buf_consume(&conn->out, conn->out.len);
			ret = -1;
		}
	}
	tcp_conn_update_mask_locked(conn);
	return ret;
}

/* ---- abandoned connections ---------------------------------------------------- */

static struct tcp_abandon *ab_find(struct tcp_fab *tf, const char *key)
{
	for (size_t i = 0; i < tf->nab; i++)
		if (strcmp(tf->ab[i].key, key) == 0)
			return &tf->ab[i];
	return NULL;
}

void tcp_abandon_note(struct tcp_fab *tf, const char *key, uint64_t id)
{
	if (!key[0])
		return;
	pthread_mutex_lock(&tf->ab_lock);
	struct tcp_abandon *a = ab_find(tf, key);
	if (!a) {
		for (size_t i = 0; i < tf->nab && !a; i++)
			if (!tf->ab[i].n)
				a = &tf->ab[i]; /* reuse an empty list */
	}
	if (!a && tf->nab == tf->capab) {
		size_t cap = tf->capab ? tf->capab * 2 : 8;
		struct tcp_abandon *n = realloc(tf->ab, cap * sizeof(*n));
		if (n) {
			memset(n + tf->capab, 0, (cap - tf->capab) * sizeof(*n));
			tf->ab = n;
			tf->capab = cap;
		}
	}
	if (!a && tf->nab < tf->capab)
		a = &tf->ab[tf->nab++];
	if (a && (a->n == 0 || strcmp(a->key, key) != 0)) {
		snprintf(a->key, sizeof(a->key), "%s", key);
		a->n = 0;
	}
	if (a && a->n == a->cap) {
		uint32_t cap = a->cap ? 2 * a->cap : 16;
		uint64_t *n = realloc(a->ids, cap * sizeof(*n));
		if (n) {
			a->ids = n;
			a->cap = cap;
		}
	}
	if (!a || a->n == a->cap) {
		pthread_mutex_unlock(&tf->ab_lock);
		DXL_WARN("fabric tcp: out of memory: connection %llu to %s is not "
			 "fenced at the next handshake",
			 (unsigned long long)id, key);
		return;
	}
	a->ids[a->n++] = id;
	pthread_mutex_unlock(&tf->ab_lock);
}

uint32_t tcp_abandon_take(struct tcp_fab *tf, const char *key, uint64_t *ids)
{
	pthread_mutex_lock(&tf->ab_lock);
	struct tcp_abandon *a = ab_find(tf, key);
	uint32_t n = a ? DXL_MIN(a->n, (uint32_t)TCP_HS_MAX_KILL) : 0;
	if (n)
		memcpy(ids, a->ids, n * sizeof(*ids));
	pthread_mutex_unlock(&tf->ab_lock);
	return n;
}

uint32_t tcp_abandon_count(struct tcp_fab *tf, const char *key)
{
	pthread_mutex_lock(&tf->ab_lock);
	struct tcp_abandon *a = ab_find(tf, key);
	uint32_t n = a ? a->n : 0;
	pthread_mutex_unlock(&tf->ab_lock);
	return n;
}

void tcp_abandon_done(struct tcp_fab *tf, const char *key, const uint64_t *ids,
		      uint32_t n)
{
	if (!n)
		return;
	pthread_mutex_lock(&tf->ab_lock);
	struct tcp_abandon *a = ab_find(tf, key);
	if (a) {
		uint32_t k = 0;
		for (uint32_t i = 0; i < a->n; i++) {
			bool sent = false;
			for (uint32_t j = 0; j < n && !sent; j++)
				sent = a->ids[i] == ids[j];
			if (!sent) /* noted by another thread meanwhile */
				a->ids[k++] = a->ids[i];
		}
		a->n = k;
	}
	pthread_mutex_unlock(&tf->ab_lock);
}

/* ---- fabric ------------------------------------------------------------------- */

static void tcp_close(struct dxl_fabric *f);

static int add_ep(int ep, int fd, void *ptr)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = ptr};
	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev))
		return dxl_err_errno(errno, "fabric tcp: epoll_ctl ADD");
	return 0;
}

static int tcp_listen(struct tcp_fab *tf)
{
	struct dxl_fabric *f = tf->f;
	char host[DXL_FABRIC_ADDR_MAX], portstr[8];
	uint16_t port;
	if (dxl_parse_hostport(f->cfg.listen_addr, host, sizeof(host), &port))
		return dxl_err_set(DXL_E_INVAL, "fabric tcp: bad listen address '%s'",
				   f->cfg.listen_addr);
	snprintf(portstr, sizeof(portstr), "%u", port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	int gai = getaddrinfo(host, portstr, &hints, &ai);
	if (gai)
		return dxl_err_set(DXL_E_INVAL, "fabric tcp: listen address '%s': %s",
				   f->cfg.listen_addr, gai_strerror(gai));
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
			0);
	if (fd < 0) {
		int e = errno;
		freeaddrinfo(ai);
		return dxl_err_errno(e, "fabric tcp: socket");
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen)) {
		int e = errno;
		freeaddrinfo(ai);
		close(fd);
		if (e == EADDRINUSE)
			return dxl_err_set(DXL_E_BUSY,
					   "fabric tcp: listen address %s is in use",
					   f->cfg.listen_addr);
		return dxl_err_errno(e, "fabric tcp: bind %s", f->cfg.listen_addr);
	}
	freeaddrinfo(ai);
	if (listen(fd, SOMAXCONN)) {
		int e = errno;
		close(fd);
		return dxl_err_errno(e, "fabric tcp: listen %s", f->cfg.listen_addr);
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char ip[INET6_ADDRSTRLEN] = "?";
	if (getsockname(fd, (struct sockaddr *)&ss, &sl)) {
		int e = errno;
		close(fd);
		return dxl_err_errno(e, "fabric tcp: getsockname");
	}
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
		snprintf(f->addr, sizeof(f->addr), "[%s]:%u", ip,
			 ntohs(s6->sin6_port));
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
		snprintf(f->addr, sizeof(f->addr), "%s:%u", ip, ntohs(s4->sin_port));
	}
	tf->lfd = fd;
	return 0;
}

static int tcp_open(struct dxl_fabric *f)
{
	struct tcp_fab *tf = calloc(1, sizeof(*tf));
	if (!tf)
		return dxl_err_set(DXL_E_NOMEM, "fabric tcp: out of memory");
	tf->f = f;
	tf->lfd = tf->ep = tf->kick_fd = tf->pf_fd = -1;
	pthread_mutex_init(&tf->mr_lock, NULL);
	pthread_mutex_init(&tf->pf_lock, NULL);
	pthread_mutex_init(&tf->ab_lock, NULL);
	while (!tf->nonce) {
		if (getrandom(&tf->nonce, sizeof(tf->nonce), GRND_NONBLOCK) !=
		    (ssize_t)sizeof(tf->nonce)) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			tf->nonce = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^
				    ((uint64_t)getpid() << 16) ^ (uintptr_t)tf;
		}
	}
	atomic_init(&tf->stop, false);
	atomic_init(&tf->pf_dead, false);
	atomic_init(&tf->nparked, 0);
	atomic_init(&tf->next_conn_id, 0);
	f->prov = tf;
	int ret = tcp_mr_init(tf);
	if (ret)
		goto err;
	ret = tcp_listen(tf);
	if (ret)
		goto err;
	tf->ep = epoll_create1(EPOLL_CLOEXEC);
	tf->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	tf->pf_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (tf->ep < 0 || tf->kick_fd < 0 || tf->pf_fd < 0) {
		ret = dxl_err_errno(errno, "fabric tcp: epoll/eventfd");
		goto err;
	}
	if ((ret = add_ep(tf->ep, tf->lfd, &tf->lfd)) ||
	    (ret = add_ep(tf->ep, tf->kick_fd, &tf->kick_fd)) ||
	    (ret = add_ep(tf->ep, tf->pf_fd, &tf->pf_fd)))
		goto err;
	if (f->cfg.pf_signal) {
		ret = tcp_pf_install_signal(tf);
		if (ret)
			goto err;
	}
	int e = pthread_create(&tf->nic, NULL, tcp_nic_main, tf);
	if (e) {
		ret = dxl_err_errno(e, "fabric tcp: starting the NIC thread");
		goto err;
	}
	tf->nic_started = true;
	return 0;
err:
	tcp_close(f);
	return ret;
}

static void tcp_close(struct dxl_fabric *f)
{
	struct tcp_fab *tf = f->prov;
	if (!tf)
		return;
	if (tf->nic_started) {
		atomic_store(&tf->stop, true);
		tcp_nic_kick(tf);
		pthread_join(tf->nic, NULL);
	}
	/* the NIC thread has closed every connection it served */
	if (tf->sig_installed)
		tcp_pf_remove_signal(tf);
	if (tf->lfd >= 0)
		close(tf->lfd);
	if (tf->ep >= 0)
		close(tf->ep);
	if (tf->kick_fd >= 0)
		close(tf->kick_fd);
	if (tf->pf_fd >= 0)
		close(tf->pf_fd);
	tcp_buf_free(&tf->stage);
	tcp_mr_fini(tf);
	tcp_pf_fini(tf);
	pthread_mutex_destroy(&tf->mr_lock);
	pthread_mutex_destroy(&tf->pf_lock);
	pthread_mutex_destroy(&tf->ab_lock);
	for (size_t i = 0; i < tf->nab; i++)
		free(tf->ab[i].ids);
	free(tf->ab);
	free(tf);
	f->prov = NULL;
}

const struct dxl_fabric_ops dxl_fabric_tcp_ops = {
	.name = "tcp",
	.open = tcp_open,
	.close = tcp_close,
	.mr_reg = tcp_mr_reg,
	.mr_dereg = tcp_mr_dereg,
	.mr_mark_durable = tcp_pf_mark_durable,
	.power_fail = tcp_pf_power_fail,
	.power_fail_arm = tcp_pf_arm_request,
	.pending_lines = tcp_pf_pending_lines,
	.ctx_new = tcp_ctx_new,
	.ctx_delete = tcp_ctx_delete,
	.qp_connect = tcp_qp_connect,
	.qp_delete = tcp_qp_delete,
	.qp_post = tcp_qp_post,
	.post_recv = tcp_post_recv,
	.poll = tcp_poll,
	.wait = tcp_wait,
	.qp_count = tcp_qp_count,
};
