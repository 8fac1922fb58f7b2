/*
 * image.h: a task's environment, an OCI image named by digest, made ready
 * on the worker: its manifest for this platform, config and layers
 * fetched (layout.c, registry.c) and each checked against its digest
 * (blob.h), its layers unpacked in order into one tree (unpack.h), all
 * kept in a cache under the worker's cache_dir, content-addressed:
 *
 *   <cache_dir>/images/blobs/<hex>         verified blobs, shared by images
 *   <cache_dir>/images/trees/<hex>/        an image's root, by its manifest
 *   <cache_dir>/images/trees/<hex>.json    ... complete once this exists
 *   <cache_dir>/images/locks/<hex>         flock: shared while in use,
 *                                          exclusive while evicted
 *   <cache_dir>/images/locks/<hex>.build   flock: while it is made
 *   <cache_dir>/images/tmp/                what is being made (flock'd)
 *
 * Workers on one host may share the cache: everything is taken under
 * those locks, made under a temporary name and renamed into place when
 * complete, so a crash leaves only temporary entries, which the next
 * open removes. The cache stays under a size in bytes by removing the
 * least recently used images no sandbox holds, then the blobs none of
 * the remaining images names. The directories are the worker's alone
 * (mode 0700): an image's files keep their owners and modes, and no
 * host user may reach them.
 *
 * The cache is shared by every runtime on the host; the right to an
 * image is not. An image is served from the cache only after the source
 * the asker names, with the asker's own credentials, let it have that
 * digest: by serving the reference's manifest (or index) in this call,
 * or, when the cache had it, by answering a HEAD on
 * /v2/<repository>/manifests/<digest> with 200 (the same Basic login or
 * Bearer token a pull would use). A layout is asked to hold that
 * manifest itself, with the digest's bytes. A registry's yes is
 * remembered in memory for 60 s, per (hash of the asker's credentials
 * for that registry, or none; registry; repository; digest), up to 512
 * of them: a login revoked at the registry still serves a cached image
 * for up to that long. A cache hit proves no more than that: the blobs
 * under the manifest are the cache's, checked against their digests
 * when they were fetched (by whichever asker fetched them), not fetched
 * again.
 */
#ifndef TB_IMAGE_H
#define TB_IMAGE_H

#include "layer_index_store.h"
#include "oci.h"
#include "read_order.h"
#include "source.h"
#include "tb/codec.h"
#include "tb/image_ref.h"
#include "unpack.h"

#include <stdatomic.h>

typedef struct tb_image_cache tb_image_cache_t;

typedef struct tb_image {
	char tree[4096];             /* the image's root on the host: mount it, never write */
	char digest[72];             /* its manifest's, for this platform */
	tb_strlist_t layers;         /* their digests, bottom first */
	tb_oci_config_t config;      /* Env, WorkingDir, User */
	uint64_t bytes;              /* its files, unpacked (declared sizes, holes included) */
	tb_unpack_altered_t altered; /* what its layers had that its tree does not
				      * keep as it was (from its record, cached or not) */
	int cached;                  /* 1: it was ready; 0: made now */
	uint64_t fetched;            /* bytes fetched now (0 when cached) */
	uint64_t ms;                 /* how long it took to make ready */
	int lock;                    /* held shared while in use */
} tb_image_t;

/**
 * Opens (making it) the cache under @p cache_dir, to be kept under
 * @p max_bytes, and removes what a crash left half made.
 * @return 0; TB_EIO naming the directory
 */
int tb_image_cache_open(tb_image_cache_t **out, const char *cache_dir, uint64_t max_bytes,
			tb_error_t *err);

void tb_image_cache_close(tb_image_cache_t *c);

/** A registry that sends under one byte a second for @p seconds is given
 * up on (the config's image_stall_seconds; 30 until set). */
void tb_image_cache_set_stall(tb_image_cache_t *c, unsigned seconds);

/** Ends every registry transfer under way, within about a second, and
 * every later one at once: tb_image_get() then fails with TB_ERETRY ("the
 * worker stops"), not tried again, wherever it would ask a registry (an
 * image from a layout, or one whose authorization is remembered, is still
 * served).
 * For a worker that stops: a stalled pull must not hold its drain. Safe
 * from any thread; for good (the cache is closed next). NULL is a no-op. */
void tb_image_cache_interrupt(tb_image_cache_t *c);

/** How long a registry's yes to one asker for one image is remembered
 * (60000 until set; 0: asked on every cache hit). */
void tb_image_cache_set_authorization_ms(tb_image_cache_t *c, uint64_t ms);

/**
 * Where the layers' indexes are published and found (layer_index_store.h;
 * NULL, or no store: nowhere, the default). Set once, before the cache is
 * used. After each image made from a whole pull, its gzip layers are
 * queued, and a thread of the cache's, at a low priority, builds each
 * one's index from the verified blob and publishes it, unless the fleet
 * has it already (a layer that cannot be indexed is said in the log):
 * the pull itself does not wait for it.
 * @return 0; TB_ENOMEM
 */
int tb_image_cache_set_indexes(tb_image_cache_t *c, const tb_layer_indexes_t *where,
			       tb_error_t *err);

/** Waits until the layers queued are indexed (or given up on); how many
 * were indexed and published since the indexes were set, and the time it
 * took them, into @p built and @p ms (each may be NULL). For tests and
 * benchmarks. */
void tb_image_cache_index_wait(tb_image_cache_t *c, uint64_t *built, uint64_t *ms);

/**
 * Layer @p layer's index, for a worker with no copy of the layer
 * (tb_layer_index_find): found by its pin, checked against it.
 * @return 0 and a new index in @p out; TB_ENOTFOUND (none published, or
 *         no store set); TB_EINVAL refused (the reason in @p err and in
 *         the log); TB_ERETRY or TB_EIO. On any failure: pull it whole.
 */
int tb_image_cache_find_index(tb_image_cache_t *c, const char *layer, tb_layer_index_t **out,
			      tb_error_t *err);

/* An image's files and entries at most, whoever unpacks or serves it. */
#define TB_IMAGE_MAX_ENTRIES 1000000
/* An image's layers' TOCs (eStargz, zstd:chunked) together, JSON bytes at
 * most, when it is read on demand (two TOCs of a layer's most); past it,
 * or past TB_IMAGE_MAX_ENTRIES listed by its layers' TOCs and indexes
 * together, the image is pulled whole (tb_image_lazy_open). */
#define TB_IMAGE_TOC_BYTES_MAX (64ull << 20)

/** The budget tb_image_lazy_open() gives an image's layers together:
 * @p toc_bytes of TOC JSON and @p entries listed (0: the default,
 * TB_IMAGE_TOC_BYTES_MAX and TB_IMAGE_MAX_ENTRIES). Set before the cache
 * is used; lowered by tests, to try it with small images. */
void tb_image_cache_set_lazy_budget(tb_image_cache_t *c, uint64_t toc_bytes, uint64_t entries);

/**
 * Makes @p ref ready (fetched, verified, unpacked; or found in the cache,
 * once its source let this asker have it: see above) and holds it until
 * tb_image_release(): it is not evicted meanwhile.
 * Its files may take @p max_unpacked bytes at most; a registry's login
 * is looked up in @p credentials (a docker config.json; NULL: none).
 * Layers are fetched in parallel, each blob at most once at a time on the
 * host (another slot or worker fetching it is waited for), a failed
 * fetch tried again twice after a pause. @return 0; TB_EPOISON when the
 * image itself is wrong (no such digest, a bad or hostile layer, too big,
 * no manifest for this platform) or its registry refuses this asker's
 * login (cached or not, in the same words) naming why; TB_ERETRY when its
 * source is away, stalls, or sends a blob that does not match its digest
 * (the transfer's fault, as far as the worker can tell: blob.h); TB_EIO
 * when the cache cannot be written.
 */
int tb_image_get(tb_image_cache_t *c, const tb_image_ref_t *ref, uint64_t max_unpacked,
		 const char *credentials, tb_image_t *out, tb_error_t *err);

/* An image to be read on demand (issue 49): what tb_image_lazy_open()
 * found without pulling it. */
typedef struct tb_image_lazy {
	tb_image_ref_t ref;      /* as asked */
	char digest[72];         /* its manifest's, for this platform */
	tb_strlist_t layers;     /* their digests, bottom first */
	tb_oci_config_t config;  /* Env, WorkingDir, User */
	tb_layer_index_t **ix;   /* each layer's: opened from its eStargz TOC
				     * (checked against the manifest's
				     * annotation), or decoded against its pin */
	tb_source_blob_t *blobs; /* each layer on the source: the argument of
				     * tb_image_source_fetch, for ranged reads */
	tb_image_source_t *src;  /* kept open for those reads */
	uint64_t fetched;        /* bytes fetched to resolve it */
	uint64_t ms;             /* how long it took */
	tb_read_order_t *order;  /* the order a first run read its spans in,
				  * fitted to its indexes: to prefetch in
				  * (read_order.h); NULL: none to trust */
	int order_state;         /* tb_image_order_state_t */
	atomic_int cancel;       /* once set, the blobs' reads end (their
				  * cancel): its root is stopped
				  * (tb_image_fs_conf_t's cancel) */
} tb_image_lazy_t;

/* What tb_image_lazy_open() found of the image's read order, and so what
 * tb_image_cache_record_order() does with this run's. */
typedef enum tb_image_order_state {
	TB_IMAGE_ORDER_AWAY = 0, /* not asked (no store), the store away, or a
				  * later worker's: left alone */
	TB_IMAGE_ORDER_FOUND,    /* found and fitted: prefetched in */
	TB_IMAGE_ORDER_NONE,     /* none recorded: this run's is */
	TB_IMAGE_ORDER_REFUSED,  /* refused: this run's replaces it */
	TB_IMAGE_ORDER_UNFIT,    /* sound, but over other indexes than this
				  * host's: not used here, left alone */
} tb_image_order_state_t;

/**
 * Resolves @p ref without pulling its layers: its manifest (through its
 * index) fetched into the cache and checked against its digest, its
 * source's yes for this asker as for tb_image_get(), its config fetched
 * and checked, and each layer described without its bytes: by its TOC
 * when the manifest annotates one (eStargz: two ranges, the footer and
 * the TOC, checked against the annotation, layer_estargz.h;
 * zstd:chunked: one range, layer_zstd_chunked.h, with libzstd), else, for
 * a gzip layer, by its index found by its pin
 * (tb_image_cache_find_index). One image may have layers of each kind.
 * The order a first run read it in (read_order.h) is looked for where the
 * indexes are, a small object: one that is refused is said in the log
 * and only means no prefetch.
 * @param[out] out with 0: a new tb_image_lazy_t (tb_image_lazy_free),
 *             whose source and indexes serve the root (worker/lazy)
 * @return 0; 1 when it should be pulled whole (tb_image_get) instead,
 *         with the reason in @p err's message: the cache has it already
 *         (the eager root costs nothing more), a layer is not
 *         compressed, or one has neither a TOC nor an index that can be
 *         trusted (no TOC annotated, or not that one; a zstd layer's
 *         without libzstd; no index pinned, refused,
 *         the store or the pins away); TB_EPOISON, TB_ERETRY or TB_EIO
 *         as tb_image_get() says them for the manifest and the config.
 */
int tb_image_lazy_open(tb_image_cache_t *c, const tb_image_ref_t *ref, const char *credentials,
		       tb_image_lazy_t **out, tb_error_t *err);

/**
 * Pulls @p ref whole (tb_image_get, with these @p credentials and cap),
 * later, by a thread of the cache's at a low priority, one image at a
 * time, so that the next task on this host finds it cached: what a task
 * read on demand leaves behind it. Never waits: an image queued or being
 * pulled is not queued again, and past 16 waiting none is (its next task
 * queues it again). A failure is said in the log; a pull under way ends
 * when the cache is interrupted or closed.
 */
void tb_image_cache_pull_later(tb_image_cache_t *c, const tb_image_ref_t *ref,
			       const char *credentials, uint64_t max_unpacked);

/**
 * What a run of @p l read on demand leaves for the next: the spans its
 * readers first read, @p spans (@p n of them, in that order), recorded as
 * its image's read order where the indexes are, when none was found at
 * its start (or the one found was refused: it is replaced). Once per
 * image and fleet, as a rule: a run that finds one records nothing. A
 * failure is said in the log (counted), never the task's.
 */
void tb_image_cache_record_order(tb_image_cache_t *c, const tb_image_lazy_t *l,
				 const tb_read_span_t *spans, size_t n);

/** Waits until no image is queued or being pulled later. For tests. */
void tb_image_cache_pull_wait(tb_image_cache_t *c);

/** Frees @p l, its indexes, and closes its source: only once nothing
 * reads through it. NULL is a no-op. */
void tb_image_lazy_free(tb_image_lazy_t *l);

/** Removes the least recently used images no one holds, then the blobs
 * no remaining image names, until the cache is under its size (done at
 * open and by tb_image_get() when it made an image; a hit adds nothing).
 * Skipped while an image is being made. */
void tb_image_cache_trim(tb_image_cache_t *c);

/** What the cache held at its last trim (at open, and after each image
 * made): complete images, and the bytes of their files and of every
 * blob; its bound into @p max. Cheap: for the worker's heartbeat. */
void tb_image_cache_usage(tb_image_cache_t *c, uint64_t *images, uint64_t *bytes, uint64_t *max);

/** Lets go of an image from tb_image_get() (and frees what it holds). */
void tb_image_release(tb_image_t *img);

#endif
