/*
 * crc32c.c: CRC-32C (reflected polynomial 0x82f63b78), with the SSE 4.2
 * crc32 instruction where the CPU has it (chosen at each call, which costs
 * a load) and eight bytes a step from tables everywhere else.
 *
 * One instruction stream runs at 8 bytes per 3 cycles, several GB/s:
 * a 256 MiB download costs some 40 ms, against 220 ms for its SHA-256.
 * Interleaving three streams would triple that, at the cost of the code
 * to combine them; not needed while the network is the slower part.
 */
#include "tb/crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82f63b78u

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void)
{
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = n;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		table[0][n] = c;
	}
	for (uint32_t n = 0; n < 256; n++)
		for (int k = 1; k < 8; k++)
			table[k][n] = (table[k - 1][n] >> 8) ^ table[0][table[k - 1][n] & 0xff];
}

/* Slicing by 8 (little-endian loads; a big-endian host goes bytewise). */
static uint32_t crc_soft(uint32_t c, const unsigned char *p, size_t len)
{
	pthread_once(&table_once, make_table);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	for (; len >= 8; p += 8, len -= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		w ^= c;
		c = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
		    table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^
		    table[2][(w >> 40) & 0xff] ^ table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
	}
#endif
	for (; len; p++, len--)
		c = (c >> 8) ^ table[0][(c ^ *p) & 0xff];
	return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const unsigned char *p,
							    size_t len)
{
	uint64_t c64 = c;

	for (; len >= 8; p += 8, len -= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		c64 = _mm_crc32_u64(c64, w);
	}
	c = (uint32_t)c64;
	for (; len; p++, len--)
		c = _mm_crc32_u8(c, *p);
	return c;
}
#define HAVE_SSE42() __builtin_cpu_supports("sse4.2")
#else
#define HAVE_SSE42() 0
#define crc_sse42 crc_soft
#endif

uint32_t tb_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint32_t c = ~crc;

	c = HAVE_SSE42() ? crc_sse42(c, p, len) : crc_soft(c, p, len);
	return ~c;
}

/* For the unit test: the table path, whatever the CPU. */
uint32_t tb_crc32c_soft(uint32_t crc, const void *buf, size_t len);
uint32_t tb_crc32c_soft(uint32_t crc, const void *buf, size_t len)
{
	return ~crc_soft(~crc, buf, len);
}
