/*
 * cmd_artifacts.c: `taskbox artifacts`: a done task's saved files, from
 * the manifest its done-marker names: list them, download one (checksum
 * verified), or share one as a signed URL that expires; and files of
 * one's own put into the store for tasks to take as inputs (uploads.h).
 */
#include "cmd.h"
#include "uploads.h"

#include "tb/config.h"
#include "tb/ledger.h"
#include "tb/schema_manifest.h"
#include "tb/store.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_SHARE_SECONDS 3600

static void usage(FILE *out)
{
	fprintf(out,
		"usage: taskbox artifacts list  [--config FILE] [--json] TASK_ID\n"
		"       taskbox artifacts get   [--config FILE] [--output FILE] TASK_ID PATH\n"
		"       taskbox artifacts share [--config FILE] [--expires SECONDS] TASK_ID PATH\n"
		"       taskbox artifacts put   [--config FILE] [--json] PATH...\n\n"
		"The files a done task's agent wrote under /outputs, as its manifest\n"
		"records them (the attempt its done-marker names), plus its conversation\n"
		"record and manifest. PATH is the file's path under /outputs as `list`\n"
		"shows it; `conversation` and `manifest` name the record and the manifest.\n"
		"  get --output FILE   where to write it (default: PATH's last part, here);\n"
		"                      written only if its SHA-256 matches the stored one\n"
		"  share --expires S   the URL's lifetime, 1..604800 (default 3600);\n"
		"                      S3 stores only\n"
		"`put` uploads files (a directory as each file under it, by its path)\n"
		"to uploads/<sha256> (schemas/keys.md), skipping content that is there\n"
		"already, with its block list at blocks/<sha256>, and prints each as an\n"
		"input reference, NAME=KEY, for `submit --input` (or --json: path, key,\n"
		"sha256, blocks, size, uploaded).\n"
		"Exit: 0 done, 1 the store failed, 2 usage (or a PATH to put that is not a\n"
		"file or a directory), 3 configuration, 5 no such task, task not done,\n"
		"no such file in it, or no such PATH to put.\n");
}

typedef struct found {
	tb_manifest_t m;
	char manifest_key[1024];
	int have;
} found_t;

/* The manifest of @p task's done attempt. TB_EXIT_*. */
static int find(tb_ledger_t *l, tb_store_t *s, const char *task, found_t *f)
{
	tb_ledger_task_t t;
	tb_error_t err;
	char *bytes = NULL;
	size_t len;

	if (tb_ledger_inspect(l, task, &t, &err) < 0) {
		fprintf(stderr, "taskbox artifacts: %s\n", err.msg);
		return TB_EXIT_FAILURE;
	}
	if (!t.done || !t.manifest[0]) {
		fprintf(stderr, "taskbox artifacts: task %s %s\n", task,
			t.done       ? "was dead-lettered: it has no record"
			: t.attempts ? "is not done yet (see taskbox status)"
				     : "is unknown to the ledger");
		return TB_EXIT_NOT_FOUND;
	}
	snprintf(f->manifest_key, sizeof(f->manifest_key), "%s", t.manifest);
	if (tb_store_get_bytes(s, t.manifest, 8u << 20, &bytes, &len, &err) < 0 ||
	    tb_msg_decode(&tb_schema_manifest, &f->m, bytes, len, &err) < 0) {
		free(bytes);
		fprintf(stderr, "taskbox artifacts: manifest %s: %s\n", t.manifest, err.msg);
		return err.code == TB_ENOTFOUND ? TB_EXIT_NOT_FOUND : TB_EXIT_FAILURE;
	}
	free(bytes);
	f->have = 1;
	return TB_EXIT_OK;
}

/* The store key of @p path in the manifest, or NULL. */
static const char *key_of(const found_t *f, const char *path)
{
	if (!strcmp(path, "conversation"))
		return f->m.conversation_key;
	if (!strcmp(path, "manifest"))
		return f->manifest_key;
	for (size_t i = 0; i < f->m.artifacts.n; i++) {
		const tb_artifact_t *a = (const tb_artifact_t *)f->m.artifacts.items + i;
		if (!strcmp(a->path, path))
			return a->key;
	}
	return NULL;
}

/* The SHA-256 the manifest gives for @p path (an output), or NULL. */
static const char *sha_of(const found_t *f, const char *path)
{
	for (size_t i = 0; i < f->m.artifacts.n; i++) {
		const tb_artifact_t *a = (const tb_artifact_t *)f->m.artifacts.items + i;
		if (!strcmp(a->path, path))
			return a->sha256;
	}
	return NULL;
}

static void list(const found_t *f, int as_json)
{
	if (as_json) {
		json_t *arts = json_array();
		for (size_t i = 0; i < f->m.artifacts.n; i++) {
			const tb_artifact_t *a = (const tb_artifact_t *)f->m.artifacts.items + i;
			json_array_append_new(
			    arts, json_pack("{s:s,s:s,s:I,s:s}", "path", a->path, "key", a->key,
					    "size", (json_int_t)a->size, "sha256", a->sha256));
		}
		json_t *o = json_pack("{s:s,s:I,s:s,s:s,s:o}", "task", f->m.task_id, "attempt",
				      (json_int_t)f->m.attempt, "manifest", f->manifest_key,
				      "conversation", f->m.conversation_key, "artifacts", arts);
		char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
		printf("%s\n", text ? text : "{}");
		free(text);
		json_decref(o);
		return;
	}
	printf("task %s attempt %llu: %zu artifacts\n", f->m.task_id,
	       (unsigned long long)f->m.attempt, f->m.artifacts.n);
	for (size_t i = 0; i < f->m.artifacts.n; i++) {
		const tb_artifact_t *a = (const tb_artifact_t *)f->m.artifacts.items + i;
		printf("  %-32s %10llu  %.12s  %s\n", a->path, (unsigned long long)a->size,
		       a->sha256, a->key);
	}
	printf("  %-32s %10s  %-12s  %s\n", "conversation", "", "", f->m.conversation_key);
	printf("  %-32s %10s  %-12s  %s\n", "manifest", "", "", f->manifest_key);
}

static int get(tb_store_t *s, const found_t *f, const char *path, const char *out)
{
	const char *key = key_of(f, path);
	tb_object_info_t info;
	tb_error_t err;

	if (!key) {
		fprintf(stderr, "taskbox artifacts: task %s has no artifact %s\n", f->m.task_id,
			path);
		return TB_EXIT_NOT_FOUND;
	}
	if (!out) {
		const char *slash = strrchr(path, '/');
		out = slash ? slash + 1 : path;
		if (!strcmp(path, "conversation"))
			out = "conversation.msgpack";
		else if (!strcmp(path, "manifest"))
			out = "manifest.msgpack";
	}
	/* An output is checked against the manifest, by the SHA-256 of what
	 * arrived: the manifest, not the store's record, says what the task
	 * made. */
	const char *want = sha_of(f, path);
	if (tb_store_get_file(s, key, out, want ? TB_STORE_GET_SHA256 : 0, &info, &err) < 0) {
		fprintf(stderr, "taskbox artifacts: %s: %s\n", key, err.msg);
		return err.code == TB_ENOTFOUND ? TB_EXIT_NOT_FOUND : TB_EXIT_FAILURE;
	}
	if (want && strcmp(want, info.sha256)) {
		unlink(out);
		fprintf(stderr,
			"taskbox artifacts: %s has sha256 %s, the manifest says %s: not saved\n",
			key, info.sha256, want);
		return TB_EXIT_FAILURE;
	}
	printf("%s (%llu bytes, sha256 %s)\n", out, (unsigned long long)info.size, info.sha256);
	return TB_EXIT_OK;
}

static int share(tb_store_t *s, const found_t *f, const char *path, unsigned seconds)
{
	const char *key = key_of(f, path);
	tb_error_t err;
	char *url;

	if (!key) {
		fprintf(stderr, "taskbox artifacts: task %s has no artifact %s\n", f->m.task_id,
			path);
		return TB_EXIT_NOT_FOUND;
	}
	if (tb_store_share(s, key, seconds, &url, &err) < 0) {
		fprintf(stderr, "taskbox artifacts: %s\n", err.msg);
		return TB_EXIT_FAILURE;
	}
	printf("%s\n", url);
	free(url);
	return TB_EXIT_OK;
}

#define PUT_MAX 100000 /* files one `put` uploads at most */

static void put_printed(void *ud, const tb_upload_t *u)
{
	json_t *all = ud;
	if (all)
		json_array_append_new(all, json_pack("{s:s,s:s,s:s,s:s,s:I,s:b}", "path", u->name,
						     "key", u->key, "sha256", u->sha256, "blocks",
						     u->blocks, "size", (json_int_t)u->size,
						     "uploaded", u->uploaded));
	else
		printf("%s=%s\n", u->name, u->key);
	fflush(stdout);
}

/* `taskbox artifacts put`: the store alone, no ledger. */
static int put(int argc, char **argv)
{
	const char *path = NULL, *args[64] = { 0 };
	int as_json = 0, rc;
	tb_store_t *store = NULL;
	tb_config_t cfg;
	tb_error_t err;
	const tb_opt_t opts[] = {
		{ "--config", TB_OPT_STRING, &path, 0, 0, NULL, 'c' },
		{ "--json", TB_OPT_FLAG, &as_json, 0, 0, NULL, 'j' },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	tb_opts_t o = { "artifacts put", opts, args, 64, 0 };

	if ((rc = tb_cmd_options(&o, argc, argv, 2, usage)) >= 0)
		return rc;
	if (!o.npos)
		return tb_cmd_usage_error("artifacts put", usage,
					  "name a file or directory to put");
	if (tb_cmd_load_config(&cfg, path, &err) < 0) {
		fprintf(stderr, "taskbox artifacts: %s\n", err.msg);
		return TB_EXIT_CONFIG;
	}
	json_t *all = as_json ? json_array() : NULL;
	rc = TB_EXIT_OK;
	if (tb_store_open(&store, &cfg.store, &err) < 0)
		rc = TB_EXIT_CONFIG;
	for (int i = 0; i < o.npos && rc == TB_EXIT_OK; i++)
		if (tb_uploads_put(store, args[i], PUT_MAX, put_printed, all, &err) < 0)
			rc = err.code == TB_ENOTFOUND ? TB_EXIT_NOT_FOUND
			     : err.code == TB_EINVAL  ? TB_EXIT_USAGE
						      : TB_EXIT_FAILURE;
	if (rc != TB_EXIT_OK)
		fprintf(stderr, "taskbox artifacts put: %s\n", err.msg);
	else if (all)
		json_dumpf(all, stdout, JSON_COMPACT), putchar('\n');
	json_decref(all);
	tb_store_close(store);
	tb_config_free(&cfg);
	return rc;
}

int tb_cmd_artifacts(int argc, char **argv)
{
	const char *path = NULL, *out = NULL, *what = argc > 1 ? argv[1] : "", *args[2] = { 0 };
	int as_json = 0, nargs = 0, rc = TB_EXIT_CONFIG;
	unsigned seconds = DEFAULT_SHARE_SECONDS;
	tb_ledger_t *l = NULL;
	tb_store_t *store = NULL;
	found_t f = { 0 };
	tb_config_t cfg;
	tb_error_t err;

	/* every verb's options together, for --help's short forms */
	static const tb_opt_t all[] = {
		{ "--config", TB_OPT_STRING, NULL, 0, 0, NULL, 'c' },
		{ "--json", TB_OPT_FLAG, NULL, 0, 0, NULL, 'j' },
		{ "--output", TB_OPT_STRING, NULL, 0, 0, NULL, 'o' },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	if ((rc = tb_cmd_verb_option(what, usage, all)) >= 0)
		return rc;
	if (!strcmp(what, "put"))
		return put(argc, argv);
	int want = !strcmp(what, "list")                            ? 1
		   : !strcmp(what, "get") || !strcmp(what, "share") ? 2
								    : 0;
	static const char *const verbs[] = { "list", "get", "share", "put" };
	if (!want)
		return tb_cmd_unknown_verb("artifacts", usage, what, verbs,
					   sizeof(verbs) / sizeof(verbs[0]));
	uint64_t expires = DEFAULT_SHARE_SECONDS;
	/* each verb's own options: the rest are unknown to it */
	const tb_opt_t opts[] = {
		{ "--config", TB_OPT_STRING, &path, 0, 0, NULL, 'c' },
		want == 1 ? (tb_opt_t){ "--json", TB_OPT_FLAG, &as_json, 0, 0, NULL, 'j' }
		: !strcmp(what, "get")
		    ? (tb_opt_t){ "--output", TB_OPT_STRING, &out, 0, 0, NULL, 'o' }
		    : (tb_opt_t){ "--expires", TB_OPT_UINT, &expires, 1, 604800, "seconds", 0 },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	char cmd[32];
	snprintf(cmd, sizeof(cmd), "artifacts %s", what);
	tb_opts_t o = { cmd, opts, args, want, 0 };
	if ((rc = tb_cmd_options(&o, argc, argv, 2, usage)) >= 0)
		return rc;
	rc = TB_EXIT_CONFIG;
	nargs = o.npos;
	seconds = (unsigned)expires;
	if (nargs != want)
		return tb_cmd_usage_error("artifacts", usage, "%s wants %s, got %d argument%s",
					  what, want == 1 ? "TASK_ID" : "TASK_ID and PATH", nargs,
					  nargs == 1 ? "" : "s");
	if (tb_cmd_load_config(&cfg, path, &err) < 0) {
		fprintf(stderr, "taskbox artifacts: %s\n", err.msg);
		return TB_EXIT_CONFIG;
	}
	if ((rc = tb_cmd_open_fleet("artifacts", &cfg, &l, &store, &err)) != TB_EXIT_OK) {
		fprintf(stderr, "taskbox artifacts: %s\n", err.msg);
		goto out;
	}
	if ((rc = find(l, store, args[0], &f)) != TB_EXIT_OK)
		goto out;
	if (want == 1) {
		list(&f, as_json);
		rc = TB_EXIT_OK;
	} else if (!strcmp(what, "get")) {
		rc = get(store, &f, args[1], out);
	} else {
		rc = share(store, &f, args[1], seconds);
	}
out:
	if (f.have)
		tb_msg_free(&tb_schema_manifest, &f.m);
	if (l)
		tb_ledger_close(l);
	tb_store_close(store);
	tb_config_free(&cfg);
	return rc;
}
