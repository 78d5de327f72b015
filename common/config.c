/* config.c -- typed configuration over libinih, with origins for every key */
#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/common.h"
#include "common/config.h"

struct entry {
	char *key;
	char *value;
	char *origin; /* "file:line" or "override" */
	struct entry *next;
};

struct dxl_config {
	struct entry *head;
};

int dxl_config_new(struct dxl_config **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : dxl_err_set(DXL_E_NOMEM, "config: out of memory");
}

void dxl_config_delete(struct dxl_config **cfgp)
{
	if (!cfgp || !*cfgp)
		return;
	struct entry *e = (*cfgp)->head;
	while (e) {
		struct entry *n = e->next;
		free(e->key);
		free(e->value);
		free(e->origin);
		free(e);
		e = n;
	}
	free(*cfgp);
	*cfgp = NULL;
}

static struct entry *find(const struct dxl_config *cfg, const char *key)
{
	for (struct entry *e = cfg->head; e; e = e->next)
		if (strcmp(e->key, key) == 0)
			return e;
	return NULL;
}

static int put(struct dxl_config *cfg, const char *key, const char *value,
	       const char *origin)
{
	struct entry *e = find(cfg, key);
	char *v = strdup(value);
	char *o = strdup(origin);
	if (!v || !o) {
		free(v);
		free(o);
		return dxl_err_set(DXL_E_NOMEM, "config: out of memory");
	}
	if (e) {
		free(e->value);
		free(e->origin);
		e->value = v;
		e->origin = o;
		return 0;
	}
	e = calloc(1, sizeof(*e));
	if (!e || !(e->key = strdup(key))) {
		free(e);
		free(v);
		free(o);
		return dxl_err_set(DXL_E_NOMEM, "config: out of memory");
	}
	e->value = v;
	e->origin = o;
	/* append, so iteration follows definition order */
	struct entry **pp = &cfg->head;
	while (*pp)
		pp = &(*pp)->next;
	*pp = e;
	return 0;
}

struct load_state {
	struct dxl_config *cfg;
	FILE *fp;
	const char *path;
	int line;
	int err;
};

/* ini_reader: count lines so the handler can name them */
static char *reader(char *str, int num, void *stream)
{
	struct load_state *st = stream;
	char *r = fgets(str, num, st->fp);
	if (r)
		st->line++;
	return r;
}

static int handler(void *user, const char *section, const char *name,
		   const char *value)
{
	struct load_state *st = user;
	char key[256];
	char origin[512];
	if (section && *section)
		snprintf(key, sizeof(key), "%s.%s", section, name);
	else
		snprintf(key, sizeof(key), "%s", name);
	snprintf(origin, sizeof(origin), "%s:%d", st->path, st->line);
	st->err = put(st->cfg, key, value ? value : "", origin);
	return st->err == 0;
}

int dxl_config_load_file(struct dxl_config *cfg, const char *path)
{
	struct load_state st = {.cfg = cfg, .path = path};
	st.fp = fopen(path, "r");
	if (!st.fp)
		return dxl_err_errno(errno, "config: cannot open %s", path);
	int r = ini_parse_stream(reader, &st, handler, &st);
	fclose(st.fp);
	if (st.err)
		return st.err;
	if (r > 0)
		return dxl_err_set(DXL_E_CONFIG,
				   "%s:%d: syntax error (expected [section] or key = value)",
				   path, r);
	if (r < 0)
		return dxl_err_set(DXL_E_IO, "config: cannot read %s", path);
	return 0;
}

int dxl_config_set(struct dxl_config *cfg, const char *key, const char *value)
{
	if (!key || !*key || !value)
		return dxl_err_set(DXL_E_CONFIG, "config: empty key or NULL value");
	return put(cfg, key, value, "override");
}

int dxl_config_set_arg(struct dxl_config *cfg, const char *kv)
{
	const char *eq = kv ? strchr(kv, '=') : NULL;
	if (!eq || eq == kv)
		return dxl_err_set(DXL_E_CONFIG,
				   "config: '%s' is not key=value", kv ? kv : "");
	char key[256];
	size_t kl = (size_t)(eq - kv);
	if (kl >= sizeof(key))
		return dxl_err_set(DXL_E_CONFIG, "config: key too long in '%s'",
				   kv);
	memcpy(key, kv, kl);
	key[kl] = '\0';
	return put(cfg, key, eq + 1, "override");
}

static int known_key(const char *key, const char *const *known)
{
	for (; *known; known++) {
		size_t n = strlen(*known);
		if (n >= 2 && strcmp(*known + n - 2, ".*") == 0) {
			if (strncmp(key, *known, n - 1) == 0)
				return 1;
		} else if (strcmp(key, *known) == 0) {
			return 1;
		}
	}
	return 0;
}

int dxl_config_check_known(const struct dxl_config *cfg,
			   const char *const *known)
{
	for (struct entry *e = cfg->head; e; e = e->next)
		if (!known_key(e->key, known))
			return dxl_err_set(DXL_E_CONFIG, "%s: unknown key '%s'",
					   e->origin, e->key);
	return 0;
}

int dxl_config_check_known_prefix(const struct dxl_config *cfg,
				  const char *prefix, const char *const *known)
{
	size_t pl = strlen(prefix);
	for (struct entry *e = cfg->head; e; e = e->next)
		if (strncmp(e->key, prefix, pl) == 0 && !known_key(e->key, known))
			return dxl_err_set(DXL_E_CONFIG, "%s: unknown key '%s'",
					   e->origin, e->key);
	return 0;
}

bool dxl_config_has(const struct dxl_config *cfg, const char *key)
{
	return find(cfg, key) != NULL;
}

const char *dxl_config_origin(const struct dxl_config *cfg, const char *key)
{
	struct entry *e = find(cfg, key);
	return e ? e->origin : NULL;
}

int dxl_config_get_str(const struct dxl_config *cfg, const char *key,
		       const char *def, const char **out)
{
	struct entry *e = find(cfg, key);
	*out = e ? e->value : def;
	return 0;
}

static int range_check(const struct entry *e, uint64_t v, uint64_t min,
		       uint64_t max)
{
	if (v < min || v > max)
		return dxl_err_set(DXL_E_CONFIG,
				   "%s: key %s: %llu is out of range %llu..%llu",
				   e->origin, e->key, (unsigned long long)v,
				   (unsigned long long)min,
				   (unsigned long long)max);
	return 0;
}

int dxl_config_get_u64(const struct dxl_config *cfg, const char *key,
		       uint64_t def, uint64_t min, uint64_t max, uint64_t *out)
{
	struct entry *e = find(cfg, key);
	if (!e) {
		*out = def;
		return 0;
	}
	uint64_t v;
	if (dxl_parse_u64(e->value, &v))
		return dxl_err_set(DXL_E_CONFIG,
				   "%s: key %s: '%s' is not a non-negative integer",
				   e->origin, key, e->value);
	int ret = range_check(e, v, min, max);
	if (!ret)
		*out = v;
	return ret;
}

int dxl_config_get_size(const struct dxl_config *cfg, const char *key,
			uint64_t def, uint64_t min, uint64_t max, uint64_t *out)
{
	struct entry *e = find(cfg, key);
	if (!e) {
		*out = def;
		return 0;
	}
	uint64_t v;
	if (dxl_parse_size(e->value, &v))
		return dxl_err_set(DXL_E_CONFIG,
				   "%s: key %s: '%s' is not a size (e.g. 4096, 64K, 1M, 2G)",
				   e->origin, key, e->value);
	int ret = range_check(e, v, min, max);
	if (!ret)
		*out = v;
	return ret;
}

int dxl_config_get_bool(const struct dxl_config *cfg, const char *key,
			bool def, bool *out)
{
	static const char *const yes[] = {"true", "yes", "on", "1"};
	static const char *const no[] = {"false", "no", "off", "0"};
	struct entry *e = find(cfg, key);
	if (!e) {
		*out = def;
		return 0;
	}
	for (unsigned i = 0; i < DXL_ARRAY_SIZE(yes); i++) {
		if (strcasecmp(e->value, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(e->value, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return dxl_err_set(DXL_E_CONFIG,
			   "%s: key %s: '%s' is not a boolean (true/false, yes/no, on/off, 1/0)",
			   e->origin, key, e->value);
}

int dxl_config_get_enum(const struct dxl_config *cfg, const char *key,
			const char *const *names, int def, int *out)
{
	struct entry *e = find(cfg, key);
	if (!e) {
		*out = def;
		return 0;
	}
	char list[256] = "";
	for (int i = 0; names[i]; i++) {
		if (strcasecmp(e->value, names[i]) == 0) {
			*out = i;
			return 0;
		}
		size_t l = strlen(list);
		snprintf(list + l, sizeof(list) - l, "%s%s", i ? ", " : "",
			 names[i]);
	}
	return dxl_err_set(DXL_E_CONFIG, "%s: key %s: '%s' is not one of: %s",
			   e->origin, key, e->value, list);
}

int dxl_log_configure(const struct dxl_config *cfg)
{
	static const char *const names[] = {"debug", "info", "warn", "error",
					    "off", NULL};
	int lvl = (int)dxl_log_get_level();
	int ret = dxl_config_get_enum(cfg, "log.level", names, lvl, &lvl);
	if (ret)
		return ret;
	dxl_log_set_level((enum dxl_log_level)lvl);
	return 0;
}
