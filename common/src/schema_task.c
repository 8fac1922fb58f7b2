/*
 * schema_task.c: the field table of the task message. The wire contract is
 * schemas/task.md; keep the two in step (the example round-trip tests
 * catch drift in one direction, the review the other).
 */
#include "tb/schema_task.h"

#include "tb/sigv4.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const char *const task_kinds[] = { "one-shot", "interactive", NULL };
static const char *const replay_modes[] = { "strict", "fill", NULL };
static const char *const replay_paces[] = { "instant", "recorded", NULL };

/* clang-format off: one field per row reads as a table */
static const tb_field_t recipe_fields[] = {
	{ .name = "url",
	  .type = TB_FT_STR,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_recipe_ref_t, url),
	  .min = 1,
	  .max = 2048 },
	{ .name = "commit",
	  .type = TB_FT_STR,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_recipe_ref_t, commit),
	  .min = 1,
	  .max = 40,
	  .check = tb_check_commit },
};
/* clang-format on */

const tb_schema_t tb_schema_recipe_ref = {
	.name = "recipe",
	.size = sizeof(tb_recipe_ref_t),
	.fields = recipe_fields,
	.nfields = 2,
};

/* clang-format off */
static const tb_field_t input_fields[] = {
	{.name = "name", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_input_t, name), .min = 1, .max = 255,
	 .check = tb_check_relpath},
	{.name = "artifact", .type = TB_FT_STR,
	 .offset = offsetof(tb_input_t, artifact), .min = 1, .max = 1024,
	 .check = tb_check_relpath},
	{.name = "task", .type = TB_FT_STR,
	 .offset = offsetof(tb_input_t, task), .min = 1, .max = 128,
	 .check = tb_check_id},
	{.name = "path", .type = TB_FT_STR,
	 .offset = offsetof(tb_input_t, path), .min = 1, .max = 1024,
	 .check = tb_check_relpath},
	{.name = "sha256", .type = TB_FT_STR,
	 .offset = offsetof(tb_input_t, sha256), .min = 64, .max = 64,
	 .check = tb_check_sha256},
	{.name = "blocks", .type = TB_FT_STR,
	 .offset = offsetof(tb_input_t, blocks), .min = 64, .max = 64,
	 .check = tb_check_sha256},
};
/* clang-format on */

/* An input names an artifact key, or an earlier task's output path. */
static int input_check(const void *obj, tb_error_t *err)
{
	const tb_input_t *in = obj;

	if (in->artifact ? (in->task || in->path) : !(in->task && in->path))
		return tb_error_set(err, TB_EINVAL,
				    "give either 'artifact', or 'task' and 'path' (an earlier "
				    "task's output)");
	return 0;
}

static const tb_schema_t input_schema = {
	.name = "input",
	.size = sizeof(tb_input_t),
	.fields = input_fields,
	.nfields = sizeof(input_fields) / sizeof(input_fields[0]),
	.check = input_check,
};

#define LIMIT(n, member, hi)                                                                       \
	{                                                                                          \
		.name = n, .type = TB_FT_U64, .offset = offsetof(tb_limits_t, member), .min = 1,   \
		.max = hi                                                                          \
	}
/* clang-format off */
static const tb_field_t limit_fields[] = {
	[TB_LIMIT_WALL_SECONDS] = LIMIT("wall_seconds", wall_seconds, 7 * 86400),
	[TB_LIMIT_MEMORY_MB] = LIMIT("memory_mb", memory_mb, 1u << 20),
	[TB_LIMIT_PIDS] = LIMIT("pids", pids, 1u << 20),
	[TB_LIMIT_CPU_MILLIS] = LIMIT("cpu_millis", cpu_millis, 1024000),
	[TB_LIMIT_OUTPUTS_MB] = LIMIT("outputs_mb", outputs_mb, 1u << 20),
	[TB_LIMIT_MAX_TOKENS] = LIMIT("max_tokens", max_tokens, UINT64_C(1000000000000)),
	[TB_LIMIT_MAX_REQUESTS] = LIMIT("max_requests", max_requests, UINT64_C(1000000000)),
	[TB_LIMIT_MAX_EGRESS_MB] = LIMIT("max_egress_mb", max_egress_mb, 1u << 30),
	[TB_LIMIT_MAX_INPUT_TOKENS] = LIMIT("max_input_tokens", max_input_tokens, UINT64_C(1000000000000)),
	[TB_LIMIT_MAX_OUTPUT_TOKENS] = LIMIT("max_output_tokens", max_output_tokens, UINT64_C(1000000000000)),
};
/* clang-format on */

const tb_schema_t tb_schema_limits = {
	.name = "limits",
	.size = sizeof(tb_limits_t),
	.has_offset = offsetof(tb_limits_t, has),
	.fields = limit_fields,
	.nfields = sizeof(limit_fields) / sizeof(limit_fields[0]),
};

/* clang-format off */
static const tb_field_t replay_fields[] = {
	[TB_REPLAY_ATTEMPT] = {.name = "attempt", .type = TB_FT_U64,
	 .offset = offsetof(tb_replay_conf_t, attempt), .min = 1, .max = 1000},
	{.name = "mode", .type = TB_FT_ENUM,
	 .offset = offsetof(tb_replay_conf_t, mode), .names = replay_modes},
	{.name = "pace", .type = TB_FT_ENUM,
	 .offset = offsetof(tb_replay_conf_t, pace), .names = replay_paces},
};
/* clang-format on */

static const tb_schema_t replay_schema = {
	.name = "replay",
	.size = sizeof(tb_replay_conf_t),
	.has_offset = offsetof(tb_replay_conf_t, has),
	.fields = replay_fields,
	.nfields = sizeof(replay_fields) / sizeof(replay_fields[0]),
	.strict = true,
};

/* A replay names another task, and replay's settings need it. */
static int task_check(const void *obj, tb_error_t *err)
{
	const tb_task_t *t = obj;

	if (t->replay.has && !t->replay_from)
		return tb_error_set(err, TB_EINVAL, "field 'replay': needs 'replay_from'");
	if (t->replay_from && t->id && !strcmp(t->replay_from, t->id))
		return tb_error_set(err, TB_EINVAL,
				    "field 'replay_from': a task cannot replay itself");
	return 0;
}

/* clang-format off */
static const tb_field_t task_fields[] = {
	{.name = "id", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_task_t, id), .min = 1, .max = 128,
	 .check = tb_check_id},
	{.name = "kind", .type = TB_FT_ENUM, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_task_t, kind), .names = task_kinds},
	{.name = "recipe", .type = TB_FT_OBJ, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_task_t, recipe), .sub = &tb_schema_recipe_ref},
	{.name = "prompt", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_task_t, prompt), .max = TB_PROMPT_MAX_BYTES},
	{.name = "inputs", .type = TB_FT_LIST,
	 .offset = offsetof(tb_task_t, inputs), .max = 64, .sub = &input_schema},
	{.name = "runtime", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_task_t, runtime), .min = 1, .max = 64,
	 .check = tb_check_id},
	{.name = "limits", .type = TB_FT_OBJ,
	 .offset = offsetof(tb_task_t, limits), .sub = &tb_schema_limits},
	{.name = "labels", .type = TB_FT_STRMAP,
	 .offset = offsetof(tb_task_t, labels), .max = 32, .item_max = 255,
	 .check = tb_check_label},
	{.name = "submitted_at", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_task_t, submitted_at), .max = UINT64_MAX},
	{.name = "replay_from", .type = TB_FT_STR,
	 .offset = offsetof(tb_task_t, replay_from), .min = 1, .max = 128,
	 .check = tb_check_id},
	{.name = "replay", .type = TB_FT_OBJ,
	 .offset = offsetof(tb_task_t, replay), .sub = &replay_schema},
};
/* clang-format on */

const tb_schema_t tb_schema_task = {
	.name = "task",
	.size = sizeof(tb_task_t),
	.has_offset = offsetof(tb_task_t, has),
	.fields = task_fields,
	.nfields = sizeof(task_fields) / sizeof(task_fields[0]),
	.max_bytes = TB_TASK_MAX_BYTES,
	.check = task_check,
};

int tb_task_digest(const tb_task_t *t, char out[72], tb_error_t *err)
{
	tb_task_t copy = *t;
	msgpack_sbuffer sb;
	char hex[65];
	int rc;

	copy.submitted_at = 0; /* when, not what */
	msgpack_sbuffer_init(&sb);
	if ((rc = tb_msg_encode(&sb, &tb_schema_task, &copy, err)) == 0) {
		tb_sha256_hex(hex, sb.data, sb.size);
		snprintf(out, 72, "sha256:%s", hex);
	}
	msgpack_sbuffer_destroy(&sb);
	return rc;
}
