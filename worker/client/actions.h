/*
 * actions.h: what the commands and `taskbox view` do to the fleet on a
 * person's behalf, in one place: read the DLQ topic, send a dead-lettered
 * task back, send a follow-up (a prompt, or the end) to an interactive
 * session. Each says what went wrong in its error; the caller says it
 * (on stderr, or in a page).
 */
#ifndef TB_ACTIONS_H
#define TB_ACTIONS_H

#include "tb/config.h"
#include "tb/error.h"
#include "tb/schema_dlq.h"

#include <stddef.h>
#include <stdint.h>

typedef int (*tb_dlq_fn)(void *ud, int32_t partition, int64_t offset, const tb_dlq_t *rec);

/**
 * Calls @p fn for each record of the DLQ topic from @p from (partition
 * @p only, or every partition when it is -1) to the end, oldest first per
 * partition; @p fn returning non-zero stops. 0, or TB_EIO naming why.
 */
int tb_dlq_each(const tb_config_t *cfg, int32_t only, int64_t from, tb_dlq_fn fn, void *ud,
		tb_error_t *err);

/**
 * Sends the task of the DLQ record at @p partition:@p offset back to the
 * tasks topic, the ledger's dead letter forgotten (its attempts count
 * afresh); its id into @p task. @return 0; TB_ENOTFOUND (no record
 * there); TB_EINVAL (it holds no task: fix it at its producer); TB_ERETRY
 * (the ledger holds no dead letter for it: not yet, or sent back
 * already); TB_EIO (a service: the message says whether the ledger
 * forgot the dead letter already)
 */
int tb_dlq_send_back(const tb_config_t *cfg, int32_t partition, int64_t offset, char *task,
		     size_t cap, tb_error_t *err);

/**
 * Sends follow-up @p text (NULL: the end of the session) to interactive
 * task @p task, numbered @p given, or the ledger's next when 0; the number
 * into @p seq. @return 0; TB_EINVAL (not a valid follow-up: the field is
 * named); TB_ENOTFOUND (no ledger holds the count: a `memory:` one);
 * TB_EIO
 */
int tb_followup_send(const tb_config_t *cfg, const char *task, const char *text, uint64_t given,
		     uint64_t *seq, tb_error_t *err);

#endif
