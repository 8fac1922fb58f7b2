/*
 * block_cache.h: a worker's cache of input blocks on local disk, shared by
 * its slots and tasks (inputs read on demand: lazy_fs.h).
 *
 * The blocks of one content are kept in one sparse file named by its
 * blocks digest (tb/blocks.h), each at its own offset in the content:
 * `<digest>.blocks`. So the same content is one file whatever object, task
 * or slot read it, a name never changes meaning, and keeping a block is a
 * write into a file already there, not a file made and renamed (on ext4
 * that costs four times the write itself: a sequential read of a cold
 * input went at half the speed of a download). A block is evicted by
 * punching its hole; a file left with none is removed. Only blocks already
 * checked against their digest are put here, and each is checked against
 * its digest again when read (a millisecond a MiB), so a write cut short,
 * a bad disk or a stray byte is a miss, never wrong bytes. The directory
 * is root's (0700). The total stays under a bound in bytes: putting a
 * block evicts the least recently used ones. Blocks found on disk at open
 * (a restarted worker's) are kept, oldest first in line for eviction; any
 * other file there is removed. Workers sharing cache_dir share the files,
 * each keeping its own bound (one evicting what another counts only costs
 * the other a miss). Thread-safe.
 */
#ifndef TB_BLOCK_CACHE_H
#define TB_BLOCK_CACHE_H

#include "tb/blocks.h"
#include "tb/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tb_block_cache tb_block_cache_t;

/** Blocks put from memory aligned to this are written around the page
 * cache (aligned_alloc(TB_BLOCK_ALIGN, ...)). */
#define TB_BLOCK_ALIGN 4096

/**
 * Opens the cache in @p dir (made if missing), holding at most
 * @p max_bytes. @return 0; TB_EIO; TB_ENOMEM
 */
int tb_block_cache_open(tb_block_cache_t **out, const char *dir, uint64_t max_bytes,
			tb_error_t *err);

/**
 * Block @p index of the content @p b describes into @p buf (its length:
 * tb_blocks_len()). @return 1 found, checked and marked used; 0 not there
 * (or not its bytes: then dropped)
 */
int tb_block_cache_get(tb_block_cache_t *c, const tb_blocks_t *b, size_t index, void *buf);

/** Whether block @p index of the content @p b describes is kept (not
 * marked used, not read). */
int tb_block_cache_has(tb_block_cache_t *c, const tb_blocks_t *b, size_t index);

/** Keeps block @p index of the content @p b describes, @p data, checked
 * by the caller; best effort (a full disk only means a miss later). */
void tb_block_cache_put(tb_block_cache_t *c, const tb_blocks_t *b, size_t index, const void *data);

/** Bytes held now. */
uint64_t tb_block_cache_bytes(tb_block_cache_t *c);

void tb_block_cache_close(tb_block_cache_t *c);

#endif
