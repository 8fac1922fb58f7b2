/*
 * test_provider_request.c: what a provider request may cost, and usage
 * asked of its stream (worker/egress/provider_request.h).
 */
#include "provider_request.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

static tb_provider_request_t read_ok(tb_dialect_t d, uint64_t def, const char *body)
{
	tb_provider_request_t r;
	char why[300] = "";

	if (tb_provider_request_read(&r, d, def, body, strlen(body), why, sizeof(why)) != 0)
		fail_msg("refused %s: %s", body, why);
	return r;
}

static void test_provider_request__generation_requests_and_the_rest(void **state)
{
	static const char *const gen[] = {
		"{\"model\":\"m\",\"messages\":[]}",
		"{\"model\":\"m\",\"input\":\"hi\"}",
		"{\"prompt\":\"hi\"}",
		" \n{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
	};
	static const char *const other[] = {
		"",
		"{}",
		"{\"model\":\"m\",\"purpose\":\"batch\"}",
		"[1,2]",
		"\"messages\"",
		"--boundary\r\nContent-Disposition: form-data; name=\"messages\"\r\n\r\n{}",
	};
	(void)state;
	for (size_t i = 0; i < sizeof(gen) / sizeof(gen[0]); i++) {
		tb_provider_request_t r = read_ok(TB_DIALECT_OPENAI, 0, gen[i]);
		assert_true(r.generation);
		tb_provider_request_free(&r);
	}
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
		tb_provider_request_t r = read_ok(TB_DIALECT_OPENAI, 0, other[i]);
		assert_false(r.generation);
		assert_null(r.rewritten);
		tb_provider_request_free(&r);
	}
}

/* The largest output a body allows, times its choices; else the
 * endpoint's default, else the built-in one. */
static void test_provider_request__the_output_it_allows(void **state)
{
	static const struct {
		const char *body;
		uint64_t def, want;
		int declared;
	} cases[] = {
		{ "{\"messages\":[],\"max_tokens\":300}", 0, 300, 1 },
		{ "{\"messages\":[],\"max_completion_tokens\":500,\"max_tokens\":20}", 0, 500, 1 },
		{ "{\"input\":\"x\",\"max_output_tokens\":70}", 0, 70, 1 },
		{ "{\"messages\":[],\"max_tokens\":100,\"n\":4}", 0, 400, 1 },
		{ "{\"prompt\":\"x\",\"max_tokens\":10,\"n\":2,\"best_of\":5}", 0, 50, 1 },
		{ "{\"messages\":[],\"max_tokens\":99.5}", 0, 100, 1 },
		{ "{\"messages\":[]}", 0, TB_PROVIDER_DEFAULT_MAX_TOKENS, 0 },
		{ "{\"messages\":[]}", 2048, 2048, 0 },
		/* a value the provider would refuse reserves the default */
		{ "{\"messages\":[],\"max_tokens\":-5}", 64, 64, 0 },
		{ "{\"messages\":[],\"max_tokens\":\"1\"}", 64, 64, 0 },
		/* huge values are capped, never wrapped */
		{ "{\"messages\":[],\"max_tokens\":9223372036854775807,\"n\":1000}", 0,
		  UINT64_C(1000000000000), 1 },
		{ "{\"messages\":[],\"max_tokens\":1e300,\"n\":7}", 0, UINT64_C(1000000000000), 1 },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		tb_provider_request_t r =
		    read_ok(TB_DIALECT_ANTHROPIC, cases[i].def, cases[i].body);
		if (r.max_output != cases[i].want || r.declared != cases[i].declared)
			fail_msg("%s: %llu (declared %d), wanted %llu", cases[i].body,
				 (unsigned long long)r.max_output, r.declared,
				 (unsigned long long)cases[i].want);
		tb_provider_request_free(&r);
	}
}

/* The body as it goes upstream, parsed: its stream_options. */
static json_t *options_of(const tb_provider_request_t *r)
{
	json_t *o = json_loadb(r->rewritten, r->rewritten_len, JSON_REJECT_DUPLICATES, NULL);
	assert_non_null(o);
	json_t *so = json_incref(json_object_get(o, "stream_options"));
	json_decref(o);
	return so;
}

static void test_provider_request__an_openai_stream_is_asked_for_its_usage(void **state)
{
	tb_provider_request_t r;
	json_t *so;

	(void)state;
	/* absent: spliced in, the rest byte for byte */
	r = read_ok(TB_DIALECT_OPENAI, 0,
		    "  {\"model\":\"m\",\"stream\":true,\"temperature\":0.7,\"messages\":[]}");
	assert_true(r.usage_added);
	assert_int_equal(r.rewritten_len, strlen(r.rewritten));
	assert_string_equal(r.rewritten, "  {\"stream_options\":{\"include_usage\":true},"
					 "\"model\":\"m\",\"stream\":true,\"temperature\":0.7,"
					 "\"messages\":[]}");
	tb_provider_request_free(&r);
	/* there, saying no or something else: asked anyway */
	r = read_ok(TB_DIALECT_OPENAI, 0,
		    "{\"prompt\":\"p\",\"stream\":true,\"stream_options\":{\"include_usage\":false,"
		    "\"x\":1}}");
	so = options_of(&r);
	assert_true(json_is_true(json_object_get(so, "include_usage")));
	assert_int_equal(json_integer_value(json_object_get(so, "x")), 1);
	json_decref(so);
	tb_provider_request_free(&r);
	r = read_ok(TB_DIALECT_OPENAI, 0,
		    "{\"messages\":[],\"stream\":true,\"stream_options\":null}");
	so = options_of(&r);
	assert_true(json_is_true(json_object_get(so, "include_usage")));
	json_decref(so);
	tb_provider_request_free(&r);
	/* nothing to add: not a stream, asking already, the Responses API
	 * (which reports a stream's usage anyway), Anthropic */
	static const struct {
		tb_dialect_t d;
		const char *body;
	} left[] = {
		{ TB_DIALECT_OPENAI, "{\"messages\":[],\"stream\":false}" },
		{ TB_DIALECT_OPENAI, "{\"messages\":[],\"stream\":1}" },
		{ TB_DIALECT_OPENAI,
		  "{\"messages\":[],\"stream\":true,\"stream_options\":{\"include_usage\":true}}" },
		{ TB_DIALECT_OPENAI, "{\"input\":\"x\",\"stream\":true}" },
		{ TB_DIALECT_ANTHROPIC, "{\"messages\":[],\"stream\":true,\"max_tokens\":5}" },
	};
	for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++) {
		r = read_ok(left[i].d, 0, left[i].body);
		assert_null(r.rewritten);
		assert_false(r.usage_added);
		tb_provider_request_free(&r);
	}
}

/* Two values for one key: the proxy and the provider could each read
 * another, so the request is refused; a body that looks like JSON but is
 * not is refused too (a provider's parser might read it). */
static void test_provider_request__ambiguous_bodies_are_refused(void **state)
{
	static const char *const bad[] = {
		"{\"messages\":[],\"max_tokens\":1,\"max_tokens\":100000}",
		"{\"messages\":[],\"stream\":false,\"stream\":true}",
		"{\"messages\":[{\"a\":1,\"a\":2}]}",
		"{\"messages\":[],\"max_tokens\":5",
		"{\"messages\":[],\"x\":1e999999}",
		/* past what the proxy reads as an integer: another parser might */
		"{\"messages\":[],\"max_tokens\":18446744073709551617}",
		"[{\"messages\":[]},",
	};
	tb_provider_request_t r;
	char why[300];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = '\0';
		if (tb_provider_request_read(&r, TB_DIALECT_OPENAI, 0, bad[i], strlen(bad[i]), why,
					     sizeof(why)) != -1)
			fail_msg("not refused: %s", bad[i]);
		assert_true(why[0] != '\0');
		assert_null(r.rewritten);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_provider_request__generation_requests_and_the_rest),
		cmocka_unit_test(test_provider_request__the_output_it_allows),
		cmocka_unit_test(test_provider_request__an_openai_stream_is_asked_for_its_usage),
		cmocka_unit_test(test_provider_request__ambiguous_bodies_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
