/*
 * test_budget.c: the task's budgets held against a hostile agent, through
 * the real egress (egress.c's hooks and proxy) and a fake OpenAI-style
 * provider of the test's own that bills every answer it starts, whatever
 * the client does with it. The agent leaves streams early, streams
 * without asking for usage, asks many answers at once, and asks answers
 * bigger than the byte budget; each time what the provider billed stays
 * within the budget and one request's worth, and the proxy counts at
 * least what was billed.
 *
 * The test runs in a network namespace of its own (so the proxy's fixed
 * port is its own): it needs root and skips without. Only that
 * namespace's loopback is ever addressed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "egress.h"
#include "tb/runtime.h"

#define IN_TOKENS 100  /* every answer the provider starts bills these */
#define OUT_TOKENS 300 /* ... and these */
#define PER_REQUEST (IN_TOKENS + OUT_TOKENS)
#define BIG_BYTES (2u << 20) /* /v1/big's answer */
#define MAX_CLIENTS 32

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	nanosleep(&ts, NULL);
}

/* ------------------------------------------------------ fake provider */

static struct provider {
	int fd;
	unsigned port;
	volatile int stop;
	pthread_t th;
	pthread_mutex_t lock;
	pthread_t conns[256];
	int nconns;
	/* what it billed, and what it saw */
	uint64_t billed, served, asked_usage;
} P = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int send_str(int fd, const char *s, size_t n)
{
	for (size_t done = 0; done < n;) {
		ssize_t w = send(fd, s + done, n - done, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		done += (size_t)w;
	}
	return 0;
}

/* One request: read whole (head and Content-Length body), answered by
 * its path: /v1/chat/completions (JSON after 300 ms, or a stream of 20
 * chunks 15 ms apart ending with the usage when asked for it),
 * /v1/nousage/... the same never reporting usage, /v1/big 2 MiB. Every
 * chat answer started is billed, even when its client leaves. */
static void *conn_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char head[65536], *body = NULL;
	size_t have = 0;
	char *end = NULL;
	struct timeval tv = { 10, 0 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (!end && have < sizeof(head) - 1) {
		ssize_t r = recv(fd, head + have, sizeof(head) - 1 - have, 0);
		if (r <= 0)
			goto out;
		have += (size_t)r;
		head[have] = '\0';
		end = strstr(head, "\r\n\r\n");
	}
	if (!end)
		goto out;
	char *cl = strcasestr(head, "\r\nContent-Length: ");
	size_t blen = cl ? strtoul(cl + 18, NULL, 10) : 0, got = have - (size_t)(end + 4 - head);
	if (!(body = calloc(1, blen + 1)))
		goto out;
	memcpy(body, end + 4, got < blen ? got : blen);
	while (got < blen) {
		ssize_t r = recv(fd, body + got, blen - got, 0);
		if (r <= 0)
			goto out;
		got += (size_t)r;
	}
	int big = strstr(head, " /v1/big ") != NULL, nousage = strstr(head, "/nousage/") != NULL;
	if (big) {
		static char chunk[65536];
		char h[128];
		memset(chunk, 'x', sizeof(chunk));
		int hl = snprintf(h, sizeof(h),
				  "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
				  "Content-Length: %u\r\nConnection: close\r\n\r\n",
				  BIG_BYTES);
		if (send_str(fd, h, (size_t)hl) < 0)
			goto out;
		for (size_t sent = 0; sent < BIG_BYTES; sent += sizeof(chunk))
			if (send_str(fd, chunk, sizeof(chunk)) < 0)
				goto out;
		goto out;
	}
	json_t *o = json_loads(body, 0, NULL);
	int stream = json_is_true(json_object_get(o, "stream"));
	int asked =
	    json_is_true(json_object_get(json_object_get(o, "stream_options"), "include_usage"));
	json_decref(o);
	pthread_mutex_lock(&P.lock);
	P.billed += PER_REQUEST;
	P.served++;
	P.asked_usage += asked;
	pthread_mutex_unlock(&P.lock);
	char usage[128];
	snprintf(usage, sizeof(usage), "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}",
		 IN_TOKENS, OUT_TOKENS);
	if (!stream) {
		char resp[512], js[256];
		sleep_ms(300);
		int jl = snprintf(js, sizeof(js), "{\"choices\":[{\"message\":{}}]%s%s}",
				  nousage ? "" : ",", nousage ? "" : usage);
		int rl = snprintf(resp, sizeof(resp),
				  "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
				  "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
				  jl, js);
		send_str(fd, resp, (size_t)rl);
		goto out;
	}
	static const char sse_head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
				       "Connection: close\r\n\r\n";
	static const char piece[] = "data: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n";
	if (send_str(fd, sse_head, sizeof(sse_head) - 1) < 0)
		goto out;
	for (int i = 0; i < 20; i++) {
		sleep_ms(15);
		if (send_str(fd, piece, sizeof(piece) - 1) < 0)
			goto out; /* the client left: billed all the same */
	}
	if (asked && !nousage) {
		char last[256];
		int ll = snprintf(last, sizeof(last), "data: {\"choices\":[],%s}\n\n", usage);
		if (send_str(fd, last, (size_t)ll) < 0)
			goto out;
	}
	send_str(fd, "data: [DONE]\n\n", 14);
out:
	free(body);
	close(fd);
	return NULL;
}

static void *provider_main(void *arg)
{
	(void)arg;
	for (int rounds = 0; rounds < 3000 && !P.stop; rounds++) { /* 5 min at most */
		struct pollfd pf = { P.fd, POLLIN, 0 };
		if (poll(&pf, 1, 100) <= 0)
			continue;
		int fd = accept(P.fd, NULL, NULL);
		if (fd < 0)
			continue;
		pthread_mutex_lock(&P.lock);
		int room = P.nconns < (int)(sizeof(P.conns) / sizeof(P.conns[0]));
		if (room &&
		    pthread_create(&P.conns[P.nconns], NULL, conn_main, (void *)(intptr_t)fd) == 0)
			P.nconns++;
		else
			close(fd);
		pthread_mutex_unlock(&P.lock);
	}
	return NULL;
}

static int provider_running;

static void provider_start(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	P.stop = 0;
	P.billed = P.served = P.asked_usage = 0;
	P.nconns = 0;
	P.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(bind(P.fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(P.fd, 64), 0);
	assert_int_equal(getsockname(P.fd, (struct sockaddr *)&a, &al), 0);
	P.port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&P.th, NULL, provider_main, NULL), 0);
	provider_running = 1;
}

static void provider_stop(void)
{
	if (!provider_running)
		return;
	provider_running = 0;
	P.stop = 1;
	pthread_join(P.th, NULL);
	for (int i = 0; i < P.nconns; i++)
		pthread_join(P.conns[i], NULL);
	close(P.fd);
}

/* ------------------------------------------------------------- egress */

static tb_endpoint_t ep;
static tb_runtime_t rt;
static tb_egress_t *E;
static char token[1024];

static void egress_start(const tb_limits_t *lim)
{
	struct timespec ts;
	tb_error_t err;
	char *envp[64];

	memset(&ep, 0, sizeof(ep));
	ep.name = "llm";
	ep.host = "127.0.0.1";
	ep.port = P.port;
	ep.scheme = "http";
	ep.dialect = TB_DIALECT_OPENAI;
	TB_SET_HAS(&ep, TB_ENDPOINT_DIALECT);
	memset(&rt, 0, sizeof(rt));
	rt.endpoints = (tb_list_t){ .n = 1, .items = &ep };
	rt.agent.max_events_per_second = 1000;
	clock_gettime(CLOCK_REALTIME, &ts);
	tb_egress_conf_t ec = { .rt = &rt,
				.budget = lim,
				.task_id = "budget-task",
				.attempt = 1,
				.expires_ms = (uint64_t)ts.tv_sec * 1000 + 600000 };
	if (tb_egress_start(&E, &ec, &err) != 0)
		fail_msg("egress: %s", err.msg);
	int n = tb_egress_env(E, envp, 0, 64);
	token[0] = '\0';
	for (int i = 0; i < n; i++) {
		if (!strncmp(envp[i], "TASKBOX_TOKEN=", 14))
			snprintf(token, sizeof(token), "%s", envp[i] + 14);
		free(envp[i]);
	}
	assert_true(token[0] != '\0');
}

/* What the proxy counted: tokens, requests recorded, bytes down. */
static void counted(uint64_t *tokens, uint64_t *requests, uint64_t *bytes_down)
{
	tb_list_t l;
	*tokens = *requests = *bytes_down = 0;
	assert_int_equal(tb_egress_usage(E, &l), 0);
	tb_usage_egress_t *u = l.items;
	for (size_t i = 0; i < l.n; i++) {
		*tokens += u[i].input_tokens + u[i].output_tokens;
		*requests += u[i].requests;
		*bytes_down += u[i].bytes_down;
		free(u[i].endpoint);
	}
	free(l.items);
}

/* Waits (10 s at most) until the proxy recorded @p n requests: every
 * reservation handed back, every answer counted. */
static void settle(uint64_t n)
{
	uint64_t t, r, b;
	uint64_t until = mono_ms() + 10000;
	do {
		counted(&t, &r, &b);
		if (r >= n)
			return;
		sleep_ms(20);
	} while (mono_ms() < until);
	fail_msg("the proxy recorded %llu requests of %llu", (unsigned long long)r,
		 (unsigned long long)n);
}

static void egress_stop(void)
{
	tb_egress_free(E);
	E = NULL;
}

/* ------------------------------------------------------------ clients */

typedef struct ask {
	const char *path;
	const char *body;
	size_t keep; /* read this much of the body and leave; 0: all */
	int status;
	size_t got; /* body bytes read (framing included) */
	pthread_t th;
} ask_t;

/* One request through the proxy, as the agent would send it. */
static void *ask_main(void *arg)
{
	ask_t *a = arg;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(TB_EGRESS_PORT) };
	char req[4096], buf[65536];
	struct timeval tv = { 30, 0 };
	size_t have = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a->status = -1, a->got = 0;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto out;
	int rl = snprintf(req, sizeof(req),
			  "POST /llm%s HTTP/1.1\r\nHost: llm\r\nX-Taskbox-Token: %s\r\n"
			  "Content-Type: application/json\r\nContent-Length: %zu\r\n"
			  "Connection: close\r\n\r\n%s",
			  a->path, token, strlen(a->body), a->body);
	if (send_str(fd, req, (size_t)rl) < 0)
		goto out;
	for (int head_done = 0;;) {
		ssize_t r = recv(fd, buf + have, sizeof(buf) - 1 - have, 0);
		if (r <= 0)
			break;
		if (head_done) {
			a->got += (size_t)r; /* the body is counted, not kept */
		} else {
			have += (size_t)r;
			buf[have] = '\0';
			char *e = strstr(buf, "\r\n\r\n");
			if (!e && have == sizeof(buf) - 1)
				break;
			if (!e)
				continue;
			a->status = (int)strtol(buf + 9, NULL, 10); /* "HTTP/1.1 200" */
			a->got = have - (size_t)(e + 4 - buf);
			head_done = 1, have = 0;
		}
		if (a->keep && a->got >= a->keep)
			break; /* leaves the answer early */
	}
out:
	close(fd);
	return NULL;
}

/* @p n requests at once (or one after another when !@p together). */
static void ask_all(ask_t *v, int n, int together)
{
	for (int i = 0; i < n; i++) {
		if (together) {
			assert_int_equal(pthread_create(&v[i].th, NULL, ask_main, &v[i]), 0);
		} else {
			ask_main(&v[i]);
		}
	}
	for (int i = 0; together && i < n; i++)
		pthread_join(v[i].th, NULL);
}

static int count_status(const ask_t *v, int n, int status)
{
	int c = 0;
	for (int i = 0; i < n; i++)
		c += v[i].status == status;
	return c;
}

static tb_limits_t tokens_budget(uint64_t max)
{
	tb_limits_t lim = { 0 };
	lim.max_tokens = max;
	TB_SET_HAS(&lim, TB_LIMIT_MAX_TOKENS);
	return lim;
}

/* What the provider billed stays within the budget and one request's
 * worth, and the proxy counted at least that. */
static void within(uint64_t budget, uint64_t one, int nasked)
{
	uint64_t tokens, requests, bytes;
	settle((uint64_t)nasked);
	counted(&tokens, &requests, &bytes);
	if (P.billed > budget + one || tokens < P.billed)
		fail_msg("billed %llu against a budget of %llu (+%llu), counted %llu",
			 (unsigned long long)P.billed, (unsigned long long)budget,
			 (unsigned long long)one, (unsigned long long)tokens);
}

/* ------------------------------------------------------------- tests */

static const char STREAM_USAGE[] =
    "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
    "\"max_tokens\":300,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
static const char STREAM_PLAIN[] =
    "{\"model\":\"m\",\"stream\":true,\"max_tokens\":300,\"messages\":[{\"role\":\"user\","
    "\"content\":\"hi\"}]}";
static const char ANSWER[] =
    "{\"model\":\"m\",\"max_tokens\":300,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
static const char ANSWER_UNDECLARED[] =
    "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

/* Streams asked with their usage and left after 64 bytes, before the
 * usage came: each counted at its worst case, so the budget stops them. */
static void test_budget__streams_left_early_are_counted(void **state)
{
	ask_t v[8];
	tb_limits_t lim = tokens_budget(1000);

	(void)state;
	provider_start();
	egress_start(&lim);
	for (int i = 0; i < 8; i++)
		v[i] = (ask_t){ .path = "/v1/chat/completions", .body = STREAM_USAGE, .keep = 64 };
	for (int i = 0; i < 8; i++) {
		ask_all(&v[i], 1, 0);
		settle((uint64_t)i + 1); /* each left, then the next */
	}
	within(1000, PER_REQUEST, 8);
	assert_true(count_status(v, 8, 402) >= 4);
	egress_stop();
	provider_stop();
}

/* Streams that do not ask for usage are made to (the provider sees
 * include_usage), so they are counted exactly; a provider that never
 * reports a stream's usage has each charged its worst case. */
static void test_budget__streams_without_usage_are_counted(void **state)
{
	ask_t v[10];
	tb_limits_t lim = tokens_budget(1000);
	uint64_t tokens, requests, bytes;

	(void)state;
	provider_start();
	egress_start(&lim);
	for (int i = 0; i < 10; i++)
		v[i] = (ask_t){ .path = "/v1/chat/completions", .body = STREAM_PLAIN };
	ask_all(v, 10, 0);
	within(1000, PER_REQUEST, 10);
	assert_int_equal(P.asked_usage, P.served);
	counted(&tokens, &requests, &bytes);
	assert_int_equal(tokens, P.billed); /* reported: exact */
	assert_int_equal(count_status(v, 10, 402), 10 - (int)P.served);
	egress_stop();
	provider_stop();

	provider_start();
	egress_start(&lim);
	for (int i = 0; i < 10; i++)
		v[i] = (ask_t){ .path = "/v1/nousage/chat/completions", .body = STREAM_PLAIN };
	ask_all(v, 10, 0);
	within(1000, PER_REQUEST, 10);
	assert_true(P.served >= 1 && P.served < 10);
	egress_stop();
	provider_stop();
}

/* Answers in flight together: each request's worst case is reserved as
 * it goes, and a request waits while the others may spend what is left,
 * so together they stop at the budget and one request's worth; with no
 * max_tokens in the requests, the endpoint's default is reserved. */
static void test_budget__answers_in_flight_together_stop_at_the_budget(void **state)
{
	ask_t v[20];
	tb_limits_t lim = tokens_budget(1000);

	(void)state;
	for (int round = 0; round < 2; round++) {
		provider_start();
		egress_start(&lim);
		for (int i = 0; i < 20; i++)
			v[i] = (ask_t){ .path = "/v1/chat/completions",
					.body = round ? ANSWER_UNDECLARED : ANSWER };
		ask_all(v, 20, 1);
		within(1000, PER_REQUEST, 20);
		assert_int_equal(count_status(v, 20, 200), (int)P.served);
		assert_int_equal(count_status(v, 20, 402), 20 - (int)P.served);
		egress_stop();
		provider_stop();
	}
	/* a request budget holds exactly, all at once too */
	lim = (tb_limits_t){ 0 };
	lim.max_requests = 5;
	TB_SET_HAS(&lim, TB_LIMIT_MAX_REQUESTS);
	provider_start();
	egress_start(&lim);
	for (int i = 0; i < 20; i++)
		v[i] = (ask_t){ .path = "/v1/chat/completions", .body = ANSWER };
	ask_all(v, 20, 1);
	settle(20);
	assert_int_equal(P.served, 5);
	assert_int_equal(count_status(v, 20, 402), 15);
	egress_stop();
	provider_stop();
}

/* Answers bigger than the byte budget are cut as they pass it, one alone
 * and 16 at once: what reaches the agent stays within the budget and
 * one answer's worth. */
static void test_budget__answers_past_the_byte_budget_are_cut(void **state)
{
	ask_t v[16];
	tb_limits_t lim = { 0 };
	uint64_t tokens, requests, bytes;
	size_t total = 0;

	(void)state;
	lim.max_egress_mb = 1;
	TB_SET_HAS(&lim, TB_LIMIT_MAX_EGRESS_MB);
	provider_start();
	egress_start(&lim);
	v[0] = (ask_t){ .path = "/v1/big", .body = "{}" };
	v[1] = (ask_t){ .path = "/v1/big", .body = "{}" };
	ask_all(v, 2, 0);
	assert_int_equal(v[0].status, 200);
	assert_true(v[0].got < BIG_BYTES);
	assert_true(v[0].got >= (1u << 20) - 65536);
	assert_int_equal(v[1].status, 402);
	settle(2);
	assert_true(tb_egress_budget_spent(E, NULL, 0));
	egress_stop();
	provider_stop();

	provider_start();
	egress_start(&lim);
	for (int i = 0; i < 16; i++)
		v[i] = (ask_t){ .path = "/v1/big", .body = "{}" };
	ask_all(v, 16, 1);
	settle(16);
	for (int i = 0; i < 16; i++) {
		assert_true(v[i].got < BIG_BYTES);
		total += v[i].got;
	}
	counted(&tokens, &requests, &bytes);
	if (total > (1u << 20) + BIG_BYTES || bytes > (1u << 20) + BIG_BYTES)
		fail_msg("%zu bytes reached the agent, %llu counted, against 1 MiB", total,
			 (unsigned long long)bytes);
	egress_stop();
	provider_stop();
}

/* --------------------------------------------------------------- main */

/* What a failed test left running is stopped: the next starts clean. */
static int teardown(void **state)
{
	(void)state;
	egress_stop();
	provider_stop();
	return 0;
}

/* A network namespace of the test's own, its loopback up. */
static int own_network(void)
{
	struct ifreq ifr = { 0 };
	int fd;

	if (unshare(CLONE_NEWNET) < 0)
		return -1;
	if ((fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	int rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
	ifr.ifr_flags |= IFF_UP;
	if (rc == 0)
		rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
	close(fd);
	return rc;
}

int main(void)
{
	if (geteuid() != 0 || own_network() < 0) {
		printf("test_budget: skipped: needs root for a network namespace of its own\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_budget__streams_left_early_are_counted, teardown),
		cmocka_unit_test_teardown(test_budget__streams_without_usage_are_counted, teardown),
		cmocka_unit_test_teardown(
		    test_budget__answers_in_flight_together_stop_at_the_budget, teardown),
		cmocka_unit_test_teardown(test_budget__answers_past_the_byte_budget_are_cut,
					  teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
