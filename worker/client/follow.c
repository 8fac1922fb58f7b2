/*
 * follow.c: reads the events topic without joining a group (partitions
 * assigned by hand, nothing committed), prints what is asked for, and for
 * one task works out when it is settled and how (see follow.h).
 */
#include "follow.h"

#include "tb/clock.h"
#include "tb/json_mpack.h"
#include "tb/kafka.h"
#include "tb/schema_manifest.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_PARTITIONS 1024
#define LEDGER_CHECK_MS 1000
/* How long an acknowledged attempt waits for a ledger that cannot be
 * asked (a Redis failover takes some seconds) before its events alone
 * settle the task, as they do when no ledger is given. The README and
 * docs/commands.md say it in seconds (tests/tools/check-readme-commands). */
#define LEDGER_PATIENCE_MS 15000
/* A done-marker is written only after the attempt's result event was
 * delivered; this long for it to arrive before the manifest is asked. */
#define RESULT_GRACE_MS 1500

typedef struct seen {
	uint64_t attempt;
	int64_t last_seq; /* duplicates (producer retries) are skipped */
	int has_result, acknowledged;
	uint64_t asking_since; /* acknowledged, the ledger unanswered since */
	char outcome[32];
	char reason[512]; /* the result's, else the last error's */
} seen_t;

typedef struct follow {
	const tb_follow_opts_t *o;
	tb_follow_result_t *res;
	seen_t *seen;
	size_t nseen;
	int np;
	unsigned char eof[MAX_PARTITIONS];
	uint64_t ledger_at, done_since, asked_at;
} follow_t;

static const char *str(const json_t *p, const char *k)
{
	const char *s = json_string_value(json_object_get(p, k));
	return s ? s : "";
}

/* A usage event's figures so far, in a line. */
static void print_usage(FILE *out, const json_t *u)
{
	const json_t *cpu = json_object_get(u, "agent"), *ep;
	long long requests = 0, tokens = 0;
	size_t i;

	json_array_foreach(json_object_get(u, "egress"), i, ep)
	{
		requests += json_integer_value(json_object_get(ep, "requests"));
		tokens += json_integer_value(json_object_get(ep, "input_tokens")) +
			  json_integer_value(json_object_get(ep, "output_tokens"));
	}
	fprintf(out, "usage so far: %.1f s, agent CPU %.2f s, %lld requests, %lld tokens\n",
		(double)json_integer_value(json_object_get(u, "wall_ms")) / 1000,
		(double)(json_integer_value(json_object_get(cpu, "user_ms")) +
			 json_integer_value(json_object_get(cpu, "system_ms"))) /
		    1000,
		requests, tokens);
}

void tb_follow_print_event(FILE *out, const tb_event_t *ev)
{
	json_t *p = NULL;
	tb_error_t err;
	const char *t = tb_event_type_name(ev->type);

	if (tb_mpack_to_json(&p, ev->payload.data, ev->payload.len, &err) < 0) {
		fprintf(out, "  %-12s #%-2llu %s (payload unreadable: %s)\n", ev->task_id,
			(unsigned long long)ev->seq, t ? t : "?", err.msg);
		return;
	}
	fprintf(out, "  %-12s #%-2llu ", ev->task_id, (unsigned long long)ev->seq);
	switch (ev->type) {
	case TB_EV_PHASE: {
		json_t *env = json_object_get(p, "environment");
		fprintf(out, "phase %-12s (+%lld ms)%s%s", str(p, "phase"),
			(long long)json_integer_value(json_object_get(p, "duration_ms")),
			str(p, "worker")[0] ? " on " : "", str(p, "worker"));
		if (env) /* the image it runs in, and whether it had to be made */
			fprintf(out, " in image %.19s (%s, %lld ms)", str(env, "digest"),
				json_is_true(json_object_get(env, "cached")) ? "cached"
									     : "made now",
				(long long)json_integer_value(json_object_get(env, "ms")));
		fputc('\n', out);
		break;
	}
	case TB_EV_MESSAGE:
		/* a role the agent claims is not the worker's word for it, and
		 * an event from before `source` existed is nobody's word */
		fprintf(out, "%s%s: %s\n", str(p, "role"),
			!strcmp(str(p, "role"), "assistant") ? ""
			: !TB_HAS(ev, TB_EVENT_F_SOURCE)     ? " (source unknown)"
			: ev->source == TB_SOURCE_AGENT      ? " (written by the agent)"
							     : "",
			str(p, "text"));
		break;
	case TB_EV_THOUGHT:
		fprintf(out, "thought: %s\n", str(p, "text"));
		break;
	case TB_EV_TOOL_CALL:
		fprintf(out, "tool-call %s %s\n", str(p, "id"), str(p, "name"));
		break;
	case TB_EV_TOOL_RESULT:
		fprintf(out, "tool-result %s%s\n", str(p, "id"),
			json_is_true(json_object_get(p, "is_error")) ? " (error)" : "");
		break;
	case TB_EV_ARTIFACT:
		fprintf(out, "artifact %s (%lld bytes) -> %s\n", str(p, "path"),
			(long long)json_integer_value(json_object_get(p, "size")), str(p, "key"));
		break;
	case TB_EV_VERDICT:
		fprintf(out, "verdict %s: %s%s%s\n", str(p, "judge"), str(p, "outcome"),
			str(p, "reason")[0] ? ": " : "", str(p, "reason"));
		break;
	case TB_EV_ERROR:
		fprintf(out, "error [%s] %s\n", str(p, "code"), str(p, "reason"));
		break;
	case TB_EV_EGRESS:
		fprintf(out, "egress %s %s%s -> %lld (%lld ms)\n", str(p, "method"), str(p, "host"),
			str(p, "path"), (long long)json_integer_value(json_object_get(p, "status")),
			(long long)json_integer_value(json_object_get(p, "duration_ms")));
		break;
	case TB_EV_TURN:
		fprintf(out, "%s %lld\n", str(p, "state"),
			(long long)json_integer_value(json_object_get(p, "turn")));
		break;
	case TB_EV_RESULT:
		fprintf(out, "result %s%s%s\n", str(p, "outcome"), str(p, "reason")[0] ? ": " : "",
			str(p, "reason"));
		break;
	case TB_EV_USAGE:
		print_usage(out, json_object_get(p, "usage"));
		break;
	default:
		fprintf(out, "%s\n", t ? t : "?");
	}
	json_decref(p);
}

json_t *tb_follow_event_json(const tb_event_t *ev)
{
	json_t *p = NULL;
	tb_error_t err;
	const char *t = tb_event_type_name(ev->type);

	if (tb_mpack_to_json(&p, ev->payload.data, ev->payload.len, &err) < 0)
		p = json_pack("{s:s}", "unreadable", err.msg);
	/* the fields in the schema's order, source before the payload */
	json_t *o = json_pack("{s:s,s:I,s:I,s:I,s:s}", "task_id", ev->task_id, "attempt",
			      (json_int_t)ev->attempt, "seq", (json_int_t)ev->seq, "ts",
			      (json_int_t)ev->ts, "type", t ? t : "?");
	if (o && TB_HAS(ev, TB_EVENT_F_SOURCE))
		json_object_set_new(o, "source", json_string(tb_event_source_name(ev->source)));
	if (o)
		json_object_set_new(o, "payload", p);
	else
		json_decref(p);
	return o;
}

void tb_follow_print_json(FILE *out, const tb_event_t *ev)
{
	json_t *o = tb_follow_event_json(ev);
	char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	if (text)
		fprintf(out, "%s\n", text);
	free(text);
	json_decref(o);
}

/* The attempt's record, made on first sight; NULL only without memory. */
static seen_t *attempt_of(follow_t *f, uint64_t attempt)
{
	for (size_t i = 0; i < f->nseen; i++)
		if (f->seen[i].attempt == attempt)
			return &f->seen[i];
	seen_t *more = realloc(f->seen, (f->nseen + 1) * sizeof(*more));
	if (!more)
		return NULL;
	f->seen = more;
	seen_t *s = &f->seen[f->nseen++];
	memset(s, 0, sizeof(*s));
	s->attempt = attempt;
	s->last_seq = -1;
	return s;
}

static void settle(follow_t *f, uint64_t attempt, const char *outcome, const char *reason)
{
	f->res->settled = 1;
	f->res->attempt = attempt;
	snprintf(f->res->outcome, sizeof(f->res->outcome), "%s", outcome);
	snprintf(f->res->reason, sizeof(f->res->reason), "%.500s", reason ? reason : "");
}

/* Whether the acknowledged @p attempt still settles the task: not if the
 * ledger shows it was sent back from the DLQ since, or a newer attempt is
 * done. Without a ledger the events alone decide. @return 1 or 0; -1
 * when the ledger could not be asked (why in @p err). */
static int settles(const follow_t *f, uint64_t attempt, tb_error_t *err)
{
	tb_ledger_t *l = f->o->ledger;
	tb_ledger_task_t t;

	if (!l)
		return 1;
	if (tb_ledger_inspect(l, f->o->task, &t, err) < 0)
		return -1;
	return t.done && t.done_attempt == attempt;
}

/* Asks the ledger whether acknowledged @p s settles the task, and settles
 * it if so. A ledger that cannot be asked is asked again (confirm_again)
 * for LEDGER_PATIENCE_MS; after that the events alone settle it, and
 * stderr says so: the acknowledgement is the worker's word that the
 * attempt is over, and waiting out the whole timeout would say nothing. */
static void confirm(follow_t *f, seen_t *s)
{
	tb_error_t err;
	uint64_t now = tb_mono_ms();
	int yes = settles(f, s->attempt, &err);

	f->asked_at = now;
	if (yes < 0) {
		if (!s->asking_since)
			s->asking_since = now;
		if (now - s->asking_since < LEDGER_PATIENCE_MS)
			return;
		fprintf(stderr,
			"taskbox: the ledger could not be asked for %d s (%s): task %s is settled "
			"by its events alone\n",
			LEDGER_PATIENCE_MS / 1000, err.msg, f->o->task);
	}
	s->asking_since = 0;
	if (yes)
		settle(f, s->attempt, s->has_result ? s->outcome : "dead-lettered", s->reason);
}

/* The acknowledged attempts the ledger did not answer for: asked again,
 * once every LEDGER_CHECK_MS. */
static void confirm_again(follow_t *f)
{
	if (tb_mono_ms() - f->asked_at < LEDGER_CHECK_MS)
		return;
	for (size_t i = 0; i < f->nseen && !f->res->settled; i++)
		if (f->seen[i].acknowledged && f->seen[i].asking_since)
			confirm(f, &f->seen[i]);
}

/* What one task's event tells: results, errors, the acknowledgement. */
static void track(follow_t *f, seen_t *s, const tb_event_t *ev)
{
	json_t *p = NULL;
	tb_error_t err;

	if (tb_mpack_to_json(&p, ev->payload.data, ev->payload.len, &err) < 0)
		return;
	if (ev->type == TB_EV_RESULT) {
		s->has_result = 1;
		snprintf(s->outcome, sizeof(s->outcome), "%s", str(p, "outcome"));
		snprintf(s->reason, sizeof(s->reason), "%s", str(p, "reason"));
	} else if (ev->type == TB_EV_ERROR && !s->has_result) {
		snprintf(s->reason, sizeof(s->reason), "[%s] %s", str(p, "code"), str(p, "reason"));
	} else if (ev->type == TB_EV_PHASE &&
		   !strcmp(str(p, "phase"), tb_phase_name(TB_PHASE_ACKNOWLEDGED))) {
		s->acknowledged = 1;
		confirm(f, s);
	}
	json_decref(p);
}

/* One message from the topic: printed if selected; tracked for a task. */
static void consume(follow_t *f, const rd_kafka_message_t *m)
{
	const tb_follow_opts_t *o = f->o;
	tb_event_t ev;
	tb_error_t err;

	if (o->task && (m->key_len != strlen(o->task) || memcmp(m->key, o->task, m->key_len)))
		return;
	if (tb_msg_decode(&tb_schema_event, &ev, m->payload, m->len, &err) < 0) {
		fprintf(stderr, "taskbox: skipped an unreadable event at %s [%d] offset %lld: %s\n",
			rd_kafka_topic_name(m->rkt), (int)m->partition, (long long)m->offset,
			err.msg);
		return;
	}
	if (o->task && strcmp(ev.task_id, o->task)) {
		tb_msg_free(&tb_schema_event, &ev);
		return;
	}
	seen_t *s = o->task ? attempt_of(f, ev.attempt) : NULL;
	if (s && (int64_t)ev.seq <= s->last_seq) { /* delivered twice */
		tb_msg_free(&tb_schema_event, &ev);
		return;
	}
	if (o->json)
		tb_follow_print_json(o->out, &ev);
	else
		tb_follow_print_event(o->out, &ev);
	fflush(o->out);
	f->res->events++;
	if (s) {
		s->last_seq = (int64_t)ev.seq;
		track(f, s, &ev);
	}
	tb_msg_free(&tb_schema_event, &ev);
}

/* The outcome recorded in a done attempt's manifest. */
static void outcome_from_manifest(follow_t *f, uint64_t attempt, const char *key)
{
	tb_manifest_t m;
	tb_error_t err;
	char *bytes = NULL;
	size_t len;

	if (!f->o->store) {
		settle(f, attempt, "recorded", "no store to read the manifest from");
		return;
	}
	if (tb_store_get_bytes(f->o->store, key, 8u << 20, &bytes, &len, &err) < 0 ||
	    tb_msg_decode(&tb_schema_manifest, &m, bytes, len, &err) < 0) {
		free(bytes);
		settle(f, attempt, "recorded", err.msg);
		return;
	}
	free(bytes);
	settle(f, attempt, tb_outcomes[m.outcome], m.reason);
	tb_msg_free(&tb_schema_manifest, &m);
}

/* At the end of the topic: does the ledger say the task is done? */
static void ask_ledger(follow_t *f)
{
	tb_ledger_t *l = f->o->ledger;
	tb_ledger_task_t t;
	tb_error_t err;
	uint64_t now = tb_wall_ms();

	if (now - f->ledger_at < LEDGER_CHECK_MS)
		return;
	f->ledger_at = now;
	if (tb_ledger_inspect(l, f->o->task, &t, &err) < 0 || !t.done)
		return;
	seen_t *s = NULL;
	for (size_t i = 0; i < f->nseen; i++)
		if (f->seen[i].attempt == t.done_attempt)
			s = &f->seen[i];
	if (s && s->has_result) {
		settle(f, t.done_attempt, s->outcome, s->reason);
		return;
	}
	if (!f->done_since)
		f->done_since = now;
	if (now - f->done_since < RESULT_GRACE_MS)
		return;
	if (t.manifest[0])
		outcome_from_manifest(f, t.done_attempt, t.manifest);
	else
		settle(f, t.done_attempt, "dead-lettered",
		       s && s->reason[0] ? s->reason : "see `taskbox dlq list`");
}

static int all_eof(const follow_t *f)
{
	for (int p = 0; p < f->np; p++)
		if (!f->eof[p])
			return 0;
	return 1;
}

/* A wait for one task, with a ledger: the acknowledged attempts it did
 * not answer for asked again, and at the end of the topic whether the
 * task is done. */
static void consult_ledger(follow_t *f)
{
	confirm_again(f);
	if (!f->res->settled && all_eof(f))
		ask_ledger(f);
}

/* Where each partition starts, per o->since_ms. */
static int start_offsets(rd_kafka_t *c, const char *topic, int np, int64_t since,
			 rd_kafka_topic_partition_list_t **out, tb_error_t *err)
{
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(np);
	int64_t *end = calloc((size_t)np, sizeof(*end));
	int rc = 0;

	if (!end) {
		rd_kafka_topic_partition_list_destroy(l);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	for (int p = 0; p < np; p++)
		rd_kafka_topic_partition_list_add(l, topic, p)->offset =
		    since == TB_FOLLOW_BEGINNING ? RD_KAFKA_OFFSET_BEGINNING : since;
	/* "The end" as a number read first, not left to librdkafka to resolve
	 * when fetching starts, and before the search by time: an event
	 * produced after it is at or past it, one produced before is found by
	 * the search. (Read the other way round, an event could slip between
	 * the two.) */
	for (int p = 0; p < np && since != TB_FOLLOW_BEGINNING; p++) {
		int64_t lo;
		rd_kafka_resp_err_t e =
		    rd_kafka_query_watermark_offsets(c, topic, p, &lo, &end[p], 10000);
		if (e) {
			rc = tb_error_set(err, TB_EIO, "kafka: end of %s [%d]: %s", topic, p,
					  rd_kafka_err2str(e));
			goto out;
		}
		l->elems[p].offset = since == TB_FOLLOW_END ? end[p] : since;
	}
	if (since >= 0) { /* the first offset at or after the time, if any */
		rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(c, l, 10000);
		if (e) {
			rc = tb_error_set(err, TB_EIO, "kafka: offsets of %s by time: %s", topic,
					  rd_kafka_err2str(e));
			goto out;
		}
		for (int p = 0; p < np; p++)
			if (l->elems[p].err || l->elems[p].offset < 0 ||
			    l->elems[p].offset > end[p])
				l->elems[p].offset = end[p];
	}
out:
	free(end);
	if (rc < 0)
		rd_kafka_topic_partition_list_destroy(l);
	else
		*out = l;
	return rc;
}

static int partitions_of(rd_kafka_t *c, const char *topic, int *np, tb_error_t *err)
{
	const rd_kafka_metadata_t *md = NULL;
	rd_kafka_topic_t *t = rd_kafka_topic_new(c, topic, NULL);
	rd_kafka_resp_err_t e =
	    t ? rd_kafka_metadata(c, 0, t, &md, 10000) : RD_KAFKA_RESP_ERR__INVALID_ARG;
	int rc = 0;

	if (e || md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt < 1)
		rc = tb_error_set(err, TB_EIO, "kafka: topic %s: %s", topic,
				  e                    ? rd_kafka_err2str(e)
				  : md->topic_cnt != 1 ? "not in the metadata"
				  : md->topics[0].err  ? rd_kafka_err2str(md->topics[0].err)
						       : "no partitions");
	else
		*np = md->topics[0].partition_cnt < MAX_PARTITIONS ? md->topics[0].partition_cnt
								   : MAX_PARTITIONS;
	if (md)
		rd_kafka_metadata_destroy(md);
	if (t)
		rd_kafka_topic_destroy(t);
	return rc;
}

int tb_follow_open_topics(const tb_config_t *cfg, const char *const *topics, size_t ntopics,
			  int64_t since_ms, rd_kafka_t **out, int *partitions, tb_error_t *err)
{
	rd_kafka_topic_partition_list_t *all = rd_kafka_topic_partition_list_new(16);
	rd_kafka_t *c;
	int rc;

	if ((rc = tb_kafka_reader_new(&c, cfg->kafka.brokers, &cfg->kafka.properties,
				      "taskbox-follow", err)) < 0) {
		rd_kafka_topic_partition_list_destroy(all);
		return rc;
	}
	for (size_t t = 0; t < ntopics; t++) {
		rd_kafka_topic_partition_list_t *parts = NULL;
		int np = 0;
		if ((rc = partitions_of(c, topics[t], &np, err)) < 0 ||
		    (rc = start_offsets(c, topics[t], np, since_ms, &parts, err)) < 0)
			goto fail;
		for (int i = 0; i < parts->cnt; i++)
			rd_kafka_topic_partition_list_add(all, topics[t], parts->elems[i].partition)
			    ->offset = parts->elems[i].offset;
		rd_kafka_topic_partition_list_destroy(parts);
		if (t == 0 && partitions)
			*partitions = np;
	}
	rd_kafka_resp_err_t e = rd_kafka_assign(c, all);
	if (e) {
		rc = tb_error_set(err, TB_EIO, "kafka: assign %s: %s", topics[0],
				  rd_kafka_err2str(e));
		goto fail;
	}
	rd_kafka_topic_partition_list_destroy(all);
	*out = c;
	return 0;
fail:
	rd_kafka_topic_partition_list_destroy(all);
	rd_kafka_destroy(c);
	return rc;
}

int tb_follow_open(const tb_config_t *cfg, int64_t since_ms, rd_kafka_t **out, int *partitions,
		   tb_error_t *err)
{
	const char *topic = cfg->kafka.events_topic;

	return tb_follow_open_topics(cfg, &topic, 1, since_ms, out, partitions, err);
}

int tb_follow(const tb_config_t *cfg, const tb_follow_opts_t *o, tb_follow_result_t *res,
	      tb_error_t *err)
{
	const char *topic = cfg->kafka.events_topic;
	follow_t f = { .o = o, .res = res };
	rd_kafka_t *c;
	int rc;

	memset(res, 0, sizeof(*res));
	if ((rc = tb_follow_open(cfg, o->since_ms, &c, &f.np, err)) < 0)
		return rc;
	if (f.np > MAX_PARTITIONS)
		f.np = MAX_PARTITIONS;
	uint64_t deadline = o->timeout_ms ? tb_mono_ms() + o->timeout_ms : 0;
	while (!(o->stop && *o->stop) && !(o->until_settled && res->settled)) {
		if (deadline && tb_mono_ms() > deadline) {
			rc = tb_error_set(err, TB_ETIMEOUT, "waited %llu s",
					  (unsigned long long)(o->timeout_ms / 1000));
			break;
		}
		rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 200);
		if (m && m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
			if (m->partition >= 0 && m->partition < f.np)
				f.eof[m->partition] = 1;
		} else if (m && (m->err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
				 m->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)) {
			rc = tb_error_set(err, TB_EIO, "kafka: %s: %s", topic,
					  rd_kafka_message_errstr(m));
			rd_kafka_message_destroy(m);
			break;
		} else if (m && !m->err) {
			if (m->partition >= 0 && m->partition < f.np)
				f.eof[m->partition] = 0;
			consume(&f, m);
		} /* other errors are transient: librdkafka retries them */
		if (m)
			rd_kafka_message_destroy(m);
		if (o->task && o->until_settled && o->ledger && !res->settled)
			consult_ledger(&f);
	}
	free(f.seen);
	rd_kafka_consumer_close(c);
	rd_kafka_destroy(c);
	return rc;
}
