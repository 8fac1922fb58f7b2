/*
 * image_ref.h: an environment's name, an OCI image pinned by digest
 * (schemas/recipe.md, "environment"). Two forms:
 *
 *   REGISTRY/REPOSITORY[:TAG]@sha256:<64 hex>   an image in a registry;
 *       REGISTRY is a host name with a dot or a port, or "localhost"
 *       (no default registry: the name says where it comes from); the
 *       tag, if any, is only a reminder: the digest is what is pulled
 *   oci-layout:/ABSOLUTE/PATH@sha256:<64 hex>    an OCI image layout on
 *       the worker (the demo, air-gapped fleets)
 *
 * A name without a digest (a tag alone) is refused: a tag can move, and
 * a task must run on the same environment every time it is replayed.
 */
#ifndef TB_IMAGE_REF_H
#define TB_IMAGE_REF_H

#include "tb/error.h"

#include <stddef.h>

#define TB_IMAGE_REF_MAX 512
#define TB_IMAGE_LAYOUT_PREFIX "oci-layout:"

typedef struct tb_image_ref {
	int layout;                  /* 1: an OCI layout on the worker (path), 0: a registry */
	char registry[256];          /* "registry.example.com:5000"; "" for a layout */
	char repository[256];        /* "team/py312"; for a layout, its absolute path */
	char digest[72];             /* "sha256:<64 lowercase hex>": the manifest's */
	char text[TB_IMAGE_REF_MAX]; /* as given */
} tb_image_ref_t;

/**
 * Parses @p text into @p out. @return 0; TB_EINVAL naming what is wrong
 * (no digest: "pin it by digest"; no registry; a bad repository, path or
 * digest).
 */
int tb_image_ref_parse(tb_image_ref_t *out, const char *text, tb_error_t *err);

/** Whether @p d is a digest as images are named by: "sha256:" and 64
 * lowercase hex digits. */
int tb_digest_valid(const char *d);

/** A schema field's check (tb_field_t.check) for a digest. */
int tb_check_digest(const void *value, char *why, size_t len);

/** A schema field's check (tb_field_t.check) for an image reference:
 * 0, or -1 with the reason in @p why. */
int tb_check_image_ref(const void *value, char *why, size_t len);

/**
 * Whether @p ref is under @p prefix, as a runtime's `sandbox.images.allow`
 * entry names one: "registry", "registry/", "registry/team" or
 * "registry/team/" (a whole path component: "registry/te" does not allow
 * "registry/team/x"). For a layout, @p prefix is a directory.
 */
int tb_image_ref_allowed(const tb_image_ref_t *ref, const char *prefix);

#endif
