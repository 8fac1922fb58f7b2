/*
 * layout.c: an OCI image layout on the worker as a source of blobs
 * (source.h): `oci-layout` at its top, blobs under blobs/sha256/. Every
 * blob is opened beneath the layout's directory with no link followed,
 * and is checked like a registry's (cache.c): a layout is trusted to be
 * where the runtime says, not to hold the right bytes.
 */
#include "source.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct layout {
	tb_image_source_t base;
	int dir;
	char path[256];
} layout_t;

static int open_in(int dir, const char *rel)
{
	struct open_how how = {
		.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	return (int)syscall(SYS_openat2, dir, rel, &how, sizeof(how));
}

static int layout_fetch(tb_image_source_t *s, const char *digest, int manifest, tb_blob_t *b,
			char *ct, size_t ctlen, tb_error_t *err)
{
	layout_t *l = (layout_t *)s;
	char rel[128], buf[1 << 16];
	int fd, rc = 0;
	ssize_t n;

	(void)manifest;
	if (ctlen)
		ct[0] = '\0';
	snprintf(rel, sizeof(rel), "blobs/sha256/%s", digest + 7);
	if ((fd = open_in(l->dir, rel)) < 0)
		return errno == ENOENT
			   ? tb_error_set(err, TB_ENOTFOUND, "image layout %.200s has no blob %s",
					  l->path, digest)
			   : tb_error_errno(err, TB_EIO, errno, "image layout %.200s: blob %s",
					    l->path, digest);
	while (rc == 0 && (n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		rc = n < 0 ? tb_error_errno(err, TB_EIO, errno, "image layout: reading %s", digest)
			   : tb_blob_write(b, buf, (size_t)n, err);
	}
	close(fd);
	return rc;
}

static void layout_close(tb_image_source_t *s)
{
	layout_t *l = (layout_t *)s;
	if (!l)
		return;
	close(l->dir);
	free(l);
}

int tb_layout_open(tb_image_source_t **out, const tb_image_ref_t *ref, tb_error_t *err)
{
	layout_t *l = calloc(1, sizeof(*l));
	int marker;

	if (!l)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	l->base.fetch = layout_fetch;
	l->base.close = layout_close;
	snprintf(l->path, sizeof(l->path), "%s", ref->repository);
	l->dir = open(ref->repository, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (l->dir < 0 || (marker = open_in(l->dir, "oci-layout")) < 0) {
		int e = errno;
		if (l->dir >= 0)
			close(l->dir);
		free(l);
		/* not there is the image's fault; unreadable, the worker's */
		return tb_error_errno(err, e == ENOENT || e == ENOTDIR ? TB_ENOTFOUND : TB_EIO, e,
				      "no OCI image layout at %.300s", ref->repository);
	}
	close(marker);
	*out = &l->base;
	return 0;
}
