/*
 * unpack.h: one image layer applied onto a tree, as the OCI image spec
 * says (a tar stream, plain, gzip or zstd; `.wh.` whiteouts and opaque
 * directories), by a reader that assumes the layer is hostile:
 *
 *  - every name is made relative; an absolute name is taken from the
 *    tree's root, and a name with a ".." component, or of 4096 bytes or
 *    more, is refused; so is a symbolic link's target of 4096 bytes or
 *    more (PATH_MAX), or an empty one;
 *  - every parent directory is resolved inside the tree (openat2 with
 *    RESOLVE_IN_ROOT: a symbolic link in the tree, however it points,
 *    resolves within it), and the entry itself is made with O_NOFOLLOW /
 *    O_EXCL after whatever was there is removed: nothing is ever written
 *    through a link;
 *  - a hard link may only name an entry already in the tree;
 *  - device nodes and sockets are skipped; extended attributes (file
 *    capabilities among them) are never applied; set-user-ID and
 *    set-group-ID bits are dropped;
 *  - ids at or past 65536, or negative (which no sandbox maps), become
 *    65534 (nobody);
 *  - what is dropped or changed is counted, with the first entry of each
 *    kind (tb_unpack_altered_t), for the image's record and the task's
 *    manifest to say;
 *  - each regular file's declared size (a sparse file's holes included)
 *    counts toward max_bytes before anything of it is written, data past
 *    it is refused, and the entries made (whiteouts too) count toward
 *    max_entries, over the whole tree: a decompression bomb or a sparse
 *    file stops at the cap, naming the file.
 *
 * The tree is the caller's own directory (a temporary one, renamed into
 * place only once every layer is applied: cache.c), root's (0755, 0:0);
 * a directory a layer's entry needs and the layers do not name is made
 * 0755 and root's; a FIFO is made 0600 and root's, whatever the layer
 * says.
 *
 * Times: a file, a symbolic link and a FIFO are given their entry's
 * modification time (seconds and nanoseconds, a pax `mtime` record's
 * fraction kept) as their access and modification times. A directory's
 * change as entries are made in it, so each directory a layer names or
 * changes gets its times once the whole layer is placed: a directory
 * the layer names, its entry's (the last naming's); one no layer names,
 * 0 (the epoch); one a lower layer gave, the times it had before this
 * layer. The tree's root keeps its own. A hard link is its target's
 * inode, with its target's times.
 *
 * What each entry becomes is decided in one place, unpack_rules.c
 * (tb_unpack_path, tb_unpack_decide, tb_unpack_count_dir), from the
 * entry as the layer names it (tb_layer_entry_t): tb_unpack_layer()
 * applies the decisions to a directory, image_tree.h to a tree in
 * memory (an image's root read on demand), so both are the same tree.
 */
#ifndef TB_UNPACK_H
#define TB_UNPACK_H

#include "layer_index.h"
#include "tb/error.h"

#include <stdint.h>

#define TB_UNPACK_NAME_MAX 4096  /* a name or a link's target: shorter than this */
#define TB_UNPACK_ROOT_MODE 0755 /* the tree's root, root's */
#define TB_UNPACK_DIR_MODE 0755  /* a directory no layer names, root's */
#define TB_UNPACK_FIFO_MODE 0600 /* a FIFO, root's */
#define TB_UNPACK_NOBODY 65534   /* an id no sandbox maps becomes this */

typedef struct tb_unpack_limits {
	uint64_t max_bytes;   /* regular files' declared sizes, summed, at most */
	uint64_t max_entries; /* entries made and whiteouts read, at most */
} tb_unpack_limits_t;

/* What the layers had that the tree does not keep as it was: counts, and
 * the first entry of each kind as the layer named it (printable ASCII,
 * anything else a '?'; at most 255 bytes; "" when none). */
typedef struct tb_unpack_altered {
	uint64_t devices; /* device nodes and sockets left out */
	uint64_t setid;   /* set-user-ID or set-group-ID bits dropped */
	uint64_t ids;     /* an owner or group no sandbox maps, made nobody */
	char device_path[256], setid_path[256], ids_path[256];
} tb_unpack_altered_t;

/* Counts over every layer applied to one tree (the caps apply to these). */
typedef struct tb_unpack_stats {
	uint64_t bytes;     /* regular files' declared sizes (holes included) */
	uint64_t entries;   /* entries made (files, directories, links) */
	uint64_t removed;   /* entries whiteouts and opaque directories removed */
	uint64_t whiteouts; /* whiteout entries read (they count toward max_entries) */
	tb_unpack_altered_t altered;
} tb_unpack_stats_t;

/* What one entry of a layer does to the tree. */
typedef enum tb_unpack_do {
	TB_UNPACK_SKIP,     /* nothing: an aufs whiteout (.wh..wh..plnk) */
	TB_UNPACK_DROP,     /* a device node or socket, left out (counted) */
	TB_UNPACK_WHITEOUT, /* what is at name in parent removed, if anything */
	TB_UNPACK_OPAQUE,   /* parent made opaque: what lower layers put
			     * under it removed, this layer's entries kept */
	TB_UNPACK_MAKE,     /* name made in parent, what was there removed
			     * (a directory there is kept, its attributes set) */
} tb_unpack_do_t;

typedef struct tb_unpack_plan {
	char rel[TB_UNPACK_NAME_MAX];    /* the entry's path, cleaned: "a/b" */
	char parent[TB_UNPACK_NAME_MAX]; /* its directory ("" the root),
					  * resolved in the tree (links in it
					  * followed, within the tree) */
	const char *name;                /* its last component, in rel */
	tb_unpack_do_t what;             /* set by tb_unpack_decide() */
	/* TB_UNPACK_MAKE: */
	uint8_t type;                    /* FILE, DIR, SYMLINK, HARDLINK, FIFO */
	uint32_t mode;                   /* permission bits as made (no set-ID) */
	uint32_t uid, gid;               /* as made: nobody past the map */
	uint64_t size;                   /* a file's declared size */
	int64_t mtime;                   /* its modification time, as the
					  * layer gives it: seconds ... */
	uint32_t mtime_ns;               /* ... and nanoseconds */
	const char *link;                /* a symbolic link's target, as given */
	char target[TB_UNPACK_NAME_MAX]; /* a hard link's: an entry already in
					  * the tree (not a directory), cleaned;
					  * its parent resolved, its last
					  * component not followed */
} tb_unpack_plan_t;

/**
 * Where entry @p path goes: cleaned (absolute made relative) into
 * @p p->rel, split into p->parent and p->name.
 * @return 0; 1 for the tree's root itself (nothing to place: its mode is
 *         the tree's); TB_EINVAL for a ".." component or a name too long
 */
int tb_unpack_path(tb_unpack_plan_t *p, const char *path, tb_error_t *err);

/**
 * What entry @p e (placed by tb_unpack_path() into @p p, its parent
 * already there) does: p->what and, to make it, its type, mode, ids,
 * size, link and time; counted into @p st (what is dropped or changed noted).
 * @return 0; TB_EINVAL for what breaks a rule above (naming the entry);
 *         TB_ETOOBIG past a cap
 */
int tb_unpack_decide(tb_unpack_plan_t *p, const tb_layer_entry_t *e, const tb_unpack_limits_t *lim,
		     tb_unpack_stats_t *st, tb_error_t *err);

/** A directory an entry needs that the tree lacks, made (TB_UNPACK_DIR_MODE,
 * root's): counted. @return 0; TB_ETOOBIG past max_entries */
int tb_unpack_count_dir(const tb_unpack_limits_t *lim, tb_unpack_stats_t *st, tb_error_t *err);

/**
 * Applies the layer read from @p fd onto the tree whose root is @p rootfd.
 * @return 0; TB_EINVAL for a layer that is not a readable tar (naming the
 *         entry, or libarchive's reason) or that breaks a rule above;
 *         TB_ETOOBIG past a cap (naming the entry); TB_EIO when the tree
 *         cannot be written
 */
int tb_unpack_layer(int rootfd, int fd, const tb_unpack_limits_t *lim, tb_unpack_stats_t *st,
		    tb_error_t *err);

#endif
