/*
 * recipe.c: fetch, checkout and manifest with libgit2. Fetches of one
 * repository are serialised with an flock() on a file beside its mirror,
 * so slots (and workers sharing a cache) do not fetch into it at once.
 */
#include "recipe.h"

#include "tb/fsutil.h"
#include "tb/sigv4.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <git2.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct tb_recipe_cache {
	char dir[PATH_MAX / 2];
};

static int git_fail(tb_error_t *err, int code, const char *what)
{
	const git_error *e = git_error_last();
	return tb_error_set(err, code, "%s: %s", what,
			    e && e->message ? e->message : "libgit2 error");
}

static int ensure_dir(const char *path, tb_error_t *err)
{
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return tb_error_errno(err, TB_EIO, errno, "recipe cache: mkdir %s", path);
	return 0;
}

int tb_recipe_cache_open(tb_recipe_cache_t **out, const char *dir, tb_error_t *err)
{
	tb_recipe_cache_t *c;
	char sub[PATH_MAX];
	int rc;

	*out = NULL;
	if (strlen(dir) >= sizeof(c->dir))
		return tb_error_set(err, TB_EINVAL, "recipe cache: path too long");
	if ((rc = ensure_dir(dir, err)) < 0)
		return rc;
	snprintf(sub, sizeof(sub), "%s/repos", dir);
	if ((rc = ensure_dir(sub, err)) < 0)
		return rc;
	snprintf(sub, sizeof(sub), "%s/checkouts", dir);
	if ((rc = ensure_dir(sub, err)) < 0)
		return rc;
	git_libgit2_init(); /* reference-counted: balanced in close */
	if (!(c = calloc(1, sizeof(*c)))) {
		git_libgit2_shutdown();
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	snprintf(c->dir, sizeof(c->dir), "%s", dir);
	*out = c;
	return 0;
}

void tb_recipe_cache_close(tb_recipe_cache_t *c)
{
	if (!c)
		return;
	free(c);
	git_libgit2_shutdown();
}

/* The mirror of @p url and its lock file, named by the URL's hash: URLs
 * are not paths. */
static void mirror_paths(const tb_recipe_cache_t *c, const char *url, char *path, size_t plen,
			 char *lockpath, size_t lplen)
{
	char name[65];

	tb_sha256_hex(name, url, strlen(url));
	snprintf(path, plen, "%s/repos/%s.git", c->dir, name);
	snprintf(lockpath, lplen, "%s/repos/%s.lock", c->dir, name);
}

/* Opens (or creates) the bare mirror; the caller holds its lock. */
static int open_mirror(git_repository **out, const char *path, tb_error_t *err)
{
	if (git_repository_open_bare(out, path) == 0)
		return 0;
	/* A crash while creating it may have left half a mirror: start over. */
	tb_remove_tree(AT_FDCWD, path);
	if (git_repository_init(out, path, 1) < 0)
		return git_fail(err, TB_EIO, "recipe: create mirror");
	return 0;
}

static int fetch(git_repository *repo, const char *url, tb_error_t *err)
{
	char *specs[] = { "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*" };
	git_strarray refspecs = { specs, 2 };
	git_fetch_options opts;
	git_remote *remote = NULL;
	int rc = 0;

	/* The _init functions, not the INIT macros: those leave fields to
	 * implicit zero, which -Wmissing-field-initializers refuses. */
	git_fetch_options_init(&opts, GIT_FETCH_OPTIONS_VERSION);
	opts.download_tags = GIT_REMOTE_DOWNLOAD_TAGS_ALL;
	if (git_remote_create_anonymous(&remote, repo, url) < 0)
		return git_fail(err, TB_EPOISON, "recipe: bad repository URL");
	if ((rc = git_remote_fetch(remote, &refspecs, &opts, NULL)) < 0) {
		/* A repository that is not there (or refuses us) will not be
		 * there on the next attempt either: poison. A network error
		 * may pass: retry. */
		const git_error *e = git_error_last();
		const char *m = e && e->message ? e->message : "";
		int gone = rc == GIT_ENOTFOUND || rc == GIT_EAUTH || strstr(m, "404") ||
			   strstr(m, "not found") || strstr(m, "does not exist") ||
			   strstr(m, "not a git repository") || strstr(m, "failed to resolve path");
		rc = git_fail(err, gone ? TB_EPOISON : TB_ERETRY,
			      gone ? "recipe: no such repository" : "recipe: fetch");
	}
	git_remote_free(remote);
	return rc;
}

/* Checks @p tree out into a fresh directory and renames it to @p dir. */
static int checkout(git_repository *repo, git_tree *tree, const char *dir, tb_error_t *err)
{
	git_checkout_options opts;
	char tmp[PATH_MAX];
	int rc = 0;

	git_checkout_options_init(&opts, GIT_CHECKOUT_OPTIONS_VERSION);
	snprintf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", dir);
	if (!mkdtemp(tmp))
		return tb_error_errno(err, TB_EIO, errno, "recipe: mkdtemp %s", tmp);
	chmod(tmp, 0755); /* the sandbox's users read it */
	opts.checkout_strategy = GIT_CHECKOUT_FORCE;
	opts.target_directory = tmp;
	opts.dir_mode = 0755;
	opts.file_mode = 0; /* as the tree says (644 or 755) */
	if (git_checkout_tree(repo, (git_object *)tree, &opts) < 0) {
		rc = git_fail(err, TB_EIO, "recipe: checkout");
	} else if (rename(tmp, dir) < 0 && errno != ENOTEMPTY && errno != EEXIST) {
		rc = tb_error_errno(err, TB_EIO, errno, "recipe: rename %s", tmp);
	} /* else: ours, or a racing slot's identical one, is in place */
	/* Lost the race to a slot with the same commit, or failed: ours goes. */
	if (access(tmp, F_OK) == 0 && tb_remove_tree(AT_FDCWD, tmp) < 0 && rc == 0)
		rc = tb_error_errno(err, TB_EIO, errno, "recipe: remove %s", tmp);
	return rc;
}

static int read_manifest(git_repository *repo, git_tree *tree, const char *origin,
			 tb_recipe_manifest_t *out, tb_error_t *err)
{
	git_tree_entry *entry = NULL;
	git_blob *blob = NULL;
	int rc;

	if (git_tree_entry_bypath(&entry, tree, TB_RECIPE_MANIFEST_FILE) < 0)
		return tb_error_set(err, TB_EPOISON, "%s: no %s at the root of the recipe", origin,
				    TB_RECIPE_MANIFEST_FILE);
	if (git_tree_entry_type(entry) != GIT_OBJECT_BLOB ||
	    git_blob_lookup(&blob, repo, git_tree_entry_id(entry)) < 0) {
		git_tree_entry_free(entry);
		return tb_error_set(err, TB_EPOISON, "%s: %s is not a file", origin,
				    TB_RECIPE_MANIFEST_FILE);
	}
	rc = tb_recipe_manifest_parse(out, git_blob_rawcontent(blob),
				      (size_t)git_blob_rawsize(blob), origin, err);
	if (rc < 0 && rc != TB_ENOMEM) {
		/* A bad manifest at a pinned commit stays bad: poison. */
		if (err)
			err->code = TB_EPOISON;
		rc = TB_EPOISON;
	}
	git_blob_free(blob);
	git_tree_entry_free(entry);
	return rc;
}

int tb_recipe_checkout(tb_recipe_cache_t *c, const char *url, const char *commit, char *dir,
		       size_t len, tb_recipe_manifest_t *manifest, tb_error_t *err)
{
	git_repository *repo = NULL;
	git_commit *gc = NULL;
	git_tree *tree = NULL;
	char lockpath[PATH_MAX], mirror[PATH_MAX], origin[2300];
	git_oid oid;
	int lock = -1, rc;

	memset(manifest, 0, sizeof(*manifest));
	snprintf(origin, sizeof(origin), "%s@%s:%s", url, commit, TB_RECIPE_MANIFEST_FILE);
	if (strlen(commit) != 40 || git_oid_fromstr(&oid, commit) < 0)
		return tb_error_set(err, TB_EPOISON, "recipe: '%s' is not a full commit id",
				    commit);
	if ((size_t)snprintf(dir, len, "%s/checkouts/%s", c->dir, commit) >= len)
		return tb_error_set(err, TB_EINVAL, "recipe: path too long");
	/* One slot at a time per repository: creating the mirror, fetching
	 * into it, checking out of it. */
	mirror_paths(c, url, mirror, sizeof(mirror), lockpath, sizeof(lockpath));
	lock = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (lock < 0 || flock(lock, LOCK_EX) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "recipe: lock %s", lockpath);
		goto out;
	}
	if ((rc = open_mirror(&repo, mirror, err)) < 0)
		goto out;
	/* Fetch only when the mirror lacks the commit: pinned commits never
	 * change, so a mirror that has one is up to date for it. */
	if (git_commit_lookup(&gc, repo, &oid) < 0) {
		if ((rc = fetch(repo, url, err)) < 0)
			goto out;
		if (git_commit_lookup(&gc, repo, &oid) < 0) {
			rc = tb_error_set(err, TB_EPOISON, "recipe %s: commit %s not found", url,
					  commit);
			goto out;
		}
	}
	if (git_commit_tree(&tree, gc) < 0) {
		rc = git_fail(err, TB_EIO, "recipe: tree");
		goto out;
	}
	if ((rc = read_manifest(repo, tree, origin, manifest, err)) < 0)
		goto out;
	if (access(dir, F_OK) != 0 && (rc = checkout(repo, tree, dir, err)) < 0)
		tb_recipe_manifest_free(manifest);
out:
	if (lock >= 0)
		close(lock); /* releases the flock */
	git_tree_free(tree);
	git_commit_free(gc);
	git_repository_free(repo);
	return rc;
}
