/*
 * replay.c: an egress recording played back (replay.h).
 */
#include "replay.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The recorded exchanges that may answer, sorted by their key (endpoint,
 * method, target and body hash), then in the order they were made: a
 * request finds its group by binary search, and takes the group's next. */
typedef struct entry {
	char *key;
	size_t idx;  /* into rec.xs */
	size_t next; /* at a group's first entry: how many of it were taken */
} entry_t;

struct tb_replay {
	tb_recording_t rec;
	entry_t *entries;
	size_t n;
	int mode, pace;
	char from[200];
	pthread_mutex_t lock;
	char miss[700]; /* the first request that matched nothing, or "" */
};

/* The key of a request: NULL without memory. */
static char *key_of(const char *endpoint, const char *method, const char *target, const char *sha)
{
	char *k = NULL;
	return asprintf(&k, "%s\n%s\n%s\n%s", endpoint, method, target, sha) < 0 ? NULL : k;
}

static int by_key(const void *a, const void *b)
{
	const entry_t *x = a, *y = b;
	int c = strcmp(x->key, y->key);
	return c ? c : x->idx < y->idx ? -1 : x->idx > y->idx;
}

static void free_entries(tb_replay_t *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->entries[i].key);
	free(p->entries);
}

int tb_replay_new(tb_replay_t **out, tb_recording_t *rec, const tb_replay_conf_t *conf,
		  const char *from, tb_error_t *err)
{
	tb_replay_t *p = calloc(1, sizeof(*p));

	*out = NULL;
	if (!p || !(p->entries = calloc(rec->n ? rec->n : 1, sizeof(entry_t))))
		goto nomem;
	p->rec = *rec;
	memset(rec, 0, sizeof(*rec));
	for (size_t i = 0; i < p->rec.n; i++) {
		const tb_rec_exchange_read_t *e = &p->rec.xs[i];
		if (!e->has_request)
			continue; /* cut at max_mb: answers nothing */
		if (!(p->entries[p->n].key =
			  key_of(e->endpoint, e->method, e->target, e->body_sha256)))
			goto nomem;
		p->entries[p->n++].idx = i;
	}
	qsort(p->entries, p->n, sizeof(entry_t), by_key);
	p->mode = conf->mode;
	p->pace = conf->pace;
	snprintf(p->from, sizeof(p->from), "%s", from);
	pthread_mutex_init(&p->lock, NULL);
	*out = p;
	return 0;
nomem:
	if (p) {
		free_entries(p);
		tb_recording_free(&p->rec);
		free(p);
	}
	tb_recording_free(rec);
	return tb_error_set(err, TB_ENOMEM, "out of memory");
}

void tb_replay_free(tb_replay_t *p)
{
	if (!p)
		return;
	tb_recording_free(&p->rec);
	pthread_mutex_destroy(&p->lock);
	free_entries(p);
	free(p);
}

const tb_rec_exchange_read_t *tb_replay_take(tb_replay_t *p, const char *endpoint,
					     const char *method, const char *target,
					     const char *body_sha256)
{
	const tb_rec_exchange_read_t *found = NULL;
	char *key = key_of(endpoint, method, target, body_sha256);
	size_t lo = 0, hi = p->n;

	if (!key)
		return NULL;
	while (lo < hi) { /* the group's first entry */
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(p->entries[mid].key, key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	pthread_mutex_lock(&p->lock);
	if (lo < p->n && !strcmp(p->entries[lo].key, key)) {
		size_t at = lo + p->entries[lo].next;
		if (at < p->n && !strcmp(p->entries[at].key, key)) {
			p->entries[lo].next++;
			found = &p->rec.xs[p->entries[at].idx];
		}
	}
	pthread_mutex_unlock(&p->lock);
	free(key);
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
