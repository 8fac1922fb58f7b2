/*
 * schema_followup.c: the field table of the follow-up message
 * (schemas/followup.md) and its one cross-field rule.
 */
#include "tb/schema_followup.h"

#include "tb/schema_task.h"

#include <stddef.h>

static const char *const followup_kinds[] = { "prompt", "end", NULL };

static int followup_check(const void *obj, tb_error_t *err)
{
	const tb_followup_t *f = obj;

	if (f->kind == TB_FOLLOWUP_PROMPT && !f->text)
		return tb_error_set(err, TB_EINVAL, "field 'text': required when kind is 'prompt'");
	if (f->kind == TB_FOLLOWUP_END && f->text)
		return tb_error_set(err, TB_EINVAL, "field 'text': not allowed when kind is 'end'");
	return 0;
}

/* clang-format off: one field per row reads as a table */
static const tb_field_t followup_fields[] = {
	{ .name = "task_id",
	  .type = TB_FT_STR,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_followup_t, task_id),
	  .min = 1,
	  .max = 128,
	  .check = tb_check_id },
	{ .name = "seq",
	  .type = TB_FT_U64,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_followup_t, seq),
	  .min = 1,
	  .max = 1000000 },
	{ .name = "kind",
	  .type = TB_FT_ENUM,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_followup_t, kind),
	  .names = followup_kinds },
	{ .name = "text",
	  .type = TB_FT_STR,
	  .offset = offsetof(tb_followup_t, text),
	  .max = TB_PROMPT_MAX_BYTES },
	{ .name = "sent_at",
	  .type = TB_FT_U64,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_followup_t, sent_at),
	  .max = UINT64_MAX },
};
/* clang-format on */

const tb_schema_t tb_schema_followup = {
	.name = "followup",
	.size = sizeof(tb_followup_t),
	.has_offset = offsetof(tb_followup_t, has),
	.fields = followup_fields,
	.nfields = sizeof(followup_fields) / sizeof(followup_fields[0]),
	.check = followup_check,
	.max_bytes = TB_TASK_MAX_BYTES,
};
