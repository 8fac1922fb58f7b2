/*
 * layer_index_store.h: where a gzip layer's index (layer_index.h) is kept
 * for the fleet, and how a worker with no copy of the layer finds it
 * (issue 49). The index's encoding goes to the store (tb/store.h) under
 *
 *   layer-indexes/<layer hex>/<index hex>
 *
 * (schemas/keys.md), and its digest is pinned per layer somewhere only
 * workers write: the pins, an interface the loop provides over the
 * ledger (a Redis ledger's `<prefix>:pin:{layer-index:<layer hex>}`),
 * since image/ knows nothing of the ledger. The store is not trusted:
 * producers may write it (uploads/), so what is read back from it is
 * decoded against the pinned digest (tb_layer_index_decode's pin), which
 * pins the whole encoding: the access points, the span hashes (which pin
 * each span's bytes to the layer) and the entry list (paths, modes,
 * owners, offsets). An object that is not that encoding (other bytes,
 * another layer's index, a truncated one) is refused with the reason,
 * and the layer is then pulled whole; so is a layer with no pin.
 *
 * The pin is set once per layer (the first worker's; every worker's
 * build of one layer gives the same bytes, as long as the encoding's
 * version and the span do not change) and lapses after
 * TB_LAYER_INDEX_PIN_TTL_MS: a pin naming an encoding this worker does
 * not read (a later one, or version 1, which had no times) makes the
 * layer pull whole until it lapses; a whole pull of a layer whose pinned object
 * is missing, or recorded with another SHA-256, builds it again and puts
 * it back (a forged object in its place is replaced).
 */
#ifndef TB_LAYER_INDEX_STORE_H
#define TB_LAYER_INDEX_STORE_H

#include "layer_index.h"
#include "tb/store.h"

#define TB_LAYER_INDEX_PIN_TTL_MS (30ull * 24 * 3600 * 1000) /* 30 days */

/* What only workers write: the index digest each layer is pinned by. */
typedef struct tb_layer_pins {
	/** The digest ("sha256:<hex>") pinned for @p layer into @p out.
	 * @return 0; TB_ENOTFOUND; TB_ERETRY or TB_EIO (unreachable) */
	int (*get)(void *arg, const char *layer, char out[72], tb_error_t *err);
	/** Pins @p digest for @p layer unless one is pinned already; the one
	 * pinned after the call into @p out. @return 0; TB_ERETRY; TB_EIO */
	int (*put)(void *arg, const char *layer, const char *digest, char out[72], tb_error_t *err);
	void *arg;
} tb_layer_pins_t;

/* Where indexes are published and found: both, or neither. */
typedef struct tb_layer_indexes {
	tb_store_t *store;    /* not owned */
	tb_layer_pins_t pins; /* its arg not owned */
} tb_layer_indexes_t;

/** The store's key of index @p digest of layer @p layer into @p out
 * (at least 160 bytes). */
void tb_layer_index_key(char *out, size_t cap, const char *layer, const char *digest);

/**
 * Puts @p ix's encoding in the store, then pins its digest for its layer
 * (unless another is pinned: then that one stands). An object with other
 * bytes at the key (a forgery) is replaced.
 * @param[out] digest the digest of this encoding (may be NULL)
 * @param[out] pinned the digest pinned after the call (may be NULL)
 * @return 0; TB_ETOOBIG (too big to publish); TB_EIO or TB_ERETRY (the
 *         store or the pins away); TB_ENOMEM
 */
int tb_layer_index_publish(const tb_layer_indexes_t *where, const tb_layer_index_t *ix,
			   char digest[72], char pinned[72], tb_error_t *err);

/**
 * Whether layer @p layer has an index the fleet can find: pinned, and the
 * store holds an object at its key recorded with the pinned SHA-256
 * (asked, not downloaded: a whole pull's cheap check).
 * @return 1 yes; 0 no (build and publish it); or a negative TB_E* with
 *         @p err set (the pins or the store away: leave it)
 */
int tb_layer_index_published(const tb_layer_indexes_t *where, const char *layer, tb_error_t *err);

/**
 * Finds layer @p layer's index: its pin, the object at its key, decoded
 * against the pin and the layer.
 * @return 0 and a new index in @p out (tb_layer_index_free); TB_ENOTFOUND
 *         when none is pinned; TB_EINVAL when the store's object is
 *         refused (missing, other bytes, another layer's, truncated, too
 *         big, a later version), naming why; TB_ERETRY or TB_EIO (the
 *         pins or the store away). On any failure the layer is pulled
 *         whole.
 */
int tb_layer_index_find(const tb_layer_indexes_t *where, const char *layer, tb_layer_index_t **out,
			tb_error_t *err);

/**
 * What a whole pull leads to for gzip layer @p layer, its verified blob
 * read from its start through @p read: unless it is published already
 * (tb_layer_index_published), its index built and published.
 * @return 1 built and published; 0 published already; a negative TB_E*
 *         naming why not (a layer the index cannot describe, the store or
 *         the pins away, what @p read returned)
 */
int tb_layer_index_at_pull(const tb_layer_indexes_t *where, const char *layer,
			   tb_layer_read_fn read, void *arg, tb_error_t *err);

/* The layers a cache pulled whole, indexed after the pull by a thread of
 * their own at a low priority (layer_index_queue.c). */
typedef struct tb_layer_index_queue tb_layer_index_queue_t;

/** A queue over the blobs in directory @p blobs (not owned), publishing
 * to @p where (copied; its store and pins must outlive the queue).
 * @return 0; TB_ENOMEM. */
int tb_layer_index_queue_open(tb_layer_index_queue_t **out, int blobs,
			      const tb_layer_indexes_t *where, tb_error_t *err);

/** Queues @p layer (its blob complete in the directory) unless queued;
 * starts the thread with the first. Never waits for the work. */
void tb_layer_index_queue_add(tb_layer_index_queue_t *q, const char *layer);

/** Waits until nothing is queued or being indexed; how many layers were
 * indexed and published so far, and the time it took them, into
 * @p built and @p ms (each may be NULL). For tests and benchmarks. */
void tb_layer_index_queue_wait(tb_layer_index_queue_t *q, uint64_t *built, uint64_t *ms);

/** Ends the thread (a build under way stops at its next read: nothing is
 * published) and frees @p q. NULL is fine. */
void tb_layer_index_queue_stop(tb_layer_index_queue_t *q);

#endif
