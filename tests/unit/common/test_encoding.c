/*
 * test_encoding.c: hex, percent-encoding and base64 (tb/encoding.h), each
 * the one copy every layer uses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "tb/encoding.h"
#include "tb/error.h"

static void test_hex__digits_of_either_case(void **state)
{
	char out[9];
	(void)state;
	assert_int_equal(tb_hex_digit('0'), 0);
	assert_int_equal(tb_hex_digit('9'), 9);
	assert_int_equal(tb_hex_digit('a'), 10);
	assert_int_equal(tb_hex_digit('F'), 15);
	assert_int_equal(tb_hex_digit('g'), -1);
	assert_int_equal(tb_hex_digit('%'), -1);
	tb_hex(out, "\x00\xff\x1a\xb2", 4);
	assert_string_equal(out, "00ff1ab2");
	unsigned char back[4];
	assert_int_equal(tb_unhex(back, "00FF1ab2", 4), 0);
	assert_memory_equal(back, "\x00\xff\x1a\xb2", 4);
	assert_int_equal(tb_unhex(back, "00ff1a", 4), -1); /* the NUL */
	assert_int_equal(tb_unhex(back, "0g", 1), -1);
}

static void test_percent__encodes_what_is_not_unreserved(void **state)
{
	char out[64];
	(void)state;
	assert_int_equal(tb_percent_encode(out, sizeof(out), "a b/c~d+e", 1), 0);
	assert_string_equal(out, "a%20b/c~d%2Be");
	assert_int_equal(tb_percent_encode(out, sizeof(out), "a/b.-_", 0), 0);
	assert_string_equal(out, "a%2Fb.-_");
	assert_int_equal(tb_percent_encode(out, sizeof(out), "\xc3\xa9", 0), 0);
	assert_string_equal(out, "%C3%A9");
	assert_int_equal(tb_percent_encode(out, 4, "abcd", 0), TB_ETOOBIG);
	assert_int_equal(tb_percent_encode(out, 3, "/", 0), TB_ETOOBIG);
}

static void test_percent__decodes_escapes_and_keeps_the_rest(void **state)
{
	char out[64];
	const char *in = "a%2fb%2Fc%zz%4+x%";
	(void)state;
	assert_int_equal(tb_percent_decode(out, in, strlen(in), 0), 13);
	assert_string_equal(out, "a/b/c%zz%4+x%");
	assert_int_equal(tb_percent_decode(out, "a+b%20c", 7, 1), 5);
	assert_string_equal(out, "a b c");
	/* in place, and a cut escape at the end stays */
	char buf[] = "key%3Dv%3";
	tb_percent_decode(buf, buf, strlen(buf), 0);
	assert_string_equal(buf, "key=v%3");
}

static void test_base64__standard_padded_round_trip(void **state)
{
	char text[16];
	unsigned char raw[16];
	const char *inputs[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
	const char *want[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy" };
	(void)state;
	for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
		size_t n = strlen(inputs[i]);
		assert_int_equal(tb_base64_encode(text, sizeof(text), inputs[i], n, 0),
				 (ssize_t)strlen(want[i]));
		assert_string_equal(text, want[i]);
		assert_int_equal(
		    tb_base64_decode(raw, sizeof(raw), text, strlen(text), TB_BASE64_PAD),
		    (ssize_t)n);
		assert_memory_equal(raw, inputs[i], n);
	}
	assert_int_equal(tb_base64_encode(text, 4, "foo", 3, 0), -1); /* no room for the NUL */
}

static void test_base64__refuses_what_is_not_canonical(void **state)
{
	unsigned char raw[16];
	(void)state;
	const char *bad_padded[] = { "Zg", "Zg=", "====", "A=BC", "AA=B", "Zm9v!", "Zg===" };
	for (size_t i = 0; i < sizeof(bad_padded) / sizeof(bad_padded[0]); i++)
		assert_int_equal(tb_base64_decode(raw, sizeof(raw), bad_padded[i],
						  strlen(bad_padded[i]), TB_BASE64_PAD),
				 -1);
	/* without TB_BASE64_PAD the padding may be left out, not put wrong */
	assert_int_equal(tb_base64_decode(raw, sizeof(raw), "Zg", 2, 0), 1);
	assert_int_equal(tb_base64_decode(raw, sizeof(raw), "Zg==", 4, 0), 1);
	assert_int_equal(tb_base64_decode(raw, sizeof(raw), "Zg=", 3, 0), -1);
	assert_int_equal(tb_base64_decode(raw, sizeof(raw), "Z", 1, 0), -1);
	/* no room */
	assert_int_equal(tb_base64_decode(raw, 2, "Zm9v", 4, 0), -1);
}

static void test_base64__url_safe_unpadded_and_exact(void **state)
{
	char text[16];
	unsigned char raw[16];
	(void)state;
	assert_int_equal(tb_base64_encode(text, sizeof(text), "\xfb\xff", 2, TB_BASE64_URL), 3);
	assert_string_equal(text, "-_8");
	assert_int_equal(tb_base64_decode(raw, sizeof(raw), "-_8", 3, TB_BASE64_URL), 2);
	assert_memory_equal(raw, "\xfb\xff", 2);
	/* one text per value: unused bits set, padding, the other alphabet */
	assert_int_equal(
	    tb_base64_decode(raw, sizeof(raw), "-_9", 3, TB_BASE64_URL | TB_BASE64_EXACT), -1);
	assert_int_equal(tb_base64_decode(raw, sizeof(raw), "-_8=", 4, TB_BASE64_URL), -1);
	assert_int_equal(tb_base64_decode(raw, sizeof(raw), "+/8", 3, TB_BASE64_URL), -1);
}

static void test_edit_distance__counts_a_typos_edits(void **state)
{
	(void)state;
	assert_int_equal(tb_edit_distance("status", "status"), 0);
	assert_int_equal(tb_edit_distance("statsu", "status"), 2); /* a swap: two edits */
	assert_int_equal(tb_edit_distance("SLOTZ", "SLOTS"), 1);
	assert_int_equal(tb_edit_distance("", "abc"), 3);
	assert_int_equal(tb_edit_distance("kitten", "sitting"), 3);
	char longer[80];
	memset(longer, 'a', sizeof(longer) - 1);
	longer[sizeof(longer) - 1] = '\0';
	assert_int_equal(tb_edit_distance(longer, "a"), 99); /* past what it counts */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_edit_distance__counts_a_typos_edits),
		cmocka_unit_test(test_hex__digits_of_either_case),
		cmocka_unit_test(test_percent__encodes_what_is_not_unreserved),
		cmocka_unit_test(test_percent__decodes_escapes_and_keeps_the_rest),
		cmocka_unit_test(test_base64__standard_padded_round_trip),
		cmocka_unit_test(test_base64__refuses_what_is_not_canonical),
		cmocka_unit_test(test_base64__url_safe_unpadded_and_exact),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
