/*
 * image_ref.c: parsing an image reference pinned by digest (image_ref.h).
 * The grammar is the OCI distribution spec's, narrowed: a repository's
 * components are lowercase alphanumerics joined by '.', '_', '__' or
 * runs of '-'; a digest here is sha256 only (what registries serve).
 */
#include "tb/image_ref.h"

#include <stdio.h>
#include <string.h>

#define DIGEST_PREFIX "sha256:"

static int is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

int tb_digest_valid(const char *d)
{
	return d && strncmp(d, DIGEST_PREFIX, 7) == 0 && strlen(d) == 7 + 64 &&
	       strspn(d + 7, "0123456789abcdef") == 64;
}

int tb_check_digest(const void *value, char *why, size_t len)
{
	if (tb_digest_valid(value))
		return 0;
	snprintf(why, len, "not a digest (sha256:<64 lowercase hex>)");
	return -1;
}

/* One repository component: [a-z0-9]+ ((\.|_|__|-+)[a-z0-9]+)* */
static int valid_component(const char *s, size_t n)
{
	size_t i = 0;

	if (!n || !is_lower_alnum(s[0]) || !is_lower_alnum(s[n - 1]))
		return 0;
	while (i < n) {
		if (is_lower_alnum(s[i])) {
			i++;
			continue;
		}
		size_t sep = i;
		while (i < n && (s[i] == '-' || s[i] == '_' || s[i] == '.'))
			i++;
		size_t len = i - sep;
		int dashes = strspn(s + sep, "-") == len;
		if (!(dashes || (len == 1) || (len == 2 && s[sep] == '_' && s[sep + 1] == '_')))
			return 0;
	}
	return 1;
}

/* A registry host: a name with a dot or a port, or localhost; [a-zA-Z0-9.-:] */
static int valid_registry(const char *s, size_t n)
{
	int dot = 0, colon = 0;

	if (!n || n >= 256)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '.')
			dot = 1;
		else if (c == ':')
			colon = 1;
		else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			   (c >= '0' && c <= '9') || c == '-' || c == '[' || c == ']'))
			return 0;
	}
	return dot || colon || (n == 9 && !strncmp(s, "localhost", 9));
}

static int parse_layout(tb_image_ref_t *out, const char *text, const char *at, tb_error_t *err)
{
	const char *path = text + strlen(TB_IMAGE_LAYOUT_PREFIX);
	size_t n = (size_t)(at - path);

	out->layout = 1;
	if (path[0] != '/' || n >= sizeof(out->repository))
		return tb_error_set(err, TB_EINVAL,
				    "image '%.300s': an OCI layout is named by its absolute path",
				    text);
	/* plain components only: no ".", "..", or control characters */
	for (const char *c = path + 1; c < at;) {
		const char *e = memchr(c, '/', (size_t)(at - c));
		size_t len = (size_t)((e ? e : at) - c);
		int bad = (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.');
		for (size_t i = 0; i < len && !bad; i++)
			bad = (unsigned char)c[i] < 0x20 || c[i] == 0x7f;
		if (bad)
			return tb_error_set(err, TB_EINVAL,
					    "image '%.300s': the layout's path must be plain (no "
					    "'.' or '..', no control characters)",
					    text);
		c += len + 1;
	}
	memcpy(out->repository, path, n);
	out->repository[n] = '\0';
	while (n > 1 && out->repository[n - 1] == '/')
		out->repository[--n] = '\0';
	return 0;
}

int tb_image_ref_parse(tb_image_ref_t *out, const char *text, tb_error_t *err)
{
	memset(out, 0, sizeof(*out));
	if (strlen(text) >= sizeof(out->text))
		return tb_error_set(err, TB_EINVAL, "image: over %d bytes", TB_IMAGE_REF_MAX - 1);
	snprintf(out->text, sizeof(out->text), "%s", text);
	const char *at = strrchr(text, '@');
	if (!at)
		return tb_error_set(err, TB_EINVAL,
				    "image '%.300s' is not pinned: name it by digest "
				    "(...@sha256:<64 hex>); a tag can move",
				    text);
	if (!tb_digest_valid(at + 1))
		return tb_error_set(err, TB_EINVAL,
				    "image '%.300s': the digest must be sha256:<64 lowercase hex>",
				    text);
	snprintf(out->digest, sizeof(out->digest), "%s", at + 1);
	if (!strncmp(text, TB_IMAGE_LAYOUT_PREFIX, strlen(TB_IMAGE_LAYOUT_PREFIX)))
		return parse_layout(out, text, at, err);

	const char *slash = memchr(text, '/', (size_t)(at - text));
	if (!slash || !valid_registry(text, (size_t)(slash - text)))
		return tb_error_set(err, TB_EINVAL,
				    "image '%.300s' names no registry: write it in full "
				    "(registry.example.com/team/image@sha256:...)",
				    text);
	memcpy(out->registry, text, (size_t)(slash - text));
	/* the repository, then an optional :tag (a reminder only) */
	const char *repo = slash + 1, *end = at;
	const char *colon = memchr(repo, ':', (size_t)(at - repo));
	if (colon) {
		for (const char *t = colon + 1; t < at; t++)
			if (!(is_lower_alnum(*t) || (*t >= 'A' && *t <= 'Z') || *t == '_' ||
			      *t == '.' || *t == '-'))
				return tb_error_set(err, TB_EINVAL, "image '%.300s': bad tag",
						    text);
		end = colon;
	}
	size_t n = (size_t)(end - repo);
	if (!n || n >= sizeof(out->repository))
		return tb_error_set(err, TB_EINVAL, "image '%.300s': no repository", text);
	for (const char *c = repo; c < end;) {
		const char *e = memchr(c, '/', (size_t)(end - c));
		if (!e)
			e = end;
		if (!valid_component(c, (size_t)(e - c)))
			return tb_error_set(err, TB_EINVAL,
					    "image '%.300s': bad repository component '%.*s' "
					    "(lowercase letters and digits, joined by . _ __ or -)",
					    text, (int)(e - c), c);
		c = e + (e < end);
	}
	memcpy(out->repository, repo, n);
	return 0;
}

int tb_check_image_ref(const void *value, char *why, size_t len)
{
	tb_image_ref_t r;
	tb_error_t err;

	if (tb_image_ref_parse(&r, value, &err) == 0)
		return 0;
	snprintf(why, len, "%s", err.msg);
	return -1;
}

int tb_image_ref_allowed(const tb_image_ref_t *ref, const char *prefix)
{
	char full[600];
	size_t n = strlen(prefix);

	while (n && prefix[n - 1] == '/')
		n--;
	if (ref->layout)
		snprintf(full, sizeof(full), "%s", ref->repository);
	else
		snprintf(full, sizeof(full), "%s/%s", ref->registry, ref->repository);
	if (ref->layout && n == 0)
		return prefix[0] == '/'; /* "/" allows every layout */
	return n && !strncmp(full, prefix, n) && (full[n] == '\0' || full[n] == '/');
}
