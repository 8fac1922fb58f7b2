/*
 * schema_manifest.c: the field table of the artifact manifest
 * (schemas/manifest.md).
 */
#include "tb/schema_manifest.h"

#include "tb/schema_verdict.h"

#include <stddef.h>

const char *const tb_outcomes[] = {
	"succeeded", "failed", "timed-out", "oom-killed", "pids-limit",
	"cancelled", "error",  "budget",    NULL,
};

#define MAX_ARTIFACTS 10000

/* clang-format off: one field per row reads as a table */
static const tb_field_t artifact_fields[] = {
	{ .name = "path",
	  .type = TB_FT_STR,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_artifact_t, path),
	  .min = 1,
	  .max = 1024,
	  .check = tb_check_relpath },
	{ .name = "key",
	  .type = TB_FT_STR,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_artifact_t, key),
	  .min = 1,
	  .max = 1024,
	  .check = tb_check_relpath },
	{ .name = "size",
	  .type = TB_FT_U64,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_artifact_t, size),
	  .max = UINT64_MAX },
	{ .name = "sha256",
	  .type = TB_FT_STR,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_artifact_t, sha256),
	  .min = 64,
	  .max = 64,
	  .check = tb_check_sha256 },
};
/* clang-format on */

static const tb_schema_t artifact_schema = {
	.name = "artifact",
	.size = sizeof(tb_artifact_t),
	.fields = artifact_fields,
	.nfields = 4,
};

/* A refused path is what the agent created, so it is only length-capped:
 * it may be absolute-looking or contain "..", which is why it was refused. */
/* clang-format off */
static const tb_field_t refused_fields[] = {
	{.name = "path", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_refused_t, path), .min = 1, .max = 1024},
	{.name = "reason", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_refused_t, reason), .min = 1, .max = 256},
};
/* clang-format on */

static const tb_schema_t refused_schema = {
	.name = "refused",
	.size = sizeof(tb_refused_t),
	.fields = refused_fields,
	.nfields = 2,
};

/* clang-format off */
static const tb_field_t verdict_ref_fields[] = {
	{.name = "judge", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_verdict_ref_t, judge), .min = 1, .max = 64,
	 .check = tb_check_id},
	{.name = "outcome", .type = TB_FT_ENUM, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_verdict_ref_t, outcome),
	 .names = tb_verdict_outcomes},
	{.name = "key", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_verdict_ref_t, key), .min = 1, .max = 1024,
	 .check = tb_check_relpath},
};
/* clang-format on */

static const tb_schema_t verdict_ref_schema = {
	.name = "verdict",
	.size = sizeof(tb_verdict_ref_t),
	.has_offset = offsetof(tb_verdict_ref_t, has),
	.fields = verdict_ref_fields,
	.nfields = 3,
};

/* clang-format off */
static const tb_field_t phase_fields[] = {
	{.name = "name", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_phase_time_t, name), .min = 1, .max = 32},
	{.name = "at", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_phase_time_t, at), .max = UINT64_MAX},
	{.name = "duration_ms", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_phase_time_t, duration_ms), .max = UINT64_MAX},
};
/* clang-format on */
static const tb_schema_t phase_schema = {
	.name = "phase",
	.size = sizeof(tb_phase_time_t),
	.fields = phase_fields,
	.nfields = 3,
};

/* A name only with its count: the count says how many, the name which
 * was first, and a name alone would say one of nothing. */
static int altered_check(const void *obj, tb_error_t *err)
{
	const tb_environment_altered_t *a = obj;
	const char *const names[] = { "device_path", "setid_path", "ids_path" };
	const char *const paths[] = { a->device_path, a->setid_path, a->ids_path };

	for (int i = 0; i < 3; i++)
		if (paths[i] && !((a->has >> i) & 1u))
			return tb_error_set(err, TB_EINVAL, "field '%s': only with its count",
					    names[i]);
	return 0;
}

/* clang-format off */
static const tb_field_t altered_fields[] = {
	{.name = "devices", .type = TB_FT_U64,
	 .offset = offsetof(tb_environment_altered_t, devices), .min = 1, .max = UINT64_MAX},
	{.name = "setid", .type = TB_FT_U64,
	 .offset = offsetof(tb_environment_altered_t, setid), .min = 1, .max = UINT64_MAX},
	{.name = "ids", .type = TB_FT_U64,
	 .offset = offsetof(tb_environment_altered_t, ids), .min = 1, .max = UINT64_MAX},
	{.name = "device_path", .type = TB_FT_STR,
	 .offset = offsetof(tb_environment_altered_t, device_path), .min = 1, .max = 255},
	{.name = "setid_path", .type = TB_FT_STR,
	 .offset = offsetof(tb_environment_altered_t, setid_path), .min = 1, .max = 255},
	{.name = "ids_path", .type = TB_FT_STR,
	 .offset = offsetof(tb_environment_altered_t, ids_path), .min = 1, .max = 255},
};
/* clang-format on */
static const tb_schema_t altered_schema = {
	.name = "altered",
	.size = sizeof(tb_environment_altered_t),
	.has_offset = offsetof(tb_environment_altered_t, has),
	.fields = altered_fields,
	.nfields = sizeof(altered_fields) / sizeof(altered_fields[0]),
	.check = altered_check,
};

/* clang-format off */
static const tb_field_t environment_fields[] = {
	{.name = "image", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_environment_ran_t, image), .min = 1, .max = TB_IMAGE_REF_MAX - 1,
	 .check = tb_check_image_ref},
	{.name = "digest", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_environment_ran_t, digest), .min = 71, .max = 71,
	 .check = tb_check_digest},
	{.name = "layers", .type = TB_FT_STRLIST, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_environment_ran_t, layers), .max = 256, .item_max = 71,
	 .check = tb_check_digest},
	{.name = "altered", .type = TB_FT_OBJ,
	 .offset = offsetof(tb_environment_ran_t, altered), .sub = &altered_schema},
};
/* clang-format on */
static const tb_schema_t environment_schema = {
	.name = "environment",
	.size = sizeof(tb_environment_ran_t),
	.fields = environment_fields,
	.nfields = sizeof(environment_fields) / sizeof(environment_fields[0]),
};

/* clang-format off */
static const tb_field_t cpu_fields[] = {
	{.name = "user_ms", .type = TB_FT_U64,
	 .offset = offsetof(tb_usage_cpu_t, user_ms), .max = UINT64_MAX},
	{.name = "system_ms", .type = TB_FT_U64,
	 .offset = offsetof(tb_usage_cpu_t, system_ms), .max = UINT64_MAX},
};
/* clang-format on */
static const tb_schema_t cpu_schema = {
	.name = "cpu",
	.size = sizeof(tb_usage_cpu_t),
	.has_offset = offsetof(tb_usage_cpu_t, has),
	.fields = cpu_fields,
	.nfields = 2,
};

/* clang-format off */
static const tb_field_t egress_fields[] = {
	{.name = "endpoint", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_usage_egress_t, endpoint), .min = 1, .max = 128},
	{.name = "requests", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_usage_egress_t, requests), .max = UINT64_MAX},
	{.name = "refused", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_usage_egress_t, refused), .max = UINT64_MAX},
	{.name = "bytes_up", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_usage_egress_t, bytes_up), .max = UINT64_MAX},
	{.name = "bytes_down", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_usage_egress_t, bytes_down), .max = UINT64_MAX},
	{.name = "upstream_ms", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_usage_egress_t, upstream_ms), .max = UINT64_MAX},
	{.name = "input_tokens", .type = TB_FT_U64,
	 .offset = offsetof(tb_usage_egress_t, input_tokens), .max = UINT64_MAX},
	{.name = "output_tokens", .type = TB_FT_U64,
	 .offset = offsetof(tb_usage_egress_t, output_tokens), .max = UINT64_MAX},
	{.name = "cached_tokens", .type = TB_FT_U64,
	 .offset = offsetof(tb_usage_egress_t, cached_tokens), .max = UINT64_MAX},
	{.name = "replayed", .type = TB_FT_U64,
	 .offset = offsetof(tb_usage_egress_t, replayed), .max = UINT64_MAX},
	{.name = "rate_wait_ms", .type = TB_FT_U64,
	 .offset = offsetof(tb_usage_egress_t, rate_wait_ms), .max = UINT64_MAX},
};
/* clang-format on */
static const tb_schema_t egress_schema = {
	.name = "egress",
	.size = sizeof(tb_usage_egress_t),
	.has_offset = offsetof(tb_usage_egress_t, has),
	.fields = egress_fields,
	.nfields = 11,
};

/* clang-format off */
static const tb_field_t input_usage_fields[] = {
	{.name = "name", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_usage_input_t, name), .min = 1, .max = 255},
	{.name = "size", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_usage_input_t, size), .max = UINT64_MAX},
	{.name = "fetched_bytes", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_usage_input_t, fetched_bytes), .max = UINT64_MAX},
	{.name = "lazy", .type = TB_FT_BOOL, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_usage_input_t, lazy)},
};
/* clang-format on */
static const tb_schema_t input_usage_schema = {
	.name = "input",
	.size = sizeof(tb_usage_input_t),
	.has_offset = offsetof(tb_usage_input_t, has),
	.fields = input_usage_fields,
	.nfields = sizeof(input_usage_fields) / sizeof(input_usage_fields[0]),
};

/* clang-format off */
static const tb_field_t usage_fields[] = {
	{.name = "wall_ms", .type = TB_FT_U64,
	 .offset = offsetof(tb_usage_t, wall_ms), .max = UINT64_MAX},
	{.name = "agent", .type = TB_FT_OBJ,
	 .offset = offsetof(tb_usage_t, agent), .sub = &cpu_schema},
	{.name = "judges", .type = TB_FT_OBJ,
	 .offset = offsetof(tb_usage_t, judges), .sub = &cpu_schema},
	{.name = "memory_peak_bytes", .type = TB_FT_U64,
	 .offset = offsetof(tb_usage_t, memory_peak_bytes), .max = UINT64_MAX},
	{.name = "pids_peak", .type = TB_FT_U64,
	 .offset = offsetof(tb_usage_t, pids_peak), .max = UINT64_MAX},
	{.name = "outputs_bytes", .type = TB_FT_U64,
	 .offset = offsetof(tb_usage_t, outputs_bytes), .max = UINT64_MAX},
	{.name = "saved_bytes", .type = TB_FT_U64,
	 .offset = offsetof(tb_usage_t, saved_bytes), .max = UINT64_MAX},
	{.name = "egress", .type = TB_FT_LIST,
	 .offset = offsetof(tb_usage_t, egress), .max = 1024,
	 .sub = &egress_schema},
	{.name = "inputs", .type = TB_FT_LIST,
	 .offset = offsetof(tb_usage_t, inputs), .max = 1024,
	 .sub = &input_usage_schema},
};
/* clang-format on */
const tb_schema_t tb_schema_usage = {
	.name = "usage",
	.size = sizeof(tb_usage_t),
	.has_offset = offsetof(tb_usage_t, has),
	.fields = usage_fields,
	.nfields = sizeof(usage_fields) / sizeof(usage_fields[0]),
};

/* clang-format off */
static const tb_field_t manifest_fields[] = {
	{.name = "task_id", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_manifest_t, task_id), .min = 1, .max = 128,
	 .check = tb_check_id},
	{.name = "attempt", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_manifest_t, attempt), .min = 1, .max = 1000},
	{.name = "outcome", .type = TB_FT_ENUM, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_manifest_t, outcome), .names = tb_outcomes},
	{.name = "reason", .type = TB_FT_STR,
	 .offset = offsetof(tb_manifest_t, reason), .max = 4096},
	{.name = "recipe", .type = TB_FT_OBJ, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_manifest_t, recipe), .sub = &tb_schema_recipe_ref},
	{.name = "started_at", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_manifest_t, started_at), .max = UINT64_MAX},
	{.name = "finished_at", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_manifest_t, finished_at), .max = UINT64_MAX},
	{.name = "conversation_key", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_manifest_t, conversation_key), .min = 1, .max = 1024,
	 .check = tb_check_relpath},
	{.name = "events", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_manifest_t, events), .max = UINT32_MAX},
	{.name = "artifacts", .type = TB_FT_LIST,
	 .offset = offsetof(tb_manifest_t, artifacts), .max = MAX_ARTIFACTS,
	 .sub = &artifact_schema},
	{.name = "refused", .type = TB_FT_LIST,
	 .offset = offsetof(tb_manifest_t, refused), .max = MAX_ARTIFACTS,
	 .sub = &refused_schema},
	{.name = "verdicts", .type = TB_FT_LIST,
	 .offset = offsetof(tb_manifest_t, verdicts), .max = 64,
	 .sub = &verdict_ref_schema},
	{.name = "runtime", .type = TB_FT_STR,
	 .offset = offsetof(tb_manifest_t, runtime), .min = 1, .max = 128,
	 .check = tb_check_id},
	{.name = "phases", .type = TB_FT_LIST,
	 .offset = offsetof(tb_manifest_t, phases), .max = 32,
	 .sub = &phase_schema},
	{.name = "turns", .type = TB_FT_U64,
	 .offset = offsetof(tb_manifest_t, turns), .max = 1000001},
	{.name = "followups", .type = TB_FT_U64,
	 .offset = offsetof(tb_manifest_t, followups), .max = 1000000},
	{.name = "environment", .type = TB_FT_OBJ,
	 .offset = offsetof(tb_manifest_t, environment), .sub = &environment_schema},
	{.name = "usage", .type = TB_FT_OBJ,
	 .offset = offsetof(tb_manifest_t, usage), .sub = &tb_schema_usage},
	{.name = "recording_key", .type = TB_FT_STR,
	 .offset = offsetof(tb_manifest_t, recording_key), .min = 1, .max = 1024,
	 .check = tb_check_relpath},
};

/* clang-format on */

const tb_schema_t tb_schema_manifest = {
	.name = "manifest",
	.size = sizeof(tb_manifest_t),
	.has_offset = offsetof(tb_manifest_t, has),
	.fields = manifest_fields,
	.nfields = sizeof(manifest_fields) / sizeof(manifest_fields[0]),
	.max_bytes = 8u << 20,
};
