/*
 * store.c: choosing a store by URL, and what every store does the same:
 * key checks, checksums on the way in, verification on the way out,
 * no silent overwrites, atomic replacement of downloaded files.
 *
 * Two checksums, two jobs. The SHA-256 names the content: manifests
 * carry it, inputs are checked against it, a replayed put compares it.
 * The CRC-32C checks that a transfer delivered what was stored, as S3's
 * and GCS's own clients check theirs: a 256 MiB download's SHA-256 costs
 * 0.22 s of CPU here, its CRC-32C 0.04 s, and on a small machine that
 * also runs the store the difference is the download's speed. Both are
 * computed before an upload, since S3 takes metadata only with the first
 * request (store_prepass.c, which also hashes the parts of an object a
 * store sends in parts).
 */
#include "tb/store.h"
#include "tb/sys/store.h"

#include "tb/encoding.h"

#include "store_hasher.h"
#include "store_prepass.h"
#include "tb/codec.h"
#include "tb/crc32c.h"
#include "tb/sigv4.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HASH_CHUNK (256u << 10)

int tb_store_open(tb_store_t **out, const tb_store_config_t *cfg, tb_error_t *err)
{
	const char *url = cfg->url;

	*out = NULL;
	if (!strncmp(url, "dir://", 6)) {
		if (url[6] != '/')
			return tb_error_set(err, TB_EINVAL,
					    "store.url '%s': dir:// takes an absolute path "
					    "(dir:///var/lib/taskbox/artifacts)",
					    url);
		return tb_store_dir_open(out, url + 6, err);
	}
	int v2 = !strncmp(url, "s3v2://", 7);
	if (v2 || !strncmp(url, "s3://", 5)) {
		char bucket[64];
		const char *b = url + (v2 ? 7 : 5), *slash = strchr(b, '/');
		const char *prefix = slash && slash[1] ? slash + 1 : "";
		size_t n = slash ? (size_t)(slash - b) : strlen(b);
		if (n < 3 || n > 63)
			return tb_error_set(
			    err, TB_EINVAL,
			    "store.url '%s': the bucket name must be 3-63 characters", url);
		memcpy(bucket, b, n);
		bucket[n] = '\0';
		return v2 ? tb_store_s3v2_open(out, bucket, prefix, cfg->endpoint, err)
			  : tb_store_s3_open(out, bucket, prefix, cfg->endpoint, cfg->region, err);
	}
	return tb_error_set(err, TB_EINVAL,
			    "store.url '%s': expected dir:///path, s3://bucket[/prefix] or "
			    "s3v2://bucket[/prefix]",
			    url);
}

int tb_store_create_bucket(tb_store_t *s, tb_error_t *err)
{
	return s->ops->mkbucket ? s->ops->mkbucket(s, err) : 0;
}

void tb_store_close(tb_store_t *s)
{
	if (s)
		s->ops->close(s);
}

const char *tb_store_describe(const tb_store_t *s)
{
	return s->describe;
}

static int check_key(const char *key, tb_error_t *err)
{
	char why[128];

	if (key && strlen(key) > 1024)
		return tb_error_set(
		    err, TB_EINVAL,
		    "store: a key of %zu bytes, over the 1024 an object key may have", strlen(key));
	if (!key || !key[0] || tb_check_relpath(key, why, sizeof(why)) != 0)
		return tb_error_set(err, TB_EINVAL,
				    "store: key '%.200s' is not a valid relative path",
				    key ? key : "");
	return 0;
}

int tb_store_hash_fd(int fd, unsigned what, tb_object_info_t *out, tb_error_t *err)
{
	unsigned char digest[32];
	unsigned int dlen = 0;
	EVP_MD_CTX *ctx = what & TB_SUM_SHA256 ? EVP_MD_CTX_new() : NULL;
	EVP_MD_CTX *mctx = what & TB_SUM_MD5 ? EVP_MD_CTX_new() : NULL;
	char *buf = malloc(HASH_CHUNK);
	uint64_t total = 0;
	uint32_t crc = 0;
	int rc = 0;

	if (!buf || (what & TB_SUM_SHA256 && !ctx) || (what & TB_SUM_MD5 && !mctx) ||
	    (ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) ||
	    (mctx && EVP_DigestInit_ex(mctx, EVP_md5(), NULL) != 1)) {
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		goto out;
	}
	for (;;) {
		ssize_t n = pread(fd, buf, HASH_CHUNK, (off_t)total);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = tb_error_errno(err, TB_EIO, errno, "store: read");
			goto out;
		}
		if (n == 0)
			break;
		if (ctx)
			EVP_DigestUpdate(ctx, buf, (size_t)n);
		if (mctx)
			EVP_DigestUpdate(mctx, buf, (size_t)n);
		if (what & TB_SUM_CRC32C)
			crc = tb_crc32c(crc, buf, (size_t)n);
		total += (uint64_t)n;
	}
	if (ctx) {
		EVP_DigestFinal_ex(ctx, digest, &dlen);
		tb_hex(out->sha256, digest, 32);
	}
	if (mctx) {
		EVP_DigestFinal_ex(mctx, digest, &dlen);
		tb_hex(out->md5, digest, 16);
	}
	if (what & TB_SUM_CRC32C)
		snprintf(out->crc32c, sizeof(out->crc32c), "%08x", (unsigned)crc);
	out->size = total;
out:
	EVP_MD_CTX_free(ctx);
	EVP_MD_CTX_free(mctx);
	free(buf);
	return rc;
}

/* Whether what the store holds is the content we hashed: by SHA-256 where
 * the store keeps it, else by the MD5 it vouches for. */
static int same_content(const tb_object_info_t *have, const tb_object_info_t *mine)
{
	if (have->sha256[0])
		return !strcmp(have->sha256, mine->sha256);
	if (have->md5[0])
		return !strcmp(have->md5, mine->md5);
	return 0;
}

void tb_store_take_crc32c(char out[9], const char *value)
{
	size_t n = 0;

	out[0] = '\0';
	if (strlen(value) != 8 || strspn(value, "0123456789abcdefABCDEF") != 8)
		return;
	for (; n < 8; n++)
		out[n] = (char)(value[n] | 0x20); /* hex digits: lower case */
	out[8] = '\0';
}

/* Which checksums of a download to compute: the CRC-32C where the store
 * records one (and it is enough, unless the caller wants the SHA-256);
 * else the SHA-256, and the MD5 where that is all the store vouches for. */
static unsigned sums_needed(const tb_object_info_t *stored, unsigned flags)
{
	if (stored->crc32c[0])
		return TB_SUM_CRC32C | (flags & TB_STORE_GET_SHA256 ? TB_SUM_SHA256 : 0);
	return TB_SUM_SHA256 | (stored->sha256[0] ? 0 : TB_SUM_MD5);
}

/* Whether @p got (the sums @p computed of what arrived) matches what the
 * store records; then fills in the SHA-256 the CRC-32C vouched for. */
static int check_received(const char *key, const tb_object_info_t *stored, unsigned computed,
			  tb_object_info_t *got, tb_error_t *err)
{
	const char *kind = NULL, *want = NULL, *have = NULL;

	if (computed & TB_SUM_CRC32C && strcmp(stored->crc32c, got->crc32c))
		kind = "crc32c", want = stored->crc32c, have = got->crc32c;
	else if (computed & TB_SUM_SHA256 && stored->sha256[0] &&
		 strcmp(stored->sha256, got->sha256))
		kind = "sha256", want = stored->sha256, have = got->sha256;
	else if (computed & TB_SUM_MD5 && stored->md5[0] && strcmp(stored->md5, got->md5))
		kind = "md5", want = stored->md5, have = got->md5;
	if (kind)
		return tb_error_set(err, TB_EIO,
				    "store: checksum mismatch for %s: stored %s %s, received %s "
				    "(%llu bytes)",
				    key, kind, want, have, (unsigned long long)got->size);
	if (!(computed & TB_SUM_SHA256))
		snprintf(got->sha256, sizeof(got->sha256), "%s", stored->sha256);
	return 0;
}

static int put_fd(tb_store_t *s, const char *key, int fd, tb_object_info_t *out, tb_error_t *err)
{
	tb_object_info_t have, info;
	int rc;

	memset(&info, 0, sizeof(info));
	tb_part_sums_t parts;
	if ((rc = tb_store_prepass(fd, s->part_size, s->multipart_min, &info, &parts, err)) < 0)
		return rc;
	/* Create-only: a later attempt writes its own keys, and a replay of
	 * the same attempt writes the same bytes, so an existing key is fine
	 * only with the same content. */
	rc = s->ops->put(s, key, fd, &info, parts.n ? &parts : NULL, err);
	tb_part_sums_free(&parts);
	if (rc == TB_EEXIST) {
		memset(&have, 0, sizeof(have));
		if ((rc = s->ops->head(s, key, &have, err)) < 0)
			return rc;
		if (!have.sha256[0] && have.md5[0] &&
		    (rc = tb_store_hash_fd(fd, TB_SUM_MD5, &info, err)) < 0)
			return rc;
		if (!same_content(&have, &info))
			return tb_error_set(
			    err, TB_EINVAL,
			    "store: %s exists with other content (sha256 %s, not %s)", key,
			    have.sha256[0] ? have.sha256 : "unknown", info.sha256);
		rc = 0;
	}
	if (rc < 0)
		return rc;
	if (out)
		*out = info;
	return 0;
}

int tb_store_put_file(tb_store_t *s, const char *key, const char *path, tb_object_info_t *out,
		      tb_error_t *err)
{
	struct stat st;
	int fd, rc;

	if ((rc = check_key(key, err)) < 0)
		return rc;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return tb_error_errno(err, TB_EIO, errno, "store: open %s", path);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return tb_error_set(err, TB_EINVAL, "store: %s is not a regular file", path);
	}
	rc = put_fd(s, key, fd, out, err);
	close(fd);
	if (rc < 0)
		tb_error_prefix(err, "put %s", key);
	return rc;
}

int tb_store_put_fd(tb_store_t *s, const char *key, int fd, tb_object_info_t *out, tb_error_t *err)
{
	int rc;

	if ((rc = check_key(key, err)) < 0)
		return rc;
	if ((rc = put_fd(s, key, fd, out, err)) < 0)
		tb_error_prefix(err, "put %s", key);
	return rc;
}

int tb_store_put_bytes(tb_store_t *s, const char *key, const void *data, size_t len,
		       tb_object_info_t *out, tb_error_t *err)
{
	int fd, rc;

	if ((rc = check_key(key, err)) < 0)
		return rc;
	/* A memfd gives small objects the same streaming path as files. */
	fd = memfd_create("taskbox-object", MFD_CLOEXEC);
	if (fd < 0)
		return tb_error_errno(err, TB_EIO, errno, "store: memfd");
	size_t done = 0;
	while (done < len) {
		ssize_t n = write(fd, (const char *)data + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = tb_error_errno(err, TB_EIO, errno, "store: memfd write");
			close(fd);
			return rc;
		}
		done += (size_t)n;
	}
	rc = put_fd(s, key, fd, out, err);
	close(fd);
	if (rc < 0)
		tb_error_prefix(err, "put %s", key);
	return rc;
}

/* Gets @p key into @p fd and checks what arrived against the stored
 * checksums (sums_needed): from the hasher where the implementation fed
 * it, else by reading @p fd back. @p got: size and checksums of the
 * content. */
static int get_checked(tb_store_t *s, const char *key, int fd, unsigned flags,
		       tb_object_info_t *got, tb_error_t *err)
{
	tb_object_info_t stored;
	tb_store_hasher_t h;
	unsigned need = 0, have = 0;
	int rc;

	memset(&stored, 0, sizeof(stored));
	memset(got, 0, sizeof(*got));
	if (tb_store_hasher_init(&h, fd, flags & TB_STORE_GET_SHA256) < 0) {
		tb_store_hasher_free(&h);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	rc = s->ops->get(s, key, fd, &h, &stored, err);
	if (rc == 0) {
		need = sums_needed(&stored, flags);
		have = tb_store_hasher_final(&h, got);
		if ((need & have) != need && (rc = tb_store_hash_fd(fd, need, got, err)) == 0)
			have = need;
	}
	tb_store_hasher_free(&h);
	if (rc == 0)
		rc = check_received(key, &stored, need & have, got, err);
	return rc;
}

/*
 * Moves the finished download @p tmp to @p path, replacing what is there
 * in one step, so no reader sees half a file. No fsync: a downloaded copy
 * (a task's input, a CLI download) is fetched again if lost. Nor the
 * flush a plain rename over an existing file makes ext4 do (auto_da_alloc
 * writes the new file out first: 0.15 s for 256 MiB here): an existing
 * regular file is exchanged with the download (RENAME_EXCHANGE), and then
 * unlinked under the temporary name. Anything else, or a file system that
 * cannot exchange, gets the rename.
 */
static int put_in_place(const char *tmp, const char *path, int *tmp_ours, tb_error_t *err)
{
	struct stat st;

	if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) &&
	    renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) == 0) {
		struct stat was;
		if (lstat(tmp, &was) == 0 && was.st_dev == st.st_dev && was.st_ino == st.st_ino) {
			/* @p tmp is the old file now: a leftover if this
			 * fails, not a failed download */
			unlink(tmp);
			return 0;
		}
		/* Something else took the name between the look and the
		 * exchange (a directory, say): it goes back, and the rename
		 * decides. Should that fail too, @p tmp is the other thing's
		 * now and must be left alone: the caller removes @p tmp only
		 * while *tmp_ours. */
		if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) < 0) {
			*tmp_ours = 0;
			return tb_error_errno(err, TB_EIO, errno,
					      "store: save %s: it changed meanwhile, and what "
					      "was there is now at %s",
					      path, tmp);
		}
	}
	if (rename(tmp, path) < 0)
		return tb_error_errno(err, TB_EIO, errno, "store: save %s", path);
	return 0;
}

/*
 * The page cache of the file at @p path, if it is a regular one, given
 * back before a download that will replace it is written: the new copy is
 * the one that will be read, and the old one stays whole on disk until the
 * exchange (a reader of it meanwhile reads the disk). Else the two copies
 * are cached side by side, and the new one's pages push out other files'
 * (on a VM that hands free memory back to its host, as the development
 * machine does, fresh pages also cost the host's faults: a 256 MiB
 * download over an existing file took up to twice as long as one into a
 * new file, for curl as for us; curl's O_TRUNC frees the old pages first).
 * Best effort.
 */
static void drop_cached(const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
}

int tb_store_get_file(tb_store_t *s, const char *key, const char *path, unsigned flags,
		      tb_object_info_t *out, tb_error_t *err)
{
	tb_object_info_t got;
	char tmp[4096];
	int fd, rc, tmp_ours = 1;

	if ((rc = check_key(key, err)) < 0)
		return rc;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.partial-XXXXXX", path) >= sizeof(tmp))
		return tb_error_set(err, TB_EINVAL, "store: path too long");
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return tb_error_errno(err, TB_EIO, errno, "store: create %s", tmp);
	drop_cached(path);
	if (get_checked(s, key, fd, flags, &got, err) < 0 ||
	    put_in_place(tmp, path, &tmp_ours, err) < 0)
		goto fail; /* the error says why; its code is returned */
	close(fd);
	if (out)
		*out = got;
	return 0;
fail:
	close(fd);
	if (tmp_ours)
		unlink(tmp);
	return tb_error_prefix(err, "get %s", key);
}

int tb_store_get_bytes(tb_store_t *s, const char *key, size_t max, char **out, size_t *len,
		       tb_error_t *err)
{
	tb_object_info_t info, got;
	int fd, rc;

	*out = NULL;
	*len = 0;
	if ((rc = check_key(key, err)) < 0)
		return rc;
	memset(&info, 0, sizeof(info));
	if ((rc = s->ops->head(s, key, &info, err)) < 0)
		return rc;
	if (info.size > max)
		return tb_error_set(err, TB_ETOOBIG, "get %s: %llu bytes, at most %zu expected",
				    key, (unsigned long long)info.size, max);
	if ((fd = memfd_create("taskbox-object", MFD_CLOEXEC)) < 0)
		return tb_error_errno(err, TB_EIO, errno, "store: memfd");
	if ((rc = get_checked(s, key, fd, 0, &got, err)) < 0)
		goto out;
	if (got.size > max) {
		rc = tb_error_set(err, TB_ETOOBIG, "get %s: over %zu bytes", key, max);
		goto out;
	}
	if (!(*out = malloc(got.size ? got.size : 1))) {
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		goto out;
	}
	if (pread(fd, *out, got.size, 0) != (ssize_t)got.size) {
		rc = tb_error_errno(err, TB_EIO, errno, "store: read back %s", key);
		free(*out);
		*out = NULL;
		goto out;
	}
	*len = got.size;
out:
	close(fd);
	return rc;
}

int tb_store_get_range(tb_store_t *s, const char *key, uint64_t off, size_t len, void *buf,
		       size_t *got, tb_error_t *err)
{
	struct iovec one = { buf, len };

	return tb_store_get_range_iov(s, key, off, &one, 1, got, err);
}

#define MAX_IOV 1024

int tb_store_get_range_iov(tb_store_t *s, const char *key, uint64_t off, const struct iovec *iov,
			   int iovcnt, size_t *got, tb_error_t *err)
{
	size_t len = 0;
	int rc;

	*got = 0;
	if ((rc = check_key(key, err)) < 0)
		return rc;
	if (iovcnt < 1 || iovcnt > MAX_IOV)
		return tb_error_set(err, TB_EINVAL, "get %s: %d buffers for a range", key, iovcnt);
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > SIZE_MAX - len)
			return tb_error_set(err, TB_EINVAL, "get %s: an overflowing range", key);
		len += iov[i].iov_len;
	}
	if (len == 0 || off > UINT64_MAX - len)
		return tb_error_set(err, TB_EINVAL, "get %s: an empty or overflowing range", key);
	return s->ops->range(s, key, off, iov, iovcnt, len, got, err);
}

void tb_iov_put(const struct iovec *iov, int iovcnt, size_t at, const void *data, size_t len)
{
	const char *from = data;

	for (int i = 0; i < iovcnt && len; i++) {
		if (at >= iov[i].iov_len) {
			at -= iov[i].iov_len;
			continue;
		}
		size_t n = iov[i].iov_len - at < len ? iov[i].iov_len - at : len;
		memcpy((char *)iov[i].iov_base + at, from, n);
		from += n, len -= n, at = 0;
	}
}

int tb_store_head(tb_store_t *s, const char *key, tb_object_info_t *out, tb_error_t *err)
{
	int rc;

	if ((rc = check_key(key, err)) < 0)
		return rc;
	return s->ops->head(s, key, out, err);
}

int tb_store_list(tb_store_t *s, const char *prefix, tb_store_list_fn fn, void *ud, tb_error_t *err)
{
	return s->ops->list(s, prefix ? prefix : "", fn, ud, err);
}

int tb_store_delete(tb_store_t *s, const char *key, tb_error_t *err)
{
	int rc;

	if ((rc = check_key(key, err)) < 0)
		return rc;
	return s->ops->del(s, key, err);
}

int tb_store_share(tb_store_t *s, const char *key, unsigned seconds, char **out, tb_error_t *err)
{
	int rc;

	*out = NULL;
	if ((rc = check_key(key, err)) < 0)
		return rc;
	if (seconds < 1 || seconds > 604800)
		return tb_error_set(err, TB_EINVAL,
				    "store: a share lasts 1 to 604800 seconds, not %u", seconds);
	return s->ops->share(s, key, seconds, out, err);
}
