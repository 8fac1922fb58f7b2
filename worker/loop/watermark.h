/*
 * watermark.h: which offset of a partition may be committed.
 *
 * Tasks of one partition finish out of order; the worker may commit only
 * up to the lowest offset that is not finished yet (invariant 1, "ack
 * after teardown"): committing offset N tells Kafka every message below N
 * is done. Offsets arrive in increasing order but not always contiguous
 * (compaction, transaction markers), so the watermark is the first
 * unfinished offset itself, or one past the last offset when everything
 * seen is finished. This file is pure bookkeeping: no Kafka, no locks
 * (one partition belongs to one consumer thread).
 */
#ifndef TB_WATERMARK_H
#define TB_WATERMARK_H

#include "tb/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tb_watermark tb_watermark_t;

/** @param[out] out released with tb_watermark_free(). */
int tb_watermark_new(tb_watermark_t **out, tb_error_t *err);

void tb_watermark_free(tb_watermark_t *w);

/**
 * Records that the message at @p offset was received and is in flight.
 * @return 0; TB_EINVAL if @p offset is not above every offset seen
 */
int tb_watermark_start(tb_watermark_t *w, int64_t offset, tb_error_t *err);

/**
 * Records that the message at @p offset is finished (recorded and torn
 * down, or dead-lettered). @return 0; TB_ENOTFOUND if it is not in flight
 */
int tb_watermark_finish(tb_watermark_t *w, int64_t offset, tb_error_t *err);

/**
 * The offset to commit (Kafka's "next offset to read"), or -1 when it has
 * not moved since the last call. Commit what this returns, then the
 * entries below it are forgotten.
 */
int64_t tb_watermark_commit(tb_watermark_t *w);

/**
 * Makes the next tb_watermark_commit() return the mark even if it has not
 * moved: commits are asynchronous and one may have failed (the broker
 * away), so the worker sends the mark again now and then.
 */
void tb_watermark_resend(tb_watermark_t *w);

/** Messages received and not finished. */
size_t tb_watermark_in_flight(const tb_watermark_t *w);

#endif
