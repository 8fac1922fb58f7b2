/*
 * layer_estargz.c: an eStargz layer opened by range (layer_estargz.h):
 * its footer fetched and parsed, then its TOC's member, inflated (its
 * tar header read by the layer index's tar scanner), the TOC's digest
 * checked against the manifest's annotation, the TOC parsed
 * (layer_estargz_toc.c), and stargz.index.json itself added as the
 * index's last entry, its point the TOC's member, checked against that
 * same digest. Reading the chunks is layer_index_member.c's.
 */
#include "layer_estargz.h"
#include "layer_index_int.h"

#include "tb/encoding.h"
#include "tb/image_ref.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* The TOC's member inflated, at most: its JSON and the tar around it. */
#define TOC_TAR_MAX (TB_ESTARGZ_TOC_BYTES_MAX + (64u << 10))

/* What the TOC's member held. */
typedef struct toc {
	uint64_t offset; /* the member's, in the blob */
	uint8_t *tar;    /* the member inflated */
	size_t len;
	tb_layer_entry_t entry; /* stargz.index.json's, offset in `tar` */
	uint8_t sha[32];        /* its JSON's SHA-256 */
} toc_t;

static int fetch_exact(const tb_estargz_layer_t *l, tb_layer_fetch_fn fetch, void *arg,
		       uint64_t off, uint8_t *buf, size_t len, const char *what, tb_error_t *err)
{
	int64_t got = fetch(arg, off, buf, len, err);
	if (got < 0)
		return tb_error_prefix(err, "layer %s: fetch its %s", l->digest, what);
	if ((uint64_t)got != len)
		return tb_error_set(err, TB_EINVAL,
				    "layer %s: its %s (bytes %llu..%llu) came back as %lld bytes",
				    l->digest, what, (unsigned long long)off,
				    (unsigned long long)(off + len), (long long)got);
	return 0;
}

/* The footer's TOC offset: a gzip member with only an extra field,
 * subfield 'SG' of "%016xSTARGZ", and an empty stored block. */
static int parse_footer(const tb_estargz_layer_t *l, const uint8_t *f, uint64_t *toc,
			tb_error_t *err)
{
	static const uint8_t head[] = { 0x1f, 0x8b, 8, 4 }, xhead[] = { 26, 0, 'S', 'G', 22, 0 };
	static const uint8_t tail[] = { 1, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0 };
	uint8_t off[8];
	if (memcmp(f, head, 4) || memcmp(f + 10, xhead, 6) || memcmp(f + 32, "STARGZ", 6) ||
	    memcmp(f + 38, tail, sizeof(tail)) || tb_unhex(off, (const char *)f + 16, 8) < 0)
		return tb_error_set(err, TB_EINVAL,
				    "layer %s: its last %d bytes are not an eStargz footer",
				    l->digest, TB_ESTARGZ_FOOTER);
	*toc = 0;
	for (int i = 0; i < 8; i++)
		*toc = *toc << 8 | off[i];
	if (*toc >= l->size - TB_ESTARGZ_FOOTER)
		return tb_error_set(
		    err, TB_EINVAL,
		    "layer %s: its footer puts the TOC at %llu, past the blob's %llu "
		    "bytes",
		    l->digest, (unsigned long long)*toc, (unsigned long long)l->size);
	if (l->size - TB_ESTARGZ_FOOTER - *toc > TB_ESTARGZ_TOC_BYTES_MAX)
		return tb_error_set(err, TB_ETOOBIG,
				    "layer %s: a TOC member of %llu bytes (at most %u)", l->digest,
				    (unsigned long long)(l->size - TB_ESTARGZ_FOOTER - *toc),
				    TB_ESTARGZ_TOC_BYTES_MAX);
	return 0;
}

/* The TOC's member @p in (@p n bytes) inflated whole into t->tar. */
static int inflate_toc(const tb_estargz_layer_t *l, const uint8_t *in, size_t n, toc_t *t,
		       tb_error_t *err)
{
	z_stream z = { 0 };
	size_t cap = n * 4 + 4096 < TOC_TAR_MAX ? n * 4 + 4096 : TOC_TAR_MAX;
	int zr = Z_MEM_ERROR;
	if (inflateInit2(&z, 31) != Z_OK)
		return tb_error_set(err, TB_ENOMEM, "layer %s: inflate: out of memory", l->digest);
	z.next_in = (uint8_t *)in;
	z.avail_in = (uInt)n;
	int oom = 0;
	for (;;) {
		uint8_t *b = realloc(t->tar, cap);
		if ((oom = !b))
			break;
		t->tar = b;
		z.next_out = t->tar + z.total_out;
		z.avail_out = (uInt)(cap - z.total_out);
		zr = inflate(&z, Z_NO_FLUSH);
		if (zr != Z_OK || z.avail_out || cap == TOC_TAR_MAX)
			break;
		cap = cap * 2 < TOC_TAR_MAX ? cap * 2 : TOC_TAR_MAX;
	}
	t->len = z.total_out;
	int rest = (int)z.avail_in;
	inflateEnd(&z);
	if (zr == Z_STREAM_END && !rest)
		return 0;
	if (zr == Z_MEM_ERROR || oom)
		return tb_error_set(err, TB_ENOMEM, "layer %s: inflate: out of memory", l->digest);
	if (zr == Z_OK && !z.avail_out)
		return tb_error_set(err, TB_ETOOBIG, "layer %s: a TOC of more than %u bytes",
				    l->digest, TB_ESTARGZ_TOC_BYTES_MAX);
	return tb_error_set(err, TB_EINVAL,
			    "layer %s: its TOC's member (at %llu) is not one whole gzip member "
			    "before the footer",
			    l->digest, (unsigned long long)t->offset);
}

/* The member's tar: one regular file, stargz.index.json, then its end. */
static int read_toc_tar(const tb_estargz_layer_t *l, toc_t *t, tb_error_t *err)
{
	tb_layer_index_t ix = { 0 };
	tb_tar_scan_t s = { .ix = &ix };
	int rc = tb_tar_scan_feed(&s, t->tar, t->len, err);
	if (rc == 0)
		rc = tb_tar_scan_end(&s, err);
	tb_tar_scan_free(&s);
	if (rc == 0 && (ix.nentries != 1 || ix.entries[0].type != TB_LAYER_FILE ||
			strcmp(ix.entries[0].path, TB_ESTARGZ_TOC_NAME)))
		rc = tb_error_set(err, TB_EINVAL, "layer %s: its TOC's member is not one %s",
				  l->digest, TB_ESTARGZ_TOC_NAME);
	else if (rc < 0)
		tb_error_prefix(err, "layer %s: its TOC's member", l->digest);
	if (rc == 0) {
		t->entry = ix.entries[0];
		ix.nentries = 0;
	}
	tb_layer_entries_free(ix.entries, ix.nentries);
	free(ix.entries);
	return rc;
}

static int check_digest(const tb_estargz_layer_t *l, toc_t *t, tb_error_t *err)
{
	char have[72];
	EVP_Digest(t->tar + t->entry.offset, t->entry.size, t->sha, NULL, EVP_sha256(), NULL);
	memcpy(have, "sha256:", 7);
	tb_hex(have + 7, t->sha, 32);
	if (strcmp(have, l->toc_digest))
		return tb_error_set(err, TB_EINVAL,
				    "layer %s: its TOC's digest is %s, not %.80s as its manifest "
				    "annotates",
				    l->digest, have, l->toc_digest);
	return 0;
}

/* stargz.index.json itself, the index's last entry and point. */
static void add_toc_entry(tb_layer_index_t *ix, toc_t *t)
{
	tb_layer_point_t *p = &ix->points[ix->npoints++];
	tb_layer_entry_t *e = &ix->entries[ix->nentries++];
	memset(p, 0, sizeof(*p));
	p->kind = TB_LAYER_POINT_MEMBER;
	p->in = t->offset;
	p->out = ix->total_out;
	p->skip = (uint32_t)t->entry.offset;
	memcpy(p->span_sha, t->sha, 32);
	*e = t->entry;
	e->offset = ix->total_out;
	t->entry.path = t->entry.link = NULL;
	ix->total_out += e->size;
	ix->span = e->size > ix->span ? e->size : ix->span;
	ix->end_in = ix->layer_size - TB_ESTARGZ_FOOTER;
}

static int check_layer(const tb_estargz_layer_t *l, tb_error_t *err)
{
	if (!l->digest || !tb_digest_valid(l->digest))
		return tb_error_set(err, TB_EINVAL, "eStargz: '%.80s' is not a sha256 digest",
				    l->digest ? l->digest : "(null)");
	if (!l->toc_digest)
		return tb_error_set(err, TB_ENOTFOUND, "layer %s: no %s annotation", l->digest,
				    TB_ESTARGZ_ANNOTATION_TOC);
	if (!tb_digest_valid(l->toc_digest))
		return tb_error_set(err, TB_EINVAL,
				    "layer %s: its %s annotation '%.80s' is not a "
				    "sha256 digest",
				    l->digest, TB_ESTARGZ_ANNOTATION_TOC, l->toc_digest);
	if (l->size <= TB_ESTARGZ_FOOTER)
		return tb_error_set(err, TB_EINVAL,
				    "layer %s: %llu bytes, too short for an eStargz footer",
				    l->digest, (unsigned long long)l->size);
	return 0;
}

static int open_toc(const tb_estargz_layer_t *l, tb_layer_fetch_fn fetch, void *arg, toc_t *t,
		    tb_error_t *err)
{
	uint8_t footer[TB_ESTARGZ_FOOTER], *member = NULL;
	int rc = fetch_exact(l, fetch, arg, l->size - TB_ESTARGZ_FOOTER, footer, TB_ESTARGZ_FOOTER,
			     "footer", err);
	if (rc == 0)
		rc = parse_footer(l, footer, &t->offset, err);
	if (rc < 0)
		return rc;
	size_t n = (size_t)(l->size - TB_ESTARGZ_FOOTER - t->offset);
	if (!(member = malloc(n)))
		return tb_error_set(err, TB_ENOMEM, "layer %s: out of memory", l->digest);
	rc = fetch_exact(l, fetch, arg, t->offset, member, n, "TOC", err);
	if (rc == 0)
		rc = inflate_toc(l, member, n, t, err);
	free(member);
	if (rc == 0)
		rc = read_toc_tar(l, t, err);
	return rc == 0 ? check_digest(l, t, err) : rc;
}

int tb_estargz_open(const tb_estargz_layer_t *layer, tb_layer_fetch_fn fetch, void *arg,
		    tb_layer_index_t **out, tb_error_t *err)
{
	toc_t t = { 0 };
	*out = NULL;
	int rc = check_layer(layer, err);
	if (rc == 0)
		rc = open_toc(layer, fetch, arg, &t, err);
	if (rc == 0)
		rc = tb_toc_parse(TB_LAYER_INDEX_ESTARGZ, layer->digest, layer->size, t.offset,
				  t.tar + t.entry.offset, (size_t)t.entry.size, layer->budget, out,
				  err);
	if (rc == 0)
		add_toc_entry(*out, &t);
	free(t.entry.path);
	free(t.entry.link);
	free(t.tar);
	return rc;
}
