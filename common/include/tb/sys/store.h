/*
 * sys/store.h: what a store backend is made of, for those who write one
 * (store_dir.c, store_s3.c, store_s3v2.c, a test's wrapper): the function
 * table, the handle every backend's starts with, and the checksum helpers
 * they share. Callers use the wrappers of tb/store.h, never the table.
 */
#ifndef TB_SYS_STORE_H
#define TB_SYS_STORE_H

#include "tb/store.h"

/*
 * A download's checksums, computed as the body is written: an implementation
 * that can see the bytes calls reset at the start of each attempt and
 * update with every piece it writes, and the content need not be read back
 * to be verified. One that does not (a local directory copying files) is
 * read back instead.
 */
typedef struct tb_store_hasher tb_store_hasher_t;
void tb_store_hasher_reset(tb_store_hasher_t *h);
void tb_store_hasher_update(tb_store_hasher_t *h, const void *data, size_t len);

/* The SHA-256 of each part of an object a store sends in parts (see
 * struct tb_store's part_size), computed before the upload. */
typedef struct tb_part_sums {
	uint64_t part_size;
	size_t n;           /* parts: the last may be shorter */
	char (*sha256)[65]; /* n of them, lowercase hex; malloc'd */
} tb_part_sums_t;

void tb_part_sums_free(tb_part_sums_t *p);

/** Copies @p len bytes of @p data to byte @p at of the buffers of @p iov
 * taken as one (the caller keeps within their total). */
void tb_iov_put(const struct iovec *iov, int iovcnt, size_t at, const void *data, size_t len);

/** Each @p part_size part's SHA-256 of @p fd's first @p size bytes, in one
 * pass on the calling thread: for a put called without them.
 * @param[out] out released with tb_part_sums_free()
 * @return 0; TB_EINVAL for a part size of 0; TB_EIO (the file unreadable
 *         or shorter); TB_ENOMEM */
int tb_store_hash_parts(int fd, uint64_t size, uint64_t part_size, tb_part_sums_t *out,
			tb_error_t *err);

struct tb_store_ops {
	const char *name;
	/* Create-only: TB_EEXIST if @p key is there already (the wrapper
	 * then compares contents). @p fd is readable from offset 0 for
	 * @p sums->size bytes; @p sums->sha256 and @p sums->crc32c are its
	 * checksums, stored with it (a CRC-32C of "" is stored as none, as
	 * earlier builds did: tests make such objects). @p parts: each
	 * part's SHA-256 when the object is sent in parts (see struct
	 * tb_store), else NULL; a store that needs them and gets NULL, or
	 * sums of another part size, computes them itself. */
	int (*put)(tb_store_t *s, const char *key, int fd, const tb_object_info_t *sums,
		   const tb_part_sums_t *parts, tb_error_t *err);
	/* Writes the content to @p fd (empty, at offset 0), through @p h if
	 * it can (see tb_store_hasher_t), and fills @p out with the stored
	 * size and checksums. */
	int (*get)(tb_store_t *s, const char *key, int fd, tb_store_hasher_t *h,
		   tb_object_info_t *out, tb_error_t *err);
	/* @p len bytes from @p off into the @p iovcnt buffers of @p iov, in
	 * order, @p len their total (*got: fewer at the end, 0 past it); see
	 * tb_store_get_range_iov. */
	int (*range)(tb_store_t *s, const char *key, uint64_t off, const struct iovec *iov,
		     int iovcnt, size_t len, size_t *got, tb_error_t *err);
	int (*head)(tb_store_t *s, const char *key, tb_object_info_t *out, tb_error_t *err);
	int (*list)(tb_store_t *s, const char *prefix, tb_store_list_fn fn, void *ud,
		    tb_error_t *err);
	int (*del)(tb_store_t *s, const char *key, tb_error_t *err);
	int (*share)(tb_store_t *s, const char *key, unsigned seconds, char **out, tb_error_t *err);
	void (*close)(tb_store_t *s);
	/* Creates the bucket, where there is one; may be NULL. */
	int (*mkbucket)(tb_store_t *s, tb_error_t *err);
};

struct tb_store {
	const struct tb_store_ops *ops;
	char describe[512];
	/* Objects of at least multipart_min bytes go up in part_size parts,
	 * each signed with its own SHA-256, which the pass before the upload
	 * computes (put's @p parts); part_size 0: never in parts. */
	uint64_t part_size, multipart_min;
};

/** @p value as a recorded CRC-32C, into @p out: exactly 8 hex digits, in
 * lower case; anything else was not written by us and is no CRC-32C (""),
 * so the object is verified by its SHA-256 instead. */
void tb_store_take_crc32c(char out[9], const char *value);

/* What tb_store_hash_fd() computes. */
enum { TB_SUM_SHA256 = 1, TB_SUM_MD5 = 2, TB_SUM_CRC32C = 4 };

/** The checksums @p what names of @p fd's content from offset 0 (streamed,
 * one pass), and its size, into @p out; its other fields are left as they
 * are. */
int tb_store_hash_fd(int fd, unsigned what, tb_object_info_t *out, tb_error_t *err);

#endif
