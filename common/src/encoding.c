/*
 * encoding.c: hex, percent-encoding and base64 (encoding.h).
 */
#include "tb/encoding.h"

#include <string.h>

#include "tb/error.h"

#include <stdint.h>

static const char b64_std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char b64_url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t tb_edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), row[64];

	if (la >= 63 || lb >= 63)
		return 99;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
			best = up + 1 < best ? up + 1 : best;
			best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

int tb_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

void tb_hex(char *out, const void *bytes, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *in = bytes;

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

int tb_unhex(void *out, const char *hex, size_t n)
{
	unsigned char *o = out;

	for (size_t i = 0; i < n; i++) {
		int hi = tb_hex_digit(hex[2 * i]), lo = hi < 0 ? -1 : tb_hex_digit(hex[2 * i + 1]);
		if (lo < 0)
			return -1;
		o[i] = (unsigned char)(hi << 4 | lo);
	}
	return 0;
}

int tb_percent_encode(char *out, size_t cap, const char *in, int keep_slash)
{
	static const char digits[] = "0123456789ABCDEF";
	size_t o = 0;

	for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
		int plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			    (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.' ||
			    *p == '~' || (keep_slash && *p == '/');
		if (o + (plain ? 1 : 3) >= cap)
			return TB_ETOOBIG;
		if (plain) {
			out[o++] = (char)*p;
		} else {
			out[o++] = '%';
			out[o++] = digits[*p >> 4];
			out[o++] = digits[*p & 15];
		}
	}
	if (cap)
		out[o] = '\0';
	return 0;
}

size_t tb_percent_decode(char *out, const char *in, size_t n, int plus_is_space)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		int hi = i + 2 < n ? tb_hex_digit(in[i + 1]) : -1;
		int lo = hi >= 0 ? tb_hex_digit(in[i + 2]) : -1;
		if (in[i] == '%' && lo >= 0) {
			out[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			out[o++] = plus_is_space && in[i] == '+' ? ' ' : in[i];
		}
	}
	out[o] = '\0';
	return o;
}

ssize_t tb_base64_encode(char *out, size_t cap, const void *in, size_t n, int flags)
{
	const char *abc = flags & TB_BASE64_URL ? b64_url : b64_std;
	int pad = !(flags & TB_BASE64_URL);
	const unsigned char *b = in;
	size_t need = pad ? (n + 2) / 3 * 4 : n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0), o = 0, i = 0;

	if (need + 1 > cap)
		return -1;
	for (; i + 3 <= n; i += 3) {
		uint32_t v = (uint32_t)b[i] << 16 | (uint32_t)b[i + 1] << 8 | b[i + 2];
		out[o++] = abc[v >> 18 & 63];
		out[o++] = abc[v >> 12 & 63];
		out[o++] = abc[v >> 6 & 63];
		out[o++] = abc[v & 63];
	}
	if (n - i) {
		uint32_t v = (uint32_t)b[i] << 16 | (n - i == 2 ? (uint32_t)b[i + 1] << 8 : 0);
		out[o++] = abc[v >> 18 & 63];
		out[o++] = abc[v >> 12 & 63];
		if (n - i == 2)
			out[o++] = abc[v >> 6 & 63];
		else if (pad)
			out[o++] = '=';
		if (pad)
			out[o++] = '=';
	}
	out[o] = '\0';
	return (ssize_t)o;
}

static int b64_value(char c, int url)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == (url ? '-' : '+'))
		return 62;
	if (c == (url ? '_' : '/'))
		return 63;
	return -1;
}

ssize_t tb_base64_decode(void *out, size_t cap, const char *in, size_t n, int flags)
{
	unsigned char *b = out;
	size_t o = 0, body = n;
	uint32_t acc = 0;
	int bits = 0;

	/* Padding: at most two '=', at the end, making whole quads; none
	 * in the URL-safe form, which is written without. */
	while (!(flags & TB_BASE64_URL) && body > 0 && n - body < 2 && in[body - 1] == '=')
		body--;
	if ((n > body || (flags & TB_BASE64_PAD)) && n % 4 != 0)
		return -1;
	if (body % 4 == 1)
		return -1;
	for (size_t i = 0; i < body; i++) {
		int v = b64_value(in[i], flags & TB_BASE64_URL);
		if (v < 0)
			return -1;
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (o >= cap)
				return -1;
			b[o++] = (unsigned char)(acc >> bits);
			acc &= (1u << bits) - 1;
		}
	}
	if ((flags & TB_BASE64_EXACT) && acc != 0)
		return -1;
	return (ssize_t)o;
}
