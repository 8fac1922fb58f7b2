/*
 * block_cache.h: a worker's cache of input blocks on local disk, shared by
 * its slots and tasks (inputs read on demand: lazy_fs.h).
 *
 * A block is kept in a file named by its SHA-256 (tb/blocks.h), so the
 * same content is one entry whatever object, task or slot read it, and a
 * name never changes meaning. Only blocks already checked against their
 * digest are put here, written whole to a temporary name of the process's
 * own and renamed, so an entry is never partial, and each is checked
 * against its name again when read (a millisecond a MiB), so a bad disk
 * or a stray file is a miss, never wrong bytes. The directory is root's
 * (0700). The total stays under a bound in bytes: putting a block evicts
 * the least recently used ones. Entries found on disk at open (a
 * restarted worker's) are kept, oldest first in line for eviction.
 * Workers sharing cache_dir share the files, each keeping its own bound
 * (one evicting what another counts only costs the other a miss).
 * Thread-safe.
 */
#ifndef TB_BLOCK_CACHE_H
#define TB_BLOCK_CACHE_H

#include "tb/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tb_block_cache tb_block_cache_t;

/**
 * Opens the cache in @p dir (made if missing), holding at most
 * @p max_bytes. @return 0; TB_EIO; TB_ENOMEM
 */
int tb_block_cache_open(tb_block_cache_t **out, const char *dir, uint64_t max_bytes,
			tb_error_t *err);

/**
 * Block @p sha (32 bytes), @p len bytes long, into @p buf.
 * @return 1 found (and marked used), 0 not there (or unreadable: then
 *         dropped)
 */
int tb_block_cache_get(tb_block_cache_t *c, const uint8_t sha[32], void *buf, size_t len);

/** Whether block @p sha is kept (not marked used). */
int tb_block_cache_has(tb_block_cache_t *c, const uint8_t sha[32]);

/** Keeps @p len bytes of block @p sha, checked by the caller; best
 * effort (a full disk only means a miss later). */
void tb_block_cache_put(tb_block_cache_t *c, const uint8_t sha[32], const void *data, size_t len);

/** Bytes held now. */
uint64_t tb_block_cache_bytes(tb_block_cache_t *c);

void tb_block_cache_close(tb_block_cache_t *c);

#endif
