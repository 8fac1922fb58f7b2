/*
 * span_cache.h: a worker's cache of gzip layers' spans on local disk,
 * shared by every image root it serves from layers' indexes
 * (image_fs.h), whichever sandbox or file system read them.
 *
 * A span is the compressed bytes between two access points of a layer's
 * index (layer_index.h), kept as fetched, one file a span, named by the
 * layer's digest and the span's number: `<hex>.<span>`; an eStargz
 * layer's (layer_estargz.h) are its chunks' gzip members, `<hex>.c<n>`.
 * Compressed, not inflated: the index holds each span's SHA-256, so a
 * span is checked against it every time it is read from here (a bad
 * disk, a write cut short, a stray byte: a miss, never wrong bytes),
 * which inflated bytes could not be without a hash of their own to
 * trust; and they take a third to a tenth of the disk. An eStargz chunk
 * is checked the way its reader checks it: inflated, its bytes against
 * the TOC's digest of them (tb_layer_index_check_span). Inflating it
 * again costs a reader a few milliseconds a span, where a fetch costs a
 * round trip.
 *
 * A span is written to a temporary name and renamed into place, so a
 * name holds a whole span or nothing; only bytes that match their hash
 * are put. The directory is root's (0700). The total stays under a bound
 * in bytes: putting a span evicts the least recently used ones. Spans
 * found on disk at open (a restarted worker's) are kept, oldest first in
 * line for eviction; temporary files left there are removed. Workers
 * sharing the directory share the spans, each keeping its own bound (one
 * evicting what another counts only costs the other a miss).
 * Thread-safe.
 *
 * Not the input block cache (block_cache.h): that one keeps fixed 1 MiB
 * blocks of a content at their offsets in one sparse file, checked
 * against a block list; spans vary in length, up to 128 MiB, and are
 * checked against an index.
 */
#ifndef TB_SPAN_CACHE_H
#define TB_SPAN_CACHE_H

#include "layer_index.h"
#include "tb/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tb_span_cache tb_span_cache_t;

/**
 * Opens the cache in @p dir (made if missing), holding at most
 * @p max_bytes. @return 0; TB_EIO; TB_ENOMEM
 */
int tb_span_cache_open(tb_span_cache_t **out, const char *dir, uint64_t max_bytes, tb_error_t *err);

/**
 * Span @p span of the layer @p ix indexes into @p buf (its length:
 * tb_layer_index_span()). @return 1 found, checked against the index and
 * marked used; 0 not there (or not its bytes: then dropped)
 */
int tb_span_cache_get(tb_span_cache_t *c, const tb_layer_index_t *ix, size_t span, void *buf);

/** Whether span @p span of @p ix is kept (not read, not checked). */
int tb_span_cache_has(tb_span_cache_t *c, const tb_layer_index_t *ix, size_t span);

/** Keeps span @p span of @p ix, @p data, if it matches its hash in the
 * index; best effort (a full disk only means a miss later). */
void tb_span_cache_put(tb_span_cache_t *c, const tb_layer_index_t *ix, size_t span,
		       const void *data);

/** Bytes held now. */
uint64_t tb_span_cache_bytes(tb_span_cache_t *c);

/** Closes the cache (the spans stay on disk). NULL is fine. */
void tb_span_cache_close(tb_span_cache_t *c);

#endif
