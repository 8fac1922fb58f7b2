/*
 * layer_testlib.h: what the layer index tests check alike, whatever made
 * the index (a gzip layer's zran index, an eStargz or a zstd:chunked
 * layer's TOC): its
 * entries are the tar's as libarchive reads the blob, and each file's
 * bytes read through the index equal the tar's.
 */
#ifndef TB_LAYER_TESTLIB_H
#define TB_LAYER_TESTLIB_H

#include "layer_index.h"

#include <stddef.h>
#include <stdint.h>

#define LAYER_CHECK_TIMES 1 /* the modification times too, to the nanosecond */

/**
 * Every entry of gzip or zstd tar @p blob (@p n bytes) as libarchive reads it,
 * against @p ix in order: the same path, type, link target, mode, owner
 * and size (and time, with LAYER_CHECK_TIMES in @p how), and a file's
 * data equal to what tb_layer_index_read gives through @p fetch / @p arg.
 * Fails the test at the first difference.
 * @return the entries seen (all of the index's)
 */
size_t layer_check_against_tar(const uint8_t *blob, size_t n, const tb_layer_index_t *ix, int how,
			       tb_layer_fetch_fn fetch, void *arg);

#endif
