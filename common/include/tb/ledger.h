/*
 * ledger.h: the record of tasks across workers and crashes: how many
 * attempts each task had and why they failed, and which tasks are done.
 * One interface; implementations chosen at start-up by ledger.url:
 * "memory:" (in-process: the demo and tests, one worker) or
 * "redis://host:port[/db]" (shared by a fleet, surviving crashes). This file owns the
 * contract, and the wrappers below are the only way in; the backends'
 * function table is tb/sys/ledger.h, for those who write one. It does not
 * decide when a task is done (the lifecycle does).
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
	char code[24]; /* tb_error_name() of why it failed */
	char reason[512];
} tb_ledger_attempt_t;

/*
 * Leases and fencing. A task's attempt number is its fencing token: begin
 * counts it up atomically, and only the newest attempt may renew its lease
 * or write the done-marker. The lease itself (a TTL, renewed by the
 * worker's heartbeats) keeps a second worker from starting the task while
 * the first is alive; when the holder dies, the lease expires and another
 * worker begins the next attempt, which fences the old one out.
 *
 * A lease is held by a worker id, not a process: a worker restarted with
 * its id (the sweep at start already assumes the old process is gone)
 * takes its predecessor's leases over at once instead of waiting them out.
 */
/* What the ledger knows of one task (for `taskbox status`). */
typedef struct tb_ledger_task {
	uint64_t attempts;   /* begun so far; 0: the ledger never saw it */
	char lease[200];     /* "<attempt> <worker>", or "" when none is live */
	uint64_t lease_left; /* ms until the lease lapses */
	int done;            /* the done-marker is set */
	uint64_t done_attempt;
	char manifest[600]; /* the done-marker's manifest key; "" dead-lettered */
	uint64_t base;      /* attempts before the last revive: the budget counts
			       * only those after it */
} tb_ledger_task_t;

/**
 * Starts the next attempt of @p task: *attempt = previous + 1, under a
 * lease of @p lease_ms held by this ledger's worker.
 * @return 0; TB_EEXIST if the task is done; TB_EBUSY if another worker's
 *         lease is live (err says whose and for how long): wait and try
 *         again; TB_ERETRY if the ledger cannot be reached
 */
/**
 * tb_ledger_begin() for a task message whose content is @p content
 * (tb_task_digest()): the first message of an id leaves its content with
 * the ledger, for good; a later one under the same id must have the same
 * (a retry, a redelivery). Checked before anything else.
 * @return as tb_ledger_begin(); TB_ECONFLICT when the id already stands
 *         for other content (err names both digests); nothing is written
 */
int tb_ledger_begin_task(tb_ledger_t *l, const char *task, const char *content, uint64_t lease_ms,
			 uint64_t *attempt, tb_error_t *err);

int tb_ledger_begin(tb_ledger_t *l, const char *task, uint64_t lease_ms, uint64_t *attempt,
		    tb_error_t *err);

/** The heartbeat: extends the lease of @p attempt by @p lease_ms.
 * @return 0; TB_EFENCED if a newer attempt began: stop the run, write
 *         nothing */
/**
 * tb_ledger_renew(), saying too where the attempt is (@p phase, a phase
 * name; NULL: nothing new). The next tb_ledger_begin() of the task, if
 * this attempt ends without a word (its worker died), keeps a failure
 * for it with code "died" and the reason "its worker died in phase
 * <phase>" ("... before it reported a phase" when it never said one).
 */
int tb_ledger_renew_at(tb_ledger_t *l, const char *task, uint64_t attempt, uint64_t lease_ms,
		       const char *phase, tb_error_t *err);

int tb_ledger_renew(tb_ledger_t *l, const char *task, uint64_t attempt, uint64_t lease_ms,
		    tb_error_t *err);

/**
 * Says where @p attempt is (@p phase), as tb_ledger_renew_at() does for
 * the next begin, without renewing the lease (the heartbeats do) and
 * without waiting for the ledger's answer: the note is on its way before
 * the phase's work begins, and a slot does not wait a round trip at each
 * phase (a fenced attempt is the heartbeats' to find). @return 0; an
 * error (TB_ERETRY) when it could not be sent: nothing is noted
 */
int tb_ledger_note(tb_ledger_t *l, const char *task, uint64_t attempt, const char *phase,
		   tb_error_t *err);

/** Lets the lease go (the attempt is over and nothing will run it here):
 * another worker may begin at once. A no-op if fenced. */
int tb_ledger_release(tb_ledger_t *l, const char *task, uint64_t attempt, tb_error_t *err);

/** The attempt failed (@p code, a TB_E*, and the reason): kept, the
 * newest TB_LEDGER_MAX_FAILURES of them. The lease stays. */
int tb_ledger_failed(tb_ledger_t *l, const char *task, uint64_t attempt, int code,
		     const char *reason, tb_error_t *err);

/** The attempt is recorded (manifest durable, or "" for a task
 * dead-lettered): the done-marker, and the lease released.
 * @return 0; TB_EFENCED if a newer attempt began (nothing is written) */
int tb_ledger_done(tb_ledger_t *l, const char *task, uint64_t attempt, const char *manifest_key,
		   tb_error_t *err);

/** Every failed attempt's reason, oldest first; *n set.
 * @param[out] out freed by the caller with free() */
int tb_ledger_history(tb_ledger_t *l, const char *task, tb_ledger_attempt_t **out, size_t *n,
		      tb_error_t *err);

/** A dead-lettered task may run again (`taskbox dlq send`): its
 * done-marker goes and its attempt budget starts afresh (attempt numbers
 * go on). @return 0; TB_EEXIST if it is done with a record (it would not
 * run again); TB_ENOTFOUND if it is not dead-lettered */
int tb_ledger_revive(tb_ledger_t *l, const char *task, tb_error_t *err);

/** The next follow-up number for @p task (1, 2, 3 ...), counted here for
 * producers that keep no count of their own (`taskbox send`). */
int tb_ledger_next_followup(tb_ledger_t *l, const char *task, uint64_t *seq, tb_error_t *err);

/** What the ledger knows of @p task, read at one instant. */
int tb_ledger_inspect(tb_ledger_t *l, const char *task, tb_ledger_task_t *out, tb_error_t *err);

/** This worker's liveness: @p info (a JSON object, schemas/keys.md) stands
 * for @p ttl_ms unless renewed. */
int tb_ledger_alive(tb_ledger_t *l, const char *info, uint64_t ttl_ms, tb_error_t *err);

/** The live workers' info strings.
 * @param[out] infos each string and the array freed by the caller */
int tb_ledger_workers(tb_ledger_t *l, char ***infos, size_t *n, tb_error_t *err);

/*
 * Shared rate limits (schemas/keys.md, "rate buckets"): one bucket per
 * credential, kept where every worker of the fleet draws from it. A
 * bucket paces requests (one per interval_ms, the fleet's requests in
 * a row as one queue) and tokens (tokens_per_minute, spent after the
 * answers that report them; a minute's worth may go at once), and pauses
 * for as long as the provider said (Retry-After). Times are the ledger's
 * own clock, so workers' clocks need not agree.
 */
typedef struct tb_ledger_rate {
	const char *bucket;         /* its name: 1 to 64 of [0-9a-z] */
	double interval_ms;         /* one request per this at most; 0: no request limit */
	uint64_t tokens_per_minute; /* 0: no token limit */
	uint64_t max_wait_ms;       /* a request's turn at most this far ahead */
} tb_ledger_rate_t;

typedef struct tb_ledger_turn {
	int taken;        /* a turn is held: go after wait_ms */
	uint64_t wait_ms; /* !taken: ask again after this long */
	uint64_t sharing; /* workers that drew from the bucket in the last 10 s */
} tb_ledger_turn_t;

/** Whether @p l keeps rate buckets shared by a fleet (a Redis ledger
 * does; "memory:" does not: its one worker keeps its own). */
int tb_ledger_shares_rates(const tb_ledger_t *l);

/**
 * Asks @p r's bucket for one request's turn: held (taken, and the wait
 * before it, at most max_wait_ms) or not (the bucket is paused, its
 * tokens are spent, or the next turn is further than max_wait_ms away:
 * wait_ms says when to ask again). One round trip.
 * @return 0; TB_ERETRY when the ledger cannot be reached (its own short
 *         timeout: a caller falls back on a share of its own)
 */
int tb_ledger_rate_take(tb_ledger_t *l, const tb_ledger_rate_t *r, tb_ledger_turn_t *out,
			tb_error_t *err);

/**
 * Tells @p r's bucket that @p tokens were spent, and that its provider
 * asked for a pause of @p pause_ms (0: none), without waiting for the
 * answer (no round trip). @return 0; TB_ERETRY when it could not be sent
 */
int tb_ledger_rate_spend(tb_ledger_t *l, const tb_ledger_rate_t *r, uint64_t tokens,
			 uint64_t pause_ms, tb_error_t *err);

/*
 * Pins: a value a fleet's workers agree on under a name, set once by
 * whichever worker comes first and kept for @p ttl_ms, in the ledger
 * because only workers write it (a producer that may write the store
 * cannot): the digest a layer's index is pinned by (worker/image/
 * layer_index_store.h). A backend that keeps none (the in-process one)
 * says TB_EINVAL: ask tb_ledger_keeps_pins() first.
 */

/** Whether @p l keeps pins (a Redis ledger does). */
int tb_ledger_keeps_pins(const tb_ledger_t *l);

/**
 * Pins @p value (at most 255 bytes, printable) under @p name unless a
 * value is pinned there already; the one pinned after the call, ours or
 * the earlier one, into @p out (@p cap bytes).
 * @return 0; TB_EINVAL for a name or value out of bounds, or a ledger
 *         that keeps no pins; TB_ERETRY when the ledger cannot be reached
 */
int tb_ledger_pin(tb_ledger_t *l, const char *name, const char *value, uint64_t ttl_ms, char *out,
		  size_t cap, tb_error_t *err);

/** The value pinned under @p name into @p out. @return 0; TB_ENOTFOUND;
 * TB_EINVAL; TB_ERETRY. */
int tb_ledger_pinned(tb_ledger_t *l, const char *name, char *out, size_t cap, tb_error_t *err);

/** Closes the ledger and frees @p l; NULL is fine. */
void tb_ledger_close(tb_ledger_t *l);

/**
 * Opens the ledger @p url names ("memory:" or "redis://host:port[/db]").
 * Redis keys start with @p prefix; @p worker names this worker in the
 * leases it holds, the failures it records and its liveness. Opening does not connect: a Redis that is down
 * shows as TB_ERETRY from the first call, and the worker waits for it.
 */
int tb_ledger_open(tb_ledger_t **out, const char *url, const char *prefix, const char *worker,
		   tb_error_t *err);

/** The in-process ledger ("memory:"): one worker's, lost with it. */
int tb_ledger_memory_open(tb_ledger_t **out, const char *worker, tb_error_t *err);
/** The Redis ledger ("redis://host:port[/db]"), shared by a fleet. */
int tb_ledger_redis_open(tb_ledger_t **out, const char *url, const char *prefix, const char *worker,
			 tb_error_t *err);

#endif
