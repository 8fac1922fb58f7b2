/*
 * jsonconf.c: defaults + file + environment, then the codec's decoder.
 *
 * Merging happens on the JSON tree (json_object_update_recursive), the
 * environment is applied by walking the schema's tables so every scalar
 * leaf has a variable, and the result goes through tb_json_to_mpack and
 * tb_obj_decode so configuration and messages share one set of rules.
 */
#include "tb/jsonconf.h"
#include "tb/encoding.h"
#include "tb/fsutil.h"

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

void tb_jsonconf_env_name(char *buf, size_t cap, const char *prefix, const char *path)
{
	size_t n = (size_t)snprintf(buf, cap, "%s_", prefix);
	for (; *path && n + 1 < cap; path++)
		buf[n++] = *path == '.' ? '_' : (char)toupper((unsigned char)*path);
	buf[n < cap ? n : cap - 1] = '\0';
}

bool tb_jsonconf_env_settable(const tb_field_t *f)
{
	return f->type == TB_FT_STR || f->type == TB_FT_ENUM || f->type == TB_FT_U64 ||
	       f->type == TB_FT_BOOL || f->type == TB_FT_STRLIST;
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

/* The variables that applied, for errors: "TASKBOX_SLOTS, TASKBOX_..." */
typedef struct applied {
	char names[256];
} applied_t;

static void note_applied(applied_t *a, const char *var)
{
	size_t n = strlen(a->names);
	if (n + strlen(var) + 3 < sizeof(a->names))
		snprintf(a->names + n, sizeof(a->names) - n, "%s%s", n ? ", " : "", var);
}

static int apply_env(json_t *doc, const tb_schema_t *s, const char *prefix, const char *path,
		     applied_t *applied, tb_error_t *err)
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
			if ((rc = apply_env(child, f->sub, prefix, sub, applied, err)) < 0)
				return rc;
			if (json_object_size(child) == 0)
				json_object_del(doc, f->name);
			continue;
		}
		tb_jsonconf_env_name(var, sizeof(var), prefix, sub);
		const char *text = getenv(var);
		json_t *v = NULL;
		if (!text || !tb_jsonconf_env_settable(f))
			continue;
		if ((rc = env_value(&v, f, var, text, err)) < 0)
			return rc;
		if (v) {
			json_object_set_new(doc, f->name, v);
			note_applied(applied, var);
		}
	}
	return 0;
}

int tb_jsonconf_decode(const tb_schema_t *schema, void *out, const json_t *doc,
		       const char *defaults, const char *env_prefix, const char *origin,
		       tb_error_t *err)
{
	json_t *merged = NULL, *file = NULL;
	applied_t applied = { "" };
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
	if (env_prefix && (rc = apply_env(merged, schema, env_prefix, "", &applied, err)) < 0)
		goto cleanup;
	if ((rc = tb_json_to_mpack(&sb, merged, err)) < 0 ||
	    msgpack_unpack_next(&up, sb.data, sb.size, &off) != MSGPACK_UNPACK_SUCCESS) {
		if (rc == 0)
			rc = tb_error_set(err, TB_EINVAL, "internal: cannot re-read config");
		tb_error_prefix(err, "%s", origin);
		goto cleanup;
	}
	if ((rc = tb_obj_decode(schema, out, &up.data, "", err)) < 0)
		tb_error_prefix(err, "%s%s%s%s", origin, applied.names[0] ? " (with " : "",
				applied.names, applied.names[0] ? " from the environment)" : "");
cleanup:
	json_decref(merged);
	json_decref(file);
	msgpack_unpacked_destroy(&up);
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

int tb_jsonconf_read(char **text, size_t *len, const char *path, tb_error_t *err)
{
	int rc = tb_read_file(path, CONF_MAX_BYTES, text, len, err);

	if (rc == TB_ETOOBIG)
		tb_error_set(err, TB_ETOOBIG,
			     "%s: over %u bytes, the most a configuration file may have", path,
			     CONF_MAX_BYTES);
	return rc;
}

int tb_jsonconf_load(const tb_schema_t *schema, void *out, const char *path, const char *defaults,
		     const char *env_prefix, unsigned version, tb_error_t *err)
{
	json_t *doc = NULL;
	char *text = NULL;
	size_t len = 0;
	int rc;

	memset(out, 0, schema->size);
	if ((rc = tb_jsonconf_read(&text, &len, path, err)) < 0)
		return rc;
	rc = tb_jsonconf_parse(&doc, text, len, CONF_MAX_BYTES, path, err);
	free(text);
	if (rc < 0)
		return rc;
	if ((rc = tb_jsonconf_check_version(doc, version, path, err)) == 0)
		rc = tb_jsonconf_decode(schema, out, doc, defaults, env_prefix, path, err);
	json_decref(doc);
	return rc;
}

/* Every variable name @p s's keys have under @p prefix, into @p names
 * (a NUL-separated list of at most @p cap bytes); its length. */
static size_t env_names(const tb_schema_t *s, const char *prefix, const char *path, char *names,
			size_t used, size_t cap)
{
	char sub[256], var[300];

	for (size_t i = 0; i < s->nfields; i++) {
		const tb_field_t *f = &s->fields[i];
		snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "", f->name);
		if (f->type == TB_FT_OBJ) {
			used = env_names(f->sub, prefix, sub, names, used, cap);
			continue;
		}
		tb_jsonconf_env_name(var, sizeof(var), prefix, sub);
		if (used + strlen(var) + 1 < cap) {
			memcpy(names + used, var, strlen(var) + 1);
			used += strlen(var) + 1;
		}
	}
	return used;
}

void tb_jsonconf_env_unknown(const tb_schema_t *schema, const char *prefix,
			     const char *const *others, char *out, size_t len)
{
	extern char **environ;
	char names[8192], head[64];
	size_t used = env_names(schema, prefix, "", names, 0, sizeof(names));
	size_t plen = (size_t)snprintf(head, sizeof(head), "%s_", prefix), o = 0;

	out[0] = '\0';
	for (char **e = environ; e && *e && o + 1 < len; e++) {
		char var[128];
		size_t n = strcspn(*e, "=");
		if (strncmp(*e, head, plen) || n >= sizeof(var))
			continue;
		snprintf(var, sizeof(var), "%.*s", (int)n, *e);
		int known = 0;
		size_t best = 99;
		const char *near = NULL;
		for (size_t at = 0; at < used && !known; at += strlen(names + at) + 1) {
			size_t d = tb_edit_distance(var, names + at);
			known = d == 0;
			if (d < best)
				best = d, near = names + at;
		}
		for (size_t i = 0; others && others[i] && !known; i++) {
			size_t k = strlen(others[i]);
			known = others[i][k - 1] == '*' ? !strncmp(var, others[i], k - 1)
							: !strcmp(var, others[i]);
		}
		if (known)
			continue;
		o += (size_t)snprintf(out + o, len - o, "%s%s", o ? "; " : "", var);
		if (near && best <= 2 && o + 1 < len)
			o += (size_t)snprintf(out + o, len - o, " (did you mean %s?)", near);
		if (o >= len)
			o = len - 1;
	}
}
