/*
 * layer_estargz.h: an eStargz layer read natively (issue 49), so an
 * image no worker has pulled yet can start lazily.
 *
 * An eStargz layer (stargz-snapshotter's format) is an ordinary gzip
 * layer whose gzip members are cut where it helps: each chunk of a
 * regular file starts a member of its own; then a member holding the
 * table of contents (TOC), the tar entry `stargz.index.json`; then a
 * 51-byte footer, an empty member whose extra field (subfield 'SG')
 * holds the TOC member's offset as `%016xSTARGZ`. Unpacked whole it is
 * a tar like any other (stargz.index.json included); read natively, the
 * footer and the TOC are fetched by range and the layer is described by
 * a tb_layer_index_t of kind TB_LAYER_INDEX_ESTARGZ (layer_index.h):
 * the entries the TOC lists (as the tar names them), then
 * stargz.index.json itself, as the eager unpack would make them; and a
 * member point per chunk, each read by fetching its member and
 * inflating it from its start, checked against the chunk's digest.
 *
 * What is trusted, and how:
 *  - the TOC only through the manifest: its JSON's SHA-256 must be the
 *    layer's `containerd.io/snapshot/stargz/toc.digest` annotation, and
 *    the manifest is read by digest. A layer without it, or whose TOC
 *    differs, is refused (it is then pulled whole);
 *  - the TOC is then parsed as hostile input: its size, entry count,
 *    names and link targets bounded; every chunk inside the blob before
 *    the TOC, the chunks in the blob's order (none overlapping another),
 *    each file's chunks covering it exactly, each chunk's compressed
 *    span and its bytes bounded; a digest for every chunk;
 *  - a chunk's bytes only through its `chunkDigest` (SHA-256 of the
 *    uncompressed chunk), checked before a byte of it is returned: a
 *    chunk that does not match fails that read, naming the chunk, its
 *    file and the layer, never wrong bytes.
 * The TOC, not the tar headers in the members, is what the index lists:
 * an image whose author made the two disagree looks different read
 * lazily and unpacked whole, which only that author can do (the TOC is
 * pinned by the image's own manifest).
 *
 * Not read natively (refused, naming why: the layer is pulled whole):
 * the legacy stargz footer (47 bytes, no chunk digests), several files'
 * chunks sharing a member (`innerOffset`), a TOC past
 * TB_ESTARGZ_TOC_BYTES_MAX.
 */
#ifndef TB_LAYER_ESTARGZ_H
#define TB_LAYER_ESTARGZ_H

#include "layer_index.h"

#define TB_ESTARGZ_FOOTER 51
/* The TOC's member, and its JSON inflated, at most; and the JSON values
 * in it (its ',', ':', '[' and '{' counted before it is parsed: jansson
 * holds each value in memory while the TOC is read). About 100,000
 * files' TOC, which takes well under the bounds. */
#define TB_ESTARGZ_TOC_BYTES_MAX (32u << 20)
#define TB_ESTARGZ_TOC_VALUES_MAX (4u << 20)
/* A chunk's uncompressed bytes, at most. */
#define TB_ESTARGZ_CHUNK_MAX TB_LAYER_INDEX_SPAN_MAX
#define TB_ESTARGZ_TOC_NAME "stargz.index.json"
#define TB_ESTARGZ_ANNOTATION_TOC "containerd.io/snapshot/stargz/toc.digest"
#define TB_ESTARGZ_ANNOTATION_SIZE "io.containers.estargz.uncompressed-size"

/* A layer as its manifest describes it. */
typedef struct tb_estargz_layer {
	const char *digest;      /* "sha256:<hex>" */
	uint64_t size;           /* the blob's bytes */
	const char *toc_digest;  /* the TOC digest annotation; NULL: none */
	tb_toc_budget_t *budget; /* the image's, what is left (tb_toc_parse); NULL: none */
} tb_estargz_layer_t;

/**
 * Reads eStargz layer @p layer's footer and TOC through @p fetch (two
 * ranges: the footer, then the TOC's member), checks the TOC against the
 * annotated digest and parses it.
 * @return 0 and a new index in @p out (tb_layer_index_free; read with
 *         tb_layer_index_read); TB_ENOTFOUND for a layer with no TOC
 *         digest annotated, or no eStargz footer (not an eStargz layer);
 *         TB_EINVAL naming what is wrong (a TOC whose digest differs, a
 *         TOC that lies, a truncated footer or member); TB_ETOOBIG for a
 *         TOC past TB_ESTARGZ_TOC_BYTES_MAX, or past what layer->budget
 *         has left (it then takes the TOC's bytes); TB_ENOMEM; or what
 *         @p fetch returned. On any failure the layer is pulled whole.
 */
int tb_estargz_open(const tb_estargz_layer_t *layer, tb_layer_fetch_fn fetch, void *arg,
		    tb_layer_index_t **out, tb_error_t *err);

/**
 * Parses TOC JSON @p json (@p len bytes) of layer @p layer, of
 * @p layer_size bytes, whose TOC member starts at @p toc_offset, into an
 * index of its entries and chunks (without the TOC's own entry, which
 * tb_estargz_open() adds). Takes @p json as hostile (the fuzzer's way
 * in). @return 0 and a new index in @p out; TB_EINVAL naming the entry
 * and what is wrong; TB_ETOOBIG; TB_ENOMEM
 */
int tb_estargz_toc_parse(const char *layer, uint64_t layer_size, uint64_t toc_offset,
			 const uint8_t *json, size_t len, tb_layer_index_t **out, tb_error_t *err);

#endif
