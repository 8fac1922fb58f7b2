/*
 * test_redis_roundtrip.c: the test harness's Redis is real: a value and a
 * Lua script (the ledger's atomic operations are scripts) round-trip.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char host[256];
static int port;

static void test_redis__set_get_and_script(void **state)
{
	struct timeval tv = { 5, 0 };
	redisContext *c = redisConnectWithTimeout(host, port, tv);
	redisReply *r;
	char key[64];

	(void)state;
	assert_non_null(c);
	if (c->err)
		fail_msg("connect %s:%d: %s", host, port, c->errstr);
	snprintf(key, sizeof(key), "taskbox-test:%d", getpid());
	r = redisCommand(c, "SET %s %b EX 60", key, "v\0x", (size_t)3);
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STATUS);
	freeReplyObject(r);
	r = redisCommand(c, "GET %s", key);
	assert_int_equal(r->type, REDIS_REPLY_STRING);
	assert_int_equal(r->len, 3);
	assert_memory_equal(r->str, "v\0x", 3);
	freeReplyObject(r);
	r = redisCommand(c, "EVAL %s 1 %s", "return redis.call('INCRBY', KEYS[1] .. ':n', 2)", key);
	assert_int_equal(r->type, REDIS_REPLY_INTEGER);
	assert_int_equal(r->integer, 2);
	freeReplyObject(r);
	r = redisCommand(c, "DEL %s %s:n", key, key);
	assert_int_equal(r->integer, 2);
	freeReplyObject(r);
	redisFree(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_redis__set_get_and_script),
	};
	const char *url = getenv("TASKBOX_TEST_REDIS");
	if (!url || sscanf(url, "redis://%255[^:]:%d", host, &port) != 2) {
		printf("SKIP: TASKBOX_TEST_REDIS (redis://host:port) is not set\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
