/*
 * toc_time.c: a TOC entry's `modtime` (eStargz, zstd:chunked: RFC 3339,
 * as Go writes a time: "2006-01-02T15:04:05Z", with a fraction of up to
 * nine digits and a "+07:00" offset where it has them) read into seconds
 * and nanoseconds since the epoch, strictly, as hostile input: every
 * field in its range, nothing after it.
 */
#include "layer_index_int.h"

#include <stddef.h>

/* @p n digits of @p s into @p v. @return 0, or -1. */
static int digits(const char *s, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		*v = *v * 10 + (s[i] - '0');
	}
	return 0;
}

/* Days from 1970-01-01 to @p y-@p m-@p d (Howard Hinnant's civil
 * algorithm, for the proleptic Gregorian calendar). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static int days_in(int y, int m)
{
	static const int n[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	return n[m - 1] + (m == 2 && leap);
}

/* The fraction at @p *s (after a '.'), up to nine digits, into @p ns. */
static int fraction(const char **s, uint32_t *ns)
{
	int n = 0;
	*ns = 0;
	while ((*s)[n] >= '0' && (*s)[n] <= '9' && n < 9)
		*ns = *ns * 10 + (uint32_t)((*s)[n++] - '0');
	if (!n)
		return -1;
	for (int k = n; k < 9; k++)
		*ns *= 10;
	*s += n;
	return 0;
}

/* "Z" or "+HH:MM" / "-HH:MM", and the end: the offset in seconds. */
static int zone(const char *s, int64_t *off)
{
	int h, m;
	*off = 0;
	if (s[0] == 'Z')
		return s[1] ? -1 : 0;
	if ((s[0] != '+' && s[0] != '-') || digits(s + 1, 2, &h) < 0 || s[3] != ':' ||
	    digits(s + 4, 2, &m) < 0 || s[6] || h > 23 || m > 59)
		return -1;
	*off = (s[0] == '-' ? -1 : 1) * (int64_t)(h * 3600 + m * 60);
	return 0;
}

int tb_toc_time(const char *s, int64_t *sec, uint32_t *ns)
{
	int y, mo, d, h, mi, se;
	int64_t off;
	*sec = 0;
	*ns = 0;
	if (digits(s, 4, &y) < 0 || s[4] != '-' || digits(s + 5, 2, &mo) < 0 || s[7] != '-' ||
	    digits(s + 8, 2, &d) < 0 || (s[10] != 'T' && s[10] != 't') ||
	    digits(s + 11, 2, &h) < 0 || s[13] != ':' || digits(s + 14, 2, &mi) < 0 ||
	    s[16] != ':' || digits(s + 17, 2, &se) < 0)
		return -1;
	if (mo < 1 || mo > 12 || d < 1 || d > days_in(y, mo) || h > 23 || mi > 59 || se > 59)
		return -1;
	const char *p = s + 19;
	if (*p == '.' && (p++, fraction(&p, ns) < 0))
		return -1;
	if (zone(p, &off) < 0)
		return -1;
	int64_t t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se - off;
	if (t < 0 || t > TB_LAYER_INDEX_MTIME_MAX)
		return -1;
	*sec = t;
	return 0;
}
