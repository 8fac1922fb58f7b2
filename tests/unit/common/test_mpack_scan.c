/*
 * test_mpack_scan.c: the structural pre-check that keeps msgpack-c from
 * allocating for lies.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "tb/mpack_scan.h"

#define SCAN(bytes) tb_mpack_scan(bytes, sizeof(bytes), TB_MPACK_MAX_DEPTH, &err)

static void test_scan__accepts_well_formed_values(void **state)
{
	tb_error_t err;
	const uint8_t fixint[] = { 0x05 };
	const uint8_t map[] = { 0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x92, 0xc3, 0xc0 };
	const uint8_t f64[] = { 0xcb, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f };
	const uint8_t bin[] = { 0xc4, 0x02, 0xff, 0x00 };
	const uint8_t empty_map[] = { 0x80 };

	(void)state;
	assert_int_equal(SCAN(fixint), 0);
	assert_int_equal(SCAN(map), 0);
	assert_int_equal(SCAN(f64), 0);
	assert_int_equal(SCAN(bin), 0);
	assert_int_equal(SCAN(empty_map), 0);
}

static void test_scan__refuses_truncation_and_trailing_bytes(void **state)
{
	tb_error_t err;
	const uint8_t short_map[] = { 0x82, 0xa1, 'a', 0x01 };
	const uint8_t short_str[] = { 0xa5, 'a', 'b' };
	const uint8_t short_len[] = { 0xda, 0x01 };
	const uint8_t trailing[] = { 0x01, 0x02 };

	(void)state;
	assert_int_equal(SCAN(short_map), TB_EINVAL);
	assert_int_equal(SCAN(short_str), TB_EINVAL);
	assert_int_equal(SCAN(short_len), TB_EINVAL);
	assert_int_equal(SCAN(trailing), TB_EINVAL);
	assert_non_null(strstr(err.msg, "trailing"));
	assert_int_equal(tb_mpack_scan(NULL, 0, 4, &err), TB_EINVAL);
}

static void test_scan__refuses_counts_larger_than_the_input(void **state)
{
	tb_error_t err;
	const uint8_t arr32[] = { 0xdd, 0xff, 0xff, 0xff, 0xff, 0x01 };
	const uint8_t map16[] = { 0xde, 0x00, 0x03, 0x01, 0x01 };

	(void)state;
	assert_int_equal(SCAN(arr32), TB_EINVAL);
	assert_non_null(strstr(err.msg, "claims 4294967295 elements"));
	assert_int_equal(SCAN(map16), TB_EINVAL);
}

static void test_scan__refuses_deep_nesting_and_reserved_byte(void **state)
{
	tb_error_t err;
	uint8_t deep[40];
	const uint8_t reserved[] = { 0xc1 };

	(void)state;
	memset(deep, 0x91, sizeof(deep)); /* [[[[...]]]] */
	deep[sizeof(deep) - 1] = 0x01;
	assert_int_equal(SCAN(deep), TB_EINVAL);
	assert_non_null(strstr(err.msg, "nested deeper"));
	/* Exactly at the limit passes. */
	assert_int_equal(tb_mpack_scan(deep + sizeof(deep) - 4, 4, 3, &err), 0);
	assert_int_equal(tb_mpack_scan(deep + sizeof(deep) - 5, 5, 3, &err), TB_EINVAL);
	assert_int_equal(SCAN(reserved), TB_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scan__accepts_well_formed_values),
		cmocka_unit_test(test_scan__refuses_truncation_and_trailing_bytes),
		cmocka_unit_test(test_scan__refuses_counts_larger_than_the_input),
		cmocka_unit_test(test_scan__refuses_deep_nesting_and_reserved_byte),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
