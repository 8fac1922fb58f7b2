/*
 * inputs.c: resolving and fetching a task's inputs.
 */
#include "inputs.h"

#include "tb/fsutil.h"
#include "tb/schema_manifest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct newest {
	const char *task_id;
	unsigned long attempt;
	char key[512];
};

/* Keeps the manifest key of the highest attempt seen. */
static int pick_manifest(void *ud, const char *key, const tb_object_info_t *info)
{
	struct newest *n = ud;
	char tail[64];
	unsigned long attempt;
	size_t plen = strlen("tasks/") + strlen(n->task_id) + 1;

	(void)info;
	if (strlen(key) <= plen || sscanf(key + plen, "%lu/%63s", &attempt, tail) != 2 ||
	    strcmp(tail, "manifest.msgpack"))
		return 0;
	if (attempt > n->attempt) {
		n->attempt = attempt;
		snprintf(n->key, sizeof(n->key), "%s", key);
	}
	return 0;
}

int tb_inputs_resolve(tb_store_t *store, const char *task_id, const char *path, char *key,
		      size_t keylen, char sha256[65], tb_error_t *err)
{
	struct newest n = { task_id, 0, "" };
	char prefix[256], *bytes = NULL;
	tb_manifest_t m;
	size_t len;
	int rc;

	snprintf(prefix, sizeof(prefix), "tasks/%s/", task_id);
	if ((rc = tb_store_list(store, prefix, pick_manifest, &n, err)) < 0)
		return rc;
	if (!n.attempt)
		return tb_error_set(err, TB_ENOTFOUND, "task %s has no manifest", task_id);
	if ((rc = tb_store_get_bytes(store, n.key, tb_schema_manifest.max_bytes, &bytes, &len,
				     err)) < 0)
		return rc;
	rc = tb_msg_decode(&tb_schema_manifest, &m, bytes, len, err);
	free(bytes);
	if (rc < 0)
		return tb_error_prefix(err, "manifest %s", n.key);
	rc = tb_error_set(err, TB_ENOTFOUND, "task %s (attempt %lu) has no output '%s'", task_id,
			  n.attempt, path);
	for (size_t i = 0; i < m.artifacts.n; i++) {
		const tb_artifact_t *a = (const tb_artifact_t *)m.artifacts.items + i;
		if (!strcmp(a->path, path)) {
			snprintf(key, keylen, "%s", a->key);
			snprintf(sha256, 65, "%s", a->sha256);
			rc = 0;
			break;
		}
	}
	tb_msg_free(&tb_schema_manifest, &m);
	return rc;
}

/* A missing input will stay missing: the task can never run (poison).
 * Other failures (the store is down) may pass. */
static int poison_if_missing(int rc, tb_error_t *err, const char *name)
{
	tb_error_prefix(err, "input %s", name);
	if (rc == TB_ENOTFOUND && err)
		err->code = TB_EPOISON;
	return rc == TB_ENOTFOUND ? TB_EPOISON : rc;
}

int tb_inputs_fetch(tb_store_t *store, const tb_task_t *task, const char *dir, tb_error_t *err)
{
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return tb_error_errno(err, TB_EIO, errno, "inputs: mkdir %s", dir);
	for (size_t i = 0; i < task->inputs.n; i++) {
		const tb_input_t *in = (const tb_input_t *)task->inputs.items + i;
		char key[1100], sha[65] = "", path[4096];
		tb_object_info_t got;
		int rc;

		if (in->artifact) {
			snprintf(key, sizeof(key), "%s", in->artifact);
		} else if ((rc = tb_inputs_resolve(store, in->task, in->path, key, sizeof(key), sha,
						   err)) < 0) {
			return poison_if_missing(rc, err, in->name);
		}
		snprintf(path, sizeof(path), "%s/%s", dir, in->name);
		if (tb_mkdir_parents(path) < 0)
			return tb_error_errno(err, TB_EIO, errno, "inputs: mkdir for %s", path);
		/* An expected SHA-256 is checked against what arrived, not
		 * against what the store records. */
		const char *want = in->sha256 ? in->sha256 : sha;
		if ((rc = tb_store_get_file(store, key, path, want[0] ? TB_STORE_GET_SHA256 : 0,
					    &got, err)) < 0) {
			return poison_if_missing(rc, err, in->name);
		}
		if (want[0] && strcmp(want, got.sha256) != 0)
			return tb_error_set(err, TB_EPOISON,
					    "input %s: %s has sha256 %s, the task expects %s",
					    in->name, key, got.sha256, want);
		chmod(path, 0444);
	}
	return 0;
}
