/* fabric_config.c -- the fabric.* configuration keys */
#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "fabric/fabric_internal.h"

static const char *const known_keys[] = {
	"fabric.provider",   "fabric.listen",      "fabric.timeout_ms",
	"fabric.sq_depth",   "fabric.cq_depth",    "fabric.srq_depth",
	"fabric.max_inline", "fabric.max_msg",     "fabric.idle_spin_us",
	"fabric.device",     "fabric.port",        "fabric.gid_index",
	NULL,
};

int dxl_fabric_cfg_load(const struct dxl_config *conf, struct dxl_fabric_cfg *out)
{
	struct dxl_fabric_cfg c = *out;
	uint64_t v;
	int ret;
	ret = dxl_config_check_known_prefix(conf, "fabric.", known_keys);
	if (ret)
		return ret;

	static const char *const provs[] = {"tcp", "verbs", NULL};
	int p = (int)c.provider;
	if ((ret = dxl_config_get_enum(conf, "fabric.provider", provs, p, &p)))
		return ret;
	c.provider = (enum dxl_fabric_provider)p;

	const char *s;
	dxl_config_get_str(conf, "fabric.listen", c.listen_addr, &s);
	if (s != c.listen_addr) {
		char host[DXL_FABRIC_ADDR_MAX];
		uint16_t port;
		if (strlen(s) >= sizeof(c.listen_addr) ||
		    dxl_parse_hostport(s, host, sizeof(host), &port))
			return dxl_err_set(DXL_E_CONFIG,
					   "%s: key fabric.listen: '%s' is not host:port",
					   dxl_config_origin(conf, "fabric.listen"), s);
		snprintf(c.listen_addr, sizeof(c.listen_addr), "%s", s);
	}

#define U32_KEY(key, field, lo, hi)                                           \
	do {                                                                  \
		if ((ret = dxl_config_get_u64(conf, key, c.field, lo, hi, &v))) \
			return ret;                                           \
		c.field = (__typeof__(c.field))v;                             \
	} while (0)
	U32_KEY("fabric.timeout_ms", timeout_ms, 1, 3600000);
	U32_KEY("fabric.sq_depth", sq_depth, 4, 65536);
	U32_KEY("fabric.cq_depth", cq_depth, 4, 1u << 22);
	U32_KEY("fabric.srq_depth", srq_depth, 1, 65536);
	U32_KEY("fabric.max_inline", max_inline, 0, 1024);
	U32_KEY("fabric.idle_spin_us", idle_spin_us, 0, 1000000);
	U32_KEY("fabric.port", port, 1, 255);
#undef U32_KEY
	if ((ret = dxl_config_get_size(conf, "fabric.max_msg", c.max_msg, 64,
				       16u << 20, &v)))
		return ret;
	c.max_msg = (uint32_t)v;

	dxl_config_get_str(conf, "fabric.device", c.device, &s);
	if (s != c.device) {
		if (strlen(s) >= sizeof(c.device))
			return dxl_err_set(DXL_E_CONFIG,
					   "%s: key fabric.device: name too long",
					   dxl_config_origin(conf, "fabric.device"));
		snprintf(c.device, sizeof(c.device), "%s", s);
	}
	if (dxl_config_has(conf, "fabric.gid_index")) {
		dxl_config_get_str(conf, "fabric.gid_index", "", &s);
		if (strcmp(s, "auto") == 0 || strcmp(s, "-1") == 0) {
			c.gid_index = -1;
		} else {
			if ((ret = dxl_config_get_u64(conf, "fabric.gid_index",
						      0, 0, 255, &v)))
				return ret;
			c.gid_index = (int)v;
		}
	}
	*out = c;
	return 0;
}
