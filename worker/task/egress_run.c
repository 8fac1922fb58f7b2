/*
 * egress_run.c: the attempt's way out (run_int.h): its proxy, started with
 * the attempt's budgets and the worker's rate limits; when one of the
 * runtime's endpoints records, the egress recording (recording.h,
 * schemas/recording.md) it keeps in memory until it is stored beside the
 * conversation record; and when the task replays an earlier one
 * (replay_from), that task's recording, for the proxy to answer from.
 */
#include "inputs.h"
#include "recording.h"
#include "replay.h"
#include "run_int.h"

#include "tb/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int any_records(const tb_runtime_t *rt)
{
	for (size_t i = 0; i < rt->endpoints.n; i++)
		if (((const tb_endpoint_t *)rt->endpoints.items)[i].record)
			return 1;
	return 0;
}

/* The recording, with the task in its header (what a replay re-runs). */
static int recording_start(tb_run_t *r, tb_error_t *err)
{
	msgpack_sbuffer sb;
	int fd, rc;

	if (!any_records(&r->rt))
		return 0;
	if ((fd = memfd_create("taskbox-egress-recording", MFD_CLOEXEC)) < 0)
		return tb_error_errno(err, TB_EIO, errno, "egress recording: memfd");
	msgpack_sbuffer_init(&sb);
	if ((rc = tb_msg_encode(&sb, &tb_schema_task, r->task, err)) == 0) {
		tb_bytes_t task = { sb.size, (uint8_t *)sb.data };
		rc = tb_recorder_new(&r->recorder, fd, &r->rt.recording, r->task->id, r->attempt,
				     &task, err);
	}
	msgpack_sbuffer_destroy(&sb);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	r->rec_fd = fd;
	return 0;
}

#define REPLAY_MAX_BYTES (1u << 30) /* a recording a replay reads, at most */

/* The manifest key of the attempt the task replays: the one it names, or
 * the one its replay_from task's done-marker names. */
static int replayed_manifest(tb_run_t *r, char *key, size_t len, tb_error_t *err)
{
	const tb_task_t *t = r->task;
	tb_ledger_task_t lt;
	int rc;

	if (TB_HAS(&t->replay, TB_REPLAY_ATTEMPT)) {
		snprintf(key, len, "tasks/%s/%llu/manifest.msgpack", t->replay_from,
			 (unsigned long long)t->replay.attempt);
		return 0;
	}
	if ((rc = tb_inputs_task_done(r->ctx->ledger, t->replay_from, &lt, err)) == 0) {
		snprintf(key, len, "%s", lt.manifest);
		return 0;
	}
	/* not done (the loop waited for it: it went back), or dead-lettered */
	if (rc != TB_EBUSY && rc != TB_ENOTFOUND)
		return rc;
	tb_error_prefix(err, "replay_from");
	return err->code = rc == TB_EBUSY ? TB_ERETRY : TB_EPOISON;
}

/* @p err, about @p what, made the replay's poison. */
static int poison(tb_error_t *err, const char *what)
{
	tb_error_prefix(err, "replay_from: %s", what);
	return err->code = TB_EPOISON;
}

/* The recording the task replays, read, into r->replay. */
static int replay_load(tb_run_t *r, tb_error_t *err)
{
	const tb_task_t *t = r->task;
	tb_manifest_t m;
	tb_recording_t rec;
	char key[700], from[200], *bytes = NULL;
	size_t len;
	int rc;

	if (!t->replay_from)
		return 0;
	if ((rc = replayed_manifest(r, key, sizeof(key), err)) < 0)
		return rc;
	if ((rc = tb_store_get_bytes(r->ctx->store, key, 8u << 20, &bytes, &len, err)) < 0)
		return rc == TB_ENOTFOUND
			   ? tb_error_set(err, TB_EPOISON,
					  "replay_from: task %s has no manifest at %s: that "
					  "attempt did not finish",
					  t->replay_from, key)
			   : rc;
	rc = tb_msg_decode(&tb_schema_manifest, &m, bytes, len, err);
	free(bytes);
	if (rc < 0)
		return poison(err, key);
	snprintf(from, sizeof(from), "task %s attempt %llu", t->replay_from,
		 (unsigned long long)m.attempt);
	if (!m.recording_key) {
		tb_msg_free(&tb_schema_manifest, &m);
		return tb_error_set(err, TB_EPOISON,
				    "replay_from: %s has no egress recording: its runtime "
				    "recorded no endpoint (\"record\": true)",
				    from);
	}
	rc =
	    tb_store_get_bytes(r->ctx->store, m.recording_key, REPLAY_MAX_BYTES, &bytes, &len, err);
	tb_msg_free(&tb_schema_manifest, &m);
	if (rc < 0)
		return rc == TB_ENOTFOUND || rc == TB_ETOOBIG ? poison(err, from) : rc;
	rc = tb_recording_read(&rec, bytes, len, err);
	free(bytes);
	if (rc < 0)
		return poison(err, from);
	return tb_replay_new(&r->replay, &rec, &t->replay, from, err);
}

int tb_run_egress_start(tb_run_t *r, const tb_limits_t *lim, tb_error_t *err)
{
	int rc = replay_load(r, err);
	if (rc < 0 || (rc = recording_start(r, err)) < 0)
		return rc;
	tb_egress_conf_t ec = {
		.rt = &r->rt,
		.budget = lim,
		.rates = r->ctx->rates,
		.netns_of = tb_sandbox_init_pid(r->sb),
		.task_id = r->task->id,
		.attempt = r->attempt,
		.expires_ms = tb_wall_ms() + lim->wall_seconds * 1000 + 60000,
		.recorder = r->recorder,
		.replay = r->replay,
	};
	return tb_egress_start(&r->egress, &ec, err);
}

int tb_run_recording_item(tb_run_t *r, const char *conversation_key, tb_store_put_item_t *item)
{
	const char *slash = strrchr(conversation_key, '/');
	int dir = slash ? (int)(slash - conversation_key) + 1 : 0;
	char *key = NULL;

	if (!r->recorder)
		return 0;
	if (asprintf(&key, "%.*segress.msgpack", dir, conversation_key) < 0)
		abort(); /* out of memory: docs/architecture.md, "Conventions" */
	free(r->m.recording_key);
	r->m.recording_key = key;
	*item = (tb_store_put_item_t){ key, r->rec_fd, NULL, 0 };
	return 1;
}

void tb_run_egress_free(tb_run_t *r)
{
	tb_egress_free(r->egress); /* stops the proxy first: nothing records any more */
	r->egress = NULL;
	if (r->recorder) {
		tb_recorder_free(r->recorder);
		close(r->rec_fd);
	}
	r->recorder = NULL;
	tb_replay_free(r->replay);
	r->replay = NULL;
}
