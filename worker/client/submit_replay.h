/*
 * submit_replay.h: the task document `taskbox submit --replay-from` sends
 * (schemas/task.md, "Replay").
 */
#ifndef TB_SUBMIT_REPLAY_H
#define TB_SUBMIT_REPLAY_H

#include "tb/ledger.h"
#include "tb/store.h"

#include <jansson.h>
#include <stdint.h>

typedef struct submit_replay {
	const char *from;   /* the task replayed */
	uint64_t attempt;   /* its attempt; 0: the one its done-marker names */
	const char *mode;   /* "strict" or "fill"; NULL: the default */
	const char *pace;   /* "instant" or "recorded"; NULL: the default */
	const char *commit; /* another recipe commit; NULL: the same */
} submit_replay_t;

/**
 * The earlier task as its recording keeps it, with no id or
 * submitted_at, replaying that attempt's recording (the attempt pinned).
 * @return the document, or NULL with @p err said (TB_ENOTFOUND: not done,
 *         no such attempt, or no recording; the store's or ledger's error)
 */
json_t *tb_submit_replay_doc(tb_ledger_t *l, tb_store_t *s, const submit_replay_t *q,
			     tb_error_t *err);

#endif
