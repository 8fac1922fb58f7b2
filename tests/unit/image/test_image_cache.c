/*
 * test_image_cache.c: images made ready from OCI layouts the test writes
 * (worker/image/image.h): the tree, the record, the cache hit; an index
 * and this platform; a blob that does not match its digest, a missing
 * one, a layer that is not one, a hostile layer; eviction of what no one
 * holds; two slots asking at once; what a crash leaves; a cached image
 * served from a layout only when that layout holds it. As root (the
 * tree keeps the layers' owners); skips otherwise.
 */
#include "image.h"
#include "oci_testlib.h"
#include "tb/metrics.h"

#include "tb/encoding.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
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

static char base[64] = "/tmp/tb-imagecache-test-XXXXXX";
static char layout[128], cache_dir[128];
#define MAX_UNPACKED (64u << 20)

static tb_image_ref_t ref_of(const char *digest)
{
	char text[400];
	tb_image_ref_t r;
	tb_error_t err;
	snprintf(text, sizeof(text), "oci-layout:%s@%s", layout, digest);
	if (tb_image_ref_parse(&r, text, &err) < 0)
		fail_msg("%s", err.msg);
	return r;
}

static int present(const char *rel)
{
	char path[1024];
	struct stat st;
	snprintf(path, sizeof(path), "%s/images/%s", cache_dir, rel);
	return lstat(path, &st) == 0;
}

static const char *const lower[] = { "bin/", "bin/tool=v1", "etc/old=x", "home/agent/", NULL };
static const char *const upper[] = { "bin/tool=v2", "etc/.wh.old", NULL };

static void test_image__made_once_then_cached(void **state)
{
	const char *const *layers[] = { lower, upper };
	tb_image_cache_t *c;
	tb_image_t img;
	tb_error_t err;
	char d[72];
	struct stat st;
	(void)state;
	oci_image(layout, layers, 2, NULL, d);
	tb_image_ref_t r = ref_of(d);
	assert_int_equal(tb_image_cache_open(&c, cache_dir, 1 << 30, &err), 0);
	if (tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err) != 0)
		fail_msg("%s", err.msg);
	assert_int_equal(img.cached, 0);
	assert_true(img.fetched > 0);
	uint64_t images, bytes, max;
	tb_image_cache_usage(c, &images, &bytes, &max);
	assert_int_equal(images, 1); /* counted when it was made */
	assert_true(bytes >= img.fetched);
	assert_int_equal(max, 1 << 30);
	assert_string_equal(img.digest, d);
	assert_int_equal(img.layers.n, 2);
	assert_string_equal(oci_tree_read(img.tree, "bin/tool"), "v2");
	assert_null(oci_tree_read(img.tree, "etc/old"));
	assert_int_equal(stat(img.tree, &st), 0);
	assert_int_equal(img.config.nenv, 2);
	assert_string_equal(img.config.env[1], "LANG=C.UTF-8");
	assert_string_equal(img.config.workdir, "/home/agent");
	assert_string_equal(img.config.user, "1000");
	char tree[4096];
	snprintf(tree, sizeof(tree), "%s", img.tree);
	snprintf(tree + strlen(tree), sizeof(tree) - strlen(tree), "/home/agent");
	assert_int_equal(stat(tree, &st), 0);
	assert_int_equal(st.st_uid, 1000); /* the layer's owner, kept */
	tb_image_release(&img);
	/* again: from the cache, nothing fetched, the same record */
	assert_int_equal(tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err), 0);
	assert_int_equal(img.cached, 1);
	assert_int_equal(img.fetched, 0);
	assert_int_equal(img.layers.n, 2);
	assert_string_equal(img.config.workdir, "/home/agent");
	tb_image_release(&img);
	tb_image_cache_close(c);
	/* counted: one made (its bytes fetched), one from the cache */
	char *text = tb_metrics_render(NULL);
	assert_non_null(strstr(text, "taskbox_image_gets_total{result=\"made\"} 1\n"));
	assert_non_null(strstr(text, "taskbox_image_gets_total{result=\"cached\"} 1\n"));
	assert_null(strstr(text, "taskbox_image_fetched_bytes_total 0\n"));
	free(text);
}

static void test_image__an_index_gives_this_platforms_manifest(void **state)
{
	const char *const *layers[] = { lower };
	const char *os, *arch, *variant;
	tb_image_cache_t *c;
	tb_image_t img;
	tb_error_t err;
	char m[72], ix[72], other[72];
	(void)state;
	tb_oci_platform(&os, &arch, &variant);
	oci_image(layout, layers, 1, NULL, m);
	oci_index(layout, m, arch, ix);
	oci_index(layout, m, "mips64", other);
	assert_int_equal(tb_image_cache_open(&c, cache_dir, 1 << 30, &err), 0);
	tb_image_ref_t r = ref_of(ix);
	if (tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err) != 0)
		fail_msg("%s", err.msg);
	assert_string_equal(img.digest, m); /* the manifest, not the index */
	tb_image_release(&img);
	r = ref_of(other);
	assert_int_equal(tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err), TB_EPOISON);
	assert_non_null(strstr(err.msg, "has no manifest for linux/"));
	assert_non_null(strstr(err.msg, "linux/mips64"));
	tb_image_cache_close(c);
}

static void test_image__what_is_wrong_with_an_image_is_said(void **state)
{
	static const char *const hostile[] = { "../../escape=x", NULL };
	const char *const *bad_layer[] = { hostile };
	const char *const *layers[] = { lower };
	tb_image_cache_t *c;
	tb_image_t img;
	tb_error_t err;
	char d[72], path[400];
	(void)state;
	assert_int_equal(tb_image_cache_open(&c, cache_dir, 1 << 30, &err), 0);
	/* no such digest in the layout */
	tb_image_ref_t r =
	    ref_of("sha256:0000000000000000000000000000000000000000000000000000000000000000");
	assert_int_equal(tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err), TB_EPOISON);
	assert_non_null(strstr(err.msg, "has no blob"));
	/* a layer whose bytes are not its digest's: the platform's failure */
	static const char *const changed[] = { "only/here=x", NULL };
	const char *const *clayers[] = { changed };
	oci_image(layout, clayers, 1, NULL, d);
	char layer[80];
	oci_first_layer(layout, d, layer);
	snprintf(path, sizeof(path), "%s/blobs/sha256/%.64s", layout, layer + 7);
	FILE *f = fopen(path, "r+"); /* the same length, other bytes */
	fputs("tampered", f);
	fclose(f);
	r = ref_of(d);
	assert_int_equal(tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err), TB_ERETRY);
	assert_non_null(strstr(err.msg, "the bytes received are"));
	f = fopen(path, "a"); /* more bytes than the descriptor says */
	fputs("and more", f);
	fclose(f);
	assert_int_equal(tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err), TB_ERETRY);
	assert_non_null(strstr(err.msg, "more than the"));
	/* a layer of another media type */
	oci_image(layout, layers, 1, "application/vnd.example.not-a-layer", d);
	r = ref_of(d);
	assert_int_equal(tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err), TB_EPOISON);
	assert_non_null(strstr(err.msg, "not a filesystem layer"));
	/* a hostile layer: refused, nothing half made left behind */
	oci_image(layout, bad_layer, 1, NULL, d);
	r = ref_of(d);
	assert_int_equal(tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err), TB_EPOISON);
	assert_non_null(strstr(err.msg, "layer 0"));
	snprintf(path, sizeof(path), "trees/%s", d + 7);
	assert_false(present(path));
	snprintf(path, sizeof(path), "test -z \"$(ls -A %s/images/tmp)\"", cache_dir);
	assert_int_equal(system(path), 0);
	tb_image_cache_close(c);
}

/*
 * A runtime allowed one layout directory is not served an image the
 * cache made from another: a hit needs the named layout to hold the
 * manifest itself, with the digest's bytes.
 */
static void test_image__a_layout_must_hold_a_cached_image_itself(void **state)
{
	const char *const *layers[] = { lower, upper };
	tb_image_cache_t *c;
	tb_image_t img;
	tb_error_t err;
	char d[72], text[400], other[200], cmd[800];
	(void)state;
	oci_image(layout, layers, 2, NULL, d);
	assert_int_equal(tb_image_cache_open(&c, cache_dir, 1 << 30, &err), 0);
	tb_image_ref_t r = ref_of(d);
	if (tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err) != 0)
		fail_msg("%s", err.msg);
	tb_image_release(&img);
	/* another layout, without that manifest */
	snprintf(other, sizeof(other), "%s/other", base);
	assert_int_equal(oci_layout_init(other), 0);
	snprintf(text, sizeof(text), "oci-layout:%s@%s", other, d);
	assert_int_equal(tb_image_ref_parse(&r, text, &err), 0);
	assert_int_equal(tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err), TB_EPOISON);
	if (!strstr(err.msg, "has no blob"))
		fail_msg("a layout without it said: %s", err.msg);
	/* ... with other bytes under its name */
	snprintf(cmd, sizeof(cmd), "echo '{}' > %s/blobs/sha256/%s", other, d + 7);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err), TB_EPOISON);
	if (!strstr(err.msg, "holds other bytes"))
		fail_msg("a layout with other bytes said: %s", err.msg);
	/* ... and with it */
	snprintf(cmd, sizeof(cmd), "cp %s/blobs/sha256/%s %s/blobs/sha256/", layout, d + 7, other);
	assert_int_equal(system(cmd), 0);
	if (tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err) != 0)
		fail_msg("%s", err.msg);
	assert_int_equal(img.cached, 1);
	tb_image_release(&img);
	tb_image_cache_close(c);
}

/*
 * What the layers had that the tree does not keep (a device left out,
 * a set-user-ID bit dropped) is said when the image is made, and again
 * from its record on a cache hit, by a worker that did not make it.
 */
static void test_image__what_its_layers_lost_is_said_on_a_hit_too(void **state)
{
	static const char *const odd[] = { "dev/", "c:dev/null", "u:bin/su=x", NULL };
	const char *const *layers[] = { odd };
	tb_image_cache_t *c;
	tb_image_t img;
	tb_error_t err;
	char d[72];
	(void)state;
	oci_image(layout, layers, 1, NULL, d);
	tb_image_ref_t r = ref_of(d);
	for (int hit = 0; hit < 2; hit++) {
		assert_int_equal(tb_image_cache_open(&c, cache_dir, 1 << 30, &err), 0);
		if (tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err) != 0)
			fail_msg("%s", err.msg);
		assert_int_equal(img.cached, hit);
		assert_int_equal(img.altered.devices, 1);
		assert_string_equal(img.altered.device_path, "dev/null");
		assert_int_equal(img.altered.setid, 1);
		assert_string_equal(img.altered.setid_path, "bin/su");
		assert_int_equal(img.altered.ids, 0);
		assert_string_equal(img.altered.ids_path, "");
		tb_image_release(&img);
		tb_image_cache_close(c);
	}
}

static void test_image__eviction_spares_what_is_held(void **state)
{
	static const char *const a_files[] = { "a=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", NULL };
	static const char *const b_files[] = { "b=bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", NULL };
	const char *const *a_layers[] = { a_files }, *const * b_layers[] = { b_files };
	tb_image_cache_t *c;
	tb_image_t a, b;
	tb_error_t err;
	char da[72], db[72], path[200];
	(void)state;
	oci_image(layout, a_layers, 1, NULL, da);
	oci_image(layout, b_layers, 1, NULL, db);
	/* room for about one image: its blobs and its files */
	assert_int_equal(tb_image_cache_open(&c, cache_dir, 1, &err), 0);
	tb_image_ref_t ra = ref_of(da), rb = ref_of(db);
	assert_int_equal(tb_image_get(c, &ra, MAX_UNPACKED, NULL, &a, &err), 0);
	assert_int_equal(tb_image_get(c, &rb, MAX_UNPACKED, NULL, &b, &err), 0);
	snprintf(path, sizeof(path), "trees/%s", da + 7);
	assert_true(present(path)); /* held: kept, over the size or not */
	tb_image_release(&a);
	tb_image_cache_trim(c);
	assert_false(present(path)); /* let go: evicted */
	char *text = tb_metrics_render(NULL);
	assert_non_null(strstr(text, "taskbox_image_evictions_total 1\n"));
	free(text);
	snprintf(path, sizeof(path), "trees/%s", db + 7);
	assert_true(present(path));
	tb_image_release(&b);
	tb_image_cache_close(c);
}

struct racer {
	tb_image_cache_t *c;
	tb_image_ref_t ref;
	tb_image_t img;
	int rc;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	tb_error_t err;
	r->rc = tb_image_get(r->c, &r->ref, MAX_UNPACKED, NULL, &r->img, &err);
	return NULL;
}

static void test_image__two_slots_at_once_make_it_once(void **state)
{
	static const char *const files[] = { "shared=1", NULL };
	const char *const *layers[] = { files };
	struct racer r[2];
	tb_image_cache_t *c;
	pthread_t t[2];
	tb_error_t err;
	char d[72];
	(void)state;
	oci_image(layout, layers, 1, NULL, d);
	assert_int_equal(tb_image_cache_open(&c, cache_dir, 1 << 30, &err), 0);
	for (int i = 0; i < 2; i++) {
		r[i] = (struct racer){ .c = c, .ref = ref_of(d) };
		pthread_create(&t[i], NULL, race, &r[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(r[0].rc, 0);
	assert_int_equal(r[1].rc, 0);
	assert_int_equal(r[0].img.cached + r[1].img.cached, 1); /* one made it, one waited */
	assert_string_equal(oci_tree_read(r[0].img.tree, "shared"), "1");
	tb_image_release(&r[0].img);
	tb_image_release(&r[1].img);
	tb_image_cache_close(c);
}

static void test_image__what_a_crash_left_is_swept(void **state)
{
	char cmd[600];
	tb_image_cache_t *c;
	tb_error_t err;
	(void)state;
	assert_int_equal(tb_image_cache_open(&c, cache_dir, 1 << 30, &err), 0);
	tb_image_cache_close(c);
	snprintf(cmd, sizeof(cmd),
		 "cd %s/images && mkdir -p tmp/abc.1.2/usr && touch blobs/.tmp-abc-1-2 && "
		 "mkdir -p trees/%064d/half",
		 cache_dir, 7);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(tb_image_cache_open(&c, cache_dir, 1 << 30, &err), 0);
	assert_false(present("tmp/abc.1.2"));
	assert_false(present("blobs/.tmp-abc-1-2"));
	snprintf(cmd, sizeof(cmd), "trees/%064d", 7);
	assert_false(present(cmd));
	tb_image_cache_close(c);
}

static int fresh_cache(void **state)
{
	char cmd[300];
	(void)state;
	tb_metrics_reset();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", cache_dir);
	return system(cmd) == 0 ? 0 : -1;
}

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(base))
		return -1;
	snprintf(layout, sizeof(layout), "%s/layout", base);
	snprintf(cache_dir, sizeof(cache_dir), "%s/cache", base);
	return oci_layout_init(layout);
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
		cmocka_unit_test_setup(test_image__made_once_then_cached, fresh_cache),
		cmocka_unit_test_setup(test_image__an_index_gives_this_platforms_manifest,
				       fresh_cache),
		cmocka_unit_test_setup(test_image__what_is_wrong_with_an_image_is_said,
				       fresh_cache),
		cmocka_unit_test_setup(test_image__eviction_spares_what_is_held, fresh_cache),
		cmocka_unit_test_setup(test_image__two_slots_at_once_make_it_once, fresh_cache),
		cmocka_unit_test_setup(test_image__what_a_crash_left_is_swept, fresh_cache),
		cmocka_unit_test_setup(test_image__a_layout_must_hold_a_cached_image_itself,
				       fresh_cache),
		cmocka_unit_test_setup(test_image__what_its_layers_lost_is_said_on_a_hit_too,
				       fresh_cache),
	};
	if (geteuid() != 0) {
		printf("SKIP: the tree keeps the layers' owners: needs root\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
