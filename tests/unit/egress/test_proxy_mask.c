/*
 * test_proxy_mask.c: a provider's secret is masked however an upstream
 * echoes it: as it is, percent-encoded in upper, lower or mixed case, with
 * characters that need no escape escaped too; and a tail that may be the
 * start of an echo is held back until the next bytes decide, in any
 * split of the stream.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "proxy_mask.h"

#define SECRET "sk/9+Zq=abc/DEF+ghi=="

/* @p text with every echo masked, into a static buffer. */
static const char *masked(const char *text, size_t *found)
{
	static char buf[1024];
	size_t n = strlen(text);

	memcpy(buf, text, n + 1);
	*found = tb_mask_apply(SECRET, buf, n);
	return buf;
}

static void expect_masked(const char *before, const char *echo, const char *after)
{
	char text[512], want[512];
	size_t found;

	snprintf(text, sizeof(text), "%s%s%s", before, echo, after);
	snprintf(want, sizeof(want), "%s%.*s%s", before, (int)strlen(echo),
		 "************************************************************************"
		 "************************************************************************",
		 after);
	assert_string_equal(masked(text, &found), want);
	assert_int_equal(found, 1);
}

static void test_mask__the_secret_as_it_is(void **state)
{
	(void)state;
	expect_masked("{\"key\":\"", SECRET, "\"}");
}

static void test_mask__percent_encoded_in_upper_case(void **state)
{
	(void)state;
	expect_masked("key=", "sk%2F9%2BZq%3Dabc%2FDEF%2Bghi%3D%3D", "&x=1");
}

static void test_mask__percent_encoded_in_lower_case(void **state)
{
	(void)state;
	expect_masked("key=", "sk%2f9%2bZq%3dabc%2fDEF%2bghi%3d%3d", "&x=1");
}

static void test_mask__percent_encoded_in_mixed_case(void **state)
{
	(void)state;
	expect_masked("", "sk%2f9%2BZq%3Dabc%2FDEF%2bghi%3d%3D", "");
}

static void test_mask__every_byte_escaped(void **state)
{
	char all[256] = "";
	(void)state;
	for (const char *p = SECRET; *p; p++)
		snprintf(all + strlen(all), sizeof(all) - strlen(all), "%%%02x", (unsigned char)*p);
	expect_masked("a ", all, " b");
}

static void test_mask__two_echoes_and_near_misses(void **state)
{
	size_t found;
	(void)state;
	/* one byte different, or an escape of another byte: left alone */
	assert_string_equal(
	    masked("sk/9+Zq=abc/DEF+ghi=! sk%2f9%2bZq%3dabc%2fDEF%2bghj%3d%3d", &found),
	    "sk/9+Zq=abc/DEF+ghi=! sk%2f9%2bZq%3dabc%2fDEF%2bghj%3d%3d");
	assert_int_equal(found, 0);
	masked(SECRET " and " SECRET, &found);
	assert_int_equal(found, 2);
}

/* A '%' that is a byte of the secret: taken as itself or as an escape. */
static void test_mask__a_percent_in_the_secret(void **state)
{
	char buf[64];
	(void)state;
	snprintf(buf, sizeof(buf), "x 100%%25off y");
	assert_int_equal(tb_mask_apply("100%25off", buf, strlen(buf)), 1);
	assert_string_equal(buf, "x ********* y");
	snprintf(buf, sizeof(buf), "x 100%%2525off y");
	assert_int_equal(tb_mask_apply("100%25off", buf, strlen(buf)), 1);
	assert_string_equal(buf, "x *********** y");
}

/* Streamed in every split of two pieces, what reaches the sandbox never
 * holds the secret in any form, and nothing else is held back at the end. */
static void test_mask__held_back_across_any_split(void **state)
{
	const char *forms[] = { "key=" SECRET "&end", "q=sk%2f9%2bZq%3dabc%2fDEF%2bghi%3d%3d;",
				"%73k%2F9%2BZq%3Dabc%2FDEF%2Bghi%3D%3D" };
	(void)state;
	for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
		size_t len = strlen(forms[f]);
		for (size_t cut = 0; cut <= len; cut++) {
			char hold[256], work[512], out[512] = "";
			size_t nhold = 0, olen = 0;
			const char *pieces[2] = { forms[f], forms[f] + cut };
			size_t lens[2] = { cut, len - cut };
			for (int i = 0; i < 2; i++) {
				memcpy(work, hold, nhold);
				memcpy(work + nhold, pieces[i], lens[i]);
				size_t all = nhold + lens[i];
				tb_mask_apply(SECRET, work, all);
				size_t keep = i == 1 ? 0 : tb_mask_pending(SECRET, work, all);
				memcpy(out + olen, work, all - keep);
				olen += all - keep;
				memcpy(hold, work + all - keep, keep);
				nhold = keep;
			}
			out[olen] = '\0';
			assert_int_equal(olen, len);
			assert_null(strstr(out, "ghi"));
			assert_null(strstr(out, "Zq"));
		}
	}
}

static void test_mask__pending_is_only_a_possible_start(void **state)
{
	(void)state;
	assert_int_equal(tb_mask_pending(SECRET, "abc sk/9", 8), 4);
	assert_int_equal(tb_mask_pending(SECRET, "abc sk%2", 8), 4);
	assert_int_equal(tb_mask_pending(SECRET, "abc sk%", 7), 3);
	/* "%7" may become "%73", an 's'; "%6" cannot, nor "%6" after "sk" */
	assert_int_equal(tb_mask_pending(SECRET, "abc %7", 6), 2);
	assert_int_equal(tb_mask_pending(SECRET, "abc sk%6", 8), 0);
	assert_int_equal(tb_mask_pending(SECRET, "abc sx", 6), 0);
	assert_int_equal(tb_mask_max_len(SECRET), 3 * strlen(SECRET));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mask__the_secret_as_it_is),
		cmocka_unit_test(test_mask__percent_encoded_in_upper_case),
		cmocka_unit_test(test_mask__percent_encoded_in_lower_case),
		cmocka_unit_test(test_mask__percent_encoded_in_mixed_case),
		cmocka_unit_test(test_mask__every_byte_escaped),
		cmocka_unit_test(test_mask__two_echoes_and_near_misses),
		cmocka_unit_test(test_mask__a_percent_in_the_secret),
		cmocka_unit_test(test_mask__held_back_across_any_split),
		cmocka_unit_test(test_mask__pending_is_only_a_possible_start),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
