/*
 * fuzz_provider_usage.c: a provider's answer read for its usage
 * (worker/egress/provider_usage.h) gives the same tokens whether it comes
 * whole or in pieces of any size, and never crashes or leaks. The first
 * byte picks the dialect, the shape (JSON or event stream) and the size
 * of the pieces; the rest is the answer's body.
 */
#include "provider_usage.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static tb_tokens_t scan(tb_dialect_t d, const char *type, const uint8_t *body, size_t n,
			size_t step)
{
	tb_usage_scan_t s;
	tb_tokens_t t;

	tb_usage_scan_init(&s, d, type);
	for (size_t i = 0; i < n; i += step)
		tb_usage_scan_feed(&s, (const char *)body + i, n - i < step ? n - i : step);
	tb_usage_scan_end(&s, &t);
	return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > (1u << 20))
		return 0;
	tb_dialect_t d = (data[0] & 1) ? TB_DIALECT_ANTHROPIC : TB_DIALECT_OPENAI;
	const char *type = (data[0] & 2) ? "text/event-stream" : "application/json";
	size_t step = (size_t)(data[0] >> 2) + 1; /* 1..64 */
	tb_tokens_t whole = scan(d, type, data + 1, size - 1, size);
	tb_tokens_t pieces = scan(d, type, data + 1, size - 1, step);
	if (memcmp(&whole, &pieces, sizeof(whole)) != 0)
		abort();
	return 0;
}
