/*
 * uploads.h: files from the user's machine into the store under keys
 * named by their content (schemas/keys.md, "Uploads"): `taskbox
 * artifacts put` and `taskbox submit --input NAME=@PATH`.
 */
#ifndef TB_UPLOADS_H
#define TB_UPLOADS_H

#include "tb/store.h"

#include <stdint.h>

#define TB_UPLOADS_PREFIX "uploads/"

/* One file, uploaded or found there already. */
typedef struct tb_upload {
	const char *name; /* its path under what was named: "data/a.csv" */
	const char *rel;  /* that path below a directory named ("a.csv"); a
			   * file named: its name */
	char key[80];     /* uploads/<sha256> */
	char sha256[65];
	char blocks[65]; /* the SHA-256 of its block list (tb/blocks.h) */
	uint64_t size;
	int uploaded; /* 0: an object with that content was there already */
} tb_upload_t;

/**
 * Uploads @p path: a regular file, as its base name, or a directory, as
 * each regular file under it (symbolic links and other kinds skipped,
 * said on stderr), named by the directory's base name and the path
 * below it, in name order; at most @p max files. Each file is hashed,
 * then put at uploads/<sha256> unless an object is there with that
 * content, and its block list at blocks/<sha256> likewise; memory stays
 * flat whatever the size. @p fn is called after
 * each file.
 * @return 0; TB_ENOTFOUND (no such path), TB_EINVAL (not a file or a
 *         directory, too many files, a file that changed as it was read),
 *         or the store's error; @p err names the file
 */
int tb_uploads_put(tb_store_t *s, const char *path, size_t max,
		   void (*fn)(void *ud, const tb_upload_t *u), void *ud, tb_error_t *err);

#endif
