/*
 * intake.h: the first step of the lifecycle. A raw message from the tasks
 * topic becomes a task, a follow-up, or a DLQ record that says exactly why
 * not (cause "malformed"). Intake never fails the worker: every input has
 * one of the three outcomes. It does not consult the ledger or the
 * runtime; later phases add "poison" reasons of their own.
 */
#ifndef TB_INTAKE_H
#define TB_INTAKE_H

#include "tb/schema_dlq.h"
#include "tb/schema_followup.h"
#include "tb/schema_task.h"

#include <stdint.h>

typedef enum tb_intake_kind {
	TB_INTAKE_TASK,
	TB_INTAKE_FOLLOWUP,
	TB_INTAKE_DEAD, /* dlq holds the record to publish */
} tb_intake_kind_t;

typedef struct tb_intake {
	tb_intake_kind_t kind;
	tb_task_t task;         /* valid when kind == TB_INTAKE_TASK */
	tb_followup_t followup; /* valid when kind == TB_INTAKE_FOLLOWUP */
	tb_dlq_t dlq;           /* valid when kind == TB_INTAKE_DEAD */
} tb_intake_t;

/** Where a message came from, for the DLQ record. */
typedef struct tb_msg_origin {
	const char *topic;
	int32_t partition;
	int64_t offset;
	const void *key; /* may be NULL */
	size_t key_len;
} tb_msg_origin_t;

/**
 * Decodes one message. Always succeeds unless memory runs out.
 * @param now_ms the time stamped on a DLQ record
 * @param[out] out released with tb_intake_free()
 * @return 0, or TB_ENOMEM
 */
int tb_intake_decode(tb_intake_t *out, const void *value, size_t len, const tb_msg_origin_t *origin,
		     uint64_t now_ms);

/**
 * Fills @p out as a DLQ record for a message that was understood but is
 * refused (cause and reason given), copying the original bytes (cut at
 * TB_DLQ_ORIGINAL_MAX) and the origin. @p task_id may be NULL.
 * @param[out] out released with tb_msg_free(&tb_schema_dlq, out)
 */
int tb_intake_dead_letter(tb_dlq_t *out, int cause, const char *reason, const char *task_id,
			  const void *value, size_t len, const tb_msg_origin_t *origin,
			  uint64_t now_ms);

void tb_intake_free(tb_intake_t *in);

#endif
