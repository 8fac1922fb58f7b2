/*
 * fsutil.c: see fsutil.h.
 */
#include "tb/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <sys/stat.h>

int tb_mkdir_parents(const char *path)
{
	char buf[4096];
	size_t n = strlen(path);

	if (n >= sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return 0;
}

int tb_remove_tree(int parent, const char *name)
{
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct dirent *de;
	DIR *d;

	if (fd < 0)
		return unlinkat(parent, name, 0) == 0 || errno == ENOENT ? 0 : -1;
	if (!(d = fdopendir(fd))) {
		close(fd);
		return -1;
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			tb_remove_tree(dirfd(d), de->d_name);
	closedir(d);
	return unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -1;
}

int tb_write_all(int fd, const void *data, size_t len)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = write(fd, (const char *)data + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0) {
			errno = EIO;
			return -1;
		}
		done += (size_t)n;
	}
	return 0;
}

int tb_read_fd(int fd, const char *name, size_t max_bytes, char **buf, size_t *len, tb_error_t *err)
{
	/* room for max_bytes + 1 at most, to tell a file over the bound */
	size_t cap = max_bytes < 4096 ? max_bytes + 1 : 4096, n = 0;
	char *b = malloc(cap + 1);

	*buf = NULL;
	*len = 0;
	while (b) {
		if (n == cap) {
			if (n > max_bytes)
				break;
			size_t more = cap > (max_bytes + 1) / 2 ? max_bytes + 1 : cap * 2;
			char *bigger = realloc(b, more + 1);
			if (!bigger) {
				free(b);
				b = NULL;
				break;
			}
			b = bigger, cap = more;
		}
		ssize_t got = read(fd, b + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			int e = errno;
			free(b);
			return tb_error_errno(err, TB_EIO, e, "%s: read", name);
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	if (!b)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	if (n > max_bytes) {
		free(b);
		return tb_error_set(err, TB_ETOOBIG, "%s: over %zu bytes", name, max_bytes);
	}
	b[n] = '\0';
	*buf = b;
	*len = n;
	return 0;
}

int tb_read_file(const char *path, size_t max_bytes, char **buf, size_t *len, tb_error_t *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY), rc;

	*buf = NULL;
	*len = 0;
	if (fd < 0)
		return tb_error_errno(err, errno == ENOENT ? TB_ENOTFOUND : TB_EIO, errno, "%s",
				      path);
	rc = tb_read_fd(fd, path, max_bytes, buf, len, err);
	close(fd);
	return rc;
}
