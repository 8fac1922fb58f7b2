/*
 * source.h: where an image's blobs come from: an OCI image layout on the
 * worker (layout.c) or a registry (registry.c). A source only delivers
 * bytes; cache.c checks each blob against its digest (blob.h) before
 * anything reads it.
 */
#ifndef TB_IMAGE_SOURCE_H
#define TB_IMAGE_SOURCE_H

#include "blob.h"
#include "tb/image_ref.h"

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
	void (*close)(tb_image_source_t *s);
};

/** The registry @p ref names; @p credentials: a docker config.json whose
 * "auths" may hold its login (NULL: anonymous); a response that sends
 * under one byte a second for @p stall_seconds is given up on (TB_ERETRY).
 * @return 0; TB_EIO when the credentials file cannot be read. */
int tb_registry_open(tb_image_source_t **out, const tb_image_ref_t *ref, const char *credentials,
		     unsigned stall_seconds, tb_error_t *err);

/** An OCI image layout at @p ref's path (ref->layout). @return 0;
 * TB_ENOTFOUND when the path holds no layout (no oci-layout file). */
int tb_layout_open(tb_image_source_t **out, const tb_image_ref_t *ref, tb_error_t *err);

#endif
