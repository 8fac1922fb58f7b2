/*
 * mpack_scan.c: walks MessagePack bytes with an explicit stack of
 * "elements still to read" per open container. No allocation, no recursion.
 */
#include "tb/mpack_scan.h"

static uint32_t be(const uint8_t *p, unsigned n)
{
	uint32_t v = 0;
	for (unsigned i = 0; i < n; i++)
		v = (v << 8) | p[i];
	return v;
}

int tb_mpack_scan(const uint8_t *data, size_t len, unsigned max_depth, tb_error_t *err)
{
	uint64_t left[TB_MPACK_MAX_DEPTH + 1]; /* items still owed per level */
	unsigned depth = 0;
	size_t pos = 0;

	if (max_depth > TB_MPACK_MAX_DEPTH)
		max_depth = TB_MPACK_MAX_DEPTH;
	if (len == 0)
		return tb_error_set(err, TB_EINVAL, "empty input");
	left[0] = 1; /* the top-level value */

	while (depth > 0 || left[0] > 0) {
		if (left[depth] == 0) { /* container finished */
			depth--;
			continue;
		}
		left[depth]--;
		if (pos >= len)
			return tb_error_set(err, TB_EINVAL, "truncated at byte %zu", pos);

		uint8_t b = data[pos++];
		uint64_t skip = 0;  /* payload bytes after the header */
		uint64_t items = 0; /* elements of a container opened here */
		int container = 0;
		unsigned hdr = 0; /* length-field bytes after the type byte */

		if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
			/* fixint, nil, bool */
		} else if (b >= 0x80 && b <= 0x8f) {
			container = 1, items = 2u * (b & 0x0f);
		} else if (b >= 0x90 && b <= 0x9f) {
			container = 1, items = b & 0x0f;
		} else if (b >= 0xa0 && b <= 0xbf) {
			skip = b & 0x1f;
		} else {
			switch (b) {
			case 0xc4:
			case 0xd9:
				hdr = 1;
				break; /* bin8 str8 */
			case 0xc5:
			case 0xda:
				hdr = 2;
				break; /* bin16 str16 */
			case 0xc6:
			case 0xdb:
				hdr = 4;
				break; /* bin32 str32 */
			case 0xc7:
				hdr = 1, skip = 1;
				break; /* ext8 */
			case 0xc8:
				hdr = 2, skip = 1;
				break; /* ext16 */
			case 0xc9:
				hdr = 4, skip = 1;
				break; /* ext32 */
			case 0xca:
				skip = 4;
				break; /* float32 */
			case 0xcb:
				skip = 8;
				break; /* float64 */
			case 0xcc:
			case 0xd0:
				skip = 1;
				break;
			case 0xcd:
			case 0xd1:
				skip = 2;
				break;
			case 0xce:
			case 0xd2:
				skip = 4;
				break;
			case 0xcf:
			case 0xd3:
				skip = 8;
				break;
			case 0xd4:
				skip = 2;
				break; /* fixext1 */
			case 0xd5:
				skip = 3;
				break;
			case 0xd6:
				skip = 5;
				break;
			case 0xd7:
				skip = 9;
				break;
			case 0xd8:
				skip = 17;
				break;
			case 0xdc:
				container = 1, hdr = 2;
				break; /* array16 */
			case 0xdd:
				container = 1, hdr = 4;
				break; /* array32 */
			case 0xde:
				container = 2, hdr = 2;
				break; /* map16 */
			case 0xdf:
				container = 2, hdr = 4;
				break; /* map32 */
			default:       /* 0xc1 is never used */
				return tb_error_set(err, TB_EINVAL,
						    "invalid type byte 0x%02x at byte %zu", b,
						    pos - 1);
			}
		}
		if (hdr) {
			if (len - pos < hdr)
				return tb_error_set(err, TB_EINVAL, "truncated length at byte %zu",
						    pos);
			uint64_t n = be(data + pos, hdr);
			pos += hdr;
			if (container)
				items = container == 2 ? 2 * n : n;
			else
				skip += n;
		}
		if (skip > len - pos)
			return tb_error_set(err, TB_EINVAL,
					    "value at byte %zu claims %llu bytes, %zu remain", pos,
					    (unsigned long long)skip, len - pos);
		pos += (size_t)skip;
		if (container && items > 0) {
			if (items > len - pos)
				return tb_error_set(
				    err, TB_EINVAL,
				    "container at byte %zu claims %llu elements, %zu bytes remain",
				    pos, (unsigned long long)items, len - pos);
			if (depth + 1 > max_depth)
				return tb_error_set(err, TB_EINVAL,
						    "nested deeper than %u at byte %zu", max_depth,
						    pos);
			left[++depth] = items;
		}
	}
	if (pos != len)
		return tb_error_set(err, TB_EINVAL, "%zu trailing bytes after the value",
				    len - pos);
	return 0;
}
