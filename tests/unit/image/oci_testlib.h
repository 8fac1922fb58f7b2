/*
 * oci_testlib.h: OCI image layouts written by the image tests: blobs by
 * digest, gzip layers of "path=content" files ("dir/" for a directory,
 * "c:path" a character device, "u:path=content" a set-user-ID file; all
 * owned by 1000), manifests and indexes.
 */
#ifndef TB_OCI_TESTLIB_H
#define TB_OCI_TESTLIB_H

#include <stddef.h>

#define OCI_GZ "application/vnd.oci.image.layer.v1.tar+gzip"

/** Writes @p len bytes as a blob of @p layout; its digest into @p d. */
void oci_blob(const char *layout, const void *data, size_t len, char d[72]);

/** A gzip layer of the NULL-ended @p files into @p out. @return its size. */
size_t oci_layer(const char *const *files, char *out, size_t cap);

/** An image of @p n layers (each a NULL-ended file list) with a config
 * (Env PATH, LANG; WorkingDir /home/agent; User 1000); its manifest's
 * digest into @p d. @p layer_type: NULL for gzip layers. */
void oci_image(const char *layout, const char *const *const *layers, size_t n,
	       const char *layer_type, char d[72]);

/** An index naming @p manifest for linux/@p arch (and for linux/s390x). */
void oci_index(const char *layout, const char *manifest, const char *arch, char d[72]);

#endif
