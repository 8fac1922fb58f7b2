/*
 * cmd_status.c: `taskbox status`: what the ledger, the store and Kafka say
 * about one task, or about the fleet (the live workers and what they run,
 * and the group's lag per partition). Reads only; changes nothing.
 */
#include "cmd.h"
#include "fleet.h"

#include "tb/clock.h"
#include "tb/config.h"
#include "tb/kafka.h"
#include "tb/ledger.h"
#include "tb/json_mpack.h"
#include "tb/schema_manifest.h"
#include "tb/schema_verdict.h"
#include "tb/store.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *out)
{
	fprintf(out, "usage: taskbox status [--config FILE] [--json] [TASK_ID]\n\n"
		     "With TASK_ID: the task's state in the ledger (done, running under a\n"
		     "worker's lease, or waiting), its attempts and every failure's reason,\n"
		     "and, once done, its outcome, verdicts, artifacts and what it used\n"
		     "(time, CPU, memory, outputs, egress by endpoint) from the manifest.\n"
		     "Without: the live workers (slots, running tasks, last heartbeat) and\n"
		     "the consumer group's lag on each partition of the tasks topic.\n"
		     "--json prints the same as one JSON object. Configuration as for\n"
		     "`taskbox worker` (schemas/config.md).\n"
		     "Exit: 0 shown, 1 a service failed, 2 usage, 3 configuration,\n"
		     "5 the ledger has never seen TASK_ID.\n");
}

/* The done attempt's manifest, as JSON (NULL if it cannot be read: the
 * reason into @p err). */
static json_t *manifest_json(tb_store_t *store, const char *key, tb_error_t *err)
{
	tb_manifest_t m;
	char *bytes;
	size_t len;

	if (tb_store_get_bytes(store, key, 8u << 20, &bytes, &len, err) < 0)
		return NULL;
	int rc = tb_msg_decode(&tb_schema_manifest, &m, bytes, len, err);
	json_t *whole = NULL;
	/* its usage as the manifest says it (schemas/manifest.md), key for
	 * key: read from the record checked above */
	if (rc == 0 && tb_mpack_to_json(&whole, bytes, len, err) < 0)
		whole = NULL;
	free(bytes);
	if (rc < 0)
		return NULL;
	json_t *arts = json_array(), *verdicts = json_array();
	for (size_t i = 0; i < m.artifacts.n; i++) {
		const tb_artifact_t *a = (const tb_artifact_t *)m.artifacts.items + i;
		json_array_append_new(arts, json_pack("{s:s,s:s,s:I}", "path", a->path, "key",
						      a->key, "size", (json_int_t)a->size));
	}
	for (size_t i = 0; i < m.verdicts.n; i++) {
		const tb_verdict_ref_t *v = (const tb_verdict_ref_t *)m.verdicts.items + i;
		json_array_append_new(verdicts, json_pack("{s:s,s:s}", "judge", v->judge, "outcome",
							  tb_verdict_outcomes[v->outcome]));
	}
	json_t *o = json_pack("{s:s,s:s?,s:I,s:I,s:s,s:o,s:o}", "outcome", tb_outcomes[m.outcome],
			      "reason", m.reason, "started_at", (json_int_t)m.started_at,
			      "finished_at", (json_int_t)m.finished_at, "conversation_key",
			      m.conversation_key, "artifacts", arts, "verdicts", verdicts);
	json_t *usage = json_object_get(whole, "usage");
	if (o && json_is_object(usage))
		json_object_set(o, "usage", usage);
	json_decref(whole);
	tb_msg_free(&tb_schema_manifest, &m);
	return o;
}

/* The phase @p worker's liveness record gives for @p task (as of its last
 * heartbeat), or NULL. Static storage: the next call overwrites it. */
static const char *phase_of(tb_ledger_t *l, const char *worker, const char *task)
{
	static char phase[32];
	char **infos = NULL;
	size_t n = 0;
	tb_error_t err;
	int found = 0;

	if (tb_ledger_workers(l, &infos, &n, &err) < 0)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		json_t *w = json_loads(infos[i], 0, NULL), *t;
		size_t k;
		if (w && !found &&
		    !strcmp(json_string_value(json_object_get(w, "worker")) ?: "", worker))
			json_array_foreach(json_object_get(w, "tasks"), k, t)
			{
				const char *p = json_string_value(json_object_get(t, "phase"));
				if (!found && p &&
				    !strcmp(json_string_value(json_object_get(t, "task")) ?: "",
					    task)) {
					snprintf(phase, sizeof(phase), "%s", p);
					found = 1;
				}
			}
		json_decref(w);
		free(infos[i]);
	}
	free(infos);
	return found ? phase : NULL;
}

/* One task. 0, TB_ENOTFOUND (never seen), or the ledger's error. */
static int task_status(tb_ledger_t *l, tb_store_t *store, const char *id, json_t **out,
		       tb_error_t *err)
{
	tb_ledger_task_t t;
	tb_ledger_attempt_t *hist = NULL;
	size_t n = 0;
	int rc;

	if ((rc = tb_ledger_inspect(l, id, &t, err)) < 0 ||
	    (rc = tb_ledger_history(l, id, &hist, &n, err)) < 0)
		return rc;
	if (!t.attempts && !n && !t.done) {
		free(hist);
		return tb_error_set(err, TB_ENOTFOUND,
				    "the ledger has never seen task %s (not delivered yet, or "
				    "another ledger.prefix)",
				    id);
	}
	const char *state = t.done       ? (t.manifest[0] ? "done" : "dead-lettered")
			    : t.lease[0] ? "running"
					 : "waiting";
	json_t *o = json_pack("{s:s,s:s,s:I}", "task", id, "state", state, "attempts",
			      (json_int_t)t.attempts);
	if (t.done) {
		json_object_set_new(o, "done_attempt", json_integer((json_int_t)t.done_attempt));
		if (t.manifest[0]) {
			tb_error_t merr;
			json_t *m = manifest_json(store, t.manifest, &merr);
			json_object_set_new(o, "manifest_key", json_string(t.manifest));
			json_object_set_new(o, "manifest",
					    m ? m : json_pack("{s:s}", "error", merr.msg));
		}
	} else if (t.lease[0]) {
		const char *sp = strchr(t.lease, ' ');
		json_object_set_new(o, "worker", json_string(sp ? sp + 1 : t.lease));
		json_object_set_new(o, "lease_ms_left", json_integer((json_int_t)t.lease_left));
		const char *ph = phase_of(l, sp ? sp + 1 : t.lease, id);
		if (ph)
			json_object_set_new(o, "phase", json_string(ph));
	}
	json_t *fails = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(fails,
				      json_pack("{s:I,s:I,s:s,s:s,s:s}", "attempt",
						(json_int_t)hist[i].attempt, "ts",
						(json_int_t)hist[i].ts, "worker", hist[i].worker,
						"code", hist[i].code, "reason", hist[i].reason));
	json_object_set_new(o, "failures", fails);
	free(hist);
	*out = o;
	return 0;
}

/* The fleet: live workers and the lag. */
static int fleet_status(const tb_config_t *cfg, tb_ledger_t *l, json_t **out, tb_error_t *err)
{
	char **infos;
	size_t n;
	int rc;

	if ((rc = tb_ledger_workers(l, &infos, &n, err)) < 0)
		return rc;
	json_t *workers = json_array();
	for (size_t i = 0; i < n; i++) {
		json_t *w = json_loads(infos[i], 0, NULL);
		json_array_append_new(workers, w ? w : json_pack("{s:s}", "unreadable", infos[i]));
		free(infos[i]);
	}
	free(infos);
	*out = json_pack("{s:s,s:s,s:o}", "group", cfg->kafka.group, "tasks_topic",
			 cfg->kafka.tasks_topic, "workers", workers);
	if (!strcmp(cfg->kafka.brokers, "mock")) {
		json_object_set_new(*out, "lag_error",
				    json_string("kafka.brokers is 'mock': no cluster to ask"));
	} else {
		tb_error_t kerr;
		json_t *lag = tb_fleet_lag(cfg, &kerr);
		json_object_set_new(*out, lag ? "lag" : "lag_error",
				    lag ? lag : json_string(kerr.msg));
	}
	return 0;
}

/* A figure of @p o as a number, or -1 when absent. */
static long long figure(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

/* One CPU map ("agent", "judges") as "user+system s", into @p buf. */
static const char *cpu_text(const json_t *u, const char *who, char *buf, size_t len)
{
	json_t *c = json_object_get(u, who);
	if (!c || figure(c, "user_ms") < 0)
		return "not reported";
	snprintf(buf, len, "%.2f s user, %.2f s system", (double)figure(c, "user_ms") / 1000.0,
		 (double)figure(c, "system_ms") / 1000.0);
	return buf;
}

/* The manifest's usage (schemas/manifest.md), a line per kind. */
static void print_usage(const json_t *u)
{
	char a[80], j[80];
	json_t *e;
	size_t i;

	if (!u)
		return;
	printf("  used      %.1f s; CPU: agent %s; judges %s\n",
	       (double)figure(u, "wall_ms") / 1000.0, cpu_text(u, "agent", a, sizeof(a)),
	       cpu_text(u, "judges", j, sizeof(j)));
	if (figure(u, "memory_peak_bytes") >= 0 || figure(u, "pids_peak") >= 0) {
		printf("            ");
		if (figure(u, "memory_peak_bytes") >= 0)
			printf("memory peak %.1f MiB",
			       (double)figure(u, "memory_peak_bytes") / 1048576.0);
		if (figure(u, "pids_peak") >= 0)
			printf("%sprocesses at most %lld",
			       figure(u, "memory_peak_bytes") >= 0 ? "; " : "",
			       figure(u, "pids_peak"));
		printf("\n");
	}
	if (figure(u, "outputs_bytes") >= 0)
		printf("  outputs   %lld bytes written, %lld saved\n", figure(u, "outputs_bytes"),
		       figure(u, "saved_bytes"));
	json_array_foreach(json_object_get(u, "egress"), i, e)
	{
		printf("  egress    %s: %lld requests (%lld refused), %lld bytes up, %lld down, "
		       "%.1f s upstream\n",
		       json_string_value(json_object_get(e, "endpoint")), figure(e, "requests"),
		       figure(e, "refused"), figure(e, "bytes_up"), figure(e, "bytes_down"),
		       (double)figure(e, "upstream_ms") / 1000.0);
		if (figure(e, "input_tokens") >= 0)
			printf("            tokens: %lld in (%lld cached), %lld out\n",
			       figure(e, "input_tokens"), figure(e, "cached_tokens"),
			       figure(e, "output_tokens"));
	}
}

static void print_task(const json_t *o)
{
	json_t *m = json_object_get(o, "manifest"), *v;
	size_t i;

	printf("task %s: %s", json_string_value(json_object_get(o, "task")),
	       json_string_value(json_object_get(o, "state")));
	if (json_object_get(o, "phase"))
		printf(", %s", json_string_value(json_object_get(o, "phase")));
	if (json_object_get(o, "worker"))
		printf(" on %s (lease %lld ms left)",
		       json_string_value(json_object_get(o, "worker")),
		       (long long)json_integer_value(json_object_get(o, "lease_ms_left")));
	printf("; %lld attempts\n", (long long)json_integer_value(json_object_get(o, "attempts")));
	if (json_object_get(o, "manifest_key"))
		printf("  manifest  %s (attempt %lld)\n",
		       json_string_value(json_object_get(o, "manifest_key")),
		       (long long)json_integer_value(json_object_get(o, "done_attempt")));
	if (m && json_object_get(m, "error"))
		printf("  manifest unreadable: %s\n",
		       json_string_value(json_object_get(m, "error")));
	if (m && json_object_get(m, "outcome")) {
		const char *reason = json_string_value(json_object_get(m, "reason"));
		printf("  outcome   %s%s%s\n", json_string_value(json_object_get(m, "outcome")),
		       reason ? ": " : "", reason ? reason : "");
		json_array_foreach(json_object_get(m, "verdicts"), i, v)
		    printf("  verdict   %s: %s\n", json_string_value(json_object_get(v, "judge")),
			   json_string_value(json_object_get(v, "outcome")));
		json_array_foreach(json_object_get(m, "artifacts"), i, v)
		    printf("  artifact  %s (%lld bytes) %s\n",
			   json_string_value(json_object_get(v, "path")),
			   (long long)json_integer_value(json_object_get(v, "size")),
			   json_string_value(json_object_get(v, "key")));
		print_usage(json_object_get(m, "usage"));
	}
	json_array_foreach(json_object_get(o, "failures"), i, v)
	    printf("  failed    attempt %lld on %s [%s]: %s\n",
		   (long long)json_integer_value(json_object_get(v, "attempt")),
		   json_string_value(json_object_get(v, "worker")),
		   json_string_value(json_object_get(v, "code")),
		   json_string_value(json_object_get(v, "reason")));
}

static void print_fleet(const json_t *o)
{
	json_t *ws = json_object_get(o, "workers"), *w, *t, *p;
	size_t i, k;
	uint64_t now = tb_wall_ms();

	printf("%zu workers alive\n", json_array_size(ws));
	json_array_foreach(ws, i, w)
	{
		json_int_t hb = json_integer_value(json_object_get(w, "heartbeat_ms"));
		printf("  %-24s pid %-7lld slots %-3lld running %-3zu waiting %-3lld "
		       "finished %-6lld heartbeat %.1f s ago\n",
		       json_string_value(json_object_get(w, "worker"))
			   ? json_string_value(json_object_get(w, "worker"))
			   : "(unreadable)",
		       (long long)json_integer_value(json_object_get(w, "pid")),
		       (long long)json_integer_value(json_object_get(w, "slots")),
		       json_array_size(json_object_get(w, "tasks")),
		       (long long)json_integer_value(json_object_get(w, "waiting")),
		       (long long)json_integer_value(json_object_get(w, "finished")),
		       hb > 0 && (uint64_t)hb < now ? (double)(now - (uint64_t)hb) / 1000 : 0.0);
		json_t *ic = json_object_get(w, "image_cache");
		if (ic)
			printf("    image cache: %lld images, %.1f of %.1f MiB\n",
			       (long long)json_integer_value(json_object_get(ic, "images")),
			       (double)json_integer_value(json_object_get(ic, "bytes")) / 1048576,
			       (double)json_integer_value(json_object_get(ic, "max_bytes")) /
				   1048576);
		json_array_foreach(json_object_get(w, "tasks"), k, t)
		{
			json_int_t since = json_integer_value(json_object_get(t, "since_ms"));
			printf("    %s attempt %lld in slot %lld for %.1f s\n",
			       json_string_value(json_object_get(t, "task")),
			       (long long)json_integer_value(json_object_get(t, "attempt")),
			       (long long)json_integer_value(json_object_get(t, "slot")),
			       since > 0 && (uint64_t)since < now
				   ? (double)(now - (uint64_t)since) / 1000
				   : 0.0);
		}
	}
	if (json_object_get(o, "lag_error")) {
		printf("lag: %s\n", json_string_value(json_object_get(o, "lag_error")));
		return;
	}
	long long total = 0;
	printf("group %s on %s\n", json_string_value(json_object_get(o, "group")),
	       json_string_value(json_object_get(o, "tasks_topic")));
	json_array_foreach(json_object_get(o, "lag"), i, p)
	{
		long long lag = (long long)json_integer_value(json_object_get(p, "lag"));
		long long at = (long long)json_integer_value(json_object_get(p, "committed"));
		char committed[24] = "none";
		if (at >= 0)
			snprintf(committed, sizeof(committed), "%lld", at);
		printf("  partition %-4lld committed %-10s end %-10lld lag %lld\n",
		       (long long)json_integer_value(json_object_get(p, "partition")), committed,
		       (long long)json_integer_value(json_object_get(p, "end")), lag);
		total += lag > 0 ? lag : 0;
	}
	printf("  total lag %lld\n", total);
}

int tb_cmd_status(int argc, char **argv)
{
	const char *path = NULL, *task = NULL;
	int as_json = 0, rc = TB_EXIT_CONFIG;
	tb_ledger_t *l = NULL;
	tb_store_t *store = NULL;
	json_t *o = NULL;
	tb_config_t cfg;
	tb_error_t err;

	const tb_opt_t opts[] = {
		{ "--config", TB_OPT_STRING, &path, 0, 0, NULL, 'c' },
		{ "--json", TB_OPT_FLAG, &as_json, 0, 0, NULL, 'j' },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	tb_opts_t opt = { "status", opts, &task, 1, 0 };

	if ((rc = tb_cmd_options(&opt, argc, argv, 1, usage)) >= 0)
		return rc;
	rc = TB_EXIT_CONFIG;
	if (tb_cmd_load_config(&cfg, path, &err) < 0) {
		fprintf(stderr, "taskbox status: %s\n", err.msg);
		return TB_EXIT_CONFIG;
	}
	if ((rc = tb_cmd_open_fleet("status", &cfg, &l, &store, &err)) != TB_EXIT_OK) {
		fprintf(stderr, "taskbox status: %s\n", err.msg);
		goto out;
	}
	int got = task ? task_status(l, store, task, &o, &err) : fleet_status(&cfg, l, &o, &err);
	if (got < 0) {
		fprintf(stderr, "taskbox status: %s\n", err.msg);
		rc = got == TB_ENOTFOUND ? TB_EXIT_NOT_FOUND : TB_EXIT_FAILURE;
		goto out;
	}
	if (as_json) {
		char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
		printf("%s\n", text ? text : "{}");
		free(text);
	} else if (task) {
		print_task(o);
	} else {
		print_fleet(o);
	}
	rc = TB_EXIT_OK;
out:
	json_decref(o);
	if (l)
		tb_ledger_close(l);
	tb_store_close(store);
	tb_config_free(&cfg);
	return rc;
}
