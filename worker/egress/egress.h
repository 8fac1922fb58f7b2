/*
 * egress.h: a sandbox's network boundary as the task lifecycle uses it
 * (docs/architecture.md, invariant 5): the task token, the egress proxy listening on
 * 127.0.0.1:TB_EGRESS_PORT inside the sandbox's network namespace, the
 * variables that tell the agent where it is, and what the proxy hands
 * the lifecycle from its threads, queued in order for the lifecycle to
 * emit from its own (events are numbered by the lifecycle alone): audit
 * records, as "egress" events, and the events the agent posts to the
 * platform route (POST /_taskbox/events, proxy.h), as its own.
 *
 * The key that signs task tokens is the worker's: made from getrandom()
 * on first use and kept in memory only, never written anywhere. This
 * file owns the wiring; proxy.c owns the serving, task_token.c the token.
 */
#ifndef TB_EGRESS_H
#define TB_EGRESS_H

#include "ratelimit.h"
#include "tb/agent_events.h"
#include "tb/error.h"
#include "tb/runtime.h"
#include "tb/schema_manifest.h"

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#define TB_EGRESS_PORT 3128
#define TB_EGRESS_QUEUE_MAX 4096 /* audit records waiting to be emitted */
/* The agent's posted events waiting: the run's max_events_per_second,
 * at least 16 and at most this; beyond, the route answers 429. */
#define TB_EGRESS_EVENTS_MAX 1024

typedef struct tb_egress tb_egress_t;

/* What one attempt's proxy serves, and how. Everything it points to must
 * outlive the proxy. */
typedef struct tb_egress_conf {
	const tb_runtime_t *rt; /* its endpoints */
	/* the budgets (its limits' max_tokens, max_input_tokens,
	 * max_output_tokens, max_requests and max_egress_mb, those it has);
	 * NULL: none */
	const tb_limits_t *budget;
	/* the worker's rate limits, shared by its slots; NULL: the
	 * attempt's own, at the whole limit */
	tb_ratelimit_t *rates;
	pid_t netns_of; /* the sandbox's init: the proxy listens in its network */
	const char *task_id;
	uint64_t attempt;
	uint64_t expires_ms; /* the task token's end */
	/* the attempt's egress recording (recording.h); NULL: none */
	struct tb_recorder *recorder;
	/* the recording the task replays (replay.h); NULL: none */
	struct tb_replay *replay;
} tb_egress_conf_t;

/**
 * Issues the task's token (valid until expires_ms) and starts the proxy
 * inside the sandbox's network namespace, serving the runtime's
 * endpoints, holding the task to its budgets: once one is spent, every
 * request the policy allows is refused with 402 and a JSON error naming
 * it (schemas/task.md, "limits"); pacing each request to an endpoint with
 * a rate_limit through the rate limits; recording the exchanges of
 * endpoints with "record". A runtime that allows no
 * endpoint gets no proxy: @p out is set to NULL and 0 returned.
 * @param[out] out released with tb_egress_free()
 * @return 0; TB_EPOISON when no attempt could start it (a task id no
 *         token can carry, a bad configuration); TB_ENOMEM; TB_EIO (with
 *         the step) when the proxy cannot start here and now
 */
int tb_egress_start(tb_egress_t **out, const tb_egress_conf_t *conf, tb_error_t *err);

/**
 * Whether one of the task's budgets is spent (a request was refused for
 * it), and which, into @p why (may be NULL). NULL @p e: no.
 */
int tb_egress_budget_spent(tb_egress_t *e, char *why, size_t len);

/**
 * Whether a strict replay refused a request that matched no recorded
 * exchange, and the first such request, into @p why (may be NULL).
 * NULL @p e: no.
 */
int tb_egress_replay_missed(tb_egress_t *e, char *why, size_t len);

/**
 * Adds the agent's variables to @p envp (each malloc'd "NAME=value", freed
 * by the caller): TASKBOX_TOKEN, TASKBOX_EVENTS_URL (the platform route,
 * http://127.0.0.1:<port>/_taskbox/events), HTTP_PROXY and http_proxy
 * (http://taskbox:<token>@127.0.0.1:<port>: the token as the proxy's
 * password, so standard clients need nothing else), NO_PROXY and
 * no_proxy (the proxy's own address, so its binding URLs are not sent
 * through it as a forward proxy), and TASKBOX_ENDPOINT_<NAME> =
 * http://127.0.0.1:<port>/<name> per endpoint (the name upper-cased,
 * '-' and '.' as '_'). Adds nothing when @p e is NULL.
 * @param n entries already in @p envp; @param cap its size, NULL included
 * @return the new count (stops at cap - 1)
 */
int tb_egress_env(const tb_egress_t *e, char **envp, int n, int cap);

/**
 * Hands on what the proxy queued, oldest first. Audit records go to
 * @p fn as "egress" event payloads (a JSON object: method, host, path,
 * status, bytes_in, bytes_out, duration_ms, and endpoint and reason when
 * known; @p fn owns it), each taking a token from @p rate (the run's
 * event pacing, shared with the agent's own events; NULL: no pacing)
 * without waiting. Records that find no token are summarised, one
 * payload per status: the latest record's, with "count" and the bytes
 * and durations summed; summaries go out first as tokens come, and all
 * of them when @p last (the proxy is stopped). So a loop of requests
 * costs the events topic no more than the runtime's
 * agent.max_events_per_second, and no request goes uncounted.
 * The agent's posted events go to @p event in their place, each once,
 * never summarised or dropped (@p type a tb_event_type_t, @p payload as
 * tb_agent_parse_line() makes it; @p event owns it and does the pacing,
 * waiting for @p rate as fd 3's lines do).
 * @return how many records were dropped since the last call: the queue
 *         was full, or over 16 statuses waited to be summarised
 */
uint64_t tb_egress_drain(tb_egress_t *e, tb_rate_t *rate, uint64_t now_ms, int last,
			 void (*fn)(void *ud, json_t *payload),
			 void (*event)(void *ud, int type, tb_bytes_t payload), void *ud);

/** Stops the proxy: every connection closed, every thread joined. The
 * queue stays for a last tb_egress_drain(). NULL is fine. */
void tb_egress_stop(tb_egress_t *e);

/** Stops (if needed) and frees, wiping the token. NULL is fine. */
void tb_egress_free(tb_egress_t *e);

/**
 * The attempt's egress so far, by endpoint (schemas/manifest.md, "usage"):
 * every request the proxy saw, whatever became of its record. Endpoints
 * with no request are left out; "-" counts requests that matched none.
 * Callable from the lifecycle's thread at any time. NULL @p e: none.
 * @param[out] out tb_usage_egress_t items, each endpoint malloc'd, owned by
 *             the caller (the manifest's usage frees them)
 * @return 0, or -1 without memory
 */
int tb_egress_usage(tb_egress_t *e, tb_list_t *out);

#endif
