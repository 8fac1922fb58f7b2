/*
 * judges.c: the "judged" phase, one judge at a time (run_int.h): its own
 * sealed copy of the conversation, its own uid and view of the sandbox,
 * nothing of it left running when its output is read, and its verdict
 * kept to be put beside the record.
 */
#include "run_int.h"

#include "tb/clock.h"
#include "tb/fsutil.h"
#include "tb/schema_verdict.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <unistd.h>

/*
 * The judge's standard input: a snapshot of the JSON lines in a sealed
 * memfd of its own, opened read-only. The seals hold whatever the judge
 * does (a reopen through /proc/self/fd/0 for writing included), and the
 * worker's own copy never enters the sandbox: nothing a judge does
 * changes what the next one reads or what is recorded.
 * @return the descriptor, or -1 with errno set.
 */
static int judge_input(tb_run_t *r)
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

/* A verdict's reason, at most (schemas/verdict.md). */
#define REASON_MAX 4096
/* The judge's last line is read from the last this many bytes of its
 * output: a reason of REASON_MAX bytes, each escaped as \uXXXX, fits. */
#define LAST_LINE_MAX (8 * REASON_MAX)

/* The judge's @p reason into @p why (@p len > REASON_MAX): whole when it
 * fits in REASON_MAX bytes, else cut at a character and marked, so that
 * nobody takes the start for the whole. */
static void keep_reason(char *why, size_t len, const char *reason)
{
	size_t n = strlen(reason);
	char mark[64];

	if (n <= REASON_MAX && n < len) {
		memcpy(why, reason, n + 1);
		return;
	}
	int ml = snprintf(mark, sizeof(mark), " \u2026 (cut from %zu bytes)", n);
	size_t keep = REASON_MAX - (size_t)ml;
	memcpy(why, reason, keep);
	why[keep] = '\0';
	tb_utf8_trim(why); /* not inside a character */
	size_t at = strlen(why);
	snprintf(why + at, len - at, "%s", mark);
}

/* The verdict in the last non-empty line of the judge's output @p out;
 * what is wrong with it, or its reason, into @p why. */
static void read_verdict(tb_verdict_t *v, int out, char *why, size_t len)
{
	char *last = malloc(LAST_LINE_MAX);
	off_t size = lseek(out, 0, SEEK_END);
	off_t from = size > LAST_LINE_MAX - 1 ? size - LAST_LINE_MAX + 1 : 0;
	ssize_t n = last ? pread(out, last, LAST_LINE_MAX - 1, from) : -1;
	json_error_t jerr;

	if (!last) {
		snprintf(why, len, "out of memory reading the judge's verdict");
		return;
	}
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
		if (reason)
			keep_reason(why, len, reason);
	}
	json_decref(res);
	free(last);
}

/*
 * Runs the @p index-th judge in the sandbox, as a uid of its own, in a
 * view of its own (tb_sandbox_judge_view: the agent's files read-only,
 * empty /tmp and home), with the conversation on its input; its last
 * output line is {"outcome": "pass"|"fail", "score": x, "reason": s}.
 * Every process it started ends before that output is read.
 */
int tb_run_judge(tb_run_t *r, size_t index, const char *prefix, tb_error_t *err)
{
	const tb_judge_t *j = (const tb_judge_t *)r->recipe.judges.items + index;
	tb_verdict_t v = { 0 };
	tb_sandbox_exit_t end;
	char why[REASON_MAX + 1] = "", key[1024];
	const char *argv[65],
	    *envp[] = { "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home", "TMPDIR=/tmp", NULL };
	unsigned uid = TB_SANDBOX_JUDGE_ID + (unsigned)index;

	r->judging = 1; /* the accounting's judges' stretch has begun */
	uint64_t t0 = tb_wall_ms();
	tb_error_t view_err;
	int rc = tb_run_sync_jsonl(r, err);
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
	tb_run_emit_json(r, TB_EV_VERDICT, summary);
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
