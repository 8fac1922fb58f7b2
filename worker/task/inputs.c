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

int tb_inputs_task_done(tb_ledger_t *ledger, const char *task, tb_ledger_task_t *t, tb_error_t *err)
{
	int rc;

	if ((rc = tb_ledger_inspect(ledger, task, t, err)) < 0)
		return tb_error_prefix(err, "task %s: the ledger", task);
	if (!t->done && !t->attempts)
		return tb_error_set(err, TB_EBUSY,
				    "task %s is not done: the ledger has not seen it", task);
	if (!t->done)
		return tb_error_set(err, TB_EBUSY, "task %s is not done yet (%llu attempts so far)",
				    task, (unsigned long long)t->attempts);
	if (!t->manifest[0])
		return tb_error_set(err, TB_ENOTFOUND,
				    "task %s was dead-lettered: it has no outputs", task);
	return 0;
}

int tb_inputs_resolve(tb_store_t *store, tb_ledger_t *ledger, const char *task_id, const char *path,
		      char *key, size_t keylen, char sha256[65], tb_error_t *err)
{
	tb_ledger_task_t t;
	tb_manifest_t m;
	char *bytes = NULL;
	size_t len;
	int rc;

	if (!ledger)
		return tb_error_set(err, TB_EINVAL, "no ledger to look task %s up in", task_id);
	/* Not done: admission waits for that before an attempt begins
	 * (worker.c, admit_inputs), so only a revive since then gets here;
	 * the attempt is retried as a platform failure. */
	if ((rc = tb_inputs_task_done(ledger, task_id, &t, err)) == TB_EBUSY) {
		if (err)
			err->code = TB_ERETRY;
		return TB_ERETRY;
	}
	if (rc < 0)
		return rc;
	if ((rc = tb_store_get_bytes(store, t.manifest, tb_schema_manifest.max_bytes, &bytes, &len,
				     err)) < 0)
		return tb_error_prefix(err, "task %s: its manifest", task_id);
	rc = tb_msg_decode(&tb_schema_manifest, &m, bytes, len, err);
	free(bytes);
	if (rc < 0)
		return tb_error_prefix(err, "manifest %s", t.manifest);
	rc = tb_error_set(err, TB_ENOTFOUND, "task %s (attempt %llu) has no output '%s'", task_id,
			  (unsigned long long)t.done_attempt, path);
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

int tb_inputs_fetch(tb_store_t *store, tb_ledger_t *ledger, const tb_task_t *task, const char *dir,
		    tb_error_t *err)
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
		} else if ((rc = tb_inputs_resolve(store, ledger, in->task, in->path, key,
						   sizeof(key), sha, err)) < 0) {
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
