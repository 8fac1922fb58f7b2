/*
 * run_int.h: one attempt as it runs, shared by the files that do its phases
 * (private to worker/task/; lifecycle.h is the public face):
 *
 *   record.c    events: stamped, recorded, sent; phases; the judges'
 *               JSON lines; the egress records; the record's puts
 *   prepare.c   the runtime, the recipe at its commit, inputs, sandbox
 *   agent.c     the agent: its environment, its lines, its end
 *   turns.c     an interactive agent's prompts, turn by turn
 *   judges.c    each judge, in a view of its own, and its verdict
 *   usage.c     what the attempt used: CPU, memory, outputs, egress
 *   egress_run.c its way out: the proxy and the egress recording
 *   lifecycle.c the order of the phases, and the teardown
 *
 * Everything here runs on the attempt's own thread; a tb_run_t lives on
 * tb_lifecycle_run()'s stack.
 */
#ifndef TB_RUN_INT_H
#define TB_RUN_INT_H

#include "egress.h"
#include "image_fs.h"
#include "inputs.h"
#include "lifecycle.h"
#include "tb/agent_events.h"
#include "tb/runtime.h"
#include "tb/store.h"
#include "tb/store_put_all.h"

#include <jansson.h>
#include <msgpack.h>
#include <pthread.h>
#include <sys/types.h>

#define TB_RUN_MAX_PHASES 16 /* the manifest keeps at most these */

/* Where the sandbox's counters are read for the accounting, in order. */
typedef enum tb_run_usage_point {
	TB_USAGE_AT_NONE = 0,
	TB_USAGE_AT_AGENT_START,
	TB_USAGE_AT_AGENT_END, /* the agent and everything it started ended */
	TB_USAGE_AT_JUDGES_END,
} tb_run_usage_point_t;

typedef struct tb_run {
	const tb_lifecycle_ctx_t *ctx;
	const tb_task_t *task;
	uint64_t attempt;
	uint64_t seq;
	uint64_t phase_ms;
	int record_fd;    /* conversation record: MessagePack events */
	int jsonl_fd;     /* the same as JSON lines, for the judges (tb_run_sync_jsonl) */
	off_t jsonl_from; /* how much of the record is in it */
	int failed;       /* the sink refused an event */
	tb_error_t sink_err;
	tb_runtime_t rt;
	tb_recipe_manifest_t recipe;
	tb_sandbox_t *sb;
	tb_inputs_t inputs; /* as fetched: sizes, and the lazy ones */
	tb_lazy_fs_t *lazy; /* serving the lazy ones, until the sandbox is gone */
	int lazy_mount;     /* its detached mount (> 0), given to the sandbox */
	tb_image_t image;   /* the environment's, held while the sandbox lives */
	int has_image;
	tb_image_lazy_t *image_lazy; /* the image read on demand (its indexes, its
				      * source), or NULL: r->image.tree */
	tb_image_fs_t *image_fs;     /* its root, serving the sandbox until it is gone */
	json_t *phase_image;         /* said with the next phase event ("prepared") */
	tb_manifest_t m;
	tb_rate_t rate;
	tb_linebuf_t lines;
	uint64_t line_no;
	int recorded_phase;           /* reached: later phases are not in the manifest */
	tb_egress_t *egress;          /* the sandbox's way out; NULL when it has none */
	struct tb_recorder *recorder; /* the egress recording (egress_run.c), or NULL */
	struct tb_replay *replay;     /* the recording the task replays, or NULL */
	int rec_fd;                   /* ... in this memfd, when there is one */
	uint64_t turn;                /* the prompt the agent is answering, 1-based */
	uint64_t turns_ended;
	int turn_ended;            /* the agent has just ended its turn */
	char ended_why[160];       /* an interactive session ended before the agent did */
	msgpack_sbuffer *verdicts; /* encoded, one per m.verdicts: put with the record */
	pthread_t teardown;        /* destroying sb beside the record's puts */
	int tearing_down;
	int teardown_rc;
	tb_error_t teardown_err;
	/* the accounting (usage.c): the sandbox's counters at the last point
	 * read, and what the torn-down phase says when no result did */
	tb_run_usage_point_t usage_at;
	tb_cgroup_stats_t usage_from, usage_agent;
	json_t *phase_usage;
	uint64_t usage_due; /* monotonic ms: the next usage event (agent.c) */
	int result_sent;    /* the result event went, with the usage */
	int judging;        /* a judge has started */
	int budget_graced;  /* a budget spent: the agent's grace is running */
	int grace_deadline; /* ... and its end comes before the wall-clock deadline */
} tb_run_t;

/* -------------------------------------------------- egress_run.c */

/** Starts the attempt's proxy under the limits @p lim (its budgets, its
 * wall time for the token's end), with the recording when an endpoint of
 * the runtime records, answering from the recording the task replays
 * when it names one. @return as tb_egress_start(); TB_EPOISON when the
 * task replays a task that has no recording (or never will: dead-
 * lettered); the store's error when it cannot be read now */
int tb_run_egress_start(tb_run_t *r, const tb_limits_t *lim, tb_error_t *err);
/** The recording's put, beside the conversation record at
 * @p conversation_key, into @p item; its key into the manifest.
 * @return 1, or 0 when the attempt has no recording */
int tb_run_recording_item(tb_run_t *r, const char *conversation_key, tb_store_put_item_t *item);
/** Stops and frees the proxy, then the recording. */
void tb_run_egress_free(tb_run_t *r);

/* ------------------------------------------------------ record.c */

/** Stamps, records and sends one event whose payload @p source wrote
 * (tb_event_source_t); takes @p payload. A refused event marks the run
 * failed (it cannot be recorded whole). */
void tb_run_emit_from(tb_run_t *r, int source, int type, tb_bytes_t payload);
/** tb_run_emit_from() for the worker's own events. */
void tb_run_emit(tb_run_t *r, int type, tb_bytes_t payload);
/** The worker's event whose payload is @p obj (taken, may be NULL: the
 * run is then failed). */
void tb_run_emit_json(tb_run_t *r, int type, json_t *obj);

/** Adds the task's labels to event payload @p p as "labels" (when it
 * has any; @p p NULL: nothing). */
void tb_run_add_labels(const tb_run_t *r, json_t *p);
/** Phase @p ph reached at @p at (wall ms), @p worker named if not NULL. */
void tb_run_phase_at(tb_run_t *r, tb_phase_t ph, uint64_t at, const char *worker);
/** Phase @p ph reached now. */
void tb_run_phase(tb_run_t *r, tb_phase_t ph);
/** An `error` event with @p code's name, @p reason and @p ph. */
void tb_run_error_event(tb_run_t *r, int code, tb_phase_t ph, const char *reason);
/** @return 0; TB_EFENCED once the run was told to stop. */
int tb_run_cancelled(const tb_run_t *r, tb_error_t *err);
/** Waits for the run's event rate to allow one more of the agent's. */
void tb_run_pace(tb_run_t *r);
/** The egress proxy's records and posted events, as events, paced;
 * @p last: the proxy is stopped, everything goes now. */
void tb_run_egress_flush(tb_run_t *r, tb_phase_t ph, int last);
/** Brings the judges' JSON lines up to date with the record. */
int tb_run_sync_jsonl(tb_run_t *r, tb_error_t *err);
/** Puts the conversation record at @p key and the verdicts beside it. */
int tb_run_put_record(tb_run_t *r, const char *key, tb_error_t *err);

/* ------------------------------------------------------ prepare.c */

/** The "prepared" phase's work: the runtime, the recipe checked out into
 * @p recipe_dir, the inputs fetched into @p inputs_dir ("" when none), the
 * limits into @p lim, the environment's image (r->image, when the recipe
 * or the runtime names one), the sandbox into r->sb. */
int tb_run_prepare(tb_run_t *r, char *recipe_dir, size_t len, char *inputs_dir, size_t ilen,
		   tb_limits_t *lim, tb_error_t *err);

/* --------------------------------------------------- image_done.c */

/** The image root read on demand (r->image_fs), once no sandbox can read
 * it: the bytes fetched ahead counted, the spans read recorded as its
 * image's read order (when none was found), the image pulled whole
 * later; all but the count only when no span was refused. Then stopped
 * (r->image_fs NULL; r->image_lazy is the caller's to free). */
void tb_run_image_done(tb_run_t *r);

/* -------------------------------------------------------- agent.c */

/** Runs the agent until it exits, streaming its events; how it ended
 * into @p end, the last of its output into @p tail. */
int tb_run_agent(tb_run_t *r, tb_sandbox_exit_t *end, char *tail, size_t tail_len, tb_error_t *err);
/** The manifest's outcome for the agent's end. */
int tb_run_outcome(const tb_sandbox_exit_t *e);

/* ------------------------------------------------------- judges.c */

/** Runs the @p index-th judge of the recipe and keeps its verdict (put
 * under @p prefix with the record). @return 0, whatever the verdict;
 * < 0 only when the run cannot go on. */
int tb_run_judge(tb_run_t *r, size_t index, const char *prefix, tb_error_t *err);

/* -------------------------------------------------------- usage.c */

/** Reads the sandbox's counters at @p point (each point once, in order;
 * later points of an attempt that stopped early are skipped) into the
 * manifest's usage; at the agent's end, the egress tally too. */
void tb_run_usage_mark(tb_run_t *r, tb_run_usage_point_t point);
/** The usage's wall time: from the attempt's first phase to @p now_ms. */
void tb_run_usage_wall(tb_run_t *r, uint64_t now_ms);
/** The inputs' figures (fetched so far) into the usage, when the judges'
 * end has not put them there: for an attempt that ends before it. */
void tb_run_usage_inputs(tb_run_t *r);
/** The manifest's usage as JSON, for an event (NULL without memory). */
json_t *tb_run_usage_json(const tb_run_t *r);
/** What the attempt has used so far, while its agent runs (the wall time,
 * the agent's CPU and the sandbox's peaks to now, the egress tally), as
 * JSON for a usage event; r's own figures are left as they are. NULL
 * without memory. */
json_t *tb_run_usage_now(const tb_run_t *r);

#endif
