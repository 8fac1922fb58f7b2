/*
 * layer_index.c: a gzip layer's index built from its whole blob
 * (layer_index.h), after zlib's examples/zran.c.
 *
 * The blob is inflated with Z_BLOCK, which stops at each deflate block's
 * start: there, once `span` bytes of tar stream have come since the last
 * access point (and at the very first block), a point is recorded with
 * the window, the last 32 KiB of output. The output goes into the window
 * itself, used as a ring, and on to the tar scanner (layer_index_tar.c).
 * The compressed bytes are hashed twice as they come: whole, for the
 * layer's digest, and span by span, for each span's SHA-256 (the last
 * byte of each buffer is held back, since a point that starts within a
 * byte puts that byte in the span after it). Gzip members follow one
 * another until bytes that do not start one (ignored, as libarchive
 * ignores them when the layer is unpacked, but hashed with the rest).
 */
#include "layer_index_int.h"

#include "tb/encoding.h"
#include "tb/image_ref.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define WIN TB_LAYER_INDEX_WINDOW
#define CHUNK (256u << 10)

typedef struct builder {
	tb_layer_index_t *ix;
	z_stream s;
	uint8_t window[WIN];
	uint8_t in[CHUNK];
	uint64_t buf_start, buf_len; /* the blob's bytes in `in` */
	uint64_t totin, totout, last;
	uint64_t hashed; /* the blob's bytes given to the span's hash */
	uint8_t carry;   /* the byte before buf_start, held back */
	int span_open, eof, between, done;
	EVP_MD_CTX *whole, *span;
	size_t cap_points;
	tb_tar_scan_t tar;
	tb_layer_read_fn read;
	void *arg;
	tb_error_t *err;
} builder_t;

/* Gives the span's hash the blob's bytes up to @p to (those in the
 * buffer, and the held-back byte before it). */
static void hash_to(builder_t *b, uint64_t to)
{
	if (!b->span_open) {
		b->hashed = to;
		return;
	}
	if (b->hashed < b->buf_start && to > b->hashed) { /* the held-back byte */
		EVP_DigestUpdate(b->span, &b->carry, 1);
		b->hashed++;
	}
	if (to > b->hashed) {
		EVP_DigestUpdate(b->span, b->in + (b->hashed - b->buf_start), to - b->hashed);
		b->hashed = to;
	}
}

static int refill(builder_t *b)
{
	if (b->buf_len) {
		hash_to(b, b->buf_start + b->buf_len - 1);
		b->carry = b->in[b->buf_len - 1];
	}
	b->buf_start += b->buf_len;
	b->buf_len = 0;
	int64_t n = b->read(b->arg, b->in, CHUNK, b->err);
	if (n < 0)
		return tb_error_prefix(b->err, "read layer %s", b->ix->layer);
	if ((uint64_t)n > CHUNK)
		return tb_error_set(b->err, TB_EINVAL, "read layer %s: more than asked",
				    b->ix->layer);
	EVP_DigestUpdate(b->whole, b->in, (size_t)n);
	b->buf_len = (uint64_t)n;
	b->s.next_in = b->in;
	b->s.avail_in = (uInt)n;
	b->eof = n == 0;
	return 0;
}

/* The window before the point, oldest byte first, deflated into @p p. */
static int keep_window(builder_t *b, tb_layer_point_t *p)
{
	uint8_t flat[WIN];
	size_t have = WIN - b->s.avail_out; /* where the ring's next byte goes */
	z_stream z = { 0 };

	p->wsize = (uint32_t)(b->totout < WIN ? b->totout : WIN);
	if (b->totout >= WIN) {
		memcpy(flat, b->window + have, WIN - have);
		memcpy(flat + (WIN - have), b->window, have);
	} else {
		memcpy(flat, b->window, p->wsize);
	}
	if (deflateInit2(&z, 6, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY) != Z_OK)
		return tb_error_set(b->err, TB_ENOMEM, "layer index: deflate: out of memory");
	uLong cap = deflateBound(&z, p->wsize);
	p->window = malloc(cap);
	z.next_in = flat;
	z.avail_in = p->wsize;
	z.next_out = p->window;
	z.avail_out = (uInt)cap;
	int zr = p->window ? deflate(&z, Z_FINISH) : Z_MEM_ERROR;
	p->wlen = (uint32_t)z.total_out;
	deflateEnd(&z);
	if (zr != Z_STREAM_END)
		return tb_error_set(b->err, TB_ENOMEM, "layer index: deflate a window: %d", zr);
	return 0;
}

/* Closes the open span at @p to: its SHA-256 into the last point. */
static int close_span(builder_t *b, uint64_t to)
{
	tb_layer_index_t *ix = b->ix;
	uint64_t from, end;
	hash_to(b, to);
	tb_layer_index_span(ix, ix->npoints - 1, &from, &end);
	if (to - from > TB_LAYER_INDEX_SPAN_BYTES_MAX)
		return tb_error_set(b->err, TB_EINVAL,
				    "layer %s: %llu compressed bytes between access points at %llu "
				    "(at most %u): not indexed",
				    ix->layer, (unsigned long long)(to - from),
				    (unsigned long long)from, TB_LAYER_INDEX_SPAN_BYTES_MAX);
	EVP_DigestFinal_ex(b->span, ix->points[ix->npoints - 1].span_sha, NULL);
	EVP_DigestInit_ex(b->span, EVP_sha256(), NULL);
	return 0;
}

static int add_point(builder_t *b)
{
	tb_layer_index_t *ix = b->ix;
	uint8_t bits = (uint8_t)(b->s.data_type & 7);
	uint64_t from = b->totin - (bits ? 1 : 0);

	if (ix->npoints && close_span(b, from) < 0)
		return b->err->code;
	hash_to(b, from); /* the first: the bytes before it belong to no span */
	b->span_open = 1;
	if (ix->npoints == b->cap_points) {
		size_t cap = b->cap_points ? 2 * b->cap_points : 16;
		tb_layer_point_t *p = realloc(ix->points, cap * sizeof(*p));
		if (!p)
			return tb_error_set(b->err, TB_ENOMEM, "layer index: out of memory");
		ix->points = p;
		b->cap_points = cap;
	}
	tb_layer_point_t *p = &ix->points[ix->npoints++];
	memset(p, 0, sizeof(*p));
	p->in = b->totin;
	p->out = b->totout;
	p->bits = bits;
	b->last = b->totout;
	return keep_window(b, p);
}

/* One inflate() call, to the next block boundary or end of input/ring. */
static int inflate_some(builder_t *b)
{
	if (!b->s.avail_out) {
		b->s.next_out = b->window;
		b->s.avail_out = WIN;
	}
	uint8_t *from = b->s.next_out;
	uInt in_before = b->s.avail_in;
	int zr = inflate(&b->s, Z_BLOCK);
	size_t got = (size_t)(b->s.next_out - from);
	b->totin += in_before - b->s.avail_in;
	b->totout += got;
	if (zr == Z_NEED_DICT || zr == Z_DATA_ERROR || zr == Z_MEM_ERROR || zr == Z_STREAM_ERROR)
		return tb_error_set(b->err, TB_EINVAL, "layer %s does not inflate at byte %llu: %s",
				    b->ix->layer, (unsigned long long)b->totin,
				    b->s.msg ? b->s.msg : "zlib error");
	if (tb_tar_scan_feed(&b->tar, from, got, b->err) < 0)
		return tb_error_prefix(b->err, "layer %s", b->ix->layer);
	if (zr == Z_STREAM_END) {
		b->between = 1;
		return 0;
	}
	if ((b->s.data_type & 128) && !(b->s.data_type & 64) &&
	    (b->totout == 0 ? !b->ix->npoints : b->totout - b->last >= b->ix->span))
		return add_point(b);
	return 0;
}

/* Inflates the blob, member after member, to its end. */
static int run(builder_t *b)
{
	while (!b->eof) {
		if (!b->s.avail_in) {
			if (refill(b) < 0)
				return b->err->code;
			if (b->eof && !b->between)
				return tb_error_set(
				    b->err, TB_EINVAL,
				    "layer %s: the gzip stream ends early (at %llu)", b->ix->layer,
				    (unsigned long long)b->totin);
			continue;
		}
		if (b->between || b->done) {
			if (b->done || b->s.next_in[0] != 0x1f) { /* not a member: the end */
				b->done = 1;
				b->totin += b->s.avail_in;
				b->s.avail_in = 0;
				continue;
			}
			inflateReset(&b->s);
			b->between = 0;
		}
		if (inflate_some(b) < 0)
			return b->err->code;
	}
	return 0;
}

static int finish(builder_t *b)
{
	tb_layer_index_t *ix = b->ix;
	unsigned char sum[32];
	char hex[65];

	ix->layer_size = b->buf_start + b->buf_len;
	ix->total_out = b->totout;
	EVP_DigestFinal_ex(b->whole, sum, NULL);
	tb_hex(hex, sum, sizeof(sum));
	if (strcmp(hex, ix->layer + 7))
		return tb_error_set(b->err, TB_EINVAL, "the blob is sha256:%s, not layer %s", hex,
				    ix->layer);
	if (!ix->npoints)
		return tb_error_set(b->err, TB_EINVAL, "layer %s: no deflate block", ix->layer);
	if (tb_tar_scan_end(&b->tar, b->err) < 0)
		return tb_error_prefix(b->err, "layer %s", ix->layer);
	return close_span(b, ix->layer_size);
}

static int check_args(const char *digest, uint64_t span, tb_error_t *err)
{
	if (!digest || !tb_digest_valid(digest))
		return tb_error_set(err, TB_EINVAL, "layer index: '%.80s' is not a sha256 digest",
				    digest ? digest : "(null)");
	if (span && (span < TB_LAYER_INDEX_SPAN_MIN || span > TB_LAYER_INDEX_SPAN_MAX))
		return tb_error_set(
		    err, TB_EINVAL, "layer index: a span of %llu bytes (from %u to %u)",
		    (unsigned long long)span, TB_LAYER_INDEX_SPAN_MIN, TB_LAYER_INDEX_SPAN_MAX);
	return 0;
}

int tb_layer_index_build(const char *digest, uint64_t span, tb_layer_read_fn read, void *arg,
			 tb_layer_index_t **out, tb_error_t *err)
{
	*out = NULL;
	if (check_args(digest, span, err) < 0)
		return err->code;
	builder_t *b = calloc(1, sizeof(*b));
	tb_layer_index_t *ix = calloc(1, sizeof(*ix));
	int rc = TB_ENOMEM;
	if (b && ix && (b->whole = EVP_MD_CTX_new()) && (b->span = EVP_MD_CTX_new()) &&
	    EVP_DigestInit_ex(b->whole, EVP_sha256(), NULL) &&
	    EVP_DigestInit_ex(b->span, EVP_sha256(), NULL) && inflateInit2(&b->s, 31) == Z_OK) {
		snprintf(ix->layer, sizeof(ix->layer), "%s", digest);
		ix->span = span ? span : TB_LAYER_INDEX_SPAN_DEFAULT;
		b->ix = b->tar.ix = ix;
		b->read = read;
		b->arg = arg;
		b->err = err;
		rc = run(b) < 0 ? err->code : finish(b);
		inflateEnd(&b->s);
	} else {
		tb_error_set(err, TB_ENOMEM, "layer index: out of memory");
	}
	if (b) {
		tb_tar_scan_free(&b->tar);
		EVP_MD_CTX_free(b->whole);
		EVP_MD_CTX_free(b->span);
	}
	free(b);
	if (rc < 0)
		tb_layer_index_free(ix);
	else
		*out = ix;
	return rc;
}

void tb_layer_index_free(tb_layer_index_t *ix)
{
	if (!ix)
		return;
	for (size_t i = 0; i < ix->npoints; i++)
		free(ix->points[i].window);
	free(ix->points);
	tb_layer_entries_free(ix->entries, ix->nentries);
	free(ix->entries);
	free(ix);
}

void tb_layer_index_span(const tb_layer_index_t *ix, size_t i, uint64_t *from, uint64_t *to)
{
	const tb_layer_point_t *p = &ix->points[i];
	*from = p->in - (p->bits ? 1 : 0);
	if (i + 1 < ix->npoints)
		*to = ix->points[i + 1].in - (ix->points[i + 1].bits ? 1 : 0);
	else
		*to = ix->end_in ? ix->end_in : ix->layer_size;
}
