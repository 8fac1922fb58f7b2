/*
 * fuzz_read_order.c: an image's read order decoded from hostile bytes
 * (worker/image/read_order.h): refused with a reason or decoded, never a
 * crash or a leak; and what decodes encodes back to the same bytes (the
 * decoder keeps nothing it does not check, and drops nothing).
 */
#include "read_order.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tb_read_order_t *o;
	tb_error_t err;
	uint8_t *again;
	size_t n;

	if (size > TB_READ_ORDER_BYTES_MAX + 1)
		return 0;
	if (tb_read_order_decode(data, size, NULL, &o, &err) < 0) {
		if (o || !err.msg[0])
			abort();
		return 0;
	}
	if (tb_read_order_encode(o, &again, &n, &err) < 0)
		abort();
	if (n != size || memcmp(again, data, n))
		abort();
	tb_read_order_t *back;
	if (tb_read_order_decode(again, n, o->image, &back, &err) < 0)
		abort();
	tb_read_order_free(back);
	tb_read_order_free(o);
	free(again);
	return 0;
}
