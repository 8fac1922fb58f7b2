/*
 * layer_index_member.c: the stream of an eStargz index read through its
 * member points (layer_index.h, layer_estargz.h).
 *
 * Each point is a chunk of a file that starts a gzip member of its own:
 * its span (the compressed bytes from that member to the next point's,
 * or to the TOC's member) is fetched, inflated as gzip from its start
 * (no window: nothing before it is referred to), the member's first
 * `skip` bytes passed, and the chunk's bytes checked against their
 * SHA-256 before any of them is copied out: a chunk that does not match
 * fails the read, naming the chunk, its file and the layer. Only the
 * chunk is inflated, not the rest of its member (padding and the next
 * entries' tar headers), so a member that inflates without end costs
 * no more than its chunk. A zstd:chunked index's points (ZSTD) are read
 * alike, each chunk decompressed from the zstd frames that start at its
 * point (layer_zstd_chunked.c) and checked the same way.
 */
#include "layer_index_int.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define SCRATCH 4096u

/* The stream's bytes of point @p i: its chunk's length. */
static uint64_t chunk_len(const tb_layer_index_t *ix, size_t i)
{
	uint64_t end = i + 1 < ix->npoints ? ix->points[i + 1].out : ix->total_out;
	return end - ix->points[i].out;
}

/* The file whose data holds stream offset @p out, or NULL. */
static const tb_layer_entry_t *file_at(const tb_layer_index_t *ix, uint64_t out)
{
	size_t lo = 0, hi = ix->nentries;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (ix->entries[mid].offset <= out)
			lo = mid;
		else
			hi = mid;
	}
	for (size_t k = lo + 1; k-- > 0 && lo - k < 64;) {
		const tb_layer_entry_t *e = &ix->entries[k];
		if (e->size && e->offset <= out && out - e->offset < e->size)
			return e;
	}
	return NULL;
}

int tb_layer_chunk_error(const tb_layer_index_t *ix, size_t i, tb_error_t *err, const char *why)
{
	uint64_t from, to, out = ix->points[i].out;
	const tb_layer_entry_t *e = file_at(ix, out);
	tb_layer_index_span(ix, i, &from, &to);
	return tb_error_set(err, TB_EINVAL,
			    "layer %s: the chunk at byte %llu of '%.200s' (chunk %zu, blob bytes "
			    "%llu..%llu) %s",
			    ix->layer, (unsigned long long)(e ? out - e->offset : 0),
			    e ? e->path : "?", i, (unsigned long long)from, (unsigned long long)to,
			    why);
}

/* Inflates @p z until @p want bytes came into @p out (NULL: dropped).
 * @return 0, or a zlib code (Z_BUF_ERROR: the input ran out). */
static int inflate_n(z_stream *z, uint8_t *out, uint64_t want)
{
	uint8_t scratch[SCRATCH];
	while (want) {
		uInt room = want < (1u << 30) ? (uInt)want : (1u << 30);
		if (!out && room > SCRATCH)
			room = SCRATCH;
		z->next_out = out ? out : scratch;
		z->avail_out = room;
		int zr = inflate(z, Z_NO_FLUSH);
		uInt got = room - z->avail_out;
		want -= got;
		out = out ? out + got : NULL;
		if (zr == Z_STREAM_END && want)
			return Z_STREAM_END;
		if (zr == Z_BUF_ERROR || (zr == Z_OK && !got && !z->avail_in))
			return Z_BUF_ERROR;
		if (zr != Z_OK && zr != Z_STREAM_END)
			return zr;
	}
	return 0;
}

/* Span @p i's chunk inflated from its compressed bytes into @p out
 * (chunk_len bytes) and checked. */
static int member_chunk(const tb_layer_index_t *ix, size_t i, const uint8_t *data, size_t len,
			uint8_t *out, tb_error_t *err)
{
	const tb_layer_point_t *p = &ix->points[i];
	uint64_t n = chunk_len(ix, i);
	unsigned char sum[32];
	z_stream z = { 0 };

	if (p->kind == TB_LAYER_POINT_ZSTD) {
		int rc = tb_zstd_chunk(ix, i, data, len, out, n, err);
		if (rc < 0)
			return rc;
		EVP_Digest(out, n, sum, NULL, EVP_sha256(), NULL);
		if (memcmp(sum, p->span_sha, 32))
			return tb_layer_chunk_error(ix, i, err,
						    "does not match its digest in the TOC");
		return 0;
	}
	if (inflateInit2(&z, 31) != Z_OK)
		return tb_error_set(err, TB_ENOMEM, "layer %s: inflate: out of memory", ix->layer);
	z.next_in = (uint8_t *)data;
	z.avail_in = (uInt)len;
	int zr = inflate_n(&z, NULL, p->skip);
	if (zr == 0)
		zr = inflate_n(&z, out, n);
	const char *msg = z.msg;
	inflateEnd(&z);
	if (zr == Z_MEM_ERROR)
		return tb_error_set(err, TB_ENOMEM, "layer %s: inflate: out of memory", ix->layer);
	if (zr == Z_STREAM_END || zr == Z_BUF_ERROR)
		return tb_layer_chunk_error(ix, i, err, "ends before the chunk does");
	if (zr != 0) {
		char why[160];
		snprintf(why, sizeof(why), "does not inflate (%.100s)", msg ? msg : "zlib error");
		return tb_layer_chunk_error(ix, i, err, why);
	}
	EVP_Digest(out, n, sum, NULL, EVP_sha256(), NULL);
	if (memcmp(sum, p->span_sha, 32))
		return tb_layer_chunk_error(ix, i, err, "does not match its digest in the TOC");
	return 0;
}

#ifndef TB_HAVE_ZSTD_CHUNKED
/* No zstd:chunked index is ever made without libzstd: never called. */
int tb_zstd_chunk(const tb_layer_index_t *ix, size_t i, const uint8_t *data, size_t len,
		  uint8_t *out, uint64_t want, tb_error_t *err)
{
	(void)data, (void)len, (void)out, (void)want;
	return tb_layer_chunk_error(ix, i, err, "is zstd: this build has no libzstd");
}
#endif

int tb_layer_index_check_span(const tb_layer_index_t *ix, size_t i, const void *data, size_t len,
			      tb_error_t *err)
{
	unsigned char sum[32];
	if (!tb_layer_index_kind_toc(ix->kind)) {
		EVP_Digest(data, len, sum, NULL, EVP_sha256(), NULL);
		if (memcmp(sum, ix->points[i].span_sha, 32))
			return tb_error_set(err, TB_EINVAL,
					    "layer %s: span %zu does not match its SHA-256 in the "
					    "index",
					    ix->layer, i);
		return 0;
	}
	uint8_t *out = malloc(chunk_len(ix, i) + 1);
	if (!out)
		return tb_error_set(err, TB_ENOMEM, "layer %s: out of memory", ix->layer);
	int rc = member_chunk(ix, i, data, len, out, err);
	free(out);
	return rc;
}

/* Span @p i fetched into @p *in (grown as needed), its length in @p n. */
static int fetch_member(const tb_layer_index_t *ix, size_t i, tb_layer_fetch_fn fetch, void *arg,
			uint8_t **in, size_t *n, tb_error_t *err)
{
	uint64_t from, to;
	tb_layer_index_span(ix, i, &from, &to);
	uint8_t *buf = realloc(*in, to - from);
	if (!buf)
		return tb_error_set(err, TB_ENOMEM, "layer %s: chunk %zu: out of memory", ix->layer,
				    i);
	*in = buf;
	*n = to - from;
	int64_t got = fetch(arg, from, buf, to - from, err);
	if (got < 0)
		return tb_error_prefix(err, "layer %s: fetch chunk %zu", ix->layer, i);
	if ((uint64_t)got != to - from)
		return tb_error_set(err, TB_EINVAL,
				    "layer %s: chunk %zu (bytes %llu..%llu): the fetch gave %lld "
				    "bytes",
				    ix->layer, i, (unsigned long long)from, (unsigned long long)to,
				    (long long)got);
	return 0;
}

int tb_layer_member_read(const tb_layer_index_t *ix, tb_layer_fetch_fn fetch, void *arg,
			 uint64_t off, void *buf, size_t len, tb_error_t *err)
{
	uint8_t *in = NULL, *chunk = NULL;
	size_t n, done = 0;
	int rc = 0;

	for (size_t i = tb_layer_point_before(ix, off); done < len && rc == 0; i++) {
		const tb_layer_point_t *p = &ix->points[i];
		uint64_t clen = chunk_len(ix, i), at = off + done - p->out;
		uint8_t *c = realloc(chunk, clen + 1);
		if (!c) {
			rc = tb_error_set(err, TB_ENOMEM, "layer %s: out of memory", ix->layer);
			break;
		}
		chunk = c;
		if ((rc = fetch_member(ix, i, fetch, arg, &in, &n, err)) < 0 ||
		    (rc = member_chunk(ix, i, in, n, chunk, err)) < 0)
			break;
		size_t take = clen - at < len - done ? (size_t)(clen - at) : len - done;
		memcpy((uint8_t *)buf + done, chunk + at, take);
		done += take;
	}
	free(in);
	free(chunk);
	return rc;
}
