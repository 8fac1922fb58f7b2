/*
 * demo_image.c: the demo's OCI image layout (demo_image.h), written the
 * way any layout is: blobs named by their SHA-256 under blobs/sha256/, a
 * gzip tar layer, an image config, a manifest naming both, index.json
 * naming the manifest, and the oci-layout marker.
 */
#include "demo_image.h"

#include "tb/encoding.h"
#include "tb/fsutil.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define AGENT_NAME "taskbox-demo-agent"
#define AGENT_MAX (16u << 20)

int tb_demo_agent_path(char *out, size_t len, tb_error_t *err)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n > 0) {
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			snprintf(out, len, "%s/" AGENT_NAME, self);
			if (access(out, X_OK) == 0)
				return 0;
			snprintf(out, len, "%s/../libexec/taskbox/" AGENT_NAME, self);
			if (access(out, X_OK) == 0)
				return 0;
		}
	}
	return tb_error_set(err, TB_ENOTFOUND,
			    AGENT_NAME " is not next to taskbox nor in libexec/taskbox");
}

/* Writes @p len bytes to the file @p path (made or truncated). */
static int put(const char *path, const void *data, size_t len, tb_error_t *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || tb_write_all(fd, data, len) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return tb_error_errno(err, TB_EIO, e, "demo image: %s", path);
	}
	close(fd);
	return 0;
}

/* Writes @p len bytes as a blob of the layout at @p dir; digest into @p d. */
static int blob(const char *dir, const void *data, size_t len, char d[72], tb_error_t *err)
{
	unsigned char sum[32];
	char path[PATH_MAX];

	EVP_Digest(data, len, sum, NULL, EVP_sha256(), NULL);
	memcpy(d, "sha256:", 7);
	tb_hex(d + 7, sum, sizeof(sum));
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", dir, d + 7);
	return put(path, data, len, err);
}

/* One tar entry: a directory (@p data NULL, @p len 0) or a file. */
static void entry(struct archive *a, const char *name, const void *data, size_t len, unsigned mode)
{
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, data ? AE_IFREG : AE_IFDIR);
	archive_entry_set_perm(e, mode);
	archive_entry_set_size(e, (la_int64_t)len);
	archive_write_header(a, e);
	if (data)
		archive_write_data(a, data, len);
	archive_entry_free(e);
}

/* The layer: /bin/demo, /etc/image-name, and the usual empty places. */
static int layer(const char *program, char **out, size_t *len, tb_error_t *err)
{
	static const char name[] = "the taskbox demo image\n";
	size_t cap = AGENT_MAX + (1u << 20), used = 0, n;
	char *bin, *buf;

	if (tb_read_file(program, AGENT_MAX - 1, &bin, &n, err) < 0)
		return tb_error_prefix(err, "demo image");
	if (!n || !(buf = malloc(cap))) {
		free(bin);
		return tb_error_set(err, TB_EIO, "demo image: %s: %s", program,
				    n ? "out of memory" : "empty");
	}
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	archive_write_add_filter_gzip(a);
	archive_write_open_memory(a, buf, cap, &used);
	entry(a, "bin/", NULL, 0, 0755);
	entry(a, "bin/demo", bin, n, 0755);
	entry(a, "etc/", NULL, 0, 0755);
	entry(a, "etc/image-name", name, sizeof(name) - 1, 0644);
	entry(a, "tmp/", NULL, 0, 01777);
	archive_write_close(a);
	archive_write_free(a);
	free(bin);
	*out = buf;
	*len = used;
	return 0;
}

int tb_demo_image(const char *dir, const char *program, char digest[72], tb_error_t *err)
{
	static const char config[] =
	    "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[\"PATH=/bin\"]},"
	    "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
	char path[PATH_MAX], layer_d[72], config_d[72], manifest[1024], index[1024], *bytes = NULL;
	size_t len = 0;
	int rc;

	snprintf(path, sizeof(path), "%s/blobs/sha256/x", dir);
	if (tb_mkdir_parents(path) < 0)
		return tb_error_errno(err, TB_EIO, errno, "demo image: %s", dir);
	if ((rc = layer(program, &bytes, &len, err)) < 0)
		return rc;
	rc = blob(dir, bytes, len, layer_d, err);
	free(bytes);
	if (rc < 0 || (rc = blob(dir, config, sizeof(config) - 1, config_d, err)) < 0)
		return rc;
	int m = snprintf(manifest, sizeof(manifest),
			 "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest."
			 "v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config."
			 "v1+json\",\"digest\":\"%s\",\"size\":%zu},\"layers\":[{\"mediaType\":"
			 "\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"%s\","
			 "\"size\":%zu}]}",
			 config_d, sizeof(config) - 1, layer_d, len);
	if ((rc = blob(dir, manifest, (size_t)m, digest, err)) < 0)
		return rc;
	int k = snprintf(index, sizeof(index),
			 "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci."
			 "image.manifest.v1+json\",\"digest\":\"%s\",\"size\":%d,\"annotations\":{"
			 "\"org.opencontainers.image.ref.name\":\"demo\"}}]}\n",
			 digest, m);
	const struct {
		const char *name, *text;
		size_t len;
	} files[] = { { "index.json", index, (size_t)k },
		      { "oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}\n", 31 } };
	for (size_t i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i].name);
		if ((rc = put(path, files[i].text, files[i].len, err)) < 0)
			return rc;
	}
	return 0;
}
