/*
 * bench_worker.c: what the worker costs around a task, against the real
 * services tests/bench/run starts (Kafka, Redis, S3), with `taskbox worker`
 * processes of the optimised build. Suites (any of them, in one run):
 *
 *   task     per-task overhead, message produced -> offset committed, a
 *            trivial agent and one judge, with 1 slot (one task at a time)
 *            and 8 slots (waves of 8); the lifecycle phases' medians; the
 *            baseline is the same agent and judge run directly (fork+exec)
 *            throughput: 200 trivial tasks through one worker of 8 slots,
 *            tasks/s and CPU seconds per task (worker and sandboxes; each
 *            service); for both runs, the mean of each step inside the
 *            phases (the worker's taskbox_step_duration_seconds)
 *   events   events/s from one chatty task (100,000 events) and from 8 at
 *            once, stamped by the worker; baseline: this process producing
 *            the same number of same-sized messages to the same topic
 *   fleet    1, 2, 4 and 8 workers in one group on 8 partitions, sleep-
 *            bound agents (1 s), 2 slots each: throughput and its ratio to
 *            one; and the handover: a worker's SIGTERM to a task on its
 *            partitions done by the other worker
 *   memory   a worker's RSS idle, and per busy slot (8 sleeping agents)
 *   sessions idle interactive sessions on one worker of as many slots
 *            (--sessions N, 1000 by default): the host's memory per
 *            session all in (MemTotal - MemAvailable), the worker's RSS
 *            per session, and the resume: a follow-up produced -> its
 *            frozen session's agent answering it (the agent's event's
 *            stamp), one session at a time, for 50 of them
 *
 * Before task and events, the services are warmed (see warm_services).
 *
 * Usage: bench_worker --taskbox PATH [--json] [-n N] SUITE...
 * (TB_BENCH_RUNTIME=FILE: the runtime the workers run tasks under, for a
 * taskbox of another version; the example's by default)
 * (N: tasks in the 1-slot run and in the 8-slot waves; 300 by default: a
 * p99 of 100 samples is the second worst, and moved 40-170 ms between runs
 * with one stall of the shared machine more or less)
 * Prints one line per figure: suite, name, unit, median, p99, baseline,
 * ratio. Timing figures are for reading, never for asserting.
 */
#include "bench_util.h"
#include "fixture_repo.h"
#include "follow.h"

#include "tb/config.h"
#include "tb/json_mpack.h"
#include "tb/kafka.h"
#include "tb/schema_event.h"
#include "tb/schema_followup.h"
#include "tb/schema_task.h"
#include "tb/store.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_TASKS 512
/* One bucket for every run, each run's objects under its own prefix
 * (bench-<run>-<pid>-<time>, as its topics and ledger keys): a new bucket
 * is a new SeaweedFS collection, which takes volumes of a limited supply.
 * The objects stay (a few KiB per task). */
#define BUCKET "tb-bench"
#define MAX_WORKERS 8
#define CHATTY_EVENTS 100000

static const char *taskbox;
static char root[64] = "/tmp/tb-bench-XXXXXX";
static char trivial_url[160], chatty_url[160], sleepy_url[160], chat_url[160];
static char trivial_commit[64], chatty_commit[64], sleepy_commit[64], chat_commit[64];

/* ------------------------------------------------------------ output */

static char stamp[48]; /* this process's runs: pid and start time */

static int sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ set-up */

/* A recipe repository named @p name whose agent is the sh script @p agent,
 * with one judge that passes. */
static int recipe(const char *name, const char *agent, char *url, char *commit)
{
	char dir[200], manifest[512];

	snprintf(dir, sizeof(dir), "%s/%s", root, name);
	snprintf(manifest, sizeof(manifest),
		 "{\"v\": 1, \"name\": \"%s\", \"agent\": {\"command\": [\"/bin/sh\", "
		 "\"agent.sh\"]}, \"judges\": [{\"name\": \"ok\", \"command\": [\"/bin/sh\", "
		 "\"judge.sh\"]}]}\n",
		 name);
	if (tb_fixture_recipe(dir, commit, 64, "taskbox.json", manifest, "agent.sh", agent,
			      "judge.sh", "echo '{\"outcome\":\"pass\"}'\n", NULL) < 0)
		return -1;
	snprintf(url, 160, "file://%.150s", dir);
	return 0;
}

typedef struct run {
	char name[64];
	char tasks[96], events[96], dlq[96], group[96], prefix[96];
	char config[MAX_WORKERS][300];
	char log[300];
	tb_config_t cfg; /* worker 1's, for this process's clients */
	pid_t pids[MAX_WORKERS];
	int metrics_port[MAX_WORKERS]; /* each worker's metrics_listen */
	int nworkers;
	rd_kafka_t *producer, *events_c, *offsets_c;
	int np;
} run_t;

static int topics(const run_t *r)
{
	char errstr[256];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set(conf, "bootstrap.servers", getenv("TASKBOX_TEST_KAFKA"), errstr,
			  sizeof(errstr));
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	rd_kafka_NewTopic_t *t[3] = {
		rd_kafka_NewTopic_new(r->tasks, 8, 1, errstr, sizeof(errstr)),
		rd_kafka_NewTopic_new(r->events, 8, 1, errstr, sizeof(errstr)),
		rd_kafka_NewTopic_new(r->dlq, 1, 1, errstr, sizeof(errstr)),
	};
	rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
	rd_kafka_CreateTopics(rk, t, 3, NULL, q);
	rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
	int rc = ev && !rd_kafka_event_error(ev) ? 0 : -1;
	if (ev)
		rd_kafka_event_destroy(ev);
	for (int i = 0; i < 3; i++)
		rd_kafka_NewTopic_destroy(t[i]);
	rd_kafka_queue_destroy(q);
	rd_kafka_destroy(rk);
	return rc;
}

/* The topics of every run, deleted once all suites are done (deleting
 * them between timed runs would put the broker's cleanup inside the
 * next): each holds 8 partitions' logs and preallocated indexes, and a
 * broker that keeps every run's grows slower. */
#define MAX_RUNS 16
static char dead_topics[MAX_RUNS * 3][96];
static int ndead;

static void topics_done(const run_t *r)
{
	const char *t[3] = { r->tasks, r->events, r->dlq };
	for (int i = 0; i < 3 && ndead < MAX_RUNS * 3; i++)
		snprintf(dead_topics[ndead++], sizeof(dead_topics[0]), "%s", t[i]);
}

/* Deletes the topics topics_done() noted. Best effort: failures are only
 * reported. */
static void drop_topics(void)
{
	char errstr[256];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set(conf, "bootstrap.servers", getenv("TASKBOX_TEST_KAFKA"), errstr,
			  sizeof(errstr));
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (!rk) {
		rd_kafka_conf_destroy(conf);
		return;
	}
	rd_kafka_DeleteTopic_t *t[MAX_RUNS * 3];
	for (int i = 0; i < ndead; i++)
		t[i] = rd_kafka_DeleteTopic_new(dead_topics[i]);
	rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
	rd_kafka_DeleteTopics(rk, t, (size_t)ndead, NULL, q);
	rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
	const rd_kafka_DeleteTopics_result_t *res =
	    ev ? rd_kafka_event_DeleteTopics_result(ev) : NULL;
	if (!res || rd_kafka_event_error(ev)) {
		fprintf(stderr, "bench: deleting the runs' topics: %s\n",
			ev ? rd_kafka_event_error_string(ev) : "no answer in 30 s");
	} else {
		size_t n;
		const rd_kafka_topic_result_t **tr = rd_kafka_DeleteTopics_result_topics(res, &n);
		for (size_t i = 0; i < n; i++)
			if (rd_kafka_topic_result_error(tr[i]))
				fprintf(stderr, "bench: deleting topic %s: %s\n",
					rd_kafka_topic_result_name(tr[i]),
					rd_kafka_topic_result_error_string(tr[i]));
	}
	if (ev)
		rd_kafka_event_destroy(ev);
	rd_kafka_DeleteTopic_destroy_array(t, (size_t)ndead);
	rd_kafka_queue_destroy(q);
	rd_kafka_destroy(rk);
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque);

/* A producer that says where each task landed (its offset, for the
 * commit watch); no batching delay: latency is measured. */
static rd_kafka_t *producer_new(const char *brokers)
{
	char errstr[256];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof(errstr)) ||
	    rd_kafka_conf_set(conf, "linger.ms", "0", errstr, sizeof(errstr))) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
	return rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
}

/* The events consumer, once the new topic has leaders (10 s at most). */
static int follow_open(run_t *r, tb_error_t *err)
{
	int rc = -1;
	for (int i = 0; i < 20 && rc < 0; i++) {
		if ((rc = tb_follow_open(&r->cfg, TB_FOLLOW_END, &r->events_c, &r->np, err)) < 0)
			usleep(500000);
	}
	return rc;
}

static void run_free(run_t *r);

/*
 * The brokers' own record of commits (__consumer_offsets), read from its
 * end: each commit of the group arrives as the broker writes it, with no
 * request of the bench's. (Asking the group's committed offsets again as
 * soon as answered, as the bench did, kept the broker and this process
 * busy on the two cores the worker runs on, and slowed what it measured.)
 */
static int commits_open(run_t *r, tb_error_t *err)
{
	const rd_kafka_metadata_t *md = NULL;
	rd_kafka_topic_t *t;
	int rc = -1;

	if (tb_kafka_reader_new(&r->offsets_c, r->cfg.kafka.brokers, NULL, "bench-commits", err) <
	    0)
		return -1;
	t = rd_kafka_topic_new(r->offsets_c, "__consumer_offsets", NULL);
	if (t && rd_kafka_metadata(r->offsets_c, 0, t, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
	    md->topic_cnt == 1 && !md->topics[0].err && md->topics[0].partition_cnt > 0) {
		rd_kafka_topic_partition_list_t *l =
		    rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
		for (int p = 0; p < md->topics[0].partition_cnt; p++)
			rd_kafka_topic_partition_list_add(l, "__consumer_offsets", p)->offset =
			    RD_KAFKA_OFFSET_END;
		rc = rd_kafka_assign(r->offsets_c, l) == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : -1;
		rd_kafka_topic_partition_list_destroy(l);
	}
	if (md)
		rd_kafka_metadata_destroy(md);
	if (t)
		rd_kafka_topic_destroy(t);
	if (rc < 0)
		tb_error_set(err, TB_EIO, "cannot read __consumer_offsets");
	return rc;
}

/* The Kafka string (int16 length, bytes) at @p at in @p b is @p want:
 * then @p at moves past it. */
static int kafka_str_is(const unsigned char *b, size_t len, size_t *at, const char *want)
{
	if (*at + 2 > len)
		return 0;
	size_t n = (size_t)b[*at] << 8 | b[*at + 1];
	if (*at + 2 + n > len || n != strlen(want) || memcmp(b + *at + 2, want, n) != 0)
		return 0;
	*at += 2 + n;
	return 1;
}

/* Whether @p m records a commit of @p group on @p topic: an offset
 * commit's key (version 0 or 1: group, topic, partition) and value
 * (version, then the offset, in every version); @p part and @p off. */
static int commit_record(const rd_kafka_message_t *m, const char *group, const char *topic,
			 int *part, int64_t *off)
{
	const unsigned char *k = m->key, *v = m->payload;
	size_t at = 2;
	uint64_t o = 0;

	if (m->err || !k || !v || m->key_len < 2 || m->len < 10 || k[0] != 0 || k[1] > 1 ||
	    !kafka_str_is(k, m->key_len, &at, group) || !kafka_str_is(k, m->key_len, &at, topic) ||
	    at + 4 > m->key_len)
		return 0;
	*part = (int)((uint32_t)k[at] << 24 | (uint32_t)k[at + 1] << 16 | (uint32_t)k[at + 2] << 8 |
		      k[at + 3]);
	for (int i = 2; i < 10; i++)
		o = o << 8 | v[i];
	*off = (int64_t)o;
	return 1;
}

/* A loopback port nobody listens on now (the kernel's pick). */
static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* ------------------------------------------------------------ steps */

/* The steps inside the phases (worker's taskbox_step_duration_seconds,
 * and the sandbox's launch): sums and counts, read from a worker's
 * /metrics, so a run's means are the difference of two reads. */
static const char *const step_names[] = { "ledger_begin", "recipe",         "egress_start",
					  "store_record", "store_manifest", "events_delivered",
					  "done_marker",  "teardown",       "teardown_wait" };
#define NSTEPS (sizeof(step_names) / sizeof(step_names[0]))
typedef struct steps {
	double sum[NSTEPS + 1], count[NSTEPS + 1]; /* the last: the sandbox's launch */
} steps_t;

static size_t on_metrics(char *p, size_t size, size_t n, void *arg)
{
	FILE *f = arg;
	return fwrite(p, size, n, f);
}

/* A value "NAME VALUE" from Prometheus text @p text; 0 if absent. */
static double metric(const char *text, const char *name)
{
	size_t len = strlen(name);
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, name, len) && l[len] == ' ')
			return strtod(l + len + 1, NULL);
	return 0;
}

/* Worker @p k's steps so far. @return 0, or -1 (its /metrics unread) */
static int steps_read(const run_t *r, int k, steps_t *out)
{
	char url[64], name[128], *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	CURL *c = curl_easy_init();
	int ok = f && c;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/metrics", r->metrics_port[k]);
	if (ok) {
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_metrics);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
		curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
		ok = curl_easy_perform(c) == CURLE_OK;
	}
	if (c)
		curl_easy_cleanup(c);
	if (f)
		fclose(f);
	for (size_t i = 0; ok && i < NSTEPS; i++) {
		snprintf(name, sizeof(name), "taskbox_step_duration_seconds_sum{step=\"%s\"}",
			 step_names[i]);
		out->sum[i] = metric(text, name);
		snprintf(name, sizeof(name), "taskbox_step_duration_seconds_count{step=\"%s\"}",
			 step_names[i]);
		out->count[i] = metric(text, name);
	}
	if (ok) {
		out->sum[NSTEPS] = metric(text, "taskbox_sandbox_launch_seconds_sum");
		out->count[NSTEPS] = metric(text, "taskbox_sandbox_launch_seconds_count");
	}
	free(text);
	return ok ? 0 : -1;
}

/* One row a step: its mean between @p a and @p b (the histograms keep
 * sums, not samples: a mean, printed in the median's column). */
static void steps_rows(const char *label, const steps_t *a, const steps_t *b)
{
	char name[96];
	for (size_t i = 0; i <= NSTEPS; i++) {
		double n = b->count[i] - a->count[i];
		if (n <= 0)
			continue;
		double ms = 1000 * (b->sum[i] - a->sum[i]) / n;
		snprintf(name, sizeof(name), "  %s step %s (mean)", label,
			 i < NSTEPS ? step_names[i] : "sandbox_launch");
		tb_bench_row("task", name, "ms", ms, ms, NULL, 0);
	}
}

/* A run's topics, configuration and clients; workers start later. */
static int run_init(run_t *r, const char *name, int nworkers, int slots)
{
	tb_error_t err;

	memset(r, 0, sizeof(*r));
	snprintf(r->name, sizeof(r->name), "%s", name);
	snprintf(r->tasks, sizeof(r->tasks), "bench-%s-%s.tasks", name, stamp);
	snprintf(r->events, sizeof(r->events), "bench-%s-%s.events", name, stamp);
	snprintf(r->dlq, sizeof(r->dlq), "bench-%s-%s.dlq", name, stamp);
	snprintf(r->group, sizeof(r->group), "bench-%s-%s", name, stamp);
	snprintf(r->prefix, sizeof(r->prefix), "bench-%s-%s", name, stamp);
	snprintf(r->log, sizeof(r->log), "%s/%s.log", root, name);
	r->nworkers = nworkers;
	if (topics(r) < 0) {
		fprintf(stderr, "bench: cannot create the topics of %s\n", name);
		return -1;
	}
	for (int k = 0; k < nworkers; k++) {
		snprintf(r->config[k], sizeof(r->config[k]), "%s/%s-w%d.json", root, name, k + 1);
		r->metrics_port[k] = free_port();
		FILE *f = fopen(r->config[k], "w");
		if (!f || r->metrics_port[k] < 0) {
			if (f)
				fclose(f);
			run_free(r);
			return -1;
		}
		fprintf(f,
			"{\"v\": 1, \"worker_id\": \"%s-w%d\", \"slots\": %d, \"log_level\": "
			"\"warn\", \"metrics_listen\": \"127.0.0.1:%d\",\n"
			" \"kafka\": {\"brokers\": \"%s\", \"group\": \"%s\", \"tasks_topic\": "
			"\"%s\", \"events_topic\": \"%s\", \"dlq_topic\": \"%s\"},\n"
			" \"ledger\": {\"url\": \"%s\", \"prefix\": \"%s\"},\n"
			" \"store\": {\"url\": \"s3://" BUCKET "/%s\", \"endpoint\": \"%s\", "
			"\"region\": \"%s\"},\n"
			" \"runtimes_dir\": \"%s/runtimes\", \"work_dir\": \"%s/work\", "
			"\"cache_dir\": \"%s/cache\"}\n",
			r->prefix, k + 1, slots, r->metrics_port[k], getenv("TASKBOX_TEST_KAFKA"),
			r->group, r->tasks, r->events, r->dlq, getenv("TASKBOX_TEST_REDIS"),
			r->prefix, r->prefix, getenv("TASKBOX_TEST_S3_ENDPOINT"),
			getenv("TASKBOX_TEST_S3_REGION"), root, root, root);
		fclose(f);
	}
	if (tb_config_load(&r->cfg, r->config[0], &err) < 0 ||
	    (r->producer = producer_new(r->cfg.kafka.brokers)) == NULL ||
	    follow_open(r, &err) < 0 || commits_open(r, &err) < 0) {
		fprintf(stderr, "bench: %s\n", err.msg);
		run_free(r);
		return -1;
	}
	return 0;
}

static pid_t start_worker(run_t *r, int k)
{
	pid_t pid = fork();
	if (pid == 0) {
		if (!freopen(r->log, "a", stderr))
			_exit(126);
		execl(taskbox, "taskbox", "worker", "--config", r->config[k], (char *)NULL);
		_exit(127);
	}
	r->pids[k] = pid;
	return pid;
}

static void stop_workers(run_t *r)
{
	for (int k = 0; k < r->nworkers; k++)
		if (r->pids[k] > 0)
			kill(r->pids[k], SIGTERM);
	for (int k = 0; k < r->nworkers; k++)
		if (r->pids[k] > 0) {
			int status;
			for (int i = 0; i < 300 && waitpid(r->pids[k], &status, WNOHANG) == 0; i++)
				usleep(100000);
			if (kill(r->pids[k], 0) == 0) {
				kill(r->pids[k], SIGKILL);
				waitpid(r->pids[k], &status, 0);
			}
			r->pids[k] = 0;
		}
}

static void run_free(run_t *r)
{
	stop_workers(r);
	if (r->events_c) {
		rd_kafka_consumer_close(r->events_c);
		rd_kafka_destroy(r->events_c);
	}
	if (r->offsets_c) {
		rd_kafka_consumer_close(r->offsets_c);
		rd_kafka_destroy(r->offsets_c);
	}
	if (r->producer)
		rd_kafka_destroy(r->producer);
	if (r->tasks[0])
		topics_done(r);
	tb_config_free(&r->cfg);
}

/* ------------------------------------------------------------ traffic */

typedef struct sent {
	char id[64];
	double t0; /* mono ms at produce */
	int32_t partition;
	int64_t offset; /* -1 until delivered */
	double acked;   /* mono ms the acknowledged event was read, 0 before */
	double committed;
} sent_t;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	sent_t *s = m->_private;
	(void)rk, (void)opaque;
	if (s && !m->err) {
		s->partition = m->partition;
		s->offset = m->offset;
	}
}

/* Queues task @p s (its id set) of @p url at @p commit, to @p partition
 * (RD_KAFKA_PARTITION_UA: its key's). */
static int produce_task_to(run_t *r, sent_t *s, const char *url, const char *commit,
			   int32_t partition)
{
	tb_task_t t = { 0 };
	msgpack_sbuffer sb;
	tb_error_t err;

	t.id = s->id, t.kind = TB_TASK_ONE_SHOT, t.recipe.url = (char *)url;
	t.recipe.commit = (char *)commit, t.prompt = (char *)"go";
	t.runtime = (char *)"bench", t.submitted_at = tb_bench_wall_ms();
	msgpack_sbuffer_init(&sb);
	int rc = tb_msg_encode(&sb, &tb_schema_task, &t, &err);
	s->offset = -1;
	s->acked = s->committed = 0;
	s->t0 = tb_bench_mono_ms();
	if (rc == 0 &&
	    rd_kafka_producev(
		r->producer, RD_KAFKA_V_TOPIC(r->tasks), RD_KAFKA_V_PARTITION(partition),
		RD_KAFKA_V_KEY(s->id, strlen(s->id)), RD_KAFKA_V_VALUE(sb.data, sb.size),
		RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(s), RD_KAFKA_V_END))
		rc = -1;
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

static int produce_task(run_t *r, sent_t *s, const char *url, const char *commit)
{
	return produce_task_to(r, s, url, commit, RD_KAFKA_PARTITION_UA);
}

typedef struct phases {
	double ms[16][MAX_TASKS];
	int n[16];
} phases_t;

static const char *const phase_names[] = { "claimed",  "prepared",  "running",
					   "settled",  "collected", "judged",
					   "recorded", "torn-down", "acknowledged" };
#define NPHASES (sizeof(phase_names) / sizeof(phase_names[0]))

/* Reads events until every task of @p s is acknowledged (or @p secs
 * pass); notes phase durations into @p ph (may be NULL). */
/* Takes one event (waiting up to @p ms), noting phases and each task's
 * "acknowledged" event. @return how many tasks it acknowledged (0 or 1);
 * -1 when none came */
static int take_event(run_t *r, sent_t *s, int n, phases_t *ph, int ms)
{
	int got = 0;
	rd_kafka_poll(r->producer, 0);
	rd_kafka_message_t *m = rd_kafka_consumer_poll(r->events_c, ms);
	tb_event_t ev;
	tb_error_t err;
	if (!m)
		return -1;
	if (m->err || tb_msg_decode(&tb_schema_event, &ev, m->payload, m->len, &err) < 0) {
		rd_kafka_message_destroy(m);
		return 0;
	}
	double now = tb_bench_mono_ms();
	if (ev.type == TB_EV_PHASE) {
		json_t *p = NULL;
		if (tb_mpack_to_json(&p, ev.payload.data, ev.payload.len, &err) == 0) {
			const char *name = json_string_value(json_object_get(p, "phase"));
			double d = (double)json_integer_value(json_object_get(p, "duration_ms"));
			for (size_t k = 0; ph && name && k < NPHASES; k++)
				if (!strcmp(name, phase_names[k]) && ph->n[k] < MAX_TASKS)
					ph->ms[k][ph->n[k]++] = d;
			if (name && !strcmp(name, "acknowledged"))
				for (int i = 0; i < n; i++)
					if (!s[i].acked && !strcmp(s[i].id, ev.task_id)) {
						s[i].acked = now;
						got++;
					}
		}
		json_decref(p);
	}
	tb_msg_free(&tb_schema_event, &ev);
	rd_kafka_message_destroy(m);
	return got;
}

static int await_acks(run_t *r, sent_t *s, int n, phases_t *ph, int secs)
{
	int left = 0;
	for (int i = 0; i < n; i++)
		left += s[i].acked == 0;
	double until = tb_bench_mono_ms() + secs * 1000.0;
	while (left > 0 && tb_bench_mono_ms() < until) {
		int got = take_event(r, s, n, ph, 50);
		left -= got > 0 ? got : 0;
	}
	return left == 0 ? 0 : -1;
}

/* The commits written since last asked (waiting up to @p wait_ms for
 * the first), noting each task whose offset one passed. @return how
 * many it noted */
static int check_commits(run_t *r, sent_t *s, int n, int wait_ms)
{
	rd_kafka_message_t *m;
	int got = 0, part;
	int64_t off;

	for (; (m = rd_kafka_consumer_poll(r->offsets_c, wait_ms)); wait_ms = 0) {
		if (commit_record(m, r->group, r->tasks, &part, &off)) {
			double now = tb_bench_mono_ms();
			for (int i = 0; i < n; i++)
				if (!s[i].committed && s[i].offset >= 0 && s[i].partition == part &&
				    off > s[i].offset) {
					s[i].committed = now;
					got++;
				}
		}
		rd_kafka_message_destroy(m);
	}
	return got;
}

/* Each task's commit, seen as the broker writes it (within 1 ms), and
 * its events: both within @p secs. */
static int await_done(run_t *r, sent_t *s, int n, phases_t *ph, int secs)
{
	int acks = 0, commits = 0;
	for (int i = 0; i < n; i++) {
		acks += s[i].acked == 0;
		commits += s[i].committed == 0;
	}
	double until = tb_bench_mono_ms() + secs * 1000.0;
	while ((acks > 0 || commits > 0) && tb_bench_mono_ms() < until) {
		if (commits > 0)
			commits -= check_commits(r, s, n, acks > 0 ? 0 : 5);
		/* what events came meanwhile; waiting 1 ms for more while a
		 * commit is awaited too */
		for (int got;
		     acks > 0 && (got = take_event(r, s, n, ph, commits > 0 ? 1 : 50)) >= 0;)
			acks -= got;
	}
	return acks == 0 && commits == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ suites */

/* User + system CPU of @p pid and of its reaped children, in seconds. */
static double cpu_seconds(pid_t pid)
{
	char path[64], buf[2048];
	unsigned long long v[4] = { 0 };
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (f && fgets(buf, sizeof(buf), f)) {
		char *p = strrchr(buf, ')');
		if (p)
			sscanf(p + 2,
			       "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu",
			       &v[0], &v[1], &v[2], &v[3]);
	}
	if (f)
		fclose(f);
	return (double)(v[0] + v[1] + v[2] + v[3]) / (double)sysconf(_SC_CLK_TCK);
}

/* CPU seconds of the local services this machine also runs (Kafka, the
 * S3 server, Redis), found by their command lines. */
/* The services' processes, by a word of their command lines. */
static const char *const service_names[] = { "Kafka", "S3 server", "Redis" };
static const char *const service_words[] = { "kafka.Kafka", "weed", "redis-server" };
#define NSERVICES 3

/* CPU seconds of each service so far, into @p out; @return their sum. */
static double services_cpu_seconds(double out[NSERVICES])
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	double total = 0;

	for (int i = 0; i < NSERVICES; i++)
		out[i] = 0;
	while (d && (de = readdir(d))) {
		char path[300], cmd[4096];
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
		FILE *f = fopen(path, "r");
		size_t n = f ? fread(cmd, 1, sizeof(cmd) - 1, f) : 0;
		if (f)
			fclose(f);
		for (size_t i = 0; i < n; i++) /* arguments joined by spaces */
			cmd[i] = cmd[i] ? cmd[i] : ' ';
		cmd[n] = '\0';
		for (int i = 0; i < NSERVICES; i++)
			if (strstr(cmd, service_words[i])) {
				double c = cpu_seconds((pid_t)strtol(de->d_name, NULL, 10));
				out[i] += c;
				total += c;
				break;
			}
	}
	if (d)
		closedir(d);
	return total;
}

/* Busy and total CPU time of the whole machine so far (/proc/stat). */
static void machine_cpu(double *busy, double *all)
{
	unsigned long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	if (f && fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
			&v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
		*all = (double)(v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7]);
		*busy = *all - (double)(v[3] + v[4]); /* minus idle and iowait */
	} else {
		*busy = *all = 0;
	}
	if (f)
		fclose(f);
}

/* The trivial agent and its judge, run directly: the floor. */
static double direct_run(int n, double *p99)
{
	double t[256];
	char cmd[512];
	snprintf(cmd, sizeof(cmd),
		 "cd %s/trivial && echo '{\"type\":\"prompt\",\"turn\":1,\"text\":\"go\"}' | "
		 "/bin/sh agent.sh 3>/dev/null && /bin/sh judge.sh >/dev/null",
		 root);
	if (n > 256)
		n = 256;
	for (int i = 0; i < n; i++) {
		double t0 = tb_bench_mono_ms();
		if (sh("%s", cmd) < 0)
			return 0;
		t[i] = tb_bench_mono_ms() - t0;
	}
	double median;
	tb_bench_stats(t, n, &median, p99);
	return median;
}

/* Kafka's broker runs on the JVM: just started, it interprets its hot
 * paths until the JIT has compiled them, and every figure through it is
 * slower (measured here against a broker restarted a minute before: 1-slot
 * overhead 24-31 ms instead of 15-18, throughput 64-85 tasks/s instead of
 * 103-113, and twice the services' CPU per task). A broker in service is
 * warm, so before the suites that go through it, batches of WARM_BATCH
 * trivial tasks run untimed until two in a row agree within 10 % (at most
 * WARM_BATCHES batches, none started after WARM_SECONDS). The rows show
 * the first batch's rate (which also pays for the new worker's start) and
 * the last one's, so a cold start is seen, not hidden. */
#define WARM_BATCH 200
#define WARM_BATCHES 8
#define WARM_SECONDS 90

static int warm_services(void)
{
	static sent_t s[WARM_BATCH];
	double first = 0, last = 0, prev = 0, t_end = tb_bench_mono_ms() + WARM_SECONDS * 1000.0;
	int b = 0, steady = 0;
	run_t r;

	if (run_init(&r, "warm", 1, 8) < 0)
		return -1;
	start_worker(&r, 0);
	for (; b < WARM_BATCHES && tb_bench_mono_ms() < t_end; b++) {
		double t0 = tb_bench_mono_ms();
		for (int i = 0; i < WARM_BATCH; i++) {
			snprintf(s[i].id, sizeof(s[i].id), "warm-%d-%d", b, i);
			produce_task(&r, &s[i], trivial_url, trivial_commit);
		}
		rd_kafka_flush(r.producer, 10000);
		if (await_acks(&r, s, WARM_BATCH, NULL, 120) < 0) {
			fprintf(stderr, "bench warm-up: batch %d did not finish (log %s)\n", b + 1,
				r.log);
			run_free(&r);
			return -1;
		}
		last = WARM_BATCH / ((tb_bench_mono_ms() - t0) / 1000);
		if (b == 0)
			first = last;
		else if (last < prev * 1.1 && last > prev / 1.1) {
			b++;
			steady = 1;
			break;
		}
		prev = last;
	}
	run_free(&r);
	char name[64];
	snprintf(name, sizeof(name), "untimed: first batch of %d tasks", WARM_BATCH);
	tb_bench_row("warm-up", name, "tasks/s", first, first, NULL, 0);
	snprintf(name, sizeof(name), "untimed: batch %d (%s)", b,
		 steady ? "steady" : "limit reached, not steady");
	tb_bench_row("warm-up", name, "tasks/s", last, last, NULL, 0);
	return 0;
}

static int suite_task(int n)
{
	static sent_t s[MAX_TASKS];
	static phases_t ph;
	double lat[MAX_TASKS], ack[MAX_TASKS], med, p99, base_p99;
	run_t r;

	if (n > MAX_TASKS)
		n = MAX_TASKS;
	double base = direct_run(n, &base_p99);
	if (run_init(&r, "task1", 1, 1) < 0)
		return -1;
	start_worker(&r, 0);
	/* warm-up: the group joined, the recipe cloned into the cache */
	for (int i = 0; i < 3; i++) {
		snprintf(s[0].id, sizeof(s[0].id), "warm-%d", i);
		produce_task(&r, &s[0], trivial_url, trivial_commit);
		if (await_acks(&r, s, 1, NULL, 120) < 0) {
			fprintf(stderr, "bench task: no worker answered (log %s)\n", r.log);
			run_free(&r);
			return -1;
		}
	}
	/* and its offset committed: a worker holds its commits for 10 s after
	 * an assignment (worker/loop/rebalance.c, librdkafka #4059), so a
	 * task measured before that waits for the hold, not for its work */
	await_done(&r, s, 1, NULL, 60);
	memset(&ph, 0, sizeof(ph));
	steps_t st0 = { 0 }, st1 = { 0 };
	int steps_ok = steps_read(&r, 0, &st0) == 0;
	for (int i = 0; i < n; i++) {
		snprintf(s[i].id, sizeof(s[i].id), "one-%d", i);
		produce_task(&r, &s[i], trivial_url, trivial_commit);
		rd_kafka_flush(r.producer, 10000);
		if (await_done(&r, &s[i], 1, &ph, 60) < 0) {
			fprintf(stderr, "bench task: task %d not done\n", i);
			break;
		}
		lat[i] = s[i].committed - s[i].t0;
		ack[i] = s[i].acked - s[i].t0;
	}
	tb_bench_stats(lat, n, &med, &p99);
	tb_bench_row("task", "overhead, 1 slot: produced -> committed", "ms", med, p99,
		     "agent+judge direct", base);
	tb_bench_stats(ack, n, &med, &p99);
	tb_bench_row("task", "1 slot: produced -> acknowledged event", "ms", med, p99, NULL, 0);
	for (size_t k = 0; k < NPHASES; k++) {
		char name[64];
		tb_bench_stats(ph.ms[k], ph.n[k], &med, &p99);
		snprintf(name, sizeof(name), "  phase %s (time to reach it)", phase_names[k]);
		tb_bench_row("task", name, "ms", med, p99, NULL, 0);
	}
	if (steps_ok && steps_read(&r, 0, &st1) == 0)
		steps_rows("1 slot:", &st0, &st1);
	run_free(&r);

	/* 8 slots: waves of 8, each task's latency */
	memset(&ph, 0, sizeof(ph));
	if (run_init(&r, "task8", 1, 8) < 0)
		return -1;
	start_worker(&r, 0);
	snprintf(s[0].id, sizeof(s[0].id), "warm8");
	produce_task(&r, &s[0], trivial_url, trivial_commit);
	await_acks(&r, s, 1, NULL, 120);
	await_done(&r, s, 1, NULL, 60); /* past the commit hold, as above */
	int waves = n / 8 > 0 ? n / 8 : 1, k = 0;
	for (int w = 0; w < waves; w++) {
		for (int i = 0; i < 8; i++) {
			snprintf(s[w * 8 + i].id, sizeof(s[0].id), "eight-%d-%d", w, i);
			produce_task(&r, &s[w * 8 + i], trivial_url, trivial_commit);
		}
		rd_kafka_flush(r.producer, 10000);
		if (await_done(&r, &s[w * 8], 8, &ph, 120) < 0)
			break;
		for (int i = 0; i < 8; i++, k++)
			lat[k] = s[w * 8 + i].committed - s[w * 8 + i].t0;
	}
	tb_bench_stats(lat, k, &med, &p99);
	tb_bench_row("task", "overhead, 8 slots (waves of 8): produced -> committed", "ms", med,
		     p99, "agent+judge direct", base);
	for (size_t q = 0; q < NPHASES; q++) {
		char name[64];
		tb_bench_stats(ph.ms[q], ph.n[q], &med, &p99);
		snprintf(name, sizeof(name), "  8 slots: phase %s", phase_names[q]);
		tb_bench_row("task", name, "ms", med, p99, NULL, 0);
	}

	/* throughput: 200 at once through the same worker (TB_BENCH_BULK
	 * makes the run longer, to profile it) */
	int total = 200;
	long bulk = getenv("TB_BENCH_BULK") ? strtol(getenv("TB_BENCH_BULK"), NULL, 10) : 0;
	if (bulk > 0)
		total = (int)(bulk < MAX_TASKS ? bulk : MAX_TASKS);
	steps_ok = steps_read(&r, 0, &st0) == 0;
	double each0[NSERVICES], each1[NSERVICES];
	double cpu0 = cpu_seconds(r.pids[0]), svc0 = services_cpu_seconds(each0), busy0, all0;
	machine_cpu(&busy0, &all0);
	double t0 = tb_bench_mono_ms();
	for (int i = 0; i < total; i++) {
		snprintf(s[i].id, sizeof(s[0].id), "bulk-%d", i);
		produce_task(&r, &s[i], trivial_url, trivial_commit);
	}
	rd_kafka_flush(r.producer, 10000);
	int ok = await_acks(&r, s, total, NULL, 600) == 0;
	double secs = (tb_bench_mono_ms() - t0) / 1000, cpu = cpu_seconds(r.pids[0]) - cpu0;
	double svc = services_cpu_seconds(each1) - svc0, busy1, all1;
	machine_cpu(&busy1, &all1);
	double busy_pct = all1 > all0 ? 100 * (busy1 - busy0) / (all1 - all0) : 0;
	if (ok) {
		tb_bench_row("task", "throughput, 1 worker, 8 slots", "tasks/s", total / secs,
			     total / secs, "target 150/s", 150);
		tb_bench_row("task", "CPU per task (worker + sandboxes)", "ms", cpu * 1000 / total,
			     cpu * 1000 / total, NULL, 0);
		/* The services share the machine's cores with the worker: */
		tb_bench_row("task", "CPU per task (Kafka + S3 server + Redis)", "ms",
			     svc * 1000 / total, svc * 1000 / total, NULL, 0);
		for (int i = 0; i < NSERVICES; i++) {
			char name[64];
			double ms = (each1[i] - each0[i]) * 1000 / total;
			snprintf(name, sizeof(name), "  of which %s", service_names[i]);
			tb_bench_row("task", name, "ms", ms, ms, NULL, 0);
		}
		tb_bench_row("task", "machine CPU busy during the run", "%", busy_pct, busy_pct,
			     NULL, 0);
		if (steps_ok && steps_read(&r, 0, &st1) == 0)
			steps_rows("throughput:", &st0, &st1);
	} else {
		fprintf(stderr, "bench task: the %d tasks did not all finish (log %s)\n", total,
			r.log);
	}
	run_free(&r);
	return 0;
}

/* Produces @p n messages like a chatty task's events, from here: how fast
 * the same cluster takes them without a worker. events/s */
static double raw_produce_rate(run_t *r, int n, size_t size)
{
	char *payload = malloc(size);
	memset(payload, 'x', size);
	double t0 = tb_bench_mono_ms();
	for (int i = 0; i < n; i++) {
		while (rd_kafka_producev(r->producer, RD_KAFKA_V_TOPIC(r->events),
					 RD_KAFKA_V_KEY("raw", 3), RD_KAFKA_V_VALUE(payload, size),
					 RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
					 RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
			rd_kafka_poll(r->producer, 10);
	}
	rd_kafka_flush(r->producer, 60000);
	double secs = (tb_bench_mono_ms() - t0) / 1000;
	free(payload);
	return n / secs;
}

/* Reads the events topic until @p want chatty events of @p ntasks tasks
 * came; events/s from their worker stamps (first to last), per task and
 * for all. */
static int chatty_rates(run_t *r, int ntasks, int want, double *per_task, double *all, size_t *size)
{
	uint64_t first[8] = { 0 }, last[8] = { 0 }, lo = 0, hi = 0;
	char ids[8][64] = { "" };
	int count[8] = { 0 }, got = 0;
	double until = tb_bench_mono_ms() + 300000;

	while (got < want && tb_bench_mono_ms() < until) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(r->events_c, 100);
		tb_event_t ev;
		tb_error_t err;
		if (!m)
			continue;
		if (!m->err &&
		    tb_msg_decode(&tb_schema_event, &ev, m->payload, m->len, &err) == 0) {
			if (ev.type == TB_EV_THOUGHT) {
				int k = 0;
				while (k < ntasks && ids[k][0] && strcmp(ids[k], ev.task_id))
					k++;
				if (k < ntasks) {
					if (!ids[k][0])
						snprintf(ids[k], sizeof(ids[k]), "%s", ev.task_id);
					first[k] = first[k] ? first[k] : ev.ts;
					last[k] = ev.ts;
					count[k]++;
					lo = lo && lo < ev.ts ? lo : ev.ts;
					hi = hi > ev.ts ? hi : ev.ts;
					*size = m->len;
					got++;
				}
			}
			tb_msg_free(&tb_schema_event, &ev);
		}
		rd_kafka_message_destroy(m);
	}
	double sum = 0;
	for (int k = 0; k < ntasks; k++)
		sum += last[k] > first[k] ? count[k] * 1000.0 / (double)(last[k] - first[k]) : 0;
	*per_task = sum / ntasks;
	*all = hi > lo ? got * 1000.0 / (double)(hi - lo) : 0;
	return got == want ? 0 : -1;
}

static int suite_events(void)
{
	static sent_t s[8];
	double per, all;
	size_t size = 0;
	run_t r;

	if (run_init(&r, "events", 1, 8) < 0)
		return -1;
	start_worker(&r, 0);
	snprintf(s[0].id, sizeof(s[0].id), "warm");
	produce_task(&r, &s[0], trivial_url, trivial_commit);
	if (await_acks(&r, s, 1, NULL, 120) < 0) {
		fprintf(stderr, "bench events: no worker answered (log %s)\n", r.log);
		run_free(&r);
		return -1;
	}
	snprintf(s[0].id, sizeof(s[0].id), "chatty-1");
	produce_task(&r, &s[0], chatty_url, chatty_commit);
	rd_kafka_flush(r.producer, 10000);
	if (chatty_rates(&r, 1, CHATTY_EVENTS, &per, &all, &size) == 0) {
		double raw = raw_produce_rate(&r, CHATTY_EVENTS, size);
		tb_bench_row("events", "one chatty task (100,000 events)", "ev/s", per, per,
			     "raw producer", raw);
	} else {
		fprintf(stderr,
			"bench events: the chatty task's events did not all come (log %s)\n",
			r.log);
	}
	await_acks(&r, s, 1, NULL, 120);
	for (int i = 0; i < 8; i++) {
		snprintf(s[i].id, sizeof(s[i].id), "chatty-8-%d", i);
		produce_task(&r, &s[i], chatty_url, chatty_commit);
	}
	rd_kafka_flush(r.producer, 10000);
	if (chatty_rates(&r, 8, 8 * CHATTY_EVENTS, &per, &all, &size) == 0) {
		tb_bench_row("events", "8 chatty tasks at once: all together", "ev/s", all, all,
			     NULL, 0);
		tb_bench_row("events", "8 chatty tasks at once: per task", "ev/s", per, per, NULL,
			     0);
	}
	run_free(&r);
	return 0;
}

/* Sleep-bound tasks through @p k workers of 2 slots: 24 per worker, so
 * every run takes about as long. @return tasks/s, 0 if they did not
 * finish. */
static double fleet_rate(int k)
{
	static sent_t s[24 * MAX_WORKERS];
	int n = 24 * k;
	char name[32];
	run_t r;

	snprintf(name, sizeof(name), "fleet%d", k);
	if (run_init(&r, name, k, 2) < 0)
		return 0;
	for (int i = 0; i < k; i++)
		start_worker(&r, i);
	/* every worker in the group and warm: one task per slot, then a pause */
	for (int i = 0; i < 2 * k; i++) {
		snprintf(s[i].id, sizeof(s[i].id), "warm-%d", i);
		produce_task(&r, &s[i], trivial_url, trivial_commit);
	}
	rd_kafka_flush(r.producer, 10000);
	await_acks(&r, s, 2 * k, NULL, 120);
	sleep(5);
	double t0 = tb_bench_mono_ms();
	for (int i = 0; i < n; i++) {
		snprintf(s[i].id, sizeof(s[i].id), "sleepy-%d", i);
		produce_task(&r, &s[i], sleepy_url, sleepy_commit);
	}
	rd_kafka_flush(r.producer, 10000);
	int ok = await_acks(&r, s, n, NULL, 300) == 0;
	double secs = (tb_bench_mono_ms() - t0) / 1000;
	run_free(&r);
	return ok ? n / secs : 0;
}

/*
 * A worker's SIGTERM to its partitions' tasks done by the other worker:
 * two workers share the 8 partitions; worker 1 is told to stop (idle: no
 * drain), and at once a trivial task goes to each partition. The tasks
 * on worker 2's partitions are the baseline; those on worker 1's wait
 * for it to leave the group and the rebalance to hand them over.
 * @return 0, or -1 when the tasks did not finish.
 */
static int handover(double *moved_ms, double *stayed_ms)
{
	static sent_t s[8];
	run_t r;

	if (run_init(&r, "handover", 2, 2) < 0)
		return -1;
	start_worker(&r, 0);
	start_worker(&r, 1);
	for (int i = 0; i < 8; i++) { /* both in the group, warm */
		snprintf(s[i].id, sizeof(s[i].id), "warm-%d", i);
		produce_task_to(&r, &s[i], trivial_url, trivial_commit, i);
	}
	rd_kafka_flush(r.producer, 10000);
	if (await_acks(&r, s, 8, NULL, 120) < 0) {
		run_free(&r);
		return -1;
	}
	sleep(5);
	double t0 = tb_bench_mono_ms();
	kill(r.pids[0], SIGTERM);
	for (int i = 0; i < 8; i++) {
		snprintf(s[i].id, sizeof(s[i].id), "after-%d", i);
		produce_task_to(&r, &s[i], trivial_url, trivial_commit, i);
	}
	rd_kafka_flush(r.producer, 10000);
	int ok = await_acks(&r, s, 8, NULL, 120) == 0;
	double lo = 1e18, hi = 0;
	for (int i = 0; i < 8; i++) {
		lo = s[i].acked - t0 < lo ? s[i].acked - t0 : lo;
		hi = s[i].acked - t0 > hi ? s[i].acked - t0 : hi;
	}
	*stayed_ms = lo, *moved_ms = hi;
	run_free(&r);
	return ok ? 0 : -1;
}

static int suite_fleet(void)
{
	double one = fleet_rate(1), moved, stayed;
	if (!one) {
		fprintf(stderr, "bench fleet: one worker did not finish\n");
		return -1;
	}
	tb_bench_row("fleet", "1 worker, 2 slots, 1 s agents", "tasks/s", one, one, NULL, 0);
	for (int k = 2; k <= MAX_WORKERS; k *= 2) {
		char name[64];
		double rate = fleet_rate(k);
		snprintf(name, sizeof(name), "%d workers, 2 slots each", k);
		tb_bench_row("fleet", name, "tasks/s", rate, rate, "1 worker", one);
	}
	if (handover(&moved, &stayed) < 0) {
		fprintf(stderr, "bench fleet: the handover's tasks did not finish\n");
		return -1;
	}
	tb_bench_row("fleet", "SIGTERM -> task done, partition stayed", "ms", stayed, stayed, NULL,
		     0);
	tb_bench_row("fleet", "SIGTERM -> task done, partition moved", "ms", moved, moved, "stayed",
		     stayed);
	return 0;
}

static double rss_mib(pid_t pid)
{
	char path[64], line[256];
	double kib = 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kib = strtod(line + 6, NULL);
	if (f)
		fclose(f);
	return kib / 1024;
}

static int suite_memory(void)
{
	static sent_t s[8];
	run_t r;

	if (run_init(&r, "memory", 1, 8) < 0)
		return -1;
	start_worker(&r, 0);
	snprintf(s[0].id, sizeof(s[0].id), "warm");
	produce_task(&r, &s[0], trivial_url, trivial_commit);
	if (await_acks(&r, s, 1, NULL, 120) < 0) {
		run_free(&r);
		return -1;
	}
	sleep(2);
	double idle = rss_mib(r.pids[0]);
	for (int i = 0; i < 8; i++) {
		snprintf(s[i].id, sizeof(s[i].id), "busy-%d", i);
		produce_task(&r, &s[i], sleepy_url, sleepy_commit);
	}
	rd_kafka_flush(r.producer, 10000);
	usleep(700000); /* all eight running their 1 s agents */
	double busy = rss_mib(r.pids[0]);
	await_acks(&r, s, 8, NULL, 120);
	tb_bench_row("memory", "worker RSS, idle (8 slots)", "MiB", idle, idle, "target 30 MiB",
		     30);
	tb_bench_row("memory", "worker RSS per busy slot", "MiB", (busy - idle) / 8,
		     (busy - idle) / 8, "target 1 MiB", 1);
	run_free(&r);
	return 0;
}

/* /proc/meminfo's figures the sessions suite reads, in MiB: [0] in use
 * (MemTotal - MemAvailable: what no other use can have), then where it
 * went. */
static const char *const mem_fields[] = { "MemTotal",   "MemAvailable", "AnonPages",
					  "Shmem",      "KernelStack",  "PageTables",
					  "SUnreclaim", "SReclaimable", "Percpu" };
#define NMEM (sizeof(mem_fields) / sizeof(mem_fields[0]))

static void host_memory(double mib[NMEM])
{
	char line[256];
	FILE *f = fopen("/proc/meminfo", "r");

	memset(mib, 0, NMEM * sizeof(double));
	while (f && fgets(line, sizeof(line), f))
		for (size_t i = 0; i < NMEM; i++) {
			size_t len = strlen(mem_fields[i]);
			if (!strncmp(line, mem_fields[i], len) && line[len] == ':')
				mib[i] = strtod(line + len + 1, NULL) / 1024;
		}
	if (f)
		fclose(f);
	mib[0] -= mib[1]; /* in use */
}

/* Sends interactive task @p id (prompt "hello") of the chat recipe, or,
 * with @p seq > 0, its follow-up @p seq ("again"). */
static int produce_session(run_t *r, const char *id, uint64_t seq)
{
	msgpack_sbuffer sb;
	tb_error_t err;
	int rc;

	msgpack_sbuffer_init(&sb);
	if (seq == 0) {
		tb_task_t t = { 0 };
		t.id = (char *)id, t.kind = TB_TASK_INTERACTIVE, t.recipe.url = chat_url;
		t.recipe.commit = chat_commit, t.prompt = (char *)"hello";
		t.runtime = (char *)"sessions", t.submitted_at = tb_bench_wall_ms();
		rc = tb_msg_encode(&sb, &tb_schema_task, &t, &err);
	} else {
		tb_followup_t f = { 0 };
		f.task_id = (char *)id, f.seq = seq, f.kind = TB_FOLLOWUP_PROMPT;
		f.text = (char *)"again", f.sent_at = tb_bench_wall_ms();
		rc = tb_msg_encode(&sb, &tb_schema_followup, &f, &err);
	}
	if (rc == 0 &&
	    rd_kafka_producev(r->producer, RD_KAFKA_V_TOPIC(r->tasks),
			      RD_KAFKA_V_KEY(id, strlen(id)), RD_KAFKA_V_VALUE(sb.data, sb.size),
			      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END))
		rc = -1;
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

/* Events of the sessions run: idle turns counted; for @p want (not NULL),
 * the stamps of its "turn-started" and of its agent's next message. */
typedef struct session_watch {
	int idle;
	const char *want;
	uint64_t started_ts, answered_ts;
} session_watch_t;

static void session_events(run_t *r, session_watch_t *w, int ms)
{
	rd_kafka_poll(r->producer, 0);
	rd_kafka_message_t *m = rd_kafka_consumer_poll(r->events_c, ms);
	tb_event_t ev;
	tb_error_t err;
	json_t *p = NULL;

	if (!m)
		return;
	if (m->err || tb_msg_decode(&tb_schema_event, &ev, m->payload, m->len, &err) < 0) {
		rd_kafka_message_destroy(m);
		return;
	}
	if (ev.type == TB_EV_TURN &&
	    tb_mpack_to_json(&p, ev.payload.data, ev.payload.len, &err) == 0) {
		const char *state = json_string_value(json_object_get(p, "state"));
		if (state && !strcmp(state, "idle"))
			w->idle++;
		else if (state && !strcmp(state, "turn-started") && w->want &&
			 !strcmp(ev.task_id, w->want))
			w->started_ts = ev.ts;
	} else if (ev.type == TB_EV_MESSAGE && ev.source == TB_SOURCE_AGENT && w->want &&
		   w->started_ts && !strcmp(ev.task_id, w->want)) {
		w->answered_ts = ev.ts;
	}
	json_decref(p);
	tb_msg_free(&tb_schema_event, &ev);
	rd_kafka_message_destroy(m);
}

#define RESUMES 50

static int suite_sessions(int n)
{
	static double resume[RESUMES], deliver[RESUMES], wake[RESUMES];
	session_watch_t w = { 0 };
	char id[64], name[64];
	run_t r;

	if (run_init(&r, "sessions", 1, n) < 0)
		return -1;
	start_worker(&r, 0);
	sleep(5); /* in the group, its first sandbox built */
	double host0[NMEM], host1[NMEM], rss0 = rss_mib(r.pids[0]);
	host_memory(host0);
	double t0 = tb_bench_mono_ms();
	for (int i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "session-%d", i);
		if (produce_session(&r, id, 0) < 0)
			break;
	}
	rd_kafka_flush(r.producer, 30000);
	/* every session idle after its first turn: 60 s + 1 s per session at most */
	for (double until = t0 + 60000 + 1000.0 * n; w.idle < n && tb_bench_mono_ms() < until;)
		session_events(&r, &w, 100);
	double started = (tb_bench_mono_ms() - t0) / 1000;
	if (w.idle < n) {
		fprintf(stderr, "bench: %d of %d sessions idle after %.0f s (see %s)\n", w.idle, n,
			started, r.log);
		run_free(&r);
		return -1;
	}
	sleep(3);
	double rss1 = rss_mib(r.pids[0]);
	host_memory(host1);
	int k = 0;
	for (int i = 0; i < RESUMES && i < n; i++) {
		snprintf(id, sizeof(id), "session-%d", i * (n / (RESUMES < n ? RESUMES : n)));
		w.want = id, w.started_ts = w.answered_ts = 0;
		uint64_t sent = tb_bench_wall_ms();
		if (produce_session(&r, id, 1) < 0)
			break;
		for (double until = tb_bench_mono_ms() + 10000;
		     !w.answered_ts && tb_bench_mono_ms() < until;)
			session_events(&r, &w, 10);
		if (!w.answered_ts)
			continue;
		resume[k] = (double)(w.answered_ts - sent);
		deliver[k] = (double)(w.started_ts - sent);
		wake[k] = (double)(w.answered_ts - w.started_ts);
		k++;
		/* the next after this one is idle again */
		for (double until = tb_bench_mono_ms() + 2000; tb_bench_mono_ms() < until;)
			session_events(&r, &w, 10);
	}
	double med, p99, dmed, dp99, wmed, wp99;
	snprintf(name, sizeof(name), "%d idle sessions started, s", n);
	tb_bench_row("sessions", name, "s", started, started, NULL, 0);
	double per = (host1[0] - host0[0]) / n;
	tb_bench_row("sessions", "host memory per idle session", "MiB", per, per, "target 1.5 MiB",
		     1.5);
	for (size_t i = 2; i < NMEM; i++) {
		snprintf(name, sizeof(name), "  of which %s (/proc/meminfo)", mem_fields[i]);
		per = (host1[i] - host0[i]) / n;
		tb_bench_row("sessions", name, "MiB", per, per, NULL, 0);
	}
	tb_bench_row("sessions", "worker RSS per idle session", "MiB", (rss1 - rss0) / n,
		     (rss1 - rss0) / n, NULL, 0);
	tb_bench_stats(resume, k, &med, &p99);
	tb_bench_stats(deliver, k, &dmed, &dp99);
	tb_bench_stats(wake, k, &wmed, &wp99);
	tb_bench_row("sessions", "resume: follow-up sent -> agent answers", "ms", med, p99,
		     "target 10 ms", 10);
	tb_bench_row("sessions", "  of which Kafka -> turn started", "ms", dmed, dp99, NULL, 0);
	tb_bench_row("sessions", "  of which thaw + agent reads, answers", "ms", wmed, wp99, NULL,
		     0);
	if (!tb_bench_json)
		printf("  (%d resumes measured; microVM snapshot restores take about 1 s)\n", k);
	run_free(&r);
	return k == 0 ? -1 : 0;
}

int main(int argc, char **argv)
{
	const char *suites[8];
	int nsuites = 0, n = 300, nsessions = 1000;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			tb_bench_json = 1;
		else if (!strcmp(argv[i], "--taskbox") && i + 1 < argc)
			taskbox = argv[++i];
		else if (!strcmp(argv[i], "-n") && i + 1 < argc)
			n = (int)strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--sessions") && i + 1 < argc)
			nsessions = (int)strtol(argv[++i], NULL, 10);
		else if (nsuites < 8)
			suites[nsuites++] = argv[i];
	}
	if (!taskbox || !nsuites || !getenv("TASKBOX_TEST_KAFKA")) {
		fprintf(stderr, "usage: bench_worker --taskbox PATH [--json] [-n N] "
				"[--sessions N] task|events|fleet|memory|sessions ...\n(with "
				"TASKBOX_TEST_* from "
				"deploy/local/services env)\n");
		return 2;
	}
	/* names unique to this process: a pid alone comes round again */
	snprintf(stamp, sizeof(stamp), "%d-%lld", (int)getpid(), (long long)time(NULL));
	setenv("AWS_ACCESS_KEY_ID", getenv("TASKBOX_TEST_S3_ACCESS_KEY"), 1);
	setenv("AWS_SECRET_ACCESS_KEY", getenv("TASKBOX_TEST_S3_SECRET_KEY"), 1);
	if (!mkdtemp(root) || chmod(root, 0711) < 0)
		return 1;
	char spec[512], bucket[64];
	tb_store_config_t scfg = { 0 };
	tb_store_t *store;
	tb_error_t err;
	snprintf(bucket, sizeof(bucket), "s3://%s", BUCKET);
	scfg.url = bucket, scfg.endpoint = getenv("TASKBOX_TEST_S3_ENDPOINT");
	scfg.region = getenv("TASKBOX_TEST_S3_REGION");
	if (tb_store_open(&store, &scfg, &err) < 0 || tb_bench_bucket(store, &err) < 0) {
		fprintf(stderr, "bench: %s\n", err.msg);
		return 1;
	}
	tb_store_close(store);
	snprintf(spec, sizeof(spec),
		 "read -r p\nyes '{\"type\":\"thought\",\"text\":\"x\"}' | head -n %d >&3\n",
		 CHATTY_EVENTS);
	/* a runtime whose event cap does not pace the chatty agent */
	/* the runtime the workers get: the example's, or an older worker's
	 * own (TB_BENCH_RUNTIME), whose schema may lack keys added since */
	const char *runtime =
	    getenv("TB_BENCH_RUNTIME") ? getenv("TB_BENCH_RUNTIME") : TB_RUNTIME_EXAMPLE;
	if (recipe("trivial",
		   "read -r p\necho '{\"type\":\"message\",\"role\":\"assistant\",\"text\":"
		   "\"ok\"}' >&3\n",
		   trivial_url, trivial_commit) < 0 ||
	    recipe("chatty", spec, chatty_url, chatty_commit) < 0 ||
	    recipe("sleepy", "read -r p\nsleep 1\n", sleepy_url, sleepy_commit) < 0 ||
	    recipe("chat",
		   "while read -r line; do\n"
		   "  case $line in *'\"type\":\"end\"'*) break ;; esac\n"
		   "  echo '{\"type\":\"message\",\"role\":\"assistant\",\"text\":\"ok\"}' >&3\n"
		   "  echo '{\"type\":\"turn-ended\"}' >&3\n"
		   "done\n",
		   chat_url, chat_commit) < 0 ||
	    sh("mkdir -p %s/runtimes && sed -e 's/\"name\": \"default\"/\"name\": \"sessions\"/' "
	       "-e 's/\"idle_timeout_seconds\": [0-9]*/\"idle_timeout_seconds\": 3600/' "
	       "%s > %s/runtimes/sessions.json",
	       root, runtime, root) < 0 ||
	    sh("mkdir -p %s/runtimes && sed -e 's/\"name\": \"default\"/\"name\": \"bench\"/' "
	       "-e 's/\"max_events_per_second\": [0-9]*/\"max_events_per_second\": 1000000/' "
	       "%s > %s/runtimes/bench.json",
	       root, runtime, root) < 0) {
		fprintf(stderr, "bench: cannot make the recipes in %s\n", root);
		return 1;
	}
	if (!tb_bench_json) {
		printf("worker benchmarks (Kafka %s, Redis, S3 %s)\n", getenv("TASKBOX_TEST_KAFKA"),
		       getenv("TASKBOX_TEST_S3_ENDPOINT"));
		printf("  %-8s %-44s %9s %9s %-7s  %s\n", "suite", "figure", "median", "p99",
		       "unit", "ratio to baseline");
	}
	int rc = 0;
	for (int i = 0; i < nsuites; i++)
		if (!strcmp(suites[i], "task") || !strcmp(suites[i], "events")) {
			rc |= warm_services() < 0;
			break;
		}
	for (int i = 0; i < nsuites; i++) {
		int got = !strcmp(suites[i], "task")     ? suite_task(n)
			  : !strcmp(suites[i], "events") ? suite_events()
			  : !strcmp(suites[i], "fleet")  ? suite_fleet()
			  : !strcmp(suites[i], "memory") ? suite_memory()
			  : !strcmp(suites[i], "sessions")
			      ? suite_sessions(nsessions)
			      : (fprintf(stderr, "bench: unknown suite %s\n", suites[i]), -1);
		rc |= got < 0;
	}
	tb_bench_end();
	if (ndead)
		drop_topics();
	if (getenv("TB_BENCH_KEEP")) /* the workers' logs, for a closer look */
		fprintf(stderr, "bench: kept %s\n", root);
	else
		sh("rm -rf %s", root);
	return rc;
}
