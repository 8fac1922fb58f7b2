/*
 * config_show.c: the effective configuration, key by key, with each
 * value's source (config_show.h). The values come from the loaded
 * configuration itself, encoded as the codec encodes it, so what is shown
 * is what every command uses; the sources are decided as jsonconf.c
 * decides precedence: a variable that sets the key wins, else the key in
 * the file (its line found in the file's text), else the default.
 */
#include "config_show.h"

#include "tb/json_mpack.h"
#include "tb/jsonconf.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 4 /* the configuration nests two deep; room to spare */

typedef struct walk {
	json_t *keys;            /* what is shown, key by key */
	const json_t *effective; /* the configuration as loaded, as JSON */
	const json_t *doc;       /* the file's document, or NULL */
	const char *text;        /* the file's text, for the lines */
	size_t len;
	const char *file;
	const tb_config_t *cfg;
	const char *path[MAX_DEPTH];
} walk_t;

int tb_config_secret_property(const char *name)
{
	static const char *const words[] = { "password", "secret", "token", "credential",
					     "key",      "pem",    "jaas",  "username" };

	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strstr(name, words[i]))
			return 1;
	return !strcmp(name, "sasl.oauthbearer.config");
}

int tb_config_mask_url(char *out, size_t len, const char *text)
{
	const char *auth = strstr(text, "://");
	const char *end = auth ? auth + 3 + strcspn(auth + 3, "/?#") : NULL;
	const char *at = NULL, *colon = NULL;

	for (const char *c = auth ? auth + 3 : text; auth && c < end; c++)
		if (*c == '@')
			at = c; /* the last: a password may have an '@' in it */
	if (at)
		colon = memchr(auth + 3, ':', (size_t)(at - auth - 3));
	if (!colon) {
		snprintf(out, len, "%s", text);
		return 0;
	}
	snprintf(out, len, "%.*s%s%s", (int)(colon + 1 - text), text, TB_CONFIG_MASK, at);
	return 1;
}

/* The value at @p depth keys of w->path in @p root, or NULL. */
static json_t *at(const json_t *root, const char *const *path, size_t depth)
{
	json_t *v = (json_t *)root;

	for (size_t i = 0; v && i < depth; i++)
		v = json_is_object(v) ? json_object_get(v, path[i]) : NULL;
	return v;
}

/* @p v as shown: a new reference, its credentials masked (*@p masked
 * set when there were some), NULL when out of memory. */
static json_t *shown_value(const json_t *v, int *masked)
{
	char url[4200];
	const char *name;
	json_t *item, *copy;

	if (json_is_string(v) && tb_config_mask_url(url, sizeof(url), json_string_value(v))) {
		*masked = 1;
		return json_string(url);
	}
	if (!json_is_object(v))
		return v ? json_deep_copy(v) : json_null();
	copy = json_object();
	json_object_foreach((json_t *)v, name, item)
	{
		int secret = tb_config_secret_property(name);
		*masked |= secret;
		if (json_object_set_new(
			copy, name, secret ? json_string(TB_CONFIG_MASK) : json_deep_copy(item)))
			break;
	}
	return copy;
}

/* "given": the value of a directory that was relative, as it was given
 * (by @p var's value, or by the file). */
static void add_given(const walk_t *w, json_t *row, const char *key, const char *var, size_t depth)
{
	for (int i = 0; tb_config_path_keys[i]; i++) {
		if (strcmp(key, tb_config_path_keys[i]) || !(w->cfg->relative & (1u << i)))
			continue;
		const char *given = getenv(var);
		if (!given)
			given = json_string_value(at(w->doc, w->path, depth));
		if (given)
			json_object_set_new(row, "given", json_string(given));
	}
}

/* The source of the key at @p depth of w->path into @p row. */
static void add_source(const walk_t *w, json_t *row, const tb_field_t *f, const char *var,
		       size_t depth)
{
	if (f && tb_jsonconf_env_settable(f) && getenv(var)) {
		json_object_set_new(row, "source", json_string("env"));
		json_object_set_new(row, "variable", json_string(var));
	} else if (w->doc && at(w->doc, w->path, depth)) {
		json_object_set_new(row, "source", json_string("file"));
		json_object_set_new(row, "file", json_string(w->file));
		json_object_set_new(
		    row, "line",
		    json_integer(tb_jsonconf_key_line(w->text, w->len, w->path, depth)));
	} else {
		json_object_set_new(row, "source", json_string("default"));
	}
}

/* The row of the key @p key (field @p f, NULL for "v") at @p depth of
 * w->path. */
static int add_row(walk_t *w, const tb_field_t *f, const char *key, size_t depth, tb_error_t *err)
{
	char var[300];
	int masked = 0;
	json_t *one = f ? NULL : json_integer(1); /* "v": the version this build reads */
	json_t *row = json_object();
	json_t *v = shown_value(f ? at(w->effective, w->path, depth) : one, &masked);

	json_decref(one);
	tb_jsonconf_env_name(var, sizeof(var), "TASKBOX", key);
	if (!row)
		json_decref(v);
	if (!row || json_object_set_new(row, "value", v) < 0 ||
	    json_object_set_new(w->keys, key, row) < 0)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	add_source(w, row, f, var, depth);
	add_given(w, row, key, var, depth);
	if (masked)
		json_object_set_new(row, "masked", json_true());
	return 0;
}

/* A row for every key of @p s, under @p prefix at @p depth. */
static int walk(walk_t *w, const tb_schema_t *s, const char *prefix, size_t depth, tb_error_t *err)
{
	char key[256];
	int rc;

	for (size_t i = 0; i < s->nfields && depth < MAX_DEPTH; i++) {
		const tb_field_t *f = &s->fields[i];
		w->path[depth] = f->name;
		snprintf(key, sizeof(key), "%s%s%s", prefix, *prefix ? "." : "", f->name);
		rc = f->type == TB_FT_OBJ ? walk(w, f->sub, key, depth + 1, err)
					  : add_row(w, f, key, depth + 1, err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The configuration as loaded, as JSON (encoded as the codec does). */
static int effective(json_t **out, const tb_config_t *cfg, tb_error_t *err)
{
	msgpack_sbuffer sb;
	int rc;

	msgpack_sbuffer_init(&sb);
	rc = tb_obj_encode(&sb, &tb_schema_config, cfg, "configuration", err);
	if (rc == 0)
		rc = tb_mpack_to_json(out, sb.data, sb.size, err);
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

int tb_config_show(json_t **out, const tb_config_t *cfg, const char *file, tb_error_t *err)
{
	walk_t w = { .file = file, .cfg = cfg };
	json_t *eff = NULL, *doc = NULL;
	char *text = NULL;
	int rc;

	*out = NULL;
	if ((rc = effective(&eff, cfg, err)) < 0)
		return rc;
	if (file && ((rc = tb_jsonconf_read(&text, &w.len, file, err)) < 0 ||
		     (rc = tb_jsonconf_parse(&doc, text, w.len, w.len, file, err)) < 0))
		goto out;
	w.effective = eff, w.doc = doc, w.text = text;
	*out = json_object();
	w.keys = json_object();
	if (!*out || json_object_set_new(*out, "file", file ? json_string(file) : json_null()) ||
	    json_object_set_new(*out, "keys", w.keys)) {
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		json_decref(*out);
		*out = NULL;
		goto out;
	}
	w.path[0] = "v";
	if ((rc = add_row(&w, NULL, "v", 1, err)) < 0 ||
	    (rc = walk(&w, &tb_schema_config, "", 0, err)) < 0) {
		json_decref(*out);
		*out = NULL;
	}
out:
	json_decref(eff);
	json_decref(doc);
	free(text);
	return rc;
}
