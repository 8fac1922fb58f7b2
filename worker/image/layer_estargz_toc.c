/*
 * layer_estargz_toc.c: an eStargz layer's TOC JSON parsed into an index
 * (layer_estargz.h), taking the JSON as hostile; a zstd:chunked layer's
 * too (layer_zstd_chunked.h: the same shape, its chunks zstd frames, and
 * a file of one chunk may carry the file's `digest` for it).
 *
 * The TOC lists the layer's tar entries in order; a regular file with
 * data has its first chunk in its own entry ("reg") and the rest in
 * "chunk" entries right after it. Each entry becomes an index entry at
 * the stream's current offset; each chunk a member point there, the
 * stream growing by the chunk's size. Checked as it goes: the version,
 * the counts, every name and link target, every number's type and range,
 * each chunk inside the blob before the TOC and after the chunk before
 * (so no two overlap), each file's chunks following one another from 0
 * to its size exactly, each chunk's compressed span and size bounded,
 * each chunk's digest a SHA-256.
 */
#include "layer_estargz.h"
#include "layer_index_int.h"
#include "layer_zstd_chunked.h"

#include "tb/encoding.h"
#include "tb/image_ref.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIZE_MAX_ (1ull << 62) /* a file's size, at most (no sum overflows) */

typedef struct parser {
	tb_layer_index_t *ix;
	int kind;                      /* tb_layer_index_kind_t: ESTARGZ or ZSTD_CHUNKED */
	const tb_toc_budget_t *budget; /* the image's, what is left; NULL: none */
	uint64_t toc_offset;
	size_t at;          /* the TOC entry being read */
	size_t file;        /* the open file's entry (ix->entries) */
	uint64_t remaining; /* its bytes not in a chunk yet (0: none open) */
	uint64_t done;      /* its bytes in chunks so far */
	tb_error_t *err;
} parser_t;

static int bad(parser_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(parser_t *p, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return tb_error_set(p->err, TB_EINVAL, "layer %s: TOC entry %zu: %s", p->ix->layer, p->at,
			    why);
}

/* Field @p key of @p o, an integer in 0..@p max (absent: 0). */
static int get_num(parser_t *p, json_t *o, const char *key, uint64_t max, uint64_t *v)
{
	json_t *j = json_object_get(o, key);
	*v = 0;
	if (!j)
		return 0;
	if (!json_is_integer(j) || json_integer_value(j) < 0 ||
	    (uint64_t)json_integer_value(j) > max)
		return bad(p, "'%s' is not a number from 0 to %llu", key, (unsigned long long)max);
	*v = (uint64_t)json_integer_value(j);
	return 0;
}

/* Field @p key of @p o, a string under NAME_MAX bytes with no NUL, copied
 * (absent: "", unless @p needed). */
static int get_str(parser_t *p, json_t *o, const char *key, int needed, char **out)
{
	json_t *j = json_object_get(o, key);
	const char *s = j ? json_string_value(j) : "";
	size_t n = j ? json_string_length(j) : 0;
	*out = NULL;
	if (!s || n >= TB_LAYER_INDEX_NAME_MAX || memchr(s, '\0', n) || (needed && !n))
		return bad(p, "'%s' is not a string of 1 to %u bytes", key,
			   TB_LAYER_INDEX_NAME_MAX - 1);
	if (!(*out = strdup(s)))
		return tb_error_set(p->err, TB_ENOMEM, "TOC: out of memory");
	return 0;
}

static int type_of(parser_t *p, json_t *o, int *type)
{
	static const char *const names[] = {
		[TB_LAYER_FILE] = "reg",        [TB_LAYER_DIR] = "dir",
		[TB_LAYER_SYMLINK] = "symlink", [TB_LAYER_HARDLINK] = "hardlink",
		[TB_LAYER_CHAR] = "char",       [TB_LAYER_BLOCK] = "block",
		[TB_LAYER_FIFO] = "fifo"
	};
	const char *s = json_string_value(json_object_get(o, "type"));
	if (s && !strcmp(s, "chunk")) {
		*type = -1;
		return 0;
	}
	for (int t = 0; s && t < TB_LAYER_TYPES; t++)
		if (!strcmp(s, names[t])) {
			*type = t;
			return 0;
		}
	return bad(p, "type '%.40s'", s ? s : "(none)");
}

/* The chunk's digest; of a zstd:chunked file's one chunk (@p whole), the
 * file's `digest` when it has no `chunkDigest`. */
static int get_digest(parser_t *p, json_t *o, int whole, uint8_t sha[32])
{
	json_t *c = json_object_get(o, "chunkDigest");
	if (!c && whole && p->kind == TB_LAYER_INDEX_ZSTD_CHUNKED)
		c = json_object_get(o, "digest");
	const char *d = json_string_value(c);
	if (!d || !tb_digest_valid(d) || tb_unhex(sha, d + 7, 32) < 0)
		return bad(p, "no chunkDigest, or not a sha256 digest");
	return 0;
}

/* The chunk @p o gives the open file: a member point. */
static int add_chunk(parser_t *p, json_t *o)
{
	tb_layer_index_t *ix = p->ix;
	const tb_layer_entry_t *f = &ix->entries[p->file];
	uint64_t off, inner, coff, csize;
	if (get_num(p, o, "offset", UINT64_MAX >> 1, &off) < 0 ||
	    get_num(p, o, "innerOffset", UINT64_MAX >> 1, &inner) < 0 ||
	    get_num(p, o, "chunkOffset", SIZE_MAX_, &coff) < 0 ||
	    get_num(p, o, "chunkSize", SIZE_MAX_, &csize) < 0)
		return -1;
	if (inner)
		return bad(p,
			   "'%.200s' shares a gzip member with another (innerOffset): not read "
			   "natively",
			   f->path);
	if (off >= p->toc_offset)
		return bad(p,
			   "'%.200s' has a chunk at blob offset %llu, outside the blob's %llu "
			   "bytes before its TOC",
			   f->path, (unsigned long long)off, (unsigned long long)p->toc_offset);
	if (ix->npoints && off <= ix->points[ix->npoints - 1].in)
		return bad(p,
			   "'%.200s' has a chunk at blob offset %llu, not after the one before "
			   "(%llu): chunks overlap or are out of order",
			   f->path, (unsigned long long)off,
			   (unsigned long long)ix->points[ix->npoints - 1].in);
	if (ix->npoints && off - ix->points[ix->npoints - 1].in > TB_LAYER_INDEX_SPAN_BYTES_MAX)
		return bad(p, "a chunk's member of more than %u bytes",
			   TB_LAYER_INDEX_SPAN_BYTES_MAX);
	if (coff != p->done)
		return bad(p, "'%.200s' has a chunk at %llu where %llu was next", f->path,
			   (unsigned long long)coff, (unsigned long long)p->done);
	if (!csize)
		csize = p->remaining;
	if (csize > p->remaining || csize > TB_ESTARGZ_CHUNK_MAX)
		return bad(p, "'%.200s' has a chunk of %llu bytes at %llu (of %llu; at most %u)",
			   f->path, (unsigned long long)csize, (unsigned long long)coff,
			   (unsigned long long)f->size, TB_ESTARGZ_CHUNK_MAX);
	tb_layer_point_t *pt = &ix->points[ix->npoints];
	memset(pt, 0, sizeof(*pt));
	if (get_digest(p, o, coff == 0 && csize == f->size, pt->span_sha) < 0)
		return -1;
	pt->kind = p->kind == TB_LAYER_INDEX_ESTARGZ ? TB_LAYER_POINT_MEMBER : TB_LAYER_POINT_ZSTD;
	pt->in = off;
	pt->out = ix->total_out;
	ix->npoints++;
	ix->total_out += csize;
	ix->span = csize > ix->span ? csize : ix->span;
	p->done += csize;
	p->remaining -= csize;
	return 0;
}

static int fill_entry(parser_t *p, json_t *o, int type, tb_layer_entry_t *e)
{
	uint64_t mode, uid, gid, size;
	int link = type == TB_LAYER_SYMLINK || type == TB_LAYER_HARDLINK;
	if (get_num(p, o, "mode", UINT32_MAX, &mode) < 0 ||
	    get_num(p, o, "uid", UINT32_MAX, &uid) < 0 ||
	    get_num(p, o, "gid", UINT32_MAX, &gid) < 0 ||
	    get_num(p, o, "size", SIZE_MAX_, &size) < 0)
		return -1;
	e->type = (uint8_t)type;
	e->mode = (uint32_t)(mode & 07777);
	e->uid = (uint32_t)uid;
	e->gid = (uint32_t)gid;
	e->size = type == TB_LAYER_FILE ? size : 0;
	e->offset = p->ix->total_out;
	json_t *t = json_object_get(o, "modtime");
	if (t &&
	    (!json_is_string(t) || tb_toc_time(json_string_value(t), &e->mtime, &e->mtime_ns) < 0))
		return bad(p, "'modtime' is not an RFC 3339 time from 1970 to 9999");
	if (get_str(p, o, "name", 1, &e->path) < 0 ||
	    get_str(p, o, link ? "linkName" : "-", link, &e->link) < 0)
		return -1;
	return 0;
}

static int add_entry(parser_t *p, json_t *o)
{
	tb_layer_index_t *ix = p->ix;
	int type;
	if (!json_is_object(o))
		return bad(p, "not an object");
	if (type_of(p, o, &type) < 0)
		return -1;
	if (type < 0)
		return p->remaining ? add_chunk(p, o)
				    : bad(p, "a chunk with no file before it to continue");
	if (p->remaining)
		return bad(p, "'%.200s' ends at %llu of its %llu bytes: chunks missing",
			   ix->entries[p->file].path, (unsigned long long)p->done,
			   (unsigned long long)ix->entries[p->file].size);
	tb_layer_entry_t *e = &ix->entries[ix->nentries];
	memset(e, 0, sizeof(*e));
	int rc = fill_entry(p, o, type, e);
	ix->nentries++; /* its strings freed with the index, whatever came */
	if (rc < 0)
		return rc;
	p->file = ix->nentries - 1;
	p->remaining = e->size;
	p->done = 0;
	return e->size ? add_chunk(p, o) : 0;
}

static int parse_entries(parser_t *p, json_t *root)
{
	json_t *version = json_object_get(root, "version");
	json_t *entries = json_object_get(root, "entries");
	size_t n = json_array_size(entries);

	if (!json_is_integer(version) || json_integer_value(version) != 1)
		return tb_error_set(p->err, TB_EINVAL, "layer %s: TOC version is not 1",
				    p->ix->layer);
	if (!json_is_array(entries))
		return tb_error_set(p->err, TB_EINVAL, "layer %s: TOC has no entries",
				    p->ix->layer);
	if (n > TB_LAYER_INDEX_ENTRIES_MAX)
		return tb_error_set(p->err, TB_ETOOBIG, "layer %s: TOC of %zu entries (at most %u)",
				    p->ix->layer, n, TB_LAYER_INDEX_ENTRIES_MAX);
	if (p->budget && n > p->budget->entries)
		return tb_error_set(p->err, TB_ETOOBIG,
				    "layer %s: TOC of %zu entries, past the %llu the image's "
				    "layers have left of theirs together",
				    p->ix->layer, n, (unsigned long long)p->budget->entries);
	/* one spare of each: for the TOC's own entry and point */
	if (!(p->ix->entries = calloc(n + 1, sizeof(*p->ix->entries))) ||
	    !(p->ix->points = calloc(n + 1, sizeof(*p->ix->points))))
		return tb_error_set(p->err, TB_ENOMEM, "TOC: out of memory");
	for (p->at = 0; p->at < n; p->at++)
		if (add_entry(p, json_array_get(entries, p->at)) < 0)
			return p->err->code;
	if (p->remaining)
		return bad(p, "the TOC ends inside '%.200s'", p->ix->entries[p->file].path);
	if (p->ix->npoints &&
	    p->toc_offset - p->ix->points[p->ix->npoints - 1].in > TB_LAYER_INDEX_SPAN_BYTES_MAX)
		return bad(p, "a chunk's member of more than %u bytes",
			   TB_LAYER_INDEX_SPAN_BYTES_MAX);
	return 0;
}

/* The values @p json can hold, over-counted (every value but the first
 * follows a ',', ':', '[' or is an object), bounded before jansson
 * builds its tree of them: memory in proportion to the TOC. */
static int check_values(const char *layer, const uint8_t *json, size_t len, tb_error_t *err)
{
	size_t values = 0, objects = 0;
	for (size_t i = 0; i < len; i++) {
		uint8_t c = json[i];
		values += c == ',' || c == ':' || c == '[' || c == '{';
		objects += c == '{';
	}
	if (values > TB_ESTARGZ_TOC_VALUES_MAX || objects > TB_LAYER_INDEX_ENTRIES_MAX / 4)
		return tb_error_set(err, TB_ETOOBIG,
				    "layer %s: a TOC of %zu values, %zu objects (at most %u, %u)",
				    layer, values, objects, TB_ESTARGZ_TOC_VALUES_MAX,
				    TB_LAYER_INDEX_ENTRIES_MAX / 4);
	return 0;
}

int tb_estargz_toc_parse(const char *layer, uint64_t layer_size, uint64_t toc_offset,
			 const uint8_t *json, size_t len, tb_layer_index_t **out, tb_error_t *err)
{
	return tb_toc_parse(TB_LAYER_INDEX_ESTARGZ, layer, layer_size, toc_offset, json, len, NULL,
			    out, err);
}

int tb_zstd_chunked_toc_parse(const char *layer, uint64_t layer_size, uint64_t toc_offset,
			      const uint8_t *json, size_t len, tb_layer_index_t **out,
			      tb_error_t *err)
{
	return tb_toc_parse(TB_LAYER_INDEX_ZSTD_CHUNKED, layer, layer_size, toc_offset, json, len,
			    NULL, out, err);
}

int tb_toc_parse(int kind, const char *layer, uint64_t layer_size, uint64_t toc_offset,
		 const uint8_t *json, size_t len, tb_toc_budget_t *budget, tb_layer_index_t **out,
		 tb_error_t *err)
{
	json_error_t jerr;
	*out = NULL;
	if (len > TB_ESTARGZ_TOC_BYTES_MAX)
		return tb_error_set(err, TB_ETOOBIG, "layer %s: a TOC of %zu bytes (at most %u)",
				    layer, len, TB_ESTARGZ_TOC_BYTES_MAX);
	if (tb_toc_budget_bytes(layer, budget, len, err) < 0)
		return err->code;
	if (toc_offset >= layer_size)
		return tb_error_set(err, TB_EINVAL, "layer %s: its TOC at %llu is past its end",
				    layer, (unsigned long long)toc_offset);
	if (check_values(layer, json, len, err) < 0)
		return err->code;
	tb_layer_index_t *ix = calloc(1, sizeof(*ix));
	if (!ix)
		return tb_error_set(err, TB_ENOMEM, "TOC: out of memory");
	snprintf(ix->layer, sizeof(ix->layer), "%s", layer);
	ix->kind = (uint8_t)kind;
	ix->layer_size = layer_size;
	ix->end_in = toc_offset;
	json_t *root = json_loadb((const char *)json, len, JSON_REJECT_DUPLICATES, &jerr);
	parser_t p = {
		.ix = ix, .kind = kind, .budget = budget, .toc_offset = toc_offset, .err = err
	};
	int rc = root ? parse_entries(&p, root)
		      : tb_error_set(err, TB_EINVAL, "layer %s: TOC is not JSON: %s (line %d)",
				     layer, jerr.text, jerr.line);
	json_decref(root);
	if (rc < 0) {
		tb_layer_index_free(ix);
		return rc;
	}
	if (budget)
		budget->bytes -= len;
	*out = ix;
	return 0;
}

int tb_toc_budget_bytes(const char *layer, const tb_toc_budget_t *budget, uint64_t len,
			tb_error_t *err)
{
	if (budget && len > budget->bytes)
		return tb_error_set(err, TB_ETOOBIG,
				    "layer %s: a TOC of %llu bytes, past the %llu the image's "
				    "layers have left of theirs together",
				    layer, (unsigned long long)len,
				    (unsigned long long)budget->bytes);
	return 0;
}
