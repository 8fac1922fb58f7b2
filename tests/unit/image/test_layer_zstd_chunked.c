/*
 * test_layer_zstd_chunked.c: zstd:chunked layers read natively
 * (worker/image/layer_zstd_chunked.h). Layers are made here by
 * tests/tools/zstd-chunked-convert (files cut in 4 KiB chunks, each a
 * zstd frame) from tars libarchive writes, then read by range: the
 * entries equal what libarchive reads of the same layer as a plain zstd
 * tar (which it is), every file's bytes equal; opening fetches the TOC's
 * one range, reading one small file its one frame more. Hostile cases
 * refused with a reason: a checksum not the annotated one, annotations
 * missing or malformed, a TOC that does not decompress to its length,
 * TOCs that lie (a chunk past the TOC, chunks out of order, a chunk
 * digest that does not match: that read fails naming the chunk), frames
 * that end before their chunk does.
 */
#include "layer_zstd_chunked.h"
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
#include <zstd.h>

#include <cmocka.h>

#include "layer_testlib.h"

#include "tb/encoding.h"

#define CHUNK 4096
#ifndef TB_PYTHON
#define TB_PYTHON "python3"
#endif

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
};
#define NFILES (sizeof(files) / sizeof(files[0]))

/* A layer in memory, fetched by range; each fetch logged. */
typedef struct blob {
	uint8_t *p;
	size_t n;
	size_t nlog;
	uint64_t log[64][2];
	char digest[72], checksum[72], position[96];
} blob_t;

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (uint8_t)("abcdefgh \n"[(x >> 16) % 10] ^ (i % 97 == 0 ? (x >> 8) : 0));
	}
}

static void add(struct archive *a, const spec_t *s, uint32_t seed)
{
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, s->path);
	archive_entry_set_uid(e, 1000 + seed);
	archive_entry_set_gid(e, 2000);
	archive_entry_set_perm(e, s->type == 'd' ? 0755 : 0640);
	archive_entry_set_mtime(e, 1700000000 + seed, 123456789 * (seed % 2)); /* pax: its ns */
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
		fill(d, s->size, seed);
		assert_int_equal(archive_write_data(a, d, s->size), (la_ssize_t)s->size);
		free(d);
	}
	archive_entry_free(e);
}

static void write_tar(const char *path)
{
	size_t cap = 1 << 20, len;
	uint8_t *out = malloc(cap);
	struct archive *a = archive_write_new();
	archive_write_set_format_pax(a);
	archive_write_open_memory(a, out, cap, &len);
	for (size_t i = 0; i < NFILES; i++)
		add(a, &files[i], (uint32_t)i);
	assert_int_equal(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
	FILE *f = fopen(path, "wb");
	assert_int_equal(fwrite(out, 1, len, f), len);
	fclose(f);
	free(out);
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
	fclose(f);
	return p;
}

static void set_digest(blob_t *b)
{
	unsigned char sum[32];
	EVP_Digest(b->p, b->n, sum, NULL, EVP_sha256(), NULL);
	memcpy(b->digest, "sha256:", 7);
	tb_hex(b->digest + 7, sum, 32);
}

/* The converter run on the test's tar (with @p options): the layer and
 * its annotations. */
static void convert(blob_t *b, const char *options)
{
	char dir[] = "/tmp/tb-zstdchunked-XXXXXX", in[64], out[64], js[72], cmd[512];
	size_t n;
	assert_non_null(mkdtemp(dir));
	snprintf(in, sizeof(in), "%s/in.tar", dir);
	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(js, sizeof(js), "%s/out.json", dir);
	write_tar(in);
	snprintf(cmd, sizeof(cmd),
		 "'%s' '%s/tests/tools/zstd-chunked-convert' --chunk-size %d %s %s %s", TB_PYTHON,
		 TB_SOURCE_DIR, CHUNK, options, in, out);
	assert_int_equal(system(cmd), 0);
	memset(b, 0, sizeof(*b));
	b->p = slurp(out, &b->n);
	char *desc = (char *)slurp(js, &n);
	json_t *d = json_loadb(desc, n, 0, NULL), *notes = json_object_get(d, "annotations");
	assert_non_null(d);
	snprintf(b->digest, sizeof(b->digest), "%s",
		 json_string_value(json_object_get(d, "digest")));
	snprintf(b->checksum, sizeof(b->checksum), "%s",
		 json_string_value(json_object_get(notes, TB_ZSTD_CHUNKED_ANNOTATION_CHECKSUM)));
	snprintf(b->position, sizeof(b->position), "%s",
		 json_string_value(json_object_get(notes, TB_ZSTD_CHUNKED_ANNOTATION_POSITION)));
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
	(void)err;
	assert_true(off + len <= b->n);
	if (b->nlog < 64) {
		b->log[b->nlog][0] = off;
		b->log[b->nlog++][1] = len;
	}
	memcpy(buf, b->p + off, len);
	return (int64_t)len;
}

static int open_layer(blob_t *b, tb_layer_index_t **ix, tb_error_t *err)
{
	tb_zstd_chunked_layer_t l = { b->digest, b->n, b->checksum, b->position, NULL };
	return tb_zstd_chunked_open(&l, blob_fetch, b, ix, err);
}

static tb_layer_index_t *open_ok(blob_t *b)
{
	tb_layer_index_t *ix = NULL;
	tb_error_t err;
	if (open_layer(b, &ix, &err))
		fail_msg("open: %s", err.msg);
	return ix;
}

static void open_fails(blob_t *b, int code, const char *why)
{
	tb_layer_index_t *ix = (tb_layer_index_t *)1;
	tb_error_t err;
	int rc = open_layer(b, &ix, &err);
	if (rc != code || !strstr(err.msg, why))
		fail_msg("open gave %d '%s', not %d '%s'", rc, rc ? err.msg : "", code, why);
	assert_null(ix);
}

static const tb_layer_entry_t *entry(const tb_layer_index_t *ix, const char *path)
{
	for (size_t i = 0; i < ix->nentries; i++)
		if (!strcmp(ix->entries[i].path, path))
			return &ix->entries[i];
	fail_msg("no entry %s", path);
	return NULL;
}

/* ------------------------------------------------------------ honest */

static void test_read_natively(void **state)
{
	(void)state;
	blob_t b;
	convert(&b, "");
	tb_layer_index_t *ix = open_ok(&b);
	assert_int_equal(ix->kind, TB_LAYER_INDEX_ZSTD_CHUNKED);
	assert_int_equal(ix->nentries, NFILES); /* the TOC is no file of it */
	/* big.so 6, exact 2, passwd and small 1 each */
	assert_int_equal(ix->npoints, 6 + 2 + 1 + 1);
	for (size_t i = 0; i < ix->npoints; i++)
		assert_int_equal(ix->points[i].kind, TB_LAYER_POINT_ZSTD);
	layer_check_against_tar(b.p, b.n, ix, LAYER_CHECK_TIMES, blob_fetch, &b);
	uint8_t buf[3 * CHUNK];
	tb_error_t err;
	assert_int_equal(tb_layer_index_read(ix, blob_fetch, &b, 100, buf, sizeof(buf), &err), 0);
	uint8_t *d;
	size_t n;
	char g[72];
	assert_int_equal(tb_layer_index_encode(ix, &d, &n, g, &err), TB_EINVAL);
	tb_layer_index_free(ix);
	free(b.p);
}

static void test_fetches_only_what_it_reads(void **state)
{
	(void)state;
	blob_t b;
	convert(&b, "");
	tb_layer_index_t *ix = open_ok(&b);
	assert_int_equal(b.nlog, 1); /* the TOC's skippable frame */
	const tb_layer_entry_t *e = entry(ix, "small");
	uint8_t buf[17], want[17];
	tb_error_t err;
	assert_int_equal(tb_layer_index_read(ix, blob_fetch, &b, e->offset, buf, 17, &err), 0);
	fill(want, 17, 8);
	assert_memory_equal(buf, want, 17);
	assert_int_equal(b.nlog, 2); /* its frame, to the next chunk's */
	assert_true(b.log[1][1] < 200);
	tb_layer_index_free(ix);
	free(b.p);
}

/* ------------------------------------------------------------ hostile */

static void test_annotations(void **state)
{
	(void)state;
	blob_t b;
	char position[96];
	convert(&b, "");
	snprintf(position, sizeof(position), "%s", b.position);
	b.checksum[20] = b.checksum[20] == '0' ? '1' : '0';
	open_fails(&b, TB_EINVAL, "as its manifest annotates");
	snprintf(b.checksum, sizeof(b.checksum), "md5:x");
	open_fails(&b, TB_EINVAL, "is not a sha256 digest");
	free(b.p);
	convert(&b, "--lie-checksum");
	open_fails(&b, TB_EINVAL, "as its manifest annotates");
	static const char *const bad[] = {
		"1:2:3", "a:b:c:1", "10:20:30:2", "1:2:3:1x", "99999999999999999999:1:1:1", ""
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(b.position, sizeof(b.position), "%s", bad[i]);
		open_fails(&b, TB_EINVAL, "is not offset:length:length:1");
	}
	snprintf(b.position, sizeof(b.position), "%zu:10:10:1", b.n); /* past the end */
	open_fails(&b, TB_EINVAL, "is not inside");
	snprintf(b.position, sizeof(b.position), "8:999999999:10:1");
	open_fails(&b, TB_ETOOBIG, "at most");
	tb_zstd_chunked_layer_t l = { b.digest, b.n, NULL, position, NULL };
	tb_layer_index_t *ix;
	tb_error_t err;
	assert_int_equal(tb_zstd_chunked_open(&l, blob_fetch, &b, &ix, &err), TB_ENOTFOUND);
	free(b.p);
}

/* The TOC's offset, length and uncompressed length from the position. */
static void position_of(const blob_t *b, uint64_t *off, uint64_t *len, uint64_t *ulen)
{
	unsigned long long o, l, u;
	assert_int_equal(sscanf(b->position, "%llu:%llu:%llu:1", &o, &l, &u), 3);
	*off = o, *len = l, *ulen = u;
}

/* @p b's TOC replaced by @p toc: a new skippable frame at the same place
 * (the tar-split and footer dropped: nothing reads them), the annotations
 * following it (a TOC the image's author made lie). */
static void retoc(blob_t *b, json_t *toc)
{
	uint64_t off, len, ulen;
	position_of(b, &off, &len, &ulen);
	char *js = json_dumps(toc, JSON_COMPACT);
	size_t jn = strlen(js), cap = ZSTD_compressBound(jn);
	uint8_t *p = malloc(off + cap), sum[32];
	memcpy(p, b->p, off - 8);
	size_t cn = ZSTD_compress(p + off, cap, js, jn, 3);
	assert_false(ZSTD_isError(cn));
	uint8_t head[8] = { 0x50,
			    0x2a,
			    0x4d,
			    0x18,
			    (uint8_t)cn,
			    (uint8_t)(cn >> 8),
			    (uint8_t)(cn >> 16),
			    (uint8_t)(cn >> 24) };
	memcpy(p + off - 8, head, 8);
	free(b->p);
	b->p = p;
	b->n = off + cn;
	EVP_Digest(p + off, cn, sum, NULL, EVP_sha256(), NULL);
	memcpy(b->checksum, "sha256:", 7);
	tb_hex(b->checksum + 7, sum, 32);
	snprintf(b->position, sizeof(b->position), "%llu:%zu:%zu:1", (unsigned long long)off, cn,
		 jn);
	set_digest(b);
	free(js);
}

static json_t *toc_of(const blob_t *b)
{
	uint64_t off, len, ulen;
	position_of(b, &off, &len, &ulen);
	char *js = malloc(ulen + 1);
	assert_int_equal(ZSTD_decompress(js, ulen, b->p + off, len), ulen);
	json_t *j = json_loadb(js, ulen, 0, NULL);
	assert_non_null(j);
	free(js);
	return j;
}

/* TOC entry @p i's field @p key set to @p v; the TOC put back. */
static void lie(blob_t *b, size_t i, const char *key, json_t *v)
{
	json_t *toc = toc_of(b);
	json_object_set_new(json_array_get(json_object_get(toc, "entries"), i), key, v);
	retoc(b, toc);
	json_decref(toc);
}

/* The TOC entry of big.so's chunk @p k (0: its "reg"). */
static size_t big_chunk(const blob_t *b, size_t k)
{
	json_t *toc = toc_of(b), *es = json_object_get(toc, "entries");
	size_t i = 0;
	while (strcmp(json_string_value(json_object_get(json_array_get(es, i), "name")),
		      "usr/lib/big.so"))
		i++;
	json_decref(toc);
	return i + k;
}

static void test_toc_lies(void **state)
{
	(void)state;
	blob_t b;
	uint64_t off, len, ulen;
	convert(&b, "");
	position_of(&b, &off, &len, &ulen);
	lie(&b, big_chunk(&b, 2), "offset", json_integer((json_int_t)off)); /* the TOC's */
	open_fails(&b, TB_EINVAL, "before its TOC");
	free(b.p);
	convert(&b, "");
	lie(&b, big_chunk(&b, 3), "offset", json_integer(1)); /* before the one before */
	open_fails(&b, TB_EINVAL, "out of order");
	free(b.p);
	convert(&b, "");
	lie(&b, big_chunk(&b, 1), "chunkDigest", json_string("sha256:x"));
	open_fails(&b, TB_EINVAL, "not a sha256 digest");
	free(b.p);
	/* a length that is not the TOC's */
	convert(&b, "");
	position_of(&b, &off, &len, &ulen);
	snprintf(b.position, sizeof(b.position), "%llu:%llu:%llu:1", (unsigned long long)off,
		 (unsigned long long)len, (unsigned long long)ulen - 1);
	open_fails(&b, TB_EINVAL, "does not decompress to its");
	free(b.p);
}

/* A TOC's modtime read strictly: RFC 3339 with its fraction and offset;
 * anything else, or a time before 1970, refuses the TOC. */
static void test_modtime(void **state)
{
	(void)state;
	blob_t b;
	convert(&b, "");
	lie(&b, 1, "modtime", json_string("2023-11-14T22:13:20.5+01:00"));
	tb_layer_index_t *ix = open_ok(&b);
	assert_int_equal(ix->entries[1].mtime, 1700000000 - 3600);
	assert_int_equal(ix->entries[1].mtime_ns, 500000000);
	tb_layer_index_free(ix);
	static const char *const bad[] = { "2023-02-29T00:00:00Z",
					   "1969-12-31T23:59:59Z",
					   "2023-11-14T22:13:20.1234567891Z",
					   "2023-11-14 22:13:20Z",
					   "2023-11-14T22:13:20",
					   "2023-11-14T22:13:60Z",
					   "2023-11-14T22:13:20+1:00",
					   "2023-11-14T22:13:20Zjunk",
					   "10000-01-01T00:00:00Z" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		lie(&b, 1, "modtime", json_string(bad[i]));
		open_fails(&b, TB_EINVAL, "'modtime' is not an RFC 3339 time");
	}
	lie(&b, 1, "modtime", json_integer(5));
	open_fails(&b, TB_EINVAL, "'modtime'");
	free(b.p);
}

static void test_chunk_digest_lies(void **state)
{
	(void)state;
	blob_t b;
	tb_error_t err;
	convert(&b, "--lie-digest usr/lib/big.so");
	tb_layer_index_t *ix = open_ok(&b);
	const tb_layer_entry_t *e = entry(ix, "usr/lib/big.so");
	uint8_t buf[100];
	assert_int_equal(tb_layer_index_read(ix, blob_fetch, &b, e->offset + 10, buf, 100, &err),
			 TB_EINVAL);
	if (!strstr(err.msg, "'usr/lib/big.so'") ||
	    !strstr(err.msg, "does not match its digest in the TOC"))
		fail_msg("a lying chunk said: %s", err.msg);
	/* its second chunk is honest */
	assert_int_equal(
	    tb_layer_index_read(ix, blob_fetch, &b, e->offset + CHUNK + 10, buf, 100, &err), 0);
	/* a file of one chunk: its "digest" is the lie */
	tb_layer_index_free(ix);
	free(b.p);
	convert(&b, "--lie-digest small");
	ix = open_ok(&b);
	e = entry(ix, "small");
	assert_int_equal(tb_layer_index_read(ix, blob_fetch, &b, e->offset, buf, 17, &err),
			 TB_EINVAL);
	assert_non_null(strstr(err.msg, "'small'"));
	/* a frame cut short: the next chunk's offset moved into it */
	tb_layer_index_free(ix);
	free(b.p);
	convert(&b, "");
	ix = open_ok(&b);
	e = entry(ix, "usr/lib/big.so");
	size_t i = tb_layer_point_before(ix, e->offset);
	ix->points[i + 1].in = ix->points[i].in + 20;
	assert_int_equal(tb_layer_index_read(ix, blob_fetch, &b, e->offset, buf, 100, &err),
			 TB_EINVAL);
	if (!strstr(err.msg, "ends before the chunk does") && !strstr(err.msg, "decompress"))
		fail_msg("a frame cut short said: %s", err.msg);
	tb_layer_index_free(ix);
	free(b.p);
}

static void test_manifest_annotations(void **state)
{
	(void)state;
	static const char doc[] =
	    "{\"schemaVersion\": 2, \"mediaType\": \"application/vnd.oci.image.manifest.v1+json\","
	    " \"config\": {\"mediaType\": \"application/vnd.oci.image.config.v1+json\", "
	    "\"digest\": "
	    "\"sha256:1111111111111111111111111111111111111111111111111111111111111111\", "
	    "\"size\": 2},"
	    " \"layers\": ["
	    "{\"mediaType\": \"application/vnd.oci.image.layer.v1.tar+zstd\", \"size\": 9, "
	    "\"digest\": "
	    "\"sha256:2222222222222222222222222222222222222222222222222222222222222222\", "
	    "\"annotations\": {\"io.github.containers.zstd-chunked.manifest-checksum\": "
	    "\"sha256:3333333333333333333333333333333333333333333333333333333333333333\", "
	    "\"io.github.containers.zstd-chunked.manifest-position\": \"10:20:30:1\"}},"
	    "{\"mediaType\": \"application/vnd.oci.image.layer.v1.tar+gzip\", \"size\": 9, "
	    "\"digest\": "
	    "\"sha256:2222222222222222222222222222222222222222222222222222222222222222\", "
	    "\"annotations\": {\"io.github.containers.zstd-chunked.manifest-checksum\": "
	    "\"sha256:3333333333333333333333333333333333333333333333333333333333333333\", "
	    "\"io.github.containers.zstd-chunked.manifest-position\": \"10:20:30:1\"}}]}";
	tb_oci_manifest_t *m = malloc(sizeof(*m));
	tb_error_t err;
	if (tb_oci_manifest(m, doc, strlen(doc), &err))
		fail_msg("manifest: %s", err.msg);
	assert_int_equal(m->nlayers, 2);
	assert_string_equal(
	    m->layers[0].toc_digest,
	    "sha256:3333333333333333333333333333333333333333333333333333333333333333");
	assert_string_equal(m->layers[0].toc_position, "10:20:30:1");
	assert_string_equal(m->layers[1].toc_digest, ""); /* a gzip layer's: not eStargz's */
	assert_string_equal(m->layers[1].toc_position, "");
	free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_natively),
		cmocka_unit_test(test_fetches_only_what_it_reads),
		cmocka_unit_test(test_annotations),
		cmocka_unit_test(test_toc_lies),
		cmocka_unit_test(test_chunk_digest_lies),
		cmocka_unit_test(test_modtime),
		cmocka_unit_test(test_manifest_annotations),
	};
	if (system("command -v zstd >/dev/null") != 0) {
		printf("SKIP: no zstd command (deploy/local/install-deps test)\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
