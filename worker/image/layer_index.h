/*
 * layer_index.h: a gzip layer made seekable (issue 49's first step).
 *
 * A gzip layer can only be read from its start. Its index, built once
 * from the whole blob (zran-style, after zlib's examples/zran.c), holds
 * access points every `span` bytes of the uncompressed tar stream: where
 * a deflate block starts in the blob (to the bit), where in the tar
 * stream, and the 32 KiB of output before it (the window a deflate
 * stream may refer back into, kept deflated). With them a byte range of
 * the tar stream is read by fetching and inflating only the compressed
 * bytes from the access point before it.
 *
 * What is trusted, and how:
 *  - building reads the whole blob and checks its SHA-256 against the
 *    layer's digest: an index is only ever made from the layer it names;
 *  - the index's encoding (tb_layer_index_encode) is addressed by its
 *    own SHA-256, which a consumer pins; the decoder checks that pin,
 *    the layer digest the index names, and every length and offset
 *    against the others (hostile input: refused with a reason);
 *  - each span's compressed bytes (from one access point to the next)
 *    carry their SHA-256 in the index: a span fetched later by range,
 *    from wherever, is checked before a byte of it is inflated. A span
 *    that does not match is an error naming the span and the layer,
 *    never wrong bytes.
 *
 * The index also lists the layer's tar entries, whiteouts among them,
 * as the layer names them: path, type, permission bits, owner and group,
 * size, link target, modification time (seconds and nanoseconds: a
 * ustar header's octal seconds, or a pax `mtime` record with its
 * fraction, which takes precedence), and where the entry's data starts
 * in the tar stream. It records no access or change time, no extended
 * attribute and no device number. A consumer applies unpack.h's rules to
 * the entries as it would to the layer (image_tree.h does, through
 * unpack_rules.c).
 *
 * An eStargz layer (layer_estargz.h) is described by an index of the
 * same shape made from its table of contents instead: its kind is
 * TB_LAYER_INDEX_ESTARGZ, its points are of kind TB_LAYER_POINT_MEMBER
 * (a chunk of a file starting a gzip member of its own: inflated from
 * the member's start, no window, and checked against the SHA-256 of its
 * uncompressed bytes before a byte of it is returned), and its "stream"
 * is not the tar stream but the files' contents one after the other:
 * each point's chunk, in the layer's order, entry offsets pointing into
 * it. Such an index is made from the layer's TOC each time (the TOC is
 * pinned by the manifest) and is never encoded: the encoding below
 * (version 2) is that of gzip indexes only. Its entries' times are the
 * TOC's `modtime` (toc_time.c; none: 0), whole seconds (rounded): the
 * unpacked tree's where the tar's are whole seconds, else up to half a
 * second off.
 *
 * A zstd:chunked layer (layer_zstd_chunked.h) is described alike from
 * its TOC: kind TB_LAYER_INDEX_ZSTD_CHUNKED, points of kind
 * TB_LAYER_POINT_ZSTD (a chunk starting zstd frames of its own,
 * decompressed from there and checked as a MEMBER point's chunk), the
 * same stream of the files' contents; it has no entry of its TOC (a
 * skippable frame, no file of the tar), and its entries' times are the
 * TOC's `modtime` to the nanosecond.
 *
 * An image's root is served from its layers' indexes through FUSE by
 * worker/lazy/image_fs.h (the tree: image_tree.h), gzip, eStargz and
 * zstd:chunked indexes alike, mixed in one image; a sandbox starts on it with the
 * worker's image_lazy (image.h tb_image_lazy_open).
 */
#ifndef TB_LAYER_INDEX_H
#define TB_LAYER_INDEX_H

#include "tb/error.h"

#include <stddef.h>
#include <stdint.h>

#define TB_LAYER_INDEX_SPAN_DEFAULT (4u << 20) /* 4 MiB of tar stream */
#define TB_LAYER_INDEX_SPAN_MIN (64u << 10)
#define TB_LAYER_INDEX_SPAN_MAX (64u << 20)
/* A span's compressed bytes, at most (it is fetched and held whole). */
#define TB_LAYER_INDEX_SPAN_BYTES_MAX (128u << 20)
#define TB_LAYER_INDEX_WINDOW 32768u          /* deflate's window */
#define TB_LAYER_INDEX_NAME_MAX 4096          /* a path or link target: shorter */
#define TB_LAYER_INDEX_BYTES_MAX (256u << 20) /* an encoded index, at most */
#define TB_LAYER_INDEX_ENTRIES_MAX (1u << 22) /* tar entries listed, at most */
/* An entry's modification time, in seconds since the epoch, at most (the
 * end of year 9999): a later one, or one before the epoch, is not
 * indexed (the layer is pulled whole) and refused by the decoder. */
#define TB_LAYER_INDEX_MTIME_MAX 253402300799ll

typedef enum tb_layer_entry_type {
	TB_LAYER_FILE = 0,
	TB_LAYER_DIR,
	TB_LAYER_SYMLINK,
	TB_LAYER_HARDLINK,
	TB_LAYER_CHAR,
	TB_LAYER_BLOCK,
	TB_LAYER_FIFO,
	TB_LAYER_TYPES /* how many */
} tb_layer_entry_type_t;

typedef enum tb_layer_point_kind {
	TB_LAYER_POINT_ZRAN = 0, /* inside a deflate stream: bits and window */
	TB_LAYER_POINT_MEMBER,   /* a gzip member's start; span_sha is the
				  * SHA-256 of the uncompressed chunk */
	TB_LAYER_POINT_ZSTD,     /* a zstd frame's start; span_sha as MEMBER */
} tb_layer_point_kind_t;

typedef enum tb_layer_index_kind {
	TB_LAYER_INDEX_GZIP = 0,     /* zran points; the stream is the tar stream */
	TB_LAYER_INDEX_ESTARGZ,      /* member points; the stream is the files'
				      * chunks one after the other */
	TB_LAYER_INDEX_ZSTD_CHUNKED, /* zstd points (layer_zstd_chunked.h); the
				      * stream as ESTARGZ */
} tb_layer_index_kind_t;

/* Whether an index of kind @p kind is made from a table of contents: its
 * points each a file's chunk starting a compressed member or frame of its
 * own, its stream the files' contents one after another (no tar header
 * in it), never encoded. */
static inline int tb_layer_index_kind_toc(int kind)
{
	return kind == TB_LAYER_INDEX_ESTARGZ || kind == TB_LAYER_INDEX_ZSTD_CHUNKED;
}

/* Where inflating can start. */
typedef struct tb_layer_point {
	uint64_t in;          /* the blob's offset of the first whole byte after the point */
	uint64_t out;         /* the tar stream's offset there */
	uint8_t bits;         /* 0..7 bits of the byte at in - 1 still to be read */
	uint32_t wsize;       /* the window's size: min(out, 32 KiB) */
	uint32_t wlen;        /* the window's size deflated (raw) */
	uint8_t *window;      /* wlen bytes, raw deflate of the wsize before out */
	uint8_t span_sha[32]; /* ZRAN: SHA-256 of the span's compressed bytes;
			       * MEMBER: of its uncompressed chunk */
	uint8_t kind;         /* tb_layer_point_kind_t */
	uint32_t skip;        /* MEMBER: the member's bytes before the chunk */
} tb_layer_point_t;

typedef struct tb_layer_entry {
	char *path;        /* as the layer names it (whiteouts included) */
	char *link;        /* a link's target; "" for others */
	uint64_t size;     /* the data's size in the tar stream */
	uint64_t offset;   /* the stream's offset of the data */
	int64_t mtime;     /* modification time: seconds (0 .. MTIME_MAX) ... */
	uint32_t mtime_ns; /* ... and nanoseconds (below 1e9) */
	uint32_t mode;     /* permission bits (07777) */
	uint32_t uid, gid;
	uint8_t type; /* tb_layer_entry_type_t */
} tb_layer_entry_t;

/* What an image's TOCs may still take, all its layers together
 * (tb_image_lazy_open): counted down as each layer is described, so a
 * TOC is refused before it is allocated once the image's is spent. */
typedef struct tb_toc_budget {
	uint64_t bytes;   /* TOC JSON bytes */
	uint64_t entries; /* entries listed */
} tb_toc_budget_t;

typedef struct tb_layer_index {
	char layer[72];      /* "sha256:<hex>": the layer's digest */
	uint64_t layer_size; /* the blob's bytes */
	uint64_t total_out;  /* the tar stream's bytes */
	uint64_t span;       /* the access points' spacing asked for (eStargz:
			      * its largest chunk) */
	uint64_t end_in;     /* where the last span ends in the blob (0: at its
			      * end; eStargz: where the TOC's member starts) */
	uint8_t kind;        /* tb_layer_index_kind_t */
	size_t npoints, nentries;
	tb_layer_point_t *points;
	tb_layer_entry_t *entries;
} tb_layer_index_t;

/** Reads up to @p len bytes of the blob into @p buf. @return the bytes
 * read (0 at its end), or a negative TB_E* with @p err set. */
typedef int64_t (*tb_layer_read_fn)(void *arg, void *buf, size_t len, tb_error_t *err);

/** Fetches @p len bytes of the blob from offset @p off (a range). @return
 * the bytes fetched (fewer than asked is an error to the reader), or a
 * negative TB_E* with @p err set. */
typedef int64_t (*tb_layer_fetch_fn)(void *arg, uint64_t off, void *buf, size_t len,
				     tb_error_t *err);

/**
 * Builds the index of gzip layer @p digest ("sha256:<hex>") from its whole
 * blob, read in order through @p read, with an access point every @p span
 * bytes of the tar stream (0: the default; else within SPAN_MIN..MAX).
 * Concatenated gzip members are one layer.
 * @return 0 and a new index in @p out; TB_EINVAL for a blob that is not
 *         the layer named, not gzip, or not a tar this index can describe
 *         (a sparse file, a span past SPAN_BYTES_MAX, more than
 *         ENTRIES_MAX entries, a time before the epoch or past
 *         MTIME_MAX: the layer is then pulled whole), naming why;
 *         TB_ENOMEM; or what @p read returned
 */
int tb_layer_index_build(const char *digest, uint64_t span, tb_layer_read_fn read, void *arg,
			 tb_layer_index_t **out, tb_error_t *err);

/** Frees @p ix (NULL is fine). */
void tb_layer_index_free(tb_layer_index_t *ix);

/**
 * Encodes @p ix (a versioned binary, layer_index_codec.c) into a malloc'd
 * @p data of @p len bytes, and its digest ("sha256:<hex>") into
 * @p digest: the name a consumer pins the index by.
 * @return 0; TB_ETOOBIG past TB_LAYER_INDEX_BYTES_MAX (which the decoder
 *         refuses); TB_EINVAL for an eStargz index (never encoded);
 *         TB_ENOMEM
 */
int tb_layer_index_encode(const tb_layer_index_t *ix, uint8_t **data, size_t *len, char digest[72],
			  tb_error_t *err);

/**
 * Decodes an index of layer @p layer (NULL: any layer, for tools) whose
 * digest must be @p want (NULL: not pinned, for tools and the fuzzer).
 * @return 0 and a new index in @p out; TB_EINVAL naming what is wrong (a
 *         digest that differs, a layer not the one asked for, a
 *         truncated or malformed encoding, an offset or a time out of
 *         place, an encoding of version 1, which records no times);
 *         TB_EVERSION for an encoding of a later version; TB_ENOMEM
 */
int tb_layer_index_decode(const uint8_t *data, size_t len, const char *layer, const char *want,
			  tb_layer_index_t **out, tb_error_t *err);

/**
 * Reads @p len bytes of the stream from @p off into @p buf, fetching
 * the blob's compressed bytes through @p fetch, a span at a time, each
 * checked against its SHA-256 before it is inflated (ZRAN), or inflated
 * whole and its chunk checked before a byte of it is copied (MEMBER).
 * @return 0; TB_EINVAL for a range past the stream, a span whose bytes do
 *         not match (naming the span and the layer) or that does not
 *         inflate, a fetch that comes back short; or what @p fetch
 *         returned (its message prefixed)
 */
int tb_layer_index_read(const tb_layer_index_t *ix, tb_layer_fetch_fn fetch, void *arg,
			uint64_t off, void *buf, size_t len, tb_error_t *err);

/** The last point of @p ix at or before stream offset @p off: the span
 * holding that offset. */
size_t tb_layer_point_before(const tb_layer_index_t *ix, uint64_t off);

/** The compressed range [*from, *to) of span @p i of @p ix: what a
 * reader fetches for it. */
void tb_layer_index_span(const tb_layer_index_t *ix, size_t i, uint64_t *from, uint64_t *to);

/**
 * Checks span @p i's compressed bytes @p data (@p len of them, its whole
 * range) as a reader would before using them: a ZRAN span against its
 * SHA-256; a MEMBER span inflated from its member's start, its chunk
 * against the chunk's SHA-256. For a cache that keeps spans.
 * @return 0; TB_EINVAL naming the span and the layer; TB_ENOMEM
 */
int tb_layer_index_check_span(const tb_layer_index_t *ix, size_t i, const void *data, size_t len,
			      tb_error_t *err);

#endif
