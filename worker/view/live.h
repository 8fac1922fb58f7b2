/*
 * live.h: events as they arrive, for the pages watching a task
 * (server-sent events). The feed publishes each event of a task to the
 * subscribers of that task; each subscriber holds at most LIVE_BUFFER
 * bytes not yet sent, and one that falls further behind is told so and
 * ended (its page reloads), so a slow browser costs the server a bounded
 * buffer, never the feed's time. Thread-safe.
 */
#ifndef TB_VIEW_LIVE_H
#define TB_VIEW_LIVE_H

#include <stddef.h>
#include <sys/types.h>

typedef struct tb_view_live tb_view_live_t;
typedef struct tb_view_sub tb_view_sub_t;

/** A hub for at most @p max_subs subscribers at once; NULL without memory. */
tb_view_live_t *tb_view_live_new(size_t max_subs);

/** Ends every subscriber's stream: their reads return -1 at once. */
void tb_view_live_close(tb_view_live_t *h);

/** Frees the hub once every subscriber left (closing it first). */
void tb_view_live_free(tb_view_live_t *h);

/** Whether any page watches task @p id now (the feed skips making the
 * JSON of an event nobody watches). */
int tb_view_live_watching(tb_view_live_t *h, const char *id);

/** One event of task @p id, as a line of JSON (@p len bytes, no newline). */
void tb_view_live_publish(tb_view_live_t *h, const char *id, const char *json, size_t len);

/** A subscriber to task @p id's events; NULL when the hub is full. */
tb_view_sub_t *tb_view_live_subscribe(tb_view_live_t *h, const char *id);

/**
 * Up to @p cap bytes of the stream (`data: JSON` blocks, a comment every
 * @p wait_ms of silence to keep the connection), waiting at most
 * @p wait_ms. @return bytes; -1 once it ended (fell behind: the last
 * bytes said so; or the hub closes)
 */
ssize_t tb_view_live_read(tb_view_sub_t *s, char *buf, size_t cap, int wait_ms);

void tb_view_live_unsubscribe(tb_view_sub_t *s);

#endif
