/*
 * bench_proxy.c: what the egress proxy adds to a request (issue 7's
 * target: <= 0.3 ms at p50). In one run, against a loopback HTTP/1.1
 * keep-alive server of its own (one epoll thread answering every request
 * with the same 200 of about 200 bytes), a keep-alive libcurl client
 * sends the same requests two ways:
 *
 *   direct   http://127.0.0.1:<server>/v1/ping
 *   proxy    http://127.0.0.1:<proxy>/bench/v1/ping with X-Taskbox-Token,
 *            through tb_proxy (proxy.h) listening on the host's loopback
 *            (tb_proxy_listen with no namespace: the serving code is the
 *            same as in a sandbox's), with a policy allowing the server
 *            as endpoint "bench" and an Authorization header it adds from
 *            an environment variable set here
 *
 * Figures: GET and POST (1 KiB body) latency, median and p99, each way;
 * the latency the proxy adds (proxy minus direct); what accounting and
 * budgets add (issue 26's target: <= 0.05 ms at p50), against a second
 * proxy whose endpoint has a dialect (every answer's usage read) and
 * whose hooks admit each request against budgets and tally it, as
 * worker/egress/egress.c does; sequential requests/s each way; and 8
 * concurrent clients' aggregate requests/s each way.
 * The shared rate limiter (issue 26's targets: at most one Redis round
 * trip per request, the rate held within 5 %), on a redis-server of the
 * bench's own on loopback: one rate turn asked alone (the round trip it
 * costs), what a third proxy whose endpoint has a rate_limit too high to
 * wait for adds over the accounted one, Redis's own count of scripts run per
 * request (its round trips), and 8 clients through a fourth proxy limited to 200 requests/s
 * for 5 s: the rate they get against the limit.
 * Recording and replay (issue 27): two proxies started alike, one
 * recording every exchange, alternated; the recording replayed by a
 * third, against the proxied loopback server; a 10 MiB answer through a
 * proxy, plain and recorded, with the peak RSS it added.
 * Sequential figures alternate blocks of direct and proxied requests, so
 * a machine that gets busier mid-run slows both alike. It checks that
 * every proxied request reached the server with the credential and that
 * none of the direct ones did.
 *
 * Usage: bench_proxy [--json] [-n N]   (N sequential requests per figure)
 * Needs nothing but loopback; timing figures are for reading, never for
 * asserting. What the worker does around the proxy (the egress events'
 * queue) is not measured: the audit callback only counts.
 */
#include "bench_util.h"
#include "proxy.h"
#include "ratelimit.h"
#include "recording.h"
#include "replay.h"
#include "task_token.h"
#include "tb/runtime.h"

#include <hiredis/hiredis.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SECRET_ENV "TB_BENCH_PROVIDER_KEY"
#define SECRET "sk-bench-0123456789abcdef0123"
#define TASK "bench-proxy"
#define ATTEMPT 1
#define BINDING "bench"
#define WARMUP 500
#define BLOCKS 10 /* sequential figures: direct and proxied blocks alternate */
#define CLIENTS 8 /* concurrent clients */
#define PER_CLIENT 1000
#define BODY_LEN 1024
#define SRV_CONNS 64
#define SRV_BUF 8192

/* ------------------------------------------------------------ output */

/* ------------------------------------------------------------ server */

typedef struct sconn {
	int fd, slot;
	size_t have;
	char buf[SRV_BUF];
} sconn_t;

static struct server {
	int listen_fd, stop_fd, ep;
	unsigned port;
	pthread_t th;
	sconn_t *conns[SRV_CONNS];
	char resp[512];
	size_t resp_len;
	atomic_ulong requests, keyed; /* all; those with the injected credential */
} srv = { .listen_fd = -1, .stop_fd = -1, .ep = -1 };

static void srv_close(sconn_t *c)
{
	epoll_ctl(srv.ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	srv.conns[c->slot] = NULL;
	free(c);
}

static void srv_accept(void)
{
	for (int k = 0; k < SRV_CONNS; k++) {
		int fd = accept4(srv.listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		int slot = 0, one = 1;
		while (slot < SRV_CONNS && srv.conns[slot])
			slot++;
		sconn_t *c = slot < SRV_CONNS ? malloc(sizeof(*c)) : NULL;
		if (!c) {
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd, c->slot = slot, c->have = 0;
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
		if (epoll_ctl(srv.ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
			close(fd);
			free(c);
			continue;
		}
		srv.conns[slot] = c;
	}
}

/* The value of header @p name in the head @p h (NUL-terminated), or NULL. */
static const char *srv_header(const char *h, const char *name)
{
	size_t nl = strlen(name);
	for (const char *l = strstr(h, "\r\n"); l; l = strstr(l + 2, "\r\n"))
		if (strncasecmp(l + 2, name, nl) == 0 && l[2 + nl] == ':')
			return l + 3 + nl;
	return NULL;
}

/* Answers every whole request in @p c's buffer; 0 to close. */
static int srv_serve(sconn_t *c)
{
	for (int k = 0; k < 64; k++) {
		char *end = memmem(c->buf, c->have, "\r\n\r\n", 4);
		if (!end)
			return c->have < sizeof(c->buf) - 1;
		size_t hlen = (size_t)(end - c->buf) + 4;
		char save = c->buf[hlen - 2];
		c->buf[hlen - 2] = '\0';
		const char *cl = srv_header(c->buf, "Content-Length");
		const char *auth = srv_header(c->buf, "Authorization");
		size_t blen = cl ? strtoul(cl, NULL, 10) : 0;
		int keyed =
		    auth && (strncmp(auth, " Bearer " SECRET "\r", 9 + strlen(SECRET)) == 0 ||
			     strncmp(auth, " Bearer " SECRET "-held\r", 14 + strlen(SECRET)) == 0);
		c->buf[hlen - 2] = save;
		if (blen > sizeof(c->buf) - 1 - hlen)
			return 0;
		if (c->have < hlen + blen)
			return 1;
		atomic_fetch_add(&srv.requests, 1);
		if (keyed)
			atomic_fetch_add(&srv.keyed, 1);
		/* One small answer into an empty socket buffer: all of it goes. */
		if (send(c->fd, srv.resp, srv.resp_len, MSG_NOSIGNAL) != (ssize_t)srv.resp_len)
			return 0;
		memmove(c->buf, c->buf + hlen + blen, c->have - hlen - blen);
		c->have -= hlen + blen;
	}
	return 1;
}

static void *srv_main(void *arg)
{
	struct epoll_event evs[SRV_CONNS];
	(void)arg;
	for (;;) {
		int n = epoll_wait(srv.ep, evs, SRV_CONNS, 1000);
		if (n < 0 && errno != EINTR)
			break;
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == &srv.stop_fd)
				return NULL;
			if (evs[i].data.ptr == &srv.listen_fd) {
				srv_accept();
				continue;
			}
			sconn_t *c = evs[i].data.ptr;
			ssize_t r = recv(c->fd, c->buf + c->have, sizeof(c->buf) - 1 - c->have, 0);
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
				srv_close(c);
				continue;
			}
			if (r > 0) {
				c->have += (size_t)r;
				if (!srv_serve(c))
					srv_close(c);
			}
		}
	}
	return NULL;
}

static int srv_start(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	char body[256];

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int bl = snprintf(body, sizeof(body),
			  "{\"id\":\"bench-0001\",\"object\":\"ping\",\"ok\":true,\"model\":"
			  "\"canned\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1},"
			  "\"text\":\"%.*s\"}",
			  80,
			  "................................................................"
			  "................................................................");
	srv.resp_len = (size_t)snprintf(srv.resp, sizeof(srv.resp),
					"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
					"Content-Length: %d\r\n\r\n%s",
					bl, body);
	struct epoll_event lev = { .events = EPOLLIN, .data.ptr = &srv.listen_fd };
	struct epoll_event sev = { .events = EPOLLIN, .data.ptr = &srv.stop_fd };
	if ((srv.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
	    bind(srv.listen_fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(srv.listen_fd, 128) < 0 ||
	    getsockname(srv.listen_fd, (struct sockaddr *)&a, &al) < 0 ||
	    (srv.stop_fd = eventfd(0, EFD_CLOEXEC)) < 0 ||
	    (srv.ep = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    epoll_ctl(srv.ep, EPOLL_CTL_ADD, srv.listen_fd, &lev) < 0 ||
	    epoll_ctl(srv.ep, EPOLL_CTL_ADD, srv.stop_fd, &sev) < 0 ||
	    pthread_create(&srv.th, NULL, srv_main, NULL) != 0) {
		fprintf(stderr, "bench proxy: server: %s\n", strerror(errno));
		return -1;
	}
	srv.port = ntohs(a.sin_port);
	return 0;
}

static void srv_stop(void)
{
	uint64_t one = 1;
	if (write(srv.stop_fd, &one, sizeof(one)) != sizeof(one))
		fprintf(stderr, "bench proxy: cannot wake the server\n");
	pthread_join(srv.th, NULL);
	for (int i = 0; i < SRV_CONNS; i++)
		if (srv.conns[i])
			srv_close(srv.conns[i]);
	close(srv.ep);
	close(srv.stop_fd);
	close(srv.listen_fd);
}

/* ------------------------------------------------------------ client */

typedef struct client {
	CURL *h;
	struct curl_slist *hdrs;
	char get_url[128], post_url[128];
	int failed; /* requests that failed or did not answer 200 */
} client_t;

static char body[BODY_LEN];

static size_t discard(char *d, size_t size, size_t n, void *ud)
{
	(void)d, (void)ud;
	return size * n;
}

/* A keep-alive client of 127.0.0.1:@p port, paths under @p prefix ("" or
 * "/bench"), sending @p token when not NULL. */
static int client_init(client_t *c, unsigned port, const char *prefix, const char *token)
{
	char h[TB_TASK_TOKEN_MAX + 32];

	memset(c, 0, sizeof(*c));
	snprintf(c->get_url, sizeof(c->get_url), "http://127.0.0.1:%u%s/v1/ping", port, prefix);
	snprintf(c->post_url, sizeof(c->post_url), "http://127.0.0.1:%u%s/v1/echo", port, prefix);
	if (!(c->h = curl_easy_init()) || !(c->hdrs = curl_slist_append(NULL, "Expect:")))
		return -1;
	if (token) {
		snprintf(h, sizeof(h), "X-Taskbox-Token: %s", token);
		struct curl_slist *l = curl_slist_append(c->hdrs, h);
		if (!l)
			return -1;
		c->hdrs = l;
	}
	curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->hdrs);
	curl_easy_setopt(c->h, CURLOPT_PROXY, "");
	curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c->h, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(c->h, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, discard);
	return 0;
}

static void client_free(client_t *c)
{
	if (c->h)
		curl_easy_cleanup(c->h);
	curl_slist_free_all(c->hdrs);
	c->h = NULL, c->hdrs = NULL;
}

static int request(client_t *c, int post)
{
	long status = 0;

	if (post) {
		curl_easy_setopt(c->h, CURLOPT_URL, c->post_url);
		curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE, (long)BODY_LEN);
	} else {
		curl_easy_setopt(c->h, CURLOPT_URL, c->get_url);
		curl_easy_setopt(c->h, CURLOPT_HTTPGET, 1L);
	}
	if (curl_easy_perform(c->h) != CURLE_OK ||
	    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK || status != 200) {
		c->failed++;
		return -1;
	}
	return 0;
}

/* @p n requests on @p c, each timed into @p t (ms); adds the time they
 * took to *total_ms. */
static void timed(client_t *c, int post, int n, double *t, double *total_ms)
{
	double start = tb_bench_mono_ms(), t0 = start;
	for (int i = 0; i < n; i++) {
		request(c, post);
		double t1 = tb_bench_mono_ms();
		t[i] = t1 - t0;
		t0 = t1;
	}
	*total_ms += t0 - start;
}

/* ------------------------------------------------------------ figures */

static client_t direct, proxied, accounted, paced;
static long direct_sent, proxied_sent; /* what the server should have seen */
static long accounted_sent, paced_sent, held_sent;

typedef struct figure {
	double median, p99, rate; /* ms, ms, requests/s */
} figure_t;

/* @p n requests on each of @p a and @p b, in alternating blocks, after a
 * warm-up: so a machine that gets busier mid-run slows both alike. */
static int alternate(client_t *a, client_t *b, figure_t *fa, figure_t *fb, int post, int n)
{
	double *td = malloc((size_t)n * sizeof(double)), *tp = malloc((size_t)n * sizeof(double));
	double dms = 0, pms = 0;
	int done = 0;

	if (!td || !tp) {
		free(td);
		free(tp);
		return -1;
	}
	for (int i = 0; i < WARMUP; i++) {
		request(a, post);
		request(b, post);
	}
	for (int k0 = 0; k0 < BLOCKS; k0++) {
		int k = (n - done) / (BLOCKS - k0);
		timed(a, post, k, td + done, &dms);
		timed(b, post, k, tp + done, &pms);
		done += k;
	}
	fa->rate = dms > 0 ? n / (dms / 1000) : 0;
	fb->rate = pms > 0 ? n / (pms / 1000) : 0;
	tb_bench_stats(td, n, &fa->median, &fa->p99);
	tb_bench_stats(tp, n, &fb->median, &fb->p99);
	free(td);
	free(tp);
	return 0;
}

/* @p n requests direct and through the proxy. */
static int sequential(figure_t *d, figure_t *p, int post, int n)
{
	if (alternate(&direct, &proxied, d, p, post, n) < 0)
		return -1;
	direct_sent += WARMUP + n, proxied_sent += WARMUP + n;
	return 0;
}

static struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int ready, open;
} gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };

typedef struct worker {
	client_t c;
	double end_ms;
} worker_t;

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	for (int i = 0; i < 20; i++) /* the connection, made before the clock starts */
		request(&w->c, 0);
	pthread_mutex_lock(&gate.lock);
	gate.ready++;
	pthread_cond_broadcast(&gate.cond);
	while (!gate.open)
		pthread_cond_wait(&gate.cond, &gate.lock);
	pthread_mutex_unlock(&gate.lock);
	for (int i = 0; i < PER_CLIENT; i++)
		request(&w->c, 0);
	w->end_ms = tb_bench_mono_ms();
	return NULL;
}

/* CLIENTS keep-alive clients of @p port, PER_CLIENT GETs each, all at
 * once: aggregate requests/s from the start to the last one's end. Adds
 * the requests sent to *sent and the failed ones to *failed. */
static double concurrent(unsigned port, const char *prefix, const char *token, long *sent,
			 int *failed)
{
	static worker_t w[CLIENTS];
	pthread_t th[CLIENTS];
	int started = 0;
	double end = 0, start;

	gate.ready = gate.open = 0;
	for (; started < CLIENTS; started++)
		if (client_init(&w[started].c, port, prefix, token) < 0 ||
		    pthread_create(&th[started], NULL, worker_main, &w[started]) != 0) {
			client_free(&w[started].c);
			break;
		}
	pthread_mutex_lock(&gate.lock);
	while (gate.ready < started)
		pthread_cond_wait(&gate.cond, &gate.lock);
	gate.open = 1;
	start = tb_bench_mono_ms();
	pthread_cond_broadcast(&gate.cond);
	pthread_mutex_unlock(&gate.lock);
	for (int i = 0; i < started; i++) {
		pthread_join(th[i], NULL);
		end = w[i].end_ms > end ? w[i].end_ms : end;
		*failed += w[i].c.failed;
		client_free(&w[i].c);
	}
	*sent += started * (PER_CLIENT + 20);
	if (started < CLIENTS)
		fprintf(stderr, "bench proxy: only %d of %d clients started\n", started, CLIENTS);
	return started == CLIENTS && end > start ? CLIENTS * PER_CLIENT / ((end - start) / 1000)
						 : 0;
}

/* ------------------------------------------------------------ audit */

static atomic_ulong audited;

static void on_audit(void *ud, const tb_proxy_audit_t *a)
{
	(void)ud, (void)a;
	atomic_fetch_add(&audited, 1);
}

/* The accounted proxy's hooks: the work worker/egress/egress.c does per
 * request for the attempt's usage and budgets (a lock, a budget check, a
 * tally), without its events. */
static struct {
	pthread_mutex_t lock;
	uint64_t admitted, requests, bytes, tokens, reserved;
} tally = { PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0 };

static atomic_ulong metered;

/* The meter hook: every answer's bytes counted as they pass. */
static int on_meter(void *ud, uint64_t bytes)
{
	(void)ud;
	atomic_fetch_add(&metered, bytes);
	return 0;
}

static int on_admit(void *ud, const tb_endpoint_t *ep, const tb_proxy_cost_t *cost,
		    uint64_t waited_ms, tb_proxy_refusal_t *no)
{
	(void)ud, (void)ep, (void)waited_ms;
	pthread_mutex_lock(&tally.lock);
	int spent = tally.admitted >= UINT64_C(1) << 40 || tally.tokens >= UINT64_C(1) << 40;
	tally.admitted += !spent;
	tally.reserved += spent ? 0 : cost->input_tokens + cost->output_tokens;
	pthread_mutex_unlock(&tally.lock);
	if (spent) {
		no->status = 402;
		snprintf(no->reason, sizeof(no->reason), "spent");
		snprintf(no->body, sizeof(no->body), "{}");
	}
	return spent ? -1 : 0;
}

static void on_audit_accounted(void *ud, const tb_proxy_audit_t *a)
{
	on_audit(ud, a);
	pthread_mutex_lock(&tally.lock);
	tally.requests++;
	tally.bytes += a->bytes_in + a->bytes_out;
	if (a->tokens)
		tally.tokens += a->tokens->input + a->tokens->output;
	if (a->admitted) /* its reservation handed back */
		tally.reserved -= a->admitted->input_tokens + a->admitted->output_tokens;
	pthread_mutex_unlock(&tally.lock);
}

/* ------------------------------------------------------- rate limits */

#define HELD_RATE 200.0 /* requests/s the held-rate figure's endpoint allows */
#define HELD_SECONDS 5

static struct {
	pid_t pid;
	unsigned port;
	tb_ledger_t *ledger;
	tb_ratelimit_t *rl;
} redis = { .pid = -1 };

/* The pace hook, as worker/egress/egress.c's on_pace. */
static int on_pace(void *ud, const tb_endpoint_t *ep, const char *bucket, uint64_t waited_ms,
		   uint64_t *wait_ms, int *again, tb_proxy_refusal_t *no)
{
	uint64_t max = ep->rate_limit.max_wait_seconds * 1000;
	uint64_t left = max > waited_ms ? max - waited_ms : 0;
	tb_ledger_turn_t t;

	(void)ud;
	tb_ratelimit_take(redis.rl, bucket, &ep->rate_limit, left, &t);
	if (t.taken || t.wait_ms <= left) {
		*wait_ms = t.taken || t.wait_ms ? t.wait_ms : 1;
		*again = !t.taken;
		return 0;
	}
	no->status = 429;
	snprintf(no->reason, sizeof(no->reason), "rate limited");
	snprintf(no->body, sizeof(no->body), "{}");
	return -1;
}

/* A redis-server of the bench's own on a free loopback port, answering
 * within 5 s, and a ledger and limiter on it. @return 0, or -1 (said). */
static int redis_start(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	char port[16], url[64];
	tb_error_t err;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (access("/usr/bin/redis-server", X_OK) != 0) {
		fprintf(stderr, "bench proxy: no /usr/bin/redis-server: no rate-limit figures\n");
		return -1;
	}
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &al) < 0) {
		fprintf(stderr, "bench proxy: a free port: %s\n", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	redis.port = ntohs(a.sin_port);
	snprintf(port, sizeof(port), "%u", redis.port);
	if ((redis.pid = fork()) == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		execl("/usr/bin/redis-server", "redis-server", "--bind", "127.0.0.1", "--port",
		      port, "--save", "", "--appendonly", "no", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 50; i++) { /* up within 5 s */
		redisContext *c = redisConnect("127.0.0.1", (int)redis.port);
		int up = c && !c->err;
		redisFree(c);
		if (up)
			break;
		usleep(100000);
	}
	snprintf(url, sizeof(url), "redis://127.0.0.1:%u", redis.port);
	if (tb_ledger_open(&redis.ledger, url, "tb-bench", "bench-worker", &err) < 0 ||
	    tb_ratelimit_new(&redis.rl, redis.ledger, &err) < 0) {
		fprintf(stderr, "bench proxy: %s\n", err.msg);
		return -1;
	}
	return 0;
}

static void redis_stop(void)
{
	tb_ratelimit_free(redis.rl);
	tb_ledger_close(redis.ledger);
	if (redis.pid > 0) {
		kill(redis.pid, SIGTERM);
		waitpid(redis.pid, NULL, 0);
	}
}

/* Scripts Redis has been asked to run so far (each a round trip: the
 * limiter's only commands), or -1. */
static long redis_scripts(void)
{
	redisContext *c = redisConnect("127.0.0.1", (int)redis.port);
	redisReply *r = c && !c->err ? redisCommand(c, "INFO commandstats") : NULL;
	const char *at =
	    r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "cmdstat_eval:calls=") : NULL;
	long n = at ? strtol(at + 19, NULL, 10) : -1;
	freeReplyObject(r);
	redisFree(c);
	return n;
}

/* One rate turn asked alone, @p n times: its median and p99 (ms). */
static void rate_turns(int n, figure_t *f)
{
	tb_ledger_rate_t q = { "benchalone", 0, 0, 1000 };
	tb_ledger_turn_t t;
	tb_error_t err;
	double *ts = malloc((size_t)n * sizeof(double));

	if (!ts)
		return;
	for (int i = 0; i < n; i++) {
		double t0 = tb_bench_mono_ms();
		if (tb_ledger_rate_take(redis.ledger, &q, &t, &err) < 0)
			fprintf(stderr, "bench proxy: %s\n", err.msg);
		ts[i] = tb_bench_mono_ms() - t0;
	}
	tb_bench_stats(ts, n, &f->median, &f->p99);
	free(ts);
}

typedef struct held {
	client_t c;
	double until;
	long done;
} held_t;

static void *held_main(void *arg)
{
	held_t *h = arg;
	for (long i = 0; i < 100000 && tb_bench_mono_ms() < h->until; i++)
		if (request(&h->c, 0) == 0)
			h->done++;
	return NULL;
}

/* CLIENTS clients through @p port for HELD_SECONDS: requests/s they got
 * (the requests they made into *sent). */
static double held_rate(unsigned port, const char *token, long *sent)
{
	static held_t h[CLIENTS];
	pthread_t th[CLIENTS];
	int started = 0;
	long done = 0;
	double t0 = tb_bench_mono_ms();

	for (; started < CLIENTS; started++) {
		h[started] = (held_t){ .until = t0 + HELD_SECONDS * 1000.0 };
		if (client_init(&h[started].c, port, "/" BINDING, token) < 0 ||
		    pthread_create(&th[started], NULL, held_main, &h[started]) != 0) {
			client_free(&h[started].c);
			break;
		}
	}
	for (int i = 0; i < started; i++) {
		pthread_join(th[i], NULL);
		done += h[i].done;
		*sent += h[i].done + h[i].c.failed;
		client_free(&h[i].c);
	}
	double took = (tb_bench_mono_ms() - t0) / 1000;
	return took > 0 ? (double)done / took : 0;
}

/* ------------------------------------------------- recording, replay */

#define BIG_BYTES (10u << 20) /* the answer streamed through a recording proxy */

static long recorded_sent, replayed_sent, big_sent;

/* A server of one big answer: BIG_BYTES to each of two requests. */
static struct {
	int fd;
	unsigned port;
	pthread_t th;
} big = { .fd = -1 };

static void *big_main(void *arg)
{
	static char chunk[65536];
	char head[4096], h[200];

	(void)arg;
	memset(chunk, 'z', sizeof(chunk));
	for (int k = 0; k < 2; k++) {
		int c = accept(big.fd, NULL, NULL); /* SO_RCVTIMEO: at most 30 s */
		size_t have = 0;
		if (c < 0)
			return NULL;
		while (have < sizeof(head) - 1) {
			ssize_t r = recv(c, head + have, sizeof(head) - 1 - have, 0);
			if (r <= 0)
				break;
			have += (size_t)r;
			head[have] = '\0';
			if (strstr(head, "\r\n\r\n"))
				break;
		}
		int hl = snprintf(h, sizeof(h),
				  "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
				  "Content-Length: %u\r\nConnection: close\r\n\r\n",
				  BIG_BYTES);
		int ok = send(c, h, (size_t)hl, MSG_NOSIGNAL) == hl;
		for (size_t sent = 0; ok && sent < BIG_BYTES; sent += sizeof(chunk))
			ok = send(c, chunk, sizeof(chunk), MSG_NOSIGNAL) == (ssize_t)sizeof(chunk);
		close(c);
	}
	return NULL;
}

static int big_start(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	struct timeval tv = { 30, 0 };

	if ((big.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    setsockopt(big.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    bind(big.fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(big.fd, 4) < 0 ||
	    getsockname(big.fd, (struct sockaddr *)&a, &al) < 0 ||
	    pthread_create(&big.th, NULL, big_main, NULL) != 0) {
		fprintf(stderr, "bench proxy: big server: %s\n", strerror(errno));
		return -1;
	}
	big.port = ntohs(a.sin_port);
	return 0;
}

/* The peak resident memory this process added while one BIG_BYTES
 * answer streamed through the proxy on @p port, binding @p binding, in
 * MiB; -1 when it did not come whole. */
static double big_peak_mib(unsigned port, const char *binding, const char *token)
{
	char url[160], h[TB_TASK_TOKEN_MAX + 32];
	CURL *c = curl_easy_init();
	struct curl_slist *hdrs = NULL;
	curl_off_t got = 0;
	long status = 0;

	snprintf(url, sizeof(url), "http://127.0.0.1:%u/%s/big", port, binding);
	snprintf(h, sizeof(h), "X-Taskbox-Token: %s", token);
	if (!c || !(hdrs = curl_slist_append(NULL, h))) {
		curl_easy_cleanup(c);
		return -1;
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c, CURLOPT_PROXY, "");
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 60000L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
	tb_bench_reset_peak();
	long before = tb_bench_status_kib("VmRSS:");
	int ok = curl_easy_perform(c) == CURLE_OK &&
		 curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK &&
		 curl_easy_getinfo(c, CURLINFO_SIZE_DOWNLOAD_T, &got) == CURLE_OK &&
		 status == 200 && got == (curl_off_t)BIG_BYTES;
	long peak = tb_bench_status_kib("VmHWM:");
	big_sent++;
	if (!ok)
		fprintf(stderr, "bench proxy: %s: status %ld, %lld bytes\n", url, status,
			(long long)got);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(c);
	return ok ? (double)(peak - before) / 1024 : -1;
}

/* A proxy of @p base serving @p eps, recording into @p rec and replaying
 * @p replay (either may be NULL). */
static tb_proxy_t *proxy_with(const tb_proxy_conf_t *base, const tb_list_t *eps, tb_recorder_t *rec,
			      tb_replay_t *replay)
{
	tb_proxy_conf_t c = *base;
	tb_proxy_t *p = NULL;
	tb_error_t err;

	c.endpoints = eps, c.recorder = rec, c.replay = replay;
	if (tb_proxy_listen(&c.listen_fd, 0, 0, &err) < 0 || tb_proxy_start(&p, &c, &err) < 0) {
		fprintf(stderr, "bench proxy: %s\n", err.msg);
		return NULL;
	}
	return p;
}

/* The recording on @p fd, as a replay. */
static tb_replay_t *replay_of(int fd)
{
	off_t len = lseek(fd, 0, SEEK_END);
	char *bytes = len > 0 ? malloc((size_t)len) : NULL;
	tb_replay_conf_t how = { 0 };
	tb_recording_t rec;
	tb_replay_t *p = NULL;
	tb_error_t err;

	if (!bytes || pread(fd, bytes, (size_t)len, 0) != len ||
	    tb_recording_read(&rec, bytes, (size_t)len, &err) < 0 ||
	    tb_replay_new(&p, &rec, &how, "the bench's recording", &err) < 0)
		fprintf(stderr, "bench proxy: the recording does not replay\n");
	free(bytes);
	return p;
}

/* Recording's figures (issue 27: it adds at most 10 % to the proxy's
 * p50, streams a 10 MiB answer with flat memory) and replay's (it answers
 * at most as slowly as the server does directly). */
static int recording_figures(const tb_proxy_conf_t *base, const tb_endpoint_t *ep,
			     const char *token, int n, int *failed)
{
	static tb_endpoint_t rep, bigs[2];
	static tb_list_t reps = { 1, &rep }, bigl = { 2, bigs }, plains;
	tb_recording_conf_t how = { 1024, 1024 };
	tb_recorder_t *rec = NULL, *brec = NULL;
	tb_proxy_t *p = NULL, *bp = NULL, *p0 = NULL;
	tb_replay_t *replay = NULL;
	client_t plain = { 0 }, recorded = { 0 }, replayed = { 0 };
	figure_t pl, pr, dd, rr;
	tb_error_t err;
	int fd = memfd_create("bench-recording", MFD_CLOEXEC), rc = -1;
	int bfd = memfd_create("bench-recording-big", MFD_CLOEXEC);

	/* two proxies started alike, one recording: the same endpoint */
	rep = *ep;
	rep.record = true;
	plains = (tb_list_t){ 1, (void *)ep };
	if (fd < 0 || bfd < 0 || tb_recorder_new(&rec, fd, &how, TASK, ATTEMPT, NULL, &err) < 0 ||
	    tb_recorder_new(&brec, bfd, &how, TASK, ATTEMPT, NULL, &err) < 0 ||
	    !(p0 = proxy_with(base, &plains, NULL, NULL)) ||
	    !(p = proxy_with(base, &reps, rec, NULL)) ||
	    client_init(&plain, tb_proxy_port(p0), "/" BINDING, token) < 0 ||
	    client_init(&recorded, tb_proxy_port(p), "/" BINDING, token) < 0)
		goto out;
	if (alternate(&plain, &recorded, &pl, &pr, 0, n) < 0)
		goto out;
	recorded_sent += 2 * (WARMUP + n);
	tb_bench_row("proxy", "GET, through a proxy started alike, not recording", "ms", pl.median,
		     pl.p99, NULL, 0);
	tb_bench_row("proxy", "GET, through the proxy, recorded", "ms", pr.median, pr.p99,
		     "not recording", pl.median);
	tb_bench_row("proxy", "GET, added by recording", "ms", pr.median - pl.median,
		     pr.p99 - pl.p99, "10 % of a proxied GET", pl.median / 10);
	tb_proxy_stop(p); /* every exchange ended: its recording is whole */
	p = NULL;
	if (!(replay = replay_of(fd)) || !(p = proxy_with(base, &reps, NULL, replay)) ||
	    client_init(&replayed, tb_proxy_port(p), "/" BINDING, token) < 0 ||
	    alternate(&plain, &replayed, &dd, &rr, 0, n) < 0)
		goto out;
	recorded_sent += WARMUP + n, replayed_sent += WARMUP + n;
	tb_bench_row("proxy", "GET, replayed by the proxy", "ms", rr.median, rr.p99,
		     "proxied to loopback (target 1.00)", dd.median);
	/* a 10 MiB answer, plain and recorded: memory stays flat */
	if (big_start() < 0)
		goto out;
	bigs[0] = *ep;
	bigs[0].name = "big", bigs[0].port = big.port, bigs[0].credential = (tb_credential_t){ 0 };
	bigs[1] = bigs[0];
	bigs[1].name = "bigrec", bigs[1].record = true;
	if (!(bp = proxy_with(base, &bigl, brec, NULL)))
		goto out;
	double flat = big_peak_mib(tb_proxy_port(bp), "big", token);
	double kept = big_peak_mib(tb_proxy_port(bp), "bigrec", token);
	tb_bench_row("proxy", "10 MiB answer through the proxy: peak RSS added", "MiB", flat, flat,
		     NULL, 0);
	tb_bench_row("proxy", "10 MiB answer recorded: peak RSS added", "MiB", kept, kept, "plain",
		     flat);
	rc = flat < 0 || kept < 0 ? -1 : 0;
out:
	*failed += plain.failed + recorded.failed + replayed.failed;
	client_free(&plain);
	client_free(&recorded);
	client_free(&replayed);
	tb_proxy_stop(p);
	tb_proxy_stop(p0);
	tb_proxy_stop(bp);
	if (big.fd >= 0) {
		pthread_join(big.th, NULL);
		close(big.fd);
	}
	tb_replay_free(replay);
	tb_recorder_free(rec);
	tb_recorder_free(brec);
	if (fd >= 0)
		close(fd);
	if (bfd >= 0)
		close(bfd);
	return rc;
}

/* The rate limiter's rows: a turn alone, what it adds to the accounted
 * proxy (@p n requests each, alternating), Redis commands per request,
 * and the rate CLIENTS clients get under HELD_RATE. */
static int rate_figures(unsigned hport, const char *token, figure_t *turn, figure_t *aq,
			figure_t *rq, int n)
{
	long before, after, held = 0;

	rate_turns(n, turn);
	tb_bench_row("proxy", "one rate turn alone (a Redis round trip)", "ms", turn->median,
		     turn->p99, NULL, 0);
	before = redis_scripts();
	if (alternate(&accounted, &paced, aq, rq, 0, n) < 0)
		return -1;
	after = redis_scripts();
	accounted_sent += WARMUP + n, paced_sent += WARMUP + n;
	tb_bench_row("proxy", "GET, accounted and rate-limited", "ms", rq->median, rq->p99,
		     "accounted", aq->median);
	tb_bench_row("proxy", "GET, added by the shared rate limiter", "ms",
		     rq->median - aq->median, rq->p99 - aq->p99, "a rate turn", turn->median);
	double per = before >= 0 && after >= 0 ? (double)(after - before) / (WARMUP + n) : -1;
	tb_bench_row("proxy", "Redis round trips per rate-limited request", "trips", per, per,
		     "target 1", 1);
	double got = held_rate(hport, token, &held);
	held_sent += held;
	tb_bench_row("proxy", "GET, 8 clients, limit 200/s: rate held", "req/s", got, got,
		     "limit 200/s", HELD_RATE);
	return 0;
}

int main(int argc, char **argv)
{
	static char *methods[] = { "GET", "POST" };
	static tb_endpoint_t ep, ep2, ep3, ep4;
	static tb_list_t eps = { 1, &ep }, eps2 = { 1, &ep2 }, eps3 = { 1, &ep3 },
			 eps4 = { 1, &ep4 };
	char token[TB_TASK_TOKEN_MAX + 1];
	tb_task_token_key_t key;
	tb_proxy_t *proxy = NULL, *proxy2 = NULL, *proxy3 = NULL, *proxy4 = NULL;
	figure_t gd, gp, pd, pp, ap, aa, turn, aq, rq;
	tb_error_t err;
	int n = 5000, fd, rc = 1, failed = 0;
	unsigned pport, aport, rport = 0, hport = 0;
	double cd, cp;
	int rated = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			tb_bench_json = 1;
		else if (!strcmp(argv[i], "-n") && i + 1 < argc)
			n = (int)strtol(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "usage: bench_proxy [--json] [-n N]\n");
			return 2;
		}
	}
	if (n < BLOCKS)
		n = BLOCKS;
	signal(SIGPIPE, SIG_IGN);
	setenv(SECRET_ENV, SECRET, 1);
	setenv(SECRET_ENV "_HELD", SECRET "-held", 1); /* its own bucket */
	/* a chat request of exactly BODY_LEN bytes: on the accounted proxy
	 * it is read whole, its worst case reserved (provider_request.h) */
	static const char pre[] = "{\"model\":\"m\",\"max_tokens\":300,\"messages\":[{\"role\":"
				  "\"user\",\"content\":\"";
	static const char post[] = "\"}]}";
	memset(body, 'b', sizeof(body));
	memcpy(body, pre, sizeof(pre) - 1);
	memcpy(body + BODY_LEN - (sizeof(post) - 1), post, sizeof(post) - 1);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (srv_start() < 0)
		return 1;
	ep = (tb_endpoint_t){ .name = BINDING,
			      .host = "127.0.0.1",
			      .port = srv.port,
			      .scheme = "http",
			      .methods = { 2, methods },
			      .credential = { .header = "Authorization",
					      .format = "Bearer {}",
					      .env = SECRET_ENV } };
	tb_proxy_conf_t conf = { .endpoints = &eps,
				 .key = &key,
				 .task_id = TASK,
				 .attempt = ATTEMPT,
				 .audit = on_audit };
	if (tb_task_token_key_new(&key, &err) < 0 ||
	    tb_task_token_issue(token, sizeof(token), &key, TASK, ATTEMPT,
				tb_bench_wall_ms() + 3600000, &err) < 0 ||
	    tb_proxy_listen(&fd, 0, 0, &err) < 0)
		goto fail;
	conf.listen_fd = fd;
	if (tb_proxy_start(&proxy, &conf, &err) < 0)
		goto fail;
	pport = tb_proxy_port(proxy);
	/* The same endpoint, accounted: its answers' usage read (dialect),
	 * each request admitted against budgets and tallied. */
	ep2 = ep;
	ep2.dialect = TB_DIALECT_OPENAI;
	TB_SET_HAS(&ep2, TB_ENDPOINT_DIALECT);
	tb_proxy_conf_t conf2 = conf;
	conf2.endpoints = &eps2;
	conf2.audit = on_audit_accounted;
	conf2.admit = on_admit;
	conf2.meter = on_meter;
	if (tb_proxy_listen(&fd, 0, 0, &err) < 0)
		goto fail;
	conf2.listen_fd = fd;
	if (tb_proxy_start(&proxy2, &conf2, &err) < 0)
		goto fail;
	aport = tb_proxy_port(proxy2);
	/* The accounted endpoint with a rate limit too high to wait for
	 * (each request still takes its turn in Redis), and another
	 * credential's (its own bucket) limited to HELD_RATE. */
	if (redis_start() == 0) {
		ep3 = ep2;
		ep3.rate_limit =
		    (tb_rate_conf_t){ .requests_per_second = 1e5, .max_wait_seconds = 60 };
		TB_SET_HAS(&ep3.rate_limit, TB_RATE_REQUESTS);
		TB_SET_HAS(&ep3.rate_limit, TB_RATE_MAX_WAIT);
		ep4 = ep;
		ep4.credential.env = SECRET_ENV "_HELD";
		ep4.rate_limit = ep3.rate_limit;
		ep4.rate_limit.requests_per_second = HELD_RATE;
		tb_proxy_conf_t conf3 = conf2, conf4 = conf;
		conf3.endpoints = &eps3, conf3.pace = on_pace;
		conf4.endpoints = &eps4, conf4.pace = on_pace;
		if (tb_proxy_listen(&conf3.listen_fd, 0, 0, &err) < 0 ||
		    tb_proxy_start(&proxy3, &conf3, &err) < 0 ||
		    tb_proxy_listen(&conf4.listen_fd, 0, 0, &err) < 0 ||
		    tb_proxy_start(&proxy4, &conf4, &err) < 0)
			goto fail;
		rport = tb_proxy_port(proxy3), hport = tb_proxy_port(proxy4);
		rated = 1;
	}
	if (client_init(&direct, srv.port, "", NULL) < 0 ||
	    client_init(&proxied, pport, "/" BINDING, token) < 0 ||
	    client_init(&accounted, aport, "/" BINDING, token) < 0 ||
	    (rated && client_init(&paced, rport, "/" BINDING, token) < 0)) {
		fprintf(stderr, "bench proxy: curl_easy_init failed\n");
		goto out;
	}

	if (!tb_bench_json) {
		printf("proxy: %d sequential requests per figure (after %d to warm up), "
		       "%d clients x %d at once;\n"
		       "  a keep-alive libcurl client, to a loopback server (~%zu-byte 200s) "
		       "direct and through tb_proxy\n",
		       n, WARMUP, CLIENTS, PER_CLIENT, srv.resp_len);
		printf("  %-8s %-44s %9s %9s %-7s  %s\n", "suite", "figure", "median", "p99",
		       "unit", "ratio to baseline");
	}
	if (sequential(&gd, &gp, 0, n) < 0 || sequential(&pd, &pp, 1, n) < 0)
		goto out;
	tb_bench_row("proxy", "GET, direct", "ms", gd.median, gd.p99, NULL, 0);
	tb_bench_row("proxy", "GET, through the proxy", "ms", gp.median, gp.p99, "direct",
		     gd.median);
	tb_bench_row("proxy", "GET, added by the proxy", "ms", gp.median - gd.median,
		     gp.p99 - gd.p99, "target 0.3 ms", 0.3);
	tb_bench_row("proxy", "POST 1 KiB, direct", "ms", pd.median, pd.p99, NULL, 0);
	tb_bench_row("proxy", "POST 1 KiB, through the proxy", "ms", pp.median, pp.p99, "direct",
		     pd.median);
	tb_bench_row("proxy", "POST 1 KiB, added by the proxy", "ms", pp.median - pd.median,
		     pp.p99 - pd.p99, "target 0.3 ms", 0.3);
	tb_bench_row("proxy", "GET sequential, direct", "req/s", gd.rate, gd.rate, NULL, 0);
	tb_bench_row("proxy", "GET sequential, through the proxy", "req/s", gp.rate, gp.rate,
		     "direct", gd.rate);
	if (alternate(&proxied, &accounted, &ap, &aa, 0, n) < 0)
		goto out;
	proxied_sent += WARMUP + n, accounted_sent += WARMUP + n;
	tb_bench_row("proxy", "GET, through the proxy, accounted", "ms", aa.median, aa.p99, "proxy",
		     ap.median);
	tb_bench_row("proxy", "GET, added by accounting and budgets", "ms", aa.median - ap.median,
		     aa.p99 - ap.p99, "target 0.05 ms", 0.05);
	if (alternate(&proxied, &accounted, &ap, &aa, 1, n) < 0)
		goto out;
	proxied_sent += WARMUP + n, accounted_sent += WARMUP + n;
	tb_bench_row("proxy", "POST 1 KiB chat, through the proxy, accounted", "ms", aa.median,
		     aa.p99, "proxy", ap.median);
	tb_bench_row("proxy", "POST 1 KiB chat, added by reading, reserving and budgets", "ms",
		     aa.median - ap.median, aa.p99 - ap.p99, "target 0.15 ms", 0.15);
	cd = concurrent(srv.port, "", NULL, &direct_sent, &failed);
	cp = concurrent(pport, "/" BINDING, token, &proxied_sent, &failed);
	tb_bench_row("proxy", "GET, 8 clients at once, direct", "req/s", cd, cd, NULL, 0);
	tb_bench_row("proxy", "GET, 8 clients at once, through the proxy", "req/s", cp, cp,
		     "direct", cd);
	if (rated && rate_figures(hport, token, &turn, &aq, &rq, n) < 0)
		goto out;
	if (recording_figures(&conf, &ep, token, n, &failed) < 0)
		goto out;

	failed += direct.failed + proxied.failed + accounted.failed + paced.failed;
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "bench proxy: %s\n", err.msg);
out:
	tb_bench_end();
	client_free(&direct);
	client_free(&proxied);
	client_free(&accounted);
	client_free(&paced);
	tb_proxy_stop(proxy);
	tb_proxy_stop(proxy2);
	tb_proxy_stop(proxy3);
	tb_proxy_stop(proxy4);
	srv_stop();
	redis_stop();
	/* Every request answered 200, reached the server, and every proxied
	 * one (and no direct one) carried the credential and was audited. */
	unsigned long seen = atomic_load(&srv.requests), keyed = atomic_load(&srv.keyed);
	long through = proxied_sent + accounted_sent + paced_sent + held_sent + recorded_sent;
	if (rc == 0 &&
	    (failed || seen != (unsigned long)(direct_sent + through) ||
	     keyed != (unsigned long)through ||
	     atomic_load(&audited) != (unsigned long)(through + replayed_sent + big_sent))) {
		fprintf(stderr,
			"bench proxy: %d requests failed; the server saw %lu of %ld, %lu with "
			"the credential, %lu audited (want %ld)\n",
			failed, seen, direct_sent + through, keyed, atomic_load(&audited),
			through + replayed_sent + big_sent);
		rc = 1;
	}
	/* the accounted proxy read every answer's usage (1 + 1 tokens) */
	long tallied = accounted_sent + paced_sent;
	if (rc == 0 && (tally.requests != (uint64_t)tallied ||
			tally.tokens != 2 * (uint64_t)tallied || tally.reserved != 0)) {
		fprintf(stderr,
			"bench proxy: accounted %llu requests, %llu tokens (want %ld, %ld), "
			"%llu tokens still reserved\n",
			(unsigned long long)tally.requests, (unsigned long long)tally.tokens,
			tallied, 2 * tallied, (unsigned long long)tally.reserved);
		rc = 1;
	}
	tb_task_token_key_wipe(&key);
	explicit_bzero(token, sizeof(token));
	curl_global_cleanup();
	return rc;
}
