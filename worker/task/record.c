/*
 * record.c: a run's events, as the worker stamps, records and sends them
 * (run_int.h). The conversation is kept twice while the attempt runs, both in
 * memfds: as the MessagePack record saved to the store (schemas/keys.md),
 * and as JSON lines for the judges' standard input. Nothing grows in the
 * worker's heap with the conversation's length.
 */
#include "run_int.h"

#include "tb/clock.h"
#include "tb/fault.h"
#include "tb/fsutil.h"
#include "tb/json_mpack.h"
#include "tb/metrics.h"
#include "tb/store_put_all.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Stamps, records and sends one event whose payload @p source wrote
 * (tb_event_source_t); takes ownership of payload. */
void tb_run_emit_from(tb_run_t *r, int source, int type, tb_bytes_t payload)
{
	tb_event_t ev = { 0 };
	msgpack_sbuffer sb;
	tb_error_t err;

	ev.task_id = r->task->id;
	ev.attempt = r->attempt;
	ev.seq = r->seq++;
	ev.ts = tb_wall_ms();
	ev.type = type;
	ev.source = source;
	TB_SET_HAS(&ev, TB_EVENT_F_SOURCE);
	ev.payload = payload;
	msgpack_sbuffer_init(&sb);
	if (tb_msg_encode(&sb, &tb_schema_event, &ev, &err) < 0) {
		/* Only an oversized payload can get here: say so instead. */
		free(payload.data);
		msgpack_sbuffer_destroy(&sb);
		r->seq--;
		tb_bytes_t e;
		if (type != TB_EV_ERROR && tb_agent_error_payload(&e, err.code, err.msg) == 0)
			tb_run_emit_from(r, TB_SOURCE_WORKER, TB_EV_ERROR, e);
		return;
	}
	if (tb_write_all(r->record_fd, sb.data, sb.size) < 0)
		r->failed = 1;
	if (r->ctx->sink.emit &&
	    r->ctx->sink.emit(r->ctx->sink.ud, &ev, sb.data, sb.size, &r->sink_err) < 0)
		r->failed = 1;
	free(payload.data);
	msgpack_sbuffer_destroy(&sb);
}

/* An event the worker wrote: everything but what the agent sent. */
void tb_run_emit(tb_run_t *r, int type, tb_bytes_t payload)
{
	tb_run_emit_from(r, TB_SOURCE_WORKER, type, payload);
}

/*
 * Brings the judges' JSON lines up to date with the record: each event as
 * {"type", "seq", "source", "payload"}. Done when a judge is about to read them, not
 * per event: a chatty agent's events cost one conversion less each on the
 * way out.
 */
int tb_run_sync_jsonl(tb_run_t *r, tb_error_t *err)
{
	off_t end = lseek(r->record_fd, 0, SEEK_END);
	size_t len = end > r->jsonl_from ? (size_t)(end - r->jsonl_from) : 0, off = 0;
	char *buf = len ? malloc(len) : NULL;
	int rc = 0;

	if (len && (!buf || pread(r->record_fd, buf, len, r->jsonl_from) != (ssize_t)len)) {
		free(buf);
		return tb_error_errno(err, TB_EIO, errno, "lifecycle: read the record");
	}
	while (off < len && rc == 0) {
		msgpack_unpacked u;
		size_t at = off;
		tb_event_t ev;
		json_t *pj = NULL;
		msgpack_unpacked_init(&u);
		if (msgpack_unpack_next(&u, buf, len, &off) != MSGPACK_UNPACK_SUCCESS) {
			msgpack_unpacked_destroy(&u);
			rc = tb_error_set(err, TB_EIO, "lifecycle: the record is corrupt at %zu",
					  at);
			break;
		}
		msgpack_unpacked_destroy(&u);
		if ((rc = tb_msg_decode(&tb_schema_event, &ev, buf + at, off - at, err)) < 0)
			break;
		/* a payload JSON cannot hold (an integer past int64) is left
		 * out of the judges' lines, not fatal: it is in the record */
		if (tb_mpack_to_json(&pj, ev.payload.data, ev.payload.len, err) == 0) {
			/* no source is unknown, never worker (schemas/event.md) */
			const char *source =
			    TB_HAS(&ev, TB_EVENT_F_SOURCE) ? tb_event_source_name(ev.source) : NULL;
			json_t *line =
			    json_pack("{s:s,s:I,s:s*,s:O}", "type", tb_event_type_name(ev.type),
				      "seq", (json_int_t)ev.seq, "source", source, "payload", pj);
			char *text =
			    line ? json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
			if (!text || tb_write_all(r->jsonl_fd, text, strlen(text)) < 0 ||
			    tb_write_all(r->jsonl_fd, "\n", 1) < 0)
				rc = tb_error_errno(err, TB_EIO, errno, "lifecycle: JSON lines");
			free(text);
			json_decref(line);
			json_decref(pj);
		}
		tb_msg_free(&tb_schema_event, &ev);
	}
	free(buf);
	if (rc == 0)
		r->jsonl_from = end;
	return rc;
}

/* Emits an event whose payload is built from a JSON object (consumed). */
void tb_run_emit_json(tb_run_t *r, int type, json_t *obj)
{
	msgpack_sbuffer sb;
	tb_error_t err;

	msgpack_sbuffer_init(&sb);
	if (obj && tb_json_to_mpack(&sb, obj, &err) == 0) {
		tb_bytes_t p = { sb.size, (uint8_t *)msgpack_sbuffer_release(&sb) };
		tb_run_emit(r, type, p);
	} else {
		msgpack_sbuffer_destroy(&sb);
		r->failed = 1;
	}
	json_decref(obj);
}

/* The task's labels into event payload @p p (none: no key), as task.md
 * promises: on every phase up to torn-down, and on the result. */
void tb_run_add_labels(const tb_run_t *r, json_t *p)
{
	const tb_strmap_t *l = &r->task->labels;
	json_t *o;

	if (!p || !l->n || !(o = json_object()))
		return;
	for (size_t i = 0; i < l->n; i++)
		json_object_set_new(o, l->items[i].key, json_string(l->items[i].value));
	json_object_set_new(p, "labels", o);
}

/* Phase @p ph, reached at @p at (ms): the previous phase took the rest. */
void tb_run_phase_at(tb_run_t *r, tb_phase_t ph, uint64_t at, const char *worker)
{
	const char *name = tb_phase_name(ph);
	uint64_t took = at > r->phase_ms ? at - r->phase_ms : 0;
	json_t *p = json_pack("{s:s,s:I}", "phase", name, "duration_ms", (json_int_t)took);

	if (p && worker)
		json_object_set_new(p, "worker", json_string(worker));
	tb_run_add_labels(r, p);
	if (p && r->phase_image)
		json_object_set_new(p, "environment", r->phase_image);
	else
		json_decref(r->phase_image);
	r->phase_image = NULL;
	if (p && r->phase_usage)
		json_object_set_new(p, "usage", r->phase_usage);
	else
		json_decref(r->phase_usage);
	r->phase_usage = NULL;
	tb_run_emit_json(r, TB_EV_PHASE, p);
	tb_metrics_phase(ph, took);
	if (r->ctx->sink.phase)
		r->ctx->sink.phase(r->ctx->sink.ud, ph);
	/* The manifest keeps the phases up to "recorded", the last before
	 * it is written. */
	if (r->m.phases.items && r->m.phases.n < TB_RUN_MAX_PHASES && !r->recorded_phase) {
		tb_phase_time_t *t = (tb_phase_time_t *)r->m.phases.items + r->m.phases.n;
		if ((t->name = strdup(name))) {
			t->at = at;
			t->duration_ms = took;
			r->m.phases.n++;
		}
	}
	r->recorded_phase |= ph == TB_PHASE_RECORDED;
	r->phase_ms = at > r->phase_ms ? at : r->phase_ms;
	tb_fault_point(name);
}

/* TB_EFENCED if the run was told to stop (its lease is lost). */
int tb_run_cancelled(const tb_run_t *r, tb_error_t *err)
{
	if (r->ctx->cancel && atomic_load(r->ctx->cancel))
		return tb_error_set(err, TB_EFENCED,
				    "the lease on this attempt was lost: stopped, nothing written");
	return 0;
}

void tb_run_phase(tb_run_t *r, tb_phase_t ph)
{
	tb_run_phase_at(r, ph, tb_wall_ms(), NULL);
}

/* An error event, said to have happened in phase @p ph. */
void tb_run_error_event(tb_run_t *r, int code, tb_phase_t ph, const char *reason)
{
	tb_run_emit_json(r, TB_EV_ERROR,
			 json_pack("{s:s,s:s,s:s}", "code", tb_error_name(code), "reason", reason,
				   "phase", tb_phase_name(ph)));
}

/* Pacing the agent's events: wait for a token rather than buffer; the
 * agent's writes (or its posts, once the proxy's queue is full) wait
 * meanwhile, so a flood costs it time, not the worker memory. */
void tb_run_pace(tb_run_t *r)
{
	uint64_t wait;
	while ((wait = tb_rate_take(&r->rate, tb_wall_ms())) > 0)
		usleep((useconds_t)(wait * 1000));
}

/* Egress records become events here, on the lifecycle's thread. */
static void emit_egress(void *ud, json_t *payload)
{
	tb_run_emit_json(ud, TB_EV_EGRESS, payload);
}

/* An event the agent posted through the proxy (POST /_taskbox/events),
 * parsed there as fd 3's lines are: emitted as one of them would be. */
static void emit_posted(void *ud, int type, tb_bytes_t payload)
{
	tb_run_pace(ud);
	tb_run_emit_from(ud, TB_SOURCE_AGENT, type, payload);
}

/* Paced by the run's event rate, as the agent's events are (a loop of
 * refused requests must not flood the events topic); what finds no room
 * is summarised per status (tb_egress_drain). @p last: the proxy is
 * stopped, every summary goes out now. */
void tb_run_egress_flush(tb_run_t *r, tb_phase_t ph, int last)
{
	char why[128];
	uint64_t dropped =
	    tb_egress_drain(r->egress, &r->rate, tb_wall_ms(), last, emit_egress, emit_posted, r);
	if (dropped) {
		snprintf(why, sizeof(why), "%llu egress records dropped: over %d waiting",
			 (unsigned long long)dropped, TB_EGRESS_QUEUE_MAX);
		tb_run_error_event(r, TB_ETOOBIG, ph, why);
	}
}

/* The conversation record and the verdicts, side by side: all durable
 * before the manifest that names them; the egress recording too. */
int tb_run_put_record(tb_run_t *r, const char *key, tb_error_t *err)
{
	size_t n = r->m.verdicts.n;
	tb_store_put_item_t *items = calloc(n + 2, sizeof(*items));
	int rc;

	if (!items)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	items[0] = (tb_store_put_item_t){ key, r->record_fd, NULL, 0 };
	for (size_t i = 0; i < n; i++)
		items[i + 1] =
		    (tb_store_put_item_t){ ((const tb_verdict_ref_t *)r->m.verdicts.items)[i].key,
					   -1, r->verdicts[i].data, r->verdicts[i].size };
	n += tb_run_recording_item(r, key, &items[n + 1]);
	rc = tb_store_put_all(r->ctx->store, items, n + 1, err);
	free(items);
	return rc;
}
