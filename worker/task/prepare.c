/*
 * prepare.c: the "prepared" phase (run.h): the runtime by name, the recipe
 * at its pinned commit, the limits, the inputs, and the sandbox, from the
 * pool when the worker keeps one.
 */
#include "run.h"

#include "inputs.h"
#include "tb/clock.h"
#include "tb/fsutil.h"
#include "tb/metrics.h"

#include <fcntl.h>
#include <stdio.h>

int tb_run_prepare(tb_run_t *r, char *recipe_dir, size_t len, char *inputs_dir, size_t ilen,
		   tb_limits_t *lim, tb_error_t *err)
{
	const tb_lifecycle_ctx_t *ctx = r->ctx;
	char path[4096];
	int rc;

	snprintf(path, sizeof(path), "%s/%s.json", ctx->runtimes_dir, r->task->runtime);
	if ((rc = tb_runtime_load(&r->rt, path, err)) < 0)
		return rc == TB_ENOTFOUND
			   ? tb_error_set(err, TB_EPOISON, "unknown runtime '%s'", r->task->runtime)
			   : rc;
	if ((rc = tb_recipe_checkout(ctx->recipes, r->task->recipe.url, r->task->recipe.commit,
				     recipe_dir, len, &r->recipe, err)) < 0)
		return rc;
	if ((rc = tb_runtime_limits(lim, &r->rt, &r->recipe.limits, &r->task->limits, err)) < 0)
		return rc;
	inputs_dir[0] = '\0';
	if (r->task->inputs.n) {
		snprintf(inputs_dir, ilen, "%s/%s-inputs-%s-%llu", ctx->work_root, ctx->group,
			 r->task->id, (unsigned long long)r->attempt);
		tb_remove_tree(AT_FDCWD, inputs_dir); /* a crashed attempt's */
		if ((rc = tb_inputs_fetch(ctx->store, ctx->ledger, r->task, inputs_dir, err)) < 0)
			return rc;
	}
	char name[256];
	snprintf(name, sizeof(name), "%s-%llu", r->task->id, (unsigned long long)r->attempt);
	tb_sandbox_spec_t spec = {
		.name = name,
		.hostname = "task",
		.slot = ctx->slot,
		.work_root = ctx->work_root,
		.group = ctx->group,
		.ro_binds = &r->rt.sandbox.ro_binds,
		.recipe_dir = recipe_dir,
		.inputs_dir = inputs_dir[0] ? inputs_dir : NULL,
		.workspace_mb = r->rt.sandbox.workspace_mb,
		.outputs_mb = lim->outputs_mb,
		.memory_mb = lim->memory_mb,
		.pids = lim->pids,
		.cpu_millis = lim->cpu_millis,
		.max_open_files = r->rt.sandbox.max_open_files,
		.max_file_mb = r->rt.sandbox.max_file_mb,
		.wall_ms = lim->wall_seconds * 1000,
	};
	uint64_t t0 = tb_mono_us();
	rc = ctx->pool ? tb_sandbox_pool_create(ctx->pool, &spec, &r->sb, NULL, err)
		       : tb_sandbox_create(&r->sb, ctx->policy, &spec, err);
	if (rc == 0)
		tb_metrics_launch(tb_mono_us() - t0);
	return rc;
}
