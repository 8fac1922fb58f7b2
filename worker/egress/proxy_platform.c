/*
 * proxy_platform.c: the route the proxy answers itself (proxy_int.h):
 * POST /_taskbox/events, an agent's event line with the task token,
 * parsed as fd 3's lines are (tb/agent_events.h) and queued for the run.
 */
#include "proxy_int.h"
#include "tb/agent_events.h"
#include "tb/schema_event.h"

#include "tb/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* The path when @p target is for the platform route (the reverse form,
 * or the forward form naming the proxy's own address and port), else
 * NULL: then it is for an endpoint. */
const char *tb_proxy_platform_path(const tb_proxy_t *p, const char *target)
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
static int read_body(tb_proxy_conn_t *c, const tb_http_request_t *r, char *out, size_t cap,
		     size_t *len)
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
			ssize_t n = tb_proxy_fill(c, tb_mono_ms() + c->p->conf.io_timeout_ms);
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
int tb_proxy_serve_platform(tb_proxy_conn_t *c, const tb_http_request_t *r, const char *path)
{
	const tb_proxy_conf_t *conf = &c->p->conf;
	size_t max = conf->max_event_bytes, len = 0;
	tb_bytes_t payload = { 0 };
	char why[700], *body = NULL;
	tb_error_t err;
	int type, status;

	if (strcmp(path, TB_PROXY_EVENTS_PATH) != 0 || !conf->event) {
		tb_proxy_refuse(c, 404,
				conf->event
				    ? "no such platform route: there is POST " TB_PROXY_EVENTS_PATH
				    : "this proxy takes no events");
		return 0;
	}
	if (strcmp(r->method, "POST") != 0) {
		tb_proxy_refuse_with(c, 405,
				     "POST one agent protocol line to " TB_PROXY_EVENTS_PATH,
				     "Allow: POST\r\n");
		return 0;
	}
	if (!is_json(tb_http_header_get(r, "Content-Type"))) {
		tb_proxy_refuse(c, 415, "send the line with Content-Type: application/json");
		return 0;
	}
	snprintf(why, sizeof(why),
		 "the line is over the runtime's agent.max_event_bytes (%zu bytes)", max);
	/* The line and one '\n' after it, as on fd 3. */
	if (!r->chunked && r->content_length > (int64_t)max + 1) {
		tb_proxy_refuse(c, 413, why);
		return 0;
	}
	if (!(body = malloc(max + 2))) {
		tb_proxy_refuse(c, 503, "out of memory");
		return 0;
	}
	if (r->expect_continue && r->minor == 1 &&
	    tb_proxy_send_str(c, "HTTP/1.1 100 Continue\r\n\r\n", 25) < 0) {
		free(body);
		return 0;
	}
	status = read_body(c, r, body, max + 1, &len);
	if (status == 0 && len && body[len - 1] == '\n')
		len--;
	if (status == 0 && len > max)
		status = 413;
	if (status) {
		tb_proxy_refuse(c, status,
				status == 413   ? why
				: status == 408 ? "the request body stalled"
						: "malformed or truncated request body");
		goto out;
	}
	if (memchr(body, '\n', len)) {
		tb_proxy_refuse(c, 400, "one line only: the body holds a newline before its end");
		goto out;
	}
	if (tb_agent_parse_line(&type, &payload, body, len, &err) < 0) {
		tb_proxy_refuse(c, 400, err.msg);
		goto out;
	}
	if (type == TB_EV_TURN) {
		free(payload.data);
		tb_proxy_refuse(
		    c, 403,
		    "turn-ended is not taken here: a turn ends on the agent's own channel "
		    "(file descriptor 3)");
		goto out;
	}
	if (conf->event(conf->event_ud, type, payload) < 0) {
		tb_proxy_refuse_with(c, 429,
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
	return tb_proxy_send_all(c, iov, 2, conf->io_timeout_ms) == 0 && r->keep_alive;
out:
	free(body);
	return 0;
}
