/*
 * image_tree.h: an image's root as a tree in memory, built from its
 * layers' indexes (layer_index.h) without reading a byte of their data:
 * the tree tb_unpack_layer() would make of the same layers, entry for
 * entry (unpack_rules.c decides what each becomes, for both: whiteouts
 * and opaque directories across layers, hard links, set-ID bits
 * cleared, devices and sockets dropped, ids past the map made nobody,
 * the caps on declared bytes and entries, times as unpack.h gives them:
 * a node's entry's, a directory's from the last layer naming it), with
 * each regular file's
 * data where its layer's tar stream holds it. Parents resolve as
 * unpack.c's do (RESOLVE_IN_ROOT: a link in the tree is followed within
 * it, 40 at most), so a layer that writes through a link lands where
 * the unpacked tree has it.
 *
 * What the index is trusted for: the tree's shape and attributes, and
 * where each file's data lies in the tar stream, on the strength of the
 * index's pinned digest (layer_index.h); the data itself is checked
 * span by span against the layer when read (image_fs.h). What can be
 * caught of an index that lies is: entries whose data would overlap the
 * next entry's header or run past the stream (refused here, and by the
 * decoder), and a file's data that is not preceded by a tar header
 * (image_fs.c checks it when the file is first read). An index naming a
 * file's data at another file's is not caught: pin only indexes built
 * by a worker from the verified blob.
 *
 * An eStargz layer's index (layer_estargz.h) is taken alike, its
 * "stream" the files' contents one after another with no tar header
 * between them: what is refused there is a file's data running into the
 * next file's or past the stream; the header check does not apply (its
 * TOC is pinned by the manifest, and each chunk is checked against the
 * TOC's digest of it when read).
 *
 * Memory is bounded: names, link targets and nodes count toward
 * max_memory, and the build stops past it, saying so (the image is
 * then pulled whole). Built once, then read-only: safe to read from
 * any thread.
 */
#ifndef TB_IMAGE_TREE_H
#define TB_IMAGE_TREE_H

#include "layer_index.h"
#include "unpack.h"

#include <stddef.h>
#include <stdint.h>

#define TB_IMAGE_TREE_ROOT 1 /* the root's node number */
#define TB_IMAGE_TREE_MEMORY_DEFAULT (256u << 20)

typedef struct tb_image_kid {
	char *name;
	uint32_t ino;
} tb_image_kid_t;

typedef struct tb_image_node {
	uint32_t mode; /* S_IF* | permission bits, as unpacked */
	uint32_t uid, gid;
	uint32_t nlink;       /* 0: removed (not in the tree) */
	uint32_t parent;      /* a directory's */
	uint32_t layer;       /* a file's: the layer holding its data */
	uint32_t made;        /* building: 1 + the layer that made it last */
	uint64_t size;        /* a file's declared size; a link's target's length */
	uint64_t offset;      /* a file's data: its offset in its layer's tar stream */
	int64_t mtime;        /* modification time, seconds ... */
	uint32_t mtime_ns;    /* ... and nanoseconds: the entry's (0 for a
			       * directory no layer names, and the root) */
	char *link;           /* a symbolic link's target */
	tb_image_kid_t *kids; /* a directory's entries, sorted by name */
	uint32_t nkids, cap;
} tb_image_node_t;

typedef struct tb_image_tree tb_image_tree_t;

/**
 * Builds the tree of layers @p ix[0] (the lowest) .. @p ix[n - 1].
 * @param lim the caps tb_unpack_layer() applies (sandbox.images)
 * @param max_memory the tree's own bytes, at most (0: the default)
 * @param[out] st what the tree holds and what was dropped or changed, as
 *             tb_unpack_layer() counts it; may be NULL
 * @return 0 and a new tree (tb_image_tree_free); TB_EINVAL for a layer
 *         that breaks a rule (naming the layer and the entry) or an index
 *         whose entries overlap; TB_ETOOBIG past a cap; TB_ENOMEM
 */
int tb_image_tree_build(tb_image_tree_t **out, const tb_layer_index_t *const *ix, size_t n,
			const tb_unpack_limits_t *lim, uint64_t max_memory, tb_unpack_stats_t *st,
			tb_error_t *err);

/** Node @p ino, or NULL when there is none in the tree. */
const tb_image_node_t *tb_image_tree_node(const tb_image_tree_t *t, uint64_t ino);

/** The entry @p name of directory @p dir: its node number, or 0. */
uint32_t tb_image_tree_lookup(const tb_image_tree_t *t, uint64_t dir, const char *name);

/** The number past the last node's (nodes are 1 .. that - 1). */
uint32_t tb_image_tree_end(const tb_image_tree_t *t);

/** The bytes the tree takes in memory. */
uint64_t tb_image_tree_memory(const tb_image_tree_t *t);

/** Frees @p t (NULL is fine). */
void tb_image_tree_free(tb_image_tree_t *t);

#endif
