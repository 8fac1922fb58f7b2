/*
 * fuse_serve.h: the FUSE serving core shared by the file systems the
 * worker serves to sandboxes (lazy_fs.h: lazy inputs; image_fs.h: an
 * image's root read from its layers' indexes).
 *
 * It owns what is the same for each: /dev/fuse opened by the worker
 * (root), a libfuse low-level session on it, the detached mount made
 * with fsopen/fsmount (read-only, nosuid, nodev; noexec if asked) and
 * handed over as a mount file descriptor for a sandbox to move into its
 * own mount namespace (mounted nowhere on the host, so a worker that
 * dies leaves no mount behind), and a fixed number of threads of its own
 * (not libfuse's loop) each polling the device and a stop event, so that
 * stopping wakes them all at once whatever the sandbox still holds. The
 * file system's own state, operations and memory bounds are its own.
 */
#ifndef TB_FUSE_SERVE_H
#define TB_FUSE_SERVE_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#endif
#include "tb/error.h"

#include <fuse3/fuse_lowlevel.h>

#define TB_FUSE_THREADS_MAX 16

typedef struct tb_fuse_serve_conf {
	const struct fuse_lowlevel_ops *ops; /* must outlive the server */
	void *userdata;                      /* fuse_req_userdata() */
	const char *source;                  /* the mount's source name */
	const char *rootmode;                /* the root's, octal: "40555" */
	int noexec;                          /* MOUNT_ATTR_NOEXEC */
	unsigned threads;                    /* serving threads: 1..THREADS_MAX */
	unsigned readahead_kb;               /* 0: the kernel's */
} tb_fuse_serve_conf_t;

typedef struct tb_fuse_server tb_fuse_server_t;

/**
 * Opens /dev/fuse, makes the detached mount and starts serving it.
 * @param[out] out the server, freed by tb_fuse_serve_stop()
 * @param[out] mount_fd the detached mount (O_CLOEXEC), the caller's to
 *             move into place and close
 * @return 0; TB_EIO (no FUSE here: /dev/fuse, the kernel's fuse,
 *         privileges; no thread); TB_ENOMEM. @p what prefixes messages.
 */
int tb_fuse_serve_start(tb_fuse_server_t **out, const tb_fuse_serve_conf_t *conf, const char *what,
			int *mount_fd, tb_error_t *err);

/* Entry @p k of a directory being listed (0 ".", 1 "..", then its
 * own): its name, and in @p st what a listing shows (inode, mode). */
typedef void (*tb_fuse_dirent_fn)(void *arg, size_t k, const char **name, struct stat *st);

/**
 * Answers a readdir of a directory of @p n entries, "." and ".."
 * included, from entry @p off (each entry's offset is the next one's
 * number) with as many as fit in @p size bytes.
 */
void tb_fuse_reply_dir(fuse_req_t req, size_t size, off_t off, size_t n, tb_fuse_dirent_fn entry,
		       void *arg);

/** The threads serving (fewer than asked if some could not start). */
unsigned tb_fuse_serve_threads(const tb_fuse_server_t *s);

/**
 * Stops serving: every thread woken and joined, then the session
 * destroyed (the kernel fails what still waits). The mount itself goes
 * when the last holder lets go. NULL is a no-op.
 */
void tb_fuse_serve_stop(tb_fuse_server_t *s);

#endif
