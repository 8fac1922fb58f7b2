/*
 * admit.c: whether a waiting task may begin, asked of the ledger.
 */
#include "loop_int.h"

#include "inputs.h"
#include "tb/clock.h"
#include "tb/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the attempts since the last revive, before this one, came to. */
typedef struct tally {
	uint64_t begun;   /* this one included, sessions that moved not */
	uint64_t excused; /* the platform failed them, or their worker died unheard */
	uint64_t died;    /* their worker died after they said a phase of their own */
	uint64_t crashed; /* ... of a crash in their own thread: evidence (of died) */
	char crash[200];  /* the last crash's reason */
} tally_t;

/* How an attempt's entries (it may have several: a failure kept twice
 * when a reply was lost, a death kept by the next begin and its crash by
 * the next worker of its id) add up, the strongest word first. */
typedef enum ended {
	ENDED_UNSAID, /* no entry: ended without a word the ledger kept */
	ENDED_MOVED,  /* a session stopped to move: no attempt spent */
	ENDED_OWN,    /* the task's own failure (poison, or a code of its own) */
	ENDED_PLATFORM,
	ENDED_UNHEARD, /* its worker died before it said a phase: no evidence */
	ENDED_DIED,    /* its worker died after it said one: no evidence */
	ENDED_CRASHED, /* its worker crashed in its thread: evidence */
} ended_t;

static ended_t ended_of(const tb_ledger_attempt_t *a)
{
	static const char unheard[] = "its worker died before it reported a phase";

	if (!strcmp(a->code, tb_error_name(TB_ECRASHED)))
		return ENDED_CRASHED;
	if (!strcmp(a->code, "died"))
		return strncmp(a->reason, unheard, sizeof(unheard) - 1) ? ENDED_DIED
									: ENDED_UNHEARD;
	if (!strcmp(a->code, tb_error_name(TB_EBUSY)))
		return ENDED_MOVED;
	if (!a->code[0] || !strcmp(a->code, tb_error_name(TB_EPOISON)))
		return ENDED_OWN;
	return ENDED_PLATFORM;
}

static tally_t tally_of(const tb_ledger_attempt_t *hist, size_t n, uint64_t attempt, uint64_t base)
{
	tally_t t = { .begun = attempt - base };
	uint64_t moved = 0;

	for (size_t i = 0; i < n; i++) {
		if (hist[i].attempt <= base || hist[i].attempt >= attempt)
			continue;
		ended_t e = ended_of(&hist[i]);
		int first = 1;
		for (size_t k = 0; k < n && first; k++) {
			if (k == i || hist[k].attempt != hist[i].attempt)
				continue;
			ended_t o = ended_of(&hist[k]);
			if (o > e || (o == e && k < i)) /* counted once, at its strongest */
				first = 0;
		}
		if (!first)
			continue;
		switch (e) {
		case ENDED_MOVED:
			moved++;
			break;
		case ENDED_CRASHED:
			t.crashed++;
			snprintf(t.crash, sizeof(t.crash), "%s", hist[i].reason);
			t.died++; /* a crash is a death too */
			break;
		case ENDED_DIED:
			t.died++;
			break;
		case ENDED_UNHEARD:
		case ENDED_PLATFORM:
			t.excused++;
			break;
		default:
			break;
		}
	}
	t.begun -= moved < t.begun ? moved : t.begun - 1;
	/* bounded by what was begun before this one */
	if (t.died > t.begun - 1)
		t.died = t.begun - 1;
	if (t.crashed > t.died)
		t.crashed = t.died;
	if (t.excused > t.begun - 1 - t.died)
		t.excused = t.begun - 1 - t.died;
	return t;
}

/*
 * Whether attempt j->attempt is past the task's budget. A death convicts
 * a task only on evidence (docs/crash-safety.md, "What convicts a task"):
 * CRASHES_TO_POISON crashes of its worker in the attempt's own thread
 * (kept as "crashed" by the next worker of the id: blackbox.h) make it
 * poison. Deaths without evidence (a kill from outside, a lost host, the
 * OOM killer) spend the runtime's max_worker_deaths, the last resort, if
 * the attempt had said a phase of its own; one that died before it said
 * any did nothing yet that could kill its worker: excused, as the
 * platform's failures are. max_attempts counts the rest: attempts that
 * failed for the task's own reasons, and any that ended without a word
 * the ledger kept. Attempts the platform failed (the store, ledger or
 * events away, a lost lease: a code other than poison) are excused,
 * PLATFORM_FAILURES_MAX of them. Why, into @p why. @return 1 over, 0 not,
 * TB_ERETRY if the ledger cannot say (wait).
 */
static int over_budget(tb_loop_t *w, const tb_job_t *j, int *cause, char *why, size_t len)
{
	tb_ledger_t *l = w->d->ledger;
	tb_ledger_attempt_t *hist = NULL;
	tb_ledger_task_t t;
	size_t n = 0;
	tb_error_t err;

	if (j->attempt <= CRASHES_TO_POISON && j->attempt <= j->max_attempts &&
	    j->attempt <= j->max_deaths)
		return 0;
	/* Counted from the last revive (`taskbox dlq send`) on. */
	if (tb_ledger_inspect(l, j->key, &t, &err) < 0 ||
	    tb_ledger_history(l, j->key, &hist, &n, &err) < 0) {
		snprintf(why, len, "no history to count attempts by: %.500s", err.msg);
		return TB_ERETRY;
	}
	uint64_t base = t.base < j->attempt ? t.base : 0;
	tally_t c = tally_of(hist, n, j->attempt, base);
	uint64_t own = c.begun - 1 - c.excused - c.died;
	int over = 1;
	*cause = TB_DLQ_MAX_ATTEMPTS;
	if (c.crashed >= CRASHES_TO_POISON) {
		*cause = TB_DLQ_POISON;
		snprintf(why, len,
			 "its worker crashed %llu times running it, in its own thread: a task "
			 "that kills its worker; the last: %.200s",
			 (unsigned long long)c.crashed, c.crash);
	} else if (c.excused >= PLATFORM_FAILURES_MAX) {
		snprintf(why, len, "the platform failed this task %llu times; the last: %.400s",
			 (unsigned long long)c.excused, n ? hist[n - 1].reason : "?");
	} else if (c.died >= j->max_deaths) {
		snprintf(why, len,
			 "its worker died %llu times while running it (max_worker_deaths %llu); "
			 "the last: %.300s",
			 (unsigned long long)c.died, (unsigned long long)j->max_deaths,
			 n ? hist[n - 1].reason : "?");
	} else if (own >= j->max_attempts) {
		snprintf(why, len,
			 "no attempts left: %llu of %llu begun ended without a result "
			 "(max_attempts %llu)",
			 (unsigned long long)own, (unsigned long long)(c.begun - 1),
			 (unsigned long long)j->max_attempts);
	} else {
		over = 0;
	}
	free(hist);
	return over;
}

/* How long a task waits for an earlier task its inputs name that the
 * ledger has not seen at all (not submitted yet, or a wrong id), from
 * when its message came; then it is poison. */
#define INPUT_UNSEEN_MS (10 * 60 * 1000)

/*
 * Whether the earlier tasks @p j's inputs name are done, asked before an
 * attempt begins, so that waiting for them spends no attempt, slot or
 * sandbox. @return 0 all are (or @p j is done itself: begin says so);
 * TB_EBUSY one is not yet (@p why says which): wait in line; TB_EPOISON
 * one never will be (dead-lettered, or unseen for INPUT_UNSEEN_MS); or
 * the ledger's error (wait for it).
 */
static int admit_inputs(tb_loop_t *w, const tb_job_t *j, char *why, size_t len, tb_error_t *err)
{
	tb_ledger_t *l = w->d->ledger;
	tb_ledger_task_t t;
	int rc;

	if ((rc = tb_ledger_inspect(l, j->key, &t, err)) < 0)
		return rc;
	if (t.done)
		return 0;
	for (size_t i = 0; i < j->wait.ninputs; i++) {
		const char *name = j->wait.input_names[i], *task = j->wait.input_tasks[i];
		if ((rc = tb_inputs_task_done(l, task, &t, err)) == 0)
			continue;
		if (rc != TB_EBUSY && rc != TB_ENOTFOUND)
			return rc;              /* the ledger's */
		char what[210] = "replay_from"; /* an input, or the task replayed */
		if (name)
			snprintf(what, sizeof(what), "input %.200s", name);
		if (rc == TB_EBUSY && !t.attempts &&
		    tb_mono_ms() - j->received_mono >= INPUT_UNSEEN_MS) {
			snprintf(why, len,
				 "%s: task %.128s is unknown: the ledger has not seen it "
				 "in %d minutes",
				 what, task, INPUT_UNSEEN_MS / 60000);
			return TB_EPOISON;
		}
		snprintf(why, len, "%s: %.380s", what, err->msg);
		return rc == TB_EBUSY ? TB_EBUSY : TB_EPOISON;
	}
	return 0;
}

/* What the ledger says of a waiting task, asked before it may begin. */
typedef enum admission {
	ADMIT_RUN,        /* an attempt is begun (its lease held): run it */
	ADMIT_DONE,       /* done before: acknowledge only */
	ADMIT_DEAD,       /* out of attempts, or poison: dead-letter it */
	ADMIT_CONFLICT,   /* its id stands for another task: dead-letter it alone */
	ADMIT_WAIT_INPUT, /* an earlier task its inputs name is not done yet */
	ADMIT_WAIT_LEASE, /* another worker's live attempt holds it */
	ADMIT_WAIT_AWAY,  /* the ledger cannot say, or missed the last failure */
} admission_t;

/*
 * Decides whether @p j begins an attempt now. The last attempt's failure
 * is kept first; then the earlier tasks its inputs name (admit_inputs);
 * then the ledger begins an attempt, which it refuses when the task is
 * done or another worker's lease holds it; then the budget (over_budget).
 * ADMIT_DEAD sets @p cause (a TB_DLQ_* cause) and @p why; every wait says
 * why in @p err.
 */
static admission_t admit(tb_loop_t *w, tb_job_t *j, int *cause, char *why, size_t len,
			 tb_error_t *err)
{
	tb_ledger_t *l = w->d->ledger;
	int inputs = 0, rc, over;

	j->wait.input_wait = 0;
	if (j->run.failure_unkept) /* the last attempt's, first */
		tb_loop_keep_failure(w, j, j->run.err.code, j->run.err.msg);
	if (j->run.failure_unkept) {
		tb_error_set(err, TB_ERETRY, "%s", "its last failure is not kept yet");
		return ADMIT_WAIT_AWAY;
	}
	if (j->wait.ninputs && (inputs = admit_inputs(w, j, why, len, err)) != 0 &&
	    inputs != TB_EPOISON) {
		if (inputs != TB_EBUSY)
			return inputs == TB_EEXIST ? ADMIT_DONE
						   : ADMIT_WAIT_AWAY; /* the ledger's */
		j->wait.input_wait = 1;
		tb_error_set(err, TB_EBUSY, "%s", why);
		return ADMIT_WAIT_INPUT;
	}
	uint64_t t0 = tb_mono_us();
	rc = tb_ledger_begin_task(l, j->key, j->content[0] ? j->content : NULL, w->lease_ms,
				  &j->attempt, err);
	tb_metrics_step(TB_STEP_LEDGER_BEGIN, tb_mono_us() - t0);
	if (rc == TB_ECONFLICT) {
		snprintf(why, len,
			 "%.480s: a task id names one task for good; send this one under a new id",
			 err->msg);
		return ADMIT_CONFLICT;
	}
	if (rc < 0)
		return rc == TB_EEXIST  ? ADMIT_DONE
		       : rc == TB_EBUSY ? ADMIT_WAIT_LEASE
					: ADMIT_WAIT_AWAY;
	if (inputs == TB_EPOISON) {
		/* an attempt, for the done-marker that goes with the DLQ */
		tb_loop_keep_failure(w, j, TB_EPOISON, why);
		*cause = TB_DLQ_POISON;
		return ADMIT_DEAD;
	}
	if ((over = over_budget(w, j, cause, why, len)) < 0) {
		/* this attempt never ran: excused, and its lease let go */
		tb_loop_keep_failure(w, j, TB_ERETRY, why);
		tb_ledger_release(l, j->key, j->attempt, err);
		tb_error_set(err, over, "%s", why);
		return ADMIT_WAIT_AWAY;
	}
	if (over)
		return ADMIT_DEAD;
	return ADMIT_RUN;
}

/* Back in line for @p j, waiting as @p a says (@p err: why), after a
 * pause that doubles each time. */
static void ask_again(tb_loop_t *w, tb_job_t *j, admission_t a, const tb_error_t *err)
{
	if (!j->wait.backoff)
		j->wait.backoff = WAIT_BACKOFF_MIN_MS;
	/* waiting for an earlier task is a task's ordinary course */
	tb_log(a == ADMIT_WAIT_INPUT ? TB_LOG_INFO : TB_LOG_WARN, j->key, "waiting %u ms %s: %s",
	       j->wait.backoff,
	       a == ADMIT_WAIT_INPUT   ? "for an earlier task"
	       : a == ADMIT_WAIT_LEASE ? "for another worker's run"
				       : "for the ledger or DLQ",
	       err->msg);
	tb_loop_wait_for(w, j, j->wait.backoff);
	j->wait.backoff =
	    j->wait.backoff * 2 > WAIT_BACKOFF_MAX_MS ? WAIT_BACKOFF_MAX_MS : j->wait.backoff * 2;
}

void tb_loop_admit_waiting(tb_loop_t *w)
{
	tb_job_t *list = w->waiting;
	uint64_t now = tb_mono_ms();
	tb_error_t err;

	w->waiting = NULL;
	w->waiting_tail = &w->waiting;
	w->nwaiting = 0;
	w->ninput_waits = 0;
	for (tb_job_t *j = list, *next; j; j = next) {
		next = j->next;
		if (j->kind == JOB_PARKED && !*w->stop && j->wait.retry_at <= now) {
			tb_loop_redo_message(w, j); /* takes no slot */
			continue;
		}
		if (*w->stop || j->wait.retry_at > now || j->kind == JOB_PARKED ||
		    w->serving != 1 || w->running >= w->d->cfg->slots ||
		    tb_loop_is_running(w, j->key)) {
			uint64_t at = j->wait.retry_at;
			tb_loop_wait_for(w, j, at > now ? at - now : 0);
			continue;
		}
		char why[600] = "";
		int cause = TB_DLQ_MAX_ATTEMPTS;
		admission_t a = admit(w, j, &cause, why, sizeof(why), &err);
		if (a == ADMIT_RUN) {
			j->claimed_ms = tb_wall_ms();
			tb_kafka_tracker_reset(j->events);
			if (tb_loop_start_job(w, j, &err) == 0)
				continue;
			tb_err(j->key, "%s", err.msg);
			tb_loop_keep_failure(w, j, TB_EIO, err.msg);
			a = ADMIT_WAIT_AWAY;
		} else if (a == ADMIT_DEAD && tb_loop_give_up(w, j, cause, why) < 0) {
			tb_error_set(&err, TB_ERETRY, "%s", "the DLQ is away");
			a = ADMIT_WAIT_AWAY;
		} else if (a == ADMIT_CONFLICT) {
			tb_warn(j->key, "%s", why);
			j->attempt = 0; /* no attempt of its own: nothing to acknowledge */
			if (tb_loop_refuse_task(w, j, why) < 0) {
				tb_error_set(&err, TB_ERETRY, "%s", "the DLQ is away");
				a = ADMIT_WAIT_AWAY;
			}
		} else if (a == ADMIT_DONE) {
			/* Done before (a replay after a crash, a duplicate, or
			 * another worker's run): acknowledge only. */
			tb_info(j->key, "already done; acknowledged without running");
			w->stats->already++;
			j->attempt = 0;
		}
		if (a == ADMIT_WAIT_INPUT || a == ADMIT_WAIT_LEASE || a == ADMIT_WAIT_AWAY) {
			ask_again(w, j, a, &err);
			continue;
		}
		/* dead-lettered, or done before: acknowledged */
		memset(&j->run.res, 0, sizeof(j->run.res));
		tb_loop_acknowledge(w, j);
		tb_loop_free_job(j);
	}
}
