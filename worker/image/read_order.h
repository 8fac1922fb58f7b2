/*
 * read_order.h: the order in which a first run of an image read its
 * root's spans (issue 49), recorded per image so that later starts read
 * on demand can fetch those spans ahead, in that order, and no others.
 *
 * A span is named by its layer's place in the image (0: the lowest) and
 * its number in that layer's index (layer_index.h). The order names the
 * image (its manifest's digest) and, per layer, how many spans its index
 * had: an order recorded against other indexes (a pin that lapsed and
 * was built again with another span size) is refused, not misread.
 *
 * What is trusted: nothing of it but its shape. It is a hint: it decides
 * which spans are fetched ahead and when, never a byte (each span is
 * checked against its pinned index before it is kept or read: span_cache.h,
 * layer_index.h) nor the tree. So it is not pinned in the ledger as an
 * index is; it is decoded as hostile bytes: bounded in size, versioned,
 * its SHA-256 at its end (a garbled or cut object is refused; a forger can
 * compute one too: it is a check of the transfer, not of who wrote it),
 * every span inside the image's indexes and none twice. What one that lies
 * can cost is a prefetch of spans no one reads: at most each span of the
 * image once per start (what the whole pull behind it fetches anyway), at
 * a low priority, behind every read (docs/sandbox.md).
 *
 * Stored at `image-orders/<manifest hex>` (schemas/keys.md): the first
 * run of an image read on demand that finds none there records its own.
 */
#ifndef TB_READ_ORDER_H
#define TB_READ_ORDER_H

#include "layer_index.h"
#include "tb/error.h"
#include "tb/store.h"

#include <stddef.h>
#include <stdint.h>

#define TB_READ_ORDER_VERSION 1
#define TB_READ_ORDER_LAYERS_MAX 1024u     /* an image's layers, at most */
#define TB_READ_ORDER_SPANS_MAX (1u << 16) /* spans listed, at most */
/* An encoding, at most: what the caps above allow. */
#define TB_READ_ORDER_BYTES_MAX                                                                    \
	(8 + 2 + 2 + 71 + 2 + 4 * TB_READ_ORDER_LAYERS_MAX + 4 + 6 * TB_READ_ORDER_SPANS_MAX + 32)

/* A span of an image: its layer's place, its number in that layer. */
typedef struct tb_read_span {
	uint32_t layer, span;
} tb_read_span_t;

typedef struct tb_read_order {
	char image[72];        /* the image's manifest digest */
	size_t nlayers;        /* 1 .. LAYERS_MAX */
	uint32_t *npoints;     /* per layer: the spans its index has (> 0) */
	size_t n;              /* 0 .. SPANS_MAX */
	tb_read_span_t *spans; /* in the order they were first read */
} tb_read_order_t;

/**
 * A new order of image @p image over the indexes @p ix (@p nlayers of
 * them, the lowest first), listing @p n spans of @p spans (copied; those
 * past SPANS_MAX are left out).
 * @return 0; TB_EINVAL for a span outside the indexes or named twice, or
 *         no layer or too many; TB_ENOMEM
 */
int tb_read_order_make(tb_read_order_t **out, const char *image, const tb_layer_index_t *const *ix,
		       size_t nlayers, const tb_read_span_t *spans, size_t n, tb_error_t *err);

/**
 * Encodes @p o (read_order_codec.c says how) into a malloc'd @p data of
 * @p len bytes. @return 0; TB_EINVAL for an order the decoder would
 * refuse; TB_ENOMEM
 */
int tb_read_order_encode(const tb_read_order_t *o, uint8_t **data, size_t *len, tb_error_t *err);

/**
 * Decodes an order of image @p image (NULL: any, for tools and the
 * fuzzer), as hostile bytes.
 * @return 0 and a new order in @p out; TB_EINVAL naming what is wrong
 *         (too big, truncated, its SHA-256 not its bytes', another
 *         image's, a span outside its layers or named twice, bytes after
 *         it); TB_EVERSION for a later version; TB_ENOMEM
 */
int tb_read_order_decode(const uint8_t *data, size_t len, const char *image, tb_read_order_t **out,
			 tb_error_t *err);

/**
 * Whether @p o was recorded against these indexes: as many layers, each
 * with as many spans. @return 0; TB_EINVAL naming the first difference
 */
int tb_read_order_fits(const tb_read_order_t *o, const tb_layer_index_t *const *ix, size_t nlayers,
		       tb_error_t *err);

/** Frees @p o (NULL is fine). */
void tb_read_order_free(tb_read_order_t *o);

/** The store's key of image @p image's order into @p out (at least 100
 * bytes): `image-orders/<manifest hex>`. */
void tb_read_order_key(char *out, size_t cap, const char *image);

/**
 * Image @p image's order from @p store, decoded and fitted to its
 * indexes @p ix.
 * @return 0 and a new order in @p out; TB_ENOTFOUND (none recorded);
 *         TB_EINVAL refused, naming why (too big, garbled, another
 *         image's); TB_ECONFLICT a sound order recorded over other
 *         indexes than @p ix (another host's, whose layer was read by
 *         another index or TOC: not used here, but not to be replaced);
 *         TB_EVERSION (a later worker's: left alone); TB_EIO or
 *         TB_ERETRY (the store away). On any failure the start goes on
 *         without prefetch.
 */
int tb_read_order_find(tb_store_t *store, const char *image, const tb_layer_index_t *const *ix,
		       size_t nlayers, tb_read_order_t **out, tb_error_t *err);

/**
 * Puts @p o in the store unless an order of its image is there; with
 * @p replace (the one there was refused), that one is removed first.
 * @return 0 put; TB_EEXIST (another run's is there: it stands); TB_EIO
 *         or TB_ERETRY; TB_ENOMEM
 */
int tb_read_order_publish(tb_store_t *store, const tb_read_order_t *o, int replace,
			  tb_error_t *err);

#endif
