/*
 * source.c: what every image source shares (source.h): a blob of one,
 * read by ranges as a layer index's fetch function (layer_index.h).
 * The sources themselves are layout.c and registry.c.
 */
#include "source.h"

int64_t tb_image_source_fetch(void *arg, uint64_t off, void *buf, size_t len, tb_error_t *err)
{
	tb_source_blob_t *b = arg;
	return b->src->read_range(b->src, b->digest, off, buf, len, b->cancel, err);
}
