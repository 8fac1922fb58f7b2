/*
 * turns.c: an interactive task's turns (turns.h): each prompt written to
 * the agent's input as its follow-up arrives, the sandbox frozen while
 * the session is idle, the session's end and its grace.
 */
#include "turns.h"

#include "tb/clock.h"
#include "tb/fault.h"
#include "tb/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* How long an agent has to exit after its session's end, before its
 * processes are killed (it then settles as it ended). */
#define TB_TURNS_ENDING_GRACE_MS 30000

/* Queues one protocol line for the agent's input. */
void tb_turns_queue(tb_turns_t *t, json_t *obj)
{
	char *line = obj ? json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	size_t n = line ? strlen(line) : 0;

	json_decref(obj);
	if (!line)
		abort(); /* out of memory */
	if (t->poff == t->plen)
		t->poff = t->plen = 0;
	char *more = realloc(t->pending, t->plen + n + 1);
	if (!more)
		abort();
	t->pending = more;
	memcpy(t->pending + t->plen, line, n);
	t->pending[t->plen + n] = '\n';
	t->plen += n + 1;
	free(line);
}

/* Writes what it can without blocking; closes the input after an end. */
void tb_turns_flush(tb_turns_t *t)
{
	while (t->wr >= 0 && t->poff < t->plen) {
		ssize_t n = send(t->wr, t->pending + t->poff, t->plen - t->poff,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0)
			t->poff += (size_t)n;
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		else { /* the agent closed its input: nothing more reaches it */
			t->poff = t->plen;
			break;
		}
	}
	if (t->wr >= 0 && t->close_after && t->poff == t->plen) {
		close(t->wr);
		t->wr = -1;
	}
}

void tb_turns_thaw(tb_run_t *r, tb_turns_t *t)
{
	tb_error_t err;

	if (t->frozen && tb_sandbox_freeze(r->sb, 0, &err) < 0)
		tb_warn(r->task->id, "thaw: %s", err.msg);
	t->frozen = 0;
}

static void end_session(tb_run_t *r, tb_turns_t *t, const char *why)
{
	tb_turns_thaw(r, t);
	tb_session_close(t->s, why);
	snprintf(r->ended_why, sizeof(r->ended_why), "%s", why);
	tb_turns_queue(t, json_pack("{s:s}", "type", "end"));
	t->close_after = 1;
	t->st = TB_TURN_ENDING;
	t->ending_since = tb_mono_ms();
}

/* The agent is ready for its next prompt: the next follow-up, the end,
 * or, with none yet, idle (frozen) until one comes. */
static void next_turn(tb_run_t *r, tb_turns_t *t)
{
	tb_error_t err;
	uint64_t seq;
	char *text;
	int kind;

	if (!tb_session_take(t->s, &kind, &text, &seq)) {
		if (t->st == TB_TURN_IDLE)
			return;
		t->st = TB_TURN_IDLE;
		t->idle_since = tb_mono_ms();
		tb_run_emit_json(
		    r, TB_EV_TURN,
		    json_pack("{s:s,s:I}", "state", "idle", "turn", (json_int_t)r->turn));
		if (tb_sandbox_freeze(r->sb, 1, &err) == 0)
			t->frozen = 1;
		else /* no freezer here: idle, but not free */
			tb_info(r->task->id, "idle without freezing: %s", err.msg);
		return;
	}
	tb_turns_thaw(r, t);
	if (kind == TB_FOLLOWUP_END) {
		end_session(r, t, "ended by its producer");
		return;
	}
	r->turn++;
	tb_run_emit_json(r, TB_EV_MESSAGE, json_pack("{s:s,s:s}", "role", "user", "text", text));
	tb_run_emit_json(r, TB_EV_TURN,
			 json_pack("{s:s,s:I,s:I}", "state", "turn-started", "turn",
				   (json_int_t)r->turn, "followup", (json_int_t)seq));
	tb_turns_queue(t, json_pack("{s:s,s:I,s:s}", "type", "prompt", "turn", (json_int_t)r->turn,
				    "text", text));
	free(text);
	t->st = TB_TURN_RUNNING;
	tb_fault_point("turn-started");
}

/* After the agent's output was read: turn ends, follow-ups, idle time. */
void tb_turns_drive(tb_run_t *r, tb_turns_t *t, int followup_ready)
{
	if (r->turn_ended) {
		r->turn_ended = 0;
		if (t->st == TB_TURN_RUNNING)
			next_turn(r, t);
	}
	if (t->st == TB_TURN_IDLE && followup_ready) {
		next_turn(r, t);
	} else if (t->st == TB_TURN_IDLE && tb_mono_ms() - t->idle_since >= t->idle_ms) {
		char why[96];
		snprintf(why, sizeof(why), "idle for %llu s",
			 (unsigned long long)(t->idle_ms / 1000));
		end_session(r, t, why);
	} else if (t->st == TB_TURN_ENDING && !t->killed &&
		   tb_mono_ms() - t->ending_since >= TB_TURNS_ENDING_GRACE_MS) {
		tb_warn(r->task->id, "the agent did not exit %d s after its session's end: killed",
			TB_TURNS_ENDING_GRACE_MS / 1000);
		tb_sandbox_kill_all(r->sb, NULL);
		t->killed = 1;
	}
	tb_turns_flush(t);
}
