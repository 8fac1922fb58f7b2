/*
 * oci_testlib.c: OCI image layouts written by the tests (oci_testlib.h).
 * The test fails (cmocka) when a file here cannot be written or read.
 */
#include "oci_testlib.h"

#include "tb/encoding.h"

#include <archive.h>
#include <archive_entry.h>
#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

int oci_layout_init(const char *layout)
{
	char cmd[800];
	snprintf(cmd, sizeof(cmd),
		 "rm -rf %s && mkdir -p %s/blobs/sha256 && echo "
		 "'{\"imageLayoutVersion\":\"1.0.0\"}' > %s/oci-layout",
		 layout, layout, layout);
	return system(cmd) == 0 ? 0 : -1;
}

/* Writes @p len bytes as a blob of the layout; its digest into @p d. */
void oci_blob(const char *layout, const void *data, size_t len, char d[72])
{
	unsigned char sum[32];
	char path[300];
	EVP_Digest(data, len, sum, NULL, EVP_sha256(), NULL);
	memcpy(d, "sha256:", 7);
	tb_hex(d + 7, sum, sizeof(sum));
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", layout, d + 7);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	fclose(f);
}

/* A gzip layer of "path=content" files ("dir/" for a directory, "c:" a
 * character device, "u:" a set-user-ID file). */
size_t oci_layer(const char *const *files, char *out, size_t cap)
{
	struct archive *a = archive_write_new();
	size_t used = 0;
	archive_write_set_format_pax_restricted(a);
	archive_write_add_filter_gzip(a);
	archive_write_open_memory(a, out, cap, &used);
	for (; *files; files++) {
		struct archive_entry *e = archive_entry_new();
		const char *f = *files;
		int device = !strncmp(f, "c:", 2), setuid = !strncmp(f, "u:", 2);
		f += device || setuid ? 2 : 0;
		const char *eq = strchr(f, '=');
		char name[256];
		snprintf(name, sizeof(name), "%.*s", eq ? (int)(eq - f) : (int)strlen(f), f);
		archive_entry_set_pathname(e, name);
		archive_entry_set_uid(e, 1000);
		archive_entry_set_gid(e, 1000);
		int dir = name[strlen(name) - 1] == '/';
		archive_entry_set_filetype(e, device ? AE_IFCHR : dir ? AE_IFDIR : AE_IFREG);
		archive_entry_set_perm(e, dir ? 0755 : setuid ? 04755 : 0644);
		archive_entry_set_size(e, eq ? (la_int64_t)strlen(eq + 1) : 0);
		archive_write_header(a, e);
		if (eq)
			archive_write_data(a, eq + 1, strlen(eq + 1));
		archive_entry_free(e);
	}
	archive_write_close(a);
	archive_write_free(a);
	return used;
}

/* An image of the given layers (each NULL-ended file list); its manifest's
 * digest into @p d. @p layer_type: NULL for gzip layers. */
void oci_image(const char *layout, const char *const *const *layers, size_t n,
	       const char *layer_type, char d[72])
{
	static char buf[1 << 16];
	char cfg_d[72], layer_d[8][72], text[4096];
	size_t sizes[8];
	for (size_t i = 0; i < n; i++) {
		sizes[i] = oci_layer(layers[i], buf, sizeof(buf));
		oci_blob(layout, buf, sizes[i], layer_d[i]);
	}
	const char *cfg = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":"
			  "[\"PATH=/bin\",\"LANG=C.UTF-8\"],\"WorkingDir\":\"/home/agent\","
			  "\"User\":\"1000\"},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
	oci_blob(layout, cfg, strlen(cfg), cfg_d);
	int o = snprintf(text, sizeof(text),
			 "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest."
			 "v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config."
			 "v1+json\",\"digest\":\"%s\",\"size\":%zu},\"layers\":[",
			 cfg_d, strlen(cfg));
	for (size_t i = 0; i < n; i++)
		o += snprintf(text + o, sizeof(text) - (size_t)o,
			      "%s{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%zu}",
			      i ? "," : "", layer_type ? layer_type : OCI_GZ, layer_d[i], sizes[i]);
	snprintf(text + o, sizeof(text) - (size_t)o, "]}");
	oci_blob(layout, text, strlen(text), d);
}

/* Blob @p digest of @p layout into @p out (NUL-ended, at most @p cap - 1
 * bytes); @return its size. */
static size_t read_blob(const char *layout, const char *digest, char *out, size_t cap)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", layout, digest + 7);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	size_t n = fread(out, 1, cap - 1, f);
	fclose(f);
	out[n] = '\0';
	return n;
}

/* An index naming @p manifest for s390x and for @p arch. */
#ifndef TB_PYTHON
#define TB_PYTHON "python3"
#endif

void oci_toc_image(const char *layout, const char *manifest, const char *format, const char *layers,
		   const char *options, char d[72])
{
	char cmd[2048], line[256];
	snprintf(cmd, sizeof(cmd), "'%s' '%s/tests/tools/toc-image' --format %s %s%s %s '%s' '%s'",
		 TB_PYTHON, TB_SOURCE_DIR, format, layers ? "--layers " : "", layers ? layers : "",
		 options, layout, manifest);
	FILE *f = popen(cmd, "r");
	if (!f || !fgets(line, sizeof(line), f))
		fail_msg("no digest from: %s", cmd);
	if (pclose(f) != 0)
		fail_msg("failed: %s", cmd);
	line[strcspn(line, "\n")] = '\0';
	if (strlen(line) != 71)
		fail_msg("'%s' is not a digest, from: %s", line, cmd);
	memcpy(d, line, 72);
}

void oci_index(const char *layout, const char *manifest, const char *arch, char d[72])
{
	static char blob[1 << 16];
	char text[1024];
	size_t size = read_blob(layout, manifest, blob, sizeof(blob));
	snprintf(text, sizeof(text),
		 "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\","
		 "\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
		 "\"digest\":\"%s\",\"size\":%zu,\"platform\":{\"os\":\"linux\",\"architecture\":"
		 "\"s390x\"}},{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
		 "\"digest\":\"%s\",\"size\":%zu,\"platform\":{\"os\":\"linux\",\"architecture\":"
		 "\"%s\"}}]}",
		 manifest, size, manifest, size, arch);
	oci_blob(layout, text, strlen(text), d);
}

void oci_tag(const char *layout, const char *digest, const char *name)
{
	static char blob[1 << 16], index[1 << 16];
	char path[300], entry[512];
	size_t size = read_blob(layout, digest, blob, sizeof(blob));
	const char *type = strstr(blob, "\"mediaType\":\"");
	assert_non_null(type);
	type += strlen("\"mediaType\":\"");
	snprintf(entry, sizeof(entry),
		 "{\"mediaType\":\"%.*s\",\"digest\":\"%s\",\"size\":%zu,\"annotations\":"
		 "{\"org.opencontainers.image.ref.name\":\"%s\"}}",
		 (int)strcspn(type, "\""), type, digest, size, name);
	snprintf(path, sizeof(path), "%s/index.json", layout);
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(index, 1, sizeof(index) - 1, f) : 0;
	if (f)
		fclose(f);
	index[n] = '\0';
	/* the index as this function writes it: its manifests end in "]}" */
	char *end = strstr(index, "]}");
	if (end)
		snprintf(end, sizeof(index) - (size_t)(end - index), ",%s]}", entry);
	else
		snprintf(index, sizeof(index),
			 "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+"
			 "json\",\"manifests\":[%s]}",
			 entry);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_true(fputs(index, f) >= 0);
	fclose(f);
}

void oci_first_layer(const char *layout, const char *manifest, char layer[80])
{
	char text[4096];
	read_blob(layout, manifest, text, sizeof(text));
	char *doc = strstr(text, "\"layers\":[");
	char *l = doc ? strstr(doc, "sha256:") : NULL;
	assert_non_null(l);
	snprintf(layer, 80, "%.71s", l);
}

char *oci_tree_read(const char *dir, const char *rel)
{
	static char buf[256];
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

void oci_auth_file(const char *path, const char *registry, const char *user_pass)
{
	char b64[256];
	assert_true(tb_base64_encode(b64, sizeof(b64), user_pass, strlen(user_pass), 0) > 0);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "{\"auths\":{\"%s\":{\"auth\":\"%s\"}}}\n", registry, b64);
	fclose(f);
}
