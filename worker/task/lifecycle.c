/*
 * lifecycle.c: the phases of one attempt, in order (lifecycle.h); each
 * phase's work is in the file run_int.h names for it. The sandbox's teardown
 * runs on a thread of its own beside the record's puts.
 */
#include "run_int.h"

#include "collect.h"
#include "tb/clock.h"
#include "tb/fault.h"
#include "tb/fsutil.h"
#include "tb/json_mpack.h"
#include "tb/log.h"
#include "tb/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#define AGENT_OUTPUT_TAIL 400

/* Step @p s ended now: its time since *@p t (tb_mono_us), which becomes
 * now, the next step's start. */
static void step_done(tb_step_t s, uint64_t *t)
{
	uint64_t now = tb_mono_us();
	tb_metrics_step(s, now - *t);
	*t = now;
}

/* The sandbox's teardown, on its own thread once nothing runs in it: the
 * record's puts go on meanwhile. At nice 10: nothing waits for it before
 * the torn-down phase, and on a busy machine the slots' and services'
 * work, which the acknowledgements wait for, goes first. Most of the
 * teardown's CPU is the kernel's in the dying init's context (and a
 * kernel worker's, for the network namespace), which this does not
 * touch; the task bench measured 117-118 tasks/s at 8 slots against
 * 79-99 without it, within the bench's spread (docs/performance.md).
 * The thread starts no process: nothing inherits it. */
static void *teardown_main(void *arg)
{
	tb_run_t *r = arg;
	uint64_t t0 = tb_mono_us();
	setpriority(PRIO_PROCESS, (id_t)gettid(), 10); /* best effort */
	r->teardown_rc = tb_sandbox_destroy(r->sb, &r->teardown_err);
	tb_metrics_step(TB_STEP_TEARDOWN, tb_mono_us() - t0);
	return NULL;
}

static void start_teardown(tb_run_t *r)
{
	tb_run_usage_mark(r, TB_USAGE_AT_JUDGES_END); /* its last counters */
	/* If no thread can start, the teardown happens at the end instead. */
	r->tearing_down = pthread_create(&r->teardown, NULL, teardown_main, r) == 0;
}

/* The agent's run, @p rc, unless a lazy input or the image's root read
 * on demand failed a read: a block that is not the content the task
 * names (or a span that is not its layer's) fails the attempt for good
 * (the store or the registry holds other bytes, and will again:
 * TB_EPOISON); a store or registry that failed, for now (the attempt is
 * tried again). */
static int lazy_refused(tb_run_t *r, int rc, tb_error_t *err)
{
	char why[1600];

	if (rc < 0)
		return rc;
	int code = r->lazy ? tb_lazy_fs_error(r->lazy, why, sizeof(why)) : 0;
	if (code)
		return tb_error_set(err, code, "%s", why);
	/* the image's root read on demand: a span that is not the layer's
	 * (the image's or its registry's, and will stay so: TB_EPOISON) */
	code = r->image_fs ? tb_image_fs_error(r->image_fs, why, sizeof(why)) : 0;
	return code ? tb_error_set(err, code, "environment: %s", why) : rc;
}

/* After the judges: the run cancelled, or a lazy input a judge read that
 * failed (its verdict stands on bytes that are not the input's). */
static int judged(tb_run_t *r, tb_error_t *err)
{
	int rc = tb_run_cancelled(r, err);
	return rc < 0 ? rc : lazy_refused(r, 0, err);
}

/* Waits for the teardown, or does it; then the "torn-down" phase. */
static void finish_teardown(tb_run_t *r)
{
	if (r->tearing_down || r->sb) {
		uint64_t t0 = tb_mono_us();
		if (r->tearing_down) {
			pthread_join(r->teardown, NULL);
			tb_metrics_step(TB_STEP_TEARDOWN_WAIT, tb_mono_us() - t0);
		} else {
			r->teardown_rc = tb_sandbox_destroy(r->sb, &r->teardown_err);
		}
		r->sb = NULL;
		r->tearing_down = 0;
		if (r->teardown_rc < 0)
			tb_warn(r->task->id, "teardown: %s", r->teardown_err.msg);
		tb_run_phase(r, TB_PHASE_TORN_DOWN);
	}
	/* the lazy inputs' file system, and the environment's image, only
	 * once no sandbox can use them */
	if (r->lazy_mount > 0)
		close(r->lazy_mount);
	r->lazy_mount = 0;
	tb_lazy_fs_stop(r->lazy);
	r->lazy = NULL;
	tb_inputs_free(&r->inputs);
	tb_run_image_done(r);
	tb_image_lazy_free(r->image_lazy);
	r->image_lazy = NULL;
	if (r->has_image)
		tb_image_release(&r->image);
	r->has_image = 0;
	json_decref(r->phase_image);
	r->phase_image = NULL;
	json_decref(r->phase_usage);
	r->phase_usage = NULL;
}

/* The attempt's result event, with the task's labels and its usage. */
static void emit_result(tb_run_t *r, const tb_lifecycle_result_t *out)
{
	json_t *result = json_pack("{s:s,s:s,s:s}", "outcome", tb_outcomes[r->m.outcome], "reason",
				   out->reason, "manifest_key", out->manifest_key);
	json_t *usage = tb_run_usage_json(r);

	tb_run_add_labels(r, result);
	if (result && usage)
		json_object_set_new(result, "usage", usage);
	else
		json_decref(usage);
	tb_run_emit_json(r, TB_EV_RESULT, result);
	r->result_sent = 1;
	tb_metrics_usage(r->task->runtime, r->recipe.name, &r->m.usage);
}

/* An attempt that ends without a result: its usage as far as it got, for
 * the torn-down phase to say. The sandbox is not being torn down yet
 * (that starts only after the judges' point). */
static void usage_unfinished(tb_run_t *r)
{
	if (r->result_sent || !r->sb)
		return;
	if (r->usage_at == TB_USAGE_AT_AGENT_START)
		tb_run_usage_mark(r, TB_USAGE_AT_AGENT_END);
	else if (r->usage_at == TB_USAGE_AT_AGENT_END && r->judging)
		tb_run_usage_mark(r, TB_USAGE_AT_JUDGES_END);
	tb_run_usage_inputs(r); /* what was fetched so far, judges or not */
	tb_run_usage_wall(r, tb_wall_ms());
	r->phase_usage = tb_run_usage_json(r);
	tb_metrics_usage(r->task->runtime, r->recipe.name, &r->m.usage);
}

/* The manifest's own fields, once the record is stored at @p key. */
static void fill_manifest(tb_run_t *r, const char *key)
{
	r->m.task_id = r->task->id;
	r->m.attempt = r->attempt;
	r->m.recipe = r->task->recipe;
	r->m.conversation_key = (char *)key;
	r->m.events = r->seq;
	r->m.finished_at = tb_wall_ms();
	tb_run_usage_wall(r, r->m.finished_at);
}

/* The attempt's outcome and reason from how the agent ended: a budget
 * spent is the task's own outcome, however the agent then ended. */
static void settle_outcome(tb_run_t *r, const tb_sandbox_exit_t *end, const char *tail,
			   tb_lifecycle_result_t *out)
{
	char how[200], spent[700];

	r->m.outcome = tb_run_outcome(end);
	tb_sandbox_end_describe(end, how, sizeof(how));
	if (end->end == TB_SANDBOX_DEADLINE && r->grace_deadline) /* not the wall clock's */
		snprintf(how, sizeof(how), "killed when its budget grace (%llu s) ended",
			 (unsigned long long)r->rt.agent.budget_grace_seconds);
	if (tb_egress_budget_spent(r->egress, spent, sizeof(spent))) {
		r->m.outcome = TB_OUTCOME_BUDGET;
		snprintf(out->reason, sizeof(out->reason), "%.256s; then the agent %.100s", spent,
			 how);
	} else if (tb_egress_replay_missed(r->egress, spent, sizeof(spent))) {
		r->m.outcome = TB_OUTCOME_FAILED;
		snprintf(out->reason, sizeof(out->reason), "%.380s; then the agent %.100s", spent,
			 how);
	} else if (r->m.outcome != TB_OUTCOME_SUCCEEDED) {
		snprintf(out->reason, sizeof(out->reason), "the agent %.100s%s%.380s", how,
			 tail[0] ? "; its last output: " : "", tail);
		tb_utf8_sanitize(out->reason); /* the cut may split a character */
	} else if (r->ended_why[0]) {
		snprintf(out->reason, sizeof(out->reason), "the session ended: %s", r->ended_why);
	}
	if (out->reason[0])
		r->m.reason = out->reason;
}

/* ---------------------------------------------------------------- run */

/* What one attempt's phases hand each other, beside its tb_run_t. */
typedef struct attempt {
	char recipe_dir[4096], inputs_dir[4096]; /* the checkout; the eager inputs */
	char prefix[512];                        /* tasks/<id>/<attempt>/ in the store */
	char record_key[600];                    /* the manifest points into it */
	tb_limits_t lim;
} attempt_t;

/* @p rc, after the error event of phase @p ph when it is an error. */
static int failed_in(tb_run_t *r, tb_phase_t ph, int rc, const tb_error_t *err)
{
	if (rc < 0)
		tb_run_error_event(r, rc, ph, err->msg);
	return rc;
}

/* The attempt's own files and the phases the worker went through before
 * this slot started (they carry the worker's times). */
static int begin(tb_run_t *r, attempt_t *a, tb_error_t *err)
{
	const tb_lifecycle_ctx_t *ctx = r->ctx;

	r->phase_ms = tb_wall_ms();
	r->m.started_at = r->phase_ms;
	r->m.runtime = r->task->runtime;
	r->record_fd = memfd_create("taskbox-conversation", MFD_CLOEXEC);
	r->jsonl_fd = memfd_create("taskbox-conversation-jsonl", MFD_CLOEXEC);
	/* The JSONL is appended to as events go; each judge reads a sealed
	 * copy of it (judge_input). */
	if (r->record_fd < 0 || r->jsonl_fd < 0 || fcntl(r->jsonl_fd, F_SETFL, O_APPEND) < 0)
		return tb_error_errno(err, TB_EIO, errno, "lifecycle: memfd");
	if (!(r->m.phases.items = calloc(TB_RUN_MAX_PHASES, sizeof(tb_phase_time_t))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	snprintf(a->prefix, sizeof(a->prefix), "tasks/%s/%llu/", r->task->id,
		 (unsigned long long)r->attempt);
	uint64_t got = ctx->received_ms ? ctx->received_ms : r->phase_ms;
	r->phase_ms = got;
	tb_run_phase_at(r, TB_PHASE_RECEIVED, got, ctx->worker);
	tb_run_phase_at(r, TB_PHASE_VALIDATED, got, NULL);
	tb_run_phase_at(r, TB_PHASE_CLAIMED, ctx->claimed_ms ? ctx->claimed_ms : tb_wall_ms(),
			NULL);
	return 0;
}

/* prepared: the recipe, the inputs, the sandbox and its way out. */
static int prepare(tb_run_t *r, attempt_t *a, tb_error_t *err)
{
	int rc;

	if ((rc = tb_run_prepare(r, a->recipe_dir, sizeof(a->recipe_dir), a->inputs_dir,
				 sizeof(a->inputs_dir), &a->lim, err)) < 0)
		return failed_in(r, TB_PHASE_PREPARED, rc, err);
	/* The sandbox's one way out, for the agent only (judges get no token). */
	uint64_t t0 = tb_mono_us();
	if ((rc = tb_run_egress_start(r, &a->lim, err)) < 0)
		return failed_in(r, TB_PHASE_PREPARED, rc, err);
	tb_metrics_step(TB_STEP_EGRESS_START, tb_mono_us() - t0);
	tb_rate_init(&r->rate, r->rt.agent.max_events_per_second, tb_wall_ms());
	tb_run_phase(r, TB_PHASE_PREPARED);
	return failed_in(r, TB_PHASE_PREPARED, tb_run_cancelled(r, err), err);
}

/* running, to settled: the agent's run and how it ended. */
static int run_agent(tb_run_t *r, tb_lifecycle_result_t *out, tb_error_t *err)
{
	char tail[AGENT_OUTPUT_TAIL];
	tb_sandbox_exit_t end;
	int rc;

	tb_run_phase(r, TB_PHASE_RUNNING);
	tb_run_usage_mark(r, TB_USAGE_AT_AGENT_START);
	rc = tb_run_agent(r, &end, tail, sizeof(tail), err);
	tb_sandbox_disarm_deadline(r->sb); /* the judges have timeouts of their own */
	/* The agent and everything it started are gone: so is its way out,
	 * and its last egress records are events before it settles. */
	tb_egress_stop(r->egress);
	tb_run_egress_flush(r, TB_PHASE_RUNNING, 1);
	if ((rc = lazy_refused(r, rc, err)) < 0)
		return failed_in(r, TB_PHASE_RUNNING, rc, err);
	settle_outcome(r, &end, tail, out);
	if (r->ctx->session && r->task->kind == TB_TASK_INTERACTIVE) {
		r->m.turns = r->turns_ended;
		r->m.followups = tb_session_taken(r->ctx->session);
		TB_SET_HAS(&r->m, TB_MANIFEST_TURNS);
		TB_SET_HAS(&r->m, TB_MANIFEST_FOLLOWUPS);
	}
	tb_run_phase(r, TB_PHASE_SETTLED);
	/* Whatever the agent left running ends before anything is read. */
	if ((rc = tb_sandbox_kill_all(r->sb, err)) < 0) {
		tb_error_prefix(err, "ending what the agent left running");
		return failed_in(r, TB_PHASE_SETTLED, rc, err);
	}
	tb_run_usage_mark(r, TB_USAGE_AT_AGENT_END);
	return failed_in(r, TB_PHASE_SETTLED, tb_run_cancelled(r, err), err);
}

/* collected: the outputs to the store, an event for each. */
static int collect(tb_run_t *r, const attempt_t *a, tb_error_t *err)
{
	char outputs[128], key[600];
	int rc;

	snprintf(outputs, sizeof(outputs), "/proc/%d/root/outputs",
		 (int)tb_sandbox_init_pid(r->sb));
	snprintf(key, sizeof(key), "%soutputs/", a->prefix);
	tb_collect_limits_t cl = { r->rt.sandbox.max_output_files, a->lim.outputs_mb << 20 };
	if ((rc = tb_collect_outputs(&r->m, r->ctx->store, outputs, key, &cl, err)) < 0)
		return failed_in(r, TB_PHASE_COLLECTED, rc, err);
	for (size_t i = 0; i < r->m.artifacts.n; i++) {
		const tb_artifact_t *art = (const tb_artifact_t *)r->m.artifacts.items + i;
		tb_run_emit_json(r, TB_EV_ARTIFACT,
				 json_pack("{s:s,s:s,s:I,s:s}", "path", art->path, "key", art->key,
					   "size", (json_int_t)art->size, "sha256", art->sha256));
	}
	tb_run_phase(r, TB_PHASE_COLLECTED);
	return 0;
}

/* judged: each judge in turn, on the finished conversation. */
static int judge_all(tb_run_t *r, const attempt_t *a, tb_error_t *err)
{
	int rc;

	for (size_t i = 0; i < r->recipe.judges.n; i++)
		if ((rc = tb_run_cancelled(r, err)) < 0 ||
		    (rc = tb_run_judge(r, i, a->prefix, err)) < 0)
			return failed_in(r, TB_PHASE_JUDGED, rc, err);
	tb_run_phase(r, TB_PHASE_JUDGED);
	return failed_in(r, TB_PHASE_JUDGED, judged(r, err), err);
}

/* The manifest, last: it names only objects that exist. */
static int put_manifest(tb_run_t *r, const attempt_t *a, tb_lifecycle_result_t *out,
			tb_error_t *err)
{
	msgpack_sbuffer sb;
	int rc;

	msgpack_sbuffer_init(&sb);
	snprintf(out->manifest_key, sizeof(out->manifest_key), "%smanifest.msgpack", a->prefix);
	if ((rc = tb_msg_encode(&sb, &tb_schema_manifest, &r->m, err)) == 0)
		rc = tb_store_put_bytes(r->ctx->store, out->manifest_key, sb.data, sb.size, NULL,
					err);
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

/* recorded: the sandbox goes while the record and then the manifest are
 * stored; the result and every event delivered; the done-marker. */
static int record(tb_run_t *r, attempt_t *a, tb_lifecycle_result_t *out, tb_error_t *err)
{
	int rc;

	/* Nothing runs in the sandbox any more: it goes while the record is
	 * stored (its phase, torn-down, still comes after recorded). */
	start_teardown(r);
	tb_run_phase(r, TB_PHASE_RECORDED); /* the record's last events, then the record */
	snprintf(a->record_key, sizeof(a->record_key), "%sconversation.msgpack", a->prefix);
	uint64_t t = tb_mono_us();
	if ((rc = tb_run_put_record(r, a->record_key, err)) < 0)
		return failed_in(r, TB_PHASE_RECORDED, rc, err);
	step_done(TB_STEP_STORE_RECORD, &t);
	fill_manifest(r, a->record_key);
	if (r->failed) /* the events are the record: incomplete, not recorded */
		return tb_error_set(err, TB_ERETRY, "events: %s",
				    r->sink_err.msg[0] ? r->sink_err.msg : "could not be recorded");
	if ((rc = put_manifest(r, a, out, err)) < 0)
		return failed_in(r, TB_PHASE_RECORDED, rc, err);
	step_done(TB_STEP_STORE_MANIFEST, &t);
	tb_fault_point("manifest-durable");
	/* The result, and every event delivered, before the done-marker: a
	 * worker that dies after it leaves the attempt's events whole up to
	 * the result (only torn-down and acknowledged may be missing). */
	emit_result(r, out);
	const tb_lifecycle_ctx_t *ctx = r->ctx;
	if (r->failed || (ctx->sink.flush && ctx->sink.flush(ctx->sink.ud, &r->sink_err) < 0))
		return tb_error_set(err, TB_ERETRY, "events: %s",
				    r->sink_err.msg[0] ? r->sink_err.msg
						       : "could not be delivered");
	step_done(TB_STEP_EVENTS_DELIVERED, &t);
	/* The done-marker only after the record is durable (invariant 2);
	 * the ledger refuses it (TB_EFENCED) if a newer attempt began. */
	if (ctx->recorded && (rc = ctx->recorded(ctx->recorded_ud, r->task->id, r->attempt,
						 out->manifest_key, err)) < 0)
		return failed_in(r, TB_PHASE_RECORDED, rc, err);
	step_done(TB_STEP_DONE_MARKER, &t);
	tb_fault_point("done-marked");
	return 0;
}

/* However the attempt ended: once recorded it stands, and what fails
 * after is logged (the worker's sweep removes what is left). The proxy
 * goes before the sandbox (already, when the agent ran). */
static void finish(tb_run_t *r, const attempt_t *a, tb_lifecycle_result_t *out)
{
	tb_egress_stop(r->egress);
	tb_run_egress_flush(r, TB_PHASE_TORN_DOWN, 1);
	usage_unfinished(r);
	tb_run_egress_free(r);
	finish_teardown(r);
	if (r->task->inputs.n && a->inputs_dir[0])
		tb_remove_tree(AT_FDCWD, a->inputs_dir);
	out->outcome = r->m.outcome;
	out->followups = r->ctx->session ? tb_session_taken(r->ctx->session) : 0;
	out->last_ms = r->phase_ms;
	out->events = r->seq;
	/* Borrowed pointers out of the manifest before freeing what it owns. */
	r->m.task_id = NULL, r->m.reason = NULL, r->m.conversation_key = NULL, r->m.runtime = NULL;
	r->m.recipe.url = NULL, r->m.recipe.commit = NULL;
	for (size_t i = 0; r->verdicts && i < r->m.verdicts.n; i++)
		msgpack_sbuffer_destroy(&r->verdicts[i]);
	free(r->verdicts);
	tb_msg_free(&tb_schema_manifest, &r->m);
	tb_recipe_manifest_free(&r->recipe);
	tb_runtime_free(&r->rt);
	if (r->record_fd >= 0)
		close(r->record_fd);
	if (r->jsonl_fd >= 0)
		close(r->jsonl_fd);
}

int tb_lifecycle_run(const tb_lifecycle_ctx_t *ctx, const tb_task_t *task, uint64_t attempt,
		     tb_lifecycle_result_t *out, tb_error_t *err)
{
	tb_run_t r = { 0 };
	attempt_t a;
	int rc;

	memset(out, 0, sizeof(*out));
	r.ctx = ctx, r.task = task, r.attempt = attempt;
	a.inputs_dir[0] = '\0';
	/* The phases in order, each to the first that fails (with its error
	 * event); finish() runs either way. */
	rc = begin(&r, &a, err);
	if (rc == 0)
		rc = prepare(&r, &a, err);
	if (rc == 0)
		rc = run_agent(&r, out, err);
	if (rc == 0)
		rc = collect(&r, &a, err);
	if (rc == 0)
		rc = judge_all(&r, &a, err);
	if (rc == 0)
		rc = record(&r, &a, out, err);
	finish(&r, &a, out);
	return rc;
}

int tb_lifecycle_acknowledged(const tb_event_sink_t *sink, const char *task, uint64_t attempt,
			      uint64_t seq, uint64_t since_ms, tb_error_t *err)
{
	uint64_t now = tb_wall_ms();
	json_t *p = json_pack("{s:s,s:I}", "phase", tb_phase_name(TB_PHASE_ACKNOWLEDGED),
			      "duration_ms", (json_int_t)(now > since_ms ? now - since_ms : 0));
	tb_event_t ev = { 0 };
	msgpack_sbuffer pb, sb;
	int rc;

	msgpack_sbuffer_init(&pb);
	msgpack_sbuffer_init(&sb);
	if (!p) {
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
	} else if ((rc = tb_json_to_mpack(&pb, p, err)) == 0) {
		ev.task_id = (char *)task;
		ev.attempt = attempt;
		ev.seq = seq;
		ev.ts = now;
		ev.type = TB_EV_PHASE;
		ev.source = TB_SOURCE_WORKER;
		TB_SET_HAS(&ev, TB_EVENT_F_SOURCE);
		ev.payload.data = (uint8_t *)pb.data;
		ev.payload.len = pb.size;
		if ((rc = tb_msg_encode(&sb, &tb_schema_event, &ev, err)) == 0)
			rc = sink->emit(sink->ud, &ev, sb.data, sb.size, err);
	}
	json_decref(p);
	msgpack_sbuffer_destroy(&pb);
	msgpack_sbuffer_destroy(&sb);
	return rc;
}
