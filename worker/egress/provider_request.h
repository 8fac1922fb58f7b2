/*
 * provider_request.h: what a request to a provider may cost, read from
 * its body before it goes upstream (schemas/runtime.md, "dialect"), so
 * that the task's token budgets hold against requests in flight
 * together, answers the agent leaves and streams that would report no
 * usage:
 *
 *  - a generation request is a JSON object with `messages`, `input` or
 *    `prompt` (chat completions, the Responses API, completions,
 *    embeddings, Anthropic messages); only such a request is charged its
 *    worst case when its answer reports no usage or is cut short;
 *  - its worst case: every byte of the body an input token (a token is
 *    at least one byte), and the output it allows (`max_tokens`,
 *    `max_completion_tokens` or `max_output_tokens`, the largest given,
 *    times `n` or `best_of`), or the endpoint's `default_max_tokens`;
 *  - an OpenAI-style stream of chat completions or completions that does
 *    not ask for usage is made to: `"stream_options":{"include_usage":
 *    true}` is added (the stream then ends with a chunk whose `choices`
 *    is empty and whose `usage` is the exchange's).
 *
 * The body is read by a parser that rejects duplicate keys, so that the
 * proxy and the provider cannot read two different `max_tokens`; a body
 * that starts as JSON and does not parse is refused for the same reason.
 */
#ifndef TB_PROVIDER_REQUEST_H
#define TB_PROVIDER_REQUEST_H

#include "tb/runtime.h"

#include <stddef.h>
#include <stdint.h>

/* The output a request that names none is reserved (an endpoint's
 * default_max_tokens absent). */
#define TB_PROVIDER_DEFAULT_MAX_TOKENS 16384

typedef struct tb_provider_request {
	int generation;      /* a generation request (above) */
	uint64_t max_output; /* the output tokens it allows at most */
	int declared;        /* max_output was its own, not the default */
	int usage_added;     /* rewritten asks the stream for usage */
	char *rewritten;     /* the body to send instead (NUL-terminated), or NULL */
	size_t rewritten_len;
} tb_provider_request_t;

/**
 * Reads the body @p body (@p len bytes) of a request to an endpoint
 * speaking @p dialect whose default output is @p default_max (0: the
 * built-in one). A body that is not a JSON object is no generation
 * request (0, nothing else said).
 * @param[out] out freed with tb_provider_request_free()
 * @return 0; -1 with @p why (a client's mistake, answered 400): a body
 *         that starts as JSON (`{` or `[`) and is not JSON, or gives a
 *         key twice
 */
int tb_provider_request_read(tb_provider_request_t *out, tb_dialect_t dialect, uint64_t default_max,
			     const char *body, size_t len, char *why, size_t wlen);

void tb_provider_request_free(tb_provider_request_t *r);

#endif
