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
#include <stdlib.h>

const tb_schema_t *const tb_schemas[] = {
	&tb_schema_task,
	&tb_schema_followup,
	&tb_schema_event,
	&tb_schema_verdict,
	&tb_schema_manifest,
	&tb_schema_dlq,
	NULL,
};

int tb_msg_canonical(msgpack_sbuffer *out, const void *data, size_t len, tb_error_t *err)
{
	const tb_schema_t *schema;
	void *msg;
	int rc;

	if ((rc = tb_msg_peek(&schema, data, len, err)) < 0)
		return rc;
	if (!(msg = calloc(1, schema->size)))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	if ((rc = tb_msg_decode(schema, msg, data, len, err)) == 0)
		rc = tb_msg_encode(out, schema, msg, err);
	tb_msg_free(schema, msg);
	free(msg);
	return rc;
}
