/*
 * agent.c: the "running" phase (run_int.h): the agent started in the sandbox
 * with its environment, its prompt (or, interactive, its turns: turns.h),
 * each line it writes on fd 3 made an event, and its end.
 */
#include "turns.h"

#include "tb/clock.h"
#include "tb/fsutil.h"
#include "tb/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

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
	tb_run_t *r;
};

static void on_agent_line(void *ud, const char *line, size_t len, int too_long)
{
	tb_run_t *r = ((struct line_ctx *)ud)->r;
	char why[600];
	tb_bytes_t payload;
	tb_error_t err;
	int type;

	r->line_no++;
	tb_run_pace(r);
	if (too_long) {
		snprintf(why, sizeof(why), "line %llu: %zu bytes, over the runtime's %llu",
			 (unsigned long long)r->line_no, len,
			 (unsigned long long)r->rt.agent.max_event_bytes);
		if (tb_agent_error_payload(&payload, TB_ETOOBIG, why) == 0)
			tb_run_emit(r, TB_EV_ERROR, payload);
		return;
	}
	if (tb_agent_parse_line(&type, &payload, line, len, &err) < 0) {
		snprintf(why, sizeof(why), "line %llu: %.500s", (unsigned long long)r->line_no,
			 err.msg);
		tb_utf8_sanitize(why); /* it may quote the line */
		if (tb_agent_error_payload(&payload, TB_EINVAL, why) == 0)
			tb_run_emit(r, TB_EV_ERROR, payload);
		return;
	}
	if (type == TB_EV_TURN) { /* numbered here: the agent need not count */
		free(payload.data);
		r->turn_ended = 1;
		r->turns_ended++;
		tb_run_emit_json(
		    r, TB_EV_TURN,
		    json_pack("{s:s,s:I}", "state", "turn-ended", "turn", (json_int_t)r->turn));
		return;
	}
	tb_run_emit_from(r, TB_SOURCE_AGENT, type, payload);
}

/*
 * The agent's environment into @p envp (room for 512, NULL-ended). Later
 * names win (env_last_wins): the recipe's over the runtime's over the
 * image's over the defaults; the sandbox's own TASKBOX_* and the network
 * boundary's (token, proxy, endpoints) over all. @return how many.
 */
static int agent_env(tb_run_t *r, char **envp)
{
	static const char *const defaults[][2] = {
		{ "HOME", "/workspace" },
		{ "PATH", "/usr/local/bin:/usr/bin:/bin" },
	};
	static const char *const fixed[][2] = {
		{ "TASKBOX_WORKSPACE", "/workspace" }, { "TASKBOX_OUTPUTS", "/outputs" },
		{ "TASKBOX_INPUTS", "/inputs" },       { "TASKBOX_RECIPE", "/recipe" },
		{ "TASKBOX_EVENTS_FD", "3" },
	};
	const tb_recipe_manifest_t *rm = &r->recipe;
	char attempt[32];
	int n = 0;

	snprintf(attempt, sizeof(attempt), "%llu", (unsigned long long)r->attempt);
	for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++)
		if (asprintf(&envp[n++], "%s=%s", defaults[i][0], defaults[i][1]) < 0)
			abort();
	/* the image's Env (its PATH, LANG...), under the runtime's and recipe's */
	for (size_t i = 0; r->has_image && i < r->image.config.nenv && n < 100; i++)
		if (!(envp[n++] = strdup(r->image.config.env[i])))
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
	return n;
}

/* Where the agent starts: the recipe's agent.workdir, else its image's
 * WorkingDir, else the recipe's checkout (schemas/agent.md). */
static const char *agent_workdir(const tb_run_t *r)
{
	if (r->recipe.agent.workdir)
		return r->recipe.agent.workdir;
	if (r->has_image && r->image.config.workdir && r->image.config.workdir[0] == '/')
		return r->image.config.workdir;
	return "/recipe";
}

/* A budget of the task spent (the proxy refused a request for it), or a
 * strict replay's request that matched nothing: the agent gets the
 * runtime's grace to end its turn, then everything in the sandbox is
 * killed as at the deadline. Once per attempt. */
static void grace_if_spent(tb_run_t *r)
{
	if (r->budget_graced || (!tb_egress_budget_spent(r->egress, NULL, 0) &&
				 !tb_egress_replay_missed(r->egress, NULL, 0)))
		return;
	r->grace_deadline =
	    tb_sandbox_deadline_within(r->sb, r->rt.agent.budget_grace_seconds * 1000);
	r->budget_graced = 1;
}

/* Every agent.usage_interval_seconds of the agent's run, a usage event:
 * what the attempt has used so far, which stays in its events if its
 * worker dies (schemas/event.md); the first one interval after the first
 * look. */
static void usage_tick(tb_run_t *r)
{
	uint64_t every = r->rt.agent.usage_interval_seconds * 1000, now = tb_mono_ms();

	if (!r->usage_due)
		r->usage_due = now + every;
	if (!every || now < r->usage_due)
		return;
	r->usage_due = now + every;
	json_t *u = tb_run_usage_now(r);
	if (u)
		tb_run_emit_json(r, TB_EV_USAGE, json_pack("{s:o}", "usage", u));
}

/* Between two reads of the agent's events: its budgets and its usage. */
static void while_running(tb_run_t *r)
{
	grace_if_spent(r);
	usage_tick(r);
}

/* The last of the agent's output (@p out) into @p tail, as text. */
static void read_tail(int out, char *tail, size_t tail_len)
{
	off_t size = lseek(out, 0, SEEK_END);
	off_t from = size > (off_t)tail_len - 1 ? size - (off_t)tail_len + 1 : 0;
	ssize_t tl = pread(out, tail, tail_len - 1, from);
	tail[tl > 0 ? tl : 0] = '\0';
	for (ssize_t i = 0; i < tl; i++) /* NULs too: they would end the text */
		if ((unsigned char)tail[i] < 0x20 && tail[i] != '\n')
			tail[i] = ' ';
	tb_utf8_sanitize(tail); /* any bytes, cut anywhere: the reason is text */
}

/* Reads what the agent wrote on fd 3 until it exits; fills @p end. */
int tb_run_agent(tb_run_t *r, tb_sandbox_exit_t *end, char *tail, size_t tail_len, tb_error_t *err)
{
	tail[0] = '\0';
	const tb_recipe_manifest_t *rm = &r->recipe;
	char *envp[512], buf[65536];
	const char *argv[65];
	int in = -1, out = -1, ev[2] = { -1, -1 }, id = 0, rc, n = 0;
	struct line_ctx lc = { r };
	tb_turns_t t = { .s = r->ctx->session, .wr = -1 };
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
	tb_run_emit_json(r, TB_EV_MESSAGE,
			 json_pack("{s:s,s:s}", "role", "user", "text", r->task->prompt));
	if (interactive) {
		/* Prompts turn by turn, through a socket (see tb_turns_t). */
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0) {
			in = sv[0], t.wr = sv[1];
			shutdown(in, SHUT_WR);
		}
		t.idle_ms = r->rt.agent.idle_timeout_seconds * 1000;
		if (line)
			tb_turns_queue(&t, json_loads(line, 0, NULL));
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
	n = agent_env(r, envp);
	size_t argc = rm->agent.command.n < 64 ? rm->agent.command.n : 64;
	for (size_t i = 0; i < argc; i++)
		argv[i] = rm->agent.command.items[i];
	argv[argc] = NULL;
	tb_sandbox_exec_t ex = {
		argv, (const char *const *)envp, agent_workdir(r), in, out, out, ev[1], 0
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
		tb_run_emit_json(r, TB_EV_TURN,
				 json_pack("{s:s,s:i}", "state", "turn-started", "turn", 1));
		tb_turns_flush(&t);
	}
	for (;;) {
		struct pollfd p[3] = { { ev[0], POLLIN, 0 }, { -1, 0, 0 }, { -1, 0, 0 } };
		int eof = 0;
		if (interactive && t.wr >= 0 && t.poff < t.plen)
			p[1] = (struct pollfd){ t.wr, POLLOUT, 0 };
		if (interactive && t.st == TB_TURN_IDLE)
			p[2] = (struct pollfd){ tb_session_fd(t.s), POLLIN, 0 };
		/* One read per pass: a flood must not keep the deadline
		 * (checked by the wait below) from coming. */
		ssize_t got = -1;
		if (poll(p, 3, 50) > 0 && p[0].revents)
			got = read(ev[0], buf, sizeof(buf));
		/* What the proxy queued goes before the lines just read: an
		 * event the agent posted was queued before it had its answer,
		 * so before anything it wrote on fd 3 after that. */
		tb_run_egress_flush(r, TB_PHASE_RUNNING, 0);
		while_running(r);
		if (got > 0)
			tb_linebuf_feed(&r->lines, buf, (size_t)got, on_agent_line, &lc);
		eof = got == 0;
		if (interactive)
			tb_turns_drive(r, &t, (p[2].revents & POLLIN) != 0);
		rc = tb_sandbox_wait(r->sb, id, eof ? 1000 : 0, end, err);
		if (rc == 0)
			break;
		if (rc != TB_ETIMEOUT || (rc = tb_run_cancelled(r, err)) < 0)
			goto out;
	}
	/* What the agent wrote before it ended. Its children may hold the
	 * pipe open and keep writing: end them first, so this read ends (if
	 * init cannot, it is killed, and the namespace ends with it). */
	if ((rc = tb_sandbox_kill_all(r->sb, err)) < 0) {
		tb_error_prefix(err, "ending what the agent left running");
		goto out;
	}
	tb_run_egress_flush(r, TB_PHASE_RUNNING, 0); /* posted before those lines were written */
	ssize_t got;
	while ((got = read(ev[0], buf, sizeof(buf))) > 0)
		tb_linebuf_feed(&r->lines, buf, (size_t)got, on_agent_line, &lc);
	read_tail(out, tail, tail_len);
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
		tb_turns_thaw(r, &t);
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

int tb_run_outcome(const tb_sandbox_exit_t *e)
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
