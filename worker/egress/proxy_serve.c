/*
 * proxy_serve.c: a connection's thread (proxy_int.h): each request head
 * read with its deadline, its target split into endpoint and path, the
 * policy's decision, then the platform route, a refusal or the upstream.
 */
#include "proxy_int.h"
#include "provider_request.h"
#include "tb/encoding.h"

#include "tb/clock.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

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

/* Waits @p ms, or until the proxy stops (-1). */
static int pace_wait(tb_proxy_conn_t *c, uint64_t ms)
{
	struct pollfd pf = { c->p->stop_fd, POLLIN, 0 };
	int rc = poll(&pf, 1, ms > 600000 ? 600000 : (int)ms);
	return rc != 0 || atomic_load(&c->p->stopping) ? -1 : 0;
}

/* The endpoint's rate limit (the pace hook): waits its turn, a bounded
 * number of times. @return 0 to go on; 1 refused (@p no); -1 the proxy
 * stops. */
static int paced(tb_proxy_exchange_t *x, tb_proxy_refusal_t *no)
{
	tb_proxy_conn_t *c = x->c;
	const tb_proxy_conf_t *conf = &c->p->conf;
	uint64_t t0 = tb_mono_ms();

	if (!conf->pace || !x->sec->bucket[0])
		return 0;
	for (int round = 0; round < 1000; round++) {
		uint64_t wait = 0;
		int again = 0;
		int rc = conf->pace(conf->admit_ud, x->ep, x->sec->bucket, tb_mono_ms() - t0, &wait,
				    &again, no) < 0;
		if (!rc && wait && pace_wait(c, wait) < 0)
			return -1;
		c->paced_ms = tb_mono_ms() - t0;
		if (rc || !again)
			return rc;
	}
	no->status = 429;
	snprintf(no->reason, sizeof(no->reason), "endpoint '%.64s': no turn of its rate limit",
		 x->ep->name);
	snprintf(no->body, sizeof(no->body),
		 "{\"error\":{\"type\":\"rate_limited\",\"message\":\"%s\"}}", no->reason);
	return 1;
}

#define ADMIT_POLL_MS 20              /* a request held for the budgets asks again */
#define ADMIT_ROUNDS 60000            /* ... this many times at most (20 min) */
#define PROVIDER_BODY_MAX (16u << 20) /* a provider request read whole, at most */

/* The task's budgets (the admit hook), asked until they let the request
 * go or refuse it; while requests in flight hold them, it waits. Its
 * cost is reserved from then until its audit record. @return 0 to go on;
 * 1 refused (@p no); -1 the proxy stops. */
static int admission(tb_proxy_exchange_t *x, tb_proxy_refusal_t *no)
{
	tb_proxy_conn_t *c = x->c;
	const tb_proxy_conf_t *conf = &c->p->conf;
	uint64_t t0 = tb_mono_ms();

	if (!conf->admit)
		return 0;
	for (int round = 0; round < ADMIT_ROUNDS; round++) {
		int rc = conf->admit(conf->admit_ud, x->ep, &x->cost, tb_mono_ms() - t0, no);
		if (rc == 0) {
			c->cost = x->cost;
			c->admitted = 1;
			return 0;
		}
		if (rc < 0)
			return 1;
		if (pace_wait(c, ADMIT_POLL_MS) < 0)
			return -1;
	}
	no->status = 503;
	snprintf(no->reason, sizeof(no->reason), "the task's budgets held this request too long");
	snprintf(no->body, sizeof(no->body), "{\"error\":{\"type\":\"budget_held\"}}");
	return 1;
}

/* A request with a body to an endpoint with a dialect, read whole: what
 * it may cost read from it, and usage asked of its stream
 * (provider_request.h). @return 0; -1 refused and audited. */
static int provider_body(tb_proxy_exchange_t *x, const tb_proxy_decision_t *d, uint64_t t0)
{
	tb_provider_request_t pr;
	char why[300];
	int status = tb_proxy_read_body(x, PROVIDER_BODY_MAX);

	if (status) {
		snprintf(why, sizeof(why), "%s",
			 status == 413   ? "a request to a provider is read whole to meter it: at "
					   "most 16 MiB"
			 : status == 408 ? "the request body stalled"
					 : "malformed or truncated request body");
	} else if (tb_provider_request_read(&pr, (tb_dialect_t)x->ep->dialect,
					    TB_HAS(x->ep, TB_ENDPOINT_DEFAULT_MAX_TOKENS)
						? x->ep->default_max_tokens
						: 0,
					    x->mem_body, x->mem_len, why, sizeof(why)) < 0) {
		status = 400;
	}
	if (status) {
		tb_proxy_refuse(x->c, status, why);
		tb_proxy_audit(x->c, x->req.method, x->ep->host, d->path, x->ep, status, 0,
			       x->mem_len, t0, why);
		return -1;
	}
	x->up_body = pr.rewritten, x->up_len = pr.rewritten_len;
	pr.rewritten = NULL;
	x->cost.input_tokens = x->up_body ? x->up_len : x->mem_len;
	x->cost.output_tokens = pr.generation ? pr.max_output : 0;
	x->cost.generation = pr.generation;
	tb_provider_request_free(&pr);
	return 0;
}

/* The last checks before a request the policy allows goes upstream: an
 * endpoint with a credential takes no TRACE (the upstream would echo the
 * key in forms the masking may not know) and needs the worker to hold the
 * credential; then the task's budgets (the admit hook). Refuses and
 * audits it otherwise. @return 1 to go on. */
static int may_go(tb_proxy_exchange_t *x, const tb_proxy_decision_t *d, const char *ahost,
		  uint64_t t0)
{
	tb_proxy_conn_t *c = x->c;
	const tb_proxy_conf_t *conf = &c->p->conf;
	const char *method = x->req.method;
	tb_proxy_refusal_t no = { 0 };
	char why[600] = "";
	int status = 0, admitted;

	if ((x->ep->credential.header || x->ep->credential.query) && !strcmp(method, "TRACE")) {
		status = 403;
		snprintf(why, sizeof(why),
			 "TRACE is not allowed for endpoint '%.64s': it echoes the credential the "
			 "proxy adds",
			 x->ep->name);
	} else if (!conf->replay && !tb_proxy_may_go_upstream(x, d, t0)) {
		return 0; /* refused, or the proxy stops */
	} else if ((admitted = admission(x, &no)) != 0) {
		if (admitted < 0)
			return 0; /* the proxy stops: the client is closed */
		tb_proxy_refuse_body(c, no.status, "application/json", no.body,
				     no.extra[0] ? no.extra : NULL);
		tb_proxy_audit(c, method, ahost, d->path, x->ep, no.status, 0, 0, t0, no.reason);
		return 0;
	}
	if (!status)
		return 1;
	tb_proxy_refuse(c, status, why);
	tb_proxy_audit(c, method, ahost, d->path, x->ep, status, 0, 0, t0, why);
	return 0;
}

int tb_proxy_may_go_upstream(tb_proxy_exchange_t *x, const tb_proxy_decision_t *d, uint64_t t0)
{
	tb_proxy_conn_t *c = x->c;
	tb_proxy_refusal_t no = { 0 };
	char why[600];
	int paced_rc;

	if ((x->ep->credential.header || x->ep->credential.query) && !x->sec->value) {
		snprintf(why, sizeof(why), "the worker has no credential for endpoint '%s': %s",
			 x->ep->name, x->sec->why);
		tb_proxy_refuse(c, 502, why);
		tb_proxy_audit(c, x->req.method, x->ep->host, d->path, x->ep, 502, 0, 0, t0, why);
		return 0;
	}
	if ((paced_rc = paced(x, &no)) < 0)
		return 0; /* the proxy stops: the client is closed */
	if (paced_rc > 0) {
		tb_proxy_refuse_body(c, no.status, "application/json", no.body,
				     no.extra[0] ? no.extra : NULL);
		tb_proxy_audit(c, x->req.method, x->ep->host, d->path, x->ep, no.status, 0, 0, t0,
			       no.reason);
		return 0;
	}
	return 1;
}

/* Serves the request in @p x to the endpoint the policy chose: its body
 * framed, read first when its endpoint has a dialect (provider_body), its
 * cost asked of the budgets (may_go), then answered. Its reservation is
 * handed back on every path (an audit record). Returns 1 when the
 * connection may carry another request. */
static int exchange(tb_proxy_exchange_t *x, const tb_proxy_decision_t *d, const char *ahost,
		    uint64_t t0)
{
	tb_proxy_conn_t *c = x->c;
	const tb_http_request_t *r = &x->req;
	int keep = 0;

	x->is_head = strcmp(r->method, "HEAD") == 0;
	/* A body goes up as it came: with its length, or chunked. POST, PUT
	 * and PATCH always say their length, 0 when they have none. */
	int wants_body =
	    !strcmp(r->method, "POST") || !strcmp(r->method, "PUT") || !strcmp(r->method, "PATCH");
	x->body_mode = r->chunked ? 2 : r->content_length > 0 || wants_body ? 1 : 0;
	x->body_left = r->content_length > 0 ? (uint64_t)r->content_length : 0;
	x->body_done = x->body_mode == 1 && x->body_left == 0;
	if (x->is_head && (x->body_left || r->chunked)) {
		tb_proxy_refuse(c, 400, "a HEAD request with a body");
		tb_proxy_audit(c, r->method, ahost, d->path, x->ep, 400, 0, 0, t0,
			       "a HEAD request with a body");
		return 0;
	}
	if (TB_HAS(x->ep, TB_ENDPOINT_DIALECT) && x->body_mode && provider_body(x, d, t0) < 0)
		return 0;
	x->cost.bytes = x->body_mode == 3   ? (x->up_body ? x->up_len : x->mem_len)
			: x->body_mode == 1 ? x->body_left
					    : 0; /* chunked: counted as it passes */
	if (may_go(x, d, ahost, t0))
		keep = tb_proxy_answer(x, d, t0);
	if (c->admitted) /* a path that kept no record: its reservation back */
		tb_proxy_audit(c, r->method, ahost, d->path, x->ep, 502, 0, 0, t0,
			       "the proxy kept no record of this request");
	return keep;
}

/* Serves one request whose head is in c->head. Returns 1 when the
 * connection may carry another. */
static int serve(tb_proxy_conn_t *c, size_t hlen, uint64_t t0)
{
	tb_proxy_t *p = c->p;
	tb_proxy_exchange_t x = { .c = c, .status = 0 };
	tb_proxy_target_t t = { 0 };
	tb_proxy_decision_t *d = NULL;
	char why[600], binding[72], host[264], spath[300], basic[TB_TASK_TOKEN_MAX + 200];
	char *path = NULL;
	tb_error_t err;
	int status, keep = 0;

	c->upstream = 0, c->replay_state = NULL, c->paced_ms = 0;
	if ((status = tb_http_parse_request(&x.req, c->head, hlen, why, sizeof(why))) != 0) {
		tb_proxy_refuse(c, status, why);
		tb_proxy_audit(c, NULL, NULL, NULL, NULL, status, 0, 0, t0, why);
		return 0;
	}
	const tb_http_request_t *r = &x.req;
	tb_proxy_safe_path(spath, sizeof(spath), r->target);

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
		tb_proxy_refuse_with(
		    c, status, why,
		    status == 407 ? "Proxy-Authenticate: Basic realm=\"taskbox\"\r\n" : NULL);
		tb_proxy_audit(c, r->method, NULL, spath, NULL, status, 0, 0, t0, why);
		return 0;
	}
	/* Not an egress request: the proxy answers it, no audit record. */
	const char *ppath = tb_proxy_platform_path(p, r->target);
	if (ppath)
		return tb_proxy_serve_platform(c, r, ppath);
	if (strcmp(r->method, "CONNECT") == 0) {
		snprintf(why, sizeof(why),
			 "CONNECT is not allowed: send plain http:// requests (HTTP_PROXY or "
			 "the TASKBOX_ENDPOINT_* URLs); the proxy speaks HTTPS upstream");
		tb_proxy_refuse(c, 403, why);
		tb_proxy_audit(c, r->method, spath, "", NULL, 403, 0, 0, t0, why);
		return 0;
	}
	if (!(path = malloc(TB_PROXY_PATH_MAX + 2)) || !(d = malloc(sizeof(*d)))) {
		tb_proxy_refuse(c, 503, "out of memory");
		goto out;
	}
	t.method = r->method;
	if ((status = split_target(&t, binding, sizeof(binding), host, sizeof(host), path,
				   TB_PROXY_PATH_MAX + 2, r->target, why, sizeof(why))) != 0) {
		tb_proxy_refuse(c, status, why);
		tb_proxy_audit(c, r->method, NULL, spath, NULL, status, 0, 0, t0, why);
		goto out;
	}
	tb_proxy_policy_decide(d, p->conf.endpoints, &t);
	const char *ahost = d->endpoint ? d->endpoint->host : t.host ? t.host : binding;
	if (d->status) {
		tb_proxy_refuse(c, d->status, d->reason);
		tb_proxy_audit(c, r->method, ahost, d->path[0] ? d->path : spath, d->endpoint,
			       d->status, 0, 0, t0, d->reason);
		goto out;
	}
	x.ep = d->endpoint;
	x.sec = &p->secrets[x.ep - (const tb_endpoint_t *)p->conf.endpoints->items];
	keep = exchange(&x, d, ahost, t0);
out:
	free(x.mem_body);
	free(x.up_body);
	free(path);
	free(d);
	return keep;
}

/* Reads the next request head into c->head. Returns its length; 0 to
 * close quietly (end of stream, idle, stopping); or minus the status to
 * refuse with. */
static long read_head(tb_proxy_conn_t *c, int first)
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
		ssize_t n = tb_proxy_fill(c, deadline);
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

void *tb_proxy_conn_main(void *arg)
{
	tb_proxy_conn_t *c = arg;
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
			tb_proxy_refuse(c, (int)-n, why);
			tb_proxy_audit(c, NULL, NULL, NULL, NULL, (int)-n, 0, 0, t0, why);
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
