/*
 * fuzz_mpack_json.c: MessagePack -> JSON -> MessagePack -> JSON must give
 * equal JSON (what `taskbox watch --json` and the agent protocol rely on).
 */
#include "tb/json_mpack.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *first = NULL, *second = NULL;
	msgpack_sbuffer sb;
	tb_error_t err;

	if (size > (1u << 20))
		return 0;
	msgpack_sbuffer_init(&sb);
	if (tb_mpack_to_json(&first, data, size, &err) == 0) {
		if (tb_json_to_mpack(&sb, first, &err) != 0 ||
		    tb_mpack_to_json(&second, sb.data, sb.size, &err) != 0 ||
		    !json_equal(first, second))
			abort();
	}
	json_decref(first);
	json_decref(second);
	msgpack_sbuffer_destroy(&sb);
	return 0;
}
