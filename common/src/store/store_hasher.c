/*
 * store_hasher.c: a download's checksums, computed beside the download.
 *
 * Implementations call tb_store_hasher_update() with what they have just
 * written to the file, in order. The CRC-32C is computed there and then
 * (a few GB/s). The SHA-256, when asked for, costs more (1.2 GB/s with
 * the CPU's SHA instructions): the first HASH_INLINE bytes are hashed
 * there and then (small objects: no thread); past that, a thread hashes
 * the file behind the writer, reading back what the page cache still
 * holds, so a large download's hashing runs on another core while the
 * network delivers the rest. A retried attempt (tb_store_hasher_reset)
 * starts over.
 */
#include "store_hasher.h"

#include "tb/encoding.h"
#include "tb/crc32c.h"
#include "tb/sigv4.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HASH_INLINE (1u << 20)
#define HASH_READ (1u << 20)

/* Hashes the file from h->hashed as far as the writer has got, until it
 * says it is done (or the attempt is reset). */
static void *hash_behind(void *arg)
{
	tb_store_hasher_t *h = arg;
	char *buf = malloc(HASH_READ);

	pthread_mutex_lock(&h->lock);
	for (;;) {
		while (h->hashed == h->written && !h->done && !h->failed)
			pthread_cond_wait(&h->cond, &h->lock);
		if (h->hashed == h->written || !buf || h->failed)
			break; /* done, and all of it hashed; or cannot go on */
		uint64_t from = h->hashed, want = h->written - from;
		pthread_mutex_unlock(&h->lock);
		ssize_t n =
		    pread(h->fd, buf, want < HASH_READ ? (size_t)want : HASH_READ, (off_t)from);
		if (n > 0)
			EVP_DigestUpdate(h->ctx, buf, (size_t)n);
		pthread_mutex_lock(&h->lock);
		if (n > 0)
			h->hashed += (uint64_t)n;
		else if (!(n < 0 && errno == EINTR))
			h->failed = 1; /* the caller reads the file back instead */
	}
	if (!buf)
		h->failed = 1;
	pthread_mutex_unlock(&h->lock);
	free(buf);
	return NULL;
}

/* Stops the thread, if one runs: after it has hashed what was written,
 * or at once when the attempt is @p abandoned. */
static void stop(tb_store_hasher_t *h, int abandoned)
{
	if (!h->thread_live)
		return;
	pthread_mutex_lock(&h->lock);
	h->done = 1;
	h->failed |= abandoned;
	pthread_cond_signal(&h->cond);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->thread, NULL);
	h->thread_live = 0;
}

int tb_store_hasher_init(tb_store_hasher_t *h, int fd, int want_sha)
{
	memset(h, 0, sizeof(*h));
	h->fd = fd;
	h->want_sha = want_sha;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);
	return !want_sha || (h->ctx = EVP_MD_CTX_new()) ? 0 : -1;
}

void tb_store_hasher_reset(tb_store_hasher_t *h)
{
	stop(h, 1);
	if (h->want_sha)
		EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL);
	h->crc = 0;
	h->written = h->hashed = 0;
	h->done = h->failed = 0;
	h->live = 1;
}

void tb_store_hasher_update(tb_store_hasher_t *h, const void *data, size_t len)
{
	if (!h->live)
		return;
	h->crc = tb_crc32c(h->crc, data, len);
	if (!h->want_sha) {
		h->written += len;
		return;
	}
	if (!h->thread_live && h->written + len <= HASH_INLINE) {
		EVP_DigestUpdate(h->ctx, data, len);
		h->written += len;
		h->hashed += len;
		return;
	}
	if (!h->thread_live && !h->failed) {
		/* From here on, behind the writer (or, without a thread, the
		 * file is read back at the end). */
		if (pthread_create(&h->thread, NULL, hash_behind, h) == 0)
			h->thread_live = 1;
		else
			h->failed = 1;
	}
	pthread_mutex_lock(&h->lock);
	h->written += len;
	pthread_cond_signal(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

unsigned tb_store_hasher_final(tb_store_hasher_t *h, tb_object_info_t *out)
{
	unsigned char d[32];
	unsigned int dl;

	stop(h, 0);
	if (!h->live)
		return 0;
	out->size = h->written;
	snprintf(out->crc32c, sizeof(out->crc32c), "%08x", (unsigned)h->crc);
	if (!h->want_sha || h->failed || h->hashed != h->written)
		return TB_SUM_CRC32C;
	EVP_DigestFinal_ex(h->ctx, d, &dl);
	tb_hex(out->sha256, d, 32);
	return TB_SUM_CRC32C | TB_SUM_SHA256;
}

void tb_store_hasher_free(tb_store_hasher_t *h)
{
	stop(h, 1);
	EVP_MD_CTX_free(h->ctx); /* NULL without want_sha: a no-op */
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
}
