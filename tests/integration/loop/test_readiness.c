/*
 * test_readiness.c: /readyz of a real `taskbox worker` follows each
 * service it depends on within 5 s, going and coming back, and names
 * what is missing. Kafka is librdkafka's mock cluster, run in this
 * process, whose broker the test takes down and up (a TCP proxy cannot
 * cut a real broker: the clients connect to the address it advertises,
 * past the proxy). The ledger (the shared Redis) and the store (the
 * shared S3) are reached through TCP proxies on loopback that the test
 * cuts (every connection reset, new ones refused) and restores, so the
 * shared services are never stopped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tb/clock.h"
#include "tb/kafka.h"

#include <arpa/inet.h>
#include <librdkafka/rdkafka_mock.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* How soon /readyz must follow a service (the promise), and how often
 * the test asks. */
#define FOLLOW_MS 5000
#define ASK_MS 200

/* ------------------------------------------------------------ proxy */

#define PAIRS 32

typedef struct proxy {
	int listen_fd;
	unsigned port;
	struct sockaddr_in upstream;
	atomic_int cut, stop;
	int fd[PAIRS][2]; /* client, upstream; -1 when free */
	pthread_t thread;
} proxy_t;

static void pair_close(proxy_t *p, int i)
{
	for (int k = 0; k < 2; k++)
		if (p->fd[i][k] >= 0) {
			close(p->fd[i][k]);
			p->fd[i][k] = -1;
		}
}

static void proxy_accept(proxy_t *p)
{
	int c = accept(p->listen_fd, NULL, NULL), u = -1;

	if (c < 0)
		return;
	if (atomic_load(&p->cut)) { /* refused: closed at once */
		close(c);
		return;
	}
	u = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (u < 0 || connect(u, (struct sockaddr *)&p->upstream, sizeof(p->upstream)) < 0) {
		close(c);
		if (u >= 0)
			close(u);
		return;
	}
	for (int i = 0; i < PAIRS; i++)
		if (p->fd[i][0] < 0) {
			p->fd[i][0] = c;
			p->fd[i][1] = u;
			return;
		}
	close(c);
	close(u);
}

/* One thread: the listener and every pair, in one poll. */
static void *proxy_run(void *arg)
{
	proxy_t *p = arg;
	char buf[16384];

	while (!atomic_load(&p->stop)) {
		struct pollfd pf[1 + 2 * PAIRS];
		int n = 1;
		pf[0] = (struct pollfd){ p->listen_fd, POLLIN, 0 };
		if (atomic_load(&p->cut))
			for (int i = 0; i < PAIRS; i++)
				pair_close(p, i);
		for (int i = 0; i < PAIRS; i++)
			for (int k = 0; k < 2 && p->fd[i][0] >= 0; k++)
				pf[n++] = (struct pollfd){ p->fd[i][k], POLLIN, 0 };
		if (poll(pf, (nfds_t)n, 50) <= 0)
			continue;
		if (pf[0].revents)
			proxy_accept(p);
		for (int j = 1; j < n; j++) {
			if (!pf[j].revents)
				continue;
			for (int i = 0; i < PAIRS; i++)
				for (int k = 0; k < 2; k++)
					if (p->fd[i][k] == pf[j].fd) {
						ssize_t got = read(pf[j].fd, buf, sizeof(buf));
						if (got <= 0 ||
						    write(p->fd[i][1 - k], buf, (size_t)got) != got)
							pair_close(p, i);
					}
		}
	}
	for (int i = 0; i < PAIRS; i++)
		pair_close(p, i);
	return NULL;
}

static void proxy_start(proxy_t *p, const char *host, unsigned port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);

	memset(p->fd, -1, sizeof(p->fd));
	p->upstream = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(port) };
	assert_int_equal(inet_pton(AF_INET, host, &p->upstream.sin_addr), 1);
	p->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(p->listen_fd >= 0);
	assert_int_equal(bind(p->listen_fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(p->listen_fd, 64), 0);
	assert_int_equal(getsockname(p->listen_fd, (struct sockaddr *)&a, &alen), 0);
	p->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&p->thread, NULL, proxy_run, p), 0);
}

static void proxy_stop(proxy_t *p)
{
	atomic_store(&p->stop, 1);
	pthread_join(p->thread, NULL);
	close(p->listen_fd);
}

/* "host:port" (or "redis://host:port/..." / "http://host:port") */
static void host_port(const char *url, char *host, size_t len, unsigned *port)
{
	const char *h = strstr(url, "://");
	h = h ? h + 3 : url;
	size_t n = strcspn(h, ":");
	snprintf(host, len, "%.*s", (int)n, h);
	*port = (unsigned)strtoul(h + n + 1, NULL, 10);
}

/* ----------------------------------------------------------- worker */

static char root[64] = "/tmp/tb-readiness-XXXXXX";
static tb_kafka_mock_t *mock;
static proxy_t redis_proxy, s3_proxy;
static pid_t worker = -1;
static char log_path[128];
static const char *const *extra_env; /* over the worker's settings: name, value, ... */

static unsigned metrics_port(void)
{
	char line[2048];
	unsigned port = 0;
	FILE *f = fopen(log_path, "r");

	while (f && fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "metrics on ");
		if (p && (p = strstr(p, ", port ")))
			port = (unsigned)strtoul(p + 7, NULL, 10);
	}
	if (f)
		fclose(f);
	return port;
}

/* GET /readyz: its status, its body in @p body. */
static int readyz(unsigned port, char *body, size_t cap)
{
	char cmd[256];
	int status = -1;

	snprintf(cmd, sizeof(cmd),
		 "curl -s --max-time 2 -w '\\n%%{http_code}' http://127.0.0.1:%u/readyz", port);
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

/* Asks /readyz until it answers @p want (with @p has in its body, if
 * given) or @p ms pass. @return how long it took, or -1. */
static long until_ready(unsigned port, int want, const char *has, long ms, char *body, size_t cap)
{
	uint64_t t0 = tb_mono_ms();

	while (tb_mono_ms() - t0 <= (uint64_t)ms) {
		if (readyz(port, body, cap) == want && (!has || strstr(body, has)))
			return (long)(tb_mono_ms() - t0);
		usleep(ASK_MS * 1000);
	}
	return -1;
}

static void start_worker_with(const char *flag)
{
	char v[512];

	snprintf(log_path, sizeof(log_path), "%s/worker.log", root);
	unlink(log_path); /* not an earlier worker's port */
	worker = fork();
	assert_true(worker >= 0);
	if (worker)
		return;
	setenv("TASKBOX_KAFKA_BROKERS", tb_kafka_mock_bootstraps(mock), 1);
	setenv("TASKBOX_KAFKA_GROUP", "readiness", 1);
	snprintf(v, sizeof(v), "redis://127.0.0.1:%u/0", redis_proxy.port);
	setenv("TASKBOX_LEDGER_URL", v, 1);
	snprintf(v, sizeof(v), "readiness-%d", (int)getppid());
	setenv("TASKBOX_LEDGER_PREFIX", v, 1);
	setenv("TASKBOX_WORKER_ID", v, 1);
	setenv("TASKBOX_STORE_URL", "s3://taskbox-readiness", 1);
	snprintf(v, sizeof(v), "http://127.0.0.1:%u", s3_proxy.port);
	setenv("TASKBOX_STORE_ENDPOINT", v, 1);
	setenv("TASKBOX_STORE_REGION", getenv("TASKBOX_TEST_S3_REGION"), 1);
	setenv("AWS_ACCESS_KEY_ID", getenv("TASKBOX_TEST_S3_ACCESS_KEY"), 1);
	setenv("AWS_SECRET_ACCESS_KEY", getenv("TASKBOX_TEST_S3_SECRET_KEY"), 1);
	setenv("TASKBOX_RUNTIMES_DIR", TB_SOURCE_DIR "/examples/runtimes", 1);
	snprintf(v, sizeof(v), "%s/work", root);
	setenv("TASKBOX_WORK_DIR", v, 1);
	snprintf(v, sizeof(v), "%s/cache", root);
	setenv("TASKBOX_CACHE_DIR", v, 1);
	setenv("TASKBOX_SLOTS", "1", 1);
	setenv("TASKBOX_METRICS_LISTEN", "127.0.0.1:0", 1);
	if (!freopen(log_path, "w", stderr))
		_exit(126);
	for (const char *const *e = extra_env; e && *e; e += 2)
		setenv(e[0], e[1], 1);
	execl(TB_TASKBOX, "taskbox", "worker", flag, (char *)NULL);
	_exit(127);
}

static void start_worker(void)
{
	start_worker_with(NULL);
}

/* `taskbox worker --check` with @p env (name, value, ..., NULL) over the
 * test's settings. @return its exit status. */
static int check_with(const char *const *env)
{
	int status = -1;

	extra_env = env;
	start_worker_with("--check");
	extra_env = NULL;
	assert_int_equal(waitpid(worker, &status, 0), worker);
	worker = -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int log_has(const char *what)
{
	char line[4096];
	int found = 0;
	FILE *f = fopen(log_path, "r");

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	if (f)
		fclose(f);
	return found;
}

/* What the documented install did: a runtimes_dir with nothing in it,
 * a work_dir under a 0700 directory. Refused at once (exit 3), naming
 * the key; and a configuration that serves passes. */
static void test_worker_check__refuses_what_it_cannot_serve(void **state)
{
	char empty[128], hidden[128], work[160];

	(void)state;
	assert_int_equal(check_with(NULL), 0);
	snprintf(empty, sizeof(empty), "%s/no-runtimes", root);
	assert_int_equal(mkdir(empty, 0755), 0);
	const char *const no_runtimes[] = { "TASKBOX_RUNTIMES_DIR", empty, NULL };
	assert_int_equal(check_with(no_runtimes), 3);
	assert_true(log_has("runtimes_dir"));
	assert_true(log_has("holds no valid runtime"));
	snprintf(hidden, sizeof(hidden), "%s/private", root);
	assert_int_equal(mkdir(hidden, 0700), 0);
	snprintf(work, sizeof(work), "%s/work", hidden);
	const char *const hidden_work[] = { "TASKBOX_WORK_DIR", work, NULL };
	assert_int_equal(check_with(hidden_work), 3);
	assert_true(log_has("no sandbox can be built under work_dir"));
}

static void stop_worker(void)
{
	if (worker <= 0)
		return;
	kill(worker, SIGKILL);
	waitpid(worker, NULL, 0);
	worker = -1;
}

static void show_log(void)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "tail -n 40 %s >&2", log_path);
	if (system(cmd) != 0)
		fprintf(stderr, "(no log)\n");
}

/* Cuts a service (@p cut: how), and asks /readyz how soon it says so,
 * naming @p dep and @p why; then restores it and asks how soon it is
 * ready again. */
static void cut_and_restore(unsigned port, const char *dep, const char *why, void (*cut)(int))
{
	char body[4096], has[64];
	long took;

	snprintf(has, sizeof(has), "\"%s\":{\"up\":false", dep);
	cut(1);
	took = until_ready(port, 503, has, FOLLOW_MS, body, sizeof(body));
	if (took < 0) {
		show_log();
		cut(0);
		fail_msg("%s cut, /readyz after %d ms: %s", dep, FOLLOW_MS, body);
	}
	fprintf(stderr, "# %s cut: unready after %ld ms: %s\n", dep, took, body);
	if (why && !strstr(body, why)) {
		cut(0);
		fail_msg("%s cut, /readyz does not say '%s': %s", dep, why, body);
	}
	cut(0);
	took = until_ready(port, 200, NULL, FOLLOW_MS, body, sizeof(body));
	if (took < 0) {
		show_log();
		fail_msg("%s restored, /readyz after %d ms: %s", dep, FOLLOW_MS, body);
	}
	fprintf(stderr, "# %s restored: ready after %ld ms\n", dep, took);
}

static void cut_kafka(int down)
{
	rd_kafka_mock_cluster_t *mc = tb_kafka_mock_cluster(mock);
	if (down)
		rd_kafka_mock_broker_set_down(mc, 1);
	else
		rd_kafka_mock_broker_set_up(mc, 1);
}

static void cut_redis(int down)
{
	atomic_store(&redis_proxy.cut, down);
}

static void cut_s3(int down)
{
	atomic_store(&s3_proxy.cut, down);
}

static void test_readiness__follows_kafka_the_ledger_and_the_store_within_seconds(void **state)
{
	char body[4096];
	unsigned port = 0;

	(void)state;
	start_worker();
	for (int i = 0; i < 100 && !(port = metrics_port()); i++)
		usleep(100000);
	if (!port) {
		show_log();
		fail_msg("no metrics port in the worker's log");
	}
	if (until_ready(port, 200, NULL, 60000, body, sizeof(body)) < 0) {
		show_log();
		fail_msg("not ready in 60 s: %s", body);
	}
	/* the broker named: its address, from librdkafka's error */
	char broker[128];
	snprintf(broker, sizeof(broker), "%s", tb_kafka_mock_bootstraps(mock));
	broker[strcspn(broker, ",")] = '\0';
	cut_and_restore(port, "kafka", broker, cut_kafka);
	cut_and_restore(port, "ledger", NULL, cut_redis);
	cut_and_restore(port, "store", NULL, cut_s3);
	stop_worker();
}

static int setup(void **state)
{
	static const tb_kafka_topic_spec_t topics[] = {
		{ "taskbox.tasks", 2 },
		{ "taskbox.events", 1 },
		{ "taskbox.dlq", 1 },
	};
	char host[64];
	unsigned port;
	tb_error_t err;

	(void)state;
	/* reachable from the sandboxes' user namespaces: mkdtemp's 0700 is not */
	if (!mkdtemp(root) || chmod(root, 0711) < 0)
		return -1;
	if (tb_kafka_mock_start(&mock, 1, topics, 3, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return -1;
	}
	host_port(getenv("TASKBOX_TEST_REDIS"), host, sizeof(host), &port);
	proxy_start(&redis_proxy, host, port);
	host_port(getenv("TASKBOX_TEST_S3_ENDPOINT"), host, sizeof(host), &port);
	proxy_start(&s3_proxy, host, port);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	stop_worker();
	proxy_stop(&redis_proxy);
	proxy_stop(&s3_proxy);
	tb_kafka_mock_free(mock);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_worker_check__refuses_what_it_cannot_serve),
		cmocka_unit_test(
		    test_readiness__follows_kafka_the_ledger_and_the_store_within_seconds),
	};

	if (geteuid() != 0) {
		fprintf(stderr, "skipped: `taskbox worker` builds sandboxes, which needs root\n");
		return 77;
	}
	if (!getenv("TASKBOX_TEST_REDIS") || !getenv("TASKBOX_TEST_S3_ENDPOINT") ||
	    !getenv("TASKBOX_TEST_S3_ACCESS_KEY")) {
		fprintf(stderr, "skipped: TASKBOX_TEST_REDIS and TASKBOX_TEST_S3_* unset "
				"(deploy/local/services start)\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
