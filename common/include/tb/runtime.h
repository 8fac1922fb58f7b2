/*
 * runtime.h: a runtime (schemas/runtime.md) binds recipes to this worker's
 * environment: default and maximum limits, attempts, what the sandbox
 * mounts, agent caps, the network policy and the bindings the agent sees.
 * Runtimes are JSON files in the worker's runtimes_dir, named <name>.json;
 * a task names its runtime. This file owns the table and the limit rules;
 * the sandbox, agent and proxy modules own what the values do.
 */
#ifndef TB_RUNTIME_H
#define TB_RUNTIME_H

#include "tb/codec.h"
#include "tb/image_ref.h"
#include "tb/schema_task.h"

typedef struct tb_credential {
	char *header; /* add as this request header ... */
	char *query;  /* ... or as this query parameter */
	char *format; /* "Bearer {}": {} is replaced by the secret */
	char *env;    /* the secret is in this worker environment variable ... */
	char *file;   /* ... or in this file */
} tb_credential_t;

/* A credential's shared rate limits (schemas/runtime.md, "rate_limit"):
 * every worker's proxy draws from one bucket per credential. */
typedef struct tb_rate_conf {
	uint32_t has;
	double requests_per_second; /* 0 (absent): no request limit */
	uint64_t tokens_per_minute; /* 0 (absent): no token limit */
	uint64_t max_wait_seconds;  /* a request waits for the bucket at most this */
} tb_rate_conf_t;
/* tb_rate_conf_t has bits */
enum { TB_RATE_REQUESTS = 0, TB_RATE_TOKENS = 1, TB_RATE_MAX_WAIT = 2 };
#define TB_RATE_MAX_WAIT_DEFAULT 60

typedef struct tb_endpoint {
	uint32_t has;
	char *name; /* the binding name the agent sees */
	char *host; /* upstream host name */
	uint64_t port;
	char *scheme;                /* "https" or "http" */
	tb_strlist_t methods;        /* empty: any */
	tb_strlist_t path_prefixes;  /* empty: any */
	tb_credential_t credential;  /* absent: none added */
	int dialect;                 /* tb_dialect_t, when has bit TB_ENDPOINT_DIALECT */
	tb_rate_conf_t rate_limit;   /* has == 0: none */
	bool record;                 /* its exchanges go into the egress recording */
	tb_strlist_t secret_headers; /* header names never recorded */
	/* the output tokens a request that names none is reserved against
	 * the task's budgets, when has bit TB_ENDPOINT_DEFAULT_MAX_TOKENS */
	uint64_t default_max_tokens;
} tb_endpoint_t;

/* The provider API an endpoint speaks, whose answers' usage fields the
 * proxy reads (schemas/runtime.md, "dialect"). */
typedef enum tb_dialect { TB_DIALECT_OPENAI = 0, TB_DIALECT_ANTHROPIC } tb_dialect_t;
enum { TB_ENDPOINT_DIALECT = 7, TB_ENDPOINT_DEFAULT_MAX_TOKENS = 11 }; /* tb_endpoint_t has bits */
extern const char *const tb_dialects[];

/* Where a recipe's environment may come from (schemas/runtime.md,
 * "sandbox.images"; tb/image_ref.h). */
typedef struct tb_images_conf {
	uint32_t has;
	tb_strlist_t allow;       /* registry/repository prefixes a recipe may pull from */
	tb_strlist_t layouts;     /* directories of OCI layouts a recipe may name */
	char *default_image;      /* for recipes that name none; NULL: the host binds */
	uint64_t max_unpacked_mb; /* an image's files, unpacked, at most */
	uint64_t writable_mb;     /* the writable layer over an image's root */
	char *credentials;        /* docker config.json "auths" file on the worker; may be NULL */
} tb_images_conf_t;

typedef struct tb_sandbox_conf {
	tb_strlist_t ro_binds; /* host paths bound read-only at the same place */
	uint64_t workspace_mb;
	uint64_t max_open_files;
	uint64_t max_file_mb;
	uint64_t max_output_files;
	uint64_t lazy_inputs_mb; /* inputs of this size or more read on demand; 0: none */
	tb_images_conf_t images;
} tb_sandbox_conf_t;

typedef struct tb_agent_conf {
	uint64_t max_event_bytes;
	uint64_t max_events_per_second;
	uint64_t idle_timeout_seconds;
	uint64_t judge_timeout_seconds;
	uint64_t budget_grace_seconds;   /* a budget spent: the agent's time to end */
	uint64_t usage_interval_seconds; /* a usage event while the agent runs; 0: none */
} tb_agent_conf_t;

/* The egress recording's caps (schemas/runtime.md, "recording"). */
typedef struct tb_recording_conf {
	uint64_t max_body_kib; /* each request and answer body kept up to this */
	uint64_t max_mb;       /* the whole recording of an attempt */
} tb_recording_conf_t;

typedef struct tb_runtime {
	uint32_t has;
	char *name;
	uint64_t max_attempts;
	uint64_t max_worker_deaths; /* attempts whose worker died, a budget of their own */
	tb_limits_t limits;         /* defaults for every task */
	tb_limits_t max_limits;     /* what a task may ask for at most */
	tb_sandbox_conf_t sandbox;
	tb_agent_conf_t agent;
	tb_list_t endpoints; /* tb_endpoint_t, "network.allow" in the file */
	tb_strmap_t env;     /* bindings: variables the agent sees */
	tb_recording_conf_t recording;
} tb_runtime_t;

extern const tb_schema_t tb_schema_runtime;
extern const char tb_runtime_defaults[];

/**
 * Loads a runtime file. @param[out] out released with tb_runtime_free().
 * @return 0, TB_ENOTFOUND, TB_EVERSION, TB_EINVAL (file, key and reason)
 */
int tb_runtime_load(tb_runtime_t *out, const char *path, tb_error_t *err);

void tb_runtime_free(tb_runtime_t *rt);

/** Whether @p im lets a recipe name @p ref (its allow list for a
 * registry's image, its layouts for an OCI layout). */
int tb_images_allowed(const tb_images_conf_t *im, const tb_image_ref_t *ref);

/**
 * The limits a task runs with: the runtime's defaults, then the recipe's,
 * then the task's overrides, each override checked against max_limits.
 * @param recipe may be NULL
 * @param task may be NULL
 * @return 0, or TB_EPOISON naming the limit a recipe or task asked too much
 *         of (the task can never run here as submitted)
 */
int tb_runtime_limits(tb_limits_t *out, const tb_runtime_t *rt, const tb_limits_t *recipe,
		      const tb_limits_t *task, tb_error_t *err);

#endif
