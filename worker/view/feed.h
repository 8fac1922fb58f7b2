/*
 * feed.h: the topics `taskbox view` reads, on a thread of its own: the
 * tasks, events and DLQ topics from a point in time on, every partition,
 * no consumer group joined (it commits nothing and takes no worker's
 * partitions). Each message goes into the index (index.h); each event is
 * published to the task's live subscribers (live.h). A message that does
 * not decode is skipped and counted. A DLQ or tasks topic that does not
 * exist yet is left out: the events topic is the one it needs.
 */
#ifndef TB_VIEW_FEED_H
#define TB_VIEW_FEED_H

#include "index.h"
#include "live.h"

#include "tb/config.h"
#include "tb/error.h"

#include <stdint.h>

typedef struct tb_view_feed tb_view_feed_t;

/** Starts reading from @p since_ms (ms since the epoch, or
 * TB_FOLLOW_BEGINNING). @return 0; TB_EIO (Kafka: why in @p err) */
int tb_view_feed_start(tb_view_feed_t **out, const tb_config_t *cfg, int64_t since_ms,
		       tb_view_index_t *index, tb_view_live_t *live, tb_error_t *err);

/** {"caught_up" (every partition read to the end it had at start),
 * "messages", "skipped"} */
void tb_view_feed_state(tb_view_feed_t *f, int *caught_up, uint64_t *messages, uint64_t *skipped);

void tb_view_feed_stop(tb_view_feed_t *f);

#endif
