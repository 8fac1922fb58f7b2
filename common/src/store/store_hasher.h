/*
 * store_hasher.h: the state behind tb_store_hasher_t (see store.h), for
 * store.c, which owns one per download.
 */
#ifndef TB_STORE_HASHER_H
#define TB_STORE_HASHER_H

#include "tb/store.h"
#include "tb/sys/store.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdint.h>

struct tb_store_hasher {
	int fd;           /* the file the download is written to */
	int want_sha;     /* SHA-256 too, else only the CRC-32C */
	EVP_MD_CTX *ctx;  /* the SHA-256, with want_sha */
	uint32_t crc;     /* the CRC-32C, always, inline (cheap) */
	int live;         /* the implementation fed it (reset was called) */
	int failed;       /* cannot vouch: read the file back instead */
	uint64_t written; /* bytes the writer has put in the file */
	/* from here on, under lock while the thread runs */
	uint64_t hashed;
	int done;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	int thread_live;
};

/** @param want_sha the SHA-256 as well as the CRC-32C
 * @return 0, or -1 out of memory (then hash the file afterwards) */
int tb_store_hasher_init(tb_store_hasher_t *h, int fd, int want_sha);
/** The checksums (into @p out->crc32c and ->sha256) and size of what was
 * written in the last attempt.
 * @return the TB_SUM_* the hasher vouches for; 0 if none (the file must be
 *         read back) */
unsigned tb_store_hasher_final(tb_store_hasher_t *h, tb_object_info_t *out);
void tb_store_hasher_free(tb_store_hasher_t *h);

#endif
