/*
 * store.h: the artifact store, one interface with implementations chosen
 * by the configured URL:
 *
 *   dir:///var/lib/taskbox/artifacts   a local directory (the demo, tests)
 *   s3://bucket[/prefix]               S3 with Signature V4 (libcurl); the
 *                                      default for S3, since AWS refuses V2
 *                                      for buckets made since June 2020
 *   s3v2://bucket[/prefix]             S3-compatible servers that accept
 *                                      Signature V2, through libs3 (no
 *                                      multipart: one streamed request)
 *
 * Every object carries two checksums of its content, computed before it
 * goes up (S3: the x-amz-meta-sha256 and x-amz-meta-crc32c
 * headers): its SHA-256, which names the content (manifests, inputs, the
 * same-content check of a replayed put), and its CRC-32C, which a download
 * is verified with, as S3's and GCS's own clients verify transfers; a
 * caller comparing the content with a SHA-256 from elsewhere asks for the
 * SHA-256 of what arrived (TB_STORE_GET_SHA256). Objects without a CRC-32C
 * (written by earlier builds, or by others) are verified by SHA-256, else
 * by the MD5 the server vouches for. Objects
 * stream from and to file descriptors: nothing is held whole in memory. A
 * put never replaces an object with different content (attempts write
 * under their own keys; a replay writing the same bytes again succeeds).
 * S3 requests are retried with back-off on connection errors and on 5xx,
 * 429 and SlowDown answers; the final error says what was tried and why it
 * failed.
 *
 * This file owns the contract and the checks common to every store; the
 * implementations live in store_dir.c and store_s3.c. Credentials for S3
 * come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN
 * in the worker's environment, never from the configuration file.
 */
#ifndef TB_STORE_H
#define TB_STORE_H

#include "tb/config.h"
#include "tb/error.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

typedef struct tb_store tb_store_t;

typedef struct tb_object_info {
	uint64_t size;
	char sha256[65]; /* lowercase hex; "" when unknown (a listing) */
	char md5[33];    /* lowercase hex, where the store vouches for it (the
			  * ETag of a single-part S3 object); else "" */
	char crc32c[9];  /* 8 lowercase hex digits of the CRC-32C value; "" when
			  * unknown (a listing, an object of an earlier build) */
} tb_object_info_t;

/* Flags of tb_store_get_file(). */
enum {
	/* Compute the SHA-256 of what arrives, for comparison with one from
	 * elsewhere (a task's input): without it, out->sha256 is the one
	 * the store records, for the content the CRC-32C verified. */
	TB_STORE_GET_SHA256 = 1,
};

/** Called for each object of a listing, in key order; non-zero stops. */
typedef int (*tb_store_list_fn)(void *ud, const char *key, const tb_object_info_t *info);

/**
 * Opens the store @p cfg names.
 * @param[out] out released with tb_store_close()
 * @return 0; TB_EINVAL for an unknown scheme, a bad URL or missing S3
 *         credentials (the message names the variable)
 */
int tb_store_open(tb_store_t **out, const tb_store_config_t *cfg, tb_error_t *err);

void tb_store_close(tb_store_t *s);

/** The store's kind and location, for logs ("s3 http://host/bucket/pfx"). */
const char *tb_store_describe(const tb_store_t *s);

/**
 * Uploads the regular file @p path as @p key, computing its checksums
 * first; the file must not change size meanwhile.
 * @param[out] out size and checksum of what was stored (may be NULL)
 * @return 0; TB_EINVAL if @p key is not a valid relative path or an object
 *         with other content is there already; TB_EIO (final, after
 *         retries) with the request and the answer, or for a file that
 *         changed size while being read
 */
int tb_store_put_file(tb_store_t *s, const char *key, const char *path, tb_object_info_t *out,
		      tb_error_t *err);

/** Same, from an open file (read from offset 0): for files opened safely
 * inside a sandbox's file system, so no path is resolved twice. TB_EINVAL
 * also when the store refuses the object itself (its answer is about the
 * key: 400 InvalidRequest, InvalidArgument, KeyTooLongError, InvalidURI,
 * 414), not a failure of the store. */
int tb_store_put_fd(tb_store_t *s, const char *key, int fd, tb_object_info_t *out, tb_error_t *err);

/** Same, from memory: manifests, verdicts, conversation records. */
int tb_store_put_bytes(tb_store_t *s, const char *key, const void *data, size_t len,
		       tb_object_info_t *out, tb_error_t *err);

/**
 * Downloads @p key into @p path (replaced atomically, and only if what
 * arrived matches the stored checksums: CRC-32C, and SHA-256 where it is
 * computed). A directory at @p path is not replaced.
 * @param flags 0 or TB_STORE_GET_SHA256
 * @param[out] out size, CRC-32C and SHA-256 of the content (may be NULL):
 *             the SHA-256 computed from what arrived with
 *             TB_STORE_GET_SHA256 or for an object without a CRC-32C,
 *             else the one the store records for the content the
 *             CRC-32C verified; the MD5 only where it was all the store
 *             had
 * @return 0; TB_ENOTFOUND; TB_EIO for a checksum mismatch or a failed
 *         transfer (@p path is then left untouched)
 */
int tb_store_get_file(tb_store_t *s, const char *key, const char *path, unsigned flags,
		      tb_object_info_t *out, tb_error_t *err);

/**
 * Downloads @p key into memory (small objects: manifests, verdicts), at
 * most @p max bytes, checksum verified.
 * @param[out] out malloc'd; the caller frees it
 * @return 0; TB_ENOTFOUND; TB_ETOOBIG; TB_EIO
 */
int tb_store_get_bytes(tb_store_t *s, const char *key, size_t max, char **out, size_t *len,
		       tb_error_t *err);

/**
 * Reads @p len bytes of @p key from byte @p off into @p buf: a ranged GET
 * (`Range: bytes=off-(off+len-1)`), for inputs read on demand. Not
 * checked here: a range cannot be checked against the whole object's
 * checksums; its caller checks it against the object's block digests
 * (tb/blocks.h).
 * @param[out] got the bytes read: @p len, or fewer where the object ends
 *             (0 at or past its end)
 * @return 0; TB_ENOTFOUND; TB_EINVAL (a bad key, @p len 0); TB_EIO
 */
int tb_store_get_range(tb_store_t *s, const char *key, uint64_t off, size_t len, void *buf,
		       size_t *got, tb_error_t *err);

/**
 * tb_store_get_range() into @p iovcnt buffers, filled in order (as
 * readv(2)): the range is their total length. A range of blocks goes
 * straight into the blocks' own memory, wherever each is.
 * @return 0; TB_ENOTFOUND; TB_EINVAL (a bad key, an empty range, more than
 *         1024 buffers); TB_EIO
 */
int tb_store_get_range_iov(tb_store_t *s, const char *key, uint64_t off, const struct iovec *iov,
			   int iovcnt, size_t *got, tb_error_t *err);

/** Size and checksum of @p key. @return 0, TB_ENOTFOUND, TB_EIO */
int tb_store_head(tb_store_t *s, const char *key, tb_object_info_t *out, tb_error_t *err);

/** Lists the keys under @p prefix ("" for all). */
int tb_store_list(tb_store_t *s, const char *prefix, tb_store_list_fn fn, void *ud,
		  tb_error_t *err);

/** Deletes @p key; deleting what is not there succeeds. */
int tb_store_delete(tb_store_t *s, const char *key, tb_error_t *err);

/**
 * A URL anyone can GET @p key with for @p seconds (1 .. 604800).
 * @param[out] out malloc'd; the caller frees it
 * @return 0; TB_EINVAL where the store cannot sign (a local directory)
 */
int tb_store_share(tb_store_t *s, const char *key, unsigned seconds, char **out, tb_error_t *err);

/** The store in a local directory ("dir:///path"). */
int tb_store_dir_open(tb_store_t **out, const char *dir, tb_error_t *err);
int tb_store_s3_open(tb_store_t **out, const char *bucket, const char *prefix, const char *endpoint,
		     const char *region, tb_error_t *err);
int tb_store_s3v2_open(tb_store_t **out, const char *bucket, const char *prefix,
		       const char *endpoint, tb_error_t *err);

/** Creates the bucket of an S3 store, if missing (tests, local
 * development); a no-op for a directory. */
int tb_store_create_bucket(tb_store_t *s, tb_error_t *err);

#endif
