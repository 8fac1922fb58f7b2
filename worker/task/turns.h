/*
 * turns.h: an interactive agent's turns (agent.c drives them).
 */
#ifndef TB_TURNS_H
#define TB_TURNS_H

#include "run_int.h"

/*
 * An interactive task's side of the agent: the prompts go to its input one
 * turn at a time, as the session's follow-ups arrive (session.h); between
 * turns the sandbox is frozen and the session idle; an `end`, the idle
 * timeout or the deadline ends it. The input is a socket, not a pipe: an
 * agent that closed it must not SIGPIPE the worker.
 */
typedef struct tb_turns {
	tb_session_t *s;
	int wr;        /* the agent's input; -1 once closed */
	char *pending; /* what is not written yet */
	size_t plen, poff;
	int close_after; /* close the input once pending is written */
	enum { TB_TURN_RUNNING, TB_TURN_IDLE, TB_TURN_ENDING } st;
	int frozen;
	uint64_t idle_since, idle_ms; /* monotonic ms */
	uint64_t ending_since;        /* the end sent: the agent has TB_TURNS_ENDING_GRACE_MS */
	int killed;
} tb_turns_t;

/** Queues one protocol line (@p obj, taken) for the agent's input. */
void tb_turns_queue(tb_turns_t *t, json_t *obj);
/** Writes what it can of the queue without blocking. */
void tb_turns_flush(tb_turns_t *t);
/** Thaws the sandbox if an idle turn froze it. */
void tb_turns_thaw(tb_run_t *r, tb_turns_t *t);
/** After the agent's output was read: turn ends, follow-ups (@p
 * followup_ready: the session has one), idle time, the end's grace. */
void tb_turns_drive(tb_run_t *r, tb_turns_t *t, int followup_ready);

#endif
