/*
 * inputs.h: pulling the artifacts a task names into a directory the
 * sandbox gets read-only at /inputs, before the agent starts; only the
 * inputs the task names. An input is an artifact key, or an earlier task's
 * output path resolved through that task's newest manifest. This file
 * fetches; binding the directory is the sandbox's, deciding when is the
 * lifecycle's.
 */
#ifndef TB_INPUTS_H
#define TB_INPUTS_H

#include "tb/schema_task.h"
#include "tb/store.h"

/**
 * Fetches every input of @p task into @p dir (created if missing), as
 * read-only files readable by the sandbox.
 * @return 0; TB_EPOISON when an input does not exist or its checksum is
 *         not the one the task expects (it never will be: DLQ); another
 *         negative code when the store failed (retry later)
 */
int tb_inputs_fetch(tb_store_t *store, const tb_task_t *task, const char *dir, tb_error_t *err);

/**
 * Resolves (@p task_id, @p path) to the artifact the newest manifest of
 * that task lists. @param[out] key, sha256 filled on success
 * @return 0, TB_ENOTFOUND (no manifest, or no such output), TB_EIO
 */
int tb_inputs_resolve(tb_store_t *store, const char *task_id, const char *path, char *key,
		      size_t keylen, char sha256[65], tb_error_t *err);

#endif
