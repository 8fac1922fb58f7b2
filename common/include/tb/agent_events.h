/*
 * agent_events.h: the worker's side of the agent protocol's output
 * (schemas/agent.md): bytes read from an agent's fd 3 become lines
 * (bounded), lines become event types and payloads (validated), and a
 * token bucket paces them. Nothing here does I/O or knows the task: the
 * lifecycle reads the fd, stamps events and publishes them.
 */
#ifndef TB_AGENT_EVENTS_H
#define TB_AGENT_EVENTS_H

#include "tb/codec.h"
#include "tb/error.h"

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------- lines */

typedef struct tb_linebuf {
	char *buf;
	size_t len, cap, max;
	int discarding; /* inside a line already reported as too long */
} tb_linebuf_t;

/** Called for each complete line (without '\n'); @p too_long set, and
 * @p line NULL, for a line over the cap (reported once, then skipped). */
typedef void (*tb_line_fn)(void *ud, const char *line, size_t len, int too_long);

void tb_linebuf_init(tb_linebuf_t *lb, size_t max);
void tb_linebuf_free(tb_linebuf_t *lb);

/** Feeds @p n bytes; calls @p fn per line. Memory stays under @p max.
 * @return 0, or TB_ENOMEM */
int tb_linebuf_feed(tb_linebuf_t *lb, const char *data, size_t n, tb_line_fn fn, void *ud);

/* ------------------------------------------------------------ events */

/**
 * Turns one agent line into an event type (tb_event_type_t) and payload.
 * @param[out] payload canonical MessagePack map, malloc'd; the caller
 *             frees payload->data
 * @return 0; TB_EINVAL with a reason fit for an error event ("line 7: ...")
 */
int tb_agent_parse_line(int *type, tb_bytes_t *payload, const char *line, size_t len,
			tb_error_t *err);

/** The payload of an error event: {"code": ..., "reason": ...}. */
int tb_agent_error_payload(tb_bytes_t *out, int code, const char *reason);

/* ------------------------------------------------------------- pacing */

typedef struct tb_rate {
	double per_second, tokens, burst;
	uint64_t last_ms;
} tb_rate_t;

/** Allows @p per_second events on average, bursts of up to one second. */
void tb_rate_init(tb_rate_t *r, uint64_t per_second, uint64_t now_ms);

/** Takes one token: 0 if an event may go now, else the ms to wait. */
uint64_t tb_rate_take(tb_rate_t *r, uint64_t now_ms);

#endif
