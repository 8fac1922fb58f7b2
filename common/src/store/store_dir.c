/*
 * store_dir.c: the artifact store as a local directory, for the embedded
 * demo and tests. An object is the file <dir>/<key>; its checksums and size
 * are in <dir>/.meta/<key>, one line: "<sha256> <size> <crc32c>" (earlier
 * builds wrote no CRC-32C: such objects are verified by SHA-256). A put
 * writes a temporary file in the target directory, fsyncs it, and link()s
 * it into place, which fails if the key exists: no object is ever
 * half-written or replaced.
 */
#include "tb/store.h"
#include "tb/sys/store.h"

#include "tb/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#define META ".meta"

typedef struct dir_store {
	tb_store_t base;
	char dir[2048];
} dir_store_t;

static void paths(const dir_store_t *d, const char *key, char *obj, char *meta, size_t len)
{
	snprintf(obj, len, "%s/%s", d->dir, key);
	snprintf(meta, len, "%s/" META "/%s", d->dir, key);
}

static int copy_fd(int to, int from, uint64_t size)
{
	off_t off = 0;

	while ((uint64_t)off < size) {
		ssize_t n = sendfile(to, from, &off, (size_t)(size - (uint64_t)off));
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0)
			errno = EIO; /* the source is shorter than it was */
		if (n <= 0)
			return -1;
	}
	return 0;
}

/* Writes @p text to @p path via a temporary file and rename. */
static int write_atomic(const char *path, const char *text)
{
	char tmp[4200];
	int fd;

	snprintf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", path);
	if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0)
		return -1;
	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text) || fsync(fd) < 0 ||
	    rename(tmp, path) < 0) {
		int e = errno;
		close(fd);
		unlink(tmp);
		errno = e;
		return -1;
	}
	return close(fd);
}

static int dir_put(tb_store_t *s, const char *key, int fd, const tb_object_info_t *sums,
		   const tb_part_sums_t *parts, tb_error_t *err)
{
	(void)parts; /* one request, whatever the size */
	dir_store_t *d = (dir_store_t *)s;
	char obj[4096], meta[4096], tmp[4200], line[128];
	uint64_t size = sums->size;
	int out = -1, rc;

	paths(d, key, obj, meta, sizeof(obj));
	if (tb_mkdir_parents(obj) < 0 || tb_mkdir_parents(meta) < 0)
		return tb_error_errno(err, TB_EIO, errno, "dir store: mkdir for %s", key);
	snprintf(line, sizeof(line), "%s %llu %s\n", sums->sha256, (unsigned long long)size,
		 sums->crc32c);
	snprintf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", obj);
	if ((out = mkostemp(tmp, O_CLOEXEC)) < 0)
		return tb_error_errno(err, TB_EIO, errno, "dir store: create %s", tmp);
	if (copy_fd(out, fd, size) < 0 || fsync(out) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "dir store: write %s", obj);
		goto out;
	}
	/* link() is the create-only step: it fails if the key exists. */
	if (link(tmp, obj) < 0) {
		rc = errno == EEXIST
			 ? tb_error_set(err, TB_EEXIST, "dir store: %s already exists", key)
			 : tb_error_errno(err, TB_EIO, errno, "dir store: link %s", obj);
		goto out;
	}
	/* The checksum record after the object: should the worker die in
	 * between, read_meta() finds no record and hashes the object. */
	rc = write_atomic(meta, line) < 0
		 ? tb_error_errno(err, TB_EIO, errno, "dir store: write %s", meta)
		 : 0;
out:
	close(out);
	unlink(tmp);
	return rc;
}

/* The checksums of an object: from its record, or from the object itself
 * if a crash lost the record. */
static int read_meta(const char *meta, const char *obj, tb_object_info_t *out)
{
	char line[160], crc[32] = "";
	unsigned long long size = 0;
	FILE *f = fopen(meta, "re");

	out->sha256[0] = out->crc32c[0] = '\0';
	if (f) {
		int n = 0;
		if (fgets(line, sizeof(line), f))
			n = sscanf(line, "%64s %llu %31s", out->sha256, &size, crc);
		if (n >= 2)
			out->size = size;
		else
			out->sha256[0] = '\0';
		tb_store_take_crc32c(out->crc32c, crc);
		fclose(f);
	}
	if (!out->sha256[0]) {
		int fd = open(obj, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -1;
		tb_store_hash_fd(fd, TB_SUM_SHA256 | TB_SUM_CRC32C, out, NULL);
		close(fd);
	}
	return 0;
}

static int dir_head(tb_store_t *s, const char *key, tb_object_info_t *out, tb_error_t *err)
{
	dir_store_t *d = (dir_store_t *)s;
	char obj[4096], meta[4096];
	struct stat st;

	paths(d, key, obj, meta, sizeof(obj));
	if (stat(obj, &st) < 0)
		return errno == ENOENT
			   ? tb_error_set(err, TB_ENOTFOUND, "dir store: %s not found", key)
			   : tb_error_errno(err, TB_EIO, errno, "dir store: stat %s", obj);
	read_meta(meta, obj, out);
	out->size = (uint64_t)st.st_size;
	return 0;
}

static int dir_get(tb_store_t *s, const char *key, int fd, tb_store_hasher_t *h,
		   tb_object_info_t *out, tb_error_t *err)
{
	(void)h; /* copied in the kernel: read back instead */
	dir_store_t *d = (dir_store_t *)s;
	char obj[4096], meta[4096];
	struct stat st;
	int in, rc = 0;

	paths(d, key, obj, meta, sizeof(obj));
	if ((in = open(obj, O_RDONLY | O_CLOEXEC)) < 0)
		return errno == ENOENT
			   ? tb_error_set(err, TB_ENOTFOUND, "dir store: %s not found", key)
			   : tb_error_errno(err, TB_EIO, errno, "dir store: open %s", obj);
	if (fstat(in, &st) < 0 || copy_fd(fd, in, (uint64_t)st.st_size) < 0)
		rc = tb_error_errno(err, TB_EIO, errno, "dir store: read %s", obj);
	close(in);
	read_meta(meta, obj, out);
	out->size = (uint64_t)st.st_size;
	return rc;
}

static int dir_range(tb_store_t *s, const char *key, uint64_t off, const struct iovec *iov,
		     int iovcnt, size_t len, size_t *got, tb_error_t *err)
{
	dir_store_t *d = (dir_store_t *)s;
	char obj[4096], meta[4096];
	int in;

	paths(d, key, obj, meta, sizeof(obj));
	if ((in = open(obj, O_RDONLY | O_CLOEXEC)) < 0)
		return errno == ENOENT
			   ? tb_error_set(err, TB_ENOTFOUND, "dir store: %s not found", key)
			   : tb_error_errno(err, TB_EIO, errno, "dir store: open %s", obj);
	size_t at = 0; /* into buffer i */
	for (int i = 0; i < iovcnt && *got < len;) {
		if (at == iov[i].iov_len) {
			i++, at = 0;
			continue;
		}
		ssize_t n = pread(in, (char *)iov[i].iov_base + at, iov[i].iov_len - at,
				  (off_t)(off + *got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			close(in);
			return tb_error_errno(err, TB_EIO, e, "dir store: read %s", obj);
		}
		if (n == 0)
			break; /* its end */
		*got += (size_t)n, at += (size_t)n;
	}
	close(in);
	return 0;
}

struct keys {
	char **v;
	size_t n, cap;
};

static int collect(struct keys *k, const char *root, const char *rel)
{
	char path[4096];
	struct dirent *de;
	DIR *dir;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	if (!(dir = opendir(path)))
		return errno == ENOENT ? 0 : -1;
	while ((de = readdir(dir))) {
		char sub[4096];
		if (de->d_name[0] == '.' || strstr(de->d_name, ".tmp-"))
			continue; /* ., .., .meta, and unfinished writes */
		snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", de->d_name);
		if (de->d_type == DT_DIR) {
			if (collect(k, root, sub) < 0) {
				closedir(dir);
				return -1;
			}
		} else if (de->d_type == DT_REG) {
			if (k->n == k->cap) {
				size_t cap = k->cap ? k->cap * 2 : 64;
				char **v = realloc(k->v, cap * sizeof(*v));
				if (!v) {
					closedir(dir);
					return -1;
				}
				k->v = v, k->cap = cap;
			}
			if (!(k->v[k->n] = strdup(sub))) {
				closedir(dir);
				return -1;
			}
			k->n++;
		}
	}
	closedir(dir);
	return 0;
}

static int by_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int dir_list(tb_store_t *s, const char *prefix, tb_store_list_fn fn, void *ud,
		    tb_error_t *err)
{
	dir_store_t *d = (dir_store_t *)s;
	struct keys k = { 0 };
	size_t plen = strlen(prefix);
	int rc = 0;

	if (collect(&k, d->dir, "") < 0)
		rc = tb_error_errno(err, TB_EIO, errno, "dir store: list %s", d->dir);
	if (k.n)
		qsort(k.v, k.n, sizeof(char *), by_str);
	for (size_t i = 0; rc == 0 && i < k.n; i++) {
		tb_object_info_t info = { 0 };
		char obj[4096], meta[4096];
		struct stat st;
		if (strncmp(k.v[i], prefix, plen) != 0)
			continue;
		paths(d, k.v[i], obj, meta, sizeof(obj));
		if (stat(obj, &st) == 0)
			info.size = (uint64_t)st.st_size;
		read_meta(meta, obj, &info);
		if (fn(ud, k.v[i], &info) != 0)
			break;
	}
	for (size_t i = 0; i < k.n; i++)
		free(k.v[i]);
	free(k.v);
	return rc;
}

static int dir_del(tb_store_t *s, const char *key, tb_error_t *err)
{
	dir_store_t *d = (dir_store_t *)s;
	char obj[4096], meta[4096];

	paths(d, key, obj, meta, sizeof(obj));
	if (unlink(obj) < 0 && errno != ENOENT)
		return tb_error_errno(err, TB_EIO, errno, "dir store: delete %s", obj);
	unlink(meta);
	return 0;
}

static int dir_share(tb_store_t *s, const char *key, unsigned seconds, char **out, tb_error_t *err)
{
	(void)s, (void)key, (void)seconds, (void)out;
	return tb_error_set(err, TB_EINVAL,
			    "a local directory store cannot make signed URLs: use an s3:// store");
}

static void dir_close(tb_store_t *s)
{
	free(s);
}

static const struct tb_store_ops dir_ops = {
	.name = "dir",
	.put = dir_put,
	.get = dir_get,
	.range = dir_range,
	.head = dir_head,
	.list = dir_list,
	.del = dir_del,
	.share = dir_share,
	.close = dir_close,
};

int tb_store_dir_open(tb_store_t **out, const char *dir, tb_error_t *err)
{
	dir_store_t *d;
	char probe[2100];

	*out = NULL;
	if (strlen(dir) >= sizeof(d->dir) - 1 || dir[0] != '/')
		return tb_error_set(err, TB_EINVAL, "dir store: '%s' is not an absolute path", dir);
	snprintf(probe, sizeof(probe), "%s/" META "/x", dir);
	if (tb_mkdir_parents(probe) < 0)
		return tb_error_errno(err, TB_EIO, errno, "dir store: create %s", dir);
	if (!(d = calloc(1, sizeof(*d))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	d->base.ops = &dir_ops;
	snprintf(d->dir, sizeof(d->dir), "%s", dir);
	snprintf(d->base.describe, sizeof(d->base.describe), "dir %s", dir);
	*out = &d->base;
	return 0;
}
