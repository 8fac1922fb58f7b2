/*
 * store_put_all.c: one thread per object beyond the first, which the
 * caller's thread puts itself; the store is safe to use from many threads.
 */
#include "tb/store_put_all.h"

#include <pthread.h>
#include <string.h>

typedef struct put {
	tb_store_t *s;
	const tb_store_put_item_t *item;
	pthread_t thread;
	int started;
	int rc;
	tb_error_t err;
} put_t;

static void *put_one(void *arg)
{
	put_t *p = arg;
	const tb_store_put_item_t *it = p->item;

	p->rc = it->fd >= 0 ? tb_store_put_fd(p->s, it->key, it->fd, NULL, &p->err)
			    : tb_store_put_bytes(p->s, it->key, it->data, it->len, NULL, &p->err);
	return NULL;
}

/* One wave of at most TB_STORE_PUT_ALL_WAVE puts. */
static int put_wave(tb_store_t *s, const tb_store_put_item_t *items, size_t n, tb_error_t *err)
{
	put_t puts[TB_STORE_PUT_ALL_WAVE];

	memset(puts, 0, sizeof(puts));
	for (size_t i = 0; i < n; i++) {
		puts[i].s = s;
		puts[i].item = &items[i];
		/* The first on this thread; the others' threads, or on this one
		 * too if a thread cannot start. */
		puts[i].started =
		    i > 0 && pthread_create(&puts[i].thread, NULL, put_one, &puts[i]) == 0;
	}
	if (n)
		put_one(&puts[0]);
	for (size_t i = 1; i < n; i++)
		if (puts[i].started)
			pthread_join(puts[i].thread, NULL);
		else
			put_one(&puts[i]);
	for (size_t i = 0; i < n; i++)
		if (puts[i].rc < 0) {
			*err = puts[i].err;
			return puts[i].rc;
		}
	return 0;
}

int tb_store_put_all(tb_store_t *s, const tb_store_put_item_t *items, size_t n, tb_error_t *err)
{
	for (size_t i = 0; i < n; i += TB_STORE_PUT_ALL_WAVE) {
		int rc =
		    put_wave(s, items + i,
			     n - i < TB_STORE_PUT_ALL_WAVE ? n - i : TB_STORE_PUT_ALL_WAVE, err);
		if (rc < 0)
			return rc;
	}
	return 0;
}
