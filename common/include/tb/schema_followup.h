/*
 * schema_followup.h: a follow-up for an interactive task (schemas/followup.md),
 * on the tasks topic keyed by the task id so it lands on the task's
 * partition. kind "prompt" carries text; kind "end" closes the session.
 */
#ifndef TB_SCHEMA_FOLLOWUP_H
#define TB_SCHEMA_FOLLOWUP_H

#include "tb/codec.h"

typedef enum tb_followup_kind {
	TB_FOLLOWUP_PROMPT = 0,
	TB_FOLLOWUP_END = 1,
} tb_followup_kind_t;

typedef struct tb_followup {
	uint32_t has;
	char *task_id;
	uint64_t seq; /* 1, 2, 3 ... per task, in the order the producer sent */
	int kind;     /* tb_followup_kind_t */
	char *text;   /* required for prompts, absent for end */
	uint64_t sent_at;
} tb_followup_t;

extern const tb_schema_t tb_schema_followup;

#endif
