/*
 * settle.c: what becomes of a finished attempt, and the DLQ.
 */
#include "loop_int.h"

#include "tb/clock.h"
#include "tb/fault.h"
#include "tb/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tb_loop_dead_letter(tb_loop_t *w, tb_dlq_t *rec, tb_kafka_tracker_t *t, int wait_ms)
{
	tb_kafka_tracker_t *own = t ? NULL : tb_kafka_tracker_new();
	msgpack_sbuffer sb;
	tb_error_t err;
	int rc = 0, sent = 0;

	if (!t && !(t = own))
		abort(); /* out of memory */
	msgpack_sbuffer_init(&sb);
	if (tb_kafka_tracker_pending(t) == 0 && tb_kafka_tracker_delivered(t) == 0) {
		tb_kafka_tracker_reset(t); /* an earlier copy failed: this one counts */
		if ((rc = tb_msg_encode(&sb, &tb_schema_dlq, rec, &err)) == 0 &&
		    (rc = tb_loop_produce(w, w->d->cfg->kafka.dlq_topic, rec->task_id, sb.data,
					  sb.size, t, &err)) == 0)
			sent = 1;
	}
	/* in short waits: the main thread's heartbeats go on meanwhile, so
	 * running tasks keep their leases */
	int slice = wait_ms < 500 ? wait_ms : 500;
	for (int waited = 0; rc == 0 && sent; waited += slice) {
		if ((rc = tb_kafka_await(w->producer, t, slice, &err)) != TB_ERETRY ||
		    tb_kafka_tracker_pending(t) == 0 || waited + slice >= wait_ms)
			break;
		rc = 0;
		tb_loop_heartbeat(w);
	}
	if (tb_kafka_tracker_delivered(t) > 0)
		rc = 0; /* a copy is in, whatever else became of the others */
	else if (rc == 0 && !sent)
		rc = tb_error_set(&err, TB_ERETRY, "its DLQ record is still on its way");
	tb_kafka_tracker_release(own);
	msgpack_sbuffer_destroy(&sb);
	if (rc < 0) {
		tb_err(rec->task_id, "dead-lettering failed: %s", err.msg);
		return rc;
	}
	tb_warn(rec->task_id, "dead-lettered (%s): %s", tb_dlq_causes[rec->cause], rec->reason);
	w->stats->dead++;
	tb_metrics_dlq(tb_dlq_causes[rec->cause]);
	return 0;
}

/* A task's DLQ record, with every attempt's reason from the ledger. */
static int dead_letter_task(tb_loop_t *w, tb_job_t *j, int cause, const char *reason, int history)
{
	tb_msg_origin_t origin = { w->d->cfg->kafka.tasks_topic, j->partition, j->offset, NULL, 0 };
	tb_ledger_attempt_t *hist = NULL;
	size_t n = 0;
	tb_dlq_t rec;
	tb_error_t err;

	if (tb_intake_dead_letter(&rec, cause, reason, j->key, j->value, j->len, &origin,
				  tb_wall_ms()) < 0)
		abort(); /* out of memory */
	if (history && tb_ledger_history(w->d->ledger, j->key, &hist, &n, &err) == 0 && n) {
		tb_dlq_attempt_t *a = calloc(n, sizeof(*a));
		for (size_t i = 0; a && i < n; i++) {
			a[i].worker = strdup(hist[i].worker);
			a[i].attempt = hist[i].attempt;
			a[i].ts = hist[i].ts;
			a[i].reason = strdup(hist[i].reason[0] ? hist[i].reason : "unknown");
		}
		if (a) {
			rec.attempts.items = a;
			rec.attempts.n = n;
		}
	}
	free(hist);
	if (!j->dlq && !(j->dlq = tb_kafka_tracker_new()))
		abort(); /* out of memory */
	int rc = tb_loop_dead_letter(w, &rec, j->dlq, DLQ_WAIT_MS);
	tb_msg_free(&tb_schema_dlq, &rec);
	return rc;
}

/* The follow-ups an interactive task's job held, once its message is
 * finished: those its recorded attempt took finish with it; one it did
 * not take (the session ended first) is dead-lettered; when no attempt
 * was recorded here (dead-lettered, or found done), the ledger decides as
 * for any follow-up without a session. The task's message delivered
 * again, held too, finishes. A follow-up whose DLQ record cannot be
 * written yet is tried again (tb_loop_redo_message). */
static void settle_followups(tb_loop_t *w, tb_job_t *j)
{
	int recorded = j->run.rc == 0 && j->run.res.manifest_key[0];
	size_t n = tb_session_count(j->session);
	int64_t holds[64];
	tb_error_t err;

	for (size_t i = 0; i < n; i++) {
		uint64_t seq;
		int64_t off;
		const void *raw;
		size_t len;
		tb_followup_t f;
		tb_session_item(j->session, i, &seq, &off, &raw, &len);
		if (!(recorded && seq <= j->run.res.followups) &&
		    tb_msg_decode(&tb_schema_followup, &f, raw, len, &err) == 0) {
			tb_msg_origin_t origin = { w->d->cfg->kafka.tasks_topic, j->partition, off,
						   j->key, strlen(j->key) };
			tb_job_t *r = tb_loop_redo_job(w, j->partition, off, j->epoch);
			char why[256];
			snprintf(
			    why, sizeof(why),
			    "follow-up %llu: the session ended before it took it (it took %llu)",
			    (unsigned long long)seq, (unsigned long long)j->run.res.followups);
			tb_loop_settled(
			    w, r,
			    recorded
				? tb_loop_refuse(w, &f, raw, len, &origin, why, r->dlq, DLQ_WAIT_MS)
				: tb_loop_orphan(w, &f, raw, len, &origin, r->dlq, DLQ_WAIT_MS),
			    raw, len, j->key, strlen(j->key));
			tb_msg_free(&tb_schema_followup, &f);
		} else if (tb_watermark_finish(w->marks[j->partition], off, &err) == 0) {
			w->finished_messages++;
		}
	}
	size_t nh = tb_session_holds(j->session, holds, 64);
	for (size_t i = 0; i < nh; i++)
		if (tb_watermark_finish(w->marks[j->partition], holds[i], &err) == 0)
			w->finished_messages++;
}

void tb_loop_acknowledge(tb_loop_t *w, tb_job_t *j)
{
	tb_error_t err;

	if (!tb_loop_ours(w, j) || tb_watermark_finish(w->marks[j->partition], j->offset, &err) < 0)
		return; /* not ours any more: the new owner acknowledges it */
	w->finished_messages++;
	if (j->session)
		settle_followups(w, j);
	if (j->run.res.events) {
		tb_event_sink_t sink = { tb_loop_publish_event, j, NULL, NULL };
		if (tb_lifecycle_acknowledged(&sink, j->key, j->attempt, j->run.res.events,
					      j->run.res.last_ms, &err) < 0)
			tb_warn(j->key, "no acknowledged event: %s", err.msg);
	}
	tb_fault_point(tb_phase_name(TB_PHASE_ACKNOWLEDGED));
}

int tb_loop_give_up(tb_loop_t *w, tb_job_t *j, int cause, const char *reason)
{
	tb_ledger_t *l = w->d->ledger;
	tb_error_t err;
	int rc;

	if ((rc = dead_letter_task(w, j, cause, reason, 1)) < 0)
		return rc;
	tb_metrics_task("dead-lettered");
	if (tb_ledger_done(l, j->key, j->attempt, "", &err) < 0)
		tb_warn(j->key, "no done-marker for the dead letter: %s", err.msg);
	return 0;
}

int tb_loop_refuse_task(tb_loop_t *w, tb_job_t *j, const char *reason)
{
	int rc = dead_letter_task(w, j, TB_DLQ_POISON, reason, 0);

	if (rc == 0)
		tb_metrics_task("dead-lettered");
	return rc;
}

void tb_loop_keep_failure(tb_loop_t *w, tb_job_t *j, int code, const char *reason)
{
	tb_ledger_t *l = w->d->ledger;
	tb_error_t err;

	if (tb_ledger_failed(l, j->key, j->attempt, code, reason, &err) == 0) {
		j->run.failure_unkept = 0;
		return;
	}
	tb_warn(j->key, "the ledger did not keep this failure yet: %s", err.msg);
	if (reason != j->run.err.msg)
		snprintf(j->run.err.msg, sizeof(j->run.err.msg), "%s", reason);
	j->run.err.code = code;
	j->run.failure_unkept = 1;
}

/* Back in line after @p pause, if the message is still ours. */
uint64_t tb_loop_retry_pause(unsigned failures)
{
	uint64_t pause = (uint64_t)RETRY_BACKOFF_MS << (failures < 6 ? failures : 6);

	return pause < RETRY_BACKOFF_MAX_MS ? pause : RETRY_BACKOFF_MAX_MS;
}

static void retry_later(tb_loop_t *w, tb_job_t *j, uint64_t pause)
{
	if (!tb_loop_ours(w, j)) {
		tb_info(j->key, "its partition moved: left to the new owner");
		tb_loop_let_go(w, j);
		return;
	}
	j->wait.backoff = WAIT_BACKOFF_MIN_MS;
	tb_loop_wait_for(w, j, pause < RETRY_BACKOFF_MAX_MS ? pause : RETRY_BACKOFF_MAX_MS);
}

void tb_loop_complete(tb_loop_t *w)
{
	tb_job_t *list;
	tb_ledger_t *l = w->d->ledger;
	tb_error_t err;

	pthread_mutex_lock(&w->lock);
	list = w->finished;
	w->finished = NULL;
	pthread_mutex_unlock(&w->lock);
	for (tb_job_t *j = list, *next; j; j = next) {
		next = j->next;
		pthread_join(j->run.thread, NULL);
		w->busy_slots[j->run.slot / 64] &= ~(1ull << (j->run.slot % 64));
		w->running--;
		tb_loop_forget_running(w, j);
		if (j->run.rc == 0) {
			/* the slot set the done-marker before the result event */
			w->stats->recorded++;
			w->stats->succeeded += j->run.res.outcome == TB_OUTCOME_SUCCEEDED;
			tb_metrics_task(tb_outcomes[j->run.res.outcome]);
			tb_info(j->key, "attempt %llu recorded: %s", (unsigned long long)j->attempt,
				tb_outcomes[j->run.res.outcome]);
		} else if (j->run.moved) {
			/* A session stopped because its partition moved (or this
			 * worker stops): kept as "busy", which spends no attempt,
			 * and let go to the partition's owner. */
			tb_loop_keep_failure(
			    w, j, TB_EBUSY,
			    "the session stopped: its partition moved to another owner");
			tb_info(j->key, "attempt %llu stopped to move with its partition",
				(unsigned long long)j->attempt);
			retry_later(w, j, RETRY_BACKOFF_MS);
			continue;
		} else if (j->run.rc == TB_EFENCED ||
			   tb_ledger_renew(l, j->key, j->attempt, w->lease_ms, &err) ==
			       TB_EFENCED) {
			/* Lost its lease: another worker has begun the task, or
			 * may. Wait for that run to end (done: acknowledged) or
			 * its lease to lapse (then run it here). */
			w->stats->fenced++;
			tb_metrics_failure(tb_error_name(TB_EFENCED));
			if (j->run.rc != TB_EFENCED)
				j->run.err = err;
			tb_warn(j->key, "attempt %llu fenced: %s", (unsigned long long)j->attempt,
				j->run.err.msg);
			tb_loop_keep_failure(w, j, TB_EFENCED, j->run.err.msg);
			retry_later(w, j, RETRY_BACKOFF_MS);
			continue;
		} else if (j->run.rc != TB_EPOISON) {
			/* The platform failed, not the task: another attempt
			 * after a pause growing with each failure (admission
			 * decides whether one is left), with the offset still
			 * unfinished. */
			uint64_t pause = tb_loop_retry_pause(j->failures);
			j->failures++;
			w->stats->retried++;
			tb_metrics_failure(tb_error_name(j->run.rc));
			tb_warn(j->key, "attempt %llu failed (%s), retrying in %llu ms: %s",
				(unsigned long long)j->attempt, tb_error_name(j->run.rc),
				(unsigned long long)pause, j->run.err.msg);
			tb_loop_keep_failure(w, j, j->run.rc, j->run.err.msg);
			retry_later(w, j, pause);
			continue;
		} else {
			tb_loop_keep_failure(w, j, j->run.rc, j->run.err.msg);
			if (tb_loop_give_up(w, j, TB_DLQ_POISON, j->run.err.msg) < 0) {
				retry_later(w, j, RETRY_BACKOFF_MS); /* the DLQ is away */
				continue;
			}
		}
		tb_loop_acknowledge(w, j);
		tb_loop_free_job(j);
	}
}
