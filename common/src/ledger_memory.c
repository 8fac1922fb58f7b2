/*
 * ledger_memory.c: the ledger in this process's memory, for the embedded
 * demo and tests: one worker, nothing survives a restart. A mutex makes it
 * safe from slot threads. Entries are kept in a small open list: the demo
 * runs tens of tasks, not millions.
 */
#include "tb/ledger.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct entry {
	char *task;
	uint64_t attempts;
	int done;
	tb_ledger_attempt_t *failures;
	size_t nfail;
	struct entry *next;
} entry_t;

typedef struct mem_ledger {
	tb_ledger_t base;
	pthread_mutex_t lock;
	entry_t *head;
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

static int mem_begin(tb_ledger_t *l, const char *task, const char *worker, uint64_t *attempt,
		     tb_error_t *err)
{
	mem_ledger_t *m = (mem_ledger_t *)l;
	int rc = 0;

	(void)worker;
	pthread_mutex_lock(&m->lock);
	entry_t *e = find(m, task, 1);
	if (!e)
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
	else if (e->done)
		rc = tb_error_set(err, TB_EEXIST, "task %s is done", task);
	else
		*attempt = ++e->attempts;
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int mem_failed(tb_ledger_t *l, const char *task, uint64_t attempt, const char *reason,
		      tb_error_t *err)
{
	mem_ledger_t *m = (mem_ledger_t *)l;
	int rc = 0;

	pthread_mutex_lock(&m->lock);
	entry_t *e = find(m, task, 1);
	if (e && e->nfail == TB_LEDGER_MAX_FAILURES) /* keep the newest */
		memmove(e->failures, e->failures + 1, --e->nfail * sizeof(*e->failures));
	tb_ledger_attempt_t *bigger =
	    e ? realloc(e->failures, (e->nfail + 1) * sizeof(*bigger)) : NULL;
	if (!bigger) {
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
	} else {
		tb_ledger_attempt_t *a = &bigger[e->nfail++];
		memset(a, 0, sizeof(*a));
		a->attempt = attempt;
		a->ts = (uint64_t)time(NULL) * 1000;
		snprintf(a->worker, sizeof(a->worker), "this-process");
		snprintf(a->reason, sizeof(a->reason), "%s", reason);
		e->failures = bigger;
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int mem_done(tb_ledger_t *l, const char *task, uint64_t attempt, const char *manifest_key,
		    tb_error_t *err)
{
	mem_ledger_t *m = (mem_ledger_t *)l;
	int rc = 0;

	(void)attempt, (void)manifest_key;
	pthread_mutex_lock(&m->lock);
	entry_t *e = find(m, task, 1);
	if (!e)
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
	else
		e->done = 1;
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

static void mem_close(tb_ledger_t *l)
{
	mem_ledger_t *m = (mem_ledger_t *)l;
	for (entry_t *e = m->head, *next; e; e = next) {
		next = e->next;
		free(e->task);
		free(e->failures);
		free(e);
	}
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static const struct tb_ledger_ops mem_ops = {
	mem_begin, mem_failed, mem_done, mem_history, mem_close,
};

int tb_ledger_memory_open(tb_ledger_t **out, tb_error_t *err)
{
	mem_ledger_t *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (!m)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	m->base.ops = &mem_ops;
	pthread_mutex_init(&m->lock, NULL);
	*out = &m->base;
	return 0;
}
