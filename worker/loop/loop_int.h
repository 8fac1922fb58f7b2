/*
 * loop_int.h: the worker loop's insides, shared by its files (private to
 * worker/loop/; worker.h is the contract):
 *
 *   worker.c    the loop: the consumer, heartbeats, commits
 *   rebalance.c partitions assigned and revoked, and their sessions
 *   messages.c  each message consumed: a task, a follow-up, or another
 *   admit.c     whether a waiting task may begin (the ledger decides)
 *   slots.c     a slot thread per attempt, its events to the producer
 *   settle.c    what becomes of a finished attempt; the DLQ
 *   jobs.c      the jobs held: the waiting line, the running list
 *
 * Everything here but slots.c's thread runs on the main thread.
 */
#ifndef TB_LOOP_INT_H
#define TB_LOOP_INT_H

#include "intake.h"
#include "worker.h"
#include "tb/kafka.h"
#include "tb/schema_followup.h"
#include "watermark.h"

#include <pthread.h>
#include <stdatomic.h>

#define MAX_PARTITIONS 256
#define RETRY_BACKOFF_MS 1000
#define RETRY_BACKOFF_MAX_MS 60000

/** The pause before the next attempt of a task the platform failed
 * @p failures times before: 1 s, doubling, at most 60 s (what the
 * worker waits and says it waits). */
uint64_t tb_loop_retry_pause(unsigned failures);
/* Attempts the platform failed (a service away, a lost lease) do not
 * count against the runtime's max_attempts, up to PLATFORM_FAILURES_MAX.
 * Attempts whose worker died count against max_worker_deaths instead,
 * and only on evidence does a death convict the task: CRASHES_TO_POISON
 * crashes of the worker in the attempt's own thread (its fatal-signal
 * handler said so, blackbox.h) make it poison (admit.c). Two, not one: a
 * worker's own bug may corrupt memory that another thread trips over
 * once; a task whose data crashes its worker does so every time. */
#define CRASHES_TO_POISON 2
#define PLATFORM_FAILURES_MAX 20
/* A consumer stuck this long in one join state is replaced. */
#define STUCK_MS 60000
#define WAIT_BACKOFF_MIN_MS 250
#define WAIT_BACKOFF_MAX_MS 10000
/* How long a message waits for a DLQ record it has just sent before it
 * goes back in line to be tried again (tb_loop_redo_message(), or a
 * task's retry). */
#define DLQ_WAIT_MS 5000

/* A task's place in the waiting line, and what it waits for. A parked
 * message waits in the same line, in arrival order. */
/* The slots one worker runs at most (schemas/config.md, "slots"). */
#define TB_LOOP_SLOTS_MAX 1024

typedef struct tb_job_wait {
	uint64_t retry_at;                 /* not before (monotonic ms) */
	unsigned backoff;                  /* the next pause */
	char **input_names, **input_tasks; /* its inputs named by an earlier task */
	size_t ninputs;                    /* (admit.c waits for those tasks) */
	int input_wait;                    /* the last look found such a task not done */
} tb_job_wait_t;

/* A task's attempt: while it runs (the main thread's and its slot's), and
 * how the last one ended, kept while the task waits to be tried again. */
typedef struct tb_job_run {
	struct tb_job *next_running; /* the main thread's list of running attempts */
	pthread_t thread;
	unsigned slot;
	uint64_t lease_ok;  /* last renewal (monotonic ms) */
	atomic_int cancel;  /* the lease is lost: stop */
	atomic_int phase;   /* tb_phase_t + 1, for liveness */
	int moved;          /* a session stopped because its partition moved or the worker
			     * stops: let go without counting it as a failure */
	uint64_t notice_at; /* a session whose partition was taken away, perhaps
			     * to come back (rebalance.c): since (monotonic ms) */
	int rc;             /* the last attempt's: 0 or a TB_E* */
	tb_lifecycle_result_t res;
	tb_error_t err;
	int failure_unkept; /* err holds a failure the ledger missed */
} tb_job_run_t;

/* A message that is not a task to run (malformed, or a follow-up
 * refused), parked until its DLQ record can be sent. */
typedef struct tb_job_parked {
	void *msg_key; /* the message's Kafka key, for its DLQ record */
	size_t msg_key_len;
} tb_job_parked_t;

/*
 * One message the worker holds until it can be acknowledged: a task
 * (waiting in line, then running an attempt in a slot, then waiting
 * again to be retried) or a parked message. The three parts are what
 * each of those states owns; the top is the message and the task's
 * ledger facts, which every state shares.
 */
typedef struct tb_job {
	struct tb_job *next; /* in the waiting line, or the finished list */
	struct tb_loop *w;
	enum { JOB_TASK, JOB_PARKED } kind;
	int32_t partition;
	int64_t offset;
	uint64_t epoch;   /* the partition's assignment this message came in */
	char key[160];    /* the task's id: the message's key */
	char content[72]; /* what it stands for (tb_task_digest); "" unknown */
	void *value;      /* the task message, decoded again by the slot */
	size_t len;
	uint64_t attempt;
	uint64_t max_attempts;
	uint64_t max_deaths;              /* the runtime's max_worker_deaths */
	uint64_t received_ms, claimed_ms; /* for the phase events */
	uint64_t received_mono;           /* for how long it has waited */
	unsigned failures;                /* platform failures here: the retry pause */
	tb_kafka_tracker_t *events;       /* its events in flight (the record's) */
	tb_kafka_tracker_t *dlq;          /* its DLQ record's copies, across tries */
	tb_session_t *session;            /* interactive: its follow-ups, held with their offsets */
	tb_job_wait_t wait;
	tb_job_run_t run;
	tb_job_parked_t parked;
} tb_job_t;

typedef struct tb_loop {
	const tb_worker_deps_t *d;
	rd_kafka_t *consumer, *producer;
	int ever_assigned;          /* the consumer had an assignment (see consumer_end) */
	uint64_t rebalancing_since; /* a cooperative rebalance's revoke (monotonic ms): no
				     * commits until its assignment, 0 none */
	uint64_t rebalanced_at;     /* its last assignment: none for a while after */
	pthread_t prober;           /* asks Kafka, the store, the sandbox (tb/health.h) */
	int probing;                /* the prober runs */
	atomic_int probe_stop;      /* tells it to end */
	tb_sandbox_pool_t *pool;    /* each slot's next sandbox, built ahead */
	tb_ratelimit_t *rates;      /* the fleet's rate limits, for every slot */
	tb_watermark_t *marks[MAX_PARTITIONS];
	uint64_t epochs[MAX_PARTITIONS]; /* bumped at each assignment */
	pthread_mutex_t lock;
	tb_job_t *finished;     /* slots push here */
	int wake[2];            /* a byte when a slot finished or a message came */
	tb_job_t *running_jobs; /* main thread only */
	tb_job_t *waiting;      /* to begin, in arrival order: see admit_waiting */
	tb_job_t **waiting_tail;
	unsigned nwaiting;
	unsigned ninput_waits; /* of those, tasks waiting for an earlier task */
	uint64_t busy_slots[TB_LOOP_SLOTS_MAX / 64]; /* bit per slot */
	unsigned running;
	int paused;
	uint64_t resumed_at; /* tb_mono_ms() of the last resume, until a message came */
	int serving;         /* it can run tasks (sandbox, store): else it takes none */
	uint64_t lease_ms;
	uint64_t next_beat;  /* monotonic ms */
	uint64_t next_alive; /* the next liveness write (monotonic ms) */
	uint64_t started_ms;
	uint64_t finished_messages;
	tb_worker_stats_t *stats;
	volatile sig_atomic_t *stop;
} tb_loop_t;

/* ------------------------------------------------ worker.c */

/*
 * Every third of the lease time: renews the lease of each running
 * attempt, says this worker is alive and has the offsets committed again.
 * A lease the ledger fenced, or one not renewed for a whole lease time
 * (the ledger unreachable: it may have expired and been taken), stops
 * its run.
 */
void tb_loop_heartbeat(tb_loop_t *w);

/* --------------------------------------------- rebalance.c */

/* Whether the group's protocol is cooperative (incremental): it is
 * exactly when kafka.assignor names the cooperative assignor, since a
 * consumer's assignors are all of one kind. */
static inline int tb_loop_cooperative(const tb_loop_t *w)
{
	return w->d->cfg->kafka.assignor == TB_ASSIGNOR_COOPERATIVE;
}
/* The consumer's rebalance callback (tb_rebalance_fn): @p opaque is w. */
void tb_loop_on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t e,
			  rd_kafka_topic_partition_list_t *parts, void *opaque);
/* Stops the running sessions of partition @p p (-1: all): their
 * follow-ups are no longer read here, so the partition's next owner (or
 * this worker, given it again) replays them from their first prompt. Not
 * a failure of the task: their attempts are let go uncounted. */
void tb_loop_stop_sessions(tb_loop_t *w, int p, const char *why);
/* Stops the sessions on notice that no assignment gave back in time. */
void tb_loop_notice_expired(tb_loop_t *w);
/* Whether offsets may be committed now: not while a cooperative
 * rebalance goes on, nor for 10 s after its last step (librdkafka 2.0.2
 * loses the whole assignment when such a commit is refused for its
 * generation: its #4059); 30 s at most. */
int tb_loop_may_commit(const tb_loop_t *w);

/* ---------------------------------------------- messages.c */

/* A follow-up that no session takes, to the DLQ with @p why. @return 0
 * (acknowledge it), or < 0 when the DLQ is away (settled: tried again later). */
int tb_loop_refuse(tb_loop_t *w, const tb_followup_t *f, const void *raw, size_t len,
		   const tb_msg_origin_t *origin, const char *why, tb_kafka_tracker_t *t,
		   int wait_ms);
/* A follow-up for a task with no session here: replayed after its session
 * took it (acknowledged), or refused with what the ledger says. */
int tb_loop_orphan(tb_loop_t *w, const tb_followup_t *f, const void *raw, size_t len,
		   const tb_msg_origin_t *origin, tb_kafka_tracker_t *tracker, int wait_ms);
/* A job for a message that is not a task, at @p offset of @p partition:
 * a tracker for its DLQ record's copies, and, should its first try not
 * settle it, its bytes and key (settled) to be handled again by
 * tb_loop_redo_message(). */
tb_job_t *tb_loop_redo_job(tb_loop_t *w, int32_t partition, int64_t offset, uint64_t epoch);
/* What settle_other() said of @p r's message (@p raw, @p key): held (let go
 * of), to be acknowledged, or, the DLQ away, to be tried again after a
 * back-off for as long as its partition is ours. Left unacknowledged
 * until its next delivery, it would hold its partition's commits back
 * until a restart or a rebalance. */
void tb_loop_settled(tb_loop_t *w, tb_job_t *r, int rc, const void *raw, size_t len,
		     const void *key, size_t key_len);
/* A message settle_other() could not settle, handled again (by
 * tb_loop_admit_waiting()). */
void tb_loop_redo_message(tb_loop_t *w, tb_job_t *j);
/* One consumed message: a task to the waiting line (or its session), a
 * follow-up to its session, anything else settled (intake.h). */
void tb_loop_handle(tb_loop_t *w, const rd_kafka_message_t *m);

/* ------------------------------------------------- admit.c */

/*
 * Begins the waiting jobs that are due, in order, while slots are free.
 * admit() decides: already done (acknowledge), out of attempts (DLQ),
 * held by another worker's live lease or unreachable (wait, with
 * back-off, for as long as it takes: nothing runs or is acknowledged that
 * the ledger has not counted), or a new attempt (run it). A task running
 * here already waits for that run to end.
 */
void tb_loop_admit_waiting(tb_loop_t *w);

/* ------------------------------------------------- slots.c */

/* Produces to @p topic, waiting while the local queue is full (back-
 * pressure, not a failure), a minute at most. */
int tb_loop_produce(tb_loop_t *w, const char *topic, const char *key, const void *bytes, size_t len,
		    tb_kafka_tracker_t *t, tb_error_t *err);
/* The lifecycle's event sink (tb_event_sink_t.emit): @p ud is the job. */
int tb_loop_publish_event(void *ud, const tb_event_t *ev, const void *bytes, size_t len,
			  tb_error_t *err);
/* Runs @p j in a free slot (the caller checked there is one). */
int tb_loop_start_job(tb_loop_t *w, tb_job_t *j, tb_error_t *err);

/* ------------------------------------------------ settle.c */

/*
 * Sends @p rec to the DLQ topic and waits up to @p wait_ms for its
 * delivery: a message is acknowledged (or marked done) only once its DLQ
 * record is durable. @p t (NULL: one of its own) counts the record's
 * copies across tries: one delivered, even after the last wait ended,
 * settles it; one still in flight is looked at, not waited for and not
 * sent again; only once none is in flight and none was delivered is
 * (another) one sent. So a try blocks the main thread only while a copy
 * it just sent is on its way.
 */
int tb_loop_dead_letter(tb_loop_t *w, tb_dlq_t *rec, tb_kafka_tracker_t *t, int wait_ms);
/* The message is done with here: finished in its watermark, and the
 * attempt's events end with "acknowledged". */
void tb_loop_acknowledge(tb_loop_t *w, tb_job_t *j);
/* A task that will never run: to the DLQ with its history, then marked
 * done so a redelivery does not dead-letter it again. */
int tb_loop_give_up(tb_loop_t *w, tb_job_t *j, int cause, const char *reason);
/* A message that reuses a task's id for another task: to the DLQ with
 * @p reason alone; the task the id stands for is left as it is. */
int tb_loop_refuse_task(tb_loop_t *w, tb_job_t *j, const char *reason);
/* Keeps a failure the ledger could not take, to be written before the
 * next attempt begins (it decides whether one is excused). */
void tb_loop_keep_failure(tb_loop_t *w, tb_job_t *j, int code, const char *reason);
/* Acts on finished attempts: recorded, lost, retried or dead; then ack. */
void tb_loop_complete(tb_loop_t *w);

/* -------------------------------------------------- jobs.c */

/* Frees @p j and all it holds (its trackers live on while copies are in
 * flight). */
void tb_loop_free_job(tb_job_t *j);
/* Whether @p j's message is still ours: its partition assigned in the
 * assignment it came in. */
int tb_loop_ours(const tb_loop_t *w, const tb_job_t *j);
/* Lets go of @p j (not ours any more, or stopping): its lease released so
 * the partition's new owner need not wait it out. */
void tb_loop_let_go(tb_loop_t *w, tb_job_t *j);
/* Drops the waiting jobs of partition @p p: no longer ours to run. */
void tb_loop_drop_waiting(tb_loop_t *w, int p);
/* Lets every waiting job go: left unacknowledged (delivered again). */
void tb_loop_drop_all_waiting(tb_loop_t *w);
/* The job of task @p key from partition @p p in its current assignment,
 * running or waiting. A job from an earlier assignment takes nothing (the
 * task's message delivered again makes a new job), unless rebalance.c
 * adopted it into the current one when its partition came back. */
tb_job_t *tb_loop_find_job(tb_loop_t *w, const char *key, int32_t p);
/* Whether an attempt of task @p key runs here now. */
int tb_loop_is_running(const tb_loop_t *w, const char *key);
/* Takes @p j off the running list (its slot has ended). */
void tb_loop_forget_running(tb_loop_t *w, const tb_job_t *j);
/* Puts @p j at the end of the waiting line, to begin after @p delay_ms. */
void tb_loop_wait_for(tb_loop_t *w, tb_job_t *j, uint64_t delay_ms);

#endif
