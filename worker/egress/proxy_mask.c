/*
 * proxy_mask.c: one matcher for every form of an echo (see proxy_mask.h):
 * at each position, each byte of the secret is taken as itself or as a
 * %XX escape of it, hex digits in either case.
 */
#include "proxy_mask.h"

#include "tb/encoding.h"

#include <string.h>

enum { NO_MATCH = -1, CUT_SHORT = -2 };

/*
 * Matches @p secret (its first @p k bytes) at the start of @p s.
 * @return the bytes of @p s the echo takes; CUT_SHORT if @p s ends while
 * it still matches; NO_MATCH. A '%' that is itself a byte of the secret
 * may be an escape or the byte: both ways are tried (depth: the secret's
 * length).
 */
static long match(const char *secret, size_t k, const char *s, size_t len)
{
	if (k == 0)
		return 0;
	if (len == 0)
		return CUT_SHORT;
	long best = NO_MATCH;
	if (s[0] == '%') {
		unsigned char want = (unsigned char)*secret;
		int hi = len > 1 ? tb_hex_digit(s[1]) : want >> 4,
		    lo = len > 2 ? tb_hex_digit(s[2]) : 0;
		if (len < 3 && hi == want >> 4) {
			best = CUT_SHORT; /* "%" or "%X" at the end: may be an escape */
		} else if (hi >= 0 && lo >= 0 && (unsigned char)(hi << 4 | lo) == want) {
			long rest = match(secret + 1, k - 1, s + 3, len - 3);
			if (rest >= 0)
				return rest + 3;
			best = rest;
		}
	}
	if (s[0] == *secret) {
		long rest = match(secret + 1, k - 1, s + 1, len - 1);
		if (rest >= 0)
			return rest + 1;
		if (rest == CUT_SHORT)
			best = CUT_SHORT;
	}
	return best;
}

size_t tb_mask_max_len(const char *secret)
{
	return 3 * strlen(secret);
}

size_t tb_mask_apply(const char *secret, char *s, size_t len)
{
	size_t k = strlen(secret), found = 0;

	if (!k)
		return 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] != secret[0] && s[i] != '%')
			continue;
		long n = match(secret, k, s + i, len - i);
		if (n > 0) {
			memset(s + i, '*', (size_t)n);
			i += (size_t)n - 1;
			found++;
		}
	}
	return found;
}

size_t tb_mask_pending(const char *secret, const char *s, size_t len)
{
	size_t k = strlen(secret), max = tb_mask_max_len(secret);

	if (!k)
		return 0;
	/* from the longest tail an echo could still need to the shortest */
	for (size_t t = len < max ? len : max; t > 0; t--) {
		const char *at = s + len - t;
		if ((*at == secret[0] || *at == '%') && match(secret, k, at, t) == CUT_SHORT)
			return t;
	}
	return 0;
}
