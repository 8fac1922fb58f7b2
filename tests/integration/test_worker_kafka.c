/*
 * test_worker_kafka.c: `taskbox worker` as an operator runs it, against
 * the real Kafka broker: topics of its own, a git recipe, a task and a
 * malformed message produced; the task's events end with a result, the
 * malformed message is dead-lettered, the group's committed offset covers
 * both, and SIGTERM stops the worker cleanly. Skips without Kafka or root.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tb/kafka.h"
#include "tb/schema_event.h"
#include "tb/schema_task.h"

static char root[64] = "/tmp/tb-worker-kafka-XXXXXX";
static char topic_tasks[64], topic_events[64], topic_dlq[64], group[64];
static const char *brokers;

static void make_topics(void)
{
	char errstr[256];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof(errstr));
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	rd_kafka_NewTopic_t *t[3] = {
		rd_kafka_NewTopic_new(topic_tasks, 2, 1, errstr, sizeof(errstr)),
		rd_kafka_NewTopic_new(topic_events, 2, 1, errstr, sizeof(errstr)),
		rd_kafka_NewTopic_new(topic_dlq, 1, 1, errstr, sizeof(errstr)),
	};
	rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
	rd_kafka_CreateTopics(rk, t, 3, NULL, q);
	rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
	assert_non_null(ev);
	assert_int_equal(rd_kafka_event_error(ev), 0);
	rd_kafka_event_destroy(ev);
	for (int i = 0; i < 3; i++)
		rd_kafka_NewTopic_destroy(t[i]);
	rd_kafka_queue_destroy(q);
	rd_kafka_destroy(rk);
}

static void sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		fail_msg("command failed: %s", cmd);
}

static void test_worker__runs_a_task_from_kafka_and_commits_after_teardown(void **state)
{
	char repo[128], commit[64], cmd[256], rt[128], id[64];
	msgpack_sbuffer sb;
	tb_error_t err;
	rd_kafka_t *p, *c;
	int got_result = 0, got_dlq = 0, status;

	(void)state;
	snprintf(repo, sizeof(repo), "%s/hello", root);
	sh("git init -q %s && cp -r %s/examples/recipes/hello/. %s/ && cd %s && git add -A && "
	   "git -c user.name=t -c user.email=t@t commit -qm hello",
	   repo, TB_SOURCE_DIR, repo, repo);
	snprintf(cmd, sizeof(cmd), "cd %s && git rev-parse HEAD", repo);
	FILE *f = popen(cmd, "r");
	assert_non_null(fgets(commit, sizeof(commit), f));
	pclose(f);
	commit[strcspn(commit, "\n")] = '\0';
	snprintf(rt, sizeof(rt), "%s/runtimes", root);
	sh("mkdir -p %s && echo '{\"v\": 1, \"name\": \"default\"}' > %s/default.json", rt, rt);

	pid_t worker = fork();
	if (worker == 0) {
		char v[256];
		setenv("TASKBOX_KAFKA_BROKERS", brokers, 1);
		setenv("TASKBOX_KAFKA_GROUP", group, 1);
		setenv("TASKBOX_KAFKA_TASKS_TOPIC", topic_tasks, 1);
		setenv("TASKBOX_KAFKA_EVENTS_TOPIC", topic_events, 1);
		setenv("TASKBOX_KAFKA_DLQ_TOPIC", topic_dlq, 1);
		snprintf(v, sizeof(v), "dir://%s/store", root);
		setenv("TASKBOX_STORE_URL", v, 1);
		setenv("TASKBOX_RUNTIMES_DIR", rt, 1);
		snprintf(v, sizeof(v), "%s/work", root);
		setenv("TASKBOX_WORK_DIR", v, 1);
		snprintf(v, sizeof(v), "%s/cache", root);
		setenv("TASKBOX_CACHE_DIR", v, 1);
		setenv("TASKBOX_WORKER_ID", "itest", 1);
		setenv("TASKBOX_SLOTS", "2", 1);
		execl(TB_TASKBOX, "taskbox", "worker", (char *)NULL);
		_exit(127);
	}

	/* A task and a malformed message, keyed like a producer would. */
	tb_task_t t = { 0 };
	snprintf(id, sizeof(id), "kafka-%d", getpid());
	char url[160];
	snprintf(url, sizeof(url), "file://%s", repo);
	t.id = id, t.kind = TB_TASK_ONE_SHOT, t.recipe.url = url, t.recipe.commit = commit;
	t.prompt = (char *)"hello?", t.runtime = (char *)"default", t.submitted_at = 1;
	msgpack_sbuffer_init(&sb);
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_task, &t, &err), 0);
	assert_int_equal(tb_kafka_producer_new(&p, brokers, NULL, &err), 0);
	assert_int_equal(tb_kafka_produce(p, topic_tasks, id, sb.data, sb.size, &err), 0);
	assert_int_equal(tb_kafka_produce(p, topic_tasks, id, "\xc1", 1, &err), 0);
	assert_int_equal(rd_kafka_flush(p, 30000), 0);
	rd_kafka_destroy(p);
	msgpack_sbuffer_destroy(&sb);

	/* Follow the events and the DLQ: bounded at 120 s. */
	assert_int_equal(
	    tb_kafka_consumer_new(&c, brokers, "itest-reader", NULL, NULL, NULL, NULL, &err), 0);
	rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(3);
	rd_kafka_topic_partition_list_add(parts, topic_events, 0)->offset =
	    RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_topic_partition_list_add(parts, topic_events, 1)->offset =
	    RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_topic_partition_list_add(parts, topic_dlq, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_assign(c, parts);
	rd_kafka_topic_partition_list_destroy(parts);
	time_t deadline = time(NULL) + 120;
	while (time(NULL) < deadline && !(got_result && got_dlq)) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 500);
		if (!m)
			continue;
		if (!m->err && !strcmp(rd_kafka_topic_name(m->rkt), topic_dlq)) {
			got_dlq++;
		} else if (!m->err) {
			tb_event_t ev;
			if (tb_msg_decode(&tb_schema_event, &ev, m->payload, m->len, &err) == 0) {
				got_result += ev.type == TB_EV_RESULT;
				tb_msg_free(&tb_schema_event, &ev);
			}
		}
		rd_kafka_message_destroy(m);
	}
	rd_kafka_consumer_close(c);
	rd_kafka_destroy(c);
	assert_int_equal(got_result, 1);
	assert_int_equal(got_dlq, 1);

	/* Both messages are acknowledged: the group's offset is past them. */
	char errstr[256];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof(errstr));
	rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof(errstr));
	rd_kafka_t *q = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	int64_t committed = -1;
	for (int i = 0; i < 40 && committed < 2; i++) { /* the commit is async: 20 s */
		rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(2);
		rd_kafka_topic_partition_list_add(l, topic_tasks, 0);
		rd_kafka_topic_partition_list_add(l, topic_tasks, 1);
		if (rd_kafka_committed(q, l, 10000) == 0) {
			committed = 0;
			for (int k = 0; k < l->cnt; k++)
				if (l->elems[k].offset > 0)
					committed += l->elems[k].offset;
		}
		rd_kafka_topic_partition_list_destroy(l);
		if (committed < 2)
			usleep(500000);
	}
	rd_kafka_destroy(q);
	assert_int_equal(committed, 2);

	kill(worker, SIGTERM);
	assert_int_equal(waitpid(worker, &status, 0), worker);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_worker__runs_a_task_from_kafka_and_commits_after_teardown),
	};
	brokers = getenv("TASKBOX_TEST_KAFKA");
	if (!brokers) {
		printf(
		    "SKIP: TASKBOX_TEST_KAFKA is not set (tests/run starts Kafka and sets it)\n");
		return 77;
	}
	if (geteuid() != 0) {
		printf("SKIP: the worker builds sandboxes, which needs root\n");
		return 77;
	}
	if (!mkdtemp(root))
		return 1;
	chmod(root, 0711);
	snprintf(topic_tasks, sizeof(topic_tasks), "tbw-%d-tasks", getpid());
	snprintf(topic_events, sizeof(topic_events), "tbw-%d-events", getpid());
	snprintf(topic_dlq, sizeof(topic_dlq), "tbw-%d-dlq", getpid());
	snprintf(group, sizeof(group), "tbw-%d", getpid());
	make_topics();
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	if (system(cmd) != 0)
		rc = 1;
	return rc;
}
