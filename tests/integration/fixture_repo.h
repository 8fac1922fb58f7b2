/*
 * fixture_repo.h: recipe repositories committed with git, as the tests
 * and benchmarks make them (test_lifecycle, test_recipe,
 * test_worker_kafka, test_replay, bench_worker). Plain C and the git
 * command, no cmocka: each function returns -1 having said why on
 * stderr, and a cmocka test fails on it, a set-up or a benchmark gives up.
 */
#ifndef TB_TEST_FIXTURE_REPO_H
#define TB_TEST_FIXTURE_REPO_H

#include <stdarg.h>
#include <stddef.h>

/** The commit id of @p repo's HEAD into @p commit. @return 0 or -1. */
int tb_fixture_head(const char *repo, char *commit, size_t len);

/** Commits everything in git repository @p repo (made if missing, with
 * the files of @p copy_from if not NULL); its commit id into @p commit.
 * @return 0 or -1. */
int tb_fixture_commit(const char *repo, const char *copy_from, char *commit, size_t len);

/**
 * Writes files into git repository @p repo (made, and `git init`, if
 * missing) and commits everything in it, as tb_fixture_commit: the files
 * given two by two, name (a path in the repository, its directories made)
 * then text, from @p name on, ended by a NULL name (@p name NULL: none,
 * the repository committed as it is). Files already there stay unless
 * written over. The commit id (40 hex digits) into @p commit.
 * @return 0, or -1 having said why.
 */
int tb_fixture_recipe(const char *repo, char *commit, size_t len, const char *name, ...)
    __attribute__((sentinel));

/** tb_fixture_recipe with the rest of the pairs (text, then name, text,
 * ..., NULL) in @p rest: for a caller's own variadic wrapper. */
int tb_fixture_vrecipe(const char *repo, char *commit, size_t len, const char *name, va_list rest);

#endif
