/*
 * test_oci_registry.c: images pulled from a real OCI registry (Debian's
 * docker-registry, started by deploy/local/services) into the image
 * cache (worker/image/image.h). The images are written by the image
 * tests' library (tests/unit/image/oci_testlib.h): two layers, the
 * second deleting a file and replacing a directory (a whiteout and an
 * opaque directory); pushed with skopeo, once as one manifest, once as a
 * multi-platform index and once as an index with no manifest for this
 * platform; and to a registry behind HTTP Basic, with and without its
 * login; once pulled there with the login, not served from the cache
 * without it; a layer of 60 KB of noise read by ranges, in both, the
 * same bytes as whole; the layers' indexes published to the services'
 * S3, pinned in their Redis and found by another cache (skipped without
 * TASKBOX_TEST_S3_* and _REDIS), then the image resolved by a cache that
 * has none of its layers and its root read through FUSE from the
 * registry's ranges (image_fs.h; skipped without /dev/fuse). The same
 * image with eStargz layers (tests/tools/toc-image: their TOC digests
 * annotated) resolved with no index anywhere, all eStargz or mixed with
 * an indexed gzip layer, and its root read the same way; a TOC that is
 * not the one annotated leaves the layer to be pulled whole, one that
 * lies about a chunk's digest fails that file's reads (EIO), the reason
 * kept naming the chunk; and the same of zstd:chunked layers (with
 * libzstd). Skips without TASKBOX_TEST_REGISTRY
 * (deploy/local/services env) or skopeo; as root (the tree keeps the
 * layers' owners).
 */
#include "image.h"
#include "image_fs.h"
#include "oci.h"
#include "oci_testlib.h"
#include "source.h"
#include "tb/ledger.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

static char base[64] = "/tmp/tb-oci-registry-test-XXXXXX";
static char layout[128], cache_dir[128], creds[128];
static const char *reg, *reg_auth, *reg_creds;
static char manifest[72]; /* the layout's image */

/* a base layer, then one that removes a file and replaces a directory */
static const char *const lower[] = {
	"bin/",  "bin/tool=#!/bin/sh\n", "etc/", "etc/kept=k\n", "etc/gone=g\n",
	"data/", "data/old=o\n",         NULL,
};
static const char *const upper[] = {
	"etc/", "etc/.wh.gone", "data/", "data/.wh..wh..opq", "data/new=n\n", NULL,
};

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

/* Pushes the layout's tag @p tag (every platform of an index) to
 * @p registry as test/app:@p tag; @return the pushed digest. */
static const char *push(const char *registry, const char *tag, const char *login)
{
	static char digest[200];
	char file[200];
	snprintf(file, sizeof(file), "%s/digest", base);
	sh("skopeo copy -q --all --dest-tls-verify=false %s%s --digestfile %s oci:%s:%s "
	   "docker://%s/test/app:%s",
	   login ? "--dest-creds " : "", login ? login : "", file, layout, tag, registry, tag);
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

/* The image's tree: the lower layer's files as the upper one left them. */
static void assert_the_tree(const tb_image_t *img)
{
	const char *kept = oci_tree_read(img->tree, "etc/kept");
	assert_non_null(kept);
	assert_string_equal(kept, "k\n");
	assert_non_null(oci_tree_read(img->tree, "bin/tool"));
	assert_null(oci_tree_read(img->tree, "etc/gone")); /* a whiteout */
	assert_null(oci_tree_read(img->tree, "data/old")); /* an opaque directory */
	const char *added = oci_tree_read(img->tree, "data/new");
	assert_non_null(added);
	assert_string_equal(added, "n\n");
	assert_int_equal(img->layers.n, 2);
}

static void test_oci_registry__an_image_pulled_and_unpacked(void **state)
{
	tb_image_t img;
	tb_error_t err;
	(void)state;
	const char *digest = push(reg, "one", NULL);
	assert_string_equal(digest, manifest); /* pushed as written */
	if (pull(reg, digest, NULL, &img, &err) != 0)
		fail_msg("%s", err.msg);
	assert_the_tree(&img);
	assert_string_equal(img.digest, digest);
	tb_image_release(&img);
}

static void test_oci_registry__a_multi_platform_index(void **state)
{
	tb_image_t img;
	tb_error_t err;
	char index[200];
	(void)state;
	snprintf(index, sizeof(index), "%s", push(reg, "multi", NULL));
	if (pull(reg, index, NULL, &img, &err) != 0)
		fail_msg("%s", err.msg);
	assert_string_equal(img.digest, manifest); /* this platform's manifest */
	assert_the_tree(&img);
	tb_image_release(&img);
	/* an index with no entry for this platform: the image is wrong */
	snprintf(index, sizeof(index), "%s", push(reg, "foreign", NULL));
	assert_int_equal(pull(reg, index, NULL, &img, &err), TB_EPOISON);
	if (!strstr(err.msg, "has no manifest for linux/") || !strstr(err.msg, "linux/s390x") ||
	    !strstr(err.msg, "linux/mips64"))
		fail_msg("a foreign index said: %s", err.msg);
}

static void test_oci_registry__a_registry_behind_a_login(void **state)
{
	tb_image_t img;
	tb_error_t err;
	char d[200];
	(void)state;
	snprintf(d, sizeof(d), "%s", push(reg_auth, "one", reg_creds));
	assert_int_equal(pull(reg_auth, d, NULL, &img, &err), TB_EPOISON);
	assert_non_null(strstr(err.msg, "wants a login"));
	if (pull(reg_auth, d, creds, &img, &err) != 0)
		fail_msg("%s", err.msg);
	assert_the_tree(&img);
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
	snprintf(d, sizeof(d), "%s", push(reg_auth, "one", reg_creds));
	if (pull(reg_auth, d, creds, &img, &err) != 0)
		fail_msg("%s", err.msg);
	assert_int_equal(img.cached, 0);
	tb_image_release(&img);
	assert_int_equal(pull(reg_auth, d, NULL, &img, &err), TB_EPOISON);
	if (!strstr(err.msg, "wants a login"))
		fail_msg("no login, cached, said: %s", err.msg);
	snprintf(wrong, sizeof(wrong), "%s.wrong", creds);
	oci_auth_file(wrong, reg_auth, "taskbox-test:guess");
	assert_int_equal(pull(reg_auth, d, wrong, &img, &err), TB_EPOISON);
	if (!strstr(err.msg, "wants a login: the credentials given do not pass"))
		fail_msg("a wrong login, cached, said: %s", err.msg);
	if (pull(reg_auth, d, creds, &img, &err) != 0)
		fail_msg("%s", err.msg);
	assert_int_equal(img.cached, 1);
	tb_image_release(&img);
}

/* The ranges of blob @p layer that @p registry serves (with @p
 * credentials) match the whole blob the pull kept, at random offsets: a
 * 206 with the range asked each time (anything else is refused). */
static void ranges_match(const char *registry, const char *digest, const char *layer,
			 const char *credentials)
{
	char path[400], text[400], buf[20000];
	tb_image_source_t *src;
	tb_image_ref_t r;
	tb_error_t err;
	struct stat st;

	snprintf(path, sizeof(path), "%s/images/blobs/%s", cache_dir, layer + 7);
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fstat(fileno(f), &st), 0);
	size_t size = (size_t)st.st_size;
	char *whole = malloc(size);
	assert_int_equal(fread(whole, 1, size, f), size);
	fclose(f);
	snprintf(text, sizeof(text), "%s/test/app@%s", registry, digest);
	if (tb_image_ref_parse(&r, text, &err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(tb_registry_open(&src, &r, credentials, 10, NULL, &err), 0);
	tb_source_blob_t b = { .src = src };
	snprintf(b.digest, sizeof(b.digest), "%.71s", layer);
	unsigned seed = 42;
	for (int i = 0; i < 64; i++) {
		uint64_t off = i == 0 ? 0 : (uint64_t)rand_r(&seed) % size;
		size_t len = 1 + (size_t)rand_r(&seed) % sizeof(buf);
		size_t expect = off + len > size ? size - off : len;
		int64_t got = tb_image_source_fetch(&b, off, buf, len, &err);
		if (got < 0)
			fail_msg("%s: %s", registry, err.msg);
		assert_int_equal(got, expect);
		assert_memory_equal(buf, whole + off, expect);
	}
	src->close(src);
	free(whole);
}

/*
 * A real registry serves a layer by ranges (206, the range asked) with
 * the same bytes as the whole blob, at random offsets: open, and behind
 * its Basic login.
 */
static void test_oci_registry__a_layer_read_by_ranges_is_the_whole_blobs(void **state)
{
	tb_image_t img;
	tb_error_t err;
	char d[200];
	(void)state;
	snprintf(d, sizeof(d), "%s", push(reg, "noise", NULL));
	if (pull(reg, d, NULL, &img, &err) != 0)
		fail_msg("%s", err.msg);
	for (size_t i = 0; i < img.layers.n; i++)
		ranges_match(reg, d, img.layers.items[i], NULL);
	tb_image_release(&img);
	snprintf(d, sizeof(d), "%s", push(reg_auth, "noise", reg_creds));
	if (pull(reg_auth, d, creds, &img, &err) != 0)
		fail_msg("%s", err.msg);
	for (size_t i = 0; i < img.layers.n; i++)
		ranges_match(reg_auth, d, img.layers.items[i], creds);
	tb_image_release(&img);
}

/* Layer index pins over the ledger, as the loop keeps them
 * (worker/loop/worker_open.c). */
static int pins_get(void *arg, const char *layer, char out[72], tb_error_t *err)
{
	char name[96];
	snprintf(name, sizeof(name), "layer-index:%.64s", layer + 7);
	return tb_ledger_pinned(arg, name, out, 72, err);
}

static int pins_put(void *arg, const char *layer, const char *digest, char out[72], tb_error_t *err)
{
	char name[96];
	snprintf(name, sizeof(name), "layer-index:%.64s", layer + 7);
	return tb_ledger_pin(arg, name, digest, 60000, out, 72, err);
}

/* The fleet's store (the services' S3, a bucket of this run's) and
 * ledger (their Redis, a prefix of this run's); NULL when not running. */
static int fleet(tb_store_t **store, tb_ledger_t **ledger)
{
	const char *endpoint = getenv("TASKBOX_TEST_S3_ENDPOINT"),
		   *redis = getenv("TASKBOX_TEST_REDIS");
	tb_store_config_t cfg = { 0 };
	char url[128], prefix[64];
	tb_error_t err;

	if (!endpoint || !redis)
		return -1;
	setenv("AWS_ACCESS_KEY_ID", getenv("TASKBOX_TEST_S3_ACCESS_KEY"), 1);
	setenv("AWS_SECRET_ACCESS_KEY", getenv("TASKBOX_TEST_S3_SECRET_KEY"), 1);
	snprintf(url, sizeof(url), "s3://tb-layer-index-%d/fleet", (int)getpid());
	cfg.url = url;
	cfg.endpoint = (char *)endpoint;
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	snprintf(prefix, sizeof(prefix), "tbidx%d", (int)getpid());
	if (tb_store_open(store, &cfg, &err) < 0 || tb_store_create_bucket(*store, &err) < 0 ||
	    tb_ledger_open(ledger, redis, prefix, "w-index", &err) < 0)
		fail_msg("%s", err.msg);
	return 0;
}

/* A cache of its own under base, publishing to @p w. */
static tb_image_cache_t *cache_at(const char *name, const tb_layer_indexes_t *w)
{
	char dir[200];
	tb_image_cache_t *c;
	tb_error_t err;
	snprintf(dir, sizeof(dir), "%s/%s", base, name);
	sh("rm -rf %s", dir);
	if (tb_image_cache_open(&c, dir, 1 << 30, &err) < 0 ||
	    tb_image_cache_set_indexes(c, w, &err) < 0)
		fail_msg("%s", err.msg);
	return c;
}

/* Entry @p path of @p ix, read through the index from the registry's
 * ranges of its layer, matches file @p path of @p tree. */
static void read_through(const tb_layer_index_t *ix, tb_image_source_t *src, const char *tree,
			 const char *path)
{
	char file[4400];
	tb_error_t err;
	snprintf(file, sizeof(file), "%s/%s", tree, path);
	for (size_t i = 0; i < ix->nentries; i++) {
		const tb_layer_entry_t *e = &ix->entries[i];
		if (strcmp(e->path, path))
			continue;
		FILE *f = fopen(file, "rb");
		assert_non_null(f);
		char *want = malloc(e->size + 1), *got = malloc(e->size + 1);
		assert_int_equal(fread(want, 1, e->size + 1, f), e->size);
		fclose(f);
		tb_source_blob_t b = { .src = src };
		snprintf(b.digest, sizeof(b.digest), "%s", ix->layer);
		if (tb_layer_index_read(ix, tb_image_source_fetch, &b, e->offset, got, e->size,
					&err) < 0)
			fail_msg("%s", err.msg);
		assert_memory_equal(got, want, e->size);
		free(want);
		free(got);
		return;
	}
	fail_msg("%s: no entry %s", ix->layer, path);
}

/* The test image pushed to registry-auth (its digest into @p d), named
 * in @p r, pulled whole by a first cache publishing to @p w (into
 * @p img), its indexing waited for (@p built: the indexes it made, not
 * those a test before it published). @return that cache */
static tb_image_cache_t *pulled_and_indexed(tb_layer_indexes_t *w, tb_image_ref_t *r,
					    tb_image_t *img, char d[200], uint64_t *built)
{
	char text[400];
	tb_error_t err;

	snprintf(d, 200, "%s", push(reg_auth, "one", reg_creds));
	snprintf(text, sizeof(text), "%s/test/app@%s", reg_auth, d);
	assert_int_equal(tb_image_ref_parse(r, text, &err), 0);
	tb_image_cache_t *first = cache_at("first", w);
	if (tb_image_get(first, r, 256 << 20, creds, img, &err) < 0)
		fail_msg("%s", err.msg);
	tb_image_cache_index_wait(first, built, NULL);
	return first;
}

/*
 * The fleet end to end: a worker pulls the image whole from the registry
 * behind its login, indexing each layer into the services' S3 and
 * pinning it in their Redis; another, with a fresh cache, finds both
 * indexes and reads a file through one from the registry's ranges,
 * the bytes the first worker unpacked. An index forged in the store
 * (another layer's, put in its place) is refused with the reason.
 */
static void test_oci_registry__an_index_published_to_the_fleet_is_found(void **state)
{
	tb_store_t *store = NULL;
	tb_ledger_t *ledger = NULL;
	tb_layer_index_t *ix;
	tb_image_source_t *src;
	tb_image_ref_t r;
	tb_image_t img;
	tb_error_t err;
	(void)state;
	if (fleet(&store, &ledger) < 0)
		skip(); /* no S3 or Redis: deploy/local/services env */
	tb_layer_indexes_t w = { .store = store, .pins = { pins_get, pins_put, ledger } };
	char d[200];
	uint64_t built;
	tb_image_cache_t *first = pulled_and_indexed(&w, &r, &img, d, &built);
	assert_int_equal(built, img.layers.n);
	tb_image_cache_t *second = cache_at("second", &w);
	assert_int_equal(tb_registry_open(&src, &r, creds, 10, NULL, &err), 0);
	if (tb_image_cache_find_index(second, img.layers.items[0], &ix, &err) < 0)
		fail_msg("%s", err.msg);
	read_through(ix, src, img.tree, "etc/kept");
	tb_layer_index_free(ix);
	/* the second layer's index put in the first's place */
	char pin0[72], pin1[72], key0[200], key1[200], *other;
	size_t len;
	assert_int_equal(pins_get(ledger, img.layers.items[0], pin0, &err), 0);
	assert_int_equal(pins_get(ledger, img.layers.items[1], pin1, &err), 0);
	tb_layer_index_key(key0, sizeof(key0), img.layers.items[0], pin0);
	tb_layer_index_key(key1, sizeof(key1), img.layers.items[1], pin1);
	assert_int_equal(tb_store_get_bytes(store, key1, 1 << 26, &other, &len, &err), 0);
	assert_int_equal(tb_store_delete(store, key0, &err), 0);
	assert_int_equal(tb_store_put_bytes(store, key0, other, len, NULL, &err), 0);
	free(other);
	assert_int_equal(tb_image_cache_find_index(second, img.layers.items[0], &ix, &err),
			 TB_EINVAL);
	if (!strstr(err.msg, "the store's index refused"))
		fail_msg("a forged index said: %s", err.msg);
	src->close(src);
	tb_image_release(&img);
	tb_image_cache_close(first);
	tb_image_cache_close(second);
	tb_ledger_close(ledger);
	tb_store_close(store);
}

/* Whether cache directory @p name holds blob @p digest. */
static int has_blob(const char *name, const char *digest)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/%s/images/blobs/%s", base, name, digest + 7);
	return access(path, F_OK) == 0;
}

/* @p l's root served through FUSE from the registry's ranges, moved to
 * @p at; its files are the image's. */
static void read_lazily(const tb_image_lazy_t *l, const char *at)
{
	tb_image_fs_layer_t layers[2];
	tb_image_fs_t *fs;
	tb_error_t err;
	char path[600];
	int mfd;

	for (size_t i = 0; i < 2; i++)
		layers[i] =
		    (tb_image_fs_layer_t){ l->ix[i], tb_image_source_fetch, &l->blobs[i], NULL };
	tb_image_fs_conf_t conf = { .layers = layers, .nlayers = 2, .limits = { 1u << 30, 1000 } };
	if (tb_image_fs_start(&fs, &conf, &mfd, &err) < 0)
		fail_msg("%s", err.msg);
	sh("mkdir -p %s", at);
	assert_int_equal(syscall(SYS_move_mount, mfd, "", AT_FDCWD, at, MOVE_MOUNT_F_EMPTY_PATH),
			 0);
	close(mfd);
	const char *got = oci_tree_read(at, "etc/kept");
	assert_non_null(got);
	assert_string_equal(got, "k\n");
	got = oci_tree_read(at, "data/new");
	assert_non_null(got);
	assert_string_equal(got, "n\n");
	snprintf(path, sizeof(path), "%s/etc/gone", at);
	assert_int_not_equal(access(path, F_OK), 0); /* the whiteout */
	assert_true(tb_image_fs_fetched(fs, 0) + tb_image_fs_fetched(fs, 1) > 0);
	assert_int_equal(umount2(at, MNT_DETACH), 0);
	assert_int_equal(tb_image_fs_error(fs, path, sizeof(path)), 0);
	tb_image_fs_stop(fs);
}

/*
 * An image whose every layer the fleet has indexed is resolved without
 * a byte of its layers by a cache that has none (its manifest and
 * config checked against their digests), and its root read through FUSE
 * from the registry's ranges; once that cache has pulled it whole in the
 * background (tb_image_cache_pull_later, with the login), or
 * for an image the fleet has not indexed, it says to pull it whole.
 */
static void test_oci_registry__an_indexed_image_resolves_without_its_layers(void **state)
{
	tb_store_t *store = NULL;
	tb_ledger_t *ledger = NULL;
	tb_image_lazy_t *l;
	tb_image_ref_t r, noise;
	tb_image_t img;
	tb_error_t err;
	(void)state;
	if (fleet(&store, &ledger) < 0)
		skip(); /* no S3 or Redis: deploy/local/services env */
	tb_layer_indexes_t w = { .store = store, .pins = { pins_get, pins_put, ledger } };
	char d[200], text[400];
	tb_image_cache_t *first = pulled_and_indexed(&w, &r, &img, d, NULL);
	tb_image_cache_t *second = cache_at("lazy", &w);
	if (tb_image_lazy_open(second, &r, creds, &l, &err) != 0)
		fail_msg("not resolved lazily: %s", err.msg);
	assert_string_equal(l->digest, d);
	assert_int_equal(l->layers.n, 2);
	for (size_t i = 0; i < 2; i++) {
		assert_string_equal(l->layers.items[i], img.layers.items[i]);
		assert_string_equal(l->ix[i]->layer, img.layers.items[i]);
		assert_false(has_blob("lazy", img.layers.items[i]));
	}
	assert_true(has_blob("lazy", d));
	if (access("/dev/fuse", R_OK | W_OK) == 0) {
		snprintf(text, sizeof(text), "%s/lazy-root", base);
		read_lazily(l, text);
	}
	tb_image_lazy_free(l);
	/* the indexes are found several at once: the first layer with none
	 * is the one named (here the second: its object gone from the store) */
	char pin1[72], key1[200];
	assert_int_equal(pins_get(ledger, img.layers.items[1], pin1, &err), 0);
	tb_layer_index_key(key1, sizeof(key1), img.layers.items[1], pin1);
	assert_int_equal(tb_store_delete(store, key1, &err), 0);
	assert_int_equal(tb_image_lazy_open(second, &r, creds, &l, &err), 1);
	assert_null(l);
	if (!strstr(err.msg, "layer 1 (") || !strstr(err.msg, "not in the store"))
		fail_msg("a layer with its index gone said: %s", err.msg);
	/* pulled whole behind it, with the login: then the eager root */
	tb_image_cache_pull_later(second, &r, creds, 256 << 20);
	tb_image_cache_pull_later(second, &r, creds, 256 << 20); /* once */
	tb_image_cache_pull_wait(second);
	for (size_t i = 0; i < 2; i++)
		assert_true(has_blob("lazy", img.layers.items[i]));
	assert_int_equal(tb_image_lazy_open(second, &r, creds, &l, &err), 1);
	assert_null(l);
	/* an image no worker indexed */
	snprintf(d, sizeof(d), "%s", push(reg_auth, "noise", reg_creds));
	snprintf(text, sizeof(text), "%s/test/app@%s", reg_auth, d);
	assert_int_equal(tb_image_ref_parse(&noise, text, &err), 0);
	assert_int_equal(tb_image_lazy_open(second, &noise, creds, &l, &err), 1);
	if (!strstr(err.msg, "has no index"))
		fail_msg("an image with no index said: %s", err.msg);
	tb_image_release(&img);
	tb_image_cache_close(first);
	tb_image_cache_close(second);
	tb_ledger_close(ledger);
	tb_store_close(store);
}

/* The layout's image written again with layers @p layers of @p format
 * ("estargz", "zstd:chunked"; with @p options, "" or a hostile one),
 * tagged @p tag, pushed to registry-auth and named in @p r. */
static void toc_pushed(const char *format, const char *layers, const char *options, const char *tag,
		       tb_image_ref_t *r)
{
	char d[72], text[400];
	tb_error_t err;
	oci_toc_image(layout, manifest, format, layers, options, d);
	oci_tag(layout, d, tag);
	assert_string_equal(push(reg_auth, tag, reg_creds), d);
	snprintf(text, sizeof(text), "%s/test/app@%s", reg_auth, d);
	assert_int_equal(tb_image_ref_parse(r, text, &err), 0);
}

/* A cache of its own under base that publishes and finds no index. */
static tb_image_cache_t *plain_cache(const char *name)
{
	char dir[200];
	tb_image_cache_t *c;
	tb_error_t err;
	snprintf(dir, sizeof(dir), "%s/%s", base, name);
	sh("rm -rf %s", dir);
	if (tb_image_cache_open(&c, dir, 1 << 30, &err) < 0)
		fail_msg("%s", err.msg);
	return c;
}

/* @p l's root served through FUSE and moved to @p at: etc/kept fails
 * with EIO (its chunk's digest in the TOC is a lie), data/new reads,
 * and the reason kept names the chunk. */
static void read_lying(const tb_image_lazy_t *l, const char *at)
{
	tb_image_fs_layer_t layers[2];
	tb_image_fs_t *fs;
	tb_error_t err;
	char path[600], msg[1600];
	int mfd;

	for (size_t i = 0; i < 2; i++)
		layers[i] =
		    (tb_image_fs_layer_t){ l->ix[i], tb_image_source_fetch, &l->blobs[i], NULL };
	tb_image_fs_conf_t conf = { .layers = layers, .nlayers = 2, .limits = { 1u << 30, 1000 } };
	if (tb_image_fs_start(&fs, &conf, &mfd, &err) < 0)
		fail_msg("%s", err.msg);
	sh("mkdir -p %s", at);
	assert_int_equal(syscall(SYS_move_mount, mfd, "", AT_FDCWD, at, MOVE_MOUNT_F_EMPTY_PATH),
			 0);
	close(mfd);
	snprintf(path, sizeof(path), "%s/etc/kept", at);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	errno = 0;
	assert_int_equal(read(fd, msg, sizeof(msg)), -1);
	assert_int_equal(errno, EIO);
	close(fd);
	const char *got = oci_tree_read(at, "data/new");
	assert_non_null(got);
	assert_string_equal(got, "n\n");
	assert_int_equal(umount2(at, MNT_DETACH), 0);
	assert_int_equal(tb_image_fs_error(fs, msg, sizeof(msg)), TB_EPOISON);
	if (!strstr(msg, "'etc/kept'") || !strstr(msg, "does not match its digest in the TOC"))
		fail_msg("a lying TOC said: %s", msg);
	tb_image_fs_stop(fs);
}

/*
 * eStargz: the image with both layers eStargz resolves on a cache that
 * has no index and no store of them, each layer by its TOC (fetched by
 * range, checked against the manifest's annotation), and its root reads
 * through FUSE from the registry's ranges; with only its upper layer
 * eStargz, on the fleet's cache, the lower one by the index the fleet
 * pinned. A TOC that is not the one annotated: the layer has neither, so
 * the image is to be pulled whole, saying why. A TOC that lies about a
 * chunk's digest (the annotation that lying TOC's): it resolves, and
 * that file's reads fail, the reason kept naming the chunk.
 */
static void test_oci_registry__estargz_layers_resolve_by_their_tocs(void **state)
{
	tb_store_t *store = NULL;
	tb_ledger_t *ledger = NULL;
	tb_image_lazy_t *l;
	tb_image_ref_t r;
	tb_error_t err;
	char at[300];
	int fuse = access("/dev/fuse", R_OK | W_OK) == 0;
	(void)state;

	toc_pushed("estargz", NULL, "", "toc", &r);
	tb_image_cache_t *c = plain_cache("toc");
	if (tb_image_lazy_open(c, &r, creds, &l, &err) != 0)
		fail_msg("not resolved by its TOCs: %s", err.msg);
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(l->ix[i]->kind, TB_LAYER_INDEX_ESTARGZ);
		assert_false(has_blob("toc", l->layers.items[i]));
	}
	assert_true(l->fetched > 0);
	snprintf(at, sizeof(at), "%s/toc-root", base);
	if (fuse)
		read_lazily(l, at);
	tb_image_lazy_free(l);

	/* a TOC not the one annotated: neither it nor an index */
	toc_pushed("estargz", NULL, "--lie-annotation", "toc-wrong", &r);
	assert_int_equal(tb_image_lazy_open(c, &r, creds, &l, &err), 1);
	assert_null(l);
	if (!strstr(err.msg, "layer 0") || !strstr(err.msg, "as its manifest annotates") ||
	    !strstr(err.msg, "no index"))
		fail_msg("a TOC not annotated said: %s", err.msg);

	/* a TOC that lies about a chunk: served, that file refused */
	toc_pushed("estargz", NULL, "--lie-digest etc/kept", "toc-lie", &r);
	if (tb_image_lazy_open(c, &r, creds, &l, &err) != 0)
		fail_msg("a lying TOC not resolved: %s", err.msg);
	snprintf(at, sizeof(at), "%s/toc-lie-root", base);
	if (fuse)
		read_lying(l, at);
	tb_image_lazy_free(l);
	tb_image_cache_close(c);

	/* mixed: the lower layer by the fleet's index, the upper by its TOC */
	if (fleet(&store, &ledger) < 0)
		return; /* no S3 or Redis: deploy/local/services env */
	tb_layer_indexes_t w = { .store = store, .pins = { pins_get, pins_put, ledger } };
	tb_image_ref_t one;
	tb_image_t img;
	char d[200];
	tb_image_cache_t *first = pulled_and_indexed(&w, &one, &img, d, NULL);
	toc_pushed("estargz", "1", "", "toc-mixed", &r);
	tb_image_cache_t *second = cache_at("toc-mixed", &w);
	if (tb_image_lazy_open(second, &r, creds, &l, &err) != 0)
		fail_msg("a mixed image not resolved: %s", err.msg);
	assert_int_equal(l->ix[0]->kind, TB_LAYER_INDEX_GZIP);
	assert_int_equal(l->ix[1]->kind, TB_LAYER_INDEX_ESTARGZ);
	assert_string_equal(l->layers.items[0], img.layers.items[0]);
	snprintf(at, sizeof(at), "%s/toc-mixed-root", base);
	if (fuse)
		read_lazily(l, at);
	tb_image_lazy_free(l);
	tb_image_release(&img);
	tb_image_cache_close(first);
	tb_image_cache_close(second);
	tb_ledger_close(ledger);
	tb_store_close(store);
}

/*
 * zstd:chunked: the image with both layers zstd:chunked (their TOC's
 * checksum and position annotated) resolves on a cache that has no
 * index, each layer by its TOC (one range, checked against the
 * checksum), and its root reads through FUSE from the registry's ranges;
 * a checksum that is not the TOC's leaves the image to be pulled whole,
 * saying why; a TOC that lies about a chunk's digest fails that file's
 * reads, the reason kept naming the chunk.
 */
static void test_oci_registry__zstd_chunked_layers_resolve_by_their_tocs(void **state)
{
	(void)state;
#ifndef TB_HAVE_ZSTD_CHUNKED
	skip(); /* built without libzstd: such layers are pulled whole */
#else
	tb_image_lazy_t *l;
	tb_image_ref_t r;
	tb_error_t err;
	char at[300];
	int fuse = access("/dev/fuse", R_OK | W_OK) == 0;

	toc_pushed("zstd:chunked", NULL, "", "zstd", &r);
	tb_image_cache_t *c = plain_cache("zstd");
	if (tb_image_lazy_open(c, &r, creds, &l, &err) != 0)
		fail_msg("not resolved by its TOCs: %s", err.msg);
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(l->ix[i]->kind, TB_LAYER_INDEX_ZSTD_CHUNKED);
		assert_false(has_blob("zstd", l->layers.items[i]));
	}
	snprintf(at, sizeof(at), "%s/zstd-root", base);
	if (fuse)
		read_lazily(l, at);
	tb_image_lazy_free(l);

	toc_pushed("zstd:chunked", NULL, "--lie-annotation", "zstd-wrong", &r);
	assert_int_equal(tb_image_lazy_open(c, &r, creds, &l, &err), 1);
	assert_null(l);
	if (!strstr(err.msg, "layer 0") || !strstr(err.msg, "as its manifest annotates"))
		fail_msg("a checksum not the TOC's said: %s", err.msg);

	toc_pushed("zstd:chunked", NULL, "--lie-digest etc/kept", "zstd-lie", &r);
	if (tb_image_lazy_open(c, &r, creds, &l, &err) != 0)
		fail_msg("a lying TOC not resolved: %s", err.msg);
	snprintf(at, sizeof(at), "%s/zstd-lie-root", base);
	if (fuse)
		read_lying(l, at);
	tb_image_lazy_free(l);
	tb_image_cache_close(c);
#endif
}

/* The image with both layers of @p format, tagged @p tag: resolved by its
 * TOCs on a cache of the default budget; on one whose budget is less
 * than its layers' entries together (and each layer's alone), to be
 * pulled whole, saying why, whichever layer's TOC or index passed it. */
static void past_the_budget(const char *format, const char *tag)
{
	tb_image_lazy_t *l;
	tb_image_ref_t r;
	tb_error_t err;

	toc_pushed(format, NULL, "", tag, &r);
	tb_image_cache_t *c = plain_cache(tag);
	if (tb_image_lazy_open(c, &r, creds, &l, &err) != 0)
		fail_msg("not resolved by its TOCs: %s", err.msg);
	size_t n0 = l->ix[0]->nentries, n1 = l->ix[1]->nentries;
	assert_true(n0 > 1 && n1 > 1);
	tb_image_lazy_free(l);
	tb_image_cache_close(c);

	c = plain_cache(tag);
	tb_image_cache_set_lazy_budget(c, 0, n0 + n1 - 1);
	assert_int_equal(tb_image_lazy_open(c, &r, creds, &l, &err), 1);
	assert_null(l);
	if (!strstr(err.msg, "layer 1") || !strstr(err.msg, "the image's layers"))
		fail_msg("an image past its budget said: %s", err.msg);
	tb_image_cache_close(c);
}

/*
 * An image's budget read on demand (TB_IMAGE_TOC_BYTES_MAX,
 * TB_IMAGE_MAX_ENTRIES) is its layers' together, not each one's: an
 * image whose layers' TOCs together list more entries than it is
 * pulled whole, saying why (lowered here, to try it with a small one).
 */
static void test_oci_registry__tocs_together_past_the_images_budget(void **state)
{
	(void)state;
	past_the_budget("estargz", "toc-budget");
#ifdef TB_HAVE_ZSTD_CHUNKED
	past_the_budget("zstd:chunked", "zstd-budget");
#endif
}

static int fresh_cache(void **state)
{
	char cmd[300];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", cache_dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* The layout: the image tagged "one", an index naming it for this
 * platform "multi", one naming it for others only "foreign", one whose
 * layer is 60 KB of noise (gzip cannot shrink it much) "noise"; and the
 * login to the registry behind one. */
static int setup(void **state)
{
	const char *const *layers[] = { lower, upper };
	static char noise[60000]; /* its layer within oci_layer()'s 64 KiB */
	const char *noisy[] = { noise, NULL };
	const char *const *noise_layers[] = { noisy };
	const char *os, *arch, *variant;
	char here[72], foreign[72], noisy_image[72];
	(void)state;
	srand(7);
	memcpy(noise, "noise=", 6);
	for (size_t i = 6; i < sizeof(noise) - 1; i++)
		noise[i] = (char)('!' + rand() % 90);
	if (!mkdtemp(base))
		return -1;
	snprintf(layout, sizeof(layout), "%s/layout", base);
	snprintf(cache_dir, sizeof(cache_dir), "%s/cache", base);
	snprintf(creds, sizeof(creds), "%s/auth.json", base);
	if (oci_layout_init(layout) < 0)
		return -1;
	tb_oci_platform(&os, &arch, &variant);
	oci_image(layout, layers, 2, NULL, manifest);
	oci_index(layout, manifest, arch, here);
	oci_index(layout, manifest, "mips64", foreign);
	oci_tag(layout, manifest, "one");
	oci_tag(layout, here, "multi");
	oci_tag(layout, foreign, "foreign");
	oci_image(layout, noise_layers, 1, NULL, noisy_image);
	oci_tag(layout, noisy_image, "noise");
	oci_auth_file(creds, reg_auth, reg_creds);
	return 0;
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
		cmocka_unit_test_setup(test_oci_registry__an_image_pulled_and_unpacked,
				       fresh_cache),
		cmocka_unit_test_setup(test_oci_registry__a_multi_platform_index, fresh_cache),
		cmocka_unit_test_setup(test_oci_registry__a_registry_behind_a_login, fresh_cache),
		cmocka_unit_test_setup(test_oci_registry__a_cached_image_asks_for_the_login_again,
				       fresh_cache),
		cmocka_unit_test_setup(test_oci_registry__a_layer_read_by_ranges_is_the_whole_blobs,
				       fresh_cache),
		cmocka_unit_test_setup(test_oci_registry__an_index_published_to_the_fleet_is_found,
				       fresh_cache),
		cmocka_unit_test_setup(
		    test_oci_registry__an_indexed_image_resolves_without_its_layers, fresh_cache),
		cmocka_unit_test_setup(test_oci_registry__estargz_layers_resolve_by_their_tocs,
				       fresh_cache),
		cmocka_unit_test_setup(test_oci_registry__tocs_together_past_the_images_budget,
				       fresh_cache),
		cmocka_unit_test_setup(test_oci_registry__zstd_chunked_layers_resolve_by_their_tocs,
				       fresh_cache),
	};
	reg = getenv("TASKBOX_TEST_REGISTRY");
	reg_auth = getenv("TASKBOX_TEST_REGISTRY_AUTH");
	reg_creds = getenv("TASKBOX_TEST_REGISTRY_CREDS");
	if (!reg || !reg_auth || !reg_creds) {
		printf("SKIP: no TASKBOX_TEST_REGISTRY* (deploy/local/services env)\n");
		return 77;
	}
	if (geteuid() != 0 || system("command -v skopeo >/dev/null") != 0) {
		printf("SKIP: needs root and skopeo (deploy/local/install-deps test)\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
