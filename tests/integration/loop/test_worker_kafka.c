/*
 * test_worker_kafka.c: `taskbox worker` as an operator runs it, against
 * the real Kafka broker: topics of its own, a git recipe, a task and a
 * malformed message produced; the task's events end with a result, the
 * malformed message is dead-lettered, the group's committed offset covers
 * both, and SIGTERM stops the worker cleanly. With TASKBOX_TEST_REDIS the
 * worker keeps its ledger on Redis, and the task's done-marker is read back
 * from there. A worker whose DLQ topic is not there yet acknowledges a
 * malformed message only once the topic is made and has its record. A
 * worker told to stop while a task runs exits with 1, leaving it
 * unacknowledged and no sandbox behind, once its drain runs out or at a
 * second signal. Skips without Kafka or root.
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

#include "fixture_repo.h"
#include "tb/kafka.h"
#include "tb/ledger.h"
#include "tb/schema_dlq.h"
#include "tb/schema_event.h"
#include "tb/schema_task.h"

static char root[64] = "/tmp/tb-worker-kafka-XXXXXX";
static char topic_tasks[64], topic_events[64], topic_dlq[64], group[64];
static char topic_tasks2[64], topic_dlq2[64], group2[64];
static char topic_tasks3[64], topic_dlq3[64], group3[64];
static char topic_tasks4[64], group4[64], topic_tasks5[64], group5[64];
static char topic_tasks6[64], group6[64], topic_tasks7[64], topic_dlq7[64], group7[64];
static char topic_tasks8[64], group8[64];
static const char *worker_config; /* --config for the next worker started, if set */
static char commit[64], rt[128], repo[128];
static char slow_commit[64], slow_repo[128];
static const char *brokers;
static pid_t worker_pid; /* the last worker started, stopped by teardown if a test failed */

/* Makes the @p n topics @p names, of @p partitions partitions each. */
static void create_topics(const char *const *names, const int *partitions, int n)
{
	char errstr[256];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof(errstr));
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	rd_kafka_NewTopic_t *t[16];
	assert_true(n <= 16);
	for (int i = 0; i < n; i++)
		t[i] = rd_kafka_NewTopic_new(names[i], partitions[i], 1, errstr, sizeof(errstr));
	rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
	rd_kafka_CreateTopics(rk, t, (size_t)n, NULL, q);
	rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
	assert_non_null(ev);
	assert_int_equal(rd_kafka_event_error(ev), 0);
	rd_kafka_event_destroy(ev);
	for (int i = 0; i < n; i++)
		rd_kafka_NewTopic_destroy(t[i]);
	rd_kafka_queue_destroy(q);
	rd_kafka_destroy(rk);
}

/* Every topic but the third test's DLQ, which that test makes itself. */
static void make_topics(void)
{
	const char *names[] = { topic_tasks,  topic_events, topic_dlq,    topic_tasks2,
				topic_dlq2,   topic_tasks3, topic_tasks4, topic_tasks5,
				topic_tasks6, topic_tasks7, topic_dlq7,   topic_tasks8 };
	const int partitions[] = { 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	create_topics(names, partitions, 12);
}

/* Whether the file @p log has a line with @p what (and @p also, unless
 * NULL), waiting for one up to @p seconds. */
static int log_has(const char *log, const char *what, const char *also, int seconds)
{
	char line[1024];
	int found = 0;

	for (int i = 0; i <= 2 * seconds && !found; i++) {
		FILE *f = fopen(log, "r");
		while (f && fgets(line, sizeof(line), f))
			found |= strstr(line, what) && (!also || strstr(line, also));
		if (f)
			fclose(f);
		if (!found && i < 2 * seconds)
			usleep(500000);
	}
	return found;
}

/* The records on @p topic's partition 0 from its beginning, read until
 * @p want are there (or, with @p needle, one whose reason holds it) or
 * @p seconds pass; *@p found (if given) whether such a reason came. */
static int dlq_scan(const char *topic, int want, int seconds, const char *needle, int *found)
{
	tb_error_t err;
	rd_kafka_t *c;
	int n = 0, hit = 0;

	assert_int_equal(tb_kafka_consumer_new(&c, brokers, "itest-dlq-reader", NULL, NULL, NULL,
					       NULL, NULL, &err),
			 0);
	rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(parts, topic, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_assign(c, parts);
	rd_kafka_topic_partition_list_destroy(parts);
	for (int i = 0; i < 2 * seconds && n < want && !hit; i++) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 500);
		tb_dlq_t rec;
		if (m && !m->err) {
			n++;
			if (needle &&
			    tb_msg_decode(&tb_schema_dlq, &rec, m->payload, m->len, &err) == 0) {
				hit = strstr(rec.reason, needle) != NULL;
				tb_msg_free(&tb_schema_dlq, &rec);
			}
		}
		if (m)
			rd_kafka_message_destroy(m);
	}
	rd_kafka_consumer_close(c);
	rd_kafka_destroy(c);
	if (found)
		*found = hit;
	return n;
}

static int dlq_records(const char *topic, int want, int seconds)
{
	return dlq_scan(topic, want, seconds, NULL, NULL);
}

/* Whether a record on @p topic's partition 0 has a reason holding
 * @p needle, read from the beginning until @p seconds pass. */
static int dlq_reason_has(const char *topic, const char *needle, int seconds)
{
	int found;
	dlq_scan(topic, 1 << 20, seconds, needle, &found);
	return found;
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

/* The hello recipe committed into a repository of the test's own. */
static void make_recipe(void)
{
	if (commit[0])
		return;
	snprintf(repo, sizeof(repo), "%s/hello", root);
	if (tb_fixture_commit(repo, TB_SOURCE_DIR "/examples/recipes/hello", commit,
			      sizeof(commit)) < 0)
		fail_msg("cannot commit the hello recipe into %s", repo);
	snprintf(rt, sizeof(rt), "%s/runtimes", root);
	sh("mkdir -p %s && echo '{\"v\": 1, \"name\": \"default\"}' > %s/default.json", rt, rt);
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* A recipe whose agent sleeps as many seconds as its prompt says (a
 * number), committed once. */
static void make_slow_recipe(void)
{
	if (slow_commit[0])
		return;
	snprintf(slow_repo, sizeof(slow_repo), "%s/slow", root);
	if (tb_fixture_recipe(
		slow_repo, slow_commit, sizeof(slow_commit), "taskbox.json",
		"{\"v\": 1, \"name\": \"slow\", \"agent\": {\"command\": [\"/bin/sh\", "
		"\"agent.sh\"]}, \"judges\": []}\n",
		/* the prompt's line: {"type":"prompt","turn":1,"text":"61.5"} */
		"agent.sh",
		"read -r prompt\n"
		"secs=$(printf '%s' \"$prompt\" | sed -n 's/.*\"text\": "
		"*\"\\([0-9.]*\\)\".*/\\1/p')\n"
		"sleep \"$secs\"\n",
		NULL) < 0)
		fail_msg("cannot commit the slow recipe into %s", slow_repo);
}

/* `taskbox worker` as an operator starts it; stderr to @p log if given. */
static pid_t start_worker(const char *tasks, const char *dlq, const char *grp, const char *ledger,
			  const char *log)
{
	pid_t worker = fork();
	if (worker == 0) {
		char v[256];
		setenv("TASKBOX_KAFKA_BROKERS", brokers, 1);
		setenv("TASKBOX_KAFKA_GROUP", grp, 1);
		setenv("TASKBOX_KAFKA_TASKS_TOPIC", tasks, 1);
		setenv("TASKBOX_KAFKA_EVENTS_TOPIC", topic_events, 1);
		setenv("TASKBOX_KAFKA_DLQ_TOPIC", dlq, 1);
		snprintf(v, sizeof(v), "dir://%s/store", root);
		setenv("TASKBOX_STORE_URL", v, 1);
		setenv("TASKBOX_RUNTIMES_DIR", rt, 1);
		snprintf(v, sizeof(v), "%s/work", root);
		setenv("TASKBOX_WORK_DIR", v, 1);
		snprintf(v, sizeof(v), "%s/cache", root);
		setenv("TASKBOX_CACHE_DIR", v, 1);
		setenv("TASKBOX_WORKER_ID", grp, 1);
		setenv("TASKBOX_SLOTS", "2", 1);
		if (ledger) {
			setenv("TASKBOX_LEDGER_URL", ledger, 1);
			setenv("TASKBOX_LEDGER_PREFIX", grp, 1);
		}
		if (log && !freopen(log, "w", stderr))
			_exit(126);
		if (worker_config)
			execl(TB_TASKBOX, "taskbox", "worker", "--config", worker_config,
			      (char *)NULL);
		else
			execl(TB_TASKBOX, "taskbox", "worker", (char *)NULL);
		_exit(127);
	}
	return worker_pid = worker;
}

/* After each test: a worker it left running (it failed before stopping
 * it) is killed, or it would outlive the test and hold ctest's pipe. */
static int stop_worker_left(void **state)
{
	(void)state;
	if (worker_pid > 0 && waitpid(worker_pid, NULL, WNOHANG) == 0) {
		kill(worker_pid, SIGKILL);
		waitpid(worker_pid, NULL, 0);
	}
	worker_pid = 0;
	return 0;
}

static void produce_raw(const char *topic, const char *key, const void *data, size_t len)
{
	tb_error_t err;
	rd_kafka_t *p;

	assert_int_equal(tb_kafka_producer_new(&p, brokers, NULL, &err), 0);
	assert_int_equal(tb_kafka_produce(p, topic, key, data, len, &err), 0);
	assert_int_equal(rd_kafka_flush(p, 30000), 0);
	rd_kafka_destroy(p);
}

/* Task @p id of the recipe in @p at_repo at @p at_commit, saying
 * @p prompt, on runtime @p runtime (NULL: "default"), with the @p ninputs
 * @p inputs. */
static void produce_task_with(const char *topic, const char *id, const char *at_repo,
			      const char *at_commit, const char *prompt, const char *runtime,
			      tb_input_t *inputs, size_t ninputs)
{
	tb_task_t t = { 0 };
	msgpack_sbuffer sb;
	tb_error_t err;
	char url[160];

	snprintf(url, sizeof(url), "file://%s", at_repo);
	t.id = (char *)id, t.kind = TB_TASK_ONE_SHOT, t.recipe.url = url;
	t.recipe.commit = (char *)at_commit;
	t.prompt = (char *)prompt, t.runtime = (char *)(runtime ? runtime : "default");
	t.submitted_at = 1;
	t.inputs.items = inputs, t.inputs.n = ninputs;
	msgpack_sbuffer_init(&sb);
	if (tb_msg_encode(&sb, &tb_schema_task, &t, &err) != 0)
		fail_msg("task %s: %s", id, err.msg);
	produce_raw(topic, id, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
}

static void produce_task_of(const char *topic, const char *id, const char *at_repo,
			    const char *at_commit, const char *prompt)
{
	produce_task_with(topic, id, at_repo, at_commit, prompt, NULL, NULL, 0);
}

static void produce_task(const char *topic, const char *id)
{
	produce_task_of(topic, id, repo, commit, "hello?");
}

/* The sum of @p grp's committed offsets on @p topic's first @p n partitions. */
static int64_t committed_sum(const char *topic, const char *grp, int n)
{
	char errstr[256];
	int64_t sum = -1;
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof(errstr));
	rd_kafka_conf_set(conf, "group.id", grp, errstr, sizeof(errstr));
	rd_kafka_t *q = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
	for (int k = 0; k < n; k++)
		rd_kafka_topic_partition_list_add(l, topic, k);
	if (rd_kafka_committed(q, l, 10000) == 0) {
		sum = 0;
		for (int k = 0; k < l->cnt; k++)
			if (l->elems[k].offset > 0)
				sum += l->elems[k].offset;
	}
	rd_kafka_topic_partition_list_destroy(l);
	rd_kafka_destroy(q);
	return sum;
}

/* The sum of @p grp's committed offsets, waited for up to @p seconds to
 * reach @p want (commits are asynchronous). */
static int64_t committed_reaching(const char *topic, const char *grp, int n, int64_t want,
				  int seconds)
{
	int64_t committed = -1;

	for (int i = 0; i < 2 * seconds && committed < want; i++) {
		committed = committed_sum(topic, grp, n);
		if (committed < want)
			usleep(500000);
	}
	return committed;
}

/* `taskbox status [TASK]` with the first test's settings; its output into
 * @p out; its exit code. */
static int status_of(const char *task, char *out, size_t len)
{
	char cmd[1024];
	size_t n = 0;
	int status;

	snprintf(cmd, sizeof(cmd),
		 "TASKBOX_KAFKA_BROKERS=%s TASKBOX_KAFKA_GROUP=%s TASKBOX_KAFKA_TASKS_TOPIC=%s "
		 "TASKBOX_LEDGER_URL=%s TASKBOX_LEDGER_PREFIX=%s TASKBOX_STORE_URL=dir://%s/store "
		 "%s status %s 2>&1",
		 brokers, group, topic_tasks, getenv("TASKBOX_TEST_REDIS"), group, root, TB_TASKBOX,
		 task ? task : "");
	FILE *f = popen(cmd, "r");
	assert_non_null(f);
	n = fread(out, 1, len - 1, f);
	out[n] = '\0';
	status = pclose(f);
	printf("%s", out);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_worker__runs_a_task_from_kafka_and_commits_after_teardown(void **state)
{
	char id[64];
	tb_error_t err;
	rd_kafka_t *c;
	int got_result = 0, got_dlq = 0, status;

	(void)state;
	make_recipe();
	/* many slots, as a host of idle sessions runs: no slot table of 64 */
	setenv("TASKBOX_SLOTS", "1024", 1);
	pid_t worker =
	    start_worker(topic_tasks, topic_dlq, group, getenv("TASKBOX_TEST_REDIS"), NULL);
	unsetenv("TASKBOX_SLOTS");

	/* A task and a malformed message, keyed like a producer would. */
	snprintf(id, sizeof(id), "kafka-%d", getpid());
	produce_task(topic_tasks, id);
	produce_raw(topic_tasks, id, "\xc1", 1);

	/* Follow the events and the DLQ: bounded at 120 s. */
	assert_int_equal(
	    tb_kafka_consumer_new(&c, brokers, "itest-reader", NULL, NULL, NULL, NULL, NULL, &err),
	    0);
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
	assert_int_equal(committed_reaching(topic_tasks, group, 2, 2, 20), 2);

	/* The same task again (sent anew: another submitted_at) is
	 * acknowledged as done; another task under its id reaches the DLQ,
	 * saying the id names another task, and the first stays done. */
	tb_task_t again = { 0 };
	char url[160];
	msgpack_sbuffer sb;
	snprintf(url, sizeof(url), "file://%s", repo);
	again.id = id, again.kind = TB_TASK_ONE_SHOT, again.recipe.url = url;
	again.recipe.commit = commit, again.prompt = "hello?", again.runtime = "default";
	again.submitted_at = 2;
	msgpack_sbuffer_init(&sb);
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_task, &again, &err), 0);
	produce_raw(topic_tasks, id, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	produce_task_of(topic_tasks, id, repo, commit, "another question, same id");
	assert_int_equal(committed_reaching(topic_tasks, group, 2, 4, 60), 4);
	assert_int_equal(dlq_records(topic_dlq, 3, 20), 2);
	if (!dlq_reason_has(topic_dlq, "already names another task", 10))
		fail_msg("no DLQ record says that task id %s names another task", id);

	/* On Redis, `taskbox status` tells the task and the fleet. */
	if (getenv("TASKBOX_TEST_REDIS")) {
		char out[8192];
		assert_int_equal(status_of(id, out, sizeof(out)), 0);
		assert_non_null(strstr(out, "done"));
		assert_non_null(strstr(out, "verdict"));
		assert_non_null(strstr(out, "artifact  hello.txt"));
		assert_int_equal(status_of(NULL, out, sizeof(out)), 0);
		assert_non_null(strstr(out, "1 workers alive"));
		assert_non_null(strstr(out, group)); /* the worker's id */
		assert_non_null(strstr(out, "total lag 0"));
		assert_int_equal(status_of("never-submitted", out, sizeof(out)), 5);
	}

	/* On Redis, the ledger outlives the worker: the task is done there. */
	if (getenv("TASKBOX_TEST_REDIS")) {
		tb_ledger_t *l;
		uint64_t att;
		assert_int_equal(
		    tb_ledger_open(&l, getenv("TASKBOX_TEST_REDIS"), group, "reader", &err), 0);
		assert_int_equal(tb_ledger_begin(l, id, 10000, &att, &err), TB_EEXIST);
		tb_ledger_close(l);
	}

	kill(worker, SIGTERM);
	assert_int_equal(waitpid(worker, &status, 0), worker);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/*
 * The ledger is down (nothing listens where it points): the worker takes
 * the task, waits for the ledger, runs nothing and dead-letters nothing;
 * told to stop, it exits cleanly without acknowledging the message, which
 * is delivered again once there is a ledger.
 */
/* The worker's metrics port, from its log line; 0 if not there yet. */
static unsigned metrics_port(const char *log)
{
	char line[1024];
	unsigned port = 0;
	FILE *f = fopen(log, "r");

	while (f && fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "metrics on ");
		if (p && (p = strstr(p, ", port ")))
			port = (unsigned)strtoul(p + 7, NULL, 10);
	}
	if (f)
		fclose(f);
	return port;
}

/* taskbox_tasks_waiting from the worker's /metrics; -1 if unreachable. */
/* GET @p path of the worker's endpoint: its status; its body in @p body. */
static int probe(unsigned port, const char *path, char *body, size_t cap)
{
	char cmd[256];
	int status = -1;

	snprintf(cmd, sizeof(cmd),
		 "curl -s --max-time 5 -w '\\n%%{http_code}' http://127.0.0.1:%u%s", port, path);
	FILE *f = popen(cmd, "r");
	size_t n = f ? fread(body, 1, cap - 1, f) : 0;
	body[n] = '\0';
	if (f)
		pclose(f);
	char *last = strrchr(body, '\n');
	if (last) {
		status = (int)strtol(last + 1, NULL, 10);
		*last = '\0';
	}
	return status;
}

static long tasks_waiting(unsigned port)
{
	char cmd[256], line[512];
	long v = -1;

	snprintf(cmd, sizeof(cmd), "curl -s --max-time 5 http://127.0.0.1:%u/metrics", port);
	FILE *f = popen(cmd, "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "taskbox_tasks_waiting ", 22))
			v = strtol(line + 22, NULL, 10);
	if (f)
		pclose(f);
	return v;
}

/* With the ledger down no task can start: they wait in the worker's line,
 * which is read ahead to 8 x slots (at least 32) and no further. */
static void test_worker__waits_for_a_ledger_that_is_down_and_acknowledges_nothing(void **state)
{
	char id[64], log[128];
	int status;
	long line_len = -1;
	unsigned port = 0;

	(void)state;
	make_recipe();
	snprintf(log, sizeof(log), "%s/ledger-down.log", root);
	setenv("TASKBOX_METRICS_LISTEN", "127.0.0.1:0", 1);
	pid_t worker = start_worker(topic_tasks2, topic_dlq2, group2, "redis://127.0.0.1:1", log);
	unsetenv("TASKBOX_METRICS_LISTEN");
	snprintf(id, sizeof(id), "ledger-down-%d-0", getpid()); /* first in line */
	produce_task(topic_tasks2, id);
	for (int k = 1; k < 40; k++) {
		char more[64];
		snprintf(more, sizeof(more), "ledger-down-%d-%d", getpid(), k);
		produce_task(topic_tasks2, more);
	}
	assert_true(log_has(log, "for the ledger", id, 60)); /* the first in line waits */
	for (int i = 0; i < 40 && line_len != 32; i++) {     /* 20 s at most */
		if (!port)
			port = metrics_port(log);
		if (port)
			line_len = tasks_waiting(port);
		if (line_len != 32)
			usleep(500000);
	}
	assert_int_equal(line_len, 32);
	usleep(1000000); /* and the rest stays in Kafka */
	assert_int_equal(tasks_waiting(port), 32);
	/* alive, its loop turning, but not ready: the ledger does not answer */
	char body[2048];
	assert_int_equal(probe(port, "/healthz", body, sizeof(body)), 200);
	int ready = probe(port, "/readyz", body, sizeof(body));
	if (ready != 503 || !strstr(body, "\"ledger\":{\"up\":false"))
		fail_msg("/readyz with the ledger down: %d %s", ready, body);
	assert_non_null(strstr(body, "\"kafka\":{\"up\":true"));
	assert_non_null(strstr(body, "\"sandbox\":{\"up\":true"));
	kill(worker, SIGTERM);
	assert_int_equal(waitpid(worker, &status, 0), worker);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(committed_sum(topic_tasks2, group2, 1), 0);

	/* and nothing was dead-lettered */
	assert_int_equal(dlq_records(topic_dlq2, 1, 3), 0);
}

/*
 * The DLQ topic is not there (not made yet, or deleted): a malformed
 * message cannot be dead-lettered, so it is not acknowledged, and the
 * worker tries again with back-off. Once the topic is made, the record
 * is there, once, and the message acknowledged, with no restart: left
 * waiting for a redelivery, it held its partition's commits back until
 * the worker restarted.
 */
static void test_worker__dead_letters_once_the_dlq_topic_is_there(void **state)
{
	char log[128];
	int status;

	(void)state;
	make_recipe();
	snprintf(log, sizeof(log), "%s/dlq-away.log", root);
	pid_t worker = start_worker(topic_tasks3, topic_dlq3, group3, NULL, log);
	produce_raw(topic_tasks3, "not-a-task", "\xc1", 1);
	assert_true(log_has(log, "dead-lettering failed", NULL, 90));
	assert_int_equal(committed_sum(topic_tasks3, group3, 1), 0);

	const char *names[] = { topic_dlq3 };
	const int partitions[] = { 1 };
	create_topics(names, partitions, 1);
	assert_int_equal(dlq_records(topic_dlq3, 1, 120), 1);
	assert_int_equal(committed_reaching(topic_tasks3, group3, 1, 1, 20), 1);
	/* one record: the first copy, still in flight when its wait ended
	 * (librdkafka holds it while the topic may yet appear), was delivered
	 * once the topic was made, and no other was sent */
	assert_int_equal(dlq_records(topic_dlq3, 2, 5), 1);
	kill(worker, SIGTERM);
	assert_int_equal(waitpid(worker, &status, 0), worker);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* @p pid's exit status, waited for up to @p seconds (the test fails
 * after that; the teardown kills it). */
static int exit_status(pid_t pid, int seconds)
{
	int status;

	for (int i = 0; i < 10 * seconds; i++) {
		pid_t got = waitpid(pid, &status, WNOHANG);
		if (got == pid)
			return status;
		assert_int_equal(got, 0);
		usleep(100000);
	}
	fail_msg("pid %d still running after %d s", (int)pid, seconds);
	return -1;
}

/* Whether some process's command line matches @p what (@p want 1) or
 * none does (@p want 0), waiting up to @p seconds for it to be so. @p what
 * is an extended regular expression: write it so that it does not match
 * itself, as "61[.]5", or the shell running pgrep is found. */
static int processes(const char *what, int want, int seconds)
{
	char cmd[256], line[64];
	int found = !want;

	snprintf(cmd, sizeof(cmd), "pgrep -f '%s'", what);
	for (int i = 0; i <= 2 * seconds && found != want; i++) {
		FILE *f = popen(cmd, "r");
		found = f && fgets(line, sizeof(line), f) != NULL;
		if (f)
			pclose(f);
		if (found != want && i < 2 * seconds)
			usleep(500000);
	}
	return found == want;
}

/*
 * Stopping with a task running: SIGTERM drains (drain_seconds, here 2);
 * when the drain runs out the worker exits with 1, leaving the task
 * unacknowledged to replay, and its sandbox goes with it. A second signal
 * ends the drain at once, the same way.
 */
static void test_worker__a_stop_that_cannot_wait_leaves_the_task_to_replay(void **state)
{
	char id[64], log[128];
	int status;

	(void)state;
	make_recipe();
	make_slow_recipe();
	snprintf(log, sizeof(log), "%s/drain.log", root);
	setenv("TASKBOX_DRAIN_SECONDS", "2", 1);
	pid_t worker = start_worker(topic_tasks4, topic_dlq, group4, NULL, log);
	unsetenv("TASKBOX_DRAIN_SECONDS");
	snprintf(id, sizeof(id), "drain-%d", getpid());
	produce_task_of(topic_tasks4, id, slow_repo, slow_commit, "61.5");
	assert_true(log_has(log, "starts in slot", id, 90));
	assert_true(processes("sleep 61[.]5", 1, 60)); /* the agent runs */
	kill(worker, SIGTERM);
	status = exit_status(worker, 30);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 1);
	assert_true(log_has(log, "drain timeout: exiting with tasks running", NULL, 0));
	assert_int_equal(committed_sum(topic_tasks4, group4, 1), 0);
	assert_true(processes("sleep 61[.]5", 0, 10)); /* and is gone */

	/* the second signal */
	snprintf(log, sizeof(log), "%s/second-signal.log", root);
	worker = start_worker(topic_tasks5, topic_dlq, group5, NULL, log);
	snprintf(id, sizeof(id), "second-%d", getpid());
	produce_task_of(topic_tasks5, id, slow_repo, slow_commit, "61.5");
	assert_true(log_has(log, "starts in slot", id, 90));
	assert_true(processes("sleep 61[.]5", 1, 60)); /* the agent runs */
	kill(worker, SIGTERM);
	usleep(500000);
	kill(worker, SIGINT);
	status = exit_status(worker, 10);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 1);
	assert_int_equal(committed_sum(topic_tasks5, group5, 1), 0);
	assert_true(processes("sleep 61[.]5", 0, 10)); /* and is gone */
}

/*
 * A task that runs longer than the consumer's max.poll.interval.ms (here
 * 6 s, kafka.properties) does not get its worker thrown out of the group:
 * the main thread polls the consumer while slots run tasks. One run, its
 * offset committed, no "maximum poll interval exceeded".
 */
static void test_worker__a_task_longer_than_the_poll_interval_runs_once(void **state)
{
	char id[64], log[128], cfg[128], line[1024];
	int status, starts = 0;

	(void)state;
	make_recipe();
	make_slow_recipe();
	snprintf(cfg, sizeof(cfg), "%s/poll.json", root);
	write_file(root, "poll.json",
		   "{\"v\": 1, \"kafka\": {\"properties\": {\"session.timeout.ms\": \"6000\", "
		   "\"max.poll.interval.ms\": \"6000\"}}}\n");
	snprintf(log, sizeof(log), "%s/poll.log", root);
	worker_config = cfg;
	pid_t worker = start_worker(topic_tasks6, topic_dlq, group6, NULL, log);
	worker_config = NULL;
	snprintf(id, sizeof(id), "long-%d", getpid());
	produce_task_of(topic_tasks6, id, slow_repo, slow_commit, "14");
	assert_int_equal(committed_reaching(topic_tasks6, group6, 1, 1, 90), 1);
	kill(worker, SIGTERM);
	status = exit_status(worker, 30);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_false(log_has(log, "maximum poll interval", NULL, 0));
	FILE *f = fopen(log, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		starts += strstr(line, "starts in slot") && strstr(line, id);
	fclose(f);
	assert_int_equal(starts, 1);
}

/*
 * The waiting line refills as soon as it is resumed. At 2 slots it holds
 * 32 tasks: 112 produced at once are read to 32, the partition paused
 * (what librdkafka fetched ahead dropped) and resumed at 16, four times or
 * more. librdkafka does not wake its fetcher on a resume: a worker that
 * only resumed waited out the fetcher's one-second turn, 0-1000 ms at
 * each resume, 500 on average; one that also seeks to where it stopped
 * reading is fetched from at once (the fetch in flight, an empty long poll,
 * is made short here: fetch.wait.max.ms 10). The worker says at debug how
 * long after each resume the first task came; their mean is below 250 ms
 * (by chance, for four waits of a worker without the seek: 0.02 %).
 */
static void test_worker__a_resumed_line_is_fetched_at_once(void **state)
{
	char id[64], log[128], cfg[128], line[1024];
	unsigned long long ms, sum = 0;
	int n = 0;

	(void)state;
	make_recipe();
	snprintf(cfg, sizeof(cfg), "%s/resume.json", root);
	write_file(root, "resume.json",
		   "{\"v\": 1, \"log_level\": \"debug\", \"kafka\": {\"properties\": "
		   "{\"fetch.wait.max.ms\": \"10\"}}}\n");
	for (int i = 0; i < 112; i++) {
		snprintf(id, sizeof(id), "resume-%d-%d", getpid(), i);
		produce_task_of(topic_tasks8, id, repo, commit, "hello?");
	}
	snprintf(log, sizeof(log), "%s/resume.log", root);
	worker_config = cfg;
	pid_t worker = start_worker(topic_tasks8, topic_dlq, group8, NULL, log);
	worker_config = NULL;
	assert_int_equal(committed_reaching(topic_tasks8, group8, 1, 112, 240), 112);
	kill(worker, SIGTERM);
	assert_true(WIFEXITED(exit_status(worker, 30)));
	FILE *f = fopen(log, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		const char *at = strstr(line, "the first task ");
		if (at && sscanf(at, "the first task %llu ms after the resume", &ms) == 1)
			sum += ms, n++;
	}
	fclose(f);
	print_message("%d resumes, the first task %.0f ms after each on average\n", n,
		      n ? (double)sum / n : 0.0);
	assert_true(n >= 4);
	assert_true(sum < 250ULL * (unsigned long long)n);
}

/* The number of lines of @p log that hold @p what and @p also. */
static int log_count(const char *log, const char *what, const char *also)
{
	char line[1024];
	int n = 0;
	FILE *f = fopen(log, "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, what) && strstr(line, also);
	fclose(f);
	return n;
}

/*
 * Tasks whose input is an earlier task's output, sent before that task:
 * they wait in line with no attempt begun, and run (attempt 1) once the
 * earlier task is done. There are more of them than the line holds (32
 * at 2 slots), and still the earlier task behind them is read. One whose
 * earlier task was dead-lettered goes to the DLQ saying so.
 */
#define CHILDREN 36
static void test_worker__a_task_waits_for_the_task_its_inputs_name(void **state)
{
	char parent[64], child[64], bad[64], orphan[64], log[128];
	int status;

	(void)state;
	make_recipe();
	snprintf(parent, sizeof(parent), "parent-%d", getpid());
	snprintf(child, sizeof(child), "child-%d", getpid());
	snprintf(bad, sizeof(bad), "bad-parent-%d", getpid());
	snprintf(orphan, sizeof(orphan), "orphan-%d", getpid());
	tb_input_t in_child = { .name = "prior/hello.txt", .task = parent, .path = "hello.txt" };
	char more[80];
	tb_input_t in_orphan = { .name = "prior/hello.txt", .task = bad, .path = "hello.txt" };
	snprintf(log, sizeof(log), "%s/inputs.log", root);
	pid_t worker = start_worker(topic_tasks7, topic_dlq7, group7, NULL, log);
	produce_task_with(topic_tasks7, child, repo, commit, "hello?", NULL, &in_child, 1);
	for (int i = 1; i < CHILDREN; i++) {
		snprintf(more, sizeof(more), "%s-%d", child, i);
		produce_task_with(topic_tasks7, more, repo, commit, "hello?", NULL, &in_child, 1);
	}
	produce_task_with(topic_tasks7, orphan, repo, commit, "hello?", NULL, &in_orphan, 1);
	produce_task_of(topic_tasks7, parent, repo, commit, "hello?");
	produce_task_with(topic_tasks7, bad, repo, commit, "hello?", "no-such-runtime", NULL, 0);
	assert_int_equal(committed_reaching(topic_tasks7, group7, 1, CHILDREN + 3, 150),
			 CHILDREN + 3);
	kill(worker, SIGTERM);
	status = exit_status(worker, 30);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);

	/* the children waited, then each ran once, after their parent (the
	 * log's task="..." named exactly) */
	char task[100];
	snprintf(task, sizeof(task), "task=\"%s\"", child);
	assert_true(log_count(log, "for an earlier task", task) >= 1);
	assert_int_equal(log_count(log, "starts in slot", task), 1);
	assert_int_equal(log_count(log, "attempt 1 starts in slot", task), 1);
	assert_int_equal(log_count(log, "attempt 1 recorded: succeeded", task), 1);
	snprintf(task, sizeof(task), "task=\"%s-%d\"", child, CHILDREN - 1);
	assert_int_equal(log_count(log, "attempt 1 recorded: succeeded", task), 1);
	snprintf(task, sizeof(task), "task=\"%s\"", parent);
	assert_int_equal(log_count(log, "attempt 1 recorded: succeeded", task), 1);
	/* the bad parent and its dependent: dead-lettered, the second saying why */
	assert_int_equal(dlq_records(topic_dlq7, 3, 5), 2);
	assert_true(log_count(log, "dead-lettered (poison)", orphan) == 1);
	assert_true(log_count(log, "was dead-lettered: it has no outputs", orphan) >= 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(
		    test_worker__runs_a_task_from_kafka_and_commits_after_teardown,
		    stop_worker_left),
		cmocka_unit_test_teardown(
		    test_worker__waits_for_a_ledger_that_is_down_and_acknowledges_nothing,
		    stop_worker_left),
		cmocka_unit_test_teardown(test_worker__dead_letters_once_the_dlq_topic_is_there,
					  stop_worker_left),
		cmocka_unit_test_teardown(
		    test_worker__a_stop_that_cannot_wait_leaves_the_task_to_replay,
		    stop_worker_left),
		cmocka_unit_test_teardown(
		    test_worker__a_task_longer_than_the_poll_interval_runs_once, stop_worker_left),
		cmocka_unit_test_teardown(test_worker__a_resumed_line_is_fetched_at_once,
					  stop_worker_left),
		cmocka_unit_test_teardown(test_worker__a_task_waits_for_the_task_its_inputs_name,
					  stop_worker_left),
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
	snprintf(topic_tasks2, sizeof(topic_tasks2), "tbw-%d-tasks2", getpid());
	snprintf(topic_dlq2, sizeof(topic_dlq2), "tbw-%d-dlq2", getpid());
	snprintf(group2, sizeof(group2), "tbw-%d-2", getpid());
	snprintf(topic_tasks3, sizeof(topic_tasks3), "tbw-%d-tasks3", getpid());
	snprintf(topic_dlq3, sizeof(topic_dlq3), "tbw-%d-dlq3", getpid());
	snprintf(group3, sizeof(group3), "tbw-%d-3", getpid());
	snprintf(topic_tasks4, sizeof(topic_tasks4), "tbw-%d-tasks4", getpid());
	snprintf(group4, sizeof(group4), "tbw-%d-4", getpid());
	snprintf(topic_tasks5, sizeof(topic_tasks5), "tbw-%d-tasks5", getpid());
	snprintf(group5, sizeof(group5), "tbw-%d-5", getpid());
	snprintf(topic_tasks6, sizeof(topic_tasks6), "tbw-%d-tasks6", getpid());
	snprintf(group6, sizeof(group6), "tbw-%d-6", getpid());
	snprintf(topic_tasks7, sizeof(topic_tasks7), "tbw-%d-tasks7", getpid());
	snprintf(topic_dlq7, sizeof(topic_dlq7), "tbw-%d-dlq7", getpid());
	snprintf(group7, sizeof(group7), "tbw-%d-7", getpid());
	snprintf(topic_tasks8, sizeof(topic_tasks8), "tbw-%d-tasks8", getpid());
	snprintf(group8, sizeof(group8), "tbw-%d-8", getpid());
	make_topics();
	if (getenv("TBF")) /* one test, by name */
		cmocka_set_test_filter(getenv("TBF"));
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	if (system(cmd) != 0)
		rc = 1;
	return rc;
}
