/* config.h -- typed configuration: INI files (libinih) plus key=value overrides */
#ifndef DXL_CONFIG_H
#define DXL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

/*
 * A config is a flat map of "section.key" -> string value, each remembering
 * where it came from (file:line, or "override"). Getters convert and check,
 * and name the key, the value and its origin in every error:
 *   "node.conf:12: key fabric.timeout_ms: 'ten' is not a number".
 * Unknown keys are reported by dxl_config_check_known().
 */
struct dxl_config;

int dxl_config_new(struct dxl_config **out);
void dxl_config_delete(struct dxl_config **cfg);

/*
 * dxl_config_load_file -- read an INI file: "[section]" lines, "key = value"
 * lines, '#' or ';' comments. Keys become "section.key" (or "key" before
 * any section). A later definition overrides an earlier one.
 * Errors: DXL_E_IO (cannot read), DXL_E_CONFIG (syntax error, with line).
 */
int dxl_config_load_file(struct dxl_config *cfg, const char *path);

/* dxl_config_set -- set key to value (origin "override") */
int dxl_config_set(struct dxl_config *cfg, const char *key, const char *value);
/* dxl_config_set_arg -- parse "key=value" (a command-line -o option) */
int dxl_config_set_arg(struct dxl_config *cfg, const char *kv);

/*
 * dxl_config_check_known -- DXL_E_CONFIG naming the first key that matches
 * none of the NULL-terminated list `known`. A known entry ending in ".*"
 * accepts every key with that prefix.
 */
int dxl_config_check_known(const struct dxl_config *cfg,
			   const char *const *known);

/*
 * dxl_config_check_known_prefix -- the same, for the keys that start with
 * prefix only (a module checks its own section: "fabric.").
 */
int dxl_config_check_known_prefix(const struct dxl_config *cfg,
				  const char *prefix, const char *const *known);

bool dxl_config_has(const struct dxl_config *cfg, const char *key);

/*
 * Typed getters: *out = value of key, or def when the key is absent.
 * DXL_E_CONFIG when the value does not parse or is out of [min, max].
 */
int dxl_config_get_str(const struct dxl_config *cfg, const char *key,
		       const char *def, const char **out);
int dxl_config_get_u64(const struct dxl_config *cfg, const char *key,
		       uint64_t def, uint64_t min, uint64_t max, uint64_t *out);
/* sizes accept K/M/G suffixes (powers of 1024) */
int dxl_config_get_size(const struct dxl_config *cfg, const char *key,
			uint64_t def, uint64_t min, uint64_t max,
			uint64_t *out);
/* booleans: true/false, yes/no, on/off, 1/0 */
int dxl_config_get_bool(const struct dxl_config *cfg, const char *key,
			bool def, bool *out);
/* enums: value must be one of the NULL-terminated names; *out = its index */
int dxl_config_get_enum(const struct dxl_config *cfg, const char *key,
			const char *const *names, int def, int *out);

/*
 * dxl_log_configure -- apply the "log.level" key (debug|info|warn|error|off)
 * if present; the DXL_LOG_LEVEL environment variable sets the start level,
 * a config key overrides it. DXL_E_CONFIG (naming file and line) on a bad
 * value; the level is unchanged then.
 */
int dxl_log_configure(const struct dxl_config *cfg);

/* dxl_config_origin -- "file:line" or "override" for key, NULL if absent */
const char *dxl_config_origin(const struct dxl_config *cfg, const char *key);

#endif /* DXL_CONFIG_H */
