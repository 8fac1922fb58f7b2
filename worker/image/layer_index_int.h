/*
 * layer_index_int.h: what the layer index's files share (layer_index.h
 * is the interface): the tar stream's scanner, fed the tar stream as it
 * is inflated, that lists its entries into the index; the reading of an
 * eStargz index's member points.
 */
#ifndef TB_LAYER_INDEX_INT_H
#define TB_LAYER_INDEX_INT_H

#include "layer_index.h"

#include <stddef.h>
#include <stdint.h>

/* A pax or GNU long-name record's data, at most (a longer one is refused). */
#define TB_TAR_META_MAX (1u << 20)

typedef struct tb_tar_scan {
	tb_layer_index_t *ix; /* the entries go to ix->entries */
	size_t cap;           /* room in ix->entries */
	uint64_t pos;         /* tar stream bytes seen */
	uint8_t hdr[512];
	size_t hlen;   /* header bytes so far */
	uint64_t skip; /* data (and padding) bytes still to pass */
	char *meta;    /* an 'L', 'K' or 'x' entry's data being read */
	size_t mlen, mwant;
	char kind;             /* that entry's type flag */
	char *path, *link;     /* a name the next entry takes (L/K, pax) */
	uint64_t pax[3];       /* pax size, uid, gid for the next entry ... */
	unsigned has_pax;      /* ... bit i set: pax[i] given; bit 3: pax_mtime */
	uint64_t pax_mtime;    /* a pax mtime's seconds ... */
	uint32_t pax_mtime_ns; /* ... and nanoseconds */
	int zeros;             /* zero blocks in a row */
	int ended;             /* the two zero blocks came: the rest is padding */
} tb_tar_scan_t;

/** Feeds @p n bytes of the tar stream. @return 0; TB_EINVAL naming the
 * entry for what is not a tar the index can list; TB_ENOMEM. */
int tb_tar_scan_feed(tb_tar_scan_t *t, const uint8_t *p, size_t n, tb_error_t *err);

/** The stream ended: @return 0 if it ended between entries; TB_EINVAL. */
int tb_tar_scan_end(tb_tar_scan_t *t, tb_error_t *err);

/** Frees what the scanner holds (not the index). */
void tb_tar_scan_free(tb_tar_scan_t *t);

/** A TOC entry's `modtime` @p s (RFC 3339, a fraction of up to nine
 * digits, "Z" or an offset) into seconds and nanoseconds since the epoch
 * (toc_time.c). @return 0; -1 for what is not one, or is before the
 * epoch or past TB_LAYER_INDEX_MTIME_MAX. */
int tb_toc_time(const char *s, int64_t *sec, uint32_t *ns);

/** A TOC of kind @p kind (TB_LAYER_INDEX_ESTARGZ or _ZSTD_CHUNKED) parsed
 * as tb_estargz_toc_parse() says (layer_estargz_toc.c); a zstd:chunked
 * file of one chunk may carry the file's `digest` for it. With
 * @p budget (the image's, what is left; NULL: none), a TOC of more bytes
 * or entries than it has left is refused (TB_ETOOBIG) before its JSON or
 * its entries are allocated; a TOC parsed takes its bytes from it (the
 * caller takes the entries: tb_image_lazy_open). */
int tb_toc_parse(int kind, const char *layer, uint64_t layer_size, uint64_t toc_offset,
		 const uint8_t *json, size_t len, tb_toc_budget_t *budget, tb_layer_index_t **out,
		 tb_error_t *err);

/** Whether a TOC of @p len bytes fits what @p budget (NULL: none) has
 * left. @return 0; TB_ETOOBIG saying so (layer_estargz_toc.c). */
int tb_toc_budget_bytes(const char *layer, const tb_toc_budget_t *budget, uint64_t len,
			tb_error_t *err);

/** The uncompressed bytes of zstd point @p i of @p ix from its span's
 * @p len bytes @p data: its first @p want bytes into @p out.
 * (layer_zstd_chunked.c). @return 0; TB_EINVAL naming the chunk (frames
 * that end first, or do not decompress); TB_ENOMEM; TB_EINVAL for a
 * build without libzstd. */
int tb_zstd_chunk(const tb_layer_index_t *ix, size_t i, const uint8_t *data, size_t len,
		  uint8_t *out, uint64_t want, tb_error_t *err);

/** An error naming point @p i of @p ix: its file, where in it, where in
 * the blob, and @p why (layer_index_member.c). @return TB_EINVAL. */
int tb_layer_chunk_error(const tb_layer_index_t *ix, size_t i, tb_error_t *err, const char *why);

/** tb_layer_index_read() of an eStargz index (its points all MEMBER):
 * @p off and @p len checked against the stream already, @p len > 0. */
int tb_layer_member_read(const tb_layer_index_t *ix, tb_layer_fetch_fn fetch, void *arg,
			 uint64_t off, void *buf, size_t len, tb_error_t *err);

/** Frees the strings of @p n entries. */
void tb_layer_entries_free(tb_layer_entry_t *e, size_t n);

#endif
