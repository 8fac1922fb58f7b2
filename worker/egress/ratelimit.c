/*
 * ratelimit.c: a worker's side of the fleet's rate limits (ratelimit.h):
 * the ledger's buckets while it answers, its own share while it does not.
 */
#include "ratelimit.h"

#include "tb/clock.h"
#include "tb/log.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUCKETS_MAX 256      /* credentials one worker paces at once */
#define LEDGER_RETRY_MS 1000 /* after a failure, the ledger is asked again after */

typedef struct bucket {
	char name[65];
	tb_rate_state_t local; /* while the ledger does not answer */
	uint64_t sharing;      /* workers last seen drawing from it (at least 1) */
} bucket_t;

struct tb_ratelimit {
	tb_ledger_t *ledger; /* NULL, or one without buckets: local pacing only */
	pthread_mutex_t lock;
	bucket_t *buckets;
	size_t n;
	uint64_t retry_at; /* monotonic ms: the ledger is not asked before */
	int down;          /* local pacing since the last failure (logged) */
};

void tb_rate_state_take(tb_rate_state_t *s, double interval_ms, uint64_t tokens_per_minute,
			uint64_t max_wait_ms, double now, tb_ledger_turn_t *out)
{
	double t = now;

	out->taken = 0;
	out->wait_ms = 0;
	if ((double)s->pause > t) {
		out->wait_ms = (uint64_t)ceil((double)s->pause - t);
		return;
	}
	if (tokens_per_minute && s->tokens > t) {
		out->wait_ms = (uint64_t)ceil(s->tokens - t);
		return;
	}
	out->taken = 1;
	if (interval_ms <= 0)
		return;
	double at = s->next > t ? s->next : t;
	if (at - t > (double)max_wait_ms) {
		out->taken = 0;
		out->wait_ms = (uint64_t)ceil(at - t);
		return;
	}
	s->next = at + interval_ms;
	out->wait_ms = (uint64_t)ceil(at - t);
}

void tb_rate_state_spend(tb_rate_state_t *s, uint64_t tokens, uint64_t tokens_per_minute,
			 uint64_t pause_ms, uint64_t now)
{
	if (pause_ms && now + pause_ms > s->pause)
		s->pause = now + pause_ms;
	if (tokens && tokens_per_minute) {
		double from = (double)now - 60000.0;
		s->tokens = (s->tokens > from ? s->tokens : from) +
			    (double)tokens * 60000.0 / (double)tokens_per_minute;
	}
}

int tb_ratelimit_new(tb_ratelimit_t **out, tb_ledger_t *ledger, tb_error_t *err)
{
	tb_ratelimit_t *rl = calloc(1, sizeof(*rl));

	*out = NULL;
	if (!rl || !(rl->buckets = calloc(BUCKETS_MAX, sizeof(bucket_t)))) {
		free(rl);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	rl->ledger = ledger && tb_ledger_shares_rates(ledger) ? ledger : NULL;
	pthread_mutex_init(&rl->lock, NULL);
	*out = rl;
	return 0;
}

void tb_ratelimit_free(tb_ratelimit_t *rl)
{
	if (!rl)
		return;
	pthread_mutex_destroy(&rl->lock);
	free(rl->buckets);
	free(rl);
}

/* @p name's bucket, made on first use; under the lock. When the table is
 * full, the last one is reused: the pacing of BUCKETS_MAX + 1 credentials
 * on one worker shares a bucket (more strictly, never less). */
static bucket_t *bucket_of(tb_ratelimit_t *rl, const char *name)
{
	for (size_t i = 0; i < rl->n; i++)
		if (!strcmp(rl->buckets[i].name, name))
			return &rl->buckets[i];
	bucket_t *b = &rl->buckets[rl->n < BUCKETS_MAX ? rl->n++ : BUCKETS_MAX - 1];
	memset(b, 0, sizeof(*b));
	snprintf(b->name, sizeof(b->name), "%s", name);
	b->sharing = 1;
	return b;
}

static double interval_of(const tb_rate_conf_t *c)
{
	return TB_HAS(c, TB_RATE_REQUESTS) && c->requests_per_second > 0
		   ? 1000.0 / c->requests_per_second
		   : 0;
}

/* The ledger, when it is to be asked now. */
static tb_ledger_t *ledger_now(tb_ratelimit_t *rl)
{
	pthread_mutex_lock(&rl->lock);
	tb_ledger_t *l = rl->ledger && tb_mono_ms() >= rl->retry_at ? rl->ledger : NULL;
	pthread_mutex_unlock(&rl->lock);
	return l;
}

/* The ledger answered (@p rc 0) or not: said once per change. */
static void ledger_said(tb_ratelimit_t *rl, int rc, const tb_error_t *err)
{
	pthread_mutex_lock(&rl->lock);
	int was = rl->down;
	rl->down = rc < 0;
	if (rc < 0)
		rl->retry_at = tb_mono_ms() + LEDGER_RETRY_MS;
	pthread_mutex_unlock(&rl->lock);
	if (rc < 0 && !was)
		tb_warn(NULL,
			"rate limits: the ledger does not answer (%s): this worker paces each "
			"credential alone, at its share of the limit, until it does",
			err->msg);
	else if (rc == 0 && was)
		tb_info(NULL, "rate limits: the ledger answers again: the fleet's buckets pace");
}

void tb_ratelimit_take(tb_ratelimit_t *rl, const char *bucket, const tb_rate_conf_t *conf,
		       uint64_t max_wait_ms, tb_ledger_turn_t *out)
{
	tb_ledger_rate_t q = { bucket, interval_of(conf), conf->tokens_per_minute, max_wait_ms };
	tb_ledger_t *l = ledger_now(rl);
	tb_error_t err;

	if (l) {
		int rc = tb_ledger_rate_take(l, &q, out, &err);
		ledger_said(rl, rc, &err);
		if (rc == 0) {
			pthread_mutex_lock(&rl->lock);
			bucket_of(rl, bucket)->sharing = out->sharing ? out->sharing : 1;
			pthread_mutex_unlock(&rl->lock);
			return;
		}
	}
	/* Alone: this worker's share of the limit (the whole when it is the
	 * whole fleet). */
	pthread_mutex_lock(&rl->lock);
	bucket_t *b = bucket_of(rl, bucket);
	uint64_t share = rl->ledger ? b->sharing : 1;
	uint64_t tpm = conf->tokens_per_minute / share;
	tb_rate_state_take(&b->local, q.interval_ms * (double)share,
			   conf->tokens_per_minute && !tpm ? 1 : tpm, max_wait_ms,
			   (double)tb_mono_us() / 1000.0, out);
	out->sharing = share;
	pthread_mutex_unlock(&rl->lock);
}

void tb_ratelimit_spend(tb_ratelimit_t *rl, const char *bucket, const tb_rate_conf_t *conf,
			uint64_t tokens, uint64_t pause_ms)
{
	tb_ledger_rate_t q = { bucket, interval_of(conf), conf->tokens_per_minute, 0 };
	tb_ledger_t *l = ledger_now(rl);
	tb_error_t err;

	if (!tokens && !pause_ms)
		return;
	if (!conf->tokens_per_minute)
		tokens = 0;
	/* Kept here too: the local pacing knows what was spent if the ledger
	 * stops answering. */
	pthread_mutex_lock(&rl->lock);
	bucket_t *b = bucket_of(rl, bucket);
	uint64_t share = rl->ledger ? b->sharing : 1;
	uint64_t tpm = conf->tokens_per_minute / share;
	tb_rate_state_spend(&b->local, tokens, conf->tokens_per_minute && !tpm ? 1 : tpm, pause_ms,
			    tb_mono_ms());
	pthread_mutex_unlock(&rl->lock);
	/* A spend is sent without waiting for the reply: that it went says
	 * nothing of whether the ledger answers, only its failure does. */
	if (l && tb_ledger_rate_spend(l, &q, tokens, pause_ms, &err) < 0)
		ledger_said(rl, -1, &err);
}

int tb_ratelimit_local(tb_ratelimit_t *rl)
{
	pthread_mutex_lock(&rl->lock);
	int local = !rl->ledger || rl->down;
	pthread_mutex_unlock(&rl->lock);
	return local;
}
