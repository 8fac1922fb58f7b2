/*
 * schema_event.c: the field table of the event message (schemas/event.md).
 */
#include "tb/schema_event.h"

#include <stddef.h>

static const char *const event_types[] = {
	"phase", "message", "tool-call", "tool-result", "thought", "artifact", "verdict",
	"error", "egress",  "turn",      "result",      "usage",   NULL,
};

static const char *const phases[] = { "received", "validated", "claimed",     "prepared",
				      "running",  "settled",   "collected",   "judged",
				      "recorded", "torn-down", "acknowledged" };

const char *tb_phase_name(int phase)
{
	return phase >= 0 && phase < TB_PHASE__COUNT ? phases[phase] : NULL;
}

static const char *const event_sources[] = { "worker", "agent", NULL };

const char *tb_event_source_name(int source)
{
	return source >= 0 && source <= TB_SOURCE_AGENT ? event_sources[source] : NULL;
}

const char *tb_event_type_name(int type)
{
	return type >= 0 && type < TB_EV__COUNT ? event_types[type] : NULL;
}

/* clang-format off: one field per row reads as a table */
static const tb_field_t event_fields[] = {
	{ .name = "task_id",
	  .type = TB_FT_STR,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_event_t, task_id),
	  .min = 1,
	  .max = 128,
	  .check = tb_check_id },
	{ .name = "attempt",
	  .type = TB_FT_U64,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_event_t, attempt),
	  .min = 1,
	  .max = 1000 },
	{ .name = "seq",
	  .type = TB_FT_U64,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_event_t, seq),
	  .max = UINT32_MAX },
	{ .name = "ts",
	  .type = TB_FT_U64,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_event_t, ts),
	  .max = UINT64_MAX },
	{ .name = "type",
	  .type = TB_FT_ENUM,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_event_t, type),
	  .names = event_types },
	{ .name = "source",
	  .type = TB_FT_ENUM,
	  .offset = offsetof(tb_event_t, source),
	  .names = event_sources },
	{ .name = "payload",
	  .type = TB_FT_MAP,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_event_t, payload),
	  .max = TB_EVENT_PAYLOAD_MAX },
};
/* clang-format on */

const tb_schema_t tb_schema_event = {
	.name = "event",
	.size = sizeof(tb_event_t),
	.has_offset = offsetof(tb_event_t, has),
	.fields = event_fields,
	.nfields = sizeof(event_fields) / sizeof(event_fields[0]),
	.max_bytes = TB_EVENT_MAX_BYTES,
};
