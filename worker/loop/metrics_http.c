/*
 * metrics_http.c: the worker's metrics endpoint (metrics_http.h) on
 * libmicrohttpd's own thread: GET /metrics renders the registry
 * (tb/metrics.h); GET /healthz (alive) and GET /readyz (ready) answer
 * 200 or 503 with a short JSON body saying what is wrong (tb/health.h).
 */
#include "metrics_http.h"
#include "tb/listen.h"

#include "tb/health.h"
#include "tb/metrics.h"

#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tb_metrics_server {
	struct MHD_Daemon *d;
	unsigned port;
};

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_size, void **state)
{
	static const char not_found[] = "not found: try /metrics, /healthz or /readyz\n";
	struct MHD_Response *r;
	unsigned status = MHD_HTTP_OK;
	enum MHD_Result rc;

	(void)cls, (void)version, (void)upload, (void)upload_size, (void)state;
	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
		status = MHD_HTTP_METHOD_NOT_ALLOWED;
		if (r)
			MHD_add_response_header(r, "Allow", "GET, HEAD");
	} else if (!strcmp(url, "/metrics")) {
		size_t len = 0;
		char *text = tb_metrics_render(&len);
		if (!text)
			return MHD_NO; /* out of memory: the connection is closed */
		r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
		if (!r)
			free(text);
		else
			MHD_add_response_header(r, "Content-Type",
						"text/plain; version=0.0.4; charset=utf-8");
	} else if (!strcmp(url, "/healthz") || !strcmp(url, "/readyz")) {
		char *body = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&body, &len);
		if (!f)
			return MHD_NO;
		if (!tb_health_render(f, !strcmp(url, "/readyz")))
			status = MHD_HTTP_SERVICE_UNAVAILABLE;
		fclose(f);
		r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
		if (!r)
			free(body);
		else
			MHD_add_response_header(r, "Content-Type", "application/json");
	} else {
		status = MHD_HTTP_NOT_FOUND;
		r = MHD_create_response_from_buffer(sizeof(not_found) - 1, (void *)not_found,
						    MHD_RESPMEM_PERSISTENT);
	}
	if (!r)
		return MHD_NO;
	rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

int tb_metrics_serve(tb_metrics_server_t **out, const char *listen, tb_error_t *err)
{
	char host[256];
	struct addrinfo *ai = NULL;
	int rc;

	*out = NULL;
	if ((rc = tb_listen_resolve(&ai, host, sizeof(host), "metrics_listen", listen,
				    "0.0.0.0:9464", err)) < 0)
		return rc;
	tb_metrics_server_t *s = calloc(1, sizeof(*s));
	if (!s) {
		freeaddrinfo(ai);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	unsigned flags =
	    MHD_USE_INTERNAL_POLLING_THREAD | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
	/* A scrape is one short request: few connections, short timeouts. */
	s->d = MHD_start_daemon(flags, 0, NULL, NULL, answer, NULL, MHD_OPTION_SOCK_ADDR,
				ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT, 16u,
				MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!s->d) {
		free(s);
		return tb_error_set(err, TB_EIO,
				    "metrics_listen '%s': cannot listen there (in use?)", listen);
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	s->port = info ? info->port : 0;
	*out = s;
	return 0;
}

unsigned tb_metrics_port(const tb_metrics_server_t *s)
{
	return s->port;
}

void tb_metrics_stop(tb_metrics_server_t *s)
{
	if (!s)
		return;
	MHD_stop_daemon(s->d);
	free(s);
}
