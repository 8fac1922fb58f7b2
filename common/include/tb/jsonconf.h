/*
 * jsonconf.h: loading a JSON configuration document into a struct described
 * by a tb_schema_t, with the same strict field checks as the wire codec.
 *
 * Order of precedence: built-in defaults < the file < environment variables
 * (when a prefix is given: TASKBOX_KAFKA_BROKERS overrides kafka.brokers).
 * Every error names the origin (file or variable), the key, and what was
 * expected. Configuration files are JSON, parsed by jansson: Debian ships
 * it, it is small and well kept, and the project already speaks JSON for
 * the schema examples and the agent protocol, so one parser serves all.
 * This file owns the merge and the environment mapping; the tables live
 * with each configuration type (config.c, runtime.c, recipe_manifest.c).
 */
#ifndef TB_JSONCONF_H
#define TB_JSONCONF_H

#include "tb/codec.h"

#include <jansson.h>

/**
 * Decodes @p doc into @p out.
 * @param defaults JSON text merged under @p doc (may be NULL)
 * @param env_prefix "TASKBOX" to apply environment overrides, or NULL
 * @param origin the file name, used in errors
 * @param[out] out zero-filled; on success the caller releases it with
 *             tb_msg_free(schema, out)
 * @return 0, TB_EINVAL with "<origin>: <key>: <why>", TB_ENOMEM
 */
int tb_jsonconf_decode(const tb_schema_t *schema, void *out, const json_t *doc,
		       const char *defaults, const char *env_prefix, const char *origin,
		       tb_error_t *err);

/**
 * Reads and decodes the JSON file @p path (capped at 1 MiB), whose "v" key
 * must equal @p version; see tb_jsonconf_decode(). A missing file is
 * TB_ENOTFOUND, another version TB_EVERSION.
 */
int tb_jsonconf_load(const tb_schema_t *schema, void *out, const char *path, const char *defaults,
		     const char *env_prefix, unsigned version, tb_error_t *err);

/**
 * The variables @p prefix_* in the environment that name no key of
 * @p schema and are none of @p others (NULL-ended names; one ending in
 * '*' stands for every name it starts), each with the key's name it is
 * nearest to when a typo away ("TASKBOX_SLOTZ (did you mean
 * TASKBOX_SLOTS?)"), "; "-separated into @p out ("" when none).
 */
void tb_jsonconf_env_unknown(const tb_schema_t *schema, const char *prefix,
			     const char *const *others, char *out, size_t len);

/**
 * Parses JSON text of at most @p max bytes, with errors naming @p origin
 * and the line and column. @param[out] out a new reference.
 */
int tb_jsonconf_parse(json_t **out, const char *text, size_t len, size_t max, const char *origin,
		      tb_error_t *err);

/**
 * Reads the configuration file @p path whole (at most 1 MiB).
 * @param[out] text its bytes (NUL-terminated past @p len), the caller frees
 * @return 0; TB_ENOTFOUND, TB_EIO, TB_ETOOBIG naming @p path; TB_ENOMEM
 */
int tb_jsonconf_read(char **text, size_t *len, const char *path, tb_error_t *err);

/**
 * The line (from 1) where the key @p path[0] . @p path[1] ... (@p depth
 * names, each an object's key, decoded: "\u0073lots" is slots) is in
 * @p text, JSON that jansson has parsed (jansson keeps no positions of
 * its own); the first such key when a file has two (a file loaded with
 * JSON_REJECT_DUPLICATES has none). @return the line, or 0 when it is
 * not there.
 */
int tb_jsonconf_key_line(const char *text, size_t len, const char *const *path, size_t depth);

/** The variable for key @p path under @p prefix: TASKBOX_KAFKA_BROKERS
 * for "TASKBOX" and "kafka.brokers"; cut to @p cap bytes. */
void tb_jsonconf_env_name(char *buf, size_t cap, const char *prefix, const char *path);

/** Whether a variable sets field @p f (a scalar, or a list of strings
 * as comma-separated text); maps and lists of objects are file-only. */
bool tb_jsonconf_env_settable(const tb_field_t *f);

/** Checks a "v" key of @p doc against @p version ("unknown version"). */
int tb_jsonconf_check_version(const json_t *doc, unsigned version, const char *origin,
			      tb_error_t *err);

#endif
