/*
 * session.h: the inbox of one interactive task's session, between the
 * worker's main thread (which reads follow-ups from the tasks topic and
 * puts them here) and the slot running the attempt (which takes them, one
 * per turn). It keeps every follow-up it accepted, with its offset, for as
 * long as the task's message is in flight: an attempt that fails is
 * followed by another that replays the session from the first prompt
 * (tb_session_rewind), and the follow-ups' offsets are finished with the
 * task's own when the session's attempt is recorded.
 *
 * Follow-ups are numbered 1, 2, 3 ... by their producer. One that repeats
 * a number already accepted is a duplicate (a producer's retry, or a
 * replay): ignored. One that skips a number is refused: prompts are
 * never reordered or lost silently. After an `end`, or once the session
 * has ended (idle timeout, deadline, the agent exited), it takes nothing.
 */
#ifndef TB_SESSION_H
#define TB_SESSION_H

#include "tb/error.h"
#include "tb/schema_followup.h"

#include <stddef.h>
#include <stdint.h>

#define TB_SESSION_MAX_FOLLOWUPS 1000
#define TB_SESSION_MAX_BYTES (64u << 20) /* prompt text held, at most */

typedef struct tb_session tb_session_t;

typedef enum tb_session_put {
	TB_SESSION_QUEUED,    /* held: its offset finishes with the task's */
	TB_SESSION_DUPLICATE, /* seq already accepted: acknowledge it now */
	TB_SESSION_REFUSED,   /* out of order, too many, or the session ended:
			       * the reason is in @p why; DLQ it */
} tb_session_put_t;

/** @param[out] out released with tb_session_free() */
int tb_session_new(tb_session_t **out, tb_error_t *err);

void tb_session_free(tb_session_t *s);

/** Main thread: offers @p f (copied), which arrived at @p offset as the
 * bytes @p raw (copied too: a follow-up the session never takes is
 * dead-lettered with them). @p raw may be NULL. */
tb_session_put_t tb_session_put(tb_session_t *s, const tb_followup_t *f, int64_t offset,
				const void *raw, size_t raw_len, char *why, size_t why_len);

/** The follow-ups held: how many, and the @p i-th (0-based, in order). */
size_t tb_session_count(tb_session_t *s);
void tb_session_item(tb_session_t *s, size_t i, uint64_t *seq, int64_t *offset, const void **raw,
		     size_t *raw_len);

/** Holds @p offset too (the task's message delivered again): finished
 * with the session's task. */
void tb_session_hold(tb_session_t *s, int64_t offset);

/** The offsets held by tb_session_hold. */
size_t tb_session_holds(tb_session_t *s, int64_t *out, size_t max);

/* ---------------------------------------------------- the slot's side */

/** Readable while a follow-up waits to be taken (poll it). */
int tb_session_fd(const tb_session_t *s);

/**
 * The next follow-up of this attempt, in order.
 * @param[out] kind TB_FOLLOWUP_PROMPT or TB_FOLLOWUP_END
 * @param[out] text the prompt, malloc'd (NULL for end); the caller frees it
 * @param[out] seq its number
 * @return 1 taken, 0 none yet
 */
int tb_session_take(tb_session_t *s, int *kind, char **text, uint64_t *seq);

/** The session has ended for good (idle timeout, deadline, the agent
 * exited): later follow-ups are refused with @p why. */
void tb_session_close(tb_session_t *s, const char *why);

/** The highest seq this attempt took (0: none): the manifest's
 * `followups`. */
uint64_t tb_session_taken(const tb_session_t *s);

/** A new attempt: its first take is the first follow-up again. */
void tb_session_rewind(tb_session_t *s);

#endif
