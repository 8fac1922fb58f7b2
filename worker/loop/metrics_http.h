/*
 * metrics_http.h: the worker's HTTP endpoint for its metrics registry
 * (tb/metrics.h): GET /metrics as Prometheus text, GET /healthz for probes.
 */
#ifndef TB_METRICS_HTTP_H
#define TB_METRICS_HTTP_H

#include "tb/error.h"

typedef struct tb_metrics_server tb_metrics_server_t;

/**
 * Serves the registry on @p listen ("host:port", IPv4 or [IPv6]; port 0
 * picks one, see tb_metrics_port()).
 * @return 0; TB_EINVAL for a bad address; TB_EIO if it cannot listen
 */
int tb_metrics_serve(tb_metrics_server_t **out, const char *listen, tb_error_t *err);

/** The port it listens on. */
unsigned tb_metrics_port(const tb_metrics_server_t *s);

void tb_metrics_stop(tb_metrics_server_t *s);

#endif
