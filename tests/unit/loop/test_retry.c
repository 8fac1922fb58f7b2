/*
 * test_retry.c: the pause before another attempt of a task the platform
 * failed (settle.c): doubling from 1 s, and never past the 60 s the
 * worker waits at most, which is also what its log says.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "loop_int.h"

static void test_retry__pauses_double_up_to_a_minute(void **state)
{
	static const uint64_t want[] = { 1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000 };

	(void)state;
	for (unsigned i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		assert_int_equal(tb_loop_retry_pause(i), want[i]);
	assert_int_equal(tb_loop_retry_pause(1000), 60000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_retry__pauses_double_up_to_a_minute),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
