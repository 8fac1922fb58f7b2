/*
 * layer_zstd_chunked.h: a zstd:chunked layer read natively (issue 49),
 * so an image no worker has pulled yet can start lazily.
 *
 * A zstd:chunked layer (containers/storage's format) is an ordinary zstd
 * layer (`tar+zstd`) whose frames are cut where it helps: each chunk of a
 * regular file's data starts a zstd frame of its own (the tar headers go
 * into the frames between them); after the tar, zstd skippable frames
 * hold its table of contents (TOC: JSON in the shape eStargz's has,
 * itself zstd-compressed), its tar-split and a footer. Unpacked whole it
 * is a tar like any other (skippable frames are skipped by any zstd
 * decoder, so the TOC is no file of it). Read natively, the TOC is
 * fetched by range where the manifest says it is, and the layer is
 * described by a tb_layer_index_t of kind TB_LAYER_INDEX_ZSTD_CHUNKED
 * (layer_index.h): the entries the TOC lists, and a point per chunk
 * (TB_LAYER_POINT_ZSTD), each read by fetching its frames and
 * decompressing them from the chunk's start, checked against the
 * chunk's digest.
 *
 * What is trusted, and how:
 *  - the TOC only through the manifest: the layer's
 *    `io.github.containers.zstd-chunked.manifest-position` annotation
 *    says where its compressed bytes are (`offset:length:uncompressed
 *    length:1`), and their SHA-256 must be its
 *    `io.github.containers.zstd-chunked.manifest-checksum` annotation;
 *    the manifest is read by digest. A layer without them, or whose TOC
 *    differs, is refused (it is then pulled whole). The footer is not
 *    read (the annotations say all of it, as containers/storage reads
 *    the format);
 *  - the TOC then decompressed to exactly its annotated length (at most
 *    TB_ZSTD_CHUNKED_TOC_BYTES_MAX) and parsed as hostile input, as an
 *    eStargz TOC is (layer_estargz_toc.c): sizes, counts, names bounded;
 *    every chunk before the TOC, in the blob's order, none overlapping,
 *    each file's chunks covering it exactly; a digest for every chunk
 *    (`chunkDigest`, or for a file of one chunk the file's `digest`);
 *  - a chunk's bytes only through that digest (SHA-256 of the
 *    uncompressed chunk), checked before a byte of it is returned: a
 *    chunk that does not match fails that read, naming the chunk, its
 *    file and the layer, never wrong bytes. Its frames are decompressed
 *    only as far as the chunk goes, with a bounded window.
 * The TOC, not the tar headers, is what the index lists (as for
 * eStargz); entries' times are the TOC's `modtime`, to the nanosecond
 * (an RFC 3339 time that is not one, or before 1970, refuses the TOC).
 * TOCs whose entries are not in the blob's order are refused
 * (the format does not promise that order; containers/storage writes
 * it).
 *
 * Built only with libzstd (TB_HAVE_ZSTD_CHUNKED); without it such layers
 * are pulled whole, as any zstd layer.
 */
#ifndef TB_LAYER_ZSTD_CHUNKED_H
#define TB_LAYER_ZSTD_CHUNKED_H

#include "layer_index.h"

#define TB_ZSTD_CHUNKED_ANNOTATION_CHECKSUM "io.github.containers.zstd-chunked.manifest-checksum"
#define TB_ZSTD_CHUNKED_ANNOTATION_POSITION "io.github.containers.zstd-chunked.manifest-position"
/* The TOC compressed, and decompressed, at most (as eStargz's). */
#define TB_ZSTD_CHUNKED_TOC_BYTES_MAX (32u << 20)
/* A zstd frame's window, at most (2^26: 64 MiB, a chunk's most and
 * twice the TOC's), so a hostile frame costs a reader that at most. */
#define TB_ZSTD_CHUNKED_WINDOW_LOG_MAX 26
/* The position annotation's text, at most. */
#define TB_ZSTD_CHUNKED_POSITION_MAX 96

/* A layer as its manifest describes it. */
typedef struct tb_zstd_chunked_layer {
	const char *digest;      /* "sha256:<hex>" */
	uint64_t size;           /* the blob's bytes */
	const char *checksum;    /* the manifest-checksum annotation; NULL: none */
	const char *position;    /* the manifest-position annotation; NULL: none */
	tb_toc_budget_t *budget; /* the image's, what is left (tb_toc_parse); NULL: none */
} tb_zstd_chunked_layer_t;

/**
 * Reads zstd:chunked layer @p layer's TOC through @p fetch (one range,
 * where its annotation says), checks it against the annotated checksum,
 * decompresses and parses it.
 * @return 0 and a new index in @p out (tb_layer_index_free; read with
 *         tb_layer_index_read); TB_ENOTFOUND for a layer without both
 *         annotations; TB_EINVAL naming what is wrong (a position that
 *         is not one, a TOC whose checksum differs or that lies, one
 *         that does not decompress to its length); TB_ETOOBIG for a TOC
 *         past TB_ZSTD_CHUNKED_TOC_BYTES_MAX, or past what layer->budget
 *         has left (checked before its bytes are fetched; it then takes
 *         the TOC's bytes); TB_ENOMEM; or what @p fetch returned. On any
 *         failure the layer is pulled whole.
 */
int tb_zstd_chunked_open(const tb_zstd_chunked_layer_t *layer, tb_layer_fetch_fn fetch, void *arg,
			 tb_layer_index_t **out, tb_error_t *err);

/**
 * Parses TOC JSON @p json (@p len bytes, decompressed) of layer @p layer
 * of @p layer_size bytes, whose TOC's skippable frame starts at
 * @p toc_offset, into an index. Takes @p json as hostile (the fuzzer's
 * way in; needs no libzstd). @return as tb_estargz_toc_parse()
 */
int tb_zstd_chunked_toc_parse(const char *layer, uint64_t layer_size, uint64_t toc_offset,
			      const uint8_t *json, size_t len, tb_layer_index_t **out,
			      tb_error_t *err);

#endif
