/*
 * egress_run.c: the attempt's way out (run.h): its proxy, started with
 * the attempt's budgets and the worker's rate limits, and, when one of
 * the runtime's endpoints records, the egress recording (recording.h,
 * schemas/recording.md) it keeps in memory until it is stored beside the
 * conversation record.
 */
#include "recording.h"
#include "run.h"

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

int tb_run_egress_start(tb_run_t *r, const tb_limits_t *lim, tb_error_t *err)
{
	int rc = recording_start(r, err);
	if (rc < 0)
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
		abort(); /* out of memory: STYLE.md */
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
}
