/*
 * replay.h: an earlier attempt's egress recording (recording.h) played
 * back to a task that names it (schemas/task.md, "replay_from"): the
 * proxy answers each request from the recorded exchange that matches it
 * instead of asking the upstream.
 *
 * A request matches a recorded exchange with the same endpoint, method,
 * target (normalised path and query) and SHA-256 of the whole body;
 * identical requests take the recorded ones in the order they were made,
 * each once. Exchanges recorded without a request record (a recording cut
 * at max_mb) match nothing. Thread-safe.
 */
#ifndef TB_REPLAY_H
#define TB_REPLAY_H

#include "recording.h"
#include "tb/schema_task.h"

typedef struct tb_replay tb_replay_t;

/**
 * A replay of @p rec (taken: freed with the replay, on every path),
 * played as @p conf says; @p from names it in reasons ("task t-1
 * attempt 2").
 * @return 0, or TB_ENOMEM
 */
int tb_replay_new(tb_replay_t **out, tb_recording_t *rec, const tb_replay_conf_t *conf,
		  const char *from, tb_error_t *err);

void tb_replay_free(tb_replay_t *p);

/** The recorded exchange that answers this request, now used; NULL when
 * none is left that matches. */
const tb_rec_exchange_read_t *tb_replay_take(tb_replay_t *p, const char *endpoint,
					     const char *method, const char *target,
					     const char *body_sha256);

/** How it plays (tb_replay_mode_t, tb_replay_pace_t), and what. */
int tb_replay_mode(const tb_replay_t *p);
int tb_replay_pace(const tb_replay_t *p);
const char *tb_replay_from(const tb_replay_t *p);

/** The first request that matched nothing, as "POST /v1/chat (body
 * sha256 ab12…)", into @p out; 0 when every request matched. */
int tb_replay_first_miss(tb_replay_t *p, char *out, size_t len);

/** Notes a request that matched nothing (the first is kept). */
void tb_replay_missed(tb_replay_t *p, const char *method, const char *target,
		      const char *body_sha256);

#endif
