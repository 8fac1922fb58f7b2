/*
 * watermark.c: a ring of in-flight offsets in arrival (= offset) order,
 * each with a finished flag. The finished prefix is dropped when the
 * watermark is taken, so memory is bounded by what is in flight.
 */
#include "watermark.h"

#include <stdlib.h>
#include <string.h>

typedef struct entry {
	int64_t offset;
	int done;
} entry_t;

struct tb_watermark {
	entry_t *ring;
	size_t cap, head, n; /* n entries from head, wrapping */
	int64_t last;        /* highest offset seen, -1 before any */
	int64_t committed;   /* last value returned by commit, -1 before */
};

int tb_watermark_new(tb_watermark_t **out, tb_error_t *err)
{
	tb_watermark_t *w = calloc(1, sizeof(*w));

	*out = NULL;
	if (!w || !(w->ring = calloc(16, sizeof(entry_t)))) {
		free(w);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	w->cap = 16;
	w->last = -1;
	w->committed = -1;
	*out = w;
	return 0;
}

void tb_watermark_free(tb_watermark_t *w)
{
	if (w) {
		free(w->ring);
		free(w);
	}
}

static entry_t *at(const tb_watermark_t *w, size_t i)
{
	return &w->ring[(w->head + i) % w->cap];
}

int tb_watermark_start(tb_watermark_t *w, int64_t offset, tb_error_t *err)
{
	if (offset < 0 || offset <= w->last)
		return tb_error_set(err, TB_EINVAL, "watermark: offset %lld after %lld",
				    (long long)offset, (long long)w->last);
	if (w->n == w->cap) {
		entry_t *bigger = malloc(2 * w->cap * sizeof(entry_t));
		if (!bigger)
			return tb_error_set(err, TB_ENOMEM, "out of memory");
		for (size_t i = 0; i < w->n; i++)
			bigger[i] = *at(w, i);
		free(w->ring);
		w->ring = bigger;
		w->cap *= 2;
		w->head = 0;
	}
	*at(w, w->n) = (entry_t){ offset, 0 };
	w->n++;
	w->last = offset;
	return 0;
}

int tb_watermark_finish(tb_watermark_t *w, int64_t offset, tb_error_t *err)
{
	/* Binary search: the ring is sorted by offset. */
	size_t lo = 0, hi = w->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (at(w, mid)->offset < offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == w->n || at(w, lo)->offset != offset || at(w, lo)->done)
		return tb_error_set(err, TB_ENOTFOUND, "watermark: offset %lld is not in flight",
				    (long long)offset);
	at(w, lo)->done = 1;
	return 0;
}

void tb_watermark_resend(tb_watermark_t *w)
{
	w->committed = -1;
}

int64_t tb_watermark_commit(tb_watermark_t *w)
{
	int64_t mark;

	while (w->n && at(w, 0)->done) {
		w->head = (w->head + 1) % w->cap;
		w->n--;
	}
	if (w->last < 0)
		return -1;
	mark = w->n ? at(w, 0)->offset : w->last + 1;
	if (mark == w->committed)
		return -1;
	w->committed = mark;
	return mark;
}

size_t tb_watermark_in_flight(const tb_watermark_t *w)
{
	size_t k = 0;
	for (size_t i = 0; i < w->n; i++)
		k += !at(w, i)->done;
	return k;
}
