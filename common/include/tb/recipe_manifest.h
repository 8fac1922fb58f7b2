/*
 * recipe_manifest.h: the manifest at the root of a recipe repository,
 * taskbox.json (schemas/recipe.md): the agent command, the judges and the
 * recipe's default limits. This file parses and validates it; finding it
 * at a commit is the worker's recipe module.
 */
#ifndef TB_RECIPE_MANIFEST_H
#define TB_RECIPE_MANIFEST_H

#include "tb/codec.h"
#include "tb/image_ref.h"
#include "tb/schema_task.h"

#define TB_RECIPE_MANIFEST_FILE "taskbox.json"
#define TB_RECIPE_MANIFEST_MAX (64u << 10)

typedef struct tb_judge {
	uint32_t has;
	char *name;
	tb_strlist_t command;     /* argv, run in the recipe checkout */
	uint64_t timeout_seconds; /* optional; the runtime's judge timeout */
} tb_judge_t;

typedef struct tb_agent_spec {
	tb_strlist_t command; /* argv */
	tb_strmap_t env;
	char *workdir; /* where it starts; NULL: the image's WorkingDir, else /recipe */
} tb_agent_spec_t;

/* What the task's sandbox is built from (schemas/recipe.md). */
typedef struct tb_environment {
	uint32_t has;
	char *image; /* an OCI image pinned by digest (tb/image_ref.h) */
} tb_environment_t;

typedef struct tb_recipe_manifest {
	uint32_t has;
	char *name;
	char *description;
	tb_agent_spec_t agent;
	tb_list_t judges; /* tb_judge_t */
	tb_limits_t limits;
	tb_environment_t environment; /* image NULL: the runtime's default image, or host binds */
} tb_recipe_manifest_t;

extern const tb_schema_t tb_schema_recipe_manifest;

/**
 * Parses a manifest from @p text (at most TB_RECIPE_MANIFEST_MAX bytes).
 * @param origin names it in errors ("<url>@<commit>:taskbox.json")
 * @param[out] out released with tb_recipe_manifest_free()
 * @return 0, TB_EVERSION, TB_ETOOBIG or TB_EINVAL with the key and reason
 */
int tb_recipe_manifest_parse(tb_recipe_manifest_t *out, const char *text, size_t len,
			     const char *origin, tb_error_t *err);

void tb_recipe_manifest_free(tb_recipe_manifest_t *m);

#endif
