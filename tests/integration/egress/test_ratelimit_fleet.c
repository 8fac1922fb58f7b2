/*
 * test_ratelimit_fleet.c: the fleet's rate limits per credential on the real
 * Redis (TASKBOX_TEST_REDIS; the cases skip without it): two workers
 * (each its own ledger connection and limiter, as two processes would
 * have) draw from one bucket: their turns are one interval apart across
 * both, a pause one of them was told holds the other, and together they
 * hold the rate over ten seconds. And a Redis of the test's own, killed
 * under two workers: each goes on alone at its share of the limit.
 *
 * Nothing here asserts how fast the machine is: a turn is placed by
 * when it was asked and answered plus the wait it was given (a loaded
 * machine widens that, it never misplaces it), and a try in which the
 * ledger was late, past the rate connection's 250 ms (the limiters then
 * pace alone, as documented, and the try says nothing about the fleet's
 * bucket), is made again; after TRIES such tries the case skips, saying
 * why.
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

/* The tries a case makes before it gives up measuring on this machine. */
#define TRIES 4

/* Two workers' ledgers and limiters on @p url. */
typedef struct fleet {
	tb_ledger_t *l[2];
	tb_ratelimit_t *rl[2];
} fleet_t;

/* What a case holds, released by teardown() whether it passed or an
 * assertion ended it: its fleet, the Redis it started, its log. */
static fleet_t fleet;
static pid_t own_redis;
static FILE *logged;

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
		f->rl[i] = NULL;
		f->l[i] = NULL;
	}
}

static int teardown(void **state)
{
	(void)state;
	fleet_close(&fleet);
	if (own_redis > 0) {
		kill(own_redis, SIGKILL);
		waitpid(own_redis, NULL, 0);
		own_redis = 0;
	}
	if (logged) {
		tb_log_set_fd(2);
		fclose(logged);
		logged = NULL;
	}
	return 0;
}

/* The log kept from here on: a limiter says, with why, each time it
 * starts pacing alone (ratelimit.c). */
static void log_keep(void)
{
	assert_non_null(logged = tmpfile());
	tb_log_set_fd(fileno(logged));
}

/*
 * Whether the ledger left a limiter pacing alone since log_keep(): 0 not;
 * 1 by being late only, past the rate connection's 250 ms (a loaded
 * machine: what the limiter then does is the fallback, not the fleet's
 * bucket, so the try says nothing about the bucket). Any other failure
 * fails the case. The lines go on to stdout, as comments.
 */
static int ledger_was_late(void)
{
	char line[1024], other[1024] = "";
	int late = 0;

	tb_log_set_fd(2);
	rewind(logged);
	while (fgets(line, sizeof(line), logged)) {
		printf("# %s", line);
		if (!strstr(line, "does not answer"))
			continue;
		/* hiredis's words for a reply (EAGAIN) or a connection
		 * (ETIMEDOUT) past its timeout */
		if (strstr(line, "Resource temporarily unavailable") || strstr(line, "timed out"))
			late = 1;
		else
			snprintf(other, sizeof(other), "%s", line);
	}
	fclose(logged);
	logged = NULL;
	if (other[0])
		fail_msg("the ledger failed, not by being late: %s", other);
	return late;
}

/* Ends a case that found the ledger late in each of its tries. */
static void too_loaded(const char *what)
{
	printf("# SKIP: %s: the ledger was late (past its 250 ms) in each of %d tries: this "
	       "machine is too loaded to show it\n",
	       what, TRIES);
	skip();
}

static tb_rate_conf_t per_second(double n)
{
	tb_rate_conf_t c = { .requests_per_second = n };
	TB_SET_HAS(&c, TB_RATE_REQUESTS);
	return c;
}

/* A bucket name of this run's own (each try its own). */
static void bucket(char *out, size_t len, const char *what)
{
	static unsigned n;
	snprintf(out, len, "%s%d%ldn%u", what, getpid(), (long)time(NULL), ++n);
}

/* A turn, and when it falls as well as the test can tell without timing
 * anything: the bucket gave it wait_ms (rounded up) after it was asked,
 * some time between @c asked and @c answered; so, however late this
 * process runs, the turn is in [lo, hi] (the clock in whole ms: one more
 * each side). */
typedef struct seen {
	tb_ledger_turn_t t;
	uint64_t asked, answered, lo, hi;
} seen_t;

static seen_t take(tb_ratelimit_t *rl, const char *b, const tb_rate_conf_t *c, uint64_t max_wait_ms)
{
	seen_t s;
	s.asked = tb_mono_ms();
	tb_ratelimit_take(rl, b, c, max_wait_ms, &s.t);
	s.answered = tb_mono_ms();
	s.lo = s.asked + s.t.wait_ms - 1;
	s.hi = s.answered + s.t.wait_ms + 1;
	return s;
}

/* Turns @p s, each taken, one after the other @p interval_ms apart: at
 * least that apart, and no further than the ask of each came late (a
 * bucket saves up no burst, and keeps no turn idle either). */
static void in_a_row(const seen_t *s, int n, uint64_t interval_ms)
{
	for (int i = 0; i < n; i++) {
		assert_true(s[i].t.taken);
		if (i == 0)
			continue;
		uint64_t latest = s[i - 1].hi + interval_ms;
		if (s[i].answered + 1 > latest)
			latest = s[i].answered + 1;
		if (s[i].hi < s[i - 1].lo + interval_ms || s[i].lo > latest)
			fail_msg("turn %d: %llu ms away after %llu ms, turn %d %llu ms away: not "
				 "%llu ms apart",
				 i, (unsigned long long)s[i].t.wait_ms,
				 (unsigned long long)(s[i].asked - s[i - 1].asked), i - 1,
				 (unsigned long long)s[i - 1].t.wait_ms,
				 (unsigned long long)interval_ms);
	}
}

/* Until @p s (an ask made at @p from or later) may go: not taken, and
 * @p span_ms from @p from as far as the test can tell. */
static void held_for(const seen_t *s, uint64_t from, uint64_t span_ms)
{
	assert_false(s->t.taken);
	if (s->t.wait_ms > span_ms || s->t.wait_ms + (s->answered + 1 - from) < span_ms)
		fail_msg("held %llu ms, %llu ms after: not %llu ms in all",
			 (unsigned long long)s->t.wait_ms, (unsigned long long)(s->answered - from),
			 (unsigned long long)span_ms);
}

/* What one try of the case below saw. */
typedef struct shared_try {
	seen_t row[4];     /* turns in a row across both workers */
	seen_t other;      /* another credential's first */
	seen_t near, far;  /* a slow credential's: its first, one beyond the wait */
	uint64_t paused;   /* a pause sent ... */
	seen_t paused_own; /* ... held its own worker ... */
	seen_t paused_by;  /* ... and the other */
	uint64_t spent;    /* tokens spent ... */
	seen_t tok_first, tok_own, tok_by;
} shared_try_t;

static void shares_once(shared_try_t *r, fleet_t *f)
{
	tb_rate_conf_t c = per_second(10), slow = per_second(0.01);
	tb_rate_conf_t tok = { .tokens_per_minute = 600 };
	char b[64];

	TB_SET_HAS(&tok, TB_RATE_TOKENS);
	bucket(b, sizeof(b), "shared");
	for (int i = 0; i < 4; i++)
		r->row[i] = take(f->rl[i % 2], b, &c, 5000);
	bucket(b, sizeof(b), "other");
	r->other = take(f->rl[0], b, &c, 5000);
	/* a pause told one worker; its own next ask reads the spend's reply
	 * first (one connection, in order), so Redis has it before the
	 * other worker asks */
	r->paused = tb_mono_ms();
	tb_ratelimit_spend(f->rl[0], b, &c, 0, 60000);
	r->paused_own = take(f->rl[0], b, &c, 120000);
	r->paused_by = take(f->rl[1], b, &c, 120000);
	/* one turn in 100 s: the second is further than a wait allows */
	bucket(b, sizeof(b), "slow");
	r->near = take(f->rl[0], b, &slow, 1000);
	r->far = take(f->rl[1], b, &slow, 1000);
	/* tokens: 600 a minute, 1200 spent by one: a minute before either
	 * goes */
	bucket(b, sizeof(b), "tokens");
	r->tok_first = take(f->rl[0], b, &tok, 120000);
	r->spent = tb_mono_ms();
	tb_ratelimit_spend(f->rl[0], b, &tok, 1200, 0);
	r->tok_own = take(f->rl[0], b, &tok, 120000);
	r->tok_by = take(f->rl[1], b, &tok, 120000);
}

/*
 * Both workers draw from one bucket per credential: their turns are one
 * interval apart across both, a pause one of them was told holds the
 * other, and so do tokens one of them spent. Told by when each turn can
 * fall, not by how fast the test ran; a try in which the ledger was late
 * (the limiters paced alone) is made again.
 */
static void test_ratelimit__the_fleet_shares_one_bucket_per_credential(void **state)
{
	const char *url = getenv("TASKBOX_TEST_REDIS");
	shared_try_t r;
	int tries = 0, late = 1;

	(void)state;
	if (!url)
		skip();
	while (late && tries++ < TRIES) {
		fleet_open(&fleet, url);
		log_keep();
		shares_once(&r, &fleet);
		fleet_close(&fleet);
		late = ledger_was_late();
	}
	if (late)
		too_loaded("the fleet's buckets");
	in_a_row(r.row, 4, 100);
	assert_int_equal(r.row[3].t.sharing, 2); /* both drew from it */
	/* another credential is another bucket */
	assert_true(r.other.t.taken && r.other.t.wait_ms == 0);
	held_for(&r.paused_own, r.paused, 60000);
	held_for(&r.paused_by, r.paused, 60000);
	/* a turn further than the wait allowed is not taken */
	assert_true(r.near.t.taken && r.near.t.wait_ms == 0);
	assert_false(r.far.t.taken);
	assert_true(r.far.t.wait_ms > 1000);
	assert_true(r.tok_first.t.taken);
	held_for(&r.tok_own, r.spent, 60000);
	held_for(&r.tok_by, r.spent, 60000);
}

/* What the threads below share: when each turn they went on fell (as
 * seen_t tells it), and the longest any of them was told to wait. */
static struct {
	pthread_mutex_t lock;
	uint64_t lo[4096], hi[4096];
	size_t n;
	int by[2]; /* turns per worker */
	uint64_t longest;
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
		seen_t s = take(run.f->rl[w], run.bucket, &run.conf, 5000);
		pthread_mutex_lock(&run.lock);
		if (s.t.wait_ms > run.longest)
			run.longest = s.t.wait_ms;
		if (s.t.taken && run.n < 4096) {
			run.lo[run.n] = s.lo;
			run.hi[run.n++] = s.hi;
		}
		run.by[w] += s.t.taken;
		pthread_mutex_unlock(&run.lock);
		if (s.t.wait_ms)
			usleep((useconds_t)s.t.wait_ms * 1000);
	}
	return NULL;
}

/* The most turns that surely fell within one 10 s: those whose whole
 * [lo, hi] lies in [lo_i, lo_i + 10000], for each i. */
static size_t busiest_10s(void)
{
	size_t most = 0;
	for (size_t i = 0; i < run.n; i++) {
		size_t in = 0;
		for (size_t j = 0; j < run.n; j++)
			in += run.lo[j] >= run.lo[i] && run.hi[j] <= run.lo[i] + 10000;
		if (in > most)
			most = in;
	}
	return most;
}

/* Four clients on two workers for ten seconds at a limit of 20 a second. */
static void hold_once(const char *url)
{
	pthread_t th[4];
	char b[64];

	fleet_open(&fleet, url);
	bucket(b, sizeof(b), "held");
	run.f = &fleet;
	run.bucket = b;
	run.conf = per_second(20);
	run.n = 0;
	run.by[0] = run.by[1] = 0;
	run.longest = 0;
	run.until = tb_mono_ms() + 10500;
	log_keep();
	for (intptr_t i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, client, (void *)i), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	fleet_close(&fleet);
}

/*
 * Two workers, two clients each, for ten seconds against a limit of 20
 * a second: together at most 20 a second in any 10 s (200 turns 50 ms
 * apart, and one at the window's end), both served, and no client kept
 * waiting longer than the other three clients' turns ahead of it (each
 * has at most one: 4 x 50 ms), so the bucket wastes no turn. Counted by
 * when each turn can fall, not when the client woke up for it; a try in
 * which the ledger was late (the workers paced alone) is made again.
 */
static void test_ratelimit__two_workers_hold_the_rate_together(void **state)
{
	const char *url = getenv("TASKBOX_TEST_REDIS");
	int tries = 0, late = 1;

	(void)state;
	if (!url)
		skip();
	while (late && tries++ < TRIES) {
		hold_once(url);
		late = ledger_was_late();
	}
	if (late)
		too_loaded("the fleet's rate");
	size_t most = busiest_10s();
	printf("# %zu turns, %zu of them surely in the busiest 10 s (limit 200), %d and %d by "
	       "each worker, the longest wait %llu ms\n",
	       run.n, most, run.by[0], run.by[1], (unsigned long long)run.longest);
	assert_true(most <= 201);
	assert_true(run.by[0] > 0 && run.by[1] > 0);
	assert_true(run.longest <= 201); /* and a ms for the bucket's rounding */
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

/*
 * A Redis of the test's own, killed under two workers that both drew from
 * a bucket: each goes on alone at its share of the limit (half: turns
 * 200 ms apart, not 100). The Redis is waited for as long as it takes,
 * and both workers' asks are made again until the ledger answered them
 * (a loaded machine may leave an ask past its 250 ms).
 */
static void test_ratelimit__a_dead_ledger_leaves_each_worker_its_share(void **state)
{
	tb_rate_conf_t c = per_second(10);
	tb_ledger_turn_t t;
	seen_t s[5];
	char url[64], port[16], b[64];
	int up = 0, both = 0;

	(void)state;
	if (access("/usr/bin/redis-server", X_OK) != 0)
		skip();
	unsigned p = free_port();
	snprintf(port, sizeof(port), "%u", p);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%u", p);
	own_redis = fork();
	assert_true(own_redis >= 0);
	if (own_redis == 0) {
		execl("/usr/bin/redis-server", "redis-server", "--bind", "127.0.0.1", "--port",
		      port, "--save", "", "--appendonly", "no", (char *)NULL);
		_exit(127);
	}
	fleet_open(&fleet, url);
	bucket(b, sizeof(b), "dead");
	/* up: the first worker draws from the bucket (a minute at most) */
	for (int i = 0; i < 600 && !up; i++) {
		tb_ratelimit_take(fleet.rl[0], b, &c, 60000, &t);
		up = !tb_ratelimit_local(fleet.rl[0]);
		if (!up)
			usleep(100000);
	}
	assert_true(up);
	/* both draw from it, each ask answered by the ledger; a worker whose
	 * ask failed does not ask again for a second */
	for (int i = 0; i < TRIES && !both; i++) {
		usleep(1100000);
		tb_ratelimit_take(fleet.rl[1], b, &c, 60000, &t);
		both = !tb_ratelimit_local(fleet.rl[1]);
		tb_ratelimit_take(fleet.rl[0], b, &c, 60000, &t);
		both = both && !tb_ratelimit_local(fleet.rl[0]);
	}
	if (!both)
		too_loaded("both workers drawing from one bucket");
	assert_int_equal(t.sharing, 2);
	kill(own_redis, SIGKILL);
	assert_int_equal(waitpid(own_redis, NULL, 0), own_redis);
	own_redis = 0;
	/* alone, each at half the rate: turns 200 ms apart, not 100 */
	for (int i = 0; i < 5; i++)
		s[i] = take(fleet.rl[0], b, &c, 60000);
	assert_true(tb_ratelimit_local(fleet.rl[0]));
	assert_int_equal(s[0].t.sharing, 2);
	in_a_row(s, 5, 200);
	fleet_close(&fleet);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(
		    test_ratelimit__the_fleet_shares_one_bucket_per_credential, teardown),
		cmocka_unit_test_teardown(test_ratelimit__two_workers_hold_the_rate_together,
					  teardown),
		cmocka_unit_test_teardown(
		    test_ratelimit__a_dead_ledger_leaves_each_worker_its_share, teardown),
	};
	snprintf(prefix, sizeof(prefix), "tb-rate-test-%d", getpid());
	tb_log_set_level(TB_LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
