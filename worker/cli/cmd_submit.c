/*
 * cmd_submit.c: `taskbox submit`: a task from flags or a JSON file onto
 * the tasks topic, keyed by its id; prints the id. With --wait it follows
 * the task's events live and exits with its outcome.
 */
#include "cmd.h"
#include "follow.h"
#include "submit.h"
#include "submit_replay.h"
#include "uploads.h"

#include "tb/clock.h"
#include "tb/config.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "usage: taskbox submit [--config FILE] [--wait [--json] [--timeout SECONDS]]\n"
	    "                      (--file TASK.json | --recipe URL --commit SHA\n"
	    "                       (--prompt TEXT | --prompt-file FILE) [options]\n"
	    "                       | --replay-from TASK [replay options])\n\n"
	    "Puts one task on the tasks topic and prints its id.\n"
	    "  --file FILE         the task as JSON (schemas/task.md); `id` and\n"
	    "                      `submitted_at` are filled in when missing\n"
	    "  --recipe URL        the recipe's git repository\n"
	    "  --commit SHA        its pinned commit (40 hex digits)\n"
	    "  --prompt TEXT       the first prompt (--prompt-file: from a file, - stdin)\n"
	    "  --id ID             the task id (default: t-<date>-<time>-<random>)\n"
	    "  --runtime NAME      the runtime (default: default)\n"
	    "  --interactive       an interactive task (follow-ups: taskbox send/end)\n"
	    "  --input NAME=KEY    an artifact key placed at /inputs/NAME, or\n"
	    "  --input NAME=TASK:PATH  an earlier task's output, or\n"
	    "  --input NAME=@PATH  a file here, uploaded first (a directory: each file\n"
	    "                      under it, as NAME/its path) (repeatable)\n"
	    "  --limit KEY=N       wall_seconds, memory_mb, pids, cpu_millis, outputs_mb,\n"
	    "                      and the budgets max_tokens, max_input_tokens,\n"
	    "                      max_output_tokens, max_requests, max_egress_mb\n"
	    "  --label KEY=VALUE   copied to the task's events (repeatable)\n"
	    "  --replay-from TASK  the earlier task again, as its egress recording keeps\n"
	    "                      it, its providers answered from that recording\n"
	    "                      (schemas/task.md, \"Replay\"); with --id, --commit (another\n"
	    "                      recipe commit), --replay-attempt N (default: the one\n"
	    "                      that counted), --replay-mode strict|fill and\n"
	    "                      --replay-pace instant|recorded\n"
	    "  --wait              follow the task's events until it is settled\n"
	    "  --json              with --wait: events as JSON lines\n"
	    "  --timeout SECONDS   with --wait: give up waiting after this long\n"
	    "Exit: 0 submitted (with --wait: succeeded), 1 Kafka failed, 2 usage,\n"
	    "3 configuration, 4 the task is invalid (the field is named); with\n"
	    "--wait also 6 the task ended without success, 7 dead-lettered,\n"
	    "8 --timeout passed first (the task goes on).\n");
}

/* t-20261129-134501-9f2c4e1a: sortable by time, unique by chance. */
static void new_id(char *buf, size_t len)
{
	unsigned char r[4] = { 0 };
	time_t now = time(NULL);
	struct tm tm;
	char when[32];

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) { /* never short for 4 bytes */
		uint64_t t = tb_wall_ms();
		memcpy(r, &t, sizeof(r));
	}
	gmtime_r(&now, &tm);
	strftime(when, sizeof(when), "%Y%m%d-%H%M%S", &tm);
	snprintf(buf, len, "t-%s-%02x%02x%02x%02x", when, r[0], r[1], r[2], r[3]);
}

static json_t *load_file(const char *path)
{
	json_error_t je;
	json_t *doc = !strcmp(path, "-") ? json_loadf(stdin, 0, &je) : json_load_file(path, 0, &je);

	if (!doc)
		fprintf(stderr, "taskbox submit: %s:%d: %s\n", path, je.line, je.text);
	else if (!json_is_object(doc)) {
		fprintf(stderr, "taskbox submit: %s: a task is a JSON object\n", path);
		json_decref(doc);
		doc = NULL;
	}
	return doc;
}

/* "K=V" split at the first '='; 0 or -1 with a message. */
static int split(const char *flag, char *arg, char **k, char **v)
{
	char *eq = strchr(arg, '=');

	if (!eq || eq == arg) {
		fprintf(stderr, "taskbox submit: %s wants KEY=VALUE, not '%s'\n", flag, arg);
		return -1;
	}
	*eq = '\0';
	*k = arg, *v = eq + 1;
	return 0;
}

static json_t *object_at(json_t *doc, const char *key)
{
	json_t *o = json_object_get(doc, key);
	if (!json_is_object(o)) {
		o = json_object();
		json_object_set_new(doc, key, o);
	}
	return o;
}

static int add_input(json_t *doc, char *arg)
{
	char *name, *what;
	json_t *inputs = json_object_get(doc, "inputs");

	if (split("--input", arg, &name, &what) < 0)
		return -1;
	if (!json_is_array(inputs)) {
		inputs = json_array();
		json_object_set_new(doc, "inputs", inputs);
	}
	/* TASK:PATH names an earlier task's output; an artifact key is a
	 * path (tasks/...), so a ':' before any '/' marks the first form;
	 * @PATH a file of one's own, uploaded before the task goes
	 * (upload_inputs). */
	char *colon = strchr(what, ':'), *slash = strchr(what, '/');
	if (colon && what[0] != '@' && (!slash || colon < slash)) {
		*colon = '\0';
		json_array_append_new(inputs, json_pack("{s:s,s:s,s:s}", "name", name, "task", what,
							"path", colon + 1));
	} else {
		json_array_append_new(inputs,
				      json_pack("{s:s,s:s}", "name", name, "artifact", what));
	}
	return 0;
}

static int add_limit(json_t *doc, char *arg)
{
	char *k, *v, *end;

	if (split("--limit", arg, &k, &v) < 0)
		return -1;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (errno || end == v || *end || n < 0) {
		fprintf(stderr, "taskbox submit: --limit %s wants a whole number, not '%s'\n", k,
			v);
		return -1;
	}
	json_object_set_new(object_at(doc, "limits"), k, json_integer(n));
	return 0;
}

#define MAX_REPEATS 64 /* --input, --limit, --label: each at most this often */

typedef struct submit_args {
	const char *config, *file, *recipe, *commit, *prompt, *prompt_file, *id, *runtime;
	submit_replay_t replay;
	int interactive, wait, json;
	uint64_t timeout_ms;
	char *inputs[MAX_REPEATS], *limits[MAX_REPEATS], *labels[MAX_REPEATS];
	size_t ninputs, nlimits, nlabels;
} submit_args_t;

/* The task document from the arguments; NULL after a message. */
static json_t *build(submit_args_t *a)
{
	json_t *doc;

	if (a->file) {
		if (a->recipe || a->commit || a->prompt || a->prompt_file) {
			fprintf(stderr, "taskbox submit: --file or --recipe/--commit/--prompt, "
					"not both\n");
			return NULL;
		}
		if (!(doc = load_file(a->file)))
			return NULL;
	} else {
		if (!a->recipe || !a->commit || (!a->prompt == !a->prompt_file)) {
			fprintf(stderr, "taskbox submit: --recipe, --commit and one of --prompt "
					"or --prompt-file are needed (or --file)\n");
			return NULL;
		}
		char *text = a->prompt_file ? tb_cmd_read_prompt("submit", a->prompt_file) : NULL;
		if (a->prompt_file && !text)
			return NULL;
		doc =
		    json_pack("{s:s,s:i,s:s,s:{s:s,s:s},s:s,s:s}", "schema", "task", "v", 1, "kind",
			      a->interactive ? "interactive" : "one-shot", "recipe", "url",
			      a->recipe, "commit", a->commit, "prompt", text ? text : a->prompt,
			      "runtime", a->runtime ? a->runtime : "default");
		free(text);
		if (!doc) {
			fprintf(stderr, "taskbox submit: the prompt is not UTF-8 text\n");
			return NULL;
		}
	}
	if (a->id)
		json_object_set_new(doc, "id", json_string(a->id));
	if (!json_object_get(doc, "id")) {
		char id[64];
		new_id(id, sizeof(id));
		json_object_set_new(doc, "id", json_string(id));
	}
	if (!json_object_get(doc, "submitted_at"))
		json_object_set_new(doc, "submitted_at", json_integer((json_int_t)tb_wall_ms()));
	int bad = 0;
	for (size_t i = 0; i < a->ninputs && !bad; i++)
		bad = add_input(doc, a->inputs[i]);
	for (size_t i = 0; i < a->nlimits && !bad; i++)
		bad = add_limit(doc, a->limits[i]);
	for (size_t i = 0; i < a->nlabels && !bad; i++) {
		char *k, *v;
		if (!(bad = split("--label", a->labels[i], &k, &v)))
			json_object_set_new(object_at(doc, "labels"), k, json_string(v));
	}
	if (bad) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

/* The uploads of one --input NAME=@PATH, into the task's inputs. */
typedef struct upload_into {
	json_t *inputs;
	const char *name;
	int dir; /* PATH is a directory: its files are NAME/<path under it> */
} upload_into_t;

static void uploaded(void *ud, const tb_upload_t *u)
{
	upload_into_t *in = ud;
	const char *below = in->dir ? u->rel : "";
	char *name = NULL;
	if (asprintf(&name, "%s%s%s", in->name, below[0] ? "/" : "", below) < 0)
		abort(); /* out of memory: docs/architecture.md, "Conventions" */
	/* the block list too: read on demand, every block is checked against it */
	json_array_append_new(in->inputs,
			      json_pack("{s:s,s:s,s:s,s:s}", "name", name, "artifact", u->key,
					"sha256", u->sha256, "blocks", u->blocks));
	fprintf(stderr, "taskbox submit: %s %s (%s)\n",
		u->uploaded ? "uploaded" : "already there:", name, u->key);
	free(name);
}

/* Uploads the files the inputs name as @PATH, each becoming the input
 * (or, for a directory, the inputs) of its upload. TB_EXIT_*. */
static int upload_inputs(json_t *doc, const char *config)
{
	json_t *inputs = json_object_get(doc, "inputs"), *kept = json_array(), *in;
	tb_store_t *store = NULL;
	tb_config_t cfg = { 0 };
	tb_error_t err = { 0 };
	int rc = TB_EXIT_OK, loaded = 0;
	size_t i;

	json_array_foreach(inputs, i, in)
	{
		const char *what = json_string_value(json_object_get(in, "artifact"));
		if (!what || what[0] != '@') {
			json_array_append(kept, in);
			continue;
		}
		if (!loaded++ && (tb_cmd_load_config(&cfg, config, &err) < 0 ||
				  tb_store_open(&store, &cfg.store, &err) < 0)) {
			rc = TB_EXIT_CONFIG;
			break;
		}
		struct stat st;
		upload_into_t into = { kept, json_string_value(json_object_get(in, "name")),
				       stat(what + 1, &st) == 0 && S_ISDIR(st.st_mode) };
		size_t later = json_array_size(inputs) - i - 1,
		       have = json_array_size(kept) + later;
		size_t room = have >= 64 ? 0 : 64 - have; /* a task names 64 inputs at most */
		if (tb_uploads_put(store, what + 1, room, uploaded, &into, &err) < 0) {
			rc = err.code == TB_ENOTFOUND || err.code == TB_EINVAL ? TB_EXIT_USAGE
									       : TB_EXIT_FAILURE;
			break;
		}
	}
	if (rc != TB_EXIT_OK)
		fprintf(stderr, "taskbox submit: --input: %s\n", err.msg);
	else if (loaded)
		json_object_set(doc, "inputs", kept);
	json_decref(kept);
	tb_store_close(store);
	if (loaded)
		tb_config_free(&cfg);
	return rc;
}

/* The task a replay sends (--replay-from); NULL after a message, with
 * the exit code in *code. */
static json_t *build_replay(submit_args_t *a, int *code)
{
	tb_ledger_t *l = NULL;
	tb_store_t *s = NULL;
	tb_config_t cfg;
	tb_error_t err;
	json_t *doc = NULL;

	*code = TB_EXIT_USAGE;
	if (a->file || a->recipe || a->prompt || a->prompt_file || a->runtime || a->interactive ||
	    a->ninputs || a->nlimits || a->nlabels) {
		fprintf(stderr, "taskbox submit: --replay-from takes the task from its recording: "
				"only --id, --commit and the --replay-* options go with it\n");
		return NULL;
	}
	a->replay.commit = a->commit;
	if (tb_cmd_load_config(&cfg, a->config, &err) < 0) {
		fprintf(stderr, "taskbox submit: %s\n", err.msg);
		*code = TB_EXIT_CONFIG;
		return NULL;
	}
	if ((*code = tb_cmd_open_fleet("submit", &cfg, &l, &s, &err)) == TB_EXIT_OK &&
	    !(doc = tb_submit_replay_doc(l, s, &a->replay, &err)))
		*code = err.code == TB_ENOTFOUND || err.code == TB_EINVAL ? TB_EXIT_INVALID
									  : TB_EXIT_FAILURE;
	if (!doc)
		fprintf(stderr, "taskbox submit: --replay-from %s: %s\n", a->replay.from, err.msg);
	tb_store_close(s);
	tb_ledger_close(l);
	tb_config_free(&cfg);
	if (doc && a->id)
		json_object_set_new(doc, "id", json_string(a->id));
	if (doc && !json_object_get(doc, "id")) {
		char id[64];
		new_id(id, sizeof(id));
		json_object_set_new(doc, "id", json_string(id));
	}
	if (doc)
		json_object_set_new(doc, "submitted_at", json_integer((json_int_t)tb_wall_ms()));
	return doc;
}

/* The canonical bytes of a valid task; TB_EXIT_* on failure. */
static int encode(const json_t *doc, msgpack_sbuffer *out, char *id, size_t idlen)
{
	tb_error_t err;

	if (tb_submit_encode(doc, out, id, idlen, &err) < 0) {
		fprintf(stderr, "taskbox submit: not a valid task: %s\n", err.msg);
		return TB_EXIT_INVALID;
	}
	return TB_EXIT_OK;
}

static int produce(const tb_config_t *cfg, const char *id, const msgpack_sbuffer *bytes)
{
	tb_error_t err;

	if (tb_submit_send(cfg, id, bytes->data, bytes->size, &err) < 0) {
		fprintf(stderr, "taskbox submit: %s\n", err.msg);
		return TB_EXIT_FAILURE;
	}
	return TB_EXIT_OK;
}

/* --wait: the task's events from just before it was submitted. */
static int wait_for(const tb_config_t *cfg, const submit_args_t *a, const char *id, uint64_t since)
{
	tb_ledger_t *l = NULL;
	tb_store_t *store = NULL;
	tb_follow_result_t res;
	tb_error_t err;

	if (tb_cmd_open_fleet("submit", cfg, &l, &store, &err) != TB_EXIT_OK)
		fprintf(stderr, "taskbox submit: %s (waiting on the events alone)\n", err.msg);
	tb_follow_opts_t o = { .task = id,
			       .since_ms = (int64_t)since,
			       .until_settled = 1,
			       .timeout_ms = a->timeout_ms,
			       .json = a->json,
			       .out = stdout,
			       .ledger = l,
			       .store = store,
			       .stop = &tb_cmd_stop };
	int rc = tb_follow(cfg, &o, &res, &err);
	if (l)
		tb_ledger_close(l);
	tb_store_close(store);
	if (rc == TB_ETIMEOUT) {
		fprintf(stderr, "taskbox submit: %s: %s; task %s goes on\n", id, err.msg, id);
		return TB_EXIT_TIMEOUT;
	} else if (rc < 0) {
		fprintf(stderr, "taskbox submit: %s\n", err.msg);
		return TB_EXIT_FAILURE;
	} else if (!res.settled) {
		return TB_EXIT_TIMEOUT; /* interrupted */
	}
	fprintf(a->json ? stderr : stdout, "task %s: %s (attempt %llu)%s%s\n", id, res.outcome,
		(unsigned long long)res.attempt, res.reason[0] ? ": " : "", res.reason);
	return tb_cmd_outcome_exit(res.outcome);
}

int tb_cmd_submit(int argc, char **argv)
{
	submit_args_t a = { 0 };
	char id[160];
	tb_config_t cfg;
	tb_error_t err;
	int rc = 0;

	uint64_t timeout_s = 0;
	tb_opt_list_t inputs = { a.inputs, 0, MAX_REPEATS }, limits = { a.limits, 0, MAX_REPEATS },
		      labels = { a.labels, 0, MAX_REPEATS };
	const tb_opt_t opts[] = {
		{ "--config", TB_OPT_STRING, &a.config, 0, 0, NULL, 'c' },
		{ "--file", TB_OPT_STRING, &a.file, 0, 0, NULL, 'f' },
		{ "--recipe", TB_OPT_STRING, &a.recipe, 0, 0, NULL, 'r' },
		{ "--commit", TB_OPT_STRING, &a.commit, 0, 0, NULL, 0 },
		{ "--prompt", TB_OPT_STRING, &a.prompt, 0, 0, NULL, 'p' },
		{ "--prompt-file", TB_OPT_STRING, &a.prompt_file, 0, 0, NULL, 0 },
		{ "--id", TB_OPT_STRING, &a.id, 0, 0, NULL, 0 },
		{ "--runtime", TB_OPT_STRING, &a.runtime, 0, 0, NULL, 0 },
		{ "--input", TB_OPT_LIST, &inputs, 0, 0, NULL, 0 },
		{ "--limit", TB_OPT_LIST, &limits, 0, 0, NULL, 0 },
		{ "--label", TB_OPT_LIST, &labels, 0, 0, NULL, 'l' },
		{ "--interactive", TB_OPT_FLAG, &a.interactive, 0, 0, NULL, 'i' },
		{ "--wait", TB_OPT_FLAG, &a.wait, 0, 0, NULL, 'w' },
		{ "--json", TB_OPT_FLAG, &a.json, 0, 0, NULL, 'j' },
		{ "--timeout", TB_OPT_UINT, &timeout_s, 1, 7 * 86400, "seconds", 't' },
		{ "--replay-from", TB_OPT_STRING, &a.replay.from, 0, 0, NULL, 0 },
		{ "--replay-attempt", TB_OPT_UINT, &a.replay.attempt, 1, 1000, "attempt", 0 },
		{ "--replay-mode", TB_OPT_STRING, &a.replay.mode, 0, 0, NULL, 0 },
		{ "--replay-pace", TB_OPT_STRING, &a.replay.pace, 0, 0, NULL, 0 },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	tb_opts_t o = { "submit", opts, NULL, 0, 0 };

	if ((rc = tb_cmd_options(&o, argc, argv, 1, usage)) >= 0)
		return rc;
	a.ninputs = inputs.n, a.nlimits = limits.n, a.nlabels = labels.n;
	a.timeout_ms = timeout_s * 1000;
	int bad = TB_EXIT_USAGE;
	json_t *doc = a.replay.from ? build_replay(&a, &bad) : build(&a);
	if (!doc)
		return bad;
	if ((rc = upload_inputs(doc, a.config)) != TB_EXIT_OK) {
		json_decref(doc);
		return rc;
	}
	msgpack_sbuffer bytes;
	msgpack_sbuffer_init(&bytes);
	rc = encode(doc, &bytes, id, sizeof(id));
	json_decref(doc);
	if (rc != TB_EXIT_OK) {
		msgpack_sbuffer_destroy(&bytes);
		return rc;
	}
	if (tb_cmd_load_config(&cfg, a.config, &err) < 0) {
		fprintf(stderr, "taskbox submit: %s\n", err.msg);
		msgpack_sbuffer_destroy(&bytes);
		return TB_EXIT_CONFIG;
	}
	if (!strcmp(cfg.kafka.brokers, "mock")) {
		fprintf(stderr, "taskbox submit: kafka.brokers is 'mock', which lives inside one "
				"process: point it at the cluster (TASKBOX_KAFKA_BROKERS)\n");
		rc = TB_EXIT_CONFIG;
		goto out;
	}
	/* Events are stamped by the workers' clocks: a little slack. */
	uint64_t since = tb_wall_ms() - 2000;
	if ((rc = produce(&cfg, id, &bytes)) != TB_EXIT_OK)
		goto out;
	printf("%s\n", id);
	fflush(stdout);
	if (a.wait) {
		tb_cmd_stop_on_signals();
		rc = wait_for(&cfg, &a, id, since);
	}
out:
	msgpack_sbuffer_destroy(&bytes);
	tb_config_free(&cfg);
	return rc;
}
