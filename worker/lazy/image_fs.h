/*
 * image_fs.h: an image's root read on demand (issue 49). A read-only
 * FUSE file system of the tree the eager unpack would make of an image's
 * layers (image_tree.h: the same paths, types, modes, ids, sizes, link
 * targets and contents), built at start from the layers' indexes
 * (layer_index.h) without fetching a byte of the layers; a file's bytes
 * are fetched when read, a span of its layer at a time, through the
 * caller's fetch callback (a ranged GET from the registry or the store),
 * each span checked against its SHA-256 in the index before a byte of
 * it is inflated (tb_layer_index_read), and kept in the worker's span
 * cache (span_cache.h) for every later read, of any file system.
 *
 * A layer is described either by its gzip index (layer_index.h: spans
 * of the tar stream, each checked against its SHA-256 before it is
 * inflated) or by its eStargz TOC (layer_estargz.h: a span per chunk of
 * a file, each inflated from its gzip member and checked against the
 * TOC's digest of it before a byte of it is copied); one image may have
 * layers of both kinds.
 *
 * What is trusted: each gzip index, as decoded against its pinned
 * digest; each eStargz TOC, as checked against its manifest's
 * annotation; see image_tree.h for what either is trusted for and what
 * of one that lies is caught. A span or chunk that does not match its
 * hash is never served: the read fails with EIO, other files still read,
 * and the first such failure is kept for the task (tb_image_fs_error),
 * naming the layer and the span (or the chunk and its file). Times are the index's (unpack.h says which): a node's
 * entry's modification time, with its nanoseconds, shown as its access,
 * modification and change time; a directory no layer names, and the
 * root, show 0.
 *
 * Made and served as lazy_fs.h's is (fuse_serve.h): a detached mount
 * (read-only, nosuid, nodev) handed over as a mount fd, served by
 * max_threads threads of its own. allow_other and default_permissions:
 * the kernel checks each access against the tree's modes and ids, as it
 * would the unpacked tree's. A FUSE mount is idmapped only when its
 * server opts in (libfuse 3.17 and Linux 6.12 on): until then a file
 * system made for one sandbox shows its ids in that sandbox's range of
 * host ids (id_base), so that its uid 1000 owns what the image gave
 * 1000. Spans are inflated into slots of memory, each
 * the size of the layers' largest span, taken when first used: as many
 * as max_memory holds (64 at most), and never fewer than max_threads + 2
 * (a file system whose slots would then pass max_memory is refused at
 * start). A reader walking the tree by name goes back and forth between
 * spans (the layer has its files in its own order): with 6 slots, every
 * file of a 40 MB layer took 5.2 s to read, with 30 1.3 to 1.9 s. Readers
 * of one span wait for its one fetch. After 2 s without a read (a
 * sandbox that has started reads little more) the slots' memory is given
 * back (a thread of its own does it).
 *
 * With a cache, a reader going through a layer in order (come twice in a
 * row to the span after the one before: a reader of every file, the
 * layer written in the order the tree is walked) has the next two spans
 * fetched into the cache and inflated into slots by two threads of the
 * file system's while it reads its own, where it would wait for each
 * fetch and inflate in turn; a reader of scattered files reads nothing
 * ahead.
 *
 * With prefetch_threads, the spans no one has read yet are fetched into
 * the cache in the background, compressed (each checked by the cache
 * before it is kept; one that fails is left for a reader to meet and
 * report), at most that many at a time: every span in the layers' order,
 * or, given an order (read_order.h: what a first run of the image read,
 * in its order), only the spans it lists, in its order. Readers come
 * first: the prefetchers run at the lowest priority (nice 19) and start
 * no fetch while a reader's is under way or waited for. A span is fetched
 * by one at a time, reader or prefetcher: a second asking waits for it,
 * then reads it from the cache. Stopping waits for the fetches under way.
 *
 * Whatever the prefetchers do, the spans readers need are noted in the
 * order they are first needed (tb_image_fs_read_order): the order a
 * later start of the image prefetches in.
 */
#ifndef TB_IMAGE_FS_H
#define TB_IMAGE_FS_H

#include "image_tree.h"
#include "layer_index.h"
#include "read_order.h"
#include "span_cache.h"
#include "unpack.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define TB_IMAGE_FS_MEMORY_DEFAULT (128u << 20)
#define TB_IMAGE_FS_PREFETCH_MAX 8

/* A layer, as tb_image_fs_start() takes it (the array is copied). */
typedef struct tb_image_fs_layer {
	const tb_layer_index_t *ix; /* decoded against its pinned digest,
				     * or opened from its eStargz TOC (checked
				     * against its manifest's annotation);
				     * must outlive the file system */
	tb_layer_fetch_fn fetch;    /* ranges of the layer's blob; called
				     * from several threads at once */
	void *arg;
	const char *label; /* what messages call it; NULL: its digest */
} tb_image_fs_layer_t;

typedef struct tb_image_fs_conf {
	const tb_image_fs_layer_t *layers; /* the lowest first */
	size_t nlayers;
	tb_span_cache_t *cache;      /* may be NULL: every span fetched */
	tb_unpack_limits_t limits;   /* the eager unpack's caps */
	uint64_t max_tree_memory;    /* the tree's (0: image_tree.h's default) */
	uint64_t max_memory;         /* spans inflated in memory (0: the default) */
	unsigned max_threads;        /* 0: 4 */
	uint32_t id_base;            /* every owner and group shown past this:
				    * the sandbox's range of host ids, for a
				    * mount that cannot be idmapped (a FUSE
				    * server opts in to that only from libfuse
				    * 3.17); 0: as the tree has them */
	unsigned prefetch_threads;   /* with a cache: threads fetching every
				    * span not cached yet into it, in the
				    * layers' order, while the tree is served
				    * (0: none; at most PREFETCH_MAX) */
	const tb_read_span_t *order; /* with prefetch_threads: only these spans
				      * fetched ahead, in this order (copied;
				      * one outside the layers, or named
				      * twice, is skipped: it is a hint); NULL:
				      * every span */
	size_t norder;
	atomic_int *cancel; /* set by tb_image_fs_stop() before it waits for
			     * a fetch under way: the layers' fetches are
			     * to end once it is (tb_source_blob_t's
			     * cancel), so a slow registry does not hold
			     * the stop; NULL: such a fetch is waited for */
} tb_image_fs_conf_t;

typedef struct tb_image_fs tb_image_fs_t;

/**
 * Builds the tree and starts serving it.
 * @param[out] mount_fd the detached mount (O_CLOEXEC), the caller's to
 *             move into place and close
 * @return 0; TB_EINVAL (a layer or an index the tree refuses: the image
 *         is then pulled whole); TB_ETOOBIG (past a cap, or spans too
 *         large for max_memory); TB_EIO (no FUSE here); TB_ENOMEM
 */
int tb_image_fs_start(tb_image_fs_t **out, const tb_image_fs_conf_t *conf, int *mount_fd,
		      tb_error_t *err);

/** Compressed bytes of layer @p layer fetched so far (cache hits are not
 * fetched): what a bench counts before an agent's first instruction. */
uint64_t tb_image_fs_fetched(tb_image_fs_t *fs, size_t layer);

/** Bytes of memory the slots hold now (given back after 2 s without a
 * read). */
uint64_t tb_image_fs_memory(tb_image_fs_t *fs);

/** Whether the prefetchers have gone through every span they were to
 * fetch (each kept in the cache, or left for a reader when its fetch
 * failed or its bytes did not match); 0 without prefetchers. */
int tb_image_fs_prefetched(tb_image_fs_t *fs);

/** Compressed bytes the prefetchers fetched (not the readers). */
uint64_t tb_image_fs_prefetched_bytes(tb_image_fs_t *fs);

/**
 * The spans readers have needed so far, each once, in the order first
 * needed (the first TB_READ_ORDER_SPANS_MAX of them): a new array into
 * @p out (the caller frees it; NULL when none), their count into @p n.
 * @return 0; TB_ENOMEM
 */
int tb_image_fs_read_order(tb_image_fs_t *fs, tb_read_span_t **out, size_t *n);

/** What the tree left out or changed, as the eager unpack counts it (the
 * manifest's environment.altered). */
const tb_unpack_stats_t *tb_image_fs_stats(const tb_image_fs_t *fs);

/**
 * What reads met, into @p out ("" if nothing): the first span that did
 * not match its hash (or a file whose data the index misplaced), before
 * any failure of a fetch's.
 * @return 0; TB_EPOISON (the layer's or the index's: it will stay so);
 *         the fetch's error (it may pass)
 */
int tb_image_fs_error(tb_image_fs_t *fs, char *out, size_t cap);

/** Stops serving and frees the file system: sets conf.cancel, so a span
 * fetch under way ends, and waits for its threads. NULL is a no-op. */
void tb_image_fs_stop(tb_image_fs_t *fs);

#endif
