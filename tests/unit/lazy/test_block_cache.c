/*
 * test_block_cache.c: the worker's block cache (worker/lazy/block_cache.h):
 * a sparse file per content, each block at its offset, a bound in bytes
 * kept by evicting the least recently used, and what a restarted worker
 * finds on disk kept.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block_cache.h"

#include "tb/encoding.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

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

/* A content of @p size bytes made of @p seed, and its block list. */
static void content(tb_blocks_t *b, uint8_t **data, uint64_t size, int seed)
{
	char path[128];
	tb_error_t err;

	*data = malloc(size);
	assert_non_null(*data);
	for (uint64_t i = 0; i < size; i++)
		(*data)[i] = (uint8_t)(seed + i / TB_BLOCK_SIZE * 7 + i % 251);
	snprintf(path, sizeof(path), "%s/content", dir);
	FILE *f = fopen(path, "we");
	assert_non_null(f);
	assert_int_equal(fwrite(*data, 1, size, f), size);
	fclose(f);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(tb_blocks_of_fd(fd, "content", b, NULL, &err), 0);
	close(fd);
	unlink(path);
}

static void put(tb_block_cache_t *c, const tb_blocks_t *b, const uint8_t *data, size_t index)
{
	tb_block_cache_put(c, b, index, data + index * TB_BLOCK_SIZE);
}

/* Whether block @p index is kept, with its bytes. */
static int got(tb_block_cache_t *c, const tb_blocks_t *b, const uint8_t *data, size_t index)
{
	static uint8_t buf[TB_BLOCK_SIZE];

	if (!tb_block_cache_get(c, b, index, buf))
		return 0;
	assert_memory_equal(buf, data + index * TB_BLOCK_SIZE, tb_blocks_len(b, index));
	return 1;
}

static void file_of(char *out, size_t cap, const char *sub, const tb_blocks_t *b)
{
	snprintf(out, cap, "%s/%s.blocks", sub, b->digest);
}

#define MIB (1ull << 20)

static void test_block_cache__keeps_the_most_recently_used_under_its_bound(void **state)
{
	tb_blocks_t a, b, e;
	uint8_t *ad, *bd, *ed;
	tb_block_cache_t *c;
	tb_error_t err;
	char sub[128], path[300];
	struct stat st;

	(void)state;
	content(&a, &ad, 3 * MIB + MIB / 2, 1); /* blocks of 1, 1, 1 and 0.5 MiB */
	content(&b, &bd, 2 * MIB, 2);
	snprintf(sub, sizeof(sub), "%s/lru", dir);
	assert_int_equal(tb_block_cache_open(&c, sub, 3 * MIB, &err), 0);
	for (size_t i = 0; i < 3; i++)
		put(c, &a, ad, i);
	assert_int_equal(tb_block_cache_bytes(c), 3 * MIB);
	assert_true(tb_block_cache_has(c, &a, 2));
	assert_false(tb_block_cache_has(c, &a, 3));
	assert_true(got(c, &a, ad, 0)); /* 0 used again */
	put(c, &a, ad, 3);              /* evicts 1, the oldest */
	assert_int_equal(tb_block_cache_bytes(c), 2 * MIB + MIB / 2);
	assert_false(got(c, &a, ad, 1));
	assert_true(got(c, &a, ad, 0));
	assert_true(got(c, &a, ad, 3));
	/* one file for the content, its evicted block a hole */
	file_of(path, sizeof(path), sub, &a);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 3 * MIB + MIB / 2);
	assert_true((uint64_t)st.st_blocks * 512 <= 2 * MIB + MIB / 2 + 64 * 1024);
	/* another content: a file of its own; making room for it evicts 2 */
	put(c, &b, bd, 1);
	assert_int_equal(tb_block_cache_bytes(c), 2 * MIB + MIB / 2);
	assert_false(got(c, &a, ad, 2));
	assert_true(got(c, &b, bd, 1));
	/* the same block of another content is not this one's */
	assert_false(got(c, &b, bd, 0));
	/* a content left with no block: its file is removed */
	put(c, &b, bd, 0); /* evicts a's 0 */
	assert_true(got(c, &b, bd, 0));
	assert_true(got(c, &b, bd, 1));
	assert_int_equal(access(path, F_OK), 0);
	content(&e, &ed, MIB, 4);
	put(c, &e, ed, 0); /* evicts a's 3, its last */
	assert_int_equal(tb_block_cache_bytes(c), 3 * MIB);
	assert_false(got(c, &a, ad, 3));
	assert_int_equal(access(path, F_OK), -1);
	tb_block_cache_close(c);

	/* larger than the whole bound: not kept */
	snprintf(sub, sizeof(sub), "%s/small", dir);
	assert_int_equal(tb_block_cache_open(&c, sub, MIB / 2, &err), 0);
	put(c, &b, bd, 0);
	assert_false(got(c, &b, bd, 0));
	assert_int_equal(tb_block_cache_bytes(c), 0);
	file_of(path, sizeof(path), sub, &b);
	assert_int_equal(access(path, F_OK), -1);
	tb_block_cache_close(c);
	tb_blocks_free(&a);
	tb_blocks_free(&b);
	tb_blocks_free(&e);
	free(ad);
	free(bd);
	free(ed);
}

static void test_block_cache__keeps_what_a_restarted_worker_finds(void **state)
{
	tb_blocks_t a;
	uint8_t *ad;
	tb_block_cache_t *c;
	tb_error_t err;
	char sub[128], path[300], stray[300], old[300];

	(void)state;
	content(&a, &ad, 3 * MIB, 3);
	snprintf(sub, sizeof(sub), "%s/restart", dir);
	assert_int_equal(tb_block_cache_open(&c, sub, 8 * MIB, &err), 0);
	put(c, &a, ad, 0);
	put(c, &a, ad, 2);
	tb_block_cache_close(c);

	/* reopened, as by a restarted worker: its blocks kept (not the hole
	 * between them), any other file removed: a stray one, and a block
	 * kept by an earlier version, a file named by the block's digest */
	snprintf(stray, sizeof(stray), "%s/not-a-digest", sub);
	snprintf(old, sizeof(old), "%s/%064d", sub, 0);
	FILE *f = fopen(stray, "we");
	assert_non_null(f);
	fclose(f);
	assert_non_null(f = fopen(old, "we"));
	fclose(f);
	assert_int_equal(tb_block_cache_open(&c, sub, 8 * MIB, &err), 0);
	assert_int_equal(tb_block_cache_bytes(c), 2 * MIB);
	assert_true(tb_block_cache_has(c, &a, 0));
	assert_false(tb_block_cache_has(c, &a, 1));
	assert_true(got(c, &a, ad, 2));
	assert_int_equal(access(stray, F_OK), -1);
	assert_int_equal(access(old, F_OK), -1);
	/* a block whose bytes are not its own (a bad disk, a write cut
	 * short): a miss, and dropped */
	file_of(path, sizeof(path), sub, &a);
	assert_non_null(f = fopen(path, "r+e"));
	fputc('!', f);
	fclose(f);
	assert_false(got(c, &a, ad, 0));
	assert_int_equal(tb_block_cache_bytes(c), MIB);
	struct stat st;
	assert_int_equal(stat(sub, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700); /* the worker's alone */
	tb_block_cache_close(c);
	tb_blocks_free(&a);
	free(ad);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_block_cache__keeps_the_most_recently_used_under_its_bound),
		cmocka_unit_test(test_block_cache__keeps_what_a_restarted_worker_finds),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
