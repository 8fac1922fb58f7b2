/*
 * cmd_top.c: `taskbox top`: a live terminal dashboard of the fleet. The
 * ledger says which workers are alive and what each runs; the events
 * topic says what phase each task is in, what settled and what failed
 * (the last minute's events are read at start, so throughput shows at
 * once); Kafka says the group's lag and the DLQ's size. Redrawn every
 * interval with plain ANSI escapes; `q` or Ctrl-C quits. --once prints one
 * frame without escapes (scripts, logs).
 */
#include "cmd.h"
#include "fleet.h"
#include "follow.h"

#include "tb/clock.h"
#include "tb/config.h"
#include "tb/json_mpack.h"
#include "tb/ledger.h"
#include "tb/schema_event.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define WINDOW_MS 60000
#define MAX_TASKS 256      /* tasks whose phase is tracked (oldest forgotten) */
#define MAX_MARKS 8192     /* settlements and failures remembered for the window */
#define MAX_RECENT 8       /* settlements listed */
#define SLOW_EVERY_MS 5000 /* lag and DLQ size: each costs Kafka round trips */

static void usage(FILE *out)
{
	fprintf(out, "usage: taskbox top [--config FILE] [--interval SECONDS] [--once] [--json]\n\n"
		     "A live view of the fleet: workers alive, slots busy, running tasks\n"
		     "and their phases, tasks settled and failures in the last minute, the\n"
		     "group's lag and the DLQ's size. q or Ctrl-C quits.\n"
		     "  --interval SECONDS  redraw period, 1..60 (default 2)\n"
		     "  --once              print one frame (no escapes) and exit\n"
		     "  --json              each frame as one JSON object on a line (for scripts)\n"
		     "Configuration as for `taskbox worker`; the ledger must be the fleet's\n"
		     "Redis. Exit: 0, 1 a service failed, 2 usage, 3 configuration.\n");
}

typedef struct tracked {
	char task[129];
	uint64_t attempt;
	char phase[24];
	uint64_t since;   /* when it reached the phase (event time) */
	char outcome[32]; /* the attempt's result, if one came */
} tracked_t;

typedef struct marks { /* timestamps in a ring */
	uint64_t at[MAX_MARKS];
	size_t next, n;
} marks_t;

typedef struct top {
	tracked_t tasks[MAX_TASKS];
	size_t ntasks;
	marks_t settled, unsuccessful, errors;
	char recent[MAX_RECENT][256];
	size_t nrecent;
	long long lag, dlq;
	char lag_err[256], dlq_err[256];
	uint64_t slow_at;
} top_t;

static void mark(marks_t *m, uint64_t at)
{
	m->at[m->next] = at;
	m->next = (m->next + 1) % MAX_MARKS;
	m->n += m->n < MAX_MARKS;
}

static size_t in_window(const marks_t *m, uint64_t now)
{
	size_t k = 0;
	for (size_t i = 0; i < m->n; i++)
		k += m->at[i] + WINDOW_MS >= now;
	return k;
}

static tracked_t *task_of(top_t *t, const char *id)
{
	size_t oldest = 0;
	for (size_t i = 0; i < t->ntasks; i++) {
		if (!strcmp(t->tasks[i].task, id))
			return &t->tasks[i];
		if (t->tasks[i].since < t->tasks[oldest].since)
			oldest = i;
	}
	tracked_t *k = t->ntasks < MAX_TASKS ? &t->tasks[t->ntasks++] : &t->tasks[oldest];
	memset(k, 0, sizeof(*k));
	snprintf(k->task, sizeof(k->task), "%s", id);
	return k;
}

static void recent(top_t *t, uint64_t ts, const char *task, const char *what)
{
	time_t s = (time_t)(ts / 1000);
	struct tm tm;
	char when[16];

	localtime_r(&s, &tm);
	strftime(when, sizeof(when), "%H:%M:%S", &tm);
	memmove(t->recent[1], t->recent[0], sizeof(t->recent[0]) * (MAX_RECENT - 1));
	snprintf(t->recent[0], sizeof(t->recent[0]), "%s  %-36.36s %.180s", when, task, what);
	t->nrecent += t->nrecent < MAX_RECENT;
}

/* One event: the task's phase, a settlement, a failure. */
static void take(top_t *t, const tb_event_t *ev)
{
	json_t *p = NULL;
	tb_error_t err;

	if (tb_mpack_to_json(&p, ev->payload.data, ev->payload.len, &err) < 0)
		return;
	const char *phase = json_string_value(json_object_get(p, "phase"));
	tracked_t *k = task_of(t, ev->task_id);
	if (ev->attempt > k->attempt)
		k->outcome[0] = '\0';
	if (ev->attempt >= k->attempt) {
		k->attempt = ev->attempt;
		if (ev->type == TB_EV_PHASE && phase) {
			snprintf(k->phase, sizeof(k->phase), "%s", phase);
			k->since = ev->ts;
		}
	}
	if (ev->type == TB_EV_PHASE && phase &&
	    !strcmp(phase, tb_phase_name(TB_PHASE_ACKNOWLEDGED))) {
		/* settled; no result means it was given up (the DLQ) */
		const char *o = k->outcome[0] ? k->outcome : "dead-lettered";
		mark(&t->settled, ev->ts);
		if (strcmp(o, "succeeded"))
			mark(&t->unsuccessful, ev->ts);
		recent(t, ev->ts, ev->task_id, o);
	} else if (ev->type == TB_EV_RESULT) {
		const char *o = json_string_value(json_object_get(p, "outcome"));
		snprintf(k->outcome, sizeof(k->outcome), "%s", o ? o : "?");
	} else if (ev->type == TB_EV_ERROR) {
		const char *r = json_string_value(json_object_get(p, "reason"));
		char what[200];
		mark(&t->errors, ev->ts);
		snprintf(what, sizeof(what), "error: %.180s", r ? r : "?");
		recent(t, ev->ts, ev->task_id, what);
	}
	json_decref(p);
}

/* Lag and DLQ size, every SLOW_EVERY_MS. */
static void refresh_slow(top_t *t, const tb_config_t *cfg, rd_kafka_t *c)
{
	tb_error_t err;
	uint64_t now = tb_wall_ms();

	if (t->slow_at && now - t->slow_at < SLOW_EVERY_MS)
		return;
	t->slow_at = now;
	json_t *lag = tb_fleet_lag(cfg, &err), *p;
	size_t i;
	t->lag = 0;
	t->lag_err[0] = '\0';
	if (!lag)
		snprintf(t->lag_err, sizeof(t->lag_err), "%.250s", err.msg);
	json_array_foreach(lag, i, p)
	{
		json_int_t l = json_integer_value(json_object_get(p, "lag"));
		t->lag += l > 0 ? l : 0;
	}
	json_decref(lag);
	int64_t n = tb_fleet_dlq_size(cfg, c, &err);
	t->dlq = n;
	t->dlq_err[0] = '\0';
	if (n < 0)
		snprintf(t->dlq_err, sizeof(t->dlq_err), "%.250s", err.msg);
}

static const char *ago(char *buf, size_t len, uint64_t now, json_int_t then)
{
	if (then <= 0 || (uint64_t)then > now)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f s", (double)(now - (uint64_t)then) / 1000);
	return buf;
}

static void draw(FILE *out, const top_t *t, const tb_config_t *cfg, json_t *workers, int tty,
		 const char *ledger_err)
{
	uint64_t now = tb_wall_ms();
	long long slots = 0, busy = 0, waiting = 0;
	json_t *w, *k;
	size_t i, j;
	char a[32], b[32];
	time_t s = (time_t)(now / 1000);
	struct tm tm;
	char clock[16];

	localtime_r(&s, &tm);
	strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
	json_array_foreach(workers, i, w)
	{
		slots += json_integer_value(json_object_get(w, "slots"));
		busy += (long long)json_array_size(json_object_get(w, "tasks"));
		waiting += json_integer_value(json_object_get(w, "waiting"));
	}
	if (tty)
		fputs("\033[H\033[2J", out);
	fprintf(out, "taskbox top   group %s on %s   %s%s\n", cfg->kafka.group,
		cfg->kafka.tasks_topic, clock, tty ? "   (q quits)" : "");
	fprintf(out, "workers %zu alive   slots %lld/%lld busy   waiting %lld   lag ",
		json_array_size(workers), busy, slots, waiting);
	if (t->lag_err[0])
		fprintf(out, "?   ");
	else
		fprintf(out, "%lld   ", t->lag);
	if (t->dlq_err[0])
		fprintf(out, "DLQ ?\n");
	else
		fprintf(out, "DLQ %lld\n", t->dlq);
	fprintf(out, "last minute: %zu settled (%.1f/s), %zu not succeeded, %zu errors\n",
		in_window(&t->settled, now), (double)in_window(&t->settled, now) / 60.0,
		in_window(&t->unsuccessful, now), in_window(&t->errors, now));
	if (ledger_err)
		fprintf(out, "ledger: %s\n", ledger_err);
	if (t->lag_err[0])
		fprintf(out, "lag: %s\n", t->lag_err);
	if (t->dlq_err[0])
		fprintf(out, "dlq: %s\n", t->dlq_err);
	fprintf(out, "\n%-28s %6s %5s %8s %9s %10s\n", "WORKER", "SLOTS", "BUSY", "WAITING",
		"FINISHED", "HEARTBEAT");
	json_array_foreach(workers, i, w)
	{
		const char *id = json_string_value(json_object_get(w, "worker"));
		fprintf(
		    out, "%-28.28s %6lld %5zu %8lld %9lld %10s\n", id ? id : "(unreadable)",
		    (long long)json_integer_value(json_object_get(w, "slots")),
		    json_array_size(json_object_get(w, "tasks")),
		    (long long)json_integer_value(json_object_get(w, "waiting")),
		    (long long)json_integer_value(json_object_get(w, "finished")),
		    ago(a, sizeof(a), now, json_integer_value(json_object_get(w, "heartbeat_ms"))));
	}
	fprintf(out, "\n%-36s %7s %-13s %9s %s\n", "RUNNING TASK", "ATTEMPT", "PHASE", "IN PHASE",
		"WORKER");
	json_array_foreach(workers, i, w)
	{
		const char *wid = json_string_value(json_object_get(w, "worker"));
		json_array_foreach(json_object_get(w, "tasks"), j, k)
		{
			const char *id = json_string_value(json_object_get(k, "task"));
			const tracked_t *tr = NULL;
			for (size_t x = 0; id && x < t->ntasks && !tr; x++)
				if (!strcmp(t->tasks[x].task, id))
					tr = &t->tasks[x];
			fprintf(out, "%-36.36s %7lld %-13s %9s %s\n", id ? id : "?",
				(long long)json_integer_value(json_object_get(k, "attempt")),
				tr && tr->phase[0] ? tr->phase : "-",
				tr ? ago(b, sizeof(b), now, (json_int_t)tr->since) : "-",
				wid ? wid : "?");
		}
	}
	fprintf(out, "\nRECENT\n");
	for (size_t r = 0; r < t->nrecent; r++)
		fprintf(out, "%s\n", t->recent[r]);
	fflush(out);
}

/* The live workers' liveness records, as JSON; *@p rc the ledger's. */
static json_t *live_workers(tb_ledger_t *l, int *rc, tb_error_t *err)
{
	char **infos = NULL;
	size_t n = 0;
	json_t *workers = json_array();

	*rc = tb_ledger_workers(l, &infos, &n, err);
	for (size_t i = 0; i < n; i++) {
		json_t *w = json_loads(infos[i], 0, NULL);
		if (w)
			json_array_append_new(workers, w);
		free(infos[i]);
	}
	free(infos);
	return workers;
}

/* One frame as a JSON object on one line (--json): what draw() shows. */
static void draw_json(FILE *out, const top_t *t, const tb_config_t *cfg, json_t *workers, int tty,
		      const char *ledger_err)
{
	uint64_t now = tb_wall_ms();
	json_t *running = json_array(), *recent_list = json_array(), *w, *k;
	json_int_t slots = 0, busy = 0, waiting = 0;
	size_t i, j;

	(void)tty;
	json_array_foreach(workers, i, w)
	{
		slots += json_integer_value(json_object_get(w, "slots"));
		busy += (json_int_t)json_array_size(json_object_get(w, "tasks"));
		waiting += json_integer_value(json_object_get(w, "waiting"));
		json_array_foreach(json_object_get(w, "tasks"), j, k)
		{
			const char *id = json_string_value(json_object_get(k, "task"));
			const tracked_t *tr = NULL;
			for (size_t x = 0; id && x < t->ntasks && !tr; x++)
				if (!strcmp(t->tasks[x].task, id))
					tr = &t->tasks[x];
			json_array_append_new(
			    running, json_pack("{s:s?,s:I,s:s?,s:I,s:O?}", "task", id, "attempt",
					       json_integer_value(json_object_get(k, "attempt")),
					       "phase", tr && tr->phase[0] ? tr->phase : NULL,
					       "since_ms", (json_int_t)(tr ? tr->since : 0),
					       "worker", json_object_get(w, "worker")));
		}
	}
	for (size_t r = 0; r < t->nrecent; r++)
		json_array_append_new(recent_list, json_string(t->recent[r]));
	json_t *o = json_pack(
	    "{s:I,s:s,s:s,s:O,s:I,s:I,s:I,s:{s:I,s:I,s:I},s:o,s:o}", "ts", (json_int_t)now, "group",
	    cfg->kafka.group, "topic", cfg->kafka.tasks_topic, "workers", workers, "slots", slots,
	    "busy", busy, "waiting", waiting, "last_minute", "settled",
	    (json_int_t)in_window(&t->settled, now), "not_succeeded",
	    (json_int_t)in_window(&t->unsuccessful, now), "errors",
	    (json_int_t)in_window(&t->errors, now), "running", running, "recent", recent_list);
	if (o) {
		json_object_set_new(o, "lag", t->lag_err[0] ? json_null() : json_integer(t->lag));
		json_object_set_new(o, "dlq", t->dlq_err[0] ? json_null() : json_integer(t->dlq));
		json_t *errs = json_object();
		if (ledger_err)
			json_object_set_new(errs, "ledger", json_string(ledger_err));
		if (t->lag_err[0])
			json_object_set_new(errs, "lag", json_string(t->lag_err));
		if (t->dlq_err[0])
			json_object_set_new(errs, "dlq", json_string(t->dlq_err));
		json_object_set_new(o, "errors", errs);
		char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
		if (text)
			fprintf(out, "%s\n", text);
		free(text);
		json_decref(o);
	}
	fflush(out);
}

int tb_cmd_top(int argc, char **argv)
{
	const char *path = NULL;
	unsigned interval = 2;
	int once = 0, as_json = 0, rc = TB_EXIT_CONFIG, np = 0, raw = 0;
	struct termios saved;
	tb_ledger_t *l = NULL;
	rd_kafka_t *c = NULL;
	top_t *t = NULL;
	tb_config_t cfg;
	tb_error_t err;

	uint64_t every = 2;
	const tb_opt_t opts[] = {
		{ "--config", TB_OPT_STRING, &path, 0, 0, NULL, 'c' },
		{ "--interval", TB_OPT_UINT, &every, 1, 60, "seconds", 'n' },
		{ "--once", TB_OPT_FLAG, &once, 0, 0, NULL, 0 },
		{ "--json", TB_OPT_FLAG, &as_json, 0, 0, NULL, 'j' },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	tb_opts_t o = { "top", opts, NULL, 0, 0 };

	if ((rc = tb_cmd_options(&o, argc, argv, 1, usage)) >= 0)
		return rc;
	rc = TB_EXIT_CONFIG;
	interval = (unsigned)every;
	if (tb_cmd_load_config(&cfg, path, &err) < 0) {
		fprintf(stderr, "taskbox top: %s\n", err.msg);
		return TB_EXIT_CONFIG;
	}
	if (!strcmp(cfg.kafka.brokers, "mock")) {
		fprintf(stderr, "taskbox top: kafka.brokers is 'mock', which lives inside one "
				"process: point it at the cluster (TASKBOX_KAFKA_BROKERS)\n");
		goto out;
	}
	if ((rc = tb_cmd_open_fleet("top", &cfg, &l, NULL, &err)) != TB_EXIT_OK) {
		fprintf(stderr, "taskbox top: %s\n", err.msg);
		goto out;
	}
	rc = TB_EXIT_FAILURE;
	if (!(t = calloc(1, sizeof(*t)))) {
		fprintf(stderr, "taskbox top: out of memory\n");
		goto out;
	}
	if (tb_follow_open(&cfg, (int64_t)(tb_wall_ms() - WINDOW_MS), &c, &np, &err) < 0) {
		fprintf(stderr, "taskbox top: %s\n", err.msg);
		goto out;
	}
	int tty = !once && !as_json && isatty(STDOUT_FILENO);
	void (*frame)(FILE *, const top_t *, const tb_config_t *, json_t *, int, const char *) =
	    as_json ? draw_json : draw;
	tb_cmd_stop_on_signals();
	if (tty && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0) {
		struct termios r = saved;
		r.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw = tcsetattr(STDIN_FILENO, TCSANOW, &r) == 0;
	}
	if (tty)
		fputs("\033[?1049h\033[?25l", stdout); /* alternate screen, no cursor */
	while (!tb_cmd_stop) {
		uint64_t until = tb_mono_ms() + (uint64_t)interval * 1000;
		while (!tb_cmd_stop && tb_mono_ms() < until) { /* events, for one interval */
			rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
			tb_event_t ev;
			if (m && !m->err &&
			    tb_msg_decode(&tb_schema_event, &ev, m->payload, m->len, &err) == 0) {
				take(t, &ev);
				tb_msg_free(&tb_schema_event, &ev);
			}
			if (m)
				rd_kafka_message_destroy(m);
			struct pollfd k = { .fd = STDIN_FILENO, .events = POLLIN };
			char ch;
			if (raw && poll(&k, 1, 0) == 1 && read(STDIN_FILENO, &ch, 1) == 1 &&
			    (ch == 'q' || ch == 'Q'))
				tb_cmd_stop = 1;
		}
		int lrc;
		json_t *workers = live_workers(l, &lrc, &err);
		refresh_slow(t, &cfg, c);
		frame(stdout, t, &cfg, workers, tty, lrc < 0 ? err.msg : NULL);
		json_decref(workers);
		if (once)
			break;
	}
	if (tty)
		fputs("\033[?25h\033[?1049l", stdout);
	if (raw)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved);
	rc = TB_EXIT_OK;
out:
	if (c) {
		rd_kafka_consumer_close(c);
		rd_kafka_destroy(c);
	}
	if (l)
		tb_ledger_close(l);
	free(t);
	tb_config_free(&cfg);
	return rc;
}
