/*
 * schema_task.h: the task message (schemas/task.md), on the tasks topic
 * keyed by task id. Decode and encode it with tb_msg_decode/tb_msg_encode
 * and &tb_schema_task; release with tb_msg_free.
 */
#ifndef TB_SCHEMA_TASK_H
#define TB_SCHEMA_TASK_H

#include "tb/codec.h"

typedef enum tb_task_kind {
	TB_TASK_ONE_SHOT = 0,
	TB_TASK_INTERACTIVE = 1,
} tb_task_kind_t;

typedef struct tb_recipe_ref {
	char *url;    /* git repository URL */
	char *commit; /* full 40-hex commit id */
} tb_recipe_ref_t;

typedef struct tb_input {
	char *name;     /* relative path under /inputs in the sandbox */
	char *artifact; /* an artifact key in the store, or ... */
	char *task;     /* ... an earlier task whose output ... */
	char *path;     /* ... this is (resolved through its manifest) */
	char *sha256;   /* optional: expected checksum */
	char *blocks;   /* optional: its block list's SHA-256 (tb/blocks.h) */
} tb_input_t;

/* Per-task limit overrides; each is optional and capped by the runtime. */
enum {
	TB_LIMIT_WALL_SECONDS,
	TB_LIMIT_MEMORY_MB,
	TB_LIMIT_PIDS,
	TB_LIMIT_CPU_MILLIS,
	TB_LIMIT_OUTPUTS_MB,
	TB_LIMIT_MAX_TOKENS, /* the budgets: enforced by the egress proxy */
	TB_LIMIT_MAX_REQUESTS,
	TB_LIMIT_MAX_EGRESS_MB,
	TB_LIMIT_MAX_INPUT_TOKENS,
	TB_LIMIT_MAX_OUTPUT_TOKENS,
};
typedef struct tb_limits {
	uint32_t has; /* TB_HAS(l, TB_LIMIT_*) */
	uint64_t wall_seconds;
	uint64_t memory_mb;
	uint64_t pids;
	uint64_t cpu_millis; /* CPU bandwidth: 1000 = one core */
	uint64_t outputs_mb;
	uint64_t max_tokens;        /* input + output tokens providers report */
	uint64_t max_requests;      /* requests sent through the proxy */
	uint64_t max_egress_mb;     /* request and response bodies together */
	uint64_t max_input_tokens;  /* input tokens alone (cached ones among them) */
	uint64_t max_output_tokens; /* output tokens alone */
} tb_limits_t;

/* How a task plays back an earlier task's egress recording (task.md,
 * "replay"). */
typedef enum tb_replay_mode { TB_REPLAY_STRICT = 0, TB_REPLAY_FILL } tb_replay_mode_t;
typedef enum tb_replay_pace { TB_REPLAY_INSTANT = 0, TB_REPLAY_RECORDED } tb_replay_pace_t;
typedef struct tb_replay_conf {
	uint32_t has;     /* a bit per key given: TB_REPLAY_ATTEMPT, the attempt */
	uint64_t attempt; /* the attempt whose recording plays; else the done one */
	int mode;         /* tb_replay_mode_t */
	int pace;         /* tb_replay_pace_t */
} tb_replay_conf_t;
enum { TB_REPLAY_ATTEMPT = 0 };

typedef struct tb_task {
	uint32_t has;
	char *id;
	int kind; /* tb_task_kind_t */
	tb_recipe_ref_t recipe;
	char *prompt;
	tb_list_t inputs; /* tb_input_t */
	char *runtime;
	tb_limits_t limits;
	tb_strmap_t labels;
	uint64_t submitted_at;   /* ms since the Unix epoch */
	char *replay_from;       /* an earlier task whose recording plays back, or NULL */
	tb_replay_conf_t replay; /* how (with replay_from only); has 0: not given */
} tb_task_t;

#define TB_TASK_MAX_BYTES (1u << 20)
#define TB_PROMPT_MAX_BYTES (256u << 10)

extern const tb_schema_t tb_schema_task;

/**
 * What task @p t stands for, as "sha256:<64 hex>": the SHA-256 of its
 * canonical MessagePack encoding with submitted_at left out, so that the
 * same task sent again (a retry, a redelivery, a resubmission) has the
 * same digest and any other content under its id another (task.md).
 * @return 0; the encoder's error for a task that would not encode
 */
int tb_task_digest(const tb_task_t *t, char out[72], tb_error_t *err);
extern const tb_schema_t tb_schema_recipe_ref;
extern const tb_schema_t tb_schema_limits;

#endif
