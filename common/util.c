/* util.c -- small parsers shared by the modules */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

int dxl_parse_u64(const char *s, uint64_t *out)
{
	if (!s || !*s || isspace((unsigned char)*s) || *s == '-' || *s == '+')
		return DXL_E_INVAL;
	char *end = NULL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || !end || *end)
		return DXL_E_INVAL;
	*out = v;
	return 0;
}

int dxl_parse_hex64(const char *s, uint64_t *out)
{
	if (!s || s[0] != '0' || s[1] != 'x' || !s[2] || strlen(s + 2) > 16)
		return DXL_E_INVAL;
	uint64_t v = 0;
	for (const char *p = s + 2; *p; p++) {
		int d;
		if (*p >= '0' && *p <= '9')
			d = *p - '0';
		else if (*p >= 'a' && *p <= 'f')
			d = *p - 'a' + 10;
		else if (*p >= 'A' && *p <= 'F')
			d = *p - 'A' + 10;
		else
			return DXL_E_INVAL;
		v = v << 4 | (uint64_t)d;
	}
	*out = v;
	return 0;
}

int dxl_parse_size(const char *s, uint64_t *out)
{
	if (!s || !*s || !isdigit((unsigned char)*s))
		return DXL_E_INVAL;
	char *end = NULL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return DXL_E_INVAL;
	unsigned shift = 0;
	if (*end) {
		switch (toupper((unsigned char)*end)) {
		case 'K': shift = 10; break;
		case 'M': shift = 20; break;
		case 'G': shift = 30; break;
		case 'T': shift = 40; break;
		default: return DXL_E_INVAL;
		}
		end++;
		if (toupper((unsigned char)*end) == 'I')
			end++;
		if (toupper((unsigned char)*end) == 'B')
			end++;
		if (*end)
			return DXL_E_INVAL;
	}
	if (shift && v > (UINT64_MAX >> shift))
		return DXL_E_INVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

int dxl_parse_hostport(const char *s, char *host, size_t cap, uint16_t *port)
{
	if (!s)
		return DXL_E_INVAL;
	const char *colon = strrchr(s, ':');
	if (!colon || colon == s)
		return DXL_E_INVAL;
	size_t hl = (size_t)(colon - s);
	/* allow "[::1]:port" */
	const char *h = s;
	if (h[0] == '[' && colon[-1] == ']') {
		h++;
		hl -= 2;
	}
	if (hl == 0 || hl >= cap)
		return DXL_E_INVAL;
	uint64_t p;
	if (dxl_parse_u64(colon + 1, &p) || p > 65535)
		return DXL_E_INVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (uint16_t)p;
	return 0;
}
