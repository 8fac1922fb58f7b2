/*
 * test_layer_index.c: a gzip layer's seekable index (worker/image/
 * layer_index.h): built from real tar+gzip layers (libarchive writes the
 * tar in each dialect, zlib the gzip, in one member or several), every
 * file read through it equal to what libarchive extracts, the encoding
 * round-tripped (times with their nanoseconds too); and hostile cases
 * refused with a reason: an index that lies about a span, names another
 * layer, is truncated or garbled, is of version 1 (no times), has points
 * out of order, entries past the stream or times out of range; a fetch
 * that comes back short or wrong; a layer with a time before the epoch.
 */
#include "layer_index.h"

#include <archive.h>
#include <archive_entry.h>
#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <cmocka.h>

#include "layer_testlib.h"

#include "tb/encoding.h"

#define SPAN TB_LAYER_INDEX_SPAN_MIN

/* ------------------------------------------------------------ layers */

/* One entry of a layer made by the test. */
typedef struct spec {
	const char *path;
	char type;   /* 'f' file, 'd' dir, 'l' symlink, 'h' hard link */
	size_t size; /* a file's bytes (made by fill()) */
	int random;  /* incompressible bytes, not text */
	const char *link;
} spec_t;

/* A blob in memory, read or fetched by the index. */
typedef struct blob {
	uint8_t *p;
	size_t n, at, step; /* step: what one read gives at most */
	enum { HONEST, SHORT, WRONG, FAILS } mode;
	uint64_t fetched;
	char digest[72];
} blob_t;

static void fill(uint8_t *p, size_t n, uint32_t seed, int random)
{
	static const char *words[] = { "layer ", "index ",  "the ", "of ",   "deflate\n",
				       "span ",  "window ", "tar ", "gzip ", "{ return 0; }\n" };
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n;) {
		x = x * 1103515245u + 12345u;
		if (random) {
			p[i++] = (uint8_t)(x >> 16);
			continue;
		}
		const char *w = words[(x >> 16) % 10];
		for (; *w && i < n; w++)
			p[i++] = (uint8_t)*w;
	}
}

/* A tar (uncompressed) of @p n entries in libarchive's @p format. */
static uint8_t *make_tar(const spec_t *s, size_t n, int format, size_t *len)
{
	size_t cap = 64u << 20;
	uint8_t *out = malloc(cap);
	struct archive *a = archive_write_new();
	assert_non_null(out);
	assert_int_equal(archive_write_set_format(a, format), ARCHIVE_OK);
	assert_int_equal(archive_write_open_memory(a, out, cap, len), ARCHIVE_OK);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, s[i].path);
		/* past ustar's 7 octal digits: pax records it, GNU base-256 */
		archive_entry_set_uid(e,
				      strstr(s[i].path, "bigid") ? 3000000 : 1000 + (la_int64_t)i);
		archive_entry_set_gid(e, 2000);
		archive_entry_set_perm(e, s[i].type == 'd' ? 0755 : 0640);
		/* nanoseconds (pax keeps them, the others drop them); past
		 * ustar's 11 octal digits: pax records it, GNU base-256 */
		archive_entry_set_mtime(e,
					strstr(s[i].path, "bigid")     ? 9000000000
					: strstr(s[i].path, "negtime") ? -100
								       : 1700000000 + (time_t)i,
					(long)(i * 7919 % 1000000000 + 1));
		if (s[i].type == 'h') {
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_hardlink(e, s[i].link);
		} else if (s[i].type == 'l') {
			archive_entry_set_filetype(e, AE_IFLNK);
			archive_entry_set_symlink(e, s[i].link);
		} else {
			archive_entry_set_filetype(e, s[i].type == 'd' ? AE_IFDIR : AE_IFREG);
			archive_entry_set_size(e, (la_int64_t)s[i].size);
		}
		assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
		if (s[i].type == 'f' && s[i].size) {
			uint8_t *d = malloc(s[i].size);
			fill(d, s[i].size, (uint32_t)i, s[i].random);
			assert_int_equal(archive_write_data(a, d, s[i].size),
					 (la_ssize_t)s[i].size);
			free(d);
		}
		archive_entry_free(e);
	}
	assert_int_equal(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
	return out;
}

/* @p tar gzipped in @p members members (split at uneven places). */
static void gzip_into(blob_t *b, const uint8_t *tar, size_t len, int members)
{
	size_t cap = len + len / 100 + 4096 * (size_t)members, at = 0;
	unsigned char sum[32];
	b->p = malloc(cap);
	b->n = 0;
	assert_non_null(b->p);
	for (int m = 0; m < members; m++) {
		size_t part = m == members - 1 ? len - at : len / (size_t)members + 777 * (size_t)m;
		z_stream z = { 0 };
		assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
		z.next_in = (uint8_t *)tar + at;
		z.avail_in = (uInt)part;
		z.next_out = b->p + b->n;
		z.avail_out = (uInt)(cap - b->n);
		assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
		b->n += z.total_out;
		at += part;
		deflateEnd(&z);
	}
	EVP_Digest(b->p, b->n, sum, NULL, EVP_sha256(), NULL);
	memcpy(b->digest, "sha256:", 7);
	tb_hex(b->digest + 7, sum, sizeof(sum));
	b->step = 10007; /* reads that end at odd places */
}

static int64_t blob_read(void *arg, void *buf, size_t len, tb_error_t *err)
{
	blob_t *b = arg;
	if (b->mode == FAILS)
		return tb_error_set(err, TB_EIO, "the disk is gone");
	size_t k = b->n - b->at < len ? b->n - b->at : len;
	k = k < b->step ? k : b->step;
	memcpy(buf, b->p + b->at, k);
	b->at += k;
	return (int64_t)k;
}

static int64_t blob_fetch(void *arg, uint64_t off, void *buf, size_t len, tb_error_t *err)
{
	blob_t *b = arg;
	if (b->mode == FAILS)
		return tb_error_set(err, TB_EIO, "the registry is gone");
	assert_true(off + len <= b->n);
	memcpy(buf, b->p + off, len);
	b->fetched += len;
	if (b->mode == WRONG)
		((uint8_t *)buf)[len / 2] ^= 1;
	return b->mode == SHORT ? (int64_t)len - 1 : (int64_t)len;
}

static tb_layer_index_t *build(blob_t *b, uint64_t span)
{
	tb_layer_index_t *ix = NULL;
	tb_error_t err;
	b->at = 0;
	int rc = tb_layer_index_build(b->digest, span, blob_read, b, &ix, &err);
	if (rc)
		fail_msg("build: %s", err.msg);
	return ix;
}

/* ------------------------------------------------------------ checks */

/* Every entry as libarchive reads the layer (layer_testlib.h). */
static size_t check_against_libarchive(blob_t *b, const tb_layer_index_t *ix)
{
	return layer_check_against_tar(b->p, b->n, ix, LAYER_CHECK_TIMES, blob_fetch, b);
}

/* Ranges of the stream read through @p ix, against the tar itself. */
static void check_ranges(blob_t *b, const tb_layer_index_t *ix, const uint8_t *tar, size_t len)
{
	static const size_t sizes[] = { 1, 511, 4096, 70001, 300000 };
	uint8_t *got = malloc(300000);
	uint32_t x = 7;
	tb_error_t err;
	assert_int_equal(ix->total_out, len);
	for (int i = 0; i < 60; i++) {
		x = x * 1103515245u + 12345u;
		size_t n = sizes[i % 5] < len ? sizes[i % 5] : len;
		uint64_t off = (x >> 4) % (len - n + 1);
		if (i == 0)
			off = len - n; /* the very end */
		if (tb_layer_index_read(ix, blob_fetch, b, off, got, n, &err))
			fail_msg("read %llu+%zu: %s", (unsigned long long)off, n, err.msg);
		assert_memory_equal(got, tar + off, n);
	}
	free(got);
}

/* @p ix encoded, decoded (pinned) and encoded again: the same bytes. */
static tb_layer_index_t *round_trip(const tb_layer_index_t *ix)
{
	uint8_t *d1, *d2;
	size_t n1, n2;
	char g1[72], g2[72];
	tb_layer_index_t *back;
	tb_error_t err;
	assert_int_equal(tb_layer_index_encode(ix, &d1, &n1, g1, &err), 0);
	if (tb_layer_index_decode(d1, n1, ix->layer, g1, &back, &err))
		fail_msg("decode: %s", err.msg);
	assert_int_equal(tb_layer_index_encode(back, &d2, &n2, g2, &err), 0);
	assert_int_equal(n1, n2);
	assert_memory_equal(d1, d2, n1);
	assert_string_equal(g1, g2);
	free(d1);
	free(d2);
	return back;
}

/* ------------------------------------------------------------ honest layers */

static char long_name[300];
static int ustar_names; /* ustar: a long name must split at a '/' */

static const spec_t *typical(size_t *n)
{
	static spec_t s[400];
	static char names[300][32];
	size_t k = 0;
	memset(long_name, 'n', sizeof(long_name) - 1);
	memcpy(long_name, "deep/", 5);
	long_name[250] = '\0'; /* past ustar's 100 and its prefix's 155 */
	if (ustar_names)
		long_name[150] = '/'; /* prefix "deep/nnn...", name "nnn..." */
	s[k++] = (spec_t){ "etc/", 'd', 0, 0, NULL };
	s[k++] = (spec_t){ "usr/lib/big.so", 'f', 3u << 20, 0, NULL };  /* many spans */
	s[k++] = (spec_t){ "usr/lib/noise.bin", 'f', 700000, 1, NULL }; /* stored blocks */
	s[k++] = (spec_t){ "deep/", 'd', 0, 0, NULL };
	s[k++] = (spec_t){ long_name, 'f', 5000, 0, NULL };
	s[k++] = (spec_t){ "etc/alias", 'l', 0, 0, "../usr/lib/big.so" };
	s[k++] = (spec_t){ "etc/hard", 'h', 0, 0, "usr/lib/big.so" };
	s[k++] = (spec_t){ "etc/.wh.removed", 'f', 0, 0, NULL };
	s[k++] = (spec_t){ "deep/.wh..wh..opq", 'f', 0, 0, NULL };
	s[k++] = (spec_t){ "empty", 'f', 0, 0, NULL };
	if (!ustar_names)
		s[k++] = (spec_t){ "bigid", 'f', 10, 0, NULL };
	for (int i = 0; i < 300; i++) { /* many small files */
		snprintf(names[i], sizeof(names[i]), "small/f%03d", i);
		s[k++] = (spec_t){ names[i], 'f', (size_t)(i * 37 % 3000), i % 7 == 0, NULL };
	}
	*n = k;
	return s;
}

static void honest(int format, int members, uint64_t span)
{
	size_t n, len;
	const spec_t *s = typical(&n);
	uint8_t *tar = make_tar(s, n, format, &len);
	blob_t b = { 0 };
	gzip_into(&b, tar, len, members);
	tb_layer_index_t *ix = build(&b, span);
	assert_string_equal(ix->layer, b.digest);
	assert_int_equal(ix->layer_size, b.n);
	assert_true(ix->npoints > 3 * (size_t)members);
	assert_int_equal(check_against_libarchive(&b, ix), n);
	if (format == ARCHIVE_FORMAT_TAR_PAX_INTERCHANGE) /* pax's fractions kept */
		assert_int_equal(ix->entries[n - 1].mtime_ns, (n - 1) * 7919 + 1);
	check_ranges(&b, ix, tar, len);
	tb_layer_index_t *back = round_trip(ix);
	check_ranges(&b, back, tar, len);
	tb_layer_index_free(back);
	tb_layer_index_free(ix);
	free(tar);
	free(b.p);
}

static void test_pax(void **state)
{
	(void)state;
	honest(ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, 1, SPAN);
}

/* Full pax: every entry's times in records, mtime's with its fraction
 * (atime and ctime beside it, which the index leaves). */
static void test_pax_times(void **state)
{
	(void)state;
	honest(ARCHIVE_FORMAT_TAR_PAX_INTERCHANGE, 1, SPAN);
}

static void test_gnu_long_names(void **state)
{
	(void)state;
	honest(ARCHIVE_FORMAT_TAR_GNUTAR, 1, SPAN);
}

static void test_ustar_prefix(void **state)
{
	(void)state;
	ustar_names = 1;
	honest(ARCHIVE_FORMAT_TAR_USTAR, 1, SPAN);
	ustar_names = 0;
}

/* Concatenated gzip members are one layer, read across their joins. */
static void test_multi_member(void **state)
{
	(void)state;
	honest(ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, 4, SPAN);
}

/* The default span: one point for a small layer, still read right. */
static void test_default_span(void **state)
{
	(void)state;
	size_t n, len;
	const spec_t *s = typical(&n);
	uint8_t *tar = make_tar(s, n, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, &len);
	blob_t b = { 0 };
	gzip_into(&b, tar, len, 2);
	tb_layer_index_t *ix = build(&b, 0);
	assert_int_equal(ix->span, TB_LAYER_INDEX_SPAN_DEFAULT);
	check_ranges(&b, ix, tar, len);
	tb_layer_index_free(ix);
	free(tar);
	free(b.p);
}

/* ------------------------------------------------------------ hostile */

typedef struct fixture {
	uint8_t *tar;
	size_t len;
	blob_t b;
	tb_layer_index_t *ix;
	uint8_t *enc;
	size_t n;
	char digest[72];
} fixture_t;

static int setup(void **state)
{
	fixture_t *f = calloc(1, sizeof(*f));
	size_t n;
	tb_error_t err;
	const spec_t *s = typical(&n);
	f->tar = make_tar(s, 12, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, &f->len);
	gzip_into(&f->b, f->tar, f->len, 2);
	f->ix = build(&f->b, SPAN);
	assert_true(f->ix->npoints >= 4);
	assert_int_equal(tb_layer_index_encode(f->ix, &f->enc, &f->n, f->digest, &err), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture_t *f = *state;
	tb_layer_index_free(f->ix);
	free(f->tar);
	free(f->b.p);
	free(f->enc);
	free(f);
	return 0;
}

/* Decoding @p ix re-encoded fails, with @p why in the message. */
static void refused(const tb_layer_index_t *ix, const char *layer, const char *why)
{
	uint8_t *d;
	size_t n;
	char g[72];
	tb_layer_index_t *out = (tb_layer_index_t *)1;
	tb_error_t err;
	assert_int_equal(tb_layer_index_encode(ix, &d, &n, g, &err), 0);
	assert_int_equal(tb_layer_index_decode(d, n, layer, g, &out, &err), TB_EINVAL);
	assert_null(out);
	if (!strstr(err.msg, why))
		fail_msg("'%s' does not say '%s'", err.msg, why);
	free(d);
}

static void expect_read_error(fixture_t *f, const tb_layer_index_t *ix, const char *why)
{
	uint8_t buf[4096];
	tb_error_t err;
	int rc = tb_layer_index_read(ix, blob_fetch, &f->b, f->len / 2, buf, sizeof(buf), &err);
	assert_true(rc < 0);
	if (!strstr(err.msg, why) || !strstr(err.msg, f->b.digest))
		fail_msg("'%s' does not say '%s' and the layer", err.msg, why);
}

/* A span whose hash lies: the read fails naming the span, no bytes. */
static void test_span_hash_lies(void **state)
{
	fixture_t *f = *state;
	size_t i = f->ix->npoints / 2;
	uint8_t keep[32];
	char why[32];
	memcpy(keep, f->ix->points[i].span_sha, 32);
	for (size_t k = 0; k < f->ix->npoints; k++) /* whichever span the read starts in */
		f->ix->points[k].span_sha[0] ^= 0xff;
	snprintf(why, sizeof(why), "span %zu ", i);
	uint8_t buf[16];
	tb_error_t err;
	assert_int_equal(tb_layer_index_read(f->ix, blob_fetch, &f->b, f->ix->points[i].out, buf,
					     sizeof(buf), &err),
			 TB_EINVAL);
	assert_non_null(strstr(err.msg, why));
	assert_non_null(strstr(err.msg, "does not match"));
	for (size_t k = 0; k < f->ix->npoints; k++)
		f->ix->points[k].span_sha[0] ^= 0xff;
	assert_memory_equal(keep, f->ix->points[i].span_sha, 32);
}

/* A fetch that comes back short, wrong, or not at all. */
static void test_fetch_short_or_wrong(void **state)
{
	fixture_t *f = *state;
	f->b.mode = SHORT;
	expect_read_error(f, f->ix, "the fetch gave");
	f->b.mode = WRONG;
	expect_read_error(f, f->ix, "does not match its SHA-256");
	f->b.mode = FAILS;
	expect_read_error(f, f->ix, "the registry is gone");
	f->b.mode = HONEST;
	uint8_t buf[4096];
	tb_error_t err;
	assert_int_equal(
	    tb_layer_index_read(f->ix, blob_fetch, &f->b, f->len / 2, buf, sizeof(buf), &err), 0);
	assert_memory_equal(buf, f->tar + f->len / 2, sizeof(buf));
}

static void test_other_layer(void **state)
{
	fixture_t *f = *state;
	tb_layer_index_t *out;
	tb_error_t err;
	char other[72];
	snprintf(other, sizeof(other), "sha256:%064d", 0);
	assert_int_equal(tb_layer_index_decode(f->enc, f->n, other, f->digest, &out, &err),
			 TB_EINVAL);
	assert_non_null(strstr(err.msg, "an index of layer"));
	/* building from a blob that is not the layer named */
	blob_t b = f->b;
	memcpy(b.digest, other, sizeof(other));
	b.at = 0;
	assert_int_equal(tb_layer_index_build(other, SPAN, blob_read, &b, &out, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "not layer"));
	assert_null(out);
}

static void test_pinned_digest(void **state)
{
	fixture_t *f = *state;
	tb_layer_index_t *out;
	tb_error_t err;
	char pin[72];
	memcpy(pin, f->digest, sizeof(pin));
	pin[10] = pin[10] == '0' ? '1' : '0';
	assert_int_equal(tb_layer_index_decode(f->enc, f->n, f->b.digest, pin, &out, &err),
			 TB_EINVAL);
	assert_non_null(strstr(err.msg, "as pinned"));
	f->enc[f->n - 1] ^= 1; /* a flipped bit: the pin no longer matches */
	assert_int_equal(tb_layer_index_decode(f->enc, f->n, f->b.digest, f->digest, &out, &err),
			 TB_EINVAL);
	f->enc[f->n - 1] ^= 1;
	assert_int_equal(tb_layer_index_decode(f->enc, f->n, f->b.digest, f->digest, &out, &err),
			 0);
	tb_layer_index_free(out);
}

/* Every prefix of the encoding refused (unpinned: the decoder itself). */
static void test_truncated(void **state)
{
	fixture_t *f = *state;
	tb_layer_index_t *out;
	tb_error_t err;
	size_t step = f->n / 3000 + 1;
	for (size_t n = 0; n < f->n; n += (n < 200 ? 1 : step)) {
		assert_int_equal(tb_layer_index_decode(f->enc, n, NULL, NULL, &out, &err),
				 TB_EINVAL);
		assert_null(out);
	}
	uint8_t *more = malloc(f->n + 1);
	memcpy(more, f->enc, f->n);
	more[f->n] = 0;
	assert_int_equal(tb_layer_index_decode(more, f->n + 1, NULL, NULL, &out, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "after the index"));
	free(more);
}

static void test_garbled(void **state)
{
	fixture_t *f = *state;
	tb_layer_index_t *out;
	tb_error_t err;
	f->enc[0] ^= 1;
	assert_int_equal(tb_layer_index_decode(f->enc, f->n, NULL, NULL, &out, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "no magic"));
	f->enc[0] ^= 1;
	f->enc[8] = 3; /* a later version */
	assert_int_equal(tb_layer_index_decode(f->enc, f->n, NULL, NULL, &out, &err), TB_EVERSION);
	f->enc[8] = 2;
	/* every single byte flipped in turn: refused or decoded, never a crash */
	for (size_t i = 0; i < f->n; i += f->n / 2000 + 1) {
		f->enc[i] ^= 0x5a;
		if (tb_layer_index_decode(f->enc, f->n, NULL, NULL, &out, &err) == 0)
			tb_layer_index_free(out);
		f->enc[i] ^= 0x5a;
	}
}

static void test_points_out_of_order(void **state)
{
	fixture_t *f = *state;
	tb_layer_point_t *p = f->ix->points;
	uint64_t o = p[2].out;
	p[2].out = p[1].out;
	refused(f->ix, f->b.digest, "point 2 is out of order");
	p[2].out = o;
	o = p[2].in;
	p[2].in = p[1].in;
	p[2].bits = p[1].bits;
	refused(f->ix, f->b.digest, "out of order");
	p[2].in = o;
	p[2].in = f->ix->layer_size + 10;
	refused(f->ix, f->b.digest, "past the layer");
	p[2].in = o;
	uint32_t w = p[0].wsize;
	p[0].wsize = 7;
	refused(f->ix, f->b.digest, "window");
	p[0].wsize = w;
}

static void test_entry_past_stream(void **state)
{
	fixture_t *f = *state;
	tb_layer_entry_t *e = &f->ix->entries[1];
	uint64_t size = e->size, off = e->offset;
	e->size = f->ix->total_out;
	refused(f->ix, f->b.digest, "past the stream");
	e->size = size;
	e->offset = off + 1;
	refused(f->ix, f->b.digest, "out of place");
	e->offset = f->ix->entries[0].offset;
	refused(f->ix, f->b.digest, "out of place");
	e->offset = off;
	uint8_t t = e->type;
	e->type = TB_LAYER_TYPES;
	refused(f->ix, f->b.digest, "an entry of type");
	e->type = t;
}

/* A time before the epoch, past the year 9999, or nanoseconds past a
 * second: refused. The last second of 9999 is fine. */
static void test_time_out_of_range(void **state)
{
	fixture_t *f = *state;
	tb_layer_entry_t *e = &f->ix->entries[1];
	e->mtime = -1;
	refused(f->ix, f->b.digest, "modified at");
	e->mtime = TB_LAYER_INDEX_MTIME_MAX + 1;
	refused(f->ix, f->b.digest, "modified at");
	e->mtime = TB_LAYER_INDEX_MTIME_MAX;
	e->mtime_ns = 1000000000;
	refused(f->ix, f->b.digest, "modified at");
	e->mtime_ns = 999999999;
	tb_layer_index_free(round_trip(f->ix));
}

/* Version 1, the encoding before times, written as it was: refused with
 * the reason (a tree served from it would not have the layer's times),
 * so the layer is pulled whole. */
static void put_v1(uint8_t **w, uint64_t v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		*(*w)++ = (uint8_t)(v >> (8 * i));
}

static void put_v1_str(uint8_t **w, const char *s)
{
	put_v1(w, strlen(s), 2);
	memcpy(*w, s, strlen(s));
	*w += strlen(s);
}

static void test_version_1_refused(void **state)
{
	fixture_t *f = *state;
	const tb_layer_index_t *ix = f->ix;
	uint8_t *v1 = malloc(f->n), *w = v1; /* v1 is shorter: no times */
	memcpy(w, "TBLAYIX\n", 8);
	w += 8;
	put_v1(&w, 1, 2);
	put_v1_str(&w, ix->layer);
	put_v1(&w, ix->layer_size, 8);
	put_v1(&w, ix->total_out, 8);
	put_v1(&w, ix->span, 8);
	put_v1(&w, ix->npoints, 4);
	put_v1(&w, ix->nentries, 4);
	for (size_t i = 0; i < ix->npoints; i++) {
		const tb_layer_point_t *p = &ix->points[i];
		put_v1(&w, p->in, 8);
		put_v1(&w, p->out, 8);
		put_v1(&w, p->bits, 1);
		put_v1(&w, p->wsize, 4);
		put_v1(&w, p->wlen, 4);
		memcpy(w, p->window, p->wlen);
		memcpy(w + p->wlen, p->span_sha, 32);
		w += p->wlen + 32;
	}
	for (size_t i = 0; i < ix->nentries; i++) {
		const tb_layer_entry_t *e = &ix->entries[i];
		put_v1(&w, e->type, 1);
		put_v1(&w, e->mode, 4);
		put_v1(&w, e->uid, 4);
		put_v1(&w, e->gid, 4);
		put_v1(&w, e->size, 8);
		put_v1(&w, e->offset, 8);
		put_v1_str(&w, e->path);
		put_v1_str(&w, e->link);
	}
	assert_int_equal((size_t)(w - v1), f->n - 12 * ix->nentries);
	tb_layer_index_t *out = (tb_layer_index_t *)1;
	tb_error_t err;
	assert_int_equal(tb_layer_index_decode(v1, (size_t)(w - v1), ix->layer, NULL, &out, &err),
			 TB_EINVAL);
	assert_null(out);
	if (!strstr(err.msg, "version 1, which records no file times"))
		fail_msg("'%s' does not say why", err.msg);
	free(v1);
}

/* A read past the stream is refused; one of no bytes is fine. */
static void test_range_past_stream(void **state)
{
	fixture_t *f = *state;
	uint8_t buf[8];
	tb_error_t err;
	assert_int_equal(
	    tb_layer_index_read(f->ix, blob_fetch, &f->b, f->ix->total_out - 4, buf, 8, &err),
	    TB_EINVAL);
	assert_non_null(strstr(err.msg, "past its stream"));
	assert_int_equal(
	    tb_layer_index_read(f->ix, blob_fetch, &f->b, f->ix->total_out, buf, 0, &err), 0);
}

/* ------------------------------------------------------------ not layers */

static void build_fails(blob_t *b, const char *why)
{
	tb_layer_index_t *ix = (tb_layer_index_t *)1;
	tb_error_t err;
	unsigned char sum[32];
	EVP_Digest(b->p, b->n, sum, NULL, EVP_sha256(), NULL);
	memcpy(b->digest, "sha256:", 7);
	tb_hex(b->digest + 7, sum, sizeof(sum));
	b->at = 0;
	assert_true(tb_layer_index_build(b->digest, SPAN, blob_read, b, &ix, &err) < 0);
	assert_null(ix);
	if (!strstr(err.msg, why))
		fail_msg("'%s' does not say '%s'", err.msg, why);
}

static void test_not_layers(void **state)
{
	(void)state;
	size_t n, len;
	const spec_t *s = typical(&n);
	uint8_t *tar = make_tar(s, 5, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, &len);
	blob_t b = { 0 };
	gzip_into(&b, tar, len, 1);
	b.n -= 100; /* truncated */
	build_fails(&b, "ends early");
	b.p[0] = 'x'; /* not gzip */
	build_fails(&b, "does not inflate");
	free(b.p);
	gzip_into(&b, tar, 3000, 1); /* a tar that stops inside an entry */
	build_fails(&b, "ends inside an entry");
	free(b.p);
	tar[600] ^= 0x40; /* a header's checksum no longer matches */
	gzip_into(&b, tar, len, 1);
	build_fails(&b, "checksum");
	free(b.p);
	gzip_into(&b, tar, len, 1);
	b.mode = FAILS;
	build_fails(&b, "the disk is gone");
	free(b.p);
	free(tar);
	tb_layer_index_t *ix;
	tb_error_t err;
	assert_int_equal(tb_layer_index_build("sha256:nope", 0, blob_read, &b, &ix, &err),
			 TB_EINVAL);
	assert_int_equal(tb_layer_index_build(b.digest, 1000, blob_read, &b, &ix, &err), TB_EINVAL);
}

/* A sparse file (pax's GNU.sparse records): not indexed, pulled whole. */
static void test_sparse_refused(void **state)
{
	(void)state;
	size_t cap = 1 << 20, len;
	uint8_t *tar = malloc(cap);
	struct archive *a = archive_write_new();
	struct archive_entry *e = archive_entry_new();
	archive_write_set_format_pax(a);
	archive_write_open_memory(a, tar, cap, &len);
	archive_entry_set_pathname(e, "holes");
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_entry_set_size(e, 1 << 20);
	archive_entry_sparse_add_entry(e, 0, 4096);
	assert_true(archive_write_header(a, e) >= ARCHIVE_WARN);
	archive_write_data(a, tar, 4096);
	archive_entry_free(e);
	archive_write_close(a);
	archive_write_free(a);
	blob_t b = { 0 };
	gzip_into(&b, tar, len, 1);
	build_fails(&b, "sparse");
	free(b.p);
	free(tar);
}

/* A time before the epoch (pax's "-100"): not indexed, pulled whole. */
static void test_time_before_epoch_refused(void **state)
{
	(void)state;
	size_t len;
	const spec_t s[] = { { "negtime", 'f', 10, 0, NULL } };
	uint8_t *tar = make_tar(s, 1, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, &len);
	blob_t b = { 0 };
	gzip_into(&b, tar, len, 1);
	build_fails(&b, "before the epoch");
	free(b.p);
	free(tar);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pax),
		cmocka_unit_test(test_pax_times),
		cmocka_unit_test(test_gnu_long_names),
		cmocka_unit_test(test_ustar_prefix),
		cmocka_unit_test(test_multi_member),
		cmocka_unit_test(test_default_span),
		cmocka_unit_test_setup_teardown(test_span_hash_lies, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fetch_short_or_wrong, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_layer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pinned_digest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
		cmocka_unit_test_setup_teardown(test_garbled, setup, teardown),
		cmocka_unit_test_setup_teardown(test_points_out_of_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_entry_past_stream, setup, teardown),
		cmocka_unit_test_setup_teardown(test_range_past_stream, setup, teardown),
		cmocka_unit_test_setup_teardown(test_time_out_of_range, setup, teardown),
		cmocka_unit_test_setup_teardown(test_version_1_refused, setup, teardown),
		cmocka_unit_test(test_not_layers),
		cmocka_unit_test(test_sparse_refused),
		cmocka_unit_test(test_time_before_epoch_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
