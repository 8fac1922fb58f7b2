/*
 * mpack_scan.h: a structural check of MessagePack bytes before msgpack-c
 * unpacks them.
 *
 * msgpack-c allocates room for a container's declared element count before
 * reading the elements, so five hostile bytes (an array32 header claiming
 * four billion items) would make it ask for ~100 GB. This scanner walks the
 * bytes without allocating and refuses any container that claims more
 * elements than bytes remain, nesting deeper than a limit, truncation, and
 * trailing bytes. After it passes, unpacking allocates at most a small
 * multiple of the input size. It owns no memory.
 */
#ifndef TB_MPACK_SCAN_H
#define TB_MPACK_SCAN_H

#include "tb/error.h"

#include <stddef.h>
#include <stdint.h>

#define TB_MPACK_MAX_DEPTH 16

/**
 * Checks that @p data holds exactly one well-formed MessagePack value.
 * @param data the bytes; may be NULL only when @p len is 0
 * @param len their number
 * @param max_depth deepest nesting of maps and arrays allowed (top is 1)
 * @param err filled on failure with the offset and what is wrong
 * @return 0, or TB_EINVAL
 */
int tb_mpack_scan(const uint8_t *data, size_t len, unsigned max_depth, tb_error_t *err);

#endif
