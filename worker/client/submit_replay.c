/*
 * submit_replay.c: the task `taskbox submit --replay-from TASK` sends: the
 * earlier task as its egress recording keeps it (schemas/recording.md,
 * its header's "task"), under a new id, replaying that recording
 * (schemas/task.md, "Replay"), on another commit when one is given.
 */
#include "submit_replay.h"

#include "recording.h"
#include "tb/json_mpack.h"
#include "tb/schema_manifest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RECORDING_MAX (1u << 30)

/* The manifest key of the attempt to replay, into @p key. */
static int manifest_key(tb_ledger_t *l, const submit_replay_t *q, char *key, size_t len,
			tb_error_t *err)
{
	tb_ledger_task_t t;
	int rc;

	if (q->attempt) {
		snprintf(key, len, "tasks/%s/%llu/manifest.msgpack", q->from,
			 (unsigned long long)q->attempt);
		return 0;
	}
	if ((rc = tb_ledger_inspect(l, q->from, &t, err)) < 0)
		return rc;
	if (!t.done || !t.manifest[0])
		return tb_error_set(err, TB_ENOTFOUND,
				    "task %s is not done%s: replay a done task, or name the "
				    "attempt (--replay-attempt)",
				    q->from, t.done ? " (it was dead-lettered)" : "");
	snprintf(key, len, "%s", t.manifest);
	return 0;
}

/* The recording of the attempt the manifest at @p key describes, read. */
static int recording_of(tb_store_t *s, const char *key, tb_recording_t *rec, uint64_t *attempt,
			tb_error_t *err)
{
	tb_manifest_t m;
	char *bytes;
	size_t len;
	int rc;

	if ((rc = tb_store_get_bytes(s, key, 8u << 20, &bytes, &len, err)) < 0)
		return rc;
	rc = tb_msg_decode(&tb_schema_manifest, &m, bytes, len, err);
	free(bytes);
	if (rc < 0)
		return rc;
	*attempt = m.attempt;
	if (!m.recording_key) {
		tb_error_set(err, TB_ENOTFOUND,
			     "%s names no egress recording: its runtime recorded no endpoint "
			     "(\"record\": true)",
			     key);
		tb_msg_free(&tb_schema_manifest, &m);
		return TB_ENOTFOUND;
	}
	rc = tb_store_get_bytes(s, m.recording_key, RECORDING_MAX, &bytes, &len, err);
	tb_msg_free(&tb_schema_manifest, &m);
	if (rc < 0)
		return rc;
	rc = tb_recording_read(rec, bytes, len, err);
	free(bytes);
	if (rc == 0 && !rec->task) {
		tb_recording_free(rec);
		return tb_error_set(err, TB_EINVAL, "the recording keeps no task");
	}
	return rc;
}

json_t *tb_submit_replay_doc(tb_ledger_t *l, tb_store_t *s, const submit_replay_t *q,
			     tb_error_t *err)
{
	tb_recording_t rec;
	uint64_t attempt = 0;
	char key[700];
	json_t *doc = NULL;

	if (manifest_key(l, q, key, sizeof(key), err) < 0 ||
	    recording_of(s, key, &rec, &attempt, err) < 0)
		return NULL;
	int rc = tb_mpack_to_json(&doc, rec.task, rec.task_len, err);
	tb_recording_free(&rec);
	if (rc < 0 || !json_is_object(doc)) {
		json_decref(doc);
		if (rc == 0)
			tb_error_set(err, TB_EINVAL, "the recording's task is not a map");
		return NULL;
	}
	/* a new task: its own id and time; the same questions */
	json_object_del(doc, "id");
	json_object_del(doc, "submitted_at");
	json_object_set_new(doc, "replay_from", json_string(q->from));
	json_t *how = json_pack("{s:I}", "attempt", (json_int_t)attempt);
	if (q->mode)
		json_object_set_new(how, "mode", json_string(q->mode));
	if (q->pace)
		json_object_set_new(how, "pace", json_string(q->pace));
	json_object_set_new(doc, "replay", how);
	if (q->commit)
		json_object_set_new(json_object_get(doc, "recipe"), "commit",
				    json_string(q->commit));
	return doc;
}
