/*
 * messages.c: each consumed message: a task, a follow-up, or another.
 */
#include "loop_int.h"

#include "tb/clock.h"
#include "tb/fault.h"
#include "tb/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tb_loop_refuse(tb_loop_t *w, const tb_followup_t *f, const void *raw, size_t len,
		   const tb_msg_origin_t *origin, const char *why, tb_kafka_tracker_t *t,
		   int wait_ms)
{
	tb_dlq_t rec;

	if (tb_intake_dead_letter(&rec, TB_DLQ_ORPHAN, why, f->task_id, raw, len, origin,
				  tb_wall_ms()) < 0)
		abort(); /* out of memory */
	int rc = tb_loop_dead_letter(w, &rec, t, wait_ms);
	tb_msg_free(&tb_schema_dlq, &rec);
	return rc;
}

int tb_loop_orphan(tb_loop_t *w, const tb_followup_t *f, const void *raw, size_t len,
		   const tb_msg_origin_t *origin, tb_kafka_tracker_t *tracker, int wait_ms)
{
	tb_ledger_t *l = w->d->ledger;
	unsigned long long seq = (unsigned long long)f->seq;
	tb_ledger_task_t t;
	tb_manifest_t man;
	tb_error_t err;
	char why[1024], *bytes = NULL;
	size_t blen;

	if (tb_ledger_inspect(l, f->task_id, &t, &err) < 0) {
		snprintf(why, sizeof(why),
			 "follow-up %llu: task %s has no session here, and the ledger cannot say "
			 "whether one took it: %.600s",
			 seq, f->task_id, err.msg);
	} else if (t.done && !t.manifest[0]) {
		snprintf(why, sizeof(why), "follow-up %llu: task %s was dead-lettered", seq,
			 f->task_id);
	} else if (t.done) {
		int got =
		    tb_store_get_bytes(w->d->store, t.manifest, 8u << 20, &bytes, &blen, &err);
		got = got == 0 ? tb_msg_decode(&tb_schema_manifest, &man, bytes, blen, &err) : got;
		free(bytes);
		if (got < 0) {
			snprintf(
			    why, sizeof(why),
			    "follow-up %llu: task %s is done; its manifest is unreadable: %.600s",
			    seq, f->task_id, err.msg);
		} else {
			int interactive = TB_HAS(&man, TB_MANIFEST_FOLLOWUPS);
			uint64_t took = man.followups;
			tb_msg_free(&tb_schema_manifest, &man);
			if (interactive && f->seq <= took) {
				tb_info(f->task_id,
					"follow-up %llu delivered again: its session took it", seq);
				return 0;
			}
			snprintf(why, sizeof(why), "follow-up %llu: task %s is done%s", seq,
				 f->task_id,
				 interactive ? ": its session had ended" : " and was one-shot");
		}
	} else {
		snprintf(why, sizeof(why),
			 "follow-up %llu: no session for task %s on this partition (an unknown "
			 "task, or a follow-up sent before its task)",
			 seq, f->task_id);
	}
	return tb_loop_refuse(w, f, raw, len, origin, why, tracker, wait_ms);
}

/* Whether @p s holds the follow-up at @p offset among its items. */
static int session_has_offset(tb_session_t *s, int64_t offset)
{
	for (size_t i = 0, n = tb_session_count(s); i < n; i++) {
		uint64_t seq;
		int64_t off;
		const void *raw;
		size_t len;
		tb_session_item(s, i, &seq, &off, &raw, &len);
		if (off == offset)
			return 1;
	}
	return 0;
}

/* A follow-up: to its task's session, which holds it (offset and all) until
 * its attempt is recorded. @return 1 held; 0 acknowledge it now (a
 * duplicate, or dead-lettered); < 0 the DLQ is away (settled: tried again later). */
static int followup(tb_loop_t *w, const tb_followup_t *f, const void *raw, size_t len,
		    const tb_msg_origin_t *origin, tb_kafka_tracker_t *t, int wait_ms)
{
	tb_job_t *s = tb_loop_find_job(w, f->task_id, origin->partition);
	char why[512];

	if (s && !s->session) {
		snprintf(why, sizeof(why), "follow-up %llu: task %s is one-shot: it takes none",
			 (unsigned long long)f->seq, f->task_id);
		return tb_loop_refuse(w, f, raw, len, origin, why, t, wait_ms);
	}
	if (!s)
		return tb_loop_orphan(w, f, raw, len, origin, t, wait_ms);
	switch (tb_session_put(s->session, f, origin->offset, raw, len, why, sizeof(why))) {
	case TB_SESSION_QUEUED:
		tb_info(f->task_id, "follow-up %llu to its session", (unsigned long long)f->seq);
		return 1;
	case TB_SESSION_DUPLICATE:
		tb_info(f->task_id, "follow-up %llu again: its session has it already",
			(unsigned long long)f->seq);
		/* the very message again (its session adopted: rebalance.c):
		 * its offset finishes as the session's item does */
		return session_has_offset(s->session, origin->offset);
	default:
		return tb_loop_refuse(w, f, raw, len, origin, why, t, wait_ms);
	}
}

/* A message that is not a task: a malformed one to the DLQ, a follow-up
 * to its session or the DLQ; @p t counts its DLQ record's copies, a copy
 * sent now is waited for up to @p wait_ms.
 * @return 1 held by a session (its offset finishes with the session's
 * task); 0 acknowledge it; < 0 not yet: the DLQ is away. */
static int settle_other(tb_loop_t *w, tb_intake_t *in, const void *raw, size_t len,
			const tb_msg_origin_t *origin, tb_kafka_tracker_t *t, int wait_ms)
{
	if (in->kind == TB_INTAKE_DEAD)
		return tb_loop_dead_letter(w, &in->dlq, t, wait_ms);
	return followup(w, &in->followup, raw, len, origin, t, wait_ms);
}

tb_job_t *tb_loop_redo_job(tb_loop_t *w, int32_t partition, int64_t offset, uint64_t epoch)
{
	tb_job_t *r = calloc(1, sizeof(*r));

	if (!r || !(r->dlq = tb_kafka_tracker_new()))
		abort(); /* out of memory */
	r->w = w;
	r->kind = JOB_PARKED;
	r->partition = partition, r->offset = offset, r->epoch = epoch;
	r->wait.backoff = WAIT_BACKOFF_MIN_MS;
	return r;
}

void tb_loop_settled(tb_loop_t *w, tb_job_t *r, int rc, const void *raw, size_t len,
		     const void *key, size_t key_len)
{
	if (rc < 0 && !r->value) { /* its first try: kept for the next */
		if (!(r->value = malloc(len ? len : 1)) ||
		    (key_len && !(r->parked.msg_key = malloc(key_len))))
			abort(); /* out of memory */
		memcpy(r->value, raw, len);
		r->len = len;
		if (key_len)
			memcpy(r->parked.msg_key, key, key_len);
		r->parked.msg_key_len = key_len;
	}
	if (rc < 0) {
		tb_warn(NULL, "partition %d offset %lld: trying the DLQ again in %u ms",
			(int)r->partition, (long long)r->offset, r->wait.backoff);
		tb_loop_wait_for(w, r, r->wait.backoff);
		r->wait.backoff = r->wait.backoff * 2 > WAIT_BACKOFF_MAX_MS ? WAIT_BACKOFF_MAX_MS
									    : r->wait.backoff * 2;
		return;
	}
	if (rc == 0)
		tb_loop_acknowledge(w, r);
	tb_loop_free_job(r);
}

void tb_loop_redo_message(tb_loop_t *w, tb_job_t *j)
{
	tb_msg_origin_t origin = { w->d->cfg->kafka.tasks_topic, j->partition, j->offset,
				   j->parked.msg_key, j->parked.msg_key_len };
	tb_intake_t in;

	if (!tb_loop_ours(w, j)) {
		tb_loop_free_job(j); /* its partition's new owner handles it */
		return;
	}
	/* A record already out is what settles it: delivered (even after its
	 * wait ended), or still on its way (looked at again later). Only with
	 * none out is the message decided again (a follow-up's session may
	 * have come meanwhile), and a copy sent is then not waited for: the
	 * main loop goes on, and the next try sees it delivered. */
	int rc;
	if (tb_kafka_tracker_delivered(j->dlq) > 0) {
		rc = 0;
	} else if (tb_kafka_tracker_pending(j->dlq) > 0) {
		rc = TB_ERETRY;
	} else {
		if (tb_intake_decode(&in, j->value, j->len, &origin, tb_wall_ms()) < 0)
			abort(); /* out of memory */
		rc = settle_other(w, &in, j->value, j->len, &origin, j->dlq, 0);
		tb_intake_free(&in);
	}
	if (rc >= 0)
		tb_info(NULL, "partition %d offset %lld: settled on trying again",
			(int)j->partition, (long long)j->offset);
	tb_loop_settled(w, j, rc, j->value, j->len, j->parked.msg_key, j->parked.msg_key_len);
}

/* The earlier tasks @p t's inputs name, and the one it replays, for @p j
 * to wait for (a replay's name is NULL). */
static void input_waits(tb_job_t *j, const tb_task_t *t)
{
	size_t by_task = t->replay_from != NULL;

	for (size_t i = 0; i < t->inputs.n; i++)
		by_task += ((const tb_input_t *)t->inputs.items)[i].task != NULL;
	if (by_task && (!(j->wait.input_names = calloc(by_task, sizeof(char *))) ||
			!(j->wait.input_tasks = calloc(by_task, sizeof(char *)))))
		abort(); /* out of memory */
	for (size_t i = 0; i < t->inputs.n; i++) {
		const tb_input_t *x = (const tb_input_t *)t->inputs.items + i;
		if (!x->task)
			continue;
		if (!(j->wait.input_names[j->wait.ninputs] = strdup(x->name)) ||
		    !(j->wait.input_tasks[j->wait.ninputs] = strdup(x->task)))
			abort(); /* out of memory */
		j->wait.ninputs++;
	}
	if (t->replay_from) {
		if (!(j->wait.input_tasks[j->wait.ninputs] = strdup(t->replay_from)))
			abort(); /* out of memory */
		j->wait.ninputs++;
	}
}

void tb_loop_handle(tb_loop_t *w, const rd_kafka_message_t *m)
{
	const tb_config_t *cfg = w->d->cfg;
	tb_msg_origin_t origin = { rd_kafka_topic_name(m->rkt), m->partition, m->offset, m->key,
				   m->key_len };
	tb_intake_t in;
	tb_error_t err;

	w->stats->received++;
	if (m->partition < 0 || m->partition >= MAX_PARTITIONS || !w->marks[m->partition] ||
	    tb_watermark_start(w->marks[m->partition], m->offset, &err) < 0)
		return; /* not tb_loop_ours (any more), or seen: nothing to ack */
	if (tb_intake_decode(&in, m->payload, m->len, &origin, tb_wall_ms()) < 0)
		abort(); /* out of memory */
	if (in.kind != TB_INTAKE_TASK) {
		tb_job_t *r = tb_loop_redo_job(w, m->partition, m->offset, w->epochs[m->partition]);
		tb_loop_settled(
		    w, r, settle_other(w, &in, m->payload, m->len, &origin, r->dlq, DLQ_WAIT_MS),
		    m->payload, m->len, m->key, m->key_len);
		tb_intake_free(&in);
		return;
	}
	tb_job_t *j = calloc(1, sizeof(*j));
	if (!j)
		abort();
	j->w = w;
	j->partition = m->partition;
	j->offset = m->offset;
	j->epoch = w->epochs[m->partition];
	/* An interactive task delivered again while its job is here: one
	 * session, so its follow-ups have one place to go; the copy's offset
	 * finishes with it. */
	tb_job_t *same = in.task.kind == TB_TASK_INTERACTIVE
			     ? tb_loop_find_job(w, in.task.id, m->partition)
			     : NULL;
	if (tb_task_digest(&in.task, j->content, &err) < 0)
		j->content[0] = '\0'; /* cannot happen to a decoded task: unchecked */
	if (same && same->session && !strcmp(same->content, j->content)) {
		tb_info(in.task.id, "delivered again: held with its session");
		tb_session_hold(same->session, m->offset);
		tb_intake_free(&in);
		tb_loop_free_job(j);
		return;
	}
	if (in.task.kind == TB_TASK_INTERACTIVE && tb_session_new(&j->session, &err) < 0)
		tb_err(in.task.id, "no session (it runs one turn only): %s", err.msg);

	/* A task: it waits its turn in the ledger (tb_loop_admit_waiting). */
	if (tb_fault_hit("consumer-fatal"))
		rd_kafka_test_fatal_error(w->consumer, RD_KAFKA_RESP_ERR__FENCED,
					  "fault point consumer-fatal");
	if (!(j->value = malloc(m->len ? m->len : 1)) || !(j->events = tb_kafka_tracker_new()))
		abort();
	memcpy(j->value, m->payload, m->len);
	j->len = m->len;
	j->received_ms = tb_wall_ms();
	j->received_mono = tb_mono_ms();
	snprintf(j->key, sizeof(j->key), "%s", in.task.id);
	input_waits(j, &in.task);
	char path[4096];
	tb_runtime_t rt;
	snprintf(path, sizeof(path), "%s/%s.json", cfg->runtimes_dir, in.task.runtime);
	int loaded = tb_runtime_load(&rt, path, &err) == 0;
	j->max_attempts = loaded ? rt.max_attempts : 1;
	j->max_deaths = loaded ? rt.max_worker_deaths : 1;
	tb_runtime_free(&rt);
	tb_intake_free(&in);
	tb_loop_wait_for(w, j, 0);
}
