/*
 * ledger.h: the record of tasks across workers and crashes: how many
 * attempts each task had and why they failed, and which tasks are done.
 * One interface; implementations chosen at start-up by ledger.url:
 * "memory:" (in-process: the demo and tests, one worker) or
 * "redis://host:port[/db]" (shared by a fleet, surviving crashes). This file owns the
 * contract; it does not decide when a task is done (the lifecycle does).
 */
#ifndef TB_LEDGER_H
#define TB_LEDGER_H

#include "tb/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tb_ledger tb_ledger_t;

/* A task's failure history keeps its newest this many reasons. */
#define TB_LEDGER_MAX_FAILURES 64

typedef struct tb_ledger_attempt {
	uint64_t attempt;
	uint64_t ts;
	char worker[128];
	char reason[512];
} tb_ledger_attempt_t;

struct tb_ledger_ops {
	/* Starts the next attempt of @p task: *attempt = previous + 1.
	 * TB_EEXIST if the task is already done. */
	int (*begin)(tb_ledger_t *l, const char *task, const char *worker, uint64_t *attempt,
		     tb_error_t *err);
	/* The attempt failed retryably (or was poison): keep the reason
	 * (the newest TB_LEDGER_MAX_FAILURES are kept). */
	int (*failed)(tb_ledger_t *l, const char *task, uint64_t attempt, const char *reason,
		      tb_error_t *err);
	/* The attempt is recorded (manifest durable): the done-marker. */
	int (*done)(tb_ledger_t *l, const char *task, uint64_t attempt, const char *manifest_key,
		    tb_error_t *err);
	/* Every failed attempt's reason, oldest first; *n set. The caller
	 * frees the array. */
	int (*history)(tb_ledger_t *l, const char *task, tb_ledger_attempt_t **out, size_t *n,
		       tb_error_t *err);
	void (*close)(tb_ledger_t *l);
};

struct tb_ledger {
	const struct tb_ledger_ops *ops;
};

/**
 * Opens the ledger @p url names ("memory:" or "redis://host:port[/db]").
 * Redis keys start with @p prefix; @p worker names this process in the
 * failures it records. Opening does not connect: a Redis that is down
 * shows as TB_ERETRY from the first call, and the worker waits for it.
 */
int tb_ledger_open(tb_ledger_t **out, const char *url, const char *prefix, const char *worker,
		   tb_error_t *err);

int tb_ledger_memory_open(tb_ledger_t **out, tb_error_t *err);
int tb_ledger_redis_open(tb_ledger_t **out, const char *url, const char *prefix, const char *worker,
			 tb_error_t *err);

#endif
