/*
 * uploads.c: files into the store under their content's name (uploads.h).
 */
#include "uploads.h"

#include "tb/blocks.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DEPTH 64

typedef struct walk {
	tb_store_t *s;
	size_t max, done;
	size_t root_len; /* of the names' first part, the directory's own */
	void (*fn)(void *ud, const tb_upload_t *u);
	void *ud;
	tb_error_t *err;
} walk_t;

/* Puts @p b, the block list of the content @p sha256 names, at
 * blocks/<sha256> unless it is there (@p check: look first; a fresh
 * upload's list is new). */
static int put_blocks(walk_t *w, const char *sha256, const tb_blocks_t *b, int check)
{
	char key[80];
	tb_object_info_t info;
	int rc;

	snprintf(key, sizeof(key), TB_BLOCKS_PREFIX "%s", sha256);
	if (check && (rc = tb_store_head(w->s, key, &info, w->err)) == 0 &&
	    info.size == b->n * 32 && !strcmp(info.sha256, b->digest))
		return 0;
	/* create-only: the same list there already is fine */
	return tb_store_put_bytes(w->s, key, b->n ? (const void *)b->sha : "", b->n * 32, NULL,
				  w->err);
}

/* put_one's upload of @p u, and of its block list @p b. */
static int put_content(walk_t *w, int fd, const char *name, tb_upload_t *u, const tb_blocks_t *b)
{
	tb_object_info_t info;
	int rc;

	snprintf(u->key, sizeof(u->key), TB_UPLOADS_PREFIX "%s", u->sha256);
	rc = tb_store_head(w->s, u->key, &info, w->err);
	if (rc == 0 && info.size == u->size &&
	    (!info.sha256[0] || !strcmp(info.sha256, u->sha256))) {
		u->uploaded = 0; /* that content is there already */
	} else if (rc == 0 || rc == TB_ENOTFOUND) {
		if ((rc = tb_store_put_fd(w->s, u->key, fd, &info, w->err)) < 0)
			return tb_error_prefix(w->err, "%s", name);
		if (strcmp(info.sha256, u->sha256) != 0) { /* it changed as it was read */
			tb_error_t derr; /* the key names other content: not kept */
			tb_store_delete(w->s, u->key, &derr);
			return tb_error_set(w->err, TB_EINVAL,
					    "%s changed while it was uploaded: upload it again "
					    "when it is still",
					    name);
		}
		u->uploaded = 1;
	} else {
		return tb_error_prefix(w->err, "%s", name);
	}
	if ((rc = put_blocks(w, u->sha256, b, !u->uploaded)) < 0)
		return tb_error_prefix(w->err, "%s: its block list", name);
	w->done++;
	if (w->fn)
		w->fn(w->ud, u);
	return 0;
}

/* One regular file, open as @p fd, named @p name. */
static int put_one(walk_t *w, int fd, const char *name)
{
	tb_upload_t u = { .name = name,
			  .rel = name + (strlen(name) > w->root_len ? w->root_len : 0) };
	tb_blocks_t b;
	int rc;

	if (w->done == w->max)
		return tb_error_set(w->err, TB_EINVAL, "%s: more than %zu files", name, w->max);
	/* one pass names it and digests its blocks */
	if ((rc = tb_blocks_of_fd(fd, name, &b, u.sha256, w->err)) < 0)
		return rc;
	u.size = b.size;
	memcpy(u.blocks, b.digest, sizeof(u.blocks));
	rc = put_content(w, fd, name, &u, &b);
	tb_blocks_free(&b);
	return rc;
}

static int walk_dir(walk_t *w, int dfd, const char *name, int depth);

/* The entry @p e of directory @p dfd, named @p name. */
static int walk_entry(walk_t *w, int dfd, const char *entry, const char *name, int depth)
{
	struct stat st;
	int fd, rc = 0;

	if (fstatat(dfd, entry, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return tb_error_errno(w->err, TB_EIO, errno, "%s", name);
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "taskbox: %s skipped: not a regular file or a directory\n", name);
		return 0;
	}
	if ((fd = openat(dfd, entry, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return tb_error_errno(w->err, TB_EIO, errno, "%s", name);
	rc = S_ISDIR(st.st_mode) ? walk_dir(w, fd, name, depth + 1) : put_one(w, fd, name);
	close(fd);
	return rc;
}

/* Every entry of the directory open as @p dfd, in name order. */
static int walk_dir(walk_t *w, int dfd, const char *name, int depth)
{
	struct dirent **list = NULL;
	char proc[64];
	int n, rc = 0;

	if (depth > MAX_DEPTH)
		return tb_error_set(w->err, TB_EINVAL, "%s: more than %d directories deep", name,
				    MAX_DEPTH);
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", dfd);
	if ((n = scandir(proc, &list, NULL, alphasort)) < 0)
		return tb_error_errno(w->err, TB_EIO, errno, "%s", name);
	for (int i = 0; i < n; i++) {
		const char *e = list[i]->d_name;
		char *child = NULL;
		if (rc == 0 && strcmp(e, ".") && strcmp(e, "..")) {
			if (asprintf(&child, "%s%s%s", name, name[0] ? "/" : "", e) < 0)
				abort(); /* out of memory: docs/architecture.md, "Conventions" */
			rc = walk_entry(w, dfd, e, child, depth);
			free(child);
		}
		free(list[i]);
	}
	free(list);
	return rc;
}

int tb_uploads_put(tb_store_t *s, const char *path, size_t max,
		   void (*fn)(void *ud, const tb_upload_t *u), void *ud, tb_error_t *err)
{
	walk_t w = { .s = s, .max = max, .fn = fn, .ud = ud, .err = err };
	char *copy = strdup(path);
	struct stat st;
	int fd, rc;

	if (!copy)
		abort(); /* out of memory: docs/architecture.md, "Conventions" */
	for (size_t n = strlen(copy); n > 1 && copy[n - 1] == '/'; n--)
		copy[n - 1] = '\0';
	const char *base = strrchr(copy, '/') ? strrchr(copy, '/') + 1 : copy;
	if (!strcmp(base, ".") || !strcmp(base, "..") || !base[0])
		base = ""; /* its files by their own paths */
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0) {
		rc =
		    tb_error_errno(err, errno == ENOENT ? TB_ENOTFOUND : TB_EIO, errno, "%s", path);
	} else if (S_ISREG(st.st_mode)) {
		rc = put_one(&w, fd, base[0] ? base : path);
	} else if (S_ISDIR(st.st_mode)) {
		w.root_len = base[0] ? strlen(base) + 1 : 0;
		rc = walk_dir(&w, fd, base, 0);
	} else {
		rc = tb_error_set(err, TB_EINVAL, "%s: not a regular file or a directory", path);
	}
	if (fd >= 0)
		close(fd);
	free(copy);
	return rc;
}
