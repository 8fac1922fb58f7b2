/*
 * test_kafka.c: the client settings taskbox's invariants rest on, read back
 * from the clients tb_kafka builds (no broker needed).
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
	    tb_kafka_consumer_new(&c, "127.0.0.1:1", "g", "worker-a", NULL, NULL, NULL, &err), 0);
	/* Ack after teardown: nothing may commit behind the worker's back. */
	assert_setting(c, "enable.auto.commit", "false");
	assert_setting(c, "enable.auto.offset.store", "false");
	/* 2.0.2's cooperative-sticky mishandles commits during rebalances. */
	assert_setting(c, "partition.assignment.strategy", "range");
	assert_setting(c, "group.instance.id", "worker-a");
	rd_kafka_destroy(c);
}

static void test_kafka__extra_properties_apply_and_bad_ones_are_explained(void **state)
{
	tb_kv_t kv[] = { { (char *)"linger.ms", (char *)"42" } };
	tb_strmap_t props = { 1, kv };
	tb_kv_t bad_kv[] = { { (char *)"no.such.setting", (char *)"1" } };
	tb_strmap_t bad = { 1, bad_kv };
	rd_kafka_t *p;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_kafka_producer_new(&p, "127.0.0.1:1", &props, &err), 0);
	assert_setting(p, "linger.ms", "42");
	rd_kafka_destroy(p);
	assert_int_equal(tb_kafka_producer_new(&p, "127.0.0.1:1", &bad, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "no.such.setting"));
	assert_null(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kafka__producer_is_idempotent),
		cmocka_unit_test(test_kafka__consumer_commits_only_by_hand_with_range),
		cmocka_unit_test(test_kafka__extra_properties_apply_and_bad_ones_are_explained),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
