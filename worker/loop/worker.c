/*
 * worker.c: the consume / dispatch / complete / commit loop.
 *
 * The main thread owns Kafka's consumer, the watermarks and the ledger
 * calls that decide acknowledgement; slot threads own one task attempt
 * each and hand the result back through a mutex-protected list. A slot
 * thread creates and destroys its own sandbox (the sandbox's init dies
 * with the thread that made it, see sandbox.h).
 */
#include "worker.h"

#include "tb/clock.h"
#include "tb/fault.h"
#include "inputs.h"
#include "intake.h"
#include "tb/metrics.h"
#include "session.h"
#include "tb/json_mpack.h"
#include "tb/kafka.h"
#include "tb/log.h"
#include "tb/runtime.h"
#include "tb/schema_followup.h"
#include "tb/schema_manifest.h"
#include "watermark.h"

#include <fcntl.h>
#include <poll.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_PARTITIONS 256
#define RETRY_BACKOFF_MS 1000
#define RETRY_BACKOFF_MAX_MS 60000
/* Attempts the platform failed (a service away, a lost lease) do not
 * count against the runtime's max_attempts, up to this many. */
#define PLATFORM_FAILURES_MAX 20
/* A consumer stuck this long in one join state is replaced. */
#define STUCK_MS 60000
#define WAIT_BACKOFF_MIN_MS 250
#define WAIT_BACKOFF_MAX_MS 10000

/* A task's place in the waiting line, and what it waits for. A parked
 * message waits in the same line, in arrival order. */
typedef struct job_wait {
	uint64_t retry_at;                 /* not before (monotonic ms) */
	unsigned backoff;                  /* the next pause */
	char **input_names, **input_tasks; /* its inputs named by an earlier task */
	size_t ninputs;                    /* (admit() waits for those tasks) */
	int input_wait;                    /* the last look found such a task not done */
} job_wait_t;

/* A task's attempt: while it runs (the main thread's and its slot's), and
 * how the last one ended, kept while the task waits to be tried again. */
typedef struct job_run {
	struct job *next_running; /* the main thread's list of running attempts */
	pthread_t thread;
	unsigned slot;
	uint64_t lease_ok; /* last renewal (monotonic ms) */
	atomic_int cancel; /* the lease is lost: stop */
	atomic_int phase;  /* tb_phase_t + 1, for liveness */
	int moved;         /* a session stopped because its partition moved or the worker
			     * stops: let go without counting it as a failure */
	int rc;            /* the last attempt's: 0 or a TB_E* */
	tb_lifecycle_result_t res;
	tb_error_t err;
	int failure_unkept; /* err holds a failure the ledger missed */
} job_run_t;

/* A message that is not a task to run (malformed, or a follow-up
 * refused), parked until its DLQ record can be sent. */
typedef struct job_parked {
	void *msg_key; /* the message's Kafka key, for its DLQ record */
	size_t msg_key_len;
} job_parked_t;

/*
 * One message the worker holds until it can be acknowledged: a task
 * (waiting in line, then running an attempt in a slot, then waiting
 * again to be retried) or a parked message. The three parts are what
 * each of those states owns; the top is the message and the task's
 * ledger facts, which every state shares.
 */
typedef struct job {
	struct job *next; /* in the waiting line, or the finished list */
	struct worker *w;
	enum { JOB_TASK, JOB_PARKED } kind;
	int32_t partition;
	int64_t offset;
	uint64_t epoch; /* the partition's assignment this message came in */
	char key[160];  /* the task's id: the message's key */
	void *value;    /* the task message, decoded again by the slot */
	size_t len;
	uint64_t attempt;
	uint64_t max_attempts;
	uint64_t received_ms, claimed_ms; /* for the phase events */
	uint64_t received_mono;           /* for how long it has waited */
	unsigned failures;                /* platform failures here: the retry pause */
	tb_kafka_tracker_t *events;       /* its events in flight (the record's) */
	tb_kafka_tracker_t *dlq;          /* its DLQ record's copies, across tries */
	tb_session_t *session;            /* interactive: its follow-ups, held with their offsets */
	job_wait_t wait;
	job_run_t run;
	job_parked_t parked;
} job_t;

typedef struct worker {
	const tb_worker_deps_t *d;
	rd_kafka_t *consumer, *producer;
	tb_sandbox_pool_t *pool; /* each slot's next sandbox, built ahead */
	tb_watermark_t *marks[MAX_PARTITIONS];
	uint64_t epochs[MAX_PARTITIONS]; /* bumped at each assignment */
	pthread_mutex_t lock;
	job_t *finished;     /* slots push here */
	int wake[2];         /* a byte when a slot finished or a message came */
	job_t *running_jobs; /* main thread only */
	job_t *waiting;      /* to begin, in arrival order: see admit_waiting */
	job_t **waiting_tail;
	unsigned nwaiting;
	unsigned ninput_waits; /* of those, tasks waiting for an earlier task */
	uint64_t busy_slots;   /* bit per slot */
	unsigned running;
	int paused;
	uint64_t lease_ms;
	uint64_t next_beat; /* monotonic ms */
	uint64_t started_ms;
	uint64_t finished_messages;
	tb_worker_stats_t *stats;
	volatile sig_atomic_t *stop;
} worker_t;

/* ------------------------------------------------------------- events */

/* Produces to @p topic, waiting while the local queue is full (back-
 * pressure, not a failure), a minute at most. */
static int produce(worker_t *w, const char *topic, const char *key, const void *bytes, size_t len,
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

/* The phase a job reached (read by liveness()); the sink's ud is the job. */
static void note_phase(void *ud, tb_phase_t phase)
{
	atomic_store(&((job_t *)ud)->run.phase, (int)phase + 1);
}

/* The sink's ud is the job. */
static int publish_event(void *ud, const tb_event_t *ev, const void *bytes, size_t len,
			 tb_error_t *err)
{
	job_t *j = ud;
	int rc = produce(j->w, j->w->d->cfg->kafka.events_topic, ev->task_id, bytes, len, j->events,
			 err);
	if (rc == 0)
		tb_metrics_events(1);
	return rc;
}

/* Every event so far delivered, and none lost since the attempt began:
 * the record's events before its done-marker (lifecycle.h). */
static int flush_events(void *ud, tb_error_t *err)
{
	job_t *j = ud;
	return tb_kafka_await(j->w->producer, j->events, 30000, err);
}

/* -------------------------------------------------------------- DLQ */

static void heartbeat(worker_t *w);

/* How long a message waits for a DLQ record it has just sent before it
 * goes back in line to be tried again (redo_message, or a task's retry). */
#define DLQ_WAIT_MS 5000

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
static int dead_letter(worker_t *w, tb_dlq_t *rec, tb_kafka_tracker_t *t, int wait_ms)
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
		    (rc = produce(w, w->d->cfg->kafka.dlq_topic, rec->task_id, sb.data, sb.size, t,
				  &err)) == 0)
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
		heartbeat(w);
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
static int dead_letter_task(worker_t *w, job_t *j, int cause, const char *reason)
{
	tb_msg_origin_t origin = { w->d->cfg->kafka.tasks_topic, j->partition, j->offset, NULL, 0 };
	tb_ledger_attempt_t *hist = NULL;
	size_t n = 0;
	tb_dlq_t rec;
	tb_error_t err;

	if (tb_intake_dead_letter(&rec, cause, reason, j->key, j->value, j->len, &origin,
				  tb_wall_ms()) < 0)
		abort(); /* out of memory */
	if (tb_ledger_history(w->d->ledger, j->key, &hist, &n, &err) == 0 && n) {
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
	int rc = dead_letter(w, &rec, j->dlq, DLQ_WAIT_MS);
	tb_msg_free(&tb_schema_dlq, &rec);
	return rc;
}

/* ---------------------------------------------------------- offsets */

/* Commits every partition whose watermark moved (asynchronously unless
 * @p sync: the last commit before leaving the group). */
static void commit_marks_how(worker_t *w, int sync)
{
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(4);

	for (int p = 0; p < MAX_PARTITIONS; p++) {
		int64_t mark = w->marks[p] ? tb_watermark_commit(w->marks[p]) : -1;
		if (mark >= 0)
			rd_kafka_topic_partition_list_add(l, w->d->cfg->kafka.tasks_topic, p)
			    ->offset = mark;
	}
	if (l->cnt) {
		rd_kafka_resp_err_t e = rd_kafka_commit(w->consumer, l, !sync);
		if (e)
			tb_warn(NULL, "commit: %s", rd_kafka_err2str(e));
	}
	rd_kafka_topic_partition_list_destroy(l);
}

static void commit_marks(worker_t *w)
{
	commit_marks_how(w, 0);
}

static void free_job(job_t *j)
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

/* Whether @p j's message is still ours: its partition assigned in the
 * assignment it came in. */
static int ours(const worker_t *w, const job_t *j)
{
	return j->partition >= 0 && j->partition < MAX_PARTITIONS && w->marks[j->partition] &&
	       w->epochs[j->partition] == j->epoch;
}

/* Lets go of @p j (not ours any more, or stopping): its lease released so
 * the partition's new owner need not wait it out. */
static void let_go(worker_t *w, job_t *j)
{
	tb_ledger_t *l = w->d->ledger;
	tb_error_t err;

	if (j->attempt && tb_ledger_release(l, j->key, j->attempt, &err) < 0)
		tb_warn(j->key, "lease not released: %s", err.msg);
	free_job(j);
}

/* Drops the waiting jobs of partition @p p: no longer ours to run. */
static void drop_waiting(worker_t *w, int p)
{
	job_t **link = &w->waiting;

	w->nwaiting = 0;
	w->ninput_waits = 0;
	while (*link) {
		job_t *j = *link;
		if (j->partition == p) {
			*link = j->next;
			let_go(w, j);
		} else {
			link = &j->next;
			w->nwaiting++;
			w->ninput_waits += j->wait.input_wait;
		}
	}
	w->waiting_tail = link;
}

/* Lets every waiting job go: left unacknowledged (delivered again). */
static void drop_all_waiting(worker_t *w)
{
	for (job_t *j = w->waiting, *next; j; j = next) {
		next = j->next;
		let_go(w, j);
	}
	w->waiting = NULL;
	w->waiting_tail = &w->waiting;
	w->nwaiting = 0;
	w->ninput_waits = 0;
}

/* Stops the running sessions of partition @p p (-1: all): their
 * follow-ups are no longer read here, so the partition's next owner (or
 * this worker, given it again) replays them from their first prompt. Not
 * a failure of the task: their attempts are let go uncounted. */
static void stop_sessions(worker_t *w, int p, const char *why)
{
	for (job_t *r = w->running_jobs; r; r = r->run.next_running)
		if ((p < 0 || r->partition == p) && r->session && !r->run.moved) {
			tb_info(r->key, "%s: the session stops, to go on at the partition's owner",
				why);
			r->run.moved = 1;
			atomic_store(&r->run.cancel, 1);
		}
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t e,
			 rd_kafka_topic_partition_list_t *parts, void *opaque)
{
	worker_t *w = opaque;
	tb_error_t err;

	if (e == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
		for (int i = 0; i < parts->cnt; i++) {
			int p = parts->elems[i].partition;
			if (p >= 0 && p < MAX_PARTITIONS && !w->marks[p]) {
				tb_watermark_new(&w->marks[p], &err);
				w->epochs[p]++;
			}
		}
		rd_kafka_assign(rk, parts);
		/* A partition assigned again keeps the pause it had (librdkafka
		 * keeps its state): resume all, and let pace() decide again. */
		rd_kafka_resume_partitions(rk, parts);
		w->paused = 0;
		tb_info(NULL, "assigned %d partitions", parts->cnt);
	} else {
		/* No commit here: the main loop commits every pass, and a
		 * commit sent from inside a rebalance (with the coordinator
		 * away, after a broker restart) can keep librdkafka 2.0.2 from
		 * finishing the unassign. What finished since the last commit
		 * is delivered to the new owner, which finds it done. Tasks
		 * still running keep going under their leases, but their
		 * offsets are no longer ours. Waiting ones are let go.
		 * Interactive sessions are stopped: their follow-ups now go
		 * to the new owner, which replays the session from its first
		 * prompt once this attempt has let its lease go. */
		int lost = rd_kafka_assignment_lost(rk);
		for (int i = 0; i < parts->cnt; i++) {
			int p = parts->elems[i].partition;
			if (p >= 0 && p < MAX_PARTITIONS) {
				tb_watermark_free(w->marks[p]);
				w->marks[p] = NULL;
				drop_waiting(w, p);
				stop_sessions(w, p, "its partition moved");
			}
		}
		rd_kafka_assign(rk, NULL);
		tb_info(NULL, "%s %d partitions", lost ? "lost" : "revoked", parts->cnt);
	}
}

/* ------------------------------------------------------------- slots */

/* The done-marker, from the slot, once the manifest is durable. */
static int mark_done(void *ud, const char *task, uint64_t attempt, const char *manifest_key,
		     tb_error_t *err)
{
	tb_ledger_t *l = ud;
	return tb_ledger_done(l, task, attempt, manifest_key, err);
}

static void *slot_main(void *arg)
{
	job_t *j = arg;
	worker_t *w = j->w;
	tb_task_t task;
	char group[160];

	snprintf(group, sizeof(group), "%s", w->d->group);
	tb_lifecycle_ctx_t ctx = {
		.session = j->session,
		.policy = w->d->policy,
		.pool = w->pool,
		.store = w->d->store,
		.ledger = w->d->ledger,
		.recipes = w->d->recipes,
		.runtimes_dir = w->d->cfg->runtimes_dir,
		.work_root = w->d->cfg->work_dir,
		.group = group,
		.slot = j->run.slot,
		.worker = w->d->worker_id,
		.received_ms = j->received_ms,
		.claimed_ms = j->claimed_ms,
		.sink = { publish_event, j, flush_events, note_phase },
		.recorded = mark_done,
		.recorded_ud = w->d->ledger,
		.cancel = &j->run.cancel,
	};
	if ((j->run.rc = tb_msg_decode(&tb_schema_task, &task, j->value, j->len, &j->run.err)) ==
	    0) {
		tb_info(task.id, "attempt %llu starts in slot %u", (unsigned long long)j->attempt,
			j->run.slot);
		j->run.rc = tb_lifecycle_run(&ctx, &task, j->attempt, &j->run.res, &j->run.err);
		tb_msg_free(&tb_schema_task, &task);
	}
	pthread_mutex_lock(&w->lock);
	j->next = w->finished;
	w->finished = j;
	pthread_mutex_unlock(&w->lock);
	char b = 's';
	if (write(w->wake[1], &b, 1) < 0) { /* full: a wake-up is pending anyway */
	}
	return NULL;
}

/* Runs @p j in a free slot (the caller checked there is one). */
static int start_job(worker_t *w, job_t *j, tb_error_t *err)
{
	unsigned slot = 0;

	while (slot < w->d->cfg->slots && (w->busy_slots >> slot & 1))
		slot++;
	j->run.slot = slot;
	j->run.lease_ok = tb_mono_ms();
	atomic_store(&j->run.cancel, 0);
	atomic_store(&j->run.phase, 0);
	j->run.moved = 0;
	if (j->session) /* a new attempt replays the session from its start */
		tb_session_rewind(j->session);
	memset(&j->run.res, 0, sizeof(j->run.res));
	w->busy_slots |= 1ull << slot;
	w->running++;
	if (pthread_create(&j->run.thread, NULL, slot_main, j) != 0) {
		w->busy_slots &= ~(1ull << slot);
		w->running--;
		return tb_error_set(err, TB_EIO, "cannot start a slot thread");
	}
	j->run.next_running = w->running_jobs;
	w->running_jobs = j;
	return 0;
}

/* The job of task @p key from partition @p p in its current assignment,
 * running or waiting. A job from an earlier assignment (its session
 * stopped when the partition moved, even if it came back) takes nothing:
 * the task's message delivered again made a new job for that. */
static job_t *find_job(worker_t *w, const char *key, int32_t p)
{
	for (job_t *r = w->running_jobs; r; r = r->run.next_running)
		if (r->partition == p && ours(w, r) && !strcmp(r->key, key))
			return r;
	for (job_t *r = w->waiting; r; r = r->next)
		if (r->kind != JOB_PARKED && r->partition == p && ours(w, r) &&
		    !strcmp(r->key, key))
			return r;
	return NULL;
}

static int is_running(const worker_t *w, const char *key)
{
	for (const job_t *r = w->running_jobs; r; r = r->run.next_running)
		if (!strcmp(r->key, key))
			return 1;
	return 0;
}

static void forget_running(worker_t *w, const job_t *j)
{
	for (job_t **p = &w->running_jobs; *p; p = &(*p)->run.next_running)
		if (*p == j) {
			*p = j->run.next_running;
			return;
		}
}

/* Puts @p j at the end of the waiting line, to begin after @p delay_ms. */
static void wait_for(worker_t *w, job_t *j, uint64_t delay_ms)
{
	j->wait.retry_at = tb_mono_ms() + delay_ms;
	j->next = NULL;
	*w->waiting_tail = j;
	w->waiting_tail = &j->next;
	w->nwaiting++;
	w->ninput_waits += j->wait.input_wait;
}

/* ------------------------------------------------------- heartbeats */

/* This worker's liveness record (schemas/keys.md). */
static char *liveness(const worker_t *w)
{
	json_t *tasks = json_array();
	for (const job_t *j = w->running_jobs; j; j = j->run.next_running) {
		int ph = atomic_load(&j->run.phase);
		json_array_append_new(tasks,
				      json_pack("{s:s,s:I,s:i,s:I,s:s}", "task", j->key, "attempt",
						(json_int_t)j->attempt, "slot", (int)j->run.slot,
						"since_ms", (json_int_t)j->claimed_ms, "phase",
						tb_phase_name(ph > 0 ? ph - 1 : TB_PHASE_CLAIMED)));
	}
	json_t *o = json_pack("{s:s,s:i,s:I,s:I,s:i,s:i,s:o,s:I}", "worker", w->d->worker_id, "pid",
			      (int)getpid(), "started_ms", (json_int_t)w->started_ms,
			      "heartbeat_ms", (json_int_t)tb_wall_ms(), "slots",
			      (int)w->d->cfg->slots, "waiting", (int)w->nwaiting, "tasks", tasks,
			      "finished", (json_int_t)w->finished_messages);
	char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(o);
	return text;
}

/*
 * Every third of the lease time: renews the lease of each running attempt,
 * says this worker is alive and has the offsets committed again. A lease the ledger fenced, or one not
 * renewed for a whole lease time (the ledger unreachable: it may have
 * expired and been taken), stops its run.
 */
static void heartbeat(worker_t *w)
{
	tb_ledger_t *l = w->d->ledger;
	uint64_t now = tb_mono_ms();
	tb_error_t err;

	if (now < w->next_beat)
		return;
	w->next_beat = now + w->lease_ms / 3;
	for (job_t *j = w->running_jobs; j; j = j->run.next_running) {
		if (atomic_load(&j->run.cancel))
			continue;
		int rc = tb_ledger_renew(l, j->key, j->attempt, w->lease_ms, &err);
		if (rc == 0) {
			j->run.lease_ok = tb_mono_ms();
		} else if (rc == TB_EFENCED ||
			   tb_mono_ms() - j->run.lease_ok >= w->lease_ms * 2 / 3) {
			/* fenced, or two beats missed: stop before the lease
			 * can lapse and another worker begin */
			tb_warn(j->key, "attempt %llu lost its lease, stopping it: %s",
				(unsigned long long)j->attempt, err.msg);
			atomic_store(&j->run.cancel, 1);
		} else {
			tb_warn(j->key, "lease not renewed: %s", err.msg);
		}
	}
	/* A commit sent while the broker was away is lost: send the marks
	 * again (committing the same offset twice is harmless). */
	for (int p = 0; p < MAX_PARTITIONS; p++)
		if (w->marks[p])
			tb_watermark_resend(w->marks[p]);
	char *info = liveness(w);
	if (info && tb_ledger_alive(l, info, w->lease_ms, &err) < 0)
		tb_warn(NULL, "liveness not recorded: %s", err.msg);
	free(info);
}

/* ---------------------------------------------------------- outcomes */

static int refuse(worker_t *w, const tb_followup_t *f, const void *raw, size_t len,
		  const tb_msg_origin_t *origin, const char *why, tb_kafka_tracker_t *t,
		  int wait_ms);
static int orphan(worker_t *w, const tb_followup_t *f, const void *raw, size_t len,
		  const tb_msg_origin_t *origin, tb_kafka_tracker_t *t, int wait_ms);
static job_t *redo_job(worker_t *w, int32_t partition, int64_t offset, uint64_t epoch);
static void settled(worker_t *w, job_t *r, int rc, const void *raw, size_t len, const void *key,
		    size_t key_len);
static void redo_message(worker_t *w, job_t *j);

/* The follow-ups an interactive task's job held, once its message is
 * finished: those its recorded attempt took finish with it; one it did
 * not take (the session ended first) is dead-lettered; when no attempt
 * was recorded here (dead-lettered, or found done), the ledger decides as
 * for any follow-up without a session. The task's message delivered
 * again, held too, finishes. A follow-up whose DLQ record cannot be
 * written yet is tried again (redo_message). */
static void settle_followups(worker_t *w, job_t *j)
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
			job_t *r = redo_job(w, j->partition, off, j->epoch);
			char why[256];
			snprintf(
			    why, sizeof(why),
			    "follow-up %llu: the session ended before it took it (it took %llu)",
			    (unsigned long long)seq, (unsigned long long)j->run.res.followups);
			settled(w, r,
				recorded
				    ? refuse(w, &f, raw, len, &origin, why, r->dlq, DLQ_WAIT_MS)
				    : orphan(w, &f, raw, len, &origin, r->dlq, DLQ_WAIT_MS),
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

/* The message is done with here: finished in its watermark, and the
 * attempt's events end with "acknowledged". */
static void acknowledge(worker_t *w, job_t *j)
{
	tb_error_t err;

	if (!ours(w, j) || tb_watermark_finish(w->marks[j->partition], j->offset, &err) < 0)
		return; /* not ours any more: the new owner acknowledges it */
	w->finished_messages++;
	if (j->session)
		settle_followups(w, j);
	if (j->run.res.events) {
		tb_event_sink_t sink = { publish_event, j, NULL, NULL };
		if (tb_lifecycle_acknowledged(&sink, j->key, j->attempt, j->run.res.events,
					      j->run.res.last_ms, &err) < 0)
			tb_warn(j->key, "no acknowledged event: %s", err.msg);
	}
	tb_fault_point(tb_phase_name(TB_PHASE_ACKNOWLEDGED));
}

/* A task that will never run: to the DLQ with its history, then marked
 * done so a redelivery does not dead-letter it again. */
static int give_up(worker_t *w, job_t *j, int cause, const char *reason)
{
	tb_ledger_t *l = w->d->ledger;
	tb_error_t err;
	int rc;

	if ((rc = dead_letter_task(w, j, cause, reason)) < 0)
		return rc;
	tb_metrics_task("dead-lettered");
	if (tb_ledger_done(l, j->key, j->attempt, "", &err) < 0)
		tb_warn(j->key, "no done-marker for the dead letter: %s", err.msg);
	return 0;
}

/* Keeps a failure the ledger could not take, to be written before the
 * next attempt begins (it decides whether one is excused). */
static void keep_failure(worker_t *w, job_t *j, int code, const char *reason)
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
static void retry_later(worker_t *w, job_t *j, uint64_t pause)
{
	if (!ours(w, j)) {
		tb_info(j->key, "its partition moved: left to the new owner");
		let_go(w, j);
		return;
	}
	j->wait.backoff = WAIT_BACKOFF_MIN_MS;
	wait_for(w, j, pause < RETRY_BACKOFF_MAX_MS ? pause : RETRY_BACKOFF_MAX_MS);
}

/* Acts on finished attempts: recorded, lost, retried or dead; then ack. */
static void complete(worker_t *w)
{
	job_t *list;
	tb_ledger_t *l = w->d->ledger;
	tb_error_t err;

	pthread_mutex_lock(&w->lock);
	list = w->finished;
	w->finished = NULL;
	pthread_mutex_unlock(&w->lock);
	for (job_t *j = list, *next; j; j = next) {
		next = j->next;
		pthread_join(j->run.thread, NULL);
		w->busy_slots &= ~(1ull << j->run.slot);
		w->running--;
		forget_running(w, j);
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
			keep_failure(w, j, TB_EBUSY,
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
			keep_failure(w, j, TB_EFENCED, j->run.err.msg);
			retry_later(w, j, RETRY_BACKOFF_MS);
			continue;
		} else if (j->run.rc != TB_EPOISON) {
			/* The platform failed, not the task: another attempt
			 * after a pause growing with each failure (admission
			 * decides whether one is left), with the offset still
			 * unfinished. */
			uint64_t pause = (uint64_t)RETRY_BACKOFF_MS
					 << (j->failures < 6 ? j->failures : 6);
			j->failures++;
			w->stats->retried++;
			tb_metrics_failure(tb_error_name(j->run.rc));
			tb_warn(j->key, "attempt %llu failed (%s), retrying in %llu ms: %s",
				(unsigned long long)j->attempt, tb_error_name(j->run.rc),
				(unsigned long long)pause, j->run.err.msg);
			keep_failure(w, j, j->run.rc, j->run.err.msg);
			retry_later(w, j, pause);
			continue;
		} else {
			keep_failure(w, j, j->run.rc, j->run.err.msg);
			if (give_up(w, j, TB_DLQ_POISON, j->run.err.msg) < 0) {
				retry_later(w, j, RETRY_BACKOFF_MS); /* the DLQ is away */
				continue;
			}
		}
		acknowledge(w, j);
		free_job(j);
	}
}

/* ------------------------------------------------------------ intake */

/*
 * Whether attempt j->attempt is past the task's budget: max_attempts
 * counts the attempts that ended without a word (the worker died: a task
 * that kills its worker each time ends in the DLQ) and those that failed
 * for the task's own reasons; attempts the platform failed (the store,
 * ledger or events away, a lost lease: a code other than poison in the
 * ledger) are excused, PLATFORM_FAILURES_MAX of them. Why, into @p why.
 * @return 1 over, 0 not, TB_ERETRY if the ledger cannot say (wait).
 */
static int over_budget(worker_t *w, const job_t *j, char *why, size_t len)
{
	tb_ledger_t *l = w->d->ledger;
	tb_ledger_attempt_t *hist = NULL;
	tb_ledger_task_t t;
	uint64_t excused = 0;
	size_t n = 0;
	tb_error_t err;

	if (j->attempt <= j->max_attempts)
		return 0;
	/* Counted from the last revive (`taskbox dlq send`) on. */
	if (tb_ledger_inspect(l, j->key, &t, &err) < 0 ||
	    tb_ledger_history(l, j->key, &hist, &n, &err) < 0) {
		snprintf(why, len, "no history to count attempts by: %.500s", err.msg);
		return TB_ERETRY;
	}
	uint64_t base = t.base < j->attempt ? t.base : 0, begun = j->attempt - base;
	/* distinct attempts since base, before this one (a failure may be
	 * kept twice when a reply was lost) */
	uint64_t moved = 0;
	for (size_t i = 0; i < n; i++) {
		int dup = 0;
		for (size_t k = 0; k < i && !dup; k++)
			dup = hist[k].attempt == hist[i].attempt;
		if (dup || hist[i].attempt <= base || hist[i].attempt >= j->attempt)
			continue;
		if (!strcmp(hist[i].code, tb_error_name(TB_EBUSY)))
			moved++; /* a session stopped to move: no attempt spent */
		else if (hist[i].code[0] && strcmp(hist[i].code, tb_error_name(TB_EPOISON)))
			excused++;
	}
	begun -= moved < begun ? moved : begun - 1;
	if (excused > begun - 1)
		excused = begun - 1;
	int over = excused >= PLATFORM_FAILURES_MAX || begun - excused > j->max_attempts;
	if (excused >= PLATFORM_FAILURES_MAX)
		snprintf(why, len, "the platform failed this task %llu times; the last: %.400s",
			 (unsigned long long)excused, n ? hist[n - 1].reason : "?");
	else if (over)
		snprintf(why, len,
			 "no attempts left: %llu of %llu begun ended without a result "
			 "(max_attempts %llu)",
			 (unsigned long long)(begun - 1 - excused), (unsigned long long)(begun - 1),
			 (unsigned long long)j->max_attempts);
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
static int admit_inputs(worker_t *w, const job_t *j, char *why, size_t len, tb_error_t *err)
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
			return rc; /* the ledger's */
		if (rc == TB_EBUSY && !t.attempts &&
		    tb_mono_ms() - j->received_mono >= INPUT_UNSEEN_MS) {
			snprintf(why, len,
				 "input %.200s: task %.128s is unknown: the ledger has not seen it "
				 "in %d minutes",
				 name, task, INPUT_UNSEEN_MS / 60000);
			return TB_EPOISON;
		}
		snprintf(why, len, "input %.200s: %.380s", name, err->msg);
		return rc == TB_EBUSY ? TB_EBUSY : TB_EPOISON;
	}
	return 0;
}

/* What the ledger says of a waiting task, asked before it may begin. */
typedef enum admission {
	ADMIT_RUN,        /* an attempt is begun (its lease held): run it */
	ADMIT_DONE,       /* done before: acknowledge only */
	ADMIT_DEAD,       /* out of attempts, or poison: dead-letter it */
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
static admission_t admit(worker_t *w, job_t *j, int *cause, char *why, size_t len, tb_error_t *err)
{
	tb_ledger_t *l = w->d->ledger;
	int inputs = 0, rc, over;

	j->wait.input_wait = 0;
	if (j->run.failure_unkept) /* the last attempt's, first */
		keep_failure(w, j, j->run.err.code, j->run.err.msg);
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
	if ((rc = tb_ledger_begin(l, j->key, w->lease_ms, &j->attempt, err)) < 0)
		return rc == TB_EEXIST  ? ADMIT_DONE
		       : rc == TB_EBUSY ? ADMIT_WAIT_LEASE
					: ADMIT_WAIT_AWAY;
	if (inputs == TB_EPOISON) {
		/* an attempt, for the done-marker that goes with the DLQ */
		keep_failure(w, j, TB_EPOISON, why);
		*cause = TB_DLQ_POISON;
		return ADMIT_DEAD;
	}
	if ((over = over_budget(w, j, why, len)) < 0) {
		/* this attempt never ran: excused, and its lease let go */
		keep_failure(w, j, TB_ERETRY, why);
		tb_ledger_release(l, j->key, j->attempt, err);
		tb_error_set(err, over, "%s", why);
		return ADMIT_WAIT_AWAY;
	}
	if (over) {
		*cause = TB_DLQ_MAX_ATTEMPTS;
		return ADMIT_DEAD;
	}
	return ADMIT_RUN;
}

/*
 * Begins the waiting jobs that are due, in order, while slots are free.
 * admit() decides: already done (acknowledge), out of attempts (DLQ),
 * held by another worker's live lease or unreachable (wait, with
 * back-off, for as long as it takes: nothing runs or is acknowledged that
 * the ledger has not counted), or a new attempt (run it). A task running
 * here already waits for that run to end.
 */
static void admit_waiting(worker_t *w)
{
	job_t *list = w->waiting;
	uint64_t now = tb_mono_ms();
	tb_error_t err;

	w->waiting = NULL;
	w->waiting_tail = &w->waiting;
	w->nwaiting = 0;
	w->ninput_waits = 0;
	for (job_t *j = list, *next; j; j = next) {
		next = j->next;
		if (j->kind == JOB_PARKED && !*w->stop && j->wait.retry_at <= now) {
			redo_message(w, j); /* takes no slot */
			continue;
		}
		if (*w->stop || j->wait.retry_at > now || j->kind == JOB_PARKED ||
		    w->running >= w->d->cfg->slots || is_running(w, j->key)) {
			uint64_t at = j->wait.retry_at;
			wait_for(w, j, at > now ? at - now : 0);
			continue;
		}
		char why[600] = "";
		int cause = TB_DLQ_MAX_ATTEMPTS;
		admission_t a = admit(w, j, &cause, why, sizeof(why), &err);
		if (a == ADMIT_RUN) {
			j->claimed_ms = tb_wall_ms();
			tb_kafka_tracker_reset(j->events);
			if (start_job(w, j, &err) == 0)
				continue;
			tb_err(j->key, "%s", err.msg);
			keep_failure(w, j, TB_EIO, err.msg);
			a = ADMIT_WAIT_AWAY;
		} else if (a == ADMIT_DEAD && give_up(w, j, cause, why) < 0) {
			tb_error_set(&err, TB_ERETRY, "%s", "the DLQ is away");
			a = ADMIT_WAIT_AWAY;
		} else if (a == ADMIT_DONE) {
			/* Done before (a replay after a crash, a duplicate, or
			 * another worker's run): acknowledge only. */
			tb_info(j->key, "already done; acknowledged without running");
			w->stats->already++;
			j->attempt = 0;
		}
		if (a == ADMIT_WAIT_INPUT || a == ADMIT_WAIT_LEASE || a == ADMIT_WAIT_AWAY) {
			/* Ask again after a pause that doubles each time. */
			if (!j->wait.backoff)
				j->wait.backoff = WAIT_BACKOFF_MIN_MS;
			/* waiting for an earlier task is a task's ordinary course */
			tb_log(a == ADMIT_WAIT_INPUT ? TB_LOG_INFO : TB_LOG_WARN, j->key,
			       "waiting %u ms %s: %s", j->wait.backoff,
			       a == ADMIT_WAIT_INPUT   ? "for an earlier task"
			       : a == ADMIT_WAIT_LEASE ? "for another worker's run"
						       : "for the ledger or DLQ",
			       err.msg);
			wait_for(w, j, j->wait.backoff);
			j->wait.backoff = j->wait.backoff * 2 > WAIT_BACKOFF_MAX_MS
					      ? WAIT_BACKOFF_MAX_MS
					      : j->wait.backoff * 2;
			continue;
		}
		/* dead-lettered, or done before: acknowledged */
		memset(&j->run.res, 0, sizeof(j->run.res));
		acknowledge(w, j);
		free_job(j);
	}
}

/* A follow-up that no session takes, to the DLQ with @p why. @return 0
 * (acknowledge it), or < 0 when the DLQ is away (settled: tried again later). */
static int refuse(worker_t *w, const tb_followup_t *f, const void *raw, size_t len,
		  const tb_msg_origin_t *origin, const char *why, tb_kafka_tracker_t *t,
		  int wait_ms)
{
	tb_dlq_t rec;

	if (tb_intake_dead_letter(&rec, TB_DLQ_ORPHAN, why, f->task_id, raw, len, origin,
				  tb_wall_ms()) < 0)
		abort(); /* out of memory */
	int rc = dead_letter(w, &rec, t, wait_ms);
	tb_msg_free(&tb_schema_dlq, &rec);
	return rc;
}

/* A follow-up for a task with no session here: replayed after its session
 * took it (acknowledged), or refused with what the ledger says. */
static int orphan(worker_t *w, const tb_followup_t *f, const void *raw, size_t len,
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
	return refuse(w, f, raw, len, origin, why, tracker, wait_ms);
}

/* A follow-up: to its task's session, which holds it (offset and all) until
 * its attempt is recorded. @return 1 held; 0 acknowledge it now (a
 * duplicate, or dead-lettered); < 0 the DLQ is away (settled: tried again later). */
static int followup(worker_t *w, const tb_followup_t *f, const void *raw, size_t len,
		    const tb_msg_origin_t *origin, tb_kafka_tracker_t *t, int wait_ms)
{
	job_t *s = find_job(w, f->task_id, origin->partition);
	char why[512];

	if (s && !s->session) {
		snprintf(why, sizeof(why), "follow-up %llu: task %s is one-shot: it takes none",
			 (unsigned long long)f->seq, f->task_id);
		return refuse(w, f, raw, len, origin, why, t, wait_ms);
	}
	if (!s)
		return orphan(w, f, raw, len, origin, t, wait_ms);
	switch (tb_session_put(s->session, f, origin->offset, raw, len, why, sizeof(why))) {
	case TB_SESSION_QUEUED:
		tb_info(f->task_id, "follow-up %llu to its session", (unsigned long long)f->seq);
		return 1;
	case TB_SESSION_DUPLICATE:
		tb_info(f->task_id, "follow-up %llu again: its session has it already",
			(unsigned long long)f->seq);
		return 0;
	default:
		return refuse(w, f, raw, len, origin, why, t, wait_ms);
	}
}

/* A message that is not a task: a malformed one to the DLQ, a follow-up
 * to its session or the DLQ; @p t counts its DLQ record's copies, a copy
 * sent now is waited for up to @p wait_ms.
 * @return 1 held by a session (its offset finishes with the session's
 * task); 0 acknowledge it; < 0 not yet: the DLQ is away. */
static int settle_other(worker_t *w, tb_intake_t *in, const void *raw, size_t len,
			const tb_msg_origin_t *origin, tb_kafka_tracker_t *t, int wait_ms)
{
	if (in->kind == TB_INTAKE_DEAD)
		return dead_letter(w, &in->dlq, t, wait_ms);
	return followup(w, &in->followup, raw, len, origin, t, wait_ms);
}

/* A job for a message that is not a task, at @p offset of @p partition:
 * a tracker for its DLQ record's copies, and, should its first try not
 * settle it, its bytes and key (settled) to be handled again by
 * redo_message. */
static job_t *redo_job(worker_t *w, int32_t partition, int64_t offset, uint64_t epoch)
{
	job_t *r = calloc(1, sizeof(*r));

	if (!r || !(r->dlq = tb_kafka_tracker_new()))
		abort(); /* out of memory */
	r->w = w;
	r->kind = JOB_PARKED;
	r->partition = partition, r->offset = offset, r->epoch = epoch;
	r->wait.backoff = WAIT_BACKOFF_MIN_MS;
	return r;
}

/* What settle_other said of @p r's message (@p raw, @p key): held (let go
 * of), to be acknowledged, or, the DLQ away, to be tried again after a
 * back-off for as long as its partition is ours. Left unacknowledged
 * until its next delivery, it would hold its partition's commits back
 * until a restart or a rebalance. */
static void settled(worker_t *w, job_t *r, int rc, const void *raw, size_t len, const void *key,
		    size_t key_len)
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
		wait_for(w, r, r->wait.backoff);
		r->wait.backoff = r->wait.backoff * 2 > WAIT_BACKOFF_MAX_MS ? WAIT_BACKOFF_MAX_MS
									    : r->wait.backoff * 2;
		return;
	}
	if (rc == 0)
		acknowledge(w, r);
	free_job(r);
}

/* A message settle_other could not settle, handled again (admit_waiting). */
static void redo_message(worker_t *w, job_t *j)
{
	tb_msg_origin_t origin = { w->d->cfg->kafka.tasks_topic, j->partition, j->offset,
				   j->parked.msg_key, j->parked.msg_key_len };
	tb_intake_t in;

	if (!ours(w, j)) {
		free_job(j); /* its partition's new owner handles it */
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
	settled(w, j, rc, j->value, j->len, j->parked.msg_key, j->parked.msg_key_len);
}

static void handle(worker_t *w, const rd_kafka_message_t *m)
{
	const tb_config_t *cfg = w->d->cfg;
	tb_msg_origin_t origin = { rd_kafka_topic_name(m->rkt), m->partition, m->offset, m->key,
				   m->key_len };
	tb_intake_t in;
	tb_error_t err;

	w->stats->received++;
	if (m->partition < 0 || m->partition >= MAX_PARTITIONS || !w->marks[m->partition] ||
	    tb_watermark_start(w->marks[m->partition], m->offset, &err) < 0)
		return; /* not ours (any more), or seen: nothing to ack */
	if (tb_intake_decode(&in, m->payload, m->len, &origin, tb_wall_ms()) < 0)
		abort(); /* out of memory */
	if (in.kind != TB_INTAKE_TASK) {
		job_t *r = redo_job(w, m->partition, m->offset, w->epochs[m->partition]);
		settled(w, r,
			settle_other(w, &in, m->payload, m->len, &origin, r->dlq, DLQ_WAIT_MS),
			m->payload, m->len, m->key, m->key_len);
		tb_intake_free(&in);
		return;
	}
	job_t *j = calloc(1, sizeof(*j));
	if (!j)
		abort();
	j->w = w;
	j->partition = m->partition;
	j->offset = m->offset;
	j->epoch = w->epochs[m->partition];
	/* An interactive task delivered again while its job is here: one
	 * session, so its follow-ups have one place to go; the copy's offset
	 * finishes with it. */
	job_t *same =
	    in.task.kind == TB_TASK_INTERACTIVE ? find_job(w, in.task.id, m->partition) : NULL;
	if (same && same->session) {
		tb_info(in.task.id, "delivered again: held with its session");
		tb_session_hold(same->session, m->offset);
		tb_intake_free(&in);
		free_job(j);
		return;
	}
	if (in.task.kind == TB_TASK_INTERACTIVE && tb_session_new(&j->session, &err) < 0)
		tb_err(in.task.id, "no session (it runs one turn only): %s", err.msg);

	/* A task: it waits its turn in the ledger (admit_waiting). */
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
	size_t by_task = 0;
	for (size_t i = 0; i < in.task.inputs.n; i++)
		by_task += ((const tb_input_t *)in.task.inputs.items)[i].task != NULL;
	if (by_task && (!(j->wait.input_names = calloc(by_task, sizeof(char *))) ||
			!(j->wait.input_tasks = calloc(by_task, sizeof(char *)))))
		abort(); /* out of memory */
	for (size_t i = 0; i < in.task.inputs.n; i++) {
		const tb_input_t *x = (const tb_input_t *)in.task.inputs.items + i;
		if (!x->task)
			continue;
		if (!(j->wait.input_names[j->wait.ninputs] = strdup(x->name)) ||
		    !(j->wait.input_tasks[j->wait.ninputs] = strdup(x->task)))
			abort(); /* out of memory */
		j->wait.ninputs++;
	}
	char path[4096];
	tb_runtime_t rt;
	snprintf(path, sizeof(path), "%s/%s.json", cfg->runtimes_dir, in.task.runtime);
	j->max_attempts = tb_runtime_load(&rt, path, &err) == 0 ? rt.max_attempts : 1;
	tb_runtime_free(&rt);
	tb_intake_free(&in);
	wait_for(w, j, 0);
}

/* The next message, if one is there; else sleeps until one comes, a slot
 * finishes (the wake pipe) or 100 ms pass (heartbeats, back-offs). */
static rd_kafka_message_t *next_message(worker_t *w)
{
	rd_kafka_message_t *m = rd_kafka_consumer_poll(w->consumer, 0);
	char buf[64];

	if (m)
		return m;
	struct pollfd p = { w->wake[0], POLLIN, 0 };
	if (poll(&p, 1, 100) > 0)
		while (read(w->wake[0], buf, sizeof(buf)) > 0)
			;
	return rd_kafka_consumer_poll(w->consumer, 0);
}

/* Creates the consumer and subscribes it to the tasks topic. */
static int join(worker_t *w, tb_error_t *err)
{
	const tb_config_t *cfg = w->d->cfg;
	rd_kafka_topic_partition_list_t *sub;
	int rc;

	if ((rc = tb_kafka_consumer_new(&w->consumer, w->d->brokers, cfg->kafka.group,
					cfg->kafka.group_instance_id, &cfg->kafka.properties,
					on_rebalance, w, err)) < 0)
		return rc;
	sub = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(sub, cfg->kafka.tasks_topic, RD_KAFKA_PARTITION_UA);
	rd_kafka_subscribe(w->consumer, sub);
	rd_kafka_topic_partition_list_destroy(sub);
	w->paused = 0;
	/* A byte on the wake pipe when the consumer's queue stops being
	 * empty: the main loop sleeps on the pipe, so a message, and a slot
	 * that finished, are acted on at once. */
	rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(w->consumer);
	if (q) {
		rd_kafka_queue_io_event_enable(q, w->wake[1], "c", 1);
		rd_kafka_queue_destroy(q);
	}
	return 0;
}

/*
 * Replaces the consumer (why: @p why). The worker gives its assignment up
 * as if revoked (running tasks finish under their leases; their
 * messages, delivered again, are found done) and joins the group again.
 */
static void rejoin(worker_t *w, const char *why)
{
	tb_error_t err;

	tb_warn(NULL, "consumer failed (%s): joining the group again", why);
	for (int p = 0; p < MAX_PARTITIONS; p++) {
		tb_watermark_free(w->marks[p]);
		w->marks[p] = NULL;
	}
	drop_all_waiting(w);
	stop_sessions(w, -1, "its consumer is replaced");
	tb_kafka_forget(w->consumer);
	rd_kafka_destroy_flags(w->consumer, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	w->consumer = NULL;
	for (unsigned pause = 250; join(w, &err) < 0 && !*w->stop;
	     pause = pause * 2 > 10000 ? 10000 : pause * 2) {
		tb_err(NULL, "cannot join the group again, retrying in %u ms: %s", pause, err.msg);
		usleep(pause * 1000);
	}
}

/*
 * A consumer that cannot go on is replaced: one with a fatal error (a
 * static member fenced by the group coordinator, seen after a broker
 * restart), or one stuck finishing an unassign (librdkafka 2.0.2, with
 * commits outstanding to a coordinator that went away) for a minute.
 */
static void rejoin_if_stuck(worker_t *w)
{
	char why[512], state[40];

	if (rd_kafka_fatal_error(w->consumer, why, sizeof(why))) {
		rejoin(w, why);
		return;
	}
	uint64_t for_ms = tb_kafka_join_state(w->consumer, state, sizeof(state));
	if (!strcmp(state, "wait-unassign-to-complete") && for_ms > STUCK_MS) {
		snprintf(why, sizeof(why), "stuck in %s for %llu s", state,
			 (unsigned long long)for_ms / 1000);
		rejoin(w, why);
	}
}

/* Pauses consumption while the waiting line is full, and resumes it once
 * the line is down to half: the line holds the next tasks, read and
 * decoded, so a slot that frees starts one at once instead of waiting for
 * a fetch. A pause drops what librdkafka fetched ahead, and a resumed
 * partition's first messages take hundreds of ms to come (measured 400 ms
 * with librdkafka 2.0 and Kafka 4): a line of `slots` tasks, paused and
 * resumed at one mark, ran dry every time and left all slots idle (32
 * trivial tasks/s at 8 slots). Between the marks the line covers a refill
 * even at 100 tasks/s. Sessions hold slots while they idle, and their
 * follow-ups come on the same partitions behind the waiting tasks: the
 * line is longer then (16 x slots), so follow-ups are read while up to
 * that many tasks wait; past it they wait for a slot to free, at the
 * latest when a session's idle timeout ends it. */
static void pace(worker_t *w)
{
	unsigned slots = (unsigned)w->d->cfg->slots;
	unsigned high = 8 * slots > 32 ? 8 * slots : 32;
	for (const job_t *r = w->running_jobs; r; r = r->run.next_running)
		if (r->session) {
			high = 16 * slots > high ? 16 * slots : high;
			break;
		}
	/* Tasks waiting for an earlier task do not fill the line: that task
	 * may be behind them, unread. Up to 8 lines of them are held. */
	unsigned ready = w->nwaiting - w->ninput_waits;
	int full = w->paused ? ready > high / 2 || w->nwaiting > 4 * high
			     : ready >= high || w->nwaiting >= 8 * high;
	rd_kafka_topic_partition_list_t *a = NULL;

	if (full == w->paused || rd_kafka_assignment(w->consumer, &a) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return;
	if (full)
		rd_kafka_pause_partitions(w->consumer, a);
	else
		rd_kafka_resume_partitions(w->consumer, a);
	w->paused = full;
	rd_kafka_topic_partition_list_destroy(a);
}

int tb_worker_run(const tb_worker_deps_t *d, volatile sig_atomic_t *stop, uint64_t max_finished,
		  tb_worker_stats_t *stats, tb_error_t *err)
{
	worker_t *w = calloc(1, sizeof(*w));
	int rc;

	memset(stats, 0, sizeof(*stats));
	if (!w)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	w->d = d;
	w->stats = stats;
	w->stop = stop;
	w->waiting_tail = &w->waiting;
	w->lease_ms = d->cfg->ledger.lease_ms ? d->cfg->ledger.lease_ms : 15000;
	w->started_ms = tb_wall_ms();
	pthread_mutex_init(&w->lock, NULL);
	if (pipe2(w->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "worker: pipe");
		w->wake[0] = w->wake[1] = -1;
		goto fail;
	}
	if (d->cfg->slots > 64) {
		rc = tb_error_set(err, TB_EINVAL, "slots: at most 64 in this build");
		goto fail;
	}
	if ((rc = tb_sandbox_pool_new(&w->pool, d->policy, d->cfg->work_dir, d->group,
				      (unsigned)d->cfg->slots, err)) < 0)
		goto fail;
	if ((rc = tb_kafka_producer_new(&w->producer, d->brokers, &d->cfg->kafka.properties, err)) <
	    0)
		goto fail;
	if ((rc = join(w, err)) < 0) {
		rd_kafka_destroy(w->producer);
		goto fail;
	}
	tb_info(NULL, "worker %s: %llu slots, tasks from %s, leases of %llu ms", d->worker_id,
		(unsigned long long)d->cfg->slots, d->cfg->kafka.tasks_topic,
		(unsigned long long)w->lease_ms);

	while (!*stop && !(max_finished && w->finished_messages >= max_finished && !w->running &&
			   !w->nwaiting)) {
		rd_kafka_message_t *m = next_message(w);
		if (m) {
			if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
				handle(w, m);
			else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
				tb_warn(NULL, "consumer: %s", rd_kafka_message_errstr(m));
			rd_kafka_message_destroy(m);
		}
		rejoin_if_stuck(w);
		if (!w->consumer)
			break;
		complete(w);
		admit_waiting(w);
		tb_metrics_busy(w->running, w->nwaiting);
		heartbeat(w);
		commit_marks(w);
		pace(w);
		rd_kafka_poll(w->producer, 0);
	}
	/* Stopping: waiting tasks are left unacknowledged (delivered again);
	 * running attempts may finish (bounded by their deadlines), under
	 * their leases, and are recorded and committed; then leave the group.
	 * Interactive sessions stop at once (their follow-ups are no longer
	 * read here): the next owner replays them from their first prompt. */
	drop_all_waiting(w);
	stop_sessions(w, -1, "the worker stops");
	uint64_t drain_until = d->drain_ms ? tb_mono_ms() + d->drain_ms : 0;
	while (w->running) {
		if (drain_until && tb_mono_ms() > drain_until) {
			tb_warn(NULL,
				"%u tasks still running after the drain timeout: leaving them "
				"unacknowledged",
				w->running);
			commit_marks(w);
			rd_kafka_flush(w->producer, 5000);
			/* w stays allocated, and the pool's threads alive
			 * (the parents of their sandboxes): the slot threads
			 * still use them until the caller exits, at once. */
			return tb_error_set(err, TB_ETIMEOUT, "drain timeout");
		}
		usleep(50000);
		complete(w);
		heartbeat(w);
		rd_kafka_poll(w->producer, 0);
	}
	drop_all_waiting(w); /* attempts retried or fenced meanwhile: left too */
	if (w->consumer)
		commit_marks_how(w, 1);
	rd_kafka_flush(w->producer, 10000);
	if (w->consumer) { /* none if told to stop while joining again */
		tb_kafka_forget(w->consumer);
		rd_kafka_consumer_close(w->consumer);
		rd_kafka_destroy(w->consumer);
	}
	rd_kafka_destroy(w->producer);
	tb_sandbox_pool_free(w->pool); /* every slot thread has ended */
	for (int p = 0; p < MAX_PARTITIONS; p++)
		tb_watermark_free(w->marks[p]);
	close(w->wake[0]);
	close(w->wake[1]);
	pthread_mutex_destroy(&w->lock);
	free(w);
	return 0;
fail:
	tb_sandbox_pool_free(w->pool);
	if (w->wake[0] >= 0) {
		close(w->wake[0]);
		close(w->wake[1]);
	}
	pthread_mutex_destroy(&w->lock);
	free(w);
	return rc;
}
