/*
 * kafka.h: librdkafka set up the way every taskbox program needs it.
 *
 * One place decides the client settings: producers are idempotent (events
 * keep their order per task and are not duplicated by retries); consumers
 * never auto-commit (the worker commits a partition watermark after
 * teardown); the worker's consumer uses the assignor its configuration
 * names (cooperative-sticky by default; worker/loop/rebalance.c and
 * worker.c work around librdkafka 2.0.2's defects in it), readers alone in a group "range".
 * "mock" as the broker list selects librdkafka's in-process mock cluster
 * (tb_kafka_mock_*) for the demo and fault tests. This file does not know
 * what the messages mean.
 */
#ifndef TB_KAFKA_H
#define TB_KAFKA_H

#include "tb/codec.h"
#include "tb/error.h"

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>

typedef struct tb_kafka_mock tb_kafka_mock_t;

typedef struct tb_kafka_topic_spec {
	const char *name;
	int partitions;
} tb_kafka_topic_spec_t;

/**
 * Starts an in-process mock cluster with @p brokers brokers and the given
 * topics. @param[out] out released with tb_kafka_mock_free().
 */
int tb_kafka_mock_start(tb_kafka_mock_t **out, int brokers, const tb_kafka_topic_spec_t *topics,
			size_t ntopics, tb_error_t *err);

/** The cluster's bootstrap servers; owned by @p m. */
const char *tb_kafka_mock_bootstraps(const tb_kafka_mock_t *m);

/** The librdkafka mock handle, for fault injection in tests. */
struct rd_kafka_mock_cluster_s *tb_kafka_mock_cluster(tb_kafka_mock_t *m);

void tb_kafka_mock_free(tb_kafka_mock_t *m);

/**
 * An idempotent producer. @p props (may be NULL) are extra librdkafka
 * settings applied last. @param[out] out released with rd_kafka_destroy().
 */
int tb_kafka_producer_new(rd_kafka_t **out, const char *brokers, const tb_strmap_t *props,
			  tb_error_t *err);

/**
 * Whether a broker answers: a metadata request on @p rk (no topics), for
 * @p timeout_ms at most. @p brokers names them in the message.
 * @return 0; TB_EIO naming the brokers, librdkafka's error and the last
 *         error a producer's broker gave (which broker, and why)
 */
int tb_kafka_probe(rd_kafka_t *rk, const char *brokers, int timeout_ms, tb_error_t *err);

/** Messages this process's producers could not deliver, so far: a count
 * to pass to tb_kafka_flush() as @p since. */
uint64_t tb_kafka_undelivered(void);

/**
 * Waits until every message produced so far on @p producer is delivered.
 * @return 0; TB_ERETRY if the time ran out or a message of any producer
 *         here was not delivered since tb_kafka_undelivered() said
 *         @p since; TB_EIO if the producer failed for good.
 */
int tb_kafka_flush(rd_kafka_t *producer, int timeout_ms, uint64_t since, tb_error_t *err);

/**
 * A consumer in @p group, subscribed to nothing yet, with manual commits.
 * @param instance_id static membership id, or NULL.
 * @param assignor librdkafka's partition.assignment.strategy
 *        ("cooperative-sticky", "range", "roundrobin"); NULL: "range".
 * @param rebalance called on assignment and revocation (it must assign);
 *        NULL lets librdkafka assign by itself. @p opaque is its last
 *        argument.
 * @param[out] out released with rd_kafka_consumer_close() and
 *             rd_kafka_destroy().
 */
typedef void (*tb_rebalance_fn)(rd_kafka_t *rk, rd_kafka_resp_err_t err,
				rd_kafka_topic_partition_list_t *parts, void *opaque);

/**
 * A group member's join state (librdkafka's words: "steady",
 * "wait-unassign-to-complete", ...) as of its last statistics (every 5 s;
 * members made with a rebalance callback only), and how long it has been
 * in it, in ms. "unknown" and 0 before the first statistics.
 */
uint64_t tb_kafka_join_state(const rd_kafka_t *rk, char *state, size_t len);

/**
 * Called from a consumer's statistics (every 5 s, on its poll thread)
 * with each subscribed topic's lag per partition: @p lag[p] is the
 * messages not yet committed on partition p, or -1 when this consumer
 * does not hold p. One hook per process (the worker's metrics).
 */
typedef void (*tb_kafka_lag_fn)(const char *topic, const int64_t *lag, int n);
void tb_kafka_on_lag(tb_kafka_lag_fn fn);

/**
 * Counts one sender's messages still in flight (a task's events), so it
 * can wait for its own deliveries rather than the whole producer's (which,
 * with other senders busy, may never be idle). Reference-counted: each
 * message in flight holds it, so its owner may release it at any time.
 */
typedef struct tb_kafka_tracker tb_kafka_tracker_t;

/** A new tracker, or NULL without memory. */
tb_kafka_tracker_t *tb_kafka_tracker_new(void);

/** The owner's reference: freed once no message holds it either. */
void tb_kafka_tracker_release(tb_kafka_tracker_t *t);

/** Forgets failures counted so far (a new attempt begins). */
void tb_kafka_tracker_reset(tb_kafka_tracker_t *t);

/** Messages @p t counts that have no delivery report yet. */
long tb_kafka_tracker_pending(tb_kafka_tracker_t *t);

/** Messages @p t counted that were delivered (whenever the report came). */
long tb_kafka_tracker_delivered(tb_kafka_tracker_t *t);

/** tb_kafka_produce(), the message counted by @p t until its delivery
 * report. */
int tb_kafka_produce_tracked(rd_kafka_t *producer, const char *topic, const char *key,
			     const void *value, size_t len, tb_kafka_tracker_t *t, tb_error_t *err);

/**
 * Waits until every message @p t counted was delivered, serving delivery
 * reports meanwhile. @return 0; TB_ERETRY when one was not delivered or
 * @p timeout_ms passed; TB_EIO when the producer failed for good
 */
int tb_kafka_await(rd_kafka_t *producer, tb_kafka_tracker_t *t, int timeout_ms, tb_error_t *err);

/**
 * Whether a commit of @p rk (a member made with a rebalance callback)
 * failed since the last call: its commits are then worth sending again.
 */
int tb_kafka_commit_failed(const rd_kafka_t *rk);

/** Forgets @p rk's join state: call before destroying it. */
void tb_kafka_forget(const rd_kafka_t *rk);

int tb_kafka_consumer_new(rd_kafka_t **out, const char *brokers, const char *group,
			  const char *instance_id, const char *assignor, const tb_strmap_t *props,
			  tb_rebalance_fn rebalance, void *opaque, tb_error_t *err);

/**
 * A consumer that reads topics by hand (assigned, its group never joined,
 * nothing committed), for the commands and taskbox view: a reader's
 * prefetch of 4 MiB rather than librdkafka's 64 (enough at the broker's
 * pace; a reader that runs for days holds no more), then the fleet's
 * @p props over it (the configuration's kafka.properties), partition ends
 * reported. Its group is named @p name and the pid.
 * @param[out] out destroyed with rd_kafka_destroy()
 * @return 0; what tb_kafka_consumer_new() returns
 */
int tb_kafka_reader_new(rd_kafka_t **out, const char *brokers, const tb_strmap_t *props,
			const char *name, tb_error_t *err);

/**
 * Queues one message (copied) for @p topic keyed by @p key (may be NULL).
 * @return 0, TB_ERETRY when the local queue is full, TB_EIO otherwise.
 */
int tb_kafka_produce(rd_kafka_t *producer, const char *topic, const char *key, const void *value,
		     size_t len, tb_error_t *err);

#endif
