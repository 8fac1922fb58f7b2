/*
 * test_crc32c.c: CRC-32C against the check value and RFC 3720's examples,
 * the same answer from the instruction and from the tables at every
 * length and alignment, and extension (a checksum built piece by piece,
 * as downloads build it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "tb/crc32c.h"

uint32_t tb_crc32c_soft(uint32_t crc, const void *buf, size_t len);

static void test_crc32c__known_values(void **state)
{
	unsigned char b[32];

	(void)state;
	assert_int_equal(tb_crc32c(0, "123456789", 9), 0xe3069283u);
	assert_int_equal(tb_crc32c_soft(0, "123456789", 9), 0xe3069283u);
	assert_int_equal(tb_crc32c(0, "", 0), 0);
	/* RFC 3720, B.4 */
	memset(b, 0, sizeof(b));
	assert_int_equal(tb_crc32c(0, b, 32), 0x8a9136aau);
	memset(b, 0xff, sizeof(b));
	assert_int_equal(tb_crc32c(0, b, 32), 0x62a8ab43u);
	for (int i = 0; i < 32; i++)
		b[i] = (unsigned char)i;
	assert_int_equal(tb_crc32c(0, b, 32), 0x46dd794eu);
	for (int i = 0; i < 32; i++)
		b[i] = (unsigned char)(31 - i);
	assert_int_equal(tb_crc32c(0, b, 32), 0x113fdb5cu);
}

static void test_crc32c__paths_agree_and_extend(void **state)
{
	static unsigned char buf[4096 + 16];
	uint32_t x = 2463534242u;

	(void)state;
	for (size_t i = 0; i < sizeof(buf); i++) {
		x ^= x << 13, x ^= x >> 17, x ^= x << 5;
		buf[i] = (unsigned char)x;
	}
	for (size_t off = 0; off < 9; off++)
		for (size_t len = 0; len < 300; len += 1 + len / 16) {
			uint32_t whole = tb_crc32c(0, buf + off, len);
			assert_int_equal(whole, tb_crc32c_soft(0, buf + off, len));
			for (size_t cut = 0; cut <= len; cut += 1 + len / 5)
				assert_int_equal(tb_crc32c(tb_crc32c(0, buf + off, cut),
							   buf + off + cut, len - cut),
						 whole);
		}
	assert_int_equal(tb_crc32c(0, buf, 4096), tb_crc32c_soft(0, buf, 4096));
	/* one flipped bit changes it */
	uint32_t before = tb_crc32c(0, buf, 4096);
	buf[1234] ^= 8;
	assert_int_not_equal(tb_crc32c(0, buf, 4096), before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c__known_values),
		cmocka_unit_test(test_crc32c__paths_agree_and_extend),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
