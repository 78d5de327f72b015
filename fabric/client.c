/* client.c -- the listen address of a fabric that only connects out */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/common.h"
#include "dxl/fabric.h"

static bool is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;
	if (!strcmp(host, "localhost"))
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	return false;
}

/* the local address the kernel would send to peer from (no packet is sent:
 * connect() on a datagram socket only picks the route); 0 or -1 */
static int route_src(const char *peer, char *out, size_t cap)
{
	char host[DXL_FABRIC_ADDR_MAX];
	uint16_t port;
	if (!peer || dxl_parse_hostport(peer, host, sizeof(host), &port))
		return -1;
	struct addrinfo hints = {.ai_socktype = SOCK_DGRAM,
				 .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	char ps[8];
	snprintf(ps, sizeof(ps), "%u", port ? port : 9);
	if (getaddrinfo(host, ps, &hints, &ai) || !ai)
		return -1;
	int ret = -1;
	int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (fd >= 0 && !connect(fd, ai->ai_addr, ai->ai_addrlen) &&
	    !getsockname(fd, (struct sockaddr *)&ss, &sl)) {
		char a[INET6_ADDRSTRLEN];
		const void *src = ss.ss_family == AF_INET
					  ? (const void *)&((struct sockaddr_in *)&ss)->sin_addr
					  : (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
		if (inet_ntop(ss.ss_family, src, a, sizeof(a)) &&
		    snprintf(out, cap, ss.ss_family == AF_INET6 ? "[%s]:0" : "%s:0", a) <
			    (int)cap)
			ret = 0;
	}
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	return ret;
}

int dxl_fabric_cfg_client(struct dxl_fabric_cfg *cfg, enum dxl_fabric_provider p,
			  const char *peer)
{
	char host[DXL_FABRIC_ADDR_MAX];
	uint16_t port;
	if (!cfg)
		return dxl_err_set(DXL_E_INVAL, "fabric client cfg: NULL");
	cfg->provider = p;
	if (p != DXL_FABRIC_VERBS)
		return 0;
	if (dxl_parse_hostport(cfg->listen_addr, host, sizeof(host), &port))
		return dxl_err_set(DXL_E_INVAL, "fabric: listen address '%s' is not host:port",
				   cfg->listen_addr);
	if (!is_loopback(host))
		return 0;
	if (route_src(peer, cfg->listen_addr, sizeof(cfg->listen_addr)))
		snprintf(cfg->listen_addr, sizeof(cfg->listen_addr), "0.0.0.0:0");
	return 0;
}
