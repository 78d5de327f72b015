/* txn.c -- dxl get, put, insert, del and txn: transactions through a
 * dxl-coord coordinator (docs/cli.md, protocol in docs/coord.md) */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/coordproto.h"
#include "dxl/membership.h"

#include "cli.h"

/* exit codes of these commands (their --help, docs/cli.md) */
enum {
	TX_OK = 0,
	TX_FAIL = 1,     /* error: no coordinator, refused request, ... */
	TX_USAGE = 2,
	TX_NOENT = 3,    /* no such key */
	TX_CONFLICT = 4, /* aborted by conflicts on every try */
};

#define TXN_EXIT_HELP                                                          \
	"EXIT STATUS\n"                                                        \
	"    0  committed (get: the key exists)\n"                             \
	"    1  failed: no coordinator, ZooKeeper unreachable, the request\n"  \
	"       refused (unknown table, value too big, key exists...), the\n"   \
	"       shard unavailable (DXL_E_UNAVAIL: no serving primary, its\n"    \
	"       configuration changing; sent again until --timeout)\n"          \
	"    2  bad command line (or a bad line on stdin: dxl txn)\n"           \
	"    3  no such key (DXL_E_NOENT): nothing was changed\n"               \
	"    4  aborted by conflicts on every try (DXL_E_CONFLICT)\n"

enum vfmt { V_TEXT, V_HEX, V_INT64 };

struct topts {
	const char *coord;   /* --coord HOST:PORT */
	const char *dir, *zk, *cluster;
	enum vfmt fmt;
	uint32_t tries;
	uint32_t timeout_ms;
};

#define COMMON_OPTS_HELP                                                      \
	"  --coord HOST:PORT  the coordinator to use (default: the first one\n"  \
	"                     registered in ZooKeeper, coords/<id>)\n"           \
	"  --dir DIR          the directory of 'dxl cluster up' [./dxl-cluster]\n" \
	"  --zk CONNECT       ZooKeeper connect string (instead of DIR/cluster.json)\n" \
	"  --cluster NAME     cluster name with --zk [default]\n"                \
	"  --hex              values in hexadecimal (input and output)\n"        \
	"  --int64            values are 8-byte little-endian signed integers,\n" \
	"                     written and printed in decimal (SmallBank balances)\n" \
	"  --tries N          runs of the transaction when conflicts abort it\n" \
	"                     (0: the coordinator's default, 1000) [0]\n"        \
	"  --timeout MS       give up after MS: waiting for the reply, and sending\n" \
	"                     again a transaction the coordinator reports\n" \
	"                     DXL_E_UNAVAIL (no serving primary, the shard's\n" \
	"                     configuration changing: a failover; nothing of it\n" \
	"                     happened) every 100 ms; then exit 1 [30000]\n" \
	"  -h, --help         this text\n"

static void kv_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl get TABLE KEY [OPTIONS]\n"
"       dxl put TABLE KEY VALUE [OPTIONS]\n"
"       dxl insert TABLE KEY VALUE [OPTIONS]\n"
"       dxl del TABLE KEY [OPTIONS]\n"
"\n"
"One operation as one transaction through a dxl-coord coordinator:\n"
"  get     print the value of KEY in TABLE (one line; text as is, --hex,\n"
"          --int64 in decimal)\n"
"  put     set the value of an existing KEY (not found: exit 3)\n"
"  insert  create KEY (exists: exit 1, DXL_E_EXIST)\n"
"  del     remove KEY (not found: exit 3)\n"
"A write prints 'committed commit_ts=TS attempts=N'. TABLE is a table id of\n"
"engine.tables, KEY an unsigned 64-bit number (decimal or 0x hex). A VALUE\n"
"starting with '-' (a negative --int64) goes after '--'.\n"
"\n"
COMMON_OPTS_HELP
"\n" TXN_EXIT_HELP);
}

static void txn_usage(FILE *out)
{
	fprintf(out,
"Usage: dxl txn [OPTIONS] < OPS\n"
"\n"
"Read operations from stdin, one per line, and commit them as ONE\n"
"transaction through a dxl-coord coordinator (at most %u operations):\n"
"\n"
"    get TABLE KEY\n"
"    put TABLE KEY VALUE      (VALUE: the rest of the line after one space)\n"
"    insert TABLE KEY VALUE\n"
"    del TABLE KEY            (or delete)\n"
"\n"
"Empty lines and lines starting with '#' are skipped. The operations run in\n"
"order; a get sees the transaction's own earlier writes. All or nothing:\n"
"if one fails (no such key, key exists, unknown table, value too big) the\n"
"transaction is aborted and nothing of it happens. Output, one line per\n"
"operation and the outcome:\n"
"\n"
"    <n>\\t<op>\\t<table>\\t<key>\\tok[\\t<value>]     (value: gets)\n"
"    <n>\\t<op>\\t<table>\\t<key>\\t<DXL_E_...>       (the one that failed)\n"
"    <n>\\t<op>\\t<table>\\t<key>\\t-                 (not done: aborted)\n"
"    committed commit_ts=TS attempts=N\n"
"    aborted <DXL_E_...> attempts=N                (the reason on stderr)\n"
"\n"
COMMON_OPTS_HELP
"\n" TXN_EXIT_HELP, (unsigned)DXL_TXN_MAX_OPS);
}

/* ---- values ------------------------------------------------------------------ */

static int hexdigit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* parse_value -- s in the chosen format into out (cap bytes); its length,
 * or -1 with a message */
static int parse_value(const char *s, enum vfmt fmt, uint8_t *out, size_t cap, char *why,
		       size_t wcap)
{
	size_t n = strlen(s);
	if (fmt == V_INT64) {
		char *end;
		errno = 0;
		long long v = strtoll(s, &end, 0);
		if (!n || *end || errno) {
			snprintf(why, wcap, "'%s' is not a signed 64-bit integer (--int64)", s);
			return -1;
		}
		uint64_t u = (uint64_t)v;
		for (int i = 0; i < 8; i++)
			out[i] = (uint8_t)(u >> (8 * i));
		return 8;
	}
	if (fmt == V_HEX) {
		if (n % 2) {
			snprintf(why, wcap, "'%s': odd number of hex digits (--hex)", s);
			return -1;
		}
		if (n / 2 > cap) {
			snprintf(why, wcap, "value of %zu bytes: over the largest value size %zu",
				 n / 2, cap);
			return -1;
		}
		for (size_t i = 0; i < n; i++) {
			int d = hexdigit(s[i]);
			if (d < 0) {
				snprintf(why, wcap, "'%s' is not hexadecimal (--hex)", s);
				return -1;
			}
			if (i % 2)
				out[i / 2] = (uint8_t)(out[i / 2] << 4 | d);
			else
				out[i / 2] = (uint8_t)d;
		}
		return (int)(n / 2);
	}
	if (n > cap) {
		snprintf(why, wcap, "value of %zu bytes: over the largest value size %zu", n,
			 cap);
		return -1;
	}
	memcpy(out, s, n);
	return (int)n;
}

/* print_value -- v in the chosen format (no newline); false if --int64 and
 * v is not 8 bytes */
static bool print_value(FILE *f, const uint8_t *v, uint32_t len, enum vfmt fmt)
{
	if (fmt == V_INT64) {
		if (len != 8)
			return false;
		uint64_t u = 0;
		for (int i = 7; i >= 0; i--)
			u = u << 8 | v[i];
		fprintf(f, "%" PRId64, (int64_t)u);
	} else if (fmt == V_HEX) {
		for (uint32_t i = 0; i < len; i++)
			fprintf(f, "%02x", v[i]);
	} else {
		fwrite(v, 1, len, f);
	}
	return true;
}

/* ---- the coordinator ----------------------------------------------------------- */

/* find_coord -- --coord, or the addr of the first coords/<id> */
static int find_coord(const struct topts *o, char *addr, size_t cap)
{
	if (o->coord) {
		snprintf(addr, cap, "%s", o->coord);
		return 0;
	}
	struct conn cn;
	int ret = resolve_conn(o->dir, o->zk, o->cluster, &cn);
	if (ret)
		return ret == EX_USAGE ? TX_USAGE : TX_FAIL;
	struct dxl_zk *zk = NULL;
	if (zk_connect(&cn, &zk))
		return TX_FAIL;
	uint32_t ids[16];
	int n = dxl_coord_znode_list(zk, ids, 16);
	if (n < 0) {
		errf("listing the coordinators of cluster %s: %s", cn.cluster, dxl_errmsg());
		dxl_zk_delete(&zk);
		return TX_FAIL;
	}
	ret = TX_FAIL;
	char data[512];
	for (int i = 0; i < n && i < 16 && ret; i++) {
		/* one may vanish between the list and the read: take the next */
		if (dxl_coord_znode_get(zk, ids[i], data, sizeof(data)) < 0)
			continue;
		json_t *j = json_loads(data, 0, NULL);
		const char *a = json_string_value(json_object_get(j, "addr"));
		if (a && strlen(a) < cap) {
			snprintf(addr, cap, "%s", a);
			ret = 0;
		}
		json_decref(j);
	}
	if (ret)
		errf(n ? "no usable coordinator in cluster %s (coords/ has no \"addr\")" :
			 "no coordinator registered in cluster %s (start dxl-coord, or give --coord HOST:PORT)",
		     cn.cluster);
	dxl_zk_delete(&zk);
	return ret;
}

/* dial -- a TCP connection to host:port within timeout_ms; fd or -1 */
static int dial(const char *addr, uint32_t timeout_ms)
{
	char host[256];
	uint16_t port;
	if (dxl_parse_hostport(addr, host, sizeof(host), &port)) {
		errf("coordinator address '%s' is not HOST:PORT", addr);
		return -1;
	}
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	char ps[8];
	snprintf(ps, sizeof(ps), "%u", port);
	int gai = getaddrinfo(host, ps, &hints, &res);
	if (gai) {
		errf("coordinator %s: %s", addr, gai_strerror(gai));
		return -1;
	}
	int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		errf("socket: %s", strerror(errno));
		freeaddrinfo(res);
		return -1;
	}
	int rc = connect(fd, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	if (rc && errno == EINPROGRESS) {
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		int err = 0;
		socklen_t el = sizeof(err);
		if (poll(&p, 1, (int)timeout_ms) != 1)
			err = ETIMEDOUT;
		else
			getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
		errno = err;
		rc = err ? -1 : 0;
	}
	if (rc) {
		errf("cannot connect to the coordinator at %s: %s", addr, strerror(errno));
		close(fd);
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* call -- send the frame in req, wait for the reply with the same request
 * id; the reply's bytes in *rbuf (free it), decoded into *m */
static int call(const char *addr, const struct dxl_cproto_buf *req, uint64_t req_id,
		uint32_t timeout_ms, uint8_t **rbuf, struct dxl_cproto_msg *m)
{
	int fd = dial(addr, timeout_ms);
	if (fd < 0)
		return -1;
	uint64_t end = dxl_now_ms() + timeout_ms;
	size_t off = 0;
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;
	int ret = -1;
	while (off < req->len) {
		ssize_t n = send(fd, req->p + off, req->len - off, MSG_NOSIGNAL);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			int left = (int)(end > dxl_now_ms() ? end - dxl_now_ms() : 0);
			if (poll(&p, 1, left) <= 0) {
				errf("coordinator %s: timed out sending the request", addr);
				goto out;
			}
			continue;
		}
		errf("coordinator %s: send: %s", addr, strerror(errno));
		goto out;
	}
	for (;;) {
		size_t total = 0;
		int k = dxl_cproto_frame_len(buf, len, &total);
		if (k < 0) {
			errf("coordinator %s: reply frame length over 1 MiB", addr);
			goto out;
		}
		if (k > 0 && len >= total) {
			char why[256];
			int e = dxl_cproto_decode(buf, total, m, why, sizeof(why));
			if (e) {
				errf("coordinator %s: bad reply: %s", addr, why);
				goto out;
			}
			if (m->req_id == req_id || m->kind == DXL_CPROTO_ERROR) {
				*rbuf = buf;
				buf = NULL;
				ret = 0;
				goto out;
			}
			/* someone else's reply cannot come on our own
			 * connection; skip it anyway */
			memmove(buf, buf + total, len - total);
			len -= total;
			continue;
		}
		if (cap - len < 65536) {
			size_t ncap = cap ? cap * 2 : 65536 * 2;
			uint8_t *p = realloc(buf, ncap);
			if (!p) {
				errf("out of memory");
				goto out;
			}
			buf = p;
			cap = ncap;
		}
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int left = (int)(end > dxl_now_ms() ? end - dxl_now_ms() : 0);
		int pr = poll(&p, 1, left);
		if (pr == 0) {
			errf("coordinator %s: no reply within %u ms (--timeout)", addr, timeout_ms);
			goto out;
		}
		if (pr < 0 && errno == EINTR)
			continue;
		ssize_t n = recv(fd, buf + len, cap - len, 0);
		if (n > 0) {
			len += (size_t)n;
			continue;
		}
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		errf("coordinator %s: connection closed before the reply%s%s", addr,
		     n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
		goto out;
	}
out:
	free(buf);
	close(fd);
	return ret;
}

static int status_exit(int status)
{
	switch (status) {
	case 0: return TX_OK;
	case DXL_E_NOENT: return TX_NOENT;
	case DXL_E_CONFLICT: return TX_CONFLICT; /* contention only */
	case DXL_E_UNAVAIL: return TX_FAIL;      /* no primary, configuration changing */
	default: return TX_FAIL;
	}
}

/* run_ops -- send ops as one transaction; print per the command; exit code */
static int run_ops(const struct topts *o, const struct dxl_cproto_op *ops, uint32_t nops,
		   bool txn_mode)
{
	char addr[256];
	int ret = find_coord(o, addr, sizeof(addr));
	if (ret)
		return ret;
	/* a transaction the coordinator reports DXL_E_UNAVAIL without maybe
	 * (a shard without a serving primary, its configuration changing: the
	 * coordinator retried it for coord.log_unavail_ms; nothing of it
	 * happened) is sent again until --timeout has passed since the first
	 * send, then reported: exit 1. Decided by the status code alone. */
	uint64_t deadline = dxl_now_ms() + o->timeout_ms, first = dxl_now_ms();
	uint32_t resent = 0;
	uint8_t *rbuf = NULL;
	struct dxl_cproto_msg *m = calloc(1, sizeof(*m));
	if (!m)
		return TX_FAIL;
	for (;;) {
		struct dxl_cproto_buf req = {0};
		uint64_t req_id = ((uint64_t)getpid() << 32) ^ dxl_now_ns();
		if (dxl_cproto_encode_txn(&req, req_id, o->tries, ops, nops)) {
			errf("cannot encode the request (out of memory or too big)");
			free(req.p);
			free(m);
			return TX_FAIL;
		}
		uint64_t now = dxl_now_ms();
		uint32_t left = now < deadline ? (uint32_t)(deadline - now) : 1;
		int cr = call(addr, &req, req_id, left, &rbuf, m);
		free(req.p);
		if (cr) {
			free(m);
			return TX_FAIL;
		}
		bool unavail = m->kind == DXL_CPROTO_TXN_REPLY && m->status == DXL_E_UNAVAIL &&
			       !m->maybe;
		if (!unavail || dxl_now_ms() + 100 >= deadline)
			break; /* reported below: DXL_E_UNAVAIL is exit 1 */
		resent++;
		free(rbuf);
		rbuf = NULL;
		memset(m, 0, sizeof(*m));
		usleep(100000);
	}
	if (resent)
		fprintf(stderr, "%s: the shard was unavailable (DXL_E_UNAVAIL): sent %u more "
			"time(s), %.1f s%s\n", g_cmd, resent, (double)(dxl_now_ms() - first) / 1000,
			m->status == DXL_E_UNAVAIL ? " (--timeout reached)" : "");
	if (m->kind == DXL_CPROTO_ERROR) {
		errf("the coordinator refused the request: %s: %.*s", dxl_errname(m->status),
		     (int)m->msg_len, m->msg);
		free(rbuf);
		free(m);
		return TX_FAIL;
	}
	if (m->kind != DXL_CPROTO_TXN_REPLY || m->nops != nops) {
		errf("coordinator %s: unexpected reply (kind 0x%02x, %u results for %u operations)",
		     addr, m->kind, m->nops, nops);
		free(rbuf);
		free(m);
		return TX_FAIL;
	}
	int rc = status_exit(m->status);
	bool bad_int = false;
	if (txn_mode) {
		for (uint32_t i = 0; i < nops; i++) {
			const struct dxl_cproto_op *r = &m->ops[i];
			printf("%u\t%s\t%u\t%" PRIu64 "\t", i, dxl_cproto_opname(ops[i].op),
			       ops[i].table, ops[i].key);
			if (r->status == 0) {
				printf("ok");
				if (ops[i].op == DXL_CPROTO_OP_GET) {
					putchar('\t');
					if (!print_value(stdout, r->value, r->len, o->fmt)) {
						print_value(stdout, r->value, r->len, V_HEX);
						bad_int = true;
					}
				}
			} else if (r->status == DXL_CPROTO_OP_NOT_DONE) {
				printf("-");
			} else {
				printf("%s", dxl_errname(r->status));
			}
			putchar('\n');
		}
		if (m->status == 0)
			printf("committed commit_ts=%" PRIu64 " attempts=%u\n", m->commit_ts,
			       m->attempts);
		else
			printf("aborted %s attempts=%u\n", dxl_errname(m->status), m->attempts);
	} else if (m->status == 0) {
		if (ops[0].op == DXL_CPROTO_OP_GET) {
			if (!print_value(stdout, m->ops[0].value, m->ops[0].len, o->fmt)) {
				errf("table %u key %" PRIu64 ": the value has %u bytes, not 8 (--int64)",
				     ops[0].table, ops[0].key, m->ops[0].len);
				rc = TX_FAIL;
			} else {
				putchar('\n');
			}
		} else {
			printf("committed commit_ts=%" PRIu64 " attempts=%u\n", m->commit_ts,
			       m->attempts);
		}
	}
	if (bad_int) {
		errf("a value is not 8 bytes: printed in hex (--int64)");
		if (!rc)
			rc = TX_FAIL;
	}
	if (m->status) {
		if (m->status == DXL_E_NOENT && !txn_mode)
			errf("table %u key %" PRIu64 ": not found", ops[0].table, ops[0].key);
		else if (m->status == DXL_E_UNAVAIL && !m->maybe)
			errf("DXL_E_UNAVAIL: unavailable, nothing was changed (retry later): %.*s",
			     (int)m->msg_len, m->msg);
		else
			errf("%s%.*s", m->msg_len ? "" : dxl_errname(m->status), (int)m->msg_len,
			     m->msg);
		if (m->maybe)
			errf("the outcome is unknown: the transaction may have committed "
			     "(a log append was sent before the failure)");
	}
	fflush(stdout);
	free(rbuf);
	free(m);
	return rc;
}

/* ---- option parsing ------------------------------------------------------------ */

/* parse_common -- the shared options; -1 = --help was printed (exit 0) */
static int parse_common(int argc, char **argv, struct topts *o, void (*usage)(FILE *))
{
	static const struct option opts[] = {
		{"coord", required_argument, NULL, 'A'},
		{"dir", required_argument, NULL, 'd'},
		{"zk", required_argument, NULL, 'z'},
		{"cluster", required_argument, NULL, 'C'},
		{"hex", no_argument, NULL, 'x'},
		{"int64", no_argument, NULL, 'I'},
		{"tries", required_argument, NULL, 'T'},
		{"timeout", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	memset(o, 0, sizeof(*o));
	o->dir = "./dxl-cluster";
	o->timeout_ms = 30000;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'A': {
			char host[256];
			uint16_t port;
			if (dxl_parse_hostport(optarg, host, sizeof(host), &port) || !port) {
				errf("--coord '%s': want HOST:PORT (the address dxl-coord prints)",
				     optarg);
				return TX_USAGE;
			}
			o->coord = optarg;
			break;
		}
		case 'd': o->dir = optarg; break;
		case 'z': o->zk = optarg; break;
		case 'C': o->cluster = optarg; break;
		case 'x':
			if (o->fmt == V_INT64) {
				errf("--hex and --int64 exclude each other");
				return TX_USAGE;
			}
			o->fmt = V_HEX;
			break;
		case 'I':
			if (o->fmt == V_HEX) {
				errf("--hex and --int64 exclude each other");
				return TX_USAGE;
			}
			o->fmt = V_INT64;
			break;
		case 'T':
			if (parse_u32(optarg, &o->tries)) {
				errf("--tries '%s': a number", optarg);
				return TX_USAGE;
			}
			break;
		case 't':
			if (parse_u32(optarg, &o->timeout_ms) || !o->timeout_ms ||
			    o->timeout_ms > 3600000) {
				errf("--timeout '%s': milliseconds, 1..3600000", optarg);
				return TX_USAGE;
			}
			break;
		case 'h': usage(stdout); return -1;
		default: usage(stderr); return TX_USAGE;
		}
	}
	return 0;
}

static int parse_table_key(const char *t, const char *k, struct dxl_cproto_op *op,
			   char *why, size_t wcap)
{
	uint64_t key;
	if (parse_u32(t, &op->table)) {
		snprintf(why, wcap, "table '%s': not a table id", t);
		return -1;
	}
	if (dxl_parse_u64(k, &key)) {
		snprintf(why, wcap, "key '%s': not an unsigned 64-bit number", k);
		return -1;
	}
	op->key = key;
	return 0;
}

/* cmd_kv -- dxl get|put|insert|del (argv[0] is the command) */
int cmd_kv(int argc, char **argv)
{
	const char *cmd = argv[0];
	struct topts o;
	int ret = parse_common(argc, argv, &o, kv_usage);
	if (ret)
		return ret < 0 ? TX_OK : ret;
	struct dxl_cproto_op op;
	memset(&op, 0, sizeof(op));
	int want;
	if (!strcmp(cmd, "get")) {
		op.op = DXL_CPROTO_OP_GET;
		want = 2;
	} else if (!strcmp(cmd, "put")) {
		op.op = DXL_CPROTO_OP_PUT;
		want = 3;
	} else if (!strcmp(cmd, "insert")) {
		op.op = DXL_CPROTO_OP_INSERT;
		want = 3;
	} else {
		op.op = DXL_CPROTO_OP_DELETE;
		want = 2;
	}
	if (argc - optind != want) {
		errf("%s: want %s, got %d argument%s (see --help)", cmd,
		     want == 2 ? "TABLE KEY" : "TABLE KEY VALUE", argc - optind,
		     argc - optind == 1 ? "" : "s");
		return TX_USAGE;
	}
	char why[256];
	static uint8_t value[DXL_ENGINE_MAX_VALUE];
	if (parse_table_key(argv[optind], argv[optind + 1], &op, why, sizeof(why))) {
		errf("%s", why);
		return TX_USAGE;
	}
	if (want == 3) {
		int n = parse_value(argv[optind + 2], o.fmt, value, sizeof(value), why,
				    sizeof(why));
		if (n < 0) {
			errf("%s", why);
			return TX_USAGE;
		}
		op.value = value;
		op.len = (uint32_t)n;
	}
	return run_ops(&o, &op, 1, false);
}

/* cmd_txn -- dxl txn: operations from stdin, one transaction */
int cmd_txn(int argc, char **argv)
{
	struct topts o;
	int ret = parse_common(argc, argv, &o, txn_usage);
	if (ret)
		return ret < 0 ? TX_OK : ret;
	if (optind < argc) {
		errf("unexpected argument '%s': the operations come from stdin (see --help)",
		     argv[optind]);
		return TX_USAGE;
	}
	static struct dxl_cproto_op ops[DXL_TXN_MAX_OPS];
	static uint8_t values[DXL_TXN_MAX_OPS][DXL_ENGINE_MAX_VALUE];
	uint32_t nops = 0, lineno = 0;
	char *line = NULL;
	size_t lcap = 0;
	ssize_t n;
	int rc = 0;
	while ((n = getline(&line, &lcap, stdin)) >= 0) {
		lineno++;
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = 0;
		char *p = line;
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p || *p == '#')
			continue;
		if (nops == DXL_TXN_MAX_OPS) {
			errf("stdin line %u: more than %u operations in one transaction", lineno,
			     (unsigned)DXL_TXN_MAX_OPS);
			rc = TX_USAGE;
			break;
		}
		/* op, table, key separated by blanks; the value is the rest
		 * of the line after the one blank that follows the key */
		char *f[3];
		int nf = 0;
		for (; nf < 3 && *p; nf++) {
			f[nf] = p;
			while (*p && *p != ' ' && *p != '\t')
				p++;
			if (*p)
				*p++ = 0;
			if (nf < 2)
				while (*p == ' ' || *p == '\t')
					p++;
		}
		struct dxl_cproto_op *op = &ops[nops];
		memset(op, 0, sizeof(*op));
		char why[256];
		bool has_value = false;
		if (nf >= 1 && !strcmp(f[0], "get")) {
			op->op = DXL_CPROTO_OP_GET;
		} else if (nf >= 1 && !strcmp(f[0], "put")) {
			op->op = DXL_CPROTO_OP_PUT;
			has_value = true;
		} else if (nf >= 1 && !strcmp(f[0], "insert")) {
			op->op = DXL_CPROTO_OP_INSERT;
			has_value = true;
		} else if (nf >= 1 && (!strcmp(f[0], "del") || !strcmp(f[0], "delete"))) {
			op->op = DXL_CPROTO_OP_DELETE;
		} else {
			errf("stdin line %u: unknown operation '%s' (get, put, insert, del)",
			     lineno, nf ? f[0] : "");
			rc = TX_USAGE;
			break;
		}
		/* a value needs the blank after the key (p moved past it) */
		bool value_there = nf == 3 && p > f[2] + strlen(f[2]);
		if (nf < 3) {
			errf("stdin line %u: %s needs TABLE KEY%s", lineno, f[0],
			     has_value ? " VALUE" : "");
			rc = TX_USAGE;
			break;
		}
		if (parse_table_key(f[1], f[2], op, why, sizeof(why))) {
			errf("stdin line %u: %s", lineno, why);
			rc = TX_USAGE;
			break;
		}
		if (has_value) {
			if (!value_there) {
				errf("stdin line %u: %s needs a VALUE after the key", lineno, f[0]);
				rc = TX_USAGE;
				break;
			}
			int vl = parse_value(p, o.fmt, values[nops], sizeof(values[nops]), why,
					     sizeof(why));
			if (vl < 0) {
				errf("stdin line %u: %s", lineno, why);
				rc = TX_USAGE;
				break;
			}
			op->value = values[nops];
			op->len = (uint32_t)vl;
		} else if (*p) {
			errf("stdin line %u: %s takes TABLE KEY only, not '%s'", lineno, f[0], p);
			rc = TX_USAGE;
			break;
		}
		nops++;
	}
	free(line);
	if (rc)
		return rc;
	if (!nops) {
		errf("no operations on stdin (see --help)");
		return TX_USAGE;
	}
	return run_ops(&o, ops, nops, true);
}
