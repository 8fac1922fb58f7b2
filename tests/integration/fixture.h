/*
 * fixture.h: what the tests that build sandboxes share (test_sandbox,
 * test_collect, test_lifecycle, test_interactive): a temporary root on
 * the host (mode 0711, removed at the end), the sandboxes' work root in
 * it, the seccomp policy, and, as a test asks, a directory store, a
 * recipe cache, a runtimes directory holding "test" (the default
 * runtime, renamed); and (fixture_repo.h) recipe repositories committed
 * with git.
 */
#ifndef TB_TEST_FIXTURE_H
#define TB_TEST_FIXTURE_H

#include "fixture_repo.h"
#include "image.h"
#include "recipe.h"
#include "sandbox.h"
#include "tb/store.h"

#include <stddef.h>

enum {
	TB_FIXTURE_STORE = 1,   /* F.store: a directory store under root/store */
	TB_FIXTURE_RECIPES = 2, /* F.recipes: a recipe cache under root/cache */
	TB_FIXTURE_RUNTIME = 4, /* root/runtimes/test.json */
	TB_FIXTURE_IMAGES = 8,  /* F.images: an image cache under root/cache */
};

typedef struct tb_fixture {
	char root[64];      /* /tmp/tb-<name>-test-XXXXXX */
	char work[128];     /* root/work: the sandboxes' work root */
	char runtimes[128]; /* root/runtimes */
	tb_seccomp_t *policy;
	tb_store_t *store;
	tb_recipe_cache_t *recipes;
	tb_image_cache_t *images;
} tb_fixture_t;

/** The host directories a test sandbox binds read-only. */
extern const tb_strlist_t tb_fixture_binds;

/**
 * Makes the root for test binary @p name, sweeps what a crashed run of
 * sandbox group @p group left in its work root, compiles the policy, and
 * opens the @p parts (TB_FIXTURE_*). @return 0, or -1 having said why.
 */
int tb_fixture_setup(tb_fixture_t *f, const char *name, const char *group, unsigned parts);

/** Closes what setup opened and removes the root. @return 0 or -1. */
int tb_fixture_teardown(tb_fixture_t *f);

/** Runs a shell command; the test fails if it does. */
void tb_fixture_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
