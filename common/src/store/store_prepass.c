/*
 * store_prepass.c: the pass over an object before it goes up.
 *
 * An upload needs the object's checksums before its first byte leaves:
 * S3 takes metadata only with the first request, and the SHA-256 that
 * names the content is stored as metadata. A store that sends a large
 * object in parts signed one by one (S3's multipart upload, each part's
 * SHA-256 its signed payload hash) also needs every part's SHA-256.
 *
 * The whole object's SHA-256 (1.2 GB/s with the CPU's SHA instructions)
 * cannot be split: it runs on the calling thread. The rest -- the CRC-32C
 * and the parts' SHA-256s, together as long as the first or a little
 * longer -- runs at the same time on a helper thread, over its own reads
 * of the file (the page cache serves both), so the pass takes about as
 * long as one SHA-256. Hashing the parts here rather than as each part is
 * sent takes that work off the upload, where the client competes for the
 * CPU with a store on the same machine: for 256 MiB to a local SeaweedFS
 * on two cores, 0.2 s of 2.2 (tests/bench/run artifacts). Small objects,
 * where a thread costs more than it saves, take one pass on the calling
 * thread. Either way the file must keep its size throughout: one that
 * grows or shrinks meanwhile is refused, not uploaded in part.
 */
#include "store_prepass.h"

#include "tb/encoding.h"
#include "tb/crc32c.h"
#include "tb/sigv4.h"

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define READ_CHUNK (256u << 10)
#define HELPER_MIN (1u << 20) /* smaller objects: one pass, no thread */

void tb_part_sums_free(tb_part_sums_t *p)
{
	free(p->sha256);
	memset(p, 0, sizeof(*p));
}

/* What the helper thread computes, and how it ended. */
typedef struct helper {
	int fd;
	uint64_t size, part_size; /* part_size 0: no parts */
	int want_crc;
	tb_part_sums_t *parts;
	uint32_t crc;
	int rc;
	tb_error_t err;
} helper_t;

/* With @p h->want_crc, the CRC-32C of @p h->fd's first @p h->size bytes;
 * with a part size, each part's SHA-256. A short read means the file
 * shrank: TB_EIO. */
static int crc_and_parts(helper_t *h)
{
	EVP_MD_CTX *ctx = h->part_size ? EVP_MD_CTX_new() : NULL;
	char *buf = malloc(READ_CHUNK);
	unsigned char d[32];
	unsigned int dl;
	uint64_t done = 0;
	size_t part = 0;
	int rc = 0;

	h->crc = 0;
	if (!buf || (h->part_size && (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1))) {
		rc = tb_error_set(&h->err, TB_ENOMEM, "out of memory");
		goto out;
	}
	while (done < h->size) {
		/* Up to the end of the current part, or of the object. */
		uint64_t end = h->part_size ? (part + 1) * h->part_size : h->size;
		if (end > h->size)
			end = h->size;
		size_t want = end - done < READ_CHUNK ? (size_t)(end - done) : READ_CHUNK;
		ssize_t n = pread(h->fd, buf, want, (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? tb_error_errno(&h->err, TB_EIO, errno, "store: read")
				   : tb_error_set(&h->err, TB_EIO,
						  "store: the file shrank while being read");
			goto out;
		}
		if (h->want_crc)
			h->crc = tb_crc32c(h->crc, buf, (size_t)n);
		done += (uint64_t)n;
		if (!ctx)
			continue;
		int ok = EVP_DigestUpdate(ctx, buf, (size_t)n) == 1;
		if (ok && done == end) {
			ok = EVP_DigestFinal_ex(ctx, d, &dl) == 1 &&
			     EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
			tb_hex(h->parts->sha256[part++], d, 32);
		}
		if (!ok) {
			rc = tb_error_set(&h->err, TB_EIO, "store: SHA-256 of part %zu failed",
					  part + 1);
			goto out;
		}
	}
out:
	EVP_MD_CTX_free(ctx);
	free(buf);
	return h->rc = rc;
}

static void *helper_main(void *arg)
{
	crc_and_parts(arg);
	return NULL;
}

/* Sets up @p parts for @p size bytes in @p part_size parts. */
static int parts_alloc(tb_part_sums_t *parts, uint64_t size, uint64_t part_size, tb_error_t *err)
{
	memset(parts, 0, sizeof(*parts));
	parts->part_size = part_size;
	parts->n = (size_t)((size + part_size - 1) / part_size);
	if (parts->n && !(parts->sha256 = calloc(parts->n, sizeof(*parts->sha256))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	return 0;
}

int tb_store_hash_parts(int fd, uint64_t size, uint64_t part_size, tb_part_sums_t *out,
			tb_error_t *err)
{
	helper_t h = { .fd = fd, .size = size, .part_size = part_size, .parts = out };
	int rc;

	memset(out, 0, sizeof(*out));
	if (!part_size)
		return tb_error_set(err, TB_EINVAL, "store: a part size of 0");
	if ((rc = parts_alloc(out, size, part_size, err)) < 0 || (rc = crc_and_parts(&h)) < 0) {
		if (rc < 0 && h.rc < 0)
			*err = h.err;
		tb_part_sums_free(out);
	}
	return rc;
}

int tb_store_prepass(int fd, uint64_t part_size, uint64_t multipart_min, tb_object_info_t *out,
		     tb_part_sums_t *parts, tb_error_t *err)
{
	struct stat st;
	helper_t h = { .fd = fd, .parts = parts, .want_crc = 1 };
	pthread_t thread;
	int rc, threaded = 0;

	memset(parts, 0, sizeof(*parts));
	if (fstat(fd, &st) < 0)
		return tb_error_errno(err, TB_EIO, errno, "store: stat");
	h.size = (uint64_t)st.st_size;
	if (part_size && h.size >= multipart_min)
		h.part_size = part_size;
	part_size = h.part_size;
	if (part_size && (rc = parts_alloc(parts, h.size, part_size, err)) < 0)
		return rc;
	if (h.size >= HELPER_MIN)
		threaded = pthread_create(&thread, NULL, helper_main, &h) == 0;
	/* Without the helper (a small object, or no thread to be had), the
	 * CRC-32C here and the parts after. */
	rc = tb_store_hash_fd(fd, TB_SUM_SHA256 | (threaded ? 0 : TB_SUM_CRC32C), out, err);
	if (threaded) {
		pthread_join(thread, NULL);
	} else if (rc == 0 && part_size) {
		h.want_crc = 0;
		crc_and_parts(&h); /* its error, if any, is h.rc and h.err */
	}
	if (rc == 0 && h.rc < 0)
		*err = h.err, rc = h.rc;
	if (rc == 0 && out->size != h.size)
		rc = tb_error_set(err, TB_EIO,
				  "store: the file changed size while being read (%llu, then %llu "
				  "bytes)",
				  (unsigned long long)h.size, (unsigned long long)out->size);
	if (rc == 0 && threaded)
		snprintf(out->crc32c, sizeof(out->crc32c), "%08x", (unsigned)h.crc);
	if (rc < 0)
		tb_part_sums_free(parts);
	return rc;
}
