/*
 * blocks.h: an object's block digests, so that a range of it can be
 * checked without the whole (inputs read on demand; schemas/keys.md,
 * "Block digests").
 *
 * An object of n bytes is cut into blocks of TB_BLOCK_SIZE (the last
 * may be shorter; an empty object has none), and its block list is the
 * SHA-256 of each block, 32 bytes each, concatenated, in order. The list
 * is stored beside the content at blocks/<sha256 of the content>, and
 * the SHA-256 of the list itself (its "blocks digest") names it: a
 * reference that carries it vouches for every block.
 */
#ifndef TB_BLOCKS_H
#define TB_BLOCKS_H

#include "tb/error.h"

#include <stddef.h>
#include <stdint.h>

#define TB_BLOCK_SIZE (1u << 20)
#define TB_BLOCKS_PREFIX "blocks/"

typedef struct tb_blocks {
	uint64_t size;   /* the object's bytes */
	size_t n;        /* blocks: ceil(size / TB_BLOCK_SIZE) */
	uint8_t *sha;    /* n × 32 bytes; malloc'd */
	char digest[65]; /* the SHA-256 of sha[0 .. 32n), lowercase hex */
} tb_blocks_t;

/** Blocks of an object of @p size bytes. */
static inline size_t tb_blocks_count(uint64_t size)
{
	return (size_t)((size + TB_BLOCK_SIZE - 1) / TB_BLOCK_SIZE);
}

/** The length of block @p index (< b->n) of the object @p b describes:
 * TB_BLOCK_SIZE, but for the last. */
static inline size_t tb_blocks_len(const tb_blocks_t *b, size_t index)
{
	uint64_t at = (uint64_t)index * TB_BLOCK_SIZE;
	return b->size - at < TB_BLOCK_SIZE ? (size_t)(b->size - at) : TB_BLOCK_SIZE;
}

/**
 * Reads @p fd from offset 0 to its end once, for its block list and (if
 * @p sha256 is not NULL) the SHA-256 of the whole, in lowercase hex.
 * @return 0; TB_EIO (@p name in the message); TB_ENOMEM
 */
int tb_blocks_of_fd(int fd, const char *name, tb_blocks_t *out, char sha256[65], tb_error_t *err);

/**
 * A stored block list, @p len bytes, for an object of @p size bytes; with
 * @p digest (hex, or NULL), its SHA-256 must be that.
 * @return 0; TB_EINVAL (the length does not fit the size, or the digest
 *         differs); TB_ENOMEM
 */
int tb_blocks_parse(const void *data, size_t len, uint64_t size, const char *digest,
		    tb_blocks_t *out, tb_error_t *err);

/**
 * Whether @p len bytes at @p data are block @p index, whole (the last
 * block's length is what remains of the object). @return 0; TB_EIO
 * (another length, or another digest: @p err says which block)
 */
int tb_blocks_check(const tb_blocks_t *b, size_t index, const void *data, size_t len,
		    tb_error_t *err);

void tb_blocks_free(tb_blocks_t *b);

#endif
