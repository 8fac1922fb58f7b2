/*
 * test_proxy.c: the egress proxy against a fake provider of the test's
 * own on 127.0.0.1 (a thread per connection, canned answers, recording
 * what arrived). Clients are raw sockets, so the test can send what no
 * well-behaved client would. Needs no services; the network namespace
 * test needs root (it skips without).
 *
 * Only loopback is ever addressed: hosts outside the policy are refused
 * by the proxy before any name is resolved, and the test checks that the
 * fake provider saw nothing of them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "egress.h"
#include "proxy.h"
#include "proxy_http.h"
#include "recording.h"
#include "replay.h"
#include "tb/json_mpack.h"
#include "tb/runtime.h"
#include "tb/schema_event.h"

#define SECRET "sk-test-0123456789abcdef"
/* a key with bytes that percent-encoding escapes */
#define ENC_SECRET "sk/9+Zq=abc/DEF+ghi=="
#define TASK "proxy-task"
#define ATTEMPT 2
#define HEADER_TIMEOUT_MS 600

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------ fake provider */

#define FAKE_MAX_CONNS 64

static struct fake {
	int fd;
	unsigned port;
	int stop[2];
	pthread_t th;
	pthread_t conns[FAKE_MAX_CONNS];
	int nconns;
	pthread_mutex_t lock;
	int requests;
	char method[16], target[1024], auth[512], host[256], xclient[128];
	int had_token, had_proxy_auth, had_connection_named;
	char head[4096]; /* the last request's head as it arrived */
	size_t body_len;
	char body[256];
} fake = { .lock = PTHREAD_MUTEX_INITIALIZER };

static const char *hget(char *const *names, char *const *values, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (strcasecmp(names[i], name) == 0)
			return values[i];
	return NULL;
}

static int send_str(int fd, const char *s, size_t len)
{
	while (len) {
		ssize_t w = send(fd, s, len, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		s += w, len -= (size_t)w;
	}
	return 0;
}

static void *fake_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char buf[65536], *names[64], *values[64], body[65536];
	size_t have = 0, blen = 0;
	long end = 0;
	size_t skip;
	int n = 0;

	struct timeval tv = { 5, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (have < sizeof(buf) - 1 && (end = tb_http_head_end(buf, have, &skip)) == 0) {
		ssize_t r = recv(fd, buf + have, sizeof(buf) - 1 - have, 0);
		if (r <= 0)
			goto out;
		have += (size_t)r;
	}
	if (end <= 0)
		goto out;
	pthread_mutex_lock(&fake.lock);
	snprintf(fake.head, sizeof(fake.head), "%.*s", (int)((size_t)end - skip), buf + skip);
	pthread_mutex_unlock(&fake.lock);
	/* The head, line by line (the proxy sends well-formed ones). */
	buf[end - 2] = '\0';
	char *save = NULL, *line = strtok_r(buf + skip, "\r\n", &save);
	char method[16] = "", target[1024] = "";
	if (!line || sscanf(line, "%15s %1023s", method, target) != 2)
		goto out;
	while ((line = strtok_r(NULL, "\r\n", &save)) && n < 64) {
		char *colon = strchr(line, ':');
		if (!colon)
			continue;
		*colon = '\0';
		char *v = colon + 1;
		while (*v == ' ')
			v++;
		names[n] = line, values[n++] = v;
	}
	if (strcmp(target, "/v1/early") == 0) {
		/* Refused before the body is read, as servers do with bodies
		 * too large; then what the proxy still sends is read (for a
		 * while) so that the close sends no reset. */
		const char *r = "HTTP/1.1 413 Content Too Large\r\nContent-Length: 9\r\n"
				"Connection: close\r\n\r\ntoo large";
		send_str(fd, r, strlen(r));
		shutdown(fd, SHUT_WR);
		struct timeval shortly = { 0, 200000 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &shortly, sizeof(shortly));
		for (int i = 0; i < 1000 && recv(fd, buf, sizeof(buf), 0) > 0; i++)
			;
		goto out;
	}
	/* The body, by length or chunked. */
	const char *cl = hget(names, values, n, "Content-Length");
	const char *te = hget(names, values, n, "Transfer-Encoding");
	size_t extra = have - (size_t)end;
	char *rest = buf + end;
	if (cl) {
		size_t want = strtoul(cl, NULL, 10);
		if (want > sizeof(body))
			goto out;
		memcpy(body, rest, extra < want ? extra : want);
		blen = extra < want ? extra : want;
		while (blen < want) {
			ssize_t r = recv(fd, body + blen, want - blen, 0);
			if (r <= 0)
				goto out;
			blen += (size_t)r;
		}
	} else if (te && strcasecmp(te, "chunked") == 0) {
		tb_http_chunked_t ch = { 0 };
		char raw[4096];
		size_t rl = extra < sizeof(raw) ? extra : sizeof(raw);
		memcpy(raw, rest, rl);
		for (int rounds = 0; rounds < 10000; rounds++) {
			size_t used, got;
			int rc = tb_http_chunked_decode(&ch, raw, rl, &used, body + blen,
							sizeof(body) - blen, &got);
			blen += got;
			memmove(raw, raw + used, rl - used);
			rl -= used;
			if (rc != 0)
				break;
			ssize_t r = recv(fd, raw + rl, sizeof(raw) - rl, 0);
			if (r <= 0)
				goto out;
			rl += (size_t)r;
		}
	}
	const char *auth = hget(names, values, n, "Authorization");
	pthread_mutex_lock(&fake.lock);
	fake.requests++;
	snprintf(fake.method, sizeof(fake.method), "%s", method);
	snprintf(fake.target, sizeof(fake.target), "%s", target);
	snprintf(fake.auth, sizeof(fake.auth), "%s", auth ? auth : "");
	const char *host = hget(names, values, n, "Host");
	const char *xclient = hget(names, values, n, "X-Client");
	snprintf(fake.host, sizeof(fake.host), "%s", host ? host : "");
	snprintf(fake.xclient, sizeof(fake.xclient), "%s", xclient ? xclient : "");
	fake.had_token = hget(names, values, n, "X-Taskbox-Token") != NULL;
	fake.had_proxy_auth = hget(names, values, n, "Proxy-Authorization") != NULL;
	fake.had_connection_named = hget(names, values, n, "X-Hop") != NULL;
	fake.body_len = blen;
	snprintf(fake.body, sizeof(fake.body), "%.*s", (int)(blen < 255 ? blen : 255), body);
	pthread_mutex_unlock(&fake.lock);

	char resp[2048], text[1024];
	if (strncmp(target, "/v1/stream", 10) == 0) {
		/* Server-sent events, one chunk each, with pauses between. */
		int events = 3, pause = 300;
		const char *q = strchr(target, '?');
		if (q && strstr(q, "n="))
			events = (int)strtol(strstr(q, "n=") + 2, NULL, 10);
		const char *h = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
				"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
		if (send_str(fd, h, strlen(h)) < 0)
			goto out;
		for (int i = 1; i <= events && i < 1000; i++) {
			int tl = snprintf(text, sizeof(text), "data: {\"n\":%d}\n\n", i);
			int rl = snprintf(resp, sizeof(resp), "%x\r\n%s\r\n", tl, text);
			if (send_str(fd, resp, (size_t)rl) < 0)
				goto out;
			if (i < events)
				usleep((useconds_t)pause * 1000);
		}
		send_str(fd, "0\r\n\r\n", 5);
	} else if (strcmp(target, "/v1/frame-te") == 0) {
		/* A length and chunks: the chunks count (RFC 9112 6.3) */
		const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
				"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
				"b\r\nhello world\r\n0\r\n\r\n";
		send_str(fd, r, strlen(r));
	} else if (strcmp(target, "/v1/frame-cl2") == 0) {
		const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n"
				"Connection: close\r\n\r\nhello!";
		send_str(fd, r, strlen(r));
	} else if (strcmp(target, "/v1/echo-encoded") == 0) {
		/* The key percent-encoded, as a server that puts it in a URL
		 * does: upper case hex, lower case, mixed, every byte. */
		char forms[4][512];
		const char *a = auth ? auth : "";
		for (int f = 0; f < 4; f++) {
			size_t o = 0;
			for (const unsigned char *q = (const unsigned char *)a; *q && o < 500;
			     q++) {
				int plain = (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') ||
					    (*q >= '0' && *q <= '9') || *q == '-';
				int upper =
				    f == 0 || (f == 2 && (q - (const unsigned char *)a) % 2);
				if (plain && f != 3)
					forms[f][o++] = (char)*q;
				else
					o += (size_t)snprintf(forms[f] + o, 4,
							      upper ? "%%%02X" : "%%%02x", *q);
			}
			forms[f][o] = '\0';
		}
		int tl = snprintf(text, sizeof(text),
				  "{\"upper\":\"%s\",\"lower\":\"%s\",\"mixed\":\"%s\","
				  "\"every\":\"%s\"}",
				  forms[0], forms[1], forms[2], forms[3]);
		int rl = snprintf(
		    resp, sizeof(resp),
		    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
		    "X-Echo-Lower: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		    forms[1], tl, text);
		send_str(fd, resp, (size_t)rl);
	} else if (strncmp(target, "/v1/", 4) == 0 || strncmp(target, "/models", 7) == 0) {
		/* Echoes what it got, the key included, as careless servers do. */
		int tl =
		    snprintf(text, sizeof(text),
			     "{\"method\":\"%s\",\"target\":\"%s\",\"auth\":\"%s\",\"len\":%zu}",
			     method, target, auth ? auth : "", blen);
		int rl =
		    snprintf(resp, sizeof(resp),
			     "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
			     "X-Echo-Auth: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
			     auth ? auth : "", tl, text);
		send_str(fd, resp, (size_t)rl);
	} else {
		const char *nf = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: "
				 "close\r\n\r\n";
		send_str(fd, nf, strlen(nf));
	}
out:
	close(fd);
	return NULL;
}

static void *fake_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct pollfd pf[2] = { { fake.fd, POLLIN, 0 }, { fake.stop[0], POLLIN, 0 } };
		if (poll(pf, 2, 1000) < 0 && errno != EINTR)
			break;
		if (pf[1].revents)
			break;
		if (!pf[0].revents)
			continue;
		int fd = accept4(fake.fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		pthread_mutex_lock(&fake.lock);
		int full = fake.nconns >= FAKE_MAX_CONNS;
		pthread_mutex_unlock(&fake.lock);
		if (full || pthread_create(&fake.conns[fake.nconns], NULL, fake_conn,
					   (void *)(intptr_t)fd)) {
			close(fd);
			continue;
		}
		pthread_mutex_lock(&fake.lock);
		fake.nconns++;
		pthread_mutex_unlock(&fake.lock);
	}
	return NULL;
}

static void fake_start(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(pipe2(fake.stop, O_CLOEXEC), 0);
	fake.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fake.fd >= 0);
	assert_int_equal(bind(fake.fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fake.fd, 64), 0);
	assert_int_equal(getsockname(fake.fd, (struct sockaddr *)&a, &al), 0);
	fake.port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&fake.th, NULL, fake_main, NULL), 0);
}

static void fake_stop(void)
{
	assert_int_equal(write(fake.stop[1], "x", 1), 1);
	pthread_join(fake.th, NULL);
	for (int i = 0; i < fake.nconns; i++)
		pthread_join(fake.conns[i], NULL);
	close(fake.fd);
	close(fake.stop[0]);
	close(fake.stop[1]);
}

static int fake_requests(void)
{
	pthread_mutex_lock(&fake.lock);
	int n = fake.requests;
	pthread_mutex_unlock(&fake.lock);
	return n;
}

/* The head of the last request the fake provider got. */
static void fake_head(char *out, size_t cap)
{
	pthread_mutex_lock(&fake.lock);
	snprintf(out, cap, "%s", fake.head);
	pthread_mutex_unlock(&fake.lock);
}

/* -------------------------------------------------------------- audit */

#define AUDIT_MAX 256

static struct {
	pthread_mutex_t lock;
	int n;
	struct rec {
		char method[16], host[128], path[256], endpoint[64], reason[256];
		int status, refused;
		uint64_t in, out;
	} r[AUDIT_MAX];
} audits = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void on_audit(void *ud, const tb_proxy_audit_t *a)
{
	(void)ud;
	pthread_mutex_lock(&audits.lock);
	if (audits.n < AUDIT_MAX) {
		struct rec *r = &audits.r[audits.n++];
		snprintf(r->method, sizeof(r->method), "%s", a->method);
		snprintf(r->host, sizeof(r->host), "%s", a->host);
		snprintf(r->path, sizeof(r->path), "%s", a->path);
		snprintf(r->endpoint, sizeof(r->endpoint), "%s", a->endpoint ? a->endpoint : "");
		snprintf(r->reason, sizeof(r->reason), "%s", a->reason ? a->reason : "");
		r->status = a->status;
		r->refused = a->refused;
		r->in = a->bytes_in;
		r->out = a->bytes_out;
	}
	pthread_mutex_unlock(&audits.lock);
}

/* The latest record for @p path with @p status, waiting up to 2 s for it
 * (the proxy audits after it has answered). */
static struct rec audit_find(const char *path, int status)
{
	struct rec found = { .status = -1 };
	for (int tries = 0; tries < 200 && found.status < 0; tries++) {
		pthread_mutex_lock(&audits.lock);
		for (int i = audits.n - 1; i >= 0; i--)
			if (strcmp(audits.r[i].path, path) == 0 && audits.r[i].status == status) {
				found = audits.r[i];
				break;
			}
		pthread_mutex_unlock(&audits.lock);
		if (found.status < 0)
			usleep(10000);
	}
	return found;
}

/* -------------------------------------------- posted events (the queue) */

#define POSTED_MAX 64

/* What the platform route handed on, as the lifecycle's queue would get
 * it; @c full makes the queue refuse (429). */
static struct {
	pthread_mutex_t lock;
	int n, full;
	int type[POSTED_MAX];
	char json[POSTED_MAX][2048]; /* the payload as JSON, keys sorted */
} posted = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int on_posted(void *ud, int type, tb_bytes_t payload)
{
	json_t *j = NULL;
	tb_error_t err;
	int rc = -1;

	(void)ud;
	pthread_mutex_lock(&posted.lock);
	if (!posted.full && posted.n < POSTED_MAX &&
	    tb_mpack_to_json(&j, payload.data, payload.len, &err) == 0) {
		char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
		snprintf(posted.json[posted.n], sizeof(posted.json[0]), "%s", text ? text : "?");
		posted.type[posted.n++] = type;
		free(text);
		json_decref(j);
		rc = 0;
	}
	pthread_mutex_unlock(&posted.lock);
	free(payload.data);
	return rc;
}

static int posted_count(void)
{
	pthread_mutex_lock(&posted.lock);
	int n = posted.n;
	pthread_mutex_unlock(&posted.lock);
	return n;
}

/* ----------------------------------------------------------- the proxy */

static tb_task_token_key_t key;
static tb_proxy_t *proxy;
static unsigned pport;
static char token[TB_TASK_TOKEN_MAX + 1];

static char *m_llm[] = { "POST", "GET" };
static char *m_get[] = { "GET" };
static char *p_v1[] = { "/v1/" };
static char *p_models[] = { "/models" };
static tb_endpoint_t eps[6];
static tb_list_t eplist = { 6, eps };

static void endpoints_init(void)
{
	eps[0] = (tb_endpoint_t){ .name = "llm",
				  .host = "localhost",
				  .port = fake.port,
				  .scheme = "http",
				  .methods = { 2, m_llm },
				  .path_prefixes = { 1, p_v1 },
				  .credential = { .header = "Authorization",
						  .format = "Bearer {}",
						  .env = "TB_TEST_PROVIDER_KEY" } };
	eps[1] = (tb_endpoint_t){ .name = "search",
				  .host = "127.0.0.1",
				  .port = fake.port,
				  .scheme = "http",
				  .methods = { 1, m_get },
				  .path_prefixes = { 1, p_models },
				  .credential = { .query = "key", .env = "TB_TEST_PROVIDER_KEY" } };
	eps[2] = (tb_endpoint_t){ .name = "nokey",
				  .host = "localhost",
				  .port = fake.port,
				  .scheme = "http",
				  .credential = { .header = "X-Key", .env = "TB_TEST_UNSET_KEY" } };
	/* a name (not an address the runtime spells out) that resolves to
	 * loopback: what a rebinding DNS answer looks like */
	eps[3] = (tb_endpoint_t){
		.name = "rebind", .host = "127.1", .port = fake.port, .scheme = "http"
	};
	/* a key that percent-encoding changes */
	eps[5] = (tb_endpoint_t){ .name = "enc",
				  .host = "localhost",
				  .port = fake.port,
				  .scheme = "http",
				  .credential = { .header = "Authorization",
						  .format = "Bearer {}",
						  .env = "TB_TEST_ENC_KEY" } };
	/* a credential, and any method and path */
	eps[4] = (tb_endpoint_t){ .name = "any",
				  .host = "localhost",
				  .port = fake.port,
				  .scheme = "http",
				  .credential = { .header = "Authorization",
						  .format = "Bearer {}",
						  .env = "TB_TEST_PROVIDER_KEY" } };
}

static tb_proxy_t *proxy_start(int listen_fd, unsigned max_conns, unsigned header_timeout_ms)
{
	tb_proxy_conf_t conf = {
		.listen_fd = listen_fd,
		.endpoints = &eplist,
		.key = &key,
		.task_id = TASK,
		.attempt = ATTEMPT,
		.max_conns = max_conns,
		.header_timeout_ms = header_timeout_ms,
		.idle_timeout_ms = 2000,
		.io_timeout_ms = 5000,
		.connect_timeout_ms = 2000,
		.audit = on_audit,
		.event = on_posted,
		.max_event_bytes = 1024,
	};
	tb_proxy_t *p;
	tb_error_t err;
	if (tb_proxy_start(&p, &conf, &err) != 0)
		fail_msg("proxy start: %s", err.msg);
	return p;
}

static int setup(void **state)
{
	tb_error_t err;
	int fd;
	(void)state;
	signal(SIGPIPE, SIG_IGN);
	unsetenv("http_proxy"), unsetenv("HTTP_PROXY"), unsetenv("all_proxy");
	unsetenv("ALL_PROXY");
	setenv("TB_TEST_PROVIDER_KEY", SECRET, 1);
	setenv("TB_TEST_ENC_KEY", ENC_SECRET, 1);
	unsetenv("TB_TEST_UNSET_KEY");
	fake_start();
	endpoints_init();
	if (tb_task_token_key_new(&key, &err) != 0 ||
	    tb_task_token_issue(token, sizeof(token), &key, TASK, ATTEMPT, wall_ms() + 600000,
				&err) != 0 ||
	    tb_proxy_listen(&fd, 0, 0, &err) != 0)
		fail_msg("setup: %s", err.msg);
	proxy = proxy_start(fd, 8, HEADER_TIMEOUT_MS);
	pport = tb_proxy_port(proxy);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	uint64_t t0 = now_ms();
	tb_proxy_stop(proxy);
	if (now_ms() - t0 > 3000)
		fail_msg("stopping the proxy took %llu ms", (unsigned long long)(now_ms() - t0));
	fake_stop();
	return 0;
}

/* ------------------------------------------------------------ clients */

static int dial(unsigned port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct timeval tv = { 5, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
		fail_msg("connect to %u: %s", port, strerror(errno));
	return fd;
}

/* Reads until the end of the stream (or 5 s of silence); NUL-terminated. */
static size_t read_all(int fd, char *out, size_t cap)
{
	size_t n = 0;
	while (n + 1 < cap) {
		ssize_t r = recv(fd, out + n, cap - 1 - n, 0);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	out[n] = '\0';
	return n;
}

/* Sends @p req whole and returns the whole answer in @p out. */
static size_t roundtrip(const char *req, size_t len, char *out, size_t cap)
{
	int fd = dial(pport);
	assert_int_equal(send_str(fd, req, len), 0);
	size_t n = read_all(fd, out, cap);
	close(fd);
	return n;
}

static int status_of(const char *resp)
{
	int st = 0;
	if (sscanf(resp, "HTTP/1.1 %d", &st) != 1)
		return -1;
	return st;
}

/* A request through the proxy with the token in X-Taskbox-Token (or
 * none when @p tok is NULL), "Connection: close". */
static size_t request(char *out, size_t cap, const char *method, const char *target,
		      const char *tok, const char *extra, const char *body)
{
	char req[8192];
	int n = snprintf(req, sizeof(req),
			 "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s%s%s"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
			 method, target, tok ? "X-Taskbox-Token: " : "", tok ? tok : "",
			 tok ? "\r\n" : "", extra ? extra : "", body ? strlen(body) : 0,
			 body ? body : "");
	return roundtrip(req, (size_t)n, out, cap);
}

/* ---------------------------------------------------------------- tests */

static void test_proxy__allowed_request_gets_the_key_the_client_never_sees(void **state)
{
	char resp[16384];
	(void)state;
	int before = fake_requests();
	request(resp, sizeof(resp), "POST", "/llm/v1/echo?x=1", token,
		"Authorization: Bearer the-agents-own\r\nX-Client: hi\r\nConnection: X-Hop\r\n"
		"X-Hop: 1\r\n",
		"{\"prompt\":\"hello\"}");
	assert_int_equal(status_of(resp), 200);
	assert_int_equal(fake_requests(), before + 1);
	pthread_mutex_lock(&fake.lock);
	/* the key arrived, the client's own Authorization and the token did not */
	assert_string_equal(fake.auth, "Bearer " SECRET);
	assert_string_equal(fake.method, "POST");
	assert_string_equal(fake.target, "/v1/echo?x=1");
	assert_string_equal(fake.xclient, "hi");
	assert_false(fake.had_token);
	assert_false(fake.had_connection_named);
	assert_int_equal(fake.body_len, 18);
	assert_string_equal(fake.body, "{\"prompt\":\"hello\"}");
	/* the upstream Host is the endpoint's, whatever the client said */
	assert_int_equal(strncmp(fake.host, "localhost", 9), 0);
	pthread_mutex_unlock(&fake.lock);
	/* the provider echoed the key in a header and the body: masked */
	assert_null(strstr(resp, SECRET));
	assert_non_null(strstr(resp, "X-Echo-Auth: Bearer ************************"));
	assert_non_null(strstr(resp, "\"auth\":\"Bearer ************************\""));
	assert_null(strstr(resp, token));
	struct rec r = audit_find("/v1/echo", 200);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.method, "POST");
	assert_string_equal(r.host, "localhost");
	assert_string_equal(r.endpoint, "llm");
	assert_false(r.refused);
	assert_int_equal(r.out, 18);
	assert_true(r.in > 50);
}

static void test_proxy__forward_form_and_query_credential(void **state)
{
	char resp[16384], req[2048];
	(void)state;
	/* HTTP_PROXY style: absolute URI, token in Proxy-Authorization */
	int n = snprintf(req, sizeof(req),
			 "GET http://127.0.0.1:%u/models/list?q=cats HTTP/1.1\r\n"
			 "Host: evil.example.test\r\nProxy-Authorization: Bearer %s\r\n"
			 "Connection: close\r\n\r\n",
			 fake.port, token);
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	assert_int_equal(status_of(resp), 200);
	pthread_mutex_lock(&fake.lock);
	assert_string_equal(fake.target, "/models/list?q=cats&key=" SECRET);
	assert_false(fake.had_proxy_auth);
	assert_int_equal(strncmp(fake.host, "127.0.0.1", 9), 0);
	pthread_mutex_unlock(&fake.lock);
	assert_null(strstr(resp, SECRET));
	/* the client may not set the credential's parameter itself */
	request(resp, sizeof(resp), "GET", "/search/models?key=mine", token, NULL, NULL);
	assert_int_equal(status_of(resp), 400);
}

static void test_proxy__outside_the_policy_is_403_with_an_audit_record(void **state)
{
	char resp[16384], req[2048];
	(void)state;
	int before = fake_requests();
	/* a host the runtime does not list (never resolved, never contacted) */
	int n = snprintf(req, sizeof(req),
			 "GET http://other.example.test/v1/echo HTTP/1.1\r\nHost: "
			 "other.example.test\r\nX-Taskbox-Token: %s\r\nConnection: close\r\n\r\n",
			 token);
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	assert_int_equal(status_of(resp), 403);
	assert_non_null(strstr(resp, "host 'other.example.test' is not in the runtime's"));
	struct rec r = audit_find("/v1/echo", 403);
	assert_int_equal(r.status, 403);
	assert_string_equal(r.host, "other.example.test");
	assert_string_equal(r.endpoint, "");
	assert_true(r.refused);
	/* the right host at the wrong port */
	n = snprintf(req, sizeof(req),
		     "GET http://localhost:%u/v1/echo HTTP/1.1\r\nHost: x\r\n"
		     "X-Taskbox-Token: %s\r\nConnection: close\r\n\r\n",
		     fake.port + 1 > 65535 ? 1 : fake.port + 1, token);
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	assert_int_equal(status_of(resp), 403);
	/* a method, a path, a binding the policy does not allow */
	request(resp, sizeof(resp), "DELETE", "/llm/v1/echo", token, NULL, NULL);
	assert_int_equal(status_of(resp), 403);
	assert_non_null(strstr(resp, "method DELETE is not allowed for endpoint 'llm'"));
	request(resp, sizeof(resp), "GET", "/llm/admin", token, NULL, NULL);
	assert_int_equal(status_of(resp), 403);
	assert_non_null(strstr(audit_find("/admin", 403).reason, "outside endpoint 'llm'"));
	request(resp, sizeof(resp), "GET", "/nope/v1/x", token, NULL, NULL);
	assert_int_equal(status_of(resp), 403);
	/* paths that read differently on each side */
	request(resp, sizeof(resp), "GET", "/llm/v1/../admin", token, NULL, NULL);
	assert_int_equal(status_of(resp), 400);
	request(resp, sizeof(resp), "GET", "/llm/v1/%2e%2e/admin", token, NULL, NULL);
	assert_int_equal(status_of(resp), 400);
	request(resp, sizeof(resp), "GET", "/llm/v1%2fadmin", token, NULL, NULL);
	assert_int_equal(status_of(resp), 400);
	/* CONNECT, even to an allowed host */
	n = snprintf(req, sizeof(req),
		     "CONNECT localhost:%u HTTP/1.1\r\nHost: localhost:%u\r\n"
		     "Proxy-Authorization: Bearer %s\r\n\r\n",
		     fake.port, fake.port, token);
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	assert_int_equal(status_of(resp), 403);
	assert_non_null(strstr(resp, "CONNECT is not allowed"));
	/* an endpoint whose secret the worker lacks: 502, and says which */
	request(resp, sizeof(resp), "GET", "/nokey/x", token, NULL, NULL);
	assert_int_equal(status_of(resp), 502);
	assert_non_null(strstr(resp, "TB_TEST_UNSET_KEY"));
	/* DNS rebinding: a name that comes to resolve to this machine */
	request(resp, sizeof(resp), "GET", "/rebind/rb", token, NULL, NULL);
	assert_int_equal(status_of(resp), 502);
	assert_non_null(strstr(resp, "resolved to an internal address"));
	assert_false(audit_find("/rb", 502).refused); /* an upstream failure */
	assert_int_equal(fake_requests(), before);
}

static void test_proxy__tokens_missing_forged_expired_or_foreign_are_refused(void **state)
{
	char resp[16384], tok[TB_TASK_TOKEN_MAX + 1];
	tb_task_token_key_t other;
	tb_error_t err;
	(void)state;
	int before = fake_requests();

	request(resp, sizeof(resp), "GET", "/llm/v1/echo", NULL, NULL, NULL);
	assert_int_equal(status_of(resp), 401);
	assert_non_null(strstr(resp, "no task token"));
	request(resp, sizeof(resp), "GET", "/llm/v1/echo", "tb1.garbage.x", NULL, NULL);
	assert_int_equal(status_of(resp), 401);
	/* signed by another worker's key */
	assert_int_equal(tb_task_token_key_new(&other, &err), 0);
	assert_int_equal(
	    tb_task_token_issue(tok, sizeof(tok), &other, TASK, ATTEMPT, wall_ms() + 60000, &err),
	    0);
	request(resp, sizeof(resp), "GET", "/llm/v1/echo", tok, NULL, NULL);
	assert_int_equal(status_of(resp), 401);
	assert_non_null(strstr(resp, "not signed by this worker"));
	/* expired */
	assert_int_equal(
	    tb_task_token_issue(tok, sizeof(tok), &key, TASK, ATTEMPT, wall_ms() - 1, &err), 0);
	request(resp, sizeof(resp), "GET", "/llm/v1/echo", tok, NULL, NULL);
	assert_int_equal(status_of(resp), 401);
	assert_non_null(strstr(resp, "expired"));
	/* another task's, another attempt's */
	assert_int_equal(tb_task_token_issue(tok, sizeof(tok), &key, "other-task", ATTEMPT,
					     wall_ms() + 60000, &err),
			 0);
	request(resp, sizeof(resp), "GET", "/llm/v1/echo", tok, NULL, NULL);
	assert_int_equal(status_of(resp), 403);
	assert_int_equal(
	    tb_task_token_issue(tok, sizeof(tok), &key, TASK, ATTEMPT + 1, wall_ms() + 60000, &err),
	    0);
	request(resp, sizeof(resp), "GET", "/llm/v1/echo", tok, NULL, NULL);
	assert_int_equal(status_of(resp), 403);
	assert_int_equal(fake_requests(), before);
}

static void test_proxy__streamed_response_arrives_incrementally(void **state)
{
	char req[2048], buf[4096];
	uint64_t at[8];
	int events = 0;
	(void)state;
	int n = snprintf(req, sizeof(req),
			 "GET /llm/v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Taskbox-Token: %s\r\n"
			 "Connection: close\r\n\r\n",
			 token);
	int fd = dial(pport);
	uint64_t t0 = now_ms();
	assert_int_equal(send_str(fd, req, (size_t)n), 0);
	size_t have = 0;
	for (int reads = 0; reads < 100 && have + 1 < sizeof(buf); reads++) {
		ssize_t r = recv(fd, buf + have, sizeof(buf) - 1 - have, 0);
		if (r <= 0)
			break;
		buf[have + (size_t)r] = '\0';
		for (char *p = buf + have; (p = strstr(p, "data: ")) && events < 8; p++)
			at[events++] = now_ms();
		have += (size_t)r;
	}
	close(fd);
	assert_int_equal(status_of(buf), 200);
	assert_non_null(strstr(buf, "Transfer-Encoding: chunked"));
	assert_non_null(strstr(buf, "text/event-stream"));
	assert_int_equal(events, 3);
	/* the first before the stream ends; the others about 300 ms apart */
	assert_true(at[0] - t0 < 250);
	assert_true(at[1] - at[0] >= 200 && at[1] - at[0] < 1000);
	assert_true(at[2] - at[1] >= 200 && at[2] - at[1] < 1000);
	/* the client's end of the chunked framing arrived */
	assert_non_null(strstr(buf, "\r\n0\r\n\r\n"));
}

/* A proxy like the suite's, recording into @p rec or replaying @p rp. */
static tb_proxy_t *proxy_with(const tb_list_t *endpoints, tb_recorder_t *rec, tb_replay_t *rp,
			      unsigned *port)
{
	tb_proxy_conf_t conf = { .endpoints = endpoints,
				 .key = &key,
				 .task_id = TASK,
				 .attempt = ATTEMPT,
				 .idle_timeout_ms = 2000,
				 .io_timeout_ms = 5000,
				 .connect_timeout_ms = 2000,
				 .audit = on_audit,
				 .recorder = rec,
				 .replay = rp };
	tb_proxy_t *p;
	tb_error_t err;
	if (tb_proxy_listen(&conf.listen_fd, 0, 0, &err) != 0 ||
	    tb_proxy_start(&p, &conf, &err) != 0)
		fail_msg("proxy: %s", err.msg);
	*port = tb_proxy_port(p);
	return p;
}

/* The stream's three events' arrival times (ms after the request) into
 * @p at, through the proxy on @p port; the answer into @p buf. */
static int stream_events(unsigned port, uint64_t at[3], char *buf, size_t cap)
{
	char req[2048];
	int n = snprintf(req, sizeof(req),
			 "GET /llm/v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Taskbox-Token: %s\r\n"
			 "Connection: close\r\n\r\n",
			 token);
	int fd = dial(port), events = 0;
	uint64_t t0 = now_ms();
	size_t have = 0;
	assert_int_equal(send_str(fd, req, (size_t)n), 0);
	for (int reads = 0; reads < 100 && have + 1 < cap; reads++) {
		ssize_t r = recv(fd, buf + have, cap - 1 - have, 0);
		if (r <= 0)
			break;
		buf[have + (size_t)r] = '\0';
		for (char *p = buf + have; (p = strstr(p, "data: ")) && events < 3; p++)
			at[events++] = now_ms() - t0;
		have += (size_t)r;
	}
	close(fd);
	return events;
}

/* A stream recorded with its timing is replayed as a stream: at the
 * recorded pace (its events as far apart as they came) or at once,
 * never asking the upstream; a request the recording does not hold is
 * refused in JSON, naming it; the recording holds no key. */
static void test_proxy__a_recorded_stream_replays_at_its_pace(void **state)
{
	static tb_endpoint_t rec_eps[6];
	tb_list_t list = { 6, rec_eps };
	tb_recording_conf_t how = { 1024, 16 };
	tb_replay_conf_t paced = { .pace = TB_REPLAY_RECORDED }, instant = { 0 };
	tb_recorder_t *rec;
	tb_recording_t r1, r2;
	tb_replay_t *rp;
	tb_error_t err;
	char buf[4096], *bytes;
	uint64_t at[3];
	unsigned port;
	int fd = memfd_create("test-recording", MFD_CLOEXEC);

	(void)state;
	memcpy(rec_eps, eps, sizeof(rec_eps));
	rec_eps[0].record = true;
	assert_int_equal(tb_recorder_new(&rec, fd, &how, TASK, ATTEMPT, NULL, &err), 0);
	tb_proxy_t *p = proxy_with(&list, rec, NULL, &port);
	assert_int_equal(stream_events(port, at, buf, sizeof(buf)), 3);
	tb_proxy_stop(p);
	tb_recorder_free(rec);
	off_t len = lseek(fd, 0, SEEK_END);
	assert_non_null(bytes = malloc((size_t)len));
	assert_int_equal(pread(fd, bytes, (size_t)len, 0), len);
	close(fd);
	assert_null(memmem(bytes, (size_t)len, SECRET, strlen(SECRET)));
	assert_int_equal(tb_recording_read(&r1, bytes, (size_t)len, &err), 0);
	assert_int_equal(tb_recording_read(&r2, bytes, (size_t)len, &err), 0);
	free(bytes);
	assert_int_equal(r1.n, 1);
	assert_true(r1.xs[0].stream && r1.xs[0].ended && r1.xs[0].npieces >= 3);
	int asked = fake_requests();

	/* at its pace: the last event about 600 ms after the request */
	assert_int_equal(tb_replay_new(&rp, &r1, &paced, "task t attempt 1", &err), 0);
	p = proxy_with(&list, NULL, rp, &port);
	assert_int_equal(stream_events(port, at, buf, sizeof(buf)), 3);
	assert_int_equal(status_of(buf), 200);
	assert_non_null(strstr(buf, "text/event-stream"));
	assert_true(at[1] >= 200 && at[2] >= at[1] + 200);
	/* what the recording does not hold */
	char req[2048];
	int rl = snprintf(req, sizeof(req),
			  "GET /llm/v1/models?page=2 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
			  "X-Taskbox-Token: %s\r\nConnection: close\r\n\r\n",
			  token);
	int cfd = dial(port);
	assert_int_equal(send_str(cfd, req, (size_t)rl), 0);
	assert_true(read_all(cfd, buf, sizeof(buf)) > 0);
	close(cfd);
	assert_int_equal(status_of(buf), 409);
	assert_non_null(strstr(buf, "\"type\":\"replay_miss\""));
	assert_non_null(strstr(buf, "no recorded exchange matches GET /v1/models?page=2"));
	tb_proxy_stop(p);
	tb_replay_free(rp);

	/* at once: the same events */
	assert_int_equal(tb_replay_new(&rp, &r2, &instant, "task t attempt 1", &err), 0);
	p = proxy_with(&list, NULL, rp, &port);
	assert_int_equal(stream_events(port, at, buf, sizeof(buf)), 3);
	assert_non_null(strstr(buf, "\r\n0\r\n\r\n"));
	tb_proxy_stop(p);
	tb_replay_free(rp);
	assert_int_equal(fake_requests(), asked); /* the upstream was never asked */

	/* fill: what the recording does not hold goes up as it came, a HEAD
	 * as a HEAD (no body made up for it) */
	tb_replay_conf_t fill = { .mode = TB_REPLAY_FILL };
	tb_recording_t empty = { 0 };
	assert_int_equal(tb_replay_new(&rp, &empty, &fill, "task t attempt 1", &err), 0);
	p = proxy_with(&list, NULL, rp, &port);
	rl = snprintf(req, sizeof(req),
		      "HEAD /any/v1/head-me HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		      "X-Taskbox-Token: %s\r\nConnection: close\r\n\r\n",
		      token);
	cfd = dial(port);
	assert_int_equal(send_str(cfd, req, (size_t)rl), 0);
	read_all(cfd, buf, sizeof(buf));
	close(cfd);
	tb_proxy_stop(p);
	tb_replay_free(rp);
	assert_int_equal(fake_requests(), asked + 1);
	pthread_mutex_lock(&fake.lock);
	char method[16];
	snprintf(method, sizeof(method), "%s", fake.method);
	pthread_mutex_unlock(&fake.lock);
	assert_string_equal(method, "HEAD");
}

static void test_proxy__bodies_stream_up_by_length_or_chunked(void **state)
{
	char req[4096], resp[16384];
	(void)state;
	int n =
	    snprintf(req, sizeof(req),
		     "POST /llm/v1/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Taskbox-Token: %s\r\n"
		     "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
		     "5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nX-T: 1\r\n\r\n",
		     token);
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	assert_int_equal(status_of(resp), 200);
	pthread_mutex_lock(&fake.lock);
	assert_string_equal(fake.body, "hello world");
	pthread_mutex_unlock(&fake.lock);
	assert_int_equal(audit_find("/v1/upload", 200).out, 11);
	/* two requests on one connection, the second after the first's body */
	n = snprintf(req, sizeof(req),
		     "POST /llm/v1/a HTTP/1.1\r\nHost: h\r\nX-Taskbox-Token: %s\r\n"
		     "Content-Length: 3\r\n\r\nabc"
		     "GET /llm/v1/b HTTP/1.1\r\nHost: h\r\nX-Taskbox-Token: %s\r\n"
		     "Connection: close\r\n\r\n",
		     token, token);
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	char *second = strstr(resp + 1, "HTTP/1.1 200");
	assert_int_equal(status_of(resp), 200);
	assert_non_null(second);
	assert_non_null(strstr(second, "\"target\":\"/v1/b\""));
	/* a body whose chunks are malformed: 400, nothing half-sent upstream
	 * is answered as if it were whole */
	n = snprintf(req, sizeof(req),
		     "POST /llm/v1/upload HTTP/1.1\r\nHost: h\r\nX-Taskbox-Token: %s\r\n"
		     "Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\n0\r\n\r\n",
		     token);
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	assert_int_equal(status_of(resp), 400);
}

static void test_proxy__oversized_heads_are_431(void **state)
{
	char *req = malloc(40000), resp[4096];
	(void)state;
	int n = snprintf(req, 40000,
			 "GET /llm/v1/echo HTTP/1.1\r\nHost: h\r\nX-Taskbox-Token: %s\r\n"
			 "X-Big: ",
			 token);
	memset(req + n, 'a', 20000);
	n += 20000;
	n += snprintf(req + n, 40000 - (size_t)n, "\r\n\r\n");
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	assert_int_equal(status_of(resp), 431);
	/* many small headers, over the count */
	n = snprintf(req, 40000, "GET /llm/v1/echo HTTP/1.1\r\nHost: h\r\n");
	for (int i = 0; i < 150; i++)
		n += snprintf(req + n, 40000 - (size_t)n, "X-%d: 1\r\n", i);
	n += snprintf(req + n, 40000 - (size_t)n, "\r\n");
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	assert_int_equal(status_of(resp), 431);
	free(req);
}

static void test_proxy__smuggling_attempts_are_400(void **state)
{
	static const char *const heads[] = {
		"POST /llm/v1/echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
		"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST /llm/v1/echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
		"Content-Length: 6\r\n\r\nhello!",
		"POST /llm/v1/echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
		"Content-Length: 5\r\n\r\nhello",
		"POST /llm/v1/echo HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n Transfer-Encoding: chunked"
		"\r\n\r\n",
		"POST /llm/v1/echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding : chunked\r\n\r\n",
		"GET /llm/v1/echo HTTP/1.1\nHost: h\n\n",
		"GET /llm/v1/echo HTTP/1.1\r\nHost: h\rX: y\r\n\r\n",
		"GET /llm/v1/echo HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET /llm/v1/echo\r\n\r\n",
	};
	char resp[4096];
	(void)state;
	int before = fake_requests();
	for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		roundtrip(heads[i], strlen(heads[i]), resp, sizeof(resp));
		if (status_of(resp) != 400)
			fail_msg("smuggling case %zu got: %.200s", i, resp);
	}
	assert_int_equal(fake_requests(), before);
}

static void test_proxy__slow_client_gets_408_and_others_are_served(void **state)
{
	char resp[16384];
	(void)state;
	int slow = dial(pport);
	uint64_t t0 = now_ms();
	assert_int_equal(send_str(slow, "GET /llm/v1/echo HTTP/1.1\r\nHo", 29), 0);
	/* meanwhile another client is served at once */
	uint64_t t1 = now_ms();
	request(resp, sizeof(resp), "GET", "/llm/v1/echo", token, NULL, NULL);
	assert_int_equal(status_of(resp), 200);
	if (now_ms() - t1 >= 400)
		fail_msg("took %llu ms", (unsigned long long)(now_ms() - t1));
	size_t n = read_all(slow, resp, sizeof(resp));
	uint64_t took = now_ms() - t0;
	close(slow);
	assert_true(n > 0);
	assert_int_equal(status_of(resp), 408);
	assert_true(took >= HEADER_TIMEOUT_MS - 50 && took < HEADER_TIMEOUT_MS + 1500);
	/* a client that connects and says nothing gets the same */
	slow = dial(pport);
	t0 = now_ms();
	read_all(slow, resp, sizeof(resp));
	close(slow);
	assert_int_equal(status_of(resp), 408);
	assert_true(now_ms() - t0 < HEADER_TIMEOUT_MS + 1500);
}

static void test_proxy__connections_over_the_cap_get_503(void **state)
{
	char resp[4096];
	tb_error_t err;
	int fd, idle[2];
	(void)state;
	assert_int_equal(tb_proxy_listen(&fd, 0, 0, &err), 0);
	tb_proxy_t *p = proxy_start(fd, 2, 3000);
	unsigned port = tb_proxy_port(p);
	idle[0] = dial(port);
	idle[1] = dial(port);
	usleep(200000); /* both accepted */
	int third = dial(port);
	size_t got = read_all(third, resp, sizeof(resp));
	close(third);
	assert_int_equal(status_of(resp), 503);
	/* its length is its body's */
	const char *cl = strstr(resp, "Content-Length: "), *body = strstr(resp, "\r\n\r\n");
	assert_non_null(cl);
	assert_non_null(body);
	assert_int_equal(strtoul(cl + 16, NULL, 10), got - (size_t)(body + 4 - resp));
	close(idle[0]);
	close(idle[1]);
	uint64_t t0 = now_ms();
	tb_proxy_stop(p);
	assert_true(now_ms() - t0 < 3000);
}

static void test_proxy__stop_ends_a_running_stream(void **state)
{
	char req[2048], buf[4096];
	tb_error_t err;
	int fd;
	(void)state;
	assert_int_equal(tb_proxy_listen(&fd, 0, 0, &err), 0);
	tb_proxy_t *p = proxy_start(fd, 4, 3000);
	int n = snprintf(req, sizeof(req),
			 "GET /llm/v1/stream?n=50 HTTP/1.1\r\nHost: h\r\nX-Taskbox-Token: %s\r\n"
			 "\r\n",
			 token);
	int c = dial(tb_proxy_port(p));
	assert_int_equal(send_str(c, req, (size_t)n), 0);
	ssize_t r = recv(c, buf, sizeof(buf) - 1, 0);
	assert_true(r > 0);
	uint64_t t0 = now_ms();
	tb_proxy_stop(p);
	assert_true(now_ms() - t0 < 2500);
	/* the client sees its connection end */
	int ended = 0;
	for (int i = 0; i < 100 && !ended; i++) {
		r = recv(c, buf, sizeof(buf), 0);
		ended = r <= 0;
	}
	assert_true(ended);
	close(c);
}

static void test_proxy__headers_that_redirect_method_or_path_are_not_sent(void **state)
{
	static const char *const names[] = {
		"X-HTTP-Method-Override",
		"X-HTTP-Method",
		"X-Method-Override",
		"X-Original-Method",
		"X-Original-URL",
		"X-Original-URI",
		"X-Rewrite-URL",
		"X-Envoy-Original-Path",
		"X-Forwarded-Prefix",
		"X-Forwarded-Host",
		"X-Forwarded-Uri",
		"X-Forwarded-For",
		"X-Original-Host",
		"X-Host",
		"Forwarded",
	};
	char extra[2048], resp[16384], head[4096];
	size_t o = 0;
	(void)state;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		o += (size_t)snprintf(extra + o, sizeof(extra) - o, "%s: /admin\r\n", names[i]);
	request(resp, sizeof(resp), "GET", "/llm/v1/echo", token, extra, NULL);
	assert_int_equal(status_of(resp), 200);
	fake_head(head, sizeof(head));
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char line[64];
		snprintf(line, sizeof(line), "\r\n%s:", names[i]);
		if (strcasestr(head, line))
			fail_msg("%s went upstream: %s", names[i], head);
	}
	assert_null(strstr(head, "/admin"));
}

static void test_proxy__masking_is_not_undone_by_compression_ranges_or_trace(void **state)
{
	char resp[16384], head[4096];
	(void)state;
	int before = fake_requests();
	/* compressed or in pieces, an echoed key would not be recognised */
	request(resp, sizeof(resp), "GET", "/llm/v1/echo", token,
		"Accept-Encoding: gzip, br\r\nRange: bytes=40-47\r\nIf-Range: \"x\"\r\n", NULL);
	assert_int_equal(status_of(resp), 200);
	assert_null(strstr(resp, SECRET));
	fake_head(head, sizeof(head));
	assert_non_null(strcasestr(head, "\r\nAccept-Encoding: identity\r\n"));
	assert_null(strcasestr(head, "gzip"));
	assert_null(strcasestr(head, "\r\nRange:"));
	assert_null(strcasestr(head, "\r\nIf-Range:"));
	assert_int_equal(fake_requests(), before + 1);
	/* TRACE echoes the request, the key in it: refused where there is one */
	request(resp, sizeof(resp), "TRACE", "/any/v1/echo", token, NULL, NULL);
	assert_int_equal(status_of(resp), 403);
	assert_non_null(strstr(resp, "TRACE is not allowed for endpoint 'any'"));
	assert_true(audit_find("/v1/echo", 403).refused);
	assert_int_equal(fake_requests(), before + 1);
}

/* The key echoed percent-encoded in lower case (and upper, mixed, every
 * byte escaped) is masked like the plain one, in the head and the body. */
static void test_proxy__masking_covers_every_case_of_percent_encoding(void **state)
{
	char resp[16384];
	(void)state;
	request(resp, sizeof(resp), "GET", "/enc/v1/echo-encoded", token, NULL, NULL);
	assert_int_equal(status_of(resp), 200);
	const char *forms[] = { "sk%2F9%2BZq", "sk%2f9%2bZq", "%2Bghi%3d%3D", "%73%6b%2f" };
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++)
		if (strcasestr(resp, forms[i]))
			fail_msg("an echo of the key reached the client: %s", resp);
	/* masked, not dropped: the client sees where the key was */
	assert_non_null(strstr(resp, "X-Echo-Lower: Bearer%20***"));
	assert_non_null(strstr(resp, "\"lower\":\"Bearer%20****"));
	assert_non_null(strstr(resp, "\"every\":\"%42%65%61%72%65%72%20***"));
}

static void test_proxy__upstream_framing_that_disagrees_is_not_passed_on(void **state)
{
	char resp[16384];
	(void)state;
	/* Transfer-Encoding and Content-Length: the length is void, the
	 * client gets the whole body, framed anew */
	request(resp, sizeof(resp), "GET", "/any/v1/frame-te", token, NULL, NULL);
	assert_int_equal(status_of(resp), 200);
	assert_null(strcasestr(resp, "Content-Length"));
	assert_non_null(strstr(resp, "Transfer-Encoding: chunked\r\n"));
	assert_non_null(strstr(resp, "\r\n\r\nb\r\nhello world\r\n0\r\n\r\n"));
	/* two lengths that differ: where the body ends is unknown */
	request(resp, sizeof(resp), "GET", "/any/v1/frame-cl2", token, NULL, NULL);
	assert_int_equal(status_of(resp), 502);
	assert_non_null(strstr(resp, "two different Content-Length values"));
	assert_null(strstr(resp, "hello"));
}

static void test_proxy__an_answer_before_the_whole_body_says_close(void **state)
{
	char req[2048], resp[4096] = "", piece[1024];
	size_t have = 0;
	(void)state;
	/* The client asks to keep the connection and is slow with its body;
	 * the upstream answers at once. */
	int n = snprintf(req, sizeof(req),
			 "POST /any/v1/early HTTP/1.1\r\nHost: h\r\nX-Taskbox-Token: %s\r\n"
			 "Content-Length: 1000000\r\n\r\n",
			 token);
	memset(piece, 'x', sizeof(piece));
	int fd = dial(pport);
	assert_int_equal(send_str(fd, req, (size_t)n), 0);
	for (int i = 0; i < 500 && !strstr(resp, "\r\n\r\n"); i++) {
		struct pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, 10) == 1) {
			ssize_t r = recv(fd, resp + have, sizeof(resp) - 1 - have, 0);
			if (r <= 0)
				break;
			have += (size_t)r;
			resp[have] = '\0';
		} else {
			send(fd, piece, sizeof(piece), MSG_NOSIGNAL | MSG_DONTWAIT);
		}
		resp[have] = '\0';
	}
	close(fd);
	if (status_of(resp) != 413)
		fail_msg("got: %s", resp);
	assert_non_null(strstr(resp, "\r\nConnection: close\r\n"));
	assert_null(strstr(resp, "keep-alive"));
}

static void test_proxy__forward_clients_are_asked_for_the_token_and_may_send_basic(void **state)
{
	char req[2048], resp[16384], cred[TB_TASK_TOKEN_MAX + 16], b64[2 * TB_TASK_TOKEN_MAX];
	static const char tbl[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	(void)state;
	int before = fake_requests();
	/* no token: 407 and how to give one */
	int n = snprintf(req, sizeof(req),
			 "GET http://127.0.0.1:%u/models/list HTTP/1.1\r\nHost: x\r\n"
			 "Connection: close\r\n\r\n",
			 fake.port);
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	assert_int_equal(status_of(resp), 407);
	assert_non_null(strstr(resp, "\r\nProxy-Authenticate: Basic realm=\"taskbox\"\r\n"));
	/* the reverse-proxy form is not a proxy request: 401 as before */
	request(resp, sizeof(resp), "GET", "/search/models", NULL, NULL, NULL);
	assert_int_equal(status_of(resp), 401);
	assert_int_equal(fake_requests(), before);
	/* Basic, the token the password (what curl sends for
	 * http_proxy=http://taskbox:<token>@127.0.0.1:3128) */
	size_t cl = (size_t)snprintf(cred, sizeof(cred), "taskbox:%s", token), o = 0;
	for (size_t i = 0; i < cl; i += 3) {
		uint32_t v = (uint32_t)(unsigned char)cred[i] << 16;
		v |= i + 1 < cl ? (uint32_t)(unsigned char)cred[i + 1] << 8 : 0;
		v |= i + 2 < cl ? (uint32_t)(unsigned char)cred[i + 2] : 0;
		b64[o++] = tbl[v >> 18 & 63];
		b64[o++] = tbl[v >> 12 & 63];
		b64[o++] = i + 1 < cl ? tbl[v >> 6 & 63] : '=';
		b64[o++] = i + 2 < cl ? tbl[v & 63] : '=';
	}
	b64[o] = '\0';
	n = snprintf(req, sizeof(req),
		     "GET http://127.0.0.1:%u/models/list HTTP/1.1\r\nHost: x\r\n"
		     "Proxy-Authorization: Basic %s\r\nConnection: close\r\n\r\n",
		     fake.port, b64);
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	assert_int_equal(status_of(resp), 200);
	assert_int_equal(fake_requests(), before + 1);
	pthread_mutex_lock(&fake.lock);
	int had_proxy_auth = fake.had_proxy_auth;
	pthread_mutex_unlock(&fake.lock);
	assert_false(had_proxy_auth);
	/* another password: refused as a forged token is */
	n = snprintf(req, sizeof(req),
		     "GET http://127.0.0.1:%u/models/list HTTP/1.1\r\nHost: x\r\n"
		     "Proxy-Authorization: Basic dGFza2JveDp0YjEueC55\r\n"
		     "Connection: close\r\n\r\n",
		     fake.port);
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	assert_int_equal(status_of(resp), 401);
	assert_int_equal(fake_requests(), before + 1);
	/* the token is in no audit record */
	pthread_mutex_lock(&audits.lock);
	for (int i = 0; i < audits.n; i++)
		assert_null(strstr(audits.r[i].reason, token));
	pthread_mutex_unlock(&audits.lock);
}

/* ------------------------------------------------------ platform route */

#define JSON_CT "Content-Type: application/json\r\n"

static void test_proxy__a_posted_line_reaches_the_queue_intact(void **state)
{
	char resp[16384], req[4096];
	(void)state;
	int before = fake_requests(), n0 = posted_count();
	pthread_mutex_lock(&audits.lock);
	int audits0 = audits.n;
	pthread_mutex_unlock(&audits.lock);

	request(
	    resp, sizeof(resp), "POST", "/_taskbox/events", token, JSON_CT,
	    "{\"type\":\"thought\",\"text\":\"fetching notes.txt\",\"extra\":[1,{\"k\":null}]}");
	assert_int_equal(status_of(resp), 202);
	assert_non_null(strstr(resp, "\r\n\r\n{\"accepted\":true}"));
	/* a tool call with a trailing newline, as written on fd 3; the token
	 * as Proxy-Authorization and the forward form naming the proxy */
	static const char call[] =
	    "{\"type\":\"tool-call\",\"id\":\"c1\",\"name\":\"grep\",\"input\":{}}\n";
	int n = snprintf(req, sizeof(req),
			 "POST http://127.0.0.1:%u/_taskbox/events HTTP/1.1\r\nHost: x\r\n"
			 "Proxy-Authorization: Bearer %s\r\nContent-Type: application/json; "
			 "charset=utf-8\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
			 pport, token, sizeof(call) - 1, call);
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	assert_int_equal(status_of(resp), 202);
	/* a chunked body, and a message */
	n = snprintf(req, sizeof(req),
		     "POST /_taskbox/events HTTP/1.1\r\nHost: x\r\nX-Taskbox-Token: %s\r\n" JSON_CT
		     "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
		     "10\r\n{\"type\":\"message\r\n1c\r\n\",\"role\":\"assistant\",\"text\":\r\n"
		     "6\r\n\"done\"\r\n1\r\n}\r\n0\r\n\r\n",
		     token);
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	assert_int_equal(status_of(resp), 202);

	assert_int_equal(posted_count(), n0 + 3);
	pthread_mutex_lock(&posted.lock);
	assert_int_equal(posted.type[n0], TB_EV_THOUGHT);
	assert_string_equal(posted.json[n0],
			    "{\"extra\":[1,{\"k\":null}],\"text\":\"fetching notes.txt\"}");
	assert_int_equal(posted.type[n0 + 1], TB_EV_TOOL_CALL);
	assert_string_equal(posted.json[n0 + 1], "{\"id\":\"c1\",\"input\":{},\"name\":\"grep\"}");
	assert_int_equal(posted.type[n0 + 2], TB_EV_MESSAGE);
	assert_string_equal(posted.json[n0 + 2], "{\"role\":\"assistant\",\"text\":\"done\"}");
	pthread_mutex_unlock(&posted.lock);
	/* answered by the proxy: nothing upstream, no egress record */
	assert_int_equal(fake_requests(), before);
	usleep(100000);
	pthread_mutex_lock(&audits.lock);
	for (int i = audits0; i < audits.n; i++)
		if (strstr(audits.r[i].path, "_taskbox"))
			fail_msg("an egress record for %s", audits.r[i].path);
	pthread_mutex_unlock(&audits.lock);
}

static void test_proxy__a_malformed_posted_line_is_400_with_the_reason(void **state)
{
	static const struct {
		const char *body, *why;
	} bad[] = {
		{ "not json", "not JSON" },
		{ "[1,2]", "not a JSON object" },
		{ "{\"type\":\"thought\"}", "'text' must be a string" },
		{ "{\"type\":\"shout\",\"text\":\"x\"}", "unknown or missing 'type' (shout)" },
		{ "{\"type\":\"message\",\"role\":\"god\",\"text\":\"x\"}", "'role' must be" },
		{ "{\"type\":\"thought\",\"text\":\"a\"}\n{\"type\":\"thought\",\"text\":\"b\"}",
		  "one line only" },
		{ "", "not JSON" },
	};
	char resp[16384];
	(void)state;
	int n0 = posted_count();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		request(resp, sizeof(resp), "POST", "/_taskbox/events", token, JSON_CT,
			bad[i].body);
		if (status_of(resp) != 400 || !strstr(resp, bad[i].why))
			fail_msg("'%s': %s", bad[i].body, resp);
	}
	assert_int_equal(posted_count(), n0);
}

static void test_proxy__an_oversized_posted_line_is_413(void **state)
{
	char resp[16384], body[2048], req[4096];
	(void)state;
	int n0 = posted_count();
	/* exactly max_event_bytes (1024), and a newline after it: taken */
	int pre = snprintf(body, sizeof(body), "{\"type\":\"thought\",\"text\":\"");
	memset(body + pre, 'x', (size_t)(1024 - pre - 2));
	memcpy(body + 1024 - 2, "\"}\n", 4);
	assert_int_equal(strlen(body), 1025);
	request(resp, sizeof(resp), "POST", "/_taskbox/events", token, JSON_CT, body);
	assert_int_equal(status_of(resp), 202);
	/* one byte more: refused, by its length before the body is read ... */
	memcpy(body + 1024 - 2, "x\"}", 4);
	request(resp, sizeof(resp), "POST", "/_taskbox/events", token, JSON_CT, body);
	assert_int_equal(status_of(resp), 413);
	assert_non_null(strstr(resp, "agent.max_event_bytes (1024 bytes)"));
	/* ... and chunked, as it comes */
	int n = snprintf(
	    req, sizeof(req),
	    "POST /_taskbox/events HTTP/1.1\r\nHost: x\r\nX-Taskbox-Token: %s\r\n" JSON_CT
	    "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n%zx\r\n%s\r\n0\r\n\r\n",
	    token, strlen(body), body);
	roundtrip(req, (size_t)n, resp, sizeof(resp));
	assert_int_equal(status_of(resp), 413);
	assert_int_equal(posted_count(), n0 + 1);
}

static void test_proxy__posted_lines_need_this_tasks_token(void **state)
{
	static const char line[] = "{\"type\":\"thought\",\"text\":\"hi\"}";
	char resp[16384], tok[TB_TASK_TOKEN_MAX + 1];
	tb_task_token_key_t other;
	tb_error_t err;
	(void)state;
	int n0 = posted_count();

	request(resp, sizeof(resp), "POST", "/_taskbox/events", NULL, JSON_CT, line);
	assert_int_equal(status_of(resp), 401);
	assert_non_null(strstr(resp, "no task token"));
	request(resp, sizeof(resp), "POST", "/_taskbox/events", "tb1.garbage.x", JSON_CT, line);
	assert_int_equal(status_of(resp), 401);
	assert_int_equal(tb_task_token_key_new(&other, &err), 0);
	assert_int_equal(
	    tb_task_token_issue(tok, sizeof(tok), &other, TASK, ATTEMPT, wall_ms() + 60000, &err),
	    0);
	request(resp, sizeof(resp), "POST", "/_taskbox/events", tok, JSON_CT, line);
	assert_int_equal(status_of(resp), 401);
	assert_int_equal(
	    tb_task_token_issue(tok, sizeof(tok), &key, TASK, ATTEMPT, wall_ms() - 1, &err), 0);
	request(resp, sizeof(resp), "POST", "/_taskbox/events", tok, JSON_CT, line);
	assert_int_equal(status_of(resp), 401);
	assert_non_null(strstr(resp, "expired"));
	assert_int_equal(tb_task_token_issue(tok, sizeof(tok), &key, "other-task", ATTEMPT,
					     wall_ms() + 60000, &err),
			 0);
	request(resp, sizeof(resp), "POST", "/_taskbox/events", tok, JSON_CT, line);
	assert_int_equal(status_of(resp), 403);
	assert_int_equal(
	    tb_task_token_issue(tok, sizeof(tok), &key, TASK, ATTEMPT + 1, wall_ms() + 60000, &err),
	    0);
	request(resp, sizeof(resp), "POST", "/_taskbox/events", tok, JSON_CT, line);
	assert_int_equal(status_of(resp), 403);
	assert_int_equal(posted_count(), n0);
	/* this task's and attempt's, unexpired: taken */
	request(resp, sizeof(resp), "POST", "/_taskbox/events", token, JSON_CT, line);
	assert_int_equal(status_of(resp), 202);
	assert_int_equal(posted_count(), n0 + 1);
}

static void test_proxy__the_route_refuses_turn_ended_and_what_it_does_not_serve(void **state)
{
	static const char line[] = "{\"type\":\"thought\",\"text\":\"hi\"}";
	char resp[16384];
	(void)state;
	int n0 = posted_count();

	/* turns are the agent's own channel's (fd 3) */
	request(resp, sizeof(resp), "POST", "/_taskbox/events", token, JSON_CT,
		"{\"type\":\"turn-ended\"}");
	assert_int_equal(status_of(resp), 403);
	assert_non_null(strstr(resp, "turn-ended is not taken here"));
	request(resp, sizeof(resp), "GET", "/_taskbox/events", token, NULL, NULL);
	assert_int_equal(status_of(resp), 405);
	assert_non_null(strstr(resp, "\r\nAllow: POST\r\n"));
	request(resp, sizeof(resp), "POST", "/_taskbox/events", token, NULL, line);
	assert_int_equal(status_of(resp), 415);
	request(resp, sizeof(resp), "POST", "/_taskbox/events", token,
		"Content-Type: text/plain\r\n", line);
	assert_int_equal(status_of(resp), 415);
	request(resp, sizeof(resp), "POST", "/_taskbox/inputs/notes.txt", token, JSON_CT, line);
	assert_int_equal(status_of(resp), 404);
	assert_non_null(strstr(resp, "there is POST /_taskbox/events"));
	/* a queue with no room: 429, try again */
	pthread_mutex_lock(&posted.lock);
	posted.full = 1;
	pthread_mutex_unlock(&posted.lock);
	request(resp, sizeof(resp), "POST", "/_taskbox/events", token, JSON_CT, line);
	pthread_mutex_lock(&posted.lock);
	posted.full = 0;
	pthread_mutex_unlock(&posted.lock);
	assert_int_equal(status_of(resp), 429);
	assert_non_null(strstr(resp, "\r\nRetry-After: 1\r\n"));
	assert_int_equal(posted_count(), n0);
	/* another port's /_taskbox, in the forward form, is not the route */
	request(resp, sizeof(resp), "POST", "http://127.0.0.1:1/_taskbox/events", token, JSON_CT,
		line);
	assert_int_equal(status_of(resp), 403);
	assert_int_equal(posted_count(), n0);
}

/* ---------------------------------------------------- network namespace */

static int lo_up(void)
{
	struct ifreq ifr = { 0 };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	memcpy(ifr.ifr_name, "lo", 3);
	int rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (rc == 0)
		rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
	close(fd);
	return rc;
}

/* In the child, inside its own network namespace: the proxy answers, the
 * provider's port (on the host's loopback) does not exist here. Exit
 * codes say which check failed. */
static int netns_child(int ready, int go)
{
	unsigned ports[2];
	char req[1024], resp[8192];
	struct timeval tv = { 5, 0 };

	if (unshare(CLONE_NEWNET) != 0 || lo_up() != 0) {
		ssize_t w = write(ready, "S", 1);
		(void)w;
		return 77;
	}
	if (write(ready, "R", 1) != 1 || read(go, ports, sizeof(ports)) != sizeof(ports))
		return 10;
	/* direct to the provider: refused, it is another loopback */
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)ports[1]) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 || errno != ECONNREFUSED)
		return 11;
	close(fd);
	/* through the proxy: served */
	a.sin_port = htons((uint16_t)ports[0]);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
		return 12;
	int n = snprintf(req, sizeof(req),
			 "POST /llm/v1/from-netns HTTP/1.1\r\nHost: x\r\nX-Taskbox-Token: %s\r\n"
			 "Content-Length: 2\r\nConnection: close\r\n\r\nhi",
			 token);
	if (send_str(fd, req, (size_t)n) < 0)
		return 13;
	size_t got = 0;
	for (int i = 0; i < 100 && got + 1 < sizeof(resp); i++) {
		ssize_t r = recv(fd, resp + got, sizeof(resp) - 1 - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	resp[got] = '\0';
	if (strncmp(resp, "HTTP/1.1 200", 12) != 0)
		return 14;
	if (strstr(resp, SECRET))
		return 15;
	return 0;
}

static void test_proxy__listens_inside_a_network_namespace_only(void **state)
{
	int ready[2], go[2], status = 0, fd;
	char c = 0;
	tb_error_t err;
	(void)state;
	if (geteuid() != 0)
		skip();
	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(netns_child(ready[1], go[0]));
	close(ready[1]);
	close(go[0]);
	struct pollfd pf = { ready[0], POLLIN, 0 };
	if (poll(&pf, 1, 10000) != 1 || read(ready[0], &c, 1) != 1 || c != 'R') {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		close(ready[0]);
		close(go[1]);
		if (c == 'S')
			skip(); /* the kernel gives no network namespaces here */
		fail_msg("the namespace child did not start");
	}
	/* The proxy's socket, made inside the child's namespace. */
	if (tb_proxy_listen(&fd, pid, 3128, &err) != 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		fail_msg("listen in the namespace: %s", err.msg);
	}
	tb_proxy_t *p = proxy_start(fd, 4, 3000);
	assert_int_equal(tb_proxy_port(p), 3128);
	/* ...and not in ours: nothing listens on our loopback's 3128 for it */
	unsigned ports[2] = { 3128, fake.port };
	assert_int_equal(write(go[1], ports, sizeof(ports)), (ssize_t)sizeof(ports));
	/* wait for the child, bounded */
	int done = 0;
	for (int i = 0; i < 1500 && !done; i++) {
		done = waitpid(pid, &status, WNOHANG) == pid;
		if (!done)
			usleep(10000);
	}
	if (!done) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	tb_proxy_stop(p);
	close(ready[0]);
	close(go[1]);
	assert_true(done);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) != 0)
		fail_msg("namespace check %d failed", WEXITSTATUS(status));
	pthread_mutex_lock(&fake.lock);
	assert_string_equal(fake.target, "/v1/from-netns");
	assert_string_equal(fake.auth, "Bearer " SECRET);
	pthread_mutex_unlock(&fake.lock);
}

/* --------------------------------------------------- a hanging resolver */

/*
 * Run as "test_proxy --hanging-resolver" by the test below, in a mount
 * and network namespace of its own where name lookups go to a DNS server
 * on 127.0.0.1:53 that never answers (this process's UDP socket): a
 * request whose endpoint is a name is stuck in curl's resolver thread
 * when the proxy is stopped. Exit codes say which check failed.
 */
static int hanging_resolver_main(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(53) };
	char req[1024], q[512];
	tb_error_t err;
	tb_proxy_t *p;
	int fd;

	signal(SIGPIPE, SIG_IGN);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int dns = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (dns < 0 || bind(dns, (struct sockaddr *)&a, sizeof(a)) != 0)
		return 77;
	tb_endpoint_t slow = {
		.name = "slow", .host = "slow.example.test", .port = 80, .scheme = "http"
	};
	tb_list_t one = { 1, &slow };
	if (tb_task_token_key_new(&key, &err) != 0 ||
	    tb_task_token_issue(token, sizeof(token), &key, TASK, ATTEMPT, wall_ms() + 60000,
				&err) != 0 ||
	    tb_proxy_listen(&fd, 0, 0, &err) != 0)
		return 2;
	tb_proxy_conf_t conf = { .listen_fd = fd,
				 .endpoints = &one,
				 .key = &key,
				 .task_id = TASK,
				 .attempt = ATTEMPT,
				 .connect_timeout_ms = 60000 };
	if (tb_proxy_start(&p, &conf, &err) != 0)
		return 3;
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	a = (struct sockaddr_in){ .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)tb_proxy_port(p)) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int n = snprintf(req, sizeof(req),
			 "GET /slow/x HTTP/1.1\r\nHost: h\r\nX-Taskbox-Token: %s\r\n\r\n", token);
	if (connect(c, (struct sockaddr *)&a, sizeof(a)) != 0 || send_str(c, req, (size_t)n) < 0)
		return 4;
	/* the lookup has begun when the query arrives */
	struct pollfd pf = { dns, POLLIN, 0 };
	if (poll(&pf, 1, 5000) != 1 || recv(dns, q, sizeof(q), 0) <= 0)
		return 78; /* names are not looked up by DNS here */
	uint64_t t0 = now_ms();
	tb_proxy_stop(p);
	uint64_t took = now_ms() - t0;
	fprintf(stderr, "tb_proxy_stop took %llu ms\n", (unsigned long long)took);
	/* _exit: the resolver thread curl left behind is still waiting */
	_exit(took < 2500 ? 0 : 5);
}

static void test_proxy__stop_does_not_wait_for_a_hanging_name_lookup(void **state)
{
	char dir[] = "/tmp/tb-proxy-dns-XXXXXX", resolv[64], nss[64];
	int status = 0;
	(void)state;
	if (geteuid() != 0)
		skip(); /* namespaces and mounts */
	assert_non_null(mkdtemp(dir));
	snprintf(resolv, sizeof(resolv), "%s/resolv.conf", dir);
	snprintf(nss, sizeof(nss), "%s/nsswitch.conf", dir);
	FILE *f = fopen(resolv, "w");
	assert_non_null(f);
	/* one try, 10 s: without CURLOPT_QUICK_EXIT the stop waits that long */
	fputs("nameserver 127.0.0.1\noptions timeout:10 attempts:1\n", f);
	fclose(f);
	assert_non_null(f = fopen(nss, "w"));
	fputs("hosts: files dns\n", f);
	fclose(f);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Private mounts first: nothing below is seen outside. Only
		 * loopback in the new network namespace: no query leaves it. */
		if (unshare(CLONE_NEWNS | CLONE_NEWNET) != 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 || lo_up() != 0 ||
		    mount(resolv, "/etc/resolv.conf", NULL, MS_BIND, NULL) != 0 ||
		    mount(nss, "/etc/nsswitch.conf", NULL, MS_BIND, NULL) != 0)
			_exit(77);
		execl("/proc/self/exe", "test_proxy", "--hanging-resolver", (char *)NULL);
		_exit(76);
	}
	int done = 0;
	for (int i = 0; i < 3000 && !done; i++) { /* 30 s at most */
		done = waitpid(pid, &status, WNOHANG) == pid;
		if (!done)
			usleep(10000);
	}
	if (!done) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	unlink(resolv);
	unlink(nss);
	rmdir(dir);
	assert_true(done);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77 || WEXITSTATUS(status) == 78)
		skip(); /* no namespaces, or no DNS lookups to hang */
	if (WEXITSTATUS(status) != 0)
		fail_msg("hanging resolver check %d failed", WEXITSTATUS(status));
}

/* ------------------------------------------------------------- egress */

static void test_egress__a_task_id_no_token_can_carry_is_poison(void **state)
{
	tb_runtime_t rt = { 0 };
	tb_egress_t *e = NULL;
	tb_error_t err;
	(void)state;
	rt.endpoints = eplist;
	/* the same for every attempt: not a platform failure to retry */
	tb_egress_conf_t ec = { .rt = &rt,
				.task_id = "no spaces allowed",
				.attempt = 1,
				.expires_ms = wall_ms() + 60000 };
	assert_int_equal(tb_egress_start(&e, &ec, &err), TB_EPOISON);
	assert_null(e);
	assert_non_null(strstr(err.msg, "task id"));
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--hanging-resolver") == 0)
		return hanging_resolver_main();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proxy__allowed_request_gets_the_key_the_client_never_sees),
		cmocka_unit_test(test_proxy__forward_form_and_query_credential),
		cmocka_unit_test(test_proxy__outside_the_policy_is_403_with_an_audit_record),
		cmocka_unit_test(test_proxy__tokens_missing_forged_expired_or_foreign_are_refused),
		cmocka_unit_test(test_proxy__streamed_response_arrives_incrementally),
		cmocka_unit_test(test_proxy__a_recorded_stream_replays_at_its_pace),
		cmocka_unit_test(test_proxy__bodies_stream_up_by_length_or_chunked),
		cmocka_unit_test(test_proxy__oversized_heads_are_431),
		cmocka_unit_test(test_proxy__smuggling_attempts_are_400),
		cmocka_unit_test(test_proxy__slow_client_gets_408_and_others_are_served),
		cmocka_unit_test(test_proxy__connections_over_the_cap_get_503),
		cmocka_unit_test(test_proxy__stop_ends_a_running_stream),
		cmocka_unit_test(test_proxy__headers_that_redirect_method_or_path_are_not_sent),
		cmocka_unit_test(test_proxy__masking_is_not_undone_by_compression_ranges_or_trace),
		cmocka_unit_test(test_proxy__masking_covers_every_case_of_percent_encoding),
		cmocka_unit_test(test_proxy__upstream_framing_that_disagrees_is_not_passed_on),
		cmocka_unit_test(test_proxy__an_answer_before_the_whole_body_says_close),
		cmocka_unit_test(
		    test_proxy__forward_clients_are_asked_for_the_token_and_may_send_basic),
		cmocka_unit_test(test_proxy__a_posted_line_reaches_the_queue_intact),
		cmocka_unit_test(test_proxy__a_malformed_posted_line_is_400_with_the_reason),
		cmocka_unit_test(test_proxy__an_oversized_posted_line_is_413),
		cmocka_unit_test(test_proxy__posted_lines_need_this_tasks_token),
		cmocka_unit_test(
		    test_proxy__the_route_refuses_turn_ended_and_what_it_does_not_serve),
		cmocka_unit_test(test_proxy__listens_inside_a_network_namespace_only),
		cmocka_unit_test(test_proxy__stop_does_not_wait_for_a_hanging_name_lookup),
		cmocka_unit_test(test_egress__a_task_id_no_token_can_carry_is_poison),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
