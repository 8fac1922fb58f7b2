/*
 * feed.c: the view's reader of the topics (feed.h).
 */
#include "feed.h"

#include "follow.h"

#include "tb/log.h"
#include "tb/schema_followup.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARTS 1024 /* partitions followed to their first end, per topic set */

struct tb_view_feed {
	const tb_config_t *cfg;
	rd_kafka_t *c;
	tb_view_index_t *index;
	tb_view_live_t *live;
	pthread_t thread;
	atomic_int stop, caught_up;
	atomic_uint_fast64_t messages, skipped;
	int parts;    /* partitions assigned */
	int at_end;   /* of those, read to an end */
	uint8_t *eof; /* per (topic, partition) seen: MAX_PARTS * 3 */
};

static void consume(tb_view_feed_t *f, const rd_kafka_message_t *m)
{
	const char *topic = rd_kafka_topic_name(m->rkt);
	const tb_config_t *cfg = f->cfg;
	tb_error_t err;

	if (!strcmp(topic, cfg->kafka.events_topic)) {
		tb_event_t ev;
		if (tb_msg_decode(&tb_schema_event, &ev, m->payload, m->len, &err) < 0) {
			atomic_fetch_add(&f->skipped, 1);
			return;
		}
		tb_view_index_event(f->index, &ev, m->partition, m->offset);
		json_t *o =
		    tb_view_live_watching(f->live, ev.task_id) ? tb_follow_event_json(&ev) : NULL;
		char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
		if (text)
			tb_view_live_publish(f->live, ev.task_id, text, strlen(text));
		free(text);
		json_decref(o);
		tb_msg_free(&tb_schema_event, &ev);
	} else if (!strcmp(topic, cfg->kafka.tasks_topic)) {
		tb_task_t t;
		rd_kafka_timestamp_type_t kind;
		int64_t ts = rd_kafka_message_timestamp(m, &kind);
		if (tb_msg_decode(&tb_schema_task, &t, m->payload, m->len, &err) < 0) {
			tb_followup_t fu; /* the topic carries follow-ups too */
			if (tb_msg_decode(&tb_schema_followup, &fu, m->payload, m->len, &err) == 0)
				tb_msg_free(&tb_schema_followup, &fu);
			else
				atomic_fetch_add(&f->skipped, 1); /* the DLQ says why */
			return;
		}
		tb_view_index_task(f->index, &t, ts > 0 ? ts : 0);
		tb_msg_free(&tb_schema_task, &t);
	} else {
		tb_dlq_t d;
		if (tb_msg_decode(&tb_schema_dlq, &d, m->payload, m->len, &err) < 0) {
			atomic_fetch_add(&f->skipped, 1);
			return;
		}
		tb_view_index_dlq(f->index, &d, m->partition, m->offset);
		tb_msg_free(&tb_schema_dlq, &d);
	}
	atomic_fetch_add(&f->messages, 1);
}

static void *run(void *arg)
{
	tb_view_feed_t *f = arg;

	while (!atomic_load(&f->stop)) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(f->c, 200);
		if (!m)
			continue;
		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
			/* the first end of each partition: then caught up */
			const char *topic = rd_kafka_topic_name(m->rkt);
			int t = !strcmp(topic, f->cfg->kafka.events_topic)  ? 0
				: !strcmp(topic, f->cfg->kafka.tasks_topic) ? 1
									    : 2;
			size_t at = (size_t)t * MAX_PARTS + (size_t)m->partition;
			if (m->partition >= 0 && m->partition < MAX_PARTS && !f->eof[at]) {
				f->eof[at] = 1;
				if (++f->at_end >= f->parts)
					atomic_store(&f->caught_up, 1);
			}
		} else if (m->err) {
			tb_warn(NULL, "view: kafka: %s", rd_kafka_message_errstr(m));
		} else {
			consume(f, m);
		}
		rd_kafka_message_destroy(m);
	}
	return NULL;
}

int tb_view_feed_start(tb_view_feed_t **out, const tb_config_t *cfg, int64_t since_ms,
		       tb_view_index_t *index, tb_view_live_t *live, tb_error_t *err)
{
	const char *all[] = { cfg->kafka.events_topic, cfg->kafka.tasks_topic,
			      cfg->kafka.dlq_topic };
	tb_view_feed_t *f = calloc(1, sizeof(*f));
	int rc = TB_ENOMEM;

	*out = NULL;
	if (!f || !(f->eof = calloc(3 * MAX_PARTS, 1))) {
		free(f);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	f->cfg = cfg, f->index = index, f->live = live;
	/* all three; else without the DLQ, else the events alone */
	for (size_t n = 3; n >= 1; n--) {
		if ((rc = tb_follow_open_topics(cfg, all, n, since_ms, &f->c, NULL, err)) == 0)
			break;
		if (n > 1)
			tb_warn(NULL, "view: %s: reading fewer topics", err->msg);
	}
	if (rc < 0) {
		free(f->eof);
		free(f);
		return rc;
	}
	rd_kafka_topic_partition_list_t *a = NULL;
	if (!rd_kafka_assignment(f->c, &a) && a) {
		f->parts = a->cnt;
		rd_kafka_topic_partition_list_destroy(a);
	}
	if (pthread_create(&f->thread, NULL, run, f) != 0) {
		rd_kafka_consumer_close(f->c);
		rd_kafka_destroy(f->c);
		free(f->eof);
		free(f);
		return tb_error_set(err, TB_EIO, "view: no thread for the feed");
	}
	*out = f;
	return 0;
}

void tb_view_feed_state(tb_view_feed_t *f, int *caught_up, uint64_t *messages, uint64_t *skipped)
{
	*caught_up = atomic_load(&f->caught_up);
	*messages = atomic_load(&f->messages);
	*skipped = atomic_load(&f->skipped);
}

void tb_view_feed_stop(tb_view_feed_t *f)
{
	if (!f)
		return;
	atomic_store(&f->stop, 1);
	pthread_join(f->thread, NULL);
	rd_kafka_consumer_close(f->c);
	rd_kafka_destroy(f->c);
	free(f->eof);
	free(f);
}
