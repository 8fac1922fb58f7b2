/*
 * test_store_put_all.c: objects put side by side on a directory store:
 * all stored with their content, more than a wave's worth included, and
 * a refused one reported by its key while the others still land.
 */
#include "tb/store_put_all.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[64];
static tb_store_t *store;

static void test_put_all__every_object_lands_with_its_content(void **state)
{
	enum { N = TB_STORE_PUT_ALL_WAVE * 2 + 3 };
	tb_store_put_item_t items[N];
	char keys[N][32], bodies[N][32];
	tb_error_t err;

	(void)state;
	int fd = memfd_create("record", MFD_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "from a file", 11), 11);
	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "all/%d", i);
		snprintf(bodies[i], sizeof(bodies[i]), "body %d", i);
		items[i] = (tb_store_put_item_t){ keys[i], i == 0 ? fd : -1, bodies[i],
						  strlen(bodies[i]) };
	}
	if (tb_store_put_all(store, items, N, &err) != 0)
		fail_msg("put_all: %s", err.msg);
	for (int i = 0; i < N; i++) {
		char *got;
		size_t len;
		assert_int_equal(tb_store_get_bytes(store, keys[i], 100, &got, &len, &err), 0);
		const char *want = i == 0 ? "from a file" : bodies[i];
		assert_int_equal(len, strlen(want));
		assert_memory_equal(got, want, len);
		free(got);
	}
	close(fd);
}

static void test_put_all__a_refused_object_is_named_and_the_rest_land(void **state)
{
	tb_store_put_item_t items[3] = {
		{ "some/a", -1, "a", 1 },
		{ "some/../escape", -1, "b", 1 },
		{ "some/c", -1, "c", 1 },
	};
	tb_error_t err;
	char *got;
	size_t len;

	(void)state;
	assert_int_equal(tb_store_put_all(store, items, 3, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "some/../escape"));
	assert_int_equal(tb_store_get_bytes(store, "some/a", 10, &got, &len, &err), 0);
	free(got);
	assert_int_equal(tb_store_get_bytes(store, "some/c", 10, &got, &len, &err), 0);
	free(got);
	/* An empty batch is nothing to do. */
	assert_int_equal(tb_store_put_all(store, items, 0, &err), 0);
}

static int setup(void **state)
{
	tb_error_t err;
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/tb-put-all-XXXXXX");
	if (!mkdtemp(dir) || tb_store_dir_open(&store, dir, &err) != 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;
	tb_store_close(store);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_put_all__every_object_lands_with_its_content),
		cmocka_unit_test(test_put_all__a_refused_object_is_named_and_the_rest_land),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
