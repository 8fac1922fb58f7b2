/*
 * worker.h: the worker's loop: consume the tasks topic in a consumer
 * group, take each message through intake and the ledger, run tasks in
 * slots (a thread each, at most `slots` at once; consumption pauses while
 * all are busy), publish events, dead-letter what can never run, and
 * commit each partition's watermark only for messages whose task is
 * recorded and torn down (invariant 1). This file owns the loop and the
 * order of acknowledgement; a task's own phases are lifecycle.c's.
 *
 * Each task runs under a lease in the ledger (tb/ledger.h), renewed by
 * the main thread's heartbeats; a lost lease stops the run. A task whose
 * lease another worker holds, or whose ledger is unreachable, waits in
 * line (pausing consumption) instead of blocking the loop.
 *
 * Interactive tasks keep their session here (task/session.h): the
 * follow-ups topic is consumed beside the tasks topic and each follow-up
 * is handed to its task's running attempt, or waits for it. The metrics
 * (tb/metrics.h) are counted where things happen and served by
 * metrics_http.h.
 */
#ifndef TB_WORKER_H
#define TB_WORKER_H

#include "lifecycle.h"
#include "tb/config.h"
#include "tb/ledger.h"

#include <signal.h>

typedef struct tb_worker_deps {
	const tb_config_t *cfg;
	const char *brokers; /* resolved: the mock cluster's, or cfg's */
	const char *worker_id;
	tb_store_t *store;
	tb_ledger_t *ledger;
	tb_recipe_cache_t *recipes;
	tb_image_cache_t *images;      /* environments' images; NULL: none allowed here */
	tb_block_cache_t *input_cache; /* lazy inputs' blocks; NULL: inputs downloaded whole */
	tb_span_cache_t *image_spans;  /* image_lazy: roots read on demand; NULL: off */
	const tb_seccomp_t *policy;
	const char *group; /* sandbox and directory prefix */
	uint64_t drain_ms; /* after a stop, how long running tasks may finish
			    * (0: as long as their deadlines allow) */
} tb_worker_deps_t;

typedef struct tb_worker_stats {
	uint64_t received;  /* messages read from the tasks topic */
	uint64_t recorded;  /* attempts recorded (any outcome) */
	uint64_t succeeded; /* ... of which the agent succeeded */
	uint64_t dead;      /* messages dead-lettered */
	uint64_t already;   /* tasks delivered again after they were done */
	uint64_t retried;   /* attempts that failed on the platform's side */
	uint64_t fenced;    /* attempts stopped or refused: their lease was lost */
} tb_worker_stats_t;

/**
 * Runs until *@p stop is set, or (if @p max_finished > 0) until that many
 * messages are finished and committed.
 * @return 0; TB_ETIMEOUT when tasks were still running after drain_ms (the
 *         caller exits at once: their sandboxes die with the process and
 *         their messages, not acknowledged, are delivered again); another
 *         negative code when the worker cannot go on (Kafka client
 *         creation failed). A task's failure never ends it.
 */
int tb_worker_run(const tb_worker_deps_t *d, volatile sig_atomic_t *stop, uint64_t max_finished,
		  tb_worker_stats_t *stats, tb_error_t *err);

/* What tb_worker_open() does besides what every worker needs. */
enum {
	TB_WORKER_OPEN_SWEEP = 1u << 0,  /* first remove what a dead worker of d->group left */
	TB_WORKER_OPEN_INPUTS = 1u << 1, /* the lazy inputs' block cache, where FUSE serves */
};

/**
 * Opens what a worker runs with, from its configuration (@p d->cfg; the
 * caller has set cfg, brokers, worker_id, group, and opened the store and
 * the ledger): the recipe and image caches under cfg->cache_dir (bounded
 * by image_cache_mb, image_stall_seconds), the seccomp policy, the
 * sandbox's init program found, one range of the host's ids claimed and
 * given back (a registry that cannot give one is said now, not at the
 * first task); with @p what's TB_WORKER_OPEN_SWEEP what a dead worker of
 * the same group left removed (said in the log), with
 * TB_WORKER_OPEN_INPUTS the lazy inputs' cache under cache_dir/inputs
 * where FUSE can be served (else the log says why inputs are downloaded
 * whole), and with the configuration's image_lazy there the span cache
 * of image roots read on demand (cache_dir/spans). `taskbox worker`, its checks and `taskbox demo` all open a
 * worker this way.
 * @return 0, or < 0 with why in @p err (nothing left open)
 */
int tb_worker_open(tb_worker_deps_t *d, unsigned what, tb_error_t *err);

/** Closes what tb_worker_open() opened (not the store or the ledger,
 * which must outlive it: the image cache publishes layer indexes through
 * them until it is closed); again, or after a failed open, does nothing. */
void tb_worker_close(tb_worker_deps_t *d);

/**
 * Builds one throwaway sandbox as a task's would be built (under
 * cfg->work_dir, in the worker's cgroup @p d->group, with @p d->policy)
 * and tears it down; /readyz's sandbox says how it went.
 * @return 0, or < 0 with why in @p err (a work_dir the sandbox's user
 *         namespace cannot reach, cgroups not found, ...)
 */
int tb_worker_probe_sandbox(const tb_worker_deps_t *d, tb_error_t *err);

#endif
