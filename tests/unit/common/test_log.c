/*
 * test_log.c: log lines are logfmt, carry the task id, respect the level
 * and stay on one line whatever the message holds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tb/error.h"
#include "tb/log.h"

#include <jansson.h>

static char captured[8192];

static void capture(void (*emit)(void))
{
	int fds[2];
	ssize_t n;

	assert_int_equal(pipe(fds), 0);
	tb_log_set_fd(fds[1]);
	emit();
	tb_log_set_fd(2);
	close(fds[1]);
	n = read(fds[0], captured, sizeof(captured) - 1);
	captured[n > 0 ? n : 0] = '\0';
	close(fds[0]);
}

static void emit_task_line(void)
{
	tb_info("t-1", "sandbox up in %d ms", 12);
}

static void emit_below_level(void)
{
	tb_log_set_level(TB_LOG_WARN);
	tb_info(NULL, "not shown");
	tb_warn(NULL, "shown");
	tb_log_set_level(TB_LOG_INFO);
}

static void emit_hostile(void)
{
	tb_err("t\"x", "line one\nline \"two\"\\");
}

static void test_log__line_has_level_task_and_quoted_message(void **state)
{
	(void)state;
	capture(emit_task_line);
	assert_non_null(strstr(captured, "ts="));
	assert_non_null(strstr(captured, " level=info task=\"t-1\" msg=\"sandbox up in 12 ms\"\n"));
}

static void test_log__level_threshold_filters(void **state)
{
	(void)state;
	capture(emit_below_level);
	assert_null(strstr(captured, "not shown"));
	assert_non_null(strstr(captured, "level=warn msg=\"shown\""));
}

static void test_log__newlines_and_quotes_stay_on_one_line(void **state)
{
	(void)state;
	capture(emit_hostile);
	assert_non_null(strstr(captured, "task=\"t\\\"x\""));
	assert_non_null(strstr(captured, "msg=\"line one\\nline \\\"two\\\"\\\\\"\n"));
	assert_ptr_equal(strchr(captured, '\n'), captured + strlen(captured) - 1);
}

static void emit_json(void)
{
	tb_log_set_json(1);
	tb_err("t\"x", "line one\nline \"two\"\\ \x01 caf\xe9");
	tb_info(NULL, "no task");
	tb_log_set_json(0);
}

/* log_format json: one object per line, every field a JSON string that
 * parses back to what was logged (control characters escaped, a byte
 * that is not UTF-8 mended), no "task" where none is concerned. */
static void test_log__json_lines_parse_back(void **state)
{
	json_error_t jerr;
	(void)state;
	capture(emit_json);
	char *second = strchr(captured, '\n');
	assert_non_null(second);
	*second++ = '\0';
	json_t *a = json_loads(captured, 0, &jerr), *b = json_loads(second, 0, &jerr);
	if (!a || !b)
		fail_msg("not JSON lines: %s | %s (%s)", captured, second, jerr.text);
	assert_string_equal(json_string_value(json_object_get(a, "level")), "error");
	assert_string_equal(json_string_value(json_object_get(a, "task")), "t\"x");
	assert_string_equal(json_string_value(json_object_get(a, "msg")),
			    "line one\nline \"two\"\\ \x01 caf?");
	assert_int_equal(strlen(json_string_value(json_object_get(a, "ts"))), 24);
	assert_null(json_object_get(b, "task"));
	assert_string_equal(json_string_value(json_object_get(b, "msg")), "no task");
	json_decref(a);
	json_decref(b);
}

static void test_log__parse_level(void **state)
{
	tb_log_level_t l;

	(void)state;
	assert_int_equal(tb_log_parse_level(&l, "warn"), 0);
	assert_int_equal(l, TB_LOG_WARN);
	assert_int_equal(tb_log_parse_level(&l, "loud"), TB_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_log__line_has_level_task_and_quoted_message),
		cmocka_unit_test(test_log__level_threshold_filters),
		cmocka_unit_test(test_log__newlines_and_quotes_stay_on_one_line),
		cmocka_unit_test(test_log__json_lines_parse_back),
		cmocka_unit_test(test_log__parse_level),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
