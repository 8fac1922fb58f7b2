/*
 * test_blocks.c: block digests (tb/blocks.h): computed in one pass with
 * the whole's SHA-256, stored and parsed back, each block checked alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tb/blocks.h"
#include "tb/encoding.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A memfd of @p size pseudo-random bytes; @p data gets a copy. */
static int object(size_t size, uint8_t **data)
{
	int fd = memfd_create("blocks", MFD_CLOEXEC);
	assert_true(fd >= 0);
	*data = malloc(size ? size : 1);
	assert_non_null(*data);
	uint64_t x = 88172645463325252ull; /* xorshift: no two blocks alike */
	for (size_t i = 0; i < size; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		(*data)[i] = (uint8_t)x;
	}
	assert_int_equal(write(fd, *data, size), (ssize_t)size);
	return fd;
}

static void test_blocks__one_pass_gives_each_block_and_the_whole(void **state)
{
	const size_t size = 2 * TB_BLOCK_SIZE + 12345;
	uint8_t *data, sum[32];
	char sha[65], want[65];
	tb_blocks_t b;
	tb_error_t err;

	(void)state;
	int fd = object(size, &data);
	assert_int_equal(tb_blocks_of_fd(fd, "obj", &b, sha, &err), 0);
	assert_int_equal(b.size, size);
	assert_int_equal(b.n, 3);
	SHA256(data, size, sum);
	tb_hex(want, sum, 32);
	assert_string_equal(sha, want);
	for (size_t i = 0; i < 3; i++) {
		size_t len = i < 2 ? TB_BLOCK_SIZE : 12345;
		SHA256(data + i * TB_BLOCK_SIZE, len, sum);
		assert_memory_equal(b.sha + 32 * i, sum, 32);
		assert_int_equal(tb_blocks_check(&b, i, data + i * TB_BLOCK_SIZE, len, &err), 0);
	}
	SHA256(b.sha, 96, sum); /* the list's own digest names it */
	tb_hex(want, sum, 32);
	assert_string_equal(b.digest, want);
	tb_blocks_free(&b);
	free(data);
	close(fd);
}

static void test_blocks__a_changed_byte_or_length_is_caught(void **state)
{
	const size_t size = TB_BLOCK_SIZE + 10;
	tb_blocks_t b;
	tb_error_t err;
	uint8_t *data;

	(void)state;
	int fd = object(size, &data);
	assert_int_equal(tb_blocks_of_fd(fd, "obj", &b, NULL, &err), 0);
	data[TB_BLOCK_SIZE + 3] ^= 1;
	assert_int_equal(tb_blocks_check(&b, 1, data + TB_BLOCK_SIZE, 10, &err), TB_EIO);
	assert_non_null(strstr(err.msg, "block 1 (bytes 1048576 to 1048585)"));
	assert_int_equal(tb_blocks_check(&b, 0, data, TB_BLOCK_SIZE - 1, &err), TB_EIO);
	assert_non_null(strstr(err.msg, "1048575 bytes arrived, 1048576 expected"));
	assert_int_equal(tb_blocks_check(&b, 2, data, 1, &err), TB_EIO);
	tb_blocks_free(&b);
	free(data);
	close(fd);
}

static void test_blocks__a_stored_list_is_checked_against_its_name(void **state)
{
	const size_t size = 3 * TB_BLOCK_SIZE;
	tb_blocks_t b, back;
	tb_error_t err;
	uint8_t *data;

	(void)state;
	int fd = object(size, &data);
	assert_int_equal(tb_blocks_of_fd(fd, "obj", &b, NULL, &err), 0);
	assert_int_equal(b.n, 3);
	assert_int_equal(tb_blocks_parse(b.sha, 96, size, b.digest, &back, &err), 0);
	assert_string_equal(back.digest, b.digest);
	assert_int_equal(tb_blocks_check(&back, 2, data + 2 * TB_BLOCK_SIZE, TB_BLOCK_SIZE, &err),
			 0);
	tb_blocks_free(&back);
	/* a list for another size, or another list than the one named */
	assert_int_equal(tb_blocks_parse(b.sha, 96, size + 1, NULL, &back, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "96 bytes, where an object of 3145729 bytes has 4"));
	b.sha[5] ^= 1;
	assert_int_equal(tb_blocks_parse(b.sha, 96, size, b.digest, &back, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "not the"));
	tb_blocks_free(&b);
	free(data);
	close(fd);
}

static void test_blocks__an_empty_object_has_none(void **state)
{
	char sha[65];
	tb_blocks_t b;
	tb_error_t err;
	uint8_t *data;

	(void)state;
	int fd = object(0, &data);
	assert_int_equal(tb_blocks_of_fd(fd, "empty", &b, sha, &err), 0);
	assert_int_equal(b.n, 0);
	assert_string_equal(sha,
			    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	assert_string_equal(b.digest, sha); /* the SHA-256 of an empty list */
	tb_blocks_free(&b);
	free(data);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blocks__one_pass_gives_each_block_and_the_whole),
		cmocka_unit_test(test_blocks__a_changed_byte_or_length_is_caught),
		cmocka_unit_test(test_blocks__a_stored_list_is_checked_against_its_name),
		cmocka_unit_test(test_blocks__an_empty_object_has_none),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
