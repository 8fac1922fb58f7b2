/*
 * provider_usage.c: reading the providers' usage fields (provider_usage.h).
 */
#include "provider_usage.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* @p o's integer member @p key into @p out; 1 when it was there. */
static int num(const json_t *o, const char *key, uint64_t *out)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return 0;
	*out = (uint64_t)json_integer_value(v);
	return 1;
}

/* OpenAI: chat completions' usage (prompt_tokens, completion_tokens,
 * prompt_tokens_details.cached_tokens) at the top of an answer or a
 * stream's last chunk; the Responses API's (input_tokens, output_tokens,
 * input_tokens_details.cached_tokens) at the top of an answer, or in the
 * response of a stream's response.completed event. */
static void openai(const json_t *o, tb_tokens_t *t)
{
	const json_t *u = json_object_get(o, "usage");
	if (!json_is_object(u))
		u = json_object_get(json_object_get(o, "response"), "usage");
	if (!json_is_object(u))
		return;
	int any = num(u, "prompt_tokens", &t->input) | num(u, "input_tokens", &t->input);
	any |= num(u, "completion_tokens", &t->output) | num(u, "output_tokens", &t->output);
	num(json_object_get(u, "prompt_tokens_details"), "cached_tokens", &t->cached);
	num(json_object_get(u, "input_tokens_details"), "cached_tokens", &t->cached);
	t->seen |= any;
}

/* Anthropic: a message's usage at the top of an answer, in a stream's
 * message_start (message.usage: the input) and message_delta events
 * (usage: the output so far). Input is the three input counts together. */
static void anthropic(const json_t *o, tb_tokens_t *t)
{
	const json_t *u = json_object_get(o, "usage");
	if (!json_is_object(u))
		u = json_object_get(json_object_get(o, "message"), "usage");
	if (!json_is_object(u))
		return;
	uint64_t in = 0, created = 0, read = 0;
	int has_in = num(u, "input_tokens", &in);
	int has_created = num(u, "cache_creation_input_tokens", &created);
	int has_read = num(u, "cache_read_input_tokens", &read);
	if (has_in || has_created || has_read) {
		t->input = in + created + read;
		t->cached = read;
	}
	t->seen |= has_in | num(u, "output_tokens", &t->output);
}

/* One JSON document of the answer (a body, or an event's data). */
static void document(tb_usage_scan_t *s, const char *text, size_t len)
{
	json_t *o = json_loadb(text, len, JSON_DECODE_ANY, NULL);
	if (json_is_object(o)) {
		if (s->dialect == TB_DIALECT_ANTHROPIC)
			anthropic(o, &s->tokens);
		else
			openai(o, &s->tokens);
	}
	json_decref(o);
}

/* Appends to the buffer, or starts skipping past its cap. */
static void keep(tb_usage_scan_t *s, const char *data, size_t len, size_t max)
{
	if (s->skipping || !len) /* nothing: buf may still be NULL */
		return;
	if (s->len + len > max) {
		s->skipping = 1;
		return;
	}
	if (s->len + len > s->cap) {
		size_t cap = s->cap ? s->cap : 4096;
		while (cap < s->len + len)
			cap *= 2;
		char *bigger = realloc(s->buf, cap < max ? cap : max);
		if (!bigger) {
			s->skipping = 1;
			return;
		}
		s->buf = bigger;
		s->cap = cap < max ? cap : max;
	}
	memcpy(s->buf + s->len, data, len);
	s->len += len;
}

/* A whole SSE line: "data: {...}" is a document; the rest is framing. */
static void line(tb_usage_scan_t *s)
{
	size_t n = s->len;
	if (n && s->buf[n - 1] == '\r')
		n--;
	if (!s->skipping && n > 5 && !strncmp(s->buf, "data:", 5)) {
		const char *d = s->buf + 5;
		size_t dn = n - 5;
		if (*d == ' ')
			d++, dn--;
		if (!(dn == 6 && !strncmp(d, "[DONE]", 6)))
			document(s, d, dn);
	}
	s->len = 0;
	s->skipping = 0;
}

void tb_usage_scan_init(tb_usage_scan_t *s, tb_dialect_t dialect, const char *content_type)
{
	memset(s, 0, sizeof(*s));
	s->dialect = dialect;
	s->sse = content_type && !strncasecmp(content_type, "text/event-stream", 17);
}

void tb_usage_scan_feed(tb_usage_scan_t *s, const char *data, size_t len)
{
	if (!s->sse) {
		keep(s, data, len, TB_USAGE_BODY_MAX);
		return;
	}
	while (len) {
		const char *nl = memchr(data, '\n', len);
		size_t n = nl ? (size_t)(nl - data) : len;
		keep(s, data, n, TB_USAGE_LINE_MAX);
		if (!nl)
			return;
		line(s);
		data += n + 1;
		len -= n + 1;
	}
}

void tb_usage_scan_end(tb_usage_scan_t *s, tb_tokens_t *out)
{
	if (s->sse && s->len)
		line(s); /* a last line without its newline */
	else if (!s->sse && !s->skipping && s->len)
		document(s, s->buf, s->len);
	*out = s->tokens;
	free(s->buf);
	memset(s, 0, sizeof(*s));
}
