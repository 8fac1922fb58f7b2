/*
 * collect.c: the /outputs walk. Entries are visited in name order so the
 * manifest (and which files fall past a cap) does not depend on directory
 * order.
 */
#include "collect.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DEPTH 32
#define MAX_ENTRIES_PER_DIR 100000
/* Refusals listed one by one; past this, one entry counts the rest, so a
 * flood of junk cannot make the manifest too big to write. */
#define MAX_REFUSED_LISTED 1000

typedef struct walk {
	tb_manifest_t *m;
	tb_store_t *store;
	const char *prefix;
	const tb_collect_limits_t *lim;
	uint64_t files, bytes;
	uint64_t unlisted; /* refusals past MAX_REFUSED_LISTED */
	tb_error_t *err;
	uint64_t found; /* bytes of every regular file, saved or refused */
} walk_t;

static int push(tb_list_t *l, size_t size, const void *item)
{
	void *bigger = realloc(l->items, (l->n + 1) * size);
	if (!bigger)
		return TB_ENOMEM;
	l->items = bigger;
	memcpy((char *)l->items + l->n * size, item, size);
	l->n++;
	return 0;
}

static int add_refused(walk_t *w, const char *path, const char *reason)
{
	tb_refused_t r;
	char cut[1025];

	/* A refused name is the agent's: keep it printable and bounded. */
	snprintf(cut, sizeof(cut), "%s", path);
	for (char *p = cut; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x80)
			*p = '?';
	r.path = strdup(cut[0] ? cut : "?");
	r.reason = strdup(reason);
	if (!r.path || !r.reason || push(&w->m->refused, sizeof(r), &r) < 0) {
		free(r.path);
		free(r.reason);
		return tb_error_set(w->err, TB_ENOMEM, "out of memory");
	}
	return 0;
}

static int refuse(walk_t *w, const char *path, const char *reason)
{
	if (w->m->refused.n >= MAX_REFUSED_LISTED) {
		w->unlisted++;
		return 0;
	}
	return add_refused(w, path, reason);
}

/*
 * Why no object store can be trusted to hold a file named @p name (one
 * path component), or NULL. Refused on every store alike, so the manifest
 * does not depend on which one a worker has: control characters (S3's
 * characters to avoid; XML listings cannot carry some), and a '.' or '..'
 * piece between backslashes, which S3-compatible servers that read '\'
 * as a separator answer with 400 ("..\..\escape").
 */
static const char *unstorable(const char *name)
{
	const char *piece = name;

	for (const char *p = name; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return "name has a control character, which object stores refuse";
	for (const char *p = name;; p++) {
		if (*p == '\\' || *p == '\0') {
			size_t n = (size_t)(p - piece);
			if ((n == 1 && piece[0] == '.') ||
			    (n == 2 && piece[0] == '.' && piece[1] == '.'))
				return "name has a '.' or '..' piece between backslashes, which "
				       "object stores read as a path and refuse";
			if (!*p)
				return NULL;
			piece = p + 1;
		}
	}
}

/* Why the entry @p name, at @p path under /outputs, cannot be saved
 * whatever it is, or NULL. */
static const char *bad_name(const char *name, const char *path)
{
	if (!tb_utf8_valid((const uint8_t *)name, strlen(name)))
		return "name is not valid UTF-8";
	if (strlen(path) > 1024)
		return "path longer than 1024 bytes";
	return unstorable(name);
}

static int save(walk_t *w, int fd, const char *rel, uint64_t size)
{
	char key[2048];
	tb_object_info_t info;
	tb_artifact_t a;
	int rc;

	w->found += size; /* saved or not */
	if (w->files >= w->lim->max_files)
		return refuse(w, rel, "over the file count limit");
	if (size > w->lim->max_bytes - w->bytes)
		return refuse(w, rel, "over the size limit");
	snprintf(key, sizeof(key), "%s%s", w->prefix, rel);
	if ((rc = tb_store_put_fd(w->store, key, fd, &info, w->err)) == TB_EINVAL) {
		/* the store's answer about this object (its name, its key's
		 * length), not the store failing: the task's output is refused */
		char why[257]; /* a refusal's reason is at most 256 bytes */
		const char *msg = w->err->msg;
		size_t klen = strlen(key);
		if (!strncmp(msg, "put ", 4) && !strncmp(msg + 4, key, klen) &&
		    !strncmp(msg + 4 + klen, ": ", 2))
			msg += 4 + klen + 2; /* the path is the refusal's already */
		snprintf(why, sizeof(why), "the store refused it: %.234s", msg);
		tb_utf8_sanitize(why);
		tb_utf8_trim(why);
		return refuse(w, rel, why);
	}
	if (rc < 0)
		return rc;
	a.path = strdup(rel);
	a.key = strdup(key);
	a.size = info.size;
	a.sha256 = strdup(info.sha256);
	if (!a.path || !a.key || !a.sha256 || push(&w->m->artifacts, sizeof(a), &a) < 0) {
		free(a.path);
		free(a.key);
		free(a.sha256);
		return tb_error_set(w->err, TB_ENOMEM, "out of memory");
	}
	w->files++;
	w->bytes += info.size;
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int walk_dir(walk_t *w, int dfd, const char *rel, int depth)
{
	DIR *d = fdopendir(dfd);
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	int rc = 0;

	if (!d) {
		close(dfd);
		return refuse(w, rel[0] ? rel : ".", "unreadable directory");
	}
	while ((de = readdir(d)) && n < MAX_ENTRIES_PER_DIR) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 32;
			char **bigger = realloc(names, cap * sizeof(*names));
			if (!bigger) {
				rc = tb_error_set(w->err, TB_ENOMEM, "out of memory");
				goto out;
			}
			names = bigger;
		}
		if (!(names[n] = strdup(de->d_name))) {
			rc = tb_error_set(w->err, TB_ENOMEM, "out of memory");
			goto out;
		}
		n++;
	}
	if (de &&
	    (rc = refuse(w, rel[0] ? rel : ".",
			 "directory has more than 100000 entries: the rest were not read")) < 0)
		goto out;
	if (n)
		qsort(names, n, sizeof(*names), by_name);
	for (size_t i = 0; i < n && rc == 0; i++) {
		char path[4096];
		struct stat st;
		int fd;

		snprintf(path, sizeof(path), "%s%s%s", rel, rel[0] ? "/" : "", names[i]);
		const char *bad = bad_name(names[i], path);
		if (bad) {
			rc = refuse(w, path, bad);
			continue;
		}
		if (fstatat(dirfd(d), names[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = refuse(w, path, "vanished while collecting");
			continue;
		}
		if (S_ISLNK(st.st_mode)) {
			rc = refuse(w, path, "symbolic link (links are not followed)");
		} else if (S_ISDIR(st.st_mode)) {
			if (depth >= MAX_DEPTH) {
				rc = refuse(w, path, "nested too deep");
				continue;
			}
			fd = openat(dirfd(d), names[i],
				    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			rc = fd < 0 ? refuse(w, path, "unreadable directory")
				    : walk_dir(w, fd, path, depth + 1);
		} else if (S_ISREG(st.st_mode)) {
			/* O_NONBLOCK: should it have become a fifo since the
			 * stat, opening must not hang the worker. */
			fd = openat(dirfd(d), names[i],
				    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
			if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
				rc = refuse(w, path, "changed while collecting");
			} else {
				rc = save(w, fd, path, (uint64_t)st.st_size);
			}
			if (fd >= 0)
				close(fd);
		} else {
			rc = refuse(w, path,
				    S_ISFIFO(st.st_mode)   ? "not a regular file (fifo)"
				    : S_ISSOCK(st.st_mode) ? "not a regular file (socket)"
							   : "not a regular file (device)");
		}
	}
out:
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(d);
	return rc;
}

int tb_collect_outputs(tb_manifest_t *m, tb_store_t *store, const char *outputs_dir,
		       const char *key_prefix, const tb_collect_limits_t *lim, tb_error_t *err)
{
	walk_t w = { m, store, key_prefix, lim, 0, 0, 0, err, 0 };
	int fd = open(outputs_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int rc;

	if (fd < 0)
		return tb_error_errno(err, TB_EIO, errno, "collect: open %s", outputs_dir);
	rc = walk_dir(&w, fd, "", 0);
	/* the accounting: what the agent wrote, and what of it was kept */
	m->usage.outputs_bytes = w.found;
	m->usage.saved_bytes = w.bytes;
	TB_SET_HAS(&m->usage, TB_USAGE_OUTPUTS);
	TB_SET_HAS(&m->usage, TB_USAGE_SAVED);
	if (rc < 0 || !w.unlisted)
		return rc;
	char why[128];
	snprintf(why, sizeof(why), "%llu more files were refused; not listed",
		 (unsigned long long)w.unlisted);
	return add_refused(&w, "(more)", why);
}
