/*
 * layer_index_read.c: a byte range of a gzip layer's tar stream read
 * through its index (layer_index.h).
 *
 * From the access point at or before the range, the spans are fetched
 * one at a time, each checked against its SHA-256 before any of it is
 * inflated. The first is inflated raw (the point is inside a deflate
 * stream), primed with the bits of the byte it starts within and the
 * window before it; the output before the range is dropped. When the
 * point's gzip member ends, its trailer is passed and the next members
 * are inflated as gzip (each header and CRC checked by zlib). An eStargz
 * index's member points are read by layer_index_member.c.
 */
#include "layer_index_int.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define WIN TB_LAYER_INDEX_WINDOW
#define SCRATCH (32u << 10)

typedef struct reader {
	const tb_layer_index_t *ix;
	tb_layer_fetch_fn fetch;
	void *arg;
	z_stream s;
	uint8_t *span; /* the span fetched last */
	size_t next;   /* the next span to fetch */
	int raw;       /* inflating the point's own member, raw */
	int ended;     /* past the last member */
	uint64_t pos;  /* the tar stream's offset of the next byte inflated */
	tb_error_t *err;
} reader_t;

/* Fetches span r->next and checks it: its bytes become the input. */
static int fetch_span(reader_t *r)
{
	const tb_layer_index_t *ix = r->ix;
	uint64_t from, to;
	unsigned char sum[32];
	size_t i = r->next;

	if (i >= ix->npoints)
		return tb_error_set(r->err, TB_EINVAL, "layer %s: the stream ends at %llu",
				    ix->layer, (unsigned long long)r->pos);
	tb_layer_index_span(ix, i, &from, &to);
	uint8_t *buf = realloc(r->span, to - from);
	if (!buf)
		return tb_error_set(r->err, TB_ENOMEM, "layer %s: span %zu: out of memory",
				    ix->layer, i);
	r->span = buf;
	int64_t got = r->fetch(r->arg, from, buf, to - from, r->err);
	if (got < 0)
		return tb_error_prefix(r->err, "layer %s: fetch span %zu", ix->layer, i);
	if ((uint64_t)got != to - from)
		return tb_error_set(r->err, TB_EINVAL,
				    "layer %s: span %zu (bytes %llu..%llu): the fetch gave %lld "
				    "bytes",
				    ix->layer, i, (unsigned long long)from, (unsigned long long)to,
				    (long long)got);
	EVP_Digest(buf, to - from, sum, NULL, EVP_sha256(), NULL);
	if (memcmp(sum, ix->points[i].span_sha, 32))
		return tb_error_set(r->err, TB_EINVAL,
				    "layer %s: span %zu (bytes %llu..%llu) does not match its "
				    "SHA-256 in the index",
				    ix->layer, i, (unsigned long long)from, (unsigned long long)to);
	r->s.next_in = buf;
	r->s.avail_in = (uInt)(to - from);
	r->next++;
	return 0;
}

/* Point @p i's window, inflated into @p w. */
static int window_of(reader_t *r, size_t i, uint8_t *w)
{
	const tb_layer_point_t *p = &r->ix->points[i];
	z_stream z = { 0 };
	int zr = Z_MEM_ERROR;

	if (inflateInit2(&z, -15) == Z_OK) {
		z.next_in = p->window;
		z.avail_in = p->wlen;
		z.next_out = w;
		z.avail_out = WIN;
		zr = inflate(&z, Z_FINISH);
		if (zr == Z_STREAM_END && z.total_out != p->wsize)
			zr = Z_DATA_ERROR;
		inflateEnd(&z);
	}
	if (zr != Z_STREAM_END)
		return tb_error_set(r->err, zr == Z_MEM_ERROR ? TB_ENOMEM : TB_EINVAL,
				    "layer %s: point %zu's window does not inflate", r->ix->layer,
				    i);
	return 0;
}

/* Inflating from point @p i: its span fetched, its bits and window in. */
static int start(reader_t *r, size_t i)
{
	const tb_layer_point_t *p = &r->ix->points[i];
	uint8_t w[WIN];

	r->next = i;
	r->raw = 1;
	r->pos = p->out;
	if (inflateInit2(&r->s, -15) != Z_OK)
		return tb_error_set(r->err, TB_ENOMEM, "layer %s: inflate: out of memory",
				    r->ix->layer);
	if (fetch_span(r) < 0)
		return r->err->code;
	if (p->bits) {
		int byte = r->s.next_in[0];
		r->s.next_in++;
		r->s.avail_in--;
		inflatePrime(&r->s, p->bits, byte >> (8 - p->bits));
	}
	if (p->wsize &&
	    (window_of(r, i, w) < 0 || inflateSetDictionary(&r->s, w, p->wsize) != Z_OK))
		return r->err->code < 0
			   ? r->err->code
			   : tb_error_set(r->err, TB_EINVAL, "layer %s: point %zu's window",
					  r->ix->layer, i);
	return 0;
}

/* Input to go on with: @return 1 if some, 0 if the blob is done, < 0. */
static int more(reader_t *r)
{
	if (r->s.avail_in)
		return 1;
	if (r->next >= r->ix->npoints)
		return 0;
	return fetch_span(r) < 0 ? r->err->code : 1;
}

/* A member ended: its trailer passed (raw), the next begun, if any. */
static int member_end(reader_t *r)
{
	int rc;
	for (int k = r->raw ? 8 : 0; k > 0;) { /* the raw member's trailer */
		if ((rc = more(r)) <= 0) {
			r->ended = 1;
			return rc;
		}
		uInt n = r->s.avail_in < (uInt)k ? r->s.avail_in : (uInt)k;
		r->s.next_in += n;
		r->s.avail_in -= n;
		k -= (int)n;
	}
	if ((rc = more(r)) <= 0 || r->s.next_in[0] != 0x1f) {
		r->ended = 1;
		return rc < 0 ? rc : 0;
	}
	r->raw = 0;
	if (inflateReset2(&r->s, 31) != Z_OK)
		return tb_error_set(r->err, TB_EINVAL, "layer %s: inflate reset", r->ix->layer);
	return 0;
}

static int ends_early(reader_t *r, uint64_t end)
{
	return tb_error_set(r->err, TB_EINVAL, "layer %s: the stream ends at %llu, before %llu",
			    r->ix->layer, (unsigned long long)r->pos, (unsigned long long)end);
}

/* Inflates to the range, dropping what comes before it; a span is
 * fetched only when inflate() can go no further without one. */
static int inflate_range(reader_t *r, uint64_t off, uint8_t *buf, size_t len)
{
	uint8_t scratch[SCRATCH];
	size_t done = 0;

	while (done < len) {
		if (r->ended)
			return ends_early(r, off + len);
		int drop = r->pos < off, rc;
		uint64_t room = drop ? off - r->pos : len - done;
		r->s.next_out = drop ? scratch : buf + done;
		r->s.avail_out = (uInt)(room < SCRATCH ? room : SCRATCH);
		uInt before = r->s.avail_out;
		int zr = inflate(&r->s, Z_NO_FLUSH);
		r->pos += before - r->s.avail_out;
		done += drop ? 0 : before - r->s.avail_out;
		if (zr == Z_STREAM_END) {
			if (member_end(r) < 0)
				return r->err->code;
		} else if (zr == Z_BUF_ERROR && !r->s.avail_in) {
			if ((rc = more(r)) <= 0)
				return rc < 0 ? rc : ends_early(r, off + len);
		} else if (zr != Z_OK) {
			return tb_error_set(r->err, TB_EINVAL,
					    "layer %s: span %zu does not inflate: %s", r->ix->layer,
					    r->next - 1, r->s.msg ? r->s.msg : "zlib error");
		}
	}
	return 0;
}

size_t tb_layer_point_before(const tb_layer_index_t *ix, uint64_t off)
{
	size_t lo = 0, hi = ix->npoints; /* points[lo].out <= off < points[hi].out */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (ix->points[mid].out <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

int tb_layer_index_read(const tb_layer_index_t *ix, tb_layer_fetch_fn fetch, void *arg,
			uint64_t off, void *buf, size_t len, tb_error_t *err)
{
	if (off > ix->total_out || len > ix->total_out - off)
		return tb_error_set(
		    err, TB_EINVAL, "layer %s: bytes %llu..%llu are past its stream's %llu",
		    ix->layer, (unsigned long long)off, (unsigned long long)(off + len),
		    (unsigned long long)ix->total_out);
	if (!len)
		return 0;
	if (tb_layer_index_kind_toc(ix->kind))
		return tb_layer_member_read(ix, fetch, arg, off, buf, len, err);
	reader_t r = { .ix = ix, .fetch = fetch, .arg = arg, .err = err };
	int rc = start(&r, tb_layer_point_before(ix, off));
	if (rc == 0)
		rc = inflate_range(&r, off, buf, len);
	inflateEnd(&r.s);
	free(r.span);
	return rc;
}
