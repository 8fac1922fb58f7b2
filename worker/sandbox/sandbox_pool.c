/*
 * sandbox_pool.c: a few threads building each slot's next sandbox while
 * the slot is busy (see sandbox_pool.h for why and for the isolation
 * argument). Per slot: the shape its last task wanted, and at most one
 * sandbox built to it, ready or being built.
 */
#include "sandbox_pool.h"

#include "tb/log.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Builders at most: a build mostly waits on the kernel (cgroup moves,
 * namespace set-up), so a few overlap well even on two cores. */
#define POOL_THREADS 4

/* What a prepared sandbox is built with: the spec minus the task. */
typedef struct shape {
	uint64_t workspace_mb, outputs_mb, memory_mb, pids, cpu_millis;
	uint64_t max_open_files, max_file_mb, writable_mb;
	tb_strlist_t ro_binds; /* owned copies */
	char *image_tree;      /* owned copy, or NULL */
	int image_hold;        /* a duplicate, owned, or 0: the image stays in
				* the cache while a sandbox may be built on it */
} shape_t;

typedef struct slot {
	shape_t want;      /* valid when wanted */
	int wanted;        /* the next sandbox should be built to want */
	int building;      /* the thread is building it now */
	tb_sandbox_t *sb;  /* built, not yet taken */
	shape_t sb_shape;  /* what sb was built to */
	unsigned failures; /* builds that failed in a row (logged once) */
} slot_t;

struct tb_sandbox_pool {
	const tb_seccomp_t *policy;
	char *work_root, *group;
	unsigned nslots;
	slot_t *slots;
	unsigned long long built; /* names: <group>-pool<slot>-<built>-next */
	int stop;
	int no_spares; /* tb_sandbox_pool_drop_spares: nothing more built */
	pthread_mutex_t lock;
	pthread_cond_t cond; /* something to build, a build done, or stop */
	pthread_t threads[POOL_THREADS];
	unsigned nthreads;
};

static void shape_free(shape_t *s)
{
	for (size_t i = 0; i < s->ro_binds.n; i++)
		free(s->ro_binds.items[i]);
	free(s->ro_binds.items);
	free(s->image_tree);
	if (s->image_hold > 0)
		close(s->image_hold);
	memset(s, 0, sizeof(*s));
}

/* Copies @p spec's shape into @p s (freed first). 0, or -1 out of memory. */
static int shape_set(shape_t *s, const tb_sandbox_spec_t *spec)
{
	size_t n = spec->ro_binds ? spec->ro_binds->n : 0;

	shape_free(s);
	*s = (shape_t){ .workspace_mb = spec->workspace_mb,
			.outputs_mb = spec->outputs_mb,
			.memory_mb = spec->memory_mb,
			.pids = spec->pids,
			.cpu_millis = spec->cpu_millis,
			.max_open_files = spec->max_open_files,
			.max_file_mb = spec->max_file_mb,
			.writable_mb = spec->writable_mb };
	if (spec->image_tree && !(s->image_tree = strdup(spec->image_tree)))
		return -1;
	if (spec->image_tree && spec->image_hold > 0 &&
	    (s->image_hold = fcntl(spec->image_hold, F_DUPFD_CLOEXEC, 3)) < 0)
		return -1;
	if (n && !(s->ro_binds.items = calloc(n, sizeof(char *))))
		return -1;
	for (size_t i = 0; i < n; i++, s->ro_binds.n++)
		if (!(s->ro_binds.items[i] = strdup(spec->ro_binds->items[i])))
			return -1;
	return 0;
}

/* Whether a sandbox built to @p s serves @p spec (limits are set at
 * assignment, so they do not count). */
static int shape_fits(const shape_t *s, const tb_sandbox_spec_t *spec)
{
	size_t n = spec->ro_binds ? spec->ro_binds->n : 0;

	if (s->workspace_mb != spec->workspace_mb || s->outputs_mb != spec->outputs_mb ||
	    s->max_open_files != spec->max_open_files || s->max_file_mb != spec->max_file_mb ||
	    s->ro_binds.n != n || !s->image_tree != !spec->image_tree)
		return 0;
	if (s->image_tree &&
	    (strcmp(s->image_tree, spec->image_tree) != 0 || s->writable_mb != spec->writable_mb))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (strcmp(s->ro_binds.items[i], spec->ro_binds->items[i]))
			return 0;
	return 1;
}

/* Builds one sandbox for slot @p k to @p s, outside the lock. */
static int build(tb_sandbox_pool_t *p, unsigned k, const shape_t *s, unsigned long long n,
		 tb_sandbox_t **out, tb_error_t *err)
{
	char name[64];
	/* Task sandboxes are "<task>-<attempt>": ending in a word, these
	 * never take a name a task could. */
	snprintf(name, sizeof(name), "pool%u-%llu-next", k, n);
	tb_sandbox_spec_t spec = {
		.name = name,
		.hostname = "task",
		.slot = k,
		.work_root = p->work_root,
		.group = p->group,
		.ro_binds = &s->ro_binds,
		.workspace_mb = s->workspace_mb,
		.outputs_mb = s->outputs_mb,
		.memory_mb = s->memory_mb,
		.pids = s->pids,
		.cpu_millis = s->cpu_millis,
		.max_open_files = s->max_open_files,
		.max_file_mb = s->max_file_mb,
		.image_tree = s->image_tree,
		.writable_mb = s->writable_mb,
		.image_hold = s->image_hold,
	};
	return tb_sandbox_prepare(out, p->policy, &spec, err);
}

static void *pool_main(void *arg)
{
	tb_sandbox_pool_t *p = arg;

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		unsigned k = 0;
		while (k < p->nslots && !(p->slots[k].wanted && !p->slots[k].sb &&
					  !p->slots[k].building && !p->no_spares))
			k++;
		if (k == p->nslots) {
			pthread_cond_wait(&p->cond, &p->lock);
			continue;
		}
		slot_t *s = &p->slots[k];
		shape_t shape = s->want; /* moves: the slot's next ask sets it anew */
		memset(&s->want, 0, sizeof(s->want));
		unsigned long long n = ++p->built;
		s->wanted = 0;
		s->building = 1;
		pthread_mutex_unlock(&p->lock);

		tb_sandbox_t *sb = NULL;
		tb_error_t err;
		int rc = build(p, k, &shape, n, &sb, &err);

		pthread_mutex_lock(&p->lock);
		s->building = 0;
		if (rc == 0) {
			s->sb = sb;
			shape_free(&s->sb_shape);
			s->sb_shape = shape;
			s->failures = 0;
		} else {
			/* The slot's next task builds its own, and asks again. */
			if (s->failures++ == 0)
				tb_warn(NULL, "sandbox pool: slot %u: %s", k, err.msg);
			shape_free(&shape);
		}
		pthread_cond_broadcast(&p->cond);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int tb_sandbox_pool_new(tb_sandbox_pool_t **out, const tb_seccomp_t *policy, const char *work_root,
			const char *group, unsigned slots, tb_error_t *err)
{
	tb_sandbox_pool_t *p = calloc(1, sizeof(*p));

	*out = NULL;
	if (!p || !(p->slots = calloc(slots ? slots : 1, sizeof(slot_t))) ||
	    !(p->work_root = strdup(work_root)) || !(p->group = strdup(group))) {
		if (p) {
			free(p->slots);
			free(p->work_root);
		}
		free(p);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	p->policy = policy;
	p->nslots = slots;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	unsigned want = slots < POOL_THREADS ? slots : POOL_THREADS;
	while (p->nthreads < want &&
	       pthread_create(&p->threads[p->nthreads], NULL, pool_main, p) == 0)
		p->nthreads++;
	if (!p->nthreads) {
		tb_sandbox_pool_free(p);
		return tb_error_set(err, TB_EIO, "sandbox pool: cannot start its threads");
	}
	*out = p;
	return 0;
}

int tb_sandbox_pool_create(tb_sandbox_pool_t *p, const tb_sandbox_spec_t *spec, int next,
			   tb_sandbox_t **out, int *prepared, tb_error_t *err)
{
	tb_sandbox_t *sb = NULL, *stale = NULL;
	int rc;

	*out = NULL;
	if (prepared)
		*prepared = 0;
	/* A root served for one sandbox (spec image_root: its ids are that
	 * sandbox's) is never built ahead: the slot's next one is left as it
	 * is for the next task. */
	if (spec->slot >= p->nslots || spec->image_root)
		return tb_sandbox_create(out, p->policy, spec, err);
	slot_t *s = &p->slots[spec->slot];
	pthread_mutex_lock(&p->lock);
	while (s->building)
		pthread_cond_wait(&p->cond, &p->lock);
	if (s->sb && shape_fits(&s->sb_shape, spec))
		sb = s->sb;
	else
		stale = s->sb;
	s->sb = NULL;
	shape_free(&s->sb_shape); /* the sandbox holds its image itself */
	/* The slot's next sandbox, built while this task runs. */
	if (!next)
		shape_free(&s->want);                       /* and the image it held */
	s->wanted = next && shape_set(&s->want, spec) == 0; /* not to a partial copy */
	if (s->wanted)
		pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);

	if (stale)
		tb_sandbox_destroy(stale, NULL);
	if (sb) {
		if ((rc = tb_sandbox_assign(sb, spec, err)) == 0) {
			*out = sb;
			if (prepared)
				*prepared = 1;
			return 0;
		}
		tb_sandbox_destroy(sb, NULL);
		if (rc == TB_EINVAL) /* the task's own paths: a fresh one fails too */
			return rc;
		/* Its init died waiting, say: a fresh one instead. */
		tb_warn(NULL, "sandbox pool: a prepared sandbox failed (%s): building one now",
			err->msg);
	}
	return tb_sandbox_create(out, p->policy, spec, err);
}

void tb_sandbox_pool_drop_spares(tb_sandbox_pool_t *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->no_spares = 1;
	for (unsigned k = 0; k < p->nslots; k++)
		while (p->slots[k].building)
			pthread_cond_wait(&p->cond, &p->lock);
	for (unsigned k = 0; k < p->nslots; k++) {
		slot_t *s = &p->slots[k];
		/* torn down under the lock: a slot asking meanwhile waits, then
		 * finds none and builds its own */
		tb_sandbox_destroy(s->sb, NULL);
		s->sb = NULL;
		s->wanted = 0;
		shape_free(&s->want);
		shape_free(&s->sb_shape);
	}
	pthread_mutex_unlock(&p->lock);
}

void tb_sandbox_pool_free(tb_sandbox_pool_t *p)
{
	if (!p)
		return;
	/* The builds under way finish; the sandboxes nobody took are torn
	 * down while their builders still live (parents to the end); then
	 * the builders go. */
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_broadcast(&p->cond);
	for (unsigned k = 0; k < p->nslots; k++)
		while (p->slots[k].building)
			pthread_cond_wait(&p->cond, &p->lock);
	pthread_mutex_unlock(&p->lock);
	for (unsigned k = 0; k < p->nslots; k++) {
		tb_sandbox_destroy(p->slots[k].sb, NULL);
		p->slots[k].sb = NULL;
		shape_free(&p->slots[k].want);
		shape_free(&p->slots[k].sb_shape);
	}
	for (unsigned i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p->slots);
	free(p->work_root);
	free(p->group);
	free(p);
}
