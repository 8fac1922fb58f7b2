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
	TB_OUTCOME_BUDGET,        /* a budget of the task was spent (task.md, limits) */
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

/* What the image's layers had that its tree does not keep as they had it
 * (schemas/manifest.md, "environment"): how many entries of each kind,
 * and the first one's name. Absent when nothing was: a count is present
 * only when above 0, a name only with its count. */
typedef struct tb_environment_altered {
	uint32_t has;
	uint64_t devices;  /* device nodes and sockets left out (has bit) */
	uint64_t setid;    /* set-user-ID or set-group-ID bits dropped (has bit) */
	uint64_t ids;      /* entries owned by ids no sandbox maps, made nobody (has bit) */
	char *device_path; /* the first of each, as the layer named it */
	char *setid_path;
	char *ids_path;
} tb_environment_altered_t;

enum { TB_ALTERED_DEVICES = 0, TB_ALTERED_SETID = 1, TB_ALTERED_IDS = 2 }; /* has bits */

/* The environment an attempt ran on, when it was an image: the image as
 * the recipe (or runtime) named it, the digest of the manifest pulled for
 * this worker's platform (an index's entry), every layer's digest,
 * bottom first, and what unpacking them dropped or changed. */
typedef struct tb_environment_ran {
	char *image;
	char *digest;
	tb_strlist_t layers;
	tb_environment_altered_t altered;
} tb_environment_ran_t;

/* CPU time of processes in the sandbox, from its cgroup (cpu.stat). */
typedef struct tb_usage_cpu {
	uint32_t has;
	uint64_t user_ms;
	uint64_t system_ms;
} tb_usage_cpu_t;

/* The requests of one endpoint through the egress proxy ("-": those that
 * matched none). */
typedef struct tb_usage_egress {
	uint32_t has;
	char *endpoint;
	uint64_t requests;    /* every request, refused ones included */
	uint64_t refused;     /* answered by the proxy itself: never sent */
	uint64_t bytes_up;    /* request bodies, sandbox to upstream */
	uint64_t bytes_down;  /* response bodies, upstream to sandbox */
	uint64_t upstream_ms; /* time requests that reached the upstream took */
	/* the provider's own figures, summed over its answers: for an
	 * endpoint with a dialect (has bits TB_USAGE_TOKENS_*) */
	uint64_t input_tokens, output_tokens, cached_tokens;
	uint64_t replayed;     /* a replay: answered from the recording (has bit) */
	uint64_t rate_wait_ms; /* waiting for the rate limit's turns (has bit) */
} tb_usage_egress_t;

enum { TB_USAGE_TOKENS_IN = 6, TB_USAGE_TOKENS_OUT = 7, TB_USAGE_TOKENS_CACHED = 8 };
enum { TB_USAGE_REPLAYED = 9, TB_USAGE_RATE_WAIT = 10 };

/* One input of the attempt: its bytes, and how many came from the store
 * (a lazy one's, as read; an eager one's, all of them). */
typedef struct tb_usage_input {
	uint32_t has;
	char *name;
	uint64_t size;
	uint64_t fetched_bytes;
	bool lazy;
} tb_usage_input_t;

/* What an attempt used (schemas/manifest.md, "usage"): absent figures are
 * ones the kernel does not report. */
typedef struct tb_usage {
	uint32_t has;
	uint64_t wall_ms;           /* received to recorded (has bit) */
	tb_usage_cpu_t agent;       /* the agent and what it started */
	tb_usage_cpu_t judges;      /* every judge together */
	uint64_t memory_peak_bytes; /* the sandbox's, agent and judges (has bit) */
	uint64_t pids_peak;         /* the sandbox's most processes at once (has bit) */
	uint64_t outputs_bytes;     /* regular files found under /outputs (has bit) */
	uint64_t saved_bytes;       /* of them, saved as artifacts (has bit) */
	tb_list_t egress;           /* tb_usage_egress_t, by endpoint */
	tb_list_t inputs;           /* tb_usage_input_t, in the task's order */
} tb_usage_t;

enum { /* tb_usage_t has bits */
       TB_USAGE_WALL = 0,
       TB_USAGE_MEMORY_PEAK = 3,
       TB_USAGE_PIDS_PEAK = 4,
       TB_USAGE_OUTPUTS = 5,
       TB_USAGE_SAVED = 6,
};

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
	tb_usage_t usage;                 /* what the attempt used */
	char *recording_key;              /* the egress recording, or NULL */
} tb_manifest_t;

enum { TB_MANIFEST_TURNS = 14, TB_MANIFEST_FOLLOWUPS = 15 }; /* has bits */

extern const tb_schema_t tb_schema_manifest;
extern const tb_schema_t tb_schema_usage; /* the manifest's "usage", alone */
extern const char *const tb_outcomes[];

#endif
