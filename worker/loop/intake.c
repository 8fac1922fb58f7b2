/*
 * intake.c: peek the kind, decode it with its schema, or build the DLQ
 * record. The reason string is the decoder's, which names the field.
 */
#include "intake.h"

#include <stdlib.h>
#include <string.h>

static char *dup_n(const void *p, size_t n)
{
	char *s = malloc(n + 1);
	if (s) {
		if (n)
			memcpy(s, p, n);
		s[n] = '\0';
	}
	return s;
}

int tb_intake_dead_letter(tb_dlq_t *out, int cause, const char *reason, const char *task_id,
			  const void *value, size_t len, const tb_msg_origin_t *origin,
			  uint64_t now_ms)
{
	size_t keep = len > TB_DLQ_ORIGINAL_MAX ? TB_DLQ_ORIGINAL_MAX : len;
	char why[64];

	memset(out, 0, sizeof(*out));
	out->cause = cause;
	out->ts = now_ms;
	/* The record must pass its own schema: reason 1..4096 bytes, topic
	 * 1..249, task id only if it is a valid id (a garbage key must not
	 * make the DLQ refuse its own record). */
	out->reason =
	    reason && reason[0] ? dup_n(reason, strnlen(reason, 4096)) : dup_n("unknown", 7);
	out->topic = dup_n(origin->topic, strnlen(origin->topic, 249));
	out->original.data = malloc(keep ? keep : 1);
	out->original.len = keep;
	if (!out->reason || !out->topic || !out->original.data)
		goto nomem;
	if (keep)
		memcpy(out->original.data, value, keep);
	if (origin->partition >= 0) {
		out->partition = (uint64_t)origin->partition;
		TB_SET_HAS(out, TB_DLQ_F_PARTITION);
	}
	if (origin->offset >= 0) {
		out->offset = (uint64_t)origin->offset;
		TB_SET_HAS(out, TB_DLQ_F_OFFSET);
	}
	if (task_id && task_id[0] && strlen(task_id) <= 128 &&
	    tb_check_id(task_id, why, sizeof(why)) == 0 &&
	    !(out->task_id = dup_n(task_id, strlen(task_id))))
		goto nomem;
	return 0;
nomem:
	tb_msg_free(&tb_schema_dlq, out);
	return TB_ENOMEM;
}

int tb_intake_decode(tb_intake_t *out, const void *value, size_t len, const tb_msg_origin_t *origin,
		     uint64_t now_ms)
{
	const tb_schema_t *schema = NULL;
	tb_error_t err;
	char *key = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = tb_msg_peek(&schema, value, len, &err);
	if (rc == 0 && schema == &tb_schema_task) {
		rc = tb_msg_decode(schema, &out->task, value, len, &err);
		out->kind = TB_INTAKE_TASK;
	} else if (rc == 0 && schema == &tb_schema_followup) {
		rc = tb_msg_decode(schema, &out->followup, value, len, &err);
		out->kind = TB_INTAKE_FOLLOWUP;
	} else if (rc == 0) {
		rc =
		    tb_error_set(&err, TB_EINVAL,
				 "a '%s' message does not belong on the tasks topic", schema->name);
	}
	if (rc == 0)
		return 0;
	if (rc == TB_ENOMEM)
		return rc;
	/* Not a task nor a follow-up we can read: dead-letter it, naming the
	 * producer's key as the task id when it is a valid id. */
	if (origin->key && origin->key_len && !(key = dup_n(origin->key, origin->key_len)))
		return TB_ENOMEM;
	if (key && strlen(key) != origin->key_len) { /* NUL inside the key */
		free(key);
		key = NULL;
	}
	out->kind = TB_INTAKE_DEAD;
	rc = tb_intake_dead_letter(&out->dlq, TB_DLQ_MALFORMED, err.msg, key, value, len, origin,
				   now_ms);
	free(key);
	return rc;
}

void tb_intake_free(tb_intake_t *in)
{
	if (!in)
		return;
	tb_msg_free(&tb_schema_task, &in->task);
	tb_msg_free(&tb_schema_followup, &in->followup);
	tb_msg_free(&tb_schema_dlq, &in->dlq);
}
