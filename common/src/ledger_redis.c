/*
 * ledger_redis.c: the ledger on Redis (hiredis), shared by every worker of
 * a fleet and surviving their crashes. Keys, all under the configured
 * prefix, with the task id in braces so one task's keys share a cluster
 * slot (schemas/keys.md):
 *
 *   <prefix>:task:{<id>}:attempts   counter, INCR'd by begin
 *   <prefix>:task:{<id>}:done       "<attempt> <manifest key>", set once
 *   <prefix>:task:{<id>}:failures   list of "<attempt>\t<ms>\t<worker>\t<reason>"
 *
 * begin is one Lua script (refuse if done, else count), so two workers
 * never see the same attempt number. One connection, guarded by a mutex
 * (hiredis contexts are not thread-safe); a broken connection is dropped
 * and redialled on the next call, and every failure to reach Redis is
 * TB_ERETRY: the worker waits, it does not dead-letter.
 *
 * Not here yet (issue 6): leases with fencing tokens and heartbeats, and
 * worker liveness.
 */
#include "tb/ledger.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ANY (-1)

typedef struct redis_ledger {
	tb_ledger_t base;
	pthread_mutex_t lock;
	redisContext *c;
	char host[256];
	int port;
	int db;
	char prefix[64];
	char worker[128];
} redis_ledger_t;

static const char BEGIN_LUA[] = "if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end "
				"return redis.call('INCR', KEYS[1])";
/* Appends a failure and keeps the newest ARGV[2]: one round trip. */
static const char FAILED_LUA[] = "redis.call('RPUSH', KEYS[1], ARGV[1]) "
				 "return redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)";

static void key(char *out, size_t size, const redis_ledger_t *r, const char *task, const char *what)
{
	snprintf(out, size, "%s:task:{%s}:%s", r->prefix, task, what);
}

/* Connected, or TB_ERETRY naming the address. Caller holds the lock. */
static int dial(redis_ledger_t *r, tb_error_t *err)
{
	struct timeval connect_tv = { 2, 0 }, io_tv = { 5, 0 };

	if (r->c)
		return 0;
	r->c = redisConnectWithTimeout(r->host, r->port, connect_tv);
	if (!r->c || r->c->err) {
		int rc = tb_error_set(err, TB_ERETRY, "ledger redis://%s:%d unreachable: %s",
				      r->host, r->port, r->c ? r->c->errstr : "out of memory");
		redisFree(r->c);
		r->c = NULL;
		return rc;
	}
	redisSetTimeout(r->c, io_tv);
	if (r->db) {
		redisReply *rep = redisCommand(r->c, "SELECT %d", r->db);
		int bad = !rep || rep->type == REDIS_REPLY_ERROR;
		freeReplyObject(rep);
		if (bad) {
			redisFree(r->c);
			r->c = NULL;
			return tb_error_set(err, TB_ERETRY,
					    "ledger redis://%s:%d: SELECT %d failed", r->host,
					    r->port, r->db);
		}
	}
	return 0;
}

/*
 * Runs one command (printf-style, as redisCommand) and checks its reply's
 * type (@p want, or ANY for any but an error). A lost connection is
 * dropped so the next call redials.
 */
static int run(redis_ledger_t *r, redisReply **out, int want, tb_error_t *err, const char *fmt, ...)
{
	va_list ap;
	redisReply *rep;
	int rc;

	*out = NULL;
	if ((rc = dial(r, err)) < 0)
		return rc;
	va_start(ap, fmt);
	rep = redisvCommand(r->c, fmt, ap);
	va_end(ap);
	if (!rep) {
		rc = tb_error_set(err, TB_ERETRY, "ledger redis://%s:%d: %s", r->host, r->port,
				  r->c->errstr[0] ? r->c->errstr : "no reply");
		redisFree(r->c);
		r->c = NULL;
		return rc;
	}
	if (rep->type == REDIS_REPLY_ERROR || (want >= 0 && rep->type != want)) {
		rc = tb_error_set(err, rep->type == REDIS_REPLY_ERROR ? TB_ERETRY : TB_EIO,
				  "ledger redis://%s:%d: unexpected reply: %s", r->host, r->port,
				  rep->type == REDIS_REPLY_ERROR ? rep->str : "wrong type");
		freeReplyObject(rep);
		return rc;
	}
	*out = rep;
	return 0;
}

static int redis_begin(tb_ledger_t *l, const char *task, const char *worker, uint64_t *attempt,
		       tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	char k_att[512], k_done[512];
	redisReply *rep;
	int rc;

	(void)worker;
	key(k_att, sizeof(k_att), r, task, "attempts");
	key(k_done, sizeof(k_done), r, task, "done");
	pthread_mutex_lock(&r->lock);
	rc = run(r, &rep, REDIS_REPLY_INTEGER, err, "EVAL %s 2 %s %s", BEGIN_LUA, k_att, k_done);
	pthread_mutex_unlock(&r->lock);
	if (rc < 0)
		return rc;
	long long n = rep->integer;
	freeReplyObject(rep);
	if (n < 0)
		return tb_error_set(err, TB_EEXIST, "task %s is done", task);
	*attempt = (uint64_t)n;
	return 0;
}

static int redis_failed(tb_ledger_t *l, const char *task, uint64_t attempt, const char *reason,
			tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	char k[512], entry[1024];
	redisReply *rep;
	int rc;

	key(k, sizeof(k), r, task, "failures");
	snprintf(entry, sizeof(entry), "%" PRIu64 "\t%" PRIu64 "\t%s\t%s", attempt,
		 (uint64_t)time(NULL) * 1000, r->worker, reason);
	pthread_mutex_lock(&r->lock);
	rc = run(r, &rep, ANY, err, "EVAL %s 1 %s %s %d", FAILED_LUA, k, entry,
		 TB_LEDGER_MAX_FAILURES);
	freeReplyObject(rep);
	pthread_mutex_unlock(&r->lock);
	return rc;
}

static int redis_done(tb_ledger_t *l, const char *task, uint64_t attempt, const char *manifest_key,
		      tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	char k[512], value[1100];
	redisReply *rep;
	int rc;

	key(k, sizeof(k), r, task, "done");
	pthread_mutex_lock(&r->lock);
	/* NX: the first done-marker stands; a later one (a replay that raced
	 * it) changes nothing, and the task is done either way. */
	snprintf(value, sizeof(value), "%" PRIu64 " %s", attempt, manifest_key);
	rc = run(r, &rep, ANY, err, "SET %s %s NX", k, value);
	freeReplyObject(rep); /* "OK" (set) or nil (was set): both mean done */
	pthread_mutex_unlock(&r->lock);
	return rc;
}

/* "<attempt>\t<ms>\t<worker>\t<reason>" into @p a; the reason may hold
 * tabs. An entry not in this shape is kept whole as the reason. */
static void parse_failure(tb_ledger_attempt_t *a, const char *s)
{
	unsigned long long att, ts;
	int off = 0, wlen;

	memset(a, 0, sizeof(*a));
	if (sscanf(s, "%llu\t%llu\t%n", &att, &ts, &off) == 2 && off > 0) {
		const char *tab = strchr(s + off, '\t');
		if (tab) {
			a->attempt = att;
			a->ts = ts;
			wlen = (int)(tab - (s + off));
			snprintf(a->worker, sizeof(a->worker), "%.*s", wlen, s + off);
			s = tab + 1;
		}
	}
	snprintf(a->reason, sizeof(a->reason), "%s", s);
}

static int redis_history(tb_ledger_t *l, const char *task, tb_ledger_attempt_t **out, size_t *n,
			 tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	char k[512];
	redisReply *rep;
	int rc;

	*out = NULL;
	*n = 0;
	key(k, sizeof(k), r, task, "failures");
	pthread_mutex_lock(&r->lock);
	rc = run(r, &rep, REDIS_REPLY_ARRAY, err, "LRANGE %s 0 -1", k);
	pthread_mutex_unlock(&r->lock);
	if (rc < 0 || rep->elements == 0) {
		freeReplyObject(rep); /* NULL when rc < 0 */
		return rc;
	}
	if (!(*out = calloc(rep->elements, sizeof(**out)))) {
		freeReplyObject(rep);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < rep->elements; i++)
		if (rep->element[i]->type == REDIS_REPLY_STRING)
			parse_failure(&(*out)[(*n)++], rep->element[i]->str);
	freeReplyObject(rep);
	return 0;
}

static void redis_close(tb_ledger_t *l)
{
	redis_ledger_t *r = (redis_ledger_t *)l;

	redisFree(r->c);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

static const struct tb_ledger_ops redis_ops = {
	redis_begin, redis_failed, redis_done, redis_history, redis_close,
};

int tb_ledger_redis_open(tb_ledger_t **out, const char *url, const char *prefix, const char *worker,
			 tb_error_t *err)
{
	redis_ledger_t *r;
	char tail[16] = "";
	int used = 0;

	*out = NULL;
	if (!(r = calloc(1, sizeof(*r))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	if (sscanf(url, "redis://%255[^:/]:%d%n", r->host, &r->port, &used) != 2 || r->port <= 0 ||
	    r->port > 65535 ||
	    (url[used] && (sscanf(url + used, "/%d%15s", &r->db, tail) != 1 || r->db < 0))) {
		free(r);
		return tb_error_set(err, TB_EINVAL,
				    "ledger.url '%s': expected redis://host:port or "
				    "redis://host:port/db",
				    url);
	}
	if (!prefix[0] || strlen(prefix) >= sizeof(r->prefix) || strpbrk(prefix, " {}\t\n")) {
		free(r);
		return tb_error_set(err, TB_EINVAL,
				    "ledger.prefix '%s': 1 to %zu characters, no spaces or braces",
				    prefix, sizeof(r->prefix) - 1);
	}
	snprintf(r->prefix, sizeof(r->prefix), "%s", prefix);
	snprintf(r->worker, sizeof(r->worker), "%s", worker[0] ? worker : "unnamed");
	r->base.ops = &redis_ops;
	pthread_mutex_init(&r->lock, NULL);
	*out = &r->base;
	return 0;
}
