/*
 * test_block_cache.c: the worker's block cache (worker/lazy/block_cache.h):
 * blocks by digest, a bound in bytes kept by evicting the least recently
 * used, and what a restarted worker finds on disk kept.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block_cache.h"

#include "tb/encoding.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

/* Block @p seed: its bytes, and its SHA-256 (which the cache checks). */
static void block(uint8_t sha[32], uint8_t *data, size_t len, int seed)
{
	memset(data, seed, len);
	SHA256(data, len, sha);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/tb-bcache-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_block_cache__keeps_the_most_recently_used_under_its_bound(void **state)
{
	uint8_t sha[4][32], data[1000], got[1000];
	tb_block_cache_t *c;
	tb_error_t err;
	char sub[128];

	(void)state;
	snprintf(sub, sizeof(sub), "%s/lru", dir);
	assert_int_equal(tb_block_cache_open(&c, sub, 3000, &err), 0);
	for (int i = 0; i < 3; i++) {
		block(sha[i], data, sizeof(data), i + 1);
		tb_block_cache_put(c, sha[i], data, sizeof(data));
	}
	assert_int_equal(tb_block_cache_bytes(c), 3000);
	assert_int_equal(tb_block_cache_get(c, sha[0], got, sizeof(got)), 1); /* 0 used again */
	block(sha[0], data, sizeof(data), 1);
	assert_memory_equal(got, data, sizeof(data));
	block(sha[3], data, sizeof(data), 4);
	tb_block_cache_put(c, sha[3], data, sizeof(data)); /* evicts 1, the oldest */
	assert_int_equal(tb_block_cache_bytes(c), 3000);
	assert_int_equal(tb_block_cache_get(c, sha[1], got, sizeof(got)), 0);
	assert_int_equal(tb_block_cache_get(c, sha[0], got, sizeof(got)), 1);
	assert_int_equal(tb_block_cache_get(c, sha[3], got, sizeof(got)), 1);
	/* asked for another length than kept: a miss, and dropped */
	assert_int_equal(tb_block_cache_get(c, sha[2], got, 10), 0);
	assert_int_equal(tb_block_cache_bytes(c), 2000);
	/* larger than the whole bound: not kept */
	uint8_t big[32], *huge = calloc(1, 4000);
	SHA256(huge, 4000, big);
	tb_block_cache_put(c, big, huge, 4000);
	assert_int_equal(tb_block_cache_bytes(c), 2000);
	free(huge);
	tb_block_cache_close(c);

	/* reopened, as by a restarted worker: what was there is kept, and a
	 * stray file is removed */
	char stray[200];
	snprintf(stray, sizeof(stray), "%s/not-a-digest", sub);
	FILE *f = fopen(stray, "we");
	assert_non_null(f);
	fclose(f);
	assert_int_equal(tb_block_cache_open(&c, sub, 3000, &err), 0);
	assert_int_equal(tb_block_cache_bytes(c), 2000);
	assert_int_equal(tb_block_cache_get(c, sha[3], got, sizeof(got)), 1);
	assert_int_equal(access(stray, F_OK), -1);
	/* a file whose bytes are not its name's: a miss, and dropped */
	char hex[65], bad[200];
	tb_hex(hex, sha[0], 32);
	snprintf(bad, sizeof(bad), "%s/%s", sub, hex);
	f = fopen(bad, "r+e");
	assert_non_null(f);
	fputc('!', f);
	fclose(f);
	assert_int_equal(tb_block_cache_get(c, sha[0], got, sizeof(got)), 0);
	assert_int_equal(tb_block_cache_bytes(c), 1000);
	struct stat st;
	assert_int_equal(stat(sub, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700); /* the worker's alone */
	tb_block_cache_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_block_cache__keeps_the_most_recently_used_under_its_bound),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
