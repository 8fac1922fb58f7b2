/*
 * kafka.c: client construction and the mock cluster. Every setting taskbox
 * relies on is set here, with the reason next to it.
 */
#include "tb/kafka.h"

#include "tb/log.h"

#include <librdkafka/rdkafka_mock.h>
#include <stdlib.h>
#include <string.h>

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
	    /* Batch events for a few ms: many small events per task. */
	    (rc = set(conf, "linger.ms", "5", err)) < 0 ||
	    (rc = set(conf, "log_level", "4", err)) < 0 || (rc = set_props(conf, props, err)) < 0) {
		rd_kafka_conf_destroy(conf);
		return rc;
	}
	return make(out, RD_KAFKA_PRODUCER, conf, err);
}

int tb_kafka_consumer_new(rd_kafka_t **out, const char *brokers, const char *group,
			  const char *instance_id, const tb_strmap_t *props,
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
	    /* cooperative-sticky in 2.0.2 mishandles commits during a
	     * rebalance; the eager range assignor is well trodden. */
	    (rc = set(conf, "partition.assignment.strategy", "range", err)) < 0 ||
	    (rc = set(conf, "log_level", "4", err)) < 0 ||
	    (instance_id && (rc = set(conf, "group.instance.id", instance_id, err)) < 0) ||
	    (rc = set_props(conf, props, err)) < 0) {
		rd_kafka_conf_destroy(conf);
		return rc;
	}
	if (rebalance) {
		rd_kafka_conf_set_rebalance_cb(conf, rebalance);
		rd_kafka_conf_set_opaque(conf, opaque);
	}
	if ((rc = make(out, RD_KAFKA_CONSUMER, conf, err)) < 0)
		return rc;
	rd_kafka_poll_set_consumer(*out);
	return 0;
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
