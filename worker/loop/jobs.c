/*
 * jobs.c: the jobs the main thread holds, waiting or running.
 */
#include "loop_int.h"

#include "tb/clock.h"

#include <stdlib.h>
#include <string.h>

void tb_loop_free_job(tb_job_t *j)
{
	tb_kafka_tracker_release(j->events); /* its events in flight keep it */
	tb_kafka_tracker_release(j->dlq);
	for (size_t i = 0; i < j->wait.ninputs; i++) {
		free(j->wait.input_names[i]);
		free(j->wait.input_tasks[i]);
	}
	free(j->wait.input_names);
	free(j->wait.input_tasks);
	tb_session_free(j->session);
	free(j->value);
	free(j->parked.msg_key);
	free(j);
}

int tb_loop_ours(const tb_loop_t *w, const tb_job_t *j)
{
	return j->partition >= 0 && j->partition < MAX_PARTITIONS && w->marks[j->partition] &&
	       w->epochs[j->partition] == j->epoch;
}

void tb_loop_let_go(tb_loop_t *w, tb_job_t *j)
{
	tb_ledger_t *l = w->d->ledger;
	tb_error_t err;

	if (j->attempt && tb_ledger_release(l, j->key, j->attempt, &err) < 0)
		tb_warn(j->key, "lease not released: %s", err.msg);
	tb_loop_free_job(j);
}

void tb_loop_drop_waiting(tb_loop_t *w, int p)
{
	tb_job_t **link = &w->waiting;

	w->nwaiting = 0;
	w->ninput_waits = 0;
	while (*link) {
		tb_job_t *j = *link;
		if (j->partition == p) {
			*link = j->next;
			tb_loop_let_go(w, j);
		} else {
			link = &j->next;
			w->nwaiting++;
			w->ninput_waits += j->wait.input_wait;
		}
	}
	w->waiting_tail = link;
}

void tb_loop_drop_all_waiting(tb_loop_t *w)
{
	for (tb_job_t *j = w->waiting, *next; j; j = next) {
		next = j->next;
		tb_loop_let_go(w, j);
	}
	w->waiting = NULL;
	w->waiting_tail = &w->waiting;
	w->nwaiting = 0;
	w->ninput_waits = 0;
}

tb_job_t *tb_loop_find_job(tb_loop_t *w, const char *key, int32_t p)
{
	for (tb_job_t *r = w->running_jobs; r; r = r->run.next_running)
		if (r->partition == p && tb_loop_ours(w, r) && !strcmp(r->key, key))
			return r;
	for (tb_job_t *r = w->waiting; r; r = r->next)
		if (r->kind != JOB_PARKED && r->partition == p && tb_loop_ours(w, r) &&
		    !strcmp(r->key, key))
			return r;
	return NULL;
}

int tb_loop_is_running(const tb_loop_t *w, const char *key)
{
	for (const tb_job_t *r = w->running_jobs; r; r = r->run.next_running)
		if (!strcmp(r->key, key))
			return 1;
	return 0;
}

void tb_loop_forget_running(tb_loop_t *w, const tb_job_t *j)
{
	for (tb_job_t **p = &w->running_jobs; *p; p = &(*p)->run.next_running)
		if (*p == j) {
			*p = j->run.next_running;
			return;
		}
}

void tb_loop_wait_for(tb_loop_t *w, tb_job_t *j, uint64_t delay_ms)
{
	j->wait.retry_at = tb_mono_ms() + delay_ms;
	j->next = NULL;
	*w->waiting_tail = j;
	w->waiting_tail = &j->next;
	w->nwaiting++;
	w->ninput_waits += j->wait.input_wait;
}
