/*
 * test_layer_estargz.c: eStargz layers read natively (worker/image/
 * layer_estargz.h). Layers are made here by tests/tools/estargz-convert
 * (files cut in 4 KiB chunks) from tars libarchive writes, then read by
 * range: the entries equal what libarchive reads of the same layer as a
 * plain gzip tar (which it is) and what the gzip index lists of it,
 * every file's bytes equal; reading one small file fetches the footer,
 * the TOC and that file's one member, no more. Hostile cases refused
 * with a reason: a TOC digest not the annotated one, or none; TOCs that
 * lie (a chunk outside the blob, chunks overlapping, a chunk digest
 * that does not match: that read fails naming the chunk); a truncated
 * footer; a TOC too big.
 */
#include "layer_estargz.h"
#include "oci.h"

#include <archive.h>
#include <archive_entry.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "layer_testlib.h"

#include "tb/encoding.h"

#define CHUNK 4096

/* The converter: tests/tools/estargz-convert, or the reference's
 * (tests/tools/estargz-ref, built by the test's reference run), whose
 * layers also hold a landmark file (.no.prefetch.landmark, one byte). */
static const char *reference;

typedef struct spec {
	const char *path;
	char type; /* 'f' file, 'd' dir, 'l' symlink, 'h' hard link */
	size_t size;
	const char *link;
} spec_t;

static const spec_t files[] = {
	{ "etc/", 'd', 0, NULL },
	{ "etc/passwd", 'f', 300, NULL },
	{ "usr/lib/big.so", 'f', 5 * CHUNK + 123, NULL }, /* six chunks */
	{ "usr/lib/exact", 'f', 2 * CHUNK, NULL },        /* two, exactly */
	{ "etc/alias", 'l', 0, "../usr/lib/big.so" },
	{ "etc/hard", 'h', 0, "usr/lib/big.so" },
	{ "etc/.wh.gone", 'f', 0, NULL },
	{ "empty", 'f', 0, NULL },
	{ "small", 'f', 17, NULL },
	{ "bigid", 'f', 10, NULL },
};
#define NFILES (sizeof(files) / sizeof(files[0]))

/* A layer in memory, fetched by range; each fetch logged. */
typedef struct blob {
	uint8_t *p;
	size_t n;
	uint64_t claimed; /* the size the fetch serves (0: n) */
	int short_by;
	size_t nlog, at; /* at: where a whole read is */
	uint64_t log[64][2];
	char digest[72], toc[72];
} blob_t;

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (uint8_t)("abcdefgh \n"[(x >> 16) % 10] ^ (i % 97 == 0 ? (x >> 8) : 0));
	}
}

static uint8_t *make_tar(size_t *len)
{
	size_t cap = 1 << 20;
	uint8_t *out = malloc(cap);
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	archive_write_open_memory(a, out, cap, len);
	for (size_t i = 0; i < NFILES; i++) {
		const spec_t *s = &files[i];
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, s->path);
		archive_entry_set_uid(e, strstr(s->path, "bigid") ? 3000000 : 1000 + (la_int64_t)i);
		archive_entry_set_gid(e, 2000);
		archive_entry_set_perm(e, s->type == 'd' ? 0755 : 0640);
		archive_entry_set_mtime(e, 1700000000, 0);
		if (s->type == 'h') {
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_hardlink(e, s->link);
		} else if (s->type == 'l') {
			archive_entry_set_filetype(e, AE_IFLNK);
			archive_entry_set_symlink(e, s->link);
		} else {
			archive_entry_set_filetype(e, s->type == 'd' ? AE_IFDIR : AE_IFREG);
			archive_entry_set_size(e, (la_int64_t)s->size);
		}
		assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
		if (s->size) {
			uint8_t *d = malloc(s->size);
			fill(d, s->size, (uint32_t)i);
			assert_int_equal(archive_write_data(a, d, s->size), (la_ssize_t)s->size);
			free(d);
		}
		archive_entry_free(e);
	}
	assert_int_equal(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
	return out;
}

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	rewind(f);
	uint8_t *p = malloc(*n + 1);
	assert_int_equal(fread(p, 1, *n, f), *n);
	p[*n] = 0;
	fclose(f);
	return p;
}

/* The converter run on the test's tar: the layer and its annotations. */
static void convert(blob_t *b)
{
	char dir[] = "/tmp/tb-estargz-XXXXXX", in[64], out[64], js[72], cmd[512];
	size_t len, n;
	assert_non_null(mkdtemp(dir));
	snprintf(in, sizeof(in), "%s/in.tar", dir);
	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(js, sizeof(js), "%s/out.json", dir);
	uint8_t *tar = make_tar(&len);
	FILE *f = fopen(in, "wb");
	assert_int_equal(fwrite(tar, 1, len, f), len);
	fclose(f);
	free(tar);
	if (reference)
		snprintf(cmd, sizeof(cmd), "'%s' --chunk-size %d %s %s", reference, CHUNK, in, out);
	else
		snprintf(cmd, sizeof(cmd),
			 "'%s' '%s/tests/tools/estargz-convert' --chunk-size %d %s %s", TB_PYTHON,
			 TB_SOURCE_DIR, CHUNK, in, out);
	assert_int_equal(system(cmd), 0);
	memset(b, 0, sizeof(*b));
	b->p = slurp(out, &b->n);
	char *desc = (char *)slurp(js, &n);
	json_t *d = json_loads(desc, 0, NULL);
	assert_non_null(d);
	snprintf(b->digest, sizeof(b->digest), "%s",
		 json_string_value(json_object_get(d, "digest")));
	snprintf(b->toc, sizeof(b->toc), "%s",
		 json_string_value(json_object_get(json_object_get(d, "annotations"),
						   TB_ESTARGZ_ANNOTATION_TOC)));
	json_decref(d);
	free(desc);
	unlink(in);
	unlink(out);
	unlink(js);
	rmdir(dir);
}

static int64_t blob_fetch(void *arg, uint64_t off, void *buf, size_t len, tb_error_t *err)
{
	blob_t *b = arg;
	uint64_t size = b->claimed ? b->claimed : b->n;
	(void)err;
	assert_true(off + len <= size);
	if (b->nlog < 64) {
		b->log[b->nlog][0] = off;
		b->log[b->nlog++][1] = len;
	}
	uint64_t base = b->claimed ? b->claimed - b->n : 0; /* a tail served */
	assert_true(off >= base);
	memcpy(buf, b->p + (off - base), len);
	return (int64_t)len - b->short_by;
}

static tb_layer_index_t *open_ok(blob_t *b)
{
	tb_estargz_layer_t l = { b->digest, b->n, b->toc, NULL };
	tb_layer_index_t *ix = NULL;
	tb_error_t err;
	if (tb_estargz_open(&l, blob_fetch, b, &ix, &err))
		fail_msg("open: %s", err.msg);
	return ix;
}

static void open_fails(blob_t *b, int code, const char *why)
{
	tb_estargz_layer_t l = { b->digest, b->claimed ? b->claimed : b->n, b->toc, NULL };
	tb_layer_index_t *ix = (tb_layer_index_t *)1;
	tb_error_t err;
	int rc = tb_estargz_open(&l, blob_fetch, b, &ix, &err);
	if (rc != code || !strstr(err.msg, why))
		fail_msg("open gave %d '%s', not %d '%s'", rc, rc ? err.msg : "", code, why);
	assert_null(ix);
}

/* ------------------------------------------------------------ honest */

static void same_entry(const tb_layer_entry_t *x, const tb_layer_entry_t *y)
{
	assert_string_equal(x->path, y->path);
	assert_string_equal(x->link, y->link);
	assert_int_equal(x->type, y->type);
	assert_int_equal(x->mode, y->mode);
	assert_int_equal(x->uid, y->uid);
	assert_int_equal(x->gid, y->gid);
	assert_int_equal(x->size, y->size);
}

static int64_t blob_read(void *arg, void *buf, size_t len, tb_error_t *err)
{
	blob_t *b = arg;
	(void)err;
	size_t k = b->n - b->at < len ? b->n - b->at : len;
	memcpy(buf, b->p + b->at, k);
	b->at += k;
	return (int64_t)k;
}

/* The entries the gzip index lists of the same blob, read whole. */
static void check_against_gzip_index(blob_t *b, const tb_layer_index_t *ix)
{
	tb_layer_index_t *gz;
	tb_error_t err;
	b->at = 0;
	if (tb_layer_index_build(b->digest, 0, blob_read, b, &gz, &err))
		fail_msg("build: %s", err.msg);
	assert_int_equal(gz->nentries, ix->nentries);
	for (size_t i = 0; i < ix->nentries; i++)
		same_entry(&gz->entries[i], &ix->entries[i]);
	tb_layer_index_free(gz);
}

/* Every entry as libarchive reads the layer as a plain gzip tar, its
 * data equal to the bytes read natively (layer_testlib.h). */
static void check_against_libarchive(blob_t *b, const tb_layer_index_t *ix)
{
	layer_check_against_tar(b->p, b->n, ix, 0, blob_fetch,
				b); /* times below: the TOC's are whole seconds */
}

static void test_read_natively(void **state)
{
	(void)state;
	blob_t b;
	convert(&b);
	tb_layer_index_t *ix = open_ok(&b);
	assert_int_equal(ix->kind, TB_LAYER_INDEX_ESTARGZ);
	size_t landmark = reference ? 1 : 0;
	assert_int_equal(ix->nentries, NFILES + 1 + landmark);
	assert_string_equal(ix->entries[ix->nentries - 1].path, TB_ESTARGZ_TOC_NAME);
	/* big.so 6, exact 2, passwd, small, bigid 1 each, and the TOC */
	assert_int_equal(ix->npoints, 6 + 2 + 3 + 1 + landmark);
	check_against_libarchive(&b, ix);
	check_against_gzip_index(&b, ix);
	/* times: the TOC's modtime, whole seconds (the tar's are whole here) */
	for (size_t i = 0; i + 1 < ix->nentries; i++)
		if (strcmp(ix->entries[i].path, ".no.prefetch.landmark")) {
			assert_int_equal(ix->entries[i].mtime, 1700000000);
			assert_int_equal(ix->entries[i].mtime_ns, 0);
		}
	/* a range across chunks and files */
	uint8_t buf[3 * CHUNK];
	tb_error_t err;
	assert_int_equal(tb_layer_index_read(ix, blob_fetch, &b, 100, buf, sizeof(buf), &err), 0);
	/* never encoded */
	uint8_t *d;
	size_t n;
	char g[72];
	assert_int_equal(tb_layer_index_encode(ix, &d, &n, g, &err), TB_EINVAL);
	tb_layer_index_free(ix);
	free(b.p);
}

/* The entry named @p path. */
static const tb_layer_entry_t *entry(const tb_layer_index_t *ix, const char *path)
{
	for (size_t i = 0; i < ix->nentries; i++)
		if (!strcmp(ix->entries[i].path, path))
			return &ix->entries[i];
	fail_msg("no entry %s", path);
	return NULL;
}

static void test_fetches_only_what_it_reads(void **state)
{
	(void)state;
	blob_t b;
	convert(&b);
	tb_layer_index_t *ix = open_ok(&b);
	/* the footer, then the TOC's member to the footer */
	assert_int_equal(b.nlog, 2);
	assert_int_equal(b.log[0][0], b.n - TB_ESTARGZ_FOOTER);
	assert_int_equal(b.log[0][1], TB_ESTARGZ_FOOTER);
	assert_int_equal(b.log[1][0] + b.log[1][1], b.n - TB_ESTARGZ_FOOTER);
	const tb_layer_entry_t *e = entry(ix, "small");
	uint8_t buf[17], want[17];
	tb_error_t err;
	assert_int_equal(tb_layer_index_read(ix, blob_fetch, &b, e->offset, buf, 17, &err), 0);
	fill(want, 17, 8);
	assert_memory_equal(buf, want, 17);
	/* one range more: that file's one member, to the next chunk's */
	assert_int_equal(b.nlog, 3);
	size_t i = 0;
	while (ix->points[i].out != e->offset)
		i++;
	uint64_t from, to;
	tb_layer_index_span(ix, i, &from, &to);
	assert_int_equal(b.log[2][0], from);
	assert_int_equal(b.log[2][1], to - from);
	assert_true(to - from < 200);
	/* the last 10 bytes of big.so: only its last chunk's member */
	e = entry(ix, "usr/lib/big.so");
	assert_int_equal(
	    tb_layer_index_read(ix, blob_fetch, &b, e->offset + e->size - 10, buf, 10, &err), 0);
	assert_int_equal(b.nlog, 4);
	tb_layer_index_free(ix);
	free(b.p);
}

/* ------------------------------------------------------------ hostile */

static void test_toc_digest(void **state)
{
	(void)state;
	blob_t b;
	convert(&b);
	b.toc[20] = b.toc[20] == '0' ? '1' : '0';
	open_fails(&b, TB_EINVAL, "as its manifest annotates");
	b.toc[0] = 0;
	snprintf(b.toc, sizeof(b.toc), "md5:nope");
	open_fails(&b, TB_EINVAL, "is not a sha256 digest");
	tb_estargz_layer_t l = { b.digest, b.n, NULL, NULL };
	tb_layer_index_t *ix;
	tb_error_t err;
	assert_int_equal(tb_estargz_open(&l, blob_fetch, &b, &ix, &err), TB_ENOTFOUND);
	assert_non_null(strstr(err.msg, TB_ESTARGZ_ANNOTATION_TOC));
	free(b.p);
}

/* The TOC's JSON of @p b, inflated from its member. */
static json_t *toc_of(blob_t *b, uint64_t *toc_off)
{
	char hex[17];
	memcpy(hex, b->p + b->n - TB_ESTARGZ_FOOTER + 16, 16);
	hex[16] = 0;
	*toc_off = strtoull(hex, NULL, 16);
	uint8_t *tar = malloc(1 << 20);
	uLongf n = 1 << 20;
	z_stream z = { 0 };
	inflateInit2(&z, 31);
	z.next_in = b->p + *toc_off;
	z.avail_in = (uInt)(b->n - *toc_off);
	z.next_out = tar;
	z.avail_out = (uInt)n;
	assert_int_equal(inflate(&z, Z_FINISH), Z_STREAM_END);
	inflateEnd(&z);
	json_t *j = json_loads((char *)tar + 512, JSON_DISABLE_EOF_CHECK, NULL);
	assert_non_null(j);
	free(tar);
	return j;
}

/* @p b's TOC replaced by @p toc (a new member and footer, the annotation
 * its digest: a TOC the image's author made lie). */
static void retoc(blob_t *b, json_t *toc, uint64_t toc_off)
{
	char *js = json_dumps(toc, JSON_COMPACT);
	size_t jn = strlen(js), tlen, cap = jn + 4096;
	uint8_t *tar = calloc(1, cap), sum[32];
	struct archive *a = archive_write_new();
	struct archive_entry *e = archive_entry_new();
	archive_write_set_format_ustar(a);
	archive_write_set_bytes_in_last_block(a, 1);
	archive_write_open_memory(a, tar, cap, &tlen);
	archive_entry_set_pathname(e, TB_ESTARGZ_TOC_NAME);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_size(e, (la_int64_t)jn);
	archive_write_header(a, e);
	archive_write_data(a, js, jn);
	archive_write_close(a);
	archive_write_free(a);
	archive_entry_free(e);
	uint8_t *p = malloc(toc_off + cap + 64);
	memcpy(p, b->p, toc_off);
	z_stream z = { 0 };
	deflateInit2(&z, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY);
	z.next_in = tar;
	z.avail_in = (uInt)tlen;
	z.next_out = p + toc_off;
	z.avail_out = (uInt)(cap + 64 - 51);
	assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
	size_t n = toc_off + z.total_out;
	deflateEnd(&z);
	memcpy(p + n, b->p + b->n - TB_ESTARGZ_FOOTER, TB_ESTARGZ_FOOTER);
	b->n = n + TB_ESTARGZ_FOOTER;
	free(b->p);
	b->p = p;
	EVP_Digest(js, jn, sum, NULL, EVP_sha256(), NULL);
	memcpy(b->toc, "sha256:", 7);
	tb_hex(b->toc + 7, sum, 32);
	EVP_Digest(b->p, b->n, sum, NULL, EVP_sha256(), NULL);
	tb_hex(b->digest + 7, sum, 32);
	free(js);
	free(tar);
}

/* The TOC entry @p i's field @p key set to @p v; the TOC put back. */
static void lie(blob_t *b, size_t i, const char *key, json_t *v)
{
	uint64_t off;
	json_t *toc = toc_of(b, &off);
	json_object_set_new(json_array_get(json_object_get(toc, "entries"), i), key, v);
	retoc(b, toc, off);
	json_decref(toc);
}

/* The index of the TOC entry of big.so's chunk @p k (0: its "reg"). */
static size_t big_chunk(blob_t *b, size_t k)
{
	uint64_t off;
	json_t *toc = toc_of(b, &off), *es = json_object_get(toc, "entries");
	size_t i = 0;
	while (strcmp(json_string_value(json_object_get(json_array_get(es, i), "name")),
		      "usr/lib/big.so"))
		i++;
	json_decref(toc);
	return i + k;
}

static json_t *offset_of(blob_t *b, size_t i)
{
	uint64_t off;
	json_t *toc = toc_of(b, &off);
	json_t *v = json_incref(
	    json_object_get(json_array_get(json_object_get(toc, "entries"), i), "offset"));
	json_decref(toc);
	return v;
}

static void test_toc_lies(void **state)
{
	(void)state;
	blob_t b;
	uint64_t off;
	convert(&b);
	size_t i = big_chunk(&b, 2);
	json_decref(toc_of(&b, &off));
	lie(&b, i, "offset", json_integer((json_int_t)b.n)); /* past the blob */
	open_fails(&b, TB_EINVAL, "outside the blob");
	free(b.p);

	convert(&b);
	lie(&b, i, "offset", offset_of(&b, i - 1)); /* the chunk before's member */
	open_fails(&b, TB_EINVAL, "chunks overlap");
	free(b.p);

	convert(&b);
	lie(&b, i, "chunkOffset", json_integer(CHUNK * 3)); /* a hole */
	open_fails(&b, TB_EINVAL, "where 8192 was next");
	free(b.p);

	convert(&b);
	lie(&b, i, "chunkSize", json_integer(CHUNK * 9)); /* past the file */
	open_fails(&b, TB_EINVAL, "has a chunk of");
	free(b.p);

	convert(&b);
	lie(&b, big_chunk(&b, 5), "type", json_string("dir")); /* the file cut short */
	open_fails(&b, TB_EINVAL, "chunks missing");
	free(b.p);

	convert(&b);
	lie(&b, i, "innerOffset", json_integer(10));
	open_fails(&b, TB_EINVAL, "innerOffset");
	free(b.p);

	convert(&b);
	lie(&b, 0, "name", json_string(""));
	open_fails(&b, TB_EINVAL, "'name'");
	free(b.p);
}

/* A chunk whose digest is not its bytes': its reads fail naming it,
 * with no byte; other files still read. */
static void test_chunk_digest_lies(void **state)
{
	(void)state;
	blob_t b;
	convert(&b);
	size_t i = big_chunk(&b, 3);
	char bad[72];
	snprintf(bad, sizeof(bad), "sha256:%064d", 7);
	lie(&b, i, "chunkDigest", json_string(bad));
	tb_layer_index_t *ix = open_ok(&b);
	const tb_layer_entry_t *e = entry(ix, "usr/lib/big.so");
	uint8_t buf[CHUNK], mark[CHUNK];
	tb_error_t err;
	memset(buf, 0xaa, sizeof(buf));
	memset(mark, 0xaa, sizeof(mark));
	int rc = tb_layer_index_read(ix, blob_fetch, &b, e->offset + 3 * CHUNK + 5, buf, 100, &err);
	assert_int_equal(rc, TB_EINVAL);
	if (!strstr(err.msg, "of 'usr/lib/big.so'") || !strstr(err.msg, "does not match") ||
	    !strstr(err.msg, b.digest))
		fail_msg("'%s' does not name the chunk", err.msg);
	assert_memory_equal(buf, mark, sizeof(buf));
	/* a read that starts in a good chunk fails as well when it reaches it */
	rc = tb_layer_index_read(ix, blob_fetch, &b, e->offset + 3 * CHUNK - 10, buf, 20, &err);
	assert_int_equal(rc, TB_EINVAL);
	assert_int_equal(tb_layer_index_read(ix, blob_fetch, &b, e->offset, buf, CHUNK, &err), 0);
	/* the span check a cache would make says the same */
	size_t k = 0;
	while (ix->points[k].out != e->offset + 3 * CHUNK)
		k++;
	uint64_t from, to;
	tb_layer_index_span(ix, k, &from, &to);
	assert_int_equal(tb_layer_index_check_span(ix, k, b.p + from, to - from, &err), TB_EINVAL);
	tb_layer_index_span(ix, k - 1, &from, &to);
	assert_int_equal(tb_layer_index_check_span(ix, k - 1, b.p + from, to - from, &err), 0);
	tb_layer_index_free(ix);
	free(b.p);
}

static void test_footer_truncated(void **state)
{
	(void)state;
	blob_t b;
	convert(&b);
	b.n -= 1; /* the blob cut: its last 51 bytes are not a footer */
	open_fails(&b, TB_EINVAL, "not an eStargz footer");
	b.n += 1;
	b.short_by = 1;
	open_fails(&b, TB_EINVAL, "came back as");
	b.short_by = 0;
	size_t n = b.n;
	b.n = 40;
	open_fails(&b, TB_EINVAL, "too short");
	b.n = n;
	b.p[b.n - 30] = 'x'; /* a digit of the TOC's offset */
	open_fails(&b, TB_EINVAL, "not an eStargz footer");
	free(b.p);
	/* a plain gzip layer, annotated as if it were one */
	convert(&b);
	uLongf cap = compressBound(100000);
	uint8_t *z = malloc(cap), *raw = calloc(1, 100000);
	compress(z, &cap, raw, 100000);
	free(b.p);
	b.p = z;
	b.n = cap;
	open_fails(&b, TB_EINVAL, "not an eStargz footer");
	free(raw);
	free(b.p);
}

static void test_toc_too_big(void **state)
{
	(void)state;
	blob_t b;
	convert(&b);
	/* a footer that puts the TOC 100 MiB back: refused before it is fetched */
	uint8_t footer[TB_ESTARGZ_FOOTER];
	memcpy(footer, b.p + b.n - TB_ESTARGZ_FOOTER, sizeof(footer));
	memcpy(footer + 16, "0000000000000000", 16);
	free(b.p);
	b.p = footer;
	b.n = sizeof(footer);
	b.claimed = 100u << 20;
	open_fails(&b, TB_ETOOBIG, "a TOC member of");
	assert_int_equal(b.nlog, 1);
	/* the parser's own bound */
	tb_layer_index_t *ix;
	tb_error_t err;
	assert_int_equal(tb_estargz_toc_parse(b.digest, 1 << 30, 0, footer,
					      TB_ESTARGZ_TOC_BYTES_MAX + 1, &ix, &err),
			 TB_ETOOBIG);
	/* small, but of more values than jansson is let hold */
	size_t n = 2 * (size_t)TB_ESTARGZ_TOC_VALUES_MAX + 2;
	char *many = malloc(n + 1);
	many[0] = '[';
	for (size_t i = 1; i < n - 1; i += 2)
		memcpy(many + i, "1,", 2);
	memcpy(many + n - 1, "1", 2);
	assert_int_equal(tb_estargz_toc_parse(b.digest, 1 << 30, 0, (uint8_t *)many, n, &ix, &err),
			 TB_ETOOBIG);
	assert_non_null(strstr(err.msg, "values"));
	free(many);
}

/* Layer @p b opened within @p budget: its result, the reason in @p err. */
static int open_within(blob_t *b, tb_toc_budget_t *budget, tb_error_t *err)
{
	tb_estargz_layer_t l = { b->digest, b->n, b->toc, budget };
	tb_layer_index_t *ix = NULL;
	int rc = tb_estargz_open(&l, blob_fetch, b, &ix, err);
	assert_true(rc == 0 ? ix != NULL : ix == NULL);
	tb_layer_index_free(ix);
	return rc;
}

/* The image's budget (tb_toc_budget_t): a TOC parsed takes its bytes from
 * it; one of more bytes, or more entries, than it has left is refused,
 * saying so, and takes nothing. */
static void test_toc_within_the_images_budget(void **state)
{
	(void)state;
	blob_t b;
	tb_error_t err;
	convert(&b);
	tb_toc_budget_t budget = { 1u << 30, 1000 };
	assert_int_equal(open_within(&b, &budget, &err), 0);
	uint64_t used = (1u << 30) - budget.bytes;
	assert_true(used > 0);
	assert_int_equal(budget.entries, 1000); /* the caller's to take */

	budget.bytes = used - 1;
	assert_int_equal(open_within(&b, &budget, &err), TB_ETOOBIG);
	assert_non_null(strstr(err.msg, "the image's layers have left of theirs together"));
	assert_int_equal(budget.bytes, used - 1);

	budget = (tb_toc_budget_t){ used, 2 };
	assert_int_equal(open_within(&b, &budget, &err), TB_ETOOBIG);
	assert_non_null(strstr(err.msg, "entries, past the 2 the image's layers have left"));
	assert_int_equal(budget.bytes, used);

	budget.entries = 1000;
	assert_int_equal(open_within(&b, &budget, &err), 0);
	assert_int_equal(budget.bytes, 0);
	free(b.p);
}

/* A TOC member that inflates past the bound (zeros: a bomb). */
static void test_toc_bomb(void **state)
{
	(void)state;
	blob_t b;
	convert(&b);
	uint64_t off;
	json_decref(toc_of(&b, &off));
	size_t raw = TB_ESTARGZ_TOC_BYTES_MAX + (1u << 20);
	uint8_t *zeros = calloc(1, raw), *p = malloc(off + (1u << 20));
	memcpy(p, b.p, off);
	z_stream z = { 0 };
	deflateInit2(&z, 9, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY);
	z.next_in = zeros;
	z.avail_in = (uInt)raw;
	z.next_out = p + off;
	z.avail_out = 1u << 20;
	assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
	size_t n = off + z.total_out;
	deflateEnd(&z);
	memcpy(p + n, b.p + b.n - TB_ESTARGZ_FOOTER, TB_ESTARGZ_FOOTER);
	free(b.p);
	b.p = p;
	b.n = n + TB_ESTARGZ_FOOTER;
	open_fails(&b, TB_ETOOBIG, "a TOC of more than");
	free(zeros);
	free(b.p);
}

/* The manifest's annotation reaches the layer's descriptor: only on a
 * gzip layer, only a sha256 digest. */
static void test_manifest_annotation(void **state)
{
	(void)state;
	static const char doc[] =
	    "{\"schemaVersion\": 2, \"mediaType\": \"application/vnd.oci.image.manifest.v1+json\","
	    " \"config\": {\"mediaType\": \"application/vnd.oci.image.config.v1+json\", "
	    "\"digest\": "
	    "\"sha256:1111111111111111111111111111111111111111111111111111111111111111\", "
	    "\"size\": 2},"
	    " \"layers\": ["
	    "{\"mediaType\": \"application/vnd.oci.image.layer.v1.tar+gzip\", \"size\": 9, "
	    "\"digest\": "
	    "\"sha256:2222222222222222222222222222222222222222222222222222222222222222\", "
	    "\"annotations\": {\"containerd.io/snapshot/stargz/toc.digest\": "
	    "\"sha256:3333333333333333333333333333333333333333333333333333333333333333\"}},"
	    "{\"mediaType\": \"application/vnd.oci.image.layer.v1.tar+gzip\", \"size\": 9, "
	    "\"digest\": "
	    "\"sha256:2222222222222222222222222222222222222222222222222222222222222222\", "
	    "\"annotations\": {\"containerd.io/snapshot/stargz/toc.digest\": \"md5:x\"}},"
	    "{\"mediaType\": \"application/vnd.oci.image.layer.v1.tar\", \"size\": 9, \"digest\": "
	    "\"sha256:2222222222222222222222222222222222222222222222222222222222222222\", "
	    "\"annotations\": {\"containerd.io/snapshot/stargz/toc.digest\": "
	    "\"sha256:3333333333333333333333333333333333333333333333333333333333333333\"}}]}";
	tb_oci_manifest_t *m = malloc(sizeof(*m));
	tb_error_t err;
	if (tb_oci_manifest(m, doc, strlen(doc), &err))
		fail_msg("manifest: %s", err.msg);
	assert_int_equal(m->nlayers, 3);
	assert_string_equal(
	    m->layers[0].toc_digest,
	    "sha256:3333333333333333333333333333333333333333333333333333333333333333");
	assert_string_equal(m->layers[1].toc_digest, "");
	assert_string_equal(m->layers[2].toc_digest, "");
	free(m);
}

/* argv[1]: the reference's converter, instead of the test's own. */
int main(int argc, char **argv)
{
	reference = argc > 1 ? argv[1] : NULL;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_natively),
		cmocka_unit_test(test_fetches_only_what_it_reads),
		cmocka_unit_test(test_toc_digest),
		cmocka_unit_test(test_toc_lies),
		cmocka_unit_test(test_chunk_digest_lies),
		cmocka_unit_test(test_footer_truncated),
		cmocka_unit_test(test_toc_too_big),
		cmocka_unit_test(test_toc_bomb),
		cmocka_unit_test(test_toc_within_the_images_budget),
		cmocka_unit_test(test_manifest_annotation),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
