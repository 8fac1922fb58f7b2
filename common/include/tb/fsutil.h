/*
 * fsutil.h: small file system helpers shared by the store and the worker,
 * and the one bounded read of a whole file (tb_read_file) every reader of
 * a configuration, a schema input, a credential or a blob uses. (The
 * sandbox's init has its own: it may not allocate or use stdio.)
 */
#ifndef TB_FSUTIL_H
#define TB_FSUTIL_H

#include "tb/error.h"

#include <stddef.h>

/**
 * Creates every missing directory above the last component of @p path
 * (mode 0755). @return 0, or -1 with errno set
 */
int tb_mkdir_parents(const char *path);

/**
 * Removes @p name (relative to directory fd @p parent, or AT_FDCWD) and
 * everything below it, never following a symbolic link.
 * @return 0 (also if it was not there), or -1 with errno set
 */
int tb_remove_tree(int parent, const char *name);

/**
 * Writes all @p len bytes of @p data to @p fd, again after EINTR and
 * short writes. @return 0, or -1 with errno set (EIO for a write of 0)
 */
int tb_write_all(int fd, const void *data, size_t len);

/**
 * Reads all of @p path, at most @p max_bytes, into a new buffer *@p buf
 * of *@p len bytes, NUL-terminated past them (for text); the caller frees
 * it. Memory grows with what is read, not with @p max_bytes.
 * @return 0; TB_ENOTFOUND (no such file); TB_ETOOBIG (over @p max_bytes:
 *         "PATH: over N bytes"); TB_EIO; each naming @p path in @p err
 *         (nothing allocated then)
 */
int tb_read_file(const char *path, size_t max_bytes, char **buf, size_t *len, tb_error_t *err);

/** tb_read_file() from @p fd, open already (and left open: stdin, a file
 * opened relative to a directory), named @p name in @p err. */
int tb_read_fd(int fd, const char *name, size_t max_bytes, char **buf, size_t *len,
	       tb_error_t *err);

#endif
