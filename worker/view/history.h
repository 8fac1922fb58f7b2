/*
 * history.h: one task's events, read again from its partition of the
 * events topic for its page: from the first offset the index saw of it to
 * the partition's end as it is when asked, the task's own (by key) kept,
 * each (attempt, seq) once, in the order written.
 */
#ifndef TB_VIEW_HISTORY_H
#define TB_VIEW_HISTORY_H

#include "index.h"

#include "tb/config.h"
#include "tb/error.h"

#include <jansson.h>

/** Reads tasks' events again, one reading at a time: each reading's
 * consumer costs megabytes and threads while it lives, so twenty pages
 * opened at once cost one. */
typedef struct tb_view_reader tb_view_reader_t;

/** NULL without memory. */
tb_view_reader_t *tb_view_reader_new(const tb_config_t *cfg);
void tb_view_reader_free(tb_view_reader_t *r);

/**
 * Task @p id's events in @p span (index.h), of attempt @p attempt (0:
 * every attempt), at most @p max of them (the first ones): a JSON array,
 * or NULL with why in @p err (TB_EIO: Kafka; TB_ETIMEOUT: not read in
 * 20 s).
 */
json_t *tb_view_history(tb_view_reader_t *r, const char *id, const tb_view_span_t *span,
			uint64_t attempt, size_t max, tb_error_t *err);

#endif
