/*
 * fuzz_read_order.c: an image's read order decoded from hostile bytes
 * (worker/image/read_order.h): refused with a reason or decoded, never a
 * crash or a leak; and what decodes encodes back to the same bytes (the
 * decoder keeps nothing it does not check, and drops nothing). Each input
 * is tried as it is and again with its last 32 bytes made its SHA-256 (a
 * forger can: the fields behind the checksum get fuzzed too).
 */
#include "read_order.h"

#include <openssl/evp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one(const uint8_t *data, size_t size)
{
	tb_read_order_t *o;
	tb_error_t err;
	uint8_t *again;
	size_t n;

	if (tb_read_order_decode(data, size, NULL, &o, &err) < 0) {
		if (o || !err.msg[0])
			abort();
		return;
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
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > TB_READ_ORDER_BYTES_MAX + 1)
		return 0;
	one(data, size);
	if (size < 32)
		return 0;
	uint8_t *sealed = malloc(size);
	if (!sealed)
		return 0;
	memcpy(sealed, data, size);
	EVP_Digest(sealed, size - 32, sealed + size - 32, NULL, EVP_sha256(), NULL);
	one(sealed, size);
	free(sealed);
	return 0;
}
