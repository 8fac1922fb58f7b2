/*
 * test_kafka_roundtrip.c: the test harness's Kafka is real: produce the
 * task example with the idempotent producer, consume it back in a fresh
 * consumer group, and decode it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tb/schema_task.h"

#define TOPIC "taskbox.test"

static const char *brokers;

static uint8_t *read_hex(const char *path, size_t *len)
{
	FILE *f = fopen(path, "r");
	uint8_t *out = malloc(1 << 16);
	unsigned b;
	size_t n = 0;

	assert_non_null(f);
	while (n < (1 << 16) && fscanf(f, " %2x", &b) == 1)
		out[n++] = (uint8_t)b;
	fclose(f);
	*len = n;
	return out;
}

static rd_kafka_t *client(rd_kafka_type_t type, const char *group)
{
	char errstr[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();

	assert_int_equal(
	    rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof(errstr)),
	    RD_KAFKA_CONF_OK);
	if (type == RD_KAFKA_PRODUCER) {
		assert_int_equal(
		    rd_kafka_conf_set(conf, "enable.idempotence", "true", errstr, sizeof(errstr)),
		    RD_KAFKA_CONF_OK);
	} else {
		assert_int_equal(rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof(errstr)),
				 RD_KAFKA_CONF_OK);
		assert_int_equal(rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", errstr,
						   sizeof(errstr)),
				 RD_KAFKA_CONF_OK);
		assert_int_equal(rd_kafka_conf_set(conf, "partition.assignment.strategy", "range",
						   errstr, sizeof(errstr)),
				 RD_KAFKA_CONF_OK);
	}
	rd_kafka_t *rk = rd_kafka_new(type, conf, errstr, sizeof(errstr));
	if (!rk)
		fail_msg("rd_kafka_new: %s", errstr);
	return rk;
}

static void test_kafka__produced_task_is_consumed_and_decodes(void **state)
{
	char key[64], group[80];
	size_t len;
	uint8_t *value = read_hex(TB_SOURCE_DIR "/schemas/examples/task.hex", &len);
	rd_kafka_t *p = client(RD_KAFKA_PRODUCER, NULL), *c;
	int found = 0;

	(void)state;
	snprintf(key, sizeof(key), "roundtrip-%ld-%d", (long)time(NULL), getpid());
	snprintf(group, sizeof(group), "test-%s", key);
	assert_int_equal(
	    rd_kafka_producev(p, RD_KAFKA_V_TOPIC(TOPIC), RD_KAFKA_V_KEY(key, strlen(key)),
			      RD_KAFKA_V_VALUE(value, len),
			      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
	    RD_KAFKA_RESP_ERR_NO_ERROR);
	assert_int_equal(rd_kafka_flush(p, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
	rd_kafka_destroy(p);

	c = client(RD_KAFKA_CONSUMER, group);
	rd_kafka_poll_set_consumer(c);
	rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(topics, TOPIC, RD_KAFKA_PARTITION_UA);
	assert_int_equal(rd_kafka_subscribe(c, topics), RD_KAFKA_RESP_ERR_NO_ERROR);
	rd_kafka_topic_partition_list_destroy(topics);

	/* Bounded: at most 60 s, at most 100000 messages read. */
	time_t deadline = time(NULL) + 60;
	for (int i = 0; i < 100000 && !found && time(NULL) < deadline; i++) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 500);
		if (!m)
			continue;
		if (!m->err && m->key_len == strlen(key) && memcmp(m->key, key, m->key_len) == 0) {
			tb_task_t task;
			tb_error_t err;
			if (tb_msg_decode(&tb_schema_task, &task, m->payload, m->len, &err) != 0)
				fail_msg("decode: %s", err.msg);
			assert_string_equal(task.id, "t-20261129-0001");
			tb_msg_free(&tb_schema_task, &task);
			found = 1;
		}
		rd_kafka_message_destroy(m);
	}
	rd_kafka_consumer_close(c);
	rd_kafka_destroy(c);
	free(value);
	assert_true(found);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kafka__produced_task_is_consumed_and_decodes),
	};
	brokers = getenv("TASKBOX_TEST_KAFKA");
	if (!brokers) {
		printf(
		    "SKIP: TASKBOX_TEST_KAFKA is not set (tests/run starts Kafka and sets it)\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
