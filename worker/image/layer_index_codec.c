/*
 * layer_index_codec.c: the layer index's encoding, a versioned binary
 * (layer_index.h), and its decoder, which takes the bytes as hostile.
 *
 * Little-endian throughout:
 *
 *   "TBLAYIX\n"  u16 version (2)
 *   u16 n, n bytes: the layer's digest ("sha256:<64 hex>")
 *   u64 layer_size, u64 total_out, u64 span, u32 npoints, u32 nentries
 *   npoints x:  u64 in, u64 out, u8 bits, u32 wsize, u32 wlen, wlen bytes
 *               of window, 32 bytes: the span's SHA-256
 *   nentries x: u8 type, u32 mode, u32 uid, u32 gid, u64 size, u64 offset,
 *               i64 mtime (seconds), u32 mtime_ns,
 *               u16 n, n bytes of path, u16 n, n bytes of link target
 *
 * Version 1 had no times. It is refused, not read with times of 0: a
 * tree served from it would not be the unpacked tree (whose files have
 * their layer's times), so a layer whose pin names a version 1 index is
 * pulled whole, as for any index refused, until that pin lapses.
 *
 * The encoding's SHA-256 is the index's digest: a consumer pins it, and
 * the decoder checks the pin before it reads a field. Then every count
 * is bounded by the bytes left, and every offset checked against the
 * others: the access points in order, each span within the blob and
 * under TB_LAYER_INDEX_SPAN_BYTES_MAX, each window its expected size,
 * each entry's data within the tar stream, at a block boundary, after the
 * one before, its time within 0 .. TB_LAYER_INDEX_MTIME_MAX and its
 * nanoseconds below 1e9. A violation is refused, naming it.
 */
#include "layer_index_int.h"

#include "tb/encoding.h"
#include "tb/image_ref.h"

#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "TBLAYIX\n"
#define VERSION 2
#define WLEN_MAX (TB_LAYER_INDEX_WINDOW + 1024) /* a window deflated, at most */
#define POINT_MIN (8 + 8 + 1 + 4 + 4 + 32)
#define ENTRY_MIN (1 + 4 + 4 + 4 + 8 + 8 + 8 + 4 + 2 + 2)

/* ------------------------------------------------------------ encoding */

typedef struct wbuf {
	uint8_t *p;
	size_t n, cap;
	int oom;
} wbuf_t;

static void put(wbuf_t *w, const void *d, size_t n)
{
	if (w->oom || !n)
		return;
	if (w->n + n > w->cap) {
		size_t cap = w->cap ? w->cap : 4096;
		while (cap < w->n + n)
			cap *= 2;
		uint8_t *p = realloc(w->p, cap);
		if (!p) {
			w->oom = 1;
			return;
		}
		w->p = p;
		w->cap = cap;
	}
	memcpy(w->p + w->n, d, n);
	w->n += n;
}

static void put_le(wbuf_t *w, uint64_t v, size_t n)
{
	uint8_t b[8];
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(w, b, n);
}

static void put_str(wbuf_t *w, const char *s)
{
	size_t n = strlen(s);
	put_le(w, n, 2);
	put(w, s, n);
}

static void put_point(wbuf_t *w, const tb_layer_point_t *p)
{
	put_le(w, p->in, 8);
	put_le(w, p->out, 8);
	put_le(w, p->bits, 1);
	put_le(w, p->wsize, 4);
	put_le(w, p->wlen, 4);
	put(w, p->window, p->wlen);
	put(w, p->span_sha, 32);
}

static void put_entry(wbuf_t *w, const tb_layer_entry_t *e)
{
	put_le(w, e->type, 1);
	put_le(w, e->mode, 4);
	put_le(w, e->uid, 4);
	put_le(w, e->gid, 4);
	put_le(w, e->size, 8);
	put_le(w, e->offset, 8);
	put_le(w, (uint64_t)e->mtime, 8);
	put_le(w, e->mtime_ns, 4);
	put_str(w, e->path);
	put_str(w, e->link);
}

static void digest_of(const uint8_t *d, size_t n, char out[72])
{
	unsigned char sum[32];
	EVP_Digest(d, n, sum, NULL, EVP_sha256(), NULL);
	memcpy(out, "sha256:", 7);
	tb_hex(out + 7, sum, sizeof(sum));
}

int tb_layer_index_encode(const tb_layer_index_t *ix, uint8_t **data, size_t *len, char digest[72],
			  tb_error_t *err)
{
	wbuf_t w = { 0 };

	if (ix->kind != TB_LAYER_INDEX_GZIP)
		return tb_error_set(err, TB_EINVAL,
				    "layer index of %s: an eStargz layer's is made from its TOC, "
				    "never encoded",
				    ix->layer);
	put(&w, MAGIC, 8);
	put_le(&w, VERSION, 2);
	put_str(&w, ix->layer);
	put_le(&w, ix->layer_size, 8);
	put_le(&w, ix->total_out, 8);
	put_le(&w, ix->span, 8);
	put_le(&w, ix->npoints, 4);
	put_le(&w, ix->nentries, 4);
	for (size_t i = 0; i < ix->npoints; i++)
		put_point(&w, &ix->points[i]);
	for (size_t i = 0; i < ix->nentries; i++)
		put_entry(&w, &ix->entries[i]);
	if (w.oom || w.n > TB_LAYER_INDEX_BYTES_MAX) {
		free(w.p);
		return w.oom ? tb_error_set(err, TB_ENOMEM, "encode layer index: out of memory")
			     : tb_error_set(err, TB_ETOOBIG,
					    "layer index of %s: %zu bytes (at most %u)", ix->layer,
					    w.n, TB_LAYER_INDEX_BYTES_MAX);
	}
	digest_of(w.p, w.n, digest);
	*data = w.p;
	*len = w.n;
	return 0;
}

/* ------------------------------------------------------------ decoding */

typedef struct rbuf {
	const uint8_t *p;
	size_t n, at;
	tb_error_t *err;
} rbuf_t;

static int bad(rbuf_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(rbuf_t *r, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return tb_error_set(r->err, TB_EINVAL, "layer index: %s (at byte %zu)", why, r->at);
}

static int get(rbuf_t *r, void *d, size_t n, const char *what)
{
	if (n > r->n - r->at)
		return bad(r, "truncated in %s", what);
	memcpy(d, r->p + r->at, n);
	r->at += n;
	return 0;
}

static int get_le(rbuf_t *r, uint64_t *v, size_t n, const char *what)
{
	uint8_t b[8] = { 0 };
	if (get(r, b, n, what) < 0)
		return -1;
	*v = 0;
	for (size_t i = 0; i < n; i++)
		*v |= (uint64_t)b[i] << (8 * i);
	return 0;
}

/* A u16-counted string, at most @p max - 1 bytes, no NUL in it. */
static int get_str(rbuf_t *r, char **out, size_t max, const char *what)
{
	uint64_t n;
	if (get_le(r, &n, 2, what) < 0)
		return -1;
	if (n >= max)
		return bad(r, "%s of %llu bytes (fewer than %zu)", what, (unsigned long long)n,
			   max);
	if (n > r->n - r->at)
		return bad(r, "truncated in %s", what);
	if (memchr(r->p + r->at, '\0', n))
		return bad(r, "%s with a NUL byte", what);
	if (!(*out = malloc(n + 1)))
		return tb_error_set(r->err, TB_ENOMEM, "layer index: out of memory");
	memcpy(*out, r->p + r->at, n);
	(*out)[n] = '\0';
	r->at += n;
	return 0;
}

static int check_pins(const uint8_t *d, size_t n, const char *want, tb_error_t *err)
{
	char have[72];
	if (n > TB_LAYER_INDEX_BYTES_MAX)
		return tb_error_set(err, TB_EINVAL, "layer index: %zu bytes (at most %u)", n,
				    TB_LAYER_INDEX_BYTES_MAX);
	if (!want)
		return 0;
	digest_of(d, n, have);
	if (strcmp(have, want))
		return tb_error_set(err, TB_EINVAL,
				    "layer index: its digest is %s, not %.80s as pinned", have,
				    want);
	return 0;
}

static int get_head(rbuf_t *r, tb_layer_index_t *ix, const char *layer, uint64_t *np, uint64_t *ne)
{
	char magic[8], *name = NULL;
	uint64_t version;

	if (get(r, magic, 8, "the magic") < 0)
		return -1;
	if (memcmp(magic, MAGIC, 8))
		return bad(r, "not a layer index (no magic)");
	if (get_le(r, &version, 2, "the version") < 0)
		return -1;
	if (version > VERSION)
		return tb_error_set(r->err, TB_EVERSION,
				    "layer index: version %llu (this reads %d)",
				    (unsigned long long)version, VERSION);
	if (version != VERSION)
		return bad(r, "version %llu, which records no file times (this reads %d)",
			   (unsigned long long)version, VERSION);
	if (get_str(r, &name, sizeof(ix->layer), "the layer digest") < 0)
		return -1;
	int ok = tb_digest_valid(name);
	snprintf(ix->layer, sizeof(ix->layer), "%s", name);
	free(name);
	if (!ok)
		return bad(r, "a layer digest that is not one: '%.80s'", ix->layer);
	if (layer && strcmp(layer, ix->layer))
		return bad(r, "an index of layer %s, not of %.80s", ix->layer, layer);
	if (get_le(r, &ix->layer_size, 8, "the layer size") < 0 ||
	    get_le(r, &ix->total_out, 8, "the stream size") < 0 ||
	    get_le(r, &ix->span, 8, "the span") < 0 || get_le(r, np, 4, "the point count") < 0 ||
	    get_le(r, ne, 4, "the entry count") < 0)
		return -1;
	return 0;
}

static int check_head(rbuf_t *r, const tb_layer_index_t *ix, uint64_t np, uint64_t ne)
{
	if (ix->span < TB_LAYER_INDEX_SPAN_MIN || ix->span > TB_LAYER_INDEX_SPAN_MAX)
		return bad(r, "a span of %llu bytes", (unsigned long long)ix->span);
	if (!ix->layer_size)
		return bad(r, "an empty layer");
	if (!np)
		return bad(r, "no access point");
	if (ne > TB_LAYER_INDEX_ENTRIES_MAX)
		return bad(r, "%llu entries (at most %u)", (unsigned long long)ne,
			   TB_LAYER_INDEX_ENTRIES_MAX);
	if (np > (r->n - r->at) / POINT_MIN || ne > (r->n - r->at - np * POINT_MIN) / ENTRY_MIN)
		return bad(r, "%llu points and %llu entries in %zu bytes", (unsigned long long)np,
			   (unsigned long long)ne, r->n - r->at);
	return 0;
}

static int get_point(rbuf_t *r, tb_layer_point_t *p)
{
	uint64_t bits, wsize, wlen;
	if (get_le(r, &p->in, 8, "a point") < 0 || get_le(r, &p->out, 8, "a point") < 0 ||
	    get_le(r, &bits, 1, "a point") < 0 || get_le(r, &wsize, 4, "a point") < 0 ||
	    get_le(r, &wlen, 4, "a point") < 0)
		return -1;
	if (bits > 7 || wlen > WLEN_MAX)
		return bad(r, "a point with %llu bits or a window of %llu bytes",
			   (unsigned long long)bits, (unsigned long long)wlen);
	p->bits = (uint8_t)bits;
	p->wsize = (uint32_t)wsize;
	p->wlen = (uint32_t)wlen;
	if (wlen > r->n - r->at)
		return bad(r, "truncated in a window");
	if (!(p->window = malloc(wlen ? wlen : 1)))
		return tb_error_set(r->err, TB_ENOMEM, "layer index: out of memory");
	if (get(r, p->window, wlen, "a window") < 0 || get(r, p->span_sha, 32, "a span hash") < 0)
		return -1;
	return 0;
}

/* Point @p i against the one before it and the layer's sizes. */
static int check_point(rbuf_t *r, const tb_layer_index_t *ix, size_t i)
{
	const tb_layer_point_t *p = &ix->points[i];
	uint64_t from, to;

	if (!p->in && p->bits)
		return bad(r, "point %zu starts within byte -1", i);
	if (p->in > ix->layer_size || p->out > ix->total_out)
		return bad(r, "point %zu (%llu, %llu) is past the layer (%llu, %llu)", i,
			   (unsigned long long)p->in, (unsigned long long)p->out,
			   (unsigned long long)ix->layer_size, (unsigned long long)ix->total_out);
	if (i == 0 ? p->out != 0 : p->out <= ix->points[i - 1].out)
		return bad(r, "point %zu is out of order (stream offset %llu)", i,
			   (unsigned long long)p->out);
	if (p->wsize != (p->out < TB_LAYER_INDEX_WINDOW ? p->out : TB_LAYER_INDEX_WINDOW))
		return bad(r, "point %zu has a window of %u bytes", i, p->wsize);
	tb_layer_index_span(ix, i, &from, &to);
	if (i && from <= ix->points[i - 1].in - (ix->points[i - 1].bits ? 1 : 0))
		return bad(r, "point %zu is out of order (blob offset %llu)", i,
			   (unsigned long long)from);
	if (from >= to || to - from > TB_LAYER_INDEX_SPAN_BYTES_MAX)
		return bad(r,
			   "span %zu (%llu..%llu of %llu bytes) is empty, out of order or too long",
			   i, (unsigned long long)from, (unsigned long long)to,
			   (unsigned long long)ix->layer_size);
	return 0;
}

static int get_entry(rbuf_t *r, tb_layer_entry_t *e)
{
	uint64_t type, mode, uid, gid, sec, ns;
	if (get_le(r, &type, 1, "an entry") < 0 || get_le(r, &mode, 4, "an entry") < 0 ||
	    get_le(r, &uid, 4, "an entry") < 0 || get_le(r, &gid, 4, "an entry") < 0 ||
	    get_le(r, &e->size, 8, "an entry") < 0 || get_le(r, &e->offset, 8, "an entry") < 0 ||
	    get_le(r, &sec, 8, "an entry") < 0 || get_le(r, &ns, 4, "an entry") < 0)
		return -1;
	if (type >= TB_LAYER_TYPES || mode > 07777)
		return bad(r, "an entry of type %llu, mode %llo", (unsigned long long)type,
			   (unsigned long long)mode);
	/* as an i64, negative is past MAX too */
	if (sec > (uint64_t)TB_LAYER_INDEX_MTIME_MAX || ns >= 1000000000u)
		return bad(r, "an entry modified at %lld.%09llu s (0 .. %lld s)", (long long)sec,
			   (unsigned long long)ns, TB_LAYER_INDEX_MTIME_MAX);
	e->mtime = (int64_t)sec;
	e->mtime_ns = (uint32_t)ns;
	e->type = (uint8_t)type;
	e->mode = (uint32_t)mode;
	e->uid = (uint32_t)uid;
	e->gid = (uint32_t)gid;
	if (get_str(r, &e->path, TB_LAYER_INDEX_NAME_MAX, "an entry's path") < 0)
		return -1;
	if (get_str(r, &e->link, TB_LAYER_INDEX_NAME_MAX, "an entry's link target") < 0) {
		free(e->path);
		return -1;
	}
	return 0;
}

static int check_entry(rbuf_t *r, const tb_layer_index_t *ix, size_t i)
{
	const tb_layer_entry_t *e = &ix->entries[i];
	if (!e->path[0])
		return bad(r, "entry %zu has no path", i);
	if (e->offset > ix->total_out || e->size > ix->total_out - e->offset)
		return bad(r, "entry %zu ('%.200s', %llu bytes at %llu) is past the stream's %llu",
			   i, e->path, (unsigned long long)e->size, (unsigned long long)e->offset,
			   (unsigned long long)ix->total_out);
	if (e->offset % 512 || e->offset < 512 || (i && e->offset <= ix->entries[i - 1].offset))
		return bad(r, "entry %zu ('%.200s') is out of place (at %llu)", i, e->path,
			   (unsigned long long)e->offset);
	return 0;
}

static int get_body(rbuf_t *r, tb_layer_index_t *ix, uint64_t np, uint64_t ne)
{
	if (!(ix->points = calloc(np, sizeof(*ix->points))) ||
	    !(ix->entries = calloc(ne ? ne : 1, sizeof(*ix->entries))))
		return tb_error_set(r->err, TB_ENOMEM, "layer index: out of memory");
	for (; ix->npoints < np; ix->npoints++)
		if (get_point(r, &ix->points[ix->npoints]) < 0) {
			ix->npoints++; /* its window, if any, freed with the index */
			return -1;
		}
	for (size_t i = 0; i < np; i++)
		if (check_point(r, ix, i) < 0)
			return -1;
	for (; ix->nentries < ne; ix->nentries++) {
		if (get_entry(r, &ix->entries[ix->nentries]) < 0)
			return -1;
		if (check_entry(r, ix, ix->nentries) < 0) {
			ix->nentries++; /* freed with the index */
			return -1;
		}
	}
	if (r->at != r->n)
		return bad(r, "%zu bytes after the index", r->n - r->at);
	return 0;
}

int tb_layer_index_decode(const uint8_t *data, size_t len, const char *layer, const char *want,
			  tb_layer_index_t **out, tb_error_t *err)
{
	rbuf_t r = { data, len, 0, err };
	uint64_t np, ne;

	*out = NULL;
	if (check_pins(data, len, want, err) < 0)
		return err->code;
	tb_layer_index_t *ix = calloc(1, sizeof(*ix));
	if (!ix)
		return tb_error_set(err, TB_ENOMEM, "layer index: out of memory");
	if (get_head(&r, ix, layer, &np, &ne) < 0 || check_head(&r, ix, np, ne) < 0 ||
	    get_body(&r, ix, np, ne) < 0) {
		tb_layer_index_free(ix);
		return err->code;
	}
	*out = ix;
	return 0;
}
