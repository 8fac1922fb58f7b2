/*
 * sandbox_pool.h: sandboxes built ahead, one per slot (tb_sandbox_pool).
 *
 * Building a sandbox (namespaces, cgroup, root file system) is most of a
 * short task's overhead, and none of it depends on the task. The pool's
 * threads (up to four) build the next sandbox of a slot
 * (tb_sandbox_prepare) while the slot is still busy with its current
 * task, unless that task is a long session (tb_sandbox_pool_create's
 * next); the slot's next task takes it and only assigns it (hostname,
 * recipe, inputs, limits).
 *
 * A prepared sandbox fits the task that asked for it: the next one is
 * built with the same runtime shape (tmpfs sizes, read-only binds,
 * rlimits) and on the same image, if any. A task with another shape or
 * image gets a sandbox built on the spot, and the slot's next one is
 * built to its shape. Nothing is built for a slot before its first task.
 * An image a slot's next sandbox is built on stays held in the cache
 * (the spec's image_hold, duplicated) until that sandbox is taken and
 * destroyed, or is replaced.
 *
 * A pool thread is the parent of every sandbox it builds, and the
 * kernel's parent-death signal ends those with it: the pool is freed only
 * after the last task using one of its sandboxes has ended.
 *
 * Isolation: a prepared sandbox holds an id range of its own from the
 * moment it is built (sandbox_ids.h), like every sandbox, and runs only
 * its init until it is assigned its task.
 */
#ifndef TB_SANDBOX_POOL_H
#define TB_SANDBOX_POOL_H

#include "sandbox.h"

typedef struct tb_sandbox_pool tb_sandbox_pool_t;

/**
 * Starts the pool's threads for @p slots slots, building sandboxes under
 * @p work_root with names prefixed by @p group. @p policy must outlive
 * the pool. @return 0; TB_ENOMEM; TB_EIO if no thread can start
 */
int tb_sandbox_pool_new(tb_sandbox_pool_t **out, const tb_seccomp_t *policy, const char *work_root,
			const char *group, unsigned slots, tb_error_t *err);

/**
 * A sandbox for @p spec (as tb_sandbox_create): the slot's prepared one if
 * it has @p spec's shape (waiting for it if it is being built), else one
 * built now by the calling thread, which must outlive it. With @p next,
 * the pool then builds the slot's next sandbox to @p spec's shape; without
 * it, the slot has none until a later call asks for one.
 *
 * An interactive session passes next = 0: it may hold its slot for hours,
 * mostly frozen, and a successor built for it would hold an init, a
 * memory cgroup and eight file systems all that time. Those are what a host of
 * a thousand idle sessions runs out of (the kernel keeps, in every memory
 * cgroup, a map of every mount's shrinker: docs/performance.md), and the
 * task after a session pays one build, tens of milliseconds, once.
 * @param[out] prepared 1 when the sandbox came from the pool (may be NULL)
 */
int tb_sandbox_pool_create(tb_sandbox_pool_t *p, const tb_sandbox_spec_t *spec, int next,
			   tb_sandbox_t **out, int *prepared, tb_error_t *err);

/** Destroys the sandboxes built ahead that no task took (their cgroups
 * with them; builds under way are waited for) and builds no more: for a
 * worker that stops, whose drain may end at its timeout with tasks still
 * running, when the pool itself cannot be freed. Later tb_sandbox_pool_
 * create() calls build on the spot. The threads stay (parents of the
 * sandboxes tasks hold). NULL is a no-op. */
void tb_sandbox_pool_drop_spares(tb_sandbox_pool_t *p);

/** Stops the thread and destroys the sandboxes no task took. Only after
 * every sandbox the pool handed out has been destroyed. NULL is a no-op. */
void tb_sandbox_pool_free(tb_sandbox_pool_t *p);

#endif
