/*
 * test_agent_events.c: the agent's output side of the protocol: lines,
 * validation, error payloads, pacing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "tb/agent_events.h"
#include "tb/json_mpack.h"
#include "tb/schema_event.h"

struct seen {
	char lines[8][64];
	int n, too_long;
};

static void on_line(void *ud, const char *line, size_t len, int too_long)
{
	struct seen *s = ud;
	if (too_long) {
		s->too_long++;
		return;
	}
	snprintf(s->lines[s->n++], 64, "%.*s", (int)len, line);
}

static void test_lines__split_across_reads_and_skip_empty(void **state)
{
	struct seen s = { 0 };
	tb_linebuf_t lb;

	(void)state;
	tb_linebuf_init(&lb, 100);
	assert_int_equal(tb_linebuf_feed(&lb, "{\"a\":", 5, on_line, &s), 0);
	assert_int_equal(s.n, 0);
	assert_int_equal(tb_linebuf_feed(&lb, "1}\n\n{\"b\":2}\n{\"c\"", 16, on_line, &s), 0);
	assert_int_equal(s.n, 2);
	assert_string_equal(s.lines[0], "{\"a\":1}");
	assert_string_equal(s.lines[1], "{\"b\":2}");
	tb_linebuf_free(&lb);
}

static void test_lines__too_long_is_reported_once_and_skipped(void **state)
{
	struct seen s = { 0 };
	char big[50];
	tb_linebuf_t lb;

	(void)state;
	memset(big, 'x', sizeof(big));
	tb_linebuf_init(&lb, 16);
	assert_int_equal(tb_linebuf_feed(&lb, big, sizeof(big), on_line, &s), 0);
	assert_int_equal(tb_linebuf_feed(&lb, big, sizeof(big), on_line, &s), 0);
	assert_int_equal(tb_linebuf_feed(&lb, "tail\nok\n", 8, on_line, &s), 0);
	assert_int_equal(s.too_long, 1);
	assert_int_equal(s.n, 1);
	assert_string_equal(s.lines[0], "ok");
	assert_true(lb.cap <= 16); /* memory stays under the cap */
	tb_linebuf_free(&lb);
}

static json_t *payload_json(const tb_bytes_t *p)
{
	json_t *j = NULL;
	tb_error_t err;
	assert_int_equal(tb_mpack_to_json(&j, p->data, p->len, &err), 0);
	return j;
}

static void test_parse__valid_events_become_payloads(void **state)
{
	const char *msg =
	    "{\"type\":\"message\",\"role\":\"assistant\",\"text\":\"hi\",\"extra\":1}";
	const char *call =
	    "{\"type\":\"tool-call\",\"id\":\"c1\",\"name\":\"ls\",\"input\":{\"p\":\"/\"}}";
	const char *turn = "{\"type\":\"turn-ended\"}";
	tb_bytes_t p;
	tb_error_t err;
	int type;
	json_t *j;

	(void)state;
	assert_int_equal(tb_agent_parse_line(&type, &p, msg, strlen(msg), &err), 0);
	assert_int_equal(type, TB_EV_MESSAGE);
	j = payload_json(&p);
	assert_null(json_object_get(j, "type"));
	assert_string_equal(json_string_value(json_object_get(j, "text")), "hi");
	assert_int_equal(json_integer_value(json_object_get(j, "extra")), 1); /* kept */
	json_decref(j);
	free(p.data);
	assert_int_equal(tb_agent_parse_line(&type, &p, call, strlen(call), &err), 0);
	assert_int_equal(type, TB_EV_TOOL_CALL);
	free(p.data);
	assert_int_equal(tb_agent_parse_line(&type, &p, turn, strlen(turn), &err), 0);
	assert_int_equal(type, TB_EV_TURN);
	j = payload_json(&p);
	assert_string_equal(json_string_value(json_object_get(j, "state")), "turn-ended");
	json_decref(j);
	free(p.data);
}

static void test_parse__bad_lines_say_why(void **state)
{
	static const struct {
		const char *line, *why;
	} bad[] = {
		{ "not json", "not JSON" },
		{ "[1,2]", "not a JSON object" },
		{ "{\"type\":\"telepathy\"}", "unknown or missing 'type' (telepathy)" },
		{ "{\"text\":\"no type\"}", "unknown or missing 'type'" },
		{ "{\"type\":\"message\",\"role\":\"god\",\"text\":\"x\"}", "'role' must be" },
		{ "{\"type\":\"message\",\"role\":\"user\",\"text\":5}",
		  "'text' must be a string" },
		{ "{\"type\":\"tool-call\",\"id\":\"1\",\"name\":\"x\"}", "'input' is missing" },
		{ "{\"type\":\"tool-result\",\"id\":\"1\"}", "'output' is missing" },
		{ "{\"type\":\"thought\",\"type\":\"thought\",\"text\":\"x\"}", "not JSON" },
		{ "{\"type\":\"thought\",\"text\":\"\\xff\"}", "not JSON" },
	};
	tb_bytes_t p;
	tb_error_t err;
	int type;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(
		    tb_agent_parse_line(&type, &p, bad[i].line, strlen(bad[i].line), &err),
		    TB_EINVAL);
		if (!strstr(err.msg, bad[i].why))
			fail_msg("line %s: got '%s', wanted '%s'", bad[i].line, err.msg,
				 bad[i].why);
		assert_null(p.data);
	}
}

static void test_error_payload__is_ascii_and_decodes(void **state)
{
	tb_bytes_t p;
	json_t *j;

	(void)state;
	assert_int_equal(tb_agent_error_payload(&p, TB_ETOOBIG, "line 3: \xe2\x82 cut"), 0);
	j = payload_json(&p);
	assert_string_equal(json_string_value(json_object_get(j, "code")), "too-big");
	assert_string_equal(json_string_value(json_object_get(j, "reason")), "line 3: ?? cut");
	json_decref(j);
	free(p.data);
}

static void test_rate__paces_without_dropping(void **state)
{
	tb_rate_t r;

	(void)state;
	tb_rate_init(&r, 10, 1000);
	for (int i = 0; i < 10; i++)
		assert_int_equal(tb_rate_take(&r, 1000), 0); /* a burst of one second */
	uint64_t wait = tb_rate_take(&r, 1000);
	assert_true(wait >= 90 && wait <= 101);
	assert_int_equal(tb_rate_take(&r, 1000 + wait), 0);
	assert_true(tb_rate_take(&r, 1000 + wait) > 0);
	for (int i = 0; i < 10; i++) /* refilled after a quiet second */
		assert_int_equal(tb_rate_take(&r, 3000), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lines__split_across_reads_and_skip_empty),
		cmocka_unit_test(test_lines__too_long_is_reported_once_and_skipped),
		cmocka_unit_test(test_parse__valid_events_become_payloads),
		cmocka_unit_test(test_parse__bad_lines_say_why),
		cmocka_unit_test(test_error_payload__is_ascii_and_decodes),
		cmocka_unit_test(test_rate__paces_without_dropping),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
