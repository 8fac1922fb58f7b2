/*
 * proxy.c: the egress proxy's sockets, threads and upstream transfers,
 * and the platform route it answers itself (the contract and the design
 * are in proxy.h). What a request may do is proxy_policy.c's; how its
 * bytes are read is proxy_http.c's; what an agent line means is
 * agent_events.c's.
 *
 * Why a thread per connection rather than one event loop: the upstream
 * side is libcurl's easy interface, whose callbacks may block (a request
 * body read from the client, a response written to a slow client), and
 * a sandbox has few connections at a time (max_conns caps them). Each
 * blocking wait has a deadline and also watches the proxy's stop eventfd,
 * so tb_proxy_stop() ends everything promptly.
 */
#include "proxy.h"

#include "tb/clock.h"
#include "tb/agent_events.h"
#include "proxy_http.h"
#include "proxy_mask.h"
#include "proxy_policy.h"
#include "tb/encoding.h"
#include "tb/runtime.h"
#include "tb/schema_event.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define RESP_HEAD_MAX (64 << 10) /* the upstream's response headers */
#define MASK_MIN 8               /* shorter secrets are not masked */
#define LINGER_MS 500            /* reading what a refused client still sends */

typedef struct secret {
	char *value;   /* rendered header or query value; NULL: none or unreadable */
	char *mask;    /* the secret, masked in responses however echoed (proxy_mask.h) */
	char why[400]; /* why value is NULL although a credential is configured */
} secret_t;

typedef struct conn conn_t;

struct tb_proxy {
	tb_proxy_conf_t conf;
	char task_id[129];
	tb_task_token_key_t key;
	int listen_fd, stop_fd;
	unsigned port;
	secret_t *secrets; /* one per endpoint */
	size_t nsecrets;
	size_t max_mask;
	pthread_t accept_th;
	int accept_started;
	pthread_mutex_t lock;
	conn_t *conns;
	unsigned live;
	atomic_int stopping;
};

struct conn {
	tb_proxy_t *p;
	int fd;
	pthread_t th;
	int done; /* under p->lock */
	conn_t *next;
	char *buf; /* bytes from the client: [off, have) unread */
	size_t off, have, cap;
	char *head; /* the head being parsed, a copy */
	CURL *curl;
	char *hold; /* response bytes held back: maybe the start of a secret */
	size_t nhold;
	int upstream; /* the current request went upstream */
};

/* One request and its response. */
typedef struct exchange {
	conn_t *c;
	tb_http_request_t req;
	const tb_endpoint_t *ep;
	const secret_t *sec;
	int is_head;
	int blocked;   /* the upstream name resolved to an internal address */
	int body_mode; /* 0 none, 1 Content-Length, 2 chunked */
	uint64_t body_left;
	tb_http_chunked_t dec;
	int body_done;
	int body_err; /* the client's body failed: 400 or 408 */
	uint64_t bytes_out;
	long status;
	char *rhead; /* the upstream's headers to pass on */
	size_t rlen;
	char rlength[24];    /* its Content-Length, "" when none */
	int rchunked;        /* it sent Transfer-Encoding: its Content-Length is void */
	const char *framing; /* why its framing was refused, or NULL */
	int head_sent, resp_chunked, resp_nobody, client_err;
	uint64_t bytes_in;
} exchange_t;

static const char *reason_phrase(long status)
{
	static const struct {
		int code;
		const char *text;
	} phrases[] = {
		{ 100, "Continue" },
		{ 200, "OK" },
		{ 201, "Created" },
		{ 202, "Accepted" },
		{ 204, "No Content" },
		{ 206, "Partial Content" },
		{ 301, "Moved Permanently" },
		{ 302, "Found" },
		{ 303, "See Other" },
		{ 304, "Not Modified" },
		{ 307, "Temporary Redirect" },
		{ 308, "Permanent Redirect" },
		{ 400, "Bad Request" },
		{ 401, "Unauthorized" },
		{ 403, "Forbidden" },
		{ 404, "Not Found" },
		{ 405, "Method Not Allowed" },
		{ 407, "Proxy Authentication Required" },
		{ 408, "Request Timeout" },
		{ 409, "Conflict" },
		{ 413, "Content Too Large" },
		{ 415, "Unsupported Media Type" },
		{ 417, "Expectation Failed" },
		{ 422, "Unprocessable Content" },
		{ 429, "Too Many Requests" },
		{ 431, "Request Header Fields Too Large" },
		{ 500, "Internal Server Error" },
		{ 501, "Not Implemented" },
		{ 502, "Bad Gateway" },
		{ 503, "Service Unavailable" },
		{ 504, "Gateway Timeout" },
		{ 505, "HTTP Version Not Supported" },
	};
	for (size_t i = 0; i < sizeof(phrases) / sizeof(phrases[0]); i++)
		if (phrases[i].code == status)
			return phrases[i].text;
	return "";
}

/* ----------------------------------------------------------- waiting */

/* 1 when @p fd is ready for @p events, 0 at @p deadline, -1 when the
 * proxy stops or poll fails. */
static int wait_fd(conn_t *c, short events, uint64_t deadline)
{
	for (;;) {
		struct pollfd pf[2] = { { c->fd, events, 0 }, { c->p->stop_fd, POLLIN, 0 } };
		uint64_t now = tb_mono_ms();
		if (now >= deadline)
			return 0;
		int n = poll(pf, 2, (int)(deadline - now > 1000 ? 1000 : deadline - now));
		if (n < 0 && errno != EINTR)
			return -1;
		if (atomic_load(&c->p->stopping) || (n > 0 && pf[1].revents))
			return -1;
		if (n > 0 && pf[0].revents)
			return 1;
	}
}

static int send_all(conn_t *c, struct iovec *iov, int n, unsigned timeout_ms)
{
	uint64_t deadline = tb_mono_ms() + timeout_ms;

	while (n > 0) {
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };
		ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (wait_fd(c, POLLOUT, deadline) <= 0)
				return -1;
			continue;
		}
		if (w < 0)
			return -1;
		size_t done = (size_t)w;
		while (n > 0 && done >= iov->iov_len) {
			done -= iov->iov_len;
			iov++, n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + done;
			iov->iov_len -= done;
		}
	}
	return 0;
}

static int send_str(conn_t *c, const char *s, size_t len)
{
	struct iovec iov = { (void *)s, len };
	return send_all(c, &iov, 1, c->p->conf.io_timeout_ms);
}

/* Reads more from the client into buf: >0 bytes, 0 end of stream, -1
 * error or stop, -2 @p deadline passed. */
static ssize_t fill(conn_t *c, uint64_t deadline)
{
	if (c->off == c->have)
		c->off = c->have = 0;
	if (c->have == c->cap)
		return -1;
	for (;;) {
		ssize_t n = recv(c->fd, c->buf + c->have, c->cap - c->have, MSG_DONTWAIT);
		if (n > 0) {
			c->have += (size_t)n;
			return n;
		}
		if (n == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		int w = wait_fd(c, POLLIN, deadline);
		if (w == 0)
			return -2;
		if (w < 0)
			return -1;
	}
}

/* ------------------------------------------------------------- audit */

static void audit(conn_t *c, const char *method, const char *host, const char *path,
		  const tb_endpoint_t *ep, int status, uint64_t in, uint64_t out, uint64_t t0,
		  const char *reason)
{
	const tb_proxy_conf_t *conf = &c->p->conf;
	if (!conf->audit)
		return;
	tb_proxy_audit_t a = {
		.method = method ? method : "-",
		.host = host ? host : "",
		.path = path ? path : "",
		.endpoint = ep ? ep->name : NULL,
		.status = status,
		.bytes_in = in,
		.bytes_out = out,
		.duration_ms = tb_mono_ms() - t0,
		.reason = reason,
		.refused = reason != NULL && !c->upstream,
	};
	conf->audit(conf->audit_ud, &a);
}

/* A client-supplied path for the audit when it could not be normalised:
 * no query, printable, bounded. */
static void safe_path(char *out, size_t cap, const char *target)
{
	size_t o = 0;
	for (const char *s = target; s && *s && *s != '?' && o + 1 < cap; s++)
		out[o++] = (*s > 0x20 && *s < 0x7f) ? *s : '?';
	out[o] = '\0';
}

/* ---------------------------------------------------------- refusals */

/* Answers with @p status and @p reason, then closes gently: what the
 * client is still sending is read for a moment, so that closing with
 * unread data (which sends a reset) does not destroy the answer. */
static void refuse_with(conn_t *c, int status, const char *reason, const char *extra)
{
	char head[512], body[700];
	int bl = snprintf(body, sizeof(body), "taskbox proxy: %.600s\n", reason);
	int hl = snprintf(head, sizeof(head),
			  "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
			  "%sContent-Length: %d\r\nConnection: close\r\n\r\n",
			  status, reason_phrase(status), extra ? extra : "", bl);
	struct iovec iov[2] = { { head, (size_t)hl }, { body, (size_t)bl } };
	unsigned t = c->p->conf.io_timeout_ms < 5000 ? c->p->conf.io_timeout_ms : 5000;

	if (send_all(c, iov, 2, t) < 0)
		return;
	shutdown(c->fd, SHUT_WR);
	uint64_t deadline = tb_mono_ms() + LINGER_MS;
	for (size_t drained = 0; drained < (64 << 10);) {
		c->off = c->have = 0;
		ssize_t n = fill(c, deadline);
		if (n <= 0)
			break;
		drained += (size_t)n;
	}
	c->off = c->have = 0;
}

static void refuse(conn_t *c, int status, const char *reason)
{
	refuse_with(c, status, reason, NULL);
}

/* ----------------------------------------------------------- masking */

/* Replaces every echo of the endpoint's secret in @p s with '*'. */
static void mask_all(const secret_t *sec, char *s, size_t len)
{
	if (sec && sec->mask)
		tb_mask_apply(sec->mask, s, len);
}

/* ------------------------------------------------------------- upstream */

static int send_body(exchange_t *x, const char *data, size_t len)
{
	char size[32];
	struct iovec iov[3];
	int n = 0;

	if (!len)
		return 0;
	if (x->resp_chunked) {
		int sl = snprintf(size, sizeof(size), "%zx\r\n", len);
		iov[n++] = (struct iovec){ size, (size_t)sl };
	}
	iov[n++] = (struct iovec){ (void *)data, len };
	if (x->resp_chunked)
		iov[n++] = (struct iovec){ "\r\n", 2 };
	if (send_all(x->c, iov, n, x->c->p->conf.io_timeout_ms) < 0) {
		x->client_err = 1;
		return -1;
	}
	return 0;
}

static int send_resp_head(exchange_t *x)
{
	char line[256];
	int ll;

	x->resp_nobody = x->is_head || x->status == 204 || x->status == 304;
	/* An answer before the client's whole body (an early 413, say): what
	 * the client still sends cannot be told from its next request, so the
	 * connection ends with this answer, and says so. */
	if (x->body_mode && !x->body_done)
		x->req.keep_alive = 0;
	if (!x->resp_nobody && !x->rlength[0]) {
		if (x->req.minor == 1)
			x->resp_chunked = 1;
		else
			x->req.keep_alive = 0; /* HTTP/1.0: the end of the body is the close */
	}
	mask_all(x->sec, x->rhead, x->rlen);
	ll = snprintf(line, sizeof(line), "HTTP/1.1 %ld %s\r\n", x->status,
		      reason_phrase(x->status));
	char tail[160];
	int tl = snprintf(tail, sizeof(tail), "%s%s%s%sConnection: %s\r\n\r\n",
			  x->rlength[0] ? "Content-Length: " : "", x->rlength,
			  x->rlength[0] ? "\r\n" : "",
			  x->resp_chunked ? "Transfer-Encoding: chunked\r\n" : "",
			  x->req.keep_alive ? "keep-alive" : "close");
	struct iovec iov[3] = { { line, (size_t)ll }, { x->rhead, x->rlen }, { tail, (size_t)tl } };
	x->head_sent = 1;
	if (send_all(x->c, iov, 3, x->c->p->conf.io_timeout_ms) < 0) {
		x->client_err = 1;
		return -1;
	}
	return 0;
}

static int hop_by_hop(const char *name, size_t len)
{
	static const char *const hop[] = { "Connection", "Keep-Alive",    "Proxy-Connection",
					   "TE",         "Trailer",       "Transfer-Encoding",
					   "Upgrade",    "Content-Length" };
	for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
		if (strlen(hop[i]) == len && strncasecmp(name, hop[i], len) == 0)
			return 1;
	return len >= 6 && strncasecmp(name, "Proxy-", 6) == 0;
}

static size_t on_header(char *b, size_t size, size_t nitems, void *ud)
{
	exchange_t *x = ud;
	size_t len = size * nitems;

	if (x->head_sent)
		return len; /* trailers: not passed on */
	if (len >= 5 && strncmp(b, "HTTP/", 5) == 0) {
		const char *sp = memchr(b, ' ', len);
		x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		x->rlen = 0;
		x->rlength[0] = '\0';
		x->rchunked = 0;
		return len;
	}
	if ((len == 2 && b[0] == '\r') || (len == 1 && b[0] == '\n')) {
		if (x->status >= 100 && x->status < 200) {
			x->rlen = 0; /* an interim answer (100 Continue): not passed on */
			x->rlength[0] = '\0';
			x->rchunked = 0;
			return len;
		}
		if (x->status < 200 || x->status > 999)
			return 0;
		/* RFC 9112 6.3: Transfer-Encoding overrides Content-Length
		 * (curl decodes the body by it); the client gets the body
		 * framed anew, never a length that does not describe it. */
		if (x->rchunked)
			x->rlength[0] = '\0';
		return send_resp_head(x) < 0 ? 0 : len;
	}
	if (b[0] == ' ' || b[0] == '\t')
		return len; /* folded: dropped */
	const char *colon = memchr(b, ':', len);
	if (!colon)
		return len;
	size_t nl = (size_t)(colon - b);
	if (nl == 17 && strncasecmp(b, "Transfer-Encoding", 17) == 0)
		x->rchunked = 1; /* and dropped below: hop-by-hop */
	if (nl == 14 && strncasecmp(b, "Content-Length", 14) == 0) {
		const char *v = colon + 1, *e = b + len;
		char got[sizeof(x->rlength)];
		while (v < e && (*v == ' ' || *v == '\t'))
			v++;
		while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ' || e[-1] == '\t'))
			e--;
		size_t d = 0;
		while (v + d < e && v[d] >= '0' && v[d] <= '9' && d < sizeof(got) - 1)
			d++;
		memcpy(got, v, d);
		got[d] = '\0';
		/* A length that is not one number, or two that differ: the
		 * body's end is not known, so nothing of it is passed on. */
		if (!d || v + d != e || d > 18) {
			x->framing = "a malformed Content-Length";
			return 0;
		}
		if (x->rlength[0] && strcmp(x->rlength, got) != 0) {
			x->framing = "two different Content-Length values";
			return 0;
		}
		memcpy(x->rlength, got, d + 1);
		return len;
	}
	if (hop_by_hop(b, nl))
		return len;
	if (x->rlen + len > RESP_HEAD_MAX)
		return 0;
	char *bigger = realloc(x->rhead, x->rlen + len);
	if (!bigger)
		return 0;
	x->rhead = bigger;
	memcpy(x->rhead + x->rlen, b, len);
	x->rlen += len;
	return len;
}

static size_t on_write(char *data, size_t size, size_t nitems, void *ud)
{
	exchange_t *x = ud;
	conn_t *c = x->c;
	size_t len = size * nitems;

	if (!x->head_sent && send_resp_head(x) < 0)
		return 0;
	x->bytes_in += len;
	if (x->resp_nobody)
		return len;
	if (!x->sec || !x->sec->mask)
		return send_body(x, data, len) < 0 ? 0 : len;
	/* Held bytes and these, masked; the tail that may be the start of a
	 * secret waits for the next call. */
	size_t all = c->nhold + len;
	char *work = malloc(all);
	if (!work)
		return 0;
	memcpy(work, c->hold, c->nhold);
	memcpy(work + c->nhold, data, len);
	mask_all(x->sec, work, all);
	size_t keep = tb_mask_pending(x->sec->mask, work, all);
	int rc = send_body(x, work, all - keep);
	memcpy(c->hold, work + all - keep, keep);
	c->nhold = keep;
	OPENSSL_cleanse(work, all);
	free(work);
	return rc < 0 ? 0 : len;
}

static size_t on_read(char *out, size_t size, size_t nitems, void *ud)
{
	exchange_t *x = ud;
	conn_t *c = x->c;
	size_t cap = size * nitems;

	while (!x->body_done) {
		if (c->off == c->have) {
			ssize_t n = fill(c, tb_mono_ms() + c->p->conf.io_timeout_ms);
			if (n <= 0) {
				x->body_err = n == -2 ? 408 : 400;
				return CURL_READFUNC_ABORT;
			}
		}
		if (x->body_mode == 1) {
			size_t n = c->have - c->off;
			if (n > x->body_left)
				n = (size_t)x->body_left;
			if (n > cap)
				n = cap;
			memcpy(out, c->buf + c->off, n);
			c->off += n;
			x->body_left -= n;
			x->body_done = x->body_left == 0;
			x->bytes_out += n;
			return n;
		}
		size_t used, got;
		int rc = tb_http_chunked_decode(&x->dec, c->buf + c->off, c->have - c->off, &used,
						out, cap, &got);
		c->off += used;
		if (rc < 0) {
			x->body_err = 400;
			return CURL_READFUNC_ABORT;
		}
		x->body_done = rc == 1;
		x->bytes_out += got;
		if (got)
			return got;
	}
	return 0;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t cc, curl_off_t d)
{
	exchange_t *x = ud;
	(void)a, (void)b, (void)cc, (void)d;
	return atomic_load(&x->c->p->stopping) ? 1 : 0;
}

/* 1 when the runtime names an address itself ("127.0.0.1", "10.0.0.5",
 * "::1") or "localhost": then it means what it says. */
static int names_an_address(const char *host)
{
	struct in6_addr a6;
	struct in_addr a4;
	return strcasecmp(host, "localhost") == 0 || inet_pton(AF_INET, host, &a4) == 1 ||
	       inet_pton(AF_INET6, host, &a6) == 1;
}

/* DNS rebinding: a host name the runtime allows may come to resolve to
 * this machine (the worker's own services), its private networks or a
 * metadata service (tb_proxy_addr_internal() lists the ranges). The
 * address is checked as curl connects, after resolution, so no answer
 * given between a check and the connection can slip past. */
static curl_socket_t on_open(void *ud, curlsocktype purpose, struct curl_sockaddr *addr)
{
	exchange_t *x = ud;
	if (purpose == CURLSOCKTYPE_IPCXN && !names_an_address(x->ep->host) &&
	    tb_proxy_addr_internal(&addr->addr)) {
		x->blocked = 1;
		return CURL_SOCKET_BAD;
	}
	return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

/* 1 for a header that asks a server (or a gateway in front of it) to
 * use another method, path or host than the request line's: honoured by
 * some frameworks, they would take a request around the runtime's method
 * and path policy. Never sent upstream. */
static int overrides_target(const char *name)
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
		"X-Original-Host",
		"X-Host",
		"Forwarded",
	};
	if (strncasecmp(name, "X-Forwarded-", 12) == 0) /* -Host, -Prefix, -Uri, -Path... */
		return 1;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcasecmp(name, names[i]) == 0)
			return 1;
	return 0;
}

/* With a credential, what could make an echo of the key slip past the
 * masking: a compressed answer (it is passed on undecoded) or one cut
 * into ranges (each piece too short to match). */
static int defeats_masking(const char *name)
{
	return strcasecmp(name, "Accept-Encoding") == 0 || strcasecmp(name, "Range") == 0 ||
	       strcasecmp(name, "If-Range") == 0;
}

/* The client's headers that go upstream, and the credential. */
static struct curl_slist *upstream_headers(const exchange_t *x, int *ok)
{
	static const char *const drop[] = { "Host", "Content-Length", "Expect", "X-Taskbox-Token" };
	const tb_http_request_t *r = &x->req;
	const char *connection = tb_http_header_get(r, "Connection");
	const char *cred = x->ep->credential.header;
	int has_cred = x->ep->credential.header || x->ep->credential.query;
	struct curl_slist *l = NULL, *n;
	int has_accept = 0;

	*ok = 0;
	for (size_t i = 0; i < r->nheaders; i++) {
		const char *name = r->headers[i].name, *v = r->headers[i].value;
		int skip = hop_by_hop(name, strlen(name)) ||
			   (connection && tb_http_has_token(connection, name)) ||
			   (cred && strcasecmp(name, cred) == 0) || overrides_target(name) ||
			   (has_cred && defeats_masking(name));
		for (size_t k = 0; k < sizeof(drop) / sizeof(drop[0]) && !skip; k++)
			skip = strcasecmp(name, drop[k]) == 0;
		if (skip)
			continue;
		has_accept |= strcasecmp(name, "Accept") == 0;
		size_t need = strlen(name) + strlen(v) + 3;
		char *line = malloc(need);
		if (!line)
			goto fail;
		/* "Name;" is how curl is told to send a header with no value. */
		snprintf(line, need, v[0] ? "%s: %s" : "%s;", name, v);
		n = curl_slist_append(l, line);
		free(line);
		if (!n)
			goto fail;
		l = n;
	}
	if (cred && x->sec && x->sec->value) {
		size_t need = strlen(cred) + strlen(x->sec->value) + 3;
		char *line = malloc(need);
		if (!line)
			goto fail;
		snprintf(line, need, "%s: %s", cred, x->sec->value);
		n = curl_slist_append(l, line);
		OPENSSL_cleanse(line, need);
		free(line);
		if (!n)
			goto fail;
		l = n;
	}
	/* No Expect: 100-continue of curl's own, and no Accept the client
	 * did not send. */
	if (!(n = curl_slist_append(l, "Expect:")))
		goto fail;
	l = n;
	if (!has_accept && !(n = curl_slist_append(l, "Accept:")))
		goto fail;
	l = n;
	if (has_cred && !(n = curl_slist_append(l, "Accept-Encoding: identity")))
		goto fail;
	l = n;
	*ok = 1;
	return l;
fail:
	curl_slist_free_all(l);
	return NULL;
}

/* Makes the upstream request and streams its answer. Returns 1 when the
 * connection may carry another request. */
static int forward(exchange_t *x, const tb_proxy_decision_t *d, uint64_t t0)
{
	conn_t *c = x->c;
	const tb_endpoint_t *ep = x->ep;
	const tb_credential_t *cr = &ep->credential;
	char *url = NULL, *qname = NULL, errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdrs = NULL;
	int ok, keep = 0;
	CURLcode res;

	if (!c->curl && !(c->curl = curl_easy_init())) {
		refuse(c, 502, "the proxy could not start an upstream transfer");
		audit(c, x->req.method, ep->host, d->path, ep, 502, 0, 0, t0, "curl_easy_init");
		return 0;
	}
	CURL *h = c->curl;
	curl_easy_reset(h);
	if (cr->query && x->sec && x->sec->value && !(qname = curl_easy_escape(h, cr->query, 0)))
		goto nomem;
	const char *host = ep->host;
	int v6 = strchr(host, ':') != NULL;
	size_t ulen = strlen(ep->scheme) + strlen(host) + strlen(d->path) + strlen(d->query) +
		      (qname ? strlen(qname) + strlen(x->sec->value) : 0) + 32;
	if (!(url = malloc(ulen)))
		goto nomem;
	snprintf(url, ulen, "%s://%s%s%s:%u%s%s%s%s%s%s", ep->scheme, v6 ? "[" : "", host,
		 v6 ? "]" : "", (unsigned)ep->port, d->path, d->query[0] || qname ? "?" : "",
		 d->query, d->query[0] && qname ? "&" : "", qname ? qname : "", qname ? "=" : "");
	if (qname) {
		size_t used = strlen(url);
		snprintf(url + used, ulen - used, "%s", x->sec->value);
	}
	if (!(hdrs = upstream_headers(x, &ok)) || !ok)
		goto nomem;

	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_HTTP_CONTENT_DECODING, 0L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->p->conf.connect_timeout_ms);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_PROXY, ""); /* direct: not the worker's *_proxy */
	curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, on_open);
	curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, x);
#if LIBCURL_VERSION_NUM >= 0x075700
	/* An aborted transfer does not wait for its resolver thread (a
	 * getaddrinfo() that may take the resolver's whole timeout): that
	 * would hold tb_proxy_stop() up. The thread ends on its own. */
	curl_easy_setopt(h, CURLOPT_QUICK_EXIT, 1L);
#endif
	if (x->is_head)
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	else if (strcmp(x->req.method, "GET") != 0 || x->body_mode)
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, x->req.method);
	if (x->body_mode) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, x);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
				 x->body_mode == 1 ? (curl_off_t)x->body_left : (curl_off_t)-1);
		/* The client waits for our go-ahead before its body. */
		if (x->req.expect_continue && x->req.minor == 1 &&
		    send_str(c, "HTTP/1.1 100 Continue\r\n\r\n", 25) < 0)
			goto done;
	}
	c->upstream = 1;
	res = curl_easy_perform(h);
	if (res == CURLE_OK && c->nhold)
		send_body(x, c->hold, c->nhold);
	c->nhold = 0;
	if (atomic_load(&c->p->stopping)) {
		audit(c, x->req.method, ep->host, d->path, ep, x->head_sent ? (int)x->status : 502,
		      x->bytes_in, x->bytes_out, t0, "the proxy stopped");
		goto done;
	}
	if (!x->head_sent) {
		char why[CURL_ERROR_SIZE + 400];
		int status = x->body_err                       ? x->body_err
			     : res == CURLE_OPERATION_TIMEDOUT ? 504
							       : 502;
		if (x->body_err == 408)
			snprintf(why, sizeof(why), "the request body stalled");
		else if (x->body_err)
			snprintf(why, sizeof(why), "malformed or truncated request body");
		else if (x->framing)
			snprintf(why, sizeof(why), "upstream %.64s: its answer has %s", ep->name,
				 x->framing);
		else if (x->blocked)
			snprintf(why, sizeof(why),
				 "upstream %.64s: '%.253s' resolved to an internal address "
				 "(loopback, private, link-local, ...): refused",
				 ep->name, ep->host);
		else
			snprintf(why, sizeof(why), "upstream %s: %s", ep->name,
				 errbuf[0] ? errbuf : curl_easy_strerror(res));
		mask_all(x->sec, why, strlen(why));
		refuse(c, status, why);
		audit(c, x->req.method, ep->host, d->path, ep, status, x->bytes_in, x->bytes_out,
		      t0, why);
		goto done;
	}
	if (res == CURLE_OK && x->resp_chunked && !x->client_err && send_str(c, "0\r\n\r\n", 5) < 0)
		x->client_err = 1;
	audit(c, x->req.method, ep->host, d->path, ep, (int)x->status, x->bytes_in, x->bytes_out,
	      t0, res == CURLE_OK ? NULL : "the response was cut short");
	keep = res == CURLE_OK && !x->client_err && x->req.keep_alive &&
	       (!x->body_mode || x->body_done);
	goto done;
nomem:
	refuse(c, 502, "out of memory");
	audit(c, x->req.method, ep->host, d->path, ep, 502, 0, 0, t0, "out of memory");
done:
	/* Nothing of the secret stays in the transfer's buffers. */
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
	curl_slist_free_all(hdrs);
	if (url) {
		OPENSSL_cleanse(url, strlen(url));
		free(url);
	}
	curl_free(qname);
	free(x->rhead);
	x->rhead = NULL;
	return keep;
}

/* ------------------------------------------------------------ requests */

/* Splits the request target into the endpoint it names and the path. */
static int split_target(tb_proxy_target_t *t, char *binding, size_t blen, char *host, size_t hlen,
			char *path, size_t plen, const char *target, char *why, size_t wlen)
{
	const char *rest;

	binding[0] = host[0] = '\0';
	if (target[0] == '/') {
		const char *e = target + 1 + strcspn(target + 1, "/?");
		if ((size_t)(e - target - 1) >= blen || e == target + 1) {
			snprintf(why, wlen, "the path must start with an endpoint's name");
			return 400;
		}
		memcpy(binding, target + 1, (size_t)(e - target - 1));
		binding[e - target - 1] = '\0';
		t->binding = binding;
		rest = e;
	} else if (strncasecmp(target, "http://", 7) == 0 ||
		   strncasecmp(target, "https://", 8) == 0) {
		const char *a = target + (target[4] == ':' ? 7 : 8);
		const char *e = a + strcspn(a, "/?");
		const char *hs = a, *he = e, *port = NULL;
		if (memchr(a, '@', (size_t)(e - a))) {
			snprintf(why, wlen, "user information in the URI");
			return 400;
		}
		if (*a == '[') { /* an IPv6 literal */
			const char *rb = memchr(a, ']', (size_t)(e - a));
			if (!rb) {
				snprintf(why, wlen, "malformed host");
				return 400;
			}
			hs = a + 1, he = rb;
			if (rb + 1 < e && rb[1] == ':')
				port = rb + 2;
			else if (rb + 1 != e) {
				snprintf(why, wlen, "malformed host");
				return 400;
			}
		} else {
			const char *colon = memchr(a, ':', (size_t)(e - a));
			if (colon)
				he = colon, port = colon + 1;
		}
		if (he == hs || (size_t)(he - hs) >= hlen) {
			snprintf(why, wlen, "malformed host");
			return 400;
		}
		for (const char *c = hs; c < he; c++)
			if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			      (*c >= '0' && *c <= '9') || *c == '-' || *c == '.' || *c == '_' ||
			      (*c == ':' && *a == '['))) {
				snprintf(why, wlen, "malformed host");
				return 400;
			}
		memcpy(host, hs, (size_t)(he - hs));
		host[he - hs] = '\0';
		t->host = host;
		if (port) {
			unsigned v = 0;
			const char *c = port;
			for (; c < e && *c >= '0' && *c <= '9' && v <= 65535; c++)
				v = v * 10 + (unsigned)(*c - '0');
			if (c != e || c == port || v == 0 || v > 65535) {
				snprintf(why, wlen, "malformed port");
				return 400;
			}
			t->port = v;
		}
		rest = e;
	} else {
		snprintf(why, wlen, "the request target must be /<endpoint>/<path> or http://...");
		return 400;
	}
	if (strlen(rest) + 2 > plen) {
		snprintf(why, wlen, "the request target is too long");
		return 400;
	}
	snprintf(path, plen, "%s%s", rest[0] == '/' ? "" : "/", rest);
	t->path = path;
	return 0;
}

/* The password of a Basic credential ("user:password" in base64) in
 * @p out, or NULL when @p b64 is not one or is too long. */
static const char *basic_password(char *out, size_t cap, const char *b64)
{
	while (*b64 == ' ')
		b64++;
	ssize_t n = cap ? tb_base64_decode(out, cap - 1, b64, strlen(b64), 0) : -1;
	if (n < 0 || memchr(out, '\0', (size_t)n))
		return NULL;
	out[n] = '\0';
	const char *colon = strchr(out, ':');
	return colon ? colon + 1 : NULL;
}

/* --------------------------------------------------- the platform route */

/* The path when @p target is for the platform route (the reverse form,
 * or the forward form naming the proxy's own address and port), else
 * NULL: then it is for an endpoint. */
static const char *platform_path(const tb_proxy_t *p, const char *target)
{
	static const char prefix[] = "/" TB_PROXY_RESERVED_NAME;
	const char *path = target;

	if (target[0] != '/') {
		const char *a = target + 7, *s;
		unsigned port = 0;
		if (strncasecmp(target, "http://", 7) != 0 ||
		    (strncasecmp(a, "127.0.0.1:", 10) != 0 &&
		     strncasecmp(a, "localhost:", 10) != 0))
			return NULL;
		for (s = a + 10; *s >= '0' && *s <= '9' && port <= 65535; s++)
			port = port * 10 + (unsigned)(*s - '0');
		if (s == a + 10 || port != p->port)
			return NULL;
		path = s;
	}
	size_t n = sizeof(prefix) - 1;
	if (strncmp(path, prefix, n) != 0 || (path[n] && path[n] != '/' && path[n] != '?'))
		return NULL;
	return path;
}

/* 1 for "application/json", with parameters or without. */
static int is_json(const char *type)
{
	static const char json[] = "application/json";
	if (!type || strncasecmp(type, json, sizeof(json) - 1) != 0)
		return 0;
	for (type += sizeof(json) - 1; *type == ' ' || *type == '\t';)
		type++;
	return *type == '\0' || *type == ';';
}

/* Reads the request's whole body into @p out (@p cap bytes). Returns 0;
 * or the status to refuse with: 400 malformed or cut short, 408
 * stalled, 413 more than @p cap bytes. */
static int read_body(conn_t *c, const tb_http_request_t *r, char *out, size_t cap, size_t *len)
{
	uint64_t left = r->content_length > 0 ? (uint64_t)r->content_length : 0;
	tb_http_chunked_t dec = { 0 };

	*len = 0;
	if (!r->chunked && left > cap)
		return 413;
	for (;;) {
		if (!r->chunked && !left)
			return 0;
		if (c->off == c->have) {
			ssize_t n = fill(c, tb_mono_ms() + c->p->conf.io_timeout_ms);
			if (n <= 0)
				return n == -2 ? 408 : 400;
		}
		if (!r->chunked) {
			size_t n = c->have - c->off;
			n = n > left ? (size_t)left : n;
			memcpy(out + *len, c->buf + c->off, n);
			c->off += n, *len += n, left -= n;
			continue;
		}
		/* One byte of room beyond @p cap tells a body over it. */
		size_t used, got;
		int rc = tb_http_chunked_decode(&dec, c->buf + c->off, c->have - c->off, &used,
						out + *len, cap + 1 - *len, &got);
		c->off += used, *len += got;
		if (rc < 0)
			return 400;
		if (*len > cap)
			return 413;
		if (rc == 1)
			return 0;
	}
}

/* POST /_taskbox/events: one agent line, handed to conf->event. Returns
 * 1 when the connection may carry another request. */
static int serve_platform(conn_t *c, const tb_http_request_t *r, const char *path)
{
	const tb_proxy_conf_t *conf = &c->p->conf;
	size_t max = conf->max_event_bytes, len = 0;
	tb_bytes_t payload = { 0 };
	char why[700], *body = NULL;
	tb_error_t err;
	int type, status;

	if (strcmp(path, TB_PROXY_EVENTS_PATH) != 0 || !conf->event) {
		refuse(c, 404,
		       conf->event ? "no such platform route: there is POST " TB_PROXY_EVENTS_PATH
				   : "this proxy takes no events");
		return 0;
	}
	if (strcmp(r->method, "POST") != 0) {
		refuse_with(c, 405, "POST one agent protocol line to " TB_PROXY_EVENTS_PATH,
			    "Allow: POST\r\n");
		return 0;
	}
	if (!is_json(tb_http_header_get(r, "Content-Type"))) {
		refuse(c, 415, "send the line with Content-Type: application/json");
		return 0;
	}
	snprintf(why, sizeof(why),
		 "the line is over the runtime's agent.max_event_bytes (%zu bytes)", max);
	/* The line and one '\n' after it, as on fd 3. */
	if (!r->chunked && r->content_length > (int64_t)max + 1) {
		refuse(c, 413, why);
		return 0;
	}
	if (!(body = malloc(max + 2))) {
		refuse(c, 503, "out of memory");
		return 0;
	}
	if (r->expect_continue && r->minor == 1 &&
	    send_str(c, "HTTP/1.1 100 Continue\r\n\r\n", 25) < 0) {
		free(body);
		return 0;
	}
	status = read_body(c, r, body, max + 1, &len);
	if (status == 0 && len && body[len - 1] == '\n')
		len--;
	if (status == 0 && len > max)
		status = 413;
	if (status) {
		refuse(c, status,
		       status == 413   ? why
		       : status == 408 ? "the request body stalled"
				       : "malformed or truncated request body");
		goto out;
	}
	if (memchr(body, '\n', len)) {
		refuse(c, 400, "one line only: the body holds a newline before its end");
		goto out;
	}
	if (tb_agent_parse_line(&type, &payload, body, len, &err) < 0) {
		refuse(c, 400, err.msg);
		goto out;
	}
	if (type == TB_EV_TURN) {
		free(payload.data);
		refuse(c, 403,
		       "turn-ended is not taken here: a turn ends on the agent's own channel "
		       "(file descriptor 3)");
		goto out;
	}
	if (conf->event(conf->event_ud, type, payload) < 0) {
		refuse_with(c, 429,
			    "too many events waiting to be recorded: slow down "
			    "(the runtime's agent.max_events_per_second)",
			    "Retry-After: 1\r\n");
		goto out;
	}
	free(body);
	static const char ok[] = "{\"accepted\":true}";
	char head[200];
	int hl = snprintf(head, sizeof(head),
			  "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\n"
			  "Content-Length: %zu\r\nConnection: %s\r\n\r\n",
			  sizeof(ok) - 1, r->keep_alive ? "keep-alive" : "close");
	struct iovec iov[2] = { { head, (size_t)hl }, { (void *)ok, sizeof(ok) - 1 } };
	return send_all(c, iov, 2, conf->io_timeout_ms) == 0 && r->keep_alive;
out:
	free(body);
	return 0;
}

/* Serves one request whose head is in c->head. Returns 1 when the
 * connection may carry another. */
static int serve(conn_t *c, size_t hlen, uint64_t t0)
{
	tb_proxy_t *p = c->p;
	exchange_t x = { .c = c, .status = 0 };
	tb_proxy_target_t t = { 0 };
	tb_proxy_decision_t *d = NULL;
	char why[600], binding[72], host[264], spath[300], basic[TB_TASK_TOKEN_MAX + 200];
	char *path = NULL;
	tb_error_t err;
	int status, keep = 0;

	c->upstream = 0;
	if ((status = tb_http_parse_request(&x.req, c->head, hlen, why, sizeof(why))) != 0) {
		refuse(c, status, why);
		audit(c, NULL, NULL, NULL, NULL, status, 0, 0, t0, why);
		return 0;
	}
	const tb_http_request_t *r = &x.req;
	safe_path(spath, sizeof(spath), r->target);

	/* The task token first: nothing is said to a client without one. */
	const char *tok = tb_http_header_get(r, "X-Taskbox-Token");
	const char *pa = tb_http_header_get(r, "Proxy-Authorization");
	int forward_form = r->target[0] != '/';
	if (!tok && pa && strncasecmp(pa, "Bearer ", 7) == 0)
		for (tok = pa + 7; *tok == ' ';)
			tok++;
	if (!tok && pa && strncasecmp(pa, "Basic ", 6) == 0)
		tok = basic_password(basic, sizeof(basic), pa + 6);
	if (!tok) {
		/* A forward-proxy client (HTTP_PROXY) is asked the standard way:
		 * clients that hold the token as the proxy URL's password
		 * answer with Basic. */
		status = forward_form ? 407 : 401;
		snprintf(why, sizeof(why),
			 "no task token: send X-Taskbox-Token, Proxy-Authorization: Bearer, or "
			 "Proxy-Authorization: Basic with $TASKBOX_TOKEN as the password");
	} else {
		int rc = tb_task_token_verify(&p->key, tok, strlen(tok), p->task_id,
					      p->conf.attempt, tb_wall_ms(), &err);
		status = rc == 0 ? 0 : rc == TB_EFENCED ? 403 : 401;
		if (rc < 0)
			snprintf(why, sizeof(why), "%.500s", err.msg);
	}
	OPENSSL_cleanse(basic, sizeof(basic));
	if (status) {
		refuse_with(c, status, why,
			    status == 407 ? "Proxy-Authenticate: Basic realm=\"taskbox\"\r\n"
					  : NULL);
		audit(c, r->method, NULL, spath, NULL, status, 0, 0, t0, why);
		return 0;
	}
	/* Not an egress request: the proxy answers it, no audit record. */
	const char *ppath = platform_path(p, r->target);
	if (ppath)
		return serve_platform(c, r, ppath);
	if (strcmp(r->method, "CONNECT") == 0) {
		snprintf(why, sizeof(why),
			 "CONNECT is not allowed: send plain http:// requests (HTTP_PROXY or "
			 "the TASKBOX_ENDPOINT_* URLs); the proxy speaks HTTPS upstream");
		refuse(c, 403, why);
		audit(c, r->method, spath, "", NULL, 403, 0, 0, t0, why);
		return 0;
	}
	if (!(path = malloc(TB_PROXY_PATH_MAX + 2)) || !(d = malloc(sizeof(*d)))) {
		refuse(c, 503, "out of memory");
		goto out;
	}
	t.method = r->method;
	if ((status = split_target(&t, binding, sizeof(binding), host, sizeof(host), path,
				   TB_PROXY_PATH_MAX + 2, r->target, why, sizeof(why))) != 0) {
		refuse(c, status, why);
		audit(c, r->method, NULL, spath, NULL, status, 0, 0, t0, why);
		goto out;
	}
	tb_proxy_policy_decide(d, p->conf.endpoints, &t);
	const char *ahost = d->endpoint ? d->endpoint->host : t.host ? t.host : binding;
	if (d->status) {
		refuse(c, d->status, d->reason);
		audit(c, r->method, ahost, d->path[0] ? d->path : spath, d->endpoint, d->status, 0,
		      0, t0, d->reason);
		goto out;
	}
	x.ep = d->endpoint;
	x.sec = &p->secrets[x.ep - (const tb_endpoint_t *)p->conf.endpoints->items];
	x.is_head = strcmp(r->method, "HEAD") == 0;
	/* A body goes up as it came: with its length, or chunked. POST, PUT
	 * and PATCH always say their length, 0 when they have none. */
	int wants_body =
	    !strcmp(r->method, "POST") || !strcmp(r->method, "PUT") || !strcmp(r->method, "PATCH");
	x.body_mode = r->chunked ? 2 : r->content_length > 0 || wants_body ? 1 : 0;
	x.body_left = r->content_length > 0 ? (uint64_t)r->content_length : 0;
	x.body_done = x.body_mode == 1 && x.body_left == 0;
	if (x.is_head && (x.body_left || r->chunked)) {
		refuse(c, 400, "a HEAD request with a body");
		audit(c, r->method, ahost, d->path, x.ep, 400, 0, 0, t0,
		      "a HEAD request with a body");
		goto out;
	}
	if (x.ep->credential.header || x.ep->credential.query) {
		/* The upstream would echo the request, the key it was given
		 * included, in forms the masking may not know. */
		if (strcmp(r->method, "TRACE") == 0) {
			snprintf(why, sizeof(why),
				 "TRACE is not allowed for endpoint '%.64s': it echoes the "
				 "credential the proxy adds",
				 x.ep->name);
			refuse(c, 403, why);
			audit(c, r->method, ahost, d->path, x.ep, 403, 0, 0, t0, why);
			goto out;
		}
		if (!x.sec->value) {
			snprintf(why, sizeof(why),
				 "the worker has no credential for endpoint '%s': %s", x.ep->name,
				 x.sec->why);
			refuse(c, 502, why);
			audit(c, r->method, ahost, d->path, x.ep, 502, 0, 0, t0, why);
			goto out;
		}
	}
	keep = forward(&x, d, t0);
out:
	free(path);
	free(d);
	return keep;
}

/* Reads the next request head into c->head. Returns its length; 0 to
 * close quietly (end of stream, idle, stopping); or minus the status to
 * refuse with. */
static long read_head(conn_t *c, int first)
{
	const tb_proxy_conf_t *conf = &c->p->conf;
	uint64_t now = tb_mono_ms();
	uint64_t deadline =
	    now + (first || c->have > c->off ? conf->header_timeout_ms : conf->idle_timeout_ms);
	int started = first || c->have > c->off;
	size_t skip;

	if (c->off) {
		memmove(c->buf, c->buf + c->off, c->have - c->off);
		c->have -= c->off, c->off = 0;
	}
	for (;;) {
		if (c->have) {
			long e = tb_http_head_end(c->buf, c->have, &skip);
			if (e < 0)
				return -400;
			if (e > 0) {
				memcpy(c->head, c->buf + skip, (size_t)e - skip);
				c->head[e - (long)skip] = '\0';
				c->off = (size_t)e;
				return e - (long)skip;
			}
			if (c->have >= conf->max_head_bytes)
				return -431;
		}
		ssize_t n = fill(c, deadline);
		if (n == -2)
			return started ? -408 : 0;
		if (n <= 0)
			return 0;
		if (!started) {
			started = 1;
			deadline = tb_mono_ms() + conf->header_timeout_ms;
		}
	}
}

static void *conn_main(void *arg)
{
	conn_t *c = arg;
	tb_proxy_t *p = c->p;

	for (int first = 1; !atomic_load(&p->stopping); first = 0) {
		uint64_t t0 = tb_mono_ms();
		c->upstream = 0;
		long n = read_head(c, first);
		if (n == 0)
			break;
		if (n < 0) {
			const char *why = n == -408   ? "the request head did not arrive in time"
					  : n == -431 ? "the request head is too large"
						      : "malformed request head";
			refuse(c, (int)-n, why);
			audit(c, NULL, NULL, NULL, NULL, (int)-n, 0, 0, t0, why);
			break;
		}
		if (!serve(c, (size_t)n, t0))
			break;
	}
	if (c->curl)
		curl_easy_cleanup(c->curl);
	c->curl = NULL;
	/* Closed here, not when reaped: the client sees the end at once. */
	pthread_mutex_lock(&p->lock);
	close(c->fd);
	c->fd = -1;
	p->live--;
	c->done = 1;
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* --------------------------------------------------------- accepting */

static void conn_free(conn_t *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->buf);
	free(c->head);
	if (c->hold)
		OPENSSL_cleanse(c->hold, c->p->max_mask);
	free(c->hold);
	free(c);
}

/* Joins and frees finished connections (all of them when @p all). */
static void reap(tb_proxy_t *p, int all)
{
	conn_t *gone = NULL, **pp;

	pthread_mutex_lock(&p->lock);
	for (pp = &p->conns; *pp;) {
		conn_t *c = *pp;
		if (all || c->done) {
			*pp = c->next;
			c->next = gone;
			gone = c;
		} else {
			pp = &c->next;
		}
	}
	pthread_mutex_unlock(&p->lock);
	while (gone) {
		conn_t *c = gone;
		gone = c->next;
		pthread_join(c->th, NULL);
		conn_free(c);
	}
}

static void overloaded(tb_proxy_t *p, int fd)
{
	static const char body[] = "taskbox proxy: too many connections from this task\n";
	char msg[256];
	int n = snprintf(msg, sizeof(msg),
			 "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
			 sizeof(body) - 1, body);
	ssize_t w = send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	(void)w;
	if (p->conf.audit) {
		tb_proxy_audit_t a = { .method = "-",
				       .host = "",
				       .path = "",
				       .status = 503,
				       .reason = "too many connections from this task",
				       .refused = 1 };
		p->conf.audit(p->conf.audit_ud, &a);
	}
	close(fd);
}

static void *accept_main(void *arg)
{
	tb_proxy_t *p = arg;

	while (!atomic_load(&p->stopping)) {
		struct pollfd pf[2] = { { p->listen_fd, POLLIN, 0 }, { p->stop_fd, POLLIN, 0 } };
		int n = poll(pf, 2, 500);
		reap(p, 0);
		if (n < 0 && errno != EINTR)
			break;
		if (n <= 0 || pf[1].revents)
			continue;
		for (;;) {
			int fd = accept4(p->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (fd < 0)
				break;
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			pthread_mutex_lock(&p->lock);
			int full = p->live >= p->conf.max_conns;
			pthread_mutex_unlock(&p->lock);
			if (full) {
				overloaded(p, fd);
				continue;
			}
			conn_t *c = calloc(1, sizeof(*c));
			size_t cap = p->conf.max_head_bytes;
			if (!c || !(c->buf = malloc(cap)) || !(c->head = malloc(cap + 1)) ||
			    (p->max_mask && !(c->hold = malloc(p->max_mask)))) {
				if (c) {
					c->p = p;
					c->fd = -1;
					conn_free(c);
				}
				overloaded(p, fd);
				continue;
			}
			c->p = p, c->fd = fd, c->cap = cap;
			pthread_mutex_lock(&p->lock);
			p->live++;
			if (pthread_create(&c->th, NULL, conn_main, c) != 0) {
				p->live--;
				pthread_mutex_unlock(&p->lock);
				c->fd = -1;
				conn_free(c);
				overloaded(p, fd);
				continue;
			}
			c->next = p->conns;
			p->conns = c;
			pthread_mutex_unlock(&p->lock);
		}
	}
	return NULL;
}

/* ------------------------------------------------------------- setup */

struct listen_job {
	pid_t pid;
	unsigned port;
	int fd;
	int errnum;
	const char *step;
};

static void make_listener(struct listen_job *j)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)j->port) };
	int one = 1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	j->step = "socket";
	if ((j->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		goto fail;
	setsockopt(j->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	j->step = "bind 127.0.0.1";
	if (bind(j->fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		goto fail;
	j->step = "listen";
	if (listen(j->fd, 64) < 0)
		goto fail;
	return;
fail:
	j->errnum = errno;
	if (j->fd >= 0)
		close(j->fd);
	j->fd = -1;
}

/* A thread of its own joins the namespace: setns() moves only the calling
 * thread, and this one ends right after, so no thread of the worker is
 * left inside. The socket keeps the namespace it was created in. */
static void *listen_in_netns(void *arg)
{
	struct listen_job *j = arg;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)j->pid);
	j->step = "open the network namespace";
	int ns = open(path, O_RDONLY | O_CLOEXEC);
	if (ns < 0) {
		j->errnum = errno;
		return NULL;
	}
	j->step = "join the network namespace";
	if (setns(ns, CLONE_NEWNET) < 0) {
		j->errnum = errno;
		close(ns);
		return NULL;
	}
	close(ns);
	make_listener(j);
	return NULL;
}

int tb_proxy_listen(int *out, pid_t netns_of, unsigned port, tb_error_t *err)
{
	struct listen_job j = { netns_of, port, -1, 0, "" };
	pthread_t th;

	*out = -1;
	if (port > 65535)
		return tb_error_set(err, TB_EINVAL, "proxy: bad port %u", port);
	if (netns_of <= 0) {
		make_listener(&j);
	} else {
		int rc = pthread_create(&th, NULL, listen_in_netns, &j);
		if (rc != 0)
			return tb_error_errno(err, TB_EIO, rc, "proxy: start a thread");
		pthread_join(th, NULL);
	}
	if (j.fd < 0)
		return tb_error_errno(err, TB_EIO, j.errnum, "proxy: %s (port %u, process %d)",
				      j.step, port, (int)netns_of);
	*out = j.fd;
	return 0;
}

static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void secrets_free(tb_proxy_t *p)
{
	for (size_t i = 0; p->secrets && i < p->nsecrets; i++) {
		tb_proxy_secret_free(p->secrets[i].value);
		tb_proxy_secret_free(p->secrets[i].mask);
	}
	free(p->secrets);
	p->secrets = NULL;
}

static int secrets_load(tb_proxy_t *p, tb_error_t *err)
{
	const tb_list_t *eps = p->conf.endpoints;

	p->nsecrets = eps ? eps->n : 0;
	if (p->nsecrets && !(p->secrets = calloc(p->nsecrets, sizeof(secret_t))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	for (size_t i = 0; i < p->nsecrets; i++) {
		const tb_credential_t *cr = &((const tb_endpoint_t *)eps->items)[i].credential;
		secret_t *s = &p->secrets[i];
		char *raw = NULL;
		tb_error_t e;
		if (!cr->header && !cr->query)
			continue;
		if (tb_proxy_secret_load(&raw, cr, &e) < 0 ||
		    tb_proxy_credential_render(&s->value, cr, raw, &e) < 0) {
			snprintf(s->why, sizeof(s->why), "%.350s", e.msg);
			tb_proxy_secret_free(raw);
			continue;
		}
		if (strlen(raw) >= MASK_MIN) {
			s->mask = raw;
			if (tb_mask_max_len(raw) > p->max_mask)
				p->max_mask = tb_mask_max_len(raw);
		} else {
			tb_proxy_secret_free(raw);
		}
	}
	return 0;
}

int tb_proxy_start(tb_proxy_t **out, const tb_proxy_conf_t *conf, tb_error_t *err)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct sockaddr_in a;
	socklen_t alen = sizeof(a);
	tb_proxy_t *p;
	int rc;

	*out = NULL;
	if (!conf->key || !conf->task_id || strlen(conf->task_id) > 128 || conf->listen_fd < 0) {
		if (conf->listen_fd >= 0)
			close(conf->listen_fd);
		return tb_error_set(err, TB_EINVAL, "proxy: needs a socket, a key and a task id");
	}
	if (!(p = calloc(1, sizeof(*p)))) {
		close(conf->listen_fd);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	pthread_once(&once, curl_init_once);
	p->conf = *conf;
	p->listen_fd = conf->listen_fd;
	p->stop_fd = -1;
	p->key = *conf->key;
	p->conf.key = &p->key;
	snprintf(p->task_id, sizeof(p->task_id), "%s", conf->task_id);
	p->conf.task_id = p->task_id;
#define DEFAULT(f, v) p->conf.f = p->conf.f ? p->conf.f : (v)
	DEFAULT(max_conns, 32);
	DEFAULT(max_head_bytes, 16384);
	DEFAULT(header_timeout_ms, 10000);
	DEFAULT(idle_timeout_ms, 30000);
	DEFAULT(io_timeout_ms, 60000);
	DEFAULT(connect_timeout_ms, 10000);
	DEFAULT(max_event_bytes, 65536);
#undef DEFAULT
	if (p->conf.max_head_bytes < 1024)
		p->conf.max_head_bytes = 1024;
	pthread_mutex_init(&p->lock, NULL);
	if (getsockname(p->listen_fd, (struct sockaddr *)&a, &alen) < 0 ||
	    a.sin_family != AF_INET) {
		rc = tb_error_errno(err, TB_EINVAL, errno, "proxy: not a TCP/IPv4 socket");
		goto fail;
	}
	p->port = ntohs(a.sin_port);
	if ((p->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "proxy: eventfd");
		goto fail;
	}
	if ((rc = secrets_load(p, err)) < 0)
		goto fail;
	if ((rc = pthread_create(&p->accept_th, NULL, accept_main, p)) != 0) {
		rc = tb_error_errno(err, TB_EIO, rc, "proxy: start its thread");
		goto fail;
	}
	p->accept_started = 1;
	*out = p;
	return 0;
fail:
	tb_proxy_stop(p);
	return rc;
}

unsigned tb_proxy_port(const tb_proxy_t *p)
{
	return p->port;
}

void tb_proxy_stop(tb_proxy_t *p)
{
	if (!p)
		return;
	atomic_store(&p->stopping, 1);
	if (p->stop_fd >= 0) {
		uint64_t one = 1;
		ssize_t w = write(p->stop_fd, &one, sizeof(one));
		(void)w;
	}
	if (p->accept_started)
		pthread_join(p->accept_th, NULL);
	/* Wake connection threads blocked on their clients. */
	pthread_mutex_lock(&p->lock);
	for (conn_t *c = p->conns; c; c = c->next)
		if (c->fd >= 0)
			shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_unlock(&p->lock);
	reap(p, 1);
	if (p->listen_fd >= 0)
		close(p->listen_fd);
	if (p->stop_fd >= 0)
		close(p->stop_fd);
	secrets_free(p);
	tb_task_token_key_wipe(&p->key);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
