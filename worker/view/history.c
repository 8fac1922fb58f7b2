/*
 * history.c: a task's events read again (history.h).
 */
#include "history.h"

#include "follow.h"

#include "tb/clock.h"
#include "tb/kafka.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_MS 20000

/* What a reading keeps: the events taken, and per attempt the last seq
 * taken: events are written in order, so one at or below it is a
 * producer's retry, kept once. */
typedef struct reading {
	const char *id;
	size_t idlen;
	uint64_t attempt; /* 0: every one */
	json_t *out;
	struct seen {
		uint64_t attempt;
		int64_t last; /* -1: none yet */
	} * seen;
	size_t nseen, cap;
} reading_t;

struct tb_view_reader {
	const tb_config_t *cfg;
	pthread_mutex_t lock; /* one reading at a time */
	rd_kafka_t *c;        /* the reading's, under lock */
};

tb_view_reader_t *tb_view_reader_new(const tb_config_t *cfg)
{
	tb_view_reader_t *r = calloc(1, sizeof(*r));
	if (r) {
		r->cfg = cfg;
		pthread_mutex_init(&r->lock, NULL);
	}
	return r;
}

static void drop(tb_view_reader_t *r)
{
	if (r->c) {
		rd_kafka_consumer_close(r->c);
		rd_kafka_destroy(r->c);
		r->c = NULL;
	}
}

void tb_view_reader_free(tb_view_reader_t *r)
{
	if (!r)
		return;
	drop(r);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* The reader's consumer at partition @p span->partition, from the task's
 * first event (or the oldest kept), and that partition's end now in
 * @p end. 0, or -1 with why in @p err. Under r->lock. */
static int open_at(tb_view_reader_t *r, const tb_view_span_t *span, int64_t *end, tb_error_t *err)
{
	const tb_config_t *cfg = r->cfg;
	const char *topic = cfg->kafka.events_topic;
	int64_t lo = 0;

	if (!r->c && tb_kafka_reader_new(&r->c, cfg->kafka.brokers, &cfg->kafka.properties,
					 "taskbox-view", err) < 0) {
		r->c = NULL;
		return -1;
	}
	rd_kafka_resp_err_t e =
	    rd_kafka_query_watermark_offsets(r->c, topic, span->partition, &lo, end, 10000);
	if (!e) {
		rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
		rd_kafka_topic_partition_list_add(l, topic, span->partition)->offset =
		    span->first > lo ? span->first : lo;
		e = rd_kafka_assign(r->c, l);
		rd_kafka_topic_partition_list_destroy(l);
	}
	if (e) {
		tb_error_set(err, TB_EIO, "kafka: %s [%d]: %s", topic, (int)span->partition,
			     rd_kafka_err2str(e));
		drop(r);
		return -1;
	}
	return 0;
}

/* Whether @p ev was taken already (and if not, it is now). */
static int repeated(reading_t *r, const tb_event_t *ev)
{
	struct seen *s = NULL;

	for (size_t i = 0; i < r->nseen && !s; i++)
		if (r->seen[i].attempt == ev->attempt)
			s = &r->seen[i];
	if (!s && r->nseen == r->cap) {
		size_t more = r->cap ? r->cap * 2 : 16;
		struct seen *bigger = realloc(r->seen, more * sizeof(*bigger));
		if (!bigger)
			return 0; /* shown twice rather than lost */
		r->seen = bigger, r->cap = more;
	}
	if (!s) {
		s = &r->seen[r->nseen++];
		*s = (struct seen){ ev->attempt, -1 };
	}
	if ((int64_t)ev->seq <= s->last)
		return 1;
	s->last = (int64_t)ev->seq;
	return 0;
}

/* Message @p m: kept if it is an event of the task (and attempt). */
static void take(reading_t *r, const rd_kafka_message_t *m)
{
	tb_event_t ev;
	tb_error_t err;

	if (m->err || m->key_len != r->idlen || memcmp(m->key, r->id, r->idlen) ||
	    tb_msg_decode(&tb_schema_event, &ev, m->payload, m->len, &err) < 0)
		return;
	if (!strcmp(ev.task_id, r->id) && !repeated(r, &ev) &&
	    (!r->attempt || ev.attempt == r->attempt))
		json_array_append_new(r->out, tb_follow_event_json(&ev));
	tb_msg_free(&tb_schema_event, &ev);
}

json_t *tb_view_history(tb_view_reader_t *rd, const char *id, const tb_view_span_t *span,
			uint64_t attempt, size_t max, tb_error_t *err)
{
	reading_t r = { .id = id, .idlen = strlen(id), .attempt = attempt };
	int64_t end = 0, at = span->first;

	if (span->partition < 0)
		return json_array(); /* no event of it seen */
	pthread_mutex_lock(&rd->lock);
	if (open_at(rd, span, &end, err) < 0) {
		pthread_mutex_unlock(&rd->lock);
		return NULL;
	}
	/* to its last event the index saw: what came after, the page's live
	 * stream (opened first) brings; the partition's end may be far on */
	if (span->last + 1 < end)
		end = span->last + 1;
	r.out = json_array();
	uint64_t deadline = tb_mono_ms() + READ_MS;
	while (r.out && at < end && json_array_size(r.out) < max) {
		if (tb_mono_ms() > deadline) {
			tb_error_set(err, TB_ETIMEOUT, "kafka: %s [%d]: not read in %d s",
				     rd->cfg->kafka.events_topic, (int)span->partition,
				     READ_MS / 1000);
			json_decref(r.out);
			r.out = NULL;
			break;
		}
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rd->c, 200);
		if (!m)
			continue;
		int eof = m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF;
		if (m->err && !eof) {
			tb_error_set(err, TB_EIO, "kafka: %s [%d]: %s", rd->cfg->kafka.events_topic,
				     (int)span->partition, rd_kafka_message_errstr(m));
			rd_kafka_message_destroy(m);
			json_decref(r.out);
			r.out = NULL;
			break;
		}
		if (!eof) {
			at = m->offset + 1;
			take(&r, m);
		}
		rd_kafka_message_destroy(m);
		if (eof)
			break;
	}
	free(r.seen);
	drop(rd); /* a consumer kept would keep its buffers: megabytes */
	pthread_mutex_unlock(&rd->lock);
	return r.out;
}
