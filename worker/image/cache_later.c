/*
 * cache_later.c: images pulled whole in the background (image.h,
 * tb_image_cache_pull_later), so that the next task on this host finds
 * an image cached that a task read on demand (its root served from the
 * layers' indexes) and starts on its unpacked tree. One thread of the
 * cache's, at a low priority, one image at a time, through tb_image_get()
 * like any slot (the same locks, checks and caps); started with the
 * first image queued, ended with the cache. It owns no image: each is
 * released as soon as it is made.
 */
#include "cache_int.h"

#include "tb/clock.h"
#include "tb/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LATER_MAX 16 /* images waiting, at most (more are left for their next task) */
#define NICE 10      /* below the tasks' */

typedef struct later_item {
	tb_image_ref_t ref;
	char credentials[4096]; /* "" for none */
	uint64_t max_unpacked;
} later_item_t;

struct tb_image_later {
	tb_image_cache_t *c;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* an image queued, one done, or stop */
	later_item_t q[LATER_MAX];
	size_t head, n; /* a ring */
	char doing[72]; /* the digest being pulled; "" idle */
	int started, stop;
	pthread_t thread;
};

int tb_image_later_open(tb_image_later_t **out, tb_image_cache_t *c, tb_error_t *err)
{
	tb_image_later_t *q = calloc(1, sizeof(*q));
	if (!q)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	q->c = c;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	*out = q;
	return 0;
}

/* Pulls @p it whole; says how it went. */
static void pull_one(tb_image_later_t *q, const later_item_t *it)
{
	uint64_t t0 = tb_mono_ms();
	tb_image_t img;
	tb_error_t err;
	int rc = tb_image_get(q->c, &it->ref, it->max_unpacked,
			      it->credentials[0] ? it->credentials : NULL, &img, &err);

	if (rc < 0) {
		tb_warn(NULL, "image %.19s: not pulled whole in the background: %s", it->ref.digest,
			err.msg);
		return;
	}
	if (!img.cached)
		tb_info(NULL, "image %.19s: pulled whole in the background in %llu ms",
			it->ref.digest, (unsigned long long)(tb_mono_ms() - t0));
	tb_image_release(&img);
}

static void *later_main(void *arg)
{
	tb_image_later_t *q = arg;
	later_item_t *it = malloc(sizeof(*it));

	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), NICE); /* best effort */
	pthread_mutex_lock(&q->lock);
	while (it && !q->stop) {
		if (!q->n) {
			pthread_cond_wait(&q->cond, &q->lock);
			continue;
		}
		*it = q->q[q->head];
		q->head = (q->head + 1) % LATER_MAX;
		q->n--;
		snprintf(q->doing, sizeof(q->doing), "%s", it->ref.digest);
		pthread_mutex_unlock(&q->lock);
		pull_one(q, it);
		pthread_mutex_lock(&q->lock);
		q->doing[0] = '\0';
		pthread_cond_broadcast(&q->cond);
	}
	q->n = 0; /* what is left stays for its next task */
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
	free(it);
	return NULL;
}

/* Whether @p digest is queued or being pulled (the lock held). */
static int known(const tb_image_later_t *q, const char *digest)
{
	if (!strcmp(q->doing, digest))
		return 1;
	for (size_t i = 0; i < q->n; i++)
		if (!strcmp(q->q[(q->head + i) % LATER_MAX].ref.digest, digest))
			return 1;
	return 0;
}

void tb_image_later_add(tb_image_later_t *q, const tb_image_ref_t *ref, const char *credentials,
			uint64_t max_unpacked)
{
	pthread_mutex_lock(&q->lock);
	if (!q->stop && q->n < LATER_MAX && !known(q, ref->digest) &&
	    (!credentials || strlen(credentials) < sizeof(q->q[0].credentials))) {
		if (!q->started)
			q->started = pthread_create(&q->thread, NULL, later_main, q) == 0;
		later_item_t *it = &q->q[(q->head + q->n) % LATER_MAX];
		it->ref = *ref;
		snprintf(it->credentials, sizeof(it->credentials), "%s",
			 credentials ? credentials : "");
		it->max_unpacked = max_unpacked;
		q->n += q->started;
		pthread_cond_broadcast(&q->cond);
	}
	pthread_mutex_unlock(&q->lock);
}

void tb_image_later_wait(tb_image_later_t *q)
{
	pthread_mutex_lock(&q->lock);
	while (q->n || q->doing[0])
		pthread_cond_wait(&q->cond, &q->lock);
	pthread_mutex_unlock(&q->lock);
}

void tb_image_later_stop(tb_image_later_t *q)
{
	if (!q)
		return;
	pthread_mutex_lock(&q->lock);
	q->stop = 1;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
	if (q->started)
		pthread_join(q->thread, NULL);
	pthread_cond_destroy(&q->cond);
	pthread_mutex_destroy(&q->lock);
	free(q);
}
