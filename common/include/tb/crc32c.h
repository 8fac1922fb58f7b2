/*
 * crc32c.h: CRC-32C (Castagnoli), the checksum S3, iSCSI and ext4 use to
 * catch damaged data. The artifact store verifies downloads with it: it
 * catches every error burst up to 32 bits and all but one in 2^32 others,
 * at a few GB/s (the SSE 4.2 instruction where the CPU has it). It is not
 * a content identity: that is the SHA-256 the store also records.
 */
#ifndef TB_CRC32C_H
#define TB_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/** Extends @p crc (0 to start) with @p len bytes: crc32c(a + b) is
 * tb_crc32c(tb_crc32c(0, a), b). tb_crc32c(0, "123456789", 9) is
 * 0xe3069283. */
uint32_t tb_crc32c(uint32_t crc, const void *buf, size_t len);

#endif
