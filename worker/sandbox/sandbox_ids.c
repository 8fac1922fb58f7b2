/*
 * sandbox_ids.c: the registry of id ranges (sandbox_ids.h): one lock file
 * per range, flock()ed by the holder.
 */
#include "sandbox_ids.h"

#include "tb/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where this process looks first: after the range it took last, so that
 * a process with many sandboxes does not try its own held ones each time. */
static atomic_uint next_range;

int tb_idrange_claim(tb_idrange_t *out, tb_error_t *err)
{
	char path[sizeof(TB_SANDBOX_ID_REGISTRY) + 16];
	unsigned start = atomic_load(&next_range);

	out->lock = -1;
	out->base = 0;
	if (tb_mkdir_parents(TB_SANDBOX_ID_REGISTRY "/x") < 0)
		return tb_error_errno(err, TB_EIO, errno, "sandbox ids: registry %s",
				      TB_SANDBOX_ID_REGISTRY);
	for (unsigned i = 0; i < TB_SANDBOX_ID_RANGES; i++) {
		unsigned k = (start + i) % TB_SANDBOX_ID_RANGES;
		snprintf(path, sizeof(path), "%s/%u", TB_SANDBOX_ID_REGISTRY, k);
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			return tb_error_errno(err, TB_EIO, errno, "sandbox ids: %s", path);
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int e = errno;
			close(fd);
			if (e == EWOULDBLOCK || e == EINTR)
				continue; /* a live sandbox's */
			return tb_error_errno(err, TB_EIO, e, "sandbox ids: lock %s", path);
		}
		/* A file unlinked between the open and the lock would be a lock
		 * nobody else sees: it must still be the one the path names. */
		struct stat held, named;
		if (fstat(fd, &held) == 0 && stat(path, &named) == 0 &&
		    held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
			out->lock = fd;
			out->base = TB_SANDBOX_UID_FIRST + k * TB_SANDBOX_ID_RANGE;
			atomic_store(&next_range, (k + 1) % TB_SANDBOX_ID_RANGES);
			return 0;
		}
		close(fd);
	}
	return tb_error_set(err, TB_ERETRY,
			    "sandbox ids: all %u id ranges of this host are held by live sandboxes",
			    TB_SANDBOX_ID_RANGES);
}

void tb_idrange_release(tb_idrange_t *r)
{
	if (r->lock >= 0)
		close(r->lock); /* the flock goes with the last descriptor */
	r->lock = -1;
	r->base = 0;
}
