/*
 * unpack.h: one image layer applied onto a tree, as the OCI image spec
 * says (a tar stream, plain, gzip or zstd; `.wh.` whiteouts and opaque
 * directories), by a reader that assumes the layer is hostile:
 *
 *  - every name is made relative; an absolute name is taken from the
 *    tree's root, and a name with a ".." component is refused;
 *  - every parent directory is resolved inside the tree (openat2 with
 *    RESOLVE_IN_ROOT: a symbolic link in the tree, however it points,
 *    resolves within it), and the entry itself is made with O_NOFOLLOW /
 *    O_EXCL after whatever was there is removed: nothing is ever written
 *    through a link;
 *  - a hard link may only name an entry already in the tree;
 *  - device nodes and sockets are skipped (counted); extended attributes
 *    (file capabilities among them) are never applied; set-user-ID and
 *    set-group-ID bits are dropped;
 *  - ids at or past 65536 (which no sandbox maps) become 65534 (nobody);
 *  - the bytes written and the entries made are capped over the whole
 *    tree: a decompression bomb stops at the cap.
 *
 * The tree is the caller's own directory (a temporary one, renamed into
 * place only once every layer is applied: cache.c).
 */
#ifndef TB_UNPACK_H
#define TB_UNPACK_H

#include "tb/error.h"

#include <stdint.h>

typedef struct tb_unpack_limits {
	uint64_t max_bytes;   /* file contents written into the tree, at most */
	uint64_t max_entries; /* entries made, at most */
} tb_unpack_limits_t;

/* Counts over every layer applied to one tree (the caps apply to these). */
typedef struct tb_unpack_stats {
	uint64_t bytes;     /* file contents written */
	uint64_t entries;   /* entries made (files, directories, links) */
	uint64_t skipped;   /* device nodes and sockets left out */
	uint64_t removed;   /* entries whiteouts and opaque directories removed */
	uint64_t whiteouts; /* whiteout entries read (they count toward max_entries) */
} tb_unpack_stats_t;

/**
 * Applies the layer read from @p fd onto the tree whose root is @p rootfd.
 * @return 0; TB_EINVAL for a layer that is not a readable tar (naming the
 *         entry, or libarchive's reason) or that breaks a rule above;
 *         TB_ETOOBIG past a cap; TB_EIO when the tree cannot be written
 */
int tb_unpack_layer(int rootfd, int fd, const tb_unpack_limits_t *lim, tb_unpack_stats_t *st,
		    tb_error_t *err);

#endif
