/*
 * index.h: what `taskbox view` knows of the runs (docs/view.md): a
 * summary of each task seen on the tasks, events and DLQ topics, kept in
 * memory and answered as JSON. Not the events themselves: a task's
 * events are read again from its partition when its page asks
 * (history.h), between the first and last offsets kept here.
 *
 * Bounded: past max_tasks, the tenth of the tasks least recently active
 * is forgotten (the page says how many were). Every string a task
 * brought (its id, recipe, reason, labels) is kept as data, cut to a
 * bound, and leaves as a JSON string: rendering it is the page's, as
 * text. Thread-safe: the feed writes, the HTTP threads read.
 */
#ifndef TB_VIEW_INDEX_H
#define TB_VIEW_INDEX_H

#include "tb/error.h"
#include "tb/schema_dlq.h"
#include "tb/schema_event.h"
#include "tb/schema_task.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tb_view_index tb_view_index_t;

/** @return 0; TB_ENOMEM */
int tb_view_index_new(tb_view_index_t **out, size_t max_tasks, tb_error_t *err);
void tb_view_index_free(tb_view_index_t *x);

/** A task message, as produced at @p ts (ms since the epoch). */
void tb_view_index_task(tb_view_index_t *x, const tb_task_t *t, int64_t ts);

/** An event, read at @p offset of events partition @p partition. */
void tb_view_index_event(tb_view_index_t *x, const tb_event_t *ev, int32_t partition,
			 int64_t offset);

/** A DLQ record, at @p offset of DLQ partition @p partition: its task is
 * dead-lettered, with the record's reason; the latest MAX_DEAD records are
 * kept for the DLQ's page. */
void tb_view_index_dlq(tb_view_index_t *x, const tb_dlq_t *d, int32_t partition, int64_t offset);

/** The DLQ records kept, the latest first: [{"partition", "offset",
 * "task", "cause", "reason", "ts", "attempts"}]. */
json_t *tb_view_index_dead_letters(tb_view_index_t *x);

/** What a list asks for: every field optional (NULL, 0). */
typedef struct tb_view_query {
	const char *recipe;         /* a part of the recipe's URL */
	const char *runtime;        /* exactly */
	const char *status;         /* queued, running, retrying, dead-lettered, or an outcome */
	const char *q;              /* a part of the task id */
	int64_t since_ms, until_ms; /* last active within */
	size_t offset, limit;       /* the page: limit 0 means 50; at most 500 */
} tb_view_query_t;

/**
 * The tasks @p q selects, the most recently active first:
 * {"total", "offset", "tasks": [summary...], "recipes": [...], "runtimes":
 * [...], "forgotten"}. NULL without memory.
 */
json_t *tb_view_index_list(tb_view_index_t *x, const tb_view_query_t *q);

/** Where a task's events are: partition -1 when none was seen. */
typedef struct tb_view_span {
	int32_t partition;
	int64_t first, last;
} tb_view_span_t;

/**
 * Task @p id's summary with its attempts ({"attempts": [{"attempt",
 * "worker", "first_ts", "last_ts", "phase", "outcome", "reason",
 * "manifest_key"}]}), and where its events are in @p span (may be NULL).
 * NULL when the task is not known.
 */
json_t *tb_view_index_get(tb_view_index_t *x, const char *id, tb_view_span_t *span);

/** Results per minute over the last @p minutes (to @p now_ms):
 * [{"minute", "succeeded", "failed"}], oldest first. */
json_t *tb_view_index_rates(tb_view_index_t *x, int64_t now_ms, int minutes);

#endif
