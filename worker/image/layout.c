/*
 * layout.c: an OCI image layout on the worker as a source of blobs
 * (source.h): `oci-layout` at its top, blobs under blobs/sha256/. Every
 * blob is opened beneath the layout's directory with no link followed,
 * and is checked like a registry's (cache.c): a layout is trusted to be
 * where the runtime says, not to hold the right bytes. Asked whether it
 * would serve an image the cache already has (authorize: source.h), it
 * must hold that manifest itself, with the digest's bytes: a runtime
 * allowed one directory is not served what another directory held.
 */
#include "source.h"

#include "oci.h"
#include "tb/encoding.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <openssl/evp.h>
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

/* Blob @p digest of layout @p l opened (a descriptor of its own: readers
 * at once share nothing). @return the descriptor, or a negative TB_E*
 * (TB_ENOTFOUND: the layout has no such blob). */
static int open_blob(const layout_t *l, const char *digest, tb_error_t *err)
{
	char rel[128];
	int fd;

	snprintf(rel, sizeof(rel), "blobs/sha256/%s", digest + 7);
	if ((fd = open_in(l->dir, rel)) >= 0)
		return fd;
	return errno == ENOENT ? tb_error_set(err, TB_ENOTFOUND,
					      "image layout %.200s has no blob %s", l->path, digest)
			       : tb_error_errno(err, TB_EIO, errno, "image layout %.200s: blob %s",
						l->path, digest);
}

static int layout_fetch(tb_image_source_t *s, const char *digest, int manifest, tb_blob_t *b,
			char *ct, size_t ctlen, tb_error_t *err)
{
	layout_t *l = (layout_t *)s;
	char buf[1 << 16];
	int fd, rc = 0;
	ssize_t n;

	(void)manifest;
	if (ctlen)
		ct[0] = '\0';
	if ((fd = open_blob(l, digest, err)) < 0)
		return fd;
	/* the rest of a layer a fetch began (tb_blob_resume) */
	if (b->n && lseek(fd, (off_t)b->n, SEEK_SET) < 0)
		rc = tb_blob_restart(b, err);
	while (rc == 0 && (n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		rc = n < 0 ? tb_error_errno(err, TB_EIO, errno, "image layout: reading %s", digest)
			   : tb_blob_write(b, buf, (size_t)n, err);
	}
	close(fd);
	return rc;
}

static int64_t layout_read_range(tb_image_source_t *s, const char *digest, uint64_t off, void *buf,
				 size_t len, const atomic_int *cancel, tb_error_t *err)
{
	(void)cancel; /* a local file's read ends soon enough */
	layout_t *l = (layout_t *)s;
	size_t got = 0;
	int fd;

	if (!len || off + len < off || off > INT64_MAX)
		return tb_error_set(err, TB_EINVAL, "blob %.80s: an empty range", digest);
	if ((fd = open_blob(l, digest, err)) < 0)
		return fd;
	while (got < len) {
		ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			close(fd);
			return tb_error_errno(err, TB_EIO, e, "image layout: reading %s", digest);
		}
		if (n == 0)
			break; /* the blob's end */
		got += (size_t)n;
	}
	close(fd);
	return (int64_t)got;
}

static int layout_authorize(tb_image_source_t *s, const char *digest, tb_error_t *err)
{
	layout_t *l = (layout_t *)s;
	unsigned char buf[1 << 16], md[EVP_MAX_MD_SIZE];
	char rel[128], hex[2 * EVP_MAX_MD_SIZE + 1];
	EVP_MD_CTX *x = EVP_MD_CTX_new();
	uint64_t total = 0;
	unsigned n = 0;
	ssize_t got;
	int fd, rc = 0;

	snprintf(rel, sizeof(rel), "blobs/sha256/%s", digest + 7);
	if (!x || !EVP_DigestInit_ex(x, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(x);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	if ((fd = open_in(l->dir, rel)) < 0) {
		rc = errno == ENOENT
			 ? tb_error_set(err, TB_ENOTFOUND, "image layout %.200s has no blob %s",
					l->path, digest)
			 : tb_error_errno(err, TB_EIO, errno, "image layout %.200s: blob %s",
					  l->path, digest);
		EVP_MD_CTX_free(x);
		return rc;
	}
	/* a manifest or an index: small, so hashed whole every time */
	while (rc == 0 && (got = read(fd, buf, sizeof(buf))) != 0) {
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			rc = tb_error_errno(err, TB_EIO, errno, "image layout: reading %s", digest);
		else if ((total += (uint64_t)got) > TB_OCI_DOC_MAX)
			rc = tb_error_set(err, TB_EINVAL,
					  "image layout %.200s: blob %s is too big for a manifest",
					  l->path, digest);
		else if (!EVP_DigestUpdate(x, buf, (size_t)got))
			rc = tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	close(fd);
	if (rc == 0 && EVP_DigestFinal_ex(x, md, &n))
		tb_hex(hex, md, n);
	else
		hex[0] = '\0';
	EVP_MD_CTX_free(x);
	if (rc == 0 && strcmp(hex, digest + 7) != 0)
		rc =
		    tb_error_set(err, TB_EINVAL,
				 "image layout %.200s: blob %s holds other bytes (sha256:%.12s...)",
				 l->path, digest, hex);
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
	l->base.authorize = layout_authorize;
	l->base.read_range = layout_read_range;
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
