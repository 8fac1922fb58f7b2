/*
 * test_view_index.c: what `taskbox view` knows of the runs
 * (worker/view/index.h): a task's status from its messages, events and
 * DLQ record; lists filtered and paged, the most recently active first;
 * where a task's events are; the least recently active forgotten past
 * the bound.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "index.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Event @p seq of @p id's attempt @p attempt, at @p ts, of @p type with a
 * payload of @p key = @p value (NULL: an empty map). */
static void event(tb_view_index_t *x, const char *id, uint64_t attempt, uint64_t seq, uint64_t ts,
		  int type, const char *key, const char *value, int64_t offset)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, key ? 1 : 0);
	if (key) {
		msgpack_pack_str_with_body(&pk, key, strlen(key));
		msgpack_pack_str_with_body(&pk, value, strlen(value));
	}
	tb_event_t ev = { .task_id = (char *)id,
			  .attempt = attempt,
			  .seq = seq,
			  .ts = ts,
			  .type = type,
			  .payload = { .data = (uint8_t *)sb.data, .len = sb.size } };
	tb_view_index_event(x, &ev, 2, offset);
	msgpack_sbuffer_destroy(&sb);
}

static void submitted(tb_view_index_t *x, const char *id, const char *recipe, const char *runtime,
		      int64_t ts)
{
	tb_task_t t = { .id = (char *)id,
			.recipe = { (char *)recipe, (char *)"0123" },
			.runtime = (char *)runtime,
			.prompt = (char *)"hi" };
	tb_view_index_task(x, &t, ts);
}

static const char *status_of(json_t *list, size_t i)
{
	return json_string_value(json_object_get(json_array_get(list, i), "status"));
}

static void test_view_index__a_task_status_from_its_messages(void **state)
{
	tb_view_index_t *x;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_view_index_new(&x, 100, &err), 0);
	submitted(x, "queued", "file:///r/a", "default", 1000);
	submitted(x, "ran", "file:///r/b", "gpu", 1001);
	event(x, "ran", 1, 0, 2000, TB_EV_PHASE, "phase", "received", 10);
	event(x, "ran", 1, 1, 2001, TB_EV_MESSAGE, "text", "<script>", 11);
	event(x, "ran", 1, 2, 2002, TB_EV_VERDICT, "outcome", "pass", 12);
	event(x, "ran", 1, 3, 2003, TB_EV_RESULT, "outcome", "succeeded", 13);
	submitted(x, "retried", "file:///r/a", "default", 1002);
	event(x, "retried", 1, 0, 3000, TB_EV_PHASE, "phase", "torn-down", 20);
	submitted(x, "dead", "file:///r/a", "default", 1003);
	tb_dlq_t d = { .task_id = (char *)"dead",
		       .reason = (char *)"runtime 'x' is unknown",
		       .ts = 4000 };
	tb_view_index_dlq(x, &d, 0, 7);

	tb_view_query_t all = { 0 };
	json_t *j = tb_view_index_list(x, &all), *tasks = json_object_get(j, "tasks");
	assert_int_equal(json_integer_value(json_object_get(j, "total")), 4);
	/* the most recently active first */
	assert_string_equal(json_string_value(json_object_get(json_array_get(tasks, 0), "id")),
			    "dead");
	assert_string_equal(status_of(tasks, 0), "dead-lettered");
	assert_string_equal(status_of(tasks, 1), "retrying");
	assert_string_equal(status_of(tasks, 2), "succeeded");
	assert_string_equal(status_of(tasks, 3), "queued");
	json_t *ran = json_array_get(tasks, 2);
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(ran, "verdicts"), "pass")), 1);
	assert_int_equal(json_array_size(json_object_get(j, "runtimes")), 2);
	json_decref(j);

	/* filters: by status, runtime, recipe, a part of the id */
	tb_view_query_t q = { .status = "succeeded" };
	j = tb_view_index_list(x, &q);
	assert_int_equal(json_integer_value(json_object_get(j, "total")), 1);
	json_decref(j);
	q = (tb_view_query_t){ .recipe = "r/a", .runtime = "default" };
	j = tb_view_index_list(x, &q);
	assert_int_equal(json_integer_value(json_object_get(j, "total")), 3);
	json_decref(j);
	q = (tb_view_query_t){ .q = "ea" };
	j = tb_view_index_list(x, &q);
	assert_int_equal(json_integer_value(json_object_get(j, "total")), 1);
	json_decref(j);

	/* where its events are */
	tb_view_span_t span;
	j = tb_view_index_get(x, "ran", &span);
	assert_non_null(j);
	assert_int_equal(span.partition, 2);
	assert_int_equal(span.first, 10);
	assert_int_equal(span.last, 13);
	assert_string_equal(json_string_value(json_object_get(
				json_array_get(json_object_get(j, "attempt_list"), 0), "outcome")),
			    "succeeded");
	json_decref(j);
	assert_null(tb_view_index_get(x, "never", NULL));
	/* the DLQ record, for its page */
	j = tb_view_index_dead_letters(x);
	assert_int_equal(json_array_size(j), 1);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(j, 0), "offset")), 7);
	assert_string_equal(json_string_value(json_object_get(json_array_get(j, 0), "task")),
			    "dead");
	json_decref(j);
	tb_view_index_free(x);
}

static void test_view_index__ten_thousand_tasks_page_and_the_oldest_go(void **state)
{
	tb_view_index_t *x;
	tb_error_t err;
	char id[32];

	(void)state;
	assert_int_equal(tb_view_index_new(&x, 10000, &err), 0);
	for (int i = 0; i < 10000; i++) {
		snprintf(id, sizeof(id), "t-%05d", i);
		submitted(x, id, "file:///r", "default", 1000 + i);
	}
	tb_view_query_t q = { .offset = 9950, .limit = 100 };
	json_t *j = tb_view_index_list(x, &q), *tasks = json_object_get(j, "tasks");
	assert_int_equal(json_integer_value(json_object_get(j, "total")), 10000);
	assert_int_equal(json_array_size(tasks), 50); /* the last page */
	assert_string_equal(json_string_value(json_object_get(json_array_get(tasks, 49), "id")),
			    "t-00000");
	json_decref(j);
	q = (tb_view_query_t){ .limit = 100000 };
	j = tb_view_index_list(x, &q);
	assert_int_equal(json_array_size(json_object_get(j, "tasks")), 500); /* a page at most */
	json_decref(j);
	/* one more: the least recently active tenth goes */
	submitted(x, "t-new", "file:///r", "default", 99999);
	q = (tb_view_query_t){ 0 };
	j = tb_view_index_list(x, &q);
	assert_int_equal(json_integer_value(json_object_get(j, "total")), 9000);
	assert_int_equal(json_integer_value(json_object_get(j, "forgotten")), 1001);
	json_decref(j);
	assert_null(tb_view_index_get(x, "t-00000", NULL));
	assert_non_null(j = tb_view_index_get(x, "t-09999", NULL));
	json_decref(j);
	assert_non_null(j = tb_view_index_get(x, "t-new", NULL));
	json_decref(j);
	tb_view_index_free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_view_index__a_task_status_from_its_messages),
		cmocka_unit_test(test_view_index__ten_thousand_tasks_page_and_the_oldest_go),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
