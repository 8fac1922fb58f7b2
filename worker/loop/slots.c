/*
 * slots.c: a slot thread runs one attempt; its events go out through the producer.
 */
#include "loop_int.h"

#include "blackbox.h"

#include "tb/clock.h"
#include "tb/metrics.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int tb_loop_produce(tb_loop_t *w, const char *topic, const char *key, const void *bytes, size_t len,
		    tb_kafka_tracker_t *t, tb_error_t *err)
{
	int rc = 0;

	for (int i = 0; i < 600; i++) {
		rc = t ? tb_kafka_produce_tracked(w->producer, topic, key, bytes, len, t, err)
		       : tb_kafka_produce(w->producer, topic, key, bytes, len, err);
		if (rc != TB_ERETRY)
			break;
		rd_kafka_poll(w->producer, 100);
	}
	rd_kafka_poll(w->producer, 0);
	return rc;
}

/* The phase a job reached (read by liveness() and the heartbeats); the
 * sink's ud is the job. The short steps after the agent, where the
 * worker handles what the task left, are noted in the ledger as they
 * begin: a worker that dies in one of them every time is told apart from
 * one killed from outside (admit.c); the long ones (the agent, the
 * judges) are said by the heartbeats. A note is sent, not waited for. */
static void note_phase(void *ud, tb_phase_t phase)
{
	tb_job_t *j = ud;
	tb_error_t err;

	atomic_store(&j->run.phase, (int)phase + 1);
	tb_blackbox_phase(tb_phase_name(phase));
	if ((phase == TB_PHASE_SETTLED || phase == TB_PHASE_COLLECTED ||
	     phase == TB_PHASE_RECORDED) &&
	    tb_ledger_note(j->w->d->ledger, j->key, j->attempt, tb_phase_name(phase), &err) < 0)
		tb_info(j->key, "phase %s not said to the ledger: %s", tb_phase_name(phase),
			err.msg);
}

int tb_loop_publish_event(void *ud, const tb_event_t *ev, const void *bytes, size_t len,
			  tb_error_t *err)
{
	tb_job_t *j = ud;
	int rc = tb_loop_produce(j->w, j->w->d->cfg->kafka.events_topic, ev->task_id, bytes, len,
				 j->events, err);
	if (rc == 0)
		tb_metrics_events(1);
	return rc;
}

/* Every event so far delivered, and none lost since the attempt began:
 * the record's events before its done-marker (lifecycle.h). */
static int flush_events(void *ud, tb_error_t *err)
{
	tb_job_t *j = ud;
	return tb_kafka_await(j->w->producer, j->events, 30000, err);
}

/* The done-marker, from the slot, once the manifest is durable. */
static int mark_done(void *ud, const char *task, uint64_t attempt, const char *manifest_key,
		     tb_error_t *err)
{
	tb_ledger_t *l = ud;
	return tb_ledger_done(l, task, attempt, manifest_key, err);
}

static void *slot_main(void *arg)
{
	tb_job_t *j = arg;
	tb_loop_t *w = j->w;
	tb_task_t task;
	char group[160];

	snprintf(group, sizeof(group), "%s", w->d->group);
	tb_lifecycle_ctx_t ctx = {
		.session = j->session,
		.policy = w->d->policy,
		.pool = w->pool,
		.store = w->d->store,
		.ledger = w->d->ledger,
		.rates = w->rates,
		.recipes = w->d->recipes,
		.images = w->d->images,
		.input_cache = w->d->input_cache,
		.image_spans = w->d->image_spans,
		.runtimes_dir = w->d->cfg->runtimes_dir,
		.work_root = w->d->cfg->work_dir,
		.group = group,
		.slot = j->run.slot,
		.worker = w->d->worker_id,
		.received_ms = j->received_ms,
		.claimed_ms = j->claimed_ms,
		.sink = { tb_loop_publish_event, j, flush_events, note_phase },
		.recorded = mark_done,
		.recorded_ud = w->d->ledger,
		.cancel = &j->run.cancel,
	};
	/* a crash in this thread from now on is said against this attempt */
	tb_blackbox_enter(j->key, j->attempt);
	if ((j->run.rc = tb_msg_decode(&tb_schema_task, &task, j->value, j->len, &j->run.err)) ==
	    0) {
		tb_info(task.id, "attempt %llu starts in slot %u", (unsigned long long)j->attempt,
			j->run.slot);
		j->run.rc = tb_lifecycle_run(&ctx, &task, j->attempt, &j->run.res, &j->run.err);
		tb_msg_free(&tb_schema_task, &task);
	}
	tb_blackbox_enter(NULL, 0);
	pthread_mutex_lock(&w->lock);
	j->next = w->finished;
	w->finished = j;
	pthread_mutex_unlock(&w->lock);
	char b = 's';
	if (write(w->wake[1], &b, 1) < 0) { /* full: a wake-up is pending anyway */
	}
	return NULL;
}

int tb_loop_start_job(tb_loop_t *w, tb_job_t *j, tb_error_t *err)
{
	unsigned slot = 0;

	while (slot < w->d->cfg->slots && (w->busy_slots[slot / 64] >> (slot % 64) & 1))
		slot++;
	j->run.slot = slot;
	j->run.lease_ok = tb_mono_ms();
	atomic_store(&j->run.cancel, 0);
	atomic_store(&j->run.phase, 0);
	j->run.moved = 0;
	if (j->session) /* a new attempt replays the session from its start */
		tb_session_rewind(j->session);
	memset(&j->run.res, 0, sizeof(j->run.res));
	w->busy_slots[slot / 64] |= 1ull << (slot % 64);
	w->running++;
	if (pthread_create(&j->run.thread, NULL, slot_main, j) != 0) {
		w->busy_slots[slot / 64] &= ~(1ull << (slot % 64));
		w->running--;
		return tb_error_set(err, TB_EIO, "cannot start a slot thread");
	}
	j->run.next_running = w->running_jobs;
	w->running_jobs = j;
	return 0;
}
