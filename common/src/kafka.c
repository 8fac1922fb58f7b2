/*
 * kafka.c: client construction and the mock cluster. Every setting taskbox
 * relies on is set here, with the reason next to it.
 */
#include "tb/kafka.h"

#include "tb/clock.h"

#include "tb/log.h"

#include <jansson.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

struct tb_kafka_mock {
	rd_kafka_t *owner; /* the mock cluster lives inside this handle */
	rd_kafka_mock_cluster_t *cluster;
};

static int set(rd_kafka_conf_t *conf, const char *key, const char *value, tb_error_t *err)
{
	char errstr[512];

	if (rd_kafka_conf_set(conf, key, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
		/* no value: it may be a secret (sasl.password) */
		return tb_error_set(err, TB_EINVAL, "kafka setting %s: %s", key, errstr);
	return 0;
}

static int set_props(rd_kafka_conf_t *conf, const tb_strmap_t *props, tb_error_t *err)
{
	int rc;

	for (size_t i = 0; props && i < props->n; i++)
		if ((rc = set(conf, props->items[i].key, props->items[i].value, err)) < 0)
			return rc;
	return 0;
}

/* librdkafka's own log lines join ours, as logfmt on the same fd. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	tb_log_level_t l = level <= 3   ? TB_LOG_ERROR
			   : level == 4 ? TB_LOG_WARN
			   : level <= 6 ? TB_LOG_INFO
					: TB_LOG_DEBUG;

	tb_log(l, NULL, "kafka %s %s: %s", rd_kafka_name(rk), fac, buf);
}

static int make(rd_kafka_t **out, rd_kafka_type_t type, rd_kafka_conf_t *conf, tb_error_t *err)
{
	char errstr[512];

	rd_kafka_conf_set_log_cb(conf, log_cb);
	/* rd_kafka_new takes ownership of conf only on success. */
	*out = rd_kafka_new(type, conf, errstr, sizeof(errstr));
	if (!*out) {
		rd_kafka_conf_destroy(conf);
		return tb_error_set(err, TB_EINVAL, "kafka client: %s", errstr);
	}
	return 0;
}

int tb_kafka_mock_start(tb_kafka_mock_t **out, int brokers, const tb_kafka_topic_spec_t *topics,
			size_t ntopics, tb_error_t *err)
{
	tb_kafka_mock_t *m = calloc(1, sizeof(*m));
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	int rc;

	*out = NULL;
	if (!m || !conf) {
		free(m);
		if (conf)
			rd_kafka_conf_destroy(conf);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	/* A plain producer handle whose only job is to host the cluster. */
	if ((rc = set(conf, "log_level", "3", err)) < 0) {
		rd_kafka_conf_destroy(conf);
		free(m);
		return rc;
	}
	if ((rc = make(&m->owner, RD_KAFKA_PRODUCER, conf, err)) < 0) {
		free(m); /* make() released conf */
		return rc;
	}
	m->cluster = rd_kafka_mock_cluster_new(m->owner, brokers);
	if (!m->cluster) {
		tb_kafka_mock_free(m);
		return tb_error_set(err, TB_EIO, "cannot start the mock Kafka cluster");
	}
	for (size_t i = 0; i < ntopics; i++) {
		rd_kafka_resp_err_t e =
		    rd_kafka_mock_topic_create(m->cluster, topics[i].name, topics[i].partitions, 1);
		if (e) {
			tb_kafka_mock_free(m);
			return tb_error_set(err, TB_EIO, "mock topic %s: %s", topics[i].name,
					    rd_kafka_err2str(e));
		}
	}
	*out = m;
	return 0;
}

const char *tb_kafka_mock_bootstraps(const tb_kafka_mock_t *m)
{
	return rd_kafka_mock_cluster_bootstraps(m->cluster);
}

struct rd_kafka_mock_cluster_s *tb_kafka_mock_cluster(tb_kafka_mock_t *m)
{
	return m->cluster;
}

void tb_kafka_mock_free(tb_kafka_mock_t *m)
{
	if (!m)
		return;
	if (m->cluster)
		rd_kafka_mock_cluster_destroy(m->cluster);
	if (m->owner)
		rd_kafka_destroy(m->owner);
	free(m);
}

/* Messages that could not be delivered (after librdkafka's retries), in
 * this process: counted by the delivery report, read by the flushes. */
static atomic_ulong undelivered;

struct tb_kafka_tracker {
	atomic_long pending, failed, delivered, refs;
};

tb_kafka_tracker_t *tb_kafka_tracker_new(void)
{
	tb_kafka_tracker_t *t = calloc(1, sizeof(*t));
	if (t)
		atomic_store(&t->refs, 1);
	return t;
}

void tb_kafka_tracker_release(tb_kafka_tracker_t *t)
{
	if (t && atomic_fetch_sub(&t->refs, 1) == 1)
		free(t);
}

void tb_kafka_tracker_reset(tb_kafka_tracker_t *t)
{
	atomic_store(&t->failed, 0);
}

long tb_kafka_tracker_delivered(tb_kafka_tracker_t *t)
{
	return atomic_load(&t->delivered);
}

long tb_kafka_tracker_pending(tb_kafka_tracker_t *t)
{
	return atomic_load(&t->pending);
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	tb_kafka_tracker_t *t = m->_private;

	(void)rk, (void)opaque;
	if (t) {
		atomic_fetch_add(m->err ? &t->failed : &t->delivered, 1);
		atomic_fetch_sub(&t->pending, 1);
		tb_kafka_tracker_release(t);
	}
	if (!m->err)
		return;
	atomic_fetch_add(&undelivered, 1);
	tb_warn(NULL, "kafka: a message to %s was not delivered: %s",
		m->rkt ? rd_kafka_topic_name(m->rkt) : "?", rd_kafka_err2str(m->err));
}

uint64_t tb_kafka_undelivered(void)
{
	return atomic_load(&undelivered);
}

int tb_kafka_produce_tracked(rd_kafka_t *producer, const char *topic, const char *key,
			     const void *value, size_t len, tb_kafka_tracker_t *t, tb_error_t *err)
{
	atomic_fetch_add(&t->refs, 1);
	atomic_fetch_add(&t->pending, 1);
	rd_kafka_resp_err_t e = rd_kafka_producev(
	    producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key ? strlen(key) : 0),
	    RD_KAFKA_V_VALUE((void *)value, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
	    RD_KAFKA_V_OPAQUE(t), RD_KAFKA_V_END);

	if (e) {
		atomic_fetch_sub(&t->pending, 1);
		atomic_fetch_sub(&t->refs, 1); /* the owner still holds one */
	}
	if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL)
		return tb_error_set(err, TB_ERETRY, "produce to %s: local queue full", topic);
	if (e)
		return tb_error_set(err, TB_EIO, "produce to %s: %s", topic, rd_kafka_err2str(e));
	return 0;
}

/* The producer's linger.ms (tb_kafka_producer_new): how long a message
 * may wait for others to join its batch. */
#define PRODUCER_LINGER_MS 5
#define TB_LINGER_STR_(n) #n
#define TB_LINGER_STR(n) TB_LINGER_STR_(n)

int tb_kafka_await(rd_kafka_t *producer, tb_kafka_tracker_t *t, int timeout_ms, tb_error_t *err)
{
	char why[256];
	uint64_t now = tb_mono_ms(), nudge = now;
	uint64_t until = now + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);

	while (atomic_load(&t->pending) > 0) {
		if ((now = tb_mono_ms()) >= until)
			return tb_error_set(err, TB_ERETRY,
					    "kafka: %ld messages not delivered in %d ms",
					    (long)atomic_load(&t->pending), timeout_ms);
		/* While a flush is under way librdkafka sends at once instead
		 * of lingering, so the task's last events go now. A flush
		 * wakes every broker thread, though, and every slot awaits
		 * its own events: once a linger is enough (a message not
		 * sent by then goes when its linger ends). In between,
		 * delivery reports, whoever's, in waits of 1 ms; then this
		 * task's count is looked at again. */
		if (now >= nudge) {
			rd_kafka_flush(producer, 1);
			nudge = tb_mono_ms() + PRODUCER_LINGER_MS;
		} else {
			rd_kafka_poll(producer, 1);
		}
	}
	if (rd_kafka_fatal_error(producer, why, sizeof(why)))
		return tb_error_set(err, TB_EIO, "kafka producer failed for good: %s", why);
	if (atomic_load(&t->failed))
		return tb_error_set(err, TB_ERETRY, "kafka: %ld messages not delivered",
				    (long)atomic_load(&t->failed));
	return 0;
}

int tb_kafka_flush(rd_kafka_t *producer, int timeout_ms, uint64_t since, tb_error_t *err)
{
	char why[256];
	rd_kafka_resp_err_t e = rd_kafka_flush(producer, timeout_ms);

	if (rd_kafka_fatal_error(producer, why, sizeof(why)))
		return tb_error_set(err, TB_EIO, "kafka producer failed for good: %s", why);
	if (e)
		return tb_error_set(err, TB_ERETRY, "kafka: not delivered in %d ms: %s", timeout_ms,
				    rd_kafka_err2str(e));
	if (tb_kafka_undelivered() != since)
		return tb_error_set(err, TB_ERETRY, "kafka: %llu messages not delivered since",
				    (unsigned long long)(tb_kafka_undelivered() - since));
	return 0;
}

/* The last error a producer's brokers gave (librdkafka's error callback:
 * "127.0.0.1:9092/1: Connect to ipv4#127.0.0.1:9092 failed: Connection
 * refused"), which names the broker and the reason, for tb_kafka_probe. */
static pthread_mutex_t error_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_error[512];
static uint64_t last_error_ms;

static void on_error(rd_kafka_t *rk, int e, const char *reason, void *opaque)
{
	(void)opaque;
	/* logged as librdkafka logs it without this callback */
	tb_log(TB_LOG_ERROR, NULL, "kafka %s ERROR: %s: %s", rd_kafka_name(rk),
	       rd_kafka_err2str((rd_kafka_resp_err_t)e), reason);
	pthread_mutex_lock(&error_lock);
	snprintf(last_error, sizeof(last_error), "%s", reason);
	last_error_ms = tb_mono_ms();
	pthread_mutex_unlock(&error_lock);
}

int tb_kafka_probe(rd_kafka_t *rk, const char *brokers, int timeout_ms, tb_error_t *err)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, NULL, &md, timeout_ms);
	char last[sizeof(last_error)] = "";

	if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
		rd_kafka_metadata_destroy(md);
		return 0;
	}
	pthread_mutex_lock(&error_lock);
	if (last_error_ms && tb_mono_ms() - last_error_ms < 30000)
		snprintf(last, sizeof(last), "%s", last_error);
	pthread_mutex_unlock(&error_lock);
	return tb_error_set(err, TB_EIO, "no Kafka broker of %s answers in %d ms (%s)%s%s", brokers,
			    timeout_ms, rd_kafka_err2str(e), last[0] ? ": " : "", last);
}

int tb_kafka_producer_new(rd_kafka_t **out, const char *brokers, const tb_strmap_t *props,
			  tb_error_t *err)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	int rc;

	*out = NULL;
	if ((rc = set(conf, "bootstrap.servers", brokers, err)) < 0 ||
	    /* Ordered, exactly-once-per-session delivery of each task's
	     * events; implies acks=all and bounded in-flight requests. */
	    (rc = set(conf, "enable.idempotence", "true", err)) < 0 ||
	    /* Batch events for a few ms: many small events per task (a
	     * task's last ones do not wait: see tb_kafka_await). */
	    (rc = set(conf, "linger.ms", TB_LINGER_STR(PRODUCER_LINGER_MS), err)) < 0 ||
	    /* Brokers back after an outage are found within a second (the
	     * default backs off to 10 s): readiness promises 5. */
	    (rc = set(conf, "reconnect.backoff.max.ms", "1000", err)) < 0 ||
	    (rc = set(conf, "log_level", "4", err)) < 0 || (rc = set_props(conf, props, err)) < 0) {
		rd_kafka_conf_destroy(conf);
		return rc;
	}
	rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
	rd_kafka_conf_set_error_cb(conf, on_error);
	return make(out, RD_KAFKA_PRODUCER, conf, err);
}

/*
 * Group members' join states, from librdkafka's statistics (the only place
 * it tells them): a member stuck in one state (seen with 2.0.2 after a
 * broker restart: "wait-unassign-to-complete" for good) is noticed by
 * the worker, which then replaces its consumer. A few members per process.
 */
#define MAX_WATCHED 16
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct watched {
	const rd_kafka_t *rk;
	char state[40];
	uint64_t since;    /* monotonic ms */
	int commit_failed; /* a commit failed since tb_kafka_commit_failed() asked */
} watched[MAX_WATCHED];

/* @p rk's entry, or a free one made its own; NULL if none is free.
 * Called with watch_lock held. */
static struct watched *watch_entry(const rd_kafka_t *rk)
{
	for (int i = 0; i < MAX_WATCHED; i++)
		if (watched[i].rk == rk)
			return &watched[i];
	for (int i = 0; i < MAX_WATCHED; i++)
		if (!watched[i].rk) {
			watched[i].rk = rk;
			snprintf(watched[i].state, sizeof(watched[i].state), "unknown");
			watched[i].since = tb_mono_ms();
			return &watched[i];
		}
	return NULL;
}

static _Atomic(tb_kafka_lag_fn) lag_hook;

void tb_kafka_on_lag(tb_kafka_lag_fn fn)
{
	atomic_store(&lag_hook, fn);
}

/* Each topic's "consumer_lag" per partition, from a statistics object. */
static void report_lag(const json_t *root)
{
	tb_kafka_lag_fn fn = atomic_load(&lag_hook);
	const char *topic;
	json_t *t;
	int64_t lag[1024];

	if (!fn)
		return;
	json_object_foreach(json_object_get(root, "topics"), topic, t)
	{
		const char *key;
		json_t *p;
		int n = 0;
		json_object_foreach(json_object_get(t, "partitions"), key, p)
		{
			json_int_t id = json_integer_value(json_object_get(p, "partition"));
			json_t *l = json_object_get(p, "consumer_lag");
			if (id < 0 || id >= 1024 || !json_is_integer(l)) /* -1: the UA partition */
				continue;
			while (n <= id)
				lag[n++] = -1;
			lag[id] = json_integer_value(l);
		}
		fn(topic, lag, n);
	}
}

static int on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
	json_t *root = json_loadb(json, len, 0, NULL);
	const char *state =
	    json_string_value(json_object_get(json_object_get(root, "cgrp"), "join_state"));

	(void)opaque;
	pthread_mutex_lock(&watch_lock);
	struct watched *w = state ? watch_entry(rk) : NULL;
	if (w && strcmp(w->state, state)) {
		snprintf(w->state, sizeof(w->state), "%s", state);
		w->since = tb_mono_ms();
	}
	pthread_mutex_unlock(&watch_lock);
	report_lag(root);
	json_decref(root);
	return 0; /* librdkafka frees json */
}

/* A commit's outcome: a failure is kept for tb_kafka_commit_failed(). "No
 * offset to commit" is not one. */
static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
		      rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
	int failed = err && err != RD_KAFKA_RESP_ERR__NO_OFFSET;

	(void)opaque;
	for (int i = 0; offsets && i < offsets->cnt && !failed; i++)
		failed = offsets->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR;
	if (!failed)
		return;
	pthread_mutex_lock(&watch_lock);
	struct watched *w = watch_entry(rk);
	if (w)
		w->commit_failed = 1;
	pthread_mutex_unlock(&watch_lock);
}

int tb_kafka_commit_failed(const rd_kafka_t *rk)
{
	int failed = 0;

	pthread_mutex_lock(&watch_lock);
	for (int i = 0; i < MAX_WATCHED; i++)
		if (watched[i].rk == rk) {
			failed = watched[i].commit_failed;
			watched[i].commit_failed = 0;
		}
	pthread_mutex_unlock(&watch_lock);
	return failed;
}

uint64_t tb_kafka_join_state(const rd_kafka_t *rk, char *state, size_t len)
{
	uint64_t for_ms = 0;

	snprintf(state, len, "unknown");
	pthread_mutex_lock(&watch_lock);
	for (int i = 0; i < MAX_WATCHED; i++)
		if (watched[i].rk == rk) {
			snprintf(state, len, "%s", watched[i].state);
			for_ms = tb_mono_ms() - watched[i].since;
		}
	pthread_mutex_unlock(&watch_lock);
	return for_ms;
}

void tb_kafka_forget(const rd_kafka_t *rk)
{
	pthread_mutex_lock(&watch_lock);
	for (int i = 0; i < MAX_WATCHED; i++)
		if (watched[i].rk == rk)
			memset(&watched[i], 0, sizeof(watched[i]));
	pthread_mutex_unlock(&watch_lock);
}

int tb_kafka_consumer_new(rd_kafka_t **out, const char *brokers, const char *group,
			  const char *instance_id, const char *assignor, const tb_strmap_t *props,
			  tb_rebalance_fn rebalance, void *opaque, tb_error_t *err)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	int rc;

	*out = NULL;
	if ((rc = set(conf, "bootstrap.servers", brokers, err)) < 0 ||
	    (rc = set(conf, "group.id", group, err)) < 0 ||
	    /* The worker commits a watermark after teardown, never before. */
	    (rc = set(conf, "enable.auto.commit", "false", err)) < 0 ||
	    (rc = set(conf, "enable.auto.offset.store", "false", err)) < 0 ||
	    (rc = set(conf, "auto.offset.reset", "earliest", err)) < 0 ||
	    /* the worker's is its configuration's (kafka.assignor); a
	     * reader alone in its group needs no stickiness */
	    (rc = set(conf, "partition.assignment.strategy", assignor ? assignor : "range", err)) <
		0 ||
	    (rc = set(conf, "log_level", "4", err)) < 0 ||
	    /* as the producer's: back within a second of the brokers */
	    (rc = set(conf, "reconnect.backoff.max.ms", "1000", err)) < 0 ||
	    /* A member that died (SIGKILL, a node lost) keeps its partitions
	     * until its session expires, and every rebalance meanwhile (a
	     * restarted worker joining) waits for it: librdkafka's 45 s would
	     * hold a killed worker's tasks three times ledger.lease_ms's
	     * default. 10 s (Kafka's own default before 3.0) is above the
	     * brokers' minimum (group.min.session.timeout.ms, 6 s); heartbeats
	     * come from librdkafka's own thread every 3 s, so a busy worker
	     * does not miss them. kafka.properties may set another. */
	    (rc = set(conf, "session.timeout.ms", "10000", err)) < 0 ||
	    (instance_id && (rc = set(conf, "group.instance.id", instance_id, err)) < 0) ||
	    (rc = set_props(conf, props, err)) < 0) {
		rd_kafka_conf_destroy(conf);
		return rc;
	}
	if (rebalance) {
		rd_kafka_conf_set_rebalance_cb(conf, rebalance);
		rd_kafka_conf_set_opaque(conf, opaque);
		/* the join state, every 5 s, for tb_kafka_join_state() */
		if ((rc = set(conf, "statistics.interval.ms", "5000", err)) < 0) {
			rd_kafka_conf_destroy(conf);
			return rc;
		}
		rd_kafka_conf_set_stats_cb(conf, on_stats);
		rd_kafka_conf_set_offset_commit_cb(conf, on_commit);
	}
	if ((rc = make(out, RD_KAFKA_CONSUMER, conf, err)) < 0)
		return rc;
	rd_kafka_poll_set_consumer(*out);
	return 0;
}

int tb_kafka_reader_new(rd_kafka_t **out, const char *brokers, const tb_strmap_t *props,
			const char *name, tb_error_t *err)
{
	tb_kv_t items[64 + 1];
	tb_strmap_t all = { 0, items };
	char group[96];

	items[all.n++] = (tb_kv_t){ "queued.max.messages.kbytes", "4096" };
	for (size_t i = 0; props && i < props->n && i < 63; i++)
		items[all.n++] = props->items[i];
	items[all.n++] = (tb_kv_t){ "enable.partition.eof", "true" };
	snprintf(group, sizeof(group), "%.64s-%d", name, (int)getpid());
	return tb_kafka_consumer_new(out, brokers, group, NULL, NULL, &all, NULL, NULL, err);
}

int tb_kafka_produce(rd_kafka_t *producer, const char *topic, const char *key, const void *value,
		     size_t len, tb_error_t *err)
{
	rd_kafka_resp_err_t e = rd_kafka_producev(
	    producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key ? strlen(key) : 0),
	    RD_KAFKA_V_VALUE((void *)value, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
	    RD_KAFKA_V_END);

	if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL)
		return tb_error_set(err, TB_ERETRY, "produce to %s: local queue full", topic);
	if (e)
		return tb_error_set(err, TB_EIO, "produce to %s: %s", topic, rd_kafka_err2str(e));
	return 0;
}
