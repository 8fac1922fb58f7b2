/*
 * store_put_all.h: several objects put at once (tb_store_put_all).
 *
 * A store's requests wait mostly on the server: a task's last objects (its
 * verdicts and its conversation record, which must all be durable before
 * its manifest) go up side by side, each on its own thread, so the record
 * costs one round trip instead of one per object.
 */
#ifndef TB_STORE_PUT_ALL_H
#define TB_STORE_PUT_ALL_H

#include "tb/store.h"

#include <stddef.h>

typedef struct tb_store_put_item {
	const char *key;
	int fd;           /* >= 0: put from this file (tb_store_put_fd) ... */
	const void *data; /* ... else these bytes (tb_store_put_bytes) */
	size_t len;
} tb_store_put_item_t;

/* Puts at once; more go in waves of this many. */
#define TB_STORE_PUT_ALL_WAVE 8

/**
 * Puts the @p n objects concurrently and waits for all of them.
 * @return 0 when every put succeeded; else the first failure in item order
 *         (the store's error names the key)
 */
int tb_store_put_all(tb_store_t *s, const tb_store_put_item_t *items, size_t n, tb_error_t *err);

#endif
