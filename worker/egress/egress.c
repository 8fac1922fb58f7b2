/*
 * egress.c: the lifecycle's side of the network boundary (egress.h):
 * token, proxy in the sandbox's namespace, the agent's variables, and
 * the queue from the proxy's threads (audit records and the events the
 * agent posts) to the lifecycle's.
 */
#include "egress.h"

#include "tb/agent_events.h"
#include "tb/metrics.h"
#include "proxy.h"
#include "ratelimit.h"
#include "replay.h"
#include "task_token.h"

#include <openssl/crypto.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HELD_MAX 16 /* statuses summarised at once; more are dropped */

/* An egress event's "tokens" (schemas/event.md): input, output, cached. */
static const char *const token_keys[3] = { "input", "output", "cached" };

static json_t *tokens_json(const uint64_t t[3])
{
	return json_pack("{s:I,s:I,s:I}", token_keys[0], (json_int_t)t[0], token_keys[1],
			 (json_int_t)t[1], token_keys[2], (json_int_t)t[2]);
}

/* Requests with one status that found no room in the event rate: one
 * event for all of them, when there is room or at the end. */
typedef struct held {
	int status;
	uint64_t count, bytes_in, bytes_out, duration_ms;
	uint64_t tokens[3]; /* input, output, cached: summed where reported */
	int has_tokens, estimated;
	json_t *last; /* the latest one's payload */
} held_t;

/* What the proxy's threads hand the lifecycle's, oldest first. */
typedef struct item {
	struct item *next;
	json_t *record; /* an egress record's payload; NULL: an agent event */
	int type;       /* the agent event's */
	tb_bytes_t payload;
} item_t;

struct tb_egress {
	tb_proxy_t *proxy;
	const tb_runtime_t *rt;
	char token[TB_TASK_TOKEN_MAX + 1];
	pthread_mutex_t lock;
	item_t *head, **tail; /* waiting for the lifecycle's thread */
	size_t nrecords, nevents, max_events;
	uint64_t dropped;
	held_t held[HELD_MAX]; /* the lifecycle's thread only */
	size_t nheld;
	/* The attempt's accounting, under lock: one per endpoint of rt, in
	 * its order, then one for requests that matched none. Exact: kept
	 * whatever happens to the records (a full queue, the event rate). */
	tb_usage_egress_t *tally;
	/* The task's budgets (its limits' max_*; has bits as there), what
	 * was admitted against them, and the first one spent, said. */
	tb_limits_t budget;
	uint64_t admitted;
	char spent[256];
	/* What the requests in flight may still cost (their reservations:
	 * tb_proxy_cost_t), under lock: a request waits while the budgets
	 * are spoken for by others (on_admit). */
	uint64_t reserved_in, reserved_out;
	unsigned inflight;
	/* Bytes through the proxy as they pass (request bodies when
	 * admitted, answers as they arrive): an answer that passes
	 * max_egress_mb is cut there (on_meter). 0: no such budget. */
	atomic_uint_fast64_t live_bytes;
	uint64_t bytes_limit;
	struct tb_replay *replay; /* the recording the task replays, or NULL */
	int replaying;
	/* The fleet's rate limits: the worker's, or one of its own when the
	 * caller gave none (own_rates: freed with it). */
	tb_ratelimit_t *rates;
	int own_rates;
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

/* Appends @p it under the lock. */
static void push(tb_egress_t *e, item_t *it)
{
	it->next = NULL;
	*e->tail = it;
	e->tail = &it->next;
}

static void items_free(item_t *it)
{
	while (it) {
		item_t *next = it->next;
		json_decref(it->record);
		free(it->payload.data);
		free(it);
		it = next;
	}
}

/* Counts @p a into its endpoint's tally; under the lock. */
static void tally(tb_egress_t *e, const tb_proxy_audit_t *a)
{
	const tb_endpoint_t *eps = e->rt->endpoints.items;
	size_t i = 0, n = e->rt->endpoints.n;

	while (i < n && !(a->endpoint && !strcmp(a->endpoint, eps[i].name)))
		i++;
	tb_usage_egress_t *t = &e->tally[i]; /* i == n: no endpoint matched */
	t->requests++;
	t->refused += a->refused != 0;
	t->bytes_up += a->bytes_out;
	t->bytes_down += a->bytes_in;
	if (!a->refused && !(a->replay && strcmp(a->replay, "passed")))
		t->upstream_ms += a->duration_ms;
	if (i < n && eps[i].rate_limit.has) { /* the time its rate turns took */
		TB_SET_HAS(t, TB_USAGE_RATE_WAIT);
		t->rate_wait_ms += a->paced_ms;
	}
	if (e->replaying) { /* a replay says how many it answered itself */
		TB_SET_HAS(t, TB_USAGE_REPLAYED);
		t->replayed += a->replay && !strcmp(a->replay, "replayed");
	}
	if (i < n && TB_HAS(&eps[i], TB_ENDPOINT_DIALECT)) { /* its tokens, 0 or more */
		TB_SET_HAS(t, TB_USAGE_TOKENS_IN);
		TB_SET_HAS(t, TB_USAGE_TOKENS_OUT);
		TB_SET_HAS(t, TB_USAGE_TOKENS_CACHED);
	}
	if (a->tokens) {
		t->input_tokens += a->tokens->input;
		t->output_tokens += a->tokens->output;
		t->cached_tokens += a->tokens->cached;
	}
	if (a->admitted) { /* its reservation ends: what it spent is above */
		e->reserved_in -= a->admitted->input_tokens;
		e->reserved_out -= a->admitted->output_tokens;
		e->inflight--;
	}
}

/* The first budget of @p e that stands spent, its limit and use into
 * @p limit and @p used, or NULL. Under the lock. */
static const char *spent_budget(const tb_egress_t *e, uint64_t *limit, uint64_t *used)
{
	uint64_t in = 0, out = 0, bytes = 0;
	for (size_t i = 0; i <= e->rt->endpoints.n; i++) {
		in += e->tally[i].input_tokens;
		out += e->tally[i].output_tokens;
		bytes += e->tally[i].bytes_up + e->tally[i].bytes_down;
	}
	uint64_t tokens = in + out, live = atomic_load(&e->live_bytes);
	const tb_limits_t *b = &e->budget;
	if (live > bytes) /* an answer's bytes count as they arrive */
		bytes = live;
	if (TB_HAS(b, TB_LIMIT_MAX_REQUESTS) && e->admitted >= b->max_requests) {
		*limit = b->max_requests, *used = e->admitted;
		return "max_requests";
	}
	if (TB_HAS(b, TB_LIMIT_MAX_TOKENS) && tokens >= b->max_tokens) {
		*limit = b->max_tokens, *used = tokens;
		return "max_tokens";
	}
	if (TB_HAS(b, TB_LIMIT_MAX_INPUT_TOKENS) && in >= b->max_input_tokens) {
		*limit = b->max_input_tokens, *used = in;
		return "max_input_tokens";
	}
	if (TB_HAS(b, TB_LIMIT_MAX_OUTPUT_TOKENS) && out >= b->max_output_tokens) {
		*limit = b->max_output_tokens, *used = out;
		return "max_output_tokens";
	}
	if (TB_HAS(b, TB_LIMIT_MAX_EGRESS_MB) && bytes >= (b->max_egress_mb << 20)) {
		*limit = b->max_egress_mb, *used = bytes >> 20;
		return "max_egress_mb";
	}
	return NULL;
}

/* Whether the requests in flight may spend what is left of a token
 * budget between them (their reservations with what is spent reach
 * it). Under the lock. */
static int spoken_for(const tb_egress_t *e)
{
	uint64_t in = e->reserved_in, out = e->reserved_out;
	for (size_t i = 0; i <= e->rt->endpoints.n; i++) {
		in += e->tally[i].input_tokens;
		out += e->tally[i].output_tokens;
	}
	const tb_limits_t *b = &e->budget;
	return (TB_HAS(b, TB_LIMIT_MAX_TOKENS) && in + out >= b->max_tokens) ||
	       (TB_HAS(b, TB_LIMIT_MAX_INPUT_TOKENS) && in >= b->max_input_tokens) ||
	       (TB_HAS(b, TB_LIMIT_MAX_OUTPUT_TOKENS) && out >= b->max_output_tokens);
}

/* A request held for the budgets spoken for waits this long at most. */
#define BUDGET_WAIT_MAX_MS 600000

/* From the proxy's threads: a request about to go upstream, let go while
 * no budget of the task is spent, its worst case reserved until its
 * record (tally). The request that finds one spent is refused (402, with
 * a JSON error naming it), and so is every later one. While the requests
 * in flight may spend what is left, it waits for them (1): so requests
 * together spend at most the budget and one request's worth. */
static int on_admit(void *ud, const tb_endpoint_t *ep, const tb_proxy_cost_t *cost,
		    uint64_t waited_ms, tb_proxy_refusal_t *no)
{
	tb_egress_t *e = ud;
	uint64_t limit = 0, used = 0;
	int held = 0;

	(void)ep;
	pthread_mutex_lock(&e->lock);
	const char *b = spent_budget(e, &limit, &used);
	if (b) {
		if (!e->spent[0])
			snprintf(e->spent, sizeof(e->spent), "budget %s (%llu) spent: %llu used", b,
				 (unsigned long long)limit, (unsigned long long)used);
	} else if (e->inflight && spoken_for(e)) {
		held = 1;
	} else {
		e->admitted++;
		e->inflight++;
		e->reserved_in += cost->input_tokens;
		e->reserved_out += cost->output_tokens;
		atomic_fetch_add(&e->live_bytes, cost->bytes);
	}
	pthread_mutex_unlock(&e->lock);
	if (!b && !held)
		return 0;
	if (held && waited_ms < BUDGET_WAIT_MAX_MS)
		return 1;
	if (held) {
		no->status = 503;
		snprintf(no->reason, sizeof(no->reason),
			 "the task's requests in flight held its token budgets for %d s: this "
			 "one was not sent",
			 BUDGET_WAIT_MAX_MS / 1000);
		snprintf(no->body, sizeof(no->body),
			 "{\"error\":{\"type\":\"budget_held\",\"message\":\"%s\"}}", no->reason);
		return -1;
	}
	no->status = 402;
	snprintf(no->reason, sizeof(no->reason),
		 "the task's budget %s (%llu) is spent: no more requests go out", b,
		 (unsigned long long)limit);
	json_t *j =
	    json_pack("{s:{s:s,s:s,s:I,s:I,s:s}}", "error", "type", "budget_exhausted", "budget", b,
		      "limit", (json_int_t)limit, "used", (json_int_t)used, "message", no->reason);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	snprintf(no->body, sizeof(no->body), "%s", text ? text : "{\"error\":{}}");
	free(text);
	json_decref(j);
	return -1;
}

/* From the proxy's threads, per chunk of an answer: its bytes counted as
 * they arrive, the answer cut once they pass max_egress_mb (and the
 * budget then stands spent, as when a request is refused). */
static int on_meter(void *ud, uint64_t bytes)
{
	tb_egress_t *e = ud;
	uint64_t now = atomic_fetch_add(&e->live_bytes, bytes) + bytes;

	if (!e->bytes_limit || now <= e->bytes_limit)
		return 0;
	pthread_mutex_lock(&e->lock);
	if (!e->spent[0])
		snprintf(e->spent, sizeof(e->spent),
			 "budget max_egress_mb (%llu) spent: %llu used, an answer cut",
			 (unsigned long long)(e->bytes_limit >> 20),
			 (unsigned long long)(now >> 20));
	pthread_mutex_unlock(&e->lock);
	return -1;
}

/* From the proxy's threads: a request to an endpoint with a rate limit
 * waits its turn in the proxy, as long as the endpoint's max_wait_seconds
 * allow; one whose turn is further away is refused (429, Retry-After). */
static int on_pace(void *ud, const tb_endpoint_t *ep, const char *bucket, uint64_t waited_ms,
		   uint64_t *wait_ms, int *again, tb_proxy_refusal_t *no)
{
	tb_egress_t *e = ud;
	const tb_rate_conf_t *rc = &ep->rate_limit;
	uint64_t max =
	    (TB_HAS(rc, TB_RATE_MAX_WAIT) ? rc->max_wait_seconds : TB_RATE_MAX_WAIT_DEFAULT) * 1000;
	uint64_t left = max > waited_ms ? max - waited_ms : 0;
	tb_ledger_turn_t t;

	tb_ratelimit_take(e->rates, bucket, rc, left, &t);
	if (t.taken || t.wait_ms <= left) {
		*wait_ms = t.taken || t.wait_ms ? t.wait_ms : 1;
		*again = !t.taken;
		return 0;
	}
	uint64_t secs = (t.wait_ms + 999) / 1000;
	no->status = 429;
	snprintf(no->reason, sizeof(no->reason),
		 "endpoint '%.64s' is at its rate limit: the next turn is %llu ms away, over "
		 "its max_wait_seconds (%llu)",
		 ep->name, (unsigned long long)t.wait_ms, (unsigned long long)(max / 1000));
	snprintf(no->body, sizeof(no->body),
		 "{\"error\":{\"type\":\"rate_limited\",\"retry_after_ms\":%llu,"
		 "\"message\":\"%s\"}}",
		 (unsigned long long)t.wait_ms, no->reason);
	snprintf(no->extra, sizeof(no->extra), "Retry-After: %llu\r\n", (unsigned long long)secs);
	return -1;
}

/* The endpoint named @p name in @p e's runtime, or NULL. */
static const tb_endpoint_t *endpoint_named(const tb_egress_t *e, const char *name)
{
	const tb_endpoint_t *eps = e->rt->endpoints.items;
	for (size_t i = 0; name && i < e->rt->endpoints.n; i++)
		if (!strcmp(eps[i].name, name))
			return &eps[i];
	return NULL;
}

/* From the proxy's threads: queue, never block for long. */
static void on_audit(void *ud, const tb_proxy_audit_t *a)
{
	tb_egress_t *e = ud;
	item_t *it = calloc(1, sizeof(*it));
	tb_metrics_egress(a->refused ? 0 : a->status);
	json_t *p = json_pack("{s:s,s:s,s:s,s:i,s:I,s:I,s:I}", "method", a->method, "host", a->host,
			      "path", a->path, "status", a->status, "bytes_in",
			      (json_int_t)a->bytes_in, "bytes_out", (json_int_t)a->bytes_out,
			      "duration_ms", (json_int_t)a->duration_ms);
	if (p && a->endpoint)
		json_object_set_new(p, "endpoint", json_string(a->endpoint));
	if (p && a->reason)
		json_object_set_new(p, "reason", json_string(a->reason));
	if (p && a->replay)
		json_object_set_new(p, "replay", json_string(a->replay));
	if (p && a->tokens) {
		uint64_t t[3] = { a->tokens->input, a->tokens->output, a->tokens->cached };
		json_t *tj = tokens_json(t);
		if (tj && a->estimated) /* the request's worst case: none reported */
			json_object_set_new(tj, "estimated", json_true());
		json_object_set_new(p, "tokens", tj);
	}
	const tb_endpoint_t *ep = a->bucket ? endpoint_named(e, a->endpoint) : NULL;
	if (ep) /* what the answer spent, and a pause its provider asked for */
		tb_ratelimit_spend(e->rates, a->bucket, &ep->rate_limit,
				   a->tokens ? a->tokens->input + a->tokens->output : 0,
				   a->retry_after_ms);
	pthread_mutex_lock(&e->lock);
	tally(e, a);
	if (p && it && e->nrecords < TB_EGRESS_QUEUE_MAX) {
		it->record = p;
		push(e, it);
		e->nrecords++;
		p = NULL, it = NULL;
	} else {
		e->dropped++;
	}
	pthread_mutex_unlock(&e->lock);
	json_decref(p);
	free(it);
}

/* From the proxy's threads: an event the agent posted (the platform
 * route). Never dropped once taken; when too many wait, refused (429). */
static int on_event(void *ud, int type, tb_bytes_t payload)
{
	tb_egress_t *e = ud;
	item_t *it = calloc(1, sizeof(*it));
	int rc = -1;

	pthread_mutex_lock(&e->lock);
	if (it && e->nevents < e->max_events) {
		it->type = type;
		it->payload = payload;
		push(e, it);
		e->nevents++;
		it = NULL, payload.data = NULL, rc = 0;
	}
	pthread_mutex_unlock(&e->lock);
	free(it);
	free(payload.data);
	return rc;
}

int tb_egress_start(tb_egress_t **out, const tb_egress_conf_t *ec, tb_error_t *err)
{
	const tb_runtime_t *rt = ec->rt;
	tb_ratelimit_t *rates = ec->rates;
	tb_egress_t *e;
	int fd = -1, rc;

	*out = NULL;
	if (!rt->endpoints.n)
		return 0;
	pthread_once(&worker_key_once, worker_key_init);
	if (worker_key_rc < 0)
		return tb_error_set(err, TB_EIO, "egress: no key for task tokens (getrandom)");
	if (!(e = calloc(1, sizeof(*e))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	e->rt = rt;
	e->tail = &e->head;
	e->rates = rates;
	if (!rates && tb_ratelimit_new(&e->rates, NULL, err) < 0) {
		free(e);
		return err->code;
	}
	e->own_rates = !rates;
	if (ec->budget)
		e->budget = *ec->budget;
	if (TB_HAS(&e->budget, TB_LIMIT_MAX_EGRESS_MB))
		e->bytes_limit = e->budget.max_egress_mb << 20;
	atomic_init(&e->live_bytes, 0);
	if (!(e->tally = calloc(rt->endpoints.n + 1, sizeof(*e->tally)))) {
		if (e->own_rates)
			tb_ratelimit_free(e->rates);
		free(e);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	/* About a second of the run's event rate may wait (16 at least). */
	e->max_events = rt->agent.max_events_per_second;
	e->max_events = e->max_events < 16                     ? 16
			: e->max_events > TB_EGRESS_EVENTS_MAX ? TB_EGRESS_EVENTS_MAX
							       : e->max_events;
	pthread_mutex_init(&e->lock, NULL);
	if ((rc = tb_task_token_issue(e->token, sizeof(e->token), &worker_key, ec->task_id,
				      ec->attempt, ec->expires_ms, err)) < 0 ||
	    (rc = tb_proxy_listen(&fd, ec->netns_of, TB_EGRESS_PORT, err)) < 0)
		goto fail;
	tb_proxy_conf_t conf = {
		.listen_fd = fd,
		.endpoints = &rt->endpoints,
		.key = &worker_key,
		.task_id = ec->task_id,
		.attempt = ec->attempt,
		.audit = on_audit,
		.audit_ud = e,
		.event = on_event,
		.event_ud = e,
		.max_event_bytes = rt->agent.max_event_bytes,
		.admit = on_admit,
		.admit_ud = e,
		.meter = on_meter,
		.pace = on_pace,
		.recorder = ec->recorder,
		.replay = ec->replay,
	};
	e->replay = ec->replay;
	e->replaying = ec->replay != NULL;
	if ((rc = tb_proxy_start(&e->proxy, &conf, err)) < 0)
		goto fail;
	*out = e;
	return 0;
fail:
	tb_error_prefix(err, "egress");
	tb_egress_free(e);
	/* Bad input (a task id no token can carry, a bad configuration) fails
	 * every attempt alike: poison, not a platform failure to retry. */
	if (rc == TB_EINVAL)
		return err->code = TB_EPOISON;
	return rc == TB_ENOMEM ? rc : (err->code = TB_EIO);
}

int tb_egress_env(const tb_egress_t *e, char **envp, int n, int cap)
{
	char url[64], proxy[TB_TASK_TOKEN_MAX + 80];

	if (!e)
		return n;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", TB_EGRESS_PORT);
	/* The token as the proxy's password: standard clients send it
	 * (Proxy-Authorization: Basic) with HTTP_PROXY alone. Its characters
	 * (base64url and '.') need no escaping in a URL. */
	snprintf(proxy, sizeof(proxy), "http://taskbox:%s@127.0.0.1:%d", e->token, TB_EGRESS_PORT);
	char events[sizeof(url) + sizeof(TB_PROXY_EVENTS_PATH)];
	snprintf(events, sizeof(events), "%s%s", url, TB_PROXY_EVENTS_PATH);
	const char *fixed[][2] = {
		{ "TASKBOX_TOKEN", e->token },
		{ "TASKBOX_EVENTS_URL", events },
		{ "HTTP_PROXY", proxy },
		{ "http_proxy", proxy },
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
	OPENSSL_cleanse(proxy, sizeof(proxy));
	return n;
}

/* Folds @p v into the summary for its status; 0, or -1 when there is no
 * room for another status. */
static int hold(tb_egress_t *e, json_t *v)
{
	int status = (int)json_integer_value(json_object_get(v, "status"));
	held_t *h = NULL;

	for (size_t i = 0; i < e->nheld && !h; i++)
		if (e->held[i].status == status)
			h = &e->held[i];
	if (!h) {
		if (e->nheld == HELD_MAX)
			return -1;
		h = &e->held[e->nheld++];
		*h = (held_t){ .status = status };
	}
	h->count++;
	h->bytes_in += (uint64_t)json_integer_value(json_object_get(v, "bytes_in"));
	h->bytes_out += (uint64_t)json_integer_value(json_object_get(v, "bytes_out"));
	h->duration_ms += (uint64_t)json_integer_value(json_object_get(v, "duration_ms"));
	json_t *t = json_object_get(v, "tokens");
	for (int k = 0; t && k < 3; k++)
		h->tokens[k] += (uint64_t)json_integer_value(json_object_get(t, token_keys[k]));
	h->has_tokens |= t != NULL;
	h->estimated |= json_is_true(json_object_get(t, "estimated"));
	json_decref(h->last);
	h->last = json_incref(v);
	return 0;
}

/* Hands the oldest summary on (as its one record when it holds one). */
static void release_first(tb_egress_t *e, void (*fn)(void *ud, json_t *payload), void *ud)
{
	held_t h = e->held[0];
	json_t *p = h.count > 1 ? json_deep_copy(h.last) : json_incref(h.last);

	memmove(e->held, e->held + 1, (e->nheld - 1) * sizeof(held_t));
	e->nheld--;
	json_decref(h.last);
	if (p && h.count > 1) {
		json_object_set_new(p, "count", json_integer((json_int_t)h.count));
		json_object_set_new(p, "bytes_in", json_integer((json_int_t)h.bytes_in));
		json_object_set_new(p, "bytes_out", json_integer((json_int_t)h.bytes_out));
		json_object_set_new(p, "duration_ms", json_integer((json_int_t)h.duration_ms));
		json_t *tj = h.has_tokens ? tokens_json(h.tokens) : NULL;
		if (tj && h.estimated)
			json_object_set_new(tj, "estimated", json_true());
		if (tj)
			json_object_set_new(p, "tokens", tj);
	}
	if (p)
		fn(ud, p);
}

uint64_t tb_egress_drain(tb_egress_t *e, tb_rate_t *rate, uint64_t now_ms, int last,
			 void (*fn)(void *ud, json_t *payload),
			 void (*event)(void *ud, int type, tb_bytes_t payload), void *ud)
{
	item_t *batch, *it;
	uint64_t dropped;

	if (!e)
		return 0;
	pthread_mutex_lock(&e->lock);
	batch = e->head;
	e->head = NULL, e->tail = &e->head;
	e->nrecords = e->nevents = 0;
	dropped = e->dropped;
	e->dropped = 0;
	pthread_mutex_unlock(&e->lock);
	/* Oldest first: the summaries waiting, then the new records, each
	 * while the rate has room (what finds none is summarised), and the
	 * agent's events in their place (@p event paces them). */
	while (e->nheld && (!rate || tb_rate_take(rate, now_ms) == 0))
		release_first(e, fn, ud);
	for (; (it = batch); free(it)) {
		batch = it->next;
		if (!it->record) {
			event(ud, it->type, it->payload);
		} else if (!e->nheld && (!rate || tb_rate_take(rate, now_ms) == 0)) {
			fn(ud, it->record);
		} else {
			if (hold(e, it->record) < 0)
				dropped++;
			json_decref(it->record); /* hold() keeps its own reference */
		}
	}
	while (last && e->nheld)
		release_first(e, fn, ud);
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
	items_free(e->head);
	for (size_t i = 0; i < e->nheld; i++)
		json_decref(e->held[i].last);
	pthread_mutex_destroy(&e->lock);
	free(e->tally);
	if (e->own_rates)
		tb_ratelimit_free(e->rates);
	free(e);
}

int tb_egress_budget_spent(tb_egress_t *e, char *why, size_t len)
{
	int spent;

	if (!e)
		return 0;
	pthread_mutex_lock(&e->lock);
	spent = e->spent[0] != '\0';
	if (spent && why)
		snprintf(why, len, "%s", e->spent);
	pthread_mutex_unlock(&e->lock);
	return spent;
}

int tb_egress_replay_missed(tb_egress_t *e, char *why, size_t len)
{
	char first[700];

	if (!e || !e->replay || !tb_replay_first_miss(e->replay, first, sizeof(first)))
		return 0;
	if (why)
		snprintf(why, len, "replay of %s: the first request with no recorded match: %s",
			 tb_replay_from(e->replay), first);
	return 1;
}

int tb_egress_usage(tb_egress_t *e, tb_list_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!e)
		return 0;
	const tb_endpoint_t *eps = e->rt->endpoints.items;
	size_t n = e->rt->endpoints.n;
	tb_usage_egress_t *items = calloc(n + 1, sizeof(*items));
	if (!items)
		return -1;
	pthread_mutex_lock(&e->lock);
	for (size_t i = 0; i <= n; i++) {
		if (!e->tally[i].requests)
			continue;
		tb_usage_egress_t *u = &items[out->n++];
		*u = e->tally[i];
		u->endpoint = strdup(i < n ? eps[i].name : "-");
		if (!u->endpoint)
			abort(); /* out of memory: docs/architecture.md, "Conventions" */
	}
	pthread_mutex_unlock(&e->lock);
	if (out->n)
		out->items = items;
	else
		free(items);
	return 0;
}
