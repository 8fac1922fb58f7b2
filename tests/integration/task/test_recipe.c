/*
 * test_recipe.c: recipes from real git repositories (made here with the
 * git command, served by file:// URLs): checkout at a pinned commit, the
 * manifest parsed, the cache by commit (a second checkout works with the
 * repository gone), a later commit fetched, and the poison cases: a commit
 * the repository does not have, no taskbox.json, a bad one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture_repo.h"
#include "recipe.h"

static char root[64] = "/tmp/tb-recipe-test-XXXXXX";
static char repo[128], url[160], cache[128];
static tb_recipe_cache_t *rc_cache;

static void sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		fail_msg("command failed: %s", cmd);
}

/* Commits @p manifest (NULL: none) and an agent; returns the commit id. */
static const char *commit(const char *manifest)
{
	static char id[64];

	if (!manifest)
		sh("cd %s && git rm -q --cached taskbox.json >/dev/null 2>&1; rm -f taskbox.json",
		   repo);
	/* without a manifest, the list ends after agent.sh */
	if (tb_fixture_recipe(repo, id, sizeof(id), "agent.sh", "echo hello\n",
			      manifest ? "taskbox.json" : NULL, manifest, NULL) < 0)
		fail_msg("cannot commit into %s", repo);
	return id;
}

#define GOOD                                                                                       \
	"{\"v\": 1, \"name\": \"hello\", \"agent\": {\"command\": [\"/bin/sh\", \"agent.sh\"]}}"

static void test_recipe__checks_out_the_pinned_commit_and_reads_the_manifest(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];
	tb_recipe_manifest_t m;
	tb_error_t err;
	struct stat st;

	(void)state;
	const char *id = commit(GOOD);
	if (tb_recipe_checkout(rc_cache, url, id, dir, sizeof(dir), &m, &err) != 0)
		fail_msg("%s", err.msg);
	assert_string_equal(m.name, "hello");
	assert_string_equal(m.agent.command.items[1], "agent.sh");
	tb_recipe_manifest_free(&m);
	snprintf(path, sizeof(path), "%s/agent.sh", dir);
	assert_int_equal(stat(path, &st), 0);
	assert_non_null(strstr(dir, id));
	/* Cached by commit: works with the repository gone. */
	sh("mv %s %s.away", repo, repo);
	assert_int_equal(tb_recipe_checkout(rc_cache, url, id, dir, sizeof(dir), &m, &err), 0);
	tb_recipe_manifest_free(&m);
	sh("mv %s.away %s", repo, repo);
}

static void test_recipe__a_later_commit_is_fetched(void **state)
{
	char dir[PATH_MAX];
	tb_recipe_manifest_t m;
	tb_error_t err;

	(void)state;
	const char *id =
	    commit("{\"v\": 1, \"name\": \"second\", \"agent\": {\"command\": [\"x\"]}}");
	if (tb_recipe_checkout(rc_cache, url, id, dir, sizeof(dir), &m, &err) != 0)
		fail_msg("%s", err.msg);
	assert_string_equal(m.name, "second");
	tb_recipe_manifest_free(&m);
}

static void test_recipe__unknown_commit_is_poison(void **state)
{
	char dir[PATH_MAX];
	tb_recipe_manifest_t m;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_recipe_checkout(rc_cache, url,
					    "1111111111111111111111111111111111111111", dir,
					    sizeof(dir), &m, &err),
			 TB_EPOISON);
	assert_non_null(
	    strstr(err.msg, "commit 1111111111111111111111111111111111111111 not found"));
}

static void test_recipe__missing_or_bad_manifest_is_poison(void **state)
{
	char dir[PATH_MAX];
	tb_recipe_manifest_t m;
	tb_error_t err;

	(void)state;
	const char *none = commit(NULL);
	assert_int_equal(tb_recipe_checkout(rc_cache, url, none, dir, sizeof(dir), &m, &err),
			 TB_EPOISON);
	assert_non_null(strstr(err.msg, "no taskbox.json"));
	const char *bad = commit("{\"v\": 1, \"name\": \"x\"}");
	assert_int_equal(tb_recipe_checkout(rc_cache, url, bad, dir, sizeof(dir), &m, &err),
			 TB_EPOISON);
	assert_non_null(strstr(err.msg, "field 'agent': required but missing"));
}

/* A repository that is not there will not be there next time: poison. A
 * server that does not answer may answer later: retry. (Nothing listens
 * on loopback port 1.) */
static void test_recipe__missing_repository_is_poison_unreachable_is_retryable(void **state)
{
	char dir[PATH_MAX];
	tb_recipe_manifest_t m;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_recipe_checkout(rc_cache, "file:///nonexistent/repo.git",
					    "2222222222222222222222222222222222222222", dir,
					    sizeof(dir), &m, &err),
			 TB_EPOISON);
	assert_non_null(strstr(err.msg, "no such repository"));
	assert_int_equal(tb_recipe_checkout(rc_cache, "http://127.0.0.1:1/repo.git",
					    "2222222222222222222222222222222222222222", dir,
					    sizeof(dir), &m, &err),
			 TB_ERETRY);
	assert_non_null(strstr(err.msg, "fetch"));
}

static int setup(void **state)
{
	tb_error_t err;

	(void)state;
	if (!mkdtemp(root))
		return -1;
	snprintf(repo, sizeof(repo), "%s/repo", root);
	snprintf(url, sizeof(url), "file://%s", repo);
	snprintf(cache, sizeof(cache), "%s/cache", root);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "git init -q %s", repo);
	if (system(cmd) != 0)
		return -1;
	return tb_recipe_cache_open(&rc_cache, cache, &err);
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;
	tb_recipe_cache_close(rc_cache);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_recipe__checks_out_the_pinned_commit_and_reads_the_manifest),
		cmocka_unit_test(test_recipe__a_later_commit_is_fetched),
		cmocka_unit_test(test_recipe__unknown_commit_is_poison),
		cmocka_unit_test(test_recipe__missing_or_bad_manifest_is_poison),
		cmocka_unit_test(
		    test_recipe__missing_repository_is_poison_unreachable_is_retryable),
	};
	if (system("git --version >/dev/null 2>&1") != 0) {
		printf("SKIP: the git command is needed to make test repositories\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
