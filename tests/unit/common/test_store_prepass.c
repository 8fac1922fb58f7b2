/*
 * test_store_prepass.c: the pass before an upload gives the same SHA-256,
 * CRC-32C and size as one plain pass, on the calling thread or with its
 * helper; each part's SHA-256 is that part's (checked against OpenSSL on
 * the slice), the last part shorter, parts ending inside a read; no parts
 * below the threshold; a file shorter than said is an error, not a short
 * hash.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "store_prepass.h"
#include "tb/sys/store.h" /* a backend of its own, or one called bypassing the checks */
#include "tb/encoding.h"
#include "tb/crc32c.h"
#include "tb/sigv4.h"

#define MiB (1u << 20)

/* A memfd holding @p size pseudo-random bytes; *data keeps a copy. */
static int make_file(size_t size, unsigned char **data)
{
	uint32_t x = 2463534242u ^ (uint32_t)size;
	unsigned char *d = malloc(size ? size : 1);
	int fd = memfd_create("prepass", MFD_CLOEXEC);

	assert_non_null(d);
	assert_true(fd >= 0);
	for (size_t i = 0; i < size; i++) {
		x ^= x << 13, x ^= x >> 17, x ^= x << 5;
		d[i] = (unsigned char)x;
	}
	assert_int_equal(write(fd, d, size), (ssize_t)size);
	*data = d;
	return fd;
}

static void sha256_hex(const unsigned char *p, size_t n, char out[65])
{
	unsigned char d[32];
	unsigned int dl;

	assert_int_equal(EVP_Digest(p, n, d, &dl, EVP_sha256(), NULL), 1);
	tb_hex(out, d, 32);
}

/* The pass agrees with OpenSSL on the whole and, with parts, on each. */
static void check(size_t size, uint64_t part_size, uint64_t min, size_t want_parts)
{
	unsigned char *data;
	int fd = make_file(size, &data);
	tb_object_info_t info;
	tb_part_sums_t parts;
	tb_error_t err;
	char want[65], crc[9];

	memset(&info, 0, sizeof(info));
	assert_int_equal(tb_store_prepass(fd, part_size, min, &info, &parts, &err), 0);
	assert_int_equal(info.size, size);
	sha256_hex(data, size, want);
	assert_string_equal(info.sha256, want);
	snprintf(crc, sizeof(crc), "%08x", (unsigned)tb_crc32c(0, data, size));
	assert_string_equal(info.crc32c, crc);
	assert_int_equal(parts.n, want_parts);
	if (!want_parts) {
		assert_null(parts.sha256);
	} else {
		assert_int_equal(parts.part_size, part_size);
		for (size_t i = 0; i < parts.n; i++) {
			size_t off = i * part_size;
			size_t len = size - off < part_size ? size - off : part_size;
			sha256_hex(data + off, len, want);
			assert_string_equal(parts.sha256[i], want);
		}
	}
	tb_part_sums_free(&parts);
	assert_int_equal(parts.n, 0);
	free(data);
	close(fd);
}

static void test_store_prepass__whole_object(void **state)
{
	(void)state;
	check(0, 0, 0, 0);
	check(1, 0, 0, 0);
	check(64 << 10, 0, 0, 0);        /* small: the calling thread alone */
	check(MiB + 7, 0, 0, 0);         /* the helper computes the CRC-32C */
	check(2 * MiB, MiB, 3 * MiB, 0); /* below the threshold: no parts */
}

static void test_store_prepass__parts(void **state)
{
	(void)state;
	check(700000, 100000, 0, 7);                /* small: parts after, on the caller's thread */
	check(MiB - 1, MiB, 0, 1);                  /* one short part */
	check(3 * MiB, MiB, 0, 3);                  /* exact parts */
	check(4 * MiB, MiB, 4 * MiB, 4);            /* at the threshold */
	check(3 * MiB + MiB / 2, MiB, 2 * MiB, 4);  /* the last shorter */
	check(2 * MiB + 1, MiB, MiB, 3);            /* one byte over */
	check(5 * MiB + 12345, 256 << 10, MiB, 21); /* many small parts */
	/* parts that end inside a read: every read stops at a part's end */
	check(3 * MiB + 5, 300001, 0, 11);
	check(MiB, 100000, 0, 11);
}

/* Said to be longer than it is: a read error, with no sums left over;
 * said truly, each part's own hash; a part size of 0 is refused. */
static void test_store_prepass__short_file_is_refused(void **state)
{
	unsigned char *data;
	int fd = make_file(MiB, &data);
	tb_part_sums_t parts;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_store_hash_parts(fd, 2 * MiB, MiB, &parts, &err), TB_EIO);
	assert_non_null(strstr(err.msg, "shrank"));
	assert_int_equal(parts.n, 0);
	assert_null(parts.sha256);
	/* the same file, said truly: each part's own SHA-256 */
	assert_int_equal(tb_store_hash_parts(fd, MiB, 300000, &parts, &err), 0);
	assert_int_equal(parts.n, 4);
	for (size_t i = 0; i < parts.n; i++) {
		char want[65];
		size_t off = i * 300000, len = MiB - off < 300000 ? MiB - off : 300000;
		sha256_hex(data + off, len, want);
		assert_string_equal(parts.sha256[i], want);
	}
	tb_part_sums_free(&parts);
	assert_int_equal(tb_store_hash_parts(fd, MiB, 0, &parts, &err), TB_EINVAL);
	assert_null(parts.sha256);
	free(data);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store_prepass__whole_object),
		cmocka_unit_test(test_store_prepass__parts),
		cmocka_unit_test(test_store_prepass__short_file_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
