/*
 * live.c: the subscribers of live events (live.h), all under the hub's
 * lock, each with its own buffer and condition.
 */
#include "live.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LIVE_BUFFER (512u << 10)

struct tb_view_sub {
	tb_view_live_t *hub;
	char id[129];
	char *buf; /* not yet sent: LIVE_BUFFER bytes */
	size_t len;
	int behind, ended, greeted;
	pthread_cond_t more;
};

struct tb_view_live {
	pthread_mutex_t lock;
	pthread_cond_t gone; /* a subscriber left */
	tb_view_sub_t **subs;
	size_t n, max;
	int closing;
};

tb_view_live_t *tb_view_live_new(size_t max_subs)
{
	tb_view_live_t *h = calloc(1, sizeof(*h));
	if (!h || !(h->subs = calloc(max_subs ? max_subs : 1, sizeof(*h->subs)))) {
		free(h);
		return NULL;
	}
	h->max = max_subs;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->gone, NULL);
	return h;
}

void tb_view_live_close(tb_view_live_t *h)
{
	pthread_mutex_lock(&h->lock);
	h->closing = 1;
	for (size_t i = 0; i < h->n; i++)
		pthread_cond_signal(&h->subs[i]->more);
	pthread_mutex_unlock(&h->lock);
}

void tb_view_live_free(tb_view_live_t *h)
{
	if (!h)
		return;
	tb_view_live_close(h);
	pthread_mutex_lock(&h->lock);
	while (h->n) /* their connections' threads unsubscribe */
		pthread_cond_wait(&h->gone, &h->lock);
	pthread_mutex_unlock(&h->lock);
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->gone);
	free(h->subs);
	free(h);
}

int tb_view_live_watching(tb_view_live_t *h, const char *id)
{
	int found = 0;

	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < h->n && !found; i++)
		found = !strcmp(h->subs[i]->id, id);
	pthread_mutex_unlock(&h->lock);
	return found;
}

void tb_view_live_publish(tb_view_live_t *h, const char *id, const char *json, size_t len)
{
	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < h->n; i++) {
		tb_view_sub_t *s = h->subs[i];
		if (strcmp(s->id, id) || s->behind)
			continue;
		if (s->len + len + 8 > LIVE_BUFFER)
			s->behind = 1;
		else {
			memcpy(s->buf + s->len, "data: ", 6);
			memcpy(s->buf + s->len + 6, json, len);
			memcpy(s->buf + s->len + 6 + len, "\n\n", 2);
			s->len += len + 8;
		}
		pthread_cond_signal(&s->more);
	}
	pthread_mutex_unlock(&h->lock);
}

tb_view_sub_t *tb_view_live_subscribe(tb_view_live_t *h, const char *id)
{
	tb_view_sub_t *s = calloc(1, sizeof(*s));
	if (!s || !(s->buf = malloc(LIVE_BUFFER))) {
		free(s);
		return NULL;
	}
	snprintf(s->id, sizeof(s->id), "%s", id);
	s->hub = h;
	pthread_cond_init(&s->more, NULL);
	pthread_mutex_lock(&h->lock);
	if (h->n == h->max || h->closing) {
		pthread_mutex_unlock(&h->lock);
		pthread_cond_destroy(&s->more);
		free(s->buf);
		free(s);
		return NULL;
	}
	h->subs[h->n++] = s;
	pthread_mutex_unlock(&h->lock);
	return s;
}

ssize_t tb_view_live_read(tb_view_sub_t *s, char *buf, size_t cap, int wait_ms)
{
	static const char keep[] = ": still here\n\n", behind[] = "event: behind\ndata: {}\n\n";
	tb_view_live_t *h = s->hub;
	struct timespec until;
	ssize_t n;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += wait_ms / 1000;
	until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L)
		until.tv_sec++, until.tv_nsec -= 1000000000L;
	pthread_mutex_lock(&h->lock);
	if (!s->greeted) { /* at once: the page knows it is subscribed */
		static const char hello[] = ": subscribed\n\n";
		s->greeted = 1;
		pthread_mutex_unlock(&h->lock);
		n = (ssize_t)(sizeof(hello) - 1 < cap ? sizeof(hello) - 1 : cap);
		memcpy(buf, hello, (size_t)n);
		return n;
	}
	int timed_out = 0;
	while (!s->len && !s->behind && !h->closing && !s->ended && !timed_out)
		timed_out = pthread_cond_timedwait(&s->more, &h->lock, &until) == ETIMEDOUT;
	if (s->ended || h->closing) {
		n = -1;
	} else if (s->len) {
		n = (ssize_t)(s->len < cap ? s->len : cap);
		memcpy(buf, s->buf, (size_t)n);
		memmove(s->buf, s->buf + n, s->len - (size_t)n);
		s->len -= (size_t)n;
	} else if (s->behind) { /* what it had is sent: now say so, and end */
		n = (ssize_t)(sizeof(behind) - 1 < cap ? sizeof(behind) - 1 : cap);
		memcpy(buf, behind, (size_t)n);
		s->ended = 1;
	} else {
		n = (ssize_t)(sizeof(keep) - 1 < cap ? sizeof(keep) - 1 : cap);
		memcpy(buf, keep, (size_t)n);
	}
	pthread_mutex_unlock(&h->lock);
	return n;
}

void tb_view_live_unsubscribe(tb_view_sub_t *s)
{
	tb_view_live_t *h;

	if (!s)
		return;
	h = s->hub;
	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < h->n; i++)
		if (h->subs[i] == s) {
			h->subs[i] = h->subs[--h->n];
			break;
		}
	pthread_cond_broadcast(&h->gone);
	pthread_mutex_unlock(&h->lock);
	pthread_cond_destroy(&s->more);
	free(s->buf);
	free(s);
}
