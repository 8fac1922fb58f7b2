/*
 * fuzz_layer_index.c: a gzip layer's index decoded from hostile bytes
 * (worker/image/layer_index.h): refused with a reason or decoded, never a
 * crash or a leak; and what decodes encodes back to the same bytes (the
 * decoder keeps nothing it does not check, and drops nothing).
 */
#include "layer_index.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tb_layer_index_t *ix;
	tb_error_t err;
	uint8_t *again;
	size_t n;
	char digest[72];

	if (size > (1u << 20))
		return 0;
	if (tb_layer_index_decode(data, size, NULL, NULL, &ix, &err) < 0) {
		if (ix || !err.msg[0])
			abort();
		return 0;
	}
	if (tb_layer_index_encode(ix, &again, &n, digest, &err) < 0)
		abort();
	if (n != size || memcmp(again, data, n))
		abort();
	tb_layer_index_t *back;
	if (tb_layer_index_decode(again, n, ix->layer, digest, &back, &err) < 0)
		abort();
	tb_layer_index_free(back);
	tb_layer_index_free(ix);
	free(again);
	return 0;
}
