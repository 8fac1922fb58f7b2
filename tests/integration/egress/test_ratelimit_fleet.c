/*
 * test_ratelimit_fleet.c: the fleet's rate limits per credential on the real
 * Redis (TASKBOX_TEST_REDIS; the cases skip without it): two workers
 * (each its own ledger connection and limiter, as two processes would
 * have) draw from one bucket: their turns are one interval apart across
 * both, a pause one of them was told holds the other, and together they
 * hold the rate over ten seconds. And a Redis of the test's own, killed
 * under two workers: each goes on alone at its share of the limit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ratelimit.h"
#include "tb/clock.h"
#include "tb/log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char prefix[64];

/* A spend is sent, not waited for: another worker's connection may ask
 * before Redis has read it. This long is plenty on loopback. */
#define SENT_MS 50

/* Two workers' ledgers and limiters on @p url. */
typedef struct fleet {
	tb_ledger_t *l[2];
	tb_ratelimit_t *rl[2];
} fleet_t;

static void fleet_open(fleet_t *f, const char *url)
{
	tb_error_t err;
	for (int i = 0; i < 2; i++) {
		char worker[32];
		snprintf(worker, sizeof(worker), "rate-w%d", i);
		if (tb_ledger_open(&f->l[i], url, prefix, worker, &err) < 0 ||
		    tb_ratelimit_new(&f->rl[i], f->l[i], &err) < 0)
			fail_msg("%s: %s", url, err.msg);
	}
}

static void fleet_close(fleet_t *f)
{
	for (int i = 0; i < 2; i++) {
		tb_ratelimit_free(f->rl[i]);
		tb_ledger_close(f->l[i]);
	}
}

static tb_rate_conf_t per_second(double n)
{
	tb_rate_conf_t c = { .requests_per_second = n };
	TB_SET_HAS(&c, TB_RATE_REQUESTS);
	return c;
}

/* A bucket name of this run's own. */
static void bucket(char *out, size_t len, const char *what)
{
	snprintf(out, len, "%s%d%ld", what, getpid(), (long)time(NULL));
}

static void test_ratelimit__the_fleet_shares_one_bucket_per_credential(void **state)
{
	const char *url = getenv("TASKBOX_TEST_REDIS");
	tb_rate_conf_t c = per_second(10);
	tb_ledger_turn_t t[4];
	char b[64], other[64];
	fleet_t f;

	(void)state;
	if (!url)
		skip();
	fleet_open(&f, url);
	bucket(b, sizeof(b), "shared");
	bucket(other, sizeof(other), "other");
	/* turns in a row across both workers: now, +100, +200, +300 */
	for (int i = 0; i < 4; i++)
		tb_ratelimit_take(f.rl[i % 2], b, &c, 5000, &t[i]);
	assert_false(tb_ratelimit_local(f.rl[0]) || tb_ratelimit_local(f.rl[1]));
	for (int i = 0; i < 4; i++) {
		assert_true(t[i].taken);
		/* Redis's clock moves on between the asks: a few ms at most */
		if (t[i].wait_ms > (uint64_t)i * 100 || t[i].wait_ms + 50 < (uint64_t)i * 100)
			fail_msg("turn %d: %llu ms away, expected about %d", i,
				 (unsigned long long)t[i].wait_ms, i * 100);
	}
	assert_int_equal(t[3].sharing, 2); /* both drew from it */
	/* another credential is another bucket */
	tb_ratelimit_take(f.rl[0], other, &c, 5000, &t[0]);
	assert_true(t[0].taken && t[0].wait_ms == 0);
	/* a turn further than the wait allowed is not taken */
	tb_ratelimit_take(f.rl[1], b, &c, 100, &t[0]);
	assert_false(t[0].taken);
	assert_true(t[0].wait_ms > 100);
	/* a provider's pause told one worker holds the other */
	tb_ratelimit_spend(f.rl[0], other, &c, 0, 2000);
	usleep(SENT_MS * 1000);
	tb_ratelimit_take(f.rl[1], other, &c, 60000, &t[0]);
	assert_false(t[0].taken);
	assert_true(t[0].wait_ms > 1500 && t[0].wait_ms <= 2000);
	/* tokens too: 600 a minute, 700 spent by one: 10 s before the other
	 * goes */
	tb_rate_conf_t tok = { .tokens_per_minute = 600 };
	TB_SET_HAS(&tok, TB_RATE_TOKENS);
	bucket(other, sizeof(other), "tokens");
	tb_ratelimit_take(f.rl[0], other, &tok, 60000, &t[0]);
	assert_true(t[0].taken);
	tb_ratelimit_spend(f.rl[0], other, &tok, 700, 0);
	usleep(SENT_MS * 1000);
	tb_ratelimit_take(f.rl[1], other, &tok, 60000, &t[1]);
	assert_false(t[1].taken);
	assert_true(t[1].wait_ms > 9000 && t[1].wait_ms <= 10000);
	fleet_close(&f);
}

/* What the threads below share: the time of every turn they went on. */
static struct {
	pthread_mutex_t lock;
	uint64_t at[4096];
	size_t n;
	int by[2]; /* turns per worker */
	fleet_t *f;
	const char *bucket;
	tb_rate_conf_t conf;
	uint64_t until;
} run = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* A client of worker (arg & 1): asks for turns as fast as they come,
 * until run.until, at most 2000 times. */
static void *client(void *arg)
{
	int w = (int)(intptr_t)arg & 1;
	for (int i = 0; i < 2000 && tb_mono_ms() < run.until; i++) {
		tb_ledger_turn_t t;
		tb_ratelimit_take(run.f->rl[w], run.bucket, &run.conf, 5000, &t);
		if (t.wait_ms)
			usleep((useconds_t)t.wait_ms * 1000);
		if (!t.taken)
			continue;
		pthread_mutex_lock(&run.lock);
		if (run.n < 4096)
			run.at[run.n++] = tb_mono_ms();
		run.by[w]++;
		pthread_mutex_unlock(&run.lock);
	}
	return NULL;
}

/* Two workers, two clients each, for ten seconds against a limit of 20
 * a second: together at most 20 a second (within one turn, the clock's
 * rounding), at least 95 % of it, both served. */
static void test_ratelimit__two_workers_hold_the_rate_together(void **state)
{
	const char *url = getenv("TASKBOX_TEST_REDIS");
	pthread_t th[4];
	char b[64];
	fleet_t f;

	(void)state;
	if (!url)
		skip();
	fleet_open(&f, url);
	bucket(b, sizeof(b), "held");
	run.f = &f;
	run.bucket = b;
	run.conf = per_second(20);
	run.n = 0;
	uint64_t t0 = tb_mono_ms();
	run.until = t0 + 10500;
	for (intptr_t i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, client, (void *)i), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	/* the most turns in any 10 s window */
	size_t most = 0;
	for (size_t i = 0, j = 0; i < run.n; i++) {
		while (run.at[i] - run.at[j] >= 10000)
			j++;
		if (i - j + 1 > most)
			most = i - j + 1;
	}
	printf("# %zu turns in the busiest 10 s (limit 200), %d and %d by each worker\n", most,
	       run.by[0], run.by[1]);
	assert_true(most <= 202);
	assert_true(most >= 190);
	assert_true(run.by[0] > 50 && run.by[1] > 50);
	fleet_close(&f);
}

/* A port nobody listens on, for a Redis of the test's own. */
static unsigned free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static void test_ratelimit__a_dead_ledger_leaves_each_worker_its_share(void **state)
{
	tb_rate_conf_t c = per_second(10);
	tb_ledger_turn_t t;
	char url[64], port[16], b[64];
	fleet_t f;

	(void)state;
	if (access("/usr/bin/redis-server", X_OK) != 0)
		skip();
	unsigned p = free_port();
	snprintf(port, sizeof(port), "%u", p);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%u", p);
	pid_t redis = fork();
	assert_true(redis >= 0);
	if (redis == 0) {
		execl("/usr/bin/redis-server", "redis-server", "--bind", "127.0.0.1", "--port",
		      port, "--save", "", "--appendonly", "no", (char *)NULL);
		_exit(127);
	}
	fleet_open(&f, url);
	bucket(b, sizeof(b), "dead");
	/* up within 5 s: both workers draw from the bucket */
	int up = 0;
	for (int i = 0; i < 50 && !up; i++) {
		tb_ratelimit_take(f.rl[0], b, &c, 60000, &t);
		up = !tb_ratelimit_local(f.rl[0]);
		if (!up)
			usleep(100000);
	}
	assert_true(up);
	usleep(1100000); /* the first worker's failures are not asked again for 1 s */
	tb_ratelimit_take(f.rl[1], b, &c, 60000, &t);
	tb_ratelimit_take(f.rl[0], b, &c, 60000, &t);
	assert_int_equal(t.sharing, 2);
	kill(redis, SIGKILL);
	assert_int_equal(waitpid(redis, NULL, 0), redis);
	/* alone, each at half the rate: turns 200 ms apart, not 100 */
	tb_ratelimit_take(f.rl[0], b, &c, 60000, &t);
	assert_true(tb_ratelimit_local(f.rl[0]));
	assert_true(t.taken);
	assert_int_equal(t.sharing, 2);
	tb_ratelimit_take(f.rl[0], b, &c, 60000, &t);
	assert_true(t.taken);
	if (t.wait_ms < 190 || t.wait_ms > 200)
		fail_msg("the next turn alone: %llu ms away, expected 200",
			 (unsigned long long)t.wait_ms);
	fleet_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ratelimit__the_fleet_shares_one_bucket_per_credential),
		cmocka_unit_test(test_ratelimit__two_workers_hold_the_rate_together),
		cmocka_unit_test(test_ratelimit__a_dead_ledger_leaves_each_worker_its_share),
	};
	snprintf(prefix, sizeof(prefix), "tb-rate-test-%d", getpid());
	tb_log_set_level(TB_LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
