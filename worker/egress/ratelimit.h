/*
 * ratelimit.h: the fleet's rate limits per credential (schemas/runtime.md,
 * "rate_limit"), as one worker's egress proxies draw on them. One per
 * worker, shared by its slots' proxies, thread-safe.
 *
 * While the ledger keeps buckets and answers (Redis: tb/ledger.h, "rate
 * buckets"), every request takes its turn there: one round trip, and the
 * tokens and pauses are told it without waiting. While the ledger does
 * not answer, the worker paces each credential itself at its share of
 * the limit (the limit divided by the workers last seen drawing from the
 * bucket, at least one), logged once when that starts and once when it
 * ends, and asks the ledger again after a second: never no limit. A
 * worker whose ledger keeps no buckets ("memory:") is its whole fleet:
 * it paces alone, at the whole limit. The local pacing is the ledger
 * script's, in C (tb_rate_state_*).
 */
#ifndef TB_RATELIMIT_H
#define TB_RATELIMIT_H

#include "tb/ledger.h"
#include "tb/runtime.h"

#include <stdint.h>

typedef struct tb_ratelimit tb_ratelimit_t;

/** @param ledger the worker's (may be NULL: local pacing only); must
 * outlive the limiter. @return 0, or TB_ENOMEM */
int tb_ratelimit_new(tb_ratelimit_t **out, tb_ledger_t *ledger, tb_error_t *err);

/** Frees @p rl (NULL is fine). */
void tb_ratelimit_free(tb_ratelimit_t *rl);

/**
 * Asks for one request's turn on @p bucket (a credential's name, 1 to 64
 * of [0-9a-z]) under @p conf, the turn at most @p max_wait_ms away: taken
 * (go after wait_ms), or not (ask again after wait_ms). Never fails: an
 * unreachable ledger means local pacing.
 */
void tb_ratelimit_take(tb_ratelimit_t *rl, const char *bucket, const tb_rate_conf_t *conf,
		       uint64_t max_wait_ms, tb_ledger_turn_t *out);

/** Tells @p bucket that an answer reported @p tokens spent, and its
 * provider asked for a pause of @p pause_ms (0: none). Never waits. */
void tb_ratelimit_spend(tb_ratelimit_t *rl, const char *bucket, const tb_rate_conf_t *conf,
			uint64_t tokens, uint64_t pause_ms);

/** Whether @p rl paces on its own now (the ledger did not answer). */
int tb_ratelimit_local(tb_ratelimit_t *rl);

/* The pacing of one bucket, as the ledger's script keeps it: times in ms
 * on one clock. */
typedef struct tb_rate_state {
	double next;    /* the next request's turn */
	double tokens;  /* when the tokens spent are paid back */
	uint64_t pause; /* no turn before this */
} tb_rate_state_t;

/** A turn at @p now (ms, to the microsecond: a turn a fraction of a ms
 * away is not rounded up to a whole one for every request of a fast
 * limit): as RATE_TAKE_LUA (ledger_redis.c). */
void tb_rate_state_take(tb_rate_state_t *s, double interval_ms, uint64_t tokens_per_minute,
			uint64_t max_wait_ms, double now, tb_ledger_turn_t *out);
/** Tokens spent and a pause asked for at @p now: as RATE_SPEND_LUA. */
void tb_rate_state_spend(tb_rate_state_t *s, uint64_t tokens, uint64_t tokens_per_minute,
			 uint64_t pause_ms, uint64_t now);

#endif
