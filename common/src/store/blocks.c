/*
 * blocks.c: an object's block digests (blocks.h).
 */
#include "tb/blocks.h"

#include "tb/encoding.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Fills @p buf with up to @p cap bytes of @p fd from @p off: fewer only at
 * its end. @return the bytes, or -1 (errno) */
static ssize_t fill(int fd, uint8_t *buf, size_t cap, uint64_t off)
{
	size_t have = 0;

	while (have < cap) {
		ssize_t n = pread(fd, buf + have, cap - have, (off_t)(off + have));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		have += (size_t)n;
	}
	return (ssize_t)have;
}

static void list_digest(tb_blocks_t *b)
{
	uint8_t sum[32];

	SHA256(b->sha, b->n * 32, sum);
	tb_hex(b->digest, sum, 32);
}

/* Appends one block's digest to @p b, growing it. 0, or -1 out of memory */
static int append(tb_blocks_t *b, size_t *cap, const uint8_t *data, size_t len)
{
	if (b->n == *cap) {
		size_t more = *cap ? *cap * 2 : 64;
		uint8_t *bigger = realloc(b->sha, more * 32);
		if (!bigger)
			return -1;
		b->sha = bigger;
		*cap = more;
	}
	SHA256(data, len, b->sha + b->n * 32);
	b->n++;
	return 0;
}

int tb_blocks_of_fd(int fd, const char *name, tb_blocks_t *out, char sha256[65], tb_error_t *err)
{
	EVP_MD_CTX *whole = sha256 ? EVP_MD_CTX_new() : NULL;
	uint8_t *buf = malloc(TB_BLOCK_SIZE), sum[32];
	size_t cap = 0;
	ssize_t n;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (!buf || (sha256 && (!whole || !EVP_DigestInit_ex(whole, EVP_sha256(), NULL)))) {
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		goto out;
	}
	while ((n = fill(fd, buf, TB_BLOCK_SIZE, out->size)) > 0) {
		if (append(out, &cap, buf, (size_t)n) < 0) {
			rc = tb_error_set(err, TB_ENOMEM, "out of memory");
			goto out;
		}
		if (whole)
			EVP_DigestUpdate(whole, buf, (size_t)n);
		out->size += (uint64_t)n;
		if ((size_t)n < TB_BLOCK_SIZE)
			break;
	}
	if (n < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "%s: read", name);
		goto out;
	}
	list_digest(out);
	if (whole) {
		EVP_DigestFinal_ex(whole, sum, NULL);
		tb_hex(sha256, sum, 32);
	}
out:
	EVP_MD_CTX_free(whole);
	free(buf);
	if (rc < 0)
		tb_blocks_free(out);
	return rc;
}

int tb_blocks_parse(const void *data, size_t len, uint64_t size, const char *digest,
		    tb_blocks_t *out, tb_error_t *err)
{
	size_t n = tb_blocks_count(size);

	memset(out, 0, sizeof(*out));
	if (len != n * 32)
		return tb_error_set(err, TB_EINVAL,
				    "block list: %zu bytes, where an object of %llu bytes has "
				    "%zu blocks of 32",
				    len, (unsigned long long)size, n);
	if (n && !(out->sha = malloc(len)))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	if (n)
		memcpy(out->sha, data, len);
	out->size = size, out->n = n;
	list_digest(out);
	if (digest && strcmp(digest, out->digest) != 0) {
		tb_error_set(err, TB_EINVAL, "block list: its SHA-256 is %s, not the %s named",
			     out->digest, digest);
		tb_blocks_free(out);
		return TB_EINVAL;
	}
	return 0;
}

int tb_blocks_check(const tb_blocks_t *b, size_t index, const void *data, size_t len,
		    tb_error_t *err)
{
	uint8_t sum[32];
	uint64_t at = (uint64_t)index * TB_BLOCK_SIZE;

	if (index >= b->n)
		return tb_error_set(err, TB_EIO, "block %zu: the object has %zu", index, b->n);
	uint64_t want = b->size - at < TB_BLOCK_SIZE ? b->size - at : TB_BLOCK_SIZE;
	if (len != want)
		return tb_error_set(err, TB_EIO, "block %zu: %zu bytes arrived, %llu expected",
				    index, len, (unsigned long long)want);
	SHA256(data, len, sum);
	if (memcmp(sum, b->sha + index * 32, 32) != 0)
		return tb_error_set(err, TB_EIO,
				    "block %zu (bytes %llu to %llu): its SHA-256 is not the one "
				    "recorded: the stored object is not the content named",
				    index, (unsigned long long)at,
				    (unsigned long long)(at + len - 1));
	return 0;
}

void tb_blocks_free(tb_blocks_t *b)
{
	free(b->sha);
	memset(b, 0, sizeof(*b));
}
