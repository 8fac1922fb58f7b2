/*
 * oci.c: the image's JSON documents (oci.h), read with jansson.
 */
#include "oci.h"
#include "layer_estargz.h"
#include "layer_zstd_chunked.h"

#include "tb/image_ref.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#define MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"

/* The layer media types, and how each is compressed. */
static const struct {
	const char *type;
	tb_oci_compression_t how;
} layer_types[] = {
	{ "application/vnd.oci.image.layer.v1.tar", TB_OCI_TAR },
	{ "application/vnd.oci.image.layer.v1.tar+gzip", TB_OCI_GZIP },
	{ "application/vnd.oci.image.layer.v1.tar+zstd", TB_OCI_ZSTD },
	{ "application/vnd.oci.image.layer.nondistributable.v1.tar", TB_OCI_TAR },
	{ "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", TB_OCI_GZIP },
	{ "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd", TB_OCI_ZSTD },
	{ "application/vnd.docker.image.rootfs.diff.tar.gzip", TB_OCI_GZIP },
	{ "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", TB_OCI_GZIP },
};

void tb_oci_platform(const char **os, const char **arch, const char **variant)
{
	static const struct {
		const char *machine, *arch, *variant;
	} names[] = {
		{ "x86_64", "amd64", "" },    { "aarch64", "arm64", "v8" },
		{ "armv7l", "arm", "v7" },    { "i686", "386", "" },
		{ "ppc64le", "ppc64le", "" }, { "s390x", "s390x", "" },
		{ "riscv64", "riscv64", "" },
	};
	static struct utsname u;
	*os = "linux";
	*arch = "amd64";
	*variant = "";
	if (uname(&u) < 0)
		return;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(u.machine, names[i].machine)) {
			*arch = names[i].arch;
			*variant = names[i].variant;
		}
}

/* Parses @p doc as a JSON object. */
static json_t *load(const char *doc, size_t len, const char *what, tb_error_t *err)
{
	json_error_t je;
	json_t *o;

	if (len > TB_OCI_DOC_MAX) {
		tb_error_set(err, TB_ETOOBIG, "image %s: over %u bytes", what, TB_OCI_DOC_MAX);
		return NULL;
	}
	o = json_loadb(doc, len, JSON_REJECT_DUPLICATES, &je);
	if (!o || !json_is_object(o)) {
		tb_error_set(err, TB_EINVAL, "image %s: not a JSON object (%s)", what,
			     o ? "another value" : je.text);
		json_decref(o);
		return NULL;
	}
	return o;
}

int tb_oci_kind(tb_oci_kind_t *kind, const char *doc, size_t len, const char *content_type,
		tb_error_t *err)
{
	json_t *o = load(doc, len, "manifest", err);
	if (!o)
		return err->code;
	const char *mt = json_string_value(json_object_get(o, "mediaType"));
	char ct[160] = "";
	if (!mt && content_type) { /* a registry's answer: "type; charset=..." */
		snprintf(ct, sizeof(ct), "%.*s", (int)strcspn(content_type, "; "), content_type);
		mt = ct;
	}
	if (!mt && json_is_array(json_object_get(o, "manifests")))
		mt = MT_OCI_INDEX; /* an OCI index need not say its type */
	if (!mt && json_is_array(json_object_get(o, "layers")))
		mt = MT_OCI_MANIFEST;
	int rc = 0;
	if (mt && (!strcmp(mt, MT_OCI_INDEX) || !strcmp(mt, MT_DOCKER_LIST)))
		*kind = TB_OCI_INDEX;
	else if (mt && (!strcmp(mt, MT_OCI_MANIFEST) || !strcmp(mt, MT_DOCKER_MANIFEST)))
		*kind = TB_OCI_MANIFEST;
	else
		rc = tb_error_set(err, TB_EINVAL,
				  "image: '%.100s' is not an image index or manifest (media type)",
				  mt ? mt : "no media type");
	json_decref(o);
	return rc;
}

/* A descriptor's digest and size. */
static int desc(tb_oci_desc_t *d, json_t *o, const char *what, tb_error_t *err)
{
	const char *dg = json_string_value(json_object_get(o, "digest"));
	json_t *size = json_object_get(o, "size");

	if (!tb_digest_valid(dg))
		return tb_error_set(err, TB_EINVAL, "image %s: digest '%.80s' is not sha256", what,
				    dg ? dg : "(none)");
	if (!json_is_integer(size) || json_integer_value(size) < 0)
		return tb_error_set(err, TB_EINVAL, "image %s: no size", what);
	snprintf(d->digest, sizeof(d->digest), "%s", dg);
	d->size = (uint64_t)json_integer_value(size);
	return 0;
}

int tb_oci_pick(tb_oci_desc_t *out, const char *doc, size_t len, tb_error_t *err)
{
	const char *os, *arch, *variant;
	char seen[300] = "";
	json_t *o = load(doc, len, "index", err), *m;
	size_t i;
	int rc = TB_ENOTFOUND;

	if (!o)
		return err->code;
	tb_oci_platform(&os, &arch, &variant);
	json_t *list = json_object_get(o, "manifests");
	if (!json_is_array(list)) {
		json_decref(o);
		return tb_error_set(err, TB_EINVAL, "image index: no manifests");
	}
	json_array_foreach(list, i, m)
	{
		json_t *p = json_object_get(m, "platform");
		const char *mos = json_string_value(json_object_get(p, "os"));
		const char *march = json_string_value(json_object_get(p, "architecture"));
		const char *mvar = json_string_value(json_object_get(p, "variant"));
		if (mos && march && strlen(seen) < sizeof(seen) - 40)
			snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen), "%s%.16s/%.16s",
				 seen[0] ? ", " : "", mos, march);
		if (!mos || !march || strcmp(mos, os) || strcmp(march, arch))
			continue;
		if (mvar && variant[0] && strcmp(mvar, variant))
			continue;
		rc = desc(out, m, "index entry", err);
		break;
	}
	json_decref(o);
	if (rc == TB_ENOTFOUND)
		return tb_error_set(err, TB_ENOTFOUND,
				    "image index has no manifest for %s/%s (it has: %s)", os, arch,
				    seen[0] ? seen : "none");
	return rc;
}

/* A gzip layer's eStargz TOC digest annotation, kept if it is one; a
 * zstd layer's zstd:chunked manifest checksum and position. */
static void toc_digest(tb_oci_desc_t *d, json_t *layer)
{
	json_t *notes = json_object_get(layer, "annotations");
	int zstd = d->compression == TB_OCI_ZSTD;
	const char *v = json_string_value(json_object_get(
	    notes, zstd ? TB_ZSTD_CHUNKED_ANNOTATION_CHECKSUM : TB_ESTARGZ_ANNOTATION_TOC));
	const char *at =
	    json_string_value(json_object_get(notes, TB_ZSTD_CHUNKED_ANNOTATION_POSITION));
	if ((zstd || d->compression == TB_OCI_GZIP) && v && tb_digest_valid(v))
		snprintf(d->toc_digest, sizeof(d->toc_digest), "%s", v);
	if (zstd && at && strlen(at) < sizeof(d->toc_position))
		snprintf(d->toc_position, sizeof(d->toc_position), "%s", at);
}

int tb_oci_manifest(tb_oci_manifest_t *out, const char *doc, size_t len, tb_error_t *err)
{
	json_t *o = load(doc, len, "manifest", err), *l;
	size_t i;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!o)
		return err->code;
	json_t *layers = json_object_get(o, "layers");
	if ((rc = desc(&out->config, json_object_get(o, "config"), "config", err)) < 0)
		goto out;
	if (!json_is_array(layers) || json_array_size(layers) > TB_OCI_MAX_LAYERS) {
		rc = tb_error_set(err, TB_EINVAL, "image manifest: no layers, or over %d",
				  TB_OCI_MAX_LAYERS);
		goto out;
	}
	json_array_foreach(layers, i, l)
	{
		const char *mt = json_string_value(json_object_get(l, "mediaType"));
		size_t k = 0, n = sizeof(layer_types) / sizeof(layer_types[0]);
		while (k < n && (!mt || strcmp(mt, layer_types[k].type)))
			k++;
		if (k == n) {
			rc = tb_error_set(err, TB_EINVAL,
					  "image manifest: layer %zu is '%.100s', not a filesystem "
					  "layer (tar, gzip or zstd)",
					  i, mt ? mt : "of no media type");
			goto out;
		}
		if ((rc = desc(&out->layers[i], l, "layer", err)) < 0)
			goto out;
		out->layers[i].compression = layer_types[k].how;
		toc_digest(&out->layers[i], l);
		out->nlayers = i + 1;
	}
out:
	json_decref(o);
	return rc;
}

static char *dup_or_null(const char *s)
{
	return s && s[0] ? strdup(s) : NULL;
}

int tb_oci_config(tb_oci_config_t *out, const char *doc, size_t len, tb_error_t *err)
{
	json_t *o = load(doc, len, "config", err), *e;
	size_t i;

	memset(out, 0, sizeof(*out));
	if (!o)
		return err->code;
	json_t *cfg = json_object_get(o, "config"); /* may be absent: no settings */
	json_t *env = json_object_get(cfg, "Env");
	if (json_is_array(env) && json_array_size(env) <= 1024 &&
	    (out->env = calloc(json_array_size(env) + 1, sizeof(char *))))
		json_array_foreach(env, i, e)
		{
			const char *s = json_string_value(e);
			if (s && strchr(s, '=') && strlen(s) < 8192 &&
			    (out->env[out->nenv] = strdup(s)))
				out->nenv++;
		}
	out->workdir = dup_or_null(json_string_value(json_object_get(cfg, "WorkingDir")));
	out->user = dup_or_null(json_string_value(json_object_get(cfg, "User")));
	json_decref(o);
	return 0;
}

void tb_oci_config_free(tb_oci_config_t *c)
{
	for (size_t i = 0; i < c->nenv; i++)
		free(c->env[i]);
	free(c->env);
	free(c->workdir);
	free(c->user);
	memset(c, 0, sizeof(*c));
}
