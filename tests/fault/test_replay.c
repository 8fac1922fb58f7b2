/*
 * test_replay.c: crash-safe replay, proven by killing `taskbox worker`
 * (SIGKILL, as a power cut) against the real Kafka broker, Redis and S3
 * server, and checking every task afterwards:
 *
 *   - at every lifecycle phase in turn (TASKBOX_FAULT), one task each,
 *     the worker restarted after each death;
 *   - a batch of tasks with the worker killed at random moments (a bounded
 *     number of kills, each after a bounded time), restarted each time;
 *   - a task that kills its worker every time (dead-lettered after
 *     max_attempts);
 *   - Kafka, Redis and the S3 server each down for a while mid-batch;
 *   - three workers in one group, stopped, killed and restarted mid-batch;
 *   - the Kafka consumer failing for good (fenced) mid-batch;
 *   - a batch of 50 tasks on 4 slots mixed with every kind of bad input;
 *   - slow tasks, each delivered twice to two workers: the lease holds.
 *
 * Each prints `submitted / done / ran-twice-concurrently / lost / orphans`
 * and requires N / N / 0 / 0 / 0. A task is done when it has one
 * done-marker naming a complete manifest (its artifacts, conversation
 * record and both judges' verdicts in the store) and the events of that
 * attempt are on the events topic whole and in order up to its result.
 * Attempts of one task ran concurrently if their events' time spans
 * overlap. Orphans are what the workers left behind: processes in a
 * sandbox cgroup, sandbox cgroups, mounts and directories under the work
 * directory.
 *
 * The worker keeps its Kafka group membership static (group.instance.id),
 * so a restart takes its partitions back without waiting for the dead
 * member's session to time out; its worker id is stable, so it takes its
 * dead predecessor's leases over at once.
 *
 * Skips without Kafka, Redis, S3 or root.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
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
#include "tb/blocks.h"
#include "tb/json_mpack.h"
#include "tb/kafka.h"
#include "tb/schema_dlq.h"
#include "tb/schema_event.h"
#include "tb/schema_manifest.h"
#include "tb/schema_task.h"
#include "tb/schema_followup.h"
#include "tb/schema_verdict.h"
#include "tb/store.h"

#define MAX_TASKS 256
#define MAX_ATTEMPTS 16
#define MAX_SEQ 128
#define LEASE_MS 3000

static char root[64] = "/tmp/tb-replay-XXXXXX";
static char repo[128], commit[64], runtimes[128], bucket[64];
static char image_commit[64]; /* the image recipe's; "" when umoci or busybox-static is missing */
static char misbehave_commit[64], bare_commit[64], slow_commit[64], chat_commit[64];
static char pause_commit[64];
static const char *brokers, *redis_url, *s3_endpoint;

#define MAX_WORKERS 3

/* One scenario: its own topics, group, ledger prefix and worker ids. */
typedef struct scenario {
	const char *name;
	char tasks[64], events[64], dlq[64], group[64], prefix[64];
	int nworkers;
	char worker[MAX_WORKERS][64], config[MAX_WORKERS][160];
	char log[160], work[160];
	char ids[MAX_TASKS][64];
	int n;
	int extra;            /* messages on the tasks topic besides the tasks in ids */
	int slots;            /* per worker: 2 unless set before scenario_init */
	int judges;           /* each task's verdicts: the hello recipe's 2, unless set so */
	const char *assignor; /* kafka.assignor, unless the default (set before init) */
} scenario_t;

/* ------------------------------------------------------------ set-up */

/* Recipe repository @p name: examples/recipes/hello with an agent that
 * first sleeps @p seconds; its commit into @p into. @return 0, or -1. */
static int sleepy_hello(const char *name, int seconds, char into[64])
{
	char cmd[1024], dir[128];
	snprintf(dir, sizeof(dir), "%s/%s", root, name);
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p %s && cp -r %s/examples/recipes/hello/. %s/ && "
		 "cd %s && printf 'sleep %d\\n' | cat - agent.sh > a && mv a agent.sh",
		 dir, TB_SOURCE_DIR, dir, dir, seconds);
	return system(cmd) == 0 ? tb_fixture_commit(dir, NULL, into, 64) : -1;
}

/* Example recipe @p name copied into a repository of its own, its
 * commit into @p into. @return 0, or -1. */
static int example(const char *name, char into[64])
{
	char dir[128], from[600];
	snprintf(dir, sizeof(dir), "%s/%s", root, name);
	snprintf(from, sizeof(from), "%s/examples/recipes/%s", TB_SOURCE_DIR, name);
	return tb_fixture_commit(dir, from, into, 64);
}

static int setup(void **state)
{
	(void)state;
	brokers = getenv("TASKBOX_TEST_KAFKA");
	redis_url = getenv("TASKBOX_TEST_REDIS");
	s3_endpoint = getenv("TASKBOX_TEST_S3_ENDPOINT");
	if (!brokers || !redis_url || !s3_endpoint || geteuid() != 0) {
		printf("needs TASKBOX_TEST_KAFKA, TASKBOX_TEST_REDIS, TASKBOX_TEST_S3_ENDPOINT "
		       "and root: skipped\n");
		brokers = NULL;
		return 0;
	}
	if (!mkdtemp(root) || chmod(root, 0711) < 0) /* sandboxes' users pass through */
		return -1;
	setenv("AWS_ACCESS_KEY_ID", getenv("TASKBOX_TEST_S3_ACCESS_KEY"), 1);
	setenv("AWS_SECRET_ACCESS_KEY", getenv("TASKBOX_TEST_S3_SECRET_KEY"), 1);

	/* The hello recipe in a repository of our own, pinned. */
	snprintf(repo, sizeof(repo), "%s/hello", root);
	if (example("hello", commit) < 0)
		return -1;
	/* The misbehaving example recipe, and a repository without a
	 * taskbox.json, each at a commit. */
	char cmd[1024], path[300];
	snprintf(path, sizeof(path), "%s/bare", root);
	if (example("misbehave", misbehave_commit) < 0 ||
	    tb_fixture_recipe(path, bare_commit, sizeof(bare_commit), "README", "hi\n", NULL) < 0)
		return -1;
	/* the interactive chat recipe */
	if (example("chat", chat_commit) < 0)
		return -1;
	/* hello, with an agent that outlasts two leases; and one that takes
	 * 2 s (a batch of them lasts a minute) */
	if (sleepy_hello("slow", 7, slow_commit) < 0 || sleepy_hello("pause", 2, pause_commit) < 0)
		return -1;
	/* A recipe whose environment is an image (a busybox-static root, built
	 * with umoci): its agent and judges pass only on the image's files. */
	snprintf(
	    cmd, sizeof(cmd),
	    "command -v umoci >/dev/null && file -L /bin/busybox | grep -q static || exit 3; "
	    "set -e; L=%s/layouts/bb; umoci init --layout $L; umoci new --image $L:t; "
	    "umoci unpack --rootless --image $L:t $L.b >/dev/null; "
	    "mkdir -p $L.b/rootfs/bin $L.b/rootfs/usr/share; cp /bin/busybox $L.b/rootfs/bin/; "
	    "for t in sh cat grep; do ln -s busybox $L.b/rootfs/bin/$t; done; "
	    "echo from-the-image > $L.b/rootfs/usr/share/marker; "
	    "umoci repack --image $L:t $L.b; rm -rf $L.b; "
	    "grep -o 'sha256:[0-9a-f]*' $L/index.json | head -1 > %s/imaged.digest",
	    root, root);
	int made = system(cmd);
	if (made == 0) {
		static const char agent[] =
		    "read -r p\ncat /usr/share/marker > /outputs/marker || exit 1\n"
		    "echo '{\"type\":\"message\",\"role\":\"assistant\",\"text\":\"done\"}' >&3\n";
		static const char judge[] =
		    "cat >/dev/null\nif grep -q from-the-image /outputs/marker; then "
		    "echo '{\"outcome\":\"pass\"}'; else echo '{\"outcome\":\"fail\"}'; fi\n";
		char digest[100] = "", manifest[1024];
		snprintf(path, sizeof(path), "%s/imaged.digest", root);
		FILE *f = fopen(path, "r");
		if (!f || !fgets(digest, sizeof(digest), f))
			return -1;
		fclose(f);
		digest[strcspn(digest, "\n")] = '\0';
		/* the image's root layout and digest in its manifest */
		snprintf(
		    manifest, sizeof(manifest),
		    "{\"v\": 1, \"name\": \"imaged\", \"environment\": {\"image\": "
		    "\"oci-layout:%s/layouts/bb@%s\"}, \"agent\": {\"command\": [\"/bin/sh\", "
		    "\"agent.sh\"]}, \"judges\": [{\"name\": \"one\", \"command\": [\"/bin/sh\", "
		    "\"judge.sh\"]}, {\"name\": \"two\", \"command\": [\"/bin/sh\", "
		    "\"judge.sh\"]}]}\n",
		    root, digest);
		snprintf(path, sizeof(path), "%s/imaged", root);
		if (tb_fixture_recipe(path, image_commit, sizeof(image_commit), "agent.sh", agent,
				      "judge.sh", judge, "taskbox.json", manifest, NULL) < 0)
			return -1;
	} else if (!WIFEXITED(made) || WEXITSTATUS(made) != 3) {
		return -1;
	}
	/* Runtimes: "killable" has worker deaths enough for a task hit by
	 * every fault point in turn (each death spends one of its
	 * max_worker_deaths); "standard" has the defaults (3 attempts, 25
	 * deaths: service outages and outside kills must not spend the
	 * attempts), "metered" the same with a usage event every second
	 * of an agent's run; "twice" has 2 attempts; "fragile" 2 worker deaths. */
	snprintf(runtimes, sizeof(runtimes), "%s/runtimes", root);
	snprintf(
	    cmd, sizeof(cmd),
	    "mkdir -p %s && cd %s && "
	    "echo '{\"v\": 1, \"name\": \"killable\", \"max_attempts\": 20, "
	    "\"max_worker_deaths\": 20}' > killable.json && "
	    "echo '{\"v\": 1, \"name\": \"fragile\", \"max_worker_deaths\": 2}' > fragile.json && "
	    "echo '{\"v\": 1, \"name\": \"standard\"}' > standard.json && "
	    "echo '{\"v\": 1, \"name\": \"metered\", \"agent\": "
	    "{\"usage_interval_seconds\": 1}}' > metered.json && "
	    "echo '{\"v\": 1, \"name\": \"twice\", \"max_attempts\": 2}' > twice.json && "
	    "echo '{\"v\": 1, \"name\": \"imaged\", \"max_attempts\": 20, \"sandbox\": "
	    "{\"images\": {\"layouts\": [\"%s/layouts\"]}}}' > imaged.json",
	    runtimes, runtimes, root);
	if (system(cmd) != 0)
		return -1;

	/* The bucket. */
	tb_store_config_t cfg = { 0 };
	tb_store_t *s;
	tb_error_t err;
	char url[128];
	snprintf(bucket, sizeof(bucket), "tb-replay-%d", getpid());
	snprintf(url, sizeof(url), "s3://%s/runs", bucket);
	cfg.url = url, cfg.endpoint = (char *)s3_endpoint;
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	if (tb_store_open(&s, &cfg, &err) < 0 || tb_store_create_bucket(s, &err) < 0) {
		fprintf(stderr, "s3: %s\n", err.msg);
		return -1;
	}
	tb_store_close(s);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (brokers && getenv("TB_REPLAY_KEEP") == NULL) {
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
		if (system(cmd) != 0)
			return -1;
	}
	return 0;
}

static void make_topics(const scenario_t *sc)
{
	char errstr[256];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof(errstr));
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	rd_kafka_NewTopic_t *t[3] = {
		rd_kafka_NewTopic_new(sc->tasks, 4, 1, errstr, sizeof(errstr)),
		rd_kafka_NewTopic_new(sc->events, 4, 1, errstr, sizeof(errstr)),
		rd_kafka_NewTopic_new(sc->dlq, 1, 1, errstr, sizeof(errstr)),
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

/* Scenario @p name with @p nworkers worker ids; @p static_members: each
 * keeps its Kafka group membership across restarts (group.instance.id). */
static void scenario_init(scenario_t *sc, const char *name, int nworkers, int static_members)
{
	int slots = sc->slots ? sc->slots : 2, judges = sc->judges ? sc->judges : 2;
	const char *assignor = sc->assignor;
	memset(sc, 0, sizeof(*sc));
	sc->assignor = assignor;
	sc->slots = slots;
	sc->judges = judges;
	sc->name = name;
	sc->nworkers = nworkers;
	snprintf(sc->tasks, sizeof(sc->tasks), "replay-%s-%d.tasks", name, getpid());
	snprintf(sc->events, sizeof(sc->events), "replay-%s-%d.events", name, getpid());
	snprintf(sc->dlq, sizeof(sc->dlq), "replay-%s-%d.dlq", name, getpid());
	snprintf(sc->group, sizeof(sc->group), "replay-%s-%d", name, getpid());
	snprintf(sc->prefix, sizeof(sc->prefix), "replay-%s-%d", name, getpid());
	snprintf(sc->log, sizeof(sc->log), "%s/%s.log", root, name);
	snprintf(sc->work, sizeof(sc->work), "%s/work", root);
	make_topics(sc);
	for (int k = 0; k < nworkers; k++) {
		char instance[100] = "", assign[64] = "";
		snprintf(sc->worker[k], sizeof(sc->worker[k]), "replay-%s-%d-w%d", name, getpid(),
			 k + 1);
		snprintf(sc->config[k], sizeof(sc->config[k]), "%s/%s-w%d.json", root, name, k + 1);
		if (static_members)
			snprintf(instance, sizeof(instance), "\"group_instance_id\": \"%s\", ",
				 sc->worker[k]);
		if (sc->assignor)
			snprintf(assign, sizeof(assign), "\"assignor\": \"%s\", ", sc->assignor);
		FILE *f = fopen(sc->config[k], "w");
		assert_non_null(f);
		fprintf(
		    f,
		    "{\"v\": 1, \"worker_id\": \"%s\", \"slots\": %d, \"log_level\": \"info\",\n"
		    " \"kafka\": {\"brokers\": \"%s\", \"group\": \"%s\", %s%s\n"
		    "  \"tasks_topic\": \"%s\", \"events_topic\": \"%s\", \"dlq_topic\": \"%s\",\n"
		    "  \"properties\": {\"session.timeout.ms\": \"10000\"}},\n"
		    " \"ledger\": {\"url\": \"%s\", \"prefix\": \"%s\", \"lease_ms\": %d},\n"
		    " \"store\": {\"url\": \"s3://%s/runs\", \"endpoint\": \"%s\", "
		    "\"region\": \"%s\"},\n"
		    " \"runtimes_dir\": \"%s\", \"work_dir\": \"%s\", \"cache_dir\": "
		    "\"%s/cache\"}\n",
		    sc->worker[k], sc->slots, brokers, sc->group, instance, assign, sc->tasks,
		    sc->events, sc->dlq, redis_url, sc->prefix, LEASE_MS, bucket, s3_endpoint,
		    getenv("TASKBOX_TEST_S3_REGION"), runtimes, sc->work, root);
		fclose(f);
	}
}

/* ----------------------------------------------------------- workers */

/* Every worker started and not yet reaped: a failing test (an assert
 * jumps out of it) leaves none running; see stop_leftovers. */
#define MAX_LIVE 64
static pid_t live[MAX_LIVE];

static void forget_pid(pid_t pid)
{
	for (int i = 0; i < MAX_LIVE; i++)
		if (live[i] == pid)
			live[i] = 0;
}

/* waitpid for a worker, forgetting it once reaped. */
static pid_t reap(pid_t pid, int *status, int flags)
{
	pid_t got = waitpid(pid, status, flags);
	if (got == pid)
		forget_pid(pid);
	return got;
}

/* Per-test teardown: kills (by pid) the workers a failed test left. */
static int stop_leftovers(void **state)
{
	(void)state;
	for (int i = 0; i < MAX_LIVE; i++)
		if (live[i] > 0) {
			kill(live[i], SIGKILL);
			waitpid(live[i], NULL, 0);
			live[i] = 0;
		}
	return 0;
}

/* `taskbox worker` number @p k of the scenario, dying at @p fault (NULL:
 * none); its log appended to the scenario's. */
static pid_t start_worker(const scenario_t *sc, int k, const char *fault)
{
	pid_t pid = fork();
	if (pid == 0) {
		if (fault)
			setenv("TASKBOX_FAULT", fault, 1);
		else
			unsetenv("TASKBOX_FAULT");
		if (!freopen(sc->log, "a", stderr))
			_exit(126);
		execl(TB_TASKBOX, "taskbox", "worker", "--config", sc->config[k], (char *)NULL);
		_exit(127);
	}
	for (int i = 0; pid > 0 && i < MAX_LIVE; i++)
		if (!live[i]) {
			live[i] = pid;
			break;
		}
	return pid;
}

/* Waits for @p pid at most @p seconds; its status, or -1 (still alive). */
static int wait_exit(pid_t pid, int seconds)
{
	int status;
	for (int i = 0; i < seconds * 10; i++) {
		if (reap(pid, &status, WNOHANG) == pid)
			return status;
		usleep(100000);
	}
	return -1;
}

static void show_log(const scenario_t *sc)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "tail -n 40 %s >&2", sc->log);
	if (system(cmd) != 0)
		fprintf(stderr, "(no log)\n");
}

/* One message as is, keyed @p key: counted as an extra message. */
static void produce_raw(scenario_t *sc, const char *key, const void *data, size_t len)
{
	/* room for a message near the broker's limit (1,048,588 bytes) */
	tb_kv_t big = { "message.max.bytes", "2000000" };
	tb_strmap_t props = { 1, &big };
	tb_error_t err;
	rd_kafka_t *p;

	assert_int_equal(tb_kafka_producer_new(&p, brokers, &props, &err), 0);
	assert_int_equal(tb_kafka_produce(p, sc->tasks, key, data, len, &err), 0);
	assert_int_equal(rd_kafka_flush(p, 30000), 0);
	rd_kafka_destroy(p);
	sc->extra++;
}

/* Task @p id of recipe @p url at @p at: counted as an extra message. */
static void produce_task_at(scenario_t *sc, const char *id, const char *url, const char *at,
			    const char *runtime)
{
	tb_task_t t = { 0 };
	msgpack_sbuffer sb;
	tb_error_t err;

	t.id = (char *)id, t.kind = TB_TASK_ONE_SHOT, t.recipe.url = (char *)url;
	t.recipe.commit = (char *)at, t.prompt = (char *)"hello?";
	t.runtime = (char *)runtime, t.submitted_at = 1;
	msgpack_sbuffer_init(&sb);
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_task, &t, &err), 0);
	produce_raw(sc, id, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
}

static void produce_tasks(scenario_t *sc, const char *stem, int n, const char *runtime)
{
	tb_error_t err;
	rd_kafka_t *p;
	char url[160];

	snprintf(url, sizeof(url), "file://%s", repo);
	assert_int_equal(tb_kafka_producer_new(&p, brokers, NULL, &err), 0);
	for (int i = 0; i < n && sc->n < MAX_TASKS; i++) {
		char *id = sc->ids[sc->n++];
		tb_task_t t = { 0 };
		msgpack_sbuffer sb;
		snprintf(id, sizeof(sc->ids[0]), "%s-%d-%d", stem, getpid(), i);
		t.id = id, t.kind = TB_TASK_ONE_SHOT, t.recipe.url = url, t.recipe.commit = commit;
		t.prompt = (char *)"hello?", t.runtime = (char *)runtime, t.submitted_at = 1;
		msgpack_sbuffer_init(&sb);
		assert_int_equal(tb_msg_encode(&sb, &tb_schema_task, &t, &err), 0);
		assert_int_equal(tb_kafka_produce(p, sc->tasks, id, sb.data, sb.size, &err), 0);
		msgpack_sbuffer_destroy(&sb);
	}
	assert_int_equal(rd_kafka_flush(p, 30000), 0);
	rd_kafka_destroy(p);
}

/* ------------------------------------------------------------ ledger */

static redisContext *redis(void)
{
	char host[64];
	int port;
	assert_int_equal(sscanf(redis_url, "redis://%63[^:]:%d", host, &port), 2);
	redisContext *c = redisConnect(host, port);
	assert_true(c && !c->err);
	return c;
}

/* Task @p id's done-marker into @p value ("" if none). */
static void done_marker(redisContext *c, const scenario_t *sc, const char *id, char *value,
			size_t size)
{
	redisReply *r = redisCommand(c, "GET %s:task:{%s}:done", sc->prefix, id);
	value[0] = '\0';
	if (r && r->type == REDIS_REPLY_STRING)
		snprintf(value, size, "%s", r->str);
	freeReplyObject(r);
}

/* The most deaths any one task of the scenario had, kept by the ledger
 * ("died": after it said a phase / before; "crashed"), for the record. */
static void most_deaths(const scenario_t *sc, int *after, int *before, int *crashed)
{
	redisContext *c = redis();
	*after = *before = *crashed = 0;
	for (int i = 0; i < sc->n; i++) {
		redisReply *r =
		    redisCommand(c, "LRANGE %s:task:{%s}:failures 0 -1", sc->prefix, sc->ids[i]);
		int a = 0, b = 0, k = 0;
		for (size_t e = 0; r && r->type == REDIS_REPLY_ARRAY && e < r->elements; e++) {
			const char *v = r->element[e]->str ? r->element[e]->str : "";
			if (strstr(v, "\tcrashed\t"))
				k++;
			else if (strstr(v, "\tdied\tits worker died before"))
				b++;
			else if (strstr(v, "\tdied\t"))
				a++;
		}
		freeReplyObject(r);
		*after = a > *after ? a : *after;
		*before = b > *before ? b : *before;
		*crashed = k > *crashed ? k : *crashed;
	}
	redisFree(c);
}

static int count_done(const scenario_t *sc)
{
	redisContext *c = redis();
	char v[700];
	int n = 0;
	for (int i = 0; i < sc->n; i++) {
		done_marker(c, sc, sc->ids[i], v, sizeof(v));
		n += v[0] != '\0';
	}
	redisFree(c);
	return n;
}

/* The group's committed offsets on the tasks topic, summed. */
static int64_t committed(const scenario_t *sc)
{
	char errstr[256];
	int64_t sum = -1;
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof(errstr));
	rd_kafka_conf_set(conf, "group.id", sc->group, errstr, sizeof(errstr));
	rd_kafka_t *q = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(4);
	for (int k = 0; k < 4; k++)
		rd_kafka_topic_partition_list_add(l, sc->tasks, k);
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

/* Waits until every task is done and its message committed (bounded),
 * then stops the @p n workers in @p pids with SIGTERM: each must exit 0. */
static void run_until_done(const scenario_t *sc, const pid_t *pids, int n, int seconds)
{
	int all = 0, clean = 1, status = 0;
	for (int i = 0; i < seconds && !all; i++) {
		sleep(1);
		all = count_done(sc) == sc->n && committed(sc) == sc->n + sc->extra;
	}
	for (int k = 0; k < n; k++)
		kill(pids[k], SIGTERM);
	for (int k = 0; k < n; k++) {
		if ((status = wait_exit(pids[k], 150)) < 0) {
			kill(pids[k], SIGKILL);
			reap(pids[k], &status, 0);
		}
		clean &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
	}
	if (!all || !clean) {
		show_log(sc);
		fail_msg("%s: the workers did not finish every task (%d of %d done, "
			 "committed %lld; clean exits: %s)",
			 sc->name, count_done(sc), sc->n, (long long)committed(sc),
			 clean ? "yes" : "no");
	}
}

/* The cgroup directories named for worker @p id's group, in every
 * hierarchy. */
static long group_dirs(const char *id)
{
	char cmd[300], line[64];
	snprintf(cmd, sizeof(cmd), "find /sys/fs/cgroup -type d -name 'tb-%s' | wc -l", id);
	FILE *f = popen(cmd, "r");
	long n = f && fgets(line, sizeof(line), f) ? strtol(line, NULL, 10) : -1;
	if (f)
		pclose(f);
	return n;
}

/* Runs worker 0 without faults until every task is done, then stops it:
 * a clean exit leaves no cgroup directory of its own behind. */
static void finish_all(const scenario_t *sc, int seconds)
{
	pid_t w = start_worker(sc, 0, NULL);
	run_until_done(sc, &w, 1, seconds);
	if (group_dirs(sc->worker[0]) != 0)
		fail_msg("%s: worker %s left %ld cgroup directories of its group", sc->name,
			 sc->worker[0], group_dirs(sc->worker[0]));
}

/* ------------------------------------------------------------ checks */

typedef struct attempt_seen {
	uint64_t attempt;
	uint8_t seq[MAX_SEQ]; /* times each seq was seen */
	uint64_t first_ts, last_ts;
	int64_t last_seq; /* in consumption order: -1 none yet */
	int result_seq;   /* -1 none */
	int out_of_order;
	int usages;            /* usage events */
	int64_t usage_wall_ms; /* the last one's wall_ms; -1 without it */
	int usage_agent;       /* the last one had the agent's CPU */
} attempt_seen_t;

typedef struct task_seen {
	attempt_seen_t a[MAX_ATTEMPTS];
	int n;
} task_seen_t;

static int index_of(const scenario_t *sc, const char *id)
{
	for (int i = 0; i < sc->n; i++)
		if (!strcmp(sc->ids[i], id))
			return i;
	return -1;
}

static attempt_seen_t *attempt_of(task_seen_t *t, uint64_t attempt)
{
	for (int i = 0; i < t->n; i++)
		if (t->a[i].attempt == attempt)
			return &t->a[i];
	if (t->n == MAX_ATTEMPTS)
		return NULL;
	attempt_seen_t *a = &t->a[t->n++];
	memset(a, 0, sizeof(*a));
	a->attempt = attempt;
	a->last_seq = -1;
	a->result_seq = -1;
	return a;
}

/* A usage event of attempt @p a: its figures so far. */
static void usage_seen(attempt_seen_t *a, const tb_event_t *ev)
{
	json_t *p = NULL;
	tb_error_t err;

	a->usages++;
	a->usage_wall_ms = -1;
	a->usage_agent = 0;
	if (tb_mpack_to_json(&p, ev->payload.data, ev->payload.len, &err) < 0)
		return;
	json_t *u = json_object_get(p, "usage");
	if (json_is_integer(json_object_get(u, "wall_ms")))
		a->usage_wall_ms = json_integer_value(json_object_get(u, "wall_ms"));
	a->usage_agent = json_is_integer(json_object_get(json_object_get(u, "agent"), "user_ms"));
	json_decref(p);
}

/* Reads the whole events topic (to its end on every partition). */
static void read_events(const scenario_t *sc, task_seen_t *seen)
{
	tb_error_t err;
	rd_kafka_t *c;
	tb_strmap_t props = { 0 };
	tb_kv_t eof = { (char *)"enable.partition.eof", (char *)"true" };
	props.items = &eof;
	props.n = 1;
	assert_int_equal(tb_kafka_consumer_new(&c, brokers, "replay-reader", NULL, NULL, &props,
					       NULL, NULL, &err),
			 0);
	rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(4);
	for (int p = 0; p < 4; p++)
		rd_kafka_topic_partition_list_add(parts, sc->events, p)->offset =
		    RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_assign(c, parts);
	rd_kafka_topic_partition_list_destroy(parts);
	int eofs = 0;
	time_t deadline = time(NULL) + 120;
	while (eofs < 4 && time(NULL) < deadline) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 500);
		if (!m)
			continue;
		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
			eofs++;
		} else if (!m->err) {
			tb_event_t ev;
			if (tb_msg_decode(&tb_schema_event, &ev, m->payload, m->len, &err) == 0) {
				int i = index_of(sc, ev.task_id);
				attempt_seen_t *a =
				    i >= 0 ? attempt_of(&seen[i], ev.attempt) : NULL;
				if (a && ev.seq < MAX_SEQ) {
					a->seq[ev.seq]++;
					if ((int64_t)ev.seq <= a->last_seq)
						a->out_of_order = 1;
					a->last_seq = (int64_t)ev.seq;
					if (!a->first_ts || ev.ts < a->first_ts)
						a->first_ts = ev.ts;
					if (ev.ts > a->last_ts)
						a->last_ts = ev.ts;
					if (ev.type == TB_EV_RESULT)
						a->result_seq = (int)ev.seq;
					if (ev.type == TB_EV_USAGE)
						usage_seen(a, &ev);
				}
				tb_msg_free(&tb_schema_event, &ev);
			}
		}
		rd_kafka_message_destroy(m);
	}
	rd_kafka_consumer_close(c);
	rd_kafka_destroy(c);
	assert_int_equal(eofs, 4);
}

/* The done attempt's manifest, whole: artifacts, record, @p judges
 * verdicts, each a pass. */
static int manifest_complete(tb_store_t *s, const char *id, uint64_t attempt, const char *key,
			     size_t judges)
{
	tb_manifest_t m;
	tb_object_info_t info;
	tb_error_t err;
	char *bytes;
	size_t len;
	int ok;

	if (tb_store_get_bytes(s, key, 1 << 20, &bytes, &len, &err) < 0) {
		fprintf(stderr, "%s: manifest %s: %s\n", id, key, err.msg);
		return 0;
	}
	ok = tb_msg_decode(&tb_schema_manifest, &m, bytes, len, &err) == 0;
	free(bytes);
	if (!ok) {
		fprintf(stderr, "%s: manifest: %s\n", id, err.msg);
		return 0;
	}
	ok = !strcmp(m.task_id, id) && m.attempt == attempt && m.outcome == TB_OUTCOME_SUCCEEDED &&
	     m.verdicts.n == judges && m.artifacts.n == 1 && m.runtime && m.phases.n == 9 &&
	     tb_store_head(s, m.conversation_key, &info, &err) == 0;
	for (size_t i = 0; ok && i < m.artifacts.n; i++) {
		const tb_artifact_t *a = (const tb_artifact_t *)m.artifacts.items + i;
		ok = tb_store_head(s, a->key, &info, &err) == 0 && info.size == a->size;
	}
	for (size_t i = 0; ok && i < m.verdicts.n; i++) {
		const tb_verdict_ref_t *v = (const tb_verdict_ref_t *)m.verdicts.items + i;
		ok = v->outcome == TB_VERDICT_PASS;
	}
	if (!ok)
		fprintf(stderr, "%s: manifest %s is not complete\n", id, key);
	tb_msg_free(&tb_schema_manifest, &m);
	return ok;
}

/* The done attempt's events: 0 .. result, each once, in order. */
static int events_complete(const char *id, const task_seen_t *t, uint64_t attempt)
{
	for (int i = 0; i < t->n; i++) {
		const attempt_seen_t *a = &t->a[i];
		if (a->attempt != attempt)
			continue;
		int ok = a->result_seq > 0 && !a->out_of_order;
		for (int s = 0; ok && s <= a->result_seq; s++)
			ok = a->seq[s] == 1;
		if (!ok)
			fprintf(stderr, "%s: attempt %llu's events are not whole (result at %d)\n",
				id, (unsigned long long)attempt, a->result_seq);
		return ok;
	}
	fprintf(stderr, "%s: no events of attempt %llu\n", id, (unsigned long long)attempt);
	return 0;
}

static int overlapping(const task_seen_t *t)
{
	for (int i = 0; i < t->n; i++)
		for (int j = i + 1; j < t->n; j++)
			if (t->a[i].first_ts <= t->a[j].last_ts &&
			    t->a[j].first_ts <= t->a[i].last_ts)
				return 1;
	return 0;
}

static int count_lines_with(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	char line[4096];
	int n = 0;
	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	if (f)
		fclose(f);
	return n;
}

/* What worker @p id left: processes in a sandbox cgroup of its, sandbox
 * cgroups, mounts and directories under the work directory. */
static int orphans_of(const scenario_t *sc, const char *id)
{
	char group[96], needle[300], cmd[512], line[64];
	int n = 0;

	snprintf(group, sizeof(group), "tb-%s", id);
	snprintf(needle, sizeof(needle), "/%s/", group);
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char path[300];
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cgroup", e->d_name);
		if (count_lines_with(path, needle)) {
			fprintf(stderr, "orphan: process %s\n", e->d_name);
			n++;
		}
	}
	if (d)
		closedir(d);
	snprintf(cmd, sizeof(cmd), "find /sys/fs/cgroup -type d -path '*/%s/*' | wc -l", group);
	FILE *f = popen(cmd, "r");
	long cgroups = f && fgets(line, sizeof(line), f) ? strtol(line, NULL, 10) : 0;
	if (cgroups > 0) {
		fprintf(stderr, "orphan: %ld sandbox cgroups\n", cgroups);
		n += (int)cgroups;
	}
	if (f)
		pclose(f);
	snprintf(needle, sizeof(needle), "%s/%s", sc->work, group);
	int mounts = count_lines_with("/proc/self/mountinfo", needle);
	if (mounts)
		fprintf(stderr, "orphan: %d mounts under %s\n", mounts, needle);
	n += mounts;
	if ((d = opendir(sc->work))) {
		while ((e = readdir(d)))
			if (!strncmp(e->d_name, group, strlen(group))) {
				fprintf(stderr, "orphan: directory %s/%s\n", sc->work, e->d_name);
				n++;
			}
		closedir(d);
	}
	return n;
}

/* Checks every task of @p sc; prints the summary line and requires it. */
static void check(const scenario_t *sc)
{
	static task_seen_t seen[MAX_TASKS];
	tb_store_config_t cfg = { 0 };
	tb_store_t *s;
	tb_error_t err;
	char url[128], v[700];
	int done = 0, twice = 0, lost = 0;

	memset(seen, 0, sizeof(seen));
	read_events(sc, seen);
	snprintf(url, sizeof(url), "s3://%s/runs", bucket);
	cfg.url = url, cfg.endpoint = (char *)s3_endpoint;
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	assert_int_equal(tb_store_open(&s, &cfg, &err), 0);
	redisContext *c = redis();
	for (int i = 0; i < sc->n; i++) {
		unsigned long long att = 0;
		int off = 0;
		done_marker(c, sc, sc->ids[i], v, sizeof(v));
		if (sscanf(v, "%llu %n", &att, &off) != 1 || !v[off]) {
			fprintf(stderr, "%s: no done-marker with a manifest ('%s')\n", sc->ids[i],
				v);
			lost++;
			continue;
		}
		done += manifest_complete(s, sc->ids[i], att, v + off, (size_t)sc->judges) &&
			events_complete(sc->ids[i], &seen[i], att);
		twice += overlapping(&seen[i]);
	}
	redisFree(c);
	tb_store_close(s);
	int left = 0;
	for (int k = 0; k < sc->nworkers; k++)
		left += orphans_of(sc, sc->worker[k]);
	printf("replay %-12s submitted %d / done %d / ran-twice-concurrently %d / lost %d / "
	       "orphans %d\n",
	       sc->name, sc->n, done, twice, lost, left);
	fflush(stdout);
	assert_int_equal(done, sc->n);
	assert_int_equal(twice, 0);
	assert_int_equal(lost, 0);
	assert_int_equal(left, 0);
}

/* ------------------------------------------------------------- tests */

/* One task per fault point, the worker killed there, then restarted. */
static void test_replay__kill_at_every_phase(void **state)
{
	static const char *const points[] = {
		"received",    "validated", "claimed",      "prepared", "running",
		"settled",     "collected", "judged",       "recorded", "manifest-durable",
		"done-marked", "torn-down", "acknowledged",
	};
	const int npoints = (int)(sizeof(points) / sizeof(points[0]));
	static scenario_t scenario; /* static: a failing assert longjmps past any free */
	scenario_t *sc = &scenario;
	char stem[64];

	(void)state;
	if (!brokers)
		skip();
	scenario_init(sc, "phases", 1, 1);
	for (int i = 0; i < npoints; i++) {
		snprintf(stem, sizeof(stem), "at-%s", points[i]);
		produce_tasks(sc, stem, 1, "killable");
		pid_t w = start_worker(sc, 0, points[i]);
		int status = wait_exit(w, 120);
		if (status < 0) {
			kill(w, SIGKILL);
			reap(w, &status, 0);
			show_log(sc);
			fail_msg("the worker never reached fault point %s", points[i]);
		}
		if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
			show_log(sc);
			fail_msg("fault point %s: the worker ended with status %d, not SIGKILL",
				 points[i], status);
		}
	}
	finish_all(sc, 180);
	check(sc);
}

/* A task in an image, the worker killed after the image's blobs are
 * fetched and after its layers are unpacked (before the tree is in
 * place): each task then runs once, on a whole root (its agent and
 * judges pass only on the image's files). */
static void test_replay__kill_while_an_image_is_made(void **state)
{
	static const char *const points[] = { "image-fetched", "image-unpacked" };
	static scenario_t scenario;
	scenario_t *sc = &scenario;
	char url[200];

	(void)state;
	if (!brokers || !image_commit[0])
		skip(); /* umoci and busybox-static: deploy/local/install-deps test */
	scenario_init(sc, "image", 1, 1);
	snprintf(url, sizeof(url), "file://%s/imaged", root);
	for (int i = 0; i < 2; i++) {
		char *id = sc->ids[sc->n++];
		snprintf(id, sizeof(sc->ids[0]), "img-at-%s-%d", points[i], getpid());
		produce_task_at(sc, id, url, image_commit, "imaged");
		sc->extra--; /* one of the scenario's tasks (sc->ids), not an extra message */
		pid_t w = start_worker(sc, 0, points[i]);
		int status = wait_exit(w, 120);
		if (status < 0 || !WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
			if (status < 0) {
				kill(w, SIGKILL);
				reap(w, &status, 0);
			}
			show_log(sc);
			fail_msg("fault point %s: the worker was not killed there (status %d)",
				 points[i], status);
		}
		/* the next task finds the image as a crash left it: swept, made again */
		char cmd[300];
		snprintf(cmd, sizeof(cmd), "rm -rf %s/cache/images/trees/*", root);
		if (i == 0 && system(cmd) != 0)
			fail_msg("%s", cmd);
	}
	finish_all(sc, 180);
	check(sc);
}

/* A batch, the worker killed at random moments, restarted each time, on
 * the default runtime: a task hit by several kills keeps its 3 attempts
 * (its worker's deaths have a budget of their own), and none is taken for
 * a task that kills its worker. */
static void test_replay__random_kills_during_a_batch(void **state)
{
	const char *env = getenv("TB_REPLAY_TASKS");
	int n = env ? (int)strtol(env, NULL, 10) : 200, kills = 0;
	unsigned seed = (unsigned)getpid();
	static scenario_t scenario;
	scenario_t *sc = &scenario;

	(void)state;
	if (!brokers)
		skip();
	if (n < 1 || n > MAX_TASKS)
		n = 200;
	scenario_init(sc, "random", 1, 1);
	produce_tasks(sc, "batch", n, "standard");
	printf("random kills: seed %u\n", seed);
	srand(seed);
	for (int k = 0; k < 8 && count_done(sc) < sc->n; k++) { /* at most 8 kills */
		pid_t w = start_worker(sc, 0, NULL);
		usleep((useconds_t)(1500 + rand() % 3500) * 1000); /* 1.5 to 5 s */
		kill(w, SIGKILL);
		reap(w, NULL, 0);
		kills++;
	}
	printf("random kills: %d kills, %d of %d tasks done before the last worker\n", kills,
	       count_done(sc), sc->n);
	finish_all(sc, 300);
	check(sc);
}

/* Outside kills never convict a healthy task: 200 tasks (an agent of 2 s)
 * through 2 workers of 4 slots on the defaults ("standard"), a random one of them
 * killed (SIGKILL) every 1 to 4 s, 25 times, each restarted with its id
 * at once (so it takes its predecessor's leases and begins the same tasks
 * first). Every task is done, once, whatever the seed: a kill from
 * outside is no evidence against the task it hit (docs/crash-safety.md,
 * "What convicts a task"). Two seeds a run (TB_KILL_SEEDS=N: N). */
static void test_replay__outside_kills_never_convict_a_healthy_task(void **state)
{
	const char *env = getenv("TB_KILL_SEEDS");
	int seeds = env ? (int)strtol(env, NULL, 10) : 2;
	static scenario_t scenario;
	scenario_t *sc = &scenario;
	char url[200];

	(void)state;
	if (!brokers)
		skip();
	for (int s = 0; s < seeds && s < 16; s++) {
		unsigned seed = (unsigned)getpid() * 31u + (unsigned)s;
		char name[32];
		int kills = 0;
		snprintf(name, sizeof(name), "kills%d", s + 1);
		sc->slots = 4;
		scenario_init(sc, name, 2, 1);
		snprintf(url, sizeof(url), "file://%s/pause", root);
		for (int i = 0; i < 200; i++) {
			snprintf(sc->ids[sc->n], sizeof(sc->ids[0]), "%s-%d-%d", name, getpid(), i);
			produce_task_at(sc, sc->ids[sc->n], url, pause_commit, "standard");
			sc->n++;
			sc->extra--; /* one of the scenario's tasks, not an extra message */
		}
		srand(seed);
		pid_t w[2] = { start_worker(sc, 0, NULL), start_worker(sc, 1, NULL) };
		for (int k = 0; k < 25 && count_done(sc) < sc->n; k++) {
			usleep((useconds_t)(1000 + rand() % 3000) * 1000); /* 1 to 4 s */
			int i = rand() % 2;
			kill(w[i], SIGKILL);
			reap(w[i], NULL, 0);
			w[i] = start_worker(sc, i, NULL);
			kills++;
		}
		printf("outside kills: seed %u: %d kills, %d of %d tasks done by the last\n", seed,
		       kills, count_done(sc), sc->n);
		run_until_done(sc, w, 2, 300);
		check(sc);
		int after, before, crashed;
		most_deaths(sc, &after, &before, &crashed);
		printf("outside kills: seed %u: most deaths of one task: %d after it said a phase "
		       "(max_worker_deaths 25), %d before, %d crashes\n",
		       seed, after, before, crashed);
		assert_int_equal(crashed, 0);
	}
}

/* Every DLQ record of the scenario: task id (or ""), cause, reason. */
typedef struct dlq_seen {
	char id[64];
	int cause;
	char reason[400];
	int32_t partition;
	int64_t offset;
	size_t original_len;
} dlq_seen_t;

static int read_dlq(const scenario_t *sc, dlq_seen_t *out, int max)
{
	tb_error_t err;
	rd_kafka_t *c;
	tb_kv_t eof = { (char *)"enable.partition.eof", (char *)"true" };
	tb_strmap_t props = { 1, &eof };
	int n = 0, done = 0;

	assert_int_equal(tb_kafka_consumer_new(&c, brokers, "replay-reader", NULL, NULL, &props,
					       NULL, NULL, &err),
			 0);
	rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(parts, sc->dlq, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_assign(c, parts);
	rd_kafka_topic_partition_list_destroy(parts);
	for (time_t until = time(NULL) + 60; !done && time(NULL) < until;) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 500);
		tb_dlq_t rec;
		if (!m)
			continue;
		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
			done = 1;
		} else if (!m->err && n < max &&
			   tb_msg_decode(&tb_schema_dlq, &rec, m->payload, m->len, &err) == 0) {
			snprintf(out[n].id, sizeof(out[n].id), "%s",
				 rec.task_id ? rec.task_id : "");
			out[n].cause = rec.cause;
			out[n].partition = m->partition;
			out[n].offset = m->offset;
			out[n].original_len = rec.original.len;
			snprintf(out[n].reason, sizeof(out[n].reason), "%s",
				 rec.reason ? rec.reason : "");
			n++;
			tb_msg_free(&tb_schema_dlq, &rec);
		}
		rd_kafka_message_destroy(m);
	}
	rd_kafka_consumer_close(c);
	rd_kafka_destroy(c);
	return n;
}

static const dlq_seen_t *find_dlq(const dlq_seen_t *d, int n, const char *id)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(d[i].id, id))
			return &d[i];
	fail_msg("task %s is not in the DLQ", id);
	abort(); /* not reached (fail_msg does not return); tells the compiler */
}

/* The DLQ records of task @p id; the last one's cause and reason. */
static int dead_letters(const scenario_t *sc, const char *id, int *cause, char *reason, size_t len)
{
	static dlq_seen_t all[64];
	int n = read_dlq(sc, all, 64), found = 0;

	for (int i = 0; i < n; i++)
		if (!strcmp(all[i].id, id)) {
			found++;
			*cause = all[i].cause;
			snprintf(reason, len, "%s", all[i].reason);
		}
	return found;
}

/* Runs the worker with fault point @p fault armed @p deaths times, each
 * of which must end it by a signal (the task killed it), then once more:
 * that one must dead-letter the task without running it, live on, and
 * stop cleanly. @return the DLQ record's cause, its reason in @p reason. */
static int crash_loop(scenario_t *sc, const char *fault, int deaths, char *reason, size_t len)
{
	int cause = -1, status;

	for (int k = 0; k < deaths; k++) {
		pid_t w = start_worker(sc, 0, fault);
		if ((status = wait_exit(w, 120)) < 0 || !WIFSIGNALED(status)) {
			if (status < 0)
				kill(w, SIGKILL), reap(w, NULL, 0);
			show_log(sc);
			fail_msg("%s run %d: the task did not kill its worker (status %d)",
				 sc->name, k + 1, status);
		}
	}
	pid_t w = start_worker(sc, 0, fault);
	int all = 0;
	for (int i = 0; i < 120 && !all; i++) {
		sleep(1);
		all = count_done(sc) == 1 && committed(sc) == 1;
		assert_int_equal(reap(w, &status, WNOHANG), 0); /* still alive */
	}
	kill(w, SIGTERM);
	status = wait_exit(w, 150);
	if (!all || status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		show_log(sc);
		fail_msg("%s: the worker did not dead-letter the task and stop cleanly (%d)",
			 sc->name, status);
	}
	assert_int_equal(dead_letters(sc, sc->ids[0], &cause, reason, len), 1);
	printf("%s: dead-lettered: %s\n", sc->name, reason);
	return cause;
}

/* A task that crashes its worker (a fault point that raises SIGSEGV in
 * the task's own thread, as a bug in the collector would), whether in a
 * short step after its agent or while its agent runs, is poison after 2
 * crashes: the worker's black box says so to the next worker of its id,
 * which keeps it in the ledger before it takes a task. One whose worker
 * is killed from outside (SIGKILL: no evidence) every time at the same
 * step spends the runtime's max_worker_deaths (here 2) and goes to the
 * DLQ as max-attempts, never as poison. Either way the worker lives on. */
static void test_replay__a_task_that_kills_its_worker_is_dead_lettered(void **state)
{
	static scenario_t scenario, agent, killed;
	char reason[1024] = "";

	(void)state;
	if (!brokers)
		skip();
	scenario_init(&scenario, "crashloop", 1, 1);
	produce_tasks(&scenario, "crash", 1, "standard");
	assert_int_equal(crash_loop(&scenario, "collected:crash", 2, reason, sizeof(reason)),
			 TB_DLQ_POISON);
	assert_non_null(strstr(reason, "its worker crashed 2 times running it"));
	assert_non_null(strstr(reason, "in phase collected"));
	scenario_init(&agent, "crashagent", 1, 1);
	produce_tasks(&agent, "crash", 1, "standard");
	assert_int_equal(crash_loop(&agent, "running:crash", 2, reason, sizeof(reason)),
			 TB_DLQ_POISON);
	assert_non_null(strstr(reason, "in phase running"));
	scenario_init(&killed, "crashrun", 1, 1);
	produce_tasks(&killed, "crash", 1, "fragile");
	assert_int_equal(crash_loop(&killed, "collected", 2, reason, sizeof(reason)),
			 TB_DLQ_MAX_ATTEMPTS);
	assert_non_null(strstr(reason, "its worker died 2 times while running it "
				       "(max_worker_deaths 2)"));
}

/* A healthy task (its agent sleeps 7 s) whose worker is killed from
 * outside four times while it runs, each time later in its run: four
 * deaths, more than its 3 attempts, and it still runs to the end on the
 * defaults (and a usage event a second), once. Each killed attempt whose
 * agent ran a second or more left what it used so far in its usage
 * events. */
static void test_replay__a_task_outlives_its_workers_deaths(void **state)
{
	static const useconds_t after[] = { 2500, 4000, 5500, 7000 }; /* ms into a worker */
	static scenario_t scenario;
	scenario_t *sc = &scenario;
	char url[200];

	(void)state;
	if (!brokers)
		skip();
	scenario_init(sc, "outlives", 1, 1);
	snprintf(url, sizeof(url), "file://%s/slow", root);
	snprintf(sc->ids[sc->n], sizeof(sc->ids[0]), "outlives-%d", getpid());
	produce_task_at(sc, sc->ids[sc->n], url, slow_commit, "metered");
	sc->n++;
	sc->extra--; /* one of the scenario's tasks (sc->ids), not an extra message */
	for (size_t k = 0; k < sizeof(after) / sizeof(after[0]); k++) {
		pid_t w = start_worker(sc, 0, NULL);
		usleep(after[k] * 1000);
		kill(w, SIGKILL);
		reap(w, NULL, 0);
		assert_int_equal(count_done(sc), 0); /* killed before its agent ended */
	}
	finish_all(sc, 180);
	check(sc);
	static task_seen_t seen[MAX_TASKS];
	int partial = 0;
	memset(seen, 0, sizeof(seen));
	read_events(sc, seen);
	for (int i = 0; i < seen[0].n; i++) {
		const attempt_seen_t *a = &seen[0].a[i];
		if (a->result_seq >= 0 || !a->usages)
			continue;
		/* the figures to its last usage event: at least the second
		 * of the agent's run, the agent's CPU among them */
		if (a->usage_wall_ms < 1000 || !a->usage_agent)
			fail_msg("attempt %llu's last usage: wall %lld ms, agent CPU %s",
				 (unsigned long long)a->attempt, (long long)a->usage_wall_ms,
				 a->usage_agent ? "yes" : "no");
		partial++;
	}
	/* the later kills come 3 s and more into the agent's run */
	if (partial < 2)
		fail_msg("%d killed attempts left usage events, want 2 or more", partial);
}

/*
 * deploy/local/services @p action @p name (the services this suite runs).
 * The services it starts must not hold our descriptors (ctest's output
 * pipes would never close): they get none but /dev/null.
 */
static void services(const char *action, const char *name)
{
	char cmd[512];
	int status;

	snprintf(cmd, sizeof(cmd), "%s/deploy/local/services %s %s", TB_SOURCE_DIR, action, name);
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
			_exit(126);
		close_range(3, ~0u, 0);
		setenv("TB_KEEP_DATA", "1", 1); /* a restart, not a fresh service */
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("%s failed (status %d)", cmd, status);
}

/*
 * Kafka stopped for 5 s and started, Redis restarted, the S3 server down
 * for 10 s, each while tasks run: nothing is lost or run twice, and the
 * outages do not spend the tasks' attempts (runtime "standard": 3).
 */
static void test_replay__services_down_mid_batch(void **state)
{
	static const struct {
		const char *name;
		unsigned seconds;
	} outages[] = { { "kafka", 5 }, { "redis", 3 }, { "s3", 10 } };
	static scenario_t scenario;
	scenario_t *sc = &scenario;
	char stem[32];

	(void)state;
	if (!brokers)
		skip();
	scenario_init(sc, "outages", 1, 1);
	pid_t w = start_worker(sc, 0, NULL);
	for (size_t i = 0; i < sizeof(outages) / sizeof(outages[0]); i++) {
		snprintf(stem, sizeof(stem), "during-%s", outages[i].name);
		produce_tasks(sc, stem, 16, "standard");
		sleep(2); /* tasks in flight */
		printf("outage: %s down for %u s with %d of %d tasks done\n", outages[i].name,
		       outages[i].seconds, count_done(sc), sc->n);
		fflush(stdout);
		services("stop", outages[i].name);
		sleep(outages[i].seconds);
		services("start --reuse", outages[i].name);
		assert_int_equal(reap(w, NULL, WNOHANG), 0); /* the worker lives on */
	}
	run_until_done(sc, &w, 1, 300);
	check(sc);
}

/*
 * Three workers in one group (dynamic membership), started and stopped
 * during a batch: one stops cleanly and comes back, one is killed and
 * comes back. Every rebalance hands partitions over with tasks in flight.
 */
static void test_replay__rebalances_during_a_batch(void **state)
{
	static scenario_t scenario;
	scenario_t *sc = &scenario;
	pid_t w[MAX_WORKERS];
	int status;

	(void)state;
	if (!brokers)
		skip();
	scenario_init(sc, "fleet", 3, 0);
	produce_tasks(sc, "fleet", 120, "killable");
	w[0] = start_worker(sc, 0, NULL);
	w[1] = start_worker(sc, 1, NULL);
	sleep(4);
	w[2] = start_worker(sc, 2, NULL); /* a third joins */
	sleep(4);
	printf("fleet: %d of %d done; worker 1 stops\n", count_done(sc), sc->n);
	kill(w[0], SIGTERM); /* leaves: its running tasks finish first */
	status = wait_exit(w[0], 150);
	assert_true(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	sleep(2);
	w[0] = start_worker(sc, 0, NULL); /* and comes back */
	sleep(4);
	printf("fleet: %d of %d done; worker 2 is killed\n", count_done(sc), sc->n);
	kill(w[1], SIGKILL);
	reap(w[1], NULL, 0);
	sleep(2);
	w[1] = start_worker(sc, 1, NULL);
	run_until_done(sc, w, 3, 300);
	check(sc);
}

/* The Kafka consumer fails for good mid-batch (fenced): the worker joins
 * the group again with a new one and finishes the batch. */
static void test_replay__a_failed_consumer_is_replaced(void **state)
{
	static scenario_t scenario;
	scenario_t *sc = &scenario;
	char cmd[400];

	(void)state;
	if (!brokers)
		skip();
	scenario_init(sc, "rejoin", 1, 1);
	produce_tasks(sc, "rejoin", 8, "standard");
	pid_t w = start_worker(sc, 0, "consumer-fatal@3");
	run_until_done(sc, &w, 1, 180);
	snprintf(cmd, sizeof(cmd), "grep -q 'joining the group again' %.300s", sc->log);
	assert_int_equal(system(cmd), 0);
	check(sc);
}

/*
 * The worker issue's batch: 50 tasks over 4 partitions and 4 slots, mixed
 * with every kind of bad input. The tasks all complete; each bad input
 * ends with a clear reason in the DLQ, or in the task's record.
 */
static void test_replay__a_batch_with_every_kind_of_bad_input(void **state)
{
	static scenario_t scenario;
	scenario_t *sc = &scenario;
	char url[200], id[6][64];
	static dlq_seen_t dlq[32];

	(void)state;
	if (!brokers)
		skip();
	sc->slots = 4;
	scenario_init(sc, "mixed", 1, 1);
	produce_tasks(sc, "good", 25, "standard");
	/* not MessagePack; MessagePack that is not a task */
	produce_raw(sc, "bad-bytes", "\xc1\xc1", 2);
	produce_raw(sc, "bad-schema", "\x82\xa6schema\xa4task\xa1v\x01", 16);
	/* garbage near the broker's size limit: its DLQ record must fit too */
	static char huge[1040000];
	memset(huge, 0xc1, sizeof(huge));
	produce_raw(sc, "bad-huge", huge, sizeof(huge));
	for (int i = 0; i < 6; i++)
		snprintf(id[i], sizeof(id[i]), "bad-%d-%d", i, getpid());
	snprintf(url, sizeof(url), "file://%s/no-such-repository", root);
	produce_task_at(sc, id[0], url, commit, "standard"); /* unknown recipe URL */
	snprintf(url, sizeof(url), "file://%s", repo);
	produce_task_at(sc, id[1], url, "0123456789abcdef0123456789abcdef01234567",
			"standard"); /* commit */
	snprintf(url, sizeof(url), "file://%s/bare", root);
	produce_task_at(sc, id[2], url, bare_commit, "standard"); /* no taskbox.json */
	snprintf(url, sizeof(url), "file://%s/misbehave", root);
	produce_task_at(sc, id[3], url, misbehave_commit,
			"standard"); /* crash, garbage, hung judge */
	snprintf(url, sizeof(url), "file://%s", repo);
	produce_task_at(sc, id[4], url, commit, "later"); /* a runtime not there yet */
	produce_tasks(sc, "good-more", 25, "standard");
	pid_t w = start_worker(sc, 0, NULL);
	run_until_done(sc, &w, 1, 300);
	check(sc);

	int n = read_dlq(sc, dlq, 32), malformed = 0;
	for (int i = 0; i < n; i++) {
		printf("dlq %-24s %-12s %s\n", dlq[i].id[0] ? dlq[i].id : "(no id)",
		       tb_dlq_causes[dlq[i].cause], dlq[i].reason);
		malformed += dlq[i].cause == TB_DLQ_MALFORMED;
	}
	assert_int_equal(malformed, 3);
	assert_int_equal(n, 7);
	const dlq_seen_t *d = find_dlq(dlq, n, "bad-bytes");
	assert_non_null(strstr(d->reason, "not a MessagePack map"));
	d = find_dlq(dlq, n, "bad-schema");
	assert_non_null(strstr(d->reason, "required but missing"));
	d = find_dlq(dlq, n, "bad-huge");
	assert_non_null(strstr(d->reason, "not a MessagePack map"));
	assert_int_equal(d->original_len, TB_DLQ_ORIGINAL_MAX);
	d = find_dlq(dlq, n, id[0]);
	assert_int_equal(d->cause, TB_DLQ_POISON);
	assert_non_null(strstr(d->reason, "no such repository"));
	d = find_dlq(dlq, n, id[1]);
	assert_int_equal(d->cause, TB_DLQ_POISON);
	assert_non_null(strstr(d->reason, "not found"));
	d = find_dlq(dlq, n, id[2]);
	assert_int_equal(d->cause, TB_DLQ_POISON);
	assert_non_null(strstr(d->reason, "taskbox.json"));

	/* The misbehaving agent is a recorded failure, its judges' verdicts
	 * say what went wrong. */
	redisContext *c = redis();
	char v[700];
	unsigned long long att = 0;
	int off = 0;
	done_marker(c, sc, id[3], v, sizeof(v));
	redisFree(c);
	assert_true(sscanf(v, "%llu %n", &att, &off) == 1 && v[off]);
	tb_store_config_t cfg = { 0 };
	tb_store_t *st;
	tb_error_t err;
	char surl[128], *bytes;
	size_t len;
	tb_manifest_t m;
	snprintf(surl, sizeof(surl), "s3://%s/runs", bucket);
	cfg.url = surl, cfg.endpoint = (char *)s3_endpoint;
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	assert_int_equal(tb_store_open(&st, &cfg, &err), 0);
	assert_int_equal(tb_store_get_bytes(st, v + off, 1 << 20, &bytes, &len, &err), 0);
	tb_store_close(st);
	assert_int_equal(tb_msg_decode(&tb_schema_manifest, &m, bytes, len, &err), 0);
	free(bytes);
	printf("misbehaving agent: %s: %s\n", tb_outcomes[m.outcome], m.reason ? m.reason : "");
	assert_int_not_equal(m.outcome, TB_OUTCOME_SUCCEEDED);
	assert_int_equal(m.verdicts.n, 2);
	for (size_t i = 0; i < m.verdicts.n; i++)
		assert_int_equal(((tb_verdict_ref_t *)m.verdicts.items)[i].outcome,
				 TB_VERDICT_ERROR);
	tb_msg_free(&tb_schema_manifest, &m);

	/* The operator adds the missing runtime and sends the task back. */
	d = find_dlq(dlq, n, id[4]);
	assert_int_equal(d->cause, TB_DLQ_POISON);
	assert_non_null(strstr(d->reason, "unknown runtime 'later'"));
	char cmd[4096], line[600];
	int listed = 0;
	snprintf(cmd, sizeof(cmd), "%s dlq list --config %.200s", TB_TASKBOX, sc->config[0]);
	FILE *f = popen(cmd, "r");
	while (f && fgets(line, sizeof(line), f))
		listed += strstr(line, id[4]) && strstr(line, "unknown runtime");
	assert_int_equal(pclose(f), 0);
	assert_int_equal(listed, 1);
	snprintf(cmd, sizeof(cmd),
		 "cp %s/standard.json %s/later.json && "
		 "sed -i 's/standard/later/' %s/later.json && "
		 "%s dlq send --config %.200s %d:%lld",
		 runtimes, runtimes, runtimes, TB_TASKBOX, sc->config[0], (int)d->partition,
		 (long long)d->offset);
	assert_int_equal(system(cmd), 0);
	/* sent back already: the ledger holds it dead no more */
	snprintf(cmd, sizeof(cmd), "%s dlq send --config %.200s %d:%lld 2>/dev/null", TB_TASKBOX,
		 sc->config[0], (int)d->partition, (long long)d->offset);
	assert_int_not_equal(system(cmd), 0);
	const dlq_seen_t *bad = find_dlq(dlq, n, "bad-bytes");
	snprintf(cmd, sizeof(cmd), "%s dlq send --config %.200s %d:%lld 2>/dev/null", TB_TASKBOX,
		 sc->config[0], (int)bad->partition, (long long)bad->offset);
	assert_int_not_equal(system(cmd), 0); /* nothing to send back */
	snprintf(sc->ids[sc->n++], sizeof(sc->ids[0]), "%s", id[4]);
	w = start_worker(sc, 0, NULL);
	run_until_done(sc, &w, 1, 300);
	check(sc); /* the revived task is done, its record whole */
}

/*
 * Leases hold across heartbeats: each slow task (7 s, over two lease
 * times) is delivered twice, under two keys, so both workers of the group
 * may take it at once. The worker holding the lease renews it while the
 * agent runs; the other waits and then finds it done. Without renewals the
 * lease would lapse mid-run and the task run twice at once.
 */
static void test_replay__a_lease_outlives_a_long_run(void **state)
{
	static scenario_t scenario;
	scenario_t *sc = &scenario;
	char url[200], key[80];
	pid_t w[2];
	tb_error_t err;

	(void)state;
	if (!brokers)
		skip();
	scenario_init(sc, "lease", 2, 0);
	snprintf(url, sizeof(url), "file://%s/slow", root);
	w[0] = start_worker(sc, 0, NULL);
	w[1] = start_worker(sc, 1, NULL);
	sleep(4); /* both in the group */
	for (int i = 0; i < 4; i++) {
		char *id = sc->ids[sc->n++];
		tb_task_t t = { 0 };
		msgpack_sbuffer sb;
		snprintf(id, sizeof(sc->ids[0]), "slow-%d-%d", getpid(), i);
		t.id = id, t.kind = TB_TASK_ONE_SHOT, t.recipe.url = url;
		t.recipe.commit = slow_commit, t.prompt = (char *)"hello?";
		t.runtime = (char *)"standard", t.submitted_at = 1;
		msgpack_sbuffer_init(&sb);
		assert_int_equal(tb_msg_encode(&sb, &tb_schema_task, &t, &err), 0);
		for (int copy = 0; copy < 2; copy++) { /* other keys, other partitions */
			snprintf(key, sizeof(key), "%s-%c", id, 'a' + copy);
			produce_raw(sc, key, sb.data, sb.size);
		}
		msgpack_sbuffer_destroy(&sb);
		sc->extra--; /* one of the two is the task's own message */
	}
	run_until_done(sc, w, 2, 300);
	check(sc);
}

/* @p sb's bytes to @p partition of @p topic (RD_KAFKA_PARTITION_UA: the
 * key's), keyed @p key. */
static int produce_to(rd_kafka_t *p, const char *topic, int32_t partition, const char *key,
		      const msgpack_sbuffer *sb)
{
	return rd_kafka_producev(p, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
				 RD_KAFKA_V_KEY(key, strlen(key)),
				 RD_KAFKA_V_VALUE(sb->data, sb->size),
				 RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
}

/* Produces interactive task @p id (prompt "first") and, on its key,
 * follow-ups @p from .. @p to (2 "second", 3 "third", 4 and later: end;
 * numbered from 1): counted as extra messages. */
static void produce_session_at(scenario_t *sc, const char *id, int32_t partition, int with_task,
			       int from, int to)
{
	static const char *const texts[] = { "second", "third" };
	char url[200];
	tb_error_t err;
	rd_kafka_t *p;
	msgpack_sbuffer sb;

	snprintf(url, sizeof(url), "file://%s/chat", root);
	assert_int_equal(tb_kafka_producer_new(&p, brokers, NULL, &err), 0);
	msgpack_sbuffer_init(&sb);
	if (with_task) {
		tb_task_t t = { 0 };
		t.id = (char *)id, t.kind = TB_TASK_INTERACTIVE, t.recipe.url = url;
		t.recipe.commit = chat_commit, t.prompt = (char *)"first";
		t.runtime = (char *)"standard", t.submitted_at = 1;
		assert_int_equal(tb_msg_encode(&sb, &tb_schema_task, &t, &err), 0);
		assert_int_equal(produce_to(p, sc->tasks, partition, id, &sb), 0);
	}
	for (int k = from; k <= to; k++) { /* the same key: after the task, in order */
		tb_followup_t f = { 0 };
		f.task_id = (char *)id, f.seq = (uint64_t)k, f.sent_at = 1;
		f.kind = k <= 2 ? TB_FOLLOWUP_PROMPT : TB_FOLLOWUP_END;
		f.text = k <= 2 ? (char *)texts[k - 1] : NULL;
		msgpack_sbuffer_clear(&sb);
		assert_int_equal(tb_msg_encode(&sb, &tb_schema_followup, &f, &err), 0);
		assert_int_equal(produce_to(p, sc->tasks, partition, id, &sb), 0);
		sc->extra++;
	}
	msgpack_sbuffer_destroy(&sb);
	assert_int_equal(rd_kafka_flush(p, 30000), 0);
	rd_kafka_destroy(p);
}

static void produce_session(scenario_t *sc, const char *id, int with_task, int from, int to)
{
	produce_session_at(sc, id, RD_KAFKA_PARTITION_UA, with_task, from, to);
}

/* Each task's recorded attempt holds its whole session: three turns,
 * every follow-up, judged over it all. Returns how many were replayed
 * (recorded by an attempt after the first). */
static int check_sessions(const scenario_t *sc)
{
	tb_store_config_t cfg = { 0 };
	tb_error_t err;
	tb_store_t *s;
	char url[128];
	int replayed = 0;

	snprintf(url, sizeof(url), "s3://%s/runs", bucket);
	cfg.url = url, cfg.endpoint = (char *)s3_endpoint;
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	assert_int_equal(tb_store_open(&s, &cfg, &err), 0);
	redisContext *c = redis();
	for (int i = 0; i < sc->n; i++) {
		char value[600], *bytes;
		size_t len;
		tb_manifest_t m;
		done_marker(c, sc, sc->ids[i], value, sizeof(value));
		const char *key = strchr(value, ' ');
		assert_non_null(key);
		replayed += strtoull(value, NULL, 10) > 1;
		assert_int_equal(tb_store_get_bytes(s, key + 1, 1 << 20, &bytes, &len, &err), 0);
		assert_int_equal(tb_msg_decode(&tb_schema_manifest, &m, bytes, len, &err), 0);
		free(bytes);
		assert_int_equal(m.outcome, TB_OUTCOME_SUCCEEDED);
		assert_int_equal(m.turns, 3);
		assert_int_equal(m.followups, 3);
		assert_int_equal(m.verdicts.n, 1);
		assert_int_equal(((tb_verdict_ref_t *)m.verdicts.items)[0].outcome,
				 TB_VERDICT_PASS);
		tb_msg_free(&tb_schema_manifest, &m);
	}
	redisFree(c);
	tb_store_close(s);
	return replayed;
}

/* A session whose partition moves to another worker (its worker stopped
 * while the session idles): the new owner replays it from the first
 * prompt, and the follow-ups sent after the move reach it there. */
static void test_replay__a_session_moves_with_its_partition(void **state)
{
	static scenario_t scenario;
	scenario_t *sc = &scenario;
	pid_t w[2];

	(void)state;
	if (!brokers)
		skip();
	sc->judges = 1; /* the chat recipe's */
	scenario_init(sc, "moved", 2, 0);
	char *id = sc->ids[sc->n++];
	snprintf(id, sizeof(sc->ids[0]), "moved-%d", getpid());
	w[0] = start_worker(sc, 0, NULL);
	produce_session(sc, id, 1, 1, 1);
	sleep(8); /* turns 1 and 2 on worker 1, then idle */
	w[1] = start_worker(sc, 1, NULL);
	sleep(4);
	kill(w[0], SIGTERM); /* its partitions, the session's too, move */
	int status = wait_exit(w[0], 60);
	if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		show_log(sc);
		fail_msg("worker 1 did not stop cleanly with a session idle (status %d)", status);
	}
	produce_session(sc, id, 0, 2, 3); /* after the move */
	run_until_done(sc, &w[1], 1, 120);
	check(sc);
	assert_int_equal(check_sessions(sc), 1);
	assert_true(
	    count_lines_with(sc->log, "the session stops, to go on at the partition's owner") >= 1);
}

/*
 * A fleet of one grows to two while four sessions idle, one on each of
 * the four partitions: the two partitions that stay with the first
 * worker keep their sessions running (not replayed: attempt 1), the two
 * that move are replayed by the second worker. With @p assignor NULL the
 * default, cooperative-sticky, revokes only what moves; with "range"
 * (eager) every partition is revoked and two come back, whose sessions
 * are adopted. Before either, all four were stopped and replayed.
 */
static void sessions_stay_when_the_fleet_grows(const char *name, const char *assignor)
{
	static scenario_t scenario;
	scenario_t *sc = &scenario;
	pid_t w[2];

	if (!brokers)
		skip();
	sc->judges = 1; /* the chat recipe's */
	sc->slots = 4;
	sc->assignor = assignor;
	scenario_init(sc, name, 2, 0);
	for (int p = 0; p < 4; p++) {
		char *id = sc->ids[sc->n++];
		snprintf(id, sizeof(sc->ids[0]), "%s-%d-p%d", name, getpid(), p);
		produce_session_at(sc, id, p, 1, 1, 1);
	}
	w[0] = start_worker(sc, 0, NULL);
	sleep(15); /* turns 1 and 2 of all four on worker 1, then idle */
	w[1] = start_worker(sc, 1, NULL);
	sleep(10); /* the rebalance: two partitions move to worker 2 */
	for (int p = 0; p < 4; p++)
		produce_session_at(sc, sc->ids[p], p, 0, 2, 3);
	run_until_done(sc, w, 2, 180);
	check(sc);
	int replayed = check_sessions(sc);
	int adopted = count_lines_with(sc->log, "its partition came back");
	printf("  %s: %d of %d sessions replayed after the fleet grew, %d adopted\n", name,
	       replayed, sc->n, adopted);
	if (replayed != 2)
		show_log(sc);
	assert_int_equal(replayed, 2);
	assert_int_equal(adopted, assignor ? 2 : 0);
}

static void test_replay__sessions_stay_when_the_fleet_grows(void **state)
{
	(void)state;
	sessions_stay_when_the_fleet_grows("grow", NULL);
}

static void test_replay__sessions_come_back_with_an_eager_assignor(void **state)
{
	(void)state;
	sessions_stay_when_the_fleet_grows("grow-eager", "range");
}

/* Interactive sessions, the worker killed as turn two begins: every
 * session is replayed from its first prompt, as a new attempt, with all
 * its follow-ups, and each ends with its three turns recorded. */
static void test_replay__a_session_killed_in_turn_two_is_replayed(void **state)
{
	static scenario_t scenario;
	scenario_t *sc = &scenario;

	(void)state;
	if (!brokers)
		skip();
	sc->judges = 1; /* the chat recipe's */
	scenario_init(sc, "session", 1, 1);
	for (int i = 0; i < 3; i++) {
		char *id = sc->ids[sc->n++];
		snprintf(id, sizeof(sc->ids[0]), "session-%d-%d", getpid(), i);
		produce_session(sc, id, 1, 1, 3);
	}
	pid_t w = start_worker(sc, 0, "turn-started");
	int status = wait_exit(w, 120);
	if (status < 0 || !WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
		if (status < 0) {
			kill(w, SIGKILL);
			reap(w, &status, 0);
		}
		show_log(sc);
		fail_msg("the worker did not die as turn two began (status %d)", status);
	}
	finish_all(sc, 180);
	check(sc);
	int replayed = check_sessions(sc);
	printf("  sessions: %d of %d replayed after the kill, each with 3 turns\n", replayed,
	       sc->n);
	assert_true(replayed >= 1);
}

/* The lazy recipe, and its input (@p size random bytes, with its block
 * list) in the store at @p key: the SHA-256 of the input into @p sha, the
 * recipe's commit into @p at. Its agent writes the SHA-256 of what it
 * read of /inputs/big.bin; its two judges pass only if that is @p sha. */
static void make_lazy_recipe(const char *key, size_t size, char sha[65], char at[64])
{
	tb_store_config_t cfg = { 0 };
	char path[300], url[128];
	tb_blocks_t b;
	tb_store_t *s;
	tb_error_t err;
	uint64_t x = 0x9E3779B97F4A7C15ull;

	snprintf(path, sizeof(path), "%s/lazy-input", root);
	FILE *f = fopen(path, "we");
	assert_non_null(f);
	for (size_t i = 0; i < size; i += 8) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		assert_int_equal(fwrite(&x, 1, 8, f), 8);
	}
	fclose(f);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(tb_blocks_of_fd(fd, "big", &b, sha, &err), 0);
	close(fd);
	snprintf(url, sizeof(url), "s3://%s/runs", bucket);
	cfg.url = url, cfg.endpoint = (char *)s3_endpoint;
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	assert_int_equal(tb_store_open(&s, &cfg, &err), 0);
	assert_int_equal(tb_store_put_file(s, key, path, NULL, &err), 0);
	char list[128];
	snprintf(list, sizeof(list), "blocks/%s", sha); /* by the content's SHA-256 */
	assert_int_equal(tb_store_put_bytes(s, list, b.sha, b.n * 32, NULL, &err), 0);
	tb_store_close(s);
	tb_blocks_free(&b);
	unlink(path);

	static const char agent[] =
	    "read -r p\n"
	    "sha256sum /inputs/big.bin | cut -c1-64 > /outputs/sum.txt\n"
	    "echo '{\"type\":\"message\",\"role\":\"assistant\",\"text\":\"read\"}' >&3\n";
	static const char recipe[] =
	    "{\"v\": 1, \"name\": \"lazy\", \"agent\": {\"command\": [\"/bin/sh\", "
	    "\"agent.sh\"]}, \"judges\": [{\"name\": \"one\", \"command\": [\"/bin/sh\", "
	    "\"judge.sh\"]}, {\"name\": \"two\", \"command\": [\"/bin/sh\", \"judge.sh\"]}]}\n";
	char cmd[512], judge[512];
	snprintf(cmd, sizeof(cmd), "rm -rf %s/lazy", root);
	assert_int_equal(system(cmd), 0);
	snprintf(judge, sizeof(judge),
		 "cat >/dev/null\nif [ \"$(cat /outputs/sum.txt)\" = %s ]; then "
		 "echo '{\"outcome\":\"pass\"}'; else echo '{\"outcome\":\"fail\"}'; "
		 "fi\n",
		 sha);
	snprintf(path, sizeof(path), "%s/lazy", root);
	assert_int_equal(tb_fixture_recipe(path, at, 64, "agent.sh", agent, "judge.sh", judge,
					   "taskbox.json", recipe, NULL),
			 0);
	snprintf(path, sizeof(path), "%s/lazy.json", runtimes);
	assert_non_null(f = fopen(path, "we"));
	fputs("{\"v\": 1, \"name\": \"lazy\", \"max_attempts\": 20, \"max_worker_deaths\": 20, "
	      "\"sandbox\": {\"lazy_inputs_mb\": 8}}\n",
	      f);
	fclose(f);
}

/* A task reading an input on demand, its worker killed in the middle of
 * the reads (its 12th block fetched): nothing is left mounted, and the
 * task, replayed, reads the input whole and right. */
static void test_replay__a_worker_killed_during_lazy_reads(void **state)
{
	static scenario_t scenario;
	scenario_t *sc = &scenario;
	char sha[65], at[64], url[200], key[96];
	const size_t size = 24u << 20;

	(void)state;
	if (!brokers || access("/dev/fuse", R_OK | W_OK) != 0)
		skip();
	scenario_init(sc, "lazy", 1, 1);
	snprintf(key, sizeof(key), "uploads/replay-lazy-%d", getpid());
	make_lazy_recipe(key, size, sha, at);
	snprintf(url, sizeof(url), "file://%s/lazy", root);
	char *id = sc->ids[sc->n++];
	snprintf(id, sizeof(sc->ids[0]), "lazy-%d", getpid());
	{
		tb_input_t in = { .name = "big.bin", .artifact = key, .sha256 = sha };
		tb_task_t t = { 0 };
		msgpack_sbuffer sb;
		tb_error_t err;
		t.id = id, t.kind = TB_TASK_ONE_SHOT, t.recipe.url = url, t.recipe.commit = at;
		t.prompt = (char *)"read it", t.runtime = (char *)"lazy", t.submitted_at = 1;
		t.inputs.n = 1, t.inputs.items = &in;
		msgpack_sbuffer_init(&sb);
		assert_int_equal(tb_msg_encode(&sb, &tb_schema_task, &t, &err), 0);
		produce_raw(sc, id, sb.data, sb.size);
		sc->extra--; /* the scenario's task, not an extra message */
		msgpack_sbuffer_destroy(&sb);
	}
	pid_t w = start_worker(sc, 0, "lazy-fetched@12");
	int status = wait_exit(w, 120);
	if (status < 0 || !WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
		if (status < 0) {
			kill(w, SIGKILL);
			reap(w, &status, 0);
		}
		show_log(sc);
		fail_msg("the worker did not die in the lazy reads (status %d)", status);
	}
	/* the file system was never mounted on the host: nothing to sweep */
	assert_int_equal(count_lines_with("/proc/self/mountinfo", "taskbox-inputs"), 0);
	finish_all(sc, 180);
	check(sc);
	/* the replay read every byte, each the content's */
	tb_store_config_t cfg = { 0 };
	char surl[128], v[700], out[200], *got = NULL;
	unsigned long long attempt = 0;
	tb_store_t *s;
	tb_error_t err;
	size_t len;
	redisContext *c = redis();
	done_marker(c, sc, id, v, sizeof(v));
	redisFree(c);
	assert_int_equal(sscanf(v, "%llu", &attempt), 1);
	assert_true(attempt >= 2);
	snprintf(surl, sizeof(surl), "s3://%s/runs", bucket);
	cfg.url = surl, cfg.endpoint = (char *)s3_endpoint;
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	assert_int_equal(tb_store_open(&s, &cfg, &err), 0);
	snprintf(out, sizeof(out), "tasks/%s/%llu/outputs/sum.txt", id, attempt);
	if (tb_store_get_bytes(s, out, 200, &got, &len, &err) != 0)
		fail_msg("%s: %s", out, err.msg);
	tb_store_close(s);
	assert_true(len >= 64);
	assert_memory_equal(got, sha, 64);
	free(got);
	printf("  the input read whole by attempt %llu, after a worker killed mid-read\n", attempt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_replay__kill_at_every_phase, stop_leftovers),
		cmocka_unit_test_teardown(test_replay__kill_while_an_image_is_made, stop_leftovers),
		cmocka_unit_test_teardown(test_replay__random_kills_during_a_batch, stop_leftovers),
		cmocka_unit_test_teardown(test_replay__outside_kills_never_convict_a_healthy_task,
					  stop_leftovers),
		cmocka_unit_test_teardown(test_replay__a_task_outlives_its_workers_deaths,
					  stop_leftovers),
		cmocka_unit_test_teardown(
		    test_replay__a_task_that_kills_its_worker_is_dead_lettered, stop_leftovers),
		cmocka_unit_test_teardown(test_replay__services_down_mid_batch, stop_leftovers),
		cmocka_unit_test_teardown(test_replay__rebalances_during_a_batch, stop_leftovers),
		cmocka_unit_test_teardown(test_replay__a_failed_consumer_is_replaced,
					  stop_leftovers),
		cmocka_unit_test_teardown(test_replay__a_batch_with_every_kind_of_bad_input,
					  stop_leftovers),
		cmocka_unit_test_teardown(test_replay__a_lease_outlives_a_long_run, stop_leftovers),
		cmocka_unit_test_teardown(test_replay__a_worker_killed_during_lazy_reads,
					  stop_leftovers),
		cmocka_unit_test_teardown(test_replay__a_session_killed_in_turn_two_is_replayed,
					  stop_leftovers),
		cmocka_unit_test_teardown(test_replay__a_session_moves_with_its_partition,
					  stop_leftovers),
		cmocka_unit_test_teardown(test_replay__sessions_stay_when_the_fleet_grows,
					  stop_leftovers),
		cmocka_unit_test_teardown(test_replay__sessions_come_back_with_an_eager_assignor,
					  stop_leftovers),
	};
	if (getenv("TB_REPLAY_ONLY")) /* e.g. "*rebalances*" */
		cmocka_set_test_filter(getenv("TB_REPLAY_ONLY"));
	return cmocka_run_group_tests(tests, setup, teardown);
}
