/*
 * layer_index_queue.c: the layers a whole pull fetched, indexed and
 * published after it (layer_index_store.h), by one thread of the image
 * cache's, at a low priority: building an index inflates the layer again
 * (about 1.5 times a plain decompression), which a pull that waited for
 * it would pay on top of its unpacking; done after, it costs the pull
 * nothing and yields to the tasks that run meanwhile. The thread is
 * started with the first layer queued and ended by
 * tb_layer_index_queue_stop(), which interrupts a build under way.
 */
#include "layer_index_store.h"

#include "tb/clock.h"
#include "tb/log.h"
#include "tb/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define QUEUE_MAX 256 /* layers waiting, at most (more are left unindexed) */
#define NICE 10       /* the thread's priority: below the tasks' */

struct tb_layer_index_queue {
	int blobs; /* the cache's blobs directory (not owned) */
	tb_layer_indexes_t where;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* a layer queued, one done, or stop */
	char layers[QUEUE_MAX][72];
	size_t head, n; /* a ring */
	char doing[72]; /* the layer being indexed; "" idle */
	int started, stop;
	pthread_t thread;
	uint64_t built, ms; /* layers indexed and published, the time it took */
};

int tb_layer_index_queue_open(tb_layer_index_queue_t **out, int blobs,
			      const tb_layer_indexes_t *where, tb_error_t *err)
{
	tb_layer_index_queue_t *q = calloc(1, sizeof(*q));
	if (!q)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	q->blobs = blobs;
	q->where = *where;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	*out = q;
	return 0;
}

/* Whether the queue is stopping: the build's reader ends early. */
static int stopping(tb_layer_index_queue_t *q)
{
	pthread_mutex_lock(&q->lock);
	int stop = q->stop;
	pthread_mutex_unlock(&q->lock);
	return stop;
}

typedef struct reading {
	tb_layer_index_queue_t *q;
	int fd;
} reading_t;

static int64_t read_blob(void *arg, void *buf, size_t len, tb_error_t *err)
{
	reading_t *r = arg;
	if (stopping(r->q))
		return tb_error_set(err, TB_ERETRY, "the worker stops");
	for (;;) {
		ssize_t n = read(r->fd, buf, len);
		if (n >= 0)
			return n;
		if (errno != EINTR)
			return tb_error_errno(err, TB_EIO, errno, "reading the blob");
	}
}

/* Indexes and publishes @p layer unless the fleet has it; says why not. */
static void index_one(tb_layer_index_queue_t *q, const char *layer)
{
	uint64_t t0 = tb_mono_ms();
	tb_error_t err;
	reading_t r = { q, openat(q->blobs, layer + 7, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) };
	int rc = r.fd < 0 ? tb_error_errno(&err, TB_EIO, errno, "layer %s: its blob", layer)
			  : tb_layer_index_at_pull(&q->where, layer, read_blob, &r, &err);

	if (r.fd >= 0)
		close(r.fd);
	if (rc < 0 && !stopping(q)) {
		tb_warn(NULL, "image cache: layer %.19s... is not indexed: %s", layer, err.msg);
		tb_metrics_layer_index("unpublished");
	}
	if (rc <= 0)
		return;
	tb_metrics_layer_index("published");
	uint64_t ms = tb_mono_ms() - t0;
	pthread_mutex_lock(&q->lock);
	q->built++;
	q->ms += ms;
	pthread_mutex_unlock(&q->lock);
	tb_info(NULL, "image cache: layer %.19s... indexed and published in %llu ms", layer,
		(unsigned long long)ms);
}

static void *indexer(void *arg)
{
	tb_layer_index_queue_t *q = arg;

	/* this thread alone (a thread's id is a process to setpriority) */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), NICE);
	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (!q->n && !q->stop)
			pthread_cond_wait(&q->cond, &q->lock);
		if (q->stop)
			break;
		memcpy(q->doing, q->layers[q->head], sizeof(q->doing));
		q->head = (q->head + 1) % QUEUE_MAX;
		q->n--;
		pthread_mutex_unlock(&q->lock);
		index_one(q, q->doing);
		pthread_mutex_lock(&q->lock);
		q->doing[0] = '\0';
		pthread_cond_broadcast(&q->cond);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

/* Whether @p layer waits or is being indexed. Lock held. */
static int queued(const tb_layer_index_queue_t *q, const char *layer)
{
	if (!strcmp(q->doing, layer))
		return 1;
	for (size_t i = 0; i < q->n; i++)
		if (!strcmp(q->layers[(q->head + i) % QUEUE_MAX], layer))
			return 1;
	return 0;
}

void tb_layer_index_queue_add(tb_layer_index_queue_t *q, const char *layer)
{
	pthread_mutex_lock(&q->lock);
	if (!q->stop && q->n < QUEUE_MAX && !queued(q, layer)) {
		snprintf(q->layers[(q->head + q->n) % QUEUE_MAX], 72, "%s", layer);
		q->n++;
		if (!q->started && pthread_create(&q->thread, NULL, indexer, q) == 0)
			q->started = 1;
		pthread_cond_broadcast(&q->cond);
	}
	pthread_mutex_unlock(&q->lock);
}

void tb_layer_index_queue_wait(tb_layer_index_queue_t *q, uint64_t *built, uint64_t *ms)
{
	pthread_mutex_lock(&q->lock);
	while (q->started && !q->stop && (q->n || q->doing[0]))
		pthread_cond_wait(&q->cond, &q->lock);
	if (built)
		*built = q->built;
	if (ms)
		*ms = q->ms;
	pthread_mutex_unlock(&q->lock);
}

void tb_layer_index_queue_stop(tb_layer_index_queue_t *q)
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
