/* test_sbe_http.c -- the etcd peer's HTTP/1.1 client and base64 (bench/smallbank-etcd/http.c)
 *
 * A scripted server thread on loopback answers each request with the next
 * canned response, written in small pieces so the client sees partial
 * reads: Content-Length, chunked with a trailer, an error status, a
 * response ended by closing the connection; the client must reuse one
 * connection (keep-alive) until the server closes it, then reconnect.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/smallbank-etcd/http.c"

/* ---- base64 -------------------------------------------------------------- */

static void test_b64(void **state)
{
	/* RFC 4648 section 10 vectors */
	const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
	const char *enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
	char out[64], back[64];
	for (size_t i = 0; i < DXL_ARRAY_SIZE(plain); i++) {
		size_t n = sbe_b64_encode(plain[i], strlen(plain[i]), out);
		assert_int_equal(n, strlen(enc[i]));
		assert_string_equal(out, enc[i]);
		long m = sbe_b64_decode(out, back, sizeof(back));
		assert_int_equal(m, (long)strlen(plain[i]));
		assert_memory_equal(back, plain[i], (size_t)m);
	}
	/* binary, with a NUL (the range paging key) */
	uint8_t bin[5] = {'c', 'h', 0, 0xff, 0x80};
	sbe_b64_encode(bin, 5, out);
	assert_int_equal(sbe_b64_decode(out, back, sizeof(back)), 5);
	assert_memory_equal(back, bin, 5);
	assert_int_equal(sbe_b64_decode("Zm9v!", back, sizeof(back)), -1);
	assert_int_equal(sbe_b64_decode("Zm9vYmFy", back, 5), -1); /* too small */
}

/* ---- a scripted server ----------------------------------------------------- */

struct server {
	int lfd;
	uint16_t port;
	const char *const *resp; /* NULL entry = close the connection here */
	int nresp;
	pthread_mutex_t mu;      /* over the three below (the client reads them) */
	int accepts;             /* connections accepted */
	int requests;            /* requests read */
	char last_req[2048];
	pthread_t th;
};

/* read one request (headers + Content-Length body); 0 at EOF */
static int read_request(int fd, char *buf, size_t cap)
{
	size_t len = 0;
	for (;;) {
		ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
		if (n <= 0)
			return 0;
		len += (size_t)n;
		buf[len] = '\0';
		char *e = strstr(buf, "\r\n\r\n");
		if (!e)
			continue;
		char *cl = strcasestr(buf, "Content-Length:");
		size_t want = (size_t)(e + 4 - buf) + (cl ? strtoul(cl + 15, NULL, 10) : 0);
		if (len >= want)
			return 1;
	}
}

static void *server_main(void *arg)
{
	struct server *s = arg;
	int i = 0;
	while (i < s->nresp) {
		int fd = accept(s->lfd, NULL, NULL);
		if (fd < 0)
			return NULL;
		pthread_mutex_lock(&s->mu);
		s->accepts++;
		pthread_mutex_unlock(&s->mu);
		while (i < s->nresp) {
			if (!s->resp[i]) { /* close here */
				i++;
				break;
			}
			char req[2048];
			if (!read_request(fd, req, sizeof(req)))
				break;
			pthread_mutex_lock(&s->mu);
			s->requests++;
			memcpy(s->last_req, req, sizeof(req));
			pthread_mutex_unlock(&s->mu);
			/* in pieces of 7 bytes: every parser state sees a partial read */
			const char *r = s->resp[i++];
			for (size_t off = 0, n = strlen(r); off < n; off += 7) {
				size_t k = n - off < 7 ? n - off : 7;
				if (send(fd, r + off, k, MSG_NOSIGNAL) != (ssize_t)k)
					break;
				usleep(200);
			}
			if (strstr(r, "Connection: close"))
				break; /* the body ends with the connection */
		}
		close(fd);
	}
	return NULL;
}

static void server_start(struct server *s, const char *const *resp, int n)
{
	memset(s, 0, sizeof(*s));
	s->resp = resp;
	s->nresp = n;
	pthread_mutex_init(&s->mu, NULL);
	s->lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(s->lfd >= 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	socklen_t sl = sizeof(sa);
	getsockname(s->lfd, (struct sockaddr *)&sa, &sl);
	s->port = ntohs(sa.sin_port);
	assert_int_equal(listen(s->lfd, 4), 0);
	assert_int_equal(pthread_create(&s->th, NULL, server_main, s), 0);
}

/* the server's counters and last request, read under its lock */
static int accepts(struct server *s)
{
	pthread_mutex_lock(&s->mu);
	int n = s->accepts;
	pthread_mutex_unlock(&s->mu);
	return n;
}

static int requests(struct server *s)
{
	pthread_mutex_lock(&s->mu);
	int n = s->requests;
	pthread_mutex_unlock(&s->mu);
	return n;
}

static int last_req_has(struct server *s, const char *what)
{
	pthread_mutex_lock(&s->mu);
	int has = strstr(s->last_req, what) != NULL;
	pthread_mutex_unlock(&s->mu);
	return has;
}

static void server_stop(struct server *s)
{
	shutdown(s->lfd, SHUT_RDWR);
	pthread_join(s->th, NULL);
	close(s->lfd);
	pthread_mutex_destroy(&s->mu);
}

static void test_responses(void **state)
{
	static const char *const resp[] = {
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
		"Content-Length: 13\r\n\r\n{\"a\":\"hello\"}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		"5\r\n{\"b\":\r\n"
		"a\r\n\"chunked\"}\r\n"
		"0\r\nGrpc-Trailer-Content-Type: application/grpc\r\n\r\n",
		"HTTP/1.1 400 Bad Request\r\ncontent-length: 9\r\n\r\n{\"code\":3",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		NULL, /* the server closes: the client must reconnect */
		"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
	};
	struct server s;
	server_start(&s, resp, (int)DXL_ARRAY_SIZE(resp));
	char addr[32];
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", s.port);
	struct sbe_http h;
	assert_int_equal(sbe_http_init(&h, addr), 0);
	h.timeout_ms = 5000;

	assert_int_equal(sbe_http_request(&h, "POST", "/v3/kv/range", "{\"k\":1}", 7), 0);
	assert_int_equal(h.status, 200);
	assert_string_equal(h.body, "{\"a\":\"hello\"}");
	assert_true(last_req_has(&s, "POST /v3/kv/range HTTP/1.1\r\n"));
	assert_true(last_req_has(&s, "Content-Length: 7\r\n\r\n{\"k\":1}"));

	assert_int_equal(sbe_http_request(&h, "POST", "/v3/kv/txn", "{}", 2), 0);
	assert_int_equal(h.status, 200);
	assert_string_equal(h.body, "{\"b\":\"chunked\"}");

	assert_int_equal(sbe_http_request(&h, "POST", "/x", "{}", 2), 0);
	assert_int_equal(h.status, 400);
	assert_string_equal(h.body, "{\"code\":3");

	assert_int_equal(sbe_http_request(&h, "GET", "/version", NULL, 0), 0);
	assert_int_equal(h.status, 200);
	assert_int_equal(h.body_len, 0);
	assert_int_equal(accepts(&s), 1); /* four requests on one connection */

	/* the server closed: the next request reports it, the one after reconnects */
	int ret = sbe_http_request(&h, "GET", "/a", NULL, 0);
	assert_int_equal(ret, DXL_E_UNREACHABLE);
	assert_int_equal(h.fd, -1);
	assert_int_equal(sbe_http_request(&h, "GET", "/b", NULL, 0), 0);
	assert_string_equal(h.body, "until the end");
	assert_int_equal(h.fd, -1); /* Connection: close */
	assert_int_equal(sbe_http_request(&h, "GET", "/c", NULL, 0), 0);
	assert_string_equal(h.body, "ok");
	assert_int_equal(accepts(&s), 3);
	assert_int_equal(requests(&s), 6);

	sbe_http_fini(&h);
	server_stop(&s);
}

static void test_garbage_and_refused(void **state)
{
	static const char *const resp[] = {"SMTP ready\r\n\r\n"};
	struct server s;
	server_start(&s, resp, 1);
	char addr[32];
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", s.port);
	struct sbe_http h;
	assert_int_equal(sbe_http_init(&h, addr), 0);
	assert_int_equal(sbe_http_request(&h, "GET", "/", NULL, 0), DXL_E_PROTO);
	assert_non_null(strstr(dxl_errmsg(), "bad status line"));
	server_stop(&s);
	/* nobody listens there any more */
	assert_int_equal(sbe_http_request(&h, "GET", "/", NULL, 0), DXL_E_UNREACHABLE);
	sbe_http_fini(&h);
	assert_int_equal(sbe_http_init(&h, "localhost:80"), DXL_E_INVAL);
	assert_int_equal(sbe_http_init(&h, "127.0.0.1"), DXL_E_INVAL);
}

int main(void)
{
	alarm(60);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_b64),
		cmocka_unit_test(test_responses),
		cmocka_unit_test(test_garbage_and_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
