/*
 * test_layer_index_store.c: layer indexes published when an image is
 * pulled whole and found by a worker with no copy of the layers
 * (worker/image/layer_index_store.h), over a store in a directory and
 * pins kept by the test (the loop keeps them in the ledger): published
 * after the pull (by the cache's indexing thread) and found from a
 * second, fresh cache, a file's bytes read
 * through the index from the layer's ranges; not built again when
 * published; a store object that lies (other bytes, another layer's
 * index, a truncated one, none) refused with the reason, and a whole
 * pull then putting the right one back; each outcome counted. As root (the tree keeps the
 * layers' owners); skips otherwise.
 */
#include "image.h"
#include "oci_testlib.h"
#include "source.h"
#include "tb/metrics.h"

#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static char base[64] = "/tmp/tb-layer-index-store-XXXXXX";
static char layout[128], store_dir[128];
#define MAX_UNPACKED (64u << 20)

/* The pins: a worker's word, here a list in memory. */
static struct {
	pthread_mutex_t lock;
	char layer[8][72], digest[8][72];
	int n, puts;
} pins = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int pins_get(void *arg, const char *layer, char out[72], tb_error_t *err)
{
	int rc = TB_ENOTFOUND;
	(void)arg;
	pthread_mutex_lock(&pins.lock);
	for (int i = 0; i < pins.n; i++)
		if (!strcmp(pins.layer[i], layer)) {
			memcpy(out, pins.digest[i], 72);
			rc = 0;
		}
	pthread_mutex_unlock(&pins.lock);
	return rc == 0 ? 0 : tb_error_set(err, rc, "no pin for %s", layer);
}

static int pins_put(void *arg, const char *layer, const char *digest, char out[72], tb_error_t *err)
{
	if (pins_get(arg, layer, out, err) == 0)
		return 0; /* the first stays */
	pthread_mutex_lock(&pins.lock);
	assert_true(pins.n < 8);
	snprintf(pins.layer[pins.n], 72, "%s", layer);
	snprintf(pins.digest[pins.n], 72, "%s", digest);
	pins.n++;
	pins.puts++;
	memcpy(out, digest, 72);
	pthread_mutex_unlock(&pins.lock);
	return 0;
}

static tb_store_t *store;
static const tb_layer_indexes_t *where(void)
{
	static tb_layer_indexes_t w;
	w = (tb_layer_indexes_t){ .store = store, .pins = { pins_get, pins_put, NULL } };
	return &w;
}

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

/* A cache of its own (a worker with no copy of anything), publishing. */
static tb_image_cache_t *fresh_cache(const char *name)
{
	char dir[256], cmd[300];
	tb_image_cache_t *c;
	tb_error_t err;
	snprintf(dir, sizeof(dir), "%s/%s", base, name);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(tb_image_cache_open(&c, dir, 1 << 30, &err), 0);
	assert_int_equal(tb_image_cache_set_indexes(c, where(), &err), 0);
	return c;
}

/* Pulls @p d whole into a fresh cache: how many layers it indexed. */
static unsigned pull_whole(const char *d, const char *name)
{
	tb_image_cache_t *c = fresh_cache(name);
	tb_image_ref_t r = ref_of(d);
	tb_image_t img;
	tb_error_t err;
	uint64_t n, ms;
	if (tb_image_get(c, &r, MAX_UNPACKED, NULL, &img, &err) != 0)
		fail_msg("%s", err.msg);
	tb_image_cache_index_wait(c, &n, &ms); /* after the pull, in the background */
	printf("  pulled in %llu ms; then %llu indexes built in %llu ms\n",
	       (unsigned long long)img.ms, (unsigned long long)n, (unsigned long long)ms);
	tb_image_release(&img);
	tb_image_cache_close(c);
	return (unsigned)n;
}

static const char *const lower[] = { "bin/", "bin/tool=v1", "etc/old=x", NULL };
static const char *const upper[] = { "bin/tool=v2", "etc/one=the upper layer's", NULL };

/* Image @p d of two layers; their digests into @p l0 and @p l1. */
static void two_layers(char d[72], char l0[80], char l1[80])
{
	const char *const *layers[] = { lower, upper };
	char path[300];
	oci_image(layout, layers, 2, NULL, d);
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", layout, d + 7);
	json_t *m = json_load_file(path, 0, NULL);
	json_t *ls = json_object_get(m, "layers");
	assert_int_equal(json_array_size(ls), 2);
	snprintf(l0, 80, "%s", json_string_value(json_object_get(json_array_get(ls, 0), "digest")));
	snprintf(l1, 80, "%s", json_string_value(json_object_get(json_array_get(ls, 1), "digest")));
	json_decref(m);
}

/* The data of entry @p path in @p ix, read through the index from the
 * layer's ranges (a layout's), into a static buffer. */
static const char *read_entry(const tb_layer_index_t *ix, const char *path)
{
	static char buf[256];
	tb_image_source_t *src;
	tb_image_ref_t r = ref_of(ix->layer);
	tb_error_t err;
	assert_int_equal(tb_layout_open(&src, &r, &err), 0);
	tb_source_blob_t b = { .src = src };
	snprintf(b.digest, sizeof(b.digest), "%s", ix->layer);
	for (size_t i = 0; i < ix->nentries; i++) {
		const tb_layer_entry_t *e = &ix->entries[i];
		if (strcmp(e->path, path) || e->size >= sizeof(buf))
			continue;
		if (tb_layer_index_read(ix, tb_image_source_fetch, &b, e->offset, buf, e->size,
					&err) < 0)
			fail_msg("%s", err.msg);
		buf[e->size] = '\0';
		src->close(src);
		return buf;
	}
	src->close(src);
	return NULL;
}

/*
 * A whole pull indexes and publishes each gzip layer; a second worker,
 * with a fresh cache, finds both by their pins and reads a file's bytes
 * through one from the layer's ranges. Pulled whole again, nothing is
 * built again.
 */
static void test_layer_index_store__published_at_pull_found_elsewhere(void **state)
{
	char d[72], l0[80], l1[80];
	tb_layer_index_t *ix;
	tb_error_t err;
	(void)state;
	two_layers(d, l0, l1);
	assert_int_equal(pull_whole(d, "first"), 2);
	assert_int_equal(pins.n, 2);
	tb_image_cache_t *c = fresh_cache("second");
	assert_int_equal(tb_image_cache_find_index(c, l0, &ix, &err), 0);
	assert_string_equal(ix->layer, l0);
	assert_non_null(read_entry(ix, "bin/tool"));
	assert_string_equal(read_entry(ix, "bin/tool"), "v1");
	tb_layer_index_free(ix);
	assert_int_equal(tb_image_cache_find_index(c, l1, &ix, &err), 0);
	assert_string_equal(read_entry(ix, "etc/one"), "the upper layer's");
	tb_layer_index_free(ix);
	/* a layer nobody indexed: none, pulled whole */
	assert_int_equal(tb_image_cache_find_index(c,
						   "sha256:"
						   "00000000000000000000000000000000"
						   "00000000000000000000000000000000",
						   &ix, &err),
			 TB_ENOTFOUND);
	assert_null(ix);
	tb_image_cache_close(c);
	int puts = pins.puts;
	assert_int_equal(pull_whole(d, "third"), 0); /* published: not built again */
	assert_int_equal(pins.puts, puts);
}

/* Puts @p len bytes of @p data at @p key as a producer would: whatever
 * was there removed, the object written with its own checksums. */
static void forge(const char *key, const void *data, size_t len)
{
	tb_error_t err;
	assert_int_equal(tb_store_delete(store, key, &err), 0);
	if (data && tb_store_put_bytes(store, key, data, len, NULL, &err) < 0)
		fail_msg("%s", err.msg);
}

/* The store's object of the index pinned for @p layer: its key, bytes. */
static char *pinned_object(const char *layer, char key[200], size_t *len)
{
	char pin[72], *data;
	tb_error_t err;
	assert_int_equal(pins_get(NULL, layer, pin, &err), 0);
	tb_layer_index_key(key, 200, layer, pin);
	assert_int_equal(tb_store_get_bytes(store, key, 1 << 24, &data, len, &err), 0);
	return data;
}

/*
 * The store is anybody's: what is at an index's key is believed only if
 * it is the pinned encoding. Other bytes, another layer's index, a
 * truncated one and none at all are each refused with the reason (the
 * layer is then pulled whole); a whole pull after puts the right one
 * back, found again.
 */
static void test_layer_index_store__a_lying_store_is_refused(void **state)
{
	char d[72], l0[80], l1[80], key0[200], key1[200];
	tb_layer_index_t *ix;
	tb_error_t err;
	size_t len0, len1;
	(void)state;
	tb_metrics_reset();
	two_layers(d, l0, l1);
	assert_int_equal(pull_whole(d, "first"), 2);
	char *good = pinned_object(l0, key0, &len0);
	char *other = pinned_object(l1, key1, &len1);
	static const char garbage[] = "TBIX not an index at all";
	static const struct {
		int what;
		const char *said;
	} lies[] = {
		{ 0, "the store's index refused" }, /* other bytes */
		{ 1, "the store's index refused" }, /* another layer's index */
		{ 2, "the store's index refused" }, /* truncated */
		{ 3, "not in the store" },          /* gone */
	};
	tb_image_cache_t *c = fresh_cache("second");
	for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
		if (lies[i].what == 0)
			forge(key0, garbage, sizeof(garbage));
		else if (lies[i].what == 1)
			forge(key0, other, len1);
		else if (lies[i].what == 2)
			forge(key0, good, len0 / 2);
		else
			forge(key0, NULL, 0);
		assert_int_equal(tb_image_cache_find_index(c, l0, &ix, &err), TB_EINVAL);
		assert_null(ix);
		printf("  lie %d: %s\n", lies[i].what, err.msg);
		if (!strstr(err.msg, lies[i].said) || !strstr(err.msg, l0))
			fail_msg("lie %d said: %s", lies[i].what, err.msg);
		/* the fallback: pulled whole, which puts the index back */
		assert_int_equal(pull_whole(d, "again"), 1);
		assert_int_equal(tb_image_cache_find_index(c, l0, &ix, &err), 0);
		tb_layer_index_free(ix);
	}
	tb_image_cache_close(c);
	free(good);
	free(other);
	/* each outcome counted for the operator */
	size_t n;
	char *text = tb_metrics_render(&n);
	static const char *const counted[] = {
		"taskbox_image_layer_indexes_total{result=\"published\"} 6",
		"taskbox_image_layer_indexes_total{result=\"refused\"} 4",
		"taskbox_image_layer_indexes_total{result=\"found\"} 4",
	};
	for (size_t i = 0; i < sizeof(counted) / sizeof(counted[0]); i++)
		if (!text || !strstr(text, counted[i]))
			fail_msg("no '%s' in:\n%s", counted[i], text ? text : "(null)");
	free(text);
}

static int reset(void **state)
{
	tb_error_t err;
	char cmd[300];
	(void)state;
	pins.n = pins.puts = 0;
	tb_store_close(store);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", store_dir);
	if (system(cmd) != 0)
		return -1;
	return tb_store_dir_open(&store, store_dir, &err);
}

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(base))
		return -1;
	snprintf(layout, sizeof(layout), "%s/layout", base);
	snprintf(store_dir, sizeof(store_dir), "%s/store", base);
	return oci_layout_init(layout);
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;
	tb_store_close(store);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_layer_index_store__published_at_pull_found_elsewhere,
				       reset),
		cmocka_unit_test_setup(test_layer_index_store__a_lying_store_is_refused, reset),
	};
	if (geteuid() != 0) {
		printf("SKIP: the tree keeps the layers' owners: needs root\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
