/*
 * schema_manifest.h: the artifact manifest of one attempt
 * (schemas/manifest.md): what the attempt produced and where it is in the
 * store. Written last, after every object it names is durable; the
 * done-marker is written only after it.
 */
#ifndef TB_SCHEMA_MANIFEST_H
#define TB_SCHEMA_MANIFEST_H

#include "tb/codec.h"
#include "tb/image_ref.h"
#include "tb/schema_task.h"

typedef enum tb_outcome {
	TB_OUTCOME_SUCCEEDED = 0, /* the agent finished its turn(s) */
	TB_OUTCOME_FAILED,        /* the agent exited non-zero */
	TB_OUTCOME_TIMED_OUT,     /* wall-clock deadline or idle timeout */
	TB_OUTCOME_OOM_KILLED,    /* the memory limit */
	TB_OUTCOME_PIDS_LIMIT,    /* the pids limit refused a fork */
	TB_OUTCOME_CANCELLED,     /* ended by the platform (lease lost, shutdown) */
	TB_OUTCOME_ERROR,         /* the platform failed to run it */
	TB_OUTCOME__COUNT
} tb_outcome_t;

typedef struct tb_artifact {
	char *path; /* relative to /outputs */
	char *key;  /* object key in the store */
	uint64_t size;
	char *sha256;
} tb_artifact_t;

typedef struct tb_refused {
	char *path;
	char *reason;
} tb_refused_t;

typedef struct tb_verdict_ref {
	uint32_t has;
	char *judge;
	int outcome; /* tb_verdict_outcome_t */
	char *key;   /* the verdict object in the store */
} tb_verdict_ref_t;

typedef struct tb_phase_time {
	char *name;           /* "received" ... "recorded" */
	uint64_t at;          /* ms since epoch, when it was reached */
	uint64_t duration_ms; /* how long the phase before it took */
} tb_phase_time_t;

/* The environment an attempt ran on, when it was an image: the image as
 * the recipe (or runtime) named it, the digest of the manifest pulled for
 * this worker's platform (an index's entry), and every layer's digest,
 * bottom first. */
typedef struct tb_environment_ran {
	char *image;
	char *digest;
	tb_strlist_t layers;
} tb_environment_ran_t;

typedef struct tb_manifest {
	uint32_t has;
	char *task_id;
	uint64_t attempt;
	int outcome; /* tb_outcome_t */
	char *reason;
	tb_recipe_ref_t recipe;
	uint64_t started_at;
	uint64_t finished_at;
	char *conversation_key;
	uint64_t events;
	tb_list_t artifacts;              /* tb_artifact_t */
	tb_list_t refused;                /* tb_refused_t */
	tb_list_t verdicts;               /* tb_verdict_ref_t */
	char *runtime;                    /* the runtime the attempt ran under */
	tb_list_t phases;                 /* tb_phase_time_t, in order, up to "recorded" */
	uint64_t turns;                   /* interactive: turns the agent ended (has bit) */
	uint64_t followups;               /* interactive: the last follow-up seq taken (has bit) */
	tb_environment_ran_t environment; /* an image's; image NULL: the host binds */
} tb_manifest_t;

enum { TB_MANIFEST_TURNS = 14, TB_MANIFEST_FOLLOWUPS = 15 }; /* has bits */

extern const tb_schema_t tb_schema_manifest;
extern const char *const tb_outcomes[];

#endif
