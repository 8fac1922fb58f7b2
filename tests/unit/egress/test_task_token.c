/*
 * test_task_token.c: task tokens are accepted only whole, genuine, in
 * time and for their own task and attempt.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "task_token.h"

#define NOW 1790000000000ull

static tb_task_token_key_t key(void)
{
	tb_task_token_key_t k;
	tb_error_t err;
	assert_int_equal(tb_task_token_key_new(&k, &err), 0);
	return k;
}

static void issue(char *out, const tb_task_token_key_t *k, const char *task, uint64_t attempt,
		  uint64_t expires)
{
	tb_error_t err;
	if (tb_task_token_issue(out, TB_TASK_TOKEN_MAX + 1, k, task, attempt, expires, &err) != 0)
		fail_msg("issue: %s", err.msg);
}

static int verify(const tb_task_token_key_t *k, const char *tok, const char *task, uint64_t attempt,
		  uint64_t now)
{
	tb_error_t err;
	return tb_task_token_verify(k, tok, strlen(tok), task, attempt, now, &err);
}

static void test_task_token__round_trip_and_header_safe(void **state)
{
	tb_task_token_key_t k = key();
	tb_task_token_claims_t c;
	char tok[TB_TASK_TOKEN_MAX + 1];
	tb_error_t err;

	(void)state;
	issue(tok, &k, "task-1.a_b", 3, NOW + 60000);
	assert_int_equal(strncmp(tok, "tb1.", 4), 0);
	for (const char *p = tok; *p; p++)
		assert_non_null(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
				       "0123456789-_.",
				       *p));
	assert_int_equal(verify(&k, tok, "task-1.a_b", 3, NOW), 0);
	assert_int_equal(tb_task_token_parse(&c, &k, tok, strlen(tok), NOW, &err), 0);
	assert_string_equal(c.task_id, "task-1.a_b");
	assert_int_equal(c.attempt, 3);
	assert_int_equal(c.expires_ms, NOW + 60000);
	/* the longest task id fits */
	char id[129];
	memset(id, 'x', 128);
	id[128] = '\0';
	issue(tok, &k, id, 1000, UINT64_MAX);
	assert_true(strlen(tok) <= TB_TASK_TOKEN_MAX);
	assert_int_equal(verify(&k, tok, id, 1000, NOW), 0);
	tb_task_token_key_wipe(&k);
}

static void test_task_token__refuses_expired(void **state)
{
	tb_task_token_key_t k = key();
	char tok[TB_TASK_TOKEN_MAX + 1];

	(void)state;
	issue(tok, &k, "t", 1, NOW);
	assert_int_equal(verify(&k, tok, "t", 1, NOW - 1), 0);
	assert_int_equal(verify(&k, tok, "t", 1, NOW), TB_ETIMEOUT);
	assert_int_equal(verify(&k, tok, "t", 1, NOW + 1), TB_ETIMEOUT);
}

static void test_task_token__refuses_other_task_or_attempt(void **state)
{
	tb_task_token_key_t k = key();
	char tok[TB_TASK_TOKEN_MAX + 1];

	(void)state;
	issue(tok, &k, "task-a", 1, NOW + 1000);
	assert_int_equal(verify(&k, tok, "task-b", 1, NOW), TB_EFENCED);
	assert_int_equal(verify(&k, tok, "task-a", 2, NOW), TB_EFENCED);
	assert_int_equal(verify(&k, tok, "task-", 1, NOW), TB_EFENCED);
	assert_int_equal(verify(&k, tok, "task-aa", 1, NOW), TB_EFENCED);
}

static void test_task_token__refuses_forged(void **state)
{
	tb_task_token_key_t k = key(), other = key();
	char tok[TB_TASK_TOKEN_MAX + 1], bad[TB_TASK_TOKEN_MAX + 1];

	(void)state;
	/* another worker's key */
	issue(tok, &other, "t", 1, NOW + 1000);
	assert_int_equal(verify(&k, tok, "t", 1, NOW), TB_EINVAL);
	/* every single character changed, in turn */
	issue(tok, &k, "t", 1, NOW + 1000);
	size_t n = strlen(tok);
	for (size_t i = 0; i < n; i++) {
		memcpy(bad, tok, n + 1);
		bad[i] = bad[i] == 'A' ? 'B' : 'A';
		assert_int_not_equal(verify(&k, bad, "t", 1, NOW), 0);
	}
	/* a payload of our own making with the genuine MAC of another */
	char tok2[TB_TASK_TOKEN_MAX + 1];
	issue(tok2, &k, "u", 1, NOW + 1000);
	const char *mac = strrchr(tok, '.');
	const char *dot2 = strrchr(tok2, '.');
	snprintf(bad, sizeof(bad), "%.*s%s", (int)(dot2 - tok2), tok2, mac);
	assert_int_equal(verify(&k, bad, "u", 1, NOW), TB_EINVAL);
	/* an expiry pushed out: the MAC no longer holds */
	char tok3[TB_TASK_TOKEN_MAX + 1];
	issue(tok3, &k, "t", 1, NOW + 999999);
	snprintf(bad, sizeof(bad), "%.*s%s", (int)(strrchr(tok3, '.') - tok3), tok3, mac);
	assert_int_equal(verify(&k, bad, "t", 1, NOW), TB_EINVAL);
}

static void test_task_token__refuses_malformed_and_oversized(void **state)
{
	tb_task_token_key_t k = key();
	char tok[TB_TASK_TOKEN_MAX + 1], big[TB_TASK_TOKEN_MAX + 64];
	tb_error_t err;

	(void)state;
	issue(tok, &k, "t", 1, NOW + 1000);
	const char *bad[] = { "",
			      "tb1.",
			      "tb1..",
			      "tb2.dDoxOjE.AAAA",
			      "tb1.dDoxOjE",
			      "tb1.dDoxOjE=.AAAA",
			      "tb1.dDox OjE.AAAA",
			      "Bearer x",
			      "tb1.dDoxOjE.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA." };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(verify(&k, bad[i], "t", 1, NOW), TB_EINVAL);
	/* trailing bytes after a genuine token */
	snprintf(big, sizeof(big), "%s=", tok);
	assert_int_equal(verify(&k, big, "t", 1, NOW), TB_EINVAL);
	/* NUL inside: the length given counts, not the C string */
	assert_int_not_equal(tb_task_token_verify(&k, tok, strlen(tok) + 1, "t", 1, NOW, &err), 0);
	memset(big, 'A', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	memcpy(big, "tb1.", 4);
	assert_int_equal(verify(&k, big, "t", 1, NOW), TB_ETOOBIG);
	/* a task id that is not an identifier is never issued */
	assert_int_equal(tb_task_token_issue(tok, sizeof(tok), &k, "a:b", 1, NOW, &err), TB_EINVAL);
	assert_int_equal(tb_task_token_issue(tok, sizeof(tok), &k, "t", 0, NOW, &err), TB_EINVAL);
	assert_int_equal(tb_task_token_issue(tok, 20, &k, "t", 1, NOW, &err), TB_ETOOBIG);
}

static void test_task_token__keys_differ(void **state)
{
	tb_task_token_key_t a = key(), b = key();
	(void)state;
	assert_memory_not_equal(a.bytes, b.bytes, sizeof(a.bytes));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_task_token__round_trip_and_header_safe),
		cmocka_unit_test(test_task_token__refuses_expired),
		cmocka_unit_test(test_task_token__refuses_other_task_or_attempt),
		cmocka_unit_test(test_task_token__refuses_forged),
		cmocka_unit_test(test_task_token__refuses_malformed_and_oversized),
		cmocka_unit_test(test_task_token__keys_differ),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
