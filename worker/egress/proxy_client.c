/*
 * proxy_client.c: the egress proxy's side of a client connection: waits
 * that watch the proxy's stop, sending and reading with deadlines,
 * refusals that close gently, the audit record, masking (proxy_int.h).
 */
#include "proxy_int.h"
#include "proxy_mask.h"

#include "tb/clock.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

const char *tb_proxy_reason_phrase(long status)
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
		{ 402, "Payment Required" },
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
static int wait_fd(tb_proxy_conn_t *c, short events, uint64_t deadline)
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

int tb_proxy_send_all(tb_proxy_conn_t *c, struct iovec *iov, int n, unsigned timeout_ms)
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

int tb_proxy_send_str(tb_proxy_conn_t *c, const char *s, size_t len)
{
	struct iovec iov = { (void *)s, len };
	return tb_proxy_send_all(c, &iov, 1, c->p->conf.io_timeout_ms);
}

/* Reads more from the client into buf: >0 bytes, 0 end of stream, -1
 * error or stop, -2 @p deadline passed. */
ssize_t tb_proxy_fill(tb_proxy_conn_t *c, uint64_t deadline)
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

/* Appends @p n bytes to the body being read. -1 past @p max. */
static int take(tb_proxy_exchange_t *x, const char *data, size_t n, size_t max)
{
	if (!n)
		return 0;
	if (x->mem_len + n > max)
		return -1;
	char *more = realloc(x->mem_body, x->mem_len + n);
	if (!more)
		return -1;
	x->mem_body = more;
	memcpy(x->mem_body + x->mem_len, data, n);
	x->mem_len += n;
	return 0;
}

int tb_proxy_read_body(tb_proxy_exchange_t *x, size_t max)
{
	tb_proxy_conn_t *c = x->c;
	char chunk[16384];
	int status = 0;

	if (x->body_mode == 3 || !x->body_mode) /* read already, or none to read */
		return 0;
	if (!x->body_done && x->req.expect_continue && x->req.minor == 1 &&
	    tb_proxy_send_str(c, "HTTP/1.1 100 Continue\r\n\r\n", 25) < 0)
		status = 400;
	while (!x->body_done && !status) {
		if (c->off == c->have) {
			ssize_t n = tb_proxy_fill(c, tb_mono_ms() + c->p->conf.io_timeout_ms);
			if (n <= 0) {
				status = n == -2 ? 408 : 400;
				break;
			}
		}
		size_t n = c->have - c->off, used = 0, got = 0;
		if (x->body_mode == 1) {
			n = n > x->body_left ? (size_t)x->body_left : n;
			status = take(x, c->buf + c->off, n, max) < 0 ? 413 : 0;
			c->off += n;
			x->body_left -= n;
			x->body_done = x->body_left == 0;
			continue;
		}
		int rc = tb_http_chunked_decode(&x->dec, c->buf + c->off, n, &used, chunk,
						sizeof(chunk), &got);
		c->off += used;
		status = rc < 0 ? 400 : take(x, chunk, got, max) < 0 ? 413 : 0;
		x->body_done = rc == 1;
	}
	/* read whole: the client is done; upstream it goes from mem_body */
	x->body_mode = 3;
	x->mem_off = 0;
	x->body_done = 1;
	return status;
}

/* ------------------------------------------------------------- audit */

void tb_proxy_audit(tb_proxy_conn_t *c, const char *method, const char *host, const char *path,
		    const tb_endpoint_t *ep, int status, uint64_t in, uint64_t out, uint64_t t0,
		    const char *reason)
{
	tb_proxy_audit_used(c, method, host, path, ep, status, in, out, t0, reason, NULL);
}

void tb_proxy_audit_used(tb_proxy_conn_t *c, const char *method, const char *host, const char *path,
			 const tb_endpoint_t *ep, int status, uint64_t in, uint64_t out,
			 uint64_t t0, const char *reason, const tb_tokens_t *tokens)
{
	const tb_proxy_conf_t *conf = &c->p->conf;
	int admitted = c->admitted, estimated = c->estimated;
	c->admitted = c->estimated = 0; /* its reservation is handed back here */
	if (!conf->audit)
		return;
	const tb_proxy_secret_t *sec =
	    ep ? &c->p->secrets[ep - (const tb_endpoint_t *)conf->endpoints->items] : NULL;
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
		.tokens = tokens && (tokens->seen || estimated) ? tokens : NULL,
		.estimated = estimated,
		.admitted = admitted ? &c->cost : NULL,
		.bucket = sec && sec->bucket[0] ? sec->bucket : NULL,
		.retry_after_ms = c->upstream ? c->retry_after_ms : 0,
		.replay = c->replay_state,
		.paced_ms = c->paced_ms,
	};
	conf->audit(conf->audit_ud, &a);
}

/* A client-supplied path for the audit when it could not be normalised:
 * no query, printable, bounded. */
void tb_proxy_safe_path(char *out, size_t cap, const char *target)
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
void tb_proxy_refuse_with(tb_proxy_conn_t *c, int status, const char *reason, const char *extra)
{
	char body[700];
	snprintf(body, sizeof(body), "taskbox proxy: %.600s\n", reason);
	tb_proxy_refuse_body(c, status, "text/plain; charset=utf-8", body, extra);
}

void tb_proxy_refuse_body(tb_proxy_conn_t *c, int status, const char *type, const char *body,
			  const char *extra)
{
	char head[512];
	size_t bl = strlen(body);
	int hl = snprintf(head, sizeof(head),
			  "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
			  "%sContent-Length: %zu\r\nConnection: close\r\n\r\n",
			  status, tb_proxy_reason_phrase(status), type, extra ? extra : "", bl);
	struct iovec iov[2] = { { head, (size_t)hl }, { (char *)body, bl } };
	unsigned t = c->p->conf.io_timeout_ms < 5000 ? c->p->conf.io_timeout_ms : 5000;

	if (tb_proxy_send_all(c, iov, 2, t) < 0)
		return;
	shutdown(c->fd, SHUT_WR);
	uint64_t deadline = tb_mono_ms() + LINGER_MS;
	for (size_t drained = 0; drained < (64 << 10);) {
		c->off = c->have = 0;
		ssize_t n = tb_proxy_fill(c, deadline);
		if (n <= 0)
			break;
		drained += (size_t)n;
	}
	c->off = c->have = 0;
}

void tb_proxy_refuse(tb_proxy_conn_t *c, int status, const char *reason)
{
	tb_proxy_refuse_with(c, status, reason, NULL);
}

/* ----------------------------------------------------------- masking */

/* Replaces every echo of the endpoint's secret in @p s with '*'. */
void tb_proxy_mask_all(const tb_proxy_secret_t *sec, char *s, size_t len)
{
	if (sec && sec->mask)
		tb_mask_apply(sec->mask, s, len);
}
