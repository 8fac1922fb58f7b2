/*
 * worker.c: the consume / dispatch / complete / commit loop (the other
 * files of the loop are listed in loop_int.h).
 *
 * The main thread owns Kafka's consumer, the watermarks and the ledger
 * calls that decide acknowledgement; slot threads own one task attempt
 * each and hand the result back through a mutex-protected list. A slot
 * thread creates and destroys its own sandbox (the sandbox's init dies
 * with the thread that made it, see sandbox.h).
 */
#include "worker.h"
#include "loop_int.h"

#include "blackbox.h"

#include "tb/clock.h"
#include "tb/health.h"
#include "tb/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Commits every partition whose watermark moved (asynchronously unless
 * @p sync: the last commit before leaving the group). */
static void commit_marks_how(tb_loop_t *w, int sync)
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

static void commit_marks(tb_loop_t *w)
{
	if (tb_loop_may_commit(w))
		commit_marks_how(w, 0);
}

/* This worker's liveness record (schemas/keys.md). */
static char *liveness(const tb_loop_t *w)
{
	json_t *tasks = json_array();
	for (const tb_job_t *j = w->running_jobs; j; j = j->run.next_running) {
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
	if (o && w->d->images) {
		uint64_t images, bytes, max;
		tb_image_cache_usage(w->d->images, &images, &bytes, &max);
		json_object_set_new(o, "image_cache",
				    json_pack("{s:I,s:I,s:I}", "images", (json_int_t)images,
					      "bytes", (json_int_t)bytes, "max_bytes",
					      (json_int_t)max));
	}
	char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(o);
	return text;
}

/* How often the worker says it is alive in the ledger, which is also how
 * soon /readyz sees the ledger go away or come back: every 2 s, or every
 * third of the lease if that is shorter. */
#define ALIVE_MS 2000

/* This worker's liveness, written; the ledger's health from how it went. */
static void say_alive(tb_loop_t *w)
{
	uint64_t now = tb_mono_ms();
	tb_error_t err;

	if (now < w->next_alive)
		return;
	w->next_alive = now + (w->lease_ms / 3 < ALIVE_MS ? w->lease_ms / 3 : ALIVE_MS);
	char *info = liveness(w);
	int alive = info ? tb_ledger_alive(w->d->ledger, info, w->lease_ms, &err) : TB_ENOMEM;
	if (alive < 0 && info)
		tb_warn(NULL, "liveness not recorded: %s", err.msg);
	tb_health_dep(TB_DEP_LEDGER, alive == 0,
		      alive == 0 ? "answered"
		      : info     ? err.msg
				 : "out of memory");
	free(info);
}

void tb_loop_heartbeat(tb_loop_t *w)
{
	tb_ledger_t *l = w->d->ledger;
	uint64_t now = tb_mono_ms();
	tb_error_t err;

	say_alive(w);
	if (now < w->next_beat)
		return;
	w->next_beat = now + w->lease_ms / 3;
	for (tb_job_t *j = w->running_jobs; j; j = j->run.next_running) {
		if (atomic_load(&j->run.cancel))
			continue;
		int ph = atomic_load(&j->run.phase);
		int rc =
		    tb_ledger_renew_at(l, j->key, j->attempt, w->lease_ms,
				       ph > 0 ? tb_phase_name((tb_phase_t)(ph - 1)) : NULL, &err);
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
	/* A commit that failed (the broker away, a rebalance) is sent
	 * again (committing the same offset twice is harmless). Not more
	 * often: in librdkafka 2.0.2 a commit a rebalance refuses loses the
	 * whole cooperative assignment (rebalance.c). */
	if (w->consumer && tb_kafka_commit_failed(w->consumer))
		for (int p = 0; p < MAX_PARTITIONS; p++)
			if (w->marks[p])
				tb_watermark_resend(w->marks[p]);
	tb_loop_notice_expired(w);
}

/* The next message, if one is there; else sleeps until one comes, a slot
 * finishes (the wake pipe) or 100 ms pass (heartbeats, back-offs). */
static rd_kafka_message_t *next_message(tb_loop_t *w)
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
static int join(tb_loop_t *w, tb_error_t *err)
{
	const tb_config_t *cfg = w->d->cfg;
	rd_kafka_topic_partition_list_t *sub;
	int rc;

	if ((rc = tb_kafka_consumer_new(&w->consumer, w->d->brokers, cfg->kafka.group,
					cfg->kafka.group_instance_id,
					tb_kafka_assignors[cfg->kafka.assignor],
					&cfg->kafka.properties, tb_loop_on_rebalance, w, err)) < 0)
		return rc;
	sub = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(sub, cfg->kafka.tasks_topic, RD_KAFKA_PARTITION_UA);
	rd_kafka_subscribe(w->consumer, sub);
	rd_kafka_topic_partition_list_destroy(sub);
	w->paused = 0;
	w->ever_assigned = 0;
	w->rebalancing_since = 0;
	w->rebalanced_at = 0;
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

/* How long leaving the group may take when the worker stops. */
#define CLOSE_MS 20000

/* Consumers left as they are (consumer_end), still reachable: the
 * process exits soon after, or lives on with what they hold. */
static rd_kafka_t *left_alone[8];

static void leave_alone(rd_kafka_t *c, const char *why)
{
	tb_warn(NULL, "the consumer is left as it is, not destroyed: %s", why);
	for (size_t i = 0; i < sizeof(left_alone) / sizeof(left_alone[0]); i++)
		if (!left_alone[i]) {
			left_alone[i] = c;
			return;
		}
}

/* Leaves the group: the close served here (its rebalance and commit
 * callbacks; fetched messages dropped: their offsets are not committed)
 * for CLOSE_MS at most. @return 1 closed, 0 not in time. */
static int close_bounded(rd_kafka_t *c)
{
	rd_kafka_queue_t *q = rd_kafka_queue_new(c);
	rd_kafka_error_t *e = q ? rd_kafka_consumer_close_queue(c, q) : NULL;
	int closed = 0;

	if (!q)
		return 0;
	if (e) {
		tb_warn(NULL, "leaving the consumer group: %s", rd_kafka_error_string(e));
		rd_kafka_error_destroy(e);
	} else {
		for (uint64_t until = tb_mono_ms() + CLOSE_MS;
		     !(closed = rd_kafka_consumer_closed(c)) && tb_mono_ms() < until;) {
			rd_kafka_message_t *m = rd_kafka_consume_queue(q, 100);
			if (m)
				rd_kafka_message_destroy(m);
		}
	}
	rd_kafka_queue_destroy(q);
	return closed;
}

/*
 * Ends the consumer: leaving the group first if @p leave (committing
 * nothing more: the caller has), else at once (a consumer that failed).
 * Two defects of librdkafka 2.0.2's cooperative protocol are stepped
 * around. A consumer given an assignment while it closes can hang in the
 * close, and then in its destroy (its #4527, fixed in 2.4.0): the close
 * is bounded, and a consumer not closed in time is left as it is. And a
 * cooperative consumer destroyed after its first JoinGroup answer but
 * before its first assignment crashes (#4381, fixed in 2.3.0): one that
 * never had an assignment is left as it is too (closed if @p leave). The
 * worker is about to exit then, or the consumer failed for good and is
 * replaced; what it holds is the cost.
 */
static void consumer_end(tb_loop_t *w, int leave)
{
	rd_kafka_t *c = w->consumer;
	int coop = tb_loop_cooperative(w);
	int closed = leave ? close_bounded(c) : 1;

	w->consumer = NULL;
	if (coop && !w->ever_assigned)
		leave_alone(c, "it never had an assignment (librdkafka 2.0.2 crashes destroying "
			       "such a cooperative one)");
	else if (!closed)
		leave_alone(c, "leaving the group took over 20 s");
	else if (leave)
		rd_kafka_destroy(c);
	else
		rd_kafka_destroy_flags(c, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	tb_kafka_forget(c);
}

/*
 * Replaces the consumer (why: @p why). The worker gives its assignment up
 * as if revoked (running tasks finish under their leases; their
 * messages, delivered again, are found done) and joins the group again.
 */
static void rejoin(tb_loop_t *w, const char *why)
{
	tb_error_t err;

	tb_warn(NULL, "consumer failed (%s): joining the group again", why);
	tb_health_dep(TB_DEP_KAFKA, 0, "the consumer failed and is joining the group again");
	for (int p = 0; p < MAX_PARTITIONS; p++) {
		tb_watermark_free(w->marks[p]);
		w->marks[p] = NULL;
	}
	tb_loop_drop_all_waiting(w);
	tb_loop_stop_sessions(w, -1, "its consumer is replaced");
	consumer_end(w, 0);
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
static void rejoin_if_stuck(tb_loop_t *w)
{
	char why[512], state[40];

	if (rd_kafka_fatal_error(w->consumer, why, sizeof(why))) {
		rejoin(w, why);
		return;
	}
	uint64_t for_ms = tb_kafka_join_state(w->consumer, state, sizeof(state));
	if ((!strcmp(state, "wait-unassign-to-complete") ||
	     !strcmp(state, "wait-incr-unassign-to-complete")) &&
	    for_ms > STUCK_MS) {
		snprintf(why, sizeof(why), "stuck in %s for %llu s", state,
			 (unsigned long long)for_ms / 1000);
		rejoin(w, why);
	}
}

/*
 * Resumes the partitions of @p a, and has them fetched now. librdkafka
 * (2.0) clears a partition's pause without waking the broker thread that
 * fetches it: with every partition paused, that thread sleeps out its
 * one-second turn, and the line ran dry at a resume for up to a second
 * (issue 45: in librdkafka's fetch log the partitions turned fetchable
 * ~480 ms after the resume, and the bench's throughput had a lower mode).
 * A seek to the position a resume fetches from anyway (the last message
 * read + 1) wakes it. An empty fetch still in flight is waited for even
 * so (up to fetch.wait.max.ms, kafka.properties). A partition read
 * nothing from yet has no position: its resume looks its offset up,
 * which wakes the thread too.
 */
static void resume(rd_kafka_t *c, rd_kafka_topic_partition_list_t *a)
{
	rd_kafka_topic_partition_list_t *at;

	rd_kafka_resume_partitions(c, a);
	if (rd_kafka_position(c, a) != RD_KAFKA_RESP_ERR_NO_ERROR ||
	    !(at = rd_kafka_topic_partition_list_new(a->cnt)))
		return; /* fetched at the broker thread's next turn */
	for (int i = 0; i < a->cnt; i++)
		if (a->elems[i].offset >= 0)
			rd_kafka_topic_partition_list_add(at, a->elems[i].topic,
							  a->elems[i].partition)
			    ->offset = a->elems[i].offset;
	rd_kafka_error_t *e = at->cnt ? rd_kafka_seek_partitions(c, at, 0) : NULL;
	if (e) /* async: only a bad argument is said here */
		tb_debug(NULL, "consumer: seek on resume: %s", rd_kafka_error_string(e));
	rd_kafka_error_destroy(e);
	rd_kafka_topic_partition_list_destroy(at);
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
static void pace(tb_loop_t *w)
{
	unsigned slots = (unsigned)w->d->cfg->slots;
	unsigned high = 8 * slots > 32 ? 8 * slots : 32;
	for (const tb_job_t *r = w->running_jobs; r; r = r->run.next_running)
		if (r->session) {
			high = 16 * slots > high ? 16 * slots : high;
			break;
		}
	/* Tasks waiting for an earlier task do not fill the line: that task
	 * may be behind them, unread. Up to 8 lines of them are held. */
	unsigned ready = w->nwaiting - w->ninput_waits;
	int full = w->paused ? ready > high / 2 || w->nwaiting > 4 * high
			     : ready >= high || w->nwaiting >= 8 * high;
	full = full || !w->serving; /* a worker that cannot run them takes none */
	rd_kafka_topic_partition_list_t *a = NULL;

	if (full == w->paused || rd_kafka_assignment(w->consumer, &a) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return;
	if (full)
		rd_kafka_pause_partitions(w->consumer, a);
	else
		resume(w->consumer, a);
	tb_debug(NULL, "consumption %s: %u tasks wait", full ? "paused" : "resumed", ready);
	w->resumed_at = full ? 0 : tb_mono_ms();
	w->paused = full;
	rd_kafka_topic_partition_list_destroy(a);
}

/* The first message after a resume: how long the line waited for it (at
 * debug; the seek in resume() is what keeps it short). */
static void refilled(tb_loop_t *w)
{
	if (!w->resumed_at)
		return;
	tb_debug(NULL, "consumption: the first task %llu ms after the resume",
		 (unsigned long long)(tb_mono_ms() - w->resumed_at));
	w->resumed_at = 0;
}

/* An error the consumer reported: logged; brokers out of reach make
 * Kafka not ready until the prober finds them again. */
static void consumer_error(const rd_kafka_message_t *m)
{
	if (m->err == RD_KAFKA_RESP_ERR_INCONSISTENT_GROUP_PROTOCOL) {
		static const char why[] =
		    "the group's other workers use an assignor of another kind (kafka.assignor: "
		    "cooperative or eager): this one joins once the last of them has left";
		tb_warn(NULL, "consumer: %s: %s", rd_kafka_message_errstr(m), why);
		tb_health_dep(TB_DEP_KAFKA, 0, why);
		return;
	}
	tb_warn(NULL, "consumer: %s", rd_kafka_message_errstr(m));
	/* at once; the prober finds them again (or confirms) within a second */
	if (m->err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
		tb_health_reach(TB_DEP_KAFKA, 0, rd_kafka_message_errstr(m));
}

/* How often the prober asks: the brokers every second (a metadata request
 * answered in 2 s at most), the store every 2 s, and, while the last
 * sandbox built failed, a sandbox every 5 s: so /readyz turns within 5 s
 * of a service going away or coming back (tb/health.h). */
#define PROBE_KAFKA_MS 1000
#define PROBE_KAFKA_TIMEOUT_MS 2000
#define PROBE_STORE_MS 2000
#define PROBE_SANDBOX_MS 5000

int tb_worker_probe_sandbox(const tb_worker_deps_t *d, tb_error_t *err)
{
	tb_strlist_t none = { 0, NULL };
	tb_sandbox_spec_t s = { .name = "health-check",
				.hostname = "health",
				.work_root = d->cfg->work_dir,
				.group = d->group,
				.ro_binds = &none,
				.workspace_mb = 1,
				.outputs_mb = 1,
				.memory_mb = 64,
				.pids = 8,
				.max_open_files = 16,
				.max_file_mb = 1 };
	tb_sandbox_t *sb;
	int rc = tb_sandbox_prepare(&sb, d->policy, &s, err);

	if (rc == 0)
		tb_sandbox_destroy(sb, NULL);
	return rc;
}

/* A probe's finding said in the log only when it changes. */
static void said(int *was_up, int up, const char *what, const char *why)
{
	if (up == *was_up)
		return;
	*was_up = up;
	if (up)
		tb_info(NULL, "%s answers again", what);
	else
		tb_warn(NULL, "%s does not answer: %s", what, why);
}

/* The health prober's thread: asks Kafka, the store and (while down) the
 * sandbox in turn, each at its own pace (PROBE_*). Off the main loop, so
 * a probe that waits for its timeout holds no task up. */
static void *prober(void *arg)
{
	tb_loop_t *w = arg;
	const tb_worker_deps_t *d = w->d;
	uint64_t next_kafka = 0, next_store = 0, next_sandbox = tb_mono_ms() + PROBE_SANDBOX_MS;
	int kafka_up = 1, store_up = 1;
	tb_object_info_t info;
	tb_error_t err;

	while (!atomic_load(&w->probe_stop)) {
		uint64_t now = tb_mono_ms();
		if (now >= next_kafka) {
			int up = tb_kafka_probe(w->producer, d->brokers, PROBE_KAFKA_TIMEOUT_MS,
						&err) == 0;
			tb_health_reach(TB_DEP_KAFKA, up, up ? NULL : err.msg);
			said(&kafka_up, up, "Kafka", err.msg);
			next_kafka = tb_mono_ms() + PROBE_KAFKA_MS;
		}
		if (d->store && now >= next_store) {
			/* a HEAD of a key nobody writes: "not found" is an answer */
			int rc = tb_store_head(d->store, "health/probe", &info, &err);
			int up = rc == 0 || rc == TB_ENOTFOUND;
			tb_health_dep(TB_DEP_STORE, up, up ? "answered" : err.msg);
			said(&store_up, up, "the store", err.msg);
			next_store = tb_mono_ms() + PROBE_STORE_MS;
		}
		if (now >= next_sandbox) {
			if (!tb_health_dep_up(TB_DEP_SANDBOX) &&
			    tb_worker_probe_sandbox(d, &err) == 0)
				tb_info(NULL, "a sandbox can be built again");
			next_sandbox = tb_mono_ms() + PROBE_SANDBOX_MS;
		}
		usleep(100000);
	}
	return NULL;
}

/* What /readyz looks at from the start: one sandbox built and torn down
 * (tb_sandbox_prepare says how it went); then the prober. */
static void health_start(tb_loop_t *w)
{
	tb_error_t err;

	tb_health_dep(TB_DEP_KAFKA, 0, "not in the consumer group yet");
	if (tb_worker_probe_sandbox(w->d, &err) < 0)
		tb_warn(NULL, "no sandbox can be built here: %s", err.msg);
}

static void probe_start(tb_loop_t *w)
{
	w->serving = -1; /* not known yet: serving() says at the first pass */
	w->probing = pthread_create(&w->prober, NULL, prober, w) == 0;
}

static void health_stop(tb_loop_t *w)
{
	if (!w->probing)
		return;
	atomic_store(&w->probe_stop, 1);
	pthread_join(w->prober, NULL);
	w->probing = 0;
}

/* Whether this worker can run a task now: it builds sandboxes and its
 * store answers (a ledger away already keeps tasks waiting: admit.c;
 * Kafka away brings none). Looked at once a pass, not per task; said in
 * the log when it changes. */
static void serving(tb_loop_t *w)
{
	int sandbox = tb_health_dep_up(TB_DEP_SANDBOX);
	int store = !w->d->store || tb_health_dep_up(TB_DEP_STORE);
	int now = sandbox && store;

	int before = w->serving;

	if (now == before)
		return;
	w->serving = now;
	if (before == -1) /* at the start: the probes say what is missing */
		return;
	if (now)
		tb_info(NULL, "ready to run tasks again: taking tasks");
	else
		tb_warn(NULL,
			"cannot run tasks (%s): taking none, its partitions paused until it "
			"can (/readyz says why)",
			!sandbox ? "no sandbox can be built" : "the store does not answer");
}

/* Lets the running attempts finish, for the configuration's drain time
 * at most. @return 0; TB_ETIMEOUT with some still running: then w stays
 * allocated, and the pool's threads alive (the parents of their
 * sandboxes): the slot threads still use them until the caller exits, at
 * once. */
static int drain(tb_loop_t *w, tb_error_t *err)
{
	uint64_t until = w->d->drain_ms ? tb_mono_ms() + w->d->drain_ms : 0;

	while (w->running) {
		if (until && tb_mono_ms() > until) {
			tb_warn(NULL,
				"%u tasks still running after the drain timeout: leaving them "
				"unacknowledged",
				w->running);
			commit_marks(w);
			rd_kafka_flush(w->producer, 5000);
			return tb_error_set(err, TB_ETIMEOUT, "drain timeout");
		}
		usleep(50000);
		tb_health_turned();
		tb_loop_complete(w);
		tb_loop_heartbeat(w);
		rd_kafka_poll(w->producer, 0);
	}
	return 0;
}

/* Open files a running slot may hold at once (its records' memfds, the
 * agent's pipes, the sandbox's sockets and cgroup files, its proxy's
 * connections), and the worker's own. */
#define FILES_PER_SLOT 32
#define FILES_BASE 512

/* The soft limit on open files raised to the hard one, which a worker
 * of many slots needs; a hard limit too low for them is said. */
static void enough_files(uint64_t slots)
{
	struct rlimit rl;
	uint64_t want = FILES_BASE + slots * FILES_PER_SLOT;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want)
		tb_warn(NULL,
			"open files: the hard limit is %llu, and %llu slots may want %llu: raise "
			"it (LimitNOFILE=, ulimit -Hn) or run fewer slots",
			(unsigned long long)rl.rlim_max, (unsigned long long)slots,
			(unsigned long long)want);
}

/* What the slots share: the sandboxes built ahead, the rate limits, the
 * open files. */
static int slots_new(tb_loop_t *w, tb_error_t *err)
{
	const tb_worker_deps_t *d = w->d;
	enough_files(d->cfg->slots);
	int rc = tb_sandbox_pool_new(&w->pool, d->policy, d->cfg->work_dir, d->group,
				     (unsigned)d->cfg->slots, err);
	return rc < 0 ? rc : tb_ratelimit_new(&w->rates, d->ledger, err);
}

static void slots_free(tb_loop_t *w)
{
	tb_sandbox_pool_free(w->pool);
	tb_ratelimit_free(w->rates);
}

/* Stopping: waiting tasks are left unacknowledged (delivered again);
 * running attempts may finish (bounded by their deadlines), under their
 * leases, and are recorded and committed (drain()); then the worker
 * leaves the group. Interactive sessions stop at once (their follow-ups
 * are no longer read here): the next owner replays them from their first
 * prompt. */
static void begin_stopping(tb_loop_t *w)
{
	tb_loop_drop_all_waiting(w);
	tb_loop_stop_sessions(w, -1, "the worker stops");
	/* A pull under way would hold the drain for as long as its registry
	 * stalls (and leave the pool's sandboxes behind at the timeout): it
	 * ends now, its attempt the platform's failure, delivered again. */
	tb_image_cache_interrupt(w->d->images);
	/* and no task is admitted any more: the sandboxes built ahead for
	 * the next ones go now, their cgroups with them, even if the drain
	 * ends at its timeout with the pool still in use */
	tb_sandbox_pool_drop_spares(w->pool);
}

/* One death the last worker of this id recorded (blackbox.h), kept as its
 * attempt's failure "crashed"; ud counts what the ledger did not keep. */
static void keep_crash(void *ud, const tb_blackbox_death_t *dd)
{
	tb_loop_t *w = ((void **)ud)[0];
	int *unkept = ((void **)ud)[1];
	char why[200];
	tb_error_t err;

	if (!dd->task[0]) {
		tb_warn(
		    NULL,
		    "the last worker of this id crashed (signal %d, %s) in a thread of its own, "
		    "not a task's: no task is blamed",
		    dd->signal, strsignal(dd->signal));
		return;
	}
	snprintf(why, sizeof(why), "its worker crashed (signal %d, %s) in phase %s", dd->signal,
		 strsignal(dd->signal), dd->phase[0] ? dd->phase : "received");
	tb_warn(dd->task, "attempt %llu: %s", (unsigned long long)dd->attempt, why);
	if (tb_ledger_failed(w->d->ledger, dd->task, dd->attempt, TB_ECRASHED, why, &err) < 0) {
		tb_warn(dd->task,
			"the ledger did not keep that crash (kept for the next start): %s",
			err.msg);
		(*unkept)++;
	}
}

/* What the last worker of this id said of its death is kept in the
 * ledger, before any task is taken (its successor's attempt would find
 * no evidence); then this worker's own black box is armed. */
static int blackbox_start(tb_loop_t *w, tb_error_t *err)
{
	char path[4096];
	int unkept = 0, n;
	void *ud[2] = { w, &unkept };
	tb_error_t rerr;

	snprintf(path, sizeof(path), "%s/%s.crashes", w->d->cfg->work_dir, w->d->group);
	if ((n = tb_blackbox_read(path, keep_crash, ud, &rerr)) < 0)
		tb_warn(NULL, "%s", rerr.msg);
	else if (n > 0 && !unkept)
		tb_blackbox_forget(path);
	return tb_blackbox_open(path, err);
}

int tb_worker_run(const tb_worker_deps_t *d, volatile sig_atomic_t *stop, uint64_t max_finished,
		  tb_worker_stats_t *stats, tb_error_t *err)
{
	tb_loop_t *w = calloc(1, sizeof(*w));
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
	if (d->cfg->slots > TB_LOOP_SLOTS_MAX) {
		rc = tb_error_set(err, TB_EINVAL, "slots: at most %d", TB_LOOP_SLOTS_MAX);
		goto fail;
	}
	if ((rc = slots_new(w, err)) < 0 || (rc = blackbox_start(w, err)) < 0)
		goto fail;
	health_start(w);
	if ((rc = tb_kafka_producer_new(&w->producer, d->brokers, &d->cfg->kafka.properties, err)) <
	    0)
		goto fail;
	probe_start(w);
	if ((rc = join(w, err)) < 0) {
		health_stop(w);
		rd_kafka_destroy(w->producer);
		goto fail;
	}
	tb_info(NULL, "worker %s: %llu slots, tasks from %s, leases of %llu ms", d->worker_id,
		(unsigned long long)d->cfg->slots, d->cfg->kafka.tasks_topic,
		(unsigned long long)w->lease_ms);

	while (!*stop && !(max_finished && w->finished_messages >= max_finished && !w->running &&
			   !w->nwaiting)) {
		rd_kafka_message_t *m = next_message(w);
		tb_health_turned();
		if (m) {
			if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
				refilled(w);
				tb_loop_handle(w, m);
			} else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
				consumer_error(m);
			rd_kafka_message_destroy(m);
		}
		rejoin_if_stuck(w);
		if (!w->consumer)
			break;
		tb_loop_complete(w);
		tb_loop_admit_waiting(w);
		tb_metrics_busy(w->running, w->nwaiting);
		tb_loop_heartbeat(w);
		serving(w);
		commit_marks(w);
		pace(w);
		rd_kafka_poll(w->producer, 0);
	}
	begin_stopping(w);
	if (drain(w, err) < 0)
		return err->code;    /* w stays: see drain() */
	tb_loop_drop_all_waiting(w); /* attempts retried or fenced meanwhile: left too */
	if (w->consumer)
		commit_marks_how(w, 1);
	rd_kafka_flush(w->producer, 10000);
	if (w->consumer) /* none if told to stop while joining again */
		consumer_end(w, 1);
	health_stop(w); /* it uses the producer */
	rd_kafka_destroy(w->producer);
	slots_free(w); /* every slot thread has ended */
	tb_blackbox_close();
	for (int p = 0; p < MAX_PARTITIONS; p++)
		tb_watermark_free(w->marks[p]);
	close(w->wake[0]);
	close(w->wake[1]);
	pthread_mutex_destroy(&w->lock);
	free(w);
	return 0;
fail:
	health_stop(w);
	slots_free(w);
	tb_blackbox_close();
	if (w->wake[0] >= 0) {
		close(w->wake[0]);
		close(w->wake[1]);
	}
	pthread_mutex_destroy(&w->lock);
	free(w);
	return rc;
}
