/*
 * cmd_demo.c: `taskbox demo`, the embedded default. Everything runs in
 * this process: librdkafka's mock cluster stands in for Kafka, and nothing
 * outside is touched. It submits the example tasks (one-shot, interactive
 * with follow-ups) and three bad messages, takes them through intake as a
 * worker does (decode, validate, dead-letter the bad ones with the reason,
 * commit), and prints what happened. The task lifecycle beyond intake
 * (sandbox, agent, artifacts, judges) joins the demo as it lands.
 */
#include "cmd.h"

#include "intake.h"
#include "tb/json_mpack.h"
#include "tb/kafka.h"
#include "tb/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TASKS "taskbox.tasks"
#define EVENTS "taskbox.events"
#define DLQ "taskbox.dlq"
#define DEMO_COMMIT "5d41402abc4b2a76b9719d911017c592ae3f0c11"

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

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: taskbox demo\n\n"
		     "Runs taskbox's embedded demo: an in-process Kafka mock cluster,\n"
		     "the example tasks and some bad messages, through intake.\n"
		     "Needs no external service. Exit: 0 when every message had the\n"
		     "expected outcome, 1 otherwise.\n");
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
	t.submitted_at = now_ms();
	return tb_msg_encode(out, &tb_schema_task, &t, err);
}

static int encode_followup(msgpack_sbuffer *out, uint64_t seq, const char *text, tb_error_t *err)
{
	tb_followup_t f = { 0 };

	f.task_id = (char *)"demo-chat";
	f.seq = seq;
	f.kind = text ? TB_FOLLOWUP_PROMPT : TB_FOLLOWUP_END;
	f.text = (char *)text;
	f.sent_at = now_ms();
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

	if (tb_intake_decode(&in, m->payload, m->len, &origin, now_ms()) < 0) {
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

	if (tb_kafka_consumer_new(&c, brokers, "taskbox-demo-dlq", NULL, NULL, &err) < 0) {
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

int tb_cmd_demo(int argc, char **argv)
{
	static const tb_kafka_topic_spec_t topics[] = { { TASKS, 4 }, { EVENTS, 4 }, { DLQ, 1 } };
	msgpack_sbuffer values[NMSGS];
	tb_kafka_mock_t *mock = NULL;
	rd_kafka_t *producer = NULL, *consumer = NULL;
	size_t seen = 0, accepted;
	int failed = 0, rc = TB_EXIT_FAILURE;
	tb_error_t err;

	if (argc > 1) {
		int help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
		usage(help ? stdout : stderr);
		return help ? TB_EXIT_OK : TB_EXIT_USAGE;
	}
	tb_log_set_level(TB_LOG_WARN);
	for (size_t i = 0; i < NMSGS; i++)
		msgpack_sbuffer_init(&values[i]);
	if (build_messages(values, &err) < 0 ||
	    tb_kafka_mock_start(&mock, 1, topics, 3, &err) < 0 ||
	    tb_kafka_producer_new(&producer, tb_kafka_mock_bootstraps(mock), NULL, &err) < 0 ||
	    tb_kafka_consumer_new(&consumer, tb_kafka_mock_bootstraps(mock), "taskbox-demo", NULL,
				  NULL, &err) < 0) {
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
