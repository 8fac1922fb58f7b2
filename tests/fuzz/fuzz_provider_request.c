/*
 * fuzz_provider_request.c: a provider request's body read for what it
 * may cost (worker/egress/provider_request.h) never crashes or leaks;
 * a body it rewrites to ask a stream for usage is still one JSON object
 * with no key given twice, and asks. The first byte picks the dialect
 * and the endpoint's default; the rest is the body.
 */
#include "provider_request.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tb_provider_request_t r;
	char why[300];

	if (size < 1 || size > (1u << 20))
		return 0;
	tb_dialect_t d = (data[0] & 1) ? TB_DIALECT_ANTHROPIC : TB_DIALECT_OPENAI;
	uint64_t def = (uint64_t)(data[0] >> 1) * 1000;
	if (tb_provider_request_read(&r, d, def, (const char *)data + 1, size - 1, why,
				     sizeof(why)) < 0)
		return 0;
	if (r.generation && (!r.max_output || r.max_output > UINT64_C(1000000000000)))
		abort();
	if (r.rewritten) {
		json_t *o = json_loadb(r.rewritten, r.rewritten_len, JSON_REJECT_DUPLICATES, NULL);
		json_t *so = json_object_get(o, "stream_options");
		if (!json_is_object(o) || !json_is_true(json_object_get(so, "include_usage")))
			abort();
		json_decref(o);
	}
	tb_provider_request_free(&r);
	return 0;
}
