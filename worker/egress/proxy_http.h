/*
 * proxy_http.h: the HTTP/1.1 a client speaks to the egress proxy, read
 * strictly (RFC 9112). Pure functions over buffers: finding and parsing
 * a request head, and decoding a chunked request body. No sockets (that
 * is proxy.c) and no policy (proxy_policy.c).
 *
 * Strict, because the proxy stands between two parsers (its own and the
 * upstream server's): anything two parsers might read differently is
 * refused rather than repaired. Bare CR or LF, obs-fold (a header line
 * that starts with a space), whitespace before a header's colon, control
 * characters, Content-Length with Transfer-Encoding, Content-Length twice
 * (even with the same value), a Transfer-Encoding other than exactly
 * "chunked", a missing or repeated Host: all 400. Over the head size or
 * header count: 431.
 */
#ifndef TB_PROXY_HTTP_H
#define TB_PROXY_HTTP_H

#include <stddef.h>
#include <stdint.h>

#define TB_HTTP_MAX_HEADERS 100

typedef struct tb_http_header {
	const char *name; /* NUL-terminated, in the parsed buffer */
	const char *value;
} tb_http_header_t;

typedef struct tb_http_request {
	const char *method;
	const char *target;
	int minor; /* HTTP/1.<minor>: 0 or 1 */
	size_t nheaders;
	tb_http_header_t headers[TB_HTTP_MAX_HEADERS];
	int64_t content_length; /* -1: none given */
	int chunked;            /* Transfer-Encoding: chunked */
	int keep_alive;         /* the client will send another request */
	int expect_continue;    /* Expect: 100-continue */
} tb_http_request_t;

/**
 * Where the head of a request ends in the @p len bytes at @p buf (empty
 * lines before the request line are skipped, as RFC 9112 2.2 allows).
 * @param[out] skip the leading CRLFs to ignore
 * @return the head's length counted from @p buf, including its final
 *         CRLFCRLF; 0 when more bytes are needed; -1 when what is there
 *         is already malformed (a bare CR or LF, a NUL)
 */
long tb_http_head_end(const char *buf, size_t len, size_t *skip);

/**
 * Parses a complete head (as found by tb_http_head_end, after skipping),
 * in place: the request's strings point into @p buf, which is modified.
 * @param why the reason when it fails, for the client
 * @return 0; or the HTTP status to answer with: 400, 417 (an expectation
 *         other than 100-continue), 431 (too many headers), 501 (a
 *         transfer coding other than chunked), 505 (not HTTP/1.x)
 */
int tb_http_parse_request(tb_http_request_t *out, char *buf, size_t len, char *why, size_t whylen);

/** The value of the first header named @p name (any case), or NULL. */
const char *tb_http_header_get(const tb_http_request_t *r, const char *name);

/** 1 if @p list (a header value: comma-separated tokens) holds @p token (any case). */
int tb_http_has_token(const char *list, const char *token);

/* A chunked body being decoded. Zero it to start. */
typedef struct tb_http_chunked {
	int state;
	uint64_t left;  /* bytes of the current chunk still to come */
	size_t line;    /* bytes of the current size or trailer line */
	size_t trailer; /* bytes of trailers so far */
	int digits;
} tb_http_chunked_t;

/**
 * Decodes what it can of @p in (@p len bytes) into @p out (@p cap bytes).
 * @param[out] used bytes of @p in consumed (the rest belongs to what
 *        follows the body, or is needed again once @p out has room)
 * @param[out] produced bytes written to @p out
 * @return 0 in the middle of the body; 1 when the last chunk and the
 *         trailers have been read (nothing after them is consumed); -1
 *         malformed (a bad size line, a missing CRLF, a bare LF, over the
 *         limits on size lines and trailers)
 */
int tb_http_chunked_decode(tb_http_chunked_t *c, const char *in, size_t len, size_t *used,
			   char *out, size_t cap, size_t *produced);

#endif
