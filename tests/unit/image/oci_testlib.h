/*
 * oci_testlib.h: OCI image layouts written by the image tests: the
 * layout itself, blobs by digest, gzip layers of "path=content" files
 * ("dir/" for a directory, "c:path" a character device, "u:path=content"
 * a set-user-ID file; all owned by 1000), manifests and indexes, tags
 * (index.json, for tools such as skopeo that read a layout by tag); a
 * manifest's first layer; a file of an unpacked tree, read back; and a
 * registry login file (auth.json).
 */
#ifndef TB_OCI_TESTLIB_H
#define TB_OCI_TESTLIB_H

#include <stddef.h>

#define OCI_GZ "application/vnd.oci.image.layer.v1.tar+gzip"

/** An empty OCI layout at @p layout (what was there removed): its
 * oci-layout file and blobs/sha256. @return 0, or -1 (the shell said why). */
int oci_layout_init(const char *layout);

/** Writes @p len bytes as a blob of @p layout; its digest into @p d. */
void oci_blob(const char *layout, const void *data, size_t len, char d[72]);

/** A gzip layer of the NULL-ended @p files into @p out. @return its size. */
size_t oci_layer(const char *const *files, char *out, size_t cap);

/** An image of @p n layers (each a NULL-ended file list) with a config
 * (Env PATH, LANG; WorkingDir /home/agent; User 1000); its manifest's
 * digest into @p d. @p layer_type: NULL for gzip layers. */
void oci_image(const char *layout, const char *const *const *layers, size_t n,
	       const char *layer_type, char d[72]);

/** Manifest @p manifest of @p layout written again with layers @p layers
 * ("0,1", counted from the bottom; NULL: all) of @p format ("estargz",
 * "zstd:chunked"), their TOCs annotated (tests/tools/toc-image, with
 * @p options: "" or its hostile ones, "--lie-digest NAME",
 * "--lie-annotation"); the new manifest's digest into @p d. Files are cut
 * in chunks of 4 MiB. */
void oci_toc_image(const char *layout, const char *manifest, const char *format, const char *layers,
		   const char *options, char d[72]);

/** An index naming @p manifest (a digest of @p layout, its real size)
 * for linux/s390x and linux/@p arch; its digest into @p d. */
void oci_index(const char *layout, const char *manifest, const char *arch, char d[72]);

/** Tags manifest or index @p digest of @p layout as @p name in the
 * layout's index.json (made on the first tag): its media type is the
 * blob's first "mediaType", as this library writes it. */
void oci_tag(const char *layout, const char *digest, const char *name);

/** The digest of the first layer of manifest @p manifest (a digest) of
 * @p layout into @p layer; the test fails if it names none. */
void oci_first_layer(const char *layout, const char *manifest, char layer[80]);

/** File @p rel of directory @p dir (the first 255 bytes, in a static
 * buffer), or NULL when it cannot be opened. */
char *oci_tree_read(const char *dir, const char *rel);

/** A registry login file at @p path, as tb_image_get() reads one:
 * @p registry ("host:port") with @p user_pass ("user:password"). */
void oci_auth_file(const char *path, const char *registry, const char *user_pass);

#endif
