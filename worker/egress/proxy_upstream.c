/*
 * proxy_upstream.c: one request's transfer to its endpoint through
 * libcurl's easy interface (proxy_int.h): the request's headers as the
 * policy allows and the credential added, its body streamed from the
 * client, the response streamed back with the credential masked, no
 * connection to an internal address.
 */
#include "proxy_int.h"
#include "proxy_mask.h"
#include "recording.h"

#include <openssl/crypto.h>

#include "tb/clock.h"
#include "tb/encoding.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int tb_proxy_send_body(tb_proxy_exchange_t *x, const char *data, size_t len)
{
	char size[32];
	struct iovec iov[3];
	int n = 0;

	if (!len)
		return 0;
	tb_rec_chunk(x->rec, data, len);
	if (x->resp_chunked) {
		int sl = snprintf(size, sizeof(size), "%zx\r\n", len);
		iov[n++] = (struct iovec){ size, (size_t)sl };
	}
	iov[n++] = (struct iovec){ (void *)data, len };
	if (x->resp_chunked)
		iov[n++] = (struct iovec){ "\r\n", 2 };
	if (tb_proxy_send_all(x->c, iov, n, x->c->p->conf.io_timeout_ms) < 0) {
		x->client_err = 1;
		return -1;
	}
	return 0;
}

int tb_proxy_send_head(tb_proxy_exchange_t *x)
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
	tb_proxy_mask_all(x->sec, x->rhead, x->rlen);
	tb_rec_response(x->rec, x->status, x->rhead, x->rlen,
			!strcmp(x->ctype, "text/event-stream"));
	ll = snprintf(line, sizeof(line), "HTTP/1.1 %ld %s\r\n", x->status,
		      tb_proxy_reason_phrase(x->status));
	char tail[160];
	int tl = snprintf(tail, sizeof(tail), "%s%s%s%sConnection: %s\r\n\r\n",
			  x->rlength[0] ? "Content-Length: " : "", x->rlength,
			  x->rlength[0] ? "\r\n" : "",
			  x->resp_chunked ? "Transfer-Encoding: chunked\r\n" : "",
			  x->req.keep_alive ? "keep-alive" : "close");
	struct iovec iov[3] = { { line, (size_t)ll }, { x->rhead, x->rlen }, { tail, (size_t)tl } };
	x->head_sent = 1;
	if (tb_proxy_send_all(x->c, iov, 3, x->c->p->conf.io_timeout_ms) < 0) {
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

/* The media type of a Content-Type value [@p v, @p end): "text/event-stream"
 * of "text/event-stream; charset=utf-8". */
static void media_type(char *out, size_t cap, const char *v, const char *end)
{
	size_t n = 0;

	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (v + n < end && v[n] != ';' && v[n] != ' ' && v[n] != '\r' && v[n] != '\n' &&
	       n + 1 < cap)
		n++;
	memcpy(out, v, n);
	out[n] = '\0';
}

/* The blank line after the answer's head: an interim answer (100
 * Continue) is dropped; a final one's head goes to the client. -1: the
 * answer cannot be passed on. */
static int end_of_head(tb_proxy_exchange_t *x)
{
	if (x->status >= 100 && x->status < 200) {
		x->rlen = 0; /* not passed on */
		x->rlength[0] = '\0';
		x->rchunked = 0;
		return 0;
	}
	if (x->status < 200 || x->status > 999)
		return -1;
	/* a provider's answer: its usage is read as it passes */
	if (TB_HAS(x->ep, TB_ENDPOINT_DIALECT) && x->status < 300 && !x->scanning) {
		tb_usage_scan_init(&x->usage, (tb_dialect_t)x->ep->dialect,
				   x->ctype[0] ? x->ctype : NULL);
		x->scanning = 1;
	}
	/* RFC 9112 6.3: Transfer-Encoding overrides Content-Length (curl
	 * decodes the body by it); the client gets the body framed anew,
	 * never a length that does not describe it. */
	if (x->rchunked)
		x->rlength[0] = '\0';
	return tb_proxy_send_head(x);
}

/* A Content-Length header's value [@p v, @p e) into x->rlength. -1 (and
 * x->framing says why) when it is not one number, or differs from one
 * before: the body's end is not known, so nothing of it is passed on. */
static int content_length(tb_proxy_exchange_t *x, const char *v, const char *e)
{
	char got[sizeof(x->rlength)];
	size_t d = 0;

	while (v < e && (*v == ' ' || *v == '\t'))
		v++;
	while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ' || e[-1] == '\t'))
		e--;
	while (v + d < e && v[d] >= '0' && v[d] <= '9' && d < sizeof(got) - 1)
		d++;
	memcpy(got, v, d);
	got[d] = '\0';
	if (!d || v + d != e || d > 18) {
		x->framing = "a malformed Content-Length";
		return -1;
	}
	if (x->rlength[0] && strcmp(x->rlength, got) != 0) {
		x->framing = "two different Content-Length values";
		return -1;
	}
	memcpy(x->rlength, got, d + 1);
	return 0;
}

#define PAUSE_MAX_MS 600000 /* a provider's pause, at most ten minutes */

/* A 429 or 529's Retry-After (seconds, or an HTTP date) or Retry-After-Ms
 * (which wins: it is the more precise) into c->retry_after_ms. */
static void retry_after(tb_proxy_exchange_t *x, int ms, const char *v, const char *end)
{
	char text[64];
	uint64_t pause;

	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	size_t n = (size_t)(end - v);
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	if (!n || n >= sizeof(text) || (x->retry_ms_seen && !ms))
		return;
	memcpy(text, v, n);
	text[n] = '\0';
	char *e;
	double d = strtod(text, &e);
	if (e != text && !*e && d >= 0) {
		pause = (uint64_t)(ms ? d : d * 1000.0);
	} else if (!ms) { /* an HTTP date */
		time_t at = curl_getdate(text, NULL);
		time_t now = time(NULL);
		if (at < 0)
			return;
		pause = at > now ? (uint64_t)(at - now) * 1000 : 0;
	} else {
		return;
	}
	x->c->retry_after_ms = pause > PAUSE_MAX_MS ? PAUSE_MAX_MS : pause;
	x->retry_ms_seen |= ms;
}

/* What the proxy reads of an upstream header named @p name (@p nl bytes)
 * whose value is [@p v, @p end): the type, the framing, a pause. */
static void note_header(tb_proxy_exchange_t *x, const char *name, size_t nl, const char *v,
			const char *end)
{
	if (nl == 12 && strncasecmp(name, "Content-Type", 12) == 0)
		media_type(x->ctype, sizeof(x->ctype), v, end);
	if (nl == 17 && strncasecmp(name, "Transfer-Encoding", 17) == 0)
		x->rchunked = 1; /* and dropped: hop-by-hop */
	if ((x->status == 429 || x->status == 529) &&
	    ((nl == 11 && strncasecmp(name, "Retry-After", 11) == 0) ||
	     (nl == 14 && strncasecmp(name, "Retry-After-Ms", 14) == 0)))
		retry_after(x, nl == 14, v, end);
}

static size_t on_header(char *b, size_t size, size_t nitems, void *ud)
{
	tb_proxy_exchange_t *x = ud;
	size_t len = size * nitems;

	if (x->head_sent)
		return len; /* trailers: not passed on */
	if (len >= 5 && strncmp(b, "HTTP/", 5) == 0) {
		const char *sp = memchr(b, ' ', len);
		x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		x->ctype[0] = '\0';
		x->rlen = 0;
		x->rlength[0] = '\0';
		x->rchunked = 0;
		x->c->retry_after_ms = 0;
		x->retry_ms_seen = 0;
		return len;
	}
	if ((len == 2 && b[0] == '\r') || (len == 1 && b[0] == '\n'))
		return end_of_head(x) < 0 ? 0 : len;
	if (b[0] == ' ' || b[0] == '\t')
		return len; /* folded: dropped */
	const char *colon = memchr(b, ':', len);
	if (!colon)
		return len;
	size_t nl = (size_t)(colon - b);
	note_header(x, b, nl, colon + 1, b + len);
	if (nl == 14 && strncasecmp(b, "Content-Length", 14) == 0)
		return content_length(x, colon + 1, b + len) < 0 ? 0 : len;
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
	tb_proxy_exchange_t *x = ud;
	tb_proxy_conn_t *c = x->c;
	size_t len = size * nitems;
	const tb_proxy_conf_t *conf = &c->p->conf;

	/* counted as they arrive: past the byte budget the answer is cut */
	if (conf->meter && conf->meter(conf->admit_ud, len) < 0) {
		x->budget_cut = 1;
		return 0;
	}
	if (!x->head_sent && tb_proxy_send_head(x) < 0)
		return 0;
	x->bytes_in += len;
	if (x->scanning)
		tb_usage_scan_feed(&x->usage, data, len);
	if (x->resp_nobody)
		return len;
	if (!x->sec || !x->sec->mask)
		return tb_proxy_send_body(x, data, len) < 0 ? 0 : len;
	/* Held bytes and these, masked; the tail that may be the start of a
	 * secret waits for the next call. */
	size_t all = c->nhold + len;
	char *work = malloc(all);
	if (!work)
		return 0;
	memcpy(work, c->hold, c->nhold);
	memcpy(work + c->nhold, data, len);
	tb_proxy_mask_all(x->sec, work, all);
	size_t keep = tb_mask_pending(x->sec->mask, work, all);
	int rc = tb_proxy_send_body(x, work, all - keep);
	memcpy(c->hold, work + all - keep, keep);
	c->nhold = keep;
	OPENSSL_cleanse(work, all);
	free(work);
	return rc < 0 ? 0 : len;
}

static size_t on_read(char *out, size_t size, size_t nitems, void *ud)
{
	tb_proxy_exchange_t *x = ud;
	tb_proxy_conn_t *c = x->c;
	size_t cap = size * nitems;

	if (x->body_mode == 3) { /* read whole already; maybe rewritten (up_body) */
		const char *body = x->up_body ? x->up_body : x->mem_body;
		size_t len = x->up_body ? x->up_len : x->mem_len;
		size_t n = len - x->mem_off < cap ? len - x->mem_off : cap;
		memcpy(out, body + x->mem_off, n);
		x->mem_off += n;
		x->bytes_out += n; /* recorded whole when the recording began */
		return n;
	}
	while (!x->body_done) {
		if (c->off == c->have) {
			ssize_t n = tb_proxy_fill(c, tb_mono_ms() + c->p->conf.io_timeout_ms);
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
			tb_rec_request_body(x->rec, out, n);
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
		tb_rec_request_body(x->rec, out, got);
		if (got)
			return got;
	}
	return 0;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t cc, curl_off_t d)
{
	tb_proxy_exchange_t *x = ud;
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
	tb_proxy_exchange_t *x = ud;
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
static struct curl_slist *upstream_headers(const tb_proxy_exchange_t *x, int *ok)
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

/* The upstream URL of @p x: the endpoint, the path and query decided, and
 * the credential as query parameter @p qname (escaped) when it goes there.
 * @return malloc'd, or NULL without memory */
static char *upstream_url(const tb_proxy_exchange_t *x, const tb_proxy_decision_t *d,
			  const char *qname)
{
	const tb_endpoint_t *ep = x->ep;
	const char *host = ep->host;
	int v6 = strchr(host, ':') != NULL;
	size_t ulen = strlen(ep->scheme) + strlen(host) + strlen(d->path) + strlen(d->query) +
		      (qname ? strlen(qname) + strlen(x->sec->value) : 0) + 32;
	char *url = malloc(ulen);

	if (!url)
		return NULL;
	snprintf(url, ulen, "%s://%s%s%s:%u%s%s%s%s%s%s", ep->scheme, v6 ? "[" : "", host,
		 v6 ? "]" : "", (unsigned)ep->port, d->path, d->query[0] || qname ? "?" : "",
		 d->query, d->query[0] && qname ? "&" : "", qname ? qname : "", qname ? "=" : "");
	if (qname) {
		size_t used = strlen(url);
		snprintf(url + used, ulen - used, "%s", x->sec->value);
	}
	return url;
}

/* What the answer said it used (nothing when its endpoint has no
 * dialect); the scan's memory freed. A generation request's answer
 * (2xx) that reports no usage, or is cut short (the agent left, a
 * budget, the upstream, the proxy stopping: @p res not CURLE_OK), is charged its
 * worst case (tb_proxy_cost_t), the input it reported excepted: the
 * provider may have spent that much, and a budget holds only if every
 * exchange counts (c->estimated says so in the record). */
static tb_tokens_t answer_usage(tb_proxy_exchange_t *x, CURLcode res)
{
	int whole = res == CURLE_OK && !x->client_err;
	tb_proxy_conn_t *c = x->c;
	tb_tokens_t used = { 0 };

	if (x->scanning)
		tb_usage_scan_end(&x->usage, &used);
	x->scanning = 0;
	if (!c->admitted || !c->cost.generation || x->status < 200 || x->status > 299 ||
	    (whole && used.seen))
		return used;
	if (!used.seen || !used.input)
		used.input = c->cost.input_tokens;
	if (used.output < c->cost.output_tokens)
		used.output = c->cost.output_tokens;
	used.seen = 1;
	c->estimated = 1;
	return used;
}

/* The transfer of @p x on its connection's handle: @p url, @p hdrs, the
 * callbacks, the body streamed from the client (after a 100 Continue
 * when it waits for one). -1: the client could not be told to go on
 * (audited: the request ends there). */
static int setup_transfer(tb_proxy_exchange_t *x, const tb_proxy_decision_t *d, const char *url,
			  struct curl_slist *hdrs, char *errbuf, uint64_t t0)
{
	tb_proxy_conn_t *c = x->c;
	CURL *h = c->curl;

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
				 x->body_mode == 1 ? (curl_off_t)x->body_left
				 : x->body_mode == 3
				     ? (curl_off_t)(x->up_body ? x->up_len : x->mem_len)
				     : (curl_off_t)-1);
		/* The client waits for our go-ahead before its body. */
		if (x->body_mode != 3 && x->req.expect_continue && x->req.minor == 1 &&
		    tb_proxy_send_str(c, "HTTP/1.1 100 Continue\r\n\r\n", 25) < 0) {
			tb_proxy_audit(c, x->req.method, x->ep->host, d->path, x->ep, 400, 0, 0, t0,
				       "the client could not be told to send its body");
			return -1;
		}
	}
	return 0;
}

/* The exchange's recording begins (recording.h): the target as it goes
 * upstream, without the credential. NULL: not recorded. */
tb_rec_exchange_t *tb_proxy_record_begin(tb_proxy_exchange_t *x, const tb_proxy_decision_t *d)
{
	char target[2 * TB_PROXY_PATH_MAX + 2];

	if (!x->ep->record || !x->c->p->conf.recorder)
		return NULL;
	snprintf(target, sizeof(target), "%s%s%s", d->path, d->query[0] ? "?" : "", d->query);
	tb_rec_exchange_t *rec =
	    tb_rec_begin(x->c->p->conf.recorder, x->ep, x->req.method, target, &x->req);
	tb_rec_request_body(rec, x->mem_body, x->mem_len); /* read whole already (a replay) */
	return rec;
}

/* Why an answer passed on was cut short. */
static const char *cut_short(const tb_proxy_exchange_t *x)
{
	return x->budget_cut ? "the task's budget max_egress_mb is spent: the answer was cut"
			     : "the response was cut short";
}

/* Why an exchange got no answer to pass on, into @p why; its status. */
static int no_answer(tb_proxy_exchange_t *x, CURLcode res, const char *errbuf, char *why,
		     size_t len)
{
	const tb_endpoint_t *ep = x->ep;
	int status = x->body_err                       ? x->body_err
		     : x->budget_cut                   ? 402
		     : res == CURLE_OPERATION_TIMEDOUT ? 504
						       : 502;

	if (x->budget_cut)
		snprintf(why, len, "the task's budget max_egress_mb is spent: the answer was cut");
	else if (x->body_err == 408)
		snprintf(why, len, "the request body stalled");
	else if (x->body_err)
		snprintf(why, len, "malformed or truncated request body");
	else if (x->framing)
		snprintf(why, len, "upstream %.64s: its answer has %s", ep->name, x->framing);
	else if (x->blocked)
		snprintf(why, len,
			 "upstream %.64s: '%.253s' resolved to an internal address "
			 "(loopback, private, link-local, ...): refused",
			 ep->name, ep->host);
	else
		snprintf(why, len, "upstream %s: %s", ep->name,
			 errbuf[0] ? errbuf : curl_easy_strerror(res));
	tb_proxy_mask_all(x->sec, why, strlen(why));
	return status;
}

/* @p s percent-encoded, malloc'd (NULL without memory). */
static char *escaped(const char *s)
{
	size_t cap = 3 * strlen(s) + 1; /* each byte at most %XX */
	char *out = malloc(cap);
	if (out && tb_percent_encode(out, cap, s, 0) < 0) {
		free(out);
		return NULL;
	}
	return out;
}

/* Makes the upstream request and streams its answer. Returns 1 when the
 * connection may carry another request. */
int tb_proxy_forward(tb_proxy_exchange_t *x, const tb_proxy_decision_t *d, uint64_t t0)
{
	tb_proxy_conn_t *c = x->c;
	const tb_endpoint_t *ep = x->ep;
	const tb_credential_t *cr = &ep->credential;
	char *url = NULL, *qname = NULL, errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdrs = NULL;
	const char *failed = NULL; /* for the recording */
	int ok, keep = 0;
	CURLcode res;

	if (!c->curl && !(c->curl = curl_easy_init())) {
		tb_proxy_refuse(c, 502, "the proxy could not start an upstream transfer");
		tb_proxy_audit(c, x->req.method, ep->host, d->path, ep, 502, 0, 0, t0,
			       "curl_easy_init");
		return 0;
	}
	CURL *h = c->curl;
	curl_easy_reset(h);
	if (cr->query && x->sec && x->sec->value && !(qname = escaped(cr->query)))
		goto nomem;
	if (!(url = upstream_url(x, d, qname)))
		goto nomem;
	if (!(hdrs = upstream_headers(x, &ok)) || !ok)
		goto nomem;

	if (setup_transfer(x, d, url, hdrs, errbuf, t0) < 0)
		goto done;
	x->rec = tb_proxy_record_begin(x, d);
	c->upstream = 1;
	res = curl_easy_perform(h);
	if (res == CURLE_OK && c->nhold)
		tb_proxy_send_body(x, c->hold, c->nhold);
	c->nhold = 0;
	tb_tokens_t used = answer_usage(x, res);
	if (atomic_load(&c->p->stopping)) {
		failed = "the proxy stopped";
		tb_proxy_audit_used(c, x->req.method, ep->host, d->path, ep,
				    x->head_sent ? (int)x->status : 502, x->bytes_in, x->bytes_out,
				    t0, "the proxy stopped", &used);
		goto done;
	}
	if (!x->head_sent) {
		char why[CURL_ERROR_SIZE + 400];
		int status = no_answer(x, res, errbuf, why, sizeof(why));
		tb_rec_end(x->rec, why);
		x->rec = NULL;
		tb_proxy_refuse(c, status, why);
		tb_proxy_audit(c, x->req.method, ep->host, d->path, ep, status, x->bytes_in,
			       x->bytes_out, t0, why);
		goto done;
	}
	if (res == CURLE_OK && x->resp_chunked && !x->client_err &&
	    tb_proxy_send_str(c, "0\r\n\r\n", 5) < 0)
		x->client_err = 1;
	failed = res == CURLE_OK ? NULL : cut_short(x);
	tb_proxy_audit_used(c, x->req.method, ep->host, d->path, ep, (int)x->status, x->bytes_in,
			    x->bytes_out, t0, failed, &used);
	keep = res == CURLE_OK && !x->client_err && x->req.keep_alive &&
	       (!x->body_mode || x->body_done);
	goto done;
nomem:
	failed = "out of memory";
	tb_proxy_refuse(c, 502, "out of memory");
	tb_proxy_audit(c, x->req.method, ep->host, d->path, ep, 502, 0, 0, t0, "out of memory");
done:
	tb_rec_end(x->rec, failed);
	x->rec = NULL;
	/* Nothing of the secret stays in the transfer's buffers. */
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
	curl_slist_free_all(hdrs);
	if (url) {
		OPENSSL_cleanse(url, strlen(url));
		free(url);
	}
	free(qname);
	free(x->rhead);
	x->rhead = NULL;
	return keep;
}
