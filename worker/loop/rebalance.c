/*
 * rebalance.c: partitions coming and going, and the sessions on them.
 *
 * With the cooperative (incremental) protocol, the default
 * (kafka.assignor "cooperative-sticky"), a rebalance revokes only the
 * partitions that move, so the sessions and tasks of the others are not
 * touched at all; a session whose partition moves is stopped at once, and
 * its new owner replays it. With an eager assignor ("range",
 * "roundrobin"), and whenever an assignment is lost (the group's
 * session timed out, or librdkafka 2.0.2 turns a commit refused during a
 * rebalance into a lost assignment: its issue #4059), every partition is
 * taken away first and the next assignment may give some back: a session
 * on such a partition is put on notice instead of stopped, adopted into
 * the new assignment if its partition comes back (its task's message,
 * delivered again, joins it; its follow-ups again are duplicates), and
 * stopped if it does not, or if no assignment comes within
 * NOTICE_MS. Meanwhile the session's follow-ups are not read here; a
 * new owner of its partition waits on its lease, as for any running task.
 */
#include "loop_int.h"

#include "tb/clock.h"
#include "tb/health.h"

#include <stdio.h>
#include <string.h>

/* How long a session on notice waits for the assignment that may give
 * its partition back. An eager rebalance takes about a second between
 * workers that poll all the time; past this the group is not coming to
 * an end soon (brokers away) and the session goes to whoever gets its
 * partition. */
#define NOTICE_MS 30000
/* Commits wait at most this long for a cooperative rebalance to end, and
 * this long after each of its steps: a cooperative rebalance comes in
 * rounds (members revoke, join again, others then get what was revoked),
 * a heartbeat (3 s) or so apart, and no callback says when the next
 * begins. */
#define REBALANCE_HOLD_MS 30000
#define REBALANCE_SETTLE_MS 10000

/* Stops session @p r: its attempt is let go uncounted (settle.c). */
static void stop_one(tb_job_t *r, const char *why)
{
	tb_info(r->key, "%s: the session stops, to go on at the partition's owner", why);
	r->run.moved = 1;
	r->run.notice_at = 0;
	atomic_store(&r->run.cancel, 1);
}

void tb_loop_stop_sessions(tb_loop_t *w, int p, const char *why)
{
	for (tb_job_t *r = w->running_jobs; r; r = r->run.next_running)
		if ((p < 0 || r->partition == p) && r->session && !r->run.moved)
			stop_one(r, why);
}

/* The sessions of partition @p p, taken away but perhaps coming back. */
static void put_on_notice(tb_loop_t *w, int p)
{
	uint64_t now = tb_mono_ms();

	for (tb_job_t *r = w->running_jobs; r; r = r->run.next_running)
		if (r->partition == p && r->session && !r->run.moved && !r->run.notice_at) {
			tb_info(r->key,
				"its partition was taken away: the session goes on, to be kept if "
				"the next assignment gives it back");
			r->run.notice_at = now ? now : 1;
		}
}

/* Sessions on notice whose partition @p parts gives back are adopted
 * into its new assignment; the rest are stopped: the assignment that
 * ends a rebalance did not give theirs back. */
static void adopt_or_stop(tb_loop_t *w, const rd_kafka_topic_partition_list_t *parts)
{
	for (tb_job_t *r = w->running_jobs; r; r = r->run.next_running) {
		if (!r->run.notice_at)
			continue;
		int back = 0;
		for (int i = 0; i < parts->cnt && !back; i++)
			back = parts->elems[i].partition == r->partition;
		if (back && r->partition < MAX_PARTITIONS && w->marks[r->partition]) {
			r->epoch = w->epochs[r->partition];
			r->run.notice_at = 0;
			tb_info(r->key, "its partition came back: the session goes on here");
		}
	}
	for (tb_job_t *r = w->running_jobs; r; r = r->run.next_running)
		if (r->run.notice_at)
			stop_one(r, "its partition went to another owner");
}

void tb_loop_notice_expired(tb_loop_t *w)
{
	uint64_t now = tb_mono_ms();

	for (tb_job_t *r = w->running_jobs; r; r = r->run.next_running)
		if (r->run.notice_at && now - r->run.notice_at >= NOTICE_MS)
			stop_one(r, "no assignment gave its partition back in time");
}

int tb_loop_may_commit(const tb_loop_t *w)
{
	uint64_t now = tb_mono_ms();
	char state[40];

	if (w->rebalancing_since)
		return now - w->rebalancing_since >= REBALANCE_HOLD_MS;
	if (w->rebalanced_at && now - w->rebalanced_at < REBALANCE_SETTLE_MS)
		return 0;
	/* A rebalance that takes nothing from this worker calls nothing
	 * here until its end: the join state, as of the last statistics
	 * (every 5 s), may show it sooner. */
	uint64_t for_ms = w->consumer ? tb_kafka_join_state(w->consumer, state, sizeof(state)) : 0;
	return !tb_loop_cooperative(w) || !strcmp(state, "steady") || !strcmp(state, "unknown") ||
	       for_ms >= REBALANCE_HOLD_MS;
}

/* The partitions held now, for the logs and /readyz. */
static int held(const tb_loop_t *w)
{
	int n = 0;

	for (int p = 0; p < MAX_PARTITIONS; p++)
		n += w->marks[p] != NULL;
	return n;
}

/* "0 2 5" (at most @p len), the partitions of @p parts. */
static const char *numbers(const rd_kafka_topic_partition_list_t *parts, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (int i = 0; i < parts->cnt && at + 12 < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%d", i ? " " : "",
				       (int)parts->elems[i].partition);
	return buf;
}

/* @return 0, or -1 after saying @p e. */
static int said_error(rd_kafka_error_t *e, const char *what)
{
	if (!e)
		return 0;
	tb_err(NULL, "%s: %s", what, rd_kafka_error_string(e));
	rd_kafka_error_destroy(e);
	return -1;
}

static void assigned(tb_loop_t *w, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *parts, int coop)
{
	tb_error_t err;
	char list[256], why[96];

	for (int i = 0; i < parts->cnt; i++) {
		int p = parts->elems[i].partition;
		if (p >= 0 && p < MAX_PARTITIONS && !w->marks[p]) {
			tb_watermark_new(&w->marks[p], &err);
			w->epochs[p]++;
		}
	}
	if (coop) {
		if (said_error(rd_kafka_incremental_assign(rk, parts), "incremental assign") < 0) {
			for (int i = 0; i < parts->cnt; i++) { /* not ours after all */
				int p = parts->elems[i].partition;
				if (p >= 0 && p < MAX_PARTITIONS) {
					tb_watermark_free(w->marks[p]);
					w->marks[p] = NULL;
				}
			}
			return;
		}
		/* New partitions follow the others' pause (pace()); a
		 * partition is never resumed unless paused (librdkafka
		 * before 2.4 may fetch from an old position then: #4636). */
		if (w->paused && parts->cnt)
			rd_kafka_pause_partitions(rk, parts);
	} else {
		rd_kafka_assign(rk, parts);
		/* A partition assigned again keeps the pause it had
		 * (librdkafka keeps its state): resume all, and let pace()
		 * decide again. */
		rd_kafka_resume_partitions(rk, parts);
		w->paused = 0;
	}
	adopt_or_stop(w, parts);
	w->ever_assigned = 1;
	w->rebalancing_since = 0;
	w->rebalanced_at = coop ? tb_mono_ms() : 0;
	tb_info(NULL, "assigned %d partitions (%s), %d held", parts->cnt,
		numbers(parts, list, sizeof(list)), held(w));
	snprintf(why, sizeof(why), "in the consumer group, %d partitions", held(w));
	tb_health_dep(TB_DEP_KAFKA, 1, why);
}

/*
 * No commit here: the main loop commits every pass, and a commit sent
 * from inside a rebalance (with the coordinator away, after a broker
 * restart) can keep librdkafka 2.0.2 from finishing the unassign. What
 * finished since the last commit is delivered to the new owner, which
 * finds it done. Tasks still running keep going under their leases, but
 * their offsets are no longer ours. Waiting ones are let go.
 */
static void revoked(tb_loop_t *w, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *parts, int coop)
{
	int lost = rd_kafka_assignment_lost(rk);
	char list[256], why[96];

	for (int i = 0; i < parts->cnt; i++) {
		int p = parts->elems[i].partition;
		if (p < 0 || p >= MAX_PARTITIONS)
			continue;
		tb_watermark_free(w->marks[p]);
		w->marks[p] = NULL;
		tb_loop_drop_waiting(w, p);
		if (coop && !lost)
			tb_loop_stop_sessions(w, p, "its partition moved");
		else
			put_on_notice(w, p);
	}
	if (coop) {
		if (w->paused && parts->cnt) /* none stays paused unassigned */
			rd_kafka_resume_partitions(rk, parts);
		said_error(rd_kafka_incremental_unassign(rk, parts), "incremental unassign");
		w->rebalancing_since = tb_mono_ms();
	} else {
		rd_kafka_assign(rk, NULL);
	}
	tb_info(NULL, "%s %d partitions (%s), %d held", lost ? "lost" : "revoked", parts->cnt,
		numbers(parts, list, sizeof(list)), held(w));
	if (coop && !lost) {
		snprintf(why, sizeof(why), "in the consumer group, %d partitions", held(w));
		tb_health_dep(TB_DEP_KAFKA, 1, why);
		return;
	}
	tb_health_dep(TB_DEP_KAFKA, 0,
		      lost ? "its partitions were lost: joining again"
			   : "rebalancing: its partitions were revoked");
}

void tb_loop_on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t e,
			  rd_kafka_topic_partition_list_t *parts, void *opaque)
{
	tb_loop_t *w = opaque;
	int coop = tb_loop_cooperative(w);

	if (e == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS)
		assigned(w, rk, parts, coop);
	else
		revoked(w, rk, parts, coop);
}
