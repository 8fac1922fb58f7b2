/*
 * test_proxy_http.c: the proxy's strict HTTP/1.1 reading: heads that two
 * parsers could read differently are refused; chunked bodies decode in
 * any split.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy_http.h"

/* Finds and parses @p text as a whole head; returns the status. */
static int parse(tb_http_request_t *r, const char *text)
{
	static char buf[20000];
	char why[256];
	size_t skip, len = strlen(text);
	long end = tb_http_head_end(text, len, &skip);

	if (end < 0)
		return 400;
	if (end == 0)
		return 0;
	memcpy(buf, text + skip, (size_t)end - skip);
	buf[end - (long)skip] = '\0';
	return tb_http_parse_request(r, buf, (size_t)end - skip, why, sizeof(why));
}

static void test_proxy_http__parses_a_plain_request(void **state)
{
	tb_http_request_t r;
	(void)state;
	assert_int_equal(parse(&r, "\r\nPOST /llm/v1/chat?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
				   "Content-Length: 12\r\nX-Empty:\r\nX-Pad:  a b \r\n\r\n"),
			 0);
	assert_string_equal(r.method, "POST");
	assert_string_equal(r.target, "/llm/v1/chat?x=1");
	assert_int_equal(r.minor, 1);
	assert_int_equal(r.content_length, 12);
	assert_false(r.chunked);
	assert_true(r.keep_alive);
	assert_string_equal(tb_http_header_get(&r, "x-pad"), "a b");
	assert_string_equal(tb_http_header_get(&r, "X-EMPTY"), "");
	assert_null(tb_http_header_get(&r, "Nope"));
	assert_int_equal(parse(&r, "GET / HTTP/1.1\r\nHost: h\r\nConnection: x, Close\r\n\r\n"), 0);
	assert_false(r.keep_alive);
	assert_int_equal(parse(&r, "GET / HTTP/1.0\r\n\r\n"), 0);
	assert_false(r.keep_alive);
	assert_int_equal(parse(&r, "PUT / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
				   "Expect: 100-continue\r\n\r\n"),
			 0);
	assert_true(r.chunked);
	assert_true(r.expect_continue);
	assert_int_equal(r.content_length, -1);
}

static void test_proxy_http__head_end_needs_crlf_crlf(void **state)
{
	size_t skip;
	(void)state;
	assert_int_equal(tb_http_head_end("GET / HTTP/1.1\r\nHost: h\r\n", 25, &skip), 0);
	assert_int_equal(tb_http_head_end("GET / HTTP/1.1\r\nHost: h\r\n\r", 26, &skip), 0);
	assert_int_equal(tb_http_head_end("GET / HTTP/1.1\r\nHost: h\r\n\r\nBODY", 31, &skip), 27);
	/* bare LF, bare CR and NUL are refused as soon as they are seen */
	assert_int_equal(tb_http_head_end("GET / HTTP/1.1\nHost", 19, &skip), -1);
	assert_int_equal(tb_http_head_end("GET / HTTP/1.1\rHost", 19, &skip), -1);
	assert_int_equal(tb_http_head_end("GET /\0 HTTP/1.1", 15, &skip), -1);
	assert_int_equal(tb_http_head_end("\n\nGET", 5, &skip), -1);
}

static void test_proxy_http__refuses_smuggling_shapes(void **state)
{
	tb_http_request_t r;
	static const struct {
		const char *head;
		int status;
	} cases[] = {
		/* length and chunked together, either order */
		{ "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: "
		  "chunked\r\n\r\n",
		  400 },
		{ "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: "
		  "4\r\n\r\n",
		  400 },
		/* two lengths, even equal */
		{ "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\n",
		  400 },
		{ "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4, 4\r\n\r\n", 400 },
		{ "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +4\r\n\r\n", 400 },
		{ "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x4\r\n\r\n", 400 },
		{ "POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n", 400 },
		{ "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 9999999999999999999\r\n\r\n",
		  400 },
		/* transfer codings other than exactly chunked */
		{ "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501 },
		{ "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
		  "chunked\r\n\r\n",
		  400 },
		{ "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n", 501 },
		{ "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400 },
		/* whitespace before the colon, obs-fold, controls */
		{ "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding : chunked\r\n\r\n", 400 },
		{ "POST / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n Transfer-Encoding: chunked\r\n\r\n",
		  400 },
		{ "POST / HTTP/1.1\r\nHost: h\r\n\tX: 1\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nHost: h\r\nX: a\x01\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nHost: h\r\nX: a\nY: b\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nHost: h\r\nX: a\rY: b\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nHost: h\r\n: v\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nHost: h\r\nNo-Colon\r\n\r\n", 400 },
		/* Host: none or twice */
		{ "GET / HTTP/1.1\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400 },
		/* request line */
		{ "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400 },
		{ "GET / HTTP/1.1 \r\nHost: h\r\n\r\n", 400 },
		{ "GET /a b HTTP/1.1\r\nHost: h\r\n\r\n", 400 },
		{ "G(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400 },
		{ "GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505 },
		{ "GET / FTP/1.1\r\nHost: h\r\n\r\n", 400 },
		{ "GET /\xff HTTP/1.1\r\nHost: h\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nHost: h\r\nExpect: something\r\n\r\n", 417 },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int got = parse(&r, cases[i].head);
		if (got != cases[i].status)
			fail_msg("case %zu: got %d, want %d", i, got, cases[i].status);
	}
}

static void test_proxy_http__too_many_headers_is_431(void **state)
{
	char head[8192];
	size_t o = 0;
	tb_http_request_t r;
	(void)state;
	o += (size_t)snprintf(head + o, sizeof(head) - o, "GET / HTTP/1.1\r\nHost: h\r\n");
	for (int i = 0; i < TB_HTTP_MAX_HEADERS; i++)
		o += (size_t)snprintf(head + o, sizeof(head) - o, "X-%d: 1\r\n", i);
	snprintf(head + o, sizeof(head) - o, "\r\n");
	assert_int_equal(parse(&r, head), 431);
}

/* Decodes @p body fed in pieces of @p step bytes into an output of
 * @p cap bytes at a time. Returns the decoder's last result. */
static int decode(const char *body, size_t len, size_t step, size_t cap, char *out, size_t *olen,
		  size_t *left)
{
	tb_http_chunked_t c = { 0 };
	char tmp[64];
	size_t pos = 0, end = 0;
	int rc = 0;
	*olen = 0;
	while (pos < len && rc == 0) {
		end = pos + step < len ? pos + step : len;
		/* what the decoder leaves must be offered again */
		while (pos < end && rc == 0) {
			size_t used, got;
			rc = tb_http_chunked_decode(&c, body + pos, end - pos, &used, tmp,
						    cap < sizeof(tmp) ? cap : sizeof(tmp), &got);
			memcpy(out + *olen, tmp, got);
			*olen += got;
			pos += used;
			if (rc < 0)
				return rc;
			if (!used && !got)
				break;
		}
	}
	*left = len - pos;
	return rc;
}

static void test_proxy_http__chunked_in_any_split(void **state)
{
	const char body[] = "5\r\nhello\r\n1;ext=1\r\n \r\n0b\r\nworld, and \r\n0\r\n"
			    "X-Trailer: 1\r\n\r\nNEXT";
	char out[128];
	size_t olen, left;
	(void)state;
	for (size_t step = 1; step < sizeof(body); step++)
		for (size_t cap = 1; cap < 20; cap += 3) {
			int rc = decode(body, sizeof(body) - 1, step, cap, out, &olen, &left);
			assert_int_equal(rc, 1);
			out[olen] = '\0';
			assert_string_equal(out, "hello world, and ");
			assert_int_equal(left, 4); /* "NEXT" is not the body's */
		}
}

static void test_proxy_http__refuses_malformed_chunks(void **state)
{
	const char *bad[] = {
		"x\r\n",                      /* not hex */
		"\r\n",                       /* no size */
		"5\nhello\r\n0\r\n\r\n",      /* bare LF */
		"5\r\nhelloX\r\n0\r\n\r\n",   /* data longer than said */
		"5\r\nhello\r\n0\r\nX\n\r\n", /* bare LF in a trailer */
		"5 \r\nhello\r\n0\r\n\r\n",   /* space after the size */
		"-5\r\n",
		"1000000000000000\r\n", /* 16 hex digits: over the limit */
	};
	char out[128];
	size_t olen, left;
	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (decode(bad[i], strlen(bad[i]), 64, 64, out, &olen, &left) != -1)
			fail_msg("chunked case %zu was accepted", i);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proxy_http__parses_a_plain_request),
		cmocka_unit_test(test_proxy_http__head_end_needs_crlf_crlf),
		cmocka_unit_test(test_proxy_http__refuses_smuggling_shapes),
		cmocka_unit_test(test_proxy_http__too_many_headers_is_431),
		cmocka_unit_test(test_proxy_http__chunked_in_any_split),
		cmocka_unit_test(test_proxy_http__refuses_malformed_chunks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
