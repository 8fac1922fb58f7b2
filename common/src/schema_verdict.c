/*
 * schema_verdict.c: the field table of the verdict message
 * (schemas/verdict.md).
 */
#include "tb/schema_verdict.h"

#include <stddef.h>

const char *const tb_verdict_outcomes[] = { "pass", "fail", "error", NULL };

/* clang-format off: one field per row reads as a table */
static const tb_field_t verdict_fields[] = {
	{ .name = "task_id",
	  .type = TB_FT_STR,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_verdict_t, task_id),
	  .min = 1,
	  .max = 128,
	  .check = tb_check_id },
	{ .name = "attempt",
	  .type = TB_FT_U64,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_verdict_t, attempt),
	  .min = 1,
	  .max = 1000 },
	{ .name = "judge",
	  .type = TB_FT_STR,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_verdict_t, judge),
	  .min = 1,
	  .max = 64,
	  .check = tb_check_id },
	{ .name = "outcome",
	  .type = TB_FT_ENUM,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_verdict_t, outcome),
	  .names = tb_verdict_outcomes },
	[TB_VERDICT_F_SCORE] = { .name = "score",
				 .type = TB_FT_F64,
				 .offset = offsetof(tb_verdict_t, score),
				 .min = 0,
				 .max = 1 },
	{ .name = "reason",
	  .type = TB_FT_STR,
	  .offset = offsetof(tb_verdict_t, reason),
	  .max = 4096 },
	{ .name = "ts",
	  .type = TB_FT_U64,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_verdict_t, ts),
	  .max = UINT64_MAX },
	{ .name = "duration_ms",
	  .type = TB_FT_U64,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_verdict_t, duration_ms),
	  .max = UINT64_MAX },
};
/* clang-format on */

const tb_schema_t tb_schema_verdict = {
	.name = "verdict",
	.size = sizeof(tb_verdict_t),
	.has_offset = offsetof(tb_verdict_t, has),
	.fields = verdict_fields,
	.nfields = sizeof(verdict_fields) / sizeof(verdict_fields[0]),
	.max_bytes = 16u << 10,
};
