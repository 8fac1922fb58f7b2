/*
 * schema_verdict.h: one judge's verdict on a finished conversation
 * (schemas/verdict.md). Saved to the store under the attempt's key prefix
 * and summarised as a "verdict" event.
 */
#ifndef TB_SCHEMA_VERDICT_H
#define TB_SCHEMA_VERDICT_H

#include "tb/codec.h"

typedef enum tb_verdict_outcome {
	TB_VERDICT_PASS = 0,
	TB_VERDICT_FAIL = 1,
	TB_VERDICT_ERROR = 2, /* the judge itself failed: crashed, timed out */
} tb_verdict_outcome_t;

enum { TB_VERDICT_F_SCORE = 4 }; /* field index of the optional score */

typedef struct tb_verdict {
	uint32_t has;
	char *task_id;
	uint64_t attempt;
	char *judge;  /* the judge's name in the recipe manifest */
	int outcome;  /* tb_verdict_outcome_t */
	double score; /* optional, 0..1 */
	char *reason; /* optional, human-readable */
	uint64_t ts;
	uint64_t duration_ms;
} tb_verdict_t;

extern const tb_schema_t tb_schema_verdict;
extern const char *const tb_verdict_outcomes[];

#endif
