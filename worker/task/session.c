/*
 * session.c: the inbox behind session.h. One mutex; a pipe that holds one
 * byte exactly while a follow-up waits to be taken, so the slot can poll
 * it with the agent's output.
 */
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct item {
	uint64_t seq;
	int kind;
	char *text;
	int64_t offset;
	void *raw; /* the message as it came */
	size_t raw_len;
} item_t;

#define MAX_HOLDS 64

struct tb_session {
	pthread_mutex_t lock;
	item_t *items;
	size_t n, cap;
	size_t bytes;             /* prompt text held */
	int64_t holds[MAX_HOLDS]; /* the task's message delivered again */
	size_t nholds;
	size_t cursor;  /* the next to take, this attempt */
	uint64_t taken; /* the highest seq taken, this attempt */
	int signalled;  /* the pipe holds its byte */
	int ended;      /* closed for good: why */
	char why[256];
	int fd[2];
};

int tb_session_new(tb_session_t **out, tb_error_t *err)
{
	tb_session_t *s = calloc(1, sizeof(*s));

	if (!s)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	if (pipe2(s->fd, O_CLOEXEC | O_NONBLOCK) < 0) {
		int e = errno;
		free(s);
		return tb_error_errno(err, TB_EIO, e, "session: pipe");
	}
	pthread_mutex_init(&s->lock, NULL);
	*out = s;
	return 0;
}

void tb_session_free(tb_session_t *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		free(s->items[i].text);
		free(s->items[i].raw);
	}
	free(s->items);
	close(s->fd[0]);
	close(s->fd[1]);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* Keeps the pipe's byte in step with "something to take" (lock held). */
static void signal_state(tb_session_t *s)
{
	int want = s->cursor < s->n;
	char b = 1;

	if (want && !s->signalled)
		s->signalled = write(s->fd[1], &b, 1) == 1;
	else if (!want && s->signalled)
		s->signalled = !(read(s->fd[0], &b, 1) == 1);
}

static int has_end(const tb_session_t *s)
{
	return s->n && s->items[s->n - 1].kind == TB_FOLLOWUP_END;
}

tb_session_put_t tb_session_put(tb_session_t *s, const tb_followup_t *f, int64_t offset,
				const void *raw, size_t raw_len, char *why, size_t why_len)
{
	tb_session_put_t rc = TB_SESSION_REFUSED;

	pthread_mutex_lock(&s->lock);
	uint64_t last = s->n ? s->items[s->n - 1].seq : 0;
	if (f->seq <= last) {
		rc = TB_SESSION_DUPLICATE;
	} else if (s->ended || has_end(s)) {
		snprintf(why, why_len, "follow-up %llu: the session has ended (%s)",
			 (unsigned long long)f->seq, has_end(s) ? "an end came first" : s->why);
	} else if (f->seq != last + 1) {
		snprintf(why, why_len,
			 "follow-up %llu out of order: the session expects %llu next (follow-ups "
			 "are numbered 1, 2, 3 ... with none skipped)",
			 (unsigned long long)f->seq, (unsigned long long)(last + 1));
	} else if (s->n >= TB_SESSION_MAX_FOLLOWUPS) {
		snprintf(why, why_len, "follow-up %llu: a session takes at most %d",
			 (unsigned long long)f->seq, TB_SESSION_MAX_FOLLOWUPS);
	} else if (f->text && s->bytes + strlen(f->text) > TB_SESSION_MAX_BYTES) {
		snprintf(why, why_len, "follow-up %llu: a session holds at most %u MiB of prompts",
			 (unsigned long long)f->seq, TB_SESSION_MAX_BYTES >> 20);
	} else {
		if (s->n == s->cap) {
			size_t cap = s->cap ? s->cap * 2 : 8;
			item_t *more = realloc(s->items, cap * sizeof(*more));
			if (!more)
				abort(); /* out of memory */
			s->items = more, s->cap = cap;
		}
		item_t *it = &s->items[s->n];
		it->seq = f->seq;
		it->kind = f->kind;
		it->offset = offset;
		it->text = f->kind == TB_FOLLOWUP_PROMPT ? strdup(f->text ? f->text : "") : NULL;
		it->raw = raw && raw_len ? malloc(raw_len) : NULL;
		it->raw_len = it->raw ? raw_len : 0;
		if ((f->kind == TB_FOLLOWUP_PROMPT && !it->text) || (raw && raw_len && !it->raw))
			abort(); /* out of memory */
		if (it->raw)
			memcpy(it->raw, raw, raw_len);
		s->bytes += it->text ? strlen(it->text) : 0;
		s->n++;
		signal_state(s);
		rc = TB_SESSION_QUEUED;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

size_t tb_session_count(tb_session_t *s)
{
	pthread_mutex_lock(&s->lock);
	size_t n = s->n;
	pthread_mutex_unlock(&s->lock);
	return n;
}

void tb_session_item(tb_session_t *s, size_t i, uint64_t *seq, int64_t *offset, const void **raw,
		     size_t *raw_len)
{
	pthread_mutex_lock(&s->lock);
	const item_t *it = &s->items[i];
	*seq = it->seq, *offset = it->offset, *raw = it->raw, *raw_len = it->raw_len;
	pthread_mutex_unlock(&s->lock);
}

void tb_session_hold(tb_session_t *s, int64_t offset)
{
	pthread_mutex_lock(&s->lock);
	if (s->nholds < MAX_HOLDS)
		s->holds[s->nholds++] = offset;
	pthread_mutex_unlock(&s->lock);
}

size_t tb_session_holds(tb_session_t *s, int64_t *out, size_t max)
{
	size_t k = 0;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->nholds && k < max; i++)
		out[k++] = s->holds[i];
	pthread_mutex_unlock(&s->lock);
	return k;
}

int tb_session_fd(const tb_session_t *s)
{
	return s->fd[0];
}

int tb_session_take(tb_session_t *s, int *kind, char **text, uint64_t *seq)
{
	int got = 0;

	pthread_mutex_lock(&s->lock);
	if (s->cursor < s->n) {
		const item_t *it = &s->items[s->cursor++];
		*kind = it->kind;
		*seq = it->seq;
		*text = it->text ? strdup(it->text) : NULL;
		if (it->text && !*text)
			abort();
		s->taken = it->seq;
		got = 1;
	}
	signal_state(s);
	pthread_mutex_unlock(&s->lock);
	return got;
}

void tb_session_close(tb_session_t *s, const char *why)
{
	pthread_mutex_lock(&s->lock);
	if (!s->ended) {
		s->ended = 1;
		snprintf(s->why, sizeof(s->why), "%s", why);
	}
	pthread_mutex_unlock(&s->lock);
}

uint64_t tb_session_taken(const tb_session_t *s)
{
	return s->taken; /* written only by the slot that reads it */
}

void tb_session_rewind(tb_session_t *s)
{
	pthread_mutex_lock(&s->lock);
	s->cursor = 0;
	s->taken = 0;
	s->ended = 0; /* a new attempt may take more (an end stays an end) */
	signal_state(s);
	pthread_mutex_unlock(&s->lock);
}
