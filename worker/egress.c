/*
 * egress.c: the lifecycle's side of the network boundary (egress.h):
 * token, proxy in the sandbox's namespace, the agent's variables, and
 * the audit queue.
 */
#include "egress.h"

#include "metrics.h"
#include "proxy.h"
#include "task_token.h"

#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tb_egress {
	tb_proxy_t *proxy;
	const tb_runtime_t *rt;
	char token[TB_TASK_TOKEN_MAX + 1];
	pthread_mutex_t lock;
	json_t *queue; /* payloads waiting for the lifecycle's thread */
	uint64_t dropped;
};

/* The worker's token key, made once and held in memory only. */
static tb_task_token_key_t worker_key;
static int worker_key_rc = -1;
static pthread_once_t worker_key_once = PTHREAD_ONCE_INIT;

static void worker_key_init(void)
{
	tb_error_t err;
	worker_key_rc = tb_task_token_key_new(&worker_key, &err);
}

/* From the proxy's threads: queue, never block for long. */
static void on_audit(void *ud, const tb_proxy_audit_t *a)
{
	tb_egress_t *e = ud;
	tb_metrics_egress(a->refused ? 0 : a->status);
	json_t *p = json_pack("{s:s,s:s,s:s,s:i,s:I,s:I,s:I}", "method", a->method, "host", a->host,
			      "path", a->path, "status", a->status, "bytes_in",
			      (json_int_t)a->bytes_in, "bytes_out", (json_int_t)a->bytes_out,
			      "duration_ms", (json_int_t)a->duration_ms);
	if (p && a->endpoint)
		json_object_set_new(p, "endpoint", json_string(a->endpoint));
	if (p && a->reason)
		json_object_set_new(p, "reason", json_string(a->reason));
	pthread_mutex_lock(&e->lock);
	if (p && e->queue && json_array_size(e->queue) < TB_EGRESS_QUEUE_MAX &&
	    json_array_append_new(e->queue, p) == 0)
		p = NULL;
	else
		e->dropped++;
	pthread_mutex_unlock(&e->lock);
	json_decref(p);
}

int tb_egress_start(tb_egress_t **out, const tb_runtime_t *rt, pid_t netns_of, const char *task_id,
		    uint64_t attempt, uint64_t expires_ms, tb_error_t *err)
{
	tb_egress_t *e;
	int fd = -1, rc;

	*out = NULL;
	if (!rt->endpoints.n)
		return 0;
	pthread_once(&worker_key_once, worker_key_init);
	if (worker_key_rc < 0)
		return tb_error_set(err, TB_EIO, "egress: no key for task tokens (getrandom)");
	if (!(e = calloc(1, sizeof(*e))) || !(e->queue = json_array())) {
		free(e);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	e->rt = rt;
	pthread_mutex_init(&e->lock, NULL);
	if ((rc = tb_task_token_issue(e->token, sizeof(e->token), &worker_key, task_id, attempt,
				      expires_ms, err)) < 0 ||
	    (rc = tb_proxy_listen(&fd, netns_of, TB_EGRESS_PORT, err)) < 0)
		goto fail;
	tb_proxy_conf_t conf = {
		.listen_fd = fd,
		.endpoints = &rt->endpoints,
		.key = &worker_key,
		.task_id = task_id,
		.attempt = attempt,
		.audit = on_audit,
		.audit_ud = e,
	};
	if ((rc = tb_proxy_start(&e->proxy, &conf, err)) < 0)
		goto fail;
	*out = e;
	return 0;
fail:
	tb_error_prefix(err, "egress");
	tb_egress_free(e);
	return rc == TB_ENOMEM ? rc : (err->code = TB_EIO);
}

int tb_egress_env(const tb_egress_t *e, char **envp, int n, int cap)
{
	char url[64];

	if (!e)
		return n;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", TB_EGRESS_PORT);
	const char *fixed[][2] = {
		{ "TASKBOX_TOKEN", e->token },
		{ "HTTP_PROXY", url },
		{ "http_proxy", url },
		{ "NO_PROXY", "127.0.0.1,localhost" },
		{ "no_proxy", "127.0.0.1,localhost" },
	};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]) && n < cap - 1; i++)
		if (asprintf(&envp[n++], "%s=%s", fixed[i][0], fixed[i][1]) < 0)
			abort(); /* out of memory */
	const tb_endpoint_t *eps = e->rt->endpoints.items;
	for (size_t i = 0; i < e->rt->endpoints.n && n < cap - 1; i++) {
		char name[80];
		size_t k = 0;
		for (const char *c = eps[i].name; *c && k + 1 < sizeof(name); c++)
			name[k++] = (*c >= 'a' && *c <= 'z')   ? (char)(*c - 'a' + 'A')
				    : (*c == '-' || *c == '.') ? '_'
							       : *c;
		name[k] = '\0';
		if (asprintf(&envp[n++], "TASKBOX_ENDPOINT_%s=%s/%s", name, url, eps[i].name) < 0)
			abort();
	}
	return n;
}

uint64_t tb_egress_drain(tb_egress_t *e, void (*fn)(void *ud, json_t *payload), void *ud)
{
	json_t *batch = NULL, *v;
	uint64_t dropped;
	size_t i;

	if (!e)
		return 0;
	pthread_mutex_lock(&e->lock);
	if (json_array_size(e->queue)) {
		batch = e->queue;
		e->queue = json_array();
	}
	dropped = e->dropped;
	e->dropped = 0;
	pthread_mutex_unlock(&e->lock);
	json_array_foreach(batch, i, v) fn(ud, json_incref(v));
	json_decref(batch);
	return dropped;
}

void tb_egress_stop(tb_egress_t *e)
{
	if (!e || !e->proxy)
		return;
	tb_proxy_stop(e->proxy);
	e->proxy = NULL;
}

void tb_egress_free(tb_egress_t *e)
{
	if (!e)
		return;
	tb_egress_stop(e);
	OPENSSL_cleanse(e->token, sizeof(e->token));
	json_decref(e->queue);
	pthread_mutex_destroy(&e->lock);
	free(e);
}
