/*
 * schema_event.h: one event of a task (schemas/event.md), on the events
 * topic keyed by task id. (task_id, attempt, seq) identifies it, so a
 * replayed attempt never collides with an earlier one. The payload is a
 * map whose shape depends on the type; it is kept as canonical MessagePack.
 */
#ifndef TB_SCHEMA_EVENT_H
#define TB_SCHEMA_EVENT_H

#include "tb/codec.h"

typedef enum tb_event_type {
	TB_EV_PHASE = 0, /* lifecycle phase reached, with its duration */
	TB_EV_MESSAGE,   /* a conversation message (role, text) */
	TB_EV_TOOL_CALL,
	TB_EV_TOOL_RESULT,
	TB_EV_THOUGHT,
	TB_EV_ARTIFACT, /* a file saved to the store */
	TB_EV_VERDICT,  /* a judge's verdict (summary) */
	TB_EV_ERROR,    /* something went wrong, with its reason */
	TB_EV_EGRESS,   /* one request through the egress proxy */
	TB_EV_TURN,     /* interactive: turn started / ended / idle */
	TB_EV_RESULT,   /* the task's final outcome */
	TB_EV_USAGE,    /* what the attempt used so far, while its agent runs */
	TB_EV__COUNT
} tb_event_type_t;

/* A task's phases, in order: the one list of them (event.md's `phase`
 * payload, the metrics' phase label, the worker's liveness record). */
typedef enum tb_phase {
	TB_PHASE_RECEIVED = 0,
	TB_PHASE_VALIDATED,
	TB_PHASE_CLAIMED,
	TB_PHASE_PREPARED,
	TB_PHASE_RUNNING,
	TB_PHASE_SETTLED,
	TB_PHASE_COLLECTED,
	TB_PHASE_JUDGED,
	TB_PHASE_RECORDED,
	TB_PHASE_TORN_DOWN,
	TB_PHASE_ACKNOWLEDGED,
	TB_PHASE__COUNT
} tb_phase_t;

/* Who wrote an event's payload. The worker stamps it outside the payload,
 * where an agent cannot reach: a `user` message the agent made up says
 * "agent", the prompt the worker recorded says "worker". */
typedef enum tb_event_source {
	TB_SOURCE_WORKER = 0, /* phases, prompts, artifacts, verdicts, errors, egress, results */
	TB_SOURCE_AGENT,      /* what the agent wrote: message, tool-call, tool-result, thought */
} tb_event_source_t;

typedef struct tb_event {
	uint32_t has;
	char *task_id;
	uint64_t attempt; /* 1-based */
	uint64_t seq;     /* 0-based, per (task, attempt), no gaps */
	uint64_t ts;      /* ms since the Unix epoch */
	int type;         /* tb_event_type_t */
	int source;       /* tb_event_source_t; optional (TB_EVENT_F_SOURCE) */
	tb_bytes_t payload;
} tb_event_t;

#define TB_EVENT_F_SOURCE 5 /* field index of `source`, for TB_HAS */

#define TB_EVENT_PAYLOAD_MAX (256u << 10)
#define TB_EVENT_MAX_BYTES (TB_EVENT_PAYLOAD_MAX + 1024)

extern const tb_schema_t tb_schema_event;

/** The wire name of a phase ("torn-down"), or NULL if out of range. */
const char *tb_phase_name(int phase);

/** The wire name of an event source ("agent"), or NULL if out of range. */
const char *tb_event_source_name(int source);

/** The wire name of an event type ("tool-call"), or NULL if out of range. */
const char *tb_event_type_name(int type);

#endif
