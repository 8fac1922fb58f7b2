/*
 * lifecycle.c: the phases of one one-shot attempt. Each helper below does
 * one phase's work; tb_lifecycle_run() is the order.
 *
 * The conversation is kept twice while the attempt runs, both in memfds:
 * as the MessagePack record saved to the store (schemas/keys.md), and as
 * JSON lines for the judges' standard input. Nothing grows in the
 * worker's heap with the conversation's length.
 */
#include "lifecycle.h"

#include "tb/clock.h"
#include "tb/agent_events.h"
#include "collect.h"
#include "egress.h"
#include "tb/fault.h"
#include "inputs.h"
#include "tb/metrics.h"
#include "tb/store_put_all.h"
#include "tb/fsutil.h"
#include "tb/json_mpack.h"
#include "tb/runtime.h"
#include "tb/schema_verdict.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define AGENT_OUTPUT_TAIL 400
#define MAX_PHASES 16

typedef struct run {
	const tb_lifecycle_ctx_t *ctx;
	const tb_task_t *task;
	uint64_t attempt;
	uint64_t seq;
	uint64_t phase_ms;
	int record_fd;    /* conversation record: MessagePack events */
	int jsonl_fd;     /* the same as JSON lines, for the judges (see sync_jsonl) */
	off_t jsonl_from; /* how much of the record is in it */
	int failed;       /* the sink refused an event */
	tb_error_t sink_err;
	tb_runtime_t rt;
	tb_recipe_manifest_t recipe;
	tb_sandbox_t *sb;
	tb_manifest_t m;
	tb_rate_t rate;
	tb_linebuf_t lines;
	uint64_t line_no;
	int recorded_phase;  /* reached: later phases are not in the manifest */
	tb_egress_t *egress; /* the sandbox's way out; NULL when it has none */
	uint64_t turn;       /* the prompt the agent is answering, 1-based */
	uint64_t turns_ended;
	int turn_ended;            /* the agent has just ended its turn */
	char ended_why[160];       /* an interactive session ended before the agent did */
	msgpack_sbuffer *verdicts; /* encoded, one per m.verdicts: put with the record */
	pthread_t teardown;        /* destroying sb beside the record's puts */
	int tearing_down;
	int teardown_rc;
	tb_error_t teardown_err;
} run_t;

/* Stamps, records and sends one event whose payload @p source wrote
 * (tb_event_source_t); takes ownership of payload. */
static void emit_from(run_t *r, int source, int type, tb_bytes_t payload)
{
	tb_event_t ev = { 0 };
	msgpack_sbuffer sb;
	tb_error_t err;

	ev.task_id = r->task->id;
	ev.attempt = r->attempt;
	ev.seq = r->seq++;
	ev.ts = tb_wall_ms();
	ev.type = type;
	ev.source = source;
	TB_SET_HAS(&ev, TB_EVENT_F_SOURCE);
	ev.payload = payload;
	msgpack_sbuffer_init(&sb);
	if (tb_msg_encode(&sb, &tb_schema_event, &ev, &err) < 0) {
		/* Only an oversized payload can get here: say so instead. */
		free(payload.data);
		msgpack_sbuffer_destroy(&sb);
		r->seq--;
		tb_bytes_t e;
		if (type != TB_EV_ERROR && tb_agent_error_payload(&e, err.code, err.msg) == 0)
			emit_from(r, TB_SOURCE_WORKER, TB_EV_ERROR, e);
		return;
	}
	if (tb_write_all(r->record_fd, sb.data, sb.size) < 0)
		r->failed = 1;
	if (r->ctx->sink.emit &&
	    r->ctx->sink.emit(r->ctx->sink.ud, &ev, sb.data, sb.size, &r->sink_err) < 0)
		r->failed = 1;
	free(payload.data);
	msgpack_sbuffer_destroy(&sb);
}

/* An event the worker wrote: everything but what the agent sent. */
static void emit(run_t *r, int type, tb_bytes_t payload)
{
	emit_from(r, TB_SOURCE_WORKER, type, payload);
}

/*
 * Brings the judges' JSON lines up to date with the record: each event as
 * {"type", "seq", "source", "payload"}. Done when a judge is about to read them, not
 * per event: a chatty agent's events cost one conversion less each on the
 * way out.
 */
static int sync_jsonl(run_t *r, tb_error_t *err)
{
	off_t end = lseek(r->record_fd, 0, SEEK_END);
	size_t len = end > r->jsonl_from ? (size_t)(end - r->jsonl_from) : 0, off = 0;
	char *buf = len ? malloc(len) : NULL;
	int rc = 0;

	if (len && (!buf || pread(r->record_fd, buf, len, r->jsonl_from) != (ssize_t)len)) {
		free(buf);
		return tb_error_errno(err, TB_EIO, errno, "lifecycle: read the record");
	}
	while (off < len && rc == 0) {
		msgpack_unpacked u;
		size_t at = off;
		tb_event_t ev;
		json_t *pj = NULL;
		msgpack_unpacked_init(&u);
		if (msgpack_unpack_next(&u, buf, len, &off) != MSGPACK_UNPACK_SUCCESS) {
			msgpack_unpacked_destroy(&u);
			rc = tb_error_set(err, TB_EIO, "lifecycle: the record is corrupt at %zu",
					  at);
			break;
		}
		msgpack_unpacked_destroy(&u);
		if ((rc = tb_msg_decode(&tb_schema_event, &ev, buf + at, off - at, err)) < 0)
			break;
		/* a payload JSON cannot hold (an integer past int64) is left
		 * out of the judges' lines, not fatal: it is in the record */
		if (tb_mpack_to_json(&pj, ev.payload.data, ev.payload.len, err) == 0) {
			/* no source is unknown, never worker (schemas/event.md) */
			const char *source = TB_HAS(&ev, TB_EVENT_F_SOURCE)
						 ? tb_event_source_name(ev.source)
						 : NULL;
			json_t *line =
			    json_pack("{s:s,s:I,s:s*,s:O}", "type", tb_event_type_name(ev.type),
				      "seq", (json_int_t)ev.seq, "source", source, "payload", pj);
			char *text =
			    line ? json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
			if (!text || tb_write_all(r->jsonl_fd, text, strlen(text)) < 0 ||
			    tb_write_all(r->jsonl_fd, "\n", 1) < 0)
				rc = tb_error_errno(err, TB_EIO, errno, "lifecycle: JSON lines");
			free(text);
			json_decref(line);
			json_decref(pj);
		}
		tb_msg_free(&tb_schema_event, &ev);
	}
	free(buf);
	if (rc == 0)
		r->jsonl_from = end;
	return rc;
}

/* Emits an event whose payload is built from a JSON object (consumed). */
static void emit_json(run_t *r, int type, json_t *obj)
{
	msgpack_sbuffer sb;
	tb_error_t err;

	msgpack_sbuffer_init(&sb);
	if (obj && tb_json_to_mpack(&sb, obj, &err) == 0) {
		tb_bytes_t p = { sb.size, (uint8_t *)msgpack_sbuffer_release(&sb) };
		emit(r, type, p);
	} else {
		msgpack_sbuffer_destroy(&sb);
		r->failed = 1;
	}
	json_decref(obj);
}

/* Phase @p ph, reached at @p at (ms): the previous phase took the rest. */
static void phase_at(run_t *r, tb_phase_t ph, uint64_t at, const char *worker)
{
	const char *name = tb_phase_name(ph);
	uint64_t took = at > r->phase_ms ? at - r->phase_ms : 0;
	json_t *p = json_pack("{s:s,s:I}", "phase", name, "duration_ms", (json_int_t)took);

	if (p && worker)
		json_object_set_new(p, "worker", json_string(worker));
	emit_json(r, TB_EV_PHASE, p);
	tb_metrics_phase(ph, took);
	if (r->ctx->sink.phase)
		r->ctx->sink.phase(r->ctx->sink.ud, ph);
	/* The manifest keeps the phases up to "recorded", the last before
	 * it is written. */
	if (r->m.phases.items && r->m.phases.n < MAX_PHASES && !r->recorded_phase) {
		tb_phase_time_t *t = (tb_phase_time_t *)r->m.phases.items + r->m.phases.n;
		if ((t->name = strdup(name))) {
			t->at = at;
			t->duration_ms = took;
			r->m.phases.n++;
		}
	}
	r->recorded_phase |= ph == TB_PHASE_RECORDED;
	r->phase_ms = at > r->phase_ms ? at : r->phase_ms;
	tb_fault_point(name);
}

/* TB_EFENCED if the run was told to stop (its lease is lost). */
static int cancelled(const run_t *r, tb_error_t *err)
{
	if (r->ctx->cancel && atomic_load(r->ctx->cancel))
		return tb_error_set(err, TB_EFENCED,
				    "the lease on this attempt was lost: stopped, nothing written");
	return 0;
}

static void phase(run_t *r, tb_phase_t ph)
{
	phase_at(r, ph, tb_wall_ms(), NULL);
}

/* An error event, said to have happened in phase @p ph. */
static void error_event(run_t *r, int code, tb_phase_t ph, const char *reason)
{
	emit_json(r, TB_EV_ERROR,
		  json_pack("{s:s,s:s,s:s}", "code", tb_error_name(code), "reason", reason, "phase",
			    tb_phase_name(ph)));
}

/* Pacing the agent's events: wait for a token rather than buffer; the
 * agent's writes (or its posts, once the proxy's queue is full) wait
 * meanwhile, so a flood costs it time, not the worker memory. */
static void pace(run_t *r)
{
	uint64_t wait;
	while ((wait = tb_rate_take(&r->rate, tb_wall_ms())) > 0)
		usleep((useconds_t)(wait * 1000));
}

/* Egress records become events here, on the lifecycle's thread. */
static void emit_egress(void *ud, json_t *payload)
{
	emit_json(ud, TB_EV_EGRESS, payload);
}

/* An event the agent posted through the proxy (POST /_taskbox/events),
 * parsed there as fd 3's lines are: emitted as one of them would be. */
static void emit_posted(void *ud, int type, tb_bytes_t payload)
{
	pace(ud);
	emit_from(ud, TB_SOURCE_AGENT, type, payload);
}

/* Paced by the run's event rate, as the agent's events are (a loop of
 * refused requests must not flood the events topic); what finds no room
 * is summarised per status (tb_egress_drain). @p last: the proxy is
 * stopped, every summary goes out now. */
static void egress_flush(run_t *r, tb_phase_t ph, int last)
{
	char why[128];
	uint64_t dropped =
	    tb_egress_drain(r->egress, &r->rate, tb_wall_ms(), last, emit_egress, emit_posted, r);
	if (dropped) {
		snprintf(why, sizeof(why), "%llu egress records dropped: over %d waiting",
			 (unsigned long long)dropped, TB_EGRESS_QUEUE_MAX);
		error_event(r, TB_ETOOBIG, ph, why);
	}
}

/* ------------------------------------------------------------ prepare */

static int prepare(run_t *r, char *recipe_dir, size_t len, char *inputs_dir, size_t ilen,
		   tb_limits_t *lim, tb_error_t *err)
{
	const tb_lifecycle_ctx_t *ctx = r->ctx;
	char path[4096];
	int rc;

	snprintf(path, sizeof(path), "%s/%s.json", ctx->runtimes_dir, r->task->runtime);
	if ((rc = tb_runtime_load(&r->rt, path, err)) < 0)
		return rc == TB_ENOTFOUND
			   ? tb_error_set(err, TB_EPOISON, "unknown runtime '%s'", r->task->runtime)
			   : rc;
	if ((rc = tb_recipe_checkout(ctx->recipes, r->task->recipe.url, r->task->recipe.commit,
				     recipe_dir, len, &r->recipe, err)) < 0)
		return rc;
	if ((rc = tb_runtime_limits(lim, &r->rt, &r->recipe.limits, &r->task->limits, err)) < 0)
		return rc;
	inputs_dir[0] = '\0';
	if (r->task->inputs.n) {
		snprintf(inputs_dir, ilen, "%s/%s-inputs-%s-%llu", ctx->work_root, ctx->group,
			 r->task->id, (unsigned long long)r->attempt);
		tb_remove_tree(AT_FDCWD, inputs_dir); /* a crashed attempt's */
		if ((rc = tb_inputs_fetch(ctx->store, ctx->ledger, r->task, inputs_dir, err)) < 0)
			return rc;
	}
	char name[256];
	snprintf(name, sizeof(name), "%s-%llu", r->task->id, (unsigned long long)r->attempt);
	tb_sandbox_spec_t spec = {
		.name = name,
		.hostname = "task",
		.slot = ctx->slot,
		.work_root = ctx->work_root,
		.group = ctx->group,
		.ro_binds = &r->rt.sandbox.ro_binds,
		.recipe_dir = recipe_dir,
		.inputs_dir = inputs_dir[0] ? inputs_dir : NULL,
		.workspace_mb = r->rt.sandbox.workspace_mb,
		.outputs_mb = lim->outputs_mb,
		.memory_mb = lim->memory_mb,
		.pids = lim->pids,
		.cpu_millis = lim->cpu_millis,
		.max_open_files = r->rt.sandbox.max_open_files,
		.max_file_mb = r->rt.sandbox.max_file_mb,
		.wall_ms = lim->wall_seconds * 1000,
	};
	uint64_t t0 = tb_mono_us();
	rc = ctx->pool ? tb_sandbox_pool_create(ctx->pool, &spec, &r->sb, NULL, err)
		       : tb_sandbox_create(&r->sb, ctx->policy, &spec, err);
	if (rc == 0)
		tb_metrics_launch(tb_mono_us() - t0);
	return rc;
}

/* -------------------------------------------------------------- agent */

/* Keeps, of the @p n "NAME=value" strings in @p envp, the last one for each
 * name, in order: the recipe's over the runtime's over the fixed ones, as
 * agent.md promises (with duplicates, getenv() finds the first). Freed
 * ones are wiped first: one may be the task token. @return how many are
 * left. */
static int env_last_wins(char **envp, int n)
{
	int kept = 0;

	for (int i = 0; i < n; i++) {
		size_t len = strcspn(envp[i], "=");
		int later = 0;
		for (int j = i + 1; j < n && !later; j++)
			later = !strncmp(envp[i], envp[j], len + 1);
		if (later) {
			explicit_bzero(envp[i], strlen(envp[i]));
			free(envp[i]);
		} else {
			envp[kept++] = envp[i];
		}
	}
	return kept;
}

struct line_ctx {
	run_t *r;
};

static void on_agent_line(void *ud, const char *line, size_t len, int too_long)
{
	run_t *r = ((struct line_ctx *)ud)->r;
	char why[600];
	tb_bytes_t payload;
	tb_error_t err;
	int type;

	r->line_no++;
	pace(r);
	if (too_long) {
		snprintf(why, sizeof(why), "line %llu: %zu bytes, over the runtime's %llu",
			 (unsigned long long)r->line_no, len,
			 (unsigned long long)r->rt.agent.max_event_bytes);
		if (tb_agent_error_payload(&payload, TB_ETOOBIG, why) == 0)
			emit(r, TB_EV_ERROR, payload);
		return;
	}
	if (tb_agent_parse_line(&type, &payload, line, len, &err) < 0) {
		snprintf(why, sizeof(why), "line %llu: %.500s", (unsigned long long)r->line_no,
			 err.msg);
		tb_utf8_sanitize(why); /* it may quote the line */
		if (tb_agent_error_payload(&payload, TB_EINVAL, why) == 0)
			emit(r, TB_EV_ERROR, payload);
		return;
	}
	if (type == TB_EV_TURN) { /* numbered here: the agent need not count */
		free(payload.data);
		r->turn_ended = 1;
		r->turns_ended++;
		emit_json(
		    r, TB_EV_TURN,
		    json_pack("{s:s,s:I}", "state", "turn-ended", "turn", (json_int_t)r->turn));
		return;
	}
	emit_from(r, TB_SOURCE_AGENT, type, payload);
}

/* ------------------------------------------------ interactive sessions */

/*
 * An interactive task's side of the agent: the prompts go to its input one
 * turn at a time, as the session's follow-ups arrive (session.h); between
 * turns the sandbox is frozen and the session idle; an `end`, the idle
 * timeout or the deadline ends it. The input is a socket, not a pipe: an
 * agent that closed it must not SIGPIPE the worker.
 */
typedef struct turns {
	tb_session_t *s;
	int wr;        /* the agent's input; -1 once closed */
	char *pending; /* what is not written yet */
	size_t plen, poff;
	int close_after; /* close the input once pending is written */
	enum { T_RUNNING, T_IDLE, T_ENDING } st;
	int frozen;
	uint64_t idle_since, idle_ms; /* monotonic ms */
	uint64_t ending_since;        /* the end sent: the agent has ENDING_GRACE_MS */
	int killed;
} turns_t;

/* How long an agent has to exit after its session's end, before its
 * processes are killed (it then settles as it ended). */
#define ENDING_GRACE_MS 30000

/* Queues one protocol line for the agent's input. */
static void queue_line(turns_t *t, json_t *obj)
{
	char *line = obj ? json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	size_t n = line ? strlen(line) : 0;

	json_decref(obj);
	if (!line)
		abort(); /* out of memory */
	if (t->poff == t->plen)
		t->poff = t->plen = 0;
	char *more = realloc(t->pending, t->plen + n + 1);
	if (!more)
		abort();
	t->pending = more;
	memcpy(t->pending + t->plen, line, n);
	t->pending[t->plen + n] = '\n';
	t->plen += n + 1;
	free(line);
}

/* Writes what it can without blocking; closes the input after an end. */
static void flush_input(turns_t *t)
{
	while (t->wr >= 0 && t->poff < t->plen) {
		ssize_t n = send(t->wr, t->pending + t->poff, t->plen - t->poff,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0)
			t->poff += (size_t)n;
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		else { /* the agent closed its input: nothing more reaches it */
			t->poff = t->plen;
			break;
		}
	}
	if (t->wr >= 0 && t->close_after && t->poff == t->plen) {
		close(t->wr);
		t->wr = -1;
	}
}

static void thaw_turns(run_t *r, turns_t *t)
{
	tb_error_t err;

	if (t->frozen && tb_sandbox_freeze(r->sb, 0, &err) < 0)
		tb_warn(r->task->id, "thaw: %s", err.msg);
	t->frozen = 0;
}

static void end_session(run_t *r, turns_t *t, const char *why)
{
	thaw_turns(r, t);
	tb_session_close(t->s, why);
	snprintf(r->ended_why, sizeof(r->ended_why), "%s", why);
	queue_line(t, json_pack("{s:s}", "type", "end"));
	t->close_after = 1;
	t->st = T_ENDING;
	t->ending_since = tb_mono_ms();
}

/* The agent is ready for its next prompt: the next follow-up, the end,
 * or, with none yet, idle (frozen) until one comes. */
static void next_turn(run_t *r, turns_t *t)
{
	tb_error_t err;
	uint64_t seq;
	char *text;
	int kind;

	if (!tb_session_take(t->s, &kind, &text, &seq)) {
		if (t->st == T_IDLE)
			return;
		t->st = T_IDLE;
		t->idle_since = tb_mono_ms();
		emit_json(r, TB_EV_TURN,
			  json_pack("{s:s,s:I}", "state", "idle", "turn", (json_int_t)r->turn));
		if (tb_sandbox_freeze(r->sb, 1, &err) == 0)
			t->frozen = 1;
		else /* no freezer here: idle, but not free */
			tb_info(r->task->id, "idle without freezing: %s", err.msg);
		return;
	}
	thaw_turns(r, t);
	if (kind == TB_FOLLOWUP_END) {
		end_session(r, t, "ended by its producer");
		return;
	}
	r->turn++;
	emit_json(r, TB_EV_MESSAGE, json_pack("{s:s,s:s}", "role", "user", "text", text));
	emit_json(r, TB_EV_TURN,
		  json_pack("{s:s,s:I,s:I}", "state", "turn-started", "turn", (json_int_t)r->turn,
			    "followup", (json_int_t)seq));
	queue_line(t, json_pack("{s:s,s:I,s:s}", "type", "prompt", "turn", (json_int_t)r->turn,
				"text", text));
	free(text);
	t->st = T_RUNNING;
	tb_fault_point("turn-started");
}

/* After the agent's output was read: turn ends, follow-ups, idle time. */
static void drive_turns(run_t *r, turns_t *t, int followup_ready)
{
	if (r->turn_ended) {
		r->turn_ended = 0;
		if (t->st == T_RUNNING)
			next_turn(r, t);
	}
	if (t->st == T_IDLE && followup_ready) {
		next_turn(r, t);
	} else if (t->st == T_IDLE && tb_mono_ms() - t->idle_since >= t->idle_ms) {
		char why[96];
		snprintf(why, sizeof(why), "idle for %llu s",
			 (unsigned long long)(t->idle_ms / 1000));
		end_session(r, t, why);
	} else if (t->st == T_ENDING && !t->killed &&
		   tb_mono_ms() - t->ending_since >= ENDING_GRACE_MS) {
		tb_warn(r->task->id, "the agent did not exit %d s after its session's end: killed",
			ENDING_GRACE_MS / 1000);
		tb_sandbox_kill_all(r->sb, NULL);
		t->killed = 1;
	}
	flush_input(t);
}

/* Reads what the agent wrote on fd 3 until it exits; fills @p end. */
static int run_agent(run_t *r, tb_sandbox_exit_t *end, char *tail, size_t tail_len, tb_error_t *err)
{
	tail[0] = '\0';
	const tb_recipe_manifest_t *rm = &r->recipe;
	char *envp[512], buf[65536];
	const char *argv[65];
	int in = -1, out = -1, ev[2] = { -1, -1 }, id = 0, rc, n = 0;
	struct line_ctx lc = { r };
	char attempt[32];
	turns_t t = { .s = r->ctx->session, .wr = -1 };
	int interactive = t.s && r->task->kind == TB_TASK_INTERACTIVE;

	r->turn = 1;
	out = memfd_create("taskbox-agent-output", MFD_CLOEXEC);
	json_t *prompt =
	    json_pack("{s:s,s:i,s:s}", "type", "prompt", "turn", 1, "text", r->task->prompt);
	char *line = prompt ? json_dumps(prompt, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(prompt);
	int sv[2] = { -1, -1 };
	/* The prompt is the record's first message, whatever the kind of
	 * task: the judges grade the answer against what was asked. */
	emit_json(r, TB_EV_MESSAGE,
		  json_pack("{s:s,s:s}", "role", "user", "text", r->task->prompt));
	if (interactive) {
		/* Prompts turn by turn, through a socket (see turns_t). */
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0) {
			in = sv[0], t.wr = sv[1];
			shutdown(in, SHUT_WR);
		}
		t.idle_ms = r->rt.agent.idle_timeout_seconds * 1000;
		if (line)
			queue_line(&t, json_loads(line, 0, NULL));
	} else {
		/* The prompt, as the protocol's first line, from a file: no
		 * writer to block on whatever the agent does with its input. */
		in = memfd_create("taskbox-prompt", MFD_CLOEXEC);
		if (in >= 0 && line &&
		    (tb_write_all(in, line, strlen(line)) < 0 || tb_write_all(in, "\n", 1) < 0 ||
		     lseek(in, 0, SEEK_SET) < 0)) {
			close(in);
			in = -1;
		}
	}
	if (in < 0 || out < 0 || !line || pipe2(ev, O_CLOEXEC) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "agent: set up its input and output");
		free(line);
		goto out;
	}
	free(line);
	snprintf(attempt, sizeof(attempt), "%llu", (unsigned long long)r->attempt);
	/* Later names win (env_last_wins): the recipe's over the runtime's
	 * over the defaults; the sandbox's own TASKBOX_* and the network
	 * boundary's (token, proxy, endpoints) over all. */
	static const char *const defaults[][2] = {
		{ "HOME", "/workspace" },
		{ "PATH", "/usr/local/bin:/usr/bin:/bin" },
	};
	static const char *const fixed[][2] = {
		{ "TASKBOX_WORKSPACE", "/workspace" }, { "TASKBOX_OUTPUTS", "/outputs" },
		{ "TASKBOX_INPUTS", "/inputs" },       { "TASKBOX_RECIPE", "/recipe" },
		{ "TASKBOX_EVENTS_FD", "3" },
	};
	for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++)
		if (asprintf(&envp[n++], "%s=%s", defaults[i][0], defaults[i][1]) < 0)
			abort();
	for (size_t i = 0; i < r->rt.env.n && n < 250; i++)
		if (asprintf(&envp[n++], "%s=%s", r->rt.env.items[i].key,
			     r->rt.env.items[i].value) < 0)
			abort();
	for (size_t i = 0; i < rm->agent.env.n && n < 400; i++)
		if (asprintf(&envp[n++], "%s=%s", rm->agent.env.items[i].key,
			     rm->agent.env.items[i].value) < 0)
			abort();
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (asprintf(&envp[n++], "%s=%s", fixed[i][0], fixed[i][1]) < 0)
			abort();
	if (asprintf(&envp[n++], "TASKBOX_TASK_ID=%s", r->task->id) < 0 ||
	    asprintf(&envp[n++], "TASKBOX_ATTEMPT=%s", attempt) < 0)
		abort();
	n = tb_egress_env(r->egress, envp, n, 500); /* token, proxy, endpoints */
	n = env_last_wins(envp, n);
	envp[n] = NULL;
	size_t argc = rm->agent.command.n < 64 ? rm->agent.command.n : 64;
	for (size_t i = 0; i < argc; i++)
		argv[i] = rm->agent.command.items[i];
	argv[argc] = NULL;
	tb_sandbox_exec_t ex = {
		argv, (const char *const *)envp, "/recipe", in, out, out, ev[1], 0
	};
	rc = tb_sandbox_spawn(r->sb, &id, &ex, err);
	close(ev[1]);
	ev[1] = -1;
	if (rc == TB_ETIMEOUT) { /* the deadline passed before it could start */
		memset(end, 0, sizeof(*end));
		end->end = TB_SANDBOX_DEADLINE;
		end->signal = SIGKILL;
		rc = 0;
		goto out;
	}
	if (rc < 0) {
		if (rc == TB_ENOTFOUND) /* the recipe's command: poison */
			err->code = rc = TB_EPOISON;
		goto out;
	}
	fcntl(ev[0], F_SETFL, O_NONBLOCK);
	tb_linebuf_init(&r->lines, r->rt.agent.max_event_bytes);
	if (interactive) {
		emit_json(r, TB_EV_TURN,
			  json_pack("{s:s,s:i}", "state", "turn-started", "turn", 1));
		flush_input(&t);
	}
	for (;;) {
		struct pollfd p[3] = { { ev[0], POLLIN, 0 }, { -1, 0, 0 }, { -1, 0, 0 } };
		int eof = 0;
		if (interactive && t.wr >= 0 && t.poff < t.plen)
			p[1] = (struct pollfd){ t.wr, POLLOUT, 0 };
		if (interactive && t.st == T_IDLE)
			p[2] = (struct pollfd){ tb_session_fd(t.s), POLLIN, 0 };
		/* One read per pass: a flood must not keep the deadline
		 * (checked by the wait below) from coming. */
		ssize_t got = -1;
		if (poll(p, 3, 50) > 0 && p[0].revents)
			got = read(ev[0], buf, sizeof(buf));
		/* What the proxy queued goes before the lines just read: an
		 * event the agent posted was queued before it had its answer,
		 * so before anything it wrote on fd 3 after that. */
		egress_flush(r, TB_PHASE_RUNNING, 0);
		if (got > 0)
			tb_linebuf_feed(&r->lines, buf, (size_t)got, on_agent_line, &lc);
		eof = got == 0;
		if (interactive)
			drive_turns(r, &t, (p[2].revents & POLLIN) != 0);
		rc = tb_sandbox_wait(r->sb, id, eof ? 1000 : 0, end, err);
		if (rc == 0)
			break;
		if (rc != TB_ETIMEOUT || (rc = cancelled(r, err)) < 0)
			goto out;
	}
	/* What the agent wrote before it ended. Its children may hold the
	 * pipe open and keep writing: end them first, so this read ends (if
	 * init cannot, it is killed, and the namespace ends with it). */
	if ((rc = tb_sandbox_kill_all(r->sb, err)) < 0) {
		tb_error_prefix(err, "ending what the agent left running");
		goto out;
	}
	egress_flush(r, TB_PHASE_RUNNING, 0); /* posted before those lines were written */
	ssize_t got;
	while ((got = read(ev[0], buf, sizeof(buf))) > 0)
		tb_linebuf_feed(&r->lines, buf, (size_t)got, on_agent_line, &lc);
	off_t size = lseek(out, 0, SEEK_END);
	off_t from = size > (off_t)tail_len - 1 ? size - (off_t)tail_len + 1 : 0;
	ssize_t tl = pread(out, tail, tail_len - 1, from);
	tail[tl > 0 ? tl : 0] = '\0';
	for (ssize_t i = 0; i < tl; i++) /* NULs too: they would end the text */
		if ((unsigned char)tail[i] < 0x20 && tail[i] != '\n')
			tail[i] = ' ';
	tb_utf8_sanitize(tail); /* any bytes, cut anywhere: the reason is text */
	rc = 0;
out:
	for (int i = 0; i < n; i++) {
		explicit_bzero(envp[i], strlen(envp[i])); /* the task token */
		free(envp[i]);
	}
	tb_linebuf_free(&r->lines);
	if (interactive) {
		/* Only an ended session refuses what comes next: a cancelled or
		 * failed attempt is replayed, and its follow-ups wait for it. */
		if (rc == 0)
			tb_session_close(t.s, r->ended_why[0] ? r->ended_why : "the agent exited");
		thaw_turns(r, &t);
		if (t.wr >= 0)
			close(t.wr);
		free(t.pending);
	}
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	if (ev[0] >= 0)
		close(ev[0]);
	if (ev[1] >= 0)
		close(ev[1]);
	return rc;
}

static int outcome_of(const tb_sandbox_exit_t *e)
{
	switch (e->end) {
	case TB_SANDBOX_EXITED:
		return e->code == 0 ? TB_OUTCOME_SUCCEEDED : TB_OUTCOME_FAILED;
	case TB_SANDBOX_OOM:
		return TB_OUTCOME_OOM_KILLED;
	case TB_SANDBOX_PIDS_LIMIT:
		return TB_OUTCOME_PIDS_LIMIT;
	case TB_SANDBOX_DEADLINE:
		return TB_OUTCOME_TIMED_OUT;
	default:
		return TB_OUTCOME_FAILED;
	}
}

/* ------------------------------------------------------------- judges */

/*
 * The judge's standard input: a snapshot of the JSON lines in a sealed
 * memfd of its own, opened read-only. The seals hold whatever the judge
 * does (a reopen through /proc/self/fd/0 for writing included), and the
 * worker's own copy never enters the sandbox: nothing a judge does
 * changes what the next one reads or what is recorded.
 * @return the descriptor, or -1 with errno set.
 */
static int judge_input(run_t *r)
{
	off_t size = lseek(r->jsonl_fd, 0, SEEK_END), off = 0;
	int fd = memfd_create("taskbox-judge-input", MFD_CLOEXEC | MFD_ALLOW_SEALING), ro = -1;
	char path[64];

	if (size < 0 || fd < 0)
		goto out;
	while (off < size) {
		ssize_t n = sendfile(fd, r->jsonl_fd, &off, (size_t)(size - off));
		if (n <= 0) {
			errno = n < 0 ? errno : EIO;
			goto out;
		}
	}
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		goto out;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
out:
	if (fd >= 0) {
		int e = errno;
		close(fd);
		errno = e;
	}
	return ro;
}

/* The verdict in the last non-empty line of the judge's output @p out;
 * what is wrong with it, or its reason, into @p why. */
static void read_verdict(tb_verdict_t *v, int out, char *why, size_t len)
{
	char last[4096] = "";
	off_t size = lseek(out, 0, SEEK_END);
	off_t from = size > (off_t)sizeof(last) - 1 ? size - (off_t)sizeof(last) + 1 : 0;
	ssize_t n = pread(out, last, sizeof(last) - 1, from);
	json_error_t jerr;

	last[n > 0 ? n : 0] = '\0';
	while (n > 0 && (last[n - 1] == '\n' || last[n - 1] == ' '))
		last[--n] = '\0';
	char *nl = strrchr(last, '\n');
	json_t *res = json_loads(nl ? nl + 1 : last, 0, &jerr);
	const char *o = json_string_value(json_object_get(res, "outcome"));
	if (!o || (strcmp(o, "pass") && strcmp(o, "fail"))) {
		snprintf(why, len,
			 "the judge's last line is not {\"outcome\": \"pass\" or \"fail\"}");
	} else {
		v->outcome = !strcmp(o, "pass") ? TB_VERDICT_PASS : TB_VERDICT_FAIL;
		json_t *score = json_object_get(res, "score");
		if (json_is_number(score) && json_number_value(score) >= 0 &&
		    json_number_value(score) <= 1) {
			v->score = json_number_value(score);
			TB_SET_HAS(v, TB_VERDICT_F_SCORE);
		}
		const char *reason = json_string_value(json_object_get(res, "reason"));
		if (reason) {
			snprintf(why, len, "%.500s", reason);
			tb_utf8_trim(why); /* cut mid-character */
		}
	}
	json_decref(res);
}

/*
 * Runs the @p index-th judge in the sandbox, as a uid of its own, in a
 * view of its own (tb_sandbox_judge_view: the agent's files read-only,
 * empty /tmp and home), with the conversation on its input; its last
 * output line is {"outcome": "pass"|"fail", "score": x, "reason": s}.
 * Every process it started ends before that output is read.
 */
static int judge(run_t *r, size_t index, const char *prefix, tb_error_t *err)
{
	const tb_judge_t *j = (const tb_judge_t *)r->recipe.judges.items + index;
	tb_verdict_t v = { 0 };
	tb_sandbox_exit_t end;
	char why[600] = "", key[1024];
	const char *argv[65],
	    *envp[] = { "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home", "TMPDIR=/tmp", NULL };
	unsigned uid = TB_SANDBOX_JUDGE_ID + (unsigned)index;
	uint64_t t0 = tb_wall_ms();
	tb_error_t view_err;
	int rc = sync_jsonl(r, err);
	if (rc < 0)
		return rc;
	int out = memfd_create("taskbox-judge", MFD_CLOEXEC), id;
	int in = judge_input(r);

	v.task_id = r->task->id;
	v.attempt = r->attempt;
	v.judge = j->name;
	v.outcome = TB_VERDICT_ERROR;
	size_t argc = j->command.n < 64 ? j->command.n : 64;
	for (size_t i = 0; i < argc; i++)
		argv[i] = j->command.items[i];
	argv[argc] = NULL;
	uint64_t timeout = TB_HAS(j, 2) ? j->timeout_seconds : r->rt.agent.judge_timeout_seconds;
	if (out < 0 || in < 0) {
		snprintf(why, sizeof(why), "cannot set up the judge's input and output: %s",
			 strerror(errno));
	} else if (tb_sandbox_judge_view(r->sb, uid, &view_err) < 0) {
		snprintf(why, sizeof(why), "cannot give the judge a clean view: %.500s",
			 view_err.msg);
	} else {
		tb_sandbox_exec_t ex = { argv, envp, "/recipe", in, out, -1, -1, uid };
		if ((rc = tb_sandbox_spawn(r->sb, &id, &ex, err)) < 0) {
			snprintf(why, sizeof(why), "%.500s", err->msg);
		} else if ((rc = tb_sandbox_wait(r->sb, id, (int)(timeout * 1000), &end, err)) <
			   0) {
			tb_sandbox_kill(r->sb, id, SIGKILL, NULL);
			tb_sandbox_wait(r->sb, id, 5000, &end, NULL);
			if (rc == TB_ETIMEOUT)
				snprintf(why, sizeof(why), "no verdict within %llu s",
					 (unsigned long long)timeout);
			else
				snprintf(why, sizeof(why), "%.500s", err->msg);
		} else if (tb_sandbox_kill_all(r->sb, &view_err) < 0) {
			/* what it left running could still be writing */
			snprintf(why, sizeof(why), "%.500s", view_err.msg);
		} else if (end.end != TB_SANDBOX_EXITED || end.code != 0) {
			/* A crash is an error, whatever it printed first. */
			char how[200];
			tb_sandbox_end_describe(&end, how, sizeof(how));
			snprintf(why, sizeof(why), "the judge %s", how);
		} else {
			read_verdict(&v, out, why, sizeof(why));
		}
	}
	if (out >= 0)
		close(out);
	if (in >= 0)
		close(in);
	tb_utf8_sanitize(why); /* the judge's own bytes, or its error's */
	v.reason = why[0] ? why : NULL;
	v.ts = tb_wall_ms();
	v.duration_ms = v.ts - t0;

	/* Stored with the conversation record, side by side (recorded). */
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	snprintf(key, sizeof(key), "%sverdicts/%s.msgpack", prefix, j->name);
	if ((rc = tb_msg_encode(&sb, &tb_schema_verdict, &v, err)) < 0) {
		msgpack_sbuffer_destroy(&sb);
		return rc;
	}
	json_t *summary =
	    json_pack("{s:s,s:s}", "judge", j->name, "outcome", tb_verdict_outcomes[v.outcome]);
	if (TB_HAS(&v, TB_VERDICT_F_SCORE))
		json_object_set_new(summary, "score", json_real(v.score));
	if (v.reason)
		json_object_set_new(summary, "reason", json_string(v.reason));
	emit_json(r, TB_EV_VERDICT, summary);
	tb_verdict_ref_t ref = { 0, strdup(j->name), v.outcome, strdup(key) };
	void *bigger = realloc(r->m.verdicts.items, (r->m.verdicts.n + 1) * sizeof(ref));
	if (bigger)
		r->m.verdicts.items = bigger;
	void *more = realloc(r->verdicts, (r->m.verdicts.n + 1) * sizeof(sb));
	if (!bigger || !more || !ref.judge || !ref.key)
		abort(); /* out of memory */
	r->verdicts = more;
	r->verdicts[r->m.verdicts.n] = sb;
	((tb_verdict_ref_t *)r->m.verdicts.items)[r->m.verdicts.n++] = ref;
	return 0;
}

/* The sandbox's teardown, on its own thread once nothing runs in it: the
 * record's puts go on meanwhile. */
static void *teardown_main(void *arg)
{
	run_t *r = arg;
	r->teardown_rc = tb_sandbox_destroy(r->sb, &r->teardown_err);
	return NULL;
}

static void start_teardown(run_t *r)
{
	/* If no thread can start, the teardown happens at the end instead. */
	r->tearing_down = pthread_create(&r->teardown, NULL, teardown_main, r) == 0;
}

/* Waits for the teardown, or does it; then the "torn-down" phase. */
static void finish_teardown(run_t *r)
{
	if (!r->tearing_down && !r->sb)
		return;
	if (r->tearing_down)
		pthread_join(r->teardown, NULL);
	else
		r->teardown_rc = tb_sandbox_destroy(r->sb, &r->teardown_err);
	r->sb = NULL;
	r->tearing_down = 0;
	if (r->teardown_rc < 0)
		tb_warn(r->task->id, "teardown: %s", r->teardown_err.msg);
	phase(r, TB_PHASE_TORN_DOWN);
}

/* The conversation record and the verdicts, side by side: all durable
 * before the manifest that names them. */
static int put_record(run_t *r, const char *key, tb_error_t *err)
{
	size_t n = r->m.verdicts.n;
	tb_store_put_item_t *items = calloc(n + 1, sizeof(*items));
	int rc;

	if (!items)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	items[0] = (tb_store_put_item_t){ key, r->record_fd, NULL, 0 };
	for (size_t i = 0; i < n; i++)
		items[i + 1] =
		    (tb_store_put_item_t){ ((const tb_verdict_ref_t *)r->m.verdicts.items)[i].key,
					   -1, r->verdicts[i].data, r->verdicts[i].size };
	rc = tb_store_put_all(r->ctx->store, items, n + 1, err);
	free(items);
	return rc;
}

/* ---------------------------------------------------------------- run */

int tb_lifecycle_run(const tb_lifecycle_ctx_t *ctx, const tb_task_t *task, uint64_t attempt,
		     tb_lifecycle_result_t *out, tb_error_t *err)
{
	char recipe_dir[4096], inputs_dir[4096] = "", prefix[512], key[600], outputs[128];
	char tail[AGENT_OUTPUT_TAIL];
	tb_sandbox_exit_t end;
	tb_limits_t lim;
	run_t r = { 0 };
	int rc;

	memset(out, 0, sizeof(*out));
	r.ctx = ctx, r.task = task, r.attempt = attempt;
	r.phase_ms = tb_wall_ms();
	r.m.started_at = r.phase_ms;
	r.m.runtime = task->runtime;
	r.record_fd = memfd_create("taskbox-conversation", MFD_CLOEXEC);
	r.jsonl_fd = memfd_create("taskbox-conversation-jsonl", MFD_CLOEXEC);
	/* The JSONL is appended to as events go; each judge reads a sealed
	 * copy of it (judge_input). */
	if (r.record_fd < 0 || r.jsonl_fd < 0 || fcntl(r.jsonl_fd, F_SETFL, O_APPEND) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "lifecycle: memfd");
		goto done;
	}
	if (!(r.m.phases.items = calloc(MAX_PHASES, sizeof(tb_phase_time_t)))) {
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		goto done;
	}
	snprintf(prefix, sizeof(prefix), "tasks/%s/%llu/", task->id, (unsigned long long)attempt);
	/* The worker took, validated and claimed the message before this
	 * slot started: those phases carry the worker's times. */
	uint64_t got = ctx->received_ms ? ctx->received_ms : r.phase_ms;
	r.phase_ms = got;
	phase_at(&r, TB_PHASE_RECEIVED, got, ctx->worker);
	phase_at(&r, TB_PHASE_VALIDATED, got, NULL);
	phase_at(&r, TB_PHASE_CLAIMED, ctx->claimed_ms ? ctx->claimed_ms : tb_wall_ms(), NULL);

	if ((rc = prepare(&r, recipe_dir, sizeof(recipe_dir), inputs_dir, sizeof(inputs_dir), &lim,
			  err)) < 0) {
		error_event(&r, rc, TB_PHASE_PREPARED, err->msg);
		goto done;
	}
	/* The sandbox's one way out, for the agent only (judges get no token). */
	if ((rc = tb_egress_start(&r.egress, &r.rt, tb_sandbox_init_pid(r.sb), task->id, attempt,
				  tb_wall_ms() + lim.wall_seconds * 1000 + 60000, err)) < 0) {
		error_event(&r, rc, TB_PHASE_PREPARED, err->msg);
		goto done;
	}
	tb_rate_init(&r.rate, r.rt.agent.max_events_per_second, tb_wall_ms());
	phase(&r, TB_PHASE_PREPARED);
	if ((rc = cancelled(&r, err)) < 0) {
		error_event(&r, rc, TB_PHASE_PREPARED, err->msg);
		goto done;
	}

	phase(&r, TB_PHASE_RUNNING);
	rc = run_agent(&r, &end, tail, sizeof(tail), err);
	tb_sandbox_disarm_deadline(r.sb); /* the judges have timeouts of their own */
	/* The agent and everything it started are gone: so is its way out,
	 * and its last egress records are events before it settles. */
	tb_egress_stop(r.egress);
	egress_flush(&r, TB_PHASE_RUNNING, 1);
	if (rc < 0) {
		error_event(&r, rc, TB_PHASE_RUNNING, err->msg);
		goto done;
	}
	char how[200];
	r.m.outcome = outcome_of(&end);
	tb_sandbox_end_describe(&end, how, sizeof(how));
	if (r.m.outcome != TB_OUTCOME_SUCCEEDED) {
		snprintf(out->reason, sizeof(out->reason), "the agent %.100s%s%.380s", how,
			 tail[0] ? "; its last output: " : "", tail);
		tb_utf8_sanitize(out->reason); /* the cut may split a character */
		r.m.reason = out->reason;
	} else if (r.ended_why[0]) {
		snprintf(out->reason, sizeof(out->reason), "the session ended: %s", r.ended_why);
		r.m.reason = out->reason;
	}
	if (ctx->session && task->kind == TB_TASK_INTERACTIVE) {
		r.m.turns = r.turns_ended;
		r.m.followups = tb_session_taken(ctx->session);
		TB_SET_HAS(&r.m, TB_MANIFEST_TURNS);
		TB_SET_HAS(&r.m, TB_MANIFEST_FOLLOWUPS);
	}
	phase(&r, TB_PHASE_SETTLED);

	/* Whatever the agent left running ends before anything is read. */
	if ((rc = tb_sandbox_kill_all(r.sb, err)) < 0) {
		tb_error_prefix(err, "ending what the agent left running");
		error_event(&r, rc, TB_PHASE_SETTLED, err->msg);
		goto done;
	}
	if ((rc = cancelled(&r, err)) < 0) {
		error_event(&r, rc, TB_PHASE_SETTLED, err->msg);
		goto done;
	}
	snprintf(outputs, sizeof(outputs), "/proc/%d/root/outputs", (int)tb_sandbox_init_pid(r.sb));
	snprintf(key, sizeof(key), "%soutputs/", prefix);
	tb_collect_limits_t cl = { r.rt.sandbox.max_output_files, lim.outputs_mb << 20 };
	if ((rc = tb_collect_outputs(&r.m, ctx->store, outputs, key, &cl, err)) < 0) {
		error_event(&r, rc, TB_PHASE_COLLECTED, err->msg);
		goto done;
	}
	for (size_t i = 0; i < r.m.artifacts.n; i++) {
		const tb_artifact_t *a = (const tb_artifact_t *)r.m.artifacts.items + i;
		emit_json(&r, TB_EV_ARTIFACT,
			  json_pack("{s:s,s:s,s:I,s:s}", "path", a->path, "key", a->key, "size",
				    (json_int_t)a->size, "sha256", a->sha256));
	}
	phase(&r, TB_PHASE_COLLECTED);

	for (size_t i = 0; i < r.recipe.judges.n; i++)
		if ((rc = cancelled(&r, err)) < 0 || (rc = judge(&r, i, prefix, err)) < 0) {
			error_event(&r, rc, TB_PHASE_JUDGED, err->msg);
			goto done;
		}
	phase(&r, TB_PHASE_JUDGED);
	if ((rc = cancelled(&r, err)) < 0) {
		error_event(&r, rc, TB_PHASE_JUDGED, err->msg);
		goto done;
	}
	/* Nothing runs in the sandbox any more: it goes while the record is
	 * stored (its phase, torn-down, still comes after recorded). */
	start_teardown(&r);
	phase(&r, TB_PHASE_RECORDED); /* the record's last events, then the record */

	snprintf(key, sizeof(key), "%sconversation.msgpack", prefix);
	if ((rc = put_record(&r, key, err)) < 0) {
		error_event(&r, rc, TB_PHASE_RECORDED, err->msg);
		goto done;
	}
	r.m.task_id = task->id;
	r.m.attempt = attempt;
	r.m.recipe = task->recipe;
	r.m.conversation_key = key;
	r.m.events = r.seq;
	r.m.finished_at = tb_wall_ms();
	if (r.failed) { /* the events are the record: incomplete, not recorded */
		rc = tb_error_set(err, TB_ERETRY, "events: %s",
				  r.sink_err.msg[0] ? r.sink_err.msg : "could not be recorded");
		goto done;
	}
	/* Manifest last: it names only objects that exist. */
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	snprintf(out->manifest_key, sizeof(out->manifest_key), "%smanifest.msgpack", prefix);
	if ((rc = tb_msg_encode(&sb, &tb_schema_manifest, &r.m, err)) == 0)
		rc = tb_store_put_bytes(ctx->store, out->manifest_key, sb.data, sb.size, NULL, err);
	msgpack_sbuffer_destroy(&sb);
	if (rc < 0) {
		error_event(&r, rc, TB_PHASE_RECORDED, err->msg);
		goto done;
	}
	tb_fault_point("manifest-durable");
	/* The result, and every event delivered, before the done-marker: a
	 * worker that dies after it leaves the attempt's events whole up to
	 * the result (only torn-down and acknowledged may be missing). */
	emit_json(&r, TB_EV_RESULT,
		  json_pack("{s:s,s:s,s:s}", "outcome", tb_outcomes[r.m.outcome], "reason",
			    out->reason, "manifest_key", out->manifest_key));
	if (r.failed || (ctx->sink.flush && ctx->sink.flush(ctx->sink.ud, &r.sink_err) < 0)) {
		rc = tb_error_set(err, TB_ERETRY, "events: %s",
				  r.sink_err.msg[0] ? r.sink_err.msg : "could not be delivered");
		goto done;
	}
	/* The done-marker only after the record is durable (invariant 2);
	 * the ledger refuses it (TB_EFENCED) if a newer attempt began. */
	if (ctx->recorded &&
	    (rc = ctx->recorded(ctx->recorded_ud, task->id, attempt, out->manifest_key, err)) < 0) {
		error_event(&r, rc, TB_PHASE_RECORDED, err->msg);
		goto done;
	}
	tb_fault_point("done-marked");
done:
	/* Once recorded (rc == 0 here) the attempt stands: what fails after
	 * it is logged, and the worker's sweep removes what is left. The
	 * proxy goes before the sandbox (already, when the agent ran). */
	tb_egress_stop(r.egress);
	egress_flush(&r, TB_PHASE_TORN_DOWN, 1);
	tb_egress_free(r.egress);
	r.egress = NULL;
	finish_teardown(&r);
	if (r.task->inputs.n && inputs_dir[0])
		tb_remove_tree(AT_FDCWD, inputs_dir);
	out->outcome = r.m.outcome;
	out->followups = ctx->session ? tb_session_taken(ctx->session) : 0;
	out->last_ms = r.phase_ms;
	out->events = r.seq;
	/* Borrowed pointers out of the manifest before freeing what it owns. */
	r.m.task_id = NULL, r.m.reason = NULL, r.m.conversation_key = NULL, r.m.runtime = NULL;
	r.m.recipe.url = NULL, r.m.recipe.commit = NULL;
	for (size_t i = 0; r.verdicts && i < r.m.verdicts.n; i++)
		msgpack_sbuffer_destroy(&r.verdicts[i]);
	free(r.verdicts);
	tb_msg_free(&tb_schema_manifest, &r.m);
	tb_recipe_manifest_free(&r.recipe);
	tb_runtime_free(&r.rt);
	if (r.record_fd >= 0)
		close(r.record_fd);
	if (r.jsonl_fd >= 0)
		close(r.jsonl_fd);
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
