/*
 * store_hasher.h: the state behind tb_store_hasher_t (see store.h), for
 * store.c, which owns one per download.
 */
#ifndef TB_STORE_HASHER_H
#define TB_STORE_HASHER_H

#include "tb/store.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdint.h>

struct tb_store_hasher {
	int fd; /* the file the download is written to */
	EVP_MD_CTX *ctx;
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

/** @return 0, or -1 out of memory (then hash the file afterwards) */
int tb_store_hasher_init(tb_store_hasher_t *h, int fd);
/** The SHA-256 and size of what was written in the last attempt.
 * @return 0; -1 if the hasher cannot vouch for it (read the file back) */
int tb_store_hasher_final(tb_store_hasher_t *h, char sha256[65], uint64_t *size);
void tb_store_hasher_free(tb_store_hasher_t *h);

#endif
