/*
 * demo_recipe.c: every regular file under the recipe directory goes into
 * an in-memory index, the index becomes a tree in a new bare repository,
 * the tree a commit. The source directory is only read.
 */
#include "demo_recipe.h"

#include "tb/fsutil.h"

#include <ftw.h>
#include <git2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static git_index *walk_index;
static git_repository *walk_repo;
static size_t walk_root_len;
static int walk_failed;
static tb_error_t walk_err; /* a file that could not be read */

static int add_file(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	git_index_entry e;
	char *buf;
	size_t n;

	(void)ftw;
	if (type == FTW_D && strstr(path + walk_root_len, "/.git") == path + walk_root_len)
		return FTW_SKIP_SUBTREE;
	if (type != FTW_F || st->st_size > (8 << 20))
		return 0;
	if (tb_read_file(path, 8 << 20, &buf, &n, &walk_err) < 0) {
		walk_failed = 1;
		return FTW_STOP;
	}
	memset(&e, 0, sizeof(e));
	e.mode = st->st_mode & 0111 ? GIT_FILEMODE_BLOB_EXECUTABLE : GIT_FILEMODE_BLOB;
	e.path = path + walk_root_len + 1;
	/* The blob into the repository, its entry into the in-memory index
	 * (which, having no repository of its own, cannot store blobs). */
	if (git_blob_create_from_buffer(&e.id, walk_repo, buf, n) < 0 ||
	    git_index_add(walk_index, &e) < 0)
		walk_failed = 1;
	free(buf);
	return walk_failed ? FTW_STOP : 0;
}

static int fail(tb_error_t *err, const char *what)
{
	const git_error *e = git_error_last();
	return tb_error_set(err, TB_EIO, "demo recipe: %s: %s", what,
			    e && e->message ? e->message : "libgit2 error");
}

int tb_demo_recipe_commit(const char *src_dir, const char *git_dir, char *url, size_t url_len,
			  char commit[41], tb_error_t *err)
{
	git_repository *repo = NULL;
	git_signature *sig = NULL;
	git_tree *tree = NULL;
	git_oid tree_id, commit_id;
	int rc = 0;

	git_libgit2_init();
	walk_index = NULL;
	if (git_repository_init(&repo, git_dir, 1) < 0 || git_index_new(&walk_index) < 0) {
		rc = fail(err, "init");
		goto out;
	}
	walk_repo = repo;
	walk_root_len = strlen(src_dir);
	walk_failed = 0;
	walk_err.msg[0] = '\0';
	if (nftw(src_dir, add_file, 16, FTW_PHYS | FTW_ACTIONRETVAL) < 0 || walk_failed) {
		if (walk_err.msg[0])
			rc = tb_error_set(err, TB_EIO, "demo recipe: %s", walk_err.msg);
		else
			rc = tb_error_set(err, TB_EIO, "demo recipe: cannot read %s", src_dir);
		goto out;
	}
	if (git_index_write_tree_to(&tree_id, walk_index, repo) < 0 ||
	    git_tree_lookup(&tree, repo, &tree_id) < 0) {
		rc = fail(err, "tree");
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
	git_index_free(walk_index);
	walk_index = NULL;
	git_signature_free(sig);
	git_repository_free(repo);
	git_libgit2_shutdown();
	return rc;
}
