/*
 * test_kafka.c: the client settings taskbox's invariants rest on, read back
 * from the clients tb_kafka builds (no broker needed), and the join state
 * of a group member on librdkafka's mock cluster.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "tb/kafka.h"

static void assert_setting(rd_kafka_t *rk, const char *key, const char *want)
{
	char buf[256];
	size_t size = sizeof(buf);

	assert_int_equal(rd_kafka_conf_get(rd_kafka_conf(rk), key, buf, &size), RD_KAFKA_CONF_OK);
	if (strcmp(buf, want) != 0)
		fail_msg("%s is '%s', wanted '%s'", key, buf, want);
}

static void test_kafka__producer_is_idempotent(void **state)
{
	rd_kafka_t *p;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_kafka_producer_new(&p, "127.0.0.1:1", NULL, &err), 0);
	/* Ordered, unduplicated events per task across retries. */
	assert_setting(p, "enable.idempotence", "true");
	rd_kafka_destroy(p);
}

static void test_kafka__consumer_commits_only_by_hand_with_range(void **state)
{
	rd_kafka_t *c;
	tb_error_t err;

	(void)state;
	assert_int_equal(
	    tb_kafka_consumer_new(&c, "127.0.0.1:1", "g", "worker-a", NULL, NULL, NULL, NULL, &err),
	    0);
	/* Ack after teardown: nothing may commit behind the worker's back. */
	assert_setting(c, "enable.auto.commit", "false");
	assert_setting(c, "enable.auto.offset.store", "false");
	/* a reader alone in its group: no stickiness needed */
	assert_setting(c, "partition.assignment.strategy", "range");
	assert_setting(c, "group.instance.id", "worker-a");
	/* a dead member's partitions wait this long: within ledger.lease_ms */
	assert_setting(c, "session.timeout.ms", "10000");
	rd_kafka_destroy(c);
	/* the worker's: its configuration's kafka.assignor */
	assert_int_equal(tb_kafka_consumer_new(&c, "127.0.0.1:1", "g", NULL, "cooperative-sticky",
					       NULL, NULL, NULL, &err),
			 0);
	assert_setting(c, "partition.assignment.strategy", "cooperative-sticky");
	rd_kafka_destroy(c);
}

static void test_kafka__extra_properties_apply_and_bad_ones_are_explained(void **state)
{
	tb_kv_t kv[] = { { (char *)"linger.ms", (char *)"42" } };
	tb_strmap_t props = { 1, kv };
	tb_kv_t bad_kv[] = { { (char *)"no.such.setting", (char *)"1" } };
	tb_strmap_t bad = { 1, bad_kv };
	tb_kv_t session_kv[] = { { (char *)"session.timeout.ms", (char *)"30000" } };
	tb_strmap_t session = { 1, session_kv };
	rd_kafka_t *p, *c;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_kafka_producer_new(&p, "127.0.0.1:1", &props, &err), 0);
	assert_setting(p, "linger.ms", "42");
	rd_kafka_destroy(p);
	assert_int_equal(
	    tb_kafka_consumer_new(&c, "127.0.0.1:1", "g", NULL, NULL, &session, NULL, NULL, &err),
	    0);
	assert_setting(c, "session.timeout.ms", "30000");
	rd_kafka_destroy(c);
	assert_int_equal(tb_kafka_producer_new(&p, "127.0.0.1:1", &bad, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "no.such.setting"));
	assert_null(p);
}

static void assign_all(rd_kafka_t *rk, rd_kafka_resp_err_t e,
		       rd_kafka_topic_partition_list_t *parts, void *opaque)
{
	(void)opaque;
	rd_kafka_assign(rk, e == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS ? parts : NULL);
}

/* A group member's join state, from its statistics, on the mock cluster:
 * the worker replaces a consumer stuck in one (worker.c). */
static void test_kafka__a_members_join_state_is_known(void **state)
{
	static const tb_kafka_topic_spec_t topics[] = { { "joined", 2 } };
	tb_kafka_mock_t *mock;
	rd_kafka_t *c;
	tb_error_t err;
	char st[40];

	(void)state;
	assert_int_equal(tb_kafka_mock_start(&mock, 1, topics, 1, &err), 0);
	assert_int_equal(tb_kafka_consumer_new(&c, tb_kafka_mock_bootstraps(mock), "g", NULL, NULL,
					       NULL, assign_all, NULL, &err),
			 0);
	assert_int_equal(tb_kafka_join_state(c, st, sizeof(st)), 0);
	assert_string_equal(st, "unknown");
	rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(sub, "joined", RD_KAFKA_PARTITION_UA);
	assert_int_equal(rd_kafka_subscribe(c, sub), 0);
	rd_kafka_topic_partition_list_destroy(sub);
	for (int i = 0; i < 300 && strcmp(st, "steady"); i++) { /* 30 s at most */
		rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
		if (m)
			rd_kafka_message_destroy(m);
		tb_kafka_join_state(c, st, sizeof(st));
	}
	assert_string_equal(st, "steady");
	tb_kafka_forget(c);
	assert_int_equal(tb_kafka_join_state(c, st, sizeof(st)), 0);
	assert_string_equal(st, "unknown");
	rd_kafka_consumer_close(c);
	rd_kafka_destroy(c);
	tb_kafka_mock_free(mock);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kafka__producer_is_idempotent),
		cmocka_unit_test(test_kafka__consumer_commits_only_by_hand_with_range),
		cmocka_unit_test(test_kafka__extra_properties_apply_and_bad_ones_are_explained),
		cmocka_unit_test(test_kafka__a_members_join_state_is_known),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
