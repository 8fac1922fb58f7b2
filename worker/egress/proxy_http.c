/*
 * proxy_http.c: strict HTTP/1.1 request heads and chunked bodies
 * (proxy_http.h). Pure: buffers in, results out.
 */
#include "proxy_http.h"

#include "tb/encoding.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define CHUNK_LINE_MAX 1024    /* a size line with its extensions */
#define TRAILERS_MAX (8 << 10) /* all trailer lines of a body */

long tb_http_head_end(const char *buf, size_t len, size_t *skip)
{
	size_t i = 0;

	*skip = 0;
	while (i + 1 < len && buf[i] == '\r' && buf[i + 1] == '\n')
		i += 2;
	if (i < len && buf[i] == '\n')
		return -1;
	*skip = i;
	for (size_t s = i; i < len; i++) {
		char c = buf[i];
		if (c == '\0')
			return -1;
		if (c == '\n' && (i == s || buf[i - 1] != '\r'))
			return -1; /* bare LF */
		if (c == '\r' && i + 1 < len && buf[i + 1] != '\n')
			return -1; /* bare CR */
		if (c == '\n' && i >= s + 3 && buf[i - 2] == '\n')
			return (long)(i + 1);
	}
	return 0;
}

/* RFC 9110 5.6.2 token characters. */
static int tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

const char *tb_http_header_get(const tb_http_request_t *r, const char *name)
{
	for (size_t i = 0; i < r->nheaders; i++)
		if (strcasecmp(r->headers[i].name, name) == 0)
			return r->headers[i].value;
	return NULL;
}

int tb_http_has_token(const char *list, const char *token)
{
	size_t tl = strlen(token);
	for (const char *p = list; p && *p;) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		const char *e = p;
		while (*e && *e != ',')
			e++;
		const char *t = e;
		while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
			t--;
		if ((size_t)(t - p) == tl && strncasecmp(p, token, tl) == 0)
			return 1;
		p = e;
	}
	return 0;
}

#define FAIL(status, ...)                                                                          \
	do {                                                                                       \
		snprintf(why, whylen, __VA_ARGS__);                                                \
		return (status);                                                                   \
	} while (0)

int tb_http_parse_request(tb_http_request_t *out, char *buf, size_t len, char *why, size_t whylen)
{
	char *p = buf, *end = buf + len, *eol;
	int hosts = 0, lengths = 0, encodings = 0, conn_close = 0, conn_keep = 0;

	memset(out, 0, sizeof(*out));
	out->content_length = -1;
	why[0] = '\0';
	/* Request line: method SP target SP HTTP/1.x, single spaces. */
	if (!(eol = memchr(p, '\r', (size_t)(end - p))))
		FAIL(400, "malformed request line");
	*eol = '\0';
	char *sp1 = strchr(p, ' ');
	char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (!sp1 || !sp2 || sp1 == p || sp2 == sp1 + 1 || strchr(sp2 + 1, ' '))
		FAIL(400, "malformed request line");
	*sp1 = *sp2 = '\0';
	for (char *m = p; *m; m++)
		if (!tchar((unsigned char)*m))
			FAIL(400, "malformed method");
	if (sp1 - p > 32)
		FAIL(400, "method too long");
	for (char *t = sp1 + 1; *t; t++)
		if ((unsigned char)*t <= 0x20 || (unsigned char)*t >= 0x7f)
			FAIL(400, "the request target holds a control character, a space or a "
				  "byte above 0x7e");
	if (strncmp(sp2 + 1, "HTTP/", 5) != 0)
		FAIL(400, "malformed request line");
	if (strcmp(sp2 + 1, "HTTP/1.1") == 0)
		out->minor = 1;
	else if (strcmp(sp2 + 1, "HTTP/1.0") == 0)
		out->minor = 0;
	else
		FAIL(505, "only HTTP/1.1 and HTTP/1.0 are spoken here");
	out->method = p;
	out->target = sp1 + 1;
	p = eol + 2;

	/* Header fields, until the empty line. */
	while (p < end && *p != '\r') {
		if (!(eol = memchr(p, '\r', (size_t)(end - p))))
			FAIL(400, "malformed header");
		*eol = '\0';
		if (*p == ' ' || *p == '\t')
			FAIL(400, "obsolete line folding");
		char *colon = strchr(p, ':');
		if (!colon || colon == p)
			FAIL(400, "malformed header");
		*colon = '\0';
		for (char *n = p; *n; n++)
			if (!tchar((unsigned char)*n))
				FAIL(400, "malformed header name (whitespace before ':'?)");
		char *v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		char *ve = v + strlen(v);
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			*--ve = '\0';
		for (char *c = v; *c; c++)
			if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
				FAIL(400, "a control character in header %s", p);
		if (out->nheaders >= TB_HTTP_MAX_HEADERS)
			FAIL(431, "more than %d headers", TB_HTTP_MAX_HEADERS);
		out->headers[out->nheaders].name = p;
		out->headers[out->nheaders++].value = v;

		if (strcasecmp(p, "Host") == 0) {
			hosts++;
		} else if (strcasecmp(p, "Content-Length") == 0) {
			/* Twice, even with the same value, is how requests get
			 * smuggled past one of two parsers. */
			if (++lengths > 1 || !*v || strspn(v, "0123456789") != strlen(v) ||
			    strlen(v) > 18)
				FAIL(400, "bad or repeated Content-Length");
			int64_t n = 0;
			for (const char *d = v; *d; d++)
				n = n * 10 + (*d - '0');
			out->content_length = n;
		} else if (strcasecmp(p, "Transfer-Encoding") == 0) {
			if (++encodings > 1)
				FAIL(400, "repeated Transfer-Encoding");
			if (strcasecmp(v, "chunked") != 0)
				FAIL(501, "only Transfer-Encoding: chunked is understood");
			out->chunked = 1;
		} else if (strcasecmp(p, "Connection") == 0) {
			conn_close |= tb_http_has_token(v, "close");
			conn_keep |= tb_http_has_token(v, "keep-alive");
		} else if (strcasecmp(p, "Expect") == 0) {
			if (strcasecmp(v, "100-continue") != 0)
				FAIL(417, "only Expect: 100-continue is understood");
			out->expect_continue = 1;
		}
		p = eol + 2;
	}
	if (lengths && encodings)
		FAIL(400, "both Content-Length and Transfer-Encoding");
	if (encodings && out->minor == 0)
		FAIL(400, "Transfer-Encoding in an HTTP/1.0 request");
	if (hosts > 1 || (hosts == 0 && out->minor == 1))
		FAIL(400, "an HTTP/1.1 request needs exactly one Host");
	out->keep_alive = out->minor == 1 ? !conn_close : (conn_keep && !conn_close);
	return 0;
}

enum {
	CH_SIZE = 0, /* hex digits */
	CH_EXT,      /* ";ext" up to CR */
	CH_SIZE_LF,  /* LF after the size line */
	CH_DATA,
	CH_DATA_CR,
	CH_DATA_LF,
	CH_TRAILER_START, /* a trailer line, or the final empty line */
	CH_TRAILER,       /* in a trailer line */
	CH_TRAILER_LF,
	CH_END_LF, /* LF of the final empty line */
	CH_DONE,
};

int tb_http_chunked_decode(tb_http_chunked_t *c, const char *in, size_t len, size_t *used,
			   char *out, size_t cap, size_t *produced)
{
	size_t i = 0, o = 0;

	*used = *produced = 0;
	while (i < len && c->state != CH_DONE) {
		char ch = in[i];
		switch (c->state) {
		case CH_SIZE: {
			int d = tb_hex_digit(ch);
			if (d >= 0) {
				if (++c->digits > 15)
					return -1;
				c->left = c->left << 4 | (uint64_t)d;
			} else if (c->digits && ch == ';') {
				c->state = CH_EXT;
			} else if (c->digits && ch == '\r') {
				c->state = CH_SIZE_LF;
			} else {
				return -1;
			}
			if (++c->line > CHUNK_LINE_MAX)
				return -1;
			i++;
			break;
		}
		case CH_EXT:
			if (ch == '\n' || ch == '\0' || ++c->line > CHUNK_LINE_MAX)
				return -1;
			if (ch == '\r')
				c->state = CH_SIZE_LF;
			i++;
			break;
		case CH_SIZE_LF:
			if (ch != '\n')
				return -1;
			i++;
			c->line = 0;
			c->digits = 0;
			c->state = c->left ? CH_DATA : CH_TRAILER_START;
			break;
		case CH_DATA: {
			if (o == cap)
				goto out;
			size_t n = len - i;
			if (n > c->left)
				n = (size_t)c->left;
			if (n > cap - o)
				n = cap - o;
			memcpy(out + o, in + i, n);
			o += n, i += n;
			c->left -= n;
			if (!c->left)
				c->state = CH_DATA_CR;
			break;
		}
		case CH_DATA_CR:
			if (ch != '\r')
				return -1;
			c->state = CH_DATA_LF;
			i++;
			break;
		case CH_DATA_LF:
			if (ch != '\n')
				return -1;
			c->state = CH_SIZE;
			i++;
			break;
		case CH_TRAILER_START:
			if (ch == '\r') {
				c->state = CH_END_LF;
			} else if (ch == '\n') {
				return -1;
			} else {
				c->state = CH_TRAILER;
				continue; /* the same byte, as part of the line */
			}
			i++;
			break;
		case CH_TRAILER:
			if (ch == '\n' || ch == '\0' || ++c->trailer > TRAILERS_MAX)
				return -1;
			if (ch == '\r')
				c->state = CH_TRAILER_LF;
			i++;
			break;
		case CH_TRAILER_LF:
			if (ch != '\n')
				return -1;
			c->state = CH_TRAILER_START;
			i++;
			break;
		case CH_END_LF:
			if (ch != '\n')
				return -1;
			c->state = CH_DONE;
			i++;
			break;
		}
	}
out:
	*used = i, *produced = o;
	return c->state == CH_DONE;
}
