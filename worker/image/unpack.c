/*
 * unpack.c: one image layer applied onto a tree, safely (unpack.h).
 *
 * Every entry is placed in two steps: its parent directory is opened
 * with openat2(RESOLVE_IN_ROOT) from the tree's root, so a link in the
 * tree resolves as it would inside the sandbox, never outside; then the
 * entry is made in that directory by name with O_EXCL / O_NOFOLLOW
 * calls after what was there is removed. What each entry becomes is
 * unpack_rules.c's to decide (tb_unpack_plan_t); this file makes it so
 * in the directory. The set of inodes this layer made (made_t) tells an
 * opaque directory's own entries from the lower layers'.
 */
#include "unpack.h"

#include "tb/fsutil.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PATH_MAX_LEN TB_UNPACK_NAME_MAX

/* ------------------------------------------------ what a layer made */

/* A set of (device, inode) pairs, open addressing: the entries this layer
 * made, and every directory on their way from the tree's root. By inode,
 * not by path: an entry the layer reached through a link is still the
 * entry, and the set grows with the entries, not with their depth. */
typedef struct made {
	struct made_slot {
		dev_t dev;
		ino_t ino;
		int used;
	} * slot;
	size_t cap, n;
} made_t;

static size_t made_hash(const made_t *s, const struct stat *st)
{
	uint64_t h = (uint64_t)st->st_ino * 0x9E3779B97F4A7C15ull ^ (uint64_t)st->st_dev;
	return (size_t)(h ^ (h >> 29)) & (s->cap - 1);
}

static int made_has(const made_t *s, const struct stat *st)
{
	if (!s->cap)
		return 0;
	for (size_t i = made_hash(s, st);; i = (i + 1) & (s->cap - 1)) {
		if (!s->slot[i].used)
			return 0;
		if (s->slot[i].ino == st->st_ino && s->slot[i].dev == st->st_dev)
			return 1;
	}
}

/* @return 0, or -1 out of memory. */
static int made_put(made_t *s, const struct stat *st)
{
	if (made_has(s, st))
		return 0;
	if (2 * (s->n + 1) > s->cap) { /* grow at half full */
		made_t bigger = { calloc(s->cap ? 2 * s->cap : 256, sizeof(*s->slot)),
				  s->cap ? 2 * s->cap : 256, 0 };
		if (!bigger.slot)
			return -1;
		for (size_t i = 0; i < s->cap; i++)
			if (s->slot[i].used) {
				struct stat old = { .st_dev = s->slot[i].dev,
						    .st_ino = s->slot[i].ino };
				made_put(&bigger, &old);
			}
		free(s->slot);
		*s = bigger;
	}
	size_t i = made_hash(s, st);
	while (s->slot[i].used)
		i = (i + 1) & (s->cap - 1);
	s->slot[i] = (struct made_slot){ st->st_dev, st->st_ino, 1 };
	s->n++;
	return 0;
}

static void made_free(made_t *s)
{
	free(s->slot);
	memset(s, 0, sizeof(*s));
}

/* ------------------------------------------------------------ context */

typedef struct ctx {
	int root;
	const tb_unpack_limits_t *lim;
	tb_unpack_stats_t *st;
	made_t made;
	struct stat root_st;       /* the tree's root: where a walk up stops */
	char parent[PATH_MAX_LEN]; /* the last parent opened, and its fd */
	int parent_fd;
	struct dir_time {  /* directories' times, set once the layer is */
		char *rel; /* placed (dir_times): the last for a path wins */
		struct timespec t[2];
		dev_t dev; /* the directory it was */
		ino_t ino;
	} * dirs;
	size_t ndirs, dirs_cap;
	made_t touched;        /* the directories in dirs, by inode */
	const char *entry;     /* the entry being placed, for errors */
	tb_unpack_plan_t plan; /* what it becomes */
	tb_error_t *err;
} ctx_t;

static int fail(ctx_t *c, int code, const char *why)
{
	return tb_error_set(c->err, code, "layer entry '%.300s': %s", c->entry, why);
}

static int fail_errno(ctx_t *c, const char *what)
{
	return tb_error_errno(c->err, TB_EIO, errno, "layer entry '%.300s': %s", c->entry, what);
}

/* Records the entry @p name of directory @p pfd as this layer's, and each
 * directory above it up to the tree's root (a walk up that stops at one
 * already recorded: those above it are too). */
static int mark(ctx_t *c, int pfd, const char *name)
{
	struct stat st;
	int cur;

	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || made_put(&c->made, &st) < 0)
		return fail_errno(c, "cannot record it");
	cur = openat(pfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	for (int depth = 0; cur >= 0 && depth < PATH_MAX_LEN; depth++) {
		if (fstat(cur, &st) < 0 ||
		    (st.st_dev == c->root_st.st_dev && st.st_ino == c->root_st.st_ino) ||
		    made_has(&c->made, &st))
			break;
		if (made_put(&c->made, &st) < 0) {
			close(cur);
			return fail(c, TB_ENOMEM, "out of memory");
		}
		int up = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		close(cur);
		cur = up;
	}
	if (cur >= 0)
		close(cur);
	return 0;
}

/* @p rel resolved inside the tree, as a directory opened with @p flags. */
static int open_in(int root, const char *rel, uint64_t flags)
{
	struct open_how how = {
		.flags = flags | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
	};
	int fd;
	/* EAGAIN: a rename or mount somewhere on the host raced the walk of a
	 * ".." (RESOLVE_IN_ROOT must then refuse): the walk is tried again */
	for (int i = 0; i < 100; i++)
		if ((fd = (int)syscall(SYS_openat2, root, rel[0] ? rel : ".", &how, sizeof(how))) >=
			0 ||
		    errno != EAGAIN)
			break;
	return fd;
}

/* @p rel resolved inside the tree, as a directory (O_PATH). */
static int open_beneath(int root, const char *rel)
{
	return open_in(root, rel, O_PATH);
}

static void forget_parent(ctx_t *c)
{
	if (c->parent_fd >= 0)
		close(c->parent_fd);
	c->parent_fd = -1;
	c->parent[0] = '\0';
}

/* ------------------------------------------------ directories' times */

/* A directory's times change as entries are made and removed in it: the
 * times it should have (its entry's, 0 for one no layer names, the
 * lower layers' for one this layer changes without naming it) are kept
 * as the layer goes, and set once it is placed (dir_times), as
 * image_tree.c gives them. */

/* The entry's time, as its access and modification times. */
static void times_of(const tb_unpack_plan_t *p, struct timespec t[2])
{
	t[0].tv_sec = t[1].tv_sec = (time_t)p->mtime;
	t[0].tv_nsec = t[1].tv_nsec = (long)p->mtime_ns;
}

/* Directory @p rel (open as @p fd) will have times @p t; NULL: those it
 * has now, unless this layer kept some for it already. */
static int keep_time(ctx_t *c, int fd, const char *rel, const struct timespec *t)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return fail_errno(c, "cannot look at its directory");
	if (!t && made_has(&c->touched, &st))
		return 0;
	if (made_put(&c->touched, &st) < 0)
		return fail(c, TB_ENOMEM, "out of memory");
	if (c->ndirs == c->dirs_cap) {
		size_t cap = c->dirs_cap ? 2 * c->dirs_cap : 64;
		struct dir_time *d = realloc(c->dirs, cap * sizeof(*d));
		if (!d)
			return fail(c, TB_ENOMEM, "out of memory");
		c->dirs = d, c->dirs_cap = cap;
	}
	struct dir_time *d = &c->dirs[c->ndirs];
	if (!(d->rel = strdup(rel)))
		return fail(c, TB_ENOMEM, "out of memory");
	d->t[0] = d->t[1] = t ? t[1] : st.st_mtim;
	d->dev = st.st_dev, d->ino = st.st_ino;
	c->ndirs++;
	return 0;
}

/* The times kept, in order (the last for a directory wins), each set on
 * the directory it was kept for: its path resolved again (links within
 * the tree followed, as when it was kept), and left when that is no
 * longer the same directory (removed or replaced since). The root's are
 * the tree's own. */
static int dir_times(ctx_t *c)
{
	struct stat st;
	int rc = 0;

	forget_parent(c);
	for (size_t i = 0; rc == 0 && i < c->ndirs; i++) {
		const struct dir_time *d = &c->dirs[i];
		if (!d->rel[0])
			continue;
		c->entry = d->rel;
		int fd = open_in(c->root, d->rel, O_RDONLY);
		if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == d->dev && st.st_ino == d->ino &&
		    futimens(fd, d->t) < 0)
			rc = fail_errno(c, "cannot set its directory's time");
		if (fd >= 0)
			close(fd);
	}
	return rc;
}

static void dirs_free(ctx_t *c)
{
	for (size_t i = 0; i < c->ndirs; i++)
		free(c->dirs[i].rel);
	free(c->dirs);
	made_free(&c->touched);
}

/* The length of the longest prefix of @p rel (whole components) that
 * is a directory of the tree, and its fd (O_PATH) into @p fd. Galloping
 * up from the end, then halving: O(depth log depth) component lookups,
 * not O(depth^2), however deep a layer's new paths go. */
static size_t deepest_dir(ctx_t *c, const char *rel, int *fd)
{
	char prefix[PATH_MAX_LEN];
	size_t ends[PATH_MAX_LEN / 2 + 1], n = 0, lo = 0, hi;
	int found = -1;

	for (size_t i = 0; rel[i]; i++) /* ends[k]: where component k ends */
		if (rel[i + 1] == '/' || rel[i + 1] == '\0')
			ends[++n] = i + 1;
	ends[0] = 0;
	hi = n; /* rel itself is missing: the answer is below n */
	for (size_t step = 1; hi > 0; step *= 2) { /* gallop: hi - 1, hi - 2, hi - 4 ... */
		size_t k = hi > step ? hi - step : 0;
		snprintf(prefix, sizeof(prefix), "%.*s", (int)ends[k], rel);
		int at = open_beneath(c->root, prefix);
		if (at >= 0) {
			if (found >= 0)
				close(found);
			found = at, lo = k;
			break;
		}
		hi = k;
	}
	while (found >= 0 && lo + 1 < hi) { /* lo exists, hi does not */
		size_t k = lo + (hi - lo) / 2;
		snprintf(prefix, sizeof(prefix), "%.*s", (int)ends[k], rel);
		int at = open_beneath(c->root, prefix);
		if (at >= 0) {
			close(found);
			found = at, lo = k;
		} else {
			hi = k;
		}
	}
	*fd = found;
	return ends[lo];
}

/* Makes each directory of @p rel the tree lacks (0755, this layer's):
 * from the deepest one there (deepest_dir), each new one made and opened
 * by name (O_NOFOLLOW: it was just made, no link can be there). @return
 * 0, or -1 with the error set. */
static int make_parents(ctx_t *c, const char *rel)
{
	static const struct timespec none[2]; /* a directory no layer names */
	int cur;
	size_t at = deepest_dir(c, rel, &cur);
	char name[PATH_MAX_LEN], dir[PATH_MAX_LEN];

	if (cur < 0) {
		fail_errno(c, "its directory's top is not in the tree");
		return -1;
	}
	while (rel[at]) {
		snprintf(dir, sizeof(dir), "%.*s", (int)at, rel);
		if (keep_time(c, cur, dir, NULL) < 0) {
			close(cur);
			return -1;
		}
		at += rel[at] == '/';
		size_t len = strcspn(rel + at, "/");
		snprintf(name, sizeof(name), "%.*s", (int)len, rel + at);
		at += len;
		int rc = 0, next = -1;
		if (mkdirat(cur, name, TB_UNPACK_DIR_MODE) < 0)
			/* EEXIST: a file, or a link to nowhere, where it should be */
			rc = errno == EEXIST
				 ? fail(c, TB_EINVAL, "its directory is not one in the tree")
				 : fail_errno(c, "cannot make its directory");
		else if ((next = openat(cur, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) <
			 0)
			rc = fail_errno(c, "cannot open the directory it made");
		else if ((rc = tb_unpack_count_dir(c->lim, c->st, c->err)) == 0 &&
			 (rc = mark(c, cur, name)) == 0) {
			snprintf(dir, sizeof(dir), "%.*s", (int)at, rel);
			rc = keep_time(c, next, dir, none);
		}
		if (rc < 0) {
			close(cur);
			if (next >= 0)
				close(next);
			return -1;
		}
		close(cur);
		cur = next;
	}
	close(cur);
	return 0;
}

/* The directory @p rel of the tree, made where it is missing
 * (make_parents). @return an fd the context keeps, or -1 with the error
 * set: the layer's (TB_EINVAL) when the path leads nowhere in the tree,
 * the worker's (TB_EIO) when it cannot be opened. */
static int open_parent(ctx_t *c, const char *rel)
{
	int fd;

	if (c->parent_fd >= 0 && !strcmp(c->parent, rel))
		return c->parent_fd;
	forget_parent(c);
	if ((fd = open_beneath(c->root, rel)) < 0 && errno == ENOENT) {
		if (make_parents(c, rel) < 0)
			return -1;
		fd = open_beneath(c->root, rel);
	}
	if (fd < 0 && (errno == ENOENT || errno == ENOTDIR || errno == ELOOP ||
		       errno == ENAMETOOLONG || errno == EXDEV)) {
		/* a file where a directory should be, a link to nowhere, a loop */
		tb_error_set(c->err, TB_EINVAL,
			     "layer entry '%.300s': its directory is not one in the tree (%s)",
			     c->entry, strerror(errno));
		return -1;
	}
	if (fd < 0) { /* the worker's trouble (no fds, no memory), not the layer's */
		fail_errno(c, "its directory cannot be opened");
		return -1;
	}
	if (keep_time(c, fd, rel, NULL) < 0) {
		close(fd);
		return -1;
	}
	snprintf(c->parent, sizeof(c->parent), "%s", rel);
	c->parent_fd = fd;
	return fd;
}

/* Removes whatever is at @p name in @p pfd (a whole directory too),
 * unless it is a directory and @p keep_dir. */
static int clear_place(ctx_t *c, int pfd, const char *name, int keep_dir)
{
	struct stat st;

	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : fail_errno(c, "cannot look at what is there");
	if (keep_dir && S_ISDIR(st.st_mode))
		return 1;
	/* the cached directory is @p pfd, this entry's parent: it stays */
	if (tb_remove_tree(pfd, name) < 0)
		return fail_errno(c, "cannot replace what is there");
	return 0;
}

/* ------------------------------------------------------------ entries */

static int put_file(ctx_t *c, struct archive *a, int pfd, const char *name)
{
	const tb_unpack_plan_t *p = &c->plan;
	const void *buf;
	size_t size;
	la_int64_t offset;
	int rc, fd;

	if ((fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) <
	    0)
		return fail_errno(c, "cannot create it");
	while ((rc = archive_read_data_block(a, &buf, &size, &offset)) == ARCHIVE_OK) {
		if (offset < 0 || (uint64_t)offset > p->size || size > p->size - (uint64_t)offset) {
			close(fd);
			return fail(c, TB_EINVAL, "data past its declared size");
		}
		for (size_t done = 0; done < size;) {
			ssize_t n = pwrite(fd, (const char *)buf + done, size - done,
					   (off_t)offset + (off_t)done);
			if (n <= 0) {
				close(fd);
				return fail_errno(c, "cannot write it");
			}
			done += (size_t)n;
		}
	}
	if (rc != ARCHIVE_EOF) {
		close(fd);
		return fail(c, TB_EINVAL,
			    archive_error_string(a) ? archive_error_string(a)
						    : "its data cannot be read");
	}
	/* a sparse file's size, then its owner and mode (set-ID bits dropped) */
	struct timespec t[2];
	times_of(p, t);
	if (ftruncate(fd, (off_t)p->size) < 0 || fchown(fd, p->uid, p->gid) < 0 ||
	    fchmod(fd, p->mode) < 0 || futimens(fd, t) < 0) {
		close(fd);
		return fail_errno(c, "cannot set its size, owner, mode or time");
	}
	close(fd);
	return 0;
}

static int put_dir(ctx_t *c, int pfd, const char *name)
{
	int rc = clear_place(c, pfd, name, 1);

	if (rc < 0)
		return rc;
	if (rc == 0 && mkdirat(pfd, name, 0700) < 0)
		return fail_errno(c, "cannot make it");
	if (fchownat(pfd, name, c->plan.uid, c->plan.gid, AT_SYMLINK_NOFOLLOW) < 0 ||
	    fchmodat(pfd, name, c->plan.mode, 0) < 0)
		return fail_errno(c, "cannot set its owner or mode");
	struct timespec t[2];
	int fd = openat(pfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return fail_errno(c, "cannot open it");
	times_of(&c->plan, t);
	rc = keep_time(c, fd, c->plan.rel, t);
	close(fd);
	return rc;
}

static int put_symlink(ctx_t *c, int pfd, const char *name)
{
	int rc;

	if ((rc = clear_place(c, pfd, name, 0)) < 0)
		return rc;
	struct timespec t[2];
	times_of(&c->plan, t);
	if (symlinkat(c->plan.link, pfd, name) < 0 ||
	    fchownat(pfd, name, c->plan.uid, c->plan.gid, AT_SYMLINK_NOFOLLOW) < 0 ||
	    utimensat(pfd, name, t, AT_SYMLINK_NOFOLLOW) < 0)
		return fail_errno(c, "cannot make the link");
	return 0;
}

/* A hard link to an entry already in the tree (never a directory). */
static int put_hardlink(ctx_t *c, int pfd, const char *name)
{
	char *target = c->plan.target;
	int rc;

	char *slash = strrchr(target, '/');
	const char *tname = slash ? slash + 1 : target;
	if (slash)
		*slash = '\0';
	int tfd = open_beneath(c->root, slash ? target : "");
	if (tfd < 0)
		return fail(c, TB_EINVAL, "a hard link to an entry not in the tree");
	if ((rc = clear_place(c, pfd, name, 0)) < 0) {
		close(tfd);
		return rc;
	}
	/* flags 0: a link to a symbolic link links the link itself */
	rc = linkat(tfd, tname, pfd, name, 0);
	int e2 = errno;
	close(tfd);
	if (rc < 0) {
		errno = e2;
		return e2 == ENOENT || e2 == EPERM ? fail(c, TB_EINVAL,
							  "a hard link to an entry not "
							  "in the tree, or to a directory")
						   : fail_errno(c, "cannot make the link");
	}
	return 0;
}

static int put_fifo(ctx_t *c, int pfd, const char *name)
{
	int rc = clear_place(c, pfd, name, 0);
	struct timespec t[2];

	times_of(&c->plan, t);
	if (rc == 0 &&
	    (mkfifoat(pfd, name, c->plan.mode) < 0 || fchmodat(pfd, name, c->plan.mode, 0) < 0 ||
	     utimensat(pfd, name, t, AT_SYMLINK_NOFOLLOW) < 0))
		rc = fail_errno(c, "cannot make the fifo");
	return rc;
}

/* An opaque directory (@p dfd): what a lower layer put under it is
 * removed, what this layer made stays (by inode: see made_t); into a
 * directory of this layer's, the same again. The frames are small however
 * deep the tree goes. */
static int make_opaque(ctx_t *c, int dfd)
{
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *de;
	struct stat st;
	DIR *d;
	int rc = 0;

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return fail_errno(c, "cannot read the opaque directory");
	}
	while (rc == 0 && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = fail_errno(c, "cannot look under the opaque directory");
		} else if (!made_has(&c->made, &st)) {
			rc = tb_remove_tree(dirfd(d), de->d_name) < 0
				 ? fail_errno(c, "cannot remove what the opaque directory hides")
				 : 0;
			c->st->removed++;
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), de->d_name,
					 O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			rc = sub < 0 ? fail_errno(c, "cannot open under the opaque directory")
				     : make_opaque(c, sub);
			if (sub >= 0)
				close(sub);
		}
	}
	closedir(d);
	return rc;
}

/* `.wh..wh..opq`: the directory @p parent made opaque. */
static int opaque(ctx_t *c, const char *parent)
{
	forget_parent(c);
	int fd = open_beneath(c->root, parent);
	if (fd < 0)
		return fail_errno(c, "cannot open the opaque directory");
	int rc = keep_time(c, fd, parent, NULL);
	if (rc == 0)
		rc = make_opaque(c, fd);
	close(fd);
	return rc;
}

/* Makes the entry planned, in @p pfd. */
static int make(ctx_t *c, struct archive *a, int pfd)
{
	const char *name = c->plan.name;
	int rc;

	switch (c->plan.type) {
	case TB_LAYER_FILE:
		rc = clear_place(c, pfd, name, 0);
		if (rc == 0)
			rc = put_file(c, a, pfd, name);
		break;
	case TB_LAYER_DIR:
		rc = put_dir(c, pfd, name);
		break;
	case TB_LAYER_SYMLINK:
		rc = put_symlink(c, pfd, name);
		break;
	case TB_LAYER_HARDLINK:
		rc = put_hardlink(c, pfd, name);
		break;
	default:
		rc = put_fifo(c, pfd, name);
		break;
	}
	if (rc == 0)
		rc = mark(c, open_parent(c, c->plan.parent), name);
	return rc;
}

/* The entry as the layer names it, as unpack_rules.c takes it. */
static int entry_of(ctx_t *c, struct archive_entry *e, tb_layer_entry_t *out)
{
	int64_t u = archive_entry_uid(e), g = archive_entry_gid(e);
	la_int64_t size = archive_entry_size(e);
	const char *hard = archive_entry_hardlink(e), *soft = archive_entry_symlink(e);

	if (size < 0)
		return fail(c, TB_EINVAL, "a file of no size");
	memset(out, 0, sizeof(*out));
	out->path = (char *)c->entry;
	out->link = (char *)(hard ? hard : soft ? soft : "");
	out->size = (uint64_t)size;
	long ns = archive_entry_mtime_nsec(e);
	out->mtime = archive_entry_mtime(e);
	out->mtime_ns = ns >= 0 && ns < 1000000000 ? (uint32_t)ns : 0; /* futimens's range */
	out->mode = archive_entry_perm(e) & 07777;
	/* negative or past 32 bits: past the map either way */
	out->uid = u >= 0 && u <= (int64_t)UINT32_MAX ? (uint32_t)u : UINT32_MAX;
	out->gid = g >= 0 && g <= (int64_t)UINT32_MAX ? (uint32_t)g : UINT32_MAX;
	switch (hard ? 0 : archive_entry_filetype(e)) {
	case 0:
		out->type = TB_LAYER_HARDLINK;
		break;
	case AE_IFREG:
		out->type = TB_LAYER_FILE;
		break;
	case AE_IFDIR:
		out->type = TB_LAYER_DIR;
		break;
	case AE_IFLNK:
		out->type = TB_LAYER_SYMLINK;
		break;
	case AE_IFIFO:
		out->type = TB_LAYER_FIFO;
		break;
	default: /* devices and sockets */
		out->type = TB_LAYER_CHAR;
		break;
	}
	return 0;
}

/* Places one entry. */
static int place(ctx_t *c, struct archive *a, struct archive_entry *e)
{
	const char *path = archive_entry_pathname(e);
	tb_unpack_plan_t *p = &c->plan;
	tb_layer_entry_t le;
	int rc;

	c->entry = path ? path : "(no name)";
	if (!path)
		return fail(c, TB_EINVAL, "a name with '..', or too long");
	if ((rc = tb_unpack_path(p, path, c->err)) != 0)
		return rc < 0 ? rc : 0; /* 1: the root itself: its mode is the tree's */
	int pfd = open_parent(c, p->parent);
	if (pfd < 0)
		return c->err->code;
	if ((rc = entry_of(c, e, &le)) < 0 ||
	    (rc = tb_unpack_decide(p, &le, c->lim, c->st, c->err)) < 0)
		return rc;
	switch (p->what) {
	case TB_UNPACK_WHITEOUT:
		return clear_place(c, pfd, p->name, 0);
	case TB_UNPACK_OPAQUE:
		return opaque(c, p->parent);
	case TB_UNPACK_MAKE:
		return make(c, a, pfd);
	default: /* skipped, dropped */
		return 0;
	}
}

int tb_unpack_layer(int rootfd, int fd, const tb_unpack_limits_t *lim, tb_unpack_stats_t *st,
		    tb_error_t *err)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	ctx_t c = { .root = rootfd, .lim = lim, .st = st, .parent_fd = -1, .err = err };
	int rc = 0, r;

	if (!a)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	if (fstat(rootfd, &c.root_st) < 0) {
		archive_read_free(a);
		return tb_error_errno(err, TB_EIO, errno, "layer: the tree's root");
	}
	archive_read_support_filter_gzip(a);
	archive_read_support_filter_zstd(a);
	archive_read_support_format_tar(a);
	if (archive_read_open_fd(a, fd, 1 << 16) != ARCHIVE_OK) {
		rc = tb_error_set(err, TB_EINVAL, "layer: %s", archive_error_string(a));
		goto out;
	}
	while (rc == 0 && (r = archive_read_next_header(a, &e)) != ARCHIVE_EOF) {
		if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
			rc = tb_error_set(err, TB_EINVAL, "layer: not a readable tar: %s",
					  archive_error_string(a) ? archive_error_string(a) : "?");
			break;
		}
		rc = place(&c, a, e);
	}
	if (rc == 0)
		rc = dir_times(&c);
out:
	forget_parent(&c);
	made_free(&c.made);
	dirs_free(&c);
	archive_read_free(a);
	return rc;
}
