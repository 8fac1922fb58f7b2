/*
 * proxy.h: the worker's egress proxy, one per sandbox (docs/architecture.md
 * invariant 5: the only way out of a sandbox).
 *
 * The sandbox's network namespace has loopback only. The worker makes a
 * listening socket inside it (tb_proxy_listen: a short-lived thread joins
 * that namespace, binds 127.0.0.1:<port> and leaves; the socket stays in
 * the namespace it was made in while the worker uses it from its own), and
 * serves plain HTTP/1.1 on it. Upstream connections are made from the
 * worker's namespace, with libcurl (HTTPS spoken by the proxy), to the
 * endpoints the runtime allows and nowhere else.
 *
 * The agent uses it in two forms:
 *  - reverse proxy per binding: http://127.0.0.1:<port>/<endpoint name>/<path>
 *    (what the TASKBOX_ENDPOINT_<NAME> variables point to);
 *  - forward proxy (HTTP_PROXY): absolute-form targets http://<host>/<path>,
 *    the host matched by name against the endpoints'. CONNECT is refused
 *    (403): the agent speaks plain HTTP and the proxy speaks HTTPS upstream,
 *    so the provider's key can be added and the agent never holds it.
 * Every request carries the task token (X-Taskbox-Token: <token>,
 * Proxy-Authorization: Bearer <token>, or Proxy-Authorization: Basic with
 * the token as the password, which is what standard clients send for
 * HTTP_PROXY=http://taskbox:<token>@127.0.0.1:3128), checked against the
 * proxy's task and attempt; none of these headers goes upstream. The
 * endpoint's credential is added (header or query), and a client's header
 * of the same name is dropped. The upstream host is always the endpoint's
 * configured name, never the client's Host.
 *
 * Headers that ask a server or a gateway in front of it for another
 * method, path or host than the request line's are always dropped, never
 * refused: X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override,
 * X-Original-Method, X-Original-URL, X-Original-URI, X-Rewrite-URL,
 * X-Envoy-Original-Path, X-Original-Host, X-Host, Forwarded and every
 * X-Forwarded-* (a client has no business saying where it came from).
 *
 * Responses stream back as they arrive (chunked to the client when the
 * upstream gave no length, or gave Transfer-Encoding, which voids its
 * Content-Length), with the secret masked ('*') wherever the upstream
 * echoes it (secrets of 8 bytes or more). Masking is best effort: it
 * knows the secret as sent and percent-encoded, nothing else (not
 * base64, JSON escapes or a hash of it). For an endpoint with a
 * credential the proxy also keeps the echo whole and plain: the client's
 * Accept-Encoding, Range and If-Range are dropped (Accept-Encoding:
 * identity is sent instead) and TRACE is refused. A provider that echoes
 * its key in some other form, or compresses unasked, is not caught.
 *
 * The platform route: POST /_taskbox/events (reverse form), or
 * http://127.0.0.1:<port>/_taskbox/events in the forward form (the
 * proxy's own address, "localhost" too, with its port), is answered by
 * the proxy itself, never sent upstream; "_taskbox" is therefore no
 * endpoint's name (the runtime codec refuses it). Its body is one line
 * of the agent protocol (schemas/agent.md), exactly as the agent would
 * write it on fd 3 (one trailing '\n' allowed, no other), at most
 * max_event_bytes, with Content-Type: application/json. After the same
 * token check as every request, the line is parsed by
 * tb_agent_parse_line() and handed to conf->event; the answer is 202
 * {"accepted":true} (the event's seq is not known yet: the lifecycle
 * numbers it when it emits it). 400 a line that does not parse (the
 * reason), 403 turn-ended (turns belong to fd 3), 404 another
 * /_taskbox path, 405 not POST, 413 over max_event_bytes, 415 not
 * application/json, 429 (Retry-After: 1) conf->event has too many
 * waiting. A request that passed the token check is not an egress
 * request: no audit record (one refused for its token is audited, as
 * the proxy cannot tell what it was for).
 *
 * Refusals: 400 malformed or smuggling-shaped requests (proxy_http.h) and
 * paths (proxy_policy.h), 401 missing, malformed, forged or expired token,
 * 407 (with Proxy-Authenticate: Basic) a forward-proxy request without
 * one; 403 another task's token, a place or method the runtime does not
 * allow, CONNECT, TRACE to an endpoint with a credential; 408 a head not
 * complete within header_timeout_ms; 431 a head over max_head_bytes; 502
 * the upstream failed, resolved to an internal address, or framed its
 * answer ambiguously (a malformed Content-Length, or two that differ), or
 * the worker lacks the endpoint's secret; 503 over max_conns connections.
 * Each refusal closes the connection. Successful exchanges keep it alive,
 * unless the answer came before the client's whole body (then it says
 * "Connection: close" and closes).
 *
 * Threads: tb_proxy_start() starts one accept thread that polls the
 * listening socket and a stop eventfd, and one thread per connection (at
 * most max_conns; the accept thread answers 503 beyond). Connection
 * threads block only on their own client (with deadlines) and on their
 * upstream transfer; every wait also watches the stop eventfd, so the
 * worker's own threads never wait on a client. tb_proxy_stop() wakes
 * everything, shuts the client sockets, aborts transfers (curl's progress
 * callback, at most about a second; with libcurl 7.87 or later an aborted
 * name lookup is left to end on its own, not waited for), joins every
 * thread and closes every fd. Nothing here touches the sandbox itself.
 */
#ifndef TB_PROXY_H
#define TB_PROXY_H

#include "provider_usage.h"
#include "task_token.h"
#include "tb/codec.h"
#include "tb/error.h"

#include <stdint.h>
#include <sys/types.h>

/* What a request may cost at most, reserved against the task's budgets
 * from its admission to its audit record (provider_request.h says how a
 * provider request's is read). */
typedef struct tb_proxy_cost {
	uint64_t input_tokens;  /* at most: its body's bytes, on an endpoint with a dialect */
	uint64_t output_tokens; /* at most: what its body allows, or the endpoint's default */
	uint64_t bytes;         /* its body's bytes, when known before it goes */
	/* a generation request: an answer (2xx) that reports no usage, or
	 * is cut short, is charged input_tokens and output_tokens */
	int generation;
} tb_proxy_cost_t;

/* One request through the proxy, for the "egress" event
 * (schemas/event.md). Never holds a secret or the token; strings are
 * valid during the callback only. */
typedef struct tb_proxy_audit {
	const char *method;
	const char *host;     /* the endpoint's host; else what the client named */
	const char *path;     /* normalised when it could be; never the query */
	const char *endpoint; /* the endpoint's name, or NULL when none matched */
	int status;           /* what the client got */
	uint64_t bytes_in;    /* response body bytes from upstream to the sandbox */
	uint64_t bytes_out;   /* request body bytes from the sandbox to upstream */
	uint64_t duration_ms;
	const char *reason; /* why it failed or was refused, or NULL */
	int refused;        /* the proxy answered itself: upstream never asked */
	/* what the answer said it used (the endpoint's dialect), or NULL;
	 * estimated: the request's worst case instead (its answer reported
	 * none, or was cut short: tb_proxy_cost_t) */
	const tb_tokens_t *tokens;
	int estimated;
	/* what the request was admitted with (the admit hook said 0), or
	 * NULL when it was not admitted: its reservation ends here */
	const tb_proxy_cost_t *admitted;
	/* the endpoint's rate bucket (it has a rate_limit), or NULL */
	const char *bucket;
	/* the upstream's 429 or 529 asked for a pause this long (Retry-After
	 * or Retry-After-Ms; at most 10 minutes), or 0 */
	uint64_t retry_after_ms;
	/* the time it waited in the proxy for its rate limit's turns, ms */
	uint64_t paced_ms;
	/* in a replay: "replayed" (answered from the recording), "missed"
	 * (refused: nothing matched), "passed" (nothing matched: asked
	 * upstream); NULL otherwise */
	const char *replay;
} tb_proxy_audit_t;

/* The proxy's own answer to a request its admission refused. */
typedef struct tb_proxy_refusal {
	int status;
	char reason[256]; /* for the audit record */
	char body[768];   /* the answer's body, JSON */
	char extra[64];   /* header lines for it ("Retry-After: 3\r\n"), or "" */
} tb_proxy_refusal_t;

typedef struct tb_proxy_conf {
	int listen_fd;                  /* from tb_proxy_listen(); the proxy takes it */
	const tb_list_t *endpoints;     /* tb_endpoint_t; must outlive the proxy */
	const tb_task_token_key_t *key; /* copied */
	const char *task_id;            /* copied */
	uint64_t attempt;
	unsigned max_conns;          /* concurrent connections; 0: 32 */
	unsigned max_head_bytes;     /* request line and headers; 0: 16384 */
	unsigned header_timeout_ms;  /* to read a whole head; 0: 10000 */
	unsigned idle_timeout_ms;    /* between requests on a connection; 0: 30000 */
	unsigned io_timeout_ms;      /* a stalled body read or write; 0: 60000 */
	unsigned connect_timeout_ms; /* to the upstream; 0: 10000 */
	/* Called once per request from the proxy's threads, possibly several
	 * at once: must be thread-safe and quick. May be NULL. */
	void (*audit)(void *ud, const tb_proxy_audit_t *a);
	void *audit_ud;
	/* The platform route: called from the proxy's threads, possibly
	 * several at once, with one agent line as tb_agent_parse_line()
	 * makes it (@p type a tb_event_type_t, never turn-ended). Takes
	 * @p payload on every path. Returns 0 when the event was taken, -1
	 * when it was dropped because too many wait (the client gets 429).
	 * Must be thread-safe and quick. NULL: the route answers 404. */
	int (*event)(void *ud, int type, tb_bytes_t payload);
	void *event_ud;
	size_t max_event_bytes; /* the route's line (agent.max_event_bytes); 0: 65536 */
	/* Asked for every request the policy allows, just before it goes
	 * upstream, from the proxy's threads, with what it may cost: 0 lets
	 * it go (the cost is reserved until its audit record, whose
	 * `admitted` names it); 1 holds it (the client is not answered) and
	 * asks again shortly, @p waited_ms later; -1 refuses it with @p no
	 * (the task's budgets). Thread-safe and quick. May be NULL. */
	int (*admit)(void *ud, const tb_endpoint_t *ep, const tb_proxy_cost_t *cost,
		     uint64_t waited_ms, tb_proxy_refusal_t *no);
	void *admit_ud;
	/* Told of every @p bytes of an answer as they arrive from upstream
	 * (admit_ud is its ud): -1 cuts the answer there (a byte budget
	 * spent). Thread-safe and cheap: called per chunk. May be NULL. */
	int (*meter)(void *ud, uint64_t bytes);
	/* Asked, before admit, for every request to an endpoint with a
	 * rate_limit, from the proxy's threads (admit_ud is its ud): 0 and
	 * *wait_ms, the request waits that long in the proxy (the client
	 * is not answered meanwhile) and then goes, or, when *again, asks
	 * again; -1 refuses it with @p no. @p bucket names the endpoint's
	 * credential (a rate bucket: ratelimit.h); @p waited_ms is how long
	 * this request has waited so far. Thread-safe. May be NULL. */
	int (*pace)(void *ud, const tb_endpoint_t *ep, const char *bucket, uint64_t waited_ms,
		    uint64_t *wait_ms, int *again, tb_proxy_refusal_t *no);
	/* Where the exchanges of endpoints with "record" go (recording.h);
	 * must outlive the proxy. NULL: none are recorded. */
	struct tb_recorder *recorder;
	/* An earlier attempt's recording to answer from (replay.h): requests
	 * go upstream only when it matches none and it fills. Must outlive
	 * the proxy. NULL: none. */
	struct tb_replay *replay;
} tb_proxy_conf_t;

typedef struct tb_proxy tb_proxy_t;

/* The platform route's path, and the binding name it reserves. */
#define TB_PROXY_EVENTS_PATH "/_taskbox/events"
#define TB_PROXY_RESERVED_NAME "_taskbox"

/**
 * Makes a listening TCP socket on 127.0.0.1:@p port (0: any free port)
 * in the network namespace of process @p netns_of (0: the caller's own).
 * @param[out] out the socket (non-blocking, close-on-exec)
 * @return 0; TB_EIO naming the step that failed
 */
int tb_proxy_listen(int *out, pid_t netns_of, unsigned port, tb_error_t *err);

/**
 * Starts serving @p conf->listen_fd. Reads every endpoint's secret now
 * (an endpoint whose secret cannot be read answers 502 and says why).
 * Takes the listening socket on every path.
 * @param[out] out stopped and freed with tb_proxy_stop()
 * @return 0; TB_EINVAL bad conf; TB_EIO or TB_ENOMEM
 */
int tb_proxy_start(tb_proxy_t **out, const tb_proxy_conf_t *conf, tb_error_t *err);

/** The port it listens on. */
unsigned tb_proxy_port(const tb_proxy_t *p);

/** Closes every connection, joins every thread, wipes the secrets and
 * frees @p p (NULL is fine). Returns when nothing of it is left. */
void tb_proxy_stop(tb_proxy_t *p);

#endif
