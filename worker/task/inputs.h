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

#include "lazy_fs.h"

#include "tb/ledger.h"
#include "tb/schema_manifest.h"
#include "tb/schema_task.h"
#include "tb/store.h"

/* The inputs of one attempt, as fetched: what each is, and the lazy ones
 * (read on demand: worker/lazy), for the sandbox's lazy mount. */
typedef struct tb_inputs {
	size_t n;
	tb_usage_input_t *usage; /* n, in the task's order: name (borrowed from
				  * the task), size, lazy; fetched_bytes for eager
				  * ones (all of it) */
	size_t nlazy;
	tb_lazy_file_t *files; /* nlazy: file "k" of the lazy mount */
	tb_blocks_t *blocks;   /* nlazy, checked block lists */
	char (*fs_names)[24];  /* nlazy: "0", "1", ... */
	char (*keys)[1100];    /* nlazy: their keys in the store */
	size_t *of;            /* nlazy: which input each is */
	tb_strlist_t paths;    /* nlazy: their names under /inputs (borrowed) */
} tb_inputs_t;

/**
 * Fetches every input of @p task into @p dir (created if missing), as
 * read-only files readable by the sandbox. @p ledger resolves inputs
 * named by an earlier task (NULL: such an input is refused). An input of
 * @p lazy_min bytes or more (0: none) whose content has a block list in
 * the store (blocks/<sha256>: schemas/keys.md) is not downloaded: an
 * empty file takes its place, and @p out lists it among the lazy ones
 * for the lazy mount to be bound over it; its content's checksum is
 * checked against the store's record here, and block by block as read.
 * @param[out] out freed with tb_inputs_free(), whatever the result
 * @return 0; TB_EPOISON when an input does not exist, its checksum is not
 *         the one the task expects (or its block list not the one the task
 *         names), or its task was dead-lettered (it never will be: DLQ);
 *         TB_ERETRY when its task is not done yet; another negative code
 *         when the store or ledger failed (retry later)
 */
int tb_inputs_fetch(tb_store_t *store, tb_ledger_t *ledger, const tb_task_t *task, const char *dir,
		    uint64_t lazy_min, tb_inputs_t *out, tb_error_t *err);

void tb_inputs_free(tb_inputs_t *in);

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
