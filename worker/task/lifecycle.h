/*
 * lifecycle.h: one attempt of one task, one-shot or interactive, in
 * order, and the only place that knows the order (docs/architecture.md):
 *
 *   validated -> prepared (runtime, recipe at its commit, inputs, sandbox)
 *   -> running (the agent; its events streamed; an interactive agent's
 *   turns as its session's follow-ups arrive) -> settled -> collected
 *   (outputs) -> judged (each judge in the same sandbox, in a view of its
 *   own) -> recorded (conversation, verdicts, manifest, the result event,
 *   every event delivered, then the done-marker) -> torn down
 *
 * Each phase emits a "phase" event with the time the previous one took;
 * every event goes to the sink with (task, attempt, seq, ts, source)
 * stamped. Receiving, claiming (the ledger) and acknowledging (the
 * watermark) are the caller's: this module runs a task it was given and
 * says how it ended. Its files are listed in run_int.h.
 */
#ifndef TB_LIFECYCLE_H
#define TB_LIFECYCLE_H

#include "block_cache.h"
#include "image.h"
#include "ratelimit.h"
#include "recipe.h"
#include "sandbox.h"
#include "sandbox_pool.h"
#include "span_cache.h"
#include "session.h"
#include "tb/ledger.h"
#include "tb/schema_event.h"
#include "tb/schema_manifest.h"
#include "tb/schema_task.h"
#include "tb/store.h"

#include <stdatomic.h>

/** Where events go (the events topic, a test's list): each event, and
 * its canonical encoding (@p bytes, @p len: send these, do not encode
 * again). Must not block for long; returns 0 or a negative TB_E* (the run
 * then fails retryably). */
typedef struct tb_event_sink {
	int (*emit)(void *ud, const tb_event_t *ev, const void *bytes, size_t len, tb_error_t *err);
	void *ud;
	/* Waits until every event emitted so far is delivered (the events
	 * are part of the record: the done-marker waits for them). May be
	 * NULL when emit delivers at once. */
	int (*flush)(void *ud, tb_error_t *err);
	/* Told each phase the attempt reaches, after its event (the worker's
	 * liveness record shows it). May be NULL. */
	void (*phase)(void *ud, tb_phase_t phase);
} tb_event_sink_t;

typedef struct tb_lifecycle_ctx {
	const tb_seccomp_t *policy;
	tb_sandbox_pool_t *pool; /* sandboxes built ahead; NULL: built per task */
	tb_store_t *store;
	/* Where an input named by an earlier task finds that task's
	 * done-marker (inputs.h). May be NULL: such inputs are refused. */
	tb_ledger_t *ledger;
	tb_recipe_cache_t *recipes;
	/* Environments' images (image.h). May be NULL: a recipe or runtime
	 * naming an image then fails as the platform's (no cache here). */
	tb_image_cache_t *images;
	/* Blocks of inputs read on demand (worker/lazy). NULL: every input is
	 * downloaded whole (no FUSE on this worker). */
	tb_block_cache_t *input_cache;
	/* Spans of images whose root is read on demand (image_lazy: the
	 * image's layers all indexed, the image not cached: prepare.c).
	 * NULL: every image is pulled whole. */
	tb_span_cache_t *image_spans;
	const char *runtimes_dir; /* <name>.json */
	const char *work_root;    /* sandboxes and per-task scratch */
	const char *group;        /* the worker's prefix */
	unsigned slot;
	const char *worker;   /* named in the "received" phase; may be NULL */
	uint64_t received_ms; /* when the worker took the message (0: now) */
	uint64_t claimed_ms;  /* when the ledger gave it this attempt (0: now) */
	tb_event_sink_t sink;
	/* Called once the manifest is durable, before the result event: the
	 * ledger's done-marker. May be NULL. A failure fails the run
	 * retryably (the attempt is recorded in the store, not yet done). */
	int (*recorded)(void *ud, const char *task, uint64_t attempt, const char *manifest_key,
			tb_error_t *err);
	void *recorded_ud;
	/* Set (by another thread) when the run must stop: its lease is lost.
	 * The run ends the agent, writes nothing more and returns TB_EFENCED.
	 * May be NULL. */
	const atomic_int *cancel;
	/* The fleet's rate limits per credential (ratelimit.h), shared by the
	 * worker's slots. NULL: each attempt paces alone, at the whole limit. */
	tb_ratelimit_t *rates;
	/* Interactive tasks: the session's follow-ups (session.h), rewound
	 * by the caller before each attempt. NULL for one-shot tasks. */
	tb_session_t *session;
} tb_lifecycle_ctx_t;

typedef struct tb_lifecycle_result {
	int outcome; /* tb_outcome_t, when rc == 0 */
	char reason[512];
	char manifest_key[600];
	uint64_t events;    /* how many were emitted: the next event's seq */
	uint64_t followups; /* interactive: the last follow-up the attempt took */
	uint64_t last_ms;   /* when the last phase (torn-down) was reached */
} tb_lifecycle_result_t;

/**
 * Runs attempt @p attempt of @p task to the end and records it.
 * @return 0 when the attempt is recorded (whatever its outcome: a failing
 *         agent is a recorded failure); TB_EPOISON when the task can never
 *         run here (unknown runtime, limits over the runtime's, missing
 *         commit or input): DLQ it; TB_ERETRY or TB_EIO when the platform
 *         failed (store, recipe fetch): try again later; TB_EFENCED when
 *         ctx->cancel stopped it or the ledger fenced its done-marker.
 *         The reason is in @p err.
 */
int tb_lifecycle_run(const tb_lifecycle_ctx_t *ctx, const tb_task_t *task, uint64_t attempt,
		     tb_lifecycle_result_t *out, tb_error_t *err);

/**
 * The attempt's last event, from the worker once it has acknowledged the
 * message (its offset finished; committed with the partition's
 * watermark): the "acknowledged" phase, numbered @p seq (the result's
 * events), with the time since @p since_ms.
 */
int tb_lifecycle_acknowledged(const tb_event_sink_t *sink, const char *task, uint64_t attempt,
			      uint64_t seq, uint64_t since_ms, tb_error_t *err);

#endif
