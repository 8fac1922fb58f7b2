/*
 * schema_dlq.h: a dead-letter record (schemas/dlq.md): a message the pool
 * gave up on, with why, every attempt's reason, where it came from, and the
 * original bytes so an operator can send it back after a fix.
 */
#ifndef TB_SCHEMA_DLQ_H
#define TB_SCHEMA_DLQ_H

#include "tb/codec.h"

typedef enum tb_dlq_cause {
	TB_DLQ_MALFORMED = 0, /* could not be decoded or failed its schema */
	TB_DLQ_POISON,        /* decoded, but can never succeed (unknown recipe
				 commit, unknown runtime, ...) */
	TB_DLQ_MAX_ATTEMPTS,  /* failed on every attempt the runtime allows */
	TB_DLQ_ORPHAN,        /* a follow-up for an unknown or finished task */
} tb_dlq_cause_t;

typedef struct tb_dlq_attempt {
	char *worker;
	uint64_t attempt;
	uint64_t ts;
	char *reason;
} tb_dlq_attempt_t;

typedef struct tb_dlq {
	uint32_t has;
	char *task_id; /* absent when the message could not be decoded */
	int cause;     /* tb_dlq_cause_t */
	char *reason;  /* the final reason, human-readable */
	char *topic;
	uint64_t partition;
	uint64_t offset;
	uint64_t ts;
	tb_list_t attempts; /* tb_dlq_attempt_t */
	tb_bytes_t original;
} tb_dlq_t;

enum { TB_DLQ_F_PARTITION = 4, TB_DLQ_F_OFFSET = 5 };

/* The original message is kept whole up to this size; a bigger message was
 * refused as too big and is kept truncated to it. */
/* What a DLQ record keeps of the original message: less than Kafka's
 * default message size limits (1,000,000 bytes in librdkafka's producer,
 * 1,048,588 in the broker), with room for the rest of the record, so a
 * record about an oversized message can itself be sent. */
#define TB_DLQ_ORIGINAL_MAX (900u << 10)
/* What a record read may hold: records of earlier builds kept up to 1 MiB
 * (where the message size limits had been raised). */
#define TB_DLQ_ORIGINAL_READ_MAX (1u << 20)

extern const tb_schema_t tb_schema_dlq;
extern const char *const tb_dlq_causes[]; /* by tb_dlq_cause_t */

#endif
