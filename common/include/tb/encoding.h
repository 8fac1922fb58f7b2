/*
 * encoding.h: the one home of the byte-to-text encodings every layer uses:
 * hex, percent-encoding (RFC 3986) and base64 (RFC 4648, standard and
 * URL-safe). Each is written once here; nothing else in the tree decodes
 * a hex digit or a %XX escape by hand. It does not know where the text
 * goes (URLs, headers, JSON): callers choose what stays plain.
 */
#ifndef TB_ENCODING_H
#define TB_ENCODING_H

#include <stddef.h>
#include <sys/types.h>

/** The edits (insertions, deletions, substitutions) that turn @p a into
 * @p b, counted up to names of 63 bytes (longer ones: 99): how near a
 * typo is to the name meant, for "did you mean" hints. */
size_t tb_edit_distance(const char *a, const char *b);

/** The value of hex digit @p c (either case), or -1. */
int tb_hex_digit(char c);

/** @p n bytes as 2n lowercase hex digits and a NUL, the form every
 * checksum here is written in. @p out holds 2n + 1 bytes. */
void tb_hex(char *out, const void *bytes, size_t n);

/** The @p n bytes that 2n hex digits at @p hex (either case) spell, into
 * @p out. @return 0, or -1 at a character that is not a hex digit (a
 * NUL among them) */
int tb_unhex(void *out, const char *hex, size_t n);

/**
 * Percent-encodes the string @p in: the unreserved characters
 * (A-Z a-z 0-9 - _ . ~) stay, and '/' too when @p keep_slash; every other
 * byte becomes %XX with upper-case digits (the form SigV4 signs).
 * @return 0, or TB_ETOOBIG if @p out (@p cap bytes, NUL included) is too
 *         small
 */
int tb_percent_encode(char *out, size_t cap, const char *in, int keep_slash);

/**
 * Decodes the @p n bytes at @p in into @p out (which may be @p in): each
 * valid %XX escape becomes its byte, '+' a space when @p plus_is_space
 * (form encoding), everything else, a malformed escape included, stays as
 * it is. @p out holds @p n + 1 bytes; it is NUL-terminated.
 * @return the length decoded (a decoded NUL shows in it)
 */
size_t tb_percent_decode(char *out, const char *in, size_t n, int plus_is_space);

/* Base64 variants, or-ed together. */
enum {
	TB_BASE64_URL = 1,   /* '-' and '_' for '+' and '/'; no padding, written or read */
	TB_BASE64_PAD = 2,   /* decode: the length is a multiple of 4, '=' only at the end */
	TB_BASE64_EXACT = 4, /* decode: unused bits are zero (one text per value) */
};

/**
 * Encodes @p n bytes, and a NUL; the standard alphabet with padding, or
 * TB_BASE64_URL without. @return the length written before the NUL, or
 * -1 when @p cap is too small
 */
ssize_t tb_base64_encode(char *out, size_t cap, const void *in, size_t n, int flags);

/**
 * Decodes @p n characters. Without TB_BASE64_PAD, trailing '=' padding is
 * allowed but not needed. @return the bytes written, or -1 for a
 * character outside the alphabet, '=' anywhere but at the end, an
 * impossible length, a flag's rule broken, or no room in @p cap
 */
ssize_t tb_base64_decode(void *out, size_t cap, const char *in, size_t n, int flags);

#endif
