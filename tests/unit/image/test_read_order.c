/*
 * test_read_order.c: an image's read order (worker/image/read_order.h):
 * made, encoded and decoded back the same; refused with a reason when
 * garbled (a flipped byte, cut short, bytes after it), too big, of
 * another version or another image, naming a span outside its layers or
 * one twice, or recorded against other indexes; kept in a store in a
 * directory: none, recorded once (a second run's does not replace it),
 * a garbled one refused and then replaced; one recorded over other
 * indexes than this host's not used here but left standing. A layer of
 * no span is one.
 */
#include "cache_int.h"
#include "read_order.h"

#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define IMAGE "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define OTHER "sha256:2222222222222222222222222222222222222222222222222222222222222222"

static char base[64] = "/tmp/tb-read-order-XXXXXX";

/* Indexes of three layers with 4, 1 and 9 spans (only their counts). */
static tb_layer_index_t ixs[3] = { { .npoints = 4 }, { .npoints = 1 }, { .npoints = 9 } };
static const tb_layer_index_t *const IX[3] = { &ixs[0], &ixs[1], &ixs[2] };
static const tb_read_span_t SPANS[] = { { 2, 8 }, { 0, 0 }, { 1, 0 }, { 2, 3 }, { 0, 3 } };
#define NSPANS (sizeof(SPANS) / sizeof(SPANS[0]))

/* SPANS of IMAGE, encoded into @p data, @p len. */
static void encoded(uint8_t **data, size_t *len)
{
	tb_read_order_t *o;
	tb_error_t err;

	if (tb_read_order_make(&o, IMAGE, IX, 3, SPANS, NSPANS, &err) < 0)
		fail_msg("make: %s", err.msg);
	assert_int_equal(tb_read_order_encode(o, data, len, &err), 0);
	tb_read_order_free(o);
}

static void test_read_order__round_trip(void **state)
{
	tb_read_order_t *back;
	tb_error_t err;
	uint8_t *data, *again;
	size_t len, n;

	(void)state;
	encoded(&data, &len);
	assert_int_equal(len, 8 + 2 + 2 + 71 + 2 + 4 * 3 + 4 + 6 * NSPANS + 32);
	if (tb_read_order_decode(data, len, IMAGE, &back, &err) < 0)
		fail_msg("decode: %s", err.msg);
	assert_string_equal(back->image, IMAGE);
	assert_int_equal(back->nlayers, 3);
	assert_int_equal(back->npoints[2], 9);
	assert_int_equal(back->n, NSPANS);
	assert_memory_equal(back->spans, SPANS, sizeof(SPANS));
	assert_int_equal(tb_read_order_fits(back, IX, 3, &err), 0);
	assert_int_equal(tb_read_order_encode(back, &again, &n, &err), 0);
	assert_int_equal(n, len);
	assert_memory_equal(again, data, len);
	tb_read_order_free(back);
	free(again);
	/* an empty order is one too (a run that read nothing) */
	tb_read_order_t *o;
	assert_int_equal(tb_read_order_make(&o, IMAGE, IX, 3, NULL, 0, &err), 0);
	assert_int_equal(tb_read_order_encode(o, &again, &n, &err), 0);
	tb_read_order_free(o);
	assert_int_equal(tb_read_order_decode(again, n, IMAGE, &back, &err), 0);
	assert_int_equal(back->n, 0);
	tb_read_order_free(back);
	free(again);
	free(data);
}

/* A layer of no span (a zstd:chunked layer of no file data: directories,
 * links, empty files, whiteouts) is one an order can be recorded for:
 * made, encoded, decoded back the same, fitting its indexes; no span of
 * the order can name it. */
static void test_read_order__a_layer_of_no_span(void **state)
{
	tb_layer_index_t none = { .npoints = 0 };
	const tb_layer_index_t *ix[3] = { &ixs[0], &none, &ixs[2] };
	static const tb_read_span_t spans[] = { { 2, 8 }, { 0, 0 } }, named[] = { { 1, 0 } };
	tb_read_order_t *o, *back;
	tb_error_t err;
	uint8_t *data;
	size_t len;

	(void)state;
	if (tb_read_order_make(&o, IMAGE, ix, 3, spans, 2, &err) < 0)
		fail_msg("make: %s", err.msg);
	assert_int_equal(tb_read_order_encode(o, &data, &len, &err), 0);
	tb_read_order_free(o);
	if (tb_read_order_decode(data, len, IMAGE, &back, &err) < 0)
		fail_msg("decode: %s", err.msg);
	assert_int_equal(back->npoints[1], 0);
	assert_int_equal(back->n, 2);
	assert_int_equal(tb_read_order_fits(back, ix, 3, &err), 0);
	assert_int_equal(tb_read_order_fits(back, IX, 3, &err), TB_EINVAL); /* 1 span there */
	tb_read_order_free(back);
	free(data);
	assert_int_equal(tb_read_order_make(&o, IMAGE, ix, 3, named, 1, &err), TB_EINVAL);
	assert_null(o);
	assert_non_null(strstr(err.msg, "is not in the image"));
}

/* Refit @p d's SHA-256 to its bytes (a forger can): the fields are then
 * what is checked. */
static void reseal(uint8_t *d, size_t len);

static void refused(const uint8_t *d, size_t len, int code, const char *said)
{
	tb_read_order_t *o = (tb_read_order_t *)1;
	tb_error_t err;

	assert_int_equal(tb_read_order_decode(d, len, IMAGE, &o, &err), code);
	assert_null(o);
	printf("  %s\n", err.msg);
	if (!strstr(err.msg, said))
		fail_msg("wanted '%s', said: %s", said, err.msg);
}

static void reseal(uint8_t *d, size_t len)
{
	EVP_Digest(d, len - 32, d + len - 32, NULL, EVP_sha256(), NULL);
}

static void test_read_order__garbled_or_lying_is_refused(void **state)
{
	uint8_t *data, *d;
	size_t len;
	size_t at_spans = 8 + 2 + 2 + 71 + 2 + 4 * 3 + 4;

	(void)state;
	encoded(&data, &len);
	d = malloc(len + 64);
	assert_non_null(d);
#define FRESH() memcpy(d, data, len)
	FRESH();
	d[at_spans + 1] ^= 1; /* a flipped byte */
	refused(d, len, TB_EINVAL, "SHA-256");
	refused(data, len - 7, TB_EINVAL, "SHA-256"); /* cut short */
	refused(data, 20, TB_EINVAL, "too few");
	FRESH();
	memset(d + len, 0, 6); /* a span more than it counts */
	reseal(d, len + 6);
	refused(d, len + 6, TB_EINVAL, "spans in");
	FRESH();
	d[8] = 2; /* a later version: left alone */
	reseal(d, len);
	refused(d, len, TB_EVERSION, "version 2");
	FRESH();
	d[8] = 0;
	reseal(d, len);
	refused(d, len, TB_EINVAL, "version 0");
	FRESH();
	d[0] = 'X';
	reseal(d, len);
	refused(d, len, TB_EINVAL, "no magic");
	FRESH();
	d[at_spans + 2] = 9; /* span 9 of layer 2: it has 9 */
	reseal(d, len);
	refused(d, len, TB_EINVAL, "is not in the image");
	FRESH();
	d[at_spans] = 3; /* layer 3 of 3 */
	reseal(d, len);
	refused(d, len, TB_EINVAL, "is not in the image");
	FRESH();
	memcpy(d + at_spans + 6, d + at_spans, 6); /* the first span twice */
	reseal(d, len);
	refused(d, len, TB_EINVAL, "listed twice");
	FRESH();
	memset(d + 8 + 2 + 2 + 71 + 2, 0, 4); /* a layer of no span, named */
	reseal(d, len);
	refused(d, len, TB_EINVAL, "is not in the image");
	FRESH();
	d[8 + 2 + 2 + 8] = 'x'; /* not a digest */
	reseal(d, len);
	refused(d, len, TB_EINVAL, "not one");
	/* another image's */
	tb_read_order_t *o;
	tb_error_t err;
	assert_int_equal(tb_read_order_decode(data, len, OTHER, &o, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "not of " OTHER));
	/* too big, whatever it holds */
	uint8_t *big = calloc(1, TB_READ_ORDER_BYTES_MAX + 1);
	assert_non_null(big);
	refused(big, TB_READ_ORDER_BYTES_MAX + 1, TB_EINVAL, "at most");
	free(big);
	/* recorded over other indexes: decoded, but does not fit */
	assert_int_equal(tb_read_order_decode(data, len, IMAGE, &o, &err), 0);
	tb_layer_index_t other = { .npoints = 5 };
	const tb_layer_index_t *ix2[3] = { &other, &ixs[1], &ixs[2] };
	assert_int_equal(tb_read_order_fits(o, ix2, 3, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "another index"));
	assert_int_equal(tb_read_order_fits(o, IX, 2, &err), TB_EINVAL);
	tb_read_order_free(o);
	free(d);
	free(data);
}

static void test_read_order__made_only_of_the_indexes_spans(void **state)
{
	static const tb_read_span_t out[] = { { 0, 4 } }, twice[] = { { 0, 1 }, { 0, 1 } };
	tb_read_span_t *many = calloc(TB_READ_ORDER_SPANS_MAX + 10, sizeof(*many));
	tb_layer_index_t huge = { .npoints = TB_READ_ORDER_SPANS_MAX + 10 };
	const tb_layer_index_t *hix[1] = { &huge };
	tb_read_order_t *o;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_read_order_make(&o, IMAGE, IX, 3, out, 1, &err), TB_EINVAL);
	assert_null(o);
	assert_int_equal(tb_read_order_make(&o, IMAGE, IX, 3, twice, 2, &err), TB_EINVAL);
	assert_int_equal(tb_read_order_make(&o, IMAGE, IX, 0, NULL, 0, &err), TB_EINVAL);
	/* past SPANS_MAX: the first ones kept */
	assert_non_null(many);
	for (uint32_t i = 0; i < TB_READ_ORDER_SPANS_MAX + 10; i++)
		many[i] = (tb_read_span_t){ 0, i };
	assert_int_equal(
	    tb_read_order_make(&o, IMAGE, hix, 1, many, TB_READ_ORDER_SPANS_MAX + 10, &err), 0);
	assert_int_equal(o->n, TB_READ_ORDER_SPANS_MAX);
	uint8_t *data;
	size_t len;
	assert_int_equal(tb_read_order_encode(o, &data, &len, &err), 0);
	assert_true(len <= TB_READ_ORDER_BYTES_MAX);
	tb_read_order_free(o);
	assert_int_equal(tb_read_order_decode(data, len, IMAGE, &o, &err), 0);
	tb_read_order_free(o);
	free(data);
	free(many);
}

static void test_read_order__kept_in_the_store(void **state)
{
	char dir[128], key[100], *got = NULL;
	tb_read_order_t *o, *mine, *theirs;
	tb_store_t *store;
	tb_error_t err;
	size_t len;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/store", base);
	assert_int_equal(tb_store_dir_open(&store, dir, &err), 0);
	assert_int_equal(tb_read_order_find(store, IMAGE, IX, 3, &o, &err), TB_ENOTFOUND);
	assert_null(o);
	assert_int_equal(tb_read_order_make(&mine, IMAGE, IX, 3, SPANS, NSPANS, &err), 0);
	assert_int_equal(tb_read_order_publish(store, mine, 0, &err), 0);
	tb_read_order_key(key, sizeof(key), IMAGE);
	assert_string_equal(key, "image-orders/1111111111111111111111111111111111111111111111111111"
				 "111111111111");
	/* found as recorded */
	if (tb_read_order_find(store, IMAGE, IX, 3, &o, &err) < 0)
		fail_msg("find: %s", err.msg);
	assert_int_equal(o->n, NSPANS);
	assert_memory_equal(o->spans, SPANS, sizeof(SPANS));
	tb_read_order_free(o);
	/* a second run's does not replace it */
	assert_int_equal(tb_read_order_make(&theirs, IMAGE, IX, 3, SPANS + 1, 2, &err), 0);
	assert_int_equal(tb_read_order_publish(store, theirs, 0, &err), TB_EEXIST);
	assert_int_equal(tb_read_order_find(store, IMAGE, IX, 3, &o, &err), 0);
	assert_int_equal(o->n, NSPANS);
	tb_read_order_free(o);
	/* over other indexes: not this host's, not refused */
	tb_layer_index_t other = { .npoints = 5 };
	const tb_layer_index_t *ix2[3] = { &other, &ixs[1], &ixs[2] };
	assert_int_equal(tb_read_order_find(store, IMAGE, ix2, 3, &o, &err), TB_ECONFLICT);
	assert_null(o);
	assert_non_null(strstr(err.msg, "does not fit this host's indexes"));
	/* garbled in the store: refused with the reason, then replaced */
	assert_int_equal(tb_store_get_bytes(store, key, 1 << 20, &got, &len, &err), 0);
	got[len / 2] ^= 0x10;
	assert_int_equal(tb_store_delete(store, key, &err), 0);
	assert_int_equal(tb_store_put_bytes(store, key, got, len, NULL, &err), 0);
	free(got);
	assert_int_equal(tb_read_order_find(store, IMAGE, IX, 3, &o, &err), TB_EINVAL);
	printf("  %s\n", err.msg);
	assert_non_null(strstr(err.msg, "SHA-256"));
	assert_int_equal(tb_read_order_publish(store, theirs, 1, &err), 0);
	assert_int_equal(tb_read_order_find(store, IMAGE, IX, 3, &o, &err), 0);
	assert_int_equal(o->n, 2);
	tb_read_order_free(o);
	/* too big in the store */
	uint8_t *big = calloc(1, TB_READ_ORDER_BYTES_MAX + 1);
	assert_int_equal(tb_store_delete(store, key, &err), 0);
	assert_int_equal(
	    tb_store_put_bytes(store, key, big, TB_READ_ORDER_BYTES_MAX + 1, NULL, &err), 0);
	free(big);
	assert_int_equal(tb_read_order_find(store, IMAGE, IX, 3, &o, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "too big"));
	tb_read_order_free(mine);
	tb_read_order_free(theirs);
	tb_store_close(store);
}

static int pins_none(void *arg, const char *layer, char out[72], tb_error_t *err)
{
	(void)arg;
	(void)layer;
	(void)out;
	return tb_error_set(err, TB_ENOTFOUND, "no pins here");
}

static int pins_refuse(void *arg, const char *layer, const char *digest, char out[72],
		       tb_error_t *err)
{
	(void)arg;
	(void)layer;
	(void)digest;
	(void)out;
	return tb_error_set(err, TB_EIO, "no pins here");
}

/* A cache in @p dir whose read orders are kept in @p store. */
static tb_image_cache_t *cache_over(const char *dir, tb_store_t *store)
{
	tb_layer_indexes_t w = { .store = store, .pins = { pins_none, pins_refuse, NULL } };
	tb_image_cache_t *c;
	tb_error_t err;
	if (tb_image_cache_open(&c, dir, 1 << 20, &err) < 0 ||
	    tb_image_cache_set_indexes(c, &w, &err) < 0)
		fail_msg("cache: %s", err.msg);
	return c;
}

/* The order kept for IMAGE, encoded, into @p bytes (to free). */
static size_t kept(tb_store_t *store, char **bytes)
{
	char key[100];
	size_t len = 0;
	tb_error_t err;
	tb_read_order_key(key, sizeof(key), IMAGE);
	assert_int_equal(tb_store_get_bytes(store, key, 1 << 20, bytes, &len, &err), 0);
	return len;
}

/*
 * Through the image cache (cache_order.c): an order that decodes but
 * was recorded over other indexes than this host's is not used here
 * (UNFIT) and stands, this host's run not recorded over it; one that
 * fails to decode is refused and replaced by this run's.
 */
static void test_read_order__one_unfit_here_stands(void **state)
{
	char dir[128], *before, *after;
	tb_read_order_t *mine;
	tb_store_t *store;
	tb_error_t err;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/fleet", base);
	assert_int_equal(tb_store_dir_open(&store, dir, &err), 0);
	snprintf(dir, sizeof(dir), "%s/cache", base);
	tb_image_cache_t *c = cache_over(dir, store);
	assert_int_equal(tb_read_order_make(&mine, IMAGE, IX, 3, SPANS, NSPANS, &err), 0);
	assert_int_equal(tb_read_order_publish(store, mine, 0, &err), 0);
	tb_read_order_free(mine);
	size_t len = kept(store, &before);

	/* this host read layer 0 by another index: 5 spans, not 4 */
	tb_layer_index_t other = { .npoints = 5 };
	tb_layer_index_t *ix2[3] = { &other, &ixs[1], &ixs[2] };
	tb_image_lazy_t l = { .ix = ix2, .layers = { .n = 3 } };
	snprintf(l.digest, sizeof(l.digest), "%s", IMAGE);
	tb_image_lazy_find_order(c, &l);
	assert_int_equal(l.order_state, TB_IMAGE_ORDER_UNFIT);
	assert_null(l.order);
	static const tb_read_span_t here[] = { { 0, 4 }, { 2, 1 } };
	tb_image_cache_record_order(c, &l, here, 2);
	assert_int_equal(kept(store, &after), len);
	assert_memory_equal(after, before, len);
	free(after);

	/* garbled: refused, and this run's replaces it */
	char key[100];
	tb_read_order_key(key, sizeof(key), IMAGE);
	before[len / 2] ^= 0x10;
	assert_int_equal(tb_store_delete(store, key, &err), 0);
	assert_int_equal(tb_store_put_bytes(store, key, before, len, NULL, &err), 0);
	tb_image_lazy_find_order(c, &l);
	assert_int_equal(l.order_state, TB_IMAGE_ORDER_REFUSED);
	tb_image_cache_record_order(c, &l, here, 2);
	tb_read_order_t *back;
	if (tb_read_order_find(store, IMAGE, (const tb_layer_index_t *const *)ix2, 3, &back, &err) <
	    0)
		fail_msg("the replaced order: %s", err.msg);
	assert_int_equal(back->n, 2);
	assert_memory_equal(back->spans, here, sizeof(here));
	tb_read_order_free(back);
	free(before);
	tb_image_cache_close(c);
	tb_store_close(store);
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(base) ? 0 : -1;
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
		cmocka_unit_test(test_read_order__round_trip),
		cmocka_unit_test(test_read_order__a_layer_of_no_span),
		cmocka_unit_test(test_read_order__one_unfit_here_stands),
		cmocka_unit_test(test_read_order__garbled_or_lying_is_refused),
		cmocka_unit_test(test_read_order__made_only_of_the_indexes_spans),
		cmocka_unit_test(test_read_order__kept_in_the_store),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
