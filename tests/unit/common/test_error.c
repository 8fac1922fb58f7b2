/*
 * test_error.c: the error object: codes, messages, context as it moves up.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "tb/error.h"

static void test_error__set_returns_the_code_and_formats(void **state)
{
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_error_set(&err, TB_EPOISON, "commit %s missing", "abc"), TB_EPOISON);
	assert_int_equal(err.code, TB_EPOISON);
	assert_string_equal(err.msg, "commit abc missing");
	assert_int_equal(tb_error_set(NULL, TB_EIO, "dropped"), TB_EIO);
}

static void test_error__prefix_reads_outermost_first(void **state)
{
	tb_error_t err;

	(void)state;
	tb_error_set(&err, TB_ENOTFOUND, "object missing");
	assert_int_equal(tb_error_prefix(&err, "fetch %s", "origin"), TB_ENOTFOUND);
	tb_error_prefix(&err, "checkout recipe");
	assert_string_equal(err.msg, "checkout recipe: fetch origin: object missing");
}

static void test_error__prefix_truncates_the_inner_detail(void **state)
{
	tb_error_t err;
	char longmsg[2000];

	(void)state;
	memset(longmsg, 'x', sizeof(longmsg) - 1);
	longmsg[sizeof(longmsg) - 1] = '\0';
	tb_error_set(&err, TB_EINVAL, "%s", longmsg);
	tb_error_prefix(&err, "outer");
	assert_int_equal(strlen(err.msg), TB_ERROR_MSG_MAX - 1);
	assert_memory_equal(err.msg, "outer: xxx", 10);
}

static void test_error__errno_appends_strerror(void **state)
{
	tb_error_t err;

	(void)state;
	tb_error_errno(&err, TB_EIO, ENOENT, "open %s", "/nope");
	assert_string_equal(err.msg, "open /nope: No such file or directory");
	assert_string_equal(tb_error_name(TB_EFENCED), "fenced");
	assert_string_equal(tb_error_name(-999), "unknown");
	tb_error_clear(&err);
	assert_int_equal(err.code, TB_OK);
	assert_string_equal(err.msg, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_error__set_returns_the_code_and_formats),
		cmocka_unit_test(test_error__prefix_reads_outermost_first),
		cmocka_unit_test(test_error__prefix_truncates_the_inner_detail),
		cmocka_unit_test(test_error__errno_appends_strerror),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
