/*
 * test_fsutil.c: tb_read_file(), the one bounded read of a whole file: a
 * file at the bound read whole, one byte over refused naming the file,
 * a missing file told apart, an empty file, sizes across the buffer's
 * growth, and a descriptor read as given (tb_read_fd).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tb/fsutil.h"

static char dir[] = "/tmp/tb-fsutil-XXXXXX";

/* A file of @p n bytes ('a' + i % 26) at dir/@p name; its path into @p path. */
static void write_file(char *path, size_t cap, const char *name, size_t n)
{
	char *b = malloc(n + 1);

	assert_non_null(b);
	for (size_t i = 0; i < n; i++)
		b[i] = (char)('a' + i % 26);
	snprintf(path, cap, "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(tb_write_all(fd, b, n), 0);
	close(fd);
	free(b);
}

static void test_fsutil__bound(void **state)
{
	static const size_t sizes[] = { 0, 1, 4095, 4096, 4097, 100000 };
	char path[256], *buf;
	size_t len;
	tb_error_t err;

	(void)state;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		write_file(path, sizeof(path), "f", n);
		/* at the bound: whole, NUL-terminated */
		assert_int_equal(tb_read_file(path, n, &buf, &len, &err), 0);
		assert_int_equal(len, n);
		assert_int_equal(buf[n], '\0');
		for (size_t j = 0; j < n; j++)
			assert_int_equal(buf[j], 'a' + j % 26);
		free(buf);
		/* far under it: the same */
		assert_int_equal(tb_read_file(path, n + (1u << 20), &buf, &len, &err), 0);
		assert_int_equal(len, n);
		free(buf);
		if (!n)
			continue;
		/* one byte over: refused, the file named, nothing allocated */
		buf = (char *)1;
		assert_int_equal(tb_read_file(path, n - 1, &buf, &len, &err), TB_ETOOBIG);
		assert_null(buf);
		assert_int_equal(len, 0);
		assert_non_null(strstr(err.msg, path));
	}
}

static void test_fsutil__missing_and_fd(void **state)
{
	char path[256], *buf;
	size_t len;
	tb_error_t err;

	(void)state;
	snprintf(path, sizeof(path), "%s/none", dir);
	assert_int_equal(tb_read_file(path, 10, &buf, &len, &err), TB_ENOTFOUND);
	assert_non_null(strstr(err.msg, path));
	assert_int_equal(tb_read_file(dir, 10, &buf, &len, &err), TB_EIO); /* a directory */
	write_file(path, sizeof(path), "g", 10);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(tb_read_fd(fd, "given", 9, &buf, &len, &err), TB_ETOOBIG);
	assert_non_null(strstr(err.msg, "given"));
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	assert_int_equal(tb_read_fd(fd, "given", 10, &buf, &len, &err), 0);
	assert_int_equal(len, 10);
	free(buf);
	close(fd);
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return tb_remove_tree(AT_FDCWD, dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fsutil__bound),
		cmocka_unit_test(test_fsutil__missing_and_fd),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
