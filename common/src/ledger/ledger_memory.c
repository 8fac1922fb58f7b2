/*
 * ledger_memory.c: the ledger in this process's memory, for the embedded
 * demo and tests: one worker, nothing survives a restart. A mutex makes it
 * safe from slot threads. With one worker every lease is its own, so begin
 * never finds one busy; fencing still holds (only the newest attempt may
 * renew or finish), as on Redis. Entries are kept in a small open list: the demo
 * runs tens of tasks, not millions.
 */
#include "tb/ledger.h"
#include "tb/sys/ledger.h"

#include "tb/clock.h"

#include "tb/codec.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct entry {
	char *task;
	uint64_t attempts;  /* the newest attempt: the fencing token */
	uint64_t base;      /* attempts before the last revive */
	uint64_t followups; /* numbers handed out by next_followup */
	int done;
	char *manifest; /* the done-marker's */
	char *content;  /* what the id stands for (tb_ledger_begin_task) */
	uint64_t progress_attempt;
	char progress[32]; /* the phase that attempt last said (renew_at) */
	tb_ledger_attempt_t *failures;
	size_t nfail;
	struct entry *next;
} entry_t;

typedef struct mem_ledger {
	tb_ledger_t base;
	pthread_mutex_t lock;
	entry_t *head;
	char worker[128];
	char *info; /* alive()'s, until info_until (ms, monotonic) */
	uint64_t info_until;
} mem_ledger_t;

static entry_t *find(mem_ledger_t *m, const char *task, int create)
{
	for (entry_t *e = m->head; e; e = e->next)
		if (!strcmp(e->task, task))
			return e;
	if (!create)
		return NULL;
	entry_t *e = calloc(1, sizeof(*e));
	if (!e || !(e->task = strdup(task))) {
		free(e);
		return NULL;
	}
	e->next = m->head;
	m->head = e;
	return e;
}

/* Keeps a failure of @p e's (the newest TB_LEDGER_MAX_FAILURES). Lock
 * held. @return 0, or -1 out of memory. */
static int push_failure(entry_t *e, uint64_t attempt, const char *worker, const char *code,
			const char *reason)
{
	if (e->nfail == TB_LEDGER_MAX_FAILURES) /* keep the newest */
		memmove(e->failures, e->failures + 1, --e->nfail * sizeof(*e->failures));
	tb_ledger_attempt_t *bigger = realloc(e->failures, (e->nfail + 1) * sizeof(*bigger));
	if (!bigger)
		return -1;
	tb_ledger_attempt_t *a = &bigger[e->nfail++];
	memset(a, 0, sizeof(*a));
	a->attempt = attempt;
	a->ts = tb_wall_ms();
	snprintf(a->worker, sizeof(a->worker), "%s", worker);
	snprintf(a->code, sizeof(a->code), "%s", code);
	snprintf(a->reason, sizeof(a->reason), "%s", reason);
	tb_utf8_trim(a->reason);
	e->failures = bigger;
	return 0;
}

/* The attempt before the one beginning, if it left no failure and was
 * not revived past, ended without a word: kept as "died" (ledger.h). */
static int note_silent(entry_t *e, const char *worker)
{
	char why[96];

	if (!e->attempts || e->attempts <= e->base)
		return 0;
	for (size_t i = 0; i < e->nfail; i++)
		if (e->failures[i].attempt == e->attempts)
			return 0;
	if (e->progress_attempt == e->attempts && !strcmp(e->progress, "released"))
		return 0;
	if (e->progress_attempt == e->attempts)
		snprintf(why, sizeof(why), "its worker died in phase %s", e->progress);
	else
		snprintf(why, sizeof(why), "its worker died before it reported a phase");
	return push_failure(e, e->attempts, worker, "died", why);
}

static int mem_begin(tb_ledger_t *l, const char *task, const char *content, uint64_t lease_ms,
		     uint64_t *attempt, tb_error_t *err)
{
	mem_ledger_t *m = (mem_ledger_t *)l;
	int rc = 0;

	(void)lease_ms;
	pthread_mutex_lock(&m->lock);
	entry_t *e = find(m, task, 1);
	if (e && content && !e->content && !(e->content = strdup(content)))
		e = NULL;
	if (!e)
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
	else if (content && strcmp(e->content, content) != 0)
		rc = tb_error_set(err, TB_ECONFLICT,
				  "task id %s already names another task (%s; this one is %s)",
				  task, e->content, content);
	else if (e->done)
		rc = tb_error_set(err, TB_EEXIST, "task %s is done", task);
	else if (note_silent(e, m->worker) < 0)
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
	else
		*attempt = ++e->attempts;
	pthread_mutex_unlock(&m->lock);
	return rc;
}

/* 0 if @p attempt is @p task's newest, else TB_EFENCED. Lock held. */
static int newest(mem_ledger_t *m, const char *task, uint64_t attempt, tb_error_t *err)
{
	entry_t *e = find(m, task, 0);

	if (e && e->attempts == attempt)
		return 0;
	return tb_error_set(err, TB_EFENCED,
			    "task %s: attempt %llu was fenced out by a newer one (%llu)", task,
			    (unsigned long long)attempt, (unsigned long long)(e ? e->attempts : 0));
}

static int mem_renew(tb_ledger_t *l, const char *task, uint64_t attempt, uint64_t lease_ms,
		     const char *phase, tb_error_t *err)
{
	mem_ledger_t *m = (mem_ledger_t *)l;

	(void)lease_ms;
	pthread_mutex_lock(&m->lock);
	int rc = newest(m, task, attempt, err);
	entry_t *e = rc == 0 && phase ? find(m, task, 0) : NULL;
	if (e) {
		e->progress_attempt = attempt;
		snprintf(e->progress, sizeof(e->progress), "%s", phase);
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

/* Nothing to wait for here: the renewal's progress, the lease untouched
 * (this ledger keeps none); a fenced note is dropped unsaid, as Redis's. */
static int mem_note(tb_ledger_t *l, const char *task, uint64_t attempt, const char *phase,
		    tb_error_t *err)
{
	int rc = mem_renew(l, task, attempt, 0, phase, err);
	return rc == TB_EFENCED ? 0 : rc;
}

static int mem_release(tb_ledger_t *l, const char *task, uint64_t attempt, tb_error_t *err)
{
	mem_ledger_t *m = (mem_ledger_t *)l;

	(void)err;
	/* no other worker to hand the lease to; let go of, it is no death */
	pthread_mutex_lock(&m->lock);
	entry_t *e = find(m, task, 0);
	if (e && e->attempts == attempt) {
		e->progress_attempt = attempt;
		snprintf(e->progress, sizeof(e->progress), "released");
	}
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int mem_failed(tb_ledger_t *l, const char *task, uint64_t attempt, int code,
		      const char *reason, tb_error_t *err)
{
	mem_ledger_t *m = (mem_ledger_t *)l;
	int rc = 0;

	pthread_mutex_lock(&m->lock);
	entry_t *e = find(m, task, 1);
	if (!e || push_failure(e, attempt, m->worker, tb_error_name(code), reason) < 0)
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int mem_done(tb_ledger_t *l, const char *task, uint64_t attempt, const char *manifest_key,
		    tb_error_t *err)
{
	mem_ledger_t *m = (mem_ledger_t *)l;
	int rc;

	pthread_mutex_lock(&m->lock);
	entry_t *e = find(m, task, 0);
	if ((rc = newest(m, task, attempt, err)) == 0 && !e->done) {
		if (!(e->manifest = strdup(manifest_key)))
			rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		else
			e->done = 1;
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int mem_history(tb_ledger_t *l, const char *task, tb_ledger_attempt_t **out, size_t *n,
		       tb_error_t *err)
{
	mem_ledger_t *m = (mem_ledger_t *)l;
	int rc = 0;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&m->lock);
	entry_t *e = find(m, task, 0);
	if (e && e->nfail) {
		if (!(*out = malloc(e->nfail * sizeof(**out))))
			rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		else
			memcpy(*out, e->failures, e->nfail * sizeof(**out)), *n = e->nfail;
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int mem_revive(tb_ledger_t *l, const char *task, tb_error_t *err)
{
	mem_ledger_t *m = (mem_ledger_t *)l;
	int rc = 0;

	pthread_mutex_lock(&m->lock);
	entry_t *e = find(m, task, 0);
	if (!e || !e->done) {
		rc = tb_error_set(err, TB_ENOTFOUND, "task %s is not dead-lettered", task);
	} else if (e->manifest && e->manifest[0]) {
		rc = tb_error_set(err, TB_EEXIST, "task %s is done with a record", task);
	} else {
		e->done = 0;
		free(e->manifest);
		e->manifest = NULL;
		e->base = e->attempts;
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int mem_inspect(tb_ledger_t *l, const char *task, tb_ledger_task_t *out, tb_error_t *err)
{
	mem_ledger_t *m = (mem_ledger_t *)l;

	(void)err;
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&m->lock);
	entry_t *e = find(m, task, 0);
	if (e) {
		out->attempts = e->attempts;
		out->base = e->base;
		out->done = e->done;
		if (e->done) {
			out->done_attempt = e->attempts;
			snprintf(out->manifest, sizeof(out->manifest), "%s", e->manifest);
		}
	}
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int mem_alive(tb_ledger_t *l, const char *info, uint64_t ttl_ms, tb_error_t *err)
{
	mem_ledger_t *m = (mem_ledger_t *)l;
	char *copy = strdup(info);

	if (!copy)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	pthread_mutex_lock(&m->lock);
	free(m->info);
	m->info = copy;
	m->info_until = tb_mono_ms() + ttl_ms;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int mem_workers(tb_ledger_t *l, char ***infos, size_t *n, tb_error_t *err)
{
	mem_ledger_t *m = (mem_ledger_t *)l;
	int rc = 0;

	*infos = NULL;
	*n = 0;
	pthread_mutex_lock(&m->lock);
	if (m->info && tb_mono_ms() < m->info_until) {
		if (!(*infos = calloc(1, sizeof(char *))) || !((*infos)[0] = strdup(m->info))) {
			free(*infos);
			*infos = NULL;
			rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		} else {
			*n = 1;
		}
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static void mem_close(tb_ledger_t *l)
{
	mem_ledger_t *m = (mem_ledger_t *)l;
	for (entry_t *e = m->head, *next; e; e = next) {
		next = e->next;
		free(e->task);
		free(e->manifest);
		free(e->content);
		free(e->failures);
		free(e);
	}
	free(m->info);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static int mem_next_followup(tb_ledger_t *l, const char *task, uint64_t *seq, tb_error_t *err)
{
	mem_ledger_t *m = (mem_ledger_t *)l;
	int rc = 0;

	pthread_mutex_lock(&m->lock);
	entry_t *e = find(m, task, 1);
	if (!e)
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
	else
		*seq = ++e->followups;
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static const struct tb_ledger_ops mem_ops = {
	.begin = mem_begin,
	.renew = mem_renew,
	.note = mem_note,
	.release = mem_release,
	.failed = mem_failed,
	.done = mem_done,
	.history = mem_history,
	.revive = mem_revive,
	.inspect = mem_inspect,
	.alive = mem_alive,
	.workers = mem_workers,
	.next_followup = mem_next_followup,
	.close = mem_close,
};

int tb_ledger_memory_open(tb_ledger_t **out, const char *worker, tb_error_t *err)
{
	mem_ledger_t *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (!m)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	snprintf(m->worker, sizeof(m->worker), "%s", worker[0] ? worker : "unnamed");
	m->base.ops = &mem_ops;
	pthread_mutex_init(&m->lock, NULL);
	*out = &m->base;
	return 0;
}
