/*
 * cache_int.h: the image cache's own parts (image.h), for its files
 * only: the images pulled whole in the background (cache_later.c); what
 * describes a layer read on demand (lazy_layer.c); the read orders of
 * images read on demand (cache_order.c).
 */
#ifndef TB_IMAGE_CACHE_INT_H
#define TB_IMAGE_CACHE_INT_H

#include "image.h"

typedef struct tb_image_later tb_image_later_t;

/** A queue of images to pull whole into @p c (not owned), by a thread
 * started with the first. @return 0; TB_ENOMEM. */
int tb_image_later_open(tb_image_later_t **out, tb_image_cache_t *c, tb_error_t *err);

/** Queues @p ref unless it is queued or being pulled, or the queue is
 * full; never waits. */
void tb_image_later_add(tb_image_later_t *q, const tb_image_ref_t *ref, const char *credentials,
			uint64_t max_unpacked);

/** Waits until nothing is queued or being pulled. */
void tb_image_later_wait(tb_image_later_t *q);

/** Ends the thread (a pull under way ends as the cache's interruption
 * makes it: the caller interrupts first) and frees @p q. NULL is fine. */
void tb_image_later_stop(tb_image_later_t *q);

/**
 * What describes layer @p d (a gzip or zstd layer of a manifest read by
 * its digest) to be read on demand through @p blob: its TOC when @p d
 * has one annotated (eStargz, zstd:chunked) and the TOC is that one,
 * else for a gzip layer the index the fleet pinned for it
 * (tb_image_cache_find_index). The bytes fetched to open a TOC are added
 * to @p fetched; the TOC is parsed within what @p budget (the image's)
 * has left, and takes its bytes from it.
 * @return 0 and a new index in @p out (tb_layer_index_free); 1 when it is
 *         to be pulled whole, the reason (the TOC's and the index's) in
 *         @p err; TB_ENOMEM
 */
int tb_image_lazy_layer(tb_image_cache_t *c, const tb_oci_desc_t *d, tb_source_blob_t *blob,
			tb_toc_budget_t *budget, tb_layer_index_t **out, uint64_t *fetched,
			tb_error_t *err);
/** Where the indexes are published (tb_image_cache_set_indexes), and so
 * the read orders: NULL, nowhere. */
tb_store_t *tb_image_cache_store(tb_image_cache_t *c);

/** Image @p l's read order (cache_order.c), found where the indexes are,
 * into l->order and l->order_state; a refusal said in the log. */
void tb_image_lazy_find_order(tb_image_cache_t *c, tb_image_lazy_t *l);

#endif
