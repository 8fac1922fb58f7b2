/*
 * fuzz_zstd_chunked_toc.c: a zstd:chunked layer's TOC JSON (decompressed)
 * parsed from hostile bytes (worker/image/layer_zstd_chunked.h): refused
 * with a reason or parsed, never a crash or a leak; and what parses holds
 * together: the points in the blob's order before the TOC, each a chunk
 * of at least a byte, tiling the stream from 0, every file's data inside
 * it. Needs no libzstd.
 */
#include "layer_zstd_chunked.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LAYER "sha256:0000000000000000000000000000000000000000000000000000000000000000"
#define LAYER_SIZE (1ull << 32)
#define TOC_OFFSET (1ull << 31)

static void check(const tb_layer_index_t *ix)
{
	for (size_t i = 0; i < ix->npoints; i++) {
		const tb_layer_point_t *p = &ix->points[i];
		uint64_t end = i + 1 < ix->npoints ? ix->points[i + 1].out : ix->total_out;
		if (p->kind != TB_LAYER_POINT_ZSTD || p->in >= TOC_OFFSET || p->out >= end ||
		    (i ? p->in <= ix->points[i - 1].in : p->out != 0))
			abort();
	}
	for (size_t i = 0; i < ix->nentries; i++) {
		const tb_layer_entry_t *e = &ix->entries[i];
		if (!e->path[0] || e->offset > ix->total_out || e->size > ix->total_out - e->offset)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tb_layer_index_t *ix;
	tb_error_t err;

	if (size > (1u << 20))
		return 0;
	if (tb_zstd_chunked_toc_parse(LAYER, LAYER_SIZE, TOC_OFFSET, data, size, &ix, &err) < 0) {
		if (ix || !err.msg[0])
			abort();
		return 0;
	}
	check(ix);
	tb_layer_index_free(ix);
	return 0;
}
