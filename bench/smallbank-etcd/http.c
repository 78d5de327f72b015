/* http.c -- a small blocking HTTP/1.1 keep-alive client and base64 (no libcurl) */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "bench/smallbank-etcd/sbe.h"
#include "common/common.h"

int sbe_http_init(struct sbe_http *h, const char *hostport)
{
	memset(h, 0, sizeof(*h));
	h->fd = -1;
	h->timeout_ms = 30000;
	int ret = dxl_parse_hostport(hostport, h->host, sizeof(h->host), &h->port);
	if (ret)
		return ret;
	struct in_addr a;
	if (inet_pton(AF_INET, h->host, &a) != 1)
		return dxl_err_set(DXL_E_INVAL, "http: %s: need a numeric IPv4 address",
				   hostport);
	return 0;
}

void sbe_http_close(struct sbe_http *h)
{
	if (h->fd >= 0)
		close(h->fd);
	h->fd = -1;
	h->in_len = 0;
}

void sbe_http_fini(struct sbe_http *h)
{
	sbe_http_close(h);
	free(h->in);
	free(h->out);
	free(h->body);
	memset(h, 0, sizeof(*h));
	h->fd = -1;
}

static int grow(char **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 4096;
	while (n < need)
		n *= 2;
	char *q = realloc(*p, n);
	if (!q)
		return dxl_err_set(DXL_E_NOMEM, "http: %zu bytes", n);
	*p = q;
	*cap = n;
	return 0;
}

static int connect_fd(struct sbe_http *h)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return dxl_err_errno(errno, "http: socket");
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(h->port)};
	inet_pton(AF_INET, h->host, &sa.sin_addr);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	struct timeval tv = {.tv_sec = h->timeout_ms / 1000,
			     .tv_usec = (h->timeout_ms % 1000) * 1000};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int e = errno;
		close(fd);
		dxl_err_errno(e, "http: connect %s:%u", h->host, h->port);
		return DXL_E_UNREACHABLE;
	}
	h->fd = fd;
	h->in_len = 0;
	return 0;
}

static int http_fail(struct sbe_http *h, int code, const char *what, int e)
{
	sbe_http_close(h);
	if (e)
		dxl_err_set(code, "http %s:%u: %s: %s", h->host, h->port, what, strerror(e));
	else
		dxl_err_set(code, "http %s:%u: %s", h->host, h->port, what);
	return code;
}

/* receive more bytes into h->in; 0, or an error (EOF is DXL_E_UNREACHABLE) */
static int fill(struct sbe_http *h)
{
	int ret = grow(&h->in, &h->in_cap, h->in_len + 16384);
	if (ret)
		return http_fail(h, ret, "receive buffer", 0);
	for (;;) {
		ssize_t n = recv(h->fd, h->in + h->in_len, h->in_cap - h->in_len, 0);
		if (n > 0) {
			h->in_len += (size_t)n;
			return 0;
		}
		if (n == 0)
			return http_fail(h, DXL_E_UNREACHABLE, "server closed the connection", 0);
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return http_fail(h, DXL_E_TIMEDOUT, "no response", ETIMEDOUT);
		return http_fail(h, DXL_E_UNREACHABLE, "recv", errno);
	}
}

/* the offset just past the next CRLF at or after off, receiving as needed */
static int line_end(struct sbe_http *h, size_t off, size_t *end)
{
	for (;;) {
		if (h->in_len > off) {
			char *p = memmem(h->in + off, h->in_len - off, "\r\n", 2);
			if (p) {
				*end = (size_t)(p - h->in) + 2;
				return 0;
			}
		}
		if (h->in_len - off > 65536)
			return http_fail(h, DXL_E_PROTO, "response line over 64 KiB", 0);
		int ret = fill(h);
		if (ret)
			return ret;
	}
}

static int need(struct sbe_http *h, size_t upto)
{
	while (h->in_len < upto) {
		int ret = fill(h);
		if (ret)
			return ret;
	}
	return 0;
}

static int body_append(struct sbe_http *h, const char *p, size_t n)
{
	int ret = grow(&h->body, &h->body_cap, h->body_len + n + 1);
	if (ret)
		return http_fail(h, ret, "response body", 0);
	memcpy(h->body + h->body_len, p, n);
	h->body_len += n;
	h->body[h->body_len] = '\0';
	return 0;
}

static int send_all(struct sbe_http *h, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(h->fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			int e = errno;
			return http_fail(h, e == EAGAIN ? DXL_E_TIMEDOUT : DXL_E_UNREACHABLE, "send", e);
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_response(struct sbe_http *h)
{
	size_t pos = 0, end;
	long long clen = -1;
	int chunked = 0, close_after = 0;
	h->body_len = 0;
	int ret = grow(&h->body, &h->body_cap, 1);
	if (ret)
		return http_fail(h, ret, "response body", 0);
	h->body[0] = '\0';

	/* status line, e.g. "HTTP/1.1 200 OK" */
	if ((ret = line_end(h, pos, &end)))
		return ret;
	if (end - pos < 12 || strncmp(h->in, "HTTP/1.", 7) != 0)
		return http_fail(h, DXL_E_PROTO, "bad status line", 0);
	h->status = atoi(h->in + 9);
	pos = end;
	/* headers */
	for (;;) {
		if ((ret = line_end(h, pos, &end)))
			return ret;
		char *l = h->in + pos;
		size_t ll = end - pos - 2;
		pos = end;
		if (ll == 0)
			break;
		if (ll > 15 && strncasecmp(l, "Content-Length:", 15) == 0)
			clen = strtoll(l + 15, NULL, 10);
		else if (ll > 18 && strncasecmp(l, "Transfer-Encoding:", 18) == 0 &&
			 memmem(l, ll, "chunked", 7))
			chunked = 1;
		else if (ll > 11 && strncasecmp(l, "Connection:", 11) == 0 &&
			 memmem(l, ll, "close", 5))
			close_after = 1;
	}
	if (chunked) {
		for (;;) {
			if ((ret = line_end(h, pos, &end)))
				return ret;
			char *ep;
			unsigned long long sz = strtoull(h->in + pos, &ep, 16);
			if (ep == h->in + pos)
				return http_fail(h, DXL_E_PROTO, "bad chunk size", 0);
			pos = end;
			if (sz == 0)
				break;
			if (sz > (1ull << 30))
				return http_fail(h, DXL_E_PROTO, "chunk over 1 GiB", 0);
			if ((ret = need(h, pos + sz + 2)))
				return ret;
			if ((ret = body_append(h, h->in + pos, sz)))
				return ret;
			pos += sz + 2;
		}
		/* trailers up to an empty line */
		for (;;) {
			if ((ret = line_end(h, pos, &end)))
				return ret;
			int empty = end - pos == 2;
			pos = end;
			if (empty)
				break;
		}
	} else if (clen >= 0) {
		if ((ret = need(h, pos + (size_t)clen)))
			return ret;
		if ((ret = body_append(h, h->in + pos, (size_t)clen)))
			return ret;
		pos += (size_t)clen;
	} else {
		/* no length: the body ends when the server closes */
		for (;;) {
			size_t have = h->in_len;
			ret = fill(h);
			if (ret == DXL_E_UNREACHABLE && h->fd < 0) {
				/* fill closed h and dropped h->in_len: the bytes are still there */
				ret = body_append(h, h->in + pos, have - pos);
				dxl_err_clear();
				return ret;
			}
			if (ret)
				return ret;
		}
	}
	/* keep anything after this response (there should be nothing) */
	memmove(h->in, h->in + pos, h->in_len - pos);
	h->in_len -= pos;
	if (close_after)
		sbe_http_close(h);
	return 0;
}

int sbe_http_request(struct sbe_http *h, const char *method, const char *path,
		     const char *body, size_t len)
{
	int ret;
	if (h->fd < 0 && (ret = connect_fd(h)))
		return ret;
	size_t hl = strlen(method) + strlen(path) + strlen(h->host) + 160;
	if ((ret = grow(&h->out, &h->out_cap, hl + len)))
		return http_fail(h, ret, "request buffer", 0);
	int n = snprintf(h->out, hl,
			 "%s %s HTTP/1.1\r\nHost: %s:%u\r\n"
			 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
			 method, path, h->host, h->port, len);
	if (len)
		memcpy(h->out + n, body, len);
	if ((ret = send_all(h, h->out, (size_t)n + len)))
		return ret;
	return read_response(h);
}

/* ---- base64 -------------------------------------------------------------- */

static const char b64chars[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t sbe_b64_encode(const void *in, size_t len, char *out)
{
	const uint8_t *s = in;
	size_t o = 0, i = 0;
	for (; i + 3 <= len; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
		out[o++] = b64chars[v >> 18];
		out[o++] = b64chars[(v >> 12) & 63];
		out[o++] = b64chars[(v >> 6) & 63];
		out[o++] = b64chars[v & 63];
	}
	if (len - i == 1) {
		uint32_t v = (uint32_t)s[i] << 16;
		out[o++] = b64chars[v >> 18];
		out[o++] = b64chars[(v >> 12) & 63];
		out[o++] = '=';
		out[o++] = '=';
	} else if (len - i == 2) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
		out[o++] = b64chars[v >> 18];
		out[o++] = b64chars[(v >> 12) & 63];
		out[o++] = b64chars[(v >> 6) & 63];
		out[o++] = '=';
	}
	out[o] = '\0';
	return o;
}

static int b64val(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

long sbe_b64_decode(const char *in, void *out, size_t cap)
{
	uint8_t *d = out;
	size_t o = 0;
	uint32_t acc = 0;
	int bits = 0;
	for (const char *p = in; *p && *p != '='; p++) {
		int v = b64val(*p);
		if (v < 0)
			return -1;
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (o == cap)
				return -1;
			d[o++] = (uint8_t)(acc >> bits);
		}
	}
	return (long)o;
}
