/*
 * test_session.c: an interactive session's inbox: follow-ups in order,
 * duplicates ignored, gaps and late ones refused with a reason, the poll
 * descriptor readable exactly while one waits, and a rewound attempt
 * replaying every prompt.
 */
#include "session.h"

#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static tb_followup_t fu(uint64_t seq, const char *text)
{
	tb_followup_t f = { 0 };
	f.task_id = "t";
	f.seq = seq;
	f.kind = text ? TB_FOLLOWUP_PROMPT : TB_FOLLOWUP_END;
	f.text = (char *)text;
	return f;
}

static int readable(const tb_session_t *s)
{
	struct pollfd p = { tb_session_fd(s), POLLIN, 0 };
	return poll(&p, 1, 0) == 1;
}

static tb_session_put_t put(tb_session_t *s, uint64_t seq, const char *text, int64_t off)
{
	char why[256];
	tb_followup_t f = fu(seq, text);
	return tb_session_put(s, &f, off, text, text ? strlen(text) : 0, why, sizeof(why));
}

static void expect_take(tb_session_t *s, int kind, const char *text, uint64_t seq)
{
	int k;
	char *t;
	uint64_t q;
	assert_int_equal(tb_session_take(s, &k, &t, &q), 1);
	assert_int_equal(k, kind);
	assert_int_equal(q, seq);
	if (text)
		assert_string_equal(t, text);
	else
		assert_null(t);
	free(t);
}

static void in_order_with_duplicates_ignored(void **state)
{
	tb_session_t *s;
	tb_error_t err;
	int64_t offs[8];

	(void)state;
	assert_int_equal(tb_session_new(&s, &err), 0);
	assert_false(readable(s));
	assert_int_equal(put(s, 1, "one", 10), TB_SESSION_QUEUED);
	assert_true(readable(s));
	assert_int_equal(put(s, 1, "one again", 11), TB_SESSION_DUPLICATE);
	assert_int_equal(put(s, 2, "two", 12), TB_SESSION_QUEUED);
	expect_take(s, TB_FOLLOWUP_PROMPT, "one", 1);
	assert_true(readable(s));
	expect_take(s, TB_FOLLOWUP_PROMPT, "two", 2);
	assert_false(readable(s));
	int k;
	char *t;
	uint64_t q;
	assert_int_equal(tb_session_take(s, &k, &t, &q), 0);
	assert_int_equal(tb_session_taken(s), 2);
	/* held: each with its offset and its bytes; the task's copy too */
	assert_int_equal(tb_session_count(s), 2);
	uint64_t seq;
	int64_t off;
	const void *raw;
	size_t len;
	tb_session_item(s, 1, &seq, &off, &raw, &len);
	assert_int_equal(seq, 2);
	assert_int_equal(off, 12);
	assert_int_equal(len, 3);
	assert_memory_equal(raw, "two", 3);
	tb_session_hold(s, 30);
	assert_int_equal(tb_session_holds(s, offs, 8), 1);
	assert_int_equal(offs[0], 30);
	tb_session_free(s);
}

static void gaps_and_late_followups_refused(void **state)
{
	tb_session_t *s;
	tb_error_t err;
	char why[256];

	(void)state;
	assert_int_equal(tb_session_new(&s, &err), 0);
	tb_followup_t f = fu(2, "skips one");
	assert_int_equal(tb_session_put(s, &f, 1, NULL, 0, why, sizeof(why)), TB_SESSION_REFUSED);
	assert_non_null(strstr(why, "expects 1 next"));
	assert_int_equal(put(s, 1, "one", 2), TB_SESSION_QUEUED);
	assert_int_equal(put(s, 2, NULL, 3), TB_SESSION_QUEUED); /* end */
	f = fu(3, "after the end");
	assert_int_equal(tb_session_put(s, &f, 4, NULL, 0, why, sizeof(why)), TB_SESSION_REFUSED);
	assert_non_null(strstr(why, "an end came first"));
	expect_take(s, TB_FOLLOWUP_PROMPT, "one", 1);
	expect_take(s, TB_FOLLOWUP_END, NULL, 2);
	tb_session_free(s);

	assert_int_equal(tb_session_new(&s, &err), 0);
	tb_session_close(s, "idle for 300 s");
	f = fu(1, "too late");
	assert_int_equal(tb_session_put(s, &f, 1, NULL, 0, why, sizeof(why)), TB_SESSION_REFUSED);
	assert_non_null(strstr(why, "idle for 300 s"));
	tb_session_free(s);
}

static void rewind_replays_every_prompt(void **state)
{
	tb_session_t *s;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_session_new(&s, &err), 0);
	assert_int_equal(put(s, 1, "one", 1), TB_SESSION_QUEUED);
	assert_int_equal(put(s, 2, "two", 2), TB_SESSION_QUEUED);
	expect_take(s, TB_FOLLOWUP_PROMPT, "one", 1);
	tb_session_close(s, "the agent exited");
	tb_session_rewind(s); /* the attempt failed; the next one replays */
	assert_true(readable(s));
	assert_int_equal(tb_session_taken(s), 0);
	expect_take(s, TB_FOLLOWUP_PROMPT, "one", 1);
	expect_take(s, TB_FOLLOWUP_PROMPT, "two", 2);
	assert_int_equal(put(s, 3, "three", 3), TB_SESSION_QUEUED); /* open again */
	tb_session_free(s);
}

static void bounded(void **state)
{
	tb_session_t *s;
	tb_error_t err;
	char why[256];

	(void)state;
	assert_int_equal(tb_session_new(&s, &err), 0);
	for (uint64_t i = 1; i <= TB_SESSION_MAX_FOLLOWUPS; i++)
		assert_int_equal(put(s, i, "x", (int64_t)i), TB_SESSION_QUEUED);
	tb_followup_t f = fu(TB_SESSION_MAX_FOLLOWUPS + 1, "one too many");
	assert_int_equal(tb_session_put(s, &f, 0, NULL, 0, why, sizeof(why)), TB_SESSION_REFUSED);
	assert_non_null(strstr(why, "at most"));
	tb_session_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(in_order_with_duplicates_ignored),
		cmocka_unit_test(gaps_and_late_followups_refused),
		cmocka_unit_test(rewind_replays_every_prompt),
		cmocka_unit_test(bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
