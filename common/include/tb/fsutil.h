/*
 * fsutil.h: small file system helpers shared by the store and the worker.
 * (The sandbox's init has its own: it may not allocate or use stdio.)
 */
#ifndef TB_FSUTIL_H
#define TB_FSUTIL_H

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

#endif
