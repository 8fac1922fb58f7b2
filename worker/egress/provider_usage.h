/*
 * provider_usage.h: the tokens a provider says an answer used, read from
 * the answer as it passes through the egress proxy (schemas/runtime.md,
 * "dialect"): the `usage` fields of OpenAI-compatible chat completions
 * and responses, and of Anthropic messages, in a JSON body or a stream
 * of server-sent events. What the proxy passes on is not changed; the
 * scanner reads a copy, bounded in memory whatever the answer.
 *
 * Figures are the provider's totals for the exchange: a stream's last
 * report of each wins (streams report running totals). `input` counts
 * every input token, cached ones included (Anthropic's input_tokens,
 * cache_creation_input_tokens and cache_read_input_tokens together);
 * `cached` those read from the provider's cache.
 */
#ifndef TB_PROVIDER_USAGE_H
#define TB_PROVIDER_USAGE_H

#include "tb/runtime.h"

#include <stddef.h>
#include <stdint.h>

/* A JSON body is read whole up to this; an event's line up to this. */
#define TB_USAGE_BODY_MAX (8u << 20)
#define TB_USAGE_LINE_MAX (1u << 20)

typedef struct tb_tokens {
	uint64_t input, output, cached;
	int seen; /* the answer reported usage */
} tb_tokens_t;

typedef struct tb_usage_scan {
	tb_dialect_t dialect;
	int sse;      /* text/event-stream: line by line */
	int skipping; /* the current line or body outgrew its cap */
	char *buf;    /* the body so far (JSON), or the current line (SSE) */
	size_t len, cap;
	tb_tokens_t tokens;
} tb_usage_scan_t;

/** Starts reading an answer of @p content_type (NULL: unknown, read as
 * JSON) from an endpoint speaking @p dialect. */
void tb_usage_scan_init(tb_usage_scan_t *s, tb_dialect_t dialect, const char *content_type);
/** The next @p len bytes of the answer's body, as they came. */
void tb_usage_scan_feed(tb_usage_scan_t *s, const char *data, size_t len);
/** The end of the body: what it reported into @p out (seen 0: nothing
 * readable), and everything the scan held freed. */
void tb_usage_scan_end(tb_usage_scan_t *s, tb_tokens_t *out);

#endif
