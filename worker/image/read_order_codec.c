/*
 * read_order_codec.c: an image's read order (read_order.h) made, encoded,
 * and decoded from hostile bytes.
 *
 * Little-endian throughout:
 *
 *   "TBORDER\n"  u16 version (1)
 *   u16 n, n bytes: the image's manifest digest ("sha256:<64 hex>")
 *   u16 nlayers, nlayers x u32: the spans of each layer's index
 *   u32 count, count x (u16 layer, u32 span): in the order first read
 *   32 bytes: the SHA-256 of every byte before them
 *
 * The decoder checks the size first, then the SHA-256, then every field:
 * the digest one, 1 .. LAYERS_MAX layers, at most SPANS_MAX spans each
 * inside its layer and none twice, nothing after. A layer may have no
 * span (a zstd:chunked layer of no file data: directories, links, empty
 * files, whiteouts); no span can name it.
 */
#include "read_order.h"

#include "tb/encoding.h"
#include "tb/image_ref.h"

#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "TBORDER\n"
#define SHA_LEN 32

/* ------------------------------------------------------------ checks */

static int by_span(const void *a, const void *b)
{
	const tb_read_span_t *x = a, *y = b;
	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	return x->span < y->span ? -1 : x->span > y->span;
}

/* Whether @p o's fields hold together: its image a digest, its layers
 * within bounds, its spans inside them and none twice. 0, or TB_EINVAL
 * naming the first fault ("read order: " prefixed). */
static int check(const tb_read_order_t *o, tb_error_t *err)
{
	if (!tb_digest_valid(o->image))
		return tb_error_set(err, TB_EINVAL, "read order: an image digest that is not one");
	if (!o->nlayers || o->nlayers > TB_READ_ORDER_LAYERS_MAX)
		return tb_error_set(err, TB_EINVAL, "read order: %zu layers (1 .. %u)", o->nlayers,
				    TB_READ_ORDER_LAYERS_MAX);
	if (o->n > TB_READ_ORDER_SPANS_MAX)
		return tb_error_set(err, TB_EINVAL, "read order: %zu spans (at most %u)", o->n,
				    TB_READ_ORDER_SPANS_MAX);
	for (size_t i = 0; i < o->n; i++) {
		const tb_read_span_t *s = &o->spans[i];
		if (s->layer >= o->nlayers || s->span >= o->npoints[s->layer])
			return tb_error_set(err, TB_EINVAL,
					    "read order: entry %zu, span %u of layer %u, is not "
					    "in the image's %zu layers",
					    i, s->span, s->layer, o->nlayers);
	}
	tb_read_span_t *sorted = malloc((o->n ? o->n : 1) * sizeof(*sorted));
	if (!sorted)
		return tb_error_set(err, TB_ENOMEM, "read order: out of memory");
	if (o->n)
		memcpy(sorted, o->spans, o->n * sizeof(*sorted));
	qsort(sorted, o->n, sizeof(*sorted), by_span);
	int rc = 0;
	for (size_t i = 1; rc == 0 && i < o->n; i++)
		if (!by_span(&sorted[i - 1], &sorted[i]))
			rc = tb_error_set(err, TB_EINVAL,
					  "read order: span %u of layer %u is listed twice",
					  sorted[i].span, sorted[i].layer);
	free(sorted);
	return rc;
}

/* ------------------------------------------------------------ making */

void tb_read_order_free(tb_read_order_t *o)
{
	if (!o)
		return;
	free(o->npoints);
	free(o->spans);
	free(o);
}

/* A new order with room for @p nlayers and @p n spans, or NULL. */
static tb_read_order_t *alloc_order(size_t nlayers, size_t n)
{
	tb_read_order_t *o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	o->npoints = calloc(nlayers ? nlayers : 1, sizeof(*o->npoints));
	o->spans = calloc(n ? n : 1, sizeof(*o->spans));
	if (!o->npoints || !o->spans) {
		tb_read_order_free(o);
		return NULL;
	}
	return o;
}

int tb_read_order_make(tb_read_order_t **out, const char *image, const tb_layer_index_t *const *ix,
		       size_t nlayers, const tb_read_span_t *spans, size_t n, tb_error_t *err)
{
	*out = NULL;
	if (nlayers > TB_READ_ORDER_LAYERS_MAX)
		return tb_error_set(err, TB_EINVAL, "read order: %zu layers (at most %u)", nlayers,
				    TB_READ_ORDER_LAYERS_MAX);
	if (n > TB_READ_ORDER_SPANS_MAX)
		n = TB_READ_ORDER_SPANS_MAX; /* the first read: the ones that matter */
	tb_read_order_t *o = alloc_order(nlayers, n);
	if (!o)
		return tb_error_set(err, TB_ENOMEM, "read order: out of memory");
	snprintf(o->image, sizeof(o->image), "%s", image);
	o->nlayers = nlayers;
	for (size_t l = 0; l < nlayers; l++) {
		if (ix[l]->npoints > UINT32_MAX) {
			tb_read_order_free(o);
			return tb_error_set(err, TB_EINVAL, "read order: layer %zu of %zu spans", l,
					    ix[l]->npoints);
		}
		o->npoints[l] = (uint32_t)ix[l]->npoints;
	}
	o->n = n;
	if (n)
		memcpy(o->spans, spans, n * sizeof(*spans));
	int rc = check(o, err);
	if (rc < 0) {
		tb_read_order_free(o);
		return rc;
	}
	*out = o;
	return 0;
}

int tb_read_order_fits(const tb_read_order_t *o, const tb_layer_index_t *const *ix, size_t nlayers,
		       tb_error_t *err)
{
	if (o->nlayers != nlayers)
		return tb_error_set(err, TB_EINVAL,
				    "read order: recorded over %zu layers, the image has %zu",
				    o->nlayers, nlayers);
	for (size_t l = 0; l < nlayers; l++)
		if (o->npoints[l] != ix[l]->npoints)
			return tb_error_set(err, TB_EINVAL,
					    "read order: recorded over %u spans of layer %zu, its "
					    "index has %zu (another index)",
					    o->npoints[l], l, ix[l]->npoints);
	return 0;
}

/* ------------------------------------------------------------ encoding */

static void put_le(uint8_t **p, uint64_t v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		*(*p)++ = (uint8_t)(v >> (8 * i));
}

static void sha_of(const uint8_t *d, size_t n, uint8_t out[SHA_LEN])
{
	EVP_Digest(d, n, out, NULL, EVP_sha256(), NULL);
}

int tb_read_order_encode(const tb_read_order_t *o, uint8_t **data, size_t *len, tb_error_t *err)
{
	int rc = check(o, err);
	if (rc < 0)
		return rc;
	size_t dlen = strlen(o->image);
	size_t n = 8 + 2 + 2 + dlen + 2 + 4 * o->nlayers + 4 + 6 * o->n + SHA_LEN;
	uint8_t *buf = malloc(n), *p = buf;
	if (!buf)
		return tb_error_set(err, TB_ENOMEM, "read order: out of memory");
	memcpy(p, MAGIC, 8);
	p += 8;
	put_le(&p, TB_READ_ORDER_VERSION, 2);
	put_le(&p, dlen, 2);
	memcpy(p, o->image, dlen);
	p += dlen;
	put_le(&p, o->nlayers, 2);
	for (size_t l = 0; l < o->nlayers; l++)
		put_le(&p, o->npoints[l], 4);
	put_le(&p, o->n, 4);
	for (size_t i = 0; i < o->n; i++) {
		put_le(&p, o->spans[i].layer, 2);
		put_le(&p, o->spans[i].span, 4);
	}
	sha_of(buf, (size_t)(p - buf), p);
	*data = buf;
	*len = n;
	return 0;
}

/* ------------------------------------------------------------ decoding */

typedef struct rbuf {
	const uint8_t *p;
	size_t n, at; /* n: the bytes before the SHA-256 */
	tb_error_t *err;
} rbuf_t;

static int bad(rbuf_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(rbuf_t *r, const char *fmt, ...)
{
	char why[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return tb_error_set(r->err, TB_EINVAL, "read order: %s (at byte %zu)", why, r->at);
}

static int get_le(rbuf_t *r, uint64_t *v, size_t n, const char *what)
{
	if (n > r->n - r->at)
		return bad(r, "truncated in %s", what);
	*v = 0;
	for (size_t i = 0; i < n; i++)
		*v |= (uint64_t)r->p[r->at + i] << (8 * i);
	r->at += n;
	return 0;
}

/* The magic, the version and the image's digest, into @p image. */
static int get_head(rbuf_t *r, char image[72])
{
	uint64_t version, dlen;

	if (r->n < 8 || memcmp(r->p, MAGIC, 8))
		return bad(r, "not a read order (no magic)");
	r->at = 8;
	if (get_le(r, &version, 2, "the version") < 0)
		return -1;
	if (version > TB_READ_ORDER_VERSION)
		return tb_error_set(r->err, TB_EVERSION, "read order: version %llu (this reads %d)",
				    (unsigned long long)version, TB_READ_ORDER_VERSION);
	if (version != TB_READ_ORDER_VERSION)
		return bad(r, "version %llu", (unsigned long long)version);
	if (get_le(r, &dlen, 2, "the image digest") < 0)
		return -1;
	if (dlen >= 72 || dlen > r->n - r->at)
		return bad(r, "an image digest of %llu bytes", (unsigned long long)dlen);
	memcpy(image, r->p + r->at, dlen);
	image[dlen] = '\0';
	r->at += dlen;
	if (memchr(image, '\0', dlen) || !tb_digest_valid(image))
		return bad(r, "an image digest that is not one");
	return 0;
}

/* The layers and the spans into @p out (from alloc_order's room). */
static int get_body(rbuf_t *r, const char *image, tb_read_order_t **out)
{
	uint64_t nl, n, v;

	if (get_le(r, &nl, 2, "the layer count") < 0)
		return -1;
	if (!nl || nl > TB_READ_ORDER_LAYERS_MAX || 4 * nl > r->n - r->at)
		return bad(r, "%llu layers in %zu bytes", (unsigned long long)nl, r->n - r->at);
	size_t at_layers = r->at;
	r->at += 4 * nl;
	if (get_le(r, &n, 4, "the span count") < 0)
		return -1;
	if (n > TB_READ_ORDER_SPANS_MAX || 6 * n != r->n - r->at)
		return bad(r, "%llu spans in %zu bytes", (unsigned long long)n, r->n - r->at);
	tb_read_order_t *o = alloc_order((size_t)nl, (size_t)n);
	if (!o)
		return tb_error_set(r->err, TB_ENOMEM, "read order: out of memory");
	snprintf(o->image, sizeof(o->image), "%s", image);
	o->nlayers = (size_t)nl;
	o->n = (size_t)n;
	size_t at_spans = r->at;
	r->at = at_layers;
	for (size_t l = 0; l < o->nlayers; l++) {
		get_le(r, &v, 4, "a layer"); /* in bounds: counted above */
		o->npoints[l] = (uint32_t)v;
	}
	r->at = at_spans;
	for (size_t i = 0; i < o->n; i++) {
		get_le(r, &v, 2, "a span");
		o->spans[i].layer = (uint32_t)v;
		get_le(r, &v, 4, "a span");
		o->spans[i].span = (uint32_t)v;
	}
	int rc = check(o, r->err);
	if (rc < 0) {
		tb_read_order_free(o);
		return rc;
	}
	*out = o;
	return 0;
}

int tb_read_order_decode(const uint8_t *data, size_t len, const char *image, tb_read_order_t **out,
			 tb_error_t *err)
{
	uint8_t sha[SHA_LEN];
	char named[72];
	rbuf_t r = { data, 0, 0, err };

	*out = NULL;
	if (len > TB_READ_ORDER_BYTES_MAX)
		return tb_error_set(err, TB_EINVAL, "read order: %zu bytes (at most %u)", len,
				    (unsigned)TB_READ_ORDER_BYTES_MAX);
	if (len < 8 + SHA_LEN)
		return tb_error_set(err, TB_EINVAL, "read order: %zu bytes, too few to be one",
				    len);
	r.n = len - SHA_LEN;
	sha_of(data, r.n, sha);
	if (memcmp(sha, data + r.n, SHA_LEN))
		return tb_error_set(err, TB_EINVAL,
				    "read order: its SHA-256 is not that of its bytes (garbled, "
				    "or cut short)");
	if (get_head(&r, named) < 0)
		return err->code;
	if (image && strcmp(image, named))
		return bad(&r, "the order of image %s, not of %.80s", named, image);
	return get_body(&r, named, out) < 0 ? err->code : 0;
}
