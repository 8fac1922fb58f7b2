/*
 * fsutil.h: small file system helpers shared by the store and the worker.
 * (The sandbox's init has its own: it may not allocate or use stdio.)
 */
#ifndef TB_FSUTIL_H
#define TB_FSUTIL_H

/**
 * Creates every missing directory above the last component of @p path
 * (mode 0755). @return 0, or -1 with errno set
 */
int tb_mkdir_parents(const char *path);

#endif
