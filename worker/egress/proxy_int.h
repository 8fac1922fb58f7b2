/*
 * proxy_int.h: the egress proxy's insides, shared by its files (private to
 * worker/egress/; proxy.h is the contract):
 *
 *   proxy.c          the listener, the accept thread, start and stop
 *   proxy_serve.c    a connection's thread: each request read, routed and
 *                    answered or forwarded
 *   proxy_client.c   the client's side: waiting, sending, reading,
 *                    refusals, the audit record, masking
 *   proxy_upstream.c one request's transfer to its endpoint (libcurl)
 *   proxy_platform.c the platform route the proxy answers itself
 *   proxy_replay.c   a request answered from a recording (replay.h)
 */
#ifndef TB_PROXY_INT_H
#define TB_PROXY_INT_H

#include "proxy.h"
#include "proxy_http.h"
#include "proxy_policy.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define RESP_HEAD_MAX (64 << 10) /* the upstream's response headers */
#define MASK_MIN 8               /* shorter secrets are not masked */
#define LINGER_MS 500            /* reading what a refused client still sends */

typedef struct tb_proxy_secret {
	char *value;   /* rendered header or query value; NULL: none or unreadable */
	char *mask;    /* the secret, masked in responses however echoed (proxy_mask.h) */
	char why[400]; /* why value is NULL although a credential is configured */
	/* The endpoint's rate bucket (it has a rate_limit; else ""): 32 hex
	 * digits of SHA-256 of "taskbox-rate\n" and the secret, or, with no
	 * credential, of "taskbox-rate-host\n<host>:<port>" (schemas/keys.md). */
	char bucket[33];
} tb_proxy_secret_t;

typedef struct tb_proxy_conn tb_proxy_conn_t;

struct tb_proxy {
	tb_proxy_conf_t conf;
	char task_id[129];
	tb_task_token_key_t key;
	int listen_fd, stop_fd;
	unsigned port;
	tb_proxy_secret_t *secrets; /* one per endpoint */
	size_t nsecrets;
	size_t max_mask;
	pthread_t accept_th;
	int accept_started;
	pthread_mutex_t lock;
	tb_proxy_conn_t *conns;
	unsigned live;
	atomic_int stopping;
};

struct tb_proxy_conn {
	tb_proxy_t *p;
	int fd;
	pthread_t th;
	int done; /* under p->lock */
	tb_proxy_conn_t *next;
	char *buf; /* bytes from the client: [off, have) unread */
	size_t off, have, cap;
	char *head; /* the head being parsed, a copy */
	CURL *curl;
	char *hold; /* response bytes held back: maybe the start of a secret */
	size_t nhold;
	int upstream;             /* the current request went upstream */
	uint64_t retry_after_ms;  /* the current answer's pause (tb_proxy_audit_t) */
	const char *replay_state; /* the current request's, in a replay (tb_proxy_audit_t) */
	uint64_t paced_ms;        /* the current request's wait for its rate turns */
	/* the current request's reservation, from its admission to its
	 * audit record (which hands it back: tb_proxy_audit_t.admitted) */
	tb_proxy_cost_t cost;
	int admitted;
	int estimated; /* its tokens are the reservation's (tb_proxy_audit_t) */
};

/* One request and its response. */
typedef struct tb_proxy_exchange {
	tb_proxy_conn_t *c;
	tb_http_request_t req;
	const tb_endpoint_t *ep;
	const tb_proxy_secret_t *sec;
	int is_head;
	int blocked;   /* the upstream name resolved to an internal address */
	int body_mode; /* 0 none, 1 Content-Length, 2 chunked, 3 read whole (mem_body) */
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
	char ctype[128];             /* the answer's Content-Type */
	int retry_ms_seen;           /* its Retry-After-Ms was read: it wins */
	int scanning;                /* its usage read as it passes (ep's dialect) */
	tb_usage_scan_t usage;       /* ... by this */
	struct tb_rec_exchange *rec; /* its recording (ep's record), or NULL */
	char *mem_body;              /* body_mode 3: the body, read whole (a replay, a provider) */
	size_t mem_len, mem_off;
	char *up_body; /* what goes upstream instead of mem_body (provider_request.h), or NULL */
	size_t up_len;
	tb_proxy_cost_t cost; /* what it may cost: asked of the admit hook */
	int budget_cut;       /* the meter hook cut its answer (max_egress_mb) */
} tb_proxy_exchange_t;

/* ------------------------------------------------- proxy_client.c */

/** The standard reason phrase of @p status, "" for one not listed. */
const char *tb_proxy_reason_phrase(long status);
/** Sends all of @p iov within @p timeout_ms. @return 0, or -1 (timeout,
 * error, or the proxy stops). */
int tb_proxy_send_all(tb_proxy_conn_t *c, struct iovec *iov, int n, unsigned timeout_ms);
/** tb_proxy_send_all() of one string, within the io timeout. */
int tb_proxy_send_str(tb_proxy_conn_t *c, const char *s, size_t len);
/** The client's whole body into x->mem_body, at most @p max bytes
 * (body_mode 3 from then on: upstream it goes from memory), after a 100
 * Continue when the client waits for one. @return 0, or the status to
 * refuse with: 400 malformed, 408 stalled, 413 over @p max. */
int tb_proxy_read_body(tb_proxy_exchange_t *x, size_t max);
/** Reads more from the client into c->buf: > 0 bytes, 0 end of stream,
 * -1 error or stop, -2 @p deadline (monotonic ms) passed. */
ssize_t tb_proxy_fill(tb_proxy_conn_t *c, uint64_t deadline);
/** The audit record of one request, when the proxy keeps one; @p reason
 * non-NULL for a refusal or failure. */
void tb_proxy_audit(tb_proxy_conn_t *c, const char *method, const char *host, const char *path,
		    const tb_endpoint_t *ep, int status, uint64_t in, uint64_t out, uint64_t t0,
		    const char *reason);
/** tb_proxy_audit() of an answer whose usage was read (@p tokens). */
void tb_proxy_audit_used(tb_proxy_conn_t *c, const char *method, const char *host, const char *path,
			 const tb_endpoint_t *ep, int status, uint64_t in, uint64_t out,
			 uint64_t t0, const char *reason, const tb_tokens_t *tokens);
/** A client's path fit for the audit: no query, printable, bounded. */
void tb_proxy_safe_path(char *out, size_t cap, const char *target);
/** Answers @p status with @p reason (and header lines @p extra), then
 * closes gently. */
void tb_proxy_refuse_with(tb_proxy_conn_t *c, int status, const char *reason, const char *extra);
/** Answers @p status with @p body of @p type, then closes gently. */
void tb_proxy_refuse_body(tb_proxy_conn_t *c, int status, const char *type, const char *body,
			  const char *extra);
/** tb_proxy_refuse_with() with no extra header. */
void tb_proxy_refuse(tb_proxy_conn_t *c, int status, const char *reason);
/** Masks every echo of the endpoint's secret in @p s. */
void tb_proxy_mask_all(const tb_proxy_secret_t *sec, char *s, size_t len);

/* ----------------------------------------------- proxy_upstream.c */

/** Forwards the request in @p x to its endpoint as @p d allows and
 * streams the response back. @return 1 when the connection may carry
 * another request. */
int tb_proxy_forward(tb_proxy_exchange_t *x, const tb_proxy_decision_t *d, uint64_t t0);
/** The answer's head (x->status, x->rhead, x->rlength) to the client,
 * recorded when the exchange is. @return 0, or -1 (the client failed) */
int tb_proxy_send_head(tb_proxy_exchange_t *x);
/** Answer body bytes to the client, framed as the head said, recorded
 * when the exchange is. @return 0, or -1 */
int tb_proxy_send_body(tb_proxy_exchange_t *x, const char *data, size_t len);
/** The exchange's recording begins, when its endpoint records and the
 * proxy has a recorder (with the body read whole already, if it was);
 * else NULL. */
struct tb_rec_exchange *tb_proxy_record_begin(tb_proxy_exchange_t *x, const tb_proxy_decision_t *d);

/* -------------------------------------------------- proxy_replay.c */

/** Answers the request in @p x: from its upstream (tb_proxy_forward), or
 * in a replay from the recording, and from its upstream only when nothing
 * matches and the replay fills. @return 1 when the connection may carry
 * another request. */
int tb_proxy_answer(tb_proxy_exchange_t *x, const tb_proxy_decision_t *d, uint64_t t0);

/* ----------------------------------------------- proxy_platform.c */

/** The platform route's path when @p target is for it, else NULL. */
const char *tb_proxy_platform_path(const tb_proxy_t *p, const char *target);
/** Serves one platform request (POST /_taskbox/events). @return 1 when
 * the connection may carry another request. */
int tb_proxy_serve_platform(tb_proxy_conn_t *c, const tb_http_request_t *r, const char *path);

/* -------------------------------------------------- proxy_serve.c */

/** A connection's thread: @p arg is its tb_proxy_conn_t. */
void *tb_proxy_conn_main(void *arg);
/** The checks a request to an upstream passes that a replayed one need
 * not (the worker holds the credential; the rate limit's turn), refused
 * and audited when it fails them. @return 1 to go on. */
int tb_proxy_may_go_upstream(tb_proxy_exchange_t *x, const tb_proxy_decision_t *d, uint64_t t0);

#endif
