/*
 * replay.c: an egress recording played back (replay.h).
 */
#include "replay.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tb_replay {
	tb_recording_t rec;
	char *used; /* one per exchange of rec */
	int mode, pace;
	char from[200];
	pthread_mutex_t lock;
	char miss[700]; /* the first request that matched nothing, or "" */
};

int tb_replay_new(tb_replay_t **out, tb_recording_t *rec, const tb_replay_conf_t *conf,
		  const char *from, tb_error_t *err)
{
	tb_replay_t *p = calloc(1, sizeof(*p));

	*out = NULL;
	if (!p || !(p->used = calloc(rec->n ? rec->n : 1, 1))) {
		free(p);
		tb_recording_free(rec);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	p->rec = *rec;
	memset(rec, 0, sizeof(*rec));
	p->mode = conf->mode;
	p->pace = conf->pace;
	snprintf(p->from, sizeof(p->from), "%s", from);
	pthread_mutex_init(&p->lock, NULL);
	*out = p;
	return 0;
}

void tb_replay_free(tb_replay_t *p)
{
	if (!p)
		return;
	tb_recording_free(&p->rec);
	pthread_mutex_destroy(&p->lock);
	free(p->used);
	free(p);
}

const tb_rec_exchange_read_t *tb_replay_take(tb_replay_t *p, const char *endpoint,
					     const char *method, const char *target,
					     const char *body_sha256)
{
	const tb_rec_exchange_read_t *found = NULL;

	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->rec.n && !found; i++) {
		const tb_rec_exchange_read_t *e = &p->rec.xs[i];
		if (p->used[i] || !e->has_request || strcmp(e->endpoint, endpoint) ||
		    strcmp(e->method, method) || strcmp(e->target, target) ||
		    strcmp(e->body_sha256, body_sha256))
			continue;
		p->used[i] = 1;
		found = e;
	}
	pthread_mutex_unlock(&p->lock);
	return found;
}

int tb_replay_mode(const tb_replay_t *p)
{
	return p->mode;
}

int tb_replay_pace(const tb_replay_t *p)
{
	return p->pace;
}

const char *tb_replay_from(const tb_replay_t *p)
{
	return p->from;
}

void tb_replay_missed(tb_replay_t *p, const char *method, const char *target,
		      const char *body_sha256)
{
	pthread_mutex_lock(&p->lock);
	if (!p->miss[0])
		snprintf(p->miss, sizeof(p->miss), "%.16s %.500s (body sha256 %.12s...)", method,
			 target, body_sha256);
	pthread_mutex_unlock(&p->lock);
}

int tb_replay_first_miss(tb_replay_t *p, char *out, size_t len)
{
	pthread_mutex_lock(&p->lock);
	int missed = p->miss[0] != '\0';
	if (missed)
		snprintf(out, len, "%s", p->miss);
	pthread_mutex_unlock(&p->lock);
	return missed;
}
