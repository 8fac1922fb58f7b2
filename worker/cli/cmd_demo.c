/*
 * cmd_demo.c: `taskbox demo`, the embedded default. Everything runs in
 * this process: librdkafka's mock cluster stands in for Kafka, the
 * in-process ledger for Redis, a temporary directory for the artifact
 * store. It submits the example recipes' tasks (the hello recipe one-shot,
 * the chat recipe as an interactive session with a follow-up and an end,
 * a task whose environment is an image the demo writes: demo_image.h),
 * a duplicate, a missing commit and three bad messages; one worker runs
 * them in sandboxes while the events topic is shown live; then the DLQ
 * and where the records are. Without root (no sandboxes) it shows intake
 * only.
 */
#include "cmd.h"
#include "follow.h"

#include "demo_image.h"
#include "demo_recipe.h"
#include "intake.h"
#include "sandbox.h"
#include "tb/clock.h"
#include "tb/fsutil.h"
#include "worker.h"
#include "tb/json_mpack.h"
#include "tb/kafka.h"
#include "tb/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TASKS "taskbox.tasks"
#define EVENTS "taskbox.events"
#define DLQ "taskbox.dlq"
#define DEMO_COMMIT "5d41402abc4b2a76b9719d911017c592ae3f0c11"
#define DEMO_MSGS 11 /* the full demo's messages; the last, the image task, when it can be */

enum { MSG_HELLO, MSG_CHAT, MSG_FOLLOWUP, MSG_END, MSG_BRANCH, MSG_FUTURE, MSG_JUNK, NMSGS };
#define EXPECT_ACCEPTED 4 /* the first four are valid */

static const struct {
	const char *key;
	const char *what;
} demo_msgs[NMSGS] = {
	[MSG_HELLO] = { "demo-hello", "one-shot task" },
	[MSG_CHAT] = { "demo-chat", "interactive task" },
	[MSG_FOLLOWUP] = { "demo-chat", "follow-up 1" },
	[MSG_END] = { "demo-chat", "follow-up end" },
	[MSG_BRANCH] = { "demo-branch", "task pinned to a branch" },
	[MSG_FUTURE] = { "demo-future", "task from a future version" },
	[MSG_JUNK] = { NULL, "random bytes" },
};

static void usage(FILE *out)
{
	fprintf(out, "usage: taskbox demo [--recipe DIR] [--chat DIR] [--keep]\n\n"
		     "Runs taskbox's embedded demo, all in this process: librdkafka's mock\n"
		     "cluster, a local directory as the artifact store, the in-process\n"
		     "ledger, one worker. It submits the hello recipe's task (committed to a\n"
		     "fresh git repository from DIR, default examples/recipes/hello, or the\n"
		     "installed share/taskbox/recipes/hello outside a source tree), the\n"
		     "same task again, an interactive session of the chat recipe (--chat\n"
		     "DIR, default the chat recipe found the same way) with a follow-up and\n"
		     "an end, and\n"
		     "bad messages; shows the conversation live, the\n"
		     "verdict and the dead letters, and where the artifacts are. Building\n"
		     "sandboxes needs root; without it the demo shows intake only.\n"
		     "--keep leaves the demo's directory (store, records) in place.\n"
		     "Exit: 0 when every message had the expected outcome, 1 otherwise.\n");
}

static int encode_task(msgpack_sbuffer *out, const char *id, int kind, const char *prompt,
		       tb_error_t *err)
{
	tb_task_t t = { 0 };

	t.id = (char *)id;
	t.kind = kind;
	t.recipe.url = (char *)"file://examples/recipes/hello";
	t.recipe.commit = (char *)DEMO_COMMIT;
	t.prompt = (char *)prompt;
	t.runtime = (char *)"default";
	t.submitted_at = tb_wall_ms();
	return tb_msg_encode(out, &tb_schema_task, &t, err);
}

static int encode_followup(msgpack_sbuffer *out, uint64_t seq, const char *text, tb_error_t *err)
{
	tb_followup_t f = { 0 };

	f.task_id = (char *)"demo-chat";
	f.seq = seq;
	f.kind = text ? TB_FOLLOWUP_PROMPT : TB_FOLLOWUP_END;
	f.text = (char *)text;
	f.sent_at = tb_wall_ms();
	return tb_msg_encode(out, &tb_schema_followup, &f, err);
}

/* Bad messages are written as JSON and packed without validation, the way
 * a careless producer in another language would. */
static int encode_json(msgpack_sbuffer *out, const char *text, tb_error_t *err)
{
	json_error_t jerr;
	json_t *j = json_loads(text, 0, &jerr);
	int rc;

	if (!j)
		return tb_error_set(err, TB_EINVAL, "demo JSON: %s", jerr.text);
	rc = tb_json_to_mpack(out, j, err);
	json_decref(j);
	return rc;
}

static int build_messages(msgpack_sbuffer *v, tb_error_t *err)
{
	static const uint8_t junk[] = { 0xc1, 0xde, 0xad, 0xbe, 0xef };
	int rc;

	if ((rc = encode_task(&v[MSG_HELLO], "demo-hello", TB_TASK_ONE_SHOT,
			      "Say hello to the queue.", err)) < 0 ||
	    (rc = encode_task(&v[MSG_CHAT], "demo-chat", TB_TASK_INTERACTIVE,
			      "Let's write a haiku about queues.", err)) < 0 ||
	    (rc = encode_followup(&v[MSG_FOLLOWUP], 1, "Now make it rhyme.", err)) < 0 ||
	    (rc = encode_followup(&v[MSG_END], 2, NULL, err)) < 0 ||
	    (rc = encode_json(&v[MSG_BRANCH],
			      "{\"schema\":\"task\",\"v\":1,\"id\":\"demo-branch\","
			      "\"kind\":\"one-shot\",\"recipe\":{\"url\":\"file://x\","
			      "\"commit\":\"main\"},\"prompt\":\"hi\",\"runtime\":\"default\","
			      "\"submitted_at\":1}",
			      err)) < 0 ||
	    (rc = encode_json(&v[MSG_FUTURE],
			      "{\"schema\":\"task\",\"v\":2,\"id\":\"demo-future\"}", err)) < 0)
		return rc;
	msgpack_sbuffer_write(&v[MSG_JUNK], (const char *)junk, sizeof(junk));
	return 0;
}

static void print_accepted(const tb_intake_t *in, const rd_kafka_message_t *m)
{
	if (in->kind == TB_INTAKE_TASK)
		printf("  accepted  p%d@%-3lld task %s (%s, runtime %s): \"%s\"\n", m->partition,
		       (long long)m->offset, in->task.id,
		       in->task.kind == TB_TASK_ONE_SHOT ? "one-shot" : "interactive",
		       in->task.runtime, in->task.prompt);
	else
		printf("  accepted  p%d@%-3lld follow-up %llu for %s: %s\n", m->partition,
		       (long long)m->offset, (unsigned long long)in->followup.seq,
		       in->followup.task_id,
		       in->followup.text ? in->followup.text : "(end of session)");
}

/* Intake of one message; bad ones go to the DLQ. Returns 1 if accepted. */
static int handle(rd_kafka_t *producer, const rd_kafka_message_t *m, int *failed)
{
	tb_msg_origin_t origin = {
		.topic = rd_kafka_topic_name(m->rkt),
		.partition = m->partition,
		.offset = m->offset,
		.key = m->key,
		.key_len = m->key_len,
	};
	msgpack_sbuffer sb;
	tb_intake_t in;
	tb_error_t err;
	int accepted = 0;

	if (tb_intake_decode(&in, m->payload, m->len, &origin, tb_wall_ms()) < 0) {
		fprintf(stderr, "taskbox demo: out of memory\n");
		*failed = 1;
		return 0;
	}
	msgpack_sbuffer_init(&sb);
	if (in.kind == TB_INTAKE_DEAD) {
		printf("  refused   p%d@%-3lld -> DLQ: %s\n", m->partition, (long long)m->offset,
		       in.dlq.reason);
		if (tb_msg_encode(&sb, &tb_schema_dlq, &in.dlq, &err) < 0 ||
		    tb_kafka_produce(producer, DLQ, in.dlq.task_id, sb.data, sb.size, &err) < 0) {
			fprintf(stderr, "taskbox demo: DLQ: %s\n", err.msg);
			*failed = 1;
		}
	} else {
		print_accepted(&in, m);
		accepted = 1;
	}
	msgpack_sbuffer_destroy(&sb);
	tb_intake_free(&in);
	return accepted;
}

/* Reads the DLQ topic back and prints each record's cause and reason. */
static int show_dlq(const char *brokers, size_t expect)
{
	rd_kafka_topic_partition_list_t *parts;
	rd_kafka_t *c;
	tb_error_t err;
	size_t seen = 0;

	if (tb_kafka_consumer_new(&c, brokers, "taskbox-demo-dlq", NULL, NULL, NULL, NULL, NULL,
				  &err) < 0) {
		fprintf(stderr, "taskbox demo: %s\n", err.msg);
		return -1;
	}
	parts = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(parts, DLQ, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_assign(c, parts);
	rd_kafka_topic_partition_list_destroy(parts);
	printf("\nDLQ topic %s:\n", DLQ);
	for (int i = 0; i < 100 && seen < expect; i++) { /* at most ~20 s */
		rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 200);
		tb_dlq_t rec;
		if (!m)
			continue;
		if (!m->err && tb_msg_decode(&tb_schema_dlq, &rec, m->payload, m->len, &err) == 0) {
			printf("  %s (task %s, from %s p%llu@%llu, %zu original bytes kept)\n",
			       rec.reason, rec.task_id ? rec.task_id : "unknown", rec.topic,
			       (unsigned long long)rec.partition, (unsigned long long)rec.offset,
			       rec.original.len);
			tb_msg_free(&tb_schema_dlq, &rec);
			seen++;
		}
		rd_kafka_message_destroy(m);
	}
	rd_kafka_consumer_close(c);
	rd_kafka_destroy(c);
	return seen == expect ? 0 : -1;
}

/* Subscribes and takes every demo message through intake, committing each
 * after it is handled (intake is this demo's whole lifecycle). */
static size_t run_intake(rd_kafka_t *consumer, rd_kafka_t *producer, size_t *seen, int *failed)
{
	rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
	size_t accepted = 0;

	rd_kafka_topic_partition_list_add(sub, TASKS, RD_KAFKA_PARTITION_UA);
	rd_kafka_subscribe(consumer, sub);
	rd_kafka_topic_partition_list_destroy(sub);
	for (int i = 0; i < 300 && *seen < NMSGS; i++) { /* at most ~60 s */
		rd_kafka_message_t *m = rd_kafka_consumer_poll(consumer, 200);
		if (!m)
			continue;
		if (!m->err) {
			(*seen)++;
			accepted += (size_t)handle(producer, m, failed);
			rd_kafka_commit_message(consumer, m, 0);
		}
		rd_kafka_message_destroy(m);
	}
	rd_kafka_flush(producer, 10000);
	return accepted;
}

static int demo_intake_only(void)
{
	static const tb_kafka_topic_spec_t topics[] = { { TASKS, 4 }, { EVENTS, 4 }, { DLQ, 1 } };
	msgpack_sbuffer values[NMSGS];
	tb_kafka_mock_t *mock = NULL;
	rd_kafka_t *producer = NULL, *consumer = NULL;
	size_t seen = 0, accepted;
	int failed = 0, rc = TB_EXIT_FAILURE;
	tb_error_t err;

	tb_log_set_level(TB_LOG_WARN);
	for (size_t i = 0; i < NMSGS; i++)
		msgpack_sbuffer_init(&values[i]);
	if (build_messages(values, &err) < 0 ||
	    tb_kafka_mock_start(&mock, 1, topics, 3, &err) < 0 ||
	    tb_kafka_producer_new(&producer, tb_kafka_mock_bootstraps(mock), NULL, &err) < 0 ||
	    tb_kafka_consumer_new(&consumer, tb_kafka_mock_bootstraps(mock), "taskbox-demo", NULL,
				  NULL, NULL, NULL, NULL, &err) < 0) {
		fprintf(stderr, "taskbox demo: %s\n", err.msg);
		goto cleanup;
	}
	printf("taskbox demo: in-process Kafka mock cluster at %s\n\n",
	       tb_kafka_mock_bootstraps(mock));
	printf("A producer submits %d messages to %s:\n", NMSGS, TASKS);
	for (size_t i = 0; i < NMSGS; i++) {
		printf("  %-27s key %-12s %4zu bytes\n", demo_msgs[i].what,
		       demo_msgs[i].key ? demo_msgs[i].key : "(none)", values[i].size);
		if (tb_kafka_produce(producer, TASKS, demo_msgs[i].key, values[i].data,
				     values[i].size, &err) < 0) {
			fprintf(stderr, "taskbox demo: %s\n", err.msg);
			goto cleanup;
		}
	}
	rd_kafka_flush(producer, 10000);

	printf("\nA worker in group taskbox-demo takes them through intake:\n");
	accepted = run_intake(consumer, producer, &seen, &failed);
	if (show_dlq(tb_kafka_mock_bootstraps(mock), NMSGS - EXPECT_ACCEPTED) < 0)
		failed = 1;

	printf("\n%zu messages read: %zu accepted, %zu dead-lettered with their reasons.\n", seen,
	       accepted, seen - accepted);
	printf("Running accepted tasks in sandboxes arrives with the worker; see README.md.\n");
	rc = !failed && seen == NMSGS && accepted == EXPECT_ACCEPTED ? TB_EXIT_OK : TB_EXIT_FAILURE;
cleanup:
	if (consumer) {
		rd_kafka_consumer_close(consumer);
		rd_kafka_destroy(consumer);
	}
	if (producer)
		rd_kafka_destroy(producer);
	tb_kafka_mock_free(mock);
	for (size_t i = 0; i < NMSGS; i++)
		msgpack_sbuffer_destroy(&values[i]);
	return rc;
}

/* ------------------------------------------------------ the full demo */

struct demo_run {
	tb_worker_deps_t deps;
	tb_worker_stats_t stats;
	volatile sig_atomic_t stop;
	uint64_t expect;
	int done;
	int rc;
	tb_error_t err;
};

static void *demo_worker(void *arg)
{
	struct demo_run *d = arg;
	d->rc = tb_worker_run(&d->deps, &d->stop, d->expect, &d->stats, &d->err);
	__atomic_store_n(&d->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* Follows the events topic while the worker runs, then a little after. */
static void follow_events(const char *brokers, struct demo_run *d)
{
	rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(4);
	rd_kafka_t *c;
	tb_error_t err;
	int quiet = 0;

	if (tb_kafka_consumer_new(&c, brokers, "taskbox-demo-watch", NULL, NULL, NULL, NULL, NULL,
				  &err) < 0) {
		fprintf(stderr, "taskbox demo: %s\n", err.msg);
		rd_kafka_topic_partition_list_destroy(parts);
		return;
	}
	for (int p = 0; p < 4; p++)
		rd_kafka_topic_partition_list_add(parts, EVENTS, p)->offset =
		    RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_assign(c, parts);
	rd_kafka_topic_partition_list_destroy(parts);
	/* Bounded: ten minutes at most, and one quiet second after the end. */
	for (int i = 0; i < 3000 && quiet < 5; i++) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 200);
		if (!m) {
			quiet += __atomic_load_n(&d->done, __ATOMIC_SEQ_CST);
			continue;
		}
		tb_event_t ev;
		if (!m->err &&
		    tb_msg_decode(&tb_schema_event, &ev, m->payload, m->len, &err) == 0) {
			tb_follow_print_event(stdout, &ev);
			tb_msg_free(&tb_schema_event, &ev);
		}
		rd_kafka_message_destroy(m);
	}
	rd_kafka_consumer_close(c);
	rd_kafka_destroy(c);
}

/* A recipe whose environment is the demo's image (demo_image.h), at
 * @p base: the layout under images/, the recipe committed from recipes/.
 * @return 0; TB_ENOTFOUND without taskbox-demo-agent (the demo goes on
 * without it); another error after a message. */
static int image_recipe(const char *base, char *url, size_t ulen, char commit[41], tb_error_t *err)
{
	char agent[PATH_MAX], layout[256], dir[256], path[320], git[256], digest[72];
	int rc;

	if ((rc = tb_demo_agent_path(agent, sizeof(agent), err)) < 0)
		return rc;
	snprintf(layout, sizeof(layout), "%s/images/demo", base);
	snprintf(dir, sizeof(dir), "%s/image-recipe", base);
	snprintf(git, sizeof(git), "%s/recipes/image.git", base);
	if ((rc = tb_demo_image(layout, agent, digest, err)) < 0)
		return rc;
	snprintf(path, sizeof(path), "%s/taskbox.json", dir);
	FILE *f = mkdir(dir, 0755) == 0 ? fopen(path, "w") : NULL;
	if (!f)
		return tb_error_errno(err, TB_EIO, errno, "demo: %s", path);
	fprintf(f,
		"{\"v\": 1, \"name\": \"hello-image\",\n"
		" \"description\": \"the hello task, run in a pinned image\",\n"
		" \"environment\": {\"image\": \"oci-layout:%s@%s\"},\n"
		" \"agent\": {\"command\": [\"/bin/demo\"]},\n"
		" \"judges\": [{\"name\": \"greeted\", \"command\": [\"/bin/demo\", "
		"\"judge\"]}]}\n",
		layout, digest);
	fclose(f);
	return tb_demo_recipe_commit(dir, git, url, ulen, commit, err);
}

/* The tasks the demo submits, encoded into @p v (see demo_full's list). */
static void encode_tasks(msgpack_sbuffer *v, char *url, char *commit, char *chat_url,
			 char *chat_commit, char *image_url, char *image_commit, tb_error_t *err)
{
	tb_task_t t = { 0 };
	t.kind = TB_TASK_ONE_SHOT;
	t.recipe.url = url;
	t.recipe.commit = commit;
	t.runtime = (char *)"default";
	t.prompt = (char *)"Say hello to the queue.";
	t.submitted_at = tb_wall_ms();
	t.id = (char *)"demo-hello";
	tb_msg_encode(&v[0], &tb_schema_task, &t, err);
	tb_msg_encode(&v[1], &tb_schema_task, &t, err);
	t.id = (char *)"demo-lost";
	t.recipe.commit = (char *)"0000000000000000000000000000000000000001";
	tb_msg_encode(&v[2], &tb_schema_task, &t, err);
	/* The bad ones are the intake demo's: branch, future version, junk. */
	msgpack_sbuffer bad[NMSGS];
	for (int i = 0; i < NMSGS; i++)
		msgpack_sbuffer_init(&bad[i]);
	build_messages(bad, err);
	msgpack_sbuffer_write(&v[3], bad[MSG_BRANCH].data, bad[MSG_BRANCH].size);
	msgpack_sbuffer_write(&v[4], bad[MSG_FUTURE].data, bad[MSG_FUTURE].size);
	msgpack_sbuffer_write(&v[5], bad[MSG_JUNK].data, bad[MSG_JUNK].size);
	for (int i = 0; i < NMSGS; i++)
		msgpack_sbuffer_destroy(&bad[i]);
	t.id = (char *)"demo-late";
	t.recipe.commit = commit;
	tb_msg_encode(&v[6], &tb_schema_task, &t, err);
	/* The session: a prompt, a follow-up, the end. */
	t.id = (char *)"demo-chat";
	t.kind = TB_TASK_INTERACTIVE;
	t.recipe.url = chat_url;
	t.recipe.commit = chat_commit;
	t.prompt = (char *)"Let's write a haiku about queues.";
	tb_msg_encode(&v[7], &tb_schema_task, &t, err);
	encode_followup(&v[8], 1, "Now make it rhyme.", err);
	encode_followup(&v[9], 2, NULL, err);
	/* The hello task again, in the demo's pinned image. */
	t.id = (char *)"demo-image";
	t.kind = TB_TASK_ONE_SHOT;
	t.recipe.url = image_url;
	t.recipe.commit = image_commit;
	t.prompt = (char *)"Say hello from the image.";
	if (image_commit[0])
		tb_msg_encode(&v[10], &tb_schema_task, &t, err);
}

static int demo_full(const char *recipe_src, const char *chat_src, int keep)
{
	static const tb_kafka_topic_spec_t topics[] = { { TASKS, 4 }, { EVENTS, 4 }, { DLQ, 1 } };
	char base[] = "/tmp/taskbox-demo-XXXXXX", git_dir[128], url[256], commit[41];
	char store_url[160], cache[128], work[128], runtimes[128], path[256], src[4096];
	msgpack_sbuffer v[DEMO_MSGS];
	char chat_git[128], chat_url[256], chat_commit[41], chat[4096];
	char image_url[256] = "", image_commit[41] = "";
	struct demo_run d = { 0 };
	tb_kafka_mock_t *mock = NULL;
	rd_kafka_t *producer = NULL;
	tb_config_t cfg;
	tb_store_config_t scfg = { 0 };
	pthread_t thread;
	int rc = TB_EXIT_FAILURE;

	tb_log_set_level(TB_LOG_WARN);
	if (!realpath(recipe_src, src)) {
		fprintf(stderr,
			"taskbox demo: recipe %s: %s (run from the repository, or pass --recipe)\n",
			recipe_src, strerror(errno));
		return TB_EXIT_USAGE;
	}
	if (!realpath(chat_src, chat)) {
		fprintf(stderr,
			"taskbox demo: recipe %s: %s (run from the repository, or pass --chat)\n",
			chat_src, strerror(errno));
		return TB_EXIT_USAGE;
	}
	for (int i = 0; i < DEMO_MSGS; i++)
		msgpack_sbuffer_init(&v[i]);
	if (!mkdtemp(base) || chmod(base, 0711) < 0)
		return TB_EXIT_FAILURE;
	snprintf(git_dir, sizeof(git_dir), "%s/recipes/hello.git", base);
	snprintf(store_url, sizeof(store_url), "dir://%s/artifacts", base);
	snprintf(cache, sizeof(cache), "%s/cache", base);
	snprintf(work, sizeof(work), "%s/work", base);
	snprintf(runtimes, sizeof(runtimes), "%s/runtimes", base);
	snprintf(path, sizeof(path), "%s/default.json", runtimes);
	snprintf(chat_git, sizeof(chat_git), "%s/recipes/chat.git", base);
	if (tb_demo_recipe_commit(src, git_dir, url, sizeof(url), commit, &d.err) < 0 ||
	    tb_demo_recipe_commit(chat, chat_git, chat_url, sizeof(chat_url), chat_commit, &d.err) <
		0 ||
	    mkdir(runtimes, 0755) < 0 || mkdir(work, 0711) < 0) {
		fprintf(stderr, "taskbox demo: %s\n", d.err.msg);
		goto out;
	}
	if (image_recipe(base, image_url, sizeof(image_url), image_commit, &d.err) < 0) {
		printf("  (no task in an image: %s)\n", d.err.msg);
		image_commit[0] = '\0';
	}
	FILE *f = fopen(path, "w");
	if (!f)
		goto out;
	/* the runtime defaults, and the demo's image layout allowed */
	fprintf(f,
		"{\"v\": 1, \"name\": \"default\", \"sandbox\": {\"images\": "
		"{\"layouts\": [\"%s/images\"]}}}\n",
		base);
	fclose(f);

	printf("taskbox demo in %s\n", base);
	printf("  recipe hello committed as %.12s in %s\n", commit, url);
	printf("  recipe chat committed as %.12s in %s\n", chat_commit, chat_url);
	if (image_commit[0])
		printf(
		    "  recipe hello-image committed as %.12s in %s, its environment an OCI image "
		    "in %s/images/demo\n",
		    image_commit, image_url, base);
	if (tb_config_load(&cfg, NULL, &d.err) < 0) {
		fprintf(stderr, "taskbox demo: %s\n", d.err.msg);
		goto out;
	}
	free(cfg.runtimes_dir);
	free(cfg.work_dir);
	free(cfg.cache_dir);
	cfg.runtimes_dir = strdup(runtimes);
	cfg.work_dir = strdup(work);
	cfg.cache_dir = strdup(cache);
	cfg.image_cache_mb = 1024;
	cfg.image_stall_seconds = 30;
	cfg.slots = 2;
	scfg.url = store_url;
	d.deps.cfg = &cfg;
	d.deps.worker_id = "demo-worker";
	d.deps.group = "tbdemo";
	if (tb_kafka_mock_start(&mock, 1, topics, 3, &d.err) < 0 ||
	    tb_store_open(&d.deps.store, &scfg, &d.err) < 0 ||
	    tb_ledger_memory_open(&d.deps.ledger, "demo", &d.err) < 0 ||
	    tb_worker_open(&d.deps, TB_WORKER_OPEN_SWEEP, &d.err) < 0 ||
	    tb_kafka_producer_new(&producer, tb_kafka_mock_bootstraps(mock), NULL, &d.err) < 0) {
		fprintf(stderr, "taskbox demo: %s\n", d.err.msg);
		goto cleanup;
	}
	/* The tasks: the recipe's task, the same task again (a duplicate
	 * delivery), a commit the repository does not have, and three messages
	 * no worker can read. */
	const struct {
		const char *key, *what;
	} msgs[DEMO_MSGS] = {
		{ "demo-hello", "the hello task" },
		{ "demo-hello", "the same task again" },
		{ "demo-lost", "a commit that does not exist" },
		{ "demo-branch", "a task pinned to a branch" },
		{ "demo-future", "a task from a future version" },
		{ NULL, "random bytes" },
		{ "demo-late", "the hello task under another id" },
		{ "demo-chat", "an interactive chat session" },
		{ "demo-chat", "its follow-up 1" },
		{ "demo-chat", "its end (follow-up 2)" },
		{ "demo-image", "the hello task in a pinned image" },
	};
	encode_tasks(v, url, commit, chat_url, chat_commit, image_url, image_commit, &d.err);
	int nmsgs = image_commit[0] ? DEMO_MSGS : DEMO_MSGS - 1;

	printf("\nA producer submits %d messages to %s:\n", nmsgs, TASKS);
	for (int i = 0; i < nmsgs; i++) {
		printf("  %-32s key %s\n", msgs[i].what, msgs[i].key ? msgs[i].key : "(none)");
		tb_kafka_produce(producer, TASKS, msgs[i].key, v[i].data, v[i].size, &d.err);
	}
	rd_kafka_flush(producer, 10000);

	d.deps.brokers = tb_kafka_mock_bootstraps(mock);
	d.expect = (uint64_t)nmsgs;
	printf("\nA worker with %llu slots runs them; the events topic, live:\n",
	       (unsigned long long)cfg.slots);
	pthread_create(&thread, NULL, demo_worker, &d);
	follow_events(d.deps.brokers, &d);
	pthread_join(thread, NULL);
	if (d.rc < 0)
		fprintf(stderr, "taskbox demo: worker: %s\n", d.err.msg);
	if (show_dlq(d.deps.brokers, 4) < 0)
		printf("  (fewer dead letters than expected)\n");
	printf("\n%llu messages: %llu attempts recorded (%llu succeeded), %llu already done, "
	       "%llu dead-lettered.\n",
	       (unsigned long long)d.stats.received, (unsigned long long)d.stats.recorded,
	       (unsigned long long)d.stats.succeeded, (unsigned long long)d.stats.already,
	       (unsigned long long)d.stats.dead);
	printf("Artifacts, conversation records, verdicts and manifests: %s/artifacts/tasks/\n",
	       base);
	rc = d.rc == 0 && d.stats.succeeded == 3u + (image_commit[0] != 0) &&
		     d.stats.already == 1 && d.stats.dead == 4
		 ? TB_EXIT_OK
		 : TB_EXIT_FAILURE;
	if (!keep)
		printf("(removed when the demo ends; --keep keeps them)\n");
cleanup:
	tb_config_free(&cfg);
	if (producer)
		rd_kafka_destroy(producer);
	tb_kafka_mock_free(mock);
	tb_worker_close(&d.deps); /* first: its image cache may use both */
	tb_store_close(d.deps.store);
	if (d.deps.ledger)
		tb_ledger_close(d.deps.ledger);
out:
	for (int i = 0; i < DEMO_MSGS; i++)
		msgpack_sbuffer_destroy(&v[i]);
	if (!keep)
		tb_remove_tree(AT_FDCWD, base);
	return rc;
}

/* Where the example recipe @p name is: examples/recipes/ under the
 * current directory (a source tree), else the installed share/taskbox/
 * recipes/ beside the running program's bin/. */
static const char *example_recipe(const char *name, char *buf, size_t len)
{
	char self[4096];
	ssize_t n;

	snprintf(buf, len, "examples/recipes/%s", name);
	if (access(buf, F_OK) == 0)
		return buf;
	if ((n = readlink("/proc/self/exe", self, sizeof(self) - 1)) > 0) {
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash)
			*slash = '\0';
		snprintf(buf, len, "%s/../share/taskbox/recipes/%s", self, name);
		if (access(buf, F_OK) == 0)
			return buf;
	}
	snprintf(buf, len, "examples/recipes/%s", name);
	return buf;
}

int tb_cmd_demo(int argc, char **argv)
{
	static char hello[4200], chats[4200];
	const char *recipe = example_recipe("hello", hello, sizeof(hello));
	const char *chat = example_recipe("chat", chats, sizeof(chats));
	int keep = 0, rc;
	const tb_opt_t opts[] = {
		{ "--recipe", TB_OPT_STRING, &recipe, 0, 0, NULL, 'r' },
		{ "--chat", TB_OPT_STRING, &chat, 0, 0, NULL, 0 },
		{ "--keep", TB_OPT_FLAG, &keep, 0, 0, NULL, 'k' },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	tb_opts_t o = { "demo", opts, NULL, 0, 0 };

	if ((rc = tb_cmd_options(&o, argc, argv, 1, usage)) >= 0)
		return rc;
	if (geteuid() != 0) {
		printf("taskbox demo: not root, so no sandboxes: showing intake only.\n\n");
		return demo_intake_only();
	}
	return demo_full(recipe, chat, keep);
}
