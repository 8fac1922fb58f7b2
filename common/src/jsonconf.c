/*
 * jsonconf.c: defaults + file + environment, then the codec's decoder.
 *
 * Merging happens on the JSON tree (json_object_update_recursive), the
 * environment is applied by walking the schema's tables so every scalar
 * leaf has a variable, and the result goes through tb_json_to_mpack and
 * tb_obj_decode so configuration and messages share one set of rules.
 */
#include "tb/jsonconf.h"

#include "tb/json_mpack.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONF_MAX_BYTES (1u << 20)

int tb_jsonconf_parse(json_t **out, const char *text, size_t len, size_t max, const char *origin,
		      tb_error_t *err)
{
	json_error_t jerr;

	if (len > max)
		return tb_error_set(err, TB_ETOOBIG, "%s: %zu bytes, at most %zu allowed", origin,
				    len, max);
	*out = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!*out)
		return tb_error_set(err, TB_EINVAL, "%s:%d:%d: %s", origin, jerr.line, jerr.column,
				    jerr.text);
	return 0;
}

int tb_jsonconf_check_version(const json_t *doc, unsigned version, const char *origin,
			      tb_error_t *err)
{
	json_t *v = json_object_get(doc, "v");

	if (!json_is_integer(v))
		return tb_error_set(err, TB_EINVAL, "%s: key 'v': required integer version missing",
				    origin);
	if (json_integer_value(v) != (json_int_t)version)
		return tb_error_set(
		    err, TB_EVERSION,
		    "%s: key 'v': version %lld is not supported (this build reads %u)", origin,
		    (long long)json_integer_value(v), version);
	return 0;
}

/* Builds TASKBOX_KAFKA_BROKERS from prefix "TASKBOX" and path "kafka.brokers". */
static void env_name(char *buf, size_t cap, const char *prefix, const char *path)
{
	size_t n = (size_t)snprintf(buf, cap, "%s_", prefix);
	for (; *path && n + 1 < cap; path++)
		buf[n++] = *path == '.' ? '_' : (char)toupper((unsigned char)*path);
	buf[n < cap ? n : cap - 1] = '\0';
}

static int env_value(json_t **out, const tb_field_t *f, const char *var, const char *text,
		     tb_error_t *err)
{
	char *end;

	switch (f->type) {
	case TB_FT_STR:
	case TB_FT_ENUM:
		*out = json_string(text);
		break;
	case TB_FT_U64: {
		errno = 0;
		unsigned long long v = strtoull(text, &end, 10);
		if (errno || end == text || *end || text[0] == '-' || v > INT64_MAX)
			return tb_error_set(
			    err, TB_EINVAL,
			    "environment %s: expected a non-negative integer, got '%s'", var, text);
		*out = json_integer((json_int_t)v);
		break;
	}
	case TB_FT_BOOL:
		if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0)
			*out = json_true();
		else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0)
			*out = json_false();
		else
			return tb_error_set(err, TB_EINVAL,
					    "environment %s: expected true or false, got '%s'", var,
					    text);
		break;
	case TB_FT_STRLIST: { /* comma-separated */
		*out = json_array();
		const char *p = text;
		while (*out && *p) {
			const char *c = strchr(p, ',');
			size_t n = c ? (size_t)(c - p) : strlen(p);
			json_array_append_new(*out, json_stringn(p, n));
			p += n + (c ? 1 : 0);
		}
		break;
	}
	default:
		return 0; /* maps and lists of objects come from files only */
	}
	if (!*out)
		return tb_error_set(err, TB_EINVAL, "environment %s: not valid UTF-8", var);
	return 0;
}

static int apply_env(json_t *doc, const tb_schema_t *s, const char *prefix, const char *path,
		     tb_error_t *err)
{
	char sub[256], var[300];
	int rc;

	for (size_t i = 0; i < s->nfields; i++) {
		const tb_field_t *f = &s->fields[i];
		snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "", f->name);
		if (f->type == TB_FT_OBJ) {
			json_t *child = json_object_get(doc, f->name);
			if (!child) {
				child = json_object();
				json_object_set_new(doc, f->name, child);
			}
			if (!json_is_object(child))
				continue; /* the decoder reports the wrong type */
			if ((rc = apply_env(child, f->sub, prefix, sub, err)) < 0)
				return rc;
			if (json_object_size(child) == 0)
				json_object_del(doc, f->name);
			continue;
		}
		env_name(var, sizeof(var), prefix, sub);
		const char *text = getenv(var);
		json_t *v = NULL;
		if (!text)
			continue;
		if ((rc = env_value(&v, f, var, text, err)) < 0)
			return rc;
		if (v)
			json_object_set_new(doc, f->name, v);
	}
	return 0;
}

int tb_jsonconf_decode(const tb_schema_t *schema, void *out, const json_t *doc,
		       const char *defaults, const char *env_prefix, const char *origin,
		       tb_error_t *err)
{
	json_t *merged = NULL, *file = NULL;
	msgpack_sbuffer sb;
	msgpack_unpacked up;
	size_t off = 0;
	int rc;

	memset(out, 0, schema->size);
	msgpack_sbuffer_init(&sb);
	msgpack_unpacked_init(&up);
	if (!json_is_object(doc)) {
		rc = tb_error_set(err, TB_EINVAL, "%s: expected a JSON object", origin);
		goto cleanup;
	}
	if (defaults) {
		if ((rc = tb_jsonconf_parse(&merged, defaults, strlen(defaults), CONF_MAX_BYTES,
					    "built-in defaults", err)) < 0)
			goto cleanup;
	} else {
		merged = json_object();
	}
	/* Deep copy so the caller's document stays untouched by the merge. */
	file = json_deep_copy(doc);
	if (!merged || !file) {
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		goto cleanup;
	}
	json_object_del(file, "v");
	json_object_update_recursive(merged, file);
	if (env_prefix && (rc = apply_env(merged, schema, env_prefix, "", err)) < 0)
		goto cleanup;
	if ((rc = tb_json_to_mpack(&sb, merged, err)) < 0 ||
	    msgpack_unpack_next(&up, sb.data, sb.size, &off) != MSGPACK_UNPACK_SUCCESS) {
		if (rc == 0)
			rc = tb_error_set(err, TB_EINVAL, "internal: cannot re-read config");
		tb_error_prefix(err, "%s", origin);
		goto cleanup;
	}
	if ((rc = tb_obj_decode(schema, out, &up.data, "", err)) < 0)
		tb_error_prefix(err, "%s%s", origin,
				env_prefix ? " (with TASKBOX_* overrides)" : "");
cleanup:
	json_decref(merged);
	json_decref(file);
	msgpack_unpacked_destroy(&up);
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

int tb_jsonconf_load(const tb_schema_t *schema, void *out, const char *path, const char *defaults,
		     const char *env_prefix, unsigned version, tb_error_t *err)
{
	json_t *doc = NULL;
	char *text = NULL;
	size_t len = 0;
	FILE *f;
	int rc;

	memset(out, 0, schema->size);
	f = fopen(path, "rb");
	if (!f)
		return tb_error_errno(err, errno == ENOENT ? TB_ENOTFOUND : TB_EIO, errno, "%s",
				      path);
	text = malloc(CONF_MAX_BYTES + 1);
	if (!text) {
		fclose(f);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	len = fread(text, 1, CONF_MAX_BYTES + 1, f);
	if (ferror(f))
		rc = tb_error_errno(err, TB_EIO, errno, "%s: read", path);
	else
		rc = tb_jsonconf_parse(&doc, text, len, CONF_MAX_BYTES, path, err);
	fclose(f);
	free(text);
	if (rc < 0)
		return rc;
	if ((rc = tb_jsonconf_check_version(doc, version, path, err)) == 0)
		rc = tb_jsonconf_decode(schema, out, doc, defaults, env_prefix, path, err);
	json_decref(doc);
	return rc;
}
