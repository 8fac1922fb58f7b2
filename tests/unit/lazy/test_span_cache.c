/*
 * test_span_cache.c: the worker's cache of layers' spans on disk
 * (worker/lazy/span_cache.h): kept and found, checked against the index
 * on every read (a span altered on disk is a miss, and dropped), only
 * matching bytes put, the bound in bytes kept by evicting the least
 * recently used, and what a restarted worker left found again (its
 * temporary files removed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "span_cache.h"
#include "tb/encoding.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct {
	char dir[64];
	uint8_t *blob;
	size_t n, at;
	tb_layer_index_t *ix;
} F;

static int64_t blob_read(void *arg, void *buf, size_t len, tb_error_t *err)
{
	(void)arg, (void)err;
	size_t n = F.n - F.at < len ? F.n - F.at : len;
	memcpy(buf, F.blob + F.at, n);
	F.at += n;
	return (int64_t)n;
}

/* A gzip layer of one file of incompressible bytes: a span each 64 KiB. */
static int setup(void **state)
{
	size_t cap = 4u << 20, size = 1u << 20;
	struct archive *a = archive_write_new();
	struct archive_entry *e = archive_entry_new();
	uint8_t *data = malloc(size);
	unsigned char sum[32];
	char digest[72] = "sha256:";
	tb_error_t err;

	(void)state;
	F.blob = malloc(cap);
	uint64_t x = 88172645463325252ull;
	for (size_t i = 0; i < size; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		data[i] = (uint8_t)x;
	}
	archive_write_set_format_pax_restricted(a);
	archive_write_add_filter_gzip(a);
	archive_write_open_memory(a, F.blob, cap, &F.n);
	archive_entry_set_pathname(e, "data");
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_entry_set_size(e, (la_int64_t)size);
	archive_write_header(a, e);
	archive_write_data(a, data, size);
	archive_write_close(a);
	archive_write_free(a);
	archive_entry_free(e);
	free(data);
	EVP_Digest(F.blob, F.n, sum, NULL, EVP_sha256(), NULL);
	tb_hex(digest + 7, sum, sizeof(sum));
	if (tb_layer_index_build(digest, TB_LAYER_INDEX_SPAN_MIN, blob_read, NULL, &F.ix, &err))
		return -1;
	snprintf(F.dir, sizeof(F.dir), "/tmp/tb-spans-XXXXXX");
	return mkdtemp(F.dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;
	tb_layer_index_free(F.ix);
	free(F.blob);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", F.dir);
	return system(cmd) == 0 ? 0 : -1;
}

static const uint8_t *span(size_t i, size_t *len)
{
	uint64_t from, to;
	tb_layer_index_span(F.ix, i, &from, &to);
	*len = (size_t)(to - from);
	return F.blob + from;
}

static tb_span_cache_t *opened(const char *sub, uint64_t max)
{
	tb_span_cache_t *c;
	tb_error_t err;
	char dir[128];
	snprintf(dir, sizeof(dir), "%s/%s", F.dir, sub);
	assert_int_equal(tb_span_cache_open(&c, dir, max, &err), 0);
	return c;
}

static void test_span_cache__a_span_kept_is_found_and_checked(void **state)
{
	tb_span_cache_t *c = opened("a", 64u << 20);
	uint8_t buf[256 << 10];
	size_t len;
	const uint8_t *s = span(3, &len);

	(void)state;
	assert_true(F.ix->npoints >= 10);
	assert_int_equal(tb_span_cache_get(c, F.ix, 3, buf), 0);
	tb_span_cache_put(c, F.ix, 3, s);
	assert_true(tb_span_cache_has(c, F.ix, 3));
	assert_int_equal(tb_span_cache_bytes(c), len);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(tb_span_cache_get(c, F.ix, 3, buf), 1);
	assert_memory_equal(buf, s, len);
	/* bytes that are not the span's are not kept */
	size_t len4;
	uint8_t *bad = malloc(len4 = (span(4, &len4), len4));
	memcpy(bad, span(4, &len4), len4);
	bad[len4 / 2] ^= 1;
	tb_span_cache_put(c, F.ix, 4, bad);
	assert_false(tb_span_cache_has(c, F.ix, 4));
	free(bad);
	tb_span_cache_close(c);
}

static void test_span_cache__a_span_altered_on_disk_is_a_miss_and_dropped(void **state)
{
	tb_span_cache_t *c = opened("b", 64u << 20);
	uint8_t buf[256 << 10];
	char path[256];
	size_t len;

	(void)state;
	tb_span_cache_put(c, F.ix, 2, span(2, &len));
	snprintf(path, sizeof(path), "%s/b/%s.2", F.dir, F.ix->layer + 7);
	int fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "x", 1, 10), 1);
	close(fd);
	assert_int_equal(tb_span_cache_get(c, F.ix, 2, buf), 0);
	assert_false(tb_span_cache_has(c, F.ix, 2));
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(tb_span_cache_bytes(c), 0);
	tb_span_cache_close(c);
}

static void test_span_cache__the_bound_evicts_the_least_recently_used(void **state)
{
	size_t len, total = 0;
	uint8_t buf[256 << 10];

	(void)state;
	for (size_t i = 0; i < 3; i++)
		total += (span(i, &len), len);
	tb_span_cache_t *c = opened("c", total + 100); /* three spans, and a bit */
	for (size_t i = 0; i < 3; i++)
		tb_span_cache_put(c, F.ix, i, span(i, &len));
	assert_int_equal(tb_span_cache_get(c, F.ix, 0, buf), 1); /* 1 is the oldest now */
	tb_span_cache_put(c, F.ix, 5, span(5, &len));
	assert_true(tb_span_cache_bytes(c) <= total + 100);
	assert_false(tb_span_cache_has(c, F.ix, 1));
	assert_true(tb_span_cache_has(c, F.ix, 0));
	assert_true(tb_span_cache_has(c, F.ix, 5));
	tb_span_cache_close(c);
}

static void test_span_cache__a_restarted_worker_finds_its_spans(void **state)
{
	uint8_t buf[256 << 10];
	char path[256];
	size_t len;

	(void)state;
	tb_span_cache_t *c = opened("d", 64u << 20);
	tb_span_cache_put(c, F.ix, 7, span(7, &len));
	tb_span_cache_close(c);
	snprintf(path, sizeof(path), "%s/d/.tmp.1.2", F.dir); /* a put cut short */
	int fd = open(path, O_WRONLY | O_CREAT, 0600);
	close(fd);
	c = opened("d", 64u << 20);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(tb_span_cache_bytes(c), len);
	assert_int_equal(tb_span_cache_get(c, F.ix, 7, buf), 1);
	assert_memory_equal(buf, span(7, &len), len);
	struct stat st;
	snprintf(path, sizeof(path), "%s/d", F.dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	tb_span_cache_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_span_cache__a_span_kept_is_found_and_checked),
		cmocka_unit_test(test_span_cache__a_span_altered_on_disk_is_a_miss_and_dropped),
		cmocka_unit_test(test_span_cache__the_bound_evicts_the_least_recently_used),
		cmocka_unit_test(test_span_cache__a_restarted_worker_finds_its_spans),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
