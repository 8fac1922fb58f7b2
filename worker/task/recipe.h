/*
 * recipe.h: a task's recipe, from a git repository URL and a pinned
 * commit to a directory the sandbox binds read-only at /recipe, with its
 * manifest (taskbox.json) parsed.
 *
 * Repositories are fetched (libgit2) into a bare mirror per URL under
 * <cache>/repos; a pinned commit never changes, so its checkout is cached
 * by commit id under <cache>/checkouts/<commit> and shared by every task
 * that names it: the second task of a recipe costs no fetch and no
 * checkout. Checkouts are built in a temporary directory and renamed into
 * place, so a crash or two slots racing never leave half a recipe. A
 * commit the repository does not have (after a fetch) is poison; a fetch
 * that fails (the server is down) is retryable. This file does not know
 * about tasks or sandboxes.
 */
#ifndef TB_RECIPE_H
#define TB_RECIPE_H

#include "tb/error.h"
#include "tb/recipe_manifest.h"

#include <stddef.h>

typedef struct tb_recipe_cache tb_recipe_cache_t;

/** Opens (creating) the cache under @p dir. */
int tb_recipe_cache_open(tb_recipe_cache_t **out, const char *dir, tb_error_t *err);

void tb_recipe_cache_close(tb_recipe_cache_t *c);

/**
 * Makes sure @p commit of @p url is checked out, and parses its manifest.
 * @param commit 40 lowercase hex digits (the task schema guarantees it)
 * @param[out] dir the checkout's path (at most @p len bytes)
 * @param[out] manifest released with tb_recipe_manifest_free()
 * @return 0; TB_EPOISON (no such commit, no or a bad taskbox.json);
 *         TB_ERETRY (the fetch failed: try again later); TB_EIO
 */
int tb_recipe_checkout(tb_recipe_cache_t *c, const char *url, const char *commit, char *dir,
		       size_t len, tb_recipe_manifest_t *manifest, tb_error_t *err);

#endif
