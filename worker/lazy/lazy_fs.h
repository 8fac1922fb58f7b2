/*
 * lazy_fs.h: inputs read on demand. A read-only FUSE file system of a
 * task's lazy inputs, served by the worker: each file shows its real size
 * at once, and its bytes are fetched from the store as they are read, a
 * block (1 MiB, tb/blocks.h) at a time with ranged GETs, each block
 * checked against the input's block list before a byte of it is served,
 * and kept in the worker's block cache (block_cache.h) for every later
 * read, of any task.
 *
 * The file system is made by the worker (root: it opens /dev/fuse) as a
 * detached mount (fsopen, fsmount: read-only, nosuid, nodev, noexec),
 * handed over as a mount file descriptor for the sandbox to move into its
 * own mount namespace (move_mount): it is mounted nowhere on the host, so
 * a worker that dies leaves no mount behind, and it goes with the last
 * namespace holding it. It is the files named and nothing else: one
 * directory, no links, no writes. allow_other and default_permissions:
 * every process of the sandbox may read (modes 0444 and 0555), the
 * kernel checks it.
 *
 * Served by max_threads threads of its own (not libfuse's loop: ours
 * poll the device and a stop event, so stopping never waits on the
 * sandbox), never the worker's main loop. Blocks are read into slots of
 * memory (max_threads + 2, and 64 more with a cache), shared by the
 * threads and taken as first used (with a cache, given back after 2 to
 * 4 s without a read): the kernel asks in pieces (a block at a time: the
 * mount's read-ahead is raised to 1 MiB), and readers of one block wait
 * for its one fetch. A reader going through a file in order has the next
 * 64 blocks fetched ahead (two more threads, 32 MiB a GET, straight into
 * the slots); a thread of its own (the keeper) writes fetched blocks into
 * the cache, so a fetch does not wait for the disk (unless 64 blocks are
 * waiting to be written: then it writes its own). So a sandbox reading
 * in any pattern, as fast as it likes, costs the worker at most that many
 * MiB, those threads (max_threads + 3) and store connections; its other
 * reads wait in the kernel. A block
 * that fails its check is never
 * served: the read fails with EIO, and the first such failure is kept
 * for the task to report (tb_lazy_fs_error).
 */
#ifndef TB_LAZY_FS_H
#define TB_LAZY_FS_H

#include "block_cache.h"

#include "tb/blocks.h"
#include "tb/store.h"

typedef struct tb_lazy_file {
	const char *name;          /* its name in the directory: one component */
	const char *key;           /* the store's key of its content */
	const tb_blocks_t *blocks; /* its size and block list, checked; must
				    * outlive the file system */
	const char *label;         /* what messages call it; NULL: its name */
} tb_lazy_file_t;

typedef struct tb_lazy_fs_conf {
	tb_store_t *store;       /* thread-safe, as every store is */
	tb_block_cache_t *cache; /* may be NULL: every block fetched */
	const tb_lazy_file_t *files;
	size_t nfiles;
	unsigned max_threads; /* 0: 4 */
} tb_lazy_fs_conf_t;

typedef struct tb_lazy_fs tb_lazy_fs_t;

/**
 * Makes the file system and starts serving it.
 * @param[out] mount_fd the detached mount (O_CLOEXEC), the caller's to
 *             move into place and close
 * @return 0; TB_EINVAL (a bad name, two files of one name); TB_EIO (no
 *         FUSE here: /dev/fuse, the kernel's fuse, privileges); TB_ENOMEM
 */
int tb_lazy_fs_start(tb_lazy_fs_t **out, const tb_lazy_fs_conf_t *conf, int *mount_fd,
		     tb_error_t *err);

/** Bytes of file @p i fetched from the store so far (cache hits are not
 * fetched). */
uint64_t tb_lazy_fs_fetched(tb_lazy_fs_t *fs, size_t i);

/**
 * What reads met, into @p out ("" if nothing): a block that is not the
 * content named, or an object gone, before any failure of the store's.
 * @return 0; TB_EPOISON (the content's: it will stay so); the store's
 *         error (it may pass)
 */
int tb_lazy_fs_error(tb_lazy_fs_t *fs, char *out, size_t cap);

/**
 * Stops serving and frees the file system. Reads still waiting fail. The
 * mount itself goes when the last holder lets go (the caller's mount_fd,
 * the sandbox's namespace). NULL is a no-op.
 */
void tb_lazy_fs_stop(tb_lazy_fs_t *fs);

#endif
