/*
 * source.h: where an image's blobs come from: an OCI image layout on the
 * worker (layout.c) or a registry (registry.c). A source only delivers
 * bytes; cache.c checks each blob against its digest (blob.h) before
 * anything reads it. A source also answers whether it would serve an
 * image to whoever opened it (authorize): the cache is shared by every
 * runtime on the host, a registry's login is not.
 */
#ifndef TB_IMAGE_SOURCE_H
#define TB_IMAGE_SOURCE_H

#include "blob.h"
#include "tb/image_ref.h"

#include <stdatomic.h>

typedef struct tb_image_source tb_image_source_t;

struct tb_image_source {
	/**
	 * Streams blob @p digest into @p b (begun by the caller, who commits
	 * it). @p manifest: the blob is a manifest or index, named by the
	 * image's reference (a registry serves those on another path); its
	 * content type, when the source knows one, into @p ct.
	 * @return 0; TB_ENOTFOUND; TB_EIO or TB_ERETRY (the source away);
	 *         TB_ETOOBIG and TB_EINVAL from the blob
	 */
	int (*fetch)(tb_image_source_t *s, const char *digest, int manifest, tb_blob_t *b, char *ct,
		     size_t ctlen, tb_error_t *err);
	/**
	 * Whether the source would serve manifest (or index) @p digest to
	 * whoever opened it, asked without fetching it: a registry is sent a
	 * HEAD with the credentials given at open (its Bearer challenge
	 * answered as for fetch); a layout must hold the blob, with bytes
	 * that are the digest's. What cache.c asks before it serves an image
	 * it made for somebody else.
	 * @return 0; TB_EPOISON refused (no or wrong login); TB_ENOTFOUND;
	 *         TB_ERETRY or TB_EIO (the source away)
	 */
	int (*authorize)(tb_image_source_t *s, const char *digest, tb_error_t *err);
	/**
	 * Reads @p len (> 0) bytes of blob @p digest from byte @p off into
	 * @p buf: a layer read by ranges through its index (layer_index.h).
	 * Not checked here (a range cannot be checked against the blob's
	 * digest): its reader checks it against the index's span hashes. A
	 * registry is sent `Range: bytes=off-(off+len-1)` with the login and
	 * redirects of fetch, and must answer 206 with that Content-Range (or
	 * its part before the blob's end); a layout reads its file there.
	 * Safe from several threads at once on one source. A registry's
	 * transfer ends within about a second once *@p cancel is set (its
	 * reader stops: TB_ERETRY; @p cancel may be NULL), as every one does
	 * once the worker stops (tb_registry_open).
	 * @return the bytes read: @p len, or fewer only where the blob ends;
	 *         TB_ENOTFOUND; TB_EPOISON refused; TB_EIO for an answer
	 *         that is not the range (a 200, another Content-Range, a
	 *         short body: named); TB_ERETRY (the source away, or
	 *         cancelled)
	 */
	int64_t (*read_range)(tb_image_source_t *s, const char *digest, uint64_t off, void *buf,
			      size_t len, const atomic_int *cancel, tb_error_t *err);
	void (*close)(tb_image_source_t *s);
	/* Who asks, as far as a registry can tell: a SHA-256 (hex) of the
	 * registry, repository and credentials ("" for none), so an answer
	 * of authorize() may be remembered a short while for the same
	 * asker (cache.c); "" when it must be asked every time (a layout:
	 * local, and cheap to ask). */
	char principal[65];
};

/* A blob of a source, read by ranges: the argument of
 * tb_image_source_fetch(). */
typedef struct tb_source_blob {
	tb_image_source_t *src;
	char digest[72];
	const atomic_int *cancel; /* once set, its reads end (read_range); NULL: never */
} tb_source_blob_t;

/** A tb_layer_fetch_fn (layer_index.h) over a source's read_range: @p arg
 * is a tb_source_blob_t. As safe from several threads as read_range. */
int64_t tb_image_source_fetch(void *arg, uint64_t off, void *buf, size_t len, tb_error_t *err);

/** The registry @p ref names; @p credentials: a docker config.json whose
 * "auths" may hold its login (NULL: anonymous); a response that sends
 * under one byte a second for @p stall_seconds is given up on (TB_ERETRY),
 * and so is every transfer, within about a second, once *@p stop is set
 * (TB_ERETRY, "the worker stops"; @p stop may be NULL, and outlives the
 * source). @return 0; TB_EIO when the credentials file cannot be read. */
int tb_registry_open(tb_image_source_t **out, const tb_image_ref_t *ref, const char *credentials,
		     unsigned stall_seconds, const atomic_int *stop, tb_error_t *err);

/** An OCI image layout at @p ref's path (ref->layout). @return 0;
 * TB_ENOTFOUND when the path holds no layout (no oci-layout file). */
int tb_layout_open(tb_image_source_t **out, const tb_image_ref_t *ref, tb_error_t *err);

#endif
