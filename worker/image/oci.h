/*
 * oci.h: the JSON documents of an OCI image (and Docker's schema 2, which
 * registries still serve): an index (a manifest list) names one manifest
 * per platform; a manifest names the image's config and its layers, each
 * by digest; the config holds the environment the image's processes get.
 * This file parses them from bytes already verified against their
 * digests; fetching them is layout.c's and registry.c's.
 */
#ifndef TB_OCI_H
#define TB_OCI_H

#include "tb/error.h"

#include <stddef.h>
#include <stdint.h>

#define TB_OCI_MAX_LAYERS 256
#define TB_OCI_DOC_MAX (4u << 20) /* an index, manifest or config, at most */

typedef enum tb_oci_kind {
	TB_OCI_INDEX,    /* an OCI image index or a Docker manifest list */
	TB_OCI_MANIFEST, /* an OCI image manifest or a Docker schema 2 manifest */
} tb_oci_kind_t;

typedef enum tb_oci_compression {
	TB_OCI_TAR,
	TB_OCI_GZIP,
	TB_OCI_ZSTD,
} tb_oci_compression_t;

/* A content descriptor: what a document names by digest. */
typedef struct tb_oci_desc {
	char digest[72]; /* "sha256:<64 hex>" */
	uint64_t size;
	tb_oci_compression_t compression; /* layers only */
	char toc_digest[72];              /* a gzip layer's eStargz TOC digest, as annotated
			      * (layer_estargz.h), or a zstd layer's
			      * zstd:chunked manifest checksum
			      * (layer_zstd_chunked.h); "" when none, or not a
			      * sha256 digest (then it is pulled whole) */
	char toc_position[96];            /* a zstd layer's zstd:chunked manifest position,
				* as annotated (checked when read); "" when
				* none, or longer */
} tb_oci_desc_t;

typedef struct tb_oci_manifest {
	tb_oci_desc_t config;
	tb_oci_desc_t layers[TB_OCI_MAX_LAYERS]; /* bottom first */
	size_t nlayers;
} tb_oci_manifest_t;

typedef struct tb_oci_config {
	char **env; /* "NAME=value", as the image's Env lists them */
	size_t nenv;
	char *workdir; /* WorkingDir; NULL when none */
	char *user;    /* User ("1000", "1000:1000", "app"); NULL when none */
} tb_oci_config_t;

/** The platform this worker runs images of: "linux" and the Go name of
 * its architecture ("amd64", "arm64", ...); @p variant "" or "v8" ... */
void tb_oci_platform(const char **os, const char **arch, const char **variant);

/**
 * What @p doc (@p len bytes) is, by its mediaType (or, for a registry's
 * answer, @p content_type; NULL when none). @return 0 and @p kind; TB_EINVAL
 * for a document that is neither, naming its media type.
 */
int tb_oci_kind(tb_oci_kind_t *kind, const char *doc, size_t len, const char *content_type,
		tb_error_t *err);

/**
 * The manifest an index has for this worker's platform. @return 0;
 * TB_ENOTFOUND naming the platforms it has; TB_EINVAL for a bad index.
 */
int tb_oci_pick(tb_oci_desc_t *out, const char *doc, size_t len, tb_error_t *err);

/** Parses a manifest. @return 0; TB_EINVAL naming what is wrong (a layer
 * type that is not a filesystem layer, too many layers, a bad digest). */
int tb_oci_manifest(tb_oci_manifest_t *out, const char *doc, size_t len, tb_error_t *err);

/** Parses an image config. @param[out] out freed with tb_oci_config_free(). */
int tb_oci_config(tb_oci_config_t *out, const char *doc, size_t len, tb_error_t *err);

void tb_oci_config_free(tb_oci_config_t *c);

#endif
