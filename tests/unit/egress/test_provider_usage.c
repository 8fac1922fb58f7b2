/*
 * test_provider_usage.c: the tokens read from providers' answers
 * (worker/egress/provider_usage.h), in each dialect and shape, streamed
 * and not, fed whole and a byte at a time, exactly.
 */
#include "provider_usage.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Scans @p body, whole or in @p step-byte pieces. */
static tb_tokens_t scan(tb_dialect_t d, const char *type, const char *body, size_t step)
{
	tb_usage_scan_t s;
	tb_tokens_t t;
	size_t n = strlen(body);

	tb_usage_scan_init(&s, d, type);
	for (size_t i = 0; i < n; i += step)
		tb_usage_scan_feed(&s, body + i, n - i < step ? n - i : step);
	tb_usage_scan_end(&s, &t);
	return t;
}

static void expect(tb_dialect_t d, const char *type, const char *body, uint64_t in, uint64_t out,
		   uint64_t cached)
{
	static const size_t steps[] = { 1 << 30, 1, 7 };
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		tb_tokens_t t = scan(d, type, body, steps[i]);
		if (!t.seen || t.input != in || t.output != out || t.cached != cached)
			fail_msg(
			    "step %zu: seen %d, %llu in / %llu out / %llu cached; wanted %llu / "
			    "%llu / %llu",
			    steps[i], t.seen, (unsigned long long)t.input,
			    (unsigned long long)t.output, (unsigned long long)t.cached,
			    (unsigned long long)in, (unsigned long long)out,
			    (unsigned long long)cached);
	}
}

static void test_provider_usage__openai_chat_completions(void **state)
{
	(void)state;
	expect(TB_DIALECT_OPENAI, "application/json; charset=utf-8",
	       "{\"id\":\"c1\",\"object\":\"chat.completion\",\"choices\":[{\"message\":{\"role\":"
	       "\"assistant\",\"content\":\"hi\"}}],\"usage\":{\"prompt_tokens\":1200,"
	       "\"completion_tokens\":34,\"total_tokens\":1234,\"prompt_tokens_details\":{"
	       "\"cached_tokens\":1024}}}",
	       1200, 34, 1024);
	/* streamed, with stream_options.include_usage: the last chunk */
	expect(TB_DIALECT_OPENAI, "text/event-stream",
	       "data: {\"choices\":[{\"delta\":{\"content\":\"h\"}}],\"usage\":null}\n\n"
	       "data: {\"choices\":[{\"delta\":{\"content\":\"i\"}}],\"usage\":null}\r\n\r\n"
	       "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":2,"
	       "\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n"
	       "data: [DONE]\n\n",
	       50, 2, 0);
}

static void test_provider_usage__openai_responses(void **state)
{
	(void)state;
	expect(
	    TB_DIALECT_OPENAI, "application/json",
	    "{\"id\":\"resp_1\",\"object\":\"response\",\"output\":[],\"usage\":{\"input_tokens\":"
	    "328,\"input_tokens_details\":{\"cached_tokens\":256},\"output_tokens\":52,"
	    "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":380}}",
	    328, 52, 256);
	expect(TB_DIALECT_OPENAI, "text/event-stream",
	       "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{"
	       "\"usage\":null}}\n\n"
	       "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\","
	       "\"delta\":\"Hi\"}\n\n"
	       "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{"
	       "\"usage\":{\"input_tokens\":37,\"input_tokens_details\":{\"cached_tokens\":0},"
	       "\"output_tokens\":11,\"total_tokens\":48}}}\n\n",
	       37, 11, 0);
}

static void test_provider_usage__anthropic_messages(void **state)
{
	(void)state;
	expect(TB_DIALECT_ANTHROPIC, "application/json",
	       "{\"id\":\"msg_1\",\"type\":\"message\",\"content\":[{\"type\":\"text\",\"text\":"
	       "\"hi\"}],\"usage\":{\"input_tokens\":20,\"cache_creation_input_tokens\":100,"
	       "\"cache_read_input_tokens\":2000,\"output_tokens\":15}}",
	       2120, 15, 2000);
	/* streamed: the input in message_start, output totals in deltas */
	expect(TB_DIALECT_ANTHROPIC, "text/event-stream",
	       "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"
	       "\"msg_1\",\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":0,"
	       "\"cache_read_input_tokens\":30,\"output_tokens\":1}}}\n\n"
	       "event: ping\ndata: {\"type\": \"ping\"}\n\n"
	       "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{"
	       "\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n"
	       "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
	       "\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n"
	       "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{"
	       "\"output_tokens\":89}}\n\n"
	       "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	       502, 89, 30);
}

/* No usage, or none readable: nothing is claimed, and memory stays
 * bounded (a body past its cap, an endless line). */
static void test_provider_usage__nothing_readable_claims_nothing(void **state)
{
	(void)state;
	assert_false(scan(TB_DIALECT_OPENAI, "application/json", "{\"error\":{}}", 3).seen);
	assert_false(scan(TB_DIALECT_OPENAI, "application/json", "not json", 3).seen);
	assert_false(scan(TB_DIALECT_ANTHROPIC, "text/event-stream", "data: {\"usage\":", 2).seen);
	assert_false(scan(TB_DIALECT_OPENAI, NULL, "", 1).seen);
	/* the other dialect's fields are not read as this one's */
	assert_false(scan(TB_DIALECT_ANTHROPIC, "application/json",
			  "{\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}}", 4)
			 .seen);

	size_t big = TB_USAGE_BODY_MAX + 10;
	char *body = malloc(big + 1);
	assert_non_null(body);
	memset(body, ' ', big);
	static const char usage[] = "{\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}}";
	memcpy(body, usage, sizeof(usage) - 1);
	body[big] = '\0';
	assert_false(scan(TB_DIALECT_OPENAI, "application/json", body, 65536).seen);
	/* an endless line is skipped, the next one read */
	memcpy(body, "data: ", 6);
	memset(body + 6, 'x', TB_USAGE_LINE_MAX + 10);
	static const char next[] =
	    "\ndata: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}}\n";
	memcpy(body + 6 + TB_USAGE_LINE_MAX + 10, next, sizeof(next));
	tb_tokens_t t = scan(TB_DIALECT_OPENAI, "text/event-stream", body, 65536);
	assert_true(t.seen);
	assert_int_equal(t.input, 5);
	assert_int_equal(t.output, 6);
	free(body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_provider_usage__openai_chat_completions),
		cmocka_unit_test(test_provider_usage__openai_responses),
		cmocka_unit_test(test_provider_usage__anthropic_messages),
		cmocka_unit_test(test_provider_usage__nothing_readable_claims_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
