/*
 * test_ratelimit.c: the pacing of one rate bucket (ratelimit.h), as the
 * ledger's script keeps it and a worker keeps it alone: requests one per
 * interval in a row, a turn no further than the wait allowed, tokens
 * paid back at their rate, a provider's pause; and a worker without a
 * ledger paces at the whole limit, its clock the real one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ratelimit.h"
#include "tb/log.h"
#include "tb/sys/ledger.h"

#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static void test_ratelimit__requests_take_turns_one_interval_apart(void **state)
{
	tb_rate_state_t s = { 0 };
	tb_ledger_turn_t t;

	(void)state;
	/* 10 a second: the first now, each next 100 ms after the last */
	for (int i = 0; i < 5; i++) {
		tb_rate_state_take(&s, 100.0, 0, 1000, 5000, &t);
		assert_true(t.taken);
		assert_int_equal(t.wait_ms, (uint64_t)(i * 100));
	}
	/* the turns are spent as time passes: at 5450 the next is 5500 */
	tb_rate_state_take(&s, 100.0, 0, 1000, 5450, &t);
	assert_true(t.taken);
	assert_int_equal(t.wait_ms, 50);
	/* after a quiet spell, no burst is saved up: one turn now, the next
	 * an interval later */
	tb_rate_state_take(&s, 100.0, 0, 1000, 9000, &t);
	assert_int_equal(t.wait_ms, 0);
	tb_rate_state_take(&s, 100.0, 0, 1000, 9000, &t);
	assert_int_equal(t.wait_ms, 100);
}

static void test_ratelimit__a_turn_too_far_away_is_not_taken(void **state)
{
	tb_rate_state_t s = { 0 };
	tb_ledger_turn_t t;

	(void)state;
	/* one a second, at most 1500 ms of wait: turns now, +1000; +2000 no */
	tb_rate_state_take(&s, 1000.0, 0, 1500, 100, &t);
	assert_true(t.taken && t.wait_ms == 0);
	tb_rate_state_take(&s, 1000.0, 0, 1500, 100, &t);
	assert_true(t.taken && t.wait_ms == 1000);
	tb_rate_state_take(&s, 1000.0, 0, 1500, 100, &t);
	assert_false(t.taken);
	assert_int_equal(t.wait_ms, 2000);
	/* and nothing was taken by the refusal: at 1100, the turn is +1000 */
	tb_rate_state_take(&s, 1000.0, 0, 1500, 1100, &t);
	assert_true(t.taken && t.wait_ms == 1000);
}

static void test_ratelimit__tokens_spent_are_paid_back_at_their_rate(void **state)
{
	tb_rate_state_t s = { 0 };
	tb_ledger_turn_t t;

	(void)state;
	/* 6000 a minute (100 a second): a minute's worth may go at once */
	tb_rate_state_spend(&s, 3000, 6000, 0, 100000);
	tb_rate_state_take(&s, 0, 6000, 0, 100000, &t);
	assert_true(t.taken);
	tb_rate_state_spend(&s, 3000, 6000, 0, 100000);
	tb_rate_state_take(&s, 0, 6000, 0, 100000, &t);
	assert_true(t.taken); /* 6000 spent: exactly the minute's */
	/* 1000 more: 10 s of debt before anyone goes */
	tb_rate_state_spend(&s, 1000, 6000, 0, 100000);
	tb_rate_state_take(&s, 0, 6000, 60000, 100000, &t);
	assert_false(t.taken);
	assert_int_equal(t.wait_ms, 10000);
	tb_rate_state_take(&s, 0, 6000, 60000, 110000, &t);
	assert_true(t.taken);
	/* spending nothing, or with no token limit, changes nothing */
	tb_rate_state_spend(&s, 0, 6000, 0, 110000);
	tb_rate_state_spend(&s, 99999, 0, 0, 110000);
	tb_rate_state_take(&s, 0, 6000, 0, 110000, &t);
	assert_true(t.taken);
}

static void test_ratelimit__a_pause_stops_every_turn_until_it_ends(void **state)
{
	tb_rate_state_t s = { 0 };
	tb_ledger_turn_t t;

	(void)state;
	tb_rate_state_spend(&s, 0, 0, 3000, 1000);
	tb_rate_state_take(&s, 100.0, 0, 60000, 1500, &t);
	assert_false(t.taken); /* not queued behind it: asked again after */
	assert_int_equal(t.wait_ms, 2500);
	/* a shorter pause asked later does not shorten it */
	tb_rate_state_spend(&s, 0, 0, 100, 2000);
	tb_rate_state_take(&s, 100.0, 0, 60000, 2000, &t);
	assert_int_equal(t.wait_ms, 2000);
	tb_rate_state_take(&s, 100.0, 0, 60000, 4000, &t);
	assert_true(t.taken && t.wait_ms == 0);
}

/* With no ledger, a worker paces alone at the whole limit, on the real
 * clock: 5 a second hands out turns 200 ms apart. */
static void test_ratelimit__alone_a_worker_paces_at_the_whole_limit(void **state)
{
	tb_ratelimit_t *rl;
	tb_rate_conf_t c = { .requests_per_second = 5 };
	tb_ledger_turn_t t;
	tb_error_t err;

	(void)state;
	TB_SET_HAS(&c, TB_RATE_REQUESTS);
	assert_int_equal(tb_ratelimit_new(&rl, NULL, &err), 0);
	assert_true(tb_ratelimit_local(rl));
	tb_ratelimit_take(rl, "abc", &c, 10000, &t);
	assert_true(t.taken);
	assert_true(t.wait_ms <= 1);
	tb_ratelimit_take(rl, "abc", &c, 10000, &t);
	assert_true(t.taken);
	assert_true(t.wait_ms >= 190 && t.wait_ms <= 200);
	/* another credential has its own bucket */
	tb_ratelimit_take(rl, "def", &c, 10000, &t);
	assert_true(t.taken && t.wait_ms <= 1);
	/* a pause its provider asked for holds the bucket */
	tb_ratelimit_spend(rl, "abc", &c, 0, 5000);
	tb_ratelimit_take(rl, "abc", &c, 10000, &t);
	assert_false(t.taken);
	assert_true(t.wait_ms > 4000 && t.wait_ms <= 5000);
	tb_ratelimit_free(rl);
}

/* A ledger that does not answer a turn (as a Redis away), while a spend,
 * sent without waiting, goes; answering again when told. */
static int answers;

static int away_take(tb_ledger_t *l, const tb_ledger_rate_t *r, tb_ledger_turn_t *out,
		     tb_error_t *err)
{
	(void)l, (void)r;
	memset(out, 0, sizeof(*out));
	if (!answers)
		return tb_error_set(err, TB_EIO, "ledger: Connection refused");
	out->taken = 1, out->sharing = 1;
	return 0;
}

static int away_spend(tb_ledger_t *l, const tb_ledger_rate_t *r, uint64_t tokens, uint64_t pause_ms,
		      tb_error_t *err)
{
	(void)l, (void)r, (void)tokens, (void)pause_ms, (void)err;
	return 0; /* written to the socket: no reply is read */
}

static void away_close(tb_ledger_t *l)
{
	(void)l;
}

static const struct tb_ledger_ops away_ops = { .rate_take = away_take,
					       .rate_spend = away_spend,
					       .close = away_close };

/* How many times the log says @p what. */
static int said(int fd, const char *what)
{
	char buf[8192];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	int count = 0;
	buf[n > 0 ? n : 0] = '\0';
	for (const char *p = buf; (p = strstr(p, what)); p++)
		count++;
	return count;
}

/* While the ledger is away, the log says so once, and once when it
 * answers again: a spend that goes out (nobody waits for its reply) is
 * no sign that it answers. */
static void test_ratelimit__the_ledger_away_is_said_once_each_way(void **state)
{
	tb_ledger_t away = { &away_ops };
	tb_rate_conf_t c = { .requests_per_second = 100, .tokens_per_minute = 1000 };
	tb_ratelimit_t *rl;
	tb_ledger_turn_t t;
	tb_error_t err;
	int fd = memfd_create("log", 0);

	(void)state;
	TB_SET_HAS(&c, TB_RATE_REQUESTS);
	TB_SET_HAS(&c, TB_RATE_TOKENS);
	assert_true(fd >= 0);
	tb_log_set_fd(fd);
	answers = 0;
	assert_int_equal(tb_ratelimit_new(&rl, &away, &err), 0);
	for (int i = 0; i < 3; i++) { /* asked again a second after each failure */
		tb_ratelimit_take(rl, "abc", &c, 10000, &t);
		assert_true(t.taken); /* paced alone meanwhile */
		struct timespec ts = { 1, 100000000 };
		nanosleep(&ts, NULL);
		tb_ratelimit_spend(rl, "abc", &c, 10, 0);
	}
	assert_int_equal(said(fd, "does not answer"), 1);
	assert_int_equal(said(fd, "answers again"), 0);
	answers = 1;
	tb_ratelimit_take(rl, "abc", &c, 10000, &t);
	tb_ratelimit_take(rl, "abc", &c, 10000, &t);
	assert_int_equal(said(fd, "answers again"), 1);
	tb_ratelimit_free(rl);
	tb_log_set_fd(2);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ratelimit__requests_take_turns_one_interval_apart),
		cmocka_unit_test(test_ratelimit__a_turn_too_far_away_is_not_taken),
		cmocka_unit_test(test_ratelimit__tokens_spent_are_paid_back_at_their_rate),
		cmocka_unit_test(test_ratelimit__a_pause_stops_every_turn_until_it_ends),
		cmocka_unit_test(test_ratelimit__alone_a_worker_paces_at_the_whole_limit),
		cmocka_unit_test(test_ratelimit__the_ledger_away_is_said_once_each_way),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
