/*
 * inputs.c: resolving and fetching a task's inputs.
 */
#include "inputs.h"

#include "tb/blocks.h"
#include "tb/fsutil.h"
#include "tb/schema_manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Whether input @p in, at @p key, is read on demand: @p min bytes or more
 * (its size into *size either way), its content named (@p want, else the
 * store's record), and a block list for it in the store that fits (into
 * @p b). @return 1 lazy; 0 eager; TB_EPOISON for a content or block list
 * not the one the task names; the store's error */
static int lazy_plan(tb_store_t *store, const tb_input_t *in, const char *key, const char *want,
		     uint64_t min, tb_blocks_t *b, uint64_t *size, tb_error_t *err)
{
	tb_object_info_t info;
	char bkey[80], *bytes = NULL;
	size_t len;
	int rc;

	memset(&info, 0, sizeof(info));
	if ((rc = tb_store_head(store, key, &info, err)) < 0)
		return rc;
	*size = info.size;
	const char *sha = want[0] ? want : info.sha256;
	if (info.size < min || !sha[0])
		return 0;
	if (want[0] && info.sha256[0] && strcmp(want, info.sha256) != 0)
		return tb_error_set(err, TB_EPOISON,
				    "input %s: %s has sha256 %s, the task expects %s", in->name,
				    key, info.sha256, want);
	snprintf(bkey, sizeof(bkey), TB_BLOCKS_PREFIX "%s", sha);
	rc = tb_store_get_bytes(store, bkey, 32 * tb_blocks_count(info.size), &bytes, &len, err);
	if (rc == TB_ENOTFOUND || rc == TB_ETOOBIG) /* no list for it: downloaded whole */
		return in->blocks ? tb_error_set(err, TB_EPOISON,
						 "input %s: the task names its block list, and "
						 "%s is not there",
						 in->name, bkey)
				  : 0;
	if (rc < 0)
		return rc;
	rc = tb_blocks_parse(bytes, len, info.size, in->blocks, b, err);
	free(bytes);
	if (rc == TB_EINVAL) /* a list that does not fit: named, poison; else whole */
		return in->blocks
			   ? tb_error_set(err, TB_EPOISON, "input %s: %s", in->name, err->msg)
			   : 0;
	return rc < 0 ? rc : 1;
}

/* @p out's room for @p n inputs. 0, or -1 out of memory. */
static int inputs_alloc(tb_inputs_t *out, size_t n)
{
	memset(out, 0, sizeof(*out));
	if (!n)
		return 0;
	out->usage = calloc(n, sizeof(*out->usage));
	out->files = calloc(n, sizeof(*out->files));
	out->blocks = calloc(n, sizeof(*out->blocks));
	out->fs_names = calloc(n, sizeof(*out->fs_names));
	out->keys = calloc(n, sizeof(*out->keys));
	out->of = calloc(n, sizeof(*out->of));
	out->paths.items = calloc(n, sizeof(char *));
	return out->usage && out->files && out->blocks && out->fs_names && out->keys && out->of &&
		       out->paths.items
		   ? 0
		   : -1;
}

/* Input @p in, at @p key, as lazy file k of @p out: an empty file at
 * @p path takes its place. */
static int add_lazy(tb_inputs_t *out, size_t i, const tb_input_t *in, const char *key,
		    const char *path, tb_error_t *err)
{
	size_t k = out->nlazy;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);

	if (fd < 0)
		return tb_error_errno(err, TB_EIO, errno, "inputs: create %s", path);
	close(fd);
	snprintf(out->fs_names[k], sizeof(out->fs_names[k]), "%zu", k);
	snprintf(out->keys[k], sizeof(out->keys[k]), "%s", key);
	out->files[k] =
	    (tb_lazy_file_t){ out->fs_names[k], out->keys[k], &out->blocks[k], in->name };
	out->of[k] = i;
	out->paths.items[k] = in->name;
	out->paths.n = ++out->nlazy;
	return 0;
}

int tb_inputs_fetch(tb_store_t *store, tb_ledger_t *ledger, const tb_task_t *task, const char *dir,
		    uint64_t lazy_min, tb_inputs_t *out, tb_error_t *err)
{
	if (inputs_alloc(out, task->inputs.n) < 0)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return tb_error_errno(err, TB_EIO, errno, "inputs: mkdir %s", dir);
	for (size_t i = 0; i < task->inputs.n; i++) {
		const tb_input_t *in = (const tb_input_t *)task->inputs.items + i;
		tb_usage_input_t *u = &out->usage[i];
		char key[1100], sha[65] = "", path[4096];
		tb_object_info_t got;
		int rc;

		u->name = in->name;
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
		if (lazy_min) {
			rc = lazy_plan(store, in, key, want, lazy_min, &out->blocks[out->nlazy],
				       &u->size, err);
			if (rc < 0)
				return poison_if_missing(rc, err, in->name);
			if (rc == 1) {
				u->lazy = true;
				if ((rc = add_lazy(out, i, in, key, path, err)) < 0) {
					tb_blocks_free(&out->blocks[out->nlazy]); /* not counted */
					return rc;
				}
				continue;
			}
		}
		if ((rc = tb_store_get_file(store, key, path, want[0] ? TB_STORE_GET_SHA256 : 0,
					    &got, err)) < 0) {
			return poison_if_missing(rc, err, in->name);
		}
		if (want[0] && strcmp(want, got.sha256) != 0)
			return tb_error_set(err, TB_EPOISON,
					    "input %s: %s has sha256 %s, the task expects %s",
					    in->name, key, got.sha256, want);
		u->size = u->fetched_bytes = got.size;
		chmod(path, 0444);
	}
	out->n = task->inputs.n;
	return 0;
}

void tb_inputs_free(tb_inputs_t *in)
{
	for (size_t k = 0; in->blocks && k < in->nlazy; k++)
		tb_blocks_free(&in->blocks[k]);
	free(in->usage);
	free(in->files);
	free(in->blocks);
	free(in->fs_names);
	free(in->keys);
	free(in->of);
	free(in->paths.items);
	memset(in, 0, sizeof(*in));
}
