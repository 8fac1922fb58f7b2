/*
 * schema_dlq.c: the field table of the DLQ record (schemas/dlq.md).
 */
#include "tb/schema_dlq.h"

#include <stddef.h>

const char *const tb_dlq_causes[] = {
	"malformed", "poison", "max-attempts", "orphan", NULL,
};

/* clang-format off: one field per row reads as a table */
static const tb_field_t attempt_fields[] = {
	{ .name = "worker",
	  .type = TB_FT_STR,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_dlq_attempt_t, worker),
	  .min = 1,
	  .max = 128 },
	{ .name = "attempt",
	  .type = TB_FT_U64,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_dlq_attempt_t, attempt),
	  .min = 1,
	  .max = 1000 },
	{ .name = "ts",
	  .type = TB_FT_U64,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_dlq_attempt_t, ts),
	  .max = UINT64_MAX },
	{ .name = "reason",
	  .type = TB_FT_STR,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_dlq_attempt_t, reason),
	  .min = 1,
	  .max = 4096 },
};
/* clang-format on */

static const tb_schema_t attempt_schema = {
	.name = "attempt",
	.size = sizeof(tb_dlq_attempt_t),
	.fields = attempt_fields,
	.nfields = 4,
};

/* clang-format off */
static const tb_field_t dlq_fields[] = {
	{.name = "task_id", .type = TB_FT_STR,
	 .offset = offsetof(tb_dlq_t, task_id), .min = 1, .max = 128,
	 .check = tb_check_id},
	{.name = "cause", .type = TB_FT_ENUM, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_dlq_t, cause), .names = tb_dlq_causes},
	{.name = "reason", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_dlq_t, reason), .min = 1, .max = 4096},
	{.name = "topic", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_dlq_t, topic), .min = 1, .max = 249},
	[TB_DLQ_F_PARTITION] = {.name = "partition", .type = TB_FT_U64,
	 .offset = offsetof(tb_dlq_t, partition), .max = INT32_MAX},
	[TB_DLQ_F_OFFSET] = {.name = "offset", .type = TB_FT_U64,
	 .offset = offsetof(tb_dlq_t, offset), .max = INT64_MAX},
	{.name = "ts", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_dlq_t, ts), .max = UINT64_MAX},
	{.name = "attempts", .type = TB_FT_LIST,
	 .offset = offsetof(tb_dlq_t, attempts), .max = 1000,
	 .sub = &attempt_schema},
	{.name = "original", .type = TB_FT_BIN, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_dlq_t, original), .max = TB_DLQ_ORIGINAL_READ_MAX},
};
/* clang-format on */

const tb_schema_t tb_schema_dlq = {
	.name = "dlq",
	.size = sizeof(tb_dlq_t),
	.has_offset = offsetof(tb_dlq_t, has),
	.fields = dlq_fields,
	.nfields = sizeof(dlq_fields) / sizeof(dlq_fields[0]),
	.max_bytes = TB_DLQ_ORIGINAL_READ_MAX + (1u << 20),
};
