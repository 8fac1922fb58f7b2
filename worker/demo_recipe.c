/*
 * demo_recipe.c: a repository whose work tree is the recipe directory
 * itself and whose git directory is elsewhere, so nothing is copied and
 * the source tree is not touched.
 */
#include "demo_recipe.h"

#include <git2.h>
#include <stdio.h>
#include <string.h>

static int fail(tb_error_t *err, const char *what)
{
	const git_error *e = git_error_last();
	return tb_error_set(err, TB_EIO, "demo recipe: %s: %s", what,
			    e && e->message ? e->message : "libgit2 error");
}

int tb_demo_recipe_commit(const char *src_dir, const char *git_dir, char *url, size_t url_len,
			  char commit[41], tb_error_t *err)
{
	git_repository_init_options opts;
	git_repository *repo = NULL;
	git_signature *sig = NULL;
	git_index *index = NULL;
	git_tree *tree = NULL;
	git_oid tree_id, commit_id;
	int rc = 0;

	git_libgit2_init();
	git_repository_init_options_init(&opts, GIT_REPOSITORY_INIT_OPTIONS_VERSION);
	opts.flags = GIT_REPOSITORY_INIT_MKPATH | GIT_REPOSITORY_INIT_NO_DOTGIT_DIR;
	opts.workdir_path = src_dir;
	if (git_repository_init_ext(&repo, git_dir, &opts) < 0) {
		rc = fail(err, "init");
		goto out;
	}
	char *all[] = { "*" };
	git_strarray paths = { all, 1 };
	if (git_repository_index(&index, repo) < 0 ||
	    git_index_add_all(index, &paths, GIT_INDEX_ADD_DEFAULT, NULL, NULL) < 0 ||
	    git_index_write_tree(&tree_id, index) < 0 ||
	    git_tree_lookup(&tree, repo, &tree_id) < 0) {
		rc = fail(err, "add files");
		goto out;
	}
	if (git_signature_now(&sig, "taskbox demo", "demo@taskbox.invalid") < 0 ||
	    git_commit_create_v(&commit_id, repo, "HEAD", sig, sig, NULL, "the hello recipe", tree,
				0) < 0) {
		rc = fail(err, "commit");
		goto out;
	}
	git_oid_tostr(commit, 41, &commit_id);
	snprintf(url, url_len, "file://%s", git_dir);
out:
	git_tree_free(tree);
	git_index_free(index);
	git_signature_free(sig);
	git_repository_free(repo);
	git_libgit2_shutdown();
	return rc;
}
