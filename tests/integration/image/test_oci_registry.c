/*
 * test_oci_registry.c: images pulled from a real OCI registry (Debian's
 * docker-registry, started by deploy/local/services) into the image
 * cache (worker/image/image.h). The images are real too: built with
 * umoci (busybox-static; a second layer that deletes a file and replaces
 * a directory, so it holds a whiteout and an opaque directory), pushed
 * with skopeo, once as one manifest, once as a multi-platform index and
 * once as an index with no manifest for this platform;
 * and to a registry behind HTTP Basic, with and without its login; once
 * pulled there with the login, not served from the cache without it.
 * Skips without TASKBOX_TEST_REGISTRY (deploy/local/services env), umoci
 * or skopeo; as root (the tree keeps the layers' owners).
 */
#include "image.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static char base[64] = "/tmp/tb-oci-registry-test-XXXXXX";
static char layout[128], cache_dir[128], creds[128];
static const char *reg, *reg_auth, *reg_creds;

static void sh(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		fail_msg("failed: %s", cmd);
}

static const char *read_line(const char *path)
{
	static char buf[200];
	FILE *f = fopen(path, "r");
	if (!f || !fgets(buf, sizeof(buf), f))
		fail_msg("cannot read %s", path);
	fclose(f);
	buf[strcspn(buf, "\n")] = '\0';
	return buf;
}

/* Pushes the layout's tag "t" to @p registry as test/app:@p tag (all
 * platforms of an index with @p all); @return the pushed digest. */
static const char *push(const char *registry, const char *tag, int all, const char *login)
{
	static char digest[200];
	char file[200];
	snprintf(file, sizeof(file), "%s/digest", base);
	sh("skopeo copy -q %s --dest-tls-verify=false %s%s --digestfile %s oci:%s:t "
	   "docker://%s/test/app:%s",
	   all ? "--all" : "", login ? "--dest-creds " : "", login ? login : "", file, layout,
	   registry, tag);
	snprintf(digest, sizeof(digest), "%s", read_line(file));
	return digest;
}

static int pull(const char *registry, const char *digest, const char *credentials, tb_image_t *img,
		tb_error_t *err)
{
	char text[400];
	tb_image_cache_t *c;
	tb_image_ref_t r;
	snprintf(text, sizeof(text), "%s/test/app@%s", registry, digest);
	if (tb_image_ref_parse(&r, text, err) < 0)
		fail_msg("%s", err->msg);
	if (tb_image_cache_open(&c, cache_dir, 1 << 30, err) < 0)
		fail_msg("%s", err->msg);
	int rc = tb_image_get(c, &r, 256 << 20, credentials, img, err);
	tb_image_cache_close(c);
	return rc;
}

static int exists_in(const tb_image_t *img, const char *rel)
{
	char path[4400];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", img->tree, rel);
	return lstat(path, &st) == 0;
}

static void test_oci_registry__a_real_image_pulled_and_unpacked(void **state)
{
	tb_image_t img;
	tb_error_t err;
	(void)state;
	const char *digest = push(reg, "1", 0, NULL);
	if (pull(reg, digest, NULL, &img, &err) != 0)
		fail_msg("%s", err.msg);
	assert_true(exists_in(&img, "bin/busybox"));
	assert_true(exists_in(&img, "etc/kept"));
	assert_false(exists_in(&img, "etc/gone")); /* a whiteout */
	assert_false(exists_in(&img, "data/old")); /* an opaque directory */
	assert_true(exists_in(&img, "data/new"));
	assert_int_equal(img.layers.n, 2);
	assert_string_equal(img.digest, digest);
	tb_image_release(&img);
}

static void test_oci_registry__a_multi_platform_index(void **state)
{
	tb_image_t img;
	tb_error_t err;
	(void)state;
	/* the layout's index, now naming the manifest for two platforms */
	sh("cd %s && python3 - <<'PY'\n"
	   "import json\n"
	   "ix = json.load(open('index.json'))\n"
	   "m = ix['manifests'][0]\n"
	   "one = dict(m, platform={'os': 'linux', 'architecture': 's390x'})\n"
	   "two = dict(m, platform={'os': 'linux', 'architecture': 'amd64'})\n"
	   "three = dict(m, platform={'os': 'linux', 'architecture': 'arm64', 'variant': 'v8'})\n"
	   "for x in (one, two, three): x.pop('annotations', None)\n"
	   "inner = {'schemaVersion': 2, 'mediaType': 'application/vnd.oci.image.index.v1+json',"
	   " 'manifests': [one, two, three]}\n"
	   "import hashlib\n"
	   "data = json.dumps(inner).encode()\n"
	   "d = hashlib.sha256(data).hexdigest()\n"
	   "open('blobs/sha256/' + d, 'wb').write(data)\n"
	   "ix['manifests'].append({'mediaType': 'application/vnd.oci.image.index.v1+json',"
	   " 'digest': 'sha256:' + d, 'size': len(data),"
	   " 'annotations': {'org.opencontainers.image.ref.name': 'multi'}})\n"
	   "foreign = dict(inner, manifests=[one])\n"
	   "data = json.dumps(foreign).encode()\n"
	   "d = hashlib.sha256(data).hexdigest()\n"
	   "open('blobs/sha256/' + d, 'wb').write(data)\n"
	   "ix['manifests'].append({'mediaType': 'application/vnd.oci.image.index.v1+json',"
	   " 'digest': 'sha256:' + d, 'size': len(data),"
	   " 'annotations': {'org.opencontainers.image.ref.name': 'foreign'}})\n"
	   "json.dump(ix, open('index.json', 'w'))\n"
	   "PY",
	   layout);
	char file[200];
	snprintf(file, sizeof(file), "%s/digest", base);
	sh("skopeo copy -q --all --dest-tls-verify=false --digestfile %s oci:%s:multi "
	   "docker://%s/test/app:multi",
	   file, layout, reg);
	char index[200];
	snprintf(index, sizeof(index), "%s", read_line(file));
	if (pull(reg, index, NULL, &img, &err) != 0)
		fail_msg("%s", err.msg);
	assert_string_not_equal(img.digest, index); /* this platform's manifest */
	assert_true(exists_in(&img, "bin/busybox"));
	tb_image_release(&img);
	/* an index with no entry for this platform: the image is wrong */
	sh("skopeo copy -q --all --dest-tls-verify=false --digestfile %s oci:%s:foreign "
	   "docker://%s/test/app:foreign",
	   file, layout, reg);
	snprintf(index, sizeof(index), "%s", read_line(file));
	assert_int_equal(pull(reg, index, NULL, &img, &err), TB_EPOISON);
	if (!strstr(err.msg, "has no manifest for linux/") || !strstr(err.msg, "linux/s390x"))
		fail_msg("a foreign index said: %s", err.msg);
}

static void test_oci_registry__a_registry_behind_a_login(void **state)
{
	tb_image_t img;
	tb_error_t err;
	(void)state;
	const char *digest = push(reg_auth, "1", 0, reg_creds);
	char d[200];
	snprintf(d, sizeof(d), "%s", digest);
	assert_int_equal(pull(reg_auth, d, NULL, &img, &err), TB_EPOISON);
	assert_non_null(strstr(err.msg, "wants a login"));
	sh("printf '{\"auths\":{\"%s\":{\"auth\":\"%%s\"}}}' $(printf %%s '%s' | base64 -w0) > %s",
	   reg_auth, reg_creds, creds);
	if (pull(reg_auth, d, creds, &img, &err) != 0)
		fail_msg("%s", err.msg);
	assert_true(exists_in(&img, "bin/busybox"));
	tb_image_release(&img);
}

/*
 * The image pulled with the login, then asked for again from the same
 * cache without a login and with a wrong one: the registry is asked, and
 * refuses both as it would a pull.
 */
static void test_oci_registry__a_cached_image_asks_for_the_login_again(void **state)
{
	tb_image_t img;
	tb_error_t err;
	char d[200], wrong[200];
	(void)state;
	snprintf(d, sizeof(d), "%s", push(reg_auth, "1", 0, reg_creds));
	sh("printf '{\"auths\":{\"%s\":{\"auth\":\"%%s\"}}}' $(printf %%s '%s' | base64 -w0) > %s",
	   reg_auth, reg_creds, creds);
	if (pull(reg_auth, d, creds, &img, &err) != 0)
		fail_msg("%s", err.msg);
	assert_int_equal(img.cached, 0);
	tb_image_release(&img);
	assert_int_equal(pull(reg_auth, d, NULL, &img, &err), TB_EPOISON);
	if (!strstr(err.msg, "wants a login"))
		fail_msg("no login, cached, said: %s", err.msg);
	snprintf(wrong, sizeof(wrong), "%s.wrong", creds);
	sh("printf '{\"auths\":{\"%s\":{\"auth\":\"%%s\"}}}' $(printf %%s 'taskbox-test:guess' | "
	   "base64 -w0) > %s",
	   reg_auth, wrong);
	assert_int_equal(pull(reg_auth, d, wrong, &img, &err), TB_EPOISON);
	if (!strstr(err.msg, "wants a login: the credentials given do not pass"))
		fail_msg("a wrong login, cached, said: %s", err.msg);
	if (pull(reg_auth, d, creds, &img, &err) != 0)
		fail_msg("%s", err.msg);
	assert_int_equal(img.cached, 1);
	tb_image_release(&img);
}

static int fresh_cache(void **state)
{
	char cmd[300];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", cache_dir);
	return system(cmd) == 0 ? 0 : -1;
}

static int setup(void **state)
{
	char cmd[4096];
	(void)state;
	if (!mkdtemp(base))
		return -1;
	snprintf(layout, sizeof(layout), "%s/layout", base);
	snprintf(cache_dir, sizeof(cache_dir), "%s/cache", base);
	snprintf(creds, sizeof(creds), "%s/auth.json", base);
	/* a base layer, then one that removes a file and replaces a directory */
	snprintf(
	    cmd, sizeof(cmd),
	    "set -e; cd %s; umoci init --layout layout; umoci new --image layout:t; "
	    "umoci unpack --rootless --image layout:t b >/dev/null; "
	    "mkdir -p b/rootfs/bin b/rootfs/etc b/rootfs/data; cp /bin/busybox b/rootfs/bin/; "
	    "echo k > b/rootfs/etc/kept; echo g > b/rootfs/etc/gone; echo o > b/rootfs/data/old; "
	    "umoci repack --image layout:t b; rm -rf b; "
	    "umoci unpack --rootless --image layout:t b >/dev/null; "
	    "rm b/rootfs/etc/gone; rm -rf b/rootfs/data; mkdir b/rootfs/data; "
	    "echo n > b/rootfs/data/new; umoci repack --image layout:t b; rm -rf b",
	    base);
	return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_oci_registry__a_real_image_pulled_and_unpacked,
				       fresh_cache),
		cmocka_unit_test_setup(test_oci_registry__a_multi_platform_index, fresh_cache),
		cmocka_unit_test_setup(test_oci_registry__a_registry_behind_a_login, fresh_cache),
		cmocka_unit_test_setup(test_oci_registry__a_cached_image_asks_for_the_login_again,
				       fresh_cache),
	};
	reg = getenv("TASKBOX_TEST_REGISTRY");
	reg_auth = getenv("TASKBOX_TEST_REGISTRY_AUTH");
	reg_creds = getenv("TASKBOX_TEST_REGISTRY_CREDS");
	if (!reg || !reg_auth || !reg_creds) {
		printf("SKIP: no TASKBOX_TEST_REGISTRY* (deploy/local/services env)\n");
		return 77;
	}
	if (geteuid() != 0 || system("command -v umoci skopeo >/dev/null") != 0 ||
	    system("file -L /bin/busybox | grep -q static") != 0) {
		printf("SKIP: needs root, umoci, skopeo and busybox-static "
		       "(deploy/local/install-deps test)\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
