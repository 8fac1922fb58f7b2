/*
 * message.c: the registry of message schemas, for consumers that read a
 * topic carrying more than one kind (tb_msg_peek) and for tools that take
 * a kind by name.
 */
#include "tb/codec.h"
#include "tb/schema_dlq.h"
#include "tb/schema_event.h"
#include "tb/schema_followup.h"
#include "tb/schema_manifest.h"
#include "tb/schema_task.h"
#include "tb/schema_verdict.h"

#include <stddef.h>

const tb_schema_t *const tb_schemas[] = {
	&tb_schema_task,
	&tb_schema_followup,
	&tb_schema_event,
	&tb_schema_verdict,
	&tb_schema_manifest,
	&tb_schema_dlq,
	NULL,
};
