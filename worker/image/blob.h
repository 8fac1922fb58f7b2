/*
 * blob.h: a blob written into the image cache as it arrives, its digest
 * computed on the way, and kept only if it matches the one asked for: a
 * blob whose bytes do not match is never used (OCI's content
 * addressing). The file is made under a temporary name held with an
 * flock while it is written (a stale one is anybody's to remove:
 * cache.c), then renamed to its digest's hex.
 */
#ifndef TB_BLOB_H
#define TB_BLOB_H

#include "tb/error.h"

#include <openssl/evp.h>
#include <stddef.h>
#include <stdint.h>

#define TB_BLOB_TMP_PREFIX ".tmp-"
/* A layer's bytes so far, kept across failed fetches and worker deaths
 * under this name and its hex, so that the next fetch resumes where the
 * last one stopped (tb_blob_resume); written only under the blob's own
 * lock (cache.c), removed when complete, bad, or a day old. */
#define TB_BLOB_PART_PREFIX ".part-"

typedef struct tb_blob {
	int dir; /* the cache's blobs directory (not owned) */
	int fd;
	EVP_MD_CTX *md;
	uint64_t n, max, want_size; /* want_size 0: unknown */
	uint64_t from;              /* bytes it had when this fetch began */
	char want[72];              /* "sha256:<hex>" */
	char tmp[128];
	int partial; /* a resumable part (TB_BLOB_PART_PREFIX) ... */
	int keep;    /* ... kept by an abort: its bytes may still be good */
} tb_blob_t;

/** Starts blob @p digest of @p size bytes (0: not known) in @p dir; more
 * than @p max bytes is refused. @return 0 or TB_EIO. */
int tb_blob_begin(tb_blob_t *b, int dir, const char *digest, uint64_t size, uint64_t max,
		  tb_error_t *err);

/** Starts blob @p digest as tb_blob_begin() does, from the bytes an
 * earlier fetch left (read again to digest them): b->n is where the
 * source should go on from (0: the start). An abort after a failed
 * transfer keeps what came; a mismatch at commit, or bytes past the size,
 * drop it. Only for a blob whose size is known. @return 0 or TB_EIO. */
int tb_blob_resume(tb_blob_t *b, int dir, const char *digest, uint64_t size, uint64_t max,
		   tb_error_t *err);

/** Starts over from no bytes (a source that sends the whole blob where
 * the rest was asked for). @return 0 or TB_EIO. */
int tb_blob_restart(tb_blob_t *b, tb_error_t *err);

/** Adds bytes. @return 0; TB_ERETRY past the size (or max): what the
 * source sends is not the blob (a bad transfer, or a bad source); TB_EIO. */
int tb_blob_write(tb_blob_t *b, const void *data, size_t len, tb_error_t *err);

/** Checks the digest and size and keeps the blob. @return 0; TB_ERETRY
 * naming both digests on a mismatch (the bytes are dropped: the platform
 * failed, the image may still be right); TB_EIO. */
int tb_blob_commit(tb_blob_t *b, tb_error_t *err);

/** Drops what was written (after a failure). Safe after commit. */
void tb_blob_abort(tb_blob_t *b);

/** Whether blob @p digest is in @p dir already. */
int tb_blob_have(int dir, const char *digest);

/** Reads blob @p digest from @p dir into memory (at most @p max bytes):
 * a manifest or config. @return 0 and a malloc'd @p out; TB_EIO. */
int tb_blob_read(int dir, const char *digest, uint64_t max, char **out, size_t *len,
		 tb_error_t *err);

#endif
