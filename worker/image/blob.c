/*
 * blob.c: verified blobs in the image cache (blob.h).
 */
#include "blob.h"

#include "tb/encoding.h"
#include "tb/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_uint counter;

/* Opens blob @p digest's file (@p name, with @p flags) in @p dir, held
 * with an flock, its digest begun. */
static int open_blob(tb_blob_t *b, int dir, const char *digest, uint64_t size, uint64_t max,
		     int flags, tb_error_t *err)
{
	b->dir = dir;
	b->max = max;
	b->want_size = size;
	snprintf(b->want, sizeof(b->want), "%s", digest);
	b->fd = openat(dir, b->tmp, flags | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (b->fd < 0)
		return tb_error_errno(err, TB_EIO, errno, "image cache: a file for blob %.20s",
				      digest);
	flock(b->fd, LOCK_EX); /* ours while it is written: not stale */
	if (!(b->md = EVP_MD_CTX_new()) || !EVP_DigestInit_ex(b->md, EVP_sha256(), NULL)) {
		tb_blob_abort(b);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	return 0;
}

int tb_blob_begin(tb_blob_t *b, int dir, const char *digest, uint64_t size, uint64_t max,
		  tb_error_t *err)
{
	memset(b, 0, sizeof(*b));
	b->fd = -1;
	snprintf(b->tmp, sizeof(b->tmp), TB_BLOB_TMP_PREFIX "%.16s-%d-%u", digest + 7,
		 (int)getpid(), atomic_fetch_add(&counter, 1));
	return open_blob(b, dir, digest, size, max, O_WRONLY | O_EXCL, err);
}

/* Reads the part's bytes into the digest. @return 0, or -1 (start over). */
static int digest_part(tb_blob_t *b)
{
	char buf[1 << 16];
	struct stat st;

	if (fstat(b->fd, &st) < 0 || (uint64_t)st.st_size >= b->want_size)
		return -1;
	for (uint64_t at = 0; at < (uint64_t)st.st_size;) {
		ssize_t n = pread(b->fd, buf, sizeof(buf), (off_t)at);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		EVP_DigestUpdate(b->md, buf, (size_t)n);
		at += (uint64_t)n;
	}
	b->n = b->from = (uint64_t)st.st_size;
	return lseek(b->fd, 0, SEEK_END) < 0 ? -1 : 0;
}

int tb_blob_resume(tb_blob_t *b, int dir, const char *digest, uint64_t size, uint64_t max,
		   tb_error_t *err)
{
	int rc;

	memset(b, 0, sizeof(*b));
	b->fd = -1;
	b->partial = b->keep = 1;
	snprintf(b->tmp, sizeof(b->tmp), TB_BLOB_PART_PREFIX "%.64s", digest + 7);
	if ((rc = open_blob(b, dir, digest, size, max, O_RDWR, err)) < 0)
		return rc;
	if (!size || digest_part(b) < 0) /* nothing to go on from, or no size to trust it by */
		return tb_blob_restart(b, err);
	return 0;
}

int tb_blob_restart(tb_blob_t *b, tb_error_t *err)
{
	if (ftruncate(b->fd, 0) < 0 || lseek(b->fd, 0, SEEK_SET) < 0 ||
	    !EVP_DigestInit_ex(b->md, EVP_sha256(), NULL))
		return tb_error_errno(err, TB_EIO, errno, "image cache: blob %.20s", b->want);
	b->n = b->from = 0;
	return 0;
}

int tb_blob_write(tb_blob_t *b, const void *data, size_t len, tb_error_t *err)
{
	uint64_t limit = b->want_size ? b->want_size : b->max;

	if (b->n + len > limit || b->n + len > b->max) {
		b->keep = 0; /* not the blob's bytes: nothing to resume from */
		return tb_error_set(err, TB_ERETRY, "blob %.80s: more than the %llu bytes %s",
				    b->want, (unsigned long long)limit,
				    b->want_size ? "its descriptor says" : "allowed");
	}
	b->n += len;
	EVP_DigestUpdate(b->md, data, len);
	for (size_t done = 0; done < len;) {
		ssize_t w = write(b->fd, (const char *)data + done, len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return tb_error_errno(err, TB_EIO, errno, "image cache: writing blob");
		done += (size_t)w;
	}
	return 0;
}

int tb_blob_commit(tb_blob_t *b, tb_error_t *err)
{
	unsigned char sum[32];
	char got[72] = "sha256:";
	int rc;

	EVP_DigestFinal_ex(b->md, sum, NULL);
	tb_hex(got + 7, sum, sizeof(sum));
	if (strcmp(got, b->want) != 0 || (b->want_size && b->n != b->want_size)) {
		rc = tb_error_set(err, TB_ERETRY,
				  "blob %.80s: the bytes received are %s (%llu bytes): not used",
				  b->want, got, (unsigned long long)b->n);
		b->keep = 0; /* a part that led here is no good either */
		tb_blob_abort(b);
		return rc;
	}
	if (renameat(b->dir, b->tmp, b->dir, b->want + 7) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "image cache: keeping blob %.20s", b->want);
		tb_blob_abort(b);
		return rc;
	}
	b->tmp[0] = '\0';
	tb_blob_abort(b); /* closes what is left */
	return 0;
}

void tb_blob_abort(tb_blob_t *b)
{
	if (b->tmp[0] && !(b->partial && b->keep && b->n))
		unlinkat(b->dir, b->tmp, 0);
	b->tmp[0] = '\0';
	if (b->fd >= 0)
		close(b->fd);
	b->fd = -1;
	EVP_MD_CTX_free(b->md);
	b->md = NULL;
}

int tb_blob_have(int dir, const char *digest)
{
	struct stat st;
	return fstatat(dir, digest + 7, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

int tb_blob_read(int dir, const char *digest, uint64_t max, char **out, size_t *len,
		 tb_error_t *err)
{
	int fd = openat(dir, digest + 7, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), rc;
	char name[64];

	if (fd < 0)
		return tb_error_errno(err, TB_EIO, errno, "image cache: blob %.20s", digest);
	snprintf(name, sizeof(name), "image cache: blob %.20s", digest);
	rc = tb_read_fd(fd, name, max > SIZE_MAX - 1 ? SIZE_MAX - 1 : (size_t)max, out, len, err);
	close(fd);
	if (rc == TB_ETOOBIG)
		tb_error_set(err, TB_ETOOBIG, "image cache: blob %.20s is over %llu bytes", digest,
			     (unsigned long long)max);
	return rc;
}
