/*
 * test_watermark.c: the commit watermark under out-of-order finishes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "watermark.h"

static tb_watermark_t *fresh(void)
{
	tb_watermark_t *w;
	tb_error_t err;
	assert_int_equal(tb_watermark_new(&w, &err), 0);
	return w;
}

static void test_watermark__commits_lowest_unfinished(void **state)
{
	tb_watermark_t *w = fresh();
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_watermark_commit(w), -1); /* nothing seen */
	for (int64_t o = 10; o < 15; o++)
		assert_int_equal(tb_watermark_start(w, o, &err), 0);
	assert_int_equal(tb_watermark_commit(w), 10); /* nothing finished: 10 */
	assert_int_equal(tb_watermark_commit(w), -1); /* not moved */
	assert_int_equal(tb_watermark_finish(w, 12, &err), 0);
	assert_int_equal(tb_watermark_finish(w, 11, &err), 0);
	assert_int_equal(tb_watermark_commit(w), -1); /* 10 still running */
	assert_int_equal(tb_watermark_finish(w, 10, &err), 0);
	assert_int_equal(tb_watermark_commit(w), 13);
	assert_int_equal(tb_watermark_in_flight(w), 2);
	assert_int_equal(tb_watermark_finish(w, 14, &err), 0);
	assert_int_equal(tb_watermark_finish(w, 13, &err), 0);
	assert_int_equal(tb_watermark_commit(w), 15); /* all done: one past */
	assert_int_equal(tb_watermark_in_flight(w), 0);
	/* a commit that may have been lost is sent again, once */
	tb_watermark_resend(w);
	assert_int_equal(tb_watermark_commit(w), 15);
	assert_int_equal(tb_watermark_commit(w), -1);
	tb_watermark_free(w);
}

static void test_watermark__gaps_in_offsets_commit_at_the_first_unfinished(void **state)
{
	tb_watermark_t *w = fresh();
	tb_error_t err;

	(void)state;
	/* Compaction and transaction markers leave holes between offsets. */
	assert_int_equal(tb_watermark_start(w, 3, &err), 0);
	assert_int_equal(tb_watermark_start(w, 7, &err), 0);
	assert_int_equal(tb_watermark_start(w, 20, &err), 0);
	assert_int_equal(tb_watermark_finish(w, 3, &err), 0);
	assert_int_equal(tb_watermark_commit(w), 7);
	assert_int_equal(tb_watermark_finish(w, 20, &err), 0);
	assert_int_equal(tb_watermark_commit(w), -1);
	assert_int_equal(tb_watermark_finish(w, 7, &err), 0);
	assert_int_equal(tb_watermark_commit(w), 21);
	tb_watermark_free(w);
}

static void test_watermark__refuses_replays_and_unknown_finishes(void **state)
{
	tb_watermark_t *w = fresh();
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_watermark_start(w, 5, &err), 0);
	assert_int_equal(tb_watermark_start(w, 5, &err), TB_EINVAL);
	assert_int_equal(tb_watermark_start(w, 4, &err), TB_EINVAL);
	assert_int_equal(tb_watermark_finish(w, 6, &err), TB_ENOTFOUND);
	assert_int_equal(tb_watermark_finish(w, 5, &err), 0);
	assert_int_equal(tb_watermark_finish(w, 5, &err), TB_ENOTFOUND); /* twice */
	tb_watermark_free(w);
}

static void test_watermark__many_in_flight_random_order(void **state)
{
	enum { N = 5000 };
	int64_t order[N];
	tb_watermark_t *w = fresh();
	tb_error_t err;
	unsigned seed = 7;

	(void)state;
	for (int i = 0; i < N; i++) {
		assert_int_equal(tb_watermark_start(w, i * 2, &err), 0);
		order[i] = i * 2;
	}
	for (int i = N - 1; i > 0; i--) { /* shuffle */
		int j = rand_r(&seed) % (i + 1);
		int64_t t = order[i];
		order[i] = order[j], order[j] = t;
	}
	int64_t last = -1;
	for (int i = 0; i < N; i++) {
		assert_int_equal(tb_watermark_finish(w, order[i], &err), 0);
		int64_t m = tb_watermark_commit(w);
		if (m >= 0) {
			assert_true(m > last);
			last = m;
		}
	}
	assert_int_equal(last, (N - 1) * 2 + 1);
	tb_watermark_free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_watermark__commits_lowest_unfinished),
		cmocka_unit_test(test_watermark__gaps_in_offsets_commit_at_the_first_unfinished),
		cmocka_unit_test(test_watermark__refuses_replays_and_unknown_finishes),
		cmocka_unit_test(test_watermark__many_in_flight_random_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
