/*
 * layer_zstd_chunked.c: a zstd:chunked layer opened by range
 * (layer_zstd_chunked.h): the manifest-position annotation parsed, the
 * TOC's skippable frame fetched, its compressed bytes checked against the
 * manifest-checksum annotation, decompressed to exactly the annotated
 * length and parsed (layer_estargz_toc.c). And a chunk's bytes
 * decompressed from the frames starting at its point, for
 * layer_index_member.c, which checks them.
 */
#include "layer_index_int.h"
#include "layer_zstd_chunked.h"

#include "tb/encoding.h"
#include "tb/image_ref.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define SKIPPABLE_MAGIC 0x184D2A50u
#define SKIPPABLE_HEADER 8
#define SCRATCH 4096u

/* Where the annotation says the TOC is. */
typedef struct position {
	uint64_t offset, length, ulength;
} position_t;

/* One decimal number of at most 19 digits ending at @p *s's @p end char. */
static int number(const char **s, char end, uint64_t *v)
{
	const char *p = *s;
	*v = 0;
	while (*p >= '0' && *p <= '9' && p - *s < 19)
		*v = *v * 10 + (uint64_t)(*p++ - '0');
	if (p == *s || *p != end)
		return -1;
	*s = p + (end != '\0');
	return 0;
}

/* "offset:length:uncompressed length:1", each in its bounds. */
static int parse_position(const tb_zstd_chunked_layer_t *l, position_t *pos, tb_error_t *err)
{
	const char *s = l->position;
	uint64_t type;
	if (number(&s, ':', &pos->offset) < 0 || number(&s, ':', &pos->length) < 0 ||
	    number(&s, ':', &pos->ulength) < 0 || number(&s, '\0', &type) < 0 || type != 1)
		return tb_error_set(err, TB_EINVAL,
				    "layer %s: its %s annotation '%.80s' is not "
				    "offset:length:length:1",
				    l->digest, TB_ZSTD_CHUNKED_ANNOTATION_POSITION, l->position);
	if (pos->length > TB_ZSTD_CHUNKED_TOC_BYTES_MAX ||
	    pos->ulength > TB_ZSTD_CHUNKED_TOC_BYTES_MAX)
		return tb_error_set(err, TB_ETOOBIG,
				    "layer %s: a TOC of %llu bytes, %llu compressed (at most %u)",
				    l->digest, (unsigned long long)pos->ulength,
				    (unsigned long long)pos->length, TB_ZSTD_CHUNKED_TOC_BYTES_MAX);
	if (pos->offset < SKIPPABLE_HEADER || !pos->length || pos->offset > l->size ||
	    pos->length > l->size - pos->offset)
		return tb_error_set(err, TB_EINVAL,
				    "layer %s: its TOC at %llu (%llu bytes) is not inside its %llu "
				    "bytes",
				    l->digest, (unsigned long long)pos->offset,
				    (unsigned long long)pos->length, (unsigned long long)l->size);
	return 0;
}

static int check_layer(const tb_zstd_chunked_layer_t *l, tb_error_t *err)
{
	if (!l->digest || !tb_digest_valid(l->digest))
		return tb_error_set(err, TB_EINVAL, "zstd:chunked: '%.80s' is not a sha256 digest",
				    l->digest ? l->digest : "(null)");
	if (!l->checksum || !l->position)
		return tb_error_set(err, TB_ENOTFOUND, "layer %s: no %s annotation", l->digest,
				    l->checksum ? TB_ZSTD_CHUNKED_ANNOTATION_POSITION
						: TB_ZSTD_CHUNKED_ANNOTATION_CHECKSUM);
	if (!tb_digest_valid(l->checksum))
		return tb_error_set(err, TB_EINVAL,
				    "layer %s: its %s annotation '%.80s' is not a sha256 digest",
				    l->digest, TB_ZSTD_CHUNKED_ANNOTATION_CHECKSUM, l->checksum);
	return 0;
}

/* The skippable frame's header before the TOC, and the TOC's checksum. */
static int check_toc(const tb_zstd_chunked_layer_t *l, const position_t *pos, const uint8_t *b,
		     tb_error_t *err)
{
	uint32_t magic =
	    (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	uint32_t size =
	    (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
	unsigned char sum[32];
	char have[72];

	if (magic != SKIPPABLE_MAGIC || size != pos->length)
		return tb_error_set(err, TB_EINVAL,
				    "layer %s: no skippable frame of %llu bytes before its TOC at "
				    "%llu",
				    l->digest, (unsigned long long)pos->length,
				    (unsigned long long)pos->offset);
	EVP_Digest(b + SKIPPABLE_HEADER, pos->length, sum, NULL, EVP_sha256(), NULL);
	memcpy(have, "sha256:", 7);
	tb_hex(have + 7, sum, 32);
	if (strcmp(have, l->checksum))
		return tb_error_set(err, TB_EINVAL,
				    "layer %s: its TOC's checksum is %s, not %.80s as its manifest "
				    "annotates",
				    l->digest, have, l->checksum);
	return 0;
}

/* A decompression context whose frames' windows are bounded, or NULL
 * with @p err set. */
static ZSTD_DCtx *new_dctx(const char *layer, tb_error_t *err)
{
	ZSTD_DCtx *d = ZSTD_createDCtx();
	if (!d) {
		tb_error_set(err, TB_ENOMEM, "layer %s: zstd: out of memory", layer);
		return NULL;
	}
	size_t r = ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, TB_ZSTD_CHUNKED_WINDOW_LOG_MAX);
	if (ZSTD_isError(r)) {
		tb_error_set(err, TB_EINVAL, "layer %s: zstd: bounding its window: %s", layer,
			     ZSTD_getErrorName(r));
		ZSTD_freeDCtx(d);
		return NULL;
	}
	return d;
}

/* @p n compressed bytes @p in decompressed into exactly @p want bytes. */
static int decompress_toc(const char *layer, const uint8_t *in, size_t n, uint8_t *out, size_t want,
			  tb_error_t *err)
{
	ZSTD_DCtx *d = new_dctx(layer, err);
	if (!d)
		return err->code;
	ZSTD_outBuffer o = { out, want, 0 };
	ZSTD_inBuffer i = { in, n, 0 };
	size_t r = 1;
	for (;;) { /* frame after frame, until the bytes or the room end */
		size_t before = o.pos, used = i.pos;
		r = ZSTD_decompressStream(d, &o, &i);
		if (ZSTD_isError(r) || (r == 0 && i.pos == i.size) ||
		    (o.pos == before && i.pos == used))
			break;
	}
	ZSTD_freeDCtx(d);
	if (ZSTD_isError(r) || r || i.pos != i.size || o.pos != want)
		return tb_error_set(
		    err, TB_EINVAL, "layer %s: its TOC does not decompress to its %zu bytes (%s)",
		    layer, want, ZSTD_isError(r) ? ZSTD_getErrorName(r) : "another length");
	return 0;
}

int tb_zstd_chunked_open(const tb_zstd_chunked_layer_t *layer, tb_layer_fetch_fn fetch, void *arg,
			 tb_layer_index_t **out, tb_error_t *err)
{
	position_t pos;
	uint8_t *frame = NULL, *json = NULL;
	*out = NULL;
	int rc = check_layer(layer, err);
	if (rc == 0)
		rc = parse_position(layer, &pos, err);
	if (rc == 0) /* before its bytes are allocated */
		rc = tb_toc_budget_bytes(layer->digest, layer->budget, pos.ulength, err);
	if (rc < 0)
		return rc;
	size_t n = (size_t)pos.length + SKIPPABLE_HEADER;
	if (!(frame = malloc(n)) || !(json = malloc(pos.ulength ? pos.ulength : 1))) {
		free(frame);
		return tb_error_set(err, TB_ENOMEM, "layer %s: out of memory", layer->digest);
	}
	int64_t got = fetch(arg, pos.offset - SKIPPABLE_HEADER, frame, n, err);
	if (got < 0)
		rc = tb_error_prefix(err, "layer %s: fetch its TOC", layer->digest);
	else if ((uint64_t)got != n)
		rc = tb_error_set(err, TB_EINVAL, "layer %s: its TOC came back as %lld bytes",
				  layer->digest, (long long)got);
	if (rc == 0)
		rc = check_toc(layer, &pos, frame, err);
	if (rc == 0)
		rc = decompress_toc(layer->digest, frame + SKIPPABLE_HEADER, pos.length, json,
				    pos.ulength, err);
	if (rc == 0)
		rc = tb_toc_parse(TB_LAYER_INDEX_ZSTD_CHUNKED, layer->digest, layer->size,
				  pos.offset - SKIPPABLE_HEADER, json, pos.ulength, layer->budget,
				  out, err);
	free(frame);
	free(json);
	return rc;
}

int tb_zstd_chunk(const tb_layer_index_t *ix, size_t i, const uint8_t *data, size_t len,
		  uint8_t *out, uint64_t want, tb_error_t *err)
{
	ZSTD_DCtx *d = new_dctx(ix->layer, err);
	if (!d)
		return err->code;
	ZSTD_outBuffer o = { out, (size_t)want, 0 };
	ZSTD_inBuffer in = { data, len, 0 };
	size_t r = 0;
	while (o.pos < o.size) {
		size_t before = o.pos, used = in.pos;
		r = ZSTD_decompressStream(d, &o, &in);
		if (ZSTD_isError(r) || (o.pos == before && in.pos == used))
			break; /* an error, or nothing more to come of these bytes */
	}
	ZSTD_freeDCtx(d);
	if (ZSTD_isError(r)) {
		char why[160];
		snprintf(why, sizeof(why), "does not decompress (%.100s)", ZSTD_getErrorName(r));
		return tb_layer_chunk_error(ix, i, err, why);
	}
	if (o.pos < o.size)
		return tb_layer_chunk_error(ix, i, err, "ends before the chunk does");
	return 0;
}
