/*
 * ledger_redis.c: the ledger on Redis (hiredis), shared by every worker of
 * a fleet and surviving their crashes. Keys, all under the configured
 * prefix, with the task id in braces so one task's keys share a cluster
 * slot (schemas/keys.md):
 *
 *   <prefix>:task:{<id>}:attempts   counter, INCR'd by begin: the fencing token
 *   <prefix>:task:{<id>}:lease      "<attempt> <worker>", PX the lease time
 *   <prefix>:task:{<id>}:done       "<attempt> <manifest key>", set once
 *                                   (a dead letter's, "<attempt> ", revivable)
 *   <prefix>:task:{<id>}:base       attempts before the last revive
 *   <prefix>:task:{<id>}:failures   list of "<attempt>\t<ms>\t<worker>\t<code>\t<reason>"
 *   <prefix>:worker:{<id>}          the worker's liveness JSON, PX its TTL
 *   <prefix>:workers                sorted set: worker id by last heartbeat (ms)
 *   <prefix>:rate:{<bucket>}        a credential's rate bucket (hash)
 *   <prefix>:rate:{<bucket>}:workers  sorted set: who drew from it, by time
 *   <prefix>:pin:{<name>}           a pin's value, set once (NX), PX its time
 *
 * Each operation that reads and writes is one Lua script, so it is atomic:
 * two workers never see the same attempt number, and a fenced attempt
 * (attempts moved past it) can neither renew nor finish. One connection
 * (two: the rate buckets have their own), each guarded by a mutex (hiredis contexts are not thread-safe); a broken
 * connection is dropped and redialled on the next call, at most once a
 * second, and every failure to reach Redis is TB_ERETRY: the worker waits,
 * it does not dead-letter.
 *
 * Durability is Redis's: run it with the append-only file (appendonly yes,
 * appendfsync always or everysec), or a restart forgets attempts and
 * done-markers and finished tasks run again (deploy/local/services does).
 * The rate buckets are asked on a connection of their own (RATE_TIMEOUT_MS).
 */
#include "tb/ledger.h"
#include "tb/sys/ledger.h"

#include "tb/clock.h"

#include "tb/codec.h"
#include "tb/log.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ANY (-1)

/* One connection, guarded by its mutex (hiredis contexts are not
 * thread-safe). */
typedef struct conn {
	pthread_mutex_t lock;
	redisContext *c;
	struct timeval connect, timeout; /* to connect; for each reply */
	uint64_t redial_at;              /* monotonic ms: no dialling before this */
	char down[256];                  /* why the last dial failed */
	unsigned owed;                   /* replies to commands sent without waiting */
	int replicas;                    /* the master's replicas, last looked at ... */
	uint64_t replicas_at;            /* ... then (monotonic ms; 0: look) */
	char host[256];                  /* the master it talks to (the sentinels' */
	int port;                        /* answer, at each dial, in that form) */
} conn_t;

#define SENTINELS_MAX 8

typedef struct sentinel {
	char host[256];
	int port;
} sentinel_t;

typedef struct redis_ledger {
	tb_ledger_t base;
	conn_t main; /* tasks, leases, workers */
	/* under main's lock: renewals neither wait for a replica nor count
	 * till then (one lagged: redis_renew) */
	uint64_t renew_lag_until;
	conn_t rates;                        /* the rate buckets: asked from the egress proxies'
		       * threads on every request, with a short timeout, so
		       * a slow Redis costs a request little and a lease nothing */
	sentinel_t sentinels[SENTINELS_MAX]; /* redis-sentinel://: who names the master */
	int nsentinels;
	char master[128]; /* ... by this name */
	int db;
	char prefix[64];
	char worker[128];
} redis_ledger_t;

#define REDIAL_MS 1000
#define RATE_TIMEOUT_MS 250

/* KEYS attempts, done, lease, content, failures, progress, base; ARGV
 * worker, lease ms, content ("" unchecked), now (ms), failures kept.
 * {n} the attempt, {-1} done, {-2, lease, pttl} held by another worker,
 * {-3, content} the id stands for other content. The attempt before, if
 * it left no failure and was not revived past, ended without a word (its
 * worker died): kept as a failure "died", with the phase it last said. */
static const char BEGIN_LUA[] =
    "if ARGV[3] ~= '' then "
    "  local c = redis.call('GET', KEYS[4]) "
    "  if not c then redis.call('SET', KEYS[4], ARGV[3]) "
    "  elseif c ~= ARGV[3] then return {-3, c} end "
    "end "
    "if redis.call('EXISTS', KEYS[2]) == 1 then return {-1} end "
    "local cur = redis.call('GET', KEYS[3]) "
    "if cur and string.sub(cur, (string.find(cur, ' ', 1, true) or 0) + 1) ~= ARGV[1] then "
    "  return {-2, cur, redis.call('PTTL', KEYS[3])} end "
    "local prev = tonumber(redis.call('GET', KEYS[1]) or '0') "
    "if prev > tonumber(redis.call('GET', KEYS[7]) or '0') then "
    "  local tag, seen = prev .. '\\t', false "
    "  for _, e in ipairs(redis.call('LRANGE', KEYS[5], 0, -1)) do "
    "    if string.sub(e, 1, #tag) == tag then seen = true break end end "
    "  if not seen then "
    "    local who, why = '?', 'its worker died before it reported a phase' "
    "    local a, w, ph = string.match(redis.call('GET', KEYS[6]) or '', "
    "'^(%d+) (%S+) (%S+)$') "
    "    if a and tonumber(a) == prev then who, why = w, 'its worker died in phase ' .. ph end "
    "    if not (a and tonumber(a) == prev and ph == 'released') then "
    "      redis.call('RPUSH', KEYS[5], tag .. ARGV[4] .. '\\t' .. who .. '\\tdied\\t' .. why) "
    "      redis.call('LTRIM', KEYS[5], -tonumber(ARGV[5]), -1) end end end "
    "local n = redis.call('INCR', KEYS[1]) "
    "redis.call('SET', KEYS[3], n .. ' ' .. ARGV[1], 'PX', ARGV[2]) "
    "return {n}";
/* KEYS attempts, lease; ARGV attempt, worker, lease ms. 1, or 0 fenced. */
static const char RENEW_LUA[] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
    "redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3]) "
    "if ARGV[4] ~= '' then "
    "  redis.call('SET', KEYS[3], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[4]) end "
    "return 1";
/* KEYS attempts, progress; ARGV attempt, worker, phase. 1, or 0 fenced. */
static const char NOTE_LUA[] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
    "redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3]) "
    "return 1";
/* KEYS attempts, lease, progress; ARGV attempt, worker. Let go of, it
 * is no death (BEGIN_LUA). */
static const char RELEASE_LUA[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[2]) "
    "  redis.call('SET', KEYS[3], ARGV[1] .. ' ' .. ARGV[2] .. ' released') end "
    "return 1";
/* KEYS attempts, done, lease; ARGV attempt, manifest key. 1, or 0 fenced. */
static const char DONE_LUA[] = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
			       "redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[2], 'NX') "
			       "redis.call('DEL', KEYS[3]) "
			       "return 1";
/* KEYS attempts, lease, done, base. {attempts, lease, pttl, done, base},
 * false (nil) for what is missing. */
static const char INSPECT_LUA[] =
    "return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]), "
    "redis.call('PTTL', KEYS[2]), redis.call('GET', KEYS[3]), redis.call('GET', KEYS[4])}";
/* KEYS attempts, done, base. 1 revived, 0 not dead-lettered, -1 done
 * with a record. A dead letter's marker is "<attempt> " (no manifest). */
static const char REVIVE_LUA[] = "local d = redis.call('GET', KEYS[2]) "
				 "if not d then return 0 end "
				 "if not string.match(d, '^%d+ $') then return -1 end "
				 "redis.call('DEL', KEYS[2]) "
				 "redis.call('SET', KEYS[3], redis.call('GET', KEYS[1]) or '0') "
				 "return 1";
/* KEYS worker, workers; ARGV info, ttl ms, id, now ms. Forgets workers
 * silent for a day. */
static const char ALIVE_LUA[] =
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
    "redis.call('ZADD', KEYS[2], ARGV[4], ARGV[3]) "
    "return redis.call('ZREMRANGEBYSCORE', KEYS[2], 0, tonumber(ARGV[4]) - 86400000)";
/* Appends a failure and keeps the newest ARGV[2]: one round trip. */
static const char FAILED_LUA[] = "redis.call('RPUSH', KEYS[1], ARGV[1]) "
				 "return redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)";

/* The rate buckets (schemas/keys.md, "rate buckets"); times are Redis's
 * own (TIME), in ms. A bucket's fields: next, when the next request's
 * turn is (one per interval, in a row); tokens, when the tokens spent are
 * paid back (at tokens_per_minute; no request goes while it is ahead of
 * now, so a minute's worth may be spent at once); pause, until when the
 * provider asked everyone to wait.
 * KEYS bucket, its workers; ARGV interval ms, tokens per minute, max wait
 * ms, worker. {1, wait, sharing}: a turn, after wait ms; {0, wait,
 * sharing}: none; ask again after wait ms. */
static const char RATE_TAKE_LUA[] =
    "local t = redis.call('TIME') "
    "local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000 "
    "redis.call('ZADD', KEYS[2], now, ARGV[4]) "
    "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 10000) "
    "redis.call('PEXPIRE', KEYS[2], 60000) "
    "local n = redis.call('ZCARD', KEYS[2]) "
    "local h = redis.call('HMGET', KEYS[1], 'next', 'pause', 'tokens') "
    "local nxt, pause, tok = tonumber(h[1]) or 0, tonumber(h[2]) or 0, tonumber(h[3]) or 0 "
    "local iv, tpm, maxw = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]) "
    "if pause > now then return {0, math.ceil(pause - now), n} end "
    "if tpm > 0 and tok > now then return {0, math.ceil(tok - now), n} end "
    "if iv <= 0 then return {1, 0, n} end "
    "local at = math.max(nxt, now) "
    "if at - now > maxw then return {0, math.ceil(at - now), n} end "
    "redis.call('HSET', KEYS[1], 'next', string.format('%.3f', at + iv)) "
    "redis.call('PEXPIRE', KEYS[1], 3600000) "
    "return {1, math.ceil(at - now), n}";
/* KEYS bucket; ARGV tokens spent, tokens per minute, pause ms. */
static const char RATE_SPEND_LUA[] =
    "local t = redis.call('TIME') "
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
    "local tokens, tpm, pause = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]) "
    "if pause > 0 then "
    "  local p = tonumber(redis.call('HGET', KEYS[1], 'pause')) or 0 "
    "  if now + pause > p then "
    "    redis.call('HSET', KEYS[1], 'pause', string.format('%.0f', now + pause)) end "
    "end "
    "if tokens > 0 and tpm > 0 then "
    "  local tok = tonumber(redis.call('HGET', KEYS[1], 'tokens')) or 0 "
    "  tok = math.max(tok, now - 60000) + tokens * 60000 / tpm "
    "  redis.call('HSET', KEYS[1], 'tokens', string.format('%.3f', tok)) "
    "end "
    "redis.call('PEXPIRE', KEYS[1], 3600000) "
    "return 0";

static void key(char *out, size_t size, const redis_ledger_t *r, const char *task, const char *what)
{
	snprintf(out, size, "%s:task:{%s}:%s", r->prefix, task, what);
}

/* A task's keys, as the scripts take them. */
typedef struct task_keys {
	char att[512], lease[512], done[512], base[512], content[512], failures[512];
	char progress[512];
} task_keys_t;

static void task_keys(task_keys_t *k, const redis_ledger_t *r, const char *task)
{
	key(k->att, sizeof(k->att), r, task, "attempts");
	key(k->lease, sizeof(k->lease), r, task, "lease");
	key(k->done, sizeof(k->done), r, task, "done");
	key(k->base, sizeof(k->base), r, task, "base");
	key(k->content, sizeof(k->content), r, task, "content");
	key(k->failures, sizeof(k->failures), r, task, "failures");
	key(k->progress, sizeof(k->progress), r, task, "progress");
}

#define SENTINEL_TIMEOUT_MS 500 /* to connect to a sentinel, and for its answer */

/* The master the sentinels name now, into k->host and k->port: the
 * first sentinel that answers is asked, each within SENTINEL_TIMEOUT_MS
 * (or k's own timeout, when shorter), so that sentinels on a failed host
 * hold k's lock (and the leases renewed under it) little. Caller holds
 * k's lock. */
static int master_of(redis_ledger_t *r, conn_t *k, tb_error_t *err)
{
	char why[256] = "none answered";
	struct timeval quick = { 0, SENTINEL_TIMEOUT_MS * 1000 };

	if (k->timeout.tv_sec == 0 && k->timeout.tv_usec < quick.tv_usec)
		quick = k->timeout;

	for (int i = 0; i < r->nsentinels; i++) {
		const sentinel_t *st = &r->sentinels[i];
		redisContext *c = redisConnectWithTimeout(st->host, st->port, quick);
		redisReply *rep = NULL;
		if (c && !c->err) {
			redisSetTimeout(c, quick);
			rep = redisCommand(c, "SENTINEL get-master-addr-by-name %s", r->master);
		}
		int ok = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
			 rep->element[0]->type == REDIS_REPLY_STRING &&
			 rep->element[1]->type == REDIS_REPLY_STRING;
		if (ok) {
			snprintf(k->host, sizeof(k->host), "%s", rep->element[0]->str);
			k->port = (int)strtol(rep->element[1]->str, NULL, 10);
		} else {
			snprintf(why, sizeof(why), "%s:%d: %s", st->host, st->port,
				 !c || c->err ? (c ? c->errstr : "out of memory")
				 : rep && rep->type == REDIS_REPLY_ERROR
				     ? rep->str
				     : "it knows no such master");
		}
		freeReplyObject(rep);
		redisFree(c);
		if (ok)
			return 0;
	}
	return tb_error_set(err, TB_ERETRY, "ledger: no sentinel names master '%s' (%s)", r->master,
			    why);
}

/* Whether the server on @p c says it is a master (the sentinels' answer
 * may lag a failover by a moment). */
static int is_master(redisContext *c)
{
	redisReply *rep = redisCommand(c, "ROLE");
	int yes = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
		  rep->element[0]->type == REDIS_REPLY_STRING &&
		  !strcmp(rep->element[0]->str, "master");
	freeReplyObject(rep);
	return yes;
}

/* Connected, or TB_ERETRY naming the address. A failed dial is not tried
 * again for REDIAL_MS: a worker with many leases to renew does not wait a
 * connect timeout for each. Caller holds the connection's lock. */
static int dial(redis_ledger_t *r, conn_t *k, tb_error_t *err)
{
	if (k->c)
		return 0;
	if (tb_mono_ms() < k->redial_at)
		return tb_error_set(err, TB_ERETRY, "ledger redis://%s:%d unreachable: %s", k->host,
				    k->port, k->down);
	k->owed = 0;
	if (r->nsentinels && master_of(r, k, err) < 0) {
		snprintf(k->down, sizeof(k->down), "%.250s", err->msg);
		k->redial_at = tb_mono_ms() + REDIAL_MS;
		return err->code;
	}
	k->c = redisConnectWithTimeout(k->host, k->port, k->connect);
	if (!k->c || k->c->err) {
		snprintf(k->down, sizeof(k->down), "%s", k->c ? k->c->errstr : "out of memory");
		k->redial_at = tb_mono_ms() + REDIAL_MS;
		redisFree(k->c);
		k->c = NULL;
		return tb_error_set(err, TB_ERETRY, "ledger redis://%s:%d unreachable: %s", k->host,
				    k->port, k->down);
	}
	redisSetTimeout(k->c, k->timeout);
	k->replicas_at = 0; /* perhaps another master: look again */
	if (r->nsentinels && !is_master(k->c)) {
		snprintf(k->down, sizeof(k->down), "%.200s:%d is not the master (yet)", k->host,
			 k->port);
		k->redial_at = tb_mono_ms() + REDIAL_MS;
		redisFree(k->c);
		k->c = NULL;
		return tb_error_set(err, TB_ERETRY, "ledger redis://%s:%d: %s", k->host, k->port,
				    k->down);
	}
	if (r->db) {
		redisReply *rep = redisCommand(k->c, "SELECT %d", r->db);
		int bad = !rep || rep->type == REDIS_REPLY_ERROR;
		freeReplyObject(rep);
		if (bad) {
			redisFree(k->c);
			k->c = NULL;
			return tb_error_set(err, TB_ERETRY,
					    "ledger redis://%s:%d: SELECT %d failed", k->host,
					    k->port, r->db);
		}
	}
	return 0;
}

/* Drops a broken connection (the next call redials); TB_ERETRY saying why. */
static int broken(conn_t *k, tb_error_t *err)
{
	int rc = tb_error_set(err, TB_ERETRY, "ledger redis://%s:%d: %s", k->host, k->port,
			      k->c->errstr[0] ? k->c->errstr : "no reply");
	redisFree(k->c);
	k->c = NULL;
	return rc;
}

/* Reads the replies owed to commands sent without waiting (a phase's
 * note, a rate spend): an error among them is logged, as its caller
 * would have; a master demoted by a failover (READONLY) drops the
 * connection, as run() does, so the next command finds the new one. */
static int settle_owed(conn_t *k, tb_error_t *err)
{
	while (k->owed) {
		redisReply *rep = NULL;
		if (redisGetReply(k->c, (void **)&rep) != REDIS_OK || !rep)
			return broken(k, err);
		k->owed--;
		int demoted = rep->type == REDIS_REPLY_ERROR && !strncmp(rep->str, "READONLY", 8);
		if (rep->type == REDIS_REPLY_ERROR)
			tb_info(NULL,
				"ledger redis://%s:%d: a command sent unawaited failed: %.200s",
				k->host, k->port, rep->str);
		freeReplyObject(rep);
		if (demoted) {
			redisFree(k->c);
			k->c = NULL;
			return tb_error_set(err, TB_ERETRY,
					    "ledger redis://%s:%d: no longer the master", k->host,
					    k->port);
		}
	}
	return 0;
}

/* Connected, with no reply owed. A connection that broke, or stopped
 * being the master, under an owed reply is dialled again once: the
 * command about to go was never sent, so sending it on the new one is
 * safe (else a note's lost connection would fail the done-marker after
 * it). Caller holds the connection's lock. */
static int ready(redis_ledger_t *r, conn_t *k, tb_error_t *err)
{
	int rc;

	if ((rc = dial(r, k, err)) < 0)
		return rc;
	if (settle_owed(k, err) == 0)
		return 0;
	return (rc = dial(r, k, err)) < 0 ? rc : settle_owed(k, err);
}

/*
 * Runs one command (printf-style, as redisCommand) on @p k and checks its
 * reply's type (@p want, or ANY for any but an error). A lost connection
 * is dropped so the next call redials.
 */
static int run(redis_ledger_t *r, conn_t *k, redisReply **out, int want, tb_error_t *err,
	       const char *fmt, ...)
{
	va_list ap;
	redisReply *rep;
	int rc;

	*out = NULL;
	if ((rc = ready(r, k, err)) < 0)
		return rc;
	va_start(ap, fmt);
	rep = redisvCommand(k->c, fmt, ap);
	va_end(ap);
	if (!rep)
		return broken(k, err);
	if (rep->type == REDIS_REPLY_ERROR || (want >= 0 && rep->type != want)) {
		rc = tb_error_set(err, rep->type == REDIS_REPLY_ERROR ? TB_ERETRY : TB_EIO,
				  "ledger redis://%s:%d: unexpected reply: %s", k->host, k->port,
				  rep->type == REDIS_REPLY_ERROR ? rep->str : "wrong type");
		/* a master demoted by a failover: the next call finds the new one */
		if (rep->type == REDIS_REPLY_ERROR && !strncmp(rep->str, "READONLY", 8)) {
			redisFree(k->c);
			k->c = NULL;
		}
		freeReplyObject(rep);
		return rc;
	}
	*out = rep;
	return 0;
}

#define REPLICA_WAIT_MS 2000   /* a safety write's wait for a replica */
#define RENEW_WAIT_MIN_MS 50   /* a renewal's, at least (else a thirtieth of the lease) */
#define REPLICAS_LOOK_MS 10000 /* how long a look at the replicas stands */

static int renew_wait_ms(uint64_t lease_ms)
{
	uint64_t ms = lease_ms / 30;
	return ms < RENEW_WAIT_MIN_MS ? RENEW_WAIT_MIN_MS
	       : ms > REPLICA_WAIT_MS ? REPLICA_WAIT_MS
				      : (int)ms;
}

/*
 * A write the safety of a task rests on (an attempt begun or taken over,
 * a done-marker) is acknowledged by a replica, when the master has any
 * (WAIT 1): a failover to that replica cannot then hand the attempt
 * number out again or forget that the task is done. A master without
 * replicas is the whole ledger: nothing to wait for. Under the main
 * connection's lock. @return 0; TB_ERETRY when no replica acknowledged
 * it in time (the write stands on the master; doing it again is safe)
 */
static int replicated_within(redis_ledger_t *r, int wait_ms, tb_error_t *err)
{
	conn_t *k = &r->main;
	redisReply *rep;
	uint64_t now = tb_mono_ms();
	int rc;

	if (!k->replicas_at || now - k->replicas_at >= REPLICAS_LOOK_MS) {
		if ((rc = run(r, k, &rep, REDIS_REPLY_STRING, err, "INFO replication")) < 0)
			return rc;
		const char *at = strstr(rep->str, "connected_slaves:");
		k->replicas = at ? (int)strtol(at + 17, NULL, 10) : 0;
		k->replicas_at = now;
		freeReplyObject(rep);
	}
	if (!k->replicas)
		return 0;
	if ((rc = run(r, k, &rep, REDIS_REPLY_INTEGER, err, "WAIT 1 %d", wait_ms)) < 0)
		return rc;
	long long acked = rep->integer;
	freeReplyObject(rep);
	if (acked >= 1)
		return 0;
	k->replicas_at = 0; /* look again next time: it may be gone */
	return tb_error_set(err, TB_ERETRY,
			    "ledger redis://%s:%d: no replica acknowledged the write within %d ms "
			    "(%d connected), so a failover could lose it: not counted yet",
			    k->host, k->port, wait_ms, k->replicas);
}

static int replicated(redis_ledger_t *r, tb_error_t *err)
{
	return replicated_within(r, REPLICA_WAIT_MS, err);
}

/* An attempt begun that no replica acknowledged: it never runs. Kept as
 * a failure that spends no attempt ("busy", as a session that moved),
 * so the next begin neither counts it nor takes it for a dead worker's.
 * Best effort, under the main lock: without it, the next begin says the
 * attempt's worker died, which its budget of deaths allows for. */
static void unconfirmed(redis_ledger_t *r, const task_keys_t *k, uint64_t attempt)
{
	redisReply *rep;
	char entry[300];
	tb_error_t e;

	snprintf(entry, sizeof(entry),
		 "%" PRIu64 "\t%" PRIu64
		 "\t%s\t%s\tno replica acknowledged its begin: it never ran",
		 attempt, tb_wall_ms(), r->worker, tb_error_name(TB_EBUSY));
	if (run(r, &r->main, &rep, ANY, &e, "EVAL %s 1 %s %s %d", FAILED_LUA, k->failures, entry,
		TB_LEDGER_MAX_FAILURES) == 0)
		freeReplyObject(rep);
}

static int redis_begin(tb_ledger_t *l, const char *task, const char *content, uint64_t lease_ms,
		       uint64_t *attempt, tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	task_keys_t k;
	redisReply *rep;
	int rc;

	task_keys(&k, r, task);
	pthread_mutex_lock(&r->main.lock);
	rc = run(r, &r->main, &rep, REDIS_REPLY_ARRAY, err,
		 "EVAL %s 7 %s %s %s %s %s %s %s %s %llu %s %llu %d", BEGIN_LUA, k.att, k.done,
		 k.lease, k.content, k.failures, k.progress, k.base, r->worker,
		 (unsigned long long)lease_ms, content ? content : "",
		 (unsigned long long)tb_wall_ms(), TB_LEDGER_MAX_FAILURES);
	/* an attempt begun (its number handed out, the lease taken over) */
	if (rc == 0 && rep->elements >= 1 && rep->element[0]->type == REDIS_REPLY_INTEGER &&
	    rep->element[0]->integer > 0 && (rc = replicated(r, err)) < 0) {
		unconfirmed(r, &k, (uint64_t)rep->element[0]->integer);
		freeReplyObject(rep);
	}
	pthread_mutex_unlock(&r->main.lock);
	if (rc < 0)
		return rc;
	if (rep->elements < 1 || rep->element[0]->type != REDIS_REPLY_INTEGER) {
		freeReplyObject(rep);
		return tb_error_set(err, TB_EIO, "ledger: begin: unexpected reply");
	}
	long long n = rep->element[0]->integer;
	if (n == -3 && rep->elements == 2 && rep->element[1]->type == REDIS_REPLY_STRING)
		rc = tb_error_set(err, TB_ECONFLICT,
				  "task id %s already names another task (%.80s; this one is %s)",
				  task, rep->element[1]->str, content);
	else if (n == -1)
		rc = tb_error_set(err, TB_EEXIST, "task %s is done", task);
	else if (n == -2 && rep->elements == 3 && rep->element[1]->type == REDIS_REPLY_STRING)
		rc = tb_error_set(
		    err, TB_EBUSY, "task %s: lease '%s' held for %lld ms more", task,
		    rep->element[1]->str,
		    rep->element[2]->type == REDIS_REPLY_INTEGER ? rep->element[2]->integer : -1);
	else if (n <= 0)
		rc = tb_error_set(err, TB_EIO, "ledger: begin: unexpected reply");
	else
		*attempt = (uint64_t)n;
	freeReplyObject(rep);
	return rc;
}

/* A fencing script's answer (@p rc, @p rep from run): 1 done, 0 fenced. */
static int fencing(int rc, redisReply *rep, const char *task, uint64_t attempt, const char *op,
		   tb_error_t *err)
{
	if (rc == 0 && rep->integer == 0)
		rc = tb_error_set(err, TB_EFENCED,
				  "task %s: attempt %" PRIu64 " was fenced out by a newer one (%s)",
				  task, attempt, op);
	freeReplyObject(rep);
	return rc;
}

static int redis_renew(tb_ledger_t *l, const char *task, uint64_t attempt, uint64_t lease_ms,
		       const char *phase, tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	task_keys_t k;
	redisReply *rep;
	int rc;

	task_keys(&k, r, task);
	pthread_mutex_lock(&r->main.lock);
	rc = run(r, &r->main, &rep, REDIS_REPLY_INTEGER, err, "EVAL %s 3 %s %s %s %llu %s %llu %s",
		 RENEW_LUA, k.att, k.lease, k.progress, (unsigned long long)attempt, r->worker,
		 (unsigned long long)lease_ms, phase ? phase : "");
	rc = fencing(rc, rep, task, attempt, "renew", err);
	/* A renewal counts once a replica has it, as a begin does: the
	 * holder stops its attempt two thirds of a lease after its last
	 * renewal that counted, and a failover to a replica that missed the
	 * latest ones would otherwise let the lease lapse up to a beat
	 * before that, with the attempt still running as another worker
	 * begins (seen in test_fleet: runs overlapping by 100-300 ms). A
	 * short wait, and one at most per beat: the heartbeat renews every
	 * running attempt in turn on the worker's loop, so once a replica
	 * has failed to answer in time the renewals of the next third of a
	 * lease do not wait for it (nor count). A replica that lags keeps
	 * renewals from counting, and the attempts are stopped in time if
	 * it goes on lagging, as begins wait while it does. */
	uint64_t now = tb_mono_ms();
	if (rc == 0 && now < r->renew_lag_until)
		rc = tb_error_set(err, TB_ERETRY,
				  "ledger redis://%s:%d: a replica did not acknowledge a renewal "
				  "%llu ms ago: renewals do not count until it does",
				  r->main.host, r->main.port,
				  (unsigned long long)(now + lease_ms / 3 - r->renew_lag_until));
	else if (rc == 0 && (rc = replicated_within(r, renew_wait_ms(lease_ms), err)) == TB_ERETRY)
		r->renew_lag_until = tb_mono_ms() + lease_ms / 3;
	pthread_mutex_unlock(&r->main.lock);
	return rc;
}

static int redis_release(tb_ledger_t *l, const char *task, uint64_t attempt, tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	task_keys_t k;
	redisReply *rep;
	int rc;

	task_keys(&k, r, task);
	pthread_mutex_lock(&r->main.lock);
	rc = run(r, &r->main, &rep, ANY, err, "EVAL %s 3 %s %s %s %llu %s", RELEASE_LUA, k.att,
		 k.lease, k.progress, (unsigned long long)attempt, r->worker);
	pthread_mutex_unlock(&r->main.lock);
	freeReplyObject(rep);
	return rc;
}

static int redis_failed(tb_ledger_t *l, const char *task, uint64_t attempt, int code,
			const char *reason, tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	char k[512], entry[1024];
	redisReply *rep;
	int rc;

	key(k, sizeof(k), r, task, "failures");
	snprintf(entry, sizeof(entry), "%" PRIu64 "\t%" PRIu64 "\t%s\t%s\t%s", attempt,
		 tb_wall_ms(), r->worker, tb_error_name(code), reason);
	tb_utf8_trim(entry);
	pthread_mutex_lock(&r->main.lock);
	rc = run(r, &r->main, &rep, ANY, err, "EVAL %s 1 %s %s %d", FAILED_LUA, k, entry,
		 TB_LEDGER_MAX_FAILURES);
	freeReplyObject(rep);
	pthread_mutex_unlock(&r->main.lock);
	return rc;
}

static int redis_done(tb_ledger_t *l, const char *task, uint64_t attempt, const char *manifest_key,
		      tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	task_keys_t k;
	redisReply *rep;
	int rc;

	task_keys(&k, r, task);
	pthread_mutex_lock(&r->main.lock);
	/* NX: the first done-marker stands (a dead letter's, then a late
	 * success, changes nothing), and the task is done either way. */
	rc = run(r, &r->main, &rep, REDIS_REPLY_INTEGER, err, "EVAL %s 3 %s %s %s %llu %s",
		 DONE_LUA, k.att, k.done, k.lease, (unsigned long long)attempt, manifest_key);
	if (rc == 0 && rep->integer == 1 && (rc = replicated(r, err)) < 0) {
		freeReplyObject(rep);
		rep = NULL;
	}
	pthread_mutex_unlock(&r->main.lock);
	return fencing(rc, rep, task, attempt, "done", err);
}

/* "<attempt>\t<ms>\t<worker>\t<code>\t<reason>" into @p a; the reason may
 * hold tabs. An entry not in this shape is kept whole as the reason. */
static void parse_failure(tb_ledger_attempt_t *a, const char *s)
{
	unsigned long long att, ts;
	int off = 0;

	memset(a, 0, sizeof(*a));
	if (sscanf(s, "%llu\t%llu\t%n", &att, &ts, &off) == 2 && off > 0) {
		const char *w = s + off, *tab1 = strchr(w, '\t');
		const char *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
		if (tab2) {
			a->attempt = att;
			a->ts = ts;
			snprintf(a->worker, sizeof(a->worker), "%.*s", (int)(tab1 - w), w);
			snprintf(a->code, sizeof(a->code), "%.*s", (int)(tab2 - tab1 - 1),
				 tab1 + 1);
			s = tab2 + 1;
		}
	}
	snprintf(a->reason, sizeof(a->reason), "%s", s);
	tb_utf8_trim(a->worker);
	tb_utf8_trim(a->reason);
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
	pthread_mutex_lock(&r->main.lock);
	rc = run(r, &r->main, &rep, REDIS_REPLY_ARRAY, err, "LRANGE %s 0 -1", k);
	pthread_mutex_unlock(&r->main.lock);
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

static int redis_inspect(tb_ledger_t *l, const char *task, tb_ledger_task_t *out, tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	task_keys_t k;
	redisReply *rep;
	int rc;

	memset(out, 0, sizeof(*out));
	task_keys(&k, r, task);
	pthread_mutex_lock(&r->main.lock);
	rc = run(r, &r->main, &rep, REDIS_REPLY_ARRAY, err, "EVAL %s 4 %s %s %s %s", INSPECT_LUA,
		 k.att, k.lease, k.done, k.base);
	pthread_mutex_unlock(&r->main.lock);
	if (rc < 0)
		return rc;
	/* A missing key's false arrives as a nil element. */
	redisReply **e = rep->element;
	size_t n = rep->elements;
	if (n > 0 && e[0]->type == REDIS_REPLY_STRING)
		out->attempts = strtoull(e[0]->str, NULL, 10);
	if (n > 1 && e[1]->type == REDIS_REPLY_STRING)
		snprintf(out->lease, sizeof(out->lease), "%s", e[1]->str);
	if (n > 2 && e[2]->type == REDIS_REPLY_INTEGER && e[2]->integer > 0)
		out->lease_left = (uint64_t)e[2]->integer;
	if (n > 3 && e[3]->type == REDIS_REPLY_STRING) {
		int off = 0;
		unsigned long long att = 0;
		out->done = 1;
		if (sscanf(e[3]->str, "%llu %n", &att, &off) >= 1) {
			out->done_attempt = att;
			snprintf(out->manifest, sizeof(out->manifest), "%s", e[3]->str + off);
		}
	}
	if (n > 4 && e[4]->type == REDIS_REPLY_STRING)
		out->base = strtoull(e[4]->str, NULL, 10);
	freeReplyObject(rep);
	return 0;
}

static int redis_revive(tb_ledger_t *l, const char *task, tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	task_keys_t k;
	redisReply *rep;
	int rc;

	task_keys(&k, r, task);
	pthread_mutex_lock(&r->main.lock);
	rc = run(r, &r->main, &rep, REDIS_REPLY_INTEGER, err, "EVAL %s 3 %s %s %s", REVIVE_LUA,
		 k.att, k.done, k.base);
	pthread_mutex_unlock(&r->main.lock);
	if (rc < 0)
		return rc;
	long long v = rep->integer;
	freeReplyObject(rep);
	if (v == 0)
		return tb_error_set(err, TB_ENOTFOUND, "task %s is not dead-lettered", task);
	if (v < 0)
		return tb_error_set(err, TB_EEXIST, "task %s is done with a record", task);
	return 0;
}

static int redis_alive(tb_ledger_t *l, const char *info, uint64_t ttl_ms, tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	char k_worker[512], k_workers[128];
	redisReply *rep;
	int rc;

	snprintf(k_worker, sizeof(k_worker), "%s:worker:{%s}", r->prefix, r->worker);
	snprintf(k_workers, sizeof(k_workers), "%s:workers", r->prefix);
	pthread_mutex_lock(&r->main.lock);
	rc = run(r, &r->main, &rep, ANY, err, "EVAL %s 2 %s %s %s %llu %s %llu", ALIVE_LUA,
		 k_worker, k_workers, info, (unsigned long long)ttl_ms, r->worker,
		 (unsigned long long)tb_wall_ms());
	pthread_mutex_unlock(&r->main.lock);
	freeReplyObject(rep);
	return rc;
}

/* Each worker's info key, for the ids in @p ids, asked at once (one round
 * trip, each key its own command: no script reads a key it was not
 * given). The replies, in order, into @p out (@p ids->elements of them).
 * Under the connection's lock. */
static int worker_infos(redis_ledger_t *r, const redisReply *ids, redisReply **out, tb_error_t *err)
{
	conn_t *k = &r->main;

	for (size_t i = 0; i < ids->elements; i++)
		if (ids->element[i]->type != REDIS_REPLY_STRING ||
		    redisAppendCommand(k->c, "GET %s:worker:{%s}", r->prefix,
				       ids->element[i]->str) != REDIS_OK)
			return broken(k, err);
	for (size_t i = 0; i < ids->elements; i++)
		if (redisGetReply(k->c, (void **)&out[i]) != REDIS_OK) {
			for (size_t d = 0; d < i; d++)
				freeReplyObject(out[d]);
			return broken(k, err);
		}
	return 0;
}

static int redis_workers(tb_ledger_t *l, char ***infos, size_t *n, tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	char k_workers[128];
	redisReply *ids, **vals = NULL;
	int rc, have = 0;

	*infos = NULL;
	*n = 0;
	snprintf(k_workers, sizeof(k_workers), "%s:workers", r->prefix);
	pthread_mutex_lock(&r->main.lock);
	rc = run(r, &r->main, &ids, REDIS_REPLY_ARRAY, err, "ZRANGE %s 0 -1", k_workers);
	if (rc == 0 && ids->elements &&
	    (!(vals = calloc(ids->elements, sizeof(*vals))) ||
	     !(*infos = calloc(ids->elements, sizeof(char *)))))
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
	else if (rc == 0 && ids->elements)
		have = (rc = worker_infos(r, ids, vals, err)) == 0;
	pthread_mutex_unlock(&r->main.lock);
	for (size_t i = 0; rc == 0 && i < ids->elements; i++) {
		if (vals[i]->type != REDIS_REPLY_STRING) /* gone since: not alive */
			continue;
		if (!((*infos)[*n] = strdup(vals[i]->str)))
			rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		else
			(*n)++;
	}
	for (size_t i = 0; have && i < ids->elements; i++)
		freeReplyObject(vals[i]);
	if (ids)
		freeReplyObject(ids);
	free(vals);
	if (rc < 0 || !*n) { /* none alive: no list */
		for (size_t i = 0; i < *n; i++)
			free((*infos)[i]);
		free(*infos);
		*infos = NULL;
		*n = 0;
	}
	return rc;
}

static void redis_close(tb_ledger_t *l)
{
	redis_ledger_t *r = (redis_ledger_t *)l;

	redisFree(r->main.c);
	redisFree(r->rates.c);
	pthread_mutex_destroy(&r->main.lock);
	pthread_mutex_destroy(&r->rates.lock);
	free(r);
}

static int redis_next_followup(tb_ledger_t *l, const char *task, uint64_t *seq, tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	redisReply *rep;
	char k[512];
	int rc;

	key(k, sizeof(k), r, task, "followups");
	pthread_mutex_lock(&r->main.lock);
	rc = run(r, &r->main, &rep, REDIS_REPLY_INTEGER, err, "INCR %s", k);
	pthread_mutex_unlock(&r->main.lock);
	if (rc < 0)
		return rc;
	*seq = rep->integer > 0 ? (uint64_t)rep->integer : 0;
	freeReplyObject(rep);
	return 0;
}

/* A bucket's two keys: its state and the workers drawing from it. */
static int rate_keys(const redis_ledger_t *r, const tb_ledger_rate_t *q, char *bucket,
		     char *workers, size_t len, tb_error_t *err)
{
	size_t n = strlen(q->bucket);

	if (n < 1 || n > 64 || strspn(q->bucket, "0123456789abcdefghijklmnopqrstuvwxyz") != n)
		return tb_error_set(err, TB_EINVAL, "rate bucket '%.80s': 1 to 64 of [0-9a-z]",
				    q->bucket);
	snprintf(bucket, len, "%s:rate:{%s}", r->prefix, q->bucket);
	snprintf(workers, len, "%s:rate:{%s}:workers", r->prefix, q->bucket);
	return 0;
}

static uint64_t reply_u64(const redisReply *rep)
{
	return rep->type == REDIS_REPLY_INTEGER && rep->integer > 0 ? (uint64_t)rep->integer : 0;
}

static int redis_rate_take(tb_ledger_t *l, const tb_ledger_rate_t *q, tb_ledger_turn_t *out,
			   tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	char kb[160], kw[160];
	redisReply *rep;
	int rc;

	if ((rc = rate_keys(r, q, kb, kw, sizeof(kb), err)) < 0)
		return rc;
	pthread_mutex_lock(&r->rates.lock);
	rc = run(r, &r->rates, &rep, REDIS_REPLY_ARRAY, err, "EVAL %s 2 %s %s %.3f %llu %llu %s",
		 RATE_TAKE_LUA, kb, kw, q->interval_ms, (unsigned long long)q->tokens_per_minute,
		 (unsigned long long)q->max_wait_ms, r->worker);
	if (rc == 0 && rep->elements != 3) {
		rc = tb_error_set(err, TB_EIO, "ledger redis://%s:%d: a rate turn of %zu values",
				  r->rates.host, r->rates.port, rep->elements);
		freeReplyObject(rep);
	}
	pthread_mutex_unlock(&r->rates.lock);
	if (rc < 0)
		return rc;
	out->taken = reply_u64(rep->element[0]) == 1;
	out->wait_ms = reply_u64(rep->element[1]);
	out->sharing = reply_u64(rep->element[2]);
	freeReplyObject(rep);
	return 0;
}

/*
 * Sends a command on @p k without waiting for its reply, which is read
 * (and dropped) before the connection's next command (settle_owed): the
 * bytes are written before it returns, so the command is on its way.
 * Caller holds the connection's lock.
 */
static int send_unawaited(redis_ledger_t *r, conn_t *k, tb_error_t *err, const char *fmt, ...)
{
	va_list ap;
	int rc, done = 0;

	if ((rc = dial(r, k, err)) == 0 && k->owed >= 64) /* never more than a few */
		rc = ready(r, k, err);
	if (rc < 0)
		return rc;
	va_start(ap, fmt);
	rc = redisvAppendCommand(k->c, fmt, ap) == REDIS_OK ? 0 : broken(k, err);
	va_end(ap);
	while (rc == 0 && !done)
		if (redisBufferWrite(k->c, &done) != REDIS_OK)
			rc = broken(k, err);
	if (rc == 0)
		k->owed++;
	return rc;
}

static int redis_rate_spend(tb_ledger_t *l, const tb_ledger_rate_t *q, uint64_t tokens,
			    uint64_t pause_ms, tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	conn_t *k = &r->rates;
	char kb[160], kw[160];
	int rc;

	if ((rc = rate_keys(r, q, kb, kw, sizeof(kb), err)) < 0)
		return rc;
	pthread_mutex_lock(&k->lock);
	rc = send_unawaited(r, k, err, "EVAL %s 1 %s %llu %llu %llu", RATE_SPEND_LUA, kb,
			    (unsigned long long)tokens, (unsigned long long)q->tokens_per_minute,
			    (unsigned long long)pause_ms);
	pthread_mutex_unlock(&k->lock);
	return rc;
}

/* The phase a slot reached, on the main connection (the renewals' own,
 * so a note is never overtaken by the renewal after it). */
static int redis_note(tb_ledger_t *l, const char *task, uint64_t attempt, const char *phase,
		      tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	task_keys_t k;
	int rc;

	task_keys(&k, r, task);
	pthread_mutex_lock(&r->main.lock);
	rc = send_unawaited(r, &r->main, err, "EVAL %s 2 %s %s %llu %s %s", NOTE_LUA, k.att,
			    k.progress, (unsigned long long)attempt, r->worker, phase);
	pthread_mutex_unlock(&r->main.lock);
	return rc;
}

/* The value of pin @p name into @p out. Under the connection's lock. */
static int pin_get(redis_ledger_t *r, const char *name, char *out, size_t cap, tb_error_t *err)
{
	redisReply *rep;
	int rc = run(r, &r->main, &rep, ANY, err, "GET %s:pin:{%s}", r->prefix, name);

	if (rc == 0 && rep->type == REDIS_REPLY_NIL)
		rc = tb_error_set(err, TB_ENOTFOUND, "no pin %s", name);
	else if (rc == 0 && rep->type != REDIS_REPLY_STRING)
		rc = tb_error_set(err, TB_EIO, "ledger: pin %s is not a string", name);
	else if (rc == 0 && (size_t)rep->len >= cap)
		rc = tb_error_set(err, TB_EIO, "ledger: pin %s is too long", name);
	else if (rc == 0)
		snprintf(out, cap, "%s", rep->str);
	freeReplyObject(rep);
	return rc;
}

static int redis_pin(tb_ledger_t *l, const char *name, const char *value, uint64_t ttl_ms,
		     char *out, size_t cap, tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;
	redisReply *rep;

	pthread_mutex_lock(&r->main.lock);
	int rc = run(r, &r->main, &rep, ANY, err, "SET %s:pin:{%s} %s NX PX %llu", r->prefix, name,
		     value, (unsigned long long)ttl_ms);
	freeReplyObject(rep);
	if (rc == 0) /* ours, or the one set first: set once, never changed */
		rc = pin_get(r, name, out, cap, err);
	pthread_mutex_unlock(&r->main.lock);
	return rc;
}

static int redis_pinned(tb_ledger_t *l, const char *name, char *out, size_t cap, tb_error_t *err)
{
	redis_ledger_t *r = (redis_ledger_t *)l;

	pthread_mutex_lock(&r->main.lock);
	int rc = pin_get(r, name, out, cap, err);
	pthread_mutex_unlock(&r->main.lock);
	return rc;
}

static const struct tb_ledger_ops redis_ops = {
	.begin = redis_begin,
	.renew = redis_renew,
	.note = redis_note,
	.release = redis_release,
	.failed = redis_failed,
	.done = redis_done,
	.history = redis_history,
	.revive = redis_revive,
	.inspect = redis_inspect,
	.alive = redis_alive,
	.workers = redis_workers,
	.next_followup = redis_next_followup,
	.rate_take = redis_rate_take,
	.rate_spend = redis_rate_spend,
	.pin = redis_pin,
	.pinned = redis_pinned,
	.close = redis_close,
};

/* "host:port" into @p host and @p port; the rest after it into *rest. */
static int host_port(const char *s, char *host, int *port, const char **rest)
{
	int used = 0;
	if (sscanf(s, "%255[^:/,]:%d%n", host, port, &used) != 2 || *port <= 0 || *port > 65535)
		return -1;
	*rest = s + used;
	return 0;
}

/* redis://host:port[/db] or redis-sentinel://h:p[,h:p...]/master[/db]. */
static int parse_url(redis_ledger_t *r, const char *url)
{
	const char *at;
	char tail[16] = "";
	int used = 0;

	if (!strncmp(url, "redis://", 8)) {
		if (host_port(url + 8, r->main.host, &r->main.port, &at) < 0)
			return -1;
	} else if (!strncmp(url, "redis-sentinel://", 17)) {
		at = url + 17;
		do {
			if (r->nsentinels == SENTINELS_MAX)
				return -1;
			sentinel_t *st = &r->sentinels[r->nsentinels++];
			if (host_port(at + (*at == ','), st->host, &st->port, &at) < 0)
				return -1;
		} while (*at == ',');
		if (sscanf(at, "/%127[^/]%n", r->master, &used) != 1)
			return -1;
		at += used;
	} else {
		return -1;
	}
	if (*at && (sscanf(at, "/%d%15s", &r->db, tail) != 1 || r->db < 0))
		return -1;
	r->rates.port = r->main.port;
	snprintf(r->rates.host, sizeof(r->rates.host), "%s", r->main.host);
	return 0;
}

int tb_ledger_redis_open(tb_ledger_t **out, const char *url, const char *prefix, const char *worker,
			 tb_error_t *err)
{
	redis_ledger_t *r;

	*out = NULL;
	if (!(r = calloc(1, sizeof(*r))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	if (parse_url(r, url) < 0) {
		free(r);
		return tb_error_set(err, TB_EINVAL,
				    "ledger.url '%s': expected redis://host:port[/db], or "
				    "redis-sentinel://host:port[,host:port...]/master[/db] "
				    "(at most %d sentinels)",
				    url, SENTINELS_MAX);
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
	pthread_mutex_init(&r->main.lock, NULL);
	pthread_mutex_init(&r->rates.lock, NULL);
	r->main.connect = (struct timeval){ 2, 0 };
	r->main.timeout = (struct timeval){ 5, 0 };
	r->rates.connect = r->rates.timeout = (struct timeval){ 0, RATE_TIMEOUT_MS * 1000 };
	*out = &r->base;
	return 0;
}
