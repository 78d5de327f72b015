/* select.c -- run a subset of a cmocka group chosen by name patterns */
#include <fnmatch.h>
#include <string.h>

#include "tests/lib/select.h"

static int matches(const char *name, const char *filter)
{
	const char *p = filter;
	while (*p) {
		size_t len = strcspn(p, ",");
		char pat[128];
		if (len && len < sizeof(pat)) {
			memcpy(pat, p, len);
			pat[len] = 0;
			if (fnmatch(pat, name, 0) == 0)
				return 1;
		}
		p += len + (p[len] == ',');
	}
	return 0;
}

size_t dxlt_select_tests(const struct CMUnitTest *all, size_t n,
			 struct CMUnitTest *out, const char *filter)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!filter || !*filter || matches(all[i].name, filter))
			out[k++] = all[i];
	return k;
}
