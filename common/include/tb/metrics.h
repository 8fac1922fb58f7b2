/*
 * metrics.h: the worker's Prometheus metrics. One registry per process
 * (a worker is one process), written from any thread by the functions
 * below, and rendered as Prometheus text (the worker serves it on
 * `metrics_listen`: worker/loop/metrics_http.h). It sits in common, below
 * every layer that counts something, as the log does. Every name is listed in docs/operating.md's "Metrics" table; the deploy/
 * dashboards and alert rules use them, and tests/deploy checks they agree.
 *
 *   taskbox_worker_info{worker}             1
 *   taskbox_slots, taskbox_slots_busy       sandboxes: configured, running
 *   taskbox_tasks_waiting                   tasks in the worker's line
 *   taskbox_tasks_total{outcome}            tasks settled here, by outcome
 *                                           (the manifest's, or dead-lettered)
 *   taskbox_attempt_failures_total{code}    attempts that failed and will be
 *                                           tried again, by error code
 *   taskbox_phase_duration_seconds{phase}   histogram: time to reach a phase
 *   taskbox_sandbox_launch_seconds          histogram: sandbox creation
 *   taskbox_step_duration_seconds{step}     histogram: a step inside the
 *                                           phases (tb_step_t)
 *   taskbox_consumer_lag{partition}         tasks not yet committed, per
 *                                           partition this worker holds
 *   taskbox_egress_requests_total{status}   proxy requests: 2xx .. 5xx, refused
 *   taskbox_dlq_messages_total{cause}       DLQ records written, by cause
 *   taskbox_events_total                    events produced
 *   taskbox_image_gets_total{result}        environments' images asked for:
 *                                           cached, made, refused, failed
 *   taskbox_image_fetched_bytes_total       image blobs fetched
 *   taskbox_image_evictions_total           images evicted from the cache
 *   taskbox_image_layer_indexes_total{result} layer indexes: published, found, ...
 *   taskbox_image_lazy_starts_total{result} images of a worker with image_lazy:
 *                                           lazy (read on demand), whole
 *   taskbox_image_read_orders_total{result} images' read orders: found, none,
 *                                           refused, unfit, failed, recorded,
 *                                           unrecorded
 *   taskbox_image_prefetched_bytes_total    spans fetched ahead, in a read order
 *   taskbox_attempts_accounted_total, taskbox_attempt_wall_seconds_total,
 *   taskbox_attempt_cpu_seconds_total{part}, taskbox_attempt_saved_bytes_total,
 *   taskbox_attempt_egress_requests_total{result},
 *   taskbox_attempt_egress_bytes_total{direction},
 *   taskbox_attempt_tokens_total{kind}
 *                                           each {runtime,recipe}: what the
 *                                           attempts used, summed (their usage)
 */
#ifndef TB_METRICS_H
#define TB_METRICS_H

#include "tb/error.h"
#include "tb/schema_event.h"
#include "tb/schema_manifest.h"

#include <stddef.h>
#include <stdint.h>

/** Names the worker and its slot count (taskbox_worker_info, _slots). */
void tb_metrics_init(const char *worker_id, unsigned slots);

void tb_metrics_task(const char *outcome);
void tb_metrics_failure(const char *code);
void tb_metrics_phase(tb_phase_t phase, uint64_t duration_ms);
void tb_metrics_launch(uint64_t duration_us);

/* The steps inside a task's phases that wait on something other than the
 * agent and the judges: where a phase's time goes (docs/performance.md
 * reads them). */
typedef enum tb_step {
	TB_STEP_LEDGER_BEGIN,     /* claimed: the ledger's begin (attempt, lease) */
	TB_STEP_RECIPE,           /* prepared: the recipe at its commit (the
				   * sandbox: taskbox_sandbox_launch_seconds) */
	TB_STEP_EGRESS_START,     /* prepared: the egress proxy */
	TB_STEP_STORE_RECORD,     /* recorded: the record and verdicts stored */
	TB_STEP_STORE_MANIFEST,   /* recorded: the manifest stored */
	TB_STEP_EVENTS_DELIVERED, /* recorded: the result and every event delivered */
	TB_STEP_DONE_MARKER,      /* recorded: the ledger's done-marker */
	TB_STEP_TEARDOWN,         /* the sandbox torn down (on its own thread) */
	TB_STEP_TEARDOWN_WAIT,    /* torn-down: what the task waited for it after that */
	TB_STEP__COUNT
} tb_step_t;

/** Step @p step took @p duration_us microseconds. */
void tb_metrics_step(tb_step_t step, uint64_t duration_us);
void tb_metrics_busy(unsigned slots_busy, unsigned waiting);
/** The lags of one stats round (lag[p] < 0: not held): replaces the last. */
void tb_metrics_lag(const int64_t *lag, int n);
/** @p status: the HTTP status, or 0 for a request the proxy refused. */
void tb_metrics_egress(int status);
void tb_metrics_dlq(const char *cause);
void tb_metrics_events(uint64_t n);
/** An image asked for (image.h): @p result "cached", "made", "refused"
 * (the image is wrong) or "failed" (its source or the cache); @p fetched
 * bytes fetched for it. */
void tb_metrics_image(const char *result, uint64_t fetched);
void tb_metrics_image_evicted(void);
/** A layer index (worker/image/layer_index_store.h): @p result
 * "published" (built after a whole pull and published), "unpublished"
 * (could not be built or published), "found", "none" (no index pinned),
 * "refused" (a check failed) or "failed" (the store or the pins away);
 * after the last three the layer is pulled whole. An eStargz layer read
 * from its TOC instead (worker/image/layer_estargz.h): "toc", or
 * "toc_refused" (its TOC not the one annotated, or refused: its pinned
 * index looked for next). */
void tb_metrics_layer_index(const char *result);
/** An image a worker with image_lazy made ready for a sandbox: @p result
 * "lazy" (its root read on demand) or "whole" (pulled whole: cached, no
 * index, refused, no FUSE). */
void tb_metrics_image_lazy(const char *result);
/** An image's read order (worker/image/read_order.h): @p result "found",
 * "none", "refused" (a check failed: no prefetch, replaced), "unfit"
 * (sound, over other indexes than this host's: no prefetch here, it
 * stands), "failed" (the store away), "recorded" (after a run that found
 * none or refused one) or "unrecorded" (could not be). */
void tb_metrics_read_order(const char *result);
/** @p bytes of spans fetched ahead, in an image's read order. */
void tb_metrics_image_prefetched(uint64_t bytes);
/** An attempt's usage (schemas/manifest.md), added to the sums of its
 * runtime and recipe (the recipe's name); once per attempt. */
void tb_metrics_usage(const char *runtime, const char *recipe, const tb_usage_t *usage);

/**
 * The registry as Prometheus text (version 0.0.4).
 * @return a malloc'd, NUL-terminated string, or NULL without memory
 */
char *tb_metrics_render(size_t *len);

/** Forgets every value (tests). */
void tb_metrics_reset(void);

#endif
