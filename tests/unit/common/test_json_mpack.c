/*
 * test_json_mpack.c: JSON <-> MessagePack conversion rules from
 * schemas/README.md.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "tb/json_mpack.h"

static void check_round(const char *text, const uint8_t *want, size_t want_len)
{
	json_error_t jerr;
	tb_error_t err;
	msgpack_sbuffer sb;
	json_t *j = json_loads(text, 0, &jerr), *back = NULL;

	assert_non_null(j);
	msgpack_sbuffer_init(&sb);
	assert_int_equal(tb_json_to_mpack(&sb, j, &err), 0);
	assert_int_equal(sb.size, want_len);
	assert_memory_equal(sb.data, want, want_len);
	assert_int_equal(tb_mpack_to_json(&back, sb.data, sb.size, &err), 0);
	assert_true(json_equal(j, back));
	json_decref(back);
	json_decref(j);
	msgpack_sbuffer_destroy(&sb);
}

static void test_json__integers_take_their_shortest_form(void **state)
{
	(void)state;
	check_round("[1, 200, -1, -200, 70000]",
		    (const uint8_t[]){ 0x95, 0x01, 0xcc, 0xc8, 0xff, 0xd1, 0xff, 0x38, 0xce, 0x00,
				       0x01, 0x11, 0x70 },
		    13);
}

static void test_json__keys_keep_document_order(void **state)
{
	(void)state;
	check_round("{\"b\": true, \"a\": null}",
		    (const uint8_t[]){ 0x82, 0xa1, 'b', 0xc3, 0xa1, 'a', 0xc0 }, 7);
}

static void test_json__bin_object_is_msgpack_bin(void **state)
{
	(void)state;
	check_round("{\"$bin\": \"AP8=\"}", (const uint8_t[]){ 0xc4, 0x02, 0x00, 0xff }, 4);
	check_round("{\"$bin\": \"\"}", (const uint8_t[]){ 0xc4, 0x00 }, 2);
}

static void test_json__bad_base64_and_depth_are_refused(void **state)
{
	json_error_t jerr;
	tb_error_t err;
	msgpack_sbuffer sb;
	json_t *j = json_loads("{\"$bin\": \"%%%%\"}", 0, &jerr);
	char deep[128];

	(void)state;
	msgpack_sbuffer_init(&sb);
	assert_int_equal(tb_json_to_mpack(&sb, j, &err), TB_EINVAL);
	assert_int_equal(sb.size, 0);
	json_decref(j);
	/* padding only at the end; no NUL inside (JSON can carry one) */
	static const char *const bad[] = { "{\"$bin\": \"====\"}", "{\"$bin\": \"A=BC\"}",
					   "{\"$bin\": \"AA=B\"}", "{\"$bin\": \"AAA\\u0000\"}" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		j = json_loads(bad[i], JSON_ALLOW_NUL, &jerr);
		assert_non_null(j);
		assert_int_equal(tb_json_to_mpack(&sb, j, &err), TB_EINVAL);
		assert_int_equal(sb.size, 0);
		json_decref(j);
	}
	check_round("{\"$bin\": \"AAA=\"}", (const uint8_t[]){ 0xc4, 0x02, 0x00, 0x00 }, 4);
	memset(deep, '[', 40);
	memset(deep + 40, ']', 40);
	deep[80] = '\0';
	j = json_loads(deep, 0, &jerr);
	assert_int_equal(tb_json_to_mpack(&sb, j, &err), TB_EINVAL);
	json_decref(j);
	msgpack_sbuffer_destroy(&sb);
}

static void test_json__msgpack_that_json_cannot_hold_is_refused(void **state)
{
	tb_error_t err;
	json_t *j;
	const uint8_t int_key[] = { 0x81, 0x01, 0x01 };
	const uint8_t big[] = { 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	const uint8_t ext[] = { 0xd4, 0x01, 0x00 };
	const uint8_t bad_utf8[] = { 0xa1, 0xff };

	(void)state;
	assert_int_equal(tb_mpack_to_json(&j, int_key, sizeof(int_key), &err), TB_EINVAL);
	assert_int_equal(tb_mpack_to_json(&j, big, sizeof(big), &err), TB_EINVAL);
	assert_int_equal(tb_mpack_to_json(&j, ext, sizeof(ext), &err), TB_EINVAL);
	assert_int_equal(tb_mpack_to_json(&j, bad_utf8, sizeof(bad_utf8), &err), TB_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json__integers_take_their_shortest_form),
		cmocka_unit_test(test_json__keys_keep_document_order),
		cmocka_unit_test(test_json__bin_object_is_msgpack_bin),
		cmocka_unit_test(test_json__bad_base64_and_depth_are_refused),
		cmocka_unit_test(test_json__msgpack_that_json_cannot_hold_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
