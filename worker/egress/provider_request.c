/*
 * provider_request.c: a provider request's worst case, and usage asked
 * of its stream (provider_request.h).
 */
#include "provider_request.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUTPUT_CAP UINT64_C(1000000000000) /* 10^12: every budget's own cap */
#define CHOICES_CAP 1000                   /* n or best_of, as far as it counts */

static const char *const generation_keys[] = { "messages", "input", "prompt" };
static const char *const max_keys[] = { "max_tokens", "max_completion_tokens",
					"max_output_tokens" };

/* @p v as a count when it is a number >= 0 (a real rounded up), capped. */
static int count(const json_t *v, uint64_t cap, uint64_t *out)
{
	double d;

	if (json_is_integer(v)) {
		if (json_integer_value(v) < 0)
			return 0;
		*out = (uint64_t)json_integer_value(v);
	} else if (json_is_real(v) && (d = json_real_value(v)) >= 0 && isfinite(d)) {
		*out = d >= (double)cap ? cap : (uint64_t)ceil(d);
	} else {
		return 0;
	}
	if (*out > cap)
		*out = cap;
	return 1;
}

static int is_generation(const json_t *o)
{
	for (size_t i = 0; i < sizeof(generation_keys) / sizeof(generation_keys[0]); i++)
		if (json_object_get(o, generation_keys[i]))
			return 1;
	return 0;
}

/* The output @p o allows: the largest max given, times its choices. */
static void max_output(tb_provider_request_t *r, const json_t *o, uint64_t default_max)
{
	uint64_t most = 0, v, choices = 1;

	for (size_t i = 0; i < sizeof(max_keys) / sizeof(max_keys[0]); i++)
		if (count(json_object_get(o, max_keys[i]), OUTPUT_CAP, &v)) {
			r->declared = 1;
			most = v > most ? v : most;
		}
	if (!r->declared)
		most = default_max ? default_max : TB_PROVIDER_DEFAULT_MAX_TOKENS;
	if (count(json_object_get(o, "n"), CHOICES_CAP, &v) && v > choices)
		choices = v;
	if (count(json_object_get(o, "best_of"), CHOICES_CAP, &v) && v > choices)
		choices = v;
	r->max_output = most > OUTPUT_CAP / choices ? OUTPUT_CAP : most * choices;
}

/* An OpenAI stream of chat completions or completions that does not ask
 * for usage: the body again, asking. (The Responses API and Anthropic
 * report a stream's usage anyway.) @return 0, or -1 out of memory. */
static int ask_usage(tb_provider_request_t *r, json_t *o, const char *body, size_t len)
{
	json_t *so = json_object_get(o, "stream_options");

	if (!json_is_true(json_object_get(o, "stream")) ||
	    !(json_object_get(o, "messages") || json_object_get(o, "prompt")) ||
	    json_is_true(json_object_get(so, "include_usage")))
		return 0;
	if (!so) { /* spliced in after the '{': the rest goes byte for byte */
		static const char add[] = "\"stream_options\":{\"include_usage\":true},";
		size_t at = 0; /* a JSON object: past its '{' (the body is not a string) */
		while (at < len && body[at] != '{')
			at++;
		if (++at > len || !(r->rewritten = malloc(len + sizeof(add))))
			return -1;
		memcpy(r->rewritten, body, at);
		memcpy(r->rewritten + at, add, sizeof(add) - 1);
		memcpy(r->rewritten + at + sizeof(add) - 1, body + at, len - at);
		r->rewritten_len = len + sizeof(add) - 1;
		r->rewritten[r->rewritten_len] = '\0';
	} else { /* there but not asking (false, or not an object): written anew */
		if (!json_is_object(so)) {
			so = json_object();
			if (!so || json_object_set_new(o, "stream_options", so) < 0)
				return -1;
		}
		if (json_object_set_new(so, "include_usage", json_true()) < 0 ||
		    !(r->rewritten = json_dumps(o, JSON_COMPACT)))
			return -1;
		r->rewritten_len = strlen(r->rewritten);
	}
	r->usage_added = 1;
	return 0;
}

int tb_provider_request_read(tb_provider_request_t *out, tb_dialect_t dialect, uint64_t default_max,
			     const char *body, size_t len, char *why, size_t wlen)
{
	json_error_t je;
	json_t *o;

	memset(out, 0, sizeof(*out));
	if (!len)
		return 0;
	if (!(o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je))) {
		/* A body that looks like JSON and is not, or gives a key
		 * twice: the provider's parser might read it, and another
		 * max_tokens than the proxy's. Anything else (a form, a file)
		 * is no generation request. */
		size_t at = 0;
		while (at < len && (body[at] == ' ' || body[at] == '\t' || body[at] == '\r' ||
				    body[at] == '\n'))
			at++;
		if (at == len || (body[at] != '{' && body[at] != '['))
			return 0;
		snprintf(why, wlen,
			 "a request to a provider whose JSON body the proxy cannot "
			 "read as one meaning: %.200s",
			 je.text);
		return -1;
	}
	if (json_is_object(o) && is_generation(o)) {
		out->generation = 1;
		max_output(out, o, default_max);
		/* out of memory, it goes as it came: a stream that reports no
		 * usage is charged its worst case */
		if (dialect == TB_DIALECT_OPENAI)
			(void)ask_usage(out, o, body, len);
	}
	json_decref(o);
	return 0;
}

void tb_provider_request_free(tb_provider_request_t *r)
{
	free(r->rewritten);
	memset(r, 0, sizeof(*r));
}
