/*
 * inputs.h: pulling the artifacts a task names into a directory the
 * sandbox gets read-only at /inputs, before the agent starts; only the
 * inputs the task names. An input is an artifact key, or an earlier task's
 * output path resolved through the manifest that task's done-marker names
 * in the ledger (the record of the attempt that counted, not merely the
 * newest one in the store). This file fetches; binding the directory is
 * the sandbox's, deciding when is the lifecycle's.
 */
#ifndef TB_INPUTS_H
#define TB_INPUTS_H

#include "tb/ledger.h"
#include "tb/schema_task.h"
#include "tb/store.h"

/**
 * Fetches every input of @p task into @p dir (created if missing), as
 * read-only files readable by the sandbox. @p ledger resolves inputs
 * named by an earlier task (NULL: such an input is refused).
 * @return 0; TB_EPOISON when an input does not exist, its checksum is not
 *         the one the task expects, or its task was dead-lettered (it
 *         never will be: DLQ); TB_ERETRY when its task is not done yet;
 *         another negative code when the store or ledger failed (retry
 *         later)
 */
int tb_inputs_fetch(tb_store_t *store, tb_ledger_t *ledger, const tb_task_t *task, const char *dir,
		    tb_error_t *err);

/**
 * What @p ledger says of @p task, an earlier task an input names.
 * @return 0 done, with outputs (@p t->manifest names its manifest);
 *         TB_EBUSY not done yet, or not begun (@p t->attempts 0): wait;
 *         TB_ENOTFOUND dead-lettered, with none; or the ledger's error.
 *         @p err says which.
 */
int tb_inputs_task_done(tb_ledger_t *ledger, const char *task, tb_ledger_task_t *t,
			tb_error_t *err);

/**
 * Resolves (@p task_id, @p path) to the artifact listed by the manifest
 * that task's done-marker names. @param[out] key, sha256 filled on success
 * @return 0; TB_ENOTFOUND (no such output, or the task was dead-lettered
 *         and has none); TB_ERETRY (the task is not done, or the ledger
 *         never saw it: it may be yet); the store's or ledger's error
 */
int tb_inputs_resolve(tb_store_t *store, tb_ledger_t *ledger, const char *task_id, const char *path,
		      char *key, size_t keylen, char sha256[65], tb_error_t *err);

#endif
