/*
 * cmd_schema.c: `taskbox schema`, the wire formats at the command line:
 * turn a JSON document into the exact MessagePack bytes a topic carries,
 * turn bytes back into JSON, and check messages and configuration files.
 * Producers in any language can use it to check what they write.
 */
#include "cmd.h"

#include "tb/encoding.h"
#include "tb/fsutil.h"
#include "tb/codec.h"
#include "tb/config.h"
#include "tb/json_mpack.h"
#include "tb/jsonconf.h"
#include "tb/recipe_manifest.h"
#include "tb/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define INPUT_MAX (32u << 20)

static void usage(FILE *out)
{
	fprintf(out, "usage: taskbox schema encode [--hex] [FILE]   JSON -> canonical MessagePack\n"
		     "       taskbox schema decode [--hex] [FILE]   MessagePack -> JSON\n"
		     "       taskbox schema check  [--hex] [--json] FILE...  validate messages\n"
		     "       taskbox schema config [FILE]           validate worker configuration\n"
		     "                                              (no FILE: the one found)\n"
		     "       taskbox schema runtime FILE            validate a runtime file\n"
		     "       taskbox schema recipe FILE             validate a recipe manifest\n"
		     "\n"
		     "Messages name their kind in the \"schema\" key (task, followup, event,\n"
		     "verdict, manifest, dlq); see schemas/README.md. FILE defaults to stdin.\n"
		     "--hex reads or writes hexadecimal text instead of raw bytes.\n"
		     "Exit: 0 valid, 4 invalid, 2 usage, 1 I/O error.\n");
}

/* Reads all of @p path ("-" or NULL: stdin), at most INPUT_MAX bytes. */
static int slurp(char **out, size_t *len, const char *path)
{
	tb_error_t err;
	int rc = (!path || strcmp(path, "-") == 0)
		     ? tb_read_fd(STDIN_FILENO, "stdin", INPUT_MAX, out, len, &err)
		     : tb_read_file(path, INPUT_MAX, out, len, &err);

	if (rc < 0)
		fprintf(stderr, "taskbox schema: %s\n", err.msg);
	return rc < 0 ? -1 : 0;
}

/* Turns hexadecimal text (whitespace ignored) into bytes, in place. */
static int unhex(char *buf, size_t *len)
{
	size_t out = 0;
	int hi = -1;

	for (size_t i = 0; i < *len; i++) {
		char c = buf[i];
		int v = tb_hex_digit(c);
		if (c == ' ' || c == '\n' || c == '\t' || c == '\r')
			continue;
		if (v < 0)
			return -1;
		if (hi < 0) {
			hi = v;
		} else {
			buf[out++] = (char)(hi << 4 | v);
			hi = -1;
		}
	}
	if (hi >= 0)
		return -1;
	*len = out;
	return 0;
}

static int read_message(char **buf, size_t *len, const char *path, int hex)
{
	if (slurp(buf, len, path) < 0)
		return TB_EXIT_FAILURE;
	if (hex && unhex(*buf, len) < 0) {
		fprintf(stderr, "taskbox schema: %s: not hexadecimal text\n",
			path ? path : "stdin");
		free(*buf);
		return TB_EXIT_INVALID;
	}
	return TB_EXIT_OK;
}

static int do_encode(const char *path, int hex)
{
	msgpack_sbuffer raw, canon;
	json_t *doc = NULL;
	tb_error_t err;
	char *text;
	size_t len;
	int rc = TB_EXIT_INVALID;

	if (slurp(&text, &len, path) < 0)
		return TB_EXIT_FAILURE;
	msgpack_sbuffer_init(&raw);
	msgpack_sbuffer_init(&canon);
	if (tb_jsonconf_parse(&doc, text, len, INPUT_MAX, path ? path : "stdin", &err) < 0 ||
	    tb_json_to_mpack(&raw, doc, &err) < 0 ||
	    tb_msg_canonical(&canon, raw.data, raw.size, &err) < 0) {
		fprintf(stderr, "taskbox schema encode: %s\n", err.msg);
		goto cleanup;
	}
	if (hex) {
		for (size_t i = 0; i < canon.size; i++)
			printf("%02x%s", (unsigned char)canon.data[i],
			       (i + 1) % 32 == 0 || i + 1 == canon.size ? "\n" : "");
	} else {
		fwrite(canon.data, 1, canon.size, stdout);
	}
	rc = fflush(stdout) == 0 ? TB_EXIT_OK : TB_EXIT_FAILURE;
cleanup:
	json_decref(doc);
	msgpack_sbuffer_destroy(&raw);
	msgpack_sbuffer_destroy(&canon);
	free(text);
	return rc;
}

static int do_decode(const char *path, int hex)
{
	msgpack_sbuffer canon;
	json_t *doc = NULL;
	tb_error_t err;
	char *buf, *text = NULL;
	size_t len;
	int rc;

	if ((rc = read_message(&buf, &len, path, hex)) != TB_EXIT_OK)
		return rc;
	msgpack_sbuffer_init(&canon);
	rc = TB_EXIT_INVALID;
	if (tb_msg_canonical(&canon, buf, len, &err) < 0 ||
	    tb_mpack_to_json(&doc, canon.data, canon.size, &err) < 0) {
		fprintf(stderr, "taskbox schema decode: %s\n", err.msg);
		goto cleanup;
	}
	text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	if (text) {
		puts(text);
		rc = TB_EXIT_OK;
	}
cleanup:
	free(text);
	json_decref(doc);
	msgpack_sbuffer_destroy(&canon);
	free(buf);
	return rc;
}

/* Whether @p buf parses as a JSON object: what a person may hand
 * `check` by mistake. */
static int looks_like_json(const char *buf, size_t len)
{
	json_error_t jerr;
	json_t *j = json_loadb(buf, len, 0, &jerr);
	int obj = json_is_object(j);

	json_decref(j);
	return obj;
}

/* One file's verdict, as a line of text or, with @p out, an element of
 * a JSON array. */
static void verdict(json_t *out, const char *file, const char *reason, int json_input,
		    int canonical)
{
	if (out) {
		json_t *v =
		    reason
			? json_pack("{s:s,s:b,s:s}", "file", file, "ok", 0, "reason", reason)
			: json_pack("{s:s,s:b,s:b}", "file", file, "ok", 1, "canonical", canonical);
		if (v && reason && json_input)
			json_object_set_new(v, "hint",
					    json_string("it is JSON: 'taskbox schema encode FILE' "
							"turns JSON into the message's bytes"));
		json_array_append_new(out, v);
	} else if (reason) {
		printf("%s: invalid: %s%s\n", file, reason,
		       json_input ? " (it is JSON: check wants a message's MessagePack bytes; "
				    "'taskbox schema encode FILE' turns JSON into them)"
				  : "");
	} else {
		printf("%s: ok%s\n", file, canonical ? "" : " (valid, not in canonical form)");
	}
}

static int do_check(int argc, const char **argv, int hex, int as_json)
{
	int worst = TB_EXIT_OK;
	json_t *out = as_json ? json_array() : NULL;

	for (int i = 0; i < argc; i++) {
		msgpack_sbuffer canon;
		tb_error_t err;
		char *buf;
		size_t len;
		int rc = read_message(&buf, &len, argv[i], hex);
		if (rc != TB_EXIT_OK) {
			worst = rc;
			continue;
		}
		msgpack_sbuffer_init(&canon);
		if (tb_msg_canonical(&canon, buf, len, &err) < 0) {
			verdict(out, argv[i], err.msg, looks_like_json(buf, len), 0);
			worst = TB_EXIT_INVALID;
		} else {
			verdict(out, argv[i], NULL, 0,
				canon.size == len && memcmp(canon.data, buf, len) == 0);
		}
		msgpack_sbuffer_destroy(&canon);
		free(buf);
	}
	if (out) {
		char *text = json_dumps(out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		if (text)
			printf("%s\n", text);
		free(text);
		json_decref(out);
	}
	return worst;
}

static int do_file(const char *kind, const char *path)
{
	tb_error_t err;
	int rc;

	if (strcmp(kind, "config") == 0) {
		/* no FILE: the one the worker would read (schemas/config.md,
		 * "Which file"), found as every command finds it */
		tb_config_t cfg;
		rc = tb_cmd_load_config(&cfg, path, &err);
		if (rc == 0)
			tb_config_free(&cfg);
		path = tb_cmd_config_file();
	} else if (strcmp(kind, "runtime") == 0) {
		tb_runtime_t rt;
		rc = tb_runtime_load(&rt, path, &err);
		tb_runtime_free(&rt);
	} else {
		tb_recipe_manifest_t m;
		char *text;
		size_t len;
		if (slurp(&text, &len, path) < 0)
			return TB_EXIT_FAILURE;
		rc = tb_recipe_manifest_parse(&m, text, len, path, &err);
		tb_recipe_manifest_free(&m);
		free(text);
	}
	if (rc < 0) {
		fprintf(stderr, "taskbox schema %s: %s\n", kind, err.msg);
		return rc == TB_ENOTFOUND || rc == TB_EIO ? TB_EXIT_FAILURE : TB_EXIT_INVALID;
	}
	printf("%s: ok\n", path ? path : "no file: the defaults and environment");
	return TB_EXIT_OK;
}

/* The verb, on the @p n files it was given. */
static int run_verb(const char *verb, int n, const char **files, int hex, int as_json)
{
	if (strcmp(verb, "encode") == 0 && n <= 1)
		return do_encode(n ? files[0] : NULL, hex);
	if (strcmp(verb, "decode") == 0 && n <= 1)
		return do_decode(n ? files[0] : NULL, hex);
	if (strcmp(verb, "check") == 0 && n >= 1)
		return do_check(n, files, hex, as_json);
	if (strcmp(verb, "config") == 0 && n <= 1)
		return do_file(verb, n ? files[0] : NULL);
	if ((strcmp(verb, "runtime") == 0 || strcmp(verb, "recipe") == 0) && n == 1)
		return do_file(verb, files[0]);
	static const char *const verbs[] = { "encode", "decode",  "check",
					     "config", "runtime", "recipe" };
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (!strcmp(verb, verbs[i]))
			return tb_cmd_usage_error("schema", usage, "%s: %d file%s given", verb, n,
						  n == 1 ? "" : "s");
	return tb_cmd_unknown_verb("schema", usage, verb, verbs, sizeof(verbs) / sizeof(verbs[0]));
}

int tb_cmd_schema(int argc, char **argv)
{
	enum { MAX_FILES = 4096 };
	static const char *files[MAX_FILES];
	const char *verb = argc > 1 ? argv[1] : NULL;
	int hex = 0, as_json = 0, rc;

	if (!verb)
		return tb_cmd_usage_error("schema", usage,
					  "say what to do (encode, decode, check, "
					  "config, runtime, recipe)");
	static const tb_opt_t all[] = {
		/* for --help's short forms */
		{ "--json", TB_OPT_FLAG, NULL, 0, 0, NULL, 'j' },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	if ((rc = tb_cmd_verb_option(verb, usage, all)) >= 0)
		return rc;
	/* --hex is for the verbs that read or write messages */
	int messages = !strcmp(verb, "encode") || !strcmp(verb, "decode") || !strcmp(verb, "check");
	const tb_opt_t opts[] = {
		{ messages ? "--hex" : NULL, TB_OPT_FLAG, &hex, 0, 0, NULL, 0 },
		{ strcmp(verb, "check") ? NULL : "--json", TB_OPT_FLAG, &as_json, 0, 0, NULL, 'j' },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	char cmd[32];
	snprintf(cmd, sizeof(cmd), "schema %.16s", verb);
	tb_opts_t o = { cmd, opts, files, MAX_FILES, 0 };
	if ((rc = tb_cmd_options(&o, argc, argv, 2, usage)) >= 0)
		return rc;
	return run_verb(verb, o.npos, files, hex, as_json);
}
