/*
 * submit.c: a task checked, encoded and put on the tasks topic (submit.h).
 */
#include "submit.h"
#include "client_int.h"

#include "tb/json_mpack.h"
#include "tb/schema_task.h"

#include <stdio.h>

int tb_submit_encode(const json_t *doc, msgpack_sbuffer *out, char *id, size_t idlen,
		     tb_error_t *err)
{
	msgpack_sbuffer raw;
	tb_task_t task;
	int rc;

	msgpack_sbuffer_init(&raw);
	/* decoded as the worker decodes it: the checks are the schema's */
	if ((rc = tb_json_to_mpack(&raw, doc, err)) == 0 &&
	    (rc = tb_msg_decode(&tb_schema_task, &task, raw.data, raw.size, err)) == 0) {
		rc = tb_msg_encode(out, &tb_schema_task, &task, err);
		snprintf(id, idlen, "%s", task.id);
		tb_msg_free(&tb_schema_task, &task);
	}
	msgpack_sbuffer_destroy(&raw);
	if (rc < 0)
		err->code = TB_EINVAL;
	return rc < 0 ? TB_EINVAL : 0;
}

int tb_submit_send(const tb_config_t *cfg, const char *id, const void *data, size_t len,
		   tb_error_t *err)
{
	return tb_client_produce(cfg, cfg->kafka.tasks_topic, id, data, len, err);
}
